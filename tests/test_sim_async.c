/* Tests of the asynchronous collectives (comm.h: fsc_comm_i<op>, wait, test, req_free; lib/core/comm_async.c)
 * over the simulated cluster's progress threads (sim/sim_async.c) and of the simulated network (sim/sim_net.c).
 * Oracles: every asynchronous operation gives the synchronous call's bytes exactly (same inputs, compared
 * byte for byte), on 1..5 ranks, directly and staged through host memory; operations of one communicator
 * complete in issue order (a chain of in-place all-reduces on one buffer gives N^k x; a synchronous call
 * sees what was started before it); a rank computes while its collective runs (start returns long before
 * the network's time is spent, test says not done, wait returns after it); a collective with a network
 * takes at least the ring formula's time, and collectives of different groups share a rank's link; misuse (waiting twice, freeing in flight, NULL arguments,
 * mismatched calls) fails with a message naming it; a table without start runs the call at start.
 * Rank functions never call cmocka (not thread-safe): they return an error saying what differed. */
#include <math.h>
#include <stdlib.h>
#include <time.h>
#include "testutil.h"
#include "core/comm_impl.h"

#define CHECK(cond, ...)                                              \
    do {                                                              \
        if (!(cond)) return fsc_error(FSC_ERR_INTERNAL, __VA_ARGS__); \
    } while (0)

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* rank's input element i: distinct floats of several binades, so the order of a sum shows in its bits */
static float val(int rank, size_t i) {
    uint32_t h = (uint32_t)(rank * 2654435761u) ^ (uint32_t)(i * 40503u + 17u);
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    return ldexpf((float)(h & 0xFFFF) / 65536.0f + 0.5f, (int)(h >> 28) - 8) * ((h >> 20) & 1 ? -1.0f : 1.0f);
}

static void fill(float *x, int rank, size_t n, int salt) {
    for (size_t i = 0; i < n; i++) x[i] = val(rank + 31 * salt, i);
}

enum { CNT = 777 }; /* elements per rank: several tiles and uneven chunks */

/* One operation run synchronously into `sync` and asynchronously into `async` from the same inputs. */
static fsc_status run_op(fsc_rank *r, int op, int async, float *out) {
    const int N = r->world, me = r->rank;
    const size_t full = (size_t)CNT * (size_t)N;
    float *send = malloc(full * sizeof(float));
    if (!send) return fsc_error(FSC_ERR_NOMEM, "out of memory");
    fill(send, me, full, op);
    memset(out, 0, full * sizeof(float));
    fsc_comm_req *q = NULL;
    fsc_comm *c = r->comm;
    fsc_status s = FSC_OK;
    const fsc_dtype bf = FSC_BF16;
    switch (op) {
    case 0: s = async ? fsc_comm_iall_reduce(c, send, out, full, FSC_F32, FSC_SUM, &q)
                      : fsc_comm_all_reduce(c, send, out, full, FSC_F32, FSC_SUM); break;
    case 1: s = async ? fsc_comm_iall_reduce(c, send, out, CNT, FSC_F32, FSC_AVG, &q)
                      : fsc_comm_all_reduce(c, send, out, CNT, FSC_F32, FSC_AVG); break;
    case 2: s = async ? fsc_comm_iall_reduce(c, send, out, CNT, FSC_F32, FSC_MAX, &q)
                      : fsc_comm_all_reduce(c, send, out, CNT, FSC_F32, FSC_MAX); break;
    case 3: /* bf16 in f32 storage: the first CNT/2 floats hold CNT bf16 */
        s = async ? fsc_comm_iall_reduce(c, send, out, CNT, bf, FSC_SUM, &q)
                  : fsc_comm_all_reduce(c, send, out, CNT, bf, FSC_SUM); break;
    case 4: s = async ? fsc_comm_ireduce_scatter(c, send, out, CNT, FSC_F32, FSC_SUM, &q)
                      : fsc_comm_reduce_scatter(c, send, out, CNT, FSC_F32, FSC_SUM); break;
    case 5: s = async ? fsc_comm_iall_gather(c, send, out, CNT, FSC_F32, &q)
                      : fsc_comm_all_gather(c, send, out, CNT, FSC_F32); break;
    case 6: memcpy(out, send, CNT * sizeof(float));
        s = async ? fsc_comm_ibroadcast(c, out, CNT, FSC_F32, N - 1, &q)
                  : fsc_comm_broadcast(c, out, CNT, FSC_F32, N - 1); break;
    case 7: s = async ? fsc_comm_iall_to_all(c, send, out, CNT, FSC_F32, &q)
                      : fsc_comm_all_to_all(c, send, out, CNT, FSC_F32); break;
    case 8: { /* a ring: send to the next rank, receive from the previous one */
        int next = (me + 1) % N, prev = (me + N - 1) % N;
        if (async) {
            fsc_comm_req *q2 = NULL;
            /* issue order: a receive queued before the matching send would wait for it forever */
            s = fsc_comm_isend(c, send, CNT, FSC_F32, next, &q2);
            if (s == FSC_OK) s = fsc_comm_irecv(c, out, CNT, FSC_F32, prev, &q);
            if (s == FSC_OK) s = fsc_comm_wait(q2);
            fsc_comm_req_free(q2);
        } else {
            s = fsc_comm_send(c, send, CNT, FSC_F32, next);
            if (s == FSC_OK) s = fsc_comm_recv(c, out, CNT, FSC_F32, prev);
        }
        break;
    }
    }
    if (s == FSC_OK && q) s = fsc_comm_wait(q);
    if (s == FSC_OK) s = fsc_comm_req_free(q);
    free(send);
    return s;
}

