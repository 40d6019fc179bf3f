/* The planner's time half (fsc/plan.h, docs/planning.md): a step's time from the work fsc_plan_memory counted
 * on each rank, against a device's rates and the network's.
 *   compute = sum over the kernels' intensity bins of max(flops / rate, bytes / bandwidth)   (a roofline)
 *             x (m + pp - 1) / m with a pipeline of pp stages and m micro-batches            (its bubble)
 *   comm    = sum over collectives of steps(op, N) x latency + bytes / link bandwidth        (sim/sim_net.c's ring)
 *   step    = max(compute, comm) with prefetch, compute + comm without; the slowest rank's.
 * fsc_plan_calibrate measures the cpu device's two rates as simulated ranks get them: every rank measures at once.
 * Not here: the counting (backends/count, plan_memory.c), the simulated network itself (sim/sim_net.c). */
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include "fsc/cluster.h"
#include "fsc/plan.h"
#include "fsc/trace.h" /* fsc_trace_now_us: the monotonic clock */
#include "core/comm_impl.h" /* fsc_ring_steps */

enum { CALIB_ROUNDS = 3, CALIB_MAX_RANKS = 2 }; /* at most 2 ranks measure the gemm rate (3 MiB each) */
#define CALIB_COPY_BYTES ((size_t)12 << 20)      /* rank 0 alone the bandwidth: 24 MiB */

/* One rank's communication: each group's calls at its size; a group of one rank costs nothing. */
static double comm_time(const fsc_plan_rank *r, const fsc_plan_rates *rt) {
    double t = 0;
    for (int g = 0; g < FSC_GROUP_COUNT; g++) {
        if (r->group_size[g] <= 1) continue;
        for (int op = 0; op < FSC_OP_COUNT; op++) {
            if (op == FSC_OP_RECV) continue; /* the sender pays for a message */
            t += (double)r->comm[g].calls[op] * fsc_ring_steps((fsc_comm_op)op, r->group_size[g]) * rt->net_latency_s;
            if (rt->net_bytes_per_s > 0) t += r->comm[g].bytes[op] / rt->net_bytes_per_s;
        }
    }
    return t;
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

fsc_status fsc_plan_time(const fsc_plan_job *job, const fsc_plan_rank *r, const fsc_plan_rates *rates,
                         fsc_plan_step *out) {
    FSC_CHECK_ARG(job);
    FSC_CHECK_ARG(r);
    FSC_CHECK_ARG(rates);
    FSC_CHECK_ARG(out);
    if (!(rates->flops_per_s > 0) || !(rates->bytes_per_s > 0))
        return fsc_error(FSC_ERR_INVALID, "fsc_plan_time: the device's rates must be above 0 (flops_per_s %g, "
                         "bytes_per_s %g)", rates->flops_per_s, rates->bytes_per_s);
    if (!(rates->net_bytes_per_s >= 0) || !(rates->net_latency_s >= 0))
        return fsc_error(FSC_ERR_INVALID, "fsc_plan_time: the network's rates must be at least 0 (net_bytes_per_s "
                         "%g, net_latency_s %g)", rates->net_bytes_per_s, rates->net_latency_s);
    if (job->world < 1) return fsc_error(FSC_ERR_INVALID, "fsc_plan_time: world is %d, must be >= 1", job->world);
    const int pp = job->po.pp > 1 ? job->po.pp : 1, m = job->po.accum > 1 ? job->po.accum : 1;
    const double bubble = (double)(m + pp - 1) / m;
    *out = (fsc_plan_step){0};
    for (int i = 0; i < job->world; i++) {
        const double compute = compute_time(&r[i], rates) * bubble, comm = comm_time(&r[i], rates);
        const double step = job->po.prefetch ? (compute > comm ? compute : comm) : compute + comm;
        if (i > 0 && step <= out->step_s) continue;
        *out = (fsc_plan_step){.step_s = step, .compute_s = compute, .comm_s = comm, .rank = i};
    }
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
    if (s == FSC_OK && r->rank == 0) s = measure_bandwidth(r->dev, CALIB_COPY_BYTES, &bw);
    c->rates[r->rank] = (fsc_plan_rates){.flops_per_s = best * 1e12, .bytes_per_s = bw};
    return s;
}

fsc_status fsc_plan_calibrate(int world, int threads, fsc_plan_rates *out) {
    FSC_CHECK_ARG(out);
    if (world < 1) return fsc_error(FSC_ERR_INVALID, "fsc_plan_calibrate: world is %d, must be >= 1", world);
    if (threads < 0) return fsc_error(FSC_ERR_INVALID, "fsc_plan_calibrate: threads is %d, must be >= 0", threads);
    *out = (fsc_plan_rates){0};
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int ranks = world < CALIB_MAX_RANKS ? world : CALIB_MAX_RANKS;
    if (cores > 0 && ranks > cores) ranks = (int)cores;
    const double want = (double)world * (threads > 1 ? threads : 1); /* the world's threads */
    const double share = cores > 0 && want > (double)cores ? (double)cores / want : 1.0; /* they share the cores */
    fsc_plan_rates *rates = calloc((size_t)ranks, sizeof *rates);
    if (!rates) return fsc_error(FSC_ERR_NOMEM, "fsc_plan_calibrate: out of memory for %d ranks", ranks);
    fsc_cluster_opts co = fsc_cluster_opts_default();
    co.world = ranks;
    co.device = "cpu";
    co.threads_per_rank = threads;
    fsc_status s = fsc_cluster_run(&co, calib_rank, &(calib_run){rates});
    for (int i = 0; i < ranks && s == FSC_OK; i++) out->flops_per_s += rates[i].flops_per_s / ranks * share; /* mean */
    out->bytes_per_s = rates[0].bytes_per_s * share;
    free(rates);
    if (s != FSC_OK) return fsc_error_prefix(s, "fsc_plan_calibrate");
    if (!(out->flops_per_s > 0) || !(out->bytes_per_s > 0))
        return fsc_error(FSC_ERR_INTERNAL, "fsc_plan_calibrate: the cpu device's rates measured 0 (clock too coarse?)");
    return FSC_OK;
}
