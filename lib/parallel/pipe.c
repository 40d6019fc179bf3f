/* Pipeline parallelism: the GPT cut into stages by a balance (blocks per stage), one stage per rank of a
 * pipeline group; micro-batches flow forward and their gradients backward over send/recv; GPipe and 1F1B
 * schedules; checkpoint modes; any data-parallel strategy (DDP, FSDP, ZeRO) inside each stage's group.
 *
 * Layout (the engine's fsc_layout; Megatron's by default): world = dp x tp x pp, without tensor parallelism
 * rank = stage * dp + dp_index, data-parallel ranks adjacent. The pipeline group holds the ranks of one
 * (dp_index, tensor rank), ordered by stage, the data group the ranks of one (stage, tensor rank) (e->comm:
 * the strategy reduces over it). Stage 0 runs the embedding and its blocks, the last stage its blocks and
 * the head. With tensor parallelism (tp_engine.c) every stage runs its layers of the tensor-parallel GPT:
 * boundary activations (a sequence shard under sequence parallelism), the wte slice and its head
 * gradient travel between the same tensor rank of two stages; the engine's model operations hide which
 * model runs.
 *
 * Equality with DDP (accum = M, no_sync): every stage runs its layers with the same kernels on the same
 * inputs; backward goes through the micro-batches in ascending order on every stage, so each gradient
 * accumulates in the same order; the strategy reduces once, in the last micro-batch's backward. The tied
 * embedding: the last stage sends the head's dwte_head of micro-batch k to stage 0, which puts it in its
 * m->dwte_head before its backward of k (the embedding backward adds it first, as on one rank). Stage 0
 * sends the wte values it computes with (its compute copy: rounded when param_dtype is not f32) to the
 * last stage's wte_copy once per step, right after its first use (layer 0 of the first forward). This
 * equals sending after the optimizer step, works unchanged for every strategy and after loading weights.
 *
 * Messages between two ranks keep their order (sends are buffered, FIFO per peer; a communicator whose
 * send blocks until the matching recv would need grouped send/recv here):
 *   stage 0 -> last   wte, once per step, before the output of micro-batch 0
 *   s -> s+1          output of micro-batch k (forward)
 *   s+1 -> s          gradient w.r.t. the input of micro-batch k (backward)
 *   last -> 0         dwte_head of micro-batch k, after the gradient of k
 *
 * Checkpointing (FairScale's): a checkpointed micro-batch keeps only its stage input (stage 0: its
 * tokens, in the caller's host memory) and runs the whole stage forward again just before its backward.
 * Full records and saved inputs come from pools, so the device ledger's FSC_TAG_ACTS peak is the most the
 * schedule held at once.
 * Not here: balance helpers (pipe_balance.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "pipe.h"

typedef struct {
    fsc_model_acts *rec; /* full record, NULL while checkpointed */
    float *saved;        /* checkpointed on a stage > 0: the stage input (B, T, C) */
    int ckpt;
} mb_slot;

