/* 3D parallelism in the engine: tensor parallelism (the GPT built on the tensor group from the layers'
 * tensor-parallel forms, lib/parallel/tensor.c) composed with pipeline stages
 * (lib/parallel/pipe.c) and every data-parallel strategy, world = dp x tp x pp.
 * Oracles:
 * - dp 2 x tp 2 x pp 2 on 8 ranks, GPipe and 1F1B, with and without sequence parallelism, matches the
 *   single-rank engine on the whole batch within the tensor-parallel tolerances of docs/tensor_parallel.md
 *   (loss 1e-6 relative, gradient norm 1e-5 relative, weights after 3 AdamW steps (lr 1e-3) 1e-5
 *   absolute). Not bitwise: row-parallel layers and the vocab-parallel cross entropy split sums in T pieces
 *   added in rank order, and sgemm rounds a slice of a product differently from the whole product;
 * - bit for bit, because nothing in between is left to chance: the pipeline equals the same dp x tp run
 *   without pipeline (accumulating the same micro-batches), with prefetch 0 and 1; ZeRO-1, ZeRO-2 and FSDP (full_shard,
 *   shard_grad_op, hybrid_shard) over the data group equal DDP over it (the same slices, rank-order sums,
 *   the exact clipping norm), in bf16 too; any rank order gives the same bits as Megatron's;
 * - the pipeline groups (with prefetch 1 also the links' and the wte slice's communicators, the same bytes)
 *   carry exactly the tensor rank's slices: per step stage 0 sends M activations of
 *   (B T / (sp ? T_tp : 1), C) floats and the wte slice (V/T_tp, C), the last stage M activation gradients
 *   and M head gradients of the wte slice; the kinds of group sum to the total;
 * - weights written by the 3D engine are the single-rank file; loaded back, every rank holds its slices;
 * - bad configurations are clear errors. */
#include <unistd.h>
#include "test_tp_util.h"

#define STEPS 3
#define W 8
enum { GB = 8, M = 4 }; /* global batch, micro-batches per step */

static fsc_gpt_config cfg(void) {
    return (fsc_gpt_config){ .layers = 2, .dim = 24, .heads = 4, .seq = 8, .vocab = 48 };
}

static fsc_optim_config adamw(void) {
    return (fsc_optim_config){ .kind = FSC_OPT_ADAMW, .lr = 1e-3f, .weight_decay = 0.1f, .beta1 = 0.9f,
                               .beta2 = 0.999f, .eps = 1e-8f };
}

typedef struct {
    fsc_parallel_opts po;
    int world;
    int steps;
    const char *save, *load;     /* weights written after training / read before it */
    double loss[STEPS], norm[STEPS];
    float *params;               /* full parameters after training, rank 0 */
    fsc_comm_stats total[W], group[W][FSC_GROUP_COUNT]; /* the last step */
    int ngroups[FSC_GROUP_COUNT];
    fsc_layout lay[W];
} run3;

static fsc_status engine_rank(fsc_rank *r, void *arg) {
    run3 *run = arg;
    fsc_gpt_config c = cfg();
    fsc_optim_config oc = adamw();
    fsc_engine *e = NULL;
    FSC_TRY(fsc_engine_create(r, &c, &run->po, &oc, 9, &e));
    const fsc_layout *l = fsc_engine_layout(e);
    run->lay[r->rank] = *l;
    const int lb = GB / l->dp;
    int32_t tok[GB * 8], tgt[GB * 8];
    fsc_status s = run->load ? fsc_engine_load_weights(e, run->load) : FSC_OK;
    for (int step = 0; step < run->steps && s == FSC_OK; step++) {
        tt_batch(step, l->data * lb, lb, tok, tgt);
        fsc_engine_reset_comm_stats(e);
        fsc_step_info info;
        s = fsc_engine_step(e, tok, tgt, lb, GB, &info);
        if (s == FSC_OK && r->rank == 0) run->loss[step] = info.loss, run->norm[step] = info.grad_norm;
    }
    if (s == FSC_OK) {
        fsc_engine_comm_stats(e, &run->total[r->rank]);
        for (int g = 0; g < FSC_GROUP_COUNT; g++) {
            int n = fsc_engine_comm_stats_group(e, (fsc_group_kind)g, &run->group[r->rank][g]);
            if (r->rank == 0) run->ngroups[g] = n;
        }
    }
    if (s == FSC_OK) s = fsc_engine_full_params(e, r->rank == 0 ? run->params : NULL);
    if (s == FSC_OK && run->save) s = fsc_engine_save_weights(e, run->save);
    fsc_engine_free(e);
    return s;
}

