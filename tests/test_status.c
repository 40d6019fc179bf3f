/* Tests for lib/core/status.c: the thread-local error message.
 * Oracles: the message is exactly the printf formatting of the arguments; a message set on another
 * thread is not visible on this one; long messages are truncated, never overflow; a prefix goes before
 * the message with ": ", behind the name of the rank a message came from; a rank prefix is added only to a message
 * that does not already name a rank. */
#include <pthread.h>
#include "testutil.h"

static void test_error_sets_message_and_returns_status(void **state) {
    (void)state;
    fsc_clear_error();
    assert_string_equal(fsc_last_error(), "");
    fsc_status s = fsc_error(FSC_ERR_INVALID, "balance sums to %d but the model has %d blocks", 11, 12);
    assert_int_equal(s, FSC_ERR_INVALID);
    assert_string_equal(fsc_last_error(), "balance sums to 11 but the model has 12 blocks");
    fsc_clear_error();
    assert_string_equal(fsc_last_error(), "");
}

static void test_status_names(void **state) {
    (void)state;
    assert_string_equal(fsc_status_str(FSC_OK), "ok");
    assert_string_equal(fsc_status_str(FSC_ERR_INVALID), "invalid argument");
    assert_string_equal(fsc_status_str(FSC_ERR_UNSUPPORTED), "unsupported");
    assert_string_equal(fsc_status_str(FSC_ERR_INTERNAL), "internal error");
    assert_string_equal(fsc_status_str(FSC_ERR_NUMERIC), "non-finite values");
    /* every code has a distinct name (FSC_ERR_NUMERIC is the last) */
    for (int a = FSC_OK; a <= FSC_ERR_NUMERIC; a++)
        for (int b = a + 1; b <= FSC_ERR_NUMERIC; b++)
            assert_string_not_equal(fsc_status_str((fsc_status)a), fsc_status_str((fsc_status)b));
    assert_string_equal(fsc_status_str((fsc_status)999), "unknown status");
}

static void test_long_message_truncated(void **state) {
    (void)state;
    char big[5000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    fsc_error(FSC_ERR_IO, "%s", big);
    size_t n = strlen(fsc_last_error());
    assert_true(n > 100 && n < sizeof big - 1);
}

/* Whether s is well-formed UTF-8 (no character cut). */
static int utf8_whole(const char *s) {
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        int n = *p < 0x80 ? 0 : (*p & 0xE0) == 0xC0 ? 1 : (*p & 0xF0) == 0xE0 ? 2 : (*p & 0xF8) == 0xF0 ? 3 : -1;
        if (n < 0) return 0;
        for (p++; n > 0; n--, p++)
            if ((*p & 0xC0) != 0x80) return 0;
    }
    return 1;
}

/* A message longer than the buffer keeps its head and its tail: one naming a deep path still ends with its cause
 * (the cut at the buffer lost it), and no UTF-8 character is split at either cut. */
static void test_long_message_keeps_its_cause(void **state) {
    (void)state;
    char path[4001];
    for (int i = 0; i < 4000; i += 2) memcpy(path + i, "\xc3\xa9", 2); /* e acute, 2 bytes each */
    path[4000] = '\0';
    for (int shift = 0; shift < 2; shift++) {
        assert_int_equal(fsc_error(FSC_ERR_IO, "%.*scannot create %s/step-00000003: No space left on device", shift,
                                   "x", path + 0), FSC_ERR_IO);
        const char *m = fsc_last_error();
        assert_true(strlen(m) < 1024);
        assert_non_null(strstr(m, " ... "));
        assert_true(strncmp(m, shift ? "xcannot create " : "cannot create ", 14 + (size_t)shift) == 0);
        const char *end = "/step-00000003: No space left on device";
        assert_string_equal(m + strlen(m) - strlen(end), end);
        assert_true(utf8_whole(m));
        fsc_error_prefix(FSC_ERR_IO, "saving"); /* prefixed again: still its cause last */
        assert_true(strncmp(fsc_last_error(), "saving: ", 8) == 0);
        assert_string_equal(fsc_last_error() + strlen(fsc_last_error()) - strlen(end), end);
    }
}

static void *other_thread(void *arg) {
    fsc_error(FSC_ERR_COMM, "message from the other thread");
    strcpy((char *)arg, fsc_last_error());
    return NULL;
}

static void test_message_is_thread_local(void **state) {
    (void)state;
    char seen[128] = "";
    fsc_error(FSC_ERR_STATE, "main thread message");
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, other_thread, seen), 0);
    pthread_join(th, NULL);
    assert_string_equal(seen, "message from the other thread");
    assert_string_equal(fsc_last_error(), "main thread message");
}

