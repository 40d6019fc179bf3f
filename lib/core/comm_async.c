/* Asynchronous collectives of the public communicator (comm.h): fsc_comm_i<op>, wait, test, req_free.
 * A request remembers its call, the bytes the synchronous call would count and the implementation's
 * request. With an implementation that has no asynchronous path (its table's start is NULL) the call runs
 * at start and the request keeps its status and message until the wait hands them over. Ordering (issue
 * order per communicator) is the implementation's: the simulator queues calls on a progress thread per
 * communicator handle (sim/sim_async.c). With a trace (trace.h) a call is recorded at its wait, as the span
 * of the wait: the communication the rank did not overlap. Not here: what a collective computes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/comm_impl.h"
#include "core/flight_impl.h"
#include "fsc/trace.h"

enum { REQ_MSG = 400 };

typedef enum { REQ_IN_FLIGHT = 0, REQ_DONE, REQ_WAITED } req_state;

struct fsc_comm_req {
    fsc_comm *c;
    fsc_comm_op op;
    double bytes;
    uint64_t seq;         /* the call's number on c */
    size_t slot;          /* its entry in c's flight ring */
    void *impl;           /* the implementation's request while in flight; NULL: ran at start */
    req_state state;
    fsc_status status;    /* of a call that ran at start */
    char msg[REQ_MSG];
};

static fsc_status start(fsc_comm *c, const fsc_comm_call *k, fsc_comm_req **out) {
    const char *what = fsc_comm_op_name(k->op);
    if (!out) return fsc_error(FSC_ERR_INVALID, "%s: req is NULL (where the request is returned)", what);
    *out = NULL;
    double bytes = 0;
    FSC_TRY(fsc_comm_check_call(c, k, &bytes));
    const double t0 = c->trace ? fsc_trace_now_us() : 0;
    fsc_comm_req *r = calloc(1, sizeof *r);
    if (!r) return fsc_error(FSC_ERR_NOMEM, "%s: out of memory for a request", what);
    *r = (fsc_comm_req){.c = c, .op = k->op, .bytes = bytes, .seq = ++c->seq};
    /* a backend without start/wait runs it here and now: the rank blocks in it (waiting, not issued) */
    r->slot = flight_begin(c->flight, r->seq, k->op, k->count, k->dt, k->peer, !(c->ops->start && c->ops->wait));
    if (c->ops->start && c->ops->wait) {
        fsc_status s = c->ops->start(c->ctx, k, &r->impl);
        if (s != FSC_OK) {
            flight_end(c->flight, r->slot, r->seq, s);
            const uint64_t seq = r->seq;
            free(r);
            return fsc_comm_account_call(c, k->op, t0, s, 0, seq);
        }
    } else {
        r->status = fsc_comm_run_call(c, k);
        if (r->status != FSC_OK) snprintf(r->msg, sizeof r->msg, "%s", fsc_last_error());
        r->state = REQ_DONE;
        flight_end(c->flight, r->slot, r->seq, r->status);
    }
    *out = r;
    return FSC_OK;
}

fsc_status fsc_comm_iall_reduce(fsc_comm *c, const void *send, void *recv, size_t count, fsc_dtype dt,
                                fsc_redop op, fsc_comm_req **req) {
    fsc_comm_call k = {.op = FSC_OP_ALL_REDUCE, .send = send, .recv = recv, .count = count, .dt = dt, .redop = op};
    return start(c, &k, req);
}

fsc_status fsc_comm_ireduce_scatter(fsc_comm *c, const void *send, void *recv, size_t recvcount, fsc_dtype dt,
                                    fsc_redop op, fsc_comm_req **req) {
    fsc_comm_call k = {.op = FSC_OP_REDUCE_SCATTER, .send = send, .recv = recv, .count = recvcount, .dt = dt,
                       .redop = op};
    return start(c, &k, req);
}

fsc_status fsc_comm_iall_gather(fsc_comm *c, const void *send, void *recv, size_t sendcount, fsc_dtype dt,
                                fsc_comm_req **req) {
    fsc_comm_call k = {.op = FSC_OP_ALL_GATHER, .send = send, .recv = recv, .count = sendcount, .dt = dt};
    return start(c, &k, req);
}

