/* Private to the CPU backend: an exp that the compiler can vectorize.
 * glibc's expf/tanhf are calls the vectorizer cannot inline, and GELU, softmax and cross entropy spend
 * most of their time there. fsc_cpu_expf is the Cephes single-precision exp (range reduction by ln 2
 * split in two constants, a degree-6 polynomial, 2^n from integer bits): within 2 ulp of expf where
 * the result is normal, plain arithmetic only, so it is deterministic and vectorizes at -O3.
 * The input is clamped to [-88, 88] with integer bit selects (a float ?: makes gcc keep a branch under
 * -ftrapping-math): exp(x) is 0 below about -87.33 (where 2^n would be subnormal), exp(88) above 88,
 * and NaN stays NaN. */
#ifndef FSC_CPU_MATH_H
#define FSC_CPU_MATH_H
#include <stdint.h>
#include <string.h>

/* c ? a : b without a branch */
static inline float fsc_cpu_select(int c, float a, float b) {
    uint32_t m = -(uint32_t)c, ab, bb;
    memcpy(&ab, &a, 4);
    memcpy(&bb, &b, 4);
    uint32_t r = (ab & m) | (bb & ~m);
    float out;
    memcpy(&out, &r, 4);
    return out;
}

static inline float fsc_cpu_expf(float x) {
    float xc = fsc_cpu_select(x < -88.0f, -88.0f, x);
    xc = fsc_cpu_select(xc > 88.0f, 88.0f, xc);
    float t = xc * 1.44269504088896341f + 12582912.0f; /* 1.5 * 2^23: rounds to the nearest integer n */
    float n = t - 12582912.0f;
    uint32_t tb;
    memcpy(&tb, &t, 4);
    uint32_t n127 = tb - 0x4B400000u + 127u;          /* n + 127 in [0, 254]; 0 gives 2^n = +0 */
    uint32_t e = n127 << 23;                           /* bits of 2^n */
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    float s;
    memcpy(&s, &e, 4);
    return p * s;
}

/* f32 -> bf16, round to nearest even, NaN quieted: fsc_f32_to_bf16 (dtype.c) without its branch, so the
 * conversion loop vectorizes. test_cpu_kernels checks it bit for bit against dtype.c. */
static inline uint16_t fsc_cpu_f32_to_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    uint32_t rne = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t nan = (u >> 16) | 0x40u;
    return (uint16_t)(((u & 0x7fffffffu) > 0x7f800000u) ? nan : rne);
}

static inline float fsc_cpu_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

#endif
