/* Which elements the optimizer decays (optim.h, model.h): after the strategy's setup, the ranges of the optimizer
 * segments that hold tensors fsc_param_decays does not decay (biases, norms, embeddings) are excluded from weight
 * decay, unless the configuration says decay_all. The strategy's holdings say where each held tensor lives; with
 * tensor parallelism they are this rank's slices, which carry their full tensor's declaration. */
#include <stdlib.h>
#include "engine_impl.h"

fsc_status fsc_engine_apply_decay(fsc_engine *e) {
    if (e->oc.decay_all || e->oc.weight_decay == 0.0f || !e->st->holdings) return FSC_OK;
    fsc_holding *h = NULL;
    int n = 0;
    FSC_TRY(e->st->holdings(e, &h, &n));
    fsc_status s = FSC_OK;
    for (int k = 0; k < n && s == FSC_OK; k++)
        if (!fsc_param_decays(&e->m->info[h[k].tensor])) s = fsc_optim_no_decay(e->opt, h[k].seg, h[k].seg_off, h[k].n);
    free(h);
    return s;
}
