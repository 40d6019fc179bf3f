/* Tests of sampling (lib/core/generate.c, the sampler examples/sample.c).
 *
 * Oracles:
 * - greedy generation (--temperature 0) from the weights of tests/golden/hf_gpt2.safetensors and
 *   hf_llama.safetensors (Hugging Face state dicts, the configuration given with --model-config) gives exactly the
 *   tokens the float64 PyTorch references choose (tests/gen_golden_sample.py; every choice leads the runner-up by
 *   at least 1e-3, so float32 cannot flip it), over more tokens than the context window (the window slides);
 * - the same seed gives the same text, another seed another text (temperature 1), top-k 1 is greedy;
 * - fsc_sample_token draws token v with probability softmax(logits / temperature)[v] (frequencies over 4000
 *   keyed draws within 0.03), never outside the top k, and greedy takes the lowest index of the maximum; +inf
 *   logits share every draw (softmax's limit);
 * - a file the trainer saved records its model: the sampler needs no --model-config and reads a byte model's prompt as
 *   text; a file without a record, an out-of-range token id and a missing --model are refused with a message;
 * - a recorded configuration that does not describe the file's tensors is refused before the model is allocated;
 * - a checkpoint directory whose newest checkpoint is damaged samples as the one before, with a warning;
 * - a full-format checkpoint's model.safetensors, alone, samples as its checkpoint;
 * - a token out of the vocabulary in the window of a longer sequence is refused naming where the window starts. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include "trainertest.h"
#include "bpetest.h"
#include "fsc/generate.h"
#include "golden/sample_golden.h"

static char sampler[PATH_MAX], trainer[PATH_MAX], tmpdir[256];

static void golden_path(char *buf, size_t cap, const char *file) {
    const char *src = __FILE__, *slash = strrchr(src, '/');
    snprintf(buf, cap, "%.*sgolden/%s", slash ? (int)(slash - src + 1) : 0, src, file);
}

/* The sampler's stdout for a model file and options; fails the test when it exits non-zero. */
static char *sample(const char *file, const char *config, const char *opts) {
    char path[PATH_MAX], *args = NULL, *out = NULL, *err = NULL;
    golden_path(path, sizeof path, file);
    if (asprintf(&args, "--model '%s' %s%s%s %s", file[0] == '/' ? file : path, config ? "--model-config '" : "",
                 config ? config : "", config ? "'" : "", opts) < 0)
        fail_msg("out of memory");
    int rc = prog_run(sampler, args, tmpdir, &out, &err);
    if (rc != 0) fail_msg("sample %s: exit %d\n%s", args, rc, err);
    free(args), free(err);
    char *nl = strrchr(out, '\n');
    if (nl && nl[1] == 0) *nl = 0;
    return out;
}

static void test_greedy_matches_pytorch(void **st) {
    (void)st;
    char opts[256];
    snprintf(opts, sizeof opts, "--prompt %s --tokens %d --temperature 0", SG_PROMPT, SG_NEW);
    char *g = sample("hf_gpt2.safetensors", SG_GPT_CONFIG, opts);
    assert_string_equal(g, SG_GPT_TOKENS);
    char *l = sample("hf_llama.safetensors", SG_LLAMA_CONFIG, opts);
    assert_string_equal(l, SG_LLAMA_TOKENS);
    /* top-k 1 at any temperature is greedy */
    snprintf(opts, sizeof opts, "--prompt %s --tokens %d --temperature 1.5 --top-k 1 --seed 9", SG_PROMPT, SG_NEW);
    char *k1 = sample("hf_gpt2.safetensors", SG_GPT_CONFIG, opts);
    assert_string_equal(k1, SG_GPT_TOKENS);
    free(g), free(l), free(k1);
}

static void test_seeds(void **st) {
    (void)st;
    char *a = sample("hf_gpt2.safetensors", SG_GPT_CONFIG, "--prompt 5 --tokens 24 --temperature 1 --seed 1");
    char *b = sample("hf_gpt2.safetensors", SG_GPT_CONFIG, "--prompt 5 --tokens 24 --temperature 1 --seed 1");
    char *c = sample("hf_gpt2.safetensors", SG_GPT_CONFIG, "--prompt 5 --tokens 24 --temperature 1 --seed 2");
    assert_string_equal(a, b);
    if (!strcmp(a, c)) fail_msg("seeds 1 and 2 gave the same 24 tokens: %s", a);
    free(a), free(b), free(c);
}

