/* Models from their configuration text (generate.h's fsc_model_from_config) and their engines
 * (family.h's fsc_engine_create_config), by family (family.h): the built-in GPT-2 (gpt.h; no "family" or "gpt2")
 * and Llama (llama.h; "family":"llama"), with every field checked as a number of its range and any other key
 * refused, and the families a program registered. A program that holds only a weights file (the sampler) builds
 * the model the file records this way; the trainer makes the engine of any family this way.
 * The tensors the model of a text declares are checked against those a reader holds (fsc_model_config_check_held:
 * ckpt_tool verify, the trainer's --load) on the counting device.
 * Not here: checking a recorded configuration against a model (gpt_model.c, llama.c). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "fsc/family.h"
#include "fsc/generate.h"
#include "fsc/gpt.h"
#include "fsc/gpt_engine.h"
#include "fsc/llama.h"
#include "family_impl.h"
#include "io/json_lock.h" /* fsc_json_parse: cJSON under the library's lock */
#include "layers/seq_impl.h" /* fsc_seq_record_config */

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

/* The GPT's fields into *c (zeroed first). */
static fsc_status gpt_fields(const cJSON *o, fsc_gpt_config *cp) {
    fsc_gpt_config c = { 0 };
    FSC_TRY(get_int(o, "layers", 1, 0, 0, &c.layers));
    FSC_TRY(get_int(o, "dim", 1, 0, 0, &c.dim));
    FSC_TRY(get_int(o, "heads", 1, 0, 0, &c.heads));
    FSC_TRY(get_int(o, "seq", 1, 0, 0, &c.seq));
    FSC_TRY(get_int(o, "vocab", 1, 0, 0, &c.vocab));
    FSC_TRY(get_int(o, "padded_vocab", 0, 1, 0, &c.padded_vocab));
    FSC_TRY(get_int(o, "moe_experts", 0, 1, 0, &c.moe_experts));
    FSC_TRY(get_int(o, "moe_top_k", 0, 1, 0, &c.moe_top_k));
    FSC_TRY(get_int(o, "moe_every", 0, 1, 0, &c.moe_every));
    FSC_TRY(get_float(o, "moe_capacity", 1, 0.0f, &c.moe_capacity));
    FSC_TRY(get_float(o, "moe_aux", 1, 0.0f, &c.moe_aux));
    *cp = c;
    return FSC_OK;
}

static fsc_status make_gpt(fsc_device *dev, const cJSON *o, fsc_model **out) {
    fsc_gpt_config c;
    FSC_TRY(gpt_fields(o, &c));
    return fsc_gpt_model_create(dev, &c, out);
}

/* The Llama's fields into *c (its defaults first). */
static fsc_status llama_fields(const cJSON *o, fsc_llama_config *cp) {
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
    FSC_TRY(get_int(o, "padded_vocab", 0, 1, 0, &c.padded_vocab)); /* a padded Llama's record only */
    FSC_TRY(get_int(o, "moe_experts", 0, 1, 0, &c.moe_experts)); /* an MoE Llama's record only (llama.h) */
    FSC_TRY(get_int(o, "moe_top_k", 0, 1, 0, &c.moe_top_k));
    FSC_TRY(get_int(o, "moe_every", 0, 1, 0, &c.moe_every));
    FSC_TRY(get_float(o, "moe_capacity", 1, 0.0f, &c.moe_capacity));
    FSC_TRY(get_float(o, "moe_aux", 1, 0.0f, &c.moe_aux));
    *cp = c;
    return FSC_OK;
}

static fsc_status make_llama(fsc_device *dev, const cJSON *o, fsc_model **out) {
    fsc_llama_config c;
    FSC_TRY(llama_fields(o, &c));
    return fsc_llama_model_create(dev, &c, out);
}

/* A configuration object whose key appears twice (cJSON keeps both and reads the first): refused, naming it. */
static fsc_status no_twice(const cJSON *o) {
    for (const cJSON *a = o ? o->child : NULL; a; a = a->next)
        for (const cJSON *b = a->next; b; b = b->next)
            if (a->string && b->string && !strcmp(a->string, b->string))
                return fsc_error(FSC_ERR_FORMAT, "model configuration: \"%.64s\" appears twice", a->string);
    return FSC_OK;
}

