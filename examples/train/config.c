/* --config FILE.json: a JSON object {"option": value, ...} over the defaults (the command line then wins), and
 * the other way, the options as one JSON object (--json's "config", --ckpt-dir/train_config.json, --log's first line),
 * which --config reads back as the same options; in the run's record (train_config.json) its paths made absolute.
 * Not here: the table itself (options.c). */
#define _XOPEN_SOURCE 700 /* strndup, O_CLOEXEC: POSIX, not C11 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include "train.h"

/* The text option o reads from the JSON value it (num holds a number's text), or NULL with *want naming what o
 * takes: integer options integral numbers (--seed also a string of digits), floats numbers, flags true, the others
 * strings. */
static const char *value_text(const option *o, const cJSON *it, char *num, size_t cap, const char **want) {
    double x = cJSON_IsNumber(it) ? it->valuedouble : 0;
    int integral = cJSON_IsNumber(it) && isfinite(x) && x == floor(x) && fabs(x) <= 9007199254740992.0;
    switch (o->kind) {
    case K_INT: /* beyond 2^53 too, up to 1e18: the option's range says what is wrong with it */
        if (cJSON_IsNumber(it) && x == floor(x) && fabs(x) <= 1e18) return snprintf(num, cap, "%.0f", x), num;
        *want = cJSON_IsNumber(it) && x == floor(x) ? "an integer of the option's range" : "an integer";
        return NULL;
    case K_U64:
        if (integral) return snprintf(num, cap, "%.0f", x), num;
        if (cJSON_IsString(it)) return it->valuestring;
        *want = "a non-negative integer (a string of digits above 2^53)";
        return NULL;
    case K_FLOAT:
        if (cJSON_IsNumber(it)) return snprintf(num, cap, "%.17g", x), num;
        *want = "a number";
        return NULL;
    case K_FLAG:
        if (cJSON_IsTrue(it)) return "1";
        *want = "true or false";
        return NULL;
    default: /* paths, choices, the wrap policy */
        if (cJSON_IsString(it)) return it->valuestring;
        *want = "a string";
        return NULL;
    }
}

/* x as the shortest %g text (6 to 9 digits) that reads back as x: 0.001, not 0.00100000005. */
void float_text(float x, char *buf, size_t cap) {
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, cap, "%.*g", prec, (double)x);
        if (strtof(buf, NULL) == x) break;
    }
}

/* "FILE: "key" must be an integer, not a string". Returns -1. */
static int type_error(const cJSON *it, const char *key, const char *want, const char *name, char *err, size_t cap) {
    char gotn[48];
    snprintf(gotn, sizeof gotn, "%.17g", cJSON_IsNumber(it) ? it->valuedouble : 0);
    const char *got = cJSON_IsString(it) ? "a string" : cJSON_IsNumber(it) ? gotn : cJSON_IsBool(it) ? "a boolean"
                    : cJSON_IsArray(it) ? "an array" : "an object";
    return snprintf(err, cap, "%s: \"%s\" must be %s, not %s", name, key, want, got), -1;
}

/* A copy of v in c->strs, where it lives as long as c (an option keeps a pointer to its text): the buffer is
 * made as large as the file (len bytes), which holds every value. NULL when out of memory. */
static const char *keep_string(train_config *c, const char *v, size_t len) {
    size_t n = strlen(v) + 1;
    if (!c->strs && (c->strs = malloc(len + 1)) != NULL) c->strs_cap = len + 1, c->nstrs = 0;
    if (n > c->strs_cap - c->nstrs) return NULL;
    memcpy(c->strs + c->nstrs, v, n);
    c->nstrs += n;
    return c->strs + c->nstrs - n;
}

/* err (set_option's message) after the file's name. */
static void prefix_error(const char *name, char *err, size_t cap) {
    size_t ln = strlen(name) + 2, lm = strlen(err) + 1;
    if (ln < cap) {
        memmove(err + ln, err, lm < cap - ln ? lm : cap - ln);
        err[cap - 1] = '\0';
        memcpy(err, name, ln - 2);
        memcpy(err + ln - 2, ": ", 2);
    }
}

