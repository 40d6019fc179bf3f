/* The public communicator (comm.h): one wrapper over every implementation's fsc_comm_ops table.
 * It validates arguments with messages a caller can act on, counts calls and bytes per operation,
 * adds the communicator's name and rank to an implementation's error message, and manages the object.
 * What a collective computes is the implementation's business (sim/ for threads, the NCCL plug-in).
 *
 * Bytes per call are what a ring algorithm sends per rank, with s the bytes of the whole buffer and N the
 * group size (0 when N = 1): all-reduce 2(N-1)/N s; reduce-scatter, all-gather and all-to-all (N-1)/N s of
 * the full (N-block) buffer; broadcast s on every rank (the root sends it once, each other rank receives
 * it once); send and recv the message (0 to oneself); barrier 0. Only calls that succeed are counted. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/comm_impl.h"
#include "core/flight_impl.h"
#include "fsc/device.h"

static const char *const op_names[FSC_OP_COUNT] = {
    "all_reduce", "reduce_scatter", "all_gather", "broadcast", "send", "recv", "all_to_all", "barrier",
};

const char *fsc_comm_op_name(fsc_comm_op op) {
    return (unsigned)op < FSC_OP_COUNT ? op_names[op] : "unknown";
}

int fsc_comm_rank(const fsc_comm *c) { return c ? c->rank : -1; }
int fsc_comm_size(const fsc_comm *c) { return c ? c->size : 0; }
const char *fsc_comm_name(const fsc_comm *c) { return c ? c->name : ""; }

void fsc_comm_set_name(fsc_comm *c, const char *name) {
    if (!c) return;
    size_t n = name ? strlen(name) : 0;
    if (n >= sizeof(c->name)) n = sizeof(c->name) - 1;
    if (n) memcpy(c->name, name, n);
    c->name[n] = '\0';
    flight_ring_rename(c->flight, c->name);
}

void fsc_comm_set_trace(fsc_comm *c, fsc_trace *t) {
    if (c) c->trace = t;
}

fsc_trace *fsc_comm_get_trace(const fsc_comm *c) { return c ? c->trace : NULL; }

const fsc_comm_stats *fsc_comm_get_stats(const fsc_comm *c) { return c ? &c->stats : NULL; }

void fsc_comm_reset_stats(fsc_comm *c) {
    if (c) memset(&c->stats, 0, sizeof(c->stats));
}

double fsc_comm_total_bytes(const fsc_comm *c) {
    double t = 0;
    if (!c) return 0;
    for (int i = 0; i < FSC_OP_COUNT; i++) t += c->stats.bytes[i];
    return t;
}

fsc_status fsc_comm_wrap(const fsc_comm_ops *ops, void *ctx, int rank, int size, const char *name,
                         fsc_comm **out) {
    if (!out) {
        if (ops && ops->abi_version == FSC_COMM_ABI_VERSION && ops->destroy) ops->destroy(ctx);
        return fsc_error(FSC_ERR_INVALID, "fsc_comm_wrap: out is NULL");
    }
    *out = NULL;
    if (!ops) return fsc_error(FSC_ERR_INVALID, "fsc_comm_wrap: ops is NULL");
    if (ops->abi_version != FSC_COMM_ABI_VERSION)
        return fsc_error(FSC_ERR_UNSUPPORTED, "communicator '%s' has interface version %d, this fsc needs %d",
                         ops->name ? ops->name : "?", ops->abi_version, FSC_COMM_ABI_VERSION);
    fsc_status s = FSC_OK;
    if (size < 1 || rank < 0 || rank >= size)
        s = fsc_error(FSC_ERR_INVALID, "fsc_comm_wrap: rank %d of size %d is out of range", rank, size);
    fsc_comm *c = s == FSC_OK ? calloc(1, sizeof(*c)) : NULL;
    if (s == FSC_OK && !c) s = fsc_error(FSC_ERR_NOMEM, "fsc_comm_wrap: out of memory");
    if (s != FSC_OK) {
        if (ops->destroy) ops->destroy(ctx);
        return s;
    }
    c->ops = ops;
    c->ctx = ctx;
    c->rank = rank;
    c->size = size;
    c->gid = FLIGHT_WORLD_GID;
    fsc_comm_set_name(c, name ? name : "comm");
    *out = c;
    return FSC_OK;
}

void fsc_comm_free(fsc_comm *c) {
    if (!c) return;
    flight_ring_detach(c->flight);
    if (c->ops && c->ops->destroy) c->ops->destroy(c->ctx);
    free(c);
}

void fsc_comm_revoke(fsc_comm *c, const char *why) {
    if (c && c->ops && c->ops->revoke) c->ops->revoke(c->ctx, why ? why : "no reason given");
}

/* ---- validation and accounting ---- */

