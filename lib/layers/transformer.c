/* Built-in layers of language models: token + position embedding, token embedding alone, GELU MLP (GPT-2),
 * SwiGLU MLP (Llama), causal self-attention (rotary embeddings, grouped-query heads) and the LM head with cross
 * entropy (optionally after a final LayerNorm or RMSNorm), each over the nn.h modules; the MLPs and attention optionally add their input (residual). Not here: linear, norms, MSE (basic.c),
 * transformer blocks (block.c). */
#include "layers_impl.h"
#include "tp_layers.h"

/* ---- token + position embedding ---- */
typedef struct {
    fsc_layer l;
    int T, C, V;
} embed_layer;

static fsc_status emb_fwd(const fsc_layer *l, const fsc_layer_call *c, float *out, const void *in) {
    const embed_layer *y = (const embed_layer *)l;
    return fsc_embedding_forward(c->dev, out, NULL, in, c->param[0], c->param[1], c->B, y->T, y->C);
}

static fsc_status emb_bwd(const fsc_layer *l, const fsc_layer_call *c, float *dinp, const float *dout,
                          const void *in) {
    (void)dinp; /* tokens have no gradient */
    const embed_layer *y = (const embed_layer *)l;
    if (!c->grad[0]) return FSC_OK; /* the split's input part: no input gradient either */
    fsc_embedding_rec r = { .tok = in, .B = c->B, .T = y->T, .C = y->C };
    return fsc_embedding_backward(c->dev, c->grad[0], c->grad[1], &r, dout);
}

static void emb_config(const fsc_layer *l, char *buf, size_t cap) {
    const embed_layer *y = (const embed_layer *)l;
    snprintf(buf, cap, "{\"T\":%d,\"C\":%d,\"V\":%d}", y->T, y->C, y->V);
}

/* int32 tokens (or targets) of B samples of T must lie in [0, V): the kernels index tables with them. */
static fsc_status check_tokens(const void *host, int B, int T, int V, const char *what) {
    const int32_t *t = host;
    for (size_t i = 0, n = (size_t)B * (size_t)T; i < n; i++)
        if (t[i] < 0 || t[i] >= V)
            return fsc_error(FSC_ERR_INVALID, "%s[%zu] = %d is outside the vocabulary [0, %d)", what, i, (int)t[i], V);
    return FSC_OK;
}

static fsc_status emb_check(const fsc_layer *l, const void *host, int B) {
    const embed_layer *y = (const embed_layer *)l;
    return check_tokens(host, B, y->T, y->V, "tokens");
}

static const fsc_layer_ops emb_ops = { .split = 1, .forward = emb_fwd, .backward = emb_bwd, .config = emb_config,
                                       .check_input = emb_check };

fsc_status fsc_layer_embedding(int T, int C, int V, fsc_layer **out) {
    FSC_CHECK_ARG(out);
    *out = NULL; /* also after a failure */
    if (T < 1 || C < 1 || V < 1) return fsc_error(FSC_ERR_INVALID, "embedding layer: need T, C, V >= 1");
    return layers_embedding(T, C, V, V, 1, out);
}

/* ---- token embedding without positions: the embedding kernel with a zero position table in scratch (the
 * Llama's own way, so the bits are its) ---- */
static size_t te_work(const fsc_layer *l, int B) {
    (void)B;
    return r256(l->out_floats * sizeof(float));
}

static fsc_status te_fwd(const fsc_layer *l, const fsc_layer_call *c, float *out, const void *in) {
    const embed_layer *y = (const embed_layer *)l;
    FSC_TRY(fsc_device_memset(c->dev, c->work, 0, l->out_floats * sizeof(float)));
    return fsc_embedding_forward(c->dev, out, NULL, in, c->param[0], c->work, c->B, y->T, y->C);
}

static fsc_status te_bwd(const fsc_layer *l, const fsc_layer_call *c, float *dinp, const float *dout,
                         const void *in) {
    (void)dinp; /* tokens have no gradient */
    const embed_layer *y = (const embed_layer *)l;
    if (!c->grad[0]) return FSC_OK; /* the split's input part: no input gradient either */
    FSC_TRY(fsc_device_memset(c->dev, c->work, 0, l->out_floats * sizeof(float))); /* the discarded dpos */
    fsc_embedding_rec r = { .tok = in, .B = c->B, .T = y->T, .C = y->C };
    return fsc_embedding_backward(c->dev, c->grad[0], c->work, &r, dout);
}

static const fsc_layer_ops te_ops = { .split = 1, .work_bytes = te_work, .forward = te_fwd, .backward = te_bwd,
                                      .config = emb_config, .check_input = emb_check };

fsc_status fsc_layer_token_embedding(int T, int C, int V, fsc_layer **out) {
    FSC_CHECK_ARG(out);
    *out = NULL; /* also after a failure */
    if (T < 1 || C < 1 || V < 1) return fsc_error(FSC_ERR_INVALID, "token embedding layer: need T, C, V >= 1");
    return layers_embedding(T, C, V, V, 0, out);
}

/* The token table's initial values: N(0, LAYER_STD) for the V real rows, 0 for padding rows [V, Vp). */
static fsc_init table_init(int V, int Vp, int C) {
    fsc_init in = fsc_init_normal(LAYER_STD);
    if (Vp > V) in.limit = (size_t)V * (size_t)C;
    return in;
}

