/* The cuda device of the plug-in: opening a GPU (with the interface version check), the kernel table,
 * streams and events, synchronization, scratch memory and error reporting.
 * Memory and copies live in cuda_memory.cu, the kernels in the other .cu files, NCCL in nccl_comm.cu.
 *
 * Errors: messages go to the core's fsc_error. The core hands it over through fsc_plugin_init (an
 * executable linked with the static libfsc.a exports no symbols); failing that, a weak reference finds
 * it when libfsc.so is loaded; failing both, the message is kept here (fsc_cuda_last_error). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cuda_internal.h"

#pragma weak fsc_error

static fsc_error_fn host_error; /* the core's fsc_error: one per process, like the core itself */
static thread_local char local_msg[1024];

extern "C" __attribute__((visibility("default"))) void fsc_plugin_init(int abi_version, fsc_error_fn error) {
    if (abi_version == FSC_DEVICE_ABI_VERSION && error) host_error = error;
}

extern "C" __attribute__((visibility("default"))) const char *fsc_cuda_last_error(void) { return local_msg; }

fsc_status cu_err(fsc_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(local_msg, sizeof local_msg, fmt, ap);
    va_end(ap);
    fsc_error_fn f = host_error ? host_error : (&fsc_error ? fsc_error : NULL);
    if (f) f(s, "%s", local_msg);
    return s;
}

static fsc_status status_of(cudaError_t e) {
    switch (e) {
    case cudaErrorMemoryAllocation: return FSC_ERR_NOMEM;
    case cudaErrorInvalidValue: return FSC_ERR_INVALID;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion:
    case cudaErrorInvalidDeviceFunction:
    case cudaErrorDevicesUnavailable:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice: return FSC_ERR_UNSUPPORTED;
    default: return FSC_ERR_INTERNAL;
    }
}

