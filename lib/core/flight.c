/* The flight recorder (flight.h): a ring of the last calls per communicator, and the writer of a rank's record.
 * A ring is written by its communicator's thread with no lock and no allocation: each entry is a small
 * seqlock (its sequence number is cleared, the fields are stored, then the number is stored again, all as
 * atomics), so a writer on another thread (the watcher's, on a signal) copies an entry only when its number
 * reads the same before and after, and skips one being rewritten. The recorder's mutex guards its list of rings,
 * their names and closed flags, and serializes writes; it is taken when a communicator is made, named or freed
 * and when a record is written, never per call. The recorder is freed with its last holder (the caller, each
 * attached communicator, a watcher). Not here: reading records back (lib/io/flight_read.c). */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "core/comm_impl.h"
#include "core/flight_impl.h"
#include "core/json_str_impl.h"

#define MAX_RINGS 64 /* rings a recorder keeps; beyond, closed ones are dropped, oldest first */

enum { ST_ISSUED = 1, ST_WAITING, ST_COMPLETED, ST_FAILED };
static const char *const state_names[] = { "", "issued", "waiting", "completed", "failed" };

typedef struct {
    _Atomic uint64_t seq;       /* 0 while empty or being rewritten */
    _Atomic uint64_t count;
    _Atomic int64_t t0, t1;     /* start and end, microseconds of CLOCK_REALTIME (comparable across processes) */
    _Atomic int peer, status;
    _Atomic unsigned char op, dt, state;
} fl_entry;

struct flight_ring {
    fsc_flight *f;
    flight_ring *next;          /* f's list, under f->mu */
    uint64_t gid;
    int rank, size;
    char name[32];              /* under f->mu */
    int closed;                 /* under f->mu */
    size_t depth;
    fl_entry e[];               /* (depth): call seq in slot (seq - 1) % depth */
};

struct fsc_flight {
    int rank, world;
    size_t depth;
    char *dir;
    pthread_mutex_t mu;
    atomic_int refs;
    atomic_int frozen;          /* a call failed: nothing more is recorded */
    char first_error[512];      /* the failed call's message (written before frozen is set) */
    flight_ring *rings;         /* newest first */
    int nrings;
};

#define LD(x) atomic_load_explicit(&(x), memory_order_relaxed)
#define ST(x, v) atomic_store_explicit(&(x), (v), memory_order_relaxed)

