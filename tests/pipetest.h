/* Shared by the pipeline tests (test_pipe.c, test_pipe_random.c): a pipeline run of a small tied GPT on the
 * simulated cluster (make), trained with every rank's losses and rank 0's final parameters collected (train),
 * its DDP reference over the same micro-batches (reference) and the bit-for-bit comparison (assert_same). */
#ifndef FSC_PIPETEST_H
#define FSC_PIPETEST_H
#include "partest.h"
#include "parallel/pipe.h"

#define MAXW 8
#define MAXS 4

typedef struct {
    fsc_gpt_config cfg;
    fsc_parallel_opts po;
    fsc_optim_config oc;
    int world, batch, steps;
    const char *save;                 /* write the final weights there (collective) */
    const char *load;                 /* read the initial weights from there (collective) */
    int eval;                         /* fsc_engine_eval of each step's batch before the step, into ev */
    int bad_first;                    /* a first step with a wrong global batch, which must fail on every rank */
    int sync_sends;                   /* the simulated cluster's sends wait for their receive (as NCCL's) */
    int threads;                      /* BLAS threads per rank (0: the cluster's default, which differs between a
                                       * world of 1 and more: OpenBLAS may split a large product differently) */
    double ev[MAXW][MAXS];
    double loss[MAXW][MAXS];          /* every rank's loss of every step */
    fsc_step_info info[MAXS];         /* rank 0 */
    float *params;                    /* (P) full parameters after the last step, rank 0 */
    size_t acts_peak[MAXW];           /* the device ledger's FSC_TAG_ACTS peak per rank */
    size_t grads_peak[MAXW];          /* the device ledger's FSC_TAG_GRADS peak per rank */
    size_t grads_need[MAXW];          /* the gradients of the tensors a rank's layers own, plus the tied-gradient
                                       * buffer of each tied tensor whose owner or a user it runs (bytes) */
    size_t grads_tied[MAXW];          /* of which the tied-gradient buffers */
    fsc_pipe_stats stats[MAXW];
    fsc_comm_stats comm[MAXW];        /* the last step */
} run;

static inline fsc_gpt_config five_blocks(void) {
    return (fsc_gpt_config){ .layers = 5, .dim = 24, .heads = 2, .seq = 7, .vocab = 50 };
}

/* dp x pp ranks; M micro-batches of mb sequences per data-parallel rank */
static inline run make(int dp, int pp, fsc_parallel_kind kind, int M, int mb) {
    run r;
    memset(&r, 0, sizeof r);
    r.cfg = five_blocks();
    r.po.kind = kind;
    r.po.pp = pp;
    r.po.accum = M;
    r.po.no_sync = 1;
    r.po.reshard_after_forward = -1;
    r.po.clip = 0.5f;
    r.oc = pt_adamw();
    r.world = dp * pp;
    r.batch = dp * M * mb;
    r.steps = 3;
    return r;
}

/* make with one sequence a micro-batch, 8 blocks, 2 steps and prefetch, as the schedules' tests run */
static inline run make_split(int dp, int pp, fsc_parallel_kind kind, int M) {
    run r = make(dp, pp, kind, M, 1);
    r.cfg.layers = 8;
    r.steps = 2;
    r.po.prefetch = 1;
    return r;
}

