/* The model interface: what a model gives the engine (parallel.h) so that every strategy (DDP, FSDP, ZeRO-1/2),
 * pipelines, clipping and checkpoints run it. The GPT of gpt.h is one client (fsc_gpt_model_create); a user's
 * own model is another (docs/models.md walks through a small MLP regressor written against this header).
 *
 * A model is a sequence of layers 0 .. n_layers-1, the unit that hooks, FSDP wrapping, pipeline stages and
 * activation checkpointing work with. It declares its tensors (fsc_param_info): a stable hierarchical name,
 * the shape, the layer that owns it and the other layers that use it (tied tensors), its expert. Tensors are
 * listed by owning layer (info[i].layer never decreases with i), so a range of layers owns a contiguous range
 * of tensors and the tensor-order flat layout puts a layer's parameters together.
 *
 * The model owns no parameter memory: param[i] and grad[i] are device pointers that the strategies point into
 * their buffers (a replicated flat buffer for DDP, each unit's gathered buffer while FSDP has it gathered) before
 * the layers that use them run; backward accumulates (+=) into grad[i].
 *
 * Tied tensors. A tensor whose users[] name other layers than its owner (GPT-2's wte: owned by the embedding,
 * layer 0, used by the head, layer L+1) has a tied-gradient buffer tied_grad[i] (numel floats on the device):
 *   - the backward of a non-owner user layer writes (overwrites) its gradient for the tensor into tied_grad[i];
 *   - the owner's backward adds tied_grad[i] into grad[i] before its own contribution.
 * The buffer is the model's and exists, zeroed, by the time a record whose range holds the owner or a user does:
 * the model makes it at creation or, as the built-in models do, with the first such record (NULL before). A rank
 * whose records hold neither never has one: a pipeline stage that runs neither the owner nor the users (GPT-2's
 * middle stages) does not hold the V x C buffer of the tied embedding.
 * When one record holds both layers the model does this itself. A record holding the owner but not the users
 * adds whatever tied_grad[i] holds (the pipeline puts the user stage's there; zero until something is put there);
 * a record holding a user but not the owner leaves its part in tied_grad[i] for the caller. The accumulation
 * order is then the same on one rank and on two pipeline stages: pipelines stay bit-identical with DDP.
 * The engine gives a rank that runs a user layer but not the owner a replica of the tensor in param[i].
 * Pipelines need the users of a tied tensor after its owner and on one stage.
 *
 * Inputs and targets are opaque host data: each sample is sample_input_bytes of input and sample_target_bytes of
 * target (int32 tokens for a language model, floats for a regressor); a micro-batch of B samples is B times
 * that, contiguous. The loss of a micro-batch is a sum of loss terms (loss_terms per sample: T tokens for a
 * language model, the outputs for MSE); the engine reports their mean over the global batch and passes backward
 * dscale = loss_scale / (global_batch x loss_terms), the factor of each term's gradient. */
#ifndef FSC_MODEL_H
#define FSC_MODEL_H
#include "export.h"
#include <stddef.h>
#include <stdint.h>
#include "status.h"
#include "device.h"
#include "comm.h"

FSC_BEGIN_DECLS

struct fsc_model;
#define FSC_MODEL_MAX_USERS 4 /* layers other than the owner that use one tensor */

/* How a tensor is split over the tensor-parallel group the model was built on (fsc_param_info.split). */
enum { FSC_SPLIT_NONE = 0, /* replicated: every rank of the tensor group holds all of it */
       FSC_SPLIT_ROWS,     /* dimension 0 cut in slices */
       FSC_SPLIT_COLS };   /* the last dimension cut in slices */

/* One declared tensor. With tensor parallelism (a model built on a tensor group, parallel.h's
 * fsc_engine_create_built) a tensor may be this rank's slice of a full tensor: shape[] and numel are the
 * slice's, full_shape[] and full_numel the full tensor's, name the full tensor's. The split dimension is
 * `parts` equal parts (GPT-2's packed q|k|v: 3), each cut in tp_size equal slices, and the rank takes slice
 * tp_rank of each part, in order. Zero-initialised fields mean "not split": every model without tensor
 * parallelism leaves them 0. */
