/* Modules: the layers of a transformer (GPT-2's and Llama's) and simple ones (MSE), each a forward and a
 * backward built from the device kernels.
 *
 * A module holds no state. What forward saves for backward goes into a per-call record (fsc_*_rec) that
 * the caller owns, so a pipeline stage can keep several micro-batches in flight and activation
 * checkpointing can drop a record and rebuild it. Records point at memory the caller allocated (device
 * memory, FSC_TAG_ACTS); a record that refers to an input (`inp`) requires the caller to keep that input
 * unchanged until backward. Parameters are passed at the moment of use, never stored.
 *
 * Every pointer is a device pointer of dev. Conventions for gradients, as in plugin/device_ops.h:
 * parameter gradients always accumulate (+=); input gradients overwrite (=) or accumulate (+=) as each
 * function documents. Linear weights are stored [in, out] (HF Conv1D) unless w_out_in is set
 * ([out, in], torch Linear and the tied output head). */
#ifndef FSC_NN_H
#define FSC_NN_H
#include "export.h"
#include <stddef.h>
#include <stdint.h>
#include "status.h"
#include "device.h"

FSC_BEGIN_DECLS

/* ---- linear: out (N, OC) = inp (N, C) @ W + b ---------------------------------------------------- */
typedef struct {
    const float *inp; /* (N, C) the input, owned by the caller */
    size_t N;
    int C, OC;
    int w_out_in;     /* 0: w is (C, OC); 1: w is (OC, C) */
} fsc_linear_rec;

/* b may be NULL (no bias); rec may be NULL (no backward). */
fsc_status fsc_linear_forward(fsc_device *dev, float *out, fsc_linear_rec *rec, const float *inp,
                              const float *w, const float *b, size_t N, int C, int OC, int w_out_in);
/* dinp (N, C) = dout W^T + dinp_beta * dinp  (dinp_beta 0: overwrite, 1: accumulate);
 * dw = inp^T dout + dw_beta * dw              (dw_beta 1: accumulate, the usual; 0: overwrite);
 * db += sum over rows of dout (ascending).    Any of dinp, dw, db may be NULL to skip it. */
fsc_status fsc_linear_backward(fsc_device *dev, float *dinp, float *dw, float *db, const fsc_linear_rec *rec,
                               const float *dout, const float *w, float dinp_beta, float dw_beta);

/* ---- embedding: out (B, T, C) = wte[tok] + wpe[t] ------------------------------------------------ */
typedef struct {
    const int32_t *tok; /* (B, T) device token ids, owned by the caller */
    int B, T, C;
} fsc_embedding_rec;

fsc_status fsc_embedding_forward(fsc_device *dev, float *out, fsc_embedding_rec *rec, const int32_t *tok,
                                 const float *wte, const float *wpe, int B, int T, int C);
/* dwpe[t] += sum_b dout[b, t]; dwte[tok[b, t]] += dout[b, t] in (b, t) order. */
fsc_status fsc_embedding_backward(fsc_device *dev, float *dwte, float *dwpe, const fsc_embedding_rec *rec,
                                  const float *dout);

/* ---- layer norm over the last dim (eps 1e-5) ------------------------------------------------------- */
typedef struct {
    const float *inp; /* (N, C) owned by the caller */
    float *mean;      /* (N) saved, memory given to forward */
    float *rstd;      /* (N) saved */
    size_t N;
    int C;
} fsc_layernorm_rec;

/* mean, rstd: (N) buffers the record keeps. */
fsc_status fsc_layernorm_forward(fsc_device *dev, float *out, fsc_layernorm_rec *rec, float *mean, float *rstd,
                                 const float *inp, const float *w, const float *b, size_t N, int C);
/* dinp += (accumulates: the residual stream's gradient flows through it); dw += ; db += .
 * Either half alone, with the bits it has beside the other (a split backward's input and weight parts): dinp may
 * be NULL (only dw and db), or dw and db both NULL (only dinp); not all three. */
fsc_status fsc_layernorm_backward(fsc_device *dev, float *dinp, float *dw, float *db,
                                  const fsc_layernorm_rec *rec, const float *dout, const float *w);

/* ---- GELU (tanh approximation) ------------------------------------------------------------------- */
typedef struct {
    const float *inp; /* (n) owned by the caller */
    size_t n;
} fsc_gelu_rec;