static inline fsc_status rank_fn(fsc_rank *rk, void *arg) {
    run *r = arg;
    const int T = r->cfg.seq, B = r->batch, dp = rk->world / fsc_pipe_stages(&r->po);
    const int lb = B / dp, dpi = rk->rank % dp;
    fsc_engine *e = NULL;
    FSC_TRY(fsc_engine_create(rk, &r->cfg, &r->po, &r->oc, 99, &e));
    if (r->load && fsc_engine_load_weights(e, r->load) != FSC_OK) {
        fsc_engine_free(e);
        return FSC_ERR_IO;
    }
    int32_t *tok = malloc((size_t)lb * T * sizeof(int32_t)), *tgt = malloc((size_t)lb * T * sizeof(int32_t));
    fsc_status s = tok && tgt ? FSC_OK : FSC_ERR_NOMEM;
    for (int step = 0; step < r->steps && s == FSC_OK; step++) {
        pt_batch(tok, tgt, step, B, dpi, lb, T, r->cfg.vocab); /* as DDP's rank dpi */
        fsc_engine_reset_comm_stats(e);
        fsc_step_info info;
        if (r->bad_first && step == 0 && fsc_engine_step(e, tok, tgt, lb, B + 1, &info) != FSC_ERR_INVALID)
            s = fsc_error(FSC_ERR_INTERNAL, "a step with a wrong global batch did not fail");
        if (s == FSC_OK && r->eval) s = fsc_engine_eval(e, tok, tgt, lb, B, &r->ev[rk->rank][step]);
        if (s == FSC_OK) s = fsc_engine_step(e, tok, tgt, lb, B, &info);
        if (s == FSC_OK) r->loss[rk->rank][step] = info.loss;
        if (s == FSC_OK && rk->rank == 0) r->info[step] = info;
    }
    if (s == FSC_OK) fsc_engine_comm_stats(e, &r->comm[rk->rank]);
    if (s == FSC_OK) s = fsc_engine_pipe_stats(e, &r->stats[rk->rank]);
    if (s == FSC_OK) s = fsc_engine_full_params(e, rk->rank == 0 ? r->params : NULL);
    if (s == FSC_OK && r->save) s = fsc_engine_save_weights(e, r->save);
    r->acts_peak[rk->rank] = fsc_device_peak_bytes(rk->dev, FSC_TAG_ACTS);
    r->grads_peak[rk->rank] = fsc_device_peak_bytes(rk->dev, FSC_TAG_GRADS);
    const fsc_model *m = fsc_engine_model(e);
    size_t need = 0, tied_need = 0;
    for (int i = 0; m && i < m->n_tensors; i++) {
        const fsc_param_info *pi = &m->info[i];
        int tied = fsc_pipe_runs_layer(e, pi->layer);
        if (tied) need += pi->numel;
        for (int u = 0; u < pi->nusers; u++) tied |= fsc_pipe_runs_layer(e, pi->users[u]);
        if (pi->nusers && tied) need += pi->numel, tied_need += pi->numel;
    }
    r->grads_need[rk->rank] = need * sizeof(float);
    r->grads_tied[rk->rank] = tied_need * sizeof(float);
    free(tok);
    free(tgt);
    fsc_engine_free(e);
    return s;
}

static inline void train(run *r) {
    free(r->params);
    r->params = calloc(fsc_gpt_num_params(&r->cfg), sizeof(float));
    fsc_cluster_opts co = { .world = r->world, .device = "cpu", .timeout_s = 30, .sim_sync_sends = r->sync_sends,
                            .threads_per_rank = r->threads };
    assert_ok(fsc_cluster_run(&co, rank_fn, r));
}

/* The DDP reference of a pipeline run: its dp ranks, the same micro-batches, no pipeline. */
static inline run reference(const run *p) {
    run d = *p;
    d.params = NULL;
    d.save = NULL;
    d.po.pp = 1;
    d.po.virtual_stages = 0;
    d.po.schedule = FSC_SCHED_GPIPE;
    d.po.placement = FSC_PIPE_LOOP;
    d.po.balance = NULL;
    d.po.kind = FSC_PAR_DDP;
    d.world = p->world / p->po.pp;
    train(&d);
    return d;
}

static inline void assert_same(const run *ref, const run *p, const char *what) {
    for (int s = 0; s < p->steps; s++)
        for (int rk = 0; rk < p->world; rk++)
            if (memcmp(&ref->loss[0][s], &p->loss[rk][s], sizeof(double)) != 0)
                fail_msg("%s: loss of step %d on rank %d differs: %.17g vs DDP %.17g", what, s, rk, p->loss[rk][s],
                         ref->loss[0][s]);
    assert_bits_equal(ref->params, p->params, fsc_gpt_num_params(&p->cfg), what);
}

/* Run p on its ranks with fresh parameters and compare it with ref (assert_same); p's parameters freed after. */
static inline void run_against(const run *ref, run *p, const char *what) {
    fsc_cluster_opts co = { .world = p->world, .device = "cpu", .timeout_s = 30 };
    free(p->params);
    p->params = calloc(fsc_gpt_num_params(&p->cfg), sizeof(float));
    if (fsc_cluster_run(&co, rank_fn, p) != FSC_OK) fail_msg("%s: %s", what, fsc_last_error());
    assert_same(ref, p, what);
    free(p->params);
    p->params = NULL;
}

#endif
