/* Tensor parallelism under the pipeline schedules with virtual stages and W actions (lib/parallel/pipe.c,
 * docs/pipeline.md): interleaved 1F1B (2 chunks per rank), ZB-H1, ZBV and zbv's lists as a custom schedule in a V,
 * with the tensor-parallel GPT (lib/layers/tp_*.c, whose blocks split their backward: B runs the input part with
 * every collective that makes the input gradient, W the weight part).
 * Oracle, bit for bit: the same dp x tp without a pipeline, DDP accumulating the same micro-batches (accum M,
 * no_sync): the losses and gradient norms of every step and the full parameters after 3 AdamW steps with
 * clipping that clips. Cases: tp 2 x pp 2 (world 4) in every schedule, with and without sequence parallelism,
 * in the pipeline checkpoint modes always, except_last (default) and never, zb-h1 also without prefetch;
 * dp 2 x tp 2 x pp 2 (world 8) with sp and DDP (interleaved), ZeRO-1 (zb-h1) and FSDP (zbv) inside the stages. The tensor-parallel layers' own split (input part, then weight part,
 * equal to the whole backward) is checked layer by layer in tests/test_tp_split.c. Refused: tensor ranks passing
 * other custom lists (under sp a W gathers over the tensor group: the lists must agree). */
#include "test_tp_util.h"

#define STEPS 3
enum { GB = 8, M = 4, BLOCKS = 4 }; /* global batch, micro-batches per step, blocks (pp 2 x 2 chunks) */

static fsc_gpt_config cfg(void) {
    return (fsc_gpt_config){ .layers = BLOCKS, .dim = 24, .heads = 4, .seq = 8, .vocab = 48 };
}

typedef struct {
    fsc_parallel_opts po;
    int world, dp;
    double loss[STEPS], norm[STEPS];
    float *params; /* full parameters after training, rank 0 */
} run_t;

static fsc_status engine_rank(fsc_rank *r, void *arg) {
    run_t *run = arg;
    fsc_gpt_config c = cfg();
    fsc_optim_config oc = { .kind = FSC_OPT_ADAMW, .lr = 1e-3f, .weight_decay = 0.1f, .beta1 = 0.9f,
                            .beta2 = 0.999f, .eps = 1e-8f };
    fsc_engine *e = NULL;
    FSC_TRY(fsc_engine_create(r, &c, &run->po, &oc, 9, &e));
    const fsc_layout *l = fsc_engine_layout(e);
    const int lb = GB / l->dp;
    int32_t tok[GB * 8], tgt[GB * 8];
    fsc_status s = FSC_OK;
    for (int step = 0; step < STEPS && s == FSC_OK; step++) {
        tt_batch(step, l->data * lb, lb, tok, tgt);
        fsc_step_info info;
        s = fsc_engine_step(e, tok, tgt, lb, GB, &info);
        if (s == FSC_OK && r->rank == 0) run->loss[step] = info.loss, run->norm[step] = info.grad_norm;
    }
    if (s == FSC_OK) s = fsc_engine_full_params(e, r->rank == 0 ? run->params : NULL);
    fsc_engine_free(e);
    return s;
}

static size_t nparams(void) {
    fsc_gpt_config c = cfg();
    return fsc_gpt_num_params(&c);
}

static run_t make(int dp, int tp, int pp, int sp, fsc_parallel_kind kind) {
    run_t x;
    memset(&x, 0, sizeof x);
    x.po = (fsc_parallel_opts){ .kind = kind, .tp = tp, .pp = pp, .accum = M, .no_sync = 1,
                                .reshard_after_forward = -1, .param_dtype = FSC_F32, .reduce_dtype = FSC_F32,
                                .clip = 0.5f, .sequence_parallel = sp, .prefetch = 1 };
    x.world = dp * tp * pp, x.dp = dp;
    x.params = calloc(nparams(), sizeof(float));
    return x;
}

static void train(run_t *x) {
    assert_non_null(x->params);
    assert_ok(tt_run(x->world, engine_rank, x));
}

