/* The collective parts of checkpoints: agreeing on success (every rank returns the lowest failing rank's
 * status and message, so no rank goes on alone), broadcasting small host values, gathering every rank's
 * piece records, and streaming a tensor's pieces to rank 0 one bounded chunk at a time (full format,
 * fsc_ckpt_full_state). All of it runs on the world communicator; buffers handed to the communicator
 * are device memory (FSC_TAG_COMM), as on every backend. */
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

fsc_status ck_gather_recs(fsc_engine *e, const ck_rec *mine, int n, ck_rec **out, int *nout) {
    fsc_comm *c = ENG(e).r->comm;
    const int N = fsc_comm_size(c);
    *out = NULL;
    *nout = 0;
    int64_t *counts = calloc((size_t)N, sizeof *counts);
    int64_t *dc = NULL;
    uint8_t *dsend = NULL, *drecv = NULL;
    ck_rec *all = NULL;
    if (!counts) return fsc_error(FSC_ERR_NOMEM, "checkpoint: out of host memory");
    int64_t me = n, max = 0, total = 0;
    fsc_status s = fsc_device_alloc(ENG(e).dev, FSC_TAG_COMM, (size_t)N * sizeof *dc, (void **)&dc);
    if (s == FSC_OK) s = fsc_device_upload(ENG(e).dev, dc + fsc_comm_rank(c), &me, sizeof me);
    if (s == FSC_OK) s = fsc_comm_all_gather(c, dc + fsc_comm_rank(c), dc, sizeof me, FSC_U8);
    if (s == FSC_OK) s = fsc_device_download(ENG(e).dev, counts, dc, (size_t)N * sizeof *counts);
    for (int r = 0; s == FSC_OK && r < N; r++) {
        if (counts[r] < 0 || counts[r] > (1 << 24)) s = fsc_error(FSC_ERR_INTERNAL, "checkpoint: rank %d reports %lld pieces", r, (long long)counts[r]);
        else if (counts[r] > max) max = counts[r];
        total += counts[r];
    }
    size_t blk = (size_t)(max > 0 ? max : 1) * sizeof(ck_rec);
    if (s == FSC_OK) s = fsc_device_calloc(ENG(e).dev, FSC_TAG_COMM, blk, (void **)&dsend);
    if (s == FSC_OK) s = fsc_device_alloc(ENG(e).dev, FSC_TAG_COMM, blk * (size_t)N, (void **)&drecv);
    if (s == FSC_OK && n > 0) s = fsc_device_upload(ENG(e).dev, dsend, mine, (size_t)n * sizeof(ck_rec));
    if (s == FSC_OK) s = fsc_comm_all_gather(c, dsend, drecv, blk, FSC_U8);
    if (s == FSC_OK && !(all = malloc((size_t)(total + 1) * sizeof *all)))
        s = fsc_error(FSC_ERR_NOMEM, "checkpoint: out of host memory for %lld piece records", (long long)total);
    int64_t at = 0;
    for (int r = 0; s == FSC_OK && r < N; r++) {
        if (counts[r] > 0)
            s = fsc_device_download(ENG(e).dev, all + at, drecv + (size_t)r * blk, (size_t)counts[r] * sizeof(ck_rec));
        at += counts[r];
    }
    fsc_device_release(ENG(e).dev, dc);
    fsc_device_release(ENG(e).dev, dsend);
    fsc_device_release(ENG(e).dev, drecv);
    free(counts);
    if (s != FSC_OK) {
        free(all);
        return s;
    }
    *out = all;
    *nout = (int)total;
    return FSC_OK;
}

const fsc_param_info *ck_info(const fsc_engine *e, int t) {
    return fsc_engine_full_info(e, t);
}

static int cmp_holding(const void *a, const void *b) {
    const fsc_holding *x = a, *y = b;
    if (x->tensor != y->tensor) return x->tensor < y->tensor ? -1 : 1;
    return x->first < y->first ? -1 : x->first > y->first;
}

fsc_status ck_holdings(fsc_engine *e, fsc_holding **out, int *n) {
    FSC_TRY(fsc_engine_holdings(e, out, n)); /* element ranges of the full tensors */
    qsort(*out, (size_t)*n, sizeof **out, cmp_holding);
    return FSC_OK;
}

