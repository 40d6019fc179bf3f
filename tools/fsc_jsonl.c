/* fsc-jsonl (build/fsc-jsonl, made by make): the JSON reading of tools/plot and tools/trace_merge, on cJSON.
 *   fsc-jsonl plot-data LOG.jsonl [TITLE_FILE]   the trainer's --log as tab-separated tables on stdout:
 *       "# train" then step loss lr tokens_per_s mfu <tag>_mib..., two empty lines, "# val" then step val_loss;
 *       the title of the run (model, layers x dim, ranks, parallel, precision) into TITLE_FILE when there is one
 *   fsc-jsonl trace-merge FILE...                the traceEvents of every file (fsc_trace_write's rank-N.json)
 *       in one JSON trace on stdout; an empty file (nothing but white space: a rank that stopped before it wrote
 *       anything) is skipped with a note naming it on stderr, and only files all empty are refused
 * Every record is read as JSON: keys in any order, any spacing, escapes, nested objects, numbers in any form.
 * Log: one object per line; a line that is not a JSON object is skipped (counted on stderr), as is a train or val
 * record whose step is not a finite number (counted apart); a record lacking a
 * value (lr, mfu before they are known; null) gives NaN; numbers are written as integers' digits or the shortest
 * text that reads back as the same double. A resumed run's log holds a step twice: the last record of a step wins,
 * and the rows come out in step order. The memory columns are the tags (keys of number values) of the first
 * train record with a peak_bytes object, in its order, in MiB (%.6g); a later record's tags are found by name.
 * Trace: an object whose traceEvents is an array, or a bare array (Chrome's two forms); a file cut short (a
 * killed run's stream) gives the events it holds whole when it begins {"traceEvents":[ and only its last
 * event is cut. The events are copied as they are written.
 * The parsers (jl_plot_tables, jl_trace_events) take a buffer: fuzz/fuzz_jsonl.c includes this file with
 * FSC_JSONL_NO_MAIN. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JL_MAX_TAGS 64    /* memory columns at most */
#define JL_TITLE_CAP 256

static void jl_err(char *err, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (err && cap) vsnprintf(err, cap, fmt, ap);
    va_end(ap);
}

/* x as an integer's digits, else the shortest %.Ng (N <= 17) that reads back as x; NaN (and infinities, which
 * JSON has not) as "NaN". */
static void jl_num(char *buf, size_t cap, double x) {
    if (!isfinite(x)) {
        snprintf(buf, cap, "NaN");
        return;
    }
    if (x == floor(x) && fabs(x) < 9007199254740992.0) { /* an integer: its digits (1000, not 1e+03) */
        snprintf(buf, cap, "%.0f", x);
        return;
    }
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, cap, "%.*g", p, x);
        if (strtod(buf, NULL) == x) return;
    }
}

/* o[key] as a number; NaN when absent or not a number. */
static double jl_get(const cJSON *o, const char *key) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(x) ? x->valuedouble : NAN;
}

typedef struct {
    double step;
    size_t seq;    /* record order: of two records of a step the later wins */
    double v[4 + JL_MAX_TAGS];
} jl_row;

typedef struct {
    jl_row *rows;
    size_t n, cap;
} jl_rows;

static int jl_push(jl_rows *r, const jl_row *row) {
    if (r->n == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 64;
        jl_row *p = realloc(r->rows, cap * sizeof *p);
        if (!p) return -1;
        r->rows = p, r->cap = cap;
    }
    r->rows[r->n++] = *row;
    return 0;
}

