/* Pipeline schedules as data (fsc/pipe_schedule.h): the built-in schedules as functions from (ranks p, chunks
 * per rank v, micro-batches m, rank) to a list of actions, and the validator the engine runs over every
 * rank's list before a pipeline runs one.
 *
 * GPipe: F 0..m-1, then B 0..m-1. 1F1B (PipeDream-flush) on rank r: w = min(p - r - 1, m) warm-up forwards,
 * then m - w rounds of one forward and one backward, then the w remaining backwards.
 * Interleaved 1F1B (Megatron-LM's forward_backward_pipelining_with_interleaving): rank r runs the v m virtual
 * micro-batches i = 0 .. v m - 1 in groups of p: forward i is micro-batch (i / (p v)) p + i % p on chunk
 * (i % (p v)) / p, backward i the same micro-batch on chunk v - 1 - (i % (p v)) / p; w = (p - r - 1) 2 +
 * (v - 1) p warm-up forwards (all of them when m = p), capped at v m, then rounds of forward w + i and
 * backward i, then the remaining backwards. It needs m to be a multiple of p, as Megatron does.
 * ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", the handcrafted schedule of 1F1B's memory): 1F1B's
 * forwards and backwards, each backward B followed by the W of the oldest micro-batch whose W is pending, except
 * that rank r lets its first r Ws wait (the last rank the most: p - 1), and runs them after its last B. With
 * equal F, B and W times the bubble falls from 1F1B's (p-1)(F+B+W) to (p-1)(F+B-W); rank r holds
 * min(p - r - 1, m) + 1 + r = p micro-batches (records live until their W), 1F1B's peak, which is rank 0's.
 * For m >= p no list holding at most p micro-batches on rank 0 has a step shorter than m (F+B+W) + (p-1)(F+B-W)
 * (docs/pipeline.md), and ZB-H1's is that with F = B = W, with B = 1.1 F, W = 0.8 F and other ratios where W is
 * not above B (test_pipe_sched_bounds).
 *
 * ZBV (Qi et al.'s zero-bubble V; PyTorch's ScheduleZBVZeroBubble): two chunks per rank placed in a V, rank r
 * holding stages r (chunk 0) and 2p - 1 - r (chunk 1), so a micro-batch goes down the ranks and back up, and
 * the first rank runs both the first and the last stage. With M' = max(m, 2p - 1) micro-batches (the actions
 * of those >= m are dropped) rank r runs: 2 (p - r) - 1 forwards of chunk 0; r pairs F chunk 1, F chunk 0;
 * p - r rounds F, B, W of chunk 1; then, while chunk 0 has forwards left or chunk 1 lags it, [F chunk 0],
 * B W chunk 0, F B W chunk 1; then r pairs B chunk 0, B chunk 1; p - r pairs B, W of chunk 0; the Ws left,
 * chunk 1's, then chunk 0's. Each W follows its chunk's Ws in ascending order. With F = B = W these lists take
 * the least step any list can, 2 m (F+B+W) + (p-1) F, for m >= 2p (the last rank's first action waits for p - 1
 * forwards), and under one F more with B = 1.1 F, W = 0.8 F (test_pipe_sched_bounds). With m < 2p the dropped
 * micro-batches leave holes, and up to 16 ranks the Ws are re-placed by a simulation (make_zbv, below): F and B
 * keep their order, the records held per rank do not grow, and the step shortens by up to a tenth.
 *
 * The validator's simulation: every rank has a position in its list; an action can run when what it
 * receives is at the head of its stream (sends are buffered, as the simulated and MPI communicators buffer
 * them and as pipe_link.c's asynchronous sends are). Runs go round the ranks until no rank can move; a rank
 * left with actions is deadlocked. Since sends never block, the order in which ranks are tried does not
 * change whether the whole runs to its end.
 * Not here: running a list (pipe.c). */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fsc/pipe_schedule.h"

#define MAX_RANKS (1 << 16)
#define MAX_CHUNKS (1 << 10)
#define MAX_ACTIONS (1L << 26) /* actions of one rank, 3 v m at most */

static fsc_status check_sizes(const char *what, int p, int v, int m) {
    if (p < 1 || p > MAX_RANKS) return fsc_error(FSC_ERR_INVALID, "%s: %d pipeline ranks (need 1 .. %d)", what, p, MAX_RANKS);
    if (v < 1 || v > MAX_CHUNKS)
        return fsc_error(FSC_ERR_INVALID, "%s: %d chunks per rank (need 1 .. %d)", what, v, MAX_CHUNKS);
    if (m < 1 || 3L * v * m > MAX_ACTIONS)
        return fsc_error(FSC_ERR_INVALID, "%s: %d micro-batches of %d chunks (need 1 .. %ld actions per rank)", what,
                         m, v, MAX_ACTIONS);
    return FSC_OK;
}

