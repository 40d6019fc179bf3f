/* gpt.h's fsc_gpt and its activation records as a view of the GPT model built from layers (gpt_model.c): the
 * tables of fsc_gpt are the model's, a record is the model's record with the GPT's checks and messages (a batch
 * set before forward, backward once per forward, tokens in the vocabulary), and the MoE blocks' statistics and
 * routing records come from the layers' state. The records run the context seq (T = seq): the layers are built
 * for it.
 * Not here: the layers, records and passes (lib/layers), the model (gpt_model.c), the description (gpt.c). */
#include <stdlib.h>
#include <string.h>
#include "fsc/gpt.h"
#include "layers/moe_impl.h"
#include "layers/seq_impl.h"

struct fsc_gpt_acts {
    fsc_gpt *m;
    fsc_gpt_acts_opts o;
    fsc_model_acts *a;     /* the model's record */
    int has_emb, has_head;
    int have_tok, have_tgt, fwd_done;
};

fsc_status fsc_gpt_create(fsc_device *dev, const fsc_gpt_config *cfg, fsc_gpt **out) {
    FSC_CHECK_ARG(out);
    *out = NULL;
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(cfg);
    fsc_model *m;
    FSC_TRY(fsc_gpt_model_create(dev, cfg, &m));
    *out = fsc_gpt_model_gpt(m);
    return FSC_OK;
}

void fsc_gpt_free(fsc_gpt *m) {
    if (m) fsc_model_free(m->model);
}

fsc_status fsc_gpt_set_expert_group(fsc_gpt *m, fsc_comm *ep) {
    FSC_CHECK_ARG(m);
    const fsc_gpt_config *c = &m->cfg;
    if (!c->moe_experts) return fsc_error(FSC_ERR_INVALID, "gpt: an expert-parallel group needs an MoE model "
                                          "(moe_experts > 0)");
    const int G = ep ? fsc_comm_size(ep) : 1;
    if (c->moe_experts % G != 0)
        return fsc_error(FSC_ERR_INVALID, "gpt: %d experts do not split over an expert-parallel group of %d",
                         c->moe_experts, G);
    return m->model->ops->set_expert_group(m->model->ctx, ep); /* sets m->ep */
}

void fsc_gpt_local_experts(const fsc_gpt *m, int *first, int *count) {
    if (!m || !first || !count) return;
    const int E = m->cfg.moe_experts, G = m->ep ? fsc_comm_size(m->ep) : 1, r = m->ep ? fsc_comm_rank(m->ep) : 0;
    *first = E ? r * (E / G) : 0;
    *count = E / G;
}

fsc_status fsc_gpt_acts_create(fsc_gpt *m, const fsc_gpt_acts_opts *o, fsc_gpt_acts **out) {
    FSC_CHECK_ARG(out);
    *out = NULL;
    FSC_CHECK_ARG(m);
    FSC_CHECK_ARG(o);
    if (!m || !o || !m->model) return fsc_error(FSC_ERR_INVALID, "gpt acts: model or options NULL");
    if (o->T != m->cfg.seq)
        return fsc_error(FSC_ERR_INVALID, "gpt acts: batch B=%d T=%d; the layers run T = seq %d", o->B, o->T,
                         m->cfg.seq);
    fsc_gpt_acts *a = calloc(1, sizeof *a);
    if (!a) return fsc_error(FSC_ERR_NOMEM, "gpt acts: out of host memory");
    fsc_model_acts_opts mo = { .B = o->B, .first = o->first, .last = o->last, .checkpoint = o->checkpoint,
                               .offload_inputs = o->offload_inputs };
    fsc_status st = m->model->ops->acts_create(m->model->ctx, &mo, &a->a);
    if (st != FSC_OK) {
        free(a);
        return st;
    }
    a->m = m;
    a->o = *o;
    a->has_emb = o->first == 0;
    a->has_head = o->last == m->cfg.layers + 1;
    *out = a;
    return FSC_OK;
}

void fsc_gpt_acts_free(fsc_gpt_acts *a) {
    if (!a) return;
    a->m->model->ops->acts_free(a->m->model->ctx, a->a);
    free(a);
}

size_t fsc_gpt_acts_bytes(const fsc_gpt_acts *a) {
    return a ? a->m->model->ops->acts_bytes(a->m->model->ctx, a->a) : 0;
}

static fsc_status check_tokens(const int32_t *t, size_t n, int V, const char *what) {
    for (size_t i = 0; i < n; i++)
        if (t[i] < 0 || t[i] >= V)
            return fsc_error(FSC_ERR_INVALID, "gpt: %s[%zu] = %d is outside the vocabulary [0, %d)", what, i,
                             (int)t[i], V);
    return FSC_OK;
}

