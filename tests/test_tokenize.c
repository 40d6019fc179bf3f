/* Tests of the tokenize program (examples/tokenize.c, installed as fsc-tokenize) over lib/text/.
 * Oracles: its token file holds exactly fsc_bpe_encode's ids of the text (whose golden test is tiktoken's,
 * tests/test_bpe.c), as uint16 or as an llm.c shard whose header counts them; --decode gives the text back
 * byte for byte, also of the two files --val splits it into; the trainer trains on the file with --vocab 50257; bad options and files are refused with a
 * message naming them. Run from the repository root (the vocabulary is examples/data/gpt2.tiktoken.gz); the
 * program itself runs in a temporary folder, so it finds the vocabulary beside itself. */
#include "trainertest.h"
#include "bpetest.h"

static char tokenize[PATH_MAX], trainer[PATH_MAX + 32], tmpdir[64];
static const char *const corpus = "examples/data/coriolanus.txt";
static char corpus_abs[PATH_MAX];

static uint8_t *slurp_bytes(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(*len + 1);
    assert_int_equal(fread(buf, 1, *len, f), *len);
    fclose(f);
    return buf;
}

/* The ids the library gives the corpus */
/* path holding exactly text */
static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static int32_t *corpus_ids(size_t *n) {
    fsc_bpe *b;
    assert_ok(fsc_bpe_load(&b, "examples/data/" FSC_BPE_GPT2_FILE));
    size_t len;
    uint8_t *text = slurp_bytes(corpus, &len);
    int32_t *ids = malloc(len * sizeof *ids);
    assert_ok(fsc_bpe_encode(b, text, len, ids, n));
    free(text);
    fsc_bpe_free(b);
    return ids;
}

static void test_encode_u16_and_decode(void **state) {
    size_t n, len, flen;
    int32_t *ids = corpus_ids(&n);
    char *out = NULL, *args = prog_fmt("'%s' '%s/c.u16'", corpus_abs, tmpdir);
    assert_int_equal(prog_run(tokenize, args, tmpdir, &out, NULL), 0);
    char *want = prog_fmt("15991 bytes -> %zu tokens (u16)", n);
    if (!strstr(out, want)) fail_msg("the output lacks \"%s\": %s", want, out);
    char *path = prog_fmt("%s/c.u16", tmpdir);
    uint8_t *file = slurp_bytes(path, &flen);
    assert_int_equal(flen, 2 * n);
    for (size_t i = 0; i < n; i++) assert_int_equal(file[2 * i] | file[2 * i + 1] << 8, ids[i]);
    free(args), free(out), free(want);
    args = prog_fmt("--decode '%s' '%s/back.txt'", path, tmpdir);
    assert_int_equal(prog_run(tokenize, args, tmpdir, NULL, NULL), 0);
    char *back_path = prog_fmt("%s/back.txt", tmpdir);
    uint8_t *text = slurp_bytes(corpus, &len), *back = slurp_bytes(back_path, &flen);
    assert_int_equal(flen, len);
    assert_memory_equal(back, text, len);
    free(ids), free(args), free(path), free(file), free(back_path), free(text), free(back);
}