static int is_float(fsc_dtype dt) { return dt == FSC_F32 || dt == FSC_BF16 || dt == FSC_F16; }

/* The common checks: c, the dtype, and count elements (per rank: x group size) not overflowing. */
static fsc_status check_common(const fsc_comm *c, fsc_comm_op op, size_t count, int per_rank, fsc_dtype dt) {
    const char *what = fsc_comm_op_name(op);
    if (!c) return fsc_error(FSC_ERR_INVALID, "%s: comm is NULL", what);
    size_t blocks = per_rank ? (size_t)c->size : 1;
    size_t es = fsc_dtype_size(dt);
    if (es == 0) return fsc_error(FSC_ERR_INVALID, "%s: %d is not a valid fsc_dtype", what, (int)dt);
    if (count > SIZE_MAX / es / blocks)
        return fsc_error(FSC_ERR_INVALID, "%s: %zu x %zu elements of %s overflow the address space", what, blocks,
                         count, fsc_dtype_name(dt));
    return FSC_OK;
}

static fsc_status check_redop(fsc_comm_op op, fsc_dtype dt, fsc_redop r) {
    const char *what = fsc_comm_op_name(op);
    if ((unsigned)r > FSC_MAX) return fsc_error(FSC_ERR_INVALID, "%s: %d is not a valid fsc_redop", what, (int)r);
    if (is_float(dt)) return FSC_OK;
    const int integer = dt == FSC_I32 || dt == FSC_I64;
    if (integer && r != FSC_AVG) return FSC_OK;
    if (integer)
        return fsc_error(FSC_ERR_INVALID, "%s: avg of %s is not defined; use sum and divide", what, fsc_dtype_name(dt));
    return fsc_error(FSC_ERR_INVALID, "%s: reductions take f32, bf16, f16, i32 or i64, not %s", what,
                     fsc_dtype_name(dt));
}

static fsc_status check_buf(fsc_comm_op op, const char *name, const void *p, size_t count) {
    if (!p && count > 0)
        return fsc_error(FSC_ERR_INVALID, "%s: %s is NULL with %zu elements", fsc_comm_op_name(op), name, count);
    return FSC_OK;
}

static int overlap(const void *a, size_t na, const void *b, size_t nb) {
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return na && nb && x < y + nb && y < x + na;
}

/* send (sbytes) may equal recv + at (in place) or not overlap recv (rbytes) at all. */
static fsc_status check_alias(fsc_comm_op op, const void *send, size_t sbytes, const void *recv, size_t rbytes,
                              size_t at, const char *inplace) {
    if (!overlap(send, sbytes, recv, rbytes)) return FSC_OK;
    if (inplace && (const unsigned char *)recv + at == (const unsigned char *)send) return FSC_OK;
    if (inplace)
        return fsc_error(FSC_ERR_INVALID, "%s: send overlaps recv; in place needs %s", fsc_comm_op_name(op),
                         inplace);
    return fsc_error(FSC_ERR_INVALID, "%s: send overlaps recv, which this operation does not allow",
                     fsc_comm_op_name(op));
}

