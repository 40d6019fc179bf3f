/* Expert parallelism in the engine (parallel.h, ep): what runs with MoE models, and the expert group and
 * expert-data group split from the data-parallel group. Where expert parameters live and how their gradients
 * are reduced is the strategy's business (ddp.c); the model spreads its experts (model.h's n_experts and
 * set_expert_group). Not here: the MoE layer (lib/moe/), the models that use it (lib/model/). */
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
    /* pipelines: the step's MoE statistics would come from every stage (fsc_pipe_run gathers only the loss),
     * and the aux loss equal to DDP's bits needs each micro-batch's blocks added in DDP's order across stages.
     * Layer checkpointing runs (the MoE forward recomputes bit for bit: test_moe_engine). */
    if (l->pp > 1)
        return fsc_error(FSC_ERR_UNSUPPORTED, "MoE models with pipeline parallelism (pp %d) are not supported yet",
                         l->pp);
    if (l->tp > 1)
        return fsc_error(FSC_ERR_UNSUPPORTED, "MoE models with tensor parallelism (tp %d) are not supported yet",
                         l->tp);
    if (l->dp % ep != 0)
        return fsc_error(FSC_ERR_INVALID, "ep %d does not divide the data-parallel group of %d ranks (the expert "
                         "group is part of it)", ep, l->dp);
    if (n_experts % ep != 0)
        return fsc_error(FSC_ERR_INVALID, "%d experts do not split over ep %d ranks", n_experts, ep);
    if (ep > 1 && po->kind != FSC_PAR_DDP && po->kind != FSC_PAR_NONE)
        return fsc_error(FSC_ERR_UNSUPPORTED, "expert parallelism (ep %d) runs with ddp; %s is not supported with "
                         "it yet (ep 1 is)", ep, fsc_parallel_kind_name(po->kind));
    return FSC_OK;
}

/* ep consecutive data ranks form an expert group; the data ranks of one index in their expert groups form
 * an expert-data group. Collective over the data group. */
fsc_status fsc_ep_create(fsc_engine *e) {
    const int G = e->po.ep > 1 ? e->po.ep : 1, dr = fsc_comm_rank(e->comm);
    if (!e->m->n_experts || G == 1) return FSC_OK;
    if (!e->m->ops->set_expert_group)
        return fsc_error(FSC_ERR_UNSUPPORTED, "ep %d: the model does not spread its experts over a group "
                         "(set_expert_group)", G);
    FSC_TRY(fsc_comm_split(e->comm, dr / G, dr % G, &e->ep_comm));
    fsc_comm_set_name(e->ep_comm, "expert");
    fsc_engine_add_group_kind(e, e->ep_comm, FSC_GROUP_EXPERT);
    FSC_TRY(fsc_comm_split(e->comm, dr % G, dr / G, &e->ep_data));
    fsc_comm_set_name(e->ep_data, "expert_data");
    fsc_engine_add_group_kind(e, e->ep_data, FSC_GROUP_DATA); /* data-parallel reductions of expert shards */
    return e->m->ops->set_expert_group(e->m->ctx, e->ep_comm);
}

void fsc_ep_free(fsc_engine *e) {
    if (e->ep_data) fsc_comm_free(e->ep_data);
    if (e->ep_comm) fsc_comm_free(e->ep_comm);
    e->ep_data = e->ep_comm = NULL;
}
