/* The training engine: one model, one optimizer and one parallel strategy on one rank.
 * Every rank of a group creates an engine with the same arguments and calls fsc_engine_step_model with its own
 * part of the global batch; the engine runs forward/backward over the micro-batches, reduces gradients
 * (one function of the parallel layer does every reduction), clips by the global norm, applies loss
 * scaling and steps the optimizer. Strategies: none (single rank), ddp, fsdp (full_shard, shard_grad_op,
 * no_shard, hybrid_shard), zero1, zero2.
 *
 * Order of operations, the same on every path (this is what makes them bit-identical):
 *   per micro-batch: forward; backward with dloss = loss_scale / (global_batch * loss_terms) into local
 *   gradients; reduce: sum over the data-parallel group in rank order (no division: the 1/(global_batch *
 *   loss_terms) factor is already in the loss gradient); unscale (x 1/loss_scale) when scaling; non-finite
 *   check (all ranks agree); clip by the exact global norm; optimizer step.
 * The built-in GPT's engine (fsc_engine_create, with tensor parallelism) is declared in gpt_engine.h. */
#ifndef FSC_PARALLEL_H
#define FSC_PARALLEL_H
#include "export.h"
#include <stddef.h>
#include <stdint.h>
#include "status.h"
#include "dtype.h"
#include "cluster.h"
#include "model.h"
#include "optim.h"
#include "comm.h"

FSC_BEGIN_DECLS

typedef enum { FSC_PAR_NONE = 0, FSC_PAR_DDP, FSC_PAR_FSDP, FSC_PAR_ZERO1, FSC_PAR_ZERO2 } fsc_parallel_kind;
typedef enum { FSC_SHARD_FULL = 0, FSC_SHARD_GRAD_OP, FSC_SHARD_NONE, FSC_SHARD_HYBRID } fsc_shard_strategy;
typedef enum { FSC_WRAP_BLOCK = 0, FSC_WRAP_MODEL, FSC_WRAP_MIN_PARAMS } fsc_wrap_policy;
/* Pipeline schedules (fsc/pipe_schedule.h): GPipe (all forwards, then all backwards), 1F1B (PipeDream-flush),
 * interleaved 1F1B (Megatron's: virtual_stages chunks of layers per rank), a caller's own action lists and ZB-H1
 * (zero bubble: 1F1B's order with each backward split into B and a later W) and ZBV (zero bubble with two chunks
 * per rank placed in a V). */
typedef enum {
    FSC_SCHED_GPIPE = 0, FSC_SCHED_1F1B, FSC_SCHED_INTERLEAVED, FSC_SCHED_CUSTOM, FSC_SCHED_ZB_H1, FSC_SCHED_ZBV
} fsc_pipe_schedule;
struct fsc_pipe_action; /* fsc/pipe_schedule.h */
/* How the S = pp x v stages sit on the pipeline ranks (fsc/pipe_schedule.h): a loop (chunk c of rank r is stage
 * c pp + r; every built-in schedule but zbv) or a V (two chunks: rank r holds stages r and 2 pp - 1 - r; zbv). */
typedef enum { FSC_PIPE_LOOP = 0, FSC_PIPE_V } fsc_pipe_placement;
/* Which micro-batches keep only their stage input and recompute the stage in backward (FairScale's
 * checkpoint option; except_last is its default). */
typedef enum { FSC_PIPE_CKPT_EXCEPT_LAST = 0, FSC_PIPE_CKPT_ALWAYS, FSC_PIPE_CKPT_NEVER } fsc_pipe_checkpoint;
/* What a step does when its loss or gradients hold inf or NaN on any rank (f32 and bf16; f16 loss scaling
 * always skips such a step and backs off). Either way the step applies no update, on every rank. */
