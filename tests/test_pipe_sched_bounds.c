/* How close the zero-bubble lists (lib/parallel/pipe_sched.c) come to the shortest step any list can have, on a
 * model of the pipeline with fixed action times F, B and W per chunk and free messages (as tools/pipe_replay
 * replays a trace): every action starts when its rank is free and what it receives is there (F of micro-batch k
 * on stage g after F of k on stage g - 1; B after B of k on stage g + 1, or on the last stage after its own F; W
 * after its B), and a rank holds a micro-batch's record from its F to its W (B without W lists: to its B).
 * Oracles, the lower bounds of docs/pipeline.md:
 *   - 1F1B (a B that is the whole backward, F + B + W long) takes m (F+B+W) + (p-1)(F+B+W): the textbook bubble.
 *   - ZB-H1 takes m (F+B+W) + (p-1)(F+B-W) for m >= p, and no list holding at most p records on a rank (1F1B's
 *     peak) is shorter: the first rank holds p forwards before the first B can come back ((p-1) B later), and
 *     its last forward must wait for p Ws, after which the last micro-batch still crosses the pipeline. Checked
 *     against every pair of lists of p = 2, m = 4 and every triple of p = 3, m = 3 within the memory (an
 *     exhaustive search), with W less than F (B 1.1 F, W 0.8 F: fsc's measured ratios), where the bubble is
 *     (F+B-W)/(F+B+W) = 0.45 of 1F1B's, above 0.4.
 *   - ZBV takes at least 2m (F+B+W) + (p-1) F (the last rank's first action waits for p - 1 forwards): it takes
 *     exactly that with F = B = W, and less than one F more with B = 1.1 F, W = 0.8 F, for p = 1..8 and
 *     m = 2p..4p; every rank holds at most 2p half-stage records (p stages' worth).
 *   - ZBV with m < 2p (its Ws re-placed by a simulation, pipe_sched.c) is no longer than the hand construction
 *     (reimplemented here from its definition) with either ratio, shorter at p = 4, m = 4 and p = 8, m = 8,
 *     holds no more records on any rank, equals it for m >= 2p, and validates for up to 17 ranks.
 * The lists' validity and orders are test_pipe_sched's; their runs bit for bit against DDP test_pipe's. */
#include <string.h>
#include "testutil.h"
#include "fsc/pipe_schedule.h"

#define MAXP 8
#define MAXM 32

typedef struct {
    const fsc_pipe_action *a[MAXP];
    int n[MAXP];
} lists;

/* The step of lists under placement pl (v chunks per rank) with action times f, b, w (b the whole backward where
 * a list has no W); peak[r] the most records rank r holds. -1 if the lists deadlock. */
static long replay(fsc_pipe_placement pl, int p, int v, int m, const lists *l, long f, long b, long w, int *peak) {
    static long fdone[2 * MAXP][MAXM], bdone[2 * MAXP][MAXM]; /* per stage, micro-batch: when done, -1 not yet */
    const int S = p * v;
    long tfree[MAXP] = { 0 }, span = 0;
    int pos[MAXP] = { 0 }, held[MAXP] = { 0 }, left = 0;
    for (int g = 0; g < S; g++)
        for (int k = 0; k < m; k++) fdone[g][k] = bdone[g][k] = -1;
    for (int r = 0; r < p; r++) left += l->n[r], peak[r] = 0;
    while (left > 0) {
        int moved = 0;
        for (int r = 0; r < p; r++)
            for (; pos[r] < l->n[r]; pos[r]++, left--, moved = 1) {
                const fsc_pipe_action *x = &l->a[r][pos[r]];
                const int g = fsc_pipe_stage_at(pl, p, r, x->chunk), k = x->micro, withw = l->n[r] == 3 * v * m;
                long dep = 0, t = 0;
                if (x->kind == FSC_ACT_FORWARD) dep = g > 0 ? fdone[g - 1][k] : 0, t = f;
                else if (x->kind == FSC_ACT_BACKWARD) dep = g < S - 1 ? bdone[g + 1][k] : fdone[g][k], t = b;
                else dep = bdone[g][k], t = w;
                if (dep < 0) break;
                const long end = (dep > tfree[r] ? dep : tfree[r]) + t;
                if (x->kind == FSC_ACT_FORWARD) fdone[g][k] = end, held[r]++;
                if (x->kind == FSC_ACT_BACKWARD) bdone[g][k] = end, held[r] -= !withw;
                if (x->kind == FSC_ACT_WEIGHT) held[r]--;
                if (held[r] > peak[r]) peak[r] = held[r];
                tfree[r] = end;
                span = end > span ? end : span;
            }
        if (!moved) return -1;
    }
    return span;
}

