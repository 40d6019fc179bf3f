/* Element types and exact host conversions between f32, bf16 and f16 (dtype.h).
 * Rounding is to nearest, ties to even; NaN stays a quiet NaN with its sign, overflow goes to inf,
 * f16 subnormals are produced and read exactly. Bit manipulation only, no FPU rounding modes. */
#include <math.h>
#include <string.h>
#include "fsc/dtype.h"

static const struct { const char *name; size_t size; } dtypes[FSC_DTYPE_COUNT] = {
    [FSC_F32] = {"f32", 4}, [FSC_BF16] = {"bf16", 2}, [FSC_F16] = {"f16", 2},
    [FSC_I32] = {"i32", 4}, [FSC_U8] = {"u8", 1}, [FSC_I64] = {"i64", 8},
};

size_t fsc_dtype_size(fsc_dtype t) {
    return ((unsigned)t < FSC_DTYPE_COUNT) ? dtypes[t].size : 0;
}

const char *fsc_dtype_name(fsc_dtype t) {
    return ((unsigned)t < FSC_DTYPE_COUNT) ? dtypes[t].name : "invalid";
}

int fsc_dtype_parse(const char *s, fsc_dtype *out) {
    if (!s) return -1;
    for (int i = 0; i < FSC_DTYPE_COUNT; i++) {
        if (strcmp(s, dtypes[i].name) == 0) {
            if (out) *out = (fsc_dtype)i;
            return 0;
        }
    }
    return -1;
}

static inline uint32_t f2u(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
static inline float u2f(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }

uint16_t fsc_f32_to_bf16(float x) {
    uint32_t u = f2u(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);  /* RNE; carries into the exponent (to inf) correctly */
    return (uint16_t)(u >> 16);
}

float fsc_bf16_to_f32(uint16_t h) { return u2f((uint32_t)h << 16); }

uint16_t fsc_f32_to_f16(float x) {
    uint32_t u = f2u(x);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu)); /* quiet NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to inf (and inf) */
    if (a >= 0x38800000u) {                                    /* normal f16 */
        uint32_t r = a - 0x38000000u;                          /* rebias exponent 127 -> 15 */
        r += 0x0fffu + ((r >> 13) & 1u);
        return (uint16_t)(sign | (r >> 13));
    }
    /* subnormal f16 (or zero): value / 2^-24 rounded to nearest even */
    uint32_t e = a >> 23;
    if (e < 102) return sign;                 /* below 2^-25: rounds to zero (2^-25 itself ties to 0) */
    uint32_t m = (a & 0x7fffffu) | 0x800000u; /* value = m * 2^(e-150) */
    uint32_t shift = 126 - e;                 /* 14..24 */
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return (uint16_t)(sign | q);
}

float fsc_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {
        float v = ldexpf((float)m, -24); /* exact: m < 2^10 */
        return sign ? -v : v;
    }
    if (e == 31) return u2f(sign | 0x7f800000u | (m << 13));
    return u2f(sign | ((e + 112) << 23) | (m << 13));
}

void fsc_convert_host(void *dst, fsc_dtype dt, const void *src, fsc_dtype st, size_t n) {
    if (n == 0 || !dst || !src) return; /* status.h: nothing on a NULL buffer */
    if (dt == st) {
        if (dst != src) memmove(dst, src, n * fsc_dtype_size(dt));
        return;
    }
    /* every path goes through f32, which holds bf16 and f16 values exactly */
    for (size_t i = 0; i < n; i++) {
        float v;
        switch (st) {
        case FSC_F32: v = ((const float *)src)[i]; break;
        case FSC_BF16: v = fsc_bf16_to_f32(((const uint16_t *)src)[i]); break;
        case FSC_F16: v = fsc_f16_to_f32(((const uint16_t *)src)[i]); break;
        default: return; /* not a float type: nothing is converted */
        }
        switch (dt) {
        case FSC_F32: ((float *)dst)[i] = v; break;
        case FSC_BF16: ((uint16_t *)dst)[i] = fsc_f32_to_bf16(v); break;
        case FSC_F16: ((uint16_t *)dst)[i] = fsc_f32_to_f16(v); break;
        default: return;
        }
    }
}
