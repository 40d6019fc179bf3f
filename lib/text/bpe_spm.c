/* Sentencepiece's BPE models (bpe.h: Llama 1 and 2's tokenizer.model): the ModelProto read from its protobuf
 * wire format by hand, and sentencepiece's encoding and decoding of such a model.
 * Read: pieces (ModelProto field 1: piece 1, score 2, type 3), trainer_spec (2: model_type 3, byte_fallback 35,
 * treat_whitespace_as_suffix 24, bos_piece 46, eos_piece 47, unk_surface 44), normalizer_spec (3: name 1,
 * precompiled_charsmap 2, add_dummy_prefix 3, remove_extra_whitespaces 4, escape_whitespaces 5) and
 * denormalizer_spec (5, its charsmap); self_test_data (4) and other fields are skipped by their wire type.
 * Refused: a unigram (or word, char) model, a normalizer with rules (a precompiled charsmap), a denormalizer,
 * whitespace as a suffix, UNUSED pieces, an empty piece, a piece twice, a piece not valid UTF-8 or over 256
 * bytes, more than 2^22 pieces, a score not finite, no UNKNOWN piece, bad wire data.
 * Encoding (sentencepiece's Normalizer::Normalize with no rules, then bpe_model.cc's Encode, then the
 * processor's byte fallback): spaces to U+2581, a dummy U+2581 first when add_dummy_prefix, runs of spaces
 * squeezed and the ends trimmed when remove_extra_whitespaces, each byte that begins no valid UTF-8 character
 * to U+FFFD; the text cut into characters, a user-defined piece (longest first) kept whole; then repeatedly the
 * adjacent pair whose joined bytes are a piece of the highest score is joined (leftmost on ties), by a heap;
 * each final part is its piece, else unknown: its bytes as <0xNN> pieces with byte_fallback, else the unk id;
 * a run of unknown parts is one unk id (without byte fallback).
 * Decoding: control pieces to nothing, unk to the unk surface (" \u2047 "), U+2581 to a space, runs of byte
 * pieces to their bytes (each byte that begins no valid character to U+FFFD), the first piece's U+2581 dropped
 * when the model adds a dummy prefix or trims (with trimming, each piece's first U+2581 while the text is empty).
 * Every allocation is bounded by the input: the file by 64 MiB, the tables by its number of pieces. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bpe_impl.h"

#define MAX_PIECES ((size_t)1 << 22)
#define MAX_PIECE 256 /* bytes of one piece */
#define MAX_SURFACE 64 /* bytes of the unk surface */

enum { T_NORMAL = 1, T_UNKNOWN = 2, T_CONTROL = 3, T_USER = 4, T_UNUSED = 5, T_BYTE = 6 };

struct bpe_spm {
    uint32_t n;
    uint32_t *off;   /* (n + 1): piece id is raw[off[id] .. off[id+1]) as the model writes it (U+2581 for space) */
    uint8_t *raw;
    float *score;    /* (n) */
    uint8_t *type;   /* (n) */
    uint32_t *slots; /* open addressing over every piece's raw bytes; BPE_NONE empty */
    size_t nslots;
    int32_t unk;             /* the UNKNOWN piece */
    int32_t byte_id[256];    /* <0xNN>, or unk */
    int dummy, squeeze, escape, fallback;
    size_t user_max;         /* bytes of the longest user-defined piece; 0: none */
    uint8_t user_first[256]; /* 1: a user-defined piece begins with this byte */
    uint8_t user_len[MAX_PIECE + 1]; /* 1: a user-defined piece has this many bytes */
    int newline_letter;      /* some piece holds a newline before an ASCII letter: not encoded in parts */
    int newline_alone;       /* no piece of several bytes holds a newline: lines merge apart */
    uint8_t surface[MAX_SURFACE];
    size_t surface_len;
};

/* ---- the protobuf wire format ---- */

typedef struct {
    const uint8_t *p, *end;
} pb;

/* A varint into *v; 0, or -1 when it runs past the end or over 10 bytes */
static int pb_varint(pb *r, uint64_t *v) {
    uint64_t x = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (r->p == r->end) return -1;
        uint8_t c = *r->p++;
        x |= (uint64_t)(c & 0x7f) << (shift < 64 ? shift : 63);
        if (!(c & 0x80)) return *v = x, 0;
    }
    return -1;
}

