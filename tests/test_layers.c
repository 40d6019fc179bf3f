/* The layers of layers.h and the sequential model on one device (lib/layers).
 *
 * Oracles:
 *  - every built-in layer's backward (input gradient and each parameter gradient) equals central finite
 *    differences of its float forward, within 2e-2 of the largest gradient (eps 1e-2; the function is
 *    sum(dout * out), for loss layers dscale * sum(losses)); input gradients overwrite (the buffer starts as NaN),
 *    parameter gradients accumulate (they start at 0.25); the transformer blocks (GPT-2 packed and separate,
 *    Llama), the token embedding and the LM head after a final RMSNorm or LayerNorm likewise;
 *  - a sequential model (linear, GELU, a tied transposed linear, MSE) run through the model operations equals the
 *    same composition written with the nn.h modules bit for bit (loss and every gradient), with and without layer
 *    checkpointing, over two micro-batches accumulating (the tied buffer is overwritten per micro-batch), and
 *    calls the hooks around every layer in order;
 *  - bad declarations are refused with a message (chains that do not fit, a tie to no tensor, a shape mismatch,
 *    block options of the other flavour or impossible shapes, initial values that are not finite); set_batch refuses a token or a target outside the
 *    vocabulary, naming the element (the layers' check_input / check_target). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "testutil.h"
#include <limits.h>
#include <math.h>

static fsc_device *g_dev;

static int setup(void **st) {
    (void)st;
    return fsc_device_create("cpu", &(fsc_device_opts){ .threads = 1 }, &g_dev) == FSC_OK ? 0 : -1;
}
static int teardown(void **st) {
    (void)st;
    fsc_device_free(g_dev);
    return 0;
}

static uint64_t rs = 0x2545F4914F6CDD1Dull;
static float urand(void) { /* [-1, 1) */
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (float)((double)(rs >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static int32_t irand(int n) { /* [0, n) */
    int32_t v = (int32_t)((urand() + 1.0f) * 0.5f * (float)n);
    return v < n ? v : n - 1;
}

static void *dalloc(size_t bytes) {
    void *p = NULL;
    assert_ok(fsc_device_calloc(g_dev, FSC_TAG_ACTS, bytes ? bytes : 4, &p));
    return p;
}
static void up(void *d, const void *h, size_t bytes) { assert_ok(fsc_device_upload(g_dev, d, h, bytes)); }
static void down(void *h, const void *d, size_t bytes) { assert_ok(fsc_device_download(g_dev, h, d, bytes)); }

/* ---- finite differences of one layer -------------------------------------------------------------------- */

typedef struct {
    fsc_layer *l;
    int B;
    int token_vocab;   /* > 0: the input is int32 tokens below it */
    int target_vocab;  /* > 0: the target is int32 classes below it; 0: floats */
} fd_case;

typedef struct {
    const fd_case *fc;
    int np;
    float *hp[FSC_LAYER_MAX_PARAMS], *dp[FSC_LAYER_MAX_PARAMS], *dg[FSC_LAYER_MAX_PARAMS];
    void *hin, *din, *dtarget, *rec, *work;
    float *dout_h, *dout, *out, *out_h;
    size_t nin, nout; /* floats of input (0 for tokens), of output */
} fd_state;

static fsc_layer_call call_of(fd_state *s, float dscale) {
    return (fsc_layer_call){ .dev = g_dev, .B = s->fc->B, .param = (const float *const *)s->dp,
                             .grad = s->dg, .rec = s->rec, .work = s->work, .target = s->dtarget, .dscale = dscale };
}

/* sum(dout * out), or dscale * sum(out) for a loss layer, in double */
static double objective(fd_state *s) {
    fsc_layer_call c = call_of(s, 1.0f);
    assert_ok(s->fc->l->ops->forward(s->fc->l, &c, s->out, s->din));
    down(s->out_h, s->out, s->nout * sizeof(float));
    double f = 0;
    for (size_t i = 0; i < s->nout; i++) f += (s->fc->l->loss_terms ? 0.75 : (double)s->dout_h[i]) * s->out_h[i];
    return f;
}

/* d objective / d x[k] for the host array x mirrored at device dx */
static double central(fd_state *s, float *x, float *dx, size_t k) {
    const float eps = 1e-2f, v = x[k];
    x[k] = v + eps;
    up(dx + k, x + k, sizeof(float));
    double fp = objective(s);
    x[k] = v - eps;
    up(dx + k, x + k, sizeof(float));
    double fm = objective(s);
    x[k] = v;
    up(dx + k, x + k, sizeof(float));
    return (fp - fm) / (2.0 * (double)eps);
}

static void compare(const char *what, const char *name, const float *got, const double *fd, size_t n, double offset) {
    double mx = 0;
    for (size_t k = 0; k < n; k++) mx = fmax(mx, fabs(fd[k]));
    for (size_t k = 0; k < n; k++)
        if (!(fabs((double)got[k] - offset - fd[k]) <= 2e-2 * mx + 1e-4))
            fail_msg("%s %s: element %zu: backward %.7g, finite difference %.7g (max |fd| %.3g)", what, name, k,
                     (double)got[k] - offset, fd[k], mx);
}

static void check_layer(const fd_case *fc) {
    const fsc_layer *l = fc->l;
    fd_state s = { .fc = fc, .np = l->n_params };
    const int B = fc->B;
    for (int k = 0; k < s.np; k++) {
        const size_t n = l->params[k].numel;
        s.hp[k] = malloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++) s.hp[k][i] = 0.5f * urand() + (l->params[k].init.kind == FSC_INIT_CONST ? l->params[k].init.value : 0.0f);
        s.dp[k] = dalloc(n * sizeof(float));
        up(s.dp[k], s.hp[k], n * sizeof(float));
        float *g0 = malloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++) g0[i] = 0.25f;
        s.dg[k] = dalloc(n * sizeof(float));
        up(s.dg[k], g0, n * sizeof(float));
        free(g0);
    }
    const size_t inb = (size_t)B * l->in_bytes;
    s.hin = malloc(inb);
    if (fc->token_vocab) {
        for (size_t i = 0; i < inb / 4; i++) ((int32_t *)s.hin)[i] = irand(fc->token_vocab);
    } else {
        s.nin = inb / sizeof(float);
        for (size_t i = 0; i < s.nin; i++) ((float *)s.hin)[i] = urand();
    }
    s.din = dalloc(inb);
    up(s.din, s.hin, inb);
    if (l->loss_terms) {
        const size_t tb = (size_t)B * l->target_bytes;
        void *ht = malloc(tb);
        for (size_t i = 0; i < tb / 4; i++) {
            if (fc->target_vocab) ((int32_t *)ht)[i] = irand(fc->target_vocab);
            else ((float *)ht)[i] = urand();
        }
        s.dtarget = dalloc(tb);
        up(s.dtarget, ht, tb);
        free(ht);
    }
    s.rec = dalloc(l->ops->rec_bytes ? l->ops->rec_bytes(l, B) : 0);
    s.work = dalloc(l->ops->work_bytes ? l->ops->work_bytes(l, B) : 0);
    s.nout = (size_t)B * l->out_floats;
    s.out = dalloc(s.nout * sizeof(float));
    s.out_h = malloc(s.nout * sizeof(float));
    s.dout_h = malloc(s.nout * sizeof(float));
    for (size_t i = 0; i < s.nout; i++) s.dout_h[i] = urand();
    s.dout = dalloc(s.nout * sizeof(float));
    up(s.dout, s.dout_h, s.nout * sizeof(float));

    /* forward, then backward into a NaN-filled input gradient and 0.25-filled parameter gradients */
    (void)objective(&s);
    float *dinp = NULL, *dinp_h = NULL;
    if (s.nin) {
        dinp = dalloc(s.nin * sizeof(float));
        dinp_h = malloc(s.nin * sizeof(float));
        for (size_t i = 0; i < s.nin; i++) dinp_h[i] = NAN;
        up(dinp, dinp_h, s.nin * sizeof(float));
    }
    fsc_layer_call c = call_of(&s, 0.75f);
    assert_ok(l->ops->backward(l, &c, dinp, l->loss_terms ? NULL : s.dout, s.din));
    if (s.nin) {
        down(dinp_h, dinp, s.nin * sizeof(float));
        double *fd = malloc(s.nin * sizeof(double));
        for (size_t k = 0; k < s.nin; k++) fd[k] = central(&s, s.hin, s.din, k);
        compare(l->kind, "input", dinp_h, fd, s.nin, 0.0);
        free(fd);
    }
    for (int k = 0; k < s.np; k++) {
        const size_t n = l->params[k].numel;
        float *got = malloc(n * sizeof(float));
        down(got, s.dg[k], n * sizeof(float));
        double *fd = malloc(n * sizeof(double));
        for (size_t i = 0; i < n; i++) fd[i] = central(&s, s.hp[k], s.dp[k], i);
        compare(l->kind, l->params[k].name, got, fd, n, 0.25);
        free(fd), free(got);
    }
    for (int k = 0; k < s.np; k++)
        fsc_device_release(g_dev, s.dp[k]), fsc_device_release(g_dev, s.dg[k]), free(s.hp[k]);
    fsc_device_release(g_dev, dinp), free(dinp_h);
    fsc_device_release(g_dev, s.din), fsc_device_release(g_dev, s.dtarget), fsc_device_release(g_dev, s.rec);
    fsc_device_release(g_dev, s.work), fsc_device_release(g_dev, s.out), fsc_device_release(g_dev, s.dout);
    free(s.hin), free(s.out_h), free(s.dout_h);
}

