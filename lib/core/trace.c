/* The per-rank timeline recorder of trace.h: a growing array of finished or open spans (bounded by max_events), a
 * stack of the open ones, and the writer of the JSON trace event format: the whole file at once (fsc_trace_write), or
 * a stream to opts.path that gets each span as it finishes, flushed whenever no span is open, and is closed (the
 * open spans, the trailer) by fsc_trace_write to that path or fsc_trace_free. Not thread-safe by design: one
 * rank, one thread, one recorder. The library records into it from comm.c (collectives), engine.c (layers, step,
 * optimizer) and lib/ckpt (checkpoint saves); nothing here knows those. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "core/json_str_impl.h"
#include "core/locale_impl.h"
#include "fsc/trace.h"
#include "core/clock_impl.h"
#include "core/trace_impl.h"

typedef struct {
    double ts, dur;  /* microseconds from the origin; dur < 0 while open */
    double bytes;    /* < 0: none */
    char cat[12];
    char name[48];
    char group[40];
    char key[16];    /* the caller's numeric argument (fsc_trace_arg); "" for none */
    double val;
} trace_event;

struct fsc_trace {
    int rank;
    size_t max, n, cap, dropped;
    double origin, full_at; /* full_at: when the first event was dropped (< 0: never) */
    trace_event *ev;
    long open[FSC_TRACE_MAX_DEPTH]; /* index of each open span, -1 for one that was dropped */
    int depth, lost_depth;          /* lost_depth: begins past FSC_TRACE_MAX_DEPTH not on the stack */
    FILE *out;                      /* the stream to path, NULL when none or once closed */
    char *path;
    fsc_trace_place place;          /* where the rank sits (trace_impl.h); pp 0: not told */
};

fsc_trace_opts fsc_trace_opts_default(void) {
    return (fsc_trace_opts){ .rank = 0, .max_events = 0, .origin_us = 0, .path = NULL };
}

static void put_str(FILE *f, const char *s);
static void put_head(FILE *f, int rank);
static void put_event(FILE *f, const trace_event *e, double dur, int rank);
static void put_place(FILE *f, const fsc_trace_place *p, int rank);
static fsc_status stream_close(fsc_trace *t);

/* The stream's file and its first lines, flushed (an empty trace a reader can already merge). */
static fsc_status stream_open(fsc_trace *t, const char *path) {
    size_t n = strlen(path) + 1;
    if (!(t->path = malloc(n))) return fsc_error(FSC_ERR_NOMEM, "fsc_trace_create: out of memory");
    memcpy(t->path, path, n);
    if (!(t->out = fopen(path, "we"))) /* close-on-exec: a child the host program starts does not hold it */
        return fsc_error(FSC_ERR_IO, "trace %s: cannot create: %s", path, strerror(errno));
    put_head(t->out, t->rank);
    if (fflush(t->out) != 0) return fsc_error(FSC_ERR_IO, "trace %s: write failed: %s", path, strerror(errno));
    return FSC_OK;
}

double fsc_trace_now_us(void) { return fsc_clock_now() * 1e6; }

fsc_status fsc_trace_create(const fsc_trace_opts *o, fsc_trace **out) {
    FSC_CHECK_ARG(out);
    *out = NULL;
    fsc_trace_opts d = o ? *o : fsc_trace_opts_default();
    if (d.rank < 0) return fsc_error(FSC_ERR_INVALID, "fsc_trace_create: rank %d is negative", d.rank);
    if (!(d.origin_us >= 0) || !isfinite(d.origin_us))
        return fsc_error(FSC_ERR_INVALID, "fsc_trace_create: origin_us %g must be finite and >= 0", d.origin_us);
    fsc_trace *t = calloc(1, sizeof *t);
    if (!t) return fsc_error(FSC_ERR_NOMEM, "fsc_trace_create: out of memory");
    t->rank = d.rank;
    t->max = d.max_events ? d.max_events : FSC_TRACE_DEFAULT_EVENTS;
    t->origin = d.origin_us > 0 ? d.origin_us : fsc_trace_now_us();
    t->full_at = -1;
    fsc_status s = d.path && *d.path ? stream_open(t, d.path) : FSC_OK;
    if (s != FSC_OK) {
        fsc_trace_free(t);
        return s;
    }
    *out = t;
    return FSC_OK;
}

void fsc_trace_free(fsc_trace *t) {
    if (!t) return;
    (void)stream_close(t); /* a stream not yet closed by fsc_trace_write: closed now, its errors unreported */
    free(t->path);
    free(t->ev);
    free(t);
}

/* A finished event onto the stream; flushed when no span is open (between steps, not inside a layer). */
static void stream_put(fsc_trace *t, const trace_event *e) {
    if (!t->out) return;
    put_event(t->out, e, e->dur, t->rank);
    if (t->depth == 0) fflush(t->out);
}

static int place_ok(const fsc_trace_place *p) {
    return p->pp >= 1 && p->dp >= 1 && p->tp >= 1 && p->stage >= 0 && p->stage < p->pp && p->data >= 0 &&
           p->data < p->dp && p->tensor >= 0 && p->tensor < p->tp;
}