static void test_encode_llmc_eot(void **state) {
    size_t n, flen;
    int32_t *ids = corpus_ids(&n);
    char *args = prog_fmt("--format llmc --eot '%s' '%s/c.bin'", corpus_abs, tmpdir);
    assert_int_equal(prog_run(tokenize, args, tmpdir, NULL, NULL), 0);
    char *path = prog_fmt("%s/c.bin", tmpdir);
    uint8_t *file = slurp_bytes(path, &flen);
    assert_int_equal(flen, 1024 + 2 * (n + 1));
    int32_t head[3];
    memcpy(head, file, sizeof head);
    assert_int_equal(head[0], 20240520);
    assert_int_equal(head[1], 1);
    assert_int_equal(head[2], (int32_t)(n + 1));
    const uint8_t *t = file + 1024;
    assert_int_equal(t[0] | t[1] << 8, 50256);
    for (size_t i = 0; i < n; i++) assert_int_equal(t[2 * i + 2] | t[2 * i + 3] << 8, ids[i]);
    free(args);
    args = prog_fmt("--decode '%s' '%s/back.txt'", path, tmpdir); /* read as u16: refused, naming the option */
    char *err = NULL;
    assert_int_equal(prog_run(tokenize, args, tmpdir, NULL, &err), 1);
    /* the hint once: the library's own "read it with the format llmc" was printed before it too */
    const char *hint = strstr(err, "(give --format llmc)");
    if (!hint || strstr(hint + 1, "(give --format llmc)") || strstr(err, "read it with the format llmc") ||
        !strstr(err, path))
        fail_msg("stderr does not name the file and give the hint once: %s", err);
    free(args), free(err);
    args = prog_fmt("--decode --format llmc '%s' '%s/back.txt'", path, tmpdir);
    assert_int_equal(prog_run(tokenize, args, tmpdir, NULL, NULL), 0);
    char *back = prog_fmt("%s/back.txt", tmpdir), *s = prog_slurp(back);
    assert_int_equal(strncmp(s, "<|endoftext|>First Citizen:\n", 28), 0);
    free(ids), free(args), free(path), free(file), free(back), free(s);
}

/* --val: the two files decode to the text's two parts, the second about the last 10% of it, cut at a line start */
static void test_val_split(void **state) {
    char *args = prog_fmt("--val 0.1 --val-out '%s/v.u16' '%s' '%s/t.u16'", tmpdir, corpus_abs, tmpdir);
    assert_int_equal(prog_run(tokenize, args, tmpdir, NULL, NULL), 0);
    free(args);
    size_t len, lt, lv;
    uint8_t *text = slurp_bytes(corpus, &len);
    const char *parts[] = {"t", "v"};
    for (int i = 0; i < 2; i++) {
        args = prog_fmt("--decode '%s/%s.u16' '%s/%s.txt'", tmpdir, parts[i], tmpdir, parts[i]);
        assert_int_equal(prog_run(tokenize, args, tmpdir, NULL, NULL), 0);
        free(args);
    }
    char *pt = prog_fmt("%s/t.txt", tmpdir), *pv = prog_fmt("%s/v.txt", tmpdir);
    uint8_t *t = slurp_bytes(pt, &lt), *v = slurp_bytes(pv, &lv);
    assert_int_equal(lt + lv, len);
    assert_memory_equal(t, text, lt);
    assert_memory_equal(v, text + lt, lv);
    assert_true(lv > 0 && lv <= len / 10 && lv > len / 20);
    assert_int_equal(t[lt - 1], '\n');
    free(text), free(pt), free(pv), free(t), free(v);
}

/* The trainer reads the file as GPT-2 tokens */
static void test_trainer_reads_it(void **state) {
    char *args = prog_fmt("'%s' '%s/t.u16'", corpus_abs, tmpdir);
    assert_int_equal(prog_run(tokenize, args, tmpdir, NULL, NULL), 0);
    free(args);
    args = prog_fmt("--data '%s/t.u16' --data-format u16 --vocab 50257 --layers 1 --dim 16 --heads 2 --seq 8 "
                    "--batch 2 --steps 2", tmpdir);
    char *out = NULL;
    int rc = prog_run(trainer, args, tmpdir, &out, NULL);
    if (rc != 0) fail_msg("the trainer exited %d: %s", rc, out);
    free(args), free(out);
}

