/* Tests of the modules of modern models (lib/nn/norm_act.c, mlp.c, self_attention.c, and the shared
 * attention core of attention.c): RMS norm, SiLU/SwiGLU/product, squared error, the SwiGLU MLP and causal
 * self-attention with rotary embeddings and grouped-query heads.
 * Oracles (the contract of test_nn.c, helpers in nntest.h): every forward against a double-precision
 * reference written here, to 1e-5 relative to max |y|; every backward against central finite differences of
 * that reference, to tol * max |fd| + 1e-6 with tol 1e-5 for single kernels and 2e-5 for compositions
 * (measured ~1e-7). The rotary reference is transformers' formula (frequencies concatenated twice,
 * rotate_half), not the kernel's pairwise form. Grouped-query attention runs with kv heads 1, 2 and = heads;
 * with kv heads = heads its heads' output equals the GPT's packed attention bit for bit. */
#include "nntest.h"

/* ---- references ---------------------------------------------------------------------------------- */
typedef struct { size_t N; int C; double eps; } rms_ctx;
static void ref_rmsnorm(const void *vc, double *const *in, double *out) { /* in: x, w */
    const rms_ctx *c = vc;
    for (size_t n = 0; n < c->N; n++) {
        const double *x = in[0] + n * c->C;
        double ms = 0;
        for (int i = 0; i < c->C; i++) ms += x[i] * x[i];
        double r = 1.0 / sqrt(ms / c->C + c->eps);
        for (int i = 0; i < c->C; i++) out[n * c->C + i] = x[i] * r * in[1][i];
    }
}

static double silu_d(double x) { return x / (1.0 + exp(-x)); }
typedef struct { size_t n; int kind; } ew_ctx; /* 0 silu(a), 1 silu(a) b, 2 a b */
static void ref_ew(const void *vc, double *const *in, double *out) {
    const ew_ctx *c = vc;
    for (size_t i = 0; i < c->n; i++)
        out[i] = c->kind == 0 ? silu_d(in[0][i]) : c->kind == 1 ? silu_d(in[0][i]) * in[1][i] : in[0][i] * in[1][i];
}

typedef struct { size_t N; int C; double scale; } mse_ctx;
static void ref_mse(const void *vc, double *const *in, double *out) { /* in: pred, target; out: scale * row sums */
    const mse_ctx *c = vc;
    for (size_t n = 0; n < c->N; n++) {
        double s = 0;
        for (int i = 0; i < c->C; i++) {
            double d = in[0][n * c->C + i] - in[1][n * c->C + i];
            s += d * d;
        }
        out[n] = c->scale * s;
    }
}

/* y (N, OC) = x (N, C) W^T + b, W (OC, C); b may be NULL */
static void lin_out_in(double *y, const double *x, const double *w, const double *b, size_t N, int C, int OC) {
    for (size_t n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double s = b ? b[o] : 0.0;
            for (int i = 0; i < C; i++) s += x[n * C + i] * w[(size_t)o * C + i];
            y[n * OC + o] = s;
        }
}

typedef struct { size_t N; int C, F; } mlp_ctx;
static void ref_mlp(const void *vc, double *const *in, double *out) { /* in: x, w_gate, w_up, w_down */
    const mlp_ctx *c = vc;
    size_t nf = c->N * c->F;
    double *g = malloc(nf * sizeof *g), *u = malloc(nf * sizeof *u);
    lin_out_in(g, in[0], in[1], NULL, c->N, c->C, c->F);
    lin_out_in(u, in[0], in[2], NULL, c->N, c->C, c->F);
    for (size_t i = 0; i < nf; i++) g[i] = silu_d(g[i]) * u[i];
    lin_out_in(out, g, in[3], NULL, c->N, c->F, c->C);
    free(g), free(u);
}

/* rows (B, T) of H heads of D columns, row stride H D: transformers' apply_rotary_pos_emb in place */
static void ref_rope(double *x, int B, int T, int H, int D, double theta) {
    int h2 = D / 2;
    double *emb = malloc(D * sizeof *emb), *r = malloc(D * sizeof *r);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            for (int j = 0; j < h2; j++) emb[j] = emb[j + h2] = t * (1.0 / pow(theta, (double)(2 * j) / D));
            for (int h = 0; h < H; h++) {
                double *v = x + ((size_t)b * T + t) * H * D + (size_t)h * D;
                for (int j = 0; j < D; j++) r[j] = j < h2 ? -v[j + h2] : v[j - h2];
                for (int j = 0; j < D; j++) v[j] = v[j] * cos(emb[j]) + r[j] * sin(emb[j]);
            }
        }
    free(emb), free(r);
}

