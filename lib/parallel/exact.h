/* Private to lib/parallel: the engine's exact reduction mode (exact.c, docs/determinism.md). */
#ifndef FSC_PARALLEL_EXACT_H
#define FSC_PARALLEL_EXACT_H
#include "engine_impl.h"
#include "step.h"

/* Refuse what exact mode does not run with (po->reduce_exact set); unit >= 0. */
fsc_status fsc_exact_validate(const fsc_layout *l, const fsc_parallel_opts *po);
/* After the strategy's setup (reduce_exact): the int64 shadows of the reduced gradients (e->gsegs). */
fsc_status fsc_exact_create(fsc_engine *e);
void fsc_exact_free(fsc_engine *e);
/* fsc_engine_reduce in exact mode: in (n f32, one unit's gradient on this rank) on the step's exponent, summed
 * over c as int64 (all-reduce, or block `rank` of it: rs), then over `then` when not NULL (an all-reduce of that
 * result: hybrid sharding's replicas), added to the shadow of out (inside a gseg). */
fsc_status fsc_exact_reduce(fsc_engine *e, fsc_comm *c, int rs, fsc_comm *then, const float *in, const float *out,
                            size_t n);
/* model.h's grad_term in exact mode (expert parallelism): piece (n f32, device), one source's part of grad, on the
 * step's exponent, added as int64 to grad's other terms; they join the reduction whose input holds grad (the float
 * gradient, never added to, stays zero). */
fsc_status fsc_exact_term(fsc_engine *e, float *grad, const float *piece, size_t n);
/* The step in exact mode (no pipeline, or the pipeline's micro-batches): local_batch / U units of U sequences,
 * each a micro-batch of its own, every backward reducing exactly; step.c runs its list over the units and then
 * R E O (step.h). fsc_exact_prepare (fsc_step_prepare's, before the strategy's begin_step): the units checked
 * against the batch (FSC_ERR_INVALID), c->K their count, their values' rows (c->units without a pipeline, its last
 * stage's losses with one), the first attempt begun. fsc_exact_begin_attempt: an attempt begun (the first by
 * prepare, another by the runner before the strategy's begin_step). fsc_exact_settle, E: after R, the attempt's
 * exponent agreed: the reduced gradients in e->gsegs from the int64 sums, or c->again when the step must be
 * recomputed on the agreed exponent (with one unit per rank on DDP only its reductions run again, here).
 * fsc_exact_sums, O's sums: *total the loss summed over the data group, moe the MoE statistics summed (moe[0]
 * already divided by the number of units), *batch the batch check. fsc_exact_end: after the runner, whether the
 * step failed or not. */
fsc_status fsc_exact_prepare(fsc_engine *e, fsc_step_ctx *c);
void fsc_exact_begin_attempt(fsc_engine *e, const fsc_step_ctx *c);
fsc_status fsc_exact_settle(fsc_engine *e, fsc_step_ctx *c);
fsc_status fsc_exact_sums(fsc_engine *e, fsc_step_ctx *c, double *total, double moe[3], fsc_status *batch);
void fsc_exact_end(fsc_engine *e);
/* fsc_engine_eval's sum in exact mode: *sum = the losses vals (K units of U on this rank; with a pipeline the last
 * stage's) summed in ascending order over the data group (with a pipeline, the last stage's sum on every stage);
 * *batch the data group's batch check. */
fsc_status fsc_exact_sum_losses(fsc_engine *e, const double *vals, int K, int U, int local_batch, int global_batch,
                                double *sum, fsc_status *batch);
/* For tests: the exponent the next step's first attempt uses (the last step's agreed one), and setting it. */
int fsc_exact_get_exponent(const fsc_engine *e);
void fsc_exact_set_exponent(fsc_engine *e, int E);

#endif
