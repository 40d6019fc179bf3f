/* Tests for the engine's exact reduction (lib/parallel/exact.c, docs/determinism.md).
 * Oracles:
 * - the same global batch of 12 in units of 1 gives the same losses and parameters bit for bit at (N, K) =
 *   (1,12), (2,6), (3,4), (4,3), (6,2), (12,1) with ddp, fsdp (full, grad_op, hybrid, no_shard), zero1 and zero2
 *   (none at N 1);
 * - a step that starts on an exponent too fine for its gradients (they are out of range: never wrapped) or too
 *   coarse is recomputed (exact_attempts 2) and gives the bits of the run that started on the agreed exponent;
 * - non-finite unit gradients are skipped alike in every configuration, which end with the same bits;
 * - the options exact mode does not run with, and units that do not split the batch, are refused by name. */
#include "partest.h"
#include "parallel/exact.h"

static void run_exact(pt_run *r, int world, int accum, fsc_parallel_kind kind, fsc_shard_strategy shard) {
    *r = pt_make(world, world == 1 ? FSC_PAR_NONE : kind);
    r->po.shard = shard;
    r->po.reduce_exact = 1;
    r->po.accum = accum;
    r->po.no_sync = 1;
    r->po.prefetch = 1;
    r->batch = 12;
    r->steps = 5;
    pt_train(r);
}

static void test_world_and_accumulation(void **state) {
    (void)state;
    static const int nk[][2] = { { 1, 12 }, { 2, 6 }, { 3, 4 }, { 4, 3 }, { 6, 2 }, { 12, 1 } };
    static const struct { fsc_parallel_kind kind; fsc_shard_strategy shard; const char *name; } st[] = {
        { FSC_PAR_DDP, FSC_SHARD_FULL, "ddp" },           { FSC_PAR_FSDP, FSC_SHARD_FULL, "fsdp full" },
        { FSC_PAR_FSDP, FSC_SHARD_GRAD_OP, "fsdp grad_op" }, { FSC_PAR_FSDP, FSC_SHARD_HYBRID, "fsdp hybrid" },
        { FSC_PAR_FSDP, FSC_SHARD_NONE, "fsdp no_shard" }, { FSC_PAR_ZERO1, FSC_SHARD_FULL, "zero1" },
        { FSC_PAR_ZERO2, FSC_SHARD_FULL, "zero2" },
    };
    pt_run ref, r;
    run_exact(&ref, 1, 12, FSC_PAR_NONE, FSC_SHARD_FULL);
    assert_int_equal(ref.info[0].exact_attempts, 2); /* the first step finds its exponent */
    for (size_t i = 1; i < sizeof nk / sizeof nk[0]; i++)
        for (size_t k = 0; k < sizeof st / sizeof st[0]; k++) {
            run_exact(&r, nk[i][0], nk[i][1], st[k].kind, st[k].shard);
            char what[64];
            snprintf(what, sizeof what, "%s exact at N %d, K %d against N 1, K 12", st[k].name, nk[i][0], nk[i][1]);
            pt_assert_same(&ref, &r, what);
            free(r.params);
        }
    /* ordered mode differs across these (the premise of exact mode) */
    pt_run o1 = pt_make(1, FSC_PAR_NONE), o3 = pt_make(3, FSC_PAR_DDP);
    o1.batch = o3.batch = 12, o1.po.accum = 12, o3.po.accum = 4;
    pt_train(&o1), pt_train(&o3);
    assert_true(memcmp(o1.params, o3.params, fsc_gpt_num_params(&o1.cfg) * sizeof(float)) != 0);
    free(o1.params), free(o3.params), free(ref.params);
}

/* Non-finite steps: one SGD step with lr = weight decay = 1e30 makes the weights +-inf (its own loss is finite);
 * the next steps' unit gradients hold inf and NaN, which have no exponent: the reduced gradients carry a NaN and
 * every configuration skips the same steps (nonfinite skip) and ends with the same bits. */
static void test_nonfinite_skips_alike(void **state) {
    (void)state;
    static const int nk[][3] = { { 1, 12, FSC_PAR_NONE }, { 3, 4, FSC_PAR_DDP }, { 4, 3, FSC_PAR_FSDP },
                                 { 6, 2, FSC_PAR_ZERO2 } };
    pt_run ref;
    for (int i = 0; i < 4; i++) {
        pt_run r = pt_make(nk[i][0], (fsc_parallel_kind)nk[i][2]);
        r.po.reduce_exact = 1, r.po.accum = nk[i][1], r.po.no_sync = 1;
        r.po.nonfinite = FSC_NONFINITE_SKIP;
        r.po.clip = 0;
        r.oc = (fsc_optim_config){ .kind = FSC_OPT_SGD, .lr = 1e30f, .weight_decay = 1e30f };
        r.batch = 12, r.steps = 3;
        pt_train(&r);
        if (r.info[0].skipped || !r.info[1].skipped || !r.info[2].skipped)
            fail_msg("N %d: steps skipped %d %d %d, expected 0 1 1", nk[i][0], r.info[0].skipped, r.info[1].skipped,
                     r.info[2].skipped);
        if (i == 0) {
            ref = r;
            continue;
        }
        pt_assert_same(&ref, &r, "non-finite steps with the exact reduction");
        free(r.params);
    }
    free(ref.params);
}

/* Two steps on 3 ranks (accum 2, units of 2); before each step the first attempt's exponent is shifted by
 * shift[step] from what the reference agreed on for that step (0: left alone). */
