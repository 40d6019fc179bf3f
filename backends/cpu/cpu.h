/* Private to the CPU backend: the kernels that fill its fsc_device_ops table (cpu_device.c).
 * Every function here follows the contract written next to its table entry in fsc/plugin/device_ops.h. */
#ifndef FSC_CPU_H
#define FSC_CPU_H
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include "core/device_impl.h"

/* gcc at -O2 (the default build) vectorizes only loops whose trip count is a multiple of the vector
 * width; the kernels are written as plain loops for the vectorizer, so let it use its normal cost model
 * (what -O3 does). Vectorizing elementwise loops does not change their bits, and reductions keep their
 * source order (no -ffast-math). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("vect-cost-model=dynamic")
#endif

/* cpu_pool.c: the device's worker threads. ctx of every kernel is a cpu_ctx (or NULL: no pool). */
typedef struct cpu_pool cpu_pool;
typedef struct cpu_async_copy cpu_async_copy; /* an asynchronous copy not yet waited for (cpu_device.c) */
typedef struct {
    cpu_pool *pool; /* NULL with one thread */
    pthread_mutex_t copy_mu;        /* guards the queue of asynchronous copies */
    cpu_async_copy *copy_head, *copy_tail; /* in issue order */
    int blas_set;                   /* it set OpenBLAS's thread count (given back when it is destroyed) */
} cpu_ctx;
typedef void (*cpu_range_fn)(void *arg, size_t lo, size_t hi);
/* fn(arg, lo, hi) over ranges that cover [0, n): a few per thread, run by whichever thread is free, bounds
 * multiples of step, each at least grain long (so small calls run whole on the caller). Returns when every
 * range is done. */
void cpu_parallel(void *ctx, size_t n, size_t step, size_t grain, cpu_range_fn fn, void *arg);
int cpu_threads(void *ctx);            /* threads a call may use (1 without a pool) */
cpu_pool *cpu_pool_create(int threads); /* NULL when threads < 2 or no worker could start */
void cpu_pool_free(cpu_pool *pool);

/* Split sizes: an elementwise range is at least GRAIN elements; bounds are multiples of 16 floats. */
enum { CPU_GRAIN = 1 << 14, CPU_STEP = 16 };
/* the grain of a row split: ranges of at least CPU_GRAIN elements, given rows of w elements */
static inline size_t cpu_row_grain(size_t w) { return w ? (CPU_GRAIN + w - 1) / w : 1; }

/* cpu_kernels.c: gemm, elementwise, linear, embedding, layer norm */
fsc_status cpu_gemm(void *ctx, int transa, int transb, int M, int N, int K, float alpha, const float *A, int lda,
                    int64_t sa, const float *B, int ldb, int64_t sb, float beta, float *C, int ldc, int64_t sc,
                    int batch);
fsc_status cpu_convert(void *ctx, void *dst, fsc_dtype dt, const void *src, fsc_dtype st, size_t n);
fsc_status cpu_scale(void *ctx, float *x, float a, size_t n);
fsc_status cpu_axpy(void *ctx, float *y, float a, const float *x, size_t n);
fsc_status cpu_add(void *ctx, float *out, const float *a, const float *b, size_t n);
fsc_status cpu_gelu_forward(void *ctx, float *out, const float *inp, size_t n);
fsc_status cpu_gelu_backward(void *ctx, float *dinp, const float *inp, const float *dout, size_t n);
fsc_status cpu_bias_add(void *ctx, float *out, const float *bias, size_t N, int OC);
fsc_status cpu_bias_grad(void *ctx, float *dbias, const float *dout, size_t N, int OC);
fsc_status cpu_encoder_forward(void *ctx, float *out, const int32_t *tok, const float *wte, const float *wpe,
                               int B, int T, int C);
fsc_status cpu_encoder_backward(void *ctx, float *dwte, float *dwpe, const float *dout, const int32_t *tok,
                                int B, int T, int C);
