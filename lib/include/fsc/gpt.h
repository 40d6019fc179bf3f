/* A GPT-2 model built from the modules in nn.h.
 *
 * The model is a sequence of L+2 layers: layer 0 the token + position embedding, layers 1..L the
 * pre-LayerNorm transformer blocks, layer L+1 the head (final LayerNorm, output projection tied to the
 * token embedding, softmax cross entropy). Parallel wrappers hook into the layer boundaries; pipelines
 * run a range of layers.
 *
 * Parameters are tensors in Hugging Face GPT-2 order, names and shapes (fsc_gpt_param_info); linear
 * weights are stored [in, out] as HF's Conv1D, so the file layout is the memory layout. The model owns no
 * parameter memory: m->param[i] and m->grad[i] are device pointers that single-rank code points into one
 * flat buffer (fsc_gpt_bind_flat) and FSDP points into each unit's gathered buffer while it is gathered.
 *
 * Tied embedding: the head's gradient with respect to wte goes into m->dwte_head (overwritten by every
 * head backward); the embedding backward adds it to grad[wte] before its own token rows. Accumulation
 * order is therefore the same whether the head and the embedding run on one rank or on two pipeline stages.
 * A record whose range holds layer 0 but not the head adds whatever m->dwte_head holds (the caller puts the
 * head stage's dwte_head there; zero until then); a record with the head but not layer 0 leaves the head's part
 * in m->dwte_head for the caller. dwte_head is made (zeroed) with the first record whose range holds layer 0 or
 * the head and is NULL before: on a pipeline stage that holds neither the embedding nor the head it stays NULL
 * (such a stage holds no V x C buffer).
 *
 * Mixture of experts (moe_experts E > 0; docs/tensor_parallel.md): blocks N-1, 2N-1, ... (N = moe_every)
 * replace their MLP with an MoE MLP (moe.h) of E experts, each an MLP of the dense one's shape. Such a
 * block has 9 + 4 E tensors: the dense block's first 8 (ln_1, attn, ln_2), then
 *   h.{i}.mlp.gate.weight (C, E), and for each expert e in order
 *   h.{i}.mlp.experts.{e}.c_fc.weight (C, 4C), .c_fc.bias (4C), .c_proj.weight (4C, C), .c_proj.bias (C).
 * Initial values as the dense MLP's (the gate as a weight, N(0, 0.02)). A dispatch group is the B T tokens
 * of one micro-batch on one rank (GShard's and FairScale's unit: the capacity is per rank and micro-batch).
 * The objective adds moe_aux times the sum over MoE blocks of their load-balancing loss, each the mean over
 * the global batch's dispatch groups; the head reports the cross entropy alone, fsc_gpt_acts_moe_stats the
 * rest. E = 0 is the dense GPT, unchanged. */
#ifndef FSC_GPT_H
#define FSC_GPT_H
#include "export.h"
#include <stddef.h>
#include <stdint.h>
#include "status.h"
#include "device.h"
#include "moe.h"
#include "nn.h"
#include "model.h"

FSC_BEGIN_DECLS

typedef struct {
    int layers, dim, heads, seq, vocab;
    /* mixture of experts; moe_experts 0: a dense GPT (the other moe fields must then be 0) */
    int moe_experts;         /* E experts in every MoE block */
    int moe_top_k;           /* 1 (Switch) or 2 (GShard); 0: 1 */
    int moe_every;           /* N: blocks N-1, 2N-1, ... are MoE blocks; 0: 1 (every block) */
    float moe_capacity;      /* capacity factor; 0: 1.0 */
    float moe_aux;           /* coefficient of the load-balancing loss in the objective (0: not trained) */
    /* Vocabulary padding as llm.c's (GPT-2: vocab 50257, padded_vocab 50304): wte has padded_vocab rows; rows
     * vocab .. padded_vocab-1 start at 0 and are never looked up nor in the logits (the head multiplies the first
     * vocab rows: the loss and the sampler see vocab columns), so their gradients are 0 and they stay 0 (AdamW's
     * decay of 0 is 0); the losses are the unpadded model's bit for bit. Weights files hold vocab rows (file_rows,
     * model.h); a file of either loads. 0 or vocab: none. With tensor parallelism (llama.h's padded_vocab says how)
     * padded_vocab divides by the group, and the padding is fewer rows than padded_vocab / tp. */
    int padded_vocab;
} fsc_gpt_config;
/* GPT-2 small, the HF GPT2Config defaults: 12 layers, width 768, 12 heads, context 1024, vocabulary
 * 50257; dense (no experts). */
