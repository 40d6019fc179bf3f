/* MoE GPTs in the training engine on the simulated cluster: expert parallelism (parallel.h, ep) inside the
 * data-parallel group, with DDP, ZeRO and FSDP.
 * Oracles:
 * - ep = world (one expert group: the experts' data-parallel replicas are one rank each) equals ep = 1 (every
 *   rank holds every expert, DDP sums the expert gradients over the world) bit for bit: losses, the
 *   load-balancing loss, assignments, drops, gradient norms, final parameters. The expert layer adds its
 *   weight gradients source rank by source rank (moe.h), which is the rank order of DDP's sum;
 * - 1 < ep < world: the forward of step 1 (equal parameters) is bit-identical (loss, aux loss, drops); after
 *   that the expert gradients are (g0 + g1) + (g2 + g3) instead of ((g0 + g1) + g2) + g3 (the expert group
 *   sums first, its replicas after): the sums differ in the last bits, and AdamW, which divides by the
 *   gradient's running magnitude, turns the relative error of a nearly cancelling sum into up to that
 *   fraction of lr. Bounds: losses 1e-6 relative, parameters 1e-4 absolute (lr / 100) after 3 steps, the
 *   routing the same (equal drops); measured: losses ~1e-8, parameters 5e-6 (9e-6 with two micro-batches,
 *   whose sums are associated differently too);
 * - FSDP (full_shard) and ZeRO-2 equal DDP bit for bit with ep = 1 (MoE blocks are units like dense ones);
 * - with ep = 2 of 4 ranks, zero1, zero2 and fsdp (every shard strategy) equal DDP with ep = 2 bit for bit (and
 *   so does a forward-only fsc_engine_eval after training), with two accumulating micro-batches and prefetch 0
 *   and 1 (zero2 and fsdp also with ep 2 and 4 of 8 ranks; fsdp also wrapping the whole model), and with offload
 *   optim (fsdp: and all): their expert shards are summed over the expert-data group as DDP's expert runs (summed
 *   over the data group, other experts' gradients would add in); zero1's parameter bytes are exactly the padded
 *   dense tensors and its E/ep experts, and a gathered FSDP MoE block holds its rank's experts only (its peak is
 *   below ep 1's);
 * - sync_from_rank0 with ep = 2 (DDP, ZeRO-2, FSDP) equals DDP's keyed initialization on every rank bit for
 *   bit;
 * - memory: a rank's parameter bytes are exactly (dense + its E/ep experts) x 4;
 * - communication per step and rank (the comm stats): the expert group's all-to-alls are 4 per MoE block
 *   and micro-batch, each (G-1)/G x E x cap x C x 4 bytes with cap = max(1, min(B T, ceil(cf k B T / E))) (one dispatch
 *   group per rank and micro-batch); the data-kind all-reduces carry the dense gradients over the data group
 *   (2 (W-1)/W x 4 x dense) plus the rank's experts over the expert-data group (2 (R-1)/R x 4 x its experts,
 *   R = W / ep); ep = 1 has no expert traffic;
 * - capacity: dropped assignments are reported and drop to 0 with a large capacity factor; assignments are
 *   k x tokens x MoE blocks;
 * - weights: the file saved with ep = 2 (by ddp, zero1 and fsdp) is byte-identical to the one saved with
 *   ep = 1, and loading that into an ep = 2 engine of each gives back the same full parameters;
 * - training checkpoints (sharded and full) written with ep = 2 by ddp, fsdp (full, no, hybrid shard) and zero2
 *   resume bit for bit on the writer's layout and give the writer's parameters with other ep and strategies
 *   (ddp ep 1 and 4, fsdp ep 4 and 1, zero1 ep 2); a model with other MoE blocks is refused;
 * - errors: ep not dividing the data group or the experts, ep without MoE, MoE with tensor parallelism are
 *   refused with messages (pipelines run: test_moe_pipe); ranks of an expert group passing different local
 *   batches have step, eval and predict refused on every rank of the data group before any all-to-all (ddp, fsdp,
 *   zero2; ep 2 of 2 and 4, ep 4 of 4; ep 2 in a pipeline of 2 stages), and a step with equal batches runs after;
 * - layer checkpointing (each block recomputed in backward, the MoE forward and its expert-group all-to-alls
 *   again) equals no checkpointing bit for bit (losses, aux loss, assignments, drops, norms, parameters) with
 *   ep 1 and ep 2, DDP accumulating 2 micro-batches. */
#include <unistd.h>
#include "partest.h"
#include "fsc/eval.h"

#define MS 4 /* steps */

