/* Tests of Hugging Face's BPE files in lib/text/ (fsc/bpe.h: vocab.json + merges.txt, tokenizer.json, and
 * fsc_bpe_load_file's choice between them). Run from the repository root.
 * The files are made here from GPT-2's tiktoken ranks (examples/data/gpt2.tiktoken.gz) the way Hugging Face's
 * converter makes them: vocab.json maps each token, written in GPT-2's byte-to-character alphabet, to its rank
 * (and <|endoftext|> to 50256); merges.txt lists, in rank order, the two parts tiktoken's merging of ranks
 * below a token's own gives its bytes. Oracles: tiktoken's ids on the golden texts (tests/golden/bpe_golden.h,
 * made by tests/gen_golden_bpe.py) from every format; a small vocabulary whose merge order is not its id order,
 * worked by hand from the BPE rule; damaged files refused with a message naming what is wrong. Llama 3's pattern
 * (its tokenizer.json's Split, or "llama3:" before a tiktoken file) over the same ranks gives tiktoken's ids with
 * that pattern (tests/golden/bpe_llama3_golden.h, made by tests/gen_golden_bpe_llama3.py). */
#include "testutil.h"
#include "golden/bpe_golden.h"
#include "golden/bpe_llama3_golden.h"
#include "text/bpe_impl.h"
#include "bpetest.h"

#define VOCAB "examples/data/" FSC_BPE_GPT2_FILE

static fsc_bpe *gpt2;
static char dir[64];

#define char_of bpetest_char_of

/* A token's bytes in that alphabet, as UTF-8, into f (quote and backslash escaped when json) */
static void put_token(FILE *f, const uint8_t *p, size_t len, int json) {
    for (size_t i = 0; i < len; i++) {
        unsigned cp = char_of(p[i]);
        if (json && (cp == '"' || cp == '\\')) fputc('\\', f);
        if (cp < 0x80) fputc((int)cp, f);
        else fputc((int)(0xc0 | cp >> 6), f), fputc((int)(0x80 | (cp & 0x3f)), f);
    }
}

/* The two parts tiktoken's merging with ranks below r gives the bytes of token r (Hugging Face's
 * convert_slow_tokenizer does the same): *split is the first part's length */
static void split_token(const uint8_t *p, size_t len, uint32_t r, size_t *split) {
    size_t pos[300], m = 0; /* parts start at pos[0..m) */
    for (size_t i = 0; i <= len; i++) pos[m++] = i;
    for (;;) {
        uint32_t best = BPE_NONE;
        size_t at = 0;
        for (size_t i = 0; i + 2 < m; i++) {
            uint32_t q = bpe_rank(gpt2, p + pos[i], pos[i + 2] - pos[i]);
            if (q < best) best = q, at = i;
        }
        if (best == BPE_NONE || best >= r) break;
        memmove(pos + at + 1, pos + at + 2, (m - at - 2) * sizeof *pos);
        m--;
    }
    if (m != 3) fail_msg("token %u does not merge from two parts (%zu)", r, m - 1);
    *split = pos[1];
}

static char *path_of(const char *name) {
    static char buf[8][256];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 256, "%s/%s", dir, name);
    return p;
}

/* vocab.json, merges.txt and tokenizer.json (merges as "a b") and tokenizer_arrays.json (as [a, b]) from GPT-2's ranks
 */
