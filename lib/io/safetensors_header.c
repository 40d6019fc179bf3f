/* The safetensors header parser: the JSON text between the 8-byte length and the data, read by a streaming
 * parser written for this one format instead of a general JSON tree, so that what it allocates is bounded
 * by what it reads. A JSON tree costs about 80 bytes per value, 40 times the 2 bytes of "0," (a 100 MB
 * header became 4 GB); here nothing is allocated per value, only per tensor entry (216 bytes) and metadata
 * pair, after counting them, and never more entries than the text could hold (every valid entry takes at
 * least ST_MIN_ENTRY bytes): at most about 4.5 bytes per byte of header, besides the header itself, which is
 * capped at FSC_ST_MAX_HEADER.
 *
 * The JSON is strict RFC 8259, as Hugging Face's parser reads it: UTF-8, no control characters in strings,
 * surrogate pairs whole, nesting at most ST_MAX_DEPTH, integers (dimensions, offsets) written as integers.
 * Entry fields other than dtype, shape and data_offsets are skipped; a field given twice is refused.
 *
 * Not here: the checks across entries (layout, duplicate names) and reading (safetensors.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "safetensors_impl.h"

#define ST_MAX_DEPTH 128 /* serde_json's recursion limit */
/* The shortest valid entry: "":{"dtype":"U8","shape":[],"data_offsets":[0,1]} */
#define ST_MIN_ENTRY 49

typedef struct {
    const char *what;   /* the file, for messages */
    char *s;            /* the header text; kept strings are unescaped in place (unescaping never grows) */
    size_t n, i;        /* length, position */
    const char *why;    /* the first syntax error and where */
    size_t why_at;
} jp;

static int syntax(jp *p, const char *why) {
    if (!p->why) {
        p->why = why;
        p->why_at = p->i;
    }
    return -1;
}

static int more(jp *p) { /* skip whitespace; 1 if a byte follows */
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r'))
        p->i++;
    return p->i < p->n;
}

static int expect(jp *p, char c, const char *why) {
    if (!more(p) || p->s[p->i] != c) return syntax(p, why);
    p->i++;
    return 0;
}

/* Bytes of the UTF-8 sequence at s (at most n bytes available), 0 if it is not valid UTF-8. */
static int utf8_len(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    int k;
    uint32_t cp, min;
    if (c >= 0xC2 && c <= 0xDF) k = 2, cp = c & 0x1F, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF) k = 3, cp = c & 0x0F, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4) k = 4, cp = c & 0x07, min = 0x10000;
    else return 0;
    if ((size_t)k > n) return 0;
    for (int j = 1; j < k; j++) {
        if ((s[j] & 0xC0) != 0x80) return 0;
        cp = cp << 6 | (s[j] & 0x3F);
    }
    return cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF) ? 0 : k;
}

static int hex4(const char *s, uint32_t *v) {
    *v = 0;
    for (int k = 0; k < 4; k++) {
        char c = s[k];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        *v = *v << 4 | (uint32_t)d;
    }
    return 0;
}

/* The string at p->i. With keep, it is unescaped in place (NUL-terminated; *out points at it, *len is its
 * length); without, only checked. 0 or -1 (a syntax error). */
