/* The tensor-parallel GPT-2 (lib/tp/tp_gpt*.c) against the unsharded GPT (lib/model) on the simulated cluster.
 * Oracle: fsc_gpt_forward/backward and fsc_optim on one rank with the same keyed initial weights and data.
 * - A tensor group of 1 reproduces the unsharded model bit for bit: losses, every gradient, and the weights
 *   after AdamW steps (every tensor-parallel code path runs, with collectives over one rank).
 * - Groups of 2 and 4, with and without sequence parallelism: the summed loss within LOSS_TOL, gradients of
 *   the first step within GRAD_TOL (relative to the largest gradient of each tensor), weights after STEPS
 *   AdamW steps within WEIGHT_TOL (absolute; lr 1e-3, so a step moves a weight by up to 1e-3). Measured: losses 1e-8, gradients
 *   6e-7, weights 1.6e-6. Not bitwise:
 *   row-parallel layers sum their inner dimension in pieces, the cross entropy combines per-slice
 *   log-sum-exps, and OpenBLAS rounds slices of a product differently from the full product.
 * - The initial weights are the unsharded ones (the export equals fsc_gpt_save's file byte for byte), the
 *   export after training equals a single-rank save of the gathered weights, and a file loads into any
 *   tensor-parallel size. */
#include <unistd.h>
#include "test_tp_util.h"

#define STEPS 3
#define LOSS_TOL 1e-7
#define GRAD_TOL 5e-6
#define WEIGHT_TOL 1e-5

static fsc_gpt_config cfg(void) {
    /* 4 heads and a vocabulary of 48 split over 1, 2 and 4 ranks; 3 x 8 token rows split into shards that
     * cross sequence boundaries */
    return (fsc_gpt_config){ .layers = 2, .dim = 24, .heads = 4, .seq = 8, .vocab = 48 };
}
enum { B = 3 };
static const uint64_t SEED = 77;

typedef struct {
    int sp;
    double loss[STEPS];
    float *grads;   /* (P) after the first backward */
    float *params;  /* (P) after STEPS steps */
    const char *save_init, *save_end; /* paths, or NULL */
} run;

static void batch(int step, int32_t *tok, int32_t *tgt, int V) {
    for (int i = 0; i < B * 8; i++) {
        uint32_t x = (uint32_t)(step * 1000 + i) * 2654435761u;
        tok[i] = (int32_t)((x >> 7) % (uint32_t)V);
        tgt[i] = (int32_t)((x >> 17) % (uint32_t)V);
    }
}

static fsc_optim_config adamw(void) {
    return (fsc_optim_config){ .kind = FSC_OPT_ADAMW, .lr = 1e-3f, .weight_decay = 0.1f, .beta1 = 0.9f,
                               .beta2 = 0.999f, .eps = 1e-8f };
}

/* The oracle, on one rank. */
static fsc_status ref_rank(fsc_rank *r, void *arg) {
    run *out = arg;
    fsc_gpt_config c = cfg();
    size_t P = fsc_gpt_num_params(&c);
    fsc_gpt *m;
    FSC_TRY(fsc_gpt_create(r->dev, &c, &m));
    float *p, *g, *h = malloc(P * sizeof(float));
    FSC_TRY(fsc_device_alloc(r->dev, FSC_TAG_PARAMS, P * sizeof(float), (void **)&p));
    FSC_TRY(fsc_device_calloc(r->dev, FSC_TAG_GRADS, P * sizeof(float), (void **)&g));
    size_t off = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        fsc_gpt_init_values(&c, SEED, i, 0, m->info[i].numel, h + off);
        off += m->info[i].numel;
    }
    FSC_TRY(fsc_device_upload(r->dev, p, h, P * sizeof(float)));
    fsc_gpt_bind_flat(m, p, g);
    if (out->save_init) FSC_TRY(fsc_gpt_save(m, out->save_init));
    fsc_gpt_acts *a;
    fsc_gpt_acts_opts o = { .B = B, .T = c.seq, .first = 0, .last = c.layers + 1 };
    FSC_TRY(fsc_gpt_acts_create(m, &o, &a));
    fsc_optim *opt;
    fsc_optim_config oc = adamw();
    FSC_TRY(fsc_optim_create(r->dev, &oc, &opt));
    FSC_TRY(fsc_optim_add(opt, p, g, P, NULL));
    int32_t tok[B * 8], tgt[B * 8];
    for (int s = 0; s < STEPS; s++) {
        batch(s, tok, tgt, c.vocab);
        FSC_TRY(fsc_device_memset(r->dev, g, 0, P * sizeof(float)));
        FSC_TRY(fsc_gpt_acts_set_batch(a, tok, tgt));
        FSC_TRY(fsc_gpt_forward(m, a, NULL, &out->loss[s]));
        FSC_TRY(fsc_gpt_backward(m, a, NULL, 1.0f / (float)(B * c.seq)));
        if (s == 0) FSC_TRY(fsc_device_download(r->dev, out->grads, g, P * sizeof(float)));
        FSC_TRY(fsc_optim_step(opt));
    }
    FSC_TRY(fsc_device_download(r->dev, out->params, p, P * sizeof(float)));
    fsc_optim_free(opt);
    fsc_gpt_acts_free(a);
    fsc_gpt_free(m);
    fsc_device_release(r->dev, p);
    fsc_device_release(r->dev, g);
    free(h);
    return FSC_OK;
}

