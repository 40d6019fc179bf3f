/* The GPT's strict check of a checkpoint's parameters against the configuration it records (model.h's
 * check_tensors, and fsc_gpt_check_tensors for readers without a model, such as ckpt_tool verify): a recorded
 * configuration that is the GPT's ("layers" and no key but the GPT's, as fsc_gpt_config_json writes it) alone
 * describes every tensor, so each parameter must be one of its tensors, once, with its shape.
 * Not here: whether the configuration loads into a given GPT (gpt_model.c's config_check), or the optimizer
 * states (the checkpoint checks those against their parameters for every model). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "fsc/gpt.h"
#include "fsc/tensor.h"
#include "io/json_lock.h" /* fsc_json_parse: cJSON under the library's lock */

static const cJSON *field(const cJSON *o, const char *key) { return cJSON_GetObjectItemCaseSensitive(o, key); }

/* Whether a recorded configuration is the GPT's: "layers" and no key but its own. Any other model's (the
 * Llama's, a sequential model's, a program's own) is text only that model reads, even with a "layers" key. */
static int gpt_record(const cJSON *mo) {
    static const char *const keys[] = { "layers", "dim", "heads", "seq", "vocab", "moe_experts", "moe_top_k",
                                        "moe_every", "moe_capacity", "moe_aux", "padded_vocab" };
    if (!field(mo, "layers")) return 0;
    for (const cJSON *x = mo->child; x; x = x->next) {
        int known = 0;
        for (size_t k = 0; k < sizeof keys / sizeof *keys && !known; k++)
            known = x->string && !strcmp(x->string, keys[k]);
        if (!known) return 0;
    }
    return 1;
}

/* An integer in [lo, 2^31 - 1]. */
static fsc_status get_i32(const cJSON *o, const char *key, int lo, int *out) {
    const cJSON *x = field(o, key);
    if (!cJSON_IsNumber(x)) return fsc_error(FSC_ERR_FORMAT, "model.%s is missing or not a number", key);
    double v = x->valuedouble;
    if (!(v >= lo && v <= 2147483647.0) || v != floor(v))
        return fsc_error(FSC_ERR_FORMAT, "model.%s = %.17g is not an integer in [%d, 2147483647]", key, v, lo);
    *out = (int)v;
    return FSC_OK;
}

static fsc_status get_float(const cJSON *o, const char *key, float *out) {
    const cJSON *x = field(o, key);
    if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble) || !isfinite((float)x->valuedouble))
        return fsc_error(FSC_ERR_FORMAT, "model.%s is missing or not a finite number", key);
    *out = (float)x->valuedouble;
    return FSC_OK;
}

static fsc_status read_config(const cJSON *mo, fsc_gpt_config *c) {
    FSC_TRY(get_i32(mo, "layers", 1, &c->layers));
    FSC_TRY(get_i32(mo, "dim", 1, &c->dim));
    FSC_TRY(get_i32(mo, "heads", 1, &c->heads));
    FSC_TRY(get_i32(mo, "seq", 1, &c->seq));
    FSC_TRY(get_i32(mo, "vocab", 1, &c->vocab));
    if (field(mo, "padded_vocab")) FSC_TRY(get_i32(mo, "padded_vocab", 1, &c->padded_vocab)); /* padded models only */
    if (field(mo, "moe_experts")) { /* written for MoE models only */
        FSC_TRY(get_i32(mo, "moe_experts", 0, &c->moe_experts));
        FSC_TRY(get_i32(mo, "moe_top_k", 0, &c->moe_top_k));
        FSC_TRY(get_i32(mo, "moe_every", 0, &c->moe_every));
        FSC_TRY(get_float(mo, "moe_capacity", &c->moe_capacity));
        FSC_TRY(get_float(mo, "moe_aux", &c->moe_aux));
    }
    if (fsc_gpt_config_validate(c) != FSC_OK) return fsc_error_prefix(FSC_ERR_FORMAT, "model");
    return FSC_OK;
}

/* Every parameter one of the configuration's tensors with its shape, each once, none missing. */
static fsc_status check_params(const fsc_gpt_config *c, const fsc_param_info *params, int n) {
    const int T = fsc_gpt_num_tensors(c);
    char *seen = calloc((size_t)T + 1, 1);
    if (!seen) return fsc_error(FSC_ERR_NOMEM, "out of memory");
    fsc_status s = FSC_OK;
    char s1[96], s2[96];
    fsc_param_info pi;
    for (int i = 0; i < n && s == FSC_OK; i++) {
        const fsc_param_info *t = &params[i];
        int idx = fsc_gpt_param_index(c, t->name);
        if (idx < 0 || fsc_gpt_param_info(c, idx, &pi) != FSC_OK) {
            s = fsc_error(FSC_ERR_FORMAT, "tensor %s is not a parameter of its model (layers %d, dim %d, vocab %d, "
                          "seq %d)", t->name, c->layers, c->dim, c->vocab, c->seq);
            break;
        }
        if (seen[idx]++) {
            s = fsc_error(FSC_ERR_FORMAT, "tensor %s appears twice", t->name);
            break;
        }
        int same = t->ndim == pi.ndim;
        for (int d = 0; same && d < pi.ndim; d++) same = t->shape[d] == pi.shape[d];
        if (!same) {
            fsc_shape_str(s1, sizeof s1, t->ndim, t->shape);
            fsc_shape_str(s2, sizeof s2, pi.ndim, pi.shape);
            s = fsc_error(FSC_ERR_FORMAT, "tensor %s has shape %s; its model (layers %d, dim %d, vocab %d, seq %d) "
                          "makes it %s", t->name, s1, c->layers, c->dim, c->vocab, c->seq, s2);
        }
    }
    for (int i = 0; i < T && s == FSC_OK; i++)
        if (!seen[i]) {
            fsc_gpt_param_info(c, i, &pi);
            s = fsc_error(FSC_ERR_FORMAT, "has no tensor %s, which its model (%d layers) has", pi.name, c->layers);
        }
    free(seen);
    return s;
}

fsc_status fsc_gpt_check_tensors(const char *recorded, const fsc_param_info *params, int n) {
    FSC_CHECK_ARG(recorded);
    FSC_CHECK_BUF(params, n);
    if (!recorded || (n > 0 && !params)) return fsc_error(FSC_ERR_INVALID, "fsc_gpt_check_tensors: NULL argument");
    cJSON *mo = fsc_json_parse(recorded);
    fsc_status s = FSC_OK;
    if (cJSON_IsObject(mo) && gpt_record(mo)) {
        fsc_gpt_config c = { 0 };
        s = read_config(mo, &c);
        if (s == FSC_OK) s = check_params(&c, params, n);
    }
    cJSON_Delete(mo);
    return s;
}