/* Either embedding (positions 1: wte and wpe; 0: the token table alone), its token table of Vp >= V rows. */
fsc_status layers_embedding(int T, int C, int V, int Vp, int positions, fsc_layer **out) {
    *out = NULL;
    FSC_TRY(layer_new(sizeof(embed_layer), positions ? "embedding" : "token_embedding", positions ? &emb_ops : &te_ops,
                      out));
    embed_layer *y = (embed_layer *)*out;
    y->T = T, y->C = C, y->V = V;
    y->l.in_bytes = (size_t)T * sizeof(int32_t);
    y->l.out_floats = (size_t)T * C;
    FSC_TRY(layer_param(out, positions ? "wte.weight" : "weight", Vp, C, table_init(V, Vp, C)));
    if (positions) FSC_TRY(layer_param(out, "wpe.weight", T, C, fsc_init_normal(0.01f)));
    for (int k = 0; k < (*out)->n_params; k++) (*out)->params[k].decay = -1; /* embeddings: no weight decay */
    return FSC_OK;
}

/* ---- the MLPs: record and scratch sizes; the residual adds the input (its gradient: dinp += dout) ---- */
typedef struct {
    fsc_layer l;
    fsc_mlp_opts o;
} mlp_layer;

static size_t mlp_N(const mlp_layer *y, int B) { return (size_t)B * (size_t)y->o.rows; }

/* out = tmp + in after a module wrote tmp (the residual), or the module wrote out directly */
static fsc_status add_residual(const fsc_layer_call *c, float *out, const float *tmp, const void *in, size_t n) {
    return fsc_residual_forward(c->dev, out, tmp, in, n);
}

static size_t gm_rec(const fsc_layer *l, int B) {
    const mlp_layer *y = (const mlp_layer *)l;
    return 2 * r256(mlp_N(y, B) * (size_t)y->o.F * sizeof(float)); /* c_fc output h, gelu(h) */
}
static size_t gm_work(const fsc_layer *l, int B) {
    const mlp_layer *y = (const mlp_layer *)l;
    return 2 * r256(mlp_N(y, B) * (size_t)y->o.F * sizeof(float)) + r256(mlp_N(y, B) * (size_t)y->o.C * sizeof(float));
}

static fsc_status gm_fwd(const fsc_layer *l, const fsc_layer_call *c, float *out, const void *in) {
    const mlp_layer *y = (const mlp_layer *)l;
    const size_t N = mlp_N(y, c->B), NF = N * (size_t)y->o.F, NC = N * (size_t)y->o.C;
    float *h = c->rec, *a = (float *)((char *)c->rec + r256(NF * sizeof(float)));
    float *proj = y->o.residual ? (float *)((char *)c->work + 2 * r256(NF * sizeof(float))) : out;
    FSC_TRY(fsc_linear_forward(c->dev, h, NULL, in, c->param[0], c->param[1], N, y->o.C, y->o.F, 0));
    FSC_TRY(fsc_gelu_forward(c->dev, a, NULL, h, NF));
    FSC_TRY(fsc_linear_forward(c->dev, proj, NULL, a, c->param[2], c->param[3], N, y->o.F, y->o.C, 0));
    return y->o.residual ? add_residual(c, out, proj, in, NC) : FSC_OK;
}

static fsc_linear_rec gelu_lin(const layers_gelu_mlp *m, int proj) {
    return (fsc_linear_rec){ .inp = proj ? m->act : m->x, .N = m->N, .C = proj ? m->F : m->C, .OC = proj ? m->C : m->F };
}

fsc_status layers_gelu_mlp_split_weight(fsc_device *dev, const layers_gelu_mlp *m, const float *const *w,
                                        float *const *g, const float *dout) {
    fsc_linear_rec pr = gelu_lin(m, 1), fr = gelu_lin(m, 0);
    FSC_TRY(fsc_linear_backward(dev, NULL, g[2], g[3], &pr, dout, w[2], 0.0f, 1.0f));
    return fsc_linear_backward(dev, NULL, g[0], g[1], &fr, m->h, w[0], 0.0f, 1.0f);
}

fsc_status layers_gelu_mlp_split_input(fsc_device *dev, const layers_gelu_mlp *m, const float *const *w,
                                       const float *dout, float *dinp, float *work) {
    fsc_linear_rec pr = gelu_lin(m, 1), fr = gelu_lin(m, 0);
    FSC_TRY(fsc_linear_backward(dev, work, NULL, NULL, &pr, dout, w[2], 0.0f, 1.0f));
    fsc_gelu_rec gr = { .inp = m->h, .n = m->N * (size_t)m->F };
    FSC_TRY(fsc_gelu_backward(dev, m->h, &gr, work)); /* dh over h, element by element */
    return dinp ? fsc_linear_backward(dev, dinp, NULL, NULL, &fr, m->h, w[0], 0.0f, 1.0f) : FSC_OK;
}

fsc_status layers_gelu_mlp_backward(fsc_device *dev, const layers_gelu_mlp *m, const float *const *w, float *const *g,
                                    const float *dout, float *dinp, float *da, float *dh) {
    fsc_linear_rec pr = gelu_lin(m, 1), fr = gelu_lin(m, 0);
    FSC_TRY(fsc_linear_backward(dev, da, g[2], g[3], &pr, dout, w[2], 0.0f, 1.0f));
    fsc_gelu_rec gr = { .inp = m->h, .n = m->N * (size_t)m->F };
    FSC_TRY(fsc_gelu_backward(dev, dh, &gr, da));
    return fsc_linear_backward(dev, dinp, g[0], g[1], &fr, dh, w[0], 0.0f, 1.0f);
}

