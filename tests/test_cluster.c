/* Tests of fsc_cluster_run (sim/cluster.c): options are validated, every rank runs once with its own id,
 * device and world communicator, and a failing rank's error comes back named.
 * Rank functions record what they saw; the test asserts after the run (cmocka is not thread-safe). */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include "testutil.h"

#define MAXW 64

typedef struct {
    atomic_int calls;
    int seen[MAXW], world[MAXW], local[MAXW], crank[MAXW], csize[MAXW];
    fsc_device *dev[MAXW];
    fsc_comm *comm[MAXW];
    char devname[MAXW][16], commname[MAXW][32];
    pthread_t thread[MAXW];
    int sum[MAXW];
} ids;

static fsc_status rank_ids(fsc_rank *r, void *arg) {
    ids *d = arg;
    atomic_fetch_add(&d->calls, 1);
    int k = r->rank;
    if (k < 0 || k >= MAXW) return fsc_error(FSC_ERR_INTERNAL, "rank %d out of range", k);
    d->seen[k]++;
    d->world[k] = r->world;
    d->local[k] = r->local_rank;
    d->dev[k] = r->dev;
    d->comm[k] = r->comm;
    d->crank[k] = fsc_comm_rank(r->comm);
    d->csize[k] = fsc_comm_size(r->comm);
    d->thread[k] = pthread_self();
    snprintf(d->devname[k], sizeof(d->devname[k]), "%s", fsc_device_name(r->dev));
    snprintf(d->commname[k], sizeof(d->commname[k]), "%s", fsc_comm_name(r->comm));
    /* the device works: allocate and release */
    void *p = NULL;
    FSC_TRY(fsc_device_alloc(r->dev, FSC_TAG_WORKSPACE, 64, &p));
    fsc_device_release(r->dev, p);
    /* the world communicator works: sum of rank ids */
    int32_t v = k;
    FSC_TRY(fsc_comm_all_reduce(r->comm, &v, &v, 1, FSC_I32, FSC_SUM));
    d->sum[k] = v;
    return FSC_OK;
}

/* Oracle: fn runs exactly once per rank with rank = local_rank = comm rank in 0..world-1, world = comm
 * size, a distinct "cpu" device and communicator per rank named "world", and the ranks' sum of ids is
 * world(world-1)/2; world 1 runs on the calling thread. */
static void test_rank_ids_and_devices(void **state) {
    (void)state;
    const int worlds[] = {1, 2, 3, 7, 8, 33};
    for (size_t t = 0; t < sizeof(worlds) / sizeof(worlds[0]); t++) {
        int W = worlds[t];
        ids *d = calloc(1, sizeof(*d));
        atomic_init(&d->calls, 0);
        assert_ok(fsc_cluster_run(&(fsc_cluster_opts){.world = W, .device = t % 2 ? "cpu" : NULL}, rank_ids, d));
        assert_int_equal(atomic_load(&d->calls), W);
        for (int k = 0; k < W; k++) {
            assert_int_equal(d->seen[k], 1);
            assert_int_equal(d->world[k], W);
            assert_int_equal(d->local[k], k);
            assert_int_equal(d->crank[k], k);
            assert_int_equal(d->csize[k], W);
            assert_int_equal(d->sum[k], W * (W - 1) / 2);
            assert_string_equal(d->devname[k], "cpu");
            assert_string_equal(d->commname[k], "world");
            assert_non_null(d->dev[k]);
            for (int j = 0; j < k; j++) {
                assert_ptr_not_equal(d->dev[k], d->dev[j]);
                assert_ptr_not_equal(d->comm[k], d->comm[j]);
                assert_false(pthread_equal(d->thread[k], d->thread[j]));
            }
        }
        if (W == 1) assert_true(pthread_equal(d->thread[0], pthread_self()));
        free(d);
    }
}

static fsc_status rank_never(fsc_rank *r, void *arg) {
    (void)r;
    atomic_fetch_add((atomic_int *)arg, 1);
    return FSC_OK;
}

/* Oracle: bad options are rejected with FSC_ERR_INVALID and a message naming the option, before any
 * rank runs. */
