/* Reductions to the host of the cuda device: sum (double), absmax with the non-finite flag, and the exact
 * fixed-point sum of squares.
 * - sum: the input is cut into fixed chunks of SUM_CHUNK elements (the cut depends only on n); a block sums
 *   a chunk (each thread a fixed strided subset in ascending order, then a fixed tree) and one block adds
 *   the chunk sums the same way. Deterministic on any GPU; not the CPU's left-to-right order, so the last
 *   bits may differ from the CPU backend.
 * - absmax: a maximum does not depend on order; blocks combine with integer atomicMax on the float bits
 *   (non-negative floats order as unsigned integers) and atomicOr for the flags.
 * - sumsq_fixed: every term is an integer, and integer sums are associative, so 128-bit partials combined
 *   with 64-bit integer atomics give exactly the CPU backend's result. */
#include <math.h>
#include <string.h>
#include "cuda_internal.h"

#define RED_THREADS 256
#define SUM_PER_THREAD 16
#define SUM_CHUNK (RED_THREADS * SUM_PER_THREAD)

__global__ void sum_chunks_kernel(double *partial, const float *x, size_t n) {
    __shared__ double sh[RED_THREADS];
    size_t base = (size_t)blockIdx.x * SUM_CHUNK;
    double acc = 0.0;
    for (int k = 0; k < SUM_PER_THREAD; k++) {
        size_t i = base + (size_t)k * RED_THREADS + threadIdx.x;
        if (i < n) acc += (double)x[i];
    }
    sh[threadIdx.x] = acc;
    __syncthreads();
    for (int s = RED_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = sh[0];
}

__global__ void sum_final_kernel(double *out, const double *partial, size_t m) {
    __shared__ double sh[RED_THREADS];
    double acc = 0.0;
    for (size_t i = threadIdx.x; i < m; i += RED_THREADS) acc += partial[i];
    sh[threadIdx.x] = acc;
    __syncthreads();
    for (int s = RED_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) *out = sh[0];
}

/* Copy a small result to the host and wait for it; then report kernel errors found meanwhile. */
static fsc_status fetch(cu_ctx *c, void *host, const void *dev, size_t bytes, const char *who) {
    void *h;
    FSC_TRY(cu_host_scratch(c, bytes, &h));
    cudaStream_t s = cu_stream_of(c);
    FSC_TRY(cu_check(cudaMemcpyAsync(h, dev, bytes, cudaMemcpyDeviceToHost, s), who));
    FSC_TRY(cu_check(cudaStreamSynchronize(s), who));
    memcpy(host, h, bytes);
    return cu_deferred_check(c);
}

fsc_status cu_sum(void *ctx, double *host_out, const float *x, size_t n) {
    cu_ctx *c = cu_of(ctx);
    if (!host_out) return cu_err(FSC_ERR_INVALID, "sum: host_out is NULL");
    FSC_TRY(cu_enter(c));
    if (n == 0) {
        *host_out = 0.0;
        return cu_sync_all(c);
    }
    size_t m = (n + SUM_CHUNK - 1) / SUM_CHUNK;
    if (m > 0x7fffffffu) return cu_err(FSC_ERR_INVALID, "sum: %zu elements is too many", n);
    void *scr;
    FSC_TRY(cu_scratch(c, (m + 1) * sizeof(double), &scr));
    double *partial = (double *)scr, *res = partial + m;
    cudaStream_t s = cu_stream_of(c);
    sum_chunks_kernel<<<(unsigned)m, RED_THREADS, 0, s>>>(partial, x, n);
    FSC_TRY(cu_launched("sum"));
    sum_final_kernel<<<1, RED_THREADS, 0, s>>>(res, partial, m);
    FSC_TRY(cu_launched("sum"));
    return fetch(c, host_out, res, sizeof(double), "sum");
}

/* ---- absmax ---- */

struct absmax_result {
    unsigned maxbits;
    int nan, nonfinite;
};

__global__ void absmax_kernel(absmax_result *res, const float *x, size_t n) {
    __shared__ float sh[RED_THREADS / 32];
    float mx = 0.0f;
    int nan = 0, nonfinite = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float a = fabsf(x[i]);
        nan |= (a != a);
        nonfinite |= !(a <= 3.4028234663852886e38f);
        mx = a > mx ? a : mx;
    }
    for (int o = 16; o > 0; o >>= 1) {
        float w = __shfl_xor_sync(0xffffffffu, mx, o);
        mx = w > mx ? w : mx;
    }
    nan = __any_sync(0xffffffffu, nan);
    nonfinite = __any_sync(0xffffffffu, nonfinite);
    if (threadIdx.x % 32 == 0) {
        sh[threadIdx.x / 32] = mx;
        if (nan) atomicOr(&res->nan, 1);
        if (nonfinite) atomicOr(&res->nonfinite, 1);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float m = 0.0f;
        for (int w = 0; w < RED_THREADS / 32; w++) m = sh[w] > m ? sh[w] : m;
        atomicMax(&res->maxbits, __float_as_uint(m));
    }
}

