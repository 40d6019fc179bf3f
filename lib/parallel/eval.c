/* fsc_engine_eval (eval.h): a forward-only pass of the engine's model over a batch, through the strategy's
 * hooks and, with a pipeline, through the stages: a list of forwards run by the step's runner with a step's
 * executor (step.h's fsc_step_prepare_eval: the whole model's, or the pipeline's); fsc_engine_predict: the same
 * pass's outputs (the model's logits) for this rank's samples. Not here: training (engine.c), the loop over the
 * micro-batches (step.c).
 * Order and arithmetic are a step's: micro-batch losses summed in order on each rank, the ranks' sums in rank
 * order over the data group (with the exact reduction: units' losses in ascending order, exact.c), divided by
 * global_batch x loss_terms in double. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "engine_impl.h"
#include "exact.h"
#include "pipe.h"
#include "step.h"
#include "fsc/eval.h"

/* The tensor group's slices of the logits (rows of p->cols columns at stride p->ld, device lg) into out (host,
 * rows x p->vocab): each rank places its columns in zeros and the group sums them (every element has one rank's
 * value and the others' zeros: the sum is that value). */
static fsc_status gather_parts(fsc_engine *e, const float *lg, const fsc_logits_part *p, size_t rows, float *out) {
    const size_t V = (size_t)p->vocab, ld = (size_t)p->ld;
    if (p->cols < 0 || p->first < 0 || (size_t)p->first + (size_t)p->cols > V || ld < (size_t)p->cols)
        return fsc_error(FSC_ERR_INTERNAL, "predict: a slice of columns [%d, %d) at stride %d of %d logits", p->first,
                         p->first + p->cols, p->ld, p->vocab);
    float *mine = malloc(rows * ld * sizeof(float) + 1);
    void *d = NULL;
    fsc_status s = mine ? fsc_device_alloc(e->dev, FSC_TAG_COMM, rows * V * sizeof(float), &d)
                        : fsc_error(FSC_ERR_NOMEM, "predict: out of host memory for %zu x %zu logits", rows, ld);
    if (s == FSC_OK) s = fsc_device_download(e->dev, mine, lg, rows * ld * sizeof(float));
    if (s == FSC_OK) {
        memset(out, 0, rows * V * sizeof(float));
        for (size_t r = 0; r < rows; r++)
            memcpy(out + r * V + p->first, mine + r * ld, (size_t)p->cols * sizeof(float));
        s = fsc_device_upload(e->dev, d, out, rows * V * sizeof(float));
    }
    if (s == FSC_OK) s = fsc_comm_all_reduce(e->tensor_comm, d, d, rows * V, FSC_F32, FSC_SUM);
    if (s == FSC_OK) s = fsc_device_download(e->dev, out, d, rows * V * sizeof(float));
    if (d) fsc_device_release(e->dev, d);
    free(mine);
    return s;
}

fsc_status fsc_engine_take_outputs(fsc_engine *e, const fsc_model_acts *a, int mb, int k, float *out,
                                   size_t *per_sample) {
    const fsc_model *m = e->m;
    int width = 0;
    const float *lg = m->ops->logits ? m->ops->logits(m->ctx, a, &width) : NULL;
    fsc_logits_part part = { 0 };
    const float *slice = !lg && e->tensor_comm && m->ops->logits_part ? m->ops->logits_part(m->ctx, a, &part) : NULL;
    if (slice) width = part.vocab;
    if (!lg && !slice) return fsc_error(FSC_ERR_UNSUPPORTED, "predict: the model's loss layer keeps no outputs");
    *per_sample = (size_t)m->loss_terms * (size_t)width;
    float *at = out + (size_t)k * (size_t)mb * *per_sample;
    if (slice) return gather_parts(e, slice, &part, (size_t)mb * (size_t)m->loss_terms, at);
    return fsc_device_download(e->dev, at, lg, (size_t)mb * *per_sample * sizeof(float));
}

/* The micro-batches of an evaluation: n of mb sequences; a step's (the accumulation's, or with the exact
 * reduction and no pipeline the units of po.unit). */
