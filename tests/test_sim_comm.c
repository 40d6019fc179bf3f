/* Tests of the communicator (lib/core/comm.c) over the simulated cluster (sim/).
 * Oracles: reductions equal a serial reference computed here, the left-to-right rank-order sum in f32
 * rounded once (RNE) to the dtype, bit for bit; reduce-scatter element i equals all-reduce element
 * r*recvcount + i bit for bit; data movement equals the other ranks' bytes; stats equal the ring formulas
 * of comm.h; every error case fails on every rank with a message naming the problem, and nothing hangs.
 * Rank functions never call cmocka (it is not thread-safe): they return an error whose message says what
 * differed, and the test asserts on fsc_cluster_run's result or on what the ranks recorded. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include "testutil.h"
#include "core/comm_impl.h"

#define CHECK(cond, ...)                                              \
    do {                                                              \
        if (!(cond)) return fsc_error(FSC_ERR_INTERNAL, __VA_ARGS__); \
    } while (0)

#define MAXW 8

static uint64_t mix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Element i of rank's input as dtype dt, written to dst[0]: floats with full mantissas over several binades
 * and both signs (so the order of a sum changes its bits), large integers (sums of 8 wrap), raw bytes. */
static void gen1(void *dst, fsc_dtype dt, int salt, int rank, size_t i) {
    uint64_t h = mix(((uint64_t)(unsigned)salt << 48) ^ ((uint64_t)(unsigned)rank << 32) ^ (uint64_t)i);
    float v = ldexpf(0.5f + (float)(h & 0xFFFFFF) / 33554432.0f, (int)((h >> 24) % 9) - 4);
    if ((h >> 40) & 1) v = -v;
    uint16_t u;
    int32_t k = (int32_t)(uint32_t)(h >> 32);
    switch (dt) {
    case FSC_F32: memcpy(dst, &v, 4); break;
    case FSC_BF16: u = fsc_f32_to_bf16(v); memcpy(dst, &u, 2); break;
    case FSC_F16: u = fsc_f32_to_f16(v); memcpy(dst, &u, 2); break;
    case FSC_I32: memcpy(dst, &k, 4); break;
    default: *(uint8_t *)dst = (uint8_t)(h >> 13); break;
    }
}

/* buf[k] = element off+k of rank's input, k < n */
static void gen(void *buf, fsc_dtype dt, int salt, int rank, size_t off, size_t n) {
    size_t es = fsc_dtype_size(dt);
    for (size_t k = 0; k < n; k++) gen1((unsigned char *)buf + k * es, dt, salt, rank, off + k);
}

static float widen(const void *x, fsc_dtype dt) {
    uint16_t u;
    float f;
    if (dt == FSC_F32) return memcpy(&f, x, 4), f;
    memcpy(&u, x, 2);
    return dt == FSC_BF16 ? fsc_bf16_to_f32(u) : fsc_f16_to_f32(u);
}

/* The serial reference of element i of a reduction over N ranks' inputs, written to out[0]. */
static void ref1(void *out, fsc_dtype dt, fsc_redop op, int salt, int N, size_t i) {
    unsigned char x[4];
    if (dt == FSC_I32) {
        int32_t v, mx = 0;
        uint32_t acc = 0;
        for (int j = 0; j < N; j++) {
            gen1(x, dt, salt, j, i);
            memcpy(&v, x, 4);
            acc += (uint32_t)v;
            if (j == 0 || v > mx) mx = v;
        }
        int32_t r = op == FSC_MAX ? mx : (int32_t)acc;
        memcpy(out, &r, 4);
        return;
    }
    float acc = 0;
    for (int j = 0; j < N; j++) {
        gen1(x, dt, salt, j, i);
        float v = widen(x, dt);
        if (j == 0) acc = v;
        else if (op == FSC_MAX) acc = v > acc ? v : acc;
        else acc = acc + v;
    }
    if (op == FSC_AVG) acc = acc / (float)N;
    uint16_t u;
    if (dt == FSC_F32) memcpy(out, &acc, 4);
    else u = dt == FSC_BF16 ? fsc_f32_to_bf16(acc) : fsc_f32_to_f16(acc), memcpy(out, &u, 2);
}

/* First element where a and b differ, or -1. */
static long first_diff(const void *a, const void *b, size_t n, fsc_dtype dt) {
    size_t es = fsc_dtype_size(dt);
    for (size_t i = 0; i < n; i++)
        if (memcmp((const char *)a + i * es, (const char *)b + i * es, es)) return (long)i;
    return -1;
}

static const char *redop_str(fsc_redop op) { return op == FSC_SUM ? "sum" : op == FSC_AVG ? "avg" : "max"; }

static fsc_status run(int world, double timeout, fsc_rank_fn fn, void *arg) {
    return fsc_cluster_run(&(fsc_cluster_opts){.world = world, .timeout_s = timeout}, fn, arg);
}

/* ---- reductions ---- */

static const size_t red_counts[] = {0, 1, 37, 1100}; /* 1100: several tiles of 256 and uneven chunks */

static fsc_status rank_reductions(fsc_rank *r, void *arg) {
    (void)arg;
    const fsc_dtype dts[] = {FSC_F32, FSC_BF16, FSC_F16, FSC_I32};
    const fsc_redop ops[] = {FSC_SUM, FSC_AVG, FSC_MAX};
    const int N = r->world, me = r->rank;
    int salt = 1;
    for (size_t d = 0; d < 4; d++) {
        for (size_t o = 0; o < 3; o++) {
            for (size_t c = 0; c < sizeof(red_counts) / sizeof(red_counts[0]); c++, salt++) {
                fsc_dtype dt = dts[d];
                fsc_redop op = ops[o];
                if (dt == FSC_I32 && op == FSC_AVG) continue;
                size_t n = red_counts[c], es = fsc_dtype_size(dt), full = n * (size_t)N;
                unsigned char *send = malloc(full * es + 1), *recv = malloc(full * es + 1),
                              *ref = malloc(full * es + 1), *buf = malloc(full * es + 1),
                              *rs = malloc(n * es + 1);
                /* all-reduce of n elements, out of place then in place */
                gen(send, dt, salt, me, 0, n);
                for (size_t i = 0; i < n; i++) ref1(ref + i * es, dt, op, salt, N, i);
                FSC_TRY(fsc_comm_all_reduce(r->comm, send, recv, n, dt, op));
                long bad = first_diff(recv, ref, n, dt);
                CHECK(bad < 0, "all_reduce %s %s of %zu on %d ranks: element %ld differs from the serial reference",
                      fsc_dtype_name(dt), redop_str(op), n, N, bad);
                memcpy(buf, send, n * es);
                FSC_TRY(fsc_comm_all_reduce(r->comm, buf, buf, n, dt, op));
                bad = first_diff(buf, ref, n, dt);
                CHECK(bad < 0, "in-place all_reduce %s %s of %zu: element %ld differs", fsc_dtype_name(dt),
                      redop_str(op), n, bad);
                /* reduce-scatter of N x n elements: block me equals the all-reduce of the same buffer */
                gen(send, dt, salt, me, 0, full);
                FSC_TRY(fsc_comm_all_reduce(r->comm, send, recv, full, dt, op));
                FSC_TRY(fsc_comm_reduce_scatter(r->comm, send, rs, n, dt, op));
                bad = first_diff(rs, recv + (size_t)me * n * es, n, dt);
                CHECK(bad < 0, "reduce_scatter %s %s of %zu on %d ranks: element %ld differs from all_reduce",
                      fsc_dtype_name(dt), redop_str(op), n, N, bad);
                for (size_t i = 0; i < n; i++) ref1(ref + i * es, dt, op, salt, N, (size_t)me * n + i);
                bad = first_diff(rs, ref, n, dt);
                CHECK(bad < 0, "reduce_scatter %s %s: element %ld differs from the serial reference",
                      fsc_dtype_name(dt), redop_str(op), bad);
                memcpy(buf, send, full * es);
                FSC_TRY(fsc_comm_reduce_scatter(r->comm, buf, buf + (size_t)me * n * es, n, dt, op));
                bad = first_diff(buf + (size_t)me * n * es, ref, n, dt);
                CHECK(bad < 0, "in-place reduce_scatter %s %s: element %ld differs", fsc_dtype_name(dt),
                      redop_str(op), bad);
                free(send), free(recv), free(ref), free(buf), free(rs);
            }
        }
    }
    return FSC_OK;
}