/* The split (c->stash set, of 0 bytes: the split area is there): layers_gelu_mlp_split_*, dh over h. */
static fsc_status gm_bwd(const fsc_layer *l, const fsc_layer_call *c, float *dinp, const float *dout,
                         const void *in) {
    const mlp_layer *y = (const mlp_layer *)l;
    const size_t N = mlp_N(y, c->B), NF = N * (size_t)y->o.F;
    float *h = c->rec, *a = (float *)((char *)c->rec + r256(NF * sizeof(float)));
    float *da = c->work, *dh = (float *)((char *)c->work + r256(NF * sizeof(float)));
    const layers_gelu_mlp m = { N, y->o.C, y->o.F, in, a, h };
    if (c->stash && !dinp && c->grad[0]) return layers_gelu_mlp_split_weight(c->dev, &m, c->param, c->grad, dout);
    if (c->stash) FSC_TRY(layers_gelu_mlp_split_input(c->dev, &m, c->param, dout, dinp, da));
    else FSC_TRY(layers_gelu_mlp_backward(c->dev, &m, c->param, c->grad, dout, dinp, da, dh));
    return y->o.residual && dinp ? fsc_residual_backward(c->dev, dinp, NULL, dout, N * (size_t)y->o.C) : FSC_OK;
}

static void mlp_config(const fsc_layer *l, char *buf, size_t cap) {
    const mlp_layer *y = (const mlp_layer *)l;
    snprintf(buf, cap, "{\"rows\":%d,\"C\":%d,\"F\":%d,\"residual\":%d}", y->o.rows, y->o.C, y->o.F, y->o.residual);
}

/* The split keeps nothing beyond the record (gm_bwd, at_bwd): a stash of 0 bytes marks the split parts. */
static size_t gm_split_bytes(const fsc_layer *l, int B) {
    (void)l, (void)B;
    return 0;
}

static const fsc_layer_ops gm_ops = { .split = 1, .split_bytes = gm_split_bytes, .rec_bytes = gm_rec, .work_bytes = gm_work, .forward = gm_fwd,
                                      .backward = gm_bwd, .config = mlp_config };

fsc_mlp_opts fsc_mlp_opts_default(int C) {
    return (fsc_mlp_opts){ .rows = 1, .C = C, .F = layers_4c(C), .residual = 0 };
}

static fsc_status mlp_new(const fsc_mlp_opts *o, const char *kind, const fsc_layer_ops *ops, fsc_layer **out) {
    if (!o || o->rows < 0 || o->C < 1 || o->F < 1)
        return fsc_error(FSC_ERR_INVALID, "%s layer: need C, F >= 1 and rows >= 0", kind);
    FSC_TRY(layer_new(sizeof(mlp_layer), kind, ops, out));
    mlp_layer *y = (mlp_layer *)*out;
    y->o = *o;
    y->o.rows = o->rows > 0 ? o->rows : 1;
    y->l.in_bytes = (size_t)y->o.rows * o->C * sizeof(float);
    y->l.out_floats = (size_t)y->o.rows * o->C;
    return FSC_OK;
}

fsc_status fsc_layer_gelu_mlp(const fsc_mlp_opts *o, fsc_layer **out) {
    FSC_CHECK_ARG(out);
    *out = NULL; /* also after a failure, options NULL included */
    FSC_CHECK_ARG(o);
    if (o && (o->tp || o->sp) && o->C >= 1 && o->F >= 1 && o->rows >= 0) return fsc_tp_layer_mlp(o, 0, out);
    FSC_TRY(mlp_new(o, "gelu_mlp", &gm_ops, out));
    FSC_TRY(layer_param(out, "c_fc.weight", o->C, o->F, fsc_init_normal(LAYER_STD)));
    FSC_TRY(layer_param(out, "c_fc.bias", o->F, 0, fsc_init_const(0.0f)));
    FSC_TRY(layer_param(out, "c_proj.weight", o->F, o->C, fsc_init_normal(LAYER_STD)));
    return layer_param(out, "c_proj.bias", o->C, 0, fsc_init_const(0.0f));
}

static size_t sm_rec(const fsc_layer *l, int B) {
    const mlp_layer *y = (const mlp_layer *)l;
    return fsc_swiglu_mlp_saved_floats(mlp_N(y, B), y->o.F) * sizeof(float);
}
static size_t sm_work(const fsc_layer *l, int B) {
    const mlp_layer *y = (const mlp_layer *)l;
    return r256(fsc_swiglu_mlp_work_floats(mlp_N(y, B), y->o.F) * sizeof(float)) +
           r256(mlp_N(y, B) * (size_t)y->o.C * sizeof(float));
}

static fsc_status sm_fwd(const fsc_layer *l, const fsc_layer_call *c, float *out, const void *in) {
    const mlp_layer *y = (const mlp_layer *)l;
    const size_t N = mlp_N(y, c->B);
    fsc_swiglu_mlp_rec r;
    fsc_swiglu_mlp_rec_bind(&r, c->rec, N, y->o.C, y->o.F);
    float *proj = y->o.residual ? (float *)((char *)c->work + r256(fsc_swiglu_mlp_work_floats(N, y->o.F) *
                                                                    sizeof(float))) : out;
    FSC_TRY(fsc_swiglu_mlp_forward(c->dev, proj, &r, in, c->param[0], c->param[1], c->param[2]));
    return y->o.residual ? add_residual(c, out, proj, in, N * (size_t)y->o.C) : FSC_OK;
}

