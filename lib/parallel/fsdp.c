/* FSDP (FairScale's FullyShardedDataParallel): parameters flattened per unit, padded to a multiple of the
 * world size, one contiguous fp32 master shard per rank; units gathered just before use and freed after.
 *
 * Units: each wrapped layer (parallel.h's wrap policies: block wraps every layer but the first and the last,
 * min_params those of them with enough parameters) is a unit nested in the root; the root owns the tensors of
 * every other layer (for a language model: the embedding, the final norm and head, the blocks not wrapped). A
 * tied tensor's unit is used by its owner and its users (a tied embedding: the embedding and the head).
 * The root stays gathered from the first forward layer to the end of backward (as FairScale's
 * root); other units are freed after forward when reshard_after_forward, re-gathered for backward.
 *
 * Strategies by the sharding group size G (ranks that split a unit):
 *   full_shard / shard_grad_op: G = N, gradients reduce-scattered over the world;
 *   no_shard: G = 1, gradients all-reduced;
 *   hybrid_shard: 1 < G < N. To stay bit-identical with DDP the sum is taken over the whole world in
 *   rank order: a reduce-scatter over the world hands rank (g, j) sub-piece g of shard j, then an
 *   all-gather across the replicas of j assembles the shard. Same bytes per rank as the usual
 *   reduce-scatter in the group + all-reduce across groups: (N + N/G - 2)/N x unit size.
 *
 * Expert parallelism (po.ep > 1, every sharding strategy): a rank holds the dense tensors and its experts only.
 * A unit's expert tensors (this rank's experts of its layers) form a unit of their own, padded to and sharded
 * over e->ep_data (the data ranks holding the same experts), its gradients reduce-scattered over it (no_shard:
 * whole, all-reduced over it; hybrid_shard: split over all of it too): the sums of DDP's expert runs. With
 * full_shard and shard_grad_op each element's reduced gradient has one owner in the data group, so the clipping
 * norm is taken over it as without experts (no_shard, hybrid_shard: norm_pieces); full parameters gather the
 * experts over the expert group (ep.c).
 *
 * Per unit: shard (S) master params and reduced grads; full (padded) params while gathered; full grads
 * during its backward (kept across micro-batches under no_sync).
 *
 * Offload all (docs/offload.md): masters and reduced gradients live on the host (e->host); a unit's shard is
 * uploaded before its all-gather starts and its reduced gradient is reduced into a device buffer, then
 * downloaded (added on the host under accumulation, as the device's accumulation adds). With prefetch the
 * copies are asynchronous (device.h): the uploads run one prefetch ahead of the all-gathers (started for the units
 * the next prefetch gathers, so a copy overlaps the compute of the unit before), the reduce-scatter overlaps the
 * backward as without offload, and the download starts when the reduction is finished (under hybrid_shard: its
 * all-gather across replicas) and is waited for when limit - 1 newer ones are in flight or at the end of the
 * backward (overlap.c). Without prefetch every copy is waited for where it starts.
 *
 * Overlap under hybrid_shard (prefetch): the reduce-scatter over the world starts when a unit's backward is
 * complete; the all-gather across replicas (the second phase, which needs its result) starts when the next
 * unit's backward is complete, and is waited for one unit later: both run during earlier units' backward
 * (overlap.c, fsc_reduce_start_gather and fsc_reduce_advance). */
#include <stdlib.h>
#include <string.h>
#include "engine_impl.h"
#include "layout_impl.h"
#include "exact.h"
#include "overlap.h"
#include "pipe.h"

/* An all-gather of a unit's masters in flight (prefetch) or about to be waited for. */
typedef struct {
    fsc_comm_req *req;  /* NULL: none in flight */
    float *full;        /* (padded) fp32 result */
    void *lo, *lofull;  /* low-precision shard and gathered buffer (FSC_TAG_COMM), NULL for f32 */
    float *dm;          /* offload all: the shard uploaded from the host (FSC_TAG_COMM) */
    fsc_dtype dt;
} fsdp_gather;

typedef struct {
    int *tensors;     /* tensor indices, ascending */
    size_t *uoff;     /* offset of each tensor in the unit's flat vector */
    int ntensors;
    size_t numel, padded, shard; /* shard = padded / G */
    int first_layer, last_layer; /* layers that use the unit */
    int is_root;
    int expert;       /* its reduction class (e->rclass): 1, expert parallelism's expert tensors of a unit, split
                       * over e->ep_data */
    fsc_comm *sc;     /* the group that splits it: the shard group, or its class's (e->ep_data) */
    fsc_comm *rc;     /* the group that sums its gradients: its class's (the data group, or e->ep_data) */
    int rs;           /* that sum is a reduce-scatter (its shards split over all of rc), not an all-reduce */
    float *master;    /* (shard) fp32 */
    float *sgrad;     /* (shard) reduced gradients */
    float *full;      /* (padded) gathered params, NULL when resharded */
    float *fgrad;     /* (padded) full gradients during backward */
    int seg;          /* optimizer segment of master */
    fsdp_gather g;    /* its all-gather while in flight (prefetch) */
    float *dm;        /* offload all with prefetch: its master shard uploaded ahead (FSC_TAG_COMM), or NULL */
    fsc_copy *up;     /* that upload while in flight */
} fsdp_unit;

