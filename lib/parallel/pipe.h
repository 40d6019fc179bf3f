/* Private: the pipeline's entry points for the engine (pipe.c) and the balance checks shared with
 * pipe_balance.c. The engine calls fsc_pipe_create before the strategy's setup (on the engine's groups: e->comm
 * is the stage's data group) and keeps the stage's layers it names (fsc_pipe_span); a step runs the schedule's actions through fsc_pipe_exec (step.h) where the
 * whole model runs the accumulation list (the clipping norm's group across the stages is the engine's:
 * fsc_layout_norm_group). */
#ifndef FSC_PIPE_H
#define FSC_PIPE_H
#include "engine_impl.h"
#include "step.h"

typedef struct fsc_pipe fsc_pipe;

/* A ring of send buffers (pipe_link.c): n of them (device memory under tag), each with its send in flight or NULL;
 * next: the slot the next send uses (the oldest send). */
typedef struct {
    float **buf;
    fsc_comm_req **req;
    int n, next;
    fsc_tag tag;
} fsc_pipe_ring;

/* Send src (nf floats) to peer on c from the ring's next buffer, once its last send is waited for (*waited += the
 * seconds waited), or, with grow, from a new buffer inserted before it while that send is in flight (an empty ring
 * grows too). done: wait for every send in flight (oldest first; the first failure is returned); drop: the same,
 * errors ignored (a failed step's); release: drop the buffers (after done or drop). */
fsc_status fsc_pipe_ring_send(fsc_pipe_ring *g, int grow, fsc_comm *c, int peer, fsc_device *dev, size_t nf,
                              const float *src, double *waited);
fsc_status fsc_pipe_ring_done(fsc_pipe_ring *g, double *waited);
void fsc_pipe_ring_drop(fsc_pipe_ring *g);
void fsc_pipe_ring_release(fsc_pipe_ring *g, fsc_device *dev);

/* po.prefetch (pipe_link.c, which says why): the stage's links, one communicator of two ranks per link and
 * direction (NULL where the stage has no such neighbour), the receives posted ahead into one buffer per
 * direction, a ring of send buffers from which checkpointed micro-batches' outputs leave and, where sends wait
 * for their receive, one from which input gradients leave (n floats each, FSC_TAG_ACTS). */
typedef struct {
    fsc_comm *act_prev, *act_next;   /* outputs s-1 -> s (received here), s -> s+1 (sent here) */
    fsc_comm *grad_prev, *grad_next; /* input gradients s -> s-1 (sent here), s+1 -> s (received here) */
    float *inbuf, *gbuf;             /* (n) the next input, the next output gradient */
    size_t n;
    fsc_comm_req *inreq, *greq;      /* the receives posted into them, or NULL */
    fsc_pipe_ring out;               /* copies of checkpointed outputs being sent on act_next */
    fsc_pipe_ring gout;              /* grow: copies of input gradients being sent on grad_prev */
    int grow;                        /* sends wait for their receive (NCCL's): the rings grow rather than wait for
                                      * a slot's send, and input gradients leave from copies (pipe_link.c) */
    int peer_prev, peer_next;        /* the other rank in act_prev/grad_prev (0 but on the first stage of an
                                      * interleaved pipeline: 1), in act_next/grad_next (1; the last: 0) */
} fsc_pipe_links;

/* A request of the pipeline's links (pipe_link.c, pipe_tied.c): wait for and free *r if one is in flight
 * (*waited += the seconds waited, when waited is not NULL; *r NULL after); drop: the same, errors ignored (what
 * a failed step left). */
fsc_status fsc_pipe_req_wait(fsc_comm_req **r, double *waited);
void fsc_pipe_req_drop(fsc_comm_req **r);
/* Collective over pipe_comm: split the links of this stage and count them as pipeline groups of e. wrap
 * (interleaved stages): the last rank's outputs go on to the first rank, and its input gradients come back, on
 * two more links between them (act_next, grad_next on the last rank; act_prev, grad_prev on the first). */
fsc_status fsc_pipe_links_create(fsc_engine *e, fsc_comm *pipe_comm, int stage, int wrap, fsc_pipe_links *l);
/* Drop the posted receives and the sends in flight (waited for, data and errors ignored: left by a failed
 * step), then make the buffers n floats each: the two receive buffers and nsend send buffers of outputs (none
 * without a next stage; a ring grown under grow keeps its size). */
fsc_status fsc_pipe_links_buffers(fsc_pipe_links *l, fsc_device *dev, size_t n, int nsend);
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
/* Send src (n floats, a checkpointed output whose record is reused at once) to the next stage from the ring's
 * next buffer, once the send that last used that buffer is waited for (*waited += the seconds waited), or, with
 * grow, from a new buffer when that send is still in flight (an empty ring too); without grow synchronously when
 * the ring is empty. */
fsc_status fsc_pipe_links_send_output(fsc_pipe_links *l, fsc_device *dev, const float *src, double *waited);
/* grow: send src (n floats, an input gradient whose record is reused at once) to the previous stage from a copy
 * (the gradients' ring, a new buffer when every one's send is in flight). */
