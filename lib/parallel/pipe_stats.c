/* A pipeline's auxiliary statistics (model.h's aux_stats: mixture of experts' load-balancing loss, assignments
 * and drops) added as DDP adds them. On one rank the engine sums, per micro-batch, the statistics of the blocks
 * in layer order from 0, adds those micro-batch sums in micro-batch order, then sums over the data group in rank
 * order. In a pipeline each stage runs some of the blocks, so a stage keeps its layers' statistics of every
 * micro-batch (one entry per layer, from the micro-batch's first forward: a checkpointed recompute gives the
 * same bits), and at the step's end one all-gather over the pipeline group brings every layer's to every stage,
 * which adds them in the single-rank order; one more over the data group sums the data ranks in rank order.
 * Floating-point sums of the stages' partial sums would differ from DDP's in the last bits.
 * The aux loss's gradient is local to each MoE layer (dscale times its coefficient): backward needs nothing.
 * Not here: the schedule (pipe.c), the single-rank sums (step_compute.c, which calls fsc_pipe_aux_note in a
 * stage's F). */
#include <stdlib.h>
#include <string.h>
#include "pipe.h"

#define W 4 /* doubles per micro-batch and layer: aux loss, assigned, dropped, 1 where this stage runs the layer */

struct fsc_pipe_aux {
    int M, L;            /* micro-batches, layers of the model */
    int first, last;     /* this stage's layers (with chunks: from the first chunk's first to the last's last) */
    fsc_model_aux *tmp;  /* (last - first + 1) one forward's statistics per layer of a record (of one chunk) */
    double *mine;        /* (M, L, W) this stage's layers filled in, zeros elsewhere */
};

fsc_status fsc_pipe_aux_create(const fsc_engine *e, int M, int first, int last, fsc_pipe_aux **out) {
    *out = NULL;
    const fsc_model *m = e->m;
    if (!m->ops->aux_stats) return FSC_OK;
    if (!m->ops->aux_layers)
        return fsc_error(FSC_ERR_UNSUPPORTED, "pipeline: the model reports auxiliary statistics (aux_stats) but not "
                         "per layer (aux_layers), which a pipeline needs to add its stages' statistics in order");
    fsc_pipe_aux *x = calloc(1, sizeof *x);
    if (!x) return fsc_error(FSC_ERR_NOMEM, "pipe: out of memory");
    x->M = M, x->L = m->n_layers, x->first = first, x->last = last;
    x->tmp = calloc((size_t)(x->last - x->first + 1), sizeof *x->tmp);
    x->mine = calloc((size_t)M * x->L * W, sizeof(double));
    if (!x->tmp || !x->mine) {
        fsc_pipe_aux_free(x);
        return fsc_error(FSC_ERR_NOMEM, "pipe: out of memory");
    }
    *out = x;
    return FSC_OK;
}

void fsc_pipe_aux_note(fsc_pipe_aux *x, const fsc_engine *e, int k, const fsc_model_acts *a, int first, int last) {
    if (!x || k < 0 || k >= x->M) return;
    e->m->ops->aux_layers(e->m->ctx, a, x->tmp);
    for (int l = first; l <= last; l++) {
        double *d = x->mine + ((size_t)k * x->L + l) * W;
        const fsc_model_aux *s = &x->tmp[l - first];
        d[0] = s->aux_loss, d[1] = s->assigned, d[2] = s->dropped, d[3] = 1;
    }
}

/* Every stage's layers of every micro-batch to every stage (one all-gather over the pipeline group), then per
 * micro-batch k its statistics as aux_stats gives them on one rank (its layers in order from 0) into ms[k]. */
static fsc_status per_micro_batch(fsc_pipe_aux *x, fsc_engine *e, fsc_model_aux *ms) {
    const int P = fsc_comm_size(e->pipe_comm);
    const size_t per = (size_t)x->M * x->L * W;
    double *all = malloc((size_t)P * per * sizeof(double));
    if (!all) return fsc_error(FSC_ERR_NOMEM, "pipe: out of memory");
    fsc_status s = fsc_engine_gather_host(e, e->pipe_comm, x->mine, per * sizeof(double), all);
    for (int k = 0; s == FSC_OK && k < x->M; k++) {
        ms[k] = (fsc_model_aux){ 0 };
        for (int l = 0; l < x->L; l++)
            for (int st = 0; st < P; st++) {
                const double *d = all + (size_t)st * per + ((size_t)k * x->L + l) * W;
                if (d[3] == 0) continue;
                ms[k].aux_loss += d[0], ms[k].assigned += d[1], ms[k].dropped += d[2];
                break;
            }
    }
    free(all);
    return s;
}

fsc_status fsc_pipe_aux_units(fsc_pipe_aux *x, fsc_engine *e, double *vals, int K) {
    if (!x) return FSC_OK;
    if (K != x->M) return fsc_error(FSC_ERR_INTERNAL, "pipe: %d units but %d micro-batches noted", K, x->M);
    fsc_model_aux *ms = calloc((size_t)K, sizeof *ms);
    if (!ms) return fsc_error(FSC_ERR_NOMEM, "pipe: out of memory");
    fsc_status s = per_micro_batch(x, e, ms);
    for (int k = 0; s == FSC_OK && k < K; k++)
        vals[K + k] = ms[k].aux_loss, vals[2 * K + k] = (double)ms[k].assigned, vals[3 * K + k] = (double)ms[k].dropped;
    free(ms);
    return s;
}

fsc_status fsc_pipe_aux_sum(fsc_pipe_aux *x, fsc_engine *e, double out[3]) {
    out[0] = out[1] = out[2] = 0;
    if (!x) return FSC_OK;
    const int n = fsc_comm_size(e->comm);
    double *dp = malloc((size_t)n * 3 * sizeof(double));
    fsc_model_aux *ms = calloc((size_t)x->M, sizeof *ms);
    fsc_status s = dp && ms ? per_micro_batch(x, e, ms) : fsc_error(FSC_ERR_NOMEM, "pipe: out of memory");
    double local[3] = { 0, 0, 0 }; /* this data rank's, as engine.c's moe[] on one rank */
    for (int k = 0; s == FSC_OK && k < x->M; k++)
        local[0] += ms[k].aux_loss, local[1] += ms[k].assigned, local[2] += ms[k].dropped;
    memcpy(out, local, sizeof local);
    if (s == FSC_OK && n > 1) s = fsc_engine_gather_host(e, e->comm, local, sizeof local, dp);
    for (int j = 0; s == FSC_OK && n > 1 && j < 3; j++) { /* the data group in rank order */
        double acc = dp[j];
        for (int i = 1; i < n; i++) acc += dp[(size_t)i * 3 + j];
        out[j] = acc;
    }
    free(dp), free(ms);
    return s;
}

void fsc_pipe_aux_free(fsc_pipe_aux *x) {
    if (!x) return;
    free(x->tmp);
    free(x->mine);
    free(x);
}
