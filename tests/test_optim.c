/* Tests of lib/optim: optimizers against PyTorch, the exact gradient norm, clipping, loss scaling. */
#include <math.h>
#include <stdlib.h>
#include "testutil.h"
#include "golden/optim_golden.h"

static fsc_device *cpu(void) {
    fsc_device *d = NULL;
    assert_ok(fsc_device_create("cpu", NULL, &d));
    return d;
}

static float *dev_upload(fsc_device *d, const float *host, size_t n) {
    float *p = NULL;
    assert_ok(fsc_device_alloc(d, FSC_TAG_WORKSPACE, n * sizeof(float), (void **)&p));
    assert_ok(fsc_device_upload(d, p, host, n * sizeof(float)));
    return p;
}

/* |a - b| <= tol * max(1, |b|) */
static void assert_close(const float *a, const float *b, size_t n, double tol, const char *what, int step) {
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - (double)b[i]);
        double lim = tol * fmax(1.0, fabs((double)b[i]));
        if (!(e <= lim))
            fail_msg("%s step %d element %zu: %.9g vs torch %.9g (error %.3g > %.3g)", what, step, i, (double)a[i],
                     (double)b[i], e, lim);
    }
}

/* Runs one golden case through fsc_optim; returns the parameters after each step via after. */
static void run_case(const fsc_optim_config *cfg, float after[GOLD_STEPS][GOLD_N], float state[2][GOLD_N],
                     int *nstates) {
    fsc_device *d = cpu();
    float *p = dev_upload(d, gold_p0, GOLD_N);
    float *g = dev_upload(d, gold_grads[0], GOLD_N);
    fsc_optim *o = NULL;
    assert_ok(fsc_optim_create(d, cfg, &o));
    int idx = -1;
    assert_ok(fsc_optim_add(o, p, g, GOLD_N, &idx));
    assert_int_equal(idx, 0);
    for (int s = 0; s < GOLD_STEPS; s++) {
        assert_ok(fsc_device_upload(d, g, gold_grads[s], sizeof gold_grads[s]));
        assert_ok(fsc_optim_step(o));
        assert_ok(fsc_device_download(d, after[s], p, GOLD_N * sizeof(float)));
    }
    assert_int_equal(fsc_optim_steps(o), GOLD_STEPS);
    *nstates = fsc_optim_num_states(o);
    for (int k = 0; k < *nstates; k++)
        assert_ok(fsc_device_download(d, state[k], fsc_optim_state(o, 0, k), GOLD_N * sizeof(float)));
    fsc_optim_free(o);
    fsc_device_release(d, p);
    fsc_device_release(d, g);
    fsc_device_free(d);
}

/* Oracle: torch.optim.AdamW / SGD (PyTorch 1.13, float32) on the same parameters and gradients,
 * golden values from tests/gen_golden_optim.py. Parameters within 2e-6 relative (a few ulps: PyTorch
 * orders the same arithmetic slightly differently), state within 1e-5 relative. */
static void test_golden_torch(void **st) {
    (void)st;
    for (size_t c = 0; c < sizeof gold_cases / sizeof gold_cases[0]; c++) {
        const gold_case *gc = &gold_cases[c];
        float after[GOLD_STEPS][GOLD_N], state[2][GOLD_N];
        int ns = -1;
        run_case(&gc->cfg, after, state, &ns);
        for (int s = 0; s < GOLD_STEPS; s++) assert_close(after[s], gc->after[s], GOLD_N, 2e-6, gc->name, s + 1);
        assert_int_equal(ns, gc->nstates);
        for (int k = 0; k < ns; k++) {
            for (int i = 0; i < GOLD_N; i++) {
                double e = fabs((double)state[k][i] - (double)gc->state[k][i]);
                if (!(e <= 1e-5 * fabs((double)gc->state[k][i]) + 1e-12))
                    fail_msg("%s state %d element %d: %.9g vs torch %.9g", gc->name, k, i, (double)state[k][i],
                             (double)gc->state[k][i]);
            }
        }
    }
}

