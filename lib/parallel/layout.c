/* The 3D layout (parallel.h): world = dp x tp x pp in Megatron's rank order (tensor fastest, then data,
 * then pipeline) or another given order, its validation, a one-line description for start-up logs, and
 * the group factory (layout_impl.h): the three communicators (fsc_layout_split), the blocked and strided groups
 * of the data group (fsc_layout_data_groups: the expert groups, FSDP's shard and replica), the clipping norm's
 * group (fsc_layout_norm_group), all held by the engine in one fsc_groups and freed by fsc_groups_free.
 * Not here: training over the groups (engine.c, tensor.c, pipe.c). */
#include <stdio.h>
#include <string.h>
#include "fsc/parallel.h"
#include "layout_impl.h"

static const int megatron[3] = { FSC_DIM_TENSOR, FSC_DIM_DATA, FSC_DIM_PIPE };
static const char *const dim_flag[3] = { "tp", "dp", "pp" };
static const char *const dim_word[3] = { "tensor", "data", "pipe" };

fsc_status fsc_layout_parse_order(const char *text, int order[3]) {
    FSC_CHECK_ARG(order);
    memcpy(order, megatron, sizeof megatron);
    if (!text || !*text) return FSC_OK;
    int seen[3] = { 0, 0, 0 }, n = 0;
    const char *p = text;
    while (*p) {
        size_t len = strcspn(p, ",");
        int d = -1;
        for (int k = 0; k < 3; k++)
            if (len == 2 && strncmp(p, dim_flag[k], 2) == 0) d = k;
        if (d < 0)
            return fsc_error(FSC_ERR_INVALID, "rank order '%s': '%.*s' is not tp, dp or pp", text, (int)len, p);
        if (seen[d]) return fsc_error(FSC_ERR_INVALID, "rank order '%s' names %s twice", text, dim_flag[d]);
        seen[d] = 1;
        order[n++] = d;
        p += len;
        if (*p == ',' && *++p == '\0')
            return fsc_error(FSC_ERR_INVALID, "rank order '%s' ends with a comma (e.g. tp,dp,pp)", text);
    }
    if (n != 3)
        return fsc_error(FSC_ERR_INVALID, "rank order '%s' must name tp, dp and pp once each, fastest first (e.g. "
                         "tp,dp,pp)", text);
    return FSC_OK;
}

fsc_status fsc_layout_make_ordered(int world, int tp, int dp, int pp, const int *order, int rank, fsc_layout *out) {
    FSC_CHECK_ARG(out);
    if (world < 1) return fsc_error(FSC_ERR_INVALID, "layout: world of %d ranks", world);
    if (tp < 0 || dp < 0 || pp < 0)
        return fsc_error(FSC_ERR_INVALID, "layout: negative size (tp %d, dp %d, pp %d)", tp, dp, pp);
    if (!order) order = megatron;
    int seen[3] = { 0, 0, 0 };
    for (int k = 0; k < 3; k++) {
        if (order[k] < 0 || order[k] > 2 || seen[order[k]])
            return fsc_error(FSC_ERR_INVALID, "layout: the rank order is not a permutation of tensor, data, pipe");
        seen[order[k]] = 1;
    }
    int unknown = (tp == 0) + (dp == 0) + (pp == 0);
    if (unknown > 1) { /* derive the data size; missing tensor or pipeline sizes are 1 */
        if (!tp) tp = 1;
        if (!pp) pp = 1;
        unknown = dp == 0;
    }
    if (unknown == 1) {
        const long long known = (long long)(tp ? tp : 1) * (dp ? dp : 1) * (pp ? pp : 1); /* two sizes: below 2^62 */
        if (known > world || world % known != 0)
            return fsc_error(FSC_ERR_INVALID, "layout: a world of %d ranks does not split into groups of %lld (tp %d x "
                             "dp %d x pp %d, 0 = derived)", world, known, tp, dp, pp);
        if (!tp) tp = (int)(world / known);
        else if (!dp) dp = (int)(world / known);
        else pp = (int)(world / known);
    }
    if ((long long)tp * dp * pp != world)
        return fsc_error(FSC_ERR_INVALID, "layout: world %d is not dp %d x tp %d x pp %d = %lld", world, dp, tp, pp,
                         (long long)tp * dp * pp);
    if (rank < 0 || rank >= world)
        return fsc_error(FSC_ERR_INVALID, "layout: rank %d is outside the world of %d", rank, world);
    const int size[3] = { tp, dp, pp };
    int coord[3], rest = rank;
    for (int k = 0; k < 3; k++) { /* mixed radix, fastest first */
        coord[order[k]] = rest % size[order[k]];
        rest /= size[order[k]];
    }
    *out = (fsc_layout){ .world = world, .tp = tp, .dp = dp, .pp = pp, .rank = rank, .tensor = coord[FSC_DIM_TENSOR],
                         .data = coord[FSC_DIM_DATA], .pipe = coord[FSC_DIM_PIPE],
                         .order = { order[0], order[1], order[2] } };
    return FSC_OK;
}

fsc_status fsc_layout_make(int world, int tp, int dp, int pp, int rank, fsc_layout *out) {
    FSC_CHECK_ARG(out);
    return fsc_layout_make_ordered(world, tp, dp, pp, megatron, rank, out);
}

void fsc_layout_describe(const fsc_layout *l, char *buf, size_t cap) {
    if (buf && cap) buf[0] = '\0';
    if (!l || !buf) return;
    const int size[3] = { l->tp, l->dp, l->pp };
    const int *o = l->order;
    snprintf(buf, cap, "world %d = %s %d x %s %d x %s %d (%s fastest); rank %d: pipe %d, data %d, tensor %d",
             l->world, dim_flag[o[2]], size[o[2]], dim_flag[o[1]], size[o[1]], dim_flag[o[0]], size[o[0]],
             dim_word[o[0]], l->rank, l->pipe, l->data, l->tensor);
}