static void write_files(void) {
    FILE *v = fopen(path_of("vocab.json"), "w"), *m = fopen(path_of("merges.txt"), "w");
    FILE *t = fopen(path_of("tokenizer.json"), "w"), *ta = fopen(path_of("tokenizer_arrays.json"), "w");
    assert_true(v && m && t && ta);
    const char *head =
        "{\"version\": \"1.0\", \"truncation\": null, \"padding\": null, \"added_tokens\": [{\"id\": 50256, "
        "\"content\": \"<|endoftext|>\", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, "
        "\"normalized\": true, \"special\": true}], \"normalizer\": null, \"pre_tokenizer\": {\"type\": "
        "\"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": true}, "
        "\"post_processor\": null, \"decoder\": null, \"model\": {\"type\": \"BPE\", \"dropout\": null, "
        "\"unk_token\": null, \"continuing_subword_prefix\": \"\", \"end_of_word_suffix\": \"\", "
        "\"fuse_unk\": false, \"byte_fallback\": false, \"ignore_merges\": false, \"vocab\": {";
    fputs(head, t), fputs(head, ta);
    fputs("{", v);
    fputs("#version: 0.2\n", m);
    uint32_t n = (uint32_t)fsc_bpe_vocab(gpt2) - 1;
    for (uint32_t r = 0; r < n; r++) {
        size_t len;
        const uint8_t *p = fsc_bpe_token(gpt2, (int32_t)r, &len);
        FILE *fs[3] = {v, t, ta};
        for (int i = 0; i < 3; i++) {
            fputs(r ? ", \"" : "\"", fs[i]);
            put_token(fs[i], p, len, 1);
            fprintf(fs[i], "\": %u", r);
        }
    }
    fputs(", \"<|endoftext|>\": 50256}", v);
    fputs(", \"<|endoftext|>\": 50256}, \"merges\": [", t);
    fputs(", \"<|endoftext|>\": 50256}, \"merges\": [", ta);
    for (uint32_t r = 256; r < n; r++) {
        size_t len, cut;
        const uint8_t *p = fsc_bpe_token(gpt2, (int32_t)r, &len);
        split_token(p, len, r, &cut);
        put_token(m, p, cut, 0), fputc(' ', m), put_token(m, p + cut, len - cut, 0), fputc('\n', m);
        fputs(r > 256 ? ", \"" : "\"", t);
        put_token(t, p, cut, 1), fputc(' ', t), put_token(t, p + cut, len - cut, 1);
        fputs("\"", t);
        fputs(r > 256 ? ", [\"" : "[\"", ta);
        put_token(ta, p, cut, 1), fputs("\", \"", ta), put_token(ta, p + cut, len - cut, 1);
        fputs("\"]", ta);
    }
    fputs("]}}\n", t), fputs("]}}\n", ta);
    assert_int_equal(fclose(v) | fclose(m) | fclose(t) | fclose(ta), 0);
    /* tokenizer_llama3.json: tokenizer.json with Llama 3's pre-tokenizer, as Hugging Face writes it */
    FILE *in = fopen(path_of("tokenizer.json"), "rb"), *out = fopen(path_of("tokenizer_llama3.json"), "wb");
    assert_true(in && out);
    static char text[4 << 20];
    size_t len = fread(text, 1, sizeof text - 1, in);
    text[len] = '\0';
    const char *gpt2_pre =
        "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": true}";
    char *at = strstr(text, gpt2_pre);
    assert_non_null(at);
    fprintf(
        out, "%.*s%s%s", (int)(at - text), text,
        "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", "
        "\"pattern\": {\"Regex\": \"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| "
        "?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"}, \"behavior\": "
        "\"Isolated\", \"invert\": false}, {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": "
        "true, \"use_regex\": false}]}",
        at + strlen(gpt2_pre));
    assert_int_equal(fclose(in) | fclose(out), 0);
}

static char *prog_path_llama3_as_gpt2(void) {
    static char buf[300];
    snprintf(buf, sizeof buf, "gpt2:%s", path_of("tokenizer_llama3.json"));
    return buf;
}

static int setup(void **state) {
    if (fsc_bpe_load(&gpt2, VOCAB) != FSC_OK)
        return fprintf(stderr, "cannot load %s: %s\n", VOCAB, fsc_last_error()), -1;
    snprintf(dir, sizeof dir, "/tmp/fsc_bpe_hf_XXXXXX");
    if (!mkdtemp(dir)) return -1;
    write_files();
    return 0;
}

static int teardown(void **state) {
    const char *names[] = {"vocab.json", "merges.txt", "tokenizer.json", "tokenizer_arrays.json", "only/vocab.json",
                           "only/merges.txt", "tokenizer_llama3.json", "bom/tokenizer.json", "bom/vocab.json",
                           "bom/merges.txt"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) remove(path_of(names[i]));
    rmdir(path_of("only"));
    rmdir(path_of("bom"));
    rmdir(dir);
    fsc_bpe_free(gpt2);
    return 0;
}

/* b gives the golden ids on every golden text and decodes them back */
static void assert_golden(const fsc_bpe *b, const char *what, const bpe_gold *golds, size_t ngolds) {
    for (size_t g = 0; g < ngolds; g++) {
        const bpe_gold *w = &golds[g];
        int32_t *ids = malloc((w->len + 1) * sizeof *ids);
        size_t n;
        assert_ok(fsc_bpe_encode(b, w->text, w->len, ids, &n));
        for (size_t i = 0; i < n && i < w->n; i++)
            if (ids[i] != w->ids[i])
                fail_msg("%s: text %zu: id %zu is %d, tiktoken's %d", what, g, i, ids[i], w->ids[i]);
        if (n != w->n) fail_msg("%s: text %zu: %zu ids, tiktoken %zu", what, g, n, w->n);
        char *back = malloc(w->len + 1);
        size_t got;
        assert_ok(fsc_bpe_decode(b, ids, n, back, w->len + 1, &got));
        assert_int_equal(got, w->len);
        assert_memory_equal(back, w->text, w->len);
        free(back), free(ids);
    }
}