static void assert_same(const run_t *a, const run_t *b, const char *what) {
    for (int s = 0; s < STEPS; s++) {
        if (memcmp(&a->loss[s], &b->loss[s], sizeof(double)) != 0)
            fail_msg("%s: loss of step %d %.17g vs %.17g", what, s, a->loss[s], b->loss[s]);
        if (memcmp(&a->norm[s], &b->norm[s], sizeof(double)) != 0)
            fail_msg("%s: gradient norm of step %d %.17g vs %.17g", what, s, a->norm[s], b->norm[s]);
    }
    assert_bits_equal(a->params, b->params, nparams(), what);
}

/* zbv's lists of P ranks, to run as a custom schedule in a V */
typedef struct {
    fsc_pipe_action *lists[2];
    int n[2];
} zbv_lists;

static void set_schedule(run_t *x, int k, zbv_lists *z) {
    static const fsc_pipe_schedule kinds[] = { FSC_SCHED_INTERLEAVED, FSC_SCHED_ZB_H1, FSC_SCHED_ZBV,
                                               FSC_SCHED_CUSTOM };
    x->po.schedule = kinds[k];
    if (kinds[k] == FSC_SCHED_INTERLEAVED) x->po.virtual_stages = 2;
    if (kinds[k] != FSC_SCHED_CUSTOM) return;
    for (int r = 0; r < 2; r++) assert_ok(fsc_pipe_schedule_make(FSC_SCHED_ZBV, 2, 2, M, r, &z->lists[r], &z->n[r]));
    x->po.placement = FSC_PIPE_V, x->po.virtual_stages = 2;
    x->po.actions = (const fsc_pipe_action *const *)z->lists, x->po.nactions = z->n;
}

static const char *const sched_name[] = { "interleaved v 2", "zb-h1", "zbv", "custom zbv lists in a V" };

/* tp 2 x pp 2 (world 4): every schedule, with and without sequence parallelism, three checkpoint modes */
static void test_tp_pp_schedules_equal_ddp(void **state) {
    (void)state;
    static const fsc_pipe_checkpoint modes[] = { FSC_PIPE_CKPT_EXCEPT_LAST, FSC_PIPE_CKPT_ALWAYS, FSC_PIPE_CKPT_NEVER };
    static const char *const mode_name[] = { "except_last", "always", "never" };
    for (int sp = 0; sp <= 1; sp++) {
        run_t flat = make(1, 2, 1, sp, FSC_PAR_DDP); /* the oracle: tp 2, the same micro-batches, no pipeline */
        train(&flat);
        assert_true(flat.norm[0] > 0.5); /* the clipping clips */
        for (int k = 0; k < 4; k++)
            for (int m = 0; m < 3; m++) {
                if (k == 3 && m > 0) continue; /* the custom V: the default mode */
                run_t x = make(1, 2, 2, sp, FSC_PAR_DDP);
                zbv_lists z = { { NULL, NULL }, { 0, 0 } };
                set_schedule(&x, k, &z);
                x.po.pipe_checkpoint = modes[m];
                train(&x);
                char what[128];
                snprintf(what, sizeof what, "tp 2 x pp 2 %s%s, checkpoint %s", sched_name[k], sp ? " sp" : "",
                         mode_name[m]);
                assert_same(&x, &flat, what);
                printf("  %s: bit-identical to tp 2 DDP without pipeline\n", what);
                free(z.lists[0]), free(z.lists[1]);
                free(x.params);
            }
        run_t x = make(1, 2, 2, sp, FSC_PAR_DDP); /* zb-h1 without prefetch: every message on the pipeline group */
        x.po.schedule = FSC_SCHED_ZB_H1, x.po.prefetch = 0;
        train(&x);
        assert_same(&x, &flat, sp ? "tp 2 x pp 2 zb-h1 sp, prefetch 0" : "tp 2 x pp 2 zb-h1, prefetch 0");
        free(x.params);
        free(flat.params);
    }
}

