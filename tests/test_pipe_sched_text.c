/* Pipeline schedules as text (fsc_pipe_schedule_parse, fsc_pipe_schedule_format; docs/pipeline.md "Schedules as
 * text"): every built-in schedule over a grid of ranks, chunks and micro-batches written and read back gives the
 * same lists; a hand-written file in PyTorch's action notation with comments, commas and a placement line reads as
 * meant; bad text is refused with a message naming the line and the problem (not an action, a stage of another
 * rank, a second placement line, a V's stage out of range, a list the validator refuses); the buffer contract of
 * the writer. */
#include <stdlib.h>
#include <string.h>
#include "testutil.h"
#include "fsc/pipe_schedule.h"

/* The built-in lists of kind, written, read back: the same placement, sizes and actions. */
static void round_trip(fsc_pipe_schedule kind, int p, int v, int m) {
    fsc_pipe_action *lists[8];
    int lens[8];
    for (int r = 0; r < p; r++) assert_int_equal(fsc_pipe_schedule_make(kind, p, v, m, r, &lists[r], &lens[r]), FSC_OK);
    const fsc_pipe_placement pl = fsc_pipe_schedule_placement(kind);
    size_t len = 0;
    assert_int_equal(fsc_pipe_schedule_format(pl, p, v, (const fsc_pipe_action *const *)lists, lens, NULL, 0, &len),
                     FSC_OK);
    char *text = malloc(len + 1);
    assert_non_null(text);
    size_t len2 = 0;
    assert_int_equal(fsc_pipe_schedule_format(pl, p, v, (const fsc_pipe_action *const *)lists, lens, text, len + 1,
                                              &len2), FSC_OK);
    assert_int_equal(len2, len);
    assert_int_equal(strlen(text), len);
    fsc_pipe_schedule_lists s;
    if (fsc_pipe_schedule_parse(text, len, &s) != FSC_OK)
        fail_msg("kind %d p %d v %d m %d: %s\n%s", (int)kind, p, v, m, fsc_last_error(), text);
    assert_int_equal(s.placement, pl);
    assert_int_equal(s.p, p);
    assert_int_equal(s.v, v);
    assert_int_equal(s.m, m);
    for (int r = 0; r < p; r++) {
        assert_int_equal(s.lens[r], lens[r]);
        assert_memory_equal(s.lists[r], lists[r], (size_t)lens[r] * sizeof **lists);
        fsc_pipe_schedule_free(lists[r]);
    }
    fsc_pipe_schedule_lists_free(&s);
    assert_null(s.lists);
    free(text);
}

static void test_round_trip_builtins(void **state) {
    (void)state;
    for (int p = 1; p <= 4; p++)
        for (int m = 1; m <= 9; m++) {
            round_trip(FSC_SCHED_GPIPE, p, 1, m);
            round_trip(FSC_SCHED_1F1B, p, 1, m);
            round_trip(FSC_SCHED_ZB_H1, p, 1, m);
            round_trip(FSC_SCHED_ZBV, p, 2, m);
            if (m % p == 0)
                for (int v = 2; v <= 3; v++) round_trip(FSC_SCHED_INTERLEAVED, p, v, m);
        }
}