enum { NOPS = 9 };

static fsc_status rank_async_equals_sync(fsc_rank *r, void *arg) {
    (void)arg;
    const size_t full = (size_t)CNT * (size_t)r->world;
    float *a = malloc(full * sizeof(float)), *b = malloc(full * sizeof(float));
    fsc_status s = a && b ? FSC_OK : fsc_error(FSC_ERR_NOMEM, "out of memory");
    for (int op = 0; op < NOPS && s == FSC_OK; op++) {
        s = run_op(r, op, 0, a);
        if (s == FSC_OK) s = run_op(r, op, 1, b);
        if (s == FSC_OK && memcmp(a, b, full * sizeof(float)) != 0)
            s = fsc_error(FSC_ERR_INTERNAL, "rank %d: asynchronous op %d differs from the synchronous call", r->rank,
                          op);
    }
    free(a);
    free(b);
    return s;
}

/* Oracle: every asynchronous operation gives the synchronous call's bytes, directly and staged. */
static void test_async_equals_sync(void **state) {
    (void)state;
    for (int stage = 0; stage <= 1; stage++)
        for (int w = 1; w <= 5; w++)
            assert_ok(fsc_cluster_run(&(fsc_cluster_opts){.world = w, .timeout_s = 30, .stage_through_host = stage},
                                      rank_async_equals_sync, NULL));
}

/* k in-place all-reduces of x on one buffer, all started before any wait: N^k x if they ran in issue order
 * (powers of two: exact in f32); then a synchronous all-reduce of the same buffer, and a chain on a split
 * group next to the world's. */
static fsc_status rank_issue_order(fsc_rank *r, void *arg) {
    (void)arg;
    enum { K = 6, M = 300 };
    const float N = (float)r->world;
    float x[M], y[M];
    fsc_comm *half = NULL;
    FSC_TRY(fsc_comm_split(r->comm, r->rank % 2, r->rank, &half));
    const float H = (float)fsc_comm_size(half);
    for (int i = 0; i < M; i++) x[i] = y[i] = (float)(i % 7) + 1.0f;
    fsc_comm_req *q[2 * K] = {0};
    fsc_status s = FSC_OK;
    for (int k = 0; k < K && s == FSC_OK; k++) {
        s = fsc_comm_iall_reduce(r->comm, x, x, M, FSC_F32, FSC_SUM, &q[k]);
        if (s == FSC_OK) s = fsc_comm_iall_reduce(half, y, y, M, FSC_F32, FSC_SUM, &q[K + k]);
    }
    if (s == FSC_OK) s = fsc_comm_all_reduce(r->comm, x, x, M, FSC_F32, FSC_SUM); /* after the K above */
    for (int k = 2 * K - 1; k >= 0; k--) { /* waited in reverse: order is the communicator's, not the waits' */
        fsc_status w = fsc_comm_wait(q[k]);
        if (s == FSC_OK) s = w;
        fsc_comm_req_free(q[k]);
    }
    fsc_comm_free(half);
    FSC_TRY(s);
    for (int i = 0; i < M; i++) {
        float v = (float)(i % 7) + 1.0f;
        CHECK(x[i] == v * powf(N, K + 1), "rank %d: world chain element %d is %g, not %g", r->rank, i, (double)x[i],
              (double)(v * powf(N, K + 1)));
        CHECK(y[i] == v * powf(H, K), "rank %d: split chain element %d is %g", r->rank, i, (double)y[i]);
    }
    return FSC_OK;
}

