/* DDP: every rank holds all parameters; gradients are summed over the group in buckets, in backward
 * order, as soon as the layers that own them finish their backward. Also serves FSC_PAR_NONE (a world
 * of one rank: the reductions are copies).
 *
 * Expert parallelism (po.ep > 1, MoE models): a rank holds the dense tensors and its experts only, in tensor
 * order (the local layout skips the other ranks' experts). A bucket splits into runs of one reduction class
 * (engine_impl.h's fsc_reduce_class): dense tensors, summed over the data group, and expert tensors, summed over
 * the expert-data group (the data ranks holding the same experts). The clipping norm counts dense runs on expert
 * rank 0 and expert runs everywhere, over the expert group (the class's spread group); full parameters and
 * weight files gather each MoE block's experts over it. No part names the groups of expert parallelism: each
 * reaches them through its class (e->rclass, fsc_engine_spread_group).
 *
 * Buffers (tensor order, the flat layout of model.h):
 *   master  (P) fp32 parameters, stepped by the optimizer                    params
 *   compute (P) master rounded to the parameter dtype (only if not f32)      params
 *   grad    (P) local gradients of the current micro-batch(es)               grads
 *   acc     (P) sum of reduced gradients over micro-batches (only when each
 *               micro-batch reduces, accum > 1 and no no_sync)               grads */
#include <stdlib.h>
#include <string.h>
#include "engine_impl.h"
#include "overlap.h"
#include "pipe.h"

/* A maximal span of the local layout whose tensors are of one reduction class (engine_impl.h: dense, or experts). */
typedef struct {
    size_t off, n;
    int cls;          /* its class, e->rclass[cls] */
} ddp_run;

typedef struct {
    int t0, t1;       /* held tensors: those in [t0, t1) that fsc_engine_holds */
    size_t *off;      /* (n_tensors) offset of each held tensor in the local layout */
    size_t P;
    ddp_run *runs;
    int nruns;
    float *master, *compute, *grad, *acc;
    int seg;          /* optimizer segment of master */
    size_t pend_lo, pend_hi; /* gradient elements [lo, hi) complete but not yet reduced */
    fsc_reduce_queue rq;     /* po.prefetch: bucket reductions in flight, waited for at the end of backward */
} ddp_state;

static fsc_comm *run_comm(const fsc_engine *e, const ddp_run *r) { return e->rclass[r->cls].sum; }

static fsc_status make_layout(fsc_engine *e, ddp_state *d) {
    const int nt = e->m->n_tensors;
    fsc_engine_held_range(e, &d->t0, &d->t1);
    d->off = calloc((size_t)nt, sizeof *d->off);
    d->runs = calloc((size_t)nt + 1, sizeof *d->runs);
    if (!d->off || !d->runs) return fsc_error(FSC_ERR_NOMEM, "ddp: out of memory");
    for (int i = d->t0; i < d->t1; i++) {
        if (!fsc_engine_holds(e, i)) continue;
        const int cls = fsc_engine_reduce_class(e, i);
        if (!d->nruns || d->runs[d->nruns - 1].cls != cls)
            d->runs[d->nruns++] = (ddp_run){ .off = d->P, .n = 0, .cls = cls };
        d->off[i] = d->P;
        d->runs[d->nruns - 1].n += e->m->info[i].numel;
        d->P += e->m->info[i].numel;
    }
    return FSC_OK;
}

/* Initial values of every held tensor into master (keyed init; with sync_from_rank0, rank 0's values
 * broadcast over the ranks that hold the same tensors). */
static fsc_status init_master(fsc_engine *e, ddp_state *d) {
    int sync = e->po.sync_from_rank0 && e->r->world > 1;
    for (int i = d->t0; i < d->t1; i++) {
        if (!fsc_engine_holds(e, i)) continue;
        if (sync && fsc_comm_rank(e->rclass[fsc_engine_reduce_class(e, i)].sum) != 0) continue;
        FSC_TRY(fsc_engine_init_range(e, d->master + d->off[i], fsc_engine_tensor_offset(e, i), e->m->info[i].numel));
    }
    for (int k = 0; sync && k < d->nruns; k++)
        FSC_TRY(fsc_comm_broadcast(run_comm(e, &d->runs[k]), d->master + d->runs[k].off, d->runs[k].n, FSC_F32, 0));
    return FSC_OK;
}

