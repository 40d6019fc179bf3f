/* Tensor-parallel forms of attention, the GELU and SwiGLU MLPs and the transformer blocks (layers.h, options with
 * tp), Megatron's layout over a tensor group of `size` ranks, N = B T token rows, Nl = N / size under sequence
 * parallelism (else N):
 *   xf = sp ? all_gather(x) : x            (N, C)   the column-parallel products' input (f: identity)
 *   s  = part(xf)                          (N, C)   attention: this rank's heads (q/k/v column-parallel, o
 *                                                   row-parallel; GPT-2's packed c_attn in 3 parts q|k|v);
 *                                                   MLP: this rank's F / size hidden units (column, then row)
 *   out = reduce(s) + bias [+ x]           (Nl, C)  reduce: all-reduce (g), or reduce-scatter (sp)
 * Backward runs it in reverse: the output gradient is gathered under sp (so the row-parallel bias gets the whole
 * sum on every rank), the partial input gradient of the column-parallel products is all-reduced (f) or
 * reduce-scattered (sp). A block is norm -> attention -> residual -> norm -> MLP -> residual with replicated
 * norms on this rank's rows; under sp their parameter gradients are partial and summed over the group at the end
 * of the block's backward. Records hold everything backward reads (several micro-batches may be in flight). The
 * split backward's input part keeps the inner gradients the weight part's products read over the parts of the
 * record the weight part does not read, through the unsplit layers' own splits (transformer.c's layers_*_split_*).
 * Not here: linear, embeddings, LM head (tp_basic.c), the unsplit layers (transformer.c, block.c). */
#include "tp_layers_impl.h"
#include "tp_layers.h"

#define AT(base, off) ((float *)(base) + (off))

/* ---- the attention part: s (N, C) from xf (N, C), this rank's heads, the output projection's bias left out ---- */
typedef struct {
    int packed;               /* GPT-2's c_attn (C, 3 C) and c_proj (C, C), [in, out]: nn.h's fsc_attention_* */
    int T, C, NHl, KVHl, HS;  /* local heads */
    float rope;
    int wq, wk, wv, wo, bq, bk, bv, bo; /* parameter indices (-1: none); packed: wq, bq c_attn, wo, bo c_proj */
} tp_attn;

static const float *PP(const fsc_layer_call *c, int k) { return k >= 0 ? c->param[k] : NULL; }
static float *GG(const fsc_layer_call *c, int k) { return k >= 0 ? c->grad[k] : NULL; }

static fsc_self_attn_config ta_cfg(const tp_attn *a, int B) {
    return (fsc_self_attn_config){ .B = B, .T = a->T, .C = a->C, .NH = a->NHl, .KVH = a->KVHl, .HS = a->HS,
                                   .rope_theta = a->rope };
}
static size_t ta_saved(const tp_attn *a, int B) {
    const int Cl = a->NHl * a->HS;
    if (a->packed) return fsc_attention_saved_floats(B, a->T, Cl, a->NHl) + r64f((size_t)B * a->T * Cl);
    fsc_self_attn_config cf = ta_cfg(a, B);
    return fsc_self_attn_saved_floats(&cf);
}
static size_t ta_work(const tp_attn *a, int B) {
    const size_t N = (size_t)B * a->T, Cl = (size_t)a->NHl * a->HS;
    if (a->packed) return r64f(N * Cl) + r64f(3 * N * Cl) + fsc_attention_work_floats(B, a->T, (int)Cl, a->NHl);
    fsc_self_attn_config cf = ta_cfg(a, B);
    return fsc_self_attn_work_floats(&cf);
}

static void ta_params(const tp_attn *a, const fsc_layer_call *c, fsc_self_attn_params *p, fsc_self_attn_grads *g) {
    *p = (fsc_self_attn_params){ PP(c, a->wq), PP(c, a->wk), PP(c, a->wv), PP(c, a->wo),
                                 PP(c, a->bq), PP(c, a->bk), PP(c, a->bv), NULL }; /* bo after the reduction */
    *g = (fsc_self_attn_grads){ GG(c, a->wq), GG(c, a->wk), GG(c, a->wv), GG(c, a->wo),
                                GG(c, a->bq), GG(c, a->bk), GG(c, a->bv), GG(c, a->bo) };
}

static fsc_status ta_fwd(const tp_attn *a, const fsc_layer_call *c, float *saved, float *s, const float *xf,
                         float *work) {
    const size_t N = (size_t)c->B * a->T;
    const int Cl = a->NHl * a->HS;
    if (a->packed) {
        fsc_attention_rec ar;
        fsc_attention_rec_bind(&ar, saved, c->B, a->T, Cl, a->NHl);
        float *atty = AT(saved, fsc_attention_saved_floats(c->B, a->T, Cl, a->NHl));
        FSC_TRY(fsc_linear_forward(c->dev, ar.qkv, NULL, xf, PP(c, a->wq), PP(c, a->bq), N, a->C, 3 * Cl, 0));
        FSC_TRY(fsc_attention_forward(c->dev, atty, &ar, ar.qkv, work));
        return fsc_linear_forward(c->dev, s, NULL, atty, PP(c, a->wo), NULL, N, Cl, a->C, 0);
    }
    fsc_self_attn_config cf = ta_cfg(a, c->B);
    fsc_self_attn_rec r;
    fsc_self_attn_rec_bind(&r, saved, &cf);
    fsc_self_attn_params p;
    fsc_self_attn_grads g;
    ta_params(a, c, &p, &g);
    return fsc_self_attn_forward(c->dev, s, &r, xf, &p, work);
}

/* Which backward a call runs: the whole one, or a part of the split (layers.h: the input part sees every
 * parameter gradient NULL, the weight part dinp NULL). */
typedef enum { TP_WHOLE, TP_INPUT, TP_WEIGHT } tp_part;

static tp_part tp_part_of(const fsc_layer_call *c, int first_param) {
    return !c->stash ? TP_WHOLE : c->grad[first_param] ? TP_WEIGHT : TP_INPUT;
}

