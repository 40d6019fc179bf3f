/* Private: the engine's state and the table each parallel strategy (ddp.c, fsdp.c, zero.c) fills.
 * engine.c owns the step: this rank's actions (micro-batches: step.h's runner), loss, unscaling, the non-finite
 * vote, clipping and the optimizer.
 * A strategy owns where parameters and gradients live and every gradient reduction. */
#ifndef FSC_ENGINE_IMPL_H
#define FSC_ENGINE_IMPL_H
#include "fsc/status.h"
#include "fsc/tensor.h"
#include "fsc/device.h"
#include "fsc/comm.h"
#include "fsc/cluster.h"
#include "fsc/model.h"
#include "fsc/optim.h"
#include "fsc/parallel.h"
#include "fsc/safetensors.h"
#include "core/kernels.h"
#include "layout_impl.h" /* fsc_groups */
#include "engine_ckpt.h" /* fsc_holding, FSC_ENGINE_RUN_ID and what checkpoints see of the engine */


typedef struct {
    const char *name;
    /* allocate parameters (initialised from the keyed RNG), gradients, and register optimizer segments;
     * fill e->gsegs/e->glens/e->ngsegs (this rank's reduced gradient) */
    fsc_status (*setup)(fsc_engine *e);
    /* after setup: the part of the data group over which this rank's reduced gradient (or its clipping pieces,
     * e->nsegs) is split, NULL when each rank holds it all; the engine widens it into e->norm_comm once
     * (fsc_layout_norm_group) */
    fsc_comm *(*norm_group)(const fsc_engine *e);
    /* after setup, may be NULL: the pieces of this rank's reduced gradients the clipping norm counts over that
     * group when they are not e->gsegs themselves (each element counted once). With g NULL *n is their number
     * (-1: e->gsegs themselves, no pieces); otherwise g and lens receive the *n pieces. The engine keeps them
     * (e->nsegs, engine.c's make_norm_pieces); the strategy writes no field of the clipping. */
    fsc_status (*norm_pieces)(const fsc_engine *e, float **g, size_t *lens, int *n);
    /* layer hooks (model.h); may be NULL */
    fsc_status (*pre_forward)(fsc_engine *e, int layer);
    fsc_status (*post_forward)(fsc_engine *e, int layer);
    fsc_status (*pre_backward)(fsc_engine *e, int layer);
    fsc_status (*post_backward)(fsc_engine *e, int layer);
    /* before the first micro-batch of a step (zero gradients) and after its last backward (flush) */
    fsc_status (*begin_step)(fsc_engine *e);
    fsc_status (*end_backward)(fsc_engine *e);
    /* after the optimizer stepped the local segments (zero1/2: share the updated parameters) */
    fsc_status (*after_step)(fsc_engine *e);
    /* collective: full fp32 parameters of tensors [0, n) in tensor order; host may be NULL on ranks
     * that do not want them (only `want` ranks receive) */
    fsc_status (*full_tensors)(fsc_engine *e, int want, float *host);
    /* collective: stream full tensors to writer w (non-NULL on rank 0 only) */
    fsc_status (*write_full)(fsc_engine *e, fsc_st_writer *w);
    /* every rank loads what it holds from a validated full-weights file */
    fsc_status (*load_full)(fsc_engine *e, fsc_st_file *f);
    /* what this rank holds, for checkpoints (array from malloc); after_load refreshes derived copies
     * (gathered or low-precision parameters) once segments were overwritten */
    fsc_status (*holdings)(fsc_engine *e, fsc_holding **out, int *n);
    fsc_status (*after_load)(fsc_engine *e);
    void (*destroy)(fsc_engine *e);
    /* around a forward-only pass (eval.c; may be NULL): refresh derived copies of the parameters (DDP's
     * low-precision copy), then free what the forward gathered (FSDP's units); never touch gradients */
    fsc_status (*begin_eval)(fsc_engine *e);
    fsc_status (*end_eval)(fsc_engine *e);
} fsc_strategy;

#define FSC_ENGINE_MAX_GROUPS 16

/* The segments a strategy reduces: the classes of this rank's held tensors, decided once by the engine from the
 * layout (engine.c's make_data_groups, with the groups). Class 0: the dense tensors, their gradients summed over
 * the data group; class 1, with expert parallelism only: this rank's expert tensors, summed over the expert-data
 * group (the data ranks holding the same experts). A strategy cuts its runs, buckets or units per class
 * (fsc_engine_reduce_class) and reduces each over its class's group, instead of testing expert parallelism. */
