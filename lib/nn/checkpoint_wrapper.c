/* Activation checkpointing for any module: keep the input of a call (on the device or in host memory),
 * run the module's forward again before its backward. See fsc/checkpoint_wrapper.h.
 * Not here: the sequential model's layer checkpointing (lib/layers/seq_run.c) and the pipeline's stage
 * recomputation (lib/parallel/pipe.c). */
#include <stdint.h>
#include <stdlib.h>
#include "fsc/checkpoint_wrapper.h"

struct fsc_checkpoint_wrapper {
    fsc_device *dev;
    size_t n;          /* floats of the input */
    int offload;
    float *dev_inp;    /* the kept input (no offload) or its copy during recomputation (offload) */
    float *host_inp;   /* offload: the kept input */
    int kept;
};

fsc_status fsc_checkpoint_wrapper_create(fsc_device *dev, size_t inp_floats, int offload,
                                         fsc_checkpoint_wrapper **out) {
    FSC_CHECK_ARG(out);
    *out = NULL;
    FSC_CHECK_ARG(dev);
    if (inp_floats == 0) return fsc_error(FSC_ERR_INVALID, "checkpoint_wrapper: the input has no elements");
    if (inp_floats > SIZE_MAX / sizeof(float)) /* its bytes wrapped: a forward kept a few bytes of the input */
        return fsc_error(FSC_ERR_INVALID, "checkpoint_wrapper: an input of %zu floats is past any memory", inp_floats);
    fsc_checkpoint_wrapper *w = calloc(1, sizeof *w);
    if (!w) return fsc_error(FSC_ERR_NOMEM, "checkpoint_wrapper: out of memory");
    w->dev = dev;
    w->n = inp_floats;
    w->offload = offload != 0;
    *out = w;
    return FSC_OK;
}

fsc_status fsc_checkpoint_wrapper_forward(fsc_checkpoint_wrapper *w, fsc_module_forward_fn fn, void *ctx,
                                          float *out, const float *inp) {
    FSC_CHECK_ARG(w);
    FSC_CHECK_ARG(fn);
    FSC_CHECK_ARG(out);
    FSC_CHECK_ARG(inp);
    if (w->kept)
        return fsc_error(FSC_ERR_STATE, "checkpoint_wrapper forward: an input is still kept (expected state "
                         "released, found forward done): call release after the backward");
    FSC_TRY(fn(ctx, out, inp));
    size_t bytes = w->n * sizeof(float);
    if (w->offload) {
        if (!w->host_inp && !(w->host_inp = malloc(bytes)))
            return fsc_error(FSC_ERR_NOMEM, "checkpoint_wrapper: out of host memory for %zu bytes", bytes);
        FSC_TRY(fsc_device_download(w->dev, w->host_inp, inp, bytes));
    } else {
        FSC_TRY(fsc_device_alloc(w->dev, FSC_TAG_ACTS, bytes, (void **)&w->dev_inp));
        fsc_status s = fsc_device_copy(w->dev, w->dev_inp, inp, bytes);
        if (s != FSC_OK) {
            fsc_checkpoint_wrapper_release(w);
            return s;
        }
    }
    w->kept = 1;
    return FSC_OK;
}

fsc_status fsc_checkpoint_wrapper_recompute(fsc_checkpoint_wrapper *w, fsc_module_forward_fn fn, void *ctx,
                                            const float **inp) {
    FSC_CHECK_ARG(w);
    FSC_CHECK_ARG(fn);
    if (!w->kept)
        return fsc_error(FSC_ERR_STATE, "checkpoint_wrapper recompute: no kept input (expected state forward done, "
                         "found released): run forward first");
    if (w->offload && !w->dev_inp) {
        size_t bytes = w->n * sizeof(float);
        FSC_TRY(fsc_device_alloc(w->dev, FSC_TAG_ACTS, bytes, (void **)&w->dev_inp));
        FSC_TRY(fsc_device_upload(w->dev, w->dev_inp, w->host_inp, bytes));
    }
    FSC_TRY(fn(ctx, NULL, w->dev_inp));
    if (inp) *inp = w->dev_inp;
    return FSC_OK;
}

void fsc_checkpoint_wrapper_release(fsc_checkpoint_wrapper *w) {
    if (!w) return;
    fsc_device_release(w->dev, w->dev_inp);
    w->dev_inp = NULL;
    w->kept = 0;
}

size_t fsc_checkpoint_wrapper_device_bytes(const fsc_checkpoint_wrapper *w) {
    return w && w->dev_inp ? w->n * sizeof(float) : 0;
}

void fsc_checkpoint_wrapper_free(fsc_checkpoint_wrapper *w) {
    if (!w) return;
    fsc_checkpoint_wrapper_release(w);
    free(w->host_inp);
    free(w);
}
