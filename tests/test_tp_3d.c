/* The 3D layout (lib/parallel/layout.c) and data x tensor-parallel training of the GPT in the engine (its
 * tensor-parallel form from the layers).
 * Oracles:
 * - layout: Megatron's rank order written out by hand (rank = (pipe dp + data) tp + tensor) for
 *   dp 2 x tp 2 x pp 2, every group's members found by all-gathering world ranks over it, and the errors;
 * - dp 2 x tp 2 and dp 1 x tp 4, with and without sequence parallelism, equal the single-rank engine on the
 *   whole batch within the tensor-parallel tolerances (docs/tensor_parallel.md): loss 1e-6 relative, weights
 *   1e-5 absolute (lr 1e-3); the data group carries exactly the gradient all-reduce and the loss
 *   all-gather, the tensor group the rest (printed per group). */
#include "test_tp_util.h"

#define STEPS 3

static fsc_gpt_config cfg(void) {
    return (fsc_gpt_config){ .layers = 2, .dim = 24, .heads = 4, .seq = 8, .vocab = 48 };
}
enum { GB = 4 }; /* global batch */

/* ---- layout ---- */
static void test_layout_order_and_errors(void **state) {
    (void)state;
    fsc_layout l;
    for (int r = 0; r < 8; r++) {
        assert_ok(fsc_layout_make(8, 2, 2, 2, r, &l));
        assert_int_equal(l.tensor, r % 2);
        assert_int_equal(l.data, (r / 2) % 2);
        assert_int_equal(l.pipe, r / 4);
    }
    assert_ok(fsc_layout_make(8, 2, 0, 2, 5, &l)); /* the data size derived */
    assert_int_equal(l.dp, 2);
    assert_ok(fsc_layout_make(12, 3, 0, 0, 7, &l)); /* pipeline 1, data 4 */
    /* sizes whose product passes int: refused (UBSan: no signed overflow) */
    assert_err(fsc_layout_make(INT32_MAX, 65536, 65536, 0, 0, &l), FSC_ERR_INVALID, "does not split into groups");
    assert_true(l.pp == 1 && l.dp == 4 && l.tensor == 1 && l.data == 2);
    char buf[160];
    assert_ok(fsc_layout_make(8, 2, 2, 2, 5, &l));
    fsc_layout_describe(&l, buf, sizeof buf);
    assert_string_equal(buf, "world 8 = pp 2 x dp 2 x tp 2 (tensor fastest); rank 5: pipe 1, data 0, tensor 1");
    assert_err(fsc_layout_make(8, 2, 3, 1, 0, &l), FSC_ERR_INVALID, "world 8 is not dp 3 x tp 2 x pp 1");
    assert_err(fsc_layout_make(8, 3, 0, 1, 0, &l), FSC_ERR_INVALID, "does not split into groups of 3");
    assert_err(fsc_layout_make(4, 2, 2, 1, 4, &l), FSC_ERR_INVALID, "rank 4 is outside the world of 4");
    int order[3];
    assert_ok(fsc_layout_parse_order("dp,pp,tp", order));
    assert_true(order[0] == FSC_DIM_DATA && order[1] == FSC_DIM_PIPE && order[2] == FSC_DIM_TENSOR);
    assert_ok(fsc_layout_parse_order("", order));
    assert_true(order[0] == FSC_DIM_TENSOR && order[1] == FSC_DIM_DATA && order[2] == FSC_DIM_PIPE);
    assert_err(fsc_layout_parse_order("tp,tp,pp", order), FSC_ERR_INVALID, "names tp twice");
    assert_err(fsc_layout_parse_order("tp,dp", order), FSC_ERR_INVALID, "must name tp, dp and pp once each");
    assert_err(fsc_layout_parse_order("tp,,dp,pp", order), FSC_ERR_INVALID, "'' is not tp, dp or pp");
    /* found by fuzz/fuzz_layout.c: a trailing comma was accepted */
    assert_err(fsc_layout_parse_order("tp,dp,pp,", order), FSC_ERR_INVALID, "ends with a comma");
}

