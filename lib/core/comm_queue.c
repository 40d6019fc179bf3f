/* The queue of started communicator calls (comm_queue.h), one progress thread per queue. The thread takes
 * the oldest request, runs it without the lock, and marks it done under the lock; every field of the queue
 * and of its requests is read and written under mu. Not here: what a call does (the backend's run), the
 * wording of errors (the backend's). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include "core/comm_queue.h"

typedef struct callq_req {
    struct callq_req *next;
    fsc_comm_call call;
    int done;
    fsc_status status;
    char msg[FSC_CALLQ_MSG];
} callq_req;

struct fsc_callq {
    void *ctx;
    fsc_callq_run_fn run;
    fsc_callq_msg_fn msg;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;     /* signals both ways: work queued or quit; a request done */
    callq_req *head, *tail; /* queued, not yet started */
    int pending;           /* queued or running */
    int quit;
};

static void *progress_main(void *p) {
    fsc_callq *q = p;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (!q->head && !q->quit) pthread_cond_wait(&q->cv, &q->mu);
        if (!q->head) break; /* quit with nothing queued */
        callq_req *r = q->head;
        q->head = r->next;
        if (!q->head) q->tail = NULL;
        fsc_comm_call k = r->call; /* the request's fields are touched under mu only */
        pthread_mutex_unlock(&q->mu);
        fsc_status s = q->run(q->ctx, &k);
        pthread_mutex_lock(&q->mu);
        r->status = s;
        if (s != FSC_OK) snprintf(r->msg, sizeof r->msg, "%s", q->msg());
        r->done = 1;
        q->pending--;
        pthread_cond_broadcast(&q->cv);
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

fsc_status fsc_callq_open(void *ctx, fsc_callq_run_fn run, fsc_callq_msg_fn msg, fsc_callq **out) {
    *out = NULL;
    fsc_callq *q = calloc(1, sizeof *q);
    if (!q) return FSC_ERR_NOMEM;
    q->ctx = ctx;
    q->run = run;
    q->msg = msg;
    if (pthread_mutex_init(&q->mu, NULL) != 0) {
        free(q);
        return FSC_ERR_NOMEM;
    }
    if (pthread_cond_init(&q->cv, NULL) != 0) {
        pthread_mutex_destroy(&q->mu);
        free(q);
        return FSC_ERR_NOMEM;
    }
    if (pthread_create(&q->thread, NULL, progress_main, q) != 0) {
        pthread_cond_destroy(&q->cv);
        pthread_mutex_destroy(&q->mu);
        free(q);
        return FSC_ERR_NOMEM;
    }
    *out = q;
    return FSC_OK;
}

fsc_status fsc_callq_push(fsc_callq *q, const fsc_comm_call *k, void **req) {
    *req = NULL;
    callq_req *r = calloc(1, sizeof *r);
    if (!r) return FSC_ERR_NOMEM;
    r->call = *k;
    pthread_mutex_lock(&q->mu);
    if (q->tail) q->tail->next = r;
    else q->head = r;
    q->tail = r;
    q->pending++;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
    *req = r;
    return FSC_OK;
}

fsc_status fsc_callq_run_here(void *ctx, fsc_callq_run_fn run, fsc_callq_msg_fn msg, const fsc_comm_call *k,
                              void **req) {
    *req = NULL;
    callq_req *r = calloc(1, sizeof *r);
    if (!r) return FSC_ERR_NOMEM;
    r->call = *k;
    r->status = run(ctx, k);
    if (r->status != FSC_OK) snprintf(r->msg, sizeof r->msg, "%s", msg());
    r->done = 1;
    *req = r;
    return FSC_OK;
}

fsc_status fsc_callq_wait(fsc_callq *q, void *req, char *msg, size_t cap) {
    callq_req *r = req;
    if (q) {
        pthread_mutex_lock(&q->mu);
        while (!r->done) pthread_cond_wait(&q->cv, &q->mu);
        pthread_mutex_unlock(&q->mu);
    }
    fsc_status s = r->status;
    if (s != FSC_OK && cap) snprintf(msg, cap, "%s", r->msg);
    free(r);
    return s;
}

int fsc_callq_test(fsc_callq *q, void *req) {
    callq_req *r = req;
    if (q) pthread_mutex_lock(&q->mu); /* no queue: the request ran at its start */
    int done = r->done;
    if (q) pthread_mutex_unlock(&q->mu);
    return done;
}

void fsc_callq_drain(fsc_callq *q) {
    if (!q) return;
    pthread_mutex_lock(&q->mu);
    while (q->pending) pthread_cond_wait(&q->cv, &q->mu);
    pthread_mutex_unlock(&q->mu);
}

void fsc_callq_free(fsc_callq *q) {
    if (!q) return;
    pthread_mutex_lock(&q->mu);
    q->quit = 1;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
    pthread_join(q->thread, NULL);
    pthread_cond_destroy(&q->cv);
    pthread_mutex_destroy(&q->mu);
    free(q);
}
