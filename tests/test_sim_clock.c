/* Tests of the simulated cluster's virtual clock (fsc_cluster_opts.sim_clock, cluster.h; lib/core/clock.c,
 * sim/sim_net.c, sim/sim_async.c): a rank's time is its own thread's CPU time plus what it waits for on the
 * modelled network, whatever else runs on the machine.
 * Oracles: the modelled costs worked out by hand (a ring all-reduce's 2(N-1) latencies plus its bytes over the
 * bandwidth; a send's one latency plus its bytes), computations of a known CPU time (a spin until the thread's
 * CPU clock advanced by so much), and the wall clock's bits for training (only time is simulated).
 * Rank functions record what they saw; the test asserts after the run (cmocka is not thread-safe). */
#include <math.h>
#include <time.h>
#include "partest.h"

#define W 4

/* Spin until this thread has used s seconds of CPU time (a computation of known cost on the virtual clock). */
static void spin_cpu(double s) {
    struct timespec t0, t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
    volatile double x = 0;
    do {
        for (int i = 0; i < 1000; i++) x += 1e-9;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    } while ((double)(t.tv_sec - t0.tv_sec) + 1e-9 * (double)(t.tv_nsec - t0.tv_nsec) < s);
    (void)x; /* read once: clang's -Wunused-but-set-variable */
}

static double now_s(void) { return 1e-6 * fsc_trace_now_us(); }

typedef struct {
    int clock;
    double lat_us, gbps;
    double spin_s;           /* each rank's computation */
    int async;               /* the collective overlaps the computation */
    double elapsed[W];       /* seconds each rank measured */
    double wall;             /* the whole run on the machine's clock (the calling thread's) */
} probe;

/* Compute spin_s (rank r: (r + 1) x spin_s when not async, so the ranks arrive at different times), and
 * all-reduce 1 Mi floats: synchronously after, or started before and waited for after. */
static fsc_status rank_probe(fsc_rank *r, void *arg) {
    probe *p = arg;
    const size_t n = 1 << 20;
    float *x = calloc(n, sizeof *x);
    if (!x) return fsc_error(FSC_ERR_NOMEM, "probe: out of memory");
    fsc_status s = fsc_comm_barrier(r->comm); /* every rank's clock leaves it at the same time */
    const double t0 = now_s();
    if (s != FSC_OK) {
    } else if (p->async) {
        fsc_comm_req *q = NULL;
        s = fsc_comm_iall_reduce(r->comm, x, x, n, FSC_F32, FSC_SUM, &q);
        spin_cpu(p->spin_s);
        if (s == FSC_OK) s = fsc_comm_wait(q);
        fsc_comm_req_free(q);
    } else {
        spin_cpu(p->spin_s * (r->rank + 1));
        s = fsc_comm_all_reduce(r->comm, x, x, n, FSC_F32, FSC_SUM);
    }
    p->elapsed[r->rank] = now_s() - t0;
    free(x);
    return s;
}

static void run_probe(probe *p) {
    fsc_cluster_opts co = {.world = W, .device = "cpu", .timeout_s = 60, .sim_clock = p->clock,
                           .sim_latency_us = p->lat_us, .sim_bandwidth_gbps = p->gbps};
    const double t0 = now_s();
    assert_ok(fsc_cluster_run(&co, rank_probe, p));
    p->wall = now_s() - t0;
}

/* The all-reduce's modelled time on W ranks: 2(W-1) latencies and 2(W-1)/W of its 4 MiB over the bandwidth. */
static double ring_s(const probe *p) {
    return 2.0 * (W - 1) * p->lat_us * 1e-6 + 2.0 * (W - 1) / W * 4.0 * (1 << 20) / (p->gbps * 1e9);
}

/* A collective starts when the last rank arrives and ends after its modelled time, on every rank's clock: rank
 * r computes (r + 1) x 20 ms, so every rank leaves at 4 x 20 ms + the ring's time; 4 ranks on however many cores
 * the machine has measure what 4 devices would (the wall clock sees the cores shared, and sleeps the network). */
