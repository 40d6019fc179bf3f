/* Tests of fsc/ops.h, the device operations for a layer of one's own, on the cpu device. Oracles: each operation
 * against the same computation on the host from the same inputs (copy, zero, fill, repeat_rows, add, scale and mul
 * bit for bit; products, sums and activations to a tolerance set by float rounding: the device's order of a sum and
 * its libm differ from the host's); matmul with every transpose and with beta 0 over NaN (not read), 1
 * (accumulate) and 0.5; nothing crosses between host and device (fsc_device_copied_bytes) but fill's one value;
 * examples/train_mlp.c's layer composed of them against its derivatives on the host, with no copy at all; each
 * refusal (NULL, dtype, host memory, another device, a strided view, shapes that differ or do not chain, dimensions
 * whose product overflows) is
 * FSC_ERR_INVALID naming the problem, and leaves the output as it was. */
#include <math.h>
#include "testutil.h"
#include "fsc/ops.h"

static fsc_device *dev;
enum { R = 5, C = 7, K = 3 };

/* n device floats, uploaded from host (or left undefined when host is NULL) as a tensor of shape (d0[, d1]) */
static fsc_tensor dev_tensor(const float *host, int ndim, int64_t d0, int64_t d1) {
    const int64_t shape[2] = { d0, d1 };
    size_t n = (size_t)(ndim == 1 ? d0 : d0 * d1);
    void *p = NULL;
    assert_ok(fsc_device_alloc(dev, FSC_TAG_WORKSPACE, n * sizeof(float), &p));
    if (host) assert_ok(fsc_device_upload(dev, p, host, n * sizeof(float)));
    return fsc_tensor_make(p, FSC_F32, ndim, shape, dev);
}

static void down(float *host, const fsc_tensor *t) {
    assert_ok(fsc_device_download(dev, host, t->data, fsc_tensor_nbytes(t)));
}

static void fill_host(float *x, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        x[i] = (float)((int)(seed >> 16 & 0x7fff) - 16384) / 8192.0f; /* in [-2, 2) */
    }
}

static void near(const float *got, const double *want, size_t n, double tol, const char *what) {
    for (size_t i = 0; i < n; i++)
        if (!(fabs(got[i] - want[i]) <= tol * (1 + fabs(want[i]))))
            fail_msg("%s[%zu] = %.9g, host %.9g", what, i, got[i], want[i]);
}

static void test_matmul(void **state) {
    (void)state;
    float a[R * K], b[K * C], c0[R * C], got[R * C];
    fill_host(a, R * K, 1), fill_host(b, K * C, 2), fill_host(c0, R * C, 3);
    const float betas[3] = { 0.0f, 1.0f, 0.5f };
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int bi = 0; bi < 3; bi++) {
                /* a stored as (R, K) or (K, R); b as (K, C) or (C, K), holding the same op(a), op(b) */
                float as[R * K], bs[K * C], cs[R * C];
                for (int i = 0; i < R; i++)
                    for (int k = 0; k < K; k++) as[ta ? k * R + i : i * K + k] = a[i * K + k];
                for (int k = 0; k < K; k++)
                    for (int j = 0; j < C; j++) bs[tb ? j * K + k : k * C + j] = b[k * C + j];
                for (int i = 0; i < R * C; i++) cs[i] = betas[bi] == 0.0f ? NAN : c0[i];
                fsc_tensor ta_ = dev_tensor(as, 2, ta ? K : R, ta ? R : K);
                fsc_tensor tb_ = dev_tensor(bs, 2, tb ? C : K, tb ? K : C);
                fsc_tensor tc = dev_tensor(cs, 2, R, C);
                assert_ok(fsc_op_matmul(&tc, &ta_, ta, &tb_, tb, 1.5f, betas[bi]));
                down(got, &tc);
                double want[R * C];
                for (int i = 0; i < R; i++)
                    for (int j = 0; j < C; j++) {
                        double s = 0;
                        for (int k = 0; k < K; k++) s += (double)a[i * K + k] * b[k * C + j];
                        want[i * C + j] = 1.5 * s + (betas[bi] == 0.0f ? 0.0 : betas[bi] * (double)c0[i * C + j]);
                    }
                near(got, want, R * C, 1e-5, "matmul");
                fsc_device_release(dev, ta_.data), fsc_device_release(dev, tb_.data), fsc_device_release(dev, tc.data);
            }
}

