/* Hugging Face's byte-level BPE files (bpe.h): vocab.json with merges.txt, or tokenizer.json, read with cJSON
 * into the tables bpe.c encodes with, and fsc_bpe_load_file, which tells the formats apart.
 * Token strings are written in GPT-2's byte-to-character alphabet (bytes_to_unicode: the printable Latin-1
 * bytes as themselves, the other 68 bytes as U+0100..U+0143 in order); added tokens (tokenizer.json's
 * added_tokens) are their text. A token's merge rank is the index of the first merge that makes it; a token of
 * two or more bytes that no merge makes, and every added token, is never given to text (decode still knows it).
 * Every allocation is bounded by the input: ids must be 0 .. n-1 with n at most the entries, tokens 1 to 256
 * bytes. Not here: the tiktoken format (bpe_vocab.c), encoding (bpe.c). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <cjson/cJSON.h>
#include "bpe_impl.h"
#include "io/json_lock.h" /* fsc_json_lock: cJSON's parser under the library's lock */

#define MAX_TOKEN 256           /* bytes of one token */
#define MAX_IDS ((size_t)1 << 22) /* tokens of one vocabulary */
#define NCHARS 324              /* GPT-2's alphabet: U+0000 .. U+0143 */

/* Tokenizer.json's Split regex of Llama 3, as Hugging Face writes it */
static const char LLAMA3_SPLIT[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* The vocabulary as it is read: entries (id, bytes, added), then checked and turned into an fsc_bpe */
typedef struct {
    const char *name;       /* for messages: the file, or "vocab.json" / "tokenizer.json" in memory */
    int16_t byte_of[NCHARS]; /* GPT-2's character -> its byte; -1 for none */
    size_t count, cap;      /* entries */
    uint32_t *id;           /* (cap) */
    uint32_t *pos;          /* (cap + 1) entry i is pool[pos[i] .. pos[i+1]) */
    uint8_t *added;         /* (cap) 1: an added token (never given to text) */
    uint8_t *pool;
    size_t pool_len, pool_cap;
} hf_vocab;

static void alphabet(int16_t byte_of[NCHARS]) {
    for (int i = 0; i < NCHARS; i++) byte_of[i] = -1;
    int k = 0;
    for (int c = 0; c < 256; c++) {
        int printable = (c >= 33 && c <= 126) || (c >= 161 && c <= 172) || c >= 174;
        byte_of[printable ? c : 256 + k++] = (int16_t)c;
    }
}

/* The code point of the UTF-8 character at p (n bytes, from bpe_utf8_char) */
static uint32_t code_point(const uint8_t *p, size_t n) {
    uint32_t cp = n == 1 ? p[0] : n == 2 ? p[0] & 0x1fu : n == 3 ? p[0] & 0x0fu : p[0] & 0x07u;
    for (size_t i = 1; i < n; i++) cp = cp << 6 | (p[i] & 0x3fu);
    return cp;
}

/* A token string in GPT-2's alphabet to its bytes (out: MAX_TOKEN); the count, or -1 with the message set
 * (what: where the string is, for the message) */
static long unmap(const hf_vocab *v, const char *what, const uint8_t *s, size_t len, uint8_t *out) {
    size_t n = 0;
    for (size_t at = 0; at < len;) {
        size_t c = bpe_utf8_char(s + at, len - at);
        if (c == 0) return fsc_error(FSC_ERR_FORMAT, "%s: %s: not valid UTF-8", v->name, what), -1;
        uint32_t cp = code_point(s + at, c);
        if (cp >= NCHARS || v->byte_of[cp] < 0)
            return fsc_error(FSC_ERR_FORMAT, "%s: %s \"%.*s\": U+%04X is no character of GPT-2's byte-level alphabet "
                             "(not a byte-level BPE)", v->name, what, (int)(len < 60 ? len : 60), (const char *)s,
                             (unsigned)cp), -1;
        if (n == MAX_TOKEN)
            return fsc_error(FSC_ERR_FORMAT, "%s: %s \"%.60s...\": more than %d bytes", v->name, what, (const char *)s,
                             MAX_TOKEN), -1;
        out[n++] = (uint8_t)v->byte_of[cp];
        at += c;
    }
    if (n == 0) return fsc_error(FSC_ERR_FORMAT, "%s: %s: an empty token", v->name, what), -1;
    return (long)n;
}

static void vocab_free(hf_vocab *v) {
    free(v->id), free(v->pos), free(v->added), free(v->pool);
}

static fsc_status vocab_init(hf_vocab *v, const char *name, size_t cap) {
    memset(v, 0, sizeof *v);
    v->name = name;
    alphabet(v->byte_of);
    if (cap > MAX_IDS) return fsc_error(FSC_ERR_FORMAT, "%s: %zu tokens: more than 2^22", name, cap);
    v->cap = cap;
    v->id = malloc((cap + 1) * sizeof *v->id);
    v->pos = calloc(cap + 1, sizeof *v->pos);
    v->added = calloc(cap + 1, 1);
    if (!v->id || !v->pos || !v->added) return fsc_error(FSC_ERR_NOMEM, "%s: out of memory", name);
    return FSC_OK;
}

static fsc_status vocab_add(hf_vocab *v, uint32_t id, const uint8_t *bytes, size_t len, int added) {
    if (v->pool_len + len > v->pool_cap) {
        size_t cap = v->pool_cap ? v->pool_cap : 4096;
        while (cap < v->pool_len + len) cap *= 2;
        uint8_t *bigger = realloc(v->pool, cap);
        if (!bigger) return fsc_error(FSC_ERR_NOMEM, "%s: out of memory", v->name);
        v->pool = bigger, v->pool_cap = cap;
    }
    memcpy(v->pool + v->pool_len, bytes, len);
    v->pool_len += len;
    v->id[v->count] = id, v->added[v->count] = (uint8_t)added;
    v->pos[++v->count] = (uint32_t)v->pool_len;
    return FSC_OK;
}

/* An id: a whole number in 0 .. 2^22-1 */
static int get_id(const cJSON *x, uint32_t *id) {
    if (!cJSON_IsNumber(x) || !(x->valuedouble >= 0 && x->valuedouble < (double)MAX_IDS)) return -1;
    *id = (uint32_t)x->valuedouble;
    return (double)*id == x->valuedouble ? 0 : -1;
}

static void table_insert(fsc_bpe *b, uint32_t id) {
    const uint8_t *p = b->bytes + b->off[id];
    size_t i = bpe_hash(p, b->off[id + 1] - b->off[id]) & (b->nslots - 1);
    while (b->slots[i] != BPE_NONE) i = (i + 1) & (b->nslots - 1);
    b->slots[i] = id;
}

/* The entries into b: ids 0 .. n-1 each once, then the table of every token that is not added (a duplicate
 * refused), every byte a token. *is_added: (n) which ids are added tokens (the caller frees it). */
static fsc_status build(hf_vocab *v, fsc_bpe *b, uint8_t **is_added) {
    uint32_t n = 0;
    for (size_t i = 0; i < v->count; i++) n = v->id[i] + 1 > n ? v->id[i] + 1 : n;
    if (n > v->count) {
        uint32_t big = 0;
        for (size_t i = 0; i < v->count; i++) big = v->id[i] > big ? v->id[i] : big;
        return fsc_error(FSC_ERR_FORMAT, "%s: id %u, but there are %zu tokens: ids must be 0 .. n-1", v->name, big,
                         v->count);
    }
    uint32_t *at = malloc((size_t)n * sizeof *at);
    *is_added = calloc(n + 1, 1);
    b->off = calloc((size_t)n + 1, sizeof *b->off);
    b->bytes = malloc(v->pool_len + 1);
    for (b->nslots = 512; b->nslots < 2 * (size_t)n;) b->nslots *= 2;
    b->slots = malloc(b->nslots * sizeof *b->slots);
    fsc_status s = at && *is_added && b->off && b->bytes && b->slots
                       ? FSC_OK
                       : fsc_error(FSC_ERR_NOMEM, "%s: out of memory", v->name);
    if (s == FSC_OK) memset(at, 0xff, (size_t)n * sizeof *at);
    for (size_t i = 0; s == FSC_OK && i < v->count; i++) {
        if (at[v->id[i]] != BPE_NONE) {
            size_t j = at[v->id[i]];
            s = fsc_error(FSC_ERR_FORMAT, "%s: id %u twice (\"%.*s\" and \"%.*s\")", v->name, v->id[i],
                          (int)(v->pos[j + 1] - v->pos[j] < 60 ? v->pos[j + 1] - v->pos[j] : 60),
                          (const char *)v->pool + v->pos[j],
                          (int)(v->pos[i + 1] - v->pos[i] < 60 ? v->pos[i + 1] - v->pos[i] : 60),
                          (const char *)v->pool + v->pos[i]);
        }
        at[v->id[i]] = (uint32_t)i;
    }
    b->n = n;
    for (uint32_t id = 0; s == FSC_OK && id < n; id++) {
        if (at[id] == BPE_NONE) {
            s = fsc_error(FSC_ERR_FORMAT, "%s: no token has id %u (%u ids): ids must be 0 .. n-1", v->name, id, n);
            break;
        }
        size_t i = at[id], len = v->pos[i + 1] - v->pos[i];
        memcpy(b->bytes + b->off[id], v->pool + v->pos[i], len);
        b->off[id + 1] = b->off[id] + (uint32_t)len;
        (*is_added)[id] = v->added[i];
    }
    if (s == FSC_OK) memset(b->slots, 0xff, b->nslots * sizeof *b->slots);
    for (uint32_t id = 0; s == FSC_OK && id < n; id++) {
        if ((*is_added)[id]) continue;
        const uint8_t *p = b->bytes + b->off[id];
        size_t len = b->off[id + 1] - b->off[id];
        uint32_t other = bpe_id(b, p, len);
        if (other != BPE_NONE) {
            s = fsc_error(FSC_ERR_FORMAT, "%s: ids %u and %u are the same token", v->name, other, id);
            break;
        }
        table_insert(b, id);
    }
    for (int c = 0; s == FSC_OK && c < 256; c++) {
        uint8_t byte = (uint8_t)c;
        if (bpe_id(b, &byte, 1) == BPE_NONE)
            s = fsc_error(FSC_ERR_FORMAT, "%s: the byte 0x%02x is no token: every byte must be one (a byte-level BPE)",
                          v->name, c);
    }
    free(at);
    return s;
}

/* Merge number k, "a b": both parts tokens, their bytes together a token; the first merge making a token
 * gives its rank */
static fsc_status add_merge(const hf_vocab *v, fsc_bpe *b, size_t k, const char *where, const uint8_t *a, size_t alen,
                            const uint8_t *c, size_t clen) {
    uint8_t joined[2 * MAX_TOKEN];
    long na = unmap(v, where, a, alen, joined), nc = na < 0 ? -1 : unmap(v, where, c, clen, joined + na);
    if (na < 0 || nc < 0) return FSC_ERR_FORMAT;
    if (bpe_id(b, joined, (size_t)na) == BPE_NONE)
        return fsc_error(FSC_ERR_FORMAT, "%s: %s: \"%.*s\" is not in the vocabulary", v->name, where,
                         (int)(alen < 60 ? alen : 60), (const char *)a);
    if (bpe_id(b, joined + na, (size_t)nc) == BPE_NONE)
        return fsc_error(FSC_ERR_FORMAT, "%s: %s: \"%.*s\" is not in the vocabulary", v->name, where,
                         (int)(clen < 60 ? clen : 60), (const char *)c);
    uint32_t id = bpe_id(b, joined, (size_t)(na + nc));
    if (id == BPE_NONE)
        return fsc_error(FSC_ERR_FORMAT, "%s: %s: \"%.*s %.*s\" makes a token that is not in the vocabulary", v->name,
                         where, (int)(alen < 60 ? alen : 60), (const char *)a, (int)(clen < 60 ? clen : 60),
                         (const char *)c);
    if (b->prio[id] == BPE_NONE) b->prio[id] = k > UINT32_MAX - 1 ? UINT32_MAX - 1 : (uint32_t)k;
    return FSC_OK;
}

/* One merge written "a b" (exactly one space) */
static fsc_status add_merge_text(const hf_vocab *v, fsc_bpe *b, size_t k, const char *where, const uint8_t *p,
                                 size_t len) {
    const uint8_t *sp = memchr(p, ' ', len);
    if (!sp || memchr(sp + 1, ' ', len - (size_t)(sp - p) - 1) || sp == p || sp + 1 == p + len)
        return fsc_error(FSC_ERR_FORMAT, "%s: %s: expected two tokens and one space between, not \"%.*s\"", v->name,
                         where, (int)(len < 60 ? len : 60), (const char *)p);
    return add_merge(v, b, k, where, p, (size_t)(sp - p), sp + 1, len - (size_t)(sp - p) - 1);
}

/* After the merges: text can give the bytes and every token some merge makes; with ignore_merges (Hugging Face's
 * model.ignore_merges, Llama 3's) also every other token of the vocabulary, as a piece of the pre-tokenizer whole
 * (encode_piece looks a piece up whole first; merges never make such a token: its rank is none) */
static void reachable_table(fsc_bpe *b, const uint8_t *is_added, int ignore_merges) {
    memset(b->slots, 0xff, b->nslots * sizeof *b->slots);
    for (uint32_t id = 0; id < b->n; id++)
        if (!is_added[id] && (ignore_merges || b->off[id + 1] - b->off[id] == 1 || b->prio[id] != BPE_NONE))
            table_insert(b, id);
}

/* The end-of-text token: a token text never gives named <|endoftext|> (GPT-2) or <|end_of_text|> (Llama 3) */
static int32_t find_eot(const fsc_bpe *b) {
    static const char *const names[] = {"<|endoftext|>", "<|end_of_text|>"};
    for (int k = 0; k < 2; k++)
        for (uint32_t id = 0; id < b->n; id++) {
            size_t len = b->off[id + 1] - b->off[id];
            if (len == strlen(names[k]) && !memcmp(b->bytes + b->off[id], names[k], len) &&
                bpe_id(b, b->bytes + b->off[id], len) != id)
                return (int32_t)id;
        }
    return -1;
}

/* The vocabulary object ("token": id, ...) after the added tokens (an id of an added token is the added
 * token's; its vocab entry is not read) */
static fsc_status read_vocab(hf_vocab *v, const cJSON *vocab, const cJSON *added_list) {
    uint8_t tok[MAX_TOKEN];
    uint8_t *taken = NULL; /* ids the added tokens hold */
    size_t nmax = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, added_list) {
        uint32_t id;
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(x, "content");
        if (get_id(cJSON_GetObjectItemCaseSensitive(x, "id"), &id) != 0 || !cJSON_IsString(c) || !c->valuestring[0])
            return fsc_error(FSC_ERR_FORMAT,
                             "%s: added_tokens: each must have an \"id\" (0 .. 2^22-1) and a \"content\" "
                             "string",
                             v->name);
        size_t len = strlen(c->valuestring);
        if (len > MAX_TOKEN)
            return fsc_error(FSC_ERR_FORMAT, "%s: added token %u: more than %d bytes", v->name, id, MAX_TOKEN);
        fsc_status s = vocab_add(v, id, (const uint8_t *)c->valuestring, len, 1);
        if (s != FSC_OK) return s;
        nmax = id + 1 > nmax ? id + 1 : nmax;
    }
    if (nmax > v->cap)
        return fsc_error(FSC_ERR_FORMAT, "%s: added token id %zu, but there are %zu tokens: ids must be 0 .. n-1",
                         v->name, nmax - 1, v->cap);
    taken = calloc(nmax + 1, 1);
    if (!taken) return fsc_error(FSC_ERR_NOMEM, "%s: out of memory", v->name);
    for (size_t i = 0; i < v->count; i++) taken[v->id[i]] = 1;
    fsc_status s = FSC_OK;
    cJSON_ArrayForEach(x, vocab) {
        uint32_t id;
        if (get_id(x, &id) != 0) {
            s = fsc_error(FSC_ERR_FORMAT, "%s: token \"%.60s\": the id is not a whole number in 0 .. 2^22-1", v->name,
                          x->string);
            break;
        }
        if (id < nmax && taken[id]) continue;
        long n = unmap(v, "vocabulary token", (const uint8_t *)x->string, strlen(x->string), tok);
        if (n < 0) {
            s = FSC_ERR_FORMAT;
            break;
        }
        if (v->count == v->cap) {
            s = fsc_error(FSC_ERR_INTERNAL, "%s: more entries than counted", v->name);
            break;
        }
        if ((s = vocab_add(v, id, tok, (size_t)n, 0)) != FSC_OK) break;
    }
    free(taken);
    return s;
}