/* made: the constructor's status; *lp: the layer it made (read after the call) */
static void run_case(fsc_status made, fsc_layer **lp, int B, int token_vocab, int target_vocab) {
    assert_ok(made);
    fsc_layer *l = *lp;
    fd_case fc = { .l = l, .B = B, .token_vocab = token_vocab, .target_vocab = target_vocab };
    check_layer(&fc);
    fsc_layer_free(l);
}

static void test_layer_gradients(void **st) {
    (void)st;
    fsc_layer *l;
    run_case(fsc_layer_linear(&(fsc_linear_opts){ .in = 5, .out = 3, .bias = 1 }, &l), &l, 2, 0, 0);
    run_case(fsc_layer_linear(&(fsc_linear_opts){ .rows = 3, .in = 4, .out = 6, .out_in = 1 }, &l), &l, 2, 0, 0);
    run_case(fsc_layer_gelu(7, &l), &l, 3, 0, 0);
    run_case(fsc_layer_layernorm(3, 6, &l), &l, 2, 0, 0);
    run_case(fsc_layer_rmsnorm(3, 6, 1e-5f, &l), &l, 2, 0, 0);
    run_case(fsc_layer_gelu_mlp(&(fsc_mlp_opts){ .rows = 2, .C = 4, .F = 6, .residual = 1 }, &l), &l, 2, 0, 0);
    run_case(fsc_layer_swiglu_mlp(&(fsc_mlp_opts){ .rows = 2, .C = 4, .F = 6, .residual = 1 }, &l), &l, 2, 0, 0);
    run_case(fsc_layer_swiglu_mlp(&(fsc_mlp_opts){ .rows = 3, .C = 4, .F = 5 }, &l), &l, 1, 0, 0);
    run_case(fsc_layer_attention(&(fsc_attention_opts){ .T = 4, .C = 8, .heads = 4, .kv_heads = 2, .bias = 1,
                                                        .residual = 1, .rope_theta = 10000.0f }, &l), &l, 2, 0, 0);
    run_case(fsc_layer_attention(&(fsc_attention_opts){ .T = 3, .C = 6, .heads = 2 }, &l), &l, 2, 0, 0);
    run_case(fsc_layer_embedding(4, 3, 5, &l), &l, 2, 5, 0);
    run_case(fsc_layer_lm_head(3, 4, 6, &l), &l, 2, 0, 6);
    run_case(fsc_layer_lm_head_opts(&(fsc_lm_head_opts){ .T = 3, .C = 4, .V = 6, .norm = FSC_HEAD_NORM_RMSNORM,
                                                         .eps = 1e-5f }, &l), &l, 2, 0, 6);
    run_case(fsc_layer_lm_head_opts(&(fsc_lm_head_opts){ .T = 3, .C = 4, .V = 6, .norm = FSC_HEAD_NORM_LAYERNORM },
                                    &l), &l, 2, 0, 6);
    run_case(fsc_layer_mse(4, &l), &l, 3, 0, 0);
    run_case(fsc_layer_xent(5, &l), &l, 3, 0, 5);
    run_case(fsc_layer_token_embedding(4, 3, 5, &l), &l, 2, 5, 0);
    run_case(fsc_layer_block(&(fsc_block_opts){ .kind = FSC_BLOCK_GPT2, .T = 3, .C = 8, .heads = 2 }, &l), &l, 2, 0,
             0); /* packed c_attn: the GPT's block */
    run_case(fsc_layer_block(&(fsc_block_opts){ .kind = FSC_BLOCK_GPT2, .T = 3, .C = 8, .heads = 2, .F = 12,
                                                .separate_qkv = 1 }, &l), &l, 2, 0, 0);
    run_case(fsc_layer_block(&(fsc_block_opts){ .kind = FSC_BLOCK_LLAMA, .T = 4, .C = 8, .heads = 4, .kv_heads = 2,
                                                .F = 12, .rope_theta = 10000.0f, .eps = 1e-5f }, &l), &l, 2, 0, 0);
    run_case(fsc_layer_block(&(fsc_block_opts){ .kind = FSC_BLOCK_LLAMA, .T = 3, .C = 6, .heads = 2, .F = 5,
                                                .eps = 1e-6f }, &l), &l, 1, 0, 0); /* no rotation, heads = kv */
}

