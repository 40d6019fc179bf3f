/* fsc_cluster_run: the SPMD entry point on the simulated cluster (cluster.h).
 * Each of opts->world ranks gets its own device and world communicator and runs fn on its own thread
 * (a world of 1 runs on the calling thread). A rank whose fn returns an error fails the cluster, so ranks
 * waiting in collectives return instead of hanging; the call returns the first failure, "rank R: ...".
 * On a device other than cpu every rank opens GPU 0 (FSC_SIM_GPUS=n spreads rank r to GPU r % n) and the
 * communicator stages through host memory (sim.h); stage_through_host forces that on cpu too.
 * fsc_cluster_run_from_env (one process per rank) lives in cluster_env.c and lib/core/launch.c, not here. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fsc/cluster.h"
#include "sim.h"
#include "core/clock_impl.h"
#include "core/kernels.h" /* fsc_device_set_copy_cost, fsc_device_set_copy_rank_clock */

#define SIM_MAX_WORLD 1024
#define SIM_DEFAULT_TIMEOUT_S 60.0

typedef struct {
    fsc_rank r;
    fsc_rank_fn fn;
    void *arg;
    sim_cluster *cl;
    fsc_vclock clock;  /* the rank's virtual clock (cl->virt) */
    double t0;         /* where it starts: the monotonic clock when the cluster started */
    fsc_status status;
    int revoked_by;    /* with status: the world rank whose revoke failed the call it failed with, -1: none */
    char msg[SIM_MSG_CAP]; /* its message when status is not FSC_OK */
    pthread_t thread;
    int started;
} rank_ctx;

static void *rank_main(void *p) {
    rank_ctx *rc = p;
    fsc_clear_error();
    /* one rank runs on the caller's thread, which may have a clock of its own (a rank of another cluster): this
     * cluster's clock while the rank runs (none on the wall clock), the caller's after */
    fsc_vclock *outer = fsc_clock_current();
    if (rc->cl->virt) fsc_clock_attach(&rc->clock, rc->t0);
    else if (outer) fsc_clock_restore(NULL);
    rc->status = rc->fn(&rc->r, rc->arg);
    fsc_clock_restore(outer);
    if (rc->status != FSC_OK) {
        /* a call failed by a revoke fails with FSC_ERR_COMM (sim_revoke): another status is a failure of its own
         * after it (the revoke handled), which the record does not explain */
        if (rc->status == FSC_ERR_COMM) rc->revoked_by = atomic_load(&rc->cl->revoked_by[rc->r.rank]);
        snprintf(rc->msg, sizeof rc->msg, "%s", fsc_last_error());
        sim_cluster_fail(rc->cl, rc->r.rank, rc->status, rc->msg);
    }
    sim_cluster_exit(rc->cl, rc->r.rank);
    return NULL;
}

