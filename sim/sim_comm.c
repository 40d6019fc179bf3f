/* The simulated communicator: the fsc_comm_ops table over sim groups (sim.h, sim_group.c).
 * After the arrive rendezvous each rank computes its own part reading the other ranks' buffers directly:
 * - reductions in a fixed order, acc = x[rank 0]; acc += x[rank 1]; ... in f32 (bf16 and f16 are widened
 *   to f32 and rounded once at the end, RNE; i32 and i64 sums wrap), AVG divides the f32 sum by N, MAX keeps NaN.
 *   All-reduce gives rank r a contiguous chunk of the elements, which it reduces and writes into every
 *   rank's recv; reduce-scatter reduces block r into rank r's recv. Element i is the same sequence of
 *   operations either way, so reduce-scatter equals all-reduce bit for bit.
 * - all-gather, all-to-all and broadcast copy from the other ranks' send buffers.
 * Send is buffered (the message is copied and queued at the destination; FIFO per source), so neighbours
 * that send to each other at the same time never deadlock; recv waits for the oldest message from peer.
 * With staging (h->stage, a device other than cpu; sim.h) each call first downloads what it sends into the
 * handle's host buffer and computes on host pointers into it exactly as above, then uploads its result:
 * all-reduce and reduce-scatter run in place in one buffer, all-gather in place in an N-block buffer,
 * all-to-all in a send and a recv half; send downloads into the message and recv uploads from it. A group of
 * one stages nothing (alone_call).
 * Arguments were validated by lib/core/comm.c, which also counts calls and bytes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "sim.h"
#include "core/clock_impl.h"

enum { TILE = 256 };

typedef unsigned char u8;

/* Arrive with mine. st is how staging went on this rank: if it failed, arrive anyway with the slot marked,
 * so the collective fails on every rank at once (none waits for this one), and return this rank's error. */
static fsc_status arrive(sim_handle *h, sim_slot *mine, fsc_status st) {
    if (st == FSC_OK) return sim_arrive(h, mine);
    snprintf(h->stage_err, sizeof(h->stage_err), "%s", fsc_last_error());
    mine->stage_err = h->stage_err;
    (void)sim_arrive(h, mine); /* fails: the completing rank sees stage_err */
    return fsc_error(st, "%s", h->stage_err);
}

/* Staging before arriving: reserve bytes of host buffer, then download in_bytes from src to buf + at. */
static fsc_status stage_pre(sim_handle *h, const char *what, size_t bytes, const void *src, size_t at,
                            size_t in_bytes) {
    FSC_TRY(sim_stage_reserve(h, what, bytes));
    return sim_stage_in(h, what, h->buf + at, src, in_bytes);
}

/* ---- reductions ---- */

/* x[0..n) as f32: a pointer into src (f32) or into tmp (converted). */
static const float *as_f32(float *tmp, const void *src, size_t off, size_t n, fsc_dtype dt) {
    if (dt == FSC_F32) return (const float *)src + off;
    fsc_convert_host(tmp, FSC_F32, (const u8 *)src + off * fsc_dtype_size(dt), dt, n);
    return tmp;
}

/* acc[0..n) = reduction over ranks, in rank order, of elements [off, off+n) of every send buffer. */
static void reduce_tile_f32(float *acc, const sim_slot *s, int N, size_t off, size_t n, fsc_dtype dt,
                            fsc_redop op) {
    float tmp[TILE];
    const float *x = as_f32(tmp, s[0].send, off, n, dt);
    memcpy(acc, x, n * sizeof(float));
    for (int j = 1; j < N; j++) {
        x = as_f32(tmp, s[j].send, off, n, dt);
        if (op == FSC_MAX) {
            for (size_t i = 0; i < n; i++)
                if (isnan(x[i]) || x[i] > acc[i]) acc[i] = isnan(acc[i]) ? acc[i] : x[i];
        } else {
            for (size_t i = 0; i < n; i++) acc[i] += x[i];
        }
    }
    if (op == FSC_AVG)
        for (size_t i = 0; i < n; i++) acc[i] /= (float)N;
}

