/* Vocabulary-parallel embedding and cross entropy (tp.h): each rank of the tensor group holds V/T
 * consecutive rows of wte and the matching columns of the logits; nothing of size V is ever gathered.
 *
 * Both are built from the device's embedding and cross-entropy kernels. Tokens of another rank's slice
 * are mapped to an extra zero row (a (Vl + 1, C) copy of the slice), so the kernels never see an id
 * outside their table. Per-row statistics of the cross entropy (N floats) go through the host, where the
 * group's max, sum of exponentials and target logit are combined; a strided column of the logits is read
 * or written with a K = 1 gemm against the constant 1 (an exact copy).
 * Not here: the linears (tp_layers.c), the GPT (tp_gpt*.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "fsc/tp.h"
#include "core/kernels.h"

static size_t r64(size_t n) { return (n + 63) / 64 * 64; }

void fsc_tp_vocab_localize(int32_t *local, const int32_t *tok, size_t n, int v0, int Vl) {
    for (size_t i = 0; i < n; i++) {
        int64_t t = (int64_t)tok[i] - v0;
        local[i] = t >= 0 && t < Vl ? (int32_t)t : Vl;
    }
}

size_t fsc_tp_embedding_work_floats(int B, int T, int C, int Vl, int sp) {
    return r64(((size_t)Vl + 1) * (size_t)C) + r64((size_t)T * C) + (sp ? r64((size_t)B * T * C) : 0);
}

/* table (Vl + 1, C) = [src (Vl, C); 0] */
static fsc_status fill_table(fsc_device *dev, float *table, const float *src, int Vl, int C) {
    size_t n = (size_t)Vl * C;
    FSC_TRY(fsc_device_copy(dev, table, src, n * sizeof(float)));
    return fsc_device_memset(dev, table + n, 0, (size_t)C * sizeof(float));
}

/* out (rows, C), the shard of token rows [first, first + rows) of (B, T, C): out[i] += wpe[(first + i) % T],
 * one add per run of consecutive positions. */
static fsc_status add_positions(fsc_device *dev, float *out, const float *wpe, size_t first, size_t rows, int T,
                                int C) {
    size_t i = 0;
    while (i < rows) {
        size_t pos = (first + i) % (size_t)T;
        size_t len = (size_t)T - pos;
        if (len > rows - i) len = rows - i;
        float *o = out + i * (size_t)C;
        FSC_TRY(fsc_k_add(dev, o, o, wpe + pos * (size_t)C, len * (size_t)C));
        i += len;
    }
    return FSC_OK;
}

fsc_status fsc_tp_embedding_forward(fsc_device *dev, fsc_comm *tp, float *out, fsc_tp_embedding_rec *rec,
                                    const int32_t *tok, const float *wte, const float *wpe, int B, int T, int C,
                                    int Vl, int sp, float *work) {
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(tp);
    FSC_CHECK_ARG(out);
    FSC_CHECK_ARG(tok);
    FSC_CHECK_ARG(wte);
    FSC_CHECK_ARG(wpe);
    FSC_CHECK_ARG(work);
    int size = fsc_comm_size(tp), r = fsc_comm_rank(tp);
    size_t N = (size_t)B * T;
    if (B < 0 || T < 1 || C < 1 || Vl < 1 || (size_t)T * C > INT32_MAX)
        return fsc_error(FSC_ERR_INVALID, "vocab-parallel embedding: bad dimensions B=%d T=%d C=%d Vl=%d", B, T, C,
                         Vl);
    if (sp && N % (size_t)size != 0)
        return fsc_error(FSC_ERR_INVALID, "vocab-parallel embedding: %zu token rows do not split into %d sequence "
                         "shards", N, size);
    if (rec) *rec = (fsc_tp_embedding_rec){ .tok = tok, .B = B, .T = T, .C = C, .Vl = Vl, .sp = sp };
    float *table = work;                                      /* (Vl + 1, C) */
    float *zwpe = table + r64(((size_t)Vl + 1) * C);          /* (T, C) zeros */
    float *partial = sp ? zwpe + r64((size_t)T * C) : out;    /* (B, T, C) */
    size_t Nl = sp ? N / (size_t)size : N;
    FSC_TRY(fill_table(dev, table, wte, Vl, C));
    FSC_TRY(fsc_device_memset(dev, zwpe, 0, (size_t)T * C * sizeof(float)));
    if (N > 0) FSC_TRY(fsc_k_encoder_forward(dev, partial, tok, table, zwpe, B, T, C));
    if (sp) {
        FSC_TRY(fsc_tp_sp_reduce_scatter(tp, out, partial, Nl * (size_t)C));
        return add_positions(dev, out, wpe, (size_t)r * Nl, Nl, T, C);
    }
    FSC_TRY(fsc_tp_g_forward(dev, tp, out, out, N * (size_t)C));
    if (N == 0) return FSC_OK;
    return fsc_k_bias_add(dev, out, wpe, (size_t)B, T * C);
}