/* A file as a user writes it: 1F1B of 2 ranks and 2 micro-batches with W, commas, comments and blank lines. */
static void test_hand_written(void **state) {
    (void)state;
    static const char text[] = "# 2 ranks, 2 micro-batches, split backward\n"
                               "\n"
                               "placement loop   # the default\n"
                               "0F0, 0F1, 0B0, 0W0, 0B1, 0W1\r\n"
                               "  1F0 1B0\t1F1 1B1 1W0 1W1   # the last rank\n";
    fsc_pipe_schedule_lists s;
    assert_int_equal(fsc_pipe_schedule_parse(text, sizeof text - 1, &s), FSC_OK);
    assert_int_equal(s.placement, FSC_PIPE_LOOP);
    assert_int_equal(s.p, 2);
    assert_int_equal(s.v, 1);
    assert_int_equal(s.m, 2);
    assert_int_equal(s.lens[0], 6);
    assert_int_equal(s.lens[1], 6);
    assert_int_equal(s.lists[0][3].kind, FSC_ACT_WEIGHT);
    assert_int_equal(s.lists[0][4].kind, FSC_ACT_BACKWARD);
    assert_int_equal(s.lists[0][4].micro, 1);
    assert_int_equal(s.lists[1][5].kind, FSC_ACT_WEIGHT);
    fsc_pipe_schedule_lists_free(&s);
    static const char bom[] = "\xef\xbb\xbf" "0F0 0B0\n1F0 1B0\n"; /* a UTF-8 byte-order mark first: read past */
    assert_int_equal(fsc_pipe_schedule_parse(bom, sizeof bom - 1, &s), FSC_OK);
    assert_int_equal(s.p, 2);
    fsc_pipe_schedule_lists_free(&s);
    /* a V: rank 0 holds stages 0 and 3, rank 1 stages 1 and 2; chunk = stage / p */
    static const char vee[] = "placement v\n"
                              "0F0 1F0 2F0 3F0 3B0 2B0 1B0 0B0\n";
    assert_int_equal(fsc_pipe_schedule_parse(vee, sizeof vee - 1, &s), FSC_ERR_INVALID); /* one line: 1 rank */
    static const char vee2[] = "placement v\n"
                               "0F0 3F0 3B0 0B0\n"
                               "1F0 2F0 2B0 1B0\n";
    assert_int_equal(fsc_pipe_schedule_parse(vee2, sizeof vee2 - 1, &s), FSC_OK);
    assert_int_equal(s.placement, FSC_PIPE_V);
    assert_int_equal(s.v, 2);
    assert_int_equal(s.lists[0][1].chunk, 1);
    assert_int_equal(s.lists[1][1].chunk, 1);
    assert_int_equal(s.lists[1][0].chunk, 0);
    fsc_pipe_schedule_lists_free(&s);
}

static void refused(const char *text, const char *needle) {
    fsc_pipe_schedule_lists s;
    memset(&s, 0x5a, sizeof s);
    assert_int_equal(fsc_pipe_schedule_parse(text, strlen(text), &s), FSC_ERR_INVALID);
    if (!strstr(fsc_last_error(), needle)) fail_msg("'%s': message '%s' lacks '%s'", text, fsc_last_error(), needle);
    assert_null(s.lists); /* zeroed on failure: a free is harmless */
    fsc_pipe_schedule_lists_free(&s);
}

static void test_bad_text_refused(void **state) {
    (void)state;
    refused("", "no rank's actions");
    refused("# only a comment\n\n", "no rank's actions");
    refused("0F0 0X0 0B0\n", "line 1: '0X0' is not an action");
    refused("0F0 0B0\n0F\n", "line 2: '0F' is not an action");
    refused("0F0 F1\n", "'F1' is not an action");
    refused("0F0 0B0x\n", "'0B0x' is not an action");
    refused("0F1234567890 0B0\n", "numbers of at most 9 digits");
    refused("0F-1\n", "'0F-1' is not an action");
    refused("0f0 0b0\n", "'0f0' is not an action");
    refused("0F0 1F0 0B0 1B0\n0F0 0B0\n", "line 1 (rank 0): action 1, 1F0: stage 1 is not this rank's");
    refused("0F0 0B0\nplacement v\n", "line 2: 'placement' comes once, before the first rank's actions");
    refused("placement loop\nplacement loop\n0F0 0B0\n", "'placement' comes once");
    refused("placement ring\n0F0 0B0\n", "'placement' takes loop or v");
    refused("placement v extra\n0F0 0B0\n", "'placement' takes loop or v");
    refused("placement v\n0F0 5F0\n1F0\n", "stage 5, but a V of 2 ranks has stages 0 .. 3");
    refused("0F0 0B0 0B0\n", "runs a second time"); /* the validator's message */
    refused("0B0 0F0\n", "rank 0");                    /* B before its F */
    refused("0F0 0B0 0F1 0B1\n1F0 1F1 1B0 1B1\n", "deadlock"); /* rank 0's B0 waits for rank 1's F1 */
    static const char nul[] = "0F0 0B0\n0F\0 0B0\n";
    fsc_pipe_schedule_lists s;
    assert_int_equal(fsc_pipe_schedule_parse(nul, sizeof nul - 1, &s), FSC_ERR_INVALID);
    assert_non_null(strstr(fsc_last_error(), "line 2: a NUL byte"));
}