/* in: x, wq, wk, wv, wo, then bq, bk, bv, bo when bias */
typedef struct { fsc_self_attn_config cfg; int bias; } sa_ctx;
static void ref_self_attn(const void *vc, double *const *in, double *out) {
    const sa_ctx *sc = vc;
    const fsc_self_attn_config *c = &sc->cfg;
    int B = c->B, T = c->T, NH = c->NH, KVH = c->KVH, HS = c->HS, QW = NH * HS, KW = KVH * HS, rep = NH / KVH;
    size_t N = (size_t)B * T;
    double *q = malloc(N * QW * sizeof *q), *k = malloc(N * KW * sizeof *k), *v = malloc(N * KW * sizeof *v);
    double *y = malloc(N * QW * sizeof *y), *p = malloc(T * sizeof *p);
    lin_out_in(q, in[0], in[1], sc->bias ? in[5] : NULL, N, c->C, QW);
    lin_out_in(k, in[0], in[2], sc->bias ? in[6] : NULL, N, c->C, KW);
    lin_out_in(v, in[0], in[3], sc->bias ? in[7] : NULL, N, c->C, KW);
    if (c->rope_theta > 0) {
        ref_rope(q, B, T, NH, HS, c->rope_theta);
        ref_rope(k, B, T, KVH, HS, c->rope_theta);
    }
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            int g = h / rep; /* repeat_kv: kv head g serves query heads g*rep .. g*rep + rep - 1 */
            for (int i = 0; i < T; i++) {
                const double *qi = q + ((size_t)b * T + i) * QW + h * HS;
                double mx = -1e300, s = 0;
                for (int j = 0; j <= i; j++) {
                    const double *kj = k + ((size_t)b * T + j) * KW + g * HS;
                    double d = 0;
                    for (int e = 0; e < HS; e++) d += qi[e] * kj[e];
                    p[j] = d / sqrt((double)HS);
                    mx = fmax(mx, p[j]);
                }
                for (int j = 0; j <= i; j++) s += (p[j] = exp(p[j] - mx));
                for (int e = 0; e < HS; e++) {
                    double acc = 0;
                    for (int j = 0; j <= i; j++) acc += p[j] / s * v[((size_t)b * T + j) * KW + g * HS + e];
                    y[((size_t)b * T + i) * QW + h * HS + e] = acc;
                }
            }
        }
    lin_out_in(out, y, in[4], sc->bias ? in[8] : NULL, N, QW, c->C);
    free(q), free(k), free(v), free(y), free(p);
}

static void release_all(fsc_device *dev, float **bufs, size_t n) {
    for (size_t i = 0; i < n; i++) fsc_device_release(dev, bufs[i]);
}

/* ---- tests --------------------------------------------------------------------------------------- */

/* RMS norm: dinp and dw accumulate onto prior contents. Tolerance 1e-5. */
static void test_rmsnorm(void **state) {
    fsc_device *dev = ((fixture *)*state)->dev;
    rms_ctx c = { 5, 8, 1e-6 };
    size_t nx = c.N * c.C;
    double *x, *w, *dy, *px, *pw;
    float *hx = rand_f(nx, 2, &x), *hw = rand_f(c.C, 1, &w), *hdy = rand_f(nx, 1, &dy);
    float *hpx = rand_f(nx, 1, &px), *hpw = rand_f(c.C, 1, &pw);
    float *dx = dev_from(dev, hx, nx), *dw = dev_from(dev, hw, c.C), *dout = dev_from(dev, NULL, nx);
    float *rstd = dev_from(dev, NULL, c.N), *ddy = dev_from(dev, hdy, nx);
    fsc_rmsnorm_rec rec;
    assert_ok(fsc_rmsnorm_forward(dev, dout, &rec, rstd, dx, dw, c.N, c.C, (float)c.eps));
    double *in[2] = { x, w };
    float *y = host_of(dev, dout, nx);
    check_forward("rmsnorm", ref_rmsnorm, &c, in, y, nx);
    float *gx = dev_from(dev, hpx, nx), *gw = dev_from(dev, hpw, c.C);
    assert_ok(fsc_rmsnorm_backward(dev, gx, gw, &rec, ddy, dw));
    float *hgx = host_of(dev, gx, nx), *hgw = host_of(dev, gw, c.C);
    check_grad("rmsnorm dinp", ref_rmsnorm, &c, in, 0, nx, dy, nx, hgx, hpx, 1e-5);
    check_grad("rmsnorm dw", ref_rmsnorm, &c, in, 1, c.C, dy, nx, hgw, hpw, 1e-5);
    assert_err(fsc_rmsnorm_forward(dev, dout, &rec, rstd, dx, dw, c.N, 0, 1e-5f), FSC_ERR_INVALID, "C=0");
    free(y), free(hgx), free(hgw), free(hx), free(hw), free(hdy), free(hpx), free(hpw);
    free(x), free(w), free(dy), free(px), free(pw);
    float *bufs[] = { dx, dw, dout, rstd, ddy, gx, gw };
    release_all(dev, bufs, sizeof bufs / sizeof *bufs);
}