/* Oracle: every reduction of every dtype on 1..8 ranks equals the serial rank-order reference bit for bit,
 * and reduce-scatter equals all-reduce element for element. */
static void test_reductions_match_serial_reference(void **state) {
    (void)state;
    for (int w = 1; w <= MAXW; w++) assert_ok(run(w, 30, rank_reductions, NULL));
}

/* Oracle: the sum is taken in rank order, not in some other order: with x0 = 1, x1 = 2^24, x2 = -2^24
 * (f32), rank order gives (1 + 2^24) - 2^24 = 0 while other orders give 1. */
static fsc_status rank_order_probe(fsc_rank *r, void *arg) {
    float *out = arg;
    const float x[3] = {1.0f, 16777216.0f, -16777216.0f};
    float v = x[r->rank];
    FSC_TRY(fsc_comm_all_reduce(r->comm, &v, &v, 1, FSC_F32, FSC_SUM));
    out[r->rank] = v;
    return FSC_OK;
}

static void test_sum_is_in_rank_order(void **state) {
    (void)state;
    float out[3] = {-1, -1, -1};
    assert_ok(run(3, 30, rank_order_probe, out));
    for (int i = 0; i < 3; i++) assert_true(out[i] == 0.0f);
}

/* Oracle: MAX propagates NaN from any rank (fmaxf would drop it). */
static fsc_status rank_max_nan(fsc_rank *r, void *arg) {
    float *out = arg;
    float v[2] = {r->rank == 1 ? NAN : (float)r->rank, (float)r->rank};
    FSC_TRY(fsc_comm_all_reduce(r->comm, v, v, 2, FSC_F32, FSC_MAX));
    out[2 * r->rank] = v[0];
    out[2 * r->rank + 1] = v[1];
    return FSC_OK;
}

static void test_max_propagates_nan(void **state) {
    (void)state;
    float out[8];
    assert_ok(run(4, 30, rank_max_nan, out));
    for (int k = 0; k < 4; k++) {
        assert_true(isnan(out[2 * k]));
        assert_true(out[2 * k + 1] == 3.0f);
    }
}

/* ---- data movement ---- */

static fsc_status rank_movement(fsc_rank *r, void *arg) {
    (void)arg;
    const fsc_dtype dts[] = {FSC_F32, FSC_BF16, FSC_F16, FSC_I32, FSC_U8};
    const size_t counts[] = {0, 1, 29, 700};
    const int N = r->world, me = r->rank;
    int salt = 100;
    for (size_t d = 0; d < 5; d++) {
        for (size_t c = 0; c < 4; c++, salt++) {
            fsc_dtype dt = dts[d];
            size_t n = counts[c], es = fsc_dtype_size(dt), full = n * (size_t)N;
            unsigned char *send = malloc(full * es + 1), *recv = malloc(full * es + 1), *ref = malloc(full * es + 1);
            /* all-gather: block j of recv is rank j's send */
            gen(send, dt, salt, me, 0, n);
            for (int j = 0; j < N; j++) gen(ref + (size_t)j * n * es, dt, salt, j, 0, n);
            memset(recv, 0xAB, full * es);
            FSC_TRY(fsc_comm_all_gather(r->comm, send, recv, n, dt));
            long bad = first_diff(recv, ref, full, dt);
            CHECK(bad < 0, "all_gather %s of %zu on %d ranks: element %ld differs", fsc_dtype_name(dt), n, N, bad);
            memset(recv, 0xCD, full * es);
            memcpy(recv + (size_t)me * n * es, send, n * es);
            FSC_TRY(fsc_comm_all_gather(r->comm, recv + (size_t)me * n * es, recv, n, dt));
            bad = first_diff(recv, ref, full, dt);
            CHECK(bad < 0, "in-place all_gather %s of %zu: element %ld differs", fsc_dtype_name(dt), n, bad);
            /* broadcast from every root */
            for (int root = 0; root < N; root++) {
                if (me == root) gen(recv, dt, salt, root, 0, n);
                else memset(recv, 0xEF, n * es);
                gen(ref, dt, salt, root, 0, n);
                FSC_TRY(fsc_comm_broadcast(r->comm, recv, n, dt, root));
                bad = first_diff(recv, ref, n, dt);
                CHECK(bad < 0, "broadcast %s of %zu from root %d: element %ld differs", fsc_dtype_name(dt), n, root,
                      bad);
            }
            /* all-to-all: recv block j is block me of rank j's send */
            gen(send, dt, salt, me, 0, full);
            for (int j = 0; j < N; j++) gen(ref + (size_t)j * n * es, dt, salt, j, (size_t)me * n, n);
            memset(recv, 0x11, full * es);
            FSC_TRY(fsc_comm_all_to_all(r->comm, send, recv, n, dt));
            bad = first_diff(recv, ref, full, dt);
            CHECK(bad < 0, "all_to_all %s of %zu on %d ranks: element %ld differs", fsc_dtype_name(dt), n, N, bad);
            free(send), free(recv), free(ref);
        }
    }
    FSC_TRY(fsc_comm_barrier(r->comm));
    return FSC_OK;
}

/* Oracle: all-gather, broadcast and all-to-all deliver exactly the other ranks' bytes, every dtype, 1..8 ranks. */
static void test_data_movement(void **state) {
    (void)state;
    for (int w = 1; w <= MAXW; w++) assert_ok(run(w, 30, rank_movement, NULL));
}

