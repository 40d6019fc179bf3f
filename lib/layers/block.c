/* Built-in transformer block layers (layers.h's fsc_layer_block): a pre-norm block
 *   h = in + attn(norm1(in));   out = h + mlp(norm2(h))
 * in three forms:
 *   - GPT-2, packed: LayerNorm, c_attn (C, 3C) with bias, GELU MLP; nn.h's fsc_block_* (the GPT's own block);
 *   - GPT-2, separate: LayerNorm, q/k/v/o projections [out, in] with biases, GELU MLP (Conv1D weights);
 *   - Llama: RMSNorm, rotary / grouped-query attention without biases, SwiGLU MLP: the built-in Llama's
 *     decoder layer (lib/model/llama.c builds the Llama from these blocks).
 * The two composed forms share one record layout and one forward/backward below. Parameter names follow
 * Hugging Face (GPT2Block, LlamaDecoderLayer) under the block's prefix ("h.3.", "model.layers.3.").
 * Not here: the modules (lib/nn), the sequential model (seq.c). */
#include "layers_impl.h"
#include "tp_layers.h"
#include "moe_impl.h"

/* What each parameter of a composed block is; ix[role] its index among the layer's parameters (-1: none). */
enum { R_N1W = 0, R_N1B, R_Q, R_K, R_V, R_O, R_BQ, R_BK, R_BV, R_BO, R_N2W, R_N2B, R_M0, R_M1, R_M2, R_M3, R_COUNT };

typedef struct {
    fsc_layer l;
    fsc_block_opts o;  /* kv_heads and F resolved */
    int packed;        /* GPT-2 through fsc_block_* */
    int rms, swiglu;   /* the composed forms: RMSNorm, SwiGLU (else LayerNorm, GELU) */
    int ix[R_COUNT];
} block_layer;

/* Record and scratch of a composed block for B samples (byte offsets, 256-aligned). */
typedef struct {
    size_t ln1, st1a, st1b, h, ln2, st2a, st2b, attn, mlp, total; /* record */
    size_t s0, s1, inner, wtotal;                                  /* scratch */
} block_map;

static fsc_self_attn_config attn_cfg(const block_layer *y, int B) {
    return (fsc_self_attn_config){ .B = B, .T = y->o.T, .C = y->o.C, .NH = y->o.heads, .KVH = y->o.kv_heads,
                                   .HS = y->o.C / y->o.heads, .rope_theta = y->o.rope_theta };
}

static block_map map_of(const block_layer *y, int B) {
    const size_t N = (size_t)B * y->o.T, NC = N * (size_t)y->o.C, NF = N * (size_t)y->o.F, f = sizeof(float);
    fsc_self_attn_config cf = attn_cfg(y, B);
    block_map m;
    size_t at = 0;
#define PUT(field, bytes) (m.field = at, at += r256(bytes))
    PUT(ln1, NC * f), PUT(st1a, N * f), PUT(st1b, y->rms ? 0 : N * f);
    PUT(h, NC * f);
    PUT(ln2, NC * f), PUT(st2a, N * f), PUT(st2b, y->rms ? 0 : N * f);
    PUT(attn, fsc_self_attn_saved_floats(&cf) * f);
    PUT(mlp, y->swiglu ? fsc_swiglu_mlp_saved_floats(N, y->o.F) * f : 2 * r256(NF * f));
    m.total = at;
    at = 0;
    PUT(s0, NC * f), PUT(s1, NC * f);
    size_t aw = fsc_self_attn_work_floats(&cf) * f,
           mw = y->swiglu ? fsc_swiglu_mlp_work_floats(N, y->o.F) * f : 2 * r256(NF * f);
    PUT(inner, aw > mw ? aw : mw);
    m.wtotal = at;
#undef PUT
    return m;
}

static size_t bk_rec(const fsc_layer *l, int B) {
    const block_layer *y = (const block_layer *)l;
    if (y->packed) return fsc_block_saved_floats(B, y->o.T, y->o.C, y->o.heads) * sizeof(float);
    return map_of(y, B).total;
}

static size_t bk_work(const fsc_layer *l, int B) {
    const block_layer *y = (const block_layer *)l;
    const size_t NC = (size_t)B * y->o.T * (size_t)y->o.C * sizeof(float);
    if (y->packed) return r256(fsc_block_work_floats(B, y->o.T, y->o.C, y->o.heads) * sizeof(float)) + r256(NC);
    return map_of(y, B).wtotal;
}

#define AT(base, off) ((float *)((char *)(base) + (off)))