/* ---- the built-in schedules ---- */

static void put(fsc_pipe_action *a, int *n, fsc_pipe_action_kind kind, int micro, int chunk) {
    a[(*n)++] = (fsc_pipe_action){ kind, micro, chunk };
}

static void make_gpipe(int m, fsc_pipe_action *a, int *n) {
    for (int k = 0; k < m; k++) put(a, n, FSC_ACT_FORWARD, k, 0);
    for (int k = 0; k < m; k++) put(a, n, FSC_ACT_BACKWARD, k, 0);
}

static void make_1f1b(int p, int m, int rank, fsc_pipe_action *a, int *n) {
    const int warm = p - rank - 1 < m ? p - rank - 1 : m;
    for (int k = 0; k < warm; k++) put(a, n, FSC_ACT_FORWARD, k, 0);
    for (int k = 0; k < m - warm; k++) {
        put(a, n, FSC_ACT_FORWARD, warm + k, 0);
        put(a, n, FSC_ACT_BACKWARD, k, 0);
    }
    for (int k = m - warm; k < m; k++) put(a, n, FSC_ACT_BACKWARD, k, 0);
}

static void make_zb_h1(int p, int m, int rank, fsc_pipe_action *a, int *n) {
    const int warm = p - rank - 1 < m ? p - rank - 1 : m;
    int nb = 0, nw = 0; /* backwards and weight gradients put so far */
    for (int k = 0; k < warm; k++) put(a, n, FSC_ACT_FORWARD, k, 0);
    for (int k = 0; k < m; k++) {
        if (k < m - warm) put(a, n, FSC_ACT_FORWARD, warm + k, 0);
        put(a, n, FSC_ACT_BACKWARD, nb++, 0);
        if (nb > rank) put(a, n, FSC_ACT_WEIGHT, nw++, 0); /* rank r lets r of them wait */
    }
    while (nw < m) put(a, n, FSC_ACT_WEIGHT, nw++, 0);
}

/* ZBV on rank r (above): counters per chunk of the forwards, backwards and weight gradients put; an action of a
 * micro-batch >= m (M' > m) is dropped. */
typedef struct {
    fsc_pipe_action *a;
    int *n, m;
    int f[2], b[2], w[2];
} zbv_list;

static void zbv_put(zbv_list *z, fsc_pipe_action_kind kind, int chunk) {
    int *cnt = kind == FSC_ACT_FORWARD ? z->f : kind == FSC_ACT_BACKWARD ? z->b : z->w;
    const int k = cnt[chunk]++;
    if (k < z->m) put(z->a, z->n, kind, k, chunk);
}

static void zbv_hand(int p, int m, int rank, fsc_pipe_action *a, int *n) {
    const int mm = m > 2 * p - 1 ? m : 2 * p - 1;
    zbv_list z = { a, n, m, { 0, 0 }, { 0, 0 }, { 0, 0 } };
    for (int i = 0; i < 2 * (p - rank) - 1; i++) zbv_put(&z, FSC_ACT_FORWARD, 0);
    for (int i = 0; i < rank; i++) {
        zbv_put(&z, FSC_ACT_FORWARD, 1);
        zbv_put(&z, FSC_ACT_FORWARD, 0);
    }
    for (int i = 0; i < p - rank; i++) {
        zbv_put(&z, FSC_ACT_FORWARD, 1);
        zbv_put(&z, FSC_ACT_BACKWARD, 1);
        zbv_put(&z, FSC_ACT_WEIGHT, 1);
    }
    while (z.f[1] < z.f[0] || z.f[0] < mm) {
        if (z.f[0] < mm) zbv_put(&z, FSC_ACT_FORWARD, 0);
        zbv_put(&z, FSC_ACT_BACKWARD, 0);
        zbv_put(&z, FSC_ACT_WEIGHT, 0);
        zbv_put(&z, FSC_ACT_FORWARD, 1);
        zbv_put(&z, FSC_ACT_BACKWARD, 1);
        zbv_put(&z, FSC_ACT_WEIGHT, 1);
    }
    for (int i = 0; i < rank; i++) {
        zbv_put(&z, FSC_ACT_BACKWARD, 0);
        zbv_put(&z, FSC_ACT_BACKWARD, 1);
    }
    for (int i = 0; i < p - rank; i++) {
        zbv_put(&z, FSC_ACT_BACKWARD, 0);
        zbv_put(&z, FSC_ACT_WEIGHT, 0);
    }
    while (z.w[1] < z.b[1]) zbv_put(&z, FSC_ACT_WEIGHT, 1);
    while (z.w[0] < z.b[0]) zbv_put(&z, FSC_ACT_WEIGHT, 0);
}

