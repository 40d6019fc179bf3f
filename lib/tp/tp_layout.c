/* The 3D layout (tp.h): world = dp x tp x pp in Megatron's rank order (tensor fastest, then data, then
 * pipeline), its validation, a one-line description for start-up logs, and the three communicators.
 * Not here: training over the groups (tp_train.c). */
#include <stdio.h>
#include "fsc/tp.h"

fsc_status fsc_layout_make(int world, int tp, int dp, int pp, int rank, fsc_layout *out) {
    if (world < 1) return fsc_error(FSC_ERR_INVALID, "layout: world of %d ranks", world);
    if (tp < 0 || dp < 0 || pp < 0)
        return fsc_error(FSC_ERR_INVALID, "layout: negative size (tp %d, dp %d, pp %d)", tp, dp, pp);
    int unknown = (tp == 0) + (dp == 0) + (pp == 0);
    if (unknown > 1) { /* derive the data size; missing tensor or pipeline sizes are 1 */
        if (!tp) tp = 1;
        if (!pp) pp = 1;
        unknown = dp == 0;
    }
    if (unknown == 1) {
        int known = (tp ? tp : 1) * (dp ? dp : 1) * (pp ? pp : 1);
        if (world % known != 0)
            return fsc_error(FSC_ERR_INVALID, "layout: a world of %d ranks does not split into groups of %d (tp %d x "
                             "dp %d x pp %d, 0 = derived)", world, known, tp, dp, pp);
        if (!tp) tp = world / known;
        else if (!dp) dp = world / known;
        else pp = world / known;
    }
    if ((long long)tp * dp * pp != world)
        return fsc_error(FSC_ERR_INVALID, "layout: world %d is not dp %d x tp %d x pp %d = %lld", world, dp, tp, pp,
                         (long long)tp * dp * pp);
    if (rank < 0 || rank >= world)
        return fsc_error(FSC_ERR_INVALID, "layout: rank %d is outside the world of %d", rank, world);
    *out = (fsc_layout){ .world = world, .tp = tp, .dp = dp, .pp = pp, .rank = rank,
                         .tensor = rank % tp, .data = (rank / tp) % dp, .pipe = rank / (tp * dp) };
    return FSC_OK;
}

void fsc_layout_describe(const fsc_layout *l, char *buf, size_t cap) {
    snprintf(buf, cap, "world %d = pp %d x dp %d x tp %d (tensor fastest); rank %d: pipe %d, data %d, tensor %d",
             l->world, l->pp, l->dp, l->tp, l->rank, l->pipe, l->data, l->tensor);
}

fsc_status fsc_layout_split(fsc_comm *world, const fsc_layout *l, fsc_comm **tensor, fsc_comm **data,
                            fsc_comm **pipe) {
    *tensor = *data = *pipe = NULL;
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
