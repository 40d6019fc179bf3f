/* Helpers the built-in layers share (basic.c, transformer.c): allocation of a layer struct with its ops, and
 * rows of a call. */
#ifndef FSC_LAYERS_IMPL_H
#define FSC_LAYERS_IMPL_H
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fsc/layers.h"
#include "fsc/nn.h"

/* calloc a layer struct of `size` bytes (a built-in layer's struct, fsc_layer first) of the given kind. */
static inline fsc_status layer_new(size_t size, const char *kind, const fsc_layer_ops *ops, fsc_layer **out) {
    *out = NULL;
    fsc_layer *l = calloc(1, size);
    if (!l) return fsc_error(FSC_ERR_NOMEM, "layer %s: out of host memory", kind);
    snprintf(l->kind, sizeof l->kind, "%s", kind);
    l->ops = ops;
    *out = l;
    return FSC_OK;
}

/* Declare a parameter of a built-in layer (shape d0 x d1, d1 0 for a vector); frees the layer on failure. */
static inline fsc_status layer_param(fsc_layer **l, const char *name, int64_t d0, int64_t d1, fsc_init init) {
    int64_t shape[2] = { d0, d1 };
    fsc_status s = fsc_layer_add_param(*l, name, d1 ? 2 : 1, shape, init);
    if (s != FSC_OK) {
        fsc_layer_free(*l);
        *l = NULL;
    }
    return s;
}

/* Llama's MLP width rule (Meta's reference code): 2/3 x 4 x dim rounded up to a multiple of 256. It lives
 * here, below the model (llama.h's fsc_llama_default_ffn returns it), because the Llama block's defaults use it. */
/* Either embedding of layers.h (positions 1: wte and wpe; 0: the token table alone) over a table of Vp >= V rows
 * (transformer.c; rows [V, Vp) padding: initialized 0, never looked up). */
fsc_status layers_embedding(int T, int C, int V, int Vp, int positions, fsc_layer **out);

static inline int layers_llama_ffn(int dim) {
    long long h = 8LL * dim / 3; /* int(2 * 4 * dim / 3) */
    h = (h + 255) / 256 * 256;
    return h > INT_MAX ? INT_MAX : h < INT_MIN ? INT_MIN : (int)h; /* saturated: the layer refuses such a width */
}
/* 4 C, GPT-2's MLP width, saturated to an int (no overflow for any C: the layer refuses such a width) */
static inline int layers_4c(int C) { return C > INT_MAX / 4 ? INT_MAX : C < INT_MIN / 4 ? INT_MIN : 4 * C; }

/* The split of fsc_self_attn_backward_parts (transformer.c; the attention layers' and the blocks', unsplit and
 * tensor-parallel (tp_transformer.c, on a rank's heads)). The input part keeps dq, dk and dv (after the rotary
 * embedding's backward) over r's q, k and v, which the weight part does not read, and writes dinp (overwritten; NULL:
 * not wanted); work: fsc_self_attn_work_floats. The weight part runs the four weight products from them, dout and r's
 * y, in the whole backward's order: the same kernels on the same values, and no product of the input part again.
 * r->inp is the attention's input. */
fsc_status layers_attn_split_input(fsc_device *dev, const fsc_self_attn_rec *r, const fsc_self_attn_params *p,
                                   const float *dout, float *dinp, float *work);
fsc_status layers_attn_split_weight(fsc_device *dev, const fsc_self_attn_rec *r, const fsc_self_attn_params *p,
                                    const fsc_self_attn_grads *g, const float *dout);

/* The MLPs' splits (transformer.c; the MLP layers' and the composed blocks', unsplit and tensor-parallel on a rank's
 * hidden units), in the whole backward's order. The SwiGLU's (fsc_swiglu_mlp_backward_parts; w, g: gate, up, down):
 * the input part writes dgate and dup over the record's gate and up and dinp (overwritten; NULL: not wanted); work
 * (N, F); the weight part runs the three weight products from them and dout. The GELU MLP's (Conv1D weights [in, out]
 * with biases; x its input, h the first product's output, act the GELU's; w, g: fc weight and bias, proj weight and
 * bias): the input part writes dh over h and dinp; work (N, F); the weight part runs the two weight products from dh
 * and dout. layers_gelu_mlp_backward is its whole backward (the MLP layer's, the composed GPT-2 block's and the
 * tensor-parallel MLP's, unsplit): the same products and GELU, each product's gradients with its input gradient,
 * dh into the scratch dh and the gradient at act into da ((N, F) each), h kept; dinp overwritten (NULL: not
 * wanted), g accumulated. */
fsc_status layers_swiglu_split_input(fsc_device *dev, const fsc_swiglu_mlp_rec *r, const float *const *w,
                                     const float *dout, float *dinp, float *work);
fsc_status layers_swiglu_split_weight(fsc_device *dev, const fsc_swiglu_mlp_rec *r, const float *const *w,
                                      float *const *g, const float *dout);
typedef struct {
    size_t N;
    int C, F;
    const float *x, *act;
    float *h;
} layers_gelu_mlp;
fsc_status layers_gelu_mlp_split_input(fsc_device *dev, const layers_gelu_mlp *m, const float *const *w,
                                       const float *dout, float *dinp, float *work);
fsc_status layers_gelu_mlp_split_weight(fsc_device *dev, const layers_gelu_mlp *m, const float *const *w,
                                        float *const *g, const float *dout);
fsc_status layers_gelu_mlp_backward(fsc_device *dev, const layers_gelu_mlp *m, const float *const *w, float *const *g,
                                    const float *dout, float *dinp, float *da, float *dh);

static inline size_t r256(size_t b) { return (b + 255) / 256 * 256; }
#define LAYER_STD 0.02f

#endif
