/* Tests for the CPU kernels (backends/cpu/cpu_kernels.c, cpu_attn.c, cpu_reduce.c).
 * Oracles: every forward kernel against a naive double-precision reference written here; every
 * backward kernel against central finite differences of that double reference forward (h = 1e-4, so
 * the difference quotient is accurate to ~1e-8 and the tolerance measures the kernel); exact results
 * worked out by hand where the arithmetic is exact (reductions, fixed-point sums, optimizer steps);
 * determinism: the same call twice, and a shard of an elementwise kernel, give identical bits.
 * On the CPU device, device pointers are host pointers, so plain arrays are passed to the kernels. */
#include <cblas.h>
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include "testutil.h"
#include "core/device_impl.h"

static fsc_device *dev;

static int setup(void **state) { (void)state; return fsc_device_create("cpu", NULL, &dev) == FSC_OK ? 0 : -1; }
static int teardown(void **state) { (void)state; fsc_device_free(dev); return 0; }

static uint64_t rs = 88172645463325252ull;
static float rnd(void) { /* uniform in [-1, 1), xorshift64 */
    rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17;
    return (float)((double)(rs >> 40) * 0x1.0p-23 - 1.0);
}
static void fill(float *x, size_t n, float scale) { for (size_t i = 0; i < n; i++) x[i] = scale * rnd(); }
static float *falloc(size_t n) { float *p = malloc((n ? n : 1) * sizeof *p); assert_non_null(p); return p; }

static void check_close(const char *what, size_t i, double got, double want, double rtol, double atol) {
    if (!(fabs(got - want) <= atol + rtol * fabs(want)))
        fail_msg("%s[%zu]: got %.9g, reference %.9g (diff %.3g)", what, i, got, want, fabs(got - want));
}

/* ---------------------------------------------------------------- gemm */

static void gemm_case(int ta, int tb, int M, int N, int K, int batch, float beta) {
    int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 2, ldc = N + 4;
    int64_t sa = (int64_t)(ta ? K : M) * lda + 5, sb = (int64_t)(tb ? N : K) * ldb + 7, sc = (int64_t)M * ldc + 3;
    float *A = falloc((size_t)sa * batch), *B = falloc((size_t)sb * batch), *C = falloc((size_t)sc * batch);
    float *C0 = falloc((size_t)sc * batch);
    fill(A, (size_t)sa * batch, 1.0f);
    fill(B, (size_t)sb * batch, 1.0f);
    fill(C, (size_t)sc * batch, 1.0f);
    for (int b = 0; b < batch; b++) /* padding columns of C hold a sentinel that must survive */
        for (int i = 0; i < M; i++)
            for (int j = N; j < ldc && (int64_t)i * ldc + j < sc; j++) C[b * sc + i * ldc + j] = 777.0f;
    if (beta == 0.0f) C[0] = NAN; /* beta 0 ignores C */
    memcpy(C0, C, (size_t)sc * batch * sizeof *C);
    const float alpha = 0.75f;
    assert_ok(FSC_K(dev, gemm, ta, tb, M, N, K, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch));
    for (int b = 0; b < batch; b++) {
        const float *Ab = A + b * sa, *Bb = B + b * sb, *C0b = C0 + b * sc, *Cb = C + b * sc;
        for (int i = 0; i < M; i++) {
            for (int j = 0; j < N; j++) {
                double s = 0, mag = 0;
                for (int k = 0; k < K; k++) {
                    double a = ta ? Ab[k * lda + i] : Ab[i * lda + k];
                    double bb = tb ? Bb[j * ldb + k] : Bb[k * ldb + j];
                    s += a * bb;
                    mag += fabs(a * bb);
                }
                double want = alpha * s + (beta == 0.0f ? 0.0 : beta * (double)C0b[i * ldc + j]);
                double got = Cb[i * ldc + j];
                if (!(fabs(got - want) <= 1e-6 * (mag + 1.0)))
                    fail_msg("gemm ta=%d tb=%d M=%d N=%d K=%d batch %d C[%d,%d] = %.9g, reference %.9g", ta, tb, M, N,
                             K, b, i, j, got, want);
            }
            for (int j = N; j < ldc && (int64_t)i * ldc + j < sc; j++) assert_true(Cb[i * ldc + j] == 777.0f);
        }
    }
    free(A); free(B); free(C); free(C0);
}

static void test_gemm_transposes(void **state) {
    (void)state;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            gemm_case(ta, tb, 5, 7, 6, 3, 0.5f);
            gemm_case(ta, tb, 5, 7, 6, 2, 0.0f);
            gemm_case(ta, tb, 67, 45, 130, 1, 1.0f); /* past OpenBLAS's small-matrix paths */
        }
}

static void test_gemm_edges(void **state) {
    (void)state;
    float A[4] = {1, 2, 3, 4}, B[4] = {1, 2, 3, 4}, C[4] = {1, 2, 3, NAN};
    assert_ok(FSC_K(dev, gemm, 0, 0, 0, 2, 2, 1.0f, A, 2, 0, B, 2, 0, 0.0f, C, 2, 0, 1)); /* M = 0: nothing */
    assert_true(C[0] == 1.0f);
    assert_ok(FSC_K(dev, gemm, 0, 0, 2, 2, 0, 1.0f, A, 1, 0, B, 2, 0, 2.0f, C, 2, 0, 1)); /* K = 0: C = beta C */
    assert_true(C[0] == 2.0f && C[2] == 6.0f && isnan(C[3]));
    assert_ok(FSC_K(dev, gemm, 0, 0, 2, 2, 0, 1.0f, A, 1, 0, B, 2, 0, 0.0f, C, 2, 0, 1)); /* beta 0 clears NaN */
    for (int i = 0; i < 4; i++) assert_true(C[i] == 0.0f);
    assert_err(FSC_K(dev, gemm, 0, 0, 2, 2, 3, 1.0f, A, 2, 0, B, 2, 0, 0.0f, C, 2, 0, 1), FSC_ERR_INVALID, "lda");
    assert_err(FSC_K(dev, gemm, 0, 1, 2, 2, 2, 1.0f, A, 2, 0, B, 1, 0, 0.0f, C, 2, 0, 1), FSC_ERR_INVALID, "ldb");
    assert_err(FSC_K(dev, gemm, 0, 0, 2, 2, 2, 1.0f, A, 2, 0, B, 2, 0, 0.0f, C, 1, 0, 1), FSC_ERR_INVALID, "ldc");
    assert_err(FSC_K(dev, gemm, 0, 0, -1, 2, 2, 1.0f, A, 2, 0, B, 2, 0, 0.0f, C, 2, 0, 1), FSC_ERR_INVALID, "negative");
}

/* ---------------------------------------------------------------- elementwise */

static void test_elementwise(void **state) {
    (void)state;
    enum { N = 1003 };
    float *a = falloc(N), *b = falloc(N), *o = falloc(N);
    fill(a, N, 3.0f);
    fill(b, N, 3.0f);
    assert_ok(FSC_K(dev, add, o, a, b, N));
    for (size_t i = 0; i < N; i++) assert_true(o[i] == (float)((double)a[i] + (double)b[i])); /* one rounding */
    memcpy(o, a, N * sizeof *o);
    assert_ok(FSC_K(dev, scale, o, 0.3f, N));
    for (size_t i = 0; i < N; i++) assert_true(o[i] == (float)((double)0.3f * (double)a[i]));
    memcpy(o, a, N * sizeof *o);
    assert_ok(FSC_K(dev, axpy, o, -1.7f, b, N));
    for (size_t i = 0; i < N; i++) check_close("axpy", i, o[i], (double)a[i] + (double)-1.7f * b[i], 0, 1e-6);
    free(a); free(b); free(o);
}

