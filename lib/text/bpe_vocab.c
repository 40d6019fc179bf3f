/* The GPT-2 tokenizer's vocabulary (bpe.h): a tiktoken ranks file, plain or gzip, read into one buffer of
 * token bytes by rank and a hash table from bytes to rank, and the pre-tokenization pattern compiled.
 * Every allocation is bounded by the input: the inflated text by its own size (at most 64 MiB), the tables
 * by its number of lines.
 * Not here: encoding and decoding (bpe.c). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#include "bpe_impl.h"

#define MAX_TEXT BPE_MAX_FILE        /* a vocabulary file inflates to at most this */
#define MAX_TOKEN 256                /* bytes of one token */
#define NSPECIAL_MAX 256              /* special tokens after the ranks */
#define SPECIAL_BYTES (NSPECIAL_MAX * 40) /* their bytes, at most */

/* The name of special token i after the ranks into buf (64 bytes); its length, 0 when there is no token i.
 * GPT-2: <|endoftext|>. Llama 3: Meta's 256 (tokenizer.py of llama3). */
static size_t special_name(int pattern, int i, char *buf) {
    static const char *const llama3[10] = {"<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                                           "<|reserved_special_token_1|>", "<|reserved_special_token_2|>",
                                           "<|reserved_special_token_3|>", "<|start_header_id|>", "<|end_header_id|>",
                                           "<|reserved_special_token_4|>", "<|eot_id|>"};
    if (pattern != BPE_PATTERN_LLAMA3) return i == 0 ? (size_t)snprintf(buf, 64, "<|endoftext|>") : 0;
    if (i < 10) return (size_t)snprintf(buf, 64, "%s", llama3[i]);
    return i < NSPECIAL_MAX ? (size_t)snprintf(buf, 64, "<|reserved_special_token_%d|>", i - 5) : 0;
}

/* GPT-2's pattern with \s spelled as the Unicode White_Space characters, as tiktoken's regex reads \s (PCRE2
 * 10.42's \s also matches U+180E, White_Space before Unicode 6.3) */
#define WS "\\t-\\r \\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}"
/* \p{L} and \p{N} as tiktoken 0.14 reads them (Unicode 16.0): PCRE2 10.42 knows Unicode 14.0, where the letters
 * and digits that Unicode 15.0 and 16.0 added (CJK extension H, Kawi, Garay, ...) are unassigned, so that
 * "\u1c89's" would cut as "\u1c89'" and "s" (tiktoken: "\u1c89" and "'s"). Those code points, found by asking
 * tiktoken's pattern of every code point, are added to the classes (a newer PCRE2 already has them). */
#define L_NEW                                                                                                          \
    "\\x{1c89}-\\x{1c8a}\\x{a7cb}-\\x{a7cd}\\x{a7da}-\\x{a7dc}\\x{105c0}-\\x{105f3}\\x{10d4a}-\\x{10d65}"              \
    "\\x{10d6f}-\\x{10d85}\\x{10ec2}-\\x{10ec4}\\x{1123f}-\\x{11240}\\x{11380}-\\x{11389}\\x{1138b}\\x{1138e}"          \
    "\\x{11390}-\\x{113b5}\\x{113b7}\\x{113d1}\\x{113d3}\\x{11bc0}-\\x{11be0}\\x{11f02}\\x{11f04}-\\x{11f10}"           \
    "\\x{11f12}-\\x{11f33}\\x{1342f}\\x{13441}-\\x{13446}\\x{13460}-\\x{143fa}\\x{16100}-\\x{1611d}"                   \
    "\\x{16d40}-\\x{16d6c}\\x{18cff}\\x{1b132}\\x{1b155}\\x{1df25}-\\x{1df2a}\\x{1e030}-\\x{1e06d}"                    \
    "\\x{1e4d0}-\\x{1e4eb}\\x{1e5d0}-\\x{1e5ed}\\x{1e5f0}\\x{2b739}\\x{2ebf0}-\\x{2ee5d}\\x{31350}-\\x{323af}"
