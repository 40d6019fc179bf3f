/* Private to the library: the communicator object the core builds around an implementation's table
 * (plugin/comm_ops.h), and the wrapper sim/ and the launcher use. Not installed. */
#ifndef FSC_CORE_COMM_IMPL_H
#define FSC_CORE_COMM_IMPL_H
#include "fsc/plugin/comm_ops.h"

struct fsc_comm {
    const fsc_comm_ops *ops;
    void *ctx;
    int rank, size;
    char name[32];
    fsc_comm_stats stats;
    fsc_trace *trace;         /* trace.h: NULL records nothing */
    uint64_t seq;             /* calls made to the implementation (split included): the last one's number */
    uint64_t gid;             /* the group's id, alike on its ranks (flight_impl.h) */
    unsigned splits;          /* splits of this communicator so far */
    struct flight_ring *flight; /* flight.h: this communicator's ring, NULL records nothing */
};

/* Whether c's sends wait for their receive (fsc_comm_ops.sends_wait). */
static inline int fsc_comm_sends_wait(const fsc_comm *c) { return c && c->ops && c->ops->sends_wait; }

/* Whether c's calls can run in the background (fsc_comm_ops.start and wait); without them a started call runs at
 * its start, so a receive posted ahead blocks there until its message comes. */
static inline int fsc_comm_can_post(const fsc_comm *c) { return c && c->ops && c->ops->start && c->ops->wait; }

/* Give up on c's group for good after a failure of this rank (why names it): the group's calls waiting now and
 * every later one fail at once on every rank, naming this rank and why, where the implementation can
 * (fsc_comm_ops.revoke: the simulated communicator); elsewhere nothing happens (their timeout ends them). NULL:
 * nothing. */
void fsc_comm_revoke(fsc_comm *c, const char *why);

/* Wrap an implementation in an fsc_comm (takes ownership of ctx). */
fsc_status fsc_comm_wrap(const fsc_comm_ops *ops, void *ctx, int rank, int size, const char *name,
                         fsc_comm **out);

/* comm.c, shared by the synchronous calls and comm_async.c: the checks of the call k stands for (*bytes:
 * what it counts), k run through the table's synchronous entry, and the accounting of completed call number
 * seq (counts it if s is FSC_OK, else prefixes the message with its number; with a trace, a span from t0, a
 * fsc_trace_now_us() value, to now). */
fsc_status fsc_comm_check_call(const fsc_comm *c, const fsc_comm_call *k, double *bytes);
fsc_status fsc_comm_run_call(fsc_comm *c, const fsc_comm_call *k);
fsc_status fsc_comm_account_call(fsc_comm *c, fsc_comm_op op, double t0, fsc_status s, double bytes, uint64_t seq);

/* The latency steps of one call of op on a ring of n ranks: the simulated network's cost (sim_net.c) and the
 * planner's (lib/plan) both count them so; recv and split are free. */
static inline double fsc_ring_steps(fsc_comm_op op, int n) {
    const double N = n;
    switch (op) {
    case FSC_OP_ALL_REDUCE:
    case FSC_OP_BARRIER: return 2 * (N - 1);
    case FSC_OP_REDUCE_SCATTER:
    case FSC_OP_ALL_GATHER:
    case FSC_OP_ALL_TO_ALL:
    case FSC_OP_BROADCAST: return N - 1;
    case FSC_OP_SEND: return 1;
    default: return 0;
    }
}

/* The links a collective crosses, as the simulated network (sim_net.c) and the planner (lib/plan) cost them: one
 * level (node_ranks 0: every link latency_s and bytes_per_s) or two (world rank w on node w / node_ranks, the
 * node's links node_latency_s and node_bytes_per_s). 0 bandwidth: bytes cost nothing. */
typedef struct {
    double latency_s, bytes_per_s;
    int node_ranks;
    double node_latency_s, node_bytes_per_s;
} fsc_net_links;

/* Seconds of `calls` calls of op moving `bytes` (what comm.c counts: a ring's bytes a rank) on a group of n ranks
 * spanning `nodes` nodes with at most per_node of them on one (nodes 0: one level). A group on one node takes the
 * node's links; one spanning k > 1 nodes pays per call steps(op, per_node) node latencies and steps(op, k)
 * network latencies (a hierarchical ring or tree pays each level's steps once) and its bytes at the network's
 * bandwidth (a ring carries all its bytes over every link: the slowest sets the pace). */
static inline double fsc_net_seconds(const fsc_net_links *l, fsc_comm_op op, int n, int nodes, int per_node,
                                     double calls, double bytes) {
    if (nodes <= 1) {
        const double a = nodes == 1 ? l->node_latency_s : l->latency_s, b = nodes == 1 ? l->node_bytes_per_s
                                                                                      : l->bytes_per_s;
        return calls * fsc_ring_steps(op, n) * a + (b > 0 ? bytes / b : 0);
    }
    const double lat = fsc_ring_steps(op, per_node) * l->node_latency_s + fsc_ring_steps(op, nodes) * l->latency_s;
    return calls * lat + (l->bytes_per_s > 0 ? bytes / l->bytes_per_s : 0);
}

#endif
