/* Exact, order-free sums on int64 fixed point (exact.h): the exponent of a sum, conversion of f32 terms with
 * range detection, wrapping integer sums and the one rounding back to f32. Host arrays only; where the engine
 * uses them and how every configuration agrees on the exponent is lib/parallel/exact.c. */
#include <math.h>
#include <string.h>
#include "fsc/exact.h"

/* Bits of n: the smallest h with n <= 2^h. */
static int bits_of(uint64_t n) {
    int h = 0;
    while (h < 64 && (n >> h) > 1) h++;
    return (n & (n - 1)) == 0 ? h : h + 1;
}

/* The smallest multiple of q at or above x. */
static int ceil_to(int x, int q) {
    int r = x % q;
    if (r < 0) r += q;
    return r ? x + (q - r) : x;
}

int fsc_exact_exponent(double amax, uint64_t terms) {
    if (!isfinite(amax)) return INT32_MAX;
    if (amax <= 0) return FSC_EXACT_ZERO_EXPONENT;
    int k; /* amax < 2^k */
    (void)frexp(amax, &k);
    const int h = bits_of(terms ? terms : 1);
    /* each term below 2^(k - E) <= 2^(62 - h), n of them below 2^62 */
    return ceil_to(k + h - 62, FSC_EXACT_QUANTUM);
}

/* Beyond this magnitude an exponent rounds every finite float to 0 (E > 0) or puts every nonzero one out of range
 * (E < 0), as any larger one does: clamped to it, 2^-E is a finite double and the shifts of fixed_of stay in int's
 * range (fsc_exact_exponent's INT32_MAX for a non-finite amax included). */
enum { E_BOUND = 1000 };

static int clamp_exponent(int E) { return E < -E_BOUND ? -E_BOUND : E > E_BOUND ? E_BOUND : E; }

double fsc_exact_absmax(const float *x, size_t n) {
    if (!x) return 0.0;
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        if (!isfinite(a)) return INFINITY;
        if (a > m) m = a;
    }
    return (double)m;
}

size_t fsc_exact_add_f32(int64_t *acc, const float *x, size_t n, int E) {
    if (!acc || !x) return n; /* nothing added */
    E = clamp_exponent(E);
    const double scale = ldexp(1.0, -E), limit = ldexp(1.0, 62);
    size_t out = 0;
    for (size_t i = 0; i < n; i++) {
        double v = (double)x[i] * scale; /* exact: a power of two, in double's range */
        if (!(fabs(v) < limit)) {
            out++;
            continue;
        }
        acc[i] = (int64_t)((uint64_t)acc[i] + (uint64_t)llrint(v)); /* to nearest, ties to even */
    }
    return out;
}

/* round(x 2^-E) from x's bits, ties to even (integer arithmetic only, so that the loop vectorizes): x = m 2^sh
 * with m its 24-bit significand; *ok = 0 for |x| 2^-E >= 2^62, inf and NaN (the result is then 0). */
static inline int64_t fixed_of(float x, int E, int *ok) {
    uint32_t u;
    memcpy(&u, &x, 4);
    const int e = (int)((u >> 23) & 0xffu);
    const uint64_t m = (u & 0x7fffffu) | (e ? 0x800000u : 0u);
    const int sh = (e ? e : 1) - 150 - E;
    const int r = sh < 0 ? (-sh > 63 ? 63 : -sh) : 0, l = sh > 0 ? (sh > 62 ? 62 : sh) : 0;
    const uint64_t half = r ? (uint64_t)1 << (r - 1) : 0;
    const uint64_t down = (m + (half ? half - 1 : 0) + ((m >> r) & 1u)) >> r; /* sh < 0: m 2^-r, to nearest even */
    const uint64_t q = sh < 0 ? (r ? down : m) : m << l;
    *ok = e != 255 && (sh <= 38 || (sh <= 62 && (m >> (62 - sh)) == 0) || m == 0);
    const int64_t v = *ok ? (int64_t)q : 0;
    return u >> 31 ? -v : v;
}

/* fixed_of's rounding in double arithmetic, for exponents where x 2^-E is exact in a double (|E| <= 800), without
 * a branch so that the loop vectorizes: v = x 2^-E = h 2^16 + r with h = round(v 2^-16) and |r| <= 2^15, both
 * exact; an integer below 2^51 in magnitude plus 1.5 2^52 has that integer in its low bits, and the addition
 * rounds to nearest even (the default rounding mode), so round(v) = h 2^16 + round(r) (h 2^16 is even) comes from
 * two such additions. Out of range (|v| >= 2^62, inf, NaN: where |v|'s bits are at or above 2^62's): 0, counted.
 * *abits: the largest |x[i]|'s bits (inf and NaN above every finite value's). */
static size_t from_f32_scaled(int64_t *restrict out, const float *restrict x, size_t n, double scale,
                              uint32_t *abits) {
    const double magic = 0x1.8p52;
    uint64_t mbits;
    memcpy(&mbits, &magic, 8);
    const uint64_t lim = (uint64_t)(1023 + 62) << 52; /* 2^62's bits */
    uint32_t mb = 0;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        const uint32_t a = u & 0x7fffffffu;
        mb = a > mb ? a : mb;
        const double v = (double)x[i] * scale;
        const double t = v * 0x1p-16 + magic, r = v - (t - magic) * 0x1p16, l = r + magic;
        uint64_t vb, tb, lb;
        memcpy(&vb, &v, 8), memcpy(&tb, &t, 8), memcpy(&lb, &l, 8);
        const uint64_t ok = (vb & 0x7fffffffffffffffu) < lim;
        const uint64_t q = ((tb - mbits) << 16) + (lb - mbits);
        out[i] = (int64_t)(q & (0 - ok)); /* a mask, not a choice: no branch for the compiler to sink q into */
        bad += (size_t)(ok ^ 1);
    }
    *abits = mb;
    return bad;
}

size_t fsc_exact_from_f32(int64_t *out, const float *x, size_t n, int E, double *amax) {
    if (!out || !x || !amax) return n; /* nothing converted */
    E = clamp_exponent(E);
    size_t bad = 0;
    double mx;
    if (E >= -800 && E <= 800) {
        uint32_t ab;
        bad = from_f32_scaled(out, x, n, ldexp(1.0, -E), &ab);
        float m;
        memcpy(&m, &ab, 4);
        mx = ab >= 0x7f800000u ? INFINITY : (double)m;
    } else {
        float m = 0.0f;
        for (size_t i = 0; i < n; i++) {
            const float a = fabsf(x[i]);
            m = a > m ? a : m; /* NaN is never above m: found below */
            int ok;
            out[i] = fixed_of(x[i], E, &ok);
            bad += !ok;
        }
        mx = (double)m;
        for (size_t i = 0; bad && i < n; i++)
            if (!isfinite(x[i])) mx = INFINITY;
    }
    if (mx > *amax) *amax = mx;
    return bad;
}

void fsc_exact_add_i64(int64_t *acc, const int64_t *x, size_t n) {
    if (!acc || !x) return;
    for (size_t i = 0; i < n; i++) acc[i] = (int64_t)((uint64_t)acc[i] + (uint64_t)x[i]);
}

void fsc_exact_to_f32(float *out, const int64_t *acc, size_t n, int E) {
    if (!out || !acc) return;
    const double scale = ldexp(1.0, clamp_exponent(E));
    for (size_t i = 0; i < n; i++) out[i] = (float)((double)(float)acc[i] * scale);
}
