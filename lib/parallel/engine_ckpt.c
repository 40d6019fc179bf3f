/* What checkpoints see of an engine (engine_ckpt.h): the view over its state, and the refresh after a load.
 * Not here: saving and loading (lib/ckpt), the tensors' full shapes and holdings (tensor.c, engine.c). */
#include <string.h>
#include "engine_impl.h"

fsc_engine_ckpt fsc_engine_ckpt_view(const fsc_engine *ce) {
    fsc_engine *e = (fsc_engine *)ce; /* (engine_ckpt.h: a const engine's view is only read through) */
    return (fsc_engine_ckpt){ .r = e->r, .dev = e->dev, .m = e->m, .opt = e->opt, .oc = &e->oc, .po = &e->po,
                              .seed = e->seed, .use_scaler = e->use_scaler, .scaler = &e->scaler,
                              .skips_in_row = e->skips_in_row, .run = e->ckpt_run, .trace = e->trace };
}

void fsc_engine_continue_run(fsc_engine *e, const char *run, uint64_t seed) {
    memcpy(e->ckpt_run, run, FSC_ENGINE_RUN_ID);
    e->ckpt_run[FSC_ENGINE_RUN_ID - 1] = 0;
    e->seed = seed;
}

fsc_status fsc_engine_after_load(fsc_engine *e) { return e->st->after_load ? e->st->after_load(e) : FSC_OK; }
