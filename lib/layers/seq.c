/* The sequential model of layers.h, its declaration: tensor names and owners (a prefix per layer), tied
 * parameters as model.h's users (their tied-gradient buffers are made by the records, seq_run.c), initial values by full name, the configuration
 * recorded in checkpoints, the per-layer cost for pipeline balance.
 * Not here: records, forward and backward (seq_run.c), the layers (basic.c, transformer.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fsc/rng.h"
#include "seq_impl.h"
#include "core/param_split.h" /* fsc_param_duplicate_name */
#include "core/json_str_impl.h" /* fsc_json_str_buf */
#include "core/model_text.h"    /* fsc_config_text */
#include "core/locale_impl.h"
#include "io/json_lock.h" /* fsc_json_parse */

static void seq_destroy(fsc_model *m) {
    seq_model *s = (seq_model *)m;
    for (int l = 0; l < s->n; l++) fsc_layer_free(s->layers[l]);
    for (int t = 0; t < s->m.n_tensors && s->tied_grad; t++) fsc_device_release(s->dev, s->tied_grad[t]);
    fsc_device_release(s->dev, s->scratch); /* records not freed before the model: their scratch */
    for (int l = 0; l < s->n && s->tensor; l++) free(s->tensor[l]);
    for (int l = 0; l < s->n && s->tied; l++) free(s->tied[l]);
    free(s->layers), free(s->prefix), free(s->tensor), free(s->tied), free(s->cparam), free(s->cgrad);
    free(s->info), free(s->param), free(s->grad), free(s->tied_grad), free(s->config_text);
    free(s);
}

static size_t seq_stream_floats(void *ctx, int B) {
    const seq_model *s = ctx;
    return (size_t)B * (s->max_stream ? s->max_stream : 1);
}

static const fsc_layer_param *param_of(const seq_model *s, int t, const fsc_layer **lay) {
    const int l = s->info[t].layer;
    for (int k = 0; k < s->layers[l]->n_params; k++)
        if (s->tensor[l][k] == t && !s->tied[l][k]) {
            *lay = s->layers[l];
            return &s->layers[l]->params[k];
        }
    return NULL;
}

static void seq_init(void *ctx, uint64_t seed, int t, size_t first, size_t n, float *out) {
    const seq_model *s = ctx;
    const fsc_layer *lay = NULL;
    const fsc_layer_param *p = param_of(s, t, &lay);
    const fsc_param_info *ti = &s->info[t];
    /* a tensor-parallel slice draws the full tensor's values at its elements (run by run) */
    for (size_t k = 0; k < fsc_param_num_runs(ti); k++) {
        const fsc_param_run r = fsc_param_run_at(ti, k, first, n);
        float *o = out + (r.local - first);
        if (r.n && p && p->init.kind == FSC_INIT_NORMAL) {
            fsc_rng_fill_normal(o, r.n, seed, ti->name, r.full, p->init.mean, p->init.std);
            for (size_t i = 0; p->init.limit && i < r.n; i++) /* padding rows: 0 */
                if (r.full + i >= p->init.limit) o[i] = 0.0f;
        } else {
            const float v = p ? p->init.value : 0.0f;
            for (size_t i = 0; i < r.n; i++) o[i] = v;
        }
    }
}

/* Parameter bytes x param_scale, the record and the output of B samples (what a stage holds per micro-batch). */
static double seq_layer_cost(void *ctx, int l, int B, float param_scale) {
    const seq_model *s = ctx;
    const fsc_layer *lay = s->layers[l];
    double c = 0;
    for (int k = 0; k < lay->n_params; k++)
        if (!s->tied[l][k]) c += 4.0 * (double)param_scale * (double)lay->params[k].numel;
    if (lay->ops->rec_bytes) c += (double)lay->ops->rec_bytes(lay, B);
    return c + 4.0 * (double)B * (double)lay->out_floats;
}

/* A layer's config op as model_text.h's fsc_config_text asks (layers.h: a longer text is cut, asked again). */
static void layer_text(void *ctx, char *buf, size_t cap) {
    const fsc_layer *l = ctx;
    l->ops->config(l, buf, cap);
}