/* Oracle: issue order per communicator, whatever the order of the waits, with sync calls in between. */
static void test_issue_order(void **state) {
    (void)state;
    for (int w = 1; w <= 4; w++)
        assert_ok(fsc_cluster_run(&(fsc_cluster_opts){.world = w, .timeout_s = 30}, rank_issue_order, NULL));
}

typedef struct {
    double start_s[4], wait_s[4];
    int done_after_start[4], done_after_wait[4];
} overlap_rec;

static fsc_status rank_overlap(fsc_rank *r, void *arg) {
    overlap_rec *rec = arg;
    float x[64] = {0};
    fsc_comm_req *q = NULL;
    FSC_TRY(fsc_comm_barrier(r->comm)); /* costs 2(N-1) latencies: everyone leaves together */
    double t0 = now_s();
    FSC_TRY(fsc_comm_iall_reduce(r->comm, x, x, 64, FSC_F32, FSC_SUM, &q));
    rec->start_s[r->rank] = now_s() - t0;
    int done = -1;
    fsc_status s = fsc_comm_test(q, &done);
    rec->done_after_start[r->rank] = done;
    if (s == FSC_OK) s = fsc_comm_wait(q);
    rec->wait_s[r->rank] = now_s() - t0;
    if (s == FSC_OK) {
        /* test after the wait is misuse */
        fsc_status t = fsc_comm_test(q, &done);
        rec->done_after_wait[r->rank] = t == FSC_ERR_STATE ? 1 : 0;
    }
    fsc_comm_req_free(q);
    return s;
}

/* Oracle: with a network of 50 ms latency an all-reduce over 4 ranks takes 2(N-1) x 50 ms = 300 ms; start
 * returns within a third of that (the rank is free to compute), test says not done, wait returns after. */
static void test_rank_computes_while_collective_runs(void **state) {
    (void)state;
    overlap_rec rec = {0};
    assert_ok(fsc_cluster_run(&(fsc_cluster_opts){.world = 4, .timeout_s = 30, .sim_latency_us = 50000},
                              rank_overlap, &rec));
    for (int k = 0; k < 4; k++) {
        if (rec.start_s[k] > 0.1) fail_msg("rank %d: start took %.3f s", k, rec.start_s[k]);
        assert_int_equal(rec.done_after_start[k], 0);
        if (rec.wait_s[k] < 0.3 - 1e-3) fail_msg("rank %d: the all-reduce took %.3f s, under 0.3 s", k, rec.wait_s[k]);
        assert_int_equal(rec.done_after_wait[k], 1);
    }
}

typedef struct {
    double t[3];
} net_rec;

static fsc_status rank_net(fsc_rank *r, void *arg) {
    net_rec *rec = arg;
    enum { M = 250000 }; /* 1 MB */
    float *x = calloc(M * (size_t)r->world, sizeof(float));
    if (!x) return fsc_error(FSC_ERR_NOMEM, "out of memory");
    fsc_status s = fsc_comm_barrier(r->comm);
    double t0 = now_s();
    if (s == FSC_OK) s = fsc_comm_all_reduce(r->comm, x, x, M, FSC_F32, FSC_SUM);
    double t1 = now_s();
    if (s == FSC_OK) s = fsc_comm_all_gather(r->comm, x + (size_t)r->rank * M, x, M, FSC_F32);
    double t2 = now_s();
    if (r->rank == 0) rec->t[0] = t1 - t0, rec->t[1] = t2 - t1;
    free(x);
    return s;
}

