/* Layers and the sequential model: the easy way to write an fsc_model (model.h). A layer declares its
 * parameters (names relative to the layer, shapes, initial values), the device bytes its record keeps for a
 * micro-batch (what forward saves for backward) and its scratch, the size of its output per sample, and a
 * forward and a backward. fsc_seq_model_create strings layers into an fsc_model that every strategy, pipeline
 * and checkpoint runs: it names the tensors (a prefix per layer), initializes them by full name through the
 * keyed RNG, keeps the per-call records (layer checkpointing keeps only each layer's input and recomputes),
 * calls the strategies' hooks around every layer, provides the streams between pipeline stages, sums the
 * loss and handles tied parameters. docs/models.md walks through it; examples/train_mlp.c writes a layer of
 * its own, computed on the device with fsc/ops.h.
 *
 * Not here: the kernels (nn.h, the device), the engine (parallel.h). */
#ifndef FSC_LAYERS_H
#define FSC_LAYERS_H
#include "export.h"
#include <stddef.h>
#include <stdint.h>
#include "status.h"
#include "device.h"
#include "model.h"
#include "comm.h"

FSC_BEGIN_DECLS

/* Parameters of a dense built-in layer at most (a layer may declare more: an MoE layer has 1 + 4 E). */
#define FSC_LAYER_MAX_PARAMS 16

/* How a parameter starts: mean + std x normal(seed, full name, element) or the constant `value`. */
typedef enum { FSC_INIT_NORMAL = 0, FSC_INIT_CONST } fsc_init_kind;
typedef struct {
    fsc_init_kind kind;
    float mean, std;   /* FSC_INIT_NORMAL */
    float value;       /* FSC_INIT_CONST */
    size_t limit;      /* FSC_INIT_NORMAL: elements at or past it are 0 (a padded vocabulary's rows); 0: none */
} fsc_init;

/* One parameter of a layer. A tensor-parallel layer's parameter may be this rank's slice of a full tensor
 * (model.h's split fields: fsc_layer_add_param_split); shape and numel are then the slice's. */
typedef struct {
    char name[48];     /* relative to the layer ("weight", "q_proj.weight"); the model prefixes it */
    int ndim;
    int64_t shape[4];
    size_t numel;
    fsc_init init;
    int decay;         /* weight decay: fsc_param_info's (model.h): 0 by ndim, 1 always, -1 never (embeddings) */
    int split;         /* FSC_SPLIT_NONE (0), FSC_SPLIT_ROWS or FSC_SPLIT_COLS (model.h) */
    int parts;         /* equal parts of the split dimension, each sliced (0 or 1: one) */
    int tp_rank, tp_size; /* this rank's place in the tensor group (0, 0 or 1: none) */
    int64_t full_shape[4]; /* the full tensor (all 0 for an unsplit parameter) */
} fsc_layer_param;

/* What one call of a layer sees. Device pointers of dev. */
typedef struct {
    fsc_device *dev;
    int B;                       /* samples of the micro-batch */
    const float *const *param;   /* (n_params) the layer's parameters, in declaration order */
    float *const *grad;          /* (n_params) their gradients: backward accumulates (+=) */
    void *rec;                   /* rec_bytes(B) bytes: forward writes what backward needs, backward reads it */
    void *work;                  /* work_bytes(B) bytes of scratch, not kept between calls (the model's records
                                  * share it: a later call, of this record or another, finds it overwritten) */
    const void *target;          /* loss layers: the B samples' targets (target_bytes each) */
    float dscale;                /* backward: the gradient factor of each loss term (MoE layers scale their
                                  * load-balancing loss by it) */
    void *state;                 /* the record's host state (ops->state_create), NULL without */
    fsc_grad_term_fn term;       /* backward: the record's grad_term (model.h's fsc_model_acts_opts), NULL: none */
    void *term_ctx;
    float *sink;                 /* split backward (ops->split), input part: a zeroed scratch of the floats of the
                                  * layer's largest one-dimensional parameter, for a kernel that can only compute
                                  * a vector's gradient together with dinp (the built-in norms' kernels compute
                                  * either half alone); its contents are garbage */
    void *stash;                 /* split backward: ops->split_bytes(B) bytes the input part writes and the weight
                                  * part of the same record reads (NULL without split_bytes; with it never
                                  * NULL in a split record, even of 0 bytes: the mark of the split's parts) */
} fsc_layer_call;

