/* Tests of the modules (lib/nn): every forward against a double-precision reference written here, every
 * backward against central finite differences of that reference.
 *
 * Oracle: for a module y = f(x, params) and a random upstream gradient dy, the gradient of the scalar
 * sum(dy * f) with respect to every input element, by central differences in double (step 1e-4, so the
 * truncation error is ~1e-8 and the reference itself has no float rounding), must match the module's
 * float32 backward to |got - fd| <= tol * max|fd| + 1e-6 per tensor, tol stated per test (1e-5 for single
 * kernels, 2e-5 for compositions; the float32 kernels measure ~1e-7). Forwards match the reference to
 * 1e-5 relative to max|y|. */
#include "nntest.h"

/* ---- references ---------------------------------------------------------------------------------- */
typedef struct { size_t N; int C, OC, w_out_in; } lin_ctx;
static void ref_linear(const void *vc, double *const *in, double *out) { /* in: x, w, b */
    const lin_ctx *c = vc;
    for (size_t n = 0; n < c->N; n++)
        for (int o = 0; o < c->OC; o++) {
            double s = in[2][o];
            for (int i = 0; i < c->C; i++)
                s += in[0][n * c->C + i] * (c->w_out_in ? in[1][(size_t)o * c->C + i] : in[1][(size_t)i * c->OC + o]);
            out[n * c->OC + o] = s;
        }
}

typedef struct { size_t N; int C; } ln_ctx;
static void ref_layernorm(const void *vc, double *const *in, double *out) { /* in: x, w, b */
    const ln_ctx *c = vc;
    for (size_t n = 0; n < c->N; n++) {
        const double *x = in[0] + n * c->C;
        double m = 0, v = 0;
        for (int i = 0; i < c->C; i++) m += x[i];
        m /= c->C;
        for (int i = 0; i < c->C; i++) v += (x[i] - m) * (x[i] - m);
        double r = 1.0 / sqrt(v / c->C + 1e-5);
        for (int i = 0; i < c->C; i++) out[n * c->C + i] = (x[i] - m) * r * in[1][i] + in[2][i];
    }
}

static double gelu_d(double x) { return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }
typedef struct { size_t n; } n_ctx;
static void ref_gelu(const void *vc, double *const *in, double *out) {
    const n_ctx *c = vc;
    for (size_t i = 0; i < c->n; i++) out[i] = gelu_d(in[0][i]);
}
static void ref_residual(const void *vc, double *const *in, double *out) {
    const n_ctx *c = vc;
    for (size_t i = 0; i < c->n; i++) out[i] = in[0][i] + in[1][i];
}

typedef struct { int B, T, C; const int32_t *tok; } emb_ctx;
static void ref_embedding(const void *vc, double *const *in, double *out) { /* in: wte, wpe */
    const emb_ctx *c = vc;
    for (int b = 0; b < c->B; b++)
        for (int t = 0; t < c->T; t++)
            for (int i = 0; i < c->C; i++)
                out[((size_t)b * c->T + t) * c->C + i] =
                    in[0][(size_t)c->tok[b * c->T + t] * c->C + i] + in[1][(size_t)t * c->C + i];
}

typedef struct { int B, T, C, NH; } attn_ctx;
static void ref_attention(const void *vc, double *const *in, double *out) { /* in: qkv (B, T, 3C) */
    const attn_ctx *c = vc;
    int C = c->C, HS = C / c->NH, T = c->T;
    double *p = malloc((size_t)T * sizeof(double));
    for (int b = 0; b < c->B; b++)
        for (int h = 0; h < c->NH; h++)
            for (int i = 0; i < T; i++) {
                const double *q = in[0] + ((size_t)b * T + i) * 3 * C + h * HS;
                double mx = -1e300, s = 0;
                for (int j = 0; j <= i; j++) {
                    const double *k = in[0] + ((size_t)b * T + j) * 3 * C + C + h * HS;
                    double d = 0;
                    for (int e = 0; e < HS; e++) d += q[e] * k[e];
                    p[j] = d / sqrt((double)HS);
                    mx = fmax(mx, p[j]);
                }
                for (int j = 0; j <= i; j++) s += (p[j] = exp(p[j] - mx));
                for (int e = 0; e < HS; e++) {
                    double y = 0;
                    for (int j = 0; j <= i; j++) y += p[j] / s * in[0][((size_t)b * T + j) * 3 * C + 2 * C + h * HS + e];
                    out[((size_t)b * T + i) * C + h * HS + e] = y;
                }
            }
    free(p);
}

