/* Private: the routing of a mixture-of-experts layer (moe_route.c, host code) shared with the layer
 * (moe.c). */
#ifndef FSC_MOE_IMPL_H
#define FSC_MOE_IMPL_H
#include "fsc/moe.h"

/* The routing of S tokens in `groups` groups over E experts with k choices (see moe.h). Slots are laid
 * out (E, groups, cap): slot (e, g, c) is index (e * groups + g) * cap + c. */
typedef struct {
    int S, E, k, groups, cap;
    float *prob;        /* (S, E) softmax of the gate logits */
    int32_t *expert;    /* (S, k) chosen experts */
    int32_t *slot;      /* (S, k) slot of each choice, -1 when dropped */
    float *gate;        /* (S, k) combine weights, 0 when dropped */
    int32_t *idx;       /* (E groups cap) token of each slot, S when empty */
    float *slot_gate;   /* (E groups cap) combine weight of each slot, 0 when empty */
    double *frac;       /* (groups, E) f_e: fraction of the group's first choices on e */
    double aux;         /* mean over groups of E sum_e f_e P_e */
    int64_t dropped;
} moe_route;

/* Capacity per expert and group: max(1, min(Sg, ceil(cf * k * Sg / E))), of cf as given (moe_route.c). */
int moe_capacity(int Sg, int E, int k, float cf);
/* Route from the gate logits (S, E) host; allocates the arrays (moe_route_free). */
fsc_status moe_route_compute(moe_route *r, const float *logits, int S, int E, int k, int groups, float cf);
/* dlogits (S, E) host = the gradient of sum_slots dslot[s] * slot_gate[s] + daux * aux w.r.t. the logits,
 * with dslot (E groups cap) the gradient w.r.t. each slot's combine weight. */
fsc_status moe_route_backward(const moe_route *r, float *dlogits, const float *dslot, float daux);
void moe_route_free(moe_route *r);

#endif
