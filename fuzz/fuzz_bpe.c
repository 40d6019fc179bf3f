/* libFuzzer harness for the GPT-2 tokenizer (lib/text/, fsc/bpe.h). First byte even: the rest is a
 * vocabulary file (plain or gzip) for fsc_bpe_load_memory; odd: the rest is text for GPT-2's vocabulary
 * (examples/data/gpt2.tiktoken.gz, loaded once; run from the repository root), with GPT-2's pattern, or with
 * Llama 3's when the first byte's second bit is set ("llama3:" of fsc_bpe_load_file).
 * Vocabulary: a refusal sets a message and returns nothing; loading never holds more than 32 bytes of heap per
 * byte of the file's text (inflated, for gzip) plus 256 KiB (allocation hooks); an accepted vocabulary has
 * every byte as a token, each rank's bytes look up to that rank, and encodes the input itself as text.
 * Text (for both): at most one id per byte, every id in the vocabulary, decode gives the bytes back; the
 * text cut at fsc_bpe_split_point encodes to the same ids as the whole; the heap merge equals tiktoken's scan
 * on the whole input as one piece (up to 2 KiB).
 * Build and run: ci/fuzz.sh SECONDS fuzz/fuzz_bpe.c (or make fuzz). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include "text/bpe_impl.h"
#include "heap_count.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) __builtin_trap();                                                                \
    } while (0)

static fsc_bpe *gpt2, *llama3;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    CHECK(fsc_bpe_load(&gpt2, "examples/data/" FSC_BPE_GPT2_FILE) == FSC_OK);
    CHECK(fsc_bpe_load_file(&llama3, "llama3:examples/data/" FSC_BPE_GPT2_FILE) == FSC_OK);
    return 0;
}

/* The bytes a gzip image inflates to (counted, not kept; stops past 65 MiB) */
static size_t inflated_size(const uint8_t *data, size_t size) {
    z_stream z;
    memset(&z, 0, sizeof z);
    CHECK(inflateInit2(&z, 16 + MAX_WBITS) == Z_OK);
    static uint8_t out[1 << 16];
    size_t total = 0;
    z.next_in = (Bytef *)data, z.avail_in = (uInt)size;
    for (int rc = Z_OK; rc == Z_OK && total <= ((size_t)65 << 20);) {
        z.next_out = out, z.avail_out = sizeof out;
        rc = inflate(&z, Z_NO_FLUSH);
        total += sizeof out - z.avail_out;
        if (z.avail_out == sizeof out) break;
    }
    inflateEnd(&z);
    return total;
}

static void check_text(const fsc_bpe *b, const uint8_t *text, size_t len) {
    int32_t *ids = malloc((len + 1) * sizeof *ids), *parts = malloc((len + 1) * sizeof *parts);
    uint8_t *back = malloc(len + 1);
    CHECK(ids && parts && back);
    size_t n, m = 0, got;
    CHECK(fsc_bpe_encode(b, text, len, ids, &n) == FSC_OK && n <= len);
    for (size_t i = 0; i < n; i++) CHECK(ids[i] >= 0 && (size_t)ids[i] < fsc_bpe_vocab(b) - 1);
    CHECK(fsc_bpe_decode(b, ids, n, back, len, &got) == FSC_OK && got == len);
    CHECK(len == 0 || memcmp(back, text, len) == 0);
    for (size_t at = 0; at < len;) { /* in parts cut where the ids do not change */
        size_t end = fsc_bpe_split_point(text, len, at + 1 + len / 3), k;
        CHECK(end > at && end <= len);
        CHECK(fsc_bpe_encode(b, text + at, end - at, parts + m, &k) == FSC_OK);
        m += k, at = end;
    }
    CHECK(m == n && (n == 0 || memcmp(parts, ids, n * sizeof *ids) == 0));
    if (len >= 2 && len <= 2048 && bpe_rank(b, text, len) == BPE_NONE) { /* one piece, both merges */
        bpe_scratch s = {0};
        size_t na = bpe_merge_scan(b, text, len, ids, &s), nb = bpe_merge_heap(b, text, len, parts, &s);
        CHECK(na > 0 && na == nb && memcmp(ids, parts, na * sizeof *ids) == 0);
        bpe_scratch_free(&s);
    }
    free(ids), free(parts), free(back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const uint8_t *rest = data + 1;
    size_t len = size - 1;
    if (data[0] & 1) {
        check_text(data[0] & 2 ? llama3 : gpt2, rest, len);
        return 0;
    }
    int gz = len >= 2 && rest[0] == 0x1f && rest[1] == 0x8b;
    size_t text = gz ? inflated_size(rest, len) : len;
    fsc_bpe *b = (fsc_bpe *)&b; /* must be set to NULL on a refusal */
    heap_count_begin();
    fsc_status s = fsc_bpe_load_memory(&b, rest, len);
    const long long peak = heap_count_end();
    /* memory out of proportion to the input (the constant: zlib's state and window, the first 64 KiB of output, PCRE2) */
    if (peak > 32 * (long long)text + (256 << 10)) __builtin_trap();
    if (s != FSC_OK) {
        CHECK(b == NULL && fsc_last_error()[0] != '\0');
        return 0;
    }
    CHECK(fsc_bpe_vocab(b) >= 257 && fsc_bpe_eot(b) == (int32_t)fsc_bpe_vocab(b) - 1);
    for (int c = 0; c < 256; c++) {
        uint8_t byte = (uint8_t)c;
        CHECK(bpe_rank(b, &byte, 1) != BPE_NONE);
    }
    for (int32_t r = 0; r < fsc_bpe_eot(b); r++) {
        size_t tl;
        const uint8_t *t = fsc_bpe_token(b, r, &tl);
        CHECK(t && tl >= 1 && bpe_rank(b, t, tl) == (uint32_t)r);
    }
    check_text(b, rest, len < 4096 ? len : 4096);
    fsc_bpe_free(b);
    return 0;
}
