/* The training engine: one optimizer step over micro-batches, the same on every parallel strategy.
 * Order (parallel.h): forward, backward with dloss = loss_scale / (global_batch * T), reductions by the
 * strategy (fsc_engine_reduce), unscale, non-finite vote, exact-norm clipping, optimizer step.
 * A step is this rank's list of actions run by one runner (step.c): the forwards and backwards (the accumulation
 * list F0 B0 F1 B1 ..., or a pipeline's schedule), then R (the strategy's end_backward) and O (fsc_step_optimize,
 * here: the sums, unscale, the vote, clipping, the optimizer); step_model reads: prepare, begin_step, run.
 * What differs between strategies (where parameters and gradients live) is behind fsc_strategy.
 * The vote runs on every precision: a step with inf or NaN in its loss or gradients on any rank applies no
 * update anywhere; weights are checked for inf/NaN when saved and loaded (fsc_engine_check_finite). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "engine_impl.h"
#include "io/json_lock.h" /* fsc_json_parse: cJSON under the library's lock */
#include "optim/optim_impl.h"
#include "fsc/schedule.h"
#include "exact.h"
#include "pipe.h"
#include "step.h"
#include "core/model_text.h" /* fsc_config_text */
#include "core/trace_impl.h" /* fsc_trace_set_place */

#define FSC_DEFAULT_MAX_SKIPS 100 /* po.max_skipped_steps 0 */

static const char *nonfinite_name(double x) { return isnan(x) ? "NaN" : x > 0 ? "inf" : "-inf"; }

const char *fsc_parallel_kind_name(fsc_parallel_kind k) {
    switch (k) {
    case FSC_PAR_NONE: return "none";
    case FSC_PAR_DDP: return "ddp";
    case FSC_PAR_FSDP: return "fsdp";
    case FSC_PAR_ZERO1: return "zero1";
    case FSC_PAR_ZERO2: return "zero2";
    }
    return "?";
}

size_t fsc_engine_tensor_offset(const fsc_engine *e, int i) { return e->toff[i]; }

/* The prefix sums behind fsc_engine_tensor_offset, once e->m is made. */
static fsc_status make_offsets(fsc_engine *e) {
    e->toff = malloc(((size_t)e->m->n_tensors + 1) * sizeof *e->toff);
    if (!e->toff) return fsc_error(FSC_ERR_NOMEM, "engine: out of memory");
    e->toff[0] = 0;
    for (int t = 0; t < e->m->n_tensors; t++) e->toff[t + 1] = e->toff[t] + e->m->info[t].numel;
    return FSC_OK;
}

int fsc_engine_holds(const fsc_engine *e, int i) {
    int l = e->m->info[i].layer, x = e->m->info[i].expert;
    if (l < e->lf || l > e->ll || !fsc_pipe_runs_layer(e, l)) return 0; /* interleaved: another rank's chunk */
    if (x < 0 || !e->ep_comm) return 1;
    int first, count; /* expert parallelism: this rank's experts only */
    fsc_engine_local_experts(e, &first, &count);
    return x >= first && x < first + count;
}

void fsc_engine_local_experts(const fsc_engine *e, int *first, int *count) {
    const int E = e->m->n_experts;
    const int G = e->ep_comm ? fsc_comm_size(e->ep_comm) : 1, r = e->ep_comm ? fsc_comm_rank(e->ep_comm) : 0;
    *first = r * (E / G);
    *count = E / G;
}

void fsc_engine_held_range(const fsc_engine *e, int *t0, int *t1) {
    int a = -1, b = -1;
    for (int i = 0; i < e->m->n_tensors; i++) {
        if (!fsc_engine_holds(e, i)) continue;
        if (a < 0) a = i;
        b = i + 1;
    }
    *t0 = a < 0 ? 0 : a;
    *t1 = b < 0 ? 0 : b;
}

fsc_status fsc_engine_init_range(fsc_engine *e, float *dst, size_t first, size_t n) {
    enum { CHUNK = 1 << 16 };
    if (fsc_device_discards(e->dev, dst)) return FSC_OK; /* the planner's counting device: values not kept */
    float *host = malloc(CHUNK * sizeof(float));
    if (!host) return fsc_error(FSC_ERR_NOMEM, "engine: out of host memory for parameter init");
    fsc_status s = FSC_OK;
    size_t t_off = 0; /* offset of tensor t in the flat vector */
    size_t done = 0;
    for (int t = 0; t < e->m->n_tensors && done < n && s == FSC_OK; t++) {
        size_t numel = e->m->info[t].numel;
        size_t lo = first + done;
        if (lo >= t_off + numel) { t_off += numel; continue; }
        while (done < n && first + done < t_off + numel && s == FSC_OK) {
            size_t in_t = first + done - t_off;
            size_t k = t_off + numel - (first + done);
            if (k > n - done) k = n - done;
            if (k > CHUNK) k = CHUNK;
            e->m->ops->init_values(e->m->ctx, e->seed, t, in_t, k, host);
            s = fsc_device_upload(e->dev, dst + done, host, k * sizeof(float));
            done += k;
        }
        t_off += numel;
    }
    free(host);
    if (s == FSC_OK && done < n) { /* beyond the last tensor: padding, zero */
        s = fsc_device_memset(e->dev, dst + done, 0, (n - done) * sizeof(float));
    }
    return s;
}

size_t fsc_engine_file_numel(const fsc_param_info *p) {
    return p->file_rows > 0 && p->file_rows < p->shape[0] ? (size_t)p->file_rows * (p->numel / (size_t)p->shape[0])
                                                          : p->numel;
}

fsc_status fsc_engine_read_f32(fsc_st_file *f, const fsc_st_entry *en, float *dst, size_t first, size_t n) {
    size_t have = 1;
    for (int d = 0; d < en->ndim; d++) have *= (size_t)en->shape[d];
    const size_t k = first >= have ? 0 : have - first < n ? have - first : n;
    if (k) FSC_TRY(fsc_st_read_f32(f, en, dst, first, k));
    memset(dst + k, 0, (n - k) * sizeof(float)); /* padding rows the file does not hold */
    return FSC_OK;
}

fsc_status fsc_engine_write_tensor(fsc_engine *e, fsc_st_writer *w, int i, const float *src) {
    size_t n = fsc_engine_file_numel(&e->m->info[i]);
    float *h = malloc(n * sizeof(float));
    if (!h) return fsc_error(FSC_ERR_NOMEM, "engine: out of host memory writing %s", e->m->info[i].name);
    fsc_status s = fsc_device_download(e->dev, h, src, n * sizeof(float));
    if (s == FSC_OK) s = fsc_st_writer_write_f32(w, i, h, 0, n);
    free(h);
    return s;
}

fsc_status fsc_engine_read_tensor(fsc_engine *e, fsc_st_file *f, int i, size_t first, size_t n, float *dst) {
    const char *name = e->m->info[i].name;
    const fsc_st_entry *en = fsc_st_find_weight(f, name);
    if (!en) return fsc_error(FSC_ERR_FORMAT, "weights file lacks %s", name);
    float *h = malloc(n * sizeof(float));
    if (!h) return fsc_error(FSC_ERR_NOMEM, "engine: out of host memory reading %s", name);
    fsc_status s = fsc_engine_read_f32(f, en, h, first, n);
    if (s == FSC_OK) s = fsc_device_upload(e->dev, dst, h, n * sizeof(float));
    free(h);
    return s;
}

fsc_status fsc_engine_round_to(fsc_engine *e, float *dst, const float *src, size_t n, fsc_dtype dt) {
    if (dt == FSC_F32) return dst == src ? FSC_OK : fsc_device_copy(e->dev, dst, src, n * sizeof(float));
    void *tmp;
    FSC_TRY(fsc_device_alloc(e->dev, FSC_TAG_WORKSPACE, n * fsc_dtype_size(dt), &tmp));
    fsc_status s = fsc_k_convert(e->dev, tmp, dt, src, FSC_F32, n);
    if (s == FSC_OK) s = fsc_k_convert(e->dev, dst, FSC_F32, tmp, dt, n);
    fsc_device_release(e->dev, tmp);
    return s;
}

fsc_status fsc_engine_reduce_result(fsc_engine *e, const void *recv, fsc_dtype dt, float *out, size_t nout,
                                    int accumulate) {
    fsc_device *dev = e->dev;
    if (!accumulate) return fsc_k_convert(dev, out, FSC_F32, recv, dt, nout);
    if (dt == FSC_F32) return fsc_k_axpy(dev, out, 1.0f, recv, nout);
    float *tmp;
    fsc_status s = fsc_device_alloc(dev, FSC_TAG_COMM, nout * sizeof(float), (void **)&tmp);
    if (s == FSC_OK) s = fsc_k_convert(dev, tmp, FSC_F32, recv, dt, nout);
    if (s == FSC_OK) s = fsc_k_axpy(dev, out, 1.0f, tmp, nout);
    fsc_device_release(dev, tmp);
    return s;
}

fsc_status fsc_engine_reduce(fsc_engine *e, fsc_comm *c, int rs, const float *in, float *out, size_t n,
                             int accumulate) {
    if (e->exact) return fsc_exact_reduce(e, c, rs, NULL, in, out, n); /* int64 sums; out is written once, at the end */
    int size = fsc_comm_size(c);
    size_t nout = rs ? n / (size_t)size : n;
    fsc_dtype dt = e->po.reduce_dtype;
    fsc_device *dev = e->dev;
    fsc_status s = FSC_OK;
    if (dt == FSC_F32 && !accumulate) {
        return rs ? fsc_comm_reduce_scatter(c, in, out, nout, FSC_F32, FSC_SUM)
                  : fsc_comm_all_reduce(c, in, out, n, FSC_F32, FSC_SUM);
    }
    /* send buffer in the reduction dtype, result buffer in the reduction dtype, then into out */
    size_t es = fsc_dtype_size(dt);
    void *send = NULL, *recv = NULL;
    const void *sendp = in;
    if (dt != FSC_F32) {
        s = fsc_device_alloc(dev, FSC_TAG_COMM, n * es, &send);
        if (s == FSC_OK) s = fsc_k_convert(dev, send, dt, in, FSC_F32, n);
        sendp = send;
    }
    /* an all-reduce of a converted copy runs in place in it */
    if (s == FSC_OK && !rs && send) recv = send, send = NULL;
    else if (s == FSC_OK) s = fsc_device_alloc(dev, FSC_TAG_COMM, nout * es, &recv);
    if (s == FSC_OK)
        s = rs ? fsc_comm_reduce_scatter(c, sendp, recv, nout, dt, FSC_SUM)
               : fsc_comm_all_reduce(c, sendp, recv, n, dt, FSC_SUM);
    if (s == FSC_OK) s = fsc_engine_reduce_result(e, recv, dt, out, nout, accumulate);
    fsc_device_release(dev, send);
    fsc_device_release(dev, recv);
    return s;
}