/* Frequencies of keyed draws against softmax(logits / temperature). */
static void test_sample_token(void **st) {
    (void)st;
    const float lg[4] = { logf(0.1f), logf(0.3f), logf(0.6f), logf(0.6f) - 30.0f };
    float scratch[4];
    fsc_sample_opts o = { .temperature = 1.0f, .seed = 7 };
    int count[4] = { 0 };
    const int N = 4000;
    for (int s = 0; s < N; s++) {
        int32_t v = fsc_sample_token(lg, 4, &o, (uint64_t)s, scratch);
        assert_true(v >= 0 && v < 4);
        count[v]++;
    }
    const double p[3] = { 0.1, 0.3, 0.6 };
    for (int v = 0; v < 3; v++)
        if (fabs(count[v] / (double)N - p[v]) > 0.03) fail_msg("token %d drawn %d of %d times, p = %g", v, count[v], N, p[v]);
    /* temperature 2: p ~ sqrt(p) normalized */
    o.temperature = 2.0f;
    memset(count, 0, sizeof count);
    for (int s = 0; s < N; s++) count[fsc_sample_token(lg, 4, &o, (uint64_t)s, scratch)]++;
    double z = sqrt(0.1) + sqrt(0.3) + sqrt(0.6);
    for (int v = 0; v < 3; v++)
        if (fabs(count[v] / (double)N - sqrt(p[v]) / z) > 0.03) fail_msg("T=2: token %d drawn %d times", v, count[v]);
    /* top-k 2 never draws the third */
    o.temperature = 1.0f, o.top_k = 2;
    for (int s = 0; s < N; s++) {
        int32_t v = fsc_sample_token(lg, 4, &o, (uint64_t)s, scratch);
        assert_true(v == 1 || v == 2);
    }
    /* the same (seed, step) draws the same token; greedy takes the lowest index of the maximum */
    o.top_k = 0;
    assert_int_equal(fsc_sample_token(lg, 4, &o, 17, scratch), fsc_sample_token(lg, 4, &o, 17, scratch));
    const float tie[3] = { 1.0f, 2.0f, 2.0f };
    o.temperature = 0.0f;
    assert_int_equal(fsc_sample_token(tie, 3, &o, 0, scratch), 1);
    o.temperature = -1.0f;
    assert_int_equal(fsc_sample_token(tie, 3, &o, 0, scratch), -1);
    /* logits of no use: a NaN anywhere, or every one -inf, picks nothing (it gave token 2, 0 or 3) */
    const float nan1[3] = { 1.0f, NAN, 2.0f }, ninf[3] = { -INFINITY, -INFINITY, -INFINITY };
    for (int t = 0; t < 2; t++) {
        o.temperature = t ? 1.0f : 0.0f;
        assert_int_equal(fsc_sample_token(nan1, 3, &o, 0, scratch), -1);
        assert_int_equal(fsc_sample_token(ninf, 3, &o, 0, scratch), -1);
    }
    /* +inf logits take the whole probability (softmax's limit), shared, whatever the top k: the draws never
     * give a finite one (inf - inf made every weight NaN, and the draw fell through to the last token: 3) */
    const float pinf[4] = { 0.0f, INFINITY, 1.0f, INFINITY };
    for (int k = 0; k <= 2; k++) {
        o.temperature = 1.0f, o.top_k = k;
        int hits[4] = { 0 };
        for (int s = 0; s < N; s++) {
            int32_t v = fsc_sample_token(pinf, 4, &o, (uint64_t)s, scratch);
            assert_true(v == 1 || v == 3);
            hits[v]++;
        }
        if (abs(hits[1] - N / 2) > N / 20) fail_msg("top-k %d: the two +inf logits drawn %d and %d times", k, hits[1], hits[3]);
    }
    o.temperature = 0.0f;
    assert_int_equal(fsc_sample_token(pinf, 4, &o, 0, scratch), 1);
}

