/* Tests of the GPT-2 model (lib/model/gpt.c, gpt_model.c, gpt_acts.c: the GPT built from layers): description, initial values, gradients, and the
 * bit-exactness properties the parallel layers rely on (checkpointing, split layer ranges, determinism),
 * and that the model learns. Each test states its oracle. */
#include <math.h>
#include <stdlib.h>
#include "gpttest.h"
#include "core/kernels.h"

static const fsc_gpt_config TINY = { .layers = 2, .dim = 16, .heads = 2, .seq = 8, .vocab = 32 };

/* ---- helpers ------------------------------------------------------------------------------------- */
static float *download(fsc_device *dev, const float *p, size_t n) {
    float *h = malloc(n * sizeof(float));
    assert_ok(fsc_device_download(dev, h, p, n * sizeof(float)));
    return h;
}

/* Deterministic tokens in [0, V) and targets = the next token (a shifted stream). */
static void make_batch(int32_t *tok, int32_t *tgt, int B, int T, int V, uint32_t salt) {
    uint32_t s = 2463534242u ^ salt;
    for (int i = 0; i <= B * T; i++) {
        s ^= s << 13, s ^= s >> 17, s ^= s << 5;
        int32_t t = (int32_t)(s % (uint32_t)V);
        if (i < B * T) tok[i] = t;
        if (i > 0) tgt[i - 1] = t;
    }
}

/* One forward and backward of the whole model on a fresh gradient; returns the loss sum. */
static double fwd_bwd(model *md, const fsc_gpt_acts_opts *o, const int32_t *tok, const int32_t *tgt) {
    fsc_gpt_acts *a;
    double loss;
    assert_ok(fsc_gpt_acts_create(md->m, o, &a));
    assert_ok(fsc_device_memset(md->dev, md->grads, 0, md->P * sizeof(float)));
    assert_ok(fsc_gpt_acts_set_batch(a, tok, tgt));
    assert_ok(fsc_gpt_forward(md->m, a, NULL, &loss));
    assert_ok(fsc_gpt_backward(md->m, a, NULL, 1.0f / (float)(o->B * o->T)));
    fsc_gpt_acts_free(a);
    return loss;
}

static int setup(void **state) {
    fsc_device *dev;
    if (fsc_device_create("cpu", &(fsc_device_opts){ .threads = 1 }, &dev) != FSC_OK) return -1;
    *state = dev;
    return 0;
}
static int teardown(void **state) {
    fsc_device_free(*state);
    return 0;
}

/* ---- description --------------------------------------------------------------------------------- */

/* Oracle: the HF GPT-2 names and shapes listed in the task (e.g. h.1.mlp.c_fc.weight is [C, 4C]), sizes
 * summing to fsc_gpt_num_params, names round-tripping through fsc_gpt_param_index, and a clear error for
 * each impossible configuration. */
static void test_config_and_info(void **state) {
    (void)state;
    const fsc_gpt_config *c = &TINY;
    assert_ok(fsc_gpt_config_validate(c));
    assert_int_equal(fsc_gpt_num_tensors(c), 2 + 12 * 2 + 2);
    fsc_param_info p;
    size_t total = 0;
    for (int i = 0; i < fsc_gpt_num_tensors(c); i++) {
        assert_ok(fsc_gpt_param_info(c, i, &p));
        assert_int_equal(fsc_gpt_param_index(c, p.name), i);
        total += p.numel;
    }
    assert_int_equal(total, fsc_gpt_num_params(c));
    struct { int i; const char *name; int ndim; int64_t d0, d1; int layer; } want[] = {
        { 0, "wte.weight", 2, 32, 16, 0 },
        { 1, "wpe.weight", 2, 8, 16, 0 },
        { 2, "h.0.ln_1.weight", 1, 16, 0, 1 },
        { 4, "h.0.attn.c_attn.weight", 2, 16, 48, 1 },
        { 5, "h.0.attn.c_attn.bias", 1, 48, 0, 1 },
        { 6, "h.0.attn.c_proj.weight", 2, 16, 16, 1 },
        { 9, "h.0.ln_2.bias", 1, 16, 0, 1 },
        { 2 + 12 + 8, "h.1.mlp.c_fc.weight", 2, 16, 64, 2 },
        { 2 + 12 + 9, "h.1.mlp.c_fc.bias", 1, 64, 0, 2 },
        { 2 + 12 + 10, "h.1.mlp.c_proj.weight", 2, 64, 16, 2 },
        { 2 + 12 + 11, "h.1.mlp.c_proj.bias", 1, 16, 0, 2 },
        { 26, "ln_f.weight", 1, 16, 0, 3 },
        { 27, "ln_f.bias", 1, 16, 0, 3 },
    };
    for (size_t k = 0; k < sizeof want / sizeof *want; k++) {
        assert_ok(fsc_gpt_param_info(c, want[k].i, &p));
        assert_string_equal(p.name, want[k].name);
        assert_int_equal(p.ndim, want[k].ndim);
        assert_int_equal(p.shape[0], want[k].d0);
        if (p.ndim == 2) assert_int_equal(p.shape[1], want[k].d1);
        assert_int_equal(p.layer, want[k].layer);
    }
    assert_int_equal(fsc_gpt_block_first_tensor(c, 1), 14);
    const char *bad_names[] = { "h.2.ln_1.weight", "h.01.ln_1.weight", "h..ln_1.weight", "h.0.ln_3.weight",
                                "lm_head.weight", "h.0", "", "h.99999999999999999999.ln_1.weight" };
    for (size_t k = 0; k < sizeof bad_names / sizeof *bad_names; k++)
        assert_int_equal(fsc_gpt_param_index(c, bad_names[k]), -1);
    assert_err(fsc_gpt_param_info(c, 28, &p), FSC_ERR_INVALID, "out of range");

    fsc_gpt_config b = TINY;
    b.heads = 3;
    assert_err(fsc_gpt_config_validate(&b), FSC_ERR_INVALID, "not a multiple of heads");
    b = TINY, b.layers = 0;
    assert_err(fsc_gpt_config_validate(&b), FSC_ERR_INVALID, "layers is 0");
    b = TINY, b.vocab = -5;
    assert_err(fsc_gpt_config_validate(&b), FSC_ERR_INVALID, "vocab is -5");
    b = TINY, b.seq = 0;
    assert_err(fsc_gpt_config_validate(&b), FSC_ERR_INVALID, "seq");
    b = TINY, b.dim = 1 << 20;
    assert_err(fsc_gpt_config_validate(&b), FSC_ERR_INVALID, "dim");
    assert_err(fsc_gpt_config_validate(NULL), FSC_ERR_INVALID, "NULL");
}