static void test_prefix_keeps_the_message(void **state) {
    (void)state;
    fsc_error(FSC_ERR_IO, "disk full");
    assert_int_equal(fsc_error_prefix(FSC_ERR_COMM, "saving %s", "ckpt"), FSC_ERR_COMM);
    assert_string_equal(fsc_last_error(), "saving ckpt: disk full");
    fsc_clear_error(); /* no message: the status names the failure */
    fsc_error_prefix(FSC_ERR_TIMEOUT, "rank %d", 3);
    assert_string_equal(fsc_last_error(), "rank 3: timeout");
    char big[3000]; /* a prefix longer than the buffer is truncated, never overflows */
    memset(big, 'p', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    fsc_error_prefix(FSC_ERR_IO, "%s", big);
    assert_true(strlen(fsc_last_error()) < sizeof big - 1);
}

/* A message made from the message itself, as a caller wraps the library's explanation: the arguments are read as
 * they were (it came out "rank 3: rank 3: rank 3: rank", vsnprintf writing over the text it was reading). */
static void test_message_from_itself(void **state) {
    (void)state;
    fsc_error(FSC_ERR_INVALID, "the original message");
    fsc_error(FSC_ERR_INTERNAL, "rank %d: %s", 3, fsc_last_error());
    assert_string_equal(fsc_last_error(), "rank 3: the original message");
    fsc_error(FSC_ERR_INTERNAL, "%s (again)", fsc_last_error());
    assert_string_equal(fsc_last_error(), "rank 3: the original message (again)");
}

/* fsc_error_rank names a rank once: a message that already starts with one keeps it. */
static void test_rank_named_once(void **state) {
    (void)state;
    fsc_error(FSC_ERR_IO, "disk full");
    assert_int_equal(fsc_error_rank(FSC_ERR_IO, "rank %d", 0), FSC_ERR_IO);
    assert_string_equal(fsc_last_error(), "rank 0: disk full");
    fsc_error_rank(FSC_ERR_IO, "rank %d", 1); /* passed on by rank 1: still rank 0's */
    assert_string_equal(fsc_last_error(), "rank 0: disk full");
    fsc_error_rank(FSC_ERR_IO, "rank %d of %d (%s)", 1, 2, "torchrun");
    assert_string_equal(fsc_last_error(), "rank 0: disk full");
    fsc_error(FSC_ERR_IO, "rank 3 of the 'tensor' group: disk full");
    fsc_error_rank(FSC_ERR_IO, "rank %d", 5);
    assert_string_equal(fsc_last_error(), "rank 3 of the 'tensor' group: disk full");
    /* messages that merely start with the word are not a rank's name */
    static const char *not_a_rank[] = {"rankings differ", "rank x: y", "rank 3 could not get the id", "rank", ""};
    for (int i = 0; i < 5; i++) {
        fsc_error(FSC_ERR_IO, "%s", not_a_rank[i]);
        fsc_error_rank(FSC_ERR_IO, "rank %d", 2);
        char want[128];
        snprintf(want, sizeof want, "rank 2: %s", not_a_rank[i][0] ? not_a_rank[i] : "i/o error");
        assert_string_equal(fsc_last_error(), want);
    }
}

/* A prefix added to an agreed failure goes behind the rank it names, so that the cluster's report names one rank
 * (it was "rank 1: --ckpt-dir: rank 0: ... is in use", the trainer's prefix between the two names). */
static void test_prefix_behind_the_rank(void **state) {
    (void)state;
    fsc_error(FSC_ERR_STATE, "rank 0: dir is in use");
    fsc_error_prefix(FSC_ERR_STATE, "--ckpt-dir");
    assert_string_equal(fsc_last_error(), "rank 0: --ckpt-dir: dir is in use");
    fsc_error_rank(FSC_ERR_STATE, "rank %d", 1); /* as rank 1 reports it */
    assert_string_equal(fsc_last_error(), "rank 0: --ckpt-dir: dir is in use");
    fsc_error(FSC_ERR_IO, "rank 1 of the 'pair' group: disk full");
    fsc_error_prefix(FSC_ERR_IO, "step %d/%d", 3, 9);
    assert_string_equal(fsc_last_error(), "rank 1 of the 'pair' group: step 3/9: disk full");
    fsc_error(FSC_ERR_IO, "rank x: y"); /* no rank's name: the prefix first */
    fsc_error_prefix(FSC_ERR_IO, "saving");
    assert_string_equal(fsc_last_error(), "saving: rank x: y");
}

static fsc_status fails(void) { return fsc_error(FSC_ERR_FORMAT, "bad"); }
static fsc_status try_chain(int *reached) {
    FSC_TRY(fails());
    *reached = 1;
    return FSC_OK;
}

static void test_try_propagates(void **state) {
    (void)state;
    int reached = 0;
    assert_int_equal(try_chain(&reached), FSC_ERR_FORMAT);
    assert_int_equal(reached, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_error_sets_message_and_returns_status),
        cmocka_unit_test(test_status_names),
        cmocka_unit_test(test_long_message_truncated),
        cmocka_unit_test(test_long_message_keeps_its_cause),
        cmocka_unit_test(test_message_from_itself),
        cmocka_unit_test(test_message_is_thread_local),
        cmocka_unit_test(test_try_propagates),
        cmocka_unit_test(test_prefix_keeps_the_message),
        cmocka_unit_test(test_rank_named_once),
        cmocka_unit_test(test_prefix_behind_the_rank),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
