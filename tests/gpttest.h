/* Shared by the GPT tests: a model bound to flat parameter and gradient buffers on a device, initialised
 * from the keyed RNG, gradients zeroed. */
#ifndef FSC_GPTTEST_H
#define FSC_GPTTEST_H
#include <stdlib.h>
#include "testutil.h"

typedef struct {
    fsc_device *dev;
    fsc_gpt *m;
    float *params, *grads; /* flat, device */
    size_t P;
} model;

static inline void model_init(model *md, fsc_device *dev, const fsc_gpt_config *c, uint64_t seed) {
    md->dev = dev;
    assert_ok(fsc_gpt_create(dev, c, &md->m));
    md->P = fsc_gpt_num_params(c);
    assert_ok(fsc_device_alloc(dev, FSC_TAG_PARAMS, md->P * sizeof(float), (void **)&md->params));
    assert_ok(fsc_device_alloc(dev, FSC_TAG_GRADS, md->P * sizeof(float), (void **)&md->grads));
    fsc_gpt_bind_flat(md->m, md->params, md->grads);
    for (int i = 0; i < md->m->n_tensors; i++) {
        size_t n = md->m->info[i].numel;
        float *h = malloc(n * sizeof(float));
        if (!h) fail_msg("out of memory");
        fsc_gpt_init_values(c, seed, i, 0, n, h);
        assert_ok(fsc_device_upload(dev, md->m->param[i], h, n * sizeof(float)));
        free(h);
    }
    assert_ok(fsc_device_memset(dev, md->grads, 0, md->P * sizeof(float)));
}

static inline void model_free(model *md) {
    fsc_device_release(md->dev, md->params);
    fsc_device_release(md->dev, md->grads);
    fsc_gpt_free(md->m);
}

#endif