static int jl_cmp(const void *a, const void *b) {
    const jl_row *x = a, *y = b;
    if (x->step != y->step) return x->step < y->step ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Sort by step (then record order) and keep the last record of each step. */
static void jl_last_per_step(jl_rows *r) {
    if (r->n) qsort(r->rows, r->n, sizeof *r->rows, jl_cmp);
    size_t k = 0;
    for (size_t i = 0; i < r->n; i++) {
        if (i + 1 < r->n && r->rows[i + 1].step == r->rows[i].step) continue;
        r->rows[k++] = r->rows[i];
    }
    r->n = k;
}

/* s with only the characters a gnuplot title keeps ([A-Za-z0-9_.+-]) appended to buf. */
static void jl_cat_safe(char *buf, size_t cap, const char *s) {
    size_t n = strlen(buf);
    for (; *s && n + 1 < cap; s++)
        if ((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || strchr("_.+-", *s))
            buf[n++] = *s;
    buf[n] = '\0';
}

static void jl_cat_part(char *buf, size_t cap, const char *part) {
    if (!*part) return;
    size_t n = strlen(buf);
    snprintf(buf + n, cap - n, "%s%s", n ? ", " : "", part);
}

/* The title of a config record: model, "L layers x D", "W rank(s)", parallel, precision, those it has. */
static void jl_title(const cJSON *rec, char *title, size_t cap) {
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(rec, "config");
    if (!cJSON_IsObject(c)) c = rec;
    char part[JL_TITLE_CAP], a[32], b[32];
    title[0] = '\0';
    const char *keys[3] = { "model", "parallel", "precision" };
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(c, keys[0]);
    part[0] = '\0';
    if (cJSON_IsString(s)) jl_cat_safe(part, sizeof part, s->valuestring);
    jl_cat_part(title, cap, part);
    double layers = jl_get(c, "layers"), dim = jl_get(c, "dim"), world = jl_get(c, "world");
    jl_num(a, sizeof a, layers), jl_num(b, sizeof b, dim);
    if (isfinite(layers) && isfinite(dim)) snprintf(part, sizeof part, "%s layers x %s", a, b);
    else if (isfinite(layers)) snprintf(part, sizeof part, "%s layers", a);
    else if (isfinite(dim)) snprintf(part, sizeof part, "dim %s", b);
    else part[0] = '\0';
    jl_cat_part(title, cap, part);
    jl_num(a, sizeof a, world);
    if (isfinite(world)) snprintf(part, sizeof part, "%s rank%s", a, world == 1 ? "" : "s");
    else part[0] = '\0';
    jl_cat_part(title, cap, part);
    for (int k = 1; k < 3; k++) {
        s = cJSON_GetObjectItemCaseSensitive(c, keys[k]);
        part[0] = '\0';
        if (cJSON_IsString(s)) jl_cat_safe(part, sizeof part, s->valuestring);
        jl_cat_part(title, cap, part);
    }
}

/* Past whitespace: every byte up to 32 (NUL and control characters too), as cJSON skips it. */
static const char *jl_ws(const char *p, const char *end) {
    while (p < end && (unsigned char)*p <= 32) p++;
    return p;
}

/* The plot's tables of the log text[0..n) into out, the run's title (empty if none) into title (JL_TITLE_CAP
 * bytes), the number of lines skipped (not JSON objects) into *skipped and of train and val records skipped for
 * a step that is not a finite number into *nostep. 0, or -1 with err set (out of memory, a write that failed). */
static int jl_plot_tables(const char *text, size_t n, FILE *out, char *title, size_t *skipped, size_t *nostep,
                          char *err, size_t ecap) {
    jl_rows train = { 0 }, val = { 0 };
    char tags[JL_MAX_TAGS][64];
    int ntag = -1, rc = -1; /* -1: no tags known yet */
    size_t seq = 0;
    title[0] = '\0';
    *skipped = 0, *nostep = 0;
    for (size_t pos = 0; pos < n;) {
        const char *line = text + pos, *nl = memchr(line, '\n', n - pos);
        size_t len = nl ? (size_t)(nl - line) : n - pos;
        pos += len + 1;
        size_t k = 0;
        while (k < len && strchr(" \t\r", line[k])) k++;
        if (k == len) continue; /* an empty line */
        const char *rend = NULL;
        cJSON *rec = cJSON_ParseWithLengthOpts(line, len, &rend, 0);
        if (rec && jl_ws(rend, line + len) != line + len) { /* something after the object */
            cJSON_Delete(rec);
            rec = NULL;
        }
        if (!cJSON_IsObject(rec)) {
            cJSON_Delete(rec);
            ++*skipped;
            continue;
        }
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(rec, "type");
        const char *t = cJSON_IsString(type) ? type->valuestring : "";
        jl_row row = { .step = jl_get(rec, "step"), .seq = seq++ };
        int bad = 0;
        if (strcmp(t, "train") == 0 && isfinite(row.step)) {
            const cJSON *peak = cJSON_GetObjectItemCaseSensitive(rec, "peak_bytes"), *e;
            if (ntag < 0 && cJSON_IsObject(peak)) {
                ntag = 0;
                cJSON_ArrayForEach(e, peak) {
                    if (ntag == JL_MAX_TAGS) break;
                    if (!cJSON_IsNumber(e)) continue; /* a tag is a count of bytes */
                    tags[ntag][0] = '\0';
                    jl_cat_safe(tags[ntag], sizeof tags[ntag], e->string ? e->string : "");
                    if (tags[ntag][0]) ntag++;
                }
            }
            row.v[0] = jl_get(rec, "loss"), row.v[1] = jl_get(rec, "lr");
            row.v[2] = jl_get(rec, "tokens_per_s"), row.v[3] = jl_get(rec, "mfu");
            for (int i = 0; i < ntag; i++) {
                /* the tag's value under its name (the names were filtered: look for the one that filters to it) */
                double b = NAN;
                cJSON_ArrayForEach(e, peak) {
                    char nm[64] = "";
                    jl_cat_safe(nm, sizeof nm, e->string ? e->string : "");
                    if (strcmp(nm, tags[i]) == 0) {
                        b = cJSON_IsNumber(e) ? e->valuedouble / 1048576.0 : NAN;
                        break;
                    }
                }
                row.v[4 + i] = b;
            }
            bad = jl_push(&train, &row);
        } else if (strcmp(t, "val") == 0 && isfinite(row.step)) {
            row.v[0] = jl_get(rec, "val_loss");
            bad = jl_push(&val, &row);
        } else if (strcmp(t, "config") == 0 && !title[0]) {
            jl_title(rec, title, JL_TITLE_CAP);
        } else if (strcmp(t, "train") == 0 || strcmp(t, "val") == 0) {
            ++*nostep; /* a train or val record whose step is missing, not a number or not finite */
        }
        cJSON_Delete(rec);
        if (bad) {
            jl_err(err, ecap, "out of memory");
            goto done;
        }
    }
    jl_last_per_step(&train);
    jl_last_per_step(&val);
    char a[32];
    fputs("# train\nstep\tloss\tlr\ttokens_per_s\tmfu", out);
    for (int i = 0; i < ntag; i++) fprintf(out, "\t%s_mib", tags[i]);
    fputc('\n', out);
    for (size_t r = 0; r < train.n; r++) {
        jl_num(a, sizeof a, train.rows[r].step);
        fputs(a, out);
        for (int i = 0; i < 4; i++) jl_num(a, sizeof a, train.rows[r].v[i]), fprintf(out, "\t%s", a);
        for (int i = 0; i < ntag; i++) {
            double x = train.rows[r].v[4 + i];
            if (isfinite(x)) fprintf(out, "\t%.6g", x);
            else fputs("\tNaN", out);
        }
        fputc('\n', out);
    }
    fputs("\n\n# val\nstep\tval_loss\n", out);
    for (size_t r = 0; r < val.n; r++) {
        jl_num(a, sizeof a, val.rows[r].step);
        fputs(a, out);
        jl_num(a, sizeof a, val.rows[r].v[0]);
        fprintf(out, "\t%s\n", a);
    }
    if (ferror(out)) jl_err(err, ecap, "cannot write: %s", strerror(errno));
    else rc = 0;
done:
    free(train.rows), free(val.rows);
    return rc;
}

/* Called with each event's text (a JSON object, as the file writes it) and its length; nonzero stops. */
typedef int (*jl_event_fn)(void *arg, const char *ev, size_t len);

/* The events of the trace text[0..n) to emit, in order. The number of events in *count, *cut 1 when the file
 * ends early (its last event cut short, or no closing bracket). 0, or -1 with err set (not a trace, emit
 * failed). */
static int jl_trace_events(const char *text, size_t n, jl_event_fn emit, void *arg, size_t *count, int *cut,
                           char *err, size_t ecap) {
    const char *end = text + n, *p = jl_ws(text, end);
    *count = 0, *cut = 0;
    if (end - p >= 3 && (unsigned char)p[0] == 0xEF && (unsigned char)p[1] == 0xBB && (unsigned char)p[2] == 0xBF)
        p = jl_ws(p + 3, end); /* a UTF-8 byte order mark */
    static const char key[] = "\"traceEvents\"";
    if (p < end && *p == '{') {
        const char *q = jl_ws(p + 1, end);
        if ((size_t)(end - q) >= sizeof key - 1 && memcmp(q, key, sizeof key - 1) == 0) {
            q = jl_ws(q + sizeof key - 1, end);
            if (q < end && *q == ':') q = jl_ws(q + 1, end);
            else q = NULL;
            if (q && q < end && *q == '[') {
                p = q; /* streamed: the events, then whatever follows them */
                goto array;
            }
        }
        /* another layout: the whole file as one object */
        cJSON *root = cJSON_ParseWithLength(text, n);
        const cJSON *evs = cJSON_GetObjectItemCaseSensitive(root, "traceEvents"), *e;
        if (!cJSON_IsArray(evs)) {
            jl_err(err, ecap,
                   root ? "no traceEvents array" : "not JSON, and not a trace that begins {\"traceEvents\":[");
            cJSON_Delete(root);
            return -1;
        }
        cJSON_ArrayForEach(e, evs) {
            char *s = cJSON_IsObject(e) ? cJSON_PrintUnformatted(e) : NULL;
            int bad = !s || emit(arg, s, strlen(s));
            cJSON_free(s); /* cJSON's allocator (the fuzz harness counts through its hooks) */
            if (bad) {
                jl_err(err, ecap, cJSON_IsObject(e) ? "cannot write event %zu" : "event %zu is not an object",
                       *count + 1);
                cJSON_Delete(root);
                return -1;
            }
            ++*count;
        }
        cJSON_Delete(root);
        return 0;
    }
    if (p >= end || *p != '[') {
        jl_err(err, ecap, "not a trace (a JSON object with traceEvents, or an array of events)");
        return -1;
    }
array:
    p = jl_ws(p + 1, end);
    if (p < end && *p == ']') return 0;
    for (;;) {
        if (p >= end) {
            *cut = 1;
            return 0;
        }
        if (*p != '{') {
            jl_err(err, ecap, "event %zu is not an object (byte %zu)", *count + 1, (size_t)(p - text));
            return -1;
        }
        const char *vend = NULL;
        cJSON *e = cJSON_ParseWithLengthOpts(p, (size_t)(end - p), &vend, 0);
        if (!e) {
            /* cut short only if nothing but this event's last line follows: a kill ends the file mid-event */
            const char *nl = memchr(p, '\n', (size_t)(end - p));
            if (!nl || jl_ws(nl, end) == end) {
                *cut = 1;
                return 0;
            }
            jl_err(err, ecap, "event %zu is not JSON (byte %zu)", *count + 1, (size_t)(p - text));
            return -1;
        }
        cJSON_Delete(e);
        if (emit(arg, p, (size_t)(vend - p))) {
            jl_err(err, ecap, "cannot write event %zu", *count + 1);
            return -1;
        }
        ++*count;
        p = jl_ws(vend, end);
        if (p >= end) {
            *cut = 1;
            return 0;
        }
        if (*p == ']') return 0;
        if (*p != ',') {
            jl_err(err, ecap, "expected , or ] after event %zu (byte %zu)", *count, (size_t)(p - text));
            return -1;
        }
        p = jl_ws(p + 1, end);
    }
}

#ifndef FSC_JSONL_NO_MAIN
/* The whole file (NUL-terminated) in *buf, its size in *n; 0, or -1 with err set. */
static int jl_slurp(const char *path, char **buf, size_t *n, char *err, size_t ecap) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        jl_err(err, ecap, "cannot read %s: %s", path, strerror(errno));
        return -1;
    }
    size_t cap = 1 << 16, len = 0;
    char *b = malloc(cap);
    for (;;) {
        if (!b) break;
        len += fread(b + len, 1, cap - len - 1, f);
        if (len < cap - 1) break;
        char *nb = cap > ((size_t)-1) / 4 ? NULL : realloc(b, cap * 2);
        if (!nb) free(b);
        b = nb, cap *= 2;
    }
    int oom = !b, bad = oom || ferror(f);
    fclose(f);
    if (bad) {
        free(b);
        jl_err(err, ecap, oom ? "%s: out of memory" : "cannot read %s", path);
        return -1;
    }
    b[len] = '\0';
    *buf = b, *n = len;
    return 0;
}

