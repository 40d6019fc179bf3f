/* The simulated cluster's private interface: ranks are threads of one process and a communicator is a
 * group object in shared memory that all its ranks point to. Used by sim/cluster.c (fsc_cluster_run) and
 * sim/sim_comm.c (the fsc_comm_ops table); not a public header.
 *
 * A collective is two rendezvous on the group. Each rank posts what it called (a sim_slot) and waits until
 * every rank of the group has posted (the "arrive" rendezvous); the rank that completes it checks that all
 * ranks called the same thing and, for split, builds the child groups. Then every rank computes its own
 * output reading the other ranks' buffers directly, and waits at the "depart" rendezvous so no rank
 * returns (and frees or rewrites its buffers) while another may still read them.
 *
 * No hangs: while waiting to arrive, a rank gives up when the cluster has failed (a rank's function
 * returned an error), when the group has failed (a timeout), when a rank it waits for has returned from
 * its function, or when the cluster's timeout passes. Once every rank has arrived the collective is
 * committed: every rank computes and departs, which takes bounded time, so departing never gives up.
 *
 * Buffers are read and written with memcpy, so the collective itself always runs on host memory. On the cpu
 * device that is the callers' buffers (zero copy). On any other device (the cuda plug-in: N ranks as threads
 * sharing a GPU) every rank stages through host memory with its own device's copies (sim_stage.c): before
 * arriving it downloads what it sends into a host staging buffer of its handle, the collective runs on the
 * staging buffers exactly as on the direct path (same rank-order reductions, so the same bits), and after
 * departing it uploads its result. Send downloads into the queued message and recv uploads from it. A group of
 * one stages nothing: its collectives are the identity, a copy on the device (sim_comm.c, alone_call).
 * fsc_cluster_opts.stage_through_host forces staging on the cpu device too, which is how this path is
 * tested on machines without a GPU. Staging assumes what both backends do: a download returns with the data
 * on the host, and after an upload returns its host source may be reused. Staging buffers are plain host
 * malloc, outside the device's tagged ledger; each handle (world and every split group) keeps its own,
 * grown to the largest call it has staged, until the communicator is freed. */
#ifndef FSC_SIM_H
#define FSC_SIM_H
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include "core/comm_impl.h"
#include "core/kernels.h" /* the counting device's threshold */
#include "fsc/device.h"

#define SIM_MSG_CAP 400             /* bytes of a stored failure message */
#define SIM_OP_SPLIT FSC_OP_COUNT   /* split's rendezvous, an internal op id next to fsc_comm_op */

typedef struct sim_cluster sim_cluster;
typedef struct sim_group sim_group;
typedef struct sim_handle sim_handle;

/* What a rank posts when it enters a collective. */
typedef struct {
    int op;               /* fsc_comm_op or SIM_OP_SPLIT */
    size_t count;         /* elements as the caller passed them (recvcount, sendcount, ...) */
    fsc_dtype dt;
    fsc_redop redop;      /* reductions only */
    int root;             /* broadcast only */
    int color, key;       /* split only */
    const void *send;
    void *recv;
    int posted;           /* 1 while the rank waits to arrive */
    sim_handle *child;    /* split: this rank's handle on its new group, set by the completing rank */
    const char *stage_err; /* non-NULL: this rank could not stage its buffers (why); the call fails everywhere */
    double t_arrive;      /* virtual clock: when the rank arrived (its handle's t_arrive) */
} sim_slot;

/* A buffered point-to-point message, queued at its destination. With sync sends (cl->sync_sends) its sender waits
 * for it to be taken, and (but where the sender stages device memory) the message holds no copy: the receiver reads
 * the sender's buffer (sbuf) when it takes the message, as NCCL reads it only once the receive runs, so a buffer
 * changed before its send completed reaches the receiver changed. The receiver then marks it taken instead of
 * freeing it, and the sender frees it; a sender that gives up while a receiver is reading its buffer waits for the
 * read to end. */
typedef struct sim_msg {
    struct sim_msg *next;
    int src;
    size_t count;
    fsc_dtype dt;
    double t_avail;       /* virtual clock: when the message is at its destination (the send's modelled end) */
    int waited;           /* sync sends: the sender waits for taken */
    int taken;            /* sync sends, under the group's mu: the receiver has copied it */
    const void *sbuf;     /* sync sends without staging: the sender's buffer, read by the receiver (else NULL) */
    double t_taken;       /* sync sends, virtual clock: when the receive that took it started */
    unsigned char data[];
} sim_msg;

