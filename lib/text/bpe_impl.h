/* The GPT-2 tokenizer's vocabulary as bpe.c and bpe_vocab.c share it, and the two merge routines (exposed for
 * tests/test_bpe.c and fuzz/fuzz_bpe.c, which check that they agree). Not installed. */
#ifndef FSC_BPE_IMPL_H
#define FSC_BPE_IMPL_H
#include <stddef.h>
#include <stdint.h>
#include "fsc/bpe.h"

#define BPE_NONE UINT32_MAX
#define BPE_MAX_FILE ((size_t)64 << 20) /* a tokenizer file (inflated) has at most this many bytes */
/* A piece of at most this many bytes is merged by tiktoken's quadratic scan, a longer one with a heap */
#define BPE_SHORT_PIECE 64

struct fsc_bpe {
    uint32_t n;          /* ids 0 .. n-1 (a tiktoken file: its ranks, then the special tokens) */
    int32_t eot;         /* the end-of-text token's id, -1 when there is none */
    uint32_t *off;       /* (n + 1): token id is bytes[off[id] .. off[id+1]) */
    uint8_t *bytes;      /* every token's bytes, by id */
    uint32_t *prio;      /* NULL: a token's merge rank is its id (tiktoken); else (n) the index of the first merge
                          * that makes each token (Hugging Face's merges), BPE_NONE for a byte or special token */
    uint32_t *slots;     /* (nslots) open-addressing table of the ids text can give, by their bytes; BPE_NONE empty */
    size_t nslots;       /* a power of two, at least 2n */
    int pattern;         /* bpe_pattern: the pre-tokenization pattern */
    void *re;            /* the compiled pre-tokenization pattern (pcre2_code_8); NULL for sentencepiece */
    struct bpe_spm *spm; /* a sentencepiece model (bpe_spm.c): its pieces; off and bytes then hold each piece's
                          * text as decode gives it alone; NULL for a byte-level BPE */
};
typedef struct bpe_spm bpe_spm;

/* The pre-tokenization patterns fsc knows */
enum bpe_pattern { BPE_PATTERN_GPT2, BPE_PATTERN_LLAMA3 };

/* The id of the len bytes at p, or BPE_NONE when they are no token text can give */
uint32_t bpe_id(const fsc_bpe *b, const uint8_t *p, size_t len);
/* Their merge rank (lower merges first), or BPE_NONE */
static inline uint32_t bpe_rank(const fsc_bpe *b, const uint8_t *p, size_t len) {
    uint32_t id = bpe_id(b, p, len);
    return id == BPE_NONE || !b->prio ? id : b->prio[id];
}

/* Shared by the loaders (bpe_vocab.c): the table's hash; a file read whole (at most 64 MiB; the message names
 * it); gzip inflated (at most 64 MiB); the pattern compiled into b->re (replacing one there) */
uint64_t bpe_hash(const uint8_t *p, size_t len);
/* bpe_hash a byte at a time: h = BPE_FNV_BASIS, then h = bpe_fnv_step(h, byte) for each byte; bpe_hash is
 * bpe_fnv_final(h) (so the hashes of every prefix of a text cost one pass) */
#define BPE_FNV_BASIS 1469598103934665603ull
static inline uint64_t bpe_fnv_step(uint64_t h, uint8_t c) { return (h ^ c) * 1099511628211ull; }
static inline uint64_t bpe_fnv_final(uint64_t h) { return h ^ h >> 29; }
fsc_status bpe_read_file(const char *path, uint8_t **buf, size_t *len);
fsc_status bpe_inflate(const char *name, const uint8_t *buf, size_t len, uint8_t **text, size_t *tlen);
fsc_status bpe_compile_pattern(fsc_bpe *b, int pattern);
/* The path of GPT-2's vocabulary file as fsc_bpe_load_default finds it into path (cap bytes) */
fsc_status bpe_default_path(char *path, size_t cap);
/* A tiktoken file's bytes (plain or gzip) with the pattern's special tokens after the ranks */
fsc_status bpe_load_tiktoken(fsc_bpe **out, const char *path, const uint8_t *buf, size_t len, int pattern);

/* Sentencepiece (bpe_spm.c): whether buf looks like a ModelProto (a first piece); the loader; its free; the
 * ids len bytes may give; encode (more: no dummy prefix) and decode (more: no dummy prefix to drop), the arguments checked by the caller */
int bpe_is_spm(const uint8_t *buf, size_t len);
fsc_status bpe_load_spm(fsc_bpe **out, const char *name, const uint8_t *buf, size_t len);
void bpe_spm_free(bpe_spm *m);
size_t bpe_spm_max_ids(const fsc_bpe *b, size_t len);
fsc_status bpe_spm_encode(const fsc_bpe *b, const uint8_t *text, size_t len, int32_t *ids, size_t *n, int more);
fsc_status bpe_spm_decode(const fsc_bpe *b, const int32_t *ids, size_t n, void *out, size_t cap, size_t *len, int more);

/* Scratch for merging a piece; grown as pieces need (bpe_merge_* refuse nothing but memory) */
typedef struct {
    size_t cap;     /* entries of each array */
    uint32_t *a;    /* (cap + 1) per routine: positions, ranks, links */
    uint32_t *c;
    uint64_t *heap;
    size_t nheap;
} bpe_scratch;

void bpe_scratch_free(bpe_scratch *s);
/* The ids of one piece (len >= 2 bytes, not itself a token) into out; returns how many, 0 when out of memory */
size_t bpe_merge_scan(const fsc_bpe *b, const uint8_t *p, size_t len, int32_t *out, bpe_scratch *s);
size_t bpe_merge_heap(const fsc_bpe *b, const uint8_t *p, size_t len, int32_t *out, bpe_scratch *s);
/* How many bytes at p begin one valid UTF-8 character (1..4), or 0 */
size_t bpe_utf8_char(const uint8_t *p, size_t len);
/* 3 when the text starts with a UTF-8 byte order mark (EF BB BF, which editors write first), else 0: the
 * readers skip it */
static inline size_t bpe_bom(const uint8_t *p, size_t len) {
    return len >= 3 && p[0] == 0xef && p[1] == 0xbb && p[2] == 0xbf ? 3 : 0;
}

#endif
