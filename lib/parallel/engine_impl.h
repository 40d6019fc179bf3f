/* Private: the engine's state and the table each parallel strategy (ddp.c, fsdp.c, zero.c) fills.
 * engine.c owns the step: micro-batches, loss, unscaling, the non-finite vote, clipping and the optimizer.
 * A strategy owns where parameters and gradients live and every gradient reduction. */
#ifndef FSC_ENGINE_IMPL_H
#define FSC_ENGINE_IMPL_H
#include "fsc/fsc.h"
#include "fsc/device_impl.h"

typedef struct fsc_engine fsc_engine;

/* Elements [first, first+n) of tensor `tensor` that this rank holds: they live in optimizer segment
 * `seg` (fsc_optim_*: parameters and state) from element seg_off on. `write` marks the ranks that write
 * them into a checkpoint: exactly one rank of the world per element. */
typedef struct {
    int tensor;
    size_t first, n;
    int seg;
    size_t seg_off;
    int write;
} fsc_holding;

typedef struct {
    const char *name;
    /* allocate parameters (initialised from the keyed RNG), gradients, and register optimizer segments;
     * fill e->gsegs/e->glens/e->ngsegs (this rank's reduced gradient) and e->norm_comm */
    fsc_status (*setup)(fsc_engine *e);
    /* layer hooks (see gpt.h); may be NULL */
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
} fsc_strategy;

struct fsc_engine {
    fsc_rank *r;
    fsc_device *dev;
    fsc_comm *comm;           /* the data-parallel group: the world, or this stage's ranks (pipe.c) */
    fsc_gpt *m;
    fsc_gpt_config cfg;
    /* The layers this rank runs (a pipeline stage; 0 .. L+1 without pipelining). The rank holds the
     * tensors those layers own (fsc_engine_holds); a stage with the head but not the embedding keeps a
     * replica of the tied wte in wte_copy, kept equal to the first stage's by the pipeline. */
    int lf, ll;
    float *wte_copy;
    fsc_parallel_opts po;
    fsc_optim_config oc;
    fsc_optim *opt;
    uint64_t seed;
    const fsc_strategy *st;
    void *sd;                 /* strategy data */

    fsc_gpt_acts *acts;       /* micro-batch record, (re)made for the micro-batch size */
    int acts_B;
    int micro;                /* current micro-batch in the step */
    int sync;                 /* this micro-batch's backward reduces gradients */

    int use_scaler;
    fsc_loss_scaler scaler;

    /* this rank's reduced gradients, for unscaling, the non-finite vote and clipping */
    float **gsegs;
    size_t *glens;
    int ngsegs;
    fsc_comm *norm_comm;      /* group over which gsegs are split (NULL: each rank holds all) */

    struct fsc_pipe *pipe;    /* pipeline state (pipe.c), NULL without a pipeline */

    fsc_comm *groups[8];      /* communicators the strategy made (counted in fsc_engine_comm_stats) */
    int ngroups;
};

extern const fsc_strategy fsc_strategy_ddp;   /* also used for FSC_PAR_NONE */
extern const fsc_strategy fsc_strategy_fsdp;
extern const fsc_strategy fsc_strategy_zero;  /* zero1 and zero2 */

/* Helpers shared by strategies. */
/* Offsets of tensor i in tensor-order flat layout (prefix sums of numel). */
size_t fsc_engine_tensor_offset(const fsc_engine *e, int i);
/* Whether this rank holds (owns and steps) tensor i; held tensors are a contiguous index range
 * [*t0, *t1) of fsc_engine_held_range. */
int fsc_engine_holds(const fsc_engine *e, int i);
void fsc_engine_held_range(const fsc_engine *e, int *t0, int *t1);
/* Fill a device buffer with initial values of elements [first, first+n) of the tensor-order flat
 * parameter vector (crossing tensor boundaries as needed), through a bounded host buffer. */
fsc_status fsc_engine_init_range(fsc_engine *e, float *dst, size_t first, size_t n);
/* Cast-and-back (f32 -> dt -> f32) n elements (dt f32: copy). tmp_tag for the temporary. */
fsc_status fsc_engine_round_to(fsc_engine *e, float *dst, const float *src, size_t n, fsc_dtype dt);
/* Sum-reduce n f32 gradient elements with the configured reduction dtype.
 *   all-reduce (rs == 0): out[0..n) = sum over comm of in[0..n)   (out may equal in)
 *   reduce-scatter (rs == 1): out[0..n/size) = block `rank` of the sum
 * accumulate: out += result instead of out = result. Every gradient reduction in fsc goes through here. */
fsc_status fsc_engine_reduce(fsc_engine *e, fsc_comm *c, int rs, const float *in, float *out, size_t n,
                             int accumulate);
/* Count a group's traffic in fsc_engine_comm_stats (the strategy still frees it). */
void fsc_engine_add_group(fsc_engine *e, fsc_comm *c);
/* Register a segment's gradient for unscaling/clipping. */
fsc_status fsc_engine_add_gseg(fsc_engine *e, float *g, size_t n);

#endif