static fsc_linear_rec swiglu_lin(const fsc_swiglu_mlp_rec *r, int down) {
    return (fsc_linear_rec){ .inp = down ? r->act : r->inp, .N = r->N, .C = down ? r->F : r->C,
                             .OC = down ? r->C : r->F, .w_out_in = 1 };
}

fsc_status layers_swiglu_split_weight(fsc_device *dev, const fsc_swiglu_mlp_rec *r, const float *const *w,
                                      float *const *g, const float *dout) {
    fsc_linear_rec down = swiglu_lin(r, 1), proj = swiglu_lin(r, 0);
    FSC_TRY(fsc_linear_backward(dev, NULL, g[2], NULL, &down, dout, w[2], 0.0f, 1.0f));
    FSC_TRY(fsc_linear_backward(dev, NULL, g[0], NULL, &proj, r->gate, w[0], 0.0f, 1.0f));
    return fsc_linear_backward(dev, NULL, g[1], NULL, &proj, r->up, w[1], 0.0f, 1.0f);
}

/* The SwiGLU's backward reads each element's inputs before it writes its outputs: dgate and dup over gate and up. */
fsc_status layers_swiglu_split_input(fsc_device *dev, const fsc_swiglu_mlp_rec *r, const float *const *w,
                                     const float *dout, float *dinp, float *work) {
    fsc_linear_rec down = swiglu_lin(r, 1), proj = swiglu_lin(r, 0);
    FSC_TRY(fsc_linear_backward(dev, work, NULL, NULL, &down, dout, w[2], 0.0f, 1.0f)); /* dact */
    const fsc_ew_rec er = { .a = r->gate, .b = r->up, .n = r->N * (size_t)r->F };
    FSC_TRY(fsc_swiglu_backward(dev, r->gate, r->up, &er, work));
    if (!dinp) return FSC_OK; /* the model's first layer: no input gradient */
    FSC_TRY(fsc_linear_backward(dev, dinp, NULL, NULL, &proj, r->gate, w[0], 0.0f, 1.0f));
    return fsc_linear_backward(dev, dinp, NULL, NULL, &proj, r->up, w[1], 1.0f, 1.0f);
}

static fsc_status sm_bwd(const fsc_layer *l, const fsc_layer_call *c, float *dinp, const float *dout,
                         const void *in) {
    const mlp_layer *y = (const mlp_layer *)l;
    const size_t N = mlp_N(y, c->B);
    fsc_swiglu_mlp_rec r;
    fsc_swiglu_mlp_rec_bind(&r, c->rec, N, y->o.C, y->o.F);
    r.inp = in;
    if (c->stash && !dinp && c->grad[0]) { /* the split's parts: dgate and dup over gate and up */
        return layers_swiglu_split_weight(c->dev, &r, c->param, c->grad, dout);
    } else if (c->stash) {
        FSC_TRY(layers_swiglu_split_input(c->dev, &r, c->param, dout, dinp, c->work));
    } else {
        FSC_TRY(fsc_swiglu_mlp_backward_parts(c->dev, dinp, c->grad[0], c->grad[1], c->grad[2], &r, dout,
                                              c->param[0], c->param[1], c->param[2], c->work));
    }
    return y->o.residual && dinp ? fsc_residual_backward(c->dev, dinp, NULL, dout, N * (size_t)y->o.C) : FSC_OK;
}

static const fsc_layer_ops sm_ops = { .split = 1, .split_bytes = gm_split_bytes, .rec_bytes = sm_rec, .work_bytes = sm_work, .forward = sm_fwd,
                                      .backward = sm_bwd, .config = mlp_config };

fsc_status fsc_layer_swiglu_mlp(const fsc_mlp_opts *o, fsc_layer **out) {
    FSC_CHECK_ARG(out);
    *out = NULL; /* also after a failure, options NULL included */
    FSC_CHECK_ARG(o);
    if (o && (o->tp || o->sp) && o->C >= 1 && o->F >= 1 && o->rows >= 0) return fsc_tp_layer_mlp(o, 1, out);
    FSC_TRY(mlp_new(o, "swiglu_mlp", &sm_ops, out));
    FSC_TRY(layer_param(out, "gate_proj.weight", o->F, o->C, fsc_init_normal(LAYER_STD)));
    FSC_TRY(layer_param(out, "up_proj.weight", o->F, o->C, fsc_init_normal(LAYER_STD)));
    return layer_param(out, "down_proj.weight", o->C, o->F, fsc_init_normal(LAYER_STD));
}

/* ---- causal self-attention ---- */
typedef struct {
    fsc_layer l;
    fsc_attention_opts o;
} attn_layer;

static fsc_self_attn_config attn_cfg(const attn_layer *y, int B) {
    return (fsc_self_attn_config){ .B = B, .T = y->o.T, .C = y->o.C, .NH = y->o.heads, .KVH = y->o.kv_heads,
                                   .HS = y->o.C / y->o.heads, .rope_theta = y->o.rope_theta };
}
static size_t at_rec(const fsc_layer *l, int B) {
    fsc_self_attn_config cf = attn_cfg((const attn_layer *)l, B);
    return fsc_self_attn_saved_floats(&cf) * sizeof(float);
}
static size_t at_work(const fsc_layer *l, int B) {
    fsc_self_attn_config cf = attn_cfg((const attn_layer *)l, B);
    return r256(fsc_self_attn_work_floats(&cf) * sizeof(float)) + r256((size_t)B * l->out_floats * sizeof(float));
}