/* The next field: its number, wire type and, for a length-delimited one, its bytes (sub); a varint's value
 * (val) or a fixed32's bits; fixed64 skipped. 1 a field, 0 at the end, -1 bad data (what says why). */
static int pb_field(pb *r, uint32_t *field, int *wire, uint64_t *val, pb *sub, const char **what) {
    if (r->p == r->end) return 0;
    uint64_t key;
    if (pb_varint(r, &key) != 0) return *what = "a field's key runs past the end", -1;
    *field = (uint32_t)(key >> 3), *wire = (int)(key & 7);
    if (key >> 3 == 0 || key >> 3 > 0x1fffffff) return *what = "a field number 0 or too large", -1;
    switch (*wire) {
    case 0:
        if (pb_varint(r, val) != 0) return *what = "a varint runs past the end", -1;
        return 1;
    case 1:
        if (r->end - r->p < 8) return *what = "a fixed64 runs past the end", -1;
        r->p += 8;
        return 1;
    case 2: {
        uint64_t len;
        if (pb_varint(r, &len) != 0 || len > (uint64_t)(r->end - r->p))
            return *what = "a length-delimited field runs past the end", -1;
        sub->p = r->p, sub->end = r->p + len, r->p += len;
        return 1;
    }
    case 5: {
        if (r->end - r->p < 4) return *what = "a fixed32 runs past the end", -1;
        uint32_t x = (uint32_t)r->p[0] | (uint32_t)r->p[1] << 8 | (uint32_t)r->p[2] << 16 | (uint32_t)r->p[3] << 24;
        r->p += 4, *val = x;
        return 1;
    }
    default:
        return *what = "a group or unknown wire type (not a sentencepiece model)", -1;
    }
}

/* ---- loading ---- */

typedef struct {
    int model_type;        /* 1 unigram (the default), 2 BPE, 3 word, 4 char */
    int fallback, suffix;
    pb bos, eos, surface;  /* the pieces' names (defaults when p is NULL) */
    int has_norm;
    pb norm_name, charsmap, denorm_charsmap;
    int dummy, squeeze, escape;
} spm_spec;

static fsc_status bad(const char *name, const char *where, const char *what) {
    return fsc_error(FSC_ERR_FORMAT, "%s: %s: %s", name, where, what);
}

static fsc_status read_trainer(const char *name, pb r, spm_spec *sp) {
    uint32_t f;
    int w, rc;
    uint64_t v = 0;
    pb sub = {0};
    const char *what;
    while ((rc = pb_field(&r, &f, &w, &v, &sub, &what)) > 0) {
        if (f == 3 && w == 0) sp->model_type = (int)v;
        else if (f == 35 && w == 0) sp->fallback = v != 0;
        else if (f == 24 && w == 0) sp->suffix = v != 0;
        else if (f == 46 && w == 2) sp->bos = sub;
        else if (f == 47 && w == 2) sp->eos = sub;
        else if (f == 44 && w == 2) sp->surface = sub;
    }
    return rc < 0 ? bad(name, "trainer_spec", what) : FSC_OK;
}

static fsc_status read_normalizer(const char *name, pb r, spm_spec *sp, int denorm) {
    uint32_t f;
    int w, rc;
    uint64_t v = 0;
    pb sub = {0};
    const char *what;
    while ((rc = pb_field(&r, &f, &w, &v, &sub, &what)) > 0) {
        if (denorm) {
            if (f == 2 && w == 2) sp->denorm_charsmap = sub;
            continue;
        }
        if (f == 1 && w == 2) sp->norm_name = sub;
        else if (f == 2 && w == 2) sp->charsmap = sub;
        else if (f == 3 && w == 0) sp->dummy = v != 0;
        else if (f == 4 && w == 0) sp->squeeze = v != 0;
        else if (f == 5 && w == 0) sp->escape = v != 0;
    }
    return rc < 0 ? bad(name, denorm ? "denormalizer_spec" : "normalizer_spec", what) : FSC_OK;
}