typedef enum { FSC_NONFINITE_STOP = 0, FSC_NONFINITE_SKIP } fsc_nonfinite_policy;
/* Offload to host memory (docs/offload.md): none; optim (ZeRO-Offload: the optimizer state and the optimizer
 * step on the host, reduced gradients copied there and updated parameters copied back); all (FSDP's
 * cpu_offload: also the fp32 master parameters and the reduced gradients live on the host, each unit's shard
 * copied to the device before its all-gather and its reduced gradient copied back after its reduce-scatter).
 * The same bits as without. */
typedef enum { FSC_OFFLOAD_NONE = 0, FSC_OFFLOAD_OPTIM, FSC_OFFLOAD_ALL } fsc_offload_mode;

typedef struct {
    fsc_parallel_kind kind;
    /* fsdp */
    fsc_shard_strategy shard;
    fsc_wrap_policy wrap;
    size_t wrap_min_params;       /* FSC_WRAP_MIN_PARAMS: a block with at least this many parameters is a unit */
    int reshard_after_forward;    /* -1: default (1 for full_shard/hybrid, 0 otherwise) */
    int hybrid_group;             /* hybrid_shard: ranks per sharding group (0: half the data group) */
    /* precision: compute/communication dtype of parameters and of gradient reduction (f32, bf16, f16) */
    fsc_dtype param_dtype;
    fsc_dtype reduce_dtype;
    float init_loss_scale;        /* f16: initial dynamic loss scale (default 65536) */
    float min_loss_scale;         /* f16: the scale never backs off below this (0: default 1); not above the
                                   * initial scale (init_loss_scale or its default) */
    /* non-finite steps (docs/fsdp.md): every step, every rank votes on its loss and reduced gradients */
    fsc_nonfinite_policy nonfinite; /* f32/bf16: stop (default: the step fails with FSC_ERR_NUMERIC) or skip */
    int max_skipped_steps;        /* a step fails after this many skipped in a row, f16 overflows included
                                   * (0: default 100) */
    /* common */
    int accum;                    /* micro-batches per step (>= 1) */
    int no_sync;                  /* accumulate locally and reduce once per step (1) or every micro-batch (0) */
    size_t bucket_bytes;          /* ddp/zero gradient buckets (default 25 MiB) */
    float clip;                   /* max global grad norm; 0 = no clipping */
    int sync_from_rank0;          /* ddp: broadcast rank 0's initial weights instead of keyed init */
    int checkpoint;               /* recompute blocks in backward */
    /* overlap of communication with computation (docs/overlap.md); the same bits either way */
    int prefetch;                 /* 1: fsdp starts the next unit's all-gather before the current unit computes
                                   * (forward and backward) and reduce-scatters a unit while the previous one's
                                   * backward runs; ddp and zero start each bucket's reduction as soon as its
                                   * gradients are ready; pipelines send stage boundaries asynchronously and post
                                   * their receives a micro-batch ahead; offload copies asynchronously. 0 (a
                                   * zeroed struct): every collective and copy synchronous */
    int prefetch_limit;           /* fsdp: gathered units in flight at most, the one computing included (0: 2),
                                   * and reductions limit - 1; zero2: bucket reductions in flight limit - 1
                                   * (at least 1);
                                   * pipelines: send buffers of checkpointed outputs at most (0: 2; on a
                                   * communicator whose sends wait for their receive, NCCL's, as many as are
                                   * in flight: docs/pipeline.md) */
    /* offload to host memory (docs/offload.md): optim with fsdp (every strategy), zero1 and zero2; all with
     * fsdp only (zero keeps parameters replicated on every device). Not with ddp or none; with tp (and sequence
     * parallelism), with ep and inside the stages of every pipeline schedule too. */
    fsc_offload_mode offload;     /* none (default), optim or all */
    /* pipeline (docs/pipeline.md): pp stages, world = dp x tp x pp laid out by fsc_layout (without tensor
     * parallelism and another order: rank = stage * dp + dp_index, data-parallel ranks adjacent). The
     * strategy above runs inside each stage's data group; accum is the number of micro-batches (chunks).
     * Gradients are reduced once after the last micro-batch: pp > 1 needs no_sync. */
    int pp;                       /* pipeline stages (0 or 1: no pipeline) */
    fsc_pipe_schedule schedule;   /* gpipe (default), 1f1b, interleaved, zb-h1, zbv or custom */
    const struct fsc_pipe_action *const *actions; /* custom: actions[r] the nactions[r] actions of pipeline rank r
                                   * (stage r), for every r; validated as fsc_pipe_schedule_validate_placed does under
                                   * `placement` (below) and copied at engine creation. Every rank passes the same
                                   * lists (checked with the settings: "ranks disagree on parallel.actions.1") */
    const int *nactions;
    int virtual_stages;           /* interleaved, custom: chunks per rank, v (0 or 1: one); rank r runs stages
                                   * r, r + pp, ..., r + (v-1) pp of pp x v (a loop; zbv and placement V: r and
                                   * 2 pp - 1 - r); balance then has pp x v entries
                                   * and (interleaved) accum must be a multiple of pp. With v > 1 (and under
                                   * zb-h1 and zbv) DDP, FSDP, ZeRO-1/2 or none inside the stages, offload and
                                   * reduce_exact too (docs/pipeline.md) */
    fsc_pipe_checkpoint pipe_checkpoint; /* except_last (default), always, never */
    const int *balance;           /* pp x chunks entries (chunks: virtual_stages; zbv and a V: 2), blocks per stage
                                     (copied); NULL: as even as possible */
    /* tensor parallelism (docs/tensor_parallel.md): tp ranks split the layers of a model built on the tensor
     * group (fsc_engine_create_built) as Megatron does, world = dp x tp x pp. The strategy runs over the data
     * group of each (stage, tensor rank): a tensor rank's slices are a model of their own, sharded, reduced
     * and stepped over the ranks holding the same slices. Layer checkpointing (checkpoint) and the pipeline
     * checkpoint modes work with it. */
    int tp;                       /* tensor-parallel ranks (0 or 1: none) */
    int sequence_parallel;        /* with tp > 1: layer norms and residuals on sequence shards. The builders of
                                   * fsc_engine_create and fsc_engine_create_config read it; a builder handed to
                                   * fsc_engine_create_built takes its own (fsc_llama_build: its arg's sp), which
                                   * the engine does not see: set both */
    const char *order;            /* rank order, fastest first (fsc_layout_parse_order); NULL: "tp,dp,pp" */
    /* expert parallelism (MoE models, docs/tensor_parallel.md): ep consecutive ranks of the data group split
     * the experts (E / ep each) and exchange tokens with all-to-alls; the dense parameters stay with the
     * strategy, the expert parameters are summed over the data ranks holding the same experts. ep > 1 runs
     * with ddp, zero1, zero2 and fsdp (every shard strategy; zero and fsdp reduce and shard the experts over
     * the ranks holding the same experts); MoE models run in pipelines (every schedule) and with layer
     * checkpointing, not with tp > 1 yet. The ranks of an expert group must pass the same local batch to
     * fsc_engine_step, eval and predict (the all-to-alls' sizes follow it; checked before any forward, every
     * rank of the data group refusing together). */
    int ep;                       /* expert-parallel ranks (0 or 1: every rank holds every expert) */
    /* the exact reduction (docs/determinism.md): the same bits at any world size, accumulation and strategy.
     * A step runs units of `unit` sequences, each one micro-batch wherever it is placed; every unit's gradient
     * is summed as int64 fixed point on an exponent every configuration agrees on (fsc/exact.h), the loss and
     * the MoE statistics as sorted sums of one value per unit. reduce_dtype and no_sync do not apply (each
     * unit's gradient is converted and reduced as it completes). Every strategy, pipelines (the unit is then the
     * pipeline's micro-batch), expert parallelism, offload optim and all, and tensor parallelism (the bits then
     * depend on tp). */
    int reduce_exact;             /* 0: ordered (the default, the float sums in rank order), 1: exact */
    int unit;                     /* sequences per unit with reduce_exact (0: the micro-batch, local batch / accum) */
    fsc_pipe_placement placement; /* custom schedules: FSC_PIPE_LOOP (the default) or FSC_PIPE_V (two chunks per rank
                                   * in a V, as zbv: virtual_stages 2, lists validated under the V). A built-in
                                   * schedule places its own stages: any other value than loop is refused */
} fsc_parallel_opts;
/* Valid options for one rank without any parallelism: kind none, every other field its documented default
 * (full_shard, block wrapping, reshard by strategy, f32, accum 1, no_sync 1, no clipping, pp 1, gpipe,
 * except_last, tp 1, ep 1, min_loss_scale 1, nonfinite stop, max_skipped_steps 100, prefetch 1 with limit 2,
 * offload none).
 * Start from these and
 * set what the run needs: a zero-initialised struct is not valid (accum 0 is refused, reshard_after_forward
 * 0 means never reshard). */