/* Oracle: beta1 = beta2 = eps = 0 means PyTorch's defaults (0.9, 0.999, 1e-8): the same bits as giving them. */
static void test_adamw_defaults(void **st) {
    (void)st;
    fsc_optim_config explicit_cfg = {.kind = FSC_OPT_ADAMW, .lr = 0.01f, .weight_decay = 0.1f,
                                     .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f};
    fsc_optim_config zero_cfg = {.kind = FSC_OPT_ADAMW, .lr = 0.01f, .weight_decay = 0.1f};
    float a[GOLD_STEPS][GOLD_N], b[GOLD_STEPS][GOLD_N], sa[2][GOLD_N], sb[2][GOLD_N];
    int na, nb;
    run_case(&explicit_cfg, a, sa, &na);
    run_case(&zero_cfg, b, sb, &nb);
    assert_bits_equal(&a[0][0], &b[0][0], GOLD_STEPS * GOLD_N, "adamw defaults");
}

/* Oracle: state is tagged FSC_TAG_OPTIM, n floats per state; several segments step independently
 * (two segments give the same bits as one segment holding both). */
static void test_segments_and_state(void **st) {
    (void)st;
    fsc_device *d = cpu();
    fsc_optim_config cfg = {.kind = FSC_OPT_ADAMW, .lr = 0.01f, .weight_decay = 0.1f};
    fsc_optim *one = NULL, *two = NULL;
    assert_ok(fsc_optim_create(d, &cfg, &one));
    assert_ok(fsc_optim_create(d, &cfg, &two));
    float *p1 = dev_upload(d, gold_p0, GOLD_N), *p2 = dev_upload(d, gold_p0, GOLD_N);
    float *g = dev_upload(d, gold_grads[0], GOLD_N);
    size_t before = fsc_device_current_bytes(d, FSC_TAG_OPTIM);
    assert_ok(fsc_optim_add(one, p1, g, GOLD_N, NULL));
    assert_int_equal(fsc_device_current_bytes(d, FSC_TAG_OPTIM) - before, 2 * GOLD_N * sizeof(float));
    assert_ok(fsc_optim_add(two, p2, g, 4, NULL));
    assert_ok(fsc_optim_add(two, p2 + 4, g + 4, 0, NULL)); /* an empty segment (a rank's padding-only shard) */
    assert_ok(fsc_optim_add(two, p2 + 4, g + 4, GOLD_N - 4, NULL));
    assert_int_equal(fsc_optim_num_segments(two), 3);
    assert_int_equal(fsc_optim_segment_len(two, 2), GOLD_N - 4);
    assert_null(fsc_optim_state(two, 3, 0));
    assert_null(fsc_optim_state(two, 0, 2));
    for (int s = 0; s < GOLD_STEPS; s++) {
        assert_ok(fsc_device_upload(d, g, gold_grads[s], sizeof gold_grads[s]));
        assert_ok(fsc_optim_step(one));
        assert_ok(fsc_optim_step(two));
    }
    float a[GOLD_N], b[GOLD_N];
    assert_ok(fsc_device_download(d, a, p1, sizeof a));
    assert_ok(fsc_device_download(d, b, p2, sizeof b));
    assert_bits_equal(a, b, GOLD_N, "split segments");
    /* rebind: the same segment on another buffer */
    float *p3 = dev_upload(d, gold_p0, GOLD_N);
    assert_ok(fsc_optim_rebind(one, 0, p3, g));
    assert_ok(fsc_optim_step(one));
    assert_ok(fsc_device_download(d, b, p3, sizeof b));
    assert_true(memcmp(b, gold_p0, sizeof b) != 0);
    assert_err(fsc_optim_rebind(one, 1, p3, g), FSC_ERR_INVALID, "segment 1");
    fsc_optim_free(one);
    fsc_optim_free(two);
    assert_int_equal(fsc_device_current_bytes(d, FSC_TAG_OPTIM), before);
    fsc_device_release(d, p1);
    fsc_device_release(d, p2);
    fsc_device_release(d, p3);
    fsc_device_release(d, g);
    fsc_device_free(d);
}

