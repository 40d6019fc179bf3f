/* Tests for the CPU kernels of modern models (backends/cpu/cpu_modern.c): RMS norm, rotary embeddings, SiLU,
 * SwiGLU, the elementwise product and the squared error.
 * Oracles: every forward against a double-precision reference written here (rotary as transformers writes it:
 * the frequencies concatenated twice and rotate_half, not the kernel's pairwise form), to 2e-6 relative plus
 * 1e-6 absolute; every backward against central finite differences of that reference (h = 1e-4 in double, so
 * the quotient is accurate to ~1e-8) to 1e-4 relative plus 2e-5 absolute (measured errors ~1e-7); accumulating
 * gradients start from nonzero contents that must survive; in-place calls give the bits of out-of-place
 * ones; a device with 3 threads gives the bits of a device with 1. Device pointers are host pointers here. */
#include <math.h>
#include <stdlib.h>
#include "testutil.h"
#include "core/device_impl.h"

static fsc_device *dev;

static int setup(void **state) { (void)state; return fsc_device_create("cpu", NULL, &dev) == FSC_OK ? 0 : -1; }
static int teardown(void **state) { (void)state; fsc_device_free(dev); return 0; }

static uint64_t rs = 0x2545F4914F6CDD1Dull;
static float rnd(void) { /* uniform in [-1, 1), xorshift64 */
    rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17;
    return (float)((double)(rs >> 40) * 0x1.0p-23 - 1.0);
}
static float *frand(size_t n, float scale) {
    float *p = malloc((n ? n : 1) * sizeof *p);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++) p[i] = scale * rnd();
    return p;
}
static double *dcopy(const float *x, size_t n) {
    double *d = malloc((n ? n : 1) * sizeof *d);
    assert_non_null(d);
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}

static void check_close(const char *what, size_t i, double got, double want, double rtol, double atol) {
    if (!(fabs(got - want) <= atol + rtol * fabs(want)))
        fail_msg("%s[%zu]: got %.9g, reference %.9g (diff %.3g)", what, i, got, want, fabs(got - want));
}

/* A reference: the scalar sum(g * f(in)) in double, in[] the inputs (one of them perturbed). */
typedef double (*loss_fn)(const void *ctx, double *const *in);

/* got[k] - prior[k] against the central difference of f in in[which][k] */
static void check_fd(const char *what, loss_fn f, const void *ctx, double *const *in, int which, size_t n,
                     const float *got, const float *prior) {
    const double h = 1e-4;
    for (size_t k = 0; k < n; k++) {
        double s = in[which][k];
        in[which][k] = s + h;
        double lp = f(ctx, in);
        in[which][k] = s - h;
        double lm = f(ctx, in);
        in[which][k] = s;
        check_close(what, k, (double)got[k] - (prior ? (double)prior[k] : 0.0), (lp - lm) / (2 * h), 1e-4, 2e-5);
    }
}

/* ---------------------------------------------------------------- RMS norm */

typedef struct { int N, C; double eps; const float *g; } rms_ctx;
static void rms_ref(const rms_ctx *c, const double *x, const double *w, double *out, double *rstd) {
    for (int n = 0; n < c->N; n++) {
        double ms = 0;
        for (int i = 0; i < c->C; i++) ms += x[n * c->C + i] * x[n * c->C + i];
        double r = 1.0 / sqrt(ms / c->C + c->eps);
        if (rstd) rstd[n] = r;
        for (int i = 0; i < c->C; i++) out[n * c->C + i] = x[n * c->C + i] * r * w[i];
    }
}
static double rms_loss(const void *vc, double *const *in) { /* in: x, w */
    const rms_ctx *c = vc;
    double *o = malloc((size_t)c->N * c->C * sizeof *o), L = 0;
    rms_ref(c, in[0], in[1], o, NULL);
    for (int i = 0; i < c->N * c->C; i++) L += o[i] * c->g[i];
    free(o);
    return L;
}

