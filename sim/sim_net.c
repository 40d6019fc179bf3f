/* The simulated network (sim.h; docs/overlap.md): a collective takes the time a ring algorithm needs on
 * links of latency a (seconds) and bandwidth b (bytes/s), every link alike. With N ranks in the group and
 * B the bytes comm.c counts for the call (what a ring sends per rank):
 *   all-reduce                                     2(N-1) a + B / b    (B = 2(N-1)/N x size)
 *   reduce-scatter, all-gather, all-to-all          (N-1) a + B / b    (B = (N-1)/N x full size)
 *   broadcast (pipelined ring)                      (N-1) a + B / b    (B = size)
 *   send (the message, paid by the sender)               a + B / b
 *   recv, barrier (a barrier is latency only)       0,  2(N-1) a
 * A group of one rank costs nothing. A collective's time starts when every rank has arrived (the commit),
 * so every rank of the group leaves it at the same moment; calls on one handle run one after another, as
 * on one NCCL stream, while calls on different groups overlap. Without a network (the default) no call
 * costs time. */
#include <errno.h>
#include "sim.h"

double sim_net_cost(const sim_cluster *cl, const fsc_comm_call *k, int n) {
    if (n <= 1 || (cl->net_latency_s <= 0 && cl->net_bytes_per_s <= 0)) return 0;
    const double a = cl->net_latency_s, N = n;
    const double size = (double)k->count * (double)fsc_dtype_size(k->dt);
    double steps = 0, bytes = 0;
    switch (k->op) {
    case FSC_OP_ALL_REDUCE: steps = 2 * (N - 1); bytes = 2 * (N - 1) / N * size; break;
    case FSC_OP_REDUCE_SCATTER:
    case FSC_OP_ALL_GATHER:
    case FSC_OP_ALL_TO_ALL: steps = N - 1; bytes = (N - 1) * size; break; /* (N-1)/N x (N x count) */
    case FSC_OP_BROADCAST: steps = N - 1; bytes = size; break;
    case FSC_OP_SEND: steps = 1; bytes = size; break;
    case FSC_OP_BARRIER: steps = 2 * (N - 1); break;
    default: break; /* recv waits for the message; split is free */
    }
    return steps * a + (cl->net_bytes_per_s > 0 ? bytes / cl->net_bytes_per_s : 0);
}

void sim_net_sleep(const struct timespec *from, double seconds) {
    if (seconds <= 0) return;
    struct timespec t;
    if (from) t = *from;
    else clock_gettime(CLOCK_MONOTONIC, &t);
    long long whole = (long long)seconds;
    t.tv_sec += (time_t)whole;
    t.tv_nsec += (long)((seconds - (double)whole) * 1e9);
    while (t.tv_nsec >= 1000000000L) {
        t.tv_sec += 1;
        t.tv_nsec -= 1000000000L;
    }
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL) == EINTR) {
    }
}