/* One key of the object (it) over c: 0, or -1 with err. seen counts the keys so far; def holds the defaults. */
static int apply_key(train_config *c, int *given, int *seen, const train_config *def, const cJSON *it, size_t len,
                     const char *name, char *err, size_t cap) {
    const char *key = it->string ? it->string : "";
    int k = option_index(key);
    if (k < 0) {
        const char *near = option_near(key, strlen(key));
        if (near) return snprintf(err, cap, "%s: unknown option \"%.64s\" (did you mean \"%s\"?)", name, key, near), -1;
        return snprintf(err, cap, "%s: unknown option \"%.64s\" (keys are the options of --help without --)", name, key), -1;
    }
    const option *o = &options[k];
    if (seen[k]++) return snprintf(err, cap, "%s: \"%s\" appears twice", name, key), -1;
    /* null, false, and 0 for a count without a default (--kv-heads, --ffn): not set, as the run's train_config.json
     * writes options that were not given */
    if (!o->def && o->kind == K_INT && cJSON_IsNumber(it) && it->valuedouble == 0) return 0;
    if (cJSON_IsNull(it) || cJSON_IsFalse(it)) {
        if (cJSON_IsFalse(it) && o->kind != K_FLAG)
            return snprintf(err, cap, "%s: \"%s\" takes %s, not false", name, key, o->arg), -1;
        return 0;
    }
    if (k == option_index("config"))
        return snprintf(err, cap, "%s: \"config\": a config file cannot name another", name), -1;
    char num[64];
    const char *want = NULL, *v = value_text(o, it, num, sizeof num, &want);
    if (!v) return type_error(it, key, want, name, err, cap);
    if (o->kind == K_STR && !(v = keep_string(c, v, len)))
        return snprintf(err, cap, "%s: out of memory for its paths", name), -1;
    if (set_option(c, o, v, err, cap) != 0) return prefix_error(name, err, cap), -1;
    if (!same_value(o, c, def)) given[k] = 1;
    return 0;
}

/* Whether a string of the JSON text holds the escape \u0000: cJSON decodes it to a NUL, which would cut a C
 * string short there without a word (a path "a\u0000b" opening "a"). */
static int holds_nul_escape(const char *t, size_t len) {
    int in = 0;
    for (size_t i = 0; i < len; i++) {
        if (!in) {
            in = t[i] == '"';
        } else if (t[i] == '"') {
            in = 0;
        } else if (t[i] == '\\' && i + 1 < len) {
            if (t[i + 1] == 'u' && i + 5 < len && !memcmp(t + i + 2, "0000", 4)) return 1;
            i++; /* the escaped character */
        }
    }
    return 0;
}

/* The options of a JSON object (text, len bytes; `name` for messages: "--config FILE") over c: keys are option
 * names without "--", values of the option's kind (integer options: integral numbers; --seed also a string of
 * digits; floats: numbers; paths and choices: strings; flags: true or false). null, false and 0 for a count
 * without a default leave an option as it is (the run's train_config.json writes them for options not set). A key whose
 * value differs from the default marks the option given, as on the command line. String values are copied into
 * c->strs. Returns 0 or -1 (err). */
int apply_config_text(train_config *c, int *given, const char *text, size_t len, const char *name, char *err,
                      size_t cap) {
    if (holds_nul_escape(text, len))
        return snprintf(err, cap, "%s: a string holds \\u0000 (a NUL character), which no option can take", name), -1;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) return snprintf(err, cap, "%s: not JSON (near byte %ld)", name,
                               cJSON_GetErrorPtr() ? (long)(cJSON_GetErrorPtr() - text) : 0L), -1;
    int rc = 0;
    while (end < text + len && strchr(" \t\r\n", *end) && *end) end++;
    if (end < text + len) /* cJSON stops after the first value: {"steps":1}{"steps":100} must not run 1 step */
        rc = (snprintf(err, cap, "%s: text after the JSON object at byte %ld (a file holds one object)", name,
                       (long)(end - text)), -1);
    train_config def;
    int dgiven[NOPT];
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    if (rc == 0 && cJSON_IsObject(root) && mt) /* what --save writes beside the weights */
        rc = (snprintf(err, cap, "%s: a Hugging Face model configuration (model_type %s), not the trainer's options: "
                       "give a run's " RUN_CONFIG, name, cJSON_IsString(mt) ? mt->valuestring : "?"), -1);
    if (rc == 0 && !cJSON_IsObject(root)) rc = (snprintf(err, cap, "%s: expected a JSON object {\"option\": value, ...}", name), -1);
    if (rc == 0) rc = set_defaults(&def, dgiven, err, cap);
    int seen[NOPT] = {0};
    const cJSON *it;
    cJSON_ArrayForEach(it, root) {
        if (rc != 0) break;
        rc = apply_key(c, given, seen, &def, it, len, name, err, cap);
    }
    cJSON_Delete(root);
    return rc;
}