fsc_status cu_check(cudaError_t e, const char *what) {
    if (e == cudaSuccess) return FSC_OK;
    (void)cudaGetLastError(); /* clear it, so the next launch check does not report it again */
    return cu_err(status_of(e), "cuda: %s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

fsc_status cu_blas_check(cublasStatus_t e, const char *what) {
    if (e == CUBLAS_STATUS_SUCCESS) return FSC_OK;
    fsc_status s = e == CUBLAS_STATUS_ALLOC_FAILED ? FSC_ERR_NOMEM
                   : e == CUBLAS_STATUS_INVALID_VALUE ? FSC_ERR_INVALID
                   : (e == CUBLAS_STATUS_NOT_SUPPORTED || e == CUBLAS_STATUS_ARCH_MISMATCH) ? FSC_ERR_UNSUPPORTED
                                                                                          : FSC_ERR_INTERNAL;
    return cu_err(s, "cublas: %s: %s (%s)", what, cublasGetStatusString(e), cublasGetStatusName(e));
}

fsc_status cu_launched(const char *kernel) {
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) return FSC_OK;
    return cu_err(status_of(e), "cuda: kernel %s failed to launch: %s (%s)", kernel, cudaGetErrorString(e),
                  cudaGetErrorName(e));
}

fsc_status cu_deferred_check(cu_ctx *c) {
    unsigned long long w = *(volatile unsigned long long *)c->derr_host;
    if (!w) return FSC_OK;
    *(volatile unsigned long long *)c->derr_host = 0;
    unsigned code = (unsigned)(w >> 56);
    unsigned long long at = w & ((1ull << 56) - 1);
    if (code == CU_DERR_NEG_TOKEN)
        return cu_err(FSC_ERR_INVALID, "encoder: a negative token at position %llu (found on the GPU, reported at "
                      "the next synchronization; that output row is NaN)", at);
    if (code == CU_DERR_TARGET)
        return cu_err(FSC_ERR_INVALID, "cross entropy: the target at row %llu is outside [0, V) (found on the GPU, "
                      "reported at the next synchronization; that row's loss is NaN)", at);
    return cu_err(FSC_ERR_INTERNAL, "cuda: unknown deferred error word %#llx", w);
}

fsc_status cu_enter(cu_ctx *c) { return cu_check(cudaSetDevice(c->ordinal), "cudaSetDevice"); }

int cu_is_ctx(const void *ctx) { return ctx && ((const cu_ctx *)ctx)->magic == CU_MAGIC; }

fsc_status cu_scratch(cu_ctx *c, size_t bytes, void **out) {
    cu_stream *st = c->cur;
    if (bytes > st->scratch_cap) {
        size_t cap = bytes < 2 * st->scratch_cap ? 2 * st->scratch_cap : bytes;
        cap = (cap + 4095) & ~(size_t)4095;
        if (st->scratch) { /* the old buffer may still be read by queued work on this stream */
            FSC_TRY(cu_check(cudaStreamSynchronize(st->s), "scratch: cudaStreamSynchronize"));
            cudaFree(st->scratch);
            st->scratch = NULL;
            st->scratch_cap = 0;
        }
        FSC_TRY(cu_check(cudaMalloc(&st->scratch, cap), "scratch: cudaMalloc"));
        st->scratch_cap = cap;
    }
    *out = st->scratch;
    return FSC_OK;
}

fsc_status cu_host_scratch(cu_ctx *c, size_t bytes, void **out) {
    FSC_TRY(cu_check(cudaEventSynchronize(c->host_ev), "host scratch: cudaEventSynchronize"));
    if (bytes > c->host_scratch_cap) {
        if (c->host_scratch) cudaFreeHost(c->host_scratch);
        c->host_scratch = NULL;
        c->host_scratch_cap = 0;
        size_t cap = (bytes + 65535) & ~(size_t)65535;
        FSC_TRY(cu_check(cudaHostAlloc(&c->host_scratch, cap, cudaHostAllocDefault), "cudaHostAlloc"));
        c->host_scratch_cap = cap;
    }
    *out = c->host_scratch;
    return FSC_OK;
}

fsc_status cu_blas_bind(cu_ctx *c) {
    if (c->blas_bound == c->cur) return FSC_OK;
    cu_stream *st = c->cur;
    if (!st->blas_ws) FSC_TRY(cu_check(cudaMalloc(&st->blas_ws, CU_BLAS_WS_BYTES), "cuBLAS workspace: cudaMalloc"));
    /* one workspace per stream: cuBLAS results stay deterministic when streams run concurrently */
    FSC_TRY(cu_blas_check(cublasSetStream(c->blas, st->s), "cublasSetStream"));
    FSC_TRY(cu_blas_check(cublasSetWorkspace(c->blas, st->blas_ws, CU_BLAS_WS_BYTES), "cublasSetWorkspace"));
    c->blas_bound = st;
    return FSC_OK;
}

fsc_status cu_sync_all(cu_ctx *c) {
    FSC_TRY(cu_enter(c));
    for (int i = 0; i < c->nstreams; i++)
        FSC_TRY(cu_check(cudaStreamSynchronize(c->streams[i]->s), "cudaStreamSynchronize"));
    return cu_deferred_check(c);
}

/* ---- streams and events ---- */

static void stream_release(cu_stream *st) {
    if (!st) return;
    if (st->s) {
        cudaStreamSynchronize(st->s);
        cudaStreamDestroy(st->s);
    }
    cudaFree(st->scratch);
    cudaFree(st->blas_ws);
    free(st);
}

static fsc_status stream_new(cu_ctx *c, cu_stream **out) {
    if (c->nstreams >= CU_MAX_STREAMS)
        return cu_err(FSC_ERR_INVALID, "cuda: at most %d streams per device (destroy unused ones)", CU_MAX_STREAMS);
    cu_stream *st = (cu_stream *)calloc(1, sizeof *st);
    if (!st) return cu_err(FSC_ERR_NOMEM, "cuda: out of host memory for a stream");
    fsc_status s = cu_check(cudaStreamCreateWithFlags(&st->s, cudaStreamNonBlocking), "cudaStreamCreate");
    if (s != FSC_OK) {
        free(st);
        return s;
    }
    c->streams[c->nstreams++] = st;
    *out = st;
    return FSC_OK;
}

static cu_stream *stream_find(cu_ctx *c, void *stream) {
    if (!stream) return c->cur;
    for (int i = 0; i < c->nstreams; i++)
        if (c->streams[i] == stream) return c->streams[i];
    return NULL;
}

static fsc_status cu_stream_create(void *ctx, void **stream) {
    cu_ctx *c = cu_of(ctx);
    if (!stream) return cu_err(FSC_ERR_INVALID, "cuda: stream_create: out is NULL");
    FSC_TRY(cu_enter(c));
    cu_stream *st;
    FSC_TRY(stream_new(c, &st));
    *stream = st;
    return FSC_OK;
}

static fsc_status cu_stream_destroy(void *ctx, void *stream) {
    cu_ctx *c = cu_of(ctx);
    cu_stream *st = stream ? stream_find(c, stream) : NULL;
    if (!st) return cu_err(FSC_ERR_INVALID, "cuda: stream_destroy: %p is not a stream of this device", stream);
    if (st == c->streams[0]) return cu_err(FSC_ERR_INVALID, "cuda: stream_destroy: the main stream is not destroyable");
    FSC_TRY(cu_enter(c));
    if (st == c->copy) return cu_err(FSC_ERR_INVALID, "cuda: stream_destroy: the copy stream is not destroyable");
    if (c->cur == st) c->cur = c->streams[0];
    if (c->blas_bound == st) c->blas_bound = NULL;
    int j = 0;
    for (int i = 0; i < c->nstreams; i++)
        if (c->streams[i] != st) c->streams[j++] = c->streams[i];
    c->nstreams = j;
    stream_release(st);
    return FSC_OK;
}

/* stream NULL: the main stream. */
static fsc_status cu_set_stream(void *ctx, void *stream) {
    cu_ctx *c = cu_of(ctx);
    cu_stream *st = stream ? stream_find(c, stream) : c->streams[0];
    if (!st) return cu_err(FSC_ERR_INVALID, "cuda: set_stream: %p is not a stream of this device", stream);
    c->cur = st;
    return FSC_OK;
}

/* *event NULL: a new event owned by the device (freed with it); otherwise it is recorded again.
 * stream NULL: the current stream. */
static fsc_status cu_event_record(void *ctx, void **event, void *stream) {
    cu_ctx *c = cu_of(ctx);
    if (!event) return cu_err(FSC_ERR_INVALID, "cuda: event_record: event is NULL");
    cu_stream *st = stream_find(c, stream);
    if (!st) return cu_err(FSC_ERR_INVALID, "cuda: event_record: %p is not a stream of this device", stream);
    FSC_TRY(cu_enter(c));
    if (!*event) {
        if (c->nevents == c->cap_events) {
            int cap = c->cap_events ? 2 * c->cap_events : 16;
            cudaEvent_t *ne = (cudaEvent_t *)realloc(c->events, (size_t)cap * sizeof *ne);
            if (!ne) return cu_err(FSC_ERR_NOMEM, "cuda: out of host memory for events");
            c->events = ne;
            c->cap_events = cap;
        }
        cudaEvent_t e;
        FSC_TRY(cu_check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate"));
        c->events[c->nevents++] = e;
        *event = (void *)e;
    }
    return cu_check(cudaEventRecord((cudaEvent_t)*event, st->s), "cudaEventRecord");
}

static fsc_status cu_stream_wait(void *ctx, void *stream, void *event) {
    cu_ctx *c = cu_of(ctx);
    cu_stream *st = stream_find(c, stream);
    if (!st) return cu_err(FSC_ERR_INVALID, "cuda: stream_wait: %p is not a stream of this device", stream);
    if (!event) return cu_err(FSC_ERR_INVALID, "cuda: stream_wait: event is NULL");
    FSC_TRY(cu_enter(c));
    return cu_check(cudaStreamWaitEvent(st->s, (cudaEvent_t)event, 0), "cudaStreamWaitEvent");
}

static fsc_status cu_sync(void *ctx) { return cu_sync_all(cu_of(ctx)); }

/* ---- open and destroy ---- */

static void cu_destroy(void *ctx) {
    cu_ctx *c = cu_of(ctx);
    if (!c) return;
    cudaSetDevice(c->ordinal);
    for (int i = 0; i < c->nstreams; i++) cudaStreamSynchronize(c->streams[i]->s);
    cu_cache_destroy(c);
    if (c->blas) cublasDestroy(c->blas);
    for (int i = 0; i < c->nevents; i++) cudaEventDestroy(c->events[i]);
    free(c->events);
    for (int i = 0; i < 2; i++) {
        if (c->stage[i]) cudaFreeHost(c->stage[i]);
        if (c->stage_ev[i]) cudaEventDestroy(c->stage_ev[i]);
    }
    if (c->stage_mu_ok) pthread_mutex_destroy(&c->stage_mu);
    if (c->host_scratch) cudaFreeHost(c->host_scratch);
    if (c->host_ev) cudaEventDestroy(c->host_ev);
    if (c->derr_host) cudaFreeHost(c->derr_host);
    for (int i = 0; i < c->nstreams; i++) stream_release(c->streams[i]);
    c->magic = 0;
    free(c);
    (void)cudaGetLastError();
}

/* The table, filled by name (a positional initializer would silently shift on a header change). */
static fsc_device_ops make_ops(void) {
    fsc_device_ops t;
    memset(&t, 0, sizeof t);
    t.abi_version = FSC_DEVICE_ABI_VERSION;
    t.name = "cuda";
    t.alloc = cu_alloc;
    t.free = cu_free;
    t.host_alloc = cu_host_alloc;
    t.host_free = cu_host_free;
    t.upload = cu_upload;
    t.download = cu_download;
    t.copy = cu_copy;
    t.memset = cu_memset;
    t.sync = cu_sync;
    t.destroy = cu_destroy;
    t.gemm = cu_gemm;
    t.convert = cu_convert;
    t.scale = cu_scale;
    t.axpy = cu_axpy;
    t.add = cu_add;
    t.gelu_forward = cu_gelu_forward;
    t.gelu_backward = cu_gelu_backward;
    t.bias_add = cu_bias_add;
    t.bias_grad = cu_bias_grad;
    t.encoder_forward = cu_encoder_forward;
    t.encoder_backward = cu_encoder_backward;
    t.layernorm_forward = cu_layernorm_forward;
    t.layernorm_backward = cu_layernorm_backward;
    t.qkv_split = cu_qkv_split;
    t.qkv_merge = cu_qkv_merge;
    t.heads_merge = cu_heads_merge;
    t.heads_split = cu_heads_split;
    t.softmax_causal_forward = cu_softmax_causal_forward;
    t.softmax_causal_backward = cu_softmax_causal_backward;
    t.xent_forward = cu_xent_forward;
    t.xent_backward = cu_xent_backward;
    t.sum = cu_sum;
    t.absmax = cu_absmax;
    t.sumsq_fixed = cu_sumsq_fixed;
    t.adamw = cu_adamw;
    t.sgd = cu_sgd;
    t.stream_create = cu_stream_create;
    t.stream_destroy = cu_stream_destroy;
    t.set_stream = cu_set_stream;
    t.event_record = cu_event_record;
    t.stream_wait = cu_stream_wait;
    t.gemm_ex = cu_gemm_ex;
    t.rmsnorm_forward = cu_rmsnorm_forward;
    t.rmsnorm_backward = cu_rmsnorm_backward;
    t.rope_forward = cu_rope_forward;
    t.rope_backward = cu_rope_backward;
    t.silu_forward = cu_silu_forward;
    t.silu_backward = cu_silu_backward;
    t.swiglu_forward = cu_swiglu_forward;
    t.swiglu_backward = cu_swiglu_backward;
    t.mul_forward = cu_mul_forward;
    t.mul_backward = cu_mul_backward;
    t.mse_forward = cu_mse_forward;
    t.mse_backward = cu_mse_backward;
    t.upload_async = cu_upload_async;
    t.download_async = cu_download_async;
    t.copy_wait = cu_copy_wait;
    return t;
}

static const fsc_device_ops *ops_table(void) {
    static const fsc_device_ops table = make_ops(); /* initialized once, thread-safely */
    return &table;
}

static fsc_status open_ctx(cu_ctx *c) {
    cu_stream *main_stream;
    FSC_TRY(stream_new(c, &main_stream));
    c->cur = main_stream;
    /* the copy stream is one of streams[]: a freed block waits for it too (cu_free), and sync covers it */
    FSC_TRY(stream_new(c, &c->copy));
    FSC_TRY(cu_blas_check(cublasCreate(&c->blas), "cublasCreate"));
    FSC_TRY(cu_blas_check(cublasSetPointerMode(c->blas, CUBLAS_POINTER_MODE_HOST), "cublasSetPointerMode"));
    /* default math keeps at least the requested precision (f32 sgemm never becomes TF32) unless FSC_CUDA_TF32=1
     * asks for TF32 tensor cores (inputs rounded to 10-bit mantissas, products summed in f32: values already
     * rounded to bf16 lose nothing); 16-bit outputs are never reduced in 16 bits */
    FSC_TRY(cu_blas_check(cublasSetMathMode(c->blas, (cublasMath_t)((c->tf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                                                              : CUBLAS_DEFAULT_MATH) |
                                                                    CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)),
                          "cublasSetMathMode"));
    FSC_TRY(cu_blas_check(cublasSetAtomicsMode(c->blas, CUBLAS_ATOMICS_NOT_ALLOWED), "cublasSetAtomicsMode"));
    FSC_TRY(cu_blas_bind(c));
    if (pthread_mutex_init(&c->stage_mu, NULL) != 0) return cu_err(FSC_ERR_NOMEM, "cuda: cannot make the staging lock");
    c->stage_mu_ok = 1;
    for (int i = 0; i < 2; i++) {
        FSC_TRY(cu_check(cudaHostAlloc(&c->stage[i], CU_STAGE_BYTES, cudaHostAllocDefault), "cudaHostAlloc (staging)"));
        FSC_TRY(cu_check(cudaEventCreateWithFlags(&c->stage_ev[i], cudaEventDisableTiming), "cudaEventCreate"));
    }
    FSC_TRY(cu_check(cudaEventCreateWithFlags(&c->host_ev, cudaEventDisableTiming), "cudaEventCreate"));
    FSC_TRY(cu_check(cudaHostAlloc((void **)&c->derr_host, sizeof(unsigned long long), cudaHostAllocMapped),
                     "cudaHostAlloc (error word)"));
    *c->derr_host = 0;
    FSC_TRY(cu_check(cudaHostGetDevicePointer((void **)&c->derr_dev, c->derr_host, 0), "cudaHostGetDevicePointer"));
    return cu_cache_create(c);
}

extern "C" __attribute__((visibility("default"))) fsc_status fsc_cuda_device_open(int abi_version,
                                                                                const fsc_device_opts *opts,
                                                                                const fsc_device_ops **ops,
                                                                                void **ctx) {
    if (abi_version != FSC_DEVICE_ABI_VERSION)
        return cu_err(FSC_ERR_UNSUPPORTED, "cuda plug-in: built for device interface version %d, the library asks "
                      "for %d (rebuild libfsc_cuda.so with this fsc)", FSC_DEVICE_ABI_VERSION, abi_version);
    if (!ops || !ctx) return cu_err(FSC_ERR_INVALID, "fsc_cuda_device_open: ops or ctx is NULL");
    *ops = NULL;
    *ctx = NULL;
    const char *tf = getenv("FSC_CUDA_TF32"); /* open_ctx's math mode */
    if (tf && *tf && strcmp(tf, "0") != 0 && strcmp(tf, "1") != 0)
        return cu_err(FSC_ERR_INVALID, "FSC_CUDA_TF32 is \"%s\": use 1 (TF32 tensor cores for f32 products) or 0", tf);
    int ordinal = opts ? opts->ordinal : 0, count = 0;
    if (ordinal < 0) return cu_err(FSC_ERR_INVALID, "cuda: device ordinal %d is negative", ordinal);
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return cu_err(FSC_ERR_UNSUPPORTED, "cuda: no usable GPU: %s (%s)%s", cudaGetErrorString(e), cudaGetErrorName(e),
                      e == cudaErrorInsufficientDriver ? "; no NVIDIA driver was found, or it is older than the CUDA "
                                                         "runtime this plug-in was built with" : "");
    }
    if (count == 0) return cu_err(FSC_ERR_UNSUPPORTED, "cuda: no usable GPU: the driver reports no CUDA device");
    if (ordinal >= count)
        return cu_err(FSC_ERR_INVALID, "cuda: device ordinal %d requested but %d GPU%s visible (check LOCAL_RANK and "
                      "CUDA_VISIBLE_DEVICES)", ordinal, count, count == 1 ? " is" : "s are");
    FSC_TRY(cu_check(cudaSetDevice(ordinal), "cudaSetDevice"));
    cudaDeviceProp prop;
    FSC_TRY(cu_check(cudaGetDeviceProperties(&prop, ordinal), "cudaGetDeviceProperties"));
    cudaFuncAttributes fa;
    e = cudaFuncGetAttributes(&fa, cu_probe_kernel());
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return cu_err(FSC_ERR_UNSUPPORTED, "cuda: GPU %d (%s, compute capability %d.%d) cannot run this plug-in's "
                      "kernels, built for sm_90: %s (rebuild the plug-in for this GPU)", ordinal, prop.name,
                      prop.major, prop.minor, cudaGetErrorString(e));
    }
    cu_ctx *c = (cu_ctx *)calloc(1, sizeof *c);
    if (!c) return cu_err(FSC_ERR_NOMEM, "cuda: out of host memory");
    c->magic = CU_MAGIC;
    c->ordinal = ordinal;
    c->sm_count = prop.multiProcessorCount;
    c->tf32 = tf && strcmp(tf, "1") == 0;
    fsc_status s = open_ctx(c);
    if (s != FSC_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", local_msg);
        cu_destroy(c);
        return cu_err(s, "cuda: opening GPU %d (%s): %s", ordinal, prop.name, msg);
    }
    *ops = ops_table();
    *ctx = c;
    return FSC_OK;
}