typedef struct {
    fsc_comm *sum;            /* the group summing the class's gradients (and sync_from_rank0's broadcast) */
    fsc_comm *spread;         /* the group whose ranks hold different tensors of the class (experts: the expert
                               * group), NULL when every data rank holds them all (dense) */
    int expert;               /* the expert tensors (split over the expert group) */
} fsc_reduce_class;

struct fsc_engine {
    fsc_rank *r;
    fsc_device *dev;
    fsc_comm *comm;           /* the data-parallel group: the world, or this stage's ranks (pipe.c), or
                               * this (stage, tensor rank)'s ranks */
    fsc_layout lay;           /* this rank's place in world = dp x tp x pp */
    fsc_model *m;             /* the model (model.h) the strategies shard and the engine runs (with tensor
                               * parallelism: built on the tensor group, its tensors this rank's slices) */
    int own_model;            /* the engine frees m (fsc_model_free) */
    long long calls;          /* fsc_engine_step_model calls: equal on every rank of a data group unless a step
                               * failed on some ranks only (checked with the loss's all-gather) */
    size_t *toff;             /* (n_tensors + 1) prefix sums of m's numel: fsc_engine_tensor_offset */
    fsc_param_info *full;     /* (n_tensors) each tensor as files name and shape it: fsc_engine_full_info */
    /* Every communicator made for this engine (the group factory, layout_impl.h), made by engine.c and freed
     * by it once; the fields below are views of them: */
    fsc_groups grp;
    fsc_comm *tensor_comm;    /* tensor parallelism: the tensor group (NULL with tp 1) */
    fsc_comm *pipe_comm;      /* the pipeline group (NULL with pp 1) */
    /* the pieces of the reduced gradients the clipping norm counts over norm_comm when they are not gsegs
     * (NULL: gsegs): tensor parallelism's (every split tensor, replicated tensors on tensor rank 0 only), or the
     * strategy's (norm_pieces); written once, by engine.c's make_norm_pieces, and freed by the engine */
    float **nsegs;
    size_t *nlens;
    int nnsegs;
    /* The layers this rank runs (a pipeline stage; 0 .. n_layers-1 without pipelining). The rank holds the
     * tensors those layers own (fsc_engine_holds); a stage that uses a tied tensor but does not own it keeps a
     * replica in tied_copy[i] (m->param[i] points there), kept equal to the owner's by the pipeline. */
    int lf, ll;
    float **tied_copy;        /* (n_tensors), NULL entries for tensors this rank owns or does not use */
    fsc_parallel_opts po;
    fsc_optim_config oc;      /* set when the engine is made; afterwards only its lr changes, by fsc_engine_set_lr */
    fsc_optim *opt;
    uint64_t seed;            /* of the initialization; a load sets the checkpoint run's (fsc_engine_continue_run) */
    char ckpt_run[FSC_ENGINE_RUN_ID]; /* the checkpoint run it continues: "" until it loads or saves one; written
                                       * only by fsc_engine_continue_run (engine_ckpt.c) */
    const fsc_strategy *st;
    void *sd;                 /* strategy data */

    fsc_model_acts *acts;     /* micro-batch record, (re)made for the micro-batch size */
    struct fsc_step_list *accum; /* without a pipeline: this rank's actions of a step, the accumulation list (step.c) */
    int acts_B;
    int micro;                /* current micro-batch in the step */
    int sync;                 /* this micro-batch's backward reduces gradients */

    int use_scaler;
    fsc_loss_scaler scaler;   /* its floor is po.min_loss_scale, set again before every update: a
                               * checkpoint's scaler replaces this one on load */
    int skips_in_row;         /* steps skipped in a row (f16 overflows, or nonfinite skip) */

    /* this rank's reduced gradients, for unscaling, the non-finite vote and clipping */
    float **gsegs;
    size_t *glens;
    int ngsegs;
    fsc_comm *norm_comm;      /* group over which gsegs are split (NULL: each rank holds all); written once, by
                               * engine.c's make_norm_group */
    fsc_device *gdev;         /* the device gsegs live on: dev, or host with offload all */
    /* offload (offload.c, docs/offload.md): host memory as a device of its own (its ledger counts host bytes),
     * NULL without offload; the optimizer's staging with offload optim */
    fsc_device *host;
    struct fsc_offload *off;

