/* Generating tokens from a language model (model.h's logits operation), on one rank, for any model that gives
 * logits: the GPT and the Llama. A generator runs the model's forward over a context window of the model's
 * sample length (T tokens: the prompt and what was generated, the last T when longer, padded after the end with
 * token 0, which causal attention never reads) and reads the logits at the last real position. The model's
 * param[] must point at its weights on dev (an engine of kind none binds them: fsc_engine_create_model, then
 * fsc_engine_load_weights).
 *
 * Picking a token (fsc_sample_token) is deterministic in (seed, step): temperature 0 is greedy (the lowest index
 * of the largest logit); otherwise softmax(logits / temperature) over the top_k largest logits (all when 0; ties
 * at the k-th value kept, as nanoGPT's torch.topk cut does), one uniform draw of the keyed RNG (rng.h: key
 * (seed, "sample"), element `step`) against the cumulative sum in token order. +inf logits take the whole
 * probability, shared equally (softmax's limit), as the greedy pick takes the first of them.
 * Mixture-of-experts GPTs sample too, but the padding tokens are routed with the real ones, so an expert's capacity
 * may drop a real token that a window of exactly the context would keep.
 * Not here: tokenizers (byte models read text as bytes; programs give token ids), batched or cached decoding. */
#ifndef FSC_GENERATE_H
#define FSC_GENERATE_H
#include "export.h"
#include <stddef.h>
#include <stdint.h>
#include "status.h"
#include "device.h"
#include "model.h"

FSC_BEGIN_DECLS

/* The model a configuration text describes (model.h's config, as checkpoints and weights files record it:
 * safetensors.h's FSC_ST_META_MODEL): a GPT-2 (no "family", or "gpt2"; gpt.h), a Llama ("family":"llama";
 * llama.h) or a family a program registered (family.h), on dev. FSC_ERR_FORMAT naming the field for a text of no
 * known family, a bad field or, for the built-in families, a field neither of them reads ("rope-theta" for
 * "rope_theta"). Free with fsc_model_free. */
fsc_status fsc_model_from_config(fsc_device *dev, const char *config, fsc_model **out);
/* model.h's fsc_model_check_held (flags as there) of the model config describes, built on the counting device (no
 * memory), for a reader that holds tensors and a configuration text but no model (ckpt_tool verify: a checkpoint's
 * parameters against its record; the trainer's --load: a weights file's entries against its record).
 * FSC_ERR_FORMAT naming the tensor ("... which its llama model declares"); FSC_ERR_INVALID, the family's message,
 * when config's family refuses it (a field missing, of another type or out of range: no such model is built);
 * FSC_ERR_UNSUPPORTED when it cannot be told here: config is no JSON object of a family this program knows
 * (fsc_model_family_of), or its family cannot build it on the counting device (no memory, a program's family that
 * needs more). */
fsc_status fsc_model_config_check_held(const char *config, const fsc_param_info *held, int n, int flags);

typedef struct {
    float temperature;  /* 0: greedy; > 0: sample softmax(logits / temperature) */
    int top_k;          /* keep the top_k largest logits (0: every token) */
    uint64_t seed;      /* the draws' key */
} fsc_sample_opts;

/* The token picked from logits[0..V) at generation step `step` (see above); scratch holds V floats (NULL: the
 * greedy pick). -1 when logits or o is NULL, V < 1, the options are invalid (temperature < 0 or not finite,
 * top_k < 0), a logit is NaN or every logit is -inf. */
int32_t fsc_sample_token(const float *logits, int V, const fsc_sample_opts *o, uint64_t step, float *scratch);

typedef struct fsc_generator fsc_generator;
/* A generator over m (its weights bound on dev). FSC_ERR_INVALID when m gives no logits or its samples are not
 * token sequences (inputs and targets of loss_terms int32 each). */
fsc_status fsc_generator_create(fsc_device *dev, fsc_model *m, fsc_generator **out);
/* The context window (tokens per forward: the model's sequence length). */
int fsc_generator_context(const fsc_generator *g);
/* Forward over the last window of tokens[0..n) (n >= 1); *logits (host, owned by g, valid until the next call)
 * the vocab logits of the token after tokens[n-1]. A token of the window out of the model's vocabulary is refused
 * (FSC_ERR_INVALID naming it and, when n is longer than the window, the window's place in tokens). */
fsc_status fsc_generator_next(fsc_generator *g, const int32_t *tokens, int n, const float **logits, int *vocab);
/* Append n_new tokens to tokens[0..n) in place (tokens holds n + n_new; n >= 1, also for n_new 0), step k picking
 * with fsc_sample_token at step k. */
fsc_status fsc_generate(fsc_generator *g, int32_t *tokens, int n, int n_new, const fsc_sample_opts *o);
void fsc_generator_free(fsc_generator *g);

FSC_END_DECLS

#endif
