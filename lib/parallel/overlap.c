/* Gradient reductions in flight (overlap.h): fsc_engine_reduce of engine.c as a start and a finish, so that
 * a strategy reduces a bucket or unit while the backward of the layers before it computes. The finish does
 * what fsc_engine_reduce does after its collective, in the same order and with the same kernels: the same
 * bits whether a reduction overlapped or not. A two-phase reduction (hybrid sharding's reduce-scatter, then
 * all-gather across replicas) is one pending whose second collective replaces the first when advanced.
 * Offload all: the reduced shard (for a two-phase reduction, the result of its all-gather) then goes to the host
 * with an asynchronous download, waited for when dl_keep newer ones are in flight or the queue drains. Not here:
 * when to reduce (the strategies). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "overlap.h"

static void release(fsc_engine *e, fsc_reduce_pending *p) {
    fsc_device_release(e->dev, p->send);
    fsc_device_release(e->dev, p->recv);
    fsc_device_release(e->dev, p->owned);
    /* offload all: the device copy of the result; a first phase: its piece */
    if (p->host || p->then.c) fsc_device_release(e->dev, p->out);
    p->send = p->recv = NULL;
    p->owned = NULL;
    p->host = NULL;
    p->then.c = NULL;
}

fsc_status fsc_reduce_start(fsc_engine *e, fsc_reduce_queue *q, fsc_comm *c, int rs, const float *in, float *out,
                            size_t n, int accumulate, float *owned, float *clear, size_t clear_n) {
    if (e->exact) { /* the exact reduction (exact.c) runs at once: its sums go to int64 shadows */
        fsc_status s = fsc_engine_reduce(e, c, rs, in, out, n, accumulate);
        if (s == FSC_OK && clear) s = fsc_device_memset(e->dev, clear, 0, clear_n * sizeof(float));
        fsc_device_release(e->dev, owned);
        return s;
    }
    if (q->n == q->cap) {
        int cap = q->cap ? 2 * q->cap : 8;
        fsc_reduce_pending *v = realloc(q->v, (size_t)cap * sizeof *v);
        if (!v) {
            fsc_device_release(e->dev, owned);
            return fsc_error(FSC_ERR_NOMEM, "engine: out of memory for reductions in flight");
        }
        q->v = v;
        q->cap = cap;
    }
    const size_t nout = rs ? n / (size_t)fsc_comm_size(c) : n;
    const fsc_dtype dt = e->po.reduce_dtype;
    fsc_reduce_pending p = {.out = out, .nout = nout, .dt = dt, .accumulate = accumulate, .owned = owned,
                            .clear = clear, .clear_n = clear_n};
    fsc_status s = FSC_OK;
    const void *sendp = in;
    void *recvp = out;
    if (dt != FSC_F32) {
        size_t es = fsc_dtype_size(dt);
        s = fsc_device_alloc(e->dev, FSC_TAG_COMM, n * es, &p.send);
        if (s == FSC_OK) s = fsc_k_convert(e->dev, p.send, dt, in, FSC_F32, n);
        sendp = p.send;
        if (s == FSC_OK && owned) { /* the converted copy is what the collective reads: the gradient is done */
            fsc_device_release(e->dev, owned);
            p.owned = NULL;
        }
    }
    if (s == FSC_OK && !rs && p.send) { /* an all-reduce of a converted copy runs in place in it */
        p.recv = p.send;
        p.send = NULL;
        recvp = p.recv;
    } else if (s == FSC_OK && (dt != FSC_F32 || accumulate)) {
        s = fsc_device_alloc(e->dev, FSC_TAG_COMM, nout * fsc_dtype_size(dt), &p.recv);
        recvp = p.recv;
    }
    if (s == FSC_OK)
        s = rs ? fsc_comm_ireduce_scatter(c, sendp, recvp, nout, dt, FSC_SUM, &p.req)
               : fsc_comm_iall_reduce(c, sendp, recvp, n, dt, FSC_SUM, &p.req);
    if (s != FSC_OK) {
        release(e, &p);
        return s;
    }
    q->v[q->n++] = p;
    return FSC_OK;
}

fsc_status fsc_reduce_start_host(fsc_engine *e, fsc_reduce_queue *q, fsc_comm *c, int rs, const float *in,
                                 float *host, fsc_device *hdev, size_t n, int accumulate, float *owned) {
    const size_t nout = rs ? n / (size_t)fsc_comm_size(c) : n;
    float *out = NULL;
    fsc_status s = fsc_device_alloc(e->dev, FSC_TAG_GRADS, nout * sizeof(float), (void **)&out);
    if (s != FSC_OK) {
        fsc_device_release(e->dev, owned);
        return s;
    }
    s = fsc_reduce_start(e, q, c, rs, in, out, n, 0, owned, NULL, 0);
    if (s != FSC_OK) {
        fsc_device_release(e->dev, out);
        return s;
    }
    fsc_reduce_pending *p = &q->v[q->n - 1];
    p->host = host;
    p->hdev = hdev;
    p->host_accumulate = accumulate;
    return FSC_OK;
}