/* The attention probabilities of the record, B NHl T T floats: dead once the input part has read them. */
static float *ta_att(const tp_attn *a, float *saved, int B) {
    if (a->packed) {
        fsc_attention_rec ar;
        fsc_attention_rec_bind(&ar, saved, B, a->T, a->NHl * a->HS, a->NHl);
        return ar.att;
    }
    fsc_self_attn_config cf = ta_cfg(a, B);
    fsc_self_attn_rec r;
    fsc_self_attn_rec_bind(&r, saved, &cf);
    return r.att;
}
/* Whether a (B T, C) gradient fits over them (B NHl T T >= B T C). */
static int ta_over(const tp_attn *a) { return (size_t)a->NHl * (size_t)a->T >= (size_t)a->C; }

/* dxf (N, C) = (overwrites) this rank's part of the input gradient (NULL: not wanted); parameter gradients +=, the
 * output bias's from the whole output gradient G (N, C). The split's parts (part) as the unsplit attention's
 * (layers_attn_split_*): the input part keeps the inner gradients over the record, dq, dk, dv over q, k, v, or for
 * GPT-2's packed c_attn dqkv (N, 3 Cl) over qkv (a copy: the attention's backward reads qkv while it writes
 * dqkv); the weight part runs the weight products from them, G and the record, nothing else. */
static fsc_status ta_bwd(const tp_attn *a, const fsc_layer_call *c, float *saved, float *dxf, const float *G,
                         const float *xf, float *work, tp_part part) {
    const size_t N = (size_t)c->B * a->T;
    const int Cl = a->NHl * a->HS;
    if (a->packed) {
        fsc_attention_rec ar;
        fsc_attention_rec_bind(&ar, saved, c->B, a->T, Cl, a->NHl);
        float *atty = AT(saved, fsc_attention_saved_floats(c->B, a->T, Cl, a->NHl));
        float *datty = work, *dqkv = part == TP_WEIGHT ? ar.qkv : AT(work, r64f(N * Cl));
        float *aw = AT(work, r64f(N * Cl) + r64f(3 * N * Cl));
        fsc_linear_rec pr = { .inp = atty, .N = N, .C = Cl, .OC = a->C };
        FSC_TRY(fsc_linear_backward(c->dev, part == TP_WEIGHT ? NULL : datty, GG(c, a->wo), GG(c, a->bo), &pr, G,
                                    PP(c, a->wo), 0.0f, 1.0f));
        if (part != TP_WEIGHT) FSC_TRY(fsc_attention_backward(c->dev, dqkv, &ar, datty, aw));
        if (part == TP_INPUT) { /* qkv is read no more */
            FSC_TRY(fsc_device_copy(c->dev, ar.qkv, dqkv, 3 * N * (size_t)Cl * sizeof(float)));
            if (!dxf) return FSC_OK;
        }
        fsc_linear_rec qr = { .inp = xf, .N = N, .C = a->C, .OC = 3 * Cl };
        return fsc_linear_backward(c->dev, dxf, GG(c, a->wq), GG(c, a->bq), &qr, dqkv, PP(c, a->wq), 0.0f, 1.0f);
    }
    fsc_self_attn_config cf = ta_cfg(a, c->B);
    fsc_self_attn_rec r;
    fsc_self_attn_rec_bind(&r, saved, &cf);
    r.inp = xf;
    fsc_self_attn_params p;
    fsc_self_attn_grads g;
    ta_params(a, c, &p, &g);
    if (part == TP_INPUT) return layers_attn_split_input(c->dev, &r, &p, G, dxf, work);
    if (part == TP_WEIGHT) return layers_attn_split_weight(c->dev, &r, &p, &g, G);
    return fsc_self_attn_backward_parts(c->dev, dxf, &g, &r, G, &p, work);
}

/* ---- the MLP part: s (N, C) from xf (N, C) through this rank's Fl hidden units, the output bias left out ---- */
typedef struct {
    int swiglu, C, Fl;
    int w0, w1, w2, b0, b2; /* GELU: c_fc.weight, -, c_proj.weight, c_fc.bias, c_proj.bias; SwiGLU: gate, up, down */
} tp_mlp;

static size_t tm_saved(const tp_mlp *m, size_t N) {
    return m->swiglu ? fsc_swiglu_mlp_saved_floats(N, m->Fl) : 2 * r64f(N * m->Fl);
}
static size_t tm_work(const tp_mlp *m, size_t N) {
    return m->swiglu ? fsc_swiglu_mlp_work_floats(N, m->Fl) : 2 * r64f(N * m->Fl);
}

static fsc_status tm_fwd(const tp_mlp *m, const fsc_layer_call *c, float *saved, float *s, const float *xf, size_t N) {
    if (m->swiglu) {
        fsc_swiglu_mlp_rec r;
        fsc_swiglu_mlp_rec_bind(&r, saved, N, m->C, m->Fl);
        return fsc_swiglu_mlp_forward(c->dev, s, &r, xf, PP(c, m->w0), PP(c, m->w1), PP(c, m->w2));
    }
    const size_t NF = N * (size_t)m->Fl;
    float *fch = saved, *fcg = AT(saved, r64f(NF));
    FSC_TRY(fsc_linear_forward(c->dev, fch, NULL, xf, PP(c, m->w0), PP(c, m->b0), N, m->C, m->Fl, 0));
    FSC_TRY(fsc_gelu_forward(c->dev, fcg, NULL, fch, NF));
    return fsc_linear_forward(c->dev, s, NULL, fcg, PP(c, m->w2), NULL, N, m->Fl, m->C, 0);
}

/* The split's parts (part) as the unsplit MLPs' (layers_swiglu_split_*, layers_gelu_mlp_split_*): the input part
 * keeps SwiGLU's dgate and dup over gate and up, GELU's dh over its input h; the weight part runs the weight
 * products (and the GELU's bias sums) from them and G, nothing else. */
