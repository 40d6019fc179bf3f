/* A pipeline stage's asynchronous receives and sends (po.prefetch; pipe.h, docs/overlap.md): the communicators
 * of its two links, the two receive buffers into which the next micro-batch's input and the next backward's
 * output gradient arrive while the stage computes the current one, and the ring of send buffers from which
 * checkpointed micro-batches' outputs leave.
 *
 * Why one communicator per link and direction. Operations of one communicator complete in issue order (the
 * simulator's progress thread per handle, the MPI plug-in's per communicator, NCCL's stream): a receive
 * posted early blocks every later operation of that communicator until its message arrives. On the pipeline
 * group that would hold back this stage's sends (its output to s+1, its input gradient to s-1) until the
 * neighbour sent the next message, a dependency the synchronous schedule does not have. It closes into a
 * cycle at once: stage s waiting to receive the first output gradient from s+1 before its own first output
 * can leave, while s+1 needs that output to produce the gradient (one communicator for both directions of a
 * link, tried, times out so in test_pipe). A communicator per direction shared by both links would still put a
 * middle stage's receive from s-1 before its send to s+1, a dependency on s-1's progress that is harder to
 * rule out. So each link (s, s+1) gets two communicators of two ranks, split from the pipeline
 * group: "act", on which only s sends (outputs, in micro-batch order) and only s+1 receives, and "grad", on
 * which only s+1 sends (input gradients, in backward order) and only s receives. Every communicator then
 * carries one stream of messages from one sender to one receiver, issued in the same order on both sides;
 * a posted receive can only precede later receives of the same stream, never a send, so posting it at any
 * time adds no dependency. The sends are issued where the synchronous schedule issues them and each receive
 * is waited for where it received, so every wait depends on what it depended on there: GPipe and 1F1B stay
 * free of deadlock for every balance, checkpoint mode and micro-batch count. Tied tensors and their
 * gradients travel on streams of their own by the same rules (pipe_tied.c). An interleaved pipeline adds one
 * link (last rank, first rank) with the same two streams: the last rank's chunk c output goes to the first
 * rank's chunk c + 1, and its gradient comes back; every rank still receives one stream of outputs and one of
 * gradients, the streams the schedule validator (pipe_sched.c) checks for order and deadlock. A V (zbv) makes
 * a second set of links for its chunk 1 (pipe.c calls fsc_pipe_links_create again with the stages in reverse
 * order), by the same rules: one stream per communicator.
 *
 * Sends. An asynchronous send is issued where the synchronous schedule sends, and waited for no earlier than
 * the synchronous send returned: a wait moved later in a rank's program drops dependencies (what ran between
 * the two points no longer waits for the receiver) and adds none (what follows the new point followed the old
 * one). A non-checkpointed output leaves from its record (pipe.c waits before its backward); a checkpointed
 * micro-batch gives its record back at once, so its output is copied into the next buffer of a ring of
 * nsend = min(po.prefetch_limit (0: 2), checkpointed micro-batches per step) and sent from there; the
 * buffer's previous send is waited for just before the copy (the send nsend checkpointed micro-batches
 * earlier on the same stream), and every send of the ring at the end of a step or an evaluation, before
 * new buffers are made (a failed step) and when the links are freed.
 *
 * Sends that wait for their receive (NCCL's). There a send completes only once the other stage posted its
 * receive, which it does for a stream's next message when it takes the last one; waiting for a send before
 * reusing its buffer then makes this stage wait for the other stage's progress, which lists of several chunks
 * per rank can close into a cycle. So there (grow) nothing waits for a send before the end of the step: a ring
 * slot whose send has not completed (fsc_comm_test) gets a new buffer inserted before it, which keeps the ring's
 * order (the oldest send next), and input gradients leave from a ring of copies too (pipe.c would otherwise keep
 * their records, which are far larger, until the send is waited for). A ring holds at most the messages of a
 * step and keeps its size between steps; how far it grows depends on when the receiver posts, so on timing (and a
 * ring that grows while idle records sit in the pools puts the ledger's peak above the pipeline's count).
 *
 * Memory: one receive buffer per direction and nsend send buffers (stream_floats(B) floats each; grow: as many
 * as were in flight at once, and the gradients' ring), so a
 * message never holds an activation record; received data are copied into the record when they are needed.
 * They are boundary activations: FSC_TAG_ACTS in the ledger, kept between steps like the record pools, and
 * counted by pipe.c in the pipeline's activation bytes (fsc_pipe_stats.peak_acts_bytes), so the ledger and
 * the stats still agree.
 * Not here: the schedule (pipe.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "pipe.h"
#include "core/comm_impl.h" /* fsc_comm_sends_wait */
#include "core/clock_impl.h" /* fsc_clock_now: on a simulated rank, its clock */