/* One SentencePiece message: its piece, score and type */
static fsc_status read_piece(const char *name, size_t k, pb r, pb *piece, float *score, int *type) {
    uint32_t f;
    int w, rc;
    uint64_t v = 0;
    pb sub = {0};
    const char *what;
    char where[48];
    snprintf(where, sizeof where, "piece %zu", k);
    piece->p = piece->end = NULL, *score = 0, *type = T_NORMAL;
    while ((rc = pb_field(&r, &f, &w, &v, &sub, &what)) > 0) {
        if (f == 1 && w == 2) *piece = sub;
        else if (f == 2 && w == 5) {
            uint32_t bits = (uint32_t)v;
            memcpy(score, &bits, sizeof *score);
        } else if (f == 3 && w == 0) *type = v >= 1 && v <= 6 ? (int)v : 0;
    }
    if (rc < 0) return bad(name, where, what);
    if (!*type) return bad(name, where, "a type that is none of NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE");
    if (!isfinite(*score)) return bad(name, where, "its score is not a finite number");
    size_t len = piece->p ? (size_t)(piece->end - piece->p) : 0;
    if (len == 0) return bad(name, where, "an empty piece");
    if (len > MAX_PIECE) return fsc_error(FSC_ERR_FORMAT, "%s: %s: more than %d bytes", name, where, MAX_PIECE);
    for (size_t at = 0, c; at < len; at += c)
        if ((c = bpe_utf8_char(piece->p + at, len - at)) == 0) return bad(name, where, "not valid UTF-8");
    if (*type == T_UNUSED)
        return fsc_error(FSC_ERR_FORMAT, "%s: %s \"%.*s\" is UNUSED: fsc does not read models with unused pieces", name,
                         where, (int)len, (const char *)piece->p);
    return FSC_OK;
}

/* The piece of the len bytes at p whose bpe_hash is h, or BPE_NONE */
static uint32_t spm_find_hashed(const bpe_spm *m, uint64_t h, const uint8_t *p, size_t len) {
    size_t mask = m->nslots - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        uint32_t r = m->slots[i];
        if (r == BPE_NONE) return BPE_NONE;
        if (m->off[r + 1] - m->off[r] == len && memcmp(m->raw + m->off[r], p, len) == 0) return r;
    }
}

static uint32_t spm_find(const bpe_spm *m, const uint8_t *p, size_t len) {
    return spm_find_hashed(m, bpe_hash(p, len), p, len);
}

/* <0xNN>: the byte, or -1 */
static int byte_of_piece(const uint8_t *p, size_t len) {
    static const char hex[] = "0123456789ABCDEF";
    if (len != 6 || memcmp(p, "<0x", 3) != 0 || p[5] != '>') return -1;
    const char *a = memchr(hex, p[3], 16), *b = memchr(hex, p[4], 16);
    return a && b && p[3] && p[4] ? (int)((a - hex) * 16 + (b - hex)) : -1;
}

/* A piece's text as decode gives it alone (U+2581 a space, a byte piece its byte, control nothing, unk the
 * surface) into out; its length */
static size_t surface_of(const bpe_spm *m, uint32_t id, uint8_t *out) {
    const uint8_t *p = m->raw + m->off[id];
    size_t len = m->off[id + 1] - m->off[id], n = 0;
    if (m->type[id] == T_CONTROL) return 0;
    if (m->type[id] == T_UNKNOWN) return memcpy(out, m->surface, m->surface_len), m->surface_len;
    if (m->type[id] == T_BYTE) return out[0] = (uint8_t)byte_of_piece(p, len), 1;
    for (size_t i = 0; i < len;)
        if (len - i >= 3 && !memcmp(p + i, "\xe2\x96\x81", 3)) out[n++] = ' ', i += 3;
        else out[n++] = p[i++];
    return n;
}

