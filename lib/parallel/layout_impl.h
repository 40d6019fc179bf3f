/* Private to lib/parallel: the group factory. layout.c makes every communicator an engine uses: the 3D ones
 * (parallel.h's fsc_layout_split), the blocked and strided groups of the data group (expert and expert-data,
 * FSDP's shard and replica) and the clipping norm's group, which the engine holds in one fsc_groups and frees
 * once; and the pipeline's point-to-point links and tied-tensor pairs, which pipe.c holds (their number depends
 * on the schedule). */
#ifndef FSC_PARALLEL_LAYOUT_IMPL_H
#define FSC_PARALLEL_LAYOUT_IMPL_H
#include "fsc/comm.h"
#include "fsc/parallel.h"

/* Every communicator made for one engine (NULL: not made); fsc_groups_free frees them all. */
typedef struct {
    fsc_comm *tensor, *data, *pipe;  /* the 3D groups (tp or pp > 1; tensor with tp > 1, pipe with pp > 1) */
    fsc_comm *expert, *expert_data;  /* expert parallelism (ep > 1, a model with experts) */
    fsc_comm *shard, *replica;       /* FSDP */
    fsc_comm *norm;                  /* the clipping norm's, when fsc_layout_norm_group made one */
} fsc_groups;
void fsc_groups_free(fsc_groups *g);

/* FSDP's shard group size over a data group of dp ranks: dp (full, grad_op), 1 (no_shard), or the hybrid
 * group (po->hybrid_group, default dp / 2). */
int fsc_layout_shard_size(const fsc_parallel_opts *po, int dp);

/* Collective over data (the engine's data group): the groups the strategy and expert parallelism reduce over,
 * into g: expert and expert_data with ep > 1 (ep consecutive data ranks, and across them), shard and replica
 * with shard > 0 (shard consecutive data ranks, and across them). In that order; on failure none is made. */
fsc_status fsc_layout_data_groups(fsc_comm *data, int ep, int shard, fsc_groups *g);

/* Collective over c, every member giving its place me (the key; a pipeline's stage): the links (2i + odd,
 * 2i + odd + 1) of that order, named; a member alone in its part (the first for odd, the last when it ends a
 * pair) gets NULL. The prefetching pipeline's links (pipe_link.c). */
fsc_status fsc_layout_split_links(fsc_comm *c, int me, int odd, const char *name, fsc_comm **out);
/* Collective over c, every member giving its place me: places a and b (a < b) in one group, a its rank 0, named;
 * every other member gets NULL. An interleaved pipeline's wrap-around link, a tied tensor's owner and user. */
fsc_status fsc_layout_split_pair(fsc_comm *c, int me, int a, int b, const char *name, fsc_comm **out);

/* Collective over c (its size a multiple of g >= 1): block, the group of the g consecutive ranks holding
 * this one (color rank / g), and strided, the ranks of this one's index in their blocks (color rank % g);
 * each ordered by rank and named. FSDP's shard and replica groups, expert parallelism's expert and
 * expert-data groups. On failure both are NULL. */
fsc_status fsc_layout_split_blocks(fsc_comm *c, int g, const char *block_name, const char *strided_name,
                                   fsc_comm **block, fsc_comm **strided);

/* Collective over world: the group over which the clipping norm (and its non-finite pieces) is summed, decided
 * once from layout l. split is the group of data ranks that split this rank's reduced gradient (a part of
 * data, the data group; NULL: each data rank holds all of it); across tensor ranks and pipeline stages the
 * gradient is split further. Without tp or pp: split itself. With pp only and no split: pipe. Otherwise a
 * group of the world made here, *made (the caller frees it; NULL when none was made), named "norm": the ranks
 * of every tensor rank and stage whose split group has the same lowest data rank. */
fsc_status fsc_layout_norm_group(fsc_comm *world, const fsc_layout *l, fsc_comm *data, fsc_comm *split,
                                 fsc_comm *pipe, fsc_device *dev, fsc_comm **norm, fsc_comm **made);

#endif
