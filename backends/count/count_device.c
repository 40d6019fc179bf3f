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
 * - Every kernel call and copy counts its work from its arguments (the planner's time half): its FLOPs and the
 *   bytes it reads and writes (f32 elements, each operand once), summed by arithmetic intensity
 *   (fsc_count_work); a gemm's FLOPs also alone (fsc_count_gemm_flops). The FLOPs of the elementwise kernels
 *   are nominal (an exp or a tanh counts as a few): they lie far below any device's ridge point, their bytes
 *   are what costs. The simulated communicator's copies that stage a small collective's data through host
 *   memory are not counted (fsc_count_staging): a real communicator moves that data itself, in the time the
 *   network model gives the collective.
 * - The table has the cpu backend's optional entries and no others (no streams, no gemm_ex, asynchronous
 *   copies), so the engine takes the cpu device's code paths and allocates what it allocates there.
 * Not here: the ledger (lib/core/device.c), the planner (lib/plan/). */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "core/clock_impl.h"
#include "core/device_impl.h"

#define COUNT_FAKE_BASE ((uintptr_t)1 << (sizeof(uintptr_t) * 8 - 2))

/* One sweep of attention's row blocks counted (fsc_count_gemm_rows): what it adds, by bin. */
typedef struct {
    int kind, T, rows, hs, beta, batch; /* beta: C read */
    uint64_t flops[FSC_COUNT_BINS], bytes[FSC_COUNT_BINS], calls, gemm_flops;
} count_sweep;
enum { COUNT_SWEEPS = 8 }; /* sweeps kept (a model's attention has 3 kinds, 2 betas) */

typedef struct {
    _Atomic uintptr_t next;       /* the next fake address */
    count_sweep *sweeps;          /* (COUNT_SWEEPS) kept sweeps, NULL until the first; nsweeps used */
    int nsweeps;
    /* kernels, called by the rank's own thread only: plain counters (the planner's hot path, every kernel call of
     * every rank of a plan) */
    uint64_t gemm_flops;          /* 2 M N K batch of every gemm called */
    uint64_t flops[FSC_COUNT_BINS], bytes[FSC_COUNT_BINS]; /* every call's work, by intensity */
    uint64_t calls;               /* kernel calls (fsc_count_calls, with the copies') */
    /* copies and fills, also made by the communicator's progress threads (staging through host memory): bin 0 */
    _Atomic uint64_t copy_bytes, copy_calls;
    /* the replay's rates (fsc_count_set_rates): a call's roofline time moves the caller's modelled clock */
    double s_per_flop, s_per_byte, s_per_call;
} count_ctx;

/* floor(2 log2 x) for x > 0, from x's binary exponent (x = f 2^e, f in [0.5, 1)): 2 (e - 1), plus one when 2f is
 * at least sqrt(2). The planner asks it on every kernel call of every rank; log2 took a fifth of a large plan. */
static int half_octave(double x) {
    /* x is normal (flops / bytes of 64-bit counts): x = 1.m 2^(E - 1023), so e = E - 1022 and 2f = 1.m, whose
     * comparison with sqrt(2) (in [1, 2) too) is that of their mantissas' bits: frexp's answer without the call */
    static const double root2 = 1.41421356237309504880;
    uint64_t b, r;
    memcpy(&b, &x, sizeof b);
    memcpy(&r, &root2, sizeof r);
    const uint64_t mant = ((uint64_t)1 << 52) - 1;
    const int e = (int)((b >> 52) & 0x7ff) - 1022;
    return 2 * (e - 1) + ((b & mant) >= (r & mant) ? 1 : 0);
}

/* The replay's modelled time of a call (fsc_count_set_rates): the calling thread's modelled clock moves on. */
static void count_time(const count_ctx *c, uint64_t flops, uint64_t bytes) {
    if (c->s_per_call > 0 || c->s_per_flop > 0) {
        const double tf = (double)flops * c->s_per_flop, tb = (double)bytes * c->s_per_byte;
        fsc_clock_advance((tf > tb ? tf : tb) + c->s_per_call);
    }
}

/* Counts saturate at 2^64 - 1: a count past it is no count, and the planner refuses a plan whose gemm FLOPs reach
 * it (plan_memory.c). */
