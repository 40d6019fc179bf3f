/* A Llama model (Hugging Face LlamaForCausalLM's layout and semantics) as a model of model.h, built from the
 * modules in nn.h, so every strategy, pipeline and checkpoint trains it.
 *
 * Layers: 0 the token embedding, 1..L the decoder layers, L+1 the head (final RMSNorm, untied lm_head, softmax
 * cross entropy). A decoder layer is
 *   h   = x + o_proj(attn(rope(q_proj(n1)), rope(k_proj(n1)), v_proj(n1)))   n1 = input_layernorm(x)
 *   out = h + down_proj(silu(gate_proj(n2)) * up_proj(n2))                    n2 = post_attention_layernorm(h)
 * with RMSNorm out = x / sqrt(mean(x^2) + norm_eps) * w, causal attention of `heads` query heads of
 * head_dim = dim / heads, grouped-query attention when kv_heads < heads (query head h reads kv head
 * h / (heads / kv_heads), transformers' repeat_kv), and rotary embeddings on q and k as transformers'
 * apply_rotary_pos_emb with rotate_half (inv_freq = rope_theta^(-2i/head_dim), the frequencies concatenated
 * twice, positions 0..seq-1; fsc computes the angles in double, transformers in float32).
 *
 * Tensors in Hugging Face names, linear weights [out, in] as nn.Linear stores them, no biases, nothing tied:
 *   model.embed_tokens.weight (vocab, dim)                               layer 0
 *   per decoder layer i (layer i + 1), in this order:
 *     model.layers.{i}.self_attn.q_proj.weight (heads hd, dim)   .k_proj.weight, .v_proj.weight (kv_heads hd, dim)
 *     model.layers.{i}.self_attn.o_proj.weight (dim, heads hd)
 *     model.layers.{i}.mlp.gate_proj.weight, .up_proj.weight (ffn, dim)   .down_proj.weight (dim, ffn)
 *     model.layers.{i}.input_layernorm.weight (dim)   model.layers.{i}.post_attention_layernorm.weight (dim)
 *   model.norm.weight (dim), lm_head.weight (vocab, dim)                 layer L + 1
 * Initial values keyed by name (fsc_rng): linears and the embedding N(0, 0.02) (HF's initializer_range), norms 1.
 * Inputs and targets are int32 tokens, seq per sample; one loss term per token.
 * Mixture of experts: the moe_* fields of the configuration (below). */
#ifndef FSC_LLAMA_H
#define FSC_LLAMA_H
#include "export.h"
#include <stddef.h>
#include <stdint.h>
#include "status.h"
#include "device.h"
#include "model.h"
#include "comm.h"

FSC_BEGIN_DECLS

typedef struct {
    int layers;       /* decoder layers (HF num_hidden_layers) */
    int dim;          /* model width (hidden_size) */
    int heads;        /* query heads (num_attention_heads); divides dim, dim / heads even */
    int kv_heads;     /* key/value heads (num_key_value_heads); divides heads */
    int ffn;          /* the MLP's hidden width (intermediate_size) */
    int seq;          /* context length */
    int vocab;        /* vocabulary size */
    float rope_theta; /* rotary base (> 0) */
    float norm_eps;   /* RMSNorm epsilon (rms_norm_eps, > 0) */
    /* Mixture of experts, as the GPT's (gpt.h); moe_experts 0: a dense Llama (the other moe fields must then be
     * 0). Decoder layers N-1, 2N-1, ... (N = moe_every) replace their SwiGLU MLP with an MoE MLP (layers.h's
     * fsc_layer_moe_mlp) of E GELU experts of width ffn (lib/moe has no SwiGLU experts): such a layer's tensors
     * are q, k, v, o, then model.layers.{i}.mlp.gate.weight (dim, E) and per expert e
     * model.layers.{i}.mlp.experts.{e}.c_fc.weight (dim, ffn), .c_fc.bias (ffn), .c_proj.weight (ffn, dim),
     * .c_proj.bias (dim) ([in, out]), then the two norms. Weights N(0, 0.02), biases 0. The objective adds
     * moe_aux times the load-balancing losses; the experts spread over the engine's expert group (--ep). */
    int moe_experts, moe_top_k, moe_every;
    float moe_capacity, moe_aux;
    /* Vocabulary padding as llm.c's (gpt.h's padded_vocab): model.embed_tokens.weight and lm_head.weight have
     * padded_vocab rows; rows vocab .. padded_vocab-1 start at 0, are never looked up and in no logit (the head
     * multiplies the first vocab rows: the loss and the sampler see vocab columns), so their gradients are 0 and
     * they stay 0; the losses are the unpadded Llama's bit for bit. Weights files hold vocab rows (model.h's
     * file_rows); a file of either loads. With tensor parallelism each rank holds padded_vocab / tp rows (it must
     * divide) and the padding must be fewer rows than that. 0 or vocab: none. */
    int padded_vocab;
} fsc_llama_config;