/* Oracle: any element range of a tensor gets exactly the values of the whole tensor there (keyed RNG);
 * LayerNorm weights 1, biases 0; weights have sample std within 10% of 0.02, residual projections of
 * 0.02/sqrt(2L); another seed gives other values. */
static void test_init_values(void **state) {
    (void)state;
    fsc_gpt_config c = { .layers = 3, .dim = 32, .heads = 4, .seq = 16, .vocab = 64 };
    for (int i = 0; i < fsc_gpt_num_tensors(&c); i++) {
        fsc_param_info p;
        assert_ok(fsc_gpt_param_info(&c, i, &p));
        float *all = malloc(p.numel * sizeof(float)), *part = malloc(p.numel * sizeof(float));
        fsc_gpt_init_values(&c, 7, i, 0, p.numel, all);
        size_t a = p.numel / 3, n = p.numel / 2;
        fsc_gpt_init_values(&c, 7, i, a, n, part);
        assert_bits_equal(all + a, part, n, p.name);
        double s = 0, s2 = 0;
        for (size_t k = 0; k < p.numel; k++) s += all[k], s2 += (double)all[k] * all[k];
        double sd = sqrt(s2 / p.numel - (s / p.numel) * (s / p.numel));
        if (p.ndim == 1) {
            float v = strstr(p.name, "ln_") && strstr(p.name, ".weight") ? 1.0f : 0.0f;
            for (size_t k = 0; k < p.numel; k++) assert_true(all[k] == v);
        } else {
            double want = strstr(p.name, "c_proj.weight") ? 0.02 / sqrt(2.0 * c.layers) : 0.02;
            if (fabs(sd - want) > 0.1 * want) fail_msg("%s: std %g, want %g", p.name, sd, want);
            fsc_gpt_init_values(&c, 8, i, 0, n, part);
            assert_true(memcmp(all, part, n * sizeof(float)) != 0);
        }
        free(all), free(part);
    }
}

/* Oracle: the GPT model built from layers (fsc_gpt_model_create) starts every tensor at exactly the values of
 * fsc_gpt_init_values (the GPT's description), bit for bit, dense and with MoE blocks, at any element range. */
static void test_model_init_values(void **state) {
    fsc_device *dev = *state;
    const fsc_gpt_config cs[2] = { { .layers = 3, .dim = 16, .heads = 2, .seq = 8, .vocab = 32 },
                                   { .layers = 3, .dim = 8, .heads = 2, .seq = 4, .vocab = 11, .moe_experts = 3,
                                     .moe_top_k = 2, .moe_every = 2, .moe_capacity = 1.0f, .moe_aux = 0.01f } };
    for (int k = 0; k < 2; k++) {
        fsc_model *m;
        assert_ok(fsc_gpt_model_create(dev, &cs[k], &m));
        assert_int_equal(m->n_tensors, fsc_gpt_num_tensors(&cs[k]));
        for (int i = 0; i < m->n_tensors; i++) {
            size_t n = m->info[i].numel, a = n / 3, len = n - a;
            float *want = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
            fsc_gpt_init_values(&cs[k], 11, i, 0, n, want);
            m->ops->init_values(m->ctx, 11, i, 0, n, got);
            assert_bits_equal(want, got, n, m->info[i].name);
            m->ops->init_values(m->ctx, 11, i, a, len, got);
            assert_bits_equal(want + a, got, len, m->info[i].name);
            free(want), free(got);
        }
        fsc_model_free(m);
    }
}

/* ---- numerics ------------------------------------------------------------------------------------ */
/* A double-precision GPT-2 written here from the formulas (llm.c's gpt2_forward), used as the oracle. */
typedef struct { const fsc_gpt_config *c; int B, T; const int32_t *tok, *tgt; } ref_ctx;