typedef struct {
    char name[64];       /* stable hierarchical name: "h.3.attn.c_attn.weight", "layers.1.weight" */
    int ndim;
    int64_t shape[4];
    size_t numel;
    int layer;           /* the layer that owns it (whose FSDP unit, pipeline stage and checkpoint shard hold it) */
    int expert;          /* the expert it belongs to (mixture of experts), -1 for every other tensor */
    int decay;           /* weight decay (fsc_param_decays): 0 the default rule, decayed when ndim >= 2 (matrices,
                          * not biases or norms); 1 decayed; -1 never (embeddings: the layers owning them say so) */
    int nusers;          /* other layers that use it (tied tensors), 0 for most */
    int users[FSC_MODEL_MAX_USERS];
    /* Another name a weights file may hold a copy of this tensor under, "" for none: a tied tensor's other use
     * (Hugging Face's GPT-2 saves the tied head as lm_head.weight beside wte.weight). Loading accepts the copy
     * when it equals the tensor and refuses the file when it differs; saving writes the tensor once. */
    char alias[32];
    int split;           /* FSC_SPLIT_NONE, FSC_SPLIT_ROWS or FSC_SPLIT_COLS */
    int parts;           /* equal parts of the split dimension, each sliced (0 or 1: one) */
    int tp_rank, tp_size;/* this rank's place in the tensor group the model was built on (0, 0 or 1: none) */
    int64_t full_shape[4]; /* the full tensor (split tensors; unsplit: all 0 or equal to shape) */
    size_t full_numel;   /* elements of the full tensor (0 for an unsplit tensor: numel) */
    /* Rows a weights file holds, when fewer than shape[0] (0: all): the rest are padding (a padded vocabulary's
     * rows, llm.c's), saved out and loaded as zeros from a file of file_rows rows (or loaded from one of all). */
    int64_t file_rows;
} fsc_param_info;

/* A run of a slice: local elements [local, local + n) are the full tensor's elements [full, full + n). */
typedef struct {
    size_t local, full, n;
} fsc_param_run;

/* Elements of the full tensor p is a slice of (numel when p is not split). */
size_t fsc_param_full_numel(const fsc_param_info *p);
/* Element of the full tensor that local element `local` of p is (local itself when p is not split). */
size_t fsc_param_full_index(const fsc_param_info *p, size_t local);
/* The slice as runs of local elements that are contiguous in the full tensor, in local order: one for an
 * unsplit tensor, `parts` for a row split, (rows of the full tensor) x parts for a column split. */
size_t fsc_param_num_runs(const fsc_param_info *p);
/* Run k (0 .. fsc_param_num_runs(p) - 1) clipped to local elements [first, first + n); n = 0 in the result
 * when the run lies outside them, or k is no run of p. */
fsc_param_run fsc_param_run_at(const fsc_param_info *p, size_t k, size_t first, size_t n);

/* Whether layer l uses tensor info (owns it or is one of its users). */
int fsc_param_used_by(const fsc_param_info *info, int l);
/* Whether the optimizer's weight decay applies to the tensor by default (GPT-2's and minGPT's convention:
 * matrices of linear layers, not biases, norms or embeddings): decay 1, or decay 0 and ndim >= 2. An
 * optimizer configuration with decay_all (optim.h) decays every tensor instead. */
int fsc_param_decays(const fsc_param_info *info);

/* Hooks the model calls around every layer of forward and backward (any may be NULL). Strategies gather
 * parameters in pre_*, free them and reduce gradients in post_*. */
typedef struct {
    void *ctx;
    fsc_status (*pre_forward)(void *ctx, int layer);
    fsc_status (*post_forward)(void *ctx, int layer);
    fsc_status (*pre_backward)(void *ctx, int layer);
    fsc_status (*post_backward)(void *ctx, int layer);
} fsc_model_hooks;

/* A gradient's term from one source: piece (device, n floats) is that source's part of grad[0 .. n), which the
 * model would otherwise add into grad (+=). An expert's rank computes its weight gradients from the tokens of every
 * rank of its expert group; the engine's exact reduction (docs/determinism.md) needs each rank's part as a term of
 * its own, so it takes them through this and the model leaves grad as it is. */
typedef fsc_status (*fsc_grad_term_fn)(void *ctx, float *grad, const float *piece, size_t n);

/* An activation record: what forward saves for backward for one micro-batch over a layer range (opaque, the
 * model's). A pipeline stage holds several at once; with checkpoint set the model keeps only each layer's input
 * and recomputes the layer's forward in backward, bit-identically, right after its pre_backward hook. */