    struct fsc_pipe *pipe;    /* pipeline state (pipe.c), NULL without a pipeline */
    /* expert parallelism (po.ep > 1, MoE models): the expert group (ep consecutive data ranks, experts split
     * over them) and the expert-data group (the data ranks holding the same experts); NULL otherwise (views of
     * grp.expert and grp.expert_data) */
    fsc_comm *ep_comm, *ep_data;
    fsc_reduce_class rclass[2]; /* the reduction classes (above): rclass[0] dense, rclass[1] experts */
    int nrclass;                /* 1, or 2 with expert parallelism */

    fsc_comm *groups[FSC_ENGINE_MAX_GROUPS]; /* communicators counted in fsc_engine_comm_stats besides comm */
    int group_kind[FSC_ENGINE_MAX_GROUPS];   /* fsc_group_kind of each */
    int ngroups;
    fsc_trace *trace;         /* trace.h (fsc_engine_set_trace): layers, steps, optimizer, checkpoints; NULL: none */
    struct fsc_exact *exact;  /* the exact reduction (exact.c, po.reduce_exact), NULL in ordered mode */
};

/* After the strategy's setup (decay.c): no weight decay on the held tensors fsc_param_decays excludes, unless
 * oc.decay_all. */
fsc_status fsc_engine_apply_decay(fsc_engine *e);

extern const fsc_strategy fsc_strategy_ddp;   /* also used for FSC_PAR_NONE */
extern const fsc_strategy fsc_strategy_fsdp;
extern const fsc_strategy fsc_strategy_zero;  /* zero1 and zero2 */

/* Helpers shared by strategies. */
/* Tensor i's reduction class (an index into e->rclass): 1 for an expert tensor under expert parallelism, else 0. */
int fsc_engine_reduce_class(const fsc_engine *e, int i);
/* The group a reduction class is spread over (experts: the expert group), NULL when no class is. */
fsc_comm *fsc_engine_spread_group(const fsc_engine *e);
/* Offset of tensor i in the tensor-order flat layout (prefix sums of numel, i <= n_tensors; O(1)). */
size_t fsc_engine_tensor_offset(const fsc_engine *e, int i);
/* Whether this rank holds (owns and steps) tensor i; held tensors are a contiguous index range
 * [*t0, *t1) of fsc_engine_held_range. */
int fsc_engine_holds(const fsc_engine *e, int i);
void fsc_engine_held_range(const fsc_engine *e, int *t0, int *t1);
/* po.prefetch_limit, its 0 meaning 2: FSDP's gathered units and reductions in flight, ZeRO-2's reductions, a
 * pipeline's send buffers of checkpointed outputs (where sends wait for their receive, its first size: pipe_link.c). */
static inline int fsc_engine_prefetch_limit(const fsc_engine *e) {
    return e->po.prefetch_limit > 0 ? e->po.prefetch_limit : 2;
}
/* Fill a device buffer with initial values of elements [first, first+n) of the tensor-order flat
 * parameter vector (crossing tensor boundaries as needed), through a bounded host buffer. */
fsc_status fsc_engine_init_range(fsc_engine *e, float *dst, size_t first, size_t n);
/* Write tensor i (e->m->info[i].numel floats at device src) into w, through a host buffer. */
/* fsc_engine_predict (eval.c): the outputs of record a's last forward (mb samples, the model's last layer), micro-batch
 * k of a batch: *per_sample floats per sample written to host out + k x mb x *per_sample. Logits split over the
 * tensor group (model.h's logits_part) are gathered first (collective over it): every tensor rank gets them all. */
fsc_status fsc_engine_take_outputs(fsc_engine *e, const fsc_model_acts *a, int mb, int k, float *out,
                                   size_t *per_sample);
/* Elements of tensor p a weights file holds: numel, or its file_rows rows (model.h: a padded vocabulary). */
size_t fsc_engine_file_numel(const fsc_param_info *p);
/* Elements [first, first + n) of entry en as float32 (fsc_st_read_f32), those past the entry's end 0 (the padding
 * rows of a tensor whose file holds file_rows rows). */
fsc_status fsc_engine_read_f32(fsc_st_file *f, const fsc_st_entry *en, float *dst, size_t first, size_t n);
fsc_status fsc_engine_write_tensor(fsc_engine *e, fsc_st_writer *w, int i, const float *src);
/* Read elements [first, first+n) of tensor i from a weights file into device dst, through a host buffer. */
fsc_status fsc_engine_read_tensor(fsc_engine *e, fsc_st_file *f, int i, size_t first, size_t n, float *dst);
/* Cast-and-back (f32 -> dt -> f32) n elements (dt f32: copy). tmp_tag for the temporary. */
fsc_status fsc_engine_round_to(fsc_engine *e, float *dst, const float *src, size_t n, fsc_dtype dt);
/* Sum-reduce n f32 gradient elements with the configured reduction dtype.
 *   all-reduce (rs == 0): out[0..n) = sum over comm of in[0..n)   (out may equal in)
 *   reduce-scatter (rs == 1): out[0..n/size) = block `rank` of the sum
 * accumulate: out += result instead of out = result. Every gradient reduction in fsc goes through here. */
