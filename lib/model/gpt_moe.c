/* The GPT's MoE block: the dense block's attention half (pre-LayerNorm, as lib/nn/block.c) followed by an
 * MoE MLP (moe.h) on ln_2 of the residual stream. The MoE layer's tensors are the block's tensors from
 * index FSC_B_FC_W on (gpt.h), handed over as its parameter table.
 * Not here: the dense block (lib/nn/block.c), the layer itself (lib/moe/), the record layout (gpt_run.c). */
#include "gpt_moe.h"
#include "fsc/device_impl.h"

static size_t r64(size_t n) { return (n + 63) / 64 * 64; }

size_t gpt_moe_saved_floats(int B, int T, int C, int NH) {
    size_t btc = r64((size_t)B * T * C), bt = r64((size_t)B * T);
    return 4 * btc + 4 * bt + fsc_attention_saved_floats(B, T, C, NH); /* ln1, atty, res2, ln2; statistics */
}

/* Scratch: A (B, T, 3C) qkv, then dqkv; W the attention scratch; S (B, T, C) projection and MoE outputs,
 * then dln2, datty, dln1. */
size_t gpt_moe_work_floats(int B, int T, int C, int NH) {
    return r64(3 * (size_t)B * T * C) + fsc_attention_work_floats(B, T, C, NH) + r64((size_t)B * T * C);
}

void gpt_moe_rec_bind(gpt_moe_rec *rec, float *saved, int B, int T, int C, int NH) {
    size_t btc = r64((size_t)B * T * C), bt = r64((size_t)B * T);
    float *p = saved;
    rec->inp = NULL;
    rec->ln1 = p;      p += btc;
    rec->atty = p;     p += btc;
    rec->res2 = p;     p += btc;
    rec->ln2 = p;      p += btc;
    rec->ln1_mean = p; p += bt;
    rec->ln1_rstd = p; p += bt;
    rec->ln2_mean = p; p += bt;
    rec->ln2_rstd = p; p += bt;
    fsc_attention_rec_bind(&rec->attn, p, B, T, C, NH);
    rec->B = B, rec->T = T, rec->C = C, rec->NH = NH;
}

typedef struct {
    float *a, *w, *s;
} moe_work;

static moe_work split_work(float *work, const gpt_moe_rec *r) {
    moe_work mw;
    mw.a = work;
    mw.w = work + r64(3 * (size_t)r->B * r->T * r->C);
    mw.s = mw.w + fsc_attention_work_floats(r->B, r->T, r->C, r->NH);
    return mw;
}

fsc_status gpt_moe_forward(fsc_device *dev, float *out, gpt_moe_rec *rec, const float *inp, fsc_moe *moe,
                           const float *const *p, float *work, fsc_moe_stats *stats) {
    int C = rec->C;
    size_t N = (size_t)rec->B * rec->T;
    if (!rec->moe) return fsc_error(FSC_ERR_STATE, "moe block forward: record not initialized");
    moe_work mw = split_work(work, rec);
    rec->inp = inp;
    FSC_TRY(fsc_layernorm_forward(dev, rec->ln1, NULL, rec->ln1_mean, rec->ln1_rstd, inp, p[FSC_B_LN1_W],
                                  p[FSC_B_LN1_B], N, C));
    FSC_TRY(fsc_linear_forward(dev, mw.a, NULL, rec->ln1, p[FSC_B_ATTN_W], p[FSC_B_ATTN_B], N, C, 3 * C, 0));
    FSC_TRY(fsc_attention_forward(dev, rec->atty, &rec->attn, mw.a, mw.w));
    FSC_TRY(fsc_linear_forward(dev, mw.s, NULL, rec->atty, p[FSC_B_APROJ_W], p[FSC_B_APROJ_B], N, C, C, 0));
    FSC_TRY(fsc_residual_forward(dev, rec->res2, inp, mw.s, N * C));
    FSC_TRY(fsc_layernorm_forward(dev, rec->ln2, NULL, rec->ln2_mean, rec->ln2_rstd, rec->res2, p[FSC_B_LN2_W],
                                  p[FSC_B_LN2_B], N, C));
    FSC_TRY(fsc_moe_forward(moe, mw.s, rec->moe, rec->ln2, p + FSC_B_FC_W, stats));
    return fsc_residual_forward(dev, out, rec->res2, mw.s, N * C);
}

fsc_status gpt_moe_backward(fsc_device *dev, float *dres, float *const *g, gpt_moe_rec *rec, fsc_moe *moe,
                            const float *const *p, float *work, float daux) {
    int C = rec->C;
    size_t N = (size_t)rec->B * rec->T;
    if (!rec->moe || !rec->inp) return fsc_error(FSC_ERR_STATE, "moe block backward: the record holds no forward");
    moe_work mw = split_work(work, rec);
    /* out = res2 + moe(ln2): the residual passes dres through, the MoE branch gets dres too */
    FSC_TRY(fsc_moe_backward(moe, mw.s, g + FSC_B_FC_W, rec->moe, dres, p + FSC_B_FC_W, daux)); /* dln2 */
    fsc_layernorm_rec ln2 = { rec->res2, rec->ln2_mean, rec->ln2_rstd, N, C };
    FSC_TRY(fsc_layernorm_backward(dev, dres, g[FSC_B_LN2_W], g[FSC_B_LN2_B], &ln2, mw.s, p[FSC_B_LN2_W]));
    fsc_linear_rec aproj = { rec->atty, N, C, C, 0 };
    FSC_TRY(fsc_linear_backward(dev, mw.s, g[FSC_B_APROJ_W], g[FSC_B_APROJ_B], &aproj, dres, p[FSC_B_APROJ_W],
                                0.0f, 1.0f)); /* datty */
    FSC_TRY(fsc_attention_backward(dev, mw.a, &rec->attn, mw.s, mw.w)); /* dqkv */
    fsc_linear_rec attn = { rec->ln1, N, C, 3 * C, 0 };
    FSC_TRY(fsc_linear_backward(dev, mw.s, g[FSC_B_ATTN_W], g[FSC_B_ATTN_B], &attn, mw.a, p[FSC_B_ATTN_W],
                                0.0f, 1.0f)); /* dln1 */
    fsc_layernorm_rec ln1 = { rec->inp, rec->ln1_mean, rec->ln1_rstd, N, C };
    return fsc_layernorm_backward(dev, dres, g[FSC_B_LN1_W], g[FSC_B_LN1_B], &ln1, mw.s, p[FSC_B_LN1_W]);
}