fsc_gpt_config fsc_gpt_config_default(void);

/* Parameters per block, in HF order. */
#define FSC_GPT_BLOCK_PARAMS 12
enum {
    FSC_P_WTE = 0, FSC_P_WPE = 1, /* then 12 per block, then ln_f.weight, ln_f.bias */
};
/* offsets inside a block: nn.h's FSC_B_* (the block's own parameter order) */

/* Tensors are model.h's fsc_param_info: HF names and shapes; layer 0 embedding, 1..L blocks, L+1 head; wte is
 * owned by layer 0 and used by L+1 (users); expert the MoE expert, -1 for every other tensor (the gate too). */

/* Clear error for impossible configurations (dim % heads, sizes <= 0, ...). */
fsc_status fsc_gpt_config_validate(const fsc_gpt_config *c);
int fsc_gpt_num_tensors(const fsc_gpt_config *c);            /* 2 + 12 L + 2 for a dense GPT */
int fsc_gpt_vocab_rows(const fsc_gpt_config *c);             /* wte's rows: padded_vocab, else vocab (0: NULL) */
fsc_status fsc_gpt_param_info(const fsc_gpt_config *c, int i, fsc_param_info *out);
size_t fsc_gpt_num_params(const fsc_gpt_config *c);           /* total elements */
int fsc_gpt_param_index(const fsc_gpt_config *c, const char *name); /* -1 if unknown (or NULL) */
/* Index of the first tensor of block b (0-based): 2 + 12 b in a dense GPT; of ln_f.weight: b = L. */
int fsc_gpt_block_first_tensor(const fsc_gpt_config *c, int b);
/* Whether block b (0-based) is an MoE block, and its number of tensors (12, or 9 + 4 E). */
int fsc_gpt_block_is_moe(const fsc_gpt_config *c, int b);
int fsc_gpt_block_num_tensors(const fsc_gpt_config *c, int b);
/* MoE blocks of the model. */
int fsc_gpt_num_moe_blocks(const fsc_gpt_config *c);
/* Training FLOPs per token (forward and backward; model.h's fsc_lm_flops_per_token): the parameters that multiply
 * are all but the position embedding (and a padded vocabulary's padding rows), with experts only the top-k experts
 * of each MoE block. */
double fsc_gpt_flops_per_token(const fsc_gpt_config *c);

/* Initial values of elements [first, first+n) of tensor i, from the keyed RNG (seed, name, index):
 * weights N(0, 0.02), residual projections (attn.c_proj, mlp.c_proj, mlp.experts.{e}.c_proj) N(0, 0.02/sqrt(2L)),
 * biases 0, LayerNorm weights 1, wte's padding rows 0 (its other rows as an unpadded GPT's). Host memory. */
void fsc_gpt_init_values(const fsc_gpt_config *c, uint64_t seed, int i, size_t first, size_t n, float *out);

typedef struct fsc_gpt {
    fsc_gpt_config cfg;
    fsc_device *dev;
    int n_tensors;
    fsc_param_info *info;   /* n_tensors */
    float **param;          /* n_tensors device pointers, NULL while not materialized */
    float **grad;           /* n_tensors device pointers, NULL while not materialized */
    float *dwte_head;       /* (V, C) head part of the wte gradient, FSC_TAG_GRADS; NULL until a record holds layer 0
                             * or the head (a pipeline stage holding neither: always) */
    /* MoE: the expert-parallel group ep (NULL: one rank holds every expert; the MoE blocks of layers.h hold
     * their moe.h layers). A rank reads its experts' tensors only: the others' param/grad pointers may stay NULL. */
    fsc_comm *ep;
    fsc_model *model;       /* the model these are the tables of (fsc_gpt_create's; NULL for another view) */
} fsc_gpt;

/* The GPT is built from layers (layers.h: embedding, FSC_BLOCK_GPT2 blocks, LM head with ln_f tied to wte) by
 * fsc_gpt_model_create; fsc_gpt_create makes that model and returns its fsc_gpt view (same tables, dwte_head the
 * model's tied-gradient buffer of wte); fsc_gpt_free frees the model. */
