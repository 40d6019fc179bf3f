/* The device: memory with a tagged ledger, and the kernels the modules need.
 * Programs get a device by name ("cpu", or "cuda" when the plug-in and a GPU are present).
 * Device memory is opaque: the core touches it only through these functions and the kernel table
 * (plugin/device_ops.h), so the same core code runs on every backend. */
#ifndef FSC_DEVICE_H
#define FSC_DEVICE_H
#include "export.h"
#include <stddef.h>
#include "status.h"
#include "dtype.h"

FSC_BEGIN_DECLS

typedef struct fsc_device fsc_device;

/* What an allocation is for; the device reports current and peak bytes per tag. */
typedef enum {
    FSC_TAG_PARAMS = 0, /* parameters: masters, shards, gathered full parameters */
    FSC_TAG_GRADS,      /* gradients */
    FSC_TAG_OPTIM,      /* optimizer state (moments) */
    FSC_TAG_ACTS,       /* activations saved for backward, and activation gradients */
    FSC_TAG_COMM,       /* communication buffers */
    FSC_TAG_WORKSPACE,  /* scratch */
    FSC_TAG_COUNT
} fsc_tag;

const char *fsc_tag_name(fsc_tag t); /* "params", "grads", "optim", "acts", "comm", "workspace" */

typedef struct {
    int threads;     /* CPU: BLAS and kernel threads (0 = library default) */
    int ordinal;     /* CUDA: which GPU (default 0) */
} fsc_device_opts;
/* The defaults: the library's thread count, GPU 0. */
fsc_device_opts fsc_device_opts_default(void);

/* Create a device by name: "cpu" or "cuda", or "count": the planner's counting device (fsc/plan.h,
 * docs/planning.md), whose allocations the ledger counts but which are not there (larger than 64 KiB: fake
 * addresses that must not be read or written; smaller: zeroed host memory) and whose kernels do nothing.
 * opts may be NULL. */
fsc_status fsc_device_create(const char *name, const fsc_device_opts *opts, fsc_device **out);
void fsc_device_free(fsc_device *dev);
const char *fsc_device_name(const fsc_device *dev); /* "cpu", "cuda", "count"; "(null)" for NULL */

/* Allocate bytes of device memory under tag. Contents are undefined. bytes 0 gives NULL and FSC_OK. */
fsc_status fsc_device_alloc(fsc_device *dev, fsc_tag tag, size_t bytes, void **out);
/* Allocate and zero. */
fsc_status fsc_device_calloc(fsc_device *dev, fsc_tag tag, size_t bytes, void **out);
/* Release memory from fsc_device_alloc (NULL is a no-op). */
void fsc_device_release(fsc_device *dev, void *p);

/* Ledger: bytes currently allocated and the peak since creation (or the last reset) per tag. */
size_t fsc_device_current_bytes(const fsc_device *dev, fsc_tag tag);
size_t fsc_device_peak_bytes(const fsc_device *dev, fsc_tag tag);
size_t fsc_device_peak_total(const fsc_device *dev);  /* peak of the sum over tags */
void fsc_device_reset_peak(fsc_device *dev);          /* peaks := current */

/* Bytes copied between host memory and the device since creation or the last reset: to_device 1 counts
 * fsc_device_upload and fsc_device_upload_async, 0 the downloads (what offload moves over PCIe is measured,
 * docs/offload.md). */
size_t fsc_device_copied_bytes(const fsc_device *dev, int to_device);
void fsc_device_reset_copied(fsc_device *dev);

/* Copies. dst/src are device pointers except where named host. A size that carries a pointer past the end of the
 * address space (a negative size turned size_t) is FSC_ERR_INVALID naming the pointer, for every copy and memset. */
fsc_status fsc_device_upload(fsc_device *dev, void *dst, const void *host_src, size_t bytes);
fsc_status fsc_device_download(fsc_device *dev, void *host_dst, const void *src, size_t bytes);
fsc_status fsc_device_copy(fsc_device *dev, void *dst, const void *src, size_t bytes);
fsc_status fsc_device_memset(fsc_device *dev, void *dst, int value, size_t bytes);
/* Asynchronous copies (offload's overlap, docs/offload.md): start an upload or a download and get a handle in *out
 * (NULL for 0 bytes); the caller keeps computing. Once fsc_device_copy_wait(handle) returns, the destination is
 * readable (by the host after a download, by the device's later work after an upload) and the source may change;
 * until then the caller must neither read the destination, write the source nor release either (the cpu device
 * makes the copy only at the wait, so such code computes other bits). Copies started this way complete in issue
 * order, one at a time (one link: the simulator's copy cost, fsc_cluster_opts.sim_copy_gbps, runs while the caller
 * computes and the wait blocks until the modelled end). Their bytes count in fsc_device_copied_bytes when started.
 * A backend without them copies at the start. Errors: out NULL, dev NULL, or dst/src NULL with bytes > 0 are
 * FSC_ERR_INVALID; on any error *out is NULL (when out is not), nothing is counted, the destination is undefined
 * and there is nothing to wait for. Every started copy is waited for exactly once, before dev is freed. */
typedef struct fsc_copy fsc_copy;
fsc_status fsc_device_upload_async(fsc_device *dev, void *dst, const void *host_src, size_t bytes, fsc_copy **out);
fsc_status fsc_device_download_async(fsc_device *dev, void *host_dst, const void *src, size_t bytes, fsc_copy **out);
/* Wait for a copy and free its handle (NULL: nothing to wait for, FSC_OK). The handle is freed whatever the
 * result, so waiting twice for one handle is a use after free, as calling free twice; keep the pointer NULL after
 * the wait (a NULL wait is harmless). A failure (the backend's copy failed) leaves the destination undefined. */
fsc_status fsc_device_copy_wait(fsc_copy *copy);
/* Wait until all work queued on the device is done. */
fsc_status fsc_device_sync(fsc_device *dev);
/* The device's measured float32 gemm rate in TFLOP/s (1e12 FLOP/s): square n x n products (n <= 0: 512) with
 * the device's own gemm, best of 2 timed rounds of about 20 ms after a warm-up (lib/core/peak.c). A reference for
 * MFU when the datasheet peak is not known; it reads below a datasheet peak. */
fsc_status fsc_device_measure_tflops(fsc_device *dev, int n, double *tflops);

FSC_END_DECLS

#endif