/* ZBV with m < 2p (above): the hand lists' Ws re-placed on a model of the pipeline with fixed action times and free
 * messages. Every rank keeps its hand list's order of F and B; in simulated time, a free rank runs its next F or
 * B if what it receives is there (and, for an F, a record is free: no rank holds more than its hand list does),
 * else its oldest W waiting (B order: on rank 0 the head chunk's W of k before the embedding's), else waits. The
 * filled lists replace the hand ones where their step is shorter with F, B, W = 10, 11, 8 (fsc's measured ratios)
 * and no longer with F = B = W. Cost: every rank's list is simulated for each rank's make, so only up to
 * ZBV_FILL_RANKS ranks. */
#define ZBV_FILL_RANKS 16

typedef struct {
    int p, m, A;     /* ranks, micro-batches, actions of one rank (6 m) */
    long *done;      /* (4 p m) F then B of stage g, micro-batch k: end time, -1 not yet */
    long *heap;      /* (p A) end times not yet passed (zbv_fill) */
    int nheap;
} zbv_model;

static long *zbv_done(zbv_model *z, int kind, int g, int k) { return &z->done[((size_t)kind * 2 * z->p + g) * z->m + k]; }

/* When x, on rank r, may start as far as its inputs go (-1: not yet known); *t its time */
static long zbv_dep(zbv_model *z, int r, const fsc_pipe_action *x, const long *cost, long *t) {
    const int g = fsc_pipe_stage_at(FSC_PIPE_V, z->p, r, x->chunk), S = 2 * z->p;
    *t = cost[x->kind];
    if (x->kind == FSC_ACT_FORWARD) return g > 0 ? *zbv_done(z, 0, g - 1, x->micro) : 0;
    if (x->kind == FSC_ACT_BACKWARD) return g < S - 1 ? *zbv_done(z, 1, g + 1, x->micro) : *zbv_done(z, 0, g, x->micro);
    return *zbv_done(z, 1, g, x->micro);
}

static void zbv_mark(zbv_model *z, int r, const fsc_pipe_action *x, long end) {
    if (x->kind != FSC_ACT_WEIGHT)
        *zbv_done(z, x->kind == FSC_ACT_BACKWARD, fsc_pipe_stage_at(FSC_PIPE_V, z->p, r, x->chunk), x->micro) = end;
}

/* The step of the lists l[r] (A actions each) with action times cost[F, B, W]; -1 if they deadlock. */
static long zbv_replay(zbv_model *z, fsc_pipe_action *const *l, const long *cost, int *pos, long *tfree) {
    long span = 0;
    int left = z->p * z->A;
    for (size_t i = 0; i < (size_t)4 * z->p * z->m; i++) z->done[i] = -1;
    for (int r = 0; r < z->p; r++) pos[r] = 0, tfree[r] = 0;
    while (left > 0) {
        int moved = 0;
        for (int r = 0; r < z->p; r++)
            for (long t; pos[r] < z->A; pos[r]++, left--, moved = 1) {
                const long dep = zbv_dep(z, r, &l[r][pos[r]], cost, &t);
                if (dep < 0) break;
                tfree[r] = (dep > tfree[r] ? dep : tfree[r]) + t;
                zbv_mark(z, r, &l[r][pos[r]], tfree[r]);
                span = tfree[r] > span ? tfree[r] : span;
            }
        if (!moved) return -1;
    }
    return span;
}

static void heap_push(zbv_model *z, long x) {
    int i = z->nheap++;
    for (; i > 0 && z->heap[(i - 1) / 2] > x; i = (i - 1) / 2) z->heap[i] = z->heap[(i - 1) / 2];
    z->heap[i] = x;
}

static void heap_pop(zbv_model *z) {
    const long x = z->heap[--z->nheap];
    int i = 0;
    for (int c; (c = 2 * i + 1) < z->nheap; i = c) {
        if (c + 1 < z->nheap && z->heap[c + 1] < z->heap[c]) c++;
        if (z->heap[c] >= x) break;
        z->heap[i] = z->heap[c];
    }
    if (z->nheap > 0) z->heap[i] = x;
}

/* The hand lists h[r] with their Ws re-placed (above) into out[r]; 0, or -1 if the simulation stalls. lim[r]: the
 * records rank r's hand list holds at most. st: (5 p) ints of scratch, wq: (p 2 m) the Ws waiting per rank. */
