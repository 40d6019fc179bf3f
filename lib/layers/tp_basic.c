/* Tensor-parallel forms of the linear layer, the embeddings and the LM head (layers.h, options with tp):
 *   linear, column: out (N, OC/size) = in W[:, slice] + b[slice]; backward sums the input gradient (f);
 *   linear, row:    out (N, OC) = sum over the group of in (N, C/size) W[slice, :], then + b (g);
 *   embedding:      tp.h's vocab-parallel embedding (bit for bit the unsplit one), wpe replicated;
 *   LM head:        [norm on this rank's rows, gathered under sp,] logits of this rank's vocabulary slice and
 *                   tp.h's vocab-parallel cross entropy; the input gradient summed over the group.
 * The record keeps what backward needs in device memory (several micro-batches may be in flight); tokens and
 * targets are read back to the host where tp.h's embedding and cross entropy want them.
 * Not here: attention, MLPs, blocks (tp_transformer.c), the unsplit layers (basic.c, transformer.c). */
#include "tp_layers_impl.h"
#include "tp_layers.h"

/* ---- linear ---- */
typedef struct {
    fsc_layer l;
    fsc_linear_opts o;
    tp_group g;
    int C, OC; /* local input and output widths */
} tp_linear;

static fsc_status tl_fwd(const fsc_layer *l, const fsc_layer_call *c, float *out, const void *in) {
    const tp_linear *y = (const tp_linear *)l;
    const size_t N = (size_t)c->B * (size_t)y->o.rows;
    const float *b = y->o.bias ? c->param[1] : NULL;
    if (y->o.tp_mode == FSC_TP_COLUMN)
        return fsc_linear_forward(c->dev, out, NULL, in, c->param[0], b, N, y->C, y->OC, y->o.out_in);
    FSC_TRY(fsc_linear_forward(c->dev, out, NULL, in, c->param[0], NULL, N, y->C, y->OC, y->o.out_in));
    return tp_reduce_out(&y->g, c->dev, out, out, N, y->OC, b);
}

static fsc_status tl_bwd(const fsc_layer *l, const fsc_layer_call *c, float *dinp, const float *dout,
                         const void *in) {
    const tp_linear *y = (const tp_linear *)l;
    const size_t N = (size_t)c->B * (size_t)y->o.rows;
    fsc_linear_rec r = { .inp = in, .N = N, .C = y->C, .OC = y->OC, .w_out_in = y->o.out_in };
    /* row: dout is replicated, so the bias gradient is the full one on every rank */
    FSC_TRY(fsc_linear_backward(c->dev, dinp, c->grad[0], y->o.bias ? c->grad[1] : NULL, &r, dout, c->param[0], 0.0f,
                                1.0f));
    if (y->o.tp_mode == FSC_TP_COLUMN && dinp) return tp_reduce_grad(&y->g, c->dev, dinp, dinp, N, y->C);
    return FSC_OK;
}

static void tl_config(const fsc_layer *l, char *buf, size_t cap) {
    const tp_linear *y = (const tp_linear *)l;
    snprintf(buf, cap, "{\"rows\":%d,\"in\":%d,\"out\":%d,\"bias\":%d,\"out_in\":%d}", y->o.rows, y->o.in, y->o.out,
             y->o.bias, y->o.out_in);
}

/* Split backward (layers.h): the input part is dinp = dout W^T and, column-parallel, its all-reduce over the group
 * (the grads NULL); the weight part dW += in^T dout and the bias's (dinp NULL: no collective). */
static const fsc_layer_ops tl_ops = { .forward = tl_fwd, .backward = tl_bwd, .config = tl_config, .split = 1 };

