/* Helpers of the module tests (test_nn.c, test_nn_modern.c): a cpu device fixture, random inputs kept in
 * float and double, device buffers, and the two oracles: a forward against a double reference, a backward
 * against central finite differences of that reference (the contract is written atop test_nn.c). */
#ifndef FSC_NNTEST_H
#define FSC_NNTEST_H
#include <math.h>
#include <stdlib.h>
#include "testutil.h"
#include "fsc/nn.h"

/* ---- helpers ------------------------------------------------------------------------------------- */
typedef struct { fsc_device *dev; } fixture;

static inline int setup(void **state) {
    fixture *f = calloc(1, sizeof *f);
    if (!f || fsc_device_create("cpu", &(fsc_device_opts){ .threads = 1 }, &f->dev) != FSC_OK) return -1;
    *state = f;
    return 0;
}
static inline int teardown(void **state) {
    fixture *f = *state;
    fsc_device_free(f->dev);
    free(f);
    return 0;
}

static uint64_t rng_state = 88172645463325252ull;
static inline double urand(void) { /* uniform [-1, 1) */
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}
/* Random float values, also kept as double (the reference sees exactly the float values). */
static inline float *rand_f(size_t n, double scale, double **dbl) {
    float *h = malloc(n * sizeof(float));
    double *d = malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) d[i] = h[i] = (float)(urand() * scale);
    *dbl = d;
    return h;
}
static inline float *dev_from(fsc_device *dev, const float *h, size_t n) {
    float *p;
    assert_ok(fsc_device_alloc(dev, FSC_TAG_ACTS, n * sizeof(float), (void **)&p));
    if (h) assert_ok(fsc_device_upload(dev, p, h, n * sizeof(float)));
    return p;
}
static inline float *dev_fill(fsc_device *dev, size_t n, float v) {
    float *h = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) h[i] = v;
    float *p = dev_from(dev, h, n);
    free(h);
    return p;
}
static inline float *host_of(fsc_device *dev, const float *p, size_t n) {
    float *h = malloc(n * sizeof(float));
    assert_ok(fsc_device_download(dev, h, p, n * sizeof(float)));
    return h;
}

/* The reference: out = f(ctx, in[]) in double. */
typedef void (*ref_fn)(const void *ctx, double *const *in, double *out);

static inline void check_forward(const char *what, ref_fn f, const void *ctx, double *const *in, const float *got,
                          size_t nout) {
    double *ref = malloc(nout * sizeof(double)), mx = 0, err = 0;
    f(ctx, in, ref);
    for (size_t i = 0; i < nout; i++) {
        mx = fmax(mx, fabs(ref[i]));
        err = fmax(err, fabs(ref[i] - got[i]));
    }
    free(ref);
    if (err > 1e-5 * mx + 1e-7) fail_msg("%s forward: max error %.3g vs max |y| %.3g", what, err, mx);
}

/* got[k] against d/d in[which][k] of sum(dy * f) + offset[k] (the prior contents of an accumulated
 * gradient; NULL for none). */
static inline void check_grad(const char *what, ref_fn f, const void *ctx, double *const *in, int which, size_t n,
                       const double *dy, size_t nout, const float *got, const float *offset, double tol) {
    double *out = malloc(nout * sizeof(double)), *fd = malloc(n * sizeof(double));
    const double eps = 1e-4;
    double mx = 0;
    for (size_t k = 0; k < n; k++) {
        double v = in[which][k], lp = 0, lm = 0;
        in[which][k] = v + eps;
        f(ctx, in, out);
        for (size_t i = 0; i < nout; i++) lp += dy[i] * out[i];
        in[which][k] = v - eps;
        f(ctx, in, out);
        for (size_t i = 0; i < nout; i++) lm += dy[i] * out[i];
        in[which][k] = v;
        fd[k] = (lp - lm) / (2 * eps) + (offset ? offset[k] : 0.0);
        mx = fmax(mx, fabs(fd[k]));
    }
    for (size_t k = 0; k < n; k++)
        if (fabs(got[k] - fd[k]) > tol * mx + 1e-6)
            fail_msg("%s: element %zu: backward %.7g, finite difference %.7g (max |fd| %.3g)", what, k,
                     (double)got[k], fd[k], mx);
    free(out);
    free(fd);
}

#endif
