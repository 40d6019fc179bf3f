/* Pipeline schedules as data (lib/parallel/pipe_sched.c, fsc/pipe_schedule.h).
 * Oracles: GPipe and 1F1B give exactly the orders the hand-written loops ran (GPipe: F 0..m-1 then B 0..m-1;
 * 1F1B: min(p-r-1, m) warm-up forwards, then F/B pairs, then the remaining backwards); every built-in
 * schedule passes the validator over a grid of p and m; deliberately broken lists (an unknown kind, a range,
 * a repeat, a backward before its forward, descending micro-batches, a missing action, a deadlock) are
 * refused with a message naming the rank and the action. ZB-H1 gives 1F1B's forwards and backwards with each
 * B followed by a W, rank r letting its first r Ws wait until after its last B; it validates over the grid;
 * lists with W are refused when a W repeats, comes before its B, runs out of order on its chunk or is missing,
 * or appears in a list of 2 v m actions. ZBV (two chunks in a V) gives the order of its definition (pipe_sched.c,
 * PyTorch's ScheduleZBVZeroBubble) for p = 2, m = 4, action by action, validates in a V over a grid of p and m,
 * and a last rank whose chunk 1 runs before its own chunk 0 handed it the input deadlocks on its local stream.
 * 1F1B on one rank is the accumulation list F0 B0 F1 B1 ... (a step without a pipeline runs it: step.c).
 * Runs bit-identical to DDP are test_pipe's. */
#include <limits.h>
#include "testutil.h"
#include "fsc/pipe_schedule.h"

#define MAXP 8

typedef struct {
    fsc_pipe_action *a[MAXP];
    int n[MAXP];
} lists;

static void make_all(fsc_pipe_schedule kind, int p, int v, int m, lists *l) {
    for (int r = 0; r < p; r++) assert_ok(fsc_pipe_schedule_make(kind, p, v, m, r, &l->a[r], &l->n[r]));
}

static void free_all(int p, lists *l) {
    for (int r = 0; r < p; r++) fsc_pipe_schedule_free(l->a[r]), l->a[r] = NULL;
}

static fsc_status validate(int p, int v, int m, const lists *l) {
    return fsc_pipe_schedule_validate(p, v, m, (const fsc_pipe_action *const *)l->a, l->n);
}

/* "FFBB" style text of one rank's list with micro-batches: "F0 F1 B0 B1" */
static void text(const fsc_pipe_action *a, int n, char *buf, size_t cap) {
    size_t at = 0;
    buf[0] = 0;
    for (int i = 0; i < n && at < cap; i++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%c%d", i ? " " : "", "FBW?"[a[i].kind < 3 ? a[i].kind : 3],
                               a[i].micro);
}

static void test_builtin_orders(void **state) {
    (void)state;
    lists l;
    char buf[256];
    make_all(FSC_SCHED_GPIPE, 3, 1, 4, &l);
    for (int r = 0; r < 3; r++) {
        text(l.a[r], l.n[r], buf, sizeof buf);
        assert_string_equal(buf, "F0 F1 F2 F3 B0 B1 B2 B3");
    }
    free_all(3, &l);
    make_all(FSC_SCHED_1F1B, 3, 1, 4, &l);
    const char *want[] = { "F0 F1 F2 B0 F3 B1 B2 B3", "F0 F1 B0 F2 B1 F3 B2 B3", "F0 B0 F1 B1 F2 B2 F3 B3" };
    for (int r = 0; r < 3; r++) {
        text(l.a[r], l.n[r], buf, sizeof buf);
        assert_string_equal(buf, want[r]);
    }
    free_all(3, &l);
    make_all(FSC_SCHED_1F1B, 4, 1, 2, &l); /* fewer micro-batches than stages: warm-up capped at m */
    text(l.a[0], l.n[0], buf, sizeof buf);
    assert_string_equal(buf, "F0 F1 B0 B1");
    free_all(4, &l);
}

/* The accumulation list a step without a pipeline runs (lib/parallel/step.c): 1F1B on one rank has no warm-up,
 * so it is F0 B0 F1 B1 ... for every m, and it validates. */
