/* Private to the MPI plug-in: its asynchronous calls (mpi_async.c) and the lock that keeps one thread at a
 * time inside MPI (MPI_THREAD_SERIALIZED), shared with mpi_comm.c. */
#ifndef FSC_MPI_ASYNC_H
#define FSC_MPI_ASYNC_H
#include "fsc/plugin/comm_ops.h"

/* One thread at a time in MPI and in the plug-in's state: every table entry holds it; waits release it
 * between polls so that another thread (a progress thread, or the rank's) can post meanwhile. */
void mp_lock(void);
void mp_unlock(void);

/* mpi_comm.c: the message of s to the caller's thread (the core's fsc_error), and this thread's last one. */
fsc_status mp_host_error(fsc_status s, const char *msg);
const char *mp_last_msg(void);

/* Runs call k on ctx with the table's synchronous code (taking the lock); set by mpi_comm.c. */
typedef fsc_status (*mp_run_fn)(void *ctx, const fsc_comm_call *k);

typedef struct fsc_callq mp_async; /* the core's queue of started calls (lib/core/comm_queue.h) */
/* start/wait/test of fsc_comm_ops for a ctx whose progress state lives at *slot (NULL until the first start).
 * Calls run on a progress thread per communicator, in issue order; where MPI gives less than
 * MPI_THREAD_SERIALIZED a started call runs at once on the caller's thread. */
fsc_status mp_async_start(mp_async **slot, void *ctx, mp_run_fn run, const fsc_comm_call *k, void **req);
fsc_status mp_async_wait(mp_async *a, void *req);
fsc_status mp_async_test(mp_async *a, void *req, int *done);
/* Wait until nothing started is pending (before a synchronous call; never with the lock held). */
void mp_async_drain(mp_async *a);
/* Stop the thread after what is queued (before the ctx is freed; never with the lock held). */
void mp_async_free(mp_async *a);

#endif