typedef struct {
    fsc_gpt_config cfg;
    fsc_parallel_opts po;
    int world, batch, steps;
    /* results (rank 0 unless said) */
    fsc_step_info info[MS];
    float *params;
    fsc_comm_stats expert[PT_MAX_WORLD], data[PT_MAX_WORLD]; /* per rank, the last step */
    size_t param_bytes[PT_MAX_WORLD];
    const char *save, *load;  /* weights to write before training / read before training */
    const char *ckpt_out;     /* a training checkpoint written after the last step */
    const char *ckpt_in;      /* resume from this directory before training (steps continue from it) */
    fsc_ckpt_format ckpt_format;
    double eval_loss;         /* fsc_engine_eval of the last step's batch after training */
} me_run;

static fsc_gpt_config me_config(void) {
    fsc_gpt_config c = pt_small_config();
    c.moe_experts = 4, c.moe_top_k = 2, c.moe_every = 1, c.moe_capacity = 1.0f, c.moe_aux = 0.01f;
    return c;
}

static me_run me_make(int world, int ep) {
    me_run r;
    memset(&r, 0, sizeof r);
    r.cfg = me_config();
    r.po.kind = FSC_PAR_DDP;
    r.po.accum = 1;
    r.po.no_sync = 1;
    r.po.reshard_after_forward = -1;
    r.po.clip = 0.5f;
    r.po.ep = ep;
    r.world = world;
    r.batch = 8;
    r.steps = 3;
    return r;
}

static fsc_status me_rank(fsc_rank *r, void *arg) {
    me_run *run = arg;
    const int T = run->cfg.seq, B = run->batch, lb = B / r->world;
    fsc_optim_config oc = pt_adamw();
    fsc_engine *e = NULL;
    FSC_TRY(fsc_engine_create(r, &run->cfg, &run->po, &oc, 1234, &e));
    fsc_status s = FSC_OK;
    if (run->load) s = fsc_engine_load_weights(e, run->load);
    if (s == FSC_OK && run->save) s = fsc_engine_save_weights(e, run->save);
    int64_t from = 0;
    if (s == FSC_OK && run->ckpt_in) s = fsc_ckpt_resume(e, run->ckpt_in, &from);
    int32_t *tok = malloc((size_t)lb * T * sizeof(int32_t)), *tgt = malloc((size_t)lb * T * sizeof(int32_t));
    for (int step = (int)from; step < run->steps && s == FSC_OK; step++) {
        for (int i = 0; i < lb; i++) {
            size_t start = ((size_t)(step * B + r->rank * lb + i) * T) % (4096 - T);
            for (int t = 0; t < T; t++) {
                tok[i * T + t] = pt_token(start + t, run->cfg.vocab);
                tgt[i * T + t] = pt_token(start + t + 1, run->cfg.vocab);
            }
        }
        fsc_engine_reset_comm_stats(e);
        fsc_step_info info;
        s = fsc_engine_step(e, tok, tgt, lb, B, &info);
        if (s == FSC_OK && r->rank == 0) run->info[step] = info;
    }
    if (s == FSC_OK && r->rank < PT_MAX_WORLD) {
        fsc_engine_comm_stats_group(e, FSC_GROUP_EXPERT, &run->expert[r->rank]);
        fsc_engine_comm_stats_group(e, FSC_GROUP_DATA, &run->data[r->rank]);
        run->param_bytes[r->rank] = fsc_device_peak_bytes(r->dev, FSC_TAG_PARAMS);
    }
    if (s == FSC_OK && run->ckpt_out) {
        fsc_ckpt_save_opts so = { .format = run->ckpt_format };
        s = fsc_ckpt_save(e, run->ckpt_out, run->steps, &so);
    }
    if (s == FSC_OK && from < run->steps) { /* the last batch again, forward only */
        double l = 0;
        s = fsc_engine_eval(e, tok, tgt, lb, B, &l);
        if (s == FSC_OK && r->rank == 0) run->eval_loss = l;
    }
    if (s == FSC_OK) s = fsc_engine_full_params(e, r->rank == 0 ? run->params : NULL);
    free(tok);
    free(tgt);
    fsc_engine_free(e);
    return s;
}

static void me_train(me_run *run) {
    free(run->params);
    run->params = calloc(fsc_gpt_num_params(&run->cfg), sizeof(float));
    fsc_cluster_opts co = { .world = run->world, .device = "cpu", .timeout_s = 30, .threads_per_rank = 1 };
    assert_ok(fsc_cluster_run(&co, me_rank, run));
}

static void me_assert_same(const me_run *a, const me_run *b, const char *what) {
    for (int s = 0; s < a->steps; s++) {
        const fsc_step_info *x = &a->info[s], *y = &b->info[s];
        if (memcmp(&x->loss, &y->loss, sizeof(double)) || memcmp(&x->aux_loss, &y->aux_loss, sizeof(double)) ||
            memcmp(&x->grad_norm, &y->grad_norm, sizeof(double)) || x->moe_dropped != y->moe_dropped ||
            x->moe_assigned != y->moe_assigned)
            fail_msg("%s: step %d differs: loss %.17g vs %.17g, aux %.17g vs %.17g, norm %.17g vs %.17g, dropped "
                     "%lld vs %lld", what, s, x->loss, y->loss, x->aux_loss, y->aux_loss, x->grad_norm, y->grad_norm,
                     (long long)x->moe_dropped, (long long)y->moe_dropped);
    }
    if (memcmp(&a->eval_loss, &b->eval_loss, sizeof(double)))
        fail_msg("%s: eval loss %.17g vs %.17g", what, a->eval_loss, b->eval_loss);
    assert_bits_equal(a->params, b->params, fsc_gpt_num_params(&a->cfg), what);
}