struct sim_group {
    sim_cluster *cl;
    int size;
    int *world_rank;          /* (size) world rank of each group rank */
    pthread_mutex_t mu;       /* guards everything below except refs and next */
    pthread_cond_t cv;
    int arrived, departed;    /* ranks at each rendezvous */
    unsigned arrive_gen, depart_gen;
    int stood;                /* ranks stood in for in the last committed collective (they do not depart) */
    sim_slot *slots;          /* (size) */
    fsc_status verdict;       /* of the last completed arrive: FSC_OK or why the collective fails */
    char verdict_msg[SIM_MSG_CAP];
    fsc_status fail;          /* sticky: after a timeout every call on the group fails */
    char fail_msg[SIM_MSG_CAP];
    int revoker;              /* the world rank whose revoke (sim_comm.c) failed the group, -1: none (or it had
                               * failed before) */
    double t_done;            /* network: when the last committed collective ends (sim_net.c) */
    int nodes, per_node;      /* two levels: the nodes the group spans, the most of its ranks on one (sim_net_place) */
    sim_msg **inbox;          /* (size) messages queued for each rank, oldest first */
    atomic_int refs;          /* handles pointing here */
    sim_group *next;          /* cluster registry, guarded by cl->mu */
};

/* A rank's view of a group: the ctx of its fsc_comm. */
struct sim_handle {
    sim_group *g;
    int rank;                 /* rank in g */
    fsc_device *dev;          /* the rank's device (NULL: buffers are host memory) */
    int stage;                /* stage buffers through host memory with dev's copies (sim_stage.c) */
    int dry;                  /* dev is the counting device: calls above FSC_COUNT_REAL_MAX bytes are skipped */
    int nodata;               /* the call running moves no data (a skipped call timed on a virtual clock) */
    unsigned char *buf;       /* (cap) host staging buffer, read by the group's ranks between arrive and depart */
    size_t cap;
    char stage_err[SIM_MSG_CAP]; /* why staging failed, for the slot's stage_err */
    struct fsc_callq *async;  /* the handle's progress thread (sim_async.c), NULL until the first start */
    double t_done;            /* network or virtual clock: when this rank's last committed collective ends */
    /* the virtual clock (cl->virt): when the running call arrived (set before it runs) and when the handle's
     * last call ended (its calls run one after another, as on one stream) */
    double t_arrive, t_last;
    struct sim_vreq *vreqs;   /* the virtual clock: the handle's started calls not yet waited for (sim_async.c) */
    pthread_mutex_t vmu;      /* guards vreqs (the rank's thread and the progress thread) */
    int vmu_init;
    int queued;               /* the running call was started asynchronously (its progress thread runs it): it may
                               * have been issued before its group failed, so sim_check_failed does not say after */
};

struct sim_cluster {
    int world;
    double timeout_s;
    pthread_mutex_t mu;       /* guards the registry; never taken while holding a group's mu */
    sim_group *groups;
    atomic_int *exited;       /* (world) 1 once the rank's function has returned */
    atomic_int fail_claimed;  /* the first failing rank claims the fields below, then sets failed */
    atomic_int failed;
    int fail_rank;
    fsc_status fail_status;
    char fail_msg[SIM_MSG_CAP];
    atomic_int *revoked_by;   /* (world) per rank, the revoker (g->revoker) of the group its latest call failed on
                               * (sim_check_failed), -1: none; such a call fails with FSC_ERR_COMM. A rank failed by
                               * another's revoke may return first: fsc_cluster_run blames the revoker */
    sim_group *world_group;
    /* the network (sim_net.c): every link's latency (s) and bandwidth (bytes/s); 0: collectives cost no time */
    double net_latency_s, net_bytes_per_s;
    int node_ranks;           /* two levels (fsc_cluster_opts.sim_node_ranks): ranks a node, 0: one level */
    double node_latency_s, node_bytes_per_s; /* the links within a node */
    pthread_mutex_t net_mu;   /* guards link_free; taken under a group's mu, never the other way */
    double *link_free;        /* (world) when each rank's link is free again (sim_now seconds), or NULL */
    double *link_booked;      /* (world) the seconds booked on each rank's link so far (under net_mu), with link_free */
    int sync_sends;           /* fsc_cluster_opts.sim_sync_sends: a send waits for its receive (sim_send) */
    int virt;                 /* 1: every rank thread reads a virtual clock (fsc_cluster_opts.sim_clock); time is
                               * booked on it: a collective starts when its last rank arrives (sim_net.c) */
    const int *stand_in;      /* fsc_cluster_opts.stand_in: (world) or NULL; read for ranks that have exited only */
};

/* sim_group.c: the cluster, groups and the rendezvous. */
fsc_status sim_cluster_create(int world, double timeout_s, sim_cluster **out);
/* Frees the cluster and any group still registered (call after every rank has returned). */
void sim_cluster_free(sim_cluster *cl);
/* Rank `rank` failed with s and msg: every rank waiting in, or later entering, a collective fails.
 * The first call wins; later calls are ignored. */
void sim_cluster_fail(sim_cluster *cl, int rank, fsc_status s, const char *msg);
/* Rank `rank` returned from its function: ranks waiting for it give up. */
void sim_cluster_exit(sim_cluster *cl, int rank);
/* The first failure: its rank (and status and message), or -1 if none. */
int sim_cluster_first_failure(sim_cluster *cl, fsc_status *s, const char **msg);

sim_group *sim_group_new(sim_cluster *cl, int size, const int *world_rank);
void sim_group_register(sim_group *g);
void sim_group_unref(sim_group *g);
/* "rank 2" or "rank 2 (world rank 5)" */
void sim_rank_label(const sim_group *g, int rank, char *buf, size_t cap);
/* "all_reduce(10 x f32, sum)" */
void sim_slot_describe(const sim_slot *s, char *buf, size_t cap);