/* SiLU and SwiGLU (gradients overwrite garbage), product (gradients accumulate). Tolerance 1e-5. */
static void test_silu_swiglu_mul(void **state) {
    fsc_device *dev = ((fixture *)*state)->dev;
    ew_ctx c = { 40, 0 };
    double *a, *b, *dy, *p;
    float *ha = rand_f(c.n, 4, &a), *hb = rand_f(c.n, 2, &b), *hdy = rand_f(c.n, 1, &dy), *hp = rand_f(c.n, 1, &p);
    float *da = dev_from(dev, ha, c.n), *db = dev_from(dev, hb, c.n), *ddy = dev_from(dev, hdy, c.n);
    float *out = dev_from(dev, NULL, c.n), *g1 = dev_from(dev, hp, c.n), *g2 = dev_from(dev, hp, c.n);
    double *in[2] = { a, b };
    fsc_ew_rec rec;
    for (int kind = 0; kind < 3; kind++) {
        c.kind = kind;
        const char *name[3] = { "silu", "swiglu", "mul" };
        if (kind == 0) assert_ok(fsc_silu_forward(dev, out, &rec, da, c.n));
        if (kind == 1) assert_ok(fsc_swiglu_forward(dev, out, &rec, da, db, c.n));
        if (kind == 2) assert_ok(fsc_mul_forward(dev, out, &rec, da, db, c.n));
        float *y = host_of(dev, out, c.n);
        check_forward(name[kind], ref_ew, &c, in, y, c.n);
        assert_ok(fsc_device_upload(dev, g1, hp, c.n * sizeof(float)));
        assert_ok(fsc_device_upload(dev, g2, hp, c.n * sizeof(float)));
        if (kind == 0) assert_ok(fsc_silu_backward(dev, g1, &rec, ddy));
        if (kind == 1) assert_ok(fsc_swiglu_backward(dev, g1, g2, &rec, ddy));
        if (kind == 2) assert_ok(fsc_mul_backward(dev, g1, g2, &rec, ddy));
        float *h1 = host_of(dev, g1, c.n), *h2 = host_of(dev, g2, c.n);
        char what[32];
        snprintf(what, sizeof what, "%s d0", name[kind]);
        check_grad(what, ref_ew, &c, in, 0, c.n, dy, c.n, h1, kind == 2 ? hp : NULL, 1e-5);
        if (kind) {
            snprintf(what, sizeof what, "%s d1", name[kind]);
            check_grad(what, ref_ew, &c, in, 1, c.n, dy, c.n, h2, kind == 2 ? hp : NULL, 1e-5);
        }
        free(y), free(h1), free(h2);
    }
    free(ha), free(hb), free(hdy), free(hp), free(a), free(b), free(dy), free(p);
    float *bufs[] = { da, db, ddy, out, g1, g2 };
    release_all(dev, bufs, sizeof bufs / sizeof *bufs);
}

/* Squared error: losses per row; dpred = gradient of dscale * sum(losses) (dy = 1 in the oracle), here the
 * mean over the N C elements. Tolerance 1e-5. */