static void d_layernorm(double *out, const double *x, const double *w, const double *b, size_t N, int C) {
    for (size_t n = 0; n < N; n++) {
        const double *xn = x + n * C;
        double m = 0, v = 0;
        for (int i = 0; i < C; i++) m += xn[i];
        m /= C;
        for (int i = 0; i < C; i++) v += (xn[i] - m) * (xn[i] - m);
        double r = 1.0 / sqrt(v / C + 1e-5);
        for (int i = 0; i < C; i++) out[n * C + i] = (xn[i] - m) * r * w[i] + b[i];
    }
}
static void d_linear(double *out, const double *x, const double *w, const double *b, size_t N, int C, int OC) {
    for (size_t n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double s = b ? b[o] : 0;
            for (int i = 0; i < C; i++) s += x[n * C + i] * w[(size_t)i * OC + o];
            out[n * OC + o] = s;
        }
}
static void d_attention(double *out, const double *qkv, int B, int T, int C, int NH) {
    int HS = C / NH;
    double p[128]; /* T <= 128 */
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                const double *q = qkv + ((size_t)b * T + i) * 3 * C + h * HS;
                double mx = -1e300, s = 0;
                for (int j = 0; j <= i; j++) {
                    const double *k = qkv + ((size_t)b * T + j) * 3 * C + C + h * HS;
                    double d = 0;
                    for (int e = 0; e < HS; e++) d += q[e] * k[e];
                    p[j] = d / sqrt((double)HS);
                    mx = fmax(mx, p[j]);
                }
                for (int j = 0; j <= i; j++) s += (p[j] = exp(p[j] - mx));
                for (int e = 0; e < HS; e++) {
                    double y = 0;
                    for (int j = 0; j <= i; j++) y += p[j] / s * qkv[((size_t)b * T + j) * 3 * C + 2 * C + h * HS + e];
                    out[((size_t)b * T + i) * C + h * HS + e] = y;
                }
            }
}
/* Mean loss over the B*T tokens for parameters p (tensor order). */
static double ref_loss(const ref_ctx *r, double *const *p) {
    const fsc_gpt_config *c = r->c;
    int C = c->dim, V = c->vocab, T = r->T, L = c->layers;
    size_t N = (size_t)r->B * T, NC = N * C;
    double *x = malloc(NC * sizeof(double)), *ln = malloc(NC * sizeof(double));
    double *big = malloc(N * (4 * C > V ? 4 * C : V) * sizeof(double)), *a = malloc(NC * sizeof(double));
    double *t = malloc(NC * sizeof(double));
    for (size_t n = 0; n < N; n++)
        for (int i = 0; i < C; i++) x[n * C + i] = p[0][(size_t)r->tok[n] * C + i] + p[1][(n % T) * C + i];
    for (int l = 0; l < L; l++) {
        double *const *q = p + fsc_gpt_block_first_tensor(c, l);
        d_layernorm(ln, x, q[FSC_B_LN1_W], q[FSC_B_LN1_B], N, C);
        d_linear(big, ln, q[FSC_B_ATTN_W], q[FSC_B_ATTN_B], N, C, 3 * C);
        d_attention(a, big, r->B, T, C, c->heads);
        d_linear(t, a, q[FSC_B_APROJ_W], q[FSC_B_APROJ_B], N, C, C);
        for (size_t k = 0; k < NC; k++) x[k] += t[k];
        d_layernorm(ln, x, q[FSC_B_LN2_W], q[FSC_B_LN2_B], N, C);
        d_linear(big, ln, q[FSC_B_FC_W], q[FSC_B_FC_B], N, C, 4 * C);
        for (size_t k = 0; k < N * 4 * C; k++) {
            double u = big[k];
            big[k] = 0.5 * u * (1.0 + tanh(sqrt(2.0 / M_PI) * (u + 0.044715 * u * u * u)));
        }
        d_linear(t, big, q[FSC_B_MPROJ_W], q[FSC_B_MPROJ_B], N, 4 * C, C);
        for (size_t k = 0; k < NC; k++) x[k] += t[k];
    }
    int f = fsc_gpt_num_tensors(c) - 2;
    d_layernorm(ln, x, p[f], p[f + 1], N, C);
    double loss = 0;
    for (size_t n = 0; n < N; n++) {
        double mx = -1e300, s = 0;
        for (int v = 0; v < V; v++) {
            double z = 0;
            for (int i = 0; i < C; i++) z += ln[n * C + i] * p[0][(size_t)v * C + i];
            big[v] = z;
            mx = fmax(mx, z);
        }
        for (int v = 0; v < V; v++) s += exp(big[v] - mx);
        loss += log(s) + mx - big[r->tgt[n]];
    }
    free(x), free(ln), free(big), free(a), free(t);
    return loss / N;
}

/* Oracle: the model's gradient of the mean loss equals central differences (step 1e-5, in double) of the
 * double reference loss, at 8 sampled elements of every tensor (the first, the last, a row of wte that
 * a token uses, and random ones), to |g - fd| <= 1e-4 max|fd| + 1e-9 per tensor (float32 measures <= 3e-6).
 * Gradients accumulate onto prior contents. The model's loss equals the reference loss to 1e-6 relative. */
static void test_gradients(void **state) {
    fsc_device *dev = *state;
    const fsc_gpt_config *c = &TINY;
    enum { B = 2, T = 8 };
    int32_t tok[B * T], tgt[B * T];
    make_batch(tok, tgt, B, T, c->vocab, 1);
    model md;
    model_init(&md, dev, c, 1);
    /* perturb the zero biases and unit LayerNorm weights so that every path carries signal */
    for (int i = 0; i < md.m->n_tensors; i++) {
        if (md.m->info[i].ndim != 1) continue;
        size_t n = md.m->info[i].numel;
        float *h = download(dev, md.m->param[i], n);
        for (size_t k = 0; k < n; k++) h[k] += 0.1f * sinf((float)(k * 7 + i));
        assert_ok(fsc_device_upload(dev, md.m->param[i], h, n * sizeof(float)));
        free(h);
    }
    /* gradients accumulate: start from prior values and subtract them afterwards */
    float *prior = malloc(md.P * sizeof(float));
    for (size_t k = 0; k < md.P; k++) prior[k] = 1e-3f * cosf((float)k);
    assert_ok(fsc_device_upload(dev, md.grads, prior, md.P * sizeof(float)));
    fsc_gpt_acts *a;
    double loss;
    assert_ok(fsc_gpt_acts_create(md.m, &(fsc_gpt_acts_opts){ .B = B, .T = T, .last = c->layers + 1 }, &a));
    assert_ok(fsc_gpt_acts_set_batch(a, tok, tgt));
    assert_ok(fsc_gpt_forward(md.m, a, NULL, &loss));
    assert_ok(fsc_gpt_backward(md.m, a, NULL, 1.0f / (B * T)));
    fsc_gpt_acts_free(a);
    loss /= B * T;
    int nt = md.m->n_tensors;
    size_t off = 0;
    double **p = calloc(nt, sizeof(double *));
    float **g = calloc(nt, sizeof(float *));
    for (int i = 0; i < nt; i++) {
        size_t n = md.m->info[i].numel;
        float *h = download(dev, md.m->param[i], n);
        p[i] = malloc(n * sizeof(double));
        for (size_t k = 0; k < n; k++) p[i][k] = h[k];
        free(h);
        g[i] = download(dev, md.m->grad[i], n);
        for (size_t k = 0; k < n; k++) g[i][k] -= prior[off + k];
        off += n;
    }
    free(prior);
    ref_ctx r = { c, B, T, tok, tgt };
    double ref = ref_loss(&r, p);
    if (fabs(ref - loss) > 1e-6 * ref) fail_msg("loss %.9g, reference %.9g", loss, ref);
    uint32_t s = 12345;
    for (int i = 0; i < nt; i++) {
        size_t n = md.m->info[i].numel, idx[8];
        idx[0] = 0, idx[1] = n - 1, idx[2] = i == 0 ? (size_t)tok[3] * c->dim + 5 : n / 2;
        for (int k = 3; k < 8; k++) s = s * 1664525u + 1013904223u, idx[k] = (s >> 8) % n;
        double fd[8], mx = 0;
        for (int k = 0; k < 8; k++) {
            double v = p[i][idx[k]], eps = 1e-5;
            p[i][idx[k]] = v + eps;
            double lp = ref_loss(&r, p);
            p[i][idx[k]] = v - eps;
            double lm = ref_loss(&r, p);
            p[i][idx[k]] = v;
            fd[k] = (lp - lm) / (2 * eps);
            mx = fmax(mx, fabs(fd[k]));
        }
        for (int k = 0; k < 8; k++)
            if (fabs(g[i][idx[k]] - fd[k]) > 1e-4 * mx + 1e-9)
                fail_msg("%s[%zu]: gradient %.7g, finite difference %.7g (max |fd| %.3g)", md.m->info[i].name,
                         idx[k], (double)g[i][idx[k]], fd[k], mx);
    }
    for (int i = 0; i < nt; i++) free(p[i]), free(g[i]);
    free(p), free(g);
    model_free(&md);
}

