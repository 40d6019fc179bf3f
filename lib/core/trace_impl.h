/* Private to the library: what a rank's recorder (fsc/trace.h) is told about the rank beyond its number, so that a
 * reader of its file can tell a pipeline's stage from a data-parallel replica (tools/pipe_replay, pipe_timeline).
 * The engine tells it (fsc_engine_set_trace); trace.c writes it as a metadata event "process_labels"
 * (docs/observability.md). Not here: the spans (fsc/trace.h). */
#ifndef FSC_CORE_TRACE_IMPL_H
#define FSC_CORE_TRACE_IMPL_H
#include "fsc/trace.h"

/* Where the rank sits in world = dp x tp x pp (fsc_layout's sizes and this rank's coordinates). */
typedef struct {
    int pp, stage;  /* pipeline stages, this rank's (fsc_layout: pp, pipe) */
    int dp, data;   /* data-parallel ranks, this rank's */
    int tp, tensor; /* tensor-parallel ranks, this rank's */
    int chunks;     /* a stage's chunks per rank (virtual stages; 1 without them) */
    int vshape;     /* 1: the chunks sit in a V (zbv: rank r holds chunks r and 2 pp - 1 - r), 0: in a loop */
} fsc_trace_place;

/* Records p as the trace's "process_labels" event: written at the head of fsc_trace_write's files, and onto the
 * stream at once (one line, as every event) when the recorder streams. A later call replaces it (a stream then
 * holds both events: a reader takes the last). Nothing for t or p NULL, or a place with a size below 1 or a
 * coordinate outside its size (chunks 0 is read as 1). */
void fsc_trace_set_place(fsc_trace *t, const fsc_trace_place *p);

#endif
