/* Checkpoint metadata (metadata.json): the fsc_ckpt_meta structure to JSON text with cJSON, and back
 * with complete validation, since the text comes from disk: field types and ranges, plain file names,
 * dtypes, shapes, unique names, and pieces that tile every tensor exactly. Messages name the file
 * (`what`), the field and the tensor. The checksum, the bound on parsing and the checks of each field
 * against its second source are in ckpt_meta_check.c.
 * Not here: the data files (ckpt_fs.c reads pieces), or anything that needs an engine. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "ckpt_impl.h"
#include "io/json_lock.h"
#include "core/model_text.h" /* fsc_config_text */

#define MAX_U53 ((uint64_t)1 << 53)

static const char *const shard_names[] = { "full", "grad_op", "none", "hybrid" };
static const char *const kind_names[] = { "none", "ddp", "fsdp", "zero1", "zero2" };

const char *fsc_ckpt_format_name(fsc_ckpt_format f) { return f == FSC_CKPT_FULL ? "full" : "sharded"; }

const char *ck_state_name(fsc_optim_kind kind, int which) {
    if (kind == FSC_OPT_ADAMW) return which == 0 ? "m" : which == 1 ? "v" : NULL;
    return which == 0 ? "momentum" : NULL;
}

void ck_global_name(char *buf, size_t cap, fsc_optim_kind kind, int state, const char *tensor) {
    if (state == 0) snprintf(buf, cap, "%s", tensor);
    else snprintf(buf, cap, "optim.%s.%s", ck_state_name(kind, state - 1), tensor);
}

/* ---------------------------------------------------------------------------------------------- */
/* Writing */

static cJSON *num(double v) { return cJSON_CreateNumber(v); }

fsc_status ck_model_config(const fsc_engine *e, char **out) {
    *out = NULL;
    char *buf = NULL;
    FSC_TRY(fsc_config_text(ENG(e).m->ops->config, ENG(e).m->ctx, "checkpoint", &buf)); /* whole, any length */
    cJSON *o = fsc_json_parse(buf);
    char *t = cJSON_IsObject(o) ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    fsc_status s = t ? FSC_OK : fsc_error(FSC_ERR_INVALID, "checkpoint: the model's configuration is not a JSON "
                                          "object: %.200s", buf);
    free(buf);
    if (t && !(*out = strdup(t))) s = fsc_error(FSC_ERR_NOMEM, "checkpoint: out of host memory");
    cJSON_free(t); /* cJSON's allocator: a program may have set its hooks */
    return s;
}

fsc_status ck_check_model_tensors(const fsc_engine *e, const fsc_ckpt_meta *m, const char *what) {
    if (!ENG(e).m->ops->check_tensors) return FSC_OK;
    fsc_param_info *p = NULL;
    int n = 0;
    FSC_TRY(fsc_ckpt_meta_params(m, &p, &n));
    fsc_status s = ENG(e).m->ops->check_tensors(ENG(e).m->ctx, m->model_config ? m->model_config : "{}", p, n);
    free(p);
    return s == FSC_OK ? s : fsc_error_prefix(s, "%s", what);
}

