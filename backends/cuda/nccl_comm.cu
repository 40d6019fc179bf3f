/* The NCCL communicator of the cuda plug-in (fsc/plugin/comm_ops.h): one process per GPU, created by the launcher
 * (lib/core/launch.c) through the exported fsc_nccl_get_unique_id / fsc_nccl_comm_open.
 * Collectives are enqueued on the device's current stream, so they are ordered with the kernels around
 * them and overlap with compute on other streams. Semantics follow the simulated communicator where NCCL
 * allows: bf16/f16 sums are widened to f32, reduced in f32 and rounded once (RNE); AVG is the f32 sum
 * divided by N. What NCCL does not give: its reduction order is its own (ring or tree, by message size),
 * so sums are deterministic for a fixed configuration but not equal to the rank-order sums of the
 * simulated communicator, and a reduce-scatter element need not equal the all-reduce element bit for bit.
 * Failures: an asynchronous NCCL error fails the next call; the barrier (and every call when
 * FSC_NCCL_BLOCKING=1) waits at most timeout_s, then aborts the communicator instead of hanging. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cuda_internal.h"
#include "nccl_load.h"

/* NCCL through the table of nccl_load.cu: filled before the first communicator exists */
#define NC (nccl_loaded())

#define NC_MAGIC 0x6e63636cu /* "nccl" */

struct nc_ctx {
    uint32_t magic;
    ncclComm_t comm;
    cu_ctx *dev;
    int rank, world;
    double timeout_s;
    int blocking;  /* wait for every collective (FSC_NCCL_BLOCKING=1) */
    int native;    /* 1: ncclAllReduce/ncclReduceScatter; 0: rank-order sums (the simulator's bits) */
    int aborted;
    void *scratch; /* f32 staging for bf16/f16 sums */
    size_t scratch_cap;
    cudaEvent_t scratch_ev; /* after the last work that used scratch (it may have run on another stream) */
    /* asynchronous calls (start/wait): enqueued on a communication stream of their own, after what the
     * device's stream had enqueued when they started; synchronous calls wait for the last of them (tail) */
    cudaStream_t comm_stream; /* created by the first start */
    cudaStream_t on;          /* non-NULL while a start enqueues: the stream every call below uses */
    cudaEvent_t tail;         /* recorded on comm_stream after each start */
    int tail_live;
};

/* The stream a call enqueues on: the communication stream inside a start, else the device's. */
static cudaStream_t nc_stream(nc_ctx *n) { return n->on ? n->on : cu_stream_of(n->dev); }

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static fsc_status nc_check(nc_ctx *n, ncclResult_t r, const char *what) {
    if (r == ncclSuccess) return FSC_OK;
    const char *detail = n && n->comm ? NC->ncclGetLastError(n->comm) : NC->ncclGetLastError(NULL);
    fsc_status s = r == ncclInvalidArgument || r == ncclInvalidUsage ? FSC_ERR_INVALID : FSC_ERR_COMM;
    return cu_err(s, "nccl: %s on rank %d: %s%s%s", what, n ? n->rank : -1, NC->ncclGetErrorString(r),
                  detail && *detail ? ": " : "", detail ? detail : "");
}

/* Before each call: a dead communicator or an error a previous collective left behind fails it. */
static fsc_status nc_enter(nc_ctx *n, const char *what) {
    if (n->aborted)
        return cu_err(FSC_ERR_COMM, "nccl: %s on rank %d: the communicator was aborted after an earlier failure",
                      what, n->rank);
    FSC_TRY(cu_enter(n->dev));
    if (!n->on && n->tail_live) /* issue order: after every call started before this one */
        FSC_TRY(cu_check(cudaStreamWaitEvent(cu_stream_of(n->dev), n->tail, 0), what));
    ncclResult_t async = ncclSuccess;
    FSC_TRY(nc_check(n, NC->ncclCommGetAsyncError(n->comm, &async), what));
    if (async != ncclSuccess) {
        fsc_status s = nc_check(n, async, what);
        NC->ncclCommAbort(n->comm);
        n->aborted = 1;
        return s;
    }
    return FSC_OK;
}

