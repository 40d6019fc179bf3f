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
#include <stddef.h>
#include "status.h"

FSC_BEGIN_DECLS

struct fsc_engine;
/* *loss: the mean loss over the global batch, the same on every rank. FSC_ERR_INVALID (on every rank, nothing
 * evaluated) when global_batch is not the sum of the local batches over the data group. A local_batch that does
 * not split into the engine's micro-batches (0 included; with reduce exact, into units), on one rank or more, fails
 * every rank with FSC_ERR_INVALID and the lowest such rank's message, before the pass (one agreement over the world
 * a call; fsc_engine_predict the same; fsc_engine_step_model refuses it on that rank only: parallel.h). With tensor
 * parallelism every rank of a tensor group passes the same samples (compared as fsc_engine_step_model does; a
 * difference fails every rank with FSC_ERR_INVALID).
 * Mixture-of-experts models: the loss without the auxiliary loss. */
fsc_status fsc_engine_eval(struct fsc_engine *e, const void *inputs, const void *targets, int local_batch,
                           int global_batch, double *loss);

/* The model's outputs for this rank's local_batch samples, by the same forward pass: out (host) receives
 * local_batch x *per_sample floats, sample by sample, where *per_sample = loss_terms x the loss layer's width (a
 * language model: T x V logits, V the real vocabulary; fsc_layer_xent: its class logits; fsc_layer_mse: its
 * predictions). Collective like fsc_engine_eval (every rank of the world, each with its own samples; local_batch
 * splits into the engine's micro-batches); on every strategy and layout (FSDP gathers as in evaluation): with a
 * pipeline the last stage broadcasts the outputs to every stage of its pipeline group, with tensor parallelism the
 * tensor group gathers the vocabulary-parallel head's slices (model.h's logits_part), so every rank gets its own
 * samples' whole outputs. FSC_ERR_UNSUPPORTED on every rank for a model whose loss layer keeps no outputs. Touches
 * no gradient or optimizer state. The loss layer's forward runs on zeroed targets (sample_target_bytes of zero
 * bytes a sample: class 0, a target of 0.0), which a program's loss layer must accept (its check_target too). */
fsc_status fsc_engine_predict(struct fsc_engine *e, const void *inputs, int local_batch, float *out,
                              size_t *per_sample);

FSC_END_DECLS

#endif