/* Whether layer l's text is one JSON object, the whole text (layers.h's config); if not, the message says so, naming
 * the layer: its text made the model's text other JSON or none, which only a checkpoint's save refused, after the
 * training, naming the model's text cut before the layer ("the model's configuration is not a JSON object"). */
static int layer_text_ok(int l, const char *kind, const char *text) {
    cJSON *o = fsc_json_parse_whole(text); /* the whole text: {"a":1},{"b":2} breaks the model's */
    const int ok = cJSON_IsObject(o);
    cJSON_Delete(o);
    if (!ok)
        fsc_error(FSC_ERR_INVALID, "sequential model: layer %d (%s): its configuration text is not a JSON object "
                  "(layers.h's config): %.200s", l, kind, text);
    return ok;
}

/* {"sequential":[{"prefix":"in.","kind":"linear","layer":{...}}, ...]}: the layers' description (a program's layer
 * kind or prefix may hold any character: escaped, so that the text stays JSON and a checkpoint can record it; each
 * layer's text whole, any length). A text longer than cap is cut to cap - 1 bytes (model.h's config: the caller asks
 * again with more room); a layer's text that cannot be had (over 16 MiB, out of memory) or is not a JSON object leaves
 * no text (not JSON: refused where it is recorded, with the message of that cause). */
static void seq_layers_config(const seq_model *s, char *buf, size_t cap) {
    size_t at = 0;
#define PUT(...)                                                                   \
    do {                                                                           \
        if (at < cap) {                                                            \
            int w_ = snprintf(buf + at, cap - at, __VA_ARGS__);                    \
            at += w_ > 0 ? (size_t)w_ : 0;                                         \
        }                                                                          \
    } while (0)
    const locale_t before = fsc_numbers_c(); /* "eps":1.5e-05, never 1,5e-05: JSON whatever the host's LC_NUMERIC,
                                              * for every layer's config (a program's own too) */
    PUT("{\"sequential\":[");
    for (int l = 0; l < s->n; l++) {
        char *lc = NULL, prefix[FSC_JSON_STR_CAP(sizeof s->prefix[l])], what[64];
        char kind[FSC_JSON_STR_CAP(sizeof s->layers[l]->kind)];
        snprintf(what, sizeof what, "sequential model: layer %d", l);
        const fsc_status got = fsc_config_text_from(s->layers[l]->ops->config ? layer_text : NULL, s->layers[l], what,
                                                    1024, &lc); /* a layer's text is short: no 64 KiB per layer */
        if (got != FSC_OK || !layer_text_ok(l, s->layers[l]->kind, lc) ||
            fsc_json_str_buf(prefix, sizeof prefix, s->prefix[l]) >= sizeof prefix ||
            fsc_json_str_buf(kind, sizeof kind, s->layers[l]->kind) >= sizeof kind) {
            free(lc);
            if (cap) buf[0] = '\0'; /* no text (not JSON: refused), never a cut */
            fsc_numbers_back(before);
            return;
        }
        PUT("%s{\"prefix\":%s,\"kind\":%s,\"layer\":%s}", l ? "," : "", prefix, kind, lc);
        free(lc);
    }
    PUT("]}");
#undef PUT
    fsc_numbers_back(before);
}

/* The family's text the model was built from (fsc_seq_record_config), else the layers' description */
static void seq_config(void *ctx, char *buf, size_t cap) {
    const seq_model *s = ctx;
    if (!s->config_text) seq_layers_config(s, buf, cap);
    else if (cap > 0) snprintf(buf, cap, "%s", s->config_text); /* cut to cap - 1 when longer: asked again */
}

static void layers_text(void *ctx, char *buf, size_t cap) { seq_layers_config(ctx, buf, cap); }

/* Whether two configuration texts are the same JSON: equal, or equal as cJSON prints them. A checkpoint records the
 * text as cJSON prints it ({"n":4} for a layer's {"n": 4}, 1.5e-05 for 1.5e-5, "\t" for "\u0009"), so the model's
 * own text is compared in that form too. */
static int same_text(const char *a, const char *b) {
    if (!strcmp(a, b)) return 1;
    cJSON *ja = fsc_json_parse(a), *jb = fsc_json_parse(b);
    char *pa = ja ? cJSON_PrintUnformatted(ja) : NULL, *pb = jb ? cJSON_PrintUnformatted(jb) : NULL;
    const int same = pa && pb && !strcmp(pa, pb);
    cJSON_free(pa), cJSON_free(pb); /* cJSON's allocator: a program may have set its hooks */
    cJSON_Delete(ja), cJSON_Delete(jb);
    return same;
}