static fsc_status tm_bwd(const tp_mlp *m, const fsc_layer_call *c, float *saved, float *dxf, const float *G,
                         const float *xf, size_t N, float *work, tp_part part) {
    if (m->swiglu) {
        fsc_swiglu_mlp_rec r;
        fsc_swiglu_mlp_rec_bind(&r, saved, N, m->C, m->Fl);
        r.inp = xf;
        const float *w[3] = { PP(c, m->w0), PP(c, m->w1), PP(c, m->w2) };
        float *const g[3] = { GG(c, m->w0), GG(c, m->w1), GG(c, m->w2) };
        if (part == TP_INPUT) return layers_swiglu_split_input(c->dev, &r, w, G, dxf, work);
        if (part == TP_WEIGHT) return layers_swiglu_split_weight(c->dev, &r, w, g, G);
        return fsc_swiglu_mlp_backward_parts(c->dev, dxf, g[0], g[1], g[2], &r, G, w[0], w[1], w[2], work);
    }
    const size_t NF = N * (size_t)m->Fl;
    const layers_gelu_mlp gm = { N, m->C, m->Fl, xf, AT(saved, r64f(NF)), saved }; /* fch, then fcg */
    const float *w[4] = { PP(c, m->w0), PP(c, m->b0), PP(c, m->w2), PP(c, m->b2) };
    float *const g[4] = { GG(c, m->w0), GG(c, m->b0), GG(c, m->w2), GG(c, m->b2) };
    if (part == TP_INPUT) return layers_gelu_mlp_split_input(c->dev, &gm, w, G, dxf, work);
    if (part == TP_WEIGHT) return layers_gelu_mlp_split_weight(c->dev, &gm, w, g, G);
    return layers_gelu_mlp_backward(c->dev, &gm, w, g, G, dxf, work, AT(work, r64f(NF)));
}

/* ---- attention and MLP as layers: record the part's; scratch s0, s1 (N, C), inner, and under sp xf (N, C), the
 * gathered input, gathered again in backward (Megatron's sequence parallelism: a record holds only this rank's
 * rows of the input, the layer's input itself) ---- */
typedef struct {
    fsc_layer l;
    tp_group g;
    int T, rows, C, residual, is_mlp;
    tp_attn a;
    tp_mlp m;
    char cfg[160];
} tp_part_layer;

static size_t tpl_N(const tp_part_layer *y, int B) { return (size_t)B * (size_t)y->rows; }
static size_t tpl_saved(const tp_part_layer *y, int B) {
    return y->is_mlp ? tm_saved(&y->m, tpl_N(y, B)) : ta_saved(&y->a, B);
}
static size_t tpl_rec(const fsc_layer *l, int B) { return tpl_saved((const tp_part_layer *)l, B) * sizeof(float); }
static size_t tpl_inner(const tp_part_layer *y, int B) {
    return y->is_mlp ? tm_work(&y->m, tpl_N(y, B)) : ta_work(&y->a, B);
}
static size_t tpl_work(const fsc_layer *l, int B) {
    const tp_part_layer *y = (const tp_part_layer *)l;
    const size_t NC = r64f(tpl_N(y, B) * y->C);
    return ((y->g.sp ? 3 : 2) * NC + tpl_inner(y, B)) * sizeof(float);
}

static fsc_status tpl_fwd(const fsc_layer *l, const fsc_layer_call *c, float *out, const void *in) {
    const tp_part_layer *y = (const tp_part_layer *)l;
    const size_t N = tpl_N(y, c->B), NC = N * (size_t)y->C, Nl = tp_rows(&y->g, N);
    float *saved = c->rec, *s0 = c->work, *s1 = AT(c->work, r64f(NC)), *inner = AT(c->work, 2 * r64f(NC));
    const float *xf;
    FSC_TRY(tp_gather_in(&y->g, s1, in, Nl, y->C, &xf));
    if (y->is_mlp) FSC_TRY(tm_fwd(&y->m, c, saved, s0, xf, N));
    else FSC_TRY(ta_fwd(&y->a, c, saved, s0, xf, inner));
    FSC_TRY(tp_reduce_out(&y->g, c->dev, out, s0, N, y->C, y->is_mlp ? PP(c, y->m.b2) : PP(c, y->a.bo)));
    return y->residual ? fsc_residual_forward(c->dev, out, in, out, Nl * (size_t)y->C) : FSC_OK;
}

/* Split (layers.h): the input part (c->grad NULL) gathers the output gradient G under sp, computes this rank's part
 * of the input gradient, keeping the inner gradients the weight products read over the record (ta_bwd, tm_bwd), and
 * reduces it over the group into dinp; it reads no xf. The weight part (dinp NULL) runs the weight products only,
 * from those, G and xf: under sp its one collective gathers xf again (every rank of the group runs the same W
 * actions in the same order). G is dout without sp (the weight part gets it again); under sp the gathered one is kept,
 * over attention's probabilities where it fits (ta_over; read no more once the input part has passed them), else
 * (the MLPs, narrow attention) in the stash. */
static float *tpl_kept(const tp_part_layer *y, const fsc_layer_call *c) {
    if (!y->g.sp || !c->stash) return NULL;
    return !y->is_mlp && ta_over(&y->a) ? ta_att(&y->a, c->rec, c->B) : c->stash;
}

static size_t tpl_split_bytes(const fsc_layer *l, int B) {
    const tp_part_layer *y = (const tp_part_layer *)l;
    const int stashed = y->g.sp && (y->is_mlp || !ta_over(&y->a));
    return stashed ? r64f(tpl_N(y, B) * (size_t)y->C) * sizeof(float) : 0;
}

static fsc_status tpl_bwd(const fsc_layer *l, const fsc_layer_call *c, float *dinp, const float *dout,
                          const void *in) {
    const tp_part_layer *y = (const tp_part_layer *)l;
    const size_t N = tpl_N(y, c->B), NC = N * (size_t)y->C, Nl = tp_rows(&y->g, N);
    const tp_part part = tp_part_of(c, y->is_mlp ? y->m.w0 : y->a.wq);
    float *saved = c->rec, *s0 = c->work, *s1 = AT(c->work, r64f(NC)), *inner = AT(c->work, 2 * r64f(NC));
    float *xfbuf = AT(inner, tpl_inner(y, c->B));
    const float *xf = in, *G = dout;
    if (part == TP_INPUT) xf = NULL;
    else FSC_TRY(tp_gather_in(&y->g, xfbuf, in, Nl, y->C, &xf));
    float *kept = tpl_kept(y, c), *full = kept && kept == c->stash ? kept : s0; /* full: where the gather writes */
    if (part == TP_WEIGHT && kept) G = kept;
    else if (part != TP_WEIGHT) FSC_TRY(tp_gather_in(&y->g, full, dout, Nl, y->C, &G));
    float *dxf = dinp ? s1 : NULL;
    if (y->is_mlp) FSC_TRY(tm_bwd(&y->m, c, saved, dxf, G, xf, N, inner, part));
    else FSC_TRY(ta_bwd(&y->a, c, saved, dxf, G, xf, inner, part));
    if (part == TP_INPUT && kept && G != kept) /* the probabilities are read no more */
        FSC_TRY(fsc_device_copy(c->dev, kept, G, NC * sizeof(float)));
    if (!dinp) return FSC_OK;
    FSC_TRY(tp_reduce_grad(&y->g, c->dev, dinp, s1, N, y->C));
    return y->residual ? fsc_residual_backward(c->dev, dinp, NULL, dout, Nl * (size_t)y->C) : FSC_OK;
}