static void rmsnorm_case(int C, float eps) {
    const int N = 5;
    size_t n = (size_t)N * C;
    float *x = frand(n, 2.0f), *w = frand(C, 1.0f), *g = frand(n, 1.0f), *out = frand(n, 1.0f), rstd[5];
    for (size_t i = 0; i < n; i++) x[i] += (float)(i / (size_t)C) * 0.5f; /* rows of different scales */
    double *xd = dcopy(x, n), *wd = dcopy(w, C), *ref = malloc(n * sizeof *ref), rref[5];
    rms_ctx c = { N, C, eps, g };
    assert_ok(FSC_K(dev, rmsnorm_forward, out, rstd, x, w, N, C, eps));
    rms_ref(&c, xd, wd, ref, rref);
    for (int r = 0; r < N; r++) check_close("rms rstd", (size_t)r, rstd[r], rref[r], 2e-6, 0);
    for (size_t i = 0; i < n; i++) check_close("rms out", i, out[i], ref[i], 2e-6, 1e-6);
    float *dx = frand(n, 1.0f), *dw = frand(C, 1.0f), *px = malloc(n * sizeof *px), *pw = malloc(C * sizeof *pw);
    memcpy(px, dx, n * sizeof *px);
    memcpy(pw, dw, C * sizeof *pw);
    float *hx = malloc(n * sizeof *hx), *hw = malloc(C * sizeof *hw); /* either half alone: the same bits */
    memcpy(hx, px, n * sizeof *hx);
    memcpy(hw, pw, C * sizeof *hw);
    assert_ok(FSC_K(dev, rmsnorm_backward, dx, dw, g, x, w, rstd, N, C));
    assert_ok(FSC_K(dev, rmsnorm_backward, hx, NULL, g, x, w, rstd, N, C));
    assert_ok(FSC_K(dev, rmsnorm_backward, NULL, hw, g, x, w, rstd, N, C));
    assert_bits_equal(hx, dx, n, "rmsnorm_backward dinp alone");
    assert_bits_equal(hw, dw, (size_t)C, "rmsnorm_backward dw alone");
    assert_err(FSC_K(dev, rmsnorm_backward, NULL, NULL, g, x, w, rstd, N, C), FSC_ERR_INVALID, "both NULL");
    free(hx), free(hw);
    double *in[2] = { xd, wd };
    check_fd("rms dinp", rms_loss, &c, in, 0, n, dx, px);
    check_fd("rms dw", rms_loss, &c, in, 1, C, dw, pw);
    free(x), free(w), free(g), free(out), free(xd), free(wd), free(ref), free(dx), free(dw), free(px), free(pw);
}

static void test_rmsnorm(void **state) {
    (void)state;
    rmsnorm_case(16, 1e-5f); /* lane sums without a tail */
    rmsnorm_case(13, 1e-6f); /* with a tail */
    rmsnorm_case(3, 0.1f);   /* eps large enough to matter */
    float x[4] = { 1, 2, 3, 4 }, o[4], r[1];
    assert_err(FSC_K(dev, rmsnorm_forward, o, r, x, x, 1, 0, 1e-5f), FSC_ERR_INVALID, "width 0");
    assert_err(FSC_K(dev, rmsnorm_forward, o, r, x, x, 1, 4, -1.0f), FSC_ERR_INVALID, "eps");
}

/* ---------------------------------------------------------------- rotary embeddings */

/* transformers' formula: inv_freq = 1 / theta^(arange(0, D, 2) / D); emb = cat(freqs, freqs);
 * out = x * cos(emb) + rotate_half(x) * sin(emb), rotate_half(x) = cat(-x[D/2:], x[:D/2]) */
typedef struct { int B, T, H, D, ld; double theta; const float *g; } rope_ctx;
static void rope_ref(const rope_ctx *c, const double *x, double *out) {
    int D = c->D, h2 = D / 2;
    double *emb = malloc(D * sizeof *emb), *rot = malloc(D * sizeof *rot);
    for (int b = 0; b < c->B; b++)
        for (int t = 0; t < c->T; t++) {
            for (int j = 0; j < h2; j++) emb[j] = emb[j + h2] = t * (1.0 / pow(c->theta, (double)(2 * j) / D));
            for (int h = 0; h < c->H; h++) {
                const double *xv = x + ((size_t)b * c->T + t) * c->ld + (size_t)h * D;
                double *o = out + ((size_t)b * c->T + t) * c->ld + (size_t)h * D;
                for (int j = 0; j < D; j++) rot[j] = j < h2 ? -xv[j + h2] : xv[j - h2];
                for (int j = 0; j < D; j++) o[j] = xv[j] * cos(emb[j]) + rot[j] * sin(emb[j]);
            }
        }
    free(emb), free(rot);
}
static double rope_loss(const void *vc, double *const *in) {
    const rope_ctx *c = vc;
    size_t n = (size_t)c->B * c->T * c->ld;
    double *o = calloc(n, sizeof *o), L = 0;
    rope_ref(c, in[0], o);
    for (size_t i = 0; i < n; i++) L += o[i] * c->g[i];
    free(o);
    return L;
}

