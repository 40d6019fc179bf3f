/* The counting device "count" (docs/planning.md): a device whose memory is counted but not there, for the
 * planner (fsc/plan.h), which runs the engine's real setup and one real step on it so the core's tagged ledger
 * records what the same job takes on a real device, without the memory or the arithmetic.
 * - An allocation of more than FSC_COUNT_REAL_MAX bytes gets a fake address: a unique, never mapped address
 *   at or above COUNT_FAKE_BASE (outside the canonical user range on 64-bit machines, so a stray dereference
 *   faults at once rather than reading other memory). Smaller allocations are real zeroed host memory: they
 *   hold the few values the engine reads back (the batch check, the vote on errors, pipeline sums), which the
 *   simulated communicator still exchanges (sim_comm.c skips the data of larger calls on this device).
 * - Copies and fills act on real memory only: a copy into a fake address does nothing, a copy from one
 *   writes zeros. Kernels do nothing; the ones that return values to the host return harmless ones (a loss of
 *   0, finite gradients of largest magnitude 1, a norm of 0), so the step completes as a good step and takes the
 *   paths real data takes.
 * - The table has the cpu backend's optional entries and no others (no streams, no gemm_ex, asynchronous
 *   copies), so the engine takes the cpu device's code paths and allocates what it allocates there.
 * Not here: the ledger (lib/core/device.c), the planner (lib/plan/). */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "core/device_impl.h"

#define COUNT_FAKE_BASE ((uintptr_t)1 << (sizeof(uintptr_t) * 8 - 2))

typedef struct {
    _Atomic uintptr_t next;       /* the next fake address */
    _Atomic uint64_t gemm_flops;  /* 2 M N K batch of every gemm called (the planner's time half starts here) */
} count_ctx;

int fsc_count_is_fake(const void *p) { return (uintptr_t)p >= COUNT_FAKE_BASE; }

static void *count_alloc(void *ctx, size_t bytes) {
    count_ctx *c = ctx;
    if (bytes <= FSC_COUNT_REAL_MAX) return calloc(1, bytes);
    size_t rounded = (bytes + 255) & ~(size_t)255;
    if (rounded < bytes) return NULL;
    uintptr_t p = atomic_fetch_add(&c->next, (uintptr_t)rounded);
    if (p + rounded < p) return NULL; /* the fake range is spent (never in practice: 2^62 bytes) */
    return (void *)p;
}

static void count_free(void *ctx, void *p) {
    (void)ctx;
    if (!fsc_count_is_fake(p)) free(p);
}

/* dst = src where both are real; zeros into a real dst from a fake src; nothing into a fake dst */
static fsc_status count_copy(void *ctx, void *dst, const void *src, size_t bytes) {
    (void)ctx;
    if (fsc_count_is_fake(dst) || dst == src) return FSC_OK;
    if (fsc_count_is_fake(src)) memset(dst, 0, bytes);
    else memmove(dst, src, bytes);
    return FSC_OK;
}

static fsc_status count_memset(void *ctx, void *dst, int value, size_t bytes) {
    (void)ctx;
    if (!fsc_count_is_fake(dst)) memset(dst, value, bytes);
    return FSC_OK;
}

static fsc_status count_sync(void *ctx) { (void)ctx; return FSC_OK; }

static void count_destroy(void *ctx) { free(ctx); }

static char count_copy_handle; /* what an asynchronous copy's handle points at: the copy is made at its start */

static fsc_status count_copy_start(void *ctx, void *dst, const void *src, size_t bytes, void **copy) {
    *copy = &count_copy_handle;
    return count_copy(ctx, dst, src, bytes);
}

static fsc_status count_copy_wait(void *ctx, void *copy) { (void)ctx; (void)copy; return FSC_OK; }

/* ---- kernels: nothing, in the table's signatures ---- */
#define NOP(name, ...) static fsc_status name(void *ctx, __VA_ARGS__) { (void)ctx; return FSC_OK; }

/* a product is counted, not computed */
static fsc_status k_gemm(void *ctx, int ta, int tb, int M, int N, int K, float al, const float *A, int lda, int64_t sa,
                         const float *B, int ldb, int64_t sb, float be, float *C, int ldc, int64_t sc, int batch) {
    count_ctx *c = ctx;
    if (M > 0 && N > 0 && K > 0 && batch > 0)
        atomic_fetch_add(&c->gemm_flops, 2 * (uint64_t)M * (uint64_t)N * (uint64_t)K * (uint64_t)batch);
    return FSC_OK;
}

uint64_t fsc_count_gemm_flops(const fsc_device *dev) {
    return fsc_device_is_count(dev) ? atomic_load(&((count_ctx *)dev->ctx)->gemm_flops) : 0;
}
NOP(k_convert, void *dst, fsc_dtype dt, const void *src, fsc_dtype st, size_t n)
NOP(k_scale, float *x, float a, size_t n)
NOP(k_axpy, float *y, float a, const float *x, size_t n)
NOP(k_add, float *out, const float *a, const float *b, size_t n)
NOP(k_unary, float *out, const float *inp, size_t n)
NOP(k_unary_back, float *dinp, const float *inp, const float *dout, size_t n)
NOP(k_bias_add, float *out, const float *bias, size_t N, int OC)
NOP(k_encoder_forward, float *out, const int32_t *tok, const float *wte, const float *wpe, int B, int T, int C)
NOP(k_encoder_backward, float *dwte, float *dwpe, const float *dout, const int32_t *tok, int B, int T, int C)
NOP(k_layernorm_forward, float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
    size_t N, int C)
NOP(k_layernorm_backward, float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
    const float *mean, const float *rstd, size_t N, int C)