static fsc_status check_rank(const fsc_comm *c, fsc_comm_op op, const char *name, int r) {
    if (r < 0 || r >= c->size)
        return fsc_error(FSC_ERR_INVALID, "%s: %s %d is out of range for comm '%s' of %d ranks",
                         fsc_comm_op_name(op), name, r, c->name, c->size);
    return FSC_OK;
}

/* When a call started, for its trace span (0 without a recorder: no clock read). */
static double started(const fsc_comm *c) { return c->trace ? fsc_trace_now_us() : 0; }

/* Count call number seq that started at t0 and returned s (and record it in the trace); prefix an
 * implementation's error with the call's number and the comm's name and rank. */
static fsc_status account(fsc_comm *c, fsc_comm_op op, double t0, fsc_status s, double bytes, uint64_t seq) {
    if (c->trace)
        fsc_trace_span(c->trace, op == FSC_OP_BARRIER ? "wait" : "comm", fsc_comm_op_name(op), t0,
                       c->size > 1 ? bytes : 0, c->name);
    if (s == FSC_OK) {
        c->stats.calls[op]++;
        c->stats.bytes[op] += c->size > 1 ? bytes : 0;
        return FSC_OK;
    }
    return fsc_error_prefix(s, "collective #%llu: %s on comm '%s' (rank %d of %d)", (unsigned long long)seq,
                            fsc_comm_op_name(op), c->name, c->rank, c->size);
}

/* (N-1)/N x bytes, as a double */
static double ring(const fsc_comm *c, size_t bytes) {
    return (double)(c->size - 1) * (double)bytes / (double)c->size;
}

/* ---- collectives ---- */

/* A synchronous collective: the checks of k, the implementation's call, and its accounting. */
static fsc_status run_checked(fsc_comm *c, const fsc_comm_call *k) {
    double bytes = 0;
    FSC_TRY(fsc_comm_check_call(c, k, &bytes));
    const double t0 = started(c);
    const uint64_t seq = ++c->seq;
    const size_t slot = flight_begin(c->flight, seq, k->op, k->count, k->dt, k->peer, 1);
    fsc_status s = fsc_comm_run_call(c, k);
    flight_end(c->flight, slot, seq, s);
    return account(c, k->op, t0, s, bytes, seq);
}

fsc_status fsc_comm_all_reduce(fsc_comm *c, const void *send, void *recv, size_t count, fsc_dtype dt,
                               fsc_redop op) {
    fsc_comm_call k = {.op = FSC_OP_ALL_REDUCE, .send = send, .recv = recv, .count = count, .dt = dt, .redop = op};
    return run_checked(c, &k);
}

fsc_status fsc_comm_reduce_scatter(fsc_comm *c, const void *send, void *recv, size_t recvcount, fsc_dtype dt,
                                   fsc_redop op) {
    fsc_comm_call k = {.op = FSC_OP_REDUCE_SCATTER, .send = send, .recv = recv, .count = recvcount, .dt = dt,
                       .redop = op};
    return run_checked(c, &k);
}

fsc_status fsc_comm_all_gather(fsc_comm *c, const void *send, void *recv, size_t sendcount, fsc_dtype dt) {
    fsc_comm_call k = {.op = FSC_OP_ALL_GATHER, .send = send, .recv = recv, .count = sendcount, .dt = dt};
    return run_checked(c, &k);
}

fsc_status fsc_comm_broadcast(fsc_comm *c, void *buf, size_t count, fsc_dtype dt, int root) {
    fsc_comm_call k = {.op = FSC_OP_BROADCAST, .send = buf, .recv = buf, .count = count, .dt = dt, .peer = root};
    return run_checked(c, &k);
}

fsc_status fsc_comm_send(fsc_comm *c, const void *buf, size_t count, fsc_dtype dt, int peer) {
    fsc_comm_call k = {.op = FSC_OP_SEND, .send = buf, .count = count, .dt = dt, .peer = peer};
    return run_checked(c, &k);
}