/* ... tiktoken's GPT-2 ids, and GPT-2's tokens by id */
static void assert_gpt2(const fsc_bpe *b, const char *what) {
    if (fsc_bpe_vocab(b) != 50257 || fsc_bpe_eot(b) != 50256)
        fail_msg("%s: vocabulary %zu, end of text %d", what, fsc_bpe_vocab(b), (int)fsc_bpe_eot(b));
    for (int32_t id = 0; id < 50257; id += 1 + id % 7) {
        size_t l1, l2;
        const uint8_t *t1 = fsc_bpe_token(b, id, &l1), *t2 = fsc_bpe_token(gpt2, id, &l2);
        if (l1 != l2 || memcmp(t1, t2, l1) != 0) fail_msg("%s: token %d differs from GPT-2's", what, (int)id);
    }
    assert_golden(b, what, bpe_golds, sizeof bpe_golds / sizeof bpe_golds[0]);
}

/* Llama 3's pattern: "llama3:" before the tiktoken file (Meta's 256 special tokens after the ranks), and a
 * tokenizer.json whose pre-tokenizer is Llama 3's (found by its regex), give tiktoken's ids with that pattern */
static void test_llama3(void **state) {
    fsc_bpe *b = NULL;
    assert_ok(fsc_bpe_load_file(&b, "llama3:" VOCAB));
    assert_int_equal(b->pattern, BPE_PATTERN_LLAMA3);
    assert_int_equal(fsc_bpe_vocab(b), 50256 + 256);
    assert_int_equal(fsc_bpe_eot(b), 50257);
    const struct { int32_t id; const char *name; } specials[] = {
        {50256, "<|begin_of_text|>"}, {50257, "<|end_of_text|>"}, {50262, "<|start_header_id|>"},
        {50265, "<|eot_id|>"}, {50266, "<|reserved_special_token_5|>"}, {50511, "<|reserved_special_token_250|>"}};
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++) {
        size_t len;
        const uint8_t *t = fsc_bpe_token(b, specials[i].id, &len);
        if (!t || len != strlen(specials[i].name) || memcmp(t, specials[i].name, len) != 0)
            fail_msg("token %d is \"%.*s\", not %s", (int)specials[i].id, (int)len, t ? (const char *)t : "",
                     specials[i].name);
    }
    assert_golden(b, "llama3:gpt2.tiktoken.gz", bpe_llama3_golds, sizeof bpe_llama3_golds / sizeof bpe_llama3_golds[0]);
    fsc_bpe *named = NULL; /* "llama3:gpt2": the vocabulary "gpt2" names (docs/tokenizer.md: llama3:FILE) */
    assert_ok(fsc_bpe_load_file(&named, "llama3:gpt2"));
    assert_int_equal(named->pattern, BPE_PATTERN_LLAMA3);
    assert_int_equal(fsc_bpe_vocab(named), fsc_bpe_vocab(b));
    assert_golden(named, "llama3:gpt2", bpe_llama3_golds, sizeof bpe_llama3_golds / sizeof bpe_llama3_golds[0]);
    fsc_bpe_free(named);
    /* fsc_bpe_split_point's cuts keep the ids with Llama 3's pattern too (a text with digits and punctuation
     * before newlines) */
    FILE *f = fopen("examples/data/coriolanus.txt", "rb");
    assert_non_null(f);
    static char text[1 << 16];
    size_t len = fread(text, 1, sizeof text, f), n, m = 0, cuts = 0;
    fclose(f);
    int32_t *whole = malloc(len * sizeof *whole), *parts = malloc(len * sizeof *parts);
    assert_ok(fsc_bpe_encode(b, text, len, whole, &n));
    for (size_t at = 0; at < len; cuts++) {
        size_t end = fsc_bpe_split_point(text, len, at + 1 + at % 89), k;
        assert_ok(fsc_bpe_encode(b, text + at, end - at, parts + m, &k));
        m += k, at = end;
    }
    assert_true(cuts > 50);
    assert_int_equal(m, n);
    assert_memory_equal(parts, whole, n * sizeof *whole);
    free(whole), free(parts);
    fsc_bpe_free(b);
    assert_ok(fsc_bpe_load_file(&b, path_of("tokenizer_llama3.json")));
    assert_int_equal(b->pattern, BPE_PATTERN_LLAMA3);
    assert_golden(b, "tokenizer_llama3.json", bpe_llama3_golds, sizeof bpe_llama3_golds / sizeof bpe_llama3_golds[0]);
    fsc_bpe_free(b);
    /* "gpt2:" overrides the file's pre-tokenizer: GPT-2's ids again */
    assert_ok(fsc_bpe_load_file(&b, prog_path_llama3_as_gpt2()));
    assert_gpt2(b, "gpt2:tokenizer_llama3.json");
    fsc_bpe_free(b);
}

