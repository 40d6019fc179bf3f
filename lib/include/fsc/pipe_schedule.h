/* Pipeline schedules as data (docs/pipeline.md): a schedule is, for every rank of a pipeline, the list of
 * actions that rank runs in one step, in order. An action is the forward (F), the backward (B) or the weight
 * gradient (W) of micro-batch `micro` on the rank's chunk `chunk` (a contiguous range of layers; without virtual
 * stages every rank has one chunk, 0). A list without W runs the whole backward in B; a list with W (zero-bubble
 * schedules) runs in B only the input gradient (and the whole backward of layers that do not split theirs:
 * layers.h) and in W, later, the parameter gradients. The boundary messages are part of the actions: an F
 * receives its input from the previous stage at its start and sends its output to the next stage at its end, a
 * B receives the output gradient at its start and sends the input gradient at its end (tied tensors ride along:
 * pipe.c); a W sends and receives nothing.
 *
 * Stages: with p ranks and v chunks per rank the model is cut into S = p x v stages, placed on the ranks in a
 * loop or a V. Loop (every schedule but zbv): rank r holds stages r, r + p, ..., r + (v-1) p (Megatron's
 * interleaving: chunk c of rank r is stage c p + r). V (zbv, v = 2): rank r holds stage r (chunk 0) and stage
 * 2p - 1 - r (chunk 1), so a micro-batch goes down the ranks and back up; the first rank holds the first and
 * the last stage, and the last rank hands its chunk 0's output to its own chunk 1.
 *
 * fsc_pipe_schedule_make builds a built-in schedule's list for one rank; fsc_pipe_schedule_validate checks
 * the lists of all ranks together, as the engine does before it runs one:
 *   - every action names a known kind, a micro-batch in [0, m) and a chunk in [0, v);
 *   - each rank runs F and B of every (micro-batch, chunk) exactly once, B after F, and on each chunk the
 *     forwards and the backwards in ascending micro-batch order (the order in which DDP accumulates the
 *     gradients and sums the losses: what makes every schedule bit-identical to it); a list with any W runs W of
 *     every (micro-batch, chunk) exactly once, after its B, and on each chunk in ascending micro-batch order
 *     (the weight gradients accumulate in W);
 *   - no rank can deadlock: all ranks' lists are run together with buffered sends and blocking receives,
 *     each stream (outputs into a rank, input gradients into a rank) first in, first out, and every receive
 *     must find its own message at the head of its stream.
 * The messages name the offending rank and action ("rank 1, action 3, B(mb 0, chunk 0)").
 *
 * A schedule of one's own: fsc_parallel_opts.schedule = FSC_SCHED_CUSTOM with actions[r] and nactions[r] the
 * lists of every pipeline rank r (and virtual_stages for chunks); the engine validates them as above when it
 * is made, and runs this rank's list in every step (a list with W and several chunks runs the Ws of the last
 * micro-batch at its end, highest chunk first, where the strategies reduce, unless they come in that order
 * already: Ws send nothing, so the messages and the bits stay those of the list). Its stages sit in a loop, or
 * with placement = FSC_PIPE_V (and virtual_stages 2) in zbv's V; the lists are then validated with
 * fsc_pipe_schedule_validate_placed. */
#ifndef FSC_PIPE_SCHEDULE_H
#define FSC_PIPE_SCHEDULE_H
#include "export.h"
#include "status.h"
#include "parallel.h"

FSC_BEGIN_DECLS

/* fsc_pipe_placement (FSC_PIPE_LOOP, FSC_PIPE_V): parallel.h */

typedef enum { FSC_ACT_FORWARD = 0, FSC_ACT_BACKWARD, FSC_ACT_WEIGHT } fsc_pipe_action_kind;

typedef struct fsc_pipe_action {
    fsc_pipe_action_kind kind;
    int micro; /* micro-batch, 0 .. m-1 */
    int chunk; /* this rank's chunk, 0 .. v-1 (stage chunk * p + rank) */
} fsc_pipe_action;