static void reduce_tile_i32(int32_t *acc, const sim_slot *s, int N, size_t off, size_t n, fsc_redop op) {
    memcpy(acc, (const int32_t *)s[0].send + off, n * sizeof(int32_t));
    for (int j = 1; j < N; j++) {
        const int32_t *x = (const int32_t *)s[j].send + off;
        if (op == FSC_MAX) {
            for (size_t i = 0; i < n; i++) acc[i] = x[i] > acc[i] ? x[i] : acc[i];
        } else { /* wrapping sum */
            for (size_t i = 0; i < n; i++) acc[i] = (int32_t)((uint32_t)acc[i] + (uint32_t)x[i]);
        }
    }
}

/* i64 (the exact reductions' fixed point, exact.h): wrapping sums, which are associative, and maxima */
static void reduce_tile_i64(int64_t *acc, const sim_slot *s, int N, size_t off, size_t n, fsc_redop op) {
    memcpy(acc, (const int64_t *)s[0].send + off, n * sizeof(int64_t));
    for (int j = 1; j < N; j++) {
        const int64_t *x = (const int64_t *)s[j].send + off;
        if (op == FSC_MAX) {
            for (size_t i = 0; i < n; i++) acc[i] = x[i] > acc[i] ? x[i] : acc[i];
        } else {
            for (size_t i = 0; i < n; i++) acc[i] = (int64_t)((uint64_t)acc[i] + (uint64_t)x[i]);
        }
    }
}

/* Reduce elements [src_off, src_off+len) of every rank's send and write them at dst_off of the recv of
 * rank dst_rank, or of every rank when dst_rank < 0. */
static void reduce_range(const sim_group *g, size_t src_off, size_t len, int dst_rank, size_t dst_off,
                         fsc_dtype dt, fsc_redop op) {
    const sim_slot *s = g->slots;
    const size_t es = fsc_dtype_size(dt);
    if (g->size == 1 && (dt == FSC_F32 || dt == FSC_I32 || dt == FSC_I64)) { /* one rank: every op is its values */
        const u8 *src = (const u8 *)s[0].send + src_off * es;
        u8 *dst = (u8 *)s[0].recv + dst_off * es;
        if (dst != src) memcpy(dst, src, len * es);
        return;
    }
    float acc[TILE];
    int32_t iacc[TILE];
    int64_t lacc[TILE];
    for (size_t t = 0; t < len; t += TILE) {
        size_t n = len - t < TILE ? len - t : TILE;
        const void *out = acc;
        if (dt == FSC_I64) {
            reduce_tile_i64(lacc, s, g->size, src_off + t, n, op);
            out = lacc;
        } else if (dt == FSC_I32) {
            reduce_tile_i32(iacc, s, g->size, src_off + t, n, op);
            out = iacc;
        } else {
            reduce_tile_f32(acc, s, g->size, src_off + t, n, dt, op);
        }
        int j0 = dst_rank < 0 ? 0 : dst_rank, j1 = dst_rank < 0 ? g->size : dst_rank + 1;
        for (int j = j0; j < j1; j++) {
            u8 *dst = (u8 *)s[j].recv + (dst_off + t) * es;
            if (dt == FSC_F32 || dt == FSC_I32 || dt == FSC_I64) memcpy(dst, out, n * es);
            else fsc_convert_host(dst, dt, acc, FSC_F32, n);
        }
    }
}

static fsc_status sim_all_reduce(void *ctx, const void *send, void *recv, size_t count, fsc_dtype dt,
                                 fsc_redop op) {
    sim_handle *h = ctx;
    const size_t bytes = count * fsc_dtype_size(dt);
    fsc_status st = FSC_OK;
    void *dev_recv = recv;
    if (h->stage && (st = stage_pre(h, "all_reduce", bytes, send, 0, bytes)) == FSC_OK)
        send = recv = h->buf; /* in place in the host buffer */
    sim_slot me = {.op = FSC_OP_ALL_REDUCE, .count = count, .dt = dt, .redop = op, .send = send, .recv = recv};
    FSC_TRY(arrive(h, &me, st));
    /* rank r owns elements [lo, hi): it reads them from every send and writes them to every recv; nobody
     * else touches them, so send == recv (in place) is safe. */
    size_t N = (size_t)h->g->size, chunk = (count + N - 1) / N;
    for (size_t r = 0; r < N; r++) { /* its own chunk, and those of the ranks it stands in for */
        if (r != (size_t)h->rank && !(h->g->stood && sim_stand_in(h->g, (int)r) == h->rank)) continue;
        size_t lo = r * chunk < count ? r * chunk : count, hi = lo + chunk < count ? lo + chunk : count;
        if (hi > lo) reduce_range(h->g, lo, hi - lo, -1, lo, dt, op);
    }
    sim_depart(h);
    return h->stage ? sim_stage_out(h, "all_reduce", dev_recv, h->buf, bytes) : FSC_OK;
}