static void tpl_config(const fsc_layer *l, char *buf, size_t cap) {
    snprintf(buf, cap, "%s", ((const tp_part_layer *)l)->cfg);
}

static const fsc_layer_ops tpl_ops = { .rec_bytes = tpl_rec, .work_bytes = tpl_work, .forward = tpl_fwd,
                                       .backward = tpl_bwd, .config = tpl_config, .split = 1,
                                       .split_bytes = tpl_split_bytes };

/* Declare a parameter and return its index in *ix. */
static fsc_status tp_param_ix(fsc_layer **l, int *ix, const char *name, int64_t d0, int64_t d1, int split, int parts,
                              const tp_group *g, fsc_init init) {
    const int k = (*l)->n_params;
    FSC_TRY(tp_param(l, name, d0, d1, split, parts, g, init));
    *ix = k;
    return FSC_OK;
}

fsc_status fsc_tp_layer_attention(const fsc_attention_opts *o, fsc_layer **out) {
    *out = NULL;
    tp_group g;
    FSC_TRY(tp_group_of(o->tp, o->sp, "attention", &g));
    const int KVH = o->kv_heads ? o->kv_heads : o->heads, HS = o->C / o->heads;
    FSC_TRY(tp_divides("attention", "heads", o->heads, &g));
    FSC_TRY(tp_divides("attention", "kv_heads", KVH, &g));
    FSC_TRY(tp_check_sp("attention", o->T, &g));
    FSC_TRY(layer_new(sizeof(tp_part_layer), "attention", &tpl_ops, out));
    tp_part_layer *y = (tp_part_layer *)*out;
    y->g = g, y->T = y->rows = o->T, y->C = o->C, y->residual = o->residual;
    y->a = (tp_attn){ .T = o->T, .C = o->C, .NHl = o->heads / g.size, .KVHl = KVH / g.size, .HS = HS,
                      .rope = o->rope_theta, .bq = -1, .bk = -1, .bv = -1, .bo = -1 };
    y->l.in_bytes = (size_t)o->T * o->C * sizeof(float) / (size_t)(g.sp ? g.size : 1);
    y->l.out_floats = (size_t)o->T * o->C / (size_t)(g.sp ? g.size : 1);
    snprintf(y->cfg, sizeof y->cfg, "{\"T\":%d,\"C\":%d,\"heads\":%d,\"kv_heads\":%d,\"bias\":%d,\"residual\":%d,"
             "\"rope_theta\":%.9g}", o->T, o->C, o->heads, KVH, o->bias, o->residual, (double)o->rope_theta);
    const int64_t C = o->C, Q = (int64_t)o->heads * HS, KV = (int64_t)KVH * HS;
    const fsc_init w = fsc_init_normal(LAYER_STD), z = fsc_init_const(0.0f);
    tp_attn *a = &y->a;
    FSC_TRY(tp_param_ix(out, &a->wq, "q_proj.weight", Q, C, FSC_SPLIT_ROWS, 1, &g, w));
    FSC_TRY(tp_param_ix(out, &a->wk, "k_proj.weight", KV, C, FSC_SPLIT_ROWS, 1, &g, w));
    FSC_TRY(tp_param_ix(out, &a->wv, "v_proj.weight", KV, C, FSC_SPLIT_ROWS, 1, &g, w));
    FSC_TRY(tp_param_ix(out, &a->wo, "o_proj.weight", C, Q, FSC_SPLIT_COLS, 1, &g, w));
    if (!o->bias) return FSC_OK;
    FSC_TRY(tp_param_ix(out, &a->bq, "q_proj.bias", Q, 0, FSC_SPLIT_COLS, 1, &g, z));
    FSC_TRY(tp_param_ix(out, &a->bk, "k_proj.bias", KV, 0, FSC_SPLIT_COLS, 1, &g, z));
    FSC_TRY(tp_param_ix(out, &a->bv, "v_proj.bias", KV, 0, FSC_SPLIT_COLS, 1, &g, z));
    return tp_param_ix(out, &a->bo, "o_proj.bias", C, 0, FSC_SPLIT_NONE, 1, &g, z);
}

/* The MLP's parameters, in the unsplit layers' order, with `pre` before each name ("mlp." in GPT-2's block). */
static fsc_status mlp_params(fsc_layer **out, tp_mlp *m, const char *pre, int64_t C, int64_t F, const tp_group *g) {
    const fsc_init w = fsc_init_normal(LAYER_STD), z = fsc_init_const(0.0f);
    char n[4][48];
    const char *names[2][4] = { { "c_fc.weight", "c_fc.bias", "c_proj.weight", "c_proj.bias" },
                                { "gate_proj.weight", "up_proj.weight", "down_proj.weight", "" } };
    for (int k = 0; k < 4; k++) snprintf(n[k], sizeof n[k], "%s%s", pre, names[m->swiglu][k]);
    m->w1 = m->b0 = m->b2 = -1;
    if (m->swiglu) {
        FSC_TRY(tp_param_ix(out, &m->w0, n[0], F, C, FSC_SPLIT_ROWS, 1, g, w));
        FSC_TRY(tp_param_ix(out, &m->w1, n[1], F, C, FSC_SPLIT_ROWS, 1, g, w));
        return tp_param_ix(out, &m->w2, n[2], C, F, FSC_SPLIT_COLS, 1, g, w);
    }
    FSC_TRY(tp_param_ix(out, &m->w0, n[0], C, F, FSC_SPLIT_COLS, 1, g, w));
    FSC_TRY(tp_param_ix(out, &m->b0, n[1], F, 0, FSC_SPLIT_COLS, 1, g, z));
    FSC_TRY(tp_param_ix(out, &m->w2, n[2], F, C, FSC_SPLIT_ROWS, 1, g, w));
    return tp_param_ix(out, &m->b2, n[3], C, 0, FSC_SPLIT_NONE, 1, g, z);
}