fsc_status fsc_engine_add_gseg(fsc_engine *e, float *g, size_t n) {
    float **gs = realloc(e->gsegs, (size_t)(e->ngsegs + 1) * sizeof(*gs));
    if (!gs) return fsc_error(FSC_ERR_NOMEM, "engine: out of memory");
    e->gsegs = gs;
    size_t *gl = realloc(e->glens, (size_t)(e->ngsegs + 1) * sizeof(*gl));
    if (!gl) return fsc_error(FSC_ERR_NOMEM, "engine: out of memory");
    e->glens = gl;
    e->gsegs[e->ngsegs] = g;
    e->glens[e->ngsegs] = n;
    e->ngsegs++;
    return FSC_OK;
}

/* Layer l's name in a trace: the dotted prefix its own tensors' names share ("h.3", "model.layers.3", "ln_f"),
 * else their first names joined by '+' ("wte+wpe"), else "layer l" (a layer owning no tensor). */
static void layer_label(const fsc_model *m, int l, char *buf, size_t cap) {
    const char *first = NULL;
    size_t n = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        if (m->info[i].layer != l) continue;
        const char *nm = m->info[i].name;
        if (!first) first = nm, n = strlen(nm);
        size_t k = 0;
        while (k < n && nm[k] == first[k]) k++;
        n = k;
    }
    while (first && n > 0 && first[n] != '.') n--; /* whole components only */
    if (!first) {
        snprintf(buf, cap, "layer %d", l);
        return;
    }
    if (n > 0) {
        snprintf(buf, cap, "%.*s", (int)n, first);
        return;
    }
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < m->n_tensors && at < cap; i++) {
        if (m->info[i].layer != l) continue;
        const char *nm = m->info[i].name, *dot = strchr(nm, '.');
        at += (size_t)snprintf(buf + at, cap - at, "%s%.*s", at ? "+" : "", dot ? (int)(dot - nm) : (int)strlen(nm), nm);
    }
}

/* A layer's span: "forward h.3" with the layer's index as its argument. */
static void layer_span(fsc_engine *e, const char *pass, int l) {
    if (!e->trace) return;
    char label[40];
    layer_label(e->m, l, label, sizeof label);
    fsc_trace_begin(e->trace, "layer", "%s %s", pass, label);
    fsc_trace_arg(e->trace, "layer", l);
}

/* hooks: route the model's layer callbacks to the strategy; with a trace, each layer's forward and backward is a
 * span around the strategy's hooks (an FSDP gather or a gradient reduction nests inside its layer's span). With a
 * pipeline, a layer's forward first runs the pipeline's tied hand-offs (pipe.c): a user stage waits for a tied
 * tensor's values before the first layer that reads them, an owner stage sends them after their first use. */
static fsc_status hook_pre_fwd(void *ctx, int l) {
    fsc_engine *e = ctx;
    if (e->pipe) FSC_TRY(fsc_pipe_pre_forward(e, l));
    layer_span(e, "forward", l);
    return e->st->pre_forward ? e->st->pre_forward(e, l) : FSC_OK;
}
static fsc_status hook_post_fwd(void *ctx, int l) {
    fsc_engine *e = ctx;
    if (e->pipe) FSC_TRY(fsc_pipe_post_forward(e, l));
    fsc_status s = e->st->post_forward ? e->st->post_forward(e, l) : FSC_OK;
    fsc_trace_end(e->trace);
    return s;
}
static fsc_status hook_pre_bwd(void *ctx, int l) {
    fsc_engine *e = ctx;
    layer_span(e, "backward", l);
    return e->st->pre_backward ? e->st->pre_backward(e, l) : FSC_OK;
}
static fsc_status hook_post_bwd(void *ctx, int l) {
    fsc_engine *e = ctx;
    fsc_status s = e->st->post_backward ? e->st->post_backward(e, l) : FSC_OK;
    fsc_trace_end(e->trace);
    return s;
}

void fsc_engine_set_trace(fsc_engine *e, fsc_trace *t) {
    if (!e) return;
    e->trace = t;
    const fsc_layout *l = &e->lay; /* the trace's "process_labels": which rank of which stage this is */
    const int piped = l->pp > 1; /* a pipeline's chunks per rank and their placement (tools/pipe_replay) */
    fsc_trace_set_place(t, &(fsc_trace_place){ .pp = l->pp, .stage = l->pipe, .dp = l->dp, .data = l->data,
                                               .tp = l->tp, .tensor = l->tensor,
                                               .chunks = piped ? fsc_pipe_chunks(&e->po) : 1,
                                               .vshape = piped && fsc_pipe_placement_of(&e->po) == FSC_PIPE_V });
    fsc_comm *const named[] = { e->r->comm, e->comm, e->tensor_comm, e->grp.data, e->grp.norm, e->norm_comm,
                                e->ep_comm, e->ep_data };
    for (size_t i = 0; i < sizeof named / sizeof named[0]; i++) fsc_comm_set_trace(named[i], t);
    for (int g = 0; g < e->ngroups; g++) fsc_comm_set_trace(e->groups[g], t);
}

fsc_trace *fsc_engine_get_trace(const fsc_engine *e) { return e ? e->trace : NULL; }

fsc_model_hooks fsc_engine_hooks(fsc_engine *e) {
    return (fsc_model_hooks){ e, hook_pre_fwd, hook_post_fwd, hook_pre_bwd, hook_post_bwd };
}

static fsc_status validate(const fsc_rank *r, const fsc_layout *l, const fsc_parallel_opts *po,
                           const fsc_optim_config *oc) {
    const int dp = l->dp; /* the data-parallel group (the world without pipeline or tensor parallelism) */
    if (po->kind == FSC_PAR_NONE && dp != 1 && dp == r->world)
        return fsc_error(FSC_ERR_INVALID, "parallel 'none' needs a world of 1 rank, not %d (use ddp or fsdp)",
                         r->world);
    if (po->kind == FSC_PAR_NONE && dp != 1)
        return fsc_error(FSC_ERR_INVALID, "parallel 'none' needs a data-parallel group of 1 rank, not %d (use ddp "
                         "or fsdp)", dp);
    if (po->kind > FSC_PAR_ZERO2) return fsc_error(FSC_ERR_INVALID, "unknown parallel kind %d", (int)po->kind);
    if (po->accum < 1) return fsc_error(FSC_ERR_INVALID, "accum must be >= 1, not %d", po->accum);
    if (po->kind == FSC_PAR_FSDP && (po->wrap < FSC_WRAP_BLOCK || po->wrap > FSC_WRAP_MIN_PARAMS))
        return fsc_error(FSC_ERR_INVALID, "wrap must be FSC_WRAP_BLOCK, _MODEL or _MIN_PARAMS, not %d (it acted as "
                         "model)", (int)po->wrap);
    if (po->param_dtype != FSC_F32 && po->param_dtype != FSC_BF16 && po->param_dtype != FSC_F16)
        return fsc_error(FSC_ERR_INVALID, "parameter dtype must be f32, bf16 or f16, not %s (%d)",
                         fsc_dtype_name(po->param_dtype), (int)po->param_dtype);
    if (po->reduce_dtype != FSC_F32 && po->reduce_dtype != FSC_BF16 && po->reduce_dtype != FSC_F16)
        return fsc_error(FSC_ERR_INVALID, "gradient reduction dtype must be f32, bf16 or f16, not %s (%d)",
                         fsc_dtype_name(po->reduce_dtype), (int)po->reduce_dtype);
    if (po->clip < 0 || !isfinite(po->clip))
        return fsc_error(FSC_ERR_INVALID, "clip must be a finite number >= 0, not %g", (double)po->clip);
    if (po->nonfinite != FSC_NONFINITE_STOP && po->nonfinite != FSC_NONFINITE_SKIP)
        return fsc_error(FSC_ERR_INVALID, "nonfinite must be FSC_NONFINITE_STOP or FSC_NONFINITE_SKIP, not %d",
                         (int)po->nonfinite);
    if (po->prefetch != 0 && po->prefetch != 1)
        return fsc_error(FSC_ERR_INVALID, "prefetch must be 0 or 1, not %d", po->prefetch);
    if (po->no_sync != 0 && po->no_sync != 1) /* 0 or 1 as prefetch: another value is a caller's mistake */
        return fsc_error(FSC_ERR_INVALID, "no_sync must be 0 or 1, not %d", po->no_sync);
    if (po->sync_from_rank0 != 0 && po->sync_from_rank0 != 1)
        return fsc_error(FSC_ERR_INVALID, "sync_from_rank0 must be 0 or 1, not %d", po->sync_from_rank0);
    if (po->checkpoint != 0 && po->checkpoint != 1) /* 2 acted as 1, and was recorded as 2 in the settings */
        return fsc_error(FSC_ERR_INVALID, "checkpoint (layer recomputation) must be 0 or 1, not %d", po->checkpoint);
    if (po->sequence_parallel != 0 && po->sequence_parallel != 1)
        return fsc_error(FSC_ERR_INVALID, "sequence_parallel must be 0 or 1, not %d", po->sequence_parallel);
    if (po->reshard_after_forward < -1 || po->reshard_after_forward > 1)
        return fsc_error(FSC_ERR_INVALID, "reshard_after_forward must be -1 (the strategy's default), 0 or 1, not %d",
                         po->reshard_after_forward);
    if (po->prefetch_limit < 0)
        return fsc_error(FSC_ERR_INVALID, "prefetch_limit must be >= 0 (0: 2), not %d", po->prefetch_limit);
    if (po->max_skipped_steps < 0)
        return fsc_error(FSC_ERR_INVALID, "max_skipped_steps must be >= 0 (0: the default %d), not %d",
                         FSC_DEFAULT_MAX_SKIPS, po->max_skipped_steps);
    if (!(po->min_loss_scale >= 0) || !isfinite(po->min_loss_scale))
        return fsc_error(FSC_ERR_INVALID, "min_loss_scale must be a finite number >= 0 (0: the default 1), not %g",
                         (double)po->min_loss_scale);
    if (!(po->init_loss_scale >= 0) || !isfinite(po->init_loss_scale)) /* it became 65536 without a word */
        return fsc_error(FSC_ERR_INVALID, "init_loss_scale must be a finite number >= 0 (0: the default 65536), not %g",
                         (double)po->init_loss_scale);
    /* the default initial scale too: below the floor, the first overflow would raise the scale to the floor */
    const float init_scale = po->init_loss_scale > 0 ? po->init_loss_scale : 65536.0f;
    if (init_scale < po->min_loss_scale)
        return fsc_error(FSC_ERR_INVALID, "init_loss_scale %g%s is below min_loss_scale %g", (double)init_scale,
                         po->init_loss_scale > 0 ? "" : " (the default)", (double)po->min_loss_scale);
    if (!(oc->lr >= 0) || !isfinite(oc->lr)) return fsc_error(FSC_ERR_INVALID, "lr must be finite and >= 0");
    if (po->kind == FSC_PAR_FSDP && po->shard == FSC_SHARD_HYBRID) {
        const int g = fsc_layout_shard_size(po, dp);
        if (g < 1 || dp % g != 0)
            return fsc_error(FSC_ERR_INVALID, "hybrid_shard: group of %d ranks%s does not divide the data group of "
                             "%d%s",
                             g, po->hybrid_group ? "" : " (hybrid_group 0: half the data group)", dp,
                             po->hybrid_group ? "" : "; set hybrid_group to a divisor of it");
    }
    if (po->sequence_parallel && po->tp < 2)
        return fsc_error(FSC_ERR_INVALID, "sequence_parallel needs tensor parallelism (tp 2 or more, not %d)", po->tp);
    return fsc_exact_validate(l, po);
}

