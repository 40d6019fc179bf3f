/* Transformer blocks with a mixture-of-experts MLP (layers.h's fsc_block_opts.moe_experts), both kinds:
 *   FSC_BLOCK_GPT2: the packed GPT-2 block's attention half (nn.h's fsc_block_attn_*: ln_1, c_attn, c_proj, ln_2)
 *     and the MoE MLP on ln_2 of the residual: the GPT's MoE blocks, tensors ln_1.*, attn.c_attn.*,
 *     attn.c_proj.*, ln_2.*, mlp.gate.weight, mlp.experts.{e}.{c_fc,c_proj}.{weight,bias};
 *   FSC_BLOCK_LLAMA: RMSNorm, rotary / grouped-query attention without biases (nn.h's fsc_self_attn_*), RMSNorm
 *     and the MoE MLP (GELU experts: lib/moe has no SwiGLU experts), tensors self_attn.{q,k,v,o}_proj.weight,
 *     mlp.gate.weight, mlp.experts.{e}.*, input_layernorm.weight, post_attention_layernorm.weight.
 * The MoE part (moe_mlp.c) keeps its routing record in the record's host state (its own, so a checkpointed
 * recomputation routes again into it: routing is deterministic and every rank of the expert group recomputes its
 * layers in the same order, so the collective forward gives the same record and statistics bit for bit). Both
 * split their backward (layers.h's split): the all-to-alls in the input part, the weight part from the stash.
 * Not here: the dense blocks (block.c), the MoE part (moe_mlp.c), routing and experts (lib/moe). */
#include "moe_impl.h"

enum { Q_ = 0, K_, V_, O_ }; /* the Llama's projections, its first parameters */

typedef struct {
    moe_base b;
    fsc_block_opts o;  /* kv_heads resolved */
    int llama;
    int n1, n2;        /* the Llama's norm weights among the parameters */
} moe_block;

static size_t N_of(const moe_block *y, int B) { return (size_t)B * (size_t)y->o.T; }

static fsc_self_attn_config attn_cfg(const moe_block *y, int B) {
    return (fsc_self_attn_config){ .B = B, .T = y->o.T, .C = y->o.C, .NH = y->o.heads, .KVH = y->o.kv_heads,
                                   .HS = y->o.C / y->o.heads, .rope_theta = y->o.rope_theta };
}

/* The Llama form's record: ln1, rstd1, h, ln2, rstd2, the attention's; scratch: s0, s1 (N, C), the attention's. */
typedef struct { size_t ln1, st1, h, ln2, st2, attn, total, s0, s1, inner, wtotal; } llama_map;
static llama_map lmap(const moe_block *y, int B) {
    const size_t N = N_of(y, B), NC = N * (size_t)y->o.C, f = sizeof(float);
    fsc_self_attn_config cf = attn_cfg(y, B);
    llama_map m;
    size_t at = 0;
#define PUT(field, bytes) (m.field = at, at += r256(bytes))
    PUT(ln1, NC * f), PUT(st1, N * f), PUT(h, NC * f), PUT(ln2, NC * f), PUT(st2, N * f);
    PUT(attn, fsc_self_attn_saved_floats(&cf) * f);
    m.total = at;
    at = 0;
    PUT(s0, NC * f), PUT(s1, NC * f), PUT(inner, fsc_self_attn_work_floats(&cf) * f);
    m.wtotal = at;
#undef PUT
    return m;
}

/* The GPT-2 form's scratch (bytes): S (N, C) the projection and MoE outputs, then dln2; W the attention's; A
 * (N, 3C) dqkv; D (N, C) the input gradient nobody needs (the model's first layer). */
static size_t g_S(const moe_block *y, int B) { return r256(N_of(y, B) * (size_t)y->o.C * sizeof(float)); }
static size_t g_W(const moe_block *y, int B) {
    return r256(fsc_attention_work_floats(B, y->o.T, y->o.C, y->o.heads) * sizeof(float));
}

static size_t mb_rec(const fsc_layer *l, int B) {
    const moe_block *y = (const moe_block *)l;
    if (y->llama) return lmap(y, B).total;
    return fsc_block_attn_saved_floats(B, y->o.T, y->o.C, y->o.heads) * sizeof(float);
}

static size_t mb_work(const fsc_layer *l, int B) {
    const moe_block *y = (const moe_block *)l;
    if (y->llama) return lmap(y, B).wtotal;
    return 2 * g_S(y, B) + g_W(y, B) + 3 * g_S(y, B);
}