static uint64_t sat_mul(uint64_t a, uint64_t b) {
    uint64_t r;
    return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}
static void sat_add(uint64_t *to, uint64_t v) {
    if (__builtin_add_overflow(*to, v, to)) *to = UINT64_MAX;
}

/* `times` kernel calls of the same work into their intensity bin (fsc_count_work), on the rank's thread. */
static void count_work_times(count_ctx *c, uint64_t flops, uint64_t bytes, uint64_t times) {
    int b = FSC_COUNT_BINS - 1;
    if (bytes > 0 && flops == 0) b = 0;
    else if (bytes > 0) b = half_octave((double)flops / (double)bytes) + FSC_COUNT_BINS / 2;
    b = b < 0 ? 0 : b >= FSC_COUNT_BINS ? FSC_COUNT_BINS - 1 : b;
    sat_add(&c->flops[b], sat_mul(flops, times));
    sat_add(&c->bytes[b], sat_mul(bytes, times));
    sat_add(&c->calls, times);
}

/* One kernel call's work into its intensity bin (fsc_count_work), on the rank's thread. */
static void count_work(void *ctx, uint64_t flops, uint64_t bytes) {
    count_ctx *c = ctx;
    count_work_times(c, flops, bytes, 1);
    count_time(c, flops, bytes);
}

/* Set on a thread while the simulated communicator stages a collective's data through host memory
 * (fsc_count_staging): its copies are not the rank's work. */
static _Thread_local int tl_staging;

void fsc_count_staging(int on) { tl_staging = on != 0; }

/* A copy's or fill's bytes (no FLOPs: bin 0), on any thread; none while the thread stages a collective. */
static void count_bytes(void *ctx, uint64_t bytes) {
    count_ctx *c = ctx;
    if (tl_staging) return;
    atomic_fetch_add_explicit(&c->copy_bytes, bytes, memory_order_relaxed);
    atomic_fetch_add_explicit(&c->copy_calls, 1, memory_order_relaxed);
    count_time(c, 0, bytes);
}

void fsc_count_set_rates(fsc_device *dev, double flops_per_s, double bytes_per_s, double kernel_s) {
    if (!fsc_device_is_count(dev)) return;
    count_ctx *c = dev->ctx;
    const int on = flops_per_s > 0 && bytes_per_s > 0;
    c->s_per_flop = on ? 1.0 / flops_per_s : 0;
    c->s_per_byte = on ? 1.0 / bytes_per_s : 0;
    c->s_per_call = on && kernel_s > 0 ? kernel_s : 0;
}

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
    count_bytes(ctx, 2 * (uint64_t)bytes);
    if (fsc_count_is_fake(dst) || dst == src) return FSC_OK;
    if (fsc_count_is_fake(src)) memset(dst, 0, bytes);
    else memmove(dst, src, bytes);
    return FSC_OK;
}

static fsc_status count_memset(void *ctx, void *dst, int value, size_t bytes) {
    count_bytes(ctx, bytes);
    if (!fsc_count_is_fake(dst)) memset(dst, value, bytes);
    return FSC_OK;
}

static fsc_status count_sync(void *ctx) { (void)ctx; return FSC_OK; }

static void count_destroy(void *ctx) {
    count_ctx *c = ctx;
    if (c) free(c->sweeps);
    free(ctx);
}

static char count_copy_handle; /* what an asynchronous copy's handle points at: the copy is made at its start */

static fsc_status count_copy_start(void *ctx, void *dst, const void *src, size_t bytes, void **copy) {
    *copy = &count_copy_handle;
    return count_copy(ctx, dst, src, bytes);
}

static fsc_status count_copy_wait(void *ctx, void *copy) { (void)ctx; (void)copy; return FSC_OK; }

/* ---- kernels: nothing computed, their work counted; in the table's signatures ---- */
#define U(x) ((uint64_t)(x))
/* a kernel of flops FLOPs reading and writing f32 elements (each operand once) */
#define WORK(name, flops, elems, ...)                                                                              \
    static fsc_status name(void *ctx, __VA_ARGS__) {                                                               \
        count_work(ctx, (flops), 4 * (elems));                                                                     \
        return FSC_OK;                                                                                             \
    }

