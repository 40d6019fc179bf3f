/* fsc_engine_eval (lib/parallel/eval.c): the mean loss of a batch by a forward pass, on every strategy and layout.
 * Oracles:
 * - eval of a step's batch before the step equals the loss the step reports, bit for bit (the same forwards, the
 *   same sums), on DDP, FSDP (full_shard, shard_grad_op, no_shard, hybrid), ZeRO-1/2, bf16, checkpointed blocks,
 *   pipelines (GPipe, 1F1B, checkpoint modes), tensor parallelism (with sequence parallelism at T = 8) and the
 *   Llama;
 * - the validation loss of a fixed batch equals DDP's bit for bit at every step on every strategy and pipeline
 *   of equal data-parallel layout (the engines train bit-identically, so their forwards must agree), and a tp
 *   run's equals the same tp run with FSDP or a pipeline;
 * - eval touches nothing: the full parameters and every bound gradient buffer are the same bits after it, the
 *   device holds as many parameter and communication bytes as before it, and
 *   a run evaluating before and after every step ends with the same step losses and parameters, bit for bit,
 *   as the same run without evaluations (optimizer state, step count and gradients included, since they
 *   decide the next step's bits);
 * - the same with FSDP's prefetch off and with a deeper limit, and with offload optim (fsdp, zero1, zero2) and
 *   offload all (fsdp): DDP's bits, and eval changes nothing;
 * - a local batch that does not split into the micro-batches, or a global batch that is not the sum of the
 *   local ones, is refused on every rank. */
#include <math.h>
#include "testutil.h"

#define STEPS 3
/* T = 7 (odd) for every run but sequence parallelism's, whose layers split the sequence over the tensor group */
enum { GB = 8, T7 = 7, TSP = 8, V = 50 };

typedef struct {
    fsc_parallel_opts po;
    int world, evals, llama;
    int T;                        /* the context: T7, or TSP with sequence parallelism */
    int bad;                      /* 1: a local batch that does not split, 2: a wrong global batch on rank 1 */
    double loss[STEPS], ev_train[STEPS], val[STEPS + 1];
    float *params;                /* (P) after the last step, rank 0 */
    size_t P;
    int changed[8];               /* per rank: an eval changed its parameters or gradients */
    fsc_status bad_status[8];
} erun;

static int32_t token(size_t i) {
    uint64_t x = i * 0x9E3779B97F4A7C15ull;
    x ^= x >> 29;
    return (int32_t)((x + (i / 3)) % (uint64_t)V);
}

/* sequences [first, first + n) of step s (s < 0: the validation batch, a region training never reads) */
static void batch(int s, int first, int n, int T, int32_t *tok, int32_t *tgt) {
    for (int i = 0; i < n; i++) {
        size_t start = s < 0 ? 100000 + (size_t)(first + i) * T : ((size_t)(s * GB + first + i) * T) % 4000;
        for (int t = 0; t < T; t++) tok[i * T + t] = token(start + t), tgt[i * T + t] = token(start + t + 1);
    }
}

static fsc_gpt_config gcfg(int T) {
    return (fsc_gpt_config){ .layers = 2, .dim = 24, .heads = 4, .seq = T, .vocab = V };
}

static fsc_llama_config lcfg(int T) {
    fsc_llama_config c = fsc_llama_config_default();
    c.layers = 2, c.dim = 24, c.heads = 4, c.kv_heads = 2, c.ffn = 40, c.seq = T, c.vocab = V;
    return c;
}

/* The full parameters and the bound gradients of this rank, into a malloc'd host buffer. */
static fsc_status snapshot(fsc_engine *e, fsc_rank *r, size_t P, float **out) {
    fsc_model *m = fsc_engine_model(e);
    size_t G = 0;
    for (int i = 0; i < m->n_tensors; i++) G += m->info[i].numel;
    float *h = calloc(P + G, sizeof(float));
    if (!h) return fsc_error(FSC_ERR_NOMEM, "test: out of memory");
    fsc_status s = fsc_engine_full_params(e, h);
    size_t off = P;
    for (int i = 0; i < m->n_tensors && s == FSC_OK; off += m->info[i].numel, i++)
        if (m->grad[i]) s = fsc_device_download(r->dev, h + off, m->grad[i], m->info[i].numel * sizeof(float));
    *out = h;
    return s;
}

