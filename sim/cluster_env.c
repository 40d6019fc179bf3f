/* fsc_cluster_run_from_env(_opts) (cluster.h): one process per rank, as the launcher's environment names it.
 * It sits above both ways of running ranks: a single process on cpu is the simulated cluster of one
 * (cluster.c); more processes, or cuda, go to lib/core/launch.c (MPI or NCCL between processes). Here and
 * not in launch.c, so that the core never calls the simulator. Not here: the launcher's variables
 * (fsc_launch_env_parse), the plug-ins, the rendezvous. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fsc/cluster.h"
#include "core/kernels.h" /* fsc_gpu_present */
#include "core/launch_impl.h"

fsc_status fsc_cluster_run_from_env_opts(const fsc_cluster_opts *opts, fsc_rank_fn fn, void *arg) {
    FSC_CHECK_ARG(fn);
    fsc_cluster_opts o = opts ? *opts : fsc_cluster_opts_default();
    const char *device = o.device ? o.device : "cpu";
    if (strcmp(device, "cpu") != 0 && strcmp(device, "cuda") != 0)
        return fsc_error(FSC_ERR_INVALID, "fsc_cluster_run_from_env: unknown device \"%s\" (cpu or cuda)", device);
    if (o.reduce_native != 0 && o.reduce_native != 1)
        return fsc_error(FSC_ERR_INVALID, "fsc_cluster_run_from_env: reduce_native %d must be 0 or 1", o.reduce_native);
    if (o.threads_per_rank < 0)
        return fsc_error(FSC_ERR_INVALID, "fsc_cluster_run_from_env: threads_per_rank %d is negative", o.threads_per_rank);
    fsc_launch_env env;
    FSC_TRY(fsc_launch_env_parse(NULL, NULL, &env));
    char who[96];
    snprintf(who, sizeof who, "rank %d of %d (%s)", env.rank, env.world, fsc_launcher_name(env.launcher));
    double timeout = o.timeout_s > 0 && !getenv("FSC_COMM_TIMEOUT") ? o.timeout_s : env.comm_timeout_s;
    if (strcmp(device, "cpu") == 0 && env.world == 1) { /* one process: the simulated cluster of one rank, no MPI */
        o.world = 1;
        o.reduce_native = 0;
        o.timeout_s = timeout;
        return fsc_cluster_run(&o, fn, arg);
    }
    o.device = device;
    return fsc_launch_run_process(&env, who, &o, timeout, fn, arg);
}

fsc_status fsc_cluster_run_from_env(fsc_rank_fn fn, void *arg) {
    FSC_CHECK_ARG(fn);
    fsc_cluster_opts o = fsc_cluster_opts_default();
    const char *d = getenv("FSC_DEVICE");
    o.device = d && *d ? d : fsc_gpu_present() ? "cuda" : "cpu"; /* never CUDA by default on a CPU machine */
    o.timeout_s = 0;
    return fsc_cluster_run_from_env_opts(&o, fn, arg);
}
