/* Private to lib/model: the Llama model object (llama.c) and its operations on records (llama_run.c). */
#ifndef FSC_LLAMA_IMPL_H
#define FSC_LLAMA_IMPL_H
#include "fsc/llama.h"

/* Tensors per decoder layer, in the order of llama.h (Hugging Face's state dict order). */
#define LLAMA_LAYER_PARAMS 9
enum { LL_Q = 0, LL_K, LL_V, LL_O, LL_GATE, LL_UP, LL_DOWN, LL_NORM1, LL_NORM2 };

typedef struct {
    fsc_model m;            /* first: the model handed out */
    fsc_llama_config cfg;
    fsc_device *dev;
    fsc_param_info *info;   /* (n_tensors) */
    float **param, **grad;  /* (n_tensors) set by the engine's strategy */
    float *zero_pos;        /* (seq, dim) zeros: the position table the embedding kernel adds */
} llama;

/* Floats a decoder layer's record keeps for a micro-batch of B sequences. */
size_t llama_layer_saved_floats(const fsc_llama_config *c, int B);

fsc_status llama_acts_create(void *ctx, const fsc_model_acts_opts *o, fsc_model_acts **out);
void llama_acts_free(void *ctx, fsc_model_acts *a);
size_t llama_acts_bytes(void *ctx, const fsc_model_acts *a);
fsc_status llama_set_batch(void *ctx, fsc_model_acts *a, const void *inputs, const void *targets);
float *llama_stream(void *ctx, fsc_model_acts *a, fsc_stream which);
size_t llama_stream_floats(void *ctx, int B);
fsc_status llama_forward(void *ctx, fsc_model_acts *a, const fsc_model_hooks *h, double *loss_sum);
fsc_status llama_backward(void *ctx, fsc_model_acts *a, const fsc_model_hooks *h, float dscale);

#endif
