/* Learning-rate schedules and the engine's learning rate.
 * A schedule is a pure function of the step: fsc_lr_at(s, step) is the learning rate of step `step`
 * (0-based: the first optimizer step of a run is step 0), so a run resumed at step k computes the same rates
 * as the uninterrupted run without any state of its own. The kinds (nanoGPT's and llm.c's):
 *   constant: lr (after the warmup);
 *   cosine:   linear warmup, then min_lr + (lr - min_lr) x 0.5 x (1 + cos(pi x r)) with
 *             r = (step - warmup) / (total - warmup), then min_lr from step `total` on;
 *   linear:   linear warmup, then min_lr + (lr - min_lr) x (1 - r), then min_lr.
 * Warmup (every kind): steps 0 .. warmup-1 take lr x (step + 1) / warmup (llm.c's ramp: the first step
 * already moves, step warmup-1 reaches lr). Computed in double, rounded once to float; after the warmup a
 * constant schedule returns lr itself (bit for bit the fixed rate).
 * The engine's rate (fsc_engine_set_lr) is what its next optimizer steps use; checkpoints record it
 * (metadata "optimizer.lr") and fsc_ckpt_load restores it, so a run that sets its own rates resumes with
 * the rate of its last step until it sets the next one. */
#ifndef FSC_SCHEDULE_H
#define FSC_SCHEDULE_H
#include "export.h"
#include <stdint.h>
#include "status.h"

FSC_BEGIN_DECLS

typedef enum { FSC_LR_CONSTANT = 0, FSC_LR_COSINE, FSC_LR_LINEAR } fsc_lr_kind;

typedef struct {
    fsc_lr_kind kind;
    float lr;        /* the peak rate (after the warmup) */
    float min_lr;    /* cosine, linear: the rate at step `total` and after (<= lr); constant: unused */
    int64_t warmup;  /* steps of linear warmup (0: none) */
    int64_t total;   /* cosine, linear: the step the decay ends at (> warmup); the run's steps */
} fsc_lr_schedule;

/* FSC_OK, or FSC_ERR_INVALID naming the field: rates finite and >= 0, min_lr <= lr, warmup >= 0, and for a
 * decay total > warmup. */
fsc_status fsc_lr_schedule_validate(const fsc_lr_schedule *s);
/* The rate of step `step` (>= 0; a negative step is step 0). s must be valid. */
float fsc_lr_at(const fsc_lr_schedule *s, int64_t step);
/* "constant", "cosine", "linear"; parse accepts those names. */
const char *fsc_lr_kind_name(fsc_lr_kind k);
fsc_status fsc_lr_kind_parse(const char *name, fsc_lr_kind *out);

struct fsc_engine;
/* The learning rate the engine's next optimizer steps use (every rank sets the same). FSC_ERR_INVALID for a
 * rate that is not finite and >= 0 (the rate is unchanged). */
fsc_status fsc_engine_set_lr(struct fsc_engine *e, float lr);
float fsc_engine_lr(const struct fsc_engine *e);

FSC_END_DECLS

#endif
