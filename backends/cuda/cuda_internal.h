/* Private to the cuda plug-in (libfsc_cuda.so): the device context shared by its .cu files, error
 * helpers, launch helpers and the entry points each file contributes to the fsc_device_ops table.
 * Not a public interface: the core sees only the table (fsc/plugin/device_ops.h) and the exported functions.
 *
 * Streams: every kernel, copy and cuBLAS call goes to the context's current stream (cu_stream_of);
 * the NCCL communicator enqueues on it too. Scratch memory belongs to a stream, so work on two streams
 * never shares a scratch buffer. */
#ifndef FSC_CUDA_INTERNAL_H
#define FSC_CUDA_INTERNAL_H
#include <cuda_runtime.h>
#include <pthread.h>
#include <cublas_v2.h>
#include <stddef.h>
#include <stdint.h>
extern "C" {
#include "fsc/plugin/device_ops.h"
#include "fsc/plugin/comm_ops.h"
}

#define CU_MAGIC 0x66736375u /* "fscu" */
#define CU_MAX_STREAMS 16
#define CU_STAGE_BYTES ((size_t)4 << 20) /* each of the two pinned staging buffers */
#define CU_BLAS_WS_BYTES ((size_t)32 << 20)

/* A stream and what only work on it may use. */
struct cu_stream {
    cudaStream_t s;
    void *scratch;       /* device scratch for multi-pass kernels */
    size_t scratch_cap;
    void *blas_ws;       /* cuBLAS workspace while this stream is bound (CU_BLAS_WS_BYTES) */
};

struct cu_alloc_cache; /* cuda_memory.cu */

struct cu_ctx {
    uint32_t magic;
    int ordinal;
    cu_stream *streams[CU_MAX_STREAMS]; /* streams[0] is the main stream, owned */
    int nstreams;
    cu_stream *cur;                      /* current stream */
    cu_stream *copy;                     /* asynchronous host<->device copies (upload_async), one of streams[] */
    cudaEvent_t *events;                 /* events handed out by event_record, destroyed with the ctx */
    int nevents, cap_events;
    cublasHandle_t blas;
    cu_stream *blas_bound;               /* stream the handle is bound to */
    int tf32;                            /* FSC_CUDA_TF32=1 at open: f32 products on tensor cores in TF32 */
    /* pinned staging for copies: two buffers, each guarded by the event of the last copy that used it, and
     * stage_mu over both (and stage_next): the simulated communicator's progress thread uploads and downloads
     * a rank's buffers while the rank's own thread computes and copies (device_ops.h: upload and download may
     * be called from two threads at once) */
    pthread_mutex_t stage_mu;
    int stage_mu_ok;
    void *stage[2];
    cudaEvent_t stage_ev[2];
    int stage_next;
    /* pinned host scratch (token buckets), guarded by host_ev */
    void *host_scratch;
    size_t host_scratch_cap;
    cudaEvent_t host_ev;
    /* errors found by kernels (a bad token or target): mapped pinned word, reported at the next sync */
    unsigned long long *derr_host, *derr_dev;
    cu_alloc_cache *cache;
    int sm_count;
};

/* Codes in the deferred error word: code << 56 | index. */
enum { CU_DERR_NEG_TOKEN = 1, CU_DERR_TARGET = 2 };