struct fsc_layer;
typedef struct {
    /* Device bytes the record keeps for B samples, and of scratch (NULL: none); a record is refused when these and
     * split_bytes of its layers together pass 2^63. */
    size_t (*rec_bytes)(const struct fsc_layer *l, int B);
    size_t (*work_bytes)(const struct fsc_layer *l, int B);
    /* out (B x out_floats floats) from in (B x in_bytes bytes; the model keeps it unchanged until backward).
     * A loss layer writes its loss values (summed by the model into the loss) and reads c->target. */
    fsc_status (*forward)(const struct fsc_layer *l, const fsc_layer_call *c, float *out, const void *in);
    /* dinp (B x in floats) = (overwrites) the gradient w.r.t. in, given dout (the gradient w.r.t. out; NULL for a
     * loss layer, which uses c->dscale); dinp is NULL when no one needs it (the model's first layer). Parameter
     * gradients accumulate into c->grad. Runs after forward of the same record (or its recomputation). */
    fsc_status (*backward)(const struct fsc_layer *l, const fsc_layer_call *c, float *dinp, const float *dout,
                           const void *in);
    /* Optional: the layer's settings as one JSON object (recorded in checkpoints; another text, not JSON or followed by
     * more, is refused when an engine is made, naming the layer); NULL: "{}". Writes at most cap bytes
     * with the NUL; a longer text is cut to cap - 1 bytes, as snprintf cuts it: the library then asks again with a
     * larger buffer (from 1 KiB), and records the whole text up to 16 MiB (a longer one is refused, not cut). */
    void (*config)(const struct fsc_layer *l, char *buf, size_t cap);
    /* Optional: free what the layer owns beyond the struct (the struct itself is freed with free()). */
    void (*destroy)(struct fsc_layer *l);
    /* Optional: check B samples of host data before the model uploads them (set_batch): check_input is asked for
     * the model's first layer and its inputs, check_target for the loss layer and its targets. A refusal
     * (FSC_ERR_INVALID) names the element, and set_batch returns it. NULL: any bytes are accepted. */
    fsc_status (*check_input)(const struct fsc_layer *l, const void *host, int B);
    fsc_status (*check_target)(const struct fsc_layer *l, const void *host, int B);
    /* Optional, loss layers of language models: the logits the last forward wrote into rec (B samples), device
     * floats (B, loss_terms, *vocab); the sequential model's logits (model.h). The vocab-parallel head (tp) has
     * none: each rank holds only its slice, which logits_part gives (model.h's logits_part). */
    const float *(*logits)(const struct fsc_layer *l, const void *rec, int B, int *vocab);
    /* Optional (mixture of experts): host state of one record for B samples on dev, made and freed with the record
     * and handed to every call as c->state (the MoE layer's routing record and its last statistics). */
    fsc_status (*state_create)(struct fsc_layer *l, fsc_device *dev, int B, void **state);
    void (*state_free)(const struct fsc_layer *l, void *state);
    /* Optional: add the statistics of the state's last forward into *sum (model.h's aux_stats). */
    void (*aux)(const struct fsc_layer *l, const void *state, fsc_model_aux *sum);
    /* Optional: spread the layer's experts over ep (model.h's set_expert_group), before records are made. */
    fsc_status (*set_expert_group)(struct fsc_layer *l, fsc_comm *ep);
    /* Optional: the expert of parameter k (model.h's fsc_param_info.expert), -1 for none. NULL: no experts. A
     * rank's call may see NULL pointers for other ranks' experts (the model does not check those). */
    int (*param_expert)(const struct fsc_layer *l, int k);
    /* Optional (0: no): the layer splits its backward (docs/pipeline.md, "Split backward"). Its backward then
     * also runs in two parts: the input part sees NULL for every entry of c->grad and computes dinp only (a
     * gradient a kernel must compute with dinp goes to c->sink); the weight part sees dinp NULL and accumulates
     * the parameter gradients only, from the same dout and record. Tell the parts apart by c->grad, not by dinp:
     * as the model's first layer dinp is NULL in every call (its input part runs only with split_bytes, to fill
     * its stash). Input part then weight part give the bits of the whole backward, dinp and gradients both. A
     * layer without it runs its whole backward in the input part. */
    int split;
    /* Optional, with split: device bytes the layer keeps from its input part to its weight part (c->stash: the
     * inner output gradients its weight products need, so the weight part does not derive them again). NULL:
     * none. The input part may also keep them over the parts of its record (c->rec) the weight part does not
     * read: the record serves no other pass before the next forward (the GPT-2 block keeps most of them over its
     * attention input and probabilities and its MLP's pre-activations, and stashes only what does not fit). */
    size_t (*split_bytes)(const struct fsc_layer *l, int B);
    /* Optional, a loss layer whose logits are split over a tensor group: this rank's slice of the logits the last
     * forward wrote into rec (model.h's logits_part). */
    const float *(*logits_part)(const struct fsc_layer *l, const void *rec, int B, fsc_logits_part *p);
} fsc_layer_ops;

