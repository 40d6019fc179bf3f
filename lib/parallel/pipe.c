/* Pipeline parallelism: a model (model.h) cut into stages by a balance (blocks per stage: the layers between
 * the first and the last; the first runs on stage 0, the last on the last stage), one stage per rank of a
 * pipeline group; micro-batches flow forward and their gradients backward over send/recv; the step's runner
 * (step.c) executes this rank's list of actions of the schedule (pipe_sched.c makes and validates them)
 * through this file's executor (fsc_pipe_exec): each F, B and W receives its boundary, runs the step's compute
 * of its kind on the chunk's record (step_compute.c, the whole model's too), sends its boundary, and keeps or
 * gives back the record; checkpoint modes; any data-parallel strategy (DDP, FSDP, ZeRO) inside each stage's
 * group.
 * Interleaved stages (po.virtual_stages v > 1): pp x v stages, rank r runs the chunks (stages) r, r + pp, ...; a
 * record, a slot and a pool of records belong to one chunk (a chunk that needs a record while its pool is empty
 * frees another chunk's idle one first, so the pools hold no more than the schedule does at once), the last rank's chunk c hands its output to the
 * first rank's chunk c + 1 over the wrap-around link (pipe_link.c), and the engine holds only the layers of
 * this rank's chunks (fsc_pipe_runs_layer; e->lf..e->ll is their span). A V (zbv, or a custom schedule with
 * placement V; two chunks): rank r runs
 * stages r and 2 pp - 1 - r; chunk 1's messages travel on links of their own split in reverse rank order
 * (lk2), the last rank hands chunk 0's output to its chunk 1 (and the gradient back) through a buffer
 * (lout, lgrad), and a tied tensor whose owner and user are both on rank 0 keeps the user's gradient of each
 * micro-batch until the owner's backward of it (lt, ltg). Below, "stage" in the messages' table means a rank;
 * with chunks every action sends and receives as its stage would.
 *
 * Layout (the engine's fsc_layout; Megatron's by default): world = dp x tp x pp, without tensor parallelism
 * rank = stage * dp + dp_index, data-parallel ranks adjacent. The pipeline group holds the ranks of one
 * (dp_index, tensor rank), ordered by stage, the data group the ranks of one (stage, tensor rank) (e->comm:
 * the strategy reduces over it). For a language model stage 0 runs the embedding and its blocks, the last
 * stage its blocks and the head. With tensor parallelism (tensor.c) every stage runs its layers of
 * the model of this rank's slices: boundary activations (a sequence shard under sequence parallelism), tied
 * slices and their gradients travel between the same tensor rank of two stages; the model's operations hide
 * which model runs.
 *
 * Equality with DDP (accum = M, no_sync): every stage runs its layers with the same kernels on the same
 * inputs; backward goes through the micro-batches in ascending order on every stage, so each gradient
 * accumulates in the same order; the strategy reduces once, in the last micro-batch's backward. Tied tensors
 * (model.h; a tied embedding, owned by the embedding layer and used by the head) whose users run on another stage than
 * their owner: the user stage sends the tied gradient of micro-batch k (m->tied_grad[i]) to the owner stage,
 * which puts it in its tied_grad[i] before its backward of k (the owner's backward adds it first, as on one
 * rank). The owner stage sends the values it computes with (its compute copy: rounded when param_dtype is not
 * f32) to the user stage's replica (e->tied_copy[i]) once per step, right after their first use (the owner
 * layer's first forward). This equals sending after the optimizer step, works unchanged for every strategy
 * and after loading weights. The users must come after the owner and run on one stage. The values' hand-offs
 * are the pipeline's part of the engine's forward hooks (fsc_pipe_pre_forward, fsc_pipe_post_forward).
 *
 * Messages between two ranks keep their order (sends are buffered, FIFO per peer; on a communicator whose sends
 * wait for their receive, NCCL's, the boundaries always travel as with po.prefetch, and no send is waited for
 * mid-step but an output's before its backward: pipe_link.c and pipe_tied.c). With po.prefetch the outputs and
 * input gradients travel on a communicator per link and direction, their receives posted ahead, and the
 * sends are asynchronous, a checkpointed output's from a copy in a ring of send buffers (bounded by
 * po.prefetch_limit; where sends wait it grows instead; pipe_link.c says why this cannot deadlock); a tied tensor's values and gradients travel on two communicators of their own, the
 * user's receive of the values waited for where the first user layer reads them, the owner's receive of each
 * gradient posted a micro-batch ahead (pipe_tied.c); the pipeline group then carries none of these:
 *   owner -> user     a tied tensor, once per step, before the owner's output of micro-batch 0
 *   s -> s+1          output of micro-batch k (forward)
 *   s+1 -> s          gradient w.r.t. the input of micro-batch k (backward)
 *   user -> owner     a tied tensor's gradient of micro-batch k, after the gradient of k
 *
 * W actions (zero-bubble schedules): a B runs the model's backward_input and keeps the record, the
 * W of the same micro-batch later runs backward_weight and gives it back; the strategy reduces in the last W (the
 * exact reduction in every B and W: each holds a term). A record's bytes (acts_bytes) may grow in its B (the
 * sequential model's split area) and shrink back in its W: the count follows. Where no tied tensor crosses ranks (a
 * V: the owner and user chunks on rank 0) the tied layers split too (split_tied): the user's W of k makes the tied
 * gradient, kept on the rank until the owner's W of k adds it; a tied tensor between two ranks keeps the B path
 * (tied_split_ok).
 *
 * Checkpointing (FairScale's): a checkpointed micro-batch keeps only its stage input (stage 0: its
 * inputs, in the caller's host memory) and runs the whole stage forward again just before its backward.
 * Full records come from pools (saved inputs are made and released), so the device ledger's FSC_TAG_ACTS peak
 * is the most the schedule held at once.
 * Not here: balance helpers (pipe_balance.c), the schedules' action lists and their validator (pipe_sched.c), the
 * loop over the actions with their trace spans (step.c), the compute of an action: the batch, the model's forward
 * or backward with the engine's hooks, the loss, unit losses, outputs and MoE statistics (step_compute.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "pipe.h"
#include "core/clock_impl.h"
#include "core/comm_impl.h"
#include "fsc/pipe_schedule.h"

typedef struct {
    fsc_model_acts *rec; /* full record, NULL while checkpointed */
    float *saved;        /* checkpointed on a stage > 0: the stage input (stream_floats(B)) */
    int ckpt;
    fsc_comm_req *send;  /* po.prefetch: the send of the stage output in flight, waited for before the record
                          * is reused or its backward runs (docs/overlap.md) */
    fsc_comm_req *gsend; /* split: B's send of the input gradient, its record kept until W */
} mb_slot;

struct fsc_pipe {
    int pp, dp, stage, dpi;
    int v, S;                 /* chunks per rank, stages (pp x v): chunk c of this rank is stage_at(p, c) */
    fsc_pipe_placement pl;    /* loop (chunk c is stage c pp + stage) or V (zbv, custom: stage, then 2 pp - 1 - stage) */
    int *lf, *ll;             /* (S) layer range of every stage */
    fsc_comm *pipe_comm;      /* the ranks of this dp_index, by stage (the engine's) */
    int async;                /* boundaries on links (pipe_link.c, pipe_tied.c): po.prefetch, or sends that wait */
    char out_of_step[320];    /* an action of this rank failed (its message), so a boundary message of that step may
                               * be left unread where its peer sent it: a later step would take it for its own (its
                               * neighbours' lists ran on). Every later step or evaluation is refused ("" none) */
    fsc_comm *data_comm;      /* the ranks of this stage, by dp_index (e->comm, the engine's) */
    /* pools of records (one per chunk: a record covers its chunk's layers) not in use, kept allocated between
     * steps (saved inputs and a V's turn buffers are made and released: take_in) */
    int B;
    fsc_model_acts **recs;    /* (v, M + 2) */
    int *nrecs;               /* (v) */
    int full_in_use, in_flight;
    size_t bytes_in_use;
    mb_slot *slots;           /* (v, M): chunk c's micro-batch k at c M + k */
    int M;
    /* po.prefetch: records whose input gradient's send is in flight (their bytes already given back), back
     * to the pool (recs) once waited for: before the pool hands out a record, and at the end of a step */
    fsc_model_acts **gp_rec;
    fsc_comm_req **gp_req;    /* (v (M + 2)) */
    int *gp_chunk;            /* (v (M + 2)) the chunk (pool) of gp_rec[i] */
    int ngp;
    fsc_pipe_links lk;        /* po.prefetch: the links and the receives posted ahead (pipe_link.c) */
    fsc_pipe_links lk2;       /* a V: the links of chunk 1, whose micro-batches go from rank r + 1 to rank r */
    float **lout, **lgrad;    /* (M) a V's last rank: the output of micro-batch k's chunk 0 for its chunk 1, the
                               * input gradient of its chunk 1 for its chunk 0 (in_floats each, take_in) */
    /* tied tensors whose owner and users are two chunks of this rank (a V's first rank holds the first and the
     * last stage): tensor, owner chunk, user chunk; the user's gradient of micro-batch k waits in ltg[x M + k]
     * (from ltg_free, numel floats each) until the owner's backward of k */
    int nlt;
    int (*lt)[3];
    float **ltg, **ltg_free;
    int nltg_free;
    /* tied tensors whose owner and users run on different ranks: tensor, owner rank, user rank, and the chunks
     * of those ranks that hold the owner and the users */
    int ntied;
    int (*tied)[5];
    fsc_pipe_tied *tl;        /* (ntied) po.prefetch: their streams (pipe_tied.c); a user stage's send of a tied
                               * gradient is waited for before its next backward overwrites the buffer */
    /* the step */
    int chunk;                /* the chunk whose forward or backward runs */
    int in_left[2], grad_left[2]; /* po.prefetch: inputs and output gradients still to receive in this step, on
                                   * lk and lk2 */
    unsigned char *send_tied; /* (v) owner rank: chunk c's next forward sends the tied tensors it owns */
    int recompute;            /* a checkpointed forward runs again */
    double wait;              /* seconds waited in this step */
    double t0, run_s;         /* the step's start (after the common barrier), the seconds its actions took */
    fsc_pipe_stats st;
    fsc_pipe_aux *aux;        /* the micro-batches' auxiliary statistics (pipe_stats.c), NULL without them */
    fsc_pipe_action *acts;    /* (nacts) this rank's actions of a step, validated with every rank's (pipe_sched.c) */
    int nacts;
    int split;                /* this rank's list has W and the model splits its backward (model.h): B runs the
                               * input part, W the weight part, and a record lives from its F to its W */
    int any_w;                /* some rank's list has W: the schedule's formula (ideal_bubble), one for every
                               * stage, as the planner's, though a custom list may have W on some ranks only */
    int split_tied;           /* split, and the layers with tied tensors split too (model.h's split_tied): only
                               * where every tied tensor's owner and users are on this rank or none (a V's first
                               * rank) and each user chunk's W of micro-batch k comes before the owner chunk's;
                               * the user's gradient of k then waits from the one W to the other */
    /* what the last stage's compute (step_compute.c) keeps, handed to the step in exec_begin (eval_begin) */
    double *unit_loss;        /* reduce_exact (exact.c): each micro-batch's loss (c->units), or NULL */
    float *outputs;           /* fsc_engine_predict: each micro-batch's outputs (c->out), downloaded */
    size_t *per_sample;       /* (host) and their floats per sample here; NULL: none */
    fsc_status out_status;    /* the last stage: the first failure to take them (the pass's c->out_status, kept at
                               * its end; the other stages learn it from fsc_pipe_outputs_from_last, so that none
                               * waits for outputs that never come) */
    char out_why[256];
};

