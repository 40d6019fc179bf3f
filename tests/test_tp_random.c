/* Tensor parallelism composed with everything else, on layouts drawn at random: the promises of
 * docs/tensor_parallel.md and docs/determinism.md checked bit for bit on layouts no fixed test names.
 * A case draws a model (the GPT, whose head is tied to its embedding, or the Llama with grouped-query attention:
 * 6 heads over 2 or 3 kv heads, or 6), its vocabulary (48, or 45 padded to 48), tp 2 or 3, sequence parallelism
 * on or off, f32, bf16 or f16 (loss scaling), AdamW or SGD with momentum, a global batch of 4, 6 or 8, and a
 * layout at that tensor-parallel degree: dp 1 to 4 (dividing the global batch); pp 1 to 4 with a schedule (gpipe, 1f1b, zb-h1, interleaved with 2
 * or 3 chunks, zbv, or a custom list drawn as tests/test_pipe_random.c draws them: loop or V, with W on every,
 * some or no rank), a balance (even or random), a pipeline checkpoint mode; a strategy (DDP with buckets of the
 * default size, one per tensor, or of 1000 or 6000 bytes, sync_from_rank0 or not; ZeRO-1; ZeRO-2; FSDP
 * full_shard, shard_grad_op, no_shard or hybrid_shard, block, model or min-params wrapping, reshard_after_forward
 * by strategy, 0 or 1); prefetch 0 or 1 and its limit; offload (optim with ZeRO and FSDP, all with FSDP); a rank
 * order (any permutation of tp, dp, pp); layer checkpointing; the micro-batch count;
 * no_sync.
 * Oracles, at the case's tp and sp (a different degree gives other bits, docs/determinism.md), bit for bit: every
 * step's loss, gradient norm (the clipping clips) and loss scale on every rank, the final full parameters
 * (fsc_engine_full_params) and the weights file (fsc_engine_save_weights) equal the reference's:
 * - the exact reduction (reduce_exact, units of 1 or 2 sequences): DDP on dp 1 x tp accumulating the global batch,
 *   whatever the data-parallel size, strategy and pipeline;
 * - the ordered reduction: DDP at the same dp x tp, without a pipeline, over the same micro-batches;
 * and after the last step the validation loss of the next batch (fsc_engine_eval) equals the reference's, and in
 * the ordered mode every rank's outputs of its samples (fsc_engine_predict) those of the reference's ranks of its
 * data index;
 * - a resume: the case saves a training checkpoint after its first step (sharded or full format) and a second
 *   layout drawn at the same tp and sp (ordered: also the same dp, micro-batches and no_sync) loads it and trains
 *   the other steps: the oracle's later losses, final parameters and weights file.
 * A failure names the seed of the case and its layouts (FSC_TP_RANDOM_CASE=seed reruns that case alone; the
 * seed's low bits choose tp, the model and the mode). FSC_TP_RANDOM_SEED and FSC_TP_RANDOM_CASES change the seed
 * and the number of cases (longer hunts); the defaults run in the suite.
 * Also: illegal layouts (one illegal choice each on a random layout) are refused with a clear message; and the
 * regression case of the bug the test found (test_ddp_buckets_recomputed_chunk). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include "ckpttest.h"
#include "fsc/llama.h"
#include "fsc/pipe_schedule.h"

#define MAXW 12    /* ranks of a case at most */
#define MAXP 4     /* pipeline ranks */
#define MAXV 3     /* chunks per pipeline rank */
#define MAXM 8     /* micro-batches */
#define STEPS 3
#define LAYERS 6   /* blocks: 6 stages at most (pp 3 x 2 chunks, pp 2 x 3) */
#define MAXGB 8    /* sequences per step: 4 or 8 */
#define SEQ 6
#define VOCAB 48
#define PRED (MAXGB * SEQ * VOCAB) /* a rank's outputs at most */

#include "randlists.h" /* (after MAXP, MAXV and MAXM) */

#define MAXA (3 * MAXV * MAXM)

/* ---- a layout ---- */

typedef struct {
    /* the model and the tensor-parallel degree: fixed for a case */
    int llama, kv_heads, tp, sp, exact;
    int gb;     /* the global batch */
    int dtype;  /* parameters and reductions f32, bf16, f16 (loss scaling) */
    int padded; /* 1: a vocabulary of 45 padded to 48; 2: 45 unpadded (refused with tp 2) */
    int unit;   /* exact: sequences per unit */
    int sgd;    /* SGD with momentum (else AdamW) */
    int moe;    /* experts in every second GPT block (refused with tp) */
    /* the layout */
    int dp, pp, v, m;
    fsc_pipe_schedule sched;
    fsc_pipe_placement pl;
    int nw;                       /* custom: ranks with W */
    fsc_parallel_kind kind;
    fsc_shard_strategy shard;
    int hybrid_group, wrap, bucket, prefetch, offload, layer_ckpt, pipe_ckpt, order, no_sync, full_format;
    int prefetch_limit, reshard, sync0; /* 0 (2), 1 or 3; fsdp: -1 (by strategy), 0 or 1; ddp: sync_from_rank0 */
    int has_balance, balance[MAXP * MAXV];
    fsc_pipe_action acts[MAXP][MAXA];
    int lens[MAXP];
    const fsc_pipe_action *lists[MAXP];
} layout;