fsc_status fsc_layout_split(fsc_comm *world, const fsc_layout *l, fsc_comm **tensor, fsc_comm **data,
                            fsc_comm **pipe) {
    FSC_CHECK_ARG(tensor);
    FSC_CHECK_ARG(data);
    FSC_CHECK_ARG(pipe);
    *tensor = *data = *pipe = NULL;
    FSC_CHECK_ARG(world);
    FSC_CHECK_ARG(l);
    if (fsc_comm_size(world) != l->world || fsc_comm_rank(world) != l->rank)
        return fsc_error(FSC_ERR_INVALID, "layout: made for rank %d of %d, but the communicator is rank %d of %d",
                         l->rank, l->world, fsc_comm_rank(world), fsc_comm_size(world));
    /* colors: ranks sharing the other two coordinates; keys order the group by the coordinate itself */
    fsc_status s = fsc_comm_split(world, l->pipe * l->dp + l->data, l->tensor, tensor);
    if (s == FSC_OK) s = fsc_comm_split(world, l->pipe * l->tp + l->tensor, l->data, data);
    if (s == FSC_OK) s = fsc_comm_split(world, l->data * l->tp + l->tensor, l->pipe, pipe);
    if (s != FSC_OK) {
        fsc_comm_free(*tensor), fsc_comm_free(*data), fsc_comm_free(*pipe);
        *tensor = *data = *pipe = NULL;
        return s;
    }
    fsc_comm_set_name(*tensor, "tensor");
    fsc_comm_set_name(*data, "data");
    fsc_comm_set_name(*pipe, "pipeline");
    return FSC_OK;
}

fsc_status fsc_layout_split_blocks(fsc_comm *c, int g, const char *block_name, const char *strided_name,
                                   fsc_comm **block, fsc_comm **strided) {
    *block = *strided = NULL;
    const int r = fsc_comm_rank(c);
    fsc_status s = fsc_comm_split(c, r / g, r, block);
    if (s == FSC_OK) s = fsc_comm_split(c, r % g, r, strided);
    if (s != FSC_OK) {
        fsc_comm_free(*block), fsc_comm_free(*strided);
        *block = *strided = NULL;
        return s;
    }
    fsc_comm_set_name(*block, block_name);
    fsc_comm_set_name(*strided, strided_name);
    return FSC_OK;
}

fsc_status fsc_layout_norm_group(fsc_comm *world, const fsc_layout *l, fsc_comm *data, fsc_comm *split,
                                 fsc_comm *pipe, fsc_device *dev, fsc_comm **norm, fsc_comm **made) {
    *norm = *made = NULL;
    if (l->tp == 1 && l->pp == 1) {
        *norm = split;
        return FSC_OK;
    }
    if (l->tp == 1 && !split) { /* every stage holds its layers' whole gradient */
        *norm = pipe;
        return FSC_OK;
    }
    /* the same strategy on every tensor rank and stage: name the group by its lowest data rank */
    float v = -(float)(split ? fsc_comm_rank(data) : l->data);
    if (split) FSC_TRY(fsc_comm_all_reduce_host(split, dev, &v, FSC_MAX));
    FSC_TRY(fsc_comm_split(world, (int)-v, l->rank, made));
    fsc_comm_set_name(*made, "norm");
    *norm = *made;
    return FSC_OK;
}

int fsc_layout_shard_size(const fsc_parallel_opts *po, int dp) {
    switch (po->shard) {
    case FSC_SHARD_NONE: return 1;
    case FSC_SHARD_HYBRID: return po->hybrid_group ? po->hybrid_group : (dp >= 2 ? dp / 2 : 1);
    default: return dp;
    }
}

fsc_status fsc_layout_data_groups(fsc_comm *data, int ep, int shard, fsc_groups *g) {
    fsc_status s = FSC_OK;
    if (ep > 1) s = fsc_layout_split_blocks(data, ep, "expert", "expert_data", &g->expert, &g->expert_data);
    if (s == FSC_OK && shard > 0) s = fsc_layout_split_blocks(data, shard, "shard", "replica", &g->shard, &g->replica);
    if (s != FSC_OK) {
        fsc_comm_free(g->expert), fsc_comm_free(g->expert_data);
        g->expert = g->expert_data = NULL;
    }
    return s;
}

void fsc_groups_free(fsc_groups *g) {
    fsc_comm *const all[] = { g->norm, g->replica, g->shard, g->expert_data, g->expert, g->pipe, g->data, g->tensor };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) fsc_comm_free(all[i]);
    *g = (fsc_groups){ 0 };
}

fsc_status fsc_layout_split_links(fsc_comm *c, int me, int odd, const char *name, fsc_comm **out) {
    *out = NULL;
    fsc_comm *g = NULL;
    FSC_TRY(fsc_comm_split(c, (me + odd) / 2, me, &g));
    if (fsc_comm_size(g) < 2) {
        fsc_comm_free(g);
        return FSC_OK;
    }
    fsc_comm_set_name(g, name);
    *out = g;
    return FSC_OK;
}

fsc_status fsc_layout_split_pair(fsc_comm *c, int me, int a, int b, const char *name, fsc_comm **out) {
    *out = NULL;
    fsc_comm *g = NULL;
    const int mine = me == a || me == b;
    FSC_TRY(fsc_comm_split(c, mine ? 0 : 1 + me, me, &g));
    if (!mine) {
        fsc_comm_free(g);
        return FSC_OK;
    }
    fsc_comm_set_name(g, name);
    *out = g;
    return FSC_OK;
}