int fsc_pipe_stages(const fsc_parallel_opts *po) { return po->pp > 1 ? po->pp : 1; }

fsc_pipe_placement fsc_pipe_placement_of(const fsc_parallel_opts *po) {
    return po->schedule == FSC_SCHED_CUSTOM ? po->placement : fsc_pipe_schedule_placement(po->schedule);
}

int fsc_pipe_chunks(const fsc_parallel_opts *po) {
    if (fsc_pipe_placement_of(po) == FSC_PIPE_V && po->pp > 1) return 2; /* two chunks per rank (checked) */
    return po->virtual_stages > 1 ? po->virtual_stages : 1;
}

fsc_status fsc_pipe_check_balance(const int *balance, int n, int layers) {
    long sum = 0;
    for (int s = 0; s < n; s++) {
        if (balance[s] < 1)
            return fsc_error(FSC_ERR_INVALID, "balance[%d] is %d: stage %d would have no block (every stage needs "
                             "at least one)", s, balance[s], s);
        sum += balance[s];
    }
    if (sum != layers)
        return fsc_error(FSC_ERR_INVALID, "balance sums to %ld but the model has %d blocks", sum, layers);
    return FSC_OK;
}

/* A schedule's name in messages. */
static const char *sched_name(fsc_pipe_schedule k) {
    static const char *const names[] = { "gpipe", "1f1b", "interleaved", "custom", "zb-h1", "zbv" };
    return (unsigned)k < sizeof names / sizeof names[0] ? names[k] : "(unknown)";
}

/* Interleaved stages (v > 1): what runs with them so far (docs/pipeline.md). */
static fsc_status validate_chunks(const fsc_parallel_opts *po, int v) {
    if (po->schedule != FSC_SCHED_INTERLEAVED && po->schedule != FSC_SCHED_CUSTOM && po->schedule != FSC_SCHED_ZBV)
        return fsc_error(FSC_ERR_INVALID, "virtual_stages %d needs the interleaved schedule, zbv or a custom one "
                         "(gpipe, 1f1b and zb-h1 run one chunk per rank)", v);
    if (!po->prefetch)
        return fsc_error(FSC_ERR_UNSUPPORTED, "the %s schedule with %d chunks per rank: stages on several chunks need "
                         "prefetch 1 (their streams travel on communicators of their own)", sched_name(po->schedule), v);
    return FSC_OK;
}

/* The placement option (custom schedules only): before the chunks are counted, which a V fixes at two. */
static fsc_status validate_placement(const fsc_parallel_opts *po) {
    if (po->placement == FSC_PIPE_LOOP) return FSC_OK;
    if (po->placement != FSC_PIPE_V)
        return fsc_error(FSC_ERR_INVALID, "unknown pipeline placement %d (FSC_PIPE_LOOP or FSC_PIPE_V)",
                         (int)po->placement);
    if (po->schedule != FSC_SCHED_CUSTOM)
        return fsc_error(FSC_ERR_INVALID, "placement V is for a custom schedule (FSC_SCHED_CUSTOM): the built-in "
                         "schedule %s places its own stages (zbv in a V, the others in a loop); leave placement "
                         "FSC_PIPE_LOOP", sched_name(po->schedule));
    if (po->virtual_stages != 2)
        return fsc_error(FSC_ERR_INVALID, "placement V puts two chunks on every pipeline rank: it needs "
                         "virtual_stages 2, not %d", po->virtual_stages);
    return FSC_OK;
}

fsc_status fsc_pipe_validate(const fsc_rank *r, int n_layers, const fsc_parallel_opts *po) {
    if (po->pp < 0) return fsc_error(FSC_ERR_INVALID, "pp (pipeline stages) must be >= 1, not %d", po->pp);
    if (po->virtual_stages < 0)
        return fsc_error(FSC_ERR_INVALID, "virtual_stages (chunks per pipeline rank) must be >= 1, not %d",
                         po->virtual_stages);
    FSC_TRY(validate_placement(po));
    const int pp = fsc_pipe_stages(po), v = fsc_pipe_chunks(po), L = n_layers - 2;
    if (pp == 1) {
        if (po->balance) return fsc_error(FSC_ERR_INVALID, "a balance is given but pp is 1 (no pipeline)");
        if (v > 1) return fsc_error(FSC_ERR_INVALID, "virtual_stages %d but pp is 1 (no pipeline)", v);
        return FSC_OK;
    }
    if (r->world % pp != 0)
        return fsc_error(FSC_ERR_INVALID, "a world of %d ranks does not split into %d pipeline stages "
                         "(world = dp x pp)", r->world, pp);
    if (pp > L && v == 1)
        return fsc_error(FSC_ERR_INVALID, "%d pipeline stages but the model has %d blocks (every stage needs at "
                         "least one)", pp, L);
    if ((long long)pp * v > L) /* no overflow: v may be any int */
        return fsc_error(FSC_ERR_INVALID, "%d pipeline stages x %d virtual stages = %lld chunks but the model has %d "
                         "blocks (every chunk needs at least one)", pp, v, (long long)pp * v, L);
    if (po->schedule != FSC_SCHED_GPIPE && po->schedule != FSC_SCHED_1F1B && po->schedule != FSC_SCHED_INTERLEAVED &&
        po->schedule != FSC_SCHED_CUSTOM && po->schedule != FSC_SCHED_ZB_H1 && po->schedule != FSC_SCHED_ZBV)
        return fsc_error(FSC_ERR_INVALID, "unknown pipeline schedule %d (gpipe, 1f1b, interleaved, zb-h1, zbv or "
                         "custom)", (int)po->schedule);
    if (po->schedule == FSC_SCHED_ZBV && po->virtual_stages > 2)
        return fsc_error(FSC_ERR_INVALID, "the zbv schedule runs two chunks per rank (placed in a V), not "
                         "virtual_stages %d", po->virtual_stages);
    if (po->schedule == FSC_SCHED_CUSTOM && (!po->actions || !po->nactions))
        return fsc_error(FSC_ERR_INVALID, "the custom pipeline schedule needs actions and nactions (the action lists "
                         "of every pipeline rank)");
    if (po->schedule == FSC_SCHED_INTERLEAVED && po->accum % pp != 0)
        return fsc_error(FSC_ERR_INVALID, "the interleaved schedule needs the micro-batches (accum %d) to be a "
                         "multiple of the %d pipeline stages, as Megatron's does", po->accum, pp);
    if (v > 1) FSC_TRY(validate_chunks(po, v));
    if (po->pipe_checkpoint != FSC_PIPE_CKPT_EXCEPT_LAST && po->pipe_checkpoint != FSC_PIPE_CKPT_ALWAYS &&
        po->pipe_checkpoint != FSC_PIPE_CKPT_NEVER)
        return fsc_error(FSC_ERR_INVALID, "unknown pipeline checkpoint mode %d (always, except_last or never)",
                         (int)po->pipe_checkpoint);
    if (!po->no_sync)
        return fsc_error(FSC_ERR_INVALID, "a pipeline (pp %d) reduces gradients once per step, after the last "
                         "micro-batch: set no_sync", pp);
    if (po->balance) FSC_TRY(fsc_pipe_check_balance(po->balance, pp * v, L));
    return FSC_OK;
}

/* The stage (of S) that runs layer. */
static int stage_of(const fsc_pipe *p, int layer) {
    int s = 0;
    while (s < p->S - 1 && layer > p->ll[s]) s++;
    return s;
}

int fsc_pipe_runs_layer(const fsc_engine *e, int l) {
    const fsc_pipe *p = e->pipe;
    return !p || fsc_pipe_stage_rank(p->pl, p->pp, stage_of(p, l)) == p->stage;
}

int fsc_pipe_starts_chunk(const fsc_engine *e, int l) {
    const fsc_pipe *p = e->pipe;
    return p ? p->lf[stage_of(p, l)] == l : l == 0;
}

/* The tied tensors whose users run on another stage than their owner (p->tied). */
static fsc_status find_tied(fsc_engine *e) {
    fsc_pipe *p = e->pipe;
    const fsc_model *m = e->m;
    for (int i = 0; i < m->n_tensors; i++) {
        const fsc_param_info *pi = &m->info[i];
        if (!pi->nusers) continue;
        int so = stage_of(p, pi->layer), su = stage_of(p, pi->users[0]);
        for (int k = 0; k < pi->nusers; k++) {
            if (pi->users[k] < pi->layer)
                return fsc_error(FSC_ERR_UNSUPPORTED, "pipeline: tensor %s is used by layer %d before its owner, "
                                 "layer %d (tied tensors in a pipeline need their users after the owner)", pi->name,
                                 pi->users[k], pi->layer);
            if (stage_of(p, pi->users[k]) != su)
                return fsc_error(FSC_ERR_UNSUPPORTED, "pipeline: the users of tensor %s (layers %d and %d) run on "
                                 "stages %d and %d (tied tensors in a pipeline need their users on one stage)",
                                 pi->name, pi->users[0], pi->users[k], su, stage_of(p, pi->users[k]));
        }
        if (so == su) continue;
        const int ro = fsc_pipe_stage_rank(p->pl, p->pp, so), ru = fsc_pipe_stage_rank(p->pl, p->pp, su);
        if (ro == ru) { /* two chunks of one rank: the gradient waits on that rank (a V's first rank) */
            if (ro != p->stage) continue;
            int (*t)[3] = realloc(p->lt, (size_t)(p->nlt + 1) * sizeof *t);
            if (!t) return fsc_error(FSC_ERR_NOMEM, "pipe: out of memory");
            p->lt = t;
            int *x = p->lt[p->nlt++];
            x[0] = i, x[1] = so / p->pp, x[2] = su / p->pp;
            continue;
        }
        int (*t)[5] = realloc(p->tied, (size_t)(p->ntied + 1) * sizeof *t);
        if (!t) return fsc_error(FSC_ERR_NOMEM, "pipe: out of memory");
        p->tied = t;
        int *x = p->tied[p->ntied++];
        x[0] = i, x[1] = ro, x[2] = ru, x[3] = so / p->pp, x[4] = su / p->pp;
    }
    return FSC_OK;
}

