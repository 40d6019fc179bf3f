/* CPU reductions to the host (sum, absmax, exact fixed-point sum of squares) and the optimizer
 * updates. Sums run in ascending index order; the optimizers are elementwise in float, exactly the
 * formulas written in device_impl.h, so a shard of a tensor updates exactly as the whole would. */
#include <math.h>
#include <string.h>
#if defined(__SSE2__)
#include <immintrin.h>
#endif
#include "cpu.h"

fsc_status cpu_sum(void *ctx, double *host_out, const float *x, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)x[i];
    *host_out = s;
    return FSC_OK;
}

/* On the bits of |x| (sign cleared) the integer order is the float order, with inf at 0x7f800000 and
 * every NaN above it: an integer max reduction (which vectorizes) finds the max, inf and NaN at once. */
fsc_status cpu_absmax(void *ctx, float *host_max, int *host_nonfinite, const float *x, size_t n) {
    uint32_t mx = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        u &= 0x7fffffffu;
        mx = u > mx ? u : mx;
    }
    float f;
    memcpy(&f, &mx, 4);
    *host_max = (mx > 0x7f800000u) ? NAN : f;
    *host_nonfinite = mx >= 0x7f800000u;
    return FSC_OK;
}

fsc_status cpu_sumsq_fixed(void *ctx, uint64_t acc[2], const float *x, size_t n, int shift) {
    if (shift < -1022 || shift > 1023)
        return fsc_error(FSC_ERR_INVALID, "sumsq_fixed: shift %d outside [-1022, 1023]", shift);
    double scale = ldexp(1.0, shift);
    uint64_t lo = acc[0], hi = acc[1];
    for (size_t i = 0; i < n; i++) {
        double t = floor((double)x[i] * (double)x[i] * scale); /* x^2 is exact in double */
        if (!(t < 18446744073709551616.0)) /* 2^64; also catches NaN and inf */
            return fsc_error(FSC_ERR_INVALID, "sumsq_fixed: element %zu (%g) squared and scaled by 2^%d does not fit "
                             "in 64 bits; choose a smaller shift", i, (double)x[i], shift);
        uint64_t u = (uint64_t)t;
        lo += u;
        hi += (lo < u);
    }
    acc[0] = lo;
    acc[1] = hi;
    return FSC_OK;
}

/* sqrt of q[0..n), n a multiple of 4. sqrtf's errno branch keeps the compiler from vectorizing it, so
 * x86 uses the SSE instruction directly; both are correctly rounded, so the bits are the same. */
static void sqrt_chunk(float *q, int n) {
#if defined(__SSE2__)
    for (int j = 0; j < n; j += 4) _mm_storeu_ps(q + j, _mm_sqrt_ps(_mm_loadu_ps(q + j)));
#else
    for (int j = 0; j < n; j++) q[j] = sqrtf(q[j]);
#endif
}

/* In chunks of 256: moments and decay (vectorized), sqrt (SSE), the step (vectorized). */
fsc_status cpu_adamw(void *ctx, float *p, const float *g, float *m, float *v, size_t n, float lr,
                     float b1, float b2, float eps, float wd, float bc1, float bc2) {
    float lrwd = lr * wd, c1 = 1.0f - b1, c2 = 1.0f - b2;
    float q[256] = {0}; /* (chunk) v / bc2, then its sqrt */
    for (size_t i0 = 0; i0 < n; i0 += 256) {
        int len = (n - i0 < 256) ? (int)(n - i0) : 256;
        float *pc = p + i0, *mc = m + i0, *vc = v + i0;
        const float *gc = g + i0;
        for (int j = 0; j < len; j++) {
            float gi = gc[j];
            float mi = b1 * mc[j] + c1 * gi;
            float vi = b2 * vc[j] + c2 * (gi * gi);
            pc[j] = pc[j] - lrwd * pc[j];
            mc[j] = mi;
            vc[j] = vi;
            q[j] = vi / bc2;
        }
        sqrt_chunk(q, (len + 3) & ~3);
        for (int j = 0; j < len; j++) pc[j] = pc[j] - lr * ((mc[j] / bc1) / (q[j] + eps));
    }
    return FSC_OK;
}

fsc_status cpu_sgd(void *ctx, float *p, const float *g, float *buf, size_t n, float lr, float momentum,
                   float wd, int first) {
    if (momentum != 0.0f && !buf)
        return fsc_error(FSC_ERR_INVALID, "sgd: momentum %g needs a momentum buffer (buf is NULL)", (double)momentum);
    for (size_t i = 0; i < n; i++) {
        float d = g[i] + wd * p[i];
        if (momentum != 0.0f) {
            d = first ? d : momentum * buf[i] + d;
            buf[i] = d;
        }
        p[i] = p[i] - lr * d;
    }
    return FSC_OK;
}