static const float *P(const block_layer *y, const fsc_layer_call *c, int role) {
    return y->ix[role] >= 0 ? c->param[y->ix[role]] : NULL;
}
static float *G(const block_layer *y, const fsc_layer_call *c, int role) {
    return y->ix[role] >= 0 ? c->grad[y->ix[role]] : NULL;
}

static fsc_status norm_fwd(const block_layer *y, const fsc_layer_call *c, float *out, float *sa, float *sb,
                           const float *in, int w, size_t N) {
    if (y->rms) return fsc_rmsnorm_forward(c->dev, out, NULL, sa, in, P(y, c, w), N, y->o.C, y->o.eps);
    return fsc_layernorm_forward(c->dev, out, NULL, sa, sb, in, P(y, c, w), P(y, c, w + 1), N, y->o.C);
}

/* dinp += the gradient through the norm of in (saved statistics sa, sb) given dout; the norm's parameter
 * gradients too, unless they are NULL (the split's input part). dinp NULL: the parameter gradients only. */
static fsc_status norm_bwd(const block_layer *y, const fsc_layer_call *c, float *dinp, const float *dout,
                           const float *in, float *sa, float *sb, int w, size_t N) {
    float *gw = G(y, c, w);
    if (y->rms) {
        fsc_rmsnorm_rec r = { .inp = in, .rstd = sa, .N = N, .C = y->o.C };
        return fsc_rmsnorm_backward(c->dev, dinp, gw, &r, dout, P(y, c, w));
    }
    fsc_layernorm_rec r = { .inp = in, .mean = sa, .rstd = sb, .N = N, .C = y->o.C };
    return fsc_layernorm_backward(c->dev, dinp, gw, G(y, c, w + 1), &r, dout, P(y, c, w));
}

static void attn_params(const block_layer *y, const fsc_layer_call *c, fsc_self_attn_params *p,
                        fsc_self_attn_grads *g) {
    *p = (fsc_self_attn_params){ P(y, c, R_Q), P(y, c, R_K), P(y, c, R_V), P(y, c, R_O),
                                 P(y, c, R_BQ), P(y, c, R_BK), P(y, c, R_BV), P(y, c, R_BO) };
    *g = (fsc_self_attn_grads){ G(y, c, R_Q), G(y, c, R_K), G(y, c, R_V), G(y, c, R_O),
                                G(y, c, R_BQ), G(y, c, R_BK), G(y, c, R_BV), G(y, c, R_BO) };
}

static fsc_status bk_fwd(const fsc_layer *l, const fsc_layer_call *c, float *out, const void *in) {
    const block_layer *y = (const block_layer *)l;
    const int C = y->o.C, F = y->o.F;
    const size_t N = (size_t)c->B * y->o.T, NC = N * (size_t)C, NF = N * (size_t)F;
    if (y->packed) {
        fsc_block_rec r;
        fsc_block_rec_bind(&r, c->rec, c->B, y->o.T, C, y->o.heads);
        return fsc_block_forward(c->dev, out, &r, in, c->param, c->work);
    }
    const block_map m = map_of(y, c->B);
    const float *x = in;
    float *ln1 = AT(c->rec, m.ln1), *h = AT(c->rec, m.h), *ln2 = AT(c->rec, m.ln2), *proj = AT(c->work, m.s0);
    float *inner = AT(c->work, m.inner);
    fsc_self_attn_config cf = attn_cfg(y, c->B);
    fsc_self_attn_rec ar;
    fsc_self_attn_rec_bind(&ar, AT(c->rec, m.attn), &cf);
    fsc_self_attn_params ap;
    fsc_self_attn_grads ag;
    attn_params(y, c, &ap, &ag);
    FSC_TRY(norm_fwd(y, c, ln1, AT(c->rec, m.st1a), AT(c->rec, m.st1b), x, R_N1W, N));
    FSC_TRY(fsc_self_attn_forward(c->dev, proj, &ar, ln1, &ap, inner));
    FSC_TRY(fsc_residual_forward(c->dev, h, x, proj, NC));
    FSC_TRY(norm_fwd(y, c, ln2, AT(c->rec, m.st2a), AT(c->rec, m.st2b), h, R_N2W, N));
    if (y->swiglu) {
        fsc_swiglu_mlp_rec mr;
        fsc_swiglu_mlp_rec_bind(&mr, AT(c->rec, m.mlp), N, C, F);
        FSC_TRY(fsc_swiglu_mlp_forward(c->dev, proj, &mr, ln2, P(y, c, R_M0), P(y, c, R_M1), P(y, c, R_M2)));
    } else {
        float *fch = AT(c->rec, m.mlp), *fcg = AT(c->rec, m.mlp + r256(NF * sizeof(float)));
        FSC_TRY(fsc_linear_forward(c->dev, fch, NULL, ln2, P(y, c, R_M0), P(y, c, R_M1), N, C, F, 0));
        FSC_TRY(fsc_gelu_forward(c->dev, fcg, NULL, fch, NF));
        FSC_TRY(fsc_linear_forward(c->dev, proj, NULL, fcg, P(y, c, R_M2), P(y, c, R_M3), N, F, C, 0));
    }
    return fsc_residual_forward(c->dev, out, h, proj, NC);
}

