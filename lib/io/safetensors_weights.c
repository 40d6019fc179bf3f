/* Reading full-weights files written by other programs (safetensors.h): a model's tensor found under its own
 * name or under the base-model prefix of Hugging Face's head classes ("transformer.": GPT2LMHeadModel holds
 * GPT2Model there), and values read as float32 whatever float type the file stores (F32, BF16, F16, converted
 * exactly: every BF16 and F16 value is a float32). The rule knows no model: a model's names are its own.
 * Not here: which tensors a model has (the loaders: lib/parallel, lib/model), the format (safetensors.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "safetensors_impl.h"

/* The prefixes a head class puts before its base model's names, tried in order after the name itself. */
static const char *const hf_prefixes[] = { "transformer." };

/* The entry of name under prefix k, or NULL. */
static const fsc_st_entry *prefixed(const fsc_st_file *f, size_t k, const char *name) {
    char full[FSC_ST_MAX_NAME];
    if ((size_t)snprintf(full, sizeof full, "%s%s", hf_prefixes[k], name) >= sizeof full) return NULL;
    return fsc_st_find(f, full);
}

const fsc_st_entry *fsc_st_find_weight(const fsc_st_file *f, const char *name) {
    const fsc_st_entry *e = fsc_st_find(f, name);
    for (size_t k = 0; !e && name && k < sizeof hf_prefixes / sizeof *hf_prefixes; k++) e = prefixed(f, k, name);
    return e;
}

fsc_status fsc_st_find_weight_once(const fsc_st_file *f, const char *name, const char *path, const fsc_st_entry **out) {
    FSC_CHECK_ARG(out);
    *out = NULL;
    FSC_CHECK_ARG(f);
    FSC_CHECK_ARG(name);
    const fsc_st_entry *e = fsc_st_find_weight(f, name); /* the first of its names; any other is a second copy */
    for (size_t k = 0; e && k < sizeof hf_prefixes / sizeof *hf_prefixes; k++) {
        const fsc_st_entry *p = prefixed(f, k, name);
        if (p && p != e)
            return fsc_error(FSC_ERR_FORMAT, "%s: tensor %s is there twice, as %s and as %s: which one is meant is "
                             "unknown (keep one)", path ? path : "weights file", name, e->name, p->name);
    }
    *out = e;
    return FSC_OK;
}

const char *fsc_st_weight_name(const char *entry_name) {
    if (!entry_name) return NULL;
    for (size_t k = 0; k < sizeof hf_prefixes / sizeof *hf_prefixes; k++) {
        size_t n = strlen(hf_prefixes[k]);
        if (!strncmp(entry_name, hf_prefixes[k], n)) return entry_name + n;
    }
    return entry_name;
}

#define CONV_CHUNK 4096 /* elements converted per read */

fsc_status fsc_st_read_f32(fsc_st_file *f, const fsc_st_entry *e, float *dst, uint64_t first, uint64_t n) {
    FSC_CHECK_ARG(f);
    FSC_CHECK_ARG(e);
    FSC_CHECK_BUF(dst, n);
    if (e->dtype == FSC_F32) return fsc_st_read(f, e, dst, first, n);
    if (e->dtype != FSC_BF16 && e->dtype != FSC_F16)
        return fsc_error(FSC_ERR_FORMAT, "%s has %s%s: float weights must be F32, BF16 or F16 (at most 4 dimensions)",
                         e->name, e->unreadable ? "" : "dtype ", e->unreadable ? e->unreadable : st_name(e->dtype));
    if (n == 0 || !dst) return fsc_st_read(f, e, dst, first, n); /* its checks and messages */
    uint16_t h[CONV_CHUNK];
    for (uint64_t at = 0; at < n; at += CONV_CHUNK) {
        uint64_t k = n - at < CONV_CHUNK ? n - at : CONV_CHUNK;
        FSC_TRY(fsc_st_read(f, e, h, first + at, k));
        fsc_convert_host(dst + at, FSC_F32, h, e->dtype, (size_t)k);
    }
    return FSC_OK;
}

fsc_status fsc_st_check_copy(fsc_st_file *f, const char *name, const char *copy, const char *path) {
    FSC_CHECK_ARG(f);
    FSC_CHECK_ARG(name);
    FSC_CHECK_ARG(path);
    const fsc_st_entry *a = fsc_st_find_weight(f, name), *b = copy && copy[0] ? fsc_st_find(f, copy) : NULL;
    if (!a || !b || a == b) return FSC_OK;
    int same = a->ndim == b->ndim;
    for (int d = 0; same && d < a->ndim; d++) same = a->shape[d] == b->shape[d];
    if (!same)
        return fsc_error(FSC_ERR_FORMAT, "%s: %s, the model's tied copy of %s, has another shape: this model ties "
                         "them (a separate output head is not supported)", path, b->name, a->name);
    uint64_t n = 1;
    for (int d = 0; d < a->ndim; d++) n *= (uint64_t)a->shape[d];
    float *x = malloc(2 * CONV_CHUNK * sizeof(float));
    if (!x) return fsc_error(FSC_ERR_NOMEM, "%s: out of host memory comparing %s", path, b->name);
    fsc_status s = FSC_OK;
    for (uint64_t at = 0; at < n && s == FSC_OK; at += CONV_CHUNK) {
        uint64_t k = n - at < CONV_CHUNK ? n - at : CONV_CHUNK;
        s = fsc_st_read_f32(f, a, x, at, k);
        if (s == FSC_OK) s = fsc_st_read_f32(f, b, x + CONV_CHUNK, at, k);
        for (uint64_t j = 0; j < k && s == FSC_OK; j++)
            if (memcmp(&x[j], &x[CONV_CHUNK + j], sizeof(float)) != 0)
                s = fsc_error(FSC_ERR_FORMAT, "%s: %s differs from %s at element %llu (%.9g, %.9g): this model ties "
                              "them, so the file's output head is not its embedding (a separate output head is not "
                              "supported)", path, b->name, a->name, (unsigned long long)(at + j), (double)x[j],
                              (double)x[CONV_CHUNK + j]);
    }
    free(x);
    return s;
}