static fsc_status groups_rank(fsc_rank *r, void *arg) {
    (void)arg;
    fsc_layout l;
    FSC_TRY(fsc_layout_make(r->world, 2, 2, 2, r->rank, &l));
    fsc_comm *g[3];
    FSC_TRY(fsc_layout_split(r->comm, &l, &g[0], &g[1], &g[2]));
    const char *names[3] = { "tensor", "data", "pipeline" };
    int32_t *d;
    FSC_TRY(fsc_device_alloc(r->dev, FSC_TAG_COMM, 3 * sizeof(int32_t), (void **)&d));
    for (int k = 0; k < 3; k++) {
        TT_TRUE(strcmp(fsc_comm_name(g[k]), names[k]) == 0, "group %d named %s", k, fsc_comm_name(g[k]));
        int32_t mine = r->rank, all[2];
        FSC_TRY(fsc_device_upload(r->dev, d, &mine, sizeof mine));
        FSC_TRY(fsc_comm_all_gather(g[k], d, d + 1, 1, FSC_I32));
        FSC_TRY(fsc_device_download(r->dev, all, d + 1, sizeof all));
        int stride = k == 0 ? 1 : k == 1 ? 2 : 4; /* members differ in one coordinate only */
        int base = r->rank - (k == 0 ? l.tensor : k == 1 ? 2 * l.data : 4 * l.pipe);
        for (int i = 0; i < 2; i++)
            TT_TRUE(all[i] == base + i * stride, "rank %d: %s group member %d is rank %d, want %d", r->rank, names[k], i,
                    all[i], base + i * stride);
    }
    fsc_device_release(r->dev, d);
    for (int k = 0; k < 3; k++) fsc_comm_free(g[k]);
    return FSC_OK;
}

static void test_layout_groups(void **state) {
    (void)state;
    assert_ok(tt_run(8, groups_rank, NULL));
}

/* ---- training: the GPT in the engine over data x tensor ---- */
typedef struct {
    fsc_parallel_kind kind;
    int tp, sp;
    double loss[STEPS], norm[STEPS];
    float *params;
    fsc_comm_stats tensor, data; /* rank 0, the last step */
    size_t plocal;               /* rank 0's local parameters (its slices) */
} tr_run;

static fsc_optim_config adamw(void) {
    return (fsc_optim_config){ .kind = FSC_OPT_ADAMW, .lr = 1e-3f, .weight_decay = 0.1f, .beta1 = 0.9f,
                               .beta2 = 0.999f, .eps = 1e-8f };
}

static fsc_status train_rank(fsc_rank *r, void *arg) {
    tr_run *run = arg;
    fsc_gpt_config c = cfg();
    fsc_optim_config oc = adamw();
    int32_t tok[GB * 8], tgt[GB * 8];
    fsc_engine *e = NULL;
    fsc_parallel_opts po = { .kind = run->kind, .accum = 1, .reshard_after_forward = -1, .param_dtype = FSC_F32,
                             .reduce_dtype = FSC_F32, .clip = 0.5f, .tp = run->tp, .sequence_parallel = run->sp };
    FSC_TRY(fsc_engine_create(r, &c, &po, &oc, 9, &e));
    const fsc_layout *l = fsc_engine_layout(e);
    if (r->rank == 0 && getenv("FSC_TEST_VERBOSE")) {
        char buf[160];
        fsc_layout_describe(l, buf, sizeof buf);
        fprintf(stderr, "  %s\n", buf);
    }
    int lb = GB / l->dp;
    fsc_status s = FSC_OK;
    for (int step = 0; step < STEPS && s == FSC_OK; step++) {
        tt_batch(step, l->data * lb, lb, tok, tgt);
        fsc_step_info info;
        fsc_engine_reset_comm_stats(e);
        s = fsc_engine_step(e, tok, tgt, lb, GB, &info);
        if (s == FSC_OK && r->rank == 0) run->loss[step] = info.loss, run->norm[step] = info.grad_norm;
    }
    if (s == FSC_OK && r->rank == 0) {
        fsc_engine_comm_stats_group(e, FSC_GROUP_TENSOR, &run->tensor);
        fsc_engine_comm_stats_group(e, FSC_GROUP_DATA, &run->data);
        run->plocal = fsc_model_num_params(fsc_engine_model(e));
    }
    if (s == FSC_OK) s = fsc_engine_full_params(e, r->rank == 0 ? run->params : NULL);
    fsc_engine_free(e);
    return s;
}

