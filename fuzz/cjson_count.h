/* For the fuzz harnesses of JSON parsers: cJSON's allocations counted (cJSON_InitHooks with cj_malloc and
 * cj_free), so that a harness can bound the memory an input makes a parser take. The fuzzer runs one input at
 * a time, so the counters are plain statics. */
#ifndef FSC_FUZZ_CJSON_COUNT_H
#define FSC_FUZZ_CJSON_COUNT_H
#include <stdlib.h>

static size_t cj_now, cj_peak; /* bytes held now, and the most held since the harness last reset cj_peak */
static void *cj_malloc(size_t n) {
    size_t *p = malloc(n + 2 * sizeof(size_t));
    if (!p) return NULL;
    p[0] = n;
    cj_now += n;
    if (cj_now > cj_peak) cj_peak = cj_now;
    return p + 2;
}
static void cj_free(void *q) {
    if (!q) return;
    size_t *p = (size_t *)q - 2;
    cj_now -= p[0];
    free(p);
}

#endif