#define N_NEW                                                                                                          \
    "\\x{10d40}-\\x{10d49}\\x{116d0}-\\x{116e3}\\x{11bf0}-\\x{11bf9}\\x{11f50}-\\x{11f59}\\x{16130}-\\x{16139}"        \
    "\\x{16d70}-\\x{16d79}\\x{1ccf0}-\\x{1ccf9}\\x{1d2c0}-\\x{1d2d3}\\x{1e4f0}-\\x{1e4f9}\\x{1e5f1}-\\x{1e5fa}"
#define CLASS_L "[\\p{L}" L_NEW "]"
#define CLASS_N "[\\p{N}" N_NEW "]"
#define CLASS_LN "\\p{L}\\p{N}" L_NEW N_NEW
static const char PATTERN_GPT2[] = "'s|'t|'re|'ve|'m|'ll|'d| ?" CLASS_L "+| ?" CLASS_N "+| ?[^" WS CLASS_LN "]+|["
                                   WS "]+(?![^" WS "])|[" WS "]+";
/* Llama 3's (tiktoken's cl100k_base pattern), \s, \p{L} and \p{N} spelled the same way:
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 */
static const char PATTERN_LLAMA3[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n" CLASS_LN "]?" CLASS_L "+|" CLASS_N
                                     "{1,3}| ?[^" WS CLASS_LN "]+[\\r\\n]*|[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS
                                     "])|[" WS "]+";
#undef CLASS_L
#undef CLASS_N
#undef CLASS_LN

uint64_t bpe_hash(const uint8_t *p, size_t len) {
    uint64_t h = BPE_FNV_BASIS; /* FNV-1a */
    for (size_t i = 0; i < len; i++) h = bpe_fnv_step(h, p[i]);
    return bpe_fnv_final(h);
}

uint32_t bpe_id(const fsc_bpe *b, const uint8_t *p, size_t len) {
    size_t mask = b->nslots - 1;
    for (size_t i = bpe_hash(p, len) & mask;; i = (i + 1) & mask) {
        uint32_t r = b->slots[i];
        if (r == BPE_NONE) return BPE_NONE;
        if (b->off[r + 1] - b->off[r] == len && memcmp(b->bytes + b->off[r], p, len) == 0) return r;
    }
}

/* Inflate a gzip image into *text (a buffer grown as the output needs, never past MAX_TEXT) */
fsc_status bpe_inflate(const char *name, const uint8_t *buf, size_t len, uint8_t **text, size_t *tlen) {
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) return fsc_error(FSC_ERR_NOMEM, "%s: cannot start zlib", name);
    size_t cap = 1 << 16, got = 0;
    uint8_t *out = malloc(cap);
    fsc_status s = out ? FSC_OK : fsc_error(FSC_ERR_NOMEM, "%s: out of memory", name);
    z.next_in = (Bytef *)buf;
    int rc = Z_OK;
    while (s == FSC_OK && rc != Z_STREAM_END) {
        if (got == cap) {
            uint8_t *bigger = cap < MAX_TEXT ? realloc(out, cap * 2) : NULL;
            if (!bigger) {
                s = cap < MAX_TEXT ? fsc_error(FSC_ERR_NOMEM, "%s: out of memory", name)
                                   : fsc_error(FSC_ERR_FORMAT, "%s: inflates to more than %zu MiB: not a vocabulary",
                                               name, MAX_TEXT >> 20);
                break;
            }
            out = bigger, cap *= 2;
        }
        size_t in_left = len - (size_t)((const uint8_t *)z.next_in - buf);
        z.avail_in = in_left > UINT32_MAX ? UINT32_MAX : (uInt)in_left;
        z.next_out = out + got, z.avail_out = (uInt)(cap - got);
        rc = inflate(&z, Z_NO_FLUSH);
        got = cap - z.avail_out;
        if (rc == Z_BUF_ERROR && in_left == 0) rc = Z_DATA_ERROR, z.msg = (char *)"the file ends early";
        if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR)
            s = fsc_error(FSC_ERR_FORMAT, "%s: damaged gzip data (%s)", name, z.msg ? z.msg : "zlib error");
    }
    if (s == FSC_OK && (size_t)((const uint8_t *)z.next_in - buf) != len)
        s = fsc_error(FSC_ERR_FORMAT, "%s: %zu bytes after the end of the gzip data", name,
                      len - (size_t)((const uint8_t *)z.next_in - buf));
    inflateEnd(&z);
    if (s != FSC_OK) return free(out), s;
    *text = out, *tlen = got;
    return FSC_OK;
}