static fsc_status sim_reduce_scatter(void *ctx, const void *send, void *recv, size_t recvcount, fsc_dtype dt,
                                     fsc_redop op) {
    sim_handle *h = ctx;
    const size_t bytes = recvcount * fsc_dtype_size(dt), full = bytes * (size_t)h->g->size;
    fsc_status st = FSC_OK;
    void *dev_recv = recv;
    if (h->stage && (st = stage_pre(h, "reduce_scatter", full, send, 0, full)) == FSC_OK) {
        send = h->buf; /* in place in the host buffer: recv is block rank of send */
        recv = h->buf + (size_t)h->rank * bytes;
    }
    sim_slot me = {.op = FSC_OP_REDUCE_SCATTER, .count = recvcount, .dt = dt, .redop = op, .send = send,
                   .recv = recv};
    FSC_TRY(arrive(h, &me, st));
    /* in place (recv == send + rank*recvcount) is safe: element i of block r is read and written by rank r only */
    if (recvcount) reduce_range(h->g, (size_t)h->rank * recvcount, recvcount, h->rank, 0, dt, op);
    sim_depart(h);
    return h->stage ? sim_stage_out(h, "reduce_scatter", dev_recv, recv, bytes) : FSC_OK;
}

/* ---- data movement ---- */

static void copy_block(void *dst, const void *src, size_t bytes) {
    if (bytes && dst != src) memcpy(dst, src, bytes);
}

static fsc_status sim_all_gather(void *ctx, const void *send, void *recv, size_t sendcount, fsc_dtype dt) {
    sim_handle *h = ctx;
    const size_t bytes = sendcount * fsc_dtype_size(dt), mine = (size_t)h->rank * bytes,
                 full = bytes * (size_t)h->g->size;
    fsc_status st = FSC_OK;
    void *dev_recv = recv;
    if (h->stage && (st = stage_pre(h, "all_gather", full, send, mine, bytes)) == FSC_OK) {
        send = h->buf + mine; /* in place in the host buffer of N blocks */
        recv = h->buf;
    }
    sim_slot me = {.op = FSC_OP_ALL_GATHER, .count = sendcount, .dt = dt, .send = send, .recv = recv};
    FSC_TRY(arrive(h, &me, st));
    /* in place (send == recv + rank*sendcount): block r is skipped, other blocks are only written here */
    for (int j = 0; bytes && j < h->g->size; j++)
        copy_block((u8 *)recv + (size_t)j * bytes, h->g->slots[j].send, bytes);
    sim_depart(h);
    return h->stage ? sim_stage_out(h, "all_gather", dev_recv, recv, full) : FSC_OK;
}

static fsc_status sim_broadcast(void *ctx, void *buf, size_t count, fsc_dtype dt, int root) {
    sim_handle *h = ctx;
    const size_t bytes = count * fsc_dtype_size(dt);
    fsc_status st = FSC_OK;
    void *dev_buf = buf;
    if (h->stage && (st = stage_pre(h, "broadcast", bytes, buf, 0, h->rank == root ? bytes : 0)) == FSC_OK)
        buf = h->buf; /* the root downloads into it, the others receive into it */
    sim_slot me = {.op = FSC_OP_BROADCAST, .count = count, .dt = dt, .root = root, .send = buf, .recv = buf};
    FSC_TRY(arrive(h, &me, st));
    if (h->rank != root) copy_block(buf, h->g->slots[root].send, bytes);
    sim_depart(h);
    return h->stage && h->rank != root ? sim_stage_out(h, "broadcast", dev_buf, buf, bytes) : FSC_OK;
}