/* Whether the tied layers split (p->split_tied): the model splits its backward in this list, no tied tensor
 * crosses ranks (its gradient would reach the owner's rank only after the user rank's W of the micro-batch, which
 * zb-h1's last rank runs late: the first rank's W would wait for it), and on this rank each local tied tensor's
 * user chunk runs its W of micro-batch k before the owner chunk's. */
static int tied_split_ok(const fsc_pipe *p, const fsc_model *m) {
    if (!p->split || p->ntied || !m->ops->splits_tied || !m->ops->splits_tied(m->ctx)) return 0;
    for (int x = 0; x < p->nlt; x++)
        for (int k = 0; k < p->M; k++) {
            int user_done = 0;
            for (int i = 0; i < p->nacts; i++) {
                const fsc_pipe_action *a = &p->acts[i];
                if (a->kind != FSC_ACT_WEIGHT || a->micro != k) continue;
                if (a->chunk == p->lt[x][2]) user_done = 1;
                else if (a->chunk == p->lt[x][1]) {
                    if (!user_done) return 0;
                    break;
                }
            }
        }
    return 1;
}

/* The strategies reduce in each chunk's last reducing action and take the rank's chunks' last ones in descending
 * chunk order (DDP's pending range and ZeRO's buckets end at the rank's first layer, FSDP's root unit serves both
 * chunks of a V), the order the messages give the last Bs. The last Ws of a list with W may come in any order: out
 * of that order they move to the list's end, highest chunk first. A W sends and receives nothing and each chunk's
 * last W is its last action, so the messages and every sum stay as they were; a record may wait a little longer
 * for its W. Lists already in that order (zbv's, and zbv's printed and read back) run as they are. */
static void last_ws_last(fsc_pipe *p) {
    int n = 0, next = p->v - 1; /* the chunk whose last W comes next in descending order */
    for (int i = 0; i < p->nacts && next >= 0; i++)
        if (p->acts[i].kind == FSC_ACT_WEIGHT && p->acts[i].micro == p->M - 1 && p->acts[i].chunk == next) next--;
    if (next < 0) return; /* every chunk's last W already comes highest chunk first */
    for (int i = 0; i < p->nacts; i++)
        if (p->acts[i].kind != FSC_ACT_WEIGHT || p->acts[i].micro != p->M - 1) p->acts[n++] = p->acts[i];
    if (n == p->nacts) return; /* no W: validated, so one last W per chunk otherwise */
    for (int c = p->v - 1; c >= 0; c--) p->acts[n++] = (fsc_pipe_action){ FSC_ACT_WEIGHT, p->M - 1, c };
}

/* Whether any of the pp lists has a W action. */
static int lists_have_w(int pp, const fsc_pipe_action *const *lists, const int *lens) {
    for (int r = 0; r < pp; r++)
        for (int i = 0; i < lens[r]; i++)
            if (lists[r][i].kind == FSC_ACT_WEIGHT) return 1;
    return 0;
}

/* A caller's lists (po.actions): validated; a copy of this rank's kept in p->acts. */
static fsc_status take_custom(fsc_pipe *p, const fsc_parallel_opts *po) {
    FSC_TRY(fsc_pipe_schedule_validate_placed(p->pl, p->pp, p->v, p->M, po->actions, po->nactions));
    p->any_w = lists_have_w(p->pp, po->actions, po->nactions);
    const int n = po->nactions[p->stage];
    p->acts = malloc((size_t)n * sizeof *p->acts);
    if (!p->acts) return fsc_error(FSC_ERR_NOMEM, "pipe: out of memory");
    memcpy(p->acts, po->actions[p->stage], (size_t)n * sizeof *p->acts);
    p->nacts = n;
    last_ws_last(p);
    return FSC_OK;
}

/* Every rank's actions of a step by the schedule, validated together; this rank's kept in p->acts. */
static fsc_status make_schedule(fsc_pipe *p, const fsc_parallel_opts *po) {
    if (po->schedule == FSC_SCHED_CUSTOM) return take_custom(p, po);
    const fsc_pipe_schedule kind = po->schedule;
    fsc_pipe_action **lists = calloc((size_t)p->pp, sizeof *lists);
    int *lens = calloc((size_t)p->pp, sizeof *lens);
    fsc_status s = lists && lens ? FSC_OK : fsc_error(FSC_ERR_NOMEM, "pipe: out of memory");
    for (int r = 0; r < p->pp && s == FSC_OK; r++)
        s = fsc_pipe_schedule_make(kind, p->pp, p->v, p->M, r, &lists[r], &lens[r]);
    if (s == FSC_OK)
        s = fsc_pipe_schedule_validate_placed(p->pl, p->pp, p->v, p->M, (const fsc_pipe_action *const *)lists, lens);
    if (s == FSC_OK) p->any_w = lists_have_w(p->pp, (const fsc_pipe_action *const *)lists, lens);
    for (int r = 0; r < p->pp && lists; r++) {
        if (r == p->stage && s == FSC_OK) p->acts = lists[r], p->nacts = lens[r];
        else fsc_pipe_schedule_free(lists[r]);
    }
    free(lists);
    free(lens);
    return s;
}

fsc_status fsc_pipe_create(fsc_engine *e) {
    const int pp = fsc_pipe_stages(&e->po), L = e->m->n_layers - 2;
    if (pp == 1) return FSC_OK;
    if (e->m->ops->stream_floats(e->m->ctx, 1) == 0) /* the stages would hand each other nothing */
        return fsc_error(FSC_ERR_INVALID, "pipeline: the model's stream_floats(1) is 0, so its stages would pass no "
                         "activation between them (model.h: the floats of the stream between two layers)");
    fsc_pipe *p = calloc(1, sizeof *p);
    if (!p) return fsc_error(FSC_ERR_NOMEM, "pipe: out of memory");
    e->pipe = p;
    const fsc_layout *l = &e->lay;
    p->pp = pp;
    p->dp = l->dp;
    p->stage = l->pipe;
    p->dpi = l->data;
    p->M = e->po.accum;
    p->v = fsc_pipe_chunks(&e->po);
    p->pl = fsc_pipe_placement_of(&e->po);
    const int S = p->S = pp * p->v, v = p->v;
    const size_t per = (size_t)v * ((size_t)p->M + 2); /* records of all chunks, in flight or pooled */
    p->lf = calloc((size_t)S, sizeof(int));
    p->ll = calloc((size_t)S, sizeof(int));
    p->slots = calloc((size_t)v * p->M, sizeof *p->slots);
    p->recs = calloc(per, sizeof *p->recs);
    p->nrecs = calloc((size_t)v, sizeof *p->nrecs);
    p->send_tied = calloc((size_t)v, 1);
    p->gp_rec = calloc(per, sizeof *p->gp_rec);
    p->gp_req = calloc(per, sizeof *p->gp_req);
    p->gp_chunk = calloc(per, sizeof *p->gp_chunk);
    p->lout = calloc((size_t)p->M, sizeof *p->lout);
    p->lgrad = calloc((size_t)p->M, sizeof *p->lgrad);
    if (!p->lf || !p->ll || !p->slots || !p->recs || !p->nrecs || !p->send_tied || !p->gp_rec ||
        !p->gp_req || !p->gp_chunk || !p->lout || !p->lgrad)
        return fsc_error(FSC_ERR_NOMEM, "pipe: out of memory");
    /* stage s runs blocks [first, first + balance[s]); even: the first L % S stages take one more */
    int first = 1;
    for (int s = 0; s < S; s++) {
        int n = e->po.balance ? e->po.balance[s] : L / S + (s < L % S);
        p->lf[s] = s == 0 ? 0 : first;
        p->ll[s] = s == S - 1 ? L + 1 : first + n - 1;
        first += n;
    }
    FSC_TRY(find_tied(e));
    if (p->nlt && (!(p->ltg = calloc((size_t)p->nlt * p->M, sizeof *p->ltg)) ||
                   !(p->ltg_free = calloc((size_t)p->nlt * p->M, sizeof *p->ltg_free))))
        return fsc_error(FSC_ERR_NOMEM, "pipe: out of memory");
    FSC_TRY(make_schedule(p, &e->po));
    for (int i = 0; i < p->nacts; i++) /* a model that does not split runs its whole backward in B */
        p->split |= p->acts[i].kind == FSC_ACT_WEIGHT && e->m->ops->backward_input && e->m->ops->backward_weight;
    p->split_tied = tied_split_ok(p, e->m);
    /* the engine's groups (engine.c, fsc_layout_split) */
    p->pipe_comm = e->pipe_comm;
    p->data_comm = e->comm;
    if (!p->pipe_comm) return fsc_error(FSC_ERR_INTERNAL, "pipe: the engine made no pipeline group");
    /* asynchronous boundaries on communicators per link and direction: with prefetch, and always where a send
     * waits for its receive (NCCL), on which the synchronous program deadlocks (1F1B's steady state: each
     * stage sends before it receives from the same neighbour). There no send is waited for before the end of the
     * step but where the lists' own dependencies imply its receive was posted (an output's, before its backward):
     * checkpointed outputs, input gradients and tied gradients leave from copies, and a copy whose send is in
     * flight is not waited for but joined by a new one (pipe_link.c, pipe_tied.c), so every valid list runs there
     * as with buffered sends */
    const int waits = fsc_comm_sends_wait(p->pipe_comm), posts = fsc_comm_can_post(p->pipe_comm);
    /* the asynchronous program posts receives ahead: a communicator without start and wait would run each one where
     * it is posted, waiting there for a message its own later actions cause (the first output gradient, posted at
     * the step's start); there one chunk runs the synchronous program (the same bits) where sends are buffered */
    if (!posts && (waits || v > 1))
        return fsc_error(FSC_ERR_UNSUPPORTED, "pipeline: communicator '%s' (%s) has no asynchronous calls "
                         "(fsc_comm_ops.start and wait), which a pipeline needs %s: its receives, posted a micro-batch "
                         "ahead, would block where they are posted", fsc_comm_name(p->pipe_comm),
                         p->pipe_comm->ops->name ? p->pipe_comm->ops->name : "unnamed",
                         waits ? "where sends wait for their receive (sends_wait; the synchronous program deadlocks "
                                 "there)" : "with several chunks per rank");
    p->async = posts && (e->po.prefetch || waits);
    if (p->async && p->ntied && !(p->tl = calloc((size_t)p->ntied, sizeof *p->tl)))
        return fsc_error(FSC_ERR_NOMEM, "pipe: out of memory");
    if (p->async) { /* a V: chunk 0's links in rank order, chunk 1's in the reverse order */
        const int vee = p->pl == FSC_PIPE_V;
        FSC_TRY(fsc_pipe_links_create(e, p->pipe_comm, p->stage, v > 1 && !vee, &p->lk));
        if (vee) FSC_TRY(fsc_pipe_links_create(e, p->pipe_comm, pp - 1 - p->stage, 0, &p->lk2));
    }
    for (int x = 0; x < p->ntied && p->tl; x++)
        FSC_TRY(fsc_pipe_tied_create(e, p->pipe_comm, p->stage, p->tied[x][1], p->tied[x][2],
                                     e->m->info[p->tied[x][0]].numel, &p->tl[x]));
    int lf, ll;
    fsc_pipe_span(e, &lf, &ll);
    p->st.pp = pp;
    p->st.dp = p->dp;
    p->st.stage = p->stage;
    p->st.dp_index = p->dpi;
    p->st.first_layer = lf;
    p->st.last_layer = ll;
    p->st.chunks = v;
    for (int c = 0; c < v && c < FSC_PIPE_STATS_CHUNKS; c++) {
        const int sc = fsc_pipe_stage_at(p->pl, pp, p->stage, c);
        p->st.chunk_layers[c][0] = sc, p->st.chunk_layers[c][1] = p->lf[sc], p->st.chunk_layers[c][2] = p->ll[sc];
    }
    return fsc_pipe_aux_create(e, p->M, lf, ll, &p->aux);
}