/* floats of the dense tensors and of one expert's */
static void me_sizes(const fsc_gpt_config *c, size_t *dense, size_t *experts) {
    *dense = *experts = 0;
    for (int i = 0; i < fsc_gpt_num_tensors(c); i++) {
        fsc_param_info p;
        assert_ok(fsc_gpt_param_info(c, i, &p));
        if (p.expert >= 0) *experts += p.numel;
        else *dense += p.numel;
    }
}

/* The communication and memory formulas of the header, for ep on world ranks. */
static void me_check_comm(const me_run *r, int ep) {
    const fsc_gpt_config *c = &r->cfg;
    const int W = r->world, G = ep, R = W / G, nmoe = fsc_gpt_num_moe_blocks(c);
    const int tokens = r->batch / W / r->po.accum * c->seq;
    int cap = (int)ceil((double)c->moe_capacity * c->moe_top_k * tokens / c->moe_experts);
    if (cap > tokens) cap = tokens;
    size_t dense, experts;
    me_sizes(c, &dense, &experts);
    size_t mine = experts / (size_t)G; /* this rank's experts */
    double a2a = 4.0 * nmoe * r->po.accum * (G - 1.0) / G * c->moe_experts * cap * c->dim * 4;
    double ar = G > 1 ? 2.0 * (W - 1) / W * 4 * dense + 2.0 * (R - 1) / R * 4 * mine /* expert-data group */
                      : 2.0 * (W - 1) / W * 4 * (dense + experts); /* every expert is a replicated parameter */
    ar += 2.0 * (W - 1) / W * 4; /* the non-finite vote: one float over the world, here the data group */
    for (int q = 0; q < W; q++) {
        assert_int_equal(r->expert[q].calls[FSC_OP_ALL_TO_ALL], G > 1 ? 4 * nmoe * r->po.accum : 0);
        if (fabs(r->expert[q].bytes[FSC_OP_ALL_TO_ALL] - a2a) > 1e-6)
            fail_msg("ep %d rank %d: all-to-all bytes %.0f, formula %.0f", ep, q, r->expert[q].bytes[FSC_OP_ALL_TO_ALL],
                     a2a);
        if (fabs(r->data[q].bytes[FSC_OP_ALL_REDUCE] - ar) > 1e-6 * ar)
            fail_msg("ep %d rank %d: data all-reduce bytes %.0f, formula %.0f", ep, q,
                     r->data[q].bytes[FSC_OP_ALL_REDUCE], ar);
        assert_int_equal(r->param_bytes[q], (dense + mine) * sizeof(float));
    }
    printf("  ep %d of %d ranks: %.0f all-to-all bytes in %llu calls, %.0f all-reduce bytes (data and expert-data) "
           "per rank per step; parameters %zu bytes per rank\n", ep, W, r->expert[0].bytes[FSC_OP_ALL_TO_ALL],
           (unsigned long long)r->expert[0].calls[FSC_OP_ALL_TO_ALL], r->data[0].bytes[FSC_OP_ALL_REDUCE],
           r->param_bytes[0]);
}

static void test_moe_engine_ep_equals_data_parallel(void **state) {
    (void)state;
    for (int W = 2; W <= 4; W *= 2) {
        me_run a = me_make(W, 1), b = me_make(W, W);
        me_train(&a);
        me_train(&b);
        char what[64];
        snprintf(what, sizeof what, "ep %d vs ep 1 on %d ranks", W, W);
        me_assert_same(&a, &b, what);
        assert_true(a.info[0].moe_dropped > 0); /* capacity factor 1, top-2: the test covers drops */
        assert_int_equal(a.info[0].moe_assigned, (int64_t)2 * 8 * 7 * 2); /* k x tokens x blocks */
        assert_true(a.info[0].aux_loss > 0 && a.info[0].aux_loss < 2 * 4);
        me_check_comm(&a, 1);
        me_check_comm(&b, W);
        free(a.params), free(b.params);
    }
}