fsc_status fsc_tp_layer_mlp(const fsc_mlp_opts *o, int swiglu, fsc_layer **out) {
    *out = NULL;
    const char *kind = swiglu ? "swiglu_mlp" : "gelu_mlp";
    tp_group g;
    FSC_TRY(tp_group_of(o->tp, o->sp, kind, &g));
    const int rows = o->rows > 0 ? o->rows : 1;
    FSC_TRY(tp_divides(kind, "the hidden width F", o->F, &g));
    FSC_TRY(tp_check_sp(kind, rows, &g));
    FSC_TRY(layer_new(sizeof(tp_part_layer), kind, &tpl_ops, out));
    tp_part_layer *y = (tp_part_layer *)*out;
    y->g = g, y->T = y->rows = rows, y->C = o->C, y->residual = o->residual, y->is_mlp = 1;
    y->m = (tp_mlp){ .swiglu = swiglu, .C = o->C, .Fl = o->F / g.size };
    y->l.in_bytes = (size_t)rows * o->C * sizeof(float) / (size_t)(g.sp ? g.size : 1);
    y->l.out_floats = (size_t)rows * o->C / (size_t)(g.sp ? g.size : 1);
    snprintf(y->cfg, sizeof y->cfg, "{\"rows\":%d,\"C\":%d,\"F\":%d,\"residual\":%d}", rows, o->C, o->F, o->residual);
    return mlp_params(out, &y->m, "", o->C, o->F, &g);
}

/* ---- blocks. Record: ln1 (Nl, C), its statistics (Nl each), the attention part's, h (Nl, C), ln2, its
 * statistics, the MLP part's. Scratch: s0, s1 (N, C), dred, sink (Nl, C), pg (4 C) the norms' partial gradients
 * under sp, inner, and under sp xb (N, C): ln1 or ln2 gathered over the group, the products' input, gathered again
 * in backward rather than kept (Megatron's sequence parallelism: the record holds this rank's rows only). ---- */
typedef struct {
    fsc_layer l;
    fsc_block_opts o;
    tp_group g;
    int rms;
    int n1w, n1b, n2w, n2b;
    tp_attn a;
    tp_mlp m;
} tp_block;

typedef struct { size_t ln1, s1a, s1b, attn, h, ln2, s2a, s2b, mlp, total; } tb_map;

static tb_map tb_layout(const tp_block *y, int B) {
    const size_t N = (size_t)B * y->o.T, Nl = tp_rows(&y->g, N), C = (size_t)y->o.C;
    tb_map m;
    size_t at = 0;
#define PUT(f, n) (m.f = at, at += r64f(n))
    PUT(ln1, Nl * C), PUT(s1a, Nl), PUT(s1b, y->rms ? 0 : Nl);
    PUT(attn, ta_saved(&y->a, B));
    PUT(h, Nl * C);
    PUT(ln2, Nl * C), PUT(s2a, Nl), PUT(s2b, y->rms ? 0 : Nl);
    PUT(mlp, tm_saved(&y->m, N));
#undef PUT
    m.total = at;
    return m;
}

static size_t tb_rec(const fsc_layer *l, int B) { return tb_layout((const tp_block *)l, B).total * sizeof(float); }
static size_t tb_inner(const tp_block *y, int B) {
    const size_t a = ta_work(&y->a, B), m = tm_work(&y->m, (size_t)B * y->o.T);
    return a > m ? a : m;
}
static size_t tb_work(const fsc_layer *l, int B) {
    const tp_block *y = (const tp_block *)l;
    const size_t N = (size_t)B * y->o.T, Nl = tp_rows(&y->g, N), C = (size_t)y->o.C;
    return ((y->g.sp ? 3 : 2) * r64f(N * C) + 2 * r64f(Nl * C) + r64f(4 * C) + tb_inner(y, B)) * sizeof(float);
}

static fsc_status tb_norm_fwd(const tp_block *y, const fsc_layer_call *c, float *out, float *sa, float *sb,
                              const float *in, int w, int b, size_t Nl) {
    if (y->rms) return fsc_rmsnorm_forward(c->dev, out, NULL, sa, in, c->param[w], Nl, y->o.C, y->o.eps);
    return fsc_layernorm_forward(c->dev, out, NULL, sa, sb, in, c->param[w], c->param[b], Nl, y->o.C);
}

/* dinp += through the norm; its parameter gradients into gw, gb (gb NULL for RMSNorm) */
static fsc_status tb_norm_bwd(const tp_block *y, const fsc_layer_call *c, float *dinp, float *gw, float *gb,
                              const float *dout, const float *in, float *sa, float *sb, int w, size_t Nl) {
    if (y->rms) {
        fsc_rmsnorm_rec r = { .inp = in, .rstd = sa, .N = Nl, .C = y->o.C };
        return fsc_rmsnorm_backward(c->dev, dinp, gw, &r, dout, c->param[w]);
    }
    fsc_layernorm_rec r = { .inp = in, .mean = sa, .rstd = sb, .N = Nl, .C = y->o.C };
    return fsc_layernorm_backward(c->dev, dinp, gw, gb, &r, dout, c->param[w]);
}

