/* Activation checkpointing for any module (FairScale's checkpoint_wrapper), outside pipelines too.
 * A checkpointed call runs the module's forward and keeps only its input; before the module's backward,
 * fsc_checkpoint_wrapper_recompute runs the same forward again on that input (the same kernels on the same
 * values: the same bits), rebuilding the record the backward needs. The module's records can therefore
 * share one area across every checkpointed call (one layer's worth of saved activations for a whole stack).
 * With offload, the kept input lives in host memory and the device holds a copy only from the
 * recomputation until release.
 *
 *   fsc_checkpoint_wrapper_forward(w[l], block_fwd, &ctx[l], x[l + 1], x[l]);      // for l = 0 .. n-1
 *   for (l = n - 1; l >= 0; l--) {
 *       const float *inp;
 *       fsc_checkpoint_wrapper_recompute(w[l], block_fwd, &ctx[l], &inp);          // the record again
 *       ...the module's backward, reading inp...
 *       fsc_checkpoint_wrapper_release(w[l]);
 *   }
 * The sequential model's records (layers.h; the GPT's and the Llama's) have the same mechanism built in for their
 * layers (model.h's checkpoint, offload_inputs); the pipeline recomputes whole stages (parallel.h pipe_checkpoint). */
#ifndef FSC_CHECKPOINT_WRAPPER_H
#define FSC_CHECKPOINT_WRAPPER_H
#include "export.h"
#include <stddef.h>
#include "status.h"
#include "device.h"

FSC_BEGIN_DECLS

/* The wrapped module's forward: out = module(inp), its record written where ctx says. out is NULL in the
 * recomputation (a module may then skip work that only produces the output). */
typedef fsc_status (*fsc_module_forward_fn)(void *ctx, float *out, const float *inp);

typedef struct fsc_checkpoint_wrapper fsc_checkpoint_wrapper;

/* A wrapper for calls whose input has inp_floats floats (device memory of dev). offload: keep the input
 * in host memory. */
fsc_status fsc_checkpoint_wrapper_create(fsc_device *dev, size_t inp_floats, int offload,
                                         fsc_checkpoint_wrapper **out);
/* fn(ctx, out, inp), keeping a copy of inp (FSC_TAG_ACTS on the device, or host memory with offload). The
 * caller may overwrite inp afterwards. FSC_ERR_STATE if an input is still kept (release first). */
fsc_status fsc_checkpoint_wrapper_forward(fsc_checkpoint_wrapper *w, fsc_module_forward_fn fn, void *ctx,
                                          float *out, const float *inp);
/* fn(ctx, NULL, input) on the kept input, which *inp points to (device memory, valid until release). */
fsc_status fsc_checkpoint_wrapper_recompute(fsc_checkpoint_wrapper *w, fsc_module_forward_fn fn, void *ctx,
                                            const float **inp);
/* Drop the kept input (after the module's backward). */
void fsc_checkpoint_wrapper_release(fsc_checkpoint_wrapper *w);
/* Device bytes the wrapper holds now. */
size_t fsc_checkpoint_wrapper_device_bytes(const fsc_checkpoint_wrapper *w);
void fsc_checkpoint_wrapper_free(fsc_checkpoint_wrapper *w);

FSC_END_DECLS

#endif
