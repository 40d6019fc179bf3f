/* Megatron-style tensor parallelism: the building blocks the layers' tensor-parallel forms are made of.
 *
 * A tensor group (fsc_comm *tp, T ranks) shares every layer: column-parallel linears split output
 * features, row-parallel linears split input features and sum partial products, the vocabulary is split
 * in T contiguous slices. Conjugate operators (Megatron's names):
 *   f (copy to the group):     identity forward, all-reduce backward
 *   g (reduce from the group): all-reduce forward, identity backward
 * Sequence parallelism replaces them around the layer norms and residuals: the residual stream is split in
 * T contiguous ranges of token rows (the B*T rows of (B, T, C)), an all-gather precedes the column-parallel
 * linears (reduce-scatter in backward) and a reduce-scatter follows the row-parallel ones (all-gather in
 * backward).
 *
 * Every buffer is a device pointer of dev unless named host. Shapes use N = B*T rows; "Nl" = N/T rows of a
 * sequence shard. Weights are stored [in, out] (HF Conv1D) as in nn.h; a rank's slice of a weight is
 * contiguous in its own layout (column slice (C, OC/T), row slice (C/T, OC)).
 *
 * Not bitwise: a row-parallel product sums its inner dimension in T pieces that are then added in rank
 * order, and OpenBLAS's sgemm rounds an element differently depending on where it falls in the matrix, so
 * even a column slice of a product is not bit-equal to the same columns of the full product. Pure data
 * movement (f, g on one rank, the gathers, the vocab-parallel embedding) is bit-exact.
 * Tensor parallelism is a property of layers: layers.h's layers take a tensor group in their options and are
 * built from these blocks (a user's layer can be too: docs/tensor_parallel.md); the engine runs a model built on
 * the tensor group under any strategy and pipeline schedule (parallel.h's fsc_engine_create_built). Not here:
 * mixture of experts (moe.h). */
#ifndef FSC_TP_H
#define FSC_TP_H
#include "export.h"
#include <stddef.h>
#include <stdint.h>
#include "status.h"
#include "device.h"
#include "comm.h"
#include "nn.h"

FSC_BEGIN_DECLS

/* ---- conjugate operators and sequence-parallel regions (in place allowed: out == inp) ---------------- */
/* f forward: out = inp. */
fsc_status fsc_tp_f_forward(fsc_device *dev, fsc_comm *tp, float *out, const float *inp, size_t n);
/* f backward: dinp = sum over the group of dout (all-reduce, rank order). */
fsc_status fsc_tp_f_backward(fsc_device *dev, fsc_comm *tp, float *dinp, const float *dout, size_t n);
/* g forward: out = sum over the group of inp. */
fsc_status fsc_tp_g_forward(fsc_device *dev, fsc_comm *tp, float *out, const float *inp, size_t n);
/* g backward: dinp = dout. */
fsc_status fsc_tp_g_backward(fsc_device *dev, fsc_comm *tp, float *dinp, const float *dout, size_t n);
/* Sequence parallel: out (N, C) = the T shards (Nl, C) stacked in rank order (all-gather); its backward is
 * a reduce-scatter of dout (N, C) into dinp (Nl, C). n = Nl * C. */
fsc_status fsc_tp_sp_gather(fsc_comm *tp, float *out, const float *inp, size_t n);
fsc_status fsc_tp_sp_reduce_scatter(fsc_comm *tp, float *out, const float *inp, size_t n);

/* ---- column-parallel linear: out = inp (N, C) @ W[:, slice] + b[slice] ----------------------------------
 * w (C, OCl) and b (OCl) are this rank's slice of a (C, OCl * T) weight; b may be NULL. The input is
 * replicated (the f operator). With gather, out is (N, OCl * T), the whole output (all-gather of the
 * slices, then a layout shuffle); otherwise out is (N, OCl). */
typedef struct {
    fsc_linear_rec lin; /* the local product: inp (N, C), OC = OCl */
    int gather;         /* out was gathered */
} fsc_tp_linear_rec;

/* Floats of scratch: gather ? 2 N OCl T : 0 for forward; gather ? N OCl T : 0 for backward. */
size_t fsc_tp_column_work_floats(size_t N, int OCl, int T, int gather);
fsc_status fsc_tp_column_forward(fsc_device *dev, fsc_comm *tp, float *out, fsc_tp_linear_rec *rec,
                                 const float *inp, const float *w, const float *b, size_t N, int C, int OCl,
                                 int gather, float *work);
/* dout: (N, OCl), or (N, OCl T) when the forward gathered (this rank's columns are used).
 * dinp (N, C) = (overwrites) the sum over the group of dout_slice @ w^T; dw +=; db += (db may be NULL). */
fsc_status fsc_tp_column_backward(fsc_device *dev, fsc_comm *tp, float *dinp, float *dw, float *db,
                                  const fsc_tp_linear_rec *rec, const float *dout, const float *w, float *work);

/* ---- row-parallel linear: out (N, OC) = sum over the group of inp (N, Cl) @ w (Cl, OC), then + b --------
 * inp is this rank's slice of the input features (a column-parallel layer's output); b (OC) is replicated
 * and added once, after the reduction (b may be NULL). */