static void test_accumulation_list(void **state) {
    (void)state;
    char buf[512], want[512];
    for (int m = 1; m <= 12; m++) {
        lists l;
        make_all(FSC_SCHED_1F1B, 1, 1, m, &l);
        size_t at = 0;
        for (int k = 0; k < m; k++) at += (size_t)snprintf(want + at, sizeof want - at, "%sF%d B%d", k ? " " : "", k, k);
        text(l.a[0], l.n[0], buf, sizeof buf);
        assert_string_equal(buf, want);
        assert_ok(validate(1, 1, m, &l));
        free_all(1, &l);
    }
}

static void test_builtin_grid_valid(void **state) {
    (void)state;
    for (int kind = 0; kind < 2; kind++)
        for (int p = 1; p <= MAXP; p++)
            for (int m = 1; m <= 12; m++) {
                lists l;
                make_all((fsc_pipe_schedule)kind, p, 1, m, &l);
                for (int r = 0; r < p; r++) assert_int_equal(l.n[r], 2 * m);
                assert_ok(validate(p, 1, m, &l));
                free_all(p, &l);
            }
}

/* ZB-H1 for p = 3, m = 4, action by action, and with fewer micro-batches than stages */
static void test_zb_h1_order(void **state) {
    (void)state;
    lists l;
    char buf[256];
    make_all(FSC_SCHED_ZB_H1, 3, 1, 4, &l);
    const char *want[] = { "F0 F1 F2 B0 W0 F3 B1 W1 B2 W2 B3 W3", "F0 F1 B0 F2 B1 W0 F3 B2 W1 B3 W2 W3",
                           "F0 B0 F1 B1 F2 B2 W0 F3 B3 W1 W2 W3" };
    for (int r = 0; r < 3; r++) {
        text(l.a[r], l.n[r], buf, sizeof buf);
        assert_string_equal(buf, want[r]);
    }
    free_all(3, &l);
    make_all(FSC_SCHED_ZB_H1, 4, 1, 2, &l);
    text(l.a[0], l.n[0], buf, sizeof buf);
    assert_string_equal(buf, "F0 F1 B0 W0 B1 W1");
    text(l.a[3], l.n[3], buf, sizeof buf);
    assert_string_equal(buf, "F0 B0 F1 B1 W0 W1");
    free_all(4, &l);
}

/* ZB-H1 over p = 1..8, m = 1..12: valid, 3 m actions per rank */
static void test_zb_h1_grid_valid(void **state) {
    (void)state;
    for (int p = 1; p <= MAXP; p++)
        for (int m = 1; m <= 12; m++) {
            lists l;
            make_all(FSC_SCHED_ZB_H1, p, 1, m, &l);
            for (int r = 0; r < p; r++) assert_int_equal(l.n[r], 3 * m);
            fsc_status s = validate(p, 1, m, &l);
            if (s != FSC_OK) fail_msg("zb-h1 p %d m %d: %s", p, m, fsc_last_error());
            free_all(p, &l);
        }
}

/* A ZB-H1 of p = 3, m = 4 with rank 1's action i replaced by x: refused with a message holding needle. */
static void broken_w(int i, fsc_pipe_action x, const char *needle) {
    lists l;
    make_all(FSC_SCHED_ZB_H1, 3, 1, 4, &l);
    l.a[1][i] = x;
    assert_err(validate(3, 1, 4, &l), FSC_ERR_INVALID, needle);
    free_all(3, &l);
}