void fsc_pipe_span(const fsc_engine *e, int *lf, int *ll) {
    const fsc_pipe *p = e->pipe;
    *lf = p->lf[p->stage];
    *ll = p->ll[fsc_pipe_stage_at(p->pl, p->pp, p->stage, p->v - 1)]; /* with chunks the span of the first and the
                                                                       * last: fsc_pipe_runs_layer */
}

fsc_pipe_aux *fsc_pipe_aux_of(const fsc_engine *e) { return e->pipe ? e->pipe->aux : NULL; }

/* ---- pools ---- */

/* Chunk c's records not in use (p->nrecs[c] of them). */
static fsc_model_acts **pool(fsc_pipe *p, int c) { return p->recs + (size_t)c * ((size_t)p->M + 2); }

/* This rank's chunk c: the stage it is. */
static int stage_at(const fsc_pipe *p, int c) { return fsc_pipe_stage_at(p->pl, p->pp, p->stage, c); }

void fsc_pipe_running_layers(const fsc_engine *e, int *lo, int *hi) {
    const fsc_pipe *p = e->pipe;
    *lo = e->lf, *hi = e->ll;
    if (!p || p->v == 1) return;
    const int g = stage_at(p, p->chunk);
    *lo = p->lf[g], *hi = p->ll[g];
}

/* The rank that runs the last stage (loss, targets): the last rank, or a V's first. */
static int last_rank(const fsc_pipe *p) { return fsc_pipe_stage_rank(p->pl, p->pp, p->S - 1); }

/* The links chunk c's messages travel on (a V's chunk 1 has its own), and whether its input (output gradient)
 * comes from this rank itself: a V's last rank hands chunk 0's output to chunk 1, and its gradient back. */
static fsc_pipe_links *links_of(fsc_pipe *p, int c) { return p->pl == FSC_PIPE_V && c == 1 ? &p->lk2 : &p->lk; }
static int line_of(const fsc_pipe *p, int c) { return p->pl == FSC_PIPE_V && c == 1; }
static int prev_local(const fsc_pipe *p, int c) {
    const int g = stage_at(p, c);
    return g > 0 && fsc_pipe_stage_rank(p->pl, p->pp, g - 1) == p->stage;
}
static int next_local(const fsc_pipe *p, int c) {
    const int g = stage_at(p, c);
    return g < p->S - 1 && fsc_pipe_stage_rank(p->pl, p->pp, g + 1) == p->stage;
}

static void note_use(fsc_pipe *p) {
    if (p->full_in_use > p->st.max_full_records) p->st.max_full_records = p->full_in_use;
    if (p->bytes_in_use > p->st.peak_acts_bytes) p->st.peak_acts_bytes = p->bytes_in_use;
}

/* Wait for every gradient send in flight (oldest first) and put their records back in the pool; the first
 * failure is returned, every request is waited for. */
static fsc_status grad_sends_done(fsc_pipe *p) {
    fsc_status s = FSC_OK;
    for (int i = 0; i < p->ngp; i++) {
        fsc_status w = fsc_comm_wait(p->gp_req[i]);
        fsc_comm_req_free(p->gp_req[i]);
        if (s == FSC_OK) s = w;
        const int c = p->gp_chunk[i];
        pool(p, c)[p->nrecs[c]++] = p->gp_rec[i];
    }
    p->ngp = 0;
    return s;
}

/* Wait for the tied gradients' sends in flight (c -1: all, at the end of a step), or for those that leave from the
 * buffer the user chunk c's backward is about to overwrite (none with copies, pipe_tied.c); the first failure is
 * returned, every request is waited for. */
static fsc_status tied_sends_done(fsc_pipe *p, int c) {
    fsc_status s = FSC_OK;
    for (int x = 0; x < p->ntied && p->tl; x++) {
        if (c >= 0 && (p->tied[x][2] != p->stage || p->tied[x][4] != c || p->tl[x].copies)) continue;
        fsc_status w = fsc_pipe_tied_grad_sent(&p->tl[x], &p->wait);
        if (s == FSC_OK) s = w;
    }
    return s;
}

/* The tied values' receives (user) and, unless users_only, sends (owner) in flight, as tied_sends_done. */
static fsc_status tied_values_done(fsc_pipe *p, int users_only) {
    fsc_status s = FSC_OK;
    for (int x = 0; x < p->ntied && p->tl; x++) {
        if (users_only && p->tied[x][2] != p->stage) continue;
        fsc_status w = fsc_pipe_tied_values_done(&p->tl[x], &p->wait);
        if (s == FSC_OK) s = w;
    }
    return s;
}

/* Post what a user stage receives of the tied values and, in a step (grads), what an owner stage receives of
 * the first micro-batch's tied gradients. */
static fsc_status tied_post(fsc_engine *e, int grads) {
    fsc_pipe *p = e->pipe;
    for (int x = 0; x < p->ntied && p->tl; x++) {
        if (p->tied[x][2] == p->stage) FSC_TRY(fsc_pipe_tied_post_values(&p->tl[x], e->tied_copy[p->tied[x][0]]));
        if (grads && p->tied[x][1] == p->stage) FSC_TRY(fsc_pipe_tied_post_grad(&p->tl[x]));
    }
    return FSC_OK;
}

static fsc_status take_rec(fsc_engine *e, int c, fsc_model_acts **out) {
    fsc_pipe *p = e->pipe;
    if (p->nrecs[c] == 0 && p->ngp > 0) FSC_TRY(grad_sends_done(p)); /* a record whose send finished, not a new one */
    if (p->nrecs[c] > 0) {
        *out = pool(p, c)[--p->nrecs[c]];
    } else {
        /* with chunks, an idle record of another chunk is given up first: the pools then hold no more than the
         * schedule holds at once (a chunk's pool would otherwise keep the most that chunk ever held); the model
         * remakes it for this chunk in its memory where the two chunks' records are of a size (acts_remake) */
        fsc_model_acts *idle = NULL;
        for (int o = 0; o < p->v && !idle; o++)
            if (o != c && p->nrecs[o] > 0) idle = pool(p, o)[--p->nrecs[o]];
        const int g = stage_at(p, c);
        fsc_model_acts_opts o = { .B = p->B, .first = p->lf[g], .last = p->ll[g], .checkpoint = e->po.checkpoint,
                                  .split = p->split, .split_tied = p->split_tied };
        fsc_engine_acts_terms(e, &o);
        const int remade = idle && e->m->ops->acts_remake;
        FSC_TRY(fsc_model_acts_make(e->m, idle, &o, out)); /* remade in its memory, or new */
        if (remade) p->st.records_remade++;
        else p->st.records_made++;
    }
    p->full_in_use++;
    p->bytes_in_use += e->m->ops->acts_bytes(e->m->ctx, *out);
    note_use(p);
    return FSC_OK;
}

/* Record a held `held` bytes before an action's pass: the count follows what it holds now (the sequential model's
 * whole area from a split record's F to its B, its split area from B to W; size_t arithmetic, mod 2^64). */
static void recount(fsc_engine *e, fsc_model_acts *a, size_t held) {
    fsc_pipe *p = e->pipe;
    p->bytes_in_use += e->m->ops->acts_bytes(e->m->ctx, a) - held;
    note_use(p);
}

/* A forward of record a on this stage (k, c, recomputing), its bytes counted as they change. */
static fsc_status forward_counted(fsc_engine *e, fsc_step_ctx *x, fsc_model_acts *a, int k, int c, int again) {
    fsc_pipe *p = e->pipe;
    const int g = stage_at(p, c);
    const size_t held = e->m->ops->acts_bytes(e->m->ctx, a);
    const fsc_status st = fsc_step_forward_on(e, x, a, k, p->lf[g], p->ll[g], again);
    recount(e, a, held);
    return st;
}

static void give_rec(fsc_engine *e, int c, fsc_model_acts *a) {
    fsc_pipe *p = e->pipe;
    pool(p, c)[p->nrecs[c]++] = a; /* at most M + 1 records of a chunk exist: M in flight and one recomputing */
    p->full_in_use--;
    p->bytes_in_use -= e->m->ops->acts_bytes(e->m->ctx, a);
}

static size_t in_floats(const fsc_engine *e) { return e->m->ops->stream_floats(e->m->ctx, e->pipe->B); }

static float *stream(fsc_engine *e, fsc_model_acts *a, fsc_stream which) {
    return e->m->ops->stream(e->m->ctx, a, which);
}

/* A saved stage input or a V's turn buffer (one stage boundary), made here and released by give_in, not pooled:
 * an idle one would sit beside the records that zero-bubble lists hold from a checkpointed micro-batch's
 * recomputation to its W, memory the schedule does not hold (the ledger's peak is the schedule's count). */
static fsc_status take_in(fsc_engine *e, float **out) {
    fsc_pipe *p = e->pipe;
    FSC_TRY(fsc_device_alloc(e->dev, FSC_TAG_ACTS, in_floats(e) * sizeof(float), (void **)out));
    p->bytes_in_use += in_floats(e) * sizeof(float);
    note_use(p);
    return FSC_OK;
}

static void give_in(fsc_engine *e, float *x) {
    fsc_pipe *p = e->pipe;
    fsc_device_release(e->dev, x);
    p->bytes_in_use -= in_floats(e) * sizeof(float);
}

/* Wait for the slot's output send (if one is in flight). */
static fsc_status send_done(mb_slot *sl) { return fsc_pipe_req_wait(&sl->send, NULL); }