/* Wait for the current stream, at most timeout_s, watching for NCCL errors. */
static fsc_status nc_wait(nc_ctx *n, const char *what) {
    cudaStream_t s = nc_stream(n);
    double deadline = now_s() + n->timeout_s;
    for (;;) {
        cudaError_t e = cudaStreamQuery(s);
        if (e == cudaSuccess) return FSC_OK;
        if (e != cudaErrorNotReady) return cu_check(e, what);
        ncclResult_t async = ncclSuccess;
        NC->ncclCommGetAsyncError(n->comm, &async);
        if (async != ncclSuccess || now_s() > deadline) {
            fsc_status st = async != ncclSuccess
                                ? nc_check(n, async, what)
                                : cu_err(FSC_ERR_TIMEOUT, "nccl: %s on rank %d did not finish within %g s (a rank "
                                         "died or is stuck?); the communicator is aborted", what, n->rank, n->timeout_s);
            NC->ncclCommAbort(n->comm);
            n->aborted = 1;
            return st;
        }
        struct timespec ts = {0, 200 * 1000};
        nanosleep(&ts, NULL);
    }
}

static fsc_status nc_done(nc_ctx *n, ncclResult_t r, const char *what) {
    FSC_TRY(nc_check(n, r, what));
    return n->blocking ? nc_wait(n, what) : FSC_OK;
}

static int nc_type(fsc_dtype dt, ncclDataType_t *out) {
    switch (dt) {
    case FSC_F32: *out = ncclFloat32; return 1;
    case FSC_BF16: *out = ncclBfloat16; return 1;
    case FSC_F16: *out = ncclFloat16; return 1;
    case FSC_I32: *out = ncclInt32; return 1;
    case FSC_U8: *out = ncclUint8; return 1;
    case FSC_I64: *out = ncclInt64; return 1;
    default: return 0;
    }
}

static size_t nc_size(fsc_dtype dt) {
    return dt == FSC_I64 ? 8 : dt == FSC_F32 || dt == FSC_I32 ? 4 : dt == FSC_U8 ? 1 : 2;
}

/* f32 scratch of at least bytes, usable on the current stream once earlier users are done;
 * nc_scratch_done marks the end of this use. */
static fsc_status nc_scratch(nc_ctx *n, size_t bytes, float **out) {
    cudaStream_t st = nc_stream(n);
    if (!n->scratch_ev)
        FSC_TRY(cu_check(cudaEventCreateWithFlags(&n->scratch_ev, cudaEventDisableTiming), "nccl scratch"));
    if (bytes > n->scratch_cap) {
        if (n->scratch) {
            FSC_TRY(cu_check(cudaEventSynchronize(n->scratch_ev), "nccl scratch"));
            cudaFree(n->scratch);
            n->scratch = NULL;
            n->scratch_cap = 0;
        }
        FSC_TRY(cu_check(cudaMalloc(&n->scratch, bytes), "nccl scratch: cudaMalloc"));
        n->scratch_cap = bytes;
    }
    FSC_TRY(cu_check(cudaStreamWaitEvent(st, n->scratch_ev, 0), "nccl scratch"));
    *out = (float *)n->scratch;
    return FSC_OK;
}

static fsc_status nc_scratch_done(nc_ctx *n) {
    return cu_check(cudaEventRecord(n->scratch_ev, nc_stream(n)), "nccl scratch");
}

#define NC_HEAD(what, dt)                                                                  \
    nc_ctx *n = (nc_ctx *)ctx;                                                             \
    ncclDataType_t nt;                                                                     \
    if (!nc_type(dt, &nt)) return cu_err(FSC_ERR_INVALID, "nccl: %s: unknown dtype %d", what, (int)(dt)); \
    FSC_TRY(nc_enter(n, what));                                                            \
    cudaStream_t st = nc_stream(n);

static int widen(fsc_dtype dt, fsc_redop op) { return (dt == FSC_BF16 || dt == FSC_F16) && op != FSC_MAX; }

/* ---- rank-order reductions (--reduce ordered): the simulated communicator's bits ----
 * An all-to-all of blocks (ncclSend/ncclRecv in a group: each rank sends (N-1)/N of its buffer, as a ring
 * reduce-scatter does), then one kernel that sums, per element, block 0 + block 1 + ... in f32 (bf16/f16
 * widened exactly, rounded once at the end RNE with lib/core/dtype.c's bit arithmetic; AVG divides the f32
 * sum by N; MAX keeps NaN; i32 wraps), as sim/sim_comm.c does. All-reduce: that on chunks of
 * ceil(count / N) elements, then every rank sends its reduced chunk to every other.
 * Compiled (nvcc, --fmad=false) but not yet run: the machine it was written on had no GPU. */

