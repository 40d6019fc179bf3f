/* Private: the mixture-of-experts part the MoE layers share (moe_mlp.c: the MoE MLP layer; block_moe.c: the
 * transformer blocks with an MoE MLP): the moe.h layer over the current expert group, its parameters (the gate,
 * then each expert's four tensors) and the layer ops of model.h's expert interface (record state, statistics,
 * expert group, each parameter's expert). */
#ifndef FSC_LAYERS_MOE_IMPL_H
#define FSC_LAYERS_MOE_IMPL_H
#include "fsc/moe.h"
#include "moe/moe_split.h"
#include "layers_impl.h"

typedef struct {
    fsc_moe_config mc;   /* dim, hidden, experts, top_k, capacity_factor; name "mlp" */
    float aux;           /* coefficient of the load-balancing loss */
    int rows;            /* tokens per sample */
    int first;           /* index of the gate among the layer's parameters */
    fsc_comm *ep;        /* the expert group (NULL: every expert here) */
    fsc_moe *moe;        /* made for ep on the first record's device (moe_state_create) */
} moe_part;

/* The state of one record: the MoE layer's routing record and the statistics of its last forward. */
typedef struct {
    fsc_moe_rec *rec;
    fsc_moe_stats st;
} moe_state;

/* A layer with an MoE part: these two first in its struct. */
typedef struct {
    fsc_layer l;
    moe_part mp;
} moe_base;

/* Check the options and fill the part (no device work). */
fsc_status moe_part_init(moe_part *mp, const char *what, int rows, int C, int F, int E, int k, float cf, float aux);
/* Declare the gate and the experts as the layer's parameters under prefix ("mlp." in a block); frees the layer on
 * failure (layer_param). */
fsc_status moe_part_declare(fsc_layer **l, moe_part *mp, const char *prefix);
/* forward: out (B rows, C) = moe(in); backward: dinp (overwritten) and the part's parameter gradients given dout;
 * p and g the layer's tables (the part's entries from mp->first on). */
fsc_status moe_part_forward(const moe_part *mp, const fsc_layer_call *c, float *out, const float *in);
fsc_status moe_part_backward(const moe_part *mp, const fsc_layer_call *c, float *dinp, const float *dout);
/* The split backward (layers.h's split; moe/moe_split.h): the stash's bytes for B samples (a multiple of 256), the
 * input part (dinp only; both all-to-alls; writes stash) and the weight part (the part's parameter gradients from
 * the stash, no collective). */
size_t moe_part_split_bytes(const moe_part *mp, int B);
fsc_status moe_part_backward_input(const moe_part *mp, const fsc_layer_call *c, float *dinp, const float *dout,
                                   void *stash);
fsc_status moe_part_backward_weight(const moe_part *mp, const fsc_layer_call *c, const void *stash);
/* The layer ops of an moe_base layer. */
fsc_status moe_state_create(fsc_layer *l, fsc_device *dev, int B, void **state);
void moe_state_free(const fsc_layer *l, void *state);
void moe_aux(const fsc_layer *l, const void *state, fsc_model_aux *sum);
fsc_status moe_set_expert_group(fsc_layer *l, fsc_comm *ep);
int moe_param_expert(const fsc_layer *l, int k);
void moe_part_free(moe_part *mp);
/* The block layer with an MoE MLP (block_moe.c), for fsc_layer_block: o checked, kv_heads and F resolved. */
fsc_status fsc_layer_block_moe(const fsc_block_opts *o, fsc_layer **out);

#endif
