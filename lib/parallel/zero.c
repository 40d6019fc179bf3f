/* ZeRO-1 (FairScale's OSS) and ZeRO-2 (sharded DDP): parameters replicated on every rank, the fp32
 * master weights, the optimizer state and the reduced gradients partitioned over the data-parallel group.
 * Not ZeRO-3: parameters are never freed (that is fsdp.c).
 *
 * Layout. The held tensors (a pipeline stage may hold a subset) form a flat vector in tensor order, cut
 * into buckets of whole layers in backward order; each bucket is padded to a multiple of N (the group
 * size) and rank r owns the r-th of its N equal shards. ZeRO-1 has one bucket (the whole vector, so rank r
 * owns [r*S, (r+1)*S) of it); ZeRO-2 has buckets of about bucket_bytes. With the exact reduction in a pipeline a
 * bucket also ends at every chunk's first layer (interleaved stages, a V: ZeRO-1 has a bucket per chunk then).
 * Partitions are balanced by element count exactly (unlike OSS, which hands whole tensors to the least loaded
 * rank), and reductions stay elementwise: a reduce-scatter gives the owner the rank-order sum, bit for bit DDP's
 * all-reduce.
 *
 * Expert parallelism (po.ep > 1, MoE models): a rank holds the dense tensors and its experts only. Each layer
 * range closes into two buckets, one of dense tensors sharded over the data group and one of this rank's expert
 * tensors sharded over e->ep_data (the data ranks holding the same experts), as DDP sums them; a bucket lists
 * its tensors (z->bk) with their offsets (z->off), in tensor order. Every element's reduced gradient still has
 * exactly one owner in the data group, so the clipping norm is taken over it as without experts. Full
 * parameters and weight files gather the experts over the expert group (ep.c).
 *
 * Buffers:
 *   full    (Pp)  replicated parameters, padded layout; rounded to the parameter dtype    params
 *   master  (S)   fp32 owned shards (only when the parameter dtype is not f32; otherwise
 *                 the optimizer steps the owned shards of full in place)                   params
 *   grad    (Pp)  ZeRO-1: local gradients, kept for the whole step                         grads
 *   sgrad   (S)   reduced gradients of the owned shards: ZeRO-1 reduce-scatters in place,
 *                 into the owned shard of grad, unless every micro-batch of an accumulating
 *                 step reduces (accum > 1 without no_sync: a separate sum, as DDP's acc)   grads
 *   b->grad       ZeRO-2: a bucket's local gradients, allocated at the bucket's first
 *                 backward layer, freed after its reduce-scatter (kept under no_sync)      grads
 * Optimizer: one segment per bucket (the owned shard). After the step every bucket's shards are
 * all-gathered in the parameter dtype into full: per step the reduce-scatters and the all-gathers each
 * move (N-1)/N x Pp elements per rank. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "engine_impl.h"
#include "overlap.h"
#include "pipe.h"

typedef struct {
    int llo, lhi;         /* layers whose tensors it holds; reduced after the backward of llo */
    int t0, t1;           /* its tensors are those of [t0, t1) with z->bk[t] equal to its index */
    int cls;              /* its tensors' reduction class (e->rclass: dense, or experts sharded over e->ep_data) */
    fsc_comm *comm;       /* the group its shards split over: its class's (e->comm, or e->ep_data for experts) */
    int N, rank;          /* that group's size and this rank's place in it */
    size_t n;             /* elements of its tensors */
    size_t padded, shard; /* padded = N x shard */
    size_t pstart;        /* offset in full (and in ZeRO-1's grad) */
    size_t soff;          /* offset of this rank's shard in master and sgrad */
    int seg;              /* optimizer segment */
    float *grad;          /* ZeRO-2: (padded) local gradients while live */
} zero_bucket;