fsc_status fsc_comm_recv(fsc_comm *c, void *buf, size_t count, fsc_dtype dt, int peer) {
    fsc_comm_call k = {.op = FSC_OP_RECV, .recv = buf, .count = count, .dt = dt, .peer = peer};
    return run_checked(c, &k);
}

fsc_status fsc_comm_all_to_all(fsc_comm *c, const void *send, void *recv, size_t count, fsc_dtype dt) {
    fsc_comm_call k = {.op = FSC_OP_ALL_TO_ALL, .send = send, .recv = recv, .count = count, .dt = dt};
    return run_checked(c, &k);
}

fsc_status fsc_comm_barrier(fsc_comm *c) {
    if (!c) return fsc_error(FSC_ERR_INVALID, "barrier: comm is NULL");
    const double t0 = started(c);
    const uint64_t seq = ++c->seq;
    const size_t slot = flight_begin(c->flight, seq, FSC_OP_BARRIER, 0, FSC_U8, -1, 1);
    fsc_status s = c->ops->barrier(c->ctx);
    flight_end(c->flight, slot, seq, s);
    return account(c, FSC_OP_BARRIER, t0, s, 0.0, seq);
}

fsc_status fsc_comm_split(fsc_comm *c, int color, int key, fsc_comm **out) {
    if (!out) return fsc_error(FSC_ERR_INVALID, "split: out is NULL");
    *out = NULL;
    if (!c) return fsc_error(FSC_ERR_INVALID, "split: comm is NULL");
    if (color < 0) return fsc_error(FSC_ERR_INVALID, "split: color %d is negative; colors are >= 0", color);
    void *ctx = NULL;
    int rank = 0, size = 0;
    const uint64_t seq = ++c->seq;
    const size_t slot = flight_begin(c->flight, seq, FLIGHT_OP_SPLIT, 0, FSC_U8, color, 1);
    fsc_status s = c->ops->split(c->ctx, color, key, &ctx, &rank, &size);
    flight_end(c->flight, slot, seq, s);
    if (s != FSC_OK)
        return fsc_error_prefix(s, "collective #%llu: split of comm '%s' (rank %d of %d)", (unsigned long long)seq,
                                c->name, c->rank, c->size);
    char name[sizeof(c->name) + 16];
    snprintf(name, sizeof(name), "%s/%d", c->name, color);
    FSC_TRY(fsc_comm_wrap(c->ops, ctx, rank, size, name, out));
    (*out)->trace = c->trace;
    (*out)->gid = flight_child_gid(c->gid, ++c->splits, color);
    fsc_comm_set_flight(*out, flight_ring_owner(c->flight));
    return FSC_OK;
}

fsc_status fsc_comm_all_reduce_host(fsc_comm *c, fsc_device *dev, float *value, fsc_redop op) {
    FSC_CHECK_ARG_AS(c, "comm");
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(value);
    float *d;
    FSC_TRY(fsc_device_alloc(dev, FSC_TAG_COMM, sizeof(float), (void **)&d));
    fsc_status s = fsc_device_upload(dev, d, value, sizeof *value);
    if (s == FSC_OK) s = fsc_comm_all_reduce(c, d, d, 1, FSC_F32, op);
    if (s == FSC_OK) s = fsc_device_download(dev, value, d, sizeof *value);
    fsc_device_release(dev, d);
    return s;
}

#define AGREE_MSG 512