static void rope_case(int B, int T, int H, int D, int ld, float theta) {
    size_t n = (size_t)B * T * ld;
    float *x = frand(n, 1.0f), *out = malloc(n * sizeof *out), *g = frand(n, 1.0f), *dx = malloc(n * sizeof *dx);
    for (size_t i = 0; i < n; i++) out[i] = dx[i] = 777.0f; /* columns past H D must keep it */
    for (size_t r = 0; r < (size_t)B * T; r++) /* the loss sees no padding columns */
        for (int j = H * D; j < ld; j++) g[r * ld + j] = 0.0f;
    double *xd = dcopy(x, n), *ref = calloc(n, sizeof *ref);
    rope_ctx c = { B, T, H, D, ld, theta, g };
    assert_ok(FSC_K(dev, rope_forward, out, x, B, T, H, D, ld, theta));
    rope_ref(&c, xd, ref);
    for (size_t r = 0; r < (size_t)B * T; r++)
        for (int j = 0; j < ld; j++) {
            size_t i = r * ld + j;
            if (j >= H * D) assert_true(out[i] == 777.0f);
            else check_close("rope out", i, out[i], ref[i], 2e-6, 1e-6 * (1 + T / 16));
        }
    assert_ok(FSC_K(dev, rope_backward, dx, g, B, T, H, D, ld, theta));
    double *in[1] = { xd };
    for (size_t r = 0; r < (size_t)B * T; r++)
        for (int j = H * D; j < ld; j++) dx[r * ld + j] = 0.0f; /* untouched padding (777) is not a gradient */
    check_fd("rope dinp", rope_loss, &c, in, 0, n, dx, NULL);
    /* in place: the bits of the out-of-place calls */
    float *y = malloc(n * sizeof *y);
    memcpy(y, x, n * sizeof *y);
    assert_ok(FSC_K(dev, rope_forward, y, y, B, T, H, D, ld, theta));
    for (size_t r = 0; r < (size_t)B * T; r++)
        assert_bits_equal(y + r * ld, out + r * ld, (size_t)H * D, "rope forward in place");
    memcpy(y, g, n * sizeof *y);
    assert_ok(FSC_K(dev, rope_backward, y, y, B, T, H, D, ld, theta));
    for (size_t r = 0; r < (size_t)B * T; r++)
        assert_bits_equal(y + r * ld, dx + r * ld, (size_t)H * D, "rope backward in place");
    free(x), free(out), free(g), free(dx), free(xd), free(ref), free(y);
}

static void test_rope(void **state) {
    (void)state;
    rope_case(2, 5, 3, 8, 24, 10000.0f);      /* packed rows, no padding */
    rope_case(1, 37, 2, 6, 17, 10000.0f);     /* padding columns, D/2 odd, larger positions */
    rope_case(2, 9, 1, 16, 16, 500000.0f);    /* Llama 3's theta */
    float x[8] = { 0 };
    assert_err(FSC_K(dev, rope_forward, x, x, 1, 1, 1, 3, 3, 1e4f), FSC_ERR_INVALID, "even");
    assert_err(FSC_K(dev, rope_forward, x, x, 1, 1, 2, 4, 7, 1e4f), FSC_ERR_INVALID, "do not fit");
    assert_err(FSC_K(dev, rope_backward, x, x, 1, 1, 1, 4, 4, 0.0f), FSC_ERR_INVALID, "theta");
}

/* ---------------------------------------------------------------- SiLU, SwiGLU, product */