fsc_status cu_absmax(void *ctx, float *host_max, int *host_nonfinite, const float *x, size_t n) {
    cu_ctx *c = cu_of(ctx);
    if (!host_max || !host_nonfinite) return cu_err(FSC_ERR_INVALID, "absmax: NULL host output");
    FSC_TRY(cu_enter(c));
    void *scr;
    FSC_TRY(cu_scratch(c, sizeof(absmax_result), &scr));
    absmax_result *res = (absmax_result *)scr, h;
    cudaStream_t s = cu_stream_of(c);
    FSC_TRY(cu_check(cudaMemsetAsync(res, 0, sizeof *res, s), "absmax"));
    if (n > 0) {
        absmax_kernel<<<cu_blocks(n, RED_THREADS) < 4096 ? cu_blocks(n, RED_THREADS) : 4096, RED_THREADS, 0, s>>>(res, x, n);
        FSC_TRY(cu_launched("absmax"));
    }
    FSC_TRY(fetch(c, &h, res, sizeof h, "absmax"));
    float m;
    memcpy(&m, &h.maxbits, sizeof m);
    *host_max = h.nan ? NAN : m;
    *host_nonfinite = h.nonfinite;
    return FSC_OK;
}

/* ---- exact fixed-point sum of squares ---- */

struct sumsq_result {
    unsigned long long lo, hi;
    unsigned long long bad; /* smallest index whose term does not fit in 64 bits; ~0 if none */
};

__global__ void sumsq_kernel(sumsq_result *res, const float *x, size_t n, double scale) {
    __shared__ unsigned long long slo[RED_THREADS], shi[RED_THREADS];
    unsigned long long lo = 0, hi = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        double t = floor((double)x[i] * (double)x[i] * scale); /* x^2 is exact in double */
        if (!(t < 18446744073709551616.0)) { /* 2^64; also NaN and inf */
            atomicMin(&res->bad, (unsigned long long)i);
            continue;
        }
        unsigned long long u = (unsigned long long)t;
        lo += u;
        hi += (lo < u);
    }
    slo[threadIdx.x] = lo;
    shi[threadIdx.x] = hi;
    __syncthreads();
    for (int s = RED_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) {
            unsigned long long a = slo[threadIdx.x], sum = a + slo[threadIdx.x + s];
            slo[threadIdx.x] = sum;
            shi[threadIdx.x] += shi[threadIdx.x + s] + (sum < a);
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        unsigned long long old = atomicAdd(&res->lo, slo[0]);
        atomicAdd(&res->hi, shi[0] + (old + slo[0] < old ? 1ull : 0ull));
    }
}

fsc_status cu_sumsq_fixed(void *ctx, uint64_t acc[2], const float *x, size_t n, int shift) {
    cu_ctx *c = cu_of(ctx);
    if (shift < -1022 || shift > 1023)
        return cu_err(FSC_ERR_INVALID, "sumsq_fixed: shift %d outside [-1022, 1023]", shift);
    if (!acc) return cu_err(FSC_ERR_INVALID, "sumsq_fixed: acc is NULL");
    FSC_TRY(cu_enter(c));
    void *scr;
    FSC_TRY(cu_scratch(c, sizeof(sumsq_result), &scr));
    sumsq_result *res = (sumsq_result *)scr, h;
    cudaStream_t s = cu_stream_of(c);
    FSC_TRY(cu_check(cudaMemsetAsync(res, 0, 2 * sizeof(unsigned long long), s), "sumsq_fixed"));
    FSC_TRY(cu_check(cudaMemsetAsync(&res->bad, 0xff, sizeof(unsigned long long), s), "sumsq_fixed"));
    if (n > 0) {
        unsigned g = cu_blocks(n, RED_THREADS) < 4096 ? cu_blocks(n, RED_THREADS) : 4096;
        sumsq_kernel<<<g, RED_THREADS, 0, s>>>(res, x, n, ldexp(1.0, shift));
        FSC_TRY(cu_launched("sumsq_fixed"));
    }
    FSC_TRY(fetch(c, &h, res, sizeof h, "sumsq_fixed"));
    if (h.bad != ~0ull) {
        float v = 0.0f;
        FSC_TRY(fetch(c, &v, x + h.bad, sizeof v, "sumsq_fixed"));
        return cu_err(FSC_ERR_INVALID, "sumsq_fixed: element %llu (%g) squared and scaled by 2^%d does not fit in 64 "
                      "bits; choose a smaller shift", h.bad, (double)v, shift);
    }
    uint64_t lo = acc[0] + h.lo;
    acc[1] += h.hi + (lo < acc[0] ? 1u : 0u);
    acc[0] = lo;
    return FSC_OK;
}