/* Oracle: fsc_optim_step_segment over every segment (in reverse order) then fsc_optim_step_end gives
 * fsc_optim_step's bits and step count over several AdamW steps (the bias corrections need the count); a
 * segment that does not exist is FSC_ERR_INVALID naming it. */
static void test_step_by_segment(void **st) {
    (void)st;
    fsc_device *d = cpu();
    fsc_optim_config cfg = {.kind = FSC_OPT_ADAMW, .lr = 0.01f, .weight_decay = 0.1f};
    fsc_optim *whole = NULL, *seg = NULL;
    assert_ok(fsc_optim_create(d, &cfg, &whole));
    assert_ok(fsc_optim_create(d, &cfg, &seg));
    float *p1 = dev_upload(d, gold_p0, GOLD_N), *p2 = dev_upload(d, gold_p0, GOLD_N);
    float *g = dev_upload(d, gold_grads[0], GOLD_N);
    for (fsc_optim *o = whole; o; o = o == whole ? seg : NULL) {
        float *p = o == whole ? p1 : p2;
        assert_ok(fsc_optim_add(o, p, g, 4, NULL));
        assert_ok(fsc_optim_add(o, p + 4, g + 4, 0, NULL)); /* an empty segment */
        assert_ok(fsc_optim_add(o, p + 4, g + 4, GOLD_N - 4, NULL));
    }
    for (int s = 0; s < GOLD_STEPS; s++) {
        assert_ok(fsc_device_upload(d, g, gold_grads[s], sizeof gold_grads[s]));
        assert_ok(fsc_optim_step(whole));
        for (int k = fsc_optim_num_segments(seg) - 1; k >= 0; k--) assert_ok(fsc_optim_step_segment(seg, k));
        fsc_optim_step_end(seg);
    }
    assert_int_equal(fsc_optim_steps(seg), fsc_optim_steps(whole));
    float a[GOLD_N], b[GOLD_N];
    assert_ok(fsc_device_download(d, a, p1, sizeof a));
    assert_ok(fsc_device_download(d, b, p2, sizeof b));
    assert_bits_equal(b, a, GOLD_N, "segment by segment");
    assert_err(fsc_optim_step_segment(seg, 3), FSC_ERR_INVALID, "segment 3 does not exist");
    assert_err(fsc_optim_step_segment(seg, -1), FSC_ERR_INVALID, "segment -1");
    assert_err(fsc_optim_step_segment(NULL, 0), FSC_ERR_INVALID, "fsc_optim_step_segment");
    fsc_optim_step_end(NULL);
    assert_int_equal(fsc_optim_steps(seg), GOLD_STEPS);
    fsc_optim_free(whole);
    fsc_optim_free(seg);
    fsc_device_release(d, p1);
    fsc_device_release(d, p2);
    fsc_device_release(d, g);
    fsc_device_free(d);
}

