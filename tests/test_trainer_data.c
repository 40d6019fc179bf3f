/* Tests of the trainer's --data and --data-format (examples/train_gpt.c over lib/io/data.c): the same tokens
 * as bytes, as a headerless uint16 file, as an llm.c shard and as several shards (a glob and a comma list)
 * train to the same losses; a vocabulary above 256 trains from uint16 tokens; mismatches are refused at
 * start-up with exit 2 and the library's message, and so is a uint16 file that --data-format auto would read as
 * bytes. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>
#include "trainertest.h"

static char trainer[PATH_MAX];
static char tmpdir[64];

#define TINY "--layers 1 --dim 16 --heads 2 --seq 8 --batch 4 --steps 6"
enum { NTOK = 601, CUT = 283 }; /* the tokens, and where the shards split them (inside a sequence) */
static uint32_t toks[NTOK];

static void put16(FILE *f, uint32_t v) {
    fputc((int)(v & 255), f);
    fputc((int)(v >> 8 & 255), f);
}

/* tok[0..n) into tmpdir/name as bytes, u16 or an llm.c shard (count as given, to make a bad header). */
static void write_tokens(const char *name, const char *format, const uint32_t *tok, size_t n, uint32_t count) {
    char *p = prog_fmt("%s/%s", tmpdir, name);
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    if (!strcmp(format, "llmc")) {
        uint32_t hdr[256] = {20240520, 1, count};
        for (int i = 0; i < 256; i++) put16(f, hdr[i] & 0xffff), put16(f, hdr[i] >> 16);
    }
    for (size_t i = 0; i < n; i++) {
        if (!strcmp(format, "bytes")) fputc((int)tok[i], f);
        else put16(f, tok[i]);
    }
    assert_int_equal(fclose(f), 0);
    free(p);
}

static int setup(void **state) {
    (void)state;
    uint32_t x = 11;
    for (int i = 0; i < NTOK; i++) x = x * 1664525u + 1013904223u, toks[i] = 'a' + (x >> 24) % 26;
    write_tokens("data.txt", "bytes", toks, NTOK, 0);
    write_tokens("data.u16", "u16", toks, NTOK, 0);
    write_tokens("data.llmc", "llmc", toks, NTOK, NTOK);
    write_tokens("part_0.u16", "u16", toks, CUT, 0);
    write_tokens("part_1.u16", "u16", toks + CUT, NTOK - CUT, 0);
    char *dir = prog_fmt("%s/shards", tmpdir);
    mkdir(dir, 0700);
    free(dir);
    write_tokens("shards/s_000001.bin", "llmc", toks + CUT, NTOK - CUT, NTOK - CUT); /* written first */
    write_tokens("shards/s_000000.bin", "llmc", toks, CUT, CUT);
    return 0;
}

/* The losses of a run of TINY with args (exit 0 required). */
static void losses(const char *args, double *l, int n) {
    char *full = prog_fmt(TINY " %s", args);
    cJSON *j = prog_json(trainer, tmpdir, "", full);
    prog_doubles(j, "losses", l, n, 0.0);
    cJSON_Delete(j);
    free(full);
}

/* Oracle: the data order is a function of the token stream only, so the same tokens train to bit-identical
 * losses whatever holds them: bytes (the reference, on as many ranks), a uint16 file, an llm.c shard (given and detected), two
 * llm.c shards by a glob (sorted by name, though written in the other order), two uint16 files by a comma
 * list, and the uint16 list on 2 FSDP ranks. A shard list in the wrong order trains differently (the test
 * can tell streams apart). */
static void test_formats_train_alike(void **state) {
    (void)state;
    double ref[6], ref2[6], l[6]; /* the bytes file on one rank, and on 2 FSDP ranks */
    char *a = prog_fmt("--data '%s/data.txt'", tmpdir);
    losses(a, ref, 6);
    free(a);
    a = prog_fmt("--data '%s/data.txt' --world 2 --parallel fsdp", tmpdir);
    losses(a, ref2, 6);
    free(a);
    const char *cases[] = {
        "--data '%s/data.u16' --data-format u16",
        "--data '%s/data.llmc' --data-format llmc",
        "--data '%s/data.llmc'",
        "--data '%s/shards/s_*.bin'",
        "--data '%s/part_0.u16,%s/part_1.u16' --data-format u16",
        "--data '%s/part_0.u16,%s/part_1.u16' --data-format u16 --world 2 --parallel fsdp",
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        a = prog_fmt(cases[c], tmpdir, tmpdir);
        losses(a, l, 6);
        const double *r = strstr(a, "--world 2") ? ref2 : ref;
        for (int i = 0; i < 6; i++)
            if (memcmp(&l[i], &r[i], sizeof l[i]))
                fail_msg("%s: loss %d is %.17g, the bytes file's %.17g", a, i, l[i], r[i]);
        free(a);
    }
    a = prog_fmt("--data '%s/part_1.u16,%s/part_0.u16' --data-format u16", tmpdir, tmpdir);
    losses(a, l, 6);
    assert_true(memcmp(l, ref, sizeof l) != 0);
    free(a);
}