typedef struct {
    int shift[2], agreed[2], attempts[2][3];
    float *params;
} range_job;

static fsc_status range_fn(fsc_rank *r, void *arg) {
    range_job *j = arg;
    fsc_gpt_config c = pt_small_config();
    fsc_parallel_opts po = fsc_parallel_opts_default();
    po.kind = FSC_PAR_DDP, po.accum = 2, po.reduce_exact = 1;
    fsc_optim_config oc = pt_adamw();
    fsc_engine *e = NULL;
    FSC_TRY(fsc_engine_create(r, &c, &po, &oc, 77, &e));
    int32_t tok[4 * 7], tgt[4 * 7];
    fsc_status s = FSC_OK;
    for (int step = 0; step < 2 && s == FSC_OK; step++) {
        pt_batch(tok, tgt, step, 12, r->rank, 4, c.seq, c.vocab);
        if (j->shift[step]) fsc_exact_set_exponent(e, j->agreed[step] + j->shift[step]);
        fsc_step_info info;
        s = fsc_engine_step(e, tok, tgt, 4, 12, &info);
        j->attempts[step][r->rank] = info.exact_attempts;
        if (s == FSC_OK && r->rank == 0 && !j->shift[step]) j->agreed[step] = fsc_exact_get_exponent(e);
    }
    if (s == FSC_OK) s = fsc_engine_full_params(e, r->rank == 0 ? j->params : NULL);
    fsc_engine_free(e);
    return s;
}

static void test_range_recomputes(void **state) {
    (void)state;
    const size_t P = fsc_gpt_num_params(&(fsc_gpt_config){ .layers = 2, .dim = 24, .heads = 2, .seq = 7, .vocab = 50 });
    fsc_cluster_opts co = fsc_cluster_opts_default();
    co.world = 3;
    range_job ref = { .params = calloc(P, sizeof(float)) };
    assert_ok(fsc_cluster_run(&co, range_fn, &ref));
    for (int k = 0; k < 3; k++) assert_int_equal(ref.attempts[0][k], 2);
    /* a gradient 24 bits beyond the range of the exponent the step starts on, then one 24 bits too coarse */
    const int shifts[][2] = { { -24, -24 }, { 24, 24 }, { -24, 0 } };
    for (int t = 0; t < 3; t++) {
        range_job j = { .shift = { shifts[t][0], shifts[t][1] }, .agreed = { ref.agreed[0], ref.agreed[1] },
                        .params = calloc(P, sizeof(float)) };
        assert_ok(fsc_cluster_run(&co, range_fn, &j));
        for (int step = 0; step < 2; step++)
            for (int k = 0; k < 3; k++)
                if (j.shift[step] && j.attempts[step][k] != 2)
                    fail_msg("shift %d at step %d: rank %d ran %d attempts, not 2", j.shift[step], step, k,
                             j.attempts[step][k]);
        char what[64];
        snprintf(what, sizeof what, "exponent shifted by %d, %d", shifts[t][0], shifts[t][1]);
        assert_bits_equal(ref.params, j.params, P, what);
        free(j.params);
    }
    free(ref.params);
}

/* What exact mode refuses, with the option's name. */
static fsc_status refuse_fn(fsc_rank *r, void *arg) {
    const fsc_parallel_opts *po = arg;
    fsc_gpt_config c = pt_small_config();
    fsc_optim_config oc = pt_adamw();
    fsc_engine *e = NULL;
    fsc_status s = fsc_engine_create(r, &c, po, &oc, 1, &e);
    if (s == FSC_OK) {
        int32_t tok[6 * 7] = { 0 }, tgt[6 * 7] = { 0 };
        s = fsc_engine_step(e, tok, tgt, 6, 6 * fsc_engine_layout(e)->dp, NULL);
    }
    fsc_engine_free(e);
    return s;
}

static void refuse(fsc_parallel_opts po, int world, fsc_status want, const char *needle) {
    fsc_cluster_opts co = fsc_cluster_opts_default();
    co.world = world;
    assert_err(fsc_cluster_run(&co, refuse_fn, &po), want, needle);
}

static void test_refusals(void **state) {
    (void)state;
    fsc_parallel_opts po = fsc_parallel_opts_default();
    po.unit = 2;
    refuse(po, 1, FSC_ERR_INVALID, "unit 2 applies to the exact reduction");
    po.reduce_exact = 1, po.unit = 4;
    refuse(po, 1, FSC_ERR_INVALID, "the local batch of 6 sequences does not split into units of 4");
    po.unit = -1;
    refuse(po, 1, FSC_ERR_INVALID, "unit must be >= 1");
    po.unit = 0, po.reduce_exact = 2;
    refuse(po, 1, FSC_ERR_INVALID, "reduce_exact must be 0 or 1");
    po.reduce_exact = 1, po.kind = FSC_PAR_FSDP, po.offload = FSC_OFFLOAD_ALL; /* runs (test_trainer_exact: bits) */
    fsc_cluster_opts co = fsc_cluster_opts_default();
    co.world = 2;
    assert_ok(fsc_cluster_run(&co, refuse_fn, &po));
    po.offload = FSC_OFFLOAD_NONE;
    po.kind = FSC_PAR_DDP, po.pp = 2, po.accum = 2, po.unit = 1; /* a pipeline's unit is its micro-batch (6 / 2 here) */
    refuse(po, 2, FSC_ERR_INVALID, "the unit is the pipeline's micro-batch");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_world_and_accumulation),
        cmocka_unit_test(test_range_recomputes),
        cmocka_unit_test(test_nonfinite_skips_alike),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