static void test_refusals(void **state) {
    char *a;
    prog_refused(tokenize, "--frobnicate x y", tmpdir, 2, "unknown option '--frobnicate'");
    prog_refused(tokenize, "--format u32 x y", tmpdir, 2, "--format must be u16 or llmc, not 'u32'");
    prog_refused(tokenize, "only_one", tmpdir, 2, "give TEXT and OUT");
    prog_refused(tokenize, "--decode --eot x y", tmpdir, 2, "are for encoding, not with --decode");
    prog_refused(tokenize, "--val 1.5 --val-out v x y", tmpdir, 2, "--val must be a fraction in (0, 1), not '1.5'");
    prog_refused(tokenize, "--val 0.1 x y", tmpdir, 2, "give --val F and --val-out PATH together");
    a = prog_fmt("'%s/missing.txt' '%s/o.u16'", tmpdir, tmpdir);
    prog_refused(tokenize, a, tmpdir, 1, "missing.txt");
    free(a);
    a = prog_fmt("'%s' '%s/o.u16'", tmpdir, tmpdir);
    prog_refused(tokenize, a, tmpdir, 1, "is not a regular file");
    free(a);
    char *fifo = prog_fmt("%s/fifo", tmpdir); /* refused, not waited on for a writer (the open hung there) */
    assert_int_equal(mkfifo(fifo, 0600), 0);
    a = prog_fmt("'%s' '%s/o.u16'", fifo, tmpdir);
    prog_refused(tokenize, a, tmpdir, 1, "is not a regular file");
    free(a);
    unlink(fifo), free(fifo);
    a = prog_fmt("--vocab '%s' '%s' '%s/o.u16'", corpus_abs, corpus_abs, tmpdir); /* a text as the vocabulary */
    prog_refused(tokenize, a, tmpdir, 1, "coriolanus.txt: line 1");
    free(a);
    char *one = prog_fmt("%s/one_line.txt", tmpdir);
    write_text(one, "a single line and no place to cut it");
    a = prog_fmt("--val 0.5 --val-out '%s/v.u16' '%s' '%s/o.u16'", tmpdir, one, tmpdir);
    prog_refused(tokenize, a, tmpdir, 1, "--val 0.5: no place in the last 0.5 of");
    free(a), free(one);
    char *odd = prog_fmt("%s/odd.u16", tmpdir);
    write_text(odd, "abc");
    a = prog_fmt("--decode '%s' '%s/o.txt'", odd, tmpdir);
    prog_refused(tokenize, a, tmpdir, 1, "not a multiple of 2");
    free(a);
    write_text(odd, "\xff\xff"); /* id 65535: past the vocabulary */
    a = prog_fmt("--decode '%s' '%s/o.txt'", odd, tmpdir);
    prog_refused(tokenize, a, tmpdir, 1, "65535");
    free(a), free(odd);
    /* an output that is an input, or --val-out that is OUT, is refused before anything is opened for writing */
    char *x = prog_fmt("%s/same.txt", tmpdir), *keep = prog_fmt("%s/keep.txt", tmpdir);
    write_text(x, "hello\nworld\n");
    write_text(keep, "keep");
    a = prog_fmt("'%s' '%s'", x, x);
    prog_refused(tokenize, a, tmpdir, 1, "is TEXT itself");
    free(a);
    a = prog_fmt("'%s/../%s/same.txt' '%s'", tmpdir, strrchr(tmpdir, '/') + 1, x); /* another name, one file */
    prog_refused(tokenize, a, tmpdir, 1, "is TEXT itself");
    free(a);
    a = prog_fmt("--val 0.5 --val-out '%s/vv.u16' '%s' '%s/vv.u16'", tmpdir, x, tmpdir);
    prog_refused(tokenize, a, tmpdir, 1, "is OUT too");
    free(a);
    a = prog_fmt("--val 0.5 --val-out '%s' '%s' '%s/t.u16'", x, x, tmpdir);
    prog_refused(tokenize, a, tmpdir, 1, "--val-out");
    free(a);
    a = prog_fmt("--decode '%s' '%s'", keep, keep);
    prog_refused(tokenize, a, tmpdir, 1, "is TOKENS itself");
    free(a);
    a = prog_fmt("'%s' '%s/l1.u16'", x, tmpdir); /* TOKENS as a list holding OUT: refused, OUT kept */
    assert_int_equal(prog_run(tokenize, a, tmpdir, NULL, NULL), 0);
    free(a);
    a = prog_fmt("--decode '%s/l1.u16,%s/l1.u16' '%s/l1.u16'", tmpdir, tmpdir, tmpdir);
    prog_refused(tokenize, a, tmpdir, 1, "a file of TOKENS");
    free(a);
    char *l1 = prog_fmt("%s/l1.u16", tmpdir);
    size_t l1n;
    uint8_t *l1b = slurp_bytes(l1, &l1n);
    assert_int_equal(l1n, 8); /* its 4 tokens */
    free(l1b), free(l1);
    a = prog_fmt("--decode '%s/missing.u16' '%s'", tmpdir, keep); /* OUT is not emptied when TOKENS is missing */
    prog_refused(tokenize, a, tmpdir, 1, "missing.u16");
    free(a);
    size_t kl, xl;
    uint8_t *kb = slurp_bytes(keep, &kl), *xb = slurp_bytes(x, &xl);
    assert_int_equal(kl, 4);
    assert_int_equal(xl, 12);
    free(kb), free(xb), free(keep);
    if (access("/dev/full", W_OK) == 0) { /* llm.c's header is written last: an output that fails says so */
        a = prog_fmt("--format llmc '%s' /dev/full", x);
        prog_refused(tokenize, a, tmpdir, 1, "writing /dev/full");
        free(a);
        a = prog_fmt("'%s' /dev/full", x);
        char *o2 = NULL, *e2 = NULL;
        assert_int_equal(prog_run(tokenize, a, tmpdir, &o2, &e2), 1);
        assert_null(strstr(o2, "tokens (u16) in /dev/full")); /* no success line for a file not written */
        free(a), free(o2), free(e2);
    }
    a = prog_fmt("-- '%s' '%s/dd.u16'", x, tmpdir); /* "--" ends the options, as getopt's */
    assert_int_equal(prog_run(tokenize, a, tmpdir, NULL, NULL), 0);
    free(a);
    free(x);
    char *out = NULL;
    assert_int_equal(prog_run(tokenize, "--version", tmpdir, &out, NULL), 0);
    char *want = prog_fmt("tokenize %s\n", fsc_version_string());
    assert_string_equal(out, want);
    free(out), free(want);
}