fsc_status fsc_tp_layer_linear(const fsc_linear_opts *o, fsc_layer **out) {
    *out = NULL;
    tp_group g;
    if (!o->tp) return fsc_error(FSC_ERR_INVALID, "linear layer: tp_mode needs a tensor group (tp)");
    FSC_TRY(tp_group_of(o->tp, 0, "linear", &g));
    if (o->tp_mode != FSC_TP_COLUMN && o->tp_mode != FSC_TP_ROW)
        return fsc_error(FSC_ERR_INVALID, "linear layer: a tensor group needs tp_mode FSC_TP_COLUMN (split the "
                         "output features) or FSC_TP_ROW (split the input features)");
    const int col = o->tp_mode == FSC_TP_COLUMN;
    FSC_TRY(tp_divides("linear", col ? "out" : "in", col ? o->out : o->in, &g));
    FSC_TRY(layer_new(sizeof(tp_linear), "linear", &tl_ops, out));
    tp_linear *y = (tp_linear *)*out;
    y->o = *o, y->g = g;
    y->o.rows = o->rows > 0 ? o->rows : 1;
    y->C = col ? o->in : o->in / g.size;
    y->OC = col ? o->out / g.size : o->out;
    y->l.in_bytes = (size_t)y->o.rows * (size_t)y->C * sizeof(float);
    y->l.out_floats = (size_t)y->o.rows * (size_t)y->OC;
    /* the split dimension of W: the output features (column) or the input features (row), in its layout */
    const int out_dim_split = col ? (o->out_in ? FSC_SPLIT_ROWS : FSC_SPLIT_COLS)
                                  : (o->out_in ? FSC_SPLIT_COLS : FSC_SPLIT_ROWS);
    FSC_TRY(tp_param(out, "weight", o->out_in ? o->out : o->in, o->out_in ? o->in : o->out, out_dim_split, 1, &g,
                     fsc_init_normal(LAYER_STD)));
    if (o->bias)
        FSC_TRY(tp_param(out, "bias", o->out, 0, col ? FSC_SPLIT_COLS : FSC_SPLIT_NONE, 1, &g, fsc_init_const(0.0f)));
    return FSC_OK;
}

/* ---- vocab-parallel embedding: the record keeps the tokens mapped to this rank's slice (N int32) ---- */
typedef struct {
    fsc_layer l;
    fsc_embedding_opts o;
    tp_group g;
    int Vl;
} tp_embed;

static size_t te_N(const tp_embed *y, int B) { return (size_t)B * (size_t)y->o.T; }
static size_t te_rec(const fsc_layer *l, int B) { return te_N((const tp_embed *)l, B) * sizeof(int32_t); }

/* scratch: tp.h's embedding work, then (sp) the gathered output gradient (N, C), then (no positions) a zero
 * wpe and a wpe gradient nobody reads (T, C each) */
static size_t te_work_floats(const tp_embed *y, int B) {
    const size_t N = te_N(y, B), TC = (size_t)y->o.T * (size_t)y->o.C;
    return fsc_tp_embedding_work_floats(B, y->o.T, y->o.C, y->Vl, y->g.sp) + (y->g.sp ? r64f(N * y->o.C) : 0) +
           (y->o.positions ? 0 : 2 * r64f(TC));
}
static size_t te_work(const fsc_layer *l, int B) { return te_work_floats((const tp_embed *)l, B) * sizeof(float); }

/* The zero wpe and the discarded wpe gradient of a token embedding (positions 0). */
static float *te_nopos(const tp_embed *y, const fsc_layer_call *c, int which) {
    const size_t TC = (size_t)y->o.T * (size_t)y->o.C;
    return (float *)c->work + te_work_floats(y, c->B) - (size_t)(2 - which) * r64f(TC);
}

static fsc_status te_fwd(const fsc_layer *l, const fsc_layer_call *c, float *out, const void *in) {
    const tp_embed *y = (const tp_embed *)l;
    const size_t N = te_N(y, c->B), TC = (size_t)y->o.T * (size_t)y->o.C;
    int32_t *host = malloc(N * sizeof(int32_t) + 1);
    if (!host) return fsc_error(FSC_ERR_NOMEM, "embedding layer: out of host memory for %zu tokens", N);
    fsc_status s = fsc_device_download(c->dev, host, in, N * sizeof(int32_t));
    if (s == FSC_OK) {
        fsc_tp_vocab_localize(host, host, N, y->g.rank * y->Vl, y->Vl);
        s = fsc_device_upload(c->dev, c->rec, host, N * sizeof(int32_t));
    }
    free(host);
    FSC_TRY(s);
    const float *wpe = y->o.positions ? c->param[1] : te_nopos(y, c, 0);
    if (!y->o.positions) FSC_TRY(fsc_device_memset(c->dev, (float *)wpe, 0, TC * sizeof(float)));
    return fsc_tp_embedding_forward(c->dev, y->g.tp, out, NULL, c->rec, c->param[0], wpe, c->B, y->o.T, y->o.C, y->Vl,
                                    y->g.sp, c->work);
}