/* ---- errors (cuda_device.cu) ---- */
fsc_status cu_err(fsc_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* cudaSuccess -> FSC_OK; otherwise clears the (non-sticky) error and reports "cuda: what: why". */
fsc_status cu_check(cudaError_t e, const char *what);
fsc_status cu_blas_check(cublasStatus_t e, const char *what);
/* After a kernel launch: a launch error names the kernel. */
fsc_status cu_launched(const char *kernel);
/* Report (and clear) an error a kernel left in the deferred word. */
fsc_status cu_deferred_check(cu_ctx *c);

/* ---- context helpers (cuda_device.cu) ---- */
static inline cu_ctx *cu_of(void *ctx) { return (cu_ctx *)ctx; }
static inline cudaStream_t cu_stream_of(cu_ctx *c) { return c->cur->s; }
/* Make the context's GPU current on this thread. */
fsc_status cu_enter(cu_ctx *c);
/* Device scratch of the current stream, at least bytes (grows; the old one is freed after its work). */
fsc_status cu_scratch(cu_ctx *c, size_t bytes, void **out);
/* Pinned host scratch, at least bytes, once the last copy out of it has finished. */
fsc_status cu_host_scratch(cu_ctx *c, size_t bytes, void **out);
/* Bind cuBLAS to the current stream and its workspace. */
fsc_status cu_blas_bind(cu_ctx *c);
/* Synchronize every stream of the context. */
fsc_status cu_sync_all(cu_ctx *c);
/* Whether a pointer is a cu_ctx of this plug-in (for the NCCL communicator). */
int cu_is_ctx(const void *ctx);

/* ---- memory (cuda_memory.cu): a caching allocator with explicit lifetimes ---- */
fsc_status cu_cache_create(cu_ctx *c);
void cu_cache_destroy(cu_ctx *c);
void *cu_alloc(void *ctx, size_t bytes);
void cu_free(void *ctx, void *p);
/* pinned host memory for offloaded state (cudaHostAlloc, portable): upload/download copy it without staging */
void *cu_host_alloc(void *ctx, size_t bytes);
void cu_host_free(void *ctx, void *p);
fsc_status cu_upload(void *ctx, void *dst, const void *host_src, size_t bytes);
fsc_status cu_download(void *ctx, void *host_dst, const void *src, size_t bytes);
fsc_status cu_copy(void *ctx, void *dst, const void *src, size_t bytes);
fsc_status cu_memset(void *ctx, void *dst, int value, size_t bytes);
/* asynchronous copies (ABI 5) on the copy stream, each after the work queued before it on the current stream;
 * copy_wait makes the current stream wait for the copy's event, then the host (cudaEventSynchronize) */
fsc_status cu_upload_async(void *ctx, void *dst, const void *host_src, size_t bytes, void **copy);
fsc_status cu_download_async(void *ctx, void *host_dst, const void *src, size_t bytes, void **copy);
fsc_status cu_copy_wait(void *ctx, void *copy);

/* ---- launch geometry ---- */
#define CU_THREADS 256
static inline unsigned cu_blocks(size_t n, unsigned threads) {
    size_t b = (n + threads - 1) / threads;
    if (b > 65535u * 16u) b = 65535u * 16u; /* grid-stride loops cover the rest */
    return b ? (unsigned)b : 1u;
}

/* ---- kernels: the table entries (cuda_gemm.cu, cuda_elementwise.cu, cuda_norm.cu, cuda_attn.cu,
 * cuda_reduce.cu, cuda_modern.cu); signatures as in fsc/plugin/device_ops.h ---- */
fsc_status cu_gemm(void *ctx, int transa, int transb, int M, int N, int K, float alpha, const float *A, int lda,
                   int64_t sa, const float *B, int ldb, int64_t sb, float beta, float *C, int ldc, int64_t sc,
                   int batch);
fsc_status cu_gemm_ex(void *ctx, int transa, int transb, int M, int N, int K, float alpha, const void *A, int lda,
                      int64_t sa, const void *B, int ldb, int64_t sb, fsc_dtype ab, float beta, void *C, int ldc,
                      int64_t sc, fsc_dtype ct, int batch);
fsc_status cu_convert(void *ctx, void *dst, fsc_dtype dt, const void *src, fsc_dtype st, size_t n);
fsc_status cu_scale(void *ctx, float *x, float a, size_t n);
fsc_status cu_axpy(void *ctx, float *y, float a, const float *x, size_t n);
fsc_status cu_add(void *ctx, float *out, const float *a, const float *b, size_t n);
fsc_status cu_gelu_forward(void *ctx, float *out, const float *inp, size_t n);
fsc_status cu_gelu_backward(void *ctx, float *dinp, const float *inp, const float *dout, size_t n);
fsc_status cu_bias_add(void *ctx, float *out, const float *bias, size_t N, int OC);
fsc_status cu_bias_grad(void *ctx, float *dbias, const float *dout, size_t N, int OC);
fsc_status cu_encoder_forward(void *ctx, float *out, const int32_t *tok, const float *wte, const float *wpe, int B,
                              int T, int C);
fsc_status cu_encoder_backward(void *ctx, float *dwte, float *dwpe, const float *dout, const int32_t *tok, int B,
                               int T, int C);
fsc_status cu_adamw(void *ctx, float *p, const float *g, float *m, float *v, size_t n, float lr, float b1, float b2,
                    float eps, float wd, float bc1, float bc2);
fsc_status cu_sgd(void *ctx, float *p, const float *g, float *buf, size_t n, float lr, float momentum, float wd,
                  int first);
fsc_status cu_layernorm_forward(void *ctx, float *out, float *mean, float *rstd, const float *inp, const float *w,
                                const float *b, size_t N, int C);
fsc_status cu_layernorm_backward(void *ctx, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                                 const float *w, const float *mean, const float *rstd, size_t N, int C);
fsc_status cu_qkv_split(void *ctx, float *q, float *k, float *v, const float *qkv, int B, int T, int NH, int HS);
fsc_status cu_qkv_merge(void *ctx, float *dqkv, const float *dq, const float *dk, const float *dv, int B, int T,
                        int NH, int HS);
fsc_status cu_heads_merge(void *ctx, float *out, const float *y, int B, int T, int NH, int HS);
fsc_status cu_heads_split(void *ctx, float *dy, const float *dout, int B, int T, int NH, int HS);
fsc_status cu_softmax_causal_forward(void *ctx, float *att, const float *pre, int BH, int T, float scale);
fsc_status cu_softmax_causal_backward(void *ctx, float *dpre, const float *datt, const float *att, int BH, int T,
                                      float scale);
fsc_status cu_xent_forward(void *ctx, float *losses, const float *logits, const int32_t *targets, size_t N, int V,
                           int ld);
fsc_status cu_xent_backward(void *ctx, float *dlogits, const float *logits, const int32_t *targets, size_t N, int V,
                            int ld, float scale);
fsc_status cu_rmsnorm_forward(void *ctx, float *out, float *rstd, const float *inp, const float *w, size_t N, int C,
                              float eps);
fsc_status cu_rmsnorm_backward(void *ctx, float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                               const float *rstd, size_t N, int C);
/* cuda_modern.cu */
fsc_status cu_rope_forward(void *ctx, float *out, const float *inp, int B, int T, int H, int D, int ld, float theta);
fsc_status cu_rope_backward(void *ctx, float *dinp, const float *dout, int B, int T, int H, int D, int ld,
                            float theta);
fsc_status cu_silu_forward(void *ctx, float *out, const float *inp, size_t n);
fsc_status cu_silu_backward(void *ctx, float *dinp, const float *inp, const float *dout, size_t n);
fsc_status cu_swiglu_forward(void *ctx, float *out, const float *gate, const float *up, size_t n);
fsc_status cu_swiglu_backward(void *ctx, float *dgate, float *dup, const float *gate, const float *up,
                              const float *dout, size_t n);
fsc_status cu_mul_forward(void *ctx, float *out, const float *a, const float *b, size_t n);
fsc_status cu_mul_backward(void *ctx, float *da, float *db, const float *a, const float *b, const float *dout,
                           size_t n);
fsc_status cu_mse_forward(void *ctx, float *losses, const float *pred, const float *target, size_t N, int C);
fsc_status cu_mse_backward(void *ctx, float *dpred, const float *pred, const float *target, size_t N, int C,
                           float scale);
fsc_status cu_sum(void *ctx, double *host_out, const float *x, size_t n);
fsc_status cu_absmax(void *ctx, float *host_max, int *host_nonfinite, const float *x, size_t n);
fsc_status cu_sumsq_fixed(void *ctx, uint64_t acc[2], const float *x, size_t n, int shift);

/* f32 <-> bf16/f16 on the current stream (cuda_elementwise.cu; also used by the NCCL communicator). */
fsc_status cu_convert_on(cudaStream_t s, void *dst, fsc_dtype dt, const void *src, fsc_dtype st, size_t n);
fsc_status cu_divide_on(cudaStream_t s, float *x, float d, size_t n); /* x = x / d (AVG) */
/* A kernel that exists, to ask whether this GPU can run the plug-in's code. */
const void *cu_probe_kernel(void);

#endif