/* Oracle: invalid hyperparameters are rejected with a message naming them; state counts per kind. */
static void test_config_errors(void **st) {
    (void)st;
    fsc_device *d = cpu();
    fsc_optim *o = NULL;
    assert_err(fsc_optim_create(d, &(fsc_optim_config){.kind = FSC_OPT_SGD, .lr = -1.0f}, &o), FSC_ERR_INVALID,
               "learning rate");
    assert_err(fsc_optim_create(d, &(fsc_optim_config){.kind = FSC_OPT_ADAMW, .lr = 0.1f, .beta1 = 1.0f}, &o),
               FSC_ERR_INVALID, "beta1");
    assert_err(fsc_optim_create(d, &(fsc_optim_config){.kind = FSC_OPT_SGD, .lr = 0.1f, .momentum = NAN}, &o),
               FSC_ERR_INVALID, "momentum");
    assert_err(fsc_optim_create(d, &(fsc_optim_config){.kind = FSC_OPT_SGD, .lr = 0.1f, .weight_decay = -1}, &o),
               FSC_ERR_INVALID, "weight decay");
    assert_err(fsc_optim_create(d, &(fsc_optim_config){.kind = (fsc_optim_kind)7, .lr = 0.1f}, &o),
               FSC_ERR_INVALID, "kind");
    /* a 0-or-1 switch given another value: -1 and 2 decayed every tensor as 1 does */
    assert_err(fsc_optim_create(d, &(fsc_optim_config){.kind = FSC_OPT_SGD, .lr = 0.1f, .decay_all = 2}, &o),
               FSC_ERR_INVALID, "decay_all must be 0 or 1, not 2");
    assert_err(fsc_optim_create(d, &(fsc_optim_config){.kind = FSC_OPT_SGD, .lr = 0.1f, .decay_all = -1}, &o),
               FSC_ERR_INVALID, "decay_all must be 0 or 1, not -1");
    /* eps 0 with betas given: a zero gradient's step is 0 / 0 (NaN weights from a step that said ok) */
    assert_err(fsc_optim_create(d, &(fsc_optim_config){.kind = FSC_OPT_ADAMW, .lr = 0.1f, .beta1 = 0.9f,
                                                       .beta2 = 0.999f}, &o), FSC_ERR_INVALID, "eps 0 must be finite and > 0");
    assert_null(o);
    assert_ok(fsc_optim_create(d, &(fsc_optim_config){.kind = FSC_OPT_SGD, .lr = 0.1f}, &o));
    assert_int_equal(fsc_optim_num_states(o), 0);
    assert_err(fsc_optim_add(o, NULL, NULL, 5, NULL), FSC_ERR_INVALID, "NULL");
    fsc_optim_free(o);
    assert_ok(fsc_optim_create(d, &(fsc_optim_config){.kind = FSC_OPT_SGD, .lr = 0.1f, .momentum = 0.5f}, &o));
    assert_int_equal(fsc_optim_num_states(o), 1);
    fsc_optim_free(o);
    fsc_device_free(d);
}

/* A gradient with magnitudes over many decades, deterministic. */
static void make_grad(float *g, size_t n, unsigned seed) {
    uint64_t x = 0x9e3779b97f4a7c15ull * (seed + 1);
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        double u = (double)(x >> 11) / 9007199254740992.0;      /* [0,1) */
        double mag = pow(10.0, -6.0 + 8.0 * (double)((x >> 3) % 1000) / 1000.0);
        g[i] = (float)((u - 0.5) * mag);
    }
}

static long double ref_norm(const float *g, size_t n) {
    long double s = 0.0L;
    for (size_t i = 0; i < n; i++) s += (long double)g[i] * (long double)g[i];
    return sqrtl(s);
}

static double norm_of(fsc_device *d, float *const *segs, const size_t *lens, int nseg) {
    double r = -1.0;
    assert_ok(fsc_grad_norm(d, NULL, segs, lens, nseg, &r));
    return r;
}

/* Oracle: the norm equals a long-double reference within 1e-12 relative, and any split of the same
 * gradient into segments gives bit-identical norms. */