typedef struct { size_t n; const float *g; int kind; } ew_ctx; /* kind 0 silu(x), 1 silu(x0) x1, 2 x0 x1 */
static double silu_d(double x) { return x / (1.0 + exp(-x)); }
static double ew_loss(const void *vc, double *const *in) {
    const ew_ctx *c = vc;
    double L = 0;
    for (size_t i = 0; i < c->n; i++) {
        double y = c->kind == 0 ? silu_d(in[0][i]) : c->kind == 1 ? silu_d(in[0][i]) * in[1][i] : in[0][i] * in[1][i];
        L += y * c->g[i];
    }
    return L;
}

static void test_silu_swiglu_mul(void **state) {
    (void)state;
    const size_t n = 203;
    float *a = frand(n, 6.0f), *b = frand(n, 2.0f), *g = frand(n, 1.0f), *out = frand(n, 1.0f);
    float *d1 = frand(n, 1.0f), *d2 = frand(n, 1.0f), *p1 = malloc(n * sizeof *p1), *p2 = malloc(n * sizeof *p2);
    a[0] = 0.0f, a[1] = -90.0f, a[2] = 90.0f; /* exp clamps: silu(-90) = -0, silu(90) = 90 */
    double *ad = dcopy(a, n), *bd = dcopy(b, n), *in[2] = { ad, bd };
    ew_ctx c = { n, g, 0 };
    assert_ok(FSC_K(dev, silu_forward, out, a, n));
    for (size_t i = 0; i < n; i++) check_close("silu", i, out[i], silu_d(ad[i]), 2e-6, 1e-6);
    assert_ok(FSC_K(dev, silu_backward, d1, a, g, n));
    check_fd("silu dinp", ew_loss, &c, in, 0, n, d1, NULL);
    c.kind = 1;
    assert_ok(FSC_K(dev, swiglu_forward, out, a, b, n));
    for (size_t i = 0; i < n; i++) check_close("swiglu", i, out[i], silu_d(ad[i]) * bd[i], 2e-6, 1e-6);
    assert_ok(FSC_K(dev, swiglu_backward, d1, d2, a, b, g, n));
    check_fd("swiglu dgate", ew_loss, &c, in, 0, n, d1, NULL);
    check_fd("swiglu dup", ew_loss, &c, in, 1, n, d2, NULL);
    float *gg = malloc(n * sizeof *gg), *u2 = malloc(n * sizeof *u2); /* dgate in place of dout */
    memcpy(gg, g, n * sizeof *gg);
    assert_ok(FSC_K(dev, swiglu_backward, gg, u2, a, b, gg, n));
    assert_bits_equal(gg, d1, n, "swiglu dgate in place");
    assert_bits_equal(u2, d2, n, "swiglu dup with dgate in place");
    c.kind = 2;
    assert_ok(FSC_K(dev, mul_forward, out, a, b, n));
    for (size_t i = 0; i < n; i++) assert_true(out[i] == a[i] * b[i]); /* one rounding: exact */
    memcpy(p1, d1, n * sizeof *p1);
    memcpy(p2, d2, n * sizeof *p2);
    assert_ok(FSC_K(dev, mul_backward, d1, d2, a, b, g, n));
    check_fd("mul da", ew_loss, &c, in, 0, n, d1, p1);
    check_fd("mul db", ew_loss, &c, in, 1, n, d2, p2);
    memcpy(p1, d1, n * sizeof *p1);
    assert_ok(FSC_K(dev, mul_backward, NULL, d1, a, b, g, n)); /* da skipped, db accumulates again */
    for (size_t i = 0; i < n; i++) assert_true(d1[i] == p1[i] + g[i] * a[i]);
    free(a), free(b), free(g), free(out), free(d1), free(d2), free(p1), free(p2), free(ad), free(bd), free(gg);
    free(u2);
}

/* ---------------------------------------------------------------- squared error */

typedef struct { int N, C; const double *y; double scale; } mse_ctx;
static double mse_loss(const void *vc, double *const *in) { /* scale * sum of squared errors */
    const mse_ctx *c = vc;
    double L = 0;
    for (int i = 0; i < c->N * c->C; i++) L += (in[0][i] - c->y[i]) * (in[0][i] - c->y[i]);
    return c->scale * L;
}