static const char *const orders[] = { "tp,dp,pp", "tp,pp,dp", "dp,tp,pp", "dp,pp,tp", "pp,tp,dp", "pp,dp,tp" };
static const char *const sched_names[] = { "gpipe", "1f1b", "interleaved", "custom", "zb-h1", "zbv" };
static const char *const kind_names[] = { "none", "ddp", "fsdp", "zero1", "zero2" };
static const char *const shard_names[] = { "full_shard", "shard_grad_op", "no_shard", "hybrid_shard" };
static const char *const ckpt_names[] = { "except_last", "always", "never" };
static const char *const offload_names[] = { "none", "optim", "all" };

static void describe(const layout *L, char *buf, size_t cap) {
    size_t n = 0;
#define PUT(...) n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, __VA_ARGS__)
    PUT("global batch %d, %s, %s%s, tp %d%s, %s", L->gb, L->sgd ? "sgd" : "adamw", L->llama ? "llama" : "gpt",
        L->padded ? L->padded == 1 ? " (vocabulary padded)" : " (vocabulary 45)" : "", L->tp,
        L->sp ? " sp" : "", L->dtype ? L->dtype == 1 ? "bf16, " : "f16, " : "");
    if (L->exact) PUT("exact in units of %d", L->unit);
    else PUT("ordered");
    PUT(", dp %d x pp %d, %d micro-batches", L->dp, L->pp, L->m);
    if (L->llama) PUT(", %d kv heads", L->kv_heads);
    if (L->pp > 1) {
        PUT(", %s", sched_names[L->sched]);
        if (L->v > 1) PUT(" %d chunks%s", L->v, L->pl == FSC_PIPE_V ? " in a V" : "");
        if (L->sched == FSC_SCHED_CUSTOM) PUT(" (W on %d ranks)", L->nw);
        PUT(", pipe checkpoint %s", ckpt_names[L->pipe_ckpt]);
        if (L->has_balance) {
            PUT(", balance");
            for (int s = 0; s < L->pp * L->v; s++) PUT("%s%d", s ? "," : " ", L->balance[s]);
        }
    }
    PUT(", %s", kind_names[L->kind]);
    if (L->kind == FSC_PAR_FSDP) {
        PUT(" %s", shard_names[L->shard]);
        if (L->shard == FSC_SHARD_HYBRID) PUT(" (groups of %d)", L->hybrid_group);
        PUT(", %s wrap", L->wrap == 2 ? "min params" : L->wrap ? "model" : "block");
        if (L->reshard >= 0) PUT(", reshard_after_forward %d", L->reshard);
    }
    if (L->prefetch_limit) PUT(", prefetch_limit %d", L->prefetch_limit);
    if (L->sync0) PUT(", sync_from_rank0");
    if (L->bucket) PUT(", buckets of %d bytes", L->bucket);
    PUT(", prefetch %d, offload %s, order %s%s%s", L->prefetch, offload_names[L->offload], orders[L->order],
        L->layer_ckpt ? ", layer checkpointing" : "", L->no_sync ? "" : ", no_sync 0");
#undef PUT
}

static void print_lists(const layout *L) {
    if (L->pp < 2 || L->sched != FSC_SCHED_CUSTOM) return;
    for (int r = 0; r < L->pp; r++) {
        fprintf(stderr, "  rank %d:", r);
        for (int i = 0; i < L->lens[r]; i++)
            fprintf(stderr, " %c%d.%d", "FBW"[L->acts[r][i].kind], L->acts[r][i].micro, L->acts[r][i].chunk);
        fprintf(stderr, "\n");
    }
}

/* Draw the layout part of L (its model, tp, sp and mode set); dp and m kept when fix_dp_m (a resume in ordered
 * mode: the oracle is the same run). */