/* Where the JSON text holds the escape \u0000 (a backslash that is not itself escaped, then u0000), or len */
static size_t nul_escape(const uint8_t *buf, size_t len) {
    for (size_t i = 0; i < len; i++) {
        if (buf[i] != '\\') continue;
        size_t k = i;
        while (k < len && buf[k] == '\\') k++;
        if ((k - i) % 2 == 1 && len - k >= 5 && !memcmp(buf + k, "u0000", 5)) return k - 1;
        i = k - 1;
    }
    return len;
}

static fsc_status parse_json(const char *name, const uint8_t *buf, size_t len, cJSON **root) {
    const char *end = NULL;
    *root = NULL;
    if (len > BPE_MAX_FILE)
        return fsc_error(FSC_ERR_FORMAT, "%s: %zu bytes: more than a tokenizer's %zu MiB", name, len,
                         BPE_MAX_FILE >> 20);
    size_t bom = bpe_bom(buf, len); /* not JSON, but editors write it (cJSON 1.7.15 skips it too; older ones not) */
    buf += bom, len -= bom;
    /* cJSON ends a string at a NUL byte: a token holding \u0000 would be read cut short, silently another token */
    size_t nul = nul_escape(buf, len);
    if (nul < len) {
        size_t line = 1;
        for (size_t i = 0; i < nul; i++) line += buf[i] == '\n';
        return fsc_error(FSC_ERR_FORMAT, "%s: a string holds \\u0000 (line %zu, byte %zu): fsc reads no NUL byte in "
                         "a token", name, line, bom + nul);
    }
    pthread_mutex_lock(&fsc_json_lock);
    *root = cJSON_ParseWithLengthOpts((const char *)buf, len, &end, 0);
    pthread_mutex_unlock(&fsc_json_lock);
    if (*root) return FSC_OK;
    size_t at =
        end && end >= (const char *)buf && end <= (const char *)buf + len ? (size_t)(end - (const char *)buf) : 0;
    size_t line = 1;
    for (size_t i = 0; i < at; i++) line += buf[i] == '\n';
    return fsc_error(FSC_ERR_FORMAT, "%s: not valid JSON (line %zu, byte %zu)", name, line, bom + at);
}