static void at_params(const attn_layer *y, const fsc_layer_call *c, fsc_self_attn_params *p, fsc_self_attn_grads *g) {
    const int b = y->o.bias;
    *p = (fsc_self_attn_params){ .wq = c->param[0], .wk = c->param[1], .wv = c->param[2], .wo = c->param[3],
                                 .bq = b ? c->param[4] : NULL, .bk = b ? c->param[5] : NULL,
                                 .bv = b ? c->param[6] : NULL, .bo = b ? c->param[7] : NULL };
    *g = (fsc_self_attn_grads){ .wq = c->grad[0], .wk = c->grad[1], .wv = c->grad[2], .wo = c->grad[3],
                                .bq = b ? c->grad[4] : NULL, .bk = b ? c->grad[5] : NULL,
                                .bv = b ? c->grad[6] : NULL, .bo = b ? c->grad[7] : NULL };
}

static fsc_status at_fwd(const fsc_layer *l, const fsc_layer_call *c, float *out, const void *in) {
    const attn_layer *y = (const attn_layer *)l;
    fsc_self_attn_config cf = attn_cfg(y, c->B);
    fsc_self_attn_rec r;
    fsc_self_attn_rec_bind(&r, c->rec, &cf);
    fsc_self_attn_params p;
    fsc_self_attn_grads g;
    at_params(y, c, &p, &g);
    const size_t wk = r256(fsc_self_attn_work_floats(&cf) * sizeof(float));
    float *proj = y->o.residual ? (float *)((char *)c->work + wk) : out;
    FSC_TRY(fsc_self_attn_forward(c->dev, proj, &r, in, &p, c->work));
    return y->o.residual ? add_residual(c, out, proj, in, (size_t)c->B * l->out_floats) : FSC_OK;
}

static size_t r64f(size_t n) { return (n + 63) / 64 * 64; }

static fsc_linear_rec attn_lin(const fsc_self_attn_rec *r, const float *inp, int C, int OC) {
    return (fsc_linear_rec){ .inp = inp, .N = (size_t)r->cfg.B * r->cfg.T, .C = C, .OC = OC, .w_out_in = 1 };
}

fsc_status layers_attn_split_weight(fsc_device *dev, const fsc_self_attn_rec *r, const fsc_self_attn_params *p,
                                    const fsc_self_attn_grads *g, const float *dout) {
    const fsc_self_attn_config *cf = &r->cfg;
    const int QW = cf->NH * cf->HS, KW = cf->KVH * cf->HS;
    fsc_linear_rec o = attn_lin(r, r->y, QW, cf->C), lq = attn_lin(r, r->inp, cf->C, QW),
                   lkv = attn_lin(r, r->inp, cf->C, KW);
    FSC_TRY(fsc_linear_backward(dev, NULL, g->wo, g->bo, &o, dout, p->wo, 0.0f, 1.0f));
    FSC_TRY(fsc_linear_backward(dev, NULL, g->wq, g->bq, &lq, r->q, p->wq, 0.0f, 1.0f));
    FSC_TRY(fsc_linear_backward(dev, NULL, g->wk, g->bk, &lkv, r->k, p->wk, 0.0f, 1.0f));
    return fsc_linear_backward(dev, NULL, g->wv, g->bv, &lkv, r->v, p->wv, 0.0f, 1.0f);
}

fsc_status layers_attn_split_input(fsc_device *dev, const fsc_self_attn_rec *r, const fsc_self_attn_params *p,
                                   const float *dout, float *dinp, float *work) {
    const fsc_self_attn_config *cf = &r->cfg;
    const size_t N = (size_t)cf->B * cf->T, tt = (size_t)cf->B * cf->NH * cf->T * cf->T;
    const int QW = cf->NH * cf->HS, KW = cf->KVH * cf->HS;
    fsc_linear_rec o = attn_lin(r, r->y, QW, cf->C), lq = attn_lin(r, r->inp, cf->C, QW),
                   lkv = attn_lin(r, r->inp, cf->C, KW);
    float *core_work = work, *dy = core_work + 2 * r64f(tt), *dq = dy + r64f(N * QW), *dk = dq + r64f(N * QW);
    float *dv = dk + r64f(N * KW); /* fsc_self_attn_work_floats' pieces */
    FSC_TRY(fsc_linear_backward(dev, dy, NULL, NULL, &o, dout, p->wo, 0.0f, 1.0f));
    fsc_attn_core_dims d = { cf->B, cf->T, cf->NH, cf->KVH, cf->HS };
    FSC_TRY(fsc_attn_core_backward(dev, &d, dq, dk, dv, dy, QW, r->q, QW, r->k, KW, r->v, KW, r->att, core_work));
    if (cf->rope_theta > 0.0f) { /* q and k are read no more */
        FSC_TRY(fsc_rope_backward(dev, r->q, dq, cf->B, cf->T, cf->NH, cf->HS, QW, cf->rope_theta));
        FSC_TRY(fsc_rope_backward(dev, r->k, dk, cf->B, cf->T, cf->KVH, cf->HS, KW, cf->rope_theta));
    } else {
        FSC_TRY(fsc_device_copy(dev, r->q, dq, N * (size_t)QW * sizeof(float)));
        FSC_TRY(fsc_device_copy(dev, r->k, dk, N * (size_t)KW * sizeof(float)));
    }
    FSC_TRY(fsc_device_copy(dev, r->v, dv, N * (size_t)KW * sizeof(float)));
    if (!dinp) return FSC_OK; /* the model's first layer: no input gradient */
    FSC_TRY(fsc_linear_backward(dev, dinp, NULL, NULL, &lq, r->q, p->wq, 0.0f, 1.0f));
    FSC_TRY(fsc_linear_backward(dev, dinp, NULL, NULL, &lkv, r->k, p->wk, 1.0f, 1.0f));
    return fsc_linear_backward(dev, dinp, NULL, NULL, &lkv, r->v, p->wv, 1.0f, 1.0f);
}