/* A token out of the vocabulary in a window that is the end of a longer sequence: the refusal says where the window
 * starts, so the model's index into the window (tokens[3]) leads to the caller's (tokens[35]); it named tokens[3]
 * alone. Oracle: the window is the last T = 8 of 40 tokens, so window index 3 is tokens[35]. */
static fsc_status window_run(fsc_rank *r, void *arg) {
    (void)arg;
    char path[PATH_MAX];
    golden_path(path, sizeof path, "hf_gpt2.safetensors");
    fsc_model *m = NULL;
    fsc_engine *e = NULL;
    fsc_generator *g = NULL;
    FSC_TRY(fsc_model_from_config(r->dev, SG_GPT_CONFIG, &m));
    fsc_parallel_opts po = fsc_parallel_opts_default();
    fsc_optim_config oc = fsc_optim_config_default();
    oc.kind = FSC_OPT_SGD;
    fsc_status s = fsc_engine_create_model(r, m, &po, &oc, 1, &e);
    if (s == FSC_OK) s = fsc_engine_load_weights(e, path);
    if (s == FSC_OK) s = fsc_generator_create(r->dev, fsc_engine_model(e), &g);
    int32_t tok[40];
    for (int i = 0; i < 40; i++) tok[i] = i % 32;
    tok[35] = 77;
    const float *lg;
    int V;
    if (s == FSC_OK) {
        assert_int_equal(fsc_generator_context(g), 8);
        assert_int_equal(fsc_generator_next(g, tok, 40, &lg, &V), FSC_ERR_INVALID);
        const char *msg = fsc_last_error();
        if (!strstr(msg, "the window is the last 8 of 40 tokens (its [0] is tokens[32])") || !strstr(msg, "[3] = 77"))
            fail_msg("the refusal does not place the window: %s", msg);
        /* a sequence that fits the window: the model's index is the caller's */
        assert_int_equal(fsc_generator_next(g, tok + 32, 8, &lg, &V), FSC_ERR_INVALID);
        if (strstr(fsc_last_error(), "window") || !strstr(fsc_last_error(), "[3] = 77"))
            fail_msg("the refusal: %s", fsc_last_error());
    }
    fsc_generator_free(g);
    fsc_engine_free(e);
    fsc_model_free(m);
    return s;
}

static void test_window_token_named(void **st) {
    (void)st;
    fsc_cluster_opts co = fsc_cluster_opts_default();
    assert_ok(fsc_cluster_run(&co, window_run, NULL));
}

/* A model the trainer saved records its configuration; a byte model prints text. */
static void test_trained_file(void **st) {
    (void)st;
    char args[4 * PATH_MAX], file[300], *out = NULL;
    snprintf(file, sizeof file, "%s/llama.safetensors", tmpdir);
    snprintf(args, sizeof args, "--model llama --layers 1 --dim 16 --heads 2 --seq 16 --batch 2 --steps 2 --save '%s' "
             "--save-dtype bf16", file);
    char data[PATH_MAX];
    golden_path(data, sizeof data, "../../examples/data/coriolanus.txt");
    size_t k = strlen(args);
    snprintf(args + k, sizeof args - k, " --data '%s'", data);
    int rc = prog_run(trainer, args, tmpdir, &out, NULL);
    if (rc != 0) fail_msg("train_gpt %s: exit %d\n%s", args, rc, out);
    free(out);
    char *a = sample(file, NULL, "--prompt 'To be' --tokens 20 --seed 3");
    char *b = sample(file, NULL, "--prompt 'To be' --tokens 20 --seed 3");
    assert_string_equal(a, b);
    assert_int_equal(strncmp(a, "To be", 5), 0); /* the prompt, as text, then 20 bytes */
    assert_true(strlen(a) <= 25); /* no more than 20 bytes after it (a generated NUL byte would end the string early) */
    /* the text ends a line (the shell's prompt does not follow it on the same line) */
    char *raw = NULL, *err = NULL, *sargs = prog_fmt("--model '%s' --prompt 'To be' --tokens 20 --seed 3", file);
    assert_int_equal(prog_run(sampler, sargs, tmpdir, &raw, &err), 0);
    size_t rn = strlen(raw);
    if (rn == 0 || raw[rn - 1] != '\n') fail_msg("the text does not end with a newline: \"%s\"", raw);
    free(raw), free(err), free(sargs);
    /* one that already does gets no second one */
    sargs = prog_fmt("--model '%s' --prompt 'To be\n' --tokens 0", file);
    assert_int_equal(prog_run(sampler, sargs, tmpdir, &raw, &err), 0);
    assert_string_equal(raw, "To be\n");
    free(raw), free(err), free(sargs);
    char *ids = sample(file, NULL, "--prompt 'To be' --tokens 3 --ids --temperature 0");
    assert_int_equal(strncmp(ids, "84,111,32,98,101,", 17), 0); /* "To be" as byte ids */
    free(a), free(b), free(ids);
}