static void draw_layout(layout *L, rng *R, int fix_dp_m) {
    const int tp = L->tp;
    if (!fix_dp_m) {
        do L->dp = 1 + rng_int(R, 4); /* 3: shards of slices that do not divide by it (padded) */
        while (L->gb % L->dp || tp * L->dp > MAXW || (L->exact && (L->gb / L->dp) % L->unit != 0));
    }
    int pps[MAXP], npp = 0;
    for (int pp = 1; pp <= MAXP && pp <= LAYERS; pp++)
        if (tp * L->dp * pp <= MAXW) pps[npp++] = pp;
    L->pp = npp > 1 && rng_int(R, 4) ? pps[1 + rng_int(R, npp - 1)] : 1; /* mostly pipelines */
    if (fix_dp_m && !L->exact && !L->no_sync) L->pp = 1; /* a pipeline reduces once per step */
    const int lb = L->gb / L->dp;
    if (!fix_dp_m) {
        int divs[MAXM], nd = 0;
        for (int d = 1; d <= lb; d++)
            if (lb % d == 0) divs[nd++] = d;
        /* exact with a pipeline: the unit is the pipeline's micro-batch */
        L->m = L->exact && L->pp > 1 ? lb / L->unit : divs[rng_int(R, nd)];
    } else if (L->exact && L->pp > 1) {
        L->m = lb / L->unit;
    }
    L->v = 1, L->pl = FSC_PIPE_LOOP, L->sched = FSC_SCHED_GPIPE, L->nw = 0;
    if (L->pp > 1) {
        fsc_pipe_schedule cands[6];
        int nc = 0;
        cands[nc++] = FSC_SCHED_GPIPE, cands[nc++] = FSC_SCHED_1F1B, cands[nc++] = FSC_SCHED_ZB_H1;
        if (L->m % L->pp == 0 && L->pp * 2 <= LAYERS) cands[nc++] = FSC_SCHED_INTERLEAVED;
        if (L->pp * 2 <= LAYERS) cands[nc++] = FSC_SCHED_ZBV;
        cands[nc++] = FSC_SCHED_CUSTOM;
        L->sched = cands[rng_int(R, nc)];
        if (L->sched == FSC_SCHED_INTERLEAVED) L->v = L->pp * 3 <= LAYERS && rng_int(R, 2) ? 3 : 2;
        if (L->sched == FSC_SCHED_ZBV) L->v = 2;
        if (L->sched == FSC_SCHED_CUSTOM) {
            const int lay = L->pp * 2 <= LAYERS ? rng_int(R, 3) : 0; /* one chunk, chunks in a loop, two in a V */
            L->v = lay == 0 ? 1 : lay == 1 && L->pp * 3 <= LAYERS && rng_int(R, 2) ? 3 : 2;
            L->pl = lay == 2 ? FSC_PIPE_V : FSC_PIPE_LOOP;
            list_spec sp;
            memset(&sp, 0, sizeof sp);
            sp.pl = L->pl, sp.p = L->pp, sp.v = L->v, sp.m = L->m;
            const int wmode = rng_int(R, 3); /* none, every rank, some ranks */
            for (int r = 0; r < L->pp; r++) sp.withw[r] = wmode == 1 ? 1 : wmode == 2 ? rng_int(R, 2) : 0;
            for (int i = 0; i < 3; i++) sp.weight[i] = 1 << (2 * rng_int(R, 3));
            if (generate(&sp, R, L->acts, L->lens) != 0) fail_msg("the list generator found no action to run");
            for (int r = 0; r < L->pp; r++) L->lists[r] = L->acts[r], L->nw += sp.withw[r];
        }
        L->pipe_ckpt = rng_int(R, 3);
        L->has_balance = rng_int(R, 2);
        if (L->has_balance) {
            const int S = L->pp * L->v;
            for (int s = 0; s < S; s++) L->balance[s] = 1;
            for (int b = S; b < LAYERS; b++) L->balance[rng_int(R, S)]++;
        }
    }
    static const fsc_parallel_kind kinds[] = { FSC_PAR_DDP, FSC_PAR_ZERO1, FSC_PAR_ZERO2, FSC_PAR_FSDP };
    L->kind = kinds[rng_int(R, 4)];
    L->shard = FSC_SHARD_FULL, L->hybrid_group = 0, L->wrap = 0, L->bucket = 0, L->reshard = -1, L->sync0 = 0;
    if (L->kind == FSC_PAR_FSDP) {
        L->shard = (fsc_shard_strategy)rng_int(R, L->dp > 1 ? 4 : 3);
        if (L->shard == FSC_SHARD_HYBRID) /* a divisor of dp */
            do L->hybrid_group = 1 + rng_int(R, L->dp);
            while (L->dp % L->hybrid_group);
        L->wrap = rng_int(R, 3);
        L->reshard = rng_int(R, 3) - 1;
    } else {
        static const int buckets[] = { 0, 0, 1, 1000, 6000 }; /* default (one bucket), one per tensor, a few */
        L->bucket = buckets[rng_int(R, 5)];
        L->sync0 = L->kind == FSC_PAR_DDP && rng_int(R, 4) == 0;
    }
    L->prefetch_limit = (int)((0x310u >> (4 * rng_int(R, 3))) & 0xf); /* 0, 1 or 3 */
    L->offload = L->kind == FSC_PAR_DDP ? 0 : rng_int(R, L->kind == FSC_PAR_FSDP ? 3 : 2);
    L->prefetch = L->v > 1 ? 1 : rng_int(R, 2); /* chunks need prefetch */
    L->layer_ckpt = rng_int(R, 3) == 0;
    L->order = rng_int(R, 6);
    /* ordered: no_sync 0 reduces every micro-batch (the reference too); exact: it does not apply */
    if (!fix_dp_m || L->exact) L->no_sync = L->pp == 1 ? rng_int(R, 2) : 1;
    L->full_format = rng_int(R, 2);
}

static fsc_parallel_opts opts_of(const layout *L) {
    fsc_parallel_opts po = fsc_parallel_opts_default();
    po.kind = L->kind, po.shard = L->shard, po.hybrid_group = L->hybrid_group;
    po.wrap = L->wrap == 2 ? FSC_WRAP_MIN_PARAMS : L->wrap ? FSC_WRAP_MODEL : FSC_WRAP_BLOCK;
    po.wrap_min_params = 2000; /* a GPT block holds 7224 / tp parameters and replicated ones */
    po.reshard_after_forward = L->reshard;
    po.prefetch_limit = L->prefetch_limit;
    po.sync_from_rank0 = L->sync0;
    po.accum = L->m, po.no_sync = L->no_sync, po.clip = 0.5f;
    po.bucket_bytes = (size_t)L->bucket;
    po.prefetch = L->prefetch;
    po.offload = (fsc_offload_mode)L->offload;
    po.checkpoint = L->layer_ckpt;
    po.tp = L->tp, po.sequence_parallel = L->sp, po.order = orders[L->order];
    po.reduce_exact = L->exact, po.unit = L->unit; /* 0 in the ordered mode but where refused */
    if (L->dtype) po.param_dtype = po.reduce_dtype = L->dtype == 1 ? FSC_BF16 : FSC_F16;
    po.pp = L->pp;
    if (L->pp > 1) {
        po.schedule = L->sched, po.placement = L->pl, po.pipe_checkpoint = (fsc_pipe_checkpoint)L->pipe_ckpt;
        po.virtual_stages = L->v;
        po.balance = L->has_balance ? L->balance : NULL;
        if (L->sched == FSC_SCHED_CUSTOM) po.actions = L->lists, po.nactions = L->lens;
    }
    return po;
}