fsc_status fsc_gelu_forward(fsc_device *dev, float *out, fsc_gelu_rec *rec, const float *inp, size_t n);
/* dinp = (overwrites) gelu'(inp) * dout */
fsc_status fsc_gelu_backward(fsc_device *dev, float *dinp, const fsc_gelu_rec *rec, const float *dout);

/* ---- residual: out = a + b; backward da += dout, db += dout (either may be NULL) ------------------ */
fsc_status fsc_residual_forward(fsc_device *dev, float *out, const float *a, const float *b, size_t n);
fsc_status fsc_residual_backward(fsc_device *dev, float *da, float *db, const float *dout, size_t n);

/* ---- causal multi-head self-attention (no projections) ---------------------------------------------
 * out (B, T, C) = heads_merge(softmax_causal(q k^T / sqrt(HS)) v) with q, k, v the three C-wide column
 * blocks of qkv (B, T, 3C), NH heads of HS = C / NH (head h in columns h*HS of each block). */
typedef struct {
    float *qkv;       /* (B, T, 3C) the input, saved */
    float *att;       /* (B, NH, T, T) softmax probabilities, saved (0 above the diagonal) */
    int B, T, C, NH;
} fsc_attention_rec;

/* Floats a record keeps: 3 B T C + B NH T T (each piece rounded up to 64 floats). */
size_t fsc_attention_saved_floats(int B, int T, int C, int NH);
/* Floats of scratch forward and backward need (not kept between calls): 2 B NH T T (rounded likewise). */
size_t fsc_attention_work_floats(int B, int T, int C, int NH);
/* Point a record at saved (fsc_attention_saved_floats floats). */
void fsc_attention_rec_bind(fsc_attention_rec *rec, float *saved, int B, int T, int C, int NH);
/* rec must be bound (its memory receives qkv and att). qkv may be rec->qkv itself: a caller that computes
 * the projection straight into the record saves a copy. */
fsc_status fsc_attention_forward(fsc_device *dev, float *out, fsc_attention_rec *rec, const float *qkv,
                                 float *work);
/* dqkv (B, T, 3C) = (overwrites) the gradient w.r.t. qkv. */
fsc_status fsc_attention_backward(fsc_device *dev, float *dqkv, const fsc_attention_rec *rec, const float *dout,
                                  float *work);

/* ---- softmax cross entropy ------------------------------------------------------------------------- */
typedef struct {
    const float *logits;    /* (N, V) row stride ld, owned by the caller */
    const int32_t *targets; /* (N) device, owned by the caller */
    size_t N;
    int V, ld;
} fsc_xent_rec;

/* losses (N) = -log softmax(logits[n])[targets[n]]. */
fsc_status fsc_xent_forward(fsc_device *dev, float *losses, fsc_xent_rec *rec, const float *logits,
                            const int32_t *targets, size_t N, int V, int ld);
/* dlogits (N, V), row stride ld = (overwrites) dscale * (softmax - onehot): the gradient of
 * dscale * sum_n losses[n]. */
fsc_status fsc_xent_backward(fsc_device *dev, float *dlogits, const fsc_xent_rec *rec, float dscale);

/* ---- RMS norm over the last dim (Llama): out = inp / sqrt(mean(inp^2) + eps) * w ------------------- */
typedef struct {
    const float *inp; /* (N, C) owned by the caller */
    float *rstd;      /* (N) saved, memory given to forward */
    size_t N;
    int C;
} fsc_rmsnorm_rec;

fsc_status fsc_rmsnorm_forward(fsc_device *dev, float *out, fsc_rmsnorm_rec *rec, float *rstd, const float *inp,
                               const float *w, size_t N, int C, float eps);
/* dinp += (accumulates, as layer norm's); dw += . dinp or dw may be NULL (not both): the other half alone. */
fsc_status fsc_rmsnorm_backward(fsc_device *dev, float *dinp, float *dw, const fsc_rmsnorm_rec *rec,
                                const float *dout, const float *w);

/* ---- rotary position embedding (transformers' apply_rotary_pos_emb with rotate_half) ---------------
 * H heads of D columns in rows of stride ld (row (b, t) at (b T + t) ld), positions t = 0..T-1, inv_freq
 * theta^(-2i/D) (fsc/plugin/device_ops.h gives the formula). Angles are computed in double; transformers computes
 * them in float32, so at position t the two differ by up to about t * 6e-8 radians (1e-6 at t = 16).
 * No record: backward needs only the sizes.
 * out may be inp; backward: dinp = (overwrites) the transposed rotation of dout, dinp may be dout. */