/* Return every micro-batch's memory (after a failed step) and, for another micro-batch size, free the pools. */
static void reset_pools(fsc_engine *e, int B) {
    fsc_pipe *p = e->pipe;
    (void)grad_sends_done(p); /* left by a failed step */
    (void)tied_sends_done(p, -1);
    for (int i = 0; i < p->v * p->M; i++) { /* slot i: chunk i / M */
        (void)send_done(&p->slots[i]); /* left by a failed step: its buffer must not be reused before */
        (void)fsc_pipe_req_wait(&p->slots[i].gsend, NULL);
        if (p->slots[i].rec) give_rec(e, i / p->M, p->slots[i].rec);
        if (p->slots[i].saved) give_in(e, p->slots[i].saved);
        p->slots[i] = (mb_slot){ 0 };
    }
    p->in_flight = 0;
    if (B == p->B) return;
    for (int c = 0; c < p->v; c++)
        while (p->nrecs[c] > 0) e->m->ops->acts_free(e->m->ctx, pool(p, c)[--p->nrecs[c]]);
    p->B = B;
}

static int is_checkpointed(const fsc_engine *e, int k);

/* po.prefetch: the send buffers of checkpointed outputs on line (lk 0, lk2 1), min(po.prefetch_limit (0: 2),
 * checkpointed micro-batches of a step on its chunks that send to another rank); none on the last stage
 * (pipe_link.c). */
static int send_buffers(const fsc_engine *e, int line) {
    const fsc_pipe *p = e->pipe;
    int sending = 0; /* chunks with a next stage on another rank */
    for (int c = 0; c < p->v; c++) sending += line_of(p, c) == line && stage_at(p, c) < p->S - 1 && !next_local(p, c);
    if (!p->async || sending == 0) return 0;
    int ck = 0;
    for (int k = 0; k < p->M; k++) ck += is_checkpointed(e, k) * sending;
    const int limit = fsc_engine_prefetch_limit(e);
    return ck < limit ? ck : limit;
}

/* A V's hand-offs inside its last rank and the tied gradients waiting on its first, left by a failed step or an
 * evaluation: back to their pools. */
static void locals_reset(fsc_engine *e) {
    fsc_pipe *p = e->pipe;
    for (int k = 0; k < p->M; k++) {
        if (p->lout[k]) give_in(e, p->lout[k]);
        if (p->lgrad[k]) give_in(e, p->lgrad[k]);
        p->lout[k] = p->lgrad[k] = NULL;
    }
    for (int i = 0; i < p->nlt * p->M; i++)
        if (p->ltg[i]) p->ltg_free[p->nltg_free++] = p->ltg[i], p->ltg[i] = NULL;
}

/* reset_pools(e, B), then the receive and send buffers for B (po.prefetch), counted in the activation bytes. */
static fsc_status ready(fsc_engine *e, int B) {
    fsc_pipe *p = e->pipe;
    locals_reset(e); /* before reset_pools */
    reset_pools(e, B);
    for (int x = 0; x < p->ntied && p->tl; x++) fsc_pipe_tied_drop(&p->tl[x]); /* left by a failed step */
    const size_t had = fsc_pipe_links_bytes(&p->lk) + fsc_pipe_links_bytes(&p->lk2);
    fsc_status s = fsc_pipe_links_buffers(&p->lk, e->dev, in_floats(e), send_buffers(e, 0));
    if (s == FSC_OK && p->pl == FSC_PIPE_V) s = fsc_pipe_links_buffers(&p->lk2, e->dev, in_floats(e), send_buffers(e, 1));
    p->bytes_in_use = p->bytes_in_use - had + fsc_pipe_links_bytes(&p->lk) + fsc_pipe_links_bytes(&p->lk2);
    note_use(p);
    return s;
}

/* ---- the pipeline's part of the engine's forward hooks (engine.c's, fsc_engine_hooks, run it first): tied
 * tensors' values, which the owner stage hands to its users' stage after their first use ---- */

fsc_status fsc_pipe_pre_forward(fsc_engine *e, int l) {
    fsc_pipe *p = e->pipe;
    for (int x = 0; x < p->ntied && p->tl; x++) /* po.prefetch: a user stage's wait before the first reader */
        if (p->tied[x][2] == p->stage && fsc_param_used_by(&e->m->info[p->tied[x][0]], l))
            FSC_TRY(fsc_pipe_tied_values_done(&p->tl[x], &p->wait));
    return FSC_OK;
}

fsc_status fsc_pipe_post_forward(fsc_engine *e, int l) {
    fsc_pipe *p = e->pipe;
    for (int x = 0; x < p->ntied && p->send_tied[p->chunk] && !p->recompute; x++) {
        const int i = p->tied[x][0];
        if (p->tied[x][1] != p->stage || e->m->info[i].layer != l) continue;
        if (p->tl) /* from a copy, sent while the stage goes on */
            FSC_TRY(fsc_pipe_tied_send_values(&p->tl[x], e->dev, e->m->param[i], &p->wait));
        else
            FSC_TRY(fsc_comm_send(p->pipe_comm, e->m->param[i], e->m->info[i].numel, FSC_F32, p->tied[x][2]));
    }
    if (l == p->ll[stage_at(p, p->chunk)] && !p->recompute) p->send_tied[p->chunk] = 0;
    return FSC_OK;
}

static fsc_status recv_timed(fsc_pipe *p, float *buf, size_t n, int peer) {
    double t0 = fsc_clock_now();
    fsc_status s = fsc_comm_recv(p->pipe_comm, buf, n, FSC_F32, peer);
    p->wait += fsc_clock_now() - t0;
    return s;
}

static int is_checkpointed(const fsc_engine *e, int k) {
    switch (e->po.pipe_checkpoint) {
    case FSC_PIPE_CKPT_ALWAYS: return 1;
    case FSC_PIPE_CKPT_NEVER: return 0;
    default: return k < e->pipe->M - 1;
    }
}

/* ---- one micro-batch's action on this stage: its boundary received, the step's compute (step_compute.c) on the
 * chunk's record, its boundary sent, the record kept or given back ---- */

/* F's boundary in: micro-batch k's stage input into record a of chunk c (stage 0: none, its inputs are the
 * batch's), and at micro-batch 0 without po.prefetch this stage's replicas of tied tensors. */
static fsc_status recv_input(fsc_engine *e, int k, int c, fsc_model_acts *a) {
    fsc_pipe *p = e->pipe;
    const size_t btc = in_floats(e);
    for (int x = 0; x < p->ntied && k == 0 && !p->tl; x++) /* this stage's replica of a tied tensor */
        if (p->tied[x][2] == p->stage) {
            const int i = p->tied[x][0];
            FSC_TRY(recv_timed(p, e->tied_copy[i], e->m->info[i].numel, p->tied[x][1]));
        }
    fsc_pipe_links *lk = links_of(p, c);
    if (prev_local(p, c)) { /* a V's turn: chunk 0's output of k, on this rank */
        if (!p->lout[k]) return fsc_error(FSC_ERR_INTERNAL, "pipe: F of micro-batch %d on chunk %d has no input", k, c);
        FSC_TRY(fsc_device_copy(e->dev, stream(e, a, FSC_STREAM_INPUT), p->lout[k], btc * sizeof(float)));
        give_in(e, p->lout[k]);
        p->lout[k] = NULL;
    } else if (stage_at(p, c) > 0 && lk->act_prev) { /* posted ahead; the next one is posted before k computes */
        FSC_TRY(fsc_pipe_links_take_input(lk, e->dev, stream(e, a, FSC_STREAM_INPUT), &p->wait));
        if (--p->in_left[line_of(p, c)] > 0) FSC_TRY(fsc_pipe_links_post_input(lk));
    } else if (stage_at(p, c) > 0) {
        FSC_TRY(recv_timed(p, stream(e, a, FSC_STREAM_INPUT), btc, p->stage - 1));
    }
    return FSC_OK;
}

/* A send of lk's rings made them hold more than had bytes (where sends wait they grow): activations too. */
static void links_grown(fsc_pipe *p, const fsc_pipe_links *lk, size_t had) {
    p->bytes_in_use += fsc_pipe_links_bytes(lk) - had;
    note_use(p);
}

/* F's boundary out: micro-batch k's stage output in record a of chunk c to the next stage (the last: none). */
static fsc_status send_output(fsc_engine *e, int k, int c, mb_slot *sl, fsc_model_acts *a) {
    fsc_pipe *p = e->pipe;
    const size_t btc = in_floats(e);
    fsc_pipe_links *lk = links_of(p, c);
    float *out = stream(e, a, FSC_STREAM_OUTPUT);
    if (stage_at(p, c) == p->S - 1) return FSC_OK;
    if (next_local(p, c)) { /* a V's turn: kept for chunk 1's forward of k */
        FSC_TRY(take_in(e, &p->lout[k]));
        return fsc_device_copy(e->dev, p->lout[k], out, btc * sizeof(float));
    }
    if (lk->act_next && !sl->ckpt) /* sent while the next micro-batches compute */
        return fsc_comm_isend(lk->act_next, out, btc, FSC_F32, lk->peer_next, &sl->send);
    if (lk->act_next) { /* its record is reused at once: sent from a copy (pipe_link.c's ring, which may grow) */
        const size_t had = fsc_pipe_links_bytes(lk);
        FSC_TRY(fsc_pipe_links_send_output(lk, e->dev, out, &p->wait));
        links_grown(p, lk, had);
        return FSC_OK;
    }
    return fsc_comm_send(p->pipe_comm, out, btc, FSC_F32, p->stage + 1);
}

/* F: micro-batch k on chunk c (x: the step, whose compute adds the loss, unit losses and outputs at the last
 * stage and notes the MoE statistics of the chunk's layers). */
static fsc_status forward(fsc_engine *e, fsc_step_ctx *x, int k, int c) {
    fsc_pipe *p = e->pipe;
    mb_slot *sl = &p->slots[c * p->M + k];
    const int g = stage_at(p, c);
    p->chunk = c;
    FSC_TRY(take_rec(e, c, &sl->rec));
    if (++p->in_flight > p->st.max_in_flight) p->st.max_in_flight = p->in_flight;
    fsc_model_acts *a = sl->rec;
    FSC_TRY(recv_input(e, k, c, a));
    FSC_TRY(forward_counted(e, x, a, k, c, 0));
    if (k == 0) FSC_TRY(tied_values_done(p, 1)); /* po.prefetch: fsc_pipe_pre_forward waited for them already */
    sl->ckpt = is_checkpointed(e, k);
    FSC_TRY(send_output(e, k, c, sl, a));
    if (sl->ckpt) { /* keep the stage input only */
        if (g > 0) {
            FSC_TRY(take_in(e, &sl->saved));
            FSC_TRY(fsc_device_copy(e->dev, sl->saved, stream(e, a, FSC_STREAM_INPUT), in_floats(e) * sizeof(float)));
        }
        give_rec(e, c, a);
        sl->rec = NULL;
    }
    return FSC_OK;
}

