/* Asynchronous host<->device copies (device.h: fsc_device_upload_async, fsc_device_download_async,
 * fsc_device_copy_wait) and the simulator's model of the link they cross (fsc_device_set_copy_cost).
 *
 * A copy is the backend's (the optional upload_async/download_async/copy_wait of plugin/device_ops.h: the cuda
 * plug-in's copy stream, the cpu backend's queue) or, on a backend without them, a synchronous copy made at the
 * start. The core adds the ledger (fsc_device_copied_bytes, counted when a copy starts) and the modelled time:
 * with a copy cost every copy of a device occupies one link for bytes / bandwidth, from the end of the copy before
 * it or from its start, whichever is later; a synchronous copy sleeps until its end at once, an asynchronous one
 * when it is waited for. So the caller computes while a modelled copy runs, and copies of one device queue
 * behind each other as on one PCIe link. Not here: the synchronous copies themselves (device.c). */
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include "core/clock_impl.h"
#include "core/device_impl.h"

struct fsc_copy {
    fsc_device *dev;
    void *backend;  /* the backend's handle; NULL when the copy was made at the start */
    double end;     /* modelled end (fsc_clock_now seconds), 0: no copy cost */
};


double fsc_device_copy_reserve(fsc_device *dev, size_t bytes) {
    if (!(dev->copy_s_per_byte > 0)) return 0.0;
    /* a virtual cluster times its ranks' copies on their clocks only (the simulator's staging on a progress thread,
     * the planner's replay on the counting device, is not the step's); the wall clock costs every copy */
    if (dev->copy_rank_clock && !fsc_clock_is_virtual()) return 0.0;
    const double now = fsc_clock_now();
    const double t = (double)bytes * dev->copy_s_per_byte;
    double free_at = atomic_load(&dev->copy_link_free), end;
    do
        end = (free_at > now ? free_at : now) + t;
    while (!atomic_compare_exchange_weak(&dev->copy_link_free, &free_at, end));
    return end;
}

void fsc_device_copy_sleep_until(double t) {
    if (t > 0) fsc_clock_wait_until(t);
}

static int has_async(const fsc_device *dev) {
    return dev->ops->upload_async && dev->ops->download_async && dev->ops->copy_wait;
}

/* to_device 1: upload (dst on the device), 0: download (dst in host memory). */
static fsc_status start(fsc_device *dev, int to_device, void *dst, const void *src, size_t bytes, fsc_copy **out) {
    const char *fn = to_device ? "fsc_device_upload_async" : "fsc_device_download_async";
    if (!out) return fsc_error(FSC_ERR_INVALID, "%s: out is NULL", fn);
    *out = NULL;
    if (!dev) return fsc_error(FSC_ERR_INVALID, "%s: NULL device (dev)", fn);
    if (bytes == 0) return FSC_OK;
    if (!dst || !src) /* named as the header names them */
        return fsc_error(FSC_ERR_INVALID, "%s: NULL pointer for %zu bytes (%s)", fn, bytes,
                         !dst ? (to_device ? "dst" : "host_dst") : (to_device ? "host_src" : "src"));
    FSC_TRY(fsc_device_check_span(fn, to_device ? "dst" : "host_dst", dst, bytes));
    FSC_TRY(fsc_device_check_span(fn, to_device ? "host_src" : "src", src, bytes));
    fsc_copy *c = calloc(1, sizeof *c);
    if (!c) return fsc_error(FSC_ERR_NOMEM, "%s: out of host memory", fn);
    c->dev = dev;
    fsc_status s;
    if (has_async(dev))
        s = to_device ? dev->ops->upload_async(dev->ctx, dst, src, bytes, &c->backend)
                      : dev->ops->download_async(dev->ctx, dst, src, bytes, &c->backend);
    else
        s = to_device ? dev->ops->upload(dev->ctx, dst, src, bytes) : dev->ops->download(dev->ctx, dst, src, bytes);
    if (s != FSC_OK) {
        free(c);
        return s;
    }
    atomic_fetch_add_explicit(&dev->copied[to_device ? 1 : 0], bytes, memory_order_relaxed);
    c->end = fsc_device_copy_reserve(dev, bytes);
    *out = c;
    return FSC_OK;
}

fsc_status fsc_device_upload_async(fsc_device *dev, void *dst, const void *host_src, size_t bytes, fsc_copy **out) {
    return start(dev, 1, dst, host_src, bytes, out);
}

fsc_status fsc_device_download_async(fsc_device *dev, void *host_dst, const void *src, size_t bytes, fsc_copy **out) {
    return start(dev, 0, host_dst, src, bytes, out);
}

fsc_status fsc_device_copy_wait(fsc_copy *c) {
    if (!c) return FSC_OK;
    fsc_device *dev = c->dev;
    fsc_status s = c->backend ? dev->ops->copy_wait(dev->ctx, c->backend) : FSC_OK;
    fsc_device_copy_sleep_until(c->end);
    free(c);
    return s;
}