static fsc_status sim_all_to_all(void *ctx, const void *send, void *recv, size_t count, fsc_dtype dt) {
    sim_handle *h = ctx;
    const size_t bytes = count * fsc_dtype_size(dt), full = bytes * (size_t)h->g->size;
    fsc_status st = FSC_OK;
    void *dev_recv = recv;
    if (h->stage && (st = stage_pre(h, "all_to_all", 2 * full, send, 0, full)) == FSC_OK) {
        send = h->buf; /* send in the first half of the host buffer, recv in the second */
        recv = h->buf + full;
    }
    sim_slot me = {.op = FSC_OP_ALL_TO_ALL, .count = count, .dt = dt, .send = send, .recv = recv};
    FSC_TRY(arrive(h, &me, st));
    for (int j = 0; bytes && j < h->g->size; j++)
        copy_block((u8 *)recv + (size_t)j * bytes, (const u8 *)h->g->slots[j].send + (size_t)h->rank * bytes,
                   bytes);
    sim_depart(h);
    return h->stage ? sim_stage_out(h, "all_to_all", dev_recv, recv, full) : FSC_OK;
}

static fsc_status sim_barrier(void *ctx) {
    sim_slot me = {.op = FSC_OP_BARRIER};
    /* no buffers are read, so there is nothing to wait for after arriving */
    return sim_arrive(ctx, &me);
}

/* ---- point to point ---- */

/* Under g->mu, one round of a point-to-point wait on peer (lab: its label): FSC_OK once woken or past the deadline
 * (*timed_out), else why the wait fails: the group failed, peer returned from its function without `doing`, or the
 * round after the deadline (the group then fails, the message saying `never`). */
static fsc_status peer_wait(sim_handle *h, int peer, const char *what, const char *lab, const char *doing,
                            const char *never, const struct timespec *deadline, int *timed_out) {
    sim_group *g = h->g;
    /* exited before failed: a rank fails the cluster before it exits, so a failure is never missed */
    const int gone = atomic_load_explicit(&g->cl->exited[g->world_rank[peer]], memory_order_acquire);
    FSC_TRY(sim_check_failed(h, what, 0));
    if (gone) return fsc_error(FSC_ERR_COMM, "%s: %s returned from its function without %s", what, lab, doing);
    if (*timed_out) {
        char msg[SIM_MSG_CAP];
        snprintf(msg, sizeof(msg), "%s timed out after %g s: %s %s", what, g->cl->timeout_s, lab, never);
        sim_group_fail(g, FSC_ERR_TIMEOUT, msg);
        return fsc_error(FSC_ERR_TIMEOUT, "%s", msg);
    }
    *timed_out = sim_wait(g, deadline);
    return FSC_OK;
}

/* Under g->mu, which it releases: with sync sends, the sender of m (queued for peer) waits until the receiver took
 * it, then frees it; if the group fails, the receiver exits or the cluster's timeout passes first, the send fails:
 * a message still queued is unlinked, and one a receiver is copying (from m->sbuf: this sender's buffer) is waited
 * for until the copy ends, so that no receiver reads a buffer its sender's caller got back. */
static fsc_status send_wait(sim_handle *h, sim_msg *m, int peer, const char *what) {
    sim_group *g = h->g;
    char lab[64];
    sim_rank_label(g, peer, lab, sizeof(lab));
    struct timespec deadline;
    sim_deadline(g->cl, &deadline);
    fsc_status s = FSC_OK;
    int timed_out = 0;
    while (s == FSC_OK && !m->taken)
        s = peer_wait(h, peer, what, lab, "receiving it",
                      "never received it (sends wait for their receive: sim_sync_sends)", &deadline, &timed_out);
    if (!m->taken) { /* still queued (unlink it), or taken by a receiver that is copying it (wait for the copy) */
        int queued = 0;
        for (sim_msg **p = &g->inbox[peer]; *p; p = &(*p)->next)
            if (*p == m) {
                *p = m->next, queued = 1;
                break;
            }
        while (!queued && !m->taken) pthread_cond_wait(&g->cv, &g->mu); /* a copy in progress: it ends */
    }
    if (m->taken && m->t_taken > h->t_done) h->t_done = m->t_taken; /* the virtual clock: until it was received */
    pthread_mutex_unlock(&g->mu);
    free(m);
    return s;
}

