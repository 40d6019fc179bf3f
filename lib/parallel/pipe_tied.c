/* A pipeline's tied tensor sent asynchronously between its owner stage and its users' stage (po.prefetch;
 * pipe.h, docs/overlap.md): the tensor's two streams, each on a communicator of the two ranks of its own,
 * the owner's send buffer of the values and its receive buffer of the gradients.
 *
 * The streams (pipe.c's table): "tied-val", on which only the owner sends the values it computes with (once
 * per step or eval, after the owner layer's first forward) and only the user receives them into its replica;
 * "tied-grad", on which only the user sends the tied gradient of each micro-batch (after that micro-batch's
 * input gradient) and only the owner receives it (before its backward of that micro-batch). As for the links
 * (pipe_link.c, which says why a communicator carries one stream), each communicator carries one stream from
 * one sender to one receiver, issued in the same order on both sides, so a receive posted early can precede
 * only later receives of its own stream, never a send. The user posts the values' receive at the start of the
 * step (or eval) and waits for it in the pre-forward hook of the first layer that reads the tensor (later than
 * the synchronous schedule's receive, at the start of micro-batch 0's forward); the owner posts the receive of
 * micro-batch 0's gradient at the start of the step and of k + 1's right after k's is waited for, where the
 * synchronous schedule received k (before backward k). Sends are issued where the synchronous schedule sent
 * and waited for later (the owner's values at the end of the step or eval, the user's gradients before its
 * next backward overwrites them and at the end of the step). A wait moved later drops dependencies and adds
 * none, so every schedule stays free of deadlock; the pipeline group carries no tied message any more.
 *
 * Sends that wait for their receive (NCCL's). There a send in flight completes only once the owner has posted
 * its receive, which it does for micro-batch k + 1 only after its backward of k; waiting for the send of k before
 * the user's backward of k + 1 overwrites the buffer then adds a dependency the lists do not have: with chunks in
 * a loop the last rank runs the head's backwards of P micro-batches before its other chunk's backward of the first,
 * on which the owner's backward of the first depends (interleaved, P >= 3: a cycle). So the user sends every
 * gradient from a copy in a ring that grows (pipe_link.c's, as the links' copies) and waits only at the end of the
 * step: as many copies as the schedule keeps in flight, at most M.
 *
 * Memory: on the owner two buffers of the tensor's size, FSC_TAG_COMM, made with the engine: the copy of the
 * values being sent (the compute copy may be a gathered unit freed after the forward, or rounded in a buffer
 * the next forward reuses) and the gradient received ahead (the owner's backward reads tied_grad while the
 * next one arrives). The user receives into its replica (e->tied_copy), which nothing reads before the wait.
 * Not here: when the messages are issued (pipe.c). */
#include <stdio.h>
#include <string.h>
#include "pipe.h"
#include "core/comm_impl.h" /* fsc_comm_sends_wait */

fsc_status fsc_pipe_tied_create(fsc_engine *e, fsc_comm *pipe_comm, int stage, int owner, int user, size_t n,
                                fsc_pipe_tied *t) {
    memset(t, 0, sizeof *t);
    t->n = n;
    t->owner = stage == owner;
    FSC_TRY(fsc_layout_split_pair(pipe_comm, stage, owner, user, "pipe-tied-val", &t->val));
    FSC_TRY(fsc_layout_split_pair(pipe_comm, stage, owner, user, "pipe-tied-grad", &t->grad));
    if (t->val) fsc_engine_add_group_kind(e, t->val, FSC_GROUP_PIPELINE);
    if (t->grad) fsc_engine_add_group_kind(e, t->grad, FSC_GROUP_PIPELINE);
    t->copies = !t->owner && fsc_comm_sends_wait(pipe_comm);
    t->copy.tag = FSC_TAG_COMM;
    if (!t->owner) return FSC_OK;
    FSC_TRY(fsc_device_alloc(e->dev, FSC_TAG_COMM, n * sizeof(float), (void **)&t->vbuf));
    return fsc_device_alloc(e->dev, FSC_TAG_COMM, n * sizeof(float), (void **)&t->gbuf);
}

/* Wait for *r if it is in flight (*waited += the seconds waited, when waited is not NULL). */
fsc_status fsc_pipe_tied_send_values(fsc_pipe_tied *t, fsc_device *dev, const float *src, double *waited) {
    FSC_TRY(fsc_pipe_req_wait(&t->vreq, waited)); /* the last one's, before its buffer is overwritten */
    FSC_TRY(fsc_device_copy(dev, t->vbuf, src, t->n * sizeof(float)));
    return fsc_comm_isend(t->val, t->vbuf, t->n, FSC_F32, 1, &t->vreq);
}

fsc_status fsc_pipe_tied_post_values(fsc_pipe_tied *t, float *dst) {
    if (t->owner || t->vreq) return FSC_OK;
    return fsc_comm_irecv(t->val, dst, t->n, FSC_F32, 0, &t->vreq);
}

fsc_status fsc_pipe_tied_values_done(fsc_pipe_tied *t, double *waited) { return fsc_pipe_req_wait(&t->vreq, waited); }

fsc_status fsc_pipe_tied_post_grad(fsc_pipe_tied *t) {
    if (!t->owner || t->greq) return FSC_OK;
    return fsc_comm_irecv(t->grad, t->gbuf, t->n, FSC_F32, 1, &t->greq);
}

fsc_status fsc_pipe_tied_take_grad(fsc_pipe_tied *t, fsc_device *dev, float *dst, double *waited) {
    if (!t->greq) FSC_TRY(fsc_pipe_tied_post_grad(t));
    FSC_TRY(fsc_pipe_req_wait(&t->greq, waited));
    return fsc_device_copy(dev, dst, t->gbuf, t->n * sizeof(float));
}

fsc_status fsc_pipe_tied_send_grad(fsc_pipe_tied *t, fsc_device *dev, const float *src, double *waited) {
    if (!t->copies) {
        FSC_TRY(fsc_pipe_req_wait(&t->gsend, waited)); /* issued after the last backward; normally waited for already */
        return fsc_comm_isend(t->grad, src, t->n, FSC_F32, 0, &t->gsend);
    }
    return fsc_pipe_ring_send(&t->copy, 1, t->grad, 0, dev, t->n, src, waited);
}

fsc_status fsc_pipe_tied_grad_sent(fsc_pipe_tied *t, double *waited) {
    fsc_status s = fsc_pipe_req_wait(&t->gsend, waited);
    fsc_status w = fsc_pipe_ring_done(&t->copy, waited);
    return s == FSC_OK ? w : s;
}

void fsc_pipe_tied_drop(fsc_pipe_tied *t) {
    fsc_pipe_req_drop(&t->vreq);
    fsc_pipe_req_drop(&t->greq);
    fsc_pipe_req_drop(&t->gsend);
    fsc_pipe_ring_drop(&t->copy);
}

void fsc_pipe_tied_free(fsc_pipe_tied *t, fsc_device *dev) {
    fsc_pipe_tied_drop(t);
    fsc_pipe_ring_release(&t->copy, dev);
    fsc_device_release(dev, t->vbuf);
    fsc_device_release(dev, t->gbuf);
    if (t->val) fsc_comm_free(t->val);
    if (t->grad) fsc_comm_free(t->grad);
    memset(t, 0, sizeof *t);
}
