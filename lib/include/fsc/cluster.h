/* Running a training function on every rank (the SPMD model).
 *   fsc_cluster_run(&(fsc_cluster_opts){ .world = 4, .device = "cpu" }, train, &cfg);  simulated ranks (threads)
 *   fsc_cluster_run_from_env(train, &cfg);                                              one process per GPU
 * The function sees only its fsc_rank: nothing in it knows which of the two runs it. */
#ifndef FSC_CLUSTER_H
#define FSC_CLUSTER_H
#include "export.h"
#include "status.h"
#include "device.h"
#include "comm.h"

FSC_BEGIN_DECLS

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
    int stage_through_host; /* 1: the communicator stages every buffer through host memory with the
                               device's copies even on cpu, as it always does on cuda (0: only where needed);
                               the results are the same bits, this exists to test that path without a GPU */
} fsc_cluster_opts;
/* The defaults: 1 rank, "cpu", timeout 60 s, threads and staging as 0 says. */
fsc_cluster_opts fsc_cluster_opts_default(void);

/* Run fn on opts->world ranks, each a thread with its own device and world communicator.
 * On "cuda" every rank opens GPU 0, so all ranks share one GPU, unless the environment sets FSC_SIM_GPUS=n
 * (n >= 1): then rank r uses GPU r % n. The simulated communicator stages their buffers through host memory
 * and reduces there in rank order: a collective gives the same bits on cuda as on cpu for the same inputs.
 * Returns FSC_OK if every rank returned FSC_OK; otherwise the first failing rank's status, with the
 * calling thread's message naming that rank and its message. */
fsc_status fsc_cluster_run(const fsc_cluster_opts *opts, fsc_rank_fn fn, void *arg);

/* Run fn once in this process as the rank the launcher's environment names (torchrun, Slurm or
 * Open MPI variables), on a cuda device with the NCCL communicator. */
fsc_status fsc_cluster_run_from_env(fsc_rank_fn fn, void *arg);

FSC_END_DECLS

#endif