static fsc_status sim_send(void *ctx, const void *buf, size_t count, fsc_dtype dt, int peer) {
    sim_handle *h = ctx;
    sim_group *g = h->g;
    size_t bytes = h->nodata ? 0 : count * fsc_dtype_size(dt);
    /* sync sends: the receiver reads buf itself when it takes the message (NCCL's), unless device memory is staged */
    const int waited = h->g->cl->sync_sends && !h->nodata && peer != h->rank;
    const void *sbuf = waited && !h->stage && bytes ? buf : NULL;
    sim_msg *m = malloc(sizeof(*m) + (sbuf ? 0 : bytes));
    if (!m) return fsc_error(FSC_ERR_NOMEM, "send of %zu bytes to rank %d: out of memory", bytes, peer);
    m->next = NULL;
    m->src = h->rank;
    m->count = count;
    m->dt = dt;
    m->t_avail = h->t_done; /* the virtual clock: the send's end (sim_run_call) */
    m->waited = waited;
    m->taken = 0;
    m->sbuf = sbuf;
    char what[64];
    snprintf(what, sizeof(what), "send to rank %d", peer);
    if (h->nodata || sbuf) {
    } else if (h->stage) {
        fsc_status st = sim_stage_in(h, what, m->data, buf, bytes);
        if (st != FSC_OK) {
            free(m);
            return st;
        }
    } else if (bytes) {
        memcpy(m->data, buf, bytes);
    }
    pthread_mutex_lock(&g->mu);
    fsc_status s = sim_check_failed(h, what, 1);
    if (s == FSC_OK) {
        sim_msg **p = &g->inbox[peer];
        while (*p) p = &(*p)->next;
        *p = m;
        pthread_cond_broadcast(&g->cv);
    }
    if (s == FSC_OK && m->waited) return send_wait(h, m, peer, what); /* unlocks */
    pthread_mutex_unlock(&g->mu);
    if (s != FSC_OK) free(m);
    return s;
}

/* Under g->mu: unlink the oldest message from src queued for rank dst. */
static sim_msg *take_msg(sim_group *g, int dst, int src) {
    for (sim_msg **p = &g->inbox[dst]; *p; p = &(*p)->next) {
        if ((*p)->src == src) {
            sim_msg *m = *p;
            *p = m->next;
            return m;
        }
    }
    return NULL;
}

static fsc_status sim_recv(void *ctx, void *buf, size_t count, fsc_dtype dt, int peer) {
    sim_handle *h = ctx;
    sim_group *g = h->g;
    char what[64], lab[64];
    snprintf(what, sizeof(what), "recv from rank %d", peer);
    sim_rank_label(g, peer, lab, sizeof(lab));
    struct timespec deadline;
    sim_deadline(g->cl, &deadline);
    sim_msg *m = NULL;
    int timed_out = 0;
    pthread_mutex_lock(&g->mu);
    fsc_status s = sim_check_failed(h, what, 1);
    while (s == FSC_OK && !(m = take_msg(g, h->rank, peer)))
        s = peer_wait(h, peer, what, lab, "sending", "never sent", &deadline, &timed_out);
    pthread_mutex_unlock(&g->mu);
    if (!m) return s;
    h->t_done = m->t_avail > h->t_arrive ? m->t_avail : h->t_arrive; /* the virtual clock: here when it arrived */
    if (m->count != count || m->dt != dt) {
        s = fsc_error(FSC_ERR_COMM, "%s of %zu x %s, but %s sent %zu x %s", what, count, fsc_dtype_name(dt), lab,
                      m->count, fsc_dtype_name(m->dt));
    } else if (h->nodata) {
    } else if (h->stage) {
        s = sim_stage_out(h, what, buf, m->sbuf ? m->sbuf : m->data, count * fsc_dtype_size(dt));
    } else if (count) {
        memcpy(buf, m->sbuf ? m->sbuf : m->data, count * fsc_dtype_size(dt)); /* sbuf: the sender's, as it is now */
    }
    if (m->waited) { /* its sender waits for this (send_wait), and frees it */
        pthread_mutex_lock(&g->mu);
        m->taken = 1, m->t_taken = h->t_arrive;
        pthread_cond_broadcast(&g->cv);
        pthread_mutex_unlock(&g->mu);
    } else {
        free(m);
    }
    return s;
}

/* ---- groups ---- */