typedef struct {
    int stage2;
    int t0, t1;           /* held tensors */
    int *bk;              /* (n_tensors) bucket of each held tensor, -1 for tensors this rank does not hold */
    size_t *off;          /* (n_tensors) offset of each held tensor in its bucket's padded vector */
    int nb;
    zero_bucket *b;       /* ascending in memory (b[0] holds the lowest layers) */
    size_t Pp, S;         /* padded total; elements owned by this rank */
    float *full, *master, *sgrad, *grad;
    int sgrad_own;        /* sgrad is its own allocation (not a view into grad) */
    fsc_reduce_queue rq;  /* po.prefetch: bucket reductions in flight, waited for at the end of backward (ZeRO-2:
                           * at most prefetch_limit - 1, so that at most that many buckets' gradients are held) */
} zero_state;

/* Whether tensor t belongs to bucket b. */
static int in_bucket(const zero_state *z, const zero_bucket *b, int t) { return z->bk[t] == (int)(b - z->b); }


/* Whole layers in backward order, a bucket closed once it reaches cap bytes (as DDP's buckets); with expert
 * parallelism a closed range gives a bucket per reduction class, dense and experts (those with tensors). */
static fsc_status build_buckets(fsc_engine *e, zero_state *z, size_t cap) {
    const int nl = e->ll - e->lf + 1, nt = e->m->n_tensors;
    z->b = calloc((size_t)(nl > 0 ? 2 * nl : 1), sizeof(zero_bucket));
    z->bk = malloc((size_t)(nt > 0 ? nt : 1) * sizeof *z->bk);
    z->off = calloc((size_t)(nt > 0 ? nt : 1), sizeof *z->off);
    if (!z->b || !z->bk || !z->off) return fsc_error(FSC_ERR_NOMEM, "zero: out of memory");
    for (int t = 0; t < nt; t++) z->bk[t] = -1;
    zero_bucket cur[2];
    int open = 0;
    for (int l = e->ll; l >= e->lf; l--) {
        if (!open) {
            memset(cur, 0, sizeof cur);
            cur[0].lhi = cur[1].lhi = l;
            cur[0].t0 = cur[1].t0 = nt;
            cur[1].cls = 1;
            open = 1;
        }
        cur[0].llo = cur[1].llo = l;
        for (int t = z->t0; t < z->t1; t++) {
            if (e->m->info[t].layer != l || !fsc_engine_holds(e, t)) continue;
            zero_bucket *c = &cur[fsc_engine_reduce_class(e, t)];
            if (t < c->t0) c->t0 = t;
            if (t + 1 > c->t1) c->t1 = t + 1;
            c->n += e->m->info[t].numel;
        }
        size_t n = cur[0].n + cur[1].n;
        /* the exact reduction in a pipeline: every backward (and W) of one chunk is a term of its own, reduced when
         * it ends (exact.c), so a bucket holds one chunk's tensors (interleaved stages, a V: several a rank) */
        const int chunk_end = e->po.reduce_exact && fsc_pipe_starts_chunk(e, l);
        if ((n > 0 && n >= cap / sizeof(float)) || l == e->lf || chunk_end) {
            for (int x = 1; x >= 0; x--) /* reversed below: the dense bucket first in memory */
                if (cur[x].n > 0) z->b[z->nb++] = cur[x];
            open = 0;
        }
    }
    /* backward order -> memory order */
    for (int i = 0; i < z->nb / 2; i++) {
        zero_bucket t = z->b[i];
        z->b[i] = z->b[z->nb - 1 - i];
        z->b[z->nb - 1 - i] = t;
    }
    for (int k = 0; k < z->nb; k++) {
        zero_bucket *b = &z->b[k];
        b->comm = e->rclass[b->cls].sum;
        b->N = fsc_comm_size(b->comm);
        b->rank = fsc_comm_rank(b->comm);
        size_t pos = 0, N = (size_t)b->N;
        for (int t = b->t0; t < b->t1; t++) {
            int l = e->m->info[t].layer;
            if (l < b->llo || l > b->lhi || !fsc_engine_holds(e, t) || fsc_engine_reduce_class(e, t) != b->cls)
                continue;
            z->bk[t] = k;
            z->off[t] = pos;
            pos += e->m->info[t].numel;
        }
        b->padded = (b->n + N - 1) / N * N;
        b->shard = b->padded / N;
        b->pstart = z->Pp;
        b->soff = z->S;
        z->Pp += b->padded;
        z->S += b->shard;
    }
    return FSC_OK;
}

