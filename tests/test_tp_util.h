/* Helpers of the tensor-parallel and mixture-of-experts tests. Checks run inside rank functions, where a
 * cmocka failure would jump out of the wrong thread: they return an error whose message the main thread
 * prints through assert_ok (the cluster reports "rank R: ..."). */
#ifndef FSC_TEST_TP_UTIL_H
#define FSC_TEST_TP_UTIL_H
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include "testutil.h"

/* Run fn on world ranks with one BLAS thread each (results compared bit for bit must use the same count). */
static inline fsc_status tt_run(int world, fsc_rank_fn fn, void *arg) {
    fsc_cluster_opts co = { .world = world, .device = "cpu", .timeout_s = 30, .threads_per_rank = 1 };
    return fsc_cluster_run(&co, fn, arg);
}

/* max |a - b| / max |b| (0 when both are all zero) */
/* Tokens and targets (vocabulary 48, 8 positions a sequence) of sequences [first, first + n) of step s. */
static inline void tt_batch(int s, int first, int n, int32_t *tok, int32_t *tgt) {
    for (int i = 0; i < n * 8; i++) {
        uint32_t x = (uint32_t)(s * 1000 + first * 8 + i) * 2654435761u;
        tok[i] = (int32_t)((x >> 7) % 48u);
        tgt[i] = (int32_t)((x >> 17) % 48u);
    }
}

static inline double tt_rel_err(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > num || d != d) num = d != d ? INFINITY : d;
        if (fabs((double)b[i]) > den) den = fabs((double)b[i]);
    }
    return den > 0 ? num / den : num;
}

#define TT_BITS(a, b, n, what)                                                                              \
    do {                                                                                                    \
        const float *a_ = (a), *b_ = (b);                                                                   \
        for (size_t i_ = 0; i_ < (size_t)(n); i_++)                                                          \
            if (memcmp(&a_[i_], &b_[i_], sizeof(float)) != 0)                                                \
                return fsc_error(FSC_ERR_INTERNAL, "%s: element %zu differs: %.9g vs %.9g (want bit-equal)", \
                                 (what), i_, (double)a_[i_], (double)b_[i_]);                                \
    } while (0)

#define TT_CLOSE(a, b, n, tol, what)                                                                        \
    do {                                                                                                    \
        double e_ = tt_rel_err((a), (b), (n));                                                              \
        if (getenv("FSC_TEST_VERBOSE")) fprintf(stderr, "  %s: relative error %.3g\n", (what), e_);          \
        if (!(e_ <= (tol)))                                                                                 \
            return fsc_error(FSC_ERR_INTERNAL, "%s: relative error %.3g exceeds %.3g", (what), e_, (double)(tol)); \
    } while (0)

#define TT_TRUE(cond, ...)                                                                                  \
    do {                                                                                                    \
        if (!(cond)) return fsc_error(FSC_ERR_INTERNAL, __VA_ARGS__);                                       \
    } while (0)

/* Host buffer of n normal values for tensor `name` (the keyed RNG), scaled by std. */
static inline float *tt_normal(size_t n, const char *name, float std) {
    float *h = malloc((n ? n : 1) * sizeof(float));
    if (h) fsc_rng_fill_normal(h, n, 99, name, 0, 0.0f, std);
    return h;
}

/* Device copy of a host array (tag acts). */
static inline fsc_status tt_up(fsc_device *dev, float **d, const float *h, size_t n) {
    FSC_TRY(fsc_device_alloc(dev, FSC_TAG_ACTS, (n ? n : 1) * sizeof(float), (void **)d));
    return fsc_device_upload(dev, *d, h, n * sizeof(float));
}

static inline fsc_status tt_down(fsc_device *dev, float *h, const float *d, size_t n) {
    return fsc_device_download(dev, h, d, n * sizeof(float));
}

#endif
