/* Learning-rate schedules (lib/optim/schedule.c) and the engine's rate (lib/parallel/lr.c).
 * Oracles:
 * - fsc_lr_at equals values worked out by hand from the formulas of schedule.h (llm.c's warmup ramp, nanoGPT's
 *   cosine), a constant schedule returns lr itself after the warmup, and bad schedules are refused by field;
 * - a step after fsc_engine_set_lr(x) gives the same bits as an engine created with lr x;
 * - a run that sets the scheduled rate before every step, saved at step 3 and resumed in an engine created with
 *   another lr (and on another strategy), ends with the uninterrupted run's parameters bit for bit; the loaded
 *   engine's rate is the rate of the checkpoint's last step. */
#include <math.h>
#include "testutil.h"

enum { GB = 4, T = 7, V = 50, STEPS = 6, SAVE_AT = 3 };

static void test_values(void **state) {
    (void)state;
    fsc_lr_schedule c = { .kind = FSC_LR_COSINE, .lr = 1.0f, .min_lr = 0.1f, .warmup = 10, .total = 110 };
    assert_ok(fsc_lr_schedule_validate(&c));
    assert_true(fsc_lr_at(&c, 0) == 0.1f);   /* (0 + 1) / 10 */
    assert_true(fsc_lr_at(&c, 4) == 0.5f);
    assert_true(fsc_lr_at(&c, 9) == 1.0f);   /* the ramp reaches lr at its last step */
    assert_true(fsc_lr_at(&c, 10) == 1.0f);  /* r = 0: cos 0 = 1 */
    assert_true(fabsf(fsc_lr_at(&c, 60) - 0.55f) < 1e-7f); /* r = 1/2: halfway */
    assert_true(fabsf(fsc_lr_at(&c, 85) - (0.1f + 0.9f * 0.5f * (1.0f - sqrtf(0.5f)))) < 1e-6f); /* r = 3/4 */
    assert_true(fsc_lr_at(&c, 110) == 0.1f);
    assert_true(fsc_lr_at(&c, 1000) == 0.1f);
    assert_true(fsc_lr_at(&c, -5) == 0.1f);  /* a negative step is step 0 */
    fsc_lr_schedule l = c;
    l.kind = FSC_LR_LINEAR;
    assert_true(fabsf(fsc_lr_at(&l, 35) - 0.775f) < 1e-7f); /* r = 1/4: 0.1 + 0.75 x 0.9 */
    assert_true(fabsf(fsc_lr_at(&l, 60) - 0.55f) < 1e-7f);
    assert_true(fsc_lr_at(&l, 110) == 0.1f);
    fsc_lr_schedule k = { .kind = FSC_LR_CONSTANT, .lr = 3e-3f, .warmup = 4 };
    assert_ok(fsc_lr_schedule_validate(&k));
    assert_true(fsc_lr_at(&k, 0) == (float)(3e-3f * 0.25));
    assert_true(fsc_lr_at(&k, 3) == 3e-3f);
    k.warmup = 0;
    for (int s = 0; s < 100; s += 7) assert_true(fsc_lr_at(&k, s) == 3e-3f); /* bit for bit the fixed rate */
}

static void test_refused(void **state) {
    (void)state;
    fsc_lr_schedule c = { .kind = FSC_LR_COSINE, .lr = 1.0f, .min_lr = 2.0f, .warmup = 0, .total = 10 };
    assert_err(fsc_lr_schedule_validate(&c), FSC_ERR_INVALID, "min_lr");
    c.min_lr = 0.0f;
    c.warmup = 10;
    assert_err(fsc_lr_schedule_validate(&c), FSC_ERR_INVALID, "more steps");
    c.warmup = -1;
    assert_err(fsc_lr_schedule_validate(&c), FSC_ERR_INVALID, "warmup");
    c.warmup = 0;
    c.lr = NAN;
    assert_err(fsc_lr_schedule_validate(&c), FSC_ERR_INVALID, "lr");
    c.lr = 1.0f;
    c.kind = (fsc_lr_kind)7;
    assert_err(fsc_lr_schedule_validate(&c), FSC_ERR_INVALID, "kind");
    fsc_lr_kind k;
    assert_ok(fsc_lr_kind_parse("cosine", &k));
    assert_int_equal(k, FSC_LR_COSINE);
    assert_ok(fsc_lr_kind_parse("linear", &k));
    assert_int_equal(k, FSC_LR_LINEAR);
    assert_err(fsc_lr_kind_parse("step", &k), FSC_ERR_INVALID, "constant, cosine or linear");
    assert_string_equal(fsc_lr_kind_name(FSC_LR_CONSTANT), "constant");
}

typedef struct {
    fsc_parallel_opts po;
    int world;
    float lr;                 /* the engine's configured rate */
    int set_lr;               /* 1: set_lr(set_to) before the step; 2: the schedule before every step */
    float set_to;
    int steps;
    const char *save_dir;     /* write a checkpoint after SAVE_AT steps */
    const char *resume;       /* start from this checkpoint directory */
    float lr_after_load;
    fsc_status bad_set;
    float *params;
} srun;

static const fsc_lr_schedule sched = { .kind = FSC_LR_COSINE, .lr = 2e-2f, .min_lr = 2e-3f, .warmup = 2,
                                       .total = STEPS };

static fsc_gpt_config cfg(void) { return (fsc_gpt_config){ .layers = 2, .dim = 24, .heads = 4, .seq = T, .vocab = V }; }

