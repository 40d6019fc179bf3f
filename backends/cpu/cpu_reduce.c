/* CPU reductions to the host (sum, absmax, exact fixed-point sum of squares) and the optimizer
 * updates. The float sum runs in ascending index order on one thread; max and the integer sum of squares
 * do not depend on order, so they are split over the device's threads (cpu_pool.c) and combined. The
 * optimizers are elementwise in float, exactly the formulas written in plugin/device_ops.h, so a shard of a
 * tensor (or a thread's range) updates exactly as the whole would. */
#include <math.h>
#include <string.h>
#if defined(__SSE2__) || defined(__x86_64__)
#include <immintrin.h>
#endif
#include "cpu.h"

fsc_status cpu_sum(void *ctx, double *host_out, const float *x, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)x[i];
    *host_out = s;
    return FSC_OK;
}

/* Order-free reductions: the data is cut into `parts` blocks (a few per thread), the pool runs the blocks
 * (cpu_parallel over block indices), each block writes its partial result into its own slot, and the
 * caller combines the slots. */
enum { SLOTS = 64 };
typedef struct {
    const float *x;
    size_t n;
    int parts;
    uint32_t mx[SLOTS];
    uint64_t lo[SLOTS], hi[SLOTS];
    size_t bad[SLOTS]; /* first element that does not fit (sumsq_fixed), n if none */
    int shift; /* sumsq_fixed's */
    int avx2;  /* sumsq_fixed: the integer form runs (x86 with AVX2, asked once a call) */
} red_arg;

/* elements of block p: whole CPU_STEP groups, the last block takes the rest */
static void block_of(const red_arg *a, size_t p, size_t *lo, size_t *hi) {
    size_t groups = (a->n + CPU_STEP - 1) / CPU_STEP;
    size_t g0 = groups * p / (size_t)a->parts, g1 = groups * (p + 1) / (size_t)a->parts;
    *lo = g0 * CPU_STEP < a->n ? g0 * CPU_STEP : a->n;
    *hi = g1 * CPU_STEP < a->n ? g1 * CPU_STEP : a->n;
}

static void red_setup(void *ctx, red_arg *a, const float *x, size_t n) {
    memset(a, 0, sizeof *a);
    a->x = x;
    a->n = n;
    int t = cpu_threads(ctx) > 1 ? 4 * cpu_threads(ctx) : 1;
    size_t most = n / (4 * (size_t)CPU_GRAIN);
    if ((size_t)t > most) t = most > 1 ? (int)most : 1;
    a->parts = t > SLOTS ? SLOTS : t;
    for (int p = 0; p < SLOTS; p++) a->bad[p] = n;
}

/* On the bits of |x| (sign cleared) the integer order is the float order, with inf at 0x7f800000 and
 * every NaN above it: an integer max reduction (which vectorizes) finds the max, inf and NaN at once. */
static void absmax_blocks(void *p, size_t b0, size_t b1) {
    red_arg *a = p;
    for (size_t b = b0; b < b1; b++) {
        size_t lo, hi;
        block_of(a, b, &lo, &hi);
        uint32_t mx = 0;
        for (size_t i = lo; i < hi; i++) {
            uint32_t u;
            memcpy(&u, &a->x[i], 4);
            u &= 0x7fffffffu;
            mx = u > mx ? u : mx;
        }
        a->mx[b] = mx;
    }
}

fsc_status cpu_absmax(void *ctx, float *host_max, int *host_nonfinite, const float *x, size_t n) {
    red_arg a;
    red_setup(ctx, &a, x, n);
    cpu_parallel(ctx, (size_t)a.parts, 1, 1, absmax_blocks, &a);
    uint32_t mx = 0;
    for (int p = 0; p < a.parts; p++) mx = a.mx[p] > mx ? a.mx[p] : mx;
    float f;
    memcpy(&f, &mx, 4);
    *host_max = (mx > 0x7f800000u) ? NAN : f;
    *host_nonfinite = mx >= 0x7f800000u;
    return FSC_OK;
}

/* Each term floor(x^2 2^shift) is an integer below 2^64 (else the element is reported), added into a
 * 128-bit sum: integer addition, so the blocks' sums combine to the same total in any order. The terms' 32-bit
 * halves add into two 64-bit sums, which cannot carry over 2^31 terms: no carry chain. An element that does not
 * fit adds what it adds and clears `ok`; the block is then searched again for the first such element.
 * Two ways to the same integers:
 *   - in double: x^2 is exact in double and 2^shift a power of two, so v = x^2 2^shift is exact and its
 *     conversion (which truncates: v >= 0) is the floor;
 *   - in integers (x86 with AVX2, chosen at run time: the double form is compute-bound there, without a
 *     packed conversion to 64-bit integers before AVX-512): |x| = m 2^(e-150) with m the 24-bit significand
 *     (the implicit bit set for e >= 1; subnormals take e = 1), so the term is m^2 (48 bits) shifted by
 *     s = 2e - 300 + shift, left or right; the shifts of 64 or more give 0, as the floor does, and a left
 *     shift that loses bits (shifted back, it differs) or e = 255 (inf, NaN) does not fit. */