__device__ static float ld_f32(const void *p, int dt, size_t i) {
    if (dt == FSC_F32) return ((const float *)p)[i];
    unsigned h = ((const unsigned short *)p)[i];
    if (dt == FSC_BF16) return __uint_as_float(h << 16);
    unsigned sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {
        float v = (float)m * 5.9604644775390625e-8f; /* m x 2^-24, exact */
        return sign ? -v : v;
    }
    if (e == 31) return __uint_as_float(sign | 0x7f800000u | (m << 13));
    return __uint_as_float(sign | ((e + 112) << 23) | (m << 13));
}

__device__ static void st_f32(void *p, int dt, size_t i, float x) {
    if (dt == FSC_F32) {
        ((float *)p)[i] = x;
        return;
    }
    unsigned u = __float_as_uint(x);
    unsigned short h;
    if (dt == FSC_BF16) {
        if ((u & 0x7fffffffu) > 0x7f800000u) h = (unsigned short)((u >> 16) | 0x0040u);
        else h = (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    } else {
        unsigned short sign = (unsigned short)((u >> 16) & 0x8000u);
        unsigned a = u & 0x7fffffffu;
        if (a > 0x7f800000u) h = (unsigned short)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
        else if (a >= 0x477ff000u) h = (unsigned short)(sign | 0x7c00u);
        else if (a >= 0x38800000u) {
            unsigned r = a - 0x38000000u;
            r += 0x0fffu + ((r >> 13) & 1u);
            h = (unsigned short)(sign | (r >> 13));
        } else {
            unsigned e = a >> 23;
            if (e < 102) h = sign;
            else {
                unsigned m = (a & 0x7fffffu) | 0x800000u, shift = 126 - e;
                unsigned q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
                if (rem > half || (rem == half && (q & 1u))) q++;
                h = (unsigned short)(sign | q);
            }
        }
    }
    ((unsigned short *)p)[i] = h;
}

/* out[i] = op over j < N, in order, of in[j * stride + i], for i < n */
__global__ void rank_order_kernel(void *out, const void *in, int N, size_t n, size_t stride, int dt, int op) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        if (dt == FSC_I64) { /* the exact reductions' fixed point: wrapping sums, any order gives these bits */
            const long long *x = (const long long *)in;
            long long acc = x[i];
            for (int j = 1; j < N; j++) {
                long long y = x[(size_t)j * stride + i];
                acc = op == FSC_MAX ? (y > acc ? y : acc) : (long long)((unsigned long long)acc + (unsigned long long)y);
            }
            ((long long *)out)[i] = acc;
            continue;
        }
        if (dt == FSC_I32) {
            const int *x = (const int *)in;
            int acc = x[i];
            for (int j = 1; j < N; j++) {
                int y = x[(size_t)j * stride + i];
                acc = op == FSC_MAX ? (y > acc ? y : acc) : (int)((unsigned)acc + (unsigned)y);
            }
            ((int *)out)[i] = acc;
            continue;
        }
        float acc = ld_f32(in, dt, i);
        for (int j = 1; j < N; j++) {
            float x = ld_f32(in, dt, (size_t)j * stride + i);
            if (op == FSC_MAX) {
                if (isnan(x) || x > acc) acc = isnan(acc) ? acc : x;
            } else {
                acc = __fadd_rn(acc, x);
            }
        }
        if (op == FSC_AVG) acc = __fdiv_rn(acc, (float)N);
        st_f32(out, dt, i, acc);
    }
}

static size_t clampz(size_t x, size_t n) { return x < n ? x : n; }

/* out (this rank's n elements) := rank-order reduction of elements [lo, lo + n) of every rank's send of count
 * elements cut in chunks of chunk (rank j's range starts at j x chunk). */