/* --tokenizer FILE: a tokenizer.json made here (tests/bpetest.h), given as the file and as its folder, gives the
 * ids fsc_bpe_load_file's vocabulary gives (whose Hugging Face loader tests/test_bpe_hf.c checks against
 * tiktoken), with --eot its end-of-text token first; --decode with it gives the text back; a tokenizer without
 * an end-of-text token refuses --eot. tools/make_tokens --tokenizer writes the same ids through this program. */
static void test_tokenizer_file(void **state) {
    char *dir = prog_fmt("%s/tok", tmpdir), *tj = prog_fmt("%s/tok/tokenizer.json", tmpdir);
    assert_int_equal(mkdir(dir, 0700), 0);
    assert_int_equal(bpetest_write_tokenizer(tj, 1), 0);
    fsc_bpe *b;
    assert_ok(fsc_bpe_load_file(&b, tj));
    size_t len, n, flen;
    uint8_t *text = slurp_bytes(corpus, &len);
    int32_t *ids = malloc(len * sizeof *ids);
    assert_ok(fsc_bpe_encode(b, text, len, ids, &n));
    size_t ab = 0;
    for (size_t i = 0; i < n; i++) ab += ids[i] == 256 || ids[i] == 257;
    assert_true(ab > 100); /* the merges are used */
    const char *specs[] = {tj, dir};
    for (int k = 0; k < 2; k++) {
        char *args = prog_fmt("--tokenizer '%s' --eot '%s' '%s/s.u16'", specs[k], corpus_abs, tmpdir);
        assert_int_equal(prog_run(tokenize, args, tmpdir, NULL, NULL), 0);
        char *path = prog_fmt("%s/s.u16", tmpdir);
        uint8_t *file = slurp_bytes(path, &flen);
        assert_int_equal(flen, 2 * (n + 1));
        assert_int_equal(file[0] | file[1] << 8, 258);
        for (size_t i = 0; i < n; i++) assert_int_equal(file[2 * i + 2] | file[2 * i + 3] << 8, ids[i]);
        free(args), free(file);
        args = prog_fmt("--decode --tokenizer '%s' '%s' '%s/s.txt'", specs[k], path, tmpdir);
        assert_int_equal(prog_run(tokenize, args, tmpdir, NULL, NULL), 0);
        char *back_path = prog_fmt("%s/s.txt", tmpdir);
        uint8_t *back = slurp_bytes(back_path, &flen);
        assert_int_equal(flen, 13 + len);
        assert_memory_equal(back, "<|endoftext|>", 13);
        assert_memory_equal(back + 13, text, len);
        free(args), free(path), free(back_path), free(back);
    }
    /* tools/make_tokens --tokenizer: the training file holds the first part's ids, through this program */
    const char *src = __FILE__, *slash = strrchr(src, '/');
    char *tool = prog_fmt("%.*s../tools/make_tokens", slash ? (int)(slash - src + 1) : 0, src);
    setenv("FSC_TOKENIZE", tokenize, 1);
    char *args = prog_fmt("--tokenizer '%s' --val 0.1 '%s' '%s/mt'", tj, corpus_abs, tmpdir), *out = NULL;
    assert_int_equal(prog_run(tool, args, tmpdir, &out, NULL), 0);
    unsetenv("FSC_TOKENIZE");
    char *tp = prog_fmt("%s/mt_train.bin", tmpdir), *vp = prog_fmt("%s/mt_val.bin", tmpdir);
    size_t tl, vl;
    uint8_t *t = slurp_bytes(tp, &tl), *v = slurp_bytes(vp, &vl);
    assert_true(vl > 0 && tl > 8 * vl && tl / 2 < n);
    for (size_t i = 0; i < tl / 2; i++) assert_int_equal(t[2 * i] | t[2 * i + 1] << 8, ids[i]);
    free(args), free(out);
    /* --val 0 leaves no validation file of an earlier run (it would pass for this text's), as without --tokenizer */
    setenv("FSC_TOKENIZE", tokenize, 1);
    args = prog_fmt("--tokenizer '%s' --val 0 '%s' '%s/mt'", tj, corpus_abs, tmpdir);
    assert_int_equal(prog_run(tool, args, tmpdir, &out, NULL), 0);
    unsetenv("FSC_TOKENIZE");
    if (access(vp, F_OK) == 0) fail_msg("make_tokens --tokenizer --val 0 left %s: %s", vp, out);
    free(args), free(out), free(tool), free(tp), free(vp), free(t), free(v);
    /* no end-of-text token: --eot refused */
    assert_int_equal(bpetest_write_tokenizer(tj, 0), 0);
    args = prog_fmt("--tokenizer '%s' --eot '%s' '%s/s.u16'", tj, corpus_abs, tmpdir);
    prog_refused(tokenize, args, tmpdir, 1, "has no end-of-text token");
    free(args);
    args = prog_fmt("--tokenizer '%s' --vocab '%s' '%s' '%s/s.u16'", tj, tj, corpus_abs, tmpdir);
    prog_refused(tokenize, args, tmpdir, 2, "give one --tokenizer");
    free(args);
    fsc_bpe_free(b);
    free(text), free(ids), free(dir), free(tj);
}