/* a product is counted, not computed: A, B read, C written (and read when beta is not 0); `times` alike */
static void gemm_times(count_ctx *c, int M, int N, int K, float be, int batch, uint64_t times) {
    if (M <= 0 || N <= 0 || K <= 0 || batch <= 0) return;
    const uint64_t flops = sat_mul(sat_mul(sat_mul(2 * U(M), U(N)), U(K)), U(batch));
    uint64_t elems = U(M) * U(K); /* each product of two ints: below 2^62 */
    sat_add(&elems, U(K) * U(N));
    sat_add(&elems, sat_mul(U(M) * U(N), be != 0.0f ? 2 : 1));
    const uint64_t bytes = sat_mul(4 * U(batch), elems);
    sat_add(&c->gemm_flops, sat_mul(flops, times));
    count_work_times(c, flops, bytes, times);
    if (c->s_per_call > 0 || c->s_per_flop > 0) /* a replay's clock moves call by call */
        for (uint64_t i = 0; i < times; i++) count_time(c, flops, bytes);
}

static fsc_status k_gemm(void *ctx, int ta, int tb, int M, int N, int K, float al, const float *A, int lda, int64_t sa,
                         const float *B, int ldb, int64_t sb, float be, float *C, int ldc, int64_t sc, int batch) {
    gemm_times(ctx, M, N, K, be, batch, 1);
    return FSC_OK;
}

int fsc_count_bulk(const fsc_device *dev) {
    if (!fsc_device_is_count(dev)) return 0;
    const count_ctx *c = dev->ctx;
    return c->s_per_flop == 0 && c->s_per_call == 0;
}

/* One sweep's blocks counted into a zeroed context's counters (no clock: fsc_count_bulk). */
static void sweep_blocks(count_ctx *c, int kind, int T, int rows, int hs, float beta, int batch) {
    for (int i0 = 0; i0 < T; i0 += rows) {
        const int i1 = i0 + rows < T ? i0 + rows : T;
        if (kind == FSC_COUNT_SCORES) gemm_times(c, i1 - i0, i1, hs, beta, batch, 1);
        else if (kind == FSC_COUNT_LOWER) gemm_times(c, i1 - i0, hs, i1, beta, batch, 1);
        else gemm_times(c, i1 - i0, hs, T - i0, beta, batch, 1);
    }
}

void fsc_count_gemm_rows(fsc_device *dev, int kind, int T, int rows, int hs, float beta, int batch, uint64_t times) {
    if (!fsc_count_bulk(dev) || T <= 0 || rows <= 0) return;
    count_ctx *c = dev->ctx;
    const int b = beta != 0.0f;
    const count_sweep *w = NULL;
    for (int i = 0; i < c->nsweeps && !w; i++) {
        const count_sweep *x = &c->sweeps[i];
        if (x->kind == kind && x->T == T && x->rows == rows && x->hs == hs && x->beta == b && x->batch == batch) w = x;
    }
    count_sweep one; /* a sweep counted now (kept where there is room) */
    if (!w) {
        count_ctx *tmp = calloc(1, sizeof *tmp);
        if (!c->sweeps) c->sweeps = calloc(COUNT_SWEEPS, sizeof *c->sweeps);
        if (!tmp) { /* no memory for a scratch context: block by block */
            for (uint64_t k = 0; k < times; k++) sweep_blocks(c, kind, T, rows, hs, beta, batch);
            return;
        }
        sweep_blocks(tmp, kind, T, rows, hs, beta, batch);
        one = (count_sweep){.kind = kind, .T = T, .rows = rows, .hs = hs, .beta = b, .batch = batch,
                            .calls = tmp->calls, .gemm_flops = tmp->gemm_flops};
        memcpy(one.flops, tmp->flops, sizeof one.flops);
        memcpy(one.bytes, tmp->bytes, sizeof one.bytes);
        free(tmp);
        if (c->sweeps && c->nsweeps < COUNT_SWEEPS) c->sweeps[c->nsweeps++] = one;
        w = &one;
    }
    for (int i = 0; i < FSC_COUNT_BINS; i++) {
        sat_add(&c->flops[i], sat_mul(w->flops[i], times));
        sat_add(&c->bytes[i], sat_mul(w->bytes[i], times));
    }
    sat_add(&c->calls, sat_mul(w->calls, times));
    sat_add(&c->gemm_flops, sat_mul(w->gemm_flops, times));
}