/* PyTorch writes the input part of a split backward as I (its B is the whole backward): read as fsc's B in a list
 * with W, the same lists; an I in a rank's list without W is refused, naming it. */
static void test_pytorch_input_part(void **state) {
    (void)state;
    static const char fsc[] = "0F0 0F1 0B0 0W0 0B1 0W1\n1F0 1B0 1F1 1B1 1W0 1W1\n";
    static const char torch[] = "0F0,0F1,0I0,0W0,0I1,0W1\n1F0,1I0,1F1,1I1,1W0,1W1\n";
    fsc_pipe_schedule_lists a, b;
    assert_int_equal(fsc_pipe_schedule_parse(fsc, sizeof fsc - 1, &a), FSC_OK);
    assert_int_equal(fsc_pipe_schedule_parse(torch, sizeof torch - 1, &b), FSC_OK);
    assert_int_equal(a.p, b.p);
    assert_int_equal(a.m, b.m);
    for (int r = 0; r < a.p; r++) {
        assert_int_equal(a.lens[r], b.lens[r]);
        assert_memory_equal(a.lists[r], b.lists[r], (size_t)a.lens[r] * sizeof **a.lists);
    }
    fsc_pipe_schedule_lists_free(&a);
    fsc_pipe_schedule_lists_free(&b);
    refused("0F0 0I0\n1F0 1B0\n", "line 1 (rank 0): action 1, 0I0 is the input part of a split backward");
}

/* More lines of actions than the validator takes ranks: refused at the first line over, before the rest is read
 * (each line read costs memory; a 64 MiB file of "0F0" lines took 1.5 GB before it was refused). */
static void test_rank_limit_early(void **state) {
    (void)state;
    const size_t n = 70000;
    char *t = malloc(4 * n + 5);
    assert_non_null(t);
    for (size_t i = 0; i < n; i++) memcpy(t + 4 * i, "0F0\n", 4);
    memcpy(t + 4 * n, "0X0\n", 5); /* line 70001: never read */
    fsc_pipe_schedule_lists s;
    assert_int_equal(fsc_pipe_schedule_parse(t, 4 * n + 4, &s), FSC_ERR_INVALID);
    if (!strstr(fsc_last_error(), "line 65537: more than 65536 lines of actions"))
        fail_msg("message '%s'", fsc_last_error());
    assert_null(s.lists);
    free(t);
}

/* A text of another number of lines than the pipeline's ranks (two lines joined, one cut in two, bare CR line ends
 * that read as one line) is refused as such, not validated as another pipeline's lists (a deadlock, a stage that is
 * not the rank's); the same text with the right count parses as fsc_pipe_schedule_parse reads it. */