static fsc_status split(const fsc_engine *e, int local_batch, int global_batch, int *mb, int *n) {
    const int K = e->po.accum, unit = e->exact && !e->pipe ? e->po.unit : 0;
    if (!unit && (local_batch < 1 || local_batch % K != 0))
        return fsc_error(FSC_ERR_INVALID, "eval: the local batch of %d sequences does not split into %d "
                         "micro-batches", local_batch, K);
    *mb = unit ? unit : local_batch / K;
    if (e->exact && (local_batch < 1 || local_batch % *mb != 0 || global_batch % *mb != 0))
        return fsc_error(FSC_ERR_INVALID, "eval: reduce exact: the local batch of %d sequences and the global batch "
                         "of %d do not split into units of %d", local_batch, global_batch, *mb);
    *n = local_batch / *mb;
    return FSC_OK;
}

/* The loss sum of the batch: the micro-batches forward, summed over the data group (with a pipeline over the
 * last stage's, to every stage): sums[0] the sum, sums[1] 1 if the batch check passed. With the exact reduction
 * the micro-batches' losses are added in ascending order (exact.c), as a step's. */
static fsc_status loss_sum(fsc_engine *e, const void *inputs, const void *targets, int local_batch, int global_batch,
                           int mb, int n, double sums[3]) {
    double *vals = NULL, moe[3];
    fsc_status batch = FSC_OK, s = FSC_OK;
    if (e->exact && !(vals = calloc((size_t)n, sizeof *vals))) return fsc_error(FSC_ERR_NOMEM, "eval: out of memory");
    if (vals && e->pipe) fsc_pipe_set_unit_losses(e, vals);
    fsc_step_ctx c;
    s = fsc_step_prepare_eval(e, &c, inputs, targets, local_batch, global_batch, mb, n, e->pipe ? NULL : vals, NULL,
                              NULL);
    if (s == FSC_OK) s = fsc_step_run(e, &c);
    if (s == FSC_OK && (e->pipe || !vals)) s = fsc_step_sums(e, &c, &sums[0], moe, &batch);
    fsc_step_release(e, &c);
    if (vals && e->pipe) fsc_pipe_set_unit_losses(e, NULL);
    if (s == FSC_OK && vals) {
        fsc_status exact_batch = FSC_OK;
        s = fsc_exact_sum_losses(e, vals, n, mb, local_batch, global_batch, &sums[0], &exact_batch);
        if (!e->pipe) batch = exact_batch; /* a pipeline's check is its last stage's, from fsc_step_sums */
    }
    if (s == FSC_OK) sums[1] = batch == FSC_OK;
    free(vals);
    return s;
}

fsc_status fsc_engine_eval(fsc_engine *e, const void *inputs, const void *targets, int local_batch,
                           int global_batch, double *loss) {
    FSC_CHECK_ARG(e);
    FSC_CHECK_ARG(inputs);
    FSC_CHECK_ARG(targets);
    FSC_CHECK_ARG(loss);
    int mb = 0, n = 0;
    FSC_TRY(fsc_ep_check_batch(e, local_batch, "eval"));
    /* this rank's own refusal, agreed by the world before the pass: every rank refuses together */
    FSC_TRY(fsc_comm_agree(e->r->comm, e->dev, split(e, local_batch, global_batch, &mb, &n)));
    fsc_status same = FSC_OK; /* tensor ranks passing different samples: a verdict like the batch check's */
    char same_why[256];
    FSC_TRY(fsc_engine_same_samples(e, inputs, targets, local_batch, &same, same_why, sizeof same_why));
    int place[2];
    fsc_step_eval_enter(e, place); /* the strategies' forward hooks as in a step's first micro-batch; no reduction */
    double sums[3] = { 0, 1, 0 };
    fsc_status s = e->st->begin_eval ? e->st->begin_eval(e) : FSC_OK;
    if (s == FSC_OK) s = loss_sum(e, inputs, targets, local_batch, global_batch, mb, n, sums);
    char why[512] = "";
    if (s == FSC_OK && !sums[1]) snprintf(why, sizeof why, "%s", fsc_last_error());
    if (s == FSC_OK && sums[1] && same != FSC_OK) sums[1] = 0, snprintf(why, sizeof why, "%s", same_why);
    if (s == FSC_OK && e->st->end_eval) s = e->st->end_eval(e);
    fsc_step_eval_leave(e, place);
    FSC_TRY(s);
    /* every rank stops together when any data group found the batch inconsistent */
    fsc_status batch = sums[1] ? FSC_OK : fsc_error(FSC_ERR_INVALID, "eval: %s", why[0] ? why : "global batch "
                                                    "inconsistent with the local batches of the data group");
    FSC_TRY(fsc_comm_agree(e->r->comm, e->dev, batch));
    *loss = sums[0] / ((double)global_batch * (double)e->m->loss_terms);
    return FSC_OK;
}