void fsc_trace_set_place(fsc_trace *t, const fsc_trace_place *p) {
    if (!t || !p || !place_ok(p)) return;
    t->place = *p;
    if (t->place.chunks < 1) t->place.chunks = 1;
    if (!t->out) return;
    put_place(t->out, &t->place, t->rank);
    fflush(t->out); /* once per engine attached, even inside a span: a killed run's file says it too */
}

size_t fsc_trace_count(const fsc_trace *t) { return t ? t->n : 0; }
size_t fsc_trace_dropped(const fsc_trace *t) { return t ? t->dropped : 0; }
size_t fsc_trace_capacity(const fsc_trace *t) { return t ? t->max : 0; }

/* A new event slot, or NULL (counted as dropped) when the recorder is full or out of memory. */
static trace_event *add(fsc_trace *t, double now) {
    if (t->n == t->cap && t->n < t->max) {
        size_t c = t->cap ? 2 * t->cap : 1024;
        if (c > t->max) c = t->max;
        trace_event *ev = realloc(t->ev, c * sizeof *ev);
        if (ev) t->ev = ev, t->cap = c;
    }
    if (t->n == t->cap) {
        if (!t->dropped) t->full_at = now - t->origin;
        t->dropped++;
        return NULL;
    }
    trace_event *e = &t->ev[t->n++];
    memset(e, 0, sizeof *e);
    e->ts = now - t->origin;
    e->dur = -1;
    e->bytes = -1;
    return e;
}

static void copy(char *dst, size_t cap, const char *src) {
    snprintf(dst, cap, "%s", src ? src : "");
}

void fsc_trace_begin(fsc_trace *t, const char *cat, const char *fmt, ...) {
    if (!t) return;
    if (t->depth >= FSC_TRACE_MAX_DEPTH) {
        t->lost_depth++;
        t->dropped++;
        return;
    }
    trace_event *e = add(t, fsc_trace_now_us());
    if (e) {
        copy(e->cat, sizeof e->cat, cat);
        if (fmt) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(e->name, sizeof e->name, fmt, ap);
            va_end(ap);
        }
    }
    t->open[t->depth++] = e ? (long)(e - t->ev) : -1;
}

void fsc_trace_end(fsc_trace *t) {
    if (!t) return;
    if (t->lost_depth) {
        t->lost_depth--;
        return;
    }
    if (t->depth == 0) return; /* an end without a begin: nothing to close */
    long i = t->open[--t->depth];
    if (i >= 0) {
        trace_event *e = &t->ev[i];
        e->dur = fsc_trace_now_us() - t->origin - e->ts;
        if (e->dur < 0) e->dur = 0;
        stream_put(t, e);
    }
}

/* The args fsc_trace_span writes (put_event): not the caller's (trace.h) */
static int reserved_key(const char *key) { return !strcmp(key, "bytes") || !strcmp(key, "group"); }

void fsc_trace_arg(fsc_trace *t, const char *key, double value) {
    if (!t || !key || reserved_key(key) || t->lost_depth || t->depth == 0) return;
    long i = t->open[t->depth - 1];
    if (i < 0) return;
    copy(t->ev[i].key, sizeof t->ev[i].key, key);
    t->ev[i].val = value;
}

void fsc_trace_span(fsc_trace *t, const char *cat, const char *name, double start_us, double bytes,
                    const char *group) {
    if (!t) return;
    double now = fsc_trace_now_us();
    trace_event *e = add(t, now);
    if (!e) return;
    if (!isfinite(start_us) || start_us > now) start_us = now; /* a span of no length, not "ts":nan */
    e->ts = start_us - t->origin;
    e->dur = now - start_us;
    e->bytes = bytes;
    copy(e->cat, sizeof e->cat, cat);
    copy(e->name, sizeof e->name, name);
    copy(e->group, sizeof e->group, group);
    stream_put(t, e);
}

/* s as a JSON string (json_str_impl.h: escaped, valid UTF-8). */
static void put_str(FILE *f, const char *s) { fsc_json_put_str(f, s); }

/* x with fmt, or null when it is inf or NaN (JSON has neither: "nan" would make the file unreadable). */
static void put_num(FILE *f, const char *fmt, double x) {
    if (isfinite(x)) fprintf(f, fmt, x);
    else fputs("null", f);
}

static void put_head(FILE *f, int rank) {
    fprintf(f, "{\"traceEvents\":[\n");
    fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"rank %d\"}},\n",
            rank, rank);
    fprintf(f, "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"sort_index\":%d}}",
            rank, rank);
}

/* The rank's place as a metadata event on a line of its own (as put_event's): Chrome's trace viewer shows the
 * "labels" text under the process's name; the tools read the numbers (docs/observability.md). */
static void put_place(FILE *f, const fsc_trace_place *p, int rank) {
    fprintf(f, ",\n{\"name\":\"process_labels\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"labels\":"
               "\"pipeline stage %d of %d, data rank %d of %d, tensor rank %d of %d\",\"pp\":%d,\"stage\":%d,\"dp\":%d,"
               "\"data\":%d,\"tp\":%d,\"tensor\":%d,\"chunks\":%d,\"placement\":\"%s\"}}",
            rank, p->stage, p->pp, p->data, p->dp, p->tensor, p->tp, p->pp, p->stage, p->dp, p->data, p->tp, p->tensor,
            p->chunks, p->vshape ? "v" : "loop");
}