static void test_broken_w_refused(void **state) {
    (void)state;
    /* rank 1 runs F0 F1 B0 F2 B1 W0 F3 B2 W1 B3 W2 W3 */
    broken_w(5, (fsc_pipe_action){ FSC_ACT_WEIGHT, 2, 0 }, "rank 1, action 5, W(mb 2, chunk 0) comes before "
             "micro-batch 0 of its chunk (each chunk runs its weight gradients in ascending micro-batch order)");
    broken_w(8, (fsc_pipe_action){ FSC_ACT_WEIGHT, 0, 0 }, "rank 1, action 8, W(mb 0, chunk 0) runs a second time");
    broken_w(11, (fsc_pipe_action){ FSC_ACT_FORWARD, 0, 0 }, "rank 1, action 11, F(mb 0, chunk 0) runs a second time");
    lists l;
    make_all(FSC_SCHED_ZB_H1, 3, 1, 4, &l);
    /* W before its B: rank 1's B1 W0 as W0 W1 ... (W1 at 5 before B1 at 7) */
    l.a[1][4] = (fsc_pipe_action){ FSC_ACT_WEIGHT, 0, 0 };
    l.a[1][5] = (fsc_pipe_action){ FSC_ACT_WEIGHT, 1, 0 };
    assert_err(validate(3, 1, 4, &l), FSC_ERR_INVALID, "rank 1, action 5, W(mb 1, chunk 0) comes before its backward B");
    free_all(3, &l);
    make_all(FSC_SCHED_ZB_H1, 3, 1, 4, &l);
    l.a[2][11] = (fsc_pipe_action){ FSC_ACT_FORWARD, 0, 0 }; /* W3 missing (the F is a repeat: say that first) */
    assert_err(validate(3, 1, 4, &l), FSC_ERR_INVALID, "rank 2, action 11, F(mb 0, chunk 0) runs a second time");
    l.n[2] = 11; /* W3 missing: a list of 11 is neither 8 nor 12; the count and the action missing */
    assert_err(validate(3, 1, 4, &l), FSC_ERR_INVALID, "rank 2 has 11 actions (need 2 x 1 chunks x 4 micro-batches = "
               "8), or with W actions 3 x that = 12: it never runs W(mb 3, chunk 0)");
    free_all(3, &l);
    /* a W in a list of 2 v m actions: 1F1B's rank 2 with its last B turned into a W */
    make_all(FSC_SCHED_1F1B, 3, 1, 4, &l);
    l.a[2][7] = (fsc_pipe_action){ FSC_ACT_WEIGHT, 3, 0 };
    assert_err(validate(3, 1, 4, &l), FSC_ERR_INVALID, "rank 2, action 7 is a W but the list has 8 actions");
    free_all(3, &l);
    /* every W present but one B missing: 12 actions with two W3 */
    make_all(FSC_SCHED_ZB_H1, 3, 1, 4, &l);
    l.a[0][9] = (fsc_pipe_action){ FSC_ACT_WEIGHT, 3, 0 }; /* rank 0: ... B3 W3 -> W3 W3 */
    assert_err(validate(3, 1, 4, &l), FSC_ERR_INVALID, "rank 0, action 9, W(mb 3, chunk 0) comes before micro-batch 2");
    free_all(3, &l);
}

/* Megatron's order for p = 2, v = 2, m = 4: "F0.0" is micro-batch 0 on chunk 0 */
static void test_interleaved_order(void **state) {
    (void)state;
    lists l;
    make_all(FSC_SCHED_INTERLEAVED, 2, 2, 4, &l);
    const char *want[] = {
        /* rank 0: warm-up (2 - 0 - 1) 2 + (2 - 1) 2 = 4 forwards, then pairs, then the backwards */
        "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0",
        /* rank 1: 2 warm-up forwards */
        "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0",
    };
    for (int r = 0; r < 2; r++) {
        char buf[256];
        size_t at = 0;
        for (int i = 0; i < l.n[r]; i++)
            at += (size_t)snprintf(buf + at, sizeof buf - at, "%s%c%d.%d", i ? " " : "",
                                   l.a[r][i].kind == FSC_ACT_FORWARD ? 'F' : 'B', l.a[r][i].micro, l.a[r][i].chunk);
        assert_string_equal(buf, want[r]);
    }
    assert_ok(validate(2, 2, 4, &l));
    free_all(2, &l);
}

