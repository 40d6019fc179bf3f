/* libFuzzer harness for sentencepiece BPE models (lib/text/bpe_spm.c, fsc/bpe.h). First byte even: the rest is
 * a tokenizer.model (a protobuf ModelProto) for fsc_bpe_load_spm_memory; odd: the rest is text for the small
 * model tests/golden/spm_bpe.model (run from the repository root).
 * Checks: a refusal sets a message and returns nothing; an accepted model that begins with a piece is one
 * fsc_bpe_load_file knows by its contents (bpe_is_spm); loading never holds more than 64 bytes of heap per
 * input byte plus 1 MiB (allocation hooks); an accepted model's every token reads, its bos is in range, and the
 * input as text encodes to at most fsc_bpe_max_ids ids, all in the vocabulary, that decode (also as a
 * continuation). Text: the same, and decode gives the text back when it is valid UTF-8 without U+2581 (which
 * sentencepiece reads as a space), and encoding in parts cut at fsc_bpe_split_point gives the ids of the whole.
 * Build and run: ci/fuzz.sh SECONDS fuzz/fuzz_spm.c (or make fuzz). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "text/bpe_impl.h"
#include "heap_count.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) __builtin_trap();                                                                \
    } while (0)

/* Encode and decode len bytes of text; exact: decode must give them back */
static void check_text(const fsc_bpe *b, const uint8_t *text, size_t len, int exact) {
    size_t cap = fsc_bpe_max_ids(b, len);
    int32_t *ids = malloc((cap + 1) * sizeof *ids), *parts = malloc((cap + 1) * sizeof *parts);
    CHECK(ids && parts);
    size_t n, need;
    CHECK(fsc_bpe_encode(b, text, len, ids, &n) == FSC_OK && n <= cap);
    for (size_t i = 0; i < n; i++) CHECK(ids[i] >= 0 && (size_t)ids[i] < fsc_bpe_vocab(b));
    CHECK(fsc_bpe_decode(b, ids, n, NULL, 0, &need) == (need ? FSC_ERR_INVALID : FSC_OK));
    uint8_t *back = malloc(need + 1);
    CHECK(back);
    size_t got;
    CHECK(fsc_bpe_decode(b, ids, n, back, need, &got) == FSC_OK && got == need);
    if (exact) CHECK(got == len && (len == 0 || memcmp(back, text, len) == 0));
    CHECK(fsc_bpe_decode_more(b, ids, n, NULL, 0, &need) == (need ? FSC_ERR_INVALID : FSC_OK));
    if (exact) { /* the text in parts: the ids of the whole */
        size_t np = 0;
        for (size_t at = 0; at < len;) {
            size_t end = fsc_bpe_split_point(text, len, at + 16 < len ? at + 16 : len), k;
            fsc_status s = at ? fsc_bpe_encode_more(b, text + at, end - at, parts + np, &k)
                              : fsc_bpe_encode(b, text, end, parts, &k);
            CHECK(s == FSC_OK);
            np += k, at = end;
        }
        CHECK(np == n && (n == 0 || memcmp(parts, ids, n * sizeof *ids) == 0));
    }
    free(ids), free(parts), free(back);
}

static int valid_text(const uint8_t *p, size_t len) {
    for (size_t at = 0, c; at < len; at += c) {
        if ((c = bpe_utf8_char(p + at, len - at)) == 0) return 0;
        if (c == 3 && !memcmp(p + at, "\xe2\x96\x81", 3)) return 0;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static fsc_bpe *golden;
    if (size < 1) return 0;
    if (data[0] & 1) {
        if (!golden && fsc_bpe_load_spm(&golden, "tests/golden/spm_bpe.model") != FSC_OK) {
            fprintf(stderr, "fuzz_spm: %s (run from the repository root)\n", fsc_last_error());
            abort();
        }
        size_t len = size - 1 < 4096 ? size - 1 : 4096;
        check_text(golden, data + 1, len, valid_text(data + 1, len));
        return 0;
    }
    int looks = bpe_is_spm(data + 1, size - 1); /* fsc_bpe_load_file's test of the contents */
    fsc_bpe *b = (fsc_bpe *)&b; /* must be set to NULL on a refusal */
    heap_count_begin();
    fsc_status s = fsc_bpe_load_spm_memory(&b, data + 1, size - 1);
    if (heap_count_end() > 64 * (long long)size + (1 << 20)) __builtin_trap();
    if (s != FSC_OK) {
        CHECK(b == NULL && fsc_last_error()[0] != '\0');
        return 0;
    }
    CHECK(fsc_bpe_vocab(b) >= 1);
    CHECK(looks || size < 5 || data[1] != 0x0a); /* a model that begins with its first piece is known as one */
    int32_t bos = fsc_bpe_eot(b);
    CHECK(bos >= -1 && bos < (int32_t)fsc_bpe_vocab(b));
    for (int32_t id = 0; id < (int32_t)fsc_bpe_vocab(b); id++) {
        size_t tl;
        CHECK(fsc_bpe_token(b, id, &tl) != NULL);
    }
    check_text(b, data + 1, size - 1 < 2048 ? size - 1 : 2048, 0);
    fsc_bpe_free(b);
    return 0;
}
