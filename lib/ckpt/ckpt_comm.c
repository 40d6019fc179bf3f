/* The collective parts of checkpoints: agreeing on success (every rank returns the lowest failing rank's
 * status and message, so no rank goes on alone) and broadcasting small host values. Gathering every rank's
 * piece records and streaming a tensor's pieces to rank 0 one bounded chunk at a time (full format,
 * fsc_ckpt_full_state) are the engine's (lib/parallel/stream.c, engine_ckpt.h), which its weights files share.
 * All of it runs on the world communicator; buffers handed to the communicator are device memory
 * (FSC_TAG_COMM), as on every backend. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ckpt_impl.h"

#define MSG_BYTES 512

fsc_status ck_agree(fsc_engine *e, fsc_status mine) { return fsc_comm_agree(ENG(e).r->comm, ENG(e).dev, mine); }

fsc_status ck_bcast_host(fsc_engine *e, void *host, size_t len) {
    if (fsc_comm_size(ENG(e).r->comm) == 1 || len == 0) return FSC_OK;
    const size_t chunk = CK_CHUNK * sizeof(float);
    const int root = fsc_comm_rank(ENG(e).r->comm) == 0;
    uint8_t *h = host, *d;
    FSC_TRY(fsc_device_alloc(ENG(e).dev, FSC_TAG_COMM, len < chunk ? len : chunk, (void **)&d));
    fsc_status s = FSC_OK, c = FSC_OK; /* a failed copy still takes part in every broadcast */
    for (size_t off = 0; off < len && c == FSC_OK; off += chunk) {
        size_t n = len - off < chunk ? len - off : chunk;
        if (root && s == FSC_OK) s = fsc_device_upload(ENG(e).dev, d, h + off, n);
        c = fsc_comm_broadcast(ENG(e).r->comm, d, n, FSC_U8, 0);
        if (c == FSC_OK && !root && s == FSC_OK) s = fsc_device_download(ENG(e).dev, h + off, d, n);
    }
    fsc_device_release(ENG(e).dev, d);
    return c != FSC_OK ? c : s;
}

const fsc_param_info *ck_info(const fsc_engine *e, int t) {
    return fsc_engine_full_info(e, t);
}