static int64_t now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static uint64_t mix(uint64_t x) { /* splitmix64's finalizer */
    x ^= x >> 30, x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27, x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

uint64_t flight_child_gid(uint64_t gid, unsigned n, int color) {
    return mix(mix(gid ^ (uint64_t)n) + (uint64_t)(uint32_t)color + 1);
}

fsc_flight_opts fsc_flight_opts_default(void) {
    return (fsc_flight_opts){ .rank = 0, .world = 1, .depth = FSC_FLIGHT_DEFAULT_DEPTH, .dir = NULL };
}

int flight_rank_of_name(const char *name, int max) {
    const char *p = name + strlen("flight-rank-");
    if (strncmp(name, "flight-rank-", 12) != 0 || *p < '0' || *p > '9' || (*p == '0' && p[1] != '.')) return -1;
    long r = 0;
    for (; *p >= '0' && *p <= '9' && r < max; p++) r = r * 10 + (*p - '0');
    return strcmp(p, ".json") == 0 && r < max ? (int)r : -1;
}

/* Move dir/name (a record an earlier run left) aside to dir/name.prev, replacing an older one, else remove it: the
 * reader takes only flight-rank-N.json, so a rank of this run that writes no record reads as silent, not as that
 * run's rank. Best effort: a record that can be neither moved nor removed (a read-only directory) stays, and the
 * recorder is made all the same (a rank failing here would fail the job over a diagnosis aid). */
static void set_aside(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 8;
    char *path = malloc(2 * n);
    if (!path) return;
    snprintf(path, n, "%s/%s", dir, name);
    snprintf(path + n, n, "%s/%s.prev", dir, name);
    if (rename(path, path + n) != 0 && errno != ENOENT && errno != ENOTDIR) (void)unlink(path);
    free(path);
}

/* The records an earlier run left in dir that this recorder's would be read with: its rank's, and for rank 0 those
 * of ranks its world does not have. */
static void set_aside_earlier(const char *dir, int rank, int world) {
    char name[48];
    snprintf(name, sizeof name, "flight-rank-%d.json", rank);
    set_aside(dir, name);
    DIR *d = rank == 0 ? opendir(dir) : NULL;
    if (!d) return; /* not made yet: nothing there */
    for (struct dirent *e; (e = readdir(d));)
        if (flight_rank_of_name(e->d_name, INT_MAX) >= world) set_aside(dir, e->d_name);
    closedir(d);
}

fsc_status fsc_flight_create(const fsc_flight_opts *o, fsc_flight **out) {
    if (!out) return fsc_error(FSC_ERR_INVALID, "fsc_flight_create: out is NULL");
    *out = NULL;
    if (!o) return fsc_error(FSC_ERR_INVALID, "fsc_flight_create: opts is NULL");
    if (o->world > FSC_FLIGHT_MAX_WORLD)
        return fsc_error(FSC_ERR_UNSUPPORTED, "fsc_flight_create: a world of %d ranks is above the %d a flight record "
                         "can describe (the diagnosis reads no more)", o->world, FSC_FLIGHT_MAX_WORLD);
    if (o->world < 1 || o->rank < 0 || o->rank >= o->world)
        return fsc_error(FSC_ERR_INVALID, "fsc_flight_create: rank %d of a world of %d is out of range", o->rank,
                         o->world);
    if (o->depth > FSC_FLIGHT_MAX_DEPTH)
        return fsc_error(FSC_ERR_INVALID, "fsc_flight_create: depth %zu is above %d calls", o->depth,
                         FSC_FLIGHT_MAX_DEPTH);
    fsc_flight *f = calloc(1, sizeof *f);
    if (!f) return fsc_error(FSC_ERR_NOMEM, "fsc_flight_create: out of memory");
    f->dir = o->dir ? strdup(o->dir) : NULL;
    if (o->dir && !f->dir) {
        free(f);
        return fsc_error(FSC_ERR_NOMEM, "fsc_flight_create: out of memory");
    }
    if (o->dir) set_aside_earlier(o->dir, o->rank, o->world);
    f->rank = o->rank, f->world = o->world;
    f->depth = o->depth ? o->depth : FSC_FLIGHT_DEFAULT_DEPTH;
    pthread_mutex_init(&f->mu, NULL);
    atomic_init(&f->refs, 1);
    atomic_init(&f->frozen, 0);
    *out = f;
    return FSC_OK;
}

static void unref(fsc_flight *f) {
    if (atomic_fetch_sub(&f->refs, 1) != 1) return;
    for (flight_ring *r = f->rings, *next; r; r = next) next = r->next, free(r);
    pthread_mutex_destroy(&f->mu);
    free(f->dir);
    free(f);
}

void fsc_flight_free(fsc_flight *f) {
    if (f) unref(f);
}

void flight_ref(fsc_flight *f) { atomic_fetch_add(&f->refs, 1); }
void flight_unref(fsc_flight *f) { unref(f); }

int fsc_flight_failed(const fsc_flight *f) { return f ? atomic_load(&f->frozen) : 0; }

/* Under f->mu: drop the oldest closed ring when the list is full. */
static void make_room(fsc_flight *f) {
    if (f->nrings < MAX_RINGS) return;
    flight_ring **oldest = NULL;
    for (flight_ring **p = &f->rings; *p; p = &(*p)->next)
        if ((*p)->closed) oldest = p;
    if (!oldest) return;
    flight_ring *r = *oldest;
    *oldest = r->next;
    free(r);
    f->nrings--;
}

flight_ring *flight_ring_attach(fsc_flight *f, uint64_t gid, int rank, int size, const char *name) {
    if (!f) return NULL;
    flight_ring *r = calloc(1, sizeof *r + f->depth * sizeof(fl_entry));
    if (!r) return NULL;
    r->f = f, r->gid = gid, r->rank = rank, r->size = size, r->depth = f->depth;
    snprintf(r->name, sizeof r->name, "%s", name ? name : "");
    pthread_mutex_lock(&f->mu);
    make_room(f);
    r->next = f->rings;
    f->rings = r;
    f->nrings++;
    pthread_mutex_unlock(&f->mu);
    flight_ref(f);
    return r;
}

void flight_ring_detach(flight_ring *r) {
    if (!r) return;
    fsc_flight *f = r->f;
    pthread_mutex_lock(&f->mu);
    r->closed = 1;
    pthread_mutex_unlock(&f->mu);
    unref(f);
}

fsc_flight *flight_ring_owner(const flight_ring *r) { return r ? r->f : NULL; }

void flight_ring_rename(flight_ring *r, const char *name) {
    if (!r) return;
    pthread_mutex_lock(&r->f->mu);
    snprintf(r->name, sizeof r->name, "%s", name ? name : "");
    pthread_mutex_unlock(&r->f->mu);
}

void fsc_comm_set_flight(fsc_comm *c, fsc_flight *f) {
    if (!c || flight_ring_owner(c->flight) == f) return;
    flight_ring_detach(c->flight);
    c->flight = flight_ring_attach(f, c->gid, c->rank, c->size, c->name);
}

static const char *op_name(int op) { return op == FLIGHT_OP_SPLIT ? "split" : fsc_comm_op_name((fsc_comm_op)op); }

size_t flight_begin(flight_ring *r, uint64_t seq, int op, size_t count, fsc_dtype dt, int peer, int waiting) {
    if (!r || LD(r->f->frozen)) return 0;
    const size_t slot = (size_t)((seq - 1) % r->depth);
    fl_entry *e = &r->e[slot];
    ST(e->seq, 0);
    atomic_thread_fence(memory_order_release);
    ST(e->count, (uint64_t)count);
    ST(e->t0, now_us());
    ST(e->t1, 0);
    ST(e->peer, op == FSC_OP_BROADCAST || op == FSC_OP_SEND || op == FSC_OP_RECV || op == FLIGHT_OP_SPLIT ? peer : -1);
    ST(e->status, 0);
    ST(e->op, (unsigned char)op);
    ST(e->dt, (unsigned char)dt);
    ST(e->state, waiting ? ST_WAITING : ST_ISSUED);
    atomic_store_explicit(&e->seq, seq, memory_order_release);
    return slot;
}

void flight_wait(flight_ring *r, size_t slot, uint64_t seq) {
    if (!r || LD(r->f->frozen) || LD(r->e[slot].seq) != seq) return;
    atomic_store_explicit(&r->e[slot].state, ST_WAITING, memory_order_release);
}

void flight_end(flight_ring *r, size_t slot, uint64_t seq, fsc_status s) {
    if (!r || LD(r->f->frozen) || LD(r->e[slot].seq) != seq) return;
    fl_entry *e = &r->e[slot];
    ST(e->t1, now_us());
    ST(e->status, (int)s);
    atomic_store_explicit(&e->state, s == FSC_OK ? ST_COMPLETED : ST_FAILED, memory_order_release);
    if (s == FSC_OK) return;
    snprintf(r->f->first_error, sizeof r->f->first_error, "%s #%llu on comm '%s': %s", op_name(LD(e->op)),
             (unsigned long long)seq, r->name, fsc_last_error());
    atomic_store_explicit(&r->f->frozen, 1, memory_order_release);
}

/* ---- the record ---- */

/* s as a JSON string (json_str_impl.h: escaped, and valid UTF-8 whatever bytes a message holds: a path in Latin-1,
 * first_error cut mid-character by its buffer). */
static void put_str(FILE *o, const char *s) { fsc_json_put_str(o, s); }

/* A consistent copy of entry e, or 0 when it is empty or being rewritten. */
typedef struct {
    uint64_t seq, count;
    int64_t t0, t1;
    int peer, status, op, dt, state;
} fl_copy;

static int copy_entry(fl_entry *e, fl_copy *c) {
    c->seq = atomic_load_explicit(&e->seq, memory_order_acquire);
    if (!c->seq) return 0;
    c->state = atomic_load_explicit(&e->state, memory_order_acquire);
    c->count = LD(e->count), c->t0 = LD(e->t0), c->t1 = LD(e->t1);
    c->peer = LD(e->peer), c->status = LD(e->status), c->op = LD(e->op), c->dt = LD(e->dt);
    atomic_thread_fence(memory_order_acquire);
    return LD(e->seq) == c->seq && c->state >= ST_ISSUED && c->state <= ST_FAILED;
}

/* One ring, oldest call first. Under f->mu. */
static void put_ring(FILE *o, flight_ring *r) {
    fprintf(o, "{\"name\":");
    put_str(o, r->name);
    fprintf(o, ",\"group\":\"%016" PRIx64 "\",\"rank\":%d,\"size\":%d,\"closed\":%s,\"calls\":[", r->gid, r->rank,
            r->size, r->closed ? "true" : "false");
    fl_copy c[1];
    uint64_t newest = 0;
    size_t start = 0;
    for (size_t i = 0; i < r->depth; i++) /* the oldest entry follows the newest */
        if (copy_entry(&r->e[i], c) && c->seq > newest) newest = c->seq, start = (i + 1) % r->depth;
    int first = 1;
    for (size_t k = 0; k < r->depth; k++) {
        if (!copy_entry(&r->e[(start + k) % r->depth], c)) continue;
        fprintf(o, "%s\n{\"seq\":%" PRIu64 ",\"op\":\"%s\",\"count\":%" PRIu64 ",\"dtype\":\"%s\",\"peer\":%d,"
                   "\"state\":\"%s\",\"start_us\":%" PRId64, first ? "" : ",", c->seq, op_name(c->op), c->count,
                fsc_dtype_name((fsc_dtype)c->dt), c->peer, state_names[c->state], c->t0);
        if (c->state >= ST_COMPLETED) fprintf(o, ",\"end_us\":%" PRId64, c->t1);
        if (c->state == ST_FAILED) fprintf(o, ",\"status\":\"%s\"", fsc_status_str((fsc_status)c->status));
        fputc('}', o);
        first = 0;
    }
    fprintf(o, "]}");
}

static fsc_status write_locked(fsc_flight *f, const char *path, const char *tmp, const char *reason,
                               const char *msg) {
    FILE *o = fopen(tmp, "we"); /* close-on-exec: a child the host program starts does not hold it */
    if (!o) return fsc_error(FSC_ERR_IO, "flight record %s: cannot create: %s", tmp, strerror(errno));
    fprintf(o, "{\"fsc_flight\":1,\"rank\":%d,\"world\":%d,\"reason\":", f->rank, f->world);
    put_str(o, reason ? reason : "");
    const int failed = atomic_load_explicit(&f->frozen, memory_order_acquire);
    fprintf(o, ",\"time_us\":%" PRId64 ",\"failed\":%s", now_us(), failed ? "true" : "false");
    if (failed) {
        fprintf(o, ",\"first_error\":");
        put_str(o, f->first_error);
    }
    if (msg && *msg) {
        fprintf(o, ",\"message\":");
        put_str(o, msg);
    }
    fprintf(o, ",\"comms\":[");
    for (flight_ring *r = f->rings; r; r = r->next) {
        fprintf(o, "%s\n", r == f->rings ? "" : ",");
        put_ring(o, r);
    }
    fprintf(o, "]}\n");
    int bad = ferror(o);
    if (fclose(o) != 0 || bad) {
        remove(tmp);
        return fsc_error(FSC_ERR_IO, "flight record %s: cannot write it", tmp);
    }
    if (rename(tmp, path) != 0) {
        fsc_status s = fsc_error(FSC_ERR_IO, "flight record %s: cannot rename it: %s", path, strerror(errno));
        remove(tmp);
        return s;
    }
    return FSC_OK;
}

fsc_status fsc_flight_write(fsc_flight *f, const char *reason, const char *msg) {
    if (!f) return fsc_error(FSC_ERR_INVALID, "fsc_flight_write: recorder is NULL");
    if (!f->dir) return fsc_error(FSC_ERR_INVALID, "fsc_flight_write: the recorder was made without a directory");
    if (mkdir(f->dir, 0777) != 0 && errno != EEXIST)
        return fsc_error(FSC_ERR_IO, "flight record: cannot create the directory %s: %s", f->dir, strerror(errno));
    size_t n = strlen(f->dir) + 48;
    char *path = malloc(2 * n);
    if (!path) return fsc_error(FSC_ERR_NOMEM, "fsc_flight_write: out of memory");
    char *tmp = path + n;
    snprintf(path, n, "%s/flight-rank-%d.json", f->dir, f->rank);
    snprintf(tmp, n, "%s/flight-rank-%d.json.tmp", f->dir, f->rank);
    pthread_mutex_lock(&f->mu);
    fsc_status s = write_locked(f, path, tmp, reason, msg);
    pthread_mutex_unlock(&f->mu);
    free(path);
    return s;
}