/* dp x tp x pp with strategy kind and M micro-batches (accum M, no_sync) */
static run3 make(int dp, int tp, int pp, fsc_parallel_kind kind, int accum) {
    run3 x;
    memset(&x, 0, sizeof x);
    x.po = (fsc_parallel_opts){ .kind = kind, .tp = tp, .pp = pp, .accum = accum, .no_sync = 1,
                                .reshard_after_forward = -1, .param_dtype = FSC_F32, .reduce_dtype = FSC_F32,
                                .clip = 0.5f };
    x.world = dp * tp * pp;
    x.steps = STEPS;
    fsc_gpt_config c = cfg();
    x.params = calloc(fsc_gpt_num_params(&c), sizeof(float));
    return x;
}

static void train(run3 *x) { assert_ok(tt_run(x->world, engine_rank, x)); }

static size_t nparams(void) {
    fsc_gpt_config c = cfg();
    return fsc_gpt_num_params(&c);
}

static void assert_same(const run3 *a, const run3 *b, const char *what) {
    for (int s = 0; s < STEPS; s++) {
        if (memcmp(&a->loss[s], &b->loss[s], sizeof(double)) != 0)
            fail_msg("%s: loss of step %d %.17g vs %.17g", what, s, a->loss[s], b->loss[s]);
        if (memcmp(&a->norm[s], &b->norm[s], sizeof(double)) != 0)
            fail_msg("%s: gradient norm of step %d %.17g vs %.17g", what, s, a->norm[s], b->norm[s]);
    }
    assert_bits_equal(a->params, b->params, nparams(), what);
}

/* within the tensor-parallel tolerances of the single-rank reference; returns the largest weight error */
static double assert_close(const run3 *x, const run3 *ref, const char *what) {
    for (int s = 0; s < STEPS; s++) {
        if (!(fabs(x->loss[s] - ref->loss[s]) <= 1e-6 * ref->loss[s]))
            fail_msg("%s: loss of step %d %.9g vs %.9g", what, s, x->loss[s], ref->loss[s]);
        if (!(fabs(x->norm[s] - ref->norm[s]) <= 1e-5 * ref->norm[s]))
            fail_msg("%s: gradient norm of step %d %.9g vs %.9g", what, s, x->norm[s], ref->norm[s]);
    }
    double worst = 0;
    for (size_t i = 0; i < nparams(); i++) worst = fmax(worst, fabs((double)x->params[i] - ref->params[i]));
    if (!(worst <= 1e-5)) fail_msg("%s: weights differ by %.3g (bound 1e-5)", what, worst);
    return worst;
}

static run3 reference(void) {
    run3 ref = make(1, 1, 1, FSC_PAR_NONE, 1);
    train(&ref);
    assert_true(ref.norm[0] > 0.5); /* the clipping clips */
    return ref;
}

static void test_3d_matches_single_rank(void **state) {
    (void)state;
    run3 ref = reference();
    for (int sp = 0; sp <= 1; sp++) {
        run3 flat = make(2, 2, 1, FSC_PAR_DDP, M); /* the same micro-batches without a pipeline */
        flat.po.sequence_parallel = sp;
        train(&flat);
        assert_close(&flat, &ref, "dp 2 x tp 2");
        for (int v = 0; v < 4; v++) { /* both schedules, prefetch 0 and 1 (tied slices sent asynchronously) */
            const int sched = v % 2, pf = v / 2;
            run3 x = make(2, 2, 2, FSC_PAR_DDP, M);
            x.po.sequence_parallel = sp;
            x.po.schedule = sched ? FSC_SCHED_1F1B : FSC_SCHED_GPIPE;
            x.po.prefetch = pf;
            train(&x);
            char what[96];
            snprintf(what, sizeof what, "dp 2 x tp 2 x pp 2 %s%s, prefetch %d", sched ? "1f1b" : "gpipe",
                     sp ? " sp" : "", pf);
            double worst = assert_close(&x, &ref, what);
            assert_same(&x, &flat, what); /* the pipeline is the same computation */
            printf("  %s: weights within %.2g of the single rank, bit-identical to dp 2 x tp 2 without pipeline\n",
                   what, worst);
            free(x.params);
        }
        free(flat.params);
    }
    free(ref.params);
}