int ck_holdings_at(const fsc_holding *h, int nh, int t, uint64_t first) {
    int lo = 0, hi = nh;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (h[mid].tensor < t || (h[mid].tensor == t && h[mid].first < first)) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

fsc_device *ck_seg_dev(fsc_engine *e, int state) { return fsc_offload_seg_dev(e, state); }

float *ck_seg_ptr(fsc_engine *e, int state, int seg) {
    return state == 0 ? fsc_optim_param(ENG(e).opt, seg) : fsc_optim_state(ENG(e).opt, seg, state - 1);
}

static int cmp_rec(const void *a, const void *b) {
    const ck_rec *x = a, *y = b;
    if (x->t != y->t) return x->t < y->t ? -1 : 1;
    return x->first < y->first ? -1 : x->first > y->first;
}

fsc_status ck_check_recs(fsc_engine *e, ck_rec *r, int n) {
    qsort(r, (size_t)n, sizeof *r, cmp_rec);
    int k = 0;
    for (int t = 0; t < ENG(e).m->n_tensors; t++) {
        uint64_t at = 0;
        for (; k < n && r[k].t == t; k++) {
            if (r[k].first != at)
                return fsc_error(FSC_ERR_INTERNAL, "checkpoint: tensor %s: the ranks' pieces %s at element %llu "
                                 "(a strategy's holdings are wrong)", ck_info(e, t)->name,
                                 r[k].first < at ? "overlap" : "leave a gap", (unsigned long long)at);
            at += r[k].n;
        }
        if (at != ck_info(e, t)->numel)
            return fsc_error(FSC_ERR_INTERNAL, "checkpoint: tensor %s: the ranks write %llu of its %zu elements "
                             "(a strategy's holdings are wrong)", ck_info(e, t)->name, (unsigned long long)at,
                             ck_info(e, t)->numel);
    }
    if (k != n) return fsc_error(FSC_ERR_INTERNAL, "checkpoint: a piece names tensor %d of %d", r[k].t, ENG(e).m->n_tensors);
    return FSC_OK;
}

/* The owner's device pointer for record rec and state: its write holding of the same range. */
static float *owner_ptr(fsc_engine *e, const fsc_holding *h, int nh, const ck_rec *rec, int state) {
    for (int i = ck_holdings_at(h, nh, rec->t, rec->first); i < nh && h[i].tensor == rec->t && h[i].first == rec->first;
         i++)
        if (h[i].write && h[i].tensor == rec->t && h[i].first == rec->first && h[i].n == rec->n)
            return ck_seg_ptr(e, state, h[i].seg) + h[i].seg_off;
    return NULL;
}

fsc_status ck_stream_tensor(fsc_engine *e, const ck_rec *recs, int nrecs, const fsc_holding *h, int nh, int state,
                            int t, ck_sink sink, void *ctx, float *host, float *dbuf) {
    fsc_comm *c = ENG(e).r->comm;
    const int me = fsc_comm_rank(c);
    fsc_status err = FSC_OK;
    int k0 = 0, hi = nrecs; /* the first record of tensor t */
    while (k0 < hi) {
        int mid = k0 + (hi - k0) / 2;
        if (recs[mid].t < t) k0 = mid + 1;
        else hi = mid;
    }
    for (int k = k0; k < nrecs && recs[k].t == t; k++) {
        const ck_rec *rec = &recs[k];
        if (me != 0 && me != rec->rank) continue;
        const float *src = NULL;
        if (me == rec->rank) {
            src = owner_ptr(e, h, nh, rec, state);
            if (!src) return fsc_error(FSC_ERR_INTERNAL, "checkpoint: rank %d lost its piece of %s", me, ck_info(e, t)->name);
        }
        for (uint64_t off = 0; off < rec->n; off += CK_CHUNK) {
            size_t n = rec->n - off < CK_CHUNK ? (size_t)(rec->n - off) : CK_CHUNK;
            if (me == 0 && rec->rank == 0) {
                FSC_TRY(fsc_device_download(ck_seg_dev(e, state), host, src + off, n * sizeof(float)));
            } else if (me == 0) {
                FSC_TRY(fsc_comm_recv(c, dbuf, n, FSC_F32, rec->rank));
                FSC_TRY(fsc_device_download(ENG(e).dev, host, dbuf, n * sizeof(float)));
            } else if (ck_seg_dev(e, state) != ENG(e).dev) { /* offloaded: the communicator sends device memory */
                float *d = NULL;
                fsc_status s = fsc_device_alloc(ENG(e).dev, FSC_TAG_COMM, n * sizeof(float), (void **)&d);
                if (s == FSC_OK) s = fsc_device_upload(ENG(e).dev, d, src + off, n * sizeof(float));
                if (s == FSC_OK) s = fsc_comm_send(c, d, n, FSC_F32, 0);
                fsc_device_release(ENG(e).dev, d);
                FSC_TRY(s);
                continue;
            } else {
                FSC_TRY(fsc_comm_send(c, src + off, n, FSC_F32, 0));
                continue;
            }
            /* after a failed sink rank 0 keeps receiving, so no message is left queued */
            if (err == FSC_OK) err = sink(ctx, rec->first + off, host, n);
        }
    }
    return err;
}