static void test_moe_engine_layer_checkpoint(void **state) {
    (void)state;
    for (int ep = 1; ep <= 2; ep++) {
        me_run a = me_make(2, ep), b = me_make(2, ep);
        a.po.accum = b.po.accum = 2;
        b.po.checkpoint = 1;
        me_train(&a);
        me_train(&b);
        char what[64];
        snprintf(what, sizeof what, "checkpoint vs none, ep %d", ep);
        me_assert_same(&a, &b, what);
        assert_true(a.info[0].moe_dropped > 0 && a.info[0].aux_loss > 0);
        /* not vacuous: with ep 2 the recomputation runs each block's dispatch and combine all-to-alls again
         * (2 forward + 2 backward per block and micro-batch, 2 more recomputed) */
        const int nmoe = fsc_gpt_num_moe_blocks(&a.cfg);
        for (int q = 0; q < 2; q++) {
            assert_int_equal(a.expert[q].calls[FSC_OP_ALL_TO_ALL], ep > 1 ? 4 * nmoe * 2 : 0);
            assert_int_equal(b.expert[q].calls[FSC_OP_ALL_TO_ALL], ep > 1 ? 6 * nmoe * 2 : 0);
        }
        free(a.params), free(b.params);
    }
}

static double max_abs_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

static void test_moe_engine_ep_inside_data_parallel(void **state) {
    (void)state;
    for (int accum = 1; accum <= 2; accum++) {
        me_run a = me_make(4, 1), b = me_make(4, 2);
        a.po.accum = b.po.accum = accum;
        me_train(&a);
        me_train(&b);
        /* step 1: equal parameters, so the forward is the same bits */
        assert_true(a.info[0].loss == b.info[0].loss && a.info[0].aux_loss == b.info[0].aux_loss);
        for (int s = 0; s < a.steps; s++) {
            assert_int_equal(a.info[s].moe_dropped, b.info[s].moe_dropped);
            double rel = fabs(a.info[s].loss - b.info[s].loss) / a.info[s].loss;
            if (getenv("FSC_TEST_VERBOSE")) fprintf(stderr, "  ep 2 of 4, accum %d, step %d: loss within %.3g\n",
                                                    accum, s, rel);
            if (!(rel <= 1e-6)) fail_msg("accum %d step %d: losses differ by %.3g relative", accum, s, rel);
        }
        double d = max_abs_diff(a.params, b.params, fsc_gpt_num_params(&a.cfg));
        if (getenv("FSC_TEST_VERBOSE")) fprintf(stderr, "  ep 2 of 4, accum %d: parameters within %.3g\n", accum, d);
        if (!(d <= 1e-4)) fail_msg("accum %d: ep 2 vs ep 1 parameters differ by %.3g", accum, d);
        me_check_comm(&b, 2);
        free(a.params), free(b.params);
    }
}

/* Broadcasting rank 0's initial weights (dense tensors over the data group, experts over the expert-data
 * group) equals every rank initializing its own from the keyed RNG, bit for bit. */
static void test_moe_engine_sync_from_rank0(void **state) {
    (void)state;
    me_run a = me_make(4, 2);
    a.steps = 1;
    me_train(&a);
    const fsc_parallel_kind kinds[] = { FSC_PAR_DDP, FSC_PAR_ZERO2, FSC_PAR_FSDP };
    for (int k = 0; k < 3; k++) {
        me_run b = me_make(4, 2);
        b.po.kind = kinds[k];
        b.po.sync_from_rank0 = 1;
        b.steps = 1;
        me_train(&b);
        char what[64];
        snprintf(what, sizeof what, "%s sync from rank 0 with ep 2", fsc_parallel_kind_name(kinds[k]));
        me_assert_same(&a, &b, what);
        free(b.params);
    }
    free(a.params);
}

static void test_moe_engine_sharded_equals_ddp(void **state) {
    (void)state;
    me_run ddp = me_make(2, 1);
    me_train(&ddp);
    fsc_parallel_kind kinds[] = { FSC_PAR_FSDP, FSC_PAR_ZERO2 };
    for (int k = 0; k < 2; k++) {
        me_run r = me_make(2, 1);
        r.po.kind = kinds[k];
        me_train(&r);
        me_assert_same(&ddp, &r, fsc_parallel_kind_name(kinds[k]));
        free(r.params);
    }
    free(ddp.params);
}

/* Expert parallelism under the sharding strategies: ep 2 of 4 ranks with zero1, zero2 and fsdp (full_shard,
 * shard_grad_op, no_shard, hybrid_shard) equals DDP with ep 2 bit for bit (losses, aux losses, clipped gradient
 * norms, final full parameters), one micro-batch or two that each reduce, prefetch 0 and 1. Expert gradients
 * reduced over the whole data group instead of the expert-data group would sum other experts' gradients in: not
 * equal. */
