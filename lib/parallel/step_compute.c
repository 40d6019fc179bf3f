/* The compute of a step's actions (step.h), one of each kind, shared by both executors: the whole model's (step.c)
 * and a pipeline stage's (pipe.c), which differ only in the record they pass (the whole model's, or a chunk's
 * covering some layers) and in what they do around the compute (a pipeline receives its boundary first, sends it
 * after, and keeps or releases the record). F sets the micro-batch's batch, runs the model's forward with the
 * engine's hooks (fsc_engine_hooks: the strategy's, and a pipeline's tied hand-offs), and accounts it: the loss, each
 * micro-batch's loss for the exact reduction, the outputs for predict, the MoE statistics. B runs the backward
 * (split: its input part), W the weight part.
 * Not here: the list of actions and the loop over it (step.c), the boundary messages and the record pools (pipe.c),
 * the reductions (the strategies' hooks). */
#include <stdio.h>
#include "step.h"
#include "pipe.h"

/* Micro-batch k's MoE statistics (model.h's aux_stats), in a step only: a pipeline keeps each layer's
 * (pipe_stats.c: added over the stages in the single-rank order at the step's end), the whole model adds the
 * micro-batch's sums in micro-batch order and, with units, keeps them as the unit's rows. */
static void note_aux(fsc_engine *e, fsc_step_ctx *c, int k, const fsc_model_acts *rec, int first, int last) {
    const fsc_model *m = e->m;
    if (!m->ops->aux_stats || c->eval) return;
    if (e->pipe) {
        fsc_pipe_aux_note(fsc_pipe_aux_of(e), e, k, rec, first, last);
        return;
    }
    fsc_model_aux ms = { 0 };
    m->ops->aux_stats(m->ctx, rec, &ms);
    c->moe[0] += ms.aux_loss, c->moe[1] += ms.assigned, c->moe[2] += ms.dropped;
    if (c->units) {
        const int K = c->K;
        c->units[K + k] = ms.aux_loss, c->units[2 * K + k] = (double)ms.assigned;
        c->units[3 * K + k] = (double)ms.dropped;
    }
}

fsc_status fsc_step_forward_on(fsc_engine *e, fsc_step_ctx *c, fsc_model_acts *rec, int k, int first, int last,
                               int recompute) {
    const fsc_model *m = e->m;
    const int head = last == m->n_layers - 1; /* the record makes the loss */
    const size_t at = (size_t)k * (size_t)c->mb;
    fsc_model_hooks hooks = fsc_engine_hooks(e);
    FSC_TRY(m->ops->set_batch(m->ctx, rec, first == 0 ? (const char *)c->inputs + at * m->sample_input_bytes : NULL,
                              head ? (const char *)c->targets + at * m->sample_target_bytes : NULL));
    if (recompute) return m->ops->forward(m->ctx, rec, &hooks, NULL);
    double ls = 0;
    FSC_TRY(m->ops->forward(m->ctx, rec, &hooks, &ls));
    note_aux(e, c, k, rec, first, last);
    if (!head) return FSC_OK;
    c->loss += ls;
    if (c->units) c->units[k] = ls;
    if (c->out && c->out_status == FSC_OK) {
        c->out_status = fsc_engine_take_outputs(e, rec, c->mb, k, c->out, c->per_sample);
        if (c->out_status != FSC_OK) snprintf(c->out_why, sizeof c->out_why, "%s", fsc_last_error());
    }
    return FSC_OK;
}

fsc_status fsc_step_backward_on(fsc_engine *e, fsc_step_ctx *c, fsc_model_acts *rec, int split) {
    fsc_model_hooks hooks = fsc_engine_hooks(e);
    return split ? e->m->ops->backward_input(e->m->ctx, rec, &hooks, c->dscale)
                 : e->m->ops->backward(e->m->ctx, rec, &hooks, c->dscale);
}

fsc_status fsc_step_weight_on(fsc_engine *e, fsc_step_ctx *c, fsc_model_acts *rec) {
    fsc_model_hooks hooks = fsc_engine_hooks(e);
    return e->m->ops->backward_weight(e->m->ctx, rec, &hooks, c->dscale);
}
