/* CPU reductions to the host (sum, absmax, exact fixed-point sum of squares) and the optimizer
 * updates. Sums run in ascending index order; the optimizers are elementwise in float, exactly the
 * formulas written in device_impl.h, so a shard of a tensor updates exactly as the whole would. */
#include <math.h>
#include "cpu.h"

fsc_status cpu_sum(void *ctx, double *host_out, const float *x, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)x[i];
    *host_out = s;
    return FSC_OK;
}

fsc_status cpu_absmax(void *ctx, float *host_max, int *host_nonfinite, const float *x, size_t n) {
    float mx = 0.0f;
    int nan = 0, nonfinite = 0;
    for (size_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        nan |= (a != a);
        nonfinite |= !(a <= 3.4028234663852886e38f); /* inf or NaN */
        mx = a > mx ? a : mx;
    }
    *host_max = nan ? NAN : mx;
    *host_nonfinite = nonfinite;
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

fsc_status cpu_adamw(void *ctx, float *p, const float *g, float *m, float *v, size_t n, float lr,
                     float b1, float b2, float eps, float wd, float bc1, float bc2) {
    float lrwd = lr * wd, c1 = 1.0f - b1, c2 = 1.0f - b2;
    for (size_t i = 0; i < n; i++) {
        float pi = p[i] - lrwd * p[i];
        float gi = g[i];
        float mi = b1 * m[i] + c1 * gi;
        float vi = b2 * v[i] + c2 * (gi * gi);
        m[i] = mi;
        v[i] = vi;
        p[i] = pi - lr * ((mi / bc1) / (sqrtf(vi / bc2) + eps));
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