/* The packed block's split backward. The input part runs fsc_block_backward's steps without the weight products
 * and keeps the inner output gradients those need; the weight part runs only the weight products and the norms'
 * parameter gradients from them: the same kernels on the same values, so the bits of fsc_block_backward, and no
 * inner gradient derived twice. The input part leaves them where the weight part does not read the record: dfch
 * (N, 4C) over fch, dqkv (N, 3C) over qkv, dln1 and dres2 (N, C each) over the attention probabilities as far as
 * they fit; dln2, written while all of those are still read, and what does not fit go to c->stash. So the
 * record held from B to W is the forward's record plus the stash (dln2 alone when B NH T T >= 2 B T C). */
typedef struct {
    float *dfch, *dln2, *dres2, *dqkv, *dln1; /* (N, 4C), (N, C), (N, C), (N, 3C), (N, C) */
} packed_stash;

/* How many of dln1, dres2 (N, C each, 256-aligned) fit over the attention probabilities. */
static int over_att(int B, int T, int C, int NH) {
    const size_t nc = r256((size_t)B * T * C * sizeof(float)), att = (size_t)B * NH * T * T * sizeof(float);
    return att >= 2 * nc ? 2 : att >= nc ? 1 : 0;
}

static packed_stash stash_of(void *base, const fsc_block_rec *r) {
    const size_t nc = r256((size_t)r->B * r->T * r->C * sizeof(float));
    const int k = over_att(r->B, r->T, r->C, r->NH);
    float *att = r->attn.att; /* fsc_block_rec_bind: 64-float aligned, as the record */
    packed_stash st;
    st.dfch = r->fch;
    st.dqkv = r->attn.qkv;
    st.dln2 = base;
    st.dln1 = k >= 1 ? att : AT(base, nc);
    st.dres2 = k >= 2 ? AT(att, nc) : AT(base, (size_t)(2 - k) * nc);
    return st;
}

/* A composed block's split keeps its inner gradients as the attention and MLP layers' splits do (the shared
 * layers_attn_split_*, layers_swiglu_split_*, layers_gelu_mlp_split_*): dq, dk, dv over q, k, v, SwiGLU's dgate and dup over gate and up (GELU's dh over its input),
 * none of which the weight part reads; and three more: the gradients at the second norm's output (in the stash:
 * written while the whole record is still read), at h (the attention's output gradient, which the first norm's
 * backward then changes) and at the first norm's output, over the attention probabilities as far as they fit (as
 * the packed block's), else in the stash. */
static size_t bk_split_bytes(const fsc_layer *l, int B) {
    const block_layer *y = (const block_layer *)l;
    const size_t nc = r256((size_t)B * y->o.T * (size_t)y->o.C * sizeof(float));
    return (size_t)(3 - over_att(B, y->o.T, y->o.C, y->o.heads)) * nc;
}

/* d (N, C): the output gradient in, the input gradient out; the norms' input halves only. The work's first
 * 4 N C floats (a) hold dfch_gelu, then dqkv; the attention's scratch and dfch follow (w); datty after those. */