/* ---- the sequential model against the same composition of nn.h modules ------------------------------------- */

enum { SD = 5, SH = 7, SB = 3 };

/* in.weight (D, H) [in, out], owned by layer 0 and read as (out, in) by layer 2 */
static fsc_model *tied_mlp(void) {
    fsc_layer *l0, *l1, *l2, *l3;
    assert_ok(fsc_layer_linear(&(fsc_linear_opts){ .in = SD, .out = SH, .bias = 1 }, &l0));
    assert_ok(fsc_layer_gelu(SH, &l1));
    assert_ok(fsc_layer_linear(&(fsc_linear_opts){ .in = SH, .out = SD, .bias = 1, .out_in = 1 }, &l2));
    assert_ok(fsc_layer_mse(SD, &l3));
    fsc_seq_layer ls[4] = { { l0, "in.", { { 0 } } }, { l1, NULL, { { 0 } } },
                            { l2, "out.", { { "weight", "in.weight" } } }, { l3, NULL, { { 0 } } } };
    fsc_model *m = NULL;
    assert_ok(fsc_seq_model_create(g_dev, ls, 4, &m));
    return m;
}

typedef struct {
    char log[64];
    int n;
} hook_log;
static fsc_status note(hook_log *h, char c, int l) {
    if (h->n < 60) h->log[h->n++] = c, h->log[h->n++] = (char)('0' + l);
    return FSC_OK;
}
static fsc_status h_pf(void *c, int l) { return note(c, 'f', l); }
static fsc_status h_qf(void *c, int l) { return note(c, 'F', l); }
static fsc_status h_pb(void *c, int l) { return note(c, 'b', l); }
static fsc_status h_qb(void *c, int l) { return note(c, 'B', l); }

