/* fsc_engine_predict (eval.h) with pipelines and tensor parallelism, on a Llama of 2 layers, dim 32, 4 heads, 2 kv
 * heads, context 8, vocabulary 32, trained 2 steps of 4 sequences (AdamW, clipping, every run accumulating the same
 * 2 micro-batches a 2-stage pipeline runs), then predicting the next 4 sequences.
 * Oracles:
 *   - pp 2 (GPipe and 1F1B): every rank of the pipeline group, first stage included, gets the outputs of its own
 *     rows, the same bits as one rank's (a pipeline trains bit-identically with DDP accumulating its micro-batches);
 *   - pp 2 x dp 2: each rank's outputs are the bits of dp 2 DDP's rank of its data index;
 *   - interleaved (2 chunks per rank), ZB-H1 and ZBV (whose last stage is on rank 0), alone and with FSDP inside
 *     the stages (dp 2 x pp 2), on 4 layers: the bits of one rank's and of dp 2 DDP's;
 *   - tp 2: both ranks of the tensor group get the whole vocabulary's logits (gathered from the vocab-parallel
 *     head's slices), the same bits on both; against one rank within 1e-5 absolute (measured 2e-7: the row-parallel
 *     products and the vocab-parallel cross entropy sum in another order, so tp does not train bit-identically with
 *     one rank, as test_tp_llama.c says); tp 2 x pp 2 equals tp 2 bit for bit on every rank;
 *   - on every layout, the loss computed here in double from the outputs and the targets equals fsc_engine_eval's
 *     to 1e-5 (the outputs are the logits the loss was computed from, columns in vocabulary order);
 *   - a 2-stage pipeline whose loss layer keeps no outputs fails on both ranks (the first stage learns it from the
 *     last, rather than waiting for outputs that never come), and both ranks' messages say why. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "modeltest.h"
#include "fsc/llama.h"

enum { GB = 4, STEPS = 2, MAXW = 4, SEQ = 8, VOCAB = 32 };

typedef struct {
    int world, tp, pp, dp, onef1b;
    int layers;                  /* decoder layers (make: 2) */
    int sched, vstages;          /* pipelines: a schedule other than GPipe/1F1B (0: by onef1b), chunks per rank */
    int vee;                     /* sched custom: zbv's lists placed in a V (po.placement FSC_PIPE_V) */
    fsc_parallel_kind kind;      /* the strategy (0: DDP) */
    int data[MAXW];              /* each rank's data index */
    float out[MAXW][GB * SEQ * VOCAB];
    size_t per[MAXW];
    double eval_loss, own_loss; /* rank 0: fsc_engine_eval's loss and the loss of its outputs (dp 1 only) */
} job;

static void sample(size_t i, int32_t *tok, int32_t *tgt) {
    for (int t = 0; t < SEQ; t++) {
        uint64_t h = (i * 1009 + (size_t)t) * 0x9E3779B97F4A7C15ull;
        uint64_t h2 = (i * 1009 + (size_t)t + 1) * 0x9E3779B97F4A7C15ull;
        tok[t] = (int32_t)((h >> 33) % VOCAB);
        tgt[t] = (int32_t)((h2 >> 33) % VOCAB);
    }
}

/* -log softmax(logits)[target] summed over n rows of VOCAB, in double */
static double xent(const float *lg, const int32_t *tgt, size_t n) {
    double sum = 0;
    for (size_t r = 0; r < n; r++) {
        const float *o = lg + r * VOCAB;
        double mx = o[0], z = 0;
        for (int k = 1; k < VOCAB; k++) mx = fmax(mx, o[k]);
        for (int k = 0; k < VOCAB; k++) z += exp((double)o[k] - mx);
        sum += log(z) + mx - o[tgt[r]];
    }
    return sum;
}

