/* Tests of the settings every rank must share (lib/core/settings.c) on simulated ranks.
 * Oracles: equal lists agree on every rank; a difference makes every rank return FSC_ERR_INVALID with the same
 * message, which names the first setting that differs, rank 0's value and the first differing rank's value
 * (and how many ranks differ when more than one does); a rank's failed add fails every rank with its message.
 * Rank functions never call cmocka (it is not thread-safe): they record their status and message. */
#include "testutil.h"

#define MAXW 4

typedef enum { SAME, ONE_VALUE, TWO_RANKS, SHORTER, OTHER_NAME, LONG_VALUE, EMPTY_VALUE, BAD_ADD } variant;

typedef struct {
    variant v;
    fsc_status st[MAXW];
    char msg[MAXW][600];
} job;

/* Every rank's list: a few settings as a program would write them, varied on some ranks by the variant. */
static fsc_status fill(fsc_settings *s, variant v, int rank) {
    char big[1001];
    memset(big, 'x', 1000);
    big[1000] = 0;
    if (v == LONG_VALUE && rank == 1) big[999] = 'y'; /* differs past what a message shows */
    fsc_settings_add(s, "model.layers", "%d", 2);
    fsc_settings_add(s, v == OTHER_NAME && rank == 1 ? "model.width" : "model.heads", "%d", 4);
    fsc_settings_add(s, "optimizer.lr", "%.9g", v == ONE_VALUE && rank == 1 ? 1e-4 : 1e-3);
    fsc_settings_add(s, "optimizer.kind", "%s", v == TWO_RANKS && rank >= 2 ? "sgd" : "adamw");
    fsc_settings_add(s, "data.sample", "%s", big);
    fsc_settings_add(s, "data.format", "%s", v == EMPTY_VALUE && rank == 3 ? "" : "bytes");
    if (v == BAD_ADD && rank == 2) fsc_settings_add(s, "", "%d", 1);
    if (!(v == SHORTER && rank == 3)) return fsc_settings_add(s, "seed", "%llu", 18446744073709551615ull);
    return FSC_OK;
}

static fsc_status agree_fn(fsc_rank *r, void *arg) {
    job *j = arg;
    fsc_settings *s = NULL;
    fsc_status st = fsc_settings_create(&s);
    if (st == FSC_OK) {
        fill(s, j->v, r->rank); /* a failed add is kept and reported by agree */
        st = fsc_settings_agree(s, r->comm, r->dev);
    }
    j->st[r->rank] = st;
    snprintf(j->msg[r->rank], sizeof j->msg[r->rank], "%s", st == FSC_OK ? "" : fsc_last_error());
    fsc_settings_free(s);
    return st;
}

/* Run the variant on world ranks: every rank returns want, with one message containing needle (NULL: agree). */
static void expect(variant v, int world, fsc_status want, const char *needle) {
    job j;
    memset(&j, 0, sizeof j);
    j.v = v;
    for (int r = 0; r < world; r++) j.st[r] = (fsc_status)-1;
    fsc_cluster_opts co = fsc_cluster_opts_default();
    co.world = world;
    co.timeout_s = 20;
    fsc_status s = fsc_cluster_run(&co, agree_fn, &j);
    if (s != want) fail_msg("variant %d on %d ranks: %s, expected %s: %s", v, world, fsc_status_str(s),
                            fsc_status_str(want), fsc_last_error());
    for (int r = 0; r < world; r++) {
        if (j.st[r] != want) fail_msg("variant %d: rank %d returned %d, expected %s: %s", v, r, (int)j.st[r],
                                      fsc_status_str(want), j.msg[r]);
        if (needle && !strstr(j.msg[r], needle)) fail_msg("variant %d: rank %d: \"%s\" lacks \"%s\"", v, r, j.msg[r],
                                                          needle);
        if (want != FSC_OK && v != BAD_ADD && strcmp(j.msg[r], j.msg[0]) != 0)
            fail_msg("variant %d: rank %d says \"%s\", rank 0 \"%s\"", v, r, j.msg[r], j.msg[0]);
    }
}

