/* Tests for lib/core/exact.c (exact.h) and the communicators' i64 sums it rides on.
 * Oracles: the same terms (tiny, huge, mixed signs, cancellations) summed in any split over groups and any
 * order give the same int64s and the same f32 bits as the serial sum; the simulated communicator's i64
 * all-reduce and reduce-scatter over ranks holding a random split give those bits too; the sum is at least as
 * accurate as the ordered f32 sum against a float64 reference, within the stated bound (exact.h); a term out
 * of range is counted and adds nothing; the exponent keeps terms x amax within 2^62; the engine's one-pass
 * conversion equals the reference conversion bit for bit. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include "testutil.h"

static uint64_t next(uint64_t *s) {
    uint64_t x = (*s += 0x9E3779B97F4A7C15ull);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static double unit(uint64_t *s) { return (double)(next(s) >> 11) / 9007199254740992.0; }

/* One term's element in one of five families: wide binades, tiny (subnormal and near), huge, cancelling
 * pairs (term 2j+1 negates term 2j, plus a small remainder), and plain normals. */
static float draw(uint64_t *s, int family, int term, const float *prev) {
    const float sign = next(s) & 1 ? -1.0f : 1.0f;
    const float m = (float)(0.5 + 0.5 * unit(s)) * sign;
    switch (family) {
    case 0: return ldexpf(m, (int)(next(s) % 80) - 40);
    case 1: return ldexpf(m, -126 - (int)(next(s) % 23));
    case 2: return ldexpf(m, 90 + (int)(next(s) % 20));
    case 3: return term & 1 ? -*prev + ldexpf(m, -30) : ldexpf(m, (int)(next(s) % 10));
    default: return m;
    }
}

typedef struct {
    int n, L, E;
    float *x;       /* (n, L) terms */
    int64_t *ref;   /* (L) their serial fixed-point sum */
    float *out;     /* (L) as f32 */
} sum_case;

static void make_case(sum_case *c, uint64_t seed, int family) {
    uint64_t s = seed;
    c->n = 1 + (int)(next(&s) % 40);
    c->L = 1 + (int)(next(&s) % 64);
    c->x = malloc((size_t)c->n * c->L * sizeof(float));
    c->ref = calloc((size_t)c->L, sizeof(int64_t));
    c->out = malloc((size_t)c->L * sizeof(float));
    assert_non_null(c->x);
    assert_non_null(c->ref);
    assert_non_null(c->out);
    for (int t = 0; t < c->n; t++)
        for (int i = 0; i < c->L; i++) {
            const float *prev = t ? &c->x[(size_t)(t - 1) * c->L + i] : NULL;
            c->x[(size_t)t * c->L + i] = draw(&s, family == 3 && !t ? 0 : family, t, prev);
        }
    c->E = fsc_exact_exponent(fsc_exact_absmax(c->x, (size_t)c->n * c->L), (uint64_t)c->n);
    for (int t = 0; t < c->n; t++) assert_int_equal(fsc_exact_add_f32(c->ref, c->x + (size_t)t * c->L, c->L, c->E), 0);
    fsc_exact_to_f32(c->out, c->ref, c->L, c->E);
}

static void free_case(sum_case *c) {
    free(c->x);
    free(c->ref);
    free(c->out);
}

/* Random splits of the terms into groups, each summed in a random order on its own, the groups added in
 * a random order: the same int64s and f32 bits as the serial sum. */
static void test_any_split_and_order(void **state) {
    (void)state;
    for (uint64_t trial = 0; trial < 300; trial++) {
        sum_case c;
        make_case(&c, 1000 + trial, (int)(trial % 5));
        uint64_t s = trial * 7919;
        int *perm = malloc((size_t)c.n * sizeof(int)), *grp = malloc((size_t)c.n * sizeof(int));
        const int G = 1 + (int)(next(&s) % (unsigned)c.n);
        int64_t *acc = calloc((size_t)G * c.L, sizeof(int64_t)), *tot = calloc((size_t)c.L, sizeof(int64_t));
        float *out = malloc((size_t)c.L * sizeof(float));
        assert_true(perm && grp && acc && tot && out);
        for (int t = 0; t < c.n; t++) perm[t] = t, grp[t] = (int)(next(&s) % (unsigned)G);
        for (int t = c.n - 1; t > 0; t--) {
            int j = (int)(next(&s) % (unsigned)(t + 1)), k = perm[t];
            perm[t] = perm[j], perm[j] = k;
        }
        for (int k = 0; k < c.n; k++) {
            int t = perm[k];
            assert_int_equal(fsc_exact_add_f32(acc + (size_t)grp[t] * c.L, c.x + (size_t)t * c.L, c.L, c.E), 0);
        }
        for (int g = G - 1; g >= 0; g--) fsc_exact_add_i64(tot, acc + (size_t)g * c.L, c.L);
        fsc_exact_to_f32(out, tot, c.L, c.E);
        if (memcmp(tot, c.ref, (size_t)c.L * sizeof(int64_t)) || memcmp(out, c.out, (size_t)c.L * sizeof(float)))
            fail_msg("trial %llu (family %d, %d terms in %d groups): the sums differ", (unsigned long long)trial,
                     (int)(trial % 5), c.n, G);
        free(perm), free(grp), free(acc), free(tot), free(out);
        free_case(&c);
    }
}