static void test_grad_norm_exact(void **st) {
    (void)st;
    fsc_device *d = cpu();
    size_t n = 10007;
    float *h = malloc(n * sizeof(float));
    make_grad(h, n, 1);
    float *g = dev_upload(d, h, n);
    double whole = norm_of(d, &g, &n, 1);
    long double ref = ref_norm(h, n);
    assert_true(fabsl((long double)whole - ref) <= 1e-12L * ref);
    size_t cuts[][4] = {{1, 2, 3, 10001}, {5000, 5000, 7, 0}, {0, 10007, 0, 0}, {3333, 3333, 3333, 8}};
    for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
        float *segs[4];
        size_t off = 0;
        for (int k = 0; k < 4; k++) {
            segs[k] = g + off;
            off += cuts[c][k];
        }
        assert_int_equal(off, n);
        double split = norm_of(d, segs, cuts[c], 4);
        if (memcmp(&split, &whole, sizeof split) != 0) fail_msg("split %zu: %.17g vs %.17g", c, split, whole);
    }
    /* a reversed copy is another order of the same terms */
    float *rh = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) rh[i] = h[n - 1 - i];
    float *rg = dev_upload(d, rh, n);
    double rev = norm_of(d, &rg, &n, 1);
    assert_memory_equal(&rev, &whole, sizeof rev);
    /* extreme ranges: near FLT_MAX and subnormals */
    float ext[4] = {3.0e38f, -3.0e38f, 1e-40f, 0.0f};
    assert_ok(fsc_device_upload(d, g, ext, sizeof ext));
    size_t four = 4;
    double big = norm_of(d, &g, &four, 1);
    long double rbig = ref_norm(ext, 4);
    assert_true(isfinite(big) && fabsl((long double)big - rbig) <= 1e-12L * rbig);
    float tiny[3] = {1e-40f, -3e-42f, 2e-45f};
    assert_ok(fsc_device_upload(d, g, tiny, sizeof tiny));
    size_t three = 3;
    double t = norm_of(d, &g, &three, 1);
    long double rt = ref_norm(tiny, 3);
    assert_true(fabsl((long double)t - rt) <= 1e-12L * rt);
    free(h);
    free(rh);
    fsc_device_release(d, g);
    fsc_device_release(d, rg);
    fsc_device_free(d);
}

/* Oracle: zero gradients have norm 0; an inf gives inf, a NaN gives NaN (as torch.linalg.norm). */
static void test_grad_norm_special(void **st) {
    (void)st;
    fsc_device *d = cpu();
    float z[5] = {0};
    float *g = dev_upload(d, z, 5);
    size_t n = 5;
    assert_true(norm_of(d, &g, &n, 1) == 0.0);
    assert_true(norm_of(d, NULL, NULL, 0) == 0.0);
    z[2] = INFINITY;
    assert_ok(fsc_device_upload(d, g, z, sizeof z));
    assert_true(isinf(norm_of(d, &g, &n, 1)));
    z[4] = NAN;
    assert_ok(fsc_device_upload(d, g, z, sizeof z));
    assert_true(isnan(norm_of(d, &g, &n, 1)));
    int found = 0;
    assert_ok(fsc_grads_nonfinite(d, NULL, &g, &n, 1, &found));
    assert_int_equal(found, 1);
    z[2] = 1.0f;
    z[4] = 2.0f;
    assert_ok(fsc_device_upload(d, g, z, sizeof z));
    assert_ok(fsc_grads_nonfinite(d, NULL, &g, &n, 1, &found));
    assert_int_equal(found, 0);
    double nn = -1;
    assert_err(fsc_grad_norm(d, NULL, NULL, &n, 1, &nn), FSC_ERR_INVALID, "NULL");
    fsc_device_release(d, g);
    fsc_device_free(d);
}

/* Oracle: torch.nn.utils.clip_grad_norm_: above max_norm every element is multiplied by the float
 * max_norm / (norm + 1e-6); at or below it the gradient keeps its bits. */
static void test_grad_clip(void **st) {
    (void)st;
    fsc_device *d = cpu();
    size_t n = 1000;
    float *h = malloc(n * sizeof(float)), *out = malloc(n * sizeof(float));
    make_grad(h, n, 7);
    float *g = dev_upload(d, h, n);
    double ref = (double)ref_norm(h, n);
    double norm = 0;
    assert_ok(fsc_grad_clip(d, NULL, &g, &n, 1, (float)(ref * 2), &norm));
    assert_ok(fsc_device_download(d, out, g, n * sizeof(float)));
    assert_bits_equal(out, h, n, "unclipped");
    assert_true(fabs(norm - ref) <= 1e-12 * ref);
    float max_norm = (float)(ref / 4);
    assert_ok(fsc_grad_clip(d, NULL, &g, &n, 1, max_norm, &norm));
    float f = (float)((double)max_norm / (ref + 1e-6));
    assert_ok(fsc_device_download(d, out, g, n * sizeof(float)));
    for (size_t i = 0; i < n; i++) {
        float want = h[i] * f;
        if (memcmp(&out[i], &want, sizeof want)) fail_msg("clip element %zu: %.9g vs %.9g", i, (double)out[i], (double)want);
    }
    double after = 0;
    assert_ok(fsc_grad_norm(d, NULL, &g, &n, 1, &after));
    assert_true(fabs(after - max_norm) <= 1e-5 * max_norm);
    assert_err(fsc_grad_clip(d, NULL, &g, &n, 1, 0.0f, &norm), FSC_ERR_INVALID, "max norm");
    free(h);
    free(out);
    fsc_device_release(d, g);
    fsc_device_free(d);
}