static long replay_kind(fsc_pipe_schedule kind, int p, int m, long f, long b, long w, int *peak) {
    const int v = kind == FSC_SCHED_ZBV ? 2 : 1;
    lists l;
    fsc_pipe_action *a[MAXP];
    for (int r = 0; r < p; r++) {
        assert_ok(fsc_pipe_schedule_make(kind, p, v, m, r, &a[r], &l.n[r]));
        l.a[r] = a[r];
    }
    const long span = replay(fsc_pipe_schedule_placement(kind), p, v, m, &l, f, b, w, peak);
    for (int r = 0; r < p; r++) fsc_pipe_schedule_free(a[r]);
    return span;
}

static const long costs[][3] = { { 1, 1, 1 }, { 10, 11, 8 }, { 10, 12, 6 }, { 10, 20, 10 } }; /* F, B, W */

/* 1F1B and ZB-H1 over p = 1..8, m = p..4p: the formulas above, and ZB-H1 within 1F1B's peak (p records) */
static void test_zb_h1_formula(void **state) {
    (void)state;
    for (size_t c = 0; c < sizeof costs / sizeof costs[0]; c++) {
        const long f = costs[c][0], b = costs[c][1], w = costs[c][2];
        for (int p = 1; p <= MAXP; p++)
            for (int m = p; m <= 4 * p; m++) {
                int peak[MAXP];
                const long one = replay_kind(FSC_SCHED_1F1B, p, m, f, b + w, 0, peak);
                assert_int_equal(one, m * (f + b + w) + (p - 1) * (f + b + w));
                const long zb = replay_kind(FSC_SCHED_ZB_H1, p, m, f, b, w, peak);
                if (zb != m * (f + b + w) + (p - 1) * (f + b - w))
                    fail_msg("zb-h1 p %d m %d F %ld B %ld W %ld: step %ld, formula %ld", p, m, f, b, w, zb,
                             m * (f + b + w) + (p - 1) * (f + b - w));
                for (int r = 0; r < p; r++) assert_true(peak[r] <= p);
            }
    }
}

/* Every order of one rank's F, B and W of m micro-batches (each kind ascending, B after F, W after B): the
 * standard Young tableaux of a 3 x m rectangle, depth first. */
typedef struct {
    int m, cap, n;
    fsc_pipe_action (*all)[3 * 4]; /* (cap) lists of 3 m actions, m <= 4 */
} orders;

static void enumerate(orders *o, fsc_pipe_action *cur, int len, int nf, int nb, int nw) {
    if (len == 3 * o->m) {
        assert_true(o->n < o->cap);
        memcpy(o->all[o->n++], cur, (size_t)len * sizeof *cur);
        return;
    }
    if (nf < o->m) cur[len] = (fsc_pipe_action){ FSC_ACT_FORWARD, nf, 0 }, enumerate(o, cur, len + 1, nf + 1, nb, nw);
    if (nb < nf) cur[len] = (fsc_pipe_action){ FSC_ACT_BACKWARD, nb, 0 }, enumerate(o, cur, len + 1, nf, nb + 1, nw);
    if (nw < nb) cur[len] = (fsc_pipe_action){ FSC_ACT_WEIGHT, nw, 0 }, enumerate(o, cur, len + 1, nf, nb, nw + 1);
}

/* The records one order holds at most (F to W) */
static int held(const fsc_pipe_action *a, int n) {
    int h = 0, most = 0;
    for (int i = 0; i < n; i++) {
        h += a[i].kind == FSC_ACT_FORWARD ? 1 : a[i].kind == FSC_ACT_WEIGHT ? -1 : 0;
        most = h > most ? h : most;
    }
    return most;
}

/* No lists of p = 2, m = 4 or p = 3, m = 3 with at most p records on a rank beat ZB-H1's step (B 1.1 F, W 0.8 F),
 * so its bubble, 0.45 of 1F1B's, is the least at that memory */