char *ck_meta_json(const fsc_ckpt_meta *m) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return NULL;
    char seed[24];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)m->seed);
    cJSON_AddStringToObject(root, "metadata_crc32", "00000000"); /* first: ck_meta_seal fills it in */
    cJSON_AddStringToObject(root, "format", "fsc-checkpoint");
    cJSON_AddNumberToObject(root, "version", CK_META_VERSION);
    cJSON_AddStringToObject(root, "run_id", m->run_id);
    cJSON_AddStringToObject(root, "layout", fsc_ckpt_format_name(m->format));
    cJSON_AddNumberToObject(root, "step", (double)m->step);
    cJSON_AddNumberToObject(root, "optim_steps", (double)m->optim_steps);
    cJSON_AddNumberToObject(root, "skipped_in_row", (double)m->skipped_in_row);
    cJSON_AddStringToObject(root, "seed", seed);
    cJSON *mc = m->model_config ? fsc_json_parse(m->model_config) : NULL;
    if (!cJSON_IsObject(mc)) { /* none given (or not an object): the empty configuration */
        cJSON_Delete(mc);
        mc = cJSON_CreateObject();
    }
    cJSON_AddItemToObject(root, "model", mc); /* the model's own configuration, as its config op wrote it */
    cJSON *op = cJSON_AddObjectToObject(root, "optimizer");
    cJSON_AddStringToObject(op, "kind", m->optim.kind == FSC_OPT_ADAMW ? "adamw" : "sgd");
    cJSON_AddNumberToObject(op, "lr", m->optim.lr);
    cJSON_AddNumberToObject(op, "momentum", m->optim.momentum);
    cJSON_AddNumberToObject(op, "weight_decay", m->optim.weight_decay);
    cJSON_AddNumberToObject(op, "beta1", m->optim.beta1);
    cJSON_AddNumberToObject(op, "beta2", m->optim.beta2);
    cJSON_AddNumberToObject(op, "eps", m->optim.eps);
    cJSON *pa = cJSON_AddObjectToObject(root, "parallel");
    cJSON_AddStringToObject(pa, "kind", kind_names[m->kind]);
    cJSON_AddStringToObject(pa, "shard", shard_names[m->shard]);
    cJSON_AddNumberToObject(pa, "world", m->world);
    cJSON_AddNumberToObject(pa, "tp", m->tp);
    cJSON_AddNumberToObject(pa, "ep", m->ep > 1 ? m->ep : 1);
    cJSON_AddNumberToObject(pa, "pp", m->pp);
    cJSON_AddNumberToObject(pa, "hybrid_group", m->hybrid_group);
    cJSON_AddNumberToObject(pa, "accum", m->accum);
    cJSON_AddStringToObject(pa, "param_dtype", fsc_dtype_name(m->param_dtype));
    cJSON_AddStringToObject(pa, "reduce_dtype", fsc_dtype_name(m->reduce_dtype));
    cJSON_AddNumberToObject(pa, "clip", m->clip);
    cJSON *sc = cJSON_AddObjectToObject(root, "scaler");
    cJSON_AddBoolToObject(sc, "enabled", m->scaler_enabled);
    cJSON_AddNumberToObject(sc, "scale", m->scaler.scale);
    cJSON_AddNumberToObject(sc, "growth_factor", m->scaler.growth_factor);
    cJSON_AddNumberToObject(sc, "backoff_factor", m->scaler.backoff_factor);
    cJSON_AddNumberToObject(sc, "growth_interval", m->scaler.growth_interval);
    cJSON_AddNumberToObject(sc, "good_steps", m->scaler.good_steps);
    cJSON_AddNumberToObject(sc, "skipped", (double)m->scaler.skipped);
    cJSON *files = cJSON_AddArrayToObject(root, "files");
    for (int i = 0; i < m->nfiles; i++) cJSON_AddItemToArray(files, cJSON_CreateString(m->files[i]));
    cJSON *ts = cJSON_AddArrayToObject(root, "tensors");
    for (int i = 0; i < m->ntensors; i++) {
        const fsc_ckpt_tensor *t = &m->tensors[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToArray(ts, o);
        cJSON_AddStringToObject(o, "name", t->name);
        cJSON_AddStringToObject(o, "dtype", "F32");
        cJSON *sh = cJSON_AddArrayToObject(o, "shape");
        for (int d = 0; d < t->ndim; d++) cJSON_AddItemToArray(sh, num((double)t->shape[d]));
        cJSON *ps = cJSON_AddArrayToObject(o, "pieces");
        for (int k = 0; k < t->npieces; k++) {
            const fsc_ckpt_piece *p = &t->pieces[k];
            cJSON *po = cJSON_CreateObject();
            cJSON_AddItemToArray(ps, po);
            cJSON_AddNumberToObject(po, "file", p->file);
            cJSON_AddStringToObject(po, "entry", p->entry);
            cJSON_AddNumberToObject(po, "first", (double)p->first);
            cJSON_AddNumberToObject(po, "n", (double)p->n);
            cJSON_AddNumberToObject(po, "crc32", (double)p->crc32);
        }
    }
    char *text = cJSON_PrintUnformatted(root); /* NULL if any allocation above failed */
    cJSON_Delete(root);
    if (text && ck_meta_seal(text, strlen(text)) != 0) { /* cannot happen: metadata_crc32 comes first */
        cJSON_free(text);
        text = NULL;
    }
    return text;
}

