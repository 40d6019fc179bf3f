/* The planner (docs/planning.md): what a training job takes per rank, before it is launched.
 * Memory: fsc_plan_memory runs the engine's own setup and two steps of the job on simulated ranks whose device
 * is the counting device "count" (backends/count: allocations are counted in the tagged ledger but not
 * there, kernels do nothing, collectives larger than a few values move nothing), and returns each rank's peak
 * bytes per tag, with the host memory of offload beside them. Being the real code run dry, the answer is the
 * ledger peak of a real run of the same job, byte for byte, with no formula kept beside the code (of a run of two
 * steps or more: the second step's peak is every later one's, which can pass the first's). The work counted is
 * the second step's.
 * fsc_plan_measure runs the same job for real on the cpu device (a check, or a calibration).
 *   fsc_plan_job j = fsc_plan_job_default();
 *   j.model = FSC_PLAN_LLAMA; j.llama = ...; j.world = 8; j.batch = 8; j.po.kind = FSC_PAR_FSDP;
 *   (or any family's model: j.config = "{\"family\":\"llama\",\"layers\":32,...}", family.h)
 *   fsc_plan_rank *r = calloc(j.world, sizeof *r);
 *   fsc_plan_memory(&j, r);   r[i].peak[FSC_TAG_PARAMS], r[i].peak_total, r[i].host_peak_total ...
 * The same dry run counts the step's work: every kernel's FLOPs and bytes, its collectives' calls and bytes per
 * group. fsc_plan_time turns them into a step time against a device's rates and the simulated network's
 * alpha-beta ring model (a roofline per kernel; communication overlapped with compute, or not, by prefetch):
 *   fsc_plan_rates rt; fsc_plan_calibrate(8, 1, &rt); (or the rates of a GPU)
 *   rt.net_bytes_per_s = 10e9; rt.net_latency_s = 20e-6;
 *   fsc_plan_step t; fsc_plan_time(&j, r, &rt, &t);   t.step_s, t.compute_s, t.comm_s
 * Not here: the search over layouts (docs/planning.md says what remains). */
#ifndef FSC_PLAN_H
#define FSC_PLAN_H
#include "export.h"
#include <stddef.h>
#include <stdint.h>
#include "status.h"
#include "device.h"
#include "gpt.h"
#include "llama.h"
#include "optim.h"
#include "parallel.h"

FSC_BEGIN_DECLS

typedef enum { FSC_PLAN_GPT = 0, FSC_PLAN_LLAMA } fsc_plan_model;
enum { FSC_PLAN_BINS = 64 }; /* intensity bins of fsc_plan_rank's work */
enum { FSC_PLAN_COMMS = 24 }; /* communicators a rank's engine counts, at most */

/* One communicator of a rank's engine, as the time model needs it: the group's id (alike on its ranks and
 * unique to the group, so the ranks of the world that share it are its members), its kind (fsc_group_kind: a
 * hybrid fsdp's shard and replica groups and the expert-data group are of kind data, a pipeline's links of
 * kind pipeline, the clipping norm's groups of kind world), its size, and the step's calls and bytes on it. */
typedef struct {
    uint64_t id;
    int kind;
    int size;
    fsc_comm_stats stats;
} fsc_plan_comm;

/* A job as fsc-train runs it: the model, the engine's options, the optimizer, the world and the global batch.
 * Each rank builds its model and engine as the trainer does and runs two steps of batch / dp samples (zeros: token
 * 0 throughout). The model is config when it is set: a configuration text of any family (family.h: the built-in
 * ones or one the program registered), whose engine is fsc_engine_create_config's and whose samples are the
 * model's sample_input_bytes and sample_target_bytes (model, gpt, llama and sequence_parallel are then not read;
 * po.sequence_parallel is the engine's). Without config, model says which of gpt and llama: a Llama with tp > 1
 * through fsc_llama_build on the tensor group, else fsc_llama_model_create then fsc_engine_create_model; a GPT
 * with fsc_engine_create; samples of the model's seq tokens. */
typedef struct {
    fsc_plan_model model;
    fsc_gpt_config gpt;        /* FSC_PLAN_GPT */
    fsc_llama_config llama;    /* FSC_PLAN_LLAMA */
    int sequence_parallel;     /* a Llama with po.tp > 1: norms and residuals on sequence shards */
    fsc_parallel_opts po;      /* the engine's options; world = dp x tp x pp */
    fsc_optim_config oc;
    int world;                 /* ranks (>= 1) */
    int batch;                 /* global batch in sequences: a multiple of dp = world / (tp pp) */
    uint64_t seed;
    const char *config;        /* NULL, or the model as a configuration text (any family; see above): the caller's,
                                  read while the job is planned */
    int whole_products;        /* 1: the counting device counts attention's products as GPUs run them, each head's
                                  whole (T rows, the causal zeros computed too) rather than the cpu device's blocks
                                  of 32 query rows: fewer calls, more FLOPs; the fsc-plan --cluster presets set it.
                                  fsc_plan_measure runs the cpu's form whatever it says */
} fsc_plan_job;

