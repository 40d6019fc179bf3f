/* The CPU device: host memory (64-byte aligned) and the kernel table (fsc/plugin/device_ops.h).
 * Device pointers are host pointers, so uploads and downloads are memcpy. Every call returns when its work
 * is done, so the stream/event entries are NULL; but an asynchronous copy (upload_async, download_async) is
 * made as late as its contract allows, when it (or a copy started after it) is waited for or the device is
 * synchronized: code that reads a destination or changes a source before the wait then computes other bits,
 * which the bitwise tests catch (on a GPU such code would race with the copy).
 * opts->threads > 0 calls openblas_set_num_threads, which is PROCESS-GLOBAL in OpenBLAS: the last
 * device created with a thread count sets it for every device (and every simulated rank). sgemm bits
 * depend on that count (cpu_kernels.c), so runs compared bit for bit must use the same one. When the last
 * device that set a count is destroyed, the count the process had before the first is put back (blas_take,
 * blas_give_back): a run leaves the host program's BLAS as it found it, and a later device of threads 0 has
 * the same count whatever ran before it.
 * The device's own kernels run on a pool of that many threads (cpu_pool.c; OpenBLAS's count when
 * threads is 0), and their bits do not depend on it. */
#include <stdlib.h>
#include <string.h>
#include <cblas.h>
#include "cpu.h"

/* declared here too in case cblas.h is not OpenBLAS's */
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);

/* OpenBLAS's thread count is one for the process: the devices that set one share it (the last set wins), and the
 * count before the first of them comes back after the last */
static pthread_mutex_t blas_mu = PTHREAD_MUTEX_INITIALIZER;
static int blas_users, blas_before;

static void blas_take(int threads) {
    pthread_mutex_lock(&blas_mu);
    if (blas_users++ == 0) blas_before = openblas_get_num_threads();
    openblas_set_num_threads(threads);
    pthread_mutex_unlock(&blas_mu);
}

static void blas_give_back(void) {
    pthread_mutex_lock(&blas_mu);
    if (--blas_users == 0) openblas_set_num_threads(blas_before);
    pthread_mutex_unlock(&blas_mu);
}

static void *cpu_alloc(void *ctx, size_t bytes) {
    size_t rounded = (bytes + 63) & ~(size_t)63;
    if (rounded < bytes) return NULL;
    return aligned_alloc(64, rounded);
}

static void cpu_free(void *ctx, void *p) { free(p); }

/* Large fills and copies are split over the pool (memory bandwidth per core is the limit). */
typedef struct { unsigned char *dst; const unsigned char *src; int value; } fill_arg;
static void memset_range(void *p, size_t lo, size_t hi) {
    fill_arg *a = p;
    memset(a->dst + lo, a->value, hi - lo);
}
static void memcpy_range(void *p, size_t lo, size_t hi) {
    fill_arg *a = p;
    memcpy(a->dst + lo, a->src + lo, hi - lo);
}

static fsc_status cpu_upload(void *ctx, void *dst, const void *src, size_t bytes) {
    memcpy(dst, src, bytes);
    return FSC_OK;
}

static fsc_status cpu_copy(void *ctx, void *dst, const void *src, size_t bytes) {
    if (dst == src) return FSC_OK;
    const unsigned char *d = dst, *s = src;
    if (d + bytes <= s || s + bytes <= d) { /* disjoint */
        fill_arg a = { dst, src, 0 };
        cpu_parallel(ctx, bytes, 64, 1 << 20, memcpy_range, &a);
    } else {
        memmove(dst, src, bytes);
    }
    return FSC_OK;
}

static fsc_status cpu_memset(void *ctx, void *dst, int value, size_t bytes) {
    fill_arg a = { dst, NULL, value };
    cpu_parallel(ctx, bytes, 64, 1 << 20, memset_range, &a);
    return FSC_OK;
}

/* ---- asynchronous copies: a queue in issue order, each made when it or a later one is waited for ---- */
struct cpu_async_copy {
    void *dst;
    const void *src;
    size_t bytes;
    int done;
    cpu_async_copy *next;
};

static fsc_status cpu_copy_start(void *ctx, void *dst, const void *src, size_t bytes, void **copy) {
    cpu_ctx *c = ctx;
    cpu_async_copy *q = calloc(1, sizeof *q);
    if (!q) return fsc_error(FSC_ERR_NOMEM, "cpu device: out of host memory for a copy");
    q->dst = dst;
    q->src = src;
    q->bytes = bytes;
    pthread_mutex_lock(&c->copy_mu);
    if (c->copy_tail) c->copy_tail->next = q;
    else c->copy_head = q;
    c->copy_tail = q;
    pthread_mutex_unlock(&c->copy_mu);
    *copy = q;
    return FSC_OK;
}