static void test_mse(void **state) {
    fsc_device *dev = ((fixture *)*state)->dev;
    mse_ctx c = { 4, 3, 1.0 / 12 };
    size_t n = c.N * c.C;
    double *p, *t, *ones = malloc(c.N * sizeof *ones);
    for (size_t i = 0; i < c.N; i++) ones[i] = 1.0;
    float *hp = rand_f(n, 2, &p), *ht = rand_f(n, 2, &t);
    float *dp = dev_from(dev, hp, n), *dt = dev_from(dev, ht, n), *dl = dev_from(dev, NULL, c.N);
    float *g = dev_fill(dev, n, NAN);
    fsc_mse_rec rec;
    assert_ok(fsc_mse_forward(dev, dl, &rec, dp, dt, c.N, c.C));
    double *in[2] = { p, t };
    float *l = host_of(dev, dl, c.N);
    for (size_t i = 0; i < c.N; i++) l[i] *= (float)c.scale; /* the reference includes the scale */
    check_forward("mse", ref_mse, &c, in, l, c.N);
    assert_ok(fsc_mse_backward(dev, g, &rec, (float)c.scale));
    float *hg = host_of(dev, g, n);
    check_grad("mse dpred", ref_mse, &c, in, 0, n, ones, c.N, hg, NULL, 1e-5);
    assert_err(fsc_mse_forward(dev, dl, NULL, dp, dt, 2, 0), FSC_ERR_INVALID, "C=0");
    free(l), free(hg), free(hp), free(ht), free(p), free(t), free(ones);
    float *bufs[] = { dp, dt, dl, g };
    release_all(dev, bufs, sizeof bufs / sizeof *bufs);
}

/* SwiGLU MLP: dinp overwrites garbage, the three weight gradients accumulate onto prior contents.
 * N=6, C=5, F=7. Tolerance 2e-5. */
static void test_swiglu_mlp(void **state) {
    fsc_device *dev = ((fixture *)*state)->dev;
    mlp_ctx c = { 6, 5, 7 };
    size_t nx = c.N * c.C, nw = (size_t)c.C * c.F;
    double *in[4], *dy, *prior[3];
    float *hin[4], *hprior[3], *din[4], *dg[3];
    hin[0] = rand_f(nx, 1, &in[0]);
    for (int k = 1; k < 4; k++) hin[k] = rand_f(nw, 0.6, &in[k]);
    for (int k = 0; k < 3; k++) hprior[k] = rand_f(nw, 1, &prior[k]), dg[k] = dev_from(dev, hprior[k], nw);
    for (int k = 0; k < 4; k++) din[k] = dev_from(dev, hin[k], k ? nw : nx);
    float *hdy = rand_f(nx, 1, &dy), *ddy = dev_from(dev, hdy, nx);
    float *saved = dev_from(dev, NULL, fsc_swiglu_mlp_saved_floats(c.N, c.F));
    float *work = dev_from(dev, NULL, fsc_swiglu_mlp_work_floats(c.N, c.F));
    float *dout = dev_from(dev, NULL, nx), *dx = dev_fill(dev, nx, NAN);
    fsc_swiglu_mlp_rec rec = { 0 };
    assert_err(fsc_swiglu_mlp_forward(dev, dout, &rec, din[0], din[1], din[2], din[3]), FSC_ERR_INVALID, "bad dim");
    fsc_swiglu_mlp_rec_bind(&rec, saved, c.N, c.C, c.F);
    assert_ok(fsc_swiglu_mlp_forward(dev, dout, &rec, din[0], din[1], din[2], din[3]));
    float *y = host_of(dev, dout, nx);
    check_forward("swiglu mlp", ref_mlp, &c, in, y, nx);
    assert_ok(fsc_swiglu_mlp_backward(dev, dx, dg[0], dg[1], dg[2], &rec, ddy, din[1], din[2], din[3], work));
    float *hg = host_of(dev, dx, nx);
    check_grad("swiglu mlp dinp", ref_mlp, &c, in, 0, nx, dy, nx, hg, NULL, 2e-5);
    free(hg);
    const char *names[3] = { "swiglu mlp dw_gate", "swiglu mlp dw_up", "swiglu mlp dw_down" };
    for (int k = 0; k < 3; k++) {
        hg = host_of(dev, dg[k], nw);
        check_grad(names[k], ref_mlp, &c, in, k + 1, nw, dy, nx, hg, hprior[k], 2e-5);
        free(hg);
    }
    free(y), free(hdy), free(dy);
    for (int k = 0; k < 4; k++) free(hin[k]), free(in[k]), fsc_device_release(dev, din[k]);
    for (int k = 0; k < 3; k++) free(hprior[k]), free(prior[k]), fsc_device_release(dev, dg[k]);
    float *bufs[] = { ddy, saved, work, dout, dx };
    release_all(dev, bufs, sizeof bufs / sizeof *bufs);
}

/* Self-attention of one configuration: forward against the reference, input gradient (overwriting NaN)
 * and every parameter gradient (accumulating onto prior contents) against finite differences.
 * Tolerance 2e-5 (a composition). Returns nothing; fails the test on a mismatch. */
