/* What makes checkpoint metadata trustworthy beyond its syntax (ckpt_meta.c parses the syntax):
 *   - its checksum: metadata_crc32, the first member, is zlib's crc32 of the whole text with those 8 hex
 *     digits read as "00000000" (so an edit by hand, or by a JSON tool, is refused);
 *   - a bound on reading it: at most CK_MAX_META bytes, and the cJSON tree that parsing builds at most
 *     CK_PARSE_FACTOR bytes per byte of text (a real checkpoint's takes about 7), both checked before
 *     anything is allocated;
 *   - every field against its second source: optim_steps and the scaler's counts against step, the files
 *     against the layout and world size, the tensors against one another (every optimizer state with its
 *     parameter's shape, every parameter with every state), entry names against their tensor and element,
 *     step against the directory name.
 * Not here: the data files (ckpt_fs.c), the tensors against the model or its recorded configuration (the
 * model's check_tensors and the load, ckpt_load.c), or anything else that needs an engine. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include <zlib.h>
#include "ckpt_impl.h"

static const char crc_key[] = "\"metadata_crc32\"";

static size_t skip_ws(const char *t, size_t len, size_t i) {
    while (i < len && (t[i] == ' ' || t[i] == '\t' || t[i] == '\n' || t[i] == '\r')) i++;
    return i;
}

/* The offset of the 8 hex digits of metadata_crc32 as the first member of the text's object, or -1. */
static long crc_digits(const char *t, size_t len) {
    size_t i = skip_ws(t, len, 0);
    if (i >= len || t[i] != '{') return -1;
    i = skip_ws(t, len, i + 1);
    if (len - i < sizeof crc_key - 1 || memcmp(t + i, crc_key, sizeof crc_key - 1) != 0) return -1;
    i = skip_ws(t, len, i + sizeof crc_key - 1);
    if (i >= len || t[i] != ':') return -1;
    i = skip_ws(t, len, i + 1);
    if (len - i < 10 || t[i] != '"' || t[i + 9] != '"') return -1;
    for (size_t k = i + 1; k < i + 9; k++)
        if (!((t[k] >= '0' && t[k] <= '9') || (t[k] >= 'a' && t[k] <= 'f'))) return -1;
    return (long)(i + 1);
}

/* crc32 of text (len <= CK_MAX_META) with the digits at `at` read as zeros. */
static uint32_t text_crc(const char *t, size_t len, size_t at) {
    uLong c = crc32(0L, Z_NULL, 0);
    c = crc32(c, (const Bytef *)t, (uInt)at);
    c = crc32(c, (const Bytef *)"00000000", 8);
    c = crc32(c, (const Bytef *)t + at + 8, (uInt)(len - at - 8));
    return (uint32_t)c;
}

int ck_meta_seal(char *text, size_t len) {
    long at = crc_digits(text, len);
    if (at < 0 || len > CK_MAX_META) return -1;
    char hex[9];
    snprintf(hex, sizeof hex, "%08x", (unsigned)text_crc(text, len, (size_t)at));
    memcpy(text + at, hex, 8);
    return 0;
}

/* An upper bound of what cJSON allocates to parse text: a node per value (a value follows the start, a
 * '[' or '{', or a ','), a copy of every string (keys included) with an allocator's overhead. */
static size_t parse_cost(const char *t, size_t len, size_t *values) {
    size_t nodes = 1, strings = 0;
    int in = 0;
    for (size_t i = 0; i < len; i++) {
        char c = t[i];
        if (in) {
            if (c == '\\') i++;
            else if (c == '"') in = 0;
        } else if (c == '"') {
            in = 1;
            strings++;
        } else if (c == ',' || c == '[' || c == '{') {
            nodes++;
        }
    }
    *values = nodes;
    return nodes * (sizeof(cJSON) + 16) + strings * 16 + len;
}