static fsc_status check_opts(const fsc_cluster_opts *o, fsc_rank_fn fn) {
    if (!o) return fsc_error(FSC_ERR_INVALID, "fsc_cluster_run: opts is NULL");
    if (!fn) return fsc_error(FSC_ERR_INVALID, "fsc_cluster_run: fn is NULL");
    if (o->world < 1 || o->world > SIM_MAX_WORLD)
        return fsc_error(FSC_ERR_INVALID, "fsc_cluster_run: world %d is out of range (1 to %d ranks)", o->world,
                         SIM_MAX_WORLD);
    if (!(o->timeout_s >= 0) || isinf(o->timeout_s))
        return fsc_error(FSC_ERR_INVALID, "fsc_cluster_run: timeout_s %g must be a finite number of seconds "
                                          "(0 for the default of %g)", o->timeout_s, SIM_DEFAULT_TIMEOUT_S);
    if (o->threads_per_rank < 0)
        return fsc_error(FSC_ERR_INVALID, "fsc_cluster_run: threads_per_rank %d is negative", o->threads_per_rank);
    if (o->stage_through_host != 0 && o->stage_through_host != 1)
        return fsc_error(FSC_ERR_INVALID, "fsc_cluster_run: stage_through_host %d must be 0 or 1",
                         o->stage_through_host);
    if (!(o->sim_bandwidth_gbps >= 0) || isinf(o->sim_bandwidth_gbps))
        return fsc_error(FSC_ERR_INVALID, "fsc_cluster_run: sim_bandwidth_gbps %g must be a finite number of GB/s "
                                          "(0: the network costs no time)", o->sim_bandwidth_gbps);
    if (!(o->sim_latency_us >= 0) || isinf(o->sim_latency_us))
        return fsc_error(FSC_ERR_INVALID, "fsc_cluster_run: sim_latency_us %g must be a finite number of "
                                          "microseconds (0: none)", o->sim_latency_us);
    if (o->sim_node_ranks < 0)
        return fsc_error(FSC_ERR_INVALID, "fsc_cluster_run: sim_node_ranks %d is negative (0: one level of links)",
                         o->sim_node_ranks);
    if (!(o->sim_node_bandwidth_gbps >= 0) || isinf(o->sim_node_bandwidth_gbps) || !(o->sim_node_latency_us >= 0) ||
        isinf(o->sim_node_latency_us))
        return fsc_error(FSC_ERR_INVALID, "fsc_cluster_run: the node's links (sim_node_bandwidth_gbps %g, "
                                          "sim_node_latency_us %g) must be finite and at least 0",
                         o->sim_node_bandwidth_gbps, o->sim_node_latency_us);
    if (!(o->sim_copy_gbps >= 0) || isinf(o->sim_copy_gbps))
        return fsc_error(FSC_ERR_INVALID, "fsc_cluster_run: sim_copy_gbps %g must be a finite number of GB/s (0: "
                                          "host<->device copies cost no time)", o->sim_copy_gbps);
    if (o->sim_clock != FSC_SIM_CLOCK_WALL && o->sim_clock != FSC_SIM_CLOCK_VIRTUAL &&
        o->sim_clock != FSC_SIM_CLOCK_MODEL)
        return fsc_error(FSC_ERR_INVALID, "fsc_cluster_run: sim_clock %d is not a clock (FSC_SIM_CLOCK_WALL 0, "
                                          "FSC_SIM_CLOCK_VIRTUAL 1 or FSC_SIM_CLOCK_MODEL 2)", o->sim_clock);
    if (o->sim_clock == FSC_SIM_CLOCK_MODEL && (!o->device || strcmp(o->device, "count") != 0))
        return fsc_error(FSC_ERR_INVALID, "fsc_cluster_run: the modelled clock times the counting device's kernels "
                                          "(device \"count\"), not '%s'", o->device ? o->device : "cpu");
    if (o->sim_clock == FSC_SIM_CLOCK_VIRTUAL) {
        if (o->device && strcmp(o->device, "cpu") != 0)
            return fsc_error(FSC_ERR_INVALID, "fsc_cluster_run: the virtual clock measures a rank's computation as "
                             "its thread's CPU time, which is not a '%s' device's time: use the cpu device or the "
                             "wall clock", o->device);
        if (o->threads_per_rank > 1)
            return fsc_error(FSC_ERR_INVALID, "fsc_cluster_run: the virtual clock counts the CPU time of a rank's "
                             "own thread only, so it needs one BLAS thread a rank (threads_per_rank %d)",
                             o->threads_per_rank);
        if (o->stage_through_host)
            return fsc_error(FSC_ERR_INVALID, "fsc_cluster_run: stage_through_host is not timed by the virtual "
                                              "clock (the staging runs on progress threads): use the wall clock");
    }
    if (o->stand_in && o->sim_clock != FSC_SIM_CLOCK_WALL)
        return fsc_error(FSC_ERR_INVALID, "fsc_cluster_run: stand_in needs the wall clock (sim_clock %d)", o->sim_clock);
    if (o->sim_sync_sends != 0 && o->sim_sync_sends != 1)
        return fsc_error(FSC_ERR_INVALID, "fsc_cluster_run: sim_sync_sends %d must be 0 (buffered sends) or 1 (a send "
                         "waits for its receive)", o->sim_sync_sends);
    if (o->sim_sync_sends && o->stand_in)
        return fsc_error(FSC_ERR_INVALID, "fsc_cluster_run: sim_sync_sends with stand_in (a stood-in rank's sends "
                         "would wait for receives nobody posts)");
    if (o->reduce_native)
        return fsc_error(FSC_ERR_INVALID, "fsc_cluster_run: reduce_native applies to processes started by a launcher "
                         "(MPI, NCCL); simulated ranks always sum in rank order");
    return FSC_OK;
}