/* world = dp x tp x pp in the options' rank order, with clear messages. */
static fsc_status make_layout(const fsc_rank *r, const fsc_parallel_opts *po, int built, fsc_layout *l) {
    if (po->tp < 0) return fsc_error(FSC_ERR_INVALID, "tp (tensor-parallel ranks) must be >= 1, not %d", po->tp);
    const int tp = po->tp > 1 ? po->tp : 1, pp = fsc_pipe_stages(po);
    int order[3];
    FSC_TRY(fsc_layout_parse_order(po->order, order));
    if (r->world % (tp * pp) != 0)
        return fsc_error(FSC_ERR_INVALID, "a world of %d ranks does not split into tp %d x pp %d (world = dp x tp x "
                         "pp)", r->world, tp, pp);
    if (tp > 1 && !built)
        return fsc_error(FSC_ERR_UNSUPPORTED, "tensor parallelism (tp %d) needs a model built on the tensor group: "
                         "fsc_engine_create_built (fsc_engine_create_model takes a model built without it)", tp);
    return fsc_layout_make_ordered(r->world, tp, 0, pp, order, r->rank, l);
}

/* Engine creation in two halves: engine_new validates the options against a model of n_layers layers and
 * n_experts experts (built: the model was built on the tensor group, so tensor parallelism is allowed) and
 * makes the engine without a model; the caller sets e->m (and own_model, the groups), then engine_finish makes
 * the optimizer, the pipeline, the expert groups, the strategy and the tied replicas. On failure of finish,
 * fsc_engine_free. */
static fsc_status engine_new(fsc_rank *r, int n_layers, int n_experts, const fsc_parallel_opts *po,
                             const fsc_optim_config *oc, uint64_t seed, int built, fsc_engine **out) {
    *out = NULL;
    FSC_TRY(fsc_pipe_validate(r, n_layers, po));
    fsc_layout lay;
    FSC_TRY(make_layout(r, po, built, &lay));
    FSC_TRY(validate(r, &lay, po, oc));
    FSC_TRY(fsc_ep_validate(&lay, n_experts, po));
    FSC_TRY(fsc_offload_validate(&lay, po));
    fsc_engine *e = calloc(1, sizeof(*e));
    if (!e) return fsc_error(FSC_ERR_NOMEM, "engine: out of memory");
    e->r = r;
    e->dev = r->dev;
    e->comm = r->comm;
    e->lay = lay;
    e->po = *po;
    e->po.order = NULL; /* parsed into lay.order; the caller's string need not outlive the engine */
    e->oc = *oc;
    e->seed = seed;
    switch (po->kind) {
    case FSC_PAR_NONE:
    case FSC_PAR_DDP: e->st = &fsc_strategy_ddp; break;
    case FSC_PAR_FSDP: e->st = &fsc_strategy_fsdp; break;
    case FSC_PAR_ZERO1:
    case FSC_PAR_ZERO2: e->st = &fsc_strategy_zero; break;
    }
    e->use_scaler = po->param_dtype == FSC_F16 || po->reduce_dtype == FSC_F16;
    fsc_loss_scaler_init(&e->scaler, po->init_loss_scale > 0 ? po->init_loss_scale : 65536.0f, 2000);
    e->scaler.min_scale = po->min_loss_scale > 0 ? po->min_loss_scale : 1.0f;
    e->lf = 0;
    e->ll = n_layers - 1;
    *out = e;
    return FSC_OK;
}

/* Replicas of the tied tensors this rank uses but does not own (a pipeline stage with a user layer and not
 * the owner), initialized as the owner's, with the model's param pointing at them. */
static fsc_status make_tied_copies(fsc_engine *e) {
    const fsc_model *m = e->m;
    for (int i = 0; i < m->n_tensors; i++) {
        const fsc_param_info *pi = &m->info[i];
        if (!pi->nusers || fsc_engine_holds(e, i)) continue;
        int used = 0;
        for (int l = e->lf; l <= e->ll && !used; l++) used = fsc_pipe_runs_layer(e, l) && fsc_param_used_by(pi, l);
        if (!used) continue;
        if (!e->tied_copy && !(e->tied_copy = calloc((size_t)m->n_tensors, sizeof *e->tied_copy)))
            return fsc_error(FSC_ERR_NOMEM, "engine: out of memory");
        FSC_TRY(fsc_device_alloc(e->dev, FSC_TAG_PARAMS, pi->numel * sizeof(float), (void **)&e->tied_copy[i]));
        FSC_TRY(fsc_engine_init_range(e, e->tied_copy[i], fsc_engine_tensor_offset(e, i), pi->numel));
        m->param[i] = e->tied_copy[i];
    }
    return FSC_OK;
}

/* The groups of layout l, once for the whole engine: none when the world is not split; otherwise the data group
 * and, with tp > 1 or pp > 1, the tensor or pipeline group (fsc_layout_split; the trivial ones freed). */
typedef fsc_groups groups;

static fsc_status make_groups(fsc_comm *world, const fsc_layout *l, groups *g) {
    *g = (groups){ 0 };
    if (l->tp == 1 && l->pp == 1) return FSC_OK;
    FSC_TRY(fsc_layout_split(world, l, &g->tensor, &g->data, &g->pipe));
    if (l->tp == 1) fsc_comm_free(g->tensor), g->tensor = NULL;
    if (l->pp == 1) fsc_comm_free(g->pipe), g->pipe = NULL;
    return FSC_OK;
}

/* The engine takes the groups: the data group is e->comm, the others are counted by kind. */
static void attach_groups(fsc_engine *e, groups *g) {
    e->grp = *g;
    e->tensor_comm = g->tensor, e->pipe_comm = g->pipe;
    if (g->data) e->comm = g->data;
    if (g->tensor) fsc_engine_add_group_kind(e, g->tensor, FSC_GROUP_TENSOR);
    if (g->pipe) fsc_engine_add_group_kind(e, g->pipe, FSC_GROUP_PIPELINE);
    if (g->data) fsc_engine_add_group_kind(e, e->r->comm, FSC_GROUP_WORLD); /* the vote, saving and loading */
    *g = (groups){ 0 };
}

/* The groups cut from the data group, once, before expert parallelism and the strategy take them: the expert
 * groups (ep > 1 with a model with experts) and FSDP's shard and replica groups (fsc_layout_data_groups); and the
 * reduction classes (engine_impl.h's fsc_reduce_class). */
static fsc_status make_data_groups(fsc_engine *e) {
    const int ep = e->m->n_experts && e->po.ep > 1 ? e->po.ep : 1;
    const int shard = e->st == &fsc_strategy_fsdp ? fsc_layout_shard_size(&e->po, fsc_comm_size(e->comm)) : 0;
    FSC_TRY(fsc_layout_data_groups(e->comm, ep, shard, &e->grp));
    e->ep_comm = e->grp.expert, e->ep_data = e->grp.expert_data;
    /* the reduction classes the strategies loop over: dense over the data group, experts over the expert-data
     * group */
    e->rclass[0] = (fsc_reduce_class){ .sum = e->comm, .expert = 0 };
    e->nrclass = 1;
    if (e->ep_data)
        e->rclass[e->nrclass++] = (fsc_reduce_class){ .sum = e->ep_data, .spread = e->ep_comm, .expert = 1 };
    return FSC_OK;
}

fsc_comm *fsc_engine_spread_group(const fsc_engine *e) {
    for (int c = 0; c < e->nrclass; c++)
        if (e->rclass[c].spread) return e->rclass[c].spread;
    return NULL;
}

int fsc_engine_reduce_class(const fsc_engine *e, int i) {
    return e->nrclass > 1 && e->m->info[i].expert >= 0;
}

/* The clipping norm's group, decided here once from the layout: the part of the data group the strategy splits its
 * gradient over (its norm_group), widened across tensor ranks and pipeline stages (fsc_layout_norm_group). */
