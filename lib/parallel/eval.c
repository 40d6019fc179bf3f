/* fsc_engine_eval (eval.h): a forward-only pass of the engine's model over a batch, through the strategy's
 * hooks and, with a pipeline, through the stages (pipe.c's fsc_pipe_eval). Not here: training (engine.c).
 * Order and arithmetic are a step's: micro-batch losses summed in order on each rank, the ranks' sums in rank
 * order over the data group, divided by global_batch x loss_terms in double. */
#include <stdio.h>
#include "engine_impl.h"
#include "pipe.h"
#include "fsc/eval.h"

/* This rank's micro-batches forward (no pipeline): *loss_local the sum of their loss terms. */
static fsc_status forward_local(fsc_engine *e, const char *in, const char *tg, int mb, double *loss_local) {
    const fsc_model *m = e->m;
    fsc_model_acts *a = e->acts && e->acts_B == mb ? e->acts : NULL, *own = NULL;
    if (!a) {
        fsc_model_acts_opts o = { .B = mb, .first = e->lf, .last = e->ll, .checkpoint = e->po.checkpoint };
        FSC_TRY(m->ops->acts_create(m->ctx, &o, &own));
        a = own;
    }
    fsc_model_hooks hooks = fsc_engine_hooks(e);
    fsc_status s = FSC_OK;
    *loss_local = 0;
    for (int k = 0; k < e->po.accum && s == FSC_OK; k++) {
        double ls = 0;
        s = m->ops->set_batch(m->ctx, a, in + (size_t)k * mb * m->sample_input_bytes,
                              tg + (size_t)k * mb * m->sample_target_bytes);
        if (s == FSC_OK) s = m->ops->forward(m->ctx, a, &hooks, &ls);
        *loss_local += ls;
    }
    if (own) m->ops->acts_free(m->ctx, own);
    return s;
}

fsc_status fsc_engine_eval(fsc_engine *e, const void *inputs, const void *targets, int local_batch,
                           int global_batch, double *loss) {
    FSC_CHECK_ARG(e);
    FSC_CHECK_ARG(inputs);
    FSC_CHECK_ARG(targets);
    FSC_CHECK_ARG(loss);
    const int K = e->po.accum;
    if (local_batch < 1 || local_batch % K != 0)
        return fsc_error(FSC_ERR_INVALID, "eval: the local batch of %d sequences does not split into %d "
                         "micro-batches", local_batch, K);
    const int mb = local_batch / K, micro = e->micro, sync = e->sync;
    e->micro = 0; /* the strategies' forward hooks as in a step's first micro-batch; no reduction */
    e->sync = 0;
    double sums[3] = { 0, 1, 0 };
    fsc_status s = e->st->begin_eval ? e->st->begin_eval(e) : FSC_OK;
    if (s == FSC_OK && e->pipe) {
        s = fsc_pipe_eval(e, inputs, targets, mb, global_batch, sums);
    } else if (s == FSC_OK) {
        double local = 0;
        fsc_status batch = FSC_OK;
        s = forward_local(e, inputs, targets, mb, &local);
        if (s == FSC_OK) s = fsc_engine_sum_over_ranks(e, &local, 1, local_batch, global_batch, sums, &batch);
        sums[1] = batch == FSC_OK;
    }
    char why[512] = "";
    if (s == FSC_OK && !sums[1]) snprintf(why, sizeof why, "%s", fsc_last_error());
    if (s == FSC_OK && e->st->end_eval) s = e->st->end_eval(e);
    e->micro = micro;
    e->sync = sync;
    FSC_TRY(s);
    /* every rank stops together when any data group found the batch inconsistent */
    fsc_status batch = sums[1] ? FSC_OK : fsc_error(FSC_ERR_INVALID, "eval: %s", why[0] ? why : "global batch "
                                                    "inconsistent with the local batches of the data group");
    FSC_TRY(fsc_comm_agree(e->r->comm, e->dev, batch));
    *loss = sums[0] / ((double)global_batch * (double)e->m->loss_terms);
    return FSC_OK;
}