static void test_moe_engine_sharded_ep_equals_ddp(void **state) {
    (void)state;
    struct { fsc_parallel_kind kind; fsc_shard_strategy shard; } kinds[] = {
        { FSC_PAR_ZERO1, FSC_SHARD_FULL }, { FSC_PAR_ZERO2, FSC_SHARD_FULL }, { FSC_PAR_FSDP, FSC_SHARD_FULL },
        { FSC_PAR_FSDP, FSC_SHARD_GRAD_OP }, { FSC_PAR_FSDP, FSC_SHARD_NONE }, { FSC_PAR_FSDP, FSC_SHARD_HYBRID } };
    for (int accum = 1; accum <= 2; accum++) {
        me_run ddp = me_make(4, 2);
        ddp.po.accum = accum, ddp.po.no_sync = 0;
        me_train(&ddp);
        for (int k = 0; k < 6; k++)
            for (int pf = 0; pf <= 1; pf++) {
                me_run r = me_make(4, 2);
                r.po.accum = accum, r.po.no_sync = 0;
                r.po.kind = kinds[k].kind, r.po.shard = kinds[k].shard, r.po.prefetch = pf;
                r.po.bucket_bytes = 4096; /* zero2: several buckets */
                me_train(&r);
                char what[96];
                snprintf(what, sizeof what, "%s%s ep 2, accum %d, prefetch %d vs ddp ep 2",
                         fsc_parallel_kind_name(kinds[k].kind),
                         kinds[k].shard == FSC_SHARD_GRAD_OP ? " shard_grad_op"
                         : kinds[k].shard == FSC_SHARD_NONE  ? " no_shard"
                         : kinds[k].shard == FSC_SHARD_HYBRID ? " hybrid_shard" : "", accum, pf);
                me_assert_same(&ddp, &r, what);
                if (kinds[k].kind == FSC_PAR_ZERO1 && accum == 1) {
                    /* memory: the dense tensors padded to 4 shards, this rank's E/2 experts to 2 (one bucket each) */
                    size_t dense, experts;
                    me_sizes(&r.cfg, &dense, &experts);
                    size_t want = ((dense + 3) / 4 * 4 + (experts / 2 + 1) / 2 * 2) * sizeof(float);
                    for (int q = 0; q < 4; q++) assert_int_equal(r.param_bytes[q], want);
                }
                if (kinds[k].kind == FSC_PAR_FSDP && accum == 1 && pf == 0) {
                    /* a gathered MoE block holds its rank's experts only: less than with every expert on it */
                    me_run one = me_make(4, 1);
                    one.po.kind = FSC_PAR_FSDP, one.po.shard = kinds[k].shard, one.steps = 1;
                    me_train(&one);
                    assert_true(r.param_bytes[0] < one.param_bytes[0]);
                    free(one.params);
                }
                free(r.params);
            }
        free(ddp.params);
    }
    /* fsdp wrapping the whole model: the root's experts are a unit of their own, gathered and freed as others */
    me_run ref = me_make(4, 2);
    me_train(&ref);
    for (int pf = 0; pf <= 1; pf++) {
        me_run r = me_make(4, 2);
        r.po.kind = FSC_PAR_FSDP, r.po.wrap = FSC_WRAP_MODEL, r.po.prefetch = pf, r.po.reshard_after_forward = 1;
        me_train(&r);
        me_assert_same(&ref, &r, pf ? "fsdp wrap model ep 2, prefetch 1" : "fsdp wrap model ep 2");
        free(r.params);
    }
    free(ref.params);
    /* 8 ranks: ep 2 (4 ranks per expert-data group) and ep 4 */
    for (int ep = 2; ep <= 4; ep *= 2) {
        me_run ddp = me_make(8, ep);
        me_train(&ddp);
        const int ks[] = { 1, 2, 5 }; /* zero2, fsdp full_shard, hybrid_shard (groups of 4) */
        for (int i = 0; i < 3; i++) {
            const int k = ks[i];
            me_run r = me_make(8, ep);
            r.po.kind = kinds[k].kind, r.po.shard = kinds[k].shard, r.po.prefetch = 1;
            me_train(&r);
            char what[96];
            snprintf(what, sizeof what, "%s%s ep %d of 8 ranks vs ddp", fsc_parallel_kind_name(kinds[k].kind),
                     k == 5 ? " hybrid_shard" : "", ep);
            me_assert_same(&ddp, &r, what);
            free(r.params);
        }
        free(ddp.params);
    }
}

/* Offload with expert parallelism: zero1 and zero2 with offload optim, fsdp with offload optim and all, ep 2 of
 * 4 ranks, equal DDP with ep 2 bit for bit (prefetch 0 and 1, two micro-batches). */