fsc_status fsc_tp_embedding_backward(fsc_device *dev, fsc_comm *tp, float *dwte, float *dwpe,
                                     const fsc_tp_embedding_rec *rec, const float *dout, float *work) {
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(tp);
    FSC_CHECK_ARG(dwte);
    FSC_CHECK_ARG(dwpe);
    FSC_CHECK_ARG(rec);
    FSC_CHECK_ARG(dout);
    FSC_CHECK_ARG(work);
    (void)tp;
    int Vl = rec->Vl, C = rec->C;
    if ((size_t)rec->B * rec->T == 0) return FSC_OK;
    float *table = work; /* (Vl + 1, C): dwte and a row that absorbs other slices' tokens */
    FSC_TRY(fill_table(dev, table, dwte, Vl, C));
    FSC_TRY(fsc_k_encoder_backward(dev, table, dwpe, dout, rec->tok, rec->B, rec->T, C));
    return fsc_device_copy(dev, dwte, table, (size_t)Vl * C * sizeof(float));
}

/* ---- cross entropy -------------------------------------------------------------------------------------- */

size_t fsc_tp_xent_work_floats(size_t N) { return 7 * r64(N) + 64; }

/* dst[n * ldd] = src[n * lds] for n < N: C (N x 1) = A (N x 1) @ [1] */
static fsc_status column_copy(fsc_device *dev, float *dst, int ldd, const float *src, int lds, size_t N,
                              const float *one) {
    return fsc_k_gemm(dev, 0, 0, (int)N, 1, 1, 1.0f, src, lds, 0, one, 1, 0, 0.0f, dst, ldd, 0, 1);
}

typedef struct {
    int32_t *tl, *tb;
    float *a0, *z0, *b, *lse_r, *st, *loss, *q;
} xent_host;

static void host_free(xent_host *h) {
    free(h->tl), free(h->tb), free(h->a0), free(h->z0), free(h->b), free(h->lse_r), free(h->st), free(h->loss),
        free(h->q);
}

static fsc_status host_alloc(xent_host *h, size_t N) {
    memset(h, 0, sizeof *h);
    h->tl = malloc(N * sizeof(int32_t)), h->tb = malloc(N * sizeof(int32_t));
    h->a0 = malloc(N * sizeof(float)), h->z0 = malloc(N * sizeof(float)), h->b = malloc(N * sizeof(float));
    h->lse_r = malloc(N * sizeof(float)), h->st = malloc(2 * N * sizeof(float));
    h->loss = malloc(N * sizeof(float)), h->q = malloc(N * sizeof(float));
    if (!h->tl || !h->tb || !h->a0 || !h->z0 || !h->b || !h->lse_r || !h->st || !h->loss || !h->q) {
        host_free(h);
        return fsc_error(FSC_ERR_NOMEM, "vocab-parallel cross entropy: out of host memory for %zu rows", N);
    }
    return FSC_OK;
}

/* The group's statistics from this rank's lse_r and (on the owner) lse_r - z_target; see tp.h. */
static fsc_status combine(fsc_comm *tp, fsc_device *dev, xent_host *h, float *st_dev, size_t N, int Vl) {
    for (size_t n = 0; n < N; n++) h->lse_r[n] = (float)((double)h->a0[n] + (double)h->z0[n]);
    FSC_TRY(fsc_device_upload(dev, st_dev, h->lse_r, N * sizeof(float)));
    FSC_TRY(fsc_comm_all_reduce(tp, st_dev, st_dev, N, FSC_F32, FSC_MAX));
    FSC_TRY(fsc_device_download(dev, h->st, st_dev, N * sizeof(float)));
    float *M = h->q; /* borrowed until q is computed */
    memcpy(M, h->st, N * sizeof(float));
    for (size_t n = 0; n < N; n++) {
        double d = (double)h->lse_r[n] - (double)M[n];
        h->st[n] = (float)exp(d);                                     /* S: sum of exponentials */
        h->st[N + n] = h->tl[n] < Vl ? (float)(d - (double)h->b[n]) : 0.0f; /* U: z_target - M */
    }
    FSC_TRY(fsc_device_upload(dev, st_dev, h->st, 2 * N * sizeof(float)));
    FSC_TRY(fsc_comm_all_reduce(tp, st_dev, st_dev, 2 * N, FSC_F32, FSC_SUM));
    FSC_TRY(fsc_device_download(dev, h->st, st_dev, 2 * N * sizeof(float)));
    for (size_t n = 0; n < N; n++) {
        /* S >= 1 on any device (the largest slice adds exp(0)); 0 only where the data are not there (the counting
         * device reads its large buffers as zeros: a plan's loss is then 0, not log 0's -inf) */
        double logS = h->st[n] != 0.0f ? log((double)h->st[n]) : 0.0; /* a NaN stays NaN */
        h->loss[n] = (float)(logS - (double)h->st[N + n]);
        double lse = (double)M[n] + logS, d = (double)h->lse_r[n] - lse;
        /* the mass of the other slices, log(exp(lse) - exp(lse_r)); -inf when there is none */
        h->q[n] = d >= 0.0 ? -INFINITY : (float)(lse + log1p(-exp(d)));
    }
    return FSC_OK;
}