/* Sentencepiece's tokenizer.model: a text of 1.3 MB (the corpus and runs of emoji that become byte pieces)
 * encoded in pieces of 1 MiB and decoded in chunks of 65,536 ids gives the library's ids of the whole text and
 * the text back, --eot writes <s>, and --val's two files hold the ids of the whole */
static void test_tokenizer_spm(void **state) {
    char model[PATH_MAX];
    assert_non_null(realpath("tests/golden/spm_bpe.model", model));
    fsc_bpe *b;
    assert_ok(fsc_bpe_load_file(&b, model));
    size_t clen, len = 0, n, flen;
    uint8_t *corp = slurp_bytes(corpus, &clen);
    uint8_t *text = malloc(24 * (clen + 40001));
    assert_non_null(text);
    for (int r = 0; r < 24; r++) {
        memcpy(text + len, corp, clen), len += clen;
        for (int e = 0; e < 10000; e++) memcpy(text + len, "\xf0\x9f\x98\x80", 4), len += 4;
        text[len++] = '\n';
    }
    char *path = prog_fmt("%s/spm.txt", tmpdir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
    int32_t *ids = malloc(fsc_bpe_max_ids(b, len) * sizeof *ids);
    assert_ok(fsc_bpe_encode(b, text, len, ids, &n));
    assert_true(n > 8 * 65536);
    size_t inside = 0, tl; /* chunk boundaries of --decode that fall inside a character */
    for (size_t k = 65536; k < n; k += 65536) {
        const uint8_t *t = fsc_bpe_token(b, ids[k], &tl);
        inside += tl == 1 && (t[0] & 0xc0) == 0x80;
    }
    assert_true(inside >= 3);
    char *args = prog_fmt("--tokenizer '%s' --eot '%s' '%s/spm.u16'", model, path, tmpdir);
    assert_int_equal(prog_run(tokenize, args, tmpdir, NULL, NULL), 0);
    char *u16 = prog_fmt("%s/spm.u16", tmpdir);
    uint8_t *file = slurp_bytes(u16, &flen);
    assert_int_equal(flen, 2 * (n + 1));
    assert_int_equal(file[0] | file[1] << 8, fsc_bpe_eot(b)); /* <s> */
    for (size_t i = 0; i < n; i++)
        if ((file[2 * i + 2] | file[2 * i + 3] << 8) != ids[i])
            fail_msg("id %zu: %d, the library's %d", i, file[2 * i + 2] | file[2 * i + 3] << 8, ids[i]);
    free(args), free(file);
    args = prog_fmt("--decode --tokenizer '%s' '%s' '%s/spm.back'", model, u16, tmpdir);
    assert_int_equal(prog_run(tokenize, args, tmpdir, NULL, NULL), 0);
    char *back_path = prog_fmt("%s/spm.back", tmpdir);
    uint8_t *back = slurp_bytes(back_path, &flen);
    assert_int_equal(flen, len);
    assert_memory_equal(back, text, len);
    free(args), free(back);
    args = prog_fmt("--tokenizer '%s' --val 0.3 --val-out '%s/spm_v.u16' '%s' '%s/spm_t.u16'", model, tmpdir, path, tmpdir);
    assert_int_equal(prog_run(tokenize, args, tmpdir, NULL, NULL), 0);
    char *tp = prog_fmt("%s/spm_t.u16", tmpdir), *vp = prog_fmt("%s/spm_v.u16", tmpdir);
    size_t tlen, vlen;
    uint8_t *t = slurp_bytes(tp, &tlen), *v = slurp_bytes(vp, &vlen);
    assert_int_equal(tlen + vlen, 2 * n);
    assert_true(vlen > 0 && tlen > vlen);
    for (size_t i = 0; i < n; i++) {
        const uint8_t *at = 2 * i < tlen ? t + 2 * i : v + 2 * i - tlen;
        if ((at[0] | at[1] << 8) != ids[i]) fail_msg("--val: id %zu differs from the whole text's", i);
    }
    free(args), free(tp), free(vp), free(t), free(v), free(u16), free(back_path), free(path);
    free(ids), free(text), free(corp);
    fsc_bpe_free(b);
}

/* A sentencepiece model without byte fallback written byte by byte: <unk>, <s>, U+2581 and "a" (BPE, identity
 * normalization, a dummy prefix); its length. Anything else, "Z" and the newline here, is unknown. */
static size_t nofb_model(uint8_t *o) {
    static const char *const text[] = {"<unk>", "<s>", "\xe2\x96\x81", "a"};
    static const int type[] = {2, 3, 1, 1};
    size_t n = 0;
    for (int i = 0; i < 4; i++) {
        const size_t l = strlen(text[i]);
        o[n++] = 0x0a, o[n++] = (uint8_t)(l + 7 + (type[i] != 1) * 2); /* pieces: 1 piece, 2 score (0), 3 type */
        o[n++] = 0x0a, o[n++] = (uint8_t)l, memcpy(o + n, text[i], l), n += l;
        o[n++] = 0x15, memset(o + n, 0, 4), n += 4;
        if (type[i] != 1) o[n++] = 0x18, o[n++] = (uint8_t)type[i];
    }
    static const uint8_t specs[] = {0x12, 0x02, 0x18, 0x02,                                     /* BPE */
                                    0x1a, 0x0e, 0x0a, 0x08, 'i', 'd', 'e', 'n', 't', 'i', 't', 'y', /* identity */
                                    0x18, 0x01, 0x20, 0x00}; /* a dummy prefix, extra whitespace kept */
    memcpy(o + n, specs, sizeof specs);
    return n + sizeof specs;
}

/* A run of unknown text is one <unk> in the whole text (sentencepiece without byte fallback): also where the
 * program's pieces of 1 MiB cut it ("Z\n" lines: every character unknown) */
static void test_tokenizer_spm_unk_run(void **state) {
    uint8_t m[128];
    const size_t ml = nofb_model(m);
    char *model = prog_fmt("%s/nofb.model", tmpdir), *path = prog_fmt("%s/unk.txt", tmpdir);
    FILE *f = fopen(model, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(m, 1, ml, f), ml);
    assert_int_equal(fclose(f), 0);
    fsc_bpe *b;
    assert_ok(fsc_bpe_load_file(&b, model));
    assert_int_equal(fsc_bpe_unk(b), 0);
    const size_t len = 3 << 20;
    char *text = malloc(len);
    assert_non_null(text);
    for (size_t i = 0; i < len; i += 2) text[i] = 'Z', text[i + 1] = '\n';
    assert_true(fsc_bpe_split_point(text, len, 1 << 20) < len); /* the program cuts it */
    f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
    int32_t *ids = malloc(fsc_bpe_max_ids(b, len) * sizeof *ids);
    size_t n, flen;
    assert_ok(fsc_bpe_encode(b, text, len, ids, &n));
    assert_int_equal(n, 2); /* the dummy prefix's U+2581, then one <unk> */
    assert_int_equal(ids[1], 0);
    char *args = prog_fmt("--tokenizer '%s' '%s' '%s/unk.u16'", model, path, tmpdir);
    assert_int_equal(prog_run(tokenize, args, tmpdir, NULL, NULL), 0);
    char *u16 = prog_fmt("%s/unk.u16", tmpdir);
    uint8_t *file = slurp_bytes(u16, &flen);
    assert_int_equal(flen, 2 * n);
    for (size_t i = 0; i < n; i++) assert_int_equal(file[2 * i] | file[2 * i + 1] << 8, ids[i]);
    fsc_bpe_free(b);
    /* a model with byte fallback, a byte-level BPE: no such id */
    assert_ok(fsc_bpe_load_file(&b, "tests/golden/spm_bpe.model"));
    assert_int_equal(fsc_bpe_unk(b), -1);
    fsc_bpe_free(b);
    assert_ok(fsc_bpe_load_file(&b, "gpt2"));
    assert_int_equal(fsc_bpe_unk(b), -1);
    fsc_bpe_free(b);
    free(args), free(u16), free(file), free(ids), free(text), free(model), free(path);
}

/* --decode of ids whose first chunk of 65,536 has no text (control pieces): the next chunk still begins the text,
 * its first U+2581 dropped as the dummy prefix's, as the whole list decodes */
static void test_decode_textless_chunk(void **state) {
    fsc_bpe *b;
    assert_ok(fsc_bpe_load_file(&b, "tests/golden/spm_bpe.model"));
    const size_t nbos = 70000;
    int32_t *ids = malloc((nbos + 16) * sizeof *ids);
    uint16_t *u = malloc((nbos + 16) * sizeof *u);
    size_t n, len;
    for (size_t i = 0; i < nbos; i++) ids[i] = fsc_bpe_eot(b); /* <s>: no text */
    assert_ok(fsc_bpe_encode(b, "the end", 7, ids + nbos, &n));
    n += nbos;
    char want[16], *tokens = prog_fmt("%s/bos.u16", tmpdir), *out = prog_fmt("%s/bos.txt", tmpdir);
    assert_ok(fsc_bpe_decode(b, ids, n, want, sizeof want, &len));
    assert_int_equal(len, 7);
    for (size_t i = 0; i < n; i++) u[i] = (uint16_t)ids[i];
    FILE *f = fopen(tokens, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(u, 2, n, f), n);
    assert_int_equal(fclose(f), 0);
    char model[PATH_MAX];
    assert_non_null(realpath("tests/golden/spm_bpe.model", model));
    char *args = prog_fmt("--decode --tokenizer '%s' '%s' '%s'", model, tokens, out);
    assert_int_equal(prog_run(tokenize, args, tmpdir, NULL, NULL), 0);
    size_t flen;
    uint8_t *back = slurp_bytes(out, &flen);
    assert_int_equal(flen, len);
    assert_memory_equal(back, want, len);
    free(back), free(args), free(tokens), free(out), free(ids), free(u);
    fsc_bpe_free(b);
}

/* --decode of a sentencepiece model's ids in chunks of 65,536: a character its byte pieces spell (a 4-byte emoji
 * and then two stray continuation bytes) decodes as the whole list decodes wherever a chunk's end falls in it */
static void test_decode_cut_in_bytes(void **state) {
    char model[PATH_MAX];
    assert_non_null(realpath("tests/golden/spm_bpe.model", model));
    fsc_bpe *b;
    assert_ok(fsc_bpe_load_file(&b, model));
    int32_t byte_id[256], a;
    size_t n, tl;
    for (int c = 0; c < 256; c++) byte_id[c] = -1;
    for (int32_t id = 0; id < (int32_t)fsc_bpe_vocab(b); id++) { /* byte pieces: one byte of 0x80 or more */
        const uint8_t *t = fsc_bpe_token(b, id, &tl);
        if (t && tl == 1 && t[0] >= 0x80 && byte_id[t[0]] < 0) byte_id[t[0]] = id;
    }
    assert_ok(fsc_bpe_encode_more(b, "a", 1, &a, &n));
    assert_int_equal(n, 1);
    static const uint8_t run[] = { 0xf0, 0x9f, 0x98, 0x80, 0x80, 0x80 };
    enum { N = 65536 + 16 };
    int32_t *ids = malloc(N * sizeof *ids);
    uint16_t *u16 = malloc(N * sizeof *u16);
    char *want = malloc(4 * N), *path = prog_fmt("%s/cut.u16", tmpdir), *back = prog_fmt("%s/cut.txt", tmpdir);
    assert_true(ids && u16 && want);
    for (int at = 65536 - 6; at <= 65536; at++) { /* the run from at: the chunk's end before each of its bytes */
        for (int i = 0; i < N; i++) ids[i] = a;
        for (int i = 0; i < 6; i++) assert_true((ids[at + i] = byte_id[run[i]]) >= 0);
        for (int i = 0; i < N; i++) u16[i] = (uint16_t)ids[i];
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(u16, 2, N, f), N);
        assert_int_equal(fclose(f), 0);
        size_t wl;
        assert_ok(fsc_bpe_decode(b, ids, N, want, 4 * N, &wl));
        char *args = prog_fmt("--decode --tokenizer '%s' '%s' '%s'", model, path, back);
        assert_int_equal(prog_run(tokenize, args, tmpdir, NULL, NULL), 0);
        size_t gl;
        uint8_t *got = slurp_bytes(back, &gl);
        if (gl != wl || memcmp(got, want, wl) != 0) fail_msg("the run at id %d: the text differs from the whole list's", at);
        free(got), free(args);
    }
    free(ids), free(u16), free(want), free(path), free(back);
    fsc_bpe_free(b);
}

int main(int argc, char **argv) {
    (void)argc;
    if (prog_setup(argv[0], "test_tokenize", "tokenize", tokenize, sizeof tokenize, tmpdir, sizeof tmpdir)) return 1;
    snprintf(trainer, sizeof trainer, "%s/fsc-train", dirname(tokenize)); /* dirname cuts tokenize itself */
    snprintf(tokenize + strlen(tokenize), sizeof tokenize - strlen(tokenize), "/tokenize");
    if (!realpath(corpus, corpus_abs)) return fprintf(stderr, "test_tokenize: run from the repository root\n"), 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encode_u16_and_decode),
        cmocka_unit_test(test_encode_llmc_eot),
        cmocka_unit_test(test_val_split),
        cmocka_unit_test(test_trainer_reads_it),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_tokenizer_file),
        cmocka_unit_test(test_tokenizer_spm),
        cmocka_unit_test(test_tokenizer_spm_unk_run),
        cmocka_unit_test(test_decode_textless_chunk),
        cmocka_unit_test(test_decode_cut_in_bytes),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    test_rmtree(tmpdir);
    return rc;
}
