/* The communicator: collectives over the ranks of a group.
 * Buffers are device pointers of the rank's device. Every call is collective: all ranks of the group
 * make the same calls in the same order with the same counts and dtype; a mismatch, a failed rank or a
 * timeout fails the call on every rank with a message naming the rank and the operation.
 * Reductions of bf16/f16 accumulate in f32. Sums are taken in rank order (rank 0 + rank 1 + ...) in the
 * simulated communicator, and by default in the MPI and NCCL ones too (reduce_native opts out), so element i of
 * a reduce-scatter equals element i of an all-reduce bit for bit, and processes give the threads' bits. */
#ifndef FSC_COMM_H
#define FSC_COMM_H
#include "export.h"
#include <stddef.h>
#include <stdint.h>
#include "status.h"
#include "dtype.h"
#include "trace.h"

FSC_BEGIN_DECLS

typedef struct fsc_comm fsc_comm;
typedef struct fsc_device fsc_device;

typedef enum { FSC_SUM = 0, FSC_AVG, FSC_MAX } fsc_redop;

typedef enum {
    FSC_OP_ALL_REDUCE = 0,
    FSC_OP_REDUCE_SCATTER,
    FSC_OP_ALL_GATHER,
    FSC_OP_BROADCAST,
    FSC_OP_SEND,
    FSC_OP_RECV,
    FSC_OP_ALL_TO_ALL,
    FSC_OP_BARRIER,
    FSC_OP_COUNT
} fsc_comm_op;

const char *fsc_comm_op_name(fsc_comm_op op); /* "all_reduce", ... */

/* Calls and bytes per operation, bytes as a ring algorithm sends them per rank:
 * all-reduce 2(N-1)/N x size, reduce-scatter and all-gather (N-1)/N x (full) size,
 * broadcast size (non-root ranks receive it once), send/recv the message size, all-to-all (N-1)/N x size. */
typedef struct {
    uint64_t calls[FSC_OP_COUNT];
    double bytes[FSC_OP_COUNT];
} fsc_comm_stats;

/* c's rank and size; NULL: -1 and 0. */
int fsc_comm_rank(const fsc_comm *c);
int fsc_comm_size(const fsc_comm *c);
/* A label for messages and stats ("world", "data", "tensor", ...); "" for NULL. */
const char *fsc_comm_name(const fsc_comm *c);
void fsc_comm_set_name(fsc_comm *c, const char *name);
/* Record every collective of c (its bytes and c's name) into t (trace.h; NULL: stop); communicators split from c
 * afterwards record into the same t. The caller keeps t alive while c records. */
void fsc_comm_set_trace(fsc_comm *c, fsc_trace *t);
fsc_trace *fsc_comm_get_trace(const fsc_comm *c);
const fsc_comm_stats *fsc_comm_get_stats(const fsc_comm *c);
void fsc_comm_reset_stats(fsc_comm *c);
double fsc_comm_total_bytes(const fsc_comm *c);

/* in-place allowed (send == recv) */
fsc_status fsc_comm_all_reduce(fsc_comm *c, const void *send, void *recv, size_t count, fsc_dtype dt,
                               fsc_redop op);
/* send holds size x recvcount elements; rank r receives block r of the reduction */
fsc_status fsc_comm_reduce_scatter(fsc_comm *c, const void *send, void *recv, size_t recvcount,
                                   fsc_dtype dt, fsc_redop op);
/* recv receives size x sendcount elements, block r from rank r */
fsc_status fsc_comm_all_gather(fsc_comm *c, const void *send, void *recv, size_t sendcount, fsc_dtype dt);
fsc_status fsc_comm_broadcast(fsc_comm *c, void *buf, size_t count, fsc_dtype dt, int root);
fsc_status fsc_comm_send(fsc_comm *c, const void *buf, size_t count, fsc_dtype dt, int peer);
fsc_status fsc_comm_recv(fsc_comm *c, void *buf, size_t count, fsc_dtype dt, int peer);
/* send holds size blocks of count elements, block j goes to rank j; recv block j comes from rank j */
fsc_status fsc_comm_all_to_all(fsc_comm *c, const void *send, void *recv, size_t count, fsc_dtype dt);
fsc_status fsc_comm_barrier(fsc_comm *c);
/* Asynchronous collectives: fsc_comm_i<op> starts the operation and returns a request; fsc_comm_wait blocks
 * until it completed and returns its status (once: waiting again is an error), fsc_comm_test says whether
 * it has (it never blocks), fsc_comm_req_free frees a request that was waited for. Operations of one
 * communicator run in issue order, synchronous calls included (NCCL's rule), so every rank must start the
 * same operations on a communicator in the same order; different communicators progress independently.
 * Until the wait returns, the buffers belong to the operation: do not read recv or write send. The results
 * are the bits of the synchronous call. Calls and bytes are counted when the wait succeeds. A communicator
 * whose implementation has no asynchronous path (the table's start is NULL) runs the call at start. Free
 * every request before its communicator. A request freed while in flight is waited for first and the free
 * returns FSC_ERR_STATE saying so (its buffers were in use until then). */
typedef struct fsc_comm_req fsc_comm_req;
fsc_status fsc_comm_iall_reduce(fsc_comm *c, const void *send, void *recv, size_t count, fsc_dtype dt,
                                fsc_redop op, fsc_comm_req **req);
fsc_status fsc_comm_ireduce_scatter(fsc_comm *c, const void *send, void *recv, size_t recvcount, fsc_dtype dt,
                                    fsc_redop op, fsc_comm_req **req);
fsc_status fsc_comm_iall_gather(fsc_comm *c, const void *send, void *recv, size_t sendcount, fsc_dtype dt,
                                fsc_comm_req **req);
fsc_status fsc_comm_ibroadcast(fsc_comm *c, void *buf, size_t count, fsc_dtype dt, int root, fsc_comm_req **req);
fsc_status fsc_comm_isend(fsc_comm *c, const void *buf, size_t count, fsc_dtype dt, int peer, fsc_comm_req **req);
fsc_status fsc_comm_irecv(fsc_comm *c, void *buf, size_t count, fsc_dtype dt, int peer, fsc_comm_req **req);
fsc_status fsc_comm_iall_to_all(fsc_comm *c, const void *send, void *recv, size_t count, fsc_dtype dt,
                                fsc_comm_req **req);
fsc_status fsc_comm_wait(fsc_comm_req *req);
fsc_status fsc_comm_test(fsc_comm_req *req, int *done);
fsc_status fsc_comm_req_free(fsc_comm_req *req);

/* Collective agreement: every rank passes its own status; all return FSC_OK only if every rank passed
 * FSC_OK, otherwise every rank returns the status and message of the lowest failing rank (other ranks see
 * "rank R: <message>"), so no rank goes on alone after a failure. dev stages the exchange. */
fsc_status fsc_comm_agree(fsc_comm *c, fsc_device *dev, fsc_status mine);
/* All-reduce one float held in host memory (staged through dev). */
fsc_status fsc_comm_all_reduce_host(fsc_comm *c, fsc_device *dev, float *value, fsc_redop op);
/* Collective over c: ranks with the same color form a new group, ordered by (key, rank). */
fsc_status fsc_comm_split(fsc_comm *c, int color, int key, fsc_comm **out);
void fsc_comm_free(fsc_comm *c);

FSC_END_DECLS

#endif