static fsc_status te_bwd(const fsc_layer *l, const fsc_layer_call *c, float *dinp, const float *dout,
                         const void *in) {
    (void)dinp, (void)in; /* tokens have no gradient */
    if (!c->grad[0]) return FSC_OK; /* the split's input part: no input gradient either */
    const tp_embed *y = (const tp_embed *)l;
    const size_t N = te_N(y, c->B), TC = (size_t)y->o.T * (size_t)y->o.C;
    const float *D = dout;
    if (y->g.sp) { /* the whole output's gradient: tp.h's backward wants it replicated */
        float *full = (float *)c->work + fsc_tp_embedding_work_floats(c->B, y->o.T, y->o.C, y->Vl, 1);
        FSC_TRY(fsc_tp_sp_gather(y->g.tp, full, dout, tp_rows(&y->g, N) * (size_t)y->o.C));
        D = full;
    }
    float *dwpe = y->o.positions ? c->grad[1] : te_nopos(y, c, 1);
    if (!y->o.positions) FSC_TRY(fsc_device_memset(c->dev, dwpe, 0, TC * sizeof(float)));
    fsc_tp_embedding_rec r = { .tok = c->rec, .B = c->B, .T = y->o.T, .C = y->o.C, .Vl = y->Vl, .sp = y->g.sp };
    return fsc_tp_embedding_backward(c->dev, y->g.tp, c->grad[0], dwpe, &r, D, c->work);
}

static void te_config(const fsc_layer *l, char *buf, size_t cap) {
    const tp_embed *y = (const tp_embed *)l;
    snprintf(buf, cap, "{\"T\":%d,\"C\":%d,\"V\":%d}", y->o.T, y->o.C, y->o.V);
}

static fsc_status te_check(const fsc_layer *l, const void *host, int B) {
    const tp_embed *y = (const tp_embed *)l;
    const int32_t *t = host;
    for (size_t i = 0, n = te_N(y, B); i < n; i++)
        if (t[i] < 0 || t[i] >= y->o.V)
            return fsc_error(FSC_ERR_INVALID, "tokens[%zu] = %d is outside the vocabulary [0, %d)", i, (int)t[i],
                             y->o.V);
    return FSC_OK;
}

/* Split: everything is the weight part (under sp with its gather of the output gradient, which every rank of the
 * group runs in the same W); untied only (a tied table runs whole: seq_run.c). */
static const fsc_layer_ops te_ops = { .rec_bytes = te_rec, .work_bytes = te_work, .forward = te_fwd,
                                      .backward = te_bwd, .config = te_config, .check_input = te_check, .split = 1 };

fsc_status fsc_tp_layer_embedding(const fsc_embedding_opts *o, fsc_layer **out) {
    *out = NULL;
    const char *kind = o->positions ? "embedding" : "token_embedding";
    tp_group g;
    FSC_TRY(tp_group_of(o->tp, o->sp, kind, &g));
    const int Vp = o->Vp > o->V ? o->Vp : o->V;
    FSC_TRY(tp_divides(kind, Vp > o->V ? "the padded vocabulary Vp" : "the vocabulary V", Vp, &g));
    FSC_TRY(tp_check_sp(kind, o->T, &g));
    FSC_TRY(layer_new(sizeof(tp_embed), kind, &te_ops, out));
    tp_embed *y = (tp_embed *)*out;
    y->o = *o, y->g = g, y->Vl = Vp / g.size; /* this rank's rows of the table, padding rows included */
    y->l.in_bytes = (size_t)o->T * sizeof(int32_t);
    y->l.out_floats = (size_t)o->T * (size_t)o->C / (size_t)(g.sp ? g.size : 1);
    FSC_TRY(tp_param(out, o->positions ? "wte.weight" : "weight", Vp, o->C, FSC_SPLIT_ROWS, 1, &g,
                     tp_table_init(o->V, Vp, o->C)));
    if (o->positions)
        FSC_TRY(tp_param(out, "wpe.weight", o->T, o->C, FSC_SPLIT_NONE, 1, &g, fsc_init_normal(0.01f)));
    for (int k = 0; k < (*out)->n_params; k++) (*out)->params[k].decay = -1; /* embeddings: no weight decay */
    return FSC_OK;
}