static void bind_grads(fsc_engine *e, zero_state *z, zero_bucket *b, float *g) {
    for (int t = b->t0; t < b->t1; t++)
        if (in_bucket(z, b, t)) e->m->grad[t] = g ? g + z->off[t] : NULL;
}

/* The reduced gradient of bucket b's owned shard. */
static float *owned_grad(zero_state *z, zero_bucket *b) {
    return z->sgrad_own ? z->sgrad + b->soff : z->grad + b->pstart + (size_t)b->rank * b->shard;
}

/* The owned shard of bucket b as the optimizer steps it. */
static float *owned_params(zero_state *z, zero_bucket *b) {
    return z->master ? z->master + b->soff : z->full + b->pstart + (size_t)b->rank * b->shard;
}

/* After full was filled with fp32 values: take the owned fp32 shards into master, then round full. */
static fsc_status split_master(fsc_engine *e, zero_state *z) {
    if (!z->master) return FSC_OK;
    for (int k = 0; k < z->nb; k++) {
        zero_bucket *b = &z->b[k];
        FSC_TRY(fsc_device_copy(e->dev, z->master + b->soff, z->full + b->pstart + (size_t)b->rank * b->shard,
                                b->shard * sizeof(float)));
    }
    return fsc_engine_round_to(e, z->full, z->full, z->Pp, e->po.param_dtype);
}

/* All-gather bucket b's owned shards into full, through the parameter dtype. */
static fsc_status gather_bucket(fsc_engine *e, zero_state *z, zero_bucket *b) {
    float *dst = z->full + b->pstart;
    fsc_dtype dt = e->po.param_dtype;
    if (!z->master) return fsc_comm_all_gather(b->comm, dst + (size_t)b->rank * b->shard, dst, b->shard, FSC_F32);
    size_t es = fsc_dtype_size(dt);
    void *lo = NULL, *lofull = NULL;
    fsc_status s = fsc_device_alloc(e->dev, FSC_TAG_COMM, b->shard * es, &lo);
    if (s == FSC_OK) s = fsc_device_alloc(e->dev, FSC_TAG_COMM, b->padded * es, &lofull);
    if (s == FSC_OK) s = fsc_k_convert(e->dev, lo, dt, z->master + b->soff, FSC_F32, b->shard);
    if (s == FSC_OK) s = fsc_comm_all_gather(b->comm, lo, lofull, b->shard, dt);
    if (s == FSC_OK) s = fsc_k_convert(e->dev, dst, FSC_F32, lofull, dt, b->padded);
    fsc_device_release(e->dev, lo);
    fsc_device_release(e->dev, lofull);
    return s;
}

static fsc_status gather_all(fsc_engine *e) {
    zero_state *z = e->sd;
    for (int k = 0; k < z->nb; k++) FSC_TRY(gather_bucket(e, z, &z->b[k]));
    return FSC_OK;
}

/* Initial values of bucket b into full (padding zero). */
static fsc_status init_bucket(fsc_engine *e, zero_state *z, zero_bucket *b) {
    if (b->padded > b->n)
        FSC_TRY(fsc_device_memset(e->dev, z->full + b->pstart + b->n, 0, (b->padded - b->n) * sizeof(float)));
    for (int t = b->t0; t < b->t1; t++)
        if (in_bucket(z, b, t))
            FSC_TRY(fsc_engine_init_range(e, z->full + b->pstart + z->off[t], fsc_engine_tensor_offset(e, t),
                                          e->m->info[t].numel));
    return FSC_OK;
}