static void self_attn_case(fsc_device *dev, int KVH, float theta, int bias) {
    sa_ctx c = { { .B = 2, .T = 5, .C = 12, .NH = 4, .KVH = KVH, .HS = 4, .rope_theta = theta }, bias };
    int QW = 16, KW = KVH * 4, C = 12;
    size_t N = 10, np[9] = { N * C, (size_t)QW * C, (size_t)KW * C, (size_t)KW * C, (size_t)C * QW, QW, KW, KW, C };
    int nin = bias ? 9 : 5;
    double *in[9], *prior[9], *dy;
    float *hin[9], *hprior[9], *din[9], *dg[9];
    for (int k = 0; k < nin; k++) {
        hin[k] = rand_f(np[k], k ? 0.5 : 1.0, &in[k]), din[k] = dev_from(dev, hin[k], np[k]);
        hprior[k] = rand_f(np[k], 1, &prior[k]), dg[k] = dev_from(dev, hprior[k], np[k]);
    }
    float *hdy = rand_f(N * C, 1, &dy), *ddy = dev_from(dev, hdy, N * C);
    float *saved = dev_from(dev, NULL, fsc_self_attn_saved_floats(&c.cfg));
    float *work = dev_from(dev, NULL, fsc_self_attn_work_floats(&c.cfg));
    float *dout = dev_from(dev, NULL, N * C), *dx = dev_fill(dev, N * C, NAN);
    fsc_self_attn_params p = { din[1], din[2], din[3], din[4], bias ? din[5] : NULL, bias ? din[6] : NULL,
                               bias ? din[7] : NULL, bias ? din[8] : NULL };
    fsc_self_attn_grads g = { dg[1], dg[2], dg[3], dg[4], bias ? dg[5] : NULL, bias ? dg[6] : NULL,
                              bias ? dg[7] : NULL, bias ? dg[8] : NULL };
    fsc_self_attn_rec rec;
    fsc_self_attn_rec_bind(&rec, saved, &c.cfg);
    assert_ok(fsc_self_attn_forward(dev, dout, &rec, din[0], &p, work));
    float *y = host_of(dev, dout, N * C);
    char what[96];
    snprintf(what, sizeof what, "self-attention KVH=%d theta=%g bias=%d", KVH, (double)theta, bias);
    check_forward(what, ref_self_attn, &c, in, y, N * C);
    assert_ok(fsc_self_attn_backward(dev, dx, &g, &rec, ddy, &p, work));
    const char *names[9] = { "dinp", "dwq", "dwk", "dwv", "dwo", "dbq", "dbk", "dbv", "dbo" };
    for (int k = 0; k < nin; k++) {
        float *hg = host_of(dev, k ? dg[k] : dx, np[k]);
        char w2[128];
        snprintf(w2, sizeof w2, "%s %s", what, names[k]);
        check_grad(w2, ref_self_attn, &c, in, k, np[k], dy, N * C, hg, k ? hprior[k] : NULL, 2e-5);
        free(hg);
    }
    free(y), free(hdy), free(dy);
    for (int k = 0; k < nin; k++) {
        free(hin[k]), free(in[k]), free(hprior[k]), free(prior[k]);
        fsc_device_release(dev, din[k]), fsc_device_release(dev, dg[k]);
    }
    float *bufs[] = { ddy, saved, work, dout, dx };
    release_all(dev, bufs, sizeof bufs / sizeof *bufs);
}

static void test_self_attn_gqa(void **state) {
    fsc_device *dev = ((fixture *)*state)->dev;
    const int kvh[3] = { 1, 2, 4 };
    for (int i = 0; i < 3; i++) {
        self_attn_case(dev, kvh[i], 10000.0f, 0); /* Llama: rotary, no bias */
        self_attn_case(dev, kvh[i], 0.0f, 0);     /* no rotary */
    }
    self_attn_case(dev, 2, 500000.0f, 1); /* with biases */
}

/* KVH = NH: the heads' output equals the GPT's packed attention (attention.c) on the same q, k, v, bit for
 * bit; bad configurations are refused. */