static void test_elementwise(void **state) {
    (void)state;
    enum { N = R * C };
    float x[N], y[N], v[C], got[N], want[N];
    double dw[N];
    fill_host(x, N, 4), fill_host(y, N, 5), fill_host(v, C, 6);
    fsc_tensor tx = dev_tensor(x, 2, R, C), ty = dev_tensor(y, 2, R, C), tv = dev_tensor(v, 1, C, 0);
    fsc_tensor to = dev_tensor(NULL, 2, R, C), t2 = dev_tensor(NULL, 2, R, C);
    fsc_device_reset_copied(dev);

    assert_ok(fsc_op_copy(&to, &tx));
    down(got, &to);
    assert_bits_equal(got, x, N, "copy");
    assert_ok(fsc_op_zero(&to));
    down(got, &to);
    for (int i = 0; i < N; i++) assert_true(got[i] == 0.0f && !signbit(got[i]));
    assert_ok(fsc_op_add(&to, &tx, &ty));
    down(got, &to);
    for (int i = 0; i < N; i++) want[i] = x[i] + y[i];
    assert_bits_equal(got, want, N, "add");
    assert_ok(fsc_op_scale(&to, -0.75f));
    down(got, &to);
    for (int i = 0; i < N; i++) want[i] *= -0.75f;
    assert_bits_equal(got, want, N, "scale");
    assert_ok(fsc_op_mul(&to, &tx, &ty));
    down(got, &to);
    for (int i = 0; i < N; i++) want[i] = x[i] * y[i];
    assert_bits_equal(got, want, N, "mul");
    assert_ok(fsc_op_axpy(&to, 0.5f, &tx)); /* to = x y + 0.5 x */
    down(got, &to);
    for (int i = 0; i < N; i++) dw[i] = (double)x[i] * y[i] + 0.5 * x[i];
    near(got, dw, N, 1e-6, "axpy");
    /* mul's backward: da += dout b, db += dout a; here dout = x, a = x, b = y, da starts at to */
    assert_ok(fsc_op_copy(&t2, &ty));
    assert_ok(fsc_op_mul_backward(&to, &t2, &tx, &ty, &tx));
    down(got, &to);
    for (int i = 0; i < N; i++) dw[i] += (double)x[i] * y[i];
    near(got, dw, N, 1e-6, "mul_backward da");
    down(got, &t2);
    for (int i = 0; i < N; i++) dw[i] = (double)y[i] + (double)x[i] * x[i];
    near(got, dw, N, 1e-6, "mul_backward db");
    assert_ok(fsc_op_mul_backward(NULL, NULL, &tx, &ty, &tx)); /* nothing asked */

    /* rows: add_rows, sum_rows, repeat_rows */
    assert_ok(fsc_op_copy(&to, &tx));
    assert_ok(fsc_op_add_rows(&to, &tv));
    down(got, &to);
    for (int i = 0; i < N; i++) want[i] = x[i] + v[i % C];
    assert_bits_equal(got, want, N, "add_rows");
    float vs[C];
    double vw[C];
    assert_ok(fsc_op_sum_rows(&tv, &tx)); /* v += sum of x's rows */
    down(vs, &tv);
    for (int j = 0; j < C; j++) {
        vw[j] = v[j];
        for (int i = 0; i < R; i++) vw[j] += x[i * C + j];
    }
    near(vs, vw, C, 1e-6, "sum_rows");
    assert_ok(fsc_op_repeat_rows(&to, &tv));
    down(got, &to);
    for (int i = 0; i < N; i++) want[i] = vs[i % C];
    assert_bits_equal(got, want, N, "repeat_rows");

    /* activations and their backward (dout = y) */
    assert_ok(fsc_op_silu(&to, &tx));
    down(got, &to);
    for (int i = 0; i < N; i++) dw[i] = x[i] / (1.0 + exp(-(double)x[i]));
    near(got, dw, N, 1e-6, "silu");
    assert_ok(fsc_op_silu_backward(&to, &tx, &ty));
    down(got, &to);
    for (int i = 0; i < N; i++) {
        double s = 1.0 / (1.0 + exp(-(double)x[i]));
        dw[i] = s * (1.0 + x[i] * (1.0 - s)) * y[i];
    }
    near(got, dw, N, 1e-5, "silu_backward");
    const double k = sqrt(2.0 / M_PI);
    assert_ok(fsc_op_gelu(&to, &tx));
    down(got, &to);
    for (int i = 0; i < N; i++) dw[i] = 0.5 * x[i] * (1.0 + tanh(k * (x[i] + 0.044715 * pow(x[i], 3))));
    near(got, dw, N, 1e-5, "gelu");
    assert_ok(fsc_op_gelu_backward(&to, &tx, &ty));
    down(got, &to);
    for (int i = 0; i < N; i++) {
        double u = k * (x[i] + 0.044715 * pow(x[i], 3)), t = tanh(u);
        dw[i] = (0.5 * (1.0 + t) + 0.5 * x[i] * (1.0 - t * t) * k * (1.0 + 3 * 0.044715 * x[i] * x[i])) * y[i];
    }
    near(got, dw, N, 1e-5, "gelu_backward");
    double sum = 0, hs = 0;
    assert_ok(fsc_op_sum(&tx, &sum));
    for (int i = 0; i < N; i++) hs += x[i];
    assert_true(sum == hs); /* both in double, ascending */
    /* no host round trip so far (downloads above are the test's own: count them out) */
    size_t up = fsc_device_copied_bytes(dev, 1);
    assert_int_equal(up, 0);
    assert_ok(fsc_op_fill(&to, 2.5f));
    assert_int_equal(fsc_device_copied_bytes(dev, 1), sizeof(float));
    down(got, &to);
    for (int i = 0; i < N; i++) assert_true(got[i] == 2.5f);
    fsc_tensor one = dev_tensor(NULL, 1, 1, 0), empty = dev_tensor(NULL, 1, 0, 0);
    assert_ok(fsc_op_fill(&one, -1.0f));
    down(got, &one);
    assert_true(got[0] == -1.0f);
    assert_ok(fsc_op_fill(&empty, 1.0f)); /* zero elements: nothing */
    assert_ok(fsc_op_repeat_rows(&to, &tv));
    fsc_device_release(dev, one.data);
    fsc_device_release(dev, tx.data), fsc_device_release(dev, ty.data), fsc_device_release(dev, tv.data);
    fsc_device_release(dev, to.data), fsc_device_release(dev, t2.data);
}