static int zbv_fill(zbv_model *z, fsc_pipe_action *const *h, const int *lim, const long *cost, fsc_pipe_action **out,
                    int *st, fsc_pipe_action *wq, long *tfree) {
    const int p = z->p, A = z->A;
    int *pos = st, *len = st + p, *held = st + 2 * p, *wh = st + 3 * p, *wt = st + 4 * p;
    for (size_t i = 0; i < (size_t)4 * p * z->m; i++) z->done[i] = -1;
    for (int r = 0; r < p; r++) pos[r] = len[r] = held[r] = wh[r] = wt[r] = 0, tfree[r] = 0;
    z->nheap = 0;
    for (;;) {
        long t = -1;
        for (int r = 0; r < p; r++)
            if (len[r] < A && (t < 0 || tfree[r] < t)) t = tfree[r];
        if (t < 0) return 0; /* every list complete */
        int r = 0;
        for (; r < p; r++) {
            if (len[r] == A || tfree[r] != t) continue;
            while (pos[r] < A && h[r][pos[r]].kind == FSC_ACT_WEIGHT) pos[r]++;
            fsc_pipe_action x = { FSC_ACT_WEIGHT, -1, -1 };
            long dt;
            if (pos[r] < A) {
                const long dep = zbv_dep(z, r, &h[r][pos[r]], cost, &dt);
                if (dep >= 0 && dep <= t && (h[r][pos[r]].kind != FSC_ACT_FORWARD || held[r] < lim[r])) x = h[r][pos[r]++];
            }
            if (x.micro < 0 && wh[r] < wt[r]) x = wq[(size_t)r * 2 * z->m + wh[r]++];
            if (x.micro < 0) continue;
            dt = cost[x.kind];
            out[r][len[r]++] = x;
            tfree[r] = t + dt;
            zbv_mark(z, r, &x, tfree[r]);
            heap_push(z, tfree[r]);
            if (x.kind == FSC_ACT_FORWARD) held[r]++;
            else if (x.kind == FSC_ACT_WEIGHT) held[r]--;
            else wq[(size_t)r * 2 * z->m + wt[r]++] = (fsc_pipe_action){ FSC_ACT_WEIGHT, x.micro, x.chunk };
            break;
        }
        if (r < p) continue;
        /* nobody can run at t: the ranks waiting at t move to the next end of an action or free rank */
        while (z->nheap > 0 && z->heap[0] <= t) heap_pop(z);
        long next = z->nheap > 0 ? z->heap[0] : -1;
        for (int q = 0; q < p; q++)
            if (len[q] < A && tfree[q] > t && (next < 0 || tfree[q] < next)) next = tfree[q];
        if (next < 0) return -1;
        for (int q = 0; q < p; q++)
            if (len[q] < A && tfree[q] == t) tfree[q] = next;
    }
}

static fsc_status make_zbv(int p, int m, int rank, fsc_pipe_action *a, int *n) {
    zbv_hand(p, m, rank, a, n);
    if (m >= 2 * p || p > ZBV_FILL_RANKS) return FSC_OK;
    const int A = 6 * m;
    static const long ratios[3] = { 10, 11, 8 }, equal[3] = { 1, 1, 1 };
    zbv_model z = { p, m, A, malloc((size_t)4 * p * m * sizeof(long)), malloc((size_t)p * A * sizeof(long)), 0 };
    fsc_pipe_action *buf = malloc((size_t)p * (2 * A + 2 * m) * sizeof *buf), *h[ZBV_FILL_RANKS], *f[ZBV_FILL_RANKS];
    int *st = malloc((size_t)5 * p * sizeof(int)), lim[ZBV_FILL_RANKS];
    long tfree[ZBV_FILL_RANKS];
    if (!z.done || !z.heap || !buf || !st) {
        free(z.done), free(z.heap), free(buf), free(st);
        return fsc_error(FSC_ERR_NOMEM, "pipeline schedule zbv: out of memory for %d ranks' lists", p);
    }
    for (int r = 0; r < p; r++) {
        h[r] = buf + (size_t)r * A, f[r] = buf + (size_t)(p + r) * A;
        int len = 0, held = 0;
        zbv_hand(p, m, r, h[r], &len);
        lim[r] = 0;
        for (int i = 0; i < A; i++) {
            held += h[r][i].kind == FSC_ACT_FORWARD ? 1 : h[r][i].kind == FSC_ACT_WEIGHT ? -1 : 0;
            lim[r] = held > lim[r] ? held : lim[r];
        }
    }
    if (zbv_fill(&z, h, lim, ratios, f, st, buf + (size_t)2 * p * A, tfree) == 0) {
        const long hand = zbv_replay(&z, h, ratios, st, tfree), fill = zbv_replay(&z, f, ratios, st, tfree);
        const long hand1 = zbv_replay(&z, h, equal, st, tfree), fill1 = zbv_replay(&z, f, equal, st, tfree);
        if (fill >= 0 && fill1 >= 0 && fill < hand && fill1 <= hand1) memcpy(a, f[rank], (size_t)A * sizeof *a);
    }
    free(z.done), free(z.heap), free(buf), free(st);
    return FSC_OK;
}