/* The vocabulary, its added tokens and merges (text: merges.txt's lines; or a JSON array of "a b" or [a, b])
 * into a new fsc_bpe with the pattern */
static fsc_status load_parts(fsc_bpe **out, const char *name, const cJSON *vocab, const cJSON *added,
                             const uint8_t *mtext, size_t mlen, const char *mname, const cJSON *mjson, int pattern,
                             int ignore_merges) {
    if (!cJSON_IsObject(vocab))
        return fsc_error(FSC_ERR_FORMAT, "%s: the vocabulary is not a JSON object of \"token\": id", name);
    if (added && !cJSON_IsArray(added)) return fsc_error(FSC_ERR_FORMAT, "%s: added_tokens is not an array", name);
    size_t cap = (size_t)cJSON_GetArraySize(vocab) + (added ? (size_t)cJSON_GetArraySize(added) : 0);
    hf_vocab v;
    fsc_bpe *b = calloc(1, sizeof *b);
    uint8_t *is_added = NULL;
    fsc_status s =
        b ? vocab_init(&v, name, cap) : (memset(&v, 0, sizeof v), fsc_error(FSC_ERR_NOMEM, "%s: out of memory", name));
    if (s == FSC_OK) s = read_vocab(&v, vocab, added);
    if (s == FSC_OK) s = build(&v, b, &is_added);
    if (s == FSC_OK && !(b->prio = malloc((size_t)b->n * sizeof *b->prio)))
        s = fsc_error(FSC_ERR_NOMEM, "%s: out of memory", name);
    if (s == FSC_OK) memset(b->prio, 0xff, (size_t)b->n * sizeof *b->prio);
    char where[64];
    size_t k = 0;
    if (s == FSC_OK && mjson) {
        v.name = name;
        const cJSON *m;
        cJSON_ArrayForEach(m, mjson) {
            snprintf(where, sizeof where, "merge %zu", k);
            const cJSON *m0 = cJSON_GetArrayItem(m, 0), *m1 = cJSON_GetArrayItem(m, 1);
            if (cJSON_IsString(m))
                s = add_merge_text(&v, b, k, where, (const uint8_t *)m->valuestring, strlen(m->valuestring));
            else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(m0) && cJSON_IsString(m1))
                s = add_merge(&v, b, k, where, (const uint8_t *)m0->valuestring, strlen(m0->valuestring),
                              (const uint8_t *)m1->valuestring, strlen(m1->valuestring));
            else s = fsc_error(FSC_ERR_FORMAT, "%s: %s: neither \"a b\" nor [\"a\", \"b\"]", name, where);
            if (s != FSC_OK) break;
            k++;
        }
    } else if (s == FSC_OK) {
        v.name = mname;
        size_t lineno = 0;
        for (size_t at = bpe_bom(mtext, mlen); s == FSC_OK && at < mlen;) {
            const uint8_t *nl = memchr(mtext + at, '\n', mlen - at);
            size_t ll = nl ? (size_t)(nl - (mtext + at)) : mlen - at;
            lineno++;
            if (ll > 0 && mtext[at + ll - 1] == '\r') ll--;
            if (ll > 0 && !(lineno == 1 && ll >= 8 && !memcmp(mtext + at, "#version", 8))) {
                snprintf(where, sizeof where, "line %zu", lineno);
                s = add_merge_text(&v, b, k++, where, mtext + at, ll);
            }
            at += (nl ? (size_t)(nl - (mtext + at)) : mlen - at) + 1;
        }
    }
    if (s == FSC_OK) {
        reachable_table(b, is_added, ignore_merges);
        b->eot = find_eot(b);
        s = bpe_compile_pattern(b, pattern);
    }
    vocab_free(&v);
    free(is_added);
    if (s != FSC_OK) return fsc_bpe_free(b), s;
    *out = b;
    return FSC_OK;
}

