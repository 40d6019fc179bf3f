/* Tests of sentencepiece BPE models in lib/text/ (bpe_spm.c, fsc/bpe.h: Llama 1 and 2's tokenizer.model).
 * Run from the repository root.
 * Oracles: sentencepiece's own ids and decoded text for 32 texts with a small BPE model trained with Llama 2's
 * settings (tests/golden/spm_bpe.model and spm_golden.h, made by tests/gen_golden_spm.py; no sentencepiece at
 * run time); small models written here byte by byte whose merges are known by hand (score order, leftmost on
 * ties, user-defined pieces whole, byte fallback or unk); encoding in parts cut at fsc_bpe_split_point equals
 * the whole; damaged and unsupported models are refused with a message naming the problem. */
#include "testutil.h"
#include <math.h>
#include <unistd.h>
#include "bpetest.h"
#include "golden/spm_golden.h"

#define MODEL "tests/golden/spm_bpe.model"

static fsc_bpe *model;

static int setup(void **state) {
    fsc_status s = fsc_bpe_load_spm(&model, MODEL);
    if (s != FSC_OK) fprintf(stderr, "cannot load %s: %s\n", MODEL, fsc_last_error());
    return s == FSC_OK ? 0 : -1;
}

static int teardown(void **state) {
    fsc_bpe_free(model);
    return 0;
}

static void check_golden(const fsc_bpe *b) {
    size_t exact = 0;
    for (size_t g = 0; g < sizeof spm_golds / sizeof spm_golds[0]; g++) {
        const spm_gold *w = &spm_golds[g];
        size_t cap = fsc_bpe_max_ids(b, w->len), n, len;
        int32_t *ids = malloc((cap + 1) * sizeof *ids);
        assert_non_null(ids);
        assert_ok(fsc_bpe_encode(b, w->text, w->len, ids, &n));
        assert_true(n <= cap);
        for (size_t i = 0; i < n && i < w->n; i++)
            if (ids[i] != w->ids[i]) fail_msg("text %zu: id %zu is %d, sentencepiece's %d", g, i, ids[i], w->ids[i]);
        if (n != w->n) fail_msg("text %zu: %zu ids, sentencepiece %zu", g, n, w->n);
        /* decode gives sentencepiece's text: the text itself unless it had stray bytes */
        fsc_bpe_decode(b, w->ids, w->n, NULL, 0, &len); /* the bytes needed (refused for a buffer too small) */
        char *back = malloc(len + 1);
        assert_ok(fsc_bpe_decode(b, w->ids, w->n, back, len, &len));
        if (len != w->dlen || memcmp(back, w->decoded, len) != 0) fail_msg("text %zu: decode differs from sentencepiece's", g);
        exact += len == w->len && memcmp(back, w->text, len) == 0;
        free(back), free(ids);
    }
    assert_int_equal(exact, sizeof spm_golds / sizeof spm_golds[0] - 3); /* all but the 2 with stray bytes and the one with U+2581 */
}

static void test_spm_golden(void **state) { check_golden(model); }

/* fsc_bpe_load_file knows the file by its contents, under any name */
static void test_spm_load_file(void **state) {
    fsc_bpe *b;
    assert_ok(fsc_bpe_load_file(&b, MODEL));
    check_golden(b);
    fsc_bpe_free(b);
    assert_err(fsc_bpe_load_file(&b, "llama3:" MODEL), FSC_ERR_INVALID, "no gpt2: or llama3: prefix");
    assert_null(b);
    /* a tokenizer.json that begins with a newline (the byte a model begins with) is still JSON */
    char path[] = "/tmp/fsc_test_spm_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(bpetest_write_tokenizer(path, 1), 0);
    static uint8_t json[8192];
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    size_t len = fread(json, 1, sizeof json, f);
    fclose(f);
    assert_true(len > 0 && len < sizeof json);
    f = fopen(path, "wb");
    assert_non_null(f);
    fputc('\n', f), fwrite(json, 1, len, f);
    assert_int_equal(fclose(f), 0);
    assert_ok(fsc_bpe_load_file(&b, path));
    assert_int_equal(fsc_bpe_vocab(b), 259);
    fsc_bpe_free(b), unlink(path);
}