static fsc_status build(const char *name, pb r, size_t count, const spm_spec *sp, fsc_bpe *b) {
    bpe_spm *m = calloc(1, sizeof *m);
    if (!m) return fsc_error(FSC_ERR_NOMEM, "%s: out of memory", name);
    b->spm = m;
    size_t total = (size_t)(r.end - r.p);
    m->off = calloc(count + 1, sizeof *m->off);
    m->raw = malloc(total + 1);
    m->score = malloc((count + 1) * sizeof *m->score);
    m->type = malloc(count + 1);
    for (m->nslots = 512; m->nslots < 2 * count;) m->nslots *= 2;
    m->slots = malloc(m->nslots * sizeof *m->slots);
    b->off = calloc(count + 1, sizeof *b->off);
    b->bytes = malloc(total + MAX_SURFACE + 1);
    if (!m->off || !m->raw || !m->score || !m->type || !m->slots || !b->off || !b->bytes)
        return fsc_error(FSC_ERR_NOMEM, "%s: out of memory", name);
    memset(m->slots, 0xff, m->nslots * sizeof *m->slots);
    m->unk = -1, m->newline_alone = 1;
    uint32_t f;
    int w, rc;
    uint64_t v = 0;
    pb sub = {0};
    const char *what;
    uint32_t n = 0;
    while ((rc = pb_field(&r, &f, &w, &v, &sub, &what)) > 0) {
        if (f != 1 || w != 2) continue;
        pb piece;
        float score;
        int type;
        fsc_status s = read_piece(name, n, sub, &piece, &score, &type);
        if (s != FSC_OK) return s;
        size_t len = (size_t)(piece.end - piece.p);
        uint32_t other = n ? spm_find(m, piece.p, len) : BPE_NONE;
        if (other != BPE_NONE)
            return fsc_error(FSC_ERR_FORMAT, "%s: pieces %u and %u are both \"%.*s\"", name, other, n, (int)len, (const char *)piece.p);
        memcpy(m->raw + m->off[n], piece.p, len);
        m->off[n + 1] = m->off[n] + (uint32_t)len;
        m->score[n] = score, m->type[n] = (uint8_t)type;
        size_t i = bpe_hash(piece.p, len) & (m->nslots - 1);
        while (m->slots[i] != BPE_NONE) i = (i + 1) & (m->nslots - 1);
        m->slots[i] = n;
        if (type == T_UNKNOWN) {
            if (m->unk >= 0) return fsc_error(FSC_ERR_FORMAT, "%s: pieces %d and %u are both UNKNOWN", name, m->unk, n);
            m->unk = (int32_t)n;
        }
        if (type == T_BYTE && (!sp->fallback || byte_of_piece(piece.p, len) < 0))
            return fsc_error(FSC_ERR_FORMAT, "%s: piece %u \"%.*s\" is a BYTE piece%s", name, n, (int)len, (const char *)piece.p,
                             sp->fallback ? " but not <0xNN>" : " but byte_fallback is off");
        if (type == T_USER) {
            m->user_max = len > m->user_max ? len : m->user_max;
            m->user_first[piece.p[0]] = 1, m->user_len[len] = 1;
        }
        if (len > 1 && memchr(piece.p, '\n', len) && (type == T_NORMAL || type == T_USER)) m->newline_alone = 0;
        for (size_t k = 0; k + 1 < len; k++) {
            uint8_t c = piece.p[k + 1] | 0x20;
            if (piece.p[k] == '\n' && c >= 'a' && c <= 'z' && (type == T_NORMAL || type == T_USER)) m->newline_letter = 1;
        }
        n++;
    }
    if (rc < 0) return bad(name, "the model", what);
    m->n = n;
    if (m->unk < 0) return fsc_error(FSC_ERR_FORMAT, "%s: no UNKNOWN piece (<unk>): sentencepiece needs one", name);
    m->dummy = sp->dummy, m->squeeze = sp->squeeze, m->escape = sp->escape, m->fallback = sp->fallback;
    const uint8_t *surf = sp->surface.p ? sp->surface.p : (const uint8_t *)" \xe2\x81\x87 ";
    m->surface_len = sp->surface.p ? (size_t)(sp->surface.end - sp->surface.p) : 5;
    if (m->surface_len > MAX_SURFACE) return fsc_error(FSC_ERR_FORMAT, "%s: unk_surface over %d bytes", name, MAX_SURFACE);
    memcpy(m->surface, surf, m->surface_len);
    for (int c = 0; c < 256; c++) {
        char hexname[8];
        snprintf(hexname, sizeof hexname, "<0x%02X>", c);
        uint32_t id = spm_find(m, (const uint8_t *)hexname, 6);
        m->byte_id[c] = id != BPE_NONE ? (int32_t)id : m->unk;
    }
    /* the handle's tokens: each piece's text alone; bos (a control piece) as the token a document starts with */
    b->n = n;
    for (uint32_t id = 0; id < n; id++) {
        size_t len = surface_of(m, id, b->bytes + b->off[id]);
        b->off[id + 1] = b->off[id] + (uint32_t)len;
    }
    const uint8_t *bos = sp->bos.p ? sp->bos.p : (const uint8_t *)"<s>";
    size_t bos_len = sp->bos.p ? (size_t)(sp->bos.end - sp->bos.p) : 3;
    uint32_t bid = spm_find(m, bos, bos_len);
    b->eot = bid != BPE_NONE && m->type[bid] == T_CONTROL ? (int32_t)bid : -1;
    return FSC_OK;
}