/* tokenizer.json's pre-tokenizer: GPT-2's ByteLevel, or Llama 3's Split then ByteLevel; -1 with the message set */
static int byte_level(const char *name, const cJSON *p, int use_regex) {
    const cJSON *aps = cJSON_GetObjectItemCaseSensitive(p, "add_prefix_space");
    const cJSON *ur = cJSON_GetObjectItemCaseSensitive(p, "use_regex");
    if (!cJSON_IsFalse(aps))
        return fsc_error(FSC_ERR_FORMAT,
                         "%s: pre_tokenizer ByteLevel without \"add_prefix_space\": false: fsc does not add "
                         "a space before the text",
                         name),
               -1;
    if ((ur && !cJSON_IsBool(ur)) || (use_regex ? cJSON_IsFalse(ur) : !cJSON_IsFalse(ur)))
        return fsc_error(FSC_ERR_FORMAT,
                         "%s: pre_tokenizer ByteLevel with \"use_regex\" %s: fsc knows GPT-2's ByteLevel (its "
                         "regex) and Llama 3's Split then ByteLevel (no regex)",
                         name, use_regex ? "false" : "true"),
               -1;
    return 0;
}

static int pre_tokenizer(const char *name, const cJSON *p) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(p, "type");
    const char *t = cJSON_IsString(type) ? type->valuestring : "";
    if (!strcmp(t, "ByteLevel")) return byte_level(name, p, 1) == 0 ? BPE_PATTERN_GPT2 : -1;
    const cJSON *seq = cJSON_GetObjectItemCaseSensitive(p, "pretokenizers");
    if (!strcmp(t, "Sequence") && cJSON_GetArraySize(seq) == 2) {
        const cJSON *split = cJSON_GetArrayItem(seq, 0), *bl = cJSON_GetArrayItem(seq, 1);
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(split, "type");
        const cJSON *re = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(split, "pattern"), "Regex");
        const cJSON *beh = cJSON_GetObjectItemCaseSensitive(split, "behavior");
        const cJSON *bt = cJSON_GetObjectItemCaseSensitive(bl, "type");
        if (cJSON_IsString(st) && !strcmp(st->valuestring, "Split") && cJSON_IsString(re) &&
            !strcmp(re->valuestring, LLAMA3_SPLIT) && cJSON_IsString(beh) && !strcmp(beh->valuestring, "Isolated") &&
            !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(split, "invert")) && cJSON_IsString(bt) &&
            !strcmp(bt->valuestring, "ByteLevel"))
            return byte_level(name, bl, 0) == 0 ? BPE_PATTERN_LLAMA3 : -1;
    }
    return fsc_error(FSC_ERR_FORMAT,
                     "%s: pre_tokenizer \"%.40s\": fsc knows GPT-2's (ByteLevel) and Llama 3's (Split with "
                     "its regex, then ByteLevel)",
                     name, t[0] ? t : "none"),
           -1;
}