static int lex_string(jp *p, int keep, char **out, size_t *len) {
    if (!more(p) || p->s[p->i] != '"') return syntax(p, "expected a string");
    char *o = p->s + p->i + 1;
    size_t k = 0;
    p->i++;
    for (;;) {
        if (p->i >= p->n) return syntax(p, "unterminated string");
        unsigned char c = (unsigned char)p->s[p->i];
        if (c == '"') break;
        if (c < 0x20) return syntax(p, "control character in a string");
        if (c >= 0x80) {
            int u = utf8_len((const unsigned char *)p->s + p->i, p->n - p->i);
            if (!u) return syntax(p, "invalid UTF-8 in a string");
            if (keep) memmove(o + k, p->s + p->i, (size_t)u);
            k += (size_t)u;
            p->i += (size_t)u;
            continue;
        }
        if (c != '\\') {
            if (keep) o[k] = (char)c;
            k++;
            p->i++;
            continue;
        }
        if (p->i + 1 >= p->n) return syntax(p, "unterminated string");
        char e = p->s[p->i + 1], b = 0;
        switch (e) {
        case '"': case '\\': case '/': b = e; break;
        case 'b': b = '\b'; break;
        case 'f': b = '\f'; break;
        case 'n': b = '\n'; break;
        case 'r': b = '\r'; break;
        case 't': b = '\t'; break;
        case 'u': break;
        default: return syntax(p, "invalid escape in a string");
        }
        if (e != 'u') {
            if (keep) o[k] = b;
            k++;
            p->i += 2;
            continue;
        }
        uint32_t cp, lo;
        if (p->i + 6 > p->n || hex4(p->s + p->i + 2, &cp)) return syntax(p, "invalid \\u escape");
        p->i += 6;
        if (cp >= 0xDC00 && cp <= 0xDFFF) return syntax(p, "unpaired surrogate in a \\u escape");
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (p->i + 6 > p->n || p->s[p->i] != '\\' || p->s[p->i + 1] != 'u' || hex4(p->s + p->i + 2, &lo) ||
                lo < 0xDC00 || lo > 0xDFFF)
                return syntax(p, "unpaired surrogate in a \\u escape");
            p->i += 6;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
        /* the UTF-8 form is shorter than the escape it came from: writing never overtakes reading */
        unsigned char u8[4];
        int m;
        if (cp < 0x80) u8[0] = (unsigned char)cp, m = 1;
        else if (cp < 0x800) u8[0] = (unsigned char)(0xC0 | cp >> 6), u8[1] = (unsigned char)(0x80 | (cp & 0x3F)), m = 2;
        else if (cp < 0x10000)
            u8[0] = (unsigned char)(0xE0 | cp >> 12), u8[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F)),
            u8[2] = (unsigned char)(0x80 | (cp & 0x3F)), m = 3;
        else
            u8[0] = (unsigned char)(0xF0 | cp >> 18), u8[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F)),
            u8[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F)), u8[3] = (unsigned char)(0x80 | (cp & 0x3F)), m = 4;
        if (keep) memcpy(o + k, u8, (size_t)m);
        k += (size_t)m;
    }
    p->i++; /* the closing quote, which the terminator may now overwrite */
    if (keep) {
        o[k] = 0;
        *out = o;
        *len = k;
    }
    return 0;
}

static int digits(jp *p) {
    size_t a = p->i;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    return p->i > a ? 0 : syntax(p, "expected a digit");
}

static int lex_number(jp *p) {
    if (p->i < p->n && p->s[p->i] == '-') p->i++;
    if (p->i < p->n && p->s[p->i] == '0') p->i++;
    else if (digits(p)) return -1;
    if (p->i < p->n && p->s[p->i] == '.') {
        p->i++;
        if (digits(p)) return -1;
    }
    if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
        p->i++;
        if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-')) p->i++;
        if (digits(p)) return -1;
    }
    return 0;
}

/* Check (and step over) any value; *count, if given, gets the members of an object or elements of an array. */
static int skip_value(jp *p, int depth, size_t *count) {
    if (count) *count = 0;
    if (!more(p)) return syntax(p, "expected a value");
    char c = p->s[p->i];
    if (c == '"') return lex_string(p, 0, NULL, NULL);
    if (c == '-' || (c >= '0' && c <= '9')) return lex_number(p);
    static const char *const words[] = {"true", "false", "null"};
    for (int w = 0; w < 3; w++) {
        size_t l = strlen(words[w]);
        if (p->n - p->i >= l && !memcmp(p->s + p->i, words[w], l)) {
            p->i += l;
            return 0;
        }
    }
    if (c != '{' && c != '[') return syntax(p, "expected a value");
    if (depth >= ST_MAX_DEPTH) return syntax(p, "nested too deeply");
    const char close = c == '{' ? '}' : ']';
    p->i++;
    if (more(p) && p->s[p->i] == close) {
        p->i++;
        return 0;
    }
    for (size_t k = 1;; k++) {
        if (c == '{' && (lex_string(p, 0, NULL, NULL) || expect(p, ':', "expected ':'"))) return -1;
        if (skip_value(p, depth + 1, NULL)) return -1;
        if (count) *count = k;
        if (!more(p)) return syntax(p, "unterminated object or array");
        if (p->s[p->i] == close) break;
        if (p->s[p->i] != ',') return syntax(p, c == '{' ? "expected ',' or '}'" : "expected ',' or ']'");
        p->i++;
    }
    p->i++;
    return 0;
}