/* ---------------------------------------------------------------------------------------------- */
/* Reading */

typedef struct {
    const char *what; /* the file, for messages */
} rd;

static const cJSON *field(const cJSON *o, const char *key) { return cJSON_GetObjectItemCaseSensitive(o, key); }

static fsc_status need_obj(const rd *r, const cJSON *o, const char *name) {
    if (!cJSON_IsObject(o)) return fsc_error(FSC_ERR_FORMAT, "%s: \"%s\" is missing or not a JSON object", r->what, name);
    return FSC_OK;
}

/* An integer in [lo, hi] (both within +-2^53). */
static fsc_status get_int(const rd *r, const cJSON *o, const char *obj, const char *key, double lo, double hi,
                          int64_t *out) {
    const cJSON *x = field(o, key);
    if (!cJSON_IsNumber(x))
        return fsc_error(FSC_ERR_FORMAT, "%s: %s%s%s is missing or not a number", r->what, obj, *obj ? "." : "", key);
    double v = x->valuedouble;
    if (!(v >= lo && v <= hi) || v != floor(v))
        return fsc_error(FSC_ERR_FORMAT, "%s: %s%s%s = %.17g is not an integer in [%.0f, %.0f]", r->what, obj,
                         *obj ? "." : "", key, v, lo, hi);
    *out = (int64_t)v;
    return FSC_OK;
}

static fsc_status get_i32(const rd *r, const cJSON *o, const char *obj, const char *key, int lo, int *out) {
    int64_t v;
    FSC_TRY(get_int(r, o, obj, key, lo, 2147483647.0, &v));
    *out = (int)v;
    return FSC_OK;
}

/* A finite number that is a float. */
static fsc_status get_float(const rd *r, const cJSON *o, const char *obj, const char *key, float *out) {
    const cJSON *x = field(o, key);
    if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble) || !isfinite((float)x->valuedouble))
        return fsc_error(FSC_ERR_FORMAT, "%s: %s.%s is missing or not a finite number", r->what, obj, key);
    *out = (float)x->valuedouble;
    return FSC_OK;
}

static fsc_status get_choice(const rd *r, const cJSON *o, const char *obj, const char *key,
                             const char *const *names, int n, int *out) {
    const cJSON *x = field(o, key);
    if (!cJSON_IsString(x)) return fsc_error(FSC_ERR_FORMAT, "%s: %s.%s is missing or not a string", r->what, obj, key);
    for (int i = 0; i < n; i++)
        if (!strcmp(x->valuestring, names[i])) {
            *out = i;
            return FSC_OK;
        }
    return fsc_error(FSC_ERR_FORMAT, "%s: %s.%s has the unknown value \"%.40s\"", r->what, obj, key, x->valuestring);
}

static fsc_status get_dtype(const rd *r, const cJSON *o, const char *obj, const char *key, fsc_dtype *out) {
    const cJSON *x = field(o, key);
    if (!cJSON_IsString(x) || fsc_dtype_parse(x->valuestring, out) != 0)
        return fsc_error(FSC_ERR_FORMAT, "%s: %s.%s is missing or not a dtype name", r->what, obj, key);
    return FSC_OK;
}