/* A layers' description as tensor-parallel layers wrote it before they described themselves as the unsplit layer
 * (their checkpoints load at any tp): each layer with a "tp" loses "tp", "sp" and "tp_mode", and a head's "norm"
 * "none" with its "eps". NULL when the text has no such layer (or cannot be read): nothing to compare again. The
 * caller frees it with cJSON_free. */
static char *without_tp_keys(const char *recorded) {
    cJSON *j = fsc_json_parse(recorded), *l, *seq = j ? cJSON_GetObjectItemCaseSensitive(j, "sequential") : NULL;
    int changed = 0;
    if (!cJSON_IsArray(seq)) seq = NULL;
    cJSON_ArrayForEach(l, seq) {
        cJSON *o = cJSON_GetObjectItemCaseSensitive(l, "layer");
        if (!cJSON_IsObject(o) || !cJSON_GetObjectItemCaseSensitive(o, "tp")) continue;
        static const char *const keys[] = { "tp", "sp", "tp_mode" };
        for (int k = 0; k < 3; k++) cJSON_DeleteItemFromObjectCaseSensitive(o, keys[k]);
        const cJSON *norm = cJSON_GetObjectItemCaseSensitive(o, "norm");
        if (cJSON_IsString(norm) && !strcmp(norm->valuestring, "none")) {
            cJSON_DeleteItemFromObjectCaseSensitive(o, "norm");
            cJSON_DeleteItemFromObjectCaseSensitive(o, "eps");
        }
        changed = 1;
    }
    char *text = changed ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    return text;
}

/* A recorded text equal to config's; for a family's model also its layers' description, which its files and
 * checkpoints recorded before the model recorded its family's text; and one written by tensor-parallel layers
 * before they described themselves as the unsplit ones (without_tp_keys). */
static fsc_status seq_config_check(void *ctx, const char *recorded) {
    const seq_model *s = ctx;
    char *own = NULL, *layers = NULL; /* whole, any length */
    fsc_status st = fsc_config_text(seq_config, ctx, "sequential model", &own);
    if (st == FSC_OK && s->config_text) st = fsc_config_text(layers_text, ctx, "sequential model", &layers);
    if (st != FSC_OK) {
        free(own);
        return st;
    }
    int same = same_text(own, recorded) || (layers && same_text(layers, recorded));
    char *older = same ? NULL : without_tp_keys(recorded);
    same = same || (older && (same_text(own, older) || (layers && same_text(layers, older))));
    cJSON_free(older);
    if (!same)
        st = fsc_error(FSC_ERR_INVALID, "written for a model of configuration %.300s; this engine's model has %.300s",
                       recorded, own);
    free(own), free(layers);
    return st;
}

const fsc_model_ops fsc_seq_ops_ = {
    .acts_create = fsc_seq_acts_create, .acts_free = fsc_seq_acts_free, .acts_bytes = fsc_seq_acts_bytes,
    .set_batch = fsc_seq_set_batch, .stream = fsc_seq_stream, .stream_floats = seq_stream_floats,
    .forward = fsc_seq_forward, .backward = fsc_seq_backward, .init_values = seq_init,
    .backward_input = fsc_seq_backward_input, .backward_weight = fsc_seq_backward_weight,
    .splits_tied = fsc_seq_splits_tied, .acts_remake = fsc_seq_acts_remake,
    .layer_cost = seq_layer_cost, .config = seq_config, .config_check = seq_config_check, .destroy = seq_destroy,
    .logits = fsc_seq_logits, .logits_part = fsc_seq_logits_part,
};
const fsc_model_ops fsc_seq_moe_ops_ = {
    .acts_create = fsc_seq_acts_create, .acts_free = fsc_seq_acts_free, .acts_bytes = fsc_seq_acts_bytes,
    .set_batch = fsc_seq_set_batch, .stream = fsc_seq_stream, .stream_floats = seq_stream_floats,
    .forward = fsc_seq_forward, .backward = fsc_seq_backward, .init_values = seq_init,
    .backward_input = fsc_seq_backward_input, .backward_weight = fsc_seq_backward_weight,
    .splits_tied = fsc_seq_splits_tied, .acts_remake = fsc_seq_acts_remake,
    .layer_cost = seq_layer_cost, .config = seq_config, .config_check = seq_config_check, .destroy = seq_destroy,
    .aux_stats = fsc_seq_aux_stats, .aux_layers = fsc_seq_aux_layers, .set_expert_group = fsc_seq_set_expert_group, .logits = fsc_seq_logits,
    .logits_part = fsc_seq_logits_part,
};