fsc_parallel_opts fsc_parallel_opts_default(void);

/* ---- the 3D layout: world = dp x tp x pp ------------------------------------------------------------
 * Megatron's rank order by default: tensor ranks adjacent (fastest), then data, then pipeline:
 *   rank = (pipe * dp + data) * tp + tensor.
 * Another order names the dimensions fastest first ("dp,tp,pp": data ranks adjacent). The tensor group of
 * a rank holds the ranks with its data and pipe index, the data group those with its tensor and pipe
 * index, the pipeline group those with its tensor and data index, each ordered by its own coordinate. */
enum { FSC_DIM_TENSOR = 0, FSC_DIM_DATA, FSC_DIM_PIPE };
typedef struct {
    int world, tp, dp, pp;
    int rank, tensor, data, pipe; /* this rank and its coordinates */
    int order[3];                 /* FSC_DIM_*, fastest first */
} fsc_layout;

/* Validates world = dp x tp x pp (any of tp, dp, pp may be 0: the one left is world / (the others)). */
fsc_status fsc_layout_make(int world, int tp, int dp, int pp, int rank, fsc_layout *out);
/* The same in another rank order (order: FSC_DIM_* fastest first, a permutation; NULL: Megatron's). */
fsc_status fsc_layout_make_ordered(int world, int tp, int dp, int pp, const int *order, int rank, fsc_layout *out);
/* "tp,dp,pp" (fastest first; names tp|dp|pp, each once) into order[3]; NULL or "" gives Megatron's. */
fsc_status fsc_layout_parse_order(const char *text, int order[3]);
/* One line: "world 8 = pp 2 x dp 2 x tp 2 (tensor fastest); rank 5: pipe 1, data 0, tensor 1" (the
 * dimensions slowest first); "" for l NULL. */
