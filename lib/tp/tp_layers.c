/* Tensor-parallel building blocks: the conjugate operators f and g, the sequence-parallel gather and
 * reduce-scatter, and the column- and row-parallel linears (tp.h). Each is the plain module of nn.h plus
 * the collective that makes it parallel; the collectives run over the tensor group in rank order.
 * Not here: the vocabulary-parallel embedding and cross entropy (tp_vocab.c), the GPT (tp_gpt*.c). */
#include "fsc/tp.h"
#include "core/kernels.h"

static fsc_status copy_if(fsc_device *dev, float *out, const float *inp, size_t n) {
    if (out == inp || n == 0) return FSC_OK;
    return fsc_device_copy(dev, out, inp, n * sizeof(float));
}

fsc_status fsc_tp_f_forward(fsc_device *dev, fsc_comm *tp, float *out, const float *inp, size_t n) {
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(tp);
    FSC_CHECK_BUF(out, n);
    FSC_CHECK_BUF(inp, n);
    (void)tp;
    return copy_if(dev, out, inp, n);
}

fsc_status fsc_tp_f_backward(fsc_device *dev, fsc_comm *tp, float *dinp, const float *dout, size_t n) {
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(tp);
    FSC_CHECK_BUF(dinp, n);
    FSC_CHECK_BUF(dout, n);
    (void)dev;
    return fsc_comm_all_reduce(tp, dout, dinp, n, FSC_F32, FSC_SUM);
}

fsc_status fsc_tp_g_forward(fsc_device *dev, fsc_comm *tp, float *out, const float *inp, size_t n) {
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(tp);
    FSC_CHECK_BUF(out, n);
    FSC_CHECK_BUF(inp, n);
    (void)dev;
    return fsc_comm_all_reduce(tp, inp, out, n, FSC_F32, FSC_SUM);
}

fsc_status fsc_tp_g_backward(fsc_device *dev, fsc_comm *tp, float *dinp, const float *dout, size_t n) {
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(tp);
    FSC_CHECK_BUF(dinp, n);
    FSC_CHECK_BUF(dout, n);
    (void)tp;
    return copy_if(dev, dinp, dout, n);
}

fsc_status fsc_tp_sp_gather(fsc_comm *tp, float *out, const float *inp, size_t n) {
    FSC_CHECK_ARG(tp);
    FSC_CHECK_BUF(out, n);
    FSC_CHECK_BUF(inp, n);
    return fsc_comm_all_gather(tp, inp, out, n, FSC_F32);
}

fsc_status fsc_tp_sp_reduce_scatter(fsc_comm *tp, float *out, const float *inp, size_t n) {
    FSC_CHECK_ARG(tp);
    FSC_CHECK_BUF(out, n);
    FSC_CHECK_BUF(inp, n);
    return fsc_comm_reduce_scatter(tp, inp, out, n, FSC_F32, FSC_SUM);
}

static size_t r64(size_t n) { return (n + 63) / 64 * 64; }

size_t fsc_tp_column_work_floats(size_t N, int OCl, int T, int gather) {
    return gather ? 2 * r64(N * (size_t)OCl * (size_t)T) : 0;
}

fsc_status fsc_tp_column_forward(fsc_device *dev, fsc_comm *tp, float *out, fsc_tp_linear_rec *rec,
                                 const float *inp, const float *w, const float *b, size_t N, int C, int OCl,
                                 int gather, float *work) {
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(tp);
    FSC_CHECK_ARG(out);
    FSC_CHECK_ARG(inp);
    FSC_CHECK_ARG(w);
    int T = fsc_comm_size(tp);
    if (gather && !work) return fsc_error(FSC_ERR_INVALID, "column-parallel forward: gather needs a work buffer");
    if (gather && N > (size_t)INT32_MAX)
        return fsc_error(FSC_ERR_INVALID, "column-parallel forward: %zu rows are too many to gather", N);
    float *local = gather ? work : out; /* (N, OCl) */
    fsc_linear_rec lr;
    FSC_TRY(fsc_linear_forward(dev, local, &lr, inp, w, b, N, C, OCl, 0));
    if (rec) *rec = (fsc_tp_linear_rec){ .lin = lr, .gather = gather };
    if (!gather) return FSC_OK;
    /* all (T, N, OCl) -> out (N, T OCl): block r holds columns [r OCl, (r+1) OCl), the heads_merge shuffle */
    float *all = work + r64(N * (size_t)OCl * (size_t)T);
    FSC_TRY(fsc_comm_all_gather(tp, local, all, N * (size_t)OCl, FSC_F32));
    if (N == 0) return FSC_OK;
    return fsc_k_heads_merge(dev, out, all, 1, (int)N, T, OCl);
}

fsc_status fsc_tp_column_backward(fsc_device *dev, fsc_comm *tp, float *dinp, float *dw, float *db,
                                  const fsc_tp_linear_rec *rec, const float *dout, const float *w, float *work) {
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(tp);
    FSC_CHECK_ARG(dw);
    FSC_CHECK_ARG(rec);
    FSC_CHECK_ARG(dout);
    FSC_CHECK_ARG(w);
    int T = fsc_comm_size(tp), r = fsc_comm_rank(tp), OCl = rec->lin.OC;
    size_t N = rec->lin.N;
    const float *dl = dout; /* (N, OCl) this rank's columns */
    if (rec->gather && N > 0) {
        if (!work) return fsc_error(FSC_ERR_INVALID, "column-parallel backward: gather needs a work buffer");
        /* dout (N, T OCl) -> work (T, N, OCl); take block r */
        FSC_TRY(fsc_k_heads_split(dev, work, dout, 1, (int)N, T, OCl));
        dl = work + (size_t)r * N * (size_t)OCl;
    }
    FSC_TRY(fsc_linear_backward(dev, dinp, dw, db, &rec->lin, dl, w, 0.0f, 1.0f));
    if (!dinp) return FSC_OK;
    return fsc_tp_f_backward(dev, tp, dinp, dinp, N * (size_t)rec->lin.C);
}

fsc_status fsc_tp_row_forward(fsc_device *dev, fsc_comm *tp, float *out, fsc_linear_rec *rec, const float *inp,
                              const float *w, const float *b, size_t N, int Cl, int OC) {
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(tp);
    FSC_CHECK_ARG(out);
    FSC_CHECK_ARG(inp);
    FSC_CHECK_ARG(w);
    FSC_TRY(fsc_linear_forward(dev, out, rec, inp, w, NULL, N, Cl, OC, 0));
    FSC_TRY(fsc_tp_g_forward(dev, tp, out, out, N * (size_t)OC));
    if (b && N > 0) FSC_TRY(fsc_k_bias_add(dev, out, b, N, OC));
    return FSC_OK;
}

fsc_status fsc_tp_row_backward(fsc_device *dev, fsc_comm *tp, float *dinp, float *dw, float *db,
                               const fsc_linear_rec *rec, const float *dout, const float *w) {
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(rec);
    FSC_CHECK_ARG(dout);
    FSC_CHECK_ARG(w);
    (void)tp; /* g's backward is the identity: dout is already replicated */
    return fsc_linear_backward(dev, dinp, dw, db, rec, dout, w, 0.0f, 1.0f);
}
