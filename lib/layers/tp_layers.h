/* Private: the constructors of the tensor-parallel forms of the built-in layers (tp_basic.c, tp_transformer.c),
 * called by the plain constructors of layers.h when the options name a tensor group (tp) or sp. */
#ifndef FSC_TP_LAYERS_H
#define FSC_TP_LAYERS_H
#include "fsc/layers.h"

fsc_status fsc_tp_layer_linear(const fsc_linear_opts *o, fsc_layer **out);
fsc_status fsc_tp_layer_embedding(const fsc_embedding_opts *o, fsc_layer **out);
fsc_status fsc_tp_layer_lm_head(const fsc_lm_head_opts *o, fsc_layer **out);
fsc_status fsc_tp_layer_attention(const fsc_attention_opts *o, fsc_layer **out);
/* swiglu 0: GPT-2's GELU MLP, 1: the Llama's SwiGLU MLP */
fsc_status fsc_tp_layer_mlp(const fsc_mlp_opts *o, int swiglu, fsc_layer **out);
/* o is checked by the caller (block.c) and has kv_heads and F resolved */
fsc_status fsc_tp_layer_block(const fsc_block_opts *o, fsc_layer **out);

#endif
