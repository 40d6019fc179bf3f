/* The plug-in ABI, communicator half: what a communicator implements (sim/, linked in; NCCL in the cuda
 * plug-in). Installed as <fsc/plugin/comm_ops.h> for authors of backends; not part of the API a training
 * program uses (fsc.h does not include it). Its version is FSC_COMM_ABI_VERSION: the core passes it to
 * fsc_nccl_comm_open, and a plug-in built for another version refuses.
 * The core wraps every call: it validates arguments, counts calls and bytes, then calls the table. */
#ifndef FSC_PLUGIN_COMM_OPS_H
#define FSC_PLUGIN_COMM_OPS_H
#include "../export.h"
#include "../comm.h"

FSC_BEGIN_DECLS

#define FSC_COMM_ABI_VERSION 5 /* 2: fsc_nccl_comm_open takes native; fsc_mpi_comm_open; 3: start/wait/test;
                                 * 4: sends_wait; 5: revoke */

/* One call of a collective or point-to-point operation, as the core passes it to start (validated). */
typedef struct {
    fsc_comm_op op;   /* not FSC_OP_BARRIER */
    const void *send; /* broadcast and send: the buffer */
    void *recv;       /* broadcast: the buffer too; recv: the buffer */
    size_t count;     /* as the synchronous call takes it (recvcount, sendcount, ...) */
    fsc_dtype dt;
    fsc_redop redop;  /* reductions */
    int peer;         /* broadcast: the root; send and recv: the peer */
} fsc_comm_call;

typedef struct fsc_comm_ops {
    int abi_version;
    const char *name;
    fsc_status (*all_reduce)(void *ctx, const void *send, void *recv, size_t count, fsc_dtype dt, fsc_redop op);
    fsc_status (*reduce_scatter)(void *ctx, const void *send, void *recv, size_t recvcount, fsc_dtype dt,
                                 fsc_redop op);
    fsc_status (*all_gather)(void *ctx, const void *send, void *recv, size_t sendcount, fsc_dtype dt);
    fsc_status (*broadcast)(void *ctx, void *buf, size_t count, fsc_dtype dt, int root);
    fsc_status (*send)(void *ctx, const void *buf, size_t count, fsc_dtype dt, int peer);
    fsc_status (*recv)(void *ctx, void *buf, size_t count, fsc_dtype dt, int peer);
    fsc_status (*all_to_all)(void *ctx, const void *send, void *recv, size_t count, fsc_dtype dt);
    fsc_status (*barrier)(void *ctx);
    /* returns the new group's ctx, rank and size */
    fsc_status (*split)(void *ctx, int color, int key, void **new_ctx, int *new_rank, int *new_size);
    void (*destroy)(void *ctx);
    /* Asynchronous operations (optional: start NULL makes the core run the synchronous entry at start).
     * start queues the call behind every earlier call of ctx (synchronous ones included: they wait for
     * what is queued) and returns a request; wait blocks until it completed, frees it and returns its
     * status, with the message in the calling thread; test sets *done without blocking (optional; without it
     * pipelines on a communicator whose sends wait never see a send done before its wait, so their send
     * buffers grow to every message of a step: docs/pipeline.md). Without start and wait a pipeline posts no
     * receive ahead (it would block where posted): with buffered sends one chunk per rank runs the synchronous
     * program whatever prefetch says; sends_wait 1, or several chunks per rank, are refused. */
    fsc_status (*start)(void *ctx, const fsc_comm_call *call, void **req);
    fsc_status (*wait)(void *ctx, void *req);
    fsc_status (*test)(void *ctx, void *req, int *done);
    /* 1: a send returns (a started one completes) only once the peer's matching receive has begun, as NCCL's
     * (ncclSend); 0: sends are buffered (the simulator's by default, the MPI plug-in's). Pipelines then send
     * their stage boundaries asynchronously, each link and direction on a communicator of its own, whatever
     * the prefetch option (docs/pipeline.md). */
    int sends_wait;
    /* Optional: this rank gives up on the group for good (why: its own failure, which the message names). Every
     * call of the group's ranks that waits now, this rank's started ones included, and every later one fails at
     * once, naming this rank and why (MPI's MPIX_Comm_revoke). NULL: nothing happens; ranks waiting for a message
     * or call this rank will never make wait for their timeout. The simulated and the MPI communicators implement it
     * (MPI's with a notice its waits poll for); NCCL's does not. */
    void (*revoke)(void *ctx, const char *why);
} fsc_comm_ops;

/* Entry points the cuda plug-in exports for its NCCL communicator (found with dlsym by the launcher):
 * "fsc_nccl_get_unique_id" fills the opaque id (bytes = 128) on the rank that creates it;
 * "fsc_nccl_comm_open" joins rank of world with that id on the plug-in device whose ctx is device_ctx
 * (collectives run on that device's current stream); a collective or barrier stuck longer than
 * timeout_s fails instead of hanging. native 0: reductions in rank order (all-to-all of blocks, then a local
 * sum: the simulator's bits); 1: ncclAllReduce / ncclReduceScatter (NCCL's ring/tree order). */
typedef fsc_status (*fsc_nccl_get_unique_id_fn)(void *id, size_t bytes);
typedef fsc_status (*fsc_nccl_comm_open_fn)(int abi_version, const void *id, size_t bytes, int rank, int world,
                                            void *device_ctx, double timeout_s, int native,
                                            const fsc_comm_ops **ops, void **ctx);

/* The entry point of the MPI plug-in libfsc_mpi.so (backends/mpi, found with dlsym by the launcher for the
 * cpu device): "fsc_mpi_comm_open" initializes MPI when nobody has, checks that MPI's world is the
 * launcher's (rank of world), and opens the world communicator on host memory. error is the core's
 * fsc_error (the plug-in's messages reach the caller's thread). A call stuck longer than timeout_s fails
 * naming the rank it waits for. native 0: reductions in rank order (the simulator's bits); 1: MPI's own
 * MPI_Iallreduce / MPI_Ireduce_scatter_block. */
typedef fsc_status (*fsc_mpi_error_fn)(fsc_status s, const char *fmt, ...);
typedef fsc_status (*fsc_mpi_comm_open_fn)(int abi_version, fsc_mpi_error_fn error, int rank, int world,
                                           double timeout_s, int native, const fsc_comm_ops **ops, void **ctx);

FSC_END_DECLS

#endif