fsc_status fsc_rope_forward(fsc_device *dev, float *out, const float *inp, int B, int T, int H, int D, int ld,
                            float theta);
fsc_status fsc_rope_backward(fsc_device *dev, float *dinp, const float *dout, int B, int T, int H, int D, int ld,
                             float theta);

/* ---- SiLU, SwiGLU (silu(gate) * up) and the elementwise product --------------------------------------- */
typedef struct {
    const float *a, *b; /* (n) inputs owned by the caller: SiLU's input (b NULL); gate and up; the factors */
    size_t n;
} fsc_ew_rec;

fsc_status fsc_silu_forward(fsc_device *dev, float *out, fsc_ew_rec *rec, const float *inp, size_t n);
/* dinp = (overwrites) silu'(inp) * dout */
fsc_status fsc_silu_backward(fsc_device *dev, float *dinp, const fsc_ew_rec *rec, const float *dout);
fsc_status fsc_swiglu_forward(fsc_device *dev, float *out, fsc_ew_rec *rec, const float *gate, const float *up,
                              size_t n);
/* dgate, dup = (overwrite) the gradients; dgate may be dout (in place) */
fsc_status fsc_swiglu_backward(fsc_device *dev, float *dgate, float *dup, const fsc_ew_rec *rec, const float *dout);
fsc_status fsc_mul_forward(fsc_device *dev, float *out, fsc_ew_rec *rec, const float *a, const float *b, size_t n);
/* da += dout * b, db += dout * a (either may be NULL) */
fsc_status fsc_mul_backward(fsc_device *dev, float *da, float *db, const fsc_ew_rec *rec, const float *dout);

/* ---- squared error: losses (N) = sum over the row of (pred - target)^2 ------------------------------- */
typedef struct {
    const float *pred, *target; /* (N, C) owned by the caller */
    size_t N;
    int C;
} fsc_mse_rec;

fsc_status fsc_mse_forward(fsc_device *dev, float *losses, fsc_mse_rec *rec, const float *pred,
                           const float *target, size_t N, int C);
/* dpred (N, C) = (overwrites) the gradient of dscale * sum_n losses[n] = 2 dscale (pred - target).
 * Mean squared error over M elements: dscale = 1 / M. */
fsc_status fsc_mse_backward(fsc_device *dev, float *dpred, const fsc_mse_rec *rec, float dscale);

/* ---- SwiGLU MLP (Llama): out = down(silu(gate(x)) * up(x)), linears without bias --------------------
 * Weights stored [out, in] as torch's nn.Linear: gate and up (F, C), down (C, F). */
typedef struct {
    const float *inp;       /* (N, C) owned by the caller */
    float *gate, *up, *act; /* (N, F) each: the projections and silu(gate) * up, saved */
    size_t N;
    int C, F;
} fsc_swiglu_mlp_rec;

/* Floats a record keeps: 3 N F (each piece rounded up to 64 floats); scratch of backward: 2 N F (rounded). */
size_t fsc_swiglu_mlp_saved_floats(size_t N, int F);
size_t fsc_swiglu_mlp_work_floats(size_t N, int F);
void fsc_swiglu_mlp_rec_bind(fsc_swiglu_mlp_rec *rec, float *saved, size_t N, int C, int F);
/* out (N, C) may be NULL: stop once backward's record is complete (recomputation). */
fsc_status fsc_swiglu_mlp_forward(fsc_device *dev, float *out, fsc_swiglu_mlp_rec *rec, const float *inp,
                                  const float *w_gate, const float *w_up, const float *w_down);
/* dinp (N, C) = (overwrites) the input gradient; dw_* += . work: fsc_swiglu_mlp_work_floats. */
fsc_status fsc_swiglu_mlp_backward(fsc_device *dev, float *dinp, float *dw_gate, float *dw_up, float *dw_down,
                                   const fsc_swiglu_mlp_rec *rec, const float *dout, const float *w_gate,
                                   const float *w_up, const float *w_down, float *work);
/* The same where dinp and any dw_* may be NULL (not computed): the parts of a split backward (layers.h). */
fsc_status fsc_swiglu_mlp_backward_parts(fsc_device *dev, float *dinp, float *dw_gate, float *dw_up,
                                         float *dw_down, const fsc_swiglu_mlp_rec *rec, const float *dout,
                                         const float *w_gate, const float *w_up, const float *w_down, float *work);

