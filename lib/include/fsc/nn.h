/* Modules: the layers of a transformer, each a forward and a backward built from the device kernels.
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
/* dinp += (accumulates: the residual stream's gradient flows through it); dw += ; db += . */
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

/* ---- pre-LayerNorm transformer block (GPT-2) -------------------------------------------------------
 *   res2 = x + c_proj(attention(c_attn(ln_1(x))));   out = res2 + mlp.c_proj(gelu(mlp.c_fc(ln_2(res2))))
 * Parameters are the block's 12 tensors in HF order (FSC_B_* offsets of gpt.h): p[FSC_B_LN1_W] ... */
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

/* The attention half alone, for blocks with another MLP (lib/model/gpt_moe.c), and the dense block's own:
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