#define TWO64 18446744073709551616.0 /* 2^64 */

static int sumsq_fits(const float *x, size_t i, double scale) {
    return (double)x[i] * (double)x[i] * scale < TWO64; /* false for NaN and inf too */
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SUMSQ_AVX2 1
/* Elements [0, n - n % 4) of x into the halves' sums; *ok cleared if one does not fit. Returns those done. */
__attribute__((target("avx2"))) static size_t sumsq_avx2(const float *x, size_t n, int shift, uint64_t *slo,
                                                         uint64_t *shi, int *ok) {
    const __m256i abs = _mm256_set1_epi64x(0x7fffffff), frac = _mm256_set1_epi64x(0x7fffff),
                  one = _mm256_set1_epi64x(1), implicit = _mm256_set1_epi64x(0x800000),
                  e255 = _mm256_set1_epi64x(255), low = _mm256_set1_epi64x(0xffffffff),
                  zero = _mm256_setzero_si256(), base = _mm256_set1_epi64x((long long)shift - 300);
    __m256i lo = zero, hi = zero, bad = zero;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        __m256i u = _mm256_and_si256(_mm256_cvtepu32_epi64(_mm_loadu_si128((const __m128i *)(x + i))), abs);
        __m256i e = _mm256_srli_epi64(u, 23);
        __m256i sub = _mm256_cmpeq_epi64(e, zero); /* subnormal or zero: no implicit bit, exponent 1 */
        __m256i m = _mm256_or_si256(_mm256_and_si256(u, frac), _mm256_andnot_si256(sub, implicit));
        e = _mm256_or_si256(e, _mm256_and_si256(sub, one));
        __m256i sh = _mm256_add_epi64(_mm256_add_epi64(e, e), base);
        __m256i neg = _mm256_cmpgt_epi64(zero, sh);
        __m256i left = _mm256_andnot_si256(neg, sh), right = _mm256_and_si256(neg, _mm256_sub_epi64(zero, sh));
        __m256i m2 = _mm256_mul_epu32(m, m);
        __m256i t = _mm256_srlv_epi64(_mm256_sllv_epi64(m2, left), right);
        __m256i kept = _mm256_or_si256(neg, _mm256_cmpeq_epi64(_mm256_srlv_epi64(t, left), m2));
        bad = _mm256_or_si256(bad, _mm256_or_si256(_mm256_cmpeq_epi64(e, e255), _mm256_xor_si256(kept,
                                                   _mm256_cmpeq_epi64(zero, zero))));
        lo = _mm256_add_epi64(lo, _mm256_and_si256(t, low));
        hi = _mm256_add_epi64(hi, _mm256_srli_epi64(t, 32));
    }
    uint64_t l[4], h[4];
    _mm256_storeu_si256((__m256i *)l, lo);
    _mm256_storeu_si256((__m256i *)h, hi);
    *slo += l[0] + l[1] + l[2] + l[3];
    *shi += h[0] + h[1] + h[2] + h[3];
    if (!_mm256_testz_si256(bad, bad)) *ok = 0;
    return i;
}
#endif

static void sumsq_range(const float *x, size_t i0, size_t i1, int shift, int avx2, uint64_t *lo, uint64_t *hi,
                        size_t *bad) {
    const double scale = ldexp(1.0, shift);
    (void)avx2;
    for (size_t c0 = i0; c0 < i1; c0 += (size_t)1 << 31) {
        size_t c1 = i1 - c0 > ((size_t)1 << 31) ? c0 + ((size_t)1 << 31) : i1, i = c0;
        uint64_t slo = 0, shi = 0;
        int ok = 1;
#ifdef SUMSQ_AVX2
        if (avx2) i += sumsq_avx2(x + c0, c1 - c0, shift, &slo, &shi, &ok);
#endif
        for (; i < c1; i++) {
            double v = (double)x[i] * (double)x[i] * scale;
            int fits = v < TWO64;
            uint64_t u = (uint64_t)(fits ? v : 0.0);
            ok &= fits;
            slo += u & 0xffffffffu;
            shi += u >> 32;
        }
        if (!ok) {
            for (i = c0; i < c1; i++)
                if (!sumsq_fits(x, i, scale)) {
                    *bad = i;
                    return;
                }
        }
        /* += shi 2^32 + slo, with carry */
        uint64_t add = shi << 32, l = *lo + add;
        *hi += (shi >> 32) + (l < add);
        *lo = l + slo;
        *hi += *lo < slo;
    }
}