static int b64_value(uint8_t c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* Standard base64 with padding (len a multiple of 4) into out; the bytes decoded, or -1 */
static long b64_decode(const uint8_t *p, size_t len, uint8_t *out) {
    if (len == 0 || len % 4) return -1;
    size_t pad = p[len - 1] == '=' ? (p[len - 2] == '=' ? 2 : 1) : 0;
    size_t n = 0;
    for (size_t i = 0; i < len; i += 4) {
        uint32_t v = 0;
        for (size_t k = 0; k < 4; k++) {
            int d = i + k >= len - pad ? 0 : b64_value(p[i + k]);
            if (d < 0) return -1;
            v = v << 6 | (uint32_t)d;
        }
        out[n++] = (uint8_t)(v >> 16), out[n++] = (uint8_t)(v >> 8), out[n++] = (uint8_t)v;
    }
    return (long)(n - pad);
}

/* One line "BASE64 RANK": the token's bytes into tok (*tlen) and its rank; 0, or -1 with the message set */
static int parse_line(const char *name, size_t lineno, const uint8_t *p, size_t len, uint8_t *tok, size_t *tlen,
                      uint32_t *rank) {
    const uint8_t *sp = memchr(p, ' ', len);
    if (!sp) return fsc_error(FSC_ERR_FORMAT, "%s: line %zu: expected \"BASE64 RANK\"", name, lineno), -1;
    size_t blen = (size_t)(sp - p);
    long n = blen <= (MAX_TOKEN + 2) / 3 * 4 ? b64_decode(p, blen, tok) : -1;
    if (n <= 0 || n > MAX_TOKEN)
        return fsc_error(FSC_ERR_FORMAT, "%s: line %zu: the token is not base64 of 1 to %d bytes", name, lineno,
                         MAX_TOKEN),
               -1;
    uint64_t r = 0;
    size_t digits = len - blen - 1;
    for (size_t i = blen + 1; i < len; i++)
        r = p[i] >= '0' && p[i] <= '9' && r <= UINT32_MAX ? r * 10 + (uint64_t)(p[i] - '0') : UINT64_MAX;
    if (digits == 0 || r == UINT64_MAX)
        return fsc_error(FSC_ERR_FORMAT, "%s: line %zu: the rank is not a number", name, lineno), -1;
    *tlen = (size_t)n, *rank = r > UINT32_MAX ? BPE_NONE : (uint32_t)r;
    return 0;
}

/* The tables from the file's text: count the lines, size everything by them, then fill and check */
static fsc_status parse_text(const char *name, const uint8_t *t, size_t len, fsc_bpe *b, int pattern) {
    size_t bom = bpe_bom(t, len); /* (lines count on from it) */
    t += bom, len -= bom;
    size_t lines = 0; /* not empty */
    for (size_t i = 0; i < len; i++) lines += t[i] != '\n' && (i + 1 == len || t[i + 1] == '\n');
    if (lines > (1u << 22)) return fsc_error(FSC_ERR_FORMAT, "%s: %zu lines: more tokens than 2^22", name, lines);
    uint32_t *len_of = calloc(lines + 1, sizeof *len_of);
    b->off = calloc(lines + 1 + NSPECIAL_MAX, sizeof *b->off);
    b->bytes = malloc(len / 4 * 3 + SPECIAL_BYTES);
    for (b->nslots = 512; b->nslots < 2 * (lines + 1);) b->nslots *= 2;
    b->slots = malloc(b->nslots * sizeof *b->slots);
    uint8_t (*tok)[MAX_TOKEN + 2] = malloc(sizeof *tok);
    fsc_status s =
        len_of && b->off && b->bytes && b->slots && tok ? FSC_OK : fsc_error(FSC_ERR_NOMEM, "%s: out of memory", name);
    /* pass 1: each rank's length (a rank at most once, each below the number of tokens) */
    uint32_t n = 0;
    for (size_t at = 0, lineno = 1; s == FSC_OK && at < len; lineno++) {
        const uint8_t *nl = memchr(t + at, '\n', len - at);
        size_t ll = nl ? (size_t)(nl - (t + at)) : len - at, tl;
        const size_t bl = ll > 0 && t[at + ll - 1] == '\r' ? ll - 1 : ll; /* CRLF ends, as tiktoken's loader takes */
        uint32_t r;
        if (bl > 0 && parse_line(name, lineno, t + at, bl, *tok, &tl, &r) != 0) s = FSC_ERR_FORMAT;
        else if (bl > 0 && r >= lines) s = fsc_error(FSC_ERR_FORMAT, "%s: line %zu: rank %u, but the file has %zu "
                                                     "tokens: ranks must be 0 .. tokens-1", name, lineno, r, lines);
        else if (bl > 0 && len_of[r])
            s = fsc_error(FSC_ERR_FORMAT, "%s: line %zu: rank %u a second time", name, lineno, r);
        else if (bl > 0) len_of[r] = (uint32_t)tl, n++;
        at += ll + 1;
    }
    for (uint32_t r = 0; s == FSC_OK && r < n; r++)
        if (!len_of[r])
            s = fsc_error(FSC_ERR_FORMAT, "%s: no token has rank %u (%u tokens): ranks must be 0 .. %u", name, r, n,
                          n - 1);
    if (s == FSC_OK && n < 256)
        s = fsc_error(FSC_ERR_FORMAT, "%s: %u tokens: every one of the 256 bytes must be a token", name, n);
    for (uint32_t r = 0; s == FSC_OK && r < n; r++) b->off[r + 1] = b->off[r] + len_of[r];
    /* pass 2: the bytes by rank, then the hash table (a token twice is refused) */
    for (size_t at = 0; s == FSC_OK && at < len;) {
        const uint8_t *nl = memchr(t + at, '\n', len - at);
        size_t ll = nl ? (size_t)(nl - (t + at)) : len - at, tl;
        const size_t bl = ll > 0 && t[at + ll - 1] == '\r' ? ll - 1 : ll;
        uint32_t r;
        if (bl > 0 && parse_line(name, 0, t + at, bl, *tok, &tl, &r) == 0) memcpy(b->bytes + b->off[r], *tok, tl);
        at += ll + 1;
    }
    b->n = n, b->eot = -1;
    char sp[64];
    for (size_t sl; s == FSC_OK && (sl = special_name(pattern, (int)(b->n - n), sp)) > 0; b->n++) {
        if (b->n - n == (pattern == BPE_PATTERN_LLAMA3 ? 1 : 0))
            b->eot = (int32_t)b->n; /* <|endoftext|>, <|end_of_text|> */
        memcpy(b->bytes + b->off[b->n], sp, sl);
        b->off[b->n + 1] = b->off[b->n] + (uint32_t)sl;
    }
    if (s == FSC_OK) {
        memset(b->slots, 0xff, b->nslots * sizeof *b->slots);
    }
    for (uint32_t r = 0; s == FSC_OK && r < n; r++) {
        const uint8_t *p = b->bytes + b->off[r];
        size_t tl = b->off[r + 1] - b->off[r];
        if (bpe_id(b, p, tl) != BPE_NONE) {
            s = fsc_error(FSC_ERR_FORMAT, "%s: ranks %u and %u are the same token", name, bpe_id(b, p, tl), r);
            break;
        }
        size_t i = bpe_hash(p, tl) & (b->nslots - 1);
        while (b->slots[i] != BPE_NONE) i = (i + 1) & (b->nslots - 1);
        b->slots[i] = r;
    }
    for (int c = 0; s == FSC_OK && c < 256; c++) {
        uint8_t byte = (uint8_t)c;
        if (bpe_id(b, &byte, 1) == BPE_NONE) s = fsc_error(FSC_ERR_FORMAT, "%s: the byte 0x%02x is no token: every "
                                                             "byte must be one (a byte-level vocabulary)", name, c);
    }
    free(len_of);
    free(tok);
    return s;
}

fsc_status bpe_compile_pattern(fsc_bpe *b, int pattern) {
    int err;
    PCRE2_SIZE at;
    const char *text = pattern == BPE_PATTERN_LLAMA3 ? PATTERN_LLAMA3 : PATTERN_GPT2;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)text, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &err, &at, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return fsc_error(FSC_ERR_INTERNAL, "the %s pattern does not compile with PCRE2 at %zu: %s",
                         pattern == BPE_PATTERN_LLAMA3 ? "Llama 3" : "GPT-2", (size_t)at, msg);
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* without JIT (an error here), PCRE2 interprets: slower, the same */
    pcre2_code_free((pcre2_code *)b->re);
    b->re = re, b->pattern = pattern;
    return FSC_OK;
}