/* The micro-batch's backward is over: its record goes back to chunk c's pool, or, while the send of its input
 * gradient (gsend) is in flight, to the records waited for before reuse. */
static void release(fsc_engine *e, int c, mb_slot *sl, fsc_comm_req *gsend) {
    fsc_pipe *p = e->pipe;
    fsc_model_acts *a = sl->rec;
    sl->rec = NULL;
    if (gsend) { /* the record is free for the ledger's count now, for reuse once the send is waited for */
        p->gp_rec[p->ngp] = a;
        p->gp_chunk[p->ngp] = c;
        p->gp_req[p->ngp++] = gsend;
        p->full_in_use--;
        p->bytes_in_use -= e->m->ops->acts_bytes(e->m->ctx, a);
    } else {
        give_rec(e, c, a);
    }
    p->in_flight--;
}

/* Tensor i's tied-gradient buffer on this rank, which runs its owner or a user: the model makes it by the first record
 * whose range holds one (model.h), so by the pass that reads or writes it; a model that did not is refused. */
static fsc_status tied_buf(const fsc_engine *e, int i, float **out) {
    *out = e->m->tied_grad ? e->m->tied_grad[i] : NULL;
    if (!*out)
        return fsc_error(FSC_ERR_STATE, "pipeline: the model has no tied-gradient buffer of %s (tied_grad[%d]) on "
                         "this rank, which runs its owner or a user (model.h: the buffer exists once a record "
                         "holding one does)", e->m->info[i].name, i);
    return FSC_OK;
}

/* A tied gradient of this rank's user chunk, waiting since the user's backward (or W, split_tied) of micro-batch
 * k: into tied_grad for the owner chunk c's backward (W) of k. */
static fsc_status local_tied_take(fsc_engine *e, int k, int c) {
    fsc_pipe *p = e->pipe;
    for (int x = 0; x < p->nlt; x++)
        if (p->lt[x][1] == c) {
            float **w = &p->ltg[x * p->M + k];
            if (!*w) return fsc_error(FSC_ERR_INTERNAL, "pipe: micro-batch %d on chunk %d has no tied gradient", k, c);
            const int i = p->lt[x][0];
            float *tg;
            FSC_TRY(tied_buf(e, i, &tg));
            FSC_TRY(fsc_device_copy(e->dev, tg, *w, e->m->info[i].numel * sizeof(float)));
            p->ltg_free[p->nltg_free++] = *w;
            *w = NULL;
        }
    return FSC_OK;
}

/* The user chunk c's tied gradient of micro-batch k, kept until the owner chunk's backward (W) of k. */
static fsc_status local_tied_keep(fsc_engine *e, int k, int c) {
    fsc_pipe *p = e->pipe;
    for (int x = 0; x < p->nlt; x++)
        if (p->lt[x][2] == c) {
            const int i = p->lt[x][0];
            float **w = &p->ltg[x * p->M + k], *tg;
            FSC_TRY(tied_buf(e, i, &tg));
            if (p->nltg_free > 0) *w = p->ltg_free[--p->nltg_free];
            else FSC_TRY(fsc_device_alloc(e->dev, FSC_TAG_COMM, e->m->info[i].numel * sizeof(float), (void **)w));
            FSC_TRY(fsc_device_copy(e->dev, *w, tg, e->m->info[i].numel * sizeof(float)));
        }
    return FSC_OK;
}

/* A checkpointed micro-batch k on chunk c: its record again, from its stage input (stage 0: the batch's inputs),
 * by the same kernels on the same input. */
static fsc_status recompute(fsc_engine *e, fsc_step_ctx *x, int k, int c, mb_slot *sl) {
    fsc_pipe *p = e->pipe;
    FSC_TRY(take_rec(e, c, &sl->rec));
    if (sl->saved) {
        FSC_TRY(fsc_device_copy(e->dev, stream(e, sl->rec, FSC_STREAM_INPUT), sl->saved, in_floats(e) * sizeof(float)));
        give_in(e, sl->saved);
        sl->saved = NULL;
    }
    p->recompute = 1; /* po.prefetch: the output gradient, posted ahead, arrives meanwhile */
    fsc_status s = forward_counted(e, x, sl->rec, k, c, 1);
    p->recompute = 0;
    return s;
}

/* B's boundary in: micro-batch k's output gradient into record a of chunk c (the last stage: none, its loss makes
 * it), and the users' tied gradients of k, which an owner chunk adds first. */
static fsc_status recv_grad(fsc_engine *e, int k, int c, fsc_model_acts *a) {
    fsc_pipe *p = e->pipe;
    const size_t btc = in_floats(e);
    const int last = stage_at(p, c) == p->S - 1;
    fsc_pipe_links *lk = links_of(p, c);
    if (next_local(p, c)) { /* a V's turn: chunk 1's input gradient of k, on this rank */
        if (!p->lgrad[k]) return fsc_error(FSC_ERR_INTERNAL, "pipe: B of micro-batch %d on chunk %d has no gradient", k, c);
        FSC_TRY(fsc_device_copy(e->dev, stream(e, a, FSC_STREAM_GRAD_OUTPUT), p->lgrad[k], btc * sizeof(float)));
        give_in(e, p->lgrad[k]);
        p->lgrad[k] = NULL;
    } else if (!last && lk->grad_next) { /* posted ahead; the next backward's is posted before this one computes */
        FSC_TRY(fsc_pipe_links_take_grad(lk, e->dev, stream(e, a, FSC_STREAM_GRAD_OUTPUT), &p->wait));
        if (--p->grad_left[line_of(p, c)] > 0) FSC_TRY(fsc_pipe_links_post_grad(lk));
    } else if (!last) {
        FSC_TRY(recv_timed(p, stream(e, a, FSC_STREAM_GRAD_OUTPUT), btc, p->stage + 1));
    }
    for (int x = 0; x < p->ntied; x++) /* the users' gradient of micro-batch k, added first by the owner */
        if (p->tied[x][1] == p->stage && p->tied[x][3] == c) {
            const int i = p->tied[x][0];
            float *tg;
            FSC_TRY(tied_buf(e, i, &tg));
            if (!p->tl) {
                FSC_TRY(recv_timed(p, tg, e->m->info[i].numel, p->tied[x][2]));
                continue;
            } /* po.prefetch: received ahead; the next one is posted before this backward computes */
            FSC_TRY(fsc_pipe_tied_take_grad(&p->tl[x], e->dev, tg, &p->wait));
            if (k + 1 < p->M) FSC_TRY(fsc_pipe_tied_post_grad(&p->tl[x]));
        }
    if (!p->split_tied) FSC_TRY(local_tied_take(e, k, c)); /* split_tied: in W */
    return tied_sends_done(p, c); /* the backward overwrites the tied gradients sent after the last one */
}

/* B's boundary out: micro-batch k's input gradient in record a of chunk c to the previous stage (stage 0: none;
 * *gsend the asynchronous send in flight, po.prefetch). */
static fsc_status send_grad(fsc_engine *e, int k, int c, fsc_model_acts *a, fsc_comm_req **gsend) {
    fsc_pipe *p = e->pipe;
    const size_t btc = in_floats(e);
    fsc_pipe_links *lk = links_of(p, c);
    float *gin = stream(e, a, FSC_STREAM_GRAD_INPUT);
    if (prev_local(p, c)) { /* a V's turn: kept for chunk 0's backward of k */
        FSC_TRY(take_in(e, &p->lgrad[k]));
        FSC_TRY(fsc_device_copy(e->dev, p->lgrad[k], gin, btc * sizeof(float)));
    } else if (stage_at(p, c) > 0 && lk->grow) { /* from a copy: the record is not kept for the send (pipe_link.c) */
        const size_t had = fsc_pipe_links_bytes(lk);
        FSC_TRY(fsc_pipe_links_send_grad(lk, e->dev, gin));
        links_grown(p, lk, had);
    } else if (stage_at(p, c) > 0 && lk->grad_prev)
        FSC_TRY(fsc_comm_isend(lk->grad_prev, gin, btc, FSC_F32, lk->peer_prev, gsend));
    else if (stage_at(p, c) > 0)
        FSC_TRY(fsc_comm_send(p->pipe_comm, gin, btc, FSC_F32, p->stage - 1));
    return FSC_OK;
}

/* The user chunk c's tied gradients of micro-batch k to their owner rank, after the gradient of k (prefetch 0: in
 * issue order on the pipeline group). */
static fsc_status send_tied_grads(fsc_engine *e, int c) {
    fsc_pipe *p = e->pipe;
    for (int x = 0; x < p->ntied; x++)
        if (p->tied[x][2] == p->stage && p->tied[x][4] == c) {
            const int i = p->tied[x][0];
            float *tg;
            FSC_TRY(tied_buf(e, i, &tg));
            if (p->tl) /* sent while the next micro-batches compute */
                FSC_TRY(fsc_pipe_tied_send_grad(&p->tl[x], e->dev, tg, &p->wait));
            else
                FSC_TRY(fsc_comm_send(p->pipe_comm, tg, e->m->info[i].numel, FSC_F32, p->tied[x][1]));
        }
    return FSC_OK;
}

/* B: micro-batch k on chunk c (with W: its input part). The strategy reduces in the last backward only (no_sync),
 * with W in the last W (the runner's e->sync: exec_begin names the kind); with the exact reduction every
 * micro-batch's gradient is a term of its own (exact.c): with W, B's term holds the layers that run whole in B
 * (the others' gradients are still zero) and W's the others (B's were cleared). */
static fsc_status backward(fsc_engine *e, fsc_step_ctx *x, int k, int c) {
    fsc_pipe *p = e->pipe;
    mb_slot *sl = &p->slots[c * p->M + k];
    p->chunk = c;
    FSC_TRY(send_done(sl));
    if (sl->ckpt) FSC_TRY(recompute(e, x, k, c, sl));
    fsc_model_acts *a = sl->rec;
    FSC_TRY(recv_grad(e, k, c, a));
    const size_t held = e->m->ops->acts_bytes(e->m->ctx, a);
    fsc_status st = fsc_step_backward_on(e, x, a, p->split);
    recount(e, a, held);
    FSC_TRY(st);
    fsc_comm_req *gsend = NULL; /* po.prefetch: the input gradient is sent while this stage goes on */
    FSC_TRY(send_grad(e, k, c, a, &gsend));
    if (p->split) sl->gsend = gsend; /* the record waits for W */
    else release(e, c, sl, gsend);
    if (!p->split_tied) FSC_TRY(local_tied_keep(e, k, c)); /* waits for the owner chunk's B of k */
    return send_tied_grads(e, c);
}