/* A key neither built-in family reads (a misspelt one, or the trainer's option name "rope-theta"): refused, naming it,
 * rather than passed over while the model silently takes that field's default. */
static fsc_status known_keys(const cJSON *o) {
    static const char *const keys[] = { "family", "layers", "dim", "heads", "kv_heads", "ffn", "seq", "vocab",
                                        "rope_theta", "norm_eps", "padded_vocab", "moe_experts", "moe_top_k",
                                        "moe_every", "moe_capacity", "moe_aux" };
    const size_t n = sizeof keys / sizeof *keys;
    for (const cJSON *x = o->child; x; x = x->next) {
        size_t k = 0;
        while (k < n && strcmp(x->string, keys[k])) k++;
        if (k < n) continue;
        char alt[32]; /* the key with '-' as '_', as the trainer's options spell them */
        snprintf(alt, sizeof alt, "%s", x->string);
        for (char *c = alt; *c; c++) *c = *c == '-' ? '_' : *c;
        for (k = 0; k < n && strcmp(alt, keys[k]); k++) {}
        if (k < n)
            return fsc_error(FSC_ERR_FORMAT, "model configuration: unknown field \"%.64s\" (did you mean \"%s\"?)",
                             x->string, keys[k]);
        return fsc_error(FSC_ERR_FORMAT, "model configuration: unknown field \"%.64s\" (the fields: family, layers, "
                         "dim, heads, kv_heads, ffn, seq, vocab, rope_theta, norm_eps, padded_vocab, moe_experts, "
                         "moe_top_k, moe_every, moe_capacity, moe_aux)", x->string);
    }
    return FSC_OK;
}

/* The built-in families take the text: parsed here again (a text the caller already parsed once). */
static fsc_status from_text(fsc_device *dev, const char *config, fsc_model **out,
                            fsc_status (*make)(fsc_device *, const cJSON *, fsc_model **)) {
    cJSON *o = fsc_json_parse(config);
    fsc_status s = !cJSON_IsObject(o) ? fsc_error(FSC_ERR_FORMAT, "model configuration is not a JSON object: %.200s",
                                                  config)
                   : no_twice(o) != FSC_OK || known_keys(o) != FSC_OK ? FSC_ERR_FORMAT : make(dev, o, out);
    cJSON_Delete(o);
    return s;
}

static fsc_status gpt_from_config(fsc_device *dev, const char *config, fsc_model **out) {
    return from_text(dev, config, out, make_gpt);
}

static fsc_status llama_from_config(fsc_device *dev, const char *config, fsc_model **out) {
    return from_text(dev, config, out, make_llama);
}

/* On a tensor group: the checks of fsc_engine_create (fsc_tp_check_config), then the GPT's tensor-parallel form. */
static fsc_status make_gpt_tp(fsc_device *dev, const cJSON *o, fsc_comm *tensor, int sp, fsc_model **out) {
    fsc_gpt_config c;
    FSC_TRY(gpt_fields(o, &c));
    if (tensor) FSC_TRY(fsc_tp_check_config(&c, fsc_comm_size(tensor)));
    return fsc_gpt_model_create_tp(dev, &c, tensor, tensor ? sp : 0, out);
}

static fsc_status make_llama_tp(fsc_device *dev, const cJSON *o, fsc_comm *tensor, int sp, fsc_model **out) {
    fsc_llama_build_arg a = { .sp = sp };
    FSC_TRY(llama_fields(o, &a.cfg));
    return fsc_llama_build(&a, dev, tensor, out);
}

/* The builders (family.h's build): the text parsed as from_config parses it. */
typedef struct {
    fsc_comm *tensor;
    int sp;
    fsc_status (*make)(fsc_device *, const cJSON *, fsc_comm *, int, fsc_model **);
} tp_make;

static fsc_status build_text(fsc_device *dev, const char *config, const tp_make *t, fsc_model **out) {
    *out = NULL;
    cJSON *o = fsc_json_parse(config);
    fsc_status s = !cJSON_IsObject(o) ? fsc_error(FSC_ERR_FORMAT, "model configuration is not a JSON object: %.200s",
                                                  config)
                   : no_twice(o) != FSC_OK || known_keys(o) != FSC_OK ? FSC_ERR_FORMAT
                                                                       : t->make(dev, o, t->tensor, t->sp, out);
    cJSON_Delete(o);
    return s;
}

