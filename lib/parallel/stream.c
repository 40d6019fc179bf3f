/* Full tensors streamed from the ranks that hold them, one bounded chunk at a time (engine_ckpt.h's pieces): the
 * full-format checkpoint (lib/ckpt), the weights file and fsc_engine_full_params under pipelines, tensor
 * parallelism and expert parallelism with a sharding strategy (engine.c) all read the full tensors this way.
 * Each rank's pieces are its holdings that it writes (fsc_engine_holdings: element ranges of the full tensors,
 * exactly one writer per element over the world). The checkpoint gathers every rank's records on every rank (its
 * metadata lists them); the engine's streams (fsc_engine_stream_params) send a batch of tensors' records (up to
 * STREAM_BATCH floats of tensors) to the receiving ranks only. The records are checked to tile every tensor once;
 * then, tensor by tensor, each piece goes from its owner's optimizer segment straight to the receiving ranks,
 * FSC_PIECE_CHUNK floats per message. A receiver needs one chunk of host and of device memory, an owner nothing
 * (offloaded segments go through one device chunk): no rank ever holds the whole model. All of it runs on the
 * world communicator; buffers handed to the communicator are device memory (FSC_TAG_COMM). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "engine_impl.h"

/* Floats of the tensors streamed between two agreements (1 MiB; a larger tensor goes alone): what the receivers
 * hold of piece records, and what senders may have queued ahead of them, stays within that. */
#define STREAM_BATCH ((size_t)1 << 18)

fsc_status fsc_pieces_gather(fsc_engine *e, const fsc_piece *mine, int n, fsc_piece **out, int *nout) {
    fsc_comm *c = e->r->comm;
    const int N = fsc_comm_size(c);
    *out = NULL;
    *nout = 0;
    int64_t *counts = calloc((size_t)N, sizeof *counts);
    uint8_t *dsend = NULL, *drecv = NULL;
    fsc_piece *all = NULL;
    int64_t me = n, max = 0, total = 0;
    fsc_status s = fsc_engine_gather_host_agreed(e, c, &me, sizeof me, counts);
    for (int r = 0; s == FSC_OK && r < N; r++) {
        if (counts[r] < 0 || counts[r] > (1 << 24))
            s = fsc_error(FSC_ERR_INTERNAL, "checkpoint: rank %d reports %lld pieces", r, (long long)counts[r]);
        else if (counts[r] > max) max = counts[r];
        total += counts[r];
    }
    size_t blk = (size_t)(max > 0 ? max : 1) * sizeof(fsc_piece);
    if (s == FSC_OK) s = fsc_device_calloc(e->dev, FSC_TAG_COMM, blk, (void **)&dsend);
    if (s == FSC_OK) s = fsc_device_alloc(e->dev, FSC_TAG_COMM, blk * (size_t)N, (void **)&drecv);
    if (s == FSC_OK && n > 0) s = fsc_device_upload(e->dev, dsend, mine, (size_t)n * sizeof(fsc_piece));
    if (s == FSC_OK && !(all = malloc((size_t)(total + 1) * sizeof *all)))
        s = fsc_error(FSC_ERR_NOMEM, "checkpoint: out of host memory for %lld piece records", (long long)total);
    s = fsc_comm_agree(c, e->dev, s); /* every rank reaches the all-gather, or none does */
    if (s == FSC_OK) s = fsc_comm_all_gather(c, dsend, drecv, blk, FSC_U8);
    int64_t at = 0;
    for (int r = 0; s == FSC_OK && r < N; r++) {
        if (counts[r] > 0)
            s = fsc_device_download(e->dev, all + at, drecv + (size_t)r * blk, (size_t)counts[r] * sizeof(fsc_piece));
        at += counts[r];
    }
    fsc_device_release(e->dev, dsend);
    fsc_device_release(e->dev, drecv);
    free(counts);
    if (s != FSC_OK) {
        free(all);
        return s;
    }
    *out = all;
    *nout = (int)total;
    return FSC_OK;
}

static int cmp_holding(const void *a, const void *b) {
    const fsc_holding *x = a, *y = b;
    if (x->tensor != y->tensor) return x->tensor < y->tensor ? -1 : 1;
    return x->first < y->first ? -1 : x->first > y->first;
}