void fsc_layout_describe(const fsc_layout *l, char *buf, size_t cap);
/* Collective over world (l from fsc_layout_make with world's size and rank): the three groups, named
 * "tensor", "data" and "pipeline". Free them with fsc_comm_free. */
fsc_status fsc_layout_split(fsc_comm *world, const fsc_layout *l, fsc_comm **tensor, fsc_comm **data,
                            fsc_comm **pipe);

typedef struct fsc_engine fsc_engine;

typedef struct {
    double loss;          /* mean loss over the global batch (same on every rank) */
    double grad_norm;     /* before clipping (0 if clipping off) */
    int skipped;          /* no update: inf/NaN loss or gradients (f16 overflow, or nonfinite skip) */
    float loss_scale;
    /* MoE models (0 otherwise). aux_loss: the load-balancing loss, summed over the MoE blocks, each the mean
     * over the global batch's dispatch groups (one per rank and micro-batch): the objective is
     * loss + moe_aux x aux_loss. moe_assigned: token-to-expert assignments of the step over the global
     * batch and every MoE block (k per token), moe_dropped: those beyond an expert's capacity. */
    double aux_loss;
    int64_t moe_assigned, moe_dropped;
    /* reduce_exact: the attempts the step made, 1, or 2 when its reduction ran again on the exponent every
     * configuration agrees on (the first step, a gradient scale that changed, or one out of range:
     * docs/determinism.md), after recomputing its forward and backward passes, or from the unit gradients
     * still at hand with one unit per rank on DDP; 0 in ordered mode */
    int exact_attempts;
} fsc_step_info;