/* Each rank holds the whole reduced gradient of its classes; a class spread over a group (experts: the expert group)
 * makes the norm's group that one, NULL otherwise. */
static fsc_comm *ddp_norm_group(const fsc_engine *e) { return fsc_engine_spread_group(e); }

/* With a norm group the pieces count every element once over it: the runs of a class spread over it everywhere
 * (experts), the others on its rank 0 (dense); without one the reduced gradient itself. */
static fsc_status ddp_norm_pieces(const fsc_engine *e, float **g, size_t *lens, int *n) {
    const ddp_state *d = e->sd;
    fsc_comm *norm = ddp_norm_group(e);
    if (!norm) {
        *n = -1;
        return FSC_OK;
    }
    const float *reduced = d->acc ? d->acc : d->grad;
    int c = 0;
    for (int k = 0; k < d->nruns; k++) {
        if (e->rclass[d->runs[k].cls].spread != norm && fsc_comm_rank(norm) != 0) continue;
        if (g) g[c] = (float *)reduced + d->runs[k].off, lens[c] = d->runs[k].n;
        c++;
    }
    *n = c;
    return FSC_OK;
}

static fsc_status ddp_setup(fsc_engine *e) {
    ddp_state *d = calloc(1, sizeof(*d));
    if (!d) return fsc_error(FSC_ERR_NOMEM, "ddp: out of memory");
    e->sd = d;
    FSC_TRY(make_layout(e, d));
    size_t bytes = d->P * sizeof(float);
    FSC_TRY(fsc_device_alloc(e->dev, FSC_TAG_PARAMS, bytes, (void **)&d->master));
    FSC_TRY(fsc_device_calloc(e->dev, FSC_TAG_GRADS, bytes, (void **)&d->grad));
    if (e->po.param_dtype != FSC_F32)
        FSC_TRY(fsc_device_alloc(e->dev, FSC_TAG_PARAMS, bytes, (void **)&d->compute));
    if (e->po.accum > 1 && !e->po.no_sync)
        FSC_TRY(fsc_device_calloc(e->dev, FSC_TAG_GRADS, bytes, (void **)&d->acc));
    FSC_TRY(init_master(e, d));
    float *reduced = d->acc ? d->acc : d->grad;
    FSC_TRY(fsc_optim_add(e->opt, d->master, reduced, d->P, &d->seg));
    FSC_TRY(fsc_engine_add_gseg(e, reduced, d->P));
    float *p = d->compute ? d->compute : d->master;
    for (int i = d->t0; i < d->t1; i++) {
        if (!fsc_engine_holds(e, i)) continue;
        e->m->param[i] = p + d->off[i];
        e->m->grad[i] = d->grad + d->off[i];
    }
    return FSC_OK;
}

static fsc_status ddp_begin_step(fsc_engine *e) {
    ddp_state *d = e->sd;
    FSC_TRY(fsc_reduce_drain(e, &d->rq)); /* left by a failed step */
    FSC_TRY(fsc_device_memset(e->dev, d->grad, 0, d->P * sizeof(float)));
    if (d->compute) FSC_TRY(fsc_engine_round_to(e, d->compute, d->master, d->P, e->po.param_dtype));
    d->pend_lo = d->pend_hi = d->P;
    return FSC_OK;
}