typedef struct {
    int nunits;
    fsdp_unit *u;
    int *unit_of;     /* tensor -> unit */
    int G, N, rank;
    int reshard;
    fsc_comm *shard_comm;   /* ranks that split a unit (size G; the engine's e->grp.shard) */
    fsc_comm *replica_comm; /* ranks holding the same shard (size N/G; e->grp.replica) */
    /* overlap (po.prefetch, docs/overlap.md) */
    int prefetch;
    int limit;              /* gathered units in flight at most, the one computing included */
    int inflight;           /* units whose all-gather was started ahead and not yet waited for */
    int uploading;          /* offload all: units whose master shard was uploaded ahead (U->dm) */
    int keep;               /* the unit backward needs first: not resharded after forward (-1: none); with
                             * expert parallelism its expert unit (the same layers) neither */
    fsc_reduce_queue rq;    /* reduce-scatters in flight, each owning its unit's full gradient (hybrid: a
                             * permuted copy), and hybrid's all-gathers across replicas */
    fsc_device *mdev;       /* where master and sgrad live: e->dev, or e->host with offload all */
} fsdp_state;

static int layer_uses_unit(const fsc_engine *e, const fsdp_state *d, int layer, int u) {
    for (int k = 0; k < d->u[u].ntensors; k++) /* the owner, or a user of a tied tensor */
        if (fsc_param_used_by(&e->m->info[d->u[u].tensors[k]], layer)) return 1;
    return 0;
}

static fsc_status build_units(fsc_engine *e, fsdp_state *d) {
    const int NL = e->m->n_layers, nt = e->m->n_tensors;
    /* the layers' tensors: [lt[l], lt[l + 1]) (tensors are listed by owning layer) */
    int *lt = calloc((size_t)NL + 1, sizeof(int));
    d->unit_of = calloc((size_t)nt, sizeof(int));
    d->u = calloc(2 * ((size_t)NL + 1), sizeof(fsdp_unit));
    if (!lt || !d->unit_of || !d->u) {
        free(lt);
        return fsc_error(FSC_ERR_NOMEM, "fsdp: out of memory");
    }
    for (int l = 0, t = 0; l <= NL; l++) {
        while (t < nt && e->m->info[t].layer < l) t++;
        lt[l] = t;
    }
    /* unit 0 is the root; then one unit per wrapped layer (not the first or the last) with tensors this rank
     * holds; tensors this rank does not hold: -1 */
    d->nunits = 1;
    for (int t = 0; t < nt; t++) d->unit_of[t] = fsc_engine_holds(e, t) ? 0 : -1;
    for (int l = 1; l < NL - 1; l++) {
        size_t params = 0; /* an MoE block holds more than a dense one */
        for (int t = lt[l]; t < lt[l + 1]; t++) params += e->m->info[t].numel;
        int wrapped = e->po.wrap == FSC_WRAP_BLOCK || (e->po.wrap == FSC_WRAP_MIN_PARAMS &&
                                                       params >= e->po.wrap_min_params);
        if (!wrapped || lt[l] == lt[l + 1] || !fsc_engine_holds(e, lt[l])) continue;
        for (int t = lt[l]; t < lt[l + 1]; t++)
            if (fsc_engine_holds(e, t)) d->unit_of[t] = d->nunits;
        d->nunits++;
    }
    free(lt);
    /* each unit's tensors of another reduction class than the dense one (engine_impl.h; expert parallelism: its
     * expert tensors) become a unit of their own */
    for (int u = 0, n = d->nunits; e->nrclass > 1 && u < n; u++) {
        int x = 0;
        for (int t = 0; t < nt; t++)
            if (d->unit_of[t] == u && fsc_engine_reduce_class(e, t)) d->unit_of[t] = d->nunits, x = 1;
        if (x) d->u[d->nunits++].expert = 1;
    }
    for (int u = 0; u < d->nunits; u++) {
        fsdp_unit *U = &d->u[u];
        U->is_root = u == 0;
        U->rc = e->rclass[U->expert].sum; /* its class's group */
        U->sc = U->expert && d->G != 1 ? U->rc : d->shard_comm; /* no_shard: unsplit */
        U->rs = U->expert ? d->G != 1 : d->G == d->N;
        const size_t N = (size_t)fsc_comm_size(U->rc), G = (size_t)fsc_comm_size(U->sc);
        U->tensors = calloc((size_t)nt, sizeof(int));
        U->uoff = calloc((size_t)nt, sizeof(size_t));
        if (!U->tensors || !U->uoff) return fsc_error(FSC_ERR_NOMEM, "fsdp: out of memory");
        for (int t = 0; t < nt; t++) {
            if (d->unit_of[t] != u) continue;
            U->tensors[U->ntensors] = t;
            U->uoff[U->ntensors] = U->numel;
            U->ntensors++;
            U->numel += e->m->info[t].numel;
        }
        U->padded = (U->numel + N - 1) / N * N;
        U->shard = U->padded / G;
        U->first_layer = NL;
        U->last_layer = -1;
        for (int l = 0; l < NL; l++) {
            if (!layer_uses_unit(e, d, l, u)) continue;
            if (l < U->first_layer) U->first_layer = l;
            if (l > U->last_layer) U->last_layer = l;
        }
    }
    return FSC_OK;
}