static fsc_status packed_input(const fsc_layer_call *c, float *d, const fsc_block_rec *r) {
    const int C = r->C;
    const size_t N = (size_t)r->B * r->T, nc = N * (size_t)C * sizeof(float);
    const packed_stash st = stash_of(c->stash, r);
    const float *const *p = c->param;
    const size_t aw = fsc_attention_work_floats(r->B, r->T, C, r->NH), f4 = (4 * N * (size_t)C + 63) / 64 * 64;
    float *a = c->work, *w = a + f4, *datty = w + (aw > f4 ? aw : f4); /* fsc_block_work_floats' pieces */
    fsc_linear_rec mproj = { r->fch_gelu, N, 4 * C, C, 0 }, fc = { r->ln2, N, C, 4 * C, 0 };
    fsc_linear_rec aproj = { r->atty, N, C, C, 0 }, attn = { r->ln1, N, C, 3 * C, 0 };
    fsc_gelu_rec gelu = { r->fch, N * 4 * (size_t)C };
    fsc_layernorm_rec ln2 = { r->res2, r->ln2_mean, r->ln2_rstd, N, C }, ln1 = { r->inp, r->ln1_mean, r->ln1_rstd, N, C };
    FSC_TRY(fsc_linear_backward(c->dev, a, NULL, NULL, &mproj, d, p[FSC_B_MPROJ_W], 0.0f, 1.0f)); /* dfch_gelu */
    FSC_TRY(fsc_gelu_backward(c->dev, st.dfch, &gelu, a)); /* over fch, element by element: read no more */
    FSC_TRY(fsc_linear_backward(c->dev, st.dln2, NULL, NULL, &fc, st.dfch, p[FSC_B_FC_W], 0.0f, 1.0f));
    FSC_TRY(fsc_layernorm_backward(c->dev, d, NULL, NULL, &ln2, st.dln2, p[FSC_B_LN2_W]));
    /* d is now the gradient w.r.t. res2 (dres2), unchanged until ln1's backward below */
    FSC_TRY(fsc_linear_backward(c->dev, datty, NULL, NULL, &aproj, d, p[FSC_B_APROJ_W], 0.0f, 1.0f));
    FSC_TRY(fsc_attention_backward(c->dev, a, &r->attn, datty, w)); /* dqkv */
    FSC_TRY(fsc_device_copy(c->dev, st.dqkv, a, 3 * nc)); /* qkv and the probabilities are read no more */
    FSC_TRY(fsc_linear_backward(c->dev, st.dln1, NULL, NULL, &attn, st.dqkv, p[FSC_B_ATTN_W], 0.0f, 1.0f));
    FSC_TRY(fsc_device_copy(c->dev, st.dres2, d, nc));
    return fsc_layernorm_backward(c->dev, d, NULL, NULL, &ln1, st.dln1, p[FSC_B_LN1_W]);
}

/* dout (N, C): the output gradient kept for the weight part. */
static fsc_status packed_weight(const fsc_layer_call *c, const float *dout, const fsc_block_rec *r) {
    const int C = r->C;
    const size_t N = (size_t)r->B * r->T;
    const packed_stash st = stash_of(c->stash, r);
    const float *const *p = c->param;
    float *const *g = c->grad;
    fsc_linear_rec mproj = { r->fch_gelu, N, 4 * C, C, 0 }, fc = { r->ln2, N, C, 4 * C, 0 };
    fsc_linear_rec aproj = { r->atty, N, C, C, 0 }, attn = { r->ln1, N, C, 3 * C, 0 };
    fsc_layernorm_rec ln2 = { r->res2, r->ln2_mean, r->ln2_rstd, N, C }, ln1 = { r->inp, r->ln1_mean, r->ln1_rstd, N, C };
    FSC_TRY(fsc_linear_backward(c->dev, NULL, g[FSC_B_MPROJ_W], g[FSC_B_MPROJ_B], &mproj, dout, p[FSC_B_MPROJ_W],
                                0.0f, 1.0f));
    FSC_TRY(fsc_linear_backward(c->dev, NULL, g[FSC_B_FC_W], g[FSC_B_FC_B], &fc, st.dfch, p[FSC_B_FC_W], 0.0f, 1.0f));
    FSC_TRY(fsc_layernorm_backward(c->dev, NULL, g[FSC_B_LN2_W], g[FSC_B_LN2_B], &ln2, st.dln2, p[FSC_B_LN2_W]));
    FSC_TRY(fsc_linear_backward(c->dev, NULL, g[FSC_B_APROJ_W], g[FSC_B_APROJ_B], &aproj, st.dres2,
                                p[FSC_B_APROJ_W], 0.0f, 1.0f));
    FSC_TRY(fsc_linear_backward(c->dev, NULL, g[FSC_B_ATTN_W], g[FSC_B_ATTN_B], &attn, st.dqkv, p[FSC_B_ATTN_W], 0.0f,
                                1.0f));
    return fsc_layernorm_backward(c->dev, NULL, g[FSC_B_LN1_W], g[FSC_B_LN1_B], &ln1, st.dln1, p[FSC_B_LN1_W]);
}