static fsc_status tb_fwd(const fsc_layer *l, const fsc_layer_call *c, float *out, const void *in) {
    const tp_block *y = (const tp_block *)l;
    const int C = y->o.C;
    const size_t N = (size_t)c->B * y->o.T, Nl = tp_rows(&y->g, N), NlC = Nl * (size_t)C;
    const tb_map m = tb_layout(y, c->B);
    float *R = c->rec, *s0 = c->work, *s1 = AT(c->work, r64f(N * C));
    float *inner = AT(c->work, 2 * r64f(N * C) + 2 * r64f(NlC) + r64f(4 * (size_t)C));
    float *h = AT(R, m.h);
    const float *xf;
    FSC_TRY(tb_norm_fwd(y, c, AT(R, m.ln1), AT(R, m.s1a), AT(R, m.s1b), in, y->n1w, y->n1b, Nl));
    FSC_TRY(tp_gather_in(&y->g, s1, AT(R, m.ln1), Nl, C, &xf));
    FSC_TRY(ta_fwd(&y->a, c, AT(R, m.attn), s0, xf, inner));
    FSC_TRY(tp_reduce_out(&y->g, c->dev, h, s0, N, C, PP(c, y->a.bo)));
    FSC_TRY(fsc_residual_forward(c->dev, h, in, h, NlC));
    FSC_TRY(tb_norm_fwd(y, c, AT(R, m.ln2), AT(R, m.s2a), AT(R, m.s2b), h, y->n2w, y->n2b, Nl));
    FSC_TRY(tp_gather_in(&y->g, s1, AT(R, m.ln2), Nl, C, &xf));
    FSC_TRY(tm_fwd(&y->m, c, AT(R, m.mlp), s0, xf, N));
    FSC_TRY(tp_reduce_out(&y->g, c->dev, out, s0, N, C, PP(c, y->m.b2)));
    return fsc_residual_forward(c->dev, out, h, out, NlC);
}

/* sp: pg [n1w | n1b | n2w | n2b] (C each), the norms' partial parameter gradients of this rank's rows, summed over
 * the group in one all-reduce and added to the gradients. */
static fsc_status tb_sum_norms(const tp_block *y, const fsc_layer_call *c, float *pg) {
    const int C = y->o.C;
    FSC_TRY(fsc_comm_all_reduce(y->g.tp, pg, pg, 4 * (size_t)C, FSC_F32, FSC_SUM));
    FSC_TRY(fsc_residual_backward(c->dev, c->grad[y->n1w], NULL, pg, (size_t)C));
    FSC_TRY(fsc_residual_backward(c->dev, c->grad[y->n2w], NULL, pg + 2 * C, (size_t)C));
    if (y->rms) return FSC_OK;
    FSC_TRY(fsc_residual_backward(c->dev, c->grad[y->n1b], NULL, pg + C, (size_t)C));
    return fsc_residual_backward(c->dev, c->grad[y->n2b], NULL, pg + 3 * C, (size_t)C);
}

/* The block's split backward (layers.h). The input part (c->grad NULL) runs tb_bwd's steps without the weight
 * products, with every collective that makes the input gradient (the gathers of the output gradients under sp,
 * the reductions of the partial input gradients), and keeps what the weight part reads: the attention's and the
 * MLP's inner gradients over their records (ta_bwd, tm_bwd); the MLP's output gradient G2 (N, C), gathered under
 * sp (in the stash), else dout itself (the weight part gets it again); attention's G1 (N, C), over its probabilities
 * where it fits (ta_over), else in the stash; and the reduced gradients at the norms' outputs R2, R1 (Nl, C), in the
 * stash. It reads no norm output: the weight products' inputs. The weight part (dinp NULL) runs only the weight
 * products (and bias sums) from those and the norms' parameter gradients from R2 and R1; under sp its collectives
 * gather ln2 and ln1 again for the products and all-reduce the norms' partial gradients, as the whole backward does
 * (every rank of the group runs the same W actions in the same order). The same kernels on the same values: the
 * bits of tb_bwd, and no inner gradient derived twice. */
typedef struct { float *g2, *r2, *g1, *r1; size_t floats; } tb_stash;

/* The kept gradients of the record rec (NULL with stash NULL: sizes only) and stash; floats: the stash's size. */
static tb_stash tb_stash_of(const tp_block *y, void *rec, void *stash, int B) {
    const size_t N = (size_t)B * y->o.T, Nl = tp_rows(&y->g, N), C = (size_t)y->o.C;
    const tb_map m = tb_layout(y, B);
    const int over = ta_over(&y->a);
    tb_stash st = { 0 };
    float *b = stash;
    size_t at = 0;
#define PUT(f, n) (st.f = b ? b + at : NULL, at += r64f(n))
    if (y->g.sp) PUT(g2, N * C);
    PUT(r2, Nl * C), PUT(r1, Nl * C);
    if (!over) PUT(g1, N * C);
#undef PUT
    if (b && over) st.g1 = ta_att(&y->a, AT(rec, m.attn), B);
    st.floats = at;
    return st;
}

static size_t tb_split_bytes(const fsc_layer *l, int B) {
    return tb_stash_of((const tp_block *)l, NULL, NULL, B).floats * sizeof(float);
}

static fsc_status tb_input(const tp_block *y, const fsc_layer_call *c, float *dinp, const float *dout,
                           const void *in) {
    const int C = y->o.C;
    const size_t N = (size_t)c->B * y->o.T, Nl = tp_rows(&y->g, N), NlC = Nl * (size_t)C, NC = N * (size_t)C;
    const tb_map m = tb_layout(y, c->B);
    const tb_stash st = tb_stash_of(y, c->rec, c->stash, c->B);
    float *R = c->rec, *s0 = c->work, *s1 = AT(c->work, r64f(NC)), *dred = AT(c->work, 2 * r64f(NC));
    float *sink = AT(dred, r64f(NlC)), *pg = AT(sink, r64f(NlC)), *inner = AT(pg, r64f(4 * (size_t)C));
    float *d = dinp ? dinp : sink; /* the gradient w.r.t. out, then h, then in; the norms' input halves only */
    const float *G2, *G1;
    FSC_TRY(fsc_device_copy(c->dev, d, dout, NlC * sizeof(float)));
    FSC_TRY(tp_gather_in(&y->g, st.g2, d, Nl, C, &G2));
    FSC_TRY(tm_bwd(&y->m, c, AT(R, m.mlp), s0, G2, NULL, N, inner, TP_INPUT));
    FSC_TRY(tp_reduce_grad(&y->g, c->dev, st.r2, s0, N, C));
    FSC_TRY(tb_norm_bwd(y, c, d, NULL, NULL, st.r2, AT(R, m.h), AT(R, m.s2a), AT(R, m.s2b), y->n2w, Nl));
    FSC_TRY(tp_gather_in(&y->g, ta_over(&y->a) ? s1 : st.g1, d, Nl, C, &G1));
    FSC_TRY(ta_bwd(&y->a, c, AT(R, m.attn), s0, G1, NULL, inner, TP_INPUT));
    if (G1 != st.g1) /* d, or the gathered one in s1, over the probabilities, which are read no more */
        FSC_TRY(fsc_device_copy(c->dev, st.g1, G1, NC * sizeof(float)));
    FSC_TRY(tp_reduce_grad(&y->g, c->dev, st.r1, s0, N, C));
    return dinp ? tb_norm_bwd(y, c, dinp, NULL, NULL, st.r1, in, AT(R, m.s1a), AT(R, m.s1b), y->n1w, Nl) : FSC_OK;
}