static fsc_status at_bwd(const fsc_layer *l, const fsc_layer_call *c, float *dinp, const float *dout,
                         const void *in) {
    const attn_layer *y = (const attn_layer *)l;
    fsc_self_attn_config cf = attn_cfg(y, c->B);
    fsc_self_attn_rec r;
    fsc_self_attn_rec_bind(&r, c->rec, &cf);
    r.inp = in;
    fsc_self_attn_params p;
    fsc_self_attn_grads g;
    at_params(y, c, &p, &g);
    if (c->stash && !dinp && g.wq) FSC_TRY(layers_attn_split_weight(c->dev, &r, &p, &g, dout)); /* the split's parts */
    else if (c->stash) FSC_TRY(layers_attn_split_input(c->dev, &r, &p, dout, dinp, c->work));
    else FSC_TRY(fsc_self_attn_backward_parts(c->dev, dinp, &g, &r, dout, &p, c->work));
    return y->o.residual && dinp ? fsc_residual_backward(c->dev, dinp, NULL, dout, (size_t)c->B * l->out_floats)
                                 : FSC_OK;
}

static void at_config(const fsc_layer *l, char *buf, size_t cap) {
    const attn_layer *y = (const attn_layer *)l;
    snprintf(buf, cap, "{\"T\":%d,\"C\":%d,\"heads\":%d,\"kv_heads\":%d,\"bias\":%d,\"residual\":%d,"
             "\"rope_theta\":%.9g}", y->o.T, y->o.C, y->o.heads, y->o.kv_heads, y->o.bias, y->o.residual,
             (double)y->o.rope_theta);
}

static const fsc_layer_ops at_ops = { .split = 1, .split_bytes = gm_split_bytes, .rec_bytes = at_rec, .work_bytes = at_work, .forward = at_fwd,
                                      .backward = at_bwd, .config = at_config };

fsc_attention_opts fsc_attention_opts_default(int T, int C, int heads) {
    return (fsc_attention_opts){ .T = T, .C = C, .heads = heads, .kv_heads = heads, .bias = 0, .residual = 0,
                                 .rope_theta = 0.0f };
}

fsc_status fsc_layer_attention(const fsc_attention_opts *o, fsc_layer **out) {
    FSC_CHECK_ARG(out);
    *out = NULL; /* also after a failure, options NULL included */
    FSC_CHECK_ARG(o);
    if (!o || o->T < 1 || o->C < 1 || o->heads < 1 || o->C % o->heads != 0 || o->kv_heads < 0 ||
        (o->kv_heads > 0 && o->heads % o->kv_heads != 0) || !(o->rope_theta >= 0) || !isfinite(o->rope_theta))
        return fsc_error(FSC_ERR_INVALID, "attention layer: need T, C >= 1, heads dividing C, kv_heads dividing "
                         "heads (0: heads) and a finite rope_theta >= 0");
    const int HS = o->C / o->heads, KVH = o->kv_heads ? o->kv_heads : o->heads;
    if (o->rope_theta > 0 && HS % 2)
        return fsc_error(FSC_ERR_INVALID, "attention layer: rotary embeddings need an even head size, got %d", HS);
    if (o->tp || o->sp) return fsc_tp_layer_attention(o, out); /* tp_transformer.c */
    FSC_TRY(layer_new(sizeof(attn_layer), "attention", &at_ops, out));
    attn_layer *y = (attn_layer *)*out;
    y->o = *o;
    y->o.kv_heads = KVH;
    y->l.in_bytes = (size_t)o->T * o->C * sizeof(float);
    y->l.out_floats = (size_t)o->T * o->C;
    const char *w[4] = { "q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight" };
    const char *b[4] = { "q_proj.bias", "k_proj.bias", "v_proj.bias", "o_proj.bias" };
    const int64_t rows[4] = { (int64_t)o->heads * HS, (int64_t)KVH * HS, (int64_t)KVH * HS, o->C };
    const int64_t cols[4] = { o->C, o->C, o->C, (int64_t)o->heads * HS };
    for (int k = 0; k < 4; k++) FSC_TRY(layer_param(out, w[k], rows[k], cols[k], fsc_init_normal(LAYER_STD)));
    for (int k = 0; k < 4 && o->bias; k++) FSC_TRY(layer_param(out, b[k], rows[k], 0, fsc_init_const(0.0f)));
    return FSC_OK;
}

/* ---- LM head with cross entropy, optionally after a final norm. Record: the logits (N, V), then with a norm
 * its output (N, C) and statistics (rstd, or mean and rstd); scratch: dlogits (N, V), then dnorm (N, C); the split
 * backward's input part writes dlogits over the record's logits instead, for its weight part, and keeps dnorm in
 * the stash. A padded vocabulary (a weight of Vp > V
 * rows, llm.c's): the products use its first V rows only (a prefix of the table), so the padding is in no logit,
 * no softmax and no input gradient, its rows' gradient is 0 and the losses are the unpadded head's bit for bit.
 * (llm.c multiplies all Vp rows, a faster shape on GPUs, and gets the same losses up to rounding.) ---- */