static void test_hf_vocab_merges(void **state) {
    fsc_bpe *b = NULL;
    assert_ok(fsc_bpe_load_hf(&b, path_of("vocab.json"), path_of("merges.txt")));
    assert_non_null(b->prio); /* the merges' ranks, not the ids */
    assert_gpt2(b, "vocab.json + merges.txt");
    fsc_bpe_free(b);
}

static void test_hf_tokenizer_json(void **state) {
    fsc_bpe *b = NULL;
    assert_ok(fsc_bpe_load_tokenizer_json(&b, path_of("tokenizer.json")));
    assert_gpt2(b, "tokenizer.json");
    fsc_bpe_free(b);
    assert_ok(fsc_bpe_load_tokenizer_json(&b, path_of("tokenizer_arrays.json")));
    assert_gpt2(b, "tokenizer.json, merges as arrays");
    fsc_bpe_free(b);
}

/* fsc_bpe_load_file finds the format: a folder, each file, the tiktoken file, and the name gpt2 */
static void test_hf_load_file(void **state) {
    assert_int_equal(mkdir(path_of("only"), 0700), 0);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s' '%s/only/'", path_of("vocab.json"), path_of("merges.txt"), dir);
    assert_int_equal(system(cmd), 0);
    const char *specs[] = {dir, path_of("only"), path_of("tokenizer.json"), path_of("only/vocab.json"),
                           path_of("only/merges.txt"), VOCAB, "gpt2", "gpt2:examples/data/gpt2.tiktoken.gz",
                           "gpt2:gpt2"};
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        fsc_bpe *b = NULL;
        assert_ok(fsc_bpe_load_file(&b, specs[i]));
        assert_gpt2(b, specs[i]);
        assert_int_equal(b->pattern, BPE_PATTERN_GPT2);
        fsc_bpe_free(b);
    }
    fsc_bpe *b = (fsc_bpe *)&b;
    assert_err(fsc_bpe_load_file(&b, "no/such/tokenizer.json"), FSC_ERR_IO, "no/such/tokenizer.json");
    assert_null(b);
    remove(path_of("only/merges.txt"));
    assert_err(fsc_bpe_load_file(&b, path_of("only/vocab.json")), FSC_ERR_IO, "merges.txt is not there");
    assert_int_equal(mkfifo(path_of("only/merges.txt"), 0600), 0); /* there, but no file: said so (not "not there") */
    assert_err(fsc_bpe_load_file(&b, path_of("only/vocab.json")), FSC_ERR_IO, "merges.txt is not a regular file");
    remove(path_of("only/merges.txt"));
    assert_err(fsc_bpe_load_file(&b, path_of("only")), FSC_ERR_IO,
               "neither tokenizer.json nor vocab.json and merges.txt");
}

/* dst: src's bytes after a UTF-8 byte order mark (EF BB BF), as an editor may save a file */
static void write_with_bom(const char *src, const char *dst) {
    FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
    assert_true(in && out);
    fputs("\xef\xbb\xbf", out);
    char buf[65536];
    for (size_t n; (n = fread(buf, 1, sizeof buf, in)) > 0;) assert_int_equal(fwrite(buf, 1, n, out), n);
    assert_int_equal(fclose(in) | fclose(out), 0);
}

/* Each Hugging Face file with a byte order mark first reads as without: fsc_bpe_load_file tells the formats
 * apart after it (a tokenizer.json is not taken for a tiktoken file), and the readers skip it */