fsc_status fsc_pipe_links_send_grad(fsc_pipe_links *l, fsc_device *dev, const float *src);
/* Wait for every send of the rings in flight; the first failure is returned, every send is waited for. */
fsc_status fsc_pipe_links_sends_done(fsc_pipe_links *l, double *waited);
void fsc_pipe_links_free(fsc_pipe_links *l, fsc_device *dev);

/* po.prefetch (pipe_tied.c, which says why): a tied tensor of n floats whose owner and users run on different
 * stages, on this stage (one of the two; NULL communicators elsewhere). */
typedef struct {
    fsc_comm *val, *grad;     /* owner -> user values, user -> owner gradients: two ranks each, owner rank 0 */
    int owner;                /* this stage owns the tensor */
    size_t n;
    float *vbuf, *gbuf;       /* owner: (n) the values being sent, the next gradient (FSC_TAG_COMM) */
    fsc_comm_req *vreq;       /* owner: the values' send; user: their receive into the replica */
    fsc_comm_req *greq;       /* owner: the next gradient's receive */
    fsc_comm_req *gsend;      /* user: the last gradient's send */
    /* user, on a communicator whose sends wait for their receive (NCCL's): every gradient leaves from a copy in a
     * ring that grows while its sends are in flight, so that the next backward need not wait for the owner to
     * receive the last one (pipe_tied.c says why) */
    int copies;
    fsc_pipe_ring copy;       /* n floats a buffer, FSC_TAG_COMM */
} fsc_pipe_tied;

/* Collective over pipe_comm (every stage, in the same order of tensors): split the tensor's two streams and,
 * on the owner, make its buffers. */
fsc_status fsc_pipe_tied_create(fsc_engine *e, fsc_comm *pipe_comm, int stage, int owner, int user, size_t n,
                                fsc_pipe_tied *t);
/* Owner: send a copy of src (n floats) to the user, once the previous send is waited for. */
fsc_status fsc_pipe_tied_send_values(fsc_pipe_tied *t, fsc_device *dev, const float *src, double *waited);
/* User: post the values' receive into dst (the replica) unless one is posted; owner: no-op. */
fsc_status fsc_pipe_tied_post_values(fsc_pipe_tied *t, float *dst);
/* Wait for the values' send (owner) or receive (user) if one is in flight. */
fsc_status fsc_pipe_tied_values_done(fsc_pipe_tied *t, double *waited);
/* Owner: post the next gradient's receive unless one is posted; user: no-op. */
fsc_status fsc_pipe_tied_post_grad(fsc_pipe_tied *t);
/* Owner: wait for the posted gradient (posted now if none is) and copy it to dst. */
fsc_status fsc_pipe_tied_take_grad(fsc_pipe_tied *t, fsc_device *dev, float *dst, double *waited);
/* User: send src (n floats) to the owner: from src itself, which must then stay unchanged until
 * fsc_pipe_tied_grad_sent, once the last send is waited for; with copies from a copy (src free at once). */
fsc_status fsc_pipe_tied_send_grad(fsc_pipe_tied *t, fsc_device *dev, const float *src, double *waited);
/* User: wait for the gradients' sends in flight. */
fsc_status fsc_pipe_tied_grad_sent(fsc_pipe_tied *t, double *waited);
/* Wait for and drop every request in flight (a failed step left them; data and errors ignored). */
void fsc_pipe_tied_drop(fsc_pipe_tied *t);
void fsc_pipe_tied_free(fsc_pipe_tied *t, fsc_device *dev);

/* Auxiliary statistics (model.h's aux_stats, mixture of experts) of a pipeline, added in DDP's order
 * (pipe_stats.c). create: for this stage's layers (first..last, fsc_pipe_span) and M micro-batches; *out NULL when the model
 * has none. note: micro-batch k's statistics of record a (layers first..last, one chunk) after its first
 * forward. sum: collective over the
 * pipeline group and then the data group, at the step's end: out = (aux loss, assigned, dropped) of the data
 * group's micro-batches, summed as one rank of each data index would (the same bits on every rank). */
typedef struct fsc_pipe_aux fsc_pipe_aux;
fsc_status fsc_pipe_aux_create(const fsc_engine *e, int M, int first, int last, fsc_pipe_aux **out);
void fsc_pipe_aux_note(fsc_pipe_aux *x, const fsc_engine *e, int k, const fsc_model_acts *a, int first, int last);
fsc_status fsc_pipe_aux_sum(fsc_pipe_aux *x, fsc_engine *e, double out[3]);
/* The exact reduction: the statistics of each of the K micro-batches (units), as aux_stats on one rank, into
 * vals[K + k] (aux loss), vals[2K + k] (assigned), vals[3K + k] (dropped) on every stage. Collective over the
 * pipeline group. */
fsc_status fsc_pipe_aux_units(fsc_pipe_aux *x, fsc_engine *e, double *vals, int K);
void fsc_pipe_aux_free(fsc_pipe_aux *x);
/* The pipeline's statistics (pipe.c; NULL without them). */
fsc_pipe_aux *fsc_pipe_aux_of(const fsc_engine *e);