static fsc_status tb_weight(const tp_block *y, const fsc_layer_call *c, const float *dout, const void *in) {
    const int C = y->o.C;
    const size_t N = (size_t)c->B * y->o.T, Nl = tp_rows(&y->g, N), NlC = Nl * (size_t)C, NC = N * (size_t)C;
    const tb_map m = tb_layout(y, c->B);
    const tb_stash st = tb_stash_of(y, c->rec, c->stash, c->B);
    float *R = c->rec, *dred = AT(c->work, 2 * r64f(NC)), *sink = AT(dred, r64f(NlC));
    float *pg = AT(sink, r64f(NlC)), *inner = AT(pg, r64f(4 * (size_t)C)), *xb = AT(inner, tb_inner(y, c->B));
    const int sp = y->g.sp;
    float *g1w = sp ? pg : c->grad[y->n1w], *g1b = y->rms ? NULL : sp ? pg + C : c->grad[y->n1b];
    float *g2w = sp ? pg + 2 * C : c->grad[y->n2w], *g2b = y->rms ? NULL : sp ? pg + 3 * C : c->grad[y->n2b];
    const float *x;
    if (sp) FSC_TRY(fsc_device_memset(c->dev, pg, 0, 4 * (size_t)C * sizeof(float)));
    FSC_TRY(tp_gather_in(&y->g, xb, AT(R, m.ln2), Nl, C, &x));
    FSC_TRY(tm_bwd(&y->m, c, AT(R, m.mlp), NULL, sp ? st.g2 : dout, x, N, inner, TP_WEIGHT));
    FSC_TRY(tb_norm_bwd(y, c, NULL, g2w, g2b, st.r2, AT(R, m.h), AT(R, m.s2a), AT(R, m.s2b), y->n2w, Nl));
    FSC_TRY(tp_gather_in(&y->g, xb, AT(R, m.ln1), Nl, C, &x));
    FSC_TRY(ta_bwd(&y->a, c, AT(R, m.attn), NULL, st.g1, x, inner, TP_WEIGHT));
    FSC_TRY(tb_norm_bwd(y, c, NULL, g1w, g1b, st.r1, in, AT(R, m.s1a), AT(R, m.s1b), y->n1w, Nl));
    return sp ? tb_sum_norms(y, c, pg) : FSC_OK;
}

static fsc_status tb_bwd(const fsc_layer *l, const fsc_layer_call *c, float *dinp, const float *dout,
                         const void *in) {
    const tp_block *y = (const tp_block *)l;
    const int C = y->o.C;
    const size_t N = (size_t)c->B * y->o.T, Nl = tp_rows(&y->g, N), NlC = Nl * (size_t)C, NC = N * (size_t)C;
    const tb_map m = tb_layout(y, c->B);
    float *R = c->rec, *s0 = c->work, *s1 = AT(c->work, r64f(NC)), *dred = AT(c->work, 2 * r64f(NC));
    float *sink = AT(dred, r64f(NlC)), *pg = AT(sink, r64f(NlC)), *inner = AT(pg, r64f(4 * (size_t)C));
    float *xb = AT(inner, tb_inner(y, c->B));
    const int sp = y->g.sp;
    if (c->stash && !c->grad[y->n1w]) return tb_input(y, c, dinp, dout, in);
    if (c->stash && !dinp) return tb_weight(y, c, dout, in);
    /* the norms' parameter gradients: partial under sp (this rank's rows), summed at the end */
    float *g1w = sp ? pg : c->grad[y->n1w], *g1b = y->rms ? NULL : sp ? pg + C : c->grad[y->n1b];
    float *g2w = sp ? pg + 2 * C : c->grad[y->n2w], *g2b = y->rms ? NULL : sp ? pg + 3 * C : c->grad[y->n2b];
    float *d = dinp ? dinp : sink; /* the gradient w.r.t. out, then h, then in */
    const float *G, *x;
    if (sp) FSC_TRY(fsc_device_memset(c->dev, pg, 0, 4 * (size_t)C * sizeof(float)));
    FSC_TRY(fsc_device_copy(c->dev, d, dout, NlC * sizeof(float)));
    FSC_TRY(tp_gather_in(&y->g, s1, d, Nl, C, &G));
    FSC_TRY(tp_gather_in(&y->g, xb, AT(R, m.ln2), Nl, C, &x));
    FSC_TRY(tm_bwd(&y->m, c, AT(R, m.mlp), s0, G, x, N, inner, TP_WHOLE));
    FSC_TRY(tp_reduce_grad(&y->g, c->dev, dred, s0, N, C));
    FSC_TRY(tb_norm_bwd(y, c, d, g2w, g2b, dred, AT(R, m.h), AT(R, m.s2a), AT(R, m.s2b), y->n2w, Nl));
    FSC_TRY(tp_gather_in(&y->g, s1, d, Nl, C, &G));
    FSC_TRY(tp_gather_in(&y->g, xb, AT(R, m.ln1), Nl, C, &x));
    FSC_TRY(ta_bwd(&y->a, c, AT(R, m.attn), s0, G, x, inner, TP_WHOLE));
    FSC_TRY(tp_reduce_grad(&y->g, c->dev, dred, s0, N, C));
    FSC_TRY(tb_norm_bwd(y, c, dinp, g1w, g1b, dred, in, AT(R, m.s1a), AT(R, m.s1b), y->n1w, Nl)); /* dinp: d x */
    return sp ? tb_sum_norms(y, c, pg) : FSC_OK;
}

