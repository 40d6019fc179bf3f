/* Offload to host memory (po.offload, docs/offload.md) inside pipeline stages (docs/pipeline.md).
 * Oracle: DDP over the dp data-parallel ranks with gradient accumulation over the same M micro-batches, no
 * pipeline and no offload (accum = M, no_sync), as tests/test_pipe.c's: bit-identical losses and final parameters
 * after AdamW steps with clipping that clips, and the same gradient norms. Every schedule (gpipe, 1f1b,
 * interleaved with two chunks per rank, zb-h1, zbv, and custom lists: zbv's lists placed in a V, a depth-first
 * interleaved list, a one-chunk list with its Ws after every B) x the strategies that offload inside the stages
 * (zero1, zero2 and fsdp full_shard with offload optim; fsdp full_shard, with and without resharding, and
 * shard_grad_op with offload all) x every pipeline checkpoint mode, dp 2 x pp 2 on an 8-block GPT whose tied wte
 * sits on the first and the last stage, prefetch 1 (and 0 where the schedule has one chunk per rank); pp 3
 * (zbv: six chunks) for some; fsdp hybrid_shard (optim, all) and no_shard (all) with dp 4 x pp 2; the exact
 * reduction (reduce_exact) inside gpipe and 1f1b stages against DDP's exact reduction; an evaluation before each
 * step inside interleaved, zb-h1 and zbv stages equal to the step's loss on every rank. Memory: with offload all
 * every rank's device peaks lower in parameters and gradients than without offload, and holds no optimizer state
 * under optim or all. Offload all with layer checkpointing (po.checkpoint) under interleaved stages too.
 * Tensor parallelism inside the stages: dp 2 x tp 2 x pp 2, with and without sequence parallelism, every case under
 * 1f1b, zbv and interleaved stages, against DDP at dp 2 x tp 2 (tests/test_offload.c: tp without a pipeline). */
#include "partest.h"

typedef struct {
    fsc_parallel_kind kind;
    fsc_shard_strategy sh;
    int reshard;
    fsc_offload_mode off;
    const char *what;
} po_case;

static const po_case cases[] = {
    { FSC_PAR_ZERO1, 0, -1, FSC_OFFLOAD_OPTIM, "zero1, offload optim" },
    { FSC_PAR_ZERO2, 0, -1, FSC_OFFLOAD_OPTIM, "zero2, offload optim" },
    { FSC_PAR_FSDP, FSC_SHARD_FULL, 1, FSC_OFFLOAD_OPTIM, "fsdp full_shard, offload optim" },
    { FSC_PAR_FSDP, FSC_SHARD_FULL, 1, FSC_OFFLOAD_ALL, "fsdp full_shard, offload all" },
    { FSC_PAR_FSDP, FSC_SHARD_FULL, 0, FSC_OFFLOAD_ALL, "fsdp full_shard no reshard, offload all" },
    { FSC_PAR_FSDP, FSC_SHARD_GRAD_OP, -1, FSC_OFFLOAD_ALL, "fsdp shard_grad_op, offload all" },
};

static const char *const ckpt_name[] = { "except_last", "always", "never" };

/* dp x pp ranks of an 8-block GPT, M micro-batches of one sequence per data-parallel rank */
static pt_run make(int dp, int pp, int M) {
    pt_run r = pt_make(dp * pp, FSC_PAR_DDP);
    r.cfg.layers = 8;
    r.po.pp = pp;
    r.po.accum = M;
    r.po.no_sync = 1;
    r.batch = dp * M;
    r.steps = 2;
    return r;
}

/* The DDP reference of a run: its dp ranks, the same micro-batches, no pipeline, no offload. */
static pt_run reference(const pt_run *p) {
    pt_run d = *p;
    d.params = NULL;
    d.po.pp = 1;
    d.po.virtual_stages = 0;
    d.po.schedule = FSC_SCHED_GPIPE;
    d.po.placement = FSC_PIPE_LOOP;
    d.po.actions = NULL;
    d.po.nactions = NULL;
    d.po.balance = NULL;
    d.po.pipe_checkpoint = FSC_PIPE_CKPT_EXCEPT_LAST;
    d.po.kind = FSC_PAR_DDP;
    d.po.offload = FSC_OFFLOAD_NONE;
    d.po.shard = 0;
    d.po.reshard_after_forward = -1;
    d.world = p->world / p->po.pp;
    pt_train(&d);
    return d;
}

