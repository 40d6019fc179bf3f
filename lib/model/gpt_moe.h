/* Private: the GPT's MoE block (gpt_moe.c) for gpt_run.c. */
#ifndef FSC_GPT_MOE_H
#define FSC_GPT_MOE_H
#include "fsc/gpt.h"
#include "fsc/nn.h"

/* What an MoE block's forward keeps for backward: the dense block's attention half (bound with
 * fsc_block_attn_rec_bind to fsc_block_attn_saved_floats in the caller's memory), and the MoE layer's record
 * (device memory of its own: the caller makes it with fsc_moe_rec_create, B T tokens in one group, and frees it). */
typedef struct {
    fsc_block_rec blk; /* fch, fch_gelu unused */
    fsc_moe_rec *moe;  /* B T tokens, one dispatch group */
} gpt_moe_rec;

/* Floats of scratch forward and backward need (each piece rounded up to 64 floats). */
size_t gpt_moe_work_floats(int B, int T, int C, int NH);
/*   res2 = x + c_proj(attention(c_attn(ln_1(x))));   out = res2 + moe(ln_2(res2))
 * p: the block's tensors (gpt.h: 8 dense ones, the gate, the experts). stats: the MoE layer's. */
fsc_status gpt_moe_forward(fsc_device *dev, float *out, gpt_moe_rec *rec, const float *inp, fsc_moe *moe,
                           const float *const *p, float *work, fsc_moe_stats *stats);
/* dres (B, T, C): the gradient w.r.t. the block output in, w.r.t. its input out (in place). g: the block's
 * gradients (+=). daux: the gradient of the objective w.r.t. the layer's load-balancing loss. */
fsc_status gpt_moe_backward(fsc_device *dev, float *dres, float *const *g, gpt_moe_rec *rec, fsc_moe *moe,
                            const float *const *p, float *work, float daux);

#endif