/* ---- a run ---- */

typedef struct {
    const layout *L;
    fsc_parallel_opts po;
    fsc_gpt_config gpt;
    fsc_llama_build_arg larg;
    int world, from, to;
    const char *save_dir; /* save a checkpoint after step 1 there */
    const char *load;     /* start from this checkpoint (at step from) */
    const char *weights;  /* write the weights file there after the last step */
    double loss[MAXW][STEPS];
    fsc_step_info info[MAXW][STEPS];
    double eval[MAXW];    /* fsc_engine_eval of the next step's batch after the last step */
    float *pred;          /* (MAXW x PRED) each rank's fsc_engine_predict of its samples of that batch */
    size_t per_sample[MAXW];
    int data[MAXW];       /* each rank's data index */
    float *params;        /* (P) after the last step, rank 0 */
    size_t P;
} job;

static fsc_status job_rank(fsc_rank *r, void *arg) {
    job *j = arg;
    fsc_optim_config oc = { .kind = FSC_OPT_ADAMW, .lr = 1e-2f, .weight_decay = 0.1f, .beta1 = 0.9f,
                            .beta2 = 0.999f, .eps = 1e-8f };
    if (j->L->sgd) oc = (fsc_optim_config){ .kind = FSC_OPT_SGD, .lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f };
    fsc_engine *e = NULL;
    if (j->L->llama) FSC_TRY(fsc_engine_create_built(r, fsc_llama_build, &j->larg, &j->po, &oc, 5, &e));
    else FSC_TRY(fsc_engine_create(r, &j->gpt, &j->po, &oc, 5, &e));
    const fsc_layout *l = fsc_engine_layout(e);
    const int GB = j->L->gb, lb = GB / l->dp;
    int32_t tok[MAXGB * SEQ], tgt[MAXGB * SEQ];
    int64_t at = -1;
    fsc_status s = j->load ? fsc_ckpt_load(e, j->load, &at) : FSC_OK;
    if (s == FSC_OK && j->load && at != j->from)
        s = fsc_error(FSC_ERR_INTERNAL, "the checkpoint is of step %lld, want %d", (long long)at, j->from);
    const int vocab = j->L->padded ? VOCAB - 3 : VOCAB;
    for (int st = j->from; st <= j->to && s == FSC_OK; st++) {
        for (int i = 0; i < lb * SEQ; i++) { /* sequences [data * lb, (data + 1) * lb) of the step's batch */
            const uint64_t x = ((uint64_t)st * GB * SEQ + (uint64_t)l->data * lb * SEQ + (uint64_t)i) *
                               0x9E3779B97F4A7C15ull;
            tok[i] = (int32_t)((x >> 33) % (uint64_t)vocab);
            tgt[i] = (int32_t)(((x >> 13) + (uint64_t)tok[i] * 7) % (uint64_t)vocab);
        }
        if (st == j->to) { /* the validation loss: the step's micro-batches (exact: units and sorted sum) */
            s = fsc_engine_eval(e, tok, tgt, lb, GB, &j->eval[r->rank]);
            if (s == FSC_OK)
                s = fsc_engine_predict(e, tok, lb, j->pred + (size_t)r->rank * PRED, &j->per_sample[r->rank]);
            j->data[r->rank] = l->data;
            break;
        }
        fsc_step_info info;
        s = fsc_engine_step_model(e, tok, tgt, lb, GB, &info);
        if (s == FSC_OK) j->loss[r->rank][st] = info.loss, j->info[r->rank][st] = info;
        if (s == FSC_OK && j->save_dir && st == 0) {
            fsc_ckpt_save_opts so = fsc_ckpt_save_opts_default();
            so.format = j->L->full_format ? FSC_CKPT_FULL : FSC_CKPT_SHARDED;
            s = fsc_ckpt_save(e, j->save_dir, 1, &so);
        }
    }
    if (s == FSC_OK) s = fsc_engine_full_params(e, r->rank == 0 ? j->params : NULL);
    if (s == FSC_OK && j->weights) s = fsc_engine_save_weights(e, j->weights);
    fsc_engine_free(e);
    return s;
}

