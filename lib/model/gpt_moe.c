/* The GPT's MoE block: the dense block's attention half (fsc_block_attn_*, lib/nn/block.c) followed by an
 * MoE MLP (moe.h) on ln_2 of the residual stream. The MoE layer's tensors are the block's tensors from
 * index FSC_B_FC_W on (gpt.h), handed over as its parameter table.
 * Not here: the dense block (lib/nn/block.c), the layer itself (lib/moe/), the record layout (gpt_run.c). */
#include "gpt_moe.h"
#include "fsc/device_impl.h"

static size_t r64(size_t n) { return (n + 63) / 64 * 64; }

/* Scratch: A (B, T, 3C) dqkv in backward; W the attention scratch; S (B, T, C) projection and MoE outputs,
 * then dln2, datty, dln1. */
size_t gpt_moe_work_floats(int B, int T, int C, int NH) {
    return r64(3 * (size_t)B * T * C) + fsc_attention_work_floats(B, T, C, NH) + r64((size_t)B * T * C);
}

typedef struct {
    float *a, *w, *s;
} moe_work;

static moe_work split_work(float *work, const fsc_block_rec *r) {
    moe_work mw;
    mw.a = work;
    mw.w = work + r64(3 * (size_t)r->B * r->T * r->C);
    mw.s = mw.w + fsc_attention_work_floats(r->B, r->T, r->C, r->NH);
    return mw;
}

fsc_status gpt_moe_forward(fsc_device *dev, float *out, gpt_moe_rec *rec, const float *inp, fsc_moe *moe,
                           const float *const *p, float *work, fsc_moe_stats *stats) {
    fsc_block_rec *blk = &rec->blk;
    if (!rec->moe) return fsc_error(FSC_ERR_STATE, "moe block forward: record not initialized");
    moe_work mw = split_work(work, blk);
    FSC_TRY(fsc_block_attn_forward(dev, blk, inp, p, mw.s, mw.w));
    FSC_TRY(fsc_moe_forward(moe, mw.s, rec->moe, blk->ln2, p + FSC_B_FC_W, stats));
    return fsc_residual_forward(dev, out, blk->res2, mw.s, (size_t)blk->B * blk->T * blk->C);
}

fsc_status gpt_moe_backward(fsc_device *dev, float *dres, float *const *g, gpt_moe_rec *rec, fsc_moe *moe,
                            const float *const *p, float *work, float daux) {
    if (!rec->moe || !rec->blk.inp)
        return fsc_error(FSC_ERR_STATE, "moe block backward: the record holds no forward");
    moe_work mw = split_work(work, &rec->blk);
    /* out = res2 + moe(ln2): the residual passes dres through, the MoE branch gets dres too */
    FSC_TRY(fsc_moe_backward(moe, mw.s, g + FSC_B_FC_W, rec->moe, dres, p + FSC_B_FC_W, daux)); /* dln2 */
    return fsc_block_attn_backward(dev, dres, g, &rec->blk, p, mw.s, mw.a, mw.w);
}