static fsc_status make_norm_group(fsc_engine *e) {
    fsc_comm *norm = NULL;
    FSC_TRY(fsc_layout_norm_group(e->r->comm, &e->lay, e->comm, e->st->norm_group(e), e->pipe_comm, e->dev, &norm,
                                  &e->grp.norm));
    if (e->grp.norm) fsc_engine_add_group_kind(e, e->grp.norm, FSC_GROUP_WORLD);
    e->norm_comm = norm;
    return FSC_OK;
}

/* The clipping norm's pieces, decided here once: with tensor parallelism what this rank holds of split tensors and
 * the replicated ones on tensor rank 0 (fsc_tensor_norm_pieces), otherwise those the strategy declares
 * (norm_pieces), or none (NULL: the norm counts e->gsegs). e->nsegs has this one writer. */
static fsc_status make_norm_pieces(fsc_engine *e) {
    if (e->lay.tp > 1) return fsc_tensor_norm_pieces(e, &e->nsegs, &e->nlens, &e->nnsegs);
    int n = -1;
    if (e->st->norm_pieces) FSC_TRY(e->st->norm_pieces(e, NULL, NULL, &n));
    if (n < 0) return FSC_OK;
    float **g = calloc((size_t)n + 1, sizeof *g);
    size_t *l = calloc((size_t)n + 1, sizeof *l);
    fsc_status s = g && l ? FSC_OK : fsc_error(FSC_ERR_NOMEM, "engine: out of host memory");
    int c = n;
    if (s == FSC_OK) s = e->st->norm_pieces(e, g, l, &c);
    if (s == FSC_OK && c != n)
        s = fsc_error(FSC_ERR_INTERNAL, "engine: strategy %s declared %d clipping pieces, then %d", e->st->name, n, c);
    if (s != FSC_OK) {
        free(g), free(l);
        return s;
    }
    e->nsegs = g, e->nlens = l, e->nnsegs = n;
    return FSC_OK;
}

static fsc_status engine_finish(fsc_engine *e) {
    fsc_status s = make_offsets(e);
    if (s == FSC_OK) s = fsc_tensor_check_model(e->m, &e->lay);
    if (s == FSC_OK) s = fsc_tensor_make_full_info(e);
    if (s == FSC_OK) s = fsc_offload_create(e); /* offload: the optimizer lives on the host */
    if (s == FSC_OK) s = fsc_optim_create(e->host ? e->host : e->dev, &e->oc, &e->opt);
    if (s == FSC_OK) s = fsc_pipe_create(e); /* a stage's layers, before the strategy */
    if (s == FSC_OK && e->pipe) fsc_pipe_span(e, &e->lf, &e->ll);
    if (s == FSC_OK) s = make_data_groups(e);
    if (s == FSC_OK) s = fsc_ep_create(e);
    if (s == FSC_OK) s = e->st->setup(e);
    if (s == FSC_OK) s = fsc_offload_after_setup(e);
    if (s == FSC_OK) s = make_norm_group(e);
    if (s == FSC_OK) s = make_norm_pieces(e);
    if (s == FSC_OK) s = make_tied_copies(e);
    if (s == FSC_OK) s = fsc_engine_apply_decay(e);
    if (s == FSC_OK && e->po.reduce_exact) s = fsc_exact_create(e); /* shadows of the reduced gradients */
    if (s == FSC_OK) e->m->engine = e; /* one engine a model (fsc_engine_create_model refuses a bound one) */
    return s;
}

/* A rank (not NULL) with its device and world communicator: a program may hand an engine maker one it made. */
static fsc_status rank_ok(const fsc_rank *r) {
    if (!r->dev || !r->comm)
        return fsc_error(FSC_ERR_INVALID, "engine: the rank has no %s (a rank of fsc_cluster_run or fsc_launch "
                         "has both)", !r->dev ? "device (fsc_rank.dev is NULL)" : "communicator (fsc_rank.comm is NULL)");
    return FSC_OK;
}

fsc_status fsc_engine_create_model(fsc_rank *r, fsc_model *m, const fsc_parallel_opts *po,
                                   const fsc_optim_config *oc, uint64_t seed, fsc_engine **out) {
    FSC_CHECK_ARG(out);
    *out = NULL;
    FSC_CHECK_ARG(r);
    FSC_CHECK_ARG(m);
    FSC_CHECK_ARG(po);
    FSC_CHECK_ARG(oc);
    FSC_TRY(rank_ok(r));
    /* every rank the same model, options, optimizer and seed, or all refuse before anything is split; a model
     * another engine holds would have its parameter tables pointed at this one's buffers under the other */
    const fsc_status own = m->engine ? fsc_error(FSC_ERR_STATE, "fsc_engine_create_model: the model is bound to "
                                                 "another engine (one engine a model: free that one first, or make "
                                                 "another model)")
                                     : FSC_OK;
    FSC_TRY(fsc_comm_agree(r->comm, r->dev, own != FSC_OK ? own : fsc_model_validate(m)));
    FSC_TRY(fsc_engine_agree_settings(r, m, po, oc, seed));
    fsc_engine *e;
    FSC_TRY(engine_new(r, m->n_layers, m->n_experts, po, oc, seed, 0, &e));
    e->m = m;
    groups g;
    fsc_status s = make_groups(r->comm, &e->lay, &g);
    if (s == FSC_OK) attach_groups(e, &g);
    if (s == FSC_OK) s = engine_finish(e);
    if (s != FSC_OK) {
        fsc_engine_free(e);
        return s;
    }
    *out = e;
    return FSC_OK;
}

fsc_status fsc_engine_create_built(fsc_rank *r, fsc_model_build_fn build, void *arg, const fsc_parallel_opts *po,
                                   const fsc_optim_config *oc, uint64_t seed, fsc_engine **out) {
    if (out) *out = NULL;
    FSC_CHECK_ARG(r);
    FSC_CHECK_ARG(build);
    FSC_CHECK_ARG(out);
    FSC_CHECK_ARG(po);
    FSC_CHECK_ARG(oc);
    FSC_TRY(rank_ok(r));
    /* with tensor parallelism the groups come before the model, built on the tensor group; without it
     * engine_new checks the options in its order (the pipeline's first) and the groups come after */
    groups g = { 0 };
    fsc_status s = FSC_OK;
    fsc_layout lay = { .tp = 1 };
    if (po->tp > 1) {
        FSC_TRY(fsc_engine_agree_settings(r, NULL, po, oc, seed)); /* the options before they split the world */
        FSC_TRY(make_layout(r, po, 1, &lay));
        FSC_TRY(make_groups(r->comm, &lay, &g));
    }
    fsc_model *m = NULL;
    if (s == FSC_OK) s = build(arg, r->dev, g.tensor, &m);
    if (s == FSC_OK && !m) s = fsc_error(FSC_ERR_INVALID, "fsc_engine_create_built: the builder made no model");
    if (s == FSC_OK) s = fsc_model_validate(m);
    if (s == FSC_OK) s = fsc_tensor_check_model(m, &lay);
    /* a builder may fail, or declare other slices, on some ranks only: every rank stops here, with the lowest
     * failing rank's message, rather than some waiting in the collectives that follow */
    s = fsc_comm_agree(r->comm, r->dev, s);
    if (s == FSC_OK) s = fsc_engine_agree_settings(r, m, po->tp > 1 ? NULL : po, po->tp > 1 ? NULL : oc, seed);
    fsc_engine *e = NULL;
    if (s == FSC_OK) s = engine_new(r, m->n_layers, m->n_experts, po, oc, seed, 1, &e);
    if (s != FSC_OK) {
        fsc_model_free(m);
        fsc_groups_free(&g);
        return s;
    }
    e->m = m;
    e->own_model = 1;
    if (po->tp <= 1) s = make_groups(r->comm, &e->lay, &g);
    if (s == FSC_OK) attach_groups(e, &g);
    if (s == FSC_OK) s = engine_finish(e);
    if (s != FSC_OK) {
        fsc_engine_free(e);
        return s;
    }
    *out = e;
    return FSC_OK;
}

fsc_model *fsc_engine_model(fsc_engine *e) {
    if (!e) return NULL;
    return e->m;
}
const fsc_layout *fsc_engine_layout(const fsc_engine *e) { return e ? &e->lay : NULL; }

const char *fsc_group_kind_name(fsc_group_kind g) {
    static const char *const names[FSC_GROUP_COUNT] = { "data", "tensor", "pipeline", "expert", "world" };
    return g >= 0 && g < FSC_GROUP_COUNT ? names[g] : "?";
}

void fsc_engine_add_group_kind(fsc_engine *e, fsc_comm *c, fsc_group_kind kind) {
    if (!c || c == e->comm) return;
    for (int g = 0; g < e->ngroups; g++)
        if (e->groups[g] == c) return;
    if (e->ngroups < FSC_ENGINE_MAX_GROUPS) {
        e->groups[e->ngroups] = c;
        e->group_kind[e->ngroups++] = kind;
    }
}

void fsc_engine_add_group(fsc_engine *e, fsc_comm *c) { fsc_engine_add_group_kind(e, c, FSC_GROUP_DATA); }

static void add_stats(fsc_comm_stats *out, const fsc_comm_stats *st) {
    for (int op = 0; op < FSC_OP_COUNT; op++) {
        out->calls[op] += st->calls[op];
        out->bytes[op] += st->bytes[op];
    }
}

int fsc_engine_comm_stats_group(const fsc_engine *e, fsc_group_kind g, fsc_comm_stats *out) {
    if (!e || !out) return 0;
    memset(out, 0, sizeof *out);
    int n = 0;
    if (g == FSC_GROUP_DATA) add_stats(out, fsc_comm_get_stats(e->comm)), n++;
    for (int k = 0; k < e->ngroups; k++)
        if (e->group_kind[k] == (int)g) add_stats(out, fsc_comm_get_stats(e->groups[k])), n++;
    return n;
}

void fsc_engine_comm_stats(const fsc_engine *e, fsc_comm_stats *out) {
    if (!e || !out) return;
    *out = *fsc_comm_get_stats(e->comm);
    for (int g = 0; g < e->ngroups; g++) add_stats(out, fsc_comm_get_stats(e->groups[g]));
}