static tr_run make(fsc_parallel_kind kind, int tp, int sp) {
    tr_run x = { .kind = kind, .tp = tp, .sp = sp };
    fsc_gpt_config c = cfg();
    x.params = calloc(fsc_gpt_num_params(&c), sizeof(float));
    return x;
}

static void test_tp_matches_single_rank(void **state) {
    (void)state;
    fsc_gpt_config c = cfg();
    size_t P = fsc_gpt_num_params(&c);
    tr_run ref = make(FSC_PAR_NONE, 1, 0);
    assert_ok(tt_run(1, train_rank, &ref));
    assert_true(ref.norm[0] > 0.5); /* clipping happened */
    struct { int tp, dp, sp; } cases[] = { { 2, 2, 0 }, { 2, 2, 1 }, { 4, 1, 0 }, { 4, 1, 1 } };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        tr_run x = make(cases[k].dp > 1 ? FSC_PAR_DDP : FSC_PAR_NONE, cases[k].tp, cases[k].sp);
        assert_ok(tt_run(cases[k].tp * cases[k].dp, train_rank, &x));
        for (int s = 0; s < STEPS; s++) {
            double e = fabs(x.loss[s] - ref.loss[s]) / ref.loss[s];
            if (!(e <= 1e-6)) fail_msg("dp %d x tp %d: loss of step %d %.9g vs %.9g", cases[k].dp, cases[k].tp, s,
                                       x.loss[s], ref.loss[s]);
            assert_true(fabs(x.norm[s] - ref.norm[s]) <= 1e-5 * ref.norm[s]);
        }
        double worst = 0;
        for (size_t i = 0; i < P; i++) worst = fmax(worst, fabs((double)x.params[i] - ref.params[i]));
        if (!(worst <= 1e-5)) fail_msg("dp %d x tp %d sp %d: weights differ by %.3g", cases[k].dp, cases[k].tp,
                                       cases[k].sp, worst);
        /* the data group: the gradient all-reduce of the rank's slices and the step's all-gather of the loss and
         * the batch check and the step count (four doubles per rank); the tensor group: the layers' collectives */
        int dp = cases[k].dp, tp = cases[k].tp;
        double f = (dp - 1.0) / dp;
        assert_true(x.plocal < P);
        assert_true(fabs(x.data.bytes[FSC_OP_ALL_GATHER] - f * 32.0 * dp) < 1e-9);
        assert_true(fabs(x.data.bytes[FSC_OP_ALL_REDUCE] - 2.0 * f * 4.0 * (double)x.plocal) < 1e-6);
        assert_true(x.tensor.calls[cases[k].sp ? FSC_OP_REDUCE_SCATTER : FSC_OP_ALL_REDUCE] > 0);
        double tbytes = 0;
        for (int op = 0; op < FSC_OP_COUNT; op++) tbytes += x.tensor.bytes[op];
        printf("  dp %d x tp %d%s: weights within %.2g; per step and rank: tensor group %.0f bytes (%llu calls), "
               "data group %.0f bytes\n", dp, tp, cases[k].sp ? " sp" : "", worst, tbytes,
               (unsigned long long)(x.tensor.calls[FSC_OP_ALL_REDUCE] + x.tensor.calls[FSC_OP_ALL_GATHER] +
                                    x.tensor.calls[FSC_OP_REDUCE_SCATTER]),
               x.data.bytes[FSC_OP_ALL_REDUCE] + x.data.bytes[FSC_OP_ALL_GATHER]);
        free(x.params);
    }
    free(ref.params);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout_order_and_errors),
        cmocka_unit_test(test_layout_groups),
        cmocka_unit_test(test_tp_matches_single_rank),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
