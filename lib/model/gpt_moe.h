/* Private: the GPT's MoE block (gpt_moe.c) for gpt_run.c. */
#ifndef FSC_GPT_MOE_H
#define FSC_GPT_MOE_H
#include "fsc/gpt.h"
#include "fsc/nn.h"

/* What an MoE block's forward keeps for backward: the dense block's attention half, and the MoE layer's
 * record (device memory of its own). */
typedef struct {
    const float *inp;             /* (B, T, C) block input, owned by the caller */
    float *ln1;                   /* (B, T, C) */
    float *ln1_mean, *ln1_rstd;   /* (B, T) */
    fsc_attention_rec attn;       /* qkv (B, T, 3C), att (B, NH, T, T) */
    float *atty;                  /* (B, T, C) attention output, input of c_proj */
    float *res2;                  /* (B, T, C) residual after attention */
    float *ln2;                   /* (B, T, C) the MoE layer's input */
    float *ln2_mean, *ln2_rstd;   /* (B, T) */
    fsc_moe_rec *moe;             /* B T tokens, one dispatch group */
    int B, T, C, NH;
} gpt_moe_rec;

/* Floats the record keeps in the caller's memory (each piece rounded up to 64 floats), and the scratch
 * forward and backward need. */
size_t gpt_moe_saved_floats(int B, int T, int C, int NH);
size_t gpt_moe_work_floats(int B, int T, int C, int NH);
/* Point the record at saved (gpt_moe_saved_floats); its MoE record (rec->moe) is the caller's to make
 * (fsc_moe_rec_create with B T tokens in one group) and free. */
void gpt_moe_rec_bind(gpt_moe_rec *rec, float *saved, int B, int T, int C, int NH);
/*   res2 = x + c_proj(attention(c_attn(ln_1(x))));   out = res2 + moe(ln_2(res2))
 * p: the block's tensors (gpt.h: 8 dense ones, the gate, the experts). stats: the MoE layer's. */
fsc_status gpt_moe_forward(fsc_device *dev, float *out, gpt_moe_rec *rec, const float *inp, fsc_moe *moe,
                           const float *const *p, float *work, fsc_moe_stats *stats);
/* dres (B, T, C): the gradient w.r.t. the block output in, w.r.t. its input out (in place). g: the block's
 * gradients (+=). daux: the gradient of the objective w.r.t. the layer's load-balancing loss. */
fsc_status gpt_moe_backward(fsc_device *dev, float *dres, float *const *g, gpt_moe_rec *rec, fsc_moe *moe,
                            const float *const *p, float *work, float daux);

#endif
