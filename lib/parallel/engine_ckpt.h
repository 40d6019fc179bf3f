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
    const char *run;               /* FSC_ENGINE_RUN_ID bytes: the checkpoint run the engine continues, "" until it
                                    * loads or saves one (fsc_engine_continue_run sets it) */
    fsc_trace *trace;              /* NULL: none */
} fsc_engine_ckpt;

/* A loaded checkpoint's loss scaler replaces the engine's when the engine scales the loss (else nothing): the
 * engine stays the scaler's one writer. */
void fsc_engine_restore_scaler(fsc_engine *e, const fsc_loss_scaler *s);
/* A checkpoint loaded or saved: the engine continues its run id (FSC_ENGINE_RUN_ID bytes, NUL-terminated within
 * them) from now on; the one writer of the engine's run id. */
void fsc_engine_continue_run(fsc_engine *e, const char *run);
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
