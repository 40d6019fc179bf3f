/* libFuzzer harness for the two texts of the parallel layout: the rank order (fsc_layout_parse_order,
 * --order) and the pipeline balance (fsc_balance_parse, --balance). The first byte picks which:
 *   even  the rest (up to a NUL) is a rank order: accepted exactly when it is empty or names tp, dp and pp
 *         once each, comma-separated ("dp,tp,pp"), giving that permutation.
 *   odd   bytes 1 and 2 give the model's blocks (1..256) and the stages (-128..127, into an array of exactly
 *         that many ints), the rest (up to a NUL) is the balance: an accepted one has one entry >= 1 per
 *         stage summing to the blocks, and written back as "n,n,..." parses to the same.
 * Every refusal is FSC_ERR_INVALID with a message.
 * Build and run: ci/fuzz.sh SECONDS fuzz/fuzz_layout.c (or make fuzz). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fsc/fsc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const dim_flag[3] = {"tp", "dp", "pp"};

static void refused(fsc_status s) {
    if (s != FSC_ERR_INVALID || fsc_last_error()[0] == 0) __builtin_trap();
}

static void fuzz_order(const char *text) {
    int order[3] = {-1, -1, -1};
    fsc_status s = fsc_layout_parse_order(text, order);
    /* the grammar: "" or a permutation of tp, dp, pp joined by commas */
    char canon[16];
    int perm = order[0] >= 0 && order[0] < 3 && order[1] >= 0 && order[1] < 3 && order[2] >= 0 && order[2] < 3 &&
               order[0] != order[1] && order[1] != order[2] && order[0] != order[2];
    if (s != FSC_OK) {
        refused(s);
        return;
    }
    if (!perm) __builtin_trap();
    snprintf(canon, sizeof canon, "%s,%s,%s", dim_flag[order[0]], dim_flag[order[1]], dim_flag[order[2]]);
    if (text[0] == 0) {
        if (order[0] != FSC_DIM_TENSOR || order[1] != FSC_DIM_DATA || order[2] != FSC_DIM_PIPE) __builtin_trap();
    } else if (strcmp(text, canon) != 0) {
        __builtin_trap(); /* accepted text that is not the order it gave */
    }
}

static void fuzz_balance(int layers, int pp, const char *text) {
    const fsc_model shape = {.n_layers = layers + 2}; /* parse reads only the layer count */
    int *out = malloc((size_t)(pp > 0 ? pp : 1) * sizeof(int));
    if (!out) abort();
    fsc_status s = fsc_balance_parse(text, &shape, pp, out);
    if (s != FSC_OK) {
        refused(s);
        free(out);
        return;
    }
    if (pp < 1) __builtin_trap();
    long sum = 0;
    char back[128 * 12 + 1];
    size_t at = 0;
    for (int i = 0; i < pp; i++) {
        if (out[i] < 1) __builtin_trap();
        sum += out[i];
        at += (size_t)snprintf(back + at, sizeof back - at, "%s%d", i ? "," : "", out[i]);
    }
    if (sum != layers) __builtin_trap();
    int *again = malloc((size_t)pp * sizeof(int));
    if (!again) abort();
    if (fsc_balance_parse(back, &shape, pp, again) != FSC_OK || memcmp(out, again, (size_t)pp * sizeof(int)) != 0)
        __builtin_trap();
    free(again);
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    size_t skip = data[0] & 1 ? 3 : 1;
    if (size < skip) return 0;
    size_t n = size - skip;
    char *text = malloc(n + 1); /* its own allocation: a read past the end is caught */
    if (!text) abort();
    memcpy(text, data + skip, n);
    text[n] = '\0';
    fsc_clear_error();
    if (data[0] & 1) fuzz_balance(1 + data[1], (int)(int8_t)data[2], text);
    else fuzz_order(text);
    free(text);
    return 0;
}
