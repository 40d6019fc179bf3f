/* Evaluation: the mean loss of a batch by a forward pass of the engine's model, on every strategy and layout
 * (DDP, FSDP, ZeRO-1/2, pipelines, tensor and expert parallelism), without training.
 * The pass runs as a step's forwards do: the same micro-batches (local_batch / accum samples each), the
 * strategy's hooks (FSDP gathers each unit before its layers and frees it after, as training does), the
 * pipeline's stages in order; the loss is summed over the data group in rank order and divided by
 * global_batch x loss_terms, as fsc_step_info.loss is, so the loss of a batch is the same bits on every
 * strategy and layout that trains bit-identically with DDP, and equals the loss a step on that batch reports.
 * No gradient, optimizer state, step count or loss scale is touched: the next step's bits do not depend on
 * whether an evaluation ran before it. Collective: every rank of the world calls it with its own part of the
 * batch (as fsc_engine_step_model). */
#ifndef FSC_EVAL_H
#define FSC_EVAL_H
#include "export.h"
#include "status.h"

FSC_BEGIN_DECLS

struct fsc_engine;
/* *loss: the mean loss over the global batch, the same on every rank. FSC_ERR_INVALID (on every rank, nothing
 * evaluated) when local_batch does not split into the engine's micro-batches, or global_batch is not the sum of
 * the local batches over the data group. Mixture-of-experts models: the loss without the auxiliary loss. */
fsc_status fsc_engine_eval(struct fsc_engine *e, const void *inputs, const void *targets, int local_batch,
                           int global_batch, double *loss);

FSC_END_DECLS

#endif