/* An engine for any model of model.h (docs/models.md). The model must outlive the engine, which points its
 * param/grad entries into the strategy's buffers; one model per engine. Every rank passes an equal model, made on
 * its own device (r->dev: fsc_seq_model_create(r->dev, ...)); a model made on another device keeps its records
 * there, which the engine cannot see (the rank's ledger then misses them; on cuda the passes mix devices).
 * FSDP's wrap policies count layers: block wraps every layer but the first and the last (those stay in the
 * root unit, with the layers not wrapped), min_params the layers between with at least wrap_min_params
 * parameters, model none. A pipeline's balance counts the same layers between the first and the last (the
 * first runs on stage 0, the last on the last stage). A model built without tensor parallelism: po->tp 1
 * (fsc_engine_create_built takes any). */
fsc_status fsc_engine_create_model(fsc_rank *r, fsc_model *m, const fsc_parallel_opts *po,
                                   const fsc_optim_config *oc, uint64_t seed, fsc_engine **out);
/* Builds this rank's model on dev: with tensor parallelism (tensor non-NULL, the tensor group of po->tp ranks)
 * its layers split their tensors over the group and declare their slices (model.h's split fields, tp_size the
 * group's size and tp_rank this rank's place in it); tensor NULL: the model without tensor parallelism. Every
 * rank of the tensor group builds an equal model. *out is the engine's (freed with it). */
typedef fsc_status (*fsc_model_build_fn)(void *arg, fsc_device *dev, fsc_comm *tensor, fsc_model **out);
/* An engine for the model `build` makes (any po->tp; otherwise as fsc_engine_create_model): the engine makes the
 * layout world = dp x tp x pp and its tensor group, calls build(arg, dev, tensor group or NULL, &m), checks that
 * the model's slices are for this rank's place in the group, and owns the model. With tensor parallelism the
 * strategies shard this rank's slices over the ranks holding the same slices; weights files, checkpoints and
 * fsc_engine_full_params see the full tensors (docs/tensor_parallel.md). */
fsc_status fsc_engine_create_built(fsc_rank *r, fsc_model_build_fn build, void *arg, const fsc_parallel_opts *po,
                                   const fsc_optim_config *oc, uint64_t seed, fsc_engine **out);
/* One optimizer step. inputs/targets: this rank's local_batch samples (host, the model's format:
 * sample_input_bytes and sample_target_bytes each, contiguous). global_batch: samples over the whole
 * data-parallel group, the same on every rank and the sum of the local batches over the data group; checked
 * with the loss's all-gather (in a pipeline by the last stage's data group, the verdict sent with the loss),
 * the verdict carried by the world's non-finite vote: a mismatch anywhere fails the step with
 * FSC_ERR_INVALID on every rank, before any update. With tensor parallelism every rank of a tensor group passes
 * the same samples (those of its data rank): the group compares fingerprints of them (one all-gather of 16 bytes a
 * rank), and a difference fails the step the same way. The loss is the mean of the loss terms over the global
 * batch. A step whose loss or gradients are not finite on some rank applies no update on any rank; it fails
 * with FSC_ERR_NUMERIC (po.nonfinite stop, or po.max_skipped_steps skipped in a row) or returns with
 * info->skipped set. info receives what the step did (may be NULL: nowhere). A local_batch that does not split
 * into the engine's micro-batches (0 included; with reduce exact, into units) is refused on that rank only, before
 * the step's collectives other than expert parallelism's batch check (a step has no world agreement before its
 * reductions): the other ranks wait in the step's first collective until that rank returns from its function
 * (FSC_ERR_COMM) or the cluster's timeout_s passes (FSC_ERR_TIMEOUT). Give every rank a local batch that splits.
 * A step that fails inside its forward or backward on some ranks only (a layer's error) leaves the other ranks in
 * that step's collectives: on the simulated cluster with DDP and ZeRO the failed ranks' next step meets them on the
 * same communicator and every rank fails at once ("at different calls"); with FSDP, whose gathers and reductions
 * run on separate communicators, and in general, they wait until the failed ranks return from their functions or
 * timeout_s passes. A failure
 * alike on every rank leaves nothing behind: the next steps train as if it had not happened. */