uint64_t fsc_count_gemm_flops(const fsc_device *dev) {
    return fsc_device_is_count(dev) ? ((const count_ctx *)dev->ctx)->gemm_flops : 0;
}

uint64_t fsc_count_calls(const fsc_device *dev) {
    if (!fsc_device_is_count(dev)) return 0;
    count_ctx *c = dev->ctx;
    return c->calls + atomic_load_explicit(&c->copy_calls, memory_order_relaxed);
}

void fsc_count_work(const fsc_device *dev, double *flops, double *bytes) {
    count_ctx *c = fsc_device_is_count(dev) ? dev->ctx : NULL;
    for (int b = 0; b < FSC_COUNT_BINS; b++) {
        flops[b] = c ? (double)c->flops[b] : 0;
        bytes[b] = c ? (double)c->bytes[b] : 0;
    }
    if (c) bytes[0] += (double)atomic_load_explicit(&c->copy_bytes, memory_order_relaxed); /* copies: no FLOPs */
}

static fsc_status k_convert(void *ctx, void *dst, fsc_dtype dt, const void *src, fsc_dtype st, size_t n) {
    count_work(ctx, U(n), U(n) * (fsc_dtype_size(dt) + fsc_dtype_size(st)));
    return FSC_OK;
}
WORK(k_scale, U(n), 2 * U(n), float *x, float a, size_t n)
WORK(k_axpy, 2 * U(n), 3 * U(n), float *y, float a, const float *x, size_t n)
WORK(k_add, U(n), 3 * U(n), float *out, const float *a, const float *b, size_t n)
WORK(k_unary, 8 * U(n), 2 * U(n), float *out, const float *inp, size_t n)
WORK(k_unary_back, 12 * U(n), 3 * U(n), float *dinp, const float *inp, const float *dout, size_t n)
WORK(k_bias_add, U(N) * U(OC), 2 * U(N) * U(OC) + U(OC), float *out, const float *bias, size_t N, int OC)
WORK(k_encoder_forward, U(B) * U(T) * U(C), 3 * U(B) * U(T) * U(C) + U(B) * U(T), float *out, const int32_t *tok,
     const float *wte, const float *wpe, int B, int T, int C)
WORK(k_encoder_backward, 2 * U(B) * U(T) * U(C), 5 * U(B) * U(T) * U(C) + U(B) * U(T), float *dwte, float *dwpe,
     const float *dout, const int32_t *tok, int B, int T, int C)
WORK(k_layernorm_forward, 8 * U(N) * U(C), 2 * U(N) * U(C) + 2 * U(C) + 2 * U(N), float *out, float *mean,
     float *rstd, const float *inp, const float *w, const float *b, size_t N, int C)
/* The norms' backward, both halves or either alone (the split backward's parts): by rows dinp (fr flops an element;
 * reads the weight, writes dinp), by columns the np parameter gradients (fc flops an element); both read x and
 * dout and the ns statistics a row. */
static void norm_back_work(void *ctx, int rows, int cols, size_t N, int C, uint64_t fr, uint64_t fc, uint64_t np,
                           uint64_t ns) {
    const uint64_t NC = U(N) * U(C);
    count_work(ctx, (rows ? fr : 0) * NC + (cols ? fc : 0) * NC,
               4 * (2 * NC + ns * U(N) + (rows ? NC + U(C) : 0) + (cols ? 2 * np * U(C) : 0)));
}

static fsc_status k_layernorm_backward(void *ctx, float *dinp, float *dw, float *db, const float *dout,
                                       const float *inp, const float *w, const float *mean, const float *rstd,
                                       size_t N, int C) {
    (void)db, (void)dout, (void)inp, (void)w, (void)mean, (void)rstd;
    norm_back_work(ctx, dinp != NULL, dw != NULL, N, C, 10, 4, 2, 2);
    return FSC_OK;
}
WORK(k_qkv, 0, 6 * U(B) * U(T) * U(NH) * U(HS), float *q, float *k, float *v, const float *qkv, int B, int T,
     int NH, int HS)
WORK(k_qkv_merge, 0, 6 * U(B) * U(T) * U(NH) * U(HS), float *dqkv, const float *dq, const float *dk,
     const float *dv, int B, int T, int NH, int HS)
