/* Private: a built-in model (the GPT, the Llama) as a wrapper of the sequential model of its layers. The wrapper
 * shares the layers' tensor tables (m = *seq, with its own ops and ctx) and adds what the family knows (its
 * configuration, limits, costs, FLOPs); every other operation is the layers' own, forwarded by these functions.
 * A wrapper struct starts with seq_wrap and sets ctx to itself. */
#ifndef FSC_SEQ_WRAP_H
#define FSC_SEQ_WRAP_H
#include "fsc/model.h"

typedef struct {
    fsc_model m;        /* first: the model handed out; the layers' tables */
    fsc_model *seq;     /* the sequential model of the family's layers: records, passes, streams, values */
    const char *name;   /* "gpt", "llama": prefixes the layers' batch messages */
} seq_wrap;

/* m = the layers' model with ops and ctx of the wrapper w (owned: seq_wrap_free frees seq). */
void seq_wrap_bind(seq_wrap *w, const fsc_model_ops *ops);
void seq_wrap_free(seq_wrap *w);

void seq_wrap_acts_free(void *ctx, fsc_model_acts *a);
/* The layers' acts_remake after the family's check of o (check_err, FSC_OK: none): a failed check frees old. */
fsc_status seq_wrap_acts_remake(void *ctx, fsc_status check_err, fsc_model_acts *old, const fsc_model_acts_opts *o,
                                fsc_model_acts **out);
size_t seq_wrap_acts_bytes(void *ctx, const fsc_model_acts *a);
fsc_status seq_wrap_set_batch(void *ctx, fsc_model_acts *a, const void *inputs, const void *targets);
float *seq_wrap_stream(void *ctx, fsc_model_acts *a, fsc_stream which);
size_t seq_wrap_stream_floats(void *ctx, int B);
fsc_status seq_wrap_forward(void *ctx, fsc_model_acts *a, const fsc_model_hooks *h, double *loss_sum);
fsc_status seq_wrap_backward(void *ctx, fsc_model_acts *a, const fsc_model_hooks *h, float dscale);
fsc_status seq_wrap_backward_input(void *ctx, fsc_model_acts *a, const fsc_model_hooks *h, float dscale);
fsc_status seq_wrap_backward_weight(void *ctx, fsc_model_acts *a, const fsc_model_hooks *h, float dscale);
int seq_wrap_splits_tied(void *ctx);
void seq_wrap_init(void *ctx, uint64_t seed, int i, size_t first, size_t n, float *out);
const float *seq_wrap_logits(void *ctx, const fsc_model_acts *a, int *vocab);
const float *seq_wrap_logits_part(void *ctx, const fsc_model_acts *a, fsc_logits_part *p);
void seq_wrap_aux(void *ctx, const fsc_model_acts *a, fsc_model_aux *out);
void seq_wrap_aux_layers(void *ctx, const fsc_model_acts *a, fsc_model_aux *out);
fsc_status seq_wrap_set_expert_group(void *ctx, fsc_comm *ep);

#endif
