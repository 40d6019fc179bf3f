/* The plug-in ABI, device half: what a device backend implements (cpu in backends/cpu, linked in; cuda in
 * the plug-in libfsc_cuda.so, loaded with dlopen). Installed as <fsc/plugin/device_ops.h> for authors of
 * backends; not part of the API a training program uses (fsc.h does not include it). Its version is
 * FSC_DEVICE_ABI_VERSION, independent of the library's: the core passes it to every entry point and a
 * plug-in built for another version refuses to open.
 *
 * A backend fills an fsc_device_ops table; the core keeps the memory ledger and calls the table.
 * The one plug-in device today is "cuda": the core dlopens libfsc_cuda.so ($FSC_CUDA_PLUGIN, next to the
 * executable, then the loader's path) and looks up, with C linkage and default visibility,
 *   "fsc_cuda_device_open"  an fsc_device_open_fn
 *   "fsc_plugin_init"       optional, an fsc_plugin_init_fn
 * and, for the NCCL communicator, the entry points of <fsc/plugin/comm_ops.h>.
 *
 * Conventions for every kernel:
 * - all pointers are device pointers to f32 unless the type says otherwise; tokens are int32;
 * - row-major; N is the number of rows (B*T), C/OC the row width;
 * - "+=" means the kernel accumulates into its output (parameter gradients, residual streams);
 *   "=" means it overwrites;
 * - deterministic: the same inputs give the same bits on every call, independent of thread count
 *   (fixed order of every sum, no atomics in reductions);
 * - a kernel returns FSC_OK or an error with the message set (a launch failure on a GPU).
 * Optional entries may be NULL; the core falls back to a composition of other entries. */
#ifndef FSC_PLUGIN_DEVICE_OPS_H
#define FSC_PLUGIN_DEVICE_OPS_H
#include "../export.h"
#include <stdint.h>
#include "../device.h"

FSC_BEGIN_DECLS

#define FSC_DEVICE_ABI_VERSION 7 /* 2: gemm_ex; 3: RMS norm, rotary, SiLU/SwiGLU, products, MSE; 4: host_alloc;
                                  * 5: asynchronous copies; 6: the norms' backward computes either half alone;
                                  * 7: the cross entropy's backward in place (dlogits == logits) */

