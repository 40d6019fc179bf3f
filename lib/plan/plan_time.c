/* The planner's time half (fsc/plan.h, docs/planning.md): a step's time from the work fsc_plan_memory counted
 * on each rank, against a device's rates and the network's.
 *   compute = sum over the kernels' intensity bins of max(flops / rate, bytes / bandwidth)   (a roofline)
 *             / (1 - b) with a pipeline, b its schedule's bubble with equal F, B and W      (parallel/pipe.h):
 *             (pp-1)/(m+pp-1) for gpipe and 1f1b, (pp-1)/(vm+pp-1) interleaved, (pp-1)/(3m+pp-1) zb-h1,
 *             (pp-1)/(6m+pp-1) zbv's fill; a custom list's by its chunks and whether it has Ws (the formula the
 *             pipeline's stats print as ideal_bubble)
 *   comm    = sum over collectives of steps(op, N) x latency + bytes / link bandwidth        (sim/sim_net.c's ring)
 *   step    = max(compute, comm) with prefetch, compute + comm without; the slowest rank's.
 * fsc_plan_calibrate measures the cpu device's two rates as simulated ranks get them: every rank measures at once.
 * Not here: the counting (backends/count, plan_memory.c), the simulated network itself (sim/sim_net.c). */
#include <math.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include "fsc/cluster.h"
#include "fsc/plan.h"
#include "fsc/trace.h" /* fsc_trace_now_us: the monotonic clock */
#include "plan_impl.h"
#include "core/comm_impl.h" /* fsc_ring_steps */
#include "core/kernels.h" /* measure_call's kernel */
#include "parallel/pipe.h" /* fsc_pipe_formula_bubble */

enum { CALIB_ROUNDS = 3, CALIB_MAX_RANKS = 2 }; /* at most 2 ranks measure the gemm rate (3 MiB each) */
enum { CALIB_CALLS = 256 };                      /* kernel calls a round of measure_call */
#define CALIB_COPY_BYTES ((size_t)12 << 20)      /* rank 0 alone the bandwidth: 24 MiB */

/* A call of op with bytes on a group of n ranks spanning nodes nodes with at most per_node on one (nodes 0: one
 * level): the simulated network's ring (sim/sim_net.c) on the links it crosses, the simulator's own function. */
static double call_time(const fsc_plan_rates *rt, fsc_comm_op op, int n, int nodes, int per_node, double calls,
                        double bytes) {
    const fsc_net_links l = {rt->net_latency_s, rt->net_bytes_per_s, rt->node_ranks, rt->node_latency_s,
                             rt->node_bytes_per_s};
    return fsc_net_seconds(&l, op, n, nodes, per_node, calls, bytes);
}

/* One rank's communication: every communicator's calls at its own size (and, with nodes, its nodes[c] and
 * per_node[c]); a group of one rank costs nothing, a recv nothing (the sender pays for a message). */
static double comm_time(const fsc_plan_rank *r, const fsc_plan_rates *rt, const int *nodes, const int *per_node) {
    double t = 0;
    for (int c = 0; c < r->ncomms; c++) {
        const fsc_plan_comm *k = &r->comms[c];
        if (k->size <= 1) continue;
        for (int op = 0; op < FSC_OP_COUNT; op++) {
            if (op == FSC_OP_RECV || (k->stats.calls[op] == 0 && k->stats.bytes[op] == 0)) continue;
            t += call_time(rt, (fsc_comm_op)op, k->size, nodes ? nodes[c] : 0, per_node ? per_node[c] : 0,
                           (double)k->stats.calls[op], k->stats.bytes[op]);
        }
    }
    return t;
}

/* Two levels: each communicator's members are the world's ranks that hold its id; count the nodes they span
 * and the most of them on one node, for every rank's every communicator (nodes, per_node: world x
 * FSC_PLAN_COMMS). */
typedef struct {
    uint64_t id;
    int rank, slot;
} comm_member;