/* ---- vocab-parallel LM head. Record: logits (N, Vl + 1), local targets (N int32), q (N), and with a norm its
 * output (Nl, C) and statistics. Scratch: forward the cross entropy's, and under sp the gathered head input xf
 * (N, C); backward dlogits (N, Vl + 1; the split's over the record's logits), the partial input gradient (N, C),
 * its reduced rows (Nl, C), the norm's partial parameter gradients (2 C), 64 floats, and under sp xf gathered
 * again for the weight product (sequence parallelism keeps the rank's rows only, as the blocks do). ---- */
typedef struct {
    fsc_layer l;
    fsc_lm_head_opts o;
    tp_group g;
    int Vl; /* this rank's rows of the weight (Vp / size), the columns of its logits' rows (Vl + 1 with scratch) */
    int Vr; /* of them the real vocabulary's (a padded vocabulary: fewer on the last ranks, never 0); the rest is
             * padding, in no logit, no softmax and no gradient */
} tp_head;

typedef struct { float *logits, *q, *normed, *mean, *rstd; int32_t *tgt; } th_parts;
typedef struct { float *dlogits, *dxf, *dred, *pg, *small, *xf; } th_scratch;

static size_t th_N(const tp_head *y, int B) { return (size_t)B * (size_t)y->o.T; }

static size_t th_rec_layout(const tp_head *y, int B, void *base, th_parts *r) {
    const size_t N = th_N(y, B), Nl = tp_rows(&y->g, N), C = (size_t)y->o.C;
    float *b = base;
    size_t at = 0;
#define TAKE(field, n) (r->field = (void *)(b ? b + at : NULL), at += r64f(n))
    TAKE(logits, N * ((size_t)y->Vl + 1));
    TAKE(tgt, N);
    TAKE(q, N);
    r->normed = r->mean = r->rstd = NULL;
    if (y->o.norm != FSC_HEAD_NORM_NONE) {
        TAKE(normed, Nl * C);
        TAKE(rstd, Nl);
        if (y->o.norm == FSC_HEAD_NORM_LAYERNORM) TAKE(mean, Nl);
    }
#undef TAKE
    return at;
}

static size_t th_work_layout(const tp_head *y, int B, void *base, th_scratch *w) {
    const size_t N = th_N(y, B), Nl = tp_rows(&y->g, N), C = (size_t)y->o.C;
    float *b = base;
    size_t at = 0;
#define TAKE(field, n) (w->field = b ? b + at : NULL, at += r64f(n))
    TAKE(dlogits, N * ((size_t)y->Vl + 1));
    TAKE(dxf, N * C);
    TAKE(dred, Nl * C);
    TAKE(pg, 2 * C);
    TAKE(small, 64);
    const size_t xw = fsc_tp_xent_work_floats(N); /* the forward's cross entropy, over the backward's scratch */
    if (at < xw) at = xw;
    TAKE(xf, y->g.sp ? N * C : 0);
#undef TAKE
    return at;
}

static size_t th_rec(const fsc_layer *l, int B) {
    th_parts r;
    return th_rec_layout((const tp_head *)l, B, NULL, &r) * sizeof(float);
}
static size_t th_work(const fsc_layer *l, int B) {
    th_scratch w;
    return th_work_layout((const tp_head *)l, B, NULL, &w) * sizeof(float);
}

