/* Tests of lib/text/ (the GPT-2 tokenizer, fsc/bpe.h). Run from the repository root (the vocabulary is
 * examples/data/gpt2.tiktoken.gz).
 * Oracles: tiktoken's ids for GPT-2 (r50k_base) on a varied set of texts (tests/golden/bpe_golden.h, made by
 * tests/gen_golden_bpe.py; no tiktoken at run time); decode(encode(x)) == x byte for byte; the heap merge
 * equals tiktoken's scan on every piece; encoding in parts cut at fsc_bpe_split_point equals encoding the
 * whole; damaged vocabularies are refused with a message naming what is wrong. */
#include "testutil.h"
#include <pthread.h>
#include <unistd.h>
#include <zlib.h>
#include "golden/bpe_golden.h"
#include "text/bpe_impl.h"

#define VOCAB "examples/data/" FSC_BPE_GPT2_FILE

static fsc_bpe *gpt2;

static int setup(void **state) {
    fsc_status s = fsc_bpe_load(&gpt2, VOCAB);
    if (s != FSC_OK) fprintf(stderr, "cannot load %s: %s\n", VOCAB, fsc_last_error());
    return s == FSC_OK ? 0 : -1;
}

static int teardown(void **state) {
    fsc_bpe_free(gpt2);
    return 0;
}

static void encode_all(const void *text, size_t len, int32_t **ids, size_t *n) {
    *ids = malloc((len + 1) * sizeof **ids);
    assert_non_null(*ids);
    assert_ok(fsc_bpe_encode(gpt2, text, len, *ids, n));
    assert_true(*n <= len);
}

static void assert_roundtrip(const void *text, size_t len, const int32_t *ids, size_t n) {
    size_t need = 0;
    assert_int_equal(fsc_bpe_decode(gpt2, ids, n, NULL, 0, &need), len ? FSC_ERR_INVALID : FSC_OK);
    assert_int_equal(need, len);
    char *back = malloc(len + 1);
    assert_ok(fsc_bpe_decode(gpt2, ids, n, back, len + 1, &need));
    assert_int_equal(need, len);
    assert_memory_equal(back, text, len);
    free(back);
}

static void test_bpe_vocab(void **state) {
    assert_int_equal(fsc_bpe_vocab(gpt2), 50257);
    assert_int_equal(fsc_bpe_eot(gpt2), 50256);
    size_t len;
    const uint8_t *t = fsc_bpe_token(gpt2, 50256, &len);
    assert_int_equal(len, 13);
    assert_memory_equal(t, "<|endoftext|>", 13);
    t = fsc_bpe_token(gpt2, 15496, &len); /* "Hello" */
    assert_int_equal(len, 5);
    assert_memory_equal(t, "Hello", 5);
    assert_null(fsc_bpe_token(gpt2, 50257, &len));
    assert_int_equal(len, 0);
    assert_null(fsc_bpe_token(gpt2, -1, &len));
}

/* encode equals tiktoken's ids exactly, and decode gives the bytes back */
static void test_bpe_golden(void **state) {
    for (size_t g = 0; g < sizeof bpe_golds / sizeof bpe_golds[0]; g++) {
        const bpe_gold *w = &bpe_golds[g];
        int32_t *ids;
        size_t n;
        encode_all(w->text, w->len, &ids, &n);
        for (size_t i = 0; i < n && i < w->n; i++)
            if (ids[i] != w->ids[i]) fail_msg("text %zu: id %zu is %d, tiktoken's %d", g, i, ids[i], w->ids[i]);
        if (n != w->n) fail_msg("text %zu: %zu ids, tiktoken %zu", g, n, w->n);
        assert_roundtrip(w->text, w->len, ids, n);
        free(ids);
    }
}

static uint64_t next_rand(uint64_t *x) {
    *x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17;
    return *x;
}