static void test_self_attn_equals_plain(void **state) {
    fsc_device *dev = ((fixture *)*state)->dev;
    fsc_self_attn_config cfg = { .B = 2, .T = 37, .C = 16, .NH = 4, .KVH = 4, .HS = 4, .rope_theta = 0.0f };
    size_t N = 74, C = 16;
    double *d0, *d1, *d2, *d3, *d4;
    float *hx = rand_f(N * C, 1, &d0), *hq = rand_f(C * C, 0.5, &d1), *hk = rand_f(C * C, 0.5, &d2);
    float *hv = rand_f(C * C, 0.5, &d3), *ho = rand_f(C * C, 0.5, &d4);
    float *x = dev_from(dev, hx, N * C), *wq = dev_from(dev, hq, C * C), *wk = dev_from(dev, hk, C * C);
    float *wv = dev_from(dev, hv, C * C), *wo = dev_from(dev, ho, C * C), *out = dev_from(dev, NULL, N * C);
    float *saved = dev_from(dev, NULL, fsc_self_attn_saved_floats(&cfg));
    float *work = dev_from(dev, NULL, fsc_self_attn_work_floats(&cfg));
    fsc_self_attn_params p = { wq, wk, wv, wo, NULL, NULL, NULL, NULL };
    fsc_self_attn_rec rec;
    fsc_self_attn_rec_bind(&rec, saved, &cfg);
    assert_ok(fsc_self_attn_forward(dev, out, &rec, x, &p, work));
    /* the packed (B, T, 3C) qkv of the same q, k, v */
    float *hqkv = malloc(N * 3 * C * sizeof *hqkv), *tmp = malloc(N * C * sizeof *tmp);
    float *src[3] = { rec.q, rec.k, rec.v };
    for (int s = 0; s < 3; s++) {
        assert_ok(fsc_device_download(dev, tmp, src[s], N * C * sizeof *tmp));
        for (size_t n = 0; n < N; n++) memcpy(hqkv + n * 3 * C + s * C, tmp + n * C, C * sizeof *tmp);
    }
    float *qkv = dev_from(dev, hqkv, N * 3 * C), *y = dev_from(dev, NULL, N * C);
    float *psaved = dev_from(dev, NULL, fsc_attention_saved_floats(cfg.B, cfg.T, (int)C, cfg.NH));
    float *pwork = dev_from(dev, NULL, fsc_attention_work_floats(cfg.B, cfg.T, (int)C, cfg.NH));
    fsc_attention_rec prec;
    fsc_attention_rec_bind(&prec, psaved, cfg.B, cfg.T, (int)C, cfg.NH);
    assert_ok(fsc_attention_forward(dev, y, &prec, qkv, pwork));
    float *a = host_of(dev, y, N * C), *b = host_of(dev, rec.y, N * C);
    assert_bits_equal(a, b, N * C, "grouped-query attention with KVH = NH against the packed attention");
    free(a), free(b);
    a = host_of(dev, prec.att, (size_t)cfg.B * cfg.NH * cfg.T * cfg.T);
    b = host_of(dev, rec.att, (size_t)cfg.B * cfg.NH * cfg.T * cfg.T);
    assert_bits_equal(a, b, (size_t)cfg.B * cfg.NH * cfg.T * cfg.T, "attention probabilities");
    free(a), free(b);
    fsc_self_attn_rec bad = rec;
    bad.cfg.KVH = 3;
    assert_err(fsc_self_attn_forward(dev, out, &bad, x, &p, work), FSC_ERR_INVALID, "KVH must divide NH");
    bad = rec;
    bad.cfg.HS = 3, bad.cfg.rope_theta = 10000.0f;
    assert_err(fsc_self_attn_forward(dev, out, &bad, x, &p, work), FSC_ERR_INVALID, "even head size");
    fsc_attn_core_dims cd = { 2, 37, 4, 2, 4 };
    assert_err(fsc_attn_core_forward(dev, &cd, y, 16, rec.q, 16, rec.k, 4, rec.v, 8, rec.att, work), FSC_ERR_INVALID,
               "narrower");
    free(hx), free(hq), free(hk), free(hv), free(ho), free(d0), free(d1), free(d2), free(d3), free(d4);
    free(hqkv), free(tmp);
    float *bufs[] = { x, wq, wk, wv, wo, out, saved, work, qkv, y, psaved, pwork };
    release_all(dev, bufs, sizeof bufs / sizeof *bufs);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_rmsnorm, setup, teardown),
        cmocka_unit_test_setup_teardown(test_silu_swiglu_mul, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mse, setup, teardown),
        cmocka_unit_test_setup_teardown(test_swiglu_mlp, setup, teardown),
        cmocka_unit_test_setup_teardown(test_self_attn_gqa, setup, teardown),
        cmocka_unit_test_setup_teardown(test_self_attn_equals_plain, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