static job make_job(const layout *L) {
    job j;
    memset(&j, 0, sizeof j);
    j.L = L;
    j.po = opts_of(L);
    const int vocab = L->padded ? VOCAB - 3 : VOCAB, padded = L->padded == 1 ? VOCAB : 0; /* 2: 45 unpadded */
    j.gpt = (fsc_gpt_config){ .layers = LAYERS, .dim = 24, .heads = 6, .seq = SEQ, .vocab = vocab,
                              .padded_vocab = padded };
    j.larg.cfg = (fsc_llama_config){ .layers = LAYERS, .dim = 24, .heads = 6, .kv_heads = L->kv_heads, .ffn = 48,
                                     .seq = SEQ, .vocab = vocab, .rope_theta = 10000.0f, .norm_eps = 1e-5f,
                                     .padded_vocab = padded };
    if (L->moe) j.gpt.moe_experts = 4, j.gpt.moe_top_k = 2, j.gpt.moe_every = 2, j.gpt.moe_capacity = 1.0f;
    j.larg.sp = L->sp;
    j.world = L->dp * L->tp * L->pp;
    j.to = STEPS;
    j.P = L->llama ? fsc_llama_num_params(&j.larg.cfg) : fsc_gpt_num_params(&j.gpt);
    j.params = calloc(j.P, sizeof(float));
    j.pred = calloc((size_t)MAXW * PRED, sizeof(float));
    assert_true(j.params && j.pred);
    return j;
}

static fsc_status run_job(job *j) {
    fsc_cluster_opts co = { .world = j->world, .device = "cpu", .timeout_s = 120, .threads_per_rank = 1 };
    return fsc_cluster_run(&co, job_rank, j);
}

/* ---- the oracles ---- */

typedef struct {
    int gb, llama, kv_heads, tp, sp, exact, dtype, padded, unit, sgd, dp, m, no_sync; /* the key */
    double loss[STEPS], eval;
    fsc_step_info info[STEPS];
    float *params, *pred;
    size_t per_sample[MAXW];
    int data[MAXW], world;
    char *weights;        /* its weights file */
    size_t nweights;
} ref_t;

typedef struct {
    ref_t **refs; /* (nrefs, room for cap) each its own allocation: a case keeps pointers to them */
    int nrefs, cap, cases, runs, resumes;
} state_t;

/* exact: DDP on dp 1 x tp accumulating the global batch in units of 1; ordered: DDP on the case's dp x tp,
 * no pipeline, the same micro-batches */
static const ref_t *reference(state_t *st, const layout *L) {
    layout R;
    memset(&R, 0, sizeof R);
    R.llama = L->llama, R.kv_heads = L->kv_heads, R.tp = L->tp, R.sp = L->sp, R.exact = L->exact;
    R.sgd = L->sgd, R.gb = L->gb, R.dtype = L->dtype, R.padded = L->padded, R.unit = L->unit;
    R.dp = L->exact ? 1 : L->dp, R.m = L->exact ? L->gb / L->unit : L->m;
    R.pp = 1, R.v = 1, R.kind = FSC_PAR_DDP, R.no_sync = L->exact ? 1 : L->no_sync, R.prefetch = 1;
    for (int i = 0; i < st->nrefs; i++) {
        const ref_t *f = st->refs[i];
        if (f->gb == R.gb && f->sgd == R.sgd && f->llama == R.llama && f->kv_heads == R.kv_heads && f->tp == R.tp &&
            f->sp == R.sp &&
            f->exact == R.exact && f->dtype == R.dtype && f->padded == R.padded && f->unit == R.unit &&
            f->dp == R.dp && f->m == R.m && f->no_sync == R.no_sync)
            return f;
    }
    if (st->nrefs == st->cap) { /* long hunts (FSC_TP_RANDOM_CASES) keep every reference they made */
        st->cap = st->cap ? 2 * st->cap : 64;
        st->refs = realloc(st->refs, (size_t)st->cap * sizeof *st->refs);
        assert_non_null(st->refs);
    }
    job j = make_job(&R);
    char what[512], *dir = ct_tmpdir(), file[600];
    snprintf(file, sizeof file, "%s/ref.safetensors", dir);
    j.weights = file;
    describe(&R, what, sizeof what);
    if (run_job(&j) != FSC_OK) fail_msg("the reference (%s): %s", what, fsc_last_error());
    for (int s = 0; s < STEPS; s++)
        for (int r = 1; r < j.world; r++)
            if (memcmp(&j.loss[0][s], &j.loss[r][s], sizeof(double)) != 0)
                fail_msg("the reference (%s): ranks 0 and %d give other losses at step %d", what, r, s);
    ref_t *f = st->refs[st->nrefs++] = calloc(1, sizeof *f);
    assert_non_null(f);
    f->llama = R.llama, f->kv_heads = R.kv_heads, f->tp = R.tp, f->sp = R.sp, f->exact = R.exact;
    f->sgd = R.sgd, f->gb = R.gb, f->dtype = R.dtype, f->padded = R.padded, f->unit = R.unit, f->dp = R.dp;
    f->m = R.m, f->no_sync = R.no_sync;
    memcpy(f->loss, j.loss[0], sizeof f->loss);
    memcpy(f->info, j.info[0], sizeof f->info);
    if (!(f->info[0].grad_norm > 0.5)) fail_msg("the reference (%s): the clipping does not clip", what);
    f->eval = j.eval[0];
    f->weights = ct_slurp(file, &f->nweights);
    if (!f->weights || !f->nweights) fail_msg("the reference (%s) wrote no weights file", what);
    ct_rmtree(dir);
    f->params = j.params;
    f->pred = j.pred; /* by world rank: DDP without a pipeline, tensor fastest (the order's default) */
    memcpy(f->per_sample, j.per_sample, sizeof f->per_sample);
    memcpy(f->data, j.data, sizeof f->data);
    f->world = j.world;
    return f;
}

/* The run's losses of steps [from, STEPS) on every rank, its final parameters and weights file against the
 * reference's. */
