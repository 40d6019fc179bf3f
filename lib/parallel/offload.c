/* Offload to host memory (docs/offload.md): the engine's half. Host memory is a device of its own (a "cpu"
 * device the engine makes, e->host), so its ledger counts host bytes per tag apart from the rank's device and
 * the optimizer's kernels run on the host with the cpu backend's code.
 *
 * offload optim (ZeRO-Offload): the optimizer is made on the host device, so its state (moments) lives there.
 * The strategy registers its device segments (fp32 master shard, reduced gradient shard) as without offload;
 * here each segment gets a host copy of both. A step downloads the reduced (unscaled, clipped) gradients and
 * the masters, runs the optimizer on the host copies and uploads the updated masters, segment by segment as a
 * pipeline with po.prefetch (asynchronous copies, device.h): segment k+1 is downloaded and segment k-1 uploaded
 * while the optimizer steps segment k; with prefetch 0 each copy is waited for where it starts. Between steps the
 * segments point at the device buffers again, so checkpoints and weight loading see the device masters.
 * offload all (FSDP's cpu_offload): fsdp.c keeps masters and reduced gradients on the host itself and
 * registers them; nothing to stage here.
 * Not here: the strategies' parts of offload all (fsdp.c), the copies and their simulated time (lib/core). */
#include <stdlib.h>
#include "engine_impl.h"

struct fsc_offload {
    int nseg;
    float **dparam;      /* (nseg) the device buffers the strategy registered */
    const float **dgrad;
    float **hparam;      /* (nseg) their host copies (host device: params, grads) */
    float **hgrad;
    fsc_copy **down;     /* (2 nseg) a step's downloads in flight: gradient 2k, master 2k + 1 */
    fsc_copy **up;       /* (nseg) its uploads in flight */
};

const char *fsc_offload_mode_name(fsc_offload_mode m) {
    switch (m) {
    case FSC_OFFLOAD_NONE: return "none";
    case FSC_OFFLOAD_OPTIM: return "optim";
    case FSC_OFFLOAD_ALL: return "all";
    }
    return "?";
}

fsc_device *fsc_engine_host_device(const fsc_engine *e) { return e ? e->host : NULL; }

fsc_device *fsc_offload_seg_dev(const fsc_engine *e, int state) {
    if (!e->host) return e->dev;
    return state == 0 && e->po.offload != FSC_OFFLOAD_ALL ? e->dev : e->host; /* optim: the device masters */
}

fsc_status fsc_offload_validate(const fsc_layout *l, const fsc_parallel_opts *po) {
    const fsc_offload_mode m = po->offload;
    if (m == FSC_OFFLOAD_NONE) return FSC_OK;
    if (m != FSC_OFFLOAD_OPTIM && m != FSC_OFFLOAD_ALL)
        return fsc_error(FSC_ERR_INVALID, "offload must be none, optim or all, not %d", (int)m);
    const char *name = fsc_offload_mode_name(m);
    const int all = m == FSC_OFFLOAD_ALL;
    const char *with = all ? "fsdp" : "fsdp, zero1 or zero2";
    if (po->kind == FSC_PAR_NONE)
        return fsc_error(FSC_ERR_UNSUPPORTED, "offload %s runs with %s, not none (on one rank too: use %s with a world "
                         "of 1, or with each pipeline stage's data group)", name, with, all ? "fsdp" : "fsdp or zero1");
    if (po->kind == FSC_PAR_DDP)
        return fsc_error(FSC_ERR_UNSUPPORTED, "offload %s runs with %s, not ddp (%s)", name, with,
                         all ? "fsdp shards the parameters, which offload all keeps on the host"
                             : "zero1 is ddp with the optimizer state sharded: use it with offload optim");
    if (m == FSC_OFFLOAD_ALL && po->kind != FSC_PAR_FSDP)
        return fsc_error(FSC_ERR_UNSUPPORTED, "offload all runs with fsdp only: %s keeps the parameters replicated "
                         "on every device (use offload optim with it, or fsdp)", fsc_parallel_kind_name(po->kind));
    return FSC_OK;
}

fsc_status fsc_offload_create(fsc_engine *e) {
    e->gdev = e->dev;
    if (e->po.offload == FSC_OFFLOAD_NONE) return FSC_OK;
    fsc_status s = fsc_device_create_host(e->dev, &e->host); /* pinned where the device offers it */
    return s == FSC_OK ? FSC_OK : fsc_error_prefix(s, "offload: host memory");
}

fsc_status fsc_offload_after_setup(fsc_engine *e) {
    if (e->po.offload == FSC_OFFLOAD_ALL) e->gdev = e->host; /* fsdp's reduced gradients live there */
    if (e->po.offload != FSC_OFFLOAD_OPTIM) return FSC_OK;
    struct fsc_offload *o = calloc(1, sizeof *o);
    if (!o) return fsc_error(FSC_ERR_NOMEM, "offload: out of memory");
    e->off = o;
    o->nseg = fsc_optim_num_segments(e->opt);
    size_t ns = (size_t)(o->nseg > 0 ? o->nseg : 1);
    o->dparam = calloc(ns, sizeof *o->dparam);
    o->dgrad = calloc(ns, sizeof *o->dgrad);
    o->hparam = calloc(ns, sizeof *o->hparam);
    o->hgrad = calloc(ns, sizeof *o->hgrad);
    o->down = calloc(2 * ns, sizeof *o->down);
    o->up = calloc(ns, sizeof *o->up);
    if (!o->dparam || !o->dgrad || !o->hparam || !o->hgrad || !o->down || !o->up)
        return fsc_error(FSC_ERR_NOMEM, "offload: out of memory");
    for (int k = 0; k < o->nseg; k++) {
        size_t bytes = fsc_optim_segment_len(e->opt, k) * sizeof(float);
        o->dparam[k] = fsc_optim_param(e->opt, k);
        o->dgrad[k] = fsc_optim_grad(e->opt, k);
        FSC_TRY(fsc_device_alloc(e->host, FSC_TAG_PARAMS, bytes, (void **)&o->hparam[k]));
        FSC_TRY(fsc_device_alloc(e->host, FSC_TAG_GRADS, bytes, (void **)&o->hgrad[k]));
    }
    return FSC_OK;
}