typedef struct fsc_model_acts fsc_model_acts;
typedef struct {
    int B;               /* samples in the micro-batch */
    int first, last;     /* layer range; 0 and n_layers-1 for the whole model */
    int checkpoint;      /* recompute layers in backward */
    int offload_inputs;  /* with checkpoint: keep layer inputs in host memory (a model may ignore it) */
    /* backward: a gradient that adds up parts from several ranks (an MoE layer's experts under expert parallelism)
     * goes part by part to grad_term(grad_term_ctx, ...) instead (NULL: the model adds them; a model without such
     * gradients ignores it) */
    fsc_grad_term_fn grad_term;
    void *grad_term_ctx;
    int split;           /* backward runs as backward_input, then backward_weight (needs both operations): the
                          * record keeps what the weight part needs until it runs; with checkpoint the input part
                          * recomputes each layer and keeps what its weight part reads (the sequential model: the
                          * layer's record), the weight part recomputes nothing (a model that cannot refuses the
                          * pair from acts_create) */
    int split_tied;      /* with split: the layers that own or use a tied tensor split too, where the model can
                          * (its splits_tied operation says whether).
                          * The tied contract above then holds in the weight part: a user's weight part writes
                          * tied_grad[i], the owner's weight part adds it first; a caller that runs them in two
                          * records carries the user's gradient of each micro-batch to the owner's weight part.
                          * 0: they run whole in the input part (the tied gradient crosses in the input part) */
} fsc_model_acts_opts;

/* The boundary streams of a record (device pointers, stream_floats(B) floats each): the input of layer `first`
 * when first > 0, the output of `last` when last < n_layers-1, the gradient w.r.t. that output (set before
 * backward) and the gradient w.r.t. the input of `first` (after backward). NULL where the range has no such
 * boundary. The input must keep its contents until backward is done; GRAD_OUTPUT and GRAD_INPUT may be the same
 * buffer (read the gradient input before writing the next gradient output). */
typedef enum { FSC_STREAM_INPUT = 0, FSC_STREAM_OUTPUT, FSC_STREAM_GRAD_OUTPUT, FSC_STREAM_GRAD_INPUT } fsc_stream;

/* Auxiliary statistics of a record's last forward (mixture of experts): aux_loss a loss the objective adds
 * (reported, not part of the loss sum), assigned and dropped counts. */
typedef struct {
    double aux_loss;
    double assigned, dropped;
} fsc_model_aux;

/* A rank's slice of logits split over a tensor group (logits_part below): row stride ld, the columns [first,
 * first + cols) of vocab. */
typedef struct {
    int first, cols, ld, vocab;
} fsc_logits_part;