static void assert_same(const pt_run *ref, const pt_run *p, const char *what) {
    pt_assert_same(ref, p, what);
    for (int s = 0; s < p->steps; s++) { /* clipping clipped: the norms are the same too */
        if (memcmp(&ref->info[s].grad_norm, &p->info[s].grad_norm, sizeof(double)) != 0)
            fail_msg("%s: grad norm of step %d differs: %.17g vs DDP %.17g", what, s, p->info[s].grad_norm,
                     ref->info[s].grad_norm);
        if (!(p->info[s].grad_norm > p->po.clip)) fail_msg("%s: step %d did not clip", what, s);
    }
}

static void with_case(pt_run *r, const po_case *c) {
    r->po.kind = c->kind;
    r->po.shard = c->sh;
    r->po.reshard_after_forward = c->reshard;
    r->po.offload = c->off;
    r->po.bucket_bytes = 2048; /* zero2: several buckets, so several optimizer segments */
}

/* Train p with c inside its stages and compare with ref (made from p first when it has no parameters yet). */
static void check(pt_run *ref, pt_run p, const po_case *c, const char *sched) {
    if (!ref->params) *ref = reference(&p);
    with_case(&p, c);
    char what[200];
    const int tp = p.po.tp > 1 ? p.po.tp : 1;
    snprintf(what, sizeof what, "dp %d x tp %d%s x pp %d, %s inside %s stages, checkpoint %s, prefetch %d",
             p.world / p.po.pp / tp, tp, p.po.sequence_parallel ? " (sp)" : "", p.po.pp, c->what, sched,
             ckpt_name[p.po.pipe_checkpoint], p.po.prefetch);
    size_t P = fsc_gpt_num_params(&p.cfg);
    p.params = calloc(P, sizeof(float));
    fsc_cluster_opts co = { .world = p.world, .device = "cpu", .timeout_s = 30 };
    if (fsc_cluster_run(&co, pt_rank_fn, &p) != FSC_OK) fail_msg("%s: %s", what, fsc_last_error());
    assert_same(ref, &p, what);
    for (int rk = 0; rk < p.world; rk++) /* the optimizer lives on the host: no optimizer state on the device */
        if (p.peak[rk][FSC_TAG_OPTIM] != 0) fail_msg("%s: rank %d's device holds optimizer state", what, rk);
    free(p.params);
}

/* The built-in schedules, every case, every pipeline checkpoint mode, dp 2 x pp 2. */
static void test_pipe_offload_schedules(void **state) {
    (void)state;
    static const fsc_pipe_schedule scheds[] = { FSC_SCHED_GPIPE, FSC_SCHED_1F1B, FSC_SCHED_INTERLEAVED,
                                                FSC_SCHED_ZB_H1, FSC_SCHED_ZBV };
    static const char *const sname[] = { "gpipe", "1f1b", "interleaved", "zb-h1", "zbv" };
    pt_run ref = { 0 };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        for (int sc = 0; sc < 5; sc++)
            for (int ck = 0; ck < 3; ck++) {
                pt_run p = make(2, 2, 4);
                p.po.schedule = scheds[sc];
                p.po.virtual_stages = scheds[sc] == FSC_SCHED_INTERLEAVED ? 2 : 0;
                p.po.pipe_checkpoint = (fsc_pipe_checkpoint)ck;
                /* one chunk per rank runs without prefetch too */
                p.po.prefetch = p.po.virtual_stages == 2 || scheds[sc] == FSC_SCHED_ZBV ? 1 : (int)((k + ck) % 2);
                check(&ref, p, &cases[k], sname[sc]);
            }
    free(ref.params);
}

