/* Private: what checkpoints (lib/ckpt) see of an engine, and all they see. lib/ckpt includes this header, never
 * engine_impl.h: the engine's world, device, model, optimizer, options, seed and loss scaler, the checkpoint run
 * it continues and its trace (fsc_engine_ckpt_view); the tensors as files name them, what this rank holds and
 * where an optimizer state lives; and the engine's own refresh after a load (fsc_engine_after_load: the
 * strategy's after_load). engine_ckpt.c implements the view over the engine's state.
 * Not here: the step, the strategies' table, the groups (engine_impl.h). */
#ifndef FSC_ENGINE_CKPT_H
#define FSC_ENGINE_CKPT_H
#include <stddef.h>
#include <stdint.h>
#include "fsc/status.h"
#include "fsc/device.h"
#include "fsc/cluster.h"
#include "fsc/model.h"
#include "fsc/optim.h"
#include "fsc/parallel.h"
#include "fsc/trace.h"

/* ckpt.h's FSC_CKPT_RUN_ID, named here because lib/ckpt sits above the engine (ckpt_impl.h checks they agree) */
#define FSC_ENGINE_RUN_ID 33

typedef struct fsc_engine fsc_engine;

/* Elements [first, first+n) of tensor `tensor` that this rank holds: they live in optimizer segment
 * `seg` (fsc_optim_*: parameters and state) from element seg_off on. `write` marks the ranks that write
 * them into a checkpoint: exactly one rank of the world per element. */
typedef struct {
    int tensor;
    size_t first, n;
    int seg;
    size_t seg_off;
    int write;
} fsc_holding;

/* Streaming full tensors from their owners (stream.c), shared by the full-format checkpoint and the engine's own
 * weights file and full parameters. */
#define FSC_PIECE_CHUNK ((size_t)1 << 16) /* floats per bounded host or device transfer (256 KiB) */
/* One piece a rank writes: elements [first, first + n) of the full tensor t, held by world rank `rank`. */
typedef struct {
    int32_t t, rank;
    uint64_t first, n;
    uint32_t crc[4];  /* per state (a sharded checkpoint's: 0 params, 1.. optimizer states); unused elsewhere */
} fsc_piece;
/* Receives consecutive elements of a tensor: elements [first, first + n) in host memory. */
typedef fsc_status (*fsc_piece_sink)(void *ctx, uint64_t first, const float *host, size_t n);
/* Collective over the world: every rank's pieces, rank-major, on every rank (*out from malloc). */
fsc_status fsc_pieces_gather(fsc_engine *e, const fsc_piece *mine, int n, fsc_piece **out, int *nout);
/* Sort pieces by (t, first) and check that they tile every tensor exactly once (FSC_ERR_INTERNAL naming the
 * tensor otherwise). */
fsc_status fsc_pieces_check(fsc_engine *e, fsc_piece *r, int n);
/* This rank's holdings (fsc_engine_holdings) sorted by (tensor, first) (*out from malloc). */
fsc_status fsc_holdings_sorted(fsc_engine *e, fsc_holding **out, int *n);
/* In holdings sorted by (tensor, first): the index of the first with (tensor, first) >= (t, first). */
int fsc_holdings_at(const fsc_holding *h, int nh, int t, uint64_t first);
/* Device pointer of state `state` (0: parameters) of optimizer segment seg (on fsc_offload_seg_dev(e, state)). */
float *fsc_seg_ptr(fsc_engine *e, int state, int seg);
/* Collective over the world: the pieces of tensor t in state `state` (recs sorted by (t, first) as fsc_pieces_check
 * leaves them: every rank's on a receiver, at least this rank's own elsewhere) go from their owners to the nto world ranks `to` (increasing), each of which
 * passes them to sink in element order, one chunk (FSC_PIECE_CHUNK floats at most) at a time through host and,
 * for other ranks' pieces, device buffer dbuf (each as large as the largest chunk); h/nh: this rank's sorted
 * holdings. An owner sends straight from its segments (offloaded ones through dbuf). After a failure (a sink, a
 * copy) a rank keeps sending and receiving and returns its first error at the end. */
/* Whether this rank's masters or optimizer states are offloaded: its pieces then go out through a device chunk,
 * dbuf, which such an owner allocates before the stream's agreement (so that no failure comes mid-stream). */
int fsc_stream_owner_offloaded(const fsc_engine *e);
fsc_status fsc_stream_tensor(fsc_engine *e, const fsc_piece *recs, int nrecs, const fsc_holding *h, int nh,
                             int state, int t, const int *to, int nto, fsc_piece_sink sink, void *ctx, float *host,
                             float *dbuf);

/* The engine as a checkpoint sees it: pointers into the engine, valid while it lives. */
typedef struct {
    fsc_rank *r;                   /* the world: its rank, size and communicator */
    fsc_device *dev;               /* the rank's device */
    fsc_model *m;                  /* the model (with tensor parallelism this rank's slices) */
    fsc_optim *opt;                /* its segments hold the parameters and the optimizer's states */
    const fsc_optim_config *oc;
    const fsc_parallel_opts *po;
    uint64_t seed;
    int use_scaler;                /* the loss is scaled (fp16) */
    const fsc_loss_scaler *scaler; /* the engine's scaler (a load replaces it: fsc_engine_restore_scaler) */
    int skips_in_row;              /* the last steps skipped in a row (a load sets it: fsc_engine_restore_skips) */
    const char *run;               /* FSC_ENGINE_RUN_ID bytes: the checkpoint run the engine continues, "" until it
                                    * loads or saves one (fsc_engine_continue_run sets it) */
    fsc_trace *trace;              /* NULL: none */
} fsc_engine_ckpt;

/* A loaded checkpoint's loss scaler replaces the engine's when the engine scales the loss (else nothing): the
 * engine stays the scaler's one writer. */
void fsc_engine_restore_scaler(fsc_engine *e, const fsc_loss_scaler *s);
/* A loaded checkpoint's steps skipped in a row: the engine's max_skipped_steps counts on from them, as the run that
 * wrote it would have. */
void fsc_engine_restore_skips(fsc_engine *e, int64_t skipped_in_row);
/* A checkpoint loaded or saved: the engine continues its run id (FSC_ENGINE_RUN_ID bytes, NUL-terminated within
 * them) and the seed of that run's initialization (what its saves record) from now on; the one writer of the
 * engine's run id. */
void fsc_engine_continue_run(fsc_engine *e, const char *run, uint64_t seed);
/* The view of e; from a const engine (a save reads it), the pointers are only read through. */
fsc_engine_ckpt fsc_engine_ckpt_view(const fsc_engine *e);
/* Tensor i as weights files and checkpoints name and shape it: the model's, or with tensor parallelism the
 * full tensor's rather than this rank's slice. */
const fsc_param_info *fsc_engine_full_info(const fsc_engine *e, int i);
/* What this rank holds for checkpoints, as element ranges of the full tensors (the strategy's holdings,
 * mapped through tensor parallelism's slices); *out from malloc. */
fsc_status fsc_engine_holdings(fsc_engine *e, fsc_holding **out, int *n);
/* The device whose memory holds the optimizer's state `state` of every segment (0: the parameters, the
 * masters it steps; 1, 2: the moments) between steps: the rank's device, or the host when offloaded. */
fsc_device *fsc_offload_seg_dev(const fsc_engine *e, int state);
/* After a checkpoint loaded into the optimizer's segments: the strategy refreshes what it derives from them
 * (its after_load). Not collective; the caller agrees on the verdict. */
fsc_status fsc_engine_after_load(fsc_engine *e);

#endif