static fsc_status load_spm(fsc_bpe **out, const char *name, const uint8_t *buf, size_t len) {
    if (len > BPE_MAX_FILE) return fsc_error(FSC_ERR_FORMAT, "%s: %zu bytes: more than a tokenizer's %zu MiB", name, len, BPE_MAX_FILE >> 20);
    spm_spec sp;
    memset(&sp, 0, sizeof sp);
    sp.model_type = 1, sp.dummy = sp.squeeze = sp.escape = 1;
    pb r = {buf, buf + len};
    uint32_t f;
    int w, rc;
    uint64_t v = 0;
    pb sub = {0};
    const char *what;
    size_t count = 0;
    fsc_status s = FSC_OK;
    while (s == FSC_OK && (rc = pb_field(&r, &f, &w, &v, &sub, &what)) > 0) {
        if (f == 1 && w == 2) count++;
        else if (f == 2 && w == 2) s = read_trainer(name, sub, &sp);
        else if (f == 3 && w == 2) s = read_normalizer(name, sub, &sp, 0), sp.has_norm = 1;
        else if (f == 5 && w == 2) s = read_normalizer(name, sub, &sp, 1);
        else if (f <= 5) /* 4 of wire type 2: self_test_data, read past */
            s = f == 4 && w == 2 ? FSC_OK
                                 : bad(name, "the model", "a field of the wrong wire type (not a sentencepiece model)");
    }
    if (s != FSC_OK) return s;
    if (rc < 0) return bad(name, "the model", what);
    if (count == 0) return fsc_error(FSC_ERR_FORMAT, "%s: no pieces: not a sentencepiece model", name);
    if (count > MAX_PIECES) return fsc_error(FSC_ERR_FORMAT, "%s: %zu pieces: more than 2^22", name, count);
    static const char *const kinds[] = {"?", "unigram", "BPE", "word", "char"};
    if (sp.model_type != 2)
        return fsc_error(FSC_ERR_FORMAT, "%s: a %s model: fsc reads sentencepiece's BPE models (Llama 1 and 2's) only", name,
                         sp.model_type >= 1 && sp.model_type <= 4 ? kinds[sp.model_type] : "unknown kind of");
    if (sp.charsmap.p && sp.charsmap.end > sp.charsmap.p)
        return fsc_error(FSC_ERR_FORMAT, "%s: normalizer \"%.*s\" has rules (a precompiled charsmap): fsc applies none; a "
                         "model with normalization_rule_name=identity (Llama's) is read", name,
                         sp.norm_name.p ? (int)(sp.norm_name.end - sp.norm_name.p < 40 ? sp.norm_name.end - sp.norm_name.p : 40) : 4,
                         sp.norm_name.p ? (const char *)sp.norm_name.p : "none");
    if (sp.denorm_charsmap.p && sp.denorm_charsmap.end > sp.denorm_charsmap.p)
        return fsc_error(FSC_ERR_FORMAT, "%s: a denormalizer with rules: fsc applies none", name);
    if (sp.suffix) return fsc_error(FSC_ERR_FORMAT, "%s: treat_whitespace_as_suffix is set: fsc puts whitespace first, as Llama", name);
    fsc_bpe *b = calloc(1, sizeof *b);
    if (!b) return fsc_error(FSC_ERR_NOMEM, "%s: out of memory", name);
    s = build(name, (pb){buf, buf + len}, count, &sp, b);
    if (s != FSC_OK) return fsc_bpe_free(b), s;
    *out = b;
    return FSC_OK;
}

int bpe_is_spm(const uint8_t *buf, size_t len) {
    pb r = {buf, buf + len};
    uint32_t f;
    int w;
    uint64_t v = 0;
    pb sub, inner;
    const char *what;
    /* a first field 1 (a SentencePiece) that is fields to its end, one of them its field 1 (the piece) (a text
     * file that begins with a newline is none: its bytes are no such fields) */
    if (len < 4 || buf[0] != 0x0a || pb_field(&r, &f, &w, &v, &sub, &what) != 1) return 0;
    int rc, piece = 0;
    while ((rc = pb_field(&sub, &f, &w, &v, &inner, &what)) > 0) piece |= f == 1 && w == 2;
    return rc == 0 && piece;
}