/* Oracle: with weights N(0, 0.02) the logits are near zero, so the loss is near ln V (uniform prediction):
 * within 0.1 for the tiny model and for a wider one. */
static void test_initial_loss(void **state) {
    fsc_device *dev = *state;
    fsc_gpt_config wide = { .layers = 2, .dim = 64, .heads = 4, .seq = 16, .vocab = 256 };
    const fsc_gpt_config *cs[] = { &TINY, &wide };
    for (int k = 0; k < 2; k++) {
        const fsc_gpt_config *c = cs[k];
        int B = 2, T = c->seq;
        int32_t *tok = malloc(B * T * sizeof(int32_t)), *tgt = malloc(B * T * sizeof(int32_t));
        make_batch(tok, tgt, B, T, c->vocab, 2);
        model md;
        model_init(&md, dev, c, 3);
        fsc_gpt_acts *a;
        double loss;
        assert_ok(fsc_gpt_acts_create(md.m, &(fsc_gpt_acts_opts){ .B = B, .T = T, .last = c->layers + 1 }, &a));
        assert_ok(fsc_gpt_acts_set_batch(a, tok, tgt));
        assert_ok(fsc_gpt_forward(md.m, a, NULL, &loss));
        loss /= B * T;
        if (fabs(loss - log(c->vocab)) > 0.1) fail_msg("V=%d: initial loss %g, ln V %g", c->vocab, loss, log(c->vocab));
        fsc_gpt_acts_free(a);
        model_free(&md);
        free(tok), free(tgt);
    }
}

/* ---- bit-exactness ------------------------------------------------------------------------------- */
static const fsc_gpt_config THREE = { .layers = 3, .dim = 16, .heads = 2, .seq = 8, .vocab = 32 };

/* Loss and every gradient of the whole model in one record, for comparisons (grads: host, P floats). */
static double reference_run(fsc_device *dev, const fsc_gpt_config *c, int B, const int32_t *tok,
                            const int32_t *tgt, float **grads) {
    model md;
    model_init(&md, dev, c, 5);
    double loss = fwd_bwd(&md, &(fsc_gpt_acts_opts){ .B = B, .T = c->seq, .last = c->layers + 1 }, tok, tgt);
    *grads = download(dev, md.grads, md.P);
    model_free(&md);
    return loss;
}

/* Oracle: activation checkpointing recomputes with the same kernels on the same inputs, so losses and
 * gradients equal those without checkpointing bit for bit, with and without offloaded inputs, over two
 * accumulated micro-batches; and the records hold fewer activation bytes (checkpoint < normal, offload <
 * checkpoint). */
static void test_checkpoint_bits(void **state) {
    fsc_device *dev = *state;
    const fsc_gpt_config *c = &THREE;
    enum { B = 2, T = 8 };
    int32_t tok[2][B * T], tgt[2][B * T];
    make_batch(tok[0], tgt[0], B, T, c->vocab, 10);
    make_batch(tok[1], tgt[1], B, T, c->vocab, 11);
    double loss[3][2];
    float *grads[3];
    size_t bytes[3];
    for (int mode = 0; mode < 3; mode++) {
        model md;
        model_init(&md, dev, c, 5);
        fsc_gpt_acts *a;
        fsc_gpt_acts_opts o = { .B = B, .T = T, .last = c->layers + 1, .checkpoint = mode >= 1,
                                .offload_inputs = mode == 2 };
        assert_ok(fsc_gpt_acts_create(md.m, &o, &a));
        bytes[mode] = fsc_gpt_acts_bytes(a);
        for (int mb = 0; mb < 2; mb++) {
            assert_ok(fsc_gpt_acts_set_batch(a, tok[mb], tgt[mb]));
            assert_ok(fsc_gpt_forward(md.m, a, NULL, &loss[mode][mb]));
            assert_ok(fsc_gpt_backward(md.m, a, NULL, 1.0f / (2 * B * T)));
        }
        grads[mode] = download(dev, md.grads, md.P);
        fsc_gpt_acts_free(a);
        model_free(&md);
    }
    for (int mode = 1; mode < 3; mode++) {
        assert_memory_equal(loss[0], loss[mode], sizeof loss[0]);
        assert_bits_equal(grads[0], grads[mode], fsc_gpt_num_params(c), mode == 1 ? "checkpoint" : "offload");
        free(grads[mode]);
    }
    free(grads[0]);
    assert_true(bytes[1] < bytes[0]);
    assert_true(bytes[2] < bytes[1]);
    assert_err(fsc_gpt_acts_create(NULL, &(fsc_gpt_acts_opts){ .B = 1, .T = 1 }, &(fsc_gpt_acts *){ 0 }),
               FSC_ERR_INVALID, "NULL");
}

/* Records in flight (a pipeline's) share the model's scratch, the layers' work and the gradients between
 * layers, which no pass leaves anything in: two records, the second's forward between the first's forward and
 * backward, give one record's losses and gradients bit for bit; the scratch is held once (workspace), not in
 * each record's bytes, and goes with the last record. */
