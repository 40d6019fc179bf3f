/* Private to the library: the device object the core builds around a backend's table (plugin/device_ops.h),
 * the kernel-call macro and the linked-in cpu backend's entry point. Not installed. */
#ifndef FSC_CORE_DEVICE_IMPL_H
#define FSC_CORE_DEVICE_IMPL_H
#include <limits.h>
#include "fsc/plugin/device_ops.h"

struct fsc_device {
    const fsc_device_ops *ops;
    void *ctx;
    void *plugin;                  /* dlopen handle, if loaded from a plug-in */
    int is_count;                  /* the counting device (fsc_device_is_count: asked on every kernel call) */
    size_t cur[FSC_TAG_COUNT];
    size_t peak[FSC_TAG_COUNT];
    size_t cur_total, peak_total;
    struct fsc_alloc_map *live;    /* pointer -> (bytes, tag) of live allocations */
    /* a host device (fsc_device_create_host) of an accelerator with host_alloc: memory comes from it */
    const fsc_device_ops *mem_ops;
    void *mem_ctx;
    /* a host device: the accelerator whose memory its collectives go through (communicators send device
     * memory; fsc_grad_norm and the non-finite vote stage through it), NULL otherwise */
    struct fsc_device *comm_dev;
    double copy_s_per_byte;        /* simulated copy cost of upload/download (fsc_device_set_copy_cost), 0: none */
    _Atomic double copy_link_free; /* seconds (fsc_clock_now) when the modelled copy link is next idle */
    int copy_rank_clock;           /* a virtual cluster's rank device (sim/cluster.c): copies are timed on its rank's
                                      virtual clock only; made by another thread (the simulator's staging on a
                                      progress thread) they cost nothing. 0: every copy costs (the wall clock) */
    _Atomic size_t copied[2];      /* bytes downloaded [0] and uploaded [1] (fsc_device_copied_bytes) */
};

/* The simulator's host<->device copy bandwidth (fsc_cluster_opts.sim_copy_gbps): every upload and download of
 * dev then also takes bytes / (gbps 1e9) seconds of the calling thread (0: no cost). */
void fsc_device_set_copy_cost(fsc_device *dev, double gbps);
/* device_copy.c: a copy of bytes occupies the modelled link from max(now, its last copy's end): returns when it
 * ends (fsc_clock_now seconds; 0 without a copy cost). fsc_device_copy_sleep_until waits until then. */
double fsc_device_copy_reserve(fsc_device *dev, size_t bytes);
void fsc_device_copy_sleep_until(double t);

/* Host memory as a device of its own (offload, docs/offload.md): the cpu backend's kernels and a ledger of its
 * own; its memory comes from accel's host_alloc (pinned) when accel has one, else from the cpu backend.
 * accel (may be NULL) must outlive it. */
fsc_status fsc_device_create_host(fsc_device *accel, fsc_device **out);

/* Call a kernel: FSC_K(dev, gelu_forward, out, inp, n) */
#define FSC_K(dev, op, ...) ((dev)->ops->op((dev)->ctx, __VA_ARGS__))

/* The cpu backend (backends/cpu), linked into the library: an fsc_device_open_fn. */
fsc_status fsc_cpu_device_open(int abi_version, const fsc_device_opts *opts, const fsc_device_ops **ops,
                               void **ctx);

/* The counting device (backends/count, docs/planning.md), linked in: an fsc_device_open_fn. Allocations of more
 * than FSC_COUNT_REAL_MAX bytes get fake addresses (fsc_count_is_fake) that nothing may dereference; smaller
 * ones are real, zeroed host memory; kernels do nothing. fsc_device_is_count: dev is such a device. */
#define FSC_COUNT_REAL_MAX ((size_t)64 << 10)
fsc_status fsc_count_device_open(int abi_version, const fsc_device_opts *opts, const fsc_device_ops **ops,
                                 void **ctx);
int fsc_count_is_fake(const void *p);
int fsc_device_is_count(const fsc_device *dev);
/* Whether what is written at p on dev is thrown away (a fake address of the counting device): computing
 * values only to upload them there (parameter init) can be skipped. */
