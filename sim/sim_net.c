/* The simulated network (sim.h; docs/overlap.md): a collective takes the time a ring algorithm needs on
 * links of latency a (seconds) and bandwidth b (bytes/s), every link alike. With N ranks in the group and
 * B the bytes comm.c counts for the call (what a ring sends per rank):
 *   all-reduce                                     2(N-1) a + B / b    (B = 2(N-1)/N x size)
 *   reduce-scatter, all-gather, all-to-all          (N-1) a + B / b    (B = (N-1)/N x full size)
 *   broadcast (pipelined ring)                      (N-1) a + B / b    (B = size)
 *   send (the message, paid by the sender)               a + B / b
 *   recv, barrier (a barrier is latency only)       0,  2(N-1) a
 * A group of one rank costs nothing. Each rank has one link, shared by all its groups: a collective starts
 * when every rank of the group has arrived and all their links are free, and books them until it ends, so
 * every rank of the group leaves it at the same moment and a rank's communication never takes less than
 * the sum of its calls' times, whichever groups they run on. Calls on one handle run one after another, as
 * on one NCCL stream; the rank's computation goes on meanwhile (asynchronous calls). Without a network
 * (the default) no call costs time. With two levels (fsc_cluster_opts.sim_node_ranks: nodes of that many ranks)
 * a group on one node takes the node's links; one spanning k > 1 nodes with at most g ranks on one pays per call
 * steps(g) node latencies and steps(k) network latencies (the steps above: 2(N-1), N-1, 1) and B at the network's
 * bandwidth (comm_impl.h's fsc_net_seconds, the planner's formula too). */
#include <stdlib.h>
#include "sim.h"
#include "core/clock_impl.h"

double sim_net_cost(const sim_group *g, const fsc_comm_call *k) {
    const sim_cluster *cl = g->cl;
    const int n = g->size;
    if (n <= 1 || !sim_net_on(cl)) return 0;
    const double N = n;
    const double size = (double)k->count * (double)fsc_dtype_size(k->dt);
    double bytes = 0;
    switch (k->op) {
    case FSC_OP_ALL_REDUCE: bytes = 2 * (N - 1) / N * size; break;
    case FSC_OP_REDUCE_SCATTER:
    case FSC_OP_ALL_GATHER:
    case FSC_OP_ALL_TO_ALL: bytes = (N - 1) * size; break; /* (N-1)/N x (N x count) */
    case FSC_OP_BROADCAST:
    case FSC_OP_SEND: bytes = size; break;
    default: break; /* a barrier moves no data; recv waits for the message; split is free */
    }
    const fsc_net_links l = {cl->net_latency_s, cl->net_bytes_per_s, cl->node_ranks, cl->node_latency_s,
                             cl->node_bytes_per_s};
    return fsc_net_seconds(&l, k->op, n, cl->node_ranks > 0 ? g->nodes : 0, g->per_node, 1, bytes);
}

static int int_cmp(const void *a, const void *b) {
    const int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

int sim_net_place(sim_group *g) {
    const int nr = g->cl->node_ranks;
    g->nodes = g->per_node = 0;
    if (nr <= 0) return 0;
    int *node = malloc((size_t)g->size * sizeof *node);
    if (!node) return -1;
    for (int j = 0; j < g->size; j++) node[j] = g->world_rank[j] / nr;
    qsort(node, (size_t)g->size, sizeof *node, int_cmp);
    for (int a = 0, b; a < g->size; a = b) { /* each node's run of members */
        for (b = a; b < g->size && node[b] == node[a]; b++) {}
        g->nodes++;
        if (b - a > g->per_node) g->per_node = b - a;
    }
    free(node);
    return 0;
}

int sim_net_on(const sim_cluster *cl) { return cl->link_free != NULL; }

double sim_now(void) { return fsc_clock_wall(); }

double sim_net_reserve(sim_cluster *cl, const int *world_rank, int n, double cost, double ready) {
    pthread_mutex_lock(&cl->net_mu);
    double start = ready;
    for (int j = 0; j < n; j++)
        if (cl->link_free[world_rank[j]] > start) start = cl->link_free[world_rank[j]];
    double end = start + cost;
    for (int j = 0; j < n; j++) cl->link_free[world_rank[j]] = end, cl->link_booked[world_rank[j]] += cost;
    pthread_mutex_unlock(&cl->net_mu);
    return end;
}

void sim_net_count(sim_cluster *cl, int w, double cost) {
    pthread_mutex_lock(&cl->net_mu);
    cl->link_booked[w] += cost;
    pthread_mutex_unlock(&cl->net_mu);
}

void sim_net_commit(sim_group *g) {
    const sim_slot *s = &g->slots[0];
    fsc_comm_call k = {.op = (fsc_comm_op)s->op, .count = s->count, .dt = s->dt};
    double cost = s->op == SIM_OP_SPLIT || !sim_net_on(g->cl) ? 0 : sim_net_cost(g, &k);
    double ready = sim_now();
    if (g->cl->virt) { /* the last rank's arrival on the ranks' virtual clocks */
        ready = g->slots[0].t_arrive;
        for (int j = 1; j < g->size; j++)
            if (g->slots[j].t_arrive > ready) ready = g->slots[j].t_arrive;
    }
    g->t_done = cost > 0 ? sim_net_reserve(g->cl, g->world_rank, g->size, cost, ready) : ready;
}