static void test_records_share_scratch(void **state) {
    fsc_device *dev = *state;
    const fsc_gpt_config *c = &THREE;
    enum { B = 2, T = 8 };
    int32_t tok[2][B * T], tgt[2][B * T];
    make_batch(tok[0], tgt[0], B, T, c->vocab, 12);
    make_batch(tok[1], tgt[1], B, T, c->vocab, 13);
    fsc_gpt_acts_opts o = { .B = B, .T = T, .last = c->layers + 1 };
    double loss[2][2];
    float *grads[2];
    for (int two = 0; two < 2; two++) {
        model md;
        model_init(&md, dev, c, 5);
        const size_t w0 = fsc_device_current_bytes(dev, FSC_TAG_WORKSPACE);
        const size_t a0 = fsc_device_current_bytes(dev, FSC_TAG_ACTS);
        fsc_gpt_acts *a[2];
        assert_ok(fsc_gpt_acts_create(md.m, &o, &a[0]));
        const size_t w1 = fsc_device_current_bytes(dev, FSC_TAG_WORKSPACE);
        assert_true(w1 > w0);
        assert_int_equal(fsc_device_current_bytes(dev, FSC_TAG_ACTS) - a0, fsc_gpt_acts_bytes(a[0]));
        if (two) {
            assert_ok(fsc_gpt_acts_create(md.m, &o, &a[1]));
            assert_int_equal(fsc_device_current_bytes(dev, FSC_TAG_WORKSPACE), w1); /* one scratch for both */
            assert_int_equal(fsc_device_current_bytes(dev, FSC_TAG_ACTS) - a0,
                             fsc_gpt_acts_bytes(a[0]) + fsc_gpt_acts_bytes(a[1]));
            for (int mb = 0; mb < 2; mb++) {
                assert_ok(fsc_gpt_acts_set_batch(a[mb], tok[mb], tgt[mb]));
                assert_ok(fsc_gpt_forward(md.m, a[mb], NULL, &loss[two][mb]));
            }
            for (int mb = 0; mb < 2; mb++) assert_ok(fsc_gpt_backward(md.m, a[mb], NULL, 1.0f / (2 * B * T)));
            fsc_gpt_acts_free(a[1]);
            assert_int_equal(fsc_device_current_bytes(dev, FSC_TAG_WORKSPACE), w1); /* a[0] still lives */
        } else {
            for (int mb = 0; mb < 2; mb++) {
                assert_ok(fsc_gpt_acts_set_batch(a[0], tok[mb], tgt[mb]));
                assert_ok(fsc_gpt_forward(md.m, a[0], NULL, &loss[two][mb]));
                assert_ok(fsc_gpt_backward(md.m, a[0], NULL, 1.0f / (2 * B * T)));
            }
        }
        grads[two] = download(dev, md.grads, md.P);
        fsc_gpt_acts_free(a[0]);
        assert_int_equal(fsc_device_current_bytes(dev, FSC_TAG_WORKSPACE), w0);
        model_free(&md);
    }
    assert_memory_equal(loss[0], loss[1], sizeof loss[0]);
    assert_bits_equal(grads[0], grads[1], fsc_gpt_num_params(c), "two records in flight");
    free(grads[0]), free(grads[1]);
}

/* A hook that runs the backward of another record of the same model in the middle of a backward (which the shared
 * scratch cannot serve: it would overwrite the gradient the outer pass hands to its next layer). */
typedef struct { fsc_gpt *m; fsc_gpt_acts *other; int at, calls; fsc_status nested; char msg[256]; } nest_ctx;
static fsc_status nest_hook(void *ctx, int layer) {
    nest_ctx *n = ctx;
    if (layer == n->at && n->calls++ == 0) {
        n->nested = fsc_gpt_backward(n->m, n->other, NULL, 1.0f);
        snprintf(n->msg, sizeof n->msg, "%s", n->nested == FSC_OK ? "" : fsc_last_error());
    }
    return FSC_OK;
}

/* One pass at a time per model: a pass started from a hook of another pass of the same model is refused with a
 * state error naming the cause, and the outer pass then gives the bits it gives without the hook. */
static void test_nested_pass_refused(void **state) {
    fsc_device *dev = *state;
    const fsc_gpt_config *c = &THREE;
    enum { B = 2, T = 8 };
    int32_t tok[2][B * T], tgt[2][B * T];
    make_batch(tok[0], tgt[0], B, T, c->vocab, 31);
    make_batch(tok[1], tgt[1], B, T, c->vocab, 32);
    const fsc_gpt_acts_opts o = { .B = B, .T = T, .last = c->layers + 1 };
    float *grads[2];
    for (int nest = 0; nest < 2; nest++) {
        model md;
        model_init(&md, dev, c, 5);
        fsc_gpt_acts *a, *b;
        assert_ok(fsc_gpt_acts_create(md.m, &o, &a));
        assert_ok(fsc_gpt_acts_create(md.m, &o, &b));
        assert_ok(fsc_gpt_acts_set_batch(a, tok[0], tgt[0]));
        assert_ok(fsc_gpt_acts_set_batch(b, tok[1], tgt[1]));
        double loss;
        assert_ok(fsc_gpt_forward(md.m, a, NULL, &loss));
        assert_ok(fsc_gpt_forward(md.m, b, NULL, &loss));
        nest_ctx n = { .m = md.m, .other = b, .at = 2, .nested = FSC_OK };
        const fsc_gpt_hooks h = { .ctx = &n, .post_backward = nest ? nest_hook : NULL };
        assert_ok(fsc_gpt_backward(md.m, a, &h, 1.0f / (B * T)));
        if (nest) {
            assert_int_equal(n.calls, 1);
            assert_int_equal(n.nested, FSC_ERR_STATE);
            assert_non_null(strstr(n.msg, "in progress"));
        }
        grads[nest] = download(dev, md.grads, md.P);
        fsc_gpt_acts_free(b);
        fsc_gpt_acts_free(a);
        model_free(&md);
    }
    assert_bits_equal(grads[0], grads[1], fsc_gpt_num_params(c), "a nested pass refused");
    free(grads[0]), free(grads[1]);
}

/* Oracle: a pipeline of two stages, layers [0, k] and [k+1, L+1], each its own model object over the same
 * parameters with its own gradients, with the boundary activation, the boundary gradient and dwte_head
 * handed over by copies, gives the whole model's loss and gradients bit for bit, for every split k; a
 * stage leaves the other stage's gradients untouched (zero). */