/* W: the weight gradients of micro-batch k on chunk c (a list with W; nothing when the model ran its whole
 * backward in B), then its record goes back. */
static fsc_status weight(fsc_engine *e, fsc_step_ctx *x, int k, int c) {
    fsc_pipe *p = e->pipe;
    if (!p->split) return FSC_OK;
    mb_slot *sl = &p->slots[c * p->M + k];
    if (!sl->rec) /* the validator puts every W after its B */
        return fsc_error(FSC_ERR_INTERNAL, "pipe: W of micro-batch %d on chunk %d has no record", k, c);
    p->chunk = c;
    if (p->split_tied) FSC_TRY(local_tied_take(e, k, c)); /* the user chunk's W of k ran before (tied_split_ok) */
    const size_t held = e->m->ops->acts_bytes(e->m->ctx, sl->rec);
    fsc_status st = fsc_step_weight_on(e, x, sl->rec);
    recount(e, sl->rec, held); /* what it held from its B goes */
    FSC_TRY(st);
    if (p->split_tied) FSC_TRY(local_tied_keep(e, k, c)); /* for the owner chunk's W of k */
    fsc_comm_req *gsend = sl->gsend;
    sl->gsend = NULL;
    release(e, c, sl, gsend);
    return FSC_OK;
}

/* Over the ranks of c, each passing mine = (loss, local batch, global batch): the sum of the losses in rank
 * order (the same bits on every rank) into out[0], the sum of the local batches into out[2], and into out[1]
 * 1 if the batch check (fsc_engine_check_batch) passes, else 0 with the message set. One all-gather. */
static fsc_status sum_doubles(fsc_engine *e, fsc_comm *c, const double in[3], double out[3]) {
    enum { W = 4 }; /* in's three and the engine's step count (fsc_engine_check_calls) */
    int n = fsc_comm_size(c);
    const double mine[W] = { in[0], in[1], in[2], (double)e->calls };
    double *all = malloc((size_t)n * (W + 2) * sizeof(double)), *pairs = all ? all + (size_t)n * W : NULL;
    if (!all) return fsc_error(FSC_ERR_NOMEM, "pipe: out of memory");
    fsc_status s = fsc_engine_gather_host(e, c, mine, W * sizeof(double), all);
    if (s == FSC_OK) {
        double acc = all[0], batches = all[1];
        for (int i = 1; i < n; i++) acc += all[(size_t)i * W], batches += all[(size_t)i * W + 1];
        for (int i = 0; i < n; i++) pairs[2 * i] = all[(size_t)i * W + 1], pairs[2 * i + 1] = all[(size_t)i * W + 2];
        out[0] = acc;
        out[1] = fsc_engine_check_batch(pairs, n) == FSC_OK && fsc_engine_check_calls(all + 3, W, n) == FSC_OK;
        out[2] = batches;
    }
    free(all);
    return s;
}

/* The last stage's sums (the loss, the batch check, the local batches' sum) to every stage of the pipeline. */
static fsc_status from_last_stage(fsc_pipe *p, fsc_device *dev, double sums[3]) {
    double *d;
    FSC_TRY(fsc_device_alloc(dev, FSC_TAG_COMM, 3 * sizeof(double), (void **)&d));
    fsc_status st = fsc_device_upload(dev, d, sums, 3 * sizeof(double));
    if (st == FSC_OK) st = fsc_comm_broadcast(p->pipe_comm, d, 3 * sizeof(double), FSC_U8, last_rank(p));
    if (st == FSC_OK) st = fsc_device_download(dev, sums, d, 3 * sizeof(double));
    fsc_device_release(dev, d);
    return st;
}

void fsc_pipe_set_unit_losses(fsc_engine *e, double *vals) { e->pipe->unit_loss = vals; }

void fsc_pipe_set_outputs(fsc_engine *e, float *out, size_t *per_sample) {
    e->pipe->outputs = out;
    e->pipe->per_sample = per_sample;
    if (out) e->pipe->out_status = FSC_OK, e->pipe->out_why[0] = '\0';
}

fsc_status fsc_pipe_outputs_from_last(fsc_engine *e, float *out, int samples, size_t *per_sample) {
    fsc_pipe *p = e->pipe;
    const int root = last_rank(p), last = p->stage == root; /* in a V the last stage is on rank 0 */
    double per = !last ? 0 : p->out_status != FSC_OK ? -1 - (double)p->out_status : (double)*per_sample;
    void *d = NULL;
    FSC_TRY(fsc_device_alloc(e->dev, FSC_TAG_COMM, sizeof per, &d));
    fsc_status st = fsc_device_upload(e->dev, d, &per, sizeof per);
    if (st == FSC_OK) st = fsc_comm_broadcast(p->pipe_comm, d, sizeof per, FSC_U8, root);
    if (st == FSC_OK) st = fsc_device_download(e->dev, &per, d, sizeof per);
    fsc_device_release(e->dev, d);
    FSC_TRY(st);
    if (per < 0) { /* the last stage could not take them: every stage of the group fails with its status and its
                    * message (the world's agreement then keeps the lowest failing rank's: it must say why) */
        char why[sizeof p->out_why];
        snprintf(why, sizeof why, "%s", last ? p->out_why : "");
        FSC_TRY(fsc_device_alloc(e->dev, FSC_TAG_COMM, sizeof why, &d));
        st = fsc_device_upload(e->dev, d, why, sizeof why);
        if (st == FSC_OK) st = fsc_comm_broadcast(p->pipe_comm, d, sizeof why, FSC_U8, root);
        if (st == FSC_OK) st = fsc_device_download(e->dev, why, d, sizeof why);
        fsc_device_release(e->dev, d);
        FSC_TRY(st);
        why[sizeof why - 1] = '\0';
        return last ? fsc_error(p->out_status, "%s", p->out_why)
                    : fsc_error((fsc_status)(-1 - per), "predict: the pipeline's last stage could not take the "
                                "outputs: %s", why);
    }
    *per_sample = (size_t)per;
    const size_t n = (size_t)samples * *per_sample;
    if (!n) return FSC_OK;
    FSC_TRY(fsc_device_alloc(e->dev, FSC_TAG_COMM, n * sizeof(float), &d));
    st = last ? fsc_device_upload(e->dev, d, out, n * sizeof(float)) : FSC_OK;
    if (st == FSC_OK) st = fsc_comm_broadcast(p->pipe_comm, d, n, FSC_F32, root);
    if (st == FSC_OK && !last) st = fsc_device_download(e->dev, out, d, n * sizeof(float));
    fsc_device_release(e->dev, d);
    return st;
}

fsc_status fsc_pipe_from_last(fsc_engine *e, double sums[3]) { return from_last_stage(e->pipe, e->dev, sums); }

/* The inputs and output gradients this rank receives in a step (or, the inputs, in an evaluation): one per
 * micro-batch on each chunk that is not the first stage (not the last). */
static void count_receives(fsc_pipe *p) {
    memset(p->in_left, 0, sizeof p->in_left);
    memset(p->grad_left, 0, sizeof p->grad_left);
    for (int c = 0; c < p->v; c++) {
        const int g = stage_at(p, c);
        p->in_left[line_of(p, c)] += p->M * (g > 0 && !prev_local(p, c));
        p->grad_left[line_of(p, c)] += p->M * (g < p->S - 1 && !next_local(p, c));
    }
}

/* Post the first receives of both lines (po.prefetch), the output gradients' only in a step (grads). */
static fsc_status post_first(fsc_pipe *p, int grads) {
    FSC_TRY(fsc_pipe_links_post_input(&p->lk));
    FSC_TRY(fsc_pipe_links_post_input(&p->lk2));
    if (!grads) return FSC_OK;
    FSC_TRY(fsc_pipe_links_post_grad(&p->lk));
    return fsc_pipe_links_post_grad(&p->lk2);
}

/* ---- the executor of a step's actions (step.c runs them) ---- */

/* An evaluation (c->eval, an F-only list: step.c): the pools and the first inputs posted (po.prefetch) as a
 * step's, no common start; each forward's record and saved input back to the pools at once, its output's send
 * waited for first; the loss over the last stage's data group, to every stage; no statistics of the step. */
/* Give up on the boundary streams of l (po.prefetch's links; fsc_comm_revoke). */
static void revoke_links(fsc_pipe_links *l, const char *why) {
    fsc_comm *all[4] = { l->act_prev, l->act_next, l->grad_prev, l->grad_next };
    for (int i = 0; i < 4; i++) fsc_comm_revoke(all[i], why);
}

/* An action failed: say so for every later step (see out_of_step), with its error. This stage sends nothing more
 * of the step, and no later step runs, so it gives up on its boundary streams (po.prefetch's links and tied
 * streams): a neighbour waiting for a message from it, and this stage's own receives posted ahead (which
 * fsc_engine_free and the next step wait for), fail at once naming this rank and its error, instead of waiting for
 * the timeout, where the communicator can (the simulated one). The pipeline group itself stays: the next step's
 * start agrees the refusal over it, and the parameters can still be read or saved. */
static void mark_out_of_step(fsc_pipe *p, char kind, int k, int ch) {
    if (p->out_of_step[0]) return;
    snprintf(p->out_of_step, sizeof p->out_of_step, "%c%d of chunk %d failed (%s)", kind, k, ch, fsc_last_error());
    char why[400];
    snprintf(why, sizeof why, "pipeline stage %d's action %s", p->stage, p->out_of_step);
    revoke_links(&p->lk, why);
    revoke_links(&p->lk2, why);
    for (int x = 0; x < p->ntied && p->tl; x++) {
        fsc_comm_revoke(p->tl[x].val, why);
        fsc_comm_revoke(p->tl[x].grad, why);
    }
}

/* A step or evaluation after a failed action of this rank: refused, never run on boundary messages left by the
 * failed step (a step's start agrees it over the pipeline, so every stage refuses; an evaluation has no common
 * start: its other stages wait for this one, which fails them at once on links it gave up (mark_out_of_step),
 * else at the timeout or when its rank returns). */
static fsc_status check_in_step(const fsc_pipe *p) {
    if (!p->out_of_step[0]) return FSC_OK;
    return fsc_error(FSC_ERR_STATE, "pipeline stage %d: an earlier step's action %s; its boundary messages may be "
                     "left unread, which this step would take for its own: make the engine again (or resume from a "
                     "checkpoint)", p->stage, p->out_of_step);
}

static fsc_status eval_begin(fsc_engine *e, fsc_step_ctx *c) {
    fsc_pipe *p = e->pipe;
    FSC_TRY(check_in_step(p));
    if (c->K != p->M)
        return fsc_error(FSC_ERR_INTERNAL, "pipe: an evaluation of %d micro-batches in a pipeline of %d", c->K, p->M);
    FSC_TRY(ready(e, c->mb));
    count_receives(p);
    FSC_TRY(post_first(p, 0));
    FSC_TRY(tied_post(e, 0));
    memset(p->send_tied, 1, (size_t)p->v);
    c->wait = &p->wait;
    c->units = p->unit_loss; /* the last stage's compute writes them (step_compute.c) */
    c->out = p->outputs;
    c->per_sample = p->per_sample;
    return FSC_OK;
}

