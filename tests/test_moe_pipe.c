/* MoE GPTs in a pipeline (lib/parallel/pipe.c, pipe_stats.c) on the simulated cluster.
 * Oracle: DDP over the dp data-parallel ranks with the same expert parallelism (ep) and gradient accumulation
 * over the same M micro-batches (accum = M, no_sync) gives the same bits as the pipeline: on every rank every
 * step's loss (cross entropy), the load-balancing (aux) loss, the assignments and drops, the gradient norm (a
 * clip that clips), then a forward-only evaluation's loss and the final full parameters. Cases: pp 2, 3 and 4
 * with even and uneven balances, GPipe and 1F1B, every pipeline checkpoint mode, 2 to 5 micro-batches, MoE
 * blocks everywhere and every other block, a small capacity (drops happen); dp 2 x pp 2 and 3 with DDP ep 1 and
 * 2, ZeRO-2, ZeRO-1 and FSDP ep 2, and layer checkpointing; prefetch 1; interleaved stages (2 chunks per rank)
 * with the MoE GPT and Llama; interleaved, ZB-H1 and ZBV (the MoE layers' backward split into B and W) with ep 1
 * and, on dp 2 x pp 2, ep 2 under DDP and FSDP. Each stage's blocks have partial sums
 * that differ from DDP's in the last bits when added stage by stage: summing the stages' statistics in another
 * order, or dropping one stage's, fails this test (checked by breaking pipe_stats.c). A model that reports
 * statistics (aux_stats) but not per layer (aux_layers) is refused in a pipeline. */
#include <unistd.h>
#include "partest.h"
#include "fsc/eval.h"
#include "fsc/llama.h"

#define MS 3 /* steps */
#define MAXW 8

typedef struct {
    fsc_gpt_config cfg;
    int llama;                    /* the MoE Llama of lc instead (vocabulary and sequence as cfg's) */
    fsc_llama_config lc;
    fsc_parallel_opts po;
    int world, batch, steps;
    fsc_step_info info[MAXW][MS]; /* every rank's */
    double eval[MAXW];            /* fsc_engine_eval of the last batch after training */
    float *params;                /* rank 0 */
    size_t P;                     /* its floats */
} mp_run;

static fsc_gpt_config mp_config(int every) {
    fsc_gpt_config c = { .layers = 5, .dim = 24, .heads = 2, .seq = 7, .vocab = 50 };
    c.moe_experts = 4, c.moe_top_k = 2, c.moe_every = every, c.moe_capacity = 0.75f, c.moe_aux = 0.01f;
    return c;
}

/* dp x pp ranks, M micro-batches of mb sequences per data-parallel rank */
static mp_run mp_make(int dp, int pp, fsc_parallel_kind kind, int ep, int M, int mb) {
    mp_run r;
    memset(&r, 0, sizeof r);
    r.cfg = mp_config(1);
    r.po.kind = kind;
    r.po.pp = pp;
    r.po.ep = ep;
    r.po.accum = M;
    r.po.no_sync = 1;
    r.po.reshard_after_forward = -1;
    r.po.clip = 0.5f;
    r.world = dp * pp;
    r.batch = dp * M * mb;
    r.steps = MS;
    return r;
}