/* A layer: allocate it with malloc/calloc (the model frees it with free() after ops->destroy). A user layer
 * embeds this struct first in its own and fills it (fsc_layer_add_param declares parameters). */
typedef struct fsc_layer {
    char kind[32];                 /* "linear", "layernorm", ... or the user's name */
    int n_params;
    fsc_layer_param *params;       /* (n_params) grown by fsc_layer_add_param, freed by fsc_layer_free */
    int cap_params;
    size_t in_bytes;               /* device bytes of one sample's input (floats x 4; int32 tokens: T x 4) */
    size_t out_floats;             /* floats of one sample's output (a loss layer: its loss values) */
    int loss_terms;                /* > 0: a loss layer (the last), with this many loss terms per sample */
    size_t target_bytes;           /* a loss layer: bytes of one sample's target */
    const fsc_layer_ops *ops;
} fsc_layer;

/* Declare parameter `name` of the given shape (ndim 1..4, unused dimensions 0) starting as init. */
fsc_status fsc_layer_add_param(fsc_layer *l, const char *name, int ndim, const int64_t *shape, fsc_init init);
/* Declare parameter `name` as this rank's slice of a full tensor of full_shape: split (FSC_SPLIT_ROWS: dimension
 * 0, FSC_SPLIT_COLS: the last) cuts the split dimension in `parts` equal parts (0 or 1: one) and each in tp_size
 * slices, of which this rank (tp_rank) takes one per part. The slice's shape is computed; FSC_ERR_INVALID when
 * parts x tp_size does not divide the split dimension. FSC_SPLIT_NONE declares a parameter replicated over the
 * group (full_shape is its shape). The sequential model initializes a slice with the full tensor's values. */
fsc_status fsc_layer_add_param_split(fsc_layer *l, const char *name, int ndim, const int64_t *full_shape, int split,
                                     int parts, int tp_rank, int tp_size, fsc_init init);
/* Change the initial values of the layer's parameter `name` (defaults are the constructors'). Both refuse initial
 * values that are not finite (a NaN or infinite value, mean or std) or a negative std. */
fsc_status fsc_layer_set_init(fsc_layer *l, const char *name, fsc_init init);
/* ops->destroy, then free (NULL does nothing). */
void fsc_layer_free(fsc_layer *l);
/* Initial values: mean 0 and standard deviation std (FSC_INIT_NORMAL), or the constant v (FSC_INIT_CONST). */
fsc_init fsc_init_normal(float std);
fsc_init fsc_init_const(float v);