static fsc_status load_named(fsc_bpe **out, const char *name, const uint8_t *buf, size_t len, int pattern) {
    fsc_bpe *b = calloc(1, sizeof *b);
    if (!b) return fsc_error(FSC_ERR_NOMEM, "%s: out of memory", name);
    uint8_t *text = NULL;
    size_t tlen = len;
    fsc_status s = FSC_OK;
    if (len >= 2 && buf[0] == 0x1f && buf[1] == 0x8b) s = bpe_inflate(name, buf, len, &text, &tlen);
    else if (len > MAX_TEXT)
        s = fsc_error(FSC_ERR_FORMAT, "%s: %zu bytes: more than a vocabulary's %zu MiB", name, len, MAX_TEXT >> 20);
    if (s == FSC_OK) s = parse_text(name, text ? text : buf, tlen, b, pattern);
    free(text);
    if (s == FSC_OK) s = bpe_compile_pattern(b, pattern);
    if (s != FSC_OK) return fsc_bpe_free(b), s;
    *out = b;
    return FSC_OK;
}

fsc_status fsc_bpe_load_memory(fsc_bpe **out, const void *buf, size_t len) {
    FSC_CHECK_ARG(out);
    *out = NULL;
    FSC_CHECK_BUF(buf, len);
    return load_named(out, "memory", buf, len, BPE_PATTERN_GPT2);
}

