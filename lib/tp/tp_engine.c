/* Tensor parallelism inside the engine (engine_impl.h): the tensor-parallel GPT as the engine's model, so
 * every strategy (DDP, FSDP, ZeRO-1/2) and the pipeline schedules run it unchanged.
 *
 * The strategies see this rank's slices as a model of their own (e->m, a model of model.h over tpm's view: local shapes
 * under the full tensors' names, initial values from the keyed RNG at the full tensors' indices): they
 * shard, reduce and step them over the data group of ranks holding the same slices, and bind param[i] and
 * grad[i] into their buffers as they do for the GPT. The tensor group's collectives happen inside the
 * model's layers, between the strategy's hooks. What differs from the GPT:
 *   - the clipping norm counts every split tensor on every tensor rank and each replicated tensor (layer
 *     norms, wpe, row-parallel biases) once, on tensor rank 0, over the ranks that split this data rank's
 *     gradients across data, tensor and pipeline (the exact norm: the same bits however it is split);
 *   - full parameters, saving and loading map slices to full tensors (tp_gpt.c's runs), and training
 *     checkpoints see a rank's holdings as runs of the full tensors (fsc_tp_engine_holdings).
 * Not here: the layers (tp_gpt_run.c), the pipeline (pipe.c), the checkpoint files (lib/ckpt). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tp_impl.h"
#include "parallel/engine_impl.h"
#include "parallel/pipe.h"

static tp_acts *A(fsc_model_acts *a) { return (tp_acts *)a; }

/* The model of this rank's slices (model.h): ctx is the engine, the tied gradient of wte its slice of the
 * head's part (tpm->dwte_head). */
typedef struct {
    fsc_model m;
    fsc_engine *e;
    float **tied;     /* (n_tensors) */
} tp_model;

static fsc_tp_gpt *M(void *ctx) { return ((tp_model *)ctx)->e->tpm; }

static fsc_status t_create(void *ctx, const fsc_model_acts_opts *o, fsc_model_acts **out) {
    if (o->checkpoint || o->offload_inputs)
        return fsc_error(FSC_ERR_UNSUPPORTED, "tensor parallel gpt: block checkpointing is not supported");
    tp_acts *a = NULL;
    FSC_TRY(tp_acts_create(M(ctx), o->B, o->first, o->last, &a));
    *out = (fsc_model_acts *)a;
    return FSC_OK;
}

static void t_free(void *ctx, fsc_model_acts *a) { tp_acts_free(M(ctx)->dev, A(a)); }

static fsc_status t_set_batch(void *ctx, fsc_model_acts *a, const void *tokens, const void *targets) {
    return tp_acts_set_batch(M(ctx), A(a), tokens, targets);
}

static float *t_stream(void *ctx, fsc_model_acts *am, fsc_stream which) {
    (void)ctx;
    tp_acts *a = A(am);
    const int L = a->layers;
    switch (which) {
    case FSC_STREAM_INPUT: return a->first > 0 ? a->x[a->first - 1] : NULL;
    case FSC_STREAM_OUTPUT: return a->last <= L ? a->x[a->last] : NULL;
    case FSC_STREAM_GRAD_OUTPUT: return a->last <= L ? a->dres : NULL;
    default: return a->first > 0 ? a->dres : NULL;
    }
}

static fsc_status t_forward(void *ctx, fsc_model_acts *a, const fsc_model_hooks *h, double *loss_sum) {
    return tp_forward(M(ctx), A(a), h, loss_sum);
}

static fsc_status t_backward(void *ctx, fsc_model_acts *a, const fsc_model_hooks *h, float dscale) {
    return tp_backward(M(ctx), A(a), h, dscale);
}

static size_t t_bytes(void *ctx, const fsc_model_acts *a) {
    (void)ctx;
    return ((const tp_acts *)a)->bytes;
}

static size_t t_stream_floats(void *ctx, int B) {
    const fsc_tp_gpt *m = M(ctx);
    size_t N = (size_t)B * m->cfg.seq;
    return (m->sp ? N / (size_t)m->size : N) * (size_t)m->cfg.dim;
}

/* the keyed RNG at the full tensors' indices (the seed the model was made with) */
static void t_init(void *ctx, uint64_t seed, int i, size_t first, size_t n, float *out) {
    (void)seed;
    tp_init_local(M(ctx), i, first, n, out);
}

static void t_config(void *ctx, char *buf, size_t cap) { fsc_gpt_config_json(&M(ctx)->cfg, buf, cap); }

static fsc_status t_config_check(void *ctx, const char *recorded) {
    return fsc_gpt_config_check_json(&M(ctx)->cfg, recorded);
}

/* the full model's, as a GPT of the same configuration: every rank reports the step's FLOPs, not its share */
static double t_flops(void *ctx, int B) {
    const fsc_gpt_config *c = &M(ctx)->cfg;
    return fsc_gpt_flops_per_token(c) * (double)B * c->seq;
}