static fsc_status nc_ordered_part(nc_ctx *n, const char *what, const void *send, size_t count, size_t chunk,
                                  fsc_dtype dt, ncclDataType_t nt, fsc_redop op, void *out) {
    cudaStream_t st = nc_stream(n);
    const size_t es = nc_size(dt), lo = clampz((size_t)n->rank * chunk, count), len = clampz(lo + chunk, count) - lo;
    float *f;
    FSC_TRY(nc_scratch(n, (size_t)n->world * len * es + 16, &f));
    unsigned char *tmp = (unsigned char *)f;
    if (len) FSC_TRY(cu_check(cudaMemcpyAsync(tmp + (size_t)n->rank * len * es, (const unsigned char *)send + lo * es,
                                              len * es, cudaMemcpyDeviceToDevice, st), what));
    ncclResult_t r = NC->ncclGroupStart();
    for (int j = 0; j < n->world && r == ncclSuccess; j++) {
        if (j == n->rank) continue;
        size_t jlo = clampz((size_t)j * chunk, count), jn = clampz(jlo + chunk, count) - jlo;
        if (jn) r = NC->ncclSend((const unsigned char *)send + jlo * es, jn, nt, j, n->comm, st);
        if (r == ncclSuccess && len) r = NC->ncclRecv(tmp + (size_t)j * len * es, len, nt, j, n->comm, st);
    }
    ncclResult_t e = NC->ncclGroupEnd();
    FSC_TRY(nc_check(n, r != ncclSuccess ? r : e, what));
    if (len) {
        rank_order_kernel<<<cu_blocks(len, CU_THREADS), CU_THREADS, 0, st>>>(out, tmp, n->world, len, len, (int)dt,
                                                                            (int)op);
        FSC_TRY(cu_launched("rank_order"));
    }
    return nc_scratch_done(n);
}

static fsc_status nc_ordered_all_reduce(nc_ctx *n, const void *send, void *recv, size_t count, fsc_dtype dt,
                                        ncclDataType_t nt, fsc_redop op) {
    cudaStream_t st = nc_stream(n);
    const size_t es = nc_size(dt), N = (size_t)n->world, chunk = (count + N - 1) / N;
    const size_t lo = clampz((size_t)n->rank * chunk, count), len = clampz(lo + chunk, count) - lo;
    /* every rank's inputs are in scratch before the kernel writes recv, so send == recv is safe */
    FSC_TRY(nc_ordered_part(n, "all_reduce", send, count, chunk, dt, nt, op, (unsigned char *)recv + lo * es));
    ncclResult_t r = NC->ncclGroupStart();
    for (int j = 0; j < n->world && r == ncclSuccess; j++) {
        if (j == n->rank) continue;
        size_t jlo = clampz((size_t)j * chunk, count), jn = clampz(jlo + chunk, count) - jlo;
        if (len) r = NC->ncclSend((const unsigned char *)recv + lo * es, len, nt, j, n->comm, st);
        if (r == ncclSuccess && jn) r = NC->ncclRecv((unsigned char *)recv + jlo * es, jn, nt, j, n->comm, st);
    }
    ncclResult_t e = NC->ncclGroupEnd();
    return nc_done(n, r != ncclSuccess ? r : e, "all_reduce");
}

static fsc_status nc_all_reduce(void *ctx, const void *send, void *recv, size_t count, fsc_dtype dt, fsc_redop op) {
    NC_HEAD("all_reduce", dt);
    if (count == 0) return FSC_OK;
    /* i64 (exact.h's fixed point) sums are associative: NCCL's own ring or tree gives the ordered bits */
    if (!n->native && dt != FSC_I64) return nc_ordered_all_reduce(n, send, recv, count, dt, nt, op);
    ncclRedOp_t ro = op == FSC_MAX ? ncclMax : ncclSum;
    if (widen(dt, op)) {
        float *f;
        FSC_TRY(nc_scratch(n, count * sizeof(float), &f));
        FSC_TRY(cu_convert_on(st, f, FSC_F32, send, dt, count));
        FSC_TRY(nc_check(n, NC->ncclAllReduce(f, f, count, ncclFloat32, ncclSum, n->comm, st), "all_reduce"));
        if (op == FSC_AVG) FSC_TRY(cu_divide_on(st, f, (float)n->world, count));
        FSC_TRY(cu_convert_on(st, recv, dt, f, FSC_F32, count));
        FSC_TRY(nc_scratch_done(n));
        return nc_done(n, ncclSuccess, "all_reduce");
    }
    FSC_TRY(nc_check(n, NC->ncclAllReduce(send, recv, count, nt, ro, n->comm, st), "all_reduce"));
    if (op == FSC_AVG) FSC_TRY(cu_divide_on(st, (float *)recv, (float)n->world, count));
    return nc_done(n, ncclSuccess, "all_reduce");
}