static fsc_status th_fwd(const fsc_layer *l, const fsc_layer_call *c, float *out, const void *in) {
    const tp_head *y = (const tp_head *)l;
    const size_t N = th_N(y, c->B), Nl = tp_rows(&y->g, N);
    const int C = y->o.C, Vl = y->Vl, Vr = y->Vr, ld = Vl + 1;
    const float *const *p = c->param, *x = in, *xf;
    th_parts r;
    th_rec_layout(y, c->B, c->rec, &r);
    th_scratch k;
    th_work_layout(y, c->B, c->work, &k);
    if (y->o.norm == FSC_HEAD_NORM_RMSNORM) {
        FSC_TRY(fsc_rmsnorm_forward(c->dev, r.normed, NULL, r.rstd, in, p[0], Nl, C, y->o.eps));
        x = r.normed;
    } else if (y->o.norm == FSC_HEAD_NORM_LAYERNORM) {
        FSC_TRY(fsc_layernorm_forward(c->dev, r.normed, NULL, r.mean, r.rstd, in, p[0], p[1], Nl, C));
        x = r.normed;
    }
    FSC_TRY(tp_gather_in(&y->g, k.xf, x, Nl, C, &xf));
    /* logits (N, Vr), row stride Vl + 1 = xf (N, C) @ W_slice[:Vr]^T: the slice's real rows only */
    FSC_TRY(fsc_k_gemm(c->dev, 0, 1, (int)N, Vr, C, 1.0f, xf, C, 0, p[l->n_params - 1], C, 0, 0.0f, r.logits, ld, 0,
                       1));
    int32_t *host = malloc(N * sizeof(int32_t) + 1);
    if (!host) return fsc_error(FSC_ERR_NOMEM, "lm head layer: out of host memory for %zu targets", N);
    fsc_status s = fsc_device_download(c->dev, host, c->target, N * sizeof(int32_t));
    if (s == FSC_OK)
        s = fsc_tp_xent_forward(c->dev, y->g.tp, out, NULL, r.logits, host, r.tgt, r.q, N, Vr, ld, y->g.rank * Vl,
                                c->work);
    free(host);
    return s;
}

/* The split backward (layers.h). Input part (c->grad NULL): dlogits, written over the record's logits (which
 * nothing reads after it), the slice's part of the head input's gradient, its all-reduce (or reduce-scatter) over
 * the group, through the norm into dinp; the reduced gradient at the norm's output is kept in the stash
 * (split_bytes; without a norm a stash of 0 bytes marks the split) for the weight part. Weight part (dinp NULL):
 * dW += dlogits^T xf (under sp the norm's output, or the input, gathered again: a collective of the weight part, which
 * every rank of the group runs in the same order), and the norm's parameter gradients from the stash (under sp
 * summed over the group, as in the whole backward). The same kernels on the same values: the whole backward's
 * bits. */
static size_t th_split_bytes(const fsc_layer *l, int B) {
    const tp_head *y = (const tp_head *)l;
    return y->o.norm == FSC_HEAD_NORM_NONE ? 0 : r64f(tp_rows(&y->g, th_N(y, B)) * (size_t)y->o.C) * sizeof(float);
}