/* ---- built-in layers ------------------------------------------------------------------------------------
 * A sample is `rows` rows of features (a sequence of T tokens: rows = T; a feature vector: rows = 1; 0 means
 * 1). Defaults: weights normal(0, 0.02), biases 0, norm weights 1 (change them with fsc_layer_set_init).
 * Parameter names follow Hugging Face where one exists. A constructor that refuses its arguments sets *out NULL.
 *
 * Tensor parallelism (docs/tensor_parallel.md). The options of linear, the embeddings, attention, the MLPs, the
 * blocks and the LM head take `tp`, a tensor group (NULL: none): the layer is then built on this rank's slices
 * (declared with fsc_layer_add_param_split under the full tensors' names, so every tensor-parallel size starts
 * from the same full tensors) and runs Megatron's column/row-parallel products with tp.h's building blocks:
 * attention splits its heads (and kv heads: kv_heads must divide by the group size), q/k/v column-parallel, o
 * row-parallel; the MLPs split their hidden width (column, then row); the embeddings and the head split the
 * vocabulary (the head's loss is tp.h's vocab-parallel cross entropy, and a head tied to a vocab-parallel
 * embedding's wte ties equal slices); norms, position embeddings and the biases after a row-parallel product
 * are replicated. Every rank of the group builds the same layer and calls it together. `sp` (embeddings,
 * attention, MLPs, blocks, head; needs tp) turns on sequence parallelism: the stream between layers is this
 * rank's contiguous B*T/size rows of the (B*T, C) stream (out_floats per sample T*C/size; T must divide by the
 * group size), gathered before the column-parallel products and reduce-scattered after the row-parallel ones;
 * the norms' parameter gradients are then partial and the layer sums them over the group itself. */
/* The two forms of a tensor-parallel linear (fsc_linear_opts.tp_mode). */
typedef enum { FSC_TP_NONE = 0, FSC_TP_COLUMN, FSC_TP_ROW } fsc_tp_mode;

/* out = in W + b, W "weight" [in, out] (out_in: [out, in] as torch's nn.Linear), b "bias" (with bias).
 * With tp: FSC_TP_COLUMN splits the output features (input replicated, output this rank's out / size columns,
 * bias split), FSC_TP_ROW the input features (input this rank's in / size columns, partial products summed over
 * the group, the replicated bias added once after the sum). No sequence parallelism. */
typedef struct {
    int rows, in, out, bias, out_in;
    fsc_comm *tp;        /* NULL: no tensor parallelism */
    fsc_tp_mode tp_mode; /* with tp: FSC_TP_COLUMN or FSC_TP_ROW */
} fsc_linear_opts;
/* The defaults: one row per sample, a bias (as torch's nn.Linear), W [in, out]. */
fsc_linear_opts fsc_linear_opts_default(int in, int out);
fsc_status fsc_layer_linear(const fsc_linear_opts *o, fsc_layer **out);
/* GELU (tanh approximation) over n floats per sample. */
fsc_status fsc_layer_gelu(size_t n, fsc_layer **out);
/* LayerNorm over width C (eps 1e-5): "weight", "bias". */
fsc_status fsc_layer_layernorm(int rows, int C, fsc_layer **out);
/* RMSNorm over width C: "weight". */
fsc_status fsc_layer_rmsnorm(int rows, int C, float eps, fsc_layer **out);
/* out = [in +] c_proj(gelu(c_fc(in))) (GPT-2's MLP, weights [in, out] as GPT-2's Conv1D): "c_fc.weight" (C, F),
 * "c_fc.bias", "c_proj.weight" (F, C), "c_proj.bias". */