static fsc_status sim_split(void *ctx, int color, int key, void **new_ctx, int *new_rank, int *new_size) {
    sim_handle *h = ctx;
    sim_slot me = {.op = SIM_OP_SPLIT, .color = color, .key = key};
    FSC_TRY(sim_arrive(h, &me));
    sim_handle *child = h->g->slots[h->rank].child;
    child->dev = h->dev;
    child->stage = h->stage;
    child->dry = h->dry;
    /* rank 0 of each new group registers it (so failures wake its waiters) before anyone can use it */
    if (child->rank == 0) sim_group_register(child->g);
    sim_depart(h);
    *new_ctx = child;
    *new_rank = child->rank;
    *new_size = child->g->size;
    return FSC_OK;
}

/* This rank gives up on the group (fsc_comm_ops.revoke): the group fails for good (sticky, as after a timeout), which
 * wakes every rank waiting in it, this rank's progress thread included. */
static void sim_revoke(void *ctx, const char *why) {
    sim_handle *h = ctx;
    sim_group *g = h->g;
    char msg[SIM_MSG_CAP];
    snprintf(msg, sizeof(msg), "world rank %d gave up on the group: %.300s", g->world_rank[h->rank], why);
    pthread_mutex_lock(&g->mu);
    if (g->fail == FSC_OK) g->revoker = g->world_rank[h->rank]; /* the calls failing on the group record it */
    sim_group_fail(g, FSC_ERR_COMM, msg);
    pthread_mutex_unlock(&g->mu);
}

static void sim_destroy(void *ctx) {
    sim_handle *h = ctx;
    if (!h) return;
    sim_async_free(h);
    sim_group_unref(h->g);
    free(h->buf);
    free(h);
}

/* ---- one call, then the network's time; the table's synchronous entries ---- */

/* The bytes of a call's count (per rank), as the counting device's threshold compares them. */
static size_t call_bytes(const fsc_comm_call *k) { return k->count * fsc_dtype_size(k->dt); }

/* A call the counting device skips, on a virtual clock (the planner's replay): no data moves, but its time is
 * the network's as for any call. A collective meets its group (it starts when the last rank arrives), a send
 * books its link and queues an empty message carrying its end, a recv waits for that message. */
static fsc_status dry_timed(sim_handle *h, const fsc_comm_call *k) {
    fsc_status s;
    h->nodata = 1;
    if (k->op == FSC_OP_SEND || k->op == FSC_OP_RECV) {
        if (k->op == FSC_OP_SEND && sim_net_on(h->g->cl) && k->peer != h->rank) {
            int me = h->g->world_rank[h->rank];
            h->t_done = sim_net_reserve(h->g->cl, &me, 1, sim_net_cost(h->g, k), h->t_arrive);
        }
        s = k->op == FSC_OP_SEND ? sim_send(h, NULL, k->count, k->dt, k->peer) : sim_recv(h, NULL, k->count, k->dt, k->peer);
    } else {
        sim_slot me = {.op = (int)k->op, .count = k->count, .dt = k->dt, .redop = k->redop, .root = k->peer};
        s = sim_arrive(h, &me);
        if (s == FSC_OK) sim_depart(h);
    }
    h->nodata = 0;
    h->t_last = h->t_done;
    return s;
}

/* A collective of a group of one that stages through host memory: a collective over one rank is the identity
 * (the sum, mean or maximum of one value is that value, in every dtype: bf16 and f16 widen to f32 and round back
 * exactly), so its data stays on the device (recv = send: a device copy unless in place) and nothing is staged.
 * One GPU rank (fsc-train --device cuda) staged its whole gradient through host memory twice a step: most of a
 * GPT-2 124M step on an H200. The rank still arrives and departs (failures, clocks, traces), with no data. */
static int alone(const sim_handle *h, const fsc_comm_call *k) {
    return h->stage && h->g->size == 1 && k->op != FSC_OP_SEND && k->op != FSC_OP_RECV && k->op != FSC_OP_BARRIER;
}

static fsc_status alone_call(sim_handle *h, const fsc_comm_call *k) {
    sim_slot me = {.op = k->op, .count = k->count, .dt = k->dt, .redop = k->redop, .root = k->peer};
    FSC_TRY(sim_arrive(h, &me));
    sim_depart(h);
    if (!k->send || !k->recv || k->send == k->recv || !call_bytes(k)) return FSC_OK;
    fsc_count_staging(1); /* the communicator's own copy, as staging's: not the rank's work in a plan */
    fsc_status s = fsc_device_copy(h->dev, k->recv, k->send, call_bytes(k));
    fsc_count_staging(0);
    return s;
}