fsc_status fsc_pipe_links_create(fsc_engine *e, fsc_comm *pipe_comm, int stage, int wrap, fsc_pipe_links *l) {
    memset(l, 0, sizeof *l);
    l->peer_prev = 0, l->peer_next = 1;
    fsc_comm *act[2] = { NULL, NULL }, *grad[2] = { NULL, NULL }; /* [0] links (2i, 2i+1), [1] (2i+1, 2i+2) */
    fsc_status s = FSC_OK;
    for (int odd = 0; odd < 2 && s == FSC_OK; odd++) {
        s = fsc_layout_split_links(pipe_comm, stage, odd, "pipe-act", &act[odd]);
        if (s == FSC_OK) s = fsc_layout_split_links(pipe_comm, stage, odd, "pipe-grad", &grad[odd]);
    }
    if (s != FSC_OK) {
        for (int i = 0; i < 2; i++) {
            if (act[i]) fsc_comm_free(act[i]);
            if (grad[i]) fsc_comm_free(grad[i]);
        }
        return s;
    }
    const int next = stage % 2, prev = 1 - next; /* the part holding the link to s+1, to s-1 */
    l->act_next = act[next], l->grad_next = grad[next];
    l->act_prev = act[prev], l->grad_prev = grad[prev];
    if (wrap) {
        fsc_comm *wa = NULL, *wg = NULL; /* the first and the last stage (comm ranks 0 and 1) */
        const int last = fsc_comm_size(pipe_comm) - 1;
        s = fsc_layout_split_pair(pipe_comm, stage, 0, last, "pipe-act-wrap", &wa);
        if (s == FSC_OK) s = fsc_layout_split_pair(pipe_comm, stage, 0, last, "pipe-grad-wrap", &wg);
        if (stage == 0 && wa) l->act_prev = wa, l->grad_prev = wg, l->peer_prev = 1;
        else if (wa) l->act_next = wa, l->grad_next = wg, l->peer_next = 0;
        if (s != FSC_OK) return s; /* what was split is in l: fsc_pipe_links_free frees it */
    }
    fsc_comm *all[4] = { l->act_prev, l->act_next, l->grad_prev, l->grad_next };
    for (int i = 0; i < 4; i++) fsc_engine_add_group_kind(e, all[i], FSC_GROUP_PIPELINE);
    l->grow = fsc_comm_sends_wait(pipe_comm);
    l->out.tag = l->gout.tag = FSC_TAG_ACTS;
    return FSC_OK;
}

/* pipe.h: a posted receive whose data nobody will read, or a send nobody waited for (a failed step left
 * them), waited for and freed; errors are dropped. */
void fsc_pipe_req_drop(fsc_comm_req **r) {
    if (!*r) return;
    (void)fsc_comm_wait(*r);
    (void)fsc_comm_req_free(*r);
    *r = NULL;
}

void fsc_pipe_ring_drop(fsc_pipe_ring *g) {
    for (int i = 0; i < g->n; i++) fsc_pipe_req_drop(&g->req[i]);
    g->next = 0;
}

void fsc_pipe_ring_release(fsc_pipe_ring *g, fsc_device *dev) {
    for (int i = 0; i < g->n; i++) fsc_device_release(dev, g->buf[i]);
    free(g->buf);
    free(g->req);
    g->buf = NULL, g->req = NULL, g->n = g->next = 0; /* its tag stays */
}