fsc_status fsc_engine_step_model(fsc_engine *e, const void *inputs, const void *targets, int local_batch,
                                 int global_batch, fsc_step_info *info);
/* Full weights as safetensors under the model's tensor names (for the GPT: HF GPT-2, as a single-rank run
 * writes them); written by rank 0 only, one unit gathered at a time (under pipelines, tensor parallelism and
 * expert parallelism with ZeRO or FSDP: each tensor streamed to rank 0 one 256 KiB chunk at a time; no rank holds
 * the whole model). Collective: every rank calls it.
 * Refuses (FSC_ERR_NUMERIC, nothing written) when a parameter or optimizer state is not finite
 * (fsc_engine_check_finite). */
fsc_status fsc_engine_save_weights(fsc_engine *e, const char *path);
/* The same with the tensors stored as dt (FSC_F32, FSC_BF16 or FSC_F16; rounded to nearest even). Both record the
 * model's configuration text in the metadata (safetensors.h's FSC_ST_META_MODEL). */
fsc_status fsc_engine_save_weights_dtype(fsc_engine *e, const char *path, fsc_dtype dt);
/* Load full weights; each rank reads only what it holds. Every tensor of the model must be there with its
 * shape, in F32, BF16 or F16 (converted to float32), under its name or Hugging Face's base-model prefix
 * ("transformer." + name: GPT2LMHeadModel's state dict); a copy under a tensor's alias (model.h: GPT-2's
 * lm_head.weight) must equal it, or the file is refused; other entries are ignored, but for those named as the
 * model's own of a layer or expert it lacks (written for a larger model) and a recorded configuration (fsc_model)
 * of other heads or kv_heads: both refused. Collective. Refuses a file holding inf or NaN (FSC_ERR_NUMERIC
 * naming the tensor and element; the engine's parameters are then undefined). */
fsc_status fsc_engine_load_weights(fsc_engine *e, const char *path);
/* Collective over the world: FSC_OK when every parameter and optimizer state held by any rank is finite;
 * otherwise FSC_ERR_NUMERIC on every rank, naming the first tensor and element of the lowest such rank. */
fsc_status fsc_engine_check_finite(fsc_engine *e);
/* Copy the full (unsharded) fp32 parameters in tensor order into host memory (fsc_model_num_full_params floats:
 * with tensor parallelism the full tensors'). Collective ("summon full params"): every rank calls it, and every
 * rank passing host receives them; host NULL: the rank receives nothing and allocates nothing of the model's
 * size. Under pipelines, tensor parallelism and expert parallelism with ZeRO or FSDP each tensor streams from the
 * ranks holding it to the receiving ranks one bounded chunk (256 KiB) at a time; otherwise the strategy gathers
 * one unit or bucket at a time. */
fsc_status fsc_engine_full_params(fsc_engine *e, float *host);
/* The model as the strategies see it: with tensor parallelism, this rank's slices (local shapes under the
 * full tensors' names; running it is the engine's business). */