static void test_zb_h1_least_at_its_memory(void **state) {
    (void)state;
    static const int cases[][2] = { { 2, 4 }, { 3, 3 } };
    const long f = 10, b = 11, w = 8;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int p = cases[c][0], m = cases[c][1];
        orders o = { m, 512, 0, NULL };
        o.all = malloc((size_t)o.cap * sizeof *o.all);
        assert_non_null(o.all);
        fsc_pipe_action cur[12];
        enumerate(&o, cur, 0, 0, 0, 0);
        assert_int_equal(o.n, m == 4 ? 462 : 42); /* 12! / (6 5 4 3 5 4 3 2 4 3 2 1), 9! / (5 4 3 4 3 2 3 2 1) */
        int keep = 0;
        for (int i = 0; i < o.n; i++)
            if (held(o.all[i], 3 * m) <= p) memmove(o.all[keep++], o.all[i], sizeof o.all[0]);
        int peak[MAXP], idx[MAXP] = { 0 };
        const long zb = replay_kind(FSC_SCHED_ZB_H1, p, m, f, b, w, peak);
        const long one = replay_kind(FSC_SCHED_1F1B, p, m, f, b + w, 0, peak);
        long best = -1;
        for (;;) { /* every p-tuple of kept orders */
            lists l;
            for (int r = 0; r < p; r++) l.a[r] = o.all[idx[r]], l.n[r] = 3 * m;
            const long s = replay(FSC_PIPE_LOOP, p, 1, m, &l, f, b, w, peak);
            if (s >= 0 && (best < 0 || s < best)) best = s;
            int r = 0;
            while (r < p && ++idx[r] == keep) idx[r++] = 0;
            if (r == p) break;
        }
        assert_int_equal(best, zb);
        const long work = m * (f + b + w);
        assert_true(10 * (zb - work) > 4 * (one - work)); /* above 0.4x of 1F1B's idle time */
        free(o.all);
    }
}

/* ZBV over p = 1..8, m = 2p..4p: at least 2m (F+B+W) + (p-1) F for any list; zbv's is that with F = B = W and
 * under one F more with fsc's ratios; at most 2p records a rank */
static void test_zbv_near_its_bound(void **state) {
    (void)state;
    for (size_t c = 0; c < 2; c++) { /* F = B = W, and fsc's ratios */
        const long f = costs[c][0], b = costs[c][1], w = costs[c][2];
        for (int p = 1; p <= MAXP; p++)
            for (int m = 2 * p; m <= 4 * p && m <= MAXM; m++) {
                int peak[MAXP];
                const long s = replay_kind(FSC_SCHED_ZBV, p, m, f, b, w, peak), bound = 2 * m * (f + b + w) + (p - 1) * f;
                assert_true(s >= bound);
                const long slack = c == 0 ? 0 : f - 1;
                if (s > bound + slack)
                    fail_msg("zbv p %d m %d F %ld B %ld W %ld: step %ld, bound %ld", p, m, f, b, w, s, bound);
                for (int r = 0; r < p; r++) assert_true(peak[r] <= 2 * p);
            }
    }
}

/* ZBV's hand construction (pipe_sched.c's comment; PyTorch's ScheduleZBVZeroBubble), here as the oracle: with
 * M' = max(m, 2p - 1), actions of micro-batches >= m dropped, rank r runs 2 (p - r) - 1 F of chunk 0; r pairs F
 * chunk 1, F chunk 0; p - r rounds F B W of chunk 1; while chunk 0 has forwards left or chunk 1 lags it, [F chunk
 * 0] B W chunk 0, F B W chunk 1; r pairs B chunk 0, B chunk 1; p - r pairs B W of chunk 0; chunk 1's Ws left, then
 * chunk 0's. */
typedef struct {
    fsc_pipe_action *a;
    int n, m, cnt[3][2];
} hand_list;

static void hput(hand_list *h, fsc_pipe_action_kind kind, int c) {
    const int k = h->cnt[kind][c]++;
    if (k < h->m) h->a[h->n++] = (fsc_pipe_action){ kind, k, c };
}

static void zbv_hand(int p, int m, int r, fsc_pipe_action *a) {
    const int mm = m > 2 * p - 1 ? m : 2 * p - 1;
    hand_list h = { a, 0, m, { { 0 } } };
    const fsc_pipe_action_kind F = FSC_ACT_FORWARD, B = FSC_ACT_BACKWARD, W = FSC_ACT_WEIGHT;
    for (int i = 0; i < 2 * (p - r) - 1; i++) hput(&h, F, 0);
    for (int i = 0; i < r; i++) hput(&h, F, 1), hput(&h, F, 0);
    for (int i = 0; i < p - r; i++) hput(&h, F, 1), hput(&h, B, 1), hput(&h, W, 1);
    while (h.cnt[F][1] < h.cnt[F][0] || h.cnt[F][0] < mm) {
        if (h.cnt[F][0] < mm) hput(&h, F, 0);
        hput(&h, B, 0), hput(&h, W, 0), hput(&h, F, 1), hput(&h, B, 1), hput(&h, W, 1);
    }
    for (int i = 0; i < r; i++) hput(&h, B, 0), hput(&h, B, 1);
    for (int i = 0; i < p - r; i++) hput(&h, B, 0), hput(&h, W, 0);
    while (h.cnt[W][1] < h.cnt[B][1]) hput(&h, W, 1);
    while (h.cnt[W][0] < h.cnt[B][0]) hput(&h, W, 0);
    assert_int_equal(h.n, 6 * m);
}

