/* GPT-2's byte-level BPE (bpe.h): text cut into pieces by the GPT-2 pattern (PCRE2) over each run of valid
 * UTF-8, each run of other bytes one piece; a piece that is a token is that token, another is merged as
 * tiktoken merges it: repeatedly join the adjacent pair whose bytes have the lowest rank, leftmost first,
 * until no adjacent pair is a token. Short pieces use tiktoken's scan over the parts (quadratic, fast when
 * short), long ones a heap of pairs keyed by (rank, position) with stale entries skipped: the same merges
 * in the same order, in O(n log n) for a run of a million spaces.
 * Not here: reading the vocabulary (bpe_vocab.c). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>
#include "bpe_impl.h"

size_t bpe_utf8_char(const uint8_t *p, size_t len) {
    uint8_t c = p[0];
    if (c < 0x80) return 1;
    size_t n = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    if (n == 0 || len < n) return 0;
    /* the second byte's range excludes overlong forms, surrogates and code points past U+10FFFF */
    uint8_t lo = c == 0xe0 ? 0xa0 : c == 0xf0 ? 0x90 : 0x80;
    uint8_t hi = c == 0xed ? 0x9f : c == 0xf4 ? 0x8f : 0xbf;
    if (p[1] < lo || p[1] > hi) return 0;
    for (size_t i = 2; i < n; i++)
        if ((p[i] & 0xc0) != 0x80) return 0;
    return n;
}

void bpe_scratch_free(bpe_scratch *s) {
    free(s->a);
    free(s->c);
    free(s->heap);
    memset(s, 0, sizeof *s);
}

static int scratch_fit(bpe_scratch *s, size_t len) {
    if (len <= s->cap) return 0;
    bpe_scratch_free(s);
    s->a = malloc((len + 1) * sizeof *s->a);
    s->c = malloc((len + 1) * sizeof *s->c);
    s->heap = malloc(2 * (len + 1) * sizeof *s->heap);
    if (!s->a || !s->c || !s->heap) return bpe_scratch_free(s), -1;
    s->cap = len;
    return 0;
}

/* tiktoken's _byte_pair_merge: parts start at pos[0..m) (pos[m-1] == len), rank[i] the rank of the bytes
 * from part i to the end of part i+1 */
size_t bpe_merge_scan(const fsc_bpe *b, const uint8_t *p, size_t len, int32_t *out, bpe_scratch *s) {
    if (scratch_fit(s, len) != 0) return 0;
    uint32_t *pos = s->a, *rank = s->c;
    size_t m = 0;
    for (size_t i = 0; i + 1 < len; i++) pos[m] = (uint32_t)i, rank[m++] = bpe_rank(b, p + i, 2);
    pos[m] = (uint32_t)len - 1, rank[m++] = BPE_NONE;
    pos[m] = (uint32_t)len, rank[m++] = BPE_NONE;
    for (;;) {
        size_t best = SIZE_MAX;
        uint32_t min = BPE_NONE;
        for (size_t i = 0; i + 1 < m; i++)
            if (rank[i] < min) min = rank[i], best = i;
        if (best == SIZE_MAX) break;
        memmove(pos + best + 1, pos + best + 2, (m - best - 2) * sizeof *pos);
        memmove(rank + best + 1, rank + best + 2, (m - best - 2) * sizeof *rank);
        m--;
        for (size_t i = best ? best - 1 : 0; i <= best; i++)
            rank[i] = i + 2 < m ? bpe_rank(b, p + pos[i], pos[i + 2] - pos[i]) : BPE_NONE;
    }
    for (size_t i = 0; i + 1 < m; i++) out[i] = (int32_t)bpe_id(b, p + pos[i], pos[i + 1] - pos[i]);
    return m - 1;
}

static void heap_push(bpe_scratch *s, uint64_t key) {
    uint64_t *h = s->heap;
    size_t i = s->nheap++;
    for (; i > 0 && h[(i - 1) / 2] > key; i = (i - 1) / 2) h[i] = h[(i - 1) / 2];
    h[i] = key;
}

static uint64_t heap_pop(bpe_scratch *s) {
    uint64_t *h = s->heap, top = h[0], last = h[--s->nheap];
    size_t i = 0, n = s->nheap;
    for (size_t c = 1; c < n; i = c, c = 2 * c + 1) {
        if (c + 1 < n && h[c + 1] < h[c]) c++;
        if (h[c] >= last) break;
        h[i] = h[c];
    }
    h[i] = last;
    return top;
}

/* The rank of the pair that starts at part i (BPE_NONE at the end): parts are a list linked by next[] */
static uint32_t pair_rank(const fsc_bpe *b, const uint8_t *p, const uint32_t *next, uint32_t i, uint32_t len) {
    if (i >= len || next[i] >= len) return BPE_NONE;
    return bpe_rank(b, p + i, next[next[i]] - i);
}