static void test_split_ranges(void **state) {
    fsc_device *dev = *state;
    const fsc_gpt_config *c = &TINY;
    enum { B = 2, T = 8 };
    int L = c->layers;
    int32_t tok[B * T], tgt[B * T];
    make_batch(tok, tgt, B, T, c->vocab, 20);
    float *want;
    double want_loss = reference_run(dev, c, B, tok, tgt, &want);
    size_t btc = (size_t)B * T * c->dim;
    for (int k = 0; k <= L; k++) {
        model s1, s2;
        model_init(&s1, dev, c, 5);
        model_init(&s2, dev, c, 5);
        fsc_gpt_acts *a1, *a2;
        assert_ok(fsc_gpt_acts_create(s1.m, &(fsc_gpt_acts_opts){ .B = B, .T = T, .first = 0, .last = k }, &a1));
        assert_ok(fsc_gpt_acts_create(s2.m, &(fsc_gpt_acts_opts){ .B = B, .T = T, .first = k + 1, .last = L + 1 }, &a2));
        assert_null(fsc_gpt_acts_input(a1));
        assert_null(fsc_gpt_acts_grad_input(a1));
        assert_null(fsc_gpt_acts_output(a2));
        assert_null(fsc_gpt_acts_grad_output(a2));
        assert_err(fsc_gpt_acts_set_batch(a2, NULL, NULL), FSC_ERR_INVALID, "targets are NULL");
        assert_ok(fsc_gpt_acts_set_batch(a1, tok, NULL));
        assert_ok(fsc_gpt_acts_set_batch(a2, NULL, tgt));
        double l1, l2;
        assert_ok(fsc_gpt_forward(s1.m, a1, NULL, &l1));
        assert_true(l1 == 0.0);
        assert_ok(fsc_device_copy(dev, fsc_gpt_acts_input(a2), fsc_gpt_acts_output(a1), btc * sizeof(float)));
        assert_ok(fsc_gpt_forward(s2.m, a2, NULL, &l2));
        assert_memory_equal(&l2, &want_loss, sizeof l2);
        float dscale = 1.0f / (B * T);
        assert_ok(fsc_gpt_backward(s2.m, a2, NULL, dscale));
        assert_ok(fsc_device_copy(dev, fsc_gpt_acts_grad_output(a1), fsc_gpt_acts_grad_input(a2), btc * sizeof(float)));
        assert_ok(fsc_device_copy(dev, s1.m->dwte_head, s2.m->dwte_head, (size_t)c->vocab * c->dim * sizeof(float)));
        assert_ok(fsc_gpt_backward(s1.m, a1, NULL, dscale));
        float *g1 = download(dev, s1.grads, s1.P), *g2 = download(dev, s2.grads, s2.P);
        size_t off = 0;
        for (int i = 0; i < s1.m->n_tensors; i++) {
            size_t n = s1.m->info[i].numel;
            int in1 = s1.m->info[i].layer <= k;
            assert_bits_equal(in1 ? g1 + off : g2 + off, want + off, n, s1.m->info[i].name);
            for (size_t j = 0; j < n; j++) assert_true((in1 ? g2 : g1)[off + j] == 0.0f);
            off += n;
        }
        free(g1), free(g2);
        fsc_gpt_acts_free(a1), fsc_gpt_acts_free(a2);
        model_free(&s1), model_free(&s2);
    }
    free(want);
}

/* Oracle: two runs from the same seed give the same loss and gradient bits, also on a device with a
 * different thread count (kernels must not depend on it). */
static void test_determinism(void **state) {
    fsc_device *dev = *state, *dev4;
    const fsc_gpt_config *c = &THREE;
    enum { B = 3, T = 8 };
    int32_t tok[B * T], tgt[B * T];
    make_batch(tok, tgt, B, T, c->vocab, 30);
    float *g1, *g2, *g3;
    double l1 = reference_run(dev, c, B, tok, tgt, &g1), l2 = reference_run(dev, c, B, tok, tgt, &g2);
    assert_ok(fsc_device_create("cpu", &(fsc_device_opts){ .threads = 4 }, &dev4));
    double l3 = reference_run(dev4, c, B, tok, tgt, &g3);
    fsc_device_free(dev4);
    assert_memory_equal(&l1, &l2, sizeof l1);
    assert_memory_equal(&l1, &l3, sizeof l1);
    assert_bits_equal(g1, g2, fsc_gpt_num_params(c), "second run");
    assert_bits_equal(g1, g3, fsc_gpt_num_params(c), "4 threads");
    free(g1), free(g2), free(g3);
}

/* Oracle: causal attention with each head's products whole (how GPUs run it, fsc_device_whole_products) and in
 * blocks of 32 query rows (the CPU's) agree to float rounding, forward and backward, at a T of 70 (three blocks,
 * the last partial); both forwards match the double reference d_attention. */