static void test_hf_bom(void **state) {
    assert_int_equal(mkdir(path_of("bom"), 0700), 0);
    write_with_bom(path_of("tokenizer.json"), path_of("bom/tokenizer.json"));
    write_with_bom(path_of("vocab.json"), path_of("bom/vocab.json"));
    write_with_bom(path_of("merges.txt"), path_of("bom/merges.txt"));
    const char *specs[] = {path_of("bom/tokenizer.json"), path_of("bom/vocab.json"), path_of("bom/merges.txt")};
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        fsc_bpe *b = NULL;
        if (fsc_bpe_load_file(&b, specs[i]) != FSC_OK) fail_msg("%s: %s", specs[i], fsc_last_error());
        assert_gpt2(b, specs[i]);
        fsc_bpe_free(b);
    }
    fsc_bpe *b = NULL;
    assert_ok(fsc_bpe_load_tokenizer_json(&b, path_of("bom/tokenizer.json")));
    assert_gpt2(b, "tokenizer.json after a BOM");
    fsc_bpe_free(b);
    assert_ok(fsc_bpe_load_hf(&b, path_of("bom/vocab.json"), path_of("bom/merges.txt")));
    assert_gpt2(b, "vocab.json + merges.txt after a BOM");
    fsc_bpe_free(b);
    /* a message's byte counts from the file's start, the mark included: 3 more than without it */
    assert_err(fsc_bpe_load_tokenizer_json_memory(&b, "{\"model\": ", 10), FSC_ERR_FORMAT,
               "not valid JSON (line 1, byte 9)");
    assert_err(fsc_bpe_load_tokenizer_json_memory(&b, "\xef\xbb\xbf{\"model\": ", 13), FSC_ERR_FORMAT,
               "not valid JSON (line 1, byte 12)");
}

#define byte_entries bpetest_byte_entries

/* A small vocabulary whose merges come in another order than its ids: "a b" is merge 0 (id 257), "b c" merge
 * 1 (id 256). The BPE rule joins the lowest merge first: "abc" is "ab" + "c", "bcd" is "bc" + "d". Ranking
 * by id instead would give "a" + "bc". A token no merge makes ("cd", id 258) is never given to text. */
static char *small_vocab(const char *extra) {
    static char buf[8192];
    snprintf(buf, sizeof buf, "{%s, \"bc\": 256, \"ab\": 257, \"cd\": 258%s}", byte_entries(), extra);
    return buf;
}

#define SMALL_ID(c) (c) /* the byte c's id in small_vocab */

static void test_hf_merge_order(void **state) {
    char *v = small_vocab("");
    const char *merges = "#version: 0.2\na b\nb c\n";
    fsc_bpe *b = NULL;
    assert_ok(fsc_bpe_load_hf_memory(&b, v, strlen(v), merges, strlen(merges)));
    assert_int_equal(fsc_bpe_vocab(b), 259);
    assert_int_equal(fsc_bpe_eot(b), -1);
    int32_t ids[8];
    size_t n;
    assert_ok(fsc_bpe_encode(b, "abc", 3, ids, &n));
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], 257);
    assert_int_equal(ids[1], SMALL_ID('c'));
    assert_ok(fsc_bpe_encode(b, "bcd", 3, ids, &n));
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], 256);
    assert_int_equal(ids[1], SMALL_ID('d'));
    assert_ok(fsc_bpe_encode(b, "cd", 2, ids, &n)); /* "cd" is in the vocabulary, but no merge makes it */
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], SMALL_ID('c'));
    assert_int_equal(ids[1], SMALL_ID('d'));
    size_t len;
    const uint8_t *t = fsc_bpe_token(b, 258, &len);
    assert_int_equal(len, 2);
    assert_memory_equal(t, "cd", 2);
    fsc_bpe_free(b);
    /* the other order of merges: "bc" first */
    merges = "b c\na b\n";
    assert_ok(fsc_bpe_load_hf_memory(&b, v, strlen(v), merges, strlen(merges)));
    assert_ok(fsc_bpe_encode(b, "abc", 3, ids, &n));
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], SMALL_ID('a'));
    assert_int_equal(ids[1], 256);
    fsc_bpe_free(b);
}

static fsc_status load_hf(const char *vocab, const char *merges) {
    fsc_bpe *b = (fsc_bpe *)&b;
    fsc_status s = fsc_bpe_load_hf_memory(&b, vocab, strlen(vocab), merges, strlen(merges));
    if (s != FSC_OK) assert_null(b);
    fsc_bpe_free(s == FSC_OK ? b : NULL);
    return s;
}

