/* libFuzzer harness for fsc-jsonl's readers (tools/fsc_jsonl.c, included with FSC_JSONL_NO_MAIN), the JSON
 * reading of tools/plot and tools/trace_merge. The first byte picks which, the rest is the file:
 *   even  jl_plot_tables (a trainer's --log): it never fails on any text (only out of memory); the tables are
 *         "# train", a header "step loss lr tokens_per_s mfu" plus <tag>_mib columns, rows of exactly the
 *         header's columns with steps strictly increasing, then "\n\n# val", "step\tval_loss" and rows of two
 *         columns with steps strictly increasing; every cell is a number or NaN; the title holds only the
 *         characters [A-Za-z0-9_.+-], ", " and " x ", and fits its buffer; cJSON never holds more than 48 bytes
 *         per input byte plus 64 KiB (allocation hooks);
 *   odd   jl_trace_events (a rank's trace): a refusal sets a message and the events emitted are then the
 *         input's first ones; an accepted file's events, joined, are a JSON array of objects of exactly the
 *         count it says; a file that is JSON as a whole (an object with a traceEvents array, or an array) is
 *         never "cut short", and gives exactly its events when they are all objects (refused otherwise).
 * Build and run: ci/fuzz.sh SECONDS fuzz/fuzz_jsonl.c (or make fuzz). */
#define FSC_JSONL_NO_MAIN
#include "../tools/fsc_jsonl.c"
#include <stdint.h>
#include "cjson_count.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int numeric(const char *cell) {
    if (strcmp(cell, "NaN") == 0) return 1;
    char *end = NULL;
    double x = strtod(cell, &end);
    return end != cell && *end == '\0' && isfinite(x);
}

/* The lines of one table from *p: rows of ncol numeric cells, steps strictly increasing; *p past them. */
static void check_rows(char **p, int ncol) {
    double last = -INFINITY;
    while (**p && **p != '\n') {
        char *nl = strchr(*p, '\n');
        if (!nl) __builtin_trap();
        *nl = '\0';
        int n = 0;
        for (char *c = *p, *tab;; c = tab + 1) {
            tab = strchr(c, '\t');
            if (tab) *tab = '\0';
            if (!numeric(c)) __builtin_trap();
            if (n == 0) {
                double step = strtod(c, NULL);
                if (!(step > last)) __builtin_trap();
                last = step;
            }
            n++;
            if (!tab) break;
        }
        if (n != ncol) __builtin_trap();
        *p = nl + 1;
    }
}

static void fuzz_plot(const char *text, size_t n) {
    char *out = NULL, title[JL_TITLE_CAP], err[256] = "";
    size_t outn = 0, skipped = 0, nostep = 0;
    FILE *f = open_memstream(&out, &outn);
    if (!f) abort();
    cj_peak = cj_now;
    int rc = jl_plot_tables(text, n, f, title, &skipped, &nostep, err, sizeof err);
    if (fclose(f) != 0) abort();
    if (cj_peak - cj_now > 48 * n + (64 << 10)) __builtin_trap();
    if (rc != 0) { /* only out of memory, which the fuzzer's limits do not reach here */
        if (!err[0]) __builtin_trap();
        free(out);
        return;
    }
    if (strlen(title) >= sizeof title) __builtin_trap();
    for (const char *c = title; *c; c++)
        if (!((*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') ||
              strchr("_.+-, ", *c)))
            __builtin_trap();
    static const char head[] = "# train\nstep\tloss\tlr\ttokens_per_s\tmfu";
    if (strncmp(out, head, sizeof head - 1) != 0) __builtin_trap();
    char *p = out + sizeof head - 1, *nl = strchr(p, '\n');
    if (!nl) __builtin_trap();
    int ncol = 5;
    for (char *c = p; c < nl; c++) /* each tag column: \t<name>_mib */
        if (*c == '\t') ncol++;
    p = nl + 1;
    check_rows(&p, ncol);
    static const char mid[] = "\n\n# val\nstep\tval_loss\n";
    if (strncmp(p, mid, sizeof mid - 1) != 0) __builtin_trap();
    p += sizeof mid - 1;
    check_rows(&p, 2);
    if (*p) __builtin_trap();
    free(out);
}

typedef struct {
    FILE *f;
    size_t n;
} sink;

static int emit(void *arg, const char *ev, size_t len) {
    sink *s = arg;
    if (s->n++ && fputc(',', s->f) == EOF) return 1;
    return fwrite(ev, 1, len, s->f) != len;
}

static void fuzz_trace(const char *text, size_t n) {
    char *out = NULL, err[256] = "";
    size_t outn = 0, count = 0;
    int cut = 0;
    FILE *f = open_memstream(&out, &outn);
    if (!f) abort();
    sink s = { f, 0 };
    fputc('[', f);
    int rc = jl_trace_events(text, n, emit, &s, &count, &cut, err, sizeof err);
    fputc(']', f);
    if (fclose(f) != 0) abort();
    if (rc != 0 && !err[0]) __builtin_trap();
    if (rc == 0 && s.n != count) __builtin_trap();
    cJSON *joined = cJSON_ParseWithLength(out, outn);
    if (!cJSON_IsArray(joined) || (size_t)cJSON_GetArraySize(joined) != s.n) __builtin_trap();
    const cJSON *e;
    cJSON_ArrayForEach(e, joined) if (!cJSON_IsObject(e)) __builtin_trap();
    cJSON *whole = cJSON_ParseWithLength(text, n);
    const cJSON *evs = cJSON_IsArray(whole) ? whole : cJSON_GetObjectItemCaseSensitive(whole, "traceEvents");
    if (cJSON_IsArray(evs)) {
        int all = 1;
        cJSON_ArrayForEach(e, evs) all &= cJSON_IsObject(e);
        if (rc == 0 && cut) __builtin_trap(); /* whole JSON read as cut short */
        if (all != (rc == 0)) __builtin_trap();
        if (all) {
            if (count != (size_t)cJSON_GetArraySize(evs)) __builtin_trap();
            /* the same events, in order (compared as printed: cJSON_Compare is not reflexive on duplicate keys) */
            for (const cJSON *a = evs->child, *b = joined->child; a && b; a = a->next, b = b->next) {
                char *pa = cJSON_PrintUnformatted(a), *pb = cJSON_PrintUnformatted(b);
                if (!pa || !pb) abort();
                if (strcmp(pa, pb) != 0) __builtin_trap();
                cJSON_free(pa), cJSON_free(pb);
            }
        }
    }
    cJSON_Delete(whole);
    cJSON_Delete(joined);
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int hooked;
    if (!hooked) {
        cJSON_Hooks h = { cj_malloc, cj_free };
        cJSON_InitHooks(&h);
        hooked = 1;
    }
    if (size < 1) return 0;
    char *text = malloc(size > 1 ? size - 1 : 1); /* a copy of its own size: a read past the end is caught */
    if (!text) abort();
    memcpy(text, data + 1, size - 1);
    if (data[0] % 2 == 0) fuzz_plot(text, size - 1);
    else fuzz_trace(text, size - 1);
    free(text);
    return 0;
}