fsc_status ck_meta_check_text(const char *text, size_t len, const char *what) {
    if (len > CK_MAX_META)
        return fsc_error(FSC_ERR_FORMAT, "%s: %zu bytes, above the limit of %zu bytes: too large for checkpoint "
                         "metadata", what, len, CK_MAX_META);
    long at = crc_digits(text, len);
    if (at < 0)
        return fsc_error(FSC_ERR_FORMAT, "%s: does not begin with its checksum {\"metadata_crc32\": \"<8 hex digits>\" "
                         "(not an fsc checkpoint of version %d: an older fsc wrote it, or it was edited)", what,
                         CK_META_VERSION);
    uint32_t crc = text_crc(text, len, (size_t)at);
    char want[9];
    snprintf(want, sizeof want, "%08x", (unsigned)crc);
    if (memcmp(want, text + at, 8) != 0)
        return fsc_error(FSC_ERR_FORMAT, "%s: metadata_crc32 is %.8s but the text's crc32 is %s: the metadata was "
                         "edited or corrupted", what, text + at, want);
    size_t values, cost = parse_cost(text, len, &values);
    if (cost / CK_PARSE_FACTOR > len + ((size_t)1 << 16))
        return fsc_error(FSC_ERR_FORMAT, "%s: %zu bytes holding %zu JSON values would take about %zu MiB to parse, "
                         "more than %d bytes per byte: too large for checkpoint metadata", what, len, values,
                         cost >> 20, CK_PARSE_FACTOR);
    return FSC_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* Second sources */

static int nstates_of(const fsc_optim_config *oc) {
    return oc->kind == FSC_OPT_ADAMW ? 2 : (oc->momentum != 0.0f ? 1 : 0);
}

/* The optimizer state (0: the parameter) and the parameter name of a checkpoint tensor name; -1 if the
 * optimizer keeps no such state. */
static int split_name(const fsc_ckpt_meta *m, const char *name, const char **param) {
    *param = name;
    if (strncmp(name, "optim.", 6) != 0) return 0;
    for (int k = 0; k < nstates_of(&m->optim); k++) {
        const char *st = ck_state_name(m->optim.kind, k);
        size_t n = strlen(st);
        if (!strncmp(name + 6, st, n) && name[6 + n] == '.') {
            *param = name + 7 + n;
            return k + 1;
        }
    }
    return -1;
}

static fsc_status check_counters(const fsc_ckpt_meta *m, const char *what) {
    if (m->step > 999999999999LL)
        return fsc_error(FSC_ERR_FORMAT, "%s: step = %lld is above the largest a save writes (999999999999)", what,
                         (long long)m->step);
    if (m->optim_steps > m->step)
        return fsc_error(FSC_ERR_FORMAT, "%s: optim_steps = %lld is more than step = %lld (the optimizer steps at most "
                         "once per training step)", what, (long long)m->optim_steps, (long long)m->step);
    if (m->skipped_in_row > m->step - m->optim_steps)
        return fsc_error(FSC_ERR_FORMAT, "%s: skipped_in_row = %lld but step - optim_steps = %lld (a skipped step is "
                         "a training step without an optimizer step)", what, (long long)m->skipped_in_row,
                         (long long)(m->step - m->optim_steps));
    if (!m->scaler_enabled) return FSC_OK;
    const fsc_loss_scaler *sc = &m->scaler;
    /* the factors a loss scaler can run with (fsc_loss_scaler_init's, GradScaler's ranges): a resume takes them */
    if (!(sc->growth_factor > 1.0f) || !isfinite(sc->growth_factor) || !(sc->backoff_factor > 0.0f) ||
        !(sc->backoff_factor < 1.0f) || sc->growth_interval < 1)
        return fsc_error(FSC_ERR_FORMAT, "%s: scaler.growth_factor = %g (must be above 1), backoff_factor = %g (in (0, "
                         "1)), growth_interval = %d (at least 1): not a loss scaler's", what,
                         (double)sc->growth_factor, (double)sc->backoff_factor, sc->growth_interval);
    if (sc->skipped > m->step - m->optim_steps)
        return fsc_error(FSC_ERR_FORMAT, "%s: scaler.skipped = %lld but step - optim_steps = %lld (a skipped step is a "
                         "training step without an optimizer step)", what, (long long)sc->skipped,
                         (long long)(m->step - m->optim_steps));
    if (sc->good_steps > m->optim_steps)
        return fsc_error(FSC_ERR_FORMAT, "%s: scaler.good_steps = %d is more than optim_steps = %lld", what,
                         sc->good_steps, (long long)m->optim_steps);
    if (sc->good_steps > 0 && sc->good_steps >= sc->growth_interval)
        return fsc_error(FSC_ERR_FORMAT, "%s: scaler.good_steps = %d is not below scaler.growth_interval = %d (the "
                         "scale grows and the count restarts there)", what, sc->good_steps, sc->growth_interval);
    return FSC_OK;
}

static fsc_status check_files(const fsc_ckpt_meta *m, const char *what, int nstates) {
    const int tp = m->tp, pp = m->pp > 1 ? m->pp : 1;
    if ((int64_t)tp * pp > m->world || m->world % (tp * pp) != 0)
        return fsc_error(FSC_ERR_FORMAT, "%s: parallel.world = %d is not a multiple of parallel.tp = %d x parallel.pp "
                         "= %d", what, m->world, tp, pp);
    if (m->ep < 1 || (m->world / (tp * pp)) % m->ep != 0)
        return fsc_error(FSC_ERR_FORMAT, "%s: parallel.ep = %d does not divide the %d data ranks (parallel.world = %d "
                         "over tp x pp = %d)", what, m->ep, m->world / (tp * pp), m->world, tp * pp);
    if (m->format == FSC_CKPT_FULL) {
        int want = nstates > 0 ? 2 : 1;
        if (m->nfiles != want || strcmp(m->files[0], "model.safetensors") != 0 ||
            (want == 2 && strcmp(m->files[1], "optim.safetensors") != 0))
            return fsc_error(FSC_ERR_FORMAT, "%s: files of the full layout must be [\"model.safetensors\"%s]", what,
                             want == 2 ? ", \"optim.safetensors\"" : "");
        return FSC_OK;
    }
    int last = -1;
    for (int i = 0; i < m->nfiles; i++) {
        int r = -1, of = -1;
        char canon[FSC_CKPT_MAX_FILE + 32] = "";
        if (sscanf(m->files[i], "rank-%d-of-%d", &r, &of) == 2)
            snprintf(canon, sizeof canon, "rank-%05d-of-%05d.safetensors", r, of);
        if (strcmp(canon, m->files[i]) != 0)
            return fsc_error(FSC_ERR_FORMAT, "%s: files[%d] = \"%s\" is not a shard name rank-NNNNN-of-NNNNN.safetensors",
                             what, i, m->files[i]);
        if (of != m->world || r < 0 || r >= of)
            return fsc_error(FSC_ERR_FORMAT, "%s: files[%d] = \"%s\" does not belong to a world of parallel.world = %d "
                             "ranks", what, i, m->files[i], m->world);
        if (r <= last)
            return fsc_error(FSC_ERR_FORMAT, "%s: files[%d] = \"%s\" is out of rank order", what, i, m->files[i]);
        last = r;
    }
    return FSC_OK;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp((*(const fsc_ckpt_tensor *const *)a)->name, (*(const fsc_ckpt_tensor *const *)b)->name);
}

/* In the tensors sorted by name (n of them): the one named name, or NULL. */
static const fsc_ckpt_tensor *find_sorted(const fsc_ckpt_tensor *const *by, int n, const char *name) {
    fsc_ckpt_tensor key;
    const fsc_ckpt_tensor *kp = &key;
    snprintf(key.name, sizeof key.name, "%s", name);
    const fsc_ckpt_tensor *const *f = bsearch(&kp, by, (size_t)n, sizeof *by, cmp_name);
    return f ? *f : NULL;
}

/* Every tensor a parameter or a state of the optimizer of a parameter the checkpoint holds, with the
 * parameter's shape, and every parameter with every state of the optimizer. */
static fsc_status check_states(const fsc_ckpt_meta *m, const char *what, int nstates) {
    const fsc_ckpt_tensor **by = malloc(((size_t)m->ntensors + 1) * sizeof *by);
    if (!by) return fsc_error(FSC_ERR_NOMEM, "%s: out of memory", what);
    for (int i = 0; i < m->ntensors; i++) by[i] = &m->tensors[i];
    qsort(by, (size_t)m->ntensors, sizeof *by, cmp_name);
    fsc_status s = FSC_OK;
    char name[FSC_ST_MAX_NAME], s1[96], s2[96];
    for (int i = 0; i < m->ntensors && s == FSC_OK; i++) {
        const fsc_ckpt_tensor *t = &m->tensors[i], *pt;
        const char *param;
        int st = split_name(m, t->name, &param);
        if (st < 0)
            s = fsc_error(FSC_ERR_FORMAT, "%s: tensor %s is neither a parameter nor a state of optimizer %s", what,
                          t->name, m->optim.kind == FSC_OPT_ADAMW ? "adamw" : "sgd");
        else if (st > 0 && (!(pt = find_sorted(by, m->ntensors, param)) || split_name(m, pt->name, &param) != 0))
            s = fsc_error(FSC_ERR_FORMAT, "%s: tensor %s is a state of parameter %s, which the checkpoint does not "
                          "hold", what, t->name, param);
        else if (st > 0) {
            int same = t->ndim == pt->ndim;
            for (int d = 0; same && d < pt->ndim; d++) same = t->shape[d] == pt->shape[d];
            if (!same) {
                fsc_shape_str(s1, sizeof s1, t->ndim, t->shape);
                fsc_shape_str(s2, sizeof s2, pt->ndim, pt->shape);
                s = fsc_error(FSC_ERR_FORMAT, "%s: tensor %s has shape %s; its parameter %s has %s", what, t->name, s1,
                              pt->name, s2);
            }
        } else {
            for (int k = 1; k <= nstates && s == FSC_OK; k++) {
                ck_global_name(name, sizeof name, m->optim.kind, k, t->name);
                if (!find_sorted(by, m->ntensors, name))
                    s = fsc_error(FSC_ERR_FORMAT, "%s: has no tensor %s, which its optimizer %s keeps for parameter %s",
                                  what, name, m->optim.kind == FSC_OPT_ADAMW ? "adamw" : "sgd with momentum", t->name);
            }
        }
    }
    free(by);
    return s;
}

/* Every tensor a parameter or optimizer state of a parameter with its shape, each once (names are unique:
 * ckpt_meta.c), every entry named for its tensor and first element, every file used. The tensors against
 * the model's recorded configuration: the model's check_tensors (model.h); against the model itself: the
 * load (ckpt_load.c). */
static fsc_status check_tensors(const fsc_ckpt_meta *m, const char *what, int nstates) {
    FSC_TRY(check_states(m, what, nstates));
    fsc_status s = FSC_OK;
    char *used = calloc((size_t)m->nfiles + 1, 1);
    if (!used) return fsc_error(FSC_ERR_NOMEM, "%s: out of memory", what);
    char entry[FSC_ST_MAX_NAME + 32];
    for (int i = 0; i < m->ntensors && s == FSC_OK; i++) {
        const fsc_ckpt_tensor *t = &m->tensors[i];
        const char *param;
        int st = split_name(m, t->name, &param);
        for (int k = 0; k < t->npieces && s == FSC_OK; k++) {
            const fsc_ckpt_piece *p = &t->pieces[k];
            used[p->file] = 1;
            if (m->format == FSC_CKPT_FULL) {
                snprintf(entry, sizeof entry, "%s", t->name);
                if (p->file != (st == 0 ? 0 : 1))
                    s = fsc_error(FSC_ERR_FORMAT, "%s: tensor %s is in file %s; the full layout keeps it in %s", what,
                                  t->name, m->files[p->file], st == 0 ? "model.safetensors" : "optim.safetensors");
            } else {
                snprintf(entry, sizeof entry, "%.120s@%llu", t->name, (unsigned long long)p->first);
            }
            if (s == FSC_OK && strcmp(entry, p->entry) != 0)
                s = fsc_error(FSC_ERR_FORMAT, "%s: tensor %s: the piece of elements [%llu, %llu) names entry %s; its "
                              "name is %s", what, t->name, (unsigned long long)p->first,
                              (unsigned long long)(p->first + p->n), p->entry, entry);
        }
    }
    for (int f = 0; f < m->nfiles && s == FSC_OK; f++)
        if (!used[f]) s = fsc_error(FSC_ERR_FORMAT, "%s: file %s holds no piece", what, m->files[f]);
    free(used);
    return s;
}

fsc_status ck_meta_check_sources(const fsc_ckpt_meta *m, const char *what) {
    const int nstates = nstates_of(&m->optim);
    FSC_TRY(check_counters(m, what));
    FSC_TRY(check_files(m, what, nstates));
    return check_tensors(m, what, nstates);
}

fsc_status ck_meta_check_dir(const fsc_ckpt_meta *m, const char *path, const char *what) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && path[b - 1] != '/') b--;
    char base[64];
    int64_t step;
    if (n - b >= sizeof base) return FSC_OK;
    memcpy(base, path + b, n - b);
    base[n - b] = 0;
    if (ck_parse_step_name(base, &step) && step != m->step)
        return fsc_error(FSC_ERR_FORMAT, "%s: step = %lld but its directory is %s: the metadata or the directory was "
                         "changed", what, (long long)m->step, base);
    return FSC_OK;
}

fsc_status fsc_ckpt_meta_params(const fsc_ckpt_meta *m, fsc_param_info **out, int *n) {
    FSC_CHECK_ARG(out);
    *out = NULL;
    FSC_CHECK_ARG(m);
    FSC_CHECK_ARG(n);
    *n = 0;
    fsc_param_info *p = calloc((size_t)m->ntensors + 1, sizeof *p);
    if (!p) return fsc_error(FSC_ERR_NOMEM, "checkpoint: out of memory for %d parameters", m->ntensors);
    for (int i = 0; i < m->ntensors; i++) {
        const fsc_ckpt_tensor *t = &m->tensors[i];
        const char *param;
        if (split_name(m, t->name, &param) != 0) continue; /* an optimizer state */
        fsc_param_info *q = &p[(*n)++];
        size_t len = strnlen(t->name, sizeof q->name - 1); /* cut: no model's name is this long */
        memcpy(q->name, t->name, len);
        q->name[len] = 0;
        q->ndim = t->ndim;
        memcpy(q->shape, t->shape, sizeof q->shape);
        q->numel = (size_t)t->numel;
        q->expert = -1;
    }
    *out = p;
    return FSC_OK;
}
