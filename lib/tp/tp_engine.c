/* The tensor-parallel GPT as a model of model.h (tp_gpt_model_create), built on the engine's tensor group by
 * the GPT's builder (gpt_engine.c), so every strategy (DDP, FSDP, ZeRO-1/2) and the pipeline schedules run it
 * unchanged. Its tensors are this rank's slices under the full tensors' names, declared with model.h's split
 * fields (tp_gpt.c), so the engine's generic tensor parallelism (lib/parallel/tensor.c) maps them to the full
 * tensors for clipping, full parameters, weights files and checkpoints; initial values come from the keyed RNG
 * at the full tensors' indices. The strategies bind param[i] and grad[i] into their buffers as they do for the
 * GPT; the tensor group's collectives happen inside the model's layers, between the strategy's hooks.
 * Not here: the layers (tp_gpt_run.c), the slices (tp_gpt.c), the engine (lib/parallel). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tp_impl.h"

static tp_acts *A(fsc_model_acts *a) { return (tp_acts *)a; }

/* The model of this rank's slices (model.h), owning the tensor-parallel GPT; the tied gradient of wte is its
 * slice of the head's part (tpm->dwte_head). */
typedef struct {
    fsc_model m;
    fsc_tp_gpt *tpm;
    float **tied;     /* (n_tensors) */
} tp_model;

static fsc_tp_gpt *M(void *ctx) { return ((tp_model *)ctx)->tpm; }

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

/* the keyed RNG at the full tensors' indices */
static void t_init(void *ctx, uint64_t seed, int i, size_t first, size_t n, float *out) {
    const fsc_tp_gpt *g = M(ctx);
    const fsc_param_info *p = &g->linfo[i];
    for (size_t k = 0; k < fsc_param_num_runs(p); k++) {
        const fsc_param_run r = fsc_param_run_at(p, k, first, n);
        if (r.n) fsc_gpt_init_values(&g->cfg, seed, i, r.full, r.n, out + (r.local - first));
    }
}

static void t_config(void *ctx, char *buf, size_t cap) { fsc_gpt_config_json(&M(ctx)->cfg, buf, cap); }

static fsc_status t_config_check(void *ctx, const char *recorded) {
    return fsc_gpt_config_check_json(&M(ctx)->cfg, recorded);
}

static void t_destroy(fsc_model *m) {
    tp_model *tm = (tp_model *)m;
    fsc_tp_gpt_free(tm->tpm);
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
};

fsc_status tp_gpt_model_create(fsc_device *dev, fsc_comm *tp, const fsc_gpt_config *cfg, int sp, fsc_model **out) {
    *out = NULL;
    fsc_tp_opts to = { .sequence_parallel = sp };
    fsc_tp_gpt *g = NULL;
    FSC_TRY(tp_gpt_create_bound(dev, tp, cfg, &to, 0, &g));
    fsc_gpt *v = &g->view;
    tp_model *tm = calloc(1, sizeof *tm);
    if (tm) tm->tied = calloc((size_t)v->n_tensors, sizeof *tm->tied);
    if (!tm || !tm->tied) {
        free(tm);
        fsc_tp_gpt_free(g);
        return fsc_error(FSC_ERR_NOMEM, "tensor parallelism: out of host memory");
    }
    tm->tpm = g;
    tm->tied[FSC_P_WTE] = v->dwte_head;
    tm->m = (fsc_model){ .n_layers = cfg->layers + 2, .n_tensors = v->n_tensors, .info = v->info, .param = v->param,
                         .grad = v->grad, .tied_grad = tm->tied, .sample_input_bytes = (size_t)cfg->seq * 4,
                         .sample_target_bytes = (size_t)cfg->seq * 4, .loss_terms = cfg->seq, .ops = &tp_ops,
                         .ctx = tm };
    *out = &tm->m;
    return FSC_OK;
}
