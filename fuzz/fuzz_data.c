/* libFuzzer harness for the token-file parser (lib/io/data.c, fsc_data_open_memory): any set of file images
 * either is refused with a status and a message and no stream, or is a stream whose every file has exactly
 * its format's structure (bytes: any; u16: even size, no llm.c magic; llmc: the magic, version 1 and a count
 * that agrees with the size; an empty file in any format, adding nothing), whose tokens read back as a direct decode of the images across file
 * boundaries, whose reads and full check succeed exactly when every token is below the vocabulary, and
 * whose batches follow the data-order formula.
 * Input: byte 0: format (bits 0-1: auto, bytes, llmc, u16) and files - 1 (bits 2-3); bytes 1-2: vocabulary
 * - 1 (little-endian); then per file but the last a 2-byte length and its bytes; the last file takes the rest.
 * Build and run: ci/fuzz.sh SECONDS fuzz/fuzz_data.c (or make fuzz). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "fsc/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) __builtin_trap();                                                                \
    } while (0)

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 3) return 0;
    fsc_data_format fmt = (fsc_data_format)(data[0] & 3);
    int nf = 1 + (data[0] >> 2 & 3);
    int vocab = 1 + (int)(data[1] | data[2] << 8);
    const void *bufs[4];
    size_t lens[4];
    size_t at = 3;
    for (int i = 0; i < nf; i++) {
        size_t len = size - at;
        if (i < nf - 1) {
            if (size - at < 2) return 0;
            len = (size_t)(data[at] | data[at + 1] << 8);
            at += 2;
            if (len > size - at) len = size - at;
        }
        bufs[i] = data + at, lens[i] = len;
        at += len;
    }
    fsc_data *d = (fsc_data *)&bufs; /* must be set to NULL on a refusal */
    fsc_status s = fsc_data_open_memory(&d, nf, bufs, lens, fmt, vocab);
    if (s != FSC_OK) {
        CHECK(d == NULL);
        CHECK(fsc_last_error()[0] != '\0');
        return 0;
    }
    fsc_data_format got = fsc_data_format_of(d);
    CHECK(got != FSC_DATA_AUTO && (fmt == FSC_DATA_AUTO || got == fmt));
    CHECK(!(fmt == FSC_DATA_AUTO && got == FSC_DATA_BYTES && vocab > 256)); /* auto never guesses bytes above 256 */
    CHECK(!(fmt == FSC_DATA_AUTO && got == FSC_DATA_U16));
    CHECK(fsc_data_files(d) == nf);
    /* every file has exactly its format's structure; decode the stream directly */
    uint64_t total = 0;
    for (int i = 0; i < nf; i++) {
        const uint8_t *b = bufs[i];
        size_t len = lens[i];
        int magic = len >= 4 && le32(b) == FSC_DATA_LLMC_MAGIC;
        uint64_t n = len; /* an empty file adds nothing in any format (docs/data.md) */
        if (got == FSC_DATA_BYTES) CHECK(!magic);
        if (got == FSC_DATA_U16) {
            CHECK(!magic && len % 2 == 0);
            n = len / 2;
        }
        if (got == FSC_DATA_LLMC && len > 0) {
            CHECK(magic && len >= FSC_DATA_LLMC_HEADER && le32(b + 4) == 1);
            n = le32(b + 8);
            CHECK(n <= INT32_MAX && len == FSC_DATA_LLMC_HEADER + 2 * n);
        }
        CHECK(fsc_data_file_tokens(d, i) == n);
        total += n;
    }
    CHECK(fsc_data_tokens(d) == total);
    uint32_t *want = malloc((total + 1) * sizeof *want);
    int32_t *out = malloc((total + 1) * sizeof *out);
    CHECK(want && out);
    int all_in = 1;
    uint64_t k = 0;
    for (int i = 0; i < nf; i++) {
        const uint8_t *b = bufs[i];
        uint64_t n = fsc_data_file_tokens(d, i);
        const uint8_t *t = got == FSC_DATA_LLMC ? b + FSC_DATA_LLMC_HEADER : b;
        for (uint64_t j = 0; j < n; j++, k++) {
            want[k] = got == FSC_DATA_BYTES ? t[j] : (uint32_t)(t[2 * j] | t[2 * j + 1] << 8);
            if (want[k] >= (uint32_t)vocab) all_in = 0;
        }
    }
    CHECK((fsc_data_check(d) == FSC_OK) == all_in);
    s = fsc_data_read(d, 0, total, out);
    CHECK((s == FSC_OK) == all_in);
    if (all_in) {
        for (uint64_t j = 0; j < total; j++) CHECK((uint32_t)out[j] == want[j]);
        /* windows that cross file boundaries, and the data order for a small batch */
        for (uint64_t p = 0; p < total; p += 1 + total / 7) {
            size_t m = (size_t)(total - p < 5 ? total - p : 5);
            CHECK(fsc_data_read(d, p, m, out) == FSC_OK);
            for (size_t j = 0; j < m; j++) CHECK((uint32_t)out[j] == want[p + j]);
        }
        int T = 3, B = 2;
        int32_t tok[6], tgt[6];
        for (int step = 0; step < 3 && total > (uint64_t)T; step++) {
            CHECK(fsc_data_batch(d, step, B, T, 0, B, tok, tgt) == FSC_OK);
            for (int i = 0; i < B; i++) {
                uint64_t st = ((uint64_t)(step * B + i) * (uint64_t)T) % (total - (uint64_t)T);
                for (int t = 0; t < T; t++)
                    CHECK((uint32_t)tok[i * T + t] == want[st + (uint64_t)t] &&
                          (uint32_t)tgt[i * T + t] == want[st + (uint64_t)t + 1]);
            }
        }
    }
    CHECK(fsc_data_read(d, total, 1, out) != FSC_OK); /* past the end */
    free(want);
    free(out);
    fsc_data_free(d);
    return 0;
}
