/* libFuzzer harness for the safetensors reader: any byte string either is refused with a status and a
 * message, or parses into entries that can all be found by name and read completely and in pieces, also as
 * weights (fsc_st_find_weight, fsc_st_read_f32 of float entries, fsc_st_check_copy); an entry listed as
 * unreadable (another safetensors dtype, more than 4 dimensions) has FSC_DTYPE_COUNT and its reads are refused; and
 * parsing it never holds more than 6 bytes of heap per input byte (plus a few KB), whatever it holds.
 * Build and run: ci/fuzz.sh SECONDS fuzz/fuzz_safetensors.c (or make fuzz). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "fsc/safetensors.h"
#include "heap_count.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fsc_st_file *f = NULL;
    heap_count_begin();
    fsc_status st = fsc_st_parse_buffer(data, size, &f);
    const long long peak = heap_count_end();
    if (peak > 6 * (long long)size + 4096) __builtin_trap(); /* memory out of proportion to the input */
    if (st != FSC_OK) {
        if (f != NULL || fsc_last_error()[0] == 0) __builtin_trap(); /* a refusal says why, returns nothing */
        return 0;
    }
    uint64_t covered = 0;
    for (int i = 0; i < fsc_st_count(f); i++) {
        const fsc_st_entry *e = fsc_st_entry_at(f, i);
        if (!e || fsc_st_find(f, e->name) != e) __builtin_trap();
        if (e->ndim < 0 || e->ndim > 4 || e->end < e->begin) __builtin_trap();
        uint64_t numel = 1;
        for (int d = 0; d < e->ndim; d++) numel *= (uint64_t)e->shape[d];
        uint64_t bytes = e->end - e->begin;
        covered += bytes;
        if (bytes > size) __builtin_trap(); /* validated entries lie inside the input */
        if (e->unreadable) { /* listed, placed, never read: every read refused with its reason */
            float x;
            if (e->dtype != FSC_DTYPE_COUNT || fsc_st_read(f, e, &x, 0, 0) == FSC_OK ||
                fsc_st_read_f32(f, e, &x, 0, 0) == FSC_OK || fsc_last_error()[0] == 0)
                __builtin_trap();
            if (fsc_st_find_weight(f, e->name) != e) __builtin_trap();
            if (i > 0) (void)fsc_st_check_copy(f, fsc_st_entry_at(f, i - 1)->name, e->name, "fuzz");
            continue;
        }
        size_t es = numel ? (size_t)(bytes / numel) : 1;
        uint8_t *all = malloc(bytes + 1), *part = malloc(bytes + 1);
        if (!all || !part) abort();
        if (fsc_st_read(f, e, all, 0, numel) != FSC_OK) __builtin_trap();
        if (numel > 1) { /* the second half alone equals the second half of the whole */
            uint64_t h = numel / 2;
            if (fsc_st_read(f, e, part, h, numel - h) != FSC_OK) __builtin_trap();
            if (memcmp(part, all + h * es, (size_t)((numel - h) * es)) != 0) __builtin_trap();
        }
        if (fsc_st_read(f, e, part, numel, 1) == FSC_OK) __builtin_trap(); /* one past the end */
        /* as weights (safetensors_weights.c): found by name, or by the name without Hugging Face's prefix; float
         * entries read as float32 in pieces equal to the whole; others refused; a copy check never fails to end */
        if (fsc_st_find_weight(f, e->name) != e || fsc_st_find_weight(f, fsc_st_weight_name(e->name)) == NULL)
            __builtin_trap();
        float *fa = malloc((size_t)numel * sizeof(float) + 4), *fp = malloc((size_t)numel * sizeof(float) + 4);
        if (!fa || !fp) abort();
        const int is_float = e->dtype == FSC_F32 || e->dtype == FSC_BF16 || e->dtype == FSC_F16;
        if ((fsc_st_read_f32(f, e, fa, 0, numel) == FSC_OK) != is_float) __builtin_trap();
        if (is_float && numel > 1) {
            uint64_t h = numel / 3;
            if (fsc_st_read_f32(f, e, fp, h, numel - h) != FSC_OK) __builtin_trap();
            if (memcmp(fp, fa + h, (size_t)(numel - h) * sizeof(float)) != 0) __builtin_trap();
        }
        if (is_float && fsc_st_read_f32(f, e, fp, numel, 1) == FSC_OK) __builtin_trap();
        if (i > 0) (void)fsc_st_check_copy(f, fsc_st_entry_at(f, i - 1)->name, e->name, "fuzz");
        free(fa);
        free(fp);
        free(all);
        free(part);
    }
    if (covered > size) __builtin_trap();
    fsc_st_metadata(f, "format");
    fsc_st_close(f);
    return 0;
}