static fsc_status nc_reduce_scatter(void *ctx, const void *send, void *recv, size_t recvcount, fsc_dtype dt,
                                    fsc_redop op) {
    NC_HEAD("reduce_scatter", dt);
    if (recvcount == 0) return FSC_OK;
    if (!n->native && dt != FSC_I64) {
        FSC_TRY(nc_ordered_part(n, "reduce_scatter", send, recvcount * (size_t)n->world, recvcount, dt, nt, op, recv));
        return nc_done(n, ncclSuccess, "reduce_scatter");
    }
    ncclRedOp_t ro = op == FSC_MAX ? ncclMax : ncclSum;
    if (widen(dt, op)) {
        size_t total = recvcount * (size_t)n->world;
        float *f;
        FSC_TRY(nc_scratch(n, (total + recvcount) * sizeof(float), &f));
        FSC_TRY(cu_convert_on(st, f, FSC_F32, send, dt, total));
        FSC_TRY(nc_check(n, NC->ncclReduceScatter(f, f + total, recvcount, ncclFloat32, ncclSum, n->comm, st),
                         "reduce_scatter"));
        if (op == FSC_AVG) FSC_TRY(cu_divide_on(st, f + total, (float)n->world, recvcount));
        FSC_TRY(cu_convert_on(st, recv, dt, f + total, FSC_F32, recvcount));
        FSC_TRY(nc_scratch_done(n));
        return nc_done(n, ncclSuccess, "reduce_scatter");
    }
    FSC_TRY(nc_check(n, NC->ncclReduceScatter(send, recv, recvcount, nt, ro, n->comm, st), "reduce_scatter"));
    if (op == FSC_AVG) FSC_TRY(cu_divide_on(st, (float *)recv, (float)n->world, recvcount));
    return nc_done(n, ncclSuccess, "reduce_scatter");
}

static fsc_status nc_all_gather(void *ctx, const void *send, void *recv, size_t sendcount, fsc_dtype dt) {
    NC_HEAD("all_gather", dt);
    if (sendcount == 0) return FSC_OK;
    return nc_done(n, NC->ncclAllGather(send, recv, sendcount, nt, n->comm, st), "all_gather");
}

static fsc_status nc_broadcast(void *ctx, void *buf, size_t count, fsc_dtype dt, int root) {
    NC_HEAD("broadcast", dt);
    if (count == 0) return FSC_OK;
    return nc_done(n, NC->ncclBroadcast(buf, buf, count, nt, root, n->comm, st), "broadcast");
}

static fsc_status nc_send(void *ctx, const void *buf, size_t count, fsc_dtype dt, int peer) {
    NC_HEAD("send", dt);
    if (count == 0) return FSC_OK;
    return nc_done(n, NC->ncclSend(buf, count, nt, peer, n->comm, st), "send");
}

static fsc_status nc_recv(void *ctx, void *buf, size_t count, fsc_dtype dt, int peer) {
    NC_HEAD("recv", dt);
    if (count == 0) return FSC_OK;
    return nc_done(n, NC->ncclRecv(buf, count, nt, peer, n->comm, st), "recv");
}

static fsc_status nc_all_to_all(void *ctx, const void *send, void *recv, size_t count, fsc_dtype dt) {
    NC_HEAD("all_to_all", dt);
    if (count == 0) return FSC_OK;
    size_t block = count * nc_size(dt);
    ncclResult_t r = NC->ncclGroupStart();
    for (int j = 0; j < n->world && r == ncclSuccess; j++) {
        r = NC->ncclSend((const char *)send + (size_t)j * block, count, nt, j, n->comm, st);
        if (r == ncclSuccess) r = NC->ncclRecv((char *)recv + (size_t)j * block, count, nt, j, n->comm, st);
    }
    ncclResult_t e = NC->ncclGroupEnd();
    return nc_done(n, r != ncclSuccess ? r : e, "all_to_all");
}