fsc_status fsc_comm_agree(fsc_comm *c, fsc_device *dev, fsc_status mine) {
    FSC_CHECK_ARG_AS(c, "comm");
    FSC_CHECK_ARG(dev);
    if ((unsigned)mine > FSC_ERR_NUMERIC) /* not a status: a failure all the same, said as the caller's bug */
        mine = fsc_error(FSC_ERR_INVALID, "fsc_comm_agree: status %d is not an fsc_status", (int)mine);
    const int N = fsc_comm_size(c), me = fsc_comm_rank(c);
    if (N == 1) return mine;
    char msg[AGREE_MSG], own[1024]; /* own: this rank's whole message (fsc_last_error's capacity) */
    snprintf(own, sizeof own, "%s", mine == FSC_OK ? "" : fsc_last_error());
    size_t k = strlen(own) < sizeof msg ? strlen(own) : sizeof msg - 1; /* what is broadcast: its first 511 */
    memcpy(msg, own, k);
    msg[k] = 0;
    /* lowest failing rank r -> N - r under MAX; 0 when every rank passed */
    float flag = mine == FSC_OK ? 0.0f : (float)(N - me);
    fsc_status s = fsc_comm_all_reduce_host(c, dev, &flag, FSC_MAX);
    /* The agreement itself failed. A rank that failed keeps its own status and message: it is the cause (MPI: the
     * call that timed out broke every communicator of the process, so this all-reduce only repeats it, behind
     * another collective's number and group), never replaced by the agreement's "unusable after an earlier
     * failure". */
    if (s != FSC_OK) return mine == FSC_OK ? s : fsc_error(mine, "%s", own);
    int root = flag > 0 ? N - (int)flag : -1;
    if (root < 0) return FSC_OK;
    /* the failing rank's status and message to everyone */
    int32_t code = (int32_t)mine;
    uint8_t *d = NULL;
    s = fsc_device_alloc(dev, FSC_TAG_COMM, AGREE_MSG + sizeof code, (void **)&d);
    if (s == FSC_OK && me == root) {
        s = fsc_device_upload(dev, d, &code, sizeof code);
        if (s == FSC_OK) s = fsc_device_upload(dev, d + sizeof code, msg, AGREE_MSG);
    }
    if (s == FSC_OK) s = fsc_comm_broadcast(c, d, AGREE_MSG + sizeof code, FSC_U8, root);
    if (s == FSC_OK && me != root) {
        s = fsc_device_download(dev, &code, d, sizeof code);
        if (s == FSC_OK) s = fsc_device_download(dev, msg, d + sizeof code, AGREE_MSG);
        msg[AGREE_MSG - 1] = 0;
    }
    fsc_device_release(dev, d);
    if (s != FSC_OK) return s;
    if (me == root) return fsc_error(mine, "%s", msg);
    if (code <= FSC_OK || code > FSC_ERR_NUMERIC) code = FSC_ERR_INTERNAL;
    /* the failing rank named once, whatever it was passed on from */
    fsc_error((fsc_status)code, "%s", msg);
    if (strcmp(c->name, "world") == 0) return fsc_error_rank((fsc_status)code, "rank %d", root);
    return fsc_error_rank((fsc_status)code, "rank %d of the '%s' group", root, c->name);
}

/* ---- the checks, dispatch and accounting of a call (the synchronous calls above, comm_async.c) ---- */

