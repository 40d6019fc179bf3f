/* Shared by the tests that train a model (model.h) under a strategy on the simulated cluster and compare it
 * with DDP bit for bit (test_model, test_ddp_layers, test_ddp_llama): the parallel options of a run, the
 * strategies and pipelines it is set to, the cluster run that collects the final parameters, and the bitwise
 * comparison of every step's loss and the parameters. */
#ifndef FSC_MODELTEST_H
#define FSC_MODELTEST_H
#include <stdlib.h>
#include <string.h>
#include "testutil.h"

/* The options of a run: fp32 throughout, no accumulation, the strategy's default resharding, clip. */
static inline fsc_parallel_opts mt_opts(fsc_parallel_kind kind, float clip) {
    fsc_parallel_opts po;
    memset(&po, 0, sizeof po);
    po.kind = kind;
    po.accum = 1;
    po.reshard_after_forward = -1;
    po.param_dtype = FSC_F32;
    po.reduce_dtype = FSC_F32;
    po.clip = clip;
    return po;
}

/* One strategy compared with DDP. */
typedef struct {
    fsc_parallel_kind kind;
    fsc_shard_strategy shard;
    fsc_wrap_policy wrap;
    int checkpoint; /* layer checkpointing */
    const char *what;
} mt_strategy;

static inline void mt_apply(fsc_parallel_opts *po, const mt_strategy *c, size_t wrap_min_params) {
    po->shard = c->shard;
    po->wrap = c->wrap;
    po->wrap_min_params = wrap_min_params;
    po->checkpoint = c->checkpoint;
}

/* Accumulate `accum` micro-batches without synchronizing between them. */
static inline void mt_accumulate(fsc_parallel_opts *po, int accum) {
    po->accum = accum;
    po->no_sync = 1;
}

/* A 2-stage pipeline accumulating 2 micro-batches: 1F1B or GPipe, the stages' layers as balance says. */
static inline void mt_pipeline(fsc_parallel_opts *po, int onef1b, fsc_pipe_checkpoint mode, const int *balance) {
    po->pp = 2;
    mt_accumulate(po, 2);
    po->schedule = onef1b ? FSC_SCHED_1F1B : FSC_SCHED_GPIPE;
    po->pipe_checkpoint = mode;
    po->balance = balance;
}

/* Run rank_fn(arg) on `world` CPU ranks of one thread each, with *after (re)allocated to P floats for the
 * final parameters. */
static inline void mt_train(int world, int timeout_s, size_t P, float **after,
                            fsc_status (*rank_fn)(fsc_rank *, void *), void *arg) {
    free(*after);
    *after = calloc(P, sizeof(float));
    assert_non_null(*after);
    fsc_cluster_opts co = { .world = world, .device = "cpu", .timeout_s = timeout_s, .threads_per_rank = 1 };
    assert_ok(fsc_cluster_run(&co, rank_fn, arg));
}

/* Every step's loss and the P final parameters bit for bit. */
static inline void mt_assert_same(const double *loss_a, const double *loss_b, int steps, const float *after_a,
                                  const float *after_b, size_t P, const char *what) {
    for (int s = 0; s < steps; s++)
        if (memcmp(&loss_a[s], &loss_b[s], sizeof(double)) != 0)
            fail_msg("%s: loss of step %d differs: %.17g vs %.17g", what, s, loss_a[s], loss_b[s]);
    assert_bits_equal(after_a, after_b, P, what);
}

#endif