static void test_collective_waits_for_the_last_rank(void **state) {
    (void)state;
    probe p = {.clock = FSC_SIM_CLOCK_VIRTUAL, .lat_us = 500, .gbps = 1, .spin_s = 0.02};
    run_probe(&p);
    const double want = W * p.spin_s + ring_s(&p); /* 80 ms + 3 ms + 6.3 ms */
    for (int r = 0; r < W; r++) {
        const double t0 = (r + 1) * p.spin_s; /* where rank r's own clock stood when it arrived */
        if (!(p.elapsed[r] >= want - 1e-9 && p.elapsed[r] < want + 0.004))
            fail_msg("rank %d: %.4f s on its clock, want %.4f (its computation %.3f, the last rank's %.3f, the ring "
                     "%.4f)", r, p.elapsed[r], want, t0, W * p.spin_s, ring_s(&p));
    }
}

/* Started before a computation, a collective overlaps it: each rank waits for max(its computation, the ring),
 * and with a ring longer than the computation exactly the ring. Synchronous, the two add up (above). */
static void test_async_overlaps_the_computation(void **state) {
    (void)state;
    probe p = {.clock = FSC_SIM_CLOCK_VIRTUAL, .lat_us = 2000, .gbps = 0.5, .spin_s = 0.01, .async = 1};
    run_probe(&p);
    const double ring = ring_s(&p); /* 12 ms + 12.6 ms: longer than the 10 ms computation */
    for (int r = 0; r < W; r++)
        if (!(p.elapsed[r] >= ring - 1e-9 && p.elapsed[r] < ring + 0.003))
            fail_msg("rank %d: %.4f s, want the ring's %.4f (the computation %.3f hidden behind it)", r, p.elapsed[r],
                     ring, p.spin_s);
    p.spin_s = 0.04; /* now the computation is the longer */
    run_probe(&p);
    for (int r = 0; r < W; r++)
        if (!(p.elapsed[r] >= p.spin_s - 1e-9 && p.elapsed[r] < p.spin_s + 0.003))
            fail_msg("rank %d: %.4f s, want the computation's %.4f (the ring %.4f hidden behind it)", r, p.elapsed[r],
                     p.spin_s, ring);
}

/* fsc_comm_test says done once the call has ended on the rank's clock: an all-reduce of 4 MiB over 4 ranks at
 * 2 ms a step and 0.5 GB/s ends 24.6 ms after the ranks start it. Slept on the machine's clock (no CPU time: the
 * rank's clock stands still) until the call has run, it is not done yet; after 40 ms of computation it is. */
typedef struct {
    int before[W], after[W];
} testseen;

static fsc_status rank_test(fsc_rank *r, void *arg) {
    testseen *p = arg;
    const size_t n = 1 << 20;
    float *x = calloc(n, sizeof *x);
    if (!x) return fsc_error(FSC_ERR_NOMEM, "test: out of memory");
    fsc_comm_req *q = NULL;
    fsc_status s = fsc_comm_iall_reduce(r->comm, x, x, n, FSC_F32, FSC_SUM, &q);
    struct timespec nap = {0, 200 * 1000 * 1000}; /* long enough for the progress threads to run it */
    nanosleep(&nap, NULL);
    if (s == FSC_OK) s = fsc_comm_test(q, &p->before[r->rank]);
    spin_cpu(0.04);
    for (int k = 0; k < 50 && s == FSC_OK && !p->after[r->rank]; k++) { /* the call's real run on a loaded machine */
        s = fsc_comm_test(q, &p->after[r->rank]);
        if (!p->after[r->rank]) nanosleep(&nap, NULL);
    }
    if (s == FSC_OK) s = fsc_comm_wait(q);
    fsc_comm_req_free(q);
    free(x);
    return s;
}

static void test_test_reads_the_rank_clock(void **state) {
    (void)state;
    testseen p = {{0}, {0}};
    fsc_cluster_opts co = {.world = W, .device = "cpu", .timeout_s = 60, .sim_clock = FSC_SIM_CLOCK_VIRTUAL,
                           .sim_latency_us = 2000, .sim_bandwidth_gbps = 0.5};
    assert_ok(fsc_cluster_run(&co, rank_test, &p));
    for (int r = 0; r < W; r++)
        if (p.before[r] || !p.after[r])
            fail_msg("rank %d: test said %d before the call's modelled end (want 0), %d after it (want 1)", r,
                     p.before[r], p.after[r]);
}