static fsc_status load_tj(const char *text) {
    fsc_bpe *b = (fsc_bpe *)&b;
    fsc_status s = fsc_bpe_load_tokenizer_json_memory(&b, text, strlen(text));
    if (s != FSC_OK) assert_null(b);
    fsc_bpe_free(s == FSC_OK ? b : NULL);
    return s;
}

/* A tokenizer.json of the bytes (0 .. 255), "ab" (256) and <|endoftext|> (257, added), with additions */
static char *tj(const char *model_extra, const char *root_extra, const char *pre) {
    static char buf[16384];
    snprintf(buf, sizeof buf,
             "{%s\"normalizer\": null, \"pre_tokenizer\": %s, \"added_tokens\": [{\"id\": 257, "
             "\"content\": \"<|endoftext|>\", \"special\": true}], \"model\": {\"type\": \"BPE\"%s, \"vocab\": {%s, "
             "\"ab\": 256}, \"merges\": [\"a b\"]}}",
             root_extra, pre ? pre : "{\"type\": \"ByteLevel\", \"add_prefix_space\": false}", model_extra,
             byte_entries());
    return buf;
}

/* s with its first "from" replaced by "to" (static storage) */
static char *subst(const char *s, const char *from, const char *to) {
    static char buf[20000];
    const char *at = strstr(s, from);
    if (!at) fail_msg("\"%s\" is not in the text", from);
    snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - s), s, to, at + strlen(from));
    return buf;
}