/* A regular file of at most max bytes (a FIFO or a device is refused without waiting on it) into *text (malloc'd,
 * NUL-terminated) and *n. 0, or -1 with err saying why after `name`. */
int read_text_file(const char *path, const char *name, size_t max, char **text, size_t *n, char *err, size_t cap) {
    *text = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return snprintf(err, cap, "%s: cannot open: %s", name, strerror(errno)), -1;
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || (uint64_t)sb.st_size > max) {
        close(fd);
        return snprintf(err, cap, "%s: not a regular file of at most %zu MiB", name, max >> 20), -1;
    }
    size_t got = 0;
    *n = (size_t)sb.st_size;
    *text = malloc(*n + 1);
    while (*text && got < *n) {
        ssize_t r = read(fd, *text + got, *n - got);
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    if (!*text || got != *n) {
        free(*text);
        *text = NULL;
        return snprintf(err, cap, "%s: cannot read it", name), -1;
    }
    (*text)[*n] = 0;
    return 0;
}

/* --config FILE: a regular file of at most 1 MiB holding one JSON object (apply_config_text); a directory (a run's
 * --ckpt-dir) gives its train_config.json, else its config.json (the name before). */
int apply_config_file(train_config *c, int *given, const char *path, char *err, size_t cap) {
    char name[300], file[4200], *text;
    size_t n;
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        snprintf(file, sizeof file, "%s/" RUN_CONFIG, path);
        if (access(file, F_OK) != 0) snprintf(file, sizeof file, "%s/config.json", path);
        if (access(file, F_OK) != 0)
            return snprintf(err, cap, "--config %.280s: a directory without " RUN_CONFIG " (or config.json)", path), -1;
        path = file;
    }
    snprintf(name, sizeof name, "--config %.280s", path);
    if (read_text_file(path, name, CONFIG_MAX, &text, &n, err, cap) != 0) return -1;
    int rc = apply_config_text(c, given, text, n, name, err, cap);
    free(text);
    return rc;
}

/* The configuration as the option table names it. */
cJSON *config_object(const train_config *c) {
    cJSON *o = cJSON_CreateObject();
    char buf[64];
    for (int i = 0; i < NOPT; i++) {
        const option *op = &options[i];
        const char *field = (const char *)c + op->off;
        switch (op->kind) {
        case K_INT: cJSON_AddNumberToObject(o, op->name, *(const int *)field); break;
        case K_U64: /* a number, exactly; above 2^53 (where a JSON reader's double rounds) a string of digits */
            snprintf(buf, sizeof buf, "%llu", (unsigned long long)*(const uint64_t *)field);
            if (*(const uint64_t *)field > (1ull << 53)) cJSON_AddStringToObject(o, op->name, buf);
            else cJSON_AddRawToObject(o, op->name, buf);
            break;
        case K_FLOAT:
            float_text(*(const float *)field, buf, sizeof buf);
            cJSON_AddRawToObject(o, op->name, buf);
            break;
        case K_STR:
            if (*(const char *const *)field) cJSON_AddStringToObject(o, op->name, *(const char *const *)field);
            else cJSON_AddNullToObject(o, op->name);
            break;
        case K_FLAG: cJSON_AddBoolToObject(o, op->name, *(const int *)field); break;
        case K_CHOICE: cJSON_AddStringToObject(o, op->name, choice_name(op->choices, *(const int *)field, buf, sizeof buf)); break;
        case K_WRAP:
            if (c->wrap == FSC_WRAP_MIN_PARAMS) snprintf(buf, sizeof buf, "min-params:%zu", c->wrap_min_params);
            else snprintf(buf, sizeof buf, "%s", c->wrap == FSC_WRAP_MODEL ? "model" : "block");
            cJSON_AddStringToObject(o, op->name, buf);
            break;
        }
    }
    return o;
}

