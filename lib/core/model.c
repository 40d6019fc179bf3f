/* The model interface's checks and small helpers (model.h): what the engine verifies of a model before it
 * shards, pipelines or checkpoints it, and whether tensors held elsewhere (a checkpoint's, a weights file's) are
 * those a model declares. Not here: any model (lib/model), the engine (lib/parallel). */
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "fsc/model.h"
#include "fsc/tensor.h" /* fsc_shape_str */
#include "core/param_split.h"
#include "core/model_text.h"

fsc_status fsc_model_validate(const fsc_model *m) {
    FSC_CHECK_ARG(m);
    if (m->n_layers < 1) return fsc_error(FSC_ERR_INVALID, "model: %d layers (at least 1)", m->n_layers);
    if (m->n_tensors < 1) return fsc_error(FSC_ERR_INVALID, "model: %d tensors (at least 1)", m->n_tensors);
    if (!m->info || !m->param || !m->grad)
        return fsc_error(FSC_ERR_INVALID, "model: info, param and grad must be arrays of n_tensors entries");
    if (m->loss_terms < 1) return fsc_error(FSC_ERR_INVALID, "model: loss_terms per sample is %d (at least 1)",
                                            m->loss_terms);
    if (m->n_experts < 0) return fsc_error(FSC_ERR_INVALID, "model: %d experts", m->n_experts);
    const fsc_model_ops *o = m->ops;
    if (!o || !o->acts_create || !o->acts_free || !o->acts_bytes || !o->set_batch || !o->stream ||
        !o->stream_floats || !o->forward || !o->backward || !o->init_values)
        return fsc_error(FSC_ERR_INVALID, "model: an operation every model needs is missing (acts_create, acts_free, "
                         "acts_bytes, set_batch, stream, stream_floats, forward, backward, init_values)");
    int tp_first = 0; /* the first tensor that names a tensor group (tp_size > 1) */
    const size_t most = (size_t)1 << 60; /* elements of a tensor and of the model: their bytes stay far from 2^64 */
    size_t total = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        const fsc_param_info *p = &m->info[i];
        if (!p->name[0] || !memchr(p->name, 0, sizeof p->name))
            return fsc_error(FSC_ERR_INVALID, "model: tensor %d has no name or an unterminated one", i);
        if (p->ndim < 1 || p->ndim > 4)
            return fsc_error(FSC_ERR_INVALID, "model: tensor %s has %d dimensions (1 to 4)", p->name, p->ndim);
        size_t n = 1;
        for (int d = 0; d < p->ndim; d++) {
            if (p->shape[d] < 1)
                return fsc_error(FSC_ERR_INVALID, "model: tensor %s has dimension %d of size %lld", p->name, d,
                                 (long long)p->shape[d]);
            if ((uint64_t)p->shape[d] > most / n)
                return fsc_error(FSC_ERR_INVALID, "model: tensor %s holds more than 2^60 elements (dimension %d of "
                                 "size %lld)", p->name, d, (long long)p->shape[d]);
            n *= (size_t)p->shape[d];
        }
        if (n != p->numel)
            return fsc_error(FSC_ERR_INVALID, "model: tensor %s has numel %zu but its shape holds %zu", p->name,
                             p->numel, n);
        if (n > most - total)
            return fsc_error(FSC_ERR_INVALID, "model: its tensors hold more than 2^60 elements in all (%zu before %s, "
                             "which holds %zu): no device holds them", total, p->name, n);
        total += n;
        if (p->layer < 0 || p->layer >= m->n_layers)
            return fsc_error(FSC_ERR_INVALID, "model: tensor %s is owned by layer %d, not one of 0..%d", p->name,
                             p->layer, m->n_layers - 1);
        if (i > 0 && p->layer < m->info[i - 1].layer)
            return fsc_error(FSC_ERR_INVALID, "model: tensor %s (layer %d) follows %s (layer %d): tensors must be "
                             "listed by owning layer", p->name, p->layer, m->info[i - 1].name, m->info[i - 1].layer);
        if (p->expert < -1 || p->expert >= (m->n_experts > 0 ? m->n_experts : 0))
            return fsc_error(FSC_ERR_INVALID, "model: tensor %s belongs to expert %d of %d", p->name, p->expert,
                             m->n_experts);
        if (p->nusers < 0 || p->nusers > FSC_MODEL_MAX_USERS)
            return fsc_error(FSC_ERR_INVALID, "model: tensor %s has %d users (0 to %d)", p->name, p->nusers,
                             FSC_MODEL_MAX_USERS);
        for (int k = 0; k < p->nusers; k++)
            if (p->users[k] < 0 || p->users[k] >= m->n_layers || p->users[k] == p->layer)
                return fsc_error(FSC_ERR_INVALID, "model: tensor %s names layer %d as a user (another layer than "
                                 "its owner %d, one of 0..%d)", p->name, p->users[k], p->layer, m->n_layers - 1);
        if (p->nusers > 0 && !m->tied_grad) /* the buffers themselves may come with the records (model.h) */
            return fsc_error(FSC_ERR_INVALID, "model: tensor %s is used by other layers than its owner but the model "
                             "has no table of tied-gradient buffers (tied_grad is NULL)", p->name);
        FSC_TRY(fsc_param_check_split(p));
        if (p->tp_size > 1 && m->info[tp_first].tp_size <= 1) tp_first = i;
        if (p->tp_size > 1 && (p->tp_size != m->info[tp_first].tp_size || p->tp_rank != m->info[tp_first].tp_rank))
            return fsc_error(FSC_ERR_INVALID, "model: tensor %s is on tensor rank %d of %d but %s on rank %d of %d: "
                             "one model is built on one tensor group", p->name, p->tp_rank, p->tp_size,
                             m->info[tp_first].name, m->info[tp_first].tp_rank, m->info[tp_first].tp_size);
    }
    const int dup = fsc_param_duplicate_name(m->info, m->n_tensors);
    if (dup >= 0) return fsc_error(FSC_ERR_INVALID, "model: two tensors are called %s", m->info[dup].name);
    return FSC_OK;
}