/* --tokenizer gpt2 (fsc/bpe.h): a model of GPT-2's vocabulary reads --prompt as text and prints text that starts
 * with it; a tokenizer larger than the model's vocabulary is refused. */
static void test_tokenizer(void **st) {
    (void)st;
    char file[300], small[300], *out = NULL;
    snprintf(file, sizeof file, "%s/bpe.safetensors", tmpdir);
    snprintf(small, sizeof small, "%s/bytes.safetensors", tmpdir);
    char *args = prog_fmt("--layers 1 --dim 8 --heads 2 --seq 8 --vocab 50257 --data-format bytes --batch 2 --steps 0 --save '%s'", file);
    int rc = prog_run(trainer, args, tmpdir, &out, NULL);
    if (rc != 0) fail_msg("train_gpt %s: exit %d\n%s", args, rc, out);
    free(out), free(args);
    char *a = sample(file, NULL, "--tokenizer gpt2 --prompt 'First Citizen:' --tokens 5 --seed 3");
    if (strncmp(a, "First Citizen:", 14) != 0) fail_msg("the text does not start with the prompt: \"%s\"", a);
    free(a);
    /* a tokenizer.json (tests/bpetest.h) of 259 tokens: the prompt read with it, the output text; without an
     * end-of-text token, no prompt is refused */
    char tj[320], *opt;
    snprintf(tj, sizeof tj, "%s/tokenizer.json", tmpdir);
    assert_int_equal(bpetest_write_tokenizer(tj, 1), 0);
    opt = prog_fmt("--tokenizer '%s' --prompt 'abab ab' --tokens 5 --seed 3", tj);
    a = sample(file, NULL, opt);
    if (strncmp(a, "abab ab", 7) != 0) fail_msg("the text does not start with the prompt: \"%s\"", a);
    free(a), free(opt);
    opt = prog_fmt("--tokenizer '%s' --prompt 'abab a' --tokens 2 --ids", tj);
    a = sample(file, NULL, opt);
    if (strncmp(a, "256,256,257,", 12) != 0) fail_msg("the prompt's ids are not 256,256,257: \"%s\"", a);
    free(a), free(opt);
    /* sentencepiece's tokenizer.model: the prompt's ids are the library's (the dummy prefix's ▁ first, so the
     * text printed token by token starts with a space); without --prompt it starts from <s> */
    char spm[PATH_MAX], ids[256];
    assert_non_null(realpath("tests/golden/spm_bpe.model", spm));
    fsc_bpe *b;
    assert_ok(fsc_bpe_load_file(&b, spm));
    int32_t pid[32];
    size_t np, at = 0;
    assert_ok(fsc_bpe_encode(b, "Hello world", 11, pid, &np));
    for (size_t i = 0; i < np; i++) at += (size_t)snprintf(ids + at, sizeof ids - at, "%d,", pid[i]);
    opt = prog_fmt("--tokenizer '%s' --prompt 'Hello world' --tokens 2 --ids", spm);
    a = sample(file, NULL, opt);
    if (strncmp(a, ids, at) != 0) fail_msg("the prompt's ids are not %s: \"%s\"", ids, a);
    free(a), free(opt);
    opt = prog_fmt("--tokenizer '%s' --prompt 'Hello world' --tokens 5 --seed 3", spm);
    a = sample(file, NULL, opt);
    if (strncmp(a, " Hello world", 12) != 0) fail_msg("the text does not start with the prompt: \"%s\"", a);
    free(a), free(opt);
    opt = prog_fmt("--tokenizer '%s' --tokens 2 --ids", spm);
    a = sample(file, NULL, opt);
    snprintf(ids, sizeof ids, "%d,", fsc_bpe_eot(b));
    if (strncmp(a, ids, strlen(ids)) != 0) fail_msg("no prompt does not start from <s> (%s): \"%s\"", ids, a);
    free(a), free(opt);
    fsc_bpe_free(b);
    assert_int_equal(bpetest_write_tokenizer(tj, 0), 0);
    char *err = NULL;
    args = prog_fmt("--model '%s' --tokenizer '%s'", file, tj);
    assert_int_equal(prog_run(sampler, args, tmpdir, &out, &err), 1);
    if (!strstr(err, "has no end-of-text token to start from: give --prompt")) fail_msg("stderr: %s", err);
    free(out), free(err), free(args);
    args = prog_fmt("--layers 1 --dim 8 --heads 2 --seq 8 --batch 2 --steps 0 --save '%s'", small);
    assert_int_equal(prog_run(trainer, args, tmpdir, &out, NULL), 0);
    free(out), free(args);
    args = prog_fmt("--model '%s' --tokenizer gpt2 --prompt 'x'", small);
    assert_int_equal(prog_run(sampler, args, tmpdir, &out, &err), 1);
    assert_non_null(strstr(err, "more than the model's vocabulary 256"));
    free(out), free(err), free(args);
}