/* tokenizer.json: a BPE model without what fsc does not do (dropout, subword affixes, byte fallback, a
 * normalizer), its vocabulary, merges and added tokens; pattern -1: the file's pre-tokenizer */
static fsc_status load_tokenizer_root(fsc_bpe **out, const char *name, const cJSON *root, int pattern) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!cJSON_IsObject(model)) return fsc_error(FSC_ERR_FORMAT, "%s: no \"model\" object: not a tokenizer.json", name);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(model, "type");
    if (type && (!cJSON_IsString(type) || strcmp(type->valuestring, "BPE") != 0))
        return fsc_error(FSC_ERR_FORMAT, "%s: model.type is %s%.40s%s: fsc reads BPE models", name,
                         cJSON_IsString(type) ? "\"" : "", cJSON_IsString(type) ? type->valuestring : "not a string",
                         cJSON_IsString(type) ? "\"" : "");
    /* Hugging Face writes null for no dropout; 0 means none as well (a probability of dropping a merge) */
    const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (dropout && !cJSON_IsNull(dropout) && !(cJSON_IsNumber(dropout) && dropout->valuedouble == 0.0)) {
        if (cJSON_IsNumber(dropout))
            return fsc_error(FSC_ERR_FORMAT, "%s: model.dropout is %g: fsc's BPE has no dropout (null or 0 for none)",
                             name, dropout->valuedouble);
        return fsc_error(FSC_ERR_FORMAT, "%s: model.dropout is not a number: fsc's BPE has no dropout (null or 0 for "
                         "none)", name);
    }
    static const char *const unsupported[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(model, unsupported[i]);
        if (x && !cJSON_IsNull(x) && !(cJSON_IsString(x) && !x->valuestring[0]))
            return fsc_error(FSC_ERR_FORMAT, "%s: model.%s is set: fsc's BPE has none", name, unsupported[i]);
    }
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "byte_fallback")))
        return fsc_error(FSC_ERR_FORMAT, "%s: model.byte_fallback is true: a sentencepiece-style BPE, not byte-level (fsc "
                         "reads such a model from sentencepiece's tokenizer.model instead)", name);
    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
    if (norm && !cJSON_IsNull(norm))
        return fsc_error(FSC_ERR_FORMAT, "%s: a normalizer: fsc applies none (GPT-2's and Llama 3's have none)", name);
    if (pattern < 0 && (pattern = pre_tokenizer(name, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"))) < 0)
        return FSC_ERR_FORMAT;
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (!cJSON_IsArray(merges)) return fsc_error(FSC_ERR_FORMAT, "%s: model.merges is missing or not an array", name);
    const cJSON *ignore = cJSON_GetObjectItemCaseSensitive(model, "ignore_merges");
    if (ignore && !cJSON_IsBool(ignore) && !cJSON_IsNull(ignore))
        return fsc_error(FSC_ERR_FORMAT, "%s: model.ignore_merges is not true or false", name);
    return load_parts(out, name, cJSON_GetObjectItemCaseSensitive(model, "vocab"),
                      cJSON_GetObjectItemCaseSensitive(root, "added_tokens"), NULL, 0, NULL, merges, pattern,
                      cJSON_IsTrue(ignore));
}

fsc_status fsc_bpe_load_tokenizer_json_memory(fsc_bpe **out, const void *buf, size_t len) {
    FSC_CHECK_ARG(out);
    *out = NULL;
    FSC_CHECK_BUF(buf, len);
    cJSON *root;
    fsc_status s = parse_json("tokenizer.json", buf, len, &root);
    if (s == FSC_OK) s = load_tokenizer_root(out, "tokenizer.json", root, -1), cJSON_Delete(root);
    return s;
}

fsc_status fsc_bpe_load_hf_memory(fsc_bpe **out, const void *vocab, size_t vlen, const void *merges, size_t mlen) {
    FSC_CHECK_ARG(out);
    *out = NULL;
    FSC_CHECK_BUF(vocab, vlen);
    FSC_CHECK_BUF(merges, mlen);
    if (mlen > BPE_MAX_FILE)
        return fsc_error(FSC_ERR_FORMAT, "merges.txt: %zu bytes: more than a tokenizer's %zu MiB", mlen,
                         BPE_MAX_FILE >> 20);
    cJSON *root;
    fsc_status s = parse_json("vocab.json", vocab, vlen, &root);
    if (s == FSC_OK)
        s = load_parts(out, "vocab.json", root, NULL, merges, mlen, "merges.txt", NULL, BPE_PATTERN_GPT2, 0),
        cJSON_Delete(root);
    return s;
}

static fsc_status load_hf_paths(fsc_bpe **out, const char *vpath, const char *mpath, int pattern) {
    uint8_t *vbuf = NULL, *mbuf = NULL;
    size_t vlen, mlen;
    cJSON *root = NULL;
    fsc_status s = bpe_read_file(vpath, &vbuf, &vlen);
    if (s == FSC_OK) s = bpe_read_file(mpath, &mbuf, &mlen);
    if (s == FSC_OK) s = parse_json(vpath, vbuf, vlen, &root);
    if (s == FSC_OK) s = load_parts(out, vpath, root, NULL, mbuf, mlen, mpath, NULL, pattern, 0);
    cJSON_Delete(root);
    free(vbuf), free(mbuf);
    return s;
}

fsc_status fsc_bpe_load_hf(fsc_bpe **out, const char *vocab_json, const char *merges_txt) {
    FSC_CHECK_ARG(out);
    *out = NULL;
    FSC_CHECK_ARG(vocab_json);
    FSC_CHECK_ARG(merges_txt);
    return load_hf_paths(out, vocab_json, merges_txt, BPE_PATTERN_GPT2);
}

static fsc_status load_tokenizer_path(fsc_bpe **out, const char *path, int pattern) {
    uint8_t *buf;
    size_t len;
    cJSON *root = NULL;
    fsc_status s = bpe_read_file(path, &buf, &len);
    if (s == FSC_OK) s = parse_json(path, buf, len, &root);
    if (s == FSC_OK) s = load_tokenizer_root(out, path, root, pattern);
    cJSON_Delete(root);
    free(buf);
    return s;
}

fsc_status fsc_bpe_load_tokenizer_json(fsc_bpe **out, const char *path) {
    FSC_CHECK_ARG(out);
    *out = NULL;
    FSC_CHECK_ARG(path);
    return load_tokenizer_path(out, path, -1);
}

/* dir/name into buf (cap bytes); the directory of a file is what comes before its last slash, "." without one */
static void beside(char *buf, size_t cap, const char *path, int is_dir, const char *name) {
    const char *slash = strrchr(path, '/');
    if (is_dir) snprintf(buf, cap, "%s/%s", path, name);
    else if (slash) snprintf(buf, cap, "%.*s/%s", (int)(slash - path), path, name);
    else snprintf(buf, cap, "%s", name);
}

static int is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Why path is no file to read (is_file false): "is not there", or "is not a regular file" (a FIFO, a folder). */
static const char *not_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? "is not a regular file" : "is not there";
}

fsc_status fsc_bpe_load_file(fsc_bpe **out, const char *spec) {
    FSC_CHECK_ARG(out);
    *out = NULL;
    FSC_CHECK_ARG(spec);
    int pattern = -1;
    if (!strncmp(spec, "gpt2:", 5)) pattern = BPE_PATTERN_GPT2, spec += 5;
    else if (!strncmp(spec, "llama3:", 7)) pattern = BPE_PATTERN_LLAMA3, spec += 7;
    char def[4096]; /* (shorter than the names made beside it below) */
    if (!strcmp(spec, "gpt2") && pattern < 0) return fsc_bpe_load_default(out);
    if (!strcmp(spec, "gpt2")) { /* gpt2:gpt2, llama3:gpt2: the vocabulary fsc_bpe_load_default reads */
        FSC_TRY(bpe_default_path(def, sizeof def));
        spec = def;
    }
    struct stat st;
    if (stat(spec, &st) != 0) return fsc_error(FSC_ERR_IO, "%s: cannot open the tokenizer: %s", spec, strerror(errno));
    char a[4200], m[4200];
    fsc_status s;
    if (S_ISDIR(st.st_mode)) {
        beside(a, sizeof a, spec, 1, "tokenizer.json");
        if (is_file(a)) return load_tokenizer_path(out, a, pattern);
        beside(a, sizeof a, spec, 1, "vocab.json");
        beside(m, sizeof m, spec, 1, "merges.txt");
        if (is_file(a) && is_file(m)) return load_hf_paths(out, a, m, pattern < 0 ? BPE_PATTERN_GPT2 : pattern);
        return fsc_error(FSC_ERR_IO, "%s: a folder with neither tokenizer.json nor vocab.json and merges.txt", spec);
    }
    uint8_t *buf;
    size_t len;
    if ((s = bpe_read_file(spec, &buf, &len)) != FSC_OK) return s;
    if (bpe_is_spm(buf, len)) { /* sentencepiece's tokenizer.model (a protobuf) */
        if (pattern >= 0) s = fsc_error(FSC_ERR_INVALID, "%s: a sentencepiece model takes no gpt2: or llama3: prefix", spec);
        else s = bpe_load_spm(out, spec, buf, len);
        free(buf);
        return s;
    }
    size_t i = bpe_bom(buf, len); /* what the text begins with after a byte order mark and white space */
    while (i < len && (buf[i] == ' ' || buf[i] == '\t' || buf[i] == '\n' || buf[i] == '\r')) i++;
    if (i < len && buf[i] == '{') { /* tokenizer.json (a "model" object) or vocab.json */
        cJSON *root = NULL;
        s = parse_json(spec, buf, len, &root);
        free(buf);
        if (s == FSC_OK && cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(root, "model"))) {
            s = load_tokenizer_root(out, spec, root, pattern);
        } else if (s == FSC_OK) {
            beside(m, sizeof m, spec, 0, "merges.txt");
            uint8_t *mbuf = NULL;
            size_t mlen;
            if (!is_file(m))
                s = fsc_error(FSC_ERR_IO, "%s: a vocab.json needs merges.txt beside it, and %s %s", spec, m, not_file(m));
            else s = bpe_read_file(m, &mbuf, &mlen);
            if (s == FSC_OK)
                s = load_parts(out, spec, root, NULL, mbuf, mlen, m, NULL, pattern < 0 ? BPE_PATTERN_GPT2 : pattern, 0);
            free(mbuf);
        }
        cJSON_Delete(root);
        return s;
    }
    if (len - i >= 8 && !memcmp(buf + i, "#version", 8)) { /* merges.txt: vocab.json beside it */
        free(buf);
        beside(a, sizeof a, spec, 0, "vocab.json");
        if (!is_file(a))
            return fsc_error(FSC_ERR_IO, "%s: a merges.txt needs vocab.json beside it, and %s %s", spec, a, not_file(a));
        return load_hf_paths(out, a, spec, pattern < 0 ? BPE_PATTERN_GPT2 : pattern);
    }
    s = bpe_load_tiktoken(out, spec, buf, len, pattern < 0 ? BPE_PATTERN_GPT2 : pattern);
    free(buf);
    return s;
}