static fsc_status ddp_pre_forward(fsc_engine *e, int layer) {
    ddp_state *d = e->sd;
    /* the pending range is not reset here: a pipeline's checkpointed micro-batch recomputes its forward inside its
     * backward, between a later chunk's reductions and its own, and a reset there made chunk 0's last bucket reduce
     * the later chunk's gradients again (post_backward starts each range where its first layer ends) */
    /* each micro-batch reduces on its own: start it from zero local gradients (the exact reduction's units too:
     * without a pipeline each unit's backward follows its forward, and after the last one nothing is cleared) */
    if (layer == e->lf && e->micro > 0 && (d->acc || (e->exact && !e->pipe)))
        FSC_TRY(fsc_device_memset(e->dev, d->grad, 0, d->P * sizeof(float)));
    return FSC_OK;
}

/* Reduce the pending elements: one reduction per run they cross (one without expert parallelism). */
static fsc_status flush(fsc_engine *e) {
    ddp_state *d = e->sd;
    size_t lo = d->pend_lo, hi = d->pend_hi;
    if (hi == lo) return FSC_OK;
    d->pend_hi = lo;
    for (int k = 0; k < d->nruns; k++) {
        size_t a = d->runs[k].off > lo ? d->runs[k].off : lo, b = d->runs[k].off + d->runs[k].n;
        if (b > hi) b = hi;
        if (a >= b) continue;
        fsc_comm *c = run_comm(e, &d->runs[k]);
        float *out = d->acc ? d->acc + a : d->grad + a;
        int accumulate = d->acc && e->micro > 0;
        if (e->po.prefetch) FSC_TRY(fsc_reduce_start(e, &d->rq, c, 0, d->grad + a, out, b - a, accumulate, NULL, NULL, 0));
        else FSC_TRY(fsc_engine_reduce(e, c, 0, d->grad + a, out, b - a, accumulate));
    }
    return FSC_OK;
}

static fsc_status ddp_post_backward(fsc_engine *e, int layer) {
    ddp_state *d = e->sd;
    if (!e->sync) return FSC_OK;
    /* the layer that ends a backward: the stage's first, or with the exact reduction, whose terms are one backward
     * (or W) of one chunk each, the first layer of the chunk that runs (interleaved stages, a V) */
    int end = e->lf, hi;
    if (e->exact && e->pipe) fsc_pipe_running_layers(e, &end, &hi);
    /* the tensors this layer owns are contiguous and precede what earlier (later-in-model) layers own */
    for (int i = d->t1 - 1; i >= d->t0; i--) {
        if (e->m->info[i].layer != layer || !fsc_engine_holds(e, i)) continue;
        /* nothing pending: the range starts at this layer's end, so that a reduction covers only elements whose
         * backward ran since the last one: with several chunks per rank (interleaved stages) a chunk reduced
         * before is never reduced again; with the exact reduction in a pipeline each reduction covers one chunk's
         * elements, all of them terms already or none (exact.c's first terms) */
        if (d->pend_lo == d->pend_hi) d->pend_lo = d->pend_hi = d->off[i] + e->m->info[i].numel;
        if (d->off[i] < d->pend_lo) d->pend_lo = d->off[i];
    }
    size_t bucket = e->po.bucket_bytes ? e->po.bucket_bytes : (25u << 20);
    if ((d->pend_hi - d->pend_lo) * sizeof(float) >= bucket || layer == end) FSC_TRY(flush(e));
    /* the micro-batch's backward is over: its reductions are done before the next one rewrites grad */
    if (layer == end) FSC_TRY(fsc_reduce_drain(e, &d->rq));
    /* the exact reduction: every unit's gradient is a term of its own, the next one starts from zero (with a
     * pipeline the next backward may follow without a forward in between, so the local gradients are cleared
     * here; without one, by the next unit's forward) */
    if (layer == end && e->exact && e->pipe) FSC_TRY(fsc_device_memset(e->dev, d->grad, 0, d->P * sizeof(float)));
    return FSC_OK;
}

/* With a class spread over a group (expert parallelism), tensor i may be the first expert tensor of an MoE block:
 * then *n_out is the number of tensors of every expert of the block (4 E), and *buf (device, E per_expert floats)
 * their values gathered over its class's spread group (collective over it); else *buf is NULL. */