/* Interleaved over a grid: p = 1..8, v = 1..4, m = p, 2p, 3p: valid, 2 v m actions per rank */
static void test_interleaved_grid_valid(void **state) {
    (void)state;
    for (int p = 1; p <= MAXP; p++)
        for (int v = 1; v <= 4; v++)
            for (int m = p; m <= 3 * p; m += p) {
                lists l;
                make_all(FSC_SCHED_INTERLEAVED, p, v, m, &l);
                for (int r = 0; r < p; r++) assert_int_equal(l.n[r], 2 * v * m);
                fsc_status s = validate(p, v, m, &l);
                if (s != FSC_OK) fail_msg("interleaved p %d v %d m %d: %s", p, v, m, fsc_last_error());
                free_all(p, &l);
            }
}

/* Every chunk in ascending order, yet rank 1 runs chunk 0's forwards 2 and 3 before chunk 1's first: rank 0
 * sends it outputs F0.0 F1.0 F0.1 F1.1 F2.0 ... on one stream, so rank 1's F2.0 finds chunk 1's micro-batch 0
 * at its head */
static void test_stream_order_refused(void **state) {
    (void)state;
    lists l;
    make_all(FSC_SCHED_INTERLEAVED, 2, 2, 4, &l);
    fsc_pipe_action *r1 = l.a[1]; /* F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 ... */
    static const fsc_pipe_action head[] = { { FSC_ACT_FORWARD, 2, 0 }, { FSC_ACT_FORWARD, 3, 0 },
                                            { FSC_ACT_FORWARD, 0, 1 }, { FSC_ACT_BACKWARD, 0, 1 },
                                            { FSC_ACT_FORWARD, 1, 1 }, { FSC_ACT_BACKWARD, 1, 1 },
                                            { FSC_ACT_BACKWARD, 0, 0 }, { FSC_ACT_BACKWARD, 1, 0 } };
    memcpy(r1 + 2, head, sizeof head);
    assert_err(validate(2, 2, 4, &l), FSC_ERR_INVALID, "rank 1, action 2, F(mb 2, chunk 0) receives its input from "
               "rank 0, but the next message on that stream is for F(mb 0, chunk 1)");
    free_all(2, &l);
}

/* "F0.1 B0.1 W0.1" style text of one rank's list: kind, micro-batch, chunk */
static void text_chunks(const fsc_pipe_action *a, int n, char *buf, size_t cap) {
    size_t at = 0;
    buf[0] = 0;
    for (int i = 0; i < n && at < cap; i++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%c%d.%d", i ? " " : "", "FBW?"[a[i].kind < 3 ? a[i].kind : 3],
                               a[i].micro, a[i].chunk);
}

static fsc_status validate_v(int p, int m, const lists *l) {
    return fsc_pipe_schedule_validate_placed(FSC_PIPE_V, p, 2, m, (const fsc_pipe_action *const *)l->a, l->n);
}

/* ZBV for p = 2, m = 4 (mm = max(m, 2p - 1) = 4), by the definition in pipe_sched.c */
static void test_zbv_order(void **state) {
    (void)state;
    lists l;
    make_all(FSC_SCHED_ZBV, 2, 2, 4, &l);
    const char *want[] = {
        /* rank 0: 3 forwards of chunk 0; no pairs; 2 rounds F B W of chunk 1; the steady rounds; 2 B W of chunk 0 */
        "F0.0 F1.0 F2.0 F0.1 B0.1 W0.1 F1.1 B1.1 W1.1 F3.0 B0.0 W0.0 F2.1 B2.1 W2.1 B1.0 W1.0 F3.1 B3.1 W3.1 "
        "B2.0 W2.0 B3.0 W3.0",
        /* rank 1: 1 forward; 1 pair F chunk 1, F chunk 0; 1 round F B W of chunk 1; steady; one pair B chunk 0, B
         * chunk 1; one B W of chunk 0; the Ws left */
        "F0.0 F0.1 F1.0 F1.1 B0.1 W0.1 F2.0 B0.0 W0.0 F2.1 B1.1 W1.1 F3.0 B1.0 W1.0 F3.1 B2.1 W2.1 B2.0 B3.1 "
        "B3.0 W2.0 W3.1 W3.0",
    };
    for (int r = 0; r < 2; r++) {
        char buf[512];
        text_chunks(l.a[r], l.n[r], buf, sizeof buf);
        assert_string_equal(buf, want[r]);
    }
    assert_ok(validate_v(2, 4, &l));
    assert_int_equal(fsc_pipe_stage_at(FSC_PIPE_V, 4, 1, 1), 6);
    assert_int_equal(fsc_pipe_stage_rank(FSC_PIPE_V, 4, 6), 1);
    assert_int_equal(fsc_pipe_stage_rank(FSC_PIPE_LOOP, 4, 6), 2);
    assert_int_equal(fsc_pipe_schedule_placement(FSC_SCHED_ZBV), FSC_PIPE_V);
    assert_int_equal(fsc_pipe_schedule_placement(FSC_SCHED_INTERLEAVED), FSC_PIPE_LOOP);
    free_all(2, &l);
}

