/* Mixture of experts: an MLP layer whose tokens are routed to E expert MLPs by a learned gate, with the
 * experts spread over an expert-parallel group (FairScale's MOELayer with Top1Gate/Top2Gate, GShard and
 * Switch Transformer gating).
 *
 * Routing, per dispatch group of S tokens (each rank's tokens form its groups; a group is GShard's unit):
 *   logits = x @ Wg (S, E), p = softmax(logits) per token;
 *   top-1 (Switch): expert e1 = argmax p, combine weight g1 = p[e1];
 *   top-2 (GShard): e1, and e2 = argmax over the others; g1, g2 = p[e1], p[e2] renormalized over the
 *   choices that were kept (a token whose second choice was dropped gets g1 = 1; the sum is clamped at float
 *   epsilon, as FairScale's, so a lone kept choice of p below it gets p / epsilon); the argmax is over p as
 *   floats, the lowest expert index winning ties (an all-zero gate sends every token to expert 0, and 1);
 *   capacity = min(S, max(1, ceil(capacity_factor * k * S / E))) slots per expert and group (the factor as
 *   given: a product within a float's rounding of a whole number is that number); first choices take
 *   slots before second choices, each in token order; an assignment beyond the capacity is dropped (the
 *   token's output gets nothing from it; a token with every choice dropped outputs zero, and the residual
 *   around the layer carries it).
 * Load balancing (Switch eq. 4, GShard's l_aux): aux = E * sum_e f_e * P_e, with f_e the fraction of the
 * group's tokens whose first choice is e (before dropping) and P_e the mean of p[:, e] over the group;
 * 1 when balanced (and also when p is uniform, wherever the tokens go). The layer returns the mean over its groups; the caller adds daux * aux to its loss and
 * passes daux to backward (the gradient flows through P_e only).
 *
 * Expert parallelism over a group of G ranks: rank r holds experts [r E/G, (r+1) E/G). Each rank routes its
 * own tokens, an all-to-all sends every expert its slots (dispatch), the experts run on the rank that holds
 * them, and a second all-to-all brings the outputs back (combine); backward mirrors both. An expert sees
 * its slots in (source rank, group, slot) order, so the layer on G ranks computes exactly what one rank
 * computes with all E experts and G groups: the same products of the same shapes, bit for bit.
 *
 * The experts run one product per (source rank, dispatch group) block of `capacity` rows, and add their
 * weight gradients block by block in that order, so that a result never depends on how many blocks an expert
 * sees at once: G ranks with one group each reproduce, bit for bit, G ranks that each hold every expert and
 * sum their expert gradients in rank order (what data parallelism does), and one rank with G groups.
 *
 * Routing runs on the host (S x E gate logits are downloaded); tokens move on the device (row gathers and
 * scatters with the embedding kernels). What a forward keeps for backward lives in a per-call record
 * (fsc_moe_rec), so several micro-batches can be in flight.
 *
 * Parameters (HF [in, out] layout, names under cfg->name) as a table of 1 + 4 E tensors:
 *   [0] <name>.gate.weight (C, E), replicated;
 *   [1 + 4 e + 0..3] <name>.experts.<e>.c_fc.weight (C, H), .c_fc.bias (H), .c_proj.weight (H, C),
 *   .c_proj.bias (C). Only this rank's experts are read (the other entries may be NULL).
 * fsc_moe_create allocates and initializes the gate and this rank's experts (standalone use, keyed RNG
 * N(0, 0.02), biases 0); fsc_moe_create_view makes a layer whose parameters the caller holds and passes to
 * every call (the GPT's MoE blocks). */
#ifndef FSC_MOE_H
#define FSC_MOE_H
#include "export.h"
#include <stddef.h>
#include <stdint.h>
#include "status.h"
#include "device.h"
#include "comm.h"

FSC_BEGIN_DECLS

typedef enum {
    FSC_MOE_EXPERT_MLP = 0,  /* C -> H -> GELU -> C */
    FSC_MOE_EXPERT_IDENTITY  /* returns its input (tests of dispatch and combine; no expert parameters) */
} fsc_moe_expert;

typedef struct {
    int dim;                 /* C */
    int hidden;              /* H (0: 4 C) */
    int experts;             /* E */
    int top_k;               /* 1 or 2 */
    float capacity_factor;   /* (0: 1.0) */
    fsc_moe_expert expert;
    const char *name;        /* parameter name prefix (NULL: "moe") */
} fsc_moe_config;
/* A layer of `experts` MLP experts of width dim and hidden 4 dim, top-1 routing, capacity factor 1, named
 * "moe". */
fsc_moe_config fsc_moe_config_default(int dim, int experts);