static void test_options_validation(void **state) {
    (void)state;
    atomic_int calls;
    atomic_init(&calls, 0);
    assert_err(fsc_cluster_run(NULL, rank_never, &calls), FSC_ERR_INVALID, "opts is NULL");
    assert_err(fsc_cluster_run(&(fsc_cluster_opts){.world = 2}, NULL, &calls), FSC_ERR_INVALID, "fn is NULL");
    assert_err(fsc_cluster_run(&(fsc_cluster_opts){.world = 0}, rank_never, &calls), FSC_ERR_INVALID,
               "world 0 is out of range (1 to 1024 ranks)");
    assert_err(fsc_cluster_run(&(fsc_cluster_opts){.world = -3}, rank_never, &calls), FSC_ERR_INVALID, "world -3");
    assert_err(fsc_cluster_run(&(fsc_cluster_opts){.world = 1025}, rank_never, &calls), FSC_ERR_INVALID,
               "world 1025");
    assert_err(fsc_cluster_run(&(fsc_cluster_opts){.world = 2, .timeout_s = -1}, rank_never, &calls),
               FSC_ERR_INVALID, "timeout_s -1");
    assert_err(fsc_cluster_run(&(fsc_cluster_opts){.world = 2, .timeout_s = NAN}, rank_never, &calls),
               FSC_ERR_INVALID, "timeout_s");
    assert_err(fsc_cluster_run(&(fsc_cluster_opts){.world = 2, .timeout_s = INFINITY}, rank_never, &calls),
               FSC_ERR_INVALID, "finite");
    assert_err(fsc_cluster_run(&(fsc_cluster_opts){.world = 2, .threads_per_rank = -1}, rank_never, &calls),
               FSC_ERR_INVALID, "threads_per_rank -1");
    assert_err(fsc_cluster_run(&(fsc_cluster_opts){.world = 2, .device = "tpu"}, rank_never, &calls),
               FSC_ERR_INVALID, "tpu");
    assert_int_equal(atomic_load(&calls), 0);
    /* valid edge values run */
    assert_ok(fsc_cluster_run(&(fsc_cluster_opts){.world = 3, .timeout_s = 0.5, .threads_per_rank = 2}, rank_never,
                              &calls));
    assert_int_equal(atomic_load(&calls), 3);
}

static fsc_status rank_fails(fsc_rank *r, void *arg) {
    (void)arg;
    if (r->rank == 2) return fsc_error(FSC_ERR_IO, "disk on fire at rank two");
    /* the others wait in a barrier, which the failure ends */
    return fsc_comm_barrier(r->comm);
}

static fsc_status rank_fails_silently(fsc_rank *r, void *arg) {
    (void)arg;
    fsc_clear_error();
    return r->rank == 0 ? FSC_ERR_STATE : FSC_OK;
}

/* Oracle: the run returns the failing rank's own status and message prefixed "rank R: " (not the
 * FSC_ERR_COMM the other ranks get as a consequence); a failure without a message names its status. */
static void test_failure_is_reported_with_rank(void **state) {
    (void)state;
    assert_err(fsc_cluster_run(&(fsc_cluster_opts){.world = 4, .timeout_s = 20}, rank_fails, NULL), FSC_ERR_IO,
               "rank 2: disk on fire at rank two");
    assert_err(fsc_cluster_run(&(fsc_cluster_opts){.world = 1}, rank_fails_silently, NULL), FSC_ERR_STATE,
               "rank 0: ");
    assert_true(strlen(fsc_last_error()) > strlen("rank 0: "));
}

/* fsc_comm_agree: every rank gets the lowest failing rank's status and message; all FSC_OK when all passed. */
typedef struct {
    int fail_mask;
    fsc_status got[8];
    char msg[8][256];
} agree_case;

static fsc_status rank_agree(fsc_rank *r, void *arg) {
    agree_case *a = arg;
    fsc_status mine = (a->fail_mask >> r->rank) & 1
                          ? fsc_error(FSC_ERR_IO, "disk %d is full", r->rank) : FSC_OK;
    if ((a->fail_mask >> 8 >> r->rank) & 1) mine = (fsc_status)99; /* not a status: the caller's bug, a failure */
    a->got[r->rank] = fsc_comm_agree(r->comm, r->dev, mine);
    snprintf(a->msg[r->rank], sizeof a->msg[r->rank], "%s", a->got[r->rank] == FSC_OK ? "" : fsc_last_error());
    return FSC_OK;
}

static void test_agree(void **state) {
    (void)state;
    fsc_cluster_opts co = {.world = 5, .timeout_s = 10};
    agree_case ok = {.fail_mask = 0};
    assert_ok(fsc_cluster_run(&co, rank_agree, &ok));
    for (int r = 0; r < 5; r++) assert_int_equal(ok.got[r], FSC_OK);
    agree_case bad = {.fail_mask = (1 << 2) | (1 << 4)}; /* ranks 2 and 4 fail: rank 2's verdict wins */
    assert_ok(fsc_cluster_run(&co, rank_agree, &bad));
    for (int r = 0; r < 5; r++) {
        assert_int_equal(bad.got[r], FSC_ERR_IO);
        assert_non_null(strstr(bad.msg[r], "disk 2 is full"));
        if (r != 2) assert_non_null(strstr(bad.msg[r], "rank 2: "));
    }
    agree_case junk = {.fail_mask = 1 << 8 << 1}; /* rank 1 passes 99 */
    assert_ok(fsc_cluster_run(&co, rank_agree, &junk));
    for (int r = 0; r < 5; r++) {
        assert_int_equal(junk.got[r], FSC_ERR_INVALID);
        assert_non_null(strstr(junk.msg[r], "status 99 is not an fsc_status"));
    }
}