/* The operations; ctx is the model's ctx. Required unless marked optional. */
typedef struct {
    fsc_status (*acts_create)(void *ctx, const fsc_model_acts_opts *o, fsc_model_acts **out);
    void (*acts_free)(void *ctx, fsc_model_acts *a);
    size_t (*acts_bytes)(void *ctx, const fsc_model_acts *a);       /* device bytes the record holds now (a split
                                                                      * record may hold more from backward_input
                                                                      * to backward_weight) */
    /* The micro-batch: B samples of host inputs and targets. inputs is NULL when layer 0 is not in the
     * record's range, targets NULL when the last layer is not. */
    fsc_status (*set_batch)(void *ctx, fsc_model_acts *a, const void *inputs, const void *targets);
    float *(*stream)(void *ctx, fsc_model_acts *a, fsc_stream which);
    size_t (*stream_floats)(void *ctx, int B);                         /* floats of a boundary stream of B samples */
    /* Layers [first, last] forward with the hooks around each (the built-in models, the sequential one included,
     * take h NULL as none). When the last layer is in range, *loss_sum (may be NULL) receives the sum of the
     * micro-batch's loss terms (double); otherwise 0. */
    fsc_status (*forward)(void *ctx, fsc_model_acts *a, const fsc_model_hooks *h, double *loss_sum);
    /* Layers [last .. first] backward, accumulating into grad[] (tied tensors: see above); each loss term's
     * gradient is dscale. Once per forward. */
    fsc_status (*backward)(void *ctx, fsc_model_acts *a, const fsc_model_hooks *h, float dscale);
    /* Initial values of elements [first, first + n) of tensor i, keyed by (seed, name, element index) so any
     * rank can initialize any shard and get the values the whole tensor would have (fsc_rng_*). Host out. */
    void (*init_values)(void *ctx, uint64_t seed, int i, size_t first, size_t n, float *out);
    /* Optional. */
    /* Cost of layer l for balancing pipeline stages by size (parallel.h's fsc_balance_by_size): bytes of parameters
     * and of a micro-batch of B samples' activations. NULL: parameter bytes only. */
    double (*layer_cost)(void *ctx, int l, int B, float param_scale);
    /* Auxiliary statistics of the record's last forward; NULL: none. */
    void (*aux_stats)(void *ctx, const fsc_model_acts *a, fsc_model_aux *out);
    /* The same per layer: out[l - first] the statistics of layer l of the record's range (zero for a layer
     * without them), so that a pipeline adds its stages' layers in aux_stats' order. NULL: a model with
     * aux_stats does not run in a pipeline. */
    void (*aux_layers)(void *ctx, const fsc_model_acts *a, fsc_model_aux *out);
    /* The model's configuration as a JSON object ("{\"layers\":2,...}"), recorded in checkpoints (an engine refuses
     * another text when it is made); NULL: "{}".
     * Writes at most cap bytes with the NUL; a longer text is cut to cap - 1 bytes, as snprintf cuts it (never
     * replaced by a shorter one such as "{}"): the library then asks again with a larger buffer, and records the
     * whole text up to 16 MiB (a longer one is refused, not cut). */
    void (*config)(void *ctx, char *buf, size_t cap);
    /* Whether a checkpoint written with configuration `recorded` (config's text) loads into this model; the
     * message says why not. NULL: the texts must be equal. */
    fsc_status (*config_check)(void *ctx, const char *recorded);
    /* Mixture of experts with expert parallelism: spread the n_experts experts over ep (rank r of ep holds
     * experts [r E/G, (r+1) E/G)); collective when the model runs. NULL: no expert parallelism. */
    fsc_status (*set_expert_group)(void *ctx, fsc_comm *ep);
    /* Free what the model owns (fsc_model_free); NULL: the caller owns everything. */
    void (*destroy)(struct fsc_model *m);
    /* Whether the n parameters a checkpoint holds (name and shape) are those configuration `recorded` (config's
     * text) makes: the metadata's integrity, asked before config_check at load and after writing at save; the
     * message names the tensor or the field. NULL: the tensors are checked against this model's own at load. */
    fsc_status (*check_tensors)(void *ctx, const char *recorded, const fsc_param_info *params, int n);
    /* Language models: after a forward of a record holding the last layer, the logits that forward computed,
     * device floats (B, loss_terms, *vocab) valid until the record's next forward or free, or its backward_input
     * (a record made with split: the built-in LM heads write their gradient over them); NULL when the record
     * has none. NULL operation: the model gives no logits (generate.h refuses it). */
    const float *(*logits)(void *ctx, const fsc_model_acts *a, int *vocab);
    /* Floating-point operations of one training step (forward and backward) of a micro-batch of B samples over
     * the whole model, for MFU (fsc_model_flops). NULL: unknown. The built-in language models count 6 x the
     * parameters that multiply (all but the position and untied input embeddings; with experts only the top-k
     * ones) per token, plus attention's 12 x layers x dim x T per token (PaLM's and nanoGPT's estimate). */
    double (*flops)(void *ctx, int B);
    /* Optional, the split backward of a record made with split (zero-bubble pipelines, docs/pipeline.md): the
     * input part computes the gradient w.r.t. the range's input (GRAD_INPUT) and the whole backward of the
     * layers that do not split theirs; the weight part, later and once, accumulates the parameter gradients of
     * the layers that do. Both call the backward hooks around every layer. Input part then weight part
     * accumulate the bits backward does. The record may hold more device memory from its input part to its weight
     * part (acts_bytes says how much at any time: the sequential models take the output gradients and stashes
     * kept for the weight part from a pool at the input part and give them back after the weight part). NULL:
     * the model does not split. */
    fsc_status (*backward_input)(void *ctx, fsc_model_acts *a, const fsc_model_hooks *h, float dscale);
    fsc_status (*backward_weight)(void *ctx, fsc_model_acts *a, const fsc_model_hooks *h, float dscale);
    /* Optional: 1 if the records made with split and split_tied split the layers that own or use a tied tensor
     * (every such record then does), 0 if they run them whole in the input part. NULL: 0 (split_tied ignored). */
    int (*splits_tied)(void *ctx);
    /* Optional, models whose logits are split over a tensor group (the vocabulary-parallel head, tp > 1), where
     * logits gives NULL: this rank's slice of the logits the last forward computed (valid as logits' are), device
     * floats, B x loss_terms rows of stride p->ld, row r's columns [p->first, p->first + p->cols) of the p->vocab
     * columns of the whole logits (the group's slices together make them; fsc_engine_predict gathers them); NULL
     * when the record has none. NULL operation: no such slice. */
    const float *(*logits_part)(void *ctx, const fsc_model_acts *a, fsc_logits_part *p);
    /* Optional: a record for o in place of old, which it consumes whatever it returns (freed on failure), in
     * old's device memory where the two need the same bytes (a pipeline rank with two chunks of the same shape,
     * zbv's middle ranks, hands an idle record of one chunk to the other instead of freeing and making one). The
     * memory keeps old's values: the passes must not read what they did not write, as with any record reused.
     * NULL: the engine frees old and calls acts_create. */
    fsc_status (*acts_remake)(void *ctx, fsc_model_acts *old, const fsc_model_acts_opts *o, fsc_model_acts **out);
} fsc_model_ops;