struct fsc_pipe {
    int pp, dp, stage, dpi;
    int *lf, *ll;             /* (pp) layer range of every stage */
    fsc_comm *pipe_comm;      /* the ranks of this dp_index, by stage */
    fsc_comm *data_comm;      /* the ranks of this stage, by dp_index (e->comm) */
    fsc_comm *norm_comm;      /* clipping over every stage, when made here */
    /* pools of records and saved inputs not in use, kept allocated between steps */
    int B;
    fsc_model_acts **recs;
    int nrecs, nrecs_made;
    float **ins;
    int nins, nins_made;
    int full_in_use, in_flight;
    size_t bytes_in_use;
    mb_slot *slots;           /* (M) */
    int M;
    /* the step */
    const int32_t *tok, *tgt;
    int send_wte;             /* stage 0: the next layer-0 forward sends wte */
    int recompute;            /* a checkpointed forward runs again */
    double wait;              /* seconds waited in this step */
    fsc_pipe_stats st;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int fsc_pipe_stages(const fsc_parallel_opts *po) { return po->pp > 1 ? po->pp : 1; }

fsc_status fsc_pipe_check_balance(const int *balance, int pp, int layers) {
    long sum = 0;
    for (int s = 0; s < pp; s++) {
        if (balance[s] < 1)
            return fsc_error(FSC_ERR_INVALID, "balance[%d] is %d: stage %d would have no block (every stage needs "
                             "at least one)", s, balance[s], s);
        sum += balance[s];
    }
    if (sum != layers)
        return fsc_error(FSC_ERR_INVALID, "balance sums to %ld but the model has %d blocks", sum, layers);
    return FSC_OK;
}

fsc_status fsc_pipe_validate(const fsc_rank *r, const fsc_gpt_config *cfg, const fsc_parallel_opts *po) {
    if (po->pp < 0) return fsc_error(FSC_ERR_INVALID, "pp (pipeline stages) must be >= 1, not %d", po->pp);
    const int pp = fsc_pipe_stages(po), L = cfg->layers;
    if (pp == 1) {
        if (po->balance) return fsc_error(FSC_ERR_INVALID, "a balance is given but pp is 1 (no pipeline)");
        return FSC_OK;
    }
    if (r->world % pp != 0)
        return fsc_error(FSC_ERR_INVALID, "a world of %d ranks does not split into %d pipeline stages "
                         "(world = dp x pp)", r->world, pp);
    if (pp > L)
        return fsc_error(FSC_ERR_INVALID, "%d pipeline stages but the model has %d blocks (every stage needs at "
                         "least one)", pp, L);
    if (po->schedule != FSC_SCHED_GPIPE && po->schedule != FSC_SCHED_1F1B)
        return fsc_error(FSC_ERR_INVALID, "unknown pipeline schedule %d (gpipe or 1f1b)", (int)po->schedule);
    if (po->pipe_checkpoint != FSC_PIPE_CKPT_EXCEPT_LAST && po->pipe_checkpoint != FSC_PIPE_CKPT_ALWAYS &&
        po->pipe_checkpoint != FSC_PIPE_CKPT_NEVER)
        return fsc_error(FSC_ERR_INVALID, "unknown pipeline checkpoint mode %d (always, except_last or never)",
                         (int)po->pipe_checkpoint);
    if (!po->no_sync)
        return fsc_error(FSC_ERR_INVALID, "a pipeline (pp %d) reduces gradients once per step, after the last "
                         "micro-batch: set no_sync", pp);
    if (po->balance) FSC_TRY(fsc_pipe_check_balance(po->balance, pp, L));
    return FSC_OK;
}

fsc_status fsc_pipe_create(fsc_engine *e) {
    const int pp = fsc_pipe_stages(&e->po), L = e->cfg.layers;
    if (pp == 1) return FSC_OK;
    fsc_pipe *p = calloc(1, sizeof *p);
    if (!p) return fsc_error(FSC_ERR_NOMEM, "pipe: out of memory");
    e->pipe = p;
    const fsc_layout *l = &e->lay;
    p->pp = pp;
    p->dp = l->dp;
    p->stage = l->pipe;
    p->dpi = l->data;
    p->M = e->po.accum;
    p->lf = calloc((size_t)pp, sizeof(int));
    p->ll = calloc((size_t)pp, sizeof(int));
    p->slots = calloc((size_t)p->M, sizeof *p->slots);
    p->recs = calloc((size_t)p->M + 2, sizeof *p->recs);
    p->ins = calloc((size_t)p->M + 2, sizeof *p->ins);
    if (!p->lf || !p->ll || !p->slots || !p->recs || !p->ins) return fsc_error(FSC_ERR_NOMEM, "pipe: out of memory");
    /* stage s runs blocks [first, first + balance[s]); even: the first L % pp stages take one more */
    int first = 1;
    for (int s = 0; s < pp; s++) {
        int n = e->po.balance ? e->po.balance[s] : L / pp + (s < L % pp);
        p->lf[s] = s == 0 ? 0 : first;
        p->ll[s] = s == pp - 1 ? L + 1 : first + n - 1;
        first += n;
    }
    /* the colors of fsc_layout_split: the ranks sharing the other two coordinates */
    FSC_TRY(fsc_comm_split(e->r->comm, l->data * l->tp + l->tensor, p->stage, &p->pipe_comm));
    fsc_comm_set_name(p->pipe_comm, "pipe");
    FSC_TRY(fsc_comm_split(e->r->comm, p->stage * l->tp + l->tensor, p->dpi, &p->data_comm));
    fsc_comm_set_name(p->data_comm, "data");
    e->comm = p->data_comm;
    fsc_engine_add_group_kind(e, p->pipe_comm, FSC_GROUP_PIPELINE);
    fsc_engine_add_group_kind(e, e->r->comm, FSC_GROUP_WORLD); /* the non-finite vote and saving */
    e->lf = p->lf[p->stage];
    e->ll = p->ll[p->stage];
    p->st.pp = pp;
    p->st.dp = p->dp;
    p->st.stage = p->stage;
    p->st.dp_index = p->dpi;
    p->st.first_layer = e->lf;
    p->st.last_layer = e->ll;
    return FSC_OK;
}

/* The strategy clips over the ranks that split its gradients (NULL: none); across the stages the
 * gradients are split further, so the norm is taken over those ranks of every stage. */
fsc_status fsc_pipe_after_setup(fsc_engine *e) {
    fsc_pipe *p = e->pipe;
    if (!p) return FSC_OK;
    if (!e->norm_comm) {
        e->norm_comm = p->pipe_comm;
        return FSC_OK;
    }
    /* the same strategy on every stage: name the group by its lowest data-group rank */
    float v = -(float)fsc_comm_rank(p->data_comm);
    FSC_TRY(fsc_comm_all_reduce_host(e->norm_comm, e->dev, &v, FSC_MAX));
    FSC_TRY(fsc_comm_split(e->r->comm, (int)-v, e->r->rank, &p->norm_comm));
    fsc_comm_set_name(p->norm_comm, "norm");
    fsc_engine_add_group_kind(e, p->norm_comm, FSC_GROUP_WORLD);
    e->norm_comm = p->norm_comm;
    return FSC_OK;
}

/* ---- pools ---- */

static void note_use(fsc_pipe *p) {
    if (p->full_in_use > p->st.max_full_records) p->st.max_full_records = p->full_in_use;
    if (p->bytes_in_use > p->st.peak_acts_bytes) p->st.peak_acts_bytes = p->bytes_in_use;
}

static fsc_status take_rec(fsc_engine *e, fsc_model_acts **out) {
    fsc_pipe *p = e->pipe;
    if (p->nrecs > 0) {
        *out = p->recs[--p->nrecs];
    } else {
        fsc_gpt_acts_opts o = { .B = p->B, .T = e->cfg.seq, .first = e->lf, .last = e->ll,
                                .checkpoint = e->po.checkpoint };
        FSC_TRY(e->mo->acts_create(e, &o, out));
        p->nrecs_made++;
    }
    p->full_in_use++;
    p->bytes_in_use += e->mo->acts_bytes(*out);
    note_use(p);
    return FSC_OK;
}

static void give_rec(fsc_engine *e, fsc_model_acts *a) {
    fsc_pipe *p = e->pipe;
    p->recs[p->nrecs++] = a; /* at most M + 1 records exist: M in flight and one recomputing */
    p->full_in_use--;
    p->bytes_in_use -= e->mo->acts_bytes(a);
}

static size_t in_floats(const fsc_engine *e) { return e->mo->stream_floats(e, e->pipe->B); }

static fsc_status take_in(fsc_engine *e, float **out) {
    fsc_pipe *p = e->pipe;
    if (p->nins > 0) {
        *out = p->ins[--p->nins];
    } else {
        FSC_TRY(fsc_device_alloc(e->dev, FSC_TAG_ACTS, in_floats(e) * sizeof(float), (void **)out));
        p->nins_made++;
    }
    p->bytes_in_use += in_floats(e) * sizeof(float);
    note_use(p);
    return FSC_OK;
}

static void give_in(fsc_engine *e, float *x) {
    fsc_pipe *p = e->pipe;
    p->ins[p->nins++] = x;
    p->bytes_in_use -= in_floats(e) * sizeof(float);
}

/* Return every micro-batch's memory (after a failed step) and, for another micro-batch size, free the pools. */
static void reset_pools(fsc_engine *e, int B) {
    fsc_pipe *p = e->pipe;
    for (int k = 0; k < p->M; k++) {
        if (p->slots[k].rec) give_rec(e, p->slots[k].rec);
        if (p->slots[k].saved) give_in(e, p->slots[k].saved);
        p->slots[k] = (mb_slot){ 0 };
    }
    p->in_flight = 0;
    if (B == p->B) return;
    while (p->nrecs > 0) e->mo->acts_free(e, p->recs[--p->nrecs]);
    while (p->nins > 0) fsc_device_release(e->dev, p->ins[--p->nins]);
    p->nrecs_made = p->nins_made = 0;
    p->B = B;
}

/* ---- hooks: the engine's (fsc_engine_hooks), and stage 0 hands wte to the last stage after its first use ---- */

static fsc_status h_post_fwd(void *ctx, int l) {
    fsc_engine *e = ctx;
    fsc_pipe *p = e->pipe;
    if (l == 0 && p->send_wte && !p->recompute) {
        p->send_wte = 0;
        FSC_TRY(fsc_comm_send(p->pipe_comm, e->m->param[FSC_P_WTE], e->m->info[FSC_P_WTE].numel, FSC_F32,
                              p->pp - 1));
    }
    return e->st->post_forward ? e->st->post_forward(e, l) : FSC_OK;
}

static fsc_status recv_timed(fsc_pipe *p, float *buf, size_t n, int peer) {
    double t0 = now_s();
    fsc_status s = fsc_comm_recv(p->pipe_comm, buf, n, FSC_F32, peer);
    p->wait += now_s() - t0;
    return s;
}

static int is_checkpointed(const fsc_engine *e, int k) {
    switch (e->po.pipe_checkpoint) {
    case FSC_PIPE_CKPT_ALWAYS: return 1;
    case FSC_PIPE_CKPT_NEVER: return 0;
    default: return k < e->pipe->M - 1;
    }
}

/* ---- one micro-batch forward and backward on this stage ---- */

static fsc_status set_batch(fsc_engine *e, fsc_model_acts *a, int k) {
    fsc_pipe *p = e->pipe;
    size_t off = (size_t)k * p->B * e->cfg.seq;
    return e->mo->set_batch(e, a, p->stage == 0 ? p->tok + off : NULL, p->stage == p->pp - 1 ? p->tgt + off : NULL);
}

static fsc_status forward(fsc_engine *e, int k, double *loss_local) {
    fsc_pipe *p = e->pipe;
    mb_slot *sl = &p->slots[k];
    const int last = p->stage == p->pp - 1;
    const size_t btc = in_floats(e);
    fsc_gpt_hooks hooks = fsc_engine_hooks(e);
    hooks.post_forward = h_post_fwd;
    e->micro = k;
    e->sync = 0;
    FSC_TRY(take_rec(e, &sl->rec));
    if (++p->in_flight > p->st.max_in_flight) p->st.max_in_flight = p->in_flight;
    fsc_model_acts *a = sl->rec;
    if (last && k == 0) FSC_TRY(recv_timed(p, e->wte_copy, e->m->info[FSC_P_WTE].numel, 0));
    if (p->stage > 0) FSC_TRY(recv_timed(p, e->mo->stream(a, FSC_STREAM_INPUT), btc, p->stage - 1));
    FSC_TRY(set_batch(e, a, k));
    double ls = 0;
    FSC_TRY(e->mo->forward(e, a, &hooks, &ls));
    if (last) *loss_local += ls;
    else FSC_TRY(fsc_comm_send(p->pipe_comm, e->mo->stream(a, FSC_STREAM_OUTPUT), btc, FSC_F32, p->stage + 1));
    sl->ckpt = is_checkpointed(e, k);
    if (sl->ckpt) { /* keep the stage input only */
        if (p->stage > 0) {
            FSC_TRY(take_in(e, &sl->saved));
            FSC_TRY(fsc_device_copy(e->dev, sl->saved, e->mo->stream(a, FSC_STREAM_INPUT), btc * sizeof(float)));
        }
        give_rec(e, a);
        sl->rec = NULL;
    }
    return FSC_OK;
}

static fsc_status backward(fsc_engine *e, int k, float dscale) {
    fsc_pipe *p = e->pipe;
    mb_slot *sl = &p->slots[k];
    const int last = p->stage == p->pp - 1;
    const size_t btc = in_floats(e);
    fsc_gpt_hooks hooks = fsc_engine_hooks(e);
    hooks.post_forward = h_post_fwd;
    e->micro = k;
    e->sync = 0;
    if (sl->ckpt) { /* recompute the stage from its input: the same kernels on the same input */
        FSC_TRY(take_rec(e, &sl->rec));
        if (sl->saved) {
            FSC_TRY(fsc_device_copy(e->dev, e->mo->stream(sl->rec, FSC_STREAM_INPUT), sl->saved, btc * sizeof(float)));
            give_in(e, sl->saved);
            sl->saved = NULL;
        }
        FSC_TRY(set_batch(e, sl->rec, k));
        p->recompute = 1;
        fsc_status s = e->mo->forward(e, sl->rec, &hooks, NULL);
        p->recompute = 0;
        FSC_TRY(s);
    }
    fsc_model_acts *a = sl->rec;
    if (!last) FSC_TRY(recv_timed(p, e->mo->stream(a, FSC_STREAM_GRAD_OUTPUT), btc, p->stage + 1));
    if (p->stage == 0) FSC_TRY(recv_timed(p, e->m->dwte_head, e->m->info[FSC_P_WTE].numel, p->pp - 1));
    e->sync = k == p->M - 1; /* the strategy reduces in the last backward only (no_sync) */
    FSC_TRY(e->mo->backward(e, a, &hooks, dscale));
    e->sync = 0;
    if (p->stage > 0)
        FSC_TRY(fsc_comm_send(p->pipe_comm, e->mo->stream(a, FSC_STREAM_GRAD_INPUT), btc, FSC_F32, p->stage - 1));
    if (last) FSC_TRY(fsc_comm_send(p->pipe_comm, e->m->dwte_head, e->m->info[FSC_P_WTE].numel, FSC_F32, 0));
    give_rec(e, a);
    sl->rec = NULL;
    p->in_flight--;
    return FSC_OK;
}

/* Over the ranks of c, each passing mine = (loss, local batch, global batch): the sum of the losses in rank
 * order (the same bits on every rank) into out[0], the sum of the local batches into out[2], and into out[1]
 * 1 if the batch check (fsc_engine_check_batch) passes, else 0 with the message set. One all-gather. */
static fsc_status sum_doubles(fsc_engine *e, fsc_comm *c, const double mine[3], double out[3]) {
    int n = fsc_comm_size(c);
    double *all = malloc((size_t)n * 5 * sizeof(double)), *pairs = all ? all + (size_t)n * 3 : NULL;
    void *d = NULL;
    if (!all) return fsc_error(FSC_ERR_NOMEM, "pipe: out of memory");
    fsc_status s = fsc_device_alloc(e->dev, FSC_TAG_COMM, (size_t)(n + 1) * 3 * sizeof(double), &d);
    double *dsend = (double *)d + (size_t)n * 3;
    if (s == FSC_OK) s = fsc_device_upload(e->dev, dsend, mine, 3 * sizeof(double));
    if (s == FSC_OK) s = fsc_comm_all_gather(c, dsend, d, 3 * sizeof(double), FSC_U8);
    if (s == FSC_OK) s = fsc_device_download(e->dev, all, d, (size_t)n * 3 * sizeof(double));
    if (s == FSC_OK) {
        double acc = all[0], batches = all[1];
        for (int i = 1; i < n; i++) acc += all[(size_t)i * 3], batches += all[(size_t)i * 3 + 1];
        for (int i = 0; i < n; i++) pairs[2 * i] = all[(size_t)i * 3 + 1], pairs[2 * i + 1] = all[(size_t)i * 3 + 2];
        out[0] = acc;
        out[1] = fsc_engine_check_batch(pairs, n) == FSC_OK;
        out[2] = batches;
    }
    fsc_device_release(e->dev, d);
    free(all);
    return s;
}

fsc_status fsc_pipe_run(fsc_engine *e, const int32_t *tokens, const int32_t *targets, int mb, int global_batch,
                        float dscale, double *loss_total, fsc_status *batch) {
    fsc_pipe *p = e->pipe;
    const int M = p->M, P = p->pp, s = p->stage;
    reset_pools(e, mb);
    p->tok = tokens;
    p->tgt = targets;
    p->send_wte = s == 0;
    p->wait = 0;
    FSC_TRY(fsc_comm_barrier(p->pipe_comm)); /* a common start: the bubble is measured from here */
    const double t0 = now_s();
    double loss_local = 0;
    if (e->po.schedule == FSC_SCHED_GPIPE) {
        for (int k = 0; k < M; k++) FSC_TRY(forward(e, k, &loss_local));
        for (int k = 0; k < M; k++) FSC_TRY(backward(e, k, dscale));
    } else { /* 1F1B: warm-up forwards, then one forward one backward, then the remaining backwards */
        int warm = P - s - 1 < M ? P - s - 1 : M;
        for (int k = 0; k < warm; k++) FSC_TRY(forward(e, k, &loss_local));
        for (int k = 0; k < M - warm; k++) {
            FSC_TRY(forward(e, warm + k, &loss_local));
            FSC_TRY(backward(e, k, dscale));
        }
        for (int k = M - warm; k < M; k++) FSC_TRY(backward(e, k, dscale));
    }
    /* the loss and the batch check: over the last stage's data group, then sent to every stage
     * (sums[0] the loss, sums[1] the check passed, sums[2] the local batches' sum) */
    const double t1 = now_s();
    double sums[3] = { 0, 1, 0 };
    char why[512] = "";
    if (s == P - 1) {
        const double mine[3] = { loss_local, (double)mb * M, (double)global_batch };
        FSC_TRY(sum_doubles(e, p->data_comm, mine, sums));
        if (!sums[1]) snprintf(why, sizeof why, "%s", fsc_last_error());
    }
    double *d;
    FSC_TRY(fsc_device_alloc(e->dev, FSC_TAG_COMM, sizeof sums, (void **)&d));
    fsc_status st = fsc_device_upload(e->dev, d, sums, sizeof sums);
    if (st == FSC_OK) st = fsc_comm_broadcast(p->pipe_comm, d, sizeof sums, FSC_U8, P - 1);
    if (st == FSC_OK) st = fsc_device_download(e->dev, sums, d, sizeof sums);
    fsc_device_release(e->dev, d);
    FSC_TRY(st);
    *batch = FSC_OK;
    if (!sums[1] && why[0]) *batch = fsc_error(FSC_ERR_INVALID, "%s", why);
    else if (!sums[1])
        *batch = fsc_error(FSC_ERR_INVALID, "global batch %d: the last pipeline stage's data group found the batch "
                           "sizes inconsistent (its local batches sum to %.0f)", global_batch, sums[2]);
    else if (sums[2] != (double)global_batch) /* an earlier stage's own argument */
        *batch = fsc_error(FSC_ERR_INVALID, "global batch %d is not the sum of the local batches over the data group "
                           "(%.0f, as the last pipeline stage counts them)", global_batch, sums[2]);
    const double total = sums[0];
    const double t2 = now_s();
    p->wait += t2 - t1;
    *loss_total = total;
    p->st.steps++;
    p->st.micro_batches = M;
    p->st.wall_s += t2 - t0;
    p->st.wait_s += p->wait;
    return FSC_OK;
}

fsc_status fsc_engine_pipe_stats(const fsc_engine *e, fsc_pipe_stats *out) {
    memset(out, 0, sizeof *out);
    if (!e->pipe) {
        out->pp = 1;
        out->dp = e->lay.dp;
        out->dp_index = e->lay.data;
        out->first_layer = e->lf;
        out->last_layer = e->ll;
        out->micro_batches = e->po.accum;
        return FSC_OK;
    }
    const fsc_pipe *p = e->pipe;
    *out = p->st;
    out->bubble = out->wall_s > 0 ? out->wait_s / out->wall_s : 0;
    out->ideal_bubble = (double)(p->pp - 1) / (double)(p->M + p->pp - 1);
    return FSC_OK;
}

void fsc_engine_reset_pipe_stats(fsc_engine *e) {
    fsc_pipe *p = e->pipe;
    if (!p) return;
    p->st.steps = 0;
    p->st.wall_s = p->st.wait_s = 0;
    p->st.max_in_flight = p->in_flight;
    p->st.max_full_records = p->full_in_use;
    p->st.peak_acts_bytes = p->bytes_in_use;
}

/* ---- full parameters and saving: each stage's tensors come from the stage that holds them ---- */

static void stage_tensors(const fsc_engine *e, int s, int *t0, int *t1) {
    const fsc_pipe *p = e->pipe;
    *t0 = p->lf[s] == 0 ? 0 : fsc_gpt_block_first_tensor(&e->cfg, p->lf[s] - 1);
    *t1 = p->ll[s] == e->cfg.layers + 1 ? e->m->n_tensors : fsc_gpt_block_first_tensor(&e->cfg, p->ll[s]);
}

fsc_status fsc_pipe_full_params(fsc_engine *e, float *host) {
    fsc_pipe *p = e->pipe;
    size_t P = fsc_engine_tensor_offset(e, e->m->n_tensors), most = 0; /* this tensor rank's slices */
    float *all = host ? host : malloc(P * sizeof(float)), *d = NULL;
    if (!all) return fsc_error(FSC_ERR_NOMEM, "pipe: out of host memory for the full parameters");
    fsc_status s = e->st->full_tensors(e, 1, all); /* this stage's tensors, collective over its data group */
    for (int k = 0; k < p->pp; k++) {
        int t0, t1;
        stage_tensors(e, k, &t0, &t1);
        size_t n = fsc_engine_tensor_offset(e, t1) - fsc_engine_tensor_offset(e, t0);
        if (n > most) most = n;
    }
    if (s == FSC_OK) s = fsc_device_alloc(e->dev, FSC_TAG_COMM, most * sizeof(float), (void **)&d);
    for (int k = 0; k < p->pp && s == FSC_OK; k++) {
        int t0, t1;
        stage_tensors(e, k, &t0, &t1);
        size_t a = fsc_engine_tensor_offset(e, t0), n = fsc_engine_tensor_offset(e, t1) - a;
        if (p->stage == k) s = fsc_device_upload(e->dev, d, all + a, n * sizeof(float));
        if (s == FSC_OK) s = fsc_comm_broadcast(p->pipe_comm, d, n, FSC_F32, k);
        if (s == FSC_OK && p->stage != k && host) s = fsc_device_download(e->dev, host + a, d, n * sizeof(float));
    }
    fsc_device_release(e->dev, d);
    if (all != host) free(all);
    return s;
}

void fsc_pipe_free(fsc_engine *e) {
    fsc_pipe *p = e->pipe;
    if (!p) return;
    if (p->slots) reset_pools(e, -1);
    free(p->slots);
    free(p->recs);
    free(p->ins);
    free(p->lf);
    free(p->ll);
    if (p->norm_comm) fsc_comm_free(p->norm_comm);
    if (p->pipe_comm) fsc_comm_free(p->pipe_comm);
    if (p->data_comm) fsc_comm_free(p->data_comm);
    free(p);
    e->pipe = NULL;
}
