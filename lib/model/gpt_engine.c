/* The engine for the built-in GPT (gpt_engine.h's fsc_engine_create): fsc_engine_create_built with the GPT's
 * builder, which makes the GPT of gpt.h from layers as a model of model.h, on the tensor group when there is one
 * (fsc_gpt_model_create_tp). Here rather than in lib/parallel, which knows no
 * particular model. Not here: the engine (lib/parallel/engine.c), its tensor parallelism (tensor.c). */
#include "fsc/gpt_engine.h"
#include "tp/tp_impl.h"

typedef struct {
    const fsc_gpt_config *cfg;
    int sp; /* sequence parallelism */
} gpt_build;

static fsc_status build(void *arg, fsc_device *dev, fsc_comm *tensor, fsc_model **out) {
    const gpt_build *b = arg;
    return fsc_gpt_model_create_tp(dev, b->cfg, tensor, tensor ? b->sp : 0, out);
}

fsc_status fsc_engine_create(fsc_rank *r, const fsc_gpt_config *cfg, const fsc_parallel_opts *po,
                             const fsc_optim_config *oc, uint64_t seed, fsc_engine **out) {
    *out = NULL;
    FSC_TRY(fsc_gpt_config_validate(cfg));
    if (po && po->tp > 1) FSC_TRY(fsc_tp_check_config(cfg, po->tp));
    gpt_build b = { cfg, po ? po->sequence_parallel : 0 };
    return fsc_engine_create_built(r, build, &b, po, oc, seed, out);
}

fsc_status fsc_engine_step(fsc_engine *e, const int32_t *tokens, const int32_t *targets, int local_batch,
                           int global_batch, fsc_step_info *info) {
    return fsc_engine_step_model(e, tokens, targets, local_batch, global_batch, info);
}