static fsc_status rank_fn(fsc_rank *r, void *arg) {
    job *j = arg;
    fsc_llama_build_arg a = { .cfg = { .layers = j->layers, .dim = 32, .heads = 4, .kv_heads = 2, .ffn = 64, .seq = SEQ,
                                       .vocab = VOCAB, .rope_theta = 10000.0f, .norm_eps = 1e-5f } };
    fsc_parallel_opts po = mt_opts(j->kind ? j->kind : FSC_PAR_DDP, 0.5f);
    if (j->pp > 1) mt_pipeline(&po, j->onef1b, FSC_PIPE_CKPT_NEVER, NULL);
    if (j->sched) po.schedule = (fsc_pipe_schedule)j->sched, po.virtual_stages = j->vstages, po.prefetch = 1;
    else mt_accumulate(&po, 2);
    po.tp = j->tp;
    fsc_pipe_action *acts[2] = { NULL, NULL };
    int nacts[2] = { 0, 0 };
    fsc_status s = FSC_OK;
    if (j->vee) { /* the engine copies this rank's list when it is made */
        po.placement = FSC_PIPE_V;
        for (int k = 0; k < j->pp && s == FSC_OK; k++)
            s = fsc_pipe_schedule_make(FSC_SCHED_ZBV, j->pp, 2, po.accum, k, &acts[k], &nacts[k]);
        po.actions = (const fsc_pipe_action *const *)acts, po.nactions = nacts;
    }
    fsc_optim_config oc = { .kind = FSC_OPT_ADAMW, .lr = 1e-2f, .weight_decay = 0.01f, .beta1 = 0.9f,
                            .beta2 = 0.999f, .eps = 1e-8f };
    fsc_engine *e = NULL;
    if (s == FSC_OK) s = fsc_engine_create_built(r, fsc_llama_build, &a, &po, &oc, 7, &e);
    for (int k = 0; k < 2; k++) fsc_pipe_schedule_free(acts[k]);
    FSC_TRY(s);
    const int dp = fsc_engine_layout(e)->dp, di = fsc_engine_layout(e)->data, lb = GB / dp;
    int32_t tok[GB * SEQ], tgt[GB * SEQ];
    for (int st = 0; st <= STEPS && s == FSC_OK; st++) {
        for (int i = 0; i < lb; i++) sample((size_t)st * GB + (size_t)di * lb + i, tok + i * SEQ, tgt + i * SEQ);
        if (st == STEPS) break;
        fsc_step_info info;
        s = fsc_engine_step_model(e, tok, tgt, lb, GB, &info);
    }
    if (s == FSC_OK) s = fsc_engine_predict(e, tok, lb, j->out[r->rank], &j->per[r->rank]);
    double loss = 0;
    if (s == FSC_OK) s = fsc_engine_eval(e, tok, tgt, lb, GB, &loss);
    j->data[r->rank] = di;
    if (s == FSC_OK && r->rank == 0) {
        j->dp = dp;
        j->eval_loss = loss;
        j->own_loss = xent(j->out[0], tgt, (size_t)lb * SEQ) / ((double)lb * SEQ);
    }
    fsc_engine_free(e);
    return s;
}

static void run(job *j) {
    fsc_cluster_opts co = { .world = j->world, .device = "cpu", .timeout_s = 120, .threads_per_rank = 1 };
    assert_ok(fsc_cluster_run(&co, rank_fn, j));
    for (int k = 0; k < j->world; k++)
        if (j->per[k] != SEQ * VOCAB)
            fail_msg("world %d pp %d schedule %d: rank %d got %zu outputs per sample, not %d", j->world, j->pp, j->sched, k,
                     j->per[k], SEQ * VOCAB);
    if (j->dp == 1 && !(fabs(j->own_loss - j->eval_loss) <= 1e-5 * fmax(1.0, fabs(j->eval_loss))))
        fail_msg("world %d tp %d pp %d: the loss of predict's outputs %.9g, fsc_engine_eval's %.9g", j->world, j->tp,
                 j->pp, j->own_loss, j->eval_loss);
}

static job *make(int world, int tp, int pp) {
    job *j = calloc(1, sizeof *j);
    assert_non_null(j);
    j->world = world, j->tp = tp, j->pp = pp, j->layers = 2;
    return j;
}

/* Every rank of j has the bits of ref's rank of the same data index (lb x SEQ x VOCAB floats each). */
static void same_bits(const job *j, const job *ref, const char *what) {
    const size_t n = (size_t)(GB / j->dp) * SEQ * VOCAB;
    for (int k = 0; k < j->world; k++) {
        int m = -1;
        for (int q = 0; q < ref->world && m < 0; q++)
            if (ref->data[q] == j->data[k]) m = q;
        assert_true(m >= 0);
        if (memcmp(j->out[k], ref->out[m], n * sizeof(float)) != 0)
            fail_msg("%s: rank %d (data index %d): predict's outputs differ from the reference's", what, k, j->data[k]);
    }
}

static void test_pipeline(void **state) {
    (void)state;
    job *one = make(1, 1, 1), *ddp = make(2, 1, 1);
    run(one);
    run(ddp);
    for (int onef1b = 0; onef1b < 2; onef1b++) {
        job *pp = make(2, 1, 2);
        pp->onef1b = onef1b;
        run(pp);
        same_bits(pp, one, onef1b ? "pp 2 (1F1B)" : "pp 2 (GPipe)");
        free(pp);
    }
    job *ppdp = make(4, 1, 2);
    run(ppdp);
    same_bits(ppdp, ddp, "pp 2 x dp 2");
    free(one), free(ddp), free(ppdp);
}

/* The other schedules (interleaved over 2 chunks per rank, ZB-H1, ZBV: its last stage on rank 0, and zbv's lists
 * as a custom schedule placed in a V) and FSDP inside the stages, on 4 layers (4 chunks): every rank still gets its
 * own rows' outputs, the bits of one rank's (dp 1) or of DDP's (dp 2). */