/* ---- stats ---- */

static fsc_status rank_stats(fsc_rank *r, void *arg) {
    (void)arg;
    const int N = r->world, me = r->rank;
    fsc_comm *c = r->comm;
    float f[64] = {0};
    uint16_t h[64] = {0}, hg[8 * 7];
    int32_t i32[8 * 4] = {0}, i32r[8 * 4];
    FSC_TRY(fsc_comm_all_reduce(c, f, f, 10, FSC_F32, FSC_SUM));
    uint16_t hs[8 * 5];
    memset(hs, 0, sizeof(hs));
    FSC_TRY(fsc_comm_reduce_scatter(c, hs, h, 5, FSC_BF16, FSC_SUM));
    FSC_TRY(fsc_comm_all_gather(c, h, hg, 7, FSC_F16));
    FSC_TRY(fsc_comm_broadcast(c, f, 9, FSC_F32, N - 1));
    FSC_TRY(fsc_comm_send(c, f, 3, FSC_F32, (me + 1) % N));
    FSC_TRY(fsc_comm_recv(c, f + 3, 3, FSC_F32, (me + N - 1) % N));
    FSC_TRY(fsc_comm_all_to_all(c, i32, i32r, 4, FSC_I32));
    FSC_TRY(fsc_comm_barrier(c));
    /* a failing call is not counted */
    CHECK(fsc_comm_all_reduce(c, NULL, f, 4, FSC_F32, FSC_SUM) == FSC_ERR_INVALID, "NULL send accepted");

    const fsc_comm_stats *s = fsc_comm_get_stats(c);
    for (int op = 0; op < FSC_OP_COUNT; op++)
        CHECK(s->calls[op] == 1, "%s counted %llu calls, expected 1", fsc_comm_op_name(op),
              (unsigned long long)s->calls[op]);
    const double n = N, ring = (n - 1) / n;
    const double expect[FSC_OP_COUNT] = {
        [FSC_OP_ALL_REDUCE] = 2 * ring * 10 * 4,
        [FSC_OP_REDUCE_SCATTER] = ring * N * 5 * 2,
        [FSC_OP_ALL_GATHER] = ring * N * 7 * 2,
        [FSC_OP_BROADCAST] = N > 1 ? 9 * 4 : 0,
        [FSC_OP_SEND] = N > 1 ? 3 * 4 : 0,
        [FSC_OP_RECV] = N > 1 ? 3 * 4 : 0,
        [FSC_OP_ALL_TO_ALL] = ring * N * 4 * 4,
        [FSC_OP_BARRIER] = 0,
    };
    double total = 0;
    for (int op = 0; op < FSC_OP_COUNT; op++) {
        CHECK(fabs(s->bytes[op] - expect[op]) <= 1e-9 * (1 + expect[op]), "%s on %d ranks: %.17g bytes, expected %.17g",
              fsc_comm_op_name(op), N, s->bytes[op], expect[op]);
        total += expect[op];
    }
    CHECK(fabs(fsc_comm_total_bytes(c) - total) <= 1e-9 * (1 + total), "total bytes %.17g, expected %.17g",
          fsc_comm_total_bytes(c), total);
    fsc_comm_reset_stats(c);
    CHECK(fsc_comm_total_bytes(c) == 0 && s->calls[FSC_OP_BARRIER] == 0, "reset left counts behind");
    return FSC_OK;
}

/* Oracle: calls and bytes per op equal comm.h's ring formulas (0 bytes for N = 1). */
static void test_stats_follow_ring_formulas(void **state) {
    (void)state;
    for (int w = 1; w <= 5; w++) assert_ok(run(w, 30, rank_stats, NULL));
}

/* ---- split ---- */

static fsc_status rank_split(fsc_rank *r, void *arg) {
    (void)arg;
    const int N = r->world, me = r->rank;
    fsc_comm *sub = NULL, *same = NULL;
    /* color = parity, key = -rank: each group is ordered by descending world rank */
    FSC_TRY(fsc_comm_split(r->comm, me % 2, -me, &sub));
    int members[MAXW], m = 0;
    for (int w = N - 1; w >= 0; w--)
        if (w % 2 == me % 2) members[m++] = w;
    int myrank = -1;
    for (int k = 0; k < m; k++)
        if (members[k] == me) myrank = k;
    CHECK(fsc_comm_size(sub) == m && fsc_comm_rank(sub) == myrank, "split: rank %d of %d, expected %d of %d",
          fsc_comm_rank(sub), fsc_comm_size(sub), myrank, m);
    char name[32];
    snprintf(name, sizeof(name), "world/%d", me % 2);
    CHECK(strcmp(fsc_comm_name(sub), name) == 0, "split comm named '%s', expected '%s'", fsc_comm_name(sub), name);

    /* a sum in the group is the serial sum in group-rank order over the members' inputs */
    enum { n = 300 };
    float x[n], y[n], ref[n], g[MAXW * 4];
    for (int it = 0; it < 3; it++) {
        gen(x, FSC_F32, 500 + it, me, 0, n);
        FSC_TRY(fsc_comm_all_reduce(sub, x, y, n, FSC_F32, FSC_SUM));
        for (size_t i = 0; i < n; i++) {
            float acc = 0, v;
            for (int k = 0; k < m; k++) {
                gen1(&v, FSC_F32, 500 + it, members[k], i);
                acc = k ? acc + v : v;
            }
            ref[i] = acc;
        }
        long bad = first_diff(y, ref, n, FSC_F32);
        CHECK(bad < 0, "all_reduce in split group: element %ld differs", bad);
        /* interleave a world collective with the group's */
        FSC_TRY(fsc_comm_all_reduce(r->comm, x, y, 4, FSC_F32, FSC_MAX));
        float w4[4] = {(float)me, (float)me, (float)me, (float)me};
        FSC_TRY(fsc_comm_all_gather(sub, w4, g, 4, FSC_F32));
        for (int k = 0; k < m; k++)
            CHECK(g[4 * k] == (float)members[k], "all_gather in split group: block %d is %g, expected %d", k,
                  (double)g[4 * k], members[k]);
    }
    /* splitting a split with one color and equal keys keeps the order */
    FSC_TRY(fsc_comm_split(sub, 7, 0, &same));
    CHECK(fsc_comm_size(same) == m && fsc_comm_rank(same) == myrank, "nested split reordered the group");
    FSC_TRY(fsc_comm_barrier(same));
    fsc_comm_free(same);
    FSC_TRY(fsc_comm_barrier(sub));
    fsc_comm_free(sub);
    /* the world still works after the groups are gone */
    return fsc_comm_barrier(r->comm);
}

/* Oracle: split groups have the (key, rank) order and sizes computed here; collectives within a group
 * equal the serial reference over its members; groups and the world interleave. */
static void test_split_groups(void **state) {
    (void)state;
    for (int w = 1; w <= MAXW; w++) assert_ok(run(w, 30, rank_split, NULL));
}