fsc_status sim_run_call(sim_handle *h, const fsc_comm_call *k) {
    /* the counting device (the planner's dry run): a call larger than its real allocations moves nothing and
     * waits for no one (every rank skips the same calls: their sizes agree); smaller ones carry the values the
     * engine reads back and run as on any device */
    const int net = sim_net_on(h->g->cl), virt = h->g->cl->virt;
    h->t_done = h->t_arrive;
    if (h->dry && k->op != FSC_OP_BARRIER && call_bytes(k) > FSC_COUNT_REAL_MAX) { /* its cost is counted, not slept */
        if (virt) return dry_timed(h, k);
        if (net && k->op != FSC_OP_RECV) sim_net_count(h->g->cl, h->g->world_rank[h->rank], sim_net_cost(h->g, k));
        return FSC_OK;
    }
    if (net && k->op == FSC_OP_SEND && k->peer != h->rank) { /* the sender's link carries it before it is there */
        int me = h->g->world_rank[h->rank];
        double end = sim_net_reserve(h->g->cl, &me, 1, sim_net_cost(h->g, k),
                                     virt ? h->t_arrive : sim_now());
        if (virt) h->t_done = end; /* the message carries it (sim_send) */
        else fsc_clock_wait_until(end);
    }
    fsc_status s;
    if (alone(h, k)) s = alone_call(h, k);
    else switch (k->op) {
    case FSC_OP_ALL_REDUCE: s = sim_all_reduce(h, k->send, k->recv, k->count, k->dt, k->redop); break;
    case FSC_OP_REDUCE_SCATTER: s = sim_reduce_scatter(h, k->send, k->recv, k->count, k->dt, k->redop); break;
    case FSC_OP_ALL_GATHER: s = sim_all_gather(h, k->send, k->recv, k->count, k->dt); break;
    case FSC_OP_BROADCAST: s = sim_broadcast(h, k->recv, k->count, k->dt, k->peer); break;
    case FSC_OP_SEND: s = sim_send(h, k->send, k->count, k->dt, k->peer); break;
    case FSC_OP_RECV: s = sim_recv(h, k->recv, k->count, k->dt, k->peer); break;
    case FSC_OP_ALL_TO_ALL: s = sim_all_to_all(h, k->send, k->recv, k->count, k->dt); break;
    case FSC_OP_BARRIER: s = sim_barrier(h); break;
    default: return fsc_error(FSC_ERR_INTERNAL, "sim: no operation %d", (int)k->op);
    }
    if (virt) h->t_last = h->t_done; /* the caller moves its clock (sync_call, sim_async_wait) */
    else if (s == FSC_OK && net && k->op != FSC_OP_SEND && k->op != FSC_OP_RECV)
        fsc_clock_wait_until(h->t_done); /* booked when every rank had arrived */
    return s;
}

/* On the rank's thread. With the virtual clock the call arrives when the rank called it (or when the handle's
 * queued calls have ended, if later), and the rank's clock then stands at the call's end: the simulator's own
 * work inside the call is not charged as the rank's computation. The call runs off the rank's clock, as on a
 * progress thread, so that its staging copies (the counting device's) neither move the clock nor book the rank's
 * copy link (core/device_copy.c). */
static fsc_status sync_call(void *ctx, const fsc_comm_call *k) {
    sim_handle *h = ctx;
    sim_async_drain(h); /* issue order: what was started before runs first */
    if (!h->g->cl->virt) return sim_run_call(h, k);
    h->t_arrive = sim_async_arrival(h);
    fsc_vclock *c = fsc_clock_current();
    fsc_clock_restore(NULL);
    fsc_status s = sim_run_call(h, k);
    fsc_clock_restore(c);
    fsc_clock_set(h->t_done > h->t_arrive ? h->t_done : h->t_arrive);
    return s;
}