typedef struct { size_t N; int V, ld; const int32_t *tgt; double scale; } xent_ctx;
static void ref_xent(const void *vc, double *const *in, double *out) { /* in: logits (N, ld) */
    const xent_ctx *c = vc;
    for (size_t n = 0; n < c->N; n++) {
        const double *z = in[0] + n * c->ld;
        double mx = -1e300, s = 0;
        for (int v = 0; v < c->V; v++) mx = fmax(mx, z[v]);
        for (int v = 0; v < c->V; v++) s += exp(z[v] - mx);
        out[n] = c->scale * (log(s) + mx - z[c->tgt[n]]);
    }
}

/* ---- tests --------------------------------------------------------------------------------------- */

/* Linear, both weight layouts: out = x W + b; dinp overwritten (beta 0, over garbage) or accumulated
 * (beta 1); dW accumulated onto prior contents or overwritten; db accumulated. Tolerance 1e-5 (measured errors ~1e-7). */
static void test_linear(void **state) {
    fsc_device *dev = ((fixture *)*state)->dev;
    for (int layout = 0; layout < 2; layout++) {
        lin_ctx c = { 6, 5, 7, layout };
        size_t nx = c.N * c.C, nw = (size_t)c.C * c.OC, ny = c.N * c.OC;
        double *x, *w, *b, *dy, *pw, *px;
        float *hx = rand_f(nx, 1, &x), *hw = rand_f(nw, 0.5, &w), *hb = rand_f(c.OC, 0.5, &b);
        float *hdy = rand_f(ny, 1, &dy), *hpw = rand_f(nw, 1, &pw), *hpx = rand_f(nx, 1, &px);
        float *dx = dev_from(dev, hx, nx), *dw = dev_from(dev, hw, nw), *db = dev_from(dev, hb, c.OC);
        float *dout = dev_from(dev, NULL, ny), *ddy = dev_from(dev, hdy, ny);
        fsc_linear_rec rec;
        assert_ok(fsc_linear_forward(dev, dout, &rec, dx, dw, db, c.N, c.C, c.OC, layout));
        double *in[3] = { x, w, b };
        float *y = host_of(dev, dout, ny);
        check_forward("linear", ref_linear, &c, in, y, ny);
        for (int acc = 0; acc < 2; acc++) {
            float *gx = dev_from(dev, hpx, nx), *gw = dev_from(dev, hpw, nw), *gb = dev_fill(dev, c.OC, 0.25f);
            assert_ok(fsc_linear_backward(dev, gx, gw, gb, &rec, ddy, dw, acc ? 1.0f : 0.0f, acc ? 0.0f : 1.0f));
            float *hgx = host_of(dev, gx, nx), *hgw = host_of(dev, gw, nw), *hgb = host_of(dev, gb, c.OC);
            float *boff = malloc(c.OC * sizeof(float));
            for (int o = 0; o < c.OC; o++) boff[o] = 0.25f;
            check_grad("linear dinp", ref_linear, &c, in, 0, nx, dy, ny, hgx, acc ? hpx : NULL, 1e-5);
            check_grad("linear dw", ref_linear, &c, in, 1, nw, dy, ny, hgw, acc ? NULL : hpw, 1e-5);
            check_grad("linear db", ref_linear, &c, in, 2, c.OC, dy, ny, hgb, boff, 1e-5);
            free(hgx), free(hgw), free(hgb), free(boff);
            fsc_device_release(dev, gx), fsc_device_release(dev, gw), fsc_device_release(dev, gb);
        }
        /* no bias: out = x W exactly the biased output minus b */
        float *dout2 = dev_from(dev, NULL, ny);
        assert_ok(fsc_linear_forward(dev, dout2, NULL, dx, dw, NULL, c.N, c.C, c.OC, layout));
        float *y2 = host_of(dev, dout2, ny);
        for (size_t i = 0; i < ny; i++) assert_true(fabsf(y2[i] + hb[i % c.OC] - y[i]) < 1e-5f);
        free(y), free(y2), free(hx), free(hw), free(hb), free(hdy), free(hpw), free(hpx);
        free(x), free(w), free(b), free(dy), free(pw), free(px);
        fsc_device_release(dev, dx), fsc_device_release(dev, dw), fsc_device_release(dev, db);
        fsc_device_release(dev, dout), fsc_device_release(dev, ddy), fsc_device_release(dev, dout2);
    }
    assert_err(fsc_linear_forward(dev, NULL, NULL, NULL, NULL, NULL, 4, 0, 3, 0), FSC_ERR_INVALID, "C=0");
}