/* examples/train_mlp.c's layer out = scale * silu(x) (per feature), written with these operations as the example
 * writes it, against its derivatives on the host: with dout = r, dscale = sum_n r silu(x) and dx = r scale
 * silu'(x). */
static void test_layer_composition(void **state) {
    (void)state;
    enum { N = R * C };
    float x[N], r[N], sc[C], got[N], gs[C];
    fill_host(x, N, 8), fill_host(r, N, 9), fill_host(sc, C, 10);
    fsc_tensor tx = dev_tensor(x, 2, R, C), tr = dev_tensor(r, 2, R, C), ts = dev_tensor(sc, 1, C, 0);
    fsc_tensor t = dev_tensor(NULL, 2, R, C), w = dev_tensor(NULL, 2, R, C), o = dev_tensor(NULL, 2, R, C);
    fsc_tensor di = dev_tensor(NULL, 2, R, C), g = dev_tensor(NULL, 1, C, 0);
    fsc_device_reset_copied(dev);
    assert_ok(fsc_op_zero(&g));
    assert_ok(fsc_op_silu(&t, &tx)); /* forward */
    assert_ok(fsc_op_repeat_rows(&w, &ts));
    assert_ok(fsc_op_mul(&o, &t, &w));
    assert_ok(fsc_op_mul(&w, &tr, &t)); /* backward */
    assert_ok(fsc_op_sum_rows(&g, &w));
    assert_ok(fsc_op_repeat_rows(&w, &ts));
    assert_ok(fsc_op_mul(&w, &w, &tr));
    assert_ok(fsc_op_silu_backward(&di, &tx, &w));
    assert_int_equal(fsc_device_copied_bytes(dev, 0) + fsc_device_copied_bytes(dev, 1), 0); /* all on the device */
    double want[N], wg[C] = { 0 };
    down(got, &o);
    for (int i = 0; i < N; i++) want[i] = sc[i % C] * (x[i] / (1.0 + exp(-(double)x[i])));
    near(got, want, N, 1e-6, "out");
    down(got, &di);
    for (int i = 0; i < N; i++) {
        double sg = 1.0 / (1.0 + exp(-(double)x[i]));
        want[i] = (double)r[i] * sc[i % C] * sg * (1.0 + x[i] * (1.0 - sg));
        wg[i % C] += (double)r[i] * x[i] * sg;
    }
    near(got, want, N, 1e-5, "dx");
    down(gs, &g);
    near(gs, wg, C, 1e-5, "dscale");
    fsc_tensor all[] = { tx, tr, ts, t, w, o, di, g };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) fsc_device_release(dev, all[i].data);
}