static fsc_status hook_grad_term(void *ctx, float *grad, const float *piece, size_t n) {
    return fsc_exact_term(ctx, grad, piece, n);
}

void fsc_engine_reset_comm_stats(fsc_engine *e) {
    if (!e) return;
    fsc_comm_reset_stats(e->comm);
    for (int g = 0; g < e->ngroups; g++) fsc_comm_reset_stats(e->groups[g]);
}

void fsc_engine_acts_terms(fsc_engine *e, fsc_model_acts_opts *o) {
    if (e->exact && e->ep_comm) /* an expert's gradient by source: each part a term of the integer sums (exact.c) */
        o->grad_term = hook_grad_term, o->grad_term_ctx = e;
}

fsc_status fsc_engine_ensure_acts(fsc_engine *e, int B) {
    if (e->acts && e->acts_B == B) return FSC_OK;
    if (e->acts) e->m->ops->acts_free(e->m->ctx, e->acts);
    e->acts = NULL;
    fsc_model_acts_opts o = { .B = B, .first = e->lf, .last = e->ll, .checkpoint = e->po.checkpoint };
    fsc_engine_acts_terms(e, &o);
    FSC_TRY(fsc_model_acts_make(e->m, NULL, &o, &e->acts));
    e->acts_B = B;
    return FSC_OK;
}

fsc_status fsc_engine_check_batch(const double *pairs, int n) {
    double sum = 0;
    for (int i = 0; i < n; i++) sum += pairs[2 * i];
    for (int i = 1; i < n; i++)
        if (pairs[2 * i + 1] != pairs[1])
            return fsc_error(FSC_ERR_INVALID, "the ranks of a data group passed different global batches (its rank 0: "
                             "%.0f, its rank %d: %.0f)", pairs[1], i, pairs[2 * i + 1]);
    if (sum != pairs[1])
        return fsc_error(FSC_ERR_INVALID, "global batch %.0f is not the sum of the local batches over the data group "
                         "of %d rank%s (%.0f): pass each rank's own sequences as local_batch and their total over the "
                         "data group as global_batch", pairs[1], n, n == 1 ? "" : "s", sum);
    return FSC_OK;
}

fsc_status fsc_engine_check_calls(const double *calls, size_t stride, int n) {
    for (int i = 1; i < n; i++)
        if (calls[(size_t)i * stride] != calls[0])
            return fsc_error(FSC_ERR_STATE, "the ranks of a data group are at different calls (its rank 0 at call "
                             "%.0f, its rank %d at call %.0f): a step failed on some ranks only; no update on any "
                             "rank (make the engine again)", calls[0], i, calls[(size_t)i * stride]);
    return FSC_OK;
}

/* fsc_engine_gather_host and its agreed form (agree): the n bytes of every rank of c in one device buffer of size(c)
 * blocks, this rank's sent from its own block (an all-gather in place), then all of it to the host. */
static fsc_status gather_host(fsc_engine *e, fsc_comm *c, int agree, const void *mine, size_t n, void *all) {
    const size_t N = (size_t)fsc_comm_size(c), me = (size_t)fsc_comm_rank(c);
    unsigned char *d = NULL;
    fsc_status s = agree && !all ? fsc_error(FSC_ERR_NOMEM, "engine: out of host memory") : FSC_OK;
    if (s == FSC_OK) s = fsc_device_alloc(e->dev, FSC_TAG_COMM, N * n, (void **)&d);
    if (agree) s = fsc_comm_agree(c, e->dev, s); /* every rank reaches the all-gather, or none does */
    if (s == FSC_OK) s = fsc_device_upload(e->dev, d + me * n, mine, n);
    if (s == FSC_OK) s = fsc_comm_all_gather(c, d + me * n, d, n, FSC_U8);
    if (s == FSC_OK) s = fsc_device_download(e->dev, all, d, N * n);
    fsc_device_release(e->dev, d);
    return s;
}

fsc_status fsc_engine_gather_host(fsc_engine *e, fsc_comm *c, const void *mine, size_t n, void *all) {
    return gather_host(e, c, 0, mine, n, all);
}

fsc_status fsc_engine_gather_host_agreed(fsc_engine *e, fsc_comm *c, const void *mine, size_t n, void *all) {
    return gather_host(e, c, 1, mine, n, all);
}

fsc_status fsc_engine_sum_over_ranks(fsc_engine *e, const double *local, int m, int local_batch, int global_batch,
                                     double *total, fsc_status *batch) {
    const int n = fsc_comm_size(e->comm), w = m + 3;
    double mine[7];
    if (m > 4) return fsc_error(FSC_ERR_INTERNAL, "engine: %d sums per rank (at most 4)", m);
    memcpy(mine, local, (size_t)m * sizeof(double));
    mine[m] = local_batch, mine[m + 1] = global_batch, mine[m + 2] = (double)e->calls;
    if (n == 1) {
        memcpy(total, local, (size_t)m * sizeof(double));
        *batch = fsc_engine_check_batch(mine + m, 1);
        return FSC_OK;
    }
    double *all = malloc((size_t)n * (w + 2) * sizeof(double)), *pairs = all ? all + (size_t)n * w : NULL;
    if (!all) return fsc_error(FSC_ERR_NOMEM, "engine: out of memory");
    fsc_status s = fsc_engine_gather_host(e, e->comm, mine, (size_t)w * sizeof(double), all);
    for (int j = 0; s == FSC_OK && j < m; j++) {
        double acc = all[j];
        for (int i = 1; i < n; i++) acc += all[(size_t)i * w + j];
        total[j] = acc;
    }
    for (int i = 0; s == FSC_OK && i < n; i++)
        pairs[2 * i] = all[(size_t)i * w + m], pairs[2 * i + 1] = all[(size_t)i * w + m + 1];
    if (s == FSC_OK) *batch = fsc_engine_check_batch(pairs, n);
    if (s == FSC_OK && *batch == FSC_OK) *batch = fsc_engine_check_calls(all + m + 2, (size_t)w, n);
    free(all);
    return s;
}

void fsc_engine_restore_scaler(fsc_engine *e, const fsc_loss_scaler *s) {
    if (e->use_scaler) e->scaler = *s;
}

void fsc_engine_restore_skips(fsc_engine *e, int64_t skipped_in_row) {
    e->skips_in_row = skipped_in_row < INT32_MAX ? (int)skipped_in_row : INT32_MAX;
}

/* The loss scaler's update with the engine's floor (a checkpoint's scaler may have replaced e->scaler). */
static void scaler_update(fsc_engine *e, int found) {
    e->scaler.min_scale = e->po.min_loss_scale > 0 ? e->po.min_loss_scale : 1.0f;
    fsc_loss_scaler_update(&e->scaler, found);
}

/* A step that the vote found non-finite (found: 2 the loss on some rank, 1 gradients only): no update on any
 * rank. f16 backs the scale off and skips, as does nonfinite skip; stop fails. Every rank takes the same
 * branch (the vote and the counters are the same on every rank). */
static fsc_status nonfinite_step(fsc_engine *e, fsc_step_info *si, int found, fsc_step_info *info) {
    const long long step = (long long)fsc_optim_steps(e->opt) + 1;
    char what[160];
    if (found >= 2 && !isfinite(si->loss))
        snprintf(what, sizeof what, "the loss is %s", nonfinite_name(si->loss));
    else if (found >= 2)
        snprintf(what, sizeof what, "the loss of another rank's group is not finite");
    else
        snprintf(what, sizeof what, "gradients hold inf or NaN (loss %g%s)", si->loss,
                 e->use_scaler ? ", an f16 overflow" : "");
    if (!e->use_scaler && e->po.nonfinite == FSC_NONFINITE_STOP)
        return fsc_error(FSC_ERR_NUMERIC, "optimizer step %lld: %s; stopped before the update (lower the learning "
                         "rate, clip the gradients, or skip such steps with nonfinite skip)", step, what);
    if (e->use_scaler) scaler_update(e, 1);
    e->skips_in_row++;
    si->skipped = 1;
    if (info) *info = *si;
    const int most = e->po.max_skipped_steps > 0 ? e->po.max_skipped_steps : FSC_DEFAULT_MAX_SKIPS;
    if (e->skips_in_row >= most) {
        char sc[64] = "";
        if (e->use_scaler) snprintf(sc, sizeof sc, "; the loss scale is %g, its floor %g", (double)e->scaler.scale,
                                    (double)e->scaler.min_scale);
        return fsc_error(FSC_ERR_NUMERIC, "optimizer step %lld: %d step%s in a row skipped (the limit, "
                         "max_skipped_steps), the last because %s%s: the run has diverged", step, e->skips_in_row,
                         e->skips_in_row == 1 ? "" : "s", what, sc);
    }
    return FSC_OK;
}

static fsc_status step_model(fsc_engine *e, const void *inputs, const void *targets, int local_batch,
                             int global_batch, fsc_step_info *info);

fsc_status fsc_engine_step_model(fsc_engine *e, const void *inputs, const void *targets, int local_batch,
                                 int global_batch, fsc_step_info *info) {
    FSC_CHECK_ARG(e);
    FSC_CHECK_ARG(inputs);
    FSC_CHECK_ARG(targets);
    fsc_trace *tr = e->trace; /* one span per step, closed on every return */
    e->calls++;
    fsc_trace_begin(tr, "step", "step");
    fsc_trace_arg(tr, "step", (double)fsc_optim_steps(e->opt) + 1);
    fsc_status s = step_model(e, inputs, targets, local_batch, global_batch, info);
    fsc_trace_end(tr);
    return s;
}

