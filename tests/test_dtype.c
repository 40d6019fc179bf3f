/* Tests for lib/core/dtype.c: f32 <-> bf16 / f16 conversions.
 * Oracles: bit patterns derived by hand from IEEE 754 (ties to even, quiet NaN, overflow to inf,
 * f16 subnormals); exhaustive round trips of every 16-bit pattern; where the compiler has _Float16,
 * its (hardware or libgcc) RNE conversion as an independent reference on many random floats. */
#include <float.h>
#include <math.h>
#include "testutil.h"

static float fbits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t ubits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

static void test_names_sizes(void **state) {
    (void)state;
    assert_int_equal(fsc_dtype_size(FSC_F32), 4);
    assert_int_equal(fsc_dtype_size(FSC_BF16), 2);
    assert_int_equal(fsc_dtype_size(FSC_F16), 2);
    assert_int_equal(fsc_dtype_size(FSC_I32), 4);
    assert_int_equal(fsc_dtype_size(FSC_U8), 1);
    assert_int_equal(fsc_dtype_size(FSC_I64), 8);
    assert_int_equal(fsc_dtype_size((fsc_dtype)77), 0);
    const char *names[] = {"f32", "bf16", "f16", "i32", "u8", "i64"};
    assert_int_equal(sizeof names / sizeof names[0], FSC_DTYPE_COUNT);
    for (int i = 0; i < FSC_DTYPE_COUNT; i++) {
        fsc_dtype t;
        assert_string_equal(fsc_dtype_name((fsc_dtype)i), names[i]);
        assert_int_equal(fsc_dtype_parse(names[i], &t), 0);
        assert_int_equal(t, i);
    }
    fsc_dtype t;
    assert_int_equal(fsc_dtype_parse("f64", &t), -1);
    assert_int_equal(fsc_dtype_parse(NULL, &t), -1);
}

static void test_bf16_hand_patterns(void **state) {
    (void)state;
    static const struct { uint32_t f; uint16_t h; } cases[] = {
        {0x3f800000, 0x3f80}, /* 1.0 */
        {0xbf800000, 0xbf80}, /* -1.0 */
        {0x3f808000, 0x3f80}, /* tie, lower is even -> down */
        {0x3f818000, 0x3f82}, /* tie, lower is odd -> up */
        {0x3f808001, 0x3f81}, /* just above the tie -> up */
        {0x3f807fff, 0x3f80}, /* just below the tie -> down */
        {0x7f800000, 0x7f80}, /* inf */
        {0xff800000, 0xff80}, /* -inf */
        {0x7f7fffff, 0x7f80}, /* FLT_MAX overflows to inf */
        {0x7f7f7fff, 0x7f7f}, /* largest that stays finite */
        {0x7f800001, 0x7fc0}, /* signalling NaN becomes quiet */
        {0xffc00000, 0xffc0}, /* -NaN keeps its sign */
        {0x00000000, 0x0000}, {0x80000000, 0x8000},
        {0x00008000, 0x0000}, /* subnormal tie to even (0) */
        {0x00018000, 0x0002}, /* subnormal tie to even (2) */
        {0x00010000, 0x0001},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint16_t h = fsc_f32_to_bf16(fbits(cases[i].f));
        if (h != cases[i].h) fail_msg("bf16(0x%08x) = 0x%04x, expected 0x%04x", cases[i].f, h, cases[i].h);
    }
    assert_true(fsc_bf16_to_f32(0x3f80) == 1.0f);
    assert_true(fsc_bf16_to_f32(0xc040) == -3.0f);
    assert_true(isnan(fsc_bf16_to_f32(0x7fc1)));
}

static void test_bf16_roundtrip_all(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = fsc_bf16_to_f32((uint16_t)h);
        assert_int_equal(ubits(f), h << 16); /* widening is a shift */
        uint16_t back = fsc_f32_to_bf16(f);
        if (isnan(f)) assert_int_equal(back, h | 0x40);
        else assert_int_equal(back, h);
    }
}

static void test_f16_hand_patterns(void **state) {
    (void)state;
    static const struct { float f; uint16_t h; } cases[] = {
        {1.0f, 0x3c00}, {-2.0f, 0xc000}, {0.5f, 0x3800}, {65504.0f, 0x7bff},
        {65519.99f, 0x7bff},                 /* below the midpoint to 65536 */
        {65520.0f, 0x7c00},                  /* midpoint ties to even: the "even" neighbour is inf */
        {1e10f, 0x7c00}, {-1e10f, 0xfc00},
        {0x1.0p-24f, 0x0001},                /* smallest subnormal */
        {0x1.0p-25f, 0x0000},                /* half of it: tie to even (0) */
        {0x1.8p-25f, 0x0001},                /* 0.75 ulp -> 1 */
        {0x1.8p-24f, 0x0002},                /* 1.5 ulp: tie to even (2) */
        {0x1.0p-14f, 0x0400},                /* smallest normal */
        {1023.0f * 0x1.0p-24f, 0x03ff},      /* largest subnormal */
        {1023.5f * 0x1.0p-24f, 0x0400},      /* tie between 0x3ff and 0x400 -> even 0x400 */
        {1.0f + 0x1.0p-11f, 0x3c00},         /* tie, down to even */
        {1.0f + 0x1.8p-10f, 0x3c02},         /* tie (1 + 3*2^-11), up to even */
        {1e-10f, 0x0000}, {-1e-10f, 0x8000},
        {0.333333333f, 0x3555},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint16_t h = fsc_f32_to_f16(cases[i].f);
        if (h != cases[i].h) fail_msg("f16(%a) = 0x%04x, expected 0x%04x", (double)cases[i].f, h, cases[i].h);
    }
    assert_int_equal(fsc_f32_to_f16(INFINITY), 0x7c00);
    assert_int_equal(fsc_f32_to_f16(-INFINITY), 0xfc00);
    uint16_t n = fsc_f32_to_f16(fbits(0x7f800001));
    assert_int_equal(n & 0x7e00, 0x7e00); /* NaN, quiet bit set */
    assert_int_equal(fsc_f32_to_f16(fbits(0xffc00000)) & 0x8000, 0x8000);
    assert_true(fsc_f16_to_f32(0x0001) == 0x1.0p-24f);
    assert_true(fsc_f16_to_f32(0x8001) == -0x1.0p-24f);
    assert_true(fsc_f16_to_f32(0x03ff) == 1023.0f * 0x1.0p-24f);
    assert_true(fsc_f16_to_f32(0x3555) == 0.333251953125f);
    assert_true(isinf(fsc_f16_to_f32(0xfc00)) && fsc_f16_to_f32(0xfc00) < 0);
    assert_true(isnan(fsc_f16_to_f32(0x7e00)));
}

