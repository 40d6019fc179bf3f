/* A timeline of one rank for Chrome's and Perfetto's trace viewers (the JSON trace event format: open the file
 * at https://ui.perfetto.dev or chrome://tracing). One recorder per rank, owned by the caller and attached to
 * what should record into it:
 *   fsc_trace *t;  fsc_trace_create(&(fsc_trace_opts){ .rank = r->rank }, &t);
 *   fsc_comm_set_trace(r->comm, t);      every collective of the world and of the groups split from it later
 *   fsc_engine_set_trace(e, t);          each layer's forward and backward, the step, the optimizer, checkpoints
 *   ... train ...
 *   fsc_trace_write(t, "trace/rank0.json");  fsc_trace_free(t);
 * With opts.path the recorder also streams to that file as it goes: each span is written when it ends, and the
 * file is flushed whenever no span is open (after each step), so a run killed midway keeps the spans it finished
 * (a file without its closing "]" line that tools/trace_merge reads); fsc_trace_write to the same path, or
 * fsc_trace_free, writes the spans still open and the end of the file.
 * Events are spans ("X" events: a start and a duration, in microseconds) with a category ("layer", "comm",
 * "wait", "step", "optim", "ckpt" or the caller's), a name, and for collectives the bytes (comm.h's count: what
 * a ring algorithm sends per rank) and the group's name; a span may carry one numeric argument of the caller's
 * (fsc_trace_arg: the engine's "step" and "layer"). Spans nest: begin/end pairs on one rank form a stack.
 * A collective's span lasts from the call to its return, so it includes the time spent waiting for the other
 * ranks of the group to arrive; barriers are recorded in the "wait" category. An asynchronous collective
 * (fsc_comm_i<op>) is recorded when it is waited for, its span the wait alone (what was not overlapped).
 *
 * Memory is bounded: a recorder keeps at most max_events events (about 150 bytes each, allocated as they come);
 * later events are dropped and counted (fsc_trace_dropped), and the file says how many (otherData.dropped and an
 * instant event "trace full" at the point it filled up). A recorder is used by one thread (its rank's). Every
 * function accepts t == NULL and then does nothing, so code can record unconditionally.
 * Not a profiler of kernels: device work is not timed separately (on cuda a span ends when the host returns). */
#ifndef FSC_TRACE_H
#define FSC_TRACE_H
#include "export.h"
#include <stddef.h>
#include "status.h"

FSC_BEGIN_DECLS

typedef struct fsc_trace fsc_trace;

typedef struct {
    int rank;          /* the process of the trace ("pid"), shown as "rank N" */
    size_t max_events; /* events kept at most (0: FSC_TRACE_DEFAULT_EVENTS) */
    double origin_us;  /* timestamps count from this fsc_trace_now_us() value (0: the recorder's creation); give
                        * every rank of a run the same origin to line their files up */
    const char *path;  /* NULL: events in memory only; else also streamed to this file (replaced), see above */
} fsc_trace_opts;

#define FSC_TRACE_DEFAULT_EVENTS ((size_t)1 << 18)
#define FSC_TRACE_MAX_DEPTH 32 /* nesting depth; deeper spans are counted as dropped */

/* The defaults: rank 0, FSC_TRACE_DEFAULT_EVENTS, origin at creation, no stream. A stream's file that cannot be
 * created is refused (FSC_ERR_IO naming it). */
fsc_trace_opts fsc_trace_opts_default(void);
fsc_status fsc_trace_create(const fsc_trace_opts *o, fsc_trace **out);
void fsc_trace_free(fsc_trace *t);

/* The clock of the timestamps, in microseconds: CLOCK_MONOTONIC (shared by the ranks of a machine), or on a rank
 * of a simulated cluster run with a virtual clock (cluster.h: sim_clock) that rank's simulated time. */
double fsc_trace_now_us(void);

/* A span: begin opens it (name printf-style, at most 47 characters kept), end closes the innermost open one. */
void fsc_trace_begin(fsc_trace *t, const char *cat, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
void fsc_trace_end(fsc_trace *t);
/* A numeric argument of the innermost open span (its "args": {key: value}; key at most 15 characters kept; a
 * second call replaces the first); nothing when no span is open. The keys "bytes" and "group" are fsc_trace_span's
 * (the bytes a collective moved, the name of its group): a call with either is ignored, so that an event's args
 * never hold a key twice and a reader's sum of "bytes" counts only collectives. */
void fsc_trace_arg(fsc_trace *t, const char *key, double value);
/* A finished span from start_us (fsc_trace_now_us) to now, with the bytes it moved and the group it ran on
 * (group may be NULL): what the communicator records for each collective. */
void fsc_trace_span(fsc_trace *t, const char *cat, const char *name, double start_us, double bytes,
                    const char *group);

/* Events kept, and events dropped because the recorder was full (or nested deeper than FSC_TRACE_MAX_DEPTH). */
size_t fsc_trace_count(const fsc_trace *t);
size_t fsc_trace_dropped(const fsc_trace *t);
/* The capacity in force (max_events). */
size_t fsc_trace_capacity(const fsc_trace *t);

/* Write the events as one JSON object {"traceEvents": [...], ...} to path (replaced if it exists; written to
 * path.tmp, then renamed, so a reader never sees half a file). Spans still open are written up to now. When path
 * is the recorder's stream (opts.path), the stream is finished in place instead: the spans still open, the end of
 * the file; later events are kept in memory only. */
fsc_status fsc_trace_write(fsc_trace *t, const char *path);

FSC_END_DECLS

#endif
