/* The GPT-2 tokenizer's vocabulary as bpe.c and bpe_vocab.c share it, and the two merge routines (exposed for
 * tests/test_bpe.c and fuzz/fuzz_bpe.c, which check that they agree). Not installed. */
#ifndef FSC_BPE_IMPL_H
#define FSC_BPE_IMPL_H
#include <stddef.h>
#include <stdint.h>
#include "fsc/bpe.h"

#define BPE_NONE UINT32_MAX
/* A piece of at most this many bytes is merged by tiktoken's quadratic scan, a longer one with a heap */
#define BPE_SHORT_PIECE 64

struct fsc_bpe {
    uint32_t n;          /* tokens with a rank: 0 .. n-1; the end-of-text token is n */
    uint32_t *off;       /* (n + 2): token r is bytes[off[r] .. off[r+1]); the last one is "<|endoftext|>" */
    uint8_t *bytes;      /* every token's bytes, by rank */
    uint32_t *slots;     /* (nslots) open-addressing table of ranks by their bytes; BPE_NONE empty */
    size_t nslots;       /* a power of two, at least 2n */
    void *re;            /* the compiled pre-tokenization pattern (pcre2_code_8) */
};

/* The rank of the len bytes at p, or BPE_NONE when they are no token */
uint32_t bpe_rank(const fsc_bpe *b, const uint8_t *p, size_t len);

/* Scratch for merging a piece; grown as pieces need (bpe_merge_* refuse nothing but memory) */
typedef struct {
    size_t cap;     /* entries of each array */
    uint32_t *a;    /* (cap + 1) per routine: positions, ranks, links */
    uint32_t *c;
    uint32_t *d;
    uint64_t *heap;
    size_t nheap;
} bpe_scratch;

void bpe_scratch_free(bpe_scratch *s);
/* The ids of one piece (len >= 2 bytes, not itself a token) into out; returns how many, 0 when out of memory */
size_t bpe_merge_scan(const fsc_bpe *b, const uint8_t *p, size_t len, int32_t *out, bpe_scratch *s);
size_t bpe_merge_heap(const fsc_bpe *b, const uint8_t *p, size_t len, int32_t *out, bpe_scratch *s);
/* How many bytes at p begin one valid UTF-8 character (1..4), or 0 */
size_t bpe_utf8_char(const uint8_t *p, size_t len);

#endif