/* The composed block's split (bk_split_bytes): the input part (every gradient NULL) runs the whole backward's
 * steps without the weight products and keeps their output gradients; the weight part (dinp NULL) runs only the
 * weight products and the norms' parameter gradients from them: the same kernels on the same values, so the
 * whole backward's bits, and no inner gradient derived twice. */
static fsc_status composed_split(const block_layer *y, const fsc_layer_call *c, float *dinp, const float *dout,
                                 const float *x, const block_map *m) {
    const int C = y->o.C, F = y->o.F;
    const size_t N = (size_t)c->B * y->o.T, NC = N * (size_t)C, NF = N * (size_t)F;
    const size_t nc = r256(NC * sizeof(float));
    float *ln1 = AT(c->rec, m->ln1), *h = AT(c->rec, m->h), *ln2 = AT(c->rec, m->ln2), *inner = AT(c->work, m->inner);
    fsc_self_attn_config cf = attn_cfg(y, c->B);
    fsc_self_attn_rec ar;
    fsc_self_attn_rec_bind(&ar, AT(c->rec, m->attn), &cf);
    ar.inp = ln1;
    const int k = over_att(c->B, y->o.T, C, y->o.heads); /* bk_split_bytes */
    float *s_dln2 = c->stash, *s_dh = k >= 1 ? ar.att : AT(c->stash, nc);
    float *s_dln1 = k >= 2 ? AT(ar.att, nc) : AT(c->stash, (size_t)(2 - k) * nc);
    fsc_swiglu_mlp_rec mr;
    fsc_swiglu_mlp_rec_bind(&mr, AT(c->rec, m->mlp), N, C, F);
    mr.inp = ln2;
    const layers_gelu_mlp gm = { N, C, F, ln2, AT(c->rec, m->mlp + r256(NF * sizeof(float))), AT(c->rec, m->mlp) };
    const float *mw[4] = { P(y, c, R_M0), P(y, c, R_M1), P(y, c, R_M2), P(y, c, R_M3) };
    fsc_self_attn_params ap;
    fsc_self_attn_grads ag;
    attn_params(y, c, &ap, &ag);
    float *st1a = AT(c->rec, m->st1a), *st1b = AT(c->rec, m->st1b), *st2a = AT(c->rec, m->st2a),
          *st2b = AT(c->rec, m->st2b);
    if (!dinp && ag.wq) { /* the weight part: the norms' parameter halves only */
        float *const mg[4] = { G(y, c, R_M0), G(y, c, R_M1), G(y, c, R_M2), G(y, c, R_M3) };
        FSC_TRY(y->swiglu ? layers_swiglu_split_weight(c->dev, &mr, mw, mg, dout)
                          : layers_gelu_mlp_split_weight(c->dev, &gm, mw, mg, dout));
        FSC_TRY(norm_bwd(y, c, NULL, s_dln2, h, st2a, st2b, R_N2W, N));
        FSC_TRY(layers_attn_split_weight(c->dev, &ar, &ap, &ag, s_dh));
        return norm_bwd(y, c, NULL, s_dln1, x, st1a, st1b, R_N1W, N);
    }
    /* the input part; without dinp (the model's first layer) d is a scratch, the kept gradients still needed */
    float *d = dinp ? dinp : AT(c->work, m->s1);
    FSC_TRY(fsc_device_copy(c->dev, d, dout, NC * sizeof(float))); /* the gradient w.r.t. out, then h, then x */
    FSC_TRY(y->swiglu ? layers_swiglu_split_input(c->dev, &mr, mw, d, s_dln2, inner)
                      : layers_gelu_mlp_split_input(c->dev, &gm, mw, d, s_dln2, inner));
    FSC_TRY(norm_bwd(y, c, d, s_dln2, h, st2a, st2b, R_N2W, N)); /* d = d h, until the first norm's backward */
    FSC_TRY(layers_attn_split_input(c->dev, &ar, &ap, d, s_dln1, inner));
    FSC_TRY(fsc_device_copy(c->dev, s_dh, d, NC * sizeof(float))); /* the probabilities are read no more */
    return dinp ? norm_bwd(y, c, d, s_dln1, x, st1a, st1b, R_N1W, N) : FSC_OK; /* d = d x */
}

