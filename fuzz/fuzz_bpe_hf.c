/* libFuzzer harness for Hugging Face's BPE files (lib/text/bpe_hf.c, fsc/bpe.h). First byte even: the rest is
 * a tokenizer.json for fsc_bpe_load_tokenizer_json_memory; odd: bytes 1-2 the length of a vocab.json, then it,
 * then a merges.txt (the rest) for fsc_bpe_load_hf_memory.
 * Checks: a refusal sets a message and returns nothing; loading (cJSON's tree included) never holds more than
 * 64 bytes of heap per input byte plus 1 MiB (allocation hooks); an accepted vocabulary has at least 256 ids,
 * every byte as a token, each token text can give looks up to its own id, the end-of-text token (if any) is an
 * id text never gives; the input itself, as text, encodes to ids in the vocabulary that decode back to it, and
 * the heap merge equals tiktoken's scan on it as one piece (up to 2 KiB).
 * Build and run: ci/fuzz.sh SECONDS fuzz/fuzz_bpe_hf.c (or make fuzz). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "text/bpe_impl.h"
#include "heap_count.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) __builtin_trap();                                                                \
    } while (0)

static void check_text(const fsc_bpe *b, const uint8_t *text, size_t len) {
    int32_t *ids = malloc((len + 1) * sizeof *ids), *other = malloc((len + 1) * sizeof *other);
    uint8_t *back = malloc(len + 1);
    CHECK(ids && other && back);
    size_t n, got;
    CHECK(fsc_bpe_encode(b, text, len, ids, &n) == FSC_OK && n <= len);
    for (size_t i = 0; i < n; i++) CHECK(ids[i] >= 0 && (size_t)ids[i] < fsc_bpe_vocab(b) && ids[i] != fsc_bpe_eot(b));
    CHECK(fsc_bpe_decode(b, ids, n, back, len, &got) == FSC_OK && got == len);
    CHECK(len == 0 || memcmp(back, text, len) == 0);
    if (len >= 2 && len <= 2048 && bpe_id(b, text, len) == BPE_NONE) { /* one piece, both merges */
        bpe_scratch s = {0};
        size_t na = bpe_merge_scan(b, text, len, ids, &s), nb = bpe_merge_heap(b, text, len, other, &s);
        CHECK(na > 0 && na == nb && memcmp(ids, other, na * sizeof *ids) == 0);
        bpe_scratch_free(&s);
    }
    free(ids), free(other), free(back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    fsc_bpe *b = (fsc_bpe *)&b; /* must be set to NULL on a refusal */
    fsc_status s;
    if (!(data[0] & 1)) {
        heap_count_begin();
        s = fsc_bpe_load_tokenizer_json_memory(&b, data + 1, size - 1);
    } else {
        if (size < 3) return 0;
        size_t vlen = (size_t)data[1] | (size_t)data[2] << 8;
        if (vlen > size - 3) vlen = size - 3;
        heap_count_begin();
        s = fsc_bpe_load_hf_memory(&b, data + 3, vlen, data + 3 + vlen, size - 3 - vlen);
    }
    const long long peak = heap_count_end();
    /* memory out of proportion to the input (the constant: PCRE2's compiled patterns and tables) */
    if (peak > 64 * (long long)size + (1 << 20)) __builtin_trap();
    if (s != FSC_OK) {
        CHECK(b == NULL && fsc_last_error()[0] != '\0');
        return 0;
    }
    CHECK(fsc_bpe_vocab(b) >= 256);
    int32_t eot = fsc_bpe_eot(b);
    CHECK(eot >= -1 && eot < (int32_t)fsc_bpe_vocab(b));
    for (int c = 0; c < 256; c++) {
        uint8_t byte = (uint8_t)c;
        CHECK(bpe_id(b, &byte, 1) != BPE_NONE);
    }
    for (int32_t id = 0; id < (int32_t)fsc_bpe_vocab(b); id++) {
        size_t tl;
        const uint8_t *t = fsc_bpe_token(b, id, &tl);
        CHECK(t && tl >= 1);
        uint32_t found = bpe_id(b, t, tl);
        CHECK(found == (uint32_t)id || (b->prio && b->prio[id] == BPE_NONE)); /* or a token text never gives */
        CHECK(id != eot || found != (uint32_t)id);
    }
    check_text(b, data, size < 4096 ? size : 4096);
    fsc_bpe_free(b);
    return 0;
}
