/* The engine for the built-in GPT (gpt.h): fsc_engine_create builds the GPT as a model of model.h (with tensor
 * parallelism on the tensor group: fsc_gpt_model_create_tp) through parallel.h's fsc_engine_create_built;
 * fsc_engine_step is fsc_engine_step_model with int32 tokens. Any other model goes through
 * fsc_engine_create_built or fsc_engine_create_model.
 * Not here: the engine (parallel.h), the GPT (gpt.h). */
#ifndef FSC_GPT_ENGINE_H
#define FSC_GPT_ENGINE_H
#include "export.h"
#include <stdint.h>
#include "status.h"
#include "cluster.h"
#include "gpt.h"
#include "optim.h"
#include "parallel.h"

FSC_BEGIN_DECLS

/* The engine for the built-in GPT (fsc_gpt_model_create, or its tensor-parallel form with tp > 1); the engine
 * owns the model. */
fsc_status fsc_engine_create(fsc_rank *r, const fsc_gpt_config *cfg, const fsc_parallel_opts *po,
                             const fsc_optim_config *oc, uint64_t seed, fsc_engine **out);
/* Check a GPT configuration against a tensor group size (clear error otherwise): heads and the vocabulary divide
 * by it, no MoE blocks. */
fsc_status fsc_tp_check_config(const fsc_gpt_config *cfg, int tp_size);
/* fsc_engine_step_model for the GPT: tokens/targets are local_batch sequences of T tokens (int32). An engine of
 * another model is FSC_ERR_INVALID (give it its samples with fsc_engine_step_model). */
fsc_status fsc_engine_step(fsc_engine *e, const int32_t *tokens, const int32_t *targets, int local_batch,
                           int global_batch, fsc_step_info *info);

FSC_END_DECLS

#endif
