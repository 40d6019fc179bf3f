/* Reading a flight record back (flight_read.h): one rank's DIR/flight-rank-N.json as lib/core/flight.c writes it.
 * The file is outside data (a crashed job's, perhaps half written or edited), so every field is checked for
 * its type and range, and the cost of parsing is bounded before cJSON runs: at most FLR_MAX_BYTES, and no more
 * JSON values than a record of that size can hold (each costs cJSON some 64 bytes); the arrays of calls and
 * communicators are no longer than the text's size allows (fuzz_flight checks the bound). Calls are sorted by
 * their sequence number, which must not repeat within a communicator. Not here: the diagnosis (flight_diag.c). */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "fsc/comm.h"
#include "fsc/dtype.h"
#include "fsc/flight.h"
#include "core/flight_impl.h"
#include "io/flight_read.h"
#include "io/json_lock.h"

static const char *const states[] = { "", "issued", "waiting", "completed", "failed" };

static const cJSON *field(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

/* An integral number in [lo, hi] (doubles hold integers exactly up to 2^53). */
static fsc_status get_int(const char *what, const cJSON *o, const char *k, double lo, double hi, int64_t *out) {
    const cJSON *v = field(o, k);
    if (!cJSON_IsNumber(v)) return fsc_error(FSC_ERR_FORMAT, "%s: \"%s\" is missing or not a number", what, k);
    double d = v->valuedouble;
    if (!(d >= lo && d <= hi) || d != (double)(int64_t)d)
        return fsc_error(FSC_ERR_FORMAT, "%s: \"%s\" is %g, not an integer in [%.0f, %.0f]", what, k, d, lo, hi);
    *out = (int64_t)d;
    return FSC_OK;
}

/* A string of at most cap - 1 bytes into buf (optional: absent leaves buf empty). */
static fsc_status get_str(const char *what, const cJSON *o, const char *k, int optional, char *buf, size_t cap) {
    const cJSON *v = field(o, k);
    buf[0] = 0;
    if (!v && optional) return FSC_OK;
    if (!cJSON_IsString(v)) return fsc_error(FSC_ERR_FORMAT, "%s: \"%s\" is missing or not a string", what, k);
    if (strlen(v->valuestring) >= cap)
        return fsc_error(FSC_ERR_FORMAT, "%s: \"%s\" is longer than %zu bytes", what, k, cap - 1);
    memcpy(buf, v->valuestring, strlen(v->valuestring) + 1);
    return FSC_OK;
}

static int index_of(const char *s, int n, const char *(*name)(int)) {
    for (int i = 0; i < n; i++)
        if (!strcmp(s, name(i))) return i;
    return -1;
}
static const char *op_name(int i) { return i == FLR_OP_SPLIT ? "split" : fsc_comm_op_name((fsc_comm_op)i); }
static const char *dt_name(int i) { return fsc_dtype_name((fsc_dtype)i); }
static const char *state_name(int i) { return states[i]; }

static fsc_status parse_call(const char *what, const cJSON *o, flr_call *c) {
    if (!cJSON_IsObject(o)) return fsc_error(FSC_ERR_FORMAT, "%s: a call is not an object", what);
    char s[32];
    int64_t v = 0;
    FSC_TRY(get_int(what, o, "seq", 1, 9007199254740992.0, &v));
    c->seq = (uint64_t)v;
    FSC_TRY(get_int(what, o, "count", 0, 9007199254740992.0, &v));
    c->count = (uint64_t)v;
    FSC_TRY(get_int(what, o, "peer", -1, 2147483647.0, &v));
    c->peer = (int)v;
    FSC_TRY(get_int(what, o, "start_us", 0, 9007199254740992.0, &c->t0));
    FSC_TRY(get_str(what, o, "op", 0, s, sizeof s));
    if ((c->op = index_of(s, FLR_OP_SPLIT + 1, op_name)) < 0)
        return fsc_error(FSC_ERR_FORMAT, "%s: call #%" PRIu64 ": \"%s\" is not an operation", what, c->seq, s);
    FSC_TRY(get_str(what, o, "dtype", 0, s, sizeof s));
    if ((c->dt = index_of(s, FSC_DTYPE_COUNT, dt_name)) < 0)
        return fsc_error(FSC_ERR_FORMAT, "%s: call #%" PRIu64 ": \"%s\" is not a dtype", what, c->seq, s);
    FSC_TRY(get_str(what, o, "state", 0, s, sizeof s));
    if ((c->state = index_of(s, FLR_FAILED + 1, state_name)) < FLR_ISSUED)
        return fsc_error(FSC_ERR_FORMAT, "%s: call #%" PRIu64 ": \"%s\" is not a state", what, c->seq, s);
    c->t1 = 0;
    if (c->state >= FLR_COMPLETED) FSC_TRY(get_int(what, o, "end_us", 0, 9007199254740992.0, &c->t1));
    return get_str(what, o, "status", 1, c->status, sizeof c->status);
}

static int by_seq(const void *a, const void *b) {
    uint64_t x = ((const flr_call *)a)->seq, y = ((const flr_call *)b)->seq;
    return x < y ? -1 : x > y;
}

/* What the text's size allows: a call as written takes at least MIN_CALL bytes, a communicator MIN_COMM, so the
 * arrays allocated for them stay proportional to the input (cJSON's nodes are bounded by check_cost). */
#define MIN_CALL 80
#define MIN_COMM 64

static fsc_status parse_comm(const char *what, const cJSON *o, int world, size_t *calls_left, flr_comm *c) {
    if (!cJSON_IsObject(o)) return fsc_error(FSC_ERR_FORMAT, "%s: a communicator is not an object", what);
    char gid[24];
    int64_t v = 0;
    FSC_TRY(get_str(what, o, "name", 0, c->name, sizeof c->name));
    FSC_TRY(get_str(what, o, "group", 0, gid, sizeof gid));
    char *end = NULL;
    c->gid = strtoull(gid, &end, 16);
    if (strlen(gid) != 16 || *end)
        return fsc_error(FSC_ERR_FORMAT, "%s: comm '%s': group \"%s\" is not 16 hex digits", what, c->name, gid);
    FSC_TRY(get_int(what, o, "size", 1, world, &v));
    c->size = (int)v;
    FSC_TRY(get_int(what, o, "rank", 0, c->size - 1, &v));
    c->rank = (int)v;
    c->closed = cJSON_IsTrue(field(o, "closed"));
    const cJSON *calls = field(o, "calls");
    if (!cJSON_IsArray(calls))
        return fsc_error(FSC_ERR_FORMAT, "%s: comm '%s': \"calls\" is not an array", what, c->name);
    int n = cJSON_GetArraySize(calls);
    if ((size_t)n > *calls_left)
        return fsc_error(FSC_ERR_FORMAT, "%s: comm '%s': %d calls, more than a file of its size holds", what,
                         c->name, n);
    *calls_left -= (size_t)n;
    c->calls = calloc((size_t)n + 1, sizeof *c->calls);
    if (!c->calls) return fsc_error(FSC_ERR_NOMEM, "%s: out of memory for %d calls", what, n);
    for (const cJSON *x = calls->child; x; x = x->next) FSC_TRY(parse_call(what, x, &c->calls[c->ncalls++]));
    qsort(c->calls, c->ncalls, sizeof *c->calls, by_seq);
    for (size_t i = 1; i < c->ncalls; i++)
        if (c->calls[i].seq == c->calls[i - 1].seq)
            return fsc_error(FSC_ERR_FORMAT, "%s: comm '%s': call #%" PRIu64 " appears twice", what, c->name,
                             c->calls[i].seq);
    return FSC_OK;
}

static fsc_status parse_root(const char *what, const cJSON *root, size_t len, flr_record *r) {
    if (!cJSON_IsObject(root)) return fsc_error(FSC_ERR_FORMAT, "%s: not a JSON object", what);
    int64_t v = 0;
    FSC_TRY(get_int(what, root, "fsc_flight", 1, 1, &v));
    FSC_TRY(get_int(what, root, "world", 1, FLR_MAX_WORLD, &v));
    r->world = (int)v;
    FSC_TRY(get_int(what, root, "rank", 0, r->world - 1, &v));
    r->rank = (int)v;
    FSC_TRY(get_int(what, root, "time_us", 0, 9007199254740992.0, &r->time_us));
    FSC_TRY(get_str(what, root, "reason", 0, r->reason, sizeof r->reason));
    FSC_TRY(get_str(what, root, "message", 1, r->message, sizeof r->message));
    FSC_TRY(get_str(what, root, "first_error", 1, r->first_error, sizeof r->first_error));
    r->failed = cJSON_IsTrue(field(root, "failed"));
    const cJSON *comms = field(root, "comms");
    if (!cJSON_IsArray(comms)) return fsc_error(FSC_ERR_FORMAT, "%s: \"comms\" is missing or not an array", what);
    int n = cJSON_GetArraySize(comms);
    if (n > FLR_MAX_COMMS || (size_t)n > len / MIN_COMM + 1)
        return fsc_error(FSC_ERR_FORMAT, "%s: %d communicators, more than %s", what, n,
                         n > FLR_MAX_COMMS ? "a record holds" : "a file of its size holds");
    size_t calls_left = len / MIN_CALL + 1;
    r->comms = calloc((size_t)n + 1, sizeof *r->comms);
    if (!r->comms) return fsc_error(FSC_ERR_NOMEM, "%s: out of memory for %d communicators", what, n);
    for (const cJSON *x = comms->child; x; x = x->next)
        FSC_TRY(parse_comm(what, x, r->world, &calls_left, &r->comms[r->ncomms++]));
    return FSC_OK;
}

/* JSON values the text may hold at most: a bound cJSON's nodes stay under (one per ',', ':', '[' or '{'). */
static fsc_status check_cost(const char *what, const char *text, size_t len) {
    if (len > FLR_MAX_BYTES)
        return fsc_error(FSC_ERR_FORMAT, "%s: %zu bytes, above the limit of %zu for a flight record", what, len,
                         FLR_MAX_BYTES);
    size_t marks = 0;
    for (size_t i = 0; i < len; i++) marks += text[i] == ',' || text[i] == ':' || text[i] == '[' || text[i] == '{';
    if (marks > len / 4 + 1024)
        return fsc_error(FSC_ERR_FORMAT, "%s: %zu JSON values in %zu bytes: not a flight record", what, marks, len);
    return FSC_OK;
}

fsc_status flr_parse(const char *text, size_t len, const char *what, flr_record **out) {
    *out = NULL;
    if (!what) what = "flight record";
    if (!text) return fsc_error(FSC_ERR_INVALID, "%s: no text", what);
    FSC_TRY(check_cost(what, text, len));
    flr_record *r = calloc(1, sizeof *r);
    if (!r) return fsc_error(FSC_ERR_NOMEM, "%s: out of memory", what);
    const char *end = NULL;
    pthread_mutex_lock(&fsc_json_lock);
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    pthread_mutex_unlock(&fsc_json_lock);
    fsc_status s = root ? parse_root(what, root, len, r) : fsc_error(FSC_ERR_FORMAT, "%s: not valid JSON (cut short or "
                                                               "damaged)", what);
    cJSON_Delete(root);
    if (s != FSC_OK) {
        flr_free(r);
        return s;
    }
    *out = r;
    return FSC_OK;
}

void flr_free(flr_record *r) {
    if (!r) return;
    for (int i = 0; i < r->ncomms; i++) free(r->comms[i].calls);
    free(r->comms);
    free(r);
}

/* ---- a directory of records ---- */

typedef struct {
    char buf[4096];
    size_t len;
} out_note;

static void note(out_note *n, const char *fmt, ...) {
    if (n->len + 1 >= sizeof n->buf) return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(n->buf + n->len, sizeof n->buf - n->len, fmt, ap);
    va_end(ap);
    if (k > 0) n->len = n->len + (size_t)k < sizeof n->buf ? n->len + (size_t)k : sizeof n->buf - 1;
}

/* A record's text: a regular file (a FIFO or device under a record's name is refused, never waited on) of at
 * most FLR_MAX_BYTES, in a buffer of its size. */
static fsc_status read_file(const char *path, char **text, size_t *len) {
    *text = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return fsc_error(FSC_ERR_IO, "%s: cannot open it: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return fsc_error(FSC_ERR_FORMAT, "%s: not a regular file", path);
    }
    if ((uint64_t)sb.st_size > FLR_MAX_BYTES) {
        close(fd);
        return fsc_error(FSC_ERR_FORMAT, "%s: larger than a flight record can be", path);
    }
    size_t want = (size_t)sb.st_size, n = 0;
    char *buf = malloc(want + 1);
    while (buf && n < want) {
        ssize_t r = read(fd, buf + n, want - n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        n += (size_t)r;
    }
    close(fd);
    if (!buf) return fsc_error(FSC_ERR_NOMEM, "%s: out of memory", path);
    if (n != want) {
        free(buf);
        return fsc_error(FSC_ERR_IO, "%s: cannot read it (%zu of %zu bytes)", path, n, want);
    }
    buf[n] = 0;
    *text = buf, *len = n;
    return FSC_OK;
}

/* Every record of dir into recs (FLR_MAX_WORLD slots), what was wrong with the others into notes. */
static int read_records(DIR *d, const char *dir, flr_record **recs, out_note *notes) {
    int found = 0;
    for (struct dirent *de; (de = readdir(d)) != NULL;) {
        int w = flight_rank_of_name(de->d_name, FLR_MAX_WORLD);
        if (w < 0) continue;
        char path[4096], *text = NULL;
        size_t len = 0;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        flr_record *r = NULL;
        fsc_status s = read_file(path, &text, &len);
        if (s == FSC_OK) s = flr_parse(text, len, path, &r), free(text);
        if (s == FSC_OK && r->rank != w) {
            s = fsc_error(FSC_ERR_FORMAT, "%s: holds the record of rank %d", path, r->rank);
            flr_free(r), r = NULL;
        }
        if (s != FSC_OK) {
            note(notes, "damaged record: %s (rank %d counted as silent)\n", fsc_last_error(), w);
            continue;
        }
        recs[w] = r;
        found++;
    }
    return found;
}

fsc_status fsc_flight_diagnose_dir(const char *dir, char *report, size_t cap) {
    if (!report || !cap) return fsc_error(FSC_ERR_INVALID, "fsc_flight_diagnose_dir: no report buffer");
    report[0] = 0;
    if (!dir) return fsc_error(FSC_ERR_INVALID, "fsc_flight_diagnose_dir: dir is NULL");
    DIR *d = opendir(dir);
    if (!d) return fsc_error(FSC_ERR_IO, "%s: cannot list the flight records' directory", dir);
    flr_record **recs = calloc(FLR_MAX_WORLD, sizeof *recs);
    out_note *notes = calloc(1, sizeof *notes);
    if (!recs || !notes) {
        closedir(d), free(recs), free(notes);
        return fsc_error(FSC_ERR_NOMEM, "fsc_flight_diagnose_dir: out of memory");
    }
    int found = read_records(d, dir, recs, notes), world = 0, first = -1;
    closedir(d);
    for (int w = 0; w < FLR_MAX_WORLD; w++) {
        if (!recs[w]) continue;
        if (first < 0) first = w;
        if (recs[w]->world != recs[first]->world)
            note(notes, "note: rank %d's record says the world has %d ranks, rank %d's %d\n", w, recs[w]->world,
                 first, recs[first]->world);
        world = recs[w]->world > world ? recs[w]->world : world;
    }
    fsc_status s = FSC_OK;
    if (!found)
        s = fsc_error(FSC_ERR_FORMAT, "%s holds no readable flight record (flight-rank-N.json)%s%.3000s", dir,
                      notes->len ? ": " : "", notes->buf);
    else flr_diagnose(recs, world, notes->buf, report, cap);
    for (int w = 0; w < FLR_MAX_WORLD; w++) flr_free(recs[w]);
    free(recs), free(notes);
    return s;
}