static fsc_status th_bwd(const fsc_layer *l, const fsc_layer_call *c, float *dinp, const float *dout,
                         const void *in) {
    (void)dout;
    const tp_head *y = (const tp_head *)l;
    const size_t N = th_N(y, c->B), Nl = tp_rows(&y->g, N);
    const int C = y->o.C, Vl = y->Vl, Vr = y->Vr, ld = Vl + 1, w = l->n_params - 1;
    const int norm = y->o.norm != FSC_HEAD_NORM_NONE;
    const int input_part = !c->grad[w], weight_part = !dinp && c->stash && c->grad[w];
    th_parts r;
    th_rec_layout(y, c->B, c->rec, &r);
    th_scratch k;
    th_work_layout(y, c->B, c->work, &k);
    const float *xf = norm ? r.normed : in;
    float *dlogits = c->stash ? r.logits : k.dlogits; /* the split: over the logits, from its input part on */
    fsc_tp_xent_rec xr = { .logits = r.logits, .tgt = r.tgt, .q = r.q, .N = N, .Vl = Vr, .ld = ld };
    if (!weight_part) FSC_TRY(fsc_tp_xent_backward(c->dev, dlogits, &xr, c->dscale, k.small));
    /* the padding rows' gradient is 0: their accumulated gradient stays (the products below add into rows [0, Vr)) */
    /* dxf (N, C) = dlogits (N, Vr) @ W_slice[:Vr] (Vr, C): this slice's part; dW[:Vr] += dlogits^T @ xf */
    if (dinp || (norm && !weight_part)) /* needed for dinp, or for the norm's gradients without the stash */
        FSC_TRY(fsc_k_gemm(c->dev, 0, 0, (int)N, C, Vr, 1.0f, dlogits, ld, 0, c->param[w], C, 0, 0.0f, k.dxf, C, 0,
                           1));
    if (c->grad[w]) {
        FSC_TRY(tp_gather_in(&y->g, k.xf, xf, Nl, C, &xf)); /* under sp: the rows of every rank, again */
        FSC_TRY(fsc_k_gemm(c->dev, 1, 0, Vr, C, (int)N, 1.0f, dlogits, ld, 0, xf, C, 0, 1.0f, c->grad[w], C, 0, 1));
    }
    if (!norm) /* the input gradient: the slices' parts summed (f's backward) */
        return dinp ? tp_reduce_grad(&y->g, c->dev, dinp, k.dxf, N, C) : FSC_OK;
    float *dred = c->stash && (input_part || weight_part) ? c->stash : k.dred;
    if (!weight_part) FSC_TRY(tp_reduce_grad(&y->g, c->dev, dred, k.dxf, N, C));
    const size_t NC = Nl * (size_t)C, np = y->o.norm == FSC_HEAD_NORM_LAYERNORM ? 2 : 1;
    /* the norm's halves: the input part's without its parameter gradients, the weight part's without dinp; under
     * sp the parameter gradients are this rank's rows' (pg), summed below */
    float *gw = input_part ? NULL : y->g.sp ? k.pg : c->grad[0];
    float *gb = input_part || np == 1 ? NULL : y->g.sp ? k.pg + C : c->grad[1];
    if (!dinp && !gw) return FSC_OK; /* the input part of a model's first layer: nothing left */
    if (dinp) FSC_TRY(fsc_device_memset(c->dev, dinp, 0, NC * sizeof(float)));
    if (y->g.sp && gw) FSC_TRY(fsc_device_memset(c->dev, k.pg, 0, 2 * (size_t)C * sizeof(float)));
    if (y->o.norm == FSC_HEAD_NORM_RMSNORM) {
        fsc_rmsnorm_rec nr = { .inp = in, .rstd = r.rstd, .N = Nl, .C = C };
        FSC_TRY(fsc_rmsnorm_backward(c->dev, dinp, gw, &nr, dred, c->param[0]));
    } else {
        fsc_layernorm_rec nr = { .inp = in, .mean = r.mean, .rstd = r.rstd, .N = Nl, .C = C };
        FSC_TRY(fsc_layernorm_backward(c->dev, dinp, gw, gb, &nr, dred, c->param[0]));
    }
    if (!y->g.sp || input_part) return FSC_OK;
    /* sp: this rank's rows gave a partial norm gradient: sum it over the group */
    FSC_TRY(fsc_comm_all_reduce(y->g.tp, k.pg, k.pg, np * (size_t)C, FSC_F32, FSC_SUM));
    for (size_t j = 0; j < np; j++)
        FSC_TRY(fsc_residual_backward(c->dev, c->grad[j], NULL, k.pg + j * (size_t)C, (size_t)C));
    return FSC_OK;
}

static void th_config(const fsc_layer *l, char *buf, size_t cap) {
    const tp_head *y = (const tp_head *)l;
    if (y->o.norm == FSC_HEAD_NORM_NONE)
        snprintf(buf, cap, "{\"T\":%d,\"C\":%d,\"V\":%d}", y->o.T, y->o.C, y->o.V);
    else
        snprintf(buf, cap, "{\"T\":%d,\"C\":%d,\"V\":%d,\"norm\":\"%s\",\"eps\":%.9g}", y->o.T, y->o.C, y->o.V,
                 y->o.norm == FSC_HEAD_NORM_RMSNORM ? "rmsnorm" : "layernorm", (double)y->o.eps);
}

static fsc_status th_check(const fsc_layer *l, const void *host, int B) {
    const tp_head *y = (const tp_head *)l;
    const int32_t *t = host;
    for (size_t i = 0, n = th_N(y, B); i < n; i++)
        if (t[i] < 0 || t[i] >= y->o.V)
            return fsc_error(FSC_ERR_INVALID, "targets[%zu] = %d is outside the vocabulary [0, %d)", i, (int)t[i],
                             y->o.V);
    return FSC_OK;
}

/* This rank's slice of the logits: the record's (N, Vl + 1) rows, their first Vr columns real. */
static const float *th_logits_part(const fsc_layer *l, const void *rec, int B, fsc_logits_part *p) {
    const tp_head *y = (const tp_head *)l;
    th_parts r;
    th_rec_layout(y, B, (void *)(uintptr_t)rec, &r);
    *p = (fsc_logits_part){ .first = y->g.rank * y->Vl, .cols = y->Vr, .ld = y->Vl + 1, .vocab = y->o.V };
    return r.logits;
}