/* Post *mine and wait for every rank of the group. FSC_OK: committed, compute then call sim_depart. */
fsc_status sim_arrive(sim_handle *h, const sim_slot *mine);
void sim_depart(sim_handle *h);
/* Under g->mu: why a call on this group must fail now (cluster or group failed), else FSC_OK. A failure of the
 * group is recorded for the calling world rank: cl->revoked_by[rank] = g->revoker. */
fsc_status sim_check_failed(sim_handle *h, const char *what, int entering);
/* Wait on g->cv until woken or deadline; returns 1 if the deadline passed. Under g->mu. */
int sim_wait(sim_group *g, const struct timespec *deadline);
void sim_deadline(const sim_cluster *cl, struct timespec *out);
/* Under g->mu: mark the group failed (sticky) and wake its ranks. */
void sim_group_fail(sim_group *g, fsc_status s, const char *msg);
/* Under g->mu: the group rank standing in for group rank j (fsc_cluster_opts.stand_in: j has returned from its
 * function and its entry names another world rank), -2 when that rank is not in the group, -1 when j is not
 * stood in for. */
int sim_stand_in(const sim_group *g, int j);

/* sim_comm.c: the communicator. */
extern const fsc_comm_ops sim_comm_ops, sim_comm_ops_sync; /* the second: sim_sync_sends (sends_wait 1) */
/* The world communicator of `rank` on dev (NULL: buffers are host memory). Buffers are staged through host
 * memory when dev is not the cpu device, or when force_stage is set (dev must then be given). */
fsc_status sim_comm_open(sim_cluster *cl, int rank, fsc_device *dev, int force_stage, fsc_comm **out);

/* sim_comm.c: run one call with the synchronous implementation on the calling thread, then let the
 * network's time pass (sim_net.c); the caller has drained the handle's queue or is its progress thread. */
fsc_status sim_run_call(sim_handle *h, const fsc_comm_call *k);

/* sim_async.c: a progress thread per handle, started by the first asynchronous call, runs the handle's
 * calls in issue order, so a rank computes while its collectives run. Synchronous calls first wait until
 * the queue is empty (sim_async_drain) and then run on the rank's thread. */
fsc_status sim_async_start(void *ctx, const fsc_comm_call *k, void **req);
fsc_status sim_async_wait(void *ctx, void *req);
fsc_status sim_async_test(void *ctx, void *req, int *done);
void sim_async_drain(sim_handle *h);
/* The virtual clock: the time the handle's next synchronous call arrives, after its queue drained. */
double sim_async_arrival(sim_handle *h);
/* Stop the thread (it finishes what is queued first); before the handle is freed. */
void sim_async_free(sim_handle *h);

/* sim_net.c: the network's cost model. Seconds call k takes on group g (0 without a network). */
double sim_net_cost(const sim_group *g, const fsc_comm_call *k);
/* With two levels of links: set g->nodes and g->per_node from its world ranks; 0, or -1 out of memory. */
int sim_net_place(sim_group *g);
/* Whether the cluster has a network (cl->link_free is set). */
int sim_net_on(const sim_cluster *cl);
/* The monotonic clock in seconds. */
double sim_now(void);
/* Book `cost` seconds on the links of the n world ranks: from when all of them are free (and not before
 * ready: now on the monotonic clock, or the last arrival on the virtual clock) on; returns when it ends. */
double sim_net_reserve(sim_cluster *cl, const int *world_rank, int n, double cost, double ready);
/* Count cost seconds on world rank w's link without booking it (a call the counting device skips). */
void sim_net_count(sim_cluster *cl, int w, double cost);
/* Under g->mu, by the rank completing an arrive: book the committed collective's time (g->t_done): with the
 * virtual clock from the last rank's arrival (slots' t_arrive), even without a network. */
void sim_net_commit(sim_group *g);

/* sim_stage.c: staging through host memory (called only when h->stage is set). A rank whose staging fails
 * before the rendezvous still arrives, with its slot's stage_err set, so the collective fails on every rank
 * at once (FSC_ERR_COMM naming it) and the group keeps working; a failed upload after departing fails only
 * that rank's call; a failed send queues nothing. */
/* Make h->buf hold at least bytes (never NULL afterwards). */
fsc_status sim_stage_reserve(sim_handle *h, const char *what, size_t bytes);
/* host_dst := bytes of device memory at src, with h->dev. */
fsc_status sim_stage_in(sim_handle *h, const char *what, void *host_dst, const void *src, size_t bytes);
/* dst (device memory) := bytes at host_src, with h->dev. */
fsc_status sim_stage_out(sim_handle *h, const char *what, void *dst, const void *host_src, size_t bytes);
/* sim/cluster.c: the GPU ordinal of simulated rank `rank` on a non-cpu device: 0 (all ranks share one GPU),
 * or rank % n when the environment sets FSC_SIM_GPUS=n (n >= 1); another value of it is an error. */
fsc_status sim_gpu_ordinal(int rank, int *ordinal);

#endif