/* FNV-1a over n bytes: a fingerprint of a rank's samples. */
static uint64_t fingerprint(const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* Tensor parallelism: the ranks of a tensor group compute slices of the same products, so they must pass the same
 * samples; different ones would train (or evaluate) a wrong model without any error. */
fsc_status fsc_engine_same_samples(fsc_engine *e, const void *inputs, const void *targets, int local_batch,
                                   fsc_status *verdict, char *why, size_t cap) {
    *verdict = FSC_OK;
    if (cap) why[0] = '\0';
    if (!e->tensor_comm) return FSC_OK;
    const fsc_model *m = e->m;
    const int n = fsc_comm_size(e->tensor_comm);
    const size_t B = local_batch > 0 ? (size_t)local_batch : 0;
    uint64_t mine[2] = { inputs && fsc_pipe_runs_layer(e, 0) ? fingerprint(inputs, B * m->sample_input_bytes) : 0,
                         targets && fsc_pipe_runs_layer(e, m->n_layers - 1)
                             ? fingerprint(targets, B * m->sample_target_bytes) : 0 };
    uint64_t *all = malloc((size_t)n * sizeof mine);
    fsc_status s = all ? fsc_engine_gather_host(e, e->tensor_comm, mine, sizeof mine, all)
                       : fsc_error(FSC_ERR_NOMEM, "engine: out of memory");
    for (int i = 1; s == FSC_OK && i < n && *verdict == FSC_OK; i++)
        if (all[2 * i] != all[0] || all[2 * i + 1] != all[1]) {
            *verdict = FSC_ERR_INVALID;
            snprintf(why, cap, "tensor rank %d of data rank %d passed other %s than tensor rank 0: every rank of a "
                     "tensor group must pass the same samples (those of its data rank, fsc_engine_layout(e)->data)",
                     i, e->lay.data, all[2 * i] != all[0] ? "inputs" : "targets");
        }
    free(all);
    return s;
}

/* A step: this rank's list F0 B0 F1 B1 ... R O (step.h), the forwards and backwards of the accumulation list or
 * the pipeline's schedule, in which the strategy reduces, then R (end_backward: every reduction finished) and O
 * (fsc_step_optimize); with the exact reduction the list over its units and R E O, run again when E says so. */
static fsc_status step_model(fsc_engine *e, const void *inputs, const void *targets, int local_batch,
                             int global_batch, fsc_step_info *info) {
    fsc_step_ctx c;
    FSC_TRY(fsc_step_prepare(e, &c, inputs, targets, local_batch, global_batch, info));
    /* tensor ranks passing different samples: the step's batch verdict (O's vote stops every rank) */
    FSC_TRY(fsc_engine_same_samples(e, inputs, targets, local_batch, &c.samples, c.samples_why, sizeof c.samples_why));
    if (e->st->begin_step) FSC_TRY(e->st->begin_step(e));
    return fsc_step_run(e, &c);
}

/* O's sums: the loss over the data group and the batch check (global_batch against the group's local batches),
 * whose verdict rides on the world's vote, so that every rank stops together; the MoE statistics. */
static fsc_status step_sums(fsc_engine *e, fsc_step_ctx *c, fsc_step_info *si, fsc_status *batch) {
    double total = 0, moe_total[3] = { 0, 0, 0 };
    FSC_TRY(e->exact ? fsc_exact_sums(e, c, &total, moe_total, batch)
                     : fsc_step_sums(e, c, &total, moe_total, batch));
    if (e->m->ops->aux_stats) {
        si->aux_loss = moe_total[0];
        si->moe_assigned = (int64_t)moe_total[1];
        si->moe_dropped = (int64_t)moe_total[2];
    }
    si->loss = total / ((double)c->global_batch * e->m->loss_terms);
    return FSC_OK;
}

/* Every rank votes, over the whole world, on every precision: no rank may skip or stop alone. Verdicts (*found,
 * the largest of the world's): 1 gradients not finite, 2 the loss not finite, 3 the batch check failed (on some
 * data group), 4 a tensor group passed different samples (samples: the failed batch is that): an error. */
static fsc_status vote(fsc_engine *e, const fsc_step_ctx *c, double loss, fsc_status batch, int samples, int *found,
                       float local_max[3]) {
    char batch_why[512] = "";
    if (batch != FSC_OK) snprintf(batch_why, sizeof batch_why, "%s", fsc_last_error());
    const int mine = batch != FSC_OK ? (samples ? 4 : 3) : isfinite(loss) ? 0 : 2;
    FSC_TRY(fsc_nonfinite_vote_local_max(e->gdev, e->r->comm, e->gsegs, e->glens, e->ngsegs, mine, found, local_max));
    if (*found >= 3 && batch_why[0]) return fsc_error(FSC_ERR_INVALID, "%s", batch_why);
    if (*found == 4)
        return fsc_error(FSC_ERR_INVALID, "global batch %d: another rank found that its tensor group passed different "
                         "samples (every rank of a tensor group must pass those of its data rank); no update on any "
                         "rank", c->global_batch);
    if (*found == 3)
        return fsc_error(FSC_ERR_INVALID, "global batch %d: another rank found that the global batch is not the sum "
                         "of the local batches over its data group (or that its data group disagrees on it); no "
                         "update on any rank", c->global_batch);
    return FSC_OK;
}

/* The norm over the pieces that count each element once (nsegs, make_norm_pieces: tensor parallelism's or the
 * strategy's; otherwise the reduced gradients themselves, whose local max the vote took: gsegs_max); the factor
 * of fsc_grad_clip on every reduced gradient. */
static fsc_status clip(fsc_engine *e, double *norm, const float gsegs_max[3]) {
    const int own = e->nsegs != NULL;
    *norm = 0;
    FSC_TRY(fsc_grad_norm_local_max(e->gdev, e->norm_comm, own ? e->nsegs : e->gsegs, own ? e->nlens : e->glens,
                                    own ? e->nnsegs : e->ngsegs, own ? NULL : gsegs_max, norm));
    if (*norm > (double)e->po.clip) {
        float factor = (float)((double)e->po.clip / (*norm + 1e-6));
        for (int i = 0; i < e->ngsegs; i++)
            if (e->glens[i]) FSC_TRY(fsc_k_scale(e->gdev, e->gsegs[i], factor, e->glens[i]));
    }
    return FSC_OK;
}

fsc_status fsc_step_optimize(fsc_engine *e, fsc_step_ctx *c) {
    fsc_step_info si = { .exact_attempts = c->attempts, .loss_scale = c->loss_scale };
    fsc_status batch = FSC_OK;
    int found = 0;
    FSC_TRY(step_sums(e, c, &si, &batch));
    const int samples = batch == FSC_OK && c->samples != FSC_OK;
    if (samples) batch = fsc_error(c->samples, "%s; no update on any rank", c->samples_why);
    if (e->use_scaler) /* unscale */
        for (int i = 0; i < e->ngsegs; i++)
            FSC_TRY(fsc_k_scale(e->gdev, e->gsegs[i], 1.0f / c->loss_scale, e->glens[i]));
    float gmax[3]; /* the vote's local max |g| over gsegs, which nothing changes before clip reads it */
    FSC_TRY(vote(e, c, si.loss, batch, samples, &found, gmax));
    if (found) return nonfinite_step(e, &si, found, c->info);
    e->skips_in_row = 0;
    if (e->use_scaler) scaler_update(e, 0);
    if (e->po.clip > 0) FSC_TRY(clip(e, &si.grad_norm, gmax));
    fsc_trace_begin(e->trace, "optim", "optimizer");
    fsc_status os = fsc_offload_step(e); /* with offload optim: on the host copies */
    if (os == FSC_OK && e->st->after_step) os = e->st->after_step(e);
    fsc_trace_end(e->trace);
    FSC_TRY(os);
    if (c->info) *c->info = si;
    return FSC_OK;
}

/* Every rank returns the lowest failing rank's verdict, so no rank continues alone after a failed save. */
static fsc_status agree(fsc_engine *e, fsc_status mine) { return fsc_comm_agree(e->r->comm, e->dev, mine); }

/* Element `at` of optimizer segment seg as (tensor, element of the full tensor) through the strategy's
 * holdings; *tensor = -1 when no holding covers it (padding). */
static fsc_status locate(fsc_engine *e, int seg, size_t at, int *tensor, size_t *elem) {
    *tensor = -1;
    *elem = 0;
    if (!e->st->holdings) return FSC_OK;
    fsc_holding *h = NULL;
    int nh = 0;
    FSC_TRY(fsc_engine_holdings(e, &h, &nh)); /* with tensor parallelism, runs of the full tensors */
    for (int k = 0; k < nh; k++)
        if (h[k].seg == seg && at >= h[k].seg_off && at - h[k].seg_off < h[k].n) {
            *tensor = h[k].tensor;
            *elem = h[k].first + (at - h[k].seg_off);
            break;
        }
    free(h);
    return FSC_OK;
}

/* The first inf/NaN of n floats at device x: *at = n when there is none. */
static fsc_status find_nonfinite(fsc_device *dev, const float *x, size_t n, size_t *at, float *val) {
    enum { CHUNK = 1 << 16 };
    *at = n;
    float m = 0.0f;
    int nf = 0;
    FSC_TRY(fsc_k_absmax(dev, &m, &nf, x, n));
    if (!nf) return FSC_OK;
    float *h = malloc(CHUNK * sizeof(float));
    if (!h) return fsc_error(FSC_ERR_NOMEM, "engine: out of host memory");
    fsc_status s = FSC_OK;
    for (size_t off = 0; off < n && *at == n && s == FSC_OK; off += CHUNK) {
        size_t k = n - off < CHUNK ? n - off : CHUNK;
        s = fsc_device_download(dev, h, x + off, k * sizeof(float));
        for (size_t i = 0; s == FSC_OK && i < k; i++)
            if (!isfinite(h[i])) {
                *at = off + i;
                *val = h[i];
                break;
            }
    }
    free(h);
    return s;
}

/* This rank's parameters (the fp32 masters the optimizer steps), then its optimizer states. */
static fsc_status check_local(fsc_engine *e) {
    /* as torch.optim names the states */
    const char *const state_name[] = { "parameter", e->oc.kind == FSC_OPT_ADAMW ? "exp_avg of" : "momentum_buffer of",
                                       "exp_avg_sq of" };
    const int nseg = fsc_optim_num_segments(e->opt), nst = fsc_optim_num_states(e->opt);
    for (int st = 0; st <= nst && st < 3; st++)
        for (int k = 0; k < nseg; k++) {
            size_t n = fsc_optim_segment_len(e->opt, k), at = n;
            const float *x = st == 0 ? fsc_optim_param(e->opt, k) : fsc_optim_state(e->opt, k, st - 1);
            float val = 0.0f;
            if (n && x) FSC_TRY(find_nonfinite(fsc_offload_seg_dev(e, st), x, n, &at, &val));
            if (at == n) continue;
            int t;
            size_t el;
            FSC_TRY(locate(e, k, at, &t, &el));
            if (t < 0)
                return fsc_error(FSC_ERR_NUMERIC, "element %zu of optimizer segment %d (%s, in no tensor) is %s", at,
                                 k, state_name[st], nonfinite_name(val));
            return fsc_error(FSC_ERR_NUMERIC, "%s %s, element %zu, is %s", state_name[st],
                             fsc_engine_full_info(e, t)->name, el, nonfinite_name(val));
        }
    return FSC_OK;
}

fsc_status fsc_engine_check_finite(fsc_engine *e) {
    FSC_CHECK_ARG(e);
    return agree(e, check_local(e));
}

const fsc_param_info *fsc_engine_full_info(const fsc_engine *e, int i) { return &e->full[i]; }

fsc_status fsc_engine_holdings(fsc_engine *e, fsc_holding **out, int *n) {
    *out = NULL;
    *n = 0;
    if (!e->st->holdings)
        return fsc_error(FSC_ERR_UNSUPPORTED, "checkpoint: the %s strategy does not declare what each rank holds",
                         e->st->name);
    FSC_TRY(e->st->holdings(e, out, n));
    if (e->lay.tp == 1) return FSC_OK;
    fsc_holding *g = NULL; /* the slices' holdings as runs of the full tensors */
    int ng = 0;
    fsc_status s = fsc_tensor_holdings(e, *out, *n, &g, &ng);
    free(*out);
    *out = NULL;
    *n = 0;
    FSC_TRY(s);
    *out = g;
    *n = ng;
    return FSC_OK;
}

/* Expert parallelism under a sharding strategy: full parameters streamed from the ranks holding each piece
 * (stream.c; DDP gathers its experts itself). */
static int ep_staged(const fsc_engine *e) { return e->ep_comm && e->st != &fsc_strategy_ddp; }

/* Pipelines, tensor parallelism and ep_staged: collective, each tensor streamed from the ranks that hold it to rank
 * 0, which writes it (the rows the file holds) one bounded chunk at a time (stream.c). */
typedef struct {
    fsc_engine *e;
    fsc_st_writer *w;
} file_sink;

static fsc_status to_file(void *ctx, int t, uint64_t first, const float *host, size_t n) {
    const file_sink *fs = ctx;
    fsc_engine *e = fs->e;
    fsc_st_writer *w = fs->w;
    const size_t keep = fsc_engine_file_numel(fsc_engine_full_info(e, t)); /* a padded vocabulary's rows: not kept */
    if (first >= keep) return FSC_OK;
    return fsc_st_writer_write_f32(w, t, host, first, n < keep - first ? n : keep - first);
}

static fsc_status write_streamed(fsc_engine *e, fsc_st_writer *w) {
    file_sink fs = { e, w };
    return fsc_engine_stream_params(e, FSC_OK, w != NULL, to_file, &fs);
}

fsc_status fsc_engine_save_weights(fsc_engine *e, const char *path) {
    FSC_CHECK_ARG(e);
    FSC_CHECK_ARG(path);
    return fsc_engine_save_weights_dtype(e, path, FSC_F32);
}

/* The model's configuration text (model.h's config) as the weights file records it (FSC_ST_META_MODEL). */
static fsc_status model_config_text(const fsc_engine *e, char **out) {
    return fsc_config_text(e->m->ops->config, e->m->ctx, "weights file", out); /* whole, any length */
}

static fsc_status save_weights(fsc_engine *e, const char *path, fsc_dtype dt);

/* The save, as one span of the engine's trace (trace.h) */
fsc_status fsc_engine_save_weights_dtype(fsc_engine *e, const char *path, fsc_dtype dt) {
    FSC_CHECK_ARG(e);
    FSC_CHECK_ARG(path);
    fsc_trace_begin(e->trace, "ckpt", "weights save");
    fsc_status s = save_weights(e, path, dt);
    fsc_trace_end(e->trace);
    return s;
}

static fsc_status save_weights(fsc_engine *e, const char *path, fsc_dtype dt) {
    fsc_st_writer *w = NULL;
    if (dt != FSC_F32 && dt != FSC_BF16 && dt != FSC_F16)
        return fsc_error(FSC_ERR_INVALID, "%s: weights are saved as f32, bf16 or f16, not %s", path,
                         fsc_dtype_name(dt) ? fsc_dtype_name(dt) : "?");
    fsc_status s = fsc_engine_check_finite(e);
    if (s != FSC_OK) return fsc_error_prefix(s, "%s: not saved", path);
    if (e->r->rank == 0) {
        char *cfg = NULL;
        s = model_config_text(e, &cfg);
        if (s == FSC_OK) s = fsc_st_writer_open(path, &w);
        if (s == FSC_OK) s = fsc_st_writer_meta(w, "format", "pt"); /* Hugging Face's loaders require it */
        if (s == FSC_OK) s = fsc_st_writer_meta(w, FSC_ST_META_MODEL, cfg);
        free(cfg);
        for (int i = 0; s == FSC_OK && i < e->m->n_tensors; i++) {
            const fsc_param_info *pi = fsc_engine_full_info(e, i);
            int64_t shape[4];
            memcpy(shape, pi->shape, sizeof shape);
            if (fsc_engine_file_numel(pi) < pi->numel) shape[0] = pi->file_rows; /* Hugging Face's: no padding */
            s = fsc_st_writer_add(w, pi->name, dt, pi->ndim, shape);
        }
        if (s == FSC_OK) s = fsc_st_writer_begin_data(w);
    }
    s = agree(e, s);
    if (s == FSC_OK)
        s = agree(e, e->lay.tp > 1 || e->pipe || ep_staged(e) ? write_streamed(e, w) : e->st->write_full(e, w));
    if (s == FSC_OK && w) {
        s = fsc_st_writer_commit(w);
        if (s == FSC_OK) w = NULL; /* a failed commit leaves w to abort: its temporary file goes */
    }
    if (w) fsc_st_writer_abort(w);
    return agree(e, s);
}

/* name with every run of digits as one '#' (h.11.mlp.c_fc.weight -> h.#.mlp.c_fc.weight) into buf */
static void digits_as_one(const char *name, char *buf, size_t cap) {
    size_t n = 0;
    for (const char *c = name; *c && n + 1 < cap; c++) {
        if (*c >= '0' && *c <= '9') {
            if (n && buf[n - 1] == '#') continue;
            buf[n++] = '#';
        } else {
            buf[n++] = *c;
        }
    }
    buf[n] = 0;
}

/* A file entry the model does not declare, named as one of its tensors but for another index (h.3.* in a file for
 * a model of 3 blocks, 0 to 2): written for a larger model, whose layers a load would drop without a word.
 * Other undeclared entries (Hugging Face's buffers, such as h.0.attn.bias) are ignored. The model's names are
 * turned into their patterns once. */
static fsc_status check_extra_layers(const fsc_engine *e, fsc_st_file *f, const char *path) {
    const int T = e->m->n_tensors;
    char(*pat)[FSC_ST_MAX_NAME] = malloc((size_t)(T > 0 ? T : 1) * sizeof *pat), key[FSC_ST_MAX_NAME];
    if (!pat) return fsc_error(FSC_ERR_NOMEM, "%s: out of host memory checking its names", path);
    for (int i = 0; i < T; i++) digits_as_one(fsc_engine_full_info(e, i)->name, pat[i], sizeof pat[i]);
    fsc_status s = FSC_OK;
    for (int j = 0; j < fsc_st_count(f) && s == FSC_OK; j++) {
        const char *name = fsc_st_weight_name(fsc_st_entry_at(f, j)->name);
        int declared = 0;
        for (int i = 0; i < T && !declared; i++) {
            const fsc_param_info *p = fsc_engine_full_info(e, i);
            declared = !strcmp(p->name, name) || (p->alias[0] && !strcmp(p->alias, name));
        }
        /* X.bias (or X.weight) beside a declared X.weight (X.bias): a parameter of a layer the model has, in a form
         * it lacks (a Llama with attention_bias or mlp_bias): dropping it would load another model without a word */
        const char *dot = strrchr(name, '.');
        const char *sib = !dot ? NULL : !strcmp(dot, ".bias") ? "weight" : !strcmp(dot, ".weight") ? "bias" : NULL;
        char other[FSC_ST_MAX_NAME];
        if (!declared && sib &&
            snprintf(other, sizeof other, "%.*s.%s", (int)(dot - name), name, sib) < (int)sizeof other)
            for (int i = 0; i < T && s == FSC_OK; i++)
                if (!strcmp(fsc_engine_full_info(e, i)->name, other))
                    s = fsc_error(FSC_ERR_INVALID, "%s: holds %s, which this model does not have (it has %s without "
                                  "it): written for a model with other layers (biases fsc's model lacks)", path, name,
                                  other);
        digits_as_one(name, key, sizeof key);
        for (int i = 0; i < T && !declared && s == FSC_OK; i++)
            if (!strcmp(key, pat[i]))
                s = fsc_error(FSC_ERR_INVALID, "%s: holds %s, which this model does not have (it has %s and its like): "
                              "written for a model of more layers or experts", path, name,
                              fsc_engine_full_info(e, i)->name);
    }
    free(pat);
    return s;
}

/* The family a model's configuration text names: its "family", or the GPT's (none, with "layers"); NULL: none. */
static const char *family_named(const cJSON *o) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, "family");
    if (cJSON_IsString(f)) return f->valuestring;
    return !f && cJSON_GetObjectItemCaseSensitive(o, "layers") ? "gpt2" : NULL;
}

