/* Private: the queue of started communicator calls that a backend's asynchronous table entries share
 * (fsc_comm_ops start/wait/test): the simulator's (sim/sim_async.c) and the MPI plug-in's
 * (backends/mpi/mpi_async.c, which compiles comm_queue.c into itself). One progress thread per queue runs the
 * queued calls in issue order with the backend's synchronous code; a request is allocated by push and freed
 * by wait; a failed call's status and message (thread-local on the progress thread) travel back in it.
 * The queue calls nothing of the library (the MPI plug-in links none of it): it returns FSC_ERR_NOMEM
 * without a message, and the backend words it. */
#ifndef FSC_CORE_COMM_QUEUE_H
#define FSC_CORE_COMM_QUEUE_H
#include <stddef.h>
#include "fsc/plugin/comm_ops.h"

#define FSC_CALLQ_MSG 1000 /* bytes of a failed call's message that travel back */

typedef struct fsc_callq fsc_callq;
/* Runs call k on ctx with the backend's synchronous code; on failure msg() is this thread's message. */
typedef fsc_status (*fsc_callq_run_fn)(void *ctx, const fsc_comm_call *k);
typedef const char *(*fsc_callq_msg_fn)(void);

/* A queue and its progress thread for ctx. FSC_ERR_NOMEM when either cannot be made (*out NULL). */
fsc_status fsc_callq_open(void *ctx, fsc_callq_run_fn run, fsc_callq_msg_fn msg, fsc_callq **out);
/* Queue a copy of k; *req is the request to wait on. FSC_ERR_NOMEM (and *req NULL) when out of memory. */
fsc_status fsc_callq_push(fsc_callq *q, const fsc_comm_call *k, void **req);
/* Run k now on the calling thread and make a request already done (for waits with q NULL: a backend whose
 * calls cannot leave the caller's thread). FSC_ERR_NOMEM (nothing run) when out of memory. */
fsc_status fsc_callq_run_here(void *ctx, fsc_callq_run_fn run, fsc_callq_msg_fn msg, const fsc_comm_call *k,
                              void **req);
/* Wait for req (of q, or made by run_here with q NULL), free it, return its status; a failure's message is
 * copied into msg (cap bytes). */
fsc_status fsc_callq_wait(fsc_callq *q, void *req, char *msg, size_t cap);
/* Whether req has finished (1) or not yet (0); it stays to be waited on. */
int fsc_callq_test(fsc_callq *q, void *req);
/* Wait until nothing pushed is pending (q may be NULL). */
void fsc_callq_drain(fsc_callq *q);
/* Stop the progress thread after what is queued and free the queue (q may be NULL). */
void fsc_callq_free(fsc_callq *q);

#endif