static fsc_status eval_checked(fsc_engine *e, fsc_rank *r, erun *run, const int32_t *tok, const int32_t *tgt,
                               int lb, double *loss) {
    float *before = NULL, *after = NULL;
    fsc_model *m = fsc_engine_model(e);
    size_t G = 0;
    for (int i = 0; i < m->n_tensors; i++) G += m->info[i].numel;
    fsc_status s = snapshot(e, r, run->P, &before);
    const size_t held[2] = { fsc_device_current_bytes(r->dev, FSC_TAG_PARAMS),
                             fsc_device_current_bytes(r->dev, FSC_TAG_COMM) };
    if (s == FSC_OK) s = fsc_engine_eval(e, tok, tgt, lb, GB, loss);
    /* nothing gathered or in flight outlives it (FSDP's unit kept for backward, prefetched gathers) */
    if (s == FSC_OK && (fsc_device_current_bytes(r->dev, FSC_TAG_PARAMS) != held[0] ||
                        fsc_device_current_bytes(r->dev, FSC_TAG_COMM) != held[1]))
        run->changed[r->rank] = 1;
    if (s == FSC_OK) s = snapshot(e, r, run->P, &after);
    if (s == FSC_OK && memcmp(before, after, (run->P + G) * sizeof(float)) != 0) run->changed[r->rank] = 1;
    free(before);
    free(after);
    return s;
}

static fsc_status rank_fn(fsc_rank *r, void *arg) {
    erun *run = arg;
    fsc_optim_config oc = { .kind = FSC_OPT_ADAMW, .lr = 1e-2f, .weight_decay = 0.1f, .beta1 = 0.9f,
                            .beta2 = 0.999f, .eps = 1e-8f };
    fsc_engine *e = NULL;
    fsc_model *lm = NULL;
    if (run->llama) {
        fsc_llama_config c = lcfg(run->T);
        FSC_TRY(fsc_llama_model_create(r->dev, &c, &lm));
        fsc_status cs = fsc_engine_create_model(r, lm, &run->po, &oc, 5, &e);
        if (cs != FSC_OK) fsc_model_free(lm);
        FSC_TRY(cs);
    } else {
        fsc_gpt_config c = gcfg(run->T);
        FSC_TRY(fsc_engine_create(r, &c, &run->po, &oc, 5, &e));
    }
    const fsc_layout *l = fsc_engine_layout(e);
    const int lb = GB / l->dp, first = l->data * lb;
    int32_t tok[GB * TSP], tgt[GB * TSP], vtok[GB * TSP], vtgt[GB * TSP];
    batch(-1, first, lb, run->T, vtok, vtgt);
    fsc_status s = FSC_OK;
    if (run->bad) {
        double x = 0;
        int glob = run->bad == 2 && r->rank == 1 ? GB + 1 : GB;
        s = fsc_engine_eval(e, vtok, vtgt, run->bad == 1 ? lb - 1 : lb, glob, &x);
        run->bad_status[r->rank] = s;
        fsc_engine_free(e);
        fsc_model_free(lm);
        return FSC_OK;
    }
    for (int step = 0; step < STEPS && s == FSC_OK; step++) {
        batch(step, first, lb, run->T, tok, tgt);
        double v = 0, et = 0;
        if (run->evals) s = eval_checked(e, r, run, vtok, vtgt, lb, &v);
        if (s == FSC_OK && run->evals) s = eval_checked(e, r, run, tok, tgt, lb, &et);
        fsc_step_info info = { 0 };
        if (s == FSC_OK) s = fsc_engine_step_model(e, tok, tgt, lb, GB, &info);
        if (s == FSC_OK && r->rank == 0) run->loss[step] = info.loss, run->val[step] = v, run->ev_train[step] = et;
    }
    double v = 0;
    if (s == FSC_OK && run->evals) s = eval_checked(e, r, run, vtok, vtgt, lb, &v);
    if (s == FSC_OK && r->rank == 0) run->val[STEPS] = v;
    if (s == FSC_OK) s = fsc_engine_full_params(e, r->rank == 0 ? run->params : NULL);
    fsc_engine_free(e);
    fsc_model_free(lm);
    return s;
}