static double gelu_ref(double x) { return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }

static void test_gelu(void **state) {
    (void)state;
    enum { N = 2001 };
    float *x = falloc(N), *y = falloc(N), *dy = falloc(N), *dx = falloc(N);
    for (int i = 0; i < N; i++) x[i] = -8.0f + 16.0f * (float)i / (N - 1);
    fill(dy, N, 1.0f);
    assert_ok(FSC_K(dev, gelu_forward, y, x, N));
    for (size_t i = 0; i < N; i++) check_close("gelu", i, y[i], gelu_ref(x[i]), 1e-6, 1e-7);
    assert_ok(FSC_K(dev, gelu_backward, dx, x, dy, N));
    for (size_t i = 0; i < N; i++) {
        double h = 1e-4, fd = (gelu_ref(x[i] + h) - gelu_ref(x[i] - h)) / (2 * h);
        check_close("gelu_backward", i, dx[i], fd * dy[i], 1e-5, 1e-6);
    }
    free(x); free(y); free(dy); free(dx);
}

static void test_bias(void **state) {
    (void)state;
    enum { N = 9, OC = 13 };
    float out[N * OC], o0[N * OC], bias[OC], db[OC], db0[OC];
    fill(out, N * OC, 1.0f);
    fill(bias, OC, 1.0f);
    fill(db, OC, 1.0f);
    memcpy(o0, out, sizeof out);
    memcpy(db0, db, sizeof db);
    assert_ok(FSC_K(dev, bias_add, out, bias, N, OC));
    for (size_t i = 0; i < N * OC; i++) assert_true(out[i] == (float)((double)o0[i] + bias[i % OC]));
    /* the gradient of a bias is the column sum of dout; += into db */
    assert_ok(FSC_K(dev, bias_grad, db, o0, N, OC));
    for (int j = 0; j < OC; j++) {
        double s = db0[j];
        for (int n = 0; n < N; n++) s += o0[n * OC + j];
        check_close("bias_grad", (size_t)j, db[j], s, 1e-6, 1e-6);
    }
}

/* ---------------------------------------------------------------- embedding */

static void test_encoder(void **state) {
    (void)state;
    enum { B = 3, T = 5, C = 8, V = 4 };
    int32_t tok[B * T];
    float wte[V * C], wpe[T * C], out[B * T * C], dout[B * T * C], dwte[V * C], dwpe[T * C];
    for (int i = 0; i < B * T; i++) tok[i] = (i * 7 + 1) % V; /* repeats, so rows accumulate */
    fill(wte, V * C, 1.0f);
    fill(wpe, T * C, 1.0f);
    fill(dout, B * T * C, 1.0f);
    assert_ok(FSC_K(dev, encoder_forward, out, tok, wte, wpe, B, T, C));
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++)
                assert_true(out[(b * T + t) * C + c] == (float)((double)wte[tok[b * T + t] * C + c] + wpe[t * C + c]));
    /* the gradient of a lookup is the sum of dout over the positions that read each row (+= into dw) */
    for (int i = 0; i < V * C; i++) dwte[i] = 0.5f;
    for (int i = 0; i < T * C; i++) dwpe[i] = -0.25f;
    assert_ok(FSC_K(dev, encoder_backward, dwte, dwpe, dout, tok, B, T, C));
    for (int v = 0; v < V; v++)
        for (int c = 0; c < C; c++) {
            double s = 0.5;
            for (int i = 0; i < B * T; i++) if (tok[i] == v) s += dout[i * C + c];
            check_close("dwte", (size_t)(v * C + c), dwte[v * C + c], s, 1e-6, 1e-6);
        }
    for (int t = 0; t < T; t++)
        for (int c = 0; c < C; c++) {
            double s = -0.25;
            for (int b = 0; b < B; b++) s += dout[(b * T + t) * C + c];
            check_close("dwpe", (size_t)(t * C + c), dwpe[t * C + c], s, 1e-6, 1e-6);
        }
    tok[3] = -1;
    assert_err(FSC_K(dev, encoder_forward, out, tok, wte, wpe, B, T, C), FSC_ERR_INVALID, "token -1");
    assert_err(FSC_K(dev, encoder_backward, dwte, dwpe, dout, tok, B, T, C), FSC_ERR_INVALID, "token -1");
}

/* ---------------------------------------------------------------- layer norm */

/* sum(out .* g) of layer norm in double */
static double ln_loss(const double *x, const double *w, const double *b, const float *g, int N, int C) {
    double L = 0;
    for (int n = 0; n < N; n++) {
        const double *xr = x + n * C;
        double m = 0, v = 0;
        for (int i = 0; i < C; i++) m += xr[i];
        m /= C;
        for (int i = 0; i < C; i++) v += (xr[i] - m) * (xr[i] - m);
        double r = 1.0 / sqrt(v / C + 1e-5);
        for (int i = 0; i < C; i++) L += ((xr[i] - m) * r * w[i] + b[i]) * g[n * C + i];
    }
    return L;
}