static void test_3d_sharded_strategies_equal_ddp(void **state) {
    (void)state;
    run3 ddp = make(2, 2, 2, FSC_PAR_DDP, M);
    ddp.po.schedule = FSC_SCHED_1F1B;
    train(&ddp);
    const struct { fsc_parallel_kind kind; fsc_shard_strategy shard; const char *name; } cases[] = {
        { FSC_PAR_ZERO1, FSC_SHARD_FULL, "zero1" },
        { FSC_PAR_ZERO2, FSC_SHARD_FULL, "zero2" },
        { FSC_PAR_FSDP, FSC_SHARD_FULL, "fsdp full_shard" },
        { FSC_PAR_FSDP, FSC_SHARD_GRAD_OP, "fsdp shard_grad_op" },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        run3 x = make(2, 2, 2, cases[k].kind, M);
        x.po.schedule = FSC_SCHED_1F1B;
        x.po.shard = cases[k].shard;
        train(&x);
        char what[96];
        snprintf(what, sizeof what, "dp 2 x tp 2 x pp 2 %s against ddp", cases[k].name);
        assert_same(&x, &ddp, what);
        free(x.params);
    }
    /* bf16 parameters and reductions: the same rounding on both paths */
    run3 db = make(2, 2, 2, FSC_PAR_DDP, M), zb = make(2, 2, 2, FSC_PAR_ZERO1, M);
    db.po.param_dtype = db.po.reduce_dtype = zb.po.param_dtype = zb.po.reduce_dtype = FSC_BF16;
    train(&db);
    train(&zb);
    assert_same(&zb, &db, "dp 2 x tp 2 x pp 2 bf16 zero1 against bf16 ddp");
    free(db.params), free(zb.params);
    /* hybrid_shard: shard groups of 2 inside a data group of 4 (the norm group spans the replicas' halves) */
    run3 d4 = make(4, 2, 1, FSC_PAR_DDP, 2), h4 = make(4, 2, 1, FSC_PAR_FSDP, 2);
    h4.po.shard = FSC_SHARD_HYBRID, h4.po.hybrid_group = 2;
    train(&d4);
    train(&h4);
    assert_same(&h4, &d4, "dp 4 x tp 2 fsdp hybrid_shard against ddp");
    free(d4.params), free(h4.params);
    /* without a pipeline too, with sequence parallelism */
    run3 d2 = make(2, 2, 1, FSC_PAR_DDP, 2), z2 = make(2, 2, 1, FSC_PAR_FSDP, 2);
    d2.po.sequence_parallel = z2.po.sequence_parallel = 1;
    train(&d2);
    train(&z2);
    assert_same(&z2, &d2, "dp 2 x tp 2 sp fsdp against ddp");
    free(d2.params), free(z2.params), free(ddp.params);
}

static void test_3d_any_rank_order(void **state) {
    (void)state;
    run3 meg = make(2, 2, 2, FSC_PAR_ZERO1, M), other = make(2, 2, 2, FSC_PAR_ZERO1, M);
    other.po.order = "dp,pp,tp";
    train(&meg);
    train(&other);
    assert_same(&other, &meg, "rank order dp,pp,tp against tp,dp,pp");
    /* world rank 5 is (tensor 1, data 0, pipe 1) in Megatron's order, (data 1, pipe 0, tensor 1) in the other */
    assert_true(meg.lay[5].tensor == 1 && meg.lay[5].data == 0 && meg.lay[5].pipe == 1);
    assert_true(other.lay[5].data == 1 && other.lay[5].pipe == 0 && other.lay[5].tensor == 1);
    char buf[160];
    fsc_layout_describe(&other.lay[5], buf, sizeof buf);
    assert_string_equal(buf, "world 8 = tp 2 x pp 2 x dp 2 (data fastest); rank 5: pipe 0, data 1, tensor 1");
    free(meg.params), free(other.params);
}

