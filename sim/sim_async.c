/* The simulated communicator's asynchronous calls (sim.h): one progress thread per communicator handle
 * (a rank's view of a group), started by the handle's first asynchronous call, runs the queued calls in
 * issue order with the synchronous implementation (sim_run_call). The rank's own thread keeps computing;
 * the other ranks' progress threads meet it in the group's rendezvous exactly as their rank threads would,
 * so the results are the synchronous calls' bits. A synchronous call on the handle first waits until the
 * queue is empty (sim_async_drain), which keeps issue order across both kinds.
 * A job is allocated by start and freed by wait; its status and message (thread-local on the progress
 * thread) travel back in it. Every field of the queue and of the jobs is read and written under mu. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "sim.h"

typedef struct sim_job {
    struct sim_job *next;
    fsc_comm_call call;
    int done;
    fsc_status status;
    char msg[SIM_MSG_CAP];
} sim_job;

struct sim_async {
    sim_handle *h;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;       /* signals both ways: work queued or quit; a job done */
    sim_job *head, *tail;    /* queued, not yet started */
    int pending;             /* queued or running */
    int quit;
};

static void *progress_main(void *p) {
    struct sim_async *a = p;
    pthread_mutex_lock(&a->mu);
    for (;;) {
        while (!a->head && !a->quit) pthread_cond_wait(&a->cv, &a->mu);
        if (!a->head) break; /* quit with nothing queued */
        sim_job *j = a->head;
        a->head = j->next;
        if (!a->head) a->tail = NULL;
        fsc_comm_call k = j->call;
        pthread_mutex_unlock(&a->mu);
        fsc_clear_error();
        fsc_status s = sim_run_call(a->h, &k);
        pthread_mutex_lock(&a->mu);
        j->status = s;
        if (s != FSC_OK) snprintf(j->msg, sizeof j->msg, "%s", fsc_last_error());
        j->done = 1;
        a->pending--;
        pthread_cond_broadcast(&a->cv);
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

static fsc_status ensure_started(sim_handle *h) {
    if (h->async) return FSC_OK;
    struct sim_async *a = calloc(1, sizeof *a);
    if (!a) return fsc_error(FSC_ERR_NOMEM, "out of memory for the communicator's progress thread");
    a->h = h;
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    if (pthread_create(&a->thread, NULL, progress_main, a) != 0) {
        pthread_cond_destroy(&a->cv);
        pthread_mutex_destroy(&a->mu);
        free(a);
        return fsc_error(FSC_ERR_NOMEM, "the communicator's progress thread could not be started (out of "
                                        "resources)");
    }
    h->async = a;
    return FSC_OK;
}

fsc_status sim_async_start(void *ctx, const fsc_comm_call *k, void **req) {
    sim_handle *h = ctx;
    *req = NULL;
    FSC_TRY(ensure_started(h));
    sim_job *j = calloc(1, sizeof *j);
    if (!j) return fsc_error(FSC_ERR_NOMEM, "out of memory for an asynchronous %s", fsc_comm_op_name(k->op));
    j->call = *k;
    struct sim_async *a = h->async;
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

fsc_status sim_async_wait(void *ctx, void *req) {
    sim_handle *h = ctx;
    sim_job *j = req;
    struct sim_async *a = h->async;
    pthread_mutex_lock(&a->mu);
    while (!j->done) pthread_cond_wait(&a->cv, &a->mu);
    pthread_mutex_unlock(&a->mu);
    fsc_status s = j->status;
    if (s != FSC_OK) fsc_error(s, "%s", j->msg);
    free(j);
    return s;
}

fsc_status sim_async_test(void *ctx, void *req, int *done) {
    sim_handle *h = ctx;
    sim_job *j = req;
    pthread_mutex_lock(&h->async->mu);
    *done = j->done;
    pthread_mutex_unlock(&h->async->mu);
    return FSC_OK;
}

void sim_async_drain(sim_handle *h) {
    struct sim_async *a = h->async;
    if (!a) return;
    pthread_mutex_lock(&a->mu);
    while (a->pending) pthread_cond_wait(&a->cv, &a->mu);
    pthread_mutex_unlock(&a->mu);
}

void sim_async_free(sim_handle *h) {
    struct sim_async *a = h->async;
    if (!a) return;
    pthread_mutex_lock(&a->mu);
    a->quit = 1;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    pthread_join(a->thread, NULL);
    pthread_cond_destroy(&a->cv);
    pthread_mutex_destroy(&a->mu);
    free(a);
    h->async = NULL;
}
