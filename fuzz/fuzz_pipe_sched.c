/* libFuzzer harness for the pipeline schedule validator, fsc_pipe_schedule_validate_placed (a caller's own
 * schedule: fsc_parallel_opts.schedule = FSC_SCHED_CUSTOM). The input is decoded into a placement, sizes and
 * every rank's list of actions:
 *   byte 0  bit 0: placement V (else loop); bit 1: structured lists (below, else raw); bits 2-4 all set: an
 *           unknown placement (2 + the top three bits)
 *   byte 1  ranks p: byte % 8 - 1 (-1 .. 6)
 *   byte 2  chunks per rank v: byte % 5 - 1 (-1 .. 3); 250 and over: 2000, past the limit of 1024
 *   byte 3  micro-batches m: byte % 10 - 1 (-1 .. 8); 250 and over: 2^25, past the limit of 2^26 actions a rank
 *   then, for each rank, a length byte L and its actions:
 *     raw: L 0: 2 v m actions, 1: 3 v m (when that is 1 .. 1024), 255: no list (NULL), else L - 2; each action two
 *          bytes: kind (b0 & 3; 3 is no kind), chunk ((b0 >> 2 & 7) - 1), micro-batch ((b1 & 15) - 2; b1 255:
 *          INT_MAX, 254: INT_MIN), out-of-range values included; bytes past the input read as 0.
 *     structured (sizes in range): L odd: the list has W actions; each action one byte choosing among the rank's
 *          next actions that keep it locally valid (the next F, B and W of each chunk in ascending micro-batch
 *          order, B after its F, W after its B), so that only the messages between ranks decide. With byte 0's
 *          bit 2 (a loop, or a V of two chunks) the length bytes come first, then the ranks run together, each byte
 *          choosing among the actions some rank could run next (locally valid, what it receives at the head of
 *          its stream): lists that run by construction, which up to four swaps of neighbouring actions (one byte
 *          for the count, two for each: rank and place) then put at the edge of what runs.
 * Checks: the validator never crashes or hangs, and holds at most 4 KiB plus 64 bytes per rank and
 * (micro-batch, chunk) pair of heap (counted through the sanitizer's allocation hooks); a refusal is
 * FSC_ERR_INVALID with a message; and it accepts exactly the lists an independent oracle written here accepts:
 * sizes in range, a known placement (a V with two chunks), every rank a list of 2 v m actions without W or 3 v m
 * with, F, B (and W) of every (micro-batch, chunk) once, in ascending micro-batch order per chunk and kind, B after
 * its F, W after its B; and a replay of all ranks with buffered sends and first-in-first-out streams (one per
 * receiving rank, direction, sending rank and, in a V, receiving chunk) in which every receive finds its own
 * message at the head of its stream runs every list to its end. So the validator never accepts a list that
 * deadlocks, and never refuses one that runs.
 * Build and run: ci/fuzz.sh SECONDS fuzz/fuzz_pipe_sched.c (or make fuzz). */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "fsc/fsc.h"
#include "fsc/pipe_schedule.h"
#include "heap_count.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define PMAX 6
#define VMAX 3
#define MMAX 8
#define AMAX 1024 /* actions of a raw list at most */

typedef struct {
    const uint8_t *d;
    size_t n, at;
} reader;

static int next_byte(reader *r) { return r->at < r->n ? r->d[r->at++] : 0; }

/* ---- the oracle ---- */

/* Each rank's list on its own (above). */
static int locally_valid(int v, int m, const fsc_pipe_action *a, int len) {
    if (!a || (len != 2 * v * m && len != 3 * v * m)) return 0;
    const int withw = len == 3 * v * m;
    int nx[VMAX][3] = { { 0 } };
    for (int i = 0; i < len; i++) {
        const int k = (int)a[i].kind, c = a[i].chunk, mb = a[i].micro;
        if (k < 0 || k > 2 || (k == 2 && !withw) || c < 0 || c >= v || mb < 0 || mb >= m) return 0;
        if (mb != nx[c][k]) return 0;          /* once each, ascending */
        if (k > 0 && mb >= nx[c][k - 1]) return 0; /* B after its F, W after its B */
        nx[c][k]++;
    }
    return 1; /* len = (2 or 3) v m actions, each the next of its kind and chunk: all of them */
}

/* The stage of chunk c on rank r, and the rank of stage g, by the placement's definition (pipe_schedule.h). */
static int stage_at(int vee, int p, int r, int c) { return vee ? (c == 0 ? r : 2 * p - 1 - r) : c * p + r; }
static int rank_of(int vee, int p, int g) { return vee ? (g < p ? g : 2 * p - 1 - g) : g % p; }

typedef struct {
    int g[VMAX * MMAX * 2], k[VMAX * MMAX * 2];
    int head, tail;
} fifo;