static void test_moe_engine_offload_ep(void **state) {
    (void)state;
    me_run ddp = me_make(4, 2);
    ddp.po.accum = 2, ddp.po.no_sync = 0;
    me_train(&ddp);
    struct { fsc_parallel_kind kind; fsc_offload_mode off; fsc_shard_strategy shard; } runs[] = {
        { FSC_PAR_ZERO1, FSC_OFFLOAD_OPTIM, FSC_SHARD_FULL }, { FSC_PAR_ZERO2, FSC_OFFLOAD_OPTIM, FSC_SHARD_FULL },
        { FSC_PAR_FSDP, FSC_OFFLOAD_OPTIM, FSC_SHARD_FULL }, { FSC_PAR_FSDP, FSC_OFFLOAD_ALL, FSC_SHARD_FULL },
        { FSC_PAR_FSDP, FSC_OFFLOAD_ALL, FSC_SHARD_HYBRID } };
    for (int k = 0; k < 5; k++)
        for (int pf = 0; pf <= 1; pf++) {
            me_run r = me_make(4, 2);
            r.po.accum = 2, r.po.no_sync = 0;
            r.po.kind = runs[k].kind, r.po.offload = runs[k].off, r.po.shard = runs[k].shard, r.po.prefetch = pf;
            me_train(&r);
            char what[96];
            snprintf(what, sizeof what, "%s%s offload %s ep 2, prefetch %d vs ddp ep 2",
                     fsc_parallel_kind_name(r.po.kind), k == 4 ? " hybrid_shard" : "", fsc_offload_mode_name(runs[k].off),
                     pf);
            me_assert_same(&ddp, &r, what);
            free(r.params);
        }
    free(ddp.params);
}

static void test_moe_engine_capacity(void **state) {
    (void)state;
    me_run r = me_make(2, 2);
    r.cfg.moe_capacity = 4.0f; /* cap = tokens: nothing dropped */
    r.steps = 1;
    me_train(&r);
    assert_int_equal(r.info[0].moe_dropped, 0);
    me_check_comm(&r, 2);
    r.cfg.moe_capacity = 0.25f;
    me_train(&r);
    /* at most E cap of k tokens assignments kept per block, rank and micro-batch */
    int tokens = r.batch / 2 * r.cfg.seq, cap = (int)ceil(0.25 * 2 * tokens / 4);
    assert_true(r.info[0].moe_assigned - r.info[0].moe_dropped <= (int64_t)2 * 2 * 4 * cap);
    me_check_comm(&r, 2);
    free(r.params);
}

/* Whether files a and b hold the same bytes. */
static void me_same_file(const char *p1, const char *p2, const char *what) {
    FILE *x = fopen(p1, "rb"), *y = fopen(p2, "rb");
    assert_non_null(x);
    assert_non_null(y);
    int same = 1, cx, cy;
    long n = 0;
    do {
        cx = fgetc(x), cy = fgetc(y), n++;
        same &= cx == cy;
    } while (cx != EOF && cy != EOF);
    fclose(x), fclose(y);
    if (!same) fail_msg("the weights saved with %s differ from those saved with ep 1 (%ld bytes compared)", what, n);
}

static void test_moe_engine_weights(void **state) {
    (void)state;
    char p1[] = "/tmp/fsc_moe_w1_XXXXXX", p2[] = "/tmp/fsc_moe_w2_XXXXXX";
    int f1 = mkstemp(p1), f2 = mkstemp(p2);
    assert_true(f1 >= 0 && f2 >= 0);
    close(f1), close(f2);
    me_run a = me_make(2, 1);
    a.steps = 0;
    a.save = p1;
    me_train(&a);
    /* written with ep 2 by ddp, zero1 and fsdp (these gather their experts over the expert group on the host) */
    fsc_parallel_kind kinds[] = { FSC_PAR_DDP, FSC_PAR_ZERO1, FSC_PAR_FSDP };
    for (int k = 0; k < 3; k++) {
        me_run b = me_make(4, 2);
        b.po.kind = kinds[k];
        b.steps = 0;
        b.save = p2;
        me_train(&b);
        char what[64];
        snprintf(what, sizeof what, "%s ep 2", fsc_parallel_kind_name(kinds[k]));
        me_same_file(p1, p2, what);
        assert_bits_equal(a.params, b.params, fsc_gpt_num_params(&a.cfg), what);
        /* the ep 1 file loaded into an ep 2 engine of 4 ranks: the same full parameters */
        me_run d = me_make(4, 2);
        d.po.kind = kinds[k];
        d.steps = 0;
        d.load = p1;
        me_train(&d);
        assert_bits_equal(a.params, d.params, fsc_gpt_num_params(&a.cfg), "parameters loaded into ep 2");
        free(b.params), free(d.params);
    }
    unlink(p1), unlink(p2);
    free(a.params);
}

/* A checkpoint written with ep 2 on 4 ranks by ddp, fsdp (full, no and hybrid shard) and zero2, resumed on the
 * writer's layout and by ddp with ep 1 on 2 ranks and ep 4 on 4, fsdp with ep 4 on 4 and ep 1 on 2, zero1 with
 * ep 2 on 4: the resumed
 * parameters equal the writer's bit for bit, and the run resumed on the writer's layout continues exactly as the
 * uninterrupted run (parameters and losses bit for bit). Sharded and full formats. */