/* Initial values of the unit's flat elements [first, first + n) into device dst. */
static fsc_status init_unit_range(fsc_engine *e, fsc_device *dev, const fsdp_unit *U, float *dst, size_t first,
                                  size_t n) {
    FSC_TRY(fsc_device_memset(dev, dst, 0, n * sizeof(float)));
    if (fsc_device_discards(dev, dst)) return FSC_OK; /* the planner's counting device: values not kept */
    enum { CHUNK = 1 << 16 };
    float *host = malloc(CHUNK * sizeof(float));
    if (!host) return fsc_error(FSC_ERR_NOMEM, "fsdp: out of host memory");
    fsc_status s = FSC_OK;
    for (int k = 0; k < U->ntensors && s == FSC_OK; k++) {
        size_t lo = U->uoff[k], hi = lo + e->m->info[U->tensors[k]].numel;
        size_t a = lo > first ? lo : first, b = hi < first + n ? hi : first + n;
        for (size_t p = a; p < b && s == FSC_OK; p += CHUNK) {
            size_t c = b - p < CHUNK ? b - p : CHUNK;
            e->m->ops->init_values(e->m->ctx, e->seed, U->tensors[k], p - lo, c, host);
            s = fsc_device_upload(dev, dst + (p - first), host, c * sizeof(float));
        }
    }
    free(host);
    return s;
}

static void bind_params(fsc_engine *e, const fsdp_unit *U, float *base) {
    for (int k = 0; k < U->ntensors; k++) e->m->param[U->tensors[k]] = base ? base + U->uoff[k] : NULL;
}
static void bind_grads(fsc_engine *e, const fsdp_unit *U, float *base) {
    for (int k = 0; k < U->ntensors; k++) e->m->grad[U->tensors[k]] = base ? base + U->uoff[k] : NULL;
}

static void gather_release(fsc_engine *e, fsdp_gather *g, int keep_full) {
    fsc_device_release(e->dev, g->lo);
    fsc_device_release(e->dev, g->lofull);
    fsc_device_release(e->dev, g->dm);
    if (!keep_full) fsc_device_release(e->dev, g->full);
    *g = (fsdp_gather){0};
}

/* Start the all-gather of the unit's master shards into a new (padded) fp32 buffer, through dtype dt. */
static fsc_status gather_start(fsc_engine *e, fsdp_unit *U, fsc_dtype dt, fsdp_gather *g) {
    fsdp_state *d = e->sd;
    *g = (fsdp_gather){.dt = dt};
    fsc_status s = fsc_device_alloc(e->dev, FSC_TAG_PARAMS, U->padded * sizeof(float), (void **)&g->full);
    const float *master = U->master;
    if (s == FSC_OK && U->dm) { /* offload all: uploaded ahead */
        g->dm = U->dm;
        s = fsc_device_copy_wait(U->up);
        U->dm = NULL;
        U->up = NULL;
        d->uploading--;
        master = g->dm;
    } else if (s == FSC_OK && d->mdev != e->dev) { /* offload all: the shard to the device first */
        s = fsc_device_alloc(e->dev, FSC_TAG_COMM, U->shard * sizeof(float), (void **)&g->dm);
        if (s == FSC_OK) s = fsc_device_upload(e->dev, g->dm, U->master, U->shard * sizeof(float));
        master = g->dm;
    }
    if (s == FSC_OK && dt == FSC_F32) {
        s = fsc_comm_iall_gather(U->sc, master, g->full, U->shard, FSC_F32, &g->req);
    } else if (s == FSC_OK) {
        size_t es = fsc_dtype_size(dt);
        s = fsc_device_alloc(e->dev, FSC_TAG_COMM, U->shard * es, &g->lo);
        if (s == FSC_OK) s = fsc_device_alloc(e->dev, FSC_TAG_COMM, U->padded * es, &g->lofull);
        if (s == FSC_OK) s = fsc_k_convert(e->dev, g->lo, dt, master, FSC_F32, U->shard);
        if (s == FSC_OK) s = fsc_comm_iall_gather(U->sc, g->lo, g->lofull, U->shard, dt, &g->req);
    }
    if (s != FSC_OK) gather_release(e, g, 0);
    return s;
}

/* Wait for g; *out is its fp32 result (the caller owns it). */
static fsc_status gather_finish(fsc_engine *e, fsdp_unit *U, fsdp_gather *g, float **out) {
    fsc_status s = fsc_comm_wait(g->req);
    fsc_comm_req_free(g->req);
    g->req = NULL;
    if (s == FSC_OK && g->dt != FSC_F32) s = fsc_k_convert(e->dev, g->full, FSC_F32, g->lofull, g->dt, U->padded);
    *out = s == FSC_OK ? g->full : NULL;
    gather_release(e, g, s == FSC_OK);
    return s;
}

/* All-gather the unit's master shards into a new (padded) fp32 buffer, through dtype dt. */
static fsc_status gather(fsc_engine *e, fsdp_unit *U, fsc_dtype dt, float **out) {
    fsdp_gather g;
    FSC_TRY(gather_start(e, U, dt, &g));
    return gather_finish(e, U, &g, out);
}

/* The unit's parameters gathered and bound: waits for its prefetch, or gathers it now. */
static fsc_status unit_gather(fsc_engine *e, fsdp_unit *U) {
    fsdp_state *d = e->sd;
    if (U->g.req) {
        d->inflight--;
        FSC_TRY(gather_finish(e, U, &U->g, &U->full));
        bind_params(e, U, U->full);
        return FSC_OK;
    }
    if (U->full) return FSC_OK;
    FSC_TRY(gather(e, U, e->po.param_dtype, &U->full));
    bind_params(e, U, U->full);
    return FSC_OK;
}