static void test_hf_refusals(void **state) {
    char *w;
    assert_ok(load_tj(tj("", "", NULL)));
    {
        fsc_bpe *b;
        const char *t = tj("", "", NULL);
        assert_ok(fsc_bpe_load_tokenizer_json_memory(&b, t, strlen(t)));
        assert_int_equal(fsc_bpe_vocab(b), 258);
        assert_int_equal(fsc_bpe_eot(b), 257);
        int32_t ids[16];
        size_t n;
        assert_ok(fsc_bpe_encode(b, "xab<|endoftext|>", 16, ids, &n)); /* the special token's text is text */
        assert_int_equal(n, 15);
        assert_int_equal(ids[1], 256);
        fsc_bpe_free(b);
    }
    { /* a token no merge makes: with model.ignore_merges (Llama 3's) a piece that is that token is it, as Hugging
       * Face encodes it; without, the merges' bytes */
        for (int ignore = 0; ignore < 2; ignore++) {
            char *t = strdup(subst(tj(ignore ? ", \"ignore_merges\": true" : ", \"ignore_merges\": false", "", NULL),
                                   "\"ab\": 256", "\"ab\": 256, \"xy\": 258"));
            assert_non_null(t);
            fsc_bpe *b;
            assert_ok(fsc_bpe_load_tokenizer_json_memory(&b, t, strlen(t)));
            int32_t ids[4];
            size_t n;
            assert_ok(fsc_bpe_encode(b, "xy", 2, ids, &n));
            assert_int_equal(n, ignore ? 1 : 2);
            if (ignore) assert_int_equal(ids[0], 258);
            assert_ok(fsc_bpe_encode(b, "ab", 2, ids, &n)); /* merged either way */
            assert_int_equal(n, 1);
            assert_int_equal(ids[0], 256);
            fsc_bpe_free(b);
            free(t);
        }
        assert_err(load_tj(tj(", \"ignore_merges\": 1", "", NULL)), FSC_ERR_FORMAT, "ignore_merges is not true or false");
    }
    assert_err(load_tj("{\"model\": "), FSC_ERR_FORMAT, "tokenizer.json: not valid JSON (line 1");
    /* a NUL in a token: cJSON would cut the string there (an added token "ab\0cd" decoded as "ab") */
    w = tj("", "", NULL);
    assert_err(load_tj(subst(w, "<|endoftext|>", "ab\\u0000cd")), FSC_ERR_FORMAT, "a string holds \\u0000 (line 1");
    w = tj("", "", NULL);
    assert_err(load_tj(subst(w, "\"ab\": 256", "\"ab\\u0000\": 256")), FSC_ERR_FORMAT, "a string holds \\u0000");
    w = tj("", "", NULL); /* an escaped backslash then u0000 is text: an added token of those 6 characters */
    {
        fsc_bpe *b;
        const char *t = subst(w, "<|endoftext|>", "\\\\u0000");
        assert_ok(fsc_bpe_load_tokenizer_json_memory(&b, t, strlen(t)));
        size_t tl;
        const uint8_t *tok = fsc_bpe_token(b, 257, &tl);
        assert_int_equal(tl, 6);
        assert_memory_equal(tok, "\\u0000", 6);
        fsc_bpe_free(b);
    }
    assert_err(load_tj("[1, 2]"), FSC_ERR_FORMAT, "no \"model\" object");
    /* dropout null (as written above) or 0 is none: read; any other value is refused, naming it */
    assert_ok(load_tj(tj(", \"dropout\": 0.0", "", NULL)));
    assert_ok(load_tj(tj(", \"dropout\": 0", "", NULL)));
    assert_err(load_tj(tj(", \"dropout\": 0.1", "", NULL)), FSC_ERR_FORMAT, "model.dropout is 0.1: fsc's BPE has no");
    assert_err(load_tj(tj(", \"dropout\": -0.5", "", NULL)), FSC_ERR_FORMAT, "model.dropout is -0.5");
    assert_err(load_tj(tj(", \"dropout\": \"0.1\"", "", NULL)), FSC_ERR_FORMAT, "model.dropout is not a number");
    assert_err(load_tj(tj(", \"continuing_subword_prefix\": \"##\"", "", NULL)), FSC_ERR_FORMAT,
               "continuing_subword_prefix");
    assert_err(load_tj(tj(", \"byte_fallback\": true", "", NULL)), FSC_ERR_FORMAT, "byte_fallback is true");
    assert_err(load_tj(tj("", "\"normalizer\": {\"type\": \"NFC\"}, ", NULL)), FSC_ERR_FORMAT, "a normalizer");
    assert_err(load_tj(tj("", "", "{\"type\": \"ByteLevel\"}")), FSC_ERR_FORMAT, "add_prefix_space");
    assert_err(load_tj(tj("", "", "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false}")),
               FSC_ERR_FORMAT, "use_regex");
    assert_err(load_tj(tj("", "", "{\"type\": \"Whitespace\"}")), FSC_ERR_FORMAT, "pre_tokenizer \"Whitespace\"");
    assert_err(load_tj(tj("", "", "null")), FSC_ERR_FORMAT, "pre_tokenizer \"none\"");
    w = tj("", "", NULL);
    memcpy(strstr(w, "\"type\": \"BPE\""), "\"type\": \"WPE\"", 13);
    assert_err(load_tj(w), FSC_ERR_FORMAT, "model.type is \"WPE\": fsc reads BPE models");
    w = tj("", "", NULL);
    memcpy(strstr(w, "[\"a b\"]"), "[\"a x\"]", 7);
    assert_err(load_tj(w), FSC_ERR_FORMAT, "merge 0: \"a x\" makes a token that is not in the vocabulary");
    w = tj("", "", NULL);
    memcpy(strstr(w, "\"a b\"]"), "\"a\xc4\xa0\"]", 6); /* one part, "aĠ": no space */
    assert_err(load_tj(w), FSC_ERR_FORMAT, "merge 0: expected two tokens and one space between");
    w = tj("", "", NULL);
    memcpy(strstr(w, "[\"a b\"]"), "[[\"a\"]]", 7);
    assert_err(load_tj(w), FSC_ERR_FORMAT, "merge 0: neither \"a b\" nor [\"a\", \"b\"]");
    w = tj("", "", NULL);
    memcpy(strstr(w, "\"ab\": 256"), "\"ab\": 257", 9);
    assert_err(load_tj(w), FSC_ERR_FORMAT, "id 257, but there are 257 tokens"); /* the added token holds 257 */
    w = tj("", "", NULL);
    memcpy(strstr(w, "\"ab\": 256"), "\"ab\": 1e9", 9);
    assert_err(load_tj(w), FSC_ERR_FORMAT, "token \"ab\": the id is not a whole number");
    w = tj("", "", NULL);
    memcpy(strstr(w, "\"ab\": 256"), "\"ab\": 2.5", 9);
    assert_err(load_tj(w), FSC_ERR_FORMAT, "token \"ab\": the id is not a whole number");
    w = tj("", "", NULL);
    /* ids must be 0 .. n-1: nothing is sized by the largest */
    assert_err(load_tj(subst(tj("", "", NULL), "\"ab\": 256", "\"ab\": 4000000")), FSC_ERR_FORMAT,
               "id 4000000, but there are 258 tokens");

    /* vocab.json and merges.txt with one change */
    char vj[8192], tmp[8300];
    snprintf(vj, sizeof vj, "{%s, \"ab\": 256", byte_entries());
    assert_ok(load_hf(strcat(strcpy(tmp, vj), "}"), "a b\n"));
    assert_err(load_hf(strcat(strcpy(tmp, vj), "}"), "a b\na q\n"), FSC_ERR_FORMAT,
               "merges.txt: line 2: \"a q\" makes a token that is not in the vocabulary");
    assert_err(load_hf(strcat(strcpy(tmp, vj), "}"), "a b\nab \xc3\xa9\xc3\xa9\n"), FSC_ERR_FORMAT,
               "line 2: \"\xc3\xa9\xc3\xa9\" is not in the vocabulary");
    assert_err(load_hf(strcat(strcpy(tmp, vj), "}"), "a \xe2\x96\x81\n"), FSC_ERR_FORMAT,
               "U+2581 is no character of GPT-2's byte-level alphabet");
    assert_err(load_hf(strcat(strcpy(tmp, vj), ", \"ba\": 256}"), "a b\n"), FSC_ERR_FORMAT,
               "id 256 twice (\"ab\" and \"ba\")");
    assert_err(load_hf(strcat(strcpy(tmp, vj), ", \"ab\": 257}"), "a b\n"), FSC_ERR_FORMAT,
               "ids 256 and 257 are the same token");
    assert_err(load_hf(strcat(strcpy(tmp, vj), ", \"x\": \"7\"}"), "a b\n"), FSC_ERR_FORMAT,
               "token \"x\": the id is not");
    assert_err(load_hf(strcat(strcpy(tmp, vj), ", \"\": 257}"), "a b\n"), FSC_ERR_FORMAT, "an empty token");
    assert_err(load_hf(strcat(strcpy(tmp, vj), "]"), "a b\n"), FSC_ERR_FORMAT, "vocab.json: not valid JSON");
    assert_err(load_hf("[1]", "a b\n"), FSC_ERR_FORMAT, "not a JSON object");
    char *big = malloc(2000);
    memset(big, 'a', 1000);
    snprintf(big + 1000, 1000, "\": 257}");
    char *long_vocab = malloc(10000);
    assert_err(load_hf(strcat(strcat(strcpy(long_vocab, vj), ", \""), big), "a b\n"), FSC_ERR_FORMAT,
               "more than 256 bytes");
    free(big), free(long_vocab);
    /* the byte 'q' missing: not byte-level */
    assert_err(load_hf(strcat(strcpy(tmp, subst(vj, "\"q\": 113", "\"bq\": 113")), "}"), "a b\n"), FSC_ERR_FORMAT,
               "the byte 0x71 is no token");
}