/* The heap merge equals tiktoken's scan on pieces of every length, from a small alphabet (many merges) */
static void test_bpe_merge_heap_equals_scan(void **state) {
    const char *alphabet[] = {"ab ", "e", " the", "\xe4\xb8\xad", "0123", "\xff", "=-", "aaaa"};
    bpe_scratch s1 = {0}, s2 = {0};
    uint64_t x = 88172645463325252ull;
    uint8_t piece[700];
    int32_t a[700], b[700];
    for (int trial = 0; trial < 400; trial++) {
        const char *al = alphabet[trial % 8];
        size_t len = 2 + (size_t)(next_rand(&x) % (trial < 200 ? 64 : 698)), k = strlen(al);
        for (size_t i = 0; i < len; i++) piece[i] = (uint8_t)al[next_rand(&x) % k];
        if (bpe_rank(gpt2, piece, len) != BPE_NONE) continue;
        size_t na = bpe_merge_scan(gpt2, piece, len, a, &s1), nb = bpe_merge_heap(gpt2, piece, len, b, &s2);
        assert_int_equal(na, nb);
        assert_memory_equal(a, b, na * sizeof *a);
        assert_roundtrip(piece, len, a, na);
    }
    bpe_scratch_free(&s1);
    bpe_scratch_free(&s2);
}

/* Long runs (one piece each, the heap's case) give tiktoken's ids and decode back: GPT-2 has no token of
 * two spaces (so 199,999 spaces and "x" are 199,998 x 220 then " x"), and "aaaa" is 24794 */
static void test_bpe_long_piece(void **state) {
    size_t len = 200000;
    char *text = malloc(len);
    memset(text, ' ', len);
    text[len - 1] = 'x';
    int32_t *ids;
    size_t n;
    encode_all(text, len, &ids, &n);
    assert_int_equal(n, len - 1);
    for (size_t i = 0; i + 1 < n; i++) assert_int_equal(ids[i], 220);
    assert_int_equal(ids[n - 1], 2124);
    assert_roundtrip(text, len, ids, n);
    free(ids);
    memset(text, 'a', len);
    encode_all(text, len, &ids, &n);
    assert_int_equal(n, len / 4);
    for (size_t i = 0; i < n; i++) assert_int_equal(ids[i], 24794);
    free(ids);
    free(text);
}

/* Llama 3's pattern on a run of 10,000,001 spaces and "x": \s*[\r\n]+ gives back every space before it fails,
 * past PCRE2's default limit of 10,000,000 steps; the run is one piece of 10,000,000 spaces (220 each: GPT-2's
 * ranks have no token of two spaces), then " x" (2124) */
static void test_bpe_llama3_long_whitespace(void **state) {
    size_t len = 10000002;
    char *text = malloc(len);
    int32_t *ids = malloc(len * sizeof *ids);
    assert_non_null(text), assert_non_null(ids);
    memset(text, ' ', len);
    text[len - 1] = 'x';
    fsc_bpe *llama3;
    assert_ok(fsc_bpe_load_file(&llama3, "llama3:" VOCAB));
    size_t n;
    assert_ok(fsc_bpe_encode(llama3, text, len, ids, &n));
    assert_int_equal(n, len - 1);
    size_t spaces = 0;
    while (spaces < n && ids[spaces] == 220) spaces++;
    assert_int_equal(spaces, len - 2);
    assert_int_equal(ids[n - 1], 2124);
    fsc_bpe_free(llama3);
    free(text), free(ids);
}

/* Letters and digits that Unicode 15.0 and 16.0 added are \p{L} and \p{N} to tiktoken 0.14 (PCRE2 10.42 knows
 * Unicode 14.0 only): U+1C89 (Cyrillic), U+31350 (CJK extension H) and U+10D40 (a Garay digit) before "'s" are
 * cut from it, and Llama 3's \p{N}{1,3} takes U+10D40 with "12". The ids are tiktoken 0.14.0's encode_ordinary
 * (r50k_base, and Llama 3's pattern over GPT-2's ranks as tests/gen_golden_bpe_llama3.py makes it). */