/* A checkpoint directory (written by 2 FSDP ranks) samples as the weights the same run saved at its end. */
static void test_checkpoint(void **st) {
    (void)st;
    char args[4 * PATH_MAX], file[300], dir[300], data[PATH_MAX], *out = NULL;
    snprintf(file, sizeof file, "%s/final.safetensors", tmpdir);
    snprintf(dir, sizeof dir, "%s/ck", tmpdir);
    golden_path(data, sizeof data, "../../examples/data/coriolanus.txt");
    snprintf(args, sizeof args, "--layers 1 --dim 16 --heads 2 --seq 16 --batch 4 --steps 4 --world 2 --parallel fsdp "
             "--save-every 2 --ckpt-dir '%s' --save '%s' --data '%s'", dir, file, data);
    int rc = prog_run(trainer, args, tmpdir, &out, NULL);
    if (rc != 0) fail_msg("train_gpt %s: exit %d\n%s", args, rc, out);
    free(out);
    char *a = sample(file, NULL, "--prompt 'To be' --tokens 16 --seed 5 --ids");
    char *b = sample(dir, NULL, "--prompt 'To be' --tokens 16 --seed 5 --ids"); /* its newest: step 4 */
    assert_string_equal(a, b);
    char step2[400];
    snprintf(step2, sizeof step2, "%s/step-00000002", dir);
    char *c = sample(step2, NULL, "--prompt 'To be' --tokens 16 --seed 5 --ids");
    if (!strcmp(a, c)) fail_msg("step 2 and step 4 sampled the same tokens: %s", a);
    /* the newest damaged (a byte of its data flipped): the directory samples as step 2, saying it skipped step 4 */
    char rank0[500];
    snprintf(rank0, sizeof rank0, "%s/step-00000004/rank-00000-of-00002.safetensors", dir);
    FILE *f = fopen(rank0, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, -3, SEEK_END), 0);
    int byte = fgetc(f);
    assert_int_equal(fseek(f, -3, SEEK_END), 0);
    fputc(byte ^ 0x40, f);
    assert_int_equal(fclose(f), 0);
    char *err = NULL;
    snprintf(args, sizeof args, "--model '%s' --prompt 'To be' --tokens 16 --seed 5 --ids", dir);
    rc = prog_run(sampler, args, tmpdir, &out, &err);
    if (rc != 0 || !strstr(err, "step-00000004 skipped, damaged") || !strstr(err, "sampling from") ||
        strncmp(out, c, strlen(c)) != 0)
        fail_msg("a damaged newest checkpoint: exit %d, stderr \"%s\", tokens %s (step 2's: %s)", rc, err, out, c);
    free(out), free(err);
    /* the optimizer's rates of step 2 edited to AdamW eps 0 (its checksum resealed), which an engine now refuses:
     * the sampler takes no step, so it samples as before */
    char meta[500];
    snprintf(meta, sizeof meta, "%s/step-00000002/metadata.json", dir);
    size_t n;
    char *text = prog_slurp(meta);
    n = strlen(text);
    cJSON *root = cJSON_ParseWithLength(text, n);
    assert_non_null(root);
    cJSON_SetNumberValue(cJSON_GetObjectItem(cJSON_GetObjectItem(root, "optimizer"), "eps"), 0);
    char *edited = cJSON_Print(root);
    test_reseal_metadata(edited);
    f = fopen(meta, "w");
    assert_non_null(f);
    fputs(edited, f);
    assert_int_equal(fclose(f), 0);
    char *e = sample(step2, NULL, "--prompt 'To be' --tokens 16 --seed 5 --ids");
    assert_string_equal(e, c);
    free(e), free(edited), free(text);
    cJSON_Delete(root);
    free(a), free(b), free(c);
}