/* Stages of the options (pp 0 means 1), chunks per rank (virtual_stages 0 means 1; two in a V), and how the
 * stages sit on the ranks: a custom schedule's placement option, a built-in schedule's own placement. */
int fsc_pipe_stages(const fsc_parallel_opts *po);
int fsc_pipe_chunks(const fsc_parallel_opts *po);
fsc_pipe_placement fsc_pipe_placement_of(const fsc_parallel_opts *po);
/* A schedule's idle fraction of the step by its formula, with equal stages and equal F, B and W (free messages),
 * v chunks per rank (a loop or a V): (pp-1)/(v m + pp-1) without a split backward (GPipe, 1F1B: v = 1;
 * interleaved), (pp-1)/(3 v m + pp-1) with one (ZB-H1: v = 1; ZBV's fill: v = 2; a custom list with Ws over v
 * chunks); 0 for one stage. The pipeline's ideal_bubble and the planner's formula (plan_time.c). */
double fsc_pipe_formula_bubble(int pp, int v, int m, int split);
/* Whether this rank runs layer l (one of its chunks holds it); 1 without a pipeline. */
int fsc_pipe_runs_layer(const fsc_engine *e, int l);
/* Whether layer l is the first of its stage (with chunks: where that chunk's backward ends); without a pipeline,
 * whether it is layer 0. */
int fsc_pipe_starts_chunk(const fsc_engine *e, int l);
/* The layers the model runs now: e->lf..e->ll, or with chunks (interleaved, zbv) those of the chunk whose action
 * runs (fsdp prefetches within them: the layers after a chunk run on another rank). */
void fsc_pipe_running_layers(const fsc_engine *e, int *lo, int *hi);
/* Options of a pipeline against the world and the model; clear messages. */
fsc_status fsc_pipe_validate(const fsc_rank *r, int n_layers, const fsc_parallel_opts *po);
/* A balance: n entries (stages x chunks) >= 1 summing to the model's blocks. */
fsc_status fsc_pipe_check_balance(const int *balance, int n, int layers);
/* Before the strategy's setup: this stage's layers, schedule, links and pools in e->pipe (the groups are the
 * engine's). No-op without a pipeline. */
fsc_status fsc_pipe_create(fsc_engine *e);
/* After fsc_pipe_create: the layers of this rank's chunks, the first of the first and the last of the last, which
 * the engine keeps as e->lf..e->ll (fsc_pipe_runs_layer says which of them this rank runs). */
void fsc_pipe_span(const fsc_engine *e, int *lf, int *ll);
/* A step's actions on this stage are run by step.c's runner through the pipeline's executor (fsc_pipe_exec,
 * step.h): begin (the pools for micro-batches of c->mb, the receives posted ahead), F, B and W with their sends
 * and receives, end (nothing in flight), and, after the strategy's end_backward, sums: the loss summed over the
 * last stage's data group, which checks global_batch against its local batches (mb x chunks each); the verdict
 * and the sum reach every stage, where each rank also compares its own global_batch (*batch is that rank's
 * verdict, fsc_engine_check_batch's message), and the MoE statistics unless the exact reduction sums them.
 * An evaluation (eval.c: an F-only list, step.h's fsc_step_prepare_eval) runs through the same executor: the M
 * micro-batches of mb samples through the stages in order, each record returned as soon as its stage forward is
 * done, tied tensors sent to their users' stage as in a step; its sums: the loss over the last stage's data
 * group in rank order and that group's batch check (*batch FSC_ERR_INVALID when it failed), the same on every
 * rank of the pipeline group; no statistics of a step. */
/* The exact reduction (exact.c, eval.c): the last stage writes each micro-batch's loss to vals[k] in an F (NULL:
 * nowhere); three sums of the last stage to every stage of the pipeline group. */
void fsc_pipe_set_unit_losses(fsc_engine *e, double *vals);
fsc_status fsc_pipe_from_last(fsc_engine *e, double sums[3]);
/* fsc_engine_predict (eval.c): while out is set (NULL: not), an evaluation's last stage writes micro-batch k's
 * outputs at out + k x mb x *per_sample (fsc_engine_take_outputs); then fsc_pipe_outputs_from_last broadcasts
 * *per_sample and the samples x *per_sample floats of out from the last stage to every stage of the pipeline
 * group (collective over it). */
void fsc_pipe_set_outputs(fsc_engine *e, float *out, size_t *per_sample);
fsc_status fsc_pipe_outputs_from_last(fsc_engine *e, float *out, int samples, size_t *per_sample);
/* The pipeline's part of the engine's forward hooks (engine.c runs it before the strategy's): pre, a user stage
 * (po.prefetch) waits for a tied tensor's values before the first layer that reads them; post, an owner stage sends
 * its tied tensors to their users' stage after the owner layer's first forward of the step (not in a recompute). */
fsc_status fsc_pipe_pre_forward(fsc_engine *e, int layer);
fsc_status fsc_pipe_post_forward(fsc_engine *e, int layer);
void fsc_pipe_free(fsc_engine *e);

#endif