/* ---- causal self-attention with projections, rotary embeddings and grouped-query heads (Llama) -------
 *   q = x Wq^T (+ bq), k = x Wk^T (+ bk), v = x Wv^T (+ bv);  q, k rotated (when rope_theta > 0);
 *   y = softmax_causal(q k^T / sqrt(HS)) v per head, query head h reading kv head h / (NH / KVH)
 *   (transformers' repeat_kv);   out = y Wo^T (+ bo).
 * Weights [out, in]: Wq (NH HS, C), Wk and Wv (KVH HS, C), Wo (C, NH HS). Biases may be NULL (Llama has none).
 * KVH divides NH; KVH = NH is plain multi-head attention. */
typedef struct {
    int B, T, C;      /* batch, sequence, model width */
    int NH, KVH, HS;  /* query heads, key/value heads, head size */
    float rope_theta; /* 0: no rotary embedding */
} fsc_self_attn_config;

typedef struct {
    const float *wq, *wk, *wv, *wo;
    const float *bq, *bk, *bv, *bo; /* NULL: no bias */
} fsc_self_attn_params;

typedef struct {
    float *wq, *wk, *wv, *wo; /* += ; any may be NULL to skip it */
    float *bq, *bk, *bv, *bo; /* += ; NULL where there is no bias or no gradient wanted */
} fsc_self_attn_grads;

typedef struct {
    const float *inp; /* (B, T, C) owned by the caller */
    float *q;         /* (B, T, NH HS) after the rotation, saved */
    float *k, *v;     /* (B, T, KVH HS), k after the rotation, saved */
    float *att;       /* (B, NH, T, T) softmax probabilities, saved (0 above the diagonal) */
    float *y;         /* (B, T, NH HS) the heads' output, input of the output projection, saved */
    fsc_self_attn_config cfg;
} fsc_self_attn_rec;

/* Floats a record keeps: 2 B T NH HS + 2 B T KVH HS + B NH T T (each piece rounded up to 64 floats). */
size_t fsc_self_attn_saved_floats(const fsc_self_attn_config *cfg);
/* Scratch of forward and backward: 2 B NH T T + 2 B T NH HS + 2 B T KVH HS (rounded likewise). */
size_t fsc_self_attn_work_floats(const fsc_self_attn_config *cfg);
void fsc_self_attn_rec_bind(fsc_self_attn_rec *rec, float *saved, const fsc_self_attn_config *cfg);
/* out (B, T, C) may be NULL: stop once backward's record is complete (recomputation). */
fsc_status fsc_self_attn_forward(fsc_device *dev, float *out, fsc_self_attn_rec *rec, const float *inp,
                                 const fsc_self_attn_params *p, float *work);
/* dinp (B, T, C) = (overwrites) the input gradient; g: parameter gradients (+=). */
fsc_status fsc_self_attn_backward(fsc_device *dev, float *dinp, const fsc_self_attn_grads *g,
                                  const fsc_self_attn_rec *rec, const float *dout, const fsc_self_attn_params *p,
                                  float *work);
/* The same where dinp and any gradient of g may be NULL (not computed): the parts of a split backward. */
fsc_status fsc_self_attn_backward_parts(fsc_device *dev, float *dinp, const fsc_self_attn_grads *g,
                                        const fsc_self_attn_rec *rec, const float *dout,
                                        const fsc_self_attn_params *p, float *work);

/* The attention core that both attentions share (attention.c), on views: rows of stride ldq/ldk/ldv/ldo,
 * sequences of T rows one after another; query head h at column h HS of q and out, kv head g at column
 * g HS of k and v; h reads g = h / (NH / KVH). att (B, NH, T, T) receives the probabilities; work holds
 * 2 B NH T T floats (rounded to 64 each). Backward overwrites dq, dk, dv (a kv head's gradient sums its
 * query heads in ascending order). */
typedef struct {
    int B, T, NH, KVH, HS;
} fsc_attn_core_dims;
fsc_status fsc_attn_core_forward(fsc_device *dev, const fsc_attn_core_dims *d, float *out, int ldo, const float *q,
                                 int ldq, const float *k, int ldk, const float *v, int ldv, float *att, float *work);