#define AT(base, off) ((float *)((char *)(base) + (off)))

static void llama_attn(const moe_block *y, const fsc_layer_call *c, fsc_self_attn_params *p, fsc_self_attn_grads *g) {
    *p = (fsc_self_attn_params){ .wq = c->param[Q_], .wk = c->param[K_], .wv = c->param[V_], .wo = c->param[O_] };
    *g = (fsc_self_attn_grads){ .wq = c->grad[Q_], .wk = c->grad[K_], .wv = c->grad[V_], .wo = c->grad[O_] };
    (void)y;
}

static fsc_status mb_fwd(const fsc_layer *l, const fsc_layer_call *c, float *out, const void *in) {
    const moe_block *y = (const moe_block *)l;
    const size_t N = N_of(y, c->B), NC = N * (size_t)y->o.C;
    if (!y->llama) { /* res2 = x + attention half; out = res2 + moe(ln_2(res2)) */
        fsc_block_rec r;
        fsc_block_attn_rec_bind(&r, c->rec, c->B, y->o.T, y->o.C, y->o.heads);
        float *S = c->work, *W = AT(c->work, g_S(y, c->B));
        FSC_TRY(fsc_block_attn_forward(c->dev, &r, in, c->param, S, W));
        FSC_TRY(moe_part_forward(&y->b.mp, c, S, r.ln2));
        return fsc_residual_forward(c->dev, out, r.res2, S, NC);
    }
    const llama_map m = lmap(y, c->B);
    float *ln1 = AT(c->rec, m.ln1), *h = AT(c->rec, m.h), *ln2 = AT(c->rec, m.ln2), *s0 = AT(c->work, m.s0);
    fsc_self_attn_config cf = attn_cfg(y, c->B);
    fsc_self_attn_rec ar;
    fsc_self_attn_rec_bind(&ar, AT(c->rec, m.attn), &cf);
    fsc_self_attn_params ap;
    fsc_self_attn_grads ag;
    llama_attn(y, c, &ap, &ag);
    FSC_TRY(fsc_rmsnorm_forward(c->dev, ln1, NULL, AT(c->rec, m.st1), in, c->param[y->n1], N, y->o.C, y->o.eps));
    FSC_TRY(fsc_self_attn_forward(c->dev, s0, &ar, ln1, &ap, AT(c->work, m.inner)));
    FSC_TRY(fsc_residual_forward(c->dev, h, in, s0, NC));
    FSC_TRY(fsc_rmsnorm_forward(c->dev, ln2, NULL, AT(c->rec, m.st2), h, c->param[y->n2], N, y->o.C, y->o.eps));
    FSC_TRY(moe_part_forward(&y->b.mp, c, s0, ln2));
    return fsc_residual_forward(c->dev, out, h, s0, NC);
}

/* The split backward (c->stash; docs/pipeline.md). The input part (c->grad NULL) runs the whole backward's steps
 * without the weight products and keeps in the stash, after the MoE part's own (the experts' output gradients and
 * the gate's, which only its all-to-alls could give again), the inner gradients the weight part needs: GPT-2's
 * dln2, the gradient at res2, dqkv and dln1 (so its weight part is four products and two norms); the Llama's dln2,
 * the gradient at h and dln1, its attention's dq, dk and dv over q, k and v (layers_attn_split_input, as the dense
 * Llama block's). The weight part (dinp NULL) adds the parameter gradients only, with no collective: the same kernels on
 * the same values give the whole backward's bits. */
typedef struct { float *dln2, *dres2, *dqkv, *dln1; } mb_stash; /* (N, C), (N, C), (N, 3C), (N, C); Llama: no dqkv */

static mb_stash stash_of(const moe_block *y, void *base, int B) {
    const size_t nc = N_of(y, B) * (size_t)y->o.C * sizeof(float);
    mb_stash st;
    st.dln2 = AT(base, moe_part_split_bytes(&y->b.mp, B));
    st.dres2 = AT(st.dln2, r256(nc));
    st.dqkv = y->llama ? NULL : AT(st.dres2, r256(nc));
    st.dln1 = y->llama ? AT(st.dres2, r256(nc)) : AT(st.dqkv, r256(3 * nc));
    return st;
}

static size_t mb_split_bytes(const fsc_layer *l, int B) {
    const moe_block *y = (const moe_block *)l;
    const size_t nc = N_of(y, B) * (size_t)y->o.C * sizeof(float);
    return moe_part_split_bytes(&y->b.mp, B) + 3 * r256(nc) + (y->llama ? 0 : r256(3 * nc));
}