static void check(const ref_t *ref, const job *j, const char *what) {
    /* the ordered mode (the same micro-batches as the reference): every rank's outputs of its samples (predict) are
     * those of the reference's ranks of its data index */
    for (int r = 0; !ref->exact && r < j->world; r++)
        for (int q = 0; q < ref->world; q++) {
            if (ref->data[q] != j->data[r]) continue;
            const size_t n = (size_t)(j->L->gb / j->L->dp) * ref->per_sample[q];
            if (j->per_sample[r] != ref->per_sample[q])
                fail_msg("%s: rank %d predicts %zu floats a sample, the reference %zu", what, r, j->per_sample[r],
                         ref->per_sample[q]);
            char m[1600];
            snprintf(m, sizeof m, "%s: rank %d's outputs (predict) against the reference's rank %d", what, r, q);
            assert_bits_equal(ref->pred + (size_t)q * PRED, j->pred + (size_t)r * PRED, n, m);
        }
    size_t n = 0;
    char *w = ct_slurp(j->weights, &n);
    if (!w || n != ref->nweights || memcmp(w, ref->weights, n) != 0)
        fail_msg("%s: the weights file (%zu bytes) is not the reference's (%zu bytes)", what, n, ref->nweights);
    free(w);
    for (int s = j->from; s < STEPS; s++)
        for (int r = 0; r < j->world; r++)
            if (memcmp(&ref->loss[s], &j->loss[r][s], sizeof(double)) != 0)
                fail_msg("%s: loss of step %d on rank %d differs: %.17g vs the reference's %.17g", what, s, r,
                         j->loss[r][s], ref->loss[s]);
    for (int s = j->from; s < STEPS; s++) /* the clipping norm and the loss scaler (f16) */
        for (int r = 0; r < j->world; r++) {
            const fsc_step_info *a = &j->info[r][s], *b = &ref->info[s];
            if (memcmp(&a->grad_norm, &b->grad_norm, sizeof(double)) != 0 || a->skipped != b->skipped ||
                memcmp(&a->loss_scale, &b->loss_scale, sizeof(float)) != 0)
                fail_msg("%s: step %d on rank %d: gradient norm %.17g, skipped %d, loss scale %g; the reference's "
                         "%.17g, %d, %g", what, s, r, a->grad_norm, a->skipped, (double)a->loss_scale, b->grad_norm,
                         b->skipped, (double)b->loss_scale);
        }
    for (int r = 0; r < j->world; r++)
        if (memcmp(&ref->eval, &j->eval[r], sizeof(double)) != 0)
            fail_msg("%s: the validation loss on rank %d differs: %.17g vs the reference's %.17g", what, r,
                     j->eval[r], ref->eval);
    assert_bits_equal(ref->params, j->params, j->P, what);
}

static uint64_t env_u64(const char *name, uint64_t dflt) {
    const char *s = getenv(name);
    return s && *s ? strtoull(s, NULL, 0) : dflt;
}

/* Train A against its oracle, saving after step 1; B resumes from there: the oracle's later steps. */
static void run_pair(state_t *st, uint64_t seed, const layout *pA, const layout *pB) {
    const layout A = *pA, B = *pB;
    char wa[600], wb[600], what[1400];
    describe(&A, wa, sizeof wa);
    describe(&B, wb, sizeof wb);
    const ref_t *ref = reference(st, &A);
    char *dir = ct_tmpdir();
    char wfile[600];
    snprintf(wfile, sizeof wfile, "%s/weights.safetensors", dir);
    job a = make_job(&A);
    a.save_dir = dir, a.weights = wfile;
    snprintf(what, sizeof what, "case 0x%016" PRIx64 ": %s", seed, wa);
    if (getenv("FSC_TEST_VERBOSE")) fprintf(stderr, "%s\n  resumed by %s\n", what, wb);
    if (run_job(&a) != FSC_OK) {
        print_lists(&A);
        fail_msg("%s: %s", what, fsc_last_error());
    }
    check(ref, &a, what);
    st->runs++;
    /* the resume under B */
    char path[1024];
    ct_step_path(path, sizeof path, dir, 1);
    job b = make_job(&B);
    b.from = 1, b.load = path, b.weights = wfile;
    snprintf(what, sizeof what, "case 0x%016" PRIx64 ": saved by %s (%s format), resumed by %s", seed, wa,
             A.full_format ? "full" : "sharded", wb);
    if (run_job(&b) != FSC_OK) {
        print_lists(&B);
        fail_msg("%s: %s", what, fsc_last_error());
    }
    check(ref, &b, what);
    st->resumes++;
    free(a.params), free(b.params), free(a.pred), free(b.pred);
    ct_rmtree(dir);
    st->cases++;
}

/* One case: a model, tp, sp and mode; a layout trained against its oracle, and a second layout resuming the
 * first one's checkpoint of step 1. The seed's low bits choose tp (bit 0: 2 or 3), the model (bit 1: GPT or
 * Llama) and the mode (bit 2: ordered or exact), so that the default run can cover each. */