/* Ranks of the simulated cluster hold a random split of the terms; an i64 all-reduce and a reduce-scatter of
 * their fixed-point sums give the serial sum's int64s on every rank. */
typedef struct {
    const sum_case *c;
    const int *owner; /* (n) the rank holding each term */
    int bad[8];
} comm_arg;

static fsc_status comm_rank(fsc_rank *r, void *arg) {
    comm_arg *a = arg;
    const sum_case *c = a->c;
    const int N = r->world, L = c->L;
    const size_t Lp = (size_t)((L + N - 1) / N) * N; /* padded for the reduce-scatter */
    int64_t *mine = calloc(Lp, sizeof(int64_t)), *got = calloc(Lp, sizeof(int64_t));
    void *d = NULL;
    fsc_status s = mine && got ? FSC_OK : fsc_error(FSC_ERR_NOMEM, "test: out of memory");
    for (int t = c->n - 1; s == FSC_OK && t >= 0; t--)
        if (a->owner[t] == r->rank) fsc_exact_add_f32(mine, c->x + (size_t)t * L, L, c->E);
    if (s == FSC_OK) s = fsc_device_alloc(r->dev, FSC_TAG_COMM, Lp * sizeof(int64_t), &d);
    if (s == FSC_OK) s = fsc_device_upload(r->dev, d, mine, Lp * sizeof(int64_t));
    if (s == FSC_OK) s = fsc_comm_all_reduce(r->comm, d, d, Lp, FSC_I64, FSC_SUM);
    if (s == FSC_OK) s = fsc_device_download(r->dev, got, d, Lp * sizeof(int64_t));
    if (s == FSC_OK && memcmp(got, c->ref, (size_t)L * sizeof(int64_t))) a->bad[r->rank] |= 1;
    const size_t blk = Lp / (size_t)N, at = (size_t)r->rank * blk;
    if (s == FSC_OK) s = fsc_device_upload(r->dev, d, mine, Lp * sizeof(int64_t));
    if (s == FSC_OK) s = fsc_comm_reduce_scatter(r->comm, d, (int64_t *)d + at, blk, FSC_I64, FSC_SUM);
    if (s == FSC_OK) s = fsc_device_download(r->dev, got, (int64_t *)d + at, blk * sizeof(int64_t));
    for (size_t i = 0; s == FSC_OK && i < blk && at + i < (size_t)L; i++)
        if (got[i] != c->ref[at + i]) a->bad[r->rank] |= 2;
    fsc_device_release(r->dev, d);
    free(mine), free(got);
    return s;
}

static void test_sim_ranks(void **state) {
    (void)state;
    for (uint64_t trial = 0; trial < 20; trial++) {
        sum_case c;
        make_case(&c, 5000 + trial, (int)(trial % 5));
        uint64_t s = trial + 11;
        int owner[64];
        fsc_cluster_opts co = fsc_cluster_opts_default();
        co.world = 1 + (int)(next(&s) % 6);
        for (int t = 0; t < c.n; t++) owner[t] = (int)(next(&s) % (unsigned)co.world);
        comm_arg a = {.c = &c, .owner = owner};
        assert_ok(fsc_cluster_run(&co, comm_rank, &a));
        for (int k = 0; k < co.world; k++)
            if (a.bad[k]) fail_msg("trial %llu: rank %d of %d got other sums (%d)", (unsigned long long)trial, k,
                                   co.world, a.bad[k]);
        free_case(&c);
    }
}

/* i64 sums wrap and maxima are signed, on the simulated communicator, as exact.h's adds do. */
static fsc_status wrap_rank(fsc_rank *r, void *arg) {
    int64_t v[2] = {r->rank == 0 ? INT64_MAX : 1, r->rank == 0 ? -5 : -7}, *out = arg;
    void *d = NULL;
    FSC_TRY(fsc_device_alloc(r->dev, FSC_TAG_COMM, sizeof v, &d));
    fsc_status s = fsc_device_upload(r->dev, d, v, sizeof v);
    if (s == FSC_OK) s = fsc_comm_all_reduce(r->comm, d, d, 1, FSC_I64, FSC_SUM);
    if (s == FSC_OK) s = fsc_comm_all_reduce(r->comm, (int64_t *)d + 1, (int64_t *)d + 1, 1, FSC_I64, FSC_MAX);
    if (s == FSC_OK && r->rank == 1) s = fsc_device_download(r->dev, out, d, sizeof v);
    if (s == FSC_OK) s = fsc_comm_all_reduce(r->comm, d, d, 1, FSC_I64, FSC_AVG); /* refused */
    fsc_device_release(r->dev, d);
    return s;
}