static void test_equal_settings_agree(void **state) {
    (void)state;
    expect(SAME, 4, FSC_OK, NULL);
    expect(SAME, 1, FSC_OK, NULL);
    expect(ONE_VALUE, 1, FSC_OK, NULL); /* one rank has nobody to disagree with */
}

static void test_a_difference_names_the_setting_and_ranks(void **state) {
    (void)state;
    expect(ONE_VALUE, 4, FSC_ERR_INVALID, "ranks disagree on optimizer.lr: rank 0 has 0.001, rank 1 has 0.0001");
    expect(ONE_VALUE, 2, FSC_ERR_INVALID, "rank 1 has 0.0001");
    expect(TWO_RANKS, 4, FSC_ERR_INVALID,
           "ranks disagree on optimizer.kind: rank 0 has adamw, rank 2 has sgd (2 of 4 ranks differ from rank 0)");
    expect(SHORTER, 4, FSC_ERR_INVALID,
           "ranks disagree on setting 7: rank 0 has seed = 18446744073709551615, rank 3 has (none)");
    expect(OTHER_NAME, 3, FSC_ERR_INVALID, "ranks disagree on setting 2: rank 0 has model.heads = 4, rank 1 has "
                                           "model.width = 4");
    expect(EMPTY_VALUE, 4, FSC_ERR_INVALID, "ranks disagree on data.format: rank 0 has bytes, rank 3 has \"\"");
}

/* A value longer than a message shows still counts whole: the difference is found, the values are cut. */
static void test_long_values(void **state) {
    (void)state;
    expect(LONG_VALUE, 2, FSC_ERR_INVALID, "ranks disagree on data.sample: rank 0 has xxxxxxxxxx");
    job j;
    memset(&j, 0, sizeof j);
    j.v = LONG_VALUE;
    fsc_cluster_opts co = fsc_cluster_opts_default();
    co.world = 2;
    assert_int_equal(fsc_cluster_run(&co, agree_fn, &j), FSC_ERR_INVALID);
    assert_non_null(strstr(j.msg[0], "x..., rank 1 has xxx"));
    assert_true(strlen(j.msg[0]) < 700);
}

/* A failed add: at once on its rank, kept, and every rank's agree fails with it. */
static void test_failed_add(void **state) {
    (void)state;
    fsc_settings *s = NULL;
    assert_ok(fsc_settings_create(&s));
    assert_ok(fsc_settings_add(s, "a", "%d", 1));
    char name[80];
    memset(name, 'n', sizeof name - 1);
    name[sizeof name - 1] = 0;
    assert_err(fsc_settings_add(s, name, "%d", 1), FSC_ERR_INVALID, "a name has 1 to 63 bytes");
    assert_err(fsc_settings_add(s, "b", "%d", 2), FSC_ERR_INVALID, "a name has 1 to 63 bytes"); /* kept */
    assert_int_equal(fsc_settings_count(s), 1);
    fsc_settings_free(s);
    assert_err(fsc_settings_add(NULL, "a", "1"), FSC_ERR_INVALID, "settings is NULL");
    expect(BAD_ADD, 4, FSC_ERR_INVALID, "setting \"\": a name has 1 to 63 bytes");
    job j;
    memset(&j, 0, sizeof j);
    j.v = BAD_ADD;
    fsc_cluster_opts co = fsc_cluster_opts_default();
    co.world = 3;
    assert_int_equal(fsc_cluster_run(&co, agree_fn, &j), FSC_ERR_INVALID);
    assert_non_null(strstr(j.msg[0], "rank 2")); /* the others name the rank whose add failed */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_equal_settings_agree),
        cmocka_unit_test(test_a_difference_names_the_setting_and_ranks),
        cmocka_unit_test(test_long_values),
        cmocka_unit_test(test_failed_add),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