typedef struct fsc_model {
    int n_layers;
    int n_tensors;
    const fsc_param_info *info;  /* (n_tensors), ordered by owning layer */
    float **param;               /* (n_tensors) device pointers, set by the engine's strategy */
    float **grad;                /* (n_tensors) device pointers, set by the engine's strategy */
    float **tied_grad;           /* (n_tensors) the tied-gradient buffers (NULL for untied tensors, and for a tied one
                                  * until a record holding its owner or a user exists: see above); NULL: none */
    size_t sample_input_bytes;   /* host bytes of one sample's input */
    size_t sample_target_bytes;  /* host bytes of one sample's target */
    int loss_terms;              /* loss terms per sample */
    int n_experts;               /* experts of each MoE layer (0: none) */
    const fsc_model_ops *ops;
    void *ctx;
    void *engine;                /* the engine bound to the model (fsc_engine_create_model sets it, fsc_engine_free
                                  * clears it; one engine a model at a time): zero when the model is made */
} fsc_model;

/* The options of a record (ops->acts_create) of B samples over the whole model (layers 0 .. n_layers-1),
 * without checkpointing: start from these and set what differs. */
fsc_model_acts_opts fsc_model_acts_opts_default(const fsc_model *m, int B);

/* A record by the model's acts_create (remade from `old` by acts_remake when old is not NULL and the model has it,
 * else old freed first): a model whose operation succeeds without a record is refused (FSC_ERR_INTERNAL naming the
 * operation) instead of handing the NULL to its own passes. */
fsc_status fsc_model_acts_make(const fsc_model *m, fsc_model_acts *old, const fsc_model_acts_opts *o,
                               fsc_model_acts **out);

/* Check a model's declaration (sizes, layers, tensor order, users (a tied tensor needs the tied_grad table; its
 * buffer may come with the records), required operations, and the split fields:
 * full_shape consistent with shape, split, parts and tp_size, one tensor group for every tensor); the message
 * names the first problem and the tensor. */
fsc_status fsc_model_validate(const fsc_model *m);
/* Total parameters (sum of numel: with tensor parallelism this rank's slices). */
size_t fsc_model_num_params(const fsc_model *m);
/* The model's ops->flops(B): training FLOPs of B samples (0 when the model does not say). */
double fsc_model_flops(const fsc_model *m, int B);
/* The estimate of the built-in language models, per token of context T: 6 x matmul_params + 12 x layers x dim x T. */
double fsc_lm_flops_per_token(double matmul_params, int layers, int dim, int T);
/* Total parameters of the full tensors (sum of fsc_param_full_numel; fsc_model_num_params without tensor
 * parallelism). */
size_t fsc_model_num_full_params(const fsc_model *m);
/* Index of the tensor called name, -1 if none (m or name NULL too). */
int fsc_model_tensor_index(const fsc_model *m, const char *name);
/* How fsc_model_check_held compares (flags, or'd): no tensor held beyond the model's; a tensor of a padded
 * vocabulary may be held with its file_rows rows, as weights files store it. */
enum { FSC_HELD_EXACT = 1, FSC_HELD_FILE_ROWS = 2 };
/* Whether the n tensors held (name, ndim and shape each: a checkpoint's parameters, ckpt.h's fsc_ckpt_meta_params; a
 * weights file's entries) hold those model m declares: each of m's tensors among them by name with its shape, and with
 * FSC_HELD_EXACT no other. FSC_ERR_FORMAT otherwise, the message naming the tensor and both shapes and the model as
 * what says ("its llama model"; NULL: "the model"), for the caller to put what holds them before it ("holds no
 * tensor h.2.ln_1.weight, which the model declares"). Reads m's declarations only: a model built on the counting
 * device (generate.h's fsc_model_config_check_held), or before an engine allocates it (the sampler), will do. */
fsc_status fsc_model_check_held(const fsc_model *m, const fsc_param_info *held, int n, int flags, const char *what);
/* ops->destroy(m) when the model owns itself (fsc_gpt_model_create's); NULL does nothing. */
void fsc_model_free(fsc_model *m);

FSC_END_DECLS

#endif
