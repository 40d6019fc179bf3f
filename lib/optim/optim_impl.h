/* The gradient checks' shared pass (gradnorm.c): the non-finite vote and the norm both start from the local max
 * |g| over the same segments (local_absmax's three floats: the max, a NaN flag, an inf flag), so a caller that
 * runs both on the same, unchanged segments takes it from the vote to the norm and reads the gradients once
 * less. NULL local_max: the function computes it, as its public form (fsc/optim.h) does. */
#ifndef FSC_OPTIM_IMPL_H
#define FSC_OPTIM_IMPL_H
#include "fsc/optim.h"

/* fsc_nonfinite_vote; local_max (3 floats, or NULL) receives this rank's local max and flags. */
fsc_status fsc_nonfinite_vote_local_max(fsc_device *dev, fsc_comm *comm, float *const *segs, const size_t *lens,
                                        int nseg, int mine, int *found, float *local_max);
/* fsc_grad_norm from this rank's local max and flags over the same segments (or NULL: computed here). */
fsc_status fsc_grad_norm_local_max(fsc_device *dev, fsc_comm *comm, float *const *segs, const size_t *lens,
                                   int nseg, const float *local_max, double *norm);

#endif
