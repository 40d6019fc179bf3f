/* The per-rank timeline recorder of trace.h: a growing array of finished or open spans (bounded by max_events), a
 * stack of the open ones, and the writer of the JSON trace event format. Not thread-safe by design: one rank,
 * one thread, one recorder. The library records into it from comm.c (collectives), engine.c (layers, step,
 * optimizer) and lib/ckpt (checkpoint saves); nothing here knows those. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "fsc/trace.h"

typedef struct {
    double ts, dur;  /* microseconds from the origin; dur < 0 while open */
    double bytes;    /* < 0: none */
    char cat[12];
    char name[48];
    char group[40];
} trace_event;

struct fsc_trace {
    int rank;
    size_t max, n, cap, dropped;
    double origin, full_at; /* full_at: when the first event was dropped (< 0: never) */
    trace_event *ev;
    long open[FSC_TRACE_MAX_DEPTH]; /* index of each open span, -1 for one that was dropped */
    int depth, lost_depth;          /* lost_depth: begins past FSC_TRACE_MAX_DEPTH not on the stack */
};

fsc_trace_opts fsc_trace_opts_default(void) { return (fsc_trace_opts){ .rank = 0, .max_events = 0, .origin_us = 0 }; }

double fsc_trace_now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

fsc_status fsc_trace_create(const fsc_trace_opts *o, fsc_trace **out) {
    FSC_CHECK_ARG(out);
    *out = NULL;
    fsc_trace_opts d = o ? *o : fsc_trace_opts_default();
    if (d.rank < 0) return fsc_error(FSC_ERR_INVALID, "fsc_trace_create: rank %d is negative", d.rank);
    if (!(d.origin_us >= 0)) return fsc_error(FSC_ERR_INVALID, "fsc_trace_create: origin_us must be >= 0");
    fsc_trace *t = calloc(1, sizeof *t);
    if (!t) return fsc_error(FSC_ERR_NOMEM, "fsc_trace_create: out of memory");
    t->rank = d.rank;
    t->max = d.max_events ? d.max_events : FSC_TRACE_DEFAULT_EVENTS;
    t->origin = d.origin_us > 0 ? d.origin_us : fsc_trace_now_us();
    t->full_at = -1;
    *out = t;
    return FSC_OK;
}

void fsc_trace_free(fsc_trace *t) {
    if (!t) return;
    free(t->ev);
    free(t);
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
    }
}

void fsc_trace_span(fsc_trace *t, const char *cat, const char *name, double start_us, double bytes,
                    const char *group) {
    if (!t) return;
    double now = fsc_trace_now_us();
    trace_event *e = add(t, now);
    if (!e) return;
    e->ts = start_us - t->origin;
    e->dur = now - start_us;
    if (e->dur < 0) e->dur = 0;
    e->bytes = bytes;
    copy(e->cat, sizeof e->cat, cat);
    copy(e->name, sizeof e->name, name);
    copy(e->group, sizeof e->group, group);
}

/* s as a JSON string (quotes, backslashes and control characters escaped). */
static void put_str(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

fsc_status fsc_trace_write(const fsc_trace *t, const char *path) {
    if (!t) return fsc_error(FSC_ERR_INVALID, "fsc_trace_write: no recorder (t is NULL)");
    if (!path || !*path) return fsc_error(FSC_ERR_INVALID, "fsc_trace_write: no path");
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 5);
    if (!tmp) return fsc_error(FSC_ERR_NOMEM, "fsc_trace_write: out of memory");
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        fsc_status s = fsc_error(FSC_ERR_IO, "trace %s: cannot create: %s", tmp, strerror(errno));
        free(tmp);
        return s;
    }
    const double now = fsc_trace_now_us() - t->origin;
    fprintf(f, "{\"traceEvents\":[\n");
    fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"rank %d\"}},\n",
            t->rank, t->rank);
    fprintf(f, "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"sort_index\":%d}}",
            t->rank, t->rank);
    for (size_t i = 0; i < t->n; i++) {
        const trace_event *e = &t->ev[i];
        double dur = e->dur >= 0 ? e->dur : now - e->ts; /* still open: up to now */
        fprintf(f, ",\n{\"name\":");
        put_str(f, e->name);
        fprintf(f, ",\"cat\":");
        put_str(f, e->cat);
        fprintf(f, ",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,\"tid\":0", e->ts, dur < 0 ? 0 : dur, t->rank);
        if (e->bytes >= 0 || e->group[0]) {
            fprintf(f, ",\"args\":{");
            if (e->bytes >= 0) fprintf(f, "\"bytes\":%.0f%s", e->bytes, e->group[0] ? "," : "");
            if (e->group[0]) {
                fprintf(f, "\"group\":");
                put_str(f, e->group);
            }
            fputc('}', f);
        }
        fputc('}', f);
    }
    if (t->dropped)
        fprintf(f, ",\n{\"name\":\"trace full\",\"cat\":\"trace\",\"ph\":\"i\",\"s\":\"p\",\"ts\":%.3f,\"pid\":%d,"
                   "\"tid\":0,\"args\":{\"dropped\":%zu,\"max_events\":%zu}}",
                t->full_at >= 0 ? t->full_at : now, t->rank, t->dropped, t->max);
    fprintf(f, "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"rank\":%d,\"events\":%zu,\"dropped\":%zu,"
               "\"max_events\":%zu}}\n", t->rank, t->n, t->dropped, t->max);
    int bad = ferror(f);
    if (fflush(f) != 0) bad = 1;
    if (!bad && fsync(fileno(f)) != 0 && errno != EINVAL && errno != EROFS) bad = 1;
    int e = errno;
    if (fclose(f) != 0) bad = 1, e = errno;
    fsc_status s = FSC_OK;
    if (bad) {
        s = fsc_error(FSC_ERR_IO, "trace %s: write failed: %s", tmp, strerror(e));
        unlink(tmp);
    } else if (rename(tmp, path) != 0) {
        s = fsc_error(FSC_ERR_IO, "trace %s: cannot rename %s into place: %s", path, tmp, strerror(errno));
        unlink(tmp);
    }
    free(tmp);
    return s;
}