/* Check that the layers fit together (each takes its predecessor's output, the last is the only loss layer). */
static fsc_status check_chain(const fsc_seq_layer *ls, int n) {
    for (int l = 0; l < n; l++) {
        const fsc_layer *a = ls[l].layer;
        if (!a || !a->ops || !a->ops->forward || !a->ops->backward)
            return fsc_error(FSC_ERR_INVALID, "sequential model: layer %d is NULL or lacks forward/backward", l);
        if (a->in_bytes == 0 || (l < n - 1 && a->out_floats == 0))
            return fsc_error(FSC_ERR_INVALID, "sequential model: layer %d (%s) has an empty input or output", l,
                             a->kind);
        if ((a->loss_terms > 0) != (l == n - 1))
            return fsc_error(FSC_ERR_INVALID, "sequential model: layer %d (%s) %s; the last layer and only it must "
                             "be a loss layer (loss_terms > 0)", l, a->kind,
                             a->loss_terms > 0 ? "is a loss layer" : "is not a loss layer");
        if (l > 0 && a->in_bytes != ls[l - 1].layer->out_floats * sizeof(float))
            return fsc_error(FSC_ERR_INVALID, "sequential model: layer %d (%s) takes %zu bytes per sample but layer "
                             "%d (%s) gives %zu floats", l, a->kind, a->in_bytes, l - 1, ls[l - 1].layer->kind,
                             ls[l - 1].layer->out_floats);
        if (strlen(ls[l].prefix ? ls[l].prefix : "") >= 48)
            return fsc_error(FSC_ERR_INVALID, "sequential model: prefix of layer %d is longer than 47 characters", l);
        for (int k = 0; k < l; k++) /* the model owns its layers and frees each once: one object, one place */
            if (ls[k].layer == a)
                return fsc_error(FSC_ERR_INVALID, "sequential model: layers %d and %d are the same layer object (%s); "
                                 "make one per place (to share parameters, tie them: fsc_seq_layer.tie)", k, l,
                                 a->kind);
    }
    return FSC_OK;
}

/* Same shape and the same slice of the same full shape (a tie of a tensor-parallel slice is a tie of slices). */
static int same_shape(const fsc_param_info *t, const fsc_layer_param *p) {
    if (t->ndim != p->ndim || t->split != p->split || (t->parts > 1 ? t->parts : 1) != (p->parts > 1 ? p->parts : 1) ||
        t->tp_rank != p->tp_rank || (t->tp_size > 1 ? t->tp_size : 1) != (p->tp_size > 1 ? p->tp_size : 1))
        return 0;
    for (int d = 0; d < p->ndim; d++)
        if (t->shape[d] != p->shape[d] || (t->split && t->full_shape[d] != p->full_shape[d])) return 0;
    return 1;
}

/* The split fields of a layer parameter as model.h's (full_numel from full_shape; 0 for an unsplit tensor). */
static void copy_split(fsc_param_info *ti, const fsc_layer_param *p) {
    ti->split = p->split;
    ti->parts = p->parts;
    ti->tp_rank = p->tp_rank;
    ti->tp_size = p->tp_size;
    memcpy(ti->full_shape, p->full_shape, sizeof ti->full_shape);
    ti->full_numel = 0;
    if (p->split != FSC_SPLIT_NONE) {
        ti->full_numel = 1;
        for (int d = 0; d < p->ndim; d++) ti->full_numel *= (size_t)p->full_shape[d];
    }
}