/* Point every segment at the host copies (host 1) or back at the device buffers (0). An empty segment (a shard
 * of no elements: a pipeline stage without root tensors, as the middle ranks of a V) has no buffers to point at,
 * copies nothing and steps nothing. */
static fsc_status rebind(fsc_engine *e, int host) {
    struct fsc_offload *o = e->off;
    for (int k = 0; k < o->nseg; k++)
        if (fsc_optim_segment_len(e->opt, k) > 0) FSC_TRY(fsc_optim_rebind(e->opt, k, host ? o->hparam[k] : o->dparam[k], host ? o->hgrad[k] : o->dgrad[k]));
    return FSC_OK;
}

/* Wait for segment k's downloads (both, even when the first failed); the first error. */
static fsc_status down_wait(struct fsc_offload *o, int k) {
    fsc_status s = fsc_device_copy_wait(o->down[2 * k]);
    fsc_status t = fsc_device_copy_wait(o->down[2 * k + 1]);
    o->down[2 * k] = o->down[2 * k + 1] = NULL;
    return s != FSC_OK ? s : t;
}

/* Start segment k's downloads (gradient, master); with sync, wait for them at once. */
static fsc_status down_start(fsc_engine *e, int k, int sync) {
    struct fsc_offload *o = e->off;
    size_t bytes = fsc_optim_segment_len(e->opt, k) * sizeof(float);
    if (bytes == 0) return FSC_OK;
    FSC_TRY(fsc_device_download_async(e->dev, o->hgrad[k], o->dgrad[k], bytes, &o->down[2 * k]));
    FSC_TRY(fsc_device_download_async(e->dev, o->hparam[k], o->dparam[k], bytes, &o->down[2 * k + 1]));
    return sync ? down_wait(o, k) : FSC_OK;
}

/* Wait for every copy still in flight (a failed step's too: the copies' memory outlives it); the first error. */
static fsc_status copies_settle(struct fsc_offload *o) {
    fsc_status first = FSC_OK;
    for (int k = 0; k < 2 * o->nseg; k++) {
        fsc_status s = fsc_device_copy_wait(o->down[k]);
        o->down[k] = NULL;
        if (first == FSC_OK) first = s;
    }
    for (int k = 0; k < o->nseg; k++) {
        fsc_status s = fsc_device_copy_wait(o->up[k]);
        o->up[k] = NULL;
        if (first == FSC_OK) first = s;
    }
    return first;
}

/* The pipeline: wait for segment k's downloads, start k+1's, step k on the host, start k's upload. */
static fsc_status step_pipelined(fsc_engine *e) {
    struct fsc_offload *o = e->off;
    const int sync = !e->po.prefetch;
    if (o->nseg > 0) FSC_TRY(down_start(e, 0, sync));
    for (int k = 0; k < o->nseg; k++) {
        FSC_TRY(down_wait(o, k));
        if (k + 1 < o->nseg) FSC_TRY(down_start(e, k + 1, sync));
        FSC_TRY(fsc_optim_step_segment(e->opt, k));
        const size_t bytes = fsc_optim_segment_len(e->opt, k) * sizeof(float);
        if (bytes == 0) continue;
        FSC_TRY(fsc_device_upload_async(e->dev, o->dparam[k], o->hparam[k], bytes, &o->up[k]));
        if (sync) {
            fsc_status s = fsc_device_copy_wait(o->up[k]);
            o->up[k] = NULL;
            FSC_TRY(s);
        }
    }
    return FSC_OK;
}

fsc_status fsc_offload_step(fsc_engine *e) {
    struct fsc_offload *o = e->off;
    if (!o) return fsc_optim_step(e->opt); /* no offload, or offload all: the optimizer's buffers are its own */
    FSC_TRY(rebind(e, 1));
    fsc_status s = step_pipelined(e);
    fsc_status c = copies_settle(o); /* every upload done before the device masters are read */
    fsc_status r = rebind(e, 0);
    if (s == FSC_OK) s = c != FSC_OK ? c : r;
    if (s == FSC_OK) fsc_optim_step_end(e->opt);
    return s;
}

void fsc_offload_free(fsc_engine *e) {
    struct fsc_offload *o = e->off;
    if (o) {
        if (o->down && o->up) (void)copies_settle(o); /* before their memory goes */
        for (int k = 0; k < o->nseg; k++) {
            if (o->hparam) fsc_device_release(e->host, o->hparam[k]);
            if (o->hgrad) fsc_device_release(e->host, o->hgrad[k]);
        }
        free(o->dparam);
        free(o->dgrad);
        free(o->hparam);
        free(o->hgrad);
        free(o->down);
        free(o->up);
        free(o);
        e->off = NULL;
    }
    if (e->host) fsc_device_free(e->host);
    e->host = NULL;
}