/* Make the queued copies up to and including upto (NULL: all) that are not made yet. Under copy_mu. */
static void copies_make(cpu_ctx *c, const cpu_async_copy *upto) {
    for (cpu_async_copy *q = c->copy_head; q; q = q->next) {
        if (!q->done) memcpy(q->dst, q->src, q->bytes);
        q->done = 1;
        if (q == upto) break;
    }
}

static fsc_status cpu_copy_wait(void *ctx, void *copy) {
    cpu_ctx *c = ctx;
    cpu_async_copy *x = copy, *prev = NULL;
    pthread_mutex_lock(&c->copy_mu);
    copies_make(c, x);
    for (cpu_async_copy *q = c->copy_head; q && q != x; q = q->next) prev = q;
    if (prev) prev->next = x->next;
    else if (c->copy_head == x) c->copy_head = x->next;
    if (c->copy_tail == x) c->copy_tail = prev;
    pthread_mutex_unlock(&c->copy_mu);
    free(x);
    return FSC_OK;
}

/* Every queued copy made (their handles stay valid until waited for). */
static fsc_status cpu_sync(void *ctx) {
    cpu_ctx *c = ctx;
    if (!c) return FSC_OK;
    pthread_mutex_lock(&c->copy_mu);
    copies_make(c, NULL);
    pthread_mutex_unlock(&c->copy_mu);
    return FSC_OK;
}

static void cpu_destroy(void *ctx) {
    cpu_ctx *c = ctx;
    if (!c) return;
    for (cpu_async_copy *q = c->copy_head, *n; q; q = n) { /* never waited for: dropped, not made */
        n = q->next;
        free(q);
    }
    pthread_mutex_destroy(&c->copy_mu);
    cpu_pool_free(c->pool);
    if (c->blas_set) blas_give_back();
    free(c);
}

static const fsc_device_ops cpu_ops = {
    .abi_version = FSC_DEVICE_ABI_VERSION,
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_upload,
    .download = cpu_upload,
    .copy = cpu_copy,
    .memset = cpu_memset,
    .sync = cpu_sync,
    .destroy = cpu_destroy,
    .gemm = cpu_gemm,
    .convert = cpu_convert,
    .scale = cpu_scale,
    .axpy = cpu_axpy,
    .add = cpu_add,
    .gelu_forward = cpu_gelu_forward,
    .gelu_backward = cpu_gelu_backward,
    .bias_add = cpu_bias_add,
    .bias_grad = cpu_bias_grad,
    .encoder_forward = cpu_encoder_forward,
    .encoder_backward = cpu_encoder_backward,
    .layernorm_forward = cpu_layernorm_forward,
    .layernorm_backward = cpu_layernorm_backward,
    .qkv_split = cpu_qkv_split,
    .qkv_merge = cpu_qkv_merge,
    .heads_merge = cpu_heads_merge,
    .heads_split = cpu_heads_split,
    .softmax_causal_forward = cpu_softmax_causal_forward,
    .softmax_causal_backward = cpu_softmax_causal_backward,
    .xent_forward = cpu_xent_forward,
    .xent_backward = cpu_xent_backward,
    .sum = cpu_sum,
    .absmax = cpu_absmax,
    .sumsq_fixed = cpu_sumsq_fixed,
    .adamw = cpu_adamw,
    .sgd = cpu_sgd,
    .rmsnorm_forward = cpu_rmsnorm_forward,
    .rmsnorm_backward = cpu_rmsnorm_backward,
    .rope_forward = cpu_rope_forward,
    .rope_backward = cpu_rope_backward,
    .silu_forward = cpu_silu_forward,
    .silu_backward = cpu_silu_backward,
    .swiglu_forward = cpu_swiglu_forward,
    .swiglu_backward = cpu_swiglu_backward,
    .mul_forward = cpu_mul_forward,
    .mul_backward = cpu_mul_backward,
    .mse_forward = cpu_mse_forward,
    .mse_backward = cpu_mse_backward,
    /* streams and events: NULL, everything runs in order on the calling thread */
    .upload_async = cpu_copy_start,
    .download_async = cpu_copy_start,
    .copy_wait = cpu_copy_wait,
};

fsc_status fsc_cpu_device_open(int abi_version, const fsc_device_opts *opts, const fsc_device_ops **ops,
                               void **ctx) {
    if (abi_version != FSC_DEVICE_ABI_VERSION)
        return fsc_error(FSC_ERR_UNSUPPORTED, "cpu device: ABI version %d requested, this build has %d",
                         abi_version, FSC_DEVICE_ABI_VERSION);
    cpu_ctx *c = calloc(1, sizeof *c);
    if (!c || pthread_mutex_init(&c->copy_mu, NULL) != 0) {
        free(c);
        return fsc_error(FSC_ERR_NOMEM, "cpu device: out of memory");
    }
    if (opts && opts->threads > 0) blas_take(opts->threads), c->blas_set = 1;
    c->pool = cpu_pool_create(opts && opts->threads > 0 ? opts->threads : openblas_get_num_threads());
    *ops = &cpu_ops;
    *ctx = c;
    return FSC_OK;
}
