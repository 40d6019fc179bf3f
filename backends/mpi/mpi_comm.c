/* The MPI communicator (fsc/plugin/comm_ops.h): one process per rank on host memory (the cpu device), on one
 * or many machines, built as the plug-in libfsc_mpi.so so that programs that do not use it never link MPI.
 * The launcher (lib/core/launch.c) loads it with dlopen and calls fsc_mpi_comm_open.
 *
 * Two reduction modes:
 * - ordered (the default) gives the simulated communicator's bits (sim/sim_comm.c): a reduce-scatter is an
 *   all-to-all exchange of blocks (each rank sends (N-1)/N of its buffer, as a ring would) followed by a
 *   local sum in rank order, acc = x[rank 0]; acc += x[rank 1]; ... in f32 (bf16/f16 widened, rounded once
 *   at the end, RNE; AVG divides the f32 sum by N; MAX keeps NaN; i32 and i64 sums wrap); an all-reduce is that on
 *   chunks of ceil(count / N) elements plus an all-gather. Element i is the same sequence of operations
 *   either way, as in the simulator.
 * - native uses MPI_Iallreduce / MPI_Ireduce_scatter_block (MPI's own order: deterministic for one
 *   configuration, not the simulator's bits). i64 sums (exact.h) run natively in both modes: integer sums give
 *   the same bits in any order.
 * Everything else is point-to-point (MPI_Isend, and MPI_Improbe/MPI_Imrecv so that a receive is posted only
 * once its message has shown its length, on a communicator of its own, one tag for collectives, another for
 * send/recv, which MPI keeps in order per peer). Send is buffered like the
 * simulator's: the message is copied and sent in the background, so neighbours that send to each other at
 * once never deadlock.
 *
 * No hangs. Open MPI's default error handler kills the job on any error; here every communicator returns
 * errors instead (MPI_ERRORS_RETURN), and every wait is a polling loop (MPI_Testall, then a short sleep)
 * with a deadline of timeout_s: a peer that died or stopped answering fails the call with FSC_ERR_TIMEOUT
 * naming the rank whose data did not come. MPI cannot cancel what is under way, so after a failure the
 * communicator (and every group split from it) is marked broken: later calls fail at once, and MPI_Finalize
 * is skipped so the process can exit (mpirun then ends the job's other processes). A process that is killed
 * is noticed by mpirun itself, which terminates the job. MPI_Comm_split has no timeout: split first
 * exchanges (color, key) point to point with one, so a dead rank fails there, not inside MPI. A rank that gives up
 * on a communicator (revoke) sends the others a notice that their waits poll for, so they fail at once; they poll
 * only on communicators that have carried sends or receives (the library revokes only the pipeline's links), so a
 * collective on another communicator whose rank gave up waits for its timeout.
 * Not here: which launcher started the job (launch.c), staging from device memory (cpu buffers only). */
#include <math.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "fsc/plugin/comm_ops.h"
#include "mpi_async.h"

#define MP_EXPORT __attribute__((visibility("default")))
#define TAG_COLL 11
#define TAG_P2P 12
#define TAG_REVOKE 13 /* a rank's notice that it gave up on the communicator (fsc_comm_ops.revoke): its reason */
enum { REVOKE_CAP = 600 }; /* bytes of a notice, its NUL included */
#define CHUNK ((size_t)1 << 30) /* bytes per MPI message (counts are int) */
enum { TILE = 256 };

typedef unsigned char u8;

static fsc_mpi_error_fn host_error; /* the core's fsc_error, handed over at open (one per process, like the core) */

static _Thread_local char last_msg[1000]; /* the last message, repeated once a communicator breaks */

static fsc_status mp_err(fsc_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_msg, sizeof last_msg, fmt, ap);
    va_end(ap);
    if (host_error) host_error(s, "%s", last_msg);
    return s;
}

fsc_status mp_host_error(fsc_status s, const char *msg) { return mp_err(s, "%s", msg); }
const char *mp_last_msg(void) { return last_msg; }

/* What every communicator of the process shares. */
typedef struct {
    int refs;
    atomic_int broken; /* a call failed in a way MPI cannot undo: every call fails, MPI_Finalize is skipped; set
                        * (release) after why is written, by the one thread that claimed it (claim) */
    atomic_int claim;  /* 1 once a thread has taken the right to write why */
    int initialized; /* this plug-in called MPI_Init_thread */
    double timeout_s;
    int native;      /* reductions with MPI's own algorithms */
    char why[1024];  /* the failure that broke it, repeated by every later call */
} mp_shared;

/* A send still under way (buffered send). */
typedef struct mp_pending {
    struct mp_pending *next;
    int peer, nreq;
    MPI_Request *req;
    u8 *data;
} mp_pending;

/* One message of the call under way: a send (posted at once), or a receive awaited until its message has
 * come and shown its length (then posted into buf). */
enum { SEND = 0, AWAITED, RECEIVING };
typedef struct {
    u8 *buf;
    size_t want;      /* bytes */
    int peer, tag, kind;
    int prev;         /* the receive from the same peer posted before it in this call, or -1 */
} mp_slot;

typedef struct {
    MPI_Comm comm;
    int rank, size;
    mp_shared *sh;
    MPI_Request *req; /* (cap) requests of the call under way; MPI_REQUEST_NULL for a receive still awaited */
    mp_slot *slot;    /* (cap) what each is */
    MPI_Status *st;
    int nreq, cap;
    int *last_recv;   /* (size) the newest receive slot from each peer (valid if < nreq and from that peer) */
    int *world_rank;  /* (size) each rank's rank in MPI_COMM_WORLD, what mpirun and the other messages call it */
    int world;        /* MPI_COMM_WORLD's size */
    u8 *tmp;          /* scratch: received blocks, widened floats */
    size_t tmp_cap;
    mp_pending *pending;
    mp_async *async;  /* started calls' progress thread (mpi_async.c), NULL until the first start */
    atomic_int revoked;          /* a rank of this communicator gave up on it: every call fails at once, naming it;
                                  * set (release) after revoke_why is written, under the plug-in lock */
    char revoke_why[REVOKE_CAP]; /* "world rank R gave up on the group: why" */
    int p2p;                     /* a send or receive ran on it: only then does gave_up look for another rank's
                                  * notice (the library gives up only on point-to-point streams: pipeline links) */
} mp_ctx;

/* ---- f32 <-> bf16/f16, exactly as lib/core/dtype.c (the plug-in cannot call into the core) ---- */