/* The integer at p->i as a non-negative integer below 2^53: 0, -1 not an integer, -2 negative, -3 huge. */
static int read_u53(jp *p, uint64_t *out) {
    more(p);
    size_t a = p->i;
    if (a >= p->n || !(p->s[a] == '-' || (p->s[a] >= '0' && p->s[a] <= '9'))) return -1;
    lex_number(p); /* the text was checked before */
    if (p->s[a] == '-') return -2;
    uint64_t v = 0;
    for (size_t k = a; k < p->i; k++) {
        if (p->s[k] < '0' || p->s[k] > '9') return -1; /* a fraction or an exponent */
        if (v > MAX_JSON_INT) continue;                /* huge, but an exponent would make it no integer */
        v = v * 10 + (uint64_t)(p->s[k] - '0');
    }
    if (v > MAX_JSON_INT) return -3;
    *out = v;
    return 0;
}

static void shape_str(char *buf, size_t cap, int ndim, const int64_t *shape) {
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < ndim && k < cap; d++)
        k += (size_t)snprintf(buf + k, cap - k, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (k < cap) snprintf(buf + k, cap - k, "]");
}

/* The shape's bytes (es per element; type its name) against the span of data_offsets. */
static fsc_status check_size(const char *what, const fsc_st_entry *e, size_t es, const char *type) {
    int ovf;
    uint64_t numel = st_shape_numel(e->ndim, e->shape, &ovf);
    char s[160];
    shape_str(s, sizeof s, e->ndim, e->shape);
    if (ovf || numel > UINT64_MAX / es)
        return fsc_error(FSC_ERR_FORMAT, "%s: tensor %s has shape %s, too large to address", what, e->name, s);
    if (numel * es != e->end - e->begin)
        return fsc_error(FSC_ERR_FORMAT, "%s: tensor %s has shape %s and dtype %s (%llu bytes) but data_offsets "
                         "[%llu, %llu] span %llu bytes", what, e->name, s, type,
                         (unsigned long long)(numel * es), (unsigned long long)e->begin,
                         (unsigned long long)e->end, (unsigned long long)(e->end - e->begin));
    return FSC_OK;
}

static const char *kind_of(char c) {
    return c == '{' ? "an object" : c == '[' ? "an array" : c == '"' ? "a string" : "a number or literal";
}