fsc_status bpe_read_file(const char *path, uint8_t **out, size_t *outlen) {
    *out = NULL, *outlen = 0;
    /* opened without waiting: a FIFO nobody writes to reads as empty instead of hanging the open; a pipe with a
     * writer already open (a shell's <(...)) reads as before, blocking again once open; close-on-exec, as every
     * file of the library: a child the host program starts meanwhile does not hold it */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC), fl = fd >= 0 ? fcntl(fd, F_GETFL) : -1;
    FILE *f = fl >= 0 && fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) == 0 ? fdopen(fd, "rb") : NULL;
    if (!f) {
        fsc_status e = fsc_error(FSC_ERR_IO, "%s: cannot open the vocabulary: %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        return e;
    }
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0;
    fsc_status s = FSC_OK;
    while (s == FSC_OK) { /* read as it comes (a pipe has no size), never more than MAX_TEXT + 1 bytes */
        if (len == cap) {
            if (cap > MAX_TEXT) {
                s = fsc_error(FSC_ERR_FORMAT, "%s: more than %zu MiB: not a vocabulary", path, MAX_TEXT >> 20);
                break;
            }
            size_t want = cap ? 2 * cap : 1 << 16;
            if (want > MAX_TEXT + 1) want = MAX_TEXT + 1;
            uint8_t *bigger = realloc(buf, want);
            if (!bigger) {
                s = fsc_error(FSC_ERR_NOMEM, "%s: out of memory", path);
                break;
            }
            buf = bigger, cap = want;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0 && ferror(f))
            s = fsc_error(FSC_ERR_IO, "%s: cannot read the vocabulary: %s", path, strerror(errno));
        if (got == 0) break;
    }
    fclose(f);
    if (s != FSC_OK) return free(buf), s;
    *out = buf, *outlen = len;
    return FSC_OK;
}

