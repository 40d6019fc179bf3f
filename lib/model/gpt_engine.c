/* The engine for the built-in GPT (gpt_engine.h's fsc_engine_create): fsc_engine_create_built with the GPT's
 * builder, which makes the GPT of gpt.h from layers as a model of model.h, on the tensor group when there is one
 * (fsc_gpt_model_create_tp), and the check of a configuration against a tensor group. Here rather than in
 * lib/parallel, which knows no particular model. Not here: the engine (lib/parallel/engine.c), its tensor
 * parallelism (tensor.c), the layers' tensor-parallel forms (lib/layers). */
#include "fsc/gpt_engine.h"

fsc_status fsc_tp_check_config(const fsc_gpt_config *cfg, int T) {
    FSC_CHECK_ARG(cfg);
    FSC_TRY(fsc_gpt_config_validate(cfg));
    if (T < 1) return fsc_error(FSC_ERR_INVALID, "tensor parallel: group size %d must be >= 1", T);
    if (cfg->moe_experts > 0)
        return fsc_error(FSC_ERR_UNSUPPORTED, "tensor parallel: a GPT with MoE blocks (moe_experts %d) is not "
                         "supported with tensor parallelism yet", cfg->moe_experts);
    if (cfg->heads % T != 0)
        return fsc_error(FSC_ERR_INVALID, "tensor parallel: %d heads do not split over a tensor group of %d",
                         cfg->heads, T);
    if (fsc_gpt_vocab_rows(cfg) % T != 0)
        return cfg->padded_vocab > cfg->vocab
                   ? fsc_error(FSC_ERR_INVALID, "tensor parallel: a padded vocabulary of %d rows (padded_vocab; vocab "
                               "%d) does not split over a tensor group of %d (make padded_vocab a multiple of %d)",
                               cfg->padded_vocab, cfg->vocab, T, T)
                   : fsc_error(FSC_ERR_INVALID, "tensor parallel: a vocabulary of %d does not split over a tensor group "
                               "of %d (pad it to a multiple of %d: padded_vocab)", fsc_gpt_vocab_rows(cfg), T, T);
    /* the vocab-parallel head's rule (layers/tp_basic.c): every rank's slice of the rows holds a real one */
    const int V = cfg->vocab, Vp = fsc_gpt_vocab_rows(cfg);
    if (V < T)
        return fsc_error(FSC_ERR_UNSUPPORTED, "tensor parallel: a vocabulary of %d rows over a tensor group of %d "
                         "ranks leaves a rank's slice without a real row, whatever the padding: the group can have at "
                         "most %d ranks", V, T, V);
    if (Vp - V >= Vp / T)
        return fsc_error(FSC_ERR_UNSUPPORTED, "tensor parallel: a padded vocabulary (vocab %d, padded_vocab %d) over a "
                         "tensor group of %d ranks leaves the last rank's slice of %d rows without a real one: pad by "
                         "fewer than %d rows", V, Vp, T, Vp / T, Vp / T);
    return FSC_OK;
}

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
    FSC_CHECK_ARG(out);
    *out = NULL;
    FSC_CHECK_ARG(r);
    FSC_CHECK_ARG(cfg);
    FSC_CHECK_ARG(po);
    FSC_CHECK_ARG(oc);
    FSC_TRY(fsc_gpt_config_validate(cfg));
    if (po->tp > 1) FSC_TRY(fsc_tp_check_config(cfg, po->tp));
    gpt_build b = { cfg, po->sequence_parallel };
    return fsc_engine_create_built(r, build, &b, po, oc, seed, out);
}

fsc_status fsc_engine_step(fsc_engine *e, const int32_t *tokens, const int32_t *targets, int local_batch,
                           int global_batch, fsc_step_info *info) {
    FSC_CHECK_ARG(e);
    FSC_CHECK_ARG(tokens);
    FSC_CHECK_ARG(targets);
    if (!fsc_gpt_model_gpt(fsc_engine_model(e))) /* its samples are tokens: another model's are its own bytes */
        return fsc_error(FSC_ERR_INVALID, "fsc_engine_step: the engine's model is not the GPT (call "
                         "fsc_engine_step_model with the model's own samples)");
    return fsc_engine_step_model(e, tokens, targets, local_batch, global_batch, info);
}