/* Megatron's virtual micro-batch i: its micro-batch and chunk, forward or backward. */
static fsc_pipe_action virtual_action(int p, int v, int i, int fwd) {
    const int in_group = i % (p * v), chunk = in_group / p;
    return (fsc_pipe_action){ fwd ? FSC_ACT_FORWARD : FSC_ACT_BACKWARD, (i / (p * v)) * p + i % p,
                              fwd ? chunk : v - 1 - chunk };
}

static void make_interleaved(int p, int v, int m, int rank, fsc_pipe_action *a, int *n) {
    const int total = v * m;
    int warm = m == p ? total : (p - rank - 1) * 2 + (v - 1) * p;
    if (warm > total) warm = total;
    for (int i = 0; i < warm; i++) a[(*n)++] = virtual_action(p, v, i, 1);
    for (int i = 0; i < total - warm; i++) {
        a[(*n)++] = virtual_action(p, v, warm + i, 1);
        a[(*n)++] = virtual_action(p, v, i, 0);
    }
    for (int i = total - warm; i < total; i++) a[(*n)++] = virtual_action(p, v, i, 0);
}

fsc_status fsc_pipe_schedule_make(fsc_pipe_schedule kind, int p, int v, int m, int rank, fsc_pipe_action **out,
                                  int *n) {
    FSC_CHECK_ARG(out);
    FSC_CHECK_ARG(n);
    *out = NULL;
    *n = 0;
    FSC_TRY(check_sizes("pipeline schedule", p, v, m));
    if (rank < 0 || rank >= p)
        return fsc_error(FSC_ERR_INVALID, "pipeline schedule: rank %d of %d pipeline ranks", rank, p);
    if (kind != FSC_SCHED_GPIPE && kind != FSC_SCHED_1F1B && kind != FSC_SCHED_INTERLEAVED && kind != FSC_SCHED_ZB_H1 &&
        kind != FSC_SCHED_ZBV)
        return kind == FSC_SCHED_CUSTOM
            ? fsc_error(FSC_ERR_INVALID, "pipeline schedule custom: there is nothing to make, a custom schedule is "
                        "the caller's own lists (fsc_parallel_opts.actions)")
            : fsc_error(FSC_ERR_INVALID, "unknown pipeline schedule %d (gpipe, 1f1b, interleaved, zb-h1 or zbv; a "
                        "custom one is the caller's lists)", (int)kind);
    if (kind == FSC_SCHED_ZBV && v != 2)
        return fsc_error(FSC_ERR_INVALID, "pipeline schedule zbv runs two chunks per rank (placed in a V), not %d", v);
    if (kind == FSC_SCHED_INTERLEAVED && m % p != 0)
        return fsc_error(FSC_ERR_INVALID, "pipeline schedule interleaved: %d micro-batches are not a multiple of the "
                         "%d pipeline stages (Megatron's interleaving runs micro-batches in groups of the stages)", m, p);
    if (kind != FSC_SCHED_INTERLEAVED && kind != FSC_SCHED_ZBV && v != 1)
        return fsc_error(FSC_ERR_INVALID, "pipeline schedule %s runs one chunk per rank, not %d",
                         kind == FSC_SCHED_GPIPE ? "gpipe" : kind == FSC_SCHED_1F1B ? "1f1b" : "zb-h1", v);
    const int per = kind == FSC_SCHED_ZB_H1 || kind == FSC_SCHED_ZBV ? 3 : 2; /* actions per (micro-batch, chunk) */
    fsc_pipe_action *a = malloc((size_t)per * v * m * sizeof *a);
    if (!a) return fsc_error(FSC_ERR_NOMEM, "pipeline schedule: out of memory for %d actions", per * v * m);
    fsc_status st = FSC_OK;
    if (kind == FSC_SCHED_GPIPE) make_gpipe(m, a, n);
    else if (kind == FSC_SCHED_1F1B) make_1f1b(p, m, rank, a, n);
    else if (kind == FSC_SCHED_ZB_H1) make_zb_h1(p, m, rank, a, n);
    else if (kind == FSC_SCHED_ZBV) st = make_zbv(p, m, rank, a, n);
    else make_interleaved(p, v, m, rank, a, n);
    if (st != FSC_OK) {
        free(a);
        *n = 0;
        return st;
    }
    *out = a;
    return FSC_OK;
}

void fsc_pipe_schedule_free(fsc_pipe_action *a) { free(a); }

/* ---- the validator ---- */

/* "F(mb 2, chunk 0)" */
static const char *act_name(const fsc_pipe_action *a, char *buf, size_t cap) {
    static const char *const kinds[] = { "F", "B", "W" };
    snprintf(buf, cap, "%s(mb %d, chunk %d)", (unsigned)a->kind < 3 ? kinds[a->kind] : "?", a->micro, a->chunk);
    return buf;
}