/* Offload all: start the upload of the unit's master shard for its next all-gather. */
static fsc_status upload_ahead(fsc_engine *e, fsdp_unit *U) {
    fsdp_state *d = e->sd;
    FSC_TRY(fsc_device_alloc(e->dev, FSC_TAG_COMM, U->shard * sizeof(float), (void **)&U->dm));
    fsc_status s = fsc_device_upload_async(e->dev, U->dm, U->master, U->shard * sizeof(float), &U->up);
    if (s != FSC_OK) {
        fsc_device_release(e->dev, U->dm);
        U->dm = NULL;
        return s;
    }
    d->uploading++;
    return FSC_OK;
}

/* Offload all: the uploads ahead waited for and dropped (the masters change in the step, or were loaded). */
static fsc_status uploads_drop(fsc_engine *e) {
    fsdp_state *d = e->sd;
    fsc_status first = FSC_OK;
    for (int u = 0; u < d->nunits; u++) {
        fsdp_unit *U = &d->u[u];
        if (!U->dm) continue;
        fsc_status s = fsc_device_copy_wait(U->up);
        if (first == FSC_OK) first = s;
        fsc_device_release(e->dev, U->dm);
        U->dm = NULL;
        U->up = NULL;
        d->uploading--;
    }
    return first;
}

/* Prefetch: start the all-gathers of the units the layers after `layer` (dir +1, forward) or before it
 * (dir -1, backward) use, nearest first, while fewer than limit - 1 are in flight. The order is the same on
 * every rank, so the shard group's calls match. Offload all: then the uploads of the units after those, as many
 * again, so the next prefetch finds their shards on the device. */
static void prefetch(fsc_engine *e, int layer, int dir) {
    fsdp_state *d = e->sd;
    int ok = 1, lo, hi; /* a pipeline's chunk: the layers after it run on another rank */
    fsc_pipe_running_layers(e, &lo, &hi);
    for (int l = layer + dir; ok && d->prefetch && l >= lo && l <= hi && d->inflight < d->limit - 1; l += dir) {
        for (int u = 1; u < d->nunits && d->inflight < d->limit - 1; u++) {
            fsdp_unit *U = &d->u[u];
            if (U->full || U->g.req || !layer_uses_unit(e, d, l, u)) continue;
            if (gather_start(e, U, e->po.param_dtype, &U->g) != FSC_OK) { /* gathered when needed */
                ok = 0;
                break;
            }
            d->inflight++;
        }
    }
    if (!ok || d->mdev == e->dev) return;
    for (int l = layer + dir; d->prefetch && l >= lo && l <= hi && d->uploading < d->limit - 1; l += dir) {
        for (int u = 1; u < d->nunits && d->uploading < d->limit - 1; u++) {
            fsdp_unit *U = &d->u[u];
            if (U->full || U->g.req || U->dm || !layer_uses_unit(e, d, l, u)) continue;
            if (upload_ahead(e, U) != FSC_OK) return; /* uploaded when gathered */
        }
    }
}

static void unit_reshard(fsc_engine *e, fsdp_unit *U) {
    if (U->g.req) { /* a prefetch no layer used: wait for it, then drop it */
        float *full = NULL;
        if (gather_finish(e, U, &U->g, &full) == FSC_OK) fsc_device_release(e->dev, full);
        ((fsdp_state *)e->sd)->inflight--;
    }
    fsc_device_release(e->dev, U->full);
    U->full = NULL;
    bind_params(e, U, NULL);
}

/* Hybrid: the unit's full gradient permuted into a new buffer (FSC_TAG_COMM, padded floats) so that world block
 * r is sub-piece g of shard j (r = g*G + j): a reduce-scatter over the world then hands rank r that piece,
 * summed over every rank in rank order, and an all-gather across the replicas of j assembles shard j. */
static fsc_status hybrid_permute(fsc_engine *e, const fsdp_unit *U, float **out) {
    const fsdp_state *d = e->sd;
    const size_t sN = U->padded / (size_t)d->N;
    float *perm = NULL;
    fsc_status s = fsc_device_alloc(e->dev, FSC_TAG_COMM, U->padded * sizeof(float), (void **)&perm);
    for (int r = 0; r < d->N && s == FSC_OK; r++) {
        int g = r / d->G, j = r % d->G;
        s = fsc_device_copy(e->dev, perm + (size_t)r * sN, U->fgrad + (size_t)j * U->shard + (size_t)g * sN,
                            sN * sizeof(float));
    }
    if (s != FSC_OK) fsc_device_release(e->dev, perm);
    *out = s == FSC_OK ? perm : NULL;
    return s;
}

