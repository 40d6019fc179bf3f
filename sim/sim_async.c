/* The simulated communicator's asynchronous calls (sim.h): one progress thread per communicator handle
 * (a rank's view of a group), started by the handle's first asynchronous call, runs the queued calls in
 * issue order with the synchronous implementation (sim_run_call). The rank's own thread keeps computing;
 * the other ranks' progress threads meet it in the group's rendezvous exactly as their rank threads would,
 * so the results are the synchronous calls' bits. A synchronous call on the handle first waits until the
 * queue is empty (sim_async_drain), which keeps issue order across both kinds.
 * The queue and its thread are the core's (core/comm_queue.h, shared with the MPI plug-in); this file words
 * its errors. */
#include "sim.h"
#include "core/comm_queue.h"

/* On the progress thread: a clean message, then the synchronous call. */
static fsc_status run_queued(void *ctx, const fsc_comm_call *k) {
    fsc_clear_error();
    return sim_run_call(ctx, k);
}

fsc_status sim_async_start(void *ctx, const fsc_comm_call *k, void **req) {
    sim_handle *h = ctx;
    *req = NULL;
    if (!h->async && fsc_callq_open(h, run_queued, fsc_last_error, &h->async) != FSC_OK)
        return fsc_error(FSC_ERR_NOMEM, "the communicator's progress thread could not be started (out of "
                                        "resources)");
    if (fsc_callq_push(h->async, k, req) != FSC_OK)
        return fsc_error(FSC_ERR_NOMEM, "out of memory for an asynchronous %s", fsc_comm_op_name(k->op));
    return FSC_OK;
}

fsc_status sim_async_wait(void *ctx, void *req) {
    sim_handle *h = ctx;
    char msg[FSC_CALLQ_MSG];
    fsc_status s = fsc_callq_wait(h->async, req, msg, sizeof msg);
    if (s != FSC_OK) fsc_error(s, "%s", msg);
    return s;
}

fsc_status sim_async_test(void *ctx, void *req, int *done) {
    sim_handle *h = ctx;
    *done = fsc_callq_test(h->async, req);
    return FSC_OK;
}

void sim_async_drain(sim_handle *h) { fsc_callq_drain(h->async); }

void sim_async_free(sim_handle *h) {
    fsc_callq_free(h->async);
    h->async = NULL;
}