static fsc_status op_all_reduce(void *ctx, const void *send, void *recv, size_t count, fsc_dtype dt, fsc_redop op) {
    fsc_comm_call k = {.op = FSC_OP_ALL_REDUCE, .send = send, .recv = recv, .count = count, .dt = dt, .redop = op};
    return sync_call(ctx, &k);
}
static fsc_status op_reduce_scatter(void *ctx, const void *send, void *recv, size_t recvcount, fsc_dtype dt,
                                    fsc_redop op) {
    fsc_comm_call k = {.op = FSC_OP_REDUCE_SCATTER, .send = send, .recv = recv, .count = recvcount, .dt = dt,
                       .redop = op};
    return sync_call(ctx, &k);
}
static fsc_status op_all_gather(void *ctx, const void *send, void *recv, size_t sendcount, fsc_dtype dt) {
    fsc_comm_call k = {.op = FSC_OP_ALL_GATHER, .send = send, .recv = recv, .count = sendcount, .dt = dt};
    return sync_call(ctx, &k);
}
static fsc_status op_broadcast(void *ctx, void *buf, size_t count, fsc_dtype dt, int root) {
    fsc_comm_call k = {.op = FSC_OP_BROADCAST, .send = buf, .recv = buf, .count = count, .dt = dt, .peer = root};
    return sync_call(ctx, &k);
}
static fsc_status op_send(void *ctx, const void *buf, size_t count, fsc_dtype dt, int peer) {
    fsc_comm_call k = {.op = FSC_OP_SEND, .send = buf, .count = count, .dt = dt, .peer = peer};
    return sync_call(ctx, &k);
}
static fsc_status op_recv(void *ctx, void *buf, size_t count, fsc_dtype dt, int peer) {
    fsc_comm_call k = {.op = FSC_OP_RECV, .recv = buf, .count = count, .dt = dt, .peer = peer};
    return sync_call(ctx, &k);
}
static fsc_status op_all_to_all(void *ctx, const void *send, void *recv, size_t count, fsc_dtype dt) {
    fsc_comm_call k = {.op = FSC_OP_ALL_TO_ALL, .send = send, .recv = recv, .count = count, .dt = dt};
    return sync_call(ctx, &k);
}
static fsc_status op_barrier(void *ctx) {
    fsc_comm_call k = {.op = FSC_OP_BARRIER};
    return sync_call(ctx, &k);
}
static fsc_status op_split(void *ctx, int color, int key, void **new_ctx, int *new_rank, int *new_size) {
    sim_handle *h = ctx;
    sim_async_drain(h);
    if (!h->g->cl->virt) return sim_split(h, color, key, new_ctx, new_rank, new_size);
    h->t_arrive = sim_async_arrival(h);
    fsc_status s = sim_split(h, color, key, new_ctx, new_rank, new_size);
    fsc_clock_set(h->t_done > h->t_arrive ? h->t_done : h->t_arrive);
    return s;
}

#define SIM_OPS(wait_)                                                                                             \
    {                                                                                                              \
        .abi_version = FSC_COMM_ABI_VERSION, .name = "sim", .all_reduce = op_all_reduce,                            \
        .reduce_scatter = op_reduce_scatter, .all_gather = op_all_gather, .broadcast = op_broadcast,              \
        .send = op_send, .recv = op_recv, .all_to_all = op_all_to_all, .barrier = op_barrier, .split = op_split,   \
        .destroy = sim_destroy, .start = sim_async_start, .wait = sim_async_wait, .test = sim_async_test,         \
        .sends_wait = wait_, .revoke = sim_revoke                                                                 \
    }
const fsc_comm_ops sim_comm_ops = SIM_OPS(0), sim_comm_ops_sync = SIM_OPS(1);

fsc_status sim_comm_open(sim_cluster *cl, int rank, fsc_device *dev, int force_stage, fsc_comm **out) {
    *out = NULL;
    if (!cl->world_group) return fsc_error(FSC_ERR_STATE, "rank %d: the world group is already released", rank);
    if (force_stage && !dev)
        return fsc_error(FSC_ERR_INVALID, "rank %d: staging through host memory needs the rank's device", rank);
    sim_handle *h = calloc(1, sizeof(*h));
    if (!h) return fsc_error(FSC_ERR_NOMEM, "rank %d: out of memory for its communicator", rank);
    h->g = cl->world_group;
    h->rank = rank;
    h->dev = dev;
    h->stage = force_stage || (dev && strcmp(fsc_device_name(dev), "cpu") != 0);
    h->dry = fsc_device_is_count(dev);
    return fsc_comm_wrap(cl->sync_sends ? &sim_comm_ops_sync : &sim_comm_ops, h, rank, cl->world, "world", out);
}