/* A new buffer of nf floats at slot i, the ring's later slots moved up by one. */
static fsc_status ring_insert(fsc_pipe_ring *g, fsc_device *dev, size_t nf, int i) {
    float **b = realloc(g->buf, (size_t)(g->n + 1) * sizeof *b);
    if (b) g->buf = b;
    fsc_comm_req **r = b ? realloc(g->req, (size_t)(g->n + 1) * sizeof *r) : NULL;
    if (r) g->req = r;
    if (!b || !r) return fsc_error(FSC_ERR_NOMEM, "pipe: out of memory");
    float *buf;
    FSC_TRY(fsc_device_alloc(dev, g->tag, nf * sizeof(float), (void **)&buf));
    memmove(g->buf + i + 1, g->buf + i, (size_t)(g->n - i) * sizeof *g->buf);
    memmove(g->req + i + 1, g->req + i, (size_t)(g->n - i) * sizeof *g->req);
    g->buf[i] = buf;
    g->req[i] = NULL;
    g->n++;
    return FSC_OK;
}

fsc_status fsc_pipe_ring_send(fsc_pipe_ring *g, int grow, fsc_comm *c, int peer, fsc_device *dev, size_t nf,
                              const float *src, double *waited) {
    const int i = g->next;
    int done = i < g->n;
    if (grow && done && g->req[i]) FSC_TRY(fsc_comm_test(g->req[i], &done));
    if (!done) FSC_TRY(ring_insert(g, dev, nf, i));
    FSC_TRY(fsc_pipe_req_wait(&g->req[i], waited)); /* the buffer's last send, before it is overwritten */
    FSC_TRY(fsc_device_copy(dev, g->buf[i], src, nf * sizeof(float)));
    FSC_TRY(fsc_comm_isend(c, g->buf[i], nf, FSC_F32, peer, &g->req[i]));
    g->next = (i + 1) % g->n;
    return FSC_OK;
}

fsc_status fsc_pipe_ring_done(fsc_pipe_ring *g, double *waited) {
    fsc_status s = FSC_OK;
    for (int j = 0; j < g->n; j++) { /* oldest first */
        fsc_status w = fsc_pipe_req_wait(&g->req[(g->next + j) % g->n], waited);
        if (s == FSC_OK) s = w;
    }
    g->next = 0;
    return s;
}

void fsc_pipe_links_drop(fsc_pipe_links *l) {
    fsc_pipe_req_drop(&l->inreq);
    fsc_pipe_req_drop(&l->greq);
    fsc_pipe_ring_drop(&l->out);
    fsc_pipe_ring_drop(&l->gout);
}

static void release_buffers(fsc_pipe_links *l, fsc_device *dev) {
    fsc_device_release(dev, l->inbuf);
    fsc_device_release(dev, l->gbuf);
    l->inbuf = l->gbuf = NULL;
    fsc_pipe_ring_release(&l->out, dev);
    fsc_pipe_ring_release(&l->gout, dev);
}

fsc_status fsc_pipe_links_buffers(fsc_pipe_links *l, fsc_device *dev, size_t n, int nsend) {
    fsc_pipe_links_drop(l);
    if (!l->act_next || nsend < 0) nsend = 0;
    const int kept = nsend == l->out.n || (l->grow && nsend > 0 && l->out.n > nsend); /* a grown ring stays */
    if (n == l->n && kept && (!l->act_prev || l->inbuf) && (!l->grad_next || l->gbuf) &&
        (l->out.n == 0 || l->out.buf[l->out.n - 1])) /* allocated in order: the last one made means all were */
        return FSC_OK;
    release_buffers(l, dev);
    l->n = n;
    if (l->act_prev) FSC_TRY(fsc_device_alloc(dev, FSC_TAG_ACTS, n * sizeof(float), (void **)&l->inbuf));
    if (l->grad_next) FSC_TRY(fsc_device_alloc(dev, FSC_TAG_ACTS, n * sizeof(float), (void **)&l->gbuf));
    for (int i = 0; i < nsend; i++) FSC_TRY(ring_insert(&l->out, dev, n, i));
    return FSC_OK;
}