static void test_bpe_unicode_16(void **state) {
    static const struct {
        int llama3;
        const char *text;
        int32_t ids[8];
        size_t n;
    } cases[] = {
        {0, "\xe1\xb2\x89's", {157, 110, 231, 338}, 4},
        {0, "\xf0\xb1\x8d\x90's cat", {172, 109, 235, 238, 338, 3797}, 6},
        {0, "\xf0\x90\xb5\x80's", {172, 238, 113, 222, 338}, 5},
        {1, "\xf0\x90\xb5\x80" "1234", {172, 238, 113, 222, 1065, 2682}, 6},
        {1, "\xf0\xb1\x8d\x90's", {172, 109, 235, 238, 338}, 5},
    };
    fsc_bpe *llama3;
    assert_ok(fsc_bpe_load_file(&llama3, "llama3:" VOCAB));
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int32_t ids[32];
        size_t n, len = strlen(cases[i].text);
        assert_ok(fsc_bpe_encode(cases[i].llama3 ? llama3 : gpt2, cases[i].text, len, ids, &n));
        assert_int_equal(n, cases[i].n);
        assert_memory_equal(ids, cases[i].ids, n * sizeof *ids);
    }
    fsc_bpe_free(llama3);
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc(*len + 1);
    assert_int_equal(fread(buf, 1, *len, f), *len);
    fclose(f);
    return buf;
}

/* Encoding in parts cut at fsc_bpe_split_point gives the ids of the whole text */
static void test_bpe_split_point(void **state) {
    size_t len;
    char *text = read_file("examples/data/coriolanus.txt", &len);
    int32_t *whole, *parts = malloc(len * sizeof *parts);
    size_t n, m = 0, cuts = 0;
    encode_all(text, len, &whole, &n);
    for (size_t at = 0; at < len;) {
        size_t end = fsc_bpe_split_point(text, len, at + 1 + at % 97);
        size_t k;
        assert_ok(fsc_bpe_encode(gpt2, text + at, end - at, parts + m, &k));
        m += k, at = end, cuts++;
    }
    assert_true(cuts > 50);
    assert_int_equal(m, n);
    assert_memory_equal(parts, whole, n * sizeof *whole);
    /* never a cut after white space other than the newline, nor after a non-ASCII byte */
    assert_int_equal(fsc_bpe_split_point("a \nb", 4, 0), 4);
    assert_int_equal(fsc_bpe_split_point("\xe3\x80\x80\nb", 5, 0), 5);
    assert_int_equal(fsc_bpe_split_point("a.\nb", 4, 0), 3);
    free(text), free(whole), free(parts);
}

static void test_bpe_decode_refusals(void **state) {
    int32_t ids[3] = {15496, 50257, 995};
    size_t len = 99;
    char out[64];
    assert_err(fsc_bpe_decode(gpt2, ids, 3, out, sizeof out, &len), FSC_ERR_INVALID, "id 1 is 50257");
    ids[1] = -5;
    assert_err(fsc_bpe_decode(gpt2, ids, 3, out, sizeof out, &len), FSC_ERR_INVALID, "id 1 is -5");
    ids[1] = 50256;
    assert_err(fsc_bpe_decode(gpt2, ids, 3, out, 10, &len), FSC_ERR_INVALID, "needs 24 bytes");
    assert_int_equal(len, 24);
    assert_ok(fsc_bpe_decode(gpt2, ids, 3, out, 24, &len));
    assert_memory_equal(out, "Hello<|endoftext|> world", 24);
}

static fsc_status load_text(const char *text) {
    fsc_bpe *b = (fsc_bpe *)&b;
    fsc_status s = fsc_bpe_load_memory(&b, text, strlen(text));
    if (s != FSC_OK) assert_null(b);
    fsc_bpe_free(s == FSC_OK ? b : NULL);
    return s;
}