/* Layer norm: dinp accumulates onto prior contents, dw and db accumulate. Tolerance 1e-5 (measured errors ~1e-7). */
static void test_layernorm(void **state) {
    fsc_device *dev = ((fixture *)*state)->dev;
    ln_ctx c = { 5, 8 };
    size_t nx = c.N * c.C;
    double *x, *w, *b, *dy, *px, *pw;
    float *hx = rand_f(nx, 2, &x), *hw = rand_f(c.C, 1, &w), *hb = rand_f(c.C, 1, &b);
    float *hdy = rand_f(nx, 1, &dy), *hpx = rand_f(nx, 1, &px), *hpw = rand_f(c.C, 1, &pw);
    float *dx = dev_from(dev, hx, nx), *dw = dev_from(dev, hw, c.C), *db = dev_from(dev, hb, c.C);
    float *dout = dev_from(dev, NULL, nx), *mean = dev_from(dev, NULL, c.N), *rstd = dev_from(dev, NULL, c.N);
    float *ddy = dev_from(dev, hdy, nx);
    fsc_layernorm_rec rec;
    assert_ok(fsc_layernorm_forward(dev, dout, &rec, mean, rstd, dx, dw, db, c.N, c.C));
    double *in[3] = { x, w, b };
    float *y = host_of(dev, dout, nx);
    check_forward("layernorm", ref_layernorm, &c, in, y, nx);
    float *gx = dev_from(dev, hpx, nx), *gw = dev_from(dev, hpw, c.C), *gb = dev_from(dev, hpw, c.C);
    assert_ok(fsc_layernorm_backward(dev, gx, gw, gb, &rec, ddy, dw));
    float *hgx = host_of(dev, gx, nx), *hgw = host_of(dev, gw, c.C), *hgb = host_of(dev, gb, c.C);
    check_grad("layernorm dinp", ref_layernorm, &c, in, 0, nx, dy, nx, hgx, hpx, 1e-5);
    check_grad("layernorm dw", ref_layernorm, &c, in, 1, c.C, dy, nx, hgw, hpw, 1e-5);
    check_grad("layernorm db", ref_layernorm, &c, in, 2, c.C, dy, nx, hgb, hpw, 1e-5);
    free(y), free(hgx), free(hgw), free(hgb), free(hx), free(hw), free(hb), free(hdy), free(hpx), free(hpw);
    free(x), free(w), free(b), free(dy), free(px), free(pw);
    float *bufs[] = { dx, dw, db, dout, mean, rstd, ddy, gx, gw, gb };
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) fsc_device_release(dev, bufs[i]);
}