static fsc_status eval_forward(fsc_engine *e, fsc_step_ctx *c, int k, int ch) {
    fsc_pipe *p = e->pipe;
    const fsc_status st = forward(e, c, k, ch);
    if (st != FSC_OK) mark_out_of_step(p, 'F', k, ch);
    FSC_TRY(st);
    FSC_TRY(send_done(&p->slots[ch * p->M + k]));
    reset_pools(e, c->mb);
    return FSC_OK;
}

static fsc_status eval_end(fsc_engine *e, fsc_step_ctx *c) {
    fsc_pipe *p = e->pipe;
    p->out_status = c->out_status; /* for fsc_pipe_outputs_from_last */
    snprintf(p->out_why, sizeof p->out_why, "%s", c->out_why);
    FSC_TRY(fsc_pipe_links_sends_done(&p->lk, &p->wait)); /* the checkpointed outputs' sends */
    FSC_TRY(fsc_pipe_links_sends_done(&p->lk2, &p->wait));
    return tied_values_done(p, 0);
}

/* *batch FSC_ERR_INVALID when the check failed, its message the last stage's (sum_doubles) there. */
static fsc_status eval_sums(fsc_engine *e, fsc_step_ctx *c, double *total, fsc_status *batch) {
    fsc_pipe *p = e->pipe;
    double sums[3] = { 0, 1, 0 };
    if (p->stage == last_rank(p)) {
        const double mine[3] = { c->loss, (double)c->mb * p->M, (double)c->global_batch };
        FSC_TRY(sum_doubles(e, p->data_comm, mine, sums));
    }
    FSC_TRY(from_last_stage(p, e->dev, sums));
    *total = sums[0];
    *batch = sums[1] ? FSC_OK : FSC_ERR_INVALID;
    return FSC_OK;
}

/* Before the first action: the pools for micro-batches of c->mb, a common start (the bubble is measured from
 * there), and with po.prefetch the first input and output gradient posted, to arrive while the stage works. */
static fsc_status exec_begin(fsc_engine *e, fsc_step_ctx *c) {
    fsc_pipe *p = e->pipe;
    if (c->eval) return eval_begin(e, c);
    FSC_TRY(ready(e, c->mb));
    memset(p->send_tied, 1, (size_t)p->v);
    p->wait = 0;
    c->units = p->unit_loss; /* the last stage's compute writes them (step_compute.c) */
    c->acts = p->acts;
    c->nacts = p->nacts;
    c->wait = &p->wait;
    /* each chunk's Bs (Ws) run in ascending micro-batch order, so the last one's reduces under no_sync */
    c->reduces = p->split ? FSC_ACT_WEIGHT : FSC_ACT_BACKWARD;
    /* the stages start together, or all refuse with a stage's earlier failed action (check_in_step) */
    FSC_TRY(fsc_comm_agree(p->pipe_comm, e->dev, check_in_step(p)));
    p->t0 = fsc_clock_now();
    count_receives(p);
    FSC_TRY(post_first(p, 1));
    return tied_post(e, 1);
}

/* One action, its compute time (without the time it waited) added to the stats of its kind. */
static fsc_status exec_action(fsc_engine *e, fsc_step_ctx *c, fsc_pipe_action_kind kind, int k, int ch) {
    fsc_pipe *p = e->pipe;
    const double waited = p->wait, ta = fsc_clock_now();
    fsc_status st = kind == FSC_ACT_FORWARD ? forward(e, c, k, ch)
                    : kind == FSC_ACT_BACKWARD ? backward(e, c, k, ch) : weight(e, c, k, ch);
    p->st.action_s[kind] += fsc_clock_now() - ta - (p->wait - waited);
    if (st != FSC_OK) mark_out_of_step(p, "FBW"[kind], k, ch);
    return st;
}
static fsc_status exec_forward(fsc_engine *e, fsc_step_ctx *c, int k, int ch) {
    if (c->eval) return eval_forward(e, c, k, ch);
    return exec_action(e, c, FSC_ACT_FORWARD, k, ch);
}
static fsc_status exec_backward(fsc_engine *e, fsc_step_ctx *c, int k, int ch) {
    return exec_action(e, c, FSC_ACT_BACKWARD, k, ch);
}
static fsc_status exec_weight(fsc_engine *e, fsc_step_ctx *c, int k, int ch) {
    return exec_action(e, c, FSC_ACT_WEIGHT, k, ch);
}

/* After the last action: nothing of this step stays in flight. */
static fsc_status exec_end(fsc_engine *e, fsc_step_ctx *c) {
    fsc_pipe *p = e->pipe;
    if (c->eval) return eval_end(e, c);
    FSC_TRY(grad_sends_done(p));
    FSC_TRY(tied_sends_done(p, -1));
    FSC_TRY(tied_values_done(p, 0));
    FSC_TRY(fsc_pipe_links_sends_done(&p->lk, &p->wait));
    FSC_TRY(fsc_pipe_links_sends_done(&p->lk2, &p->wait));
    p->run_s = fsc_clock_now() - p->t0;
    return FSC_OK;
}

/* The loss and the batch check: over the last stage's data group, then sent to every stage (sums[0] the loss,
 * sums[1] the check passed, sums[2] the local batches' sum); the MoE statistics (pipe_stats.c) unless the exact
 * reduction sums them per unit. The time counts as waited, and with the actions' as the step's. */
static fsc_status exec_sums(fsc_engine *e, fsc_step_ctx *c, double *total, double moe[3], fsc_status *batch) {
    fsc_pipe *p = e->pipe;
    if (c->eval) return eval_sums(e, c, total, batch);
    const int global_batch = c->global_batch;
    const double t1 = fsc_clock_now();
    double sums[3] = { 0, 1, 0 };
    char why[512] = "";
    if (p->stage == last_rank(p)) {
        const double mine[3] = { c->loss, (double)c->mb * p->M, (double)global_batch };
        FSC_TRY(sum_doubles(e, p->data_comm, mine, sums));
        if (!sums[1]) snprintf(why, sizeof why, "%s", fsc_last_error());
    }
    FSC_TRY(from_last_stage(p, e->dev, sums));
    *batch = FSC_OK;
    if (!sums[1] && why[0]) *batch = fsc_error(FSC_ERR_INVALID, "%s", why);
    else if (!sums[1])
        *batch = fsc_error(FSC_ERR_INVALID, "global batch %d: the last pipeline stage's data group found the batch "
                           "sizes inconsistent (its local batches sum to %.0f)", global_batch, sums[2]);
    else if (sums[2] != (double)global_batch) /* an earlier stage's own argument */
        *batch = fsc_error(FSC_ERR_INVALID, "global batch %d is not the sum of the local batches over the data group "
                           "(%.0f, as the last pipeline stage counts them)", global_batch, sums[2]);
    *total = sums[0];
    const double t2 = fsc_clock_now();
    p->wait += t2 - t1;
    p->st.steps++;
    p->st.micro_batches = p->M;
    p->st.wall_s += p->run_s + (t2 - t1);
    p->st.wait_s += p->wait;
    return p->aux && !e->exact ? fsc_pipe_aux_sum(p->aux, e, moe) : FSC_OK;
}

const fsc_step_exec fsc_pipe_exec = { exec_begin, { exec_forward, exec_backward, exec_weight }, exec_end, exec_sums };

fsc_status fsc_engine_pipe_stats(const fsc_engine *e, fsc_pipe_stats *out) {
    FSC_CHECK_ARG(e);
    FSC_CHECK_ARG(out);
    memset(out, 0, sizeof *out);
    if (!e->pipe) {
        out->pp = 1;
        out->dp = e->lay.dp;
        out->dp_index = e->lay.data;
        out->first_layer = e->lf;
        out->last_layer = e->ll;
        out->chunks = 1;
        out->chunk_layers[0][1] = e->lf, out->chunk_layers[0][2] = e->ll;
        out->micro_batches = e->po.accum;
        return FSC_OK;
    }
    const fsc_pipe *p = e->pipe;
    *out = p->st;
    out->bubble = out->wall_s > 0 ? out->wait_s / out->wall_s : 0;
    out->ideal_bubble = fsc_pipe_formula_bubble(p->pp, p->v, p->M, p->any_w && e->m->ops->backward_input &&
                                                                      e->m->ops->backward_weight);
    return FSC_OK;
}

double fsc_pipe_formula_bubble(int pp, int v, int m, int split) {
    if (pp <= 1 || m < 1) return 0;
    const double fill = pp - 1, chunks = v > 1 ? v : 1;
    /* a chunk's F of each stage's fill against m micro-batches of v chunks' F + B (+ W): split, (p-1) f of 3 v m f */
    return fill / ((split ? 3 : 1) * chunks * m + fill);
}

void fsc_engine_reset_pipe_stats(fsc_engine *e) {
    if (!e) return;
    fsc_pipe *p = e->pipe;
    if (!p) return;
    p->st.steps = 0;
    p->st.wall_s = p->st.wait_s = 0;
    memset(p->st.action_s, 0, sizeof p->st.action_s);
    p->st.max_in_flight = p->in_flight;
    p->st.max_full_records = p->full_in_use;
    p->st.peak_acts_bytes = p->bytes_in_use;
    p->st.records_made = p->st.records_remade = 0;
}

void fsc_pipe_free(fsc_engine *e) {
    fsc_pipe *p = e->pipe;
    if (!p) return;
    if (p->lout && p->lgrad && (p->ltg || !p->nlt)) locals_reset(e);
    if (p->slots && p->nrecs && p->recs) reset_pools(e, -1);
    for (int i = 0; i < p->nltg_free; i++) fsc_device_release(e->dev, p->ltg_free[i]);
    fsc_pipe_links_free(&p->lk, e->dev);
    fsc_pipe_links_free(&p->lk2, e->dev);
    for (int x = 0; x < p->ntied && p->tl; x++) fsc_pipe_tied_free(&p->tl[x], e->dev);
    free(p->tl);
    free(p->slots);
    free(p->recs);
    free(p->nrecs);
    free(p->send_tied);
    free(p->gp_rec);
    free(p->gp_req);
    free(p->gp_chunk);
    free(p->lout);
    free(p->lgrad);
    free(p->lt);
    free(p->ltg);
    free(p->ltg_free);
    free(p->lf);
    free(p->ll);
    free(p->tied);
    fsc_pipe_schedule_free(p->acts);
    fsc_pipe_aux_free(p->aux);
    free(p);
    e->pipe = NULL;
}