/* fsc_pipe_stage_at and fsc_pipe_stage_rank: every stage of p ranks round trips; arguments out of range give -1
 * (no division by zero, no overflow) */
static void test_stage_placement_range(void **state) {
    (void)state;
    for (int pl = FSC_PIPE_LOOP; pl <= FSC_PIPE_V; pl++)
        for (int p = 1; p <= 5; p++)
            for (int r = 0; r < p; r++)
                for (int c = 0; c < (pl == FSC_PIPE_V ? 2 : 3); c++) {
                    const int g = fsc_pipe_stage_at((fsc_pipe_placement)pl, p, r, c);
                    assert_true(g >= 0 && g / p == c);
                    assert_int_equal(fsc_pipe_stage_rank((fsc_pipe_placement)pl, p, g), r);
                }
    static const int bad_at[][4] = { { FSC_PIPE_LOOP, 0, 0, 0 },  { FSC_PIPE_LOOP, -3, 0, 0 },
                                     { FSC_PIPE_LOOP, 4, 4, 0 },  { FSC_PIPE_LOOP, 4, -1, 0 },
                                     { FSC_PIPE_LOOP, 4, 0, -1 }, { FSC_PIPE_LOOP, 4, 3, INT_MAX / 2 },
                                     { FSC_PIPE_V, 4, 0, 2 },     { FSC_PIPE_V, INT_MAX, 0, 1 },
                                     { FSC_PIPE_V, 0, 0, 0 },     { 7, 4, 0, 0 } };
    for (size_t i = 0; i < sizeof bad_at / sizeof bad_at[0]; i++)
        assert_int_equal(fsc_pipe_stage_at((fsc_pipe_placement)bad_at[i][0], bad_at[i][1], bad_at[i][2], bad_at[i][3]),
                         -1);
    static const int bad_rank[][3] = { { FSC_PIPE_LOOP, 0, 5 }, { FSC_PIPE_LOOP, -1, 5 }, { FSC_PIPE_LOOP, 4, -1 },
                                       { FSC_PIPE_V, 4, 8 },    { FSC_PIPE_V, 0, 0 },     { FSC_PIPE_V, 4, -2 },
                                       { 7, 4, 0 } };
    for (size_t i = 0; i < sizeof bad_rank / sizeof bad_rank[0]; i++)
        assert_int_equal(fsc_pipe_stage_rank((fsc_pipe_placement)bad_rank[i][0], bad_rank[i][1], bad_rank[i][2]), -1);
    assert_int_equal(fsc_pipe_stage_rank(FSC_PIPE_V, INT_MAX, INT_MAX), INT_MAX - 1);
}

/* ZBV over p = 1..8, m = 1..12: valid in a V, 3 x 2 m actions per rank; a last rank that runs F(0) of its chunk 1
 * first waits on its own chunk 0 forever; a V placement of other than two chunks is refused */