static fsc_status bk_bwd(const fsc_layer *l, const fsc_layer_call *c, float *dinp, const float *dout,
                         const void *in) {
    const block_layer *y = (const block_layer *)l;
    const int C = y->o.C, F = y->o.F;
    const size_t N = (size_t)c->B * y->o.T, NC = N * (size_t)C, NF = N * (size_t)F;
    if (y->packed) { /* the residual stream's gradient in place: dout, then the block's input gradient */
        float *d = dinp ? dinp
                        : AT(c->work, r256(fsc_block_work_floats(c->B, y->o.T, C, y->o.heads) * sizeof(float)));
        fsc_block_rec r;
        fsc_block_rec_bind(&r, c->rec, c->B, y->o.T, C, y->o.heads);
        r.inp = in;
        if (c->stash && !dinp && c->grad[FSC_B_LN1_W]) return packed_weight(c, dout, &r); /* the weight part */
        FSC_TRY(fsc_device_copy(c->dev, d, dout, NC * sizeof(float)));
        if (c->stash && !c->grad[FSC_B_LN1_W]) return packed_input(c, d, &r);
        return fsc_block_backward(c->dev, d, c->grad, &r, c->param, c->work);
    }
    const block_map m = map_of(y, c->B);
    const float *x = in;
    if (c->stash) return composed_split(y, c, dinp, dout, x, &m);
    float *ln1 = AT(c->rec, m.ln1), *h = AT(c->rec, m.h), *ln2 = AT(c->rec, m.ln2);
    float *dln = AT(c->work, m.s0), *inner = AT(c->work, m.inner), *d = dinp ? dinp : AT(c->work, m.s1);
    FSC_TRY(fsc_device_copy(c->dev, d, dout, NC * sizeof(float))); /* d: the gradient w.r.t. out, then h, then x */
    if (y->swiglu) {
        fsc_swiglu_mlp_rec mr;
        fsc_swiglu_mlp_rec_bind(&mr, AT(c->rec, m.mlp), N, C, F);
        mr.inp = ln2;
        FSC_TRY(fsc_swiglu_mlp_backward_parts(c->dev, dln, G(y, c, R_M0), G(y, c, R_M1), G(y, c, R_M2), &mr, d,
                                        P(y, c, R_M0), P(y, c, R_M1), P(y, c, R_M2), inner));
    } else {
        const layers_gelu_mlp gm = { N, C, F, ln2, AT(c->rec, m.mlp + r256(NF * sizeof(float))), AT(c->rec, m.mlp) };
        const float *mw[4] = { P(y, c, R_M0), P(y, c, R_M1), P(y, c, R_M2), P(y, c, R_M3) };
        float *const mg[4] = { G(y, c, R_M0), G(y, c, R_M1), G(y, c, R_M2), G(y, c, R_M3) };
        FSC_TRY(layers_gelu_mlp_backward(c->dev, &gm, mw, mg, d, dln, inner, AT(inner, r256(NF * sizeof(float)))));
    }
    FSC_TRY(norm_bwd(y, c, d, dln, h, AT(c->rec, m.st2a), AT(c->rec, m.st2b), R_N2W, N)); /* d = d h */
    fsc_self_attn_config cf = attn_cfg(y, c->B);
    fsc_self_attn_rec ar;
    fsc_self_attn_rec_bind(&ar, AT(c->rec, m.attn), &cf);
    ar.inp = ln1;
    fsc_self_attn_params ap;
    fsc_self_attn_grads ag;
    attn_params(y, c, &ap, &ag);
    FSC_TRY(fsc_self_attn_backward(c->dev, dln, &ag, &ar, d, &ap, inner));
    return norm_bwd(y, c, dinp, dln, x, AT(c->rec, m.st1a), AT(c->rec, m.st1b), R_N1W, N); /* dinp = d x */
}

static void bk_config(const fsc_layer *l, char *buf, size_t cap) {
    const block_layer *y = (const block_layer *)l;
    snprintf(buf, cap, "{\"kind\":\"%s\",\"T\":%d,\"C\":%d,\"heads\":%d,\"kv_heads\":%d,\"F\":%d,"
             "\"rope_theta\":%.9g,\"eps\":%.9g,\"separate_qkv\":%d}", y->o.kind == FSC_BLOCK_LLAMA ? "llama" : "gpt2",
             y->o.T, y->o.C, y->o.heads, y->o.kv_heads, y->o.F, (double)y->o.rope_theta, (double)y->o.eps,
             y->o.separate_qkv);
}

static const fsc_layer_ops bk_ops = { .split = 1, .split_bytes = bk_split_bytes, .rec_bytes = bk_rec, .work_bytes = bk_work, .forward = bk_fwd,
                                      .backward = bk_bwd, .config = bk_config };