static fsc_status gather_experts(fsc_engine *e, ddp_state *d, int i, int *n_out, float **buf) {
    *buf = NULL;
    *n_out = 1;
    const fsc_param_info *pi = &e->m->info[i];
    fsc_comm *spread = e->rclass[fsc_engine_reduce_class(e, i)].spread;
    if (!spread || pi->expert != 0 || e->m->info[i - 1].expert >= 0) return FSC_OK; /* not the block's first */
    int first, count, E = e->m->n_experts, k = 0; /* k: tensors per expert, the same for each */
    fsc_engine_local_experts(e, &first, &count);
    size_t per = 0;
    for (; i + k < e->m->n_tensors && e->m->info[i + k].expert == 0; k++) per += e->m->info[i + k].numel;
    FSC_TRY(fsc_device_alloc(e->dev, FSC_TAG_COMM, (size_t)E * per * sizeof(float), (void **)buf));
    fsc_status s = fsc_comm_all_gather(spread, d->master + d->off[i + k * first], *buf, (size_t)count * per, FSC_F32);
    if (s != FSC_OK) {
        fsc_device_release(e->dev, *buf);
        *buf = NULL;
        return s;
    }
    *n_out = k * E;
    return FSC_OK;
}

static fsc_status ddp_full_tensors(fsc_engine *e, int want, float *host) {
    ddp_state *d = e->sd;
    if (!fsc_engine_spread_group(e)) {
        if (!want || !host) return FSC_OK;
        for (int i = d->t0; i < d->t1;) { /* runs of held tensors (an interleaved pipeline holds several) */
            if (!fsc_engine_holds(e, i)) {
                i++;
                continue;
            }
            int j = i + 1;
            while (j < d->t1 && fsc_engine_holds(e, j)) j++;
            const size_t n = fsc_engine_tensor_offset(e, j) - fsc_engine_tensor_offset(e, i);
            FSC_TRY(fsc_device_download(e->dev, host + fsc_engine_tensor_offset(e, i), d->master + d->off[i],
                                        n * sizeof(float)));
            i = j;
        }
        return FSC_OK;
    }
    for (int i = d->t0; i < d->t1;) {
        int n;
        float *buf;
        FSC_TRY(gather_experts(e, d, i, &n, &buf));
        size_t len = 0;
        for (int t = i; t < i + n; t++) len += e->m->info[t].numel;
        fsc_status s = FSC_OK;
        if (want && host)
            s = fsc_device_download(e->dev, host + fsc_engine_tensor_offset(e, i), buf ? buf : d->master + d->off[i],
                                    len * sizeof(float));
        fsc_device_release(e->dev, buf);
        FSC_TRY(s);
        i += n;
    }
    return FSC_OK;
}

/* Rank 0 writes every tensor; with expert parallelism its expert group gathers each MoE block's experts. */
static fsc_status ddp_write_full(fsc_engine *e, fsc_st_writer *w) {
    ddp_state *d = e->sd;
    /* the spread group (experts: the expert group) of data rank 0: rank 0 of a spread class's summing group */
    int gathers = 0;
    for (int c = 0; c < e->nrclass; c++) gathers |= e->rclass[c].spread && fsc_comm_rank(e->rclass[c].sum) == 0;
    if (!w && !gathers) return FSC_OK;
    /* after a failed write rank 0 still takes part in every expert gather (writing nothing more), so its
     * expert group never waits for it; the engine's agreement hands every rank the error */
    fsc_status werr = FSC_OK;
    for (int i = d->t0; i < d->t1;) {
        int n = 1;
        float *buf = NULL;
        if (gathers) FSC_TRY(gather_experts(e, d, i, &n, &buf));
        const float *src = buf;
        for (int t = i; t < i + n && werr == FSC_OK && w; t++) {
            werr = fsc_engine_write_tensor(e, w, t, src ? src : d->master + d->off[t]);
            if (src) src += e->m->info[t].numel;
        }
        fsc_device_release(e->dev, buf);
        i += n;
    }
    return werr;
}