/* A vocabulary of the 256 bytes (ranks 0..255) then extra lines, as text */
static char *byte_vocab(const char *extra) {
    static char buf[8192];
    size_t at = 0;
    for (int c = 0; c < 256; c++) {
        static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        at += (size_t)snprintf(buf + at, sizeof buf - at, "%c%c== %d\n", b64[c >> 2], b64[(c & 3) << 4], c);
    }
    snprintf(buf + at, sizeof buf - at, "%s", extra);
    return buf;
}

static void test_bpe_load_refusals(void **state) {
    assert_ok(load_text(byte_vocab("")));
    assert_ok(load_text(byte_vocab("YWI= 256\n"))); /* "ab" */
    { /* CRLF line ends and a blank CRLF line, as tiktoken's loader takes them */
        char crlf[16384];
        size_t at = 0;
        for (const char *p = byte_vocab("YWI= 256\n\n"); *p; p++) {
            if (*p == '\n') crlf[at++] = '\r';
            crlf[at++] = *p;
        }
        crlf[at] = 0;
        fsc_bpe *b = NULL;
        assert_ok(fsc_bpe_load_memory(&b, crlf, at));
        assert_int_equal(fsc_bpe_vocab(b), 257 + 1); /* and <|endoftext|> */
        size_t tl;
        const uint8_t *t = fsc_bpe_token(b, 256, &tl);
        assert_int_equal(tl, 2);
        assert_memory_equal(t, "ab", 2);
        fsc_bpe_free(b);
        /* a UTF-8 byte order mark first (an editor's) is skipped: the same tokens */
        char bom[16384 + 3] = "\xef\xbb\xbf";
        memcpy(bom + 3, crlf, at);
        assert_ok(fsc_bpe_load_memory(&b, bom, at + 3));
        assert_int_equal(fsc_bpe_vocab(b), 257 + 1);
        t = fsc_bpe_token(b, 0, &tl);
        assert_int_equal(tl, 1);
        assert_int_equal(t[0], 0);
        fsc_bpe_free(b);
    }
    assert_err(load_text(byte_vocab("YWI= 257\n")), FSC_ERR_FORMAT, "line 257: rank 257");
    assert_err(load_text(byte_vocab("YWI= 3\n")), FSC_ERR_FORMAT, "line 257: rank 3 a second time");
    assert_err(load_text(byte_vocab("YWI=256\n")), FSC_ERR_FORMAT, "line 257: expected \"BASE64 RANK\"");
    assert_err(load_text(byte_vocab("Y!I= 256\n")), FSC_ERR_FORMAT, "line 257: the token is not base64");
    assert_err(load_text(byte_vocab("YWI= 2x6\n")), FSC_ERR_FORMAT, "line 257: the rank is not a number");
    assert_err(load_text(byte_vocab("YWI= 99999999999999999999\n")), FSC_ERR_FORMAT, "the rank is not a number");
    assert_err(load_text(byte_vocab("YQ== 256\n")), FSC_ERR_FORMAT, "ranks 97 and 256 are the same token");
    assert_err(load_text("YQ== 0\n"), FSC_ERR_FORMAT, "every one of the 256 bytes");
    assert_err(load_text(""), FSC_ERR_FORMAT, "0 tokens");
    char *v = byte_vocab("");
    memcpy(strstr(v, "QQ== 65"), "YWI=", 4); /* byte 0x41 replaced by "ab": A is no token */
    assert_err(load_text(v), FSC_ERR_FORMAT, "the byte 0x41 is no token");
    fsc_bpe *none = NULL;
    assert_err(fsc_bpe_load(&none, "no/such/vocab.gz"), FSC_ERR_IO, "no/such/vocab.gz");
    /* a FIFO nobody writes to is an empty file, not a wait for a writer (the open hung there) */
    char dir[] = "/tmp/fsc_bpe_XXXXXX", fifo[64];
    assert_non_null(mkdtemp(dir));
    snprintf(fifo, sizeof fifo, "%s/vocab", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_err(fsc_bpe_load(&none, fifo), FSC_ERR_FORMAT, "0 tokens");
    unlink(fifo);
    rmdir(dir);
}

/* The vocabulary's file is close-on-exec while it is read: a child that the host program starts meanwhile holds
 * nothing of the library's. Oracle: while the library waits for a FIFO's data, its descriptor of the FIFO is
 * close-on-exec (it was not, unlike every other file the library opens). */
typedef struct { const char *fifo; int fd, cloexec; } fifo_writer;

static void *write_fifo(void *arg) {
    fifo_writer *w = arg;
    for (int k = 0; k < 5000 && (w->cloexec = test_fd_cloexec(w->fifo, w->fd)) < 0; k++) usleep(1000);
    if (write(w->fd, "YQ== 0\n", 7) != 7) w->cloexec = -2;
    close(w->fd); /* the end of the file */
    return NULL;
}

static void test_bpe_load_cloexec(void **state) {
    char dir[] = "/tmp/fsc_bpe_XXXXXX", fifo[64];
    assert_non_null(mkdtemp(dir));
    snprintf(fifo, sizeof fifo, "%s/vocab", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    fifo_writer w = { fifo, open(fifo, O_RDWR), -3 }; /* a writer there already: the library's read waits */
    assert_true(w.fd >= 0);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, write_fifo, &w), 0);
    fsc_bpe *none = NULL;
    fsc_status s = fsc_bpe_load(&none, fifo);
    pthread_join(t, NULL);
    unlink(fifo);
    rmdir(dir);
    assert_int_equal(s, FSC_ERR_FORMAT); /* one token: not a vocabulary, read to its end */
    assert_int_equal(w.cloexec, 1);
}

