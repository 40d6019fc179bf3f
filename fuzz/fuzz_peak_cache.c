/* libFuzzer harness for the trainer's MFU peak cache reader: peak_cache_parse of examples/train/peak.c (compiled
 * into the harness), the text of FSC_CACHE_DIR/peak-DEVICE-Nthreads.txt as read_cache reads it (its first 63
 * bytes; the harness gives any length, up to a NUL). Checks beyond "no crash": the value is 0 (refused) or finite
 * in (0, 1e7]; an accepted text is one strtod number of the characters [0-9+-.eE] followed only by spaces and
 * newlines, and what write_cache writes of the value ("%.6g\n") reads back within its 6 digits.
 * Build and run: ci/fuzz.sh SECONDS fuzz/fuzz_peak_cache.c (or make fuzz). */
#include "../examples/train/peak.c"
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) abort();
    memcpy(text, data, size);
    text[size] = '\0';
    double v = peak_cache_parse(text);
    if (v != 0) {
        if (!(isfinite(v) && v > 0 && v <= 1e7)) __builtin_trap();
        size_t k = strspn(text, "0123456789+-.eE");
        char *end;
        if (k == 0 || strtod(text, &end) != v || end != text + k) __builtin_trap();
        for (const char *p = end; *p; p++)
            if (*p != ' ' && *p != '\n') __builtin_trap();
        char back[64];
        snprintf(back, sizeof back, "%.6g\n", v);
        double w = peak_cache_parse(back);
        if (!(fabs(w - v) <= 1e-5 * v)) __builtin_trap();
    }
    free(text);
    return 0;
}