static fsc_status zero_setup(fsc_engine *e) {
    zero_state *z = calloc(1, sizeof(*z));
    if (!z) return fsc_error(FSC_ERR_NOMEM, "zero: out of memory");
    e->sd = z;
    z->stage2 = e->po.kind == FSC_PAR_ZERO2;
    fsc_engine_held_range(e, &z->t0, &z->t1);
    size_t cap = z->stage2 ? (e->po.bucket_bytes ? e->po.bucket_bytes : (25u << 20)) : SIZE_MAX;
    FSC_TRY(build_buckets(e, z, cap));
    FSC_TRY(fsc_device_alloc(e->dev, FSC_TAG_PARAMS, z->Pp * sizeof(float), (void **)&z->full));
    if (e->po.param_dtype != FSC_F32)
        FSC_TRY(fsc_device_alloc(e->dev, FSC_TAG_PARAMS, z->S * sizeof(float), (void **)&z->master));
    if (!z->stage2) FSC_TRY(fsc_device_calloc(e->dev, FSC_TAG_GRADS, z->Pp * sizeof(float), (void **)&z->grad));
    /* otherwise each bucket reduces into its owned shard of grad (ZeRO-1: one bucket, or with expert
     * parallelism a dense and an expert one) */
    z->sgrad_own = z->stage2 || (e->po.accum > 1 && !e->po.no_sync);
    if (z->sgrad_own) FSC_TRY(fsc_device_calloc(e->dev, FSC_TAG_GRADS, z->S * sizeof(float), (void **)&z->sgrad));
    for (int k = 0; k < z->nb; k++) { /* sync_from_rank0: rank 0 of each bucket's group broadcasts */
        zero_bucket *b = &z->b[k];
        int sync = e->po.sync_from_rank0 && b->N > 1;
        if (!sync || b->rank == 0) FSC_TRY(init_bucket(e, z, b));
        if (sync) FSC_TRY(fsc_comm_broadcast(b->comm, z->full + b->pstart, b->padded, FSC_F32, 0));
    }
    FSC_TRY(split_master(e, z));
    for (int k = 0; k < z->nb; k++) {
        zero_bucket *b = &z->b[k];
        FSC_TRY(fsc_optim_add(e->opt, owned_params(z, b), owned_grad(z, b), b->shard, &b->seg));
        for (int t = b->t0; t < b->t1; t++)
            if (in_bucket(z, b, t)) e->m->param[t] = z->full + b->pstart + z->off[t];
        bind_grads(e, z, b, z->grad ? z->grad + b->pstart : NULL);
        if (!z->sgrad_own) FSC_TRY(fsc_engine_add_gseg(e, owned_grad(z, b), b->shard));
    }
    if (z->sgrad_own) FSC_TRY(fsc_engine_add_gseg(e, z->sgrad, z->S));
    return FSC_OK;
}

/* Shards are disjoint over the data group (expert shards: over the expert-data group, of experts no other expert
 * group holds) and padding gradients are zero. */
static fsc_comm *zero_norm_group(const fsc_engine *e) { return e->comm; }

static void release_bucket_grad(fsc_engine *e, zero_state *z, zero_bucket *b) {
    if (!b->grad) return;
    fsc_device_release(e->dev, b->grad);
    b->grad = NULL;
    bind_grads(e, z, b, NULL);
}

static fsc_status zero_begin_step(fsc_engine *e) {
    zero_state *z = e->sd;
    FSC_TRY(fsc_reduce_drain(e, &z->rq)); /* left by a failed step */
    if (z->grad) return fsc_device_memset(e->dev, z->grad, 0, z->Pp * sizeof(float));
    for (int k = 0; k < z->nb; k++) release_bucket_grad(e, z, &z->b[k]); /* left by a failed step */
    return FSC_OK;
}

static fsc_status zero_pre_backward(fsc_engine *e, int layer) {
    zero_state *z = e->sd;
    if (!z->stage2) return FSC_OK;
    for (int k = 0; k < z->nb; k++) {
        zero_bucket *b = &z->b[k];
        if (layer < b->llo || layer > b->lhi || b->grad) continue;
        FSC_TRY(fsc_device_calloc(e->dev, FSC_TAG_GRADS, b->padded * sizeof(float), (void **)&b->grad));
        bind_grads(e, z, b, b->grad);
    }
    return FSC_OK;
}