fsc_status fsc_attn_core_backward(fsc_device *dev, const fsc_attn_core_dims *d, float *dq, float *dk, float *dv,
                                  const float *dout, int ldo, const float *q, int ldq, const float *k, int ldk,
                                  const float *v, int ldv, const float *att, float *work);

/* ---- pre-LayerNorm transformer block (GPT-2) -------------------------------------------------------
 *   res2 = x + c_proj(attention(c_attn(ln_1(x))));   out = res2 + mlp.c_proj(gelu(mlp.c_fc(ln_2(res2))))
 * Parameters are the block's 12 tensors in HF order, at these offsets: p[FSC_B_LN1_W] ... (gpt.h lays a GPT-2's
 * blocks out so; they live here, with the block that reads them, so that nn needs no model's header) */
enum {
    FSC_B_LN1_W = 0, FSC_B_LN1_B, FSC_B_ATTN_W, FSC_B_ATTN_B, FSC_B_APROJ_W, FSC_B_APROJ_B,
    FSC_B_LN2_W, FSC_B_LN2_B, FSC_B_FC_W, FSC_B_FC_B, FSC_B_MPROJ_W, FSC_B_MPROJ_B
};
typedef struct {
    const float *inp;             /* (B, T, C) block input, owned by the caller */
    float *ln1;                   /* (B, T, C) */
    float *ln1_mean, *ln1_rstd;   /* (B, T) */
    fsc_attention_rec attn;       /* qkv (B, T, 3C), att (B, NH, T, T) */
    float *atty;                  /* (B, T, C) attention output, input of c_proj */
    float *res2;                  /* (B, T, C) residual after attention */
    float *ln2;                   /* (B, T, C) */
    float *ln2_mean, *ln2_rstd;   /* (B, T) */
    float *fch;                   /* (B, T, 4C) c_fc output */
    float *fch_gelu;              /* (B, T, 4C) */
    int B, T, C, NH;
} fsc_block_rec;

/* Floats a block record keeps: 15 B T C + 4 B T + B NH T T (each piece rounded up to 64 floats). */
size_t fsc_block_saved_floats(int B, int T, int C, int NH);
/* Floats of scratch forward and backward need: 5 B T C + max(4 B T C, 2 B NH T T) (rounded up likewise). */
size_t fsc_block_work_floats(int B, int T, int C, int NH);
void fsc_block_rec_bind(fsc_block_rec *rec, float *saved, int B, int T, int C, int NH);
/* Forward of a bound record. out (B, T, C) may be NULL: then the block stops once everything backward
 * needs is saved (the recomputation of activation checkpointing). p: the 12 parameters. */
fsc_status fsc_block_forward(fsc_device *dev, float *out, fsc_block_rec *rec, const float *inp,
                             const float *const *p, float *work);
/* dres (B, T, C): on entry the gradient w.r.t. the block output, on return the gradient w.r.t. its
 * input (updated in place: the residual stream's gradient). g: the 12 gradients (+=). */
fsc_status fsc_block_backward(fsc_device *dev, float *dres, float *const *g, const fsc_block_rec *rec,
                              const float *const *p, float *work);

/* The attention half alone, for blocks with another MLP (lib/layers/block_moe.c), and the dense block's own:
 *   res2 = x + c_proj(attention(c_attn(ln_1(x))));   ln2 = ln_2(res2)
 * Its record holds the fields up to ln2_rstd (fch and fch_gelu NULL): 4 B T C + 4 B T + the attention's.
 * Forward: proj (B, T, C) and attn_work (fsc_attention_work_floats) are scratch. Backward: dres holds the
 * gradient w.r.t. res2 from the residual path on entry, w.r.t. x on return (in place); dln2 (B, T, C), the
 * gradient w.r.t. ln2, is overwritten (scratch); dqkv (B, T, 3C) and attn_work are scratch. */
size_t fsc_block_attn_saved_floats(int B, int T, int C, int NH);
void fsc_block_attn_rec_bind(fsc_block_rec *rec, float *saved, int B, int T, int C, int NH);
fsc_status fsc_block_attn_forward(fsc_device *dev, fsc_block_rec *rec, const float *inp, const float *const *p,
                                  float *proj, float *attn_work);
fsc_status fsc_block_attn_backward(fsc_device *dev, float *dres, float *const *g, const fsc_block_rec *rec,
                                   const float *const *p, float *dln2, float *dqkv, float *attn_work);

FSC_END_DECLS

#endif