typedef struct {
    int rows, C, F, residual;
    fsc_comm *tp;        /* NULL: none; else F split over the group (c_fc / gate, up column; c_proj / down row) */
    int sp;              /* sequence parallelism (needs tp; rows divide by the group size) */
} fsc_mlp_opts;
/* The defaults of both MLPs: one row per sample, F = 4 C (GPT-2's width; the Llama's rule is llama.h's
 * fsc_llama_default_ffn), no residual. */
fsc_mlp_opts fsc_mlp_opts_default(int C);
fsc_status fsc_layer_gelu_mlp(const fsc_mlp_opts *o, fsc_layer **out);
/* out = [in +] down(silu(gate(in)) * up(in)) (Llama's MLP, no biases): "gate_proj.weight", "up_proj.weight"
 * (F, C), "down_proj.weight" (C, F). */
fsc_status fsc_layer_swiglu_mlp(const fsc_mlp_opts *o, fsc_layer **out);
/* out = [in +] causal self-attention (nn.h's fsc_self_attn_*: rotary when rope_theta > 0, kv_heads dividing
 * heads, 0: heads): "q_proj.weight" (heads x HS, C), "k_proj.weight", "v_proj.weight" (kv_heads x HS, C),
 * "o_proj.weight" (C, heads x HS), and "{q,k,v,o}_proj.bias" with bias. HS = C / heads. */
typedef struct {
    int T, C, heads, kv_heads, bias, residual;
    float rope_theta;
    fsc_comm *tp;        /* NULL: none; else heads and kv heads split over the group */
    int sp;              /* sequence parallelism (needs tp; T divides by the group size) */
} fsc_attention_opts;
/* The defaults: plain multi-head attention (kv_heads = heads), no biases, no residual, no rotary embedding. */
fsc_attention_opts fsc_attention_opts_default(int T, int C, int heads);
fsc_status fsc_layer_attention(const fsc_attention_opts *o, fsc_layer **out);
/* out (T, C) = wte[token] + wpe[t] of T int32 tokens per sample: "wte.weight" (V, C), "wpe.weight" (T, C).
 * Both embeddings refuse tokens outside [0, V) (check_input). */
fsc_status fsc_layer_embedding(int T, int C, int V, fsc_layer **out);
/* out (T, C) = weight[token] of T int32 tokens per sample, no positions (Llama's embed_tokens): "weight" (V, C). */
fsc_status fsc_layer_token_embedding(int T, int C, int V, fsc_layer **out);
/* Either embedding with options: positions 1 is fsc_layer_embedding's ("wte.weight", "wpe.weight"), 0
 * fsc_layer_token_embedding's ("weight"). With tp the vocabulary is split (rank r holds rows [r V/size,
 * (r+1) V/size) of the token table; V divides by the group size; the output is the unsplit one bit for bit),
 * wpe replicated; with sp the output is this rank's B*T/size rows. */
typedef struct {
    int T, C, V, positions;
    fsc_comm *tp;
    int sp;
    int Vp;   /* the token table's rows, >= V (0: V): rows [V, Vp) are padding (gpt.h's padded_vocab), initialized
               * 0 and never looked up; with tp the Vp rows split (Vp divides by the group size) */
} fsc_embedding_opts;
fsc_status fsc_layer_embedding_opts(const fsc_embedding_opts *o, fsc_layer **out);
/* A pre-norm transformer block, out = h + mlp(norm2(h)) with h = in + attn(norm1(in)), over T rows of width C:
 *   FSC_BLOCK_GPT2: LayerNorm (eps 1e-5), attention with biases, GELU MLP (F 0: 4 C), GPT2Block's names:
 *     "ln_1.weight", "ln_1.bias", "attn.c_attn.weight" (C, 3C) packed q|k|v [in, out] and "attn.c_attn.bias",
 *     "attn.c_proj.weight" (C, C), "attn.c_proj.bias", "ln_2.*", "mlp.c_fc.weight" (C, F), "mlp.c_fc.bias",
 *     "mlp.c_proj.weight" (F, C), "mlp.c_proj.bias": the GPT's own block (nn.h's fsc_block_*, F = 4 C). With
 *     separate_qkv: "attn.{q,k,v,o}_proj.weight" [out, in] and their biases in place of c_attn and c_proj
 *     (nn.h's fsc_self_attn_*), any F. No rotary embeddings or grouped-query heads.
 *   FSC_BLOCK_LLAMA: RMSNorm (eps), attention without biases (rotary when rope_theta > 0, kv_heads dividing
 *     heads, 0: heads), SwiGLU MLP of width F (required), LlamaDecoderLayer's names: "self_attn.{q,k,v,o}_proj.
 *     weight", "mlp.{gate,up,down}_proj.weight", "input_layernorm.weight", "post_attention_layernorm.weight";
 *     the built-in Llama's decoder layer (llama.h's fsc_llama_model_create is built from these blocks). */