NOP(k_qkv, float *q, float *k, float *v, const float *qkv, int B, int T, int NH, int HS)
NOP(k_qkv_merge, float *dqkv, const float *dq, const float *dk, const float *dv, int B, int T, int NH, int HS)
NOP(k_heads, float *out, const float *y, int B, int T, int NH, int HS)
NOP(k_softmax_forward, float *att, const float *pre, int BH, int T, float scale)
NOP(k_softmax_backward, float *dpre, const float *datt, const float *att, int BH, int T, float scale)
NOP(k_xent_forward, float *losses, const float *logits, const int32_t *targets, size_t N, int V, int ld)
NOP(k_xent_backward, float *dlogits, const float *logits, const int32_t *targets, size_t N, int V, int ld,
    float scale)
NOP(k_adamw, float *p, const float *g, float *m, float *v, size_t n, float lr, float b1, float b2, float eps,
    float wd, float bc1, float bc2)
NOP(k_sgd, float *p, const float *g, float *buf, size_t n, float lr, float momentum, float wd, int first)
NOP(k_rmsnorm_forward, float *out, float *rstd, const float *inp, const float *w, size_t N, int C, float eps)
NOP(k_rmsnorm_backward, float *dinp, float *dw, const float *dout, const float *inp, const float *w,
    const float *rstd, size_t N, int C)
NOP(k_rope, float *out, const float *inp, int B, int T, int H, int D, int ld, float theta)
NOP(k_swiglu_forward, float *out, const float *gate, const float *up, size_t n)
NOP(k_swiglu_backward, float *dgate, float *dup, const float *gate, const float *up, const float *dout, size_t n)
NOP(k_mul_backward, float *da, float *db, const float *a, const float *b, const float *dout, size_t n)
NOP(k_mse_forward, float *losses, const float *pred, const float *target, size_t N, int C)
NOP(k_mse_backward, float *dpred, const float *pred, const float *target, size_t N, int C, float scale)

/* the kernels that answer on the host: a sum of 0; finite values whose largest magnitude is 1, not 0 (code that
 * takes a shortcut for all-zero gradients, such as the grad norm's, then takes the path real data takes, with
 * its allocations); a sum of squares of 0 (a norm of 0, which clips nothing) */
static fsc_status k_sum(void *ctx, double *host_out, const float *x, size_t n) {
    (void)ctx, (void)x, (void)n;
    *host_out = 0.0;
    return FSC_OK;
}

static fsc_status k_absmax(void *ctx, float *host_max, int *host_nonfinite, const float *x, size_t n) {
    (void)ctx, (void)x, (void)n;
    *host_max = 1.0f;
    *host_nonfinite = 0;
    return FSC_OK;
}

static fsc_status k_sumsq_fixed(void *ctx, uint64_t acc[2], const float *x, size_t n, int shift) {
    (void)ctx, (void)acc, (void)x, (void)n, (void)shift;
    return FSC_OK;
}

static const fsc_device_ops count_ops = {
    .abi_version = FSC_DEVICE_ABI_VERSION,
    .name = "count",
    .alloc = count_alloc,
    .free = count_free,
    .upload = count_copy,
    .download = count_copy,
    .copy = count_copy,
    .memset = count_memset,
    .sync = count_sync,
    .destroy = count_destroy,
    .gemm = k_gemm,
    .convert = k_convert,
    .scale = k_scale,
    .axpy = k_axpy,
    .add = k_add,
    .gelu_forward = k_unary,
    .gelu_backward = k_unary_back,
    .bias_add = k_bias_add,
    .bias_grad = k_bias_add,
    .encoder_forward = k_encoder_forward,
    .encoder_backward = k_encoder_backward,
    .layernorm_forward = k_layernorm_forward,
    .layernorm_backward = k_layernorm_backward,
    .qkv_split = k_qkv,
    .qkv_merge = k_qkv_merge,
    .heads_merge = k_heads,
    .heads_split = k_heads,
    .softmax_causal_forward = k_softmax_forward,
    .softmax_causal_backward = k_softmax_backward,
    .xent_forward = k_xent_forward,
    .xent_backward = k_xent_backward,
    .sum = k_sum,
    .absmax = k_absmax,
    .sumsq_fixed = k_sumsq_fixed,
    .adamw = k_adamw,
    .sgd = k_sgd,
    .rmsnorm_forward = k_rmsnorm_forward,
    .rmsnorm_backward = k_rmsnorm_backward,
    .rope_forward = k_rope,
    .rope_backward = k_rope,
    .silu_forward = k_unary,
    .silu_backward = k_unary_back,
    .swiglu_forward = k_swiglu_forward,
    .swiglu_backward = k_swiglu_backward,
    .mul_forward = k_add,
    .mul_backward = k_mul_backward,
    .mse_forward = k_mse_forward,
    .mse_backward = k_mse_backward,
    .upload_async = count_copy_start,
    .download_async = count_copy_start,
    .copy_wait = count_copy_wait,
};

fsc_status fsc_count_device_open(int abi_version, const fsc_device_opts *opts, const fsc_device_ops **ops,
                                 void **ctx) {
    (void)opts;
    if (abi_version != FSC_DEVICE_ABI_VERSION)
        return fsc_error(FSC_ERR_UNSUPPORTED, "count device: ABI version %d requested, this build has %d",
                         abi_version, FSC_DEVICE_ABI_VERSION);
    count_ctx *c = calloc(1, sizeof *c);
    if (!c) return fsc_error(FSC_ERR_NOMEM, "count device: out of memory");
    atomic_init(&c->next, COUNT_FAKE_BASE);
    atomic_init(&c->gemm_flops, 0);
    *ops = &count_ops;
    *ctx = c;
    return FSC_OK;
}
