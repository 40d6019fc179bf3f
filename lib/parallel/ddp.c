/* DDP: every rank holds all parameters; gradients are summed over the group in buckets, in backward
 * order, as soon as the layers that own them finish their backward. Also serves FSC_PAR_NONE (a world
 * of one rank: the reductions are copies).
 *
 * Buffers (tensor order, the flat layout of gpt.h):
 *   master  (P) fp32 parameters, stepped by the optimizer                    params
 *   compute (P) master rounded to the parameter dtype (only if not f32)      params
 *   grad    (P) local gradients of the current micro-batch(es)               grads
 *   acc     (P) sum of reduced gradients over micro-batches (only when each
 *               micro-batch reduces, accum > 1 and no no_sync)               grads */
#include <stdlib.h>
#include <string.h>
#include "engine_impl.h"

typedef struct {
    int t0, t1;       /* held tensors */
    size_t base;      /* flat offset of tensor t0 in the whole model */
    size_t P;
    float *master, *compute, *grad, *acc;
    int seg;          /* optimizer segment of master */
    size_t pend_lo, pend_hi; /* gradient elements [lo, hi) complete but not yet reduced */
} ddp_state;

static fsc_status ddp_setup(fsc_engine *e) {
    ddp_state *d = calloc(1, sizeof(*d));
    if (!d) return fsc_error(FSC_ERR_NOMEM, "ddp: out of memory");
    e->sd = d;
    fsc_engine_held_range(e, &d->t0, &d->t1);
    d->base = fsc_engine_tensor_offset(e, d->t0);
    d->P = fsc_engine_tensor_offset(e, d->t1) - d->base;
    size_t bytes = d->P * sizeof(float);
    FSC_TRY(fsc_device_alloc(e->dev, FSC_TAG_PARAMS, bytes, (void **)&d->master));
    FSC_TRY(fsc_device_calloc(e->dev, FSC_TAG_GRADS, bytes, (void **)&d->grad));
    if (e->po.param_dtype != FSC_F32)
        FSC_TRY(fsc_device_alloc(e->dev, FSC_TAG_PARAMS, bytes, (void **)&d->compute));
    if (e->po.accum > 1 && !e->po.no_sync)
        FSC_TRY(fsc_device_calloc(e->dev, FSC_TAG_GRADS, bytes, (void **)&d->acc));
    if (e->po.sync_from_rank0 && e->r->world > 1) {
        if (fsc_comm_rank(e->comm) == 0) FSC_TRY(fsc_engine_init_range(e, d->master, d->base, d->P));
        FSC_TRY(fsc_comm_broadcast(e->comm, d->master, d->P, FSC_F32, 0));
    } else {
        FSC_TRY(fsc_engine_init_range(e, d->master, d->base, d->P));
    }
    float *reduced = d->acc ? d->acc : d->grad;
    FSC_TRY(fsc_optim_add(e->opt, d->master, reduced, d->P, &d->seg));
    FSC_TRY(fsc_engine_add_gseg(e, reduced, d->P));
    e->norm_comm = NULL;
    float *p = d->compute ? d->compute : d->master;
    for (int i = d->t0; i < d->t1; i++) {
        size_t off = fsc_engine_tensor_offset(e, i) - d->base;
        e->m->param[i] = p + off;
        e->m->grad[i] = d->grad + off;
    }
    return FSC_OK;
}

static fsc_status ddp_begin_step(fsc_engine *e) {
    ddp_state *d = e->sd;
    FSC_TRY(fsc_device_memset(e->dev, d->grad, 0, d->P * sizeof(float)));
    if (d->compute) FSC_TRY(fsc_engine_round_to(e, d->compute, d->master, d->P, e->po.param_dtype));
    d->pend_lo = d->pend_hi = d->P;
    return FSC_OK;
}

static fsc_status ddp_pre_forward(fsc_engine *e, int layer) {
    ddp_state *d = e->sd;
    if (layer == e->lf) d->pend_lo = d->pend_hi = d->P; /* nothing pending in a new micro-batch */
    /* each micro-batch reduces on its own: start it from zero local gradients */
    if (layer == e->lf && e->micro > 0 && d->acc) FSC_TRY(fsc_device_memset(e->dev, d->grad, 0, d->P * sizeof(float)));
    return FSC_OK;
}

static fsc_status flush(fsc_engine *e) {
    ddp_state *d = e->sd;
    size_t lo = d->pend_lo, n = d->pend_hi - d->pend_lo;
    if (n == 0) return FSC_OK;
    d->pend_hi = lo;
    if (d->acc) return fsc_engine_reduce(e, e->comm, 0, d->grad + lo, d->acc + lo, n, e->micro > 0);
    return fsc_engine_reduce(e, e->comm, 0, d->grad + lo, d->grad + lo, n, 0);
}