/* Oracle: uint16 tokens up to 49999 train a model of --vocab 50000 (finite losses, the first near
 * ln 50000 = 10.8 for an untrained model), in both token formats. */
static void test_big_vocab(void **state) {
    (void)state;
    uint32_t big[NTOK];
    for (int i = 0; i < NTOK; i++) big[i] = (toks[i] * 1931u + (uint32_t)i) % 50000;
    big[77] = 49999;
    write_tokens("big.u16", "u16", big, NTOK, 0);
    write_tokens("big.llmc", "llmc", big, NTOK, NTOK);
    const char *files[] = {"big.u16' --data-format 'u16", "big.llmc"};
    for (int k = 0; k < 2; k++) {
        double l[6];
        char *a = prog_fmt("--vocab 50000 --data '%s/%s'", tmpdir, files[k]);
        losses(a, l, 6);
        for (int i = 0; i < 6; i++) assert_true(isfinite(l[i]));
        if (fabs(l[0] - log(50000.0)) > 1.0) fail_msg("%s: first loss %g, not near ln 50000", a, l[0]);
        free(a);
    }
}

/* Oracle: each mismatch is refused at start-up, exit 2, with a message naming the file and the problem (or the
 * list, when it names no file or has an empty entry). */
static void test_refusals(void **state) {
    (void)state;
    write_tokens("odd.u16", "bytes", toks, 99, 0);
    write_tokens("bad.llmc", "llmc", toks, 100, 101);
    uint32_t big[NTOK];
    memcpy(big, toks, sizeof big);
    big[500] = 300;
    write_tokens("over.u16", "u16", big, NTOK, 0);
    uint32_t gpt2[NTOK]; /* GPT-2's token ids (frequent ones small), uint16, without --vocab */
    for (int i = 0; i < NTOK; i++) gpt2[i] = i % 3 ? (toks[i] * 1931u + (uint32_t)i) % 50257 : toks[i] % 2000;
    write_tokens("gpt2.u16", "u16", gpt2, NTOK, 0);
    struct { const char *args, *needle; } cases[] = {
        {"--data '%s/odd.u16' --data-format u16", "odd.u16: 99 bytes, not a multiple of 2"},
        {"--data '%s/bad.llmc'", "bad.llmc: the header says 101 tokens (202 bytes after the 1024-byte header), but the file holds 200"},
        {"--data '%s/data.llmc' --data-format u16", "data.llmc begins with llm.c's magic 20240520"},
        {"--data '%s/data.u16' --vocab 50000", "give the format u16"},
        {"--data '%s/data.txt' --data-format llmc", "data.txt is not an llm.c token shard"},
        {"--data '%s/over.u16' --data-format u16", "token 300 at offset 500 (byte 1000 of the file) is not below the vocabulary size 256"},
        {"--data '%s/nothing_*.bin'", "nothing_*.bin matches no file"},
        {"--data '%s/data.txt' --data-format u32", "--data-format"},
        {"--data ',,'", "--data \",,\": the list of files is empty"},
        {"--data '%s/data.txt,'", "data.txt,\": entry 2 of 2 is an empty path in the list of files"},
        /* --data-format auto: the validation files are read in the format detected for --data */
        {"--data '%s/data.llmc' --val-data '%s/data.u16'", "data.u16 is not an llm.c token shard"},
        {"--data '%s/data.txt' --val-data '%s/data.llmc'", "data.llmc begins with llm.c's magic 20240520"},
        /* ... and the message says so, not only how the file would read on its own */
        {"--data '%s/data.txt' --val-data '%s/data.llmc'", "under --data-format auto, --val-data is read in the format "
                                                           "detected for --data (bytes), and these files are llmc"},
        {"--data '%s/data.llmc' --val-data '%s/data.txt'", "format detected for --data (llmc), and these files are bytes"},
        /* --data-format auto: uint16 tokens below 256 (tools/make_tokens' files) would read as bytes, every other 0 */
        {"--data '%s/data.u16'", "data.u16: read as bytes (--data-format auto: no llm.c header, and --vocab at most "
                                 "256), but every second byte of its first 1024 is 0, as in a file of uint16 tokens"},
        {"--data '%s/data.txt' --val-data '%s/data.u16'", "data.u16: read as bytes (--data-format auto: the format "
                                                          "detected for --data), but every second byte"},
        /* ... and so would GPT-2's uint16 tokens without --vocab (a text holds no control bytes) */
        {"--data '%s/gpt2.u16'", "gpt2.u16: read as bytes (--data-format auto: no llm.c header, and --vocab at most "
                                 "256), but "},
        {"--data '%s/gpt2.u16'", "bytes are control characters, which text does not hold: uint16 tokens (GPT-2's"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char *a = prog_fmt(cases[c].args, tmpdir, tmpdir), *full = prog_fmt(TINY " %s", a);
        prog_refused(trainer, full, tmpdir, 2, cases[c].needle);
        free(full);
        free(a);
    }
}

/* Oracle: tools/make_tokens refuses a directory, a missing file and a FIFO with a message of its own (exit 2 from
 * Perl's die is 2 or more), no Perl warning; --version prints the library's; a text file makes files the trainer
 * reads. */
static void test_make_tokens(void **state) {
    (void)state;
    const char *src = __FILE__, *slash = strrchr(src, '/'); /* tools/ beside tests/ */
    char *tool = prog_fmt("%.*s../tools/make_tokens", slash ? (int)(slash - src + 1) : 0, src);
    char *fifo = prog_fmt("%s/fifo", tmpdir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    struct { const char *text, *says; } cases[] = {
        {tmpdir, "is a directory: give a text file"},
        {"/nonexistent/t.txt", "/nonexistent/t.txt does not exist"},
        {fifo, "is not a regular file"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *args = prog_fmt("'%s' '%s/mt'", cases[i].text, tmpdir), *out = NULL, *err = NULL;
        int rc = prog_run(tool, args, tmpdir, &out, &err);
        if (rc == 0 || !strstr(err, cases[i].says) || strstr(err, "uninitialized") || strstr(err, " line "))
            fail_msg("make_tokens %s: exit %d, stderr \"%s\" (expected \"%s\" and no Perl warning)", args, rc, err,
                     cases[i].says);
        free(args), free(out), free(err);
    }
    unlink(fifo);
    char *vout = NULL, *want = prog_fmt("make_tokens %s\n", fsc_version_string()); /* version.h's, as the library's */
    assert_int_equal(prog_run(tool, "--version", tmpdir, &vout, NULL), 0);
    assert_string_equal(vout, want);
    free(vout), free(want);
    char *args = prog_fmt("--format llmc '%s/data.txt' '%s/mt'", tmpdir, tmpdir), *out = NULL;
    assert_int_equal(prog_run(tool, args, tmpdir, &out, NULL), 0);
    free(args), free(out);
    double l[6];
    args = prog_fmt("--data '%s/mt_train.bin' --val-data '%s/mt_val.bin'", tmpdir, tmpdir);
    losses(args, l, 6);
    free(args);
    /* --val 0 writes no validation file and leaves none of an earlier run's that would pass for this text's */
    args = prog_fmt("--val 0 '%s/data.txt' '%s/mt'", tmpdir, tmpdir);
    assert_int_equal(prog_run(tool, args, tmpdir, &out, NULL), 0);
    char *val = prog_fmt("%s/mt_val.bin", tmpdir);
    if (access(val, F_OK) == 0) fail_msg("make_tokens --val 0 left %s: %s", val, out);
    free(args), free(out), free(val), free(fifo), free(tool);
}

/* Oracle: without --data, the default corpus is found from any working directory (beside the program in the
 * source tree: the run reads examples/data/coriolanus.txt's 15991 tokens), and a copy of the program where
 * no corpus is near it says what to pass (exit 2). */
static void test_default_data(void **state) {
    (void)state;
    char *cmd = prog_fmt("-c \"cd '%s' && exec '%s' " TINY " --steps 1\"", tmpdir, trainer), *out = NULL;
    int rc = prog_run("sh", cmd, tmpdir, &out, NULL);
    if (rc != 0 || !strstr(out, "examples/data/coriolanus.txt, 15991 tokens")) fail_msg("from %s: exit %d\n%s", tmpdir, rc, out);
    free(out);
    free(cmd);
    cmd = prog_fmt("-c \"cp '%s' '%s/lonely' && cd '%s' && exec ./lonely " TINY "\"", trainer, tmpdir, tmpdir);
    char *err = NULL;
    rc = prog_run("sh", cmd, tmpdir, NULL, &err);
    if (rc != 2 || !strstr(err, "--data not given, and the default corpus") || !strstr(err, "give --data PATH"))
        fail_msg("a lonely copy: exit %d: %s", rc, err);
    free(err);
    free(cmd);
}

int main(int argc, char **argv) {
    (void)argc;
    if (prog_setup(argv[0], "test_trainer_data", "train_gpt", trainer, sizeof trainer, tmpdir, sizeof tmpdir)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_formats_train_alike),
        cmocka_unit_test(test_big_vocab),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_default_data),
        cmocka_unit_test(test_make_tokens),
    };
    int rc = cmocka_run_group_tests(tests, setup, NULL);
    test_rmtree(tmpdir);
    return rc;
}