/* A GPT-2 small job on one rank, batch 1, the library's engine and AdamW defaults (config NULL). */
fsc_plan_job fsc_plan_job_default(void);

/* One rank's answer: peak bytes per tag (fsc_device_peak_bytes) over the setup and two steps, and their peak
 * total; host_* the same of the host memory offload keeps (0 without offload); where the rank sits. */
typedef struct {
    size_t peak[FSC_TAG_COUNT];
    size_t peak_total;
    size_t host_peak[FSC_TAG_COUNT];
    size_t host_peak_total;
    int has_host;              /* 1: the job offloads (host_* hold its host memory) */
    int tensor, data, stage;   /* the rank's coordinates (fsc_layout) */
    /* The step's work (the setup's not counted): the FLOPs of its matrix products (fsc_plan_memory only: 0 from
     * fsc_plan_measure) and the bytes its collectives moved per group (fsc_engine_comm_stats_group, every op
     * summed), which fsc_plan_memory counts as the real run does. */
    double gemm_flops;
    double comm_bytes[FSC_GROUP_COUNT];
    /* The time model's input (fsc_plan_memory only: zeros from fsc_plan_measure but comm and group_size): the
     * FLOPs and bytes read and written of every kernel call and device copy of the step, summed by arithmetic
     * intensity (bin i: flops / bytes in [2^((i - 32) / 2), 2^((i - 31) / 2)); the first also holds the calls of
     * no FLOPs, the last those of no bytes); the step's calls and bytes of each collective per group, and each
     * group's size (data dp, tensor tp, pipeline pp, expert ep, world the world). */
    double work_flops[FSC_PLAN_BINS], work_bytes[FSC_PLAN_BINS];
    fsc_comm_stats comm[FSC_GROUP_COUNT];
    int group_size[FSC_GROUP_COUNT]; /* of each kind's main group (data: the whole data group; hybrid sharding's
                                        and the experts' sub-groups are in comms with their own sizes) */
    fsc_plan_comm comms[FSC_PLAN_COMMS]; /* every communicator of the engine (ncomms), each with its own size:
                                            what fsc_plan_time costs */
    int ncomms;
    double kernel_calls;    /* the step's kernel calls and device copies (fsc_plan_memory only) */
    double host_work_bytes; /* with offload: the bytes the host's kernels and copies of the step read and wrote (the
                               optimizer's step on the host; fsc_plan_memory only) */
} fsc_plan_rank;

/* Per-rank peaks of the job on the counting device into out[0 .. job->world - 1]. Every rank of the world runs
 * the setup (as a thread; allocations beyond a few kilobytes are not there, so a large model needs no memory) and
 * one rank per role the step, the ranks whose step it stands for taking its results (docs/planning.md); the job's
 * errors are the engine's (an invalid layout fails as fsc-train would, with its message). */
fsc_status fsc_plan_memory(const fsc_plan_job *job, fsc_plan_rank *out);
/* The same job run for real on the cpu device (simulated ranks, one thread each): the measured peaks. */
fsc_status fsc_plan_measure(const fsc_plan_job *job, fsc_plan_rank *out);

/* A rank's device and the network between ranks, as the time model sees them. One level (node_ranks 0, the
 * simulated network): every link has net_* rates. Two levels (node_ranks >= 1: world rank w is on node
 * w / node_ranks): a group whose ranks are all on one node runs at the node's rates (node_*: NVLink), a group
 * spanning k > 1 nodes with at most g of its ranks on one node pays steps(g) node latencies and steps(k) network
 * latencies a call and its bytes at net_bytes_per_s (a ring's bytes all cross the slowest link: InfiniBand). */
typedef struct {
    double flops_per_s;     /* the device's matrix-product rate (FLOP/s, > 0) */
    double bytes_per_s;     /* its memory bandwidth (bytes/s, > 0) */
    double net_bytes_per_s; /* a rank's link between nodes (every link with node_ranks 0) (bytes/s; 0: free) */
    double net_latency_s;   /* its latency (s; 0: none) */
    int node_ranks;         /* ranks per node (0: one level) */
    double node_bytes_per_s, node_latency_s; /* a rank's link within its node (node_ranks >= 1) */
    double host_bytes_per_s; /* a rank's share of its host's memory bandwidth, for offload's work on the host
                                (host_work_bytes, added to compute); 0: that work costs nothing */
    double kernel_s;         /* the fixed cost of one kernel call or device copy of a rank's device, beyond its
                                roofline (s, >= 0; 0: none): a GPU's kernel launch (the fsc-plan presets' and
                                --launch-us), a cpu call's overhead (fsc_plan_calibrate). The formula adds
                                kernel_calls x it to compute, the replay moves the clock by roofline + it a call;
                                the host's calls under offload cost none */
    double copy_bytes_per_s; /* fsc_plan_replay only: copies between host memory and the device (offload's, over
                                PCIe) take bytes / it on one link a rank, as fsc_cluster_opts.sim_copy_gbps makes
                                them take on the simulator (0: free; the formula never costs them) */
} fsc_plan_rates;