static int emit_none(void *arg, const char *ev, size_t len) {
    (void)arg, (void)ev, (void)len;
    return 0;
}

static int emit_file(void *arg, const char *ev, size_t len) {
    int *first = arg;
    int bad = (*first ? 0 : fputs(",\n", stdout) < 0) || fwrite(ev, 1, len, stdout) != len;
    *first = 0;
    return bad;
}

static int usage(void) {
    fputs("usage: fsc-jsonl plot-data LOG.jsonl [TITLE_FILE]\n"
          "       fsc-jsonl trace-merge FILE...\n"
          "The JSON reading of tools/plot and tools/trace_merge (tools/fsc_jsonl.c says what each prints).\n",
          stderr);
    return 2;
}

int main(int argc, char **argv) {
    char err[512];
    if (argc >= 3 && argc <= 4 && strcmp(argv[1], "plot-data") == 0) {
        char *text = NULL, title[JL_TITLE_CAP];
        size_t n = 0, skipped = 0, nostep = 0;
        if (jl_slurp(argv[2], &text, &n, err, sizeof err) != 0) {
            fprintf(stderr, "fsc-jsonl: %s\n", err);
            return 1;
        }
        int rc = jl_plot_tables(text, n, stdout, title, &skipped, &nostep, err, sizeof err);
        free(text);
        if (rc != 0 || fflush(stdout) != 0) {
            fprintf(stderr, "fsc-jsonl: %s: %s\n", argv[2], rc ? err : "cannot write the tables");
            return 1;
        }
        if (skipped)
            fprintf(stderr, "fsc-jsonl: %s: skipped %zu line%s that %s not a JSON object\n", argv[2], skipped,
                    skipped == 1 ? "" : "s", skipped == 1 ? "is" : "are");
        if (nostep)
            fprintf(stderr, "fsc-jsonl: %s: skipped %zu train or val record%s without a finite number as its step\n",
                    argv[2], nostep, nostep == 1 ? "" : "s");
        if (argc == 4 && title[0]) {
            FILE *f = fopen(argv[3], "w");
            if (!f || fprintf(f, "%s\n", title) < 0 || fclose(f) != 0) {
                fprintf(stderr, "fsc-jsonl: cannot write %s\n", argv[3]);
                return 1;
            }
        }
        return 0;
    }
    if (argc >= 3 && strcmp(argv[1], "trace-merge") == 0) {
        /* every file read once without output first: a bad one then fails the merge before a byte is written, so
         * no half-merged, unclosed trace is left where the output was redirected */
        int first = 1, empty = 0;
        for (int pass = 0; pass < 2; pass++) {
            if (pass && empty == argc - 2) { /* nothing to merge: refused, as a merge of no file is */
                fprintf(stderr, "fsc-jsonl: every file is empty (%d), no trace to merge\n", empty);
                return 1;
            }
            if (pass) fputs("{\"traceEvents\":[\n", stdout);
            for (int i = 2; i < argc; i++) {
                char *text = NULL;
                size_t n = 0, count = 0;
                int cut = 0;
                if (jl_slurp(argv[i], &text, &n, err, sizeof err) != 0) {
                    fprintf(stderr, "fsc-jsonl: %s\n", err);
                    return 1;
                }
                if (jl_ws(text, text + n) == text + n) { /* a rank that stopped before its recorder wrote a byte */
                    free(text);
                    empty += !pass;
                    if (pass)
                        fprintf(stderr, "fsc-jsonl: %s is empty (a rank that stopped early?): skipped\n", argv[i]);
                    continue;
                }
                int rc = jl_trace_events(text, n, pass ? emit_file : emit_none, &first, &count, &cut, err, sizeof err);
                free(text);
                if (rc != 0) {
                    fprintf(stderr, "fsc-jsonl: %s: %s\n", argv[i], err);
                    return 1;
                }
                if (cut && pass)
                    fprintf(stderr, "fsc-jsonl: %s ends early (a run that was killed?): its %zu whole events taken\n",
                            argv[i], count);
            }
        }
        fputs("\n],\"displayTimeUnit\":\"ms\"}\n", stdout);
        if (fflush(stdout) != 0) {
            fprintf(stderr, "fsc-jsonl: cannot write the merged trace\n");
            return 1;
        }
        return 0;
    }
    return usage();
}
#endif