static fsc_status nc_barrier(void *ctx) {
    NC_HEAD("barrier", FSC_F32);
    float *f;
    FSC_TRY(nc_scratch(n, sizeof(float), &f));
    FSC_TRY(nc_check(n, NC->ncclAllReduce(f, f, 1, ncclFloat32, ncclSum, n->comm, st), "barrier"));
    FSC_TRY(nc_scratch_done(n));
    (void)nt;
    return nc_wait(n, "barrier");
}

static void nc_destroy(void *ctx) {
    nc_ctx *n = (nc_ctx *)ctx;
    if (!n) return;
    cudaSetDevice(n->dev->ordinal);
    if (n->comm) {
        if (n->aborted) {
            /* ncclCommAbort already freed it */
        } else {
            cudaStreamSynchronize(cu_stream_of(n->dev));
            if (n->comm_stream) cudaStreamSynchronize(n->comm_stream);
            NC->ncclCommDestroy(n->comm);
        }
    }
    cudaFree(n->scratch);
    if (n->scratch_ev) cudaEventDestroy(n->scratch_ev);
    if (n->tail) cudaEventDestroy(n->tail);
    if (n->comm_stream) cudaStreamDestroy(n->comm_stream);
    n->magic = 0;
    free(n);
}

static fsc_status nc_open_ctx(nc_ctx *n, ncclComm_t comm, cu_ctx *dev, int rank, int world, double timeout_s,
                              int blocking, int native);

static fsc_status nc_split(void *ctx, int color, int key, void **new_ctx, int *new_rank, int *new_size) {
    nc_ctx *n = (nc_ctx *)ctx;
    if (color < 0) return cu_err(FSC_ERR_INVALID, "nccl: split: color %d must be >= 0", color);
    FSC_TRY(nc_enter(n, "split"));
    ncclComm_t nc = NULL;
    FSC_TRY(nc_check(n, NC->ncclCommSplit(n->comm, color, key, &nc, NULL), "split"));
    int r = 0, sz = 0;
    fsc_status s = nc_check(n, NC->ncclCommUserRank(nc, &r), "split");
    if (s == FSC_OK) s = nc_check(n, NC->ncclCommCount(nc, &sz), "split");
    nc_ctx *m = (nc_ctx *)calloc(1, sizeof *m);
    if (s == FSC_OK && !m) s = cu_err(FSC_ERR_NOMEM, "nccl: split: out of host memory");
    if (s != FSC_OK) {
        free(m);
        NC->ncclCommDestroy(nc);
        return s;
    }
    nc_open_ctx(m, nc, n->dev, r, sz, n->timeout_s, n->blocking, n->native);
    *new_ctx = m;
    *new_rank = r;
    *new_size = sz;
    return FSC_OK;
}

/* ---- asynchronous calls: the synchronous code enqueued on the communication stream ---- */

typedef struct {
    cudaEvent_t done; /* recorded on the communication stream after the call */
    const char *what; /* the operation's name, for messages */
} nc_req;