/* The predicted time of a step: the slowest rank's, and where it goes. */
typedef struct {
    double step_s;     /* max over ranks of the rank's step */
    double compute_s;  /* that rank's compute: sum over kernels of max(flops / rate, bytes / bandwidth), with a
                          pipeline's bubble (x 1 / (1 - b), b its schedule's formula with equal F, B and W:
                          (m + pp - 1) / m for gpipe and 1f1b's m micro-batches), the calls' fixed cost
                          (kernel_calls x kernel_s) and offload's host work (host_work_bytes / host_bytes_per_s) */
    double comm_s;     /* its collectives: the sum of each call's alpha-beta ring time (sim/sim_net.c's model)
                          on its own communicator's size and links */
    int rank;          /* the slowest rank */
    double calls;      /* that rank's kernel calls and device copies (kernel_calls) */
    double calls_s;    /* their fixed cost, part of compute_s: calls x kernel_s (x the pipeline's bubble) */
} fsc_plan_step;

/* The step time of the planned ranks r[0 .. job->world - 1] (fsc_plan_memory's) at rates. A rank's step is
 * max(compute, comm) with the job's prefetch (communication assumed hidden behind computation as far as it
 * can be), compute + comm without: a simplification (docs/planning.md states what it leaves out). */
fsc_status fsc_plan_time(const fsc_plan_job *job, const fsc_plan_rank *r, const fsc_plan_rates *rates,
                         fsc_plan_step *out);
/* The step time by replay: the job's setup and a step on the counting device as fsc_plan_memory runs them, then
 * a second step on the simulator's modelled clock (cluster.h, FSC_SIM_CLOCK_MODEL): every kernel call moves its
 * rank's clock by its roofline time at rates, every collective takes the simulated network's ring time at rates'
 * link and starts when its last rank arrives, asynchronous calls overlap what runs meanwhile. So the step is
 * composed by the engine's own order of work (DDP's buckets, FSDP's prefetch, a pipeline schedule's actions and
 * bubbles, the waits) rather than by max(compute, comm). out->step_s is rank 0's replayed step (the ranks leave a
 * step together); compute_s, comm_s and rank are fsc_plan_time's terms of the same counts, for the explanation.
 * The network is the rates' links, one level or two (node_ranks > 0: each collective at its group's levels, as
 * fsc_plan_time costs it; the simulator's fsc_cluster_opts.sim_node_ranks); every rank runs its step
 * (fsc_plan_memory runs one rank per role). */
fsc_status fsc_plan_replay(const fsc_plan_job *job, const fsc_plan_rates *rates, fsc_plan_step *out);
/* The rates of each of world simulated ranks on this machine's cpu device (threads BLAS threads a rank, 0: 1 with
 * several ranks, else the library default): the gemm rate, the mean of min(world, 2, cores) ranks measuring at
 * once (each the best of 3 fsc_device_measure_tflops), and the memory bandwidth, one rank's best of a few 12 MiB
 * device copies (read and write counted); both times cores / (world x threads) when the world's threads
 * outnumber the cores (they share them); and a kernel call's fixed cost (kernel_s), one rank's best mean time of
 * a few hundred calls on 16 elements, divided by the same share. The network's fields 0. Takes a few tenths of a
 * second and about 30 MiB. */
fsc_status fsc_plan_calibrate(int world, int threads, fsc_plan_rates *out);
/* The same on the simulated cluster's clock sim_clock (cluster.h): FSC_SIM_CLOCK_WALL is fsc_plan_calibrate;
 * FSC_SIM_CLOCK_VIRTUAL measures as a rank on the virtual clock gets its time, its own thread's CPU time (one
 * BLAS thread, each rank a core to itself: no share), for predictions of runs on that clock. */
fsc_status fsc_plan_calibrate_clock(int world, int threads, int sim_clock, fsc_plan_rates *out);
/* Fit rates->bytes_per_s (the roofline's memory roof) to the job's own kernels on this machine's cpu device: the
 * job's model with one data-parallel rank's share of the batch and the job's micro-batches, precision,
 * recomputation and clipping, on min(world, cores) ranks at once (data-parallel, no network: they contend for the
 * machine as the job's ranks will), counted on the counting device and timed for real on the virtual clock (the
 * median of 15 steps after an untimed one on rank 0's clock: its thread's CPU time and its waits for the other
 * ranks). bytes_per_s becomes the rate at which the time model's compute of that step plus kernel_calls x
 * kernel_s equals the measured; the gemm rate stays (raised only when the step ran faster than its products alone
 * at it). The cpu's memory and elementwise kernels (GELU's tanh, softmax's exp, layer norms, AdamW) run far below
 * a copy's bandwidth, which is what a copy calibrates. Needs that job to fit in this machine's memory; takes about
 * 16 of its steps. */
fsc_status fsc_plan_fit_rates(const fsc_plan_job *job, fsc_plan_rates *rates);

FSC_END_DECLS

#endif