static void test_mse(void **state) {
    (void)state;
    const int N = 7, C = 5;
    size_t n = (size_t)N * C;
    float *p = frand(n, 3.0f), *y = frand(n, 3.0f), *dp = frand(n, 1.0f), losses[7];
    double *pd = dcopy(p, n), *yd = dcopy(y, n), *in[1] = { pd };
    assert_ok(FSC_K(dev, mse_forward, losses, p, y, N, C));
    for (int r = 0; r < N; r++) {
        double s = 0;
        for (int i = 0; i < C; i++) s += (pd[r * C + i] - yd[r * C + i]) * (pd[r * C + i] - yd[r * C + i]);
        check_close("mse losses", (size_t)r, losses[r], s, 1e-7, 0); /* the float difference is exact here */
    }
    mse_ctx c = { N, C, yd, 0.125 };
    assert_ok(FSC_K(dev, mse_backward, dp, p, y, N, C, 0.125f));
    check_fd("mse dpred", mse_loss, &c, in, 0, n, dp, NULL);
    assert_err(FSC_K(dev, mse_forward, losses, p, y, N, -1), FSC_ERR_INVALID, "negative width");
    free(p), free(y), free(dp), free(pd), free(yd);
}

/* ---------------------------------------------------------------- thread count */

/* Every kernel at sizes the pool splits (rows not a multiple of anything, widths not a multiple of 8) on
 * devices with 1 and 3 threads: the same bits. */
static void run_all(fsc_device *d, const float *x, const float *y, const float *z, float *o) {
    enum { NR = 1201, W = 67, NE = 100003, B = 3, T = 401, H = 4, D = 32, LD = 136 };
    size_t off = 0;
    assert_ok(FSC_K(d, rmsnorm_forward, o + off, o + off + NR * W, x, y, NR, W, 1e-5f));
    memcpy(o + off + NR * W + NR, z, (size_t)NR * W * sizeof *o);
    memcpy(o + off + 2 * NR * W + NR, y, W * sizeof *o);
    assert_ok(FSC_K(d, rmsnorm_backward, o + off + NR * W + NR, o + off + 2 * NR * W + NR, z, x, y, o + off + NR * W,
                    NR, W));
    off += 2 * (size_t)NR * W + NR + W;
    assert_ok(FSC_K(d, rope_forward, o + off, x, B, T, H, D, LD, 10000.0f));
    off += (size_t)B * T * LD;
    assert_ok(FSC_K(d, rope_backward, o + off, y, B, T, H, D, LD, 10000.0f));
    off += (size_t)B * T * LD;
    assert_ok(FSC_K(d, silu_forward, o + off, x, NE));
    assert_ok(FSC_K(d, silu_backward, o + off + NE, x, y, NE));
    assert_ok(FSC_K(d, swiglu_forward, o + off + 2 * NE, x, y, NE));
    assert_ok(FSC_K(d, swiglu_backward, o + off + 3 * NE, o + off + 4 * NE, x, y, z, NE));
    assert_ok(FSC_K(d, mul_forward, o + off + 5 * NE, x, y, NE));
    memcpy(o + off + 6 * NE, z, 2 * (size_t)NE * sizeof *o);
    assert_ok(FSC_K(d, mul_backward, o + off + 6 * NE, o + off + 7 * NE, x, y, z, NE));
    off += 8 * (size_t)NE;
    assert_ok(FSC_K(d, mse_forward, o + off, x, y, NR, W));
    assert_ok(FSC_K(d, mse_backward, o + off + NR, x, y, NR, W, 0.01f));
}

static void test_threads_equal_one_thread(void **state) {
    (void)state;
    enum { NX = 1 << 21 };
    float *x = frand(NX, 2.0f), *y = frand(NX, 1.0f), *z = frand(NX, 1.0f), *o[2];
    for (int k = 0; k < 2; k++) {
        fsc_device *d;
        assert_ok(fsc_device_create("cpu", &(fsc_device_opts){ .threads = k ? 3 : 1 }, &d));
        o[k] = calloc(NX, sizeof(float));
        run_all(d, x, y, z, o[k]);
        fsc_device_free(d);
    }
    assert_bits_equal(o[0], o[1], NX, "3 threads against 1");
    free(x), free(y), free(z), free(o[0]), free(o[1]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rmsnorm),
        cmocka_unit_test(test_rope),
        cmocka_unit_test(test_silu_swiglu_mul),
        cmocka_unit_test(test_mse),
        cmocka_unit_test(test_threads_equal_one_thread),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
