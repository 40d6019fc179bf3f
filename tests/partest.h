/* Shared by the parallel tests: train a small GPT on the simulated cluster with a given strategy and
 * collect what the tests compare (every step's loss, the final full parameters, per-rank ledger peaks and
 * communication). The data follow the trainer's contract on a fixed synthetic token stream. */
#ifndef FSC_PARTEST_H
#define FSC_PARTEST_H
#include <math.h>
#include <stdlib.h>
#include "testutil.h"

#define PT_MAX_STEPS 8
#define PT_MAX_WORLD 8

typedef struct {
    fsc_gpt_config cfg;
    fsc_parallel_opts po;
    fsc_optim_config oc;
    int world, batch, steps;
    int stage;                           /* fsc_cluster_opts.stage_through_host */
    int clock;                           /* fsc_cluster_opts.sim_clock */
    double gbps, lat_us;                 /* fsc_cluster_opts' simulated network (0: none) */
    uint64_t seed;
    /* results */
    double loss[PT_MAX_STEPS];
    fsc_step_info info[PT_MAX_STEPS];
    float *params;                       /* (P) full parameters after the last step, from rank 0 */
    size_t peak[PT_MAX_WORLD][FSC_TAG_COUNT];
    fsc_comm_stats comm[PT_MAX_WORLD];   /* per rank, the last step only */
    int skipped[PT_MAX_WORLD][PT_MAX_STEPS];
    size_t copied[PT_MAX_WORLD][2];      /* per rank, bytes downloaded [0] and uploaded [1] over the steps */
} pt_run;

/* A model whose sizes divide by nothing in particular: units are padded on every world size. */
static inline fsc_gpt_config pt_small_config(void) {
    return (fsc_gpt_config){ .layers = 2, .dim = 24, .heads = 2, .seq = 7, .vocab = 50 };
}

static inline fsc_optim_config pt_adamw(void) {
    return (fsc_optim_config){ .kind = FSC_OPT_ADAMW, .lr = 1e-2f, .weight_decay = 0.1f,
                               .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f };
}

/* token i of the synthetic corpus */
static inline int32_t pt_token(size_t i, int vocab) {
    uint64_t x = i * 0x9E3779B97F4A7C15ull;
    x ^= x >> 29;
    return (int32_t)((x + (i / 3)) % (uint64_t)vocab);
}

/* The batch of data-parallel index data at step: its lb of the global B sequences of T tokens, and targets. */
static inline void pt_batch(int32_t *tok, int32_t *tgt, int step, int B, int data, int lb, int T, int vocab) {
    for (int i = 0; i < lb; i++) {
        size_t start = ((size_t)(step * B + data * lb + i) * T) % (4096 - T);
        for (int t = 0; t < T; t++) {
            tok[i * T + t] = pt_token(start + t, vocab);
            tgt[i * T + t] = pt_token(start + t + 1, vocab);
        }
    }
}

static fsc_status pt_rank_fn(fsc_rank *r, void *arg) {
    pt_run *run = arg;
    const int T = run->cfg.seq, B = run->batch, N = r->world;
    int dp = run->po.pp > 1 ? N / run->po.pp : N, data = r->rank % dp; /* pipelines: stages of dp ranks */
    fsc_engine *e = NULL;
    fsc_status s = fsc_engine_create(r, &run->cfg, &run->po, &run->oc, run->seed, &e);
    if (s != FSC_OK) return s;
    if (run->po.tp > 1) dp = fsc_engine_layout(e)->dp, data = fsc_engine_layout(e)->data; /* the tensor group's
                                                                                              ranks share data */
    const int lb = B / dp;
    int32_t *tok = malloc((size_t)lb * T * sizeof(int32_t)), *tgt = malloc((size_t)lb * T * sizeof(int32_t));
    const size_t down0 = fsc_device_copied_bytes(r->dev, 0), up0 = fsc_device_copied_bytes(r->dev, 1);
    for (int step = 0; step < run->steps && s == FSC_OK; step++) {
        pt_batch(tok, tgt, step, B, data, lb, T, run->cfg.vocab);
        fsc_engine_reset_comm_stats(e);
        fsc_step_info info;
        s = fsc_engine_step(e, tok, tgt, lb, B, &info);
        if (s == FSC_OK && r->rank == 0) {
            run->loss[step] = info.loss;
            run->info[step] = info;
        }
        if (s == FSC_OK && r->rank < PT_MAX_WORLD) {
            fsc_engine_comm_stats(e, &run->comm[r->rank]);
            run->skipped[r->rank][step] = info.skipped;
        }
    }
    if (r->rank < PT_MAX_WORLD) {
        run->copied[r->rank][0] = fsc_device_copied_bytes(r->dev, 0) - down0;
        run->copied[r->rank][1] = fsc_device_copied_bytes(r->dev, 1) - up0;
    }
    if (s == FSC_OK) s = fsc_engine_full_params(e, r->rank == 0 ? run->params : NULL);
    if (r->rank < PT_MAX_WORLD)
        for (int t = 0; t < FSC_TAG_COUNT; t++) run->peak[r->rank][t] = fsc_device_peak_bytes(r->dev, (fsc_tag)t);
    free(tok);
    free(tgt);
    fsc_engine_free(e);
    return s;
}

/* Train; fails the test on error. */
static inline void pt_train(pt_run *run) {
    size_t P = fsc_gpt_num_params(&run->cfg);
    free(run->params);
    run->params = calloc(P, sizeof(float));
    fsc_cluster_opts co = { .world = run->world, .device = "cpu", .timeout_s = 30,
                            .stage_through_host = run->stage, .sim_clock = run->clock,
                            .sim_bandwidth_gbps = run->gbps, .sim_latency_us = run->lat_us };
    assert_ok(fsc_cluster_run(&co, pt_rank_fn, run));
}

static inline pt_run pt_make(int world, fsc_parallel_kind kind) {
    pt_run r;
    memset(&r, 0, sizeof r);
    r.cfg = pt_small_config();
    r.po.kind = kind;
    r.po.accum = 1;
    r.po.reshard_after_forward = -1;
    r.po.param_dtype = FSC_F32;
    r.po.reduce_dtype = FSC_F32;
    r.po.clip = 0.5f;
    r.oc = pt_adamw();
    r.world = world;
    r.batch = 24;
    r.steps = 3;
    r.seed = 1234;
    return r;
}

/* Bitwise equality of losses and final parameters. */
static inline void pt_assert_same(const pt_run *a, const pt_run *b, const char *what) {
    for (int s = 0; s < a->steps; s++) {
        if (memcmp(&a->loss[s], &b->loss[s], sizeof(double)) != 0)
            fail_msg("%s: loss of step %d differs: %.17g vs %.17g", what, s, a->loss[s], b->loss[s]);
    }
    assert_bits_equal(a->params, b->params, fsc_gpt_num_params(&a->cfg), what);
}

#endif