fsc_status fsc_engine_reduce(fsc_engine *e, fsc_comm *c, int rs, const float *in, float *out, size_t n,
                             int accumulate);
/* fsc_engine_reduce's last part (and the overlapped reductions', overlap.c): a reduced result recv (nout
 * elements of dt, device) into out as f32, added to out when accumulate. */
fsc_status fsc_engine_reduce_result(fsc_engine *e, const void *recv, fsc_dtype dt, float *out, size_t nout,
                                    int accumulate);
/* Count a group's traffic in fsc_engine_comm_stats (the caller still frees it): a data-parallel group
 * (fsc_engine_add_group) or one of another kind (fsc_group_kind). A communicator counted already is not
 * added twice. */
void fsc_engine_add_group(fsc_engine *e, fsc_comm *c);
void fsc_engine_add_group_kind(fsc_engine *e, fsc_comm *c, fsc_group_kind kind);
/* The model's layer hooks routed to the strategy's (ctx = e; a NULL strategy hook does nothing), a layer's
 * forward with a pipeline's tied hand-offs first (pipe.h's fsc_pipe_pre_forward, fsc_pipe_post_forward). */
fsc_model_hooks fsc_engine_hooks(fsc_engine *e);
/* The experts this rank holds with expert parallelism: [first, first + count) (model.h's contract: rank r of
 * the expert group holds [r E/G, (r+1) E/G)); every expert without it, 0, 0 without experts. */
void fsc_engine_local_experts(const fsc_engine *e, int *first, int *count);
/* fsc_engine_full_info, fsc_engine_holdings: engine_ckpt.h */
/* The micro-batch record for micro-batches of B sequences (made again when B changes). */
fsc_status fsc_engine_ensure_acts(fsc_engine *e, int B);
/* Records made for training carry the exact reduction's per-source gradient terms (expert parallelism): every
 * record the engine or its pipeline makes for a step passes its options through this. */
void fsc_engine_acts_terms(fsc_engine *e, fsc_model_acts_opts *o);
/* Register a segment's gradient for unscaling/clipping. */
fsc_status fsc_engine_add_gseg(fsc_engine *e, float *g, size_t n);
/* The batch check of a step: pairs holds (local batch, global batch) of each of the n ranks of a data group,
 * gathered with the loss (the same array on every rank, so every rank reaches the same verdict).
 * FSC_ERR_INVALID unless every rank passed the same global batch and it is the sum of the local batches. */
fsc_status fsc_engine_check_batch(const double *pairs, int n);
/* The data group's step counts (e->calls; n ranks' values, stride doubles apart) agree: else FSC_ERR_STATE, the
 * message naming the first rank that differs (a step failed on some ranks only). */
fsc_status fsc_engine_check_calls(const double *calls, size_t stride, int n);
/* Collective over c: n bytes of mine from every rank of c into host all (size(c) x n bytes, block r from rank r),
 * one all-gather through a device buffer (FSC_TAG_COMM). A rank that fails before the all-gather (its device buffer)
 * does not reach it: where that may happen on some ranks only, the agreed form. */
fsc_status fsc_engine_gather_host(fsc_engine *e, fsc_comm *c, const void *mine, size_t n, void *all);
/* The same after an agreement over c on this rank's buffers (all NULL: this rank is out of host memory): every
 * rank reaches the all-gather, or none does, each returning the lowest failing rank's error. */
fsc_status fsc_engine_gather_host_agreed(fsc_engine *e, fsc_comm *c, const void *mine, size_t n, void *all);
/* Over the data group (e->comm): sums of m (<= 4) doubles per rank, each in rank order, identical on every rank,
 * and the batch check of the ranks' local and global batches into *batch (fsc_engine_check_batch, its message
 * set when it fails): one all-gather of m + 2 doubles per rank (none on a group of one). */
fsc_status fsc_engine_sum_over_ranks(fsc_engine *e, const double *local, int m, int local_batch, int global_batch,
                                     double *total, fsc_status *batch);
/* Tensor parallelism: whether the ranks of this rank's tensor group passed the same samples (fingerprints of the
 * inputs where the rank runs the first layer, of the targets, unless NULL, where it runs the last; one all-gather of
 * 16 bytes a rank over the tensor group, none without one): *verdict FSC_OK, or FSC_ERR_INVALID with the message in
 * why (cap bytes), the same on every rank of the group. The return value: the collective's failure. */
