/* libFuzzer harness for the checkpoint metadata reader (metadata.json). The input is parsed as it is and,
 * when it begins with a metadata_crc32 member, once more with its checksum made right (ck_meta_seal), so
 * the fuzzer reaches past the checksum. Each is either refused with a status and a message, or parses into
 * metadata whose invariants hold (file indices in range, pieces sorted and tiling each tensor exactly,
 * names found by fsc_ckpt_meta_find, a correct checksum) and which survives a round trip through the
 * writer unchanged; the GPT's check of its parameters against the recorded configuration (fsc_gpt_check_tensors)
 * accepts them or says why. Either way cJSON allocated at most CK_PARSE_FACTOR bytes per byte of input (plus the
 * bound's constant), counted by allocation hooks.
 * Build and run: ci/fuzz.sh SECONDS fuzz/fuzz_ckpt_meta.c (or make fuzz). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "ckpt/ckpt_impl.h"
#include "fsc/gpt.h"
#include "cjson_count.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);


static void check(const fsc_ckpt_meta *m) {
    if (m->nfiles < 0 || m->ntensors < 0) __builtin_trap();
    for (int i = 0; i < m->nfiles; i++)
        if (!m->files[i][0] || strchr(m->files[i], '/')) __builtin_trap();
    for (int i = 0; i < m->ntensors; i++) {
        const fsc_ckpt_tensor *t = &m->tensors[i];
        if (fsc_ckpt_meta_find(m, t->name) != t || t->dtype != FSC_F32 || t->ndim < 0 || t->ndim > 4) __builtin_trap();
        uint64_t numel = 1, at = 0;
        for (int d = 0; d < t->ndim; d++) numel *= (uint64_t)t->shape[d];
        if (numel != t->numel) __builtin_trap();
        for (int k = 0; k < t->npieces; k++) {
            const fsc_ckpt_piece *p = &t->pieces[k];
            if (p->file < 0 || p->file >= m->nfiles || p->first != at || p->n == 0 || !p->entry[0]) __builtin_trap();
            at += p->n;
        }
        if (at != t->numel) __builtin_trap();
    }
}

static void one(const char *in, size_t size) {
    static int hooked;
    if (!hooked) {
        cJSON_Hooks h = { cj_malloc, cj_free };
        cJSON_InitHooks(&h);
        hooked = 1;
    }
    fsc_ckpt_meta *m = NULL;
    cj_peak = cj_now;
    fsc_status s = fsc_ckpt_meta_parse(in, size, "fuzz", &m);
    if (cj_peak - cj_now > (size_t)CK_PARSE_FACTOR * (size + ((size_t)1 << 16))) __builtin_trap(); /* the bound */
    if (s != FSC_OK) {
        if (m != NULL || fsc_last_error()[0] == 0) __builtin_trap(); /* a refusal says why, returns nothing */
        return;
    }
    check(m);
    fsc_param_info *params = NULL; /* the GPT's strict check of the parameters against its configuration */
    int np = 0;
    if (fsc_ckpt_meta_params(m, &params, &np) != FSC_OK) __builtin_trap();
    if (fsc_gpt_check_tensors(m->model_config, params, np) != FSC_OK && fsc_last_error()[0] == 0) __builtin_trap();
    free(params);
    char *copy = malloc(size + 1);
    if (!copy) abort();
    memcpy(copy, in, size);
    if (ck_meta_seal(copy, size) != 0 || memcmp(copy, in, size) != 0) __builtin_trap(); /* its checksum was right */
    free(copy);
    char *text = ck_meta_json(m);
    if (text) { /* what the writer makes of it reads back as the same metadata */
        fsc_ckpt_meta *b = NULL;
        if (fsc_ckpt_meta_parse(text, strlen(text), "fuzz round trip", &b) != FSC_OK) __builtin_trap();
        if (b->ntensors != m->ntensors || b->nfiles != m->nfiles || b->step != m->step || b->seed != m->seed ||
            b->optim_steps != m->optim_steps || strcmp(b->model_config, m->model_config) != 0 ||
            strcmp(b->run_id, m->run_id) != 0 || b->world != m->world || b->tp != m->tp)
            __builtin_trap();
        for (int i = 0; i < m->ntensors; i++) {
            const fsc_ckpt_tensor *x = &m->tensors[i], *y = &b->tensors[i];
            if (strcmp(x->name, y->name) || x->npieces != y->npieces || x->numel != y->numel) __builtin_trap();
            for (int k = 0; k < x->npieces; k++)
                if (memcmp(&x->pieces[k], &y->pieces[k], sizeof x->pieces[k]) != 0) __builtin_trap();
        }
        fsc_ckpt_meta_free(b);
        cJSON_free(text);
    }
    fsc_ckpt_meta_free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    one((const char *)data, size);
    char *sealed = malloc(size + 1);
    if (!sealed) abort();
    memcpy(sealed, data, size);
    if (ck_meta_seal(sealed, size) == 0) one(sealed, size); /* past the checksum */
    free(sealed);
    return 0;
}