fsc_status fsc_comm_check_call(const fsc_comm *c, const fsc_comm_call *k, double *bytes) {
    const fsc_comm_op o = k->op;
    *bytes = 0;
    if (!c) return fsc_error(FSC_ERR_INVALID, "%s: comm is NULL", fsc_comm_op_name(o));
    const int blocks = o == FSC_OP_REDUCE_SCATTER || o == FSC_OP_ALL_GATHER || o == FSC_OP_ALL_TO_ALL;
    FSC_TRY(check_common(c, o, k->count, blocks, k->dt));
    size_t bytes1 = k->count * fsc_dtype_size(k->dt), full = bytes1 * (size_t)c->size;
    switch (o) {
    case FSC_OP_ALL_REDUCE:
        FSC_TRY(check_redop(o, k->dt, k->redop));
        FSC_TRY(check_buf(o, "send", k->send, k->count));
        FSC_TRY(check_buf(o, "recv", k->recv, k->count));
        FSC_TRY(check_alias(o, k->send, bytes1, k->recv, bytes1, 0, "send == recv"));
        *bytes = 2.0 * ring(c, bytes1);
        return FSC_OK;
    case FSC_OP_REDUCE_SCATTER:
        FSC_TRY(check_redop(o, k->dt, k->redop));
        FSC_TRY(check_buf(o, "send", k->send, k->count));
        FSC_TRY(check_buf(o, "recv", k->recv, k->count));
        if (overlap(k->send, full, k->recv, bytes1) &&
            (const unsigned char *)k->send + (size_t)c->rank * bytes1 != k->recv)
            return fsc_error(FSC_ERR_INVALID, "reduce_scatter: send overlaps recv; in place needs recv == send + "
                                              "rank x recvcount");
        *bytes = ring(c, full);
        return FSC_OK;
    case FSC_OP_ALL_GATHER:
        FSC_TRY(check_buf(o, "send", k->send, k->count));
        FSC_TRY(check_buf(o, "recv", k->recv, k->count));
        FSC_TRY(check_alias(o, k->send, bytes1, k->recv, full, (size_t)c->rank * bytes1,
                            "send == recv + rank x sendcount"));
        *bytes = ring(c, full);
        return FSC_OK;
    case FSC_OP_BROADCAST:
        FSC_TRY(check_buf(o, "buf", k->recv, k->count));
        FSC_TRY(check_rank(c, o, "root", k->peer));
        *bytes = (double)bytes1;
        return FSC_OK;
    case FSC_OP_SEND:
    case FSC_OP_RECV:
        FSC_TRY(check_buf(o, "buf", o == FSC_OP_SEND ? k->send : k->recv, k->count));
        FSC_TRY(check_rank(c, o, "peer", k->peer));
        *bytes = k->peer == c->rank ? 0.0 : (double)bytes1;
        return FSC_OK;
    case FSC_OP_ALL_TO_ALL:
        FSC_TRY(check_buf(o, "send", k->send, k->count));
        FSC_TRY(check_buf(o, "recv", k->recv, k->count));
        FSC_TRY(check_alias(o, k->send, full, k->recv, full, 0, NULL));
        *bytes = ring(c, full);
        return FSC_OK;
    default: return fsc_error(FSC_ERR_INVALID, "%s cannot be started asynchronously", fsc_comm_op_name(o));
    }
}

fsc_status fsc_comm_account_call(fsc_comm *c, fsc_comm_op op, double t0, fsc_status s, double bytes, uint64_t seq) {
    return account(c, op, t0, s, bytes, seq);
}

fsc_status fsc_comm_run_call(fsc_comm *c, const fsc_comm_call *k) {
    const fsc_comm_ops *o = c->ops;
    switch (k->op) {
    case FSC_OP_ALL_REDUCE: return o->all_reduce(c->ctx, k->send, k->recv, k->count, k->dt, k->redop);
    case FSC_OP_REDUCE_SCATTER: return o->reduce_scatter(c->ctx, k->send, k->recv, k->count, k->dt, k->redop);
    case FSC_OP_ALL_GATHER: return o->all_gather(c->ctx, k->send, k->recv, k->count, k->dt);
    case FSC_OP_BROADCAST: return o->broadcast(c->ctx, k->recv, k->count, k->dt, k->peer);
    case FSC_OP_SEND: return o->send(c->ctx, k->send, k->count, k->dt, k->peer);
    case FSC_OP_RECV: return o->recv(c->ctx, k->recv, k->count, k->dt, k->peer);
    case FSC_OP_ALL_TO_ALL: return o->all_to_all(c->ctx, k->send, k->recv, k->count, k->dt);
    default: return fsc_error(FSC_ERR_INTERNAL, "%s is not a call the table runs", fsc_comm_op_name(k->op));
    }
}
