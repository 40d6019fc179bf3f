/* libFuzzer harness for the check of a recorded model configuration against a model's own:
 * fsc_llama_config_check_json (first byte even) and fsc_gpt_config_check_json (odd), the text a checkpoint or a
 * weights file records ("model"), against a small valid configuration of that family (the byte's bit 1 picks a
 * mixture-of-experts Llama or a padded GPT vocabulary, so both kinds of fields are compared). The rest of the
 * input (up to a NUL) is the recorded text. Checks beyond "no crash": a refusal is FSC_ERR_INVALID or
 * FSC_ERR_FORMAT with a message; an accepted text is a JSON object whose family is the model's ("llama"; the GPT:
 * none or "gpt2") and, for the Llama, holds every field of the model's own text with the same value (numbers as
 * the floats they set; moe_top_k, moe_every and moe_capacity 0 as 1, their defaults) and no other; the model's own text is accepted.
 * Build and run: ci/fuzz.sh SECONDS fuzz/fuzz_config_check.c (or make fuzz). */
#include <cjson/cJSON.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "fsc/fsc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A Llama's moe_top_k, moe_every and moe_capacity of 0 are 1 (llama.h): the value as the model takes it. */
static double taken(const cJSON *x) {
    const int one = x->string && (!strcmp(x->string, "moe_top_k") || !strcmp(x->string, "moe_every") ||
                                  !strcmp(x->string, "moe_capacity"));
    return one && x->valuedouble == 0 ? 1.0 : x->valuedouble;
}

static int same_value(const cJSON *x, const cJSON *y) {
    if (cJSON_IsNumber(x)) {
        if (!cJSON_IsNumber(y)) return 0;
        double a = taken(x), b = taken(y); /* as floats, where they are in float's range */
        return fabs(a) <= FLT_MAX && fabs(b) <= FLT_MAX ? (float)a == (float)b : a == b;
    }
    return cJSON_Compare(x, y, 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    char *text = malloc(size);
    if (!text) abort();
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    const int llama = data[0] % 2 == 0, variant = data[0] >> 1 & 1;
    char own[1024];
    fsc_status s;
    fsc_clear_error();
    if (llama) {
        fsc_llama_config c = fsc_llama_config_default();
        c.layers = 2, c.dim = 64, c.heads = 4, c.kv_heads = 2, c.ffn = 128, c.seq = 32, c.vocab = 256;
        if (variant) c.moe_experts = 4, c.moe_top_k = 2, c.moe_every = 1;
        fsc_llama_config_json(&c, own, sizeof own);
        if (fsc_llama_config_check_json(&c, own) != FSC_OK) __builtin_trap();
        s = fsc_llama_config_check_json(&c, text);
    } else {
        fsc_gpt_config c = fsc_gpt_config_default();
        c.layers = 2, c.dim = 64, c.heads = 4, c.seq = 32, c.vocab = 250;
        if (variant) c.padded_vocab = 256;
        fsc_gpt_config_json(&c, own, sizeof own);
        if (fsc_gpt_config_check_json(&c, own) != FSC_OK) __builtin_trap();
        s = fsc_gpt_config_check_json(&c, text);
    }
    cJSON *rec = cJSON_Parse(text), *mine = cJSON_Parse(own);
    if (!mine) __builtin_trap();
    if (s != FSC_OK) {
        if ((s != FSC_ERR_INVALID && s != FSC_ERR_FORMAT) || !fsc_last_error()[0]) __builtin_trap();
    } else {
        if (!cJSON_IsObject(rec)) __builtin_trap();
        const cJSON *fam = cJSON_GetObjectItemCaseSensitive(rec, "family"), *x;
        if (llama ? !(cJSON_IsString(fam) && !strcmp(fam->valuestring, "llama"))
                  : fam && !(cJSON_IsString(fam) && !strcmp(fam->valuestring, "gpt2")))
            __builtin_trap();
        if (llama) {
            cJSON_ArrayForEach(x, mine) if (!same_value(x, cJSON_GetObjectItemCaseSensitive(rec, x->string)))
                __builtin_trap();
            cJSON_ArrayForEach(x, rec) if (!cJSON_GetObjectItemCaseSensitive(mine, x->string)) __builtin_trap();
        }
    }
    cJSON_Delete(rec), cJSON_Delete(mine);
    free(text);
    return 0;
}
