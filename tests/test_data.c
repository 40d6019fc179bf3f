/* Tests of lib/io/data.c (fsc/data.h): each format read back to the tokens written, format detection, one
 * case per refusal with its message, streams of several files across their boundaries (glob order and list
 * order), batches equal to the data-order formula computed here over the concatenated tokens, files that change
 * after opening, and more files than a process may map. */
#include <sys/stat.h>
#include "testutil.h"

static char g_dir[64];

static int setup_dir(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/fsc_test_data_XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown_dir(void **state) {
    (void)state;
    test_rmtree(g_dir);
    return 0;
}

static char *path_of(const char *name) {
    static char p[64][256]; /* a pool: a table of cases holds many at once */
    static int k;
    k = (k + 1) % 64;
    snprintf(p[k], sizeof p[k], "%s/%s", g_dir, name);
    return p[k];
}

static void write_file(const char *name, const void *buf, size_t len) {
    FILE *f = fopen(path_of(name), "wb");
    assert_non_null(f);
    if (len) assert_int_equal(fwrite(buf, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

static void put16(uint8_t *p, uint32_t v) { p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8); }
static void put32(uint8_t *p, uint32_t v) { put16(p, v), put16(p + 2, v >> 16); }

/* A headerless uint16 image of tokens tok[0..n) (little-endian); *len set; caller frees. */
static uint8_t *u16_image(const uint32_t *tok, size_t n, size_t *len) {
    uint8_t *b = malloc(2 * n + 1);
    assert_non_null(b);
    for (size_t i = 0; i < n; i++) put16(b + 2 * i, tok[i]);
    *len = 2 * n;
    return b;
}

/* An llm.c shard image as llm.c's write_datafile makes it: 256 int32 (magic, version, count, zeros), then
 * the tokens as uint16. count and version as given (to make bad headers). */
static uint8_t *llmc_image(const uint32_t *tok, size_t n, uint32_t version, uint32_t count, size_t *len) {
    uint8_t *b = calloc(1, 1024 + 2 * n);
    assert_non_null(b);
    put32(b, FSC_DATA_LLMC_MAGIC), put32(b + 4, version), put32(b + 8, count);
    for (size_t i = 0; i < n; i++) put16(b + 1024 + 2 * i, tok[i]);
    *len = 1024 + 2 * n;
    return b;
}

/* Read the whole stream and compare with want[0..n). */
static void assert_stream(const fsc_data *d, const uint32_t *want, size_t n) {
    assert_int_equal(fsc_data_tokens(d), n);
    int32_t *got = malloc((n + 1) * sizeof *got);
    assert_non_null(got);
    assert_ok(fsc_data_read(d, 0, n, got));
    for (size_t i = 0; i < n; i++)
        if ((uint32_t)got[i] != want[i]) fail_msg("token %zu: %d, written %u", i, got[i], want[i]);
    free(got);
}

/* Oracle: each format reads back exactly the tokens written (bytes: the bytes; u16 and llmc: the
 * little-endian uint16 values, the llm.c header skipped), and says which format it read. */
static void test_formats(void **state) {
    (void)state;
    uint32_t tok[300];
    for (int i = 0; i < 300; i++) tok[i] = (uint32_t)(i * 2654435761u) % 50257;
    uint8_t bytes[300];
    uint32_t btok[300];
    for (int i = 0; i < 300; i++) bytes[i] = (uint8_t)(i * 7), btok[i] = bytes[i];
    write_file("b.txt", bytes, sizeof bytes);
    size_t lu, ll;
    uint8_t *u = u16_image(tok, 300, &lu), *l = llmc_image(tok, 300, 1, 300, &ll);
    write_file("t.bin", u, lu);
    write_file("s.bin", l, ll);
    struct { const char *name; fsc_data_format fmt, want; int vocab; const uint32_t *tok; } cases[] = {
        {"b.txt", FSC_DATA_BYTES, FSC_DATA_BYTES, 256, btok},
        {"b.txt", FSC_DATA_AUTO, FSC_DATA_BYTES, 256, btok},
        {"t.bin", FSC_DATA_U16, FSC_DATA_U16, 50257, tok},
        {"s.bin", FSC_DATA_LLMC, FSC_DATA_LLMC, 50257, tok},
        {"s.bin", FSC_DATA_AUTO, FSC_DATA_LLMC, 50257, tok}, /* detected by its magic */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        fsc_data *d = NULL;
        assert_ok(fsc_data_open(&d, path_of(cases[c].name), cases[c].fmt, cases[c].vocab));
        assert_int_equal(fsc_data_format_of(d), cases[c].want);
        assert_int_equal(fsc_data_files(d), 1);
        assert_string_equal(fsc_data_file(d, 0), path_of(cases[c].name));
        assert_stream(d, cases[c].tok, 300);
        assert_ok(fsc_data_check(d));
        fsc_data_free(d);
    }
    /* the same images from memory read the same */
    fsc_data *d = NULL;
    const void *bufs[] = {l};
    assert_ok(fsc_data_open_memory(&d, 1, bufs, &ll, FSC_DATA_AUTO, 50257));
    assert_int_equal(fsc_data_format_of(d), FSC_DATA_LLMC);
    assert_stream(d, tok, 300);
    fsc_data_free(d);
    free(u);
    free(l);
}

/* Oracle: format names parse to their enum and back; another name is refused with the list. */
static void test_format_names(void **state) {
    (void)state;
    for (int f = FSC_DATA_AUTO; f <= FSC_DATA_U16; f++) {
        fsc_data_format got;
        assert_ok(fsc_data_format_parse(fsc_data_format_name((fsc_data_format)f), &got));
        assert_int_equal(got, f);
    }
    fsc_data_format got;
    assert_err(fsc_data_format_parse("uint16", &got), FSC_ERR_INVALID, "give auto, bytes, llmc or u16");
}

static void open_err(const char *spec, fsc_data_format fmt, int vocab, fsc_status st, const char *needle) {
    fsc_data *d = (fsc_data *)&d;
    fsc_status s = fsc_data_open(&d, spec, fmt, vocab);
    if (s != st || !strstr(fsc_last_error(), needle))
        fail_msg("open %s as %s: %s \"%s\" (expected %s and \"%s\")", spec, fsc_data_format_name(fmt),
                 fsc_status_str(s), fsc_last_error(), fsc_status_str(st), needle);
    assert_null(d);
}

/* Oracle: every malformed or mismatched file is refused at open with a message naming the file and the
 * problem: an odd-sized u16 file, an llm.c header whose count disagrees with the size (short or long), a
 * short header, version 2, no magic for llmc, a shard given as bytes or u16, auto on a headerless file with
 * a vocabulary above 256, a missing file, a directory, a FIFO, a glob that matches nothing, an empty item. */
static void test_refusals(void **state) {
    (void)state;
    uint32_t tok[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    size_t len;
    uint8_t *b = llmc_image(tok, 10, 1, 10, &len);
    write_file("odd.bin", b + 1024, 19);
    write_file("long.bin", b, len); /* count 10 */
    put32(b + 8, 11);
    write_file("short.bin", b, len); /* says 11, holds 10 */
    put32(b + 8, 9);
    write_file("extra.bin", b, len); /* says 9, holds 10 */
    put32(b + 8, 0x80000000u);
    write_file("neg.bin", b, len);
    put32(b + 8, 10), put32(b + 4, 2);
    write_file("v2.bin", b, len);
    put32(b + 4, 7);
    write_file("v7.bin", b, len);
    write_file("hdr.bin", b, 500);
    write_file("plain.bin", b + 1024, 20);
    free(b);
    mkdir(path_of("dir"), 0700);
    assert_int_equal(mkfifo(path_of("fifo"), 0600), 0);
    char two[600];
    snprintf(two, sizeof two, "%s,%s", path_of("long.bin"), path_of("plain.bin"));
    char plain_long[600]; /* auto: bytes, from the first file */
    snprintf(plain_long, sizeof plain_long, "%s,%s", path_of("plain.bin"), path_of("long.bin"));
    char empty_item[600];
    snprintf(empty_item, sizeof empty_item, "%s,,%s", path_of("long.bin"), path_of("long.bin"));
    write_file("void.bin", "", 0);
    char voids[600]; /* empty files only, above a vocabulary of 256: no tokens, not a format to give */
    snprintf(voids, sizeof voids, "%s,%s", path_of("void.bin"), path_of("void.bin"));
    char spaced[600], spaced_glob[600], glob_spaced[600]; /* "a, b": the second name begins with a space (or ends
                                                             * with one), which the message points at */
    snprintf(spaced, sizeof spaced, "%s, %s", path_of("long.bin"), path_of("long.bin"));
    snprintf(spaced_glob, sizeof spaced_glob, "%s, %s", path_of("long.bin"), path_of("lon*.bin"));
    snprintf(glob_spaced, sizeof glob_spaced, "%s ,%s", path_of("lon*.bin"), path_of("long.bin"));
    struct { const char *spec; fsc_data_format fmt; int vocab; fsc_status st; const char *needle; } cases[] = {
        {path_of("odd.bin"), FSC_DATA_U16, 100, FSC_ERR_FORMAT, "odd.bin: 19 bytes, not a multiple of 2"},
        {path_of("short.bin"), FSC_DATA_LLMC, 100, FSC_ERR_FORMAT,
         "the header says 11 tokens (22 bytes after the 1024-byte header), but the file holds 20 bytes after it (truncated?)"},
        {path_of("extra.bin"), FSC_DATA_AUTO, 100, FSC_ERR_FORMAT, "the header says 9 tokens (18 bytes"},
        {path_of("neg.bin"), FSC_DATA_LLMC, 100, FSC_ERR_FORMAT, "token count -2147483648 is negative"},
        {path_of("v2.bin"), FSC_DATA_LLMC, 100, FSC_ERR_UNSUPPORTED, "llm.c shard version 2: fsc reads version 1"},
        {path_of("v7.bin"), FSC_DATA_AUTO, 100, FSC_ERR_FORMAT, "v7.bin: llm.c shard version 7"},
        {path_of("hdr.bin"), FSC_DATA_LLMC, 100, FSC_ERR_FORMAT, "500 bytes, shorter than llm.c's 1024-byte header"},
        {path_of("plain.bin"), FSC_DATA_LLMC, 100, FSC_ERR_FORMAT, "plain.bin is not an llm.c token shard"},
        {path_of("long.bin"), FSC_DATA_BYTES, 256, FSC_ERR_FORMAT, "long.bin begins with llm.c's magic 20240520: it is an llm.c token shard, not bytes"},
        {path_of("long.bin"), FSC_DATA_U16, 100, FSC_ERR_FORMAT, "not headerless uint16 tokens (read it with the format llmc)"},
        {plain_long, FSC_DATA_AUTO, 256, FSC_ERR_FORMAT, "plain.bin: the files of one stream share one format"},
        {two, FSC_DATA_AUTO, 100, FSC_ERR_FORMAT, "plain.bin is not an llm.c token shard"}, /* a list is one format */
        {path_of("plain.bin"), FSC_DATA_AUTO, 50257, FSC_ERR_INVALID, "give the format u16 for headerless uint16 tokens"},
        {path_of("missing.bin"), FSC_DATA_AUTO, 256, FSC_ERR_IO, "missing.bin: cannot open"},
        {path_of("dir"), FSC_DATA_AUTO, 256, FSC_ERR_INVALID, "dir is a directory"},
        {path_of("fifo"), FSC_DATA_U16, 256, FSC_ERR_INVALID, "fifo is a FIFO"},
        {"/dev/zero", FSC_DATA_BYTES, 256, FSC_ERR_INVALID, "/dev/zero is a device"},
        {path_of("nomatch*.bin"), FSC_DATA_AUTO, 256, FSC_ERR_INVALID, "nomatch*.bin matches no file"},
        {empty_item, FSC_DATA_AUTO, 256, FSC_ERR_INVALID, "an empty path in the list"},
        {empty_item, FSC_DATA_AUTO, 256, FSC_ERR_INVALID, "entry 2 of 3 is an empty path"},
        {",,", FSC_DATA_AUTO, 256, FSC_ERR_INVALID, "\",,\": the list of files is empty"},
        {"", FSC_DATA_AUTO, 256, FSC_ERR_INVALID, "\"\": the list of files is empty"},
        {path_of("long.bin"), FSC_DATA_AUTO, 0, FSC_ERR_INVALID, "vocabulary size 0"},
        {path_of("void.bin"), FSC_DATA_AUTO, 50257, FSC_ERR_INVALID, "void.bin is empty: the stream holds no tokens"},
        {voids, FSC_DATA_AUTO, 50257, FSC_ERR_INVALID, "void.bin and every other file of the stream are empty"},
        {spaced, FSC_DATA_LLMC, 100, FSC_ERR_IO, "long.bin: cannot open: No such file or directory (the name begins "
         "or ends with white space, which is part of it: a list of files is split at its commas alone"},
        {spaced_glob, FSC_DATA_LLMC, 100, FSC_ERR_IO, "No such file or directory (the name begins or ends with "
         "white space"}, /* the folder " /tmp/..." is not there */
        {glob_spaced, FSC_DATA_LLMC, 100, FSC_ERR_INVALID, "lon*.bin  matches no file (the name begins or ends with "
         "white space"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        open_err(cases[c].spec, cases[c].fmt, cases[c].vocab, cases[c].st, cases[c].needle);
    unlink(path_of("fifo"));
    /* a memory image that is NULL but has bytes is refused, not read as an empty file */
    const void *none[2] = { "abcd", NULL };
    const size_t four[2] = { 4, 4 };
    fsc_data *d = (fsc_data *)none;
    assert_err(fsc_data_open_memory(&d, 2, none, four, FSC_DATA_BYTES, 256), FSC_ERR_INVALID,
               "bufs[1] is NULL for 4 bytes");
    assert_null(d);
}

/* Oracle: a token not below the vocabulary is refused by the read that meets it and by fsc_data_check,
 * naming the file, its token offset, its byte offset in the file and its value; tokens before it read. */
static void test_vocab(void **state) {
    (void)state;
    uint32_t tok[40];
    for (int i = 0; i < 40; i++) tok[i] = (uint32_t)i;
    tok[33] = 1000;
    size_t len;
    uint8_t *b = llmc_image(tok, 40, 1, 40, &len);
    write_file("v.bin", b, len);
    fsc_data *d = NULL;
    assert_ok(fsc_data_open(&d, path_of("v.bin"), FSC_DATA_AUTO, 1000)); /* values are checked as read */
    int32_t out[40];
    assert_ok(fsc_data_read(d, 0, 33, out));
    assert_err(fsc_data_read(d, 30, 5, out), FSC_ERR_FORMAT,
               "v.bin: token 1000 at offset 33 (byte 1090 of the file) is not below the vocabulary size 1000");
    assert_err(fsc_data_check(d), FSC_ERR_FORMAT, "token 1000 at offset 33");
    assert_err(fsc_data_read(d, 35, 6, out), FSC_ERR_INVALID, "tokens 35 .. 41 asked for, but the stream holds 40");
    fsc_data_free(d);
    assert_ok(fsc_data_open(&d, path_of("v.bin"), FSC_DATA_AUTO, 1001));
    assert_ok(fsc_data_check(d));
    fsc_data_free(d);
    uint8_t bytes[100];
    for (int i = 0; i < 100; i++) bytes[i] = (uint8_t)(i == 57 ? 200 : 'a' + i % 20);
    write_file("v.txt", bytes, sizeof bytes);
    assert_ok(fsc_data_open(&d, path_of("v.txt"), FSC_DATA_AUTO, 128));
    assert_err(fsc_data_check(d), FSC_ERR_FORMAT, "token 200 at offset 57 (byte 57 of the file)");
    fsc_data_free(d);
    free(b);
}

/* Oracle: the shards of a glob (sorted by name, whatever order they were made in) or a comma list (in its
 * order) are one stream: reading every window that crosses a boundary, and the whole stream, gives the
 * concatenation; an empty shard in between contributes nothing. */
static void test_shards(void **state) {
    (void)state;
    const size_t n[4] = {5, 0, 7, 4}; /* shard_1 is empty */
    uint32_t all[16];
    size_t k = 0;
    for (int s = 3; s >= 0; s--) { /* made last to first */
        uint32_t tok[8];
        for (size_t i = 0; i < n[s]; i++) tok[i] = (uint32_t)(100 * s + (int)i);
        size_t len;
        uint8_t *b = llmc_image(tok, n[s], 1, (uint32_t)n[s], &len);
        char name[32];
        snprintf(name, sizeof name, "shard_%d.bin", s);
        write_file(name, b, len);
        free(b);
    }
    for (int s = 0; s < 4; s++)
        for (size_t i = 0; i < n[s]; i++) all[k++] = (uint32_t)(100 * s + (int)i);
    fsc_data *d = NULL;
    assert_ok(fsc_data_open(&d, path_of("shard_*.bin"), FSC_DATA_AUTO, 1000));
    assert_int_equal(fsc_data_files(d), 4);
    assert_non_null(strstr(fsc_data_file(d, 2), "shard_2.bin"));
    assert_int_equal(fsc_data_file_tokens(d, 2), 7);
    assert_stream(d, all, 16);
    for (size_t pos = 0; pos < 16; pos++)
        for (size_t m = 0; pos + m <= 16; m++) {
            int32_t out[16];
            assert_ok(fsc_data_read(d, pos, m, out));
            for (size_t i = 0; i < m; i++) assert_int_equal(out[i], all[pos + i]);
        }
    fsc_data_free(d);
    /* an empty file adds nothing and tells no format (auto detects the first file with bytes), in any place */
    write_file("empty.bin", "", 0);
    char spec0[900];
    snprintf(spec0, sizeof spec0, "%s,%s,%s", path_of("empty.bin"), path_of("shard_0.bin"), path_of("empty.bin"));
    for (int f = 0; f < 2; f++) {
        assert_ok(fsc_data_open(&d, spec0, f ? FSC_DATA_LLMC : FSC_DATA_AUTO, 1000));
        assert_int_equal(fsc_data_format_of(d), FSC_DATA_LLMC);
        assert_stream(d, all, 5);
        fsc_data_free(d);
    }
    /* empty files only: the format one empty file detects (bytes with a vocabulary of 256), never auto */
    snprintf(spec0, sizeof spec0, "%s,%s", path_of("empty.bin"), path_of("empty.bin"));
    assert_ok(fsc_data_open(&d, spec0, FSC_DATA_AUTO, 256));
    assert_int_equal(fsc_data_format_of(d), FSC_DATA_BYTES);
    assert_int_equal(fsc_data_tokens(d), 0);
    fsc_data_free(d);
    /* a file whose name holds a comma or a glob's bracket is itself */
    const char *odd[2] = { "a,b.bin", "x[1].bin" };
    for (int f = 0; f < 2; f++) {
        size_t len;
        uint8_t *b = llmc_image(all, 5, 1, 5, &len);
        write_file(odd[f], b, len);
        free(b);
        assert_ok(fsc_data_open(&d, path_of(odd[f]), FSC_DATA_AUTO, 1000));
        assert_stream(d, all, 5);
        fsc_data_free(d);
    }
    /* a list keeps its order: shard 3 then shard 0 */
    char spec[600];
    snprintf(spec, sizeof spec, "%s,%s", path_of("shard_3.bin"), path_of("shard_0.bin"));
    assert_ok(fsc_data_open(&d, spec, FSC_DATA_LLMC, 1000));
    uint32_t want[9] = {300, 301, 302, 303, 0, 1, 2, 3, 4};
    assert_stream(d, want, 9);
    fsc_data_free(d);
}

/* Oracle: fsc_data_batch gives, for every step and sequence, the T tokens at ((s*B + i) * T) mod (N - T)
 * of the concatenated stream and the T after them, computed here directly (also for a context above 1024); a
 * batch split over ranks (first, count) gives the same rows; a stream of T tokens or fewer is refused. */
static void test_order(void **state) {
    (void)state;
    enum { N0 = 97, N1 = 61, N = N0 + N1, B = 6, T = 9 };
    uint32_t all[N];
    for (int i = 0; i < N; i++) all[i] = (uint32_t)((i * 37 + 11) % 5000);
    size_t l0, l1;
    uint8_t *a = u16_image(all, N0, &l0), *b = u16_image(all + N0, N1, &l1);
    write_file("o0.bin", a, l0);
    write_file("o1.bin", b, l1);
    char spec[600];
    snprintf(spec, sizeof spec, "%s,%s", path_of("o0.bin"), path_of("o1.bin"));
    fsc_data *d = NULL;
    assert_ok(fsc_data_open(&d, spec, FSC_DATA_U16, 5000));
    int32_t tok[B * T], tgt[B * T], half[3 * T], halft[3 * T];
    for (int s = 0; s < 40; s++) {
        assert_ok(fsc_data_batch(d, s, B, T, 0, B, tok, tgt));
        for (int i = 0; i < B; i++) {
            uint64_t start = ((uint64_t)(s * B + i) * T) % (N - T);
            assert_int_equal(fsc_data_seq_start(N, s, B, T, i), start);
            for (int t = 0; t < T; t++) {
                assert_int_equal(tok[i * T + t], all[start + (uint64_t)t]);
                assert_int_equal(tgt[i * T + t], all[start + (uint64_t)t + 1]);
            }
        }
        assert_ok(fsc_data_batch(d, s, B, T, 3, 3, half, halft));
        assert_memory_equal(half, tok + 3 * T, sizeof half);
        assert_memory_equal(halft, tgt + 3 * T, sizeof halft);
    }
    /* a context longer than the batch reader's one-read row (1024 + 1 tokens): the same formula */
    enum { LT = 1100 };
    uint32_t *lall = malloc(3 * LT * sizeof *lall);
    int32_t *ltok = malloc(2 * LT * sizeof *ltok), *ltgt = malloc(2 * LT * sizeof *ltgt);
    assert_true(lall && ltok && ltgt);
    for (int i = 0; i < 3 * LT; i++) lall[i] = (uint32_t)((i * 7 + 3) % 5000);
    size_t ll;
    uint8_t *lb = u16_image(lall, 3 * LT, &ll);
    write_file("long.u16", lb, ll);
    fsc_data *ld = NULL;
    assert_ok(fsc_data_open(&ld, path_of("long.u16"), FSC_DATA_U16, 5000));
    for (int s = 0; s < 3; s++) {
        assert_ok(fsc_data_batch(ld, s, 2, LT, 0, 2, ltok, ltgt));
        for (int i = 0; i < 2; i++) {
            uint64_t start = ((uint64_t)(s * 2 + i) * LT) % (3 * LT - LT);
            for (int t = 0; t < LT; t++) {
                assert_int_equal(ltok[i * LT + t], lall[start + (uint64_t)t]);
                assert_int_equal(ltgt[i * LT + t], lall[start + (uint64_t)t + 1]);
            }
        }
    }
    fsc_data_free(ld);
    free(lb), free(lall), free(ltok), free(ltgt);
    assert_err(fsc_data_batch(d, 0, B, T, 4, 3, tok, tgt), FSC_ERR_INVALID, "sequences 4 .. 6 of a batch of 6");
    assert_err(fsc_data_batch(d, 0, B, N, 0, 1, tok, tgt), FSC_ERR_INVALID, "158 tokens, but a context of 158 needs at least 159");
    /* a bad step, batch or context is named (the message blamed "sequences 0 .. 0 of a batch of 1" for a context
     * of 0), and sizes at INT_MAX print without a signed overflow (UBSan): a context of INT_MAX needs INT_MAX + 1 */
    assert_err(fsc_data_batch(d, -1, B, T, 0, 1, tok, tgt), FSC_ERR_INVALID, "step -1 is negative");
    assert_err(fsc_data_batch(d, 0, 0, T, 0, 0, tok, tgt), FSC_ERR_INVALID, "a batch of 0 sequences");
    assert_err(fsc_data_batch(d, 0, B, 0, 0, 1, tok, tgt), FSC_ERR_INVALID, "a context of 0 tokens");
    assert_err(fsc_data_batch(d, 0, B, INT_MAX, 0, 1, tok, tgt), FSC_ERR_INVALID, "needs at least 2147483648");
    assert_err(fsc_data_batch(d, 0, 1, T, 5, INT_MAX, tok, tgt), FSC_ERR_INVALID,
               "sequences 5 .. 2147483651 of a batch of 1");
    fsc_data_free(d);
    free(a);
    free(b);
}

/* Oracle: a file that shrinks or is replaced after the stream was opened fails the read that meets it (and
 * fsc_data_check) with an I/O error naming the file and what happened, never a signal: the file spans pages
 * (a mapped read past the new end would fault). A file restored to its size and identity reads again. */
static void test_changed_under_use(void **state) {
    (void)state;
    enum { N = 6000 }; /* 1024 + 12000 bytes: four pages */
    uint32_t tok[N];
    for (int i = 0; i < N; i++) tok[i] = (uint32_t)(i % 1000);
    size_t len;
    uint8_t *b = llmc_image(tok, N, 1, N, &len);
    write_file("t.bin", b, len);
    fsc_data *d = NULL;
    assert_ok(fsc_data_open(&d, path_of("t.bin"), FSC_DATA_LLMC, 1000));
    assert_int_equal(truncate(path_of("t.bin"), 1024), 0);
    int32_t out[8];
    assert_err(fsc_data_read(d, 5000, 8, out), FSC_ERR_IO, "t.bin changed while in use: it was truncated (13024 "
               "bytes when opened, 1024 now)");
    assert_err(fsc_data_check(d), FSC_ERR_IO, "t.bin changed while in use: it was truncated");
    int32_t seq[16], tgt[16];
    assert_err(fsc_data_batch(d, 3, 2, 16, 0, 2, seq, tgt), FSC_ERR_IO, "t.bin changed while in use");
    write_file("t.bin", b, len); /* the same file again, its size restored */
    assert_ok(fsc_data_read(d, 5000, 8, out));
    for (int i = 0; i < 8; i++) assert_int_equal(out[i], tok[5000 + i]);
    write_file("t2.bin", b, len);
    assert_int_equal(rename(path_of("t2.bin"), path_of("t.bin")), 0);
    assert_err(fsc_data_read(d, 0, 8, out), FSC_ERR_IO, "t.bin changed while in use: another file took its name");
    unlink(path_of("t.bin"));
    assert_err(fsc_data_read(d, 0, 8, out), FSC_ERR_IO, "t.bin: cannot open");
    fsc_data_free(d);
    free(b);
}

/* Oracle: a stream opened by relative paths (a file and a glob) reads the files it opened after the program changed
 * its working directory, even where the new one holds files of those names: each read opens the file by the path
 * resolved at open. */
static void test_relative_paths(void **state) {
    (void)state;
    const uint8_t one[] = "abcdef", two[] = "ghij";
    write_file("r1.txt", one, 6);
    write_file("r2.txt", two, 4);
    mkdir(path_of("elsewhere"), 0700);
    write_file("elsewhere/r1.txt", two, 4); /* the same names in the new directory: not these files */
    write_file("elsewhere/r2.txt", one, 6);
    char cwd[4096];
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(g_dir), 0);
    fsc_data *d = NULL;
    fsc_status s = fsc_data_open(&d, "r1.txt,r2*.txt", FSC_DATA_BYTES, 256);
    assert_int_equal(chdir("elsewhere"), 0);
    int32_t out[10];
    fsc_status r = s == FSC_OK ? fsc_data_read(d, 0, 10, out) : s;
    char msg[256];
    snprintf(msg, sizeof msg, "%s", fsc_last_error());
    assert_int_equal(chdir(cwd), 0);
    if (r != FSC_OK) fail_msg("%s", msg);
    for (int i = 0; i < 10; i++) assert_int_equal(out[i], "abcdefghij"[i]);
    assert_string_equal(fsc_data_file(d, 1), "r2.txt"); /* messages keep the names given */
    fsc_data_free(d);
}

/* Oracle: a relative path opened in a working directory deeper than PATH_MAX (its name joined to the path could not
 * be opened: "File name too long") reads as it did before paths were resolved at open, from the directory of the
 * read. The tree is made and removed by relative steps (its full names are too long for test_rmtree). */
static void test_relative_path_deep_directory(void **state) {
    (void)state;
    char cwd[4096], name[201];
    assert_non_null(getcwd(cwd, sizeof cwd));
    memset(name, 'd', 200), name[200] = '\0';
    enum { DEPTH = 24 }; /* 24 x 201 bytes: past PATH_MAX (4096) */
    assert_int_equal(chdir(g_dir), 0);
    for (int i = 0; i < DEPTH; i++) assert_true(mkdir(name, 0700) == 0 && chdir(name) == 0);
    FILE *f = fopen("x.txt", "wb");
    assert_non_null(f);
    assert_int_equal(fwrite("abcd", 1, 4, f), 4);
    assert_int_equal(fclose(f), 0);
    fsc_data *d = NULL;
    fsc_status s = fsc_data_open(&d, "x.txt", FSC_DATA_BYTES, 256);
    int32_t out[4] = { 0 };
    fsc_status r = s == FSC_OK ? fsc_data_read(d, 0, 4, out) : s;
    char msg[256];
    snprintf(msg, sizeof msg, "%s", fsc_last_error());
    fsc_data_free(d);
    assert_int_equal(unlink("x.txt"), 0);
    for (int i = 0; i < DEPTH; i++) assert_true(chdir("..") == 0 && rmdir(name) == 0);
    assert_int_equal(chdir(cwd), 0);
    if (r != FSC_OK) fail_msg("%s", msg);
    for (int i = 0; i < 4; i++) assert_int_equal(out[i], "abcd"[i]);
}

/* Oracle: a glob of more files than the kernel allows mappings per process (vm.max_map_count) opens and reads
 * as one stream: files are not mapped. Skipped where that limit is above 100000 files. */
static void test_many_files(void **state) {
    (void)state;
    FILE *f = fopen("/proc/sys/vm/max_map_count", "r");
    long limit = 0;
    if (!f || fscanf(f, "%ld", &limit) != 1 || limit > 100000) {
        if (f) fclose(f);
        skip();
    }
    fclose(f);
    const long n = limit + 16;
    assert_int_equal(mkdir(path_of("many"), 0700), 0);
    char name[64];
    for (long i = 0; i < n; i++) {
        snprintf(name, sizeof name, "many/%06ld.txt", i);
        uint8_t c = (uint8_t)('a' + i % 26);
        write_file(name, &c, 1);
    }
    fsc_data *d = NULL;
    assert_ok(fsc_data_open(&d, path_of("many/*.txt"), FSC_DATA_AUTO, 256));
    assert_int_equal(fsc_data_files(d), n);
    assert_ok(fsc_data_check(d));
    int32_t out[3];
    assert_ok(fsc_data_read(d, (uint64_t)n - 3, 3, out));
    for (int i = 0; i < 3; i++) assert_int_equal(out[i], 'a' + (n - 3 + i) % 26);
    fsc_data_free(d);
    test_rmtree(path_of("many"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_formats), cmocka_unit_test(test_format_names), cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_vocab),   cmocka_unit_test(test_shards),       cmocka_unit_test(test_order),
        cmocka_unit_test(test_changed_under_use), cmocka_unit_test(test_relative_paths),
        cmocka_unit_test(test_relative_path_deep_directory),
        cmocka_unit_test(test_many_files),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
