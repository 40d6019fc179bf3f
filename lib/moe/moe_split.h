/* Private: the mixture-of-experts layer's split backward (moe.c), for the layers that split their backward
 * (lib/layers: layers.h's ops->split, a zero-bubble pipeline's B and W).
 * The input part computes dinp and runs every collective of the backward (both all-to-alls), and keeps in a
 * stash the output gradients of the weight products: the experts' output gradients on the expert side (slots,
 * C), which only an all-to-all could give again, their hidden gradients (slots, H: c_fc's output gradients) and
 * the gate logits' gradient (S, E). The weight part, later and once, adds the gate's and this rank's experts'
 * gradients from the same record and stash with no collective: the weight products only. Input part then
 * weight part give fsc_moe_backward_terms's bits, dinp and gradients. */
#ifndef FSC_MOE_SPLIT_H
#define FSC_MOE_SPLIT_H
#include "fsc/moe.h"

/* Device bytes of the stash for records of S tokens in `groups` groups under cfg (0 for an invalid one). */
size_t fsc_moe_split_bytes(const fsc_moe_config *cfg, int S, int groups);
/* dinp (S, C) = (overwrites) the gradient w.r.t. the input, as fsc_moe_backward; no parameter gradient.
 * Collective over ep. stash: fsc_moe_split_bytes bytes, written. */
fsc_status fsc_moe_backward_input(fsc_moe *m, float *dinp, fsc_moe_rec *rec, const float *dout,
                                  const float *const *p, float daux, void *stash);
/* The parameter gradients += into g (NULL: the layer's own; term as in fsc_moe_backward_terms) from the record and
 * the stash its input part wrote. Not collective. */
fsc_status fsc_moe_backward_weight(fsc_moe *m, float *const *g, fsc_moe_rec *rec, const float *const *p,
                                   const void *stash,
                                   fsc_status (*term)(void *term_ctx, float *grad, const float *piece, size_t n),
                                   void *term_ctx);

#endif