static void test_attention_whole_products(void **state) {
    fsc_device *dev = *state;
    enum { B = 2, T = 70, C = 16, NH = 2 };
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C;
    size_t ns = fsc_attention_saved_floats(B, T, C, NH), nw = fsc_attention_work_floats(B, T, C, NH);
    float *qkv = malloc(nqkv * sizeof(float)), *dout = malloc(nout * sizeof(float));
    double *dq = malloc(nqkv * sizeof(double)), *ref = malloc(nout * sizeof(double));
    uint32_t r = 12345;
    for (size_t i = 0; i < nqkv; i++) {
        r ^= r << 13, r ^= r >> 17, r ^= r << 5;
        qkv[i] = (float)((double)r / 4294967296.0 * 2 - 1), dq[i] = qkv[i];
    }
    for (size_t i = 0; i < nout; i++) {
        r ^= r << 13, r ^= r >> 17, r ^= r << 5;
        dout[i] = (float)((double)r / 4294967296.0 - 0.5);
    }
    d_attention(ref, dq, B, T, C, NH);
    float *out[2], *dqkv[2];
    for (int whole = 0; whole < 2; whole++) {
        float *saved, *work, *dx, *x, *dy, *o;
        assert_ok(fsc_device_alloc(dev, FSC_TAG_ACTS, ns * sizeof(float), (void **)&saved));
        assert_ok(fsc_device_alloc(dev, FSC_TAG_WORKSPACE, nw * sizeof(float), (void **)&work));
        assert_ok(fsc_device_alloc(dev, FSC_TAG_ACTS, nqkv * sizeof(float), (void **)&x));
        assert_ok(fsc_device_alloc(dev, FSC_TAG_ACTS, nqkv * sizeof(float), (void **)&dx));
        assert_ok(fsc_device_alloc(dev, FSC_TAG_ACTS, nout * sizeof(float), (void **)&o));
        assert_ok(fsc_device_alloc(dev, FSC_TAG_ACTS, nout * sizeof(float), (void **)&dy));
        assert_ok(fsc_device_upload(dev, x, qkv, nqkv * sizeof(float)));
        assert_ok(fsc_device_upload(dev, dy, dout, nout * sizeof(float)));
        fsc_attention_rec rec;
        fsc_attention_rec_bind(&rec, saved, B, T, C, NH);
        fsc_device_set_whole_products(dev, whole);
        assert_int_equal(fsc_device_whole_products(dev), whole);
        assert_ok(fsc_attention_forward(dev, o, &rec, x, work));
        assert_ok(fsc_attention_backward(dev, dx, &rec, dy, work));
        fsc_device_set_whole_products(dev, 0);
        out[whole] = download(dev, o, nout);
        dqkv[whole] = download(dev, dx, nqkv);
        for (size_t i = 0; i < nout; i++) assert_true(fabs(out[whole][i] - ref[i]) <= 1e-5);
        fsc_device_release(dev, saved), fsc_device_release(dev, work), fsc_device_release(dev, x);
        fsc_device_release(dev, dx), fsc_device_release(dev, o), fsc_device_release(dev, dy);
    }
    double gmax = 0, gdiff = 0;
    for (size_t i = 0; i < nqkv; i++) {
        gmax = fmax(gmax, fabs(dqkv[0][i]));
        gdiff = fmax(gdiff, fabs(dqkv[0][i] - dqkv[1][i]));
    }
    assert_true(gmax > 1e-3);
    assert_true(gdiff <= 1e-5 * gmax);
    free(qkv), free(dout), free(dq), free(ref);
    for (int i = 0; i < 2; i++) free(out[i]), free(dqkv[i]);
    /* the flag decides the calls: on the counting device (which counts what the form would launch) a forward and
     * backward of 3 row blocks is 3 x NH x 6 products, 2 softmax calls and the copy of qkv into the record, whole
     * products NH x 6 and the same 3 */
    fsc_device *cd;
    assert_ok(fsc_device_create("count", NULL, &cd));
    assert_int_equal(fsc_device_whole_products(dev), 0);
    assert_int_equal(fsc_device_whole_products(cd), 0);
    uint64_t calls[2];
    for (int whole = 0; whole < 2; whole++) {
        float *saved, *work, *x, *o;
        assert_ok(fsc_device_alloc(cd, FSC_TAG_ACTS, ns * sizeof(float), (void **)&saved));
        assert_ok(fsc_device_alloc(cd, FSC_TAG_WORKSPACE, nw * sizeof(float), (void **)&work));
        assert_ok(fsc_device_alloc(cd, FSC_TAG_ACTS, nqkv * sizeof(float), (void **)&x));
        assert_ok(fsc_device_alloc(cd, FSC_TAG_ACTS, nout * sizeof(float), (void **)&o));
        fsc_attention_rec rec;
        fsc_attention_rec_bind(&rec, saved, B, T, C, NH);
        fsc_device_set_whole_products(cd, whole);
        uint64_t c0 = fsc_count_calls(cd);
        assert_ok(fsc_attention_forward(cd, o, &rec, x, work));
        assert_ok(fsc_attention_backward(cd, x, &rec, o, work));
        calls[whole] = fsc_count_calls(cd) - c0;
        fsc_device_release(cd, saved), fsc_device_release(cd, work), fsc_device_release(cd, x);
        fsc_device_release(cd, o);
    }
    assert_int_equal(calls[0], 3 * NH * 6 + 3);
    assert_int_equal(calls[1], NH * 6 + 3);
    fsc_device_free(cd);
}

/* ---- hooks and errors ---------------------------------------------------------------------------- */
typedef struct { int n; int ev[64]; int fail_at; } hook_log;
static fsc_status log_ev(hook_log *h, int code) {
    if (h->n < 64) h->ev[h->n] = code;
    h->n++;
    if (code == h->fail_at) return fsc_error(FSC_ERR_COMM, "hook failed at %d", code);
    return FSC_OK;
}
static fsc_status pre_f(void *ctx, int l) { return log_ev(ctx, 100 + l); }
static fsc_status post_f(void *ctx, int l) { return log_ev(ctx, 200 + l); }
static fsc_status pre_b(void *ctx, int l) { return log_ev(ctx, 300 + l); }
static fsc_status post_b(void *ctx, int l) { return log_ev(ctx, 400 + l); }

/* Oracle: hooks run in exact layer order (pre/post forward 0..L+1, pre/post backward L+1..0); a failing
 * hook stops the pass with its status; a parameter that is not materialized, backward without forward,
 * tokens outside the vocabulary and impossible layer ranges are refused with messages naming them. */