fsc_status fsc_tp_xent_forward(fsc_device *dev, fsc_comm *tp, float *losses, fsc_tp_xent_rec *rec,
                               float *logits, const int32_t *targets, int32_t *tgt, float *q, size_t N, int Vl,
                               int ld, int v0, float *work) {
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(tp);
    FSC_CHECK_ARG(losses);
    FSC_CHECK_ARG(logits);
    FSC_CHECK_ARG(targets);
    FSC_CHECK_ARG(tgt);
    FSC_CHECK_ARG(q);
    FSC_CHECK_ARG(work);
    if (Vl < 1 || ld < Vl + 1 || N > (size_t)INT32_MAX)
        return fsc_error(FSC_ERR_INVALID, "vocab-parallel cross entropy: need 0 < Vl < ld (one scratch column) "
                         "and N <= %d rows, got Vl=%d ld=%d N=%zu", INT32_MAX, Vl, ld, N);
    if (rec) *rec = (fsc_tp_xent_rec){ .logits = logits, .tgt = tgt, .q = q, .N = N, .Vl = Vl, .ld = ld };
    if (N == 0) return FSC_OK;
    size_t rn = r64(N);
    float *a0 = work, *z0 = work + rn, *b = work + 2 * rn, *st = work + 3 * rn; /* (N) (N) (N) (2N) */
    int32_t *tzero = (int32_t *)(work + 5 * rn), *tb = (int32_t *)(work + 6 * rn);
    float *one = work + 7 * rn;
    xent_host h;
    FSC_TRY(host_alloc(&h, N));
    fsc_tp_vocab_localize(h.tl, targets, N, v0, Vl);
    for (size_t n = 0; n < N; n++) h.tb[n] = h.tl[n] < Vl ? h.tl[n] : 0;
    const float fone = 1.0f;
    fsc_status s = fsc_device_upload(dev, tgt, h.tl, N * sizeof(int32_t));
    if (s == FSC_OK) s = fsc_device_upload(dev, tb, h.tb, N * sizeof(int32_t));
    if (s == FSC_OK) s = fsc_device_memset(dev, tzero, 0, N * sizeof(int32_t));
    if (s == FSC_OK) s = fsc_device_upload(dev, one, &fone, sizeof fone);
    /* a0 = lse_r - z_0, b = lse_r - z_target (meaningful on the owner), z0 = column 0 */
    if (s == FSC_OK) s = fsc_k_xent_forward(dev, a0, logits, tzero, N, Vl, ld);
    if (s == FSC_OK) s = fsc_k_xent_forward(dev, b, logits, tb, N, Vl, ld);
    if (s == FSC_OK) s = column_copy(dev, z0, 1, logits, ld, N, one);
    if (s == FSC_OK) s = fsc_device_download(dev, h.a0, a0, N * sizeof(float));
    if (s == FSC_OK) s = fsc_device_download(dev, h.z0, z0, N * sizeof(float));
    if (s == FSC_OK) s = fsc_device_download(dev, h.b, b, N * sizeof(float));
    if (s == FSC_OK) s = combine(tp, dev, &h, st, N, Vl);
    if (s == FSC_OK) s = fsc_device_upload(dev, losses, h.loss, N * sizeof(float));
    if (s == FSC_OK) s = fsc_device_upload(dev, q, h.q, N * sizeof(float));
    host_free(&h);
    return s;
}

fsc_status fsc_tp_xent_backward(fsc_device *dev, float *dlogits, const fsc_tp_xent_rec *rec, float dscale,
                                float *work) {
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(dlogits);
    FSC_CHECK_ARG(rec);
    FSC_CHECK_ARG(work);
    size_t N = rec->N;
    if (N == 0) return FSC_OK;
    const float fone = 1.0f;
    FSC_TRY(fsc_device_upload(dev, work, &fone, sizeof fone));
    FSC_TRY(column_copy(dev, rec->logits + rec->Vl, rec->ld, rec->q, 1, N, work));
    return fsc_k_xent_backward(dev, dlogits, rec->logits, rec->tgt, N, rec->Vl + 1, rec->ld, dscale);
}