static void test_moe_engine_checkpoint(void **state) {
    (void)state;
    /* fsdp also no_shard (its expert units whole on every rank of the expert-data group) and hybrid_shard */
    const fsc_parallel_kind writers[] = { FSC_PAR_DDP, FSC_PAR_FSDP, FSC_PAR_ZERO2, FSC_PAR_FSDP, FSC_PAR_FSDP };
    const fsc_shard_strategy shards[] = { FSC_SHARD_FULL, FSC_SHARD_FULL, FSC_SHARD_FULL, FSC_SHARD_NONE,
                                          FSC_SHARD_HYBRID };
    for (int wk = 0; wk < 5; wk++)
    for (int fmt = 0; fmt < 2; fmt++) {
        char dir[] = "/tmp/fsc_moe_ckpt_XXXXXX";
        assert_non_null(mkdtemp(dir));
        me_run full = me_make(4, 2), w = me_make(4, 2);
        full.po.kind = w.po.kind = writers[wk];
        full.po.shard = w.po.shard = shards[wk];
        full.steps = 2;
        me_train(&full);
        w.steps = 1;
        w.ckpt_out = dir;
        w.ckpt_format = (fsc_ckpt_format)fmt;
        me_train(&w);
        char ck[512];
        int64_t at = -1;
        fsc_ckpt_meta *meta = NULL;
        assert_int_equal(fsc_ckpt_latest(dir, ck, sizeof ck, &at), FSC_OK);
        assert_int_equal(fsc_ckpt_verify(ck, &meta), FSC_OK);
        assert_int_equal(meta->ep, 2); /* the record names the writer's expert parallelism */
        fsc_ckpt_meta_free(meta);
        me_run r = me_make(4, 2);
        r.po.kind = writers[wk];
        r.po.shard = w.po.shard;
        r.steps = 2;
        r.ckpt_in = dir;
        me_train(&r);
        for (int s = 1; s < 2; s++) assert_true(memcmp(&r.info[s].loss, &full.info[s].loss, sizeof(double)) == 0);
        assert_bits_equal(r.params, full.params, fsc_gpt_num_params(&r.cfg), "resumed on the writer's layout");
        /* world, ep, strategy */
        const int layouts[5][3] = { { 2, 1, FSC_PAR_DDP }, { 4, 4, FSC_PAR_DDP }, { 4, 4, FSC_PAR_FSDP },
                                    { 2, 1, FSC_PAR_FSDP }, { 4, 2, FSC_PAR_ZERO1 } };
        for (int k = 0; k < 5; k++) {
            me_run o = me_make(layouts[k][0], layouts[k][1]);
            o.po.kind = (fsc_parallel_kind)layouts[k][2];
            o.steps = 1; /* the checkpoint's step: nothing more to run */
            o.ckpt_in = dir;
            me_train(&o);
            char what[128];
            snprintf(what, sizeof what, "written by %s ep 2, resumed by %s with ep %d on %d ranks",
                     fsc_parallel_kind_name(writers[wk]), fsc_parallel_kind_name(o.po.kind), layouts[k][1],
                     layouts[k][0]);
            assert_bits_equal(o.params, w.params, fsc_gpt_num_params(&o.cfg), what);
            free(o.params);
        }
        /* another placement of experts: refused with a message naming both */
        me_run x = me_make(2, 1);
        x.cfg.moe_every = 2;
        x.steps = 1;
        x.ckpt_in = dir;
        x.params = calloc(fsc_gpt_num_params(&x.cfg), sizeof(float));
        fsc_cluster_opts co = { .world = 2, .device = "cpu", .timeout_s = 30, .threads_per_rank = 1 };
        assert_err(fsc_cluster_run(&co, me_rank, &x), FSC_ERR_INVALID,
                   "written for a model with 4 experts (moe_every 1; 0: dense); this engine's model has 4 experts "
                   "(moe_every 2)");
        free(x.params);
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        assert_int_equal(system(cmd), 0);
        free(full.params), free(w.params), free(r.params);
    }
}

static fsc_status err_rank(fsc_rank *r, void *arg) {
    const me_run *run = arg;
    fsc_optim_config oc = pt_adamw();
    fsc_engine *e = NULL;
    fsc_status s = fsc_engine_create(r, &run->cfg, &run->po, &oc, 1, &e);
    fsc_engine_free(e);
    return s;
}

static void me_expect(me_run *r, fsc_status st, const char *msg) {
    fsc_cluster_opts co = { .world = r->world, .device = "cpu", .timeout_s = 30, .threads_per_rank = 1 };
    assert_err(fsc_cluster_run(&co, err_rank, r), st, msg);
}

/* Ranks of an expert group with different local batches: every step, eval and predict is refused on every rank
 * of the data group before any forward (their all-to-alls would have other sizes), and the engine steps on. */