/* pp 3: zbv's six chunks, interleaved's six, zb-h1; uneven balances; dp 2 and 1. */
static void test_pipe_offload_three_stages(void **state) {
    (void)state;
    static const int uneven6[] = { 2, 1, 1, 1, 2, 1 };
    struct { int dp, M; fsc_pipe_schedule sched; const int *bal; const char *what; } runs[] = {
        { 2, 3, FSC_SCHED_ZBV, NULL, "zbv" },
        { 1, 5, FSC_SCHED_ZBV, uneven6, "zbv, uneven" },
        { 2, 3, FSC_SCHED_INTERLEAVED, uneven6, "interleaved, uneven" },
        { 2, 4, FSC_SCHED_ZB_H1, NULL, "zb-h1" },
    };
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        pt_run ref = { 0 };
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
            if (runs[i].dp == 1 && cases[k].sh == FSC_SHARD_FULL && cases[k].reshard == 0) continue;
            pt_run p = make(runs[i].dp, 3, runs[i].M);
            p.po.schedule = runs[i].sched;
            p.po.virtual_stages = runs[i].sched == FSC_SCHED_INTERLEAVED ? 2 : 0;
            p.po.balance = runs[i].bal;
            p.po.prefetch = 1;
            p.po.pipe_checkpoint = (fsc_pipe_checkpoint)(k % 3);
            check(&ref, p, &cases[k], runs[i].what);
        }
        free(ref.params);
    }
}

/* FSDP's hybrid_shard (groups of 2 inside a data group of 4: reductions in two phases) and no_shard with offload,
 * dp 4 x pp 2, inside interleaved, zb-h1 and zbv stages. */
static void test_pipe_offload_hybrid(void **state) {
    (void)state;
    static const po_case more[] = {
        { FSC_PAR_FSDP, FSC_SHARD_HYBRID, -1, FSC_OFFLOAD_OPTIM, "fsdp hybrid_shard, offload optim" },
        { FSC_PAR_FSDP, FSC_SHARD_HYBRID, -1, FSC_OFFLOAD_ALL, "fsdp hybrid_shard, offload all" },
        { FSC_PAR_FSDP, FSC_SHARD_NONE, -1, FSC_OFFLOAD_ALL, "fsdp no_shard, offload all" },
    };
    static const fsc_pipe_schedule scheds[] = { FSC_SCHED_INTERLEAVED, FSC_SCHED_ZB_H1, FSC_SCHED_ZBV };
    static const char *const sname[] = { "interleaved", "zb-h1", "zbv" };
    pt_run ref = { 0 };
    for (size_t k = 0; k < sizeof more / sizeof more[0]; k++)
        for (int sc = 0; sc < 3; sc++) {
            pt_run p = make(4, 2, 2);
            p.po.schedule = scheds[sc];
            p.po.virtual_stages = scheds[sc] == FSC_SCHED_INTERLEAVED ? 2 : 0;
            p.po.hybrid_group = 2;
            p.po.prefetch = 1;
            p.po.pipe_checkpoint = (fsc_pipe_checkpoint)((int)k % 3);
            check(&ref, p, &more[k], sname[sc]);
        }
    free(ref.params);
}

/* A run with an evaluation of each step's batch before the step, every rank's losses kept. */
typedef struct {
    pt_run r;
    double ev[PT_MAX_WORLD][PT_MAX_STEPS], loss[PT_MAX_WORLD][PT_MAX_STEPS];
} ev_run;

static fsc_status ev_rank_fn(fsc_rank *rk, void *arg) {
    ev_run *x = arg;
    pt_run *run = &x->r;
    const int T = run->cfg.seq, B = run->batch, dp = rk->world / run->po.pp, data = rk->rank % dp, lb = B / dp;
    fsc_engine *e = NULL;
    FSC_TRY(fsc_engine_create(rk, &run->cfg, &run->po, &run->oc, run->seed, &e));
    int32_t *tok = malloc((size_t)lb * T * sizeof(int32_t)), *tgt = malloc((size_t)lb * T * sizeof(int32_t));
    fsc_status s = tok && tgt ? FSC_OK : FSC_ERR_NOMEM;
    for (int step = 0; step < run->steps && s == FSC_OK; step++) {
        pt_batch(tok, tgt, step, B, data, lb, T, run->cfg.vocab);
        fsc_step_info info;
        s = fsc_engine_eval(e, tok, tgt, lb, B, &x->ev[rk->rank][step]);
        if (s == FSC_OK) s = fsc_engine_step(e, tok, tgt, lb, B, &info);
        if (s == FSC_OK) x->loss[rk->rank][step] = info.loss;
        if (s == FSC_OK && rk->rank == 0) run->loss[step] = info.loss, run->info[step] = info;
    }
    if (s == FSC_OK) s = fsc_engine_full_params(e, rk->rank == 0 ? run->params : NULL);
    free(tok);
    free(tgt);
    fsc_engine_free(e);
    return s;
}