static void draw_case(uint64_t seed, layout *A, layout *B) {
    rng R = { seed };
    memset(A, 0, sizeof *A);
    A->tp = 2 + (int)(seed & 1);
    A->llama = (int)(seed >> 1) & 1;
    A->exact = (int)(seed >> 2) & 1;
    A->kv_heads = rng_int(&R, 2) ? A->tp : 6; /* 6 heads: grouped-query attention with tp kv heads */
    A->sp = rng_int(&R, 2);
    static const int gbs[] = { 4, 4, 6, 8 };
    A->gb = gbs[rng_int(&R, 4)];
    A->sgd = rng_int(&R, 4) == 0;
    const int dt = rng_int(&R, 8);
    A->dtype = dt < 5 ? 0 : dt < 7 ? 1 : 2;
    A->padded = rng_int(&R, 3) == 0;
    A->unit = A->exact ? 1 + (rng_int(&R, 3) == 0) : 0;
    draw_layout(A, &R, 0);
    *B = *A;
    draw_layout(B, &R, !A->exact);
}

static void one_case(state_t *st, uint64_t seed) {
    static layout A, B; /* large (the lists) */
    draw_case(seed, &A, &B);
    run_pair(st, seed, &A, &B);
}

/* A layout of the GPT written out: dp x pp with DDP, the rest of draw_layout's defaults. */
static layout fixed_layout(int tp, int sp, int dp, int pp, int m) {
    layout L;
    memset(&L, 0, sizeof L);
    L.gb = 4, L.tp = tp, L.sp = sp, L.dp = dp, L.pp = pp, L.m = m, L.v = 1, L.kind = FSC_PAR_DDP, L.no_sync = 1;
    L.prefetch = 1, L.reshard = -1;
    return L;
}

/* Found by the test below: DDP with chunks (interleaved stages, zbv, a custom V) and a checkpointed last
 * micro-batch (pipe_checkpoint always), reducing in buckets smaller than a chunk. A rank's last backwards run its
 * later chunk first, whose buckets reduce as they fill; the recomputed forward of chunk 0, which begins at the
 * rank's first layer, reset the pending range to "everything after", so chunk 0's last bucket reduced chunk 1's
 * gradients a second time (the sum over the data group of a sum). DDP now clears the pending range where a
 * reduction ends (its backward's last layer), not in the forward hook. dp 2 x pp 2 at tp 1 and tp 2 (sp): zbv
 * with one micro-batch, interleaved and a custom V with two: the bits of DDP without the pipeline. */
static void test_ddp_buckets_recomputed_chunk(void **state) {
    (void)state;
    static state_t st;
    memset(&st, 0, sizeof st);
    static layout A, B;
    for (int c = 0; c < 6; c++) {
        const int tp = c % 2 ? 2 : 1;
        A = fixed_layout(tp, tp > 1, 2, 2, c < 2 ? 1 : 2);
        A.bucket = 1, A.pipe_ckpt = FSC_PIPE_CKPT_ALWAYS, A.v = 2;
        A.sched = c < 2 ? FSC_SCHED_ZBV : FSC_SCHED_INTERLEAVED;
        if (c >= 4) { /* a custom V without W: each rank F0.0 F1.0 F0.1 F1.1 B0.1 B1.1 B0.0 B1.0 */
            A.sched = FSC_SCHED_CUSTOM, A.pl = FSC_PIPE_V;
            for (int r = 0; r < 2; r++) {
                int n = 0;
                for (int k = 0; k < A.m; k++) A.acts[r][n++] = (fsc_pipe_action){ FSC_ACT_FORWARD, k, 0 };
                for (int k = 0; k < A.m; k++) A.acts[r][n++] = (fsc_pipe_action){ FSC_ACT_FORWARD, k, 1 };
                for (int k = 0; k < A.m; k++) A.acts[r][n++] = (fsc_pipe_action){ FSC_ACT_BACKWARD, k, 1 };
                for (int k = 0; k < A.m; k++) A.acts[r][n++] = (fsc_pipe_action){ FSC_ACT_BACKWARD, k, 0 };
                A.lens[r] = n, A.lists[r] = A.acts[r];
            }
        }
        B = A;
        B.pipe_ckpt = FSC_PIPE_CKPT_NEVER;
        run_pair(&st, (uint64_t)c, &A, &B);
    }
    for (int i = 0; i < st.nrefs; i++)
        free(st.refs[i]->params), free(st.refs[i]->weights), free(st.refs[i]->pred), free(st.refs[i]);
    free(st.refs);
}

static void test_tp_random_layouts(void **state) {
    (void)state;
    static state_t st;
    memset(&st, 0, sizeof st);
    const uint64_t one = env_u64("FSC_TP_RANDOM_CASE", 0);
    const uint64_t seed = env_u64("FSC_TP_RANDOM_SEED", 0x7e45021aull);
    const int ncases = (int)env_u64("FSC_TP_RANDOM_CASES", 12);
    if (one) {
        one_case(&st, one);
    } else {
        rng R = { seed };
        for (int c = 0; c < ncases; c++) { /* the first 8: each tp, model and mode */
            const uint64_t x = rng_next(&R);
            one_case(&st, c < 8 ? (x & ~7ull) | (uint64_t)c : x);
        }
    }
    printf("random tensor-parallel layouts: %d cases, %d runs and %d resumes equal to their oracles, %d references "
           "(seed 0x%016" PRIx64 ")\n", st.cases, st.runs, st.resumes, st.nrefs, one ? one : seed);
    for (int i = 0; i < st.nrefs; i++)
        free(st.refs[i]->params), free(st.refs[i]->weights), free(st.refs[i]->pred), free(st.refs[i]);
    free(st.refs);
}

/* What the engine refuses, on random layouts made illegal one way each: every refusal a clear error naming the
 * problem (a crash, a hang or an unclear message would be a bug). */
