/* The built-in models from their configuration text (generate.h's fsc_model_from_config): the GPT-2 (gpt.h; no
 * "family" or "gpt2") and the Llama (llama.h; "family":"llama"), with every field checked as a number of its range.
 * A program that holds only a weights file (the sampler) builds the model the file records this way.
 * Not here: checking a recorded configuration against a model (gpt_model.c, llama.c). */
#include <math.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "fsc/generate.h"
#include "fsc/gpt.h"
#include "fsc/llama.h"

static const cJSON *field(const cJSON *o, const char *key) { return cJSON_GetObjectItemCaseSensitive(o, key); }

/* An integer field in [lo, 2^31 - 1]; missing gives dflt when optional. */
static fsc_status get_int(const cJSON *o, const char *key, int lo, int optional, int dflt, int *out) {
    const cJSON *x = field(o, key);
    if (!x && optional) return *out = dflt, FSC_OK;
    if (!cJSON_IsNumber(x)) return fsc_error(FSC_ERR_FORMAT, "model configuration: %s is missing or not a number", key);
    double v = x->valuedouble;
    if (!(v >= lo && v <= 2147483647.0) || v != floor(v))
        return fsc_error(FSC_ERR_FORMAT, "model configuration: %s = %.17g is not an integer in [%d, 2147483647]", key,
                         v, lo);
    *out = (int)v;
    return FSC_OK;
}

static fsc_status get_float(const cJSON *o, const char *key, int optional, float dflt, float *out) {
    const cJSON *x = field(o, key);
    if (!x && optional) return *out = dflt, FSC_OK;
    if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble) || !isfinite((float)x->valuedouble))
        return fsc_error(FSC_ERR_FORMAT, "model configuration: %s is missing or not a finite number", key);
    *out = (float)x->valuedouble;
    return FSC_OK;
}

static fsc_status make_gpt(fsc_device *dev, const cJSON *o, fsc_model **out) {
    fsc_gpt_config c = { 0 };
    FSC_TRY(get_int(o, "layers", 1, 0, 0, &c.layers));
    FSC_TRY(get_int(o, "dim", 1, 0, 0, &c.dim));
    FSC_TRY(get_int(o, "heads", 1, 0, 0, &c.heads));
    FSC_TRY(get_int(o, "seq", 1, 0, 0, &c.seq));
    FSC_TRY(get_int(o, "vocab", 1, 0, 0, &c.vocab));
    FSC_TRY(get_int(o, "moe_experts", 0, 1, 0, &c.moe_experts));
    FSC_TRY(get_int(o, "moe_top_k", 0, 1, 0, &c.moe_top_k));
    FSC_TRY(get_int(o, "moe_every", 0, 1, 0, &c.moe_every));
    FSC_TRY(get_float(o, "moe_capacity", 1, 0.0f, &c.moe_capacity));
    FSC_TRY(get_float(o, "moe_aux", 1, 0.0f, &c.moe_aux));
    return fsc_gpt_model_create(dev, &c, out);
}

static fsc_status make_llama(fsc_device *dev, const cJSON *o, fsc_model **out) {
    fsc_llama_config c = fsc_llama_config_default();
    FSC_TRY(get_int(o, "layers", 1, 0, 0, &c.layers));
    FSC_TRY(get_int(o, "dim", 1, 0, 0, &c.dim));
    FSC_TRY(get_int(o, "heads", 1, 0, 0, &c.heads));
    FSC_TRY(get_int(o, "kv_heads", 1, 1, c.heads, &c.kv_heads));
    FSC_TRY(get_int(o, "ffn", 1, 1, fsc_llama_default_ffn(c.dim), &c.ffn));
    FSC_TRY(get_int(o, "seq", 1, 0, 0, &c.seq));
    FSC_TRY(get_int(o, "vocab", 1, 0, 0, &c.vocab));
    FSC_TRY(get_float(o, "rope_theta", 1, c.rope_theta, &c.rope_theta));
    FSC_TRY(get_float(o, "norm_eps", 1, c.norm_eps, &c.norm_eps));
    FSC_TRY(get_int(o, "moe_experts", 0, 1, 0, &c.moe_experts)); /* an MoE Llama's record only (llama.h) */
    FSC_TRY(get_int(o, "moe_top_k", 0, 1, 0, &c.moe_top_k));
    FSC_TRY(get_int(o, "moe_every", 0, 1, 0, &c.moe_every));
    FSC_TRY(get_float(o, "moe_capacity", 1, 0.0f, &c.moe_capacity));
    FSC_TRY(get_float(o, "moe_aux", 1, 0.0f, &c.moe_aux));
    return fsc_llama_model_create(dev, &c, out);
}

fsc_status fsc_model_from_config(fsc_device *dev, const char *config, fsc_model **out) {
    FSC_CHECK_ARG(out);
    *out = NULL;
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(config);
    cJSON *o = cJSON_Parse(config);
    fsc_status s;
    const cJSON *fam = cJSON_IsObject(o) ? field(o, "family") : NULL;
    if (!cJSON_IsObject(o))
        s = fsc_error(FSC_ERR_FORMAT, "model configuration is not a JSON object: %.200s", config);
    else if (fam && !cJSON_IsString(fam))
        s = fsc_error(FSC_ERR_FORMAT, "model configuration: family is not a string");
    else if (!fam || !strcmp(fam->valuestring, "gpt2"))
        s = field(o, "layers") ? make_gpt(dev, o, out)
                               : fsc_error(FSC_ERR_FORMAT, "model configuration names no built-in model (neither "
                                           "a GPT-2's fields nor a family): %.200s", config);
    else if (!strcmp(fam->valuestring, "llama"))
        s = make_llama(dev, o, out);
    else
        s = fsc_error(FSC_ERR_FORMAT, "model configuration: unknown family '%.40s' (built-in: gpt2, llama)",
                      fam->valuestring);
    cJSON_Delete(o);
    return s;
}