/* GPT-2's attention half after the MoE part (fsc_block_attn_backward's steps): d (N, C) the gradient at res2 from
 * the residual path in, the block's input gradient out; the norms' input halves only. */
static fsc_status gpt2_input(const moe_block *y, const fsc_layer_call *c, float *d, const fsc_block_rec *r,
                             const mb_stash *st) {
    const int C = y->o.C;
    const size_t N = N_of(y, c->B);
    const float *const *p = c->param;
    float *datty = c->work, *w = AT(c->work, 2 * g_S(y, c->B));
    fsc_layernorm_rec ln2 = { r->res2, r->ln2_mean, r->ln2_rstd, N, C }, ln1 = { r->inp, r->ln1_mean, r->ln1_rstd, N, C };
    fsc_linear_rec aproj = { r->atty, N, C, C, 0 }, attn = { r->ln1, N, C, 3 * C, 0 };
    FSC_TRY(fsc_layernorm_backward(c->dev, d, NULL, NULL, &ln2, st->dln2, p[FSC_B_LN2_W]));
    FSC_TRY(fsc_device_copy(c->dev, st->dres2, d, N * (size_t)C * sizeof(float)));
    FSC_TRY(fsc_linear_backward(c->dev, datty, NULL, NULL, &aproj, d, p[FSC_B_APROJ_W], 0.0f, 1.0f));
    FSC_TRY(fsc_attention_backward(c->dev, st->dqkv, &r->attn, datty, w));
    FSC_TRY(fsc_linear_backward(c->dev, st->dln1, NULL, NULL, &attn, st->dqkv, p[FSC_B_ATTN_W], 0.0f, 1.0f));
    return fsc_layernorm_backward(c->dev, d, NULL, NULL, &ln1, st->dln1, p[FSC_B_LN1_W]);
}

/* GPT-2's weight part: the attention half's products and the norms' parameter halves from the stash. */
static fsc_status gpt2_weight(const moe_block *y, const fsc_layer_call *c, const fsc_block_rec *r, const mb_stash *st) {
    const int C = y->o.C;
    const size_t N = N_of(y, c->B);
    const float *const *p = c->param;
    float *const *g = c->grad;
    fsc_layernorm_rec ln2 = { r->res2, r->ln2_mean, r->ln2_rstd, N, C }, ln1 = { r->inp, r->ln1_mean, r->ln1_rstd, N, C };
    fsc_linear_rec aproj = { r->atty, N, C, C, 0 }, attn = { r->ln1, N, C, 3 * C, 0 };
    FSC_TRY(fsc_layernorm_backward(c->dev, NULL, g[FSC_B_LN2_W], g[FSC_B_LN2_B], &ln2, st->dln2, p[FSC_B_LN2_W]));
    FSC_TRY(fsc_linear_backward(c->dev, NULL, g[FSC_B_APROJ_W], g[FSC_B_APROJ_B], &aproj, st->dres2,
                                p[FSC_B_APROJ_W], 0.0f, 1.0f));
    FSC_TRY(fsc_linear_backward(c->dev, NULL, g[FSC_B_ATTN_W], g[FSC_B_ATTN_B], &attn, st->dqkv, p[FSC_B_ATTN_W],
                                0.0f, 1.0f));
    return fsc_layernorm_backward(c->dev, NULL, g[FSC_B_LN1_W], g[FSC_B_LN1_B], &ln1, st->dln1, p[FSC_B_LN1_W]);
}

static fsc_status gpt2_bwd(const moe_block *y, const fsc_layer_call *c, float *dinp, const float *dout,
                           const void *in) {
    const size_t S = g_S(y, c->B), W = g_W(y, c->B), NC = N_of(y, c->B) * (size_t)y->o.C;
    float *dln2 = c->work, *d = dinp ? dinp : AT(c->work, S), *w = AT(c->work, 2 * S),
          *dqkv = AT(c->work, 2 * S + W);
    fsc_block_rec r;
    fsc_block_attn_rec_bind(&r, c->rec, c->B, y->o.T, y->o.C, y->o.heads);
    r.inp = in;
    const int weight_part = c->stash && c->grad[FSC_B_LN1_W];
    const mb_stash st = c->stash ? stash_of(y, c->stash, c->B) : (mb_stash){ 0 };
    if (weight_part) {
        FSC_TRY(moe_part_backward_weight(&y->b.mp, c, c->stash));
        return gpt2_weight(y, c, &r, &st);
    }
    FSC_TRY(fsc_device_copy(c->dev, d, dout, NC * sizeof(float))); /* the residual stream's gradient, in place */
    if (c->stash) { /* the input part */
        FSC_TRY(moe_part_backward_input(&y->b.mp, c, st.dln2, d, c->stash));
        return gpt2_input(y, c, d, &r, &st);
    }
    FSC_TRY(moe_part_backward(&y->b.mp, c, dln2, d)); /* out = res2 + moe(ln2): both get d */
    return fsc_block_attn_backward(c->dev, d, c->grad, &r, c->param, dln2, dqkv, w);
}