typedef enum { FSC_BLOCK_GPT2 = 0, FSC_BLOCK_LLAMA } fsc_block_kind;
typedef struct {
    fsc_block_kind kind;
    int T, C, heads, kv_heads, F;
    float rope_theta, eps;
    int separate_qkv;
    /* Mixture of experts (moe_experts E > 0): the MLP is an MoE MLP (fsc_layer_moe_mlp) of E GELU experts of
     * width F under "mlp." ("mlp.gate.weight", "mlp.experts.{e}.c_fc.weight", ...), in place of the block's MLP
     * parameters; the Llama's experts are GELU MLPs too (lib/moe has no SwiGLU experts). */
    int moe_experts, moe_top_k;   /* top-k: 1 or 2 (0: 1) */
    float moe_capacity, moe_aux;  /* capacity factor (0: 1.0); the load-balancing loss coefficient */
    fsc_comm *tp;        /* NULL: none; else attention's heads and the MLP's width split (GPT-2's packed c_attn
                          * in 3 parts q|k|v), norms replicated */
    int sp;              /* sequence parallelism (needs tp; T divides by the group size) */
} fsc_block_opts;
/* The defaults of a block of that kind: kv_heads = heads, eps 1e-5; FSC_BLOCK_GPT2 packed (separate_qkv 0) with
 * F = 4 C and no rotary embedding; FSC_BLOCK_LLAMA with F = fsc_llama_default_ffn(C) and rope_theta 10000
 * (llama.h's fsc_llama_config_default). */
fsc_block_opts fsc_block_opts_default(fsc_block_kind kind, int T, int C, int heads);
fsc_status fsc_layer_block(const fsc_block_opts *o, fsc_layer **out);
/* The loss layer of a language model: logits = in W^T with W "weight" (V, C), loss = cross entropy against
 * T int32 targets per sample (T loss terms; targets outside [0, V) are refused). Tie "weight" to an embedding's
 * wte (fsc_seq_layer.tie). */
fsc_status fsc_layer_lm_head(int T, int C, int V, fsc_layer **out);
/* The same with an optional final norm inside the layer, logits = norm(in) W^T, so a model's final norm and its
 * head are one layer (one pipeline stage, one FSDP unit; the Llama's head). The norm's parameters come first:
 * "<norm_name>weight" (and "<norm_name>bias" for LayerNorm) of width C starting at 1 (0), then head_name (V, C).
 * LayerNorm's eps is 1e-5 (nn.h's); eps is RMSNorm's (> 0). */