/* The ranks' streams and places in their lists: one stream per receiving rank, direction, sending rank and, in a
 * V, receiving chunk. */
typedef struct {
    int vee, p, v, m;
    fifo q[PMAX * 2 * PMAX * 2];
    int pc[PMAX];
} ranks;

static fifo *stream_to(ranks *z, int g, int fwd) {
    const int to = rank_of(z->vee, z->p, g), from = rank_of(z->vee, z->p, fwd ? g - 1 : g + 1);
    return &z->q[((to * 2 + !fwd) * z->p + from) * 2 + (z->vee ? g / z->p : 0)];
}

/* Whether rank r can run x now: what it receives (if anything) at the head of its stream. */
static int can_run(ranks *z, int r, const fsc_pipe_action *x) {
    const int g = stage_at(z->vee, z->p, r, x->chunk), fwd = x->kind == FSC_ACT_FORWARD;
    if (x->kind == FSC_ACT_WEIGHT || (fwd ? g == 0 : g == z->p * z->v - 1)) return 1;
    const fifo *s = stream_to(z, g, fwd);
    return s->head < s->tail && s->g[s->head] == g && s->k[s->head] == x->micro;
}

/* Run x (can_run) on rank r: take what it receives, send what it sends. */
static void run_it(ranks *z, int r, const fsc_pipe_action *x) {
    const int g = stage_at(z->vee, z->p, r, x->chunk), fwd = x->kind == FSC_ACT_FORWARD, S = z->p * z->v;
    if (x->kind == FSC_ACT_WEIGHT) return;
    if (fwd ? g > 0 : g < S - 1) stream_to(z, g, fwd)->head++;
    if (fwd ? g < S - 1 : g > 0) {
        const int to = fwd ? g + 1 : g - 1;
        fifo *s = stream_to(z, to, fwd);
        s->g[s->tail] = to, s->k[s->tail] = x->micro;
        s->tail++;
    }
}

/* Replay of locally valid lists: 1 if every rank reaches its end. */
static int replay(int vee, int p, int v, int m, const fsc_pipe_action *const *lists, const int *lens) {
    static ranks z;
    memset(&z, 0, sizeof z);
    z.vee = vee, z.p = p, z.v = v, z.m = m;
    for (int moved = 1; moved;) {
        moved = 0;
        for (int r = 0; r < p; r++)
            for (; z.pc[r] < lens[r] && can_run(&z, r, &lists[r][z.pc[r]]); z.pc[r]++, moved = 1)
                run_it(&z, r, &lists[r][z.pc[r]]);
    }
    for (int r = 0; r < p; r++)
        if (z.pc[r] < lens[r]) return 0;
    return 1;
}

static int oracle(int pl, int p, int v, int m, const fsc_pipe_action *const *lists, const int *lens) {
    if (p < 1 || p > PMAX || v < 1 || v > VMAX || m < 1 || m > MMAX) return 0;
    if (pl != FSC_PIPE_LOOP && pl != FSC_PIPE_V) return 0;
    if (pl == FSC_PIPE_V && v != 2) return 0;
    for (int r = 0; r < p; r++)
        if (!locally_valid(v, m, lists[r], lens[r])) return 0;
    return replay(pl == FSC_PIPE_V, p, v, m, lists, lens);
}

/* ---- decoding ---- */

static void decode_raw(reader *rd, fsc_pipe_action *a, int len) {
    for (int i = 0; i < len; i++) {
        const int b0 = next_byte(rd), b1 = next_byte(rd);
        a[i].kind = (fsc_pipe_action_kind)(b0 & 3);
        a[i].chunk = (b0 >> 2 & 7) - 1;
        a[i].micro = b1 == 255 ? INT_MAX : b1 == 254 ? INT_MIN : (b1 & 15) - 2;
    }
}

static void decode_structured(reader *rd, int v, int m, int withw, fsc_pipe_action *a, int len) {
    int nx[VMAX][3] = { { 0 } };
    for (int i = 0; i < len; i++) {
        fsc_pipe_action cand[VMAX * 3];
        int nc = 0;
        for (int c = 0; c < v; c++) {
            if (nx[c][0] < m) cand[nc++] = (fsc_pipe_action){ FSC_ACT_FORWARD, nx[c][0], c };
            if (nx[c][1] < nx[c][0]) cand[nc++] = (fsc_pipe_action){ FSC_ACT_BACKWARD, nx[c][1], c };
            if (withw && nx[c][2] < nx[c][1]) cand[nc++] = (fsc_pipe_action){ FSC_ACT_WEIGHT, nx[c][2], c };
        }
        if (nc == 0) __builtin_trap(); /* the harness's own bug: len is all of them */
        a[i] = cand[next_byte(rd) % nc];
        nx[a[i].chunk][a[i].kind]++;
    }
}