fsc_status bpe_load_spm(fsc_bpe **out, const char *name, const uint8_t *buf, size_t len) {
    return load_spm(out, name, buf, len);
}

fsc_status fsc_bpe_load_spm_memory(fsc_bpe **out, const void *buf, size_t len) {
    FSC_CHECK_ARG(out);
    *out = NULL;
    FSC_CHECK_BUF(buf, len);
    return load_spm(out, "tokenizer.model", buf, len);
}

fsc_status fsc_bpe_load_spm(fsc_bpe **out, const char *path) {
    FSC_CHECK_ARG(out);
    *out = NULL;
    FSC_CHECK_ARG(path);
    uint8_t *buf;
    size_t len;
    fsc_status s = bpe_read_file(path, &buf, &len);
    if (s == FSC_OK) s = load_spm(out, path, buf, len), free(buf);
    return s;
}

void bpe_spm_free(bpe_spm *m) {
    if (!m) return;
    free(m->off), free(m->raw), free(m->score), free(m->type), free(m->slots);
    free(m);
}

/* ---- encoding ---- */

int32_t fsc_bpe_unk(const fsc_bpe *b) { return b && b->spm && !b->spm->fallback ? b->spm->unk : -1; }

size_t bpe_spm_max_ids(const fsc_bpe *b, size_t len) {
    /* a byte gives at most one character of at most 3 bytes (a space U+2581, a stray byte U+FFFD), each byte
     * at most one id; the dummy prefix one character more */
    (void)b;
    return len > (SIZE_MAX - 3) / 3 ? SIZE_MAX : 3 * len + 3;
}

/* Identity normalization (Normalizer::Normalize): into out (room for 3 len + 3 bytes); its length */
static size_t normalize(const bpe_spm *m, const uint8_t *p, size_t len, int more, uint8_t *out) {
    static const uint8_t ws[3] = {0xe2, 0x96, 0x81}, bad_char[3] = {0xef, 0xbf, 0xbd};
    size_t at = 0, n = 0;
    if (m->squeeze)
        while (at < len && p[at] == ' ') at++;
    if (at == len) return 0;
    if (m->dummy && !more) {
        if (m->escape) memcpy(out, ws, 3), n = 3;
        else out[n++] = ' ';
    }
    int prev_space = m->squeeze;
    while (at < len) {
        size_t c = bpe_utf8_char(p + at, len - at);
        if (c == 0) { /* a byte that begins no valid character: U+FFFD, one byte consumed */
            memcpy(out + n, bad_char, 3), n += 3, at++;
            prev_space = 0;
            continue;
        }
        if (p[at] == ' ') {
            if (!prev_space) {
                if (m->escape) memcpy(out + n, ws, 3), n += 3;
                else out[n++] = ' ';
            }
            prev_space = m->squeeze;
        } else {
            memcpy(out + n, p + at, c), n += c;
            prev_space = 0;
        }
        at += c;
    }
    if (m->squeeze) {
        if (m->escape)
            while (n >= 3 && !memcmp(out + n - 3, ws, 3)) n -= 3;
        else
            while (n >= 1 && out[n - 1] == ' ') n--;
    }
    return n;
}

typedef struct {
    uint32_t start, len;
    int32_t prev, next;
    int freeze;
} sym;

typedef struct {
    float score;
    uint32_t left, right, size;
} pair;