static void test_comm_i64(void **state) {
    (void)state;
    int64_t out[2] = {0, 0};
    fsc_cluster_opts co = fsc_cluster_opts_default();
    co.world = 2;
    assert_err(fsc_cluster_run(&co, wrap_rank, out), FSC_ERR_INVALID, "avg of i64 is not defined");
    assert_true(out[0] == INT64_MIN);
    assert_true(out[1] == -5);
}

/* Against a float64 reference (the double sum of the terms, exact to 2^-53 of the partial sums): the error of
 * the exact sum is at most the ordered f32 sum's (normwise, relative to the largest |reference|), and within
 * exact.h's bound elementwise: 0.5 ulp of the result + n 2^(E-1) + the reference's own error. */
static void test_accuracy(void **state) {
    (void)state;
    const int n = 12, L = 4096;
    uint64_t s = 42;
    float *x = malloc((size_t)n * L * sizeof(float)), *ex = malloc((size_t)L * sizeof(float));
    int64_t *acc = calloc((size_t)L, sizeof(int64_t));
    assert_true(x && ex && acc);
    for (size_t k = 0; k < (size_t)n * L; k++) x[k] = draw(&s, k % 3 == 0 ? 0 : 4, 0, NULL);
    const int E = fsc_exact_exponent(fsc_exact_absmax(x, (size_t)n * L), (uint64_t)n);
    for (int t = 0; t < n; t++) assert_int_equal(fsc_exact_add_f32(acc, x + (size_t)t * L, L, E), 0);
    fsc_exact_to_f32(ex, acc, L, E);
    double emax = 0, f32max = 0, rmax = 0;
    for (int i = 0; i < L; i++) {
        double ref = 0, part = 0;
        float f = 0.0f;
        for (int t = 0; t < n; t++) {
            ref += x[(size_t)t * L + i];
            f += x[(size_t)t * L + i];
            part = fmax(part, fabs(ref));
        }
        const double e = fabs((double)ex[i] - ref);
        const double bound = 0.5 * ldexp(1.0, ilogb(fabs(ref) > 0 ? ref : 1.0) - 23) + n * ldexp(1.0, E - 1) +
                             n * ldexp(part, -53);
        if (e > bound) fail_msg("element %d: error %g above the bound %g (sum %g)", i, e, bound, ref);
        emax = fmax(emax, e), f32max = fmax(f32max, fabs((double)f - ref)), rmax = fmax(rmax, fabs(ref));
    }
    print_message("normwise error against float64: exact %.3g, ordered f32 %.3g\n", emax / rmax, f32max / rmax);
    assert_true(emax <= f32max);
    free(x), free(ex), free(acc);
}

/* Range: the exponent of amax and n terms keeps n x amax within 2^62 and is a multiple of the quantum; a term
 * beyond 2^62 of the grid, inf or NaN is counted and adds nothing; 2^20 terms at the limit do not wrap. */
static void test_range(void **state) {
    (void)state;
    assert_int_equal(fsc_exact_exponent(0.0, 5), FSC_EXACT_ZERO_EXPONENT);
    assert_int_equal(fsc_exact_exponent(INFINITY, 5), INT32_MAX);
    assert_int_equal(fsc_exact_exponent(NAN, 5), INT32_MAX);
    uint64_t s = 3;
    for (int k = 0; k < 2000; k++) {
        double amax = ldexp(0.5 + 0.5 * unit(&s), (int)(next(&s) % 300) - 150);
        uint64_t terms = 1 + next(&s) % (1u << 24);
        int E = fsc_exact_exponent(amax, terms);
        assert_int_equal(((E % FSC_EXACT_QUANTUM) + FSC_EXACT_QUANTUM) % FSC_EXACT_QUANTUM, 0);
        assert_true((double)terms * amax * ldexp(1.0, -E) <= ldexp(1.0, 62));
        /* one quantum finer would not hold the bound the exponent is chosen from (n <= 2^h, amax < 2^k) */
        int h = 0, e2;
        while ((1ull << h) < terms) h++;
        (void)frexp(amax, &e2);
        assert_true(e2 + h - (E - FSC_EXACT_QUANTUM) > 62);
    }
    const int E = fsc_exact_exponent(1.0, 1u << 20);
    float big[4] = {ldexpf(1.0f, E + 62), INFINITY, NAN, 1.0f}, one = 1.0f, back;
    int64_t acc[4] = {7, 7, 7, 7}, sum = 0;
    assert_int_equal(fsc_exact_add_f32(acc, big, 4, E), 3);
    assert_true(acc[0] == 7 && acc[1] == 7 && acc[2] == 7 && acc[3] == 7 + ((int64_t)1 << -E));
    for (int k = 0; k < (1 << 20); k++) assert_int_equal(fsc_exact_add_f32(&sum, &one, 1, E), 0);
    fsc_exact_to_f32(&back, &sum, 1, E);
    assert_true(back == 1048576.0f);
    assert_true(fsc_exact_absmax(big + 3, 1) == 1.0 && isinf(fsc_exact_absmax(big, 3)));
}