/* One rank's list on its own: known kinds, ranges, each F and B once, B after F, ascending per chunk; with W
 * (withw) each W once, after its B, ascending per chunk. nx: (3 v) scratch, the next F, B and W of each chunk.
 * Returns what it found first: RANK_OK, RANK_ACTION (why: "action i, ..." about one action) or RANK_NEVER (why:
 * "never runs X(mb k, chunk c)"); the callers put the rank, and a wrong length's count, in front. */
enum { RANK_OK = 0, RANK_ACTION, RANK_NEVER };
#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
static int found(int what, char *why, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, n, fmt, ap);
    va_end(ap);
    return what;
}

static int check_rank(int v, int m, const fsc_pipe_action *a, int len, int withw, int *nx, char *why, size_t n) {
    static const char *const plural[] = { "forwards", "backwards", "weight gradients" };
    char nm[64];
    memset(nx, 0, (size_t)3 * v * sizeof *nx);
    for (int i = 0; i < len; i++) {
        const fsc_pipe_action *x = &a[i];
        if (x->kind != FSC_ACT_FORWARD && x->kind != FSC_ACT_BACKWARD && x->kind != FSC_ACT_WEIGHT)
            return found(RANK_ACTION, why, n, "action %d has unknown kind %d (F, B or W)", i, (int)x->kind);
        if (x->kind == FSC_ACT_WEIGHT && !withw)
            return found(RANK_ACTION, why, n, "action %d is a W but the list has %d actions (a list with W has 3 x "
                         "chunks x micro-batches: F, B and W of each)", i, len);
        if (x->micro < 0 || x->micro >= m || x->chunk < 0 || x->chunk >= v)
            return found(RANK_ACTION, why, n, "action %d, %s is out of range (%d micro-batches, %d chunks)", i,
                         act_name(x, nm, sizeof nm), m, v);
        int *next = &nx[3 * x->chunk + (int)x->kind];
        if (x->micro < *next)
            return found(RANK_ACTION, why, n, "action %d, %s runs a second time", i, act_name(x, nm, sizeof nm));
        if (x->micro > *next)
            return found(RANK_ACTION, why, n, "action %d, %s comes before micro-batch %d of its chunk (each chunk "
                         "runs its %s in ascending micro-batch order)", i, act_name(x, nm, sizeof nm), *next,
                         plural[x->kind]);
        if (x->kind != FSC_ACT_FORWARD && x->micro >= nx[3 * x->chunk + (int)x->kind - 1])
            return found(RANK_ACTION, why, n, "action %d, %s comes before its %s", i, act_name(x, nm, sizeof nm),
                         x->kind == FSC_ACT_BACKWARD ? "forward" : "backward B");
        (*next)++;
    }
    for (int c = 0; c < v; c++)
        for (int k = 0; k < 2 + withw; k++)
            if (nx[3 * c + k] < m)
                return found(RANK_NEVER, why, n, "never runs %s(mb %d, chunk %d)", k == 0 ? "F" : k == 1 ? "B" : "W",
                             nx[3 * c + k], c);
    return RANK_OK;
}

int fsc_pipe_stage_at(fsc_pipe_placement pl, int p, int rank, int chunk) {
    if ((pl != FSC_PIPE_LOOP && pl != FSC_PIPE_V) || p < 1 || rank < 0 || rank >= p || chunk < 0 ||
        (pl == FSC_PIPE_V && chunk > 1))
        return -1;
    const long long g = pl == FSC_PIPE_V ? (chunk == 0 ? rank : 2LL * p - 1 - rank) : (long long)chunk * p + rank;
    return g <= INT_MAX ? (int)g : -1;
}

int fsc_pipe_stage_rank(fsc_pipe_placement pl, int p, int stage) {
    if ((pl != FSC_PIPE_LOOP && pl != FSC_PIPE_V) || p < 1 || stage < 0 || (pl == FSC_PIPE_V && stage >= 2LL * p))
        return -1;
    return pl == FSC_PIPE_V ? (stage < p ? stage : (int)(2LL * p - 1 - stage)) : stage % p;
}

fsc_pipe_placement fsc_pipe_schedule_placement(fsc_pipe_schedule kind) {
    return kind == FSC_SCHED_ZBV ? FSC_PIPE_V : FSC_PIPE_LOOP;
}

/* The streams into each rank, first in, first out: per kind ([0] outputs, [1] input gradients) three lines:
 * [0] from the neighbour of a loop (outputs from rank r-1, gradients from r+1, wrapping around) or of a V's chunk
 * 0, [1] of a V's chunk 1 (outputs from r+1, gradients from r-1), [2] from this rank itself (the V's turn on the
 * last rank); each message the stage that receives it and the micro-batch. */