static void test_zbv_grid_valid(void **state) {
    (void)state;
    for (int p = 1; p <= MAXP; p++)
        for (int m = 1; m <= 12; m++) {
            lists l;
            make_all(FSC_SCHED_ZBV, p, 2, m, &l);
            for (int r = 0; r < p; r++) assert_int_equal(l.n[r], 6 * m);
            fsc_status s = validate_v(p, m, &l);
            if (s != FSC_OK) fail_msg("zbv p %d m %d: %s", p, m, fsc_last_error());
            free_all(p, &l);
        }
    lists l;
    make_all(FSC_SCHED_ZBV, 2, 2, 4, &l);
    l.a[1][0] = (fsc_pipe_action){ FSC_ACT_FORWARD, 0, 1 }; /* F0.0 F0.1 as F0.1 F0.0 */
    l.a[1][1] = (fsc_pipe_action){ FSC_ACT_FORWARD, 0, 0 };
    assert_err(validate_v(2, 4, &l), FSC_ERR_INVALID,
               "rank 1 waits at action 0, F(mb 0, chunk 1), for its input from rank 1");
    assert_err(fsc_pipe_schedule_validate_placed(FSC_PIPE_V, 2, 3, 4, (const fsc_pipe_action *const *)l.a, l.n),
               FSC_ERR_INVALID, "two chunks per rank");
    free_all(2, &l);
    fsc_pipe_action *a = NULL;
    int n = 0;
    assert_err(fsc_pipe_schedule_make(FSC_SCHED_ZBV, 2, 1, 4, 0, &a, &n), FSC_ERR_INVALID, "two chunks per rank");
    assert_null(a);
}

static void test_make_refuses(void **state) {
    (void)state;
    fsc_pipe_action *a = NULL;
    int n = 0;
    assert_err(fsc_pipe_schedule_make(FSC_SCHED_1F1B, 2, 2, 4, 0, &a, &n), FSC_ERR_INVALID, "one chunk per rank");
    assert_err(fsc_pipe_schedule_make((fsc_pipe_schedule)9, 2, 1, 4, 0, &a, &n), FSC_ERR_INVALID, "unknown");
    assert_err(fsc_pipe_schedule_make(FSC_SCHED_GPIPE, 2, 1, 4, 2, &a, &n), FSC_ERR_INVALID, "rank 2 of 2");
    assert_err(fsc_pipe_schedule_make(FSC_SCHED_GPIPE, 0, 1, 4, 0, &a, &n), FSC_ERR_INVALID, "pipeline ranks");
    assert_err(fsc_pipe_schedule_make(FSC_SCHED_GPIPE, 2, 1, 0, 0, &a, &n), FSC_ERR_INVALID, "micro-batches");
    assert_err(fsc_pipe_schedule_make(FSC_SCHED_INTERLEAVED, 4, 2, 6, 0, &a, &n), FSC_ERR_INVALID,
               "6 micro-batches are not a multiple of the 4 pipeline stages");
    assert_null(a);
}

/* A 1F1B of p = 3, m = 4 with rank 1's action i replaced by x: refused with a message holding needle. */
static void broken(int i, fsc_pipe_action x, const char *needle) {
    lists l;
    make_all(FSC_SCHED_1F1B, 3, 1, 4, &l);
    l.a[1][i] = x;
    assert_err(validate(3, 1, 4, &l), FSC_ERR_INVALID, needle);
    free_all(3, &l);
}