static fsc_status parse_head(const rd *r, const cJSON *root, fsc_ckpt_meta *m) {
    const cJSON *f = field(root, "format");
    if (!cJSON_IsString(f) || strcmp(f->valuestring, "fsc-checkpoint") != 0)
        return fsc_error(FSC_ERR_FORMAT, "%s: not an fsc checkpoint (\"format\" is not \"fsc-checkpoint\")", r->what);
    int64_t v;
    FSC_TRY(get_int(r, root, "", "version", 0, 1e9, &v));
    if (v != CK_META_VERSION)
        return fsc_error(FSC_ERR_UNSUPPORTED, "%s: checkpoint version %lld; this fsc reads version %d", r->what,
                         (long long)v, CK_META_VERSION);
    const cJSON *id = field(root, "run_id");
    int hex = cJSON_IsString(id) && strlen(id->valuestring) == FSC_CKPT_RUN_ID - 1;
    for (int i = 0; hex && i < FSC_CKPT_RUN_ID - 1; i++)
        hex = (id->valuestring[i] >= '0' && id->valuestring[i] <= '9') || (id->valuestring[i] >= 'a' && id->valuestring[i] <= 'f');
    if (!hex)
        return fsc_error(FSC_ERR_FORMAT, "%s: \"run_id\" is missing or not %d lowercase hex digits", r->what,
                         FSC_CKPT_RUN_ID - 1);
    memcpy(m->run_id, id->valuestring, FSC_CKPT_RUN_ID);
    static const char *const layouts[] = { "sharded", "full" };
    int layout = 0;
    FSC_TRY(get_choice(r, root, "checkpoint", "layout", layouts, 2, &layout));
    m->format = (fsc_ckpt_format)layout;
    FSC_TRY(get_int(r, root, "", "step", 0, (double)MAX_U53, &m->step));
    FSC_TRY(get_int(r, root, "", "optim_steps", 0, (double)MAX_U53, &m->optim_steps));
    m->skipped_in_row = 0; /* absent from the checkpoints written before it: none counted */
    if (field(root, "skipped_in_row"))
        FSC_TRY(get_int(r, root, "", "skipped_in_row", 0, (double)MAX_U53, &m->skipped_in_row));
    const cJSON *s = field(root, "seed");
    char *end = NULL;
    if (!cJSON_IsString(s) || !s->valuestring[0] || strlen(s->valuestring) > 20 || s->valuestring[0] == '-' ||
        s->valuestring[0] == '+' || s->valuestring[0] == ' ')
        return fsc_error(FSC_ERR_FORMAT, "%s: \"seed\" is missing or not a decimal string", r->what);
    unsigned long long sd = strtoull(s->valuestring, &end, 10);
    if (*end) return fsc_error(FSC_ERR_FORMAT, "%s: \"seed\" is not a decimal integer", r->what);
    m->seed = (uint64_t)sd;

    const cJSON *mo = field(root, "model");
    FSC_TRY(need_obj(r, mo, "model"));
    char *mtext = cJSON_PrintUnformatted(mo);
    m->model_config = mtext ? strdup(mtext) : NULL; /* ours: fsc_ckpt_meta_free frees it with free */
    cJSON_free(mtext);
    if (!m->model_config) return fsc_error(FSC_ERR_NOMEM, "%s: out of memory for the model configuration", r->what);

    const cJSON *op = field(root, "optimizer");
    FSC_TRY(need_obj(r, op, "optimizer"));
    static const char *const kinds[] = { "sgd", "adamw" };
    int k;
    FSC_TRY(get_choice(r, op, "optimizer", "kind", kinds, 2, &k));
    m->optim.kind = (fsc_optim_kind)k;
    FSC_TRY(get_float(r, op, "optimizer", "lr", &m->optim.lr));
    FSC_TRY(get_float(r, op, "optimizer", "momentum", &m->optim.momentum));
    FSC_TRY(get_float(r, op, "optimizer", "weight_decay", &m->optim.weight_decay));
    FSC_TRY(get_float(r, op, "optimizer", "beta1", &m->optim.beta1));
    FSC_TRY(get_float(r, op, "optimizer", "beta2", &m->optim.beta2));
    FSC_TRY(get_float(r, op, "optimizer", "eps", &m->optim.eps));

    const cJSON *pa = field(root, "parallel");
    FSC_TRY(need_obj(r, pa, "parallel"));
    int pk, sh;
    FSC_TRY(get_choice(r, pa, "parallel", "kind", kind_names, 5, &pk));
    FSC_TRY(get_choice(r, pa, "parallel", "shard", shard_names, 4, &sh));
    m->kind = (fsc_parallel_kind)pk;
    m->shard = (fsc_shard_strategy)sh;
    FSC_TRY(get_i32(r, pa, "parallel", "world", 1, &m->world));
    FSC_TRY(get_i32(r, pa, "parallel", "tp", 1, &m->tp));
    m->ep = 1; /* absent from the records written before it was kept */
    if (field(pa, "ep")) FSC_TRY(get_i32(r, pa, "parallel", "ep", 1, &m->ep));
    FSC_TRY(get_i32(r, pa, "parallel", "pp", 0, &m->pp));
    FSC_TRY(get_i32(r, pa, "parallel", "hybrid_group", 0, &m->hybrid_group));
    FSC_TRY(get_i32(r, pa, "parallel", "accum", 1, &m->accum));
    FSC_TRY(get_dtype(r, pa, "parallel", "param_dtype", &m->param_dtype));
    FSC_TRY(get_dtype(r, pa, "parallel", "reduce_dtype", &m->reduce_dtype));
    FSC_TRY(get_float(r, pa, "parallel", "clip", &m->clip));

    const cJSON *sc = field(root, "scaler");
    FSC_TRY(need_obj(r, sc, "scaler"));
    const cJSON *en = field(sc, "enabled");
    if (!cJSON_IsBool(en)) return fsc_error(FSC_ERR_FORMAT, "%s: scaler.enabled is missing or not true/false", r->what);
    m->scaler_enabled = cJSON_IsTrue(en);
    FSC_TRY(get_float(r, sc, "scaler", "scale", &m->scaler.scale));
    FSC_TRY(get_float(r, sc, "scaler", "growth_factor", &m->scaler.growth_factor));
    FSC_TRY(get_float(r, sc, "scaler", "backoff_factor", &m->scaler.backoff_factor));
    FSC_TRY(get_i32(r, sc, "scaler", "growth_interval", 0, &m->scaler.growth_interval));
    FSC_TRY(get_i32(r, sc, "scaler", "good_steps", 0, &m->scaler.good_steps));
    FSC_TRY(get_int(r, sc, "scaler", "skipped", 0, (double)MAX_U53, &m->scaler.skipped));
    if (m->scaler_enabled && !(m->scaler.scale > 0))
        return fsc_error(FSC_ERR_FORMAT, "%s: scaler.scale %g is not positive", r->what, (double)m->scaler.scale);
    return FSC_OK;
}