/* Reduce the unit's full gradient into sgrad (device, U->shard floats; sum over the world in rank order). */
static fsc_status unit_reduce_into(fsc_engine *e, fsdp_unit *U, float *sgrad, int accumulate) {
    fsdp_state *d = e->sd;
    if (U->rs || d->G == 1) return fsc_engine_reduce(e, U->rc, U->rs, U->fgrad, sgrad, U->padded, accumulate);
    /* the exact reduction: int64 sums in any order, over the shard group then across the replicas */
    if (e->exact) return fsc_exact_reduce(e, d->shard_comm, 1, d->replica_comm, U->fgrad, sgrad, U->padded);
    /* hybrid: permute, reduce-scatter over the world, all-gather across the replicas */
    const size_t sN = U->padded / (size_t)d->N;
    float *perm = NULL, *piece = NULL;
    fsc_status s = hybrid_permute(e, U, &perm);
    if (s == FSC_OK) s = fsc_device_alloc(e->dev, FSC_TAG_COMM, sN * sizeof(float), (void **)&piece);
    if (s == FSC_OK) s = fsc_engine_reduce(e, e->comm, 1, perm, piece, U->padded, 0);
    /* the piece holds values of the reduction dtype: gathered in it (the same bits, its bytes) */
    const fsc_dtype dt = e->po.reduce_dtype;
    const size_t es = fsc_dtype_size(dt);
    void *lo = NULL, *gathered = NULL;
    if (s == FSC_OK && dt == FSC_F32 && !accumulate) {
        s = fsc_comm_all_gather(d->replica_comm, piece, sgrad, sN, FSC_F32);
    } else if (s == FSC_OK) {
        const void *send = piece;
        if (dt != FSC_F32) {
            s = fsc_device_alloc(e->dev, FSC_TAG_COMM, sN * es, &lo);
            if (s == FSC_OK) s = fsc_k_convert(e->dev, lo, dt, piece, FSC_F32, sN);
            send = lo;
        }
        if (s == FSC_OK) s = fsc_device_alloc(e->dev, FSC_TAG_COMM, U->shard * es, &gathered);
        if (s == FSC_OK) s = fsc_comm_all_gather(d->replica_comm, send, gathered, sN, dt);
        if (s == FSC_OK) s = fsc_engine_reduce_result(e, gathered, dt, sgrad, U->shard, accumulate);
    }
    fsc_device_release(e->dev, perm);
    fsc_device_release(e->dev, piece);
    fsc_device_release(e->dev, lo);
    fsc_device_release(e->dev, gathered);
    return s;
}

/* Reduce the unit's full gradient into its shard. Offload all: into a device buffer, downloaded into the host
 * shard, or added to it on the host (the device's accumulation adds the reduced value with axpy too). */
static fsc_status unit_reduce(fsc_engine *e, fsdp_unit *U, int accumulate) {
    fsdp_state *d = e->sd;
    /* the exact reduction sums into the int64 shadow of the shard (on the host under offload all) and writes the
     * shard once, after the step's last unit (exact.c): nothing to download here */
    if (d->mdev == e->dev || e->exact) return unit_reduce_into(e, U, U->sgrad, accumulate);
    float *dg = NULL;
    fsc_status s = fsc_device_alloc(e->dev, FSC_TAG_GRADS, U->shard * sizeof(float), (void **)&dg);
    if (s == FSC_OK) s = unit_reduce_into(e, U, dg, 0);
    if (s != FSC_OK) {
        fsc_device_release(e->dev, dg);
        return s;
    }
    return fsc_download_start(e, &d->rq, dg, U->sgrad, d->mdev, U->shard, accumulate); /* owns dg */
}

/* no_shard and hybrid_shard with a class spread over a group (expert parallelism): the dense shards are replicated
 * (no_shard: over the data group; hybrid: over the replica group), the spread units (experts) split over their
 * class's group (no_shard: whole on each of its ranks). The clipping norm counts each element once: no_shard over
 * the spread group, dense units on its rank 0 (as DDP's runs); hybrid over the data group, dense units on replica
 * rank 0; spread units everywhere. */
static fsc_status fsdp_norm_pieces(const fsc_engine *e, float **g, size_t *lens, int *n) {
    const fsdp_state *d = e->sd;
    fsc_comm *spread = fsc_engine_spread_group(e);
    if (!spread || d->G == d->N) {
        *n = -1;
        return FSC_OK;
    }
    const int dense_here = fsc_comm_rank(d->G == 1 ? spread : d->replica_comm) == 0;
    int c = 0;
    for (int u = 0; u < d->nunits; u++) {
        if (!e->rclass[d->u[u].expert].spread && !dense_here) continue;
        if (g) g[c] = d->u[u].sgrad, lens[c] = d->u[u].shard;
        c++;
    }
    *n = c;
    return FSC_OK;
}

/* The shard group, or with a spread class and replicated dense shards the group of fsdp_norm_pieces. */
static fsc_comm *fsdp_norm_group(const fsc_engine *e) {
    const fsdp_state *d = e->sd;
    fsc_comm *spread = fsc_engine_spread_group(e);
    if (!spread || d->G == d->N) return d->shard_comm;
    return d->G == 1 ? spread : e->comm;
}