static void test_refusals(void **state) {
    (void)state;
    float x[R * C];
    fill_host(x, R * C, 7);
    fsc_tensor a = dev_tensor(x, 2, R, C), b = dev_tensor(x, 2, C, R), v = dev_tensor(x, 1, R, 0);
    fsc_tensor out = dev_tensor(x, 2, R, C);
    assert_err(fsc_op_add(NULL, &a, &a), FSC_ERR_INVALID, "out is NULL");
    assert_err(fsc_op_add(&out, &a, NULL), FSC_ERR_INVALID, "b is NULL");
    assert_err(fsc_op_add(&out, &a, &b), FSC_ERR_INVALID, "a [5, 7] and b [7, 5] differ in shape");
    assert_err(fsc_op_copy(&out, &b), FSC_ERR_INVALID, "differ in shape");
    assert_err(fsc_op_mul_backward(&b, NULL, &a, &a, &a), FSC_ERR_INVALID, "da [7, 5] and a [5, 7] differ");
    assert_err(fsc_op_silu_backward(&out, &a, &b), FSC_ERR_INVALID, "differ in shape");
    assert_err(fsc_op_matmul(&out, &a, 0, &b, 0, 1, 0), FSC_ERR_INVALID, "shapes do not chain");
    assert_err(fsc_op_matmul(&out, &a, 0, &v, 0, 1, 0), FSC_ERR_INVALID, "must be 2-D");
    /* c over a or b: refused (the result was silently wrong) */
    fsc_tensor sq = dev_tensor(x, 2, R, R);
    assert_err(fsc_op_matmul(&sq, &sq, 0, &sq, 0, 1, 0), FSC_ERR_INVALID, "c overlaps a");
    assert_err(fsc_op_add_rows(&out, &v), FSC_ERR_INVALID, "are not (N, C) and (C)");
    assert_err(fsc_op_sum_rows(&v, &out), FSC_ERR_INVALID, "are not (N, C) and (C)");
    assert_err(fsc_op_sum(&a, NULL), FSC_ERR_INVALID, "sum is NULL");
    fsc_tensor bf = a, host = a, t;
    bf.dtype = FSC_BF16;
    host.dev = NULL;
    assert_err(fsc_op_scale(&bf, 2), FSC_ERR_INVALID, "x is bf16, not f32");
    assert_err(fsc_op_scale(&host, 2), FSC_ERR_INVALID, "x is not on a device");
    assert_ok(fsc_tensor_transpose(&a, 0, 1, &t));
    assert_err(fsc_op_zero(&t), FSC_ERR_INVALID, "x is not contiguous");
    /* dimensions whose product overflows (2^80 elements: wrapped to 0, "nothing to do"); made by hand, as
     * fsc_tensor_make would multiply them */
    fsc_tensor huge = { .data = a.data, .dtype = FSC_F32, .dev = dev, .ndim = 2 };
    huge.shape[0] = huge.shape[1] = huge.stride[0] = (int64_t)1 << 40, huge.stride[1] = 1;
    assert_err(fsc_op_zero(&huge), FSC_ERR_INVALID, "x has more elements than memory can hold");
    assert_err(fsc_op_add(&huge, &huge, &huge), FSC_ERR_INVALID, "more elements than memory can hold");
    huge.ndim = 3, huge.shape[0] = 0, huge.shape[2] = (int64_t)1 << 40, huge.stride[2] = 1; /* (0, 2^40, 2^40) */
    assert_err(fsc_op_fill(&huge, 1), FSC_ERR_INVALID, "more elements than memory can hold");
    fsc_device *other = NULL;
    assert_ok(fsc_device_create("cpu", NULL, &other));
    fsc_tensor elsewhere = a;
    elsewhere.dev = other;
    assert_err(fsc_op_axpy(&out, 1, &elsewhere), FSC_ERR_INVALID, "x is on another device");
    fsc_device_free(other);
    float got[R * C];
    down(got, &out); /* none of the refused calls wrote */
    assert_bits_equal(got, x, R * C, "out after refusals");
    fsc_device_release(dev, a.data), fsc_device_release(dev, b.data), fsc_device_release(dev, v.data);
    fsc_device_release(dev, out.data);
}

static int setup(void **state) {
    (void)state;
    return fsc_device_create("cpu", NULL, &dev) == FSC_OK ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    fsc_device_free(dev);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_elementwise),
        cmocka_unit_test(test_layer_composition),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