/* A file name inside the checkpoint directory: no path, nothing hidden. */
static int plain_name(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n >= FSC_CKPT_MAX_FILE || s[0] == '.') return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '/' || c == '\\' || c < 0x20 || c == 0x7f) return 0;
    }
    return 1;
}

static fsc_status parse_files(const rd *r, const cJSON *root, fsc_ckpt_meta *m) {
    const cJSON *fs = field(root, "files");
    if (!cJSON_IsArray(fs)) return fsc_error(FSC_ERR_FORMAT, "%s: \"files\" is missing or not an array", r->what);
    int n = cJSON_GetArraySize(fs);
    m->files = calloc((size_t)n + 1, sizeof *m->files);
    if (!m->files) return fsc_error(FSC_ERR_NOMEM, "%s: out of memory for %d file names", r->what, n);
    for (const cJSON *x = fs->child; x; x = x->next) {
        if (!cJSON_IsString(x) || !plain_name(x->valuestring))
            return fsc_error(FSC_ERR_FORMAT, "%s: files[%d] is not a plain file name (no '/', no leading '.', "
                             "below %d bytes)", r->what, m->nfiles, FSC_CKPT_MAX_FILE);
        for (int i = 0; i < m->nfiles; i++)
            if (!strcmp(m->files[i], x->valuestring))
                return fsc_error(FSC_ERR_FORMAT, "%s: file %s is listed twice", r->what, x->valuestring);
        snprintf(m->files[m->nfiles++], FSC_CKPT_MAX_FILE, "%s", x->valuestring);
    }
    return FSC_OK;
}