/* C = 16 and C = 13: the lane sums with and without a tail */
static void layernorm_case(int C) {
    enum { N = 5, CM = 16 };
    float x[N * CM], w[CM], b[CM], out[N * CM], mean[N], rstd[N], g[N * CM], dx[N * CM], dw[CM], db[CM];
    double xd[N * CM], wd[CM], bd[CM];
    fill(x, N * C, 2.0f);
    for (int i = 0; i < N * C; i++) x[i] += (float)(i / C); /* rows with different means */
    fill(w, C, 1.0f);
    fill(b, C, 1.0f);
    fill(g, N * C, 1.0f);
    for (int i = 0; i < N * C; i++) xd[i] = x[i];
    for (int i = 0; i < C; i++) { wd[i] = w[i]; bd[i] = b[i]; }
    assert_ok(FSC_K(dev, layernorm_forward, out, mean, rstd, x, w, b, N, C));
    for (int n = 0; n < N; n++) {
        double m = 0, v = 0;
        for (int i = 0; i < C; i++) m += x[n * C + i];
        m /= C;
        for (int i = 0; i < C; i++) v += (x[n * C + i] - m) * (x[n * C + i] - m);
        double r = 1.0 / sqrt(v / C + 1e-5);
        check_close("ln mean", (size_t)n, mean[n], m, 1e-6, 1e-6);
        check_close("ln rstd", (size_t)n, rstd[n], r, 1e-5, 0);
        for (int i = 0; i < C; i++)
            check_close("ln out", (size_t)(n * C + i), out[n * C + i], (x[n * C + i] - m) * r * w[i] + b[i], 1e-5, 1e-5);
    }
    for (int i = 0; i < N * C; i++) dx[i] = 1.0f;
    for (int i = 0; i < C; i++) { dw[i] = 2.0f; db[i] = 3.0f; } /* the kernel adds into these */
    assert_ok(FSC_K(dev, layernorm_backward, dx, dw, db, g, x, w, mean, rstd, N, C));
    { /* either half alone: the bits of both together (the split backward's input and weight parts) */
        float hx[N * CM], hw[CM], hb[CM];
        for (int i = 0; i < N * C; i++) hx[i] = 1.0f;
        for (int i = 0; i < C; i++) { hw[i] = 2.0f; hb[i] = 3.0f; }
        assert_ok(FSC_K(dev, layernorm_backward, hx, NULL, NULL, g, x, w, mean, rstd, N, C));
        assert_ok(FSC_K(dev, layernorm_backward, NULL, hw, hb, g, x, w, mean, rstd, N, C));
        assert_bits_equal(hx, dx, (size_t)(N * C), "layernorm_backward dinp alone");
        assert_bits_equal(hw, dw, (size_t)C, "layernorm_backward dw alone");
        assert_bits_equal(hb, db, (size_t)C, "layernorm_backward db alone");
        assert_err(FSC_K(dev, layernorm_backward, hx, hw, NULL, g, x, w, mean, rstd, N, C), FSC_ERR_INVALID,
                   "together");
        assert_err(FSC_K(dev, layernorm_backward, NULL, NULL, NULL, g, x, w, mean, rstd, N, C), FSC_ERR_INVALID,
                   "all NULL");
    }
    const double h = 1e-4;
    for (int i = 0; i < N * C; i++) {
        double s = xd[i];
        xd[i] = s + h; double lp = ln_loss(xd, wd, bd, g, N, C);
        xd[i] = s - h; double lm = ln_loss(xd, wd, bd, g, N, C);
        xd[i] = s;
        check_close("ln dinp", (size_t)i, dx[i] - 1.0, (lp - lm) / (2 * h), 1e-4, 2e-5);
    }
    for (int i = 0; i < C; i++) {
        double s = wd[i];
        wd[i] = s + h; double lp = ln_loss(xd, wd, bd, g, N, C);
        wd[i] = s - h; double lm = ln_loss(xd, wd, bd, g, N, C);
        wd[i] = s;
        check_close("ln dw", (size_t)i, dw[i] - 2.0, (lp - lm) / (2 * h), 1e-4, 2e-5);
        s = bd[i];
        bd[i] = s + h; lp = ln_loss(xd, wd, bd, g, N, C);
        bd[i] = s - h; lm = ln_loss(xd, wd, bd, g, N, C);
        bd[i] = s;
        check_close("ln db", (size_t)i, db[i] - 3.0, (lp - lm) / (2 * h), 1e-4, 2e-5);
    }
}

static void test_layernorm(void **state) {
    (void)state;
    layernorm_case(16);
    layernorm_case(13);
    layernorm_case(3);
}

/* ---------------------------------------------------------------- attention layouts */

static void test_qkv_heads(void **state) {
    (void)state;
    enum { B = 2, T = 3, NH = 4, HS = 5, C = NH * HS };
    float qkv[B * T * 3 * C], q[B * T * C], k[B * T * C], v[B * T * C], back[B * T * 3 * C], y[B * T * C];
    for (int i = 0; i < B * T * 3 * C; i++) qkv[i] = (float)i;
    assert_ok(FSC_K(dev, qkv_split, q, k, v, qkv, B, T, NH, HS));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++)
                for (int d = 0; d < HS; d++) {
                    int o = ((b * NH + h) * T + t) * HS + d, src = (b * T + t) * 3 * C + h * HS + d;
                    assert_true(q[o] == qkv[src] && k[o] == qkv[src + C] && v[o] == qkv[src + 2 * C]);
                }
    assert_ok(FSC_K(dev, qkv_merge, back, q, k, v, B, T, NH, HS));
    assert_bits_equal(back, qkv, B * T * 3 * C, "qkv_merge(qkv_split(x))");
    float out[B * T * C];
    assert_ok(FSC_K(dev, heads_merge, out, q, B, T, NH, HS));
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++) /* heads side by side = the q part of the qkv row */
                assert_true(out[(b * T + t) * C + c] == qkv[(b * T + t) * 3 * C + c]);
    assert_ok(FSC_K(dev, heads_split, y, out, B, T, NH, HS));
    assert_bits_equal(y, q, B * T * C, "heads_split(heads_merge(y))");
}

/* ---------------------------------------------------------------- causal softmax */

static double softmax_loss(const double *pre, const float *datt, int BH, int T, double scale, double *att_out) {
    double L = 0;
    for (int r = 0; r < BH * T; r++) {
        int i = r % T;
        double mx = -INFINITY, s = 0;
        for (int j = 0; j <= i; j++) mx = fmax(mx, scale * pre[r * T + j]);
        for (int j = 0; j <= i; j++) s += exp(scale * pre[r * T + j] - mx);
        for (int j = 0; j < T; j++) {
            double a = j <= i ? exp(scale * pre[r * T + j] - mx) / s : 0.0;
            if (att_out) att_out[r * T + j] = a;
            L += a * datt[r * T + j];
        }
    }
    return L;
}

static void test_softmax_causal(void **state) {
    (void)state;
    enum { BH = 3, T = 7 };
    const float scale = 0.35f;
    float pre[BH * T * T], att[BH * T * T], datt[BH * T * T], dpre[BH * T * T];
    double pd[BH * T * T], ref[BH * T * T];
    fill(pre, BH * T * T, 4.0f);
    pre[5 * T + 2] = 60.0f; /* a large score: max subtraction keeps exp finite */
    fill(datt, BH * T * T, 1.0f);
    for (int i = 0; i < BH * T * T; i++) { pd[i] = pre[i]; dpre[i] = NAN; }
    assert_ok(FSC_K(dev, softmax_causal_forward, att, pre, BH, T, scale));
    softmax_loss(pd, datt, BH, T, scale, ref);
    for (int r = 0; r < BH * T; r++)
        for (int j = 0; j < T; j++) {
            if (j > r % T) assert_true(att[r * T + j] == 0.0f); /* exact zeros above the diagonal */
            else check_close("softmax", (size_t)(r * T + j), att[r * T + j], ref[r * T + j], 1e-6, 1e-7);
        }
    assert_ok(FSC_K(dev, softmax_causal_backward, dpre, datt, att, BH, T, scale));
    const double h = 1e-4;
    for (int r = 0; r < BH * T; r++)
        for (int j = 0; j < T; j++) {
            int idx = r * T + j;
            if (j > r % T) { assert_true(dpre[idx] == 0.0f); continue; }
            double s = pd[idx];
            pd[idx] = s + h; double lp = softmax_loss(pd, datt, BH, T, scale, NULL);
            pd[idx] = s - h; double lm = softmax_loss(pd, datt, BH, T, scale, NULL);
            pd[idx] = s;
            check_close("softmax dpre", (size_t)idx, dpre[idx], (lp - lm) / (2 * h), 1e-4, 1e-6);
        }
}

/* ---------------------------------------------------------------- cross entropy */

static double xent_ref(const double *x, int V, int t) {
    double mx = -INFINITY, s = 0;
    for (int j = 0; j < V; j++) mx = fmax(mx, x[j]);
    for (int j = 0; j < V; j++) s += exp(x[j] - mx);
    return log(s) + mx - x[t];
}