fsc_status sim_gpu_ordinal(int rank, int *ordinal) {
    *ordinal = 0;
    const char *v = getenv("FSC_SIM_GPUS");
    if (!v || !v[0]) return FSC_OK;
    char *end = NULL;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (errno || end == v || *end || n < 1 || n > 1 << 20)
        return fsc_error(FSC_ERR_INVALID, "FSC_SIM_GPUS='%.40s' is not a number of GPUs (a whole number >= 1; "
                                          "rank r then uses GPU r %% n)", v);
    *ordinal = (int)(rank % n);
    return FSC_OK;
}

fsc_status fsc_cluster_run(const fsc_cluster_opts *opts, fsc_rank_fn fn, void *arg) {
    FSC_CHECK_ARG(fn);
    FSC_TRY(check_opts(opts, fn));
    const int world = opts->world;
    const char *devname = opts->device ? opts->device : "cpu";
    double timeout = opts->timeout_s > 0 ? opts->timeout_s : SIM_DEFAULT_TIMEOUT_S;
    const int virt = opts->sim_clock != FSC_SIM_CLOCK_WALL;
    fsc_device_opts dopts = {.threads = opts->threads_per_rank ? opts->threads_per_rank : (world > 1 || virt ? 1 : 0),
                             .ordinal = 0};

    rank_ctx *ranks = calloc((size_t)world, sizeof(*ranks));
    if (!ranks) return fsc_error(FSC_ERR_NOMEM, "fsc_cluster_run: out of memory for %d ranks", world);
    sim_cluster *cl = NULL;
    fsc_status s = sim_cluster_create(world, timeout, &cl);
    if (s == FSC_OK) {
        cl->virt = virt;
        cl->sync_sends = opts->sim_sync_sends;
        cl->stand_in = opts->stand_in;
        cl->net_latency_s = opts->sim_latency_us * 1e-6;
        cl->net_bytes_per_s = opts->sim_bandwidth_gbps * 1e9;
        cl->node_ranks = opts->sim_node_ranks;
        cl->node_latency_s = opts->sim_node_latency_us * 1e-6;
        cl->node_bytes_per_s = opts->sim_node_bandwidth_gbps * 1e9;
        if (cl->node_ranks > 0 && cl->world_group && sim_net_place(cl->world_group) != 0) /* made before the nodes */
            s = fsc_error(FSC_ERR_NOMEM, "fsc_cluster_run: out of memory for the network");
        if (cl->net_latency_s > 0 || cl->net_bytes_per_s > 0 ||
            (cl->node_ranks > 0 && (cl->node_latency_s > 0 || cl->node_bytes_per_s > 0))) { /* the links' bookings */
            pthread_mutex_init(&cl->net_mu, NULL);
            cl->link_free = calloc((size_t)world, sizeof *cl->link_free);
            cl->link_booked = calloc((size_t)world, sizeof *cl->link_booked);
            if (!cl->link_free || !cl->link_booked) s = fsc_error(FSC_ERR_NOMEM, "fsc_cluster_run: out of memory for the network");
        }
    }
    for (int r = 0; r < world && s == FSC_OK; r++) {
        rank_ctx *rc = &ranks[r];
        rc->r.rank = rc->r.local_rank = r;
        rc->revoked_by = -1;
        rc->r.world = world;
        rc->fn = fn;
        rc->arg = arg;
        rc->cl = cl;
        if (strcmp(devname, "cpu") != 0) s = sim_gpu_ordinal(r, &dopts.ordinal);
        if (s == FSC_OK) s = fsc_device_create(devname, &dopts, &rc->r.dev);
        if (s == FSC_OK) fsc_device_set_copy_cost(rc->r.dev, opts->sim_copy_gbps);
        if (s == FSC_OK) fsc_device_set_copy_rank_clock(rc->r.dev, virt); /* copies timed on the rank's clock only */
        if (s != FSC_OK) {
            s = fsc_error_prefix(s, "rank %d: could not create its '%s' device", r, devname);
            break;
        }
        s = sim_comm_open(cl, r, rc->r.dev, opts->stage_through_host, &rc->r.comm);
    }

    const double t0 = fsc_clock_wall(); /* every rank's virtual clock starts here */
    for (int r = 0; r < world; r++) ranks[r].t0 = t0, ranks[r].clock.modelled = opts->sim_clock == FSC_SIM_CLOCK_MODEL;
    if (s == FSC_OK && world == 1) {
        rank_main(&ranks[0]);
    } else if (s == FSC_OK) {
        for (int r = 0; r < world; r++) {
            if (pthread_create(&ranks[r].thread, NULL, rank_main, &ranks[r]) != 0) {
                /* the ranks already running must not wait for this one */
                sim_cluster_fail(cl, r, FSC_ERR_NOMEM, "its thread could not be started (out of resources)");
                for (int k = r; k < world; k++) sim_cluster_exit(cl, k);
                break;
            }
            ranks[r].started = 1;
        }
        for (int r = 0; r < world; r++)
            if (ranks[r].started) pthread_join(ranks[r].thread, NULL);
    }

    if (s == FSC_OK) {
        fsc_status fs;
        const char *msg;
        int fr = sim_cluster_first_failure(cl, &fs, &msg);
        /* a rank that gave up on a group after its own failure: when the first failure is its consequence (the
         * failed call's record names the revoker), that rank's own error is the cause, followed back to a rank
         * whose failure is not a revoke's; a later, unrelated failure of a rank that once revoked is not */
        for (int hop = 0; fr >= 0 && hop < world; hop++) {
            const int rv = ranks[fr].revoked_by;
            if (rv < 0 || rv == fr || ranks[rv].status == FSC_OK) break;
            fr = rv, fs = ranks[rv].status, msg = ranks[rv].msg;
        }
        if (fr >= 0) { /* named once: a rank that failed because another did reports that one */
            fsc_error(fs, "%s", msg);
            s = fsc_error_rank(fs, "rank %d", fr);
        }
    }
    for (int r = 0; r < world; r++) {
        fsc_comm_free(ranks[r].r.comm);
        if (ranks[r].r.dev) fsc_device_free(ranks[r].r.dev);
    }
    if (cl && cl->link_booked && opts->sim_net_seconds && s == FSC_OK)
        for (int r = 0; r < world; r++) opts->sim_net_seconds[r] = cl->link_booked[r];
    if (cl) free(cl->link_booked);
    if (cl && cl->link_free) {
        free(cl->link_free);
        pthread_mutex_destroy(&cl->net_mu);
    }
    sim_cluster_free(cl);
    free(ranks);
    return s;
}

fsc_cluster_opts fsc_cluster_opts_default(void) {
    return (fsc_cluster_opts){ .world = 1, .device = "cpu", .timeout_s = SIM_DEFAULT_TIMEOUT_S };
}