static int cmp_piece(const void *a, const void *b) {
    const fsc_ckpt_piece *x = a, *y = b;
    return x->first < y->first ? -1 : x->first > y->first;
}

static fsc_status parse_piece(const rd *r, const fsc_ckpt_meta *m, const fsc_ckpt_tensor *t, const cJSON *o,
                              fsc_ckpt_piece *p) {
    char where[FSC_ST_MAX_NAME + 32];
    snprintf(where, sizeof where, "tensor %s: piece", t->name);
    if (!cJSON_IsObject(o)) return fsc_error(FSC_ERR_FORMAT, "%s: %s is not a JSON object", r->what, where);
    int64_t file, first, n, crc;
    FSC_TRY(get_int(r, o, where, "file", 0, 2147483647.0, &file));
    if (file >= m->nfiles)
        return fsc_error(FSC_ERR_FORMAT, "%s: %s names file %lld but the checkpoint lists %d files", r->what, where,
                         (long long)file, m->nfiles);
    FSC_TRY(get_int(r, o, where, "first", 0, (double)MAX_U53, &first));
    FSC_TRY(get_int(r, o, where, "n", 1, (double)MAX_U53, &n));
    FSC_TRY(get_int(r, o, where, "crc32", 0, 4294967295.0, &crc));
    const cJSON *en = field(o, "entry");
    if (!cJSON_IsString(en) || !en->valuestring[0] || strlen(en->valuestring) >= FSC_ST_MAX_NAME)
        return fsc_error(FSC_ERR_FORMAT, "%s: %s has no entry name (or one of %d bytes or more)", r->what, where,
                         FSC_ST_MAX_NAME);
    if ((uint64_t)first > t->numel || (uint64_t)n > t->numel - (uint64_t)first)
        return fsc_error(FSC_ERR_FORMAT, "%s: tensor %s: piece [%lld, %lld) lies outside its %llu elements", r->what,
                         t->name, (long long)first, (long long)(first + n), (unsigned long long)t->numel);
    p->file = (int)file;
    p->first = (uint64_t)first;
    p->n = (uint64_t)n;
    p->crc32 = (uint32_t)crc;
    snprintf(p->entry, sizeof p->entry, "%s", en->valuestring);
    return FSC_OK;
}