static fsc_status ddp_load_full(fsc_engine *e, fsc_st_file *f) {
    ddp_state *d = e->sd;
    fsc_status s = FSC_OK;
    for (int i = d->t0; i < d->t1 && s == FSC_OK; i++)
        if (fsc_engine_holds(e, i)) s = fsc_engine_read_tensor(e, f, i, 0, e->m->info[i].numel, d->master + d->off[i]);
    return s;
}

/* Data ranks that hold tensor i: every rank, or with expert parallelism the ranks of the expert's index
 * in their expert group (data rank r is expert rank r % G). */
static int holder(const fsc_engine *e, int i, int r) {
    fsc_comm *spread = e->rclass[fsc_engine_reduce_class(e, i)].spread;
    if (!spread) return 1;
    int G = fsc_comm_size(spread), per = e->m->n_experts / G;
    return e->m->info[i].expert / per == r % G;
}

/* Every held tensor whole. Every rank holds replicas; one rank of the data group writes each tensor, the
 * least loaded so far among its holders (by elements, ties to the lowest rank), so the ranks share a
 * checkpoint's writing. */
static fsc_status ddp_holdings(fsc_engine *e, fsc_holding **out, int *n) {
    ddp_state *d = e->sd;
    *out = NULL;
    *n = 0;
    const int N = fsc_comm_size(e->comm), me = fsc_comm_rank(e->comm);
    fsc_holding *h = calloc((size_t)(d->t1 - d->t0 + 1), sizeof(*h));
    size_t *load = calloc((size_t)N, sizeof(*load));
    if (!h || !load) {
        free(h);
        free(load);
        return fsc_error(FSC_ERR_NOMEM, "ddp: out of memory");
    }
    int c = 0;
    for (int i = d->t0; i < d->t1; i++) {
        int w = -1;
        for (int r = 0; r < N; r++)
            if (holder(e, i, r) && (w < 0 || load[r] < load[w])) w = r;
        load[w] += e->m->info[i].numel;
        if (!fsc_engine_holds(e, i)) continue;
        h[c++] = (fsc_holding){ .tensor = i, .first = 0, .n = e->m->info[i].numel, .seg = d->seg,
                                .seg_off = d->off[i], .write = w == me };
    }
    free(load);
    *out = h;
    *n = c;
    return FSC_OK;
}

/* Before a forward-only pass (eval.c): the compute copy rounded from the master, as begin_step does. */
static fsc_status ddp_begin_eval(fsc_engine *e) {
    ddp_state *d = e->sd;
    return d->compute ? fsc_engine_round_to(e, d->compute, d->master, d->P, e->po.param_dtype) : FSC_OK;
}

/* The compute copy is rounded from master at every begin_step: nothing is derived between steps. */
static fsc_status ddp_after_load(fsc_engine *e) {
    (void)e;
    return FSC_OK;
}

static void ddp_destroy(fsc_engine *e) {
    ddp_state *d = e->sd;
    if (!d) return;
    fsc_reduce_queue_free(e, &d->rq);
    fsc_device_release(e->dev, d->master);
    fsc_device_release(e->dev, d->compute);
    fsc_device_release(e->dev, d->grad);
    fsc_device_release(e->dev, d->acc);
    free(d->off);
    free(d->runs);
    free(d);
    e->sd = NULL;
}

const fsc_strategy fsc_strategy_ddp = {
    .name = "ddp",
    .setup = ddp_setup,
    .norm_group = ddp_norm_group,
    .norm_pieces = ddp_norm_pieces,
    .pre_forward = ddp_pre_forward,
    .post_backward = ddp_post_backward,
    .begin_step = ddp_begin_step,
    .full_tensors = ddp_full_tensors,
    .write_full = ddp_write_full,
    .load_full = ddp_load_full,
    .holdings = ddp_holdings,
    .after_load = ddp_after_load,
    .destroy = ddp_destroy,
    .begin_eval = ddp_begin_eval,
};