static void test_pipeline_schedules(void **state) {
    (void)state;
    job *one = make(1, 1, 1), *ddp = make(2, 1, 1);
    one->layers = ddp->layers = 4;
    run(one);
    run(ddp);
    const struct { int sched, v, vee; const char *name; } sc[] = {
        { FSC_SCHED_INTERLEAVED, 2, 0, "interleaved" }, { FSC_SCHED_ZB_H1, 0, 0, "zb-h1" },
        { FSC_SCHED_ZBV, 2, 0, "zbv" }, { FSC_SCHED_CUSTOM, 2, 1, "custom V" } };
    for (int i = 0; i < 4; i++) {
        char what[64];
        job *pp = make(2, 1, 2);
        pp->sched = sc[i].sched, pp->vstages = sc[i].v, pp->vee = sc[i].vee, pp->layers = 4;
        run(pp);
        snprintf(what, sizeof what, "pp 2 (%s)", sc[i].name);
        same_bits(pp, one, what);
        job *fs = make(4, 1, 2);
        fs->sched = sc[i].sched, fs->vstages = sc[i].v, fs->vee = sc[i].vee, fs->kind = FSC_PAR_FSDP, fs->layers = 4;
        run(fs);
        snprintf(what, sizeof what, "fsdp dp 2 x pp 2 (%s)", sc[i].name);
        same_bits(fs, ddp, what);
        free(pp), free(fs);
    }
    free(one), free(ddp);
}

static void test_tensor_parallel(void **state) {
    (void)state;
    job *one = make(1, 1, 1), *tp = make(2, 2, 1), *tpp = make(4, 2, 2);
    run(one);
    run(tp);
    run(tpp);
    if (memcmp(tp->out[0], tp->out[1], sizeof tp->out[0]) != 0) fail_msg("tp 2: the tensor ranks' outputs differ");
    double worst = 0;
    for (size_t i = 0; i < (size_t)GB * SEQ * VOCAB; i++)
        worst = fmax(worst, fabs((double)tp->out[0][i] - one->out[0][i]));
    if (getenv("FSC_TEST_VERBOSE")) fprintf(stderr, "  tp 2 against one rank: max |logit difference| %.3g\n", worst);
    if (!(worst <= 1e-5)) fail_msg("tp 2: the logits differ from one rank's by %.3g (> 1e-5)", worst);
    same_bits(tpp, tp, "tp 2 x pp 2");
    free(one), free(tp), free(tpp);
}

/* A regressor (linear | gelu | linear | mse) whose loss layer keeps no outputs (its logits operation removed, as a
 * user's own loss layer may lack one): with a pipeline only the last stage finds that out; every rank must fail,
 * none wait. */
static fsc_layer_ops no_outputs_ops;
static fsc_status silent_rank(fsc_rank *r, void *arg) {
    fsc_status *got = arg;
    fsc_layer *l[4] = { 0 };
    fsc_linear_opts a = fsc_linear_opts_default(4, 8), b = fsc_linear_opts_default(8, 3);
    FSC_TRY(fsc_layer_linear(&a, &l[0]));
    FSC_TRY(fsc_layer_gelu(8, &l[1]));
    FSC_TRY(fsc_layer_linear(&b, &l[2]));
    FSC_TRY(fsc_layer_mse(3, &l[3]));
    l[3]->ops = &no_outputs_ops;
    const fsc_seq_layer ls[4] = { { .layer = l[0], .prefix = "in." }, { .layer = l[1] },
                                  { .layer = l[2], .prefix = "out." }, { .layer = l[3] } };
    fsc_model *m = NULL;
    FSC_TRY(fsc_seq_model_create(r->dev, ls, 4, &m));
    fsc_parallel_opts po = mt_opts(FSC_PAR_DDP, 0.0f);
    mt_pipeline(&po, 1, FSC_PIPE_CKPT_NEVER, NULL);
    fsc_optim_config oc = fsc_optim_config_default();
    fsc_engine *e = NULL;
    fsc_status s = fsc_engine_create_model(r, m, &po, &oc, 3, &e);
    float x[4 * 4] = { 0 }, out[4 * 3];
    size_t per = 0;
    if (s == FSC_OK) got[r->rank] = fsc_engine_predict(e, x, 4, out, &per);
    /* each rank's message says why (the world keeps the lowest failing rank's: the first stage's) */
    if (s == FSC_OK && got[r->rank] != FSC_OK && !strstr(fsc_last_error(), "keeps no outputs"))
        s = fsc_error(FSC_ERR_INTERNAL, "rank %d: predict's message does not say why: %s", r->rank, fsc_last_error());
    fsc_engine_free(e);
    fsc_model_free(m);
    return s;
}

static void test_pipeline_without_outputs(void **state) {
    (void)state;
    fsc_layer *mse = NULL;
    assert_ok(fsc_layer_mse(3, &mse));
    no_outputs_ops = *mse->ops;
    no_outputs_ops.logits = NULL;
    fsc_layer_free(mse);
    fsc_status got[2] = { FSC_OK, FSC_OK };
    fsc_cluster_opts co = { .world = 2, .device = "cpu", .timeout_s = 60, .threads_per_rank = 1 };
    assert_ok(fsc_cluster_run(&co, silent_rank, got));
    assert_int_equal(got[0], FSC_ERR_UNSUPPORTED);
    assert_int_equal(got[1], FSC_ERR_UNSUPPORTED);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pipeline),
        cmocka_unit_test(test_pipeline_schedules),
        cmocka_unit_test(test_tensor_parallel),
        cmocka_unit_test(test_pipeline_without_outputs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