/* A failure agreed on and passed from rank to rank names its rank once: the run's message is exactly
 * "rank 0: disk full" whichever rank reports first (before: "rank 1: rank 0: disk full"). Rank 0 waits
 * before returning so that a rank which only learned of the failure is the first to end. */
static fsc_status rank0_fails_late(fsc_rank *r, void *arg) {
    (void)arg;
    fsc_status mine = r->rank == 0 ? fsc_error(FSC_ERR_IO, "disk full") : FSC_OK;
    fsc_status s = fsc_comm_agree(r->comm, r->dev, mine);
    if (r->rank == 0) nanosleep(&(struct timespec){0, 100 * 1000 * 1000}, NULL);
    return s;
}

/* In a sub-group the failing rank is named by its place in the group, once. */
static fsc_status pair_rank_fails(fsc_rank *r, void *arg) {
    (void)arg;
    fsc_comm *pair;
    FSC_TRY(fsc_comm_split(r->comm, r->rank / 2, r->rank, &pair));
    fsc_comm_set_name(pair, "pair");
    fsc_status mine = r->rank == 3 ? fsc_error(FSC_ERR_IO, "disk full") : FSC_OK;
    fsc_status s = fsc_comm_agree(pair, r->dev, mine);
    if (r->rank == 3) nanosleep(&(struct timespec){0, 100 * 1000 * 1000}, NULL);
    fsc_comm_free(pair);
    return s;
}

static void test_agreed_failure_names_its_rank_once(void **state) {
    (void)state;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(fsc_cluster_run(&(fsc_cluster_opts){.world = 3, .timeout_s = 10}, rank0_fails_late, NULL),
                         FSC_ERR_IO);
        assert_string_equal(fsc_last_error(), "rank 0: disk full");
    }
    assert_int_equal(fsc_cluster_run(&(fsc_cluster_opts){.world = 4, .timeout_s = 10}, pair_rank_fails, NULL),
                     FSC_ERR_IO);
    assert_string_equal(fsc_last_error(), "rank 1 of the 'pair' group: disk full");
}

/* The agreement itself fails (under MPI a call that timed out breaks every communicator of the process, so the
 * all-reduce of fsc_comm_agree fails at once; here rank 1 has gone): a rank that failed keeps its own status and
 * message, the cause, instead of the agreement's (before: "collective #N: all_reduce on comm 'world' ... unusable
 * after an earlier failure", naming another collective than the one that failed, and FSC_ERR_COMM for a timeout). */
typedef struct {
    fsc_status got;
    char msg[1024];
} agree_fails_case;

static fsc_status agree_fails(fsc_rank *r, void *arg) {
    agree_fails_case *a = arg;
    if (r->rank == 1) return fsc_error(FSC_ERR_IO, "rank 1 went away"); /* never agrees */
    fsc_status mine = fsc_error(FSC_ERR_TIMEOUT, "collective #7: all_reduce on comm 'pipeline': timed out");
    nanosleep(&(struct timespec){0, 100 * 1000 * 1000}, NULL); /* rank 1 has failed the cluster by now */
    a->got = fsc_comm_agree(r->comm, r->dev, mine);
    snprintf(a->msg, sizeof a->msg, "%s", fsc_last_error());
    return a->got;
}

static void test_agree_that_fails_keeps_the_cause(void **state) {
    (void)state;
    agree_fails_case a = {0};
    assert_int_not_equal(fsc_cluster_run(&(fsc_cluster_opts){.world = 2, .timeout_s = 10}, agree_fails, &a), FSC_OK);
    assert_int_equal(a.got, FSC_ERR_TIMEOUT);
    assert_string_equal(a.msg, "collective #7: all_reduce on comm 'pipeline': timed out");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rank_ids_and_devices),
        cmocka_unit_test(test_options_validation),
        cmocka_unit_test(test_failure_is_reported_with_rank),
        cmocka_unit_test(test_agree),
        cmocka_unit_test(test_agreed_failure_names_its_rank_once),
        cmocka_unit_test(test_agree_that_fails_keeps_the_cause),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
