/* The GPT's MoE block: the dense block's attention half (fsc_block_attn_*, lib/nn/block.c) followed by an
 * MoE MLP (moe.h) on ln_2 of the residual stream. The MoE layer's tensors are the block's tensors from
 * index FSC_B_FC_W on (gpt.h), handed over as its parameter table.
 * Not here: the dense block (lib/nn/block.c), the layer itself (lib/moe/), the record layout (gpt_run.c). */
#include "gpt_moe.h"
#include "core/device_impl.h"

static size_t r64(size_t n) { return (n + 63) / 64 * 64; }

/* Scratch: S (B, T, C) the projection and MoE outputs, then dln2, datty, dln1; W the attention scratch;
 * A (B, T, 3C) dqkv in backward. */
size_t gpt_moe_work_floats(int B, int T, int C, int NH) {
    return r64((size_t)B * T * C) + fsc_attention_work_floats(B, T, C, NH) + r64(3 * (size_t)B * T * C);
}

static float *w_of(float *work, const fsc_block_rec *r) { return work + r64((size_t)r->B * r->T * r->C); }

fsc_status gpt_moe_forward(fsc_device *dev, float *out, gpt_moe_rec *rec, const float *inp, fsc_moe *moe,
                           const float *const *p, float *work, fsc_moe_stats *stats) {
    fsc_block_rec *blk = &rec->blk;
    if (!rec->moe) return fsc_error(FSC_ERR_STATE, "moe block forward: record not initialized");
    FSC_TRY(fsc_block_attn_forward(dev, blk, inp, p, work, w_of(work, blk)));
    FSC_TRY(fsc_moe_forward(moe, work, rec->moe, blk->ln2, p + FSC_B_FC_W, stats));
    return fsc_residual_forward(dev, out, blk->res2, work, (size_t)blk->B * blk->T * blk->C);
}

fsc_status gpt_moe_backward(fsc_device *dev, float *dres, float *const *g, gpt_moe_rec *rec, fsc_moe *moe,
                            const float *const *p, float *work, float daux) {
    if (!rec->moe || !rec->blk.inp)
        return fsc_error(FSC_ERR_STATE, "moe block backward: the record holds no forward");
    const fsc_block_rec *blk = &rec->blk;
    float *w = w_of(work, blk), *dqkv = w + fsc_attention_work_floats(blk->B, blk->T, blk->C, blk->NH);
    /* out = res2 + moe(ln2): the residual passes dres through, the MoE branch gets dres too */
    FSC_TRY(fsc_moe_backward(moe, work, g + FSC_B_FC_W, rec->moe, dres, p + FSC_B_FC_W, daux)); /* dln2 */
    return fsc_block_attn_backward(dev, dres, g, blk, p, work, dqkv, w);
}