fsc_model *fsc_engine_model(fsc_engine *e);
/* Record into t (trace.h; NULL: stop) each layer's forward and backward (spans "forward L", "backward L" around
 * the strategy's gathers and reductions), each step ("step N", from the first forward to the end of the
 * optimizer), the optimizer ("optimizer"), checkpoint and weights saves ("checkpoint save", "weights save"), and
 * every collective of the engine's communicators (fsc_comm_set_trace on each). Attach t to the world
 * communicator before creating the engine as well (fsc_comm_set_trace(r->comm, t)) to also record what creation
 * sends. t is also told where this rank sits (fsc_engine_layout: a metadata event "process_labels" with the
 * pipeline stage, data rank and tensor rank, docs/observability.md), so a reader can tell stages from replicas. */
void fsc_engine_set_trace(fsc_engine *e, fsc_trace *t);
fsc_trace *fsc_engine_get_trace(const fsc_engine *e);
/* This rank's place in world = dp x tp x pp (tp and pp 1 without tensor or pipeline parallelism). */
const fsc_layout *fsc_engine_layout(const fsc_engine *e);
/* Communication of this rank summed over the world communicator and every group the engine made.
 * Besides the gradient and parameter traffic, each step all-gathers four doubles per rank (the loss, the
 * local and global batch for the batch check, and the count of the engine's steps, which a step that failed on
 * some ranks only leaves unequal: the ranks then fail every step instead of pairing different ones; with MoE
 * three more, the aux loss and the assigned and dropped counts; a pipeline's last stage four, the exact reduction
 * its records),
 * all-reduces one float over the world (the non-finite vote) and, with clipping, one float (max) and 16
 * bytes per rank (the exact norm). */
void fsc_engine_comm_stats(const fsc_engine *e, fsc_comm_stats *out);
void fsc_engine_reset_comm_stats(fsc_engine *e);
/* The same traffic by kind of group: data (the strategy's reductions and gathers, the loss, with expert
 * parallelism the expert gradients' reductions over their replicas; the world when nothing else splits it),
 * tensor (the tensor-parallel layers' collectives), pipeline (activations, their gradients and the tied
 * embedding between stages, the loss broadcast), expert (mixture-of-experts all-to-alls, and with clipping
 * the norm's two small collectives over the expert group), world (collectives over ranks of several groups: the clipping norm of a pipeline or
 * tensor-parallel run, the non-finite vote, agreement when saving). The kinds sum to fsc_engine_comm_stats.
 * Returns how many communicators of that kind the engine has (0: none, *out is zero). */
typedef enum {
    FSC_GROUP_DATA = 0, FSC_GROUP_TENSOR, FSC_GROUP_PIPELINE, FSC_GROUP_EXPERT, FSC_GROUP_WORLD, FSC_GROUP_COUNT
} fsc_group_kind;
const char *fsc_group_kind_name(fsc_group_kind g); /* "data", "tensor", "pipeline", "expert", "world" */
int fsc_engine_comm_stats_group(const fsc_engine *e, fsc_group_kind g, fsc_comm_stats *out);
const char *fsc_parallel_kind_name(fsc_parallel_kind k);
const char *fsc_offload_mode_name(fsc_offload_mode m); /* "none", "optim", "all" */
/* With offload: the host memory the engine's offloaded state lives in, as a device of its own whose ledger
 * (fsc_device_peak_bytes per tag) counts the host bytes apart from the rank's device; NULL without offload. */
fsc_device *fsc_engine_host_device(const fsc_engine *e);

/* Pipeline measurements of this rank, summed over the steps since the engine was created or
 * fsc_engine_reset_pipe_stats. Without a pipeline: pp 1, the whole model, zero times. */