size_t fsc_pipe_links_bytes(const fsc_pipe_links *l) {
    size_t k = (size_t)(l->inbuf != NULL) + (size_t)(l->gbuf != NULL) + (size_t)l->out.n + (size_t)l->gout.n;
    return k * l->n * sizeof(float);
}

fsc_status fsc_pipe_links_post_input(fsc_pipe_links *l) {
    if (!l->act_prev || l->inreq) return FSC_OK;
    return fsc_comm_irecv(l->act_prev, l->inbuf, l->n, FSC_F32, l->peer_prev, &l->inreq);
}

fsc_status fsc_pipe_links_post_grad(fsc_pipe_links *l) {
    if (!l->grad_next || l->greq) return FSC_OK;
    return fsc_comm_irecv(l->grad_next, l->gbuf, l->n, FSC_F32, l->peer_next, &l->greq);
}

/* Wait for the posted receive *r (posting it now if none is), then copy its buffer into dst. */
static fsc_status take(fsc_comm_req **r, fsc_status (*post)(fsc_pipe_links *), fsc_pipe_links *l,
                       const float *buf, fsc_device *dev, float *dst, double *waited) {
    if (!*r) FSC_TRY(post(l));
    FSC_TRY(fsc_pipe_req_wait(r, waited));
    return fsc_device_copy(dev, dst, buf, l->n * sizeof(float));
}

fsc_status fsc_pipe_links_take_input(fsc_pipe_links *l, fsc_device *dev, float *dst, double *waited) {
    return take(&l->inreq, fsc_pipe_links_post_input, l, l->inbuf, dev, dst, waited);
}

fsc_status fsc_pipe_links_take_grad(fsc_pipe_links *l, fsc_device *dev, float *dst, double *waited) {
    return take(&l->greq, fsc_pipe_links_post_grad, l, l->gbuf, dev, dst, waited);
}

/* pipe.h: wait for and free *r if one is in flight (*waited += the seconds waited, when waited). */
fsc_status fsc_pipe_req_wait(fsc_comm_req **r, double *waited) {
    if (!*r) return FSC_OK;
    const double t0 = fsc_clock_now();
    fsc_status s = fsc_comm_wait(*r);
    if (waited) *waited += fsc_clock_now() - t0;
    fsc_comm_req_free(*r);
    *r = NULL;
    return s;
}

fsc_status fsc_pipe_links_send_output(fsc_pipe_links *l, fsc_device *dev, const float *src, double *waited) {
    if (l->out.n == 0 && !l->grow) return fsc_comm_send(l->act_next, src, l->n, FSC_F32, l->peer_next);
    return fsc_pipe_ring_send(&l->out, l->grow, l->act_next, l->peer_next, dev, l->n, src, waited);
}

fsc_status fsc_pipe_links_send_grad(fsc_pipe_links *l, fsc_device *dev, const float *src) {
    return fsc_pipe_ring_send(&l->gout, 1, l->grad_prev, l->peer_prev, dev, l->n, src, NULL);
}

fsc_status fsc_pipe_links_sends_done(fsc_pipe_links *l, double *waited) {
    fsc_status s = fsc_pipe_ring_done(&l->out, waited);
    fsc_status w = fsc_pipe_ring_done(&l->gout, waited);
    return s == FSC_OK ? w : s;
}

void fsc_pipe_links_free(fsc_pipe_links *l, fsc_device *dev) {
    fsc_pipe_links_drop(l);
    release_buffers(l, dev);
    fsc_comm *all[4] = { l->act_prev, l->act_next, l->grad_prev, l->grad_next };
    for (int i = 0; i < 4; i++)
        if (all[i]) fsc_comm_free(all[i]);
    memset(l, 0, sizeof *l);
}