/* Keeps the first failure (status and message) of several. */
static void note(fsc_status s, fsc_status *first, char *msg, size_t cap) {
    if (s == FSC_OK || *first != FSC_OK) return;
    *first = s;
    snprintf(msg, cap, "%s", fsc_last_error());
}

/* Wait for the oldest download and add it to the host shard when accumulating. */
static fsc_status download_finish(fsc_engine *e, fsc_download_pending *p) {
    fsc_status s = fsc_device_copy_wait(p->copy);
    p->copy = NULL;
    if (s == FSC_OK && p->tmp) s = fsc_k_axpy(p->hdev, p->host, 1.0f, p->tmp, p->n);
    fsc_device_release(p->hdev, p->tmp);
    fsc_device_release(e->dev, p->dev);
    p->tmp = p->dev = NULL;
    return s;
}

static fsc_status download_drain_to(fsc_engine *e, fsc_reduce_queue *q, int keep) {
    if (keep < 0) keep = 0;
    if (q->ndl <= keep) return FSC_OK;
    const int done = q->ndl - keep;
    fsc_status first = FSC_OK;
    char msg[512] = "";
    for (int i = 0; i < done; i++) note(download_finish(e, &q->dl[i]), &first, msg, sizeof msg);
    memmove(q->dl, q->dl + done, (size_t)keep * sizeof *q->dl);
    q->ndl = keep;
    return first == FSC_OK ? FSC_OK : fsc_error(first, "%s", msg);
}

fsc_status fsc_download_start(fsc_engine *e, fsc_reduce_queue *q, float *dev, float *host, fsc_device *hdev, size_t n,
                              int accumulate) {
    fsc_download_pending p = {.dev = dev, .host = host, .hdev = hdev, .n = n};
    fsc_status s = FSC_OK;
    if (q->ndl == q->capdl) {
        int cap = q->capdl ? 2 * q->capdl : 8;
        fsc_download_pending *v = realloc(q->dl, (size_t)cap * sizeof *v);
        if (v) q->dl = v, q->capdl = cap;
        else s = fsc_error(FSC_ERR_NOMEM, "engine: out of memory for downloads in flight");
    }
    if (s == FSC_OK && accumulate) s = fsc_device_alloc(hdev, FSC_TAG_COMM, n * sizeof(float), (void **)&p.tmp);
    if (s == FSC_OK)
        s = fsc_device_download_async(e->dev, accumulate ? p.tmp : host, dev, n * sizeof(float), &p.copy);
    if (s != FSC_OK) {
        fsc_device_release(hdev, p.tmp);
        fsc_device_release(e->dev, dev);
        return s;
    }
    q->dl[q->ndl++] = p;
    return download_drain_to(e, q, q->dl_keep);
}

/* fsc_engine_reduce's work after the collective, for one pending reduction (its buffers kept; offload all: the
 * device result handed to a download). A pending whose second phase failed to start has nothing left to do. */
static fsc_status complete(fsc_engine *e, fsc_reduce_queue *q, fsc_reduce_pending *p) {
    fsc_device *dev = e->dev;
    if (!p->req) return FSC_OK;
    fsc_status s = fsc_comm_wait(p->req);
    fsc_comm_req_free(p->req);
    p->req = NULL;
    if (s == FSC_OK && p->recv) s = fsc_engine_reduce_result(e, p->recv, p->dt, p->out, p->nout, p->accumulate);
    if (s == FSC_OK && p->clear) s = fsc_device_memset(dev, p->clear, 0, p->clear_n * sizeof(float));
    if (s == FSC_OK && p->host) { /* offload all: the download owns the device result from here on */
        s = fsc_download_start(e, q, p->out, p->host, p->hdev, p->nout, p->host_accumulate);
        p->host = NULL;
        p->out = NULL;
    }
    return s;
}

static fsc_status finish(fsc_engine *e, fsc_reduce_queue *q, fsc_reduce_pending *p) {
    fsc_status s = complete(e, q, p);
    release(e, p);
    return s;
}

/* A first phase finished, the second started: the piece (out) all-gathered over then.c, p describing that
 * all-gather from here on (the piece released at its finish). The piece holds values of the reduction dtype (the
 * first phase rounded them), so a bf16/f16 reduction gathers it in that dtype: the same bits, half the bytes.
 * On failure nothing is left in flight. */