/* Oracle: the ring formulas of sim_net.c. 4 ranks, 1 ms latency, 0.1 GB/s: all-reduce of 1 MB takes
 * 6 x 1 ms + 1.5 MB / 0.1 GB/s = 21 ms; all-gather of 4 x 1 MB takes 3 ms + 3 MB / 0.1 GB/s = 33 ms. */
static void test_network_cost_follows_ring_formula(void **state) {
    (void)state;
    net_rec rec = {0};
    assert_ok(fsc_cluster_run(&(fsc_cluster_opts){.world = 4, .timeout_s = 30, .sim_latency_us = 1000,
                                                  .sim_bandwidth_gbps = 0.1}, rank_net, &rec));
    if (rec.t[0] < 0.021 - 1e-4 || rec.t[0] > 0.021 + 0.5) fail_msg("all_reduce took %.4f s, not 0.021", rec.t[0]);
    if (rec.t[1] < 0.033 - 1e-4 || rec.t[1] > 0.033 + 0.5) fail_msg("all_gather took %.4f s, not 0.033", rec.t[1]);
    assert_err(fsc_cluster_run(&(fsc_cluster_opts){.world = 2, .sim_bandwidth_gbps = -1}, rank_net, &rec),
               FSC_ERR_INVALID, "sim_bandwidth_gbps");
    assert_err(fsc_cluster_run(&(fsc_cluster_opts){.world = 2, .sim_latency_us = NAN}, rank_net, &rec),
               FSC_ERR_INVALID, "sim_latency_us");
}

static fsc_status rank_shared_link(fsc_rank *r, void *arg) {
    double *t = arg;
    fsc_comm *twin = NULL;
    float x[8] = {0}, y[8] = {0};
    FSC_TRY(fsc_comm_split(r->comm, 0, r->rank, &twin)); /* the same ranks, another group */
    fsc_status s = fsc_comm_barrier(r->comm);
    double t0 = now_s();
    fsc_comm_req *a = NULL, *b = NULL;
    if (s == FSC_OK) s = fsc_comm_iall_reduce(r->comm, x, x, 8, FSC_F32, FSC_SUM, &a);
    if (s == FSC_OK) s = fsc_comm_iall_reduce(twin, y, y, 8, FSC_F32, FSC_SUM, &b);
    if (a) s = fsc_comm_wait(a) != FSC_OK ? FSC_ERR_COMM : s;
    if (b) s = fsc_comm_wait(b) != FSC_OK ? FSC_ERR_COMM : s;
    if (r->rank == 0) *t = now_s() - t0;
    fsc_comm_req_free(a);
    fsc_comm_req_free(b);
    fsc_comm_free(twin);
    return s;
}

/* Oracle: a rank has one link: two all-reduces of 2 x 50 ms on two groups of the same ranks take 200 ms
 * together, not 100 ms (they would if groups had links of their own). */
static void test_groups_share_a_rank_link(void **state) {
    (void)state;
    double t = 0;
    assert_ok(fsc_cluster_run(&(fsc_cluster_opts){.world = 2, .timeout_s = 30, .sim_latency_us = 50000},
                              rank_shared_link, &t));
    if (t < 0.2 - 1e-3) fail_msg("two all-reduces on one link took %.3f s, under 0.2 s", t);
}

typedef struct {
    fsc_status st[6];
    char msg[6][200];
} misuse_rec;

static void note(misuse_rec *m, int k, fsc_status s) {
    m->st[k] = s;
    snprintf(m->msg[k], sizeof m->msg[k], "%s", s == FSC_OK ? "" : fsc_last_error());
}