fsc_status fsc_gpt_acts_set_batch(fsc_gpt_acts *a, const int32_t *tokens, const int32_t *targets) {
    FSC_CHECK_ARG(a);
    const fsc_gpt_config *c = &a->m->cfg;
    const size_t N = (size_t)a->o.B * (size_t)a->o.T;
    a->fwd_done = 0;
    a->have_tok = a->have_tgt = 0;
    if (a->has_emb && !tokens)
        return fsc_error(FSC_ERR_INVALID, "gpt: tokens are NULL but the embedding (layer 0) is in the range");
    if (a->has_head && !targets)
        return fsc_error(FSC_ERR_INVALID, "gpt: targets are NULL but the head (layer %d) is in the range",
                         c->layers + 1);
    if (a->has_emb) FSC_TRY(check_tokens(tokens, N, c->vocab, "tokens"));
    if (a->has_head) FSC_TRY(check_tokens(targets, N, c->vocab, "targets"));
    FSC_TRY(a->m->model->ops->set_batch(a->m->model->ctx, a->a, a->has_emb ? tokens : NULL,
                                        a->has_head ? targets : NULL));
    a->have_tok = a->has_emb, a->have_tgt = a->has_head;
    return FSC_OK;
}

static float *stream(fsc_gpt_acts *a, fsc_stream which) {
    return a->m->model->ops->stream(a->m->model->ctx, a->a, which);
}
float *fsc_gpt_acts_input(fsc_gpt_acts *a) {
    if (!a) return NULL;
    return stream(a, FSC_STREAM_INPUT);
}
float *fsc_gpt_acts_output(fsc_gpt_acts *a) {
    if (!a) return NULL;
    return stream(a, FSC_STREAM_OUTPUT);
}
float *fsc_gpt_acts_grad_output(fsc_gpt_acts *a) {
    if (!a) return NULL;
    return stream(a, FSC_STREAM_GRAD_OUTPUT);
}
float *fsc_gpt_acts_grad_input(fsc_gpt_acts *a) {
    if (!a) return NULL;
    return stream(a, FSC_STREAM_GRAD_INPUT);
}

fsc_status fsc_gpt_forward(fsc_gpt *m, fsc_gpt_acts *a, const fsc_gpt_hooks *h, double *loss_sum) {
    if (loss_sum) *loss_sum = 0.0;
    FSC_CHECK_ARG(m);
    FSC_CHECK_ARG(a);
    if (a->m != m) return fsc_error(FSC_ERR_INVALID, "gpt forward: the record belongs to another model");
    if ((a->has_emb && !a->have_tok) || (a->has_head && !a->have_tgt))
        return fsc_error(FSC_ERR_STATE, "gpt forward: no micro-batch set (call fsc_gpt_acts_set_batch first)");
    a->fwd_done = 0;
    FSC_TRY(m->model->ops->forward(m->model->ctx, a->a, h, loss_sum));
    a->fwd_done = 1;
    return FSC_OK;
}

fsc_status fsc_gpt_backward(fsc_gpt *m, fsc_gpt_acts *a, const fsc_gpt_hooks *h, float dscale) {
    FSC_CHECK_ARG(m);
    FSC_CHECK_ARG(a);
    if (a->m != m) return fsc_error(FSC_ERR_INVALID, "gpt backward: the record belongs to another model");
    if (!a->fwd_done)
        return fsc_error(FSC_ERR_STATE, "gpt backward: no forward to differentiate (backward runs once per "
                         "forward)");
    a->fwd_done = 0;
    return m->model->ops->backward(m->model->ctx, a->a, h, dscale);
}

/* The MoE layer state of block b (0-based) in the record, NULL for a dense block or one outside the range. */
const float *fsc_gpt_acts_logits(const fsc_gpt_acts *a) {
    int V = 0;
    if (!a || !a->has_head) return NULL;
    const fsc_model *m = a->m->model;
    return m->ops->logits(m->ctx, a->a, &V);
}

static const moe_state *moe_of(const fsc_gpt_acts *a, int b) {
    if (!a || b < 0 || b >= a->m->cfg.layers || !fsc_gpt_block_is_moe(&a->m->cfg, b)) return NULL;
    return fsc_seq_acts_state(a->a, b + 1);
}

void fsc_gpt_acts_moe_stats(const fsc_gpt_acts *a, fsc_moe_stats *out) {
    if (!a || !out) return;
    memset(out, 0, sizeof *out);
    for (int b = 0; a && b < a->m->cfg.layers; b++) {
        const moe_state *st = moe_of(a, b);
        if (!st) continue;
        out->aux_loss += st->st.aux_loss;
        out->capacity = st->st.capacity;
        out->tokens += st->st.tokens;
        out->assigned += st->st.assigned;
        out->dropped += st->st.dropped;
    }
}

const fsc_moe_rec *fsc_gpt_acts_moe_rec(const fsc_gpt_acts *a, int b) {
    const moe_state *st = moe_of(a, b);
    return st ? st->rec : NULL;
}
