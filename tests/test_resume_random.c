/* Checkpoints across layouts, drawn at random: the exact reduction's promise (docs/determinism.md,
 * docs/checkpoints.md) that a run saved under one layout and resumed under another gives the bits of an
 * uninterrupted run, for layouts drawn at random.
 * A case fixes what the bits depend on (docs/determinism.md): the model (a GPT or a Llama of 4 or 6 blocks, dense
 * or a mixture of 4 experts, top 1 or 2, in every block or every second one), the optimizer (AdamW, SGD with and
 * without momentum), the parameter dtype (f32, bf16, f16 with loss scaling), the global batch B of 8, 12 or 16,
 * the unit U of 1 or 2 sequences and the tensor-parallel degree (1, or 2 with and without sequence parallelism:
 * the bits depend on it, so it is fixed along a chain). It draws a chain of two or three layouts: the first trains
 * steps [0, s1) (s1 0 now and then: an untrained engine's checkpoint) and saves, the next loads that checkpoint
 * (fsc_ckpt_load of the step, fsc_ckpt_resume or fsc_ckpt_try_resume of the directory), trains [s1, s2) and saves
 * in turn, and so on up to step 4. A layout: the data-parallel size dp (dividing the B / U units) x pipeline
 * stages pp (1 to 4) x tp, at most 8 ranks, in any rank order; the strategy inside the data group (none at dp 1,
 * ddp, also from rank 0's weights, fsdp with every shard strategy, a hybrid group dividing dp, block, model or
 * min_params wrapping and every reshard_after_forward, zero1, zero2, at dp 1 too; ddp and zero with a bucket per
 * layer or the default); accumulation (a pipeline's micro-batch is the unit; otherwise any divisor of the units);
 * prefetch 0 or 1 and its limit; offload none, optim (fsdp, zero) or all (fsdp); layer checkpointing; for pp > 1
 * the schedule (gpipe, 1f1b, interleaved with 2 or 3 chunks, zb-h1, zbv, and custom lists: a built-in schedule's
 * lists for the same ranks, chunks and micro-batches, in a loop or zbv's V; tests/test_pipe_random.c draws lists
 * of its own), the pipeline checkpoint mode and an even or random balance; expert parallelism ep dividing dp; the
 * checkpoint format (sharded or full); checkpoints after every step and evaluations before every step or not;
 * buffers staged through the host or not; a step on other data before the load or not (a used engine loads).
 * What the engine refuses by its documented rules is not drawn: offload with none or ddp, offload all without
 * fsdp, chunks without prefetch, interleaved micro-batches that are not a
 * multiple of pp, ep with a model without experts or with tp, sequence parallelism with a length tp does not
 * divide.
 * Whoever runs step 0 sets the learning rate (fsc_engine_set_lr); nobody sets it later, so a resumed layout steps
 * with the rate its checkpoint restored.
 * Oracle: one rank (tp ranks with tensor parallelism) accumulating the B / U units uninterrupted, which also saves a
 * full checkpoint and evaluates after every step: every rank's loss of every step (from the layout that ran it),
 * the MoE statistics (aux loss, assigned and dropped tokens), every evaluation loss (fsc_engine_eval of a batch
 * no step trains on), the files of every full-format checkpoint a layout writes (model.safetensors and
 * optim.safetensors, byte for byte), and at the end the full parameters (fsc_engine_full_params), the optimizer
 * state (fsc_ckpt_full_state) and the weights file (fsc_engine_save_weights), bit for bit.
 * A quarter of the cases use the ordered reduction instead (the default mode): its promise is narrower
 * (docs/determinism.md: every strategy and pipeline equals DDP at the same data-parallel size and accumulation;
 * docs/tensor_parallel.md: with the same ep), so such a case fixes dp, the micro-batches M and ep for its whole
 * chain (no tensor parallelism), the layouts vary the rest, and the oracle is DDP on dp ranks accumulating M
 * micro-batches, uninterrupted.
 * test_resume_random_trainer runs chains through fsc-train (examples/train_gpt.c) instead: the layouts become its
 * options (custom lists their built-in schedule; what it has no option for left at its default), each layout a
 * run with --steps up to its cut and --save-every 1 --ckpt-dir, the next one --resume of the directory or of the
 * step; oracle: the uninterrupted run's losses (--json) and --save bytes.
 * Not covered (not promised): another tensor-parallel degree, another U (exact) or dp, M, ep (ordered), device
 * or BLAS thread count (one BLAS thread per rank here).
 * A failure names the seed, the case and every layout of its chain. FSC_RESUME_RANDOM_SEED,
 * FSC_RESUME_RANDOM_CASES and FSC_RESUME_RANDOM_TRAINER_CASES change the seed and the number of cases (longer
 * hunts), FSC_RESUME_RANDOM_MODE=ordered or exact draws one reduction only; FSC_RESUME_RANDOM_ONE=SEED runs the
 * one case of that seed (as a failure prints it, with the same MODE);
 * FSC_RESUME_RANDOM_VERBOSE=1 prints every case. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "fsc/llama.h"
#include "fsc/pipe_schedule.h"
#include "partest.h"
#include "testrng.h"
#include "trainertest.h"

#define MAXBATCH 16
#define MAXBLOCKS 6
#define STEPS 4
#define MAXW 8
#define MAXHOPS 3

/* What the bits depend on: the same in every layout of a case and in its reference. */
typedef struct {
    int batch, blocks, moe;         /* the global batch (8, 12 or 16 sequences), blocks, a mixture of experts */
    int dtype, U, sgd;              /* dtype 0 f32, 1 bf16, 2 f16 (loss scaling); sgd 1 with momentum, 2 without */
    int tp, sp;                     /* tensor parallelism (a fixed degree: the bits depend on it), sequence parallel */
    int top_k, every;               /* MoE: experts per token, every N-th block a mixture */
    int llama;                      /* a Llama (untied embedding and head, RMSNorm, SwiGLU, GQA), not a GPT */
    int ordered;                    /* the ordered reduction: the bits are DDP's on dp ranks with M micro-batches
                                     * and expert parallelism ep (docs/determinism.md), fixed along the chain */
    int dp, M, ep;
} model_key;

/* One layout of a chain. */
typedef struct {
    int dp, pp, v;
    fsc_parallel_kind kind;
    fsc_shard_strategy shard;
    int hybrid_group, bucket1, prefetch, prefetch_limit, reshard, layer_ckpt, ep, accum, sync0, stage, order;
    int save_mid, eval_mid, pre_step;
    fsc_wrap_policy wrap;
    size_t wrap_min;
    fsc_offload_mode offload;
    fsc_pipe_schedule sched;
    fsc_pipe_schedule custom_of; /* custom: the built-in schedule whose lists it runs */
    fsc_pipe_checkpoint pipe_ckpt;
    int nbal, balance[MAXBLOCKS]; /* nbal 0: even */
    fsc_ckpt_format format;      /* of the checkpoint it saves */
    int by;                      /* loads by fsc_ckpt_load of the step (0), fsc_ckpt_resume (1) or fsc_ckpt_try_resume
                                  * (2) of the directory */
    fsc_pipe_action *lists[4];   /* custom: every pipeline rank's actions */
    int nact[4];
} layout;