static fsc_status advance_one(fsc_engine *e, fsc_reduce_queue *q, fsc_reduce_pending *p) {
    fsc_status s = complete(e, q, p);
    fsc_device_release(e->dev, p->send);
    fsc_device_release(e->dev, p->recv);
    fsc_device_release(e->dev, p->owned);
    float *piece = p->out;
    const fsc_dtype dt = p->dt;
    const size_t np = p->nout, n2 = np * (size_t)fsc_comm_size(p->then.c), es = fsc_dtype_size(dt);
    fsc_reduce_pending nx = {.send = piece, .nout = n2, .dt = dt, .second = 1};
    void *recvp = p->then.out;
    if (s == FSC_OK && p->then.hdev) { /* offload all: into a device buffer, downloaded from the finish on */
        nx.host = p->then.out;
        nx.hdev = p->then.hdev;
        nx.host_accumulate = p->then.accumulate;
        s = fsc_device_alloc(e->dev, FSC_TAG_GRADS, n2 * sizeof(float), (void **)&nx.out);
        recvp = nx.out;
    } else if (s == FSC_OK) {
        nx.out = p->then.out;
        nx.accumulate = p->then.accumulate;
    }
    if (s == FSC_OK && dt != FSC_F32) { /* the piece in the reduction dtype (exact), released */
        void *lo = NULL;
        s = fsc_device_alloc(e->dev, FSC_TAG_COMM, np * es, &lo);
        if (s == FSC_OK) s = fsc_k_convert(e->dev, lo, dt, piece, FSC_F32, np);
        if (s == FSC_OK) {
            fsc_device_release(e->dev, piece);
            nx.send = lo;
        } else {
            fsc_device_release(e->dev, lo);
        }
    }
    /* gathered into a buffer of the dtype when the finish converts or adds (fsc_engine_reduce_result) */
    if (s == FSC_OK && (dt != FSC_F32 || nx.accumulate)) {
        s = fsc_device_alloc(e->dev, FSC_TAG_COMM, n2 * es, &nx.recv);
        recvp = nx.recv;
    }
    if (s == FSC_OK) s = fsc_comm_iall_gather(p->then.c, nx.send, recvp, np, dt, &nx.req);
    *p = nx;
    if (s != FSC_OK) release(e, p); /* req NULL: finished as nothing */
    return s;
}

fsc_status fsc_reduce_start_gather(fsc_engine *e, fsc_reduce_queue *q, fsc_comm *c, const float *in, fsc_comm *c2,
                                   float *out, fsc_device *hdev, size_t n, int accumulate, float *owned) {
    const size_t np = n / (size_t)fsc_comm_size(c);
    float *piece = NULL;
    fsc_status s = fsc_device_alloc(e->dev, FSC_TAG_COMM, np * sizeof(float), (void **)&piece);
    if (s != FSC_OK) {
        fsc_device_release(e->dev, owned);
        return s;
    }
    s = fsc_reduce_start(e, q, c, 1, in, piece, n, 0, owned, NULL, 0);
    if (s != FSC_OK) {
        fsc_device_release(e->dev, piece);
        return s;
    }
    fsc_reduce_pending *p = &q->v[q->n - 1];
    p->then.c = c2;
    p->then.out = out;
    p->then.hdev = hdev;
    p->then.accumulate = accumulate;
    return FSC_OK;
}

fsc_status fsc_reduce_drain_to(fsc_engine *e, fsc_reduce_queue *q, int keep) {
    if (keep < 0) keep = 0;
    if (q->n <= keep) return FSC_OK;
    const int done = q->n - keep;
    fsc_status first = FSC_OK;
    char msg[512] = "";
    /* second phases first started, oldest first (each runs while the next first phase is waited for) */
    for (int i = 0; i < done; i++)
        if (q->v[i].then.c) note(advance_one(e, q, &q->v[i]), &first, msg, sizeof msg);
    for (int i = 0; i < done; i++) note(finish(e, q, &q->v[i]), &first, msg, sizeof msg);
    memmove(q->v, q->v + done, (size_t)keep * sizeof *q->v);
    q->n = keep;
    return first == FSC_OK ? FSC_OK : fsc_error(first, "%s", msg);
}

fsc_status fsc_reduce_advance(fsc_engine *e, fsc_reduce_queue *q, int keep) {
    if (keep < 0) keep = 0;
    int firsts = 0;
    for (int i = 0; i < q->n; i++) firsts += !q->v[i].second;
    int adv = firsts - keep;
    fsc_status first = FSC_OK;
    char msg[512] = "";
    int w = 0;
    /* second phases precede first phases in q (they are advanced oldest first): one pass in queue order */
    for (int i = 0; i < q->n; i++) {
        fsc_reduce_pending *p = &q->v[i];
        int stays = 1;
        if (p->second) {
            note(finish(e, q, p), &first, msg, sizeof msg);
            stays = 0;
        } else if (adv > 0) {
            adv--;
            note(p->then.c ? advance_one(e, q, p) : finish(e, q, p), &first, msg, sizeof msg);
            stays = p->second && p->req;
        }
        if (stays) q->v[w++] = *p;
    }
    q->n = w;
    return first == FSC_OK ? FSC_OK : fsc_error(first, "%s", msg);
}

/* Every reduction (both phases, which may start downloads) before every download. */
fsc_status fsc_reduce_drain(fsc_engine *e, fsc_reduce_queue *q) {
    fsc_status s = fsc_reduce_drain_to(e, q, 0);
    char msg[512] = "";
    if (s != FSC_OK) snprintf(msg, sizeof msg, "%s", fsc_last_error());
    fsc_status d = download_drain_to(e, q, 0);
    return s == FSC_OK ? d : fsc_error(s, "%s", msg);
}

void fsc_reduce_queue_free(fsc_engine *e, fsc_reduce_queue *q) {
    (void)fsc_reduce_drain(e, q);
    free(q->v);
    free(q->dl);
    q->v = NULL;
    q->dl = NULL;
    q->cap = q->capdl = 0;
}