static fsc_status fsdp_setup(fsc_engine *e) {
    fsdp_state *d = calloc(1, sizeof(*d));
    if (!d) return fsc_error(FSC_ERR_NOMEM, "fsdp: out of memory");
    e->sd = d;
    d->mdev = e->po.offload == FSC_OFFLOAD_ALL ? e->host : e->dev;
    d->N = fsc_comm_size(e->comm); /* the data group: the world, or a pipeline stage's ranks */
    d->rank = fsc_comm_rank(e->comm);
    switch (e->po.shard) {
    case FSC_SHARD_FULL:
    case FSC_SHARD_GRAD_OP:
    case FSC_SHARD_NONE:
    case FSC_SHARD_HYBRID: d->G = fsc_layout_shard_size(&e->po, d->N); break;
    default: return fsc_error(FSC_ERR_INVALID, "fsdp: unknown sharding strategy %d", (int)e->po.shard);
    }
    d->reshard = e->po.reshard_after_forward >= 0
                     ? e->po.reshard_after_forward
                     : (e->po.shard == FSC_SHARD_FULL || e->po.shard == FSC_SHARD_HYBRID);
    d->shard_comm = e->grp.shard, d->replica_comm = e->grp.replica; /* the engine's (fsc_layout_data_groups) */
    if (!d->shard_comm || fsc_comm_size(d->shard_comm) != d->G)
        return fsc_error(FSC_ERR_INTERNAL, "fsdp: the engine made no shard group of %d ranks", d->G);
    fsc_engine_add_group(e, d->shard_comm);
    fsc_engine_add_group(e, d->replica_comm);
    d->prefetch = e->po.prefetch;
    d->limit = fsc_engine_prefetch_limit(e);
    d->rq.dl_keep = d->prefetch ? d->limit - 1 : 0; /* offload all: downloads of reduced shards in flight */
    FSC_TRY(build_units(e, d));
    d->keep = -1; /* with prefetch, the last unit forward uses stays gathered for backward, which starts there */
    for (int u = 1; d->prefetch && u < d->nunits; u++)
        if (d->keep < 0 || d->u[u].last_layer > d->u[d->keep].last_layer) d->keep = u;
    for (int u = 0; u < d->nunits; u++) {
        fsdp_unit *U = &d->u[u];
        const int j = fsc_comm_rank(U->sc);
        FSC_TRY(fsc_device_alloc(d->mdev, FSC_TAG_PARAMS, U->shard * sizeof(float), (void **)&U->master));
        FSC_TRY(fsc_device_calloc(d->mdev, FSC_TAG_GRADS, U->shard * sizeof(float), (void **)&U->sgrad));
        if (e->po.sync_from_rank0 && fsc_comm_size(U->rc) > 1) {
            /* sync_module_states: rank 0's values, broadcast unit by unit (expert units: over the ranks holding
             * the same experts) */
            float *tmp;
            FSC_TRY(fsc_device_alloc(e->dev, FSC_TAG_COMM, U->padded * sizeof(float), (void **)&tmp));
            fsc_status s = fsc_comm_rank(U->rc) == 0 ? init_unit_range(e, e->dev, U, tmp, 0, U->padded) : FSC_OK;
            if (s == FSC_OK) s = fsc_comm_broadcast(U->rc, tmp, U->padded, FSC_F32, 0);
            if (s == FSC_OK && d->mdev != e->dev)
                s = fsc_device_download(e->dev, U->master, tmp + (size_t)j * U->shard, U->shard * sizeof(float));
            else if (s == FSC_OK)
                s = fsc_device_copy(e->dev, U->master, tmp + (size_t)j * U->shard, U->shard * sizeof(float));
            fsc_device_release(e->dev, tmp);
            FSC_TRY(s);
        } else {
            FSC_TRY(init_unit_range(e, d->mdev, U, U->master, (size_t)j * U->shard, U->shard));
        }
        FSC_TRY(fsc_optim_add(e->opt, U->master, U->sgrad, U->shard, &U->seg));
        FSC_TRY(fsc_engine_add_gseg(e, U->sgrad, U->shard));
        bind_params(e, U, NULL);
        bind_grads(e, U, NULL);
    }
    return FSC_OK;
}

static float *take_fgrad(fsc_engine *e, fsdp_unit *U);

static fsc_status fsdp_begin_step(fsc_engine *e) {
    fsdp_state *d = e->sd;
    FSC_TRY(fsc_reduce_drain(e, &d->rq)); /* left by a failed step */
    FSC_TRY(uploads_drop(e));
    for (int u = 0; u < d->nunits; u++) {
        /* a full gradient a failed step left accumulating (no_sync keeps it between micro-batches): the next
         * step's first backward must start from zeros, as it does after a step that ended */
        if (d->u[u].fgrad) fsc_device_release(e->dev, take_fgrad(e, &d->u[u]));
        FSC_TRY(fsc_device_memset(d->mdev, d->u[u].sgrad, 0, d->u[u].shard * sizeof(float)));
    }
    return FSC_OK;
}

static fsc_status fsdp_pre_forward(fsc_engine *e, int layer) {
    fsdp_state *d = e->sd;
    for (int u = 0; u < d->nunits; u++)
        if (layer_uses_unit(e, d, layer, u)) FSC_TRY(unit_gather(e, &d->u[u]));
    prefetch(e, layer, +1);
    return FSC_OK;
}

static fsc_status fsdp_post_forward(fsc_engine *e, int layer) {
    fsdp_state *d = e->sd;
    for (int u = 1; u < d->nunits; u++) /* the root keeps its parameters */
        if (d->reshard && d->u[u].last_layer == layer &&
            !(d->keep >= 0 && d->u[u].last_layer == d->u[d->keep].last_layer))
            unit_reshard(e, &d->u[u]);
    return FSC_OK;
}

static fsc_status fsdp_pre_backward(fsc_engine *e, int layer) {
    fsdp_state *d = e->sd;
    for (int u = 0; u < d->nunits; u++) {
        fsdp_unit *U = &d->u[u];
        if (!layer_uses_unit(e, d, layer, u)) continue;
        FSC_TRY(unit_gather(e, U));
        if (!U->fgrad) {
            FSC_TRY(fsc_device_calloc(e->dev, FSC_TAG_GRADS, U->padded * sizeof(float), (void **)&U->fgrad));
            bind_grads(e, U, U->fgrad);
        }
    }
    prefetch(e, layer, -1);
    return FSC_OK;
}