typedef struct {
    fsc_gpt_config cfg;
    fsc_llama_build_arg llama;  /* llama.cfg.layers > 0: a Llama of it instead of cfg's GPT */
    fsc_optim_config oc;
    fsc_parallel_opts po;
    int batch, U, from, to;
    const char *load, *resume_dir, *save_dir;
    fsc_ckpt_format format;
    int ref;                    /* the reference: a full checkpoint into save_dir and an evaluation at every step */
    const char *weights;        /* fsc_engine_save_weights there at the end (NULL: none) */
    int try_resume, stage;      /* resume_dir by fsc_ckpt_try_resume; fsc_cluster_opts.stage_through_host */
    int save_mid, eval_mid;     /* a checkpoint after every step (into save_dir) and an evaluation before each */
    int pre_step;               /* a step on other data before the load (an engine that trained loads) */
    /* results */
    double loss[MAXW][STEPS], aux[MAXW][STEPS];
    double ev[MAXW][STEPS + 1]; /* the evaluation loss after each step (index: steps done) */
    int evaluated[STEPS + 1];
    int64_t assigned[STEPS], dropped[STEPS];
    int64_t loaded_step;
    float *params, *state[2];
} job;

static const char *const kind_names[] = { "none", "ddp", "fsdp", "zero1", "zero2" };
static const char *const shard_names[] = { "full", "grad_op", "no_shard", "hybrid" };
static const char *const sched_names[] = { "gpipe", "1f1b", "interleaved", "custom", "zb-h1", "zbv" };
static const char *const ckpt_names[] = { "except_last", "always", "never" };
static const char *const offload_names[] = { "none", "optim", "all" };
static const char *const orders[] = { NULL, "dp,tp,pp", "pp,dp,tp", "tp,pp,dp", "dp,pp,tp", "pp,tp,dp" };

static fsc_llama_build_arg llama_cfg(const model_key *k) {
    fsc_llama_build_arg a;
    memset(&a, 0, sizeof a);
    if (!k->llama) return a;
    a.cfg = (fsc_llama_config){ .layers = k->blocks, .dim = 16, .heads = 4, .kv_heads = 2, .ffn = 24, .seq = 8,
                                .vocab = 32, .rope_theta = 10000.0f, .norm_eps = 1e-5f };
    if (k->moe)
        a.cfg.moe_experts = 4, a.cfg.moe_top_k = k->top_k, a.cfg.moe_every = k->every, a.cfg.moe_capacity = 0.75f,
        a.cfg.moe_aux = 0.01f;
    a.sp = k->sp;
    return a;
}

static size_t num_params(const job *j) {
    return j->llama.cfg.layers ? fsc_llama_num_params(&j->llama.cfg) : fsc_gpt_num_params(&j->cfg);
}

static fsc_gpt_config model_cfg(const model_key *k) {
    fsc_gpt_config c = { .layers = k->blocks, .dim = 24, .heads = 2, .seq = k->sp ? 8 : 7, .vocab = 50 };
    if (k->moe)
        c.moe_experts = 4, c.moe_top_k = k->top_k, c.moe_every = k->every, c.moe_capacity = 0.75f, c.moe_aux = 0.01f;
    return c;
}

static fsc_optim_config optim_cfg(const model_key *k) {
    if (k->sgd)
        return (fsc_optim_config){ .kind = FSC_OPT_SGD, .lr = 0.05f, .momentum = k->sgd == 1 ? 0.9f : 0.0f,
                                   .weight_decay = 0.01f };
    return pt_adamw();
}

static int nstates(const fsc_optim_config *oc) {
    return oc->kind == FSC_OPT_ADAMW ? 2 : oc->momentum != 0.0f ? 1 : 0;
}

static fsc_parallel_opts base_opts(const model_key *k) {
    fsc_parallel_opts po = fsc_parallel_opts_default();
    po.reduce_exact = !k->ordered;
    po.unit = k->ordered ? 0 : k->U;
    po.no_sync = 1;
    po.clip = 0.5f;
    if (k->dtype) po.param_dtype = po.reduce_dtype = k->dtype == 1 ? FSC_BF16 : FSC_F16;
    po.tp = k->tp;
    po.sequence_parallel = k->sp;
    return po;
}

static fsc_parallel_opts layout_opts(const model_key *k, const layout *l) {
    fsc_parallel_opts po = base_opts(k);
    po.kind = l->kind;
    po.shard = l->shard;
    po.hybrid_group = l->hybrid_group;
    po.wrap = l->wrap;
    po.wrap_min_params = l->wrap_min;
    po.reshard_after_forward = l->reshard;
    if (l->bucket1) po.bucket_bytes = 1;
    po.prefetch = l->prefetch;
    po.prefetch_limit = l->prefetch_limit;
    po.offload = l->offload;
    po.checkpoint = l->layer_ckpt;
    po.ep = l->ep;
    po.accum = l->accum;
    po.sync_from_rank0 = l->sync0;
    po.order = l->order ? orders[l->order] : NULL;
    po.pp = l->pp;
    if (l->pp > 1) {
        po.unit = 0; /* the pipeline's micro-batch: U by accum */
        po.schedule = l->sched;
        po.virtual_stages = l->v;
        po.pipe_checkpoint = l->pipe_ckpt;
        po.balance = l->nbal ? l->balance : NULL;
        if (l->sched == FSC_SCHED_CUSTOM) {
            po.placement = fsc_pipe_schedule_placement(l->custom_of);
            po.actions = (const fsc_pipe_action *const *)l->lists;
            po.nactions = l->nact;
        }
    }
    return po;
}