/* The same merges with a heap: part i starts at byte i (alive while next[i] != 0), next[i] and prev[i] link
 * the parts; an entry (rank << 32 | i) is stale when part i is gone or its pair's rank is no longer rank. */
size_t bpe_merge_heap(const fsc_bpe *b, const uint8_t *p, size_t len, int32_t *out, bpe_scratch *s) {
    if (scratch_fit(s, len) != 0) return 0;
    uint32_t *next = s->a, *prev = s->c, n = (uint32_t)len;
    for (uint32_t i = 0; i <= n; i++) next[i] = i + 1, prev[i] = i ? i - 1 : BPE_NONE;
    s->nheap = 0;
    for (uint32_t i = 0; i + 1 < n; i++) {
        uint32_t r = bpe_rank(b, p + i, 2);
        if (r != BPE_NONE) heap_push(s, (uint64_t)r << 32 | i);
    }
    while (s->nheap) {
        uint64_t key = heap_pop(s);
        uint32_t i = (uint32_t)key, r = (uint32_t)(key >> 32);
        if (next[i] == 0 || pair_rank(b, p, next, i, n) != r) continue;
        uint32_t j = next[i], k = next[j]; /* join parts i and j */
        next[i] = k, next[j] = 0;
        if (k <= n) prev[k] = i;
        uint32_t rr = pair_rank(b, p, next, i, n);
        if (rr != BPE_NONE) heap_push(s, (uint64_t)rr << 32 | i);
        if (prev[i] != BPE_NONE && (rr = pair_rank(b, p, next, prev[i], n)) != BPE_NONE)
            heap_push(s, (uint64_t)rr << 32 | prev[i]);
    }
    size_t m = 0;
    for (uint32_t i = 0; i < n; i = next[i]) out[m++] = (int32_t)bpe_id(b, p + i, next[i] - i);
    return m;
}

/* One piece's ids into out (*n advanced); -1 when out of memory */
static int encode_piece(const fsc_bpe *b, const uint8_t *p, size_t len, int32_t *out, size_t *n, bpe_scratch *s) {
    uint32_t id = bpe_id(b, p, len);
    if (id != BPE_NONE) return out[(*n)++] = (int32_t)id, 0;
    size_t m = len <= BPE_SHORT_PIECE ? bpe_merge_scan(b, p, len, out + *n, s) : bpe_merge_heap(b, p, len, out + *n, s);
    *n += m;
    return m ? 0 : -1;
}