static fsc_status gpt_build(fsc_device *dev, const char *config, fsc_comm *tensor, int sp, fsc_model **out) {
    return build_text(dev, config, &(tp_make){ tensor, sp, make_gpt_tp }, out);
}

static fsc_status llama_build(fsc_device *dev, const char *config, fsc_comm *tensor, int sp, fsc_model **out) {
    return build_text(dev, config, &(tp_make){ tensor, sp, make_llama_tp }, out);
}

/* The families: the built-in ones, then those registered (never removed, so a found pointer stays valid). */
enum { MAX_REGISTERED = 32 };
const fsc_model_family fsc_family_gpt2 = { "gpt2", gpt_from_config, gpt_build };
const fsc_model_family fsc_family_llama = { "llama", llama_from_config, llama_build };
static const fsc_model_family *const builtin[] = { &fsc_family_gpt2, &fsc_family_llama }; /* family_impl.h */
static fsc_model_family registered[MAX_REGISTERED];
static char registered_name[MAX_REGISTERED][32]; /* their names, copied: the caller's string may go */
static int nregistered;
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;

const fsc_model_family *fsc_model_family_find(const char *name) {
    if (!name) return NULL;
    for (size_t i = 0; i < sizeof builtin / sizeof builtin[0]; i++)
        if (!strcmp(builtin[i]->name, name)) return builtin[i];
    const fsc_model_family *f = NULL;
    pthread_mutex_lock(&registry_lock);
    for (int i = 0; i < nregistered && !f; i++)
        if (!strcmp(registered[i].name, name)) f = &registered[i];
    pthread_mutex_unlock(&registry_lock);
    return f;
}