typedef struct {
    fsc_layer l;
    int T, C, V, Vp;
    fsc_head_norm norm;
    float eps;
} head_layer;

static size_t hd_N(const head_layer *y, int B) { return (size_t)B * (size_t)y->T; }

static size_t hd_rec(const fsc_layer *l, int B) {
    const head_layer *y = (const head_layer *)l;
    const size_t N = hd_N(y, B), logits = N * (size_t)y->V * sizeof(float);
    if (y->norm == FSC_HEAD_NORM_NONE) return logits;
    const int stats = y->norm == FSC_HEAD_NORM_LAYERNORM ? 2 : 1;
    return r256(logits) + r256(N * (size_t)y->C * sizeof(float)) + (size_t)stats * r256(N * sizeof(float));
}

static size_t hd_work(const fsc_layer *l, int B) {
    const head_layer *y = (const head_layer *)l;
    const size_t N = hd_N(y, B), logits = N * (size_t)y->V * sizeof(float);
    return y->norm == FSC_HEAD_NORM_NONE ? logits : r256(logits) + r256(N * (size_t)y->C * sizeof(float));
}

/* The record's parts: logits, and with a norm its output, mean (LayerNorm) and rstd. */
typedef struct { float *logits, *normed, *mean, *rstd; } head_rec;
static head_rec hd_parts(const head_layer *y, void *rec, int B) {
    const size_t N = hd_N(y, B);
    char *at = rec;
    head_rec r = { .logits = rec };
    at += r256(N * (size_t)y->V * sizeof(float));
    r.normed = (float *)at, at += r256(N * (size_t)y->C * sizeof(float));
    if (y->norm == FSC_HEAD_NORM_LAYERNORM) r.mean = (float *)at, at += r256(N * sizeof(float));
    r.rstd = (float *)at;
    return r;
}

static fsc_status hd_fwd(const fsc_layer *l, const fsc_layer_call *c, float *out, const void *in) {
    const head_layer *y = (const head_layer *)l;
    const size_t N = hd_N(y, c->B);
    const float *x = in, *const *p = c->param;
    const head_rec r = hd_parts(y, c->rec, c->B);
    if (y->norm == FSC_HEAD_NORM_RMSNORM) {
        FSC_TRY(fsc_rmsnorm_forward(c->dev, r.normed, NULL, r.rstd, in, p[0], N, y->C, y->eps));
        x = r.normed;
    } else if (y->norm == FSC_HEAD_NORM_LAYERNORM) {
        FSC_TRY(fsc_layernorm_forward(c->dev, r.normed, NULL, r.mean, r.rstd, in, p[0], p[1], N, y->C));
        x = r.normed;
    }
    FSC_TRY(fsc_linear_forward(c->dev, r.logits, NULL, x, p[l->n_params - 1], NULL, N, y->C, y->V, 1));
    return fsc_xent_forward(c->dev, out, NULL, r.logits, c->target, N, y->V, y->V);
}

static fsc_status hd_bwd(const fsc_layer *l, const fsc_layer_call *c, float *dinp, const float *dout,
                         const void *in) {
    (void)dout;
    const head_layer *y = (const head_layer *)l;
    const size_t N = hd_N(y, c->B), NC = N * (size_t)y->C;
    const int w = l->n_params - 1;
    const head_rec r = hd_parts(y, c->rec, c->B);
    /* The split (c->stash set: a stash of 0 bytes without a norm): the input part writes dlogits over the record's
     * logits, which nothing reads after it (the loss is the forward's; layers.h), and the weight part reads them
     * there; the whole backward writes them into the scratch. */
    const int weight_part = c->stash && !dinp && c->grad[w];
    float *dlogits = c->stash ? r.logits : c->work;
    if (!weight_part) {
        fsc_xent_rec xr = { .logits = r.logits, .targets = c->target, .N = N, .V = y->V, .ld = y->V };
        FSC_TRY(fsc_xent_backward(c->dev, dlogits, &xr, c->dscale)); /* in place in the split */
    }
    /* A padded vocabulary: the padding rows' gradient is 0, so their accumulated gradient stays as it is (the
     * products below add into the real rows only) */
    if (y->norm == FSC_HEAD_NORM_NONE) {
        fsc_linear_rec lr = { .inp = in, .N = N, .C = y->C, .OC = y->V, .w_out_in = 1 };
        return fsc_linear_backward(c->dev, dinp, c->grad[w], NULL, &lr, dlogits, c->param[w], 0.0f, 1.0f);
    }
    /* (N, C); the split keeps it from the input part to the weight part (the stash), which then runs the weight
     * product only */
    float *dnormed = c->stash ? c->stash : (float *)((char *)c->work + r256(N * (size_t)y->V * sizeof(float)));
    fsc_linear_rec lr = { .inp = r.normed, .N = N, .C = y->C, .OC = y->V, .w_out_in = 1 };
    FSC_TRY(fsc_linear_backward(c->dev, weight_part ? NULL : dnormed, c->grad[w], NULL, &lr, dlogits, c->param[w], 0.0f,
                                1.0f));
    float *gw = c->grad[0], *gb = y->norm == FSC_HEAD_NORM_LAYERNORM ? c->grad[1] : NULL; /* NULL: the input part */
    if (!dinp && !gw && !gb) return FSC_OK; /* the input part of a first layer: nothing left */
    if (dinp) FSC_TRY(fsc_device_memset(c->dev, dinp, 0, NC * sizeof(float))); /* dinp NULL: the norm's weight half */
    if (y->norm == FSC_HEAD_NORM_RMSNORM) {
        fsc_rmsnorm_rec nr = { .inp = in, .rstd = r.rstd, .N = N, .C = y->C };
        return fsc_rmsnorm_backward(c->dev, dinp, gw, &nr, dnormed, c->param[0]);
    }
    fsc_layernorm_rec nr = { .inp = in, .mean = r.mean, .rstd = r.rstd, .N = N, .C = y->C };
    return fsc_layernorm_backward(c->dev, dinp, gw, gb, &nr, dnormed, c->param[0]);
}