/* GELU (dinp overwritten) and residual (both gradients accumulate). Tolerance 1e-5 (measured errors ~1e-7). */
static void test_gelu_residual(void **state) {
    fsc_device *dev = ((fixture *)*state)->dev;
    n_ctx c = { 40 };
    double *x, *x2, *dy, *p;
    float *hx = rand_f(c.n, 3, &x), *hx2 = rand_f(c.n, 1, &x2), *hdy = rand_f(c.n, 1, &dy), *hp = rand_f(c.n, 1, &p);
    float *dx = dev_from(dev, hx, c.n), *dx2 = dev_from(dev, hx2, c.n), *ddy = dev_from(dev, hdy, c.n);
    float *dout = dev_from(dev, NULL, c.n), *g = dev_from(dev, hp, c.n), *g2 = dev_from(dev, hp, c.n);
    double *in[2] = { x, x2 };
    fsc_gelu_rec rec;
    assert_ok(fsc_gelu_forward(dev, dout, &rec, dx, c.n));
    float *y = host_of(dev, dout, c.n);
    check_forward("gelu", ref_gelu, &c, in, y, c.n);
    assert_ok(fsc_gelu_backward(dev, g, &rec, ddy));
    float *hg = host_of(dev, g, c.n);
    check_grad("gelu dinp", ref_gelu, &c, in, 0, c.n, dy, c.n, hg, NULL, 1e-5);
    free(y), free(hg);
    assert_ok(fsc_residual_forward(dev, dout, dx, dx2, c.n));
    y = host_of(dev, dout, c.n);
    check_forward("residual", ref_residual, &c, in, y, c.n);
    assert_ok(fsc_device_upload(dev, g, hp, c.n * sizeof(float)));
    assert_ok(fsc_residual_backward(dev, g, g2, ddy, c.n));
    float *ha = host_of(dev, g, c.n), *hb = host_of(dev, g2, c.n);
    check_grad("residual da", ref_residual, &c, in, 0, c.n, dy, c.n, ha, hp, 1e-5);
    check_grad("residual db", ref_residual, &c, in, 1, c.n, dy, c.n, hb, hp, 1e-5);
    free(y), free(ha), free(hb), free(hx), free(hx2), free(hdy), free(hp), free(x), free(x2), free(dy), free(p);
    float *bufs[] = { dx, dx2, ddy, dout, g, g2 };
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) fsc_device_release(dev, bufs[i]);
}

/* Embedding with repeated tokens: dwte and dwpe accumulate onto prior contents. Tolerance 1e-5 (measured errors ~1e-7). */
static void test_embedding(void **state) {
    fsc_device *dev = ((fixture *)*state)->dev;
    const int32_t tok[] = { 3, 1, 3, 0, 2, 3, 1, 1 };
    emb_ctx c = { 2, 4, 5, tok };
    int V = 4;
    size_t nwte = (size_t)V * c.C, nwpe = (size_t)c.T * c.C, ny = (size_t)c.B * c.T * c.C;
    double *wte, *wpe, *dy, *p;
    float *hwte = rand_f(nwte, 1, &wte), *hwpe = rand_f(nwpe, 1, &wpe), *hdy = rand_f(ny, 1, &dy);
    float *hp = rand_f(nwte, 1, &p);
    int32_t *dtok;
    assert_ok(fsc_device_alloc(dev, FSC_TAG_ACTS, sizeof tok, (void **)&dtok));
    assert_ok(fsc_device_upload(dev, dtok, tok, sizeof tok));
    float *dwte = dev_from(dev, hwte, nwte), *dwpe = dev_from(dev, hwpe, nwpe), *ddy = dev_from(dev, hdy, ny);
    float *dout = dev_from(dev, NULL, ny), *gte = dev_from(dev, hp, nwte), *gpe = dev_from(dev, hp, nwpe);
    fsc_embedding_rec rec;
    assert_ok(fsc_embedding_forward(dev, dout, &rec, dtok, dwte, dwpe, c.B, c.T, c.C));
    double *in[2] = { wte, wpe };
    float *y = host_of(dev, dout, ny);
    check_forward("embedding", ref_embedding, &c, in, y, ny);
    assert_ok(fsc_embedding_backward(dev, gte, gpe, &rec, ddy));
    float *hgte = host_of(dev, gte, nwte), *hgpe = host_of(dev, gpe, nwpe);
    check_grad("embedding dwte", ref_embedding, &c, in, 0, nwte, dy, ny, hgte, hp, 1e-5);
    check_grad("embedding dwpe", ref_embedding, &c, in, 1, nwpe, dy, ny, hgpe, hp, 1e-5);
    free(y), free(hgte), free(hgpe), free(hwte), free(hwpe), free(hdy), free(hp), free(wte), free(wpe), free(dy), free(p);
    fsc_device_release(dev, dtok);
    float *bufs[] = { dwte, dwpe, ddy, dout, gte, gpe };
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) fsc_device_release(dev, bufs[i]);
}