fsc_status fsc_holdings_sorted(fsc_engine *e, fsc_holding **out, int *n) {
    FSC_TRY(fsc_engine_holdings(e, out, n)); /* element ranges of the full tensors */
    qsort(*out, (size_t)*n, sizeof **out, cmp_holding);
    return FSC_OK;
}

int fsc_holdings_at(const fsc_holding *h, int nh, int t, uint64_t first) {
    int lo = 0, hi = nh;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (h[mid].tensor < t || (h[mid].tensor == t && h[mid].first < first)) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

float *fsc_seg_ptr(fsc_engine *e, int state, int seg) {
    return state == 0 ? fsc_optim_param(e->opt, seg) : fsc_optim_state(e->opt, seg, state - 1);
}

static int cmp_piece(const void *a, const void *b) {
    const fsc_piece *x = a, *y = b;
    if (x->t != y->t) return x->t < y->t ? -1 : 1;
    return x->first < y->first ? -1 : x->first > y->first;
}

/* Pieces r[*k ..] of tensor t (sorted) tile it exactly once; *k moves past them. */
static fsc_status check_tensor(fsc_engine *e, const fsc_piece *r, int n, int t, int *k) {
    uint64_t at = 0;
    for (; *k < n && r[*k].t == t; (*k)++) {
        if (r[*k].first != at)
            return fsc_error(FSC_ERR_INTERNAL, "checkpoint: tensor %s: the ranks' pieces %s at element %llu "
                             "(a strategy's holdings are wrong)", fsc_engine_full_info(e, t)->name,
                             r[*k].first < at ? "overlap" : "leave a gap", (unsigned long long)at);
        at += r[*k].n;
    }
    if (at != fsc_engine_full_info(e, t)->numel)
        return fsc_error(FSC_ERR_INTERNAL, "checkpoint: tensor %s: the ranks write %llu of its %zu elements "
                         "(a strategy's holdings are wrong)", fsc_engine_full_info(e, t)->name,
                         (unsigned long long)at, fsc_engine_full_info(e, t)->numel);
    return FSC_OK;
}

fsc_status fsc_pieces_check(fsc_engine *e, fsc_piece *r, int n) {
    qsort(r, (size_t)n, sizeof *r, cmp_piece);
    int k = 0;
    for (int t = 0; t < e->m->n_tensors; t++) FSC_TRY(check_tensor(e, r, n, t, &k));
    if (k != n)
        return fsc_error(FSC_ERR_INTERNAL, "checkpoint: a piece names tensor %d of %d", r[k].t, e->m->n_tensors);
    return FSC_OK;
}

/* The owner's device pointer for piece rec and state: its write holding of the same range. */
static float *owner_ptr(fsc_engine *e, const fsc_holding *h, int nh, const fsc_piece *rec, int state) {
    for (int i = fsc_holdings_at(h, nh, rec->t, rec->first); i < nh && h[i].tensor == rec->t && h[i].first == rec->first;
         i++)
        if (h[i].write && h[i].n == rec->n) return fsc_seg_ptr(e, state, h[i].seg) + h[i].seg_off;
    return NULL;
}

/* Whether world rank r is one of the nto receivers `to` (increasing). */
static int receives(const int *to, int nto, int r) {
    for (int i = 0; i < nto && to[i] <= r; i++)
        if (to[i] == r) return 1;
    return 0;
}

/* Owner: n floats at src (on the state's device) to every receiver but itself; offloaded, through dbuf (or a
 * buffer of its own when dbuf is NULL). After a failed upload the sends still go (what dbuf holds), so that no
 * receiver waits: the caller's agreement fails the stream everywhere. */
static fsc_status send_chunk(fsc_engine *e, int state, const float *src, size_t n, const int *to, int nto,
                             float *dbuf) {
    fsc_comm *c = e->r->comm;
    const int me = fsc_comm_rank(c);
    int others = 0;
    for (int i = 0; i < nto; i++) others |= to[i] != me;
    if (!others) return FSC_OK;
    float *d = NULL;
    fsc_status s = FSC_OK, up = FSC_OK;
    if (fsc_offload_seg_dev(e, state) != e->dev) { /* offloaded: the communicator sends device memory */
        if (!dbuf) s = fsc_device_alloc(e->dev, FSC_TAG_COMM, n * sizeof(float), (void **)&d);
        if (s == FSC_OK) up = fsc_device_upload(e->dev, dbuf ? dbuf : d, src, n * sizeof(float));
        src = dbuf ? dbuf : d;
    }
    for (int i = 0; i < nto && s == FSC_OK; i++)
        if (to[i] != me) s = fsc_comm_send(c, src, n, FSC_F32, to[i]);
    fsc_device_release(e->dev, d);
    return s != FSC_OK ? s : up;
}

int fsc_stream_owner_offloaded(const fsc_engine *e) {
    return fsc_offload_seg_dev(e, 0) != e->dev || fsc_offload_seg_dev(e, 1) != e->dev;
}

fsc_status fsc_stream_tensor(fsc_engine *e, const fsc_piece *recs, int nrecs, const fsc_holding *h, int nh,
                             int state, int t, const int *to, int nto, fsc_piece_sink sink, void *ctx, float *host,
                             float *dbuf) {
    fsc_comm *c = e->r->comm;
    const int me = fsc_comm_rank(c), mine = receives(to, nto, me);
    fsc_status err = FSC_OK; /* the first failure: the messages still go and come, so that no rank waits */
    char msg[512] = "";
    int k0 = 0, hi = nrecs; /* the first record of tensor t */
    while (k0 < hi) {
        int mid = k0 + (hi - k0) / 2;
        if (recs[mid].t < t) k0 = mid + 1;
        else hi = mid;
    }
    for (int k = k0; k < nrecs && recs[k].t == t; k++) {
        const fsc_piece *rec = &recs[k];
        const int own = me == rec->rank;
        if (!mine && !own) continue;
        const float *src = NULL;
        if (own && !(src = owner_ptr(e, h, nh, rec, state)))
            return fsc_error(FSC_ERR_INTERNAL, "checkpoint: rank %d lost its piece of %s", me,
                             fsc_engine_full_info(e, t)->name);
        for (uint64_t off = 0; off < rec->n; off += FSC_PIECE_CHUNK) {
            size_t n = rec->n - off < FSC_PIECE_CHUNK ? (size_t)(rec->n - off) : FSC_PIECE_CHUNK;
            fsc_status s = FSC_OK;
            if (own) {
                s = send_chunk(e, state, src + off, n, to, nto, dbuf);
                if (s == FSC_OK && mine)
                    s = fsc_device_download(fsc_offload_seg_dev(e, state), host, src + off, n * sizeof(float));
            } else {
                s = fsc_comm_recv(c, dbuf, n, FSC_F32, rec->rank);
                if (s == FSC_OK) s = fsc_device_download(e->dev, host, dbuf, n * sizeof(float));
            }
            /* after a failed sink the receiver keeps receiving, so no message is left queued */
            if (s == FSC_OK && mine && err == FSC_OK) s = sink(ctx, rec->first + off, host, n);
            if (s != FSC_OK && err == FSC_OK) {
                err = s;
                snprintf(msg, sizeof msg, "%s", fsc_last_error());
            }
        }
    }
    return err == FSC_OK ? FSC_OK : fsc_error(err, "%s", msg);
}

/* ---- the full parameters, streamed ---- */

/* The caller's sink for tensor t; its first failure is kept (status and message) and the rest of the batch is
 * received without it, so no owner's message is left unread. */
typedef struct {
    fsc_param_sink sink;
    void *ctx;
    int t;
    fsc_status failed;
    char msg[512];
} param_ctx;

static fsc_status to_param_sink(void *ctx, uint64_t first, const float *host, size_t n) {
    param_ctx *p = ctx;
    if (p->failed != FSC_OK) return FSC_OK;
    p->failed = p->sink(p->ctx, p->t, first, host, n);
    if (p->failed != FSC_OK) snprintf(p->msg, sizeof p->msg, "%s", fsc_last_error());
    return FSC_OK;
}

/* This rank's pieces: its holdings it writes (sorted by tensor, first), as records of world rank `rank`. */
static fsc_status my_pieces(const fsc_holding *h, int nh, int rank, fsc_piece **out, int *n) {
    *n = 0;
    if (!(*out = calloc((size_t)nh + 1, sizeof **out))) return fsc_error(FSC_ERR_NOMEM, "engine: out of host memory");
    for (int i = 0; i < nh; i++)
        if (h[i].write && h[i].n > 0)
            (*out)[(*n)++] = (fsc_piece){ .t = h[i].tensor, .rank = rank, .first = h[i].first, .n = h[i].n };
    return FSC_OK;
}

/* The receivers: the world ranks passing want 1, in increasing order (*to from malloc). */
static fsc_status gather_wants(fsc_engine *e, int want, int **to, int *nto) {
    const int N = fsc_comm_size(e->r->comm);
    int32_t mine = want ? 1 : 0;
    *nto = 0;
    *to = malloc(((size_t)N + 1) * sizeof **to);
    int32_t *all = *to ? malloc((size_t)N * sizeof *all) : NULL;
    fsc_status s = fsc_engine_gather_host_agreed(e, e->r->comm, &mine, sizeof mine, all);
    for (int r = 0; s == FSC_OK && r < N; r++)
        if (all[r]) (*to)[(*nto)++] = r;
    free(all);
    return s;
}

/* A batch's pieces' records, this rank's mine[0, n), on the receivers `to` (*all from malloc, unsorted; the
 * other ranks get their own): every rank's count, then each rank's records sent to each receiver in rank order
 * (the device holds the largest rank's records of the batch, not the world's). Collective. */
static fsc_status gather_to(fsc_engine *e, const fsc_piece *mine, int n, const int *to, int nto, fsc_piece **all,
                            int *nall) {
    fsc_comm *c = e->r->comm;
    const int N = fsc_comm_size(c), me = fsc_comm_rank(c), recv = receives(to, nto, me);
    int64_t *counts = calloc((size_t)N, sizeof *counts), mc = n, most = n, total = 0;
    fsc_piece *d = NULL;
    *all = NULL;
    *nall = 0;
    fsc_status s = fsc_engine_gather_host_agreed(e, c, &mc, sizeof mc, counts);
    for (int r = 0; s == FSC_OK && r < N; r++) {
        if (counts[r] < 0 || counts[r] > (1 << 24))
            s = fsc_error(FSC_ERR_INTERNAL, "engine: rank %d reports %lld pieces of a tensor", r, (long long)counts[r]);
        else if (recv && counts[r] > most) most = counts[r];
        total += counts[r];
    }
    if (s == FSC_OK && !(*all = malloc((size_t)(recv ? total + 1 : n + 1) * sizeof **all)))
        s = fsc_error(FSC_ERR_NOMEM, "engine: out of host memory for %lld piece records", (long long)total);
    if (s == FSC_OK && most > 0) s = fsc_device_alloc(e->dev, FSC_TAG_COMM, (size_t)most * sizeof *d, (void **)&d);
    if (s == FSC_OK && !recv) {
        memcpy(*all, mine, (size_t)n * sizeof *mine);
        *nall = n;
    }
    s = fsc_comm_agree(c, e->dev, s); /* every rank reaches the sends and receives, or none does */
    for (int r = 0; r < N && s == FSC_OK; r++) {
        if (!counts[r]) continue;
        if (r == me) {
            s = fsc_device_upload(e->dev, d, mine, (size_t)n * sizeof *d); /* d received the earlier ranks' */
            for (int i = 0; i < nto && s == FSC_OK; i++)
                if (to[i] != me) s = fsc_comm_send(c, d, (size_t)n * sizeof *d, FSC_U8, to[i]);
            if (!recv) continue; /* its own records: in *all already */
            memcpy(*all + *nall, mine, (size_t)n * sizeof *mine);
        } else if (recv) {
            s = fsc_comm_recv(c, d, (size_t)counts[r] * sizeof *d, FSC_U8, r);
            if (s == FSC_OK) s = fsc_device_download(e->dev, *all + *nall, d, (size_t)counts[r] * sizeof *d);
        } else {
            continue;
        }
        *nall += (int)counts[r];
    }
    fsc_device_release(e->dev, d);
    free(counts);
    if (s != FSC_OK) {
        free(*all);
        *all = NULL;
        *nall = 0;
    }
    return s;
}

/* Tensors [t0, t1) streamed: their pieces' records on the receivers (this rank's are mine[0, n)), checked there,
 * then the pieces (collective; the caller agrees on the verdict). */
static fsc_status stream_batch(fsc_engine *e, int t0, int t1, const fsc_piece *mine, int n, const fsc_holding *h,
                               int nh, const int *to, int nto, fsc_param_sink sink, void *ctx, float *host,
                               float *dbuf) {
    fsc_piece *all = NULL;
    int nall = 0, k = 0;
    fsc_status s = gather_to(e, mine, n, to, nto, &all, &nall);
    if (s == FSC_OK && receives(to, nto, fsc_comm_rank(e->r->comm))) {
        qsort(all, (size_t)nall, sizeof *all, cmp_piece);
        for (int t = t0; t < t1 && s == FSC_OK; t++) s = check_tensor(e, all, nall, t, &k);
        if (s == FSC_OK && k != nall)
            s = fsc_error(FSC_ERR_INTERNAL, "engine: a piece names tensor %d, outside [%d, %d)", all[k].t, t0, t1);
    }
    s = fsc_comm_agree(e->r->comm, e->dev, s); /* every owner sends, every receiver receives, or none */
    param_ctx pc = { .sink = sink, .ctx = ctx, .failed = FSC_OK };
    for (int t = t0; t < t1 && s == FSC_OK; t++) {
        pc.t = t;
        s = fsc_stream_tensor(e, all, nall, h, nh, 0, t, to, nto, to_param_sink, &pc, host, dbuf);
    }
    free(all);
    if (s == FSC_OK && pc.failed != FSC_OK) return fsc_error(pc.failed, "%s", pc.msg);
    return s;
}

fsc_status fsc_engine_stream_params(fsc_engine *e, fsc_status pre, int want, fsc_param_sink sink, void *ctx) {
    fsc_comm *c = e->r->comm;
    fsc_holding *h = NULL;
    fsc_piece *mine = NULL;
    int nh = 0, nmine = 0, nto = 0, *to = NULL;
    float *host = NULL, *dbuf = NULL;
    fsc_status s = pre;
    if (s == FSC_OK) s = fsc_holdings_sorted(e, &h, &nh);
    if (s == FSC_OK) s = my_pieces(h, nh, fsc_comm_rank(c), &mine, &nmine);
    s = fsc_comm_agree(c, e->dev, s);
    if (s == FSC_OK) s = gather_wants(e, want, &to, &nto);
    if (s == FSC_OK && (want || fsc_stream_owner_offloaded(e))) { /* before the agreement: nothing fails later */
        size_t most = 1; /* a chunk, or the largest tensor when smaller */
        for (int t = 0; t < e->m->n_tensors; t++)
            if (fsc_engine_full_info(e, t)->numel > most) most = fsc_engine_full_info(e, t)->numel;
        if (most > FSC_PIECE_CHUNK) most = FSC_PIECE_CHUNK;
        host = want ? malloc(most * sizeof(float)) : NULL;
        s = host || !want ? fsc_device_alloc(e->dev, FSC_TAG_COMM, most * sizeof(float), (void **)&dbuf)
                          : fsc_error(FSC_ERR_NOMEM, "engine: out of host memory");
    }
    s = fsc_comm_agree(c, e->dev, s); /* the owners start sending only once every receiver can receive */
    for (int t0 = 0, t1 = 0, k = 0; t0 < e->m->n_tensors && s == FSC_OK; t0 = t1) {
        size_t n = fsc_engine_full_info(e, t0)->numel; /* tensors [t0, t1): STREAM_BATCH floats, or one larger */
        for (t1 = t0 + 1; t1 < e->m->n_tensors && n + fsc_engine_full_info(e, t1)->numel <= STREAM_BATCH; t1++)
            n += fsc_engine_full_info(e, t1)->numel;
        const int k0 = k; /* mine[k0, k): this rank's pieces of them */
        while (k < nmine && mine[k].t < t1) k++;
        /* one batch's records at a time (tensor parallelism's slices are a run per row), and agreed: a receiver
         * that failed must not leave the owners' next sends queued, and a sender runs at most one batch ahead of
         * its receivers (the simulated communicator queues what is sent) */
        s = fsc_comm_agree(c, e->dev, stream_batch(e, t0, t1, mine + k0, k - k0, h, nh, to, nto, sink, ctx, host, dbuf));
    }
    fsc_device_release(e->dev, dbuf);
    free(host);
    free(to);
    free(mine);
    free(h);
    return s;
}