static void batch(int s, int first, int n, int32_t *tok, int32_t *tgt) {
    for (int i = 0; i < n * T; i++) {
        uint32_t x = (uint32_t)(s * 1000 + first * T + i) * 2654435761u;
        tok[i] = (int32_t)((x >> 7) % V);
        tgt[i] = (int32_t)((x >> 17) % V);
    }
}

static fsc_status rank_fn(fsc_rank *r, void *arg) {
    srun *run = arg;
    fsc_gpt_config c = cfg();
    fsc_optim_config oc = { .kind = FSC_OPT_ADAMW, .lr = run->lr, .weight_decay = 0.1f, .beta1 = 0.9f,
                            .beta2 = 0.999f, .eps = 1e-8f };
    fsc_engine *e = NULL;
    FSC_TRY(fsc_engine_create(r, &c, &run->po, &oc, 3, &e));
    const int lb = GB / r->world;
    int32_t tok[GB * T], tgt[GB * T];
    fsc_status s = FSC_OK;
    int start = 0;
    const fsc_status bad = fsc_engine_set_lr(e, -1.0f);
    if (r->rank == 0) run->bad_set = bad; /* each rank's result is its own; rank 0 reports */
    if (fsc_engine_lr(e) != run->lr) s = fsc_error(FSC_ERR_INTERNAL, "a refused rate changed the engine's");
    if (s == FSC_OK && run->resume) {
        int64_t at = 0;
        s = fsc_ckpt_resume(e, run->resume, &at);
        start = (int)at;
        if (r->rank == 0) run->lr_after_load = fsc_engine_lr(e);
    }
    for (int step = start; step < run->steps && s == FSC_OK; step++) {
        batch(step, r->rank * lb, lb, tok, tgt);
        if (run->set_lr == 1) s = fsc_engine_set_lr(e, run->set_to);
        if (run->set_lr == 2) s = fsc_engine_set_lr(e, fsc_lr_at(&sched, step));
        fsc_step_info info;
        if (s == FSC_OK) s = fsc_engine_step(e, tok, tgt, lb, GB, &info);
        if (s == FSC_OK && run->save_dir && step + 1 == SAVE_AT) s = fsc_ckpt_save(e, run->save_dir, SAVE_AT, NULL);
    }
    if (s == FSC_OK) s = fsc_engine_full_params(e, r->rank == 0 ? run->params : NULL);
    fsc_engine_free(e);
    return s;
}

static void run(srun *r) {
    fsc_gpt_config c = cfg();
    r->params = calloc(fsc_gpt_num_params(&c), sizeof(float));
    assert_non_null(r->params);
    fsc_cluster_opts co = { .world = r->world, .device = "cpu", .timeout_s = 60, .threads_per_rank = 1 };
    assert_ok(fsc_cluster_run(&co, rank_fn, r));
    if (r->bad_set != FSC_ERR_INVALID) fail_msg("fsc_engine_set_lr(-1) was not refused");
}

static srun make(int world, fsc_parallel_kind kind, float lr) {
    srun r;
    memset(&r, 0, sizeof r);
    r.po = fsc_parallel_opts_default();
    r.po.kind = kind;
    r.po.clip = 1.0f;
    r.world = world;
    r.lr = lr;
    r.steps = STEPS;
    return r;
}

static void test_set_lr_equals_configured(void **state) {
    (void)state;
    fsc_gpt_config c = cfg();
    const size_t P = fsc_gpt_num_params(&c);
    srun a = make(2, FSC_PAR_DDP, 7e-3f), b = make(2, FSC_PAR_DDP, 1e-3f), d = make(2, FSC_PAR_DDP, 1e-3f);
    b.set_lr = 1;
    b.set_to = 7e-3f;
    run(&a);
    run(&b);
    run(&d);
    assert_bits_equal(a.params, b.params, P, "set_lr(7e-3) against an engine created with 7e-3");
    if (!memcmp(a.params, d.params, P * sizeof(float))) fail_msg("the rate makes no difference: the test is vacuous");
    free(a.params), free(b.params), free(d.params);
}

static void test_resume_exact(void **state) {
    (void)state;
    char dir[] = "/tmp/fsc_test_schedule_XXXXXX";
    assert_non_null(mkdtemp(dir));
    fsc_gpt_config c = cfg();
    const size_t P = fsc_gpt_num_params(&c);
    for (int kind = 0; kind < 2; kind++) {
        fsc_parallel_kind k = kind ? FSC_PAR_FSDP : FSC_PAR_DDP;
        srun whole = make(2, k, 2e-2f);
        whole.set_lr = 2;
        whole.save_dir = dir;
        run(&whole);
        srun resumed = make(2, kind ? FSC_PAR_ZERO2 : FSC_PAR_FSDP, 0.5f); /* another rate and strategy */
        resumed.set_lr = 2;
        resumed.resume = dir;
        run(&resumed);
        if (resumed.lr_after_load != fsc_lr_at(&sched, SAVE_AT - 1))
            fail_msg("the loaded engine's rate is %g, not the rate of step %d (%g)", (double)resumed.lr_after_load,
                     SAVE_AT - 1, (double)fsc_lr_at(&sched, SAVE_AT - 1));
        assert_bits_equal(whole.params, resumed.params, P, "resumed at step 3 against uninterrupted");
        srun fixed = make(2, k, 2e-2f);
        run(&fixed);
        if (!memcmp(whole.params, fixed.params, P * sizeof(float))) fail_msg("the schedule makes no difference");
        free(whole.params), free(resumed.params), free(fixed.params);
        test_rmtree(dir);
        assert_int_equal(mkdir(dir, 0700), 0);
    }
    test_rmtree(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_set_lr_equals_configured),
        cmocka_unit_test(test_resume_exact),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