static fsc_status zero_post_backward(fsc_engine *e, int layer) {
    zero_state *z = e->sd;
    if (!e->sync) return FSC_OK; /* no_sync: keep accumulating locally */
    for (int k = 0; k < z->nb; k++) {
        zero_bucket *b = &z->b[k];
        if (b->llo != layer) continue; /* the bucket's backward is complete after its lowest layer */
        float *g = z->stage2 ? b->grad : z->grad + b->pstart;
        if (!g) return fsc_error(FSC_ERR_STATE, "zero: layer %d finished backward but its gradients were never "
                                                "allocated (pre_backward not called)", layer);
        /* each micro-batch that reduces adds to the shard after the first */
        int accumulate = !e->po.no_sync && e->micro > 0;
        if (e->po.prefetch) {
            /* overlap: reduced while the layers below compute; stage 2 hands the bucket's gradient to the
             * reduction, stage 1 zeroes it once reduced when another micro-batch follows */
            float *own = z->stage2 ? g : NULL;
            float *clear = !z->stage2 && (e->micro < e->po.accum - 1 || e->exact) ? g : NULL;
            if (own) {
                /* a reduction owns its bucket's gradient until it is waited for: keep at most limit - 1 in
                 * flight (oldest first, as FSDP's units), else every bucket would live to the end of backward
                 * and ZeRO-2 would hold DDP's gradients plus its shard. Waited for while the bucket still holds
                 * g, so that a failed wait leaves g to zero_begin_step's release. */
                FSC_TRY(fsc_reduce_drain_to(e, &z->rq, fsc_engine_prefetch_limit(e) - 2));
                b->grad = NULL;
                bind_grads(e, z, b, NULL);
            }
            FSC_TRY(fsc_reduce_start(e, &z->rq, b->comm, 1, g, owned_grad(z, b), b->padded, accumulate, own, clear,
                                     b->padded));
            continue;
        }
        FSC_TRY(fsc_engine_reduce(e, b->comm, 1, g, owned_grad(z, b), b->padded, accumulate));
        if (z->stage2) {
            release_bucket_grad(e, z, b);
        } else if (e->micro < e->po.accum - 1 || e->exact) {
            /* the next micro-batch (every unit with the exact reduction) reduces on its own: start it from zero */
            FSC_TRY(fsc_device_memset(e->dev, g, 0, b->padded * sizeof(float)));
        }
    }
    /* the micro-batch's backward is over: its reductions are done before the next one writes gradients */
    if (layer == e->lf) FSC_TRY(fsc_reduce_drain(e, &z->rq));
    return FSC_OK;
}

static fsc_status zero_after_step(fsc_engine *e) { return gather_all(e); }

/* fp32 values of bucket b: full itself (f32 parameters) or a gathered copy of the masters (*tmp). */
static fsc_status bucket_fp32(fsc_engine *e, zero_state *z, zero_bucket *b, const float **src, float **tmp) {
    *tmp = NULL;
    if (!z->master) {
        *src = z->full + b->pstart;
        return FSC_OK;
    }
    FSC_TRY(fsc_device_alloc(e->dev, FSC_TAG_COMM, b->padded * sizeof(float), (void **)tmp));
    fsc_status s = fsc_comm_all_gather(b->comm, z->master + b->soff, *tmp, b->shard, FSC_F32);
    if (s != FSC_OK) {
        fsc_device_release(e->dev, *tmp);
        *tmp = NULL;
        return s;
    }
    *src = *tmp;
    return FSC_OK;
}

static fsc_status zero_full_tensors(fsc_engine *e, int want, float *host) {
    zero_state *z = e->sd;
    for (int k = 0; k < z->nb; k++) {
        zero_bucket *b = &z->b[k];
        const float *src;
        float *tmp;
        FSC_TRY(bucket_fp32(e, z, b, &src, &tmp));
        fsc_status s = FSC_OK;
        for (int t = b->t0; t < b->t1 && s == FSC_OK && want && host; t++)
            if (in_bucket(z, b, t))
                s = fsc_device_download(e->dev, host + fsc_engine_tensor_offset(e, t), src + z->off[t],
                                        e->m->info[t].numel * sizeof(float));
        fsc_device_release(e->dev, tmp);
        FSC_TRY(s);
    }
    return FSC_OK;
}