/* Declare parameter `name` for `role` (d1 0: a vector). */
static fsc_status role_param(fsc_layer **out, int role, const char *name, int64_t d0, int64_t d1, fsc_init init) {
    block_layer *y = (block_layer *)*out;
    const int k = y->l.n_params;
    FSC_TRY(layer_param(out, name, d0, d1, init));
    if (role >= 0) y->ix[role] = k;
    return FSC_OK;
}

static fsc_status check_opts(const fsc_block_opts *o) {
    if (!o || (o->kind != FSC_BLOCK_GPT2 && o->kind != FSC_BLOCK_LLAMA))
        return fsc_error(FSC_ERR_INVALID, "block layer: kind must be FSC_BLOCK_GPT2 or FSC_BLOCK_LLAMA");
    if (o->T < 1 || o->C < 1 || o->heads < 1 || o->C % o->heads != 0 || o->F < 0 || o->kv_heads < 0 ||
        (o->kv_heads > 0 && o->heads % o->kv_heads != 0))
        return fsc_error(FSC_ERR_INVALID, "block layer: need T, C >= 1, heads dividing C, kv_heads dividing heads "
                         "(0: heads), F >= 0 (0: the flavour's default)");
    if (o->kind == FSC_BLOCK_GPT2) {
        if ((o->kv_heads && o->kv_heads != o->heads) || o->rope_theta != 0.0f)
            return fsc_error(FSC_ERR_INVALID, "block layer: the GPT-2 block has neither grouped-query heads nor "
                             "rotary embeddings (kv_heads %d, rope_theta %g)", o->kv_heads, (double)o->rope_theta);
        if (o->eps != 0.0f && o->eps != 1e-5f)
            return fsc_error(FSC_ERR_INVALID, "block layer: the GPT-2 block's LayerNorm has eps 1e-5, not %g",
                             (double)o->eps);
        if (!o->separate_qkv && o->F && o->F != layers_4c(o->C))
            return fsc_error(FSC_ERR_INVALID, "block layer: the packed GPT-2 block has F = 4 C = %d, not %d (set "
                             "separate_qkv for another width)", layers_4c(o->C), o->F);
        return FSC_OK;
    }
    if (o->separate_qkv)
        return fsc_error(FSC_ERR_INVALID, "block layer: separate_qkv applies to the GPT-2 block (the Llama's "
                         "projections are always separate)");
    if (!(o->eps > 0.0f) || !isfinite(o->eps) || !(o->rope_theta >= 0.0f) || !isfinite(o->rope_theta) || o->F < 1)
        return fsc_error(FSC_ERR_INVALID, "block layer: the Llama block needs a finite eps > 0, a finite rope_theta >= "
                         "0 and the MLP width F >= 1 (llama.h's fsc_llama_default_ffn gives the Llama rule; got eps %g, "
                         "rope_theta %g, F %d)", (double)o->eps, (double)o->rope_theta, o->F);
    if (o->rope_theta > 0.0f && (o->C / o->heads) % 2)
        return fsc_error(FSC_ERR_INVALID, "block layer: rotary embeddings need an even head size, got %d",
                         o->C / o->heads);
    return FSC_OK;
}

fsc_block_opts fsc_block_opts_default(fsc_block_kind kind, int T, int C, int heads) {
    const int llama = kind == FSC_BLOCK_LLAMA;
    return (fsc_block_opts){ .kind = kind, .T = T, .C = C, .heads = heads, .kv_heads = heads,
                             .F = llama ? layers_llama_ffn(C) : layers_4c(C), .rope_theta = llama ? 10000.0f : 0.0f,
                             .eps = 1e-5f, .separate_qkv = 0 };
}