/* fsc_exact_from_f32 (integer arithmetic on the bits) equals fsc_exact_add_f32 into zeros (llrint on doubles)
 * element for element, with the same out-of-range count, on every family, on exponents from far too fine (out of
 * range) to far too coarse (everything rounds to 0, ties included), and on inf, NaN, zeros and subnormals. */
static void test_convert_equals_reference(void **state) {
    (void)state;
    for (uint64_t trial = 0; trial < 200; trial++) {
        sum_case c;
        make_case(&c, 9000 + trial, (int)(trial % 5));
        const size_t n = (size_t)c.n * c.L;
        if (trial % 7 == 0) c.x[0] = INFINITY, c.x[n - 1] = NAN;
        if (trial % 11 == 0) c.x[0] = -0.0f, c.x[n / 2] = 1e-45f;
        int64_t *a = calloc(n, sizeof(int64_t)), *b = malloc(n * sizeof(int64_t));
        assert_true(a && b);
        uint64_t s = trial;
        const int E = c.E == INT32_MAX ? 0 : c.E + (int)(next(&s) % 161) - 80;
        const size_t bad_a = fsc_exact_add_f32(a, c.x, n, E);
        double amax = 0;
        const size_t bad_b = fsc_exact_from_f32(b, c.x, n, E, &amax);
        assert_int_equal(bad_a, bad_b);
        for (size_t i = 0; i < n; i++)
            if (a[i] != b[i]) fail_msg("trial %llu, E %d: element %zu = %a: %lld, the reference %lld",
                                       (unsigned long long)trial, E, i, (double)c.x[i], (long long)b[i], (long long)a[i]);
        const double want = fsc_exact_absmax(c.x, n);
        assert_true(amax == want);
        free(a), free(b);
        free_case(&c);
    }
}

/* Exponents far outside any step's, fsc_exact_exponent's INT32_MAX for a non-finite amax among them: a coarse one
 * rounds every finite term to 0 and counts only inf and NaN, a fine one counts every nonzero term and never a
 * zero (0 x 2^-E is 0 < 2^62), both conversions agree, and a sum of zeros stays 0 on the way back. */
static void test_extreme_exponents(void **state) {
    (void)state;
    const float x[7] = {0.0f, -0.0f, 1e-45f, -1.0f, FLT_MAX, INFINITY, NAN};
    const int Es[6] = {INT32_MAX, fsc_exact_exponent(INFINITY, 3), 1100, -1100, -5000, INT32_MIN};
    for (int k = 0; k < 6; k++) {
        const int E = Es[k];
        const size_t want = E > 0 ? 2 : 5;
        int64_t a[7] = {0}, b[7];
        double amax = 0;
        const size_t bad_a = fsc_exact_add_f32(a, x, 7, E), bad_b = fsc_exact_from_f32(b, x, 7, E, &amax);
        if (bad_a != want || bad_b != want)
            fail_msg("E %d: %zu and %zu terms out of range, not %zu", E, bad_a, bad_b, want);
        for (int i = 0; i < 7; i++)
            if (a[i] != 0 || b[i] != 0) fail_msg("E %d: element %d = %a became %lld and %lld, not 0", E, i,
                                                 (double)x[i], (long long)a[i], (long long)b[i]);
        const int64_t q[3] = {0, 1, -1};
        float back[3];
        fsc_exact_to_f32(back, q, 3, E);
        if (!(back[0] == 0.0f && back[1] == (E > 0 ? INFINITY : 0.0f) && back[2] == (E > 0 ? -INFINITY : 0.0f)))
            fail_msg("E %d: 0, 1 and -1 became %a, %a and %a", E, (double)back[0], (double)back[1], (double)back[2]);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_any_split_and_order),
        cmocka_unit_test(test_sim_ranks),
        cmocka_unit_test(test_comm_i64),
        cmocka_unit_test(test_accuracy),
        cmocka_unit_test(test_range),
        cmocka_unit_test(test_convert_equals_reference),
        cmocka_unit_test(test_extreme_exponents),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