/* A full-format checkpoint's model.safetensors records its model as a weights file does: the sampler reads it alone
 * (no --model-config) and samples the tokens the checkpoint gives (it was refused: "records no model
 * configuration"). */
static void test_full_checkpoint_file(void **st) {
    (void)st;
    char data[PATH_MAX], *out = NULL;
    golden_path(data, sizeof data, "../../examples/data/coriolanus.txt");
    char *dir = prog_fmt("%s/full", tmpdir);
    char *args = prog_fmt("--layers 1 --dim 16 --heads 2 --seq 16 --batch 4 --steps 2 --world 2 --parallel zero1 "
                          "--save-every 2 --ckpt-format full --ckpt-dir '%s' --data '%s'", dir, data);
    int rc = prog_run(trainer, args, tmpdir, &out, NULL);
    if (rc != 0) fail_msg("train_gpt %s: exit %d\n%s", args, rc, out);
    free(out), free(args);
    char *file = prog_fmt("%s/step-00000002/model.safetensors", dir);
    char *a = sample(file, NULL, "--prompt 'To be' --tokens 16 --seed 5 --ids");
    char *b = sample(dir, NULL, "--prompt 'To be' --tokens 16 --seed 5 --ids");
    assert_string_equal(a, b);
    free(a), free(b), free(file), free(dir);
}

/* A file whose recorded configuration does not describe its tensors (a 1-layer width-3072 model over a 256 x 16
 * embedding) is refused naming the tensor, both shapes and the configuration, before the model is allocated: the
 * sampler's peak resident size stays far below the 450 MB the claimed model's weights alone would take. */
static void test_config_checked_first(void **st) {
    (void)st;
    char file[300];
    snprintf(file, sizeof file, "%s/claims.safetensors", tmpdir);
    static float wte[256 * 16];
    const int64_t shape[2] = {256, 16};
    fsc_st_writer *w = NULL;
    assert_int_equal(fsc_st_writer_open(file, &w), FSC_OK);
    assert_int_equal(fsc_st_writer_meta(w, FSC_ST_META_MODEL, "{\"layers\":1,\"dim\":3072,\"heads\":2,\"seq\":8,"
                                        "\"vocab\":256}"), FSC_OK);
    assert_int_equal(fsc_st_writer_add(w, "wte.weight", FSC_F32, 2, shape), FSC_OK);
    assert_int_equal(fsc_st_writer_begin_data(w), FSC_OK);
    assert_int_equal(fsc_st_writer_write_f32(w, 0, wte, 0, 256 * 16), FSC_OK);
    assert_int_equal(fsc_st_writer_commit(w), FSC_OK);
    char *cmd = prog_fmt("'%s' --model '%s' --tokens 1 > '%s/out' 2> '%s/err'", sampler, file, tmpdir, tmpdir);
    int status = 0;
    long maxrss_kib = prog_run_maxrss(cmd, &status);
    char *path = prog_fmt("%s/err", tmpdir), *err = prog_slurp(path);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 1 ||
        !strstr(err, "wte.weight has shape [256, 16] but the model expects [256, 3072] (the model configuration: "
                     "{\"layers\":1,\"dim\":3072"))
        fail_msg("status %d, stderr \"%s\"", status, err);
    if (maxrss_kib > 256L * 1024L) fail_msg("peak resident size %ld KiB before refusing the file", maxrss_kib);
    free(err), free(path), free(cmd);
}