/* The family and heads a weights file records (its model configuration, FSC_ST_META_MODEL) against the model's
 * (no family: the GPT's, whose text predates the others): a file of another family is named as such before its
 * names are found missing, and a width split into other heads has the same shapes, so only the record tells. */
static fsc_status check_recorded_model(const fsc_engine *e, fsc_st_file *f, const char *path) {
    const char *rec = fsc_st_metadata(f, FSC_ST_META_MODEL);
    if (!rec || !e->m->ops->config) return FSC_OK; /* Hugging Face's files record none */
    char *own = NULL;
    FSC_TRY(model_config_text(e, &own));
    cJSON *a = fsc_json_parse(rec), *b = fsc_json_parse(own);
    free(own);
    fsc_status s = FSC_OK;
    /* a family both texts name (the GPT: none, with "layers"; fsc_model_family_of's rule), else the tensor names
     * decide (a sequential model's text, or a model's without configuration) */
    const char *fx = family_named(a), *fy = family_named(b);
    if (fx && fy && strcmp(fx, fy) != 0)
        s = fsc_error(FSC_ERR_INVALID, "%s: written for a model of family %.40s; this model is of family %.40s", path,
                      fx, fy);
    /* the same shapes, another model: heads split the width otherwise; rotary base and norm epsilon (floats in
     * the models: compared as floats, so 1e-6 and its float's 9.99999997e-07 agree) */
    static const char *const keys[] = {"heads", "kv_heads", "rope_theta", "norm_eps"};
    for (size_t k = 0; k < sizeof keys / sizeof *keys && s == FSC_OK; k++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(a, keys[k]), *y = cJSON_GetObjectItemCaseSensitive(b, keys[k]);
        if (cJSON_IsNumber(x) && cJSON_IsNumber(y) && !fsc_json_same_float(x->valuedouble, y->valuedouble))
            s = fsc_error(FSC_ERR_INVALID, "%s: written for a model of %s %g; this model has %g (the same shapes, "
                          "%s)", path, keys[k], x->valuedouble, y->valuedouble,
                          k < 2 ? "another split of the width" : "another model");
    }
    cJSON_Delete(a);
    cJSON_Delete(b);
    return s;
}