/* A message arrives after its send's modelled time: rank 0 computes 15 ms and sends 1 MiB (one latency and the
 * bytes over the bandwidth), rank 1 receives at once and stands at 15 ms + that; then rank 1 sends it back with
 * no computation: rank 0 receives at twice the message's time plus 15 ms. */
typedef struct {
    double at[2];
} pingpong;

static fsc_status rank_pingpong(fsc_rank *r, void *arg) {
    pingpong *p = arg;
    const size_t n = 1 << 18;
    float *x = calloc(n, sizeof *x);
    if (!x) return fsc_error(FSC_ERR_NOMEM, "pingpong: out of memory");
    fsc_status s = fsc_comm_barrier(r->comm);
    const double t0 = now_s();
    if (s != FSC_OK) {
    } else if (r->rank == 0) {
        spin_cpu(0.015);
        s = fsc_comm_send(r->comm, x, n, FSC_F32, 1);
        if (s == FSC_OK) s = fsc_comm_recv(r->comm, x, n, FSC_F32, 1);
    } else {
        s = fsc_comm_recv(r->comm, x, n, FSC_F32, 0);
        p->at[1] = now_s() - t0;
        if (s == FSC_OK) s = fsc_comm_send(r->comm, x, n, FSC_F32, 0);
    }
    if (r->rank == 0) p->at[0] = now_s() - t0;
    free(x);
    return s;
}

static void test_message_arrives_after_its_send(void **state) {
    (void)state;
    pingpong p = {{0, 0}};
    fsc_cluster_opts co = {.world = 2, .device = "cpu", .timeout_s = 60, .sim_clock = FSC_SIM_CLOCK_VIRTUAL,
                           .sim_latency_us = 1000, .sim_bandwidth_gbps = 0.5};
    assert_ok(fsc_cluster_run(&co, rank_pingpong, &p));
    const double msg = 1e-3 + (double)(1 << 20) / 0.5e9; /* 1 ms + 2.1 ms */
    /* each rank reads t0 after its own CPU time since the barrier: rank 1's may exceed rank 0's (a few us, more under
     * TSan), so the arrival as rank 1 measures it can be that much short of the modelled one */
    const double tick = 5e-5;
    if (!(p.at[1] >= 0.015 + msg - tick && p.at[1] < 0.015 + msg + 0.002))
        fail_msg("rank 1 received at %.6f s, want %.6f", p.at[1], 0.015 + msg);
    if (!(p.at[0] >= 0.015 + 2 * msg - tick && p.at[0] < 0.015 + 2 * msg + 0.003))
        fail_msg("rank 0 received the reply at %.6f s, want %.6f", p.at[0], 0.015 + 2 * msg);
}

/* Training on the virtual clock gives the wall clock's bits: FSDP with a network and prefetch, and a zero-bubble
 * pipeline with its asynchronous sends and receives. */
static void test_same_bits_as_the_wall_clock(void **state) {
    (void)state;
    pt_run a = pt_make(W, FSC_PAR_FSDP), b;
    a.gbps = 2, a.lat_us = 20;
    a.po.prefetch = 1;
    pt_train(&a);
    b = a;
    b.params = NULL;
    b.clock = FSC_SIM_CLOCK_VIRTUAL;
    pt_train(&b);
    pt_assert_same(&a, &b, "fsdp, world 4, network: virtual against wall clock");
    free(b.params);

    pt_run c = pt_make(W, FSC_PAR_DDP), d;
    c.cfg.layers = 4;
    c.po.pp = W;
    c.po.accum = 8;
    c.po.no_sync = 1;
    c.po.prefetch = 1;
    c.po.schedule = FSC_SCHED_ZB_H1;
    pt_train(&c);
    d = c;
    d.params = NULL;
    d.clock = FSC_SIM_CLOCK_VIRTUAL;
    pt_train(&d);
    pt_assert_same(&c, &d, "zb-h1 pipeline of 4 stages: virtual against wall clock");
    free(a.params);
    free(c.params);
    free(d.params);
}