/* With m >= 2p zbv is the hand construction; with fewer micro-batches its Ws are re-placed where that shortens the
 * step: for p = 1..8, m = 1..4p its step is no longer than the hand lists' with B 1.1 F, W 0.8 F and with
 * F = B = W, shorter at p = 4, m = 4 and p = 8, m = 8, no rank holds more records than in the hand list, and rank 0
 * runs the head chunk's W of each micro-batch before the embedding chunk's (else the tied layers do not split) */
static void test_zbv_fewer_micro_batches(void **state) {
    (void)state;
    static const long ratios[2][3] = { { 10, 11, 8 }, { 1, 1, 1 } };
    fsc_pipe_action *hand = malloc((size_t)MAXP * 6 * MAXM * sizeof *hand);
    assert_non_null(hand);
    for (int p = 1; p <= MAXP; p++)
        for (int m = 1; m <= 4 * p; m++) {
            lists l, h;
            fsc_pipe_action *a[MAXP];
            int same = 1;
            for (int r = 0; r < p; r++) {
                assert_ok(fsc_pipe_schedule_make(FSC_SCHED_ZBV, p, 2, m, r, &a[r], &l.n[r]));
                l.a[r] = a[r];
                zbv_hand(p, m, r, hand + (size_t)r * 6 * MAXM);
                h.a[r] = hand + (size_t)r * 6 * MAXM, h.n[r] = 6 * m;
                same &= !memcmp(a[r], h.a[r], (size_t)6 * m * sizeof *a[r]);
            }
            if (m >= 2 * p) assert_true(same);
            int head_w = 0; /* rank 0: the head chunk's W of k before the embedding chunk's (pipe.c's tied split) */
            for (int i = 0; i < 6 * m; i++)
                if (a[0][i].kind == FSC_ACT_WEIGHT) {
                    if (a[0][i].chunk == 1) head_w++;
                    else assert_true(a[0][i].micro < head_w);
                }
            long step[2][2]; /* [ratios][built-in, hand] */
            for (int c = 0; c < 2; c++) {
                int peak[MAXP], hpeak[MAXP];
                step[c][0] = replay(FSC_PIPE_V, p, 2, m, &l, ratios[c][0], ratios[c][1], ratios[c][2], peak);
                step[c][1] = replay(FSC_PIPE_V, p, 2, m, &h, ratios[c][0], ratios[c][1], ratios[c][2], hpeak);
                assert_true(step[c][0] > 0 && step[c][0] <= step[c][1]);
                for (int r = 0; r < p; r++) assert_true(peak[r] <= hpeak[r]);
            }
            if ((p == 4 && m == 4) || (p == 8 && m == 8)) assert_true(step[0][0] < step[0][1] && !same);
            for (int r = 0; r < p; r++) fsc_pipe_schedule_free(a[r]);
        }
    free(hand);
}

/* The re-placed lists of up to 16 ranks (and the hand lists of 17) validate in a V */
static void test_zbv_fill_valid_to_16_ranks(void **state) {
    (void)state;
    static const int ps[] = { 9, 12, 16, 17 };
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) {
        const int p = ps[i], ms[] = { 1, 2, p / 2, p, 2 * p - 1 };
        fsc_pipe_action **a = calloc((size_t)p, sizeof *a);
        int *n = calloc((size_t)p, sizeof *n);
        assert_true(a && n);
        for (size_t j = 0; j < sizeof ms / sizeof ms[0]; j++) {
            for (int r = 0; r < p; r++) assert_ok(fsc_pipe_schedule_make(FSC_SCHED_ZBV, p, 2, ms[j], r, &a[r], &n[r]));
            const fsc_status st = fsc_pipe_schedule_validate_placed(FSC_PIPE_V, p, 2, ms[j],
                                                                    (const fsc_pipe_action *const *)a, n);
            if (st != FSC_OK) fail_msg("zbv p %d m %d: %s", p, ms[j], fsc_last_error());
            for (int r = 0; r < p; r++) fsc_pipe_schedule_free(a[r]), a[r] = NULL;
        }
        free(a);
        free(n);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zb_h1_formula),
        cmocka_unit_test(test_zb_h1_least_at_its_memory),
        cmocka_unit_test(test_zbv_near_its_bound),
        cmocka_unit_test(test_zbv_fewer_micro_batches),
        cmocka_unit_test(test_zbv_fill_valid_to_16_ranks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