/* dp 2 x tp 2 x pp 2 (world 8): DDP, ZeRO-1 and FSDP inside the stages, against dp 2 x tp 2 DDP */
static void test_dp_tp_pp_schedules_equal_ddp(void **state) {
    (void)state;
    run_t flat = make(2, 2, 1, 1, FSC_PAR_DDP);
    train(&flat);
    for (int k = 0; k < 3; k++) {
        static const fsc_parallel_kind kinds[] = { FSC_PAR_DDP, FSC_PAR_ZERO1, FSC_PAR_FSDP };
        static const char *const names[] = { "ddp", "zero1", "fsdp full_shard" };
        run_t x = make(2, 2, 2, 1, kinds[k]);
        zbv_lists z = { { NULL, NULL }, { 0, 0 } };
        set_schedule(&x, k, &z);
        train(&x);
        char what[128];
        snprintf(what, sizeof what, "dp 2 x tp 2 x pp 2 sp %s, %s inside the stages", sched_name[k], names[k]);
        assert_same(&x, &flat, what);
        printf("  %s: bit-identical to dp 2 x tp 2 DDP\n", what);
        free(x.params);
    }
    free(flat.params);
}

/* Every rank must pass the same custom lists (parallel.h): under sequence parallelism a W gathers over the tensor
 * group, so tensor ranks of a stage running their Ws in other places would meet their collectives in other orders
 * (a mismatch, a hang over a transport that does not check, or gathers of equal sizes paired silently). Tensor
 * rank 1 of stage 0 here runs the same valid zb-h1 list with its Ws moved to the end: the engine refuses on every
 * rank when it is made, naming the list. */
typedef struct {
    fsc_pipe_action *lists[2], *moved;
    int n[2];
    fsc_status status[4];
} lists_job;

static fsc_status lists_rank(fsc_rank *r, void *arg) {
    lists_job *j = arg;
    fsc_gpt_config c = cfg();
    fsc_optim_config oc = { .kind = FSC_OPT_SGD, .lr = 1e-3f };
    run_t x = make(1, 2, 2, 1, FSC_PAR_DDP);
    free(x.params);
    const fsc_pipe_action *mine[2] = { r->rank % 2 == 1 ? j->moved : j->lists[0], j->lists[1] };
    x.po.schedule = FSC_SCHED_CUSTOM, x.po.actions = mine, x.po.nactions = j->n;
    fsc_engine *e = NULL;
    fsc_status s = fsc_engine_create(r, &c, &x.po, &oc, 9, &e);
    j->status[r->rank] = s;
    fsc_engine_free(e);
    return s;
}

static void test_tensor_ranks_other_lists_refused(void **state) {
    (void)state;
    lists_job j;
    memset(&j, 0, sizeof j);
    for (int r = 0; r < 2; r++) assert_ok(fsc_pipe_schedule_make(FSC_SCHED_ZB_H1, 2, 1, M, r, &j.lists[r], &j.n[r]));
    j.moved = malloc((size_t)j.n[0] * sizeof *j.moved);
    assert_non_null(j.moved);
    int k = 0;
    for (int pass = 0; pass < 2; pass++) /* the F and B in order, then every W */
        for (int i = 0; i < j.n[0]; i++)
            if ((j.lists[0][i].kind == FSC_ACT_WEIGHT) == pass) j.moved[k++] = j.lists[0][i];
    assert_int_equal(k, j.n[0]);
    assert_int_equal(fsc_pipe_schedule_validate(2, 1, M, (const fsc_pipe_action *const[]){ j.moved, j.lists[1] },
                                                j.n), FSC_OK); /* valid on its own */
    const fsc_status s = tt_run(4, lists_rank, &j);
    assert_int_equal(s, FSC_ERR_INVALID);
    assert_non_null(strstr(fsc_last_error(), "ranks disagree on parallel.actions.0"));
    for (int r = 0; r < 4; r++) assert_int_equal(j.status[r], FSC_ERR_INVALID);
    printf("  %s\n", fsc_last_error());
    fsc_pipe_schedule_free(j.lists[0]), fsc_pipe_schedule_free(j.lists[1]);
    free(j.moved);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tp_pp_schedules_equal_ddp),
        cmocka_unit_test(test_dp_tp_pp_schedules_equal_ddp),
        cmocka_unit_test(test_tensor_ranks_other_lists_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
