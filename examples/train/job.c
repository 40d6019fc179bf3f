/* The job the options describe, as the library takes it: the engine's parallel options, the optimizer's, and the
 * planner's job (fsc/plan.h) that --plan and fsc-plan plan. Shared by fsc-train and fsc-plan (which parses
 * fsc-train's options with the same table).
 * Not here: the options themselves (options.c), the model configurations (models.c). */
#include <stdlib.h>
#include "train.h"

/* The library's parallel options of the run: its defaults, then what the options set (an option the table lacks
 * keeps its default). balance (1024 entries) holds --balance's blocks per stage. */
fsc_status parallel_opts(const train_config *c, int *balance, fsc_parallel_opts *out) {
    fsc_parallel_opts po = fsc_parallel_opts_default();
    po.kind = strategy(c);
    po.shard = (fsc_shard_strategy)c->shard;
    po.wrap = (fsc_wrap_policy)c->wrap;
    po.wrap_min_params = c->wrap_min_params;
    po.param_dtype = precision_dtype[c->precision];
    po.reduce_dtype = precision_dtype[c->precision];
    po.accum = c->accum;
    po.reduce_exact = c->reduce == 2;
    po.unit = c->unit;
    po.prefetch = c->prefetch;
    po.offload = (fsc_offload_mode)c->offload;
    po.clip = c->clip;
    po.nonfinite = (fsc_nonfinite_policy)c->nonfinite;
    po.max_skipped_steps = c->max_skipped_steps;
    po.pp = c->pp;
    po.schedule = pipe_schedule_kind[c->schedule];
    po.virtual_stages = c->virtual_stages;
    po.pipe_checkpoint = pipe_ckpt_mode[c->pipe_ckpt];
    po.checkpoint = c->recompute;
    po.tp = c->tp;
    po.sequence_parallel = c->sequence_parallel;
    po.order = c->order;
    po.ep = c->ep;
    if (c->balance) {
        /* both models have --layers blocks between the embedding and the head; parse reads only n_layers */
        FSC_TRY(fsc_balance_parse(c->balance, &(fsc_model){ .n_layers = c->layers + 2 }, c->pp * config_chunks(c),
                                  balance));
        po.balance = balance;
    }
    *out = po;
    return FSC_OK;
}

/* The optimizer: AdamW's betas and eps from the library, the rest from the options. */
fsc_optim_config optim_config(const train_config *c) {
    fsc_optim_config oc = fsc_optim_config_default();
    oc.kind = (fsc_optim_kind)c->optimizer;
    oc.lr = c->lr;
    oc.weight_decay = c->weight_decay;
    oc.decay_all = c->decay_all;
    if (oc.kind == FSC_OPT_SGD) oc.momentum = c->momentum;
    return oc;
}

/* The job fsc-train runs with these options, as fsc_plan_memory takes it (balance: 1024 entries, for --balance).
 * A built-in family's model is its plan hook's; any other family's is its configuration text (j->config,
 * model_text's: malloc'd, freed with plan_job_free). */
fsc_status plan_job(const train_config *c, int *balance, fsc_plan_job *j) {
    *j = fsc_plan_job_default();
    const model_family *f = model_family_of(c);
    if (!f) return fsc_error(FSC_ERR_INVALID, "--model %s: no such model family", c->model);
    FSC_TRY(parallel_opts(c, balance, &j->po));
    if (f->plan) {
        f->plan(c, j);
    } else if (!(j->config = model_text(c))) { /* any other family: its configuration text, as the run builds it */
        return fsc_error(FSC_ERR_NOMEM, "out of memory for the model's configuration");
    }
    j->oc = optim_config(c);
    j->world = c->world;
    j->batch = c->batch;
    j->seed = c->seed;
    return FSC_OK;
}


void plan_job_free(fsc_plan_job *j) {
    free((void *)j->config);
    j->config = NULL;
}