/* a before b: the higher score, then the lower left */
static int pair_before(const pair *a, const pair *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static void push(pair *h, size_t *nh, pair x) {
    size_t i = (*nh)++;
    for (; i > 0 && pair_before(&x, &h[(i - 1) / 2]); i = (i - 1) / 2) h[i] = h[(i - 1) / 2];
    h[i] = x;
}

static pair pop(pair *h, size_t *nh) {
    pair top = h[0], last = h[--*nh];
    size_t i = 0, n = *nh;
    for (size_t c = 1; c < n; i = c, c = 2 * c + 1) {
        if (c + 1 < n && pair_before(&h[c + 1], &h[c])) c++;
        if (!pair_before(&h[c], &last)) break;
        h[i] = h[c];
    }
    h[i] = last;
    return top;
}

static void maybe_add(const bpe_spm *m, const uint8_t *t, const sym *s, int32_t left, int32_t right, pair *h, size_t *nh) {
    if (left < 0 || right < 0 || s[left].freeze || s[right].freeze) return;
    uint32_t size = s[left].len + s[right].len;
    uint32_t id = spm_find(m, t + s[left].start, size);
    if (id == BPE_NONE || (m->type[id] != T_NORMAL && m->type[id] != T_USER)) return;
    push(h, nh, (pair){m->score[id], (uint32_t)left, (uint32_t)right, size});
}

/* The length of the user-defined piece at t (longest), 0 for none: the prefixes' hashes in one pass, looked up at
 * the lengths some user-defined piece has (O(user_max) a position, as sentencepiece's trie; hashing each prefix
 * anew took O(user_max^2): 40 s for 1 MiB of "a" under a piece of 256 bytes) */
static size_t user_match(const bpe_spm *m, const uint8_t *t, size_t len) {
    if (!m->user_first[t[0]]) return 0;
    size_t most = m->user_max < len ? m->user_max : len, best = 0;
    uint64_t h = BPE_FNV_BASIS;
    for (size_t l = 1; l <= most; l++) {
        h = bpe_fnv_step(h, t[l - 1]);
        if (!m->user_len[l]) continue;
        uint32_t id = spm_find_hashed(m, bpe_fnv_final(h), t, l);
        if (id != BPE_NONE && m->type[id] == T_USER) best = l;
    }
    return best;
}

/* An id after the n before it; a run of unknown parts is one unk id, as sentencepiece's processor joins them (its
 * decode gives one unk surface for the run). Not with byte fallback: there each byte is its own piece, unk where
 * the model has none (sentencepiece refuses such a model; fsc reads it) */
static void emit(const bpe_spm *m, int32_t *ids, size_t *n, int32_t id) {
    if (id != m->unk || *n == 0 || ids[*n - 1] != m->unk) ids[(*n)++] = id;
}

fsc_status bpe_spm_encode(const fsc_bpe *b, const uint8_t *text, size_t len, int32_t *ids, size_t *n, int more) {
    const bpe_spm *m = b->spm;
    *n = 0;
    if (more && m->newline_letter)
        return fsc_error(FSC_ERR_INVALID, "fsc_bpe_encode_more: a piece of this model holds a newline before a letter, "
                         "so a text cut at fsc_bpe_split_point does not encode in parts: encode it whole");
    if (len > (UINT32_MAX - 3) / 3)
        return fsc_error(FSC_ERR_INVALID, "fsc_bpe_encode: %zu bytes at once: give less than 1 GiB to a sentencepiece model", len);
    uint8_t *t = malloc(3 * len + 3);
    sym *s = malloc((len + 2) * sizeof *s); /* a byte gives at most one character, the dummy prefix one more */
    pair *h = malloc(3 * (len + 2) * sizeof *h);
    if (!t || !s || !h) return free(t), free(s), free(h), fsc_error(FSC_ERR_NOMEM, "fsc_bpe_encode: out of memory for %zu bytes", len);
    size_t tl = normalize(m, text, len, more, t), ns = 0, nh = 0;
    /* characters, a user-defined piece whole; at most len + 1 of them (the dummy prefix) */
    for (size_t at = 0; at < tl; ns++) {
        size_t c = m->user_max ? user_match(m, t + at, tl - at) : 0;
        s[ns].freeze = c > 0;
        if (!c) c = bpe_utf8_char(t + at, tl - at);
        s[ns].start = (uint32_t)at, s[ns].len = (uint32_t)c;
        s[ns].prev = (int32_t)ns - 1, s[ns].next = at + c < tl ? (int32_t)ns + 1 : -1;
        at += c;
    }
    /* When no piece joins a newline to anything, no pair crosses one and each line merges alone, in the order it
     * would among the others (a smaller heap); else the whole text is one line */
    for (size_t a = 0, e; a < ns; a = e) {
        for (e = a + 1; e < ns && !(m->newline_alone && t[s[e].start] == '\n' && s[e].len == 1); e++) {}
        if (e < ns) e++; /* the line with its newline */
        for (size_t i = a + 1; i < e; i++) maybe_add(m, t, s, (int32_t)i - 1, (int32_t)i, h, &nh);
        while (nh) {
            pair top = pop(h, &nh);
            sym *l = &s[top.left], *r = &s[top.right];
            if (l->len == 0 || r->len == 0 || l->len + r->len != top.size) continue;
            l->len += r->len;
            l->next = r->next;
            if (r->next >= 0) s[r->next].prev = (int32_t)top.left;
            r->len = 0;
            maybe_add(m, t, s, l->prev, (int32_t)top.left, h, &nh);
            maybe_add(m, t, s, (int32_t)top.left, l->next, h, &nh);
        }
    }
    for (int32_t i = ns ? 0 : -1; i >= 0; i = s[i].next) {
        uint32_t id = spm_find(m, t + s[i].start, s[i].len);
        if (id == BPE_NONE) id = (uint32_t)m->unk;
        if ((int32_t)id == m->unk && m->fallback)
            for (uint32_t k = 0; k < s[i].len; k++) ids[(*n)++] = m->byte_id[t[s[i].start + k]]; /* each its own */
        else emit(m, ids, n, (int32_t)id);
    }
    free(t), free(s), free(h);
    return FSC_OK;
}

/* ---- decoding ---- */

/* A run of bytes from byte pieces into out: each valid character as it is, each other byte U+FFFD */
static size_t flush_bytes(const uint8_t *p, size_t len, uint8_t *out) {
    size_t n = 0;
    for (size_t at = 0, c; at < len; at += c ? c : 1) {
        c = bpe_utf8_char(p + at, len - at);
        if (c) memcpy(out + n, p + at, c), n += c;
        else memcpy(out + n, "\xef\xbf\xbd", 3), n += 3;
    }
    return n;
}

fsc_status bpe_spm_decode(const fsc_bpe *b, const int32_t *ids, size_t n, void *out, size_t cap, size_t *len, int more) {
    const bpe_spm *m = b->spm;
    size_t most = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || (uint32_t)ids[i] >= m->n)
            return *len = 0, fsc_error(FSC_ERR_INVALID, "fsc_bpe_decode: id %zu is %d: not in the vocabulary "
                                       "(0 .. %u)", i, (int)ids[i], m->n - 1);
        uint32_t id = (uint32_t)ids[i];
        most += m->type[id] == T_BYTE ? 3 : m->type[id] == T_UNKNOWN ? m->surface_len : m->off[id + 1] - m->off[id];
    }
    uint8_t *text = malloc(most + 1), *run = malloc(n + 1);
    if (!text || !run) return free(text), free(run), *len = 0, fsc_error(FSC_ERR_NOMEM, "fsc_bpe_decode: out of memory");
    size_t tl = 0, nrun = 0;
    int bos_ws = !more, bos_seen = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t id = (uint32_t)ids[i];
        const uint8_t *p = m->raw + m->off[id];
        size_t pl = m->off[id + 1] - m->off[id];
        if (m->type[id] == T_BYTE) {
            run[nrun++] = (uint8_t)byte_of_piece(p, pl);
            continue;
        }
        tl += flush_bytes(run, nrun, text + tl), nrun = 0;
        if ((bos_seen && !m->squeeze) || tl > 0) bos_ws = 0; /* trimming drops every leading U+2581, as sentencepiece */
        bos_seen = 0;
        if (m->type[id] == T_CONTROL) continue;
        if (m->type[id] == T_UNKNOWN) {
            memcpy(text + tl, m->surface, m->surface_len), tl += m->surface_len;
            continue;
        }
        if (bos_ws && (m->dummy || m->squeeze) && pl >= 3 && !memcmp(p, "\xe2\x96\x81", 3)) p += 3, pl -= 3, bos_seen = 1;
        for (size_t k = 0; k < pl;)
            if (pl - k >= 3 && !memcmp(p + k, "\xe2\x96\x81", 3)) text[tl++] = ' ', k += 3;
            else text[tl++] = p[k++];
    }
    tl += flush_bytes(run, nrun, text + tl);
    free(run);
    *len = tl;
    if (tl > cap) return free(text), fsc_error(FSC_ERR_INVALID, "fsc_bpe_decode: the text needs %zu bytes, the buffer has %zu", tl, cap);
    if (tl) memcpy(out, text, tl);
    free(text);
    return FSC_OK;
}