/* A run of valid UTF-8 cut by the pattern; every character is matched by some branch, so the matches tile it */
static fsc_status encode_text(const fsc_bpe *b, const uint8_t *p, size_t len, int32_t *out, size_t *n,
                              pcre2_match_data *md, pcre2_match_context *mc, bpe_scratch *s) {
    for (size_t at = 0; at < len;) {
        int rc = pcre2_match((const pcre2_code *)b->re, p, len, at, PCRE2_NO_UTF_CHECK, md, mc);
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return fsc_error(FSC_ERR_INTERNAL, "fsc_bpe_encode: the pattern failed at byte %zu: %s", at, (char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        if (ov[0] != at || ov[1] <= at)
            return fsc_error(FSC_ERR_INTERNAL, "fsc_bpe_encode: the pattern skipped or matched nothing at byte %zu", at);
        if (encode_piece(b, p + at, ov[1] - at, out, n, s) != 0)
            return fsc_error(FSC_ERR_NOMEM, "fsc_bpe_encode: out of memory for a piece of %zu bytes", (size_t)(ov[1] - at));
        at = ov[1];
    }
    return FSC_OK;
}

static fsc_status encode_bytes(const fsc_bpe *b, const void *text, size_t len, int32_t *ids, size_t *n);

fsc_status fsc_bpe_encode(const fsc_bpe *b, const void *text, size_t len, int32_t *ids, size_t *n) {
    FSC_CHECK_ARG(b);
    FSC_CHECK_BUF(text, len);
    FSC_CHECK_BUF(ids, len);
    FSC_CHECK_ARG(n);
    *n = 0;
    return b->spm ? bpe_spm_encode(b, text, len, ids, n, 0) : encode_bytes(b, text, len, ids, n);
}

fsc_status fsc_bpe_encode_more(const fsc_bpe *b, const void *text, size_t len, int32_t *ids, size_t *n) {
    FSC_CHECK_ARG(b);
    FSC_CHECK_BUF(text, len);
    FSC_CHECK_BUF(ids, len);
    FSC_CHECK_ARG(n);
    *n = 0;
    return b->spm ? bpe_spm_encode(b, text, len, ids, n, 1) : encode_bytes(b, text, len, ids, n);
}

size_t fsc_bpe_max_ids(const fsc_bpe *b, size_t len) {
    if (!b) return 0;
    return b->spm ? bpe_spm_max_ids(b, len) : len;
}

static fsc_status encode_bytes(const fsc_bpe *b, const void *text, size_t len, int32_t *ids, size_t *n) {
    if (len >= UINT32_MAX) return fsc_error(FSC_ERR_INVALID, "fsc_bpe_encode: %zu bytes at once: give less than 4 GiB "
                                            "(fsc_bpe_split_point says where to cut)", len);
    pcre2_match_data *md = pcre2_match_data_create_from_pattern((const pcre2_code *)b->re, NULL);
    /* PCRE2 stops a match after 10,000,000 steps by default, and Llama 3's \s*[\r\n]+ takes a step for each
     * character it gives back: a run of 10 M spaces would fail. The steps grow with the run (below 4 GiB). */
    pcre2_match_context *mc = pcre2_match_context_create(NULL);
    if (!md || !mc)
        return pcre2_match_data_free(md), pcre2_match_context_free(mc),
               fsc_error(FSC_ERR_NOMEM, "fsc_bpe_encode: out of memory");
    pcre2_set_match_limit(mc, UINT32_MAX);
    pcre2_set_depth_limit(mc, UINT32_MAX);
    bpe_scratch s = {0};
    const uint8_t *p = text;
    fsc_status st = FSC_OK;
    for (size_t at = 0; st == FSC_OK && at < len;) {
        size_t end = at, c;
        int valid = bpe_utf8_char(p + at, len - at) > 0;
        while (end < len && ((c = bpe_utf8_char(p + end, len - end)) > 0) == valid) end += valid ? c : 1;
        if (valid) st = encode_text(b, p + at, end - at, ids, n, md, mc, &s);
        else if (encode_piece(b, p + at, end - at, ids, n, &s) != 0)
            st = fsc_error(FSC_ERR_NOMEM, "fsc_bpe_encode: out of memory for a piece of %zu bytes", end - at);
        at = end;
    }
    bpe_scratch_free(&s);
    pcre2_match_data_free(md);
    pcre2_match_context_free(mc);
    return st;
}

static fsc_status decode_bytes(const fsc_bpe *b, const int32_t *ids, size_t n, void *out, size_t cap, size_t *len);

fsc_status fsc_bpe_decode(const fsc_bpe *b, const int32_t *ids, size_t n, void *out, size_t cap, size_t *len) {
    FSC_CHECK_ARG(b);
    FSC_CHECK_BUF(ids, n);
    FSC_CHECK_BUF(out, cap);
    FSC_CHECK_ARG(len);
    return b->spm ? bpe_spm_decode(b, ids, n, out, cap, len, 0) : decode_bytes(b, ids, n, out, cap, len);
}

fsc_status fsc_bpe_decode_more(const fsc_bpe *b, const int32_t *ids, size_t n, void *out, size_t cap, size_t *len) {
    FSC_CHECK_ARG(b);
    FSC_CHECK_BUF(ids, n);
    FSC_CHECK_BUF(out, cap);
    FSC_CHECK_ARG(len);
    return b->spm ? bpe_spm_decode(b, ids, n, out, cap, len, 1) : decode_bytes(b, ids, n, out, cap, len);
}

static fsc_status decode_bytes(const fsc_bpe *b, const int32_t *ids, size_t n, void *out, size_t cap, size_t *len) {
    size_t need = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || (uint32_t)ids[i] >= b->n)
            return *len = 0, fsc_error(FSC_ERR_INVALID, "fsc_bpe_decode: id %zu is %d: not in the vocabulary "
                                       "(0 .. %u)", i, (int)ids[i], b->n - 1);
        need += b->off[ids[i] + 1] - b->off[ids[i]];
    }
    *len = need;
    if (need > cap) return fsc_error(FSC_ERR_INVALID, "fsc_bpe_decode: the text needs %zu bytes, the buffer has %zu", need, cap);
    uint8_t *o = out;
    for (size_t i = 0; i < n; i++) {
        uint32_t l = b->off[ids[i] + 1] - b->off[ids[i]];
        memcpy(o, b->bytes + b->off[ids[i]], l);
        o += l;
    }
    return FSC_OK;
}

static int ascii_space(uint8_t c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

size_t fsc_bpe_split_point(const void *text, size_t len, size_t from) {
    const uint8_t *p = text;
    if (!p) return 0;
    for (size_t i = from < 2 ? 2 : from; i < len; i++) {
        uint8_t c = p[i] | 0x20;
        if (c >= 'a' && c <= 'z' && p[i - 1] == '\n' && p[i - 2] < 0x80 && !ascii_space(p[i - 2])) return i;
    }
    return len;
}
