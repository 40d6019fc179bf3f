/* Gradient reductions in flight (overlap.h): fsc_engine_reduce of engine.c as a start and a finish, so that
 * a strategy reduces a bucket or unit while the backward of the layers before it computes. The finish does
 * what fsc_engine_reduce does after its collective, in the same order and with the same kernels: the same
 * bits whether a reduction overlapped or not. Offload all: the reduced shard then goes to the host with an
 * asynchronous download, waited for when dl_keep newer ones are in flight or the queue drains. Not here: when to
 * reduce (the strategies). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "overlap.h"

static void release(fsc_engine *e, fsc_reduce_pending *p) {
    fsc_device_release(e->dev, p->send);
    fsc_device_release(e->dev, p->recv);
    fsc_device_release(e->dev, p->owned);
    if (p->host) fsc_device_release(e->dev, p->out); /* offload all: the device copy of the result */
    p->send = p->recv = NULL;
    p->owned = NULL;
    p->host = NULL;
}

fsc_status fsc_reduce_start(fsc_engine *e, fsc_reduce_queue *q, fsc_comm *c, int rs, const float *in, float *out,
                            size_t n, int accumulate, float *owned, float *clear, size_t clear_n) {
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
        if (s == FSC_OK) s = FSC_K(e->dev, convert, p.send, dt, in, FSC_F32, n);
        sendp = p.send;
    }
    if (s == FSC_OK && (dt != FSC_F32 || accumulate)) {
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

/* Wait for the oldest download and add it to the host shard when accumulating. */
static fsc_status download_finish(fsc_engine *e, fsc_download_pending *p) {
    fsc_status s = fsc_device_copy_wait(p->copy);
    p->copy = NULL;
    if (s == FSC_OK && p->tmp) s = FSC_K(p->hdev, axpy, p->host, 1.0f, p->tmp, p->n);
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
    for (int i = 0; i < done; i++) {
        fsc_status s = download_finish(e, &q->dl[i]);
        if (s != FSC_OK && first == FSC_OK) {
            first = s;
            snprintf(msg, sizeof msg, "%s", fsc_last_error());
        }
    }
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

/* fsc_engine_reduce's work after the collective, for one pending reduction. */
static fsc_status finish(fsc_engine *e, fsc_reduce_queue *q, fsc_reduce_pending *p) {
    fsc_device *dev = e->dev;
    fsc_status s = fsc_comm_wait(p->req);
    fsc_comm_req_free(p->req);
    p->req = NULL;
    if (s == FSC_OK && p->recv) {
        if (!p->accumulate) {
            s = FSC_K(dev, convert, p->out, FSC_F32, p->recv, p->dt, p->nout);
        } else if (p->dt == FSC_F32) {
            s = FSC_K(dev, axpy, p->out, 1.0f, p->recv, p->nout);
        } else {
            float *tmp;
            s = fsc_device_alloc(dev, FSC_TAG_COMM, p->nout * sizeof(float), (void **)&tmp);
            if (s == FSC_OK) s = FSC_K(dev, convert, tmp, FSC_F32, p->recv, p->dt, p->nout);
            if (s == FSC_OK) s = FSC_K(dev, axpy, p->out, 1.0f, tmp, p->nout);
            fsc_device_release(dev, tmp);
        }
    }
    if (s == FSC_OK && p->clear) s = fsc_device_memset(dev, p->clear, 0, p->clear_n * sizeof(float));
    if (s == FSC_OK && p->host) { /* offload all: the download owns the device result from here on */
        s = fsc_download_start(e, q, p->out, p->host, p->hdev, p->nout, p->host_accumulate);
        p->host = NULL;
        p->out = NULL;
    }
    release(e, p);
    return s;
}

fsc_status fsc_reduce_drain_to(fsc_engine *e, fsc_reduce_queue *q, int keep) {
    if (keep < 0) keep = 0;
    if (q->n <= keep) return FSC_OK;
    const int done = q->n - keep;
    fsc_status first = FSC_OK;
    char msg[512] = "";
    for (int i = 0; i < done; i++) {
        fsc_status s = finish(e, q, &q->v[i]);
        if (s != FSC_OK && first == FSC_OK) {
            first = s;
            snprintf(msg, sizeof msg, "%s", fsc_last_error());
        }
    }
    memmove(q->v, q->v + done, (size_t)keep * sizeof *q->v);
    q->n = keep;
    return first == FSC_OK ? FSC_OK : fsc_error(first, "%s", msg);
}

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