fsc_status fsc_engine_predict(fsc_engine *e, const void *inputs, int local_batch, float *out, size_t *per_sample) {
    FSC_CHECK_ARG(e);
    FSC_CHECK_ARG(inputs);
    FSC_CHECK_ARG(out);
    FSC_CHECK_ARG(per_sample);
    *per_sample = 0;
    if (!e->m->ops->logits && !(e->tensor_comm && e->m->ops->logits_part))
        return fsc_error(FSC_ERR_UNSUPPORTED, "predict: the model gives no outputs (its ops have no logits)");
    FSC_TRY(fsc_ep_check_batch(e, local_batch, "predict"));
    const int K = e->po.accum;
    fsc_status own = FSC_OK; /* this rank's own refusal, agreed by the world before the pass (as eval's) */
    if (local_batch < 1 || local_batch % K != 0)
        own = fsc_error(FSC_ERR_INVALID, "predict: the local batch of %d samples does not split into %d "
                        "micro-batches", local_batch, K);
    FSC_TRY(fsc_comm_agree(e->r->comm, e->dev, own));
    fsc_status same = FSC_OK; /* tensor ranks passing different inputs fail every rank, below */
    char same_why[256];
    FSC_TRY(fsc_engine_same_samples(e, inputs, NULL, local_batch, &same, same_why, sizeof same_why));
    int place[2];
    fsc_step_eval_enter(e, place); /* the strategies' forward hooks as in a step's first micro-batch; no reduction */
    fsc_status s = e->st->begin_eval ? e->st->begin_eval(e) : FSC_OK;
    /* zero targets: a loss layer's forward needs some, and class 0 or a target of 0 is valid for every built-in loss */
    void *zeros = s == FSC_OK ? calloc((size_t)local_batch, e->m->sample_target_bytes ? e->m->sample_target_bytes : 1)
                              : NULL;
    if (s == FSC_OK && !zeros) s = fsc_error(FSC_ERR_NOMEM, "predict: out of host memory");
    if (s == FSC_OK) { /* a pipeline's last stage keeps the outputs, then hands them to its pipeline group */
        if (e->pipe) fsc_pipe_set_outputs(e, out, per_sample);
        fsc_step_ctx c;
        s = fsc_step_prepare_eval(e, &c, inputs, zeros, local_batch, local_batch * e->lay.dp, local_batch / K, K, NULL,
                                  e->pipe ? NULL : out, per_sample);
        if (s == FSC_OK) s = fsc_step_run(e, &c);
        double total = 0, moe[3];
        fsc_status batch = FSC_OK; /* a pipeline's sums end its pass on every stage; the loss is not wanted */
        if (s == FSC_OK && e->pipe) s = fsc_step_sums(e, &c, &total, moe, &batch);
        fsc_step_release(e, &c);
        if (e->pipe) fsc_pipe_set_outputs(e, NULL, NULL);
        if (s == FSC_OK && e->pipe) s = fsc_pipe_outputs_from_last(e, out, local_batch, per_sample);
    }
    free(zeros);
    if (e->st->end_eval) {
        fsc_status t = e->st->end_eval(e);
        if (s == FSC_OK) s = t;
    }
    fsc_step_eval_leave(e, place);
    if (s == FSC_OK && same != FSC_OK) s = fsc_error(same, "predict: %s", same_why);
    return fsc_comm_agree(e->r->comm, e->dev, s); /* every rank fails together */
}