fsc_status fsc_gpt_create(fsc_device *dev, const fsc_gpt_config *cfg, fsc_gpt **out);
/* The GPT as a model of model.h, owning its fsc_gpt (free with fsc_model_free): layers 0 .. L+1, wte tied with
 * dwte_head as its tied gradient, inputs and targets int32 tokens (seq per sample), one loss term per token,
 * the configuration JSON {"layers", "dim", "heads", "seq", "vocab"[, MoE fields]}. fsc_gpt_model_gpt: the
 * fsc_gpt inside such a model (NULL for any other model). */
fsc_status fsc_gpt_model_create(fsc_device *dev, const fsc_gpt_config *cfg, fsc_model **out);
/* The same GPT on tensor group tp (NULL: fsc_gpt_model_create) from the layers' tensor-parallel forms: heads, the
 * MLP width and the vocabulary split (c_attn in 3 parts q|k|v), norms, wpe and row-parallel biases replicated,
 * the head tied to the rank's slice of wte; sp: sequence parallelism (seq divides by the group size). The tensors
 * keep their full names and declare their slices (model.h), starting from the full model's values. No MoE
 * blocks. Every rank of the group calls it (parallel.h's fsc_engine_create_built with the GPT's builder). */
fsc_status fsc_gpt_model_create_tp(fsc_device *dev, const fsc_gpt_config *cfg, fsc_comm *tp, int sp,
                                   fsc_model **out);
fsc_gpt *fsc_gpt_model_gpt(fsc_model *m);
/* The configuration as the JSON object checkpoints record (cap bytes with the NUL; "" for c NULL), and whether
 * a recorded one loads into a model of configuration c: the shape (layers, width, heads, context, vocabulary),
 * the experts, the blocks holding them, and an MoE model's top-k, capacity factor and moe_aux must match (they
 * change the routing and the objective of a resumed run). The GPT records no "family"; a configuration naming
 * another family than "gpt2" (the Llama's "llama") is refused. */
void fsc_gpt_config_json(const fsc_gpt_config *c, char *buf, size_t cap);
fsc_status fsc_gpt_config_check_json(const fsc_gpt_config *c, const char *recorded);
/* Whether the n parameters a checkpoint holds (name and shape; ckpt.h's fsc_ckpt_meta_params) are exactly those
 * of the configuration `recorded`, when it is the GPT's ("layers" and no key but the GPT's; FSC_OK for any other
 * model's): its fields integers in range, the configuration valid, every tensor once with its shape. FSC_ERR_FORMAT
 * otherwise, the message naming the field or the tensor. The GPT model's check_tensors; ckpt_tool verify calls
 * it on a checkpoint read without a model. */
fsc_status fsc_gpt_check_tensors(const char *recorded, const fsc_param_info *params, int n);
void fsc_gpt_free(fsc_gpt *m);
/* Spread the experts over an expert-parallel group (moe.h): rank r of ep holds experts [r E/G, (r+1) E/G).
 * Collective over ep when the model runs; call before creating activation records. ep must outlive m. */
fsc_status fsc_gpt_set_expert_group(fsc_gpt *m, fsc_comm *ep);
/* The experts this rank holds: [first, first + count) (every expert without a group; 0, 0 when dense). */
void fsc_gpt_local_experts(const fsc_gpt *m, int *first, int *count);
/* Point param[i]/grad[i] into flat buffers laid out in tensor order (offsets = prefix sums of numel).
 * grads may be NULL (inference). */
void fsc_gpt_bind_flat(fsc_gpt *m, float *params, float *grads);

/* Hooks called around every layer by fsc_gpt_forward/fsc_gpt_backward (any may be NULL). */
typedef fsc_model_hooks fsc_gpt_hooks;

/* Activations of one micro-batch (B sequences of T = seq tokens: the layers are built for the context) for layers
 * [first, last]: the model's record, one device allocation under FSC_TAG_ACTS; the passes' scratch (the layers'
 * work, the gradients between layers) is the model's, one for all its records (FSC_TAG_WORKSPACE, grown by a
 * larger record, released with the last), so a model runs one pass at a time (a hook starting another is refused).
 * With checkpoint set, layers keep only their input and recompute their forward in backward, bit-identically,
 * right after the layer's pre_backward hook (no forward hooks are called for the recomputation); offload_inputs
 * keeps those inputs in host memory. MoE blocks are checkpointed too (routing recomputes deterministically). */