/* Evaluations between steps (the parameters read where offload keeps them: the device masters under optim, the
 * host shards uploaded before each gather under all) inside interleaved, zb-h1 and zbv stages, every case: each
 * evaluation equals the step's loss on the same batch on every rank, and every rank's step loss is DDP's. */
static void test_pipe_offload_eval(void **state) {
    (void)state;
    static const fsc_pipe_schedule scheds[] = { FSC_SCHED_INTERLEAVED, FSC_SCHED_ZB_H1, FSC_SCHED_ZBV };
    static const char *const sname[] = { "interleaved", "zb-h1", "zbv" };
    pt_run ref = { 0 };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        for (int sc = 0; sc < 3; sc++) {
            ev_run x;
            memset(&x, 0, sizeof x);
            x.r = make(2, 2, 4);
            x.r.steps = 3;
            x.r.po.schedule = scheds[sc];
            x.r.po.virtual_stages = scheds[sc] == FSC_SCHED_INTERLEAVED ? 2 : 0;
            x.r.po.prefetch = 1;
            x.r.po.pipe_checkpoint = (fsc_pipe_checkpoint)(((int)k + sc) % 3);
            if (!ref.params) ref = reference(&x.r);
            with_case(&x.r, &cases[k]);
            char what[160];
            snprintf(what, sizeof what, "%s inside %s stages with evaluations, checkpoint %s", cases[k].what,
                     sname[sc], ckpt_name[x.r.po.pipe_checkpoint]);
            x.r.params = calloc(fsc_gpt_num_params(&x.r.cfg), sizeof(float));
            fsc_cluster_opts co = { .world = x.r.world, .device = "cpu", .timeout_s = 30 };
            if (fsc_cluster_run(&co, ev_rank_fn, &x) != FSC_OK) fail_msg("%s: %s", what, fsc_last_error());
            assert_same(&ref, &x.r, what);
            for (int st = 0; st < x.r.steps; st++)
                for (int rk = 0; rk < x.r.world; rk++) {
                    if (memcmp(&x.loss[rk][st], &ref.loss[st], sizeof(double)) != 0)
                        fail_msg("%s: loss of step %d on rank %d %.17g, DDP %.17g", what, st, rk, x.loss[rk][st],
                                 ref.loss[st]);
                    if (memcmp(&x.ev[rk][st], &x.loss[rk][st], sizeof(double)) != 0)
                        fail_msg("%s: evaluation before step %d on rank %d %.17g, the step's loss %.17g", what, st,
                                 rk, x.ev[rk][st], x.loss[rk][st]);
                }
            free(x.r.params);
        }
    free(ref.params);
}

/* Memory: FSDP full_shard inside interleaved, zb-h1 and zbv stages; with offload all every rank's device holds
 * fewer parameter and gradient bytes at its peak than the same run without offload (the master and reduced-gradient
 * shards live on the host), and no optimizer state under optim or all. */
