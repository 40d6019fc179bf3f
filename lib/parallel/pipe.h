/* Private: the pipeline's entry points for the engine (pipe.c) and the balance checks shared with
 * pipe_balance.c. The engine calls fsc_pipe_create before the strategy's setup (it splits the world and
 * makes e->comm the data group), fsc_pipe_after_setup after it, and fsc_pipe_run in place of its own
 * micro-batch loop. */
#ifndef FSC_PIPE_H
#define FSC_PIPE_H
#include "engine_impl.h"

typedef struct fsc_pipe fsc_pipe;

/* Stages of the options (pp 0 means 1). */
int fsc_pipe_stages(const fsc_parallel_opts *po);
/* Options of a pipeline against the world and the model; clear messages. */
fsc_status fsc_pipe_validate(const fsc_rank *r, int n_layers, const fsc_parallel_opts *po);
/* A balance: pp entries >= 1 summing to the model's blocks. */
fsc_status fsc_pipe_check_balance(const int *balance, int pp, int layers);
/* Before the strategy's setup: groups, e->comm = data group, e->lf/e->ll. No-op without a pipeline. */
fsc_status fsc_pipe_create(fsc_engine *e);
/* After the strategy's setup: the group over which the clipping norm is taken. */
fsc_status fsc_pipe_after_setup(fsc_engine *e);
/* The micro-batches of one step by the schedule (between the strategy's begin_step and end_backward):
 * *loss_total = the sum of loss terms over the global batch, the same on every rank. The last stage's data
 * group checks global_batch against its local batches (mb x chunks each) as it sums the loss; the verdict and
 * the sum reach every stage with the loss, where each rank also compares its own global_batch: *batch is
 * that rank's verdict (fsc_engine_check_batch, with its message). */
fsc_status fsc_pipe_run(fsc_engine *e, const void *inputs, const void *targets, int mb, int global_batch,
                        float dscale, double *loss_total, fsc_status *batch);
/* Forward only (fsc_engine_eval, eval.c): the M micro-batches of mb samples through the stages in order, each
 * record returned as soon as its stage forward is done, tied tensors sent to their users' stage as in a step.
 * out[0] = the sum of loss terms over the last stage's data group in rank order, out[1] = 1 if its batch check
 * passed (else 0, and out[2] the sum of its local batches): the same on every rank of the pipeline group. */
fsc_status fsc_pipe_eval(fsc_engine *e, const void *inputs, const void *targets, int mb, int global_batch,
                         double out[3]);
/* Collective over the world: full parameters into host (may be NULL on ranks that do not want them). */
fsc_status fsc_pipe_full_params(fsc_engine *e, float *host);
void fsc_pipe_free(fsc_engine *e);

#endif