/* An entry fsc lists but cannot read (more than 4 dimensions: ndim 0 in fsc_st_entry) is refused for what it is,
 * not as a tensor of shape [] (check_shapes ran before the loader's dtype check). Oracle: the message names the
 * reason the reader gives, "more than 4 dimensions", and no "shape []". */
static void test_unreadable_entry_named(void **st) {
    (void)st;
    char file[300];
    snprintf(file, sizeof file, "%s/wide.safetensors", tmpdir);
    const char *hdr = "{\"__metadata__\":{\"" FSC_ST_META_MODEL "\":\"{\\\"layers\\\":1,\\\"dim\\\":16,"
                      "\\\"heads\\\":2,\\\"seq\\\":8,\\\"vocab\\\":256}\"},\"wte.weight\":{\"dtype\":\"F32\","
                      "\"shape\":[1,1,1,256,16],\"data_offsets\":[0,16384]}}";
    FILE *f = fopen(file, "wb");
    assert_non_null(f);
    uint8_t len[8];
    for (int i = 0; i < 8; i++) len[i] = (uint8_t)((uint64_t)strlen(hdr) >> (8 * i));
    static float zeros[256 * 16];
    assert_int_equal(fwrite(len, 1, 8, f), 8);
    assert_int_equal(fwrite(hdr, 1, strlen(hdr), f), strlen(hdr));
    assert_int_equal(fwrite(zeros, 1, sizeof zeros, f), sizeof zeros);
    assert_int_equal(fclose(f), 0);
    char *cmd = prog_fmt("'%s' --model '%s' --tokens 1 > '%s/out' 2> '%s/err'", sampler, file, tmpdir, tmpdir);
    int status = system(cmd);
    char *path = prog_fmt("%s/err", tmpdir), *err = prog_slurp(path);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 1 || !strstr(err, "wte.weight has more than 4 dimensions") ||
        strstr(err, "shape []"))
        fail_msg("status %d, stderr \"%s\"", status, err);
    free(err), free(path), free(cmd);
}