/* The fuzz harness's seeds (fuzz/corpus/bpe_hf/, fuzz/fuzz_bpe_hf.c's layout: a first byte even, then a
 * tokenizer.json; odd, then vocab.json's length in two bytes, vocab.json and merges.txt) are tokenizers that load,
 * so that the fuzzer starts from inputs that reach encoding rather than from refusals. */
static void test_fuzz_seeds_load(void **state) {
    static const char *const seeds[] = { "tokenizer_gpt2", "tokenizer_llama3", "vocab_merges" };
    for (int k = 0; k < 3; k++) {
        char path[128];
        snprintf(path, sizeof path, "fuzz/corpus/bpe_hf/%s", seeds[k]);
        FILE *f = fopen(path, "rb");
        assert_non_null(f);
        static uint8_t buf[1 << 16];
        size_t n = fread(buf, 1, sizeof buf, f);
        fclose(f);
        assert_true(n > 3 && n < sizeof buf);
        fsc_bpe *b = NULL;
        fsc_status s;
        if (buf[0] % 2 == 0) {
            s = fsc_bpe_load_tokenizer_json_memory(&b, buf + 1, n - 1);
        } else {
            size_t vlen = (size_t)buf[1] | (size_t)buf[2] << 8;
            assert_true(3 + vlen <= n);
            s = fsc_bpe_load_hf_memory(&b, buf + 3, vlen, buf + 3 + vlen, n - 3 - vlen);
        }
        if (s != FSC_OK) fail_msg("%s: %s", path, fsc_last_error());
        assert_true(fsc_bpe_vocab(b) > 256);
        fsc_bpe_free(b);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hf_vocab_merges),
        cmocka_unit_test(test_hf_tokenizer_json),
        cmocka_unit_test(test_hf_load_file),
        cmocka_unit_test(test_hf_bom),
        cmocka_unit_test(test_hf_merge_order),
        cmocka_unit_test(test_hf_refusals),
        cmocka_unit_test(test_llama3),
        cmocka_unit_test(test_fuzz_seeds_load),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
