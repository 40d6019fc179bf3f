/* bench_bpe: GPT-2 tokenizer speed (or another's: TOKENIZER), encode and decode in MB of text per second (one thread), the median of
 * ROUNDS passes over a file; bench/tiktoken_bpe.py measures tiktoken on the same file for comparison.
 *   build/bench_bpe [FILE] [ROUNDS] [TOKENIZER]   FILE default examples/data/coriolanus.txt, ROUNDS default 5,
 *                                                 TOKENIZER (fsc_bpe_load_file) default gpt2
 * Run from the repository root (GPT-2's vocabulary is found as fsc_bpe_load_default finds it). Prints numbers;
 * asserts nothing. */
#include <stdio.h>
#include <stdlib.h>
#include "fsc/fsc.h"
#include "bench_util.h"

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "examples/data/coriolanus.txt";
    int rounds = argc > 2 ? atoi(argv[2]) : 5;
    if (rounds < 1 || rounds > 100) return fprintf(stderr, "bench_bpe: ROUNDS must be 1..100\n"), 2;
    FILE *f = fopen(path, "rb");
    if (!f) return fprintf(stderr, "bench_bpe: cannot read %s\n", path), 1;
    fseek(f, 0, SEEK_END);
    size_t len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    fsc_bpe *b;
    if (fsc_bpe_load_file(&b, argc > 3 ? argv[3] : "gpt2") != FSC_OK) return fprintf(stderr, "bench_bpe: %s\n", fsc_last_error()), 1;
    /* a sentencepiece model may give more ids than bytes, and decode U+FFFD (3 bytes) for a stray byte */
    char *text = malloc(len + 1), *back = malloc(3 * len + 1);
    int32_t *ids = malloc((fsc_bpe_max_ids(b, len) + 1) * sizeof *ids);
    if (!text || !back || !ids || fread(text, 1, len, f) != len) return fprintf(stderr, "bench_bpe: cannot read %s\n", path), 1;
    fclose(f);
    double enc[100], dec[100];
    size_t n = 0, got = 0;
    for (int r = 0; r < rounds; r++) {
        double t0 = now_s();
        if (fsc_bpe_encode(b, text, len, ids, &n) != FSC_OK) return fprintf(stderr, "bench_bpe: %s\n", fsc_last_error()), 1;
        double t1 = now_s();
        if (fsc_bpe_decode(b, ids, n, back, 3 * len, &got) != FSC_OK) return fprintf(stderr, "bench_bpe: %s\n", fsc_last_error()), 1;
        double t2 = now_s();
        enc[r] = (double)len / 1e6 / (t1 - t0), dec[r] = (double)len / 1e6 / (t2 - t1);
    }
    printf("RESULT fsc_bpe file %s bytes %zu tokens %zu encode_MBps %.2f decode_MBps %.1f rounds %d\n", path, len, n,
           median(enc, rounds), median(dec, rounds), rounds);
    fsc_bpe_free(b);
    free(text), free(back), free(ids);
    return got == len ? 0 : 1;
}