fsc_status fsc_comm_ibroadcast(fsc_comm *c, void *buf, size_t count, fsc_dtype dt, int root, fsc_comm_req **req) {
    fsc_comm_call k = {.op = FSC_OP_BROADCAST, .send = buf, .recv = buf, .count = count, .dt = dt, .peer = root};
    return start(c, &k, req);
}

fsc_status fsc_comm_isend(fsc_comm *c, const void *buf, size_t count, fsc_dtype dt, int peer, fsc_comm_req **req) {
    fsc_comm_call k = {.op = FSC_OP_SEND, .send = buf, .count = count, .dt = dt, .peer = peer};
    return start(c, &k, req);
}

fsc_status fsc_comm_irecv(fsc_comm *c, void *buf, size_t count, fsc_dtype dt, int peer, fsc_comm_req **req) {
    fsc_comm_call k = {.op = FSC_OP_RECV, .recv = buf, .count = count, .dt = dt, .peer = peer};
    return start(c, &k, req);
}

fsc_status fsc_comm_iall_to_all(fsc_comm *c, const void *send, void *recv, size_t count, fsc_dtype dt,
                                fsc_comm_req **req) {
    fsc_comm_call k = {.op = FSC_OP_ALL_TO_ALL, .send = send, .recv = recv, .count = count, .dt = dt};
    return start(c, &k, req);
}

/* Complete r (blocking); sets its state to REQ_DONE with status and message kept. */
static void complete(fsc_comm_req *r) {
    if (r->state != REQ_IN_FLIGHT) return;
    flight_wait(r->c->flight, r->slot, r->seq);
    r->status = r->c->ops->wait(r->c->ctx, r->impl);
    flight_end(r->c->flight, r->slot, r->seq, r->status);
    r->impl = NULL;
    if (r->status != FSC_OK) snprintf(r->msg, sizeof r->msg, "%s", fsc_last_error());
    r->state = REQ_DONE;
}

fsc_status fsc_comm_wait(fsc_comm_req *r) {
    if (!r) return fsc_error(FSC_ERR_INVALID, "fsc_comm_wait: req is NULL");
    if (r->state == REQ_WAITED)
        return fsc_error(FSC_ERR_STATE, "fsc_comm_wait: this %s on comm '%s' was waited for already; a request "
                         "is waited for once", fsc_comm_op_name(r->op), r->c->name);
    const double t0 = r->c->trace ? fsc_trace_now_us() : 0; /* traced: the time waited (exposed communication) */
    complete(r);
    r->state = REQ_WAITED;
    fsc_status s = r->status;
    if (s != FSC_OK) fsc_error(s, "%s", r->msg);
    return fsc_comm_account_call(r->c, r->op, t0, s, r->bytes, r->seq);
}

fsc_status fsc_comm_test(fsc_comm_req *r, int *done) {
    if (!done) return fsc_error(FSC_ERR_INVALID, "fsc_comm_test: done is NULL");
    *done = 0;
    if (!r) return fsc_error(FSC_ERR_INVALID, "fsc_comm_test: req is NULL");
    if (r->state == REQ_WAITED)
        return fsc_error(FSC_ERR_STATE, "fsc_comm_test: this %s on comm '%s' was waited for already",
                         fsc_comm_op_name(r->op), r->c->name);
    if (r->state == REQ_DONE) {
        *done = 1;
        return FSC_OK;
    }
    if (!r->c->ops->test) return FSC_OK; /* cannot tell without blocking: not done yet */
    return r->c->ops->test(r->c->ctx, r->impl, done);
}

fsc_status fsc_comm_req_free(fsc_comm_req *r) {
    if (!r) return FSC_OK;
    fsc_status s = FSC_OK;
    if (r->state != REQ_WAITED) {
        int in_flight = r->state == REQ_IN_FLIGHT;
        complete(r);
        s = fsc_error(FSC_ERR_STATE, "fsc_comm_req_free: a %s on comm '%s' was freed before it was waited for%s",
                      fsc_comm_op_name(r->op), r->c->name,
                      in_flight ? " (it was in flight: freeing waited for it first)" : "");
    }
    free(r);
    return s;
}
