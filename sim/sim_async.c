/* The simulated communicator's asynchronous calls (sim.h): one progress thread per communicator handle
 * (a rank's view of a group), started by the handle's first asynchronous call, runs the queued calls in
 * issue order with the synchronous implementation (sim_run_call). The rank's own thread keeps computing;
 * the other ranks' progress threads meet it in the group's rendezvous exactly as their rank threads would,
 * so the results are the synchronous calls' bits. A synchronous call on the handle first waits until the
 * queue is empty (sim_async_drain), which keeps issue order across both kinds.
 * With the virtual clock (cl->virt) each started call keeps a record (sim_vreq): when the rank started it on
 * its clock, and once run when it ended on the simulated time line (the later of that and the handle's last
 * call's end is when it arrives); waiting for it moves the rank's clock to its end.
 * The queue and its thread are the core's (core/comm_queue.h, shared with the MPI plug-in); this file words
 * its errors. */
#include <stdlib.h>
#include "sim.h"
#include "core/clock_impl.h"
#include "core/comm_queue.h"

typedef struct sim_vreq {
    struct sim_vreq *next;
    void *req;          /* the queue's request (set once pushed) */
    int ran;            /* taken by the progress thread */
    double t_issue;     /* the rank's clock when it started the call */
    double t_end;       /* when the call ended on the simulated time line (once ran and finished) */
} sim_vreq;

static double later(double a, double b) { return a > b ? a : b; }

/* On the progress thread: a clean message, then the synchronous call; with the virtual clock from the later
 * of the rank's start and the handle's last call's end. */
static fsc_status run_queued(void *ctx, const fsc_comm_call *k) {
    sim_handle *h = ctx;
    fsc_clear_error();
    h->queued = 1; /* the rank's own calls run after the queue drained (sync_call): never at once with these */
    if (!h->g->cl->virt) {
        fsc_status s = sim_run_call(h, k);
        h->queued = 0;
        return s;
    }
    pthread_mutex_lock(&h->vmu);
    sim_vreq *e = h->vreqs;
    while (e && e->ran) e = e->next;
    if (e) e->ran = 1;
    pthread_mutex_unlock(&h->vmu);
    h->t_arrive = later(e ? e->t_issue : 0, h->t_last);
    fsc_status s = sim_run_call(h, k);
    h->queued = 0;
    pthread_mutex_lock(&h->vmu);
    if (e) e->t_end = later(h->t_done, h->t_arrive);
    pthread_mutex_unlock(&h->vmu);
    return s;
}

/* The virtual clock: the record of a call about to be started, last in the handle's list (NULL: no memory). */
static sim_vreq *vreq_add(sim_handle *h) {
    if (!h->vmu_init) {
        if (pthread_mutex_init(&h->vmu, NULL) != 0) return NULL;
        h->vmu_init = 1;
    }
    sim_vreq *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->t_issue = fsc_clock_now();
    pthread_mutex_lock(&h->vmu);
    sim_vreq **p = &h->vreqs;
    while (*p) p = &(*p)->next;
    *p = e;
    pthread_mutex_unlock(&h->vmu);
    return e;
}

/* Unlink the record of req (or the record e when req is NULL) and return it. */
static sim_vreq *vreq_take(sim_handle *h, void *req, sim_vreq *e) {
    pthread_mutex_lock(&h->vmu);
    sim_vreq **p = &h->vreqs;
    while (*p && (req ? (*p)->req != req : *p != e)) p = &(*p)->next;
    sim_vreq *got = *p;
    if (got) *p = got->next;
    pthread_mutex_unlock(&h->vmu);
    return got;
}

fsc_status sim_async_start(void *ctx, const fsc_comm_call *k, void **req) {
    sim_handle *h = ctx;
    *req = NULL;
    if (!h->async && fsc_callq_open(h, run_queued, fsc_last_error, &h->async) != FSC_OK)
        return fsc_error(FSC_ERR_NOMEM, "the communicator's progress thread could not be started (out of "
                                        "resources)");
    sim_vreq *e = NULL;
    if (h->g->cl->virt && !(e = vreq_add(h)))
        return fsc_error(FSC_ERR_NOMEM, "out of memory for an asynchronous %s", fsc_comm_op_name(k->op));
    if (fsc_callq_push(h->async, k, req) != FSC_OK) {
        if (e) free(vreq_take(h, NULL, e));
        return fsc_error(FSC_ERR_NOMEM, "out of memory for an asynchronous %s", fsc_comm_op_name(k->op));
    }
    if (e) {
        pthread_mutex_lock(&h->vmu);
        e->req = *req;
        pthread_mutex_unlock(&h->vmu);
    }
    return FSC_OK;
}

fsc_status sim_async_wait(void *ctx, void *req) {
    sim_handle *h = ctx;
    char msg[FSC_CALLQ_MSG];
    fsc_status s = fsc_callq_wait(h->async, req, msg, sizeof msg);
    if (h->g->cl->virt) {
        sim_vreq *e = vreq_take(h, req, NULL);
        if (e) fsc_clock_wait_until(e->t_end);
        free(e);
    }
    if (s != FSC_OK) fsc_error(s, "%s", msg);
    return s;
}

fsc_status sim_async_test(void *ctx, void *req, int *done) {
    sim_handle *h = ctx;
    *done = fsc_callq_test(h->async, req);
    if (*done && h->g->cl->virt) { /* finished, but not yet on this rank's simulated time line */
        pthread_mutex_lock(&h->vmu);
        for (sim_vreq *e = h->vreqs; e; e = e->next)
            if (e->req == req && e->t_end > fsc_clock_now()) *done = 0;
        pthread_mutex_unlock(&h->vmu);
    }
    return FSC_OK;
}

void sim_async_drain(sim_handle *h) { fsc_callq_drain(h->async); }

double sim_async_arrival(sim_handle *h) { return later(fsc_clock_now(), h->t_last); }

void sim_async_free(sim_handle *h) {
    fsc_callq_free(h->async);
    h->async = NULL;
    while (h->vreqs) {
        sim_vreq *e = h->vreqs;
        h->vreqs = e->next;
        free(e);
    }
    if (h->vmu_init) pthread_mutex_destroy(&h->vmu);
    h->vmu_init = 0;
}
