/* Private to lib/parallel: the groups layout.c makes for the strategies besides the 3D ones (parallel.h's
 * fsc_layout_split): a data group cut in blocks, and across them. */
#ifndef FSC_PARALLEL_LAYOUT_IMPL_H
#define FSC_PARALLEL_LAYOUT_IMPL_H
#include "fsc/comm.h"
#include "fsc/parallel.h"

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