static fsc_status ddp_post_backward(fsc_engine *e, int layer) {
    ddp_state *d = e->sd;
    if (!e->sync) return FSC_OK;
    /* the tensors this layer owns are contiguous and precede what earlier (later-in-model) layers own */
    for (int i = d->t1 - 1; i >= d->t0; i--) {
        if (e->m->info[i].layer != layer) continue;
        size_t off = fsc_engine_tensor_offset(e, i) - d->base;
        if (off < d->pend_lo) d->pend_lo = off;
    }
    size_t bucket = e->po.bucket_bytes ? e->po.bucket_bytes : (25u << 20);
    if ((d->pend_hi - d->pend_lo) * sizeof(float) >= bucket || layer == e->lf) FSC_TRY(flush(e));
    return FSC_OK;
}

static fsc_status ddp_full_tensors(fsc_engine *e, int want, float *host) {
    ddp_state *d = e->sd;
    if (!want || !host) return FSC_OK;
    return fsc_device_download(e->dev, host + d->base, d->master, d->P * sizeof(float));
}

static fsc_status ddp_write_full(fsc_engine *e, fsc_st_writer *w) {
    ddp_state *d = e->sd;
    if (!w) return FSC_OK;
    size_t off = 0;
    fsc_status s = FSC_OK;
    for (int i = d->t0; i < d->t1 && s == FSC_OK; i++) {
        size_t n = e->m->info[i].numel;
        float *h = malloc(n * sizeof(float));
        if (!h) return fsc_error(FSC_ERR_NOMEM, "ddp: out of host memory writing %s", e->m->info[i].name);
        s = fsc_device_download(e->dev, h, d->master + off, n * sizeof(float));
        if (s == FSC_OK) s = fsc_st_writer_write(w, i, h, 0, n);
        free(h);
        off += n;
    }
    return s;
}

static fsc_status ddp_load_full(fsc_engine *e, fsc_st_file *f) {
    ddp_state *d = e->sd;
    size_t off = 0;
    fsc_status s = FSC_OK;
    for (int i = d->t0; i < d->t1 && s == FSC_OK; i++) {
        size_t n = e->m->info[i].numel;
        const fsc_st_entry *en = fsc_st_find(f, e->m->info[i].name);
        if (!en) return fsc_error(FSC_ERR_FORMAT, "weights file lacks %s", e->m->info[i].name);
        float *h = malloc(n * sizeof(float));
        if (!h) return fsc_error(FSC_ERR_NOMEM, "ddp: out of host memory reading %s", e->m->info[i].name);
        s = fsc_st_read(f, en, h, 0, n);
        if (s == FSC_OK) s = fsc_device_upload(e->dev, d->master + off, h, n * sizeof(float));
        free(h);
        off += n;
    }
    return s;
}

/* Every held tensor whole. Every rank holds replicas; one rank of the data group writes each tensor, the
 * least loaded so far (by elements, ties to the lowest rank), so the ranks share a checkpoint's writing. */
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
        int w = 0;
        for (int r = 1; r < N; r++)
            if (load[r] < load[w]) w = r;
        load[w] += e->m->info[i].numel;
        h[c++] = (fsc_holding){ .tensor = i, .first = 0, .n = e->m->info[i].numel, .seg = d->seg,
                                .seg_off = fsc_engine_tensor_offset(e, i) - d->base, .write = w == me };
    }
    free(load);
    *out = h;
    *n = c;
    return FSC_OK;
}

/* The compute copy is rounded from master at every begin_step: nothing is derived between steps. */
static fsc_status ddp_after_load(fsc_engine *e) {
    (void)e;
    return FSC_OK;
}

static void ddp_destroy(fsc_engine *e) {
    ddp_state *d = e->sd;
    if (!d) return;
    fsc_device_release(e->dev, d->master);
    fsc_device_release(e->dev, d->compute);
    fsc_device_release(e->dev, d->grad);
    fsc_device_release(e->dev, d->acc);
    free(d);
    e->sd = NULL;
}

const fsc_strategy fsc_strategy_ddp = {
    .name = "ddp",
    .setup = ddp_setup,
    .pre_forward = ddp_pre_forward,
    .post_backward = ddp_post_backward,
    .begin_step = ddp_begin_step,
    .full_tensors = ddp_full_tensors,
    .write_full = ddp_write_full,
    .load_full = ddp_load_full,
    .holdings = ddp_holdings,
    .after_load = ddp_after_load,
    .destroy = ddp_destroy,
};
