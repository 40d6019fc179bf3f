/* Tests of the queue of started communicator calls (lib/core/comm_queue.c), which the simulator and the MPI
 * plug-in share. The calls here are stand-ins: a run function that logs call k's count, fails where told to,
 * or waits at a gate the test opens. Oracles: calls run in issue order on one progress thread; a request is
 * done only after its call ran (test says 0 while it is held at the gate, 1 after); a failed call's status
 * and message come back from wait; drain returns with nothing pending; a call run at start (no queue) is done
 * at once. No timing: the held call waits on a condition the test signals. */
#include <pthread.h>
#include "testutil.h"
#include "core/comm_queue.h"

enum { N_CALLS = 64 };

typedef struct {
    size_t log[N_CALLS];   /* counts of the calls run, in the order they ran (written by the progress thread) */
    int n;
    size_t fail_at;        /* the call whose count this is fails */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int gate_open, at_gate; /* a call of count GATED waits until gate_open */
} runner;

#define GATED ((size_t)1000)
static _Thread_local char run_msg[64];

static const char *last_msg(void) { return run_msg; }

static fsc_status run_call(void *ctx, const fsc_comm_call *k) {
    runner *r = ctx;
    if (k->count == GATED) {
        pthread_mutex_lock(&r->mu);
        r->at_gate = 1;
        pthread_cond_broadcast(&r->cv);
        while (!r->gate_open) pthread_cond_wait(&r->cv, &r->mu);
        pthread_mutex_unlock(&r->mu);
    }
    r->log[r->n++] = k->count;
    if (k->count == r->fail_at) {
        snprintf(run_msg, sizeof run_msg, "call %zu failed", k->count);
        return FSC_ERR_INVALID;
    }
    return FSC_OK;
}

static void runner_init(runner *r) {
    memset(r, 0, sizeof *r);
    r->fail_at = (size_t)-1;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
}

static void runner_destroy(runner *r) {
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
}

static void test_calls_run_in_issue_order(void **state) {
    (void)state;
    runner r;
    runner_init(&r);
    fsc_callq *q = NULL;
    assert_int_equal(fsc_callq_open(&r, run_call, last_msg, &q), FSC_OK);
    void *req[N_CALLS];
    for (int i = 0; i < N_CALLS; i++) {
        fsc_comm_call k = { .op = FSC_OP_ALL_REDUCE, .count = (size_t)i };
        assert_int_equal(fsc_callq_push(q, &k, &req[i]), FSC_OK);
    }
    fsc_callq_drain(q); /* nothing pending: every request is done before its wait */
    for (int i = 0; i < N_CALLS; i++) assert_int_equal(fsc_callq_test(q, req[i]), 1);
    for (int i = 0; i < N_CALLS; i++) assert_int_equal(fsc_callq_wait(q, req[i], NULL, 0), FSC_OK);
    assert_int_equal(r.n, N_CALLS);
    for (int i = 0; i < N_CALLS; i++) assert_int_equal(r.log[i], (size_t)i);
    fsc_callq_free(q);
    runner_destroy(&r);
}

static void test_failure_travels_back_to_wait(void **state) {
    (void)state;
    runner r;
    runner_init(&r);
    r.fail_at = 3;
    fsc_callq *q = NULL;
    assert_int_equal(fsc_callq_open(&r, run_call, last_msg, &q), FSC_OK);
    void *req[5];
    for (int i = 0; i < 5; i++) {
        fsc_comm_call k = { .op = FSC_OP_ALL_GATHER, .count = (size_t)i };
        assert_int_equal(fsc_callq_push(q, &k, &req[i]), FSC_OK);
    }
    char msg[64];
    for (int i = 0; i < 5; i++) {
        strcpy(msg, "untouched");
        fsc_status s = fsc_callq_wait(q, req[i], msg, sizeof msg);
        assert_int_equal(s, i == 3 ? FSC_ERR_INVALID : FSC_OK);
        assert_string_equal(msg, i == 3 ? "call 3 failed" : "untouched");
    }
    fsc_callq_free(q);
    runner_destroy(&r);
}

static void test_request_is_pending_until_its_call_ran(void **state) {
    (void)state;
    runner r;
    runner_init(&r);
    fsc_callq *q = NULL;
    assert_int_equal(fsc_callq_open(&r, run_call, last_msg, &q), FSC_OK);
    void *held, *next;
    fsc_comm_call k = { .op = FSC_OP_BROADCAST, .count = GATED };
    assert_int_equal(fsc_callq_push(q, &k, &held), FSC_OK);
    k.count = 7;
    assert_int_equal(fsc_callq_push(q, &k, &next), FSC_OK);
    pthread_mutex_lock(&r.mu);
    while (!r.at_gate) pthread_cond_wait(&r.cv, &r.mu); /* the first call is running, held at the gate */
    pthread_mutex_unlock(&r.mu);
    assert_int_equal(fsc_callq_test(q, held), 0);
    assert_int_equal(fsc_callq_test(q, next), 0); /* queued behind it */
    pthread_mutex_lock(&r.mu);
    r.gate_open = 1;
    pthread_cond_broadcast(&r.cv);
    pthread_mutex_unlock(&r.mu);
    assert_int_equal(fsc_callq_wait(q, next, NULL, 0), FSC_OK);
    assert_int_equal(fsc_callq_test(q, held), 1);
    assert_int_equal(fsc_callq_wait(q, held, NULL, 0), FSC_OK);
    assert_int_equal(r.log[0], GATED);
    assert_int_equal(r.log[1], 7);
    fsc_callq_free(q);
    runner_destroy(&r);
}

static void test_run_here_is_done_at_start(void **state) {
    (void)state;
    runner r;
    runner_init(&r);
    r.fail_at = 2;
    void *ok, *bad;
    fsc_comm_call k = { .op = FSC_OP_SEND, .count = 1 };
    assert_int_equal(fsc_callq_run_here(&r, run_call, last_msg, &k, &ok), FSC_OK);
    assert_int_equal(r.n, 1); /* ran on this thread, before run_here returned */
    k.count = 2;
    assert_int_equal(fsc_callq_run_here(&r, run_call, last_msg, &k, &bad), FSC_OK); /* the call's failure waits */
    assert_int_equal(fsc_callq_test(NULL, ok), 1);
    assert_int_equal(fsc_callq_wait(NULL, ok, NULL, 0), FSC_OK);
    char msg[64] = "";
    assert_int_equal(fsc_callq_wait(NULL, bad, msg, sizeof msg), FSC_ERR_INVALID);
    assert_string_equal(msg, "call 2 failed");
    fsc_callq_drain(NULL);
    fsc_callq_free(NULL);
    runner_destroy(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_calls_run_in_issue_order),
        cmocka_unit_test(test_failure_travels_back_to_wait),
        cmocka_unit_test(test_request_is_pending_until_its_call_ran),
        cmocka_unit_test(test_run_here_is_done_at_start),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