typedef struct {
    const char *what, *needle;
} refusal;

static const refusal refusals[] = {
    { "offload optim with ddp", "runs with fsdp, zero1 or zero2, not ddp" },
    { "offload all with zero", "offload all runs with fsdp only" },
    { "interleaved chunks without prefetch", "need prefetch 1" },
    { "interleaved with micro-batches not a multiple of pp", "multiple of" },
    { "a Llama whose kv heads do not divide by tp", "kv_heads = 3 does not divide over a tensor group of 2" },
    { "a vocabulary that does not divide by tp", "vocabulary" },
    { "an MoE GPT with tp", "MoE" },
    { "the exact reduction in a pipeline, a unit not the micro-batch", "the unit is the pipeline's micro-batch" },
    { "gpipe with 2 virtual stages", "virtual_stages 2" },
    { "a balance with too few blocks", "balance sums to" },
    { "hybrid_shard groups that do not divide dp", "does not divide the data group" },
    { "heads that do not divide by tp 4", "over a tensor group of 4" },
    { "placement V under a built-in schedule", "placement V" },
    { "a unit in the ordered mode", "applies to the exact reduction" },
};

static void make_illegal(layout *L, int k) {
    const int pipe = k == 2 || k == 3 || k == 7 || k == 8 || k == 9 || k == 12;
    if (pipe) { /* dp 1 x pp 2, one chunk, gpipe, two micro-batches */
        L->dp = 1, L->pp = 2, L->v = 1, L->m = 2, L->sched = FSC_SCHED_GPIPE, L->pl = FSC_PIPE_LOOP;
        L->has_balance = 0, L->layer_ckpt = 0, L->no_sync = 1, L->prefetch = 1;
        if (L->exact) L->unit = L->gb / 2;
    }
    switch (k) {
    case 0: L->kind = FSC_PAR_DDP, L->offload = FSC_OFFLOAD_OPTIM; break;
    case 1: L->kind = L->kind == FSC_PAR_ZERO1 ? FSC_PAR_ZERO1 : FSC_PAR_ZERO2, L->offload = FSC_OFFLOAD_ALL; break;
    case 2: L->sched = FSC_SCHED_INTERLEAVED, L->v = 2, L->prefetch = 0; break;
    case 3: L->sched = FSC_SCHED_INTERLEAVED, L->v = 2, L->m = 1, L->exact = 0, L->unit = 0; break;
    case 4: L->llama = 1, L->tp = 2, L->sp = 0, L->kv_heads = 3; break;
    case 5: L->padded = 2, L->tp = 2, L->llama = 0; break; /* 45 rows over 2 */
    case 6: L->llama = 0, L->moe = 1; break;
    case 7: L->exact = 1, L->unit = 1; break;
    case 8: L->v = 2; break;
    case 9: L->has_balance = 1, L->balance[0] = L->balance[1] = 1; break;
    case 10:
        L->dp = 4, L->tp = 2, L->kv_heads = 6, L->pp = 1, L->m = 1, L->kind = FSC_PAR_FSDP, L->shard = FSC_SHARD_HYBRID;
        L->hybrid_group = 3, L->exact = 0, L->unit = 0, L->no_sync = 1;
        break;
    case 11: L->tp = 4, L->sp = 0, L->dp = 1, L->pp = 1, L->kv_heads = 6; break;
    case 12: L->pl = FSC_PIPE_V, L->v = 2; break;
    default: L->exact = 0, L->unit = 2; break;
    }
    if (k != 10 && L->kind == FSC_PAR_FSDP && L->shard == FSC_SHARD_HYBRID && L->dp % L->hybrid_group)
        L->hybrid_group = 1; /* legal again where dp changed: only the case's one illegal choice */
}

static void test_tp_random_refusals(void **state) {
    (void)state;
    static layout A, B;
    rng R = { env_u64("FSC_TP_RANDOM_SEED", 0x7e45021aull) ^ 0x5555 };
    const int n = (int)(sizeof refusals / sizeof refusals[0]);
    for (int k = 0; k < n; k++) {
        const uint64_t seed = rng_next(&R);
        draw_case(seed, &A, &B);
        make_illegal(&A, k);
        char w[600];
        describe(&A, w, sizeof w);
        job j = make_job(&A);
        j.to = 1;
        const fsc_status s = run_job(&j);
        if (s == FSC_OK) fail_msg("%s (case 0x%016" PRIx64 ": %s) was not refused", refusals[k].what, seed, w);
        if (s != FSC_ERR_INVALID && s != FSC_ERR_UNSUPPORTED)
            fail_msg("%s (case 0x%016" PRIx64 ": %s): %s, not a refusal: %s", refusals[k].what, seed, w,
                     fsc_status_str(s), fsc_last_error());
        if (!strstr(fsc_last_error(), refusals[k].needle))
            fail_msg("%s (case 0x%016" PRIx64 ": %s): the message \"%s\" lacks \"%s\"", refusals[k].what, seed, w,
                     fsc_last_error(), refusals[k].needle);
        if (getenv("FSC_TEST_VERBOSE")) fprintf(stderr, "%s: %s\n", refusals[k].what, fsc_last_error());
        free(j.params), free(j.pred);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ddp_buckets_recomputed_chunk),
        cmocka_unit_test(test_tp_random_layouts),
        cmocka_unit_test(test_tp_random_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