static fsc_status mb_bwd(const fsc_layer *l, const fsc_layer_call *c, float *dinp, const float *dout,
                         const void *in) {
    const moe_block *y = (const moe_block *)l;
    const size_t N = N_of(y, c->B), NC = N * (size_t)y->o.C;
    if (!y->llama) return gpt2_bwd(y, c, dinp, dout, in);
    const llama_map m = lmap(y, c->B);
    float *ln1 = AT(c->rec, m.ln1), *h = AT(c->rec, m.h);
    float *dln = AT(c->work, m.s0), *d = dinp ? dinp : AT(c->work, m.s1);
    const int weight_part = c->stash && c->grad[y->n1], input_part = c->stash && !weight_part;
    const mb_stash st = c->stash ? stash_of(y, c->stash, c->B) : (mb_stash){ 0 };
    fsc_rmsnorm_rec n2 = { .inp = h, .rstd = AT(c->rec, m.st2), .N = N, .C = y->o.C };
    fsc_rmsnorm_rec n1 = { .inp = in, .rstd = AT(c->rec, m.st1), .N = N, .C = y->o.C };
    float *g1 = input_part ? NULL : c->grad[y->n1], *g2 = input_part ? NULL : c->grad[y->n2]; /* the norms' halves */
    fsc_self_attn_config cf = attn_cfg(y, c->B);
    fsc_self_attn_rec ar;
    fsc_self_attn_rec_bind(&ar, AT(c->rec, m.attn), &cf);
    ar.inp = ln1;
    fsc_self_attn_params ap;
    fsc_self_attn_grads ag;
    llama_attn(y, c, &ap, &ag);
    if (weight_part) {
        FSC_TRY(moe_part_backward_weight(&y->b.mp, c, c->stash));
        FSC_TRY(fsc_rmsnorm_backward(c->dev, NULL, g2, &n2, st.dln2, c->param[y->n2]));
        FSC_TRY(layers_attn_split_weight(c->dev, &ar, &ap, &ag, st.dres2));
        return fsc_rmsnorm_backward(c->dev, NULL, g1, &n1, st.dln1, c->param[y->n1]);
    }
    FSC_TRY(fsc_device_copy(c->dev, d, dout, NC * sizeof(float))); /* d: the gradient w.r.t. out, then h, then x */
    float *dln2 = input_part ? st.dln2 : dln;
    if (input_part) FSC_TRY(moe_part_backward_input(&y->b.mp, c, dln2, d, c->stash));
    else FSC_TRY(moe_part_backward(&y->b.mp, c, dln2, d));
    FSC_TRY(fsc_rmsnorm_backward(c->dev, d, g2, &n2, dln2, c->param[y->n2]));
    if (input_part) {
        FSC_TRY(fsc_device_copy(c->dev, st.dres2, d, NC * sizeof(float))); /* the gradient at h */
        FSC_TRY(layers_attn_split_input(c->dev, &ar, &ap, d, st.dln1, AT(c->work, m.inner)));
        return dinp ? fsc_rmsnorm_backward(c->dev, dinp, NULL, &n1, st.dln1, c->param[y->n1]) : FSC_OK;
    }
    FSC_TRY(fsc_self_attn_backward(c->dev, dln, &ag, &ar, d, &ap, AT(c->work, m.inner)));
    return fsc_rmsnorm_backward(c->dev, dinp, g1, &n1, dln, c->param[y->n1]); /* dinp = d x, if asked */
}