/* Lists that run by construction: the ranks run together, each byte choosing among the actions some rank could
 * run next (locally valid and what it receives at the head of its stream); lens[r] already set (with or without
 * W). Then up to four swaps of two neighbouring actions of a rank, at places the bytes choose. */
static void decode_global(reader *rd, int vee, int p, int v, int m, fsc_pipe_action **a, const int *lens) {
    static ranks z;
    memset(&z, 0, sizeof z);
    z.vee = vee, z.p = p, z.v = v, z.m = m;
    int nx[PMAX][VMAX][3] = { { { 0 } } }, left = 0;
    for (int r = 0; r < p; r++) left += lens[r];
    for (; left > 0; left--) {
        fsc_pipe_action cand[PMAX * VMAX * 3];
        int who[PMAX * VMAX * 3], nc = 0;
        for (int r = 0; r < p; r++)
            for (int c = 0; c < v; c++) {
                const int *n = nx[r][c];
                const fsc_pipe_action f = { FSC_ACT_FORWARD, n[0], c }, b = { FSC_ACT_BACKWARD, n[1], c };
                if (n[0] < m && can_run(&z, r, &f)) who[nc] = r, cand[nc++] = f;
                if (n[1] < n[0] && can_run(&z, r, &b)) who[nc] = r, cand[nc++] = b;
                if (lens[r] == 3 * v * m && n[2] < n[1])
                    who[nc] = r, cand[nc++] = (fsc_pipe_action){ FSC_ACT_WEIGHT, n[2], c };
            }
        if (nc == 0) __builtin_trap(); /* the harness's own bug: some action can always run */
        const int i = next_byte(rd) % nc, r = who[i];
        a[r][z.pc[r]++] = cand[i];
        nx[r][cand[i].chunk][cand[i].kind]++;
        run_it(&z, r, &cand[i]);
    }
    for (int swaps = next_byte(rd) % 5; swaps > 0; swaps--) {
        const int r = next_byte(rd) % p, i = next_byte(rd) % (lens[r] - 1);
        const fsc_pipe_action t = a[r][i];
        a[r][i] = a[r][i + 1], a[r][i + 1] = t;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 4) return 0;
    reader rd = { data, size, 0 };
    const int b0 = next_byte(&rd), b1 = next_byte(&rd), b2 = next_byte(&rd), b3 = next_byte(&rd);
    const int pl = (b0 >> 2 & 7) == 7 ? 2 + (b0 >> 5) : (b0 & 1) ? FSC_PIPE_V : FSC_PIPE_LOOP;
    const int p = b1 % 8 - 1, v = b2 >= 250 ? 2000 : b2 % 5 - 1, m = b3 >= 250 ? 1 << 25 : b3 % 10 - 1;
    const int in_range = p >= 1 && v >= 1 && v <= VMAX && m >= 1 && m <= MMAX;
    const int structured = (b0 & 2) && in_range;
    const int global = structured && (b0 & 4) && (pl == FSC_PIPE_LOOP || (pl == FSC_PIPE_V && v == 2));
    fsc_pipe_action *lists[PMAX] = { NULL };
    int lens[PMAX] = { 0 };
    for (int r = 0; r < p; r++) {
        const int L = next_byte(&rd);
        const long full = 2L * v * m, fullw = 3L * v * m;
        int len;
        if (structured) len = (int)(L & 1 ? fullw : full);
        else if (L == 255) continue; /* no list */
        else if (L == 0 && full >= 1 && full <= AMAX) len = (int)full;
        else if (L == 1 && fullw >= 1 && fullw <= AMAX) len = (int)fullw;
        else len = L - 2 > 0 ? L - 2 : 0;
        lists[r] = malloc((size_t)(len > 0 ? len : 1) * sizeof *lists[r]);
        if (!lists[r]) abort();
        lens[r] = len;
        if (!structured) decode_raw(&rd, lists[r], len);
        else if (!global) decode_structured(&rd, v, m, L & 1, lists[r], len);
    }
    if (global) decode_global(&rd, pl == FSC_PIPE_V, p, v, m, lists, lens);
    heap_count_begin();
    const fsc_status s = fsc_pipe_schedule_validate_placed((fsc_pipe_placement)pl, p, v, m,
                                                           (const fsc_pipe_action *const *)lists, lens);
    const long long peak = heap_count_end();
    const long long pairs = in_range ? (long long)p * (v * m + 4) : 0;
    if (peak > 4096 + 64 * pairs) __builtin_trap(); /* more heap than the sizes justify */
    if (s != FSC_OK && (s != FSC_ERR_INVALID || fsc_last_error()[0] == 0)) __builtin_trap();
    const int want = oracle(pl, p, v, m, (const fsc_pipe_action *const *)lists, lens);
    if ((s == FSC_OK) != want) __builtin_trap(); /* accepted a list that does not run, or refused one that does */
    for (int r = 0; r < PMAX; r++) free(lists[r]);
    return 0;
}