static void test_parse_ranks(void **state) {
    (void)state;
    static const char *const good = "0F0 0F1 0B0 0B1\n1F0 1B0 1F1 1B1\n";
    static const struct { const char *text; int ranks; const char *needle; } bad[] = {
        { "0F0 0F1 0B0 0B1 1F0 1B0 1F1 1B1\n", 2, "1 line of actions for 2 pipeline ranks" },
        { "0F0 0F1 0B0 0B1\n1F0 1B0\n1F1 1B1\n", 2, "3 lines of actions for 2 pipeline ranks" },
        { "0F0 0F1 0B0 0B1\r1F0 1B0 1F1 1B1\r", 2, "1 line of actions for 2 pipeline ranks" },
        { "0F0 0F1 0B0 0B1\n1F0 1B0 1F1 1B1\n", 3, "2 lines of actions for 3 pipeline ranks" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fsc_pipe_schedule_lists s;
        assert_int_equal(fsc_pipe_schedule_parse_ranks(bad[i].text, strlen(bad[i].text), bad[i].ranks, &s),
                         FSC_ERR_INVALID);
        if (!strstr(fsc_last_error(), bad[i].needle)) fail_msg("case %zu: message '%s'", i, fsc_last_error());
        assert_null(s.lists);
    }
    fsc_pipe_schedule_lists a, b;
    assert_ok(fsc_pipe_schedule_parse_ranks(good, strlen(good), 2, &a));
    assert_ok(fsc_pipe_schedule_parse(good, strlen(good), &b));
    assert_int_equal(a.p, 2);
    assert_int_equal(a.m, b.m);
    for (int r = 0; r < 2; r++) {
        assert_int_equal(a.lens[r], b.lens[r]);
        assert_memory_equal(a.lists[r], b.lists[r], (size_t)a.lens[r] * sizeof **a.lists);
    }
    fsc_pipe_schedule_lists_free(&a);
    fsc_pipe_schedule_lists_free(&b);
}

/* The writer's buffer: NULL and 0 ask the length; a short buffer is refused, cut with a NUL; bad lists refused. */
static void test_format_buffer(void **state) {
    (void)state;
    const fsc_pipe_action a[2] = { { FSC_ACT_FORWARD, 0, 0 }, { FSC_ACT_BACKWARD, 0, 0 } };
    const fsc_pipe_action *lists[1] = { a };
    const int lens[1] = { 2 };
    size_t len = 0;
    assert_int_equal(fsc_pipe_schedule_format(FSC_PIPE_LOOP, 1, 1, lists, lens, NULL, 0, &len), FSC_OK);
    char buf[128];
    assert_int_equal(fsc_pipe_schedule_format(FSC_PIPE_LOOP, 1, 1, lists, lens, buf, sizeof buf, &len), FSC_OK);
    assert_string_equal(buf, "# fsc pipeline schedule: 1 rank, 1 chunk per rank\nplacement loop\n0F0 0B0\n");
    char small[10];
    assert_int_equal(fsc_pipe_schedule_format(FSC_PIPE_LOOP, 1, 1, lists, lens, small, sizeof small, &len),
                     FSC_ERR_INVALID);
    assert_int_equal(strlen(small), sizeof small - 1);
    assert_int_equal(fsc_pipe_schedule_format(FSC_PIPE_LOOP, 1, 1, lists, lens, NULL, 5, &len), FSC_ERR_INVALID);
    char *none = malloc(1); /* a buffer of cap 0: refused, nothing written (ASan sees a write before it) */
    assert_non_null(none);
    none[0] = 'x';
    assert_int_equal(fsc_pipe_schedule_format(FSC_PIPE_LOOP, 1, 1, lists, lens, none + 1, 0, &len), FSC_ERR_INVALID);
    assert_int_equal(none[0], 'x');
    free(none);
    assert_int_equal(fsc_pipe_schedule_format(FSC_PIPE_V, 1, 1, lists, lens, buf, sizeof buf, &len), FSC_ERR_INVALID);
    const fsc_pipe_action bad[1] = { { FSC_ACT_FORWARD, 0, 3 } };
    const fsc_pipe_action *bl[1] = { bad };
    const int bn[1] = { 1 };
    assert_int_equal(fsc_pipe_schedule_format(FSC_PIPE_LOOP, 1, 1, bl, bn, buf, sizeof buf, &len), FSC_ERR_INVALID);
    assert_non_null(strstr(fsc_last_error(), "chunk 3"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_builtins),
        cmocka_unit_test(test_hand_written),
        cmocka_unit_test(test_bad_text_refused),
        cmocka_unit_test(test_format_buffer),
        cmocka_unit_test(test_pytorch_input_part),
        cmocka_unit_test(test_rank_limit_early),
        cmocka_unit_test(test_parse_ranks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