static fsc_status parse_tensor(const rd *r, const fsc_ckpt_meta *m, const cJSON *o, fsc_ckpt_tensor *t) {
    if (!cJSON_IsObject(o)) return fsc_error(FSC_ERR_FORMAT, "%s: tensors[] holds something other than an object", r->what);
    const cJSON *nm = field(o, "name");
    if (!cJSON_IsString(nm) || !nm->valuestring[0] || strlen(nm->valuestring) >= FSC_ST_MAX_NAME)
        return fsc_error(FSC_ERR_FORMAT, "%s: a tensor has no name (or one of %d bytes or more)", r->what,
                         FSC_ST_MAX_NAME);
    snprintf(t->name, sizeof t->name, "%s", nm->valuestring);
    const cJSON *dt = field(o, "dtype");
    if (!cJSON_IsString(dt)) return fsc_error(FSC_ERR_FORMAT, "%s: tensor %s has no dtype", r->what, t->name);
    if (strcmp(dt->valuestring, "F32") != 0)
        return fsc_error(FSC_ERR_FORMAT, "%s: tensor %s has dtype \"%.20s\"; checkpoints hold F32 only", r->what,
                         t->name, dt->valuestring);
    t->dtype = FSC_F32;
    const cJSON *sh = field(o, "shape");
    if (!cJSON_IsArray(sh) || cJSON_GetArraySize(sh) > 4)
        return fsc_error(FSC_ERR_FORMAT, "%s: tensor %s: shape is not an array of at most 4 sizes", r->what, t->name);
    t->numel = 1;
    for (const cJSON *x = sh->child; x; x = x->next) {
        double v = cJSON_IsNumber(x) ? x->valuedouble : -1;
        if (!(v >= 0 && v <= (double)MAX_U53) || v != floor(v))
            return fsc_error(FSC_ERR_FORMAT, "%s: tensor %s: shape holds something other than a size", r->what, t->name);
        t->shape[t->ndim++] = (int64_t)v;
        if (v != 0 && t->numel > MAX_U53 / (uint64_t)v)
            return fsc_error(FSC_ERR_FORMAT, "%s: tensor %s: shape too large", r->what, t->name);
        t->numel *= (uint64_t)v;
    }
    const cJSON *ps = field(o, "pieces");
    if (!cJSON_IsArray(ps)) return fsc_error(FSC_ERR_FORMAT, "%s: tensor %s has no pieces array", r->what, t->name);
    int np = cJSON_GetArraySize(ps);
    t->pieces = calloc((size_t)np + 1, sizeof *t->pieces);
    if (!t->pieces) return fsc_error(FSC_ERR_NOMEM, "%s: out of memory for the pieces of %s", r->what, t->name);
    for (const cJSON *x = ps->child; x; x = x->next) FSC_TRY(parse_piece(r, m, t, x, &t->pieces[t->npieces++]));
    qsort(t->pieces, (size_t)t->npieces, sizeof *t->pieces, cmp_piece);
    uint64_t at = 0;
    for (int k = 0; k < t->npieces; k++) {
        const fsc_ckpt_piece *p = &t->pieces[k];
        if (p->first < at)
            return fsc_error(FSC_ERR_FORMAT, "%s: tensor %s: pieces overlap at elements [%llu, %llu)", r->what, t->name,
                             (unsigned long long)p->first, (unsigned long long)at);
        if (p->first > at)
            return fsc_error(FSC_ERR_FORMAT, "%s: tensor %s: elements [%llu, %llu) are in no piece", r->what, t->name,
                             (unsigned long long)at, (unsigned long long)p->first);
        at = p->first + p->n;
    }
    if (at != t->numel)
        return fsc_error(FSC_ERR_FORMAT, "%s: tensor %s: elements [%llu, %llu) are in no piece", r->what, t->name,
                         (unsigned long long)at, (unsigned long long)t->numel);
    return FSC_OK;
}

typedef struct { const char *a; int b; const char *c; } key3;

static int cmp_key(const void *x, const void *y) {
    const key3 *p = x, *q = y;
    int c = strcmp(p->a, q->a);
    if (c) return c;
    if (p->b != q->b) return p->b < q->b ? -1 : 1;
    return strcmp(p->c, q->c);
}

/* Tensor names unique; (file, entry) pairs unique over the whole checkpoint. */
static fsc_status check_unique(const rd *r, const fsc_ckpt_meta *m) {
    size_t np = 0;
    for (int i = 0; i < m->ntensors; i++) np += (size_t)m->tensors[i].npieces;
    size_t cap = np > (size_t)m->ntensors ? np : (size_t)m->ntensors;
    key3 *k = malloc((cap + 1) * sizeof *k);
    if (!k) return fsc_error(FSC_ERR_NOMEM, "%s: out of memory", r->what);
    for (int i = 0; i < m->ntensors; i++) k[i] = (key3){ m->tensors[i].name, 0, "" };
    qsort(k, (size_t)m->ntensors, sizeof *k, cmp_key);
    fsc_status s = FSC_OK;
    for (int i = 1; i < m->ntensors && s == FSC_OK; i++)
        if (!strcmp(k[i].a, k[i - 1].a)) s = fsc_error(FSC_ERR_FORMAT, "%s: tensor %s appears twice", r->what, k[i].a);
    size_t c = 0;
    for (int i = 0; i < m->ntensors; i++)
        for (int j = 0; j < m->tensors[i].npieces; j++) {
            const fsc_ckpt_piece *p = &m->tensors[i].pieces[j];
            k[c++] = (key3){ m->files[p->file], 0, p->entry };
        }
    qsort(k, c, sizeof *k, cmp_key);
    for (size_t i = 1; i < c && s == FSC_OK; i++)
        if (!cmp_key(&k[i], &k[i - 1]))
            s = fsc_error(FSC_ERR_FORMAT, "%s: entry %s of file %s is claimed by two pieces", r->what, k[i].c, k[i].a);
    free(k);
    return s;
}