static void test_xent(void **state) {
    (void)state;
    enum { N = 4, V = 11, LD = 14 };
    const float scale = 0.25f;
    float logits[N * LD], dl[N * LD], losses[N];
    double xd[N * LD];
    int32_t tg[N] = {0, 10, 3, 3};
    fill(logits, N * LD, 3.0f);
    logits[1 * LD + 4] = 90.0f; /* exp(90) overflows float without the max subtraction */
    for (int i = 0; i < N * LD; i++) { xd[i] = logits[i]; dl[i] = 555.0f; }
    assert_ok(FSC_K(dev, xent_forward, losses, logits, tg, N, V, LD));
    for (int n = 0; n < N; n++) check_close("xent", (size_t)n, losses[n], xent_ref(xd + n * LD, V, tg[n]), 1e-6, 1e-6);
    assert_ok(FSC_K(dev, xent_backward, dl, logits, tg, N, V, LD, scale));
    const double h = 1e-4;
    for (int n = 0; n < N; n++) {
        for (int j = 0; j < V; j++) {
            double *x = xd + n * LD, s = x[j];
            x[j] = s + h; double lp = scale * xent_ref(x, V, tg[n]);
            x[j] = s - h; double lm = scale * xent_ref(x, V, tg[n]);
            x[j] = s;
            check_close("xent dlogits", (size_t)(n * LD + j), dl[n * LD + j], (lp - lm) / (2 * h), 1e-4, 1e-6);
        }
        for (int j = V; j < LD; j++) assert_true(dl[n * LD + j] == 555.0f); /* padding untouched */
    }
    /* in place (ABI 7, the split backward's LM heads): dlogits over the logits, the same bits */
    float inplace[N * LD];
    memcpy(inplace, logits, sizeof inplace);
    assert_ok(FSC_K(dev, xent_backward, inplace, inplace, tg, N, V, LD, scale));
    for (int n = 0; n < N; n++) {
        assert_memory_equal(inplace + n * LD, dl + n * LD, V * sizeof(float));
        assert_memory_equal(inplace + n * LD + V, logits + n * LD + V, (LD - V) * sizeof(float));
    }
    tg[2] = V;
    assert_err(FSC_K(dev, xent_forward, losses, logits, tg, N, V, LD), FSC_ERR_INVALID, "target 11");
    tg[2] = -1;
    assert_err(FSC_K(dev, xent_backward, dl, logits, tg, N, V, LD, scale), FSC_ERR_INVALID, "target -1");
    assert_err(FSC_K(dev, xent_forward, losses, logits, tg, N, V, V - 1), FSC_ERR_INVALID, "row stride");
}

/* ---------------------------------------------------------------- reductions */

static void test_sum_absmax(void **state) {
    (void)state;
    enum { N = 1000 };
    float x[N];
    for (int i = 0; i < N; i++) x[i] = (float)(i - 300) * 0.25f; /* exact in float and in the double sum */
    double s;
    assert_ok(FSC_K(dev, sum, &s, x, N));
    assert_true(s == 0.25 * (999.0 * 1000.0 / 2 - 300.0 * 1000)); /* 0.25 * 199500 */
    float mx;
    int nf;
    assert_ok(FSC_K(dev, absmax, &mx, &nf, x, N));
    assert_true(mx == 699.0f * 0.25f && nf == 0);
    x[10] = -1000.0f;
    assert_ok(FSC_K(dev, absmax, &mx, &nf, x, N));
    assert_true(mx == 1000.0f && nf == 0);
    x[20] = -INFINITY;
    assert_ok(FSC_K(dev, absmax, &mx, &nf, x, N));
    assert_true(isinf(mx) && nf == 1);
    x[30] = NAN;
    assert_ok(FSC_K(dev, absmax, &mx, &nf, x, N));
    assert_true(isnan(mx) && nf == 1);
    x[30] = 0; x[20] = 0;
    x[N - 1] = NAN; /* NaN in the last position too */
    assert_ok(FSC_K(dev, absmax, &mx, &nf, x, N));
    assert_true(isnan(mx) && nf == 1);
    assert_ok(FSC_K(dev, sum, &s, x, 0));
    assert_true(s == 0.0);
    assert_ok(FSC_K(dev, absmax, &mx, &nf, x, 0));
    assert_true(mx == 0.0f && nf == 0);
}