typedef struct fsc_device_ops {
    int abi_version; /* FSC_DEVICE_ABI_VERSION */
    const char *name;

    /* memory */
    void *(*alloc)(void *ctx, size_t bytes);                 /* NULL on failure */
    void (*free)(void *ctx, void *p);
    fsc_status (*upload)(void *ctx, void *dst, const void *host_src, size_t bytes);
    fsc_status (*download)(void *ctx, void *host_dst, const void *src, size_t bytes);
    fsc_status (*copy)(void *ctx, void *dst, const void *src, size_t bytes);
    fsc_status (*memset)(void *ctx, void *dst, int value, size_t bytes);
    fsc_status (*sync)(void *ctx);
    void (*destroy)(void *ctx);

    /* C[b] = alpha * op(A[b]) op(B[b]) + beta * C[b] for b < batch, row-major:
     * op(A) is M x K (A is M x K with lda, or K x M when transa), op(B) is K x N, C is M x N with ldc.
     * sa/sb/sc: element strides between batch entries. */
    fsc_status (*gemm)(void *ctx, int transa, int transb, int M, int N, int K, float alpha,
                       const float *A, int lda, int64_t sa, const float *B, int ldb, int64_t sb,
                       float beta, float *C, int ldc, int64_t sc, int batch);

    /* elementwise */
    /* dst (n of dt) = src (n of st), rounded to nearest even. dst and src may overlap (in place: dst == src and the
     * buffer holds n of the larger type); the result is then as if converted through a temporary. */
    fsc_status (*convert)(void *ctx, void *dst, fsc_dtype dt, const void *src, fsc_dtype st, size_t n);
    fsc_status (*scale)(void *ctx, float *x, float a, size_t n);                  /* x = a*x */
    fsc_status (*axpy)(void *ctx, float *y, float a, const float *x, size_t n);   /* y += a*x */
    fsc_status (*add)(void *ctx, float *out, const float *a, const float *b, size_t n); /* out = a+b */
    fsc_status (*gelu_forward)(void *ctx, float *out, const float *inp, size_t n);  /* tanh approx */
    fsc_status (*gelu_backward)(void *ctx, float *dinp, const float *inp, const float *dout, size_t n); /* = */

    /* linear pieces */
    fsc_status (*bias_add)(void *ctx, float *out, const float *bias, size_t N, int OC);   /* out[n,:] += bias */
    fsc_status (*bias_grad)(void *ctx, float *dbias, const float *dout, size_t N, int OC); /* dbias += sum_n dout[n,:], n ascending */

    /* embedding: out[b,t,:] = wte[tok[b,t],:] + wpe[t,:] */
    fsc_status (*encoder_forward)(void *ctx, float *out, const int32_t *tok, const float *wte, const float *wpe,
                                  int B, int T, int C);
    /* dwpe[t,:] += sum_b dout[b,t,:] (b ascending); dwte[tok[b,t],:] += dout[b,t,:] in (b,t) order. */
    fsc_status (*encoder_backward)(void *ctx, float *dwte, float *dwpe, const float *dout, const int32_t *tok,
                                   int B, int T, int C);

    /* layer norm over the last dim; eps 1e-5; mean/rstd (N) saved for backward */
    fsc_status (*layernorm_forward)(void *ctx, float *out, float *mean, float *rstd, const float *inp,
                                    const float *w, const float *b, size_t N, int C);
    /* dinp += ..., dw += ..., db += ... (rows in ascending order). Either half alone (ABI 6): dinp NULL computes
     * only dw and db, dw and db NULL (together) only dinp, each with the bits it has when both are computed (the
     * split backward's input and weight parts, docs/pipeline.md). At least one half is given. */
    fsc_status (*layernorm_backward)(void *ctx, float *dinp, float *dw, float *db, const float *dout,
                                     const float *inp, const float *w, const float *mean, const float *rstd,
                                     size_t N, int C);

    /* attention helpers. qkv (B,T,3C) -> q,k,v each (B,NH,T,HS), C = NH*HS */
    fsc_status (*qkv_split)(void *ctx, float *q, float *k, float *v, const float *qkv, int B, int T, int NH, int HS);
    /* dqkv = (overwrite) the inverse of qkv_split */
    fsc_status (*qkv_merge)(void *ctx, float *dqkv, const float *dq, const float *dk, const float *dv,
                            int B, int T, int NH, int HS);
    /* out (B,T,C) = y (B,NH,T,HS) with heads side by side; heads_merge_backward is the inverse (=) */
    fsc_status (*heads_merge)(void *ctx, float *out, const float *y, int B, int T, int NH, int HS);
    fsc_status (*heads_split)(void *ctx, float *dy, const float *dout, int B, int T, int NH, int HS);
    /* att[r, i, j] = softmax_j<=i(scale * pre[r, i, j]), 0 for j > i; r < BH rows of T x T */
    fsc_status (*softmax_causal_forward)(void *ctx, float *att, const float *pre, int BH, int T, float scale);
    /* dpre[r,i,j] = scale * att * (datt - sum_j' att*datt) for j <= i, 0 above (=) */
    fsc_status (*softmax_causal_backward)(void *ctx, float *dpre, const float *datt, const float *att,
                                          int BH, int T, float scale);

    /* cross entropy: losses[n] = -log softmax(logits[n,:V])[targets[n]] (row stride ld >= V) */
    fsc_status (*xent_forward)(void *ctx, float *losses, const float *logits, const int32_t *targets,
                               size_t N, int V, int ld);
    /* dlogits[n,:] = scale * (softmax(logits[n]) - onehot(targets[n])) (=); dlogits may be logits (in place,
     * ABI 7: the split backward's LM heads write it over their record's logits), with the same bits */
    fsc_status (*xent_backward)(void *ctx, float *dlogits, const float *logits, const int32_t *targets,
                                size_t N, int V, int ld, float scale);

    /* reductions to the host, summed in double in ascending index order */
    fsc_status (*sum)(void *ctx, double *host_out, const float *x, size_t n);
    /* max |x| (NaN if any NaN) and whether any element is inf or NaN */
    fsc_status (*absmax)(void *ctx, float *host_max, int *host_nonfinite, const float *x, size_t n);
    /* Exact fixed-point sum of squares: acc (128-bit, acc[0] low word, acc[1] high) +=
     * sum_i floor(x_i^2 * 2^shift) computed in double; integer sums do not depend on order. */
    fsc_status (*sumsq_fixed)(void *ctx, uint64_t acc[2], const float *x, size_t n, int shift);

    /* optimizers (PyTorch semantics), elementwise over n */
    /* AdamW: p -= lr*wd*p; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; p -= lr * (m/bc1) / (sqrt(v/bc2) + eps) */
    fsc_status (*adamw)(void *ctx, float *p, const float *g, float *m, float *v, size_t n, float lr,
                        float b1, float b2, float eps, float wd, float bc1, float bc2);
    /* SGD: d = g + wd*p; buf = first ? d : momentum*buf + d (when momentum != 0); p -= lr * (momentum ? buf : d) */
    fsc_status (*sgd)(void *ctx, float *p, const float *g, float *buf, size_t n, float lr, float momentum,
                      float wd, int first);

    /* optional: streams/events for overlap (NULL on backends that run everything in order).
     * Copies, kernels and collectives go to the current stream; sync waits for every stream.
     * event_record: *event NULL creates an event the device owns (freed with it), else records it again;
     * stream NULL in event_record/stream_wait is the current stream, in set_stream the main stream. */
    fsc_status (*stream_create)(void *ctx, void **stream);
    fsc_status (*stream_destroy)(void *ctx, void *stream);
    fsc_status (*set_stream)(void *ctx, void *stream);       /* kernels after this go to stream */
    fsc_status (*event_record)(void *ctx, void **event, void *stream);
    fsc_status (*stream_wait)(void *ctx, void *stream, void *event);

    /* optional: gemm as above with A and B of type ab (f32, bf16 or f16) and C of type c (f32 or ab),
     * products accumulated in f32 (tensor cores on GPUs). NULL where the backend has none. */
    fsc_status (*gemm_ex)(void *ctx, int transa, int transb, int M, int N, int K, float alpha,
                          const void *A, int lda, int64_t sa, const void *B, int ldb, int64_t sb, fsc_dtype ab,
                          float beta, void *C, int ldc, int64_t sc, fsc_dtype c, int batch);

    /* ---- ABI 3: kernels of today's language models and simple regressors (every backend fills them) ---- */
    /* RMS norm over the last dim (Llama's): out = (inp * rstd) * w with rstd = 1 / sqrt(mean(inp^2) + eps);
     * rstd (N) saved for backward */
    fsc_status (*rmsnorm_forward)(void *ctx, float *out, float *rstd, const float *inp, const float *w, size_t N,
                                  int C, float eps);
    /* dinp += ..., dw += ... (rows in ascending order); dinp or dw may be NULL (not both): the other half alone,
     * with the same bits, as layernorm_backward */
    fsc_status (*rmsnorm_backward)(void *ctx, float *dinp, float *dw, const float *dout, const float *inp,
                                   const float *w, const float *rstd, size_t N, int C);
    /* Rotary position embedding as transformers' apply_rotary_pos_emb with rotate_half, positions t = 0..T-1:
     * row (b, t) of inp starts at (b T + t) ld, head h at column h D (H D <= ld); for i < D/2, with
     * a = t * theta^(-2i/D) (computed in double, cos and sin rounded to float):
     *   out[i] = x[i] cos a - x[i + D/2] sin a;   out[i + D/2] = x[i + D/2] cos a + x[i] sin a.
     * D even. out has inp's layout and may be inp (in place); columns past H D are not touched. */
    fsc_status (*rope_forward)(void *ctx, float *out, const float *inp, int B, int T, int H, int D, int ld,
                               float theta);
    /* dinp = (overwrites) the transposed rotation of dout, same layout; dinp may be dout (in place) */
    fsc_status (*rope_backward)(void *ctx, float *dinp, const float *dout, int B, int T, int H, int D, int ld,
                                float theta);
    /* SiLU: out = x / (1 + exp(-x)); backward dinp = (overwrites) silu'(inp) * dout */
    fsc_status (*silu_forward)(void *ctx, float *out, const float *inp, size_t n);
    fsc_status (*silu_backward)(void *ctx, float *dinp, const float *inp, const float *dout, size_t n);
    /* SwiGLU: out = silu(gate) * up; backward (overwrites) dgate = dout * up * silu'(gate), dup = dout * silu(gate).
     * dgate may be dout (in place). */
    fsc_status (*swiglu_forward)(void *ctx, float *out, const float *gate, const float *up, size_t n);
    fsc_status (*swiglu_backward)(void *ctx, float *dgate, float *dup, const float *gate, const float *up,
                                  const float *dout, size_t n);
    /* Elementwise product out = a * b; backward da += dout * b, db += dout * a (either may be NULL) */
    fsc_status (*mul_forward)(void *ctx, float *out, const float *a, const float *b, size_t n);
    fsc_status (*mul_backward)(void *ctx, float *da, float *db, const float *a, const float *b, const float *dout,
                               size_t n);
    /* Squared error per row: losses[n] = sum_c (pred[n,c] - target[n,c])^2 (summed in double) */
    fsc_status (*mse_forward)(void *ctx, float *losses, const float *pred, const float *target, size_t N, int C);
    /* dpred (N, C) = (overwrites) 2 scale (pred - target): the gradient of scale * sum_n losses[n] */
    fsc_status (*mse_backward)(void *ctx, float *dpred, const float *pred, const float *target, size_t N, int C,
                               float scale);

    /* ---- ABI 4, optional: page-locked (pinned) host memory for offloaded state (docs/offload.md), which this
     * device's upload and download copy without staging. NULL: host memory is plain malloc'd memory. */
    void *(*host_alloc)(void *ctx, size_t bytes);            /* NULL on failure */
    void (*host_free)(void *ctx, void *p);

    /* ---- ABI 5, optional: asynchronous copies (fsc_device_upload_async, docs/offload.md). upload_async and
     * download_async start a copy and set *copy to a handle of the backend's; copy_wait blocks until that copy is
     * complete (its destination readable by the host or by the device's later work, its source reusable) and
     * frees the handle. Copies started this way complete in issue order (a wait completes every one started
     * before it); they need not be ordered with the synchronous entries. Memory a copy reads or writes is not
     * released before its wait. NULL (any of the three): the core copies with upload/download at the start. */
    fsc_status (*upload_async)(void *ctx, void *dst, const void *host_src, size_t bytes, void **copy);
    fsc_status (*download_async)(void *ctx, void *host_dst, const void *src, size_t bytes, void **copy);
    fsc_status (*copy_wait)(void *ctx, void *copy);
} fsc_device_ops;

/* Entry point a backend exports: fills *ops and *ctx. The cuda plug-in exports it as
 * "fsc_cuda_device_open"; the cpu backend is linked in. */
typedef fsc_status (*fsc_device_open_fn)(int abi_version, const fsc_device_opts *opts,
                                         const fsc_device_ops **ops, void **ctx);
/* Optional export of a plug-in, "fsc_plugin_init": the core calls it right after dlopen, before the open
 * function, with its own fsc_error, so the plug-in's messages reach the caller's thread-local message even
 * when the executable does not export its symbols (a static libfsc.a linked without -rdynamic). */
typedef fsc_status (*fsc_error_fn)(fsc_status s, const char *fmt, ...);
typedef void (*fsc_plugin_init_fn)(int abi_version, fsc_error_fn error);

FSC_END_DECLS

#endif