/* The same training on a tensor group (the world). */
static fsc_status tp_rank(fsc_rank *r, void *arg) {
    run *out = arg;
    fsc_gpt_config c = cfg();
    fsc_tp_opts to = { .sequence_parallel = out->sp };
    fsc_tp_gpt *m;
    FSC_TRY(fsc_tp_gpt_create(r->dev, r->comm, &c, &to, SEED, &m));
    if (out->save_init) FSC_TRY(fsc_tp_gpt_save(m, out->save_init));
    fsc_optim *opt;
    fsc_optim_config oc = adamw();
    FSC_TRY(fsc_optim_create(r->dev, &oc, &opt));
    FSC_TRY(fsc_optim_add(opt, fsc_tp_gpt_params(m), fsc_tp_gpt_grads(m), fsc_tp_gpt_num_local(m), NULL));
    int32_t tok[B * 8], tgt[B * 8];
    for (int s = 0; s < STEPS; s++) {
        batch(s, tok, tgt, c.vocab);
        double loss;
        FSC_TRY(fsc_tp_gpt_zero_grads(m));
        FSC_TRY(fsc_tp_gpt_forward(m, tok, tgt, B, &loss));
        FSC_TRY(fsc_tp_gpt_backward(m, 1.0f / (float)(B * c.seq)));
        if (r->rank == 0) out->loss[s] = loss;
        if (s == 0) FSC_TRY(fsc_tp_gpt_full_grads(m, r->rank == 0 ? out->grads : NULL));
        FSC_TRY(fsc_optim_step(opt));
    }
    FSC_TRY(fsc_tp_gpt_full_params(m, r->rank == 0 ? out->params : NULL));
    if (out->save_end) FSC_TRY(fsc_tp_gpt_save(m, out->save_end));
    fsc_optim_free(opt);
    fsc_tp_gpt_free(m);
    return FSC_OK;
}

static run make_run(int sp) {
    fsc_gpt_config c = cfg();
    size_t P = fsc_gpt_num_params(&c);
    run x = { .sp = sp };
    x.grads = calloc(P, sizeof(float));
    x.params = calloc(P, sizeof(float));
    return x;
}

static void free_run(run *x) {
    free(x->grads);
    free(x->params);
}

static const run *reference(void) {
    static run ref;
    static int done;
    if (!done) {
        ref = make_run(0);
        assert_ok(tt_run(1, ref_rank, &ref));
        done = 1;
    }
    return &ref;
}

/* Per tensor: max |a - b| / max |b| within tol. */
static void assert_tensors_close(const float *a, const float *b, double tol, int absolute, const char *what) {
    fsc_gpt_config c = cfg();
    size_t off = 0;
    double worst = 0;
    for (int i = 0; i < fsc_gpt_num_tensors(&c); i++) {
        fsc_param_info pi;
        assert_ok(fsc_gpt_param_info(&c, i, &pi));
        double e = 0;
        if (absolute) {
            for (size_t k = 0; k < pi.numel; k++) e = fmax(e, fabs((double)a[off + k] - b[off + k]));
        } else {
            e = tt_rel_err(a + off, b + off, pi.numel);
        }
        if (!(e <= tol)) fail_msg("%s: %s differs by %.3g (tolerance %.3g)", what, pi.name, e, tol);
        if (e > worst) worst = e;
        off += pi.numel;
    }
    if (getenv("FSC_TEST_VERBOSE")) fprintf(stderr, "  %s: worst %.3g\n", what, worst);
}