typedef struct fsc_gpt_acts fsc_gpt_acts;
typedef struct {
    int B, T;
    int first, last;     /* layer range; 0 and L+1 for the whole model */
    int checkpoint;      /* recompute layers in backward */
    int offload_inputs;  /* with checkpoint: keep layer inputs in host memory */
} fsc_gpt_acts_opts;
/* The whole model (layers 0 .. L+1) for B sequences of c->seq tokens, no checkpointing. */
fsc_gpt_acts_opts fsc_gpt_acts_opts_default(const fsc_gpt_config *c, int B);
fsc_status fsc_gpt_acts_create(fsc_gpt *m, const fsc_gpt_acts_opts *o, fsc_gpt_acts **out);
void fsc_gpt_acts_free(fsc_gpt_acts *a);

/* Set the micro-batch: host tokens and targets (B*T each; tokens may be NULL if the embedding is not in range,
 * targets if the head is not). */
fsc_status fsc_gpt_acts_set_batch(fsc_gpt_acts *a, const int32_t *tokens, const int32_t *targets);
/* The stage boundary streams (device pointers, (B,T,C)): the input of layer `first` when first > 0,
 * the output of layer `last` when last < L+1, the gradient w.r.t. the output of `last` (set before
 * backward when last < L+1) and the gradient w.r.t. the input of `first` (after backward, first > 0).
 * NULL where the range has no such boundary. The input must keep its contents until backward is done.
 * grad_output and grad_input are the same buffer (the gradient stream is updated in place): read the
 * gradient input before writing the next gradient output into this record. */
float *fsc_gpt_acts_input(fsc_gpt_acts *a);
float *fsc_gpt_acts_output(fsc_gpt_acts *a);
float *fsc_gpt_acts_grad_output(fsc_gpt_acts *a);
float *fsc_gpt_acts_grad_input(fsc_gpt_acts *a);

/* Run layers [first, last] forward. If the head is in range, *loss_sum receives the sum (in double,
 * ascending token order) of the B*T per-token losses; otherwise 0. */
fsc_status fsc_gpt_forward(fsc_gpt *m, fsc_gpt_acts *a, const fsc_gpt_hooks *h, double *loss_sum);
/* Run layers [last .. first] backward, accumulating (+=) into m->grad. dscale multiplies the per-token
 * loss gradient: pass loss_scale / (global_batch * T) for the mean over the global batch. An MoE block's
 * load-balancing loss gets moe_aux x dscale x B T (its share of the mean over the global batch's groups).
 * Backward runs once per forward (FSC_ERR_STATE otherwise). */
fsc_status fsc_gpt_backward(fsc_gpt *m, fsc_gpt_acts *a, const fsc_gpt_hooks *h, float dscale);
/* After a forward of a record holding the head: its logits, device floats (B, T, V), valid until the next forward;
 * NULL when the head is not in range. */
const float *fsc_gpt_acts_logits(const fsc_gpt_acts *a);
/* Peak activation bytes this record holds on the device (for reports); offloaded host copies excluded. */
size_t fsc_gpt_acts_bytes(const fsc_gpt_acts *a);
/* The MoE blocks in the record's range, summed over them, from its last forward: aux_loss the sum of the
 * blocks' load-balancing losses (this rank's group), tokens, assigned and dropped the sums of the blocks'
 * counts, capacity the slots per expert of one block. Zero without MoE blocks. */
void fsc_gpt_acts_moe_stats(const fsc_gpt_acts *a, fsc_moe_stats *out);
/* The MoE layer's record of block b (0-based) in this record, for fsc_moe_routing; NULL when block b is
 * dense or outside the range. */
const fsc_moe_rec *fsc_gpt_acts_moe_rec(const fsc_gpt_acts *a, int b);

/* Full weights as safetensors in the HF GPT-2 layout. Single-rank: reads/writes m->param. Save writes float32;
 * load reads F32, BF16 or F16 under GPT2Model's names or GPT2LMHeadModel's ("transformer." prefix, its
 * lm_head.weight accepted when it equals wte and refused when it differs). */
fsc_status fsc_gpt_save(fsc_gpt *m, const char *path);
fsc_status fsc_gpt_load(fsc_gpt *m, const char *path);
/* Check a file's keys, dtypes and shapes against cfg; the message names the first problem. */
fsc_status fsc_gpt_check_file(const fsc_gpt_config *cfg, const char *path);

FSC_END_DECLS

#endif