static void test_seq_equals_composition(void **st) {
    (void)st;
    float x[SB * SD], y[SB * SD];
    for (int i = 0; i < SB * SD; i++) x[i] = urand(), y[i] = urand();
    for (int ckpt = 0; ckpt < 2; ckpt++) {
        fsc_model *m = tied_mlp();
        assert_int_equal(m->n_tensors, 3);
        assert_string_equal(m->info[2].name, "out.bias");
        assert_int_equal(m->info[0].nusers, 1);
        assert_int_equal(m->info[0].users[0], 2);
        assert_int_equal(m->loss_terms, SD);
        assert_int_equal(m->sample_input_bytes, SD * sizeof(float));
        float *hp[3], *p[3], *g[3], *g2[3];
        for (int t = 0; t < 3; t++) { /* the model's own initial values, as the engine would make them */
            const size_t n = m->info[t].numel;
            hp[t] = malloc(n * sizeof(float));
            m->ops->init_values(m->ctx, 7, t, 0, n, hp[t]);
            p[t] = dalloc(n * sizeof(float)), g[t] = dalloc(n * sizeof(float)), g2[t] = dalloc(n * sizeof(float));
            up(p[t], hp[t], n * sizeof(float));
            m->param[t] = p[t], m->grad[t] = g[t];
        }
        float wb[SH]; /* in.bias starts at 0: const init; in.weight normal(0, 0.02) by its full name */
        memcpy(wb, hp[1], sizeof wb);
        for (int i = 0; i < SH; i++) assert_true(wb[i] == 0.0f);
        float w0;
        fsc_rng_fill_normal(&w0, 1, 7, "in.weight", 3, 0.0f, 0.02f);
        assert_memory_equal(&w0, &hp[0][3], sizeof w0);

        fsc_model_acts *a = NULL;
        fsc_model_acts_opts o = { .B = SB, .first = 0, .last = 3, .checkpoint = ckpt };
        assert_ok(m->ops->acts_create(m->ctx, &o, &a));
        assert_ok(m->ops->set_batch(m->ctx, a, x, y));
        hook_log hl = { .n = 0 };
        fsc_model_hooks h = { &hl, h_pf, h_qf, h_pb, h_qb };
        double loss = 0;
        const float dscale = 1.0f / (SB * SD);
        assert_ok(m->ops->forward(m->ctx, a, &h, &loss));
        assert_ok(m->ops->backward(m->ctx, a, &h, dscale));
        hl.log[hl.n] = 0;
        assert_string_equal(hl.log, "f0F0f1F1f2F2f3F3b3B3b2B2b1B1b0B0");
        assert_ok(m->ops->forward(m->ctx, a, &h, &loss)); /* a second micro-batch accumulates */
        assert_ok(m->ops->backward(m->ctx, a, &h, dscale));

        /* the same by hand */
        float *dx = dalloc(sizeof x), *dy = dalloc(sizeof y), *z = dalloc(SB * SH * 4), *h1 = dalloc(SB * SH * 4);
        float *pred = dalloc(sizeof x), *ls = dalloc(SB * 4), *gp = dalloc(sizeof x), *dh = dalloc(SB * SH * 4);
        float *dz = dalloc(SB * SH * 4), *tied = dalloc(SD * SH * 4);
        up(dx, x, sizeof x), up(dy, y, sizeof y);
        fsc_linear_rec r0, r2;
        fsc_gelu_rec r1;
        fsc_mse_rec r3;
        assert_ok(fsc_linear_forward(g_dev, z, &r0, dx, p[0], p[1], SB, SD, SH, 0));
        assert_ok(fsc_gelu_forward(g_dev, h1, &r1, z, SB * SH));
        assert_ok(fsc_linear_forward(g_dev, pred, &r2, h1, p[0], p[2], SB, SH, SD, 1));
        assert_ok(fsc_mse_forward(g_dev, ls, &r3, pred, dy, SB, SD));
        float lh[SB];
        down(lh, ls, sizeof lh);
        double want = 0;
        for (int i = 0; i < SB; i++) want += lh[i];
        assert_memory_equal(&loss, &want, sizeof loss);
        for (int mb = 0; mb < 2; mb++) { /* the tied output layer's gradient overwrites the tied buffer */
            assert_ok(fsc_mse_backward(g_dev, gp, &r3, dscale));
            assert_ok(fsc_linear_backward(g_dev, dh, tied, g2[2], &r2, gp, p[0], 0.0f, 0.0f));
            assert_ok(fsc_gelu_backward(g_dev, dz, &r1, dh));
            assert_ok(fsc_residual_backward(g_dev, g2[0], NULL, tied, SD * SH));
            assert_ok(fsc_linear_backward(g_dev, NULL, g2[0], g2[1], &r0, dz, p[0], 0.0f, 1.0f));
        }
        for (int t = 0; t < 3; t++) {
            const size_t n = m->info[t].numel;
            float *ga = malloc(n * 4), *gb = malloc(n * 4);
            down(ga, g[t], n * 4), down(gb, g2[t], n * 4);
            assert_bits_equal(ga, gb, n, m->info[t].name);
            free(ga), free(gb), free(hp[t]);
            fsc_device_release(g_dev, p[t]), fsc_device_release(g_dev, g[t]), fsc_device_release(g_dev, g2[t]);
        }
        float *bufs[] = { dx, dy, z, h1, pred, ls, gp, dh, dz, tied };
        for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) fsc_device_release(g_dev, bufs[k]);
        m->ops->acts_free(m->ctx, a);
        fsc_model_free(m);
    }
}

