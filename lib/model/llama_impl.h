/* Private: the Llama's description shared by llama.c (the dense Llama) and llama_moe.c (MoE decoder layers). */
#ifndef FSC_LLAMA_IMPL_H
#define FSC_LLAMA_IMPL_H
#include "fsc/llama.h"

/* Tensor j of the dense numbering (1 + 9 L + 2 tensors) of c's shapes. */
fsc_status llama_dense_param_info(const fsc_llama_config *c, int j, fsc_param_info *out);
/* Tensor i of a Llama with MoE layers; the MoE fields' checks. */
fsc_status llama_moe_param_info(const fsc_llama_config *c, int i, fsc_param_info *out);
fsc_status llama_moe_validate(const fsc_llama_config *c);

#endif