/* Llama's MLP width rule (Meta's reference code): 2/3 x 4 x dim rounded up to a multiple of 256
 * (dim 4096: 11008; dim 128: 512). */
int fsc_llama_default_ffn(int dim);
/* A small model: 4 layers, dim 128, 4 heads, 4 kv heads, ffn fsc_llama_default_ffn(128) = 512, seq 64,
 * vocab 256, rope_theta 10000, norm_eps 1e-5. */
fsc_llama_config fsc_llama_config_default(void);
/* Clear error for impossible configurations (sizes out of range, dim % heads, heads % kv_heads, odd head
 * size, theta or eps not positive). */
fsc_status fsc_llama_config_validate(const fsc_llama_config *c);
int fsc_llama_num_tensors(const fsc_llama_config *c);   /* 1 + 9 L + 2 (+ 4 E - 2 per MoE layer) */
/* Whether decoder layer b (0-based) has an MoE MLP, and how many do. */
int fsc_llama_layer_is_moe(const fsc_llama_config *c, int b);
int fsc_llama_num_moe_layers(const fsc_llama_config *c);
size_t fsc_llama_num_params(const fsc_llama_config *c); /* total elements */
int fsc_llama_vocab_rows(const fsc_llama_config *c);    /* the token tables' rows: padded_vocab, else vocab */
/* The description of tensor i (name, shape, owning layer). */
fsc_status fsc_llama_param_info(const fsc_llama_config *c, int i, fsc_param_info *out);
/* Initial values of elements [first, first + n) of tensor i (host memory). */
void fsc_llama_init_values(const fsc_llama_config *c, uint64_t seed, int i, size_t first, size_t n, float *out);
/* The configuration as a JSON object ({"family":"llama","layers":..}), the text checkpoints record ("" for c NULL). */
void fsc_llama_config_json(const fsc_llama_config *c, char *buf, size_t cap);
/* Whether a checkpoint that recorded configuration `recorded` loads into a Llama of c: its family must be
 * "llama" (a GPT's, which records none, is refused by name) and every field hold c's value (the text of
 * fsc_llama_config_json; numbers compared as values, moe_top_k, moe_every and moe_capacity 0 as their default 1);
 * the message names the first field that differs and both values. */
fsc_status fsc_llama_config_check_json(const fsc_llama_config *c, const char *recorded);

/* The model on dev (validates cfg). It owns itself: fsc_model_free. Hand it to fsc_engine_create_model and
 * train with fsc_engine_step_model (inputs and targets int32 tokens); weight files (fsc_engine_save_weights /
 * load_weights) use the Hugging Face names above. */
fsc_status fsc_llama_model_create(fsc_device *dev, const fsc_llama_config *cfg, fsc_model **out);
/* The tensor-parallel form on the tensor group tp (NULL: fsc_llama_model_create's model): the layers of layers.h
 * with tp (docs/tensor_parallel.md): heads, kv heads, the MLP width and the vocabulary split over the group (each
 * must divide by its size), norms replicated; sp: sequence parallelism (seq divides by the group size). The
 * tensors keep their full names and declare their slices; they start from the full model's values. Every rank of
 * the group calls it. */
fsc_status fsc_llama_model_create_tp(fsc_device *dev, const fsc_llama_config *cfg, fsc_comm *tp, int sp,
                                     fsc_model **out);
/* The Llama's builder for parallel.h's fsc_engine_create_built (fsc_model_build_fn): arg is a
 * fsc_llama_build_arg; the engine hands it the tensor group (NULL without tensor parallelism). */
typedef struct {
    fsc_llama_config cfg;
    int sp;             /* sequence parallelism under a tensor group: the builder's own, not po.sequence_parallel
                         * (which it does not see: set both) */
} fsc_llama_build_arg;
fsc_status fsc_llama_build(void *arg, fsc_device *dev, fsc_comm *tp, fsc_model **out);

FSC_END_DECLS

#endif