typedef struct {
    double aux_loss;   /* mean over this rank's groups of E sum_e f_e P_e */
    int capacity;      /* slots per expert and group */
    int64_t tokens;    /* routed by this rank */
    int64_t assigned;  /* tokens x k */
    int64_t dropped;   /* assignments beyond the capacity */
} fsc_moe_stats;

typedef struct fsc_moe fsc_moe;
typedef struct fsc_moe_rec fsc_moe_rec;

/* ep: the expert-parallel group (NULL: one rank, every expert local). experts must divide by its size. */
fsc_status fsc_moe_create(fsc_device *dev, fsc_comm *ep, const fsc_moe_config *cfg, uint64_t seed, fsc_moe **out);
/* The same layer without parameter memory: every forward and backward passes the tables. */
fsc_status fsc_moe_create_view(fsc_device *dev, fsc_comm *ep, const fsc_moe_config *cfg, fsc_moe **out);
void fsc_moe_free(fsc_moe *m);
/* Entries of the parameter table: 1 + 4 E (1 for identity experts); 0 for a count of experts no layer has (below 1
 * or above 4096). */
int fsc_moe_num_tensors(const fsc_moe_config *cfg);
/* This rank's experts: [first, first + count). */
void fsc_moe_local_experts(const fsc_moe *m, int *first, int *count);
/* fsc_moe_create only: this rank's parameters and gradients (device, flat: the gate, then its experts in
 * order, each expert's 4 tensors in table order) and their length. */
float *fsc_moe_params(fsc_moe *m);
float *fsc_moe_grads(fsc_moe *m);
size_t fsc_moe_num_local(const fsc_moe *m);
/* Offset in the flat buffers of the gate (0) and of local expert j's first tensor. */
size_t fsc_moe_expert_offset(const fsc_moe *m, int j);

/* A record for calls on S tokens in `groups` dispatch groups of S / groups consecutive tokens (device
 * memory, FSC_TAG_ACTS). A record holds one forward until its backward. It serves the layer that made it or one of
 * the same shapes (experts, top-k, capacity, widths, expert kind); another layer's calls refuse it. */
fsc_status fsc_moe_rec_create(fsc_moe *m, int S, int groups, fsc_moe_rec **out);
void fsc_moe_rec_free(fsc_moe_rec *rec);
size_t fsc_moe_rec_bytes(const fsc_moe_rec *rec);
/* Slots per expert and group for S / groups tokens per group; 0 where S and groups make no such groups (either
 * below 1, or S not a multiple of groups), as fsc_moe_rec_create refuses them. */
int fsc_moe_capacity(const fsc_moe *m, int S, int groups);

/* out (S, C) = the layer applied to inp (S, C). p: the parameter table (NULL: the layer's own).
 * Collective over ep: every rank passes records of the same S and groups. inp must stay unchanged until
 * backward. stats may be NULL. */
fsc_status fsc_moe_forward(fsc_moe *m, float *out, fsc_moe_rec *rec, const float *inp, const float *const *p,
                           fsc_moe_stats *stats);
/* dinp (S, C) = (overwrites) the gradient w.r.t. inp of sum(out * dout) + daux * aux; parameter
 * gradients += into the table g (NULL: the layer's own; the gate's from this rank's tokens only: sum it over
 * the data-parallel group as any replicated parameter). Collective. */
fsc_status fsc_moe_backward(fsc_moe *m, float *dinp, float *const *g, fsc_moe_rec *rec, const float *dout,
                            const float *const *p, float daux);
/* The same, with the experts' weight gradients by source: for each local expert and each rank of ep (in rank
 * order), the sum of that rank's blocks' gradients (its groups in order, starting from zero: what one rank holding
 * every expert adds into a zeroed gradient for its own tokens) goes to term(term_ctx, grad, piece, n) for each of
 * the expert's four tensors (grad its entry of g, n its floats), which is not added into g; the gate's gradient is
 * added as by fsc_moe_backward. term NULL: fsc_moe_backward. (The engine's exact reduction: model.h's grad_term.) */
fsc_status fsc_moe_backward_terms(fsc_moe *m, float *dinp, float *const *g, fsc_moe_rec *rec, const float *dout,
                                  const float *const *p, float daux,
                                  fsc_status (*term)(void *term_ctx, float *grad, const float *piece, size_t n),
                                  void *term_ctx);
/* The record's forward routing, host arrays of S x k: the chosen experts, and the combine weight of each
 * choice (0 when the assignment was dropped); kept: 1 if the assignment got a slot. */
fsc_status fsc_moe_routing(const fsc_moe_rec *rec, int32_t *experts, float *gates, int32_t *kept);

FSC_END_DECLS

#endif