static void describe(const layout *l, int saves, char *buf, size_t cap) {
    int n = snprintf(buf, cap, "dp %d x pp %d, %s", l->dp, l->pp, kind_names[l->kind]);
    if (l->kind == FSC_PAR_FSDP) {
        n += snprintf(buf + n, cap - (size_t)n, " %s", shard_names[l->shard]);
        if (l->shard == FSC_SHARD_HYBRID) n += snprintf(buf + n, cap - (size_t)n, " (group %d)", l->hybrid_group);
        if (l->wrap == FSC_WRAP_MODEL) n += snprintf(buf + n, cap - (size_t)n, " wrap model");
        if (l->wrap == FSC_WRAP_MIN_PARAMS)
            n += snprintf(buf + n, cap - (size_t)n, " wrap min_params %zu", l->wrap_min);
        if (l->reshard >= 0) n += snprintf(buf + n, cap - (size_t)n, " reshard_after_forward %d", l->reshard);
    }
    if (l->bucket1) n += snprintf(buf + n, cap - (size_t)n, " (a bucket per layer)");
    if (l->sync0) n += snprintf(buf + n, cap - (size_t)n, " (rank 0's initial weights)");
    n += snprintf(buf + n, cap - (size_t)n, ", accum %d", l->accum);
    if (l->order) n += snprintf(buf + n, cap - (size_t)n, ", rank order %s", orders[l->order]);
    if (l->stage) n += snprintf(buf + n, cap - (size_t)n, ", staged through the host");
    n += snprintf(buf + n, cap - (size_t)n, ", prefetch %d (limit %d), offload %s", l->prefetch, l->prefetch_limit,
                  offload_names[l->offload]);
    if (l->ep > 1) n += snprintf(buf + n, cap - (size_t)n, ", ep %d", l->ep);
    if (l->layer_ckpt) n += snprintf(buf + n, cap - (size_t)n, ", layer checkpointing");
    if (l->pp > 1) {
        n += snprintf(buf + n, cap - (size_t)n, ", %s", sched_names[l->sched]);
        if (l->sched == FSC_SCHED_CUSTOM)
            n += snprintf(buf + n, cap - (size_t)n, " (%s's lists)", sched_names[l->custom_of]);
        n += snprintf(buf + n, cap - (size_t)n, ", %d chunk%s, pipe checkpoint %s, balance ", l->v > 1 ? l->v : 1,
                      l->v > 1 ? "s" : "", ckpt_names[l->pipe_ckpt]);
        if (!l->nbal) n += snprintf(buf + n, cap - (size_t)n, "even");
        for (int i = 0; i < l->nbal; i++) n += snprintf(buf + n, cap - (size_t)n, "%s%d", i ? "," : "", l->balance[i]);
    }
    if (l->save_mid) n += snprintf(buf + n, cap - (size_t)n, ", saves after every step");
    if (l->eval_mid) n += snprintf(buf + n, cap - (size_t)n, ", evaluates before every step");
    if (l->pre_step) n += snprintf(buf + n, cap - (size_t)n, ", a step on other data before it loads");
    if (saves) snprintf(buf + n, cap - (size_t)n, ", saves %s", l->format == FSC_CKPT_FULL ? "full" : "sharded");
    else snprintf(buf + n, cap - (size_t)n, ", saves its weights");
}

static int divisors(int n, int *out) {
    int c = 0;
    for (int d = 1; d <= n; d++)
        if (n % d == 0) out[c++] = d;
    return c;
}

/* A random layout that the engine runs (what it refuses, by the documented rules, is not drawn). */
static void draw_layout(rng *R, const model_key *k, layout *l) {
    memset(l, 0, sizeof *l);
    const int units = k->ordered ? k->dp * k->M : k->batch / k->U;
    int ds[MAXBATCH], nd;
    do {
        nd = divisors(units, ds);
        l->dp = k->ordered ? k->dp : ds[rng_int(R, nd)];
        l->pp = 1 + rng_int(R, 4);
    } while (l->dp * l->pp * k->tp > MAXW);
    const int M = units / l->dp; /* micro-batches (units) per data rank */
    int as[MAXBATCH], na = divisors(M, as);
    l->accum = M; /* a pipeline's micro-batch is the unit; otherwise units are given and accum any divisor */
    if (l->pp == 1 && !k->ordered && rng_int(R, 2)) l->accum = as[rng_int(R, na)];
    if (k->tp > 1 || l->pp > 1) l->order = rng_int(R, 6);
    l->stage = rng_int(R, 6) == 0;
    /* the strategy */
    static const fsc_parallel_kind kinds[] = { FSC_PAR_DDP, FSC_PAR_FSDP, FSC_PAR_FSDP, FSC_PAR_ZERO1, FSC_PAR_ZERO2 };
    l->kind = l->dp == 1 && rng_int(R, 2) ? FSC_PAR_NONE : kinds[rng_int(R, 5)];
    if (l->kind == FSC_PAR_FSDP) {
        l->shard = (fsc_shard_strategy)rng_int(R, 4);
        if (l->shard == FSC_SHARD_HYBRID) {
            int gs[MAXBATCH], ng = divisors(l->dp, gs);
            l->hybrid_group = rng_int(R, 3) ? gs[rng_int(R, ng)] : 0;
        }
        const int w = rng_int(R, 6);
        l->wrap = w == 0 ? FSC_WRAP_MODEL : w == 1 ? FSC_WRAP_MIN_PARAMS : FSC_WRAP_BLOCK;
        if (l->wrap == FSC_WRAP_MIN_PARAMS) l->wrap_min = (size_t)1 << (6 + rng_int(R, 10)); /* 64 .. 32768 */
        l->reshard = rng_int(R, 3) - 1;
    } else {
        l->reshard = -1;
    }
    l->bucket1 = (l->kind == FSC_PAR_DDP || l->kind == FSC_PAR_ZERO1 || l->kind == FSC_PAR_ZERO2) && rng_int(R, 2);
    l->sync0 = l->kind == FSC_PAR_DDP && rng_int(R, 4) == 0;
    l->prefetch = rng_int(R, 2);
    l->prefetch_limit = rng_int(R, 4); /* 0: the default (2) */
    if (l->kind == FSC_PAR_FSDP) l->offload = (fsc_offload_mode)rng_int(R, 3);
    else if (l->kind == FSC_PAR_ZERO1 || l->kind == FSC_PAR_ZERO2) l->offload = (fsc_offload_mode)rng_int(R, 2);
    if (k->moe) { /* ep divides dp and the 4 experts */
        int es[4], ne = 0;
        for (int e = 1; e <= 4; e *= 2)
            if (l->dp % e == 0) es[ne++] = e;
        l->ep = l->kind == FSC_PAR_NONE ? 1 : k->ordered ? k->ep : es[rng_int(R, ne)];
    }
    /* the pipeline */
    if (l->pp > 1) {
        static const fsc_pipe_schedule scheds[] = { FSC_SCHED_GPIPE, FSC_SCHED_1F1B, FSC_SCHED_INTERLEAVED,
                                                    FSC_SCHED_ZB_H1, FSC_SCHED_ZBV, FSC_SCHED_CUSTOM };
        fsc_pipe_schedule s;
        for (;;) { /* interleaved: 2 or 3 chunks and M a multiple of pp; zbv: 2 chunks in a V */
            s = scheds[rng_int(R, 6)];
            fsc_pipe_schedule of = s;
            if (s == FSC_SCHED_CUSTOM) {
                of = scheds[rng_int(R, 5)];
                l->custom_of = of;
            }
            const int chunks = of == FSC_SCHED_INTERLEAVED ? 2 + rng_int(R, 2) : of == FSC_SCHED_ZBV ? 2 : 1;
            if (l->pp * chunks > k->blocks) continue;
            if (of == FSC_SCHED_INTERLEAVED && M % l->pp != 0) continue;
            l->v = chunks;
            break;
        }
        l->sched = s;
        if (l->v > 1) l->prefetch = 1; /* chunks need prefetch */
        if (s == FSC_SCHED_CUSTOM)
            for (int r = 0; r < l->pp; r++)
                if (fsc_pipe_schedule_make(l->custom_of, l->pp, l->v, M, r, &l->lists[r], &l->nact[r]) != FSC_OK)
                    fail_msg("fsc_pipe_schedule_make(%s, p %d, v %d, m %d): %s", sched_names[l->custom_of], l->pp,
                             l->v, M, fsc_last_error());
        l->pipe_ckpt = (fsc_pipe_checkpoint)rng_int(R, 3);
        l->layer_ckpt = rng_int(R, 3) == 0;
        if (rng_int(R, 2)) {
            l->nbal = l->pp * l->v;
            for (int i = 0; i < l->nbal; i++) l->balance[i] = 1;
            for (int b = l->nbal; b < k->blocks; b++) l->balance[rng_int(R, l->nbal)]++;
        }
    } else {
        l->layer_ckpt = rng_int(R, 4) == 0;
    }
    l->format = rng_int(R, 3) == 0 ? FSC_CKPT_FULL : FSC_CKPT_SHARDED;
    l->by = rng_int(R, 3);
    l->save_mid = rng_int(R, 3) == 0;
    l->eval_mid = rng_int(R, 3) == 0;
    l->pre_step = rng_int(R, 4) == 0;
}

