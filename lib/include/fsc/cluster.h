/* Running a training function on every rank (the SPMD model).
 *   fsc_cluster_run(&(fsc_cluster_opts){ .world = 4, .device = "cpu" }, train, &cfg);  simulated ranks (threads)
 *   fsc_cluster_run_from_env(train, &cfg);                          one process per rank (MPI on cpu, NCCL on GPUs)
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
    int reduce_native;      /* processes (fsc_cluster_run_from_env_opts) only: 1 reduces with MPI's or NCCL's own
                               all-reduce/reduce-scatter (faster, bits may differ from the simulator's); 0 (default)
                               sums in rank order as the simulated cluster does. Simulated ranks refuse 1. */
    double sim_bandwidth_gbps; /* simulated ranks only: every link's bandwidth in GB/s (1e9 bytes/s); a collective
                                  then takes a ring algorithm's time (docs/overlap.md). 0 (default): no cost */
    double sim_latency_us;     /* simulated ranks only: every link's latency in microseconds (0: none) */
    int sim_node_ranks;        /* simulated ranks with a network: ranks per node, two levels of links (world rank w on
                                  node w / sim_node_ranks): a group on one node takes the node's links below, one
                                  spanning k > 1 nodes with at most g ranks on one pays per call the ring's steps
                                  over g at the node's latency and over k at sim_latency_us, and its bytes at
                                  sim_bandwidth_gbps (fsc/plan.h's model). 0 (default): one level */
    double sim_node_bandwidth_gbps, sim_node_latency_us; /* the links within a node (sim_node_ranks >= 1; 0: free) */
    double sim_copy_gbps;      /* simulated ranks only: a copy between host memory and a rank's device (upload,
                                  download) takes bytes / this GB/s of the rank's time, as over PCIe (offload,
                                  docs/offload.md). 0 (default): no cost */
    double *sim_net_seconds;   /* simulated ranks with a network only: if not NULL, (world) entries set when the run
                                  succeeds to each rank's network seconds, the sum of the ring costs of the calls
                                  it took part in (a send's to its sender; on the counting device the calls it
                                  skips too); the planner's tests compare its communication time with them */
    int sim_clock;             /* simulated ranks only: FSC_SIM_CLOCK_WALL (0, the default), FSC_SIM_CLOCK_VIRTUAL or
                                  FSC_SIM_CLOCK_MODEL */
    int sim_sync_sends;        /* simulated ranks only: 1: a send returns (a started one completes) only once the
                                  receiver has taken its message, as NCCL's sends wait for their receive, so that a
                                  program that NCCL would deadlock deadlocks here too (and fails after timeout_s,
                                  naming the send); the wait is not timed on the virtual clock beyond the receive's
                                  start. The receiver reads the sender's buffer when it takes the message, as
                                  NCCL reads it only once the receive runs (a cpu device's; a staged device's is
                                  copied at the send), so a buffer changed before its send completed arrives
                                  changed. 0 (default): sends are buffered, as MPI's */
    const int *stand_in;       /* simulated ranks on the wall clock only (the planner's one rank per role): NULL, or
                                  (world) entries the ranks may write while they run. A rank w that returns from its
                                  function while stand_in[w] names another world rank v is stood in for by v from then
                                  on: a collective of a group holding both completes without w, w sending what v
                                  sends (v computes w's part of an all-reduce). A collective of a group holding w but
                                  not v, a split, or a receive from w then fails with FSC_ERR_COMM. */
} fsc_cluster_opts;
/* The simulated cluster's clocks (fsc_cluster_opts.sim_clock; docs/overlap.md, "The virtual clock"):
 *   WALL     the ranks' threads share the machine's cores; a modelled network or copy link sleeps. Times read on
 *            it (traces, the trainer's ms a step, a pipeline's waits) include the other ranks' turns on the cores.
 *   VIRTUAL  every rank has its own clock: it advances by the CPU time of the rank's own thread (as if each rank
 *            had a core to itself, whatever else runs on the machine) and jumps forward to the end of what the
 *            rank waits for: a collective starts when its last rank arrives and ends after the network's modelled
 *            time, a message arrives after its send's, a modelled copy ends after its bytes. Nothing sleeps.
 *            fsc_trace_now_us on a rank's thread reads it, so traces and the trainer's step times are simulated
 *            time. The cpu device only, one BLAS thread a rank, no staging (their time would not be the rank's
 *            thread's). The bits are those of the wall clock: only time is simulated. fsc_comm_test says done
 *            once the call has ended on the rank's clock (a loop of tests advances it by the loop's CPU time).
 *   MODEL    the planner's replay (fsc_plan_replay): as VIRTUAL, but a rank's clock does not count its CPU time;
 *            it advances only by the modelled time of the counting device's kernels (at the rates the planner
 *            gives it) and by what the rank waits for. On the counting device the collectives it skips still
 *            meet (no data moves) so that each starts when its last rank arrives. A loop of fsc_comm_test
 *            alone does not move this clock, so it never sees a call end later than now: wait for it. */
enum { FSC_SIM_CLOCK_WALL = 0, FSC_SIM_CLOCK_VIRTUAL = 1, FSC_SIM_CLOCK_MODEL = 2 };
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
 * Open MPI variables; launch.h). The device picks the communicator between processes:
 *   "cpu"   MPI, from the plug-in libfsc_mpi.so ($FSC_MPI_PLUGIN, next to the executable, its ../lib, next
 *           to libfsc.so, the loader's path),
 *           for processes started by mpirun (or srun --mpi=pmix); a world of 1 needs no MPI;
 *   "cuda"  NCCL, from the cuda plug-in, one GPU per process.
 * From opts: device (NULL: "cpu"), threads_per_rank, reduce_native, timeout_s (> 0: a collective stuck this
 * long fails; FSC_COMM_TIMEOUT overrides; 0: FSC_COMM_TIMEOUT or 600 s). The world is the launcher's;
 * opts->world is not used. Without plug-in, launcher or MPI runtime the error says what is missing. */
fsc_status fsc_cluster_run_from_env_opts(const fsc_cluster_opts *opts, fsc_rank_fn fn, void *arg);
/* The same with the device $FSC_DEVICE and the other options' defaults. Without FSC_DEVICE: "cuda" when a GPU
 * is found (an NVIDIA device node, /dev/nvidia0 or /proc/driver/nvidia/version, and the cuda plug-in's file,
 * $FSC_CUDA_PLUGIN or one in the plug-in places), else "cpu": the default never fails for want of CUDA. */
fsc_status fsc_cluster_run_from_env(fsc_rank_fn fn, void *arg);

FSC_END_DECLS

#endif
