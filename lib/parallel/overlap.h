/* Private: gradient reductions started asynchronously (overlap.c), for the strategies that reduce during
 * backward (ddp.c, zero.c, fsdp.c) when po.prefetch is set. A queue of reductions in flight: each is what
 * fsc_engine_reduce does, split into a start (convert to the reduction dtype, start the collective) and a
 * finish (wait, then convert or accumulate into out exactly as fsc_engine_reduce does, so the bits are the
 * same). Finished in the order started.
 * A reduction may have a second phase (fsc_reduce_start_gather, FSDP's hybrid_shard): a reduce-scatter over one
 * communicator, then an all-gather of its piece over another, which can only start once the first has finished.
 * fsc_reduce_advance starts second phases at points of the program that are the same on every rank, oldest
 * first, so every rank issues the same operations on each communicator in the same order.
 * Offload all: the downloads of reduced shards to the host, asynchronous (device.h), with at most dl_keep of them
 * in flight; a two-phase reduction downloads the result of its second phase. */
#ifndef FSC_OVERLAP_H
#define FSC_OVERLAP_H
#include "engine_impl.h"

typedef struct {
    fsc_comm_req *req;
    void *send, *recv;  /* temporaries of the reduction dtype (FSC_TAG_COMM), NULL when not needed */
    float *out;
    size_t nout;
    fsc_dtype dt;
    int accumulate;
    float *owned;       /* released at the finish (a gradient buffer handed over by the strategy), or NULL */
    float *clear;       /* zeroed at the finish (clear_n floats), or NULL */
    size_t clear_n;
    /* offload all (fsc_reduce_start_host): out is a device buffer of the reduction's own (released at the
     * finish), whose result the finish downloads into host, memory of hdev (added to it when host_accumulate) */
    float *host;
    fsc_device *hdev;
    int host_accumulate;
    /* two phases (fsc_reduce_start_gather): while then.c is set, req is the reduce-scatter into out (a piece of
     * the pending's own, nout floats); advanced, the piece is all-gathered over then.c into then.out (device
     * memory; with then.hdev host memory of it, as fsc_reduce_start_host's host), added when then.accumulate,
     * and the pending describes that all-gather (second set) */
    struct {
        fsc_comm *c;
        float *out;
        fsc_device *hdev;
        int accumulate;
    } then;
    int second;         /* the collective in flight is a second phase */
} fsc_reduce_pending;

/* Offload all: a reduced shard on its way to the host. */
typedef struct {
    fsc_copy *copy;
    float *dev;        /* the device shard the copy reads (FSC_TAG_GRADS of e->dev), released after it */
    float *host;       /* the host shard (memory of hdev) */
    float *tmp;        /* accumulating: the copy's host destination (FSC_TAG_COMM of hdev), added to host after it */
    fsc_device *hdev;
    size_t n;
} fsc_download_pending;

typedef struct {
    fsc_reduce_pending *v;
    int n, cap;
    fsc_download_pending *dl; /* downloads in flight, oldest first */
    int ndl, capdl;
    int dl_keep;              /* downloads left in flight when one starts (0: each is waited for at once) */
} fsc_reduce_queue;

/* Start fsc_engine_reduce(e, c, rs, in, out, n, accumulate) (engine_impl.h) without waiting for it. in must
 * stay unchanged and out unread until the finish. owned (may be NULL) is released at the finish; clear
 * (clear_n floats, may be NULL) is zeroed then. */
fsc_status fsc_reduce_start(fsc_engine *e, fsc_reduce_queue *q, fsc_comm *c, int rs, const float *in, float *out,
                            size_t n, int accumulate, float *owned, float *clear, size_t clear_n);
/* Offload all (docs/offload.md): the same reduction into a device buffer of its own (FSC_TAG_GRADS), whose
 * result the finish downloads into host (host memory of hdev), or adds to it there when accumulate (the axpy
 * the device's accumulation does): the bits of fsc_engine_reduce into host. owned as above. */
fsc_status fsc_reduce_start_host(fsc_engine *e, fsc_reduce_queue *q, fsc_comm *c, int rs, const float *in,
                                 float *host, fsc_device *hdev, size_t n, int accumulate, float *owned);
/* Offload all: start the download of the device shard dev (n floats, owned: released once copied) into host
 * (memory of hdev), or its addition to host when accumulate (a copy into a host buffer, then the axpy the
 * device's accumulation does); then finish the oldest downloads until at most q->dl_keep are in flight. */
fsc_status fsc_download_start(fsc_engine *e, fsc_reduce_queue *q, float *dev, float *host, fsc_device *hdev, size_t n,
                              int accumulate);
/* Hybrid sharding: reduce-scatter in (n floats) over c into a piece of the pending's own (n / |c| floats), then,
 * advanced (fsc_reduce_advance, or a drain), all-gather the piece over c2 into out (n / |c| x |c2| floats, the
 * sum when accumulate): the bits of fsc_engine_reduce(e, c, 1, in, piece, n, 0) followed by
 * fsc_comm_all_gather (and an axpy when accumulate). hdev NULL: out is device memory; else host memory of hdev
 * (offload all), the all-gather into a device buffer whose finish starts its download into out
 * (fsc_download_start; added there when accumulate). owned (may be NULL) is released when the reduce-scatter is
 * finished. */
fsc_status fsc_reduce_start_gather(fsc_engine *e, fsc_reduce_queue *q, fsc_comm *c, const float *in, fsc_comm *c2,
                                   float *out, fsc_device *hdev, size_t n, int accumulate, float *owned);
/* Move q on without waiting for what was started last: finish every reduction whose second phase was started
 * by an earlier call, then advance the oldest reductions still in their first phase until at most keep (>= 0)
 * remain in it (a two-phase one starts its second phase, a one-phase one is finished). With one-phase
 * reductions only, fsc_reduce_drain_to. Downloads they start may stay in flight. */
fsc_status fsc_reduce_advance(fsc_engine *e, fsc_reduce_queue *q, int keep);
/* Finish every reduction of q (both phases), oldest first, then every download; the first failure is returned
 * after all were waited for. */
fsc_status fsc_reduce_drain(fsc_engine *e, fsc_reduce_queue *q);
/* Finish the oldest reductions of q until at most keep (>= 0; less counts as 0) are in flight (the second
 * phases of those first started oldest first, then all waited for oldest first; downloads they start may stay
 * in flight). */
fsc_status fsc_reduce_drain_to(fsc_engine *e, fsc_reduce_queue *q, int keep);
/* Drain (errors ignored: the step failed already) and free the queue's arrays. */
void fsc_reduce_queue_free(fsc_engine *e, fsc_reduce_queue *q);

#endif