/* A failed write does not end the loop: the writer keeps taking part in every bucket's collective (and
 * writes nothing more), so the other ranks never wait for it; the engine's agreement then hands every rank
 * the writer's error. */
static fsc_status zero_write_full(fsc_engine *e, fsc_st_writer *w) {
    zero_state *z = e->sd;
    fsc_status werr = FSC_OK;
    for (int k = 0; k < z->nb; k++) {
        zero_bucket *b = &z->b[k];
        const float *src;
        float *tmp;
        FSC_TRY(bucket_fp32(e, z, b, &src, &tmp));
        for (int t = b->t0; t < b->t1 && werr == FSC_OK && w; t++)
            if (in_bucket(z, b, t))
                werr = fsc_engine_write_tensor(e, w, t, src + z->off[t]);
        fsc_device_release(e->dev, tmp);
    }
    return werr;
}

/* Every rank reads every held tensor (parameters are replicated); no collective, so a rank that fails
 * here cannot leave the others waiting. */
static fsc_status zero_load_full(fsc_engine *e, fsc_st_file *f) {
    zero_state *z = e->sd;
    for (int k = 0; k < z->nb; k++) {
        zero_bucket *b = &z->b[k];
        for (int t = b->t0; t < b->t1; t++)
            if (in_bucket(z, b, t))
                FSC_TRY(fsc_engine_read_tensor(e, f, t, 0, e->m->info[t].numel, z->full + b->pstart + z->off[t]));
    }
    return split_master(e, z);
}

/* The owned shard of every bucket, cut at tensor boundaries; padding is not a holding. */
static fsc_status zero_holdings(fsc_engine *e, fsc_holding **out, int *n) {
    zero_state *z = e->sd;
    *out = NULL;
    *n = 0;
    fsc_holding *h = calloc((size_t)(z->t1 - z->t0 + z->nb + 1), sizeof(*h));
    if (!h) return fsc_error(FSC_ERR_NOMEM, "zero: out of memory");
    int c = 0;
    for (int k = 0; k < z->nb; k++) {
        const zero_bucket *b = &z->b[k];
        size_t own_lo = (size_t)b->rank * b->shard, own_hi = own_lo + b->shard;
        for (int t = b->t0; t < b->t1; t++) {
            if (!in_bucket(z, b, t)) continue;
            size_t tlo = z->off[t], thi = tlo + e->m->info[t].numel;
            size_t a = tlo > own_lo ? tlo : own_lo, c_hi = thi < own_hi ? thi : own_hi;
            if (a >= c_hi) continue;
            h[c++] = (fsc_holding){ .tensor = t, .first = a - tlo, .n = c_hi - a, .seg = b->seg,
                                    .seg_off = a - own_lo, .write = 1 };
        }
    }
    *out = h;
    *n = c;
    return FSC_OK;
}

static fsc_status zero_after_load(fsc_engine *e) { return gather_all(e); }

static void zero_destroy(fsc_engine *e) {
    zero_state *z = e->sd;
    if (!z) return;
    fsc_reduce_queue_free(e, &z->rq);
    for (int k = 0; z->b && k < z->nb; k++) fsc_device_release(e->dev, z->b[k].grad);
    fsc_device_release(e->dev, z->full);
    fsc_device_release(e->dev, z->master);
    if (z->sgrad_own) fsc_device_release(e->dev, z->sgrad);
    fsc_device_release(e->dev, z->grad);
    free(z->b);
    free(z->bk);
    free(z->off);
    free(z);
    e->sd = NULL;
}

const fsc_strategy fsc_strategy_zero = {
    .name = "zero",
    .setup = zero_setup,
    .norm_group = zero_norm_group,
    .pre_backward = zero_pre_backward,
    .post_backward = zero_post_backward,
    .begin_step = zero_begin_step,
    .after_step = zero_after_step,
    .full_tensors = zero_full_tensors,
    .write_full = zero_write_full,
    .load_full = zero_load_full,
    .holdings = zero_holdings,
    .after_load = zero_after_load,
    .destroy = zero_destroy,
};