/* Every tensor of the model is in f (under its name or Hugging Face's prefix: fsc_st_find_weight) as F32, BF16
 * or F16 with its shape, and a copy under its alias (a tied head) equals it; entries the model does not declare,
 * such as Hugging Face's buffers, are ignored, but for those named as its own of another layer
 * (check_extra_layers); the family and heads the file records are the model's (check_recorded_model). */
static fsc_status check_weights(const fsc_engine *e, fsc_st_file *f, const char *path) {
    FSC_TRY(check_recorded_model(e, f, path)); /* first: a file of another family is named as such */
    for (int i = 0; i < e->m->n_tensors; i++) {
        const fsc_param_info *p = fsc_engine_full_info(e, i);
        const fsc_st_entry *en;
        FSC_TRY(fsc_st_find_weight_once(f, p->name, path, &en));
        if (!en) return fsc_error(FSC_ERR_FORMAT, "%s: tensor %s is missing", path, p->name);
        if (en->dtype != FSC_F32 && en->dtype != FSC_BF16 && en->dtype != FSC_F16)
            return fsc_error(FSC_ERR_FORMAT, "%s: %s has %s%s but the model expects floats (F32, BF16 or F16) of at most "
                             "4 dimensions", path, p->name, en->unreadable ? "" : "dtype ",
                             en->unreadable ? en->unreadable : fsc_dtype_name(en->dtype));
        int same = en->ndim == p->ndim, rows = same && fsc_engine_file_numel(p) < p->numel; /* rows: V, not Vp */
        for (int d = 0; d < p->ndim && (same || rows); d++) {
            same = same && en->shape[d] == p->shape[d];
            rows = rows && en->shape[d] == (d ? p->shape[d] : p->file_rows);
        }
        if (!same && !rows) {
            char have[96], want[96];
            fsc_shape_str(have, sizeof have, en->ndim, en->shape);
            fsc_shape_str(want, sizeof want, p->ndim, p->shape);
            return fsc_error(FSC_ERR_FORMAT, "%s: %s has shape %s but the model expects %s%s", path, p->name, have,
                             want, fsc_engine_file_numel(p) < p->numel ? " (or its unpadded rows)" : "");
        }
        if (p->alias[0]) FSC_TRY(fsc_st_check_copy(f, p->name, p->alias, path));
    }
    return check_extra_layers(e, f, path);
}

fsc_status fsc_engine_load_weights(fsc_engine *e, const char *path) {
    FSC_CHECK_ARG(e);
    FSC_CHECK_ARG(path);
    fsc_st_file *f = NULL;
    fsc_status s = fsc_st_open(path, &f);
    if (s == FSC_OK) s = check_weights(e, f, path);
    s = agree(e, s);
    if (s == FSC_OK) s = agree(e, e->lay.tp > 1 ? fsc_tensor_load(e, f) : e->st->load_full(e, f));
    if (s == FSC_OK && e->lay.tp > 1) s = agree(e, e->st->after_load ? e->st->after_load(e) : FSC_OK);
    if (f) fsc_st_close(f);
    /* what every rank loaded, in full-tensor terms (the fresh optimizer states are zero) */
    if (s == FSC_OK && (s = fsc_engine_check_finite(e)) != FSC_OK)
        return fsc_error_prefix(s, "%s: refusing non-finite weights", path);
    return s;
}

/* Tensor t's elements into host at the full tensors' offsets. */
typedef struct {
    float *host;
    const size_t *off;
} host_sink;

static fsc_status to_host(void *ctx, int t, uint64_t first, const float *h, size_t n) {
    host_sink *hs = ctx;
    memcpy(hs->host + hs->off[t] + first, h, n * sizeof(float));
    return FSC_OK;
}

/* Pipelines, tensor parallelism and ep_staged: streamed to every rank passing host (stream.c); the others hold
 * nothing of it. Otherwise the strategy's full tensors (one unit, bucket or expert block gathered at a time). */
fsc_status fsc_engine_full_params(fsc_engine *e, float *host) {
    FSC_CHECK_ARG(e);
    if (e->lay.tp == 1 && !e->pipe && !ep_staged(e)) return e->st->full_tensors(e, 1, host);
    size_t *off = host ? malloc(((size_t)e->m->n_tensors + 1) * sizeof *off) : NULL; /* the full tensors' */
    /* a failure here goes into the stream's first agreement, where the others are */
    fsc_status pre = host && !off ? fsc_error(FSC_ERR_NOMEM, "engine: out of host memory") : FSC_OK;
    if (off) off[0] = 0;
    for (int t = 0; off && t < e->m->n_tensors; t++) off[t + 1] = off[t] + fsc_engine_full_info(e, t)->numel;
    host_sink hs = { host, off };
    fsc_status s = fsc_engine_stream_params(e, pre, host != NULL, to_host, &hs);
    free(off);
    return s;
}

void fsc_engine_free(fsc_engine *e) {
    if (!e) return;
    /* the caller's message stays: freeing waits for what a failed step left in flight (a pipeline's posted
     * receives), whose errors are dropped, and a program reports the step's failure after freeing */
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", fsc_last_error());
    fsc_exact_free(e); /* before the strategy: it knows e->gsegs' count */
    fsc_step_free(e);
    if (e->st && e->st->destroy) e->st->destroy(e);
    fsc_pipe_free(e); /* after the strategy: its groups were split from the data group */
    if (e->acts) e->m->ops->acts_free(e->m->ctx, e->acts);
    for (int i = 0; e->tied_copy && i < e->m->n_tensors; i++) fsc_device_release(e->dev, e->tied_copy[i]);
    free(e->tied_copy);
    fsc_optim_free(e->opt);
    fsc_offload_free(e); /* after the optimizer and the strategy: their host buffers came from it */
    if (e->m && !e->own_model) /* the model outlives the engine: no pointer into the buffers freed above stays in it
                                * (a later forward then finds its parameters not materialized instead of freed) */
        for (int i = 0; i < e->m->n_tensors; i++) {
            if (e->m->param) e->m->param[i] = NULL;
            if (e->m->grad) e->m->grad[i] = NULL;
        }
    if (e->m && e->m->engine == e) e->m->engine = NULL; /* another engine may take it */
    if (e->own_model) fsc_model_free(e->m);
    fsc_tensor_free(e);
    fsc_groups_free(&e->grp); /* after the model, which may use the tensor group */
    free(e->toff);
    free(e->gsegs);
    free(e->glens);
    free(e->nsegs);
    free(e->nlens);
    free(e);
    if (msg[0]) fsc_error(FSC_ERR_INVALID, "%s", msg); /* the text only: the status is the caller's */
    else fsc_clear_error();
}

fsc_parallel_opts fsc_parallel_opts_default(void) {
    return (fsc_parallel_opts){ .kind = FSC_PAR_NONE, .shard = FSC_SHARD_FULL, .wrap = FSC_WRAP_BLOCK,
                                .reshard_after_forward = -1, .param_dtype = FSC_F32, .reduce_dtype = FSC_F32,
                                .accum = 1, .no_sync = 1, .pp = 1, .schedule = FSC_SCHED_GPIPE,
                                .pipe_checkpoint = FSC_PIPE_CKPT_EXCEPT_LAST, .tp = 1, .ep = 1,
                                .min_loss_scale = 1.0f, .nonfinite = FSC_NONFINITE_STOP,
                                .max_skipped_steps = FSC_DEFAULT_MAX_SKIPS, .prefetch = 1, .prefetch_limit = 2,
                                .offload = FSC_OFFLOAD_NONE };
}

/* The learning rate (schedule.h): what the next optimizer steps use, recorded by checkpoints as the optimizer
 * configuration's lr; with the creation, the one writer of e->oc. */
fsc_status fsc_engine_set_lr(fsc_engine *e, float lr) {
    FSC_CHECK_ARG(e);
    if (!(isfinite(lr) && lr >= 0.0f))
        return fsc_error(FSC_ERR_INVALID, "learning rate %g must be finite and >= 0", (double)lr);
    e->oc.lr = lr;
    fsc_optim_set_lr(e->opt, lr);
    return FSC_OK;
}

float fsc_engine_lr(const fsc_engine *e) { return e ? e->oc.lr : 0.0f; }
