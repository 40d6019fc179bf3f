/* Expert parallelism in the engine (parallel.h, ep): what runs with MoE models, and the expert group and
 * expert-data group (split from the data-parallel group by the engine's group factory). The full parameters of
 * the sharding strategies stream from the ranks holding each expert (stream.c). Where expert parameters live and how their gradients are
 * reduced is the strategy's business (ddp.c, zero.c, fsdp.c: over the expert-data group); the model spreads its
 * experts (model.h's n_experts and set_expert_group). Not here: the MoE layer (lib/moe/), the models that use it
 * (lib/model/). */
#include <stdlib.h>
#include "engine_impl.h"

/* What runs with MoE models and expert parallelism. */
fsc_status fsc_ep_validate(const fsc_layout *l, int n_experts, const fsc_parallel_opts *po) {
    if (po->ep < 0) return fsc_error(FSC_ERR_INVALID, "ep (expert-parallel ranks) must be >= 1, not %d", po->ep);
    const int ep = po->ep > 1 ? po->ep : 1;
    if (!n_experts) {
        if (ep > 1)
            return fsc_error(FSC_ERR_INVALID, "ep %d: expert parallelism needs a model with experts (its n_experts is 0)", ep);
        return FSC_OK;
    }
    /* pipelines run (the expert group inside each stage's data group; the stages' MoE statistics added in DDP's
     * order: pipe_stats.c), and so does layer checkpointing (the MoE forward recomputes bit for bit) */
    if (l->tp > 1)
        return fsc_error(FSC_ERR_UNSUPPORTED, "MoE models with tensor parallelism (tp %d) are not supported yet",
                         l->tp);
    if (l->dp % ep != 0)
        return fsc_error(FSC_ERR_INVALID, "ep %d does not divide the data-parallel group of %d ranks (the expert "
                         "group is part of it)", ep, l->dp);
    if (n_experts % ep != 0)
        return fsc_error(FSC_ERR_INVALID, "%d experts do not split over ep %d ranks", n_experts, ep);
    return FSC_OK;
}

/* ep consecutive data ranks form an expert group; the data ranks of one index in their expert groups form
 * an expert-data group (made by the engine, fsc_layout_data_groups); the model spreads its experts over the
 * expert group. */
fsc_status fsc_ep_create(fsc_engine *e) {
    if (!e->ep_comm) return FSC_OK;
    if (!e->m->ops->set_expert_group)
        return fsc_error(FSC_ERR_UNSUPPORTED, "ep %d: the model does not spread its experts over a group "
                         "(set_expert_group)", fsc_comm_size(e->ep_comm));
    fsc_engine_add_group_kind(e, e->ep_comm, FSC_GROUP_EXPERT);
    fsc_engine_add_group_kind(e, e->ep_data, FSC_GROUP_DATA); /* data-parallel reductions of expert shards */
    return e->m->ops->set_expert_group(e->m->ctx, e->ep_comm);
}

/* Collective over the data group with ep > 1: the ranks of every expert group passed the same local batch. A
 * micro-batch's capacity, and so the size of each all-to-all, follows its tokens, and the number of micro-batches
 * the local batch: unequal batches would meet in all-to-alls of other sizes or counts (mismatched collectives; over
 * MPI unequal counts). Every rank of the data group sees every expert group's batches, so all refuse together,
 * before any forward. */
fsc_status fsc_ep_check_batch(fsc_engine *e, int local_batch, const char *what) {
    if (!e->ep_comm) return FSC_OK;
    const int n = fsc_comm_size(e->comm), G = fsc_comm_size(e->ep_comm);
    int32_t *all = malloc((size_t)n * sizeof *all), mine = local_batch;
    if (!all) return fsc_error(FSC_ERR_NOMEM, "%s: out of host memory", what);
    fsc_status s = fsc_engine_gather_host(e, e->comm, &mine, sizeof mine, all);
    for (int i = 0; s == FSC_OK && i < n; i++) {
        const int first = i / G * G; /* ep consecutive data ranks form an expert group */
        if (all[i] != all[first])
            s = fsc_error(FSC_ERR_INVALID, "%s: the ranks of an expert group (ep %d) passed different local batches "
                          "(data rank %d: %d sequences, data rank %d: %d): its micro-batches' tokens set the size of "
                          "every all-to-all; pass the ranks of an expert group the same local batch (no rank went "
                          "on)", what, G, first, (int)all[first], i, (int)all[i]);
    }
    free(all);
    return s;
}