/* The tensor entry whose value starts at p->i (its name already in e->name). */
static fsc_status parse_entry(jp *p, fsc_st_entry *e) {
    const char *what = p->what, *name = e->name;
    more(p);
    if (p->s[p->i] != '{') return fsc_error(FSC_ERR_FORMAT, "%s: entry %s is not a JSON object", what, name);
    /* where the value of each known field starts */
    static const char *const fields[3] = {"dtype", "shape", "data_offsets"};
    size_t at[3] = {0, 0, 0};
    p->i++;
    if (more(p) && p->s[p->i] == '}') p->i++;
    else
        for (;;) {
            char *key;
            size_t klen;
            lex_string(p, 1, &key, &klen);
            expect(p, ':', NULL);
            more(p);
            for (int f = 0; f < 3; f++) {
                if (strcmp(key, fields[f]) || klen != strlen(fields[f])) continue;
                if (at[f]) return fsc_error(FSC_ERR_FORMAT, "%s: tensor %s has field %s twice", what, name, fields[f]);
                at[f] = p->i;
            }
            skip_value(p, 2, NULL);
            more(p);
            if (p->s[p->i++] == '}') break;
        }
    const size_t end = p->i;
    if (!at[0]) return fsc_error(FSC_ERR_FORMAT, "%s: tensor %s has no dtype", what, name);
    if (!at[1]) return fsc_error(FSC_ERR_FORMAT, "%s: tensor %s has no shape", what, name);
    if (!at[2]) return fsc_error(FSC_ERR_FORMAT, "%s: tensor %s has no data_offsets", what, name);

    char *dt;
    size_t dlen, es = 0;
    p->i = at[0];
    if (p->s[p->i] != '"')
        return fsc_error(FSC_ERR_FORMAT, "%s: dtype of tensor %s is not a string but %s", what, name, kind_of(p->s[p->i]));
    lex_string(p, 1, &dt, &dlen);
    const char *other;
    FSC_TRY(st_dtype_of(what, name, dt, dlen, &e->dtype, &other, &e->unreadable, &es));
    if (!other) es = st_size(e->dtype);

    p->i = at[1];
    if (p->s[p->i] != '[') return fsc_error(FSC_ERR_FORMAT, "%s: shape of tensor %s is not an array", what, name);
    size_t nd;
    skip_value(p, 2, &nd);
    /* more than 4 dimensions: unreadable, its dimensions still checked (read_u53), its size not */
    const int wide = nd > 4;
    if (wide && !other) e->unreadable = "more than 4 dimensions";
    if (wide) e->dtype = FSC_DTYPE_COUNT;
    e->ndim = wide ? 0 : (int)nd;
    p->i = at[1] + 1;
    for (int d = 0; d < 4; d++) e->shape[d] = 0;
    for (size_t d = 0; d < nd; d++) {
        uint64_t v;
        int r = read_u53(p, &v);
        if (r == -2) return fsc_error(FSC_ERR_FORMAT, "%s: tensor %s has a negative dimension", what, name);
        if (r == -3) return fsc_error(FSC_ERR_FORMAT, "%s: tensor %s has a huge dimension (above 2^53)", what, name);
        if (r) return fsc_error(FSC_ERR_FORMAT, "%s: shape of tensor %s holds something other than an integer", what, name);
        if (!wide) e->shape[d] = (int64_t)v;
        expect(p, d + 1 < nd ? ',' : ']', NULL);
    }

    p->i = at[2];
    size_t no = 0;
    if (p->s[p->i] == '[') {
        skip_value(p, 2, &no);
        p->i = at[2] + 1;
    }
    if (no != 2)
        return fsc_error(FSC_ERR_FORMAT, "%s: data_offsets of tensor %s is not an array of two integers", what, name);
    int rb = read_u53(p, &e->begin);
    expect(p, ',', NULL);
    int re = read_u53(p, &e->end);
    if (rb || re)
        return fsc_error(FSC_ERR_FORMAT, "%s: data_offsets of tensor %s are not integers in [0, 2^53]", what, name);
    if (e->end < e->begin)
        return fsc_error(FSC_ERR_FORMAT, "%s: data_offsets [%llu, %llu] of tensor %s end before they begin", what,
                         (unsigned long long)e->begin, (unsigned long long)e->end, name);
    p->i = end;
    if (wide || (other && !es)) return FSC_OK; /* its bytes are placed by the layout's checks all the same */
    return check_size(what, e, es, other ? other : st_name(e->dtype));
}

