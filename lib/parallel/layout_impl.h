/* Private to lib/parallel: the groups layout.c makes for the strategies besides the 3D ones (parallel.h's
 * fsc_layout_split): a data group cut in blocks, and across them. */
#ifndef FSC_PARALLEL_LAYOUT_IMPL_H
#define FSC_PARALLEL_LAYOUT_IMPL_H
#include "fsc/comm.h"

/* Collective over c (its size a multiple of g >= 1): block, the group of the g consecutive ranks holding
 * this one (color rank / g), and strided, the ranks of this one's index in their blocks (color rank % g);
 * each ordered by rank and named. FSDP's shard and replica groups, expert parallelism's expert and
 * expert-data groups. On failure both are NULL. */
fsc_status fsc_layout_split_blocks(fsc_comm *c, int g, const char *block_name, const char *strided_name,
                                   fsc_comm **block, fsc_comm **strided);

#endif