static fsc_status mp_rank(fsc_rank *rk, void *arg) {
    mp_run *r = arg;
    const int T = r->cfg.seq, B = r->batch, dp = rk->world / (r->po.pp > 1 ? r->po.pp : 1);
    const int lb = B / dp, dpi = rk->rank % dp;
    fsc_optim_config oc = pt_adamw();
    fsc_engine *e = NULL;
    fsc_model *m = NULL;
    if (r->llama) {
        FSC_TRY(fsc_llama_model_create(rk->dev, &r->lc, &m));
        fsc_status c = fsc_engine_create_model(rk, m, &r->po, &oc, 77, &e);
        if (c != FSC_OK) fsc_model_free(m);
        FSC_TRY(c);
    } else {
        FSC_TRY(fsc_engine_create(rk, &r->cfg, &r->po, &oc, 77, &e));
    }
    int32_t *tok = malloc((size_t)lb * T * sizeof(int32_t)), *tgt = malloc((size_t)lb * T * sizeof(int32_t));
    fsc_status s = tok && tgt ? FSC_OK : FSC_ERR_NOMEM;
    for (int step = 0; step < r->steps && s == FSC_OK; step++) {
        pt_batch(tok, tgt, step, B, dpi, lb, T, r->cfg.vocab); /* as DDP's rank dpi */
        s = fsc_engine_step_model(e, tok, tgt, lb, B, &r->info[rk->rank][step]);
    }
    if (s == FSC_OK) s = fsc_engine_eval(e, tok, tgt, lb, B, &r->eval[rk->rank]);
    if (s == FSC_OK) s = fsc_engine_full_params(e, rk->rank == 0 ? r->params : NULL);
    free(tok);
    free(tgt);
    fsc_engine_free(e);
    fsc_model_free(m);
    return s;
}

static void mp_train(mp_run *r) {
    free(r->params);
    r->P = fsc_gpt_num_params(&r->cfg);
    if (r->llama) {
        fsc_device *dev = NULL;
        fsc_model *m = NULL;
        assert_ok(fsc_device_create("cpu", NULL, &dev));
        assert_ok(fsc_llama_model_create(dev, &r->lc, &m));
        r->P = fsc_model_num_params(m);
        fsc_model_free(m);
        fsc_device_free(dev);
    }
    r->params = calloc(r->P, sizeof(float));
    fsc_cluster_opts co = { .world = r->world, .device = "cpu", .timeout_s = 60, .threads_per_rank = 1 };
    assert_ok(fsc_cluster_run(&co, mp_rank, r));
}

/* The DDP reference of a pipeline run: its dp ranks, the same micro-batches and ep, no pipeline. */
static mp_run mp_reference(const mp_run *p) {
    mp_run d = *p;
    d.params = NULL;
    d.po.pp = 1;
    d.po.virtual_stages = 0;
    d.po.schedule = FSC_SCHED_GPIPE;
    d.po.balance = NULL;
    d.po.kind = FSC_PAR_DDP;
    d.po.checkpoint = 0;
    d.world = p->world / p->po.pp;
    mp_train(&d);
    return d;
}