fsc_status fsc_tp_row_forward(fsc_device *dev, fsc_comm *tp, float *out, fsc_linear_rec *rec, const float *inp,
                              const float *w, const float *b, size_t N, int Cl, int OC);
/* dout (N, OC) replicated. dinp (N, Cl) = (overwrites) dout @ w^T; dw +=; db += the rows of dout (every
 * rank gets the same full bias gradient: no reduction needed). */
fsc_status fsc_tp_row_backward(fsc_device *dev, fsc_comm *tp, float *dinp, float *dw, float *db,
                               const fsc_linear_rec *rec, const float *dout, const float *w);

/* ---- vocab-parallel embedding ---------------------------------------------------------------------------
 * Rank r owns rows [r Vl, (r+1) Vl) of wte (V = T Vl). Tokens outside the slice contribute zero rows; the
 * partial embeddings are summed over the group (all-reduce, or reduce-scatter under sequence parallelism),
 * then wpe is added once. Exactly one rank contributes a non-zero row per token, so the result is the
 * unsharded embedding bit for bit. Token ids are first mapped to this slice on the host. */
/* local[i] = tok[i] - v0 when it is in [v0, v0 + Vl), else Vl (the zero row). Host arrays. */
void fsc_tp_vocab_localize(int32_t *local, const int32_t *tok, size_t n, int v0, int Vl);

typedef struct {
    const int32_t *tok; /* (B, T) device local ids from fsc_tp_vocab_localize, owned by the caller */
    int B, T, C, Vl;
    int sp;             /* out was reduce-scattered to a sequence shard */
} fsc_tp_embedding_rec;

/* Floats of scratch forward and backward need: (Vl + 1) C + T C + (sp ? B T C : 0), each rounded to 64. */
size_t fsc_tp_embedding_work_floats(int B, int T, int C, int Vl, int sp);
/* out: (B, T, C), or with sp the rank's shard (B T / size, C) of it (B T must divide by the group size). */
fsc_status fsc_tp_embedding_forward(fsc_device *dev, fsc_comm *tp, float *out, fsc_tp_embedding_rec *rec,
                                    const int32_t *tok, const float *wte, const float *wpe, int B, int T, int C,
                                    int Vl, int sp, float *work);
/* dout: (B, T, C) replicated (sp: the full gradient, gathered by the caller). dwte (Vl, C) += in (b, t)
 * order for the tokens of this slice; dwpe (T, C) += over b ascending (the full sum on every rank). */
fsc_status fsc_tp_embedding_backward(fsc_device *dev, fsc_comm *tp, float *dwte, float *dwpe,
                                     const fsc_tp_embedding_rec *rec, const float *dout, float *work);

/* ---- vocab-parallel cross entropy -------------------------------------------------------------------------
 * logits (N, ld): columns [0, Vl) hold this rank's slice of the vocabulary, column Vl is scratch the layer
 * writes (ld >= Vl + 1). The logits are never gathered: per row, each rank computes its log-sum-exp
 * lse_r = log sum_j exp(z_j) over its slice and, on the rank owning the target, lse_r - z_target (both with
 * the device's cross-entropy kernel). Then, over the group:
 *   all-reduce max   M = max_r lse_r
 *   all-reduce sum   S = sum_r exp(lse_r - M)            (the sum of exponentials, scaled by exp(-M))
 *                    U = z_target - M                    (the target logit; packed with S in one call)
 *   loss = log S - U.
 * Backward: dlogits = dscale (softmax(z) - onehot(target)) with the softmax over the whole vocabulary: the
 * scratch column gets the log of the other ranks' mass, q = log(exp(lse) - exp(lse_r)), so that the
 * device's cross-entropy gradient over Vl + 1 columns normalizes by the global sum. */
typedef struct {
    float *logits;      /* (N, ld), owned by the caller */
    int32_t *tgt;       /* (N) device: local target, or Vl on ranks not owning it (caller memory) */
    float *q;           /* (N) device: the scratch column's value for backward (caller memory) */
    size_t N;
    int Vl, ld;
} fsc_tp_xent_rec;

/* Device floats of scratch forward needs: 7 N + 64 (N rounded up to 64); backward needs 64. */
size_t fsc_tp_xent_work_floats(size_t N);
/* targets: host (N) global ids. losses (N) device = the per-token losses (the same on every rank).
 * tgt and q: (N) device buffers the record keeps for backward. */
fsc_status fsc_tp_xent_forward(fsc_device *dev, fsc_comm *tp, float *losses, fsc_tp_xent_rec *rec,
                               float *logits, const int32_t *targets, int32_t *tgt, float *q, size_t N, int Vl,
                               int ld, int v0, float *work);
/* dlogits (N, ld) = (overwrites columns [0, Vl]) dscale (softmax - onehot); column Vl is garbage. */
fsc_status fsc_tp_xent_backward(fsc_device *dev, float *dlogits, const fsc_tp_xent_rec *rec, float dscale,
                                float *work);

/* ---- 3D layout: fsc_layout in parallel.h (the engine lays out world = dp x tp x pp) ---------------- */

FSC_END_DECLS

#endif