static size_t num_params(int llama, int T) {
    if (!llama) {
        fsc_gpt_config c = gcfg(T);
        return fsc_gpt_num_params(&c);
    }
    fsc_llama_config c = lcfg(T);
    fsc_model *m = NULL;
    fsc_device *d = NULL;
    assert_ok(fsc_device_create("cpu", NULL, &d));
    assert_ok(fsc_llama_model_create(d, &c, &m));
    size_t P = fsc_model_num_params(m);
    fsc_model_free(m);
    fsc_device_free(d);
    return P;
}

static erun make(int world, fsc_parallel_kind kind, int evals) {
    erun r;
    memset(&r, 0, sizeof r);
    r.po = fsc_parallel_opts_default();
    r.po.kind = kind;
    r.po.clip = 0.5f;
    r.world = world;
    r.T = T7;
    r.evals = evals;
    return r;
}

static void run(erun *r) {
    r->P = num_params(r->llama, r->T);
    r->params = calloc(r->P, sizeof(float));
    assert_non_null(r->params);
    fsc_cluster_opts co = { .world = r->world, .device = "cpu", .timeout_s = 60, .threads_per_rank = 1 };
    assert_ok(fsc_cluster_run(&co, rank_fn, r));
    for (int k = 0; k < r->world; k++)
        if (r->changed[k]) fail_msg("an evaluation changed the parameters or the gradients of rank %d, or left memory held", k);
    for (int s = 0; s < STEPS && r->evals; s++)
        if (memcmp(&r->ev_train[s], &r->loss[s], sizeof(double)) != 0)
            fail_msg("step %d: eval of the step's batch %.17g, the step's loss %.17g", s, r->ev_train[s], r->loss[s]);
    for (int s = 0; s <= STEPS && r->evals; s++)
        if (!(isfinite(r->val[s]) && r->val[s] > 0)) fail_msg("validation loss %d is %g", s, r->val[s]);
}

/* Validation losses, step losses and parameters bit for bit. */
static void assert_same(const erun *a, const erun *b, const char *what) {
    for (int s = 0; s <= STEPS && a->evals && b->evals; s++)
        if (memcmp(&a->val[s], &b->val[s], sizeof(double)) != 0)
            fail_msg("%s: validation loss %d differs: %.17g vs %.17g", what, s, a->val[s], b->val[s]);
    for (int s = 0; s < STEPS; s++)
        if (memcmp(&a->loss[s], &b->loss[s], sizeof(double)) != 0)
            fail_msg("%s: loss of step %d differs: %.17g vs %.17g", what, s, a->loss[s], b->loss[s]);
    assert_bits_equal(a->params, b->params, a->P, what);
}

static void done(erun *r) { free(r->params); }