/* The unit's full gradient, unbound from the model: the caller owns it from here on. */
static float *take_fgrad(fsc_engine *e, fsdp_unit *U) {
    float *fg = U->fgrad;
    U->fgrad = NULL;
    bind_grads(e, U, NULL);
    return fg;
}

/* Overlap (prefetch): start the unit's reduction, which runs during the next units' backward and owns its full
 * gradient from here on. Under hybrid_shard the queue is advanced: the all-gathers of older units whose
 * reduce-scatter was waited for at an earlier unit are waited for, the oldest reduce-scatters waited for (their
 * all-gathers started) until at most limit - 2 remain; every rank advances at the same units, so the world's and
 * the replica group's operations are issued in the same order everywhere. Otherwise at most limit - 1 older
 * reductions stay in flight (oldest waited for first). A dense unit under hybrid_shard reduce-scatters a permuted
 * copy of its full gradient (freed at once) over the world, then all-gathers across the replicas; every other
 * unit (hybrid's expert units too: over the expert-data group) is one phase. Offload all: into a device shard,
 * downloaded at the finish. */
static fsc_status unit_reduce_start(fsc_engine *e, fsdp_unit *U, int accumulate) {
    fsdp_state *d = e->sd;
    fsc_device *hdev = d->mdev != e->dev ? d->mdev : NULL;
    if (d->G != d->N && d->G != 1) FSC_TRY(fsc_reduce_advance(e, &d->rq, d->limit - 2));
    else FSC_TRY(fsc_reduce_drain_to(e, &d->rq, d->limit - 2));
    if (!U->rs && d->G != 1) {
        float *perm = NULL;
        fsc_status s = hybrid_permute(e, U, &perm);
        fsc_device_release(e->dev, take_fgrad(e, U));
        FSC_TRY(s);
        return fsc_reduce_start_gather(e, &d->rq, e->comm, perm, d->replica_comm, U->sgrad, hdev, U->padded,
                                       accumulate, perm);
    }
    float *fg = take_fgrad(e, U);
    if (hdev) return fsc_reduce_start_host(e, &d->rq, U->rc, U->rs, fg, U->sgrad, hdev, U->padded, accumulate, fg);
    return fsc_reduce_start(e, &d->rq, U->rc, U->rs, fg, U->sgrad, U->padded, accumulate, fg, NULL, 0);
}

static fsc_status fsdp_post_backward(fsc_engine *e, int layer) {
    fsdp_state *d = e->sd;
    /* the exact reduction in a pipeline: every backward (and W) of one chunk is a term of its own (exact.c), so a
     * unit used by several of this rank's chunks (the root under a V, or with units wider than a block) reduces
     * what this chunk added when the chunk's backward ends, at its first layer */
    int lo = -1, hi;
    if (e->exact && e->pipe) fsc_pipe_running_layers(e, &lo, &hi);
    for (int u = 0; u < d->nunits; u++) {
        fsdp_unit *U = &d->u[u];
        /* the unit's backward is complete */
        if (U->first_layer != layer && !(layer == lo && U->first_layer < lo && U->fgrad)) continue;
        if (e->sync) {
            /* each micro-batch that reduces adds to the shard after the first */
            int accumulate = !e->po.no_sync && e->micro > 0;
            if (d->prefetch && !e->exact) { /* the exact reduction runs at once */
                FSC_TRY(unit_reduce_start(e, U, accumulate));
            } else {
                FSC_TRY(unit_reduce(e, U, accumulate));
                fsc_device_release(e->dev, take_fgrad(e, U));
            }
        }
        unit_reshard(e, U);
    }
    return FSC_OK;
}

/* After the last backward of a step: the reductions and downloads in flight are done before anyone reads the
 * shards; uploads started ahead are dropped (the step changes the masters). */
static fsc_status fsdp_end_backward(fsc_engine *e) {
    fsdp_state *d = e->sd;
    fsc_status s = fsc_reduce_drain(e, &d->rq);
    fsc_status u = uploads_drop(e);
    return s != FSC_OK ? s : u;
}

static fsc_status fsdp_full_tensors(fsc_engine *e, int want, float *host) {
    fsdp_state *d = e->sd;
    for (int u = 0; u < d->nunits; u++) {
        fsdp_unit *U = &d->u[u];
        float *full;
        FSC_TRY(gather(e, U, FSC_F32, &full));
        fsc_status s = FSC_OK;
        for (int k = 0; k < U->ntensors && s == FSC_OK && want && host; k++) {
            int t = U->tensors[k];
            s = fsc_device_download(e->dev, host + fsc_engine_tensor_offset(e, t), full + U->uoff[k],
                                    e->m->info[t].numel * sizeof(float));
        }
        fsc_device_release(e->dev, full);
        FSC_TRY(s);
    }
    return FSC_OK;
}

/* Collective over each shard group: unit by unit, gather, the rank with w writes, then the group agrees on
 * the write, so a failed write (a full disk) stops every rank at once with the writer's message instead of
 * leaving the others waiting in the next unit's gather. */
static fsc_status fsdp_write_full(fsc_engine *e, fsc_st_writer *w) {
    fsdp_state *d = e->sd;
    for (int u = 0; u < d->nunits; u++) {
        fsdp_unit *U = &d->u[u];
        float *full;
        FSC_TRY(gather(e, U, FSC_F32, &full));
        fsc_status s = FSC_OK;
        for (int k = 0; k < U->ntensors && s == FSC_OK && w; k++)
            s = fsc_engine_write_tensor(e, w, U->tensors[k], full + U->uoff[k]);
        fsc_device_release(e->dev, full);
        FSC_TRY(fsc_comm_agree(U->sc, e->dev, s));
    }
    return FSC_OK;
}

