/* The training engine: one model, one optimizer and one parallel strategy on one rank.
 * Every rank of a group creates an engine with the same arguments and calls fsc_engine_step with its own
 * part of the global batch; the engine runs forward/backward over the micro-batches, reduces gradients
 * (one function of the parallel layer does every reduction), clips by the global norm, applies loss
 * scaling and steps the optimizer. Strategies: none (single rank), ddp, fsdp (full_shard, shard_grad_op,
 * no_shard, hybrid_shard), zero1, zero2.
 *
 * Order of operations, the same on every path (this is what makes them bit-identical):
 *   per micro-batch: forward; backward with dloss = loss_scale / (global_batch * T) into local gradients;
 *   reduce: sum over the data-parallel group in rank order (no division: the 1/(global_batch*T) factor is
 *   already in the loss gradient); unscale (x 1/loss_scale) when scaling; non-finite check (all ranks agree);
 *   clip by the exact global norm; optimizer step. */
#ifndef FSC_PARALLEL_H
#define FSC_PARALLEL_H
#include <stddef.h>
#include <stdint.h>
#include "status.h"
#include "dtype.h"
#include "cluster.h"
#include "gpt.h"
#include "optim.h"

typedef enum { FSC_PAR_NONE = 0, FSC_PAR_DDP, FSC_PAR_FSDP, FSC_PAR_ZERO1, FSC_PAR_ZERO2 } fsc_parallel_kind;
typedef enum { FSC_SHARD_FULL = 0, FSC_SHARD_GRAD_OP, FSC_SHARD_NONE, FSC_SHARD_HYBRID } fsc_shard_strategy;
typedef enum { FSC_WRAP_BLOCK = 0, FSC_WRAP_MODEL, FSC_WRAP_MIN_PARAMS } fsc_wrap_policy;

typedef struct {
    fsc_parallel_kind kind;
    /* fsdp */
    fsc_shard_strategy shard;
    fsc_wrap_policy wrap;
    size_t wrap_min_params;       /* FSC_WRAP_MIN_PARAMS: a block with at least this many parameters is a unit */
    int reshard_after_forward;    /* -1: default (1 for full_shard/hybrid, 0 otherwise) */
    int hybrid_group;             /* hybrid_shard: ranks per sharding group (0: ranks on one "node" = world/2) */
    /* precision: compute/communication dtype of parameters and of gradient reduction (f32, bf16, f16) */
    fsc_dtype param_dtype;
    fsc_dtype reduce_dtype;
    float init_loss_scale;        /* f16: initial dynamic loss scale (default 65536) */
    /* common */
    int accum;                    /* micro-batches per step (>= 1) */
    int no_sync;                  /* accumulate locally and reduce once per step (1) or every micro-batch (0) */
    size_t bucket_bytes;          /* ddp/zero gradient buckets (default 25 MiB) */
    float clip;                   /* max global grad norm; 0 = no clipping */
    int sync_from_rank0;          /* ddp: broadcast rank 0's initial weights instead of keyed init */
    int checkpoint;               /* recompute blocks in backward */
} fsc_parallel_opts;

typedef struct fsc_engine fsc_engine;

typedef struct {
    double loss;          /* mean loss over the global batch (same on every rank) */
    double grad_norm;     /* before clipping (0 if clipping off) */
    int skipped;          /* f16: step skipped for inf/NaN gradients */
    float loss_scale;
} fsc_step_info;

fsc_status fsc_engine_create(fsc_rank *r, const fsc_gpt_config *cfg, const fsc_parallel_opts *po,
                             const fsc_optim_config *oc, uint64_t seed, fsc_engine **out);
/* One optimizer step. tokens/targets: this rank's local_batch sequences of T tokens (host, int32).
 * global_batch: sequences over the whole data-parallel group. */
fsc_status fsc_engine_step(fsc_engine *e, const int32_t *tokens, const int32_t *targets, int local_batch,
                           int global_batch, fsc_step_info *info);
/* Full weights (HF GPT-2 safetensors, as a single-rank run writes them); written by rank 0 only, one unit
 * gathered at a time. Collective: every rank calls it. */
fsc_status fsc_engine_save_weights(fsc_engine *e, const char *path);
/* Load full weights; each rank reads only what it holds. Collective. */
fsc_status fsc_engine_load_weights(fsc_engine *e, const char *path);
/* Copy the full (unsharded) fp32 parameters in tensor order into host memory (n = fsc_gpt_num_params).
 * Collective ("summon full params"). */
fsc_status fsc_engine_full_params(fsc_engine *e, float *host);
fsc_gpt *fsc_engine_model(fsc_engine *e);
/* Communication of this rank summed over the world communicator and every group the engine made.
 * Besides the gradient and parameter traffic, each step all-gathers one double per rank (the loss) and,
 * with clipping, one float (max) and 16 bytes per rank (the exact norm), and with f16 one float (the
 * non-finite vote). */
void fsc_engine_comm_stats(const fsc_engine *e, fsc_comm_stats *out);
void fsc_engine_reset_comm_stats(fsc_engine *e);
const char *fsc_parallel_kind_name(fsc_parallel_kind k);
void fsc_engine_free(fsc_engine *e);

#endif
