/* Tests for lib/core/rng.c: Philox-4x32-10 and the (seed, name, index) streams.
 * Oracles: the known-answer vectors of Random123 (kat_vectors, philox4x32 with 10 rounds); filling a
 * slice gives exactly the slice of the full fill; sample mean and standard deviation within a few
 * standard errors of the distribution's. */
#include <math.h>
#include <stdlib.h>
#include "testutil.h"

static void test_philox_kat(void **state) {
    (void)state;
    static const struct { uint32_t ctr[4], key[2], out[4]; } kat[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
         {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (size_t i = 0; i < sizeof kat / sizeof kat[0]; i++) {
        uint32_t out[4];
        fsc_philox4x32(kat[i].ctr, kat[i].key, out);
        for (int j = 0; j < 4; j++)
            if (out[j] != kat[i].out[j]) fail_msg("KAT %zu word %d: %08x, expected %08x", i, j, out[j], kat[i].out[j]);
    }
}

static void test_keys_differ(void **state) {
    (void)state;
    uint64_t a = fsc_rng_key(1, "h.0.attn.c_attn.weight"), b = fsc_rng_key(1, "h.0.attn.c_proj.weight");
    uint64_t c = fsc_rng_key(2, "h.0.attn.c_attn.weight");
    assert_true(a != b && a != c && b != c);
    assert_true(a == fsc_rng_key(1, "h.0.attn.c_attn.weight"));
    assert_true(fsc_rng_key(0, "") != fsc_rng_key(1, ""));
    assert_true(fsc_rng_uniform(a, 0) != fsc_rng_uniform(b, 0));
}

static void test_slice_equals_full(void **state) {
    (void)state;
    enum { N = 1000 };
    float full[N], part[N];
    fsc_rng_fill_normal(full, N, 42, "wte", 0, 0.0f, 0.02f);
    size_t cuts[][2] = {{0, 1}, {0, 250}, {250, 500}, {999, 1000}, {333, 777}};
    for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
        size_t a = cuts[c][0], b = cuts[c][1];
        fsc_rng_fill_normal(part, b - a, 42, "wte", a, 0.0f, 0.02f);
        assert_bits_equal(part, full + a, b - a, "slice of the fill");
    }
    /* value i is mean + std * normal(key, i) */
    uint64_t key = fsc_rng_key(42, "wte");
    for (size_t i = 0; i < N; i += 97) assert_true(full[i] == 0.0f + 0.02f * fsc_rng_normal(key, i));
    /* large element indices use the high counter word */
    float hi1, hi2;
    fsc_rng_fill_normal(&hi1, 1, 42, "wte", (1ull << 32) + 5, 0.0f, 1.0f);
    fsc_rng_fill_normal(&hi2, 1, 42, "wte", 5, 0.0f, 1.0f);
    assert_true(hi1 != hi2);
}

static void test_uniform_stats(void **state) {
    (void)state;
    uint64_t key = fsc_rng_key(7, "u");
    enum { N = 200000 };
    double s = 0, s2 = 0;
    float mn = 1, mx = 0;
    for (uint64_t i = 0; i < N; i++) {
        float u = fsc_rng_uniform(key, i);
        assert_true(u >= 0.0f && u < 1.0f);
        s += u;
        s2 += (double)u * u;
        mn = u < mn ? u : mn;
        mx = u > mx ? u : mx;
    }
    double mean = s / N, var = s2 / N - mean * mean;
    /* standard error of the mean: sqrt(1/12/N) = 6.5e-4 */
    assert_true(fabs(mean - 0.5) < 0.004);
    assert_true(fabs(var - 1.0 / 12) < 0.002);
    assert_true(mn < 0.001f && mx > 0.999f);
}

static void test_normal_stats(void **state) {
    (void)state;
    enum { N = 200000 };
    float *x = malloc(N * sizeof *x);
    assert_non_null(x);
    fsc_rng_fill_normal(x, N, 3, "n", 0, 1.5f, 2.0f);
    double s = 0, s2 = 0, s4 = 0;
    int tail = 0;
    for (int i = 0; i < N; i++) {
        double z = (x[i] - 1.5) / 2.0;
        assert_true(isfinite(z));
        s += z;
        s2 += z * z;
        s4 += z * z * z * z;
        tail += fabs(z) > 1.96;
    }
    double mean = s / N, var = s2 / N - mean * mean;
    assert_true(fabs(mean) < 0.015);      /* s.e. 0.0022 */
    assert_true(fabs(var - 1.0) < 0.02);  /* s.e. 0.0032 */
    assert_true(fabs(s4 / N - 3.0) < 0.1); /* kurtosis of a normal */
    assert_true(fabs((double)tail / N - 0.05) < 0.005);
    free(x);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_philox_kat),   cmocka_unit_test(test_keys_differ),
        cmocka_unit_test(test_slice_equals_full), cmocka_unit_test(test_uniform_stats),
        cmocka_unit_test(test_normal_stats),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