/* ---- send / recv ---- */

static fsc_status rank_sendrecv(fsc_rank *r, void *arg) {
    (void)arg;
    const int N = r->world, me = r->rank, next = (me + 1) % N, prev = (me + N - 1) % N;
    enum { n = 300 };
    float a[n], b[n], ref[n];
    uint16_t hb[5], hr[5];
    /* ring: everyone sends first (buffered), then receives; three messages keep FIFO order */
    gen(a, FSC_F32, 700, me, 0, n);
    FSC_TRY(fsc_comm_send(r->comm, a, n, FSC_F32, next));
    FSC_TRY(fsc_comm_send(r->comm, NULL, 0, FSC_F32, next));
    gen(hb, FSC_BF16, 701, me, 0, 5);
    FSC_TRY(fsc_comm_send(r->comm, hb, 5, FSC_BF16, next));
    memset(a, 0, sizeof(a)); /* the message was copied at send */
    FSC_TRY(fsc_comm_recv(r->comm, b, n, FSC_F32, prev));
    gen(ref, FSC_F32, 700, prev, 0, n);
    CHECK(first_diff(b, ref, n, FSC_F32) < 0, "ring recv from %d: wrong data", prev);
    FSC_TRY(fsc_comm_recv(r->comm, NULL, 0, FSC_F32, prev));
    FSC_TRY(fsc_comm_recv(r->comm, hr, 5, FSC_BF16, prev));
    gen(hb, FSC_BF16, 701, prev, 0, 5);
    CHECK(first_diff(hr, hb, 5, FSC_BF16) < 0, "third ring message from %d: wrong data", prev);
    /* all pairs: send to everyone, receive from everyone in reverse order */
    for (int j = 0; j < N; j++) {
        int32_t msg[2] = {me, j};
        FSC_TRY(fsc_comm_send(r->comm, msg, 2, FSC_I32, j));
    }
    for (int j = N - 1; j >= 0; j--) {
        int32_t msg[2];
        FSC_TRY(fsc_comm_recv(r->comm, msg, 2, FSC_I32, j));
        CHECK(msg[0] == j && msg[1] == me, "message from %d reads (%d, %d)", j, msg[0], msg[1]);
    }
    return FSC_OK;
}

/* Oracle: point-to-point messages arrive intact, in FIFO order per pair, with neighbours sending at once. */
static void test_send_recv(void **state) {
    (void)state;
    for (int w = 1; w <= MAXW; w++) assert_ok(run(w, 30, rank_sendrecv, NULL));
}

/* ---- sends that wait for their receive (sim_sync_sends, as NCCL's) ---- */

typedef struct {
    atomic_int receiving; /* rank 1 is about to receive */
    atomic_int tested;    /* rank 0 has tested its started send */
    int done_early;       /* rank 0: the started send had completed before rank 1 received */
    int waits[2];         /* each rank's fsc_comm_sends_wait, on the world and on a split */
} sync_ctx;

