/* Optimizers, gradient clipping and loss scaling.
 * An optimizer steps a list of flat segments (param, grad, n): a single-rank model registers its one
 * flat buffer; FSDP registers each unit's local shard. State (moments) is allocated per segment under
 * FSC_TAG_OPTIM. Weight decay applies to every element of a segment (as torch.optim.AdamW on all parameters)
 * except the ranges fsc_optim_no_decay excludes: the engine (parallel.h) excludes the tensors that
 * fsc_param_decays (model.h) does not decay, unless the configuration says decay_all. */
#ifndef FSC_OPTIM_H
#define FSC_OPTIM_H
#include "export.h"
#include <stddef.h>
#include <stdint.h>
#include "status.h"
#include "device.h"
#include "comm.h"

FSC_BEGIN_DECLS

typedef enum { FSC_OPT_SGD = 0, FSC_OPT_ADAMW } fsc_optim_kind;

typedef struct {
    fsc_optim_kind kind;
    float lr;
    float momentum;      /* SGD */
    float weight_decay;  /* SGD: L2 added to the gradient; AdamW: decoupled */
    float beta1, beta2, eps; /* AdamW (defaults 0.9, 0.999, 1e-8 when all zero; eps > 0 otherwise) */
    int decay_all;       /* engines: 1 decays every tensor; 0 (default) the tensors fsc_param_decays names (model.h:
                          * matrices, not biases, norms or embeddings) */
} fsc_optim_config;
/* The defaults of torch.optim.AdamW: lr 1e-3, betas 0.9 and 0.999, eps 1e-8, weight decay 1e-2. */
fsc_optim_config fsc_optim_config_default(void);

typedef struct fsc_optim fsc_optim;

fsc_status fsc_optim_create(fsc_device *dev, const fsc_optim_config *cfg, fsc_optim **out);
/* Register a segment; its state is zeroed. Returns the segment index in *idx (may be NULL). */
fsc_status fsc_optim_add(fsc_optim *o, float *param, const float *grad, size_t n, int *idx);
/* Apply no weight decay to elements [off, off + n) of segment idx (the other elements keep it); ranges may come in
 * any order and overlap. Each element's arithmetic is the same as in a segment without exclusions. */
fsc_status fsc_optim_no_decay(fsc_optim *o, int idx, size_t off, size_t n);
/* Re-point a segment (the same size) to other buffers. */
fsc_status fsc_optim_rebind(fsc_optim *o, int idx, float *param, const float *grad);
/* One step over every segment; increments the step count. */
fsc_status fsc_optim_step(fsc_optim *o);
/* The same step one segment at a time (offload's pipeline, docs/offload.md): fsc_optim_step_segment for every
 * segment (in any order, each once), then fsc_optim_step_end, which increments the step count; the bits of
 * fsc_optim_step. A segment index outside [0, segments) (or o NULL) is FSC_ERR_INVALID; nothing checks that each
 * segment was stepped once. After a failure, as after a failed fsc_optim_step, the segments already stepped keep
 * their update: do not call fsc_optim_step_end. fsc_optim_step_end(NULL) does nothing. */
fsc_status fsc_optim_step_segment(fsc_optim *o, int seg);
void fsc_optim_step_end(fsc_optim *o);
int64_t fsc_optim_steps(const fsc_optim *o);
void fsc_optim_set_steps(fsc_optim *o, int64_t steps);
void fsc_optim_set_lr(fsc_optim *o, float lr); /* lr finite and >= 0; any other value leaves the rate as it is */
int fsc_optim_num_segments(const fsc_optim *o);
/* Device pointers to a segment's state: state 0 = momentum buffer (SGD) or m (AdamW), 1 = v (AdamW). */
int fsc_optim_num_states(const fsc_optim *o);   /* 0 (plain SGD), 1 (SGD with momentum) or 2 (AdamW) */
float *fsc_optim_state(fsc_optim *o, int seg, int which);
/* Device pointer to a segment's parameters (what the optimizer steps: the fp32 master). */
float *fsc_optim_param(fsc_optim *o, int seg);
/* Device pointer to the gradient a segment is stepped with. */
const float *fsc_optim_grad(const fsc_optim *o, int seg);
size_t fsc_optim_segment_len(const fsc_optim *o, int seg);
void fsc_optim_free(fsc_optim *o);

/* The global L2 norm of gradient segments. Exact and order-independent: squares are summed as 128-bit
 * fixed-point integers relative to the global max |g|, so any split of the same gradient over segments
 * and ranks gives the same bits. comm: the group over which the segments are split (NULL: all local;
 * each element must be held by exactly one rank of comm, padding must be zero). */
fsc_status fsc_grad_norm(fsc_device *dev, fsc_comm *comm, float *const *segs, const size_t *lens, int nseg,
                         double *norm);
/* Clip: if norm > max_norm, scale every segment by max_norm / (norm + 1e-6). Returns the norm. */
fsc_status fsc_grad_clip(fsc_device *dev, fsc_comm *comm, float *const *segs, const size_t *lens, int nseg,
                         float max_norm, double *norm);

/* Dynamic loss scaling for f16 (PyTorch GradScaler semantics, with a floor as DeepSpeed's min_loss_scale:
 * GradScaler backs off without bound, and a run whose every step overflows reaches a scale of 0). */
typedef struct {
    float scale;          /* current scale (default 65536) */
    float growth_factor;  /* 2 */
    float backoff_factor; /* 0.5 */
    int growth_interval;  /* 2000 */
    int good_steps;       /* steps since the last overflow */
    int64_t skipped;      /* steps skipped so far */
    float min_scale;      /* the scale never backs off below this (init: 1; 0 or less: FLT_MIN, never 0) */
} fsc_loss_scaler;

void fsc_loss_scaler_init(fsc_loss_scaler *s, float init_scale, int growth_interval);
/* Whether any gradient element is inf/NaN on any rank of comm (NULL: local); all ranks get the same answer. */
fsc_status fsc_grads_nonfinite(fsc_device *dev, fsc_comm *comm, float *const *segs, const size_t *lens,
                               int nseg, int *found);
/* The same vote with a verdict of the caller's own (e.g. 2 when its loss is not finite): every rank of comm
 * receives *found = the largest over the ranks of max(mine, 1 if any of its elements is inf/NaN else 0).
 * One MAX all-reduce of one float, as fsc_grads_nonfinite (which is this with mine = 0). */
fsc_status fsc_nonfinite_vote(fsc_device *dev, fsc_comm *comm, float *const *segs, const size_t *lens,
                              int nseg, int mine, int *found);
/* After a step's gradients: found != 0 -> skip and back off (not below min_scale; a scale already below it,
 * as a checkpoint's under a higher floor, is kept, never raised); else count and maybe grow. */
void fsc_loss_scaler_update(fsc_loss_scaler *s, int found);

FSC_END_DECLS

#endif