/* A copy's modelled time is the rank's on its clock, the machine's on the wall clock, on every device: 1 MiB
 * uploaded at 0.01 GB/s takes 105 ms. On the counting device with the wall clock the upload sleeps that long (as
 * it did before the virtual clock); with the modelled clock the rank's clock moves by it and nothing sleeps. */
typedef struct {
    int clock;
    double wall[2], rank[2]; /* each rank's upload on the machine's clock and on its own */
} copytime;

static double mono_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static fsc_status rank_copy(fsc_rank *r, void *arg) {
    copytime *p = arg;
    const size_t n = 1 << 20;
    void *d = NULL;
    unsigned char *host = calloc(n, 1);
    if (!host) return fsc_error(FSC_ERR_NOMEM, "copy: out of memory");
    fsc_status s = fsc_device_alloc(r->dev, FSC_TAG_PARAMS, n, &d);
    const double w0 = mono_s(), t0 = now_s();
    if (s == FSC_OK) s = fsc_device_upload(r->dev, d, host, n);
    p->wall[r->rank] = mono_s() - w0;
    p->rank[r->rank] = now_s() - t0;
    fsc_device_release(r->dev, d);
    free(host);
    return s;
}

static void test_copy_time_on_each_clock(void **state) {
    (void)state;
    const double want = (double)(1 << 20) / 0.01e9;
    for (int m = 0; m < 2; m++) {
        copytime p = {.clock = m ? FSC_SIM_CLOCK_MODEL : FSC_SIM_CLOCK_WALL};
        fsc_cluster_opts co = {.world = 2, .device = "count", .timeout_s = 60, .sim_clock = p.clock,
                               .sim_copy_gbps = 0.01};
        assert_ok(fsc_cluster_run(&co, rank_copy, &p));
        for (int r = 0; r < 2; r++) {
            if (!m && !(p.wall[r] >= want - 1e-3))
                fail_msg("wall clock, rank %d: the upload took %.4f s, want its modelled %.4f s", r, p.wall[r], want);
            if (m && !(fabs(p.rank[r] - want) < 1e-9 && p.wall[r] < want))
                fail_msg("modelled clock, rank %d: the upload moved its clock %.6f s (want %.6f) and took %.4f s of "
                         "the machine's (want none slept)", r, p.rank[r], want, p.wall[r]);
        }
    }
}

/* The modelled clock on the counting device (the planner's replay): the calls it skips (above its real memory)
 * still meet and take the network's time. Rank 0 first uploads 1 MiB at 0.01 GB/s (its clock moves 104.9 ms);
 * then every rank all-reduces 1 Mi floats (skipped: it starts when rank 0 arrives and takes the ring's time),
 * all-gathers 10,000 floats a rank into a recv larger than the counting device's real memory (run, staged: the
 * recv's bytes are thrown away) and rank 0 sends 1 Mi floats to rank 1 (skipped: it arrives after its send's
 * time). No rank hangs or reads a fake address, and each clock is the sum worked out by hand. */
typedef struct {
    double t[W];
} modelled;

static fsc_status rank_modelled(fsc_rank *r, void *arg) {
    modelled *p = arg;
    const size_t n = 1 << 20, g = 10000;
    void *x = NULL, *y = NULL, *host = calloc(n, sizeof(float));
    if (!host) return fsc_error(FSC_ERR_NOMEM, "modelled: out of memory");
    fsc_status s = fsc_device_alloc(r->dev, FSC_TAG_ACTS, n * sizeof(float), &x);
    if (s == FSC_OK) s = fsc_device_alloc(r->dev, FSC_TAG_ACTS, W * g * sizeof(float), &y);
    const double t0 = now_s();
    if (s == FSC_OK && r->rank == 0) s = fsc_device_upload(r->dev, x, host, n * sizeof(float));
    if (s == FSC_OK) s = fsc_comm_all_reduce(r->comm, x, x, n, FSC_F32, FSC_SUM);
    if (s == FSC_OK) s = fsc_comm_all_gather(r->comm, x, y, g, FSC_F32);
    if (s == FSC_OK && r->rank == 0) s = fsc_comm_send(r->comm, x, n, FSC_F32, 1);
    if (s == FSC_OK && r->rank == 1) s = fsc_comm_recv(r->comm, x, n, FSC_F32, 0);
    p->t[r->rank] = now_s() - t0;
    fsc_device_release(r->dev, x);
    fsc_device_release(r->dev, y);
    free(host);
    return s;
}