static void free_layout(layout *l) {
    for (int r = 0; r < 4; r++) fsc_pipe_schedule_free(l->lists[r]);
    memset(l->lists, 0, sizeof l->lists);
}

/* The batch of the evaluations: one no step trains on; the batch of a step before a load. */
#define EVAL_STEP 97
#define PRE_STEP 55

/* What runs step 0 sets the learning rate to LR0_SCALE x the optimizer's before it; nothing sets it later, so a
 * resumed run steps with the rate its checkpoint restored. */
#define LR0_SCALE 0.75f

static fsc_status save_ckpt(fsc_engine *e, const job *j, int64_t step) {
    fsc_ckpt_save_opts so = fsc_ckpt_save_opts_default();
    so.format = j->format;
    return fsc_ckpt_save(e, j->save_dir, step, &so);
}

static fsc_status rank_fn(fsc_rank *rk, void *arg) {
    job *j = arg;
    fsc_engine *e = NULL;
    if (j->llama.cfg.layers) FSC_TRY(fsc_engine_create_built(rk, fsc_llama_build, &j->llama, &j->po, &j->oc, 99, &e));
    else FSC_TRY(fsc_engine_create(rk, &j->cfg, &j->po, &j->oc, 99, &e));
    const fsc_layout *lay = fsc_engine_layout(e);
    const int T = j->llama.cfg.layers ? j->llama.cfg.seq : j->cfg.seq;
    const int V = j->llama.cfg.layers ? j->llama.cfg.vocab : j->cfg.vocab;
    const int B = j->batch, lb = B / lay->dp; /* a tensor group's ranks share their data */
    fsc_status s = FSC_OK;
    int64_t step = -1;
    int32_t *tok = malloc((size_t)lb * T * sizeof(int32_t)), *tgt = malloc((size_t)lb * T * sizeof(int32_t));
    int32_t *etok = malloc((size_t)lb * T * sizeof(int32_t)), *etgt = malloc((size_t)lb * T * sizeof(int32_t));
    if (!tok || !tgt || !etok || !etgt) s = FSC_ERR_NOMEM;
    if (s == FSC_OK && j->pre_step) {
        pt_batch(tok, tgt, PRE_STEP, B, lay->data, lb, T, V);
        s = fsc_engine_set_lr(e, 2 * j->oc.lr);
        if (s == FSC_OK) s = fsc_engine_step_model(e, tok, tgt, lb, B, NULL);
    }
    if (s == FSC_OK && j->load) s = fsc_ckpt_load(e, j->load, &step);
    else if (s == FSC_OK && j->resume_dir && !j->try_resume) s = fsc_ckpt_resume(e, j->resume_dir, &step);
    else if (s == FSC_OK && j->resume_dir) s = fsc_ckpt_try_resume(e, j->resume_dir, &step, NULL, 0, NULL, 0);
    if (rk->rank == 0) j->loaded_step = step;
    if (s == FSC_OK) pt_batch(etok, etgt, EVAL_STEP, B, lay->data, lb, T, V);
    for (int st = j->from; st <= j->to && s == FSC_OK; st++) {
        /* the reference: a checkpoint and an evaluation after every step; the others as they are told to */
        if (j->ref || (j->save_mid && st > j->from && st < j->to)) s = save_ckpt(e, j, st);
        if (s == FSC_OK && (j->ref || j->eval_mid || st == j->to)) {
            s = fsc_engine_eval(e, etok, etgt, lb, B, &j->ev[rk->rank][st]);
            if (rk->rank == 0) j->evaluated[st] = 1; /* every rank evaluates */
        }
        if (st == j->to || s != FSC_OK) break;
        pt_batch(tok, tgt, st, B, lay->data, lb, T, V);
        if (st == 0) s = fsc_engine_set_lr(e, LR0_SCALE * j->oc.lr);
        fsc_step_info info;
        if (s == FSC_OK) s = fsc_engine_step_model(e, tok, tgt, lb, B, &info);
        if (s != FSC_OK) break;
        j->loss[rk->rank][st] = info.loss;
        j->aux[rk->rank][st] = info.aux_loss;
        if (rk->rank == 0) j->assigned[st] = info.moe_assigned, j->dropped[st] = info.moe_dropped;
    }
    free(tok), free(tgt), free(etok), free(etgt);
    if (s == FSC_OK) s = fsc_engine_full_params(e, rk->rank == 0 ? j->params : NULL);
    for (int k = 0; k < nstates(&j->oc) && s == FSC_OK; k++)
        s = fsc_ckpt_full_state(e, k, rk->rank == 0 ? j->state[k] : NULL);
    if (s == FSC_OK && j->save_dir && !j->ref) s = save_ckpt(e, j, j->to);
    if (s == FSC_OK && j->weights) s = fsc_engine_save_weights(e, j->weights);
    fsc_engine_free(e);
    return s;
}