static void test_spm_tokens(void **state) {
    assert_int_equal(fsc_bpe_vocab(model), SPM_VOCAB);
    assert_int_equal(fsc_bpe_eot(model), SPM_BOS);
    size_t len;
    const uint8_t *t = fsc_bpe_token(model, SPM_BOS, &len); /* a control piece: no text */
    assert_non_null(t);
    assert_int_equal(len, 0);
    t = fsc_bpe_token(model, 0, &len); /* <unk>: sentencepiece's surface */
    assert_int_equal(len, 5);
    assert_memory_equal(t, " \xe2\x81\x87 ", 5);
    int32_t ids[8];
    size_t n;
    assert_ok(fsc_bpe_encode(model, "\n", 1, ids, &n)); /* the dummy prefix, then <0x0A> */
    assert_int_equal(n, 2);
    t = fsc_bpe_token(model, ids[0], &len);
    assert_int_equal(len, 1);
    assert_int_equal(t[0], ' ');
    t = fsc_bpe_token(model, ids[1], &len);
    assert_int_equal(len, 1);
    assert_int_equal(t[0], '\n');
    assert_null(fsc_bpe_token(model, SPM_VOCAB, &len));
    /* the dummy prefix gives more ids than bytes; stray bytes three byte pieces each */
    assert_int_equal(fsc_bpe_max_ids(model, 1), 6);
    uint8_t stray[40];
    memset(stray, 0xff, sizeof stray);
    int32_t many[3 * 40 + 3];
    assert_ok(fsc_bpe_encode(model, stray, sizeof stray, many, &n));
    assert_true(n > sizeof stray && n <= fsc_bpe_max_ids(model, sizeof stray));
    assert_err(fsc_bpe_decode(model, (int32_t[]){SPM_VOCAB}, 1, NULL, 0, &n), FSC_ERR_INVALID, "not in the vocabulary");
    assert_err(fsc_bpe_decode(model, ids, 2, NULL, 0, &n), FSC_ERR_INVALID, "needs 1 bytes"); /* "\n": ▁ dropped */
}

/* The text cut at fsc_bpe_split_point, the parts after the first encoded with fsc_bpe_encode_more: the ids of
 * the whole (no dummy prefix in the middle) */
static void test_spm_parts(void **state) {
    FILE *f = fopen("docs/tokenizer.md", "rb");
    assert_non_null(f);
    static char text[1 << 16];
    size_t len = fread(text, 1, sizeof text, f);
    fclose(f);
    assert_true(len > 4096);
    int32_t *whole = malloc(fsc_bpe_max_ids(model, len) * sizeof *whole), *parts = malloc(fsc_bpe_max_ids(model, len) * sizeof *parts);
    assert_non_null(whole);
    assert_non_null(parts);
    size_t nw, np = 0, cuts = 0;
    assert_ok(fsc_bpe_encode(model, text, len, whole, &nw));
    for (size_t at = 0; at < len;) {
        size_t end = fsc_bpe_split_point(text, len, at + 700 < len ? at + 700 : len), k;
        if (at == 0) assert_ok(fsc_bpe_encode(model, text, end, parts, &k));
        else {
            assert_ok(fsc_bpe_encode_more(model, text + at, end - at, parts + np, &k));
            cuts++;
        }
        np += k, at = end;
    }
    assert_true(cuts >= 4);
    assert_int_equal(np, nw);
    assert_memory_equal(parts, whole, nw * sizeof *whole);
    free(whole), free(parts);
}

/* ---- small models written byte by byte ---- */

typedef struct {
    uint8_t b[4096];
    size_t n;
} buf;

static void put(buf *o, const void *p, size_t len) {
    assert_true(o->n + len <= sizeof o->b);
    memcpy(o->b + o->n, p, len), o->n += len;
}
static void varint(buf *o, uint64_t v) {
    for (; v >= 0x80; v >>= 7) o->b[o->n++] = (uint8_t)(v | 0x80);
    o->b[o->n++] = (uint8_t)v;
}
static void key(buf *o, unsigned field, unsigned wire) { varint(o, (uint64_t)field << 3 | wire); }
static void field_bytes(buf *o, unsigned field, const void *p, size_t len) {
    key(o, field, 2), varint(o, len), put(o, p, len);
}
static void field_int(buf *o, unsigned field, uint64_t v) { key(o, field, 0), varint(o, v); }

static void piece(buf *o, const char *text, float score, int type) {
    buf p = {.n = 0};
    field_bytes(&p, 1, text, strlen(text));
    uint32_t bits;
    memcpy(&bits, &score, 4);
    key(&p, 2, 5);
    for (int i = 0; i < 4; i++) p.b[p.n++] = (uint8_t)(bits >> (8 * i));
    if (type != 1) field_int(&p, 3, (uint64_t)type);
    field_bytes(o, 1, p.b, p.n);
}