static void test_f16_roundtrip_all(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = fsc_f16_to_f32((uint16_t)h);
        uint16_t back = fsc_f32_to_f16(f);
        if (isnan(f)) assert_int_equal(back, h | 0x200);
        else if (back != h) fail_msg("f16 0x%04x -> %a -> 0x%04x", h, (double)f, back);
    }
}

/* Reference: a value strictly between two adjacent f16 values goes to the nearer one, checked by
 * distances in double; ties go to the even pattern. Independent of the bit tricks in dtype.c. */
static uint16_t f16_reference(float x) {
    if (isnan(x)) return 0x7e00;
    double ax = fabs((double)x);
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    if (ax >= 65520.0) return sign | 0x7c00;
    uint16_t lo = 0; /* largest pattern with value <= ax, by bisection over the ordered positive patterns */
    uint16_t a = 0, b = 0x7bff;
    while (a < b) {
        uint16_t mid = (uint16_t)((a + b + 1) / 2);
        if ((double)fsc_f16_to_f32(mid) <= ax) a = mid; else b = (uint16_t)(mid - 1);
    }
    lo = a;
    if ((double)fsc_f16_to_f32(lo) == ax) return sign | lo;
    double dlo = ax - fsc_f16_to_f32(lo), dhi = (double)fsc_f16_to_f32((uint16_t)(lo + 1)) - ax;
    uint16_t r = (dlo < dhi) ? lo : (dhi < dlo) ? (uint16_t)(lo + 1) : ((lo & 1) ? (uint16_t)(lo + 1) : lo);
    return sign | r;
}

static void test_f16_random_vs_reference(void **state) {
    (void)state;
    uint32_t s = 12345;
    for (int i = 0; i < 20000; i++) {
        s = s * 1664525u + 1013904223u;
        /* floats with exponents around the f16 range, random mantissas */
        uint32_t e = 96 + (s >> 27) % 48; /* 2^-31 .. 2^16 */
        s = s * 1664525u + 1013904223u;
        uint32_t u = ((s & 1u) << 31) | (e << 23) | (s >> 9);
        float x = fbits(u);
        uint16_t got = fsc_f32_to_f16(x), want = f16_reference(x);
        if (got != want) fail_msg("f16(%a) = 0x%04x, reference 0x%04x", (double)x, got, want);
#ifdef __FLT16_MAX__
        _Float16 hf = (_Float16)x;
        uint16_t hb;
        memcpy(&hb, &hf, 2);
        if (got != hb) fail_msg("f16(%a) = 0x%04x, _Float16 gives 0x%04x", (double)x, got, hb);
#endif
    }
}

static void test_convert_host(void **state) {
    (void)state;
    float src[5] = {1.0f, -2.5f, 0x1.0p-24f, 65520.0f, 3.14159f};
    uint16_t h[5], b[5];
    float back[5];
    fsc_convert_host(h, FSC_F16, src, FSC_F32, 5);
    fsc_convert_host(b, FSC_BF16, src, FSC_F32, 5);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(h[i], fsc_f32_to_f16(src[i]));
        assert_int_equal(b[i], fsc_f32_to_bf16(src[i]));
    }
    uint16_t hb[5];
    fsc_convert_host(hb, FSC_BF16, h, FSC_F16, 5); /* via f32, which holds f16 exactly */
    for (int i = 0; i < 5; i++) assert_int_equal(hb[i], fsc_f32_to_bf16(fsc_f16_to_f32(h[i])));
    fsc_convert_host(back, FSC_F32, b, FSC_BF16, 5);
    for (int i = 0; i < 5; i++) assert_true(back[i] == fsc_bf16_to_f32(b[i]));
    float same[5];
    fsc_convert_host(same, FSC_F32, src, FSC_F32, 5);
    assert_bits_equal(same, src, 5, "f32 to f32");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_sizes),
        cmocka_unit_test(test_bf16_hand_patterns),
        cmocka_unit_test(test_bf16_roundtrip_all),
        cmocka_unit_test(test_f16_hand_patterns),
        cmocka_unit_test(test_f16_roundtrip_all),
        cmocka_unit_test(test_f16_random_vs_reference),
        cmocka_unit_test(test_convert_host),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
