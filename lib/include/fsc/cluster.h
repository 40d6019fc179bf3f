/* Running a training function on every rank (the SPMD model).
 *   fsc_cluster_run(&(fsc_cluster_opts){ .world = 4, .device = "cpu" }, train, &cfg);  simulated ranks (threads)
 *   fsc_cluster_run_from_env(train, &cfg);                                              one process per GPU
 * The function sees only its fsc_rank: nothing in it knows which of the two runs it. */
#ifndef FSC_CLUSTER_H
#define FSC_CLUSTER_H
#include "status.h"
#include "device.h"
#include "comm.h"

typedef struct {
    int rank;          /* rank in the world */
    int world;         /* world size */
    int local_rank;    /* rank on this machine */
    fsc_device *dev;   /* this rank's device */
    fsc_comm *comm;    /* world communicator */
} fsc_rank;

typedef fsc_status (*fsc_rank_fn)(fsc_rank *r, void *arg);

typedef struct {
    int world;              /* number of simulated ranks (>= 1) */
    const char *device;     /* "cpu" (default) or "cuda" */
    double timeout_s;       /* a collective waiting longer fails on every rank (default 60) */
    int threads_per_rank;   /* BLAS threads per rank (0: 1 when world > 1, else library default) */
} fsc_cluster_opts;

/* Run fn on opts->world ranks, each a thread with its own device and world communicator.
 * Returns FSC_OK if every rank returned FSC_OK; otherwise the first failing rank's status, with the
 * calling thread's message naming that rank and its message. */
fsc_status fsc_cluster_run(const fsc_cluster_opts *opts, fsc_rank_fn fn, void *arg);

/* Run fn once in this process as the rank the launcher's environment names (torchrun, Slurm or
 * Open MPI variables), on a cuda device with the NCCL communicator. */
fsc_status fsc_cluster_run_from_env(fsc_rank_fn fn, void *arg);

#endif
