/* Staging through host memory for the simulated communicator (sim.h): the host buffer of a rank's handle
 * and the copies between it and the rank's device, made with that device's own upload and download.
 * This file does not know what a collective computes; sim_comm.c decides what goes where in the buffer.
 * The buffer is plain host malloc, outside the device's tagged ledger (it is not device memory). The copies are
 * not a counting device's counted work (fsc_count_staging): a real communicator moves the data itself. */
#include <stdio.h>
#include <stdlib.h>
#include "sim.h"

#define SIM_STAGE_MIN 256 /* bytes: the smallest buffer, so that it is never NULL */

fsc_status sim_stage_reserve(sim_handle *h, const char *what, size_t bytes) {
    if (h->buf && bytes <= h->cap) return FSC_OK;
    size_t cap = h->cap ? h->cap : SIM_STAGE_MIN;
    while (cap < bytes) cap = cap > SIZE_MAX / 2 ? bytes : 2 * cap;
    /* the old contents are never needed: free first so the peak is one buffer, not two */
    free(h->buf);
    h->cap = 0;
    h->buf = malloc(cap);
    if (!h->buf)
        return fsc_error(FSC_ERR_NOMEM, "out of host memory for a staging buffer of %zu bytes for %s", cap, what);
    h->cap = cap;
    return FSC_OK;
}

fsc_status sim_stage_in(sim_handle *h, const char *what, void *host_dst, const void *src, size_t bytes) {
    if (bytes == 0) return FSC_OK;
    fsc_count_staging(1); /* the counting device: the network's part of the call, not the rank's work */
    fsc_status s = fsc_device_download(h->dev, host_dst, src, bytes);
    fsc_count_staging(0);
    if (s != FSC_OK)
        return fsc_error_prefix(s, "downloading %zu bytes from the '%s' device for %s", bytes,
                                fsc_device_name(h->dev), what);
    return FSC_OK;
}

fsc_status sim_stage_out(sim_handle *h, const char *what, void *dst, const void *host_src, size_t bytes) {
    if (bytes == 0) return FSC_OK;
    fsc_count_staging(1);
    fsc_status s = fsc_device_upload(h->dev, dst, host_src, bytes);
    fsc_count_staging(0);
    if (s != FSC_OK)
        return fsc_error_prefix(s, "uploading %zu bytes to the '%s' device for %s", bytes, fsc_device_name(h->dev),
                                what);
    return FSC_OK;
}