/* qsort order of tensor names (pointers to them) */
static int name_cmp(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

int fsc_param_duplicate_name(const fsc_param_info *info, int n) {
    if (n < 2) return -1;
    const char **names = malloc((size_t)n * sizeof *names);
    if (!names) { /* no memory for the sort: pairwise */
        for (int i = 1; i < n; i++)
            for (int j = 0; j < i; j++)
                if (!strcmp(info[j].name, info[i].name)) return i;
        return -1;
    }
    for (int i = 0; i < n; i++) names[i] = info[i].name;
    qsort(names, (size_t)n, sizeof *names, name_cmp);
    int dup = -1;
    for (int i = 1; i < n && dup < 0; i++)
        if (!strcmp(names[i - 1], names[i])) dup = (int)((names[i] - info[0].name) / (ptrdiff_t)sizeof *info);
    free(names);
    return dup;
}

int fsc_param_used_by(const fsc_param_info *info, int l) {
    if (!info) return 0;
    if (info->layer == l) return 1;
    for (int k = 0; k < info->nusers; k++)
        if (info->users[k] == l) return 1;
    return 0;
}

int fsc_param_decays(const fsc_param_info *info) {
    if (!info) return 0;
    return info->decay > 0 || (info->decay == 0 && info->ndim >= 2);
}

fsc_model_acts_opts fsc_model_acts_opts_default(const fsc_model *m, int B) {
    return (fsc_model_acts_opts){ .B = B, .first = 0, .last = m ? m->n_layers - 1 : 0 };
}

fsc_status fsc_model_acts_make(const fsc_model *m, fsc_model_acts *old, const fsc_model_acts_opts *o,
                               fsc_model_acts **out) {
    FSC_CHECK_ARG(out);
    *out = NULL;
    FSC_CHECK_ARG(m);
    FSC_CHECK_ARG(o);
    if (!m->ops || !m->ops->acts_create || !m->ops->acts_free)
        return fsc_error(FSC_ERR_INVALID, "model: no acts_create or acts_free operation (fsc_model_validate)");
    const int remake = old && m->ops->acts_remake;
    if (old && !remake) m->ops->acts_free(m->ctx, old);
    FSC_TRY(remake ? m->ops->acts_remake(m->ctx, old, o, out) : m->ops->acts_create(m->ctx, o, out));
    if (!*out)
        return fsc_error(FSC_ERR_INTERNAL, "model: its %s returned FSC_OK without a record (of %d samples, layers %d..%d)",
                         remake ? "acts_remake" : "acts_create", o->B, o->first, o->last);
    return FSC_OK;
}

double fsc_model_flops(const fsc_model *m, int B) {
    return m && m->ops && m->ops->flops && B > 0 ? m->ops->flops(m->ctx, B) : 0;
}

double fsc_lm_flops_per_token(double matmul_params, int layers, int dim, int T) {
    return 6.0 * matmul_params + 12.0 * (double)layers * (double)dim * (double)T;
}

size_t fsc_model_num_params(const fsc_model *m) {
    if (!m) return 0;
    size_t n = 0;
    for (int i = 0; i < m->n_tensors; i++) n += m->info[i].numel;
    return n;
}

size_t fsc_model_num_full_params(const fsc_model *m) {
    if (!m) return 0;
    size_t n = 0;
    for (int i = 0; i < m->n_tensors; i++) n += fsc_param_full_numel(&m->info[i]);
    return n;
}

int fsc_model_tensor_index(const fsc_model *m, const char *name) {
    if (!m || !name) return -1; /* none: 0 would name the first tensor */
    for (int i = 0; i < m->n_tensors; i++)
        if (!strcmp(m->info[i].name, name)) return i;
    return -1;
}

/* held's tensor called name, or NULL. */
static const fsc_param_info *held_named(const fsc_param_info *held, int n, const char *name) {
    for (int k = 0; k < n; k++)
        if (!strcmp(held[k].name, name)) return &held[k];
    return NULL;
}

fsc_status fsc_model_check_held(const fsc_model *m, const fsc_param_info *held, int n, int flags, const char *what) {
    FSC_CHECK_ARG(m);
    FSC_CHECK_BUF(held, n);
    if (!what) what = "the model";
    char have[96], want[96];
    for (int i = 0; i < m->n_tensors; i++) {
        const fsc_param_info *d = &m->info[i], *h = held_named(held, n, d->name);
        if (!h) return fsc_error(FSC_ERR_FORMAT, "holds no tensor %s, which %s declares", d->name, what);
        const int unpadded = (flags & FSC_HELD_FILE_ROWS) && d->file_rows > 0; /* its real rows, as files hold it */
        int same = h->ndim == d->ndim, rows = same && unpadded;
        for (int k = 0; k < d->ndim && (same || rows); k++) {
            same = same && h->shape[k] == d->shape[k];
            rows = rows && h->shape[k] == (k ? d->shape[k] : d->file_rows);
        }
        if (same || rows) continue;
        fsc_shape_str(have, sizeof have, h->ndim, h->shape);
        fsc_shape_str(want, sizeof want, d->ndim, d->shape);
        return fsc_error(FSC_ERR_FORMAT, "%s has shape %s but %s expects %s%s", d->name, have, what, want,
                         unpadded ? " (or its unpadded rows)" : "");
    }
    if (!(flags & FSC_HELD_EXACT) || n == m->n_tensors) return FSC_OK; /* every declared one is there: no other */
    for (int k = 0; k < n; k++)
        if (fsc_model_tensor_index(m, held[k].name) < 0)
            return fsc_error(FSC_ERR_FORMAT, "holds tensor %s, which %s does not declare", held[k].name, what);
    return fsc_error(FSC_ERR_FORMAT, "holds %d tensors, %s declares %d (a name twice)", n, what, m->n_tensors);
}

void fsc_model_free(fsc_model *m) {
    if (m && m->ops && m->ops->destroy) m->ops->destroy(m);
}

fsc_status fsc_config_text_from(void (*config)(void *ctx, char *buf, size_t cap), void *ctx, const char *what,
                                size_t first, char **out) {
    *out = NULL;
    for (size_t cap = first < 64 ? 64 : first;; cap *= 2) {
        char *buf = malloc(cap);
        if (!buf) return fsc_error(FSC_ERR_NOMEM, "%s: out of host memory for the model's configuration text", what);
        snprintf(buf, cap, "{}");
        fsc_clear_error(); /* a message the config op leaves is the cause of an empty text (below) */
        if (config) config(ctx, buf, cap);
        buf[cap - 1] = '\0'; /* a config that wrote cap bytes without a NUL reads as cut */
        const size_t len = strlen(buf);
        if (len == 0) { /* no text, never JSON: the sequential model's answer when a layer's text cannot be had (over
                         * the limit, out of memory), whose message says why; refused here, never recorded empty */
            free(buf);
            const char *why = fsc_last_error();
            return why[0] ? fsc_error_prefix(FSC_ERR_INVALID, "%s: the model's configuration text is empty", what)
                          : fsc_error(FSC_ERR_INVALID, "%s: the model's configuration text is empty (model.h's config "
                                      "writes a JSON object)", what);
        }
        if (len + 1 < cap && len <= FSC_MODEL_CONFIG_MAX) { /* whole: it left room */
            *out = buf;
            return FSC_OK;
        }
        free(buf);
        if (len + 1 < cap || cap > FSC_MODEL_CONFIG_MAX)
            return fsc_error(FSC_ERR_INVALID, "%s: the model's configuration text is longer than %zu bytes: too long "
                             "to record", what, FSC_MODEL_CONFIG_MAX);
    }
}