fsc_status cpu_layernorm_forward(void *ctx, float *out, float *mean, float *rstd, const float *inp,
                                 const float *w, const float *b, size_t N, int C);
fsc_status cpu_layernorm_backward(void *ctx, float *dinp, float *dw, float *db, const float *dout,
                                  const float *inp, const float *w, const float *mean, const float *rstd,
                                  size_t N, int C);

/* cpu_attn.c: attention layout shuffles, causal softmax, cross entropy */
fsc_status cpu_qkv_split(void *ctx, float *q, float *k, float *v, const float *qkv, int B, int T, int NH, int HS);
fsc_status cpu_qkv_merge(void *ctx, float *dqkv, const float *dq, const float *dk, const float *dv,
                         int B, int T, int NH, int HS);
fsc_status cpu_heads_merge(void *ctx, float *out, const float *y, int B, int T, int NH, int HS);
fsc_status cpu_heads_split(void *ctx, float *dy, const float *dout, int B, int T, int NH, int HS);
fsc_status cpu_softmax_causal_forward(void *ctx, float *att, const float *pre, int BH, int T, float scale);
fsc_status cpu_softmax_causal_backward(void *ctx, float *dpre, const float *datt, const float *att,
                                       int BH, int T, float scale);
fsc_status cpu_xent_forward(void *ctx, float *losses, const float *logits, const int32_t *targets,
                            size_t N, int V, int ld);
fsc_status cpu_xent_backward(void *ctx, float *dlogits, const float *logits, const int32_t *targets,
                             size_t N, int V, int ld, float scale);

/* cpu_modern.c: RMS norm, rotary embeddings, SiLU/SwiGLU, elementwise product, squared error */
fsc_status cpu_rmsnorm_forward(void *ctx, float *out, float *rstd, const float *inp, const float *w, size_t N, int C,
                               float eps);
fsc_status cpu_rmsnorm_backward(void *ctx, float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                                const float *rstd, size_t N, int C);
fsc_status cpu_rope_forward(void *ctx, float *out, const float *inp, int B, int T, int H, int D, int ld, float theta);
fsc_status cpu_rope_backward(void *ctx, float *dinp, const float *dout, int B, int T, int H, int D, int ld,
                             float theta);
fsc_status cpu_silu_forward(void *ctx, float *out, const float *inp, size_t n);
fsc_status cpu_silu_backward(void *ctx, float *dinp, const float *inp, const float *dout, size_t n);
fsc_status cpu_swiglu_forward(void *ctx, float *out, const float *gate, const float *up, size_t n);
fsc_status cpu_swiglu_backward(void *ctx, float *dgate, float *dup, const float *gate, const float *up,
                               const float *dout, size_t n);
fsc_status cpu_mul_forward(void *ctx, float *out, const float *a, const float *b, size_t n);
fsc_status cpu_mul_backward(void *ctx, float *da, float *db, const float *a, const float *b, const float *dout,
                            size_t n);
fsc_status cpu_mse_forward(void *ctx, float *losses, const float *pred, const float *target, size_t N, int C);
fsc_status cpu_mse_backward(void *ctx, float *dpred, const float *pred, const float *target, size_t N, int C,
                            float scale);

/* cpu_reduce.c: host reductions and optimizers */
fsc_status cpu_sum(void *ctx, double *host_out, const float *x, size_t n);
fsc_status cpu_absmax(void *ctx, float *host_max, int *host_nonfinite, const float *x, size_t n);
fsc_status cpu_sumsq_fixed(void *ctx, uint64_t acc[2], const float *x, size_t n, int shift);
fsc_status cpu_adamw(void *ctx, float *p, const float *g, float *m, float *v, size_t n, float lr,
                     float b1, float b2, float eps, float wd, float bc1, float bc2);
fsc_status cpu_sgd(void *ctx, float *p, const float *g, float *buf, size_t n, float lr, float momentum,
                   float wd, int first);

#endif