static fsc_status run_job(job *j, int world) {
    const size_t P = num_params(j);
    j->params = calloc(P, sizeof(float));
    j->state[0] = calloc(P, sizeof(float));
    j->state[1] = calloc(P, sizeof(float));
    if (!j->params || !j->state[0] || !j->state[1]) return FSC_ERR_NOMEM;
    fsc_cluster_opts co = fsc_cluster_opts_default();
    co.world = world;
    co.device = "cpu";
    co.timeout_s = 120;
    co.threads_per_rank = 1; /* the BLAS thread count is part of a unit's arithmetic */
    co.stage_through_host = j->stage;
    return fsc_cluster_run(&co, rank_fn, j);
}

static void free_job(job *j) {
    free(j->params);
    free(j->state[0]);
    free(j->state[1]);
    j->params = j->state[0] = j->state[1] = NULL;
}

static char *tmpdir_make(void) {
    const char *base = getenv("TMPDIR");
    char buf[512];
    snprintf(buf, sizeof buf, "%s/fsc-resume-random-XXXXXX", base && *base ? base : "/tmp");
    char *d = mkdtemp(buf);
    if (!d) fail_msg("mkdtemp failed");
    return strdup(d);
}

/* The references: one rank (tp ranks with tensor parallelism), every unit accumulated, STEPS steps
 * uninterrupted, one per model key met (as many as a hunt meets: FSC_RESUME_RANDOM_CASES). */
typedef struct {
    model_key key;
    job ref;
    char dir[600], weights[600]; /* its full checkpoint of every step, its final weights */
} reference_t;
typedef struct {
    reference_t **refs; /* each allocated once, so that the jobs' pointers into them stay valid */
    char *base;         /* the references' temporary directory */
    int nrefs, cap, cases, hops, layouts_run, compared_files;
} state_t;

static int reference(state_t *st, const model_key *k) {
    for (int i = 0; i < st->nrefs; i++)
        if (!memcmp(&st->refs[i]->key, k, sizeof *k)) return i;
    if (st->nrefs == st->cap) {
        const int cap = st->cap ? 2 * st->cap : 64;
        reference_t **grown = realloc(st->refs, (size_t)cap * sizeof *grown);
        if (!grown) fail_msg("out of memory for %d references", cap);
        st->refs = grown, st->cap = cap;
    }
    reference_t *e = calloc(1, sizeof *e);
    if (!e) fail_msg("out of memory for a reference");
    const int i = st->nrefs++;
    st->refs[i] = e;
    e->key = *k;
    job *r = &e->ref;
    snprintf(e->dir, sizeof e->dir, "%s/ref%d", st->base, i);
    snprintf(e->weights, sizeof e->weights, "%s/ref%d.safetensors", st->base, i);
    r->ref = 1;
    r->save_dir = e->dir;
    r->format = FSC_CKPT_FULL;
    r->weights = e->weights;
    r->cfg = model_cfg(k);
    r->llama = llama_cfg(k);
    r->oc = optim_cfg(k);
    r->po = base_opts(k);
    r->po.accum = k->ordered ? k->M : k->batch / k->U;
    r->batch = k->batch;
    if (k->ordered && k->dp > 1) r->po.kind = FSC_PAR_DDP, r->po.ep = k->ep; /* DDP on dp ranks */
    r->U = k->U;
    r->from = 0, r->to = STEPS;
    if (run_job(r, k->tp * (k->ordered ? k->dp : 1)) != FSC_OK)
        fail_msg("the reference (%s): %s", k->ordered ? "DDP" : "one rank", fsc_last_error());
    return i;
}