static void t_destroy(fsc_model *m) {
    tp_model *tm = (tp_model *)m;
    free(tm->tied);
    free(tm);
}

static const fsc_model_ops tp_ops = {
    .acts_create = t_create,
    .acts_free = t_free,
    .acts_bytes = t_bytes,
    .set_batch = t_set_batch,
    .stream = t_stream,
    .stream_floats = t_stream_floats,
    .forward = t_forward,
    .backward = t_backward,
    .init_values = t_init,
    .config = t_config,
    .config_check = t_config_check,
    .destroy = t_destroy,
    .flops = t_flops,
};

fsc_status fsc_tp_engine_create(fsc_engine *e, const fsc_gpt_config *cfg) {
    const fsc_layout *l = &e->lay;
    fsc_comm *world = e->r->comm;
    /* the colors of fsc_layout_split; without a pipeline the data group is made here, else by pipe.c */
    FSC_TRY(fsc_comm_split(world, l->pipe * l->dp + l->data, l->tensor, &e->tensor_comm));
    fsc_comm_set_name(e->tensor_comm, "tensor");
    if (l->pp == 1) {
        FSC_TRY(fsc_comm_split(world, l->pipe * l->tp + l->tensor, l->data, &e->own_data));
        fsc_comm_set_name(e->own_data, "data");
        e->comm = e->own_data;
    }
    fsc_tp_opts to = { .sequence_parallel = e->po.sequence_parallel };
    FSC_TRY(tp_gpt_create_bound(e->dev, e->tensor_comm, cfg, &to, e->seed, &e->tpm));
    fsc_engine_add_group_kind(e, e->tensor_comm, FSC_GROUP_TENSOR);
    fsc_engine_add_group_kind(e, world, FSC_GROUP_WORLD); /* the f16 vote, saving and loading agree over it */
    fsc_gpt *v = &e->tpm->view;
    tp_model *tm = calloc(1, sizeof *tm);
    if (tm) tm->tied = calloc((size_t)v->n_tensors, sizeof *tm->tied);
    if (!tm || !tm->tied) {
        free(tm);
        return fsc_error(FSC_ERR_NOMEM, "tensor parallelism: out of host memory");
    }
    tm->e = e;
    tm->tied[FSC_P_WTE] = v->dwte_head;
    tm->m = (fsc_model){ .n_layers = cfg->layers + 2, .n_tensors = v->n_tensors, .info = v->info, .param = v->param,
                         .grad = v->grad, .tied_grad = tm->tied, .sample_input_bytes = (size_t)cfg->seq * 4,
                         .sample_target_bytes = (size_t)cfg->seq * 4, .loss_terms = cfg->seq, .ops = &tp_ops,
                         .ctx = tm };
    e->m = &tm->m;
    return FSC_OK;
}

void fsc_tp_engine_free(fsc_engine *e) {
    fsc_tp_gpt_free(e->tpm);
    e->tpm = NULL;
    free(e->nsegs);
    free(e->nlens);
    e->nsegs = NULL, e->nlens = NULL, e->nnsegs = 0;
    if (e->own_norm) fsc_comm_free(e->own_norm);
    if (e->own_data) fsc_comm_free(e->own_data);
    if (e->tensor_comm) fsc_comm_free(e->tensor_comm);
    e->own_norm = e->own_data = e->tensor_comm = NULL;
}

fsc_status fsc_tp_engine_after_setup(fsc_engine *e) {
    /* The group: every rank holding a part of the gradient this data rank's strategy group splits. The
     * strategy splits it over e->norm_comm (a part of the data group; NULL: it does not split it), named
     * here by its lowest data rank; across tensor ranks and stages the gradient is split further. */
    float v = -(float)e->lay.data;
    if (e->norm_comm) {
        v = -(float)fsc_comm_rank(e->comm);
        FSC_TRY(fsc_comm_all_reduce_host(e->norm_comm, e->dev, &v, FSC_MAX));
    }
    FSC_TRY(fsc_comm_split(e->r->comm, (int)-v, e->r->rank, &e->own_norm));
    fsc_comm_set_name(e->own_norm, "norm");
    fsc_engine_add_group_kind(e, e->own_norm, FSC_GROUP_WORLD);
    e->norm_comm = e->own_norm;
    /* the pieces: what this rank holds (the strategy's holdings), replicated tensors on tensor rank 0 only */
    if (!e->st->holdings)
        return fsc_error(FSC_ERR_INTERNAL, "tensor parallelism: strategy %s does not describe its holdings", e->st->name);
    fsc_holding *h = NULL;
    int n = 0;
    FSC_TRY(e->st->holdings(e, &h, &n));
    e->nsegs = calloc((size_t)n + 1, sizeof *e->nsegs);
    e->nlens = calloc((size_t)n + 1, sizeof *e->nlens);
    if (!e->nsegs || !e->nlens) {
        free(h);
        return fsc_error(FSC_ERR_NOMEM, "tensor parallelism: out of host memory");
    }
    for (int k = 0; k < n; k++) {
        if (e->tpm->t[h[k].tensor].split == TP_REPLICATED && e->tpm->rank != 0) continue;
        e->nsegs[e->nnsegs] = (float *)fsc_optim_grad(e->opt, h[k].seg) + h[k].seg_off;
        e->nlens[e->nnsegs] = h[k].n;
        e->nnsegs++;
    }
    free(h);
    return FSC_OK;
}

