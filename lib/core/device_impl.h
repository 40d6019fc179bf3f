/* Private to the core and its backends (backends/, the tests of the backends): the device object the core
 * builds around a backend's table (plugin/device_ops.h), the raw kernel-call macro and the linked-in backends'
 * entry points. Not installed. The layers above the core include core/kernels.h instead (typed kernel calls,
 * the counting device's queries), which keeps struct fsc_device and its table out of their reach;
 * ci/check_layers.sh fails a file outside lib/core, backends/ and tests/ that includes this one. */
#ifndef FSC_CORE_DEVICE_IMPL_H
#define FSC_CORE_DEVICE_IMPL_H
#include <limits.h>
#include "fsc/plugin/device_ops.h"
#include "core/kernels.h"

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
    int copy_rank_clock;           /* a virtual cluster's rank device (fsc_device_set_copy_rank_clock): copies are
                                      timed on its rank's virtual clock only; made by another thread (the
                                      simulator's staging on a progress thread) they cost nothing. 0: every copy
                                      costs (the wall clock) */
    _Atomic size_t copied[2];      /* bytes downloaded [0] and uploaded [1] (fsc_device_copied_bytes) */
    int whole_products;            /* fsc_device_whole_products: 0 on the cpu and counting devices, 1 elsewhere */
};

/* device_copy.c: a copy of bytes occupies the modelled link from max(now, its last copy's end): returns when it
 * ends (fsc_clock_now seconds; 0 without a copy cost). fsc_device_copy_sleep_until waits until then. */
double fsc_device_copy_reserve(fsc_device *dev, size_t bytes);
void fsc_device_copy_sleep_until(double t);

/* device.c: FSC_ERR_INVALID naming fn and the pointer when p + bytes passes the end of the address space (a negative
 * size turned size_t: the backend's memmove ran off the end, or a copy of SIZE_MAX bytes copied nothing and said
 * FSC_OK); FSC_OK otherwise. */
fsc_status fsc_device_check_span(const char *fn, const char *name, const void *p, size_t bytes);

/* Call a kernel through the table (the core, backends' tests): FSC_K(dev, gelu_forward, out, inp, n). Above the
 * core: fsc_k_gelu_forward(dev, out, inp, n) (core/kernels.h). */
#define FSC_K(dev, op, ...) ((dev)->ops->op((dev)->ctx, __VA_ARGS__))

/* The cpu backend (backends/cpu), linked into the library: an fsc_device_open_fn. */
fsc_status fsc_cpu_device_open(int abi_version, const fsc_device_opts *opts, const fsc_device_ops **ops,
                               void **ctx);

/* The counting device (backends/count, docs/planning.md; its queries are in core/kernels.h), linked in: an
 * fsc_device_open_fn. */
fsc_status fsc_count_device_open(int abi_version, const fsc_device_opts *opts, const fsc_device_ops **ops,
                                 void **ctx);

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

#endif