/* Whether two files hold the same bytes (both missing: yes). */
static int same_file(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = !fa == !fb;
    while (same && fa) {
        const int x = getc(fa), y = getc(fb);
        same = x == y;
        if (x == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

/* A case: its seed and number, what the bits depend on, and its chain of layouts; layout h trains steps
 * [cut[h], cut[h + 1]). */
typedef struct {
    uint64_t seed;
    int c, hops, cut[MAXHOPS + 1];
    model_key k;
    layout ls[MAXHOPS];
} chain;

/* Prints the case (every layout of the chain) to stderr. */
static void print_case(const chain *ch) {
    const model_key *k = &ch->k;
    char d[512], moe[64] = "dense";
    if (k->moe) snprintf(moe, sizeof moe, "MoE (4 experts, top %d, every %d block%s)", k->top_k, k->every,
                         k->every > 1 ? "s" : "");
    char red[96];
    if (k->ordered) snprintf(red, sizeof red, "ordered reduction: DDP's bits on %d ranks, %d micro-batches, ep %d",
                             k->dp, k->M, k->ep);
    else snprintf(red, sizeof red, "exact reduction in units of %d", k->U);
    fprintf(stderr, "case %d of seed 0x%016" PRIx64 ": %s %s of %d blocks, tp %d%s, %s, %s, global batch %d, %s\n",
            ch->c, ch->seed, moe, k->llama ? "Llama" : "GPT", k->blocks, k->tp, k->sp ? " (sequence parallel)" : "",
            k->sgd == 1 ? "SGD with momentum" : k->sgd ? "SGD" : "AdamW",
            k->dtype == 1 ? "bf16" : k->dtype == 2 ? "f16 with loss scaling" : "f32", k->batch, red);
    static const char *const by[] = { "fsc_ckpt_load", "fsc_ckpt_resume", "fsc_ckpt_try_resume" };
    for (int h = 0; h < ch->hops; h++) {
        describe(&ch->ls[h], h < ch->hops - 1, d, sizeof d);
        fprintf(stderr, "  layout %d, steps [%d, %d): %s%s%s\n", h, ch->cut[h], ch->cut[h + 1], d,
                h == 0 ? "" : "; loads by ", h == 0 ? "" : by[ch->ls[h].by]);
    }
}

/* Fails the test naming the case, its layouts and what differs in layout h. */
static void case_fail(const chain *ch, int h, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void case_fail(const chain *ch, int h, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    print_case(ch);
    fail_msg("case %d of seed 0x%016" PRIx64 ", layout %d (steps [%d, %d)): %s", ch->c, ch->seed, h, ch->cut[h],
             ch->cut[h + 1], msg);
}

static void check_file(const chain *ch, int h, const char *mine, const char *theirs) {
    if (!same_file(mine, theirs)) case_fail(ch, h, "%s differs from the uninterrupted run's %s", mine, theirs);
}

/* Layout h's results (j) against the reference's (ref; its files in rdir and rweights; this case's in dir). */
static int check_layout(const chain *ch, int h, const job *j, const job *ref, const char *dir, const char *rdir,
                        const char *weights, const char *rweights) {
    const layout *l = &ch->ls[h];
    const int world = l->dp * l->pp * ch->k.tp;
    if (h > 0 && j->loaded_step != ch->cut[h]) case_fail(ch, h, "loaded step %" PRId64, j->loaded_step);
    for (int s = j->from; s < j->to; s++) {
        for (int r = 0; r < world; r++)
            if (memcmp(&j->loss[r][s], &ref->loss[0][s], sizeof(double)) != 0 ||
                memcmp(&j->aux[r][s], &ref->aux[0][s], sizeof(double)) != 0)
                case_fail(ch, h, "rank %d's loss of step %d is %.17g (aux %.17g), uninterrupted on one rank %.17g "
                          "(aux %.17g)", r, s, j->loss[r][s], j->aux[r][s], ref->loss[0][s], ref->aux[0][s]);
        if (j->assigned[s] != ref->assigned[s] || j->dropped[s] != ref->dropped[s])
            case_fail(ch, h, "step %d assigned %" PRId64 " and dropped %" PRId64 " tokens, one rank %" PRId64 " and "
                      "%" PRId64, s, j->assigned[s], j->dropped[s], ref->assigned[s], ref->dropped[s]);
    }
    for (int b = j->from; b <= j->to; b++)
        for (int r = 0; r < world && j->evaluated[b]; r++)
            if (memcmp(&j->ev[r][b], &ref->ev[0][b], sizeof(double)) != 0)
                case_fail(ch, h, "rank %d's evaluation loss after step %d is %.17g, uninterrupted on one rank %.17g", r,
                          b, j->ev[r][b], ref->ev[0][b]);
    /* a full checkpoint's files and the final weights hold the reference's bytes */
    int files = 0;
    for (int b = j->from + 1; b <= j->to && l->format == FSC_CKPT_FULL; b++) {
        if (b == j->to ? !j->save_dir : !j->save_mid) continue;
        static const char *const names[] = { "model.safetensors", "optim.safetensors" };
        for (int f = 0; f < 2; f++, files++) {
            char mine[800], theirs[800];
            snprintf(mine, sizeof mine, "%s/step-%08d/%s", dir, b, names[f]);
            snprintf(theirs, sizeof theirs, "%s/step-%08d/%s", rdir, b, names[f]);
            check_file(ch, h, mine, theirs);
        }
    }
    if (j->weights) check_file(ch, h, weights, rweights), files++;
    if (h == ch->hops - 1) {
        const size_t P = num_params(ref);
        for (int s = -1; s < nstates(&ref->oc); s++) {
            const float *a = s < 0 ? j->params : j->state[s], *b = s < 0 ? ref->params : ref->state[s];
            for (size_t i = 0; i < P; i++)
                if (memcmp(&a[i], &b[i], sizeof(float)) != 0)
                    case_fail(ch, h, "the final %s, element %zu: %.9g, uninterrupted on one rank %.9g",
                              s < 0 ? "parameters" : s ? "optimizer state 1" : "optimizer state 0", i, (double)a[i],
                              (double)b[i]);
        }
    }
    return files;
}

/* One case: the chain of layouts drawn from seed, against the reference. */
/* Draws case c from seed into ch. */
static void draw_chain(chain *ch, uint64_t seed, int c) {
    rng R = { seed };
    memset(ch, 0, sizeof *ch); /* the key is compared with memcmp */
    ch->seed = seed, ch->c = c;
    model_key *k = &ch->k;
    const int dt = rng_int(&R, 8), opt = rng_int(&R, 8);
    k->batch = rng_int(&R, 2) ? 12 : 8 + 8 * rng_int(&R, 2);
    k->blocks = rng_int(&R, 3) ? 4 : 6;
    k->llama = rng_int(&R, 4) == 0;
    k->moe = rng_int(&R, 3) == 0;
    k->dtype = dt < 5 ? 0 : dt < 7 ? 1 : 2;
    k->U = 1 + (rng_int(&R, 4) == 0);
    k->sgd = opt < 6 ? 0 : opt == 6 ? 1 : 2;
    k->tp = !k->moe && rng_int(&R, 5) == 0 ? 2 : 1; /* MoE models do not run with tensor parallelism */
    k->sp = k->tp > 1 && rng_int(&R, 2);
    if (k->moe) k->top_k = 1 + rng_int(&R, 2), k->every = 1 + rng_int(&R, 2);
    k->ordered = rng_int(&R, 4) == 0;
    const char *mode = getenv("FSC_RESUME_RANDOM_MODE"); /* a hunt of one reduction only */
    if (mode && *mode) k->ordered = !strcmp(mode, "ordered");
    if (k->ordered) { /* dp ranks (at most 8) of M micro-batches each; ep divides dp and the 4 experts */
        int ds[MAXBATCH], nd = divisors(k->batch, ds);
        do k->dp = ds[rng_int(&R, nd)];
        while (k->dp > MAXW);
        nd = divisors(k->batch / k->dp, ds);
        k->M = ds[rng_int(&R, nd)];
        k->ep = 1;
        while (k->moe && k->ep < 4 && k->dp % (2 * k->ep) == 0 && rng_int(&R, 2)) k->ep *= 2;
        k->tp = 1, k->sp = 0, k->U = 0;
    }
    const int hops = ch->hops = 2 + (rng_int(&R, 3) == 0);
    int *cut = ch->cut;
    cut[hops] = STEPS;
    /* the first save after 1 .. STEPS - hops + 1 steps, now and then before any (an untrained engine's) */
    cut[1] = rng_int(&R, 8) == 0 ? 0 : 1 + rng_int(&R, STEPS - hops + 1);
    if (hops == 3) cut[2] = cut[1] + 1 + rng_int(&R, STEPS - 1 - cut[1]);
    for (int h = 0; h < hops; h++) draw_layout(&R, k, &ch->ls[h]);
    ch->ls[0].pre_step = 0;          /* the first layout loads nothing */
    ch->ls[hops - 1].save_mid = 0;   /* the last saves only its weights */
}

static void one_case(state_t *st, uint64_t seed, int c, int verbose) {
    chain ch;
    draw_chain(&ch, seed, c);
    const model_key *k = &ch.k;
    const int hops = ch.hops, *cut = ch.cut;
    if (verbose) print_case(&ch);
    const int ri = reference(st, k);
    const job *ref = &st->refs[ri]->ref;
    char *dir = tmpdir_make(), path[700], weights[700];
    snprintf(weights, sizeof weights, "%s/final.safetensors", dir);
    for (int h = 0; h < hops; h++) {
        const layout *l = &ch.ls[h];
        job j;
        memset(&j, 0, sizeof j);
        j.cfg = ref->cfg;
        j.llama = ref->llama;
        j.oc = ref->oc;
        j.po = layout_opts(k, l);
        j.U = k->U;
        j.batch = k->batch;
        j.from = cut[h], j.to = cut[h + 1];
        j.save_dir = h < hops - 1 ? dir : NULL;
        j.format = l->format;
        j.weights = h == hops - 1 ? weights : NULL;
        snprintf(path, sizeof path, "%s/step-%08d", dir, cut[h]);
        if (h > 0 && l->by) j.resume_dir = dir, j.try_resume = l->by == 2;
        else if (h > 0) j.load = path;
        j.stage = l->stage;
        j.save_mid = l->save_mid;
        j.eval_mid = l->eval_mid;
        j.pre_step = l->pre_step;
        if (run_job(&j, l->dp * l->pp * k->tp) != FSC_OK) case_fail(&ch, h, "%s", fsc_last_error());
        st->layouts_run++;
        st->compared_files += check_layout(&ch, h, &j, ref, dir, st->refs[ri]->dir, weights, st->refs[ri]->weights);
        free_job(&j);
    }
    for (int h = 0; h < hops; h++) free_layout(&ch.ls[h]);
    test_rmtree(dir);
    free(dir);
    st->cases++;
    st->hops += hops - 1;
}

static uint64_t env_u64(const char *name, uint64_t dflt) {
    const char *s = getenv(name);
    return s && *s ? strtoull(s, NULL, 0) : dflt;
}

static void test_resume_random_layouts(void **state) {
    (void)state;
    const uint64_t seed = env_u64("FSC_RESUME_RANDOM_SEED", 0x7e5013e2026ull);
    const int ncases = (int)env_u64("FSC_RESUME_RANDOM_CASES", 16);
    const int verbose = (int)env_u64("FSC_RESUME_RANDOM_VERBOSE", 0);
    static state_t st;
    memset(&st, 0, sizeof st);
    st.base = tmpdir_make();
    /* cases that found bugs, first (their seeds as a failure prints them):
     * - DDP with a bucket per layer inside interleaved stages with checkpointed micro-batches reduced chunk 1's
     *   gradients twice (tests/test_pipe_random.c's test_pipe_ddp_small_buckets_chunks says more) */
    static const uint64_t found[] = { 0x8c938bf24b3b4409ull };
    if (!getenv("FSC_RESUME_RANDOM_ONE") && !getenv("FSC_RESUME_RANDOM_MODE")) /* (MODE would draw others) */
        for (size_t f = 0; f < sizeof found / sizeof found[0]; f++) one_case(&st, found[f], -1 - (int)f, verbose);
    rng R = { seed };
    const uint64_t one = env_u64("FSC_RESUME_RANDOM_ONE", 0); /* one case by its own seed (a failure prints it) */
    for (int c = 0; c < (one ? 1 : ncases); c++) one_case(&st, one ? one : rng_next(&R), c, verbose);
    printf("random resumes: %d cases, %d checkpoints resumed under another layout, %d layouts run, all equal to one "
           "uninterrupted rank; %d files equal to its (seed 0x%016" PRIx64 ")\n", st.cases, st.hops, st.layouts_run,
           st.compared_files, seed);
    test_rmtree(st.base);
    free(st.base);
    for (int i = 0; i < st.nrefs; i++) free_job(&st.refs[i]->ref), free(st.refs[i]);
    free(st.refs);
}

/* ---- the same through the trainer (examples/train_gpt.c): its options, its data order and its --resume ---- */

static char trainer[PATH_MAX], tdir[64];

/* The model, optimizer, precision and reduction of k as trainer options (a constant rate after 2 warmup steps:
 * the rate of a step depends on the step only). */
static char *key_args(const model_key *k) {
    char *model = k->llama ? prog_fmt("--model llama --layers %d --dim 16 --heads 4 --kv-heads 2 --ffn 24 --seq 8",
                                      k->blocks)
                           : prog_fmt("--layers %d --dim 24 --heads 2 --seq %d", k->blocks, k->sp ? 8 : 7);
    char *moe = k->moe ? prog_fmt(" --moe-experts 4 --moe-top-k %d --moe-every %d --moe-capacity 0.75 --moe-aux 0.01",
                                  k->top_k, k->every)
                       : prog_fmt("%s", "");
    char *opt = k->sgd ? prog_fmt("--optimizer sgd --momentum %g --lr 0.05 --weight-decay 0.01",
                                  k->sgd == 1 ? 0.9 : 0.0)
                       : prog_fmt("%s", "--lr 0.01 --weight-decay 0.1");
    char *red = k->ordered ? prog_fmt("%s", "--reduce ordered") : prog_fmt("--reduce exact --unit %d", k->U);
    static const char *const prec[] = { "fp32", "bf16", "fp16" };
    char *a = prog_fmt("%s%s --vocab 128 --batch %d --data '%s/data.txt' %s --lr-schedule constant --warmup 2 "
                       "--clip 0.5 --precision %s %s --tp %d%s --threads 1 --json", model, moe, k->batch, tdir, opt,
                       prec[k->dtype], red, k->tp, k->sp ? " --sequence-parallel" : "");
    free(model), free(moe), free(opt), free(red);
    return a;
}

/* The layout's trainer options (what the trainer has: no custom lists, hybrid group, bucket size, prefetch limit,
 * reshard choice, DDP from rank 0, staging, evaluations or steps before a load: trainer_layout clears those). */
static char *layout_args(const model_key *k, const layout *l) {
    static const char *const scheds[] = { "gpipe", "1f1b", "interleaved", "custom", "zb-h1", "zbv" };
    char wrap[64] = "", bal[64] = "", pipe[160] = "";
    if (l->kind == FSC_PAR_FSDP && l->wrap == FSC_WRAP_MODEL) snprintf(wrap, sizeof wrap, " --wrap model");
    if (l->kind == FSC_PAR_FSDP && l->wrap == FSC_WRAP_MIN_PARAMS)
        snprintf(wrap, sizeof wrap, " --wrap min-params:%zu", l->wrap_min);
    for (int i = 0, n = 0; i < l->nbal; i++)
        n += snprintf(bal + n, sizeof bal - (size_t)n, "%s%d", i ? "," : " --balance ", l->balance[i]);
    if (l->pp > 1)
        snprintf(pipe, sizeof pipe, " --pp %d --schedule %s%s --checkpoint %s%s", l->pp, scheds[l->sched],
                 l->sched == FSC_SCHED_INTERLEAVED ? (l->v == 3 ? " --virtual-stages 3" : " --virtual-stages 2") : "",
                 ckpt_names[l->pipe_ckpt], bal);
    char ep[32] = "";
    if (l->ep > 1) snprintf(ep, sizeof ep, " --ep %d", l->ep);
    return prog_fmt("--world %d --parallel %s%s%s --offload %s --prefetch %d --accum %d%s --recompute %d%s%s%s",
                    l->dp * l->pp * k->tp, kind_names[l->kind],
                    l->kind == FSC_PAR_FSDP ? (const char *[]){ " --shard full", " --shard grad_op", " --shard none",
                                                                " --shard hybrid" }[l->shard] : "",
                    wrap, offload_names[l->offload], l->prefetch, l->accum, ep, l->layer_ckpt, pipe,
                    l->order ? " --order " : "", l->order ? orders[l->order] : "");
}

static void trainer_layout(layout *l) {
    if (l->sched == FSC_SCHED_CUSTOM) l->sched = l->custom_of;
    l->hybrid_group = l->bucket1 = l->prefetch_limit = l->sync0 = l->stage = 0;
    l->eval_mid = l->pre_step = 0;
    l->reshard = -1;
}

/* The losses of a trainer run of `steps` steps (its output's JSON line; a step before its checkpoint is null: NAN
 * here). */
static void run_trainer(const chain *ch, int h, const char *args, int steps, double *loss) {
    char *out = NULL;
    const int rc = prog_run(trainer, args, tdir, &out, NULL);
    if (rc != 0) case_fail(ch, h, "fsc-train %s: exit %d\n%s", args, rc, out);
    cJSON *j = prog_last_json(out);
    prog_doubles(j, "losses", loss, steps, NAN);
    cJSON_Delete(j);
    free(out);
}

static int trainer_case(uint64_t seed, int c, int verbose) {
    chain ch;
    draw_chain(&ch, seed, c);
    const model_key *k = &ch.k;
    if (ch.cut[1] == 0) ch.cut[1] = 1; /* the trainer saves after a step */
    if (ch.hops == 3 && ch.cut[2] == 1) ch.cut[2] = 2;
    for (int h = 0; h < ch.hops; h++) trainer_layout(&ch.ls[h]);
    for (int h = 0; h < ch.hops; h++) ch.ls[h].save_mid = h < ch.hops - 1; /* --save-every 1 */
    if (verbose) print_case(&ch);
    char *ka = key_args(k);
    double ref[STEPS], got[STEPS];
    char *a = k->ordered ? prog_fmt("%s --world %d --parallel %s --accum %d%s --steps %d --save '%s/ref.st'", ka,
                                    k->dp, k->dp > 1 ? "ddp" : "none", k->M,
                                    k->ep > 1 ? (k->ep == 2 ? " --ep 2" : " --ep 4") : "",
                                    STEPS, tdir)
                         : prog_fmt("%s --world %d --accum %d --steps %d --save '%s/ref.st'", ka, k->tp,
                                    k->batch / k->U, STEPS, tdir);
    run_trainer(&ch, 0, a, STEPS, ref);
    free(a);
    for (int h = 0; h < ch.hops; h++) {
        const layout *l = &ch.ls[h];
        char *la = layout_args(k, l), *from = h == 0 ? prog_fmt("%s", "")
                                                     : l->by ? prog_fmt(" --resume '%s/ck'", tdir)
                                                             : prog_fmt(" --resume '%s/ck/step-%08d'", tdir, ch.cut[h]);
        char *save = h < ch.hops - 1 ? prog_fmt(" --save-every 1 --ckpt-dir '%s/ck' --ckpt-format %s", tdir,
                                                l->format == FSC_CKPT_FULL ? "full" : "sharded")
                                     : prog_fmt(" --save '%s/final.st'", tdir);
        a = prog_fmt("%s %s --steps %d%s%s", ka, la, ch.cut[h + 1], from, save);
        run_trainer(&ch, h, a, ch.cut[h + 1], got);
        for (int s = 0; s < ch.cut[h + 1]; s++) {
            const int mine = s >= ch.cut[h] && s < ch.cut[h + 1];
            if (mine ? memcmp(&got[s], &ref[s], sizeof(double)) != 0 : !isnan(got[s]))
                case_fail(&ch, h, "fsc-train %s: the loss of step %d is %.17g, uninterrupted %.17g", a, s, got[s],
                          ref[s]);
        }
        free(la), free(from), free(save), free(a);
    }
    char fin[128], rf[128];
    snprintf(fin, sizeof fin, "%s/final.st", tdir);
    snprintf(rf, sizeof rf, "%s/ref.st", tdir);
    check_file(&ch, ch.hops - 1, fin, rf);
    for (int h = 0; h < ch.hops; h++) free_layout(&ch.ls[h]);
    a = prog_fmt("rm -rf '%s/ck' '%s/final.st' '%s/ref.st'", tdir, tdir, tdir);
    if (system(a) != 0) fail_msg("cannot clean %s", tdir);
    free(a), free(ka);
    return ch.hops - 1;
}

/* A few cases through the trainer (slower: a process per run); FSC_RESUME_RANDOM_TRAINER_CASES for more. */
static void test_resume_random_trainer(void **state) {
    (void)state;
    if (!trainer[0]) skip();
    const uint64_t seed = env_u64("FSC_RESUME_RANDOM_SEED", 0x7e5013e2026ull) ^ 0x7a1e7ull;
    const int ncases = (int)env_u64("FSC_RESUME_RANDOM_TRAINER_CASES", 3);
    const int verbose = (int)env_u64("FSC_RESUME_RANDOM_VERBOSE", 0);
    rng R = { seed };
    int hops = 0;
    for (int c = 0; c < ncases; c++) hops += trainer_case(rng_next(&R), c, verbose);
    printf("random resumes through fsc-train: %d cases, %d --resume under another layout, losses and --save bytes "
           "equal to an uninterrupted run's (seed 0x%016" PRIx64 ")\n", ncases, hops, seed);
}

int main(int argc, char **argv) {
    (void)argc;
    if (prog_setup(argv[0], "test_resume_random", "train_gpt", trainer, sizeof trainer, tdir, sizeof tdir) ||
        prog_write_letters(tdir, "data.txt", 6000))
        trainer[0] = 0; /* the library test runs; the trainer's is skipped, saying so */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resume_random_layouts),
        cmocka_unit_test(test_resume_random_trainer),
    };
    if (getenv("FSC_TEST_FILTER")) cmocka_set_test_filter(getenv("FSC_TEST_FILTER")); /* one test: its name */
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    if (tdir[0] && trainer[0]) {
        char *cmd = prog_fmt("rm -rf '%s'", tdir);
        if (system(cmd) != 0) fprintf(stderr, "test_resume_random: could not remove %s\n", tdir);
        free(cmd);
    }
    return rc;
}