static fsc_status nc_start(void *ctx, const fsc_comm_call *k, void **req) {
    nc_ctx *n = (nc_ctx *)ctx;
    *req = NULL;
    const char *what = "start";
    FSC_TRY(cu_enter(n->dev));
    if (!n->comm_stream) {
        FSC_TRY(cu_check(cudaStreamCreateWithFlags(&n->comm_stream, cudaStreamNonBlocking), "nccl: start"));
        FSC_TRY(cu_check(cudaEventCreateWithFlags(&n->tail, cudaEventDisableTiming), "nccl: start"));
    }
    nc_req *q = (nc_req *)calloc(1, sizeof *q);
    if (!q) return cu_err(FSC_ERR_NOMEM, "nccl: out of host memory for a request");
    static const char *const names[FSC_OP_COUNT] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast",
                                                     "send", "recv", "all_to_all", "barrier"};
    q->what = (unsigned)k->op < FSC_OP_COUNT ? names[k->op] : "start";
    /* after what the device's stream holds now (the kernels that wrote send) */
    cudaEvent_t ready = NULL;
    fsc_status s = cu_check(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), what);
    if (s == FSC_OK) s = cu_check(cudaEventRecord(ready, cu_stream_of(n->dev)), what);
    if (s == FSC_OK) s = cu_check(cudaStreamWaitEvent(n->comm_stream, ready, 0), what);
    if (ready) cudaEventDestroy(ready);
    if (s == FSC_OK) {
        n->on = n->comm_stream;
        int blocking = n->blocking;
        n->blocking = 0; /* the wait polls */
        switch (k->op) {
        case FSC_OP_ALL_REDUCE: s = nc_all_reduce(n, k->send, k->recv, k->count, k->dt, k->redop); break;
        case FSC_OP_REDUCE_SCATTER: s = nc_reduce_scatter(n, k->send, k->recv, k->count, k->dt, k->redop); break;
        case FSC_OP_ALL_GATHER: s = nc_all_gather(n, k->send, k->recv, k->count, k->dt); break;
        case FSC_OP_BROADCAST: s = nc_broadcast(n, k->recv, k->count, k->dt, k->peer); break;
        case FSC_OP_SEND: s = nc_send(n, k->send, k->count, k->dt, k->peer); break;
        case FSC_OP_RECV: s = nc_recv(n, k->recv, k->count, k->dt, k->peer); break;
        case FSC_OP_ALL_TO_ALL: s = nc_all_to_all(n, k->send, k->recv, k->count, k->dt); break;
        default: s = cu_err(FSC_ERR_INVALID, "nccl: operation %d cannot be started", (int)k->op); break;
        }
        n->blocking = blocking;
        n->on = NULL;
    }
    if (s == FSC_OK) s = cu_check(cudaEventCreateWithFlags(&q->done, cudaEventDisableTiming), what);
    if (s == FSC_OK) s = cu_check(cudaEventRecord(q->done, n->comm_stream), what);
    if (s == FSC_OK) s = cu_check(cudaEventRecord(n->tail, n->comm_stream), what);
    if (s != FSC_OK) {
        if (q->done) cudaEventDestroy(q->done);
        free(q);
        return s;
    }
    n->tail_live = 1;
    *req = q;
    return FSC_OK;
}

/* Wait for the call's event, at most timeout_s, watching for NCCL errors (as nc_wait does for a stream);
 * then the device's stream continues after it. */
static fsc_status nc_req_wait(void *ctx, void *req) {
    nc_ctx *n = (nc_ctx *)ctx;
    nc_req *q = (nc_req *)req;
    fsc_status st = cu_enter(n->dev);
    double deadline = now_s() + n->timeout_s;
    while (st == FSC_OK) {
        if (n->aborted) { /* by an earlier wait or call: ncclCommAbort freed n->comm, which is not to be asked again */
            st = cu_err(FSC_ERR_COMM, "nccl: %s on rank %d: the communicator was aborted after an earlier failure",
                        q->what, n->rank);
            break;
        }
        cudaError_t e = cudaEventQuery(q->done);
        if (e == cudaSuccess) {
            st = cu_check(cudaStreamWaitEvent(cu_stream_of(n->dev), q->done, 0), q->what);
            break;
        }
        if (e != cudaErrorNotReady) {
            st = cu_check(e, q->what);
            break;
        }
        ncclResult_t async = ncclSuccess;
        NC->ncclCommGetAsyncError(n->comm, &async);
        if (async != ncclSuccess || now_s() > deadline) {
            st = async != ncclSuccess
                     ? nc_check(n, async, q->what)
                     : cu_err(FSC_ERR_TIMEOUT, "nccl: %s on rank %d did not finish within %g s (a rank died or is "
                              "stuck?); the communicator is aborted", q->what, n->rank, n->timeout_s);
            NC->ncclCommAbort(n->comm);
            n->aborted = 1;
            break;
        }
        struct timespec ts = {0, 100 * 1000};
        nanosleep(&ts, NULL);
    }
    cudaEventDestroy(q->done);
    free(q);
    return st;
}

static fsc_status nc_req_test(void *ctx, void *req, int *done) {
    nc_ctx *n = (nc_ctx *)ctx;
    nc_req *q = (nc_req *)req;
    FSC_TRY(cu_enter(n->dev));
    cudaError_t e = cudaEventQuery(q->done);
    *done = e == cudaSuccess;
    return e == cudaSuccess || e == cudaErrorNotReady ? FSC_OK : cu_check(e, q->what);
}