/* Under AddressSanitizer an allocation too large for any device returns NULL, as the plain allocator's does (its
 * default is to abort the program): test_scratch_growth_failure's device runs out of memory. */
#if defined(__SANITIZE_ADDRESS__)
#define TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_ASAN 1
#endif
#endif
#ifdef TEST_ASAN
__attribute__((visibility("default"), used)) const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }
#endif

/* A user layer passing its input on, whose scratch (work_bytes) no device can hold for 4 samples or more. */
static size_t hungry_work(const fsc_layer *l, int B) { (void)l; return B >= 4 ? (size_t)1 << 62 : 64; }
static fsc_status hungry_fwd(const fsc_layer *l, const fsc_layer_call *c, float *out, const void *in) {
    FSC_TRY(fsc_device_memset(c->dev, c->work, 0, 64)); /* its scratch: there for every pass */
    return fsc_device_copy(c->dev, out, in, (size_t)c->B * l->out_floats * sizeof(float));
}
static fsc_status hungry_bwd(const fsc_layer *l, const fsc_layer_call *c, float *dinp, const float *dout,
                             const void *in) {
    (void)in;
    FSC_TRY(fsc_device_memset(c->dev, c->work, 0, 64));
    return dinp ? fsc_device_copy(c->dev, dinp, dout, (size_t)c->B * l->out_floats * sizeof(float)) : FSC_OK;
}
static const fsc_layer_ops hungry_ops = { .work_bytes = hungry_work, .forward = hungry_fwd, .backward = hungry_bwd };

/* The records of a sequential model share one scratch, grown by a larger record: a record whose growth fails
 * (out of device memory) is refused, and a record alive before keeps a working model: its passes give the loss
 * and gradients of a model that never saw the failure, bit for bit; the scratch goes with the last record. */
static void test_scratch_growth_failure(void **st) {
    (void)st;
    float x[SB * SD], y[SB * SD];
    for (int i = 0; i < SB * SD; i++) x[i] = urand(), y[i] = urand();
    double loss[2];
    float *grads[2][2];
    for (int fail = 0; fail < 2; fail++) {
        fsc_layer *l0, *l1 = calloc(1, sizeof *l1), *l2;
        assert_non_null(l1);
        assert_ok(fsc_layer_linear(&(fsc_linear_opts){ .in = SD, .out = SD, .bias = 1 }, &l0));
        snprintf(l1->kind, sizeof l1->kind, "hungry");
        l1->in_bytes = SD * sizeof(float), l1->out_floats = SD, l1->ops = &hungry_ops;
        assert_ok(fsc_layer_mse(SD, &l2));
        fsc_seq_layer ls[3] = { { l0, "in.", { { 0 } } }, { l1, NULL, { { 0 } } }, { l2, NULL, { { 0 } } } };
        fsc_model *m = NULL;
        assert_ok(fsc_seq_model_create(g_dev, ls, 3, &m));
        assert_int_equal(m->n_tensors, 2);
        float *p[2], *g[2];
        for (int t = 0; t < 2; t++) {
            const size_t n = m->info[t].numel;
            float *h = malloc(n * sizeof(float));
            m->ops->init_values(m->ctx, 7, t, 0, n, h);
            p[t] = dalloc(n * sizeof(float)), g[t] = dalloc(n * sizeof(float));
            up(p[t], h, n * sizeof(float));
            assert_ok(fsc_device_memset(g_dev, g[t], 0, n * sizeof(float)));
            m->param[t] = p[t], m->grad[t] = g[t];
            free(h);
        }
        const size_t w0 = fsc_device_current_bytes(g_dev, FSC_TAG_WORKSPACE);
        fsc_model_acts *a = NULL, *b = NULL;
        assert_ok(m->ops->acts_create(m->ctx, &(fsc_model_acts_opts){ .B = SB, .first = 0, .last = 2 }, &a));
        if (fail) {
            assert_err(m->ops->acts_create(m->ctx, &(fsc_model_acts_opts){ .B = 4, .first = 0, .last = 2 }, &b),
                       FSC_ERR_NOMEM, "workspace");
            assert_null(b);
        }
        assert_ok(m->ops->set_batch(m->ctx, a, x, y));
        assert_ok(m->ops->forward(m->ctx, a, &(fsc_model_hooks){ 0 }, &loss[fail]));
        assert_ok(m->ops->backward(m->ctx, a, &(fsc_model_hooks){ 0 }, 1.0f / (SB * SD)));
        for (int t = 0; t < 2; t++) {
            const size_t n = m->info[t].numel;
            grads[fail][t] = malloc(n * sizeof(float));
            down(grads[fail][t], g[t], n * sizeof(float));
            fsc_device_release(g_dev, p[t]), fsc_device_release(g_dev, g[t]);
        }
        m->ops->acts_free(m->ctx, a);
        assert_int_equal(fsc_device_current_bytes(g_dev, FSC_TAG_WORKSPACE), w0);
        fsc_model_free(m);
    }
    assert_memory_equal(&loss[0], &loss[1], sizeof loss[0]);
    assert_bits_equal(grads[0][0], grads[1][0], SD * SD, "in.weight after a failed record");
    assert_bits_equal(grads[0][1], grads[1][1], SD, "in.bias after a failed record");
    for (int t = 0; t < 2; t++) free(grads[0][t]), free(grads[1][t]);
}

