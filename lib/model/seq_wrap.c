/* The operations a built-in model forwards to the sequential model of its layers (seq_wrap.h). */
#include <stdio.h>
#include <stdlib.h>
#include "seq_wrap.h"

static fsc_model *S(void *ctx) { return ((seq_wrap *)ctx)->seq; }
static const fsc_model_hooks no_hooks = { 0 };

void seq_wrap_bind(seq_wrap *w, const fsc_model_ops *ops) {
    w->m = *w->seq; /* the same tensors, parameter and gradient tables: the engine's pointers reach the layers */
    w->m.ops = ops;
    w->m.ctx = w;
}

void seq_wrap_free(seq_wrap *w) {
    fsc_model_free(w->seq);
    free(w);
}

void seq_wrap_acts_free(void *ctx, fsc_model_acts *a) { S(ctx)->ops->acts_free(S(ctx)->ctx, a); }
fsc_status seq_wrap_acts_remake(void *ctx, fsc_status check_err, fsc_model_acts *old, const fsc_model_acts_opts *o,
                                fsc_model_acts **out) {
    *out = NULL;
    if (check_err != FSC_OK) {
        S(ctx)->ops->acts_free(S(ctx)->ctx, old);
        return check_err;
    }
    return S(ctx)->ops->acts_remake(S(ctx)->ctx, old, o, out);
}
size_t seq_wrap_acts_bytes(void *ctx, const fsc_model_acts *a) {
    return a ? S(ctx)->ops->acts_bytes(S(ctx)->ctx, a) : 0;
}

/* The layers check tokens and targets against the vocabulary; their messages name the family. */
fsc_status seq_wrap_set_batch(void *ctx, fsc_model_acts *a, const void *inputs, const void *targets) {
    fsc_status st = S(ctx)->ops->set_batch(S(ctx)->ctx, a, inputs, targets);
    if (st == FSC_OK) return st;
    char msg[512];
    snprintf(msg, sizeof msg, "%s", fsc_last_error());
    return fsc_error(st, "%s: %s", ((seq_wrap *)ctx)->name, msg);
}

float *seq_wrap_stream(void *ctx, fsc_model_acts *a, fsc_stream which) {
    return S(ctx)->ops->stream(S(ctx)->ctx, a, which);
}
size_t seq_wrap_stream_floats(void *ctx, int B) { return S(ctx)->ops->stream_floats(S(ctx)->ctx, B); }

fsc_status seq_wrap_forward(void *ctx, fsc_model_acts *a, const fsc_model_hooks *h, double *loss_sum) {
    return S(ctx)->ops->forward(S(ctx)->ctx, a, h ? h : &no_hooks, loss_sum);
}
fsc_status seq_wrap_backward(void *ctx, fsc_model_acts *a, const fsc_model_hooks *h, float dscale) {
    return S(ctx)->ops->backward(S(ctx)->ctx, a, h ? h : &no_hooks, dscale);
}
fsc_status seq_wrap_backward_input(void *ctx, fsc_model_acts *a, const fsc_model_hooks *h, float dscale) {
    return S(ctx)->ops->backward_input(S(ctx)->ctx, a, h ? h : &no_hooks, dscale);
}
fsc_status seq_wrap_backward_weight(void *ctx, fsc_model_acts *a, const fsc_model_hooks *h, float dscale) {
    return S(ctx)->ops->backward_weight(S(ctx)->ctx, a, h ? h : &no_hooks, dscale);
}

int seq_wrap_splits_tied(void *ctx) {
    return S(ctx)->ops->splits_tied ? S(ctx)->ops->splits_tied(S(ctx)->ctx) : 0;
}

void seq_wrap_init(void *ctx, uint64_t seed, int i, size_t first, size_t n, float *out) {
    S(ctx)->ops->init_values(S(ctx)->ctx, seed, i, first, n, out);
}
const float *seq_wrap_logits(void *ctx, const fsc_model_acts *a, int *vocab) {
    return S(ctx)->ops->logits(S(ctx)->ctx, a, vocab);
}
const float *seq_wrap_logits_part(void *ctx, const fsc_model_acts *a, fsc_logits_part *p) {
    return S(ctx)->ops->logits_part(S(ctx)->ctx, a, p);
}
void seq_wrap_aux(void *ctx, const fsc_model_acts *a, fsc_model_aux *out) {
    S(ctx)->ops->aux_stats(S(ctx)->ctx, a, out);
}
void seq_wrap_aux_layers(void *ctx, const fsc_model_acts *a, fsc_model_aux *out) {
    S(ctx)->ops->aux_layers(S(ctx)->ctx, a, out);
}
fsc_status seq_wrap_set_expert_group(void *ctx, fsc_comm *ep) {
    return S(ctx)->ops->set_expert_group(S(ctx)->ctx, ep);
}