/* Oracle: GradScaler's rules: back off x0.5 on overflow and restart the count; x2 after growth_interval
 * good steps in a row; never grow to inf. */
static void test_loss_scaler(void **st) {
    (void)st;
    fsc_loss_scaler s;
    fsc_loss_scaler_init(&s, 0.0f, 0);
    assert_true(s.scale == 65536.0f && s.growth_interval == 2000);
    fsc_loss_scaler_init(&s, 1024.0f, 3);
    fsc_loss_scaler_update(&s, 0);
    fsc_loss_scaler_update(&s, 0);
    assert_true(s.scale == 1024.0f && s.good_steps == 2);
    fsc_loss_scaler_update(&s, 0);
    assert_true(s.scale == 2048.0f && s.good_steps == 0);
    fsc_loss_scaler_update(&s, 0);
    fsc_loss_scaler_update(&s, 0);
    fsc_loss_scaler_update(&s, 1);
    assert_true(s.scale == 1024.0f && s.good_steps == 0 && s.skipped == 1);
    fsc_loss_scaler_update(&s, 1);
    assert_true(s.scale == 512.0f && s.skipped == 2);
    fsc_loss_scaler_init(&s, 3.0e38f, 1);
    fsc_loss_scaler_update(&s, 0);
    assert_true(s.scale == 3.0e38f && s.good_steps == 0);
}

/* Oracle: the floor (DeepSpeed's min_loss_scale; GradScaler has none): overflows back the scale off to
 * min_scale (default 1) and no further, however many; a floor of 0 still never reaches 0; a step taken at
 * the floor grows from it as usual. */
static void test_loss_scaler_floor(void **st) {
    (void)st;
    fsc_loss_scaler s;
    fsc_loss_scaler_init(&s, 0.0f, 2);
    assert_true(s.min_scale == 1.0f);
    for (int i = 0; i < 300; i++) fsc_loss_scaler_update(&s, 1);
    assert_true(s.scale == 1.0f && s.skipped == 300);
    fsc_loss_scaler_update(&s, 0);
    fsc_loss_scaler_update(&s, 0);
    assert_true(s.scale == 2.0f);
    fsc_loss_scaler_init(&s, 1000.0f, 2);
    s.min_scale = 3.0f;
    for (int i = 0; i < 9; i++) fsc_loss_scaler_update(&s, 1);
    assert_true(s.scale == 3.0f); /* 1000 / 2^8 = 3.9, then the floor, not 1.95 */
    fsc_loss_scaler_init(&s, 2.0f, 2); /* below the floor (a restored scale, a floor raised since) */
    s.min_scale = 1024.0f;
    fsc_loss_scaler_update(&s, 1);
    if (!(s.scale <= 2.0f))
        fail_msg("an overflow at scale 2 under a floor of 1024 raised the scale to %g", (double)s.scale);
    s.min_scale = 0.0f;           /* no floor given: never 0, which would zero every gradient for good */
    for (int i = 0; i < 400; i++) fsc_loss_scaler_update(&s, 1);
    assert_true(s.scale > 0.0f && isfinite(s.scale));
}