static void nap_ms(int ms) {
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

/* Rank 0 sends to rank 1, which receives only after a nap (the send returns after it), then starts a send that
 * rank 1 receives only after rank 0 has tested it (not done yet); odd ranks receive first, so no send waits on a
 * send. */
static fsc_status rank_sync(fsc_rank *r, void *arg) {
    sync_ctx *x = arg;
    fsc_comm *half = NULL;
    FSC_TRY(fsc_comm_split(r->comm, r->rank % 2, r->rank, &half));
    x->waits[r->rank] = fsc_comm_sends_wait(r->comm) + 2 * fsc_comm_sends_wait(half);
    fsc_comm_free(half);
    float v[3] = {1, 2, 3}, w[3] = {0, 0, 0};
    if (r->rank == 0) {
        FSC_TRY(fsc_comm_send(r->comm, v, 3, FSC_F32, 1));
        CHECK(atomic_load(&x->receiving), "a send returned before its receive began");
        fsc_comm_req *q = NULL;
        FSC_TRY(fsc_comm_isend(r->comm, v, 3, FSC_F32, 1, &q));
        nap_ms(30);
        int done = 0;
        fsc_status s = fsc_comm_test(q, &done);
        x->done_early = done;
        atomic_store(&x->tested, 1);
        const fsc_status sw = fsc_comm_wait(q);
        fsc_comm_req_free(q);
        FSC_TRY(s != FSC_OK ? s : sw);
        FSC_TRY(fsc_comm_recv(r->comm, w, 3, FSC_F32, 1));
        CHECK(w[2] == 6, "received %g", (double)w[2]);
    } else {
        nap_ms(30);
        atomic_store(&x->receiving, 1);
        FSC_TRY(fsc_comm_recv(r->comm, w, 3, FSC_F32, 0));
        while (!atomic_load(&x->tested)) nap_ms(1);
        FSC_TRY(fsc_comm_recv(r->comm, w, 3, FSC_F32, 0));
        CHECK(w[0] == 1 && w[2] == 3, "received %g %g", (double)w[0], (double)w[2]);
        for (int i = 0; i < 3; i++) w[i] *= 2;
        FSC_TRY(fsc_comm_send(r->comm, w, 3, FSC_F32, 0));
    }
    return FSC_OK;
}

/* Rank 0 starts a send, then changes its buffer before rank 1 receives (the program error NCCL punishes): with
 * waiting sends the receiver reads the buffer when it takes the message, so it gets the changed values. */
static fsc_status rank_sync_reads_late(fsc_rank *r, void *arg) {
    sync_ctx *x = arg;
    float v[3] = {1, 2, 3}, w[3] = {0, 0, 0};
    if (r->rank == 0) {
        fsc_comm_req *q = NULL;
        FSC_TRY(fsc_comm_isend(r->comm, v, 3, FSC_F32, 1, &q));
        nap_ms(20); /* the send has started on the communicator's thread */
        v[0] = 7, v[2] = 9;
        atomic_store(&x->tested, 1);
        const fsc_status s = fsc_comm_wait(q);
        fsc_comm_req_free(q);
        return s;
    }
    while (!atomic_load(&x->tested)) nap_ms(1);
    FSC_TRY(fsc_comm_recv(r->comm, w, 3, FSC_F32, 0));
    CHECK(w[0] == 7 && w[1] == 2 && w[2] == 9, "received %g %g %g, not the buffer as it was at the receive (7 2 9)",
          (double)w[0], (double)w[1], (double)w[2]);
    return FSC_OK;
}

/* Every rank sends to the next, then receives: buffered sends let it run; waiting sends deadlock it. */
static fsc_status rank_ring_first_send(fsc_rank *r, void *arg) {
    (void)arg;
    const int N = r->world;
    float v = (float)r->rank, w = 0;
    FSC_TRY(fsc_comm_send(r->comm, &v, 1, FSC_F32, (r->rank + 1) % N));
    FSC_TRY(fsc_comm_recv(r->comm, &w, 1, FSC_F32, (r->rank + N - 1) % N));
    return FSC_OK;
}

/* Oracle: with sim_sync_sends a send returns, and a started one completes, only once its receive began; the
 * receive reads the sender's buffer as it is then (a buffer changed after the send started arrives changed, so
 * a pipeline that reuses a send buffer too early gives other bits than DDP's); the
 * communicator and its splits say sends_wait (0 without); a ring of send-then-receive, which runs with buffered
 * sends, fails with a timeout that names the send and the rank that never received it; bad options are refused. */
static void test_sync_sends(void **state) {
    (void)state;
    sync_ctx x;
    memset(&x, 0, sizeof x);
    assert_ok(fsc_cluster_run(&(fsc_cluster_opts){.world = 2, .timeout_s = 30, .sim_sync_sends = 1}, rank_sync, &x));
    assert_int_equal(x.done_early, 0);
    assert_int_equal(x.waits[0], 3);
    assert_int_equal(x.waits[1], 3);
    memset(&x, 0, sizeof x);
    assert_ok(fsc_cluster_run(&(fsc_cluster_opts){.world = 2, .timeout_s = 30, .sim_sync_sends = 1},
                              rank_sync_reads_late, &x));
    memset(&x, 0, sizeof x);
    atomic_store(&x.receiving, 1); /* buffered: nothing to wait for */
    atomic_store(&x.tested, 1);
    assert_ok(run(2, 30, rank_sync, &x));
    assert_int_equal(x.waits[0], 0);
    assert_ok(run(3, 30, rank_ring_first_send, NULL));
    assert_err(fsc_cluster_run(&(fsc_cluster_opts){.world = 3, .timeout_s = 0.5, .sim_sync_sends = 1},
                               rank_ring_first_send, NULL),
               FSC_ERR_TIMEOUT, "never received it");
    assert_err(fsc_cluster_run(&(fsc_cluster_opts){.world = 2, .sim_sync_sends = 2}, rank_ring_first_send, NULL),
               FSC_ERR_INVALID, "sim_sync_sends 2");
    static const int stand[2] = {0, 1};
    assert_err(fsc_cluster_run(&(fsc_cluster_opts){.world = 2, .sim_sync_sends = 1, .stand_in = stand},
                               rank_ring_first_send, NULL),
               FSC_ERR_INVALID, "stand_in");
}

/* ---- many mixed collectives: the rendezvous is reused correctly ---- */

static fsc_status rank_stress(fsc_rank *r, void *arg) {
    (void)arg;
    const int N = r->world, me = r->rank;
    float x[64], y[64 * MAXW];
    for (int it = 0; it < 400; it++) {
        size_t n = (size_t)(mix((uint64_t)it) % 64);
        switch (it % 4) {
        case 0:
            for (size_t i = 0; i < n; i++) x[i] = (float)(me + it);
            FSC_TRY(fsc_comm_all_reduce(r->comm, x, x, n, FSC_F32, FSC_MAX));
            for (size_t i = 0; i < n; i++) CHECK(x[i] == (float)(N - 1 + it), "iteration %d: max %g", it, (double)x[i]);
            break;
        case 1:
            for (size_t i = 0; i < n; i++) x[i] = (float)me;
            FSC_TRY(fsc_comm_all_gather(r->comm, x, y, n, FSC_F32));
            for (size_t i = 0; i < n * (size_t)N; i++)
                CHECK(y[i] == (float)(i / n), "iteration %d: gathered %g at %zu", it, (double)y[i], i);
            break;
        case 2: FSC_TRY(fsc_comm_barrier(r->comm)); break;
        default:
            x[0] = (float)me;
            FSC_TRY(fsc_comm_send(r->comm, x, 1, FSC_F32, (me + 1) % N));
            FSC_TRY(fsc_comm_recv(r->comm, y, 1, FSC_F32, (me + N - 1) % N));
            CHECK(y[0] == (float)((me + N - 1) % N), "iteration %d: received %g", it, (double)y[0]);
        }
    }
    return FSC_OK;
}

/* Oracle: 400 mixed calls of varying sizes on 5 ranks all give their exact results. */
static void test_many_mixed_calls(void **state) {
    (void)state;
    assert_ok(run(5, 30, rank_stress, NULL));
}

/* ---- errors ---- */

typedef struct {
    int mode;
    fsc_status st[MAXW], st2[MAXW];
    char msg[MAXW][1024];
    atomic_int done;
    double waited[MAXW];
} err_rec;

static void record(err_rec *e, int rank, fsc_status s) {
    e->st[rank] = s;
    snprintf(e->msg[rank], sizeof(e->msg[rank]), "%s", fsc_last_error());
}

enum { MIS_OP, MIS_COUNT, MIS_DTYPE, MIS_REDOP, MIS_ROOT };

static fsc_status rank_mismatch(fsc_rank *r, void *arg) {
    err_rec *e = arg;
    float x[16] = {0};
    int odd = r->rank == 2;
    fsc_status s;
    switch (e->mode) {
    case MIS_OP:
        s = odd ? fsc_comm_barrier(r->comm) : fsc_comm_all_reduce(r->comm, x, x, 8, FSC_F32, FSC_SUM);
        break;
    case MIS_COUNT: s = fsc_comm_all_reduce(r->comm, x, x, odd ? 9 : 8, FSC_F32, FSC_SUM); break;
    case MIS_DTYPE: s = fsc_comm_all_gather(r->comm, x, x + 8, 2, odd ? FSC_BF16 : FSC_F32); break;
    case MIS_REDOP: s = fsc_comm_all_reduce(r->comm, x, x, 8, FSC_F32, odd ? FSC_MAX : FSC_SUM); break;
    default: s = fsc_comm_broadcast(r->comm, x, 8, FSC_F32, odd ? 1 : 0); break;
    }
    record(e, r->rank, s);
    /* the group still works afterwards */
    e->st2[r->rank] = fsc_comm_barrier(r->comm);
    return FSC_OK;
}

/* Oracle: a mismatched op, count, dtype, reduction or root fails on every rank with FSC_ERR_COMM and a
 * message naming both calls; the next matched call succeeds. */
static void test_mismatch_fails_every_rank(void **state) {
    (void)state;
    const char *needle[] = {"rank 2 called barrier", "rank 2 called all_reduce(9 x f32, sum)",
                            "rank 2 called all_gather(2 x bf16)", "rank 2 called all_reduce(8 x f32, max)",
                            "rank 2 called broadcast(8 x f32, root 1)"};
    for (int mode = MIS_OP; mode <= MIS_ROOT; mode++) {
        err_rec *e = calloc(1, sizeof(*e));
        e->mode = mode;
        assert_ok(run(4, 10, rank_mismatch, e));
        for (int k = 0; k < 4; k++) {
            if (e->st[k] != FSC_ERR_COMM || !strstr(e->msg[k], "mismatched collectives") ||
                !strstr(e->msg[k], needle[mode]) || !strstr(e->msg[k], "rank 0 called"))
                fail_msg("mode %d rank %d: %s: %s", mode, k, fsc_status_str(e->st[k]), e->msg[k]);
            assert_int_equal(e->st2[k], FSC_OK);
        }
        free(e);
    }
}

static fsc_status rank_fails_early(fsc_rank *r, void *arg) {
    err_rec *e = arg;
    if (r->rank == 1) return fsc_error(FSC_ERR_INVALID, "deliberate failure of rank one");
    float x[1000] = {0};
    record(e, r->rank, fsc_comm_all_reduce(r->comm, x, x, 1000, FSC_F32, FSC_SUM));
    e->st2[r->rank] = fsc_comm_barrier(r->comm); /* entering after the failure fails too */
    return e->st[r->rank];
}

/* Oracle: a rank returning an error while the others wait in all_reduce makes every rank's call fail
 * with FSC_ERR_COMM naming the failed rank and the operation; the run returns that rank's own error. */
static void test_failed_rank_fails_waiters(void **state) {
    (void)state;
    err_rec *e = calloc(1, sizeof(*e));
    assert_err(run(4, 20, rank_fails_early, e), FSC_ERR_INVALID, "rank 1: deliberate failure of rank one");
    for (int k = 0; k < 4; k++) {
        if (k == 1) continue;
        if (e->st[k] != FSC_ERR_COMM || !strstr(e->msg[k], "world rank 1 failed") ||
            !strstr(e->msg[k], "deliberate failure") || !strstr(e->msg[k], "all_reduce"))
            fail_msg("rank %d: %s: %s", k, fsc_status_str(e->st[k]), e->msg[k]);
        assert_int_equal(e->st2[k], FSC_ERR_COMM);
    }
    free(e);
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The missing rank's wait until the two others are done (at most 20 s): returning earlier would fail them. */
static void wait_for_others(err_rec *e) {
    double t0 = now_s();
    while (atomic_load(&e->done) < 2 && now_s() - t0 < 20) nanosleep(&(struct timespec){0, 5000000}, NULL);
}

/* 3 ranks of fn with a 0.2 s timeout: its records (the caller frees them). */
static err_rec *run_timing_out(fsc_rank_fn fn) {
    err_rec *e = calloc(1, sizeof(*e));
    assert_non_null(e);
    atomic_init(&e->done, 0);
    assert_ok(run(3, 0.2, fn, e));
    return e;
}

static fsc_status rank_timeout(fsc_rank *r, void *arg) {
    err_rec *e = arg;
    if (r->rank == 2) { /* never calls all_reduce; calls a barrier once the others gave up */
        wait_for_others(e);
        record(e, 2, fsc_comm_barrier(r->comm));
        return FSC_OK;
    }
    float x[4] = {0};
    double t0 = now_s();
    record(e, r->rank, fsc_comm_all_reduce(r->comm, x, x, 4, FSC_F32, FSC_SUM));
    e->waited[r->rank] = now_s() - t0;
    atomic_fetch_add(&e->done, 1);
    return FSC_OK;
}

/* Oracle: with a 0.2 s timeout and rank 2 not calling, ranks 0 and 1 fail with FSC_ERR_TIMEOUT after about
 * 0.2 s, naming the operation and rank 2; the group stays failed, so rank 2's later call fails too, saying that
 * it came after the failure. */
static void test_timeout_names_missing_rank(void **state) {
    (void)state;
    err_rec *e = run_timing_out(rank_timeout);
    for (int k = 0; k < 3; k++) {
        if (e->st[k] != FSC_ERR_TIMEOUT || !strstr(e->msg[k], "all_reduce(4 x f32, sum) timed out after 0.2 s") ||
            !strstr(e->msg[k], "rank 2 never arrived"))
            fail_msg("rank %d: %s: %s", k, fsc_status_str(e->st[k]), e->msg[k]);
        if (k < 2) assert_true(e->waited[k] >= 0.19 && e->waited[k] < 10);
        /* rank 2, named missing, is told its own call came after the failure */
        if ((k == 2) != (strstr(e->msg[k], "rank 2 called barrier after its group had failed: ") != NULL))
            fail_msg("rank %d: %s", k, e->msg[k]);
    }
    free(e);
}

static fsc_status rank_async_timeout(fsc_rank *r, void *arg) {
    err_rec *e = arg;
    if (r->rank == 1) { /* never calls */
        wait_for_others(e);
        return FSC_OK;
    }
    float a[4] = {0}, b[4] = {0};
    fsc_comm_req *ra = NULL, *rb = NULL;
    fsc_status s = fsc_comm_iall_reduce(r->comm, a, a, 4, FSC_F32, FSC_SUM, &ra);
    if (s == FSC_OK) s = fsc_comm_iall_reduce(r->comm, b, b, 4, FSC_F32, FSC_SUM, &rb);
    if (s == FSC_OK) {
        (void)fsc_comm_wait(ra);
        record(e, r->rank, fsc_comm_wait(rb));
    }
    fsc_comm_req_free(ra), fsc_comm_req_free(rb);
    atomic_fetch_add(&e->done, 1);
    return s;
}

/* Oracle: two all-reduces started at once (DDP's buckets) while rank 1 never calls: the second, issued before the
 * first failed, reports the group's failure (rank 1 missing), not a call made after it. */
static void test_timeout_async_queued(void **state) {
    (void)state;
    err_rec *e = run_timing_out(rank_async_timeout);
    for (int k = 0; k < 3; k += 2)
        if (e->st[k] != FSC_ERR_TIMEOUT || !strstr(e->msg[k], "rank 1 never arrived") ||
            strstr(e->msg[k], "after its group had failed"))
            fail_msg("rank %d: %s: %s", k, fsc_status_str(e->st[k]), e->msg[k]);
    free(e);
}

static fsc_status rank_exits_early(fsc_rank *r, void *arg) {
    err_rec *e = arg;
    if (r->rank == 1) return FSC_OK;
    float x[4];
    record(e, 0, e->mode ? fsc_comm_recv(r->comm, x, 4, FSC_F32, 1) : fsc_comm_barrier(r->comm));
    return FSC_OK;
}

/* Oracle: waiting for a rank that has returned from its function fails at once (not after the 20 s timeout)
 * with FSC_ERR_COMM saying so, for a collective and for a recv. */
static void test_exited_rank_fails_waiters(void **state) {
    (void)state;
    const char *needle[] = {"rank 1 returned from its function without calling barrier",
                            "rank 1 returned from its function without sending"};
    for (int mode = 0; mode < 2; mode++) {
        err_rec *e = calloc(1, sizeof(*e));
        e->mode = mode;
        double t0 = now_s();
        assert_ok(run(2, 20, rank_exits_early, e));
        assert_true(now_s() - t0 < 10);
        if (e->st[0] != FSC_ERR_COMM || !strstr(e->msg[0], needle[mode]))
            fail_msg("mode %d: %s: %s", mode, fsc_status_str(e->st[0]), e->msg[0]);
        free(e);
    }
}

/* Stand-ins (fsc_cluster_opts.stand_in, the planner's one rank per role): world 4, ranks 2 and 3 return after
 * splitting the world into {0, 2} and {1, 3}, stood in for by rank 1. Rank r sends r + 1: an all-reduce of 8
 * values (rank 1 computes the chunks of 2 and 3) sums 1 + 2 + 2 + 2 = 7 everywhere, an all-gather gives 1 2 2 2,
 * a broadcast from rank 3 gives rank 1's value, a barrier of {1, 3} completes. A barrier of {0, 2} (which rank 2's
 * stand-in is not in), a split of the world and a receive from rank 2 fail (FSC_ERR_COMM) at once. */
typedef struct {
    int mode; /* 0: collectives; 1: a group without the stand-in; 2: a receive from a rank stood in for; 3: a split */
    float sum[2][8], gathered[2][4], bcast[2];
    fsc_status st[2];
    char msg[2][200];
} stand_rec;

static fsc_status rank_stood_in(fsc_rank *r, void *arg) {
    stand_rec *e = arg;
    fsc_comm *half = NULL;
    fsc_status s = fsc_comm_split(r->comm, r->rank % 2, r->rank, &half);
    if (r->rank >= 2 || s != FSC_OK) { /* stood in for by rank 1 */
        fsc_comm_free(half);
        return s;
    }
    float x[8], one = (float)(r->rank + 1);
    for (int i = 0; i < 8; i++) x[i] = one;
    if (e->mode == 0) {
        s = fsc_comm_all_reduce(r->comm, x, e->sum[r->rank], 8, FSC_F32, FSC_SUM);
        if (s == FSC_OK) s = fsc_comm_all_gather(r->comm, &one, e->gathered[r->rank], 1, FSC_F32);
        e->bcast[r->rank] = one;
        if (s == FSC_OK) s = fsc_comm_broadcast(r->comm, &e->bcast[r->rank], 1, FSC_F32, 3);
        if (s == FSC_OK && r->rank == 1) s = fsc_comm_barrier(half);
    } else if (e->mode == 1) {
        if (r->rank == 0) s = fsc_comm_barrier(half);
    } else if (e->mode == 2) {
        if (r->rank == 0) s = fsc_comm_recv(r->comm, x, 1, FSC_F32, 2);
    } else {
        fsc_comm *c = NULL;
        s = fsc_comm_split(r->comm, 0, 0, &c);
        fsc_comm_free(c);
    }
    fsc_comm_free(half);
    e->st[r->rank] = s;
    snprintf(e->msg[r->rank], sizeof e->msg[0], "%s", s == FSC_OK ? "" : fsc_last_error());
    return s;
}

static void test_stand_in(void **state) {
    (void)state;
    int stand[4] = {0, 1, 1, 1};
    fsc_cluster_opts o = {.world = 4, .timeout_s = 20, .stand_in = stand};
    stand_rec *e = calloc(1, sizeof *e);
    assert_ok(fsc_cluster_run(&o, rank_stood_in, e));
    for (int r = 0; r < 2; r++) {
        for (int i = 0; i < 8; i++) assert_true(e->sum[r][i] == 7.0f);
        for (int i = 0; i < 4; i++) assert_true(e->gathered[r][i] == (i == 0 ? 1.0f : 2.0f));
        assert_true(e->bcast[r] == 2.0f);
    }
    static const char *const want[] = {"", "its stand-in is not in this group",
                                       "returned from its function without sending", "a split cannot stand in"};
    for (int mode = 1; mode < 4; mode++) {
        memset(e, 0, sizeof *e);
        e->mode = mode;
        double t0 = now_s();
        assert_true(fsc_cluster_run(&o, rank_stood_in, e) == FSC_ERR_COMM);
        assert_true(now_s() - t0 < 10);
        if (e->st[0] != FSC_ERR_COMM || !strstr(e->msg[0], want[mode]))
            fail_msg("mode %d: %s: %s", mode, fsc_status_str(e->st[0]), e->msg[0]);
    }
    o.sim_clock = FSC_SIM_CLOCK_VIRTUAL; /* the wall clock only */
    assert_true(fsc_cluster_run(&o, rank_stood_in, e) == FSC_ERR_INVALID);
    free(e);
}

static fsc_status rank_recv_mismatch(fsc_rank *r, void *arg) {
    err_rec *e = arg;
    float x[5] = {1, 2, 3, 4, 5};
    if (r->rank == 0) return fsc_comm_send(r->comm, x, 4, FSC_F32, 1);
    record(e, 1, fsc_comm_recv(r->comm, x, 5, FSC_F32, 0));
    return FSC_OK;
}

/* Oracle: a recv whose count differs from the message fails with FSC_ERR_COMM naming both. */
static void test_recv_mismatch(void **state) {
    (void)state;
    err_rec *e = calloc(1, sizeof(*e));
    assert_ok(run(2, 20, rank_recv_mismatch, e));
    if (e->st[1] != FSC_ERR_COMM || !strstr(e->msg[1], "recv from rank 0 of 5 x f32, but rank 0 sent 4 x f32"))
        fail_msg("%s: %s", fsc_status_str(e->st[1]), e->msg[1]);
    free(e);
}

/* ---- argument validation in comm.c ---- */

static fsc_status rank_bad_args(fsc_rank *r, void *arg) {
    (void)arg;
    fsc_comm *c = r->comm;
    float f[32] = {0};
    int32_t k[4] = {0};
    uint8_t u[4] = {0};
    fsc_comm *out = (fsc_comm *)1;
#define EXPECT(call, st, needle)                                                                     \
    do {                                                                                             \
        fsc_status s_ = (call);                                                                      \
        CHECK(s_ == (st) && strstr(fsc_last_error(), needle), "%s gave %s: %s", #call, fsc_status_str(s_), \
              fsc_last_error());                                                                     \
    } while (0)
    EXPECT(fsc_comm_all_reduce(NULL, f, f, 4, FSC_F32, FSC_SUM), FSC_ERR_INVALID, "all_reduce: comm is NULL");
    EXPECT(fsc_comm_reduce_scatter(NULL, f, f, 4, FSC_F32, FSC_SUM), FSC_ERR_INVALID, "comm is NULL");
    EXPECT(fsc_comm_barrier(NULL), FSC_ERR_INVALID, "barrier: comm is NULL");
    EXPECT(fsc_comm_all_reduce(c, NULL, f, 4, FSC_F32, FSC_SUM), FSC_ERR_INVALID, "send is NULL with 4 elements");
    EXPECT(fsc_comm_all_gather(c, f, NULL, 4, FSC_F32), FSC_ERR_INVALID, "recv is NULL");
    EXPECT(fsc_comm_all_reduce(c, f, f, 4, (fsc_dtype)99, FSC_SUM), FSC_ERR_INVALID, "99 is not a valid fsc_dtype");
    EXPECT(fsc_comm_all_reduce(c, f, f, 4, FSC_F32, (fsc_redop)7), FSC_ERR_INVALID, "7 is not a valid fsc_redop");
    EXPECT(fsc_comm_all_reduce(c, k, k, 4, FSC_I32, FSC_AVG), FSC_ERR_INVALID, "avg of i32");
    EXPECT(fsc_comm_reduce_scatter(c, u, u, 1, FSC_U8, FSC_SUM), FSC_ERR_INVALID, "not u8");
    EXPECT(fsc_comm_broadcast(c, f, 4, FSC_F32, 2), FSC_ERR_INVALID, "root 2 is out of range for comm 'world' of 2");
    EXPECT(fsc_comm_broadcast(c, f, 4, FSC_F32, -1), FSC_ERR_INVALID, "root -1");
    EXPECT(fsc_comm_send(c, f, 4, FSC_F32, 5), FSC_ERR_INVALID, "peer 5 is out of range");
    EXPECT(fsc_comm_recv(c, f, 4, FSC_F32, -2), FSC_ERR_INVALID, "peer -2 is out of range");
    EXPECT(fsc_comm_all_reduce(c, f, f + 1, 4, FSC_F32, FSC_SUM), FSC_ERR_INVALID, "in place needs send == recv");
    EXPECT(fsc_comm_all_gather(c, f + 1, f, 4, FSC_F32), FSC_ERR_INVALID, "send == recv + rank x sendcount");
    EXPECT(fsc_comm_reduce_scatter(c, f, f + 1, 4, FSC_F32, FSC_SUM), FSC_ERR_INVALID, "recv == send + rank");
    EXPECT(fsc_comm_all_to_all(c, f, f, 4, FSC_F32), FSC_ERR_INVALID, "does not allow");
    EXPECT(fsc_comm_all_reduce(c, f, f, SIZE_MAX / 2, FSC_F32, FSC_SUM), FSC_ERR_INVALID, "overflow");
    EXPECT(fsc_comm_split(c, -1, 0, &out), FSC_ERR_INVALID, "color -1 is negative");
    CHECK(out == NULL, "failed split left *out set");
    EXPECT(fsc_comm_split(c, 0, 0, NULL), FSC_ERR_INVALID, "out is NULL");
    EXPECT(fsc_comm_split(NULL, 0, 0, &out), FSC_ERR_INVALID, "comm is NULL");
#undef EXPECT
    /* zero elements with NULL buffers are fine, and collective */
    FSC_TRY(fsc_comm_all_reduce(c, NULL, NULL, 0, FSC_F32, FSC_SUM));
    FSC_TRY(fsc_comm_all_gather(c, NULL, NULL, 0, FSC_BF16));
    const fsc_comm_stats *s = fsc_comm_get_stats(c);
    CHECK(s->calls[FSC_OP_ALL_REDUCE] == 1 && s->calls[FSC_OP_BROADCAST] == 0, "rejected calls were counted");
    return FSC_OK;
}

/* Oracle: every bad argument is rejected with FSC_ERR_INVALID and a message naming it; nothing is counted. */
static void test_bad_arguments(void **state) {
    (void)state;
    assert_ok(run(2, 10, rank_bad_args, NULL));
}

/* ---- fsc_comm_wrap and the object ---- */

static int destroyed;
static fsc_status dummy_fail(void *ctx) { return fsc_error(FSC_ERR_COMM, "boom from the backend"); }
static void dummy_destroy(void *ctx) { destroyed++; }

/* Oracle: wrap validates and takes ownership (destroy runs on failure and on free); names are kept and
 * truncated; a backend's error gets the comm's name and rank in front and is not counted. */
static void test_wrap_and_object(void **state) {
    (void)state;
    fsc_comm_ops ops = {.abi_version = FSC_COMM_ABI_VERSION, .name = "dummy", .barrier = dummy_fail,
                        .destroy = dummy_destroy};
    fsc_comm *c = NULL;
    destroyed = 0;
    assert_err(fsc_comm_wrap(NULL, NULL, 0, 1, "x", &c), FSC_ERR_INVALID, "ops is NULL");
    fsc_comm_ops old = ops;
    old.abi_version = 99;
    assert_err(fsc_comm_wrap(&old, NULL, 0, 1, "x", &c), FSC_ERR_UNSUPPORTED, "interface version 99");
    assert_int_equal(destroyed, 0);
    assert_err(fsc_comm_wrap(&ops, NULL, 2, 2, "x", &c), FSC_ERR_INVALID, "rank 2 of size 2");
    assert_int_equal(destroyed, 1);
    assert_null(c);
    assert_ok(fsc_comm_wrap(&ops, NULL, 0, 1, "a-name-that-is-longer-than-thirty-one-chars", &c));
    assert_int_equal(strlen(fsc_comm_name(c)), 31);
    fsc_comm_set_name(c, "data");
    assert_string_equal(fsc_comm_name(c), "data");
    fsc_comm_set_name(c, NULL);
    assert_string_equal(fsc_comm_name(c), "");
    fsc_comm_set_name(c, "dp");
    assert_err(fsc_comm_barrier(c), FSC_ERR_COMM, "barrier on comm 'dp' (rank 0 of 1): boom from the backend");
    assert_int_equal(fsc_comm_get_stats(c)->calls[FSC_OP_BARRIER], 0);
    fsc_comm_free(c);
    assert_int_equal(destroyed, 2);
    fsc_comm_free(NULL);
    assert_int_equal(fsc_comm_rank(NULL), -1);
    assert_int_equal(fsc_comm_size(NULL), 0);
    assert_null(fsc_comm_get_stats(NULL));
    assert_string_equal(fsc_comm_op_name(FSC_OP_ALL_TO_ALL), "all_to_all");
    assert_string_equal(fsc_comm_op_name(FSC_OP_REDUCE_SCATTER), "reduce_scatter");
    assert_string_equal(fsc_comm_op_name(FSC_OP_COUNT), "unknown");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reductions_match_serial_reference),
        cmocka_unit_test(test_sum_is_in_rank_order),
        cmocka_unit_test(test_max_propagates_nan),
        cmocka_unit_test(test_data_movement),
        cmocka_unit_test(test_stats_follow_ring_formulas),
        cmocka_unit_test(test_split_groups),
        cmocka_unit_test(test_send_recv),
        cmocka_unit_test(test_sync_sends),
        cmocka_unit_test(test_many_mixed_calls),
        cmocka_unit_test(test_mismatch_fails_every_rank),
        cmocka_unit_test(test_failed_rank_fails_waiters),
        cmocka_unit_test(test_timeout_names_missing_rank),
        cmocka_unit_test(test_timeout_async_queued),
        cmocka_unit_test(test_exited_rank_fails_waiters),
        cmocka_unit_test(test_stand_in),
        cmocka_unit_test(test_recv_mismatch),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_wrap_and_object),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
