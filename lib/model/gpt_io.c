/* GPT-2 weights as safetensors files in the Hugging Face layout: keys "wte.weight" [V, C],
 * "wpe.weight" [T, C], "h.{i}.ln_1.weight" ... "ln_f.bias", in HF order (fsc_gpt_param_info); saved as F32,
 * loaded from F32, BF16 or F16, under these names or GPT2LMHeadModel's ("transformer." + name, with its tied
 * "lm_head.weight", which must equal wte: fsc_st_find_weight, fsc_st_check_copy).
 * Linear weights are [in, out] as HF's Conv1D, so the file layout is the memory layout.
 *
 * Save and load stream tensor by tensor through one bounded host buffer (IO_CHUNK floats): the whole
 * model is never in host memory. Load checks every key, dtype and shape before it uploads anything, so a
 * file for another configuration leaves the model untouched. Any other key is refused, except HF's
 * causal-mask buffers (h.{i}.attn.bias, h.{i}.attn.masked_bias), which are ignored. A value that is inf or
 * NaN is refused with its tensor and element (the tensors before it are then already loaded).
 * Not here: sharded or optimizer-state checkpoints (lib/parallel), the safetensors format (lib/io). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include "fsc/gpt.h"
#include "fsc/safetensors.h"

#define IO_CHUNK ((size_t)1 << 20) /* floats per host transfer: 4 MiB */

static const char *st_dtype_name(fsc_dtype dt) {
    switch (dt) {
    case FSC_F32: return "F32";
    case FSC_BF16: return "BF16";
    case FSC_F16: return "F16";
    case FSC_I32: return "I32";
    case FSC_U8: return "U8";
    default: return "?";
    }
}

static void shape_text(char *buf, size_t cap, int ndim, const int64_t *shape) {
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < ndim && k < cap; d++)
        k += (size_t)snprintf(buf + k, cap - k, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (k < cap) snprintf(buf + k, cap - k, "]");
}

/* HF GPT-2 files may also hold the causal-mask buffers "h.{i}.attn.bias" and "h.{i}.attn.masked_bias":
 * constants, not parameters. Load ignores them for blocks the model has. */
static int hf_mask_buffer(const fsc_gpt_config *cfg, const char *name) {
    if (strncmp(name, "h.", 2) != 0 || name[2] < '0' || name[2] > '9') return 0;
    const char *p = name + 2;
    long b = 0;
    while (*p >= '0' && *p <= '9' && b < cfg->layers) b = b * 10 + (*p++ - '0');
    if (b >= cfg->layers || (name[2] == '0' && p != name + 3)) return 0;
    return !strcmp(p, ".attn.bias") || !strcmp(p, ".attn.masked_bias");
}

/* Every tensor the config expects is in f with a float dtype and its HF shape, and nothing else is. */
static fsc_status check_entries(const fsc_gpt_config *cfg, fsc_st_file *f, const char *path) {
    int n = fsc_gpt_num_tensors(cfg);
    for (int i = 0; i < n; i++) {
        fsc_param_info p;
        FSC_TRY(fsc_gpt_param_info(cfg, i, &p));
        const fsc_st_entry *e;
        FSC_TRY(fsc_st_find_weight_once(f, p.name, path, &e));
        if (!e)
            return fsc_error(FSC_ERR_FORMAT, "%s: tensor %s is missing (the model has %d layers)", path, p.name,
                             cfg->layers);
        if (e->dtype != FSC_F32 && e->dtype != FSC_BF16 && e->dtype != FSC_F16)
            return fsc_error(FSC_ERR_FORMAT, "%s: %s has %s%s but the model expects floats (F32, BF16 or F16) of at most "
                             "4 dimensions", path, p.name, e->unreadable ? "" : "dtype ",
                             e->unreadable ? e->unreadable : st_dtype_name(e->dtype));
        int same = e->ndim == p.ndim, rows = same && p.file_rows > 0; /* a padded wte: its vocab rows will do */
        for (int d = 0; d < p.ndim && (same || rows); d++) {
            same = same && e->shape[d] == p.shape[d];
            rows = rows && e->shape[d] == (d ? p.shape[d] : p.file_rows);
        }
        if (!same && !rows) {
            char have[96], want[96];
            shape_text(have, sizeof have, e->ndim, e->shape);
            shape_text(want, sizeof want, p.ndim, p.shape);
            return fsc_error(FSC_ERR_FORMAT, "%s: %s has shape %s but the model expects %s", path, p.name, have, want);
        }
        if (p.alias[0]) FSC_TRY(fsc_st_check_copy(f, p.name, p.alias, path));
    }
    if (fsc_st_count(f) != n) /* every expected name was found, so something else is there too */
        for (int k = 0; k < fsc_st_count(f); k++) {
            const fsc_st_entry *e = fsc_st_entry_at(f, k);
            const char *own = fsc_st_weight_name(e->name);
            fsc_param_info wte;
            if (fsc_gpt_param_info(cfg, FSC_P_WTE, &wte) == FSC_OK && !strcmp(e->name, wte.alias)) continue;
            if (fsc_gpt_param_index(cfg, own) < 0 && !hf_mask_buffer(cfg, own))
                return fsc_error(FSC_ERR_FORMAT, "%s: unexpected tensor %s (not part of a GPT-2 with %d layers)",
                                 path, e->name, cfg->layers);
        }
    return FSC_OK;
}