static void mb_config(const fsc_layer *l, char *buf, size_t cap) {
    const moe_block *y = (const moe_block *)l;
    const fsc_moe_config *m = &y->b.mp.mc;
    snprintf(buf, cap, "{\"kind\":\"%s\",\"T\":%d,\"C\":%d,\"heads\":%d,\"kv_heads\":%d,\"F\":%d,"
             "\"rope_theta\":%.9g,\"eps\":%.9g,\"moe_experts\":%d,\"moe_top_k\":%d,\"moe_capacity\":%.9g,"
             "\"moe_aux\":%.9g}", y->llama ? "llama" : "gpt2", y->o.T, y->o.C, y->o.heads, y->o.kv_heads, m->hidden,
             (double)y->o.rope_theta, (double)y->o.eps, m->experts, m->top_k, (double)m->capacity_factor,
             (double)y->b.mp.aux);
}

static void mb_destroy(fsc_layer *l) { moe_part_free(&((moe_block *)l)->b.mp); }

static const fsc_layer_ops mb_ops = { .split = 1, .split_bytes = mb_split_bytes, .rec_bytes = mb_rec, .work_bytes = mb_work, .forward = mb_fwd,
                                      .backward = mb_bwd, .config = mb_config, .destroy = mb_destroy,
                                      .state_create = moe_state_create, .state_free = moe_state_free,
                                      .aux = moe_aux, .set_expert_group = moe_set_expert_group,
                                      .param_expert = moe_param_expert };

/* o is checked by fsc_layer_block (kind, sizes); kv_heads and F resolved there. */
fsc_status fsc_layer_block_moe(const fsc_block_opts *o, fsc_layer **out) {
    *out = NULL;
    const int llama = o->kind == FSC_BLOCK_LLAMA;
    if (o->separate_qkv || o->tp)
        return fsc_error(FSC_ERR_UNSUPPORTED, "block layer: an MoE block is %s only", o->tp ? "built without tensor "
                         "parallelism (tp)" : "packed (separate_qkv 0)");
    moe_part mp;
    FSC_TRY(moe_part_init(&mp, "block layer (moe)", o->T, o->C, o->F, o->moe_experts, o->moe_top_k, o->moe_capacity,
                          o->moe_aux));
    FSC_TRY(layer_new(sizeof(moe_block), llama ? "llama_moe_block" : "gpt2_moe_block", &mb_ops, out));
    moe_block *y = (moe_block *)*out;
    y->b.mp = mp;
    y->o = *o;
    y->llama = llama;
    y->b.l.in_bytes = (size_t)o->T * o->C * sizeof(float);
    y->b.l.out_floats = (size_t)o->T * o->C;
    const int64_t C = o->C, HS = C / o->heads, Q = (int64_t)o->heads * HS, KV = (int64_t)o->kv_heads * HS;
    const fsc_init w = fsc_init_normal(LAYER_STD), one = fsc_init_const(1.0f), zero = fsc_init_const(0.0f);
    if (llama) { /* LlamaDecoderLayer's order: attention, MLP, norms */
        FSC_TRY(layer_param(out, "self_attn.q_proj.weight", Q, C, w));
        FSC_TRY(layer_param(out, "self_attn.k_proj.weight", KV, C, w));
        FSC_TRY(layer_param(out, "self_attn.v_proj.weight", KV, C, w));
        FSC_TRY(layer_param(out, "self_attn.o_proj.weight", C, Q, w));
        FSC_TRY(moe_part_declare(out, &((moe_block *)*out)->b.mp, "mlp."));
        y = (moe_block *)*out;
        y->n1 = y->b.l.n_params, y->n2 = y->n1 + 1;
        FSC_TRY(layer_param(out, "input_layernorm.weight", C, 0, one));
        return layer_param(out, "post_attention_layernorm.weight", C, 0, one);
    }
    FSC_TRY(layer_param(out, "ln_1.weight", C, 0, one)); /* GPT2Block's order (nn.h's fsc_block_attn_*) */
    FSC_TRY(layer_param(out, "ln_1.bias", C, 0, zero));
    FSC_TRY(layer_param(out, "attn.c_attn.weight", C, 3 * C, w));
    FSC_TRY(layer_param(out, "attn.c_attn.bias", 3 * C, 0, zero));
    FSC_TRY(layer_param(out, "attn.c_proj.weight", C, C, w));
    FSC_TRY(layer_param(out, "attn.c_proj.bias", C, 0, zero));
    FSC_TRY(layer_param(out, "ln_2.weight", C, 0, one));
    FSC_TRY(layer_param(out, "ln_2.bias", C, 0, zero));
    return moe_part_declare(out, &((moe_block *)*out)->b.mp, "mlp.");
}