/* Causal attention: B=2, T=5, C=8, NH=2 against the reference (per head softmax(q k^T/sqrt(HS)) v over
 * j <= i); dqkv against finite differences. Tolerance 2e-5 (a composition of five kernels). */
static void test_attention(void **state) {
    fsc_device *dev = ((fixture *)*state)->dev;
    attn_ctx c = { 2, 5, 8, 2 };
    size_t nin = (size_t)c.B * c.T * 3 * c.C, ny = (size_t)c.B * c.T * c.C;
    double *qkv, *dy;
    float *hqkv = rand_f(nin, 1.5, &qkv), *hdy = rand_f(ny, 1, &dy);
    float *dqkv = dev_from(dev, hqkv, nin), *ddy = dev_from(dev, hdy, ny), *dout = dev_from(dev, NULL, ny);
    float *saved = dev_from(dev, NULL, fsc_attention_saved_floats(c.B, c.T, c.C, c.NH));
    float *work = dev_from(dev, NULL, fsc_attention_work_floats(c.B, c.T, c.C, c.NH));
    float *g = dev_fill(dev, nin, 7.0f); /* overwritten */
    fsc_attention_rec rec = { 0 };
    rec.B = c.B, rec.T = c.T, rec.C = c.C, rec.NH = c.NH;
    assert_err(fsc_attention_forward(dev, dout, &rec, dqkv, work), FSC_ERR_INVALID, "not bound");
    fsc_attention_rec_bind(&rec, saved, c.B, c.T, c.C, c.NH);
    assert_ok(fsc_attention_forward(dev, dout, &rec, dqkv, work));
    double *in[1] = { qkv };
    float *y = host_of(dev, dout, ny);
    check_forward("attention", ref_attention, &c, in, y, ny);
    assert_ok(fsc_attention_backward(dev, g, &rec, ddy, work));
    float *hg = host_of(dev, g, nin);
    check_grad("attention dqkv", ref_attention, &c, in, 0, nin, dy, ny, hg, NULL, 2e-5);
    free(y), free(hg), free(hqkv), free(hdy), free(qkv), free(dy);
    float *bufs[] = { dqkv, ddy, dout, saved, work, g };
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) fsc_device_release(dev, bufs[i]);
    rec.NH = 3; /* 8 % 3 != 0 */
    assert_err(fsc_attention_forward(dev, NULL, &rec, NULL, NULL), FSC_ERR_INVALID, "multiple of NH");
}

/* Cross entropy with a row stride ld > V: losses per row; dlogits = gradient of dscale * sum(losses)
 * (dy = 1 in the oracle). Tolerance 1e-5 (measured errors ~1e-7). */