static void tb_config(const fsc_layer *l, char *buf, size_t cap) {
    const tp_block *y = (const tp_block *)l;
    snprintf(buf, cap, "{\"kind\":\"%s\",\"T\":%d,\"C\":%d,\"heads\":%d,\"kv_heads\":%d,\"F\":%d,"
             "\"rope_theta\":%.9g,\"eps\":%.9g,\"separate_qkv\":%d}",
             y->o.kind == FSC_BLOCK_LLAMA ? "llama" : "gpt2", y->o.T, y->o.C, y->o.heads, y->o.kv_heads, y->o.F,
             (double)y->o.rope_theta, (double)y->o.eps, y->o.separate_qkv);
}

static const fsc_layer_ops tb_ops = { .rec_bytes = tb_rec, .work_bytes = tb_work, .forward = tb_fwd,
                                      .backward = tb_bwd, .config = tb_config, .split = 1,
                                      .split_bytes = tb_split_bytes };

fsc_status fsc_tp_layer_block(const fsc_block_opts *o, fsc_layer **out) {
    *out = NULL;
    const int llama = o->kind == FSC_BLOCK_LLAMA;
    tp_group g;
    FSC_TRY(tp_group_of(o->tp, o->sp, "block", &g));
    FSC_TRY(tp_divides("block", "heads", o->heads, &g));
    FSC_TRY(tp_divides("block", "kv_heads", o->kv_heads, &g));
    FSC_TRY(tp_divides("block", "the MLP width F", o->F, &g));
    FSC_TRY(tp_check_sp("block", o->T, &g));
    FSC_TRY(layer_new(sizeof(tp_block), llama ? "llama_block" : "gpt2_block", &tb_ops, out));
    tp_block *y = (tp_block *)*out;
    y->o = *o, y->g = g, y->rms = llama;
    y->n1b = y->n2b = -1;
    const int packed = !llama && !o->separate_qkv, HS = o->C / o->heads;
    y->a = (tp_attn){ .packed = packed, .T = o->T, .C = o->C, .NHl = o->heads / g.size, .KVHl = o->kv_heads / g.size,
                      .HS = HS, .rope = o->rope_theta, .wk = -1, .wv = -1, .bq = -1, .bk = -1, .bv = -1, .bo = -1 };
    y->m = (tp_mlp){ .swiglu = llama, .C = o->C, .Fl = o->F / g.size };
    y->l.in_bytes = (size_t)o->T * o->C * sizeof(float) / (size_t)(g.sp ? g.size : 1);
    y->l.out_floats = (size_t)o->T * o->C / (size_t)(g.sp ? g.size : 1);
    const int64_t C = o->C, F = o->F, Q = (int64_t)o->heads * HS, KV = (int64_t)o->kv_heads * HS;
    const fsc_init w = fsc_init_normal(LAYER_STD), one = fsc_init_const(1.0f), zero = fsc_init_const(0.0f);
    tp_attn *a = &y->a;
    const int R = FSC_SPLIT_ROWS, K = FSC_SPLIT_COLS, NONE = FSC_SPLIT_NONE;
    if (llama) { /* LlamaDecoderLayer's order, as the unsplit block declares it */
        FSC_TRY(tp_param_ix(out, &a->wq, "self_attn.q_proj.weight", Q, C, R, 1, &g, w));
        FSC_TRY(tp_param_ix(out, &a->wk, "self_attn.k_proj.weight", KV, C, R, 1, &g, w));
        FSC_TRY(tp_param_ix(out, &a->wv, "self_attn.v_proj.weight", KV, C, R, 1, &g, w));
        FSC_TRY(tp_param_ix(out, &a->wo, "self_attn.o_proj.weight", C, Q, K, 1, &g, w));
        FSC_TRY(mlp_params(out, &y->m, "mlp.", C, F, &g));
        FSC_TRY(tp_param_ix(out, &y->n1w, "input_layernorm.weight", C, 0, NONE, 1, &g, one));
        return tp_param_ix(out, &y->n2w, "post_attention_layernorm.weight", C, 0, NONE, 1, &g, one);
    }
    FSC_TRY(tp_param_ix(out, &y->n1w, "ln_1.weight", C, 0, NONE, 1, &g, one));
    FSC_TRY(tp_param_ix(out, &y->n1b, "ln_1.bias", C, 0, NONE, 1, &g, zero));
    if (packed) { /* c_attn's columns are q | k | v: 3 parts, this rank's heads of each */
        FSC_TRY(tp_param_ix(out, &a->wq, "attn.c_attn.weight", C, 3 * C, K, 3, &g, w));
        FSC_TRY(tp_param_ix(out, &a->bq, "attn.c_attn.bias", 3 * C, 0, K, 3, &g, zero));
        FSC_TRY(tp_param_ix(out, &a->wo, "attn.c_proj.weight", C, C, R, 1, &g, w));
        FSC_TRY(tp_param_ix(out, &a->bo, "attn.c_proj.bias", C, 0, NONE, 1, &g, zero));
    } else {
        FSC_TRY(tp_param_ix(out, &a->wq, "attn.q_proj.weight", Q, C, R, 1, &g, w));
        FSC_TRY(tp_param_ix(out, &a->bq, "attn.q_proj.bias", Q, 0, K, 1, &g, zero));
        FSC_TRY(tp_param_ix(out, &a->wk, "attn.k_proj.weight", KV, C, R, 1, &g, w));
        FSC_TRY(tp_param_ix(out, &a->bk, "attn.k_proj.bias", KV, 0, K, 1, &g, zero));
        FSC_TRY(tp_param_ix(out, &a->wv, "attn.v_proj.weight", KV, C, R, 1, &g, w));
        FSC_TRY(tp_param_ix(out, &a->bv, "attn.v_proj.bias", KV, 0, K, 1, &g, zero));
        FSC_TRY(tp_param_ix(out, &a->wo, "attn.o_proj.weight", C, Q, K, 1, &g, w));
        FSC_TRY(tp_param_ix(out, &a->bo, "attn.o_proj.bias", C, 0, NONE, 1, &g, zero));
    }
    FSC_TRY(tp_param_ix(out, &y->n2w, "ln_2.weight", C, 0, NONE, 1, &g, one));
    FSC_TRY(tp_param_ix(out, &y->n2b, "ln_2.bias", C, 0, NONE, 1, &g, zero));
    return mlp_params(out, &y->m, "mlp.", C, F, &g);
}
