/* Private to lib/parallel: a step as this rank's list of actions, run by one runner (step.c) through an executor.
 * The list: the forward and backward passes (F, B, W of a micro-batch on a chunk: fsc/pipe_schedule.h), then the
 * step's tail, which the runner appends (a schedule never holds it): R, the strategy's end_backward (every
 * gradient reduction of the step finished), and O, the optimizer step (engine.c: the sums, unscale, the vote,
 * clipping, the optimizer); with the exact reduction R E O, where E (exact.c) ends an attempt and may have the list
 * run again from its start. So a step reads F0 B0 F1 B1 ... R O. Two executors run the F, B and W: the whole
 * model on this rank (step.c: the accumulation list F0 B0 F1 B1 ...) and a pipeline stage (pipe.c: its
 * schedule's list, with the boundary sends and receives and its pools of records). Both run the same compute
 * of each action (step_compute.c: fsc_step_forward_on, fsc_step_backward_on, fsc_step_weight_on) on the record
 * they pass; an executor adds only what surrounds it (a pipeline: receive the boundary, compute, send the
 * boundary, keep or release the record). The step (engine.c's step_model) reads: fsc_step_prepare, the
 * strategy's begin_step, fsc_step_run. An evaluation (eval.c) is a forward-only list without a tail, run by the
 * same runner and executors: the strategy's begin_eval, fsc_step_prepare_eval, fsc_step_run, fsc_step_sums
 * (unless it sums otherwise), fsc_step_release, its end_eval. */
#ifndef FSC_PARALLEL_STEP_H
#define FSC_PARALLEL_STEP_H
#include "engine_impl.h"
#include "fsc/pipe_schedule.h"

typedef struct fsc_step_ctx fsc_step_ctx;

/* An action of a step's tail, after the list's last action and the executor's end: its span's name in the trace
 * ("R", "E", "O") and what it runs. */
typedef struct {
    const char *name;
    fsc_status (*run)(fsc_engine *e, fsc_step_ctx *c);
} fsc_step_tail;

/* What runs the actions of a step. */
typedef struct {
    /* after the strategy's begin_step, before the first action: the step's inputs taken, this rank's list in
     * c->acts and c->nacts, c->wait pointed at the executor's count of seconds waited for messages, c->reduces
     * the kind that ends a micro-batch's backward */
    fsc_status (*begin)(fsc_engine *e, fsc_step_ctx *c);
    /* the action of each kind (indexed by fsc_pipe_action_kind): micro-batch k on this rank's chunk ch, with
     * e->micro and e->sync set by the runner (fsc_step_run) */
    fsc_status (*action[3])(fsc_engine *e, fsc_step_ctx *c, int k, int ch);
    /* after the last action: nothing of the step stays in flight */
    fsc_status (*end)(fsc_engine *e, fsc_step_ctx *c);
    /* after the strategy's end_backward (O's fsc_step_sums, an evaluation's), collective: *total the loss terms
     * summed over the data group (the same on every rank), moe the MoE statistics summed (not yet divided),
     * *batch this rank's batch check */
    fsc_status (*sums)(fsc_engine *e, fsc_step_ctx *c, double *total, double moe[3], fsc_status *batch);
} fsc_step_exec;

/* One step (every attempt of the exact reduction) or one evaluation in progress. */
struct fsc_step_ctx {
    const fsc_step_exec *x;
    const void *inputs, *targets;  /* the local batch, micro-batch k's samples at k mb */
    int local_batch, global_batch;
    int K, mb;                     /* micro-batches, sequences each */
    float dscale;                  /* the loss gradient's scale (parallel.h) */
    const fsc_pipe_action *acts;   /* (nacts) this rank's actions (begin) */
    int nacts;
    fsc_pipe_action_kind reduces;  /* the kind that ends a micro-batch's backward, whose last one on each chunk
                                    * reduces under no_sync: B, or W where the executor's B leaves the weight
                                    * gradients to W (begin; the runner's e->sync) */
    double loss;                   /* this rank's loss terms summed in action order (a pipeline: the last stage's) */
    double moe[3];                 /* the whole model: the MoE statistics of this rank's micro-batches summed */
    double *units;                 /* the exact reduction: rows of K, each micro-batch's loss and, without a
                                    * pipeline and with aux_stats, its aux loss, assigned and dropped; NULL: not
                                    * kept (a pipeline's: fsc_pipe_set_unit_losses', its begin puts them here,
                                    * written on the last stage) */
    double *wait;                  /* seconds waited for messages so far (the runner's wait_us per action) */
    double no_wait;                /* what wait points at when the executor waits for none */
    int fwd;                       /* the whole model: the micro-batch whose forward ran last (e->acts holds it) */
    /* an evaluation (fsc_step_prepare_eval): forward only, the list F of each micro-batch on each chunk in turn, no
     * reduction, no statistics of the step, no trace spans of its actions */
    int eval;
    float *out;                    /* the outputs of every sample (fsc_engine_take_outputs) of a record that makes
                                    * the loss, NULL: none (a pipeline's: fsc_pipe_set_outputs', its begin puts them
                                    * here) */
    size_t *per_sample;
    fsc_status out_status;         /* the first failure to take them (fsc_step_forward_on goes on: a pipeline's last
                                    * stage reports it after the pass, the whole model's F at once) */
    char out_why[256];             /* its message */
    fsc_model_acts *rec, *own;     /* the whole model: the record (e->acts when made for mb, else own, made in the
                                    * executor's begin and freed in its end) */
    /* a step's (fsc_step_prepare); an evaluation has no tail */
    const fsc_step_tail *tail;     /* (ntail) what the runner appends to the list: R O, or R E O */
    int ntail;
    float loss_scale;              /* the step's loss scale (1 without the scaler): dscale's, unscaled by O */
    fsc_step_info *info;           /* where O writes what the step did, NULL: nowhere */
    int attempts;                  /* the exact reduction's attempts so far (E counts them) */
    fsc_status samples;            /* tensor parallelism: whether the tensor group passed the same samples (engine.c's
                                    * step_model), O's batch verdict when the batch check passed */
    char samples_why[256];         /* its message */
    int again;                     /* E: run the list again from its start (the runner clears it) */
};