fsc_status fsc_layer_block(const fsc_block_opts *o, fsc_layer **out) {
    FSC_CHECK_ARG(out);
    *out = NULL;
    FSC_CHECK_ARG(o);
    FSC_TRY(check_opts(o));
    const int llama = o->kind == FSC_BLOCK_LLAMA;
    if (o->moe_experts && (o->tp || o->sp))
        return fsc_error(FSC_ERR_INVALID, "block layer: an MoE block has no tensor-parallel form yet (tp, sp): "
                         "its experts spread over an expert group instead");
    if (o->moe_experts) { /* block_moe.c, with kv_heads, F and eps resolved */
        fsc_block_opts r = *o;
        r.kv_heads = o->kv_heads ? o->kv_heads : o->heads;
        r.F = o->F ? o->F : 4 * o->C;
        r.eps = llama ? o->eps : 1e-5f;
        return fsc_layer_block_moe(&r, out);
    }
    if (o->tp || o->sp) { /* tp_transformer.c, with kv_heads, F and eps resolved */
        fsc_block_opts r = *o;
        r.kv_heads = o->kv_heads ? o->kv_heads : o->heads;
        r.F = o->F ? o->F : 4 * o->C;
        r.eps = llama ? o->eps : 1e-5f;
        return fsc_tp_layer_block(&r, out);
    }
    FSC_TRY(layer_new(sizeof(block_layer), llama ? "llama_block" : "gpt2_block", &bk_ops, out));
    block_layer *y = (block_layer *)*out;
    y->o = *o;
    y->o.kv_heads = o->kv_heads ? o->kv_heads : o->heads;
    y->o.F = o->F ? o->F : layers_4c(o->C); /* the Llama's is given */
    y->o.eps = llama ? o->eps : 1e-5f;
    y->packed = !llama && !o->separate_qkv;
    y->rms = y->swiglu = llama;
    for (int r = 0; r < R_COUNT; r++) y->ix[r] = -1;
    y->l.in_bytes = (size_t)o->T * o->C * sizeof(float);
    y->l.out_floats = (size_t)o->T * o->C;
    const int64_t C = o->C, F = y->o.F, HS = C / o->heads, Q = (int64_t)o->heads * HS, KV = y->o.kv_heads * HS;
    const fsc_init w = fsc_init_normal(LAYER_STD), one = fsc_init_const(1.0f), zero = fsc_init_const(0.0f);
    if (llama) { /* LlamaDecoderLayer's state dict order, as llama.h lists it */
        FSC_TRY(role_param(out, R_Q, "self_attn.q_proj.weight", Q, C, w));
        FSC_TRY(role_param(out, R_K, "self_attn.k_proj.weight", KV, C, w));
        FSC_TRY(role_param(out, R_V, "self_attn.v_proj.weight", KV, C, w));
        FSC_TRY(role_param(out, R_O, "self_attn.o_proj.weight", C, Q, w));
        FSC_TRY(role_param(out, R_M0, "mlp.gate_proj.weight", F, C, w));
        FSC_TRY(role_param(out, R_M1, "mlp.up_proj.weight", F, C, w));
        FSC_TRY(role_param(out, R_M2, "mlp.down_proj.weight", C, F, w));
        FSC_TRY(role_param(out, R_N1W, "input_layernorm.weight", C, 0, one));
        return role_param(out, R_N2W, "post_attention_layernorm.weight", C, 0, one);
    }
    FSC_TRY(role_param(out, R_N1W, "ln_1.weight", C, 0, one));
    FSC_TRY(role_param(out, R_N1B, "ln_1.bias", C, 0, zero));
    if (y->packed) { /* GPT2Block's order (nn.h's fsc_block_* parameters) */
        FSC_TRY(role_param(out, -1, "attn.c_attn.weight", C, 3 * C, w));
        FSC_TRY(role_param(out, -1, "attn.c_attn.bias", 3 * C, 0, zero));
        FSC_TRY(role_param(out, -1, "attn.c_proj.weight", C, C, w));
        FSC_TRY(role_param(out, -1, "attn.c_proj.bias", C, 0, zero));
    } else {
        FSC_TRY(role_param(out, R_Q, "attn.q_proj.weight", Q, C, w));
        FSC_TRY(role_param(out, R_BQ, "attn.q_proj.bias", Q, 0, zero));
        FSC_TRY(role_param(out, R_K, "attn.k_proj.weight", KV, C, w));
        FSC_TRY(role_param(out, R_BK, "attn.k_proj.bias", KV, 0, zero));
        FSC_TRY(role_param(out, R_V, "attn.v_proj.weight", KV, C, w));
        FSC_TRY(role_param(out, R_BV, "attn.v_proj.bias", KV, 0, zero));
        FSC_TRY(role_param(out, R_O, "attn.o_proj.weight", C, Q, w));
        FSC_TRY(role_param(out, R_BO, "attn.o_proj.bias", C, 0, zero));
    }
    FSC_TRY(role_param(out, R_N2W, "ln_2.weight", C, 0, one));
    FSC_TRY(role_param(out, R_N2B, "ln_2.bias", C, 0, zero));
    FSC_TRY(role_param(out, R_M0, "mlp.c_fc.weight", C, F, w));
    FSC_TRY(role_param(out, R_M1, "mlp.c_fc.bias", F, 0, zero));
    FSC_TRY(role_param(out, R_M2, "mlp.c_proj.weight", F, C, w));
    return role_param(out, R_M3, "mlp.c_proj.bias", C, 0, zero);
}