static void test_tp_gpt_group_of_one_is_bitwise(void **state) {
    (void)state;
    const run *ref = reference();
    fsc_gpt_config c = cfg();
    size_t P = fsc_gpt_num_params(&c);
    for (int sp = 0; sp <= 1; sp++) {
        run x = make_run(sp);
        assert_ok(tt_run(1, tp_rank, &x));
        for (int s = 0; s < STEPS; s++)
            if (memcmp(&x.loss[s], &ref->loss[s], sizeof(double)) != 0)
                fail_msg("loss of step %d: %.17g vs %.17g", s, x.loss[s], ref->loss[s]);
        assert_bits_equal(x.grads, ref->grads, P, "gradients, group of 1");
        assert_bits_equal(x.params, ref->params, P, "weights after AdamW steps, group of 1");
        free_run(&x);
    }
}

static void test_tp_gpt_matches_unsharded(void **state) {
    (void)state;
    const run *ref = reference();
    for (int sp = 0; sp <= 1; sp++)
        for (int T = 2; T <= 4; T *= 2) {
            run x = make_run(sp);
            assert_ok(tt_run(T, tp_rank, &x));
            char what[96];
            for (int s = 0; s < STEPS; s++) {
                double e = fabs(x.loss[s] - ref->loss[s]) / fabs(ref->loss[s]);
                if (getenv("FSC_TEST_VERBOSE")) fprintf(stderr, "  loss of step %d, group of %d: %.3g\n", s, T, e);
                if (!(e <= LOSS_TOL))
                    fail_msg("group of %d%s: loss of step %d %.9g vs %.9g", T, sp ? " with sp" : "", s, x.loss[s],
                             ref->loss[s]);
            }
            snprintf(what, sizeof what, "gradients, group of %d%s", T, sp ? ", sequence parallel" : "");
            assert_tensors_close(x.grads, ref->grads, GRAD_TOL, 0, what);
            snprintf(what, sizeof what, "weights after %d steps, group of %d%s", STEPS, T, sp ? ", sp" : "");
            assert_tensors_close(x.params, ref->params, WEIGHT_TOL, 1, what);
            free_run(&x);
        }
}