typedef enum { FSC_HEAD_NORM_NONE = 0, FSC_HEAD_NORM_LAYERNORM, FSC_HEAD_NORM_RMSNORM } fsc_head_norm;
typedef struct {
    int T, C, V;
    fsc_head_norm norm;
    float eps;
    const char *norm_name;  /* prefix of the norm's parameters (NULL: "norm."; the Llama: "model.norm.") */
    const char *head_name;  /* the head weight's name (NULL: "weight"; the Llama: "lm_head.weight") */
    fsc_comm *tp;           /* NULL: none; else the vocabulary split (Vp divides by the group size): this rank's
                             * logits only, tp.h's vocab-parallel cross entropy; the norm replicated */
    int sp;                 /* sequence parallelism (needs tp; T divides by the group size) */
    int Vp;                 /* the weight's rows, >= V (0: V): llm.c's padded vocabulary. Its first V rows make the
                             * logits (V columns: the loss and a sampler never see the padding), the padding rows'
                             * gradient is 0. With tp each rank holds Vp / size rows; the padding (the last
                             * ranks' rows past V) is in no logit and no softmax of the group; fewer than Vp / size
                             * padding rows (each rank holds a real row) */
} fsc_lm_head_opts;
fsc_status fsc_layer_lm_head_opts(const fsc_lm_head_opts *o, fsc_layer **out);
/* out = [in +] moe(in): a mixture-of-experts MLP (moe.h) over `rows` rows of width C per sample, E GELU experts
 * of width F (0: 4 C), top-k routing with the capacity factor, one dispatch group per micro-batch and rank;
 * parameters "gate.weight" (C, E) and per expert "experts.{e}.c_fc.weight" (C, F), ".c_fc.bias",
 * ".c_proj.weight" (F, C), ".c_proj.bias" (HF [in, out]; model.h's expert set). Backward adds aux x dscale x
 * (B rows) times the gradient of the load-balancing loss (the objective's share of the mean over the global
 * batch's groups); the model's aux_stats report its aux loss, assignments and drops; the experts spread over an
 * expert-parallel group with the model's set_expert_group (before records are made). */
typedef struct {
    int rows, C, F, experts, top_k;
    float capacity, aux;
    int residual;
} fsc_moe_mlp_opts;
fsc_status fsc_layer_moe_mlp(const fsc_moe_mlp_opts *o, fsc_layer **out);

/* The loss layer of a regressor: loss = sum over the n outputs of (in - target)^2, n float targets per sample
 * (n loss terms: the engine reports the mean squared error). Its predictions (its input) are the model's logits
 * (model.h; fsc_engine_predict). */
fsc_status fsc_layer_mse(size_t n, fsc_layer **out);
/* The loss layer of a classifier: loss = -log softmax(in)[target] over `classes` logits per sample (a linear layer
 * with a bias before it makes the usual classification head), one int32 class per sample in [0, classes) (checked
 * before upload), one loss term: the engine reports the mean cross entropy. Its input is the model's logits
 * (fsc_engine_predict). */
fsc_status fsc_layer_xent(int classes, fsc_layer **out);

/* ---- the sequential model ---------------------------------------------------------------------------- */

/* A tied parameter: the layer's parameter `param` is not a tensor of its own but the earlier layer's tensor
 * called `to` (full name), of the same shape (model.h's users; the model keeps the tied-gradient buffer). */
typedef struct {
    const char *param;
    const char *to;
} fsc_layer_tie;

typedef struct {
    fsc_layer *layer;
    const char *prefix;     /* prepended to the layer's parameter names: "layers.3." (NULL: "") */
    fsc_layer_tie tie[2];   /* param NULL: none */
} fsc_seq_layer;

/* The model of layers[0..n) on dev: layer 0 takes the samples' inputs (sample_input_bytes = its in_bytes),
 * each next layer the previous one's output (in_bytes = 4 x out_floats), the last is the loss layer. The
 * model takes the layers: fsc_model_free frees them with itself, also when this fails. Layer checkpointing
 * (the engine's checkpoint option) keeps each layer's input only and recomputes its forward in backward. */
fsc_status fsc_seq_model_create(fsc_device *dev, const fsc_seq_layer *layers, int n, fsc_model **out);
/* The layer l of a sequential model (NULL when m is not one or l is out of range). */
fsc_layer *fsc_seq_model_layer(fsc_model *m, int l);

FSC_END_DECLS

#endif