static void test_bad_declarations(void **st) {
    (void)st;
    fsc_layer *a, *b;
    fsc_model *m = NULL;
    /* blocks: options of the other flavour or impossible shapes */
    assert_err(fsc_layer_block(&(fsc_block_opts){ .kind = FSC_BLOCK_GPT2, .T = 2, .C = 8, .heads = 2,
                                                  .rope_theta = 1e4f }, &a), FSC_ERR_INVALID, "rotary");
    assert_err(fsc_layer_block(&(fsc_block_opts){ .kind = FSC_BLOCK_GPT2, .T = 2, .C = 8, .heads = 2, .F = 12 }, &a),
               FSC_ERR_INVALID, "F = 4 C = 32, not 12");
    assert_err(fsc_layer_block(&(fsc_block_opts){ .kind = FSC_BLOCK_LLAMA, .T = 2, .C = 8, .heads = 2, .eps = 1e-5f },
                               &a), FSC_ERR_INVALID, "F >= 1");
    assert_err(fsc_layer_block(&(fsc_block_opts){ .kind = FSC_BLOCK_LLAMA, .T = 2, .C = 8, .heads = 3, .F = 4,
                                                  .eps = 1e-5f }, &a), FSC_ERR_INVALID, "heads dividing C");
    assert_err(fsc_layer_block(&(fsc_block_opts){ .kind = FSC_BLOCK_LLAMA, .T = 2, .C = 6, .heads = 2, .F = 4,
                                                  .eps = 1e-5f, .rope_theta = 1e4f }, &a), FSC_ERR_INVALID,
               "even head size");
    /* a chain that does not fit: 5 features into a layer of 6 */
    assert_ok(fsc_layer_linear(&(fsc_linear_opts){ .in = 4, .out = 5 }, &a));
    assert_ok(fsc_layer_mse(6, &b));
    fsc_seq_layer l1[2] = { { a, NULL, { { 0 } } }, { b, NULL, { { 0 } } } };
    assert_err(fsc_seq_model_create(g_dev, l1, 2, &m), FSC_ERR_INVALID, "takes 24 bytes per sample");
    assert_null(m);
    /* one layer object in two places: refused (the model frees each place's layer: it was freed twice) */
    assert_ok(fsc_layer_linear(&(fsc_linear_opts){ .in = 4, .out = 4 }, &a));
    assert_ok(fsc_layer_mse(4, &b));
    fsc_seq_layer ldup[3] = { { a, "a.", { { 0 } } }, { a, "b.", { { 0 } } }, { b, NULL, { { 0 } } } };
    assert_err(fsc_seq_model_create(g_dev, ldup, 3, &m), FSC_ERR_INVALID, "layers 0 and 1 are the same layer object");
    assert_null(m);
    /* sizes whose bytes would wrap: refused, not a record of 4 bytes written with 2^62 floats */
    assert_err(fsc_layer_gelu(((size_t)1 << 62) + 1, &a), FSC_ERR_INVALID, "need 1 <= n <= 2^30");
    assert_ok(fsc_layer_gelu(4, &a));
    assert_err(fsc_layer_add_param(a, "w", 2, (const int64_t[]){ ((int64_t)1 << 62) + 1, 4 }, fsc_init_const(0)),
               FSC_ERR_INVALID, "more than 2^60 elements");
    /* initial values that are not numbers: refused naming the parameter (a NaN reached the first step's loss,
     * whose refusal advised a lower learning rate) */
    const fsc_init bad_init[4] = { fsc_init_normal(NAN), fsc_init_normal(-1.0f), fsc_init_const(INFINITY),
                                   { .kind = (fsc_init_kind)7 } };
    for (int k = 0; k < 4; k++)
        assert_err(fsc_layer_add_param(a, "w", 1, (const int64_t[]){ 4 }, bad_init[k]), FSC_ERR_INVALID,
                   "parameter w: initial values");
    assert_int_equal(a->n_params, 0);
    assert_ok(fsc_layer_add_param(a, "w", 1, (const int64_t[]){ 4 }, fsc_init_normal(0.0f)));
    assert_err(fsc_layer_set_init(a, "w", fsc_init_const(NAN)), FSC_ERR_INVALID, "parameter w: initial values");
    assert_int_equal(a->params[0].init.kind, FSC_INIT_NORMAL);
    fsc_layer_free(a);
    /* a record whose bytes would wrap (2^30 floats a sample, 2^25 samples): refused before anything is laid out */
    assert_ok(fsc_layer_linear(&(fsc_linear_opts){ .rows = 1 << 30, .in = 1, .out = 1 }, &a));
    assert_ok(fsc_layer_mse(1 << 30, &b));
    fsc_seq_layer lw[2] = { { a, NULL, { { 0 } } }, { b, NULL, { { 0 } } } };
    assert_ok(fsc_seq_model_create(g_dev, lw, 2, &m));
    fsc_model_acts *wa = NULL;
    assert_err(m->ops->acts_create(m->ctx, &(fsc_model_acts_opts){ .B = 1 << 25, .first = 0, .last = 1 }, &wa),
               FSC_ERR_INVALID, "passes 2^56 bytes");
    assert_null(wa);
    fsc_model_free(m), m = NULL;
    /* defaults of widths that do not fit an int saturate (4 C overflowed), and such layers are refused */
    assert_int_equal(fsc_mlp_opts_default(1 << 30).F, INT_MAX);
    assert_int_equal(fsc_block_opts_default(FSC_BLOCK_GPT2, 2, 1 << 30, 1).F, INT_MAX);
    assert_int_equal(fsc_block_opts_default(FSC_BLOCK_LLAMA, 2, 1 << 30, 2).F, INT_MAX);
    assert_ok(fsc_layer_block(&(fsc_block_opts){ .kind = FSC_BLOCK_GPT2, .T = 2, .C = 1 << 29, .heads = 1 }, &a));
    fsc_layer_free(a); /* its F was 4 C in an int (UBSan stopped there); the model refuses or cannot hold it */
    assert_err(fsc_layer_moe_mlp(&(fsc_moe_mlp_opts){ .rows = 2, .C = 8, .experts = 4097, .top_k = 1 }, &a),
               FSC_ERR_INVALID, "at most 65536, 262144 and 4096");
    assert_err(fsc_layer_moe_mlp(&(fsc_moe_mlp_opts){ .rows = 2, .C = 1 << 30, .experts = 2, .top_k = 1 }, &a),
               FSC_ERR_INVALID, "at most 65536, 262144 and 4096");
    /* a finite coefficient or factor above 1e6: the message names the bound it broke */
    assert_err(fsc_layer_moe_mlp(&(fsc_moe_mlp_opts){ .rows = 2, .C = 8, .experts = 2, .top_k = 1, .aux = 2e6f }, &a),
               FSC_ERR_INVALID, "at most 1e6");
    assert_err(fsc_layer_moe_mlp(&(fsc_moe_mlp_opts){ .rows = 2, .C = 8, .experts = 2, .top_k = 1, .capacity = 2e6f },
                                 &a), FSC_ERR_INVALID, "at most 1e6");
    /* non-finite rope_theta and eps (NaN passed the old >= 0 and > 0 tests' negations, inf passed them) */
    const float bad_f[2] = { NAN, INFINITY };
    for (int i = 0; i < 2; i++) {
        assert_err(fsc_layer_attention(&(fsc_attention_opts){ .T = 2, .C = 8, .heads = 2, .rope_theta = bad_f[i] }, &a),
                   FSC_ERR_INVALID, "a finite rope_theta >= 0");
        assert_err(fsc_layer_block(&(fsc_block_opts){ .kind = FSC_BLOCK_LLAMA, .T = 2, .C = 8, .heads = 2, .F = 4,
                                                      .eps = 1e-5f, .rope_theta = bad_f[i] }, &a),
                   FSC_ERR_INVALID, "a finite rope_theta");
        assert_err(fsc_layer_block(&(fsc_block_opts){ .kind = FSC_BLOCK_LLAMA, .T = 2, .C = 8, .heads = 2, .F = 4,
                                                      .eps = bad_f[i] }, &a), FSC_ERR_INVALID, "a finite eps");
        assert_err(fsc_layer_rmsnorm(2, 8, bad_f[i], &a), FSC_ERR_INVALID, "eps must be > 0 and finite");
        assert_err(fsc_layer_lm_head_opts(&(fsc_lm_head_opts){ .T = 2, .C = 8, .V = 4, .norm = FSC_HEAD_NORM_RMSNORM,
                                                               .eps = bad_f[i] }, &a), FSC_ERR_INVALID, "finite");
    }
    /* no loss layer at the end */
    assert_ok(fsc_layer_linear(&(fsc_linear_opts){ .in = 4, .out = 4 }, &a));
    assert_ok(fsc_layer_gelu(4, &b));
    fsc_seq_layer l2[2] = { { a, NULL, { { 0 } } }, { b, NULL, { { 0 } } } };
    assert_err(fsc_seq_model_create(g_dev, l2, 2, &m), FSC_ERR_INVALID, "must be a loss layer");
    /* a tie to no tensor, and one of another shape */
    fsc_layer *c;
    for (int k = 0; k < 2; k++) {
        assert_ok(fsc_layer_linear(&(fsc_linear_opts){ .in = 4, .out = 4 }, &a));
        assert_ok(fsc_layer_linear(&(fsc_linear_opts){ .in = 4, .out = k ? 3 : 4, .bias = 1 }, &b));
        assert_ok(fsc_layer_mse(k ? 3 : 4, &c));
        fsc_seq_layer l3[3] = { { a, "a.", { { 0 } } }, { b, "b.", { { "weight", k ? "a.weight" : "a.nothing" } } },
                                { c, NULL, { { 0 } } } };
        assert_err(fsc_seq_model_create(g_dev, l3, 3, &m), FSC_ERR_INVALID, k ? "of another shape" : "not a tensor");
    }
    /* two layers without prefixes: the names collide */
    assert_ok(fsc_layer_linear(&(fsc_linear_opts){ .in = 4, .out = 4 }, &a));
    assert_ok(fsc_layer_linear(&(fsc_linear_opts){ .in = 4, .out = 4 }, &b));
    assert_ok(fsc_layer_mse(4, &c));
    fsc_seq_layer l4[3] = { { a, NULL, { { 0 } } }, { b, NULL, { { 0 } } }, { c, NULL, { { 0 } } } };
    assert_err(fsc_seq_model_create(g_dev, l4, 3, &m), FSC_ERR_INVALID, "two tensors are called weight");
    /* host data the layers check before upload: a token and a target outside the vocabulary [0, 5) */
    assert_ok(fsc_layer_token_embedding(2, 4, 5, &a));
    assert_ok(fsc_layer_lm_head_opts(&(fsc_lm_head_opts){ .T = 2, .C = 4, .V = 5, .norm = FSC_HEAD_NORM_RMSNORM,
                                                         .eps = 1e-5f, .norm_name = "ln_f.", .head_name = "head" },
                                     &b));
    assert_string_equal(b->params[0].name, "ln_f.weight");
    assert_string_equal(b->params[1].name, "head");
    fsc_seq_layer l5[2] = { { a, "wte.", { { 0 } } }, { b, NULL, { { 0 } } } };
    assert_ok(fsc_seq_model_create(g_dev, l5, 2, &m));
    fsc_model_acts *acts;
    assert_ok(m->ops->acts_create(m->ctx, &(fsc_model_acts_opts){ .B = 2, .last = 1 }, &acts));
    const int32_t good[4] = { 0, 4, 2, 3 }, bad_tok[4] = { 0, 4, 5, 3 }, bad_tgt[4] = { 1, -1, 2, 3 };
    assert_ok(m->ops->set_batch(m->ctx, acts, good, good));
    assert_err(m->ops->set_batch(m->ctx, acts, bad_tok, good), FSC_ERR_INVALID,
               "tokens[2] = 5 is outside the vocabulary [0, 5)");
    assert_err(m->ops->set_batch(m->ctx, acts, good, bad_tgt), FSC_ERR_INVALID,
               "targets[1] = -1 is outside the vocabulary [0, 5)");
    m->ops->acts_free(m->ctx, acts);
    fsc_model_free(m);
    assert_err(fsc_layer_lm_head_opts(&(fsc_lm_head_opts){ .T = 2, .C = 4, .V = 5, .norm = FSC_HEAD_NORM_RMSNORM },
                                      &a), FSC_ERR_INVALID, "eps must be > 0");
    /* layer-level checks */
    assert_err(fsc_layer_attention(&(fsc_attention_opts){ .T = 2, .C = 6, .heads = 4 }, &a), FSC_ERR_INVALID,
               "heads dividing C");
    assert_ok(fsc_layer_gelu(3, &a));
    assert_err(fsc_layer_set_init(a, "weight", fsc_init_const(1)), FSC_ERR_INVALID, "no parameter called weight");
    fsc_layer_free(a);
}