static int same(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

static void mp_assert_same(const mp_run *ref, const mp_run *p, const char *what) {
    int drops = 0;
    for (int s = 0; s < p->steps; s++)
        for (int rk = 0; rk < p->world; rk++) {
            const fsc_step_info *x = &ref->info[0][s], *y = &p->info[rk][s];
            if (!same(x->loss, y->loss) || !same(x->aux_loss, y->aux_loss) || !same(x->grad_norm, y->grad_norm) ||
                x->moe_assigned != y->moe_assigned || x->moe_dropped != y->moe_dropped)
                fail_msg("%s: step %d, rank %d: loss %.17g vs DDP %.17g, aux %.17g vs %.17g, norm %.17g vs %.17g, "
                         "assigned %lld vs %lld, dropped %lld vs %lld", what, s, rk, y->loss, x->loss, y->aux_loss,
                         x->aux_loss, y->grad_norm, x->grad_norm, (long long)y->moe_assigned,
                         (long long)x->moe_assigned, (long long)y->moe_dropped, (long long)x->moe_dropped);
            drops += y->moe_dropped > 0;
        }
    for (int rk = 0; rk < p->world; rk++)
        if (!same(ref->eval[0], p->eval[rk]))
            fail_msg("%s: eval loss on rank %d %.17g vs DDP %.17g", what, rk, p->eval[rk], ref->eval[0]);
    if (!drops) fail_msg("%s: no dropped assignments (the capacity should drop some)", what);
    if (!(ref->info[0][0].aux_loss > 0)) fail_msg("%s: no aux loss", what);
    assert_bits_equal(ref->params, p->params, p->P, what);
}

static const char *sched_name[] = { "gpipe", "1f1b" };
static const char *ckpt_name[] = { "except_last", "always", "never" };

/* dp 1: pp 2, 3, 4, even and uneven balances, both schedules, every checkpoint mode */
static void test_moe_pipe_stages(void **state) {
    (void)state;
    static const int b2[] = { 1, 4 }, b3[] = { 2, 1, 2 }, b4[] = { 1, 1, 2, 1 };
    struct { int pp; const int *bal; int M; int every; } cases[] = {
        { 2, NULL, 3, 1 }, { 2, b2, 2, 1 }, { 3, b3, 4, 1 }, { 3, NULL, 3, 2 }, { 4, b4, 5, 1 },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        mp_run base = mp_make(1, cases[c].pp, FSC_PAR_DDP, 1, cases[c].M, 2);
        base.cfg = mp_config(cases[c].every);
        mp_run ref = mp_reference(&base);
        for (int sc = 0; sc < 2; sc++)
            for (int ck = 0; ck < 3; ck++) {
                mp_run p = base;
                p.po.balance = cases[c].bal;
                p.po.schedule = (fsc_pipe_schedule)sc;
                p.po.pipe_checkpoint = (fsc_pipe_checkpoint)ck;
                p.po.prefetch = (sc + ck) % 2;
                mp_train(&p);
                char what[160];
                snprintf(what, sizeof what, "pp %d (%s balance), MoE every %d, %d micro-batches, %s, checkpoint %s, "
                         "prefetch %d", cases[c].pp, cases[c].bal ? "uneven" : "even", cases[c].every, cases[c].M,
                         sched_name[sc], ckpt_name[ck], p.po.prefetch);
                mp_assert_same(&ref, &p, what);
                free(p.params);
            }
        free(ref.params);
    }
}

/* dp 2 inside each stage: DDP with ep 1 and 2, the sharding strategies with ep 2, layer checkpointing */
static void test_moe_pipe_data_parallel(void **state) {
    (void)state;
    static const int b3[] = { 1, 3, 1 };
    struct { fsc_parallel_kind kind; int ep, pp, ckpt; const int *bal; } cases[] = {
        { FSC_PAR_DDP, 1, 2, 0, NULL },   { FSC_PAR_DDP, 2, 2, 0, NULL },   { FSC_PAR_ZERO2, 2, 2, 0, NULL },
        { FSC_PAR_ZERO1, 2, 3, 0, b3 },   { FSC_PAR_FSDP, 2, 2, 0, NULL },  { FSC_PAR_FSDP, 2, 3, 1, b3 },
        { FSC_PAR_DDP, 2, 3, 1, NULL },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int sc = 0; sc < 2; sc++) {
            mp_run p = mp_make(2, cases[c].pp, cases[c].kind, cases[c].ep, 3, 1);
            p.po.balance = cases[c].bal;
            p.po.schedule = (fsc_pipe_schedule)sc;
            p.po.pipe_checkpoint = FSC_PIPE_CKPT_NEVER;
            p.po.checkpoint = cases[c].ckpt;
            p.po.prefetch = sc;
            mp_run ref = mp_reference(&p);
            mp_train(&p);
            char what[160];
            snprintf(what, sizeof what, "dp 2 x pp %d, %s ep %d, %s, layer checkpoint %d", cases[c].pp,
                     cases[c].kind == FSC_PAR_DDP ? "ddp" : cases[c].kind == FSC_PAR_FSDP ? "fsdp" : "zero",
                     cases[c].ep, sched_name[sc], cases[c].ckpt);
            mp_assert_same(&ref, &p, what);
            free(p.params);
            free(ref.params);
        }
}

/* The MoE Llama (its blocks from the same MoE layer): pp 2 and 3, dp 1 and 2, ep 1 and 2 */
static void test_moe_pipe_llama(void **state) {
    (void)state;
    static const int b3[] = { 2, 1, 1 };
    struct { int dp, pp, ep; fsc_parallel_kind kind; const int *bal; } cases[] = {
        { 1, 2, 1, FSC_PAR_DDP, NULL }, { 2, 2, 2, FSC_PAR_FSDP, NULL }, { 2, 3, 2, FSC_PAR_ZERO2, b3 },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        mp_run p = mp_make(cases[c].dp, cases[c].pp, cases[c].kind, cases[c].ep, 3, 1);
        p.llama = 1;
        p.lc = (fsc_llama_config){ .layers = 4, .dim = 16, .heads = 4, .kv_heads = 2, .ffn = 24, .seq = 7,
                                   .vocab = 50, .rope_theta = 10000.0f, .norm_eps = 1e-5f, .moe_experts = 4,
                                   .moe_top_k = 2, .moe_every = 1, .moe_capacity = 0.75f, .moe_aux = 0.01f };
        p.po.balance = cases[c].bal;
        p.po.schedule = (fsc_pipe_schedule)(c % 2);
        mp_run ref = mp_reference(&p);
        mp_train(&p);
        char what[160];
        snprintf(what, sizeof what, "llama: dp %d x pp %d, ep %d", cases[c].dp, cases[c].pp, cases[c].ep);
        mp_assert_same(&ref, &p, what);
        free(p.params);
        free(ref.params);
    }
}

/* Interleaved stages (2 chunks per rank): each chunk's record notes its own layers' statistics, added in DDP's
 * order; the MoE GPT (uneven balance over the 4 chunks, every checkpoint mode) and the MoE Llama, pp 2, ep 1 */
static void test_moe_pipe_interleaved(void **state) {
    (void)state;
    static const int b4[] = { 1, 2, 1, 1 };
    for (int c = 0; c < 4; c++) {
        mp_run p = mp_make(1, 2, FSC_PAR_DDP, 1, 4, 1);
        if (c == 3) {
            p.llama = 1;
            p.lc = (fsc_llama_config){ .layers = 4, .dim = 16, .heads = 4, .kv_heads = 2, .ffn = 24, .seq = 7,
                                       .vocab = 50, .rope_theta = 10000.0f, .norm_eps = 1e-5f, .moe_experts = 4,
                                       .moe_top_k = 2, .moe_every = 1, .moe_capacity = 0.75f, .moe_aux = 0.01f };
        } else {
            p.po.balance = b4;
            p.po.pipe_checkpoint = (fsc_pipe_checkpoint)c;
        }
        p.po.prefetch = 1;
        p.po.schedule = FSC_SCHED_INTERLEAVED;
        p.po.virtual_stages = 2;
        mp_run ref = mp_reference(&p);
        mp_train(&p);
        char what[160];
        snprintf(what, sizeof what, "interleaved, pp 2 x 2 chunks, %s, checkpoint %s", c == 3 ? "llama" : "gpt",
                 ckpt_name[c == 3 ? 0 : c]);
        mp_assert_same(&ref, &p, what);
        free(p.params);
        free(ref.params);
    }
}

/* The schedules with chunks and W actions: interleaved (2 chunks per rank), ZB-H1 and ZBV, pp 2, with the MoE
 * GPT and Llama, ep 1 (dp 1 and 2) and ep 2 (dp 2 x pp 2 = 4 ranks: each expert group inside a stage's data
 * group, its ranks running the same action list, the all-to-alls in F and B, none in W). The MoE layers split
 * their backward (B: the input gradient and every all-to-all; W: the gate's and the experts' weight gradients
 * from what B kept), so W holds real work; the bits are DDP's with the same ep. */
static void test_moe_pipe_zero_bubble(void **state) {
    (void)state;
    static const fsc_pipe_schedule sch[] = { FSC_SCHED_INTERLEAVED, FSC_SCHED_ZB_H1, FSC_SCHED_ZBV };
    static const char *const names[] = { "interleaved", "zb-h1", "zbv" };
    static const int b4[] = { 1, 2, 1, 1 };
    struct { int dp, ep, llama; fsc_parallel_kind kind; fsc_pipe_checkpoint ck; } cases[] = {
        { 1, 1, 0, FSC_PAR_DDP, FSC_PIPE_CKPT_EXCEPT_LAST }, { 1, 1, 1, FSC_PAR_DDP, FSC_PIPE_CKPT_NEVER },
        { 2, 2, 0, FSC_PAR_DDP, FSC_PIPE_CKPT_ALWAYS },      { 2, 2, 1, FSC_PAR_DDP, FSC_PIPE_CKPT_EXCEPT_LAST },
        { 2, 2, 0, FSC_PAR_FSDP, FSC_PIPE_CKPT_NEVER },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int k = 0; k < 3; k++) {
            mp_run p = mp_make(cases[c].dp, 2, cases[c].kind, cases[c].ep, 4, 1);
            if (cases[c].llama) {
                p.llama = 1;
                p.lc = (fsc_llama_config){ .layers = 4, .dim = 16, .heads = 4, .kv_heads = 2, .ffn = 24, .seq = 7,
                                           .vocab = 50, .rope_theta = 10000.0f, .norm_eps = 1e-5f,
                                           .moe_experts = 4, .moe_top_k = 2, .moe_every = 1, .moe_capacity = 0.75f,
                                           .moe_aux = 0.01f };
            } else if (sch[k] != FSC_SCHED_ZB_H1) {
                p.po.balance = b4; /* over the 4 chunks */
            }
            p.po.schedule = sch[k];
            p.po.virtual_stages = sch[k] == FSC_SCHED_INTERLEAVED ? 2 : 0;
            p.po.pipe_checkpoint = cases[c].ck;
            p.po.prefetch = 1;
            p.steps = 2;
            mp_run ref = mp_reference(&p);
            mp_train(&p);
            char what[160];
            snprintf(what, sizeof what, "%s, dp %d x pp 2, %s ep %d, %s, checkpoint %s", names[k], cases[c].dp,
                     cases[c].kind == FSC_PAR_DDP ? "ddp" : "fsdp", cases[c].ep, cases[c].llama ? "llama" : "gpt",
                     ckpt_name[cases[c].ck]);
            mp_assert_same(&ref, &p, what);
            free(p.params);
            free(ref.params);
        }
}

/* A model with aux_stats but not aux_layers: a pipeline could not add its statistics in order, so it refuses */
static fsc_status no_layers_rank(fsc_rank *rk, void *arg) {
    (void)arg;
    fsc_gpt_config c = mp_config(1);
    fsc_model *m = NULL;
    FSC_TRY(fsc_gpt_model_create(rk->dev, &c, &m));
    fsc_model_ops ops = *m->ops;
    const fsc_model_ops *own = m->ops;
    ops.aux_layers = NULL;
    m->ops = &ops;
    fsc_parallel_opts po = { .kind = FSC_PAR_DDP, .pp = 2, .accum = 2, .no_sync = 1, .reshard_after_forward = -1 };
    fsc_optim_config oc = pt_adamw();
    fsc_engine *e = NULL;
    fsc_status s = fsc_engine_create_model(rk, m, &po, &oc, 1, &e);
    fsc_engine_free(e);
    m->ops = own;
    fsc_model_free(m);
    return s;
}

static void test_moe_pipe_refusal(void **state) {
    (void)state;
    fsc_cluster_opts co = { .world = 2, .device = "cpu", .timeout_s = 30, .threads_per_rank = 1 };
    assert_err(fsc_cluster_run(&co, no_layers_rank, NULL), FSC_ERR_UNSUPPORTED, "but not per layer (aux_layers)");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_moe_pipe_stages),
        cmocka_unit_test(test_moe_pipe_data_parallel),
        cmocka_unit_test(test_moe_pipe_llama),
        cmocka_unit_test(test_moe_pipe_interleaved),
        cmocka_unit_test(test_moe_pipe_zero_bubble),
        cmocka_unit_test(test_moe_pipe_refusal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
