/* The MPI plug-in's asynchronous calls (mpi_async.h): a progress thread per communicator runs the started
 * calls in issue order with the plug-in's synchronous code (nonblocking MPI_Isend/MPI_Irecv/MPI_Iallreduce
 * polled to completion), while the rank's thread computes. MPI is entered by one thread at a time (the
 * plug-in lock, MPI_THREAD_SERIALIZED); a wait releases the lock between polls, so the rank's own calls and
 * the progress threads of other communicators interleave without deadlock. Every rank starts the same
 * calls in the same order, so MPI matches their messages in order. A job's status and message (thread-local
 * on the progress thread) travel back in the job. The queue and its thread are the core's (lib/core/comm_queue.c,
 * compiled into the plug-in, shared with the simulator); this file picks where a call runs and words errors. */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mpi_async.h"
#include "core/comm_queue.h"

static pthread_mutex_t mpi_mu = PTHREAD_MUTEX_INITIALIZER;

void mp_lock(void) { pthread_mutex_lock(&mpi_mu); }
void mp_unlock(void) { pthread_mutex_unlock(&mpi_mu); }

fsc_status mp_async_start(mp_async **slot, void *ctx, mp_run_fn run, const fsc_comm_call *k, void **req) {
    *req = NULL;
    int level = MPI_THREAD_SINGLE;
    mp_lock();
    MPI_Query_thread(&level);
    mp_unlock();
    if (level < MPI_THREAD_SERIALIZED) { /* no other thread may enter MPI: run it now */
        if (fsc_callq_run_here(ctx, run, mp_last_msg, k, req) != FSC_OK)
            return mp_host_error(FSC_ERR_NOMEM, "mpi: out of memory for an asynchronous call");
        return FSC_OK;
    }
    if (!*slot && fsc_callq_open(ctx, run, mp_last_msg, slot) != FSC_OK)
        return mp_host_error(FSC_ERR_NOMEM, "mpi: the communicator's progress thread could not be started");
    if (fsc_callq_push(*slot, k, req) != FSC_OK)
        return mp_host_error(FSC_ERR_NOMEM, "mpi: out of memory for an asynchronous call");
    return FSC_OK;
}

fsc_status mp_async_wait(mp_async *a, void *req) {
    char msg[FSC_CALLQ_MSG];
    fsc_status s = fsc_callq_wait(a, req, msg, sizeof msg);
    if (s != FSC_OK) mp_host_error(s, msg);
    return s;
}

fsc_status mp_async_test(mp_async *a, void *req, int *done) {
    *done = fsc_callq_test(a, req);
    return FSC_OK;
}

void mp_async_drain(mp_async *a) { fsc_callq_drain(a); }

void mp_async_free(mp_async *a) { fsc_callq_free(a); }