static int same_file(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa && fb;
    while (same) {
        int ca = fgetc(fa), cb = fgetc(fb);
        if (ca != cb) same = 0;
        if (ca == EOF || cb == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

/* rank 0 saves the gathered weights of a tensor group through a single-rank model */
typedef struct {
    const char *load, *save_single, *save_tp;
    int sp;
} io_case;

static fsc_status io_rank(fsc_rank *r, void *arg) {
    io_case *io = arg;
    fsc_gpt_config c = cfg();
    fsc_tp_opts to = { .sequence_parallel = io->sp };
    fsc_tp_gpt *m;
    FSC_TRY(fsc_tp_gpt_create(r->dev, r->comm, &c, &to, SEED + 1, &m)); /* other weights than the file's */
    fsc_status s = io->load ? fsc_tp_gpt_load(m, io->load) : FSC_OK;
    if (s == FSC_OK && io->save_tp) s = fsc_tp_gpt_save(m, io->save_tp);
    if (s != FSC_OK) {
        fsc_tp_gpt_free(m);
        return s;
    }
    size_t P = fsc_gpt_num_params(&c);
    float *full = r->rank == 0 ? malloc(P * sizeof(float)) : NULL;
    FSC_TRY(fsc_tp_gpt_full_params(m, full));
    if (r->rank == 0 && io->save_single) {
        fsc_gpt *g;
        float *d;
        FSC_TRY(fsc_gpt_create(r->dev, &c, &g));
        FSC_TRY(fsc_device_alloc(r->dev, FSC_TAG_PARAMS, P * sizeof(float), (void **)&d));
        FSC_TRY(fsc_device_upload(r->dev, d, full, P * sizeof(float)));
        fsc_gpt_bind_flat(g, d, NULL);
        FSC_TRY(fsc_gpt_save(g, io->save_single));
        fsc_gpt_free(g);
        fsc_device_release(r->dev, d);
    }
    free(full);
    fsc_tp_gpt_free(m);
    return FSC_OK;
}

static void test_tp_gpt_export_and_load(void **state) {
    (void)state;
    char dir[] = "/tmp/fsc_tp_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char single[128], init2[128], end4[128], end_single[128], reload[128];
    snprintf(single, sizeof single, "%s/single_init.safetensors", dir);
    snprintf(init2, sizeof init2, "%s/tp2_init.safetensors", dir);
    snprintf(end4, sizeof end4, "%s/tp4_end.safetensors", dir);
    snprintf(end_single, sizeof end_single, "%s/tp4_end_single.safetensors", dir);
    snprintf(reload, sizeof reload, "%s/reload.safetensors", dir);
    /* the initial weights of a group of 2 are the unsharded model's: the same file */
    run ref = make_run(0);
    ref.save_init = single;
    assert_ok(tt_run(1, ref_rank, &ref));
    run x = make_run(1);
    x.save_init = init2;
    assert_ok(tt_run(2, tp_rank, &x));
    assert_true(same_file(single, init2));
    /* after training on 4 ranks: the export equals a single-rank save of the gathered weights */
    run y = make_run(0);
    y.save_end = end4;
    assert_ok(tt_run(4, tp_rank, &y));
    io_case io = { .load = end4, .save_single = end_single };
    assert_ok(tt_run(1, io_rank, &io)); /* loads the 4-rank file into a group of 1 */
    assert_true(same_file(end4, end_single));
    /* and it loads into a group of 2 with sequence parallelism, exporting the same file again */
    io_case io2 = { .load = end4, .save_tp = reload, .sp = 1 };
    assert_ok(tt_run(2, io_rank, &io2));
    assert_true(same_file(end4, reload));
    assert_false(same_file(single, end4)); /* training changed the weights: the comparison can fail */
    /* a missing file fails every rank */
    io_case bad = { .load = "/nonexistent/w.safetensors" };
    assert_err(tt_run(2, io_rank, &bad), FSC_ERR_IO, "nonexistent");
    const char *files[] = { single, init2, end4, end_single, reload };
    for (int i = 0; i < 5; i++) unlink(files[i]);
    rmdir(dir);
    free_run(&ref), free_run(&x), free_run(&y);
}

static fsc_status create_rank(fsc_rank *r, void *arg) {
    fsc_gpt_config c = cfg();
    const int *mode = arg;
    fsc_tp_opts to = { .sequence_parallel = *mode == 2 || (*mode == 3 && r->rank == 1) };
    fsc_tp_gpt *m;
    if (*mode == 1) c.heads = 3, c.dim = 24;
    FSC_TRY(fsc_tp_gpt_create(r->dev, r->comm, &c, &to, SEED, &m));
    int32_t tok[16] = { 0 }, tgt[16] = { 0 };
    double loss;
    fsc_status s = fsc_tp_gpt_backward(m, 1.0f);
    if (s == FSC_OK) s = fsc_error(FSC_ERR_INTERNAL, "backward before forward succeeded");
    else if (s == FSC_ERR_STATE) s = fsc_tp_gpt_forward(m, tok, tgt, 1, &loss); /* 8 rows */
    fsc_tp_gpt_free(m);
    return s;
}

static void test_tp_gpt_errors(void **state) {
    (void)state;
    int mode = 1; /* 3 heads over 2 ranks */
    assert_err(tt_run(2, create_rank, &mode), FSC_ERR_INVALID, "3 heads do not split over a tensor group of 2");
    mode = 2; /* 4 heads over 3 ranks */
    assert_err(tt_run(3, create_rank, &mode), FSC_ERR_INVALID, "4 heads do not split over a tensor group of 3");
    mode = 3; /* ranks disagree on sequence parallelism */
    assert_err(tt_run(2, create_rank, &mode), FSC_ERR_INVALID, "another configuration");
}

static fsc_status sp_rows_rank(fsc_rank *r, void *arg) {
    (void)arg;
    fsc_gpt_config c = cfg();
    c.seq = 3; /* 1 x 3 rows over 2 ranks */
    fsc_tp_opts to = { .sequence_parallel = 1 };
    fsc_tp_gpt *m;
    FSC_TRY(fsc_tp_gpt_create(r->dev, r->comm, &c, &to, SEED, &m));
    int32_t tok[3] = { 1, 2, 3 }, tgt[3] = { 2, 3, 4 };
    double loss;
    fsc_status s = fsc_tp_gpt_forward(m, tok, tgt, 1, &loss);
    fsc_tp_gpt_free(m);
    return s;
}

static void test_tp_gpt_sequence_rows_must_split(void **state) {
    (void)state;
    assert_err(tt_run(2, sp_rows_rank, NULL), FSC_ERR_INVALID, "1 x 3 token rows do not split over a tensor group of 2");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tp_gpt_group_of_one_is_bitwise),
        cmocka_unit_test(test_tp_gpt_matches_unsharded),
        cmocka_unit_test(test_tp_gpt_export_and_load),
        cmocka_unit_test(test_tp_gpt_errors),
        cmocka_unit_test(test_tp_gpt_sequence_rows_must_split),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