static void test_pipe_offload_memory(void **state) {
    (void)state;
    static const fsc_pipe_schedule scheds[] = { FSC_SCHED_INTERLEAVED, FSC_SCHED_ZB_H1, FSC_SCHED_ZBV };
    for (int sc = 0; sc < 3; sc++) {
        pt_run r[3];
        for (int m = 0; m < 3; m++) {
            r[m] = make(2, 2, 4);
            r[m].po.schedule = scheds[sc];
            r[m].po.virtual_stages = scheds[sc] == FSC_SCHED_INTERLEAVED ? 2 : 0;
            r[m].po.prefetch = 1;
            with_case(&r[m], &cases[3]); /* fsdp full_shard */
            r[m].po.offload = (fsc_offload_mode)m;
            pt_train(&r[m]);
        }
        pt_assert_same(&r[0], &r[1], "offload optim against none");
        pt_assert_same(&r[0], &r[2], "offload all against none");
        for (int rk = 0; rk < r[0].world; rk++) {
            assert_true(r[0].peak[rk][FSC_TAG_OPTIM] > 0);
            assert_int_equal(r[1].peak[rk][FSC_TAG_OPTIM], 0);
            assert_int_equal(r[2].peak[rk][FSC_TAG_OPTIM], 0);
            if (!(r[2].peak[rk][FSC_TAG_PARAMS] < r[0].peak[rk][FSC_TAG_PARAMS]) ||
                !(r[2].peak[rk][FSC_TAG_GRADS] < r[0].peak[rk][FSC_TAG_GRADS]))
                fail_msg("schedule %d, rank %d: offload all's device params %zu, grads %zu; without offload %zu, %zu",
                         (int)scheds[sc], rk, r[2].peak[rk][FSC_TAG_PARAMS], r[2].peak[rk][FSC_TAG_GRADS],
                         r[0].peak[rk][FSC_TAG_PARAMS], r[0].peak[rk][FSC_TAG_GRADS]);
        }
        for (int m = 0; m < 3; m++) free(r[m].params);
    }
}

/* A depth-first list over two chunks per rank: every micro-batch through both chunks, then the backwards. */
static void depth_first(int M, fsc_pipe_action *a) {
    int n = 0;
    for (int k = 0; k < M; k++)
        for (int ch = 0; ch < 2; ch++) a[n++] = (fsc_pipe_action){ FSC_ACT_FORWARD, k, ch };
    for (int k = 0; k < M; k++)
        for (int ch = 1; ch >= 0; ch--) a[n++] = (fsc_pipe_action){ FSC_ACT_BACKWARD, k, ch };
}

/* Custom lists of the new shapes: zbv's lists passed as a custom schedule in a V, a depth-first list over two
 * chunks in a loop, and a one-chunk list with all its Ws after all its Bs; every case, two checkpoint modes. */
static void test_pipe_offload_custom(void **state) {
    (void)state;
    enum { M = 3 };
    fsc_pipe_action *v[2] = { NULL, NULL };
    int nv[2] = { 0, 0 };
    for (int r = 0; r < 2; r++) assert_ok(fsc_pipe_schedule_make(FSC_SCHED_ZBV, 2, 2, M, r, &v[r], &nv[r]));
    fsc_pipe_action d[4 * M];
    depth_first(M, d);
    const fsc_pipe_action *const dl[] = { d, d };
    const int nd[] = { 4 * M, 4 * M };
    fsc_pipe_action z[3 * M];
    for (int k = 0; k < M; k++) {
        z[k] = (fsc_pipe_action){ FSC_ACT_FORWARD, k, 0 };
        z[M + k] = (fsc_pipe_action){ FSC_ACT_BACKWARD, k, 0 };
        z[2 * M + k] = (fsc_pipe_action){ FSC_ACT_WEIGHT, k, 0 };
    }
    const fsc_pipe_action *const zl[] = { z, z };
    const int nz[] = { 3 * M, 3 * M };
    const fsc_pipe_action *const vl[] = { v[0], v[1] };
    pt_run ref = { 0 };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        for (int shape = 0; shape < 3; shape++)
            for (int ck = 0; ck < 2; ck++) {
                pt_run p = make(2, 2, M);
                p.po.schedule = FSC_SCHED_CUSTOM;
                p.po.prefetch = 1;
                p.po.pipe_checkpoint = (fsc_pipe_checkpoint)((ck + (int)k) % 3);
                if (shape == 0) {
                    p.po.placement = FSC_PIPE_V;
                    p.po.virtual_stages = 2;
                    p.po.actions = vl;
                    p.po.nactions = nv;
                } else if (shape == 1) {
                    p.po.virtual_stages = 2;
                    p.po.actions = dl;
                    p.po.nactions = nd;
                } else {
                    p.po.actions = zl;
                    p.po.nactions = nz;
                }
                static const char *const what[] = { "custom V (zbv's lists)", "custom depth-first",
                                                    "custom, Ws after every B" };
                check(&ref, p, &cases[k], what[shape]);
            }
    free(ref.params);
    fsc_pipe_schedule_free(v[0]);
    fsc_pipe_schedule_free(v[1]);
}