static void test_xent(void **state) {
    fsc_device *dev = ((fixture *)*state)->dev;
    const int32_t tgt[] = { 0, 6, 2, 2 };
    xent_ctx c = { 4, 7, 9, tgt, 0.375 };
    size_t nl = c.N * c.ld;
    double *z, *ones = malloc(c.N * sizeof(double));
    for (size_t i = 0; i < c.N; i++) ones[i] = 1.0;
    float *hz = rand_f(nl, 3, &z);
    int32_t *dtgt;
    assert_ok(fsc_device_alloc(dev, FSC_TAG_ACTS, sizeof tgt, (void **)&dtgt));
    assert_ok(fsc_device_upload(dev, dtgt, tgt, sizeof tgt));
    float *dz = dev_from(dev, hz, nl), *dl = dev_from(dev, NULL, c.N), *g = dev_fill(dev, nl, 0.0f);
    fsc_xent_rec rec;
    assert_ok(fsc_xent_forward(dev, dl, &rec, dz, dtgt, c.N, c.V, c.ld));
    double *in[1] = { z };
    float *l = host_of(dev, dl, c.N);
    for (size_t i = 0; i < c.N; i++) l[i] *= (float)c.scale; /* the reference includes the scale */
    check_forward("xent", ref_xent, &c, in, l, c.N);
    assert_ok(fsc_xent_backward(dev, g, &rec, (float)c.scale));
    float *hg = host_of(dev, g, nl);
    /* padding columns V..ld-1 are not inputs of the loss: the oracle's gradient there is 0 */
    check_grad("xent dlogits", ref_xent, &c, in, 0, nl, ones, c.N, hg, NULL, 1e-5);
    free(l), free(hg), free(hz), free(z), free(ones);
    fsc_device_release(dev, dtgt), fsc_device_release(dev, dz), fsc_device_release(dev, dl);
    fsc_device_release(dev, g);
    assert_err(fsc_xent_forward(dev, NULL, NULL, NULL, NULL, 1, 8, 4), FSC_ERR_INVALID, "ld=4");
}

/* The GPT-2 block: x (B, T, C) and its 12 parameters against the reference composed from the references
 * above; dres turns from the output gradient into the input gradient, parameter gradients accumulate onto
 * prior contents. B=2, T=3, C=8, NH=2. Tolerance 2e-5 (some twenty kernels; measured ~2e-7). */
#include "fsc/gpt.h"
typedef struct { int B, T, C, NH; size_t np[12]; } block_ctx;
static void ref_block(const void *vc, double *const *in, double *out) { /* in: x, then the 12 parameters */
    const block_ctx *c = vc;
    size_t N = (size_t)c->B * c->T, C = (size_t)c->C;
    double *ln1 = malloc(N * C * sizeof(double)), *qkv = malloc(N * 3 * C * sizeof(double));
    double *atty = malloc(N * C * sizeof(double)), *res2 = malloc(N * C * sizeof(double));
    double *ln2 = malloc(N * C * sizeof(double)), *fch = malloc(N * 4 * C * sizeof(double));
    double *tmp = malloc(N * C * sizeof(double));
    double *const *p = in + 1;
    ln_ctx lc = { N, c->C };
    ref_layernorm(&lc, (double *const[]){ in[0], p[FSC_B_LN1_W], p[FSC_B_LN1_B] }, ln1);
    lin_ctx l1 = { N, c->C, 3 * c->C, 0 };
    ref_linear(&l1, (double *const[]){ ln1, p[FSC_B_ATTN_W], p[FSC_B_ATTN_B] }, qkv);
    attn_ctx ac = { c->B, c->T, c->C, c->NH };
    ref_attention(&ac, (double *const[]){ qkv }, atty);
    lin_ctx l2 = { N, c->C, c->C, 0 };
    ref_linear(&l2, (double *const[]){ atty, p[FSC_B_APROJ_W], p[FSC_B_APROJ_B] }, tmp);
    for (size_t i = 0; i < N * C; i++) res2[i] = in[0][i] + tmp[i];
    ref_layernorm(&lc, (double *const[]){ res2, p[FSC_B_LN2_W], p[FSC_B_LN2_B] }, ln2);
    lin_ctx l3 = { N, c->C, 4 * c->C, 0 };
    ref_linear(&l3, (double *const[]){ ln2, p[FSC_B_FC_W], p[FSC_B_FC_B] }, fch);
    for (size_t i = 0; i < N * 4 * C; i++) fch[i] = gelu_d(fch[i]);
    lin_ctx l4 = { N, 4 * c->C, c->C, 0 };
    ref_linear(&l4, (double *const[]){ fch, p[FSC_B_MPROJ_W], p[FSC_B_MPROJ_B] }, tmp);
    for (size_t i = 0; i < N * C; i++) out[i] = res2[i] + tmp[i];
    free(ln1), free(qkv), free(atty), free(res2), free(ln2), free(fch), free(tmp);
}