/* Before the strategy's begin_step: c set up for a step of po.accum micro-batches of the local batch
 * (FSC_ERR_INVALID when it does not split into them), dscale the loss scale / (global_batch x the model's loss
 * terms), the executor chosen (a pipeline's, else the whole model's, whose record for micro-batches of
 * local_batch / K sequences it makes), the tail R O; with the exact reduction its units instead (exact.c's
 * fsc_exact_prepare: their count, their values' rows, the tail R E O, the first attempt begun). info: where O
 * writes what the step did (fsc_engine_step_model's), may be NULL. */
fsc_status fsc_step_prepare(fsc_engine *e, fsc_step_ctx *c, const void *inputs, const void *targets,
                            int local_batch, int global_batch, fsc_step_info *info);
/* An evaluation's c: n micro-batches of mb sequences of the local batch forward, with the executor of a step; units
 * (NULL: not kept) each micro-batch's loss (the whole model; a pipeline's last stage: fsc_pipe_set_unit_losses),
 * out and per_sample as fsc_step_ctx's. The engine's record and micro-batch state stay as they are. */
fsc_status fsc_step_prepare_eval(fsc_engine *e, fsc_step_ctx *c, const void *inputs, const void *targets,
                                 int local_batch, int global_batch, int mb, int n, double *units, float *out,
                                 size_t *per_sample);
/* Around an evaluation (eval.c: before the strategy's begin_eval, after its end_eval): the strategies' hooks as in
 * a step's first micro-batch, no reduction (e->micro 0, e->sync 0, which the runner leaves so in an evaluation);
 * leave puts back what enter saved in place. */
void fsc_step_eval_enter(fsc_engine *e, int place[2]);
void fsc_step_eval_leave(fsc_engine *e, const int place[2]);
/* After an evaluation, whether it failed or not: what it made (the whole model's own record) freed. */
void fsc_step_release(fsc_engine *e, fsc_step_ctx *c);
/* This rank's list, in order, after the strategy's begin_step (a step) or begin_eval (an evaluation): the
 * executor's begin, its actions, its end, then the tail (c->tail). Each action is a span of the trace: F, B and W
 * of category "pipe" (kind, micro-batch, chunk, as "B3.0", with the microseconds it waited for messages), R, E and
 * O of category "tail"; an evaluation's are not traced. When E asks for another attempt, the list runs again from
 * the executor's begin, after the attempt is begun (exact.c) and the strategy's begin_step. The one writer of
 * e->micro and e->sync (with fsc_step_eval_enter/_leave): before each F, B or W of a step, its micro-batch, and
 * whether its backward reduces: never in F; every B and W under the exact reduction (each a term of its own) and
 * every B without no_sync; else the last micro-batch's action of kind c->reduces. The exact reduction's step
 * ends with fsc_exact_end, whether it failed or not. */
fsc_status fsc_step_run(fsc_engine *e, fsc_step_ctx *c);
/* O: the step's sums, unscale, the vote over the world, clipping and the optimizer (engine.c), c->info filled. */
fsc_status fsc_step_optimize(fsc_engine *e, fsc_step_ctx *c);
/* O's sums without the exact reduction, and an evaluation's: the executor's sums, moe[0] divided by the
 * micro-batches of the data group. An evaluation's: the loss only (moe zeros; a pipeline: the last stage's data
 * group's, to every stage), *batch the check's status (its message set where the check ran). */
fsc_status fsc_step_sums(fsc_engine *e, fsc_step_ctx *c, double *total, double moe[3], fsc_status *batch);
/* The lists kept (the accumulation list, an evaluation's), freed (fsc_engine_free). */
void fsc_step_free(fsc_engine *e);

/* The compute of each kind of action, the one both executors run (step_compute.c), between the runner's
 * e->micro, e->sync and the executor's own work around it. The model's operations get the engine's hooks
 * (fsc_engine_hooks: the strategy's, and a pipeline's tied hand-offs, fsc_pipe_pre_forward / _post_forward).
 * F: micro-batch k of c on rec, a record of layers first..last (the whole model's, or a pipeline chunk's): its
 * inputs set where first is 0 and its targets where last is the model's last layer (the head), the forward run;
 * then, at the head, its loss added to c->loss and kept in c->units[k] (when set), its outputs taken into c->out
 * (when set; the first failure kept in c->out_status and c->out_why, the pass goes on); in a step its MoE
 * statistics noted (a pipeline: fsc_pipe_aux_note; the whole model: summed into c->moe and the units' rows).
 * recompute: a checkpointed micro-batch's forward again, before its backward: the batch and the forward only (no
 * loss, no statistics). */
fsc_status fsc_step_forward_on(fsc_engine *e, fsc_step_ctx *c, fsc_model_acts *rec, int k, int first, int last,
                               int recompute);
/* B: the backward of rec's micro-batch with c->dscale; split: its input part (the model's backward_input), the
 * weight part left to W. */
fsc_status fsc_step_backward_on(fsc_engine *e, fsc_step_ctx *c, fsc_model_acts *rec, int split);
/* W: the weight part of a split backward (backward_weight). */
fsc_status fsc_step_weight_on(fsc_engine *e, fsc_step_ctx *c, fsc_model_acts *rec);

/* The pipeline's executor (pipe.c). */
extern const fsc_step_exec fsc_pipe_exec;

#endif