static fsc_status fsdp_load_full(fsc_engine *e, fsc_st_file *f) {
    fsdp_state *d = e->sd;
    for (int u = 0; u < d->nunits; u++) {
        fsdp_unit *U = &d->u[u];
        size_t first = (size_t)fsc_comm_rank(U->sc) * U->shard, last = first + U->shard;
        FSC_TRY(fsc_device_memset(d->mdev, U->master, 0, U->shard * sizeof(float)));
        for (int k = 0; k < U->ntensors; k++) {
            const fsc_param_info *pi = &e->m->info[U->tensors[k]];
            size_t lo = U->uoff[k], hi = lo + pi->numel;
            size_t a = lo > first ? lo : first, b = hi < last ? hi : last;
            if (a >= b) continue;
            if (d->mdev == e->dev) {
                FSC_TRY(fsc_engine_read_tensor(e, f, U->tensors[k], a - lo, b - a, U->master + (a - first)));
                continue;
            }
            /* offload all: the host master, read in place (found and converted as fsc_engine_read_tensor does) */
            const fsc_st_entry *en = fsc_st_find_weight(f, pi->name);
            if (!en) return fsc_error(FSC_ERR_FORMAT, "weights file lacks %s", pi->name);
            FSC_TRY(fsc_engine_read_f32(f, en, U->master + (a - first), a - lo, b - a));
        }
    }
    return FSC_OK;
}

/* The tensor pieces inside this rank's shard of every unit (padding is no holding). Replicas of a shard
 * (hybrid_shard, no_shard) hold the same pieces; the first replica writes them. */
static fsc_status fsdp_holdings(fsc_engine *e, fsc_holding **out, int *n) {
    fsdp_state *d = e->sd;
    *out = NULL;
    *n = 0;
    int cap = 1;
    for (int u = 0; u < d->nunits; u++) cap += d->u[u].ntensors;
    fsc_holding *h = calloc((size_t)cap, sizeof(*h));
    if (!h) return fsc_error(FSC_ERR_NOMEM, "fsdp: out of memory");
    int c = 0;
    for (int u = 0; u < d->nunits; u++) {
        const fsdp_unit *U = &d->u[u];
        /* expert units: split over their class's group (every rank holding those experts), or (no_shard) written
         * by its first rank */
        const int writer = U->expert ? U->sc == U->rc || fsc_comm_rank(U->rc) == 0
                                     : fsc_comm_rank(d->replica_comm) == 0;
        size_t own_lo = (size_t)fsc_comm_rank(U->sc) * U->shard, own_hi = own_lo + U->shard;
        for (int k = 0; k < U->ntensors; k++) {
            size_t lo = U->uoff[k], hi = lo + e->m->info[U->tensors[k]].numel;
            size_t a = lo > own_lo ? lo : own_lo, b = hi < own_hi ? hi : own_hi;
            if (a >= b) continue;
            h[c++] = (fsc_holding){ .tensor = U->tensors[k], .first = a - lo, .n = b - a, .seg = U->seg,
                                    .seg_off = a - own_lo, .write = writer };
        }
    }
    *out = h;
    *n = c;
    return FSC_OK;
}

/* Gathered copies are made from the masters when next needed: drop any that outlived a step or an eval (the
 * unit kept for backward, prefetches still in flight: waited for, then dropped). */
static fsc_status fsdp_after_load(fsc_engine *e) {
    fsdp_state *d = e->sd;
    for (int u = 0; u < d->nunits; u++)
        if (d->u[u].full || d->u[u].g.req) unit_reshard(e, &d->u[u]);
    return uploads_drop(e);
}

static void fsdp_destroy(fsc_engine *e) {
    fsdp_state *d = e->sd;
    if (!d) return;
    fsc_reduce_queue_free(e, &d->rq);
    if (d->u) (void)uploads_drop(e);
    for (int u = 0; d->u && u < d->nunits; u++) {
        fsdp_unit *U = &d->u[u];
        if (U->g.req) unit_reshard(e, U);
        fsc_device_release(d->mdev, U->master);
        fsc_device_release(d->mdev, U->sgrad);
        fsc_device_release(e->dev, U->full);
        fsc_device_release(e->dev, U->fgrad);
        free(U->tensors);
        free(U->uoff);
    }
    free(d->u);
    free(d->unit_of);
    free(d);
    e->sd = NULL;
}

const fsc_strategy fsc_strategy_fsdp = {
    .name = "fsdp",
    .setup = fsdp_setup,
    .norm_group = fsdp_norm_group,
    .norm_pieces = fsdp_norm_pieces,
    .pre_forward = fsdp_pre_forward,
    .post_forward = fsdp_post_forward,
    .pre_backward = fsdp_pre_backward,
    .post_backward = fsdp_post_backward,
    .begin_step = fsdp_begin_step,
    .end_backward = fsdp_end_backward,
    .full_tensors = fsdp_full_tensors,
    .write_full = fsdp_write_full,
    .load_full = fsdp_load_full,
    .holdings = fsdp_holdings,
    .after_load = fsdp_after_load,
    .destroy = fsdp_destroy,
    .end_eval = fsdp_after_load, /* every gathered unit freed (and prefetches settled), as after a backward */
};
