/* Private: the pipeline's entry points for the engine (pipe.c) and the balance checks shared with
 * pipe_balance.c. The engine calls fsc_pipe_create before the strategy's setup (it splits the world and
 * makes e->comm the data group), fsc_pipe_after_setup after it, and fsc_pipe_run in place of its own
 * micro-batch loop. */
#ifndef FSC_PIPE_H
#define FSC_PIPE_H
#include "engine_impl.h"

typedef struct fsc_pipe fsc_pipe;

/* po.prefetch (pipe_link.c, which says why): the stage's links, one communicator of two ranks per link and
 * direction (NULL where the stage has no such neighbour), and the receives posted ahead into one buffer per
 * direction (n floats each, FSC_TAG_ACTS). */
typedef struct {
    fsc_comm *act_prev, *act_next;   /* outputs s-1 -> s (received here), s -> s+1 (sent here) */
    fsc_comm *grad_prev, *grad_next; /* input gradients s -> s-1 (sent here), s+1 -> s (received here) */
    float *inbuf, *gbuf;             /* (n) the next input, the next output gradient */
    size_t n;
    fsc_comm_req *inreq, *greq;      /* the receives posted into them, or NULL */
} fsc_pipe_links;

/* CLOCK_MONOTONIC seconds (pipe.c): the stats' waits, here and in pipe_link.c. */
double fsc_pipe_now_s(void);
/* Collective over pipe_comm: split the links of this stage and count them as pipeline groups of e. */
fsc_status fsc_pipe_links_create(fsc_engine *e, fsc_comm *pipe_comm, int stage, fsc_pipe_links *l);
/* Drop the posted receives (waited for, data and errors ignored: left by a failed step), then make the
 * buffers n floats each. */
fsc_status fsc_pipe_links_buffers(fsc_pipe_links *l, fsc_device *dev, size_t n);
void fsc_pipe_links_drop(fsc_pipe_links *l);
/* The bytes of the buffers allocated. */
size_t fsc_pipe_links_bytes(const fsc_pipe_links *l);
/* Post the receive of the next input (of the next output gradient) unless one is posted or there is no
 * previous (next) stage. */
fsc_status fsc_pipe_links_post_input(fsc_pipe_links *l);
fsc_status fsc_pipe_links_post_grad(fsc_pipe_links *l);
/* Wait for the posted receive (posted now if none is; *waited += the seconds waited) and copy it to dst. */
fsc_status fsc_pipe_links_take_input(fsc_pipe_links *l, fsc_device *dev, float *dst, double *waited);
fsc_status fsc_pipe_links_take_grad(fsc_pipe_links *l, fsc_device *dev, float *dst, double *waited);
void fsc_pipe_links_free(fsc_pipe_links *l, fsc_device *dev);

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