/* Every constructor leaves *out NULL when it refuses its arguments (some left it as it was, some set it NULL: a caller
 * reusing one variable freed a layer twice). */
static void test_refused_layer_is_null(void **st) {
    (void)st;
    fsc_layer *stale = (fsc_layer *)&stale, *l;
    fsc_linear_opts lo = fsc_linear_opts_default(0, 4);
    fsc_mlp_opts mo = fsc_mlp_opts_default(0);
    fsc_attention_opts ao = fsc_attention_opts_default(4, 6, 4); /* 6 is no multiple of 4 heads */
#define REFUSED(call)                                                                                   \
    do {                                                                                                \
        l = stale;                                                                                      \
        assert_int_not_equal(call, FSC_OK);                                                             \
        if (l) fail_msg("%s left *out set after refusing", #call);                                     \
    } while (0)
    REFUSED(fsc_layer_linear(&lo, &l));
    REFUSED(fsc_layer_gelu(0, &l));
    REFUSED(fsc_layer_layernorm(0, 0, &l));
    REFUSED(fsc_layer_rmsnorm(0, 8, -1.0f, &l));
    REFUSED(fsc_layer_mse(0, &l));
    REFUSED(fsc_layer_xent(1, &l));
    REFUSED(fsc_layer_embedding(0, 8, 16, &l));
    REFUSED(fsc_layer_token_embedding(0, 8, 16, &l));
    REFUSED(fsc_layer_gelu_mlp(&mo, &l));
    REFUSED(fsc_layer_swiglu_mlp(&mo, &l));
    REFUSED(fsc_layer_attention(&ao, &l));
    REFUSED(fsc_layer_lm_head(0, 8, 16, &l));
    /* options NULL: refused too, *out NULL first */
    REFUSED(fsc_layer_linear(NULL, &l));
    REFUSED(fsc_layer_gelu_mlp(NULL, &l));
    REFUSED(fsc_layer_swiglu_mlp(NULL, &l));
    REFUSED(fsc_layer_attention(NULL, &l));
    REFUSED(fsc_layer_block(NULL, &l));
    REFUSED(fsc_layer_moe_mlp(NULL, &l));
    REFUSED(fsc_layer_lm_head_opts(NULL, &l));
    REFUSED(fsc_layer_embedding_opts(NULL, &l));
#undef REFUSED
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layer_gradients),
        cmocka_unit_test(test_seq_equals_composition),
        cmocka_unit_test(test_scratch_growth_failure),
        cmocka_unit_test(test_bad_declarations),
        cmocka_unit_test(test_refused_layer_is_null),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
