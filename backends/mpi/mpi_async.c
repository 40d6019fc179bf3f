/* The MPI plug-in's asynchronous calls (mpi_async.h): a progress thread per communicator runs the started
 * calls in issue order with the plug-in's synchronous code (nonblocking MPI_Isend/MPI_Irecv/MPI_Iallreduce
 * polled to completion), while the rank's thread computes. MPI is entered by one thread at a time (the
 * plug-in lock, MPI_THREAD_SERIALIZED); a wait releases the lock between polls, so the rank's own calls and
 * the progress threads of other communicators interleave without deadlock. Every rank starts the same
 * calls in the same order, so MPI matches their messages in order. A job's status and message (thread-local
 * on the progress thread) travel back in the job. */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mpi_async.h"

static pthread_mutex_t mpi_mu = PTHREAD_MUTEX_INITIALIZER;

void mp_lock(void) { pthread_mutex_lock(&mpi_mu); }
void mp_unlock(void) { pthread_mutex_unlock(&mpi_mu); }

typedef struct mp_job {
    struct mp_job *next;
    fsc_comm_call call;
    int done;
    fsc_status status;
    char msg[1000];
} mp_job;

struct mp_async {
    void *ctx;
    mp_run_fn run;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    mp_job *head, *tail;
    int pending, quit;
};

static void *progress_main(void *p) {
    mp_async *a = p;
    pthread_mutex_lock(&a->mu);
    for (;;) {
        while (!a->head && !a->quit) pthread_cond_wait(&a->cv, &a->mu);
        if (!a->head) break;
        mp_job *j = a->head;
        a->head = j->next;
        if (!a->head) a->tail = NULL;
        fsc_comm_call k = j->call;
        pthread_mutex_unlock(&a->mu);
        fsc_status s = a->run(a->ctx, &k);
        pthread_mutex_lock(&a->mu);
        j->status = s;
        if (s != FSC_OK) snprintf(j->msg, sizeof j->msg, "%s", mp_last_msg());
        j->done = 1;
        a->pending--;
        pthread_cond_broadcast(&a->cv);
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

fsc_status mp_async_start(mp_async **slot, void *ctx, mp_run_fn run, const fsc_comm_call *k, void **req) {
    *req = NULL;
    mp_job *j = calloc(1, sizeof *j);
    if (!j) return mp_host_error(FSC_ERR_NOMEM, "mpi: out of memory for an asynchronous call");
    j->call = *k;
    int level = MPI_THREAD_SINGLE;
    mp_lock();
    MPI_Query_thread(&level);
    mp_unlock();
    if (level < MPI_THREAD_SERIALIZED) { /* no other thread may enter MPI: run it now */
        j->status = run(ctx, k);
        if (j->status != FSC_OK) snprintf(j->msg, sizeof j->msg, "%s", mp_last_msg());
        j->done = 1;
        *req = j;
        return FSC_OK;
    }
    mp_async *a = *slot;
    if (!a) {
        a = calloc(1, sizeof *a);
        if (!a) {
            free(j);
            return mp_host_error(FSC_ERR_NOMEM, "mpi: out of memory for a progress thread");
        }
        a->ctx = ctx;
        a->run = run;
        pthread_mutex_init(&a->mu, NULL);
        pthread_cond_init(&a->cv, NULL);
        if (pthread_create(&a->thread, NULL, progress_main, a) != 0) {
            pthread_cond_destroy(&a->cv);
            pthread_mutex_destroy(&a->mu);
            free(a);
            free(j);
            return mp_host_error(FSC_ERR_NOMEM, "mpi: the communicator's progress thread could not be started");
        }
        *slot = a;
    }
    pthread_mutex_lock(&a->mu);
    if (a->tail) a->tail->next = j;
    else a->head = j;
    a->tail = j;
    a->pending++;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    *req = j;
    return FSC_OK;
}

fsc_status mp_async_wait(mp_async *a, void *req) {
    mp_job *j = req;
    if (a) {
        pthread_mutex_lock(&a->mu);
        while (!j->done) pthread_cond_wait(&a->cv, &a->mu);
        pthread_mutex_unlock(&a->mu);
    }
    fsc_status s = j->status;
    if (s != FSC_OK) mp_host_error(s, j->msg);
    free(j);
    return s;
}

fsc_status mp_async_test(mp_async *a, void *req, int *done) {
    mp_job *j = req;
    if (a) pthread_mutex_lock(&a->mu); /* no thread (a NULL): the job ran at start */
    *done = j->done;
    if (a) pthread_mutex_unlock(&a->mu);
    return FSC_OK;
}

void mp_async_drain(mp_async *a) {
    if (!a) return;
    pthread_mutex_lock(&a->mu);
    while (a->pending) pthread_cond_wait(&a->cv, &a->mu);
    pthread_mutex_unlock(&a->mu);
}

void mp_async_free(mp_async *a) {
    if (!a) return;
    pthread_mutex_lock(&a->mu);
    a->quit = 1;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    pthread_join(a->thread, NULL);
    pthread_cond_destroy(&a->cv);
    pthread_mutex_destroy(&a->mu);
    free(a);
}