static void test_sumsq_fixed(void **state) {
    (void)state;
    uint64_t acc[2] = {0, 0};
    float x[5] = {3.0f, -0.5f, 0.3f, 1.0f, -2.0f};
    /* shift 2: floor(x^2 * 4) = 36, 1, floor(0.36*(1+tiny)) = 0, 4, 16 */
    assert_ok(FSC_K(dev, sumsq_fixed, acc, x, 5, 2));
    assert_true(acc[0] == 57 && acc[1] == 0);
    /* terms of 2^61 each (x = 1, shift 61): 16 of them carry into the high word: 2^65 = (0, 2) */
    float ones[16];
    for (int i = 0; i < 16; i++) ones[i] = 1.0f;
    acc[0] = 5; acc[1] = 7;
    assert_ok(FSC_K(dev, sumsq_fixed, acc, ones, 16, 61));
    assert_true(acc[0] == 5 && acc[1] == 9);
    /* the sum does not depend on the order of the elements */
    enum { N = 257 };
    float r[N], rr[N];
    fill(r, N, 10.0f);
    for (int i = 0; i < N; i++) rr[i] = r[N - 1 - i];
    uint64_t a1[2] = {0, 0}, a2[2] = {0, 0};
    assert_ok(FSC_K(dev, sumsq_fixed, a1, r, N, 40));
    assert_ok(FSC_K(dev, sumsq_fixed, a2, rr, 100, 40));
    assert_ok(FSC_K(dev, sumsq_fixed, a2, rr + 100, N - 100, 40));
    assert_true(a1[0] == a2[0] && a1[1] == a2[1]);
    /* terms up to just below 2^64 over many elements (several blocks and threads): the exact 128-bit sum */
    enum { NB = 100003 };
    float *g = malloc(NB * sizeof *g);
    assert_non_null(g);
    fill(g, NB, 1.0f);
    g[77] = -1.9999999f; /* the largest |x|: its term floor(x^2 2^62) is just below 2^64 */
    unsigned __int128 want = 0;
    for (int i = 0; i < NB; i++) want += (uint64_t)ldexp((double)g[i] * (double)g[i], 62);
    uint64_t a3[2] = {0, 0};
    assert_ok(FSC_K(dev, sumsq_fixed, a3, g, NB, 62));
    assert_true(a3[0] == (uint64_t)want && a3[1] == (uint64_t)(want >> 64));
    /* any bits: random finite floats of every exponent (subnormals and zeros too), at shifts that put the largest
     * term anywhere from 2^-40 to just below 2^64, from an unaligned start and with a tail: each term is
     * floor(x^2 2^shift) exactly, as the reference computes it in double */
    uint32_t st = 12345;
    for (int trial = 0; trial < 40; trial++) {
        const int len = 1 + trial * 37;
        float *h = g + 1;
        float mx = 0.0f;
        for (int i = 0; i < len; i++) {
            st = st * 1664525u + 1013904223u;
            uint32_t u = st;
            if ((u >> 23 & 0xff) == 0xff) u &= ~(1u << 30); /* finite */
            if (trial % 4 == 1) u &= 0x807fffffu; /* subnormal or zero */
            if (trial % 4 == 2) u = (u & 0x807fffffu) | (uint32_t)(100 + (int)(st % 60)) << 23; /* near 1 */
            memcpy(&h[i], &u, 4);
            mx = fabsf(h[i]) > mx ? fabsf(h[i]) : mx;
        }
        int e = 0;
        frexp((double)mx, &e);
        int sh = 64 - 2 * e - (int)(st % 104); /* the largest term below 2^64, down to 2^-40 */
        if (sh < -1022) sh = -1022;
        if (sh > 1023) sh = 1023;
        unsigned __int128 ref = 0;
        for (int i = 0; i < len; i++) ref += (uint64_t)ldexp((double)h[i] * (double)h[i], sh);
        uint64_t a4[2] = {0, 0};
        assert_ok(FSC_K(dev, sumsq_fixed, a4, h, (size_t)len, sh));
        if (a4[0] != (uint64_t)ref || a4[1] != (uint64_t)(ref >> 64))
            fail_msg("trial %d (%d elements, shift %d): sum %llu:%llu, reference %llu:%llu", trial, len, sh,
                     (unsigned long long)a4[1], (unsigned long long)a4[0], (unsigned long long)(ref >> 64),
                     (unsigned long long)ref);
        /* one more bit of shift overflows exactly when the largest term reaches 2^64 */
        const int over = ldexp((double)mx * (double)mx, sh + 1) >= 18446744073709551616.0;
        fsc_status s1 = FSC_K(dev, sumsq_fixed, a4, h, (size_t)len, sh + 1 > 1023 ? 1023 : sh + 1);
        if ((s1 != FSC_OK) != over) fail_msg("trial %d: shift %d + 1 gave %s", trial, sh, fsc_status_str(s1));
    }
    fill(g, NB, 1.0f);
    g[77] = -1.9999999f;
    /* the first element that does not fit is the one named, wherever it lies */
    g[60001] = 2.5f, g[90001] = NAN;
    assert_err(FSC_K(dev, sumsq_fixed, a3, g, NB, 62), FSC_ERR_INVALID, "element 60001");
    free(g);
    float big = 1e20f, nan = NAN;
    assert_err(FSC_K(dev, sumsq_fixed, acc, &big, 1, 30), FSC_ERR_INVALID, "64 bits");
    assert_err(FSC_K(dev, sumsq_fixed, acc, &nan, 1, 0), FSC_ERR_INVALID, "64 bits");
    /* NaN and inf never fit, even where the shift would take any finite square to 0; among others (a tail too) */
    float odd[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    for (int i = 0; i < 9; i++) {
        float keep = odd[i];
        odd[i] = i % 2 ? NAN : -INFINITY;
        assert_err(FSC_K(dev, sumsq_fixed, acc, odd, 9, -1000), FSC_ERR_INVALID, "64 bits");
        odd[i] = keep;
    }
    assert_ok(FSC_K(dev, sumsq_fixed, acc, odd, 9, -1000));
    assert_err(FSC_K(dev, sumsq_fixed, acc, x, 1, 5000), FSC_ERR_INVALID, "shift");
}

/* ---------------------------------------------------------------- optimizers, convert */

static void test_adamw(void **state) {
    (void)state;
    enum { N = 101 };
    float p[N], g[N], m[N], v[N];
    double pd[N], md[N], vd[N];
    fill(p, N, 1.0f);
    fill(g, N, 1.0f);
    for (int i = 0; i < N; i++) { m[i] = v[i] = 0; pd[i] = p[i]; md[i] = vd[i] = 0; }
    const float lr = 1e-2f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.1f;
    /* step 1: m/bc1 = g and v/bc2 = g^2, so p moves by lr * sign(g) after decay */
    assert_ok(FSC_K(dev, adamw, p, g, m, v, N, lr, b1, b2, eps, wd, 1.0f - b1, 1.0f - b2));
    for (int i = 0; i < N; i++)
        check_close("adamw step 1", (size_t)i, p[i], pd[i] * (1 - (double)lr * wd) - lr * (g[i] > 0 ? 1 : -1), 1e-5, 1e-6);
    /* steps 2..3 against the formula in double */
    for (int i = 0; i < N; i++) {
        pd[i] = p[i]; md[i] = m[i]; vd[i] = v[i];
    }
    for (int step = 2; step <= 3; step++) {
        double bc1 = 1 - pow(b1, step), bc2 = 1 - pow(b2, step);
        fill(g, N, 1.0f);
        assert_ok(FSC_K(dev, adamw, p, g, m, v, N, lr, b1, b2, eps, wd, (float)bc1, (float)bc2));
        for (int i = 0; i < N; i++) {
            pd[i] -= (double)lr * wd * pd[i];
            md[i] = b1 * md[i] + (1 - (double)b1) * g[i];
            vd[i] = b2 * vd[i] + (1 - (double)b2) * g[i] * g[i];
            pd[i] -= lr * (md[i] / bc1) / (sqrt(vd[i] / bc2) + eps);
            check_close("adamw p", (size_t)i, p[i], pd[i], 1e-5, 1e-6);
            check_close("adamw m", (size_t)i, m[i], md[i], 1e-5, 1e-7);
            check_close("adamw v", (size_t)i, v[i], vd[i], 1e-5, 1e-9);
        }
    }
}

static void test_sgd(void **state) {
    (void)state;
    /* by hand, lr 0.5, momentum 0.5, wd 0.25, p = 2, g = 1 then 3:
     * step 1: d = 1 + 0.5 = 1.5, buf = 1.5, p = 2 - 0.75 = 1.25
     * step 2: d = 3 + 0.3125 = 3.3125, buf = 0.75 + 3.3125 = 4.0625, p = 1.25 - 2.03125 = -0.78125 */
    float p = 2.0f, g = 1.0f, buf = 99.0f;
    assert_ok(FSC_K(dev, sgd, &p, &g, &buf, 1, 0.5f, 0.5f, 0.25f, 1));
    assert_true(p == 1.25f && buf == 1.5f);
    g = 3.0f;
    assert_ok(FSC_K(dev, sgd, &p, &g, &buf, 1, 0.5f, 0.5f, 0.25f, 0));
    assert_true(buf == 4.0625f && p == -0.78125f);
    /* no momentum: plain step, no buffer needed */
    p = 2.0f; g = 1.0f;
    assert_ok(FSC_K(dev, sgd, &p, &g, NULL, 1, 0.5f, 0.0f, 0.0f, 0));
    assert_true(p == 1.5f);
    assert_err(FSC_K(dev, sgd, &p, &g, NULL, 1, 0.5f, 0.9f, 0.0f, 0), FSC_ERR_INVALID, "buf");
}

static void test_convert(void **state) {
    (void)state;
    enum { N = 37 };
    float x[N], back[N];
    uint16_t h[N], b[N], hb[N];
    fill(x, N, 100.0f);
    x[0] = 65520.0f; x[1] = NAN; x[2] = 1e-7f;
    assert_ok(FSC_K(dev, convert, h, FSC_F16, x, FSC_F32, N));
    assert_ok(FSC_K(dev, convert, b, FSC_BF16, x, FSC_F32, N));
    for (int i = 0; i < N; i++) { /* dtype.c's conversions are tested against hand patterns in test_dtype */
        assert_int_equal(h[i], fsc_f32_to_f16(x[i]));
        assert_int_equal(b[i], fsc_f32_to_bf16(x[i]));
    }
    assert_ok(FSC_K(dev, convert, back, FSC_F32, b, FSC_BF16, N));
    for (int i = 0; i < N; i++) assert_int_equal(fsc_f32_to_bf16(back[i]), b[i]);
    assert_ok(FSC_K(dev, convert, hb, FSC_BF16, h, FSC_F16, N));
    for (int i = 3; i < N; i++) assert_int_equal(hb[i], fsc_f32_to_bf16(fsc_f16_to_f32(h[i])));
    /* a sweep over the whole 32-bit space (every exponent, ties, NaN payloads, both signs) */
    enum { S = 65536 };
    float *sw = falloc(S), *swb = falloc(S);
    uint16_t *sb = malloc(S * sizeof *sb);
    for (uint32_t i = 0; i < S; i++) {
        uint32_t u = i * 65537u + ((i & 3) == 0 ? 0x8000u : 0u); /* some exact ties */
        memcpy(&sw[i], &u, 4);
    }
    assert_ok(FSC_K(dev, convert, sb, FSC_BF16, sw, FSC_F32, S));
    for (uint32_t i = 0; i < S; i++)
        if (sb[i] != fsc_f32_to_bf16(sw[i])) fail_msg("convert bf16 of %a: 0x%04x vs 0x%04x", (double)sw[i], sb[i], fsc_f32_to_bf16(sw[i]));
    assert_ok(FSC_K(dev, convert, swb, FSC_F32, sb, FSC_BF16, S));
    for (uint32_t i = 0; i < S; i++) {
        uint32_t u;
        memcpy(&u, &swb[i], 4);
        assert_int_equal(u, (uint32_t)sb[i] << 16);
    }
    /* in place (device_ops.h: as if through a temporary), widening and narrowing, over many elements (the
     * kernels split the range across threads): the out-of-place results, bit for bit */
    uint16_t *ip = malloc(S * sizeof(float));
    memcpy(ip, sb, S * sizeof *sb);
    assert_ok(FSC_K(dev, convert, ip, FSC_F32, ip, FSC_BF16, S));
    assert_memory_equal(ip, swb, S * sizeof(float));
    assert_ok(FSC_K(dev, convert, ip, FSC_F16, ip, FSC_F32, S));
    assert_ok(FSC_K(dev, convert, ip, FSC_BF16, ip, FSC_F16, S));
    for (uint32_t i = 0; i < S; i++)
        if (ip[i] != fsc_f32_to_bf16(fsc_f16_to_f32(fsc_f32_to_f16(swb[i]))))
            fail_msg("convert in place, element %u: 0x%04x", i, ip[i]);
    free(ip);
    free(sw); free(swb); free(sb);
    int32_t ints[N];
    assert_err(FSC_K(dev, convert, ints, FSC_I32, x, FSC_F32, N), FSC_ERR_INVALID, "i32");
}

/* ---------------------------------------------------------------- determinism */

static void test_determinism(void **state) {
    (void)state;
    enum { B = 2, T = 16, C = 32, NH = 2, V = 40 };
    size_t n = B * T * C;
    float *x = falloc(n), *w = falloc(C), *b = falloc(C), *o1 = falloc(n), *o2 = falloc(n);
    float m1[B * T], r1[B * T], m2[B * T], r2[B * T];
    fill(x, n, 2.0f); fill(w, C, 1.0f); fill(b, C, 1.0f);
    assert_ok(FSC_K(dev, layernorm_forward, o1, m1, r1, x, w, b, B * T, C));
    assert_ok(FSC_K(dev, layernorm_forward, o2, m2, r2, x, w, b, B * T, C));
    assert_bits_equal(o1, o2, n, "layernorm twice");
    float *dx1 = falloc(n), *dx2 = falloc(n), dw1[C] = {0}, dw2[C] = {0}, db1[C] = {0}, db2[C] = {0};
    memset(dx1, 0, n * sizeof *dx1); memset(dx2, 0, n * sizeof *dx2);
    assert_ok(FSC_K(dev, layernorm_backward, dx1, dw1, db1, x, o1, w, m1, r1, B * T, C));
    assert_ok(FSC_K(dev, layernorm_backward, dx2, dw2, db2, x, o1, w, m1, r1, B * T, C));
    assert_bits_equal(dx1, dx2, n, "layernorm_backward dinp twice");
    assert_bits_equal(dw1, dw2, C, "layernorm_backward dw twice");
    size_t natt = (size_t)B * NH * T * T;
    float *pre = falloc(natt), *a1 = falloc(natt), *a2 = falloc(natt);
    fill(pre, natt, 3.0f);
    assert_ok(FSC_K(dev, softmax_causal_forward, a1, pre, B * NH, T, 0.25f));
    assert_ok(FSC_K(dev, softmax_causal_forward, a2, pre, B * NH, T, 0.25f));
    assert_bits_equal(a1, a2, natt, "softmax twice");
    float *lg = falloc((size_t)B * T * V), l1[B * T], l2[B * T];
    int32_t tg[B * T];
    fill(lg, (size_t)B * T * V, 5.0f);
    for (int i = 0; i < B * T; i++) tg[i] = (i * 13) % V;
    assert_ok(FSC_K(dev, xent_forward, l1, lg, tg, B * T, V, V));
    assert_ok(FSC_K(dev, xent_forward, l2, lg, tg, B * T, V, V));
    assert_bits_equal(l1, l2, B * T, "xent twice");
    /* gemm twice with a size that OpenBLAS splits over threads */
    enum { G = 192 };
    float *A = falloc(G * G), *Bm = falloc(G * G), *C1 = falloc(G * G), *C2 = falloc(G * G);
    fill(A, G * G, 1.0f); fill(Bm, G * G, 1.0f);
    assert_ok(FSC_K(dev, gemm, 0, 1, G, G, G, 1.0f, A, G, 0, Bm, G, 0, 0.0f, C1, G, 0, 1));
    assert_ok(FSC_K(dev, gemm, 0, 1, G, G, G, 1.0f, A, G, 0, Bm, G, 0, 0.0f, C2, G, 0, 1));
    assert_bits_equal(C1, C2, G * G, "gemm twice");
    free(A); free(Bm); free(C1); free(C2); free(lg); free(pre); free(a1); free(a2);
    free(x); free(w); free(b); free(o1); free(o2); free(dx1); free(dx2);
}

/* The device's worker threads (cpu_pool.c) split every kernel big enough: a device with 3 threads must
 * give the bits of a device with 1, at sizes that split (odd sizes, widths not a multiple of 8 or 16).
 * Each kernel runs on fresh copies of the same inputs on both devices. Batched gemm of small entries
 * (the attention's products, run on the pool's threads at once) is compared too; a large gemm is not
 * (OpenBLAS's own bits depend on its thread count, cpu_kernels.c). */
typedef struct { fsc_device *d; float *out[4]; } thr_run;

static void thr_kernels(thr_run *r, const float *x, const float *y, const float *z, const int32_t *tok) {
    enum { NE = 100003, NR = 301, W = 259, BT = 201, CE = 300, BH = 7, T = 131, NB = 300001 };
    fsc_device *d = r->d;
    float *o = r->out[0], *p = r->out[1], *q = r->out[2], *s = r->out[3];
    size_t off = 0;
    /* elementwise */
    memcpy(o, x, NE * sizeof *o);
    assert_ok(FSC_K(d, scale, o, 1.25f, NE));
    assert_ok(FSC_K(d, axpy, o, -0.5f, y, NE));
    assert_ok(FSC_K(d, add, o + NE, o, z, NE));
    assert_ok(FSC_K(d, gelu_forward, o + 2 * NE, x, NE));
    assert_ok(FSC_K(d, gelu_backward, o + 3 * NE, x, y, NE));
    off = 4 * NE;
    /* rows and columns */
    memcpy(o + off, x, (size_t)NR * W * sizeof *o);
    assert_ok(FSC_K(d, bias_add, o + off, y, NR, W));
    off += (size_t)NR * W;
    memcpy(o + off, z, 1000 * sizeof *o);
    assert_ok(FSC_K(d, bias_grad, o + off, x, NR, 1000));
    off += 1000;
    assert_ok(FSC_K(d, encoder_forward, o + off, tok, x, y, 3, 67, CE));
    off += (size_t)BT * CE;
    memcpy(p, z, (size_t)256 * CE * sizeof *p);
    memcpy(p + 256 * CE, y, (size_t)67 * CE * sizeof *p);
    assert_ok(FSC_K(d, encoder_backward, p, p + 256 * CE, x, tok, 3, 67, CE));
    assert_ok(FSC_K(d, layernorm_forward, o + off, q, q + NR, x, y, z, NR, W));
    off += (size_t)NR * W;
    memcpy(o + off, z, (size_t)NR * W * sizeof *o);
    memcpy(s, y, 2 * W * sizeof *s);
    assert_ok(FSC_K(d, layernorm_backward, o + off, s, s + W, y, x, z, q, q + NR, NR, W));
    off += (size_t)NR * W;
    assert_ok(FSC_K(d, softmax_causal_forward, o + off, x, BH, T, 0.3f));
    assert_ok(FSC_K(d, softmax_causal_backward, o + off + BH * T * T, y, o + off, BH, T, 0.3f));
    off += 2 * (size_t)BH * T * T;
    int32_t tg[NR];
    for (int i = 0; i < NR; i++) tg[i] = (i * 37) % W;
    assert_ok(FSC_K(d, xent_forward, o + off, x, tg, NR, W, W + 4));
    memcpy(o + off + NR, z, (size_t)NR * (W + 4) * sizeof *o);
    assert_ok(FSC_K(d, xent_backward, o + off + NR, x, tg, NR, W, W + 4, 0.01f));
    off += NR + (size_t)NR * (W + 4);
    /* reductions, optimizers, conversions */
    float mx;
    int nf;
    uint64_t acc[2] = {3, 0};
    assert_ok(FSC_K(d, absmax, &mx, &nf, x, NB));
    assert_ok(FSC_K(d, sumsq_fixed, acc, x, NB, 40));
    o[off++] = mx;
    memcpy(o + off, acc, sizeof acc);
    off += 4;
    memcpy(o + off, x, 3 * (size_t)NE * sizeof *o);
    for (size_t i = 0; i < NE; i++) o[off + 2 * NE + i] = fabsf(o[off + 2 * NE + i]);
    assert_ok(FSC_K(d, adamw, o + off, y, o + off + NE, o + off + 2 * NE, NE, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f,
                    0.25f));
    off += 3 * (size_t)NE;
    memcpy(o + off, x, 2 * (size_t)NE * sizeof *o);
    assert_ok(FSC_K(d, sgd, o + off, y, o + off + NE, NE, 1e-2f, 0.9f, 0.01f, 0));
    off += 2 * (size_t)NE;
    assert_ok(FSC_K(d, convert, s, FSC_BF16, x, FSC_F32, NE));
    assert_ok(FSC_K(d, convert, o + off, FSC_F32, s, FSC_BF16, NE));
    off += NE;
    /* a batch of small products: row blocks of attention scores, 9 entries of 32 x 64 x 64 */
    assert_ok(FSC_K(d, gemm, 0, 1, 32, 64, 64, 1.0f, x, 96, 32 * 96, y, 80, 64 * 80, 0.0f, o + off, 70, 32 * 70, 9));
    assert_ok(FSC_K(d, gemm, 1, 0, 32, 64, 100, 1.0f, x, 40, 100 * 40, y, 64, 100 * 64, 1.0f, q, 64, 32 * 64, 9));
    /* large fills and copies */
    assert_ok(FSC_K(d, memset, s, 0x3c, 3u << 20));
    assert_ok(FSC_K(d, copy, s + (1u << 20), x, 100003 * sizeof *x));
}

static void test_threads_equal_one_thread(void **state) {
    (void)state;
    enum { NX = 1 << 21 };
    float *x = falloc(NX), *y = falloc(NX), *z = falloc(NX);
    fill(x, NX, 2.0f); fill(y, NX, 1.0f); fill(z, NX, 1.0f);
    for (size_t i = 0; i < 2 * 301; i++) z[2 * 301 * 259 + i] = 0.5f + 0.001f * (float)i; /* unused */
    int32_t tok[201];
    for (int i = 0; i < 201; i++) tok[i] = (i * 29) % 256;
    thr_run r[2];
    int threads[2] = { 1, 3 };
    for (int k = 0; k < 2; k++) {
        assert_ok(fsc_device_create("cpu", &(fsc_device_opts){ .threads = threads[k] }, &r[k].d));
        for (int j = 0; j < 4; j++) {
            r[k].out[j] = falloc(NX);
            memset(r[k].out[j], 0, NX * sizeof(float));
        }
    }
    /* layer norm statistics (q) must be positive for rstd: computed by forward in thr_kernels */
    thr_kernels(&r[0], x, y, z, tok);
    thr_kernels(&r[1], x, y, z, tok);
    const char *what[4] = { "outputs", "embedding gradients", "statistics and batched gemm", "scratch" };
    for (int j = 0; j < 4; j++) assert_bits_equal(r[0].out[j], r[1].out[j], NX, what[j]);
    for (int k = 0; k < 2; k++) {
        for (int j = 0; j < 4; j++) free(r[k].out[j]);
        fsc_device_free(r[k].d);
    }
    free(x); free(y); free(z);
}

/* Simulated ranks call gemm from several threads at once: each must get the bits of a call made alone. */
enum { CG = 160 };
typedef struct { const float *A, *B, *ref; int mismatches; } conc_arg;

static void *conc_worker(void *p) {
    conc_arg *a = p;
    float *C = malloc(CG * CG * sizeof *C);
    for (int it = 0; it < 8 && C; it++) {
        if (FSC_K(dev, gemm, 0, 0, CG, CG, CG, 1.0f, a->A, CG, 0, a->B, CG, 0, 0.0f, C, CG, 0, 1) != FSC_OK ||
            memcmp(C, a->ref, CG * CG * sizeof *C) != 0)
            a->mismatches++;
    }
    free(C);
    return NULL;
}

static void test_gemm_concurrent_callers(void **state) {
    (void)state;
    float *A = falloc(CG * CG), *B = falloc(CG * CG), *ref = falloc(CG * CG);
    fill(A, CG * CG, 1.0f);
    fill(B, CG * CG, 1.0f);
    assert_ok(FSC_K(dev, gemm, 0, 0, CG, CG, CG, 1.0f, A, CG, 0, B, CG, 0, 0.0f, ref, CG, 0, 1));
    conc_arg args[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (conc_arg){A, B, ref, 0};
        assert_int_equal(pthread_create(&th[i], NULL, conc_worker, &args[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(args[i].mismatches, 0);
    }
    free(A); free(B); free(ref);
}

/* OpenBLAS's sgemm as this program sees it: the library's calls come here (the executable's definition comes
 * first), counted, then go on to OpenBLAS's. While blas_slow is set each call lasts 10 ms longer, so that callers
 * that may run at once do. */
static atomic_int blas_now, blas_most, blas_slow;
void cblas_sgemm(OPENBLAS_CONST enum CBLAS_ORDER o, OPENBLAS_CONST enum CBLAS_TRANSPOSE ta,
                 OPENBLAS_CONST enum CBLAS_TRANSPOSE tb, OPENBLAS_CONST blasint M, OPENBLAS_CONST blasint N,
                 OPENBLAS_CONST blasint K, OPENBLAS_CONST float alpha, OPENBLAS_CONST float *A, OPENBLAS_CONST blasint lda,
                 OPENBLAS_CONST float *B, OPENBLAS_CONST blasint ldb, OPENBLAS_CONST float beta, float *C,
                 OPENBLAS_CONST blasint ldc) {
    typedef void (*sgemm_fn)(enum CBLAS_ORDER, enum CBLAS_TRANSPOSE, enum CBLAS_TRANSPOSE, blasint, blasint, blasint,
                             float, const float *, blasint, const float *, blasint, float, float *, blasint);
    static sgemm_fn real;
    if (!real) *(void **)&real = dlsym(RTLD_NEXT, "cblas_sgemm");
    const int now = atomic_fetch_add(&blas_now, 1) + 1;
    for (int most = atomic_load(&blas_most); now > most && !atomic_compare_exchange_weak(&blas_most, &most, now);) {
    }
    if (atomic_load(&blas_slow)) nanosleep(&(struct timespec){ 0, 10000000L }, NULL);
    real(o, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    atomic_fetch_sub(&blas_now, 1);
}

enum { CALLERS = 96 };
static pthread_barrier_t callers_met;

static void *one_product(void *arg) {
    float *abc = arg; /* A, B and C of 4 x 4 each */
    pthread_barrier_wait(&callers_met);
    return FSC_K(dev, gemm, 0, 0, 4, 4, 4, 1.0f, abc, 4, 0, abc + 16, 4, 0, 0.0f, abc + 32, 4, 0, 1) == FSC_OK ? arg : NULL;
}

/* 96 threads (simulated ranks) multiplying at once: OpenBLAS's buffer table for threads inside it at once is
 * finite (513 ranks overflowed it: a warning on stderr, then an abort), so at most 32 are let in at a time. Oracle:
 * the calls that reach OpenBLAS, each held 10 ms, never overlap more than 32 deep (they did 96 deep), and every
 * product is right (4 x 4 of ones: 4 everywhere). */
static void test_gemm_callers_gated(void **state) {
    (void)state;
    float *abc = falloc((size_t)CALLERS * 48);
    for (size_t i = 0; i < (size_t)CALLERS * 48; i++) abc[i] = 1.0f;
    pthread_t th[CALLERS];
    assert_int_equal(pthread_barrier_init(&callers_met, NULL, CALLERS), 0);
    atomic_store(&blas_most, 0);
    atomic_store(&blas_slow, 1);
    for (int i = 0; i < CALLERS; i++) assert_int_equal(pthread_create(&th[i], NULL, one_product, abc + 48 * i), 0);
    int ok = 0;
    for (int i = 0; i < CALLERS; i++) {
        void *r = NULL;
        pthread_join(th[i], &r);
        ok += r != NULL;
    }
    atomic_store(&blas_slow, 0);
    pthread_barrier_destroy(&callers_met);
    assert_int_equal(ok, CALLERS);
    for (int i = 0; i < CALLERS; i++)
        for (int k = 0; k < 16; k++) assert_true(abc[48 * i + 32 + k] == 4.0f);
    free(abc);
    const int most = atomic_load(&blas_most);
    print_message("at most %d callers inside OpenBLAS at once\n", most);
    if (most > 32 || most < 2) fail_msg("%d callers inside OpenBLAS at once (at most 32, and some overlap)", most);
}

/* FSDP updates and casts shards: an elementwise kernel on [a, b) must equal the whole call's [a, b). */
static void test_shard_equals_whole(void **state) {
    (void)state;
    enum { N = 1000, A = 333, L = 401 };
    float *p = falloc(N), *g = falloc(N), *m = falloc(N), *v = falloc(N);
    float *ps = falloc(N), *ms = falloc(N), *vs = falloc(N), *y = falloc(N), *ys = falloc(N);
    fill(p, N, 1.0f); fill(g, N, 1.0f); fill(m, N, 0.1f);
    for (int i = 0; i < N; i++) v[i] = fabsf(g[i]) * 0.01f;
    memcpy(ps, p, N * 4); memcpy(ms, m, N * 4); memcpy(vs, v, N * 4);
    assert_ok(FSC_K(dev, adamw, p, g, m, v, N, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.19f, 0.0975f));
    assert_ok(FSC_K(dev, adamw, ps + A, g + A, ms + A, vs + A, L, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.19f, 0.0975f));
    assert_bits_equal(ps + A, p + A, L, "adamw shard");
    assert_bits_equal(vs + A, v + A, L, "adamw shard v");
    assert_ok(FSC_K(dev, gelu_forward, y, g, N));
    assert_ok(FSC_K(dev, gelu_forward, ys + A, g + A, L));
    assert_bits_equal(ys + A, y + A, L, "gelu shard");
    assert_ok(FSC_K(dev, gelu_backward, y, g, p, N));
    assert_ok(FSC_K(dev, gelu_backward, ys + A, g + A, p + A, L));
    assert_bits_equal(ys + A, y + A, L, "gelu_backward shard");
    free(p); free(g); free(m); free(v); free(ps); free(ms); free(vs); free(y); free(ys);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm_transposes),
        cmocka_unit_test(test_gemm_edges),
        cmocka_unit_test(test_elementwise),
        cmocka_unit_test(test_gelu),
        cmocka_unit_test(test_bias),
        cmocka_unit_test(test_encoder),
        cmocka_unit_test(test_layernorm),
        cmocka_unit_test(test_qkv_heads),
        cmocka_unit_test(test_softmax_causal),
        cmocka_unit_test(test_xent),
        cmocka_unit_test(test_sum_absmax),
        cmocka_unit_test(test_sumsq_fixed),
        cmocka_unit_test(test_adamw),
        cmocka_unit_test(test_sgd),
        cmocka_unit_test(test_convert),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_shard_equals_whole),
        cmocka_unit_test(test_gemm_concurrent_callers),
        cmocka_unit_test(test_gemm_callers_gated),
        cmocka_unit_test(test_threads_equal_one_thread),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