fsc_status fsc_bpe_load(fsc_bpe **out, const char *path) {
    FSC_CHECK_ARG(out);
    *out = NULL;
    FSC_CHECK_ARG(path);
    uint8_t *buf;
    size_t len;
    fsc_status s = bpe_read_file(path, &buf, &len);
    if (s == FSC_OK) s = load_named(out, path, buf, len, BPE_PATTERN_GPT2);
    free(buf);
    return s;
}

fsc_status bpe_load_tiktoken(fsc_bpe **out, const char *path, const uint8_t *buf, size_t len, int pattern) {
    return load_named(out, path, buf, len, pattern);
}

fsc_status bpe_default_path(char *path, size_t cap) {
    const char *here = "examples/data/" FSC_BPE_GPT2_FILE;
    if (access(here, R_OK) == 0) return snprintf(path, cap, "%s", here), FSC_OK;
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    char *slash = n > 0 ? (exe[n] = '\0', strrchr(exe, '/')) : NULL;
    if (slash) {
        *slash = '\0';
        const char *where[] = {"../share/fsc", "../examples/data", "../../examples/data"};
        for (int i = 0; i < 3; i++) {
            int w = snprintf(path, cap, "%s/%s/%s", exe, where[i], FSC_BPE_GPT2_FILE);
            if (w > 0 && (size_t)w < cap && access(path, R_OK) == 0) return FSC_OK;
        }
    }
    /* beside the file holding this code: PREFIX/lib/libfsc.so's PREFIX/share/fsc, for a program of one's own
     * outside PREFIX/bin (linked with libfsc.a, the file is the program again) */
    Dl_info info;
    char lib[PATH_MAX + 1];
    char *lslash = NULL;
    if (dladdr((void *)bpe_default_path, &info) && info.dli_fname && realpath(info.dli_fname, lib) &&
        (lslash = strrchr(lib, '/'))) {
        *lslash = '\0';
        int w = snprintf(path, cap, "%s/../share/fsc/%s", lib, FSC_BPE_GPT2_FILE);
        if (w > 0 && (size_t)w < cap && access(path, R_OK) == 0) return FSC_OK;
    }
    return fsc_error(FSC_ERR_IO,
                     "the GPT-2 vocabulary %s is neither in %s nor beside the program (%.200s/../share/fsc, "
                     "../examples/data or ../../examples/data) nor beside the library (%.200s/../share/fsc): give its "
                     "path", FSC_BPE_GPT2_FILE, "examples/data", slash ? exe : "?", lslash ? lib : "?");
}

fsc_status fsc_bpe_load_default(fsc_bpe **out) {
    FSC_CHECK_ARG(out);
    *out = NULL;
    char path[4200];
    FSC_TRY(bpe_default_path(path, sizeof path));
    return fsc_bpe_load(out, path);
}

void fsc_bpe_free(fsc_bpe *b) {
    if (!b) return;
    pcre2_code_free((pcre2_code *)b->re);
    bpe_spm_free(b->spm);
    free(b->off);
    free(b->bytes);
    free(b->slots);
    free(b->prio);
    free(b);
}

size_t fsc_bpe_vocab(const fsc_bpe *b) { return b ? (size_t)b->n : 0; }

int32_t fsc_bpe_eot(const fsc_bpe *b) { return b ? b->eot : -1; }

const uint8_t *fsc_bpe_token(const fsc_bpe *b, int32_t id, size_t *len) {
    if (len) *len = 0;
    if (!b || !len || id < 0 || (uint32_t)id >= b->n) return NULL;
    *len = b->off[id + 1] - b->off[id];
    return b->bytes + b->off[id];
}