/* trainer_spec (BPE unless model_type given, byte_fallback) and normalizer_spec (identity, dummy prefix, no
 * removal of extra whitespace) */
static void specs(buf *o, int model_type, int fallback, const char *charsmap) {
    buf t = {.n = 0}, z = {.n = 0};
    field_int(&t, 3, (uint64_t)model_type);
    if (fallback) field_int(&t, 35, 1);
    field_bytes(o, 2, t.b, t.n);
    field_bytes(&z, 1, charsmap ? "nmt_nfkc" : "identity", 8);
    if (charsmap) field_bytes(&z, 2, charsmap, strlen(charsmap));
    field_int(&z, 3, 1), field_int(&z, 4, 0);
    field_bytes(o, 3, z.b, z.n);
}

static fsc_status load(fsc_bpe **b, const buf *o) { return fsc_bpe_load_spm_memory(b, o->b, o->n); }

/* the ids of text, written "i,j,k" */
static const char *ids_of(const fsc_bpe *b, const char *text) {
    static char out[256];
    int32_t ids[64];
    size_t n, at = 0;
    assert_ok(fsc_bpe_encode(b, text, strlen(text), ids, &n));
    out[0] = '\0';
    for (size_t i = 0; i < n; i++) at += (size_t)snprintf(out + at, sizeof out - at, "%s%d", i ? "," : "", ids[i]);
    return out;
}

static void test_spm_merges(void **state) {
    /* 0 <unk>, 1 <s>, 2 ▁, 3 a, 4 b, 5 c, 6 ab, 7 bc, 8 ▁a, then what each case adds */
    for (int c = 0; c < 4; c++) {
        buf o = {.n = 0};
        piece(&o, "<unk>", 0, 2), piece(&o, "<s>", 0, 3);
        piece(&o, "\xe2\x96\x81", -1, 1), piece(&o, "a", -1, 1), piece(&o, "b", -1, 1), piece(&o, "c", -1, 1);
        piece(&o, "ab", c == 0 ? -5.0f : -3.0f, 1), piece(&o, "bc", -3.0f, 1), piece(&o, "\xe2\x96\x81" "a", -9.0f, 1);
        if (c == 2) piece(&o, "b", 0, 4); /* refused: b twice */
        if (c == 3) piece(&o, "<0xC3>", 0, 6), piece(&o, "<0xA9>", 0, 6);
        specs(&o, 2, c == 3, NULL);
        fsc_bpe *b = NULL;
        if (c == 2) {
            assert_err(load(&b, &o), FSC_ERR_FORMAT, "are both \"b\"");
            assert_null(b);
            continue;
        }
        assert_ok(load(&b, &o));
        assert_int_equal(fsc_bpe_eot(b), 1);
        /* ▁ a b c: bc (-3) beats ▁a (-9) and ab (-5), then ▁a (c 0); ab wins its tie with bc as the leftmost and
         * ▁ab is no piece (c 1, 3) */
        assert_string_equal(ids_of(b, "abc"), c == 0 ? "8,7" : "2,6,5");
        /* without the prefix: bc beats ab (c 0), ab wins the tie as leftmost (c 1) */
        int32_t ids[8];
        size_t n;
        assert_ok(fsc_bpe_encode_more(b, "abc", 3, ids, &n));
        assert_int_equal(n, 2);
        assert_int_equal(ids[0], c == 1 || c == 3 ? 6 : 3);
        assert_int_equal(ids[1], c == 1 || c == 3 ? 5 : 7);
        /* an unknown character: the unk id, or its bytes' pieces with byte fallback (a byte without one: unk) */
        assert_string_equal(ids_of(b, "\xc3\xa9"), c == 3 ? "2,9,10" : "2,0");
        assert_string_equal(ids_of(b, "x"), "2,0");
        /* a run of unknowns is one unk, as sentencepiece gives it; with fallback each byte is its own piece (unk
         * where the model has none: sentencepiece refuses such a model) */
        assert_string_equal(ids_of(b, "xyz"), c == 3 ? "2,0,0,0" : "2,0");
        assert_string_equal(ids_of(b, "xyaz"), c == 3 ? "2,0,0,3,0" : "2,0,3,0");
        assert_string_equal(ids_of(b, "x\xc3\xa9y"), c == 3 ? "2,0,9,10,0" : "2,0");
        assert_ok(fsc_bpe_encode_more(b, "ax", 2, ids, &n));
        assert_int_equal(n, 2);
        assert_int_equal(ids[1], 0);
        char out[16];
        size_t len;
        assert_ok(fsc_bpe_decode(b, (int32_t[]){1, 8, 7, 0, 2, 3}, 6, out, sizeof out, &len));
        assert_int_equal(len, 10);
        assert_memory_equal(out, "abc \xe2\x81\x87  a", 10); /* <s> nothing, the first ▁ dropped, unk's surface */
        if (c == 3) {
            assert_ok(fsc_bpe_decode(b, (int32_t[]){9, 10, 3, 9, 9}, 5, out, sizeof out, &len)); /* é, a, no character */
            assert_int_equal(len, 9);
            assert_memory_equal(out, "\xc3\xa9" "a\xef\xbf\xbd\xef\xbf\xbd", 9);
        }
        fsc_bpe_free(b);
    }
    /* a user-defined piece is kept whole and never merged with what is around it */
    buf o = {.n = 0};
    piece(&o, "<unk>", 0, 2), piece(&o, "a", -1, 1), piece(&o, "b", -1, 1), piece(&o, "ab", -2, 1);
    piece(&o, "bab", 0, 4), piece(&o, "\xe2\x96\x81", -1, 1);
    specs(&o, 2, 0, NULL);
    fsc_bpe *b;
    assert_ok(load(&b, &o));
    assert_string_equal(ids_of(b, "ababab"), "5,1,4,3"); /* ▁ a [bab] a b: bab kept whole, then a b joined */
    fsc_bpe_free(b);
    /* pieces that hold a newline: merged across lines; such a model is not encoded in parts */
    o = (buf){.n = 0};
    piece(&o, "<unk>", 0, 2), piece(&o, "\xe2\x96\x81", -1, 1), piece(&o, "a", -1, 1), piece(&o, "b", -1, 1);
    piece(&o, "\n", -1, 1), piece(&o, "a\n", -1, 1), piece(&o, "\nb", -2, 1), piece(&o, "\nbb", 0, 1);
    specs(&o, 2, 0, NULL);
    assert_ok(load(&b, &o));
    assert_string_equal(ids_of(b, "a\nb"), "1,5,3");     /* a\n (-1) before \nb (-2) */
    assert_string_equal(ids_of(b, "a\nbb"), "1,5,3,3");  /* a\n first, then a\nb is no piece */
    assert_string_equal(ids_of(b, "b\nbb"), "1,3,7");    /* \nb, then \nbb (0) */
    int32_t ids[8];
    size_t n;
    assert_err(fsc_bpe_encode_more(b, "b", 1, ids, &n), FSC_ERR_INVALID, "newline before a letter");
    fsc_bpe_free(b);
}