static int cmp_meta(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The __metadata__ object at p->i: string values only, keys once; kept in one block (pointers, then text). */
static fsc_status parse_metadata(jp *p, st_header *h) {
    const char *what = p->what;
    if (h->meta) return fsc_error(FSC_ERR_FORMAT, "%s: __metadata__ appears twice", what);
    more(p);
    if (p->s[p->i] != '{') return fsc_error(FSC_ERR_FORMAT, "%s: __metadata__ is not a JSON object", what);
    const size_t start = p->i;
    size_t n;
    skip_value(p, 1, &n);
    const size_t stop = p->i, text = stop - start; /* the unescaped strings and their terminators fit in text */
    p->i = start + 1;
    h->meta = malloc(2 * n * sizeof(char *) + text + 1);
    if (!h->meta) return fsc_error(FSC_ERR_NOMEM, "%s: out of memory for __metadata__ of %zu bytes", what, text);
    char *pool = (char *)(h->meta + 2 * n);
    size_t used = 0;
    for (size_t k = 0; k < n; k++) {
        char *s[2];
        size_t len[2];
        for (int j = 0; j < 2; j++) {
            more(p);
            if (j == 1 && p->s[p->i] != '"')
                return fsc_error(FSC_ERR_FORMAT, "%s: __metadata__ value of \"%.60s\" is not a string", what, s[0]);
            lex_string(p, 1, &s[j], &len[j]);
            if (memchr(s[j], 0, len[j]))
                return fsc_error(FSC_ERR_FORMAT, "%s: __metadata__ %s \"%.60s\" holds a NUL character", what,
                                 j ? "value of" : "key", s[0]);
            memcpy(pool + used, s[j], len[j] + 1);
            h->meta[2 * k + (size_t)j] = pool + used;
            used += len[j] + 1;
            expect(p, j ? (k + 1 < n ? ',' : '}') : ':', NULL);
        }
    }
    h->n_meta = (int)n;
    qsort(h->meta, n, 2 * sizeof(char *), cmp_meta);
    for (size_t k = 1; k < n; k++)
        if (!strcmp(h->meta[2 * k - 2], h->meta[2 * k]))
            return fsc_error(FSC_ERR_FORMAT, "%s: __metadata__ key \"%.60s\" appears twice", what, h->meta[2 * k]);
    p->i = stop;
    return FSC_OK;
}

fsc_status st_parse_header(const char *what, char *hdr, size_t hlen, st_header *h) {
    memset(h, 0, sizeof *h);
    jp p = {.what = what, .s = hdr, .n = hlen};
    /* First the whole text: JSON, one object, nothing after it but whitespace; count its members. */
    size_t members = 0;
    int bad = !more(&p) ? syntax(&p, "no JSON value") : skip_value(&p, 0, &members);
    if (!bad && more(&p)) return fsc_error(FSC_ERR_FORMAT, "%s: the header has bytes after its JSON object", what);
    if (bad)
        return fsc_error(FSC_ERR_FORMAT, "%s: the header is not valid JSON (%s at byte %zu of %zu)", what, p.why,
                         p.why_at, hlen);
    p.i = 0;
    more(&p);
    if (hdr[p.i] != '{') return fsc_error(FSC_ERR_FORMAT, "%s: the header is not a JSON object", what);
    /* Then the entries, into one array of the members or of as many entries as the text can hold, whichever
     * is fewer (a header of empty members must not buy 216 bytes of entry with each 7 bytes of text). */
    const size_t cap = members < hlen / ST_MIN_ENTRY + 1 ? members : hlen / ST_MIN_ENTRY + 1;
    if (cap && !(h->e = malloc(cap * sizeof *h->e)))
        return fsc_error(FSC_ERR_NOMEM, "%s: out of memory for %zu header entries", what, cap);
    p.i++;
    for (size_t k = 0; k < members; k++) {
        char *key;
        size_t klen;
        lex_string(&p, 1, &key, &klen);
        expect(&p, ':', NULL);
        if (klen == 12 && !strcmp(key, "__metadata__")) {
            FSC_TRY(parse_metadata(&p, h));
        } else {
            if (klen >= FSC_ST_MAX_NAME)
                return fsc_error(FSC_ERR_FORMAT, "%s: tensor name of %zu bytes (\"%.40s...\") is longer than the "
                                 "limit of %d", what, klen, key, FSC_ST_MAX_NAME - 1);
            if (memchr(key, 0, klen))
                return fsc_error(FSC_ERR_FORMAT, "%s: tensor name \"%.40s...\" holds a NUL character", what, key);
            if ((size_t)h->n == cap)
                return fsc_error(FSC_ERR_INTERNAL, "%s: more valid entries than %zu bytes of header can hold", what,
                                 hlen);
            fsc_st_entry *e = &h->e[h->n];
            memset(e, 0, sizeof *e);
            memcpy(e->name, key, klen + 1);
            FSC_TRY(parse_entry(&p, e));
            h->n++;
        }
        more(&p);
        p.i++; /* ',' or '}' */
    }
    return FSC_OK;
}

void st_header_free(st_header *h) {
    free(h->e);
    free(h->meta);
    memset(h, 0, sizeof *h);
}