fsc_status fsc_gpt_check_file(const fsc_gpt_config *cfg, const char *path) {
    FSC_CHECK_ARG(cfg);
    FSC_CHECK_ARG(path);
    FSC_TRY(fsc_gpt_config_validate(cfg));
    fsc_st_file *f;
    FSC_TRY(fsc_st_open(path, &f));
    fsc_status st = check_entries(cfg, f, path);
    fsc_st_close(f);
    return st;
}

static fsc_status check_materialized(const fsc_gpt *m, const char *what) {
    for (int i = 0; i < m->n_tensors; i++)
        if (!m->param[i])
            return fsc_error(FSC_ERR_STATE, "gpt %s: parameter %s is not materialized (bind the parameters first)",
                             what, m->info[i].name);
    return FSC_OK;
}

fsc_status fsc_gpt_save(fsc_gpt *m, const char *path) {
    FSC_CHECK_ARG(m);
    FSC_CHECK_ARG(path);
    FSC_TRY(check_materialized(m, "save"));
    float *buf = malloc(IO_CHUNK * sizeof(float));
    if (!buf) return fsc_error(FSC_ERR_NOMEM, "gpt save: out of host memory for a %zu-byte buffer", IO_CHUNK * 4);
    fsc_st_writer *w = NULL;
    fsc_status st = fsc_st_writer_open(path, &w);
    if (st == FSC_OK) st = fsc_st_writer_meta(w, "format", "pt");
    for (int i = 0; i < m->n_tensors && st == FSC_OK; i++) {
        fsc_param_info p;
        st = fsc_gpt_param_info(&m->cfg, i, &p);
        if (st == FSC_OK && p.file_rows > 0) p.shape[0] = p.file_rows; /* wte's vocab rows, not its padding */
        if (st == FSC_OK) st = fsc_st_writer_add(w, p.name, FSC_F32, p.ndim, p.shape);
    }
    if (st == FSC_OK) st = fsc_st_writer_begin_data(w);
    for (int i = 0; i < m->n_tensors && st == FSC_OK; i++) {
        const fsc_param_info *pi = &m->info[i];
        size_t numel = pi->file_rows > 0 ? (size_t)pi->file_rows * (size_t)pi->shape[1] : pi->numel;
        for (size_t at = 0; at < numel && st == FSC_OK; at += IO_CHUNK) {
            size_t k = numel - at < IO_CHUNK ? numel - at : IO_CHUNK;
            st = fsc_device_download(m->dev, buf, m->param[i] + at, k * sizeof(float));
            if (st == FSC_OK) st = fsc_st_writer_write(w, i, buf, at, k);
        }
    }
    int committed = 0;
    if (st == FSC_OK) committed = (st = fsc_st_writer_commit(w)) == FSC_OK;
    if (!committed && w) fsc_st_writer_abort(w); /* a failed commit leaves w to abort */
    free(buf);
    return st;
}

fsc_status fsc_gpt_load(fsc_gpt *m, const char *path) {
    FSC_CHECK_ARG(m);
    FSC_CHECK_ARG(path);
    FSC_TRY(check_materialized(m, "load"));
    fsc_st_file *f;
    FSC_TRY(fsc_st_open(path, &f));
    fsc_status st = check_entries(&m->cfg, f, path);
    float *buf = NULL;
    if (st == FSC_OK && !(buf = malloc(IO_CHUNK * sizeof(float))))
        st = fsc_error(FSC_ERR_NOMEM, "gpt load: out of host memory for a %zu-byte buffer", IO_CHUNK * 4);
    for (int i = 0; i < m->n_tensors && st == FSC_OK; i++) {
        const fsc_st_entry *e = fsc_st_find_weight(f, m->info[i].name);
        size_t numel = m->info[i].numel, have = 1;
        for (int d = 0; d < e->ndim; d++) have *= (size_t)e->shape[d]; /* a padded wte's file: vocab rows */
        for (size_t at = 0; at < numel && st == FSC_OK; at += IO_CHUNK) {
            size_t k = numel - at < IO_CHUNK ? numel - at : IO_CHUNK;
            size_t r = at >= have ? 0 : have - at < k ? have - at : k;
            if (r) st = fsc_st_read_f32(f, e, buf, at, r);
            for (size_t j = r; j < k; j++) buf[j] = 0.0f; /* its padding rows */
            for (size_t j = 0; j < k && st == FSC_OK; j++)
                if (!isfinite(buf[j]))
                    st = fsc_error(FSC_ERR_NUMERIC, "%s: tensor %s, element %zu, is %s: refusing non-finite weights",
                                   path, m->info[i].name, at + j, isnan(buf[j]) ? "NaN" : buf[j] > 0 ? "inf" : "-inf");
            if (st == FSC_OK) st = fsc_device_upload(m->dev, m->param[i] + at, buf, k * sizeof(float));
        }
    }
    if (st == FSC_OK) st = fsc_device_sync(m->dev);
    free(buf);
    fsc_st_close(f);
    return st;
}