static fsc_status unequal_rank(fsc_rank *r, void *arg) {
    const me_run *run = arg;
    fsc_optim_config oc = pt_adamw();
    fsc_engine *e = NULL;
    FSC_TRY(fsc_engine_create(r, &run->cfg, &run->po, &oc, 1234, &e));
    const fsc_layout *l = fsc_engine_layout(e); /* data rank 1 of each stage passes 2 sequences, the others 4 */
    const int T = run->cfg.seq, G = run->po.ep, lb = l->data == 1 ? 2 : 4, B = 4 * (l->dp - 1) + 2;
    int32_t *tok = calloc((size_t)4 * T, sizeof(int32_t));
    float *out = calloc((size_t)4 * T * run->cfg.vocab, sizeof(float));
    size_t per = 0;
    double loss = 0;
    char want[160];
    snprintf(want, sizeof want, "the ranks of an expert group (ep %d) passed different local batches (data rank 0: 4 "
             "sequences, data rank 1: 2)", G);
    fsc_status s = tok && out ? FSC_OK : FSC_ERR_NOMEM;
    for (int k = 0; k < 3 && s == FSC_OK; k++) { /* each call's own message, in this order */
        const fsc_status got = k == 0 ? fsc_engine_step(e, tok, tok, lb, B, NULL)
                             : k == 1 ? fsc_engine_eval(e, tok, tok, lb, B, &loss)
                                      : fsc_engine_predict(e, tok, lb, out, &per);
        if (got != FSC_ERR_INVALID || !strstr(fsc_last_error(), want))
            s = fsc_error(FSC_ERR_INTERNAL, "call %d on rank %d: %s \"%s\" (wanted \"%s\")", k, r->rank,
                          fsc_status_str(got), fsc_last_error(), want);
    }
    /* the refusals left the ranks in step: equal batches train */
    fsc_step_info info = { 0 };
    if (s == FSC_OK) s = fsc_engine_step(e, tok, tok, 4, 4 * l->dp, &info);
    if (s == FSC_OK && !(info.loss > 0)) s = fsc_error(FSC_ERR_INTERNAL, "loss %g after the refusals", info.loss);
    free(tok);
    free(out);
    fsc_engine_free(e);
    return s;
}

static void test_moe_engine_unequal_batches(void **state) {
    (void)state;
    /* world, ep, strategy, pp */
    const int layouts[4][4] = { { 2, 2, FSC_PAR_DDP, 1 }, { 4, 2, FSC_PAR_FSDP, 1 }, { 4, 4, FSC_PAR_ZERO2, 1 },
                                { 4, 2, FSC_PAR_DDP, 2 } };
    for (int k = 0; k < 4; k++) {
        me_run r = me_make(layouts[k][0], layouts[k][1]);
        r.po.kind = (fsc_parallel_kind)layouts[k][2];
        r.po.pp = layouts[k][3];
        fsc_cluster_opts co = { .world = r.world, .device = "cpu", .timeout_s = 30, .threads_per_rank = 1 };
        if (fsc_cluster_run(&co, unequal_rank, &r) != FSC_OK)
            fail_msg("world %d, ep %d, %s, pp %d: %s", r.world, r.po.ep, fsc_parallel_kind_name(r.po.kind), r.po.pp,
                     fsc_last_error());
    }
}

static void test_moe_engine_errors(void **state) {
    (void)state;
    me_run r = me_make(4, 3);
    me_expect(&r, FSC_ERR_INVALID, "ep 3 does not divide the data-parallel group of 4");
    r = me_make(4, 4);
    r.cfg.moe_experts = 6;
    me_expect(&r, FSC_ERR_INVALID, "6 experts do not split over ep 4");
    r = me_make(2, 2);
    r.cfg = pt_small_config();
    me_expect(&r, FSC_ERR_INVALID, "needs a model with experts");
    r = me_make(2, 1);
    r.po.tp = 2;
    me_expect(&r, FSC_ERR_UNSUPPORTED, "not supported with tensor parallelism");
    r = me_make(2, -1);
    me_expect(&r, FSC_ERR_INVALID, "ep (expert-parallel ranks) must be >= 1");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_moe_engine_ep_equals_data_parallel),
        cmocka_unit_test(test_moe_engine_ep_inside_data_parallel),
        cmocka_unit_test(test_moe_engine_sync_from_rank0),
        cmocka_unit_test(test_moe_engine_sharded_equals_ddp),
        cmocka_unit_test(test_moe_engine_sharded_ep_equals_ddp),
        cmocka_unit_test(test_moe_engine_offload_ep),
        cmocka_unit_test(test_moe_engine_capacity),
        cmocka_unit_test(test_moe_engine_weights),
        cmocka_unit_test(test_moe_engine_checkpoint),
        cmocka_unit_test(test_moe_engine_layer_checkpoint),
        cmocka_unit_test(test_moe_engine_errors),
        cmocka_unit_test(test_moe_engine_unequal_batches),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