int fsc_device_discards(const fsc_device *dev, const void *p);
/* The FLOPs (2 M N K per product) of every gemm a counting device was asked for; 0 for another device. */
uint64_t fsc_count_gemm_flops(const fsc_device *dev);
/* The work of every kernel call and device copy a counting device was asked for (gemm included): its FLOPs and
 * the bytes it reads and writes, from its arguments, summed by arithmetic intensity into FSC_COUNT_BINS bins: bin
 * i holds the calls of flops / bytes in [2^((i - 32) / 2), 2^((i - 31) / 2)) (the first also those of no FLOPs,
 * the last those of no bytes). A roofline then costs each bin max(flops / rate, bytes / bandwidth), exact for
 * every bin but the one the ridge point falls in. Zeros for another device. */
enum { FSC_COUNT_BINS = 64 };
void fsc_count_work(const fsc_device *dev, double *flops, double *bytes);
/* The calls fsc_count_work summed (each kernel call and device copy one); 0 for another device. */
uint64_t fsc_count_calls(const fsc_device *dev);
/* The planner's replay (fsc_plan_replay): from now on each kernel call and copy of a counting device also moves
 * the calling thread's modelled clock (core/clock_impl.h) by max(flops / flops_per_s, bytes / bytes_per_s) +
 * kernel_s, its roofline time. No effect on another device; rates <= 0: stop. */
void fsc_count_set_rates(fsc_device *dev, double flops_per_s, double bytes_per_s, double kernel_s);
/* While on is set (1) on the calling thread, a counting device's copies made by that thread are not counted (no
 * work, no call, no replay time): the simulated communicator's staging of a collective's data through host memory
 * (sim/sim_stage.c), which stands for what a real communicator moves itself, in the time the network model gives
 * the whole call. Off (0) again after. */
void fsc_count_staging(int on);
/* Whether dev counts alike calls in bulk: the counting device, not moving a replay's clock (fsc_count_set_rates
 * off), where alike products may be counted at once (fsc_count_gemm_rows). */
int fsc_count_bulk(const fsc_device *dev);
/* Count `times` sweeps of causal attention's products over row blocks (lib/nn/attention.c): for i0 = 0, rows,
 * 2 rows, ... below T, with i1 = min(i0 + rows, T), one product of (M, N, K) = scores (i1 - i0, i1, hs), lower
 * (i1 - i0, hs, i1) or lower_t (i1 - i0, hs, T - i0), beta (whether C is read) and batch: the same FLOPs, bytes,
 * bins and calls as `times` x the blocks' FSC_K(dev, gemm, ...) calls (a sweep's counts are kept, so the layers'
 * and micro-batches' alike sweeps cost a lookup). Only where fsc_count_bulk(dev) (else nothing). */
enum { FSC_COUNT_SCORES = 0, FSC_COUNT_LOWER, FSC_COUNT_LOWER_T };
void fsc_count_gemm_rows(fsc_device *dev, int kind, int T, int rows, int hs, float beta, int batch, uint64_t times);

/* The places a plug-in file (libfsc_cuda.so, libfsc_mpi.so) is looked for, in order: beside the executable,
 * in its ../lib, beside the file holding libfsc's code (libfsc.so; dladdr), then the bare name for the
 * loader's search. Writes at most FSC_PLUGIN_PLACES paths; returns how many. */
#define FSC_PLUGIN_PLACES 4
int fsc_plugin_places(const char *file, char (*out)[PATH_MAX + 64]);
/* The files to try for a plug-in: env (the value of its variable, $FSC_CUDA_PLUGIN or $FSC_MPI_PLUGIN) alone
 * when it is set and not empty (a file, or a folder holding file), else the places above. Returns how many. */
int fsc_plugin_candidates(const char *env, const char *file, char (*out)[PATH_MAX + 64]);
/* dlopen (flags) the first of the n candidates that loads; path (cap bytes) then names it. NULL when none
 * does: path names the last one tried and tried (tcap bytes) each one's loader error, "; " between. */
void *fsc_plugin_open(char (*cands)[PATH_MAX + 64], int n, int flags, char *path, size_t cap, char *tried,
                      size_t tcap);
/* Whether a GPU is found, cheaply and without loading CUDA: an NVIDIA device node (/dev/nvidia0 or
 * /proc/driver/nvidia/version) exists and the cuda plug-in file is there ($FSC_CUDA_PLUGIN when set, else
 * a file in the places above). */
int fsc_gpu_present(void);

#endif