static void test_broken_lists_refused(void **state) {
    (void)state;
    /* rank 1 runs F0 F1 B0 F2 B1 F3 B2 B3 */
    broken(0, (fsc_pipe_action){ (fsc_pipe_action_kind)5, 0, 0 }, "rank 1, action 0 has unknown kind 5");
    broken(1, (fsc_pipe_action){ FSC_ACT_FORWARD, 4, 0 }, "rank 1, action 1, F(mb 4, chunk 0) is out of range");
    broken(1, (fsc_pipe_action){ FSC_ACT_FORWARD, 1, 1 }, "rank 1, action 1, F(mb 1, chunk 1) is out of range");
    broken(1, (fsc_pipe_action){ FSC_ACT_FORWARD, 0, 0 }, "rank 1, action 1, F(mb 0, chunk 0) runs a second time");
    broken(2, (fsc_pipe_action){ FSC_ACT_BACKWARD, 1, 0 }, "rank 1, action 2, B(mb 1, chunk 0) comes before micro-batch 0");
    broken(2, (fsc_pipe_action){ FSC_ACT_FORWARD, 2, 0 }, "rank 1, action 3, F(mb 2, chunk 0) runs a second time");
    /* the count: one action short */
    lists l;
    make_all(FSC_SCHED_1F1B, 3, 1, 4, &l);
    l.n[2]--;
    assert_err(validate(3, 1, 4, &l), FSC_ERR_INVALID, "rank 2 has 7 actions (need 2 x 1 chunks x 4 micro-batches = 8)"
               ", or with W actions 3 x that = 12: it never runs B(mb 3, chunk 0)");
    l.n[2]++;
    /* one action too many, a forward run twice: the count and the repeat, which the count alone left to be found */
    fsc_pipe_action more[9], *keep = l.a[2];
    memcpy(more, keep, 8 * sizeof *more);
    more[8] = (fsc_pipe_action){ FSC_ACT_FORWARD, 2, 0 };
    l.a[2] = more, l.n[2] = 9;
    assert_err(validate(3, 1, 4, &l), FSC_ERR_INVALID, "rank 2 has 9 actions (need 2 x 1 chunks x 4 micro-batches = 8)"
               ", or with W actions 3 x that = 12: action 8, F(mb 2, chunk 0) runs a second time");
    l.a[2] = keep, l.n[2] = 8;
    /* B before its F: rank 2 (F0 B0 F1 ...) as B0 F0 F1 ... */
    l.a[2][0] = (fsc_pipe_action){ FSC_ACT_BACKWARD, 0, 0 };
    l.a[2][1] = (fsc_pipe_action){ FSC_ACT_FORWARD, 0, 0 };
    assert_err(validate(3, 1, 4, &l), FSC_ERR_INVALID, "rank 2, action 0, B(mb 0, chunk 0) comes before its forward");
    free_all(3, &l);
}

static void test_deadlock_refused(void **state) {
    (void)state;
    /* rank 0 waits for micro-batch 0's gradient before it sends micro-batch 1, which rank 1 waits for first */
    static const fsc_pipe_action r0[] = { { FSC_ACT_FORWARD, 0, 0 }, { FSC_ACT_BACKWARD, 0, 0 },
                                          { FSC_ACT_FORWARD, 1, 0 }, { FSC_ACT_BACKWARD, 1, 0 } };
    static const fsc_pipe_action r1[] = { { FSC_ACT_FORWARD, 0, 0 }, { FSC_ACT_FORWARD, 1, 0 },
                                          { FSC_ACT_BACKWARD, 0, 0 }, { FSC_ACT_BACKWARD, 1, 0 } };
    const fsc_pipe_action *const ls[] = { r0, r1 };
    const int n[] = { 4, 4 };
    assert_err(fsc_pipe_schedule_validate(2, 1, 2, ls, n), FSC_ERR_INVALID,
               "deadlocks: rank 0 waits at action 1, B(mb 0, chunk 0), for its output gradient from rank 1; rank 1 "
               "waits at action 1, F(mb 1, chunk 0), for its input from rank 0");
    /* the same lists on the last rank in the other order run */
    const fsc_pipe_action *const ok[] = { r1, r0 };
    assert_ok(fsc_pipe_schedule_validate(2, 1, 2, ok, n));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_builtin_orders),
        cmocka_unit_test(test_builtin_grid_valid),
        cmocka_unit_test(test_accumulation_list),
        cmocka_unit_test(test_interleaved_order),
        cmocka_unit_test(test_zb_h1_order),
        cmocka_unit_test(test_zb_h1_grid_valid),
        cmocka_unit_test(test_zbv_order),
        cmocka_unit_test(test_stage_placement_range),
        cmocka_unit_test(test_zbv_grid_valid),
        cmocka_unit_test(test_broken_w_refused),
        cmocka_unit_test(test_interleaved_grid_valid),
        cmocka_unit_test(test_stream_order_refused),
        cmocka_unit_test(test_make_refuses),
        cmocka_unit_test(test_broken_lists_refused),
        cmocka_unit_test(test_deadlock_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