/* Every strategy on 4 ranks, in fp32 and bf16: eval equals DDP's, and evaluating changes nothing. */
static void test_strategies_equal_ddp(void **state) {
    (void)state;
    const struct {
        fsc_parallel_kind kind;
        fsc_shard_strategy shard;
        const char *what;
        int checkpoint; /* recompute blocks in backward (the forward keeps layer inputs only) */
    } cases[] = {
        { FSC_PAR_FSDP, FSC_SHARD_FULL, "fsdp full_shard", 0 },   { FSC_PAR_FSDP, FSC_SHARD_GRAD_OP, "fsdp shard_grad_op", 0 },
        { FSC_PAR_FSDP, FSC_SHARD_NONE, "fsdp no_shard", 0 },     { FSC_PAR_FSDP, FSC_SHARD_HYBRID, "fsdp hybrid_shard", 0 },
        { FSC_PAR_ZERO1, FSC_SHARD_FULL, "zero1", 0 },            { FSC_PAR_ZERO2, FSC_SHARD_FULL, "zero2", 0 },
        { FSC_PAR_FSDP, FSC_SHARD_FULL, "fsdp full_shard, checkpointed blocks", 1 },
        { FSC_PAR_DDP, FSC_SHARD_FULL, "ddp, checkpointed blocks", 1 },
    };
    for (int bf = 0; bf < 2; bf++) {
        erun ddp = make(4, FSC_PAR_DDP, 1), quiet = make(4, FSC_PAR_DDP, 0);
        ddp.po.param_dtype = quiet.po.param_dtype = bf ? FSC_BF16 : FSC_F32;
        run(&ddp);
        run(&quiet);
        assert_same(&ddp, &quiet, "ddp with evaluations against ddp without");
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            erun x = make(4, cases[i].kind, 1);
            x.po.shard = cases[i].shard;
            x.po.checkpoint = cases[i].checkpoint;
            x.po.param_dtype = ddp.po.param_dtype;
            run(&x);
            assert_same(&x, &ddp, cases[i].what);
            done(&x);
        }
        done(&ddp);
        done(&quiet);
    }
}

/* Overlap and offload (docs/overlap.md, docs/offload.md): eval with FSDP's prefetch on and off (units kept for
 * backward or still in flight when the forward ends are settled by end_eval), DDP/ZeRO without bucket overlap,
 * and with the optimizer state, or FSDP's masters and reduced gradients, on the host: DDP's bits, and evaluating
 * changes nothing. */
static void test_overlap_and_offload(void **state) {
    (void)state;
    const struct {
        fsc_parallel_kind kind;
        int prefetch, limit, accum;
        fsc_offload_mode offload;
        const char *what;
    } cases[] = {
        { FSC_PAR_FSDP, 0, 0, 1, FSC_OFFLOAD_NONE, "fsdp, prefetch 0" },
        { FSC_PAR_FSDP, 1, 3, 2, FSC_OFFLOAD_NONE, "fsdp, prefetch limit 3, 2 micro-batches" },
        { FSC_PAR_ZERO2, 0, 0, 1, FSC_OFFLOAD_NONE, "zero2, prefetch 0" },
        { FSC_PAR_FSDP, 1, 0, 1, FSC_OFFLOAD_OPTIM, "fsdp, offload optim" },
        { FSC_PAR_FSDP, 1, 0, 2, FSC_OFFLOAD_ALL, "fsdp, offload all, 2 micro-batches" },
        { FSC_PAR_FSDP, 0, 0, 1, FSC_OFFLOAD_ALL, "fsdp, offload all, prefetch 0" },
        { FSC_PAR_ZERO1, 1, 0, 1, FSC_OFFLOAD_OPTIM, "zero1, offload optim" },
        { FSC_PAR_ZERO2, 1, 0, 1, FSC_OFFLOAD_OPTIM, "zero2, offload optim" },
    };
    for (int accum = 1; accum <= 2; accum++) {
        erun ddp = make(4, FSC_PAR_DDP, 1);
        ddp.po.accum = accum;
        run(&ddp);
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            if (cases[i].accum != accum) continue;
            erun x = make(4, cases[i].kind, 1);
            x.po.accum = accum;
            x.po.prefetch = cases[i].prefetch;
            x.po.prefetch_limit = cases[i].limit;
            x.po.offload = cases[i].offload;
            run(&x);
            assert_same(&x, &ddp, cases[i].what);
            done(&x);
        }
        done(&ddp);
    }
}