/* User-defined pieces of several lengths: the longest at each place is kept whole, and 512 KiB of "a" under a piece
 * of 256 bytes encode as one "a" each. (Its speed is not a test's to time: each place used to hash each of the
 * piece's 256 prefixes anew, 21.6 s of CPU for that text; one pass over the prefixes takes 0.2 s.) */
static void test_spm_user_longest(void **state) {
    (void)state;
    char big[257];
    memset(big, 'x', 256), big[0] = 'a', big[256] = '\0';
    buf o = {.n = 0};
    piece(&o, "<unk>", 0, 2), piece(&o, "\xe2\x96\x81", -1, 1), piece(&o, "a", -1, 1), piece(&o, "b", -1, 1);
    piece(&o, "c", -1, 1), piece(&o, "d", -1, 1), piece(&o, "e", -1, 1), piece(&o, "x", -1, 1);
    piece(&o, "ab", 0, 4), piece(&o, "abcd", 0, 4), piece(&o, big, 0, 4); /* 8, 9, 10 */
    specs(&o, 2, 0, NULL);
    fsc_bpe *b;
    assert_ok(load(&b, &o));
    assert_string_equal(ids_of(b, "abcabcdeab"), "1,8,4,9,6,8");
    char text[300];
    snprintf(text, sizeof text, "%sxab", big);
    assert_string_equal(ids_of(b, text), "1,10,7,8");
    text[255] = 'b'; /* one byte short of the long piece */
    assert_string_equal(ids_of(b, text + 250), "1,7,7,7,7,7,3,7,8");
    const size_t len = (size_t)512 << 10;
    char *as = malloc(len);
    int32_t *ids = malloc(fsc_bpe_max_ids(b, len) * sizeof *ids);
    assert_non_null(as), assert_non_null(ids);
    memset(as, 'a', len);
    size_t n;
    assert_ok(fsc_bpe_encode(b, as, len, ids, &n));
    assert_int_equal(n, len + 1); /* the leading U+2581, then an "a" a byte */
    for (size_t i = 1; i < n; i++)
        if (ids[i] != 2) fail_msg("byte %zu of the a's: id %d, not 2", i - 1, (int)ids[i]);
    free(as), free(ids);
    fsc_bpe_free(b);
}