static void test_model_clock_meets_in_skipped_calls(void **state) {
    (void)state;
    modelled p = {{0}};
    fsc_cluster_opts co = {.world = W, .device = "count", .timeout_s = 60, .sim_clock = FSC_SIM_CLOCK_MODEL,
                           .sim_latency_us = 100, .sim_bandwidth_gbps = 1, .sim_copy_gbps = 0.01};
    assert_ok(fsc_cluster_run(&co, rank_modelled, &p));
    const double mib = 4.0 * (1 << 20), lat = 100e-6, bw = 1e9;
    const double upload = mib / 0.01e9;
    const double reduce = 2.0 * (W - 1) * lat + 2.0 * (W - 1) / W * mib / bw;
    const double gather = (W - 1) * lat + (W - 1) * 4.0 * 10000 / bw;
    const double send = lat + mib / bw;
    for (int r = 0; r < W; r++) {
        const double want = upload + reduce + gather + (r < 2 ? send : 0);
        if (fabs(p.t[r] - want) > 1e-9 * want)
            fail_msg("rank %d: %.9f s on its modelled clock, want %.9f (upload %.6f, all-reduce %.6f, all-gather %.6f, "
                     "send %.6f)", r, p.t[r], want, upload, reduce, gather, r < 2 ? send : 0);
    }
}

/* The simulator's own work inside a call is not the rank's, synchronous or not: on the counting device a small
 * collective is staged through host memory with the device's copies, which on the modelled clock neither move the
 * rank's clock nor book its copy link. After a synchronous and an asynchronous all-reduce of 1,000 floats (no
 * network: no time), an upload of 1 MiB at 0.01 GB/s takes exactly its 104.9 ms. */
static fsc_status rank_staged(fsc_rank *r, void *arg) {
    double *took = arg;
    const size_t n = 1 << 20, m = 1000;
    void *x = NULL, *y = NULL, *host = calloc(n, 1);
    if (!host) return fsc_error(FSC_ERR_NOMEM, "staged: out of memory");
    fsc_status s = fsc_device_alloc(r->dev, FSC_TAG_ACTS, n, &x);
    if (s == FSC_OK) s = fsc_device_alloc(r->dev, FSC_TAG_ACTS, m * sizeof(float), &y);
    const double t0 = now_s();
    if (s == FSC_OK) s = fsc_comm_all_reduce(r->comm, y, y, m, FSC_F32, FSC_SUM);
    fsc_comm_req *q = NULL;
    if (s == FSC_OK) s = fsc_comm_iall_reduce(r->comm, y, y, m, FSC_F32, FSC_SUM, &q);
    if (s == FSC_OK) s = fsc_comm_wait(q);
    fsc_comm_req_free(q);
    const double t1 = now_s();
    if (s == FSC_OK) s = fsc_device_upload(r->dev, x, host, n);
    took[2 * r->rank] = t1 - t0;
    took[2 * r->rank + 1] = now_s() - t1;
    fsc_device_release(r->dev, x);
    fsc_device_release(r->dev, y);
    free(host);
    return s;
}

static void test_model_clock_staging_is_not_the_ranks(void **state) {
    (void)state;
    double took[4] = {0};
    fsc_cluster_opts co = {.world = 2, .device = "count", .timeout_s = 60, .sim_clock = FSC_SIM_CLOCK_MODEL,
                           .sim_copy_gbps = 0.01};
    assert_ok(fsc_cluster_run(&co, rank_staged, took));
    const double want = (double)(1 << 20) / 0.01e9;
    for (int r = 0; r < 2; r++)
        if (took[2 * r] != 0 || fabs(took[2 * r + 1] - want) > 1e-9)
            fail_msg("rank %d: the all-reduces took %.6f s of its modelled clock (want 0), the upload %.6f s (want "
                     "%.6f: its link not booked by the staging)", r, took[2 * r], took[2 * r + 1], want);
}

/* A cluster of one rank runs on its caller's thread; called by a rank of a cluster on the virtual clock, it reads
 * its own clock while it runs and leaves the caller's as it was: a wall-clock rank sleeping 150 ms sees them
 * pass, and after a one-rank cluster on the virtual clock the caller's 150 ms of sleep still cost its clock
 * nothing (no CPU time). */