/* A growing string for absolute_spec: n bytes in p (NUL-terminated), cap allocated; p NULL once out of memory. */
typedef struct {
    char *p;
    size_t n, cap;
} text_buf;

static void put(text_buf *b, const char *s, size_t n) {
    if (b->p && b->n + n + 1 > b->cap) {
        size_t cap = 2 * (b->n + n + 1);
        char *q = realloc(b->p, cap);
        if (!q) free(b->p);
        b->p = q, b->cap = cap;
    }
    if (b->p) memcpy(b->p + b->n, s, n), b->n += n, b->p[b->n] = 0;
}

/* Path option value v made absolute against cwd (malloc'd), or NULL to record it as given (absolute already, out
 * of memory, or a comma in cwd that would cut a list of files elsewhere). With list (--data, --val-data) each
 * item of a comma list on its own, as fsc_data_open reads them (a file named a,b.bin is itself), and a glob's
 * characters in cwd escaped so that the pattern matches the same files. A leading "./" is dropped. */
static char *absolute_spec(const char *v, const char *cwd, int list) {
    struct stat sb;
    const int whole = !list || !strchr(v, ',') || stat(v, &sb) == 0;
    if (whole && v[0] == '/') return NULL;
    if (list && strchr(cwd, ',') && !(whole && stat(v, &sb) == 0)) return NULL;
    text_buf b = { malloc(64), 0, 64 };
    if (b.p) b.p[0] = 0;
    for (const char *item = v, *next; item; item = next) {
        next = whole ? NULL : strchr(item, ',');
        size_t n = next ? (size_t)(next - item) : strlen(item);
        if (next) next++;
        if (item != v) put(&b, ",", 1);
        if (n == 0 || item[0] == '/') {
            put(&b, item, n);
            continue;
        }
        char *one = strndup(item, n);
        int pattern = list && one && strpbrk(one, "*?[") && stat(one, &sb) != 0; /* as fsc_data_open's add_item */
        free(one);
        for (const char *c = cwd; *c; c++) {
            if (pattern && strchr("*?[\\", *c)) put(&b, "\\", 1);
            put(&b, c, 1);
        }
        while (n >= 2 && item[0] == '.' && item[1] == '/') { /* ./x, .//x: x */
            item += 2, n -= 2;
            while (n > 0 && item[0] == '/') item++, n--;
        }
        if (n > 0 && !(b.p && b.n > 0 && b.p[b.n - 1] == '/')) put(&b, "/", 1); /* (cwd "/") */
        put(&b, item, n);
    }
    return b.p;
}

/* Relative paths in a run's record named files from the directory the run started in: a --config DIR rerun from
 * elsewhere could not open them. A default (--data's corpus) stays as it is: the run finds it from any directory. */
void absolute_paths(cJSON *o) {
    char *cwd = getcwd(NULL, 0); /* none (removed, too long): the paths stay as given */
    for (int k = 0; cwd && k < NOPT; k++) {
        const option *op = &options[k];
        const char *arg = op->arg ? op->arg : "";
        if (op->kind != K_STR || (strcmp(arg, "PATH") && strcmp(arg, "FILE") && strcmp(arg, "DIR"))) continue;
        const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, op->name);
        if (!cJSON_IsString(it) || (op->def && !strcmp(it->valuestring, op->def))) continue;
        char *abs = absolute_spec(it->valuestring, cwd, !strcmp(op->name, "data") || !strcmp(op->name, "val-data"));
        cJSON *to = abs ? cJSON_CreateString(abs) : NULL;
        if (to && !cJSON_ReplaceItemInObjectCaseSensitive(o, op->name, to)) cJSON_Delete(to);
        free(abs);
    }
    free(cwd);
}
