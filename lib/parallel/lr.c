/* The engine's learning rate (schedule.h): what its next optimizer steps use, recorded by checkpoints as the
 * optimizer configuration's lr. */
#include <math.h>
#include "engine_impl.h"
#include "fsc/schedule.h"

fsc_status fsc_engine_set_lr(fsc_engine *e, float lr) {
    FSC_CHECK_ARG(e);
    if (!(isfinite(lr) && lr >= 0.0f))
        return fsc_error(FSC_ERR_INVALID, "learning rate %g must be finite and >= 0", (double)lr);
    e->oc.lr = lr;
    fsc_optim_set_lr(e->opt, lr);
    return FSC_OK;
}

float fsc_engine_lr(const fsc_engine *e) { return e ? e->oc.lr : 0.0f; }