typedef struct {
    double inner_wall, outer_after;
} nested;

static fsc_status rank_sleep(fsc_rank *r, void *arg) {
    (void)r;
    struct timespec nap = {0, 150 * 1000 * 1000};
    const double t0 = now_s();
    nanosleep(&nap, NULL);
    if (arg) *(double *)arg = now_s() - t0;
    return FSC_OK;
}

static fsc_status rank_nests(fsc_rank *r, void *arg) {
    nested *p = arg;
    fsc_status s = FSC_OK;
    if (r->rank == 0) {
        fsc_cluster_opts in = {.world = 1, .device = "cpu", .timeout_s = 60};
        s = fsc_cluster_run(&in, rank_sleep, &p->inner_wall);
        in.sim_clock = FSC_SIM_CLOCK_VIRTUAL;
        if (s == FSC_OK) s = fsc_cluster_run(&in, rank_sleep, NULL);
        const double t0 = now_s();
        if (s == FSC_OK) s = rank_sleep(r, NULL);
        p->outer_after = now_s() - t0;
    }
    return s == FSC_OK ? fsc_comm_barrier(r->comm) : s;
}

static void test_nested_cluster_keeps_the_callers_clock(void **state) {
    (void)state;
    nested p = {0, 0};
    fsc_cluster_opts co = {.world = 2, .device = "cpu", .timeout_s = 60, .sim_clock = FSC_SIM_CLOCK_VIRTUAL};
    assert_ok(fsc_cluster_run(&co, rank_nests, &p));
    if (!(p.inner_wall >= 0.149))
        fail_msg("a wall-clock rank inside a virtual rank measured its 150 ms sleep as %.4f s", p.inner_wall);
    if (!(p.outer_after < 0.1))
        fail_msg("after a nested one-rank cluster, the virtual rank's 150 ms sleep cost %.4f s of its clock (want "
                 "none: its clock was lost)", p.outer_after);
}

static fsc_status rank_nothing(fsc_rank *r, void *arg) {
    (void)r, (void)arg;
    return FSC_OK;
}

/* What the virtual clock cannot time is refused, naming the option. */
static void test_refusals(void **state) {
    (void)state;
    fsc_cluster_opts co = {.world = 2, .device = "cpu", .sim_clock = 7};
    assert_err(fsc_cluster_run(&co, rank_nothing, NULL), FSC_ERR_INVALID, "sim_clock 7 is not a clock");
    co.sim_clock = FSC_SIM_CLOCK_VIRTUAL;
    co.threads_per_rank = 2;
    assert_err(fsc_cluster_run(&co, rank_nothing, NULL), FSC_ERR_INVALID, "one BLAS thread a rank");
    co.threads_per_rank = 0;
    co.stage_through_host = 1;
    assert_err(fsc_cluster_run(&co, rank_nothing, NULL), FSC_ERR_INVALID, "stage_through_host");
    co.stage_through_host = 0;
    co.device = "cuda";
    assert_err(fsc_cluster_run(&co, rank_nothing, NULL), FSC_ERR_INVALID, "thread's CPU time");
    fsc_plan_rates rt;
    assert_err(fsc_plan_calibrate_clock(2, 2, FSC_SIM_CLOCK_VIRTUAL, &rt), FSC_ERR_INVALID, "one BLAS thread");
    assert_err(fsc_plan_calibrate_clock(2, 1, 5, &rt), FSC_ERR_INVALID, "sim_clock 5");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_collective_waits_for_the_last_rank),
        cmocka_unit_test(test_async_overlaps_the_computation),
        cmocka_unit_test(test_message_arrives_after_its_send),
        cmocka_unit_test(test_test_reads_the_rank_clock),
        cmocka_unit_test(test_same_bits_as_the_wall_clock),
        cmocka_unit_test(test_copy_time_on_each_clock),
        cmocka_unit_test(test_model_clock_meets_in_skipped_calls),
        cmocka_unit_test(test_nested_cluster_keeps_the_callers_clock),
        cmocka_unit_test(test_model_clock_staging_is_not_the_ranks),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