static void test_hooks_and_errors(void **state) {
    fsc_device *dev = *state;
    const fsc_gpt_config *c = &TINY;
    enum { B = 1, T = 8 }; /* records run the context (T = seq) */
    int L = c->layers;
    int32_t tok[B * T], tgt[B * T];
    make_batch(tok, tgt, B, T, c->vocab, 40);
    model md;
    model_init(&md, dev, c, 5);
    fsc_gpt_acts *a;
    assert_ok(fsc_gpt_acts_create(md.m, &(fsc_gpt_acts_opts){ .B = B, .T = T, .last = L + 1 }, &a));
    double loss;
    assert_err(fsc_gpt_forward(md.m, a, NULL, &loss), FSC_ERR_STATE, "set_batch");
    assert_ok(fsc_gpt_acts_set_batch(a, tok, tgt));
    assert_err(fsc_gpt_backward(md.m, a, NULL, 1.0f), FSC_ERR_STATE, "no forward");
    hook_log log = { .fail_at = -1 };
    fsc_gpt_hooks h = { &log, pre_f, post_f, pre_b, post_b };
    assert_ok(fsc_gpt_forward(md.m, a, &h, &loss));
    assert_ok(fsc_gpt_backward(md.m, a, &h, 1.0f));
    assert_int_equal(log.n, 4 * (L + 2));
    for (int l = 0; l <= L + 1; l++) {
        assert_int_equal(log.ev[2 * l], 100 + l);
        assert_int_equal(log.ev[2 * l + 1], 200 + l);
        assert_int_equal(log.ev[2 * (L + 2) + 2 * l], 300 + (L + 1 - l));
        assert_int_equal(log.ev[2 * (L + 2) + 2 * l + 1], 400 + (L + 1 - l));
    }
    assert_err(fsc_gpt_backward(md.m, a, &h, 1.0f), FSC_ERR_STATE, "once per forward");
    log = (hook_log){ .fail_at = 201 };
    assert_err(fsc_gpt_forward(md.m, a, &h, &loss), FSC_ERR_COMM, "hook failed at 201");
    assert_int_equal(log.n, 4); /* pre 0, post 0, pre 1, post 1 */
    assert_err(fsc_gpt_backward(md.m, a, &h, 1.0f), FSC_ERR_STATE, "no forward");
    /* a parameter that is not materialized (as FSDP leaves a resharded unit) */
    float *saved = md.m->param[fsc_gpt_block_first_tensor(c, 1) + FSC_B_FC_W];
    md.m->param[fsc_gpt_block_first_tensor(c, 1) + FSC_B_FC_W] = NULL;
    assert_err(fsc_gpt_forward(md.m, a, NULL, &loss), FSC_ERR_STATE, "h.1.mlp.c_fc.weight is not materialized");
    md.m->param[fsc_gpt_block_first_tensor(c, 1) + FSC_B_FC_W] = saved;
    assert_ok(fsc_gpt_forward(md.m, a, NULL, &loss));
    md.m->grad[FSC_P_WPE] = NULL;
    assert_err(fsc_gpt_backward(md.m, a, NULL, 1.0f), FSC_ERR_STATE, "gradient of wpe.weight");
    fsc_gpt_bind_flat(md.m, md.params, md.grads);
    int32_t badtok[B * T];
    memcpy(badtok, tok, sizeof tok);
    badtok[2] = c->vocab;
    assert_err(fsc_gpt_acts_set_batch(a, badtok, tgt), FSC_ERR_INVALID, "tokens[2] = 32");
    badtok[2] = -1;
    assert_err(fsc_gpt_acts_set_batch(a, tok, badtok), FSC_ERR_INVALID, "targets[2] = -1");
    fsc_gpt_acts_free(a);
    fsc_gpt_acts *x = NULL;
    assert_err(fsc_gpt_acts_create(md.m, &(fsc_gpt_acts_opts){ .B = 1, .T = 9, .last = 3 }, &x), FSC_ERR_INVALID, "seq 8");
    assert_err(fsc_gpt_acts_create(md.m, &(fsc_gpt_acts_opts){ .B = 1, .T = 8, .first = 2, .last = 4 }, &x),
               FSC_ERR_INVALID, "[2, 4]");
    assert_err(fsc_gpt_acts_create(md.m, &(fsc_gpt_acts_opts){ .B = 1, .T = 8, .first = 2, .last = 1 }, &x),
               FSC_ERR_INVALID, "range");
    assert_err(fsc_gpt_acts_create(md.m, &(fsc_gpt_acts_opts){ .B = 1, .T = 8, .last = 3, .offload_inputs = 1 }, &x),
               FSC_ERR_INVALID, "needs checkpoint");
    assert_null(x);
    model_free(&md);
}

/* ---- learning ------------------------------------------------------------------------------------ */

/* Oracle: on a small repeated text the model must learn to use context. The conditional entropy of the
 * next character given only the current one (H1, computed here from the text) is the lowest mean loss any
 * model that looks one character back can reach; the initial loss is ln V. After 200 AdamW steps the
 * mean loss of the last 10 steps must be below H1 / 2: only a model that uses longer context gets there
 * (every window position after the first few is fully determined by its context). */
static void test_learns_repeated_text(void **state) {
    fsc_device *dev = *state;
    const char *text = "the quick brown fox jumps over the lazy dog. ";
    const fsc_gpt_config c = { .layers = 2, .dim = 32, .heads = 4, .seq = 16, .vocab = 32 };
    enum { B = 4, T = 16, STEPS = 200 };
    int n = (int)strlen(text);
    int32_t *ids = malloc(n * sizeof(int32_t));
    for (int i = 0; i < n; i++) ids[i] = text[i] == ' ' ? 26 : text[i] == '.' ? 27 : text[i] - 'a';
    /* H1 = H(next | current) over the periodic text, in nats */
    double cnt[32][32] = { { 0 } }, row[32] = { 0 }, h1 = 0;
    for (int i = 0; i < n; i++) cnt[ids[i]][ids[(i + 1) % n]] += 1, row[ids[i]] += 1;
    for (int a = 0; a < 32; a++)
        for (int b = 0; b < 32; b++)
            if (cnt[a][b] > 0) h1 -= cnt[a][b] / n * log(cnt[a][b] / row[a]);
    model md;
    model_init(&md, dev, &c, 9);
    fsc_optim *opt;
    assert_ok(fsc_optim_create(dev, &(fsc_optim_config){ .kind = FSC_OPT_ADAMW, .lr = 1e-2f }, &opt));
    assert_ok(fsc_optim_add(opt, md.params, md.grads, md.P, NULL));
    fsc_gpt_acts *a;
    assert_ok(fsc_gpt_acts_create(md.m, &(fsc_gpt_acts_opts){ .B = B, .T = T, .last = c.layers + 1 }, &a));
    int32_t tok[B * T], tgt[B * T];
    double first = 0, last10 = 0;
    for (int step = 0; step < STEPS; step++) {
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                int at = (step * 7 + b * 11 + t) % n;
                tok[b * T + t] = ids[at];
                tgt[b * T + t] = ids[(at + 1) % n];
            }
        double loss;
        assert_ok(fsc_device_memset(dev, md.grads, 0, md.P * sizeof(float)));
        assert_ok(fsc_gpt_acts_set_batch(a, tok, tgt));
        assert_ok(fsc_gpt_forward(md.m, a, NULL, &loss));
        assert_ok(fsc_gpt_backward(md.m, a, NULL, 1.0f / (B * T)));
        assert_ok(fsc_optim_step(opt));
        loss /= B * T;
        if (step == 0) first = loss;
        if (step >= STEPS - 10) last10 += loss / 10;
    }
    if (!(last10 < 0.5 * h1))
        fail_msg("loss after %d steps %.4f, not below H1/2 = %.4f (first %.4f)", STEPS, last10, 0.5 * h1, first);
    fsc_gpt_acts_free(a);
    fsc_optim_free(opt);
    model_free(&md);
    free(ids);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_and_info),
        cmocka_unit_test(test_init_values),
        cmocka_unit_test(test_model_init_values),
        cmocka_unit_test(test_gradients),
        cmocka_unit_test(test_initial_loss),
        cmocka_unit_test(test_checkpoint_bits),
        cmocka_unit_test(test_records_share_scratch),
        cmocka_unit_test(test_nested_pass_refused),
        cmocka_unit_test(test_split_ranges),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_attention_whole_products),
        cmocka_unit_test(test_hooks_and_errors),
        cmocka_unit_test(test_learns_repeated_text),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