fsc_status fsc_model_family_register(const fsc_model_family *f) {
    FSC_CHECK_ARG(f);
    if (!f->name || !f->from_config) return fsc_error(FSC_ERR_INVALID, "model family: name or from_config is NULL");
    size_t n = strlen(f->name);
    if (n == 0 || n > 31 || strspn(f->name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != n)
        return fsc_error(FSC_ERR_INVALID, "model family '%.40s': a name is 1 to 31 letters, digits, '_' or '-'", f->name);
    fsc_status s = FSC_OK;
    pthread_mutex_lock(&registry_lock);
    int taken = 0;
    for (size_t i = 0; i < sizeof builtin / sizeof builtin[0]; i++) taken |= !strcmp(builtin[i]->name, f->name);
    for (int i = 0; i < nregistered; i++) taken |= !strcmp(registered[i].name, f->name);
    if (taken) s = fsc_error(FSC_ERR_INVALID, "model family '%s' is already registered", f->name);
    else if (nregistered == MAX_REGISTERED)
        s = fsc_error(FSC_ERR_UNSUPPORTED, "model family '%s': at most %d families can be registered", f->name,
                      MAX_REGISTERED);
    else {
        snprintf(registered_name[nregistered], sizeof registered_name[nregistered], "%s", f->name);
        registered[nregistered] = *f;
        registered[nregistered].name = registered_name[nregistered];
        nregistered++;
    }
    pthread_mutex_unlock(&registry_lock);
    return s;
}

fsc_status fsc_model_family_of(const char *config, const fsc_model_family **out) {
    FSC_CHECK_ARG(out);
    *out = NULL;
    FSC_CHECK_ARG(config);
    cJSON *o = fsc_json_parse(config);
    fsc_status s = FSC_OK;
    const cJSON *fam = cJSON_IsObject(o) ? field(o, "family") : NULL;
    const fsc_model_family *f = NULL;
    if (!cJSON_IsObject(o))
        s = fsc_error(FSC_ERR_FORMAT, "model configuration is not a JSON object: %.200s", config);
    else if (fam && !cJSON_IsString(fam))
        s = fsc_error(FSC_ERR_FORMAT, "model configuration: family is not a string");
    else if (!fam && !field(o, "layers"))
        s = fsc_error(FSC_ERR_FORMAT, "model configuration names no built-in model (neither a GPT-2's fields nor a "
                      "family): %.200s", config);
    else if (!(f = fsc_model_family_find(fam ? fam->valuestring : "gpt2")))
        s = fsc_error(FSC_ERR_FORMAT, "model configuration: unknown family '%.40s' (built-in: gpt2, llama)",
                      fam->valuestring);
    cJSON_Delete(o);
    *out = f;
    return s;
}

fsc_status fsc_model_from_config(fsc_device *dev, const char *config, fsc_model **out) {
    FSC_CHECK_ARG(out);
    *out = NULL;
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(config);
    const fsc_model_family *f;
    FSC_TRY(fsc_model_family_of(config, &f));
    fsc_status s = f->from_config(dev, config, out);
    if (s == FSC_OK && !*out) /* a family's bug, caught here rather than in the caller's first use of the model */
        s = fsc_error(FSC_ERR_INVALID, "model family '%s': from_config returned FSC_OK without a model", f->name);
    if (s == FSC_OK) s = fsc_seq_record_config(*out, config); /* a model of layers records its family's text */
    if (s != FSC_OK && *out) { /* a family's refusal leaves no model */
        fsc_model_free(*out);
        *out = NULL;
    }
    return s;
}

fsc_status fsc_model_config_check_held(const char *config, const fsc_param_info *held, int n, int flags) {
    FSC_CHECK_ARG(config);
    FSC_CHECK_BUF(held, n);
    const fsc_model_family *f;
    if (fsc_model_family_of(config, &f) != FSC_OK) return fsc_error_prefix(FSC_ERR_UNSUPPORTED, "not checked");
    fsc_device *dev = NULL;
    fsc_model *m = NULL;
    fsc_status s = fsc_device_create("count", NULL, &dev); /* declarations only: no memory */
    if (s == FSC_OK) s = fsc_model_from_config(dev, config, &m);
    if (s == FSC_ERR_FORMAT || s == FSC_ERR_INVALID) { /* a field its family refuses (the Llama's ranges: INVALID) */
        s = FSC_ERR_INVALID;
    } else if (s != FSC_OK) { /* no memory, or a program's family that needs more than the counting device */
        s = fsc_error_prefix(FSC_ERR_UNSUPPORTED, "not checked: the %s model cannot be built to count its tensors",
                             f->name);
    } else {
        char what[64];
        snprintf(what, sizeof what, "its %s model", f->name);
        s = fsc_model_check_held(m, held, n, flags, what);
    }
    fsc_model_free(m);
    fsc_device_free(dev);
    return s;
}

/* fsc_engine_create_config's builder (parallel.h's fsc_model_build_fn): the family's, on the tensor group. */
typedef struct {
    const fsc_model_family *f;
    const char *config;
    int sp;
} family_build;

static fsc_status build_family(void *arg, fsc_device *dev, fsc_comm *tensor, fsc_model **out) {
    const family_build *b = arg;
    fsc_status s = b->f->build ? b->f->build(dev, b->config, tensor, b->sp, out)
                               : b->f->from_config(dev, b->config, out); /* (no tensor group: checked) */
    /* a model of layers (a program's family made with fsc_seq_model_create) records the family's text, not its
     * layers' description, so that fsc_model_from_config builds the model its weights files record */
    if (s == FSC_OK) s = fsc_seq_record_config(*out, b->config);
    if (s != FSC_OK && *out) {
        fsc_model_free(*out);
        *out = NULL;
    }
    return s;
}

fsc_status fsc_engine_create_config(fsc_rank *r, const char *config, const fsc_parallel_opts *po,
                                    const fsc_optim_config *oc, uint64_t seed, fsc_engine **out) {
    FSC_CHECK_ARG(out);
    *out = NULL;
    FSC_CHECK_ARG(r);
    FSC_CHECK_ARG(config);
    FSC_CHECK_ARG(po);
    FSC_CHECK_ARG(oc);
    const fsc_model_family *f;
    FSC_TRY(fsc_model_family_of(config, &f));
    if (po->tp > 1 && !f->build)
        return fsc_error(FSC_ERR_UNSUPPORTED, "model family '%s' has no tensor-parallel form (its family has no "
                         "build): tp %d needs one", f->name, po->tp);
    family_build b = { f, config, po->sequence_parallel };
    return fsc_engine_create_built(r, build_family, &b, po, oc, seed, out);
}