static double sum_bytes(const fsc_comm_stats *s) {
    double b = 0;
    for (int op = 0; op < FSC_OP_COUNT; op++) b += s->bytes[op];
    return b;
}

static void test_3d_comm_by_group(void **state) {
    (void)state;
    const fsc_gpt_config c = cfg();
    for (int v = 0; v < 4; v++) {
        /* prefetch 1: the pipeline group, its two links and the wte slice's two streams (pipe_link.c,
         * pipe_tied.c), all pipeline groups, carry the same bytes */
        const int sp = v % 2, pf = v / 2;
        run3 x = make(2, 2, 2, FSC_PAR_DDP, M);
        x.po.sequence_parallel = sp;
        x.po.prefetch = pf;
        train(&x);
        assert_true(x.ngroups[FSC_GROUP_DATA] >= 1 && x.ngroups[FSC_GROUP_TENSOR] == 1 &&
                    x.ngroups[FSC_GROUP_PIPELINE] == (pf ? 5 : 1) && x.ngroups[FSC_GROUP_EXPERT] == 0);
        const double act = 4.0 * (GB / 2 / M) * c.seq / (sp ? 2 : 1) * c.dim, wte = 4.0 * c.vocab / 2 * c.dim;
        for (int r = 0; r < W; r++) {
            const fsc_comm_stats *g = x.group[r];
            double sum = 0;
            for (int k = 0; k < FSC_GROUP_COUNT; k++) sum += sum_bytes(&g[k]);
            assert_true(fabs(sum - sum_bytes(&x.total[r])) <= 1e-9 * sum);
            assert_true(sum_bytes(&g[FSC_GROUP_TENSOR]) > 0 && sum_bytes(&g[FSC_GROUP_DATA]) > 0);
            const double want = x.lay[r].pipe == 0 ? M * act + wte : M * act + M * wte;
            if (g[FSC_GROUP_PIPELINE].bytes[FSC_OP_SEND] != want)
                fail_msg("rank %d (stage %d)%s: the pipeline group sent %.0f bytes, want %.0f", r, x.lay[r].pipe,
                         sp ? " sp" : "", g[FSC_GROUP_PIPELINE].bytes[FSC_OP_SEND], want);
            assert_int_equal(g[FSC_GROUP_TENSOR].calls[FSC_OP_SEND], 0);
        }
        if (sp && !pf) {
            const fsc_comm_stats *g = x.group[0];
            printf("  dp 2 x tp 2 x pp 2 sp, rank 0 per step: data %.0f, tensor %.0f, pipeline %.0f, world %.0f bytes\n",
                   sum_bytes(&g[FSC_GROUP_DATA]), sum_bytes(&g[FSC_GROUP_TENSOR]), sum_bytes(&g[FSC_GROUP_PIPELINE]),
                   sum_bytes(&g[FSC_GROUP_WORLD]));
        }
        free(x.params);
    }
    /* without tensor parallelism: the kinds the run has, summing to the total */
    run3 p2 = make(2, 1, 2, FSC_PAR_FSDP, M), d2 = make(2, 1, 1, FSC_PAR_DDP, 1);
    train(&p2);
    train(&d2);
    assert_true(p2.ngroups[FSC_GROUP_TENSOR] == 0 && p2.ngroups[FSC_GROUP_PIPELINE] == 1);
    assert_true(d2.ngroups[FSC_GROUP_DATA] == 1 && d2.ngroups[FSC_GROUP_TENSOR] == 0 &&
                d2.ngroups[FSC_GROUP_PIPELINE] == 0 && d2.ngroups[FSC_GROUP_WORLD] == 0);
    for (int r = 0; r < 4; r++) {
        double sum = 0;
        for (int k = 0; k < FSC_GROUP_COUNT; k++) sum += sum_bytes(&p2.group[r][k]);
        assert_true(fabs(sum - sum_bytes(&p2.total[r])) <= 1e-9 * sum);
        assert_true(sum_bytes(&p2.group[r][FSC_GROUP_PIPELINE]) > 0 && sum_bytes(&p2.group[r][FSC_GROUP_DATA]) > 0);
    }
    assert_true(sum_bytes(&d2.group[0][FSC_GROUP_DATA]) == sum_bytes(&d2.total[0]));
    free(p2.params), free(d2.params);
}

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    unsigned char *buf = malloc(1 << 20);
    *n = buf ? fread(buf, 1, 1 << 20, f) : 0;
    fclose(f);
    return buf;
}