/* gzip: the GPT-2 file cut short or with a flipped byte is refused, and a small file that inflates past the
 * limit is refused before the buffer grows past it */
static void test_bpe_load_gzip_refusals(void **state) {
    size_t len;
    char *gz = read_file(VOCAB, &len);
    fsc_bpe *b = NULL;
    assert_err(fsc_bpe_load_memory(&b, gz, len / 2), FSC_ERR_FORMAT, "the file ends early");
    assert_null(b);
    gz[len / 2] ^= 0x55;
    fsc_status s = fsc_bpe_load_memory(&b, gz, len);
    assert_int_equal(s, FSC_ERR_FORMAT);
    assert_non_null(strstr(fsc_last_error(), "memory:"));
    assert_null(b);
    free(gz);
    /* 100 MiB of zeros deflates to about 100 KiB */
    size_t big = (size_t)100 << 20, cap = compressBound(big) + 64;
    uint8_t *zeros = calloc(big, 1), *out = malloc(cap);
    z_stream z = {0};
    assert_int_equal(deflateInit2(&z, 9, Z_DEFLATED, 16 + MAX_WBITS, 9, Z_DEFAULT_STRATEGY), Z_OK);
    z.next_in = zeros, z.avail_in = (uInt)big, z.next_out = out, z.avail_out = (uInt)cap;
    assert_int_equal(deflate(&z, Z_FINISH), Z_STREAM_END);
    size_t zlen = z.total_out;
    deflateEnd(&z);
    assert_err(fsc_bpe_load_memory(&b, out, zlen), FSC_ERR_FORMAT, "inflates to more than 64 MiB");
    free(zeros), free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bpe_vocab),
        cmocka_unit_test(test_bpe_golden),
        cmocka_unit_test(test_bpe_merge_heap_equals_scan),
        cmocka_unit_test(test_bpe_long_piece),
        cmocka_unit_test(test_bpe_unicode_16),
        cmocka_unit_test(test_bpe_llama3_long_whitespace),
        cmocka_unit_test(test_bpe_split_point),
        cmocka_unit_test(test_bpe_decode_refusals),
        cmocka_unit_test(test_bpe_load_refusals),
        cmocka_unit_test(test_bpe_load_cloexec),
        cmocka_unit_test(test_bpe_load_gzip_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