static void test_block(void **state) {
    fsc_device *dev = ((fixture *)*state)->dev;
    block_ctx c = { 2, 3, 8, 2, { 0 } };
    size_t C = 8, N = 6, nx = N * C;
    const size_t np[12] = { C, C, C * 3 * C, 3 * C, C * C, C, C, C, C * 4 * C, 4 * C, 4 * C * C, C };
    double *in[13], *dy, *prior[12];
    float *hin[13], *hprior[12], *din[13], *dg[12], *p_dev[12];
    hin[0] = rand_f(nx, 1, &in[0]);
    for (int k = 0; k < 12; k++) {
        int ln_w = k == FSC_B_LN1_W || k == FSC_B_LN2_W;
        hin[k + 1] = rand_f(np[k], ln_w ? 0.3 : 0.4, &in[k + 1]);
        if (ln_w) for (size_t i = 0; i < np[k]; i++) in[k + 1][i] = hin[k + 1][i] += 1.0f;
        hprior[k] = rand_f(np[k], 1, &prior[k]);
        c.np[k] = np[k];
    }
    float *hdy = rand_f(nx, 1, &dy);
    for (int k = 0; k < 13; k++) din[k] = dev_from(dev, hin[k], k ? np[k - 1] : nx);
    for (int k = 0; k < 12; k++) dg[k] = dev_from(dev, hprior[k], np[k]), p_dev[k] = din[k + 1];
    float *saved = dev_from(dev, NULL, fsc_block_saved_floats(c.B, c.T, c.C, c.NH));
    float *work = dev_from(dev, NULL, fsc_block_work_floats(c.B, c.T, c.C, c.NH));
    float *dout = dev_from(dev, NULL, nx), *dres = dev_from(dev, hdy, nx);
    fsc_block_rec rec;
    fsc_block_rec_bind(&rec, saved, c.B, c.T, c.C, c.NH);
    assert_ok(fsc_block_forward(dev, dout, &rec, din[0], (const float *const *)p_dev, work));
    float *y = host_of(dev, dout, nx);
    check_forward("block", ref_block, &c, in, y, nx);
    assert_ok(fsc_block_backward(dev, dres, dg, &rec, (const float *const *)p_dev, work));
    float *hg = host_of(dev, dres, nx);
    check_grad("block dx", ref_block, &c, in, 0, nx, dy, nx, hg, NULL, 2e-5);
    free(hg);
    for (int k = 0; k < 12; k++) {
        char what[64];
        snprintf(what, sizeof what, "block parameter %d", k);
        hg = host_of(dev, dg[k], np[k]);
        check_grad(what, ref_block, &c, in, k + 1, np[k], dy, nx, hg, hprior[k], 2e-5);
        free(hg);
    }
    free(y), free(hdy), free(dy);
    for (int k = 0; k < 13; k++) free(hin[k]), free(in[k]), fsc_device_release(dev, din[k]);
    for (int k = 0; k < 12; k++) free(hprior[k]), free(prior[k]), fsc_device_release(dev, dg[k]);
    fsc_device_release(dev, saved), fsc_device_release(dev, work);
    fsc_device_release(dev, dout), fsc_device_release(dev, dres);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_linear, setup, teardown),
        cmocka_unit_test_setup_teardown(test_layernorm, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gelu_residual, setup, teardown),
        cmocka_unit_test_setup_teardown(test_embedding, setup, teardown),
        cmocka_unit_test_setup_teardown(test_attention, setup, teardown),
        cmocka_unit_test_setup_teardown(test_xent, setup, teardown),
        cmocka_unit_test_setup_teardown(test_block, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