static void test_3d_save_and_load(void **state) {
    (void)state;
    char a[] = "/tmp/fsc_3d_ref_XXXXXX", b[] = "/tmp/fsc_3d_3d_XXXXXX";
    int fa = mkstemp(a), fb = mkstemp(b);
    assert_true(fa >= 0 && fb >= 0);
    close(fa), close(fb);
    run3 ref = make(1, 1, 1, FSC_PAR_NONE, 1);
    ref.save = a;
    train(&ref);
    /* the 3D engine (FSDP in the data groups) loads the trained weights, holds exactly them and writes
     * the same file */
    run3 x = make(2, 2, 2, FSC_PAR_FSDP, M);
    x.steps = 0, x.load = a, x.save = b;
    train(&x);
    assert_bits_equal(x.params, ref.params, nparams(), "loaded by dp 2 x tp 2 x pp 2 fsdp");
    size_t na = 0, nb = 0;
    unsigned char *ba = slurp(a, &na), *bb = slurp(b, &nb);
    assert_true(ba && bb && na > 0);
    assert_int_equal(na, nb);
    assert_memory_equal(ba, bb, na);
    free(ba), free(bb);
    free(ref.params), free(x.params);
    remove(a), remove(b);
}

static fsc_status bad_rank(fsc_rank *r, void *arg) {
    const fsc_parallel_opts *po = arg;
    fsc_gpt_config c = cfg();
    fsc_optim_config oc = adamw();
    fsc_engine *e = NULL;
    fsc_status s = fsc_engine_create(r, &c, po, &oc, 1, &e);
    fsc_engine_free(e); /* training checkpoints work with tensor parallelism: tests/test_ckpt_tp.c */
    return s;
}

static void test_3d_errors(void **state) {
    (void)state;
    fsc_parallel_opts po = { .kind = FSC_PAR_DDP, .accum = 1, .no_sync = 1, .tp = 3 };
    assert_err(tt_run(6, bad_rank, &po), FSC_ERR_INVALID, "4 heads do not split over a tensor group of 3");
    po.tp = 2, po.pp = 2;
    assert_err(tt_run(6, bad_rank, &po), FSC_ERR_INVALID, "a world of 6 ranks does not split into tp 2 x pp 2");
    po.tp = 1, po.pp = 1, po.sequence_parallel = 1;
    assert_err(tt_run(2, bad_rank, &po), FSC_ERR_INVALID, "sequence_parallel needs tensor parallelism");
    po = (fsc_parallel_opts){ .kind = FSC_PAR_DDP, .accum = 1, .tp = 2, .order = "tp,dp" };
    assert_err(tt_run(2, bad_rank, &po), FSC_ERR_INVALID, "must name tp, dp and pp once each");
    po.order = "tp,tp,pp";
    assert_err(tt_run(2, bad_rank, &po), FSC_ERR_INVALID, "names tp twice");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_3d_matches_single_rank),
        cmocka_unit_test(test_3d_sharded_strategies_equal_ddp),
        cmocka_unit_test(test_3d_any_rank_order),
        cmocka_unit_test(test_3d_comm_by_group),
        cmocka_unit_test(test_3d_save_and_load),
        cmocka_unit_test(test_3d_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