static void test_refusals(void **st) {
    (void)st;
    char args[PATH_MAX + 256], path[PATH_MAX], *out = NULL, *err = NULL;
    golden_path(path, sizeof path, "hf_gpt2.safetensors");
    snprintf(args, sizeof args, "--model '%s'", path);
    assert_int_equal(prog_run(sampler, args, tmpdir, &out, &err), 2);
    assert_non_null(strstr(err, "records no model configuration"));
    free(out), free(err);
    snprintf(args, sizeof args, "--model '%s' --model-config '%s' --prompt 1,32", path, SG_GPT_CONFIG);
    assert_int_equal(prog_run(sampler, args, tmpdir, &out, &err), 1);
    assert_non_null(strstr(err, "token ids in [0, 32)"));
    free(out), free(err);
    /* malformed id lists: a letter, an empty id, a trailing comma, a negative or too large id, white space or a sign
     * (" 1", a space and a digit, is text: it was read as the id 1, the space dropped) */
    const char *bad[] = {"1,x", "1,,2", "1,2,", "-1", "99999999999", "7 x", " 1", "1, 2", "+1", "1,+2", "\t1"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(args, sizeof args, "--model '%s' --model-config '%s' --prompt '%s'", path, SG_GPT_CONFIG, bad[i]);
        prog_refused(sampler, args, tmpdir, 1, "expected comma-separated token ids in [0, 32)");
    }
    snprintf(args, sizeof args, "--model '%s' --model-config '%s' --prompt ''", path, SG_GPT_CONFIG);
    prog_refused(sampler, args, tmpdir, 1, "--prompt is empty");
    /* option values that are not numbers, or out of range */
    prog_refused(sampler, "--model m --tokens x", tmpdir, 2, "--tokens x: expected an integer");
    prog_refused(sampler, "--model m --top-k -1", tmpdir, 2, "--top-k -1: expected an integer");
    prog_refused(sampler, "--model m --temperature -2", tmpdir, 2, "--temperature -2: expected a number");
    prog_refused(sampler, "--model m --tokens 0x10", tmpdir, 2, "--tokens 0x10: expected an integer");
    assert_int_equal(prog_run(sampler, "--tokens 3", tmpdir, &out, &err), 2);
    assert_non_null(strstr(err, "--model PATH is required"));
    free(out), free(err);
    /* a directory without a checkpoint is named (the message did not say which) */
    char *a = prog_fmt("--model '%s'", tmpdir);
    prog_refused(sampler, a, tmpdir, 1, "a directory without a complete checkpoint");
    free(a);
    /* the trainer's --save-dtype without a file to save */
    assert_int_equal(prog_run(trainer, "--steps 1 --save-dtype bf16", tmpdir, &out, &err), 2);
    assert_non_null(strstr(err, "--save-dtype applies to --save and --init-save only"));
    free(out), free(err);
    assert_int_equal(prog_run(sampler, "--help", tmpdir, &out, &err), 0);
    assert_non_null(strstr(out, "usage: sample"));
    free(out), free(err);
    /* a misspelt option names the one meant when one is close, else points to --help */
    prog_refused(sampler, "--model m --tokns 3", tmpdir, 2, "unknown argument '--tokns' (did you mean --tokens?)");
    prog_refused(sampler, "--model m --temp 0", tmpdir, 2, "unknown argument '--temp' (did you mean --temperature?)");
    prog_refused(sampler, "--model m --zzzzzz 0", tmpdir, 2, "unknown argument '--zzzzzz' (see --help)");
}

/* Installed as fsc-sample (make install copies it under that name), its usage and --version say that name; as
 * build/sample they say sample. Oracle: the texts, fsc_version_string. */
static void test_program_name(void **st) {
    (void)st;
    char link[sizeof tmpdir + 16], *out = NULL, *err = NULL;
    snprintf(link, sizeof link, "%s/fsc-sample", tmpdir);
    unlink(link);
    assert_int_equal(symlink(sampler, link), 0);
    assert_int_equal(prog_run(link, "--help", tmpdir, &out, &err), 0);
    if (strncmp(out, "usage: fsc-sample --model PATH", 30) != 0) fail_msg("usage as fsc-sample: %s", out);
    free(out), free(err);
    char *want = NULL;
    assert_true(asprintf(&want, "fsc-sample %s\n", fsc_version_string()) > 0);
    assert_int_equal(prog_run(link, "--version", tmpdir, &out, &err), 0);
    assert_string_equal(out, want);
    free(out), free(err), free(want);
    assert_true(asprintf(&want, "sample %s\n", fsc_version_string()) > 0);
    assert_int_equal(prog_run(sampler, "--version", tmpdir, &out, &err), 0);
    assert_string_equal(out, want);
    free(out), free(err), free(want);
    unlink(link);
}

int main(int argc, char **argv) {
    (void)argc;
    if (prog_setup(argv[0], "test_sample", "sample", sampler, sizeof sampler, tmpdir, sizeof tmpdir)) return 1;
    char self[PATH_MAX];
    if (!realpath(argv[0], self)) return 1;
    snprintf(trainer, sizeof trainer, "%s/../train_gpt", dirname(self));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sample_token), cmocka_unit_test(test_greedy_matches_pytorch),
        cmocka_unit_test(test_seeds),        cmocka_unit_test(test_trained_file),
        cmocka_unit_test(test_checkpoint),   cmocka_unit_test(test_full_checkpoint_file),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_config_checked_first),
        cmocka_unit_test(test_unreadable_entry_named),
        cmocka_unit_test(test_program_name),
        cmocka_unit_test(test_tokenizer),
        cmocka_unit_test(test_window_token_named),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    test_rmtree(tmpdir);
    return rc;
}
