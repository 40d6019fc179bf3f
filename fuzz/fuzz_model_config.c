/* libFuzzer harness for fsc_model_from_config (lib/model/model_config.c, compiled in under another name): the input
 * is a weights file's recorded model configuration (safetensors metadata, or the sampler's --model-config). A
 * refusal must say why and return no model; an accepted configuration is built on the CPU device when its model
 * is small (the builders' own checks run), and otherwise stops at the builder with the parsed sizes checked as
 * the parser promises (every size field >= 1). Build and run:
 * ci/fuzz.sh SECONDS fuzz/fuzz_model_config.c (or make fuzz). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "fsc/fsc.h"

/* The included parser calls these instead of the real builders, which build only models of bounded size. */
fsc_status fz_gpt_model_create(fsc_device *dev, const fsc_gpt_config *c, fsc_model **out);
fsc_status fz_llama_model_create(fsc_device *dev, const fsc_llama_config *c, fsc_model **out);
fsc_status fz_model_from_config(fsc_device *dev, const char *config, fsc_model **out);
#define fsc_model_from_config fz_model_from_config
#define fsc_gpt_model_create fz_gpt_model_create
#define fsc_llama_model_create fz_llama_model_create
#include "../lib/model/model_config.c"
#undef fsc_model_from_config
#undef fsc_gpt_model_create
#undef fsc_llama_model_create

#define FZ_MAX_PARAMS 2e5 /* a model the fuzzer may build: about 0.8 MB of fp32 parameters */

static fsc_status too_big(void) { return fsc_error(FSC_ERR_UNSUPPORTED, "fuzz: model too large to build here"); }

fsc_status fz_gpt_model_create(fsc_device *dev, const fsc_gpt_config *c, fsc_model **out) {
    if (c->layers < 1 || c->dim < 1 || c->heads < 1 || c->seq < 1 || c->vocab < 1) __builtin_trap();
    double d = c->dim, moe = c->moe_experts > 0 ? c->moe_experts : 1;
    double n = (double)c->vocab * d + (double)c->seq * d + (double)c->layers * (4.0 * d * d + 8.0 * d * d * moe);
    return n > FZ_MAX_PARAMS || c->seq > 4096 ? too_big() : fsc_gpt_model_create(dev, c, out);
}

fsc_status fz_llama_model_create(fsc_device *dev, const fsc_llama_config *c, fsc_model **out) {
    if (c->layers < 1 || c->dim < 1 || c->heads < 1 || c->kv_heads < 1 || c->ffn < 1 || c->seq < 1 || c->vocab < 1)
        __builtin_trap();
    double d = c->dim, moe = c->moe_experts > 0 ? c->moe_experts : 1;
    double n = 2.0 * (double)c->vocab * d + (double)c->layers * (4.0 * d * d + 3.0 * d * (double)c->ffn * moe);
    return n > FZ_MAX_PARAMS || c->seq > 4096 ? too_big() : fsc_llama_model_create(dev, c, out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static fsc_device *dev; /* one CPU device for the whole campaign */
    if (!dev && fsc_device_create("cpu", NULL, &dev) != FSC_OK) __builtin_trap();
    char *text = malloc(size + 1); /* its own allocation: a read past the end is caught */
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    fsc_model *m = (fsc_model *)1;
    fsc_status s = fz_model_from_config(dev, text, &m);
    if (s != FSC_OK) {
        if (m || !fsc_last_error()[0]) __builtin_trap(); /* a refusal returns no model and says why */
    } else {
        if (!m || fsc_model_num_params(m) == 0) __builtin_trap();
        fsc_model_free(m);
    }
    free(text);
    return 0;
}