fsc_status fsc_tp_engine_full_params(fsc_engine *e, float *host) {
    size_t P = e->tpm->P;
    float *loc = malloc(P * sizeof(float)), *d = NULL;
    fsc_status s = loc ? FSC_OK : fsc_error(FSC_ERR_NOMEM, "tensor parallelism: out of host memory");
    /* this tensor rank's slices, whole (collective over the data group, and the stages) */
    if (s == FSC_OK) s = e->pipe ? fsc_pipe_full_params(e, loc) : e->st->full_tensors(e, 1, loc);
    if (s == FSC_OK) s = fsc_device_alloc(e->dev, FSC_TAG_COMM, P * sizeof(float), (void **)&d);
    if (s == FSC_OK) s = fsc_device_upload(e->dev, d, loc, P * sizeof(float));
    free(loc);
    /* every rank reaches the tensor group's gather, or none does */
    fsc_status c = fsc_comm_agree(e->tensor_comm, e->dev, s);
    if (c == FSC_OK) c = tp_gather_flat(e->tpm, d, e->tpm->rank == 0 ? host : NULL);
    fsc_device_release(e->dev, d);
    return c;
}

fsc_status fsc_tp_engine_load(fsc_engine *e, fsc_st_file *f) {
    fsc_holding *h = NULL;
    int n = 0;
    FSC_TRY(e->st->holdings(e, &h, &n));
    size_t most = 1;
    for (int k = 0; k < n; k++)
        if (h[k].n > most) most = h[k].n;
    float *host = malloc(most * sizeof(float));
    fsc_status s = host ? FSC_OK : fsc_error(FSC_ERR_NOMEM, "tensor parallelism: out of host memory loading weights");
    for (int k = 0; k < n && s == FSC_OK; k++) {
        const tp_tensor *t = &e->tpm->t[h[k].tensor];
        const fsc_st_entry *en = fsc_st_find_weight(f, t->full.name);
        if (!en) s = fsc_error(FSC_ERR_FORMAT, "weights file lacks %s", t->full.name);
        if (s == FSC_OK) s = tp_read_local(e->tpm, f, en, h[k].tensor, h[k].first, h[k].n, host);
        if (s == FSC_OK)
            s = fsc_device_upload(e->dev, fsc_optim_param(e->opt, h[k].seg) + h[k].seg_off, host,
                                  h[k].n * sizeof(float));
    }
    free(host);
    free(h);
    return s;
}

const fsc_param_info *fsc_tp_engine_full_info(const fsc_engine *e, int i) { return &e->tpm->t[i].full; }

/* One holding per run of the full tensor that a local holding covers (tp_run_at): column slices give a run
 * per row (three per row for c_attn's Q, K and V), row slices and vocabulary slices one run. Replicated
 * tensors keep their range; only tensor rank 0 writes them. */
fsc_status fsc_tp_engine_holdings(fsc_engine *e, const fsc_holding *in, int nin, fsc_holding **out, int *nout) {
    const fsc_tp_gpt *m = e->tpm;
    *out = NULL;
    *nout = 0;
    for (int pass = 0; pass < 2; pass++) {
        size_t c = 0;
        for (int k = 0; k < nin; k++) {
            const fsc_holding *h = &in[k];
            const tp_tensor *t = &m->t[h->tensor];
            const int wr = h->write && (t->split != TP_REPLICATED || m->rank == 0);
            for (size_t r = 0; r < tp_num_runs(t); r++) {
                tp_run run = tp_run_at(t, m->rank, m->size, r);
                size_t a = run.local > h->first ? run.local : h->first;
                size_t b = run.local + run.n < h->first + h->n ? run.local + run.n : h->first + h->n;
                if (a >= b) continue;
                if (pass == 1)
                    (*out)[c] = (fsc_holding){ .tensor = h->tensor, .first = run.full + (a - run.local), .n = b - a,
                                               .seg = h->seg, .seg_off = h->seg_off + (a - h->first), .write = wr };
                c++;
            }
        }
        if (pass == 1) {
            *nout = (int)c;
            return FSC_OK;
        }
        if (c > ((size_t)1 << 24))
            return fsc_error(FSC_ERR_UNSUPPORTED, "checkpoint: tensor rank %d holds %zu runs of full tensors, above "
                             "the limit of %d", m->rank, c, 1 << 24);
        if (!(*out = malloc((c + 1) * sizeof **out)))
            return fsc_error(FSC_ERR_NOMEM, "checkpoint: out of host memory for %zu holdings", c);
    }
    return FSC_OK;
}