/* Over a simulated cluster: every rank holds a slice of one gradient (different sizes, one rank empty). */
typedef struct {
    const float *h;
    size_t n;
    double norm[8];
    int found[8];
    int vote[8];       /* fsc_nonfinite_vote with 2 from rank 0 when a rank is poisoned */
    int poison_rank;   /* rank that puts an inf into its slice, -1 none */
} dist_arg;

static fsc_status dist_fn(fsc_rank *r, void *argp) {
    dist_arg *a = argp;
    size_t lo = a->n * (size_t)r->rank * (size_t)r->rank / ((size_t)r->world * (size_t)r->world);
    size_t hi = a->n * (size_t)(r->rank + 1) * (size_t)(r->rank + 1) / ((size_t)r->world * (size_t)r->world);
    size_t len[2] = {(hi - lo) / 3, (hi - lo) - (hi - lo) / 3};
    float *g = NULL;
    FSC_TRY(fsc_device_alloc(r->dev, FSC_TAG_GRADS, (hi - lo + 1) * sizeof(float), (void **)&g));
    FSC_TRY(fsc_device_upload(r->dev, g, a->h + lo, (hi - lo) * sizeof(float)));
    if (r->rank == a->poison_rank && hi > lo) {
        float inf = INFINITY;
        FSC_TRY(fsc_device_upload(r->dev, g, &inf, sizeof inf));
    }
    float *segs[2] = {g, g + len[0]};
    FSC_TRY(fsc_grad_norm(r->dev, r->comm, segs, len, 2, &a->norm[r->rank]));
    FSC_TRY(fsc_grads_nonfinite(r->dev, r->comm, segs, len, 2, &a->found[r->rank]));
    /* the vote with a verdict of the rank's own (2 on rank 0: its loss, say) outweighs the gradients' 1 */
    FSC_TRY(fsc_nonfinite_vote(r->dev, r->comm, segs, len, 2, r->rank == 0 && a->poison_rank >= 0 ? 2 : 0,
                               &a->vote[r->rank]));
    fsc_device_release(r->dev, g);
    return FSC_OK;
}

/* Oracle: the norm over ranks is bit-identical to the single-device norm of the whole gradient on every
 * rank, for world sizes 1..4; one rank's inf is seen by every rank. */
static void test_grad_norm_distributed(void **st) {
    (void)st;
    size_t n = 4099;
    float *h = malloc(n * sizeof(float));
    make_grad(h, n, 3);
    fsc_device *d = cpu();
    float *g = dev_upload(d, h, n);
    double whole = norm_of(d, &g, &n, 1);
    for (int w = 1; w <= 4; w++) {
        dist_arg a = {.h = h, .n = n, .poison_rank = -1};
        assert_ok(fsc_cluster_run(&(fsc_cluster_opts){.world = w}, dist_fn, &a));
        for (int r = 0; r < w; r++) {
            if (memcmp(&a.norm[r], &whole, sizeof whole))
                fail_msg("world %d rank %d: %.17g vs %.17g", w, r, a.norm[r], whole);
            assert_int_equal(a.found[r], 0);
            assert_int_equal(a.vote[r], 0);
        }
        if (w < 2) continue;
        a.poison_rank = w - 1;
        assert_ok(fsc_cluster_run(&(fsc_cluster_opts){.world = w}, dist_fn, &a));
        for (int r = 0; r < w; r++) {
            assert_true(isinf(a.norm[r]));
            assert_int_equal(a.found[r], 1);
            assert_int_equal(a.vote[r], 2);
        }
    }
    free(h);
    fsc_device_release(d, g);
    fsc_device_free(d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_torch),
        cmocka_unit_test(test_adamw_defaults),
        cmocka_unit_test(test_segments_and_state),
        cmocka_unit_test(test_step_by_segment),
        cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_grad_norm_exact),
        cmocka_unit_test(test_grad_norm_special),
        cmocka_unit_test(test_grad_clip),
        cmocka_unit_test(test_loss_scaler),
        cmocka_unit_test(test_loss_scaler_floor),
        cmocka_unit_test(test_grad_norm_distributed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