/* Layer checkpointing (every block recomputed in its backward) with offload under interleaved stages; schedules
 * with W actions refuse layer checkpointing with or without offload. */
static void test_pipe_offload_layer_checkpoint(void **state) {
    (void)state;
    pt_run ref = { 0 };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        pt_run p = make(2, 2, 4);
        p.po.schedule = FSC_SCHED_INTERLEAVED;
        p.po.virtual_stages = 2;
        p.po.prefetch = 1;
        p.po.checkpoint = 1;
        p.po.pipe_checkpoint = (fsc_pipe_checkpoint)(k % 3);
        check(&ref, p, &cases[k], "interleaved (layer checkpointing)");
    }
    free(ref.params);
}

/* The exact reduction (reduce_exact) with offload inside gpipe and 1f1b stages (the schedules where it runs with
 * FSDP and ZeRO inside the stages). Oracle: DDP with the exact reduction over the same micro-batches. */
static void test_pipe_offload_exact(void **state) {
    (void)state;
    static const fsc_pipe_schedule scheds[] = { FSC_SCHED_GPIPE, FSC_SCHED_1F1B };
    static const char *const sname[] = { "gpipe (reduce_exact)", "1f1b (reduce_exact)" };
    pt_run ref = { 0 };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        for (int sc = 0; sc < 2; sc++) {
            pt_run p = make(2, 2, 4);
            p.po.reduce_exact = 1;
            p.po.schedule = scheds[sc];
            p.po.prefetch = sc;
            p.po.pipe_checkpoint = (fsc_pipe_checkpoint)((int)k % 3);
            check(&ref, p, &cases[k], sname[sc]);
        }
    free(ref.params);
}

/* Tensor parallelism inside the stages: dp 2 x tp 2 x pp 2 (8 ranks), with and without sequence parallelism, every
 * case under 1f1b, zbv and interleaved stages (a V and a loop of two chunks per rank; the tied wte slice on the first
 * and the last stage), against DDP at dp 2 x tp 2 over the same micro-batches without pipeline or offload. */
static void test_pipe_offload_tensor_parallel(void **state) {
    (void)state;
    static const fsc_pipe_schedule scheds[] = { FSC_SCHED_1F1B, FSC_SCHED_ZBV, FSC_SCHED_INTERLEAVED };
    static const char *const sname[] = { "1f1b", "zbv", "interleaved" };
    for (int sp = 0; sp <= 1; sp++) {
        pt_run ref = { 0 };
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
            const int sc = (int)(k + (size_t)sp) % 3;
            pt_run p = make(2, 2, 4);
            p.world = 8;
            p.po.tp = 2;
            p.po.sequence_parallel = sp;
            p.cfg.seq = 8; /* divides by the tensor group */
            p.po.schedule = scheds[sc];
            p.po.virtual_stages = scheds[sc] == FSC_SCHED_INTERLEAVED ? 2 : 0;
            p.po.prefetch = scheds[sc] == FSC_SCHED_1F1B ? (int)(k % 2) : 1;
            p.po.pipe_checkpoint = (fsc_pipe_checkpoint)(k % 3);
            check(&ref, p, &cases[k], sname[sc]);
        }
        free(ref.params);
    }
}

int main(void) {
    if (getenv("FSC_TEST_FILTER")) cmocka_set_test_filter(getenv("FSC_TEST_FILTER")); /* one test: its name */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pipe_offload_schedules),
        cmocka_unit_test(test_pipe_offload_three_stages),
        cmocka_unit_test(test_pipe_offload_hybrid),
        cmocka_unit_test(test_pipe_offload_eval),
        cmocka_unit_test(test_pipe_offload_memory),
        cmocka_unit_test(test_pipe_offload_custom),
        cmocka_unit_test(test_pipe_offload_layer_checkpoint),
        cmocka_unit_test(test_pipe_offload_exact),
        cmocka_unit_test(test_pipe_offload_tensor_parallel),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