static void hd_config(const fsc_layer *l, char *buf, size_t cap) {
    const head_layer *y = (const head_layer *)l;
    if (y->norm == FSC_HEAD_NORM_NONE)
        snprintf(buf, cap, "{\"T\":%d,\"C\":%d,\"V\":%d}", y->T, y->C, y->V);
    else
        snprintf(buf, cap, "{\"T\":%d,\"C\":%d,\"V\":%d,\"norm\":\"%s\",\"eps\":%.9g}", y->T, y->C, y->V,
                 y->norm == FSC_HEAD_NORM_RMSNORM ? "rmsnorm" : "layernorm", (double)y->eps);
}

static fsc_status hd_check(const fsc_layer *l, const void *host, int B) {
    const head_layer *y = (const head_layer *)l;
    return check_tokens(host, B, y->T, y->V, "targets");
}

static const float *hd_logits(const fsc_layer *l, const void *rec, int B, int *vocab) {
    (void)B;
    *vocab = ((const head_layer *)l)->V; /* a padded head's logits: the real vocabulary's, never the padding */
    return rec; /* the record starts with the logits (hd_parts) */
}

/* The split's stash: the gradient at the final norm's output (N, C), when there is a norm (without, 0 bytes: the
 * mark of the split's parts, whose dlogits lie over the record's logits). */
static size_t hd_split_bytes(const fsc_layer *l, int B) {
    const head_layer *y = (const head_layer *)l;
    return y->norm == FSC_HEAD_NORM_NONE ? 0 : hd_N(y, B) * (size_t)y->C * sizeof(float);
}

static const fsc_layer_ops hd_ops = { .split = 1, .split_bytes = hd_split_bytes, .rec_bytes = hd_rec,
                                      .work_bytes = hd_work, .forward = hd_fwd, .backward = hd_bwd,
                                      .config = hd_config, .check_target = hd_check,
                                      .logits = hd_logits };

fsc_status fsc_layer_lm_head_opts(const fsc_lm_head_opts *o, fsc_layer **out) {
    FSC_CHECK_ARG(out);
    *out = NULL;
    FSC_CHECK_ARG(o);
    if (!o || o->T < 1 || o->C < 1 || o->V < 1) return fsc_error(FSC_ERR_INVALID, "lm head layer: need T, C, V >= 1");
    if (o->norm < FSC_HEAD_NORM_NONE || o->norm > FSC_HEAD_NORM_RMSNORM)
        return fsc_error(FSC_ERR_INVALID, "lm head layer: unknown final norm %d", (int)o->norm);
    if (o->norm == FSC_HEAD_NORM_RMSNORM && (!(o->eps > 0.0f) || !isfinite(o->eps)))
        return fsc_error(FSC_ERR_INVALID, "lm head layer: the RMSNorm's eps must be > 0 and finite");
    const int Vp = o->Vp ? o->Vp : o->V;
    if (Vp < o->V) return fsc_error(FSC_ERR_INVALID, "lm head layer: Vp %d is below V %d", Vp, o->V);
    if (o->tp || o->sp) return fsc_tp_layer_lm_head(o, out); /* tp_basic.c */
    FSC_TRY(layer_new(sizeof(head_layer), "lm_head", &hd_ops, out));
    head_layer *y = (head_layer *)*out;
    y->T = o->T, y->C = o->C, y->V = o->V, y->Vp = Vp, y->norm = o->norm;
    y->eps = o->norm == FSC_HEAD_NORM_LAYERNORM ? 1e-5f : o->eps;
    y->l.in_bytes = (size_t)o->T * o->C * sizeof(float);
    y->l.out_floats = (size_t)o->T;
    y->l.loss_terms = o->T;
    y->l.target_bytes = (size_t)o->T * sizeof(int32_t);
    if (o->norm != FSC_HEAD_NORM_NONE) {
        char name[64];
        const char *np = o->norm_name ? o->norm_name : "norm.";
        snprintf(name, sizeof name, "%sweight", np);
        FSC_TRY(layer_param(out, name, o->C, 0, fsc_init_const(1.0f)));
        if (o->norm == FSC_HEAD_NORM_LAYERNORM) {
            snprintf(name, sizeof name, "%sbias", np);
            FSC_TRY(layer_param(out, name, o->C, 0, fsc_init_const(0.0f)));
        }
    }
    return layer_param(out, o->head_name ? o->head_name : "weight", Vp, o->C, table_init(o->V, Vp, o->C));
}

fsc_status fsc_layer_lm_head(int T, int C, int V, fsc_layer **out) {
    FSC_CHECK_ARG(out);
    return fsc_layer_lm_head_opts(&(fsc_lm_head_opts){ .T = T, .C = C, .V = V }, out);
}