/* A model that trims (remove_extra_whitespaces): decoding drops each piece's first U+2581 while the text is still
 * empty, as sentencepiece's decode does; without trimming only the first piece's (test_spm_merges) */
static void test_spm_trim_decode(void **state) {
    (void)state;
    buf o = {.n = 0}, t = {.n = 0}, z = {.n = 0};
    piece(&o, "<unk>", 0, 2), piece(&o, "<s>", 0, 3), piece(&o, "\xe2\x96\x81", -1, 1), piece(&o, "x", -1, 1);
    piece(&o, "\xe2\x96\x81x", -2, 1); /* 0 <unk>, 1 <s>, 2 ▁, 3 x, 4 ▁x */
    field_int(&t, 3, 2);
    field_bytes(&o, 2, t.b, t.n);
    field_bytes(&z, 1, "identity", 8);
    field_int(&z, 3, 1), field_int(&z, 4, 1);
    field_bytes(&o, 3, z.b, z.n);
    fsc_bpe *b = NULL;
    assert_ok(load(&b, &o));
    const struct { int32_t ids[4]; size_t n; const char *text; } cases[] = {
        { { 2, 4 }, 2, "x" }, { { 2, 2 }, 2, "" }, { { 2, 2, 4 }, 3, "x" }, { { 1, 2, 4 }, 3, "x" },
        { { 4, 2, 4 }, 3, "x  x" }, { { 3, 2, 4 }, 3, "x  x" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[16];
        size_t len;
        assert_ok(fsc_bpe_decode(b, cases[i].ids, cases[i].n, out, sizeof out, &len));
        if (len != strlen(cases[i].text) || memcmp(out, cases[i].text, len) != 0)
            fail_msg("case %zu: \"%.*s\", sentencepiece's \"%s\"", i, (int)len, out, cases[i].text);
    }
    fsc_bpe_free(b);
}

/* ModelProto's self_test_data (field 4: samples of input and expected pieces, as spm_train writes with
 * --self_test_sample_size) is read past, as any field fsc does not use */
static void test_spm_self_test_data(void **state) {
    (void)state;
    buf o = {.n = 0}, sample = {.n = 0}, data = {.n = 0};
    piece(&o, "<unk>", 0, 2), piece(&o, "\xe2\x96\x81", -1, 1), piece(&o, "a", -1, 1), piece(&o, "b", -1, 1);
    piece(&o, "ab", -2, 1);
    specs(&o, 2, 0, NULL);
    field_bytes(&sample, 1, "ab", 2), field_bytes(&sample, 2, "\xe2\x96\x81 ab", 6);
    field_bytes(&data, 1, sample.b, sample.n);
    field_bytes(&o, 4, data.b, data.n);
    fsc_bpe *b = NULL;
    assert_ok(load(&b, &o));
    assert_string_equal(ids_of(b, "ab"), "1,4");
    fsc_bpe_free(b);
}

static void test_spm_refusals(void **state) {
    fsc_bpe *b = NULL;
    buf o = {.n = 0};
    piece(&o, "<unk>", 0, 2), piece(&o, "a", -1, 1);
    buf base = o;
    specs(&o, 1, 0, NULL);
    assert_err(load(&b, &o), FSC_ERR_FORMAT, "a unigram model");
    o = base, specs(&o, 2, 0, "\x01\x02");
    assert_err(load(&b, &o), FSC_ERR_FORMAT, "precompiled charsmap");
    o = base;
    assert_err(load(&b, &o), FSC_ERR_FORMAT, "a unigram model"); /* no trainer_spec: sentencepiece's default */
    o = (buf){.n = 0}, piece(&o, "a", -1, 1), specs(&o, 2, 0, NULL);
    assert_err(load(&b, &o), FSC_ERR_FORMAT, "no UNKNOWN piece");
    o = base, piece(&o, "<unk2>", 0, 2), specs(&o, 2, 0, NULL);
    assert_err(load(&b, &o), FSC_ERR_FORMAT, "are both UNKNOWN");
    o = base, piece(&o, "x", 0, 5), specs(&o, 2, 0, NULL);
    assert_err(load(&b, &o), FSC_ERR_FORMAT, "is UNUSED");
    o = base, piece(&o, "<0x41>", 0, 6), specs(&o, 2, 0, NULL);
    assert_err(load(&b, &o), FSC_ERR_FORMAT, "byte_fallback is off");
    o = base, piece(&o, "<0x4g>", 0, 6), specs(&o, 2, 1, NULL);
    assert_err(load(&b, &o), FSC_ERR_FORMAT, "not <0xNN>");
    o = base, piece(&o, "x", 0, 9), specs(&o, 2, 0, NULL);
    assert_err(load(&b, &o), FSC_ERR_FORMAT, "a type that is none");
    o = base, piece(&o, "x", NAN, 1), specs(&o, 2, 0, NULL);
    assert_err(load(&b, &o), FSC_ERR_FORMAT, "not a finite number");
    o = base, piece(&o, "", 0, 1), specs(&o, 2, 0, NULL);
    assert_err(load(&b, &o), FSC_ERR_FORMAT, "an empty piece");
    o = base, piece(&o, "\xc3(", 0, 1), specs(&o, 2, 0, NULL);
    assert_err(load(&b, &o), FSC_ERR_FORMAT, "not valid UTF-8");
    char longp[300];
    memset(longp, 'x', 299), longp[299] = '\0';
    o = base, piece(&o, longp, 0, 1), specs(&o, 2, 0, NULL);
    assert_err(load(&b, &o), FSC_ERR_FORMAT, "more than 256 bytes");
    o = base, key(&o, 2, 2), varint(&o, 100);
    assert_err(load(&b, &o), FSC_ERR_FORMAT, "runs past the end");
    o = base, key(&o, 7, 3);
    assert_err(load(&b, &o), FSC_ERR_FORMAT, "wire type");
    o = base, key(&o, 9, 0), put(&o, "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 11);
    assert_err(load(&b, &o), FSC_ERR_FORMAT, "varint runs past the end");
    o = base, key(&o, 2, 0), varint(&o, 2);
    assert_err(load(&b, &o), FSC_ERR_FORMAT, "wrong wire type");
    o = (buf){.n = 0}, specs(&o, 2, 0, NULL);
    assert_err(load(&b, &o), FSC_ERR_FORMAT, "no pieces");
    /* a normalizer that trims, a denormalizer, whitespace as a suffix */
    o = base, specs(&o, 2, 0, NULL);
    buf t = {.n = 0};
    field_int(&t, 3, 2), field_int(&t, 24, 1);
    field_bytes(&o, 2, t.b, t.n);
    assert_err(load(&b, &o), FSC_ERR_FORMAT, "treat_whitespace_as_suffix");
    o = base, specs(&o, 2, 0, NULL);
    t = (buf){.n = 0}, field_bytes(&t, 2, "xy", 2), field_bytes(&o, 5, t.b, t.n);
    assert_err(load(&b, &o), FSC_ERR_FORMAT, "denormalizer");
    assert_null(b);
    /* the real model cut anywhere: refused, or (cut after its specs) read; never a crash */
    FILE *f = fopen(MODEL, "rb");
    assert_non_null(f);
    static uint8_t img[1 << 16];
    size_t len = fread(img, 1, sizeof img, f);
    fclose(f);
    size_t refused = 0;
    for (size_t cut = 0; cut < len; cut += 1 + cut / 64) {
        fsc_status s = fsc_bpe_load_spm_memory(&b, img, cut);
        if (s != FSC_OK) refused++, assert_null(b), assert_true(fsc_last_error()[0] != '\0');
        fsc_bpe_free(b);
    }
    assert_true(refused > 100);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spm_golden),
        cmocka_unit_test(test_spm_load_file),
        cmocka_unit_test(test_spm_tokens),
        cmocka_unit_test(test_spm_parts),
        cmocka_unit_test(test_spm_merges),
        cmocka_unit_test(test_spm_user_longest),
        cmocka_unit_test(test_spm_self_test_data),
        cmocka_unit_test(test_spm_trim_decode),
        cmocka_unit_test(test_spm_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