/* Name the tensors and resolve the ties. */
static fsc_status declare(seq_model *s, const fsc_seq_layer *ls) {
    int nt = 0;
    for (int l = 0; l < s->n; l++) {
        const fsc_layer *a = s->layers[l];
        for (int x = 0; x < 2 && ls[l].tie[x].param; x++) {
            int k = 0;
            while (k < a->n_params && strcmp(a->params[k].name, ls[l].tie[x].param)) k++;
            if (k == a->n_params)
                return fsc_error(FSC_ERR_INVALID, "sequential model: layer %d (%s) has no parameter %s to tie", l,
                                 a->kind, ls[l].tie[x].param);
            int t = ls[l].tie[x].to ? fsc_model_tensor_index(&s->m, ls[l].tie[x].to) : -1;
            if (t < 0)
                return fsc_error(FSC_ERR_INVALID, "sequential model: layer %d ties %s to %s, not a tensor of an "
                                 "earlier layer", l, ls[l].tie[x].param, ls[l].tie[x].to ? ls[l].tie[x].to : "(null)");
            fsc_param_info *ti = &s->info[t];
            if (!same_shape(ti, &a->params[k]))
                return fsc_error(FSC_ERR_INVALID, "sequential model: layer %d ties %s to %s of another shape", l,
                                 ls[l].tie[x].param, ti->name);
            if (ti->nusers == FSC_MODEL_MAX_USERS)
                return fsc_error(FSC_ERR_INVALID, "sequential model: %s has more than %d users", ti->name,
                                 FSC_MODEL_MAX_USERS);
            if (ti->nusers == 0 || ti->users[ti->nusers - 1] != l) ti->users[ti->nusers++] = l;
            s->tensor[l][k] = t;
            s->tied[l][k] = 1; /* its tied-gradient buffer comes with the first record that needs it (seq_run.c) */
        }
        for (int k = 0; k < a->n_params; k++) {
            if (s->tied[l][k]) continue;
            fsc_param_info *ti = &s->info[nt];
            if (strlen(s->prefix[l]) + strlen(a->params[k].name) >= sizeof ti->name)
                return fsc_error(FSC_ERR_INVALID, "sequential model: %s%s is longer than %zu characters", s->prefix[l],
                                 a->params[k].name, sizeof ti->name - 1);
            const size_t np = strlen(s->prefix[l]);
            memcpy(ti->name, s->prefix[l], np);
            memcpy(ti->name + np, a->params[k].name, strlen(a->params[k].name) + 1);
            ti->ndim = a->params[k].ndim;
            memcpy(ti->shape, a->params[k].shape, sizeof ti->shape);
            ti->numel = a->params[k].numel;
            copy_split(ti, &a->params[k]);
            ti->layer = l;
            ti->expert = a->ops->param_expert ? a->ops->param_expert(a, k) : -1;
            if (ti->expert + 1 > s->m.n_experts) s->m.n_experts = ti->expert + 1;
            ti->decay = a->params[k].decay;
            s->tensor[l][k] = nt++;
            s->m.n_tensors = nt;
        }
    }
    if (nt == 0) return fsc_error(FSC_ERR_INVALID, "sequential model: the layers declare no parameters");
    const int dup = fsc_param_duplicate_name(s->info, nt);
    if (dup >= 0)
        return fsc_error(FSC_ERR_INVALID, "sequential model: two tensors are called %s (give the layers prefixes)",
                         s->info[dup].name);
    return FSC_OK;
}

/* The layers of a model not made, each object once (a list may name one twice: check_chain refuses it). */
static void free_layers_once(const fsc_seq_layer *ls, int n) {
    for (int l = 0; ls && l < n; l++) {
        int seen = 0;
        for (int k = 0; k < l && !seen; k++) seen = ls[k].layer == ls[l].layer;
        if (!seen) fsc_layer_free(ls[l].layer);
    }
}