static fsc_status parse_root(const rd *r, const cJSON *root, fsc_ckpt_meta *m) {
    if (!cJSON_IsObject(root)) return fsc_error(FSC_ERR_FORMAT, "%s: not a JSON object", r->what);
    FSC_TRY(parse_head(r, root, m));
    FSC_TRY(parse_files(r, root, m));
    const cJSON *ts = field(root, "tensors");
    if (!cJSON_IsArray(ts)) return fsc_error(FSC_ERR_FORMAT, "%s: \"tensors\" is missing or not an array", r->what);
    int n = cJSON_GetArraySize(ts);
    m->tensors = calloc((size_t)n + 1, sizeof *m->tensors);
    if (!m->tensors) return fsc_error(FSC_ERR_NOMEM, "%s: out of memory for %d tensors", r->what, n);
    for (const cJSON *x = ts->child; x; x = x->next) FSC_TRY(parse_tensor(r, m, x, &m->tensors[m->ntensors++]));
    FSC_TRY(check_unique(r, m));
    return ck_meta_check_sources(m, r->what);
}

fsc_status fsc_ckpt_meta_parse(const char *text, size_t len, const char *what, fsc_ckpt_meta **out) {
    FSC_CHECK_ARG(out);
    *out = NULL;
    FSC_CHECK_ARG(text);
    rd r = { what ? what : "checkpoint metadata" };
    if (!text) return fsc_error(FSC_ERR_INVALID, "%s: no text", r.what);
    FSC_TRY(ck_meta_check_text(text, len, r.what)); /* size, checksum and parsing cost, before cJSON */
    fsc_ckpt_meta *m = calloc(1, sizeof *m);
    if (!m) return fsc_error(FSC_ERR_NOMEM, "%s: out of memory", r.what);
    const char *end = NULL;
    pthread_mutex_lock(&fsc_json_lock);
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    pthread_mutex_unlock(&fsc_json_lock);
    fsc_status s = FSC_OK;
    if (!root) s = fsc_error(FSC_ERR_FORMAT, "%s: not valid JSON (truncated or corrupted)", r.what);
    for (const char *p = end; s == FSC_OK && p && p < text + len; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r')
            s = fsc_error(FSC_ERR_FORMAT, "%s: bytes after the JSON object", r.what);
    if (s == FSC_OK) s = parse_root(&r, root, m);
    cJSON_Delete(root);
    if (s != FSC_OK) {
        fsc_ckpt_meta_free(m);
        return s;
    }
    *out = m;
    return FSC_OK;
}

fsc_status fsc_ckpt_meta_read(const char *path, fsc_ckpt_meta **out) {
    FSC_CHECK_ARG(out);
    *out = NULL;
    FSC_CHECK_ARG(path);
    char file[4096];
    FSC_TRY(ck_join(file, sizeof file, path, CK_META_NAME));
    char *text;
    size_t len;
    FSC_TRY(ck_read_all(file, CK_MAX_META, &text, &len));
    fsc_status s = fsc_ckpt_meta_parse(text, len, file, out);
    free(text);
    if (s == FSC_OK) s = ck_meta_check_dir(*out, path, file);
    if (s != FSC_OK) {
        fsc_ckpt_meta_free(*out);
        *out = NULL;
    }
    return s;
}

void fsc_ckpt_meta_free(fsc_ckpt_meta *m) {
    if (!m) return;
    free(m->model_config);
    for (int i = 0; i < m->ntensors; i++) free(m->tensors[i].pieces);
    free(m->tensors);
    free(m->files);
    free(m);
}

const fsc_ckpt_tensor *fsc_ckpt_meta_find(const fsc_ckpt_meta *m, const char *name) {
    if (!m || !name) return NULL;
    for (int i = 0; i < m->ntensors; i++)
        if (!strcmp(m->tensors[i].name, name)) return &m->tensors[i];
    return NULL;
}