static inline uint32_t f2u(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
static inline float u2f(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }

static uint16_t to_bf16(float x) {
    uint32_t u = f2u(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static uint16_t to_f16(float x) {
    uint32_t u = f2u(x);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
    if (a >= 0x38800000u) {
        uint32_t r = a - 0x38000000u;
        r += 0x0fffu + ((r >> 13) & 1u);
        return (uint16_t)(sign | (r >> 13));
    }
    uint32_t e = a >> 23;
    if (e < 102) return sign;
    uint32_t m = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e;
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return (uint16_t)(sign | q);
}

static float from_f16(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {
        float v = ldexpf((float)m, -24);
        return sign ? -v : v;
    }
    if (e == 31) return u2f(sign | 0x7f800000u | (m << 13));
    return u2f(sign | ((e + 112) << 23) | (m << 13));
}

static size_t dt_size(fsc_dtype dt) {
    return dt == FSC_I64 ? 8 : dt == FSC_F32 || dt == FSC_I32 ? 4 : dt == FSC_BF16 || dt == FSC_F16 ? 2 : 1;
}

static void widen(float *dst, const void *src, fsc_dtype dt, size_t n) {
    const uint16_t *h = src;
    if (dt == FSC_F32) memcpy(dst, src, n * sizeof(float));
    else if (dt == FSC_BF16)
        for (size_t i = 0; i < n; i++) dst[i] = u2f((uint32_t)h[i] << 16);
    else
        for (size_t i = 0; i < n; i++) dst[i] = from_f16(h[i]);
}

static void narrow(void *dst, fsc_dtype dt, const float *src, size_t n) {
    uint16_t *h = dst;
    if (dt == FSC_F32) memcpy(dst, src, n * sizeof(float));
    else if (dt == FSC_BF16)
        for (size_t i = 0; i < n; i++) h[i] = to_bf16(src[i]);
    else
        for (size_t i = 0; i < n; i++) h[i] = to_f16(src[i]);
}

/* ---- the reduction of sim_comm.c: dst[0..n) = op over ranks, in rank order, of src[j][0..n) ---- */

/* i64, the exact reductions' fixed point: wrapping sums (associative, so any order gives these bits) and maxima,
 * tile by tile (dst may be one of src: in place) */
static void reduce_i64(int64_t *dst, const void *const *src, int N, size_t n, fsc_redop op) {
    int64_t acc[TILE];
    for (size_t t = 0; N > 0 && t < n; t += TILE) {
        size_t m = n - t < TILE ? n - t : TILE;
        memcpy(acc, (const int64_t *)src[0] + t, m * sizeof(int64_t));
        for (int j = 1; j < N; j++) {
            const int64_t *y = (const int64_t *)src[j] + t;
            if (op == FSC_MAX) {
                for (size_t i = 0; i < m; i++) acc[i] = y[i] > acc[i] ? y[i] : acc[i];
            } else {
                for (size_t i = 0; i < m; i++) acc[i] = (int64_t)((uint64_t)acc[i] + (uint64_t)y[i]);
            }
        }
        memcpy(dst + t, acc, m * sizeof(int64_t));
    }
}

static void reduce_rank_order(void *dst, const void *const *src, int N, size_t n, fsc_dtype dt, fsc_redop op) {
    const size_t es = dt_size(dt);
    if (dt == FSC_I64) {
        reduce_i64(dst, src, N, n, op);
        return;
    }
    float acc[TILE], x[TILE];
    int32_t iacc[TILE];
    for (size_t t = 0; t < n; t += TILE) {
        size_t m = n - t < TILE ? n - t : TILE;
        if (dt == FSC_I32) {
            memcpy(iacc, (const int32_t *)src[0] + t, m * sizeof(int32_t));
            for (int j = 1; j < N; j++) {
                const int32_t *y = (const int32_t *)src[j] + t;
                if (op == FSC_MAX) {
                    for (size_t i = 0; i < m; i++) iacc[i] = y[i] > iacc[i] ? y[i] : iacc[i];
                } else {
                    for (size_t i = 0; i < m; i++) iacc[i] = (int32_t)((uint32_t)iacc[i] + (uint32_t)y[i]);
                }
            }
            memcpy((int32_t *)dst + t, iacc, m * sizeof(int32_t));
            continue;
        }
        widen(acc, (const u8 *)src[0] + t * es, dt, m);
        for (int j = 1; j < N; j++) {
            widen(x, (const u8 *)src[j] + t * es, dt, m);
            if (op == FSC_MAX) {
                for (size_t i = 0; i < m; i++)
                    if (isnan(x[i]) || x[i] > acc[i]) acc[i] = isnan(acc[i]) ? acc[i] : x[i];
            } else {
                for (size_t i = 0; i < m; i++) acc[i] += x[i];
            }
        }
        if (op == FSC_AVG)
            for (size_t i = 0; i < m; i++) acc[i] /= (float)N;
        narrow((u8 *)dst + t * es, dt, acc, m);
    }
}

/* ---- requests and the deadline ---- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void nap(long ns) {
    struct timespec ts = {0, ns};
    nanosleep(&ts, NULL);
}

static const char *mpi_msg(int code, char *buf) {
    int len = 0;
    if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) snprintf(buf, MPI_MAX_ERROR_STRING, "MPI error %d", code);
    return buf;
}

/* A peer as messages name it: its rank in this communicator, and its world rank where that differs (a split's
 * group), as the simulator's labels do: "rank 0 (world rank 1)". */
static const char *peer_label(const mp_ctx *m, int peer, char *buf, size_t cap) {
    if (peer < 0 || peer >= m->size || m->size == m->world || m->world_rank[peer] == peer)
        snprintf(buf, cap, "rank %d", peer);
    else
        snprintf(buf, cap, "rank %d (world rank %d)", peer, m->world_rank[peer]);
    return buf;
}

/* The failure s, whose message mp_err just set on this thread, left MPI in a state that cannot be undone: mark
 * the communicator broken and keep the message, which every later call repeats, on whichever thread makes it
 * (a started call fails on its communicator's progress thread, mpi_async.c). */
static void mark_broken(mp_shared *sh, const char *why) {
    if (atomic_exchange(&sh->claim, 1) == 0) { /* the first failure's message, written once */
        snprintf(sh->why, sizeof sh->why, "%s", why);
        atomic_store_explicit(&sh->broken, 1, memory_order_release);
    }
}

static fsc_status breaks(mp_ctx *m, fsc_status s) {
    mark_broken(m->sh, last_msg);
    return s;
}

static fsc_status broken(mp_ctx *m, const char *what) {
    return mp_err(FSC_ERR_COMM, "%s: the MPI communicator is unusable after an earlier failure: %s", what,
                  m->sh->why[0] ? m->sh->why : "(its message was lost)");
}

static fsc_status grow_req(mp_ctx *m, int need) {
    if (need <= m->cap) return FSC_OK;
    int cap = m->cap ? m->cap : 16;
    while (cap < need) cap *= 2;
    MPI_Request *r = realloc(m->req, (size_t)cap * sizeof *r);
    if (r) m->req = r;
    mp_slot *k = realloc(m->slot, (size_t)cap * sizeof *k);
    if (k) m->slot = k;
    MPI_Status *s = realloc(m->st, (size_t)cap * sizeof *s);
    if (s) m->st = s;
    if (!r || !k || !s) return mp_err(FSC_ERR_NOMEM, "mpi: out of memory for %d requests", need);
    m->cap = cap;
    return FSC_OK;
}

/* The call's one request, an MPI collective (native reductions): the caller posts it into m->req[0]. */
static void one_collective(mp_ctx *m) {
    m->slot[0] = (mp_slot){.peer = -1, .kind = SEND, .prev = -1};
    m->nreq = 1;
}

/* Post a nonblocking send of bytes to peer, or add a receive of bytes from it (awaited: wait_posted posts it
 * once its message has come), in messages of at most CHUNK bytes. A call that fails here is half posted, so
 * the failure breaks the communicator. */
static fsc_status post(mp_ctx *m, const char *what, int recv, const void *buf, size_t bytes, int peer, int tag) {
    for (size_t off = 0; off < bytes; off += CHUNK) {
        size_t len = bytes - off < CHUNK ? bytes - off : CHUNK;
        if (grow_req(m, m->nreq + 1) != FSC_OK) return breaks(m, FSC_ERR_NOMEM);
        const int i = m->nreq;
        mp_slot *k = &m->slot[i];
        *k = (mp_slot){.buf = (u8 *)buf + off, .want = len, .peer = peer, .tag = tag, .kind = recv ? AWAITED : SEND,
                       .prev = -1};
        m->req[i] = MPI_REQUEST_NULL;
        if (recv) {
            const int j = m->last_recv[peer];
            if (j >= 0 && j < i && m->slot[j].kind != SEND && m->slot[j].peer == peer) k->prev = j;
            m->last_recv[peer] = i;
        } else {
            int rc = MPI_Isend(k->buf, (int)len, MPI_BYTE, peer, tag, m->comm, &m->req[i]);
            if (rc != MPI_SUCCESS) {
                char e[MPI_MAX_ERROR_STRING], lab[64];
                return breaks(m, mp_err(FSC_ERR_COMM, "%s: MPI could not send to %s: %s", what,
                                        peer_label(m, peer, lab, sizeof lab), mpi_msg(rc, e)));
            }
        }
        m->nreq++;
    }
    return FSC_OK;
}

/* Progress the background sends; free those done. A failed one breaks the communicator. */
static fsc_status reap(mp_ctx *m, const char *what) {
    for (mp_pending **p = &m->pending; *p;) {
        int done = 0;
        int rc = MPI_Testall((*p)->nreq, (*p)->req, &done, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) {
            char e[MPI_MAX_ERROR_STRING], lab[64];
            return breaks(m, mp_err(FSC_ERR_COMM, "%s: an earlier send to %s failed: %s", what,
                                    peer_label(m, (*p)->peer, lab, sizeof lab), mpi_msg(rc, e)));
        }
        if (!done) {
            p = &(*p)->next;
            continue;
        }
        mp_pending *d = *p;
        *p = d->next;
        free(d->req);
        free(d->data);
        free(d);
    }
    return FSC_OK;
}

/* Post the awaited receives whose messages have come (*awaited: how many still have none). MPI_Improbe shows a
 * message's length before anything is written: one of another length (the ranks are in different calls) fails
 * the call and is never received. Posting receives at once and letting MPI report MPI_ERR_TRUNCATE is not
 * enough: Open MPI's shared-memory single copy (vader's CMA get, Open MPI 4.1) writes a longer message past
 * the end of the receive's buffer. A peer's messages come in the order it sent them, so a receive waits for
 * the one before it from the same peer. */
static fsc_status match_arrived(mp_ctx *m, const char *what, int *awaited) {
    *awaited = 0;
    for (int i = 0; i < m->nreq; i++) {
        mp_slot *k = &m->slot[i];
        if (k->kind != AWAITED) continue;
        int flag = 0, got = 0, rc = MPI_SUCCESS;
        MPI_Message msg = MPI_MESSAGE_NULL;
        MPI_Status st;
        if (k->prev < 0 || m->slot[k->prev].kind != AWAITED)
            rc = MPI_Improbe(k->peer, k->tag, m->comm, &flag, &msg, &st);
        if (rc == MPI_SUCCESS && flag) rc = MPI_Get_count(&st, MPI_BYTE, &got);
        char lab[64];
        if (rc == MPI_SUCCESS && flag && (size_t)got != k->want)
            return breaks(m, mp_err(FSC_ERR_COMM, "%s: %s sent %d bytes where this rank expects %zu (the ranks "
                                    "made different calls)", what, peer_label(m, k->peer, lab, sizeof lab), got,
                                    k->want));
        if (rc == MPI_SUCCESS && flag) rc = MPI_Imrecv(k->buf, (int)k->want, MPI_BYTE, &msg, &m->req[i]);
        if (rc != MPI_SUCCESS) {
            char e[MPI_MAX_ERROR_STRING];
            return breaks(m, mp_err(FSC_ERR_COMM, "%s: MPI could not receive from %s: %s", what,
                                    peer_label(m, k->peer, lab, sizeof lab), mpi_msg(rc, e)));
        }
        if (flag) k->kind = RECEIVING;
        else (*awaited)++;
    }
    return FSC_OK;
}

/* The peer a timed-out call waits for: the first receive without its data, else the first unfinished send; -1
 * for an MPI collective (a native reduction: no one peer), -2 when nothing is unfinished any more. */
static int waited_for(mp_ctx *m) {
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < m->nreq; i++) {
            int flag = 0; /* an awaited receive has no request yet: its message has not come */
            if (m->slot[i].kind != AWAITED) MPI_Request_get_status(m->req[i], &flag, MPI_STATUS_IGNORE);
            if (!flag && (pass == 1 || m->slot[i].kind != SEND)) return m->slot[i].peer;
        }
    return -2;
}

/* A call on a communicator a rank gave up on (fsc_comm_ops.revoke): it fails naming that rank and why. */
static fsc_status revoked(mp_ctx *m, const char *what) {
    return mp_err(FSC_ERR_COMM, "%s: %s", what, m->revoke_why);
}

/* Under the lock: whether a rank gave up on this communicator, this one (revoked set) or another (its notice,
 * TAG_REVOKE, has come: taken, and the communicator marked revoked). */
static int gave_up(mp_ctx *m) {
    if (atomic_load_explicit(&m->revoked, memory_order_acquire)) return 1;
    if (!m->p2p) return 0; /* no probe on a collective-only communicator's calls: the world's, the data groups' */
    int flag = 0, len = 0;
    MPI_Status st;
    if (MPI_Iprobe(MPI_ANY_SOURCE, TAG_REVOKE, m->comm, &flag, &st) != MPI_SUCCESS || !flag) return 0;
    char note[REVOKE_CAP];
    MPI_Get_count(&st, MPI_CHAR, &len);
    if (len < 1 || len > REVOKE_CAP ||
        MPI_Recv(note, len, MPI_CHAR, st.MPI_SOURCE, TAG_REVOKE, m->comm, MPI_STATUS_IGNORE) != MPI_SUCCESS)
        snprintf(note, sizeof note, "rank %d gave up on the group", st.MPI_SOURCE);
    note[REVOKE_CAP - 1] = '\0';
    snprintf(m->revoke_why, sizeof m->revoke_why, "%s", note);
    atomic_store_explicit(&m->revoked, 1, memory_order_release);
    return 1;
}

/* A call that a revoke stopped: what it posted to MPI and not finished (a send from the caller's buffer, a receive
 * into it) cannot be cancelled, so then the communicators break, as after a timeout; receives still awaited were
 * never posted, and nothing breaks. */
static fsc_status stopped_by_revoke(mp_ctx *m, const char *what) {
    fsc_status s = revoked(m, what);
    for (int i = 0; i < m->nreq; i++) {
        int done = 1;
        if (m->slot[i].kind != AWAITED) MPI_Request_get_status(m->req[i], &done, MPI_STATUS_IGNORE);
        if (!done) return breaks(m, s);
    }
    return s;
}

/* Wait for every posted request, at most timeout_s; on failure name the peer whose data did not come. */
static fsc_status wait_posted(mp_ctx *m, const char *what) {
    const double deadline = now_s() + m->sh->timeout_s;
    long sleep_ns = 0;
    int spins = 0;
    fsc_status s = FSC_OK;
    for (;;) {
        int done = 0, awaited = 0;
        if (m->sh->broken) { /* another thread's call failed meanwhile: MPI makes no more progress for anyone */
            s = broken(m, what);
            break;
        }
        if (gave_up(m)) { /* a rank gave up on the communicator: no message it owes will come */
            s = stopped_by_revoke(m, what);
            break;
        }
        s = match_arrived(m, what, &awaited);
        if (s != FSC_OK) break;
        int rc = m->nreq ? MPI_Testall(m->nreq, m->req, &done, m->st) : (done = 1, MPI_SUCCESS);
        if (rc != MPI_SUCCESS) {
            int who = -1, code = rc;
            for (int i = 0; rc == MPI_ERR_IN_STATUS && i < m->nreq && who < 0; i++)
                if (m->st[i].MPI_ERROR != MPI_SUCCESS && m->st[i].MPI_ERROR != MPI_ERR_PENDING)
                    who = m->slot[i].peer, code = m->st[i].MPI_ERROR;
            char e[MPI_MAX_ERROR_STRING], lab[64];
            s = who >= 0 ? mp_err(FSC_ERR_COMM, "%s: exchange with %s failed: %s (did it die?)", what,
                                  peer_label(m, who, lab, sizeof lab), mpi_msg(code, e))
                         : mp_err(FSC_ERR_COMM, "%s: MPI failed: %s (did a rank die?)", what, mpi_msg(code, e));
            s = breaks(m, s);
            break;
        }
        if (done && !awaited) break;
        const int who = now_s() > deadline ? waited_for(m) : -2;
        if (who >= 0) { /* (-2, none: everything came since the test above, as for a rank resumed after the deadline) */
            char lab[64];
            s = breaks(m, mp_err(FSC_ERR_TIMEOUT, "%s timed out after %g s waiting for %s (it died, stopped "
                                 "answering or is in another call); the communicator is now unusable", what,
                                 m->sh->timeout_s, peer_label(m, who, lab, sizeof lab)));
            break;
        }
        if (who == -1) { /* an MPI collective of its own (native): it waited for them all, so it can name none */
            s = breaks(m, mp_err(FSC_ERR_TIMEOUT, "%s timed out after %g s in MPI's own collective (a rank died, "
                                 "stopped answering or is in another call: --reduce must be the same everywhere); "
                                 "the communicator is now unusable", what, m->sh->timeout_s));
            break;
        }
        /* spin briefly (latency), then sleep in growing naps (ranks may share cores) */
        if (++spins > 64) {
            sleep_ns = sleep_ns ? (sleep_ns * 2 > 500000 ? 500000 : sleep_ns * 2) : 2000;
            mp_unlock(); /* let another thread post meanwhile (mpi_async.h) */
            nap(sleep_ns);
            mp_lock();
        }
    }
    m->nreq = 0;
    return s;
}

static fsc_status enter(mp_ctx *m, const char *what) {
    if (m->sh->broken) return broken(m, what);
    m->nreq = 0;
    if (gave_up(m)) return revoked(m, what);
    return reap(m, what);
}

static fsc_status scratch(mp_ctx *m, size_t bytes, u8 **out) {
    if (bytes > m->tmp_cap) {
        u8 *t = realloc(m->tmp, bytes);
        if (!t) return mp_err(FSC_ERR_NOMEM, "mpi: out of memory for %zu bytes of scratch", bytes);
        m->tmp = t;
        m->tmp_cap = bytes;
    }
    *out = m->tmp;
    return FSC_OK;
}

/* ---- ordered reductions ---- */

static size_t clampz(size_t x, size_t n) { return x < n ? x : n; }

/* acc := reduction in rank order of elements [lo, lo+n) of every rank's send (count elements each):
 * every rank sends rank j the elements of j's range and receives its own range from every rank. */
static fsc_status ordered_part(mp_ctx *m, const char *what, const void *send, size_t count, size_t chunk,
                               fsc_dtype dt, fsc_redop op, void *out) {
    const int N = m->size, me = m->rank;
    const size_t es = dt_size(dt);
    const size_t lo = clampz((size_t)me * chunk, count), n = clampz(lo + chunk, count) - lo;
    u8 *tmp = NULL;
    FSC_TRY(scratch(m, (size_t)N * n * es + 1, &tmp));
    for (int j = 0; j < N; j++) {
        if (j == me) continue;
        size_t jlo = clampz((size_t)j * chunk, count), jn = clampz(jlo + chunk, count) - jlo;
        FSC_TRY(post(m, what, 1, tmp + (size_t)j * n * es, n * es, j, TAG_COLL));
        FSC_TRY(post(m, what, 0, (const u8 *)send + jlo * es, jn * es, j, TAG_COLL));
    }
    FSC_TRY(wait_posted(m, what));
    const void *src[1024];
    const void **srcp = N <= 1024 ? src : malloc((size_t)N * sizeof *srcp);
    if (!srcp) return mp_err(FSC_ERR_NOMEM, "%s: out of memory", what);
    for (int j = 0; j < N; j++) srcp[j] = j == me ? (const u8 *)send + lo * es : tmp + (size_t)j * n * es;
    reduce_rank_order(out, srcp, N, n, dt, op);
    if (srcp != src) free(srcp);
    return FSC_OK;
}

/* ---- native reductions (MPI's algorithms), f32, i32 and i64 on the wire ---- */

static fsc_status mpi_call(mp_ctx *m, const char *what, int rc) {
    if (rc == MPI_SUCCESS) return FSC_OK;
    char e[MPI_MAX_ERROR_STRING];
    return breaks(m, mp_err(FSC_ERR_COMM, "%s: %s", what, mpi_msg(rc, e)));
}

static fsc_status native_all_reduce(mp_ctx *m, const void *send, void *recv, size_t count, fsc_dtype dt,
                                    fsc_redop op) {
    const char *what = "all_reduce";
    MPI_Op mop = op == FSC_MAX ? MPI_MAX : MPI_SUM;
    if (count > (size_t)INT32_MAX) return mp_err(FSC_ERR_UNSUPPORTED, "%s: native reductions of more than 2^31 "
                                                 "elements are not supported (use --reduce ordered)", what);
    if (dt == FSC_I32 || dt == FSC_I64) {
        FSC_TRY(mpi_call(m, what, MPI_Iallreduce(send == recv ? MPI_IN_PLACE : send, recv, (int)count,
                                                 dt == FSC_I64 ? MPI_INT64_T : MPI_INT32_T, mop, m->comm,
                                                 &m->req[0])));
        one_collective(m);
        return wait_posted(m, what);
    }
    float *f = recv;
    if (dt != FSC_F32) {
        u8 *t = NULL;
        FSC_TRY(scratch(m, count * sizeof(float), &t));
        f = (float *)t;
        widen(f, send, dt, count);
    } else if (send != recv) {
        memcpy(recv, send, count * sizeof(float));
    }
    FSC_TRY(mpi_call(m, what, MPI_Iallreduce(MPI_IN_PLACE, f, (int)count, MPI_FLOAT, mop, m->comm, &m->req[0])));
    one_collective(m);
    FSC_TRY(wait_posted(m, what));
    if (op == FSC_AVG)
        for (size_t i = 0; i < count; i++) f[i] /= (float)m->size;
    if (dt != FSC_F32) narrow(recv, dt, f, count);
    return FSC_OK;
}

static fsc_status native_reduce_scatter(mp_ctx *m, const void *send, void *recv, size_t rc, fsc_dtype dt,
                                        fsc_redop op) {
    const char *what = "reduce_scatter";
    MPI_Op mop = op == FSC_MAX ? MPI_MAX : MPI_SUM;
    const size_t total = rc * (size_t)m->size;
    if (total > (size_t)INT32_MAX) return mp_err(FSC_ERR_UNSUPPORTED, "%s: native reductions of more than 2^31 "
                                                 "elements are not supported (use --reduce ordered)", what);
    /* MPI's in-place form differs from ours: always reduce from a copy of the input */
    u8 *t = NULL;
    const int integer = dt == FSC_I32 || dt == FSC_I64;
    size_t ib = dt == FSC_I64 ? 8 : 4, in_bytes = total * ib; /* i64, i32 or f32 */
    FSC_TRY(scratch(m, in_bytes + rc * ib, &t));
    if (integer || dt == FSC_F32) memcpy(t, send, in_bytes);
    else widen((float *)t, send, dt, total);
    u8 *out = t + in_bytes;
    MPI_Datatype mt = dt == FSC_I64 ? MPI_INT64_T : dt == FSC_I32 ? MPI_INT32_T : MPI_FLOAT;
    FSC_TRY(mpi_call(m, what, MPI_Ireduce_scatter_block(t, out, (int)rc, mt, mop, m->comm, &m->req[0])));
    one_collective(m);
    FSC_TRY(wait_posted(m, what));
    if (integer) {
        memcpy(recv, out, rc * ib);
        return FSC_OK;
    }
    float *f = (float *)out;
    if (op == FSC_AVG)
        for (size_t i = 0; i < rc; i++) f[i] /= (float)m->size;
    narrow(recv, dt, f, rc);
    return FSC_OK;
}

/* ---- the table ---- */

/* i64 (the exact reductions' fixed point) sums are associative: MPI's own algorithms give the rank-order bits, so
 * they run natively in either mode (up to MPI's int count). */
static int native_i64(fsc_dtype dt, size_t count) { return dt == FSC_I64 && count <= (size_t)INT32_MAX; }

static fsc_status mp_all_reduce(void *ctx, const void *send, void *recv, size_t count, fsc_dtype dt, fsc_redop op) {
    mp_ctx *m = ctx;
    FSC_TRY(enter(m, "all_reduce"));
    if (m->sh->native || native_i64(dt, count)) {
        FSC_TRY(grow_req(m, 1));
        return native_all_reduce(m, send, recv, count, dt, op);
    }
    const int N = m->size, me = m->rank;
    const size_t es = dt_size(dt), chunk = (count + (size_t)N - 1) / (size_t)N;
    const size_t lo = clampz((size_t)me * chunk, count), n = clampz(lo + chunk, count) - lo;
    /* the reduced range goes to the scratch's tail, then into recv once every rank has its inputs */
    u8 *part = malloc(n * es + 1);
    if (!part) return mp_err(FSC_ERR_NOMEM, "all_reduce: out of memory");
    fsc_status s = ordered_part(m, "all_reduce", send, count, chunk, dt, op, part);
    if (s == FSC_OK) {
        memcpy((u8 *)recv + lo * es, part, n * es);
        for (int j = 0; j < N && s == FSC_OK; j++) {
            if (j == me) continue;
            size_t jlo = clampz((size_t)j * chunk, count), jn = clampz(jlo + chunk, count) - jlo;
            s = post(m, "all_reduce", 1, (u8 *)recv + jlo * es, jn * es, j, TAG_COLL);
            if (s == FSC_OK) s = post(m, "all_reduce", 0, (u8 *)recv + lo * es, n * es, j, TAG_COLL);
        }
        if (s == FSC_OK) s = wait_posted(m, "all_reduce");
    }
    free(part);
    return s;
}

static fsc_status mp_reduce_scatter(void *ctx, const void *send, void *recv, size_t recvcount, fsc_dtype dt,
                                    fsc_redop op) {
    mp_ctx *m = ctx;
    FSC_TRY(enter(m, "reduce_scatter"));
    if (m->sh->native || native_i64(dt, recvcount * (size_t)m->size)) {
        FSC_TRY(grow_req(m, 1));
        return native_reduce_scatter(m, send, recv, recvcount, dt, op);
    }
    /* in place (recv == send + rank x recvcount) is safe: each tile is read whole before it is written */
    return ordered_part(m, "reduce_scatter", send, recvcount * (size_t)m->size, recvcount, dt, op, recv);
}

static fsc_status mp_all_gather(void *ctx, const void *send, void *recv, size_t sendcount, fsc_dtype dt) {
    mp_ctx *m = ctx;
    FSC_TRY(enter(m, "all_gather"));
    const size_t bytes = sendcount * dt_size(dt);
    u8 *mine = (u8 *)recv + (size_t)m->rank * bytes;
    if (bytes && mine != send) memcpy(mine, send, bytes);
    for (int j = 0; j < m->size; j++) {
        if (j == m->rank) continue;
        FSC_TRY(post(m, "all_gather", 1, (u8 *)recv + (size_t)j * bytes, bytes, j, TAG_COLL));
        FSC_TRY(post(m, "all_gather", 0, mine, bytes, j, TAG_COLL));
    }
    return wait_posted(m, "all_gather");
}

static fsc_status mp_broadcast(void *ctx, void *buf, size_t count, fsc_dtype dt, int root) {
    mp_ctx *m = ctx;
    FSC_TRY(enter(m, "broadcast"));
    const size_t bytes = count * dt_size(dt);
    if (m->rank != root) FSC_TRY(post(m, "broadcast", 1, buf, bytes, root, TAG_COLL));
    else
        for (int j = 0; j < m->size; j++)
            if (j != root) FSC_TRY(post(m, "broadcast", 0, buf, bytes, j, TAG_COLL));
    return wait_posted(m, "broadcast");
}

static fsc_status mp_all_to_all(void *ctx, const void *send, void *recv, size_t count, fsc_dtype dt) {
    mp_ctx *m = ctx;
    FSC_TRY(enter(m, "all_to_all"));
    const size_t bytes = count * dt_size(dt);
    if (bytes) memcpy((u8 *)recv + (size_t)m->rank * bytes, (const u8 *)send + (size_t)m->rank * bytes, bytes);
    for (int j = 0; j < m->size; j++) {
        if (j == m->rank) continue;
        FSC_TRY(post(m, "all_to_all", 1, (u8 *)recv + (size_t)j * bytes, bytes, j, TAG_COLL));
        FSC_TRY(post(m, "all_to_all", 0, (const u8 *)send + (size_t)j * bytes, bytes, j, TAG_COLL));
    }
    return wait_posted(m, "all_to_all");
}

/* A byte from every rank to every rank: a barrier that can say which rank did not come. */
static fsc_status mp_barrier(void *ctx) {
    mp_ctx *m = ctx;
    FSC_TRY(enter(m, "barrier"));
    u8 *t = NULL;
    FSC_TRY(scratch(m, (size_t)m->size + 1, &t));
    static const u8 one = 1;
    for (int j = 0; j < m->size; j++) {
        if (j == m->rank) continue;
        FSC_TRY(post(m, "barrier", 1, t + j, 1, j, TAG_COLL));
        FSC_TRY(post(m, "barrier", 0, &one, 1, j, TAG_COLL));
    }
    return wait_posted(m, "barrier");
}

static fsc_status mp_send(void *ctx, const void *buf, size_t count, fsc_dtype dt, int peer) {
    mp_ctx *m = ctx;
    char what[64];
    snprintf(what, sizeof what, "send to rank %d", peer);
    m->p2p = 1;
    FSC_TRY(enter(m, what));
    const size_t bytes = count * dt_size(dt);
    if (peer == m->rank) return mp_err(FSC_ERR_INVALID, "%s: a rank cannot send to itself on the MPI communicator",
                                       what);
    mp_pending *p = calloc(1, sizeof *p);
    u8 *data = malloc(bytes + 1);
    if (!p || !data) {
        free(p);
        free(data);
        return mp_err(FSC_ERR_NOMEM, "%s: out of memory for %zu bytes", what, bytes);
    }
    if (bytes) memcpy(data, buf, bytes);
    /* an empty message travels as one byte, so a recv of 0 elements matches it */
    fsc_status s = post(m, what, 0, data, bytes ? bytes : 1, peer, TAG_P2P);
    if (s != FSC_OK) {
        free(p);
        free(data);
        return s;
    }
    p->req = malloc((size_t)m->nreq * sizeof *p->req);
    if (!p->req) {
        free(p);
        /* the send is posted and its buffer must stay: leak it, the communicator is broken */
        return breaks(m, mp_err(FSC_ERR_NOMEM, "%s: out of memory", what));
    }
    memcpy(p->req, m->req, (size_t)m->nreq * sizeof *p->req);
    p->nreq = m->nreq, p->peer = peer, p->data = data;
    m->nreq = 0;
    p->next = m->pending;
    m->pending = p;
    return FSC_OK;
}

static fsc_status mp_recv(void *ctx, void *buf, size_t count, fsc_dtype dt, int peer) {
    mp_ctx *m = ctx;
    char what[64];
    snprintf(what, sizeof what, "recv from rank %d", peer);
    m->p2p = 1;
    FSC_TRY(enter(m, what));
    if (peer == m->rank) return mp_err(FSC_ERR_INVALID, "%s: a rank cannot receive from itself on the MPI "
                                       "communicator", what);
    const size_t bytes = count * dt_size(dt);
    u8 dummy;
    if (bytes) FSC_TRY(post(m, what, 1, buf, bytes, peer, TAG_P2P));
    else FSC_TRY(post(m, what, 1, &dummy, 1, peer, TAG_P2P));
    return wait_posted(m, what);
}

static const fsc_comm_ops mp_ops;

static fsc_status new_ctx(MPI_Comm comm, mp_shared *sh, mp_ctx **out) {
    mp_ctx *m = calloc(1, sizeof *m);
    if (!m) return mp_err(FSC_ERR_NOMEM, "mpi: out of memory");
    m->comm = comm;
    m->sh = sh;
    MPI_Comm_rank(comm, &m->rank);
    MPI_Comm_size(comm, &m->size);
    MPI_Comm_size(MPI_COMM_WORLD, &m->world);
    m->last_recv = calloc((size_t)m->size, sizeof *m->last_recv);
    m->world_rank = malloc((size_t)m->size * sizeof *m->world_rank);
    int *mine = malloc((size_t)m->size * sizeof *mine);
    if (!m->last_recv || !m->world_rank || !mine) {
        free(m->last_recv), free(m->world_rank), free(mine), free(m);
        return mp_err(FSC_ERR_NOMEM, "mpi: out of memory");
    }
    /* each rank's world rank, for the messages (a group's rank 0 is rarely the world's) */
    MPI_Group g = MPI_GROUP_NULL, wg = MPI_GROUP_NULL;
    for (int j = 0; j < m->size; j++) mine[j] = m->world_rank[j] = j;
    if (MPI_Comm_group(comm, &g) == MPI_SUCCESS && MPI_Comm_group(MPI_COMM_WORLD, &wg) == MPI_SUCCESS &&
        MPI_Group_translate_ranks(g, m->size, mine, wg, m->world_rank) != MPI_SUCCESS)
        for (int j = 0; j < m->size; j++) m->world_rank[j] = j;
    if (g != MPI_GROUP_NULL) MPI_Group_free(&g);
    if (wg != MPI_GROUP_NULL) MPI_Group_free(&wg);
    free(mine);
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    sh->refs++;
    *out = m;
    return FSC_OK;
}

static fsc_status mp_split(void *ctx, int color, int key, void **new_ctx_out, int *new_rank, int *new_size) {
    mp_ctx *m = ctx;
    FSC_TRY(enter(m, "split"));
    /* every rank's (color, key) with a deadline first: a dead rank fails here, not inside MPI_Comm_split */
    int32_t mine[2] = {color, key};
    u8 *all = malloc((size_t)m->size * sizeof mine);
    if (!all) return mp_err(FSC_ERR_NOMEM, "split: out of memory");
    fsc_status s = mp_all_gather(ctx, mine, all, 2, FSC_I32);
    free(all);
    FSC_TRY(s);
    MPI_Comm nc = MPI_COMM_NULL;
    FSC_TRY(mpi_call(m, "split", MPI_Comm_split(m->comm, color, key, &nc)));
    mp_ctx *c = NULL;
    s = new_ctx(nc, m->sh, &c);
    if (s != FSC_OK) {
        MPI_Comm_free(&nc);
        return s;
    }
    *new_ctx_out = c;
    *new_rank = c->rank;
    *new_size = c->size;
    return FSC_OK;
}

static void mp_destroy(void *ctx) {
    mp_ctx *m = ctx;
    if (!m) return;
    mp_shared *sh = m->sh;
    /* background sends finish (or the communicator breaks) before their buffers go; on a communicator a rank gave
     * up on, a send the peer will never take is not waited for: the communicators break (MPI cannot cancel it) */
    const int gone = atomic_load_explicit(&m->revoked, memory_order_acquire);
    const double deadline = now_s() + (gone ? 0.2 : sh->timeout_s);
    while (m->pending && !sh->broken) {
        if (reap(m, "free") != FSC_OK) break;
        if (m->pending && now_s() > deadline) {
            char why[REVOKE_CAP + 128], lab[64]; /* said to no caller: a free has none, and the core's message is the
                                                   * caller's */
            if (gone)
                snprintf(why, sizeof why, "sends to %s were still under way when a communicator was freed after %.*s",
                         peer_label(m, m->pending->peer, lab, sizeof lab), REVOKE_CAP, m->revoke_why);
            else
                snprintf(why, sizeof why, "sends to %s were still under way after %g s when a communicator was freed",
                         peer_label(m, m->pending->peer, lab, sizeof lab), sh->timeout_s);
            mark_broken(sh, why);
            break;
        }
        if (m->pending) {
            mp_unlock();
            nap(20000);
            mp_lock();
        }
    }
    if (sh->broken) {
        /* requests may still point into these buffers: leak them rather than let MPI write into freed memory */
        m->pending = NULL;
    } else {
        if (m->comm != MPI_COMM_WORLD && m->comm != MPI_COMM_NULL) MPI_Comm_free(&m->comm);
        free(m->tmp);
        free(m->req);
        free(m->st);
    }
    free(m->slot);
    free(m->last_recv);
    free(m->world_rank);
    free(m);
    if (--sh->refs > 0) return;
    int fin = 0;
    MPI_Finalized(&fin);
    if (sh->initialized && !fin && !sh->broken) MPI_Finalize();
    free(sh);
}

/* ---- the table's entries: issue order after started calls, one thread in MPI (mpi_async.h) ---- */

/* Call k with the synchronous code under the lock (the caller drained the ctx's started calls, or is its
 * progress thread). */
static fsc_status mp_run(void *ctx, const fsc_comm_call *k) {
    mp_lock();
    fsc_status s;
    switch (k->op) {
    case FSC_OP_ALL_REDUCE: s = mp_all_reduce(ctx, k->send, k->recv, k->count, k->dt, k->redop); break;
    case FSC_OP_REDUCE_SCATTER: s = mp_reduce_scatter(ctx, k->send, k->recv, k->count, k->dt, k->redop); break;
    case FSC_OP_ALL_GATHER: s = mp_all_gather(ctx, k->send, k->recv, k->count, k->dt); break;
    case FSC_OP_BROADCAST: s = mp_broadcast(ctx, k->recv, k->count, k->dt, k->peer); break;
    case FSC_OP_SEND: s = mp_send(ctx, k->send, k->count, k->dt, k->peer); break;
    case FSC_OP_RECV: s = mp_recv(ctx, k->recv, k->count, k->dt, k->peer); break;
    case FSC_OP_ALL_TO_ALL: s = mp_all_to_all(ctx, k->send, k->recv, k->count, k->dt); break;
    case FSC_OP_BARRIER: s = mp_barrier(ctx); break;
    default: s = mp_err(FSC_ERR_INVALID, "mpi: operation %d cannot run here", (int)k->op); break;
    }
    mp_unlock();
    return s;
}

static fsc_status sync_call(void *ctx, const fsc_comm_call *k) {
    mp_async_drain(((mp_ctx *)ctx)->async);
    return mp_run(ctx, k);
}

static fsc_status e_all_reduce(void *ctx, const void *send, void *recv, size_t count, fsc_dtype dt, fsc_redop op) {
    fsc_comm_call k = {.op = FSC_OP_ALL_REDUCE, .send = send, .recv = recv, .count = count, .dt = dt, .redop = op};
    return sync_call(ctx, &k);
}
static fsc_status e_reduce_scatter(void *ctx, const void *send, void *recv, size_t rc, fsc_dtype dt, fsc_redop op) {
    fsc_comm_call k = {.op = FSC_OP_REDUCE_SCATTER, .send = send, .recv = recv, .count = rc, .dt = dt, .redop = op};
    return sync_call(ctx, &k);
}
static fsc_status e_all_gather(void *ctx, const void *send, void *recv, size_t sendcount, fsc_dtype dt) {
    fsc_comm_call k = {.op = FSC_OP_ALL_GATHER, .send = send, .recv = recv, .count = sendcount, .dt = dt};
    return sync_call(ctx, &k);
}
static fsc_status e_broadcast(void *ctx, void *buf, size_t count, fsc_dtype dt, int root) {
    fsc_comm_call k = {.op = FSC_OP_BROADCAST, .send = buf, .recv = buf, .count = count, .dt = dt, .peer = root};
    return sync_call(ctx, &k);
}
static fsc_status e_send(void *ctx, const void *buf, size_t count, fsc_dtype dt, int peer) {
    fsc_comm_call k = {.op = FSC_OP_SEND, .send = buf, .count = count, .dt = dt, .peer = peer};
    return sync_call(ctx, &k);
}
static fsc_status e_recv(void *ctx, void *buf, size_t count, fsc_dtype dt, int peer) {
    fsc_comm_call k = {.op = FSC_OP_RECV, .recv = buf, .count = count, .dt = dt, .peer = peer};
    return sync_call(ctx, &k);
}
static fsc_status e_all_to_all(void *ctx, const void *send, void *recv, size_t count, fsc_dtype dt) {
    fsc_comm_call k = {.op = FSC_OP_ALL_TO_ALL, .send = send, .recv = recv, .count = count, .dt = dt};
    return sync_call(ctx, &k);
}
static fsc_status e_barrier(void *ctx) {
    fsc_comm_call k = {.op = FSC_OP_BARRIER};
    return sync_call(ctx, &k);
}
static fsc_status e_split(void *ctx, int color, int key, void **new_ctx, int *new_rank, int *new_size) {
    mp_async_drain(((mp_ctx *)ctx)->async);
    mp_lock();
    fsc_status s = mp_split(ctx, color, key, new_ctx, new_rank, new_size);
    mp_unlock();
    return s;
}
static void e_destroy(void *ctx) {
    if (!ctx) return;
    mp_async_free(((mp_ctx *)ctx)->async);
    mp_lock();
    mp_destroy(ctx);
    mp_unlock();
}
static fsc_status e_start(void *ctx, const fsc_comm_call *k, void **req) {
    return mp_async_start(&((mp_ctx *)ctx)->async, ctx, mp_run, k, req);
}
static fsc_status e_wait(void *ctx, void *req) { return mp_async_wait(((mp_ctx *)ctx)->async, req); }

/* This rank gives up on the communicator (fsc_comm_ops.revoke; MPI without its fault-tolerance extension has no
 * MPIX_Comm_revoke): it is marked revoked, so this rank's calls on it, its started ones included (they poll the
 * mark), fail at once; and a notice with the reason goes to every other rank, whose calls on it poll for one
 * (gave_up) and fail at once too, instead of waiting for the timeout. Once. */
static void e_revoke(void *ctx, const char *why) {
    mp_ctx *m = ctx;
    mp_lock();
    if (!atomic_load_explicit(&m->revoked, memory_order_acquire) && !m->sh->broken) {
        snprintf(m->revoke_why, sizeof m->revoke_why, "world rank %d gave up on the group: %.300s",
                 m->world_rank[m->rank], why);
        atomic_store_explicit(&m->revoked, 1, memory_order_release);
        const int len = (int)strlen(m->revoke_why) + 1;
        for (int j = 0; j < m->size; j++) { /* small messages: MPI sends them at once (eager) */
            if (j == m->rank) continue;
            mp_pending *p = calloc(1, sizeof *p);
            u8 *data = malloc((size_t)len);
            MPI_Request *rq = malloc(sizeof *rq);
            if (!p || !data || !rq ||
                MPI_Isend(memcpy(data, m->revoke_why, (size_t)len), len, MPI_CHAR, j, TAG_REVOKE, m->comm, rq) !=
                    MPI_SUCCESS) {
                free(p), free(data), free(rq); /* that rank then waits for its timeout */
                continue;
            }
            *p = (mp_pending){.next = m->pending, .peer = j, .nreq = 1, .req = rq, .data = data};
            m->pending = p;
        }
    }
    mp_unlock();
}
static fsc_status e_test(void *ctx, void *req, int *done) { return mp_async_test(((mp_ctx *)ctx)->async, req, done); }

static const fsc_comm_ops mp_ops = {
    .abi_version = FSC_COMM_ABI_VERSION,
    .name = "mpi",
    .all_reduce = e_all_reduce,
    .reduce_scatter = e_reduce_scatter,
    .all_gather = e_all_gather,
    .broadcast = e_broadcast,
    .send = e_send,
    .recv = e_recv,
    .all_to_all = e_all_to_all,
    .barrier = e_barrier,
    .split = e_split,
    .destroy = e_destroy,
    .start = e_start,
    .wait = e_wait,
    .test = e_test,
    .revoke = e_revoke,
};

MP_EXPORT fsc_status fsc_mpi_comm_open(int abi_version, fsc_mpi_error_fn error, int rank, int world,
                                       double timeout_s, int native, const fsc_comm_ops **ops, void **ctx) {
    if (error) host_error = error;
    if (abi_version != FSC_COMM_ABI_VERSION)
        return mp_err(FSC_ERR_UNSUPPORTED, "mpi communicator: built for interface version %d, the library asks "
                      "for %d (rebuild libfsc_mpi.so with this fsc)", FSC_COMM_ABI_VERSION, abi_version);
    if (!ops || !ctx) return mp_err(FSC_ERR_INVALID, "fsc_mpi_comm_open: ops or ctx is NULL");
    int inited = 0, provided = 0, finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized)
        return mp_err(FSC_ERR_STATE, "MPI was already finalized in this process: a process runs one MPI job (call "
                      "fsc_cluster_run_from_env_opts once per process)");
    MPI_Initialized(&inited);
    mp_shared *sh = calloc(1, sizeof *sh);
    if (!sh) return mp_err(FSC_ERR_NOMEM, "mpi: out of memory");
    if (!inited) {
        int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
        if (rc != MPI_SUCCESS) {
            free(sh);
            return mp_err(FSC_ERR_COMM, "MPI_Init_thread failed (error %d): start the program with mpirun", rc);
        }
        sh->initialized = 1;
    }
    sh->timeout_s = timeout_s > 0 ? timeout_s : 600.0;
    sh->native = native;
    MPI_Comm wc = MPI_COMM_NULL;
    int r = -1, n = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (r != rank || n != world) {
        fsc_status s = mp_err(FSC_ERR_INVALID, "the launcher says rank %d of %d but MPI says rank %d of %d: the MPI "
                              "communicator needs processes started by mpirun (or srun --mpi=pmix), e.g. "
                              "mpirun -n %d <program>", rank, world, r, n, world);
        /* not with other processes in the job: they may be in the first MPI_Comm_dup below, waiting for this one,
         * and MPI_Finalize waits for them (the job hung, the message unsaid); mpirun ends them once this one exits */
        if (sh->initialized && n == 1) MPI_Finalize();
        free(sh);
        return s;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (MPI_Comm_dup(MPI_COMM_WORLD, &wc) != MPI_SUCCESS) {
        if (sh->initialized) MPI_Finalize();
        free(sh);
        return mp_err(FSC_ERR_COMM, "MPI_Comm_dup of the world failed");
    }
    mp_ctx *m = NULL;
    fsc_status s = new_ctx(wc, sh, &m);
    if (s != FSC_OK) {
        MPI_Comm_free(&wc);
        if (sh->initialized) MPI_Finalize();
        free(sh);
        return s;
    }
    *ops = &mp_ops;
    *ctx = m;
    return FSC_OK;
}