static void sumsq_blocks(void *p, size_t b0, size_t b1) {
    red_arg *a = p;
    for (size_t b = b0; b < b1; b++) {
        size_t i0, i1;
        block_of(a, b, &i0, &i1);
        uint64_t lo = 0, hi = 0;
        sumsq_range(a->x, i0, i1, a->shift, a->avx2, &lo, &hi, &a->bad[b]);
        a->lo[b] = lo;
        a->hi[b] = hi;
    }
}

fsc_status cpu_sumsq_fixed(void *ctx, uint64_t acc[2], const float *x, size_t n, int shift) {
    if (shift < -1022 || shift > 1023)
        return fsc_error(FSC_ERR_INVALID, "sumsq_fixed: shift %d outside [-1022, 1023]", shift);
    red_arg a;
    red_setup(ctx, &a, x, n);
    a.shift = shift;
#ifdef SUMSQ_AVX2
    __builtin_cpu_init(); /* a no-op once done; needed before the check if called from a constructor */
    a.avx2 = __builtin_cpu_supports("avx2");
#endif
    cpu_parallel(ctx, (size_t)a.parts, 1, 1, sumsq_blocks, &a);
    size_t bad = n;
    for (int p = 0; p < a.parts; p++) bad = a.bad[p] < bad ? a.bad[p] : bad;
    if (bad < n)
        return fsc_error(FSC_ERR_INVALID, "sumsq_fixed: element %zu (%g) squared and scaled by 2^%d does not fit "
                         "in 64 bits; choose a smaller shift", bad, (double)x[bad], shift);
    uint64_t lo = acc[0], hi = acc[1];
    for (int p = 0; p < a.parts; p++) {
        lo += a.lo[p];
        hi += a.hi[p] + (lo < a.lo[p]);
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

typedef struct {
    float *p, *m, *v, *buf;
    const float *g;
    float lr, b1, b2, eps, wd, bc1, bc2, momentum;
    int first;
} opt_arg;

/* In chunks of 256: moments and decay (vectorized), sqrt (SSE), the step (vectorized). Ranges start at
 * multiples of 256, so a range's chunks are the whole call's chunks. */
static void adamw_range(void *arg, size_t lo, size_t hi) {
    const opt_arg *a = arg;
    const float lr = a->lr, b1 = a->b1, b2 = a->b2, eps = a->eps, bc1 = a->bc1, bc2 = a->bc2;
    const float lrwd = lr * a->wd, c1 = 1.0f - b1, c2 = 1.0f - b2;
    float q[256] = {0}; /* (chunk) v / bc2, then its sqrt */
    for (size_t i0 = lo; i0 < hi; i0 += 256) {
        int len = (hi - i0 < 256) ? (int)(hi - i0) : 256;
        float *pc = a->p + i0, *mc = a->m + i0, *vc = a->v + i0;
        const float *gc = a->g + i0;
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
}

fsc_status cpu_adamw(void *ctx, float *p, const float *g, float *m, float *v, size_t n, float lr,
                     float b1, float b2, float eps, float wd, float bc1, float bc2) {
    opt_arg a = { .p = p, .m = m, .v = v, .g = g, .lr = lr, .b1 = b1, .b2 = b2, .eps = eps, .wd = wd, .bc1 = bc1,
                  .bc2 = bc2 };
    cpu_parallel(ctx, n, 256, CPU_GRAIN, adamw_range, &a);
    return FSC_OK;
}

static void sgd_range(void *arg, size_t lo, size_t hi) {
    const opt_arg *a = arg;
    const float lr = a->lr, momentum = a->momentum, wd = a->wd;
    float *p = a->p, *buf = a->buf;
    const float *g = a->g;
    for (size_t i = lo; i < hi; i++) {
        float d = g[i] + wd * p[i];
        if (momentum != 0.0f) {
            d = a->first ? d : momentum * buf[i] + d;
            buf[i] = d;
        }
        p[i] = p[i] - lr * d;
    }
}

fsc_status cpu_sgd(void *ctx, float *p, const float *g, float *buf, size_t n, float lr, float momentum,
                   float wd, int first) {
    if (momentum != 0.0f && !buf)
        return fsc_error(FSC_ERR_INVALID, "sgd: momentum %g needs a momentum buffer (buf is NULL)", (double)momentum);
    opt_arg a = { .p = p, .buf = buf, .g = g, .lr = lr, .wd = wd, .momentum = momentum, .first = first };
    cpu_parallel(ctx, n, CPU_STEP, CPU_GRAIN, sgd_range, &a);
    return FSC_OK;
}
