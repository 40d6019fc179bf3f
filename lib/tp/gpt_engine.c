/* The engine for the built-in GPT (gpt_engine.h's fsc_engine_create): the GPT of gpt.h made a model of model.h
 * (fsc_gpt_model_create), or with tensor parallelism the tensor-parallel GPT (tp_engine.c), then the engine of
 * any model (lib/parallel). Here rather than in lib/parallel, which knows no particular model: tensor
 * parallelism is the GPT's only so far. Not here: the engine (lib/parallel/engine.c). */
#include "fsc/gpt_engine.h"
#include "tp_impl.h"
#include "parallel/engine_impl.h"

static fsc_status tp_check(const void *arg, int tp) { return fsc_tp_check_config(arg, tp); }

fsc_status fsc_engine_create(fsc_rank *r, const fsc_gpt_config *cfg, const fsc_parallel_opts *po,
                             const fsc_optim_config *oc, uint64_t seed, fsc_engine **out) {
    *out = NULL;
    FSC_TRY(fsc_gpt_config_validate(cfg));
    fsc_engine *e;
    FSC_TRY(fsc_engine_new(r, cfg->layers + 2, cfg->moe_experts, po, oc, seed, tp_check, cfg, &e));
    fsc_status s = e->lay.tp > 1 ? fsc_tp_engine_create(e, cfg) : fsc_gpt_model_create(e->dev, cfg, &e->m);
    e->own_model = e->m != NULL;
    if (s == FSC_OK) s = fsc_engine_finish(e);
    if (s != FSC_OK) {
        fsc_engine_free(e);
        return s;
    }
    *out = e;
    return FSC_OK;
}

fsc_status fsc_engine_step(fsc_engine *e, const int32_t *tokens, const int32_t *targets, int local_batch,
                           int global_batch, fsc_step_info *info) {
    return fsc_engine_step_model(e, tokens, targets, local_batch, global_batch, info);
}