static fsc_comm_ops make_ops(void) {
    fsc_comm_ops t;
    memset(&t, 0, sizeof t);
    t.abi_version = FSC_COMM_ABI_VERSION;
    t.name = "nccl";
    t.all_reduce = nc_all_reduce;
    t.reduce_scatter = nc_reduce_scatter;
    t.all_gather = nc_all_gather;
    t.broadcast = nc_broadcast;
    t.send = nc_send;
    t.recv = nc_recv;
    t.all_to_all = nc_all_to_all;
    t.barrier = nc_barrier;
    t.split = nc_split;
    t.destroy = nc_destroy;
    t.start = nc_start;
    t.wait = nc_req_wait;
    t.test = nc_req_test;
    t.sends_wait = 1; /* ncclSend blocks (on the GPU) until the matching ncclRecv runs */
    return t;
}

static const fsc_comm_ops *nc_ops(void) {
    static const fsc_comm_ops table = make_ops();
    return &table;
}

static fsc_status nc_open_ctx(nc_ctx *n, ncclComm_t comm, cu_ctx *dev, int rank, int world, double timeout_s,
                              int blocking, int native) {
    n->native = native;
    n->magic = NC_MAGIC;
    n->comm = comm;
    n->dev = dev;
    n->rank = rank;
    n->world = world;
    n->timeout_s = timeout_s;
    n->blocking = blocking;
    return FSC_OK;
}

extern "C" __attribute__((visibility("default"))) fsc_status fsc_nccl_get_unique_id(void *id, size_t bytes) {
    if (!id || bytes < sizeof(ncclUniqueId))
        return cu_err(FSC_ERR_INVALID, "nccl: unique id buffer of %zu bytes (need %zu)", bytes, sizeof(ncclUniqueId));
    const nccl_api *api;
    FSC_TRY(nccl_load(&api));
    ncclUniqueId u;
    FSC_TRY(nc_check(NULL, api->ncclGetUniqueId(&u), "ncclGetUniqueId"));
    memset(id, 0, bytes);
    memcpy(id, &u, sizeof u);
    return FSC_OK;
}

extern "C" __attribute__((visibility("default"))) fsc_status fsc_nccl_comm_open(int abi_version, const void *id,
                                                                              size_t bytes, int rank, int world,
                                                                              void *device_ctx, double timeout_s,
                                                                              int native, const fsc_comm_ops **ops,
                                                                              void **ctx) {
    if (abi_version != FSC_COMM_ABI_VERSION)
        return cu_err(FSC_ERR_UNSUPPORTED, "nccl communicator: built for interface version %d, the library asks for %d",
                      FSC_COMM_ABI_VERSION, abi_version);
    if (!id || bytes < sizeof(ncclUniqueId) || !ops || !ctx)
        return cu_err(FSC_ERR_INVALID, "fsc_nccl_comm_open: NULL argument or a %zu-byte id", bytes);
    if (world < 1 || rank < 0 || rank >= world)
        return cu_err(FSC_ERR_INVALID, "fsc_nccl_comm_open: rank %d of world %d", rank, world);
    if (!cu_is_ctx(device_ctx))
        return cu_err(FSC_ERR_INVALID, "fsc_nccl_comm_open: device_ctx is not a cuda device of this plug-in");
    cu_ctx *dev = (cu_ctx *)device_ctx;
    const nccl_api *api;
    FSC_TRY(nccl_load(&api));
    FSC_TRY(cu_enter(dev));
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    ncclComm_t comm = NULL;
    FSC_TRY(nc_check(NULL, api->ncclCommInitRank(&comm, world, u, rank), "ncclCommInitRank"));
    nc_ctx *n = (nc_ctx *)calloc(1, sizeof *n);
    if (!n) {
        NC->ncclCommDestroy(comm);
        return cu_err(FSC_ERR_NOMEM, "nccl: out of host memory");
    }
    const char *b = getenv("FSC_NCCL_BLOCKING");
    nc_open_ctx(n, comm, dev, rank, world, timeout_s > 0 ? timeout_s : 600.0, b && *b && strcmp(b, "0") != 0, native);
    *ops = nc_ops();
    *ctx = n;
    return FSC_OK;
}