fsc_status fsc_seq_model_create(fsc_device *dev, const fsc_seq_layer *ls, int n, fsc_model **out) {
    if (out) *out = NULL;
    if (!dev || !ls || n < 1 || !out) {
        free_layers_once(ls, n);
        return fsc_error(FSC_ERR_INVALID, "fsc_seq_model_create: %s", !dev  ? "dev is NULL"
                                                                    : !ls ? "layers is NULL"
                                                                    : !out ? "out is NULL"
                                                                           : "need at least one layer (n < 1)");
    }
    fsc_status st = check_chain(ls, n);
    seq_model *s = st == FSC_OK ? calloc(1, sizeof *s) : NULL;
    int ntmax = 0;
    for (int l = 0; l < n; l++) ntmax += ls[l].layer ? ls[l].layer->n_params : 0;
    if (s) {
        s->dev = dev, s->n = n;
        s->layers = calloc((size_t)n, sizeof *s->layers);
        s->prefix = calloc((size_t)n, sizeof *s->prefix);
        s->tensor = calloc((size_t)n, sizeof *s->tensor);
        s->tied = calloc((size_t)n, sizeof *s->tied);
        const size_t nt = ntmax > 0 ? (size_t)ntmax : 1;
        s->info = calloc(nt, sizeof *s->info);
        s->param = calloc(nt, sizeof *s->param);
        s->grad = calloc(nt, sizeof *s->grad);
        s->tied_grad = calloc(nt, sizeof *s->tied_grad);
        if (!s->layers || !s->prefix || !s->tensor || !s->tied || !s->info || !s->param || !s->grad || !s->tied_grad)
            st = fsc_error(FSC_ERR_NOMEM, "sequential model: out of host memory");
    } else if (st == FSC_OK) {
        st = fsc_error(FSC_ERR_NOMEM, "sequential model: out of host memory");
    }
    if (!s || st != FSC_OK) { /* the layers are the model's: free them */
        free_layers_once(ls, n);
        if (s) s->n = 0, seq_destroy(&s->m);
        return st;
    }
    int maxp = 1;
    for (int l = 0; l < n; l++) {
        s->layers[l] = ls[l].layer;
        snprintf(s->prefix[l], sizeof s->prefix[l], "%s", ls[l].prefix ? ls[l].prefix : "");
        if (l < n - 1 && ls[l].layer->out_floats > s->max_stream) s->max_stream = ls[l].layer->out_floats;
        const size_t np = ls[l].layer->n_params > 0 ? (size_t)ls[l].layer->n_params : 1;
        s->tensor[l] = calloc(np, sizeof **s->tensor);
        s->tied[l] = calloc(np, sizeof **s->tied);
        if (!s->tensor[l] || !s->tied[l]) st = fsc_error(FSC_ERR_NOMEM, "sequential model: out of host memory");
        if (ls[l].layer->n_params > maxp) maxp = ls[l].layer->n_params;
    }
    s->cparam = calloc((size_t)maxp, sizeof *s->cparam);
    s->cgrad = calloc((size_t)maxp, sizeof *s->cgrad);
    if (st == FSC_OK && (!s->cparam || !s->cgrad)) st = fsc_error(FSC_ERR_NOMEM, "sequential model: out of host memory");
    if (st != FSC_OK) {
        seq_destroy(&s->m);
        return st;
    }
    const fsc_layer *first = ls[0].layer, *last = ls[n - 1].layer;
    s->m = (fsc_model){ .n_layers = n, .info = s->info, .param = s->param, .grad = s->grad,
                        .tied_grad = s->tied_grad, .sample_input_bytes = first->in_bytes,
                        .sample_target_bytes = last->target_bytes, .loss_terms = last->loss_terms,
                        .ops = &fsc_seq_ops_, .ctx = s };
    st = declare(s, ls);
    if (s->m.n_experts) s->m.ops = &fsc_seq_moe_ops_; /* aux statistics and expert parallelism */
    if (st == FSC_OK) st = fsc_model_validate(&s->m);
    if (st != FSC_OK) {
        seq_destroy(&s->m);
        return st;
    }
    *out = &s->m;
    return FSC_OK;
}

fsc_status fsc_seq_record_config(fsc_model *m, const char *text) {
    if (!m || (m->ops != &fsc_seq_ops_ && m->ops != &fsc_seq_moe_ops_)) return FSC_OK;
    seq_model *s = m->ctx;
    char *t = strdup(text);
    if (!t) return fsc_error(FSC_ERR_NOMEM, "sequential model: out of memory for its configuration text");
    free(s->config_text);
    s->config_text = t;
    return FSC_OK;
}

fsc_layer *fsc_seq_model_layer(fsc_model *m, int l) {
    if (!m || (m->ops != &fsc_seq_ops_ && m->ops != &fsc_seq_moe_ops_)) return NULL;
    seq_model *s = m->ctx;
    return l >= 0 && l < s->n ? s->layers[l] : NULL;
}