WORK(k_heads, 0, 2 * U(B) * U(T) * U(NH) * U(HS), float *out, const float *y, int B, int T, int NH, int HS)
WORK(k_softmax_forward, 4 * U(BH) * U(T) * U(T), 2 * U(BH) * U(T) * U(T), float *att, const float *pre, int BH,
     int T, float scale)
WORK(k_softmax_backward, 4 * U(BH) * U(T) * U(T), 3 * U(BH) * U(T) * U(T), float *dpre, const float *datt,
     const float *att, int BH, int T, float scale)
WORK(k_xent_forward, 4 * U(N) * U(V), U(N) * U(V) + 2 * U(N), float *losses, const float *logits,
     const int32_t *targets, size_t N, int V, int ld)
WORK(k_xent_backward, 4 * U(N) * U(V), 2 * U(N) * U(V) + U(N), float *dlogits, const float *logits,
     const int32_t *targets, size_t N, int V, int ld, float scale)
WORK(k_adamw, 14 * U(n), 7 * U(n), float *p, const float *g, float *m, float *v, size_t n, float lr, float b1,
     float b2, float eps, float wd, float bc1, float bc2)
WORK(k_sgd, 4 * U(n), 5 * U(n), float *p, const float *g, float *buf, size_t n, float lr, float momentum, float wd,
     int first)
WORK(k_rmsnorm_forward, 5 * U(N) * U(C), 2 * U(N) * U(C) + U(C) + U(N), float *out, float *rstd, const float *inp,
     const float *w, size_t N, int C, float eps)
static fsc_status k_rmsnorm_backward(void *ctx, float *dinp, float *dw, const float *dout, const float *inp,
                                     const float *w, const float *rstd, size_t N, int C) {
    (void)dout, (void)inp, (void)w, (void)rstd;
    norm_back_work(ctx, dinp != NULL, dw != NULL, N, C, 5, 3, 1, 1);
    return FSC_OK;
}
WORK(k_rope, 6 * U(B) * U(T) * U(H) * U(D), 2 * U(B) * U(T) * U(H) * U(D), float *out, const float *inp, int B,
     int T, int H, int D, int ld, float theta)
WORK(k_swiglu_forward, 8 * U(n), 3 * U(n), float *out, const float *gate, const float *up, size_t n)
WORK(k_swiglu_backward, 14 * U(n), 5 * U(n), float *dgate, float *dup, const float *gate, const float *up,
     const float *dout, size_t n)
WORK(k_mul_backward, 2 * U(n), 5 * U(n), float *da, float *db, const float *a, const float *b, const float *dout,
     size_t n)
WORK(k_mse_forward, 3 * U(N) * U(C), 2 * U(N) * U(C) + U(N), float *losses, const float *pred,
     const float *target, size_t N, int C)
WORK(k_mse_backward, 3 * U(N) * U(C), 3 * U(N) * U(C), float *dpred, const float *pred, const float *target,
     size_t N, int C, float scale)

/* the kernels that answer on the host: a sum of 0; finite values whose largest magnitude is 1, not 0 (code that
 * takes a shortcut for all-zero gradients, such as the grad norm's, then takes the path real data takes, with
 * its allocations); a sum of squares of 0 (a norm of 0, which clips nothing). Each reads its n values. */
static fsc_status k_sum(void *ctx, double *host_out, const float *x, size_t n) {
    (void)x;
    count_work(ctx, U(n), 4 * U(n));
    *host_out = 0.0;
    return FSC_OK;
}

static fsc_status k_absmax(void *ctx, float *host_max, int *host_nonfinite, const float *x, size_t n) {
    (void)x;
    count_work(ctx, 2 * U(n), 4 * U(n));
    *host_max = 1.0f;
    *host_nonfinite = 0;
    return FSC_OK;
}

static fsc_status k_sumsq_fixed(void *ctx, uint64_t acc[2], const float *x, size_t n, int shift) {
    (void)acc, (void)x, (void)shift;
    count_work(ctx, 3 * U(n), 4 * U(n));
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
    atomic_init(&c->copy_bytes, 0);
    atomic_init(&c->copy_calls, 0);
    *ops = &count_ops;
    *ctx = c;
    return FSC_OK;
}