fsc_status fsc_engine_same_samples(fsc_engine *e, const void *inputs, const void *targets, int local_batch,
                                   fsc_status *verdict, char *why, size_t cap);

/* Collective over r's world, before creation's first other collective (engine_settings.c): every rank passes the
 * same model (NULL: not checked here), options and optimizer (NULL: neither, nor the seed); otherwise
 * FSC_ERR_INVALID on every rank naming the first setting that differs and two ranks' values (settings.h). */
fsc_status fsc_engine_agree_settings(fsc_rank *r, const fsc_model *m, const fsc_parallel_opts *po,
                                     const fsc_optim_config *oc, uint64_t seed);

/* Offload (offload.c): refuse what offload does not run with; make the host device (before the optimizer,
 * which lives there); after the strategy's setup, stage the optimizer's segments on the host (offload optim);
 * the optimizer step (with offload optim: gradients and parameters to the host, step, parameters back);
 * free. */
fsc_status fsc_offload_validate(const fsc_layout *l, const fsc_parallel_opts *po);
fsc_status fsc_offload_create(fsc_engine *e);
fsc_status fsc_offload_after_setup(fsc_engine *e);
fsc_status fsc_offload_step(fsc_engine *e);
/* fsc_offload_seg_dev: engine_ckpt.h */
void fsc_offload_free(fsc_engine *e);

/* Expert parallelism (ep.c): refuse what MoE models do not run with; after the engine made the expert groups,
 * before the strategy, count them and give the model its expert group. */
fsc_status fsc_ep_validate(const fsc_layout *l, int n_experts, const fsc_parallel_opts *po);
fsc_status fsc_ep_create(fsc_engine *e);
/* Collective over the data group (none without expert groups): every expert group's ranks passed the same local
 * batch; otherwise every rank of the data group fails, naming two ranks and their batches (what: "step", ...). */
fsc_status fsc_ep_check_batch(fsc_engine *e, int local_batch, const char *what);
/* Collective over the world (stream.c): the full fp32 parameters (the optimizer's masters, as files name the
 * tensors: full tensors under tensor parallelism), streamed tensor by tensor from the ranks that hold them to every
 * rank passing want 1, whose sink sees elements [first, first + n) of tensor t, in tensor and element order, one
 * chunk of at most FSC_PIECE_CHUNK floats at a time. Memory: a receiver one chunk of host and of device memory
 * (FSC_TAG_COMM) and the piece records of a batch of tensors (1 MiB of them, or one larger tensor), a sender its own
 * records (an offloaded one a device chunk); every rank returns the same verdict (a failed sink's included). Needs
 * the strategy's holdings. */
typedef fsc_status (*fsc_param_sink)(void *ctx, int t, uint64_t first, const float *host, size_t n);
/* pre: this rank's failure before the stream (it takes part in the first agreement and returns it, so that no rank
 * waits in a collective the others skipped). */
fsc_status fsc_engine_stream_params(fsc_engine *e, fsc_status pre, int want, fsc_param_sink sink, void *ctx);

/* Tensor parallelism inside the engine (tensor.c), generic over the model's split fields (model.h). */
/* e->full: each tensor with its full shape (every engine; the model's own info where nothing is split). */
fsc_status fsc_tensor_make_full_info(fsc_engine *e);
/* The model's tensors are slices for this rank's place in the tensor group l (tp_size and tp_rank); with tp > 1
 * at least one tensor is split. */
fsc_status fsc_tensor_check_model(const fsc_model *m, const fsc_layout *l);
/* After the strategy's setup (tp > 1): the clipping norm's gradient pieces (arrays from malloc, *n of them), for
 * engine.c's make_norm_pieces. */
fsc_status fsc_tensor_norm_pieces(fsc_engine *e, float ***segs, size_t **lens, int *n);
/* Every rank reads its slices of what it holds from a validated full-weights file (no collective). */
fsc_status fsc_tensor_load(fsc_engine *e, fsc_st_file *f);
/* A strategy's holdings of this rank's slices (in, n) as holdings of the full tensors (element ranges of the
 * full tensor, one per contiguous run; replicated tensors written by tensor rank 0 only), *out from malloc. */
fsc_status fsc_tensor_holdings(fsc_engine *e, const fsc_holding *in, int n, fsc_holding **out, int *nout);
/* Free e->full. */
void fsc_tensor_free(fsc_engine *e);

#endif