/* Pipelines (2 stages x 2 data ranks, 2 micro-batches) against DDP on 2 ranks accumulating the same. */
static void test_pipelines_equal_ddp(void **state) {
    (void)state;
    erun ddp = make(2, FSC_PAR_DDP, 1);
    ddp.po.accum = 2;
    run(&ddp);
    const fsc_pipe_checkpoint modes[] = { FSC_PIPE_CKPT_EXCEPT_LAST, FSC_PIPE_CKPT_ALWAYS, FSC_PIPE_CKPT_NEVER };
    for (int sch = 0; sch < 2; sch++)
        for (int k = 0; k < 3; k++)
            for (int kind = 0; kind < 2; kind++) {
                erun p = make(4, kind ? FSC_PAR_FSDP : FSC_PAR_DDP, 1);
                p.po.pp = 2;
                p.po.accum = 2;
                p.po.schedule = sch ? FSC_SCHED_1F1B : FSC_SCHED_GPIPE;
                p.po.pipe_checkpoint = modes[k];
                run(&p);
                assert_same(&p, &ddp, "pipeline against ddp");
                erun q = p;
                q.evals = 0;
                run(&q);
                assert_same(&p, &q, "pipeline with evaluations against without");
                done(&p);
                done(&q);
            }
    done(&ddp);
}

/* Tensor parallelism: eval equals the step's loss; FSDP over the data group and a pipeline give the same bits as
 * tp with DDP; evaluating changes nothing. */
static void test_tensor_parallel(void **state) {
    (void)state;
    erun ref = make(4, FSC_PAR_DDP, 1);
    ref.po.tp = 2;
    ref.po.accum = 2;
    run(&ref);
    erun quiet = ref;
    quiet.evals = 0;
    run(&quiet);
    assert_same(&ref, &quiet, "tp with evaluations against without");
    erun f = ref;
    f.po.kind = FSC_PAR_FSDP;
    run(&f);
    assert_same(&f, &ref, "tp 2 x fsdp 2 against tp 2 x ddp 2");
    erun p = make(8, FSC_PAR_DDP, 1);
    p.po.tp = 2;
    p.po.pp = 2;
    p.po.accum = 2;
    run(&p);
    assert_same(&p, &ref, "tp 2 x dp 2 x pp 2 against tp 2 x dp 2");
    erun sp = p;
    sp.T = TSP; /* the layers split the sequence over the tensor group: T divides by tp */
    sp.po.sequence_parallel = 1;
    run(&sp);
    done(&ref), done(&quiet), done(&f), done(&p), done(&sp);
}

/* The Llama through fsc_engine_create_model: FSDP and a pipeline against DDP. */
static void test_llama(void **state) {
    (void)state;
    erun ddp = make(2, FSC_PAR_DDP, 1);
    ddp.llama = 1;
    ddp.po.accum = 2;
    run(&ddp);
    erun f = ddp;
    f.po.kind = FSC_PAR_FSDP;
    run(&f);
    assert_same(&f, &ddp, "llama fsdp against ddp");
    erun p = make(4, FSC_PAR_ZERO2, 1);
    p.llama = 1;
    p.po.pp = 2;
    p.po.accum = 2;
    run(&p);
    assert_same(&p, &ddp, "llama pipeline (zero2 in each stage) against ddp");
    done(&ddp), done(&f), done(&p);
}

static void test_bad_batches(void **state) {
    (void)state;
    for (int bad = 1; bad <= 2; bad++) {
        erun r = make(2, FSC_PAR_FSDP, 0);
        r.bad = bad;
        r.po.accum = 2;
        run(&r);
        for (int k = 0; k < 2; k++)
            if (r.bad_status[k] != FSC_ERR_INVALID)
                fail_msg("bad batch %d: rank %d got %s, not invalid", bad, k, fsc_status_str(r.bad_status[k]));
        done(&r);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_strategies_equal_ddp), cmocka_unit_test(test_pipelines_equal_ddp),
        cmocka_unit_test(test_tensor_parallel),      cmocka_unit_test(test_llama),
        cmocka_unit_test(test_bad_batches),          cmocka_unit_test(test_overlap_and_offload),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
