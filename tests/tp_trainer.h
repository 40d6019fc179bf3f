/* The data x tensor-parallel trainer (tests/tp_trainer.c): a test oracle, not part of the library.
 * test_tp_3d.c and test_tp_3d_engine.c check the engine (parallel.h with tp > 1) against it; it is compiled
 * into the tests' own archive (libfsc_tests.a), never into libfsc. */
#ifndef FSC_TEST_TP_TRAINER_H
#define FSC_TEST_TP_TRAINER_H
#include <stdint.h>
#include "fsc/fsc.h"

/* ---- training with data x tensor parallelism ------------------------------------------------------------
 * The first composition, kept as a small independent oracle of the engine's (parallel.h, tp > 1): it
 * equals the engine with DDP over the data group and no pipeline bit for bit.
 * A tensor-parallel GPT on each tensor group, DDP over the data group: per step forward and backward with
 * dloss = 1 / (global_batch T) on this data rank's sequences, gradients summed over the data group in rank
 * order, optional clipping by the exact global norm (the tensor group's slices, replicated tensors
 * counted once), optimizer step; the same order as the engine (parallel.h), so dp x 1 equals DDP bit for
 * bit. Pipeline stages (pp > 1) are not supported with tensor parallelism yet. */
typedef struct {
    int tp, dp;               /* world = dp x tp (0: derive one from the world) */
    int sequence_parallel;
    float clip;               /* max global gradient norm; 0 = off */
} fsc_tp_train_opts;

typedef struct fsc_tp_trainer fsc_tp_trainer;

fsc_status fsc_tp_trainer_create(fsc_rank *r, const fsc_gpt_config *cfg, const fsc_tp_train_opts *o,
                                 const fsc_optim_config *oc, uint64_t seed, fsc_tp_trainer **out);
void fsc_tp_trainer_free(fsc_tp_trainer *t);
const fsc_layout *fsc_tp_trainer_layout(const fsc_tp_trainer *t);
fsc_tp_gpt *fsc_tp_trainer_model(fsc_tp_trainer *t);
/* One step. tokens/targets: this data rank's local_batch sequences (the same on every rank of its tensor
 * group); global_batch: over the data group. info->loss: the mean over the global batch, on every rank. */
fsc_status fsc_tp_trainer_step(fsc_tp_trainer *t, const int32_t *tokens, const int32_t *targets, int local_batch,
                               int global_batch, fsc_step_info *info);
/* This rank's traffic per group since creation or the last reset: tensor, data (either may be NULL). */
void fsc_tp_trainer_comm_stats(const fsc_tp_trainer *t, fsc_comm_stats *tensor, fsc_comm_stats *data);
void fsc_tp_trainer_reset_comm_stats(fsc_tp_trainer *t);

#endif
