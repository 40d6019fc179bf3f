/* Private to the library: one process per rank as lib/core/launch.c runs it, for the entry points that sit
 * above both the core and the simulator (sim/cluster_env.c: fsc_cluster_run_from_env(_opts)). */
#ifndef FSC_CORE_LAUNCH_IMPL_H
#define FSC_CORE_LAUNCH_IMPL_H
#include "fsc/cluster.h"
#include "fsc/launch.h"

/* Run fn once in this process as env's rank, over the communicator between processes: NCCL from the cuda
 * plug-in when o->device is "cuda", else MPI from the plug-in libfsc_mpi.so (launch.h). who names the rank
 * in messages; timeout_s bounds a stuck collective; o's reduce_native and threads_per_rank apply. */
fsc_status fsc_launch_run_process(const fsc_launch_env *env, const char *who, const fsc_cluster_opts *o,
                                  double timeout_s, fsc_rank_fn fn, void *arg);

#endif