/* One event on a line of its own, after the comma that ends the line before (tools/trace_merge's layout). */
static void put_event(FILE *f, const trace_event *e, double dur, int rank) {
    const locale_t before = fsc_numbers_c(); /* 1.5, never 1,5: JSON whatever the host's LC_NUMERIC */
    fprintf(f, ",\n{\"name\":");
    put_str(f, e->name);
    fprintf(f, ",\"cat\":");
    put_str(f, e->cat);
    fprintf(f, ",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,\"tid\":0", e->ts, dur < 0 ? 0 : dur, rank);
    if (e->bytes >= 0 || e->group[0] || e->key[0]) {
        const char *sep = "";
        fprintf(f, ",\"args\":{");
        if (e->bytes >= 0) fputs("\"bytes\":", f), put_num(f, "%.0f", e->bytes), sep = ",";
        if (e->group[0]) {
            fprintf(f, "%s\"group\":", sep), sep = ",";
            put_str(f, e->group);
        }
        if (e->key[0]) {
            fprintf(f, "%s", sep);
            put_str(f, e->key);
            fputc(':', f);
            put_num(f, "%.17g", e->val);
        }
        fputc('}', f);
    }
    fputc('}', f);
    fsc_numbers_back(before);
}

/* The end of a file: the "trace full" marker when events were dropped, the closing bracket and otherData. */
static void put_tail(FILE *f, const fsc_trace *t, double now) {
    const locale_t before = fsc_numbers_c();
    if (t->dropped)
        fprintf(f, ",\n{\"name\":\"trace full\",\"cat\":\"trace\",\"ph\":\"i\",\"s\":\"p\",\"ts\":%.3f,\"pid\":%d,"
                   "\"tid\":0,\"args\":{\"dropped\":%zu,\"max_events\":%zu}}",
                t->full_at >= 0 ? t->full_at : now, t->rank, t->dropped, t->max);
    fprintf(f, "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"rank\":%d,\"events\":%zu,\"dropped\":%zu,"
               "\"max_events\":%zu}}\n", t->rank, t->n, t->dropped, t->max);
    fsc_numbers_back(before);
}

/* Flush, sync and close f (the file path names in messages); FSC_OK or the first failure. */
static fsc_status finish_file(FILE *f, const char *path) {
    int bad = ferror(f);
    if (fflush(f) != 0) bad = 1;
    if (!bad && fsync(fileno(f)) != 0 && errno != EINVAL && errno != EROFS) bad = 1;
    int e = errno;
    if (fclose(f) != 0) bad = 1, e = errno;
    return bad ? fsc_error(FSC_ERR_IO, "trace %s: write failed: %s", path, strerror(e)) : FSC_OK;
}

/* The stream's end: the spans still open (up to now), the tail; later events are kept in memory only. */
static fsc_status stream_close(fsc_trace *t) {
    if (!t->out) return FSC_OK;
    const double now = fsc_trace_now_us() - t->origin;
    for (int k = 0; k < t->depth; k++)
        if (t->open[k] >= 0) put_event(t->out, &t->ev[t->open[k]], now - t->ev[t->open[k]].ts, t->rank);
    put_tail(t->out, t, now);
    fsc_status s = finish_file(t->out, t->path);
    t->out = NULL;
    return s;
}

fsc_status fsc_trace_write(fsc_trace *t, const char *path) {
    if (!t) return fsc_error(FSC_ERR_INVALID, "fsc_trace_write: no recorder (t is NULL)");
    if (!path || !*path) return fsc_error(FSC_ERR_INVALID, "fsc_trace_write: no path");
    if (t->out && !strcmp(path, t->path)) return stream_close(t); /* the stream's own file: finished in place */
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 5);
    if (!tmp) return fsc_error(FSC_ERR_NOMEM, "fsc_trace_write: out of memory");
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    FILE *f = fopen(tmp, "we");
    if (!f) {
        fsc_status s = fsc_error(FSC_ERR_IO, "trace %s: cannot create: %s", tmp, strerror(errno));
        free(tmp);
        return s;
    }
    const double now = fsc_trace_now_us() - t->origin;
    put_head(f, t->rank);
    if (t->place.pp) put_place(f, &t->place, t->rank);
    for (size_t i = 0; i < t->n; i++) /* still open: up to now */
        put_event(f, &t->ev[i], t->ev[i].dur >= 0 ? t->ev[i].dur : now - t->ev[i].ts, t->rank);
    put_tail(f, t, now);
    fsc_status s = finish_file(f, tmp);
    if (s != FSC_OK) {
        unlink(tmp);
    } else if (rename(tmp, path) != 0) {
        s = fsc_error(FSC_ERR_IO, "trace %s: cannot rename %s into place: %s", path, tmp, strerror(errno));
        unlink(tmp);
    }
    free(tmp);
    return s;
}