static fsc_status rank_misuse(fsc_rank *r, void *arg) {
    misuse_rec *m = arg;
    float x[16] = {0}, y[16];
    fsc_comm_req *q = NULL;
    FSC_TRY(fsc_comm_iall_reduce(r->comm, x, x, 16, FSC_F32, FSC_SUM, &q));
    FSC_TRY(fsc_comm_wait(q));
    fsc_status s = fsc_comm_wait(q);
    if (r->rank == 0) note(m, 0, s);
    FSC_TRY(fsc_comm_req_free(q));
    /* freed in flight: waited for first, then an error */
    FSC_TRY(fsc_comm_iall_reduce(r->comm, x, x, 16, FSC_F32, FSC_SUM, &q));
    s = fsc_comm_req_free(q);
    if (r->rank == 0) note(m, 1, s);
    s = fsc_comm_iall_reduce(r->comm, NULL, x, 16, FSC_F32, FSC_SUM, &q);
    if (r->rank == 0) note(m, 2, s);
    s = fsc_comm_iall_reduce(r->comm, x, x, 16, FSC_F32, FSC_SUM, NULL);
    if (r->rank == 0) note(m, 3, s);
    /* mismatched asynchronous calls fail on every rank, at the wait */
    s = r->rank == 0 ? fsc_comm_iall_reduce(r->comm, x, x, 16, FSC_F32, FSC_SUM, &q)
                     : fsc_comm_iall_gather(r->comm, x, y, 8, FSC_F32, &q);
    if (s == FSC_OK) s = fsc_comm_wait(q);
    note(m, 4 + (r->rank != 0), s);
    fsc_comm_req_free(q);
    return FSC_OK;
}

/* Oracle: each misuse fails with FSC_ERR_STATE or FSC_ERR_INVALID and a message naming it. */
static void test_misuse_gives_clear_errors(void **state) {
    (void)state;
    misuse_rec m = {0};
    assert_ok(fsc_cluster_run(&(fsc_cluster_opts){.world = 2, .timeout_s = 10}, rank_misuse, &m));
    assert_int_equal(m.st[0], FSC_ERR_STATE);
    assert_non_null(strstr(m.msg[0], "waited for already"));
    assert_int_equal(m.st[1], FSC_ERR_STATE);
    assert_non_null(strstr(m.msg[1], "freed before it was waited for"));
    assert_non_null(strstr(m.msg[1], "in flight"));
    assert_int_equal(m.st[2], FSC_ERR_INVALID);
    assert_non_null(strstr(m.msg[2], "send is NULL"));
    assert_int_equal(m.st[3], FSC_ERR_INVALID);
    assert_non_null(strstr(m.msg[3], "req is NULL"));
    for (int k = 4; k < 6; k++) {
        assert_int_equal(m.st[k], FSC_ERR_COMM);
        if (!strstr(m.msg[k], "mismatched collectives")) fail_msg("rank %d: %s", k - 4, m.msg[k]);
    }
}

/* A one-rank table without start: the core runs the call at start. */
static fsc_status one_all_reduce(void *ctx, const void *send, void *recv, size_t count, fsc_dtype dt, fsc_redop op) {
    (void)op;
    int *calls = ctx;
    (*calls)++;
    if (send != recv) memcpy(recv, send, count * fsc_dtype_size(dt));
    return FSC_OK;
}

static void test_table_without_start_runs_at_start(void **state) {
    (void)state;
    static int calls;
    static const fsc_comm_ops ops = {.abi_version = FSC_COMM_ABI_VERSION, .name = "one",
                                     .all_reduce = one_all_reduce};
    fsc_comm *c = NULL;
    calls = 0;
    assert_ok(fsc_comm_wrap(&ops, &calls, 0, 1, "one", &c));
    float a[3] = {1, 2, 3}, b[3] = {0};
    fsc_comm_req *q = NULL;
    assert_ok(fsc_comm_iall_reduce(c, a, b, 3, FSC_F32, FSC_SUM, &q));
    assert_int_equal(calls, 1); /* ran at start */
    int done = 0;
    assert_ok(fsc_comm_test(q, &done));
    assert_int_equal(done, 1);
    assert_int_equal((int)fsc_comm_get_stats(c)->calls[FSC_OP_ALL_REDUCE], 0); /* counted at the wait */
    assert_ok(fsc_comm_wait(q));
    assert_int_equal((int)fsc_comm_get_stats(c)->calls[FSC_OP_ALL_REDUCE], 1);
    assert_bits_equal(a, b, 3, "all_reduce of one rank");
    assert_ok(fsc_comm_req_free(q));
    fsc_comm_free(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_async_equals_sync),
        cmocka_unit_test(test_issue_order),
        cmocka_unit_test(test_rank_computes_while_collective_runs),
        cmocka_unit_test(test_network_cost_follows_ring_formula),
        cmocka_unit_test(test_groups_share_a_rank_link),
        cmocka_unit_test(test_misuse_gives_clear_errors),
        cmocka_unit_test(test_table_without_start_runs_at_start),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