typedef struct {
    int *stage, *micro; /* (cap) */
    int head, tail;
} stream;

#define LINES 3

typedef struct {
    fsc_pipe_placement pl;
    int p, v, m;
    stream *in; /* (2 LINES p): in[(2 r + kind) LINES + line] */
} sim;

/* The stream on which stage g's action (forward: fwd) receives, and the rank that sends on it. */
static stream *in_stream(const sim *s, int g, int fwd, int *from) {
    const int r = fsc_pipe_stage_rank(s->pl, s->p, g), src = fsc_pipe_stage_rank(s->pl, s->p, fwd ? g - 1 : g + 1);
    const int line = src == r ? 2 : s->pl == FSC_PIPE_V ? g / s->p : 0;
    *from = src;
    return &s->in[(2 * r + !fwd) * LINES + line];
}

static void push(sim *s, int g, int fwd, int micro) {
    int from;
    stream *q = in_stream(s, g, fwd, &from);
    q->stage[q->tail] = g, q->micro[q->tail] = micro;
    q->tail++;
}

/* Whether rank r can run x now (0: it waits), or an error when the head of its stream is another message. */
static fsc_status ready(sim *s, int r, int i, const fsc_pipe_action *x, int *ok) {
    const int S = s->p * s->v, g = fsc_pipe_stage_at(s->pl, s->p, r, x->chunk), fwd = x->kind == FSC_ACT_FORWARD;
    *ok = 1;
    if (x->kind == FSC_ACT_WEIGHT || (fwd && g == 0) || (!fwd && g == S - 1)) return FSC_OK; /* nothing to receive */
    int from;
    const stream *q = in_stream(s, g, fwd, &from);
    if (q->head == q->tail) {
        *ok = 0;
        return FSC_OK;
    }
    if (q->stage[q->head] == g && q->micro[q->head] == x->micro) return FSC_OK;
    char nm[64];
    const int hg = q->stage[q->head];
    return fsc_error(FSC_ERR_INVALID, "pipeline schedule: rank %d, action %d, %s receives its %s from rank %d, "
                     "but the next message on that stream is for %s(mb %d, chunk %d) (streams are first in, first out)",
                     r, i, act_name(x, nm, sizeof nm), fwd ? "input" : "output gradient", from, fwd ? "F" : "B",
                     q->micro[q->head], hg / s->p);
}

/* Run x on rank r (ready): take what it receives off its stream, put what it sends on the next one. Returns the
 * rank the message goes to (-1: none). */
static int run_one(sim *s, int r, const fsc_pipe_action *x) {
    const int S = s->p * s->v, g = fsc_pipe_stage_at(s->pl, s->p, r, x->chunk), fwd = x->kind == FSC_ACT_FORWARD;
    if (x->kind == FSC_ACT_WEIGHT) return -1; /* local */
    int from;
    if ((fwd && g > 0) || (!fwd && g < S - 1)) in_stream(s, g, fwd, &from)->head++;
    if (fwd && g < S - 1) return push(s, g + 1, 1, x->micro), fsc_pipe_stage_rank(s->pl, s->p, g + 1);
    if (!fwd && g > 0) return push(s, g - 1, 0, x->micro), fsc_pipe_stage_rank(s->pl, s->p, g - 1);
    return -1;
}

/* The message of a deadlock: every waiting rank with its action and what it waits for. */
static fsc_status deadlock(const sim *s, const fsc_pipe_action *const *lists, const int *lens, const int *pc) {
    char msg[768], nm[64];
    int at = snprintf(msg, sizeof msg, "pipeline schedule deadlocks:");
    for (int r = 0; r < s->p && at < (int)sizeof msg; r++) {
        if (pc[r] == lens[r]) continue;
        const fsc_pipe_action *x = &lists[r][pc[r]];
        const int fwd = x->kind == FSC_ACT_FORWARD, g = fsc_pipe_stage_at(s->pl, s->p, r, x->chunk);
        at += snprintf(msg + at, sizeof msg - (size_t)at, " rank %d waits at action %d, %s, for its %s from rank %d;",
                       r, pc[r], act_name(x, nm, sizeof nm), fwd ? "input" : "output gradient",
                       fsc_pipe_stage_rank(s->pl, s->p, fwd ? g - 1 : g + 1));
    }
    return fsc_error(FSC_ERR_INVALID, "%s", msg);
}

/* Every rank runs its list as far as its messages allow; a rank whose message arrives is run again (a queue of
 * ranks, each in it at most once: work = O(actions + ranks), where a sweep over all ranks until none moved took
 * O(ranks) a message). work holds 2 p ints. */