#define FSC_PIPE_STATS_CHUNKS 16 /* chunks per rank whose layers fsc_pipe_stats lists */
typedef struct {
    int pp, dp, stage, dp_index;  /* this rank's place (fsc_engine_layout: pipe, data) */
    int first_layer, last_layer;  /* layers of this stage (0 .. n_layers-1: for a language model 0 the embedding,
                                   * then the blocks, n_layers-1 the head) */
    int micro_batches;            /* M of the last step */
    int steps;
    double wall_s;                /* schedule time: from the pipeline barrier opening a step to the loss
                                   * broadcast closing it */
    double wait_s;                /* of which idle: waiting in recv and in the closing loss collectives */
    double bubble;                /* wait_s / wall_s: the measured idle fraction of this stage */
    double ideal_bubble;          /* the schedule's formula with equal F, B and W: (P - 1) / (M + P - 1) (GPipe,
                                   * 1F1B), (P - 1) / (v M + P - 1) (interleaved), (P - 1) / (3 M + P - 1)
                                   * (ZB-H1), (P - 1) / (6 M + P - 1) (ZBV: the last rank's wait for the first
                                   * P - 1 forwards, which no list of one step avoids); a custom list's as
                                   * interleaved's over its v chunks, (P - 1) / (3 v M + P - 1) with W actions (on any
                                   * rank: one formula on every stage) */
    int max_in_flight;            /* most micro-batches holding activations at once (full or checkpointed); with
                                   * several chunks a rank, (micro-batch, chunk) records: up to chunks x M */
    int max_full_records;         /* most full activation records alive at once */
    size_t peak_acts_bytes;       /* most device bytes of activations held at once by the schedule */
    double action_s[3];           /* time in this rank's F, B and W actions (FSC_ACT_FORWARD, _BACKWARD, _WEIGHT)
                                   * less what they waited in receives, summed over the steps */
    int records_made;             /* full records this rank's pools made (model.h's acts_create): after the first
                                   * step of a micro-batch size none where the pools serve every forward */
    int records_remade;           /* idle records of one chunk made over for another (model.h's acts_remake: in
                                   * the idle record's memory where the two chunks' records are of a size, else
                                   * in new memory, as zbv's first rank's embedding and head chunks) */
    int chunks;                   /* this rank's chunks: 1, virtual_stages (interleaved, custom) or 2 (a V: zbv) */
    int chunk_layers[FSC_PIPE_STATS_CHUNKS][3]; /* chunk c (c < chunks, at most FSC_PIPE_STATS_CHUNKS listed): its
                                   * stage, first and last layer; first_layer .. last_layer above is their span,
                                   * which with chunks holds other ranks' layers too */
} fsc_pipe_stats;
fsc_status fsc_engine_pipe_stats(const fsc_engine *e, fsc_pipe_stats *out);
void fsc_engine_reset_pipe_stats(fsc_engine *e);

/* Balances of any model (blocks per stage, out[pp]; the blocks are the layers between the first and the last)
 * that minimize the largest stage cost over contiguous splits; the first layer counts with stage 0, the last
 * with the last stage.
 * by_size (torchgpipe's balance_by_size): the model's layer_cost (model.h; for the built-in models
 * param_scale x parameter bytes (2 for SGD, 4 for Adam: the copies training keeps) + bytes of the activations
 * a micro-batch of B samples saves); without one, param_scale x the bytes of the tensors each layer uses.
 * by_time: forward + backward time of every layer measured on dev (the device m was created on), min over
 * `repeats` runs after one warm-up, with a micro-batch of B samples of zero bytes (token 0, features 0.0); it
 * binds m's param/grad to buffers of its own holding the keyed initial values (seed 1) and restores them (needs
 * the whole model on dev); a model bound to an engine (model.h's engine) is refused with FSC_ERR_STATE. */
fsc_status fsc_balance_by_size(const fsc_model *m, int pp, int B, float param_scale, int *out);
fsc_status fsc_balance_by_time(fsc_device *dev, fsc_model *m, int pp, int B, int repeats, int *out);
/* Parse "2,3,1" into out[pp]; checks the count, the sum against the model's blocks (n_layers - 2, the only
 * field of m it reads) and empty stages. */
fsc_status fsc_balance_parse(const char *text, const fsc_model *m, int pp, int *out);
void fsc_engine_free(fsc_engine *e);

FSC_END_DECLS

#endif