static const fsc_layer_ops th_ops = { .rec_bytes = th_rec, .work_bytes = th_work, .forward = th_fwd,
                                      .backward = th_bwd, .config = th_config, .check_target = th_check,
                                      .logits_part = th_logits_part, .split = 1, .split_bytes = th_split_bytes };

fsc_status fsc_tp_layer_lm_head(const fsc_lm_head_opts *o, fsc_layer **out) {
    *out = NULL;
    tp_group g;
    FSC_TRY(tp_group_of(o->tp, o->sp, "lm head", &g));
    const int Vp = o->Vp > o->V ? o->Vp : o->V;
    FSC_TRY(tp_divides("lm head", Vp > o->V ? "the padded vocabulary Vp" : "the vocabulary V", Vp, &g));
    FSC_TRY(tp_check_sp("lm head", o->T, &g));
    if (o->V < g.size) /* no padding helps: the slices of Vp rows, Vp >= size, leave the last rank only padding */
        return fsc_error(FSC_ERR_UNSUPPORTED, "lm head layer: a vocabulary of %d rows (V) over a tensor group of %d "
                         "ranks leaves a rank's slice without a real row, whatever the padding (Vp %d): the group can "
                         "have at most %d ranks", o->V, g.size, Vp, o->V);
    if (Vp - o->V >= Vp / g.size) /* every slice must hold a real column: the group's softmax needs each rank's */
        return fsc_error(FSC_ERR_UNSUPPORTED, "lm head layer: a padded vocabulary (V %d, Vp %d) over a tensor group of "
                         "%d ranks leaves the last rank's slice of %d rows without a real one: pad by fewer than %d "
                         "rows", o->V, Vp, g.size, Vp / g.size, Vp / g.size);
    FSC_TRY(layer_new(sizeof(tp_head), "lm_head", &th_ops, out));
    tp_head *y = (tp_head *)*out;
    y->o = *o, y->g = g, y->Vl = Vp / g.size;
    y->Vr = o->V - g.rank * y->Vl < y->Vl ? o->V - g.rank * y->Vl : y->Vl;
    y->o.norm_name = y->o.head_name = NULL; /* the caller's strings are not kept */
    y->o.eps = o->norm == FSC_HEAD_NORM_LAYERNORM ? 1e-5f : o->eps;
    y->l.in_bytes = (size_t)o->T * (size_t)o->C * sizeof(float) / (size_t)(g.sp ? g.size : 1);
    y->l.out_floats = (size_t)o->T;
    y->l.loss_terms = o->T;
    y->l.target_bytes = (size_t)o->T * sizeof(int32_t);
    if (o->norm != FSC_HEAD_NORM_NONE) {
        char name[64];
        const char *np = o->norm_name ? o->norm_name : "norm.";
        snprintf(name, sizeof name, "%sweight", np);
        FSC_TRY(tp_param(out, name, o->C, 0, FSC_SPLIT_NONE, 1, &g, fsc_init_const(1.0f)));
        if (o->norm == FSC_HEAD_NORM_LAYERNORM) {
            snprintf(name, sizeof name, "%sbias", np);
            FSC_TRY(tp_param(out, name, o->C, 0, FSC_SPLIT_NONE, 1, &g, fsc_init_const(0.0f)));
        }
    }
    return tp_param(out, o->head_name ? o->head_name : "weight", Vp, o->C, FSC_SPLIT_ROWS, 1, &g,
                    tp_table_init(o->V, Vp, o->C));
}

fsc_status fsc_layer_embedding_opts(const fsc_embedding_opts *o, fsc_layer **out) {
    if (out) *out = NULL;
    FSC_CHECK_ARG(o);
    FSC_CHECK_ARG(out);
    if (!o || !out || o->T < 1 || o->C < 1 || o->V < 1)
        return fsc_error(FSC_ERR_INVALID, "embedding layer: need options with T, C, V >= 1 and an output");
    const int Vp = o->Vp ? o->Vp : o->V;
    if (Vp < o->V) return fsc_error(FSC_ERR_INVALID, "embedding layer: Vp %d is below V %d", Vp, o->V);
    if (o->tp || o->sp) return fsc_tp_layer_embedding(o, out);
    return layers_embedding(o->T, o->C, o->V, Vp, o->positions, out);
}
