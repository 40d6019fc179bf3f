/* Expert parallelism in the engine (parallel.h, ep): what runs with MoE models, the expert group and
 * expert-data group (split from the data-parallel group by the engine's group factory), and the full parameters of the sharding strategies
 * (their experts gathered over the expert group). Where expert parameters live and how their gradients are
 * reduced is the strategy's business (ddp.c, zero.c, fsdp.c: over the expert-data group); the model spreads its
 * experts (model.h's n_experts and set_expert_group). Not here: the MoE layer (lib/moe/), the models that use it
 * (lib/model/). */
#include <stdlib.h>
#include "engine_impl.h"
#include "pipe.h"

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

/* With expert parallelism, whether tensor i is the first expert tensor of an MoE block; then *k is the number
 * of tensors of each expert and *per their floats (the experts of a block follow each other, expert by expert). */
static int block_first(const fsc_model *m, int i, int *k, size_t *per) {
    if (m->info[i].expert != 0 || (i > 0 && m->info[i - 1].expert >= 0)) return 0;
    *k = 0, *per = 0;
    for (; i + *k < m->n_tensors && m->info[i + *k].expert == 0; (*k)++) *per += m->info[i + *k].numel;
    return 1;
}

/* The MoE blocks' experts of host (tensor order, this rank's experts filled in) gathered over the expert group:
 * each block's local experts are one span of the full vector, and rank r of the group holds the r-th span. A
 * pipeline stage gathers its own blocks' (with chunks, its own chunks'). */
static fsc_status gather_blocks(fsc_engine *e, float *host) {
    const fsc_model *m = e->m;
    int first, count;
    fsc_engine_local_experts(e, &first, &count);
    for (int i = 0; i < m->n_tensors; i++) {
        int k;
        size_t per;
        const int l = m->info[i].layer;
        if (l < e->lf || l > e->ll || !fsc_pipe_runs_layer(e, l) || !block_first(m, i, &k, &per)) continue;
        float *loc = NULL, *all = NULL;
        size_t n = (size_t)count * per;
        fsc_status s = fsc_device_alloc(e->dev, FSC_TAG_COMM, n * sizeof(float), (void **)&loc);
        if (s == FSC_OK) s = fsc_device_alloc(e->dev, FSC_TAG_COMM, (size_t)m->n_experts * per * sizeof(float),
                                              (void **)&all);
        if (s == FSC_OK)
            s = fsc_device_upload(e->dev, loc, host + fsc_engine_tensor_offset(e, i + k * first), n * sizeof(float));
        if (s == FSC_OK) s = fsc_comm_all_gather(e->ep_comm, loc, all, n, FSC_F32);
        if (s == FSC_OK)
            s = fsc_device_download(e->dev, host + fsc_engine_tensor_offset(e, i), all,
                                    (size_t)m->n_experts * per * sizeof(float));
        fsc_device_release(e->dev, loc);
        fsc_device_release(e->dev, all);
        FSC_TRY(s);
    }
    return FSC_OK;
}

fsc_status fsc_ep_full_params(fsc_engine *e, float *host) {
    /* an expert group none of whose ranks wants the parameters takes part in the strategy's gathers only */
    float wanted = host ? 1.0f : 0.0f;
    FSC_TRY(fsc_comm_all_reduce_host(e->ep_comm, e->dev, &wanted, FSC_MAX));
    if (wanted == 0.0f) return e->st->full_tensors(e, 0, NULL);
    const size_t P = fsc_engine_tensor_offset(e, e->m->n_tensors);
    float *buf = host ? host : malloc(P * sizeof(float));
    if (!buf) return fsc_error(FSC_ERR_NOMEM, "ep: out of host memory for %zu full parameters", P);
    fsc_status s = e->st->full_tensors(e, 1, buf);
    if (s == FSC_OK) s = gather_blocks(e, buf);
    if (!host) free(buf);
    return s;
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