static int member_cmp(const void *a, const void *b) {
    const comm_member *x = a, *y = b;
    if (x->id != y->id) return x->id < y->id ? -1 : 1;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

static fsc_status comm_nodes(const fsc_plan_rank *r, int world, int node_ranks, int *nodes, int *per_node) {
    size_t n = 0;
    for (int i = 0; i < world; i++) n += (size_t)(r[i].ncomms > 0 ? r[i].ncomms : 0);
    comm_member *m = malloc((n ? n : 1) * sizeof *m);
    if (!m) return fsc_error(FSC_ERR_NOMEM, "fsc_plan_time: out of memory for %zu communicators", n);
    n = 0;
    for (int i = 0; i < world; i++)
        for (int c = 0; c < r[i].ncomms && c < FSC_PLAN_COMMS; c++) m[n++] = (comm_member){r[i].comms[c].id, i, c};
    qsort(m, n, sizeof *m, member_cmp);
    for (size_t a = 0, b; a < n; a = b) {
        int k = 0, g = 0, run = 0, last = -1;
        for (b = a; b < n && m[b].id == m[a].id; b++) { /* ranks ascending: a node's members are consecutive */
            const int node = m[b].rank / node_ranks;
            if (node != last) k++, run = 0, last = node;
            if (++run > g) g = run;
        }
        for (size_t x = a; x < b; x++) {
            nodes[(size_t)m[x].rank * FSC_PLAN_COMMS + (size_t)m[x].slot] = k;
            per_node[(size_t)m[x].rank * FSC_PLAN_COMMS + (size_t)m[x].slot] = g;
        }
    }
    free(m);
    return FSC_OK;
}

/* A pipeline's step over its compute by the schedule's formula: 1 / (1 - bubble), the bubble the pipeline's stats
 * call ideal_bubble; the planned models split their backward, so a list with Ws runs split. */
static double bubble_factor(const fsc_parallel_opts *po) {
    const int pp = po->pp > 1 ? po->pp : 1, m = po->accum > 1 ? po->accum : 1;
    int split = po->schedule == FSC_SCHED_ZB_H1 || po->schedule == FSC_SCHED_ZBV;
    for (int r = 0; po->schedule == FSC_SCHED_CUSTOM && po->actions && po->nactions && r < pp; r++)
        for (int i = 0; po->actions[r] && i < po->nactions[r]; i++) split |= po->actions[r][i].kind == FSC_ACT_WEIGHT;
    return 1.0 / (1.0 - fsc_pipe_formula_bubble(pp, fsc_pipe_chunks(po), m, split));
}

/* One rank's compute: the roofline of each intensity bin. */
static double compute_time(const fsc_plan_rank *r, const fsc_plan_rates *rt) {
    double t = 0;
    for (int b = 0; b < FSC_PLAN_BINS; b++) {
        const double tf = r->work_flops[b] / rt->flops_per_s, tb = r->work_bytes[b] / rt->bytes_per_s;
        t += tf > tb ? tf : tb;
    }
    return t;
}

/* The rates fsc_plan_time and fsc_plan_replay take (fn: which, for the message). */
static fsc_status check_rates(const fsc_plan_rates *rates, const char *fn) {
    if (!(rates->flops_per_s > 0) || !(rates->bytes_per_s > 0))
        return fsc_error(FSC_ERR_INVALID, "%s: the device's rates must be above 0 (flops_per_s %g, "
                         "bytes_per_s %g)", fn, rates->flops_per_s, rates->bytes_per_s);
    if (!(rates->net_bytes_per_s >= 0) || !(rates->net_latency_s >= 0))
        return fsc_error(FSC_ERR_INVALID, "%s: the network's rates must be at least 0 (net_bytes_per_s "
                         "%g, net_latency_s %g)", fn, rates->net_bytes_per_s, rates->net_latency_s);
    if (!(rates->kernel_s >= 0))
        return fsc_error(FSC_ERR_INVALID, "%s: kernel_s is %g, must be at least 0", fn, rates->kernel_s);
    if (!(rates->host_bytes_per_s >= 0))
        return fsc_error(FSC_ERR_INVALID, "%s: host_bytes_per_s is %g, must be at least 0", fn,
                         rates->host_bytes_per_s);
    if (rates->node_ranks < 0 || !(rates->node_bytes_per_s >= 0) || !(rates->node_latency_s >= 0))
        return fsc_error(FSC_ERR_INVALID, "%s: the node's rates must be at least 0 (node_ranks %d, "
                         "node_bytes_per_s %g, node_latency_s %g)", fn, rates->node_ranks, rates->node_bytes_per_s,
                         rates->node_latency_s);
    if (!(rates->copy_bytes_per_s >= 0))
        return fsc_error(FSC_ERR_INVALID, "%s: copy_bytes_per_s is %g, must be at least 0 (0: copies are free)", fn,
                         rates->copy_bytes_per_s);
    return FSC_OK;
}

fsc_status fsc_plan_time(const fsc_plan_job *job, const fsc_plan_rank *r, const fsc_plan_rates *rates,
                         fsc_plan_step *out) {
    FSC_CHECK_ARG(job);
    FSC_CHECK_ARG(r);
    FSC_CHECK_ARG(rates);
    FSC_CHECK_ARG(out);
    FSC_TRY(check_rates(rates, "fsc_plan_time"));
    if (job->world < 1) return fsc_error(FSC_ERR_INVALID, "fsc_plan_time: world is %d, must be >= 1", job->world);
    const double bubble = bubble_factor(&job->po);
    int *nodes = NULL, *per_node = NULL;
    if (rates->node_ranks > 0) {
        nodes = calloc((size_t)job->world * FSC_PLAN_COMMS, sizeof *nodes);
        per_node = calloc((size_t)job->world * FSC_PLAN_COMMS, sizeof *per_node);
        fsc_status s = nodes && per_node ? comm_nodes(r, job->world, rates->node_ranks, nodes, per_node)
                                         : fsc_error(FSC_ERR_NOMEM, "fsc_plan_time: out of memory for %d ranks",
                                                     job->world);
        if (s != FSC_OK) {
            free(nodes), free(per_node);
            return s;
        }
    }
    *out = (fsc_plan_step){0};
    for (int i = 0; i < job->world; i++) {
        const size_t at = (size_t)i * FSC_PLAN_COMMS;
        const double host = rates->host_bytes_per_s > 0 ? r[i].host_work_bytes / rates->host_bytes_per_s : 0;
        const double calls_s = r[i].kernel_calls * rates->kernel_s * bubble;
        const double compute = compute_time(&r[i], rates) * bubble + calls_s + host,
                     comm = comm_time(&r[i], rates, nodes ? nodes + at : NULL, per_node ? per_node + at : NULL);
        const double step = job->po.prefetch ? (compute > comm ? compute : comm) : compute + comm;
        if (i > 0 && step <= out->step_s) continue;
        *out = (fsc_plan_step){.step_s = step, .compute_s = compute, .comm_s = comm, .rank = i,
                               .calls = r[i].kernel_calls, .calls_s = calls_s};
    }
    free(nodes), free(per_node);
    return FSC_OK;
}

/* The best rate of a few device copies of bytes (read and written: 2 bytes a byte), after a warm-up. */
static fsc_status measure_bandwidth(fsc_device *dev, size_t bytes, double *out) {
    char *a = NULL;
    fsc_status s = fsc_device_calloc(dev, FSC_TAG_WORKSPACE, 2 * bytes, (void **)&a);
    double best = 0;
    for (int k = 0; k < 5 && s == FSC_OK; k++) {
        const double t0 = (fsc_trace_now_us() * 1e-6);
        s = fsc_device_copy(dev, a + (k % 2 ? 0 : bytes), a + (k % 2 ? bytes : 0), bytes);
        if (s == FSC_OK) s = fsc_device_sync(dev);
        const double dt = (fsc_trace_now_us() * 1e-6) - t0, rate = dt > 0 ? 2.0 * (double)bytes / dt : 0;
        if (k > 0 && rate > best) best = rate;
    }
    fsc_device_release(dev, a);
    *out = best;
    return s;
}

/* A kernel call's fixed cost: the best mean time of CALIB_CALLS scalings of 16 elements, over a few rounds. */
static fsc_status measure_call(fsc_device *dev, double *out) {
    float *x = NULL;
    fsc_status s = fsc_device_calloc(dev, FSC_TAG_WORKSPACE, 16 * sizeof(float), (void **)&x);
    double best = 0;
    for (int k = 0; k < 4 && s == FSC_OK; k++) {
        const double t0 = fsc_trace_now_us() * 1e-6;
        for (int i = 0; i < CALIB_CALLS && s == FSC_OK; i++) s = fsc_k_scale(dev, x, 1.0f, 16);
        if (s == FSC_OK) s = fsc_device_sync(dev);
        const double dt = (fsc_trace_now_us() * 1e-6 - t0) / CALIB_CALLS;
        if (k > 0 && (best == 0 || dt < best)) best = dt; /* the first round warms up */
    }
    fsc_device_release(dev, x);
    *out = best;
    return s;
}

/* Each calibrating rank's gemm rate, measured while all of them measure at once (rank 0's bandwidth after). */
typedef struct {
    fsc_plan_rates *rates; /* (ranks) */
} calib_run;

static fsc_status calib_rank(fsc_rank *r, void *arg) {
    calib_run *c = arg;
    double tflops = 0, best = 0, bw = 0;
    fsc_status s = FSC_OK;
    for (int k = 0; k < CALIB_ROUNDS && s == FSC_OK; k++) { /* the best of a few: a loaded machine varies */
        s = fsc_device_measure_tflops(r->dev, 512, &tflops);
        if (tflops > best) best = tflops;
    }
    double call = 0;
    if (s == FSC_OK && r->rank == 0) s = measure_bandwidth(r->dev, CALIB_COPY_BYTES, &bw);
    if (s == FSC_OK && r->rank == 0) s = measure_call(r->dev, &call);
    c->rates[r->rank] = (fsc_plan_rates){.flops_per_s = best * 1e12, .bytes_per_s = bw, .kernel_s = call};
    return s;
}

fsc_status fsc_plan_calibrate(int world, int threads, fsc_plan_rates *out) {
    return fsc_plan_calibrate_clock(world, threads, FSC_SIM_CLOCK_WALL, out);
}

fsc_status fsc_plan_calibrate_clock(int world, int threads, int sim_clock, fsc_plan_rates *out) {
    FSC_CHECK_ARG(out);
    if (world < 1) return fsc_error(FSC_ERR_INVALID, "fsc_plan_calibrate: world is %d, must be >= 1", world);
    if (threads < 0) return fsc_error(FSC_ERR_INVALID, "fsc_plan_calibrate: threads is %d, must be >= 0", threads);
    const int virt = sim_clock == FSC_SIM_CLOCK_VIRTUAL;
    if (!virt && sim_clock != FSC_SIM_CLOCK_WALL)
        return fsc_error(FSC_ERR_INVALID, "fsc_plan_calibrate: sim_clock %d is not a clock (FSC_SIM_CLOCK_WALL 0 or "
                                          "FSC_SIM_CLOCK_VIRTUAL 1)", sim_clock);
    if (virt && threads > 1)
        return fsc_error(FSC_ERR_INVALID, "fsc_plan_calibrate: the virtual clock needs one BLAS thread a rank "
                                          "(threads %d)", threads);
    *out = (fsc_plan_rates){0};
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int ranks = world < CALIB_MAX_RANKS ? world : CALIB_MAX_RANKS;
    if (cores > 0 && ranks > cores) ranks = (int)cores;
    const double want = (double)world * (threads > 1 ? threads : 1); /* the world's threads */
    /* they share the cores, unless each rank's clock is its own thread's CPU time */
    const double share = !virt && cores > 0 && want > (double)cores ? (double)cores / want : 1.0;
    fsc_plan_rates *rates = calloc((size_t)ranks, sizeof *rates);
    if (!rates) return fsc_error(FSC_ERR_NOMEM, "fsc_plan_calibrate: out of memory for %d ranks", ranks);
    fsc_cluster_opts co = fsc_cluster_opts_default();
    co.world = ranks;
    co.device = "cpu";
    co.threads_per_rank = threads;
    co.sim_clock = sim_clock;
    fsc_status s = fsc_cluster_run(&co, calib_rank, &(calib_run){rates});
    for (int i = 0; i < ranks && s == FSC_OK; i++) out->flops_per_s += rates[i].flops_per_s / ranks * share; /* mean */
    out->bytes_per_s = rates[0].bytes_per_s * share;
    out->kernel_s = rates[0].kernel_s / share;
    free(rates);
    if (s != FSC_OK) return fsc_error_prefix(s, "fsc_plan_calibrate");
    if (!(out->flops_per_s > 0) || !(out->bytes_per_s > 0))
        return fsc_error(FSC_ERR_INTERNAL, "fsc_plan_calibrate: the cpu device's rates measured 0 (clock too coarse?)");
    return FSC_OK;
}

/* The job of fsc_plan_fit_rates: the model, the batch of one data-parallel rank, the options that change its
 * kernels (micro-batches, precision, recomputation, clipping, the non-finite checks); as many ranks as the job's
 * will run at once on this machine's cores (min(world, cores): they contend for its caches and memory as the
 * job's ranks will), each with that batch, data-parallel (no network: the gradients' all-reduce costs no time). */
static fsc_status one_rank_job(const fsc_plan_job *job, fsc_plan_job *one) {
    const int tp = job->po.tp > 1 ? job->po.tp : 1, pp = job->po.pp > 1 ? job->po.pp : 1;
    const int dp = job->world / (tp * pp);
    if (job->world < 1 || dp < 1 || job->world % (tp * pp) != 0 || job->batch < dp || job->batch % dp != 0)
        return fsc_error(FSC_ERR_INVALID, "fsc_plan_fit_rates: the batch %d does not split over the data-parallel "
                         "ranks of world %d (tp %d, pp %d)", job->batch, job->world, tp, pp);
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    *one = *job;
    one->world = cores > 1 && job->world > 1 ? (int)(cores < job->world ? cores : job->world) : 1;
    one->batch = job->batch / dp;
    one->sequence_parallel = 0;
    fsc_parallel_opts po = fsc_parallel_opts_default();
    if (one->world > 1) po.kind = FSC_PAR_DDP;
    po.accum = job->po.accum > 1 ? job->po.accum : 1;
    while (one->batch % po.accum) po.accum--; /* the share splits into the micro-batches (a pipeline's do) */
    po.param_dtype = job->po.param_dtype, po.reduce_dtype = job->po.reduce_dtype;
    po.init_loss_scale = job->po.init_loss_scale, po.min_loss_scale = job->po.min_loss_scale;
    po.nonfinite = job->po.nonfinite, po.max_skipped_steps = job->po.max_skipped_steps;
    po.checkpoint = job->po.checkpoint;
    po.clip = job->po.clip;
    one->po = po;
    one->batch *= one->world;
    return FSC_OK;
}

fsc_status fsc_plan_fit_rates(const fsc_plan_job *job, fsc_plan_rates *rates) {
    FSC_CHECK_ARG(job);
    FSC_CHECK_ARG(rates);
    if (!(rates->flops_per_s > 0) || !(rates->bytes_per_s > 0) || !(rates->kernel_s >= 0))
        return fsc_error(FSC_ERR_INVALID, "fsc_plan_fit_rates: the calibrated rates must be above 0 (flops_per_s "
                         "%g, bytes_per_s %g, kernel_s %g)", rates->flops_per_s, rates->bytes_per_s, rates->kernel_s);
    fsc_plan_job one;
    FSC_TRY(one_rank_job(job, &one));
    fsc_plan_rank *rs = calloc((size_t)one.world, sizeof *rs);
    if (!rs) return fsc_error(FSC_ERR_NOMEM, "fsc_plan_fit_rates: out of memory");
    double measured = 0;
    fsc_status s = fsc_plan_memory(&one, rs);
    if (s == FSC_OK) s = plan_time_steps(&one, 15, &measured);
    const fsc_plan_rank r = rs[0];
    free(rs);
    if (s != FSC_OK) return fsc_error_prefix(s, "fsc_plan_fit_rates: the calibration's step");
    const double want = measured - r.kernel_calls * rates->kernel_s;
    fsc_plan_rates rt = *rates;
    rt.bytes_per_s = 1e15; /* the products alone */
    const double products = compute_time(&r, &rt);
    if (!(want > 0) || !(products > 0))
        return fsc_error(FSC_ERR_INTERNAL, "fsc_plan_fit_rates: the one-rank step measured %g s, its products %g s",
                         measured, products);
    if (products >= want) { /* faster than its products at the calibrated rate: that rate was low */
        rates->flops_per_s *= products / want;
        rates->bytes_per_s = rt.bytes_per_s;
        return FSC_OK;
    }
    double lo = 1e3, hi = 1e15; /* compute_time falls as the rate rises: bisect in log space */
    for (int k = 0; k < 100; k++) {
        const double mid = sqrt(lo * hi);
        rt.bytes_per_s = mid;
        if (compute_time(&r, &rt) > want) lo = mid;
        else hi = mid;
    }
    rates->bytes_per_s = sqrt(lo * hi);
    return FSC_OK;
}

fsc_status fsc_plan_replay(const fsc_plan_job *job, const fsc_plan_rates *rates, fsc_plan_step *out) {
    FSC_CHECK_ARG(job);
    FSC_CHECK_ARG(rates);
    FSC_CHECK_ARG(out);
    if (job->world < 1) return fsc_error(FSC_ERR_INVALID, "fsc_plan_replay: world is %d, must be >= 1", job->world);
    fsc_plan_rank *r = calloc((size_t)job->world, sizeof *r);
    if (!r) return fsc_error(FSC_ERR_NOMEM, "fsc_plan_replay: out of memory for %d ranks", job->world);
    double seconds = 0;
    fsc_status s = check_rates(rates, "fsc_plan_replay");
    if (s == FSC_OK) s = plan_replay_step(job, rates, r, &seconds);
    if (s == FSC_OK) s = fsc_plan_time(job, r, rates, out);
    if (s == FSC_OK) out->step_s = seconds;
    free(r);
    return s;
}