static fsc_status simulate(sim *s, const fsc_pipe_action *const *lists, const int *lens, int *pc, int *work) {
    const int p = s->p;
    int *queue = work, *queued = work + p, head = 0, n = p;
    for (int r = 0; r < p; r++) queue[r] = r, queued[r] = 1;
    while (n > 0) {
        const int r = queue[head];
        head = (head + 1) % p, n--, queued[r] = 0;
        for (int ok = 1; ok && pc[r] < lens[r];) {
            FSC_TRY(ready(s, r, pc[r], &lists[r][pc[r]], &ok));
            if (!ok) break;
            const int to = run_one(s, r, &lists[r][pc[r]++]);
            if (to >= 0 && to != r && !queued[to]) queue[(head + n++) % p] = to, queued[to] = 1;
        }
    }
    for (int r = 0; r < p; r++)
        if (pc[r] < lens[r]) return deadlock(s, lists, lens, pc);
    return FSC_OK;
}

/* A list of the wrong length: the count, and what check_rank finds first in the list (an action run twice, out of
 * order or out of range, or one never run); the count alone would leave the reader to find the repeated or the
 * missing action. */
static fsc_status wrong_length(int r, int v, int m, const fsc_pipe_action *a, int len) {
    char why[320] = "";
    int *nx = a && len > 0 ? malloc((size_t)3 * v * sizeof *nx) : NULL, what = RANK_OK;
    if (nx) {
        int withw = 0;
        for (int i = 0; i < len; i++) withw |= a[i].kind == FSC_ACT_WEIGHT;
        what = check_rank(v, m, a, len, withw, nx, why, sizeof why);
        free(nx);
    }
    return fsc_error(FSC_ERR_INVALID, "pipeline schedule: rank %d has %d actions (need 2 x %d chunks x %d "
                     "micro-batches = %d), or with W actions 3 x that = %d%s%s", r, a ? len : 0, v, m, 2 * v * m,
                     3 * v * m, what == RANK_OK ? "" : what == RANK_ACTION ? ": " : ": it ",
                     what == RANK_OK ? "" : why);
}

fsc_status fsc_pipe_schedule_validate(int p, int v, int m, const fsc_pipe_action *const *lists, const int *lens) {
    return fsc_pipe_schedule_validate_placed(FSC_PIPE_LOOP, p, v, m, lists, lens);
}

fsc_status fsc_pipe_schedule_validate_placed(fsc_pipe_placement pl, int p, int v, int m,
                                             const fsc_pipe_action *const *lists, const int *lens) {
    FSC_CHECK_ARG(lists);
    FSC_CHECK_ARG(lens);
    FSC_TRY(check_sizes("pipeline schedule", p, v, m));
    if (pl != FSC_PIPE_LOOP && pl != FSC_PIPE_V)
        return fsc_error(FSC_ERR_INVALID, "pipeline schedule: unknown placement %d (loop or v)", (int)pl);
    if (pl == FSC_PIPE_V && v != 2)
        return fsc_error(FSC_ERR_INVALID, "pipeline schedule: a V placement has two chunks per rank, not %d", v);
    for (int r = 0; r < p; r++)
        if (!lists[r] || (lens[r] != 2 * v * m && lens[r] != 3 * v * m))
            return wrong_length(r, v, m, lists[r], lens[r]);
    const size_t cap = (size_t)v * m; /* messages into one stream per step, at most */
    sim s = { pl, p, v, m, calloc((size_t)2 * LINES * p, sizeof(stream)) };
    int *pc = calloc((size_t)3 * p + 3 * (size_t)v, sizeof(int)), *buf = malloc((size_t)4 * LINES * p * cap * sizeof(int));
    fsc_status st = s.in && pc && buf ? FSC_OK : fsc_error(FSC_ERR_NOMEM, "pipeline schedule: out of memory");
    for (int r = 0; r < p && st == FSC_OK; r++) {
        char why[320];
        const int what = check_rank(v, m, lists[r], lens[r], lens[r] == 3 * v * m, pc + p, why, sizeof why);
        if (what != RANK_OK)
            st = fsc_error(FSC_ERR_INVALID, "pipeline schedule: rank %d%s%s", r, what == RANK_ACTION ? ", " : " ", why);
    }
    for (int q = 0; q < 2 * LINES * p && st == FSC_OK; q++)
        s.in[q].stage = buf + (size_t)2 * q * cap, s.in[q].micro = buf + (size_t)(2 * q + 1) * cap;
    if (st == FSC_OK) {
        memset(pc, 0, (size_t)p * sizeof *pc);
        st = simulate(&s, lists, lens, pc, pc + p + 3 * v);
    }
    free(s.in);
    free(pc);
    free(buf);
    return st;
}