/* The placement of a built-in schedule's stages: FSC_PIPE_V for zbv, FSC_PIPE_LOOP for the others. */
fsc_pipe_placement fsc_pipe_schedule_placement(fsc_pipe_schedule kind);
/* The stage that chunk `chunk` of `rank` is, and the rank that holds `stage`, under placement pl with p ranks
 * (a stage's chunk is stage / p under both); -1 for an unknown placement, p < 1, a rank not in 0 .. p-1, a
 * negative chunk or stage, a V's chunk over 1 or stage past 2p - 1, a stage past INT_MAX. */
int fsc_pipe_stage_at(fsc_pipe_placement pl, int p, int rank, int chunk);
int fsc_pipe_stage_rank(fsc_pipe_placement pl, int p, int stage);

/* The actions of `rank` (0 .. p-1) under schedule `kind` with p ranks, v chunks per rank and m micro-batches:
 * *out (malloc'ed, fsc_pipe_schedule_free) holds *n actions (2 v m, or 3 v m with W). gpipe, 1f1b and zb-h1 need
 * v = 1, zbv v = 2. */
fsc_status fsc_pipe_schedule_make(fsc_pipe_schedule kind, int p, int v, int m, int rank, fsc_pipe_action **out,
                                  int *n);
void fsc_pipe_schedule_free(fsc_pipe_action *a);
/* FSC_OK, or FSC_ERR_INVALID naming the first offending rank and action (or the deadlock): lists[r] holds the
 * lens[r] actions of rank r (2 v m without W, 3 v m with), for r in 0 .. p-1. */
fsc_status fsc_pipe_schedule_validate(int p, int v, int m, const fsc_pipe_action *const *lists, const int *lens);
/* The same for stages placed by pl (fsc_pipe_schedule_placement; a V needs v = 2); _validate is the loop's. */
fsc_status fsc_pipe_schedule_validate_placed(fsc_pipe_placement pl, int p, int v, int m,
                                             const fsc_pipe_action *const *lists, const int *lens);

/* Schedules as text (docs/pipeline.md, "Schedules as text"): one line of actions per pipeline rank, in rank order,
 * each action written as PyTorch's pipelining writes one: its stage, its kind and its micro-batch ("0F3": stage 0's
 * forward of micro-batch 3; "6W1"), separated by spaces, tabs or commas; '#' starts a comment, blank lines are
 * skipped, and one line "placement loop" (the default) or "placement v" may come first. The ranks are the lines,
 * the chunks per rank v come from the highest stage (a V: 2) and the micro-batches m from the highest
 * micro-batch; every action's stage must be one of its rank's. */
typedef struct {
    fsc_pipe_placement placement;
    int p, v, m;               /* ranks, chunks per rank, micro-batches */
    fsc_pipe_action **lists;   /* (p) lists[r]: the lens[r] actions of rank r (the chunk, not the stage) */
    int *lens;
} fsc_pipe_schedule_lists;
/* Reads len bytes of text into *out (fsc_pipe_schedule_lists_free) and validates the lists as the engine does
 * (fsc_pipe_schedule_validate_placed); the messages name the line and the action. *out is zeroed on failure. */
fsc_status fsc_pipe_schedule_parse(const char *text, size_t len, fsc_pipe_schedule_lists *out);
/* fsc_pipe_schedule_parse for a pipeline of `ranks` ranks (0: as many as the text has lines of actions): a text
 * of another number of lines is refused before its stages are mapped to ranks (a line cut in two, two lines joined,
 * bare CR line ends), which would otherwise be validated as lists of another pipeline and refused for a stage, a
 * chunk or a deadlock the text does not have. */
fsc_status fsc_pipe_schedule_parse_ranks(const char *text, size_t len, int ranks, fsc_pipe_schedule_lists *out);
void fsc_pipe_schedule_lists_free(fsc_pipe_schedule_lists *s);
/* The text of p ranks' lists under placement pl with v chunks per rank (what fsc_pipe_schedule_parse reads back
 * into the same lists), with a comment line first: *len its length; written into buf with a NUL when cap > *len
 * (buf NULL and cap 0: only *len; a smaller cap is FSC_ERR_INVALID, the text cut). */
fsc_status fsc_pipe_schedule_format(fsc_pipe_placement pl, int p, int v, const fsc_pipe_action *const *lists,
                                    const int *lens, char *buf, size_t cap, size_t *len);

FSC_END_DECLS

#endif
