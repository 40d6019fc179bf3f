/* Tests of the trainer's config file, logs and traces (examples/train_gpt.c, examples/train_log.h):
 * --config, --ckpt-dir/train_config.json, Hugging Face's config.json beside --save's weights, --log (with the
 * host ledger's peaks under --offload), the progress line, --peak-tflops, --trace.
 * Oracles: the --json record of the same run (its config, its losses, learning rates and validation losses, to
 * the bit); an MFU recomputed here from the record's own ms and fsc_gpt_flops_per_token (test_flops checks that
 * count against nanoGPT's); the run's train_config.json, read back with --config (the file, its directory, the
 * directory of a run that named it config.json), trains to the same losses bit for bit; the config.json beside
 * --save's weights holds the model's shape under transformers' names and is refused by --config; refusals name
 * the key and exit 2; each rank's trace file parses (cJSON) with a span per step and layer and collectives naming
 * their group, tools/trace_merge puts every event of both in one file under its rank's pid, and a full trace says
 * so; --json's rate of a skipped step is --log's, to 17 digits; a --config's option is taken back by its default. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "trainertest.h"

static char trainer[PATH_MAX];
static char tmpdir[64];

#define TINY "--layers 1 --dim 32 --heads 2 --seq 16 --batch 4"

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static const cJSON *get(const cJSON *o, const char *k) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!x) fail_msg("no \"%s\"", k);
    return x;
}

/* The lines of a JSONL file, each parsed (NULL-terminated array; the caller frees with free_lines). */
static cJSON **read_lines(const char *path, int *n) {
    char *text = prog_slurp(path);
    cJSON **v = calloc(4096, sizeof *v);
    *n = 0;
    for (char *line = strtok(text, "\n"); line && *n < 4095; line = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(line);
        if (!j) fail_msg("%s line %d is not JSON: %.80s", path, *n + 1, line);
        v[(*n)++] = j;
    }
    free(text);
    return v;
}

static void free_lines(cJSON **v, int n) {
    for (int i = 0; i < n; i++) cJSON_Delete(v[i]);
    free(v);
}

/* --version prints the library's version; a misspelt option names the one meant when one is close (edit distance
 * at most 2, or a prefix of one option only), else points to --help. Oracle: fsc_version_string, the texts. */
static void test_version_and_misspelt(void **state) {
    (void)state;
    char *out = NULL, *want = prog_fmt("fsc-train %s\n", fsc_version_string());
    assert_int_equal(prog_run(trainer, "--steps 1 --version", tmpdir, &out, NULL), 0);
    assert_string_equal(out, want);
    free(out), free(want);
    prog_refused(trainer, "--lrr 0.1", tmpdir, 2, "unknown option '--lrr' (did you mean --lr?)");
    prog_refused(trainer, "--stesp=3", tmpdir, 2, "unknown option '--stesp' (did you mean --steps?)");
    prog_refused(trainer, "--optim sgd", tmpdir, 2, "unknown option '--optim' (did you mean --optimizer?)");
    prog_refused(trainer, "--zzzzzz 1", tmpdir, 2, "unknown option '--zzzzzz' (see --help)");
    prog_refused(trainer, "--x 1", tmpdir, 2, "unknown option '--x' (see --help)"); /* 2 edits from --lr: too far */
}

/* A config file sets options, the command line wins, and the refusals name what is wrong. */
static void test_config_file(void **state) {
    (void)state;
    char *cfg = prog_fmt("%s/c.json", tmpdir);
    write_text(cfg, "{\"layers\": 1, \"dim\": 32, \"heads\": 2, \"seq\": 16, \"batch\": 4, \"steps\": 3, \"lr\": 0.01,"
                    " \"optimizer\": \"sgd\", \"seed\": 7, \"clip\": 0}");
    char *args = prog_fmt("--config %s --steps 2 --lr 0.02", cfg);
    cJSON *j = prog_json(trainer, tmpdir, "", args);
    const cJSON *c = get(j, "config");
    assert_int_equal(get(c, "steps")->valueint, 2); /* the command line wins */
    assert_true(fabs(get(c, "lr")->valuedouble - 0.02) < 1e-9);
    assert_int_equal(get(c, "layers")->valueint, 1); /* the file's */
    assert_string_equal(get(c, "optimizer")->valuestring, "sgd");
    assert_int_equal(get(c, "seed")->valueint, 7);
    assert_int_equal(cJSON_GetArraySize(get(j, "losses")), 2);
    cJSON_Delete(j);
    free(args);
    struct { const char *text, *says; } bad[] = {
        { "{\"stepz\": 2}", "unknown option \"stepz\"" },
        { "{\"lrr\": 2}", "unknown option \"lrr\" (did you mean \"lr\"?)" }, /* a close key is named */
        { "{\"zzzzzz\": 2}", "unknown option \"zzzzzz\" (keys are the options of --help without --)" },
        { "{\"steps\": \"2\"}", "\"steps\" must be an integer, not a string" },
        { "{\"layers\": 2.5}", "\"layers\" must be an integer, not 2.5" },
        { "{\"steps\": 1e16}", "--steps: 10000000000000000 is out of range [0, 1000000000]" }, /* was "not an integer" */
        { "{\"steps\": 1e300}", "\"steps\" must be an integer of the option's range, not 1.0000000000000001e+300" },
        { "{\"lr\": \"fast\"}", "\"lr\" must be a number" },
        { "{\"json\": 1}", "\"json\" must be true or false" },
        { "{\"parallel\": \"fsdq\"}", "--parallel: unknown value 'fsdq'" },
        { "{\"steps\": 2, \"steps\": 3}", "\"steps\" appears twice" },
        { "{\"config\": \"other.json\"}", "cannot name another" },
        { "[1, 2]", "expected a JSON object" },
        { "{\"steps\": 2", "not JSON" },
        { "{\"steps\": 1}{\"steps\": 100}", "text after the JSON object at byte 12" },
        { "{\"steps\": 1} x", "text after the JSON object at byte 13" },
        { "{\"lr\": 1e-50}", "--lr: 1e-50 is too small for a float" }, /* not 0 */
        { "{\"shard\": \"grad_op\"}", "--shard applies to --parallel fsdp only" }, /* given by the file */
        /* a NUL would cut the path short (it opened "a") */
        { "{\"data\": \"a\\u0000b\"}", "a string holds \\u0000 (a NUL character)" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_text(cfg, bad[i].text);
        char *out = NULL, *a = prog_fmt("--config %s", cfg);
        int rc = prog_run(trainer, a, tmpdir, &out, NULL);
        if (rc != 2 || !strstr(out, bad[i].says))
            fail_msg("%s: exit %d (expected 2), output lacks \"%s\":\n%s", bad[i].text, rc, bad[i].says, out);
        free(out);
        free(a);
    }
    char *out = NULL;
    assert_int_equal(prog_run(trainer, "--config /dev/null/x.json", tmpdir, &out, NULL), 2);
    assert_non_null(strstr(out, "cannot open"));
    free(out);
    /* the command line wins over a file's flag (--FLAG=false) and over the other name of the micro-batches: a run's
     * train_config.json records both --accum and --chunks, and --accum on the command line was refused as both */
    write_text(cfg, "{\"layers\": 1, \"dim\": 32, \"heads\": 2, \"seq\": 16, \"batch\": 8, \"steps\": 1, "
                    "\"world\": 2, \"tp\": 2, \"sequence-parallel\": true, \"chunks\": 2, \"accum\": 2}");
    args = prog_fmt("--config %s --accum 4 --tp 1 --world 1 --sequence-parallel=false", cfg);
    j = prog_json(trainer, tmpdir, "", args);
    c = get(j, "config");
    assert_int_equal(get(c, "accum")->valueint, 4);
    assert_true(cJSON_IsFalse(get(c, "sequence-parallel")));
    cJSON_Delete(j);
    free(args);
    /* the other way: a file's --accum under --chunks on the command line; the run records --chunks alone, so its
     * train_config.json reads back (it recorded both, refused as both) */
    write_text(cfg, "{\"layers\": 1, \"dim\": 32, \"heads\": 2, \"seq\": 16, \"batch\": 8, \"steps\": 1, "
                    "\"accum\": 2}");
    char *run = prog_fmt("%s/chunks_run", tmpdir);
    args = prog_fmt("--config %s --chunks 4 --ckpt-dir %s --save-every 1", cfg, run);
    j = prog_json(trainer, tmpdir, "", args);
    assert_int_equal(get(get(j, "config"), "chunks")->valueint, 4);
    cJSON_Delete(j);
    free(args);
    args = prog_fmt("--config %s --ckpt-dir %s/chunks_again", run, tmpdir);
    j = prog_json(trainer, tmpdir, "", args);
    assert_int_equal(get(get(j, "config"), "chunks")->valueint, 4);
    cJSON_Delete(j);
    free(args), free(run);
    args = prog_fmt("--config %s --sequence-parallel=maybe", cfg);
    prog_refused(trainer, args, tmpdir, 2, "--sequence-parallel takes no value (or =false");
    free(args);
    free(cfg);
}

/* --config DIR of a run whose train_config.json sets an option the command line's choice does not take: the option's
 * default given on the command line takes it back. A cosine run's min-lr under --lr-schedule constant --min-lr 0 and
 * an sgd run's momentum under --optimizer adamw --momentum 0.9 run (exit 0); before, both were refused as given.
 * Another value (--min-lr 0.001 under constant) is still refused with exit 2. Oracle: the exit status, the message. */
static void test_config_default_takes_back(void **state) {
    (void)state;
    char *cos = prog_fmt("%s/cosrun", tmpdir), *sgd = prog_fmt("%s/sgdrun", tmpdir);
    char *args = prog_fmt(TINY " --steps 2 --lr-schedule cosine --min-lr 0.0001 --save-every 2 --ckpt-dir %s", cos);
    cJSON_Delete(prog_json(trainer, tmpdir, "", args));
    free(args);
    args = prog_fmt(TINY " --steps 2 --optimizer sgd --momentum 0.5 --save-every 2 --ckpt-dir %s", sgd);
    cJSON_Delete(prog_json(trainer, tmpdir, "", args));
    free(args);
    args = prog_fmt("--config %s --lr-schedule constant --min-lr 0 --ckpt-dir %s/cos_const", cos, tmpdir);
    cJSON *j = prog_json(trainer, tmpdir, "", args); /* fails the test unless exit 0 */
    assert_string_equal(get(get(j, "config"), "lr-schedule")->valuestring, "constant");
    cJSON_Delete(j);
    free(args);
    args = prog_fmt("--config %s --optimizer adamw --momentum 0.9 --ckpt-dir %s/sgd_adamw", sgd, tmpdir);
    j = prog_json(trainer, tmpdir, "", args);
    assert_string_equal(get(get(j, "config"), "optimizer")->valuestring, "adamw");
    cJSON_Delete(j);
    free(args);
    args = prog_fmt("--config %s --lr-schedule constant --min-lr 0.001 --ckpt-dir %s/cos_bad", cos, tmpdir);
    prog_refused(trainer, args, tmpdir, 2, "--min-lr applies to --lr-schedule cosine and linear");
    free(args), free(cos), free(sgd);
}

/* The losses of a --json record, compared bit for bit with j1's. */
static void same_losses(const cJSON *j1, const cJSON *j2, const char *how) {
    const cJSON *l1 = get(j1, "losses"), *l2 = get(j2, "losses");
    assert_int_equal(cJSON_GetArraySize(l1), 3);
    assert_int_equal(cJSON_GetArraySize(l2), 3);
    for (int i = 0; i < 3; i++)
        if (memcmp(&cJSON_GetArrayItem(l1, i)->valuedouble, &cJSON_GetArrayItem(l2, i)->valuedouble, sizeof(double)))
            fail_msg("step %d: %.17g from the command line, %.17g from %s", i + 1,
                     cJSON_GetArrayItem(l1, i)->valuedouble, cJSON_GetArrayItem(l2, i)->valuedouble, how);
}

/* --ckpt-dir/train_config.json: the options as asked (and no config.json, Hugging Face's name, in the directory),
 * read back with --config FILE or --config DIR, trains the same losses bit for bit; so does a directory of a run
 * from before the name changed (config.json). */
static void test_config_json_reproduces(void **state) {
    (void)state;
    char *d1 = prog_fmt("%s/run1", tmpdir), *d2 = prog_fmt("%s/run2", tmpdir), *d3 = prog_fmt("%s/run3", tmpdir);
    char *a1 = prog_fmt(TINY " --steps 3 --world 2 --parallel zero2 --lr 0.004 --seed 3 --save-every 3 --ckpt-dir %s", d1);
    cJSON *j1 = prog_json(trainer, tmpdir, "", a1);
    char *cj = prog_fmt("%s/train_config.json", d1), *old = prog_fmt("%s/config.json", d1);
    struct stat sb;
    assert_int_equal(stat(cj, &sb), 0);
    assert_int_not_equal(stat(old, &sb), 0);
    char *a2 = prog_fmt("--config %s --ckpt-dir %s", cj, d2);
    cJSON *j2 = prog_json(trainer, tmpdir, "", a2);
    same_losses(j1, j2, "train_config.json");
    assert_string_equal(get(get(j2, "config"), "parallel")->valuestring, "zero2");
    cJSON_Delete(j2);
    char *a3 = prog_fmt("--config %s --ckpt-dir %s", d1, d3);
    j2 = prog_json(trainer, tmpdir, "", a3);
    same_losses(j1, j2, "--config DIR");
    cJSON_Delete(j2);
    assert_int_equal(rename(cj, old), 0); /* a run from before: DIR/config.json */
    test_rmtree(d3);
    j2 = prog_json(trainer, tmpdir, "", a3);
    same_losses(j1, j2, "--config DIR of config.json");
    cJSON_Delete(j1), cJSON_Delete(j2);
    free(a1), free(a2), free(a3), free(cj), free(old), free(d1), free(d2), free(d3);
}

/* A run given relative paths (--data as a comma list, --val-data as a glob, --schedule-file, --ckpt-dir, --log)
 * records them in train_config.json absolute, after the directory it ran in (a leading ./ dropped), and --config
 * DIR from another directory reruns it: the same losses and validation losses bit for bit (the relative paths as
 * given could not be opened from there). */
static void test_config_json_paths(void **state) {
    (void)state;
    char here[PATH_MAX], *a = prog_fmt("%s/paths-a", tmpdir), *b = prog_fmt("%s/paths-b", tmpdir);
    assert_non_null(getcwd(here, sizeof here));
    assert_int_equal(mkdir(a, 0700) | mkdir(b, 0700), 0);
    char *text = prog_slurp("examples/data/coriolanus.txt");
    text[4000] = 0;
    char *d = prog_fmt("%s/d.txt", a), *v = prog_fmt("%s/v1.txt", a), *s = prog_fmt("%s/hand.txt", a);
    write_text(d, text);
    write_text(v, text + 2000);
    write_text(s, "0F0 0F1 0B0 0B1 0W0 0W1\n1F0 1F1 1B0 1B1 1W0 1W1\n");
    assert_int_equal(chdir(a), 0);
    cJSON *j1 = prog_json(trainer, tmpdir, "", TINY " --layers 2 --steps 3 --parallel pipe --pp 2 --chunks 2 "
                          "--schedule-file ./hand.txt --data d.txt,./v1.txt --val-data 'v*.txt' --val-every 1 "
                          "--save-every 3 --ckpt-dir ck --log run.jsonl");
    char *conf = prog_slurp("ck/train_config.json");
    cJSON *rec = cJSON_Parse(conf);
    assert_non_null(rec);
    char *want = prog_fmt("%s/d.txt,%s/v1.txt", a, a);
    assert_string_equal(get(rec, "data")->valuestring, want);
    free(want), want = prog_fmt("%s/v*.txt", a);
    assert_string_equal(get(rec, "val-data")->valuestring, want);
    free(want), want = prog_fmt("%s/hand.txt", a);
    assert_string_equal(get(rec, "schedule-file")->valuestring, want);
    free(want), want = prog_fmt("%s/ck", a);
    assert_string_equal(get(rec, "ckpt-dir")->valuestring, want);
    free(want), want = prog_fmt("%s/run.jsonl", a);
    assert_string_equal(get(rec, "log")->valuestring, want);
    assert_int_equal(chdir(b), 0);
    char *args = prog_fmt("--config %s/ck --ckpt-dir ck2 --log run2.jsonl", a);
    cJSON *j2 = prog_json(trainer, tmpdir, "", args);
    assert_int_equal(chdir(here), 0);
    same_losses(j1, j2, "--config DIR from another directory");
    char *v1 = cJSON_PrintUnformatted(get(j1, "val_loss")), *v2 = cJSON_PrintUnformatted(get(j2, "val_loss"));
    assert_string_equal(v1, v2);
    cJSON_Delete(j1), cJSON_Delete(j2), cJSON_Delete(rec);
    free(v1), free(v2), free(args), free(want), free(conf), free(text), free(d), free(v), free(s), free(a), free(b);
}

/* --save's directory gets Hugging Face's config.json of the model: GPT2Config's and LlamaConfig's fields as the
 * options set them; --config refuses it, naming its model_type; a config.json there that is not Hugging Face's is
 * left as it was, with a warning. */
static void test_hf_config(void **state) {
    (void)state;
    char *d = prog_fmt("%s/hf", tmpdir), *cj = prog_fmt("%s/hf/config.json", tmpdir);
    assert_int_equal(mkdir(d, 0777), 0);
    char *a = prog_fmt(TINY " --steps 1 --save %s/model.safetensors", d), *out = NULL, *err = NULL;
    int rc = prog_run(trainer, a, tmpdir, &out, &err);
    if (rc != 0) fail_msg("exit %d\n%s%s", rc, out, err);
    free(out), free(err), free(a);
    char *text = prog_slurp(cj);
    cJSON *j = cJSON_Parse(text);
    if (!j) fail_msg("%s is not JSON", cj);
    assert_string_equal(get(j, "model_type")->valuestring, "gpt2");
    assert_string_equal(cJSON_GetArrayItem(get(j, "architectures"), 0)->valuestring, "GPT2LMHeadModel");
    assert_int_equal(get(j, "n_layer")->valueint, 1);
    assert_int_equal(get(j, "n_embd")->valueint, 32);
    assert_int_equal(get(j, "n_head")->valueint, 2);
    assert_int_equal(get(j, "n_positions")->valueint, 16);
    assert_int_equal(get(j, "vocab_size")->valueint, 256);
    assert_string_equal(get(j, "torch_dtype")->valuestring, "float32");
    cJSON_Delete(j), free(text);
    a = prog_fmt("--config %s --steps 1", cj);
    rc = prog_run(trainer, a, tmpdir, &out, &err);
    assert_int_equal(rc, 2);
    if (!strstr(err, "a Hugging Face model configuration (model_type gpt2)")) fail_msg("stderr: %s", err);
    free(out), free(err), free(a);
    a = prog_fmt("--model llama --layers 2 --dim 32 --heads 4 --kv-heads 2 --seq 16 --batch 4 --steps 1 "
                 "--save-dtype bf16 --save %s/model.safetensors", d);
    rc = prog_run(trainer, a, tmpdir, &out, &err);
    if (rc != 0) fail_msg("exit %d\n%s%s", rc, out, err);
    free(out), free(err), free(a);
    text = prog_slurp(cj);
    j = cJSON_Parse(text);
    assert_string_equal(get(j, "model_type")->valuestring, "llama");
    assert_int_equal(get(j, "num_hidden_layers")->valueint, 2);
    assert_int_equal(get(j, "hidden_size")->valueint, 32);
    assert_int_equal(get(j, "num_attention_heads")->valueint, 4);
    assert_int_equal(get(j, "num_key_value_heads")->valueint, 2);
    assert_int_equal(get(j, "intermediate_size")->valueint, 256); /* fsc_llama_default_ffn(32) */
    assert_int_equal(get(j, "max_position_embeddings")->valueint, 16);
    assert_string_equal(get(j, "torch_dtype")->valuestring, "bfloat16"); /* the file's, not float32 */
    if (get(j, "rms_norm_eps")->valuedouble != 1e-5) /* --norm-eps's 1e-5, not the float's 9.99999974737875e-06 */
        fail_msg("rms_norm_eps %.17g", get(j, "rms_norm_eps")->valuedouble);
    cJSON_Delete(j), free(text);
    write_text(cj, "{\"steps\": 1}\n"); /* a run's options under the old name */
    a = prog_fmt(TINY " --steps 1 --save %s/model.safetensors", d);
    rc = prog_run(trainer, a, tmpdir, &out, &err);
    if (rc != 0) fail_msg("exit %d\n%s%s", rc, out, err);
    if (!strstr(err, "is not a Hugging Face model configuration")) fail_msg("stderr: %s", err);
    text = prog_slurp(cj);
    assert_string_equal(text, "{\"steps\": 1}\n");
    free(text), free(out), free(err), free(a), free(cj), free(d);
}

/* The run's train_config.json read back with --config when --data is a long list (1200 files, 18 KB of text and more:
 * refused above 16 KB before): the same losses, and the data the same. */
static void test_config_json_long_data(void **state) {
    (void)state;
    char *one = prog_fmt("%s/long.txt", tmpdir), *d1 = prog_fmt("%s/long1", tmpdir), *d2 = prog_fmt("%s/long2", tmpdir);
    char text[400];
    for (size_t i = 0; i < sizeof text - 1; i++) text[i] = (char)('a' + (i * 7 + i / 13) % 26);
    text[sizeof text - 1] = 0;
    write_text(one, text);
    size_t n = 1200 * (strlen(one) + 1);
    char *list = malloc(n + 1);
    assert_non_null(list);
    list[0] = 0;
    for (int i = 0; i < 1200; i++) strcat(strcat(list, i ? "," : ""), one);
    assert_true(strlen(list) > 16384);
    char *a1 = prog_fmt(TINY " --steps 2 --data %s --save-every 2 --ckpt-dir %s", list, d1);
    cJSON *j1 = prog_json(trainer, tmpdir, "", a1);
    char *a2 = prog_fmt("--config %s/train_config.json --ckpt-dir %s", d1, d2);
    cJSON *j2 = prog_json(trainer, tmpdir, "", a2);
    char *l1 = cJSON_PrintUnformatted(get(j1, "losses")), *l2 = cJSON_PrintUnformatted(get(j2, "losses"));
    assert_string_equal(l1, l2);
    assert_string_equal(get(get(j2, "config"), "data")->valuestring, list);
    cJSON_Delete(j1), cJSON_Delete(j2);
    free(l1), free(l2), free(a1), free(a2), free(list), free(one), free(d1), free(d2);
}

/* --save and --init-save are checked before training, as --log is: a path in a missing directory or a directory
 * is refused with exit 2 before any step, and so is a --trace or --flight-recorder DIR that is a file (before, the run trained and then lost the weights); the temporary file
 * a killed --save left (its writer's name, a process that is gone) is removed by the next run, which says so. */
static void test_save_checked_first(void **state) {
    (void)state;
    const char *bad[][2] = {
        { "--save /nonexistent/dir/w.st", "--save /nonexistent/dir/w.st: cannot create" },
        { "--init-save /nonexistent/dir/w.st", "--init-save /nonexistent/dir/w.st: cannot create" },
        { "--save /tmp", "--save /tmp: is a directory" },
        /* a directory's name that is a file: the trace failed at the ranks' start (exit 1), the flight records were
         * lost without a word when they were written (a SIGUSR1, a failed collective) */
        { "--trace /dev/null", "--trace /dev/null: cannot create the directory: Not a directory" },
        { "--flight-recorder /dev/null", "--flight-recorder /dev/null: cannot create the directory: Not a directory" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char *out = NULL, *a = prog_fmt(TINY " --steps 2 %s", bad[i][0]);
        int rc = prog_run(trainer, a, tmpdir, &out, NULL);
        if (rc != 2 || !strstr(out, bad[i][1]) || strstr(out, "step    1/"))
            fail_msg("%s: exit %d (expected 2 before training), output lacks \"%s\":\n%s", a, rc, bad[i][1], out);
        free(out), free(a);
    }
    pid_t gone = fork();
    if (gone == 0) _exit(0);
    assert_int_equal(waitpid(gone, NULL, 0), gone);
    char *w = prog_fmt("%s/w.st", tmpdir), *left = prog_fmt("%s.tmp.%ld.0", w, (long)gone), *out = NULL;
    write_text(left, "part of a model");
    char *a = prog_fmt(TINY " --steps 1 --save %s", w);
    assert_int_equal(prog_run(trainer, a, tmpdir, &out, NULL), 0);
    if (!strstr(out, "removed 1 temporary file of an interrupted write")) fail_msg("no word of the leftover:\n%s", out);
    struct stat sb;
    assert_int_equal(stat(left, &sb), -1);
    assert_int_equal(stat(w, &sb), 0);
    free(out), free(a), free(left), free(w);
}

/* --log, --save and --init-save are never a file the run reads (a --data or --val-data file, --config, --load but
 * for --save): refused with exit 2 before anything is written, the file unchanged (before, --log emptied the
 * training text at start-up and the run failed at its second step, the text lost; --save replaced it after
 * training). --save over --load's file, a run that trains its weights on, still runs. */
static void test_outputs_are_not_inputs(void **state) {
    (void)state;
    char *text = prog_fmt("%s/text.txt", tmpdir), *val = prog_fmt("%s/val.txt", tmpdir);
    char *cfg = prog_fmt("%s/run.json", tmpdir), *w = prog_fmt("%s/w.st", tmpdir), *out = NULL;
    const char *corpus = "First Citizen: Before we proceed any further, hear me speak. All: Speak, speak. First "
                         "Citizen: You are all resolved rather to die than to famish?\n";
    char *a = prog_fmt(TINY " --steps 1 --data %s --save %s", text, w);
    write_text(text, corpus);
    assert_int_equal(prog_run(trainer, a, tmpdir, &out, NULL), 0);
    free(out), free(a);
    char *runs[][2] = {
        { prog_fmt("--data %s --log %s", text, text), prog_fmt("--log %s is --data's %s", text, text) },
        { prog_fmt("--data %s --save %s", text, text), prog_fmt("--save %s is --data's", text) },
        { prog_fmt("--data %s --init-save %s", text, text), prog_fmt("--init-save %s is --data's", text) },
        { prog_fmt("--data %s --val-data %s --log %s", text, val, val), prog_fmt("--log %s is --val-data's", val) },
        { prog_fmt("--data '%s/*.txt' --resume %s/ck --log %s", tmpdir, tmpdir, val), prog_fmt("is --data's %s", val) },
        { prog_fmt("--data %s --config %s --log %s", text, cfg, cfg), prog_fmt("--log %s is --config %s", cfg, cfg) },
        { prog_fmt("--data %s --load %s --log %s", text, w, w), prog_fmt("--log %s is --load %s", w, w) },
    };
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        write_text(text, corpus), write_text(val, corpus), write_text(cfg, "{\"seed\": 3}");
        struct stat wb;
        assert_int_equal(stat(w, &wb), 0);
        a = prog_fmt(TINY " --steps 2 %s", runs[i][0]);
        int rc = prog_run(trainer, a, tmpdir, &out, NULL);
        if (rc != 2 || !strstr(out, runs[i][1]) || !strstr(out, "which the run reads") || strstr(out, "step    1/"))
            fail_msg("%s: exit %d (expected 2 before training), output lacks \"%s\":\n%s", a, rc, runs[i][1], out);
        char *t = prog_slurp(text), *v = prog_slurp(val), *c = prog_slurp(cfg);
        struct stat nb;
        assert_int_equal(stat(w, &nb), 0);
        if (strcmp(t, corpus) || strcmp(v, corpus) || strcmp(c, "{\"seed\": 3}") || nb.st_size != wb.st_size)
            fail_msg("%s: an input changed", a);
        free(t), free(v), free(c), free(out), free(a), free(runs[i][0]), free(runs[i][1]);
    }
    a = prog_fmt(TINY " --steps 1 --data %s --load %s --save %s", text, w, w);
    assert_int_equal(prog_run(trainer, a, tmpdir, &out, NULL), 0);
    free(out), free(a), free(text), free(val), free(cfg), free(w);
}

/* Two of --log, --save and --init-save naming one file (the same name, another path to it, or a link) are refused
 * with exit 2 before training, nothing written; before, the run succeeded and --save replaced the log (or --init-save's
 * weights) with the final weights, the log lost. Oracle: the exit status, the message, the files absent. */
static void test_outputs_are_not_one_file(void **state) {
    (void)state;
    char *log = prog_fmt("%s/one.jsonl", tmpdir), *out = NULL;
    char *runs[][2] = {
        { prog_fmt("--log %s --save %s", log, log), prog_fmt("--log %s and --save %s are one file", log, log) },
        { prog_fmt("--log %s --save %s/./one.jsonl", log, tmpdir), prog_fmt("--log %s and --save", log) },
        { prog_fmt("--init-save %s --save %s", log, log), prog_fmt("--save %s and --init-save %s are one file", log, log) },
        { prog_fmt("--log %s --init-save %s", log, log), prog_fmt("--log %s and --init-save", log) },
    };
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        char *a = prog_fmt(TINY " --steps 1 %s", runs[i][0]);
        int rc = prog_run(trainer, a, tmpdir, &out, NULL);
        if (rc != 2 || !strstr(out, runs[i][1]) || strstr(out, "step    1/"))
            fail_msg("%s: exit %d (expected 2 before training), output lacks \"%s\":\n%s", a, rc, runs[i][1], out);
        struct stat sb;
        if (stat(log, &sb) == 0) fail_msg("%s: %s written", a, log);
        free(out), free(a), free(runs[i][0]), free(runs[i][1]);
    }
    write_text(log, "{}\n"); /* an existing file by a link */
    char *link = prog_fmt("%s/link.st", tmpdir), *a = prog_fmt(TINY " --steps 1 --log %s --save %s", log, link);
    assert_int_equal(symlink(log, link), 0);
    assert_int_equal(prog_run(trainer, a, tmpdir, &out, NULL), 2);
    if (!strstr(out, "are one file")) fail_msg("a link: %s", out);
    free(out), free(a);
    a = prog_fmt(TINY " --steps 1 --log %s --save %s/other.st", log, tmpdir); /* distinct files still run */
    assert_int_equal(prog_run(trainer, a, tmpdir, &out, NULL), 0);
    unlink(link);
    free(out), free(a), free(link), free(log);
}

/* --log: the config, then a record per step and per validation, equal to --json's; the progress line. */
static void test_log(void **state) {
    (void)state;
    char *val = prog_fmt("%s/val.txt", tmpdir), *log = prog_fmt("%s/run.jsonl", tmpdir);
    char text[3000];
    for (size_t i = 0; i < sizeof text - 1; i++) text[i] = (char)('a' + (i * 7 + i / 13) % 26);
    text[sizeof text - 1] = 0;
    write_text(val, text);
    char *args = prog_fmt(TINY " --steps 4 --lr-schedule cosine --warmup 1 --val-data %s --val-every 2 --val-batches 1 "
                          "--peak-tflops 0.5 --log %s --json", val, log);
    char *out = NULL;
    int rc = prog_run(trainer, args, tmpdir, &out, NULL);
    if (rc != 0) fail_msg("exit %d:\n%s", rc, out);
    cJSON *j = prog_last_json(out);
    int n = 0;
    cJSON **v = read_lines(log, &n);
    assert_int_equal(n, 1 + 4 + 2); /* config, 4 steps, validations after steps 2 and 4 */
    assert_string_equal(get(v[0], "type")->valuestring, "config");
    assert_int_equal(get(get(v[0], "config"), "steps")->valueint, 4);
    const cJSON *losses = get(j, "losses"), *lrs = get(j, "lr"), *vals = get(j, "val_loss");
    fsc_gpt_config g = { .layers = 1, .dim = 32, .heads = 2, .seq = 16, .vocab = 256 };
    const double flops = fsc_gpt_flops_per_token(&g) * 4 * 16;
    int step = 0, nval = 0;
    for (int i = 1; i < n; i++) {
        const char *type = get(v[i], "type")->valuestring;
        if (!strcmp(type, "val")) {
            int s = get(v[i], "step")->valueint;
            assert_int_equal(s, step);
            double x = get(v[i], "val_loss")->valuedouble, y = cJSON_GetArrayItem(vals, s - 1)->valuedouble;
            if (memcmp(&x, &y, sizeof x)) fail_msg("validation after step %d: log %.17g, --json %.17g", s, x, y);
            nval++;
            continue;
        }
        assert_string_equal(type, "train");
        assert_int_equal(get(v[i], "step")->valueint, ++step);
        double x = get(v[i], "loss")->valuedouble, y = cJSON_GetArrayItem(losses, step - 1)->valuedouble;
        if (memcmp(&x, &y, sizeof x)) fail_msg("step %d: log loss %.17g, --json %.17g", step, x, y);
        x = get(v[i], "lr")->valuedouble, y = cJSON_GetArrayItem(lrs, step - 1)->valuedouble;
        if (fabs(x - y) > 1e-7 * y) fail_msg("step %d: log lr %.17g, --json %.17g", step, x, y);
        double ms = get(v[i], "ms")->valuedouble, mfu = get(v[i], "mfu")->valuedouble;
        double want = flops / (ms * 1e-3) / 0.5e12;
        if (fabs(mfu - want) > 1e-9 * want) fail_msg("step %d: mfu %.17g, recomputed %.17g", step, mfu, want);
        assert_true(get(v[i], "tokens_per_s")->valuedouble > 0);
        assert_true(get(get(v[i], "peak_bytes"), "total")->valuedouble > 0);
        assert_true(get(get(v[i], "peak_bytes"), "params")->valuedouble > 0);
        assert_true(get(v[i], "eta_s")->valuedouble >= 0);
    }
    assert_int_equal(step, 4);
    assert_int_equal(nval, 2);
    for (int i = 1; i < n; i++) /* no offload: no host ledger */
        assert_null(cJSON_GetObjectItem(v[i], "host_peak_bytes"));
    assert_null(cJSON_GetObjectItem(j, "host_peak_bytes"));
    /* the progress line: validation loss where computed, lr, MFU, ETA */
    assert_non_null(strstr(out, "step    2/4 | loss "));
    const char *l2 = strstr(out, "step    2/4"), *l3 = strstr(out, "step    3/4");
    assert_non_null(l3);
    char line2[400];
    snprintf(line2, sizeof line2, "%.*s", (int)(l3 - l2), l2);
    assert_non_null(strstr(line2, "| val "));
    assert_non_null(strstr(line2, "| lr "));
    assert_non_null(strstr(line2, "| MFU "));
    assert_non_null(strstr(line2, "| ETA "));
    char line3[400];
    snprintf(line3, sizeof line3, "%.*s", (int)strcspn(l3, "\n"), l3);
    assert_null(strstr(line3, "| val ")); /* no validation after step 3 */
    free_lines(v, n);
    cJSON_Delete(j);
    free(out), free(args), free(val), free(log);
}

/* A step skipped for a non-finite loss (--nonfinite skip: sgd at --lr 1e30 with --weight-decay 1e30 makes step 1's
 * update overflow, so step 2's loss is inf/NaN) still has its rate in --json's "lr" (it was null), and every rate
 * there is --log's, to 17 significant digits (it had 9: 1e30 as a float printed 1.00000002e+30). Oracle: the --log
 * record of each step; the --json text of the rate is "%.17g" of it, and reads back to the same double. */
static void test_log_skipped_step_lr(void **state) {
    (void)state;
    char *log = prog_fmt("%s/skip.jsonl", tmpdir), *out = NULL;
    char *args = prog_fmt(TINY " --steps 2 --optimizer sgd --momentum 0 --lr 1e30 --weight-decay 1e30 --clip 0 "
                          "--nonfinite skip --log %s --json", log);
    int rc = prog_run(trainer, args, tmpdir, &out, NULL);
    if (rc != 0) fail_msg("exit %d:\n%s", rc, out);
    if (!strstr(out, "step    2/2") || !strstr(out, "skipped (inf/nan loss or gradients)"))
        fail_msg("step 2 not skipped:\n%s", out);
    cJSON *j = prog_last_json(out);
    const cJSON *lrs = get(j, "lr");
    assert_int_equal(cJSON_GetArraySize(lrs), 2);
    int n = 0;
    cJSON **v = read_lines(log, &n);
    assert_int_equal(n, 1 + 2);
    for (int s = 1; s <= 2; s++)
        if (!cJSON_IsNumber(cJSON_GetArrayItem(lrs, s - 1)))
            fail_msg("step %d%s: --json lr is not a number:\n%s", s, s == 2 ? " (skipped)" : "", out);
    char want[128] = "\"lr\":[";
    for (int s = 1; s <= 2; s++) {
        double a = get(v[s], "lr")->valuedouble, b = cJSON_GetArrayItem(lrs, s - 1)->valuedouble;
        if (memcmp(&a, &b, sizeof a)) fail_msg("step %d: log lr %.17g, --json %.17g", s, a, b);
        snprintf(want + strlen(want), sizeof want - strlen(want), "%s%.17g", s > 1 ? "," : "", a);
    }
    strcat(want, "]");
    if (!strstr(out, want)) fail_msg("--json lacks %s:\n%s", want, out);
    free_lines(v, n);
    cJSON_Delete(j);
    free(out), free(args), free(log);
}

/* A validation whose loss is inf or NaN (the weights overflowed: sgd at --lr 1e30 with --weight-decay 1e30, as
 * above) is still a validation: --log has its record, with val_loss null, and the progress line its "val" (both were
 * left out, as for a step not validated after, so a diverged run read as one that never validated). Oracle: --val-every
 * 1 validates after each of the 2 steps; --json's val_loss of each is null (not a finite number). */
static void test_log_val_not_finite(void **state) {
    (void)state;
    char *val = prog_fmt("%s/val_nan.txt", tmpdir), *log = prog_fmt("%s/val_nan.jsonl", tmpdir), *out = NULL;
    char text[600];
    for (size_t i = 0; i < sizeof text - 1; i++) text[i] = (char)('a' + (i * 5 + i / 7) % 26);
    text[sizeof text - 1] = 0;
    write_text(val, text);
    char *args = prog_fmt(TINY " --steps 2 --optimizer sgd --momentum 0 --lr 1e30 --weight-decay 1e30 --clip 0 "
                          "--nonfinite skip --val-data %s --val-every 1 --val-batches 1 --log %s --json", val, log);
    int rc = prog_run(trainer, args, tmpdir, &out, NULL);
    if (rc != 0) fail_msg("exit %d:\n%s", rc, out);
    cJSON *j = prog_last_json(out);
    const cJSON *vals = get(j, "val_loss");
    for (int s = 1; s <= 2; s++)
        if (cJSON_IsNumber(cJSON_GetArrayItem(vals, s - 1)))
            fail_msg("step %d: the validation loss is finite, the run did not diverge:\n%s", s, out);
    int n = 0;
    cJSON **v = read_lines(log, &n);
    if (n != 1 + 2 * 2) fail_msg("%d lines in --log, expected the config and 2 steps each with its validation", n);
    for (int s = 1; s <= 2; s++) {
        const cJSON *rec = v[2 * s];
        assert_string_equal(get(rec, "type")->valuestring, "val");
        assert_int_equal(get(rec, "step")->valueint, s);
        assert_true(cJSON_IsNull(get(rec, "val_loss")));
        char key[32];
        snprintf(key, sizeof key, "step    %d/2", s);
        const char *line = strstr(out, key), *eol = line ? strchr(line, '\n') : NULL;
        assert_non_null(eol);
        if (!memmem(line, (size_t)(eol - line), "| val ", 6)) fail_msg("step %d's line has no val:\n%s", s, out);
    }
    free_lines(v, n);
    cJSON_Delete(j);
    free(out), free(args), free(val), free(log);
}

/* --json's communication is the training steps': validation (fsdp gathers every layer again for each batch) and
 * checkpoints (their agreement) are left out of comm, comm_bytes_per_step and its split by group (they were in it:
 * --val-every 1 made fsdp's all-gathers per step 2.5 times what a step moves). Oracle: the same run without
 * validation or checkpoints; every operation's calls and bytes, the bytes per step and per group are equal. */
static void test_comm_per_step_is_steps(void **state) {
    (void)state;
    char *val = prog_fmt("%s/val_comm.txt", tmpdir), *ck = prog_fmt("%s/ck_comm", tmpdir);
    char text[600];
    for (size_t i = 0; i < sizeof text - 1; i++) text[i] = (char)('a' + (i * 3 + i / 11) % 26);
    text[sizeof text - 1] = 0;
    write_text(val, text);
    cJSON *j[2];
    for (int k = 0; k < 2; k++) {
        char *args = k ? prog_fmt(TINY " --steps 2 --world 2 --parallel fsdp --val-data %s --val-every 1 "
                                  "--val-batches 2 --save-every 1 --ckpt-dir %s --json", val, ck)
                       : prog_fmt(TINY " --steps 2 --world 2 --parallel fsdp --json");
        char *out = NULL;
        int rc = prog_run(trainer, args, tmpdir, &out, NULL);
        if (rc != 0) fail_msg("exit %d:\n%s", rc, out);
        j[k] = prog_last_json(out);
        free(out), free(args);
    }
    const char *key[] = { "comm", "comm_bytes_per_step", "comm_bytes_per_step_by_group" };
    for (int i = 0; i < 3; i++) {
        char *a = cJSON_PrintUnformatted(get(j[0], key[i])), *b = cJSON_PrintUnformatted(get(j[1], key[i]));
        if (strcmp(a, b) != 0) fail_msg("%s: %s with validation and checkpoints, %s without", key[i], b, a);
        free(a), free(b);
    }
    assert_true(get(j[0], "comm_bytes_per_step")->valuedouble > 0);
    cJSON_Delete(j[0]), cJSON_Delete(j[1]);
    test_rmtree(ck);
    free(val), free(ck);
}

/* Skipped steps and fp16's loss scale are in the logs: --precision fp16 at --lr 3 overflows from step 2, so the
 * scaler skips steps and halves its scale each time. Oracle: the progress lines' "skipped" marks; each --log
 * record's "skipped" equals its step's mark, "loss_scale" starts at 65536 and halves after each skipped step
 * (stays after an updating one), and --json's skipped_steps counts the marks, its loss_scale the last record's. */
static void test_log_skipped_and_scale(void **state) {
    (void)state;
    char *log = prog_fmt("%s/fp16.jsonl", tmpdir), *out = NULL;
    char *args = prog_fmt(TINY " --steps 5 --precision fp16 --lr 3 --clip 0 --log %s --json", log);
    int rc = prog_run(trainer, args, tmpdir, &out, NULL);
    if (rc != 0) fail_msg("exit %d:\n%s", rc, out);
    cJSON *j = prog_last_json(out);
    int n = 0, marks = 0;
    cJSON **v = read_lines(log, &n);
    assert_int_equal(n, 1 + 5);
    double scale = 65536;
    for (int s = 1; s <= 5; s++) {
        char key[32];
        snprintf(key, sizeof key, "step    %d/5", s);
        const char *line = strstr(out, key), *eol = line ? strchr(line, '\n') : NULL;
        assert_non_null(eol);
        const int mark = memmem(line, (size_t)(eol - line), "skipped", 7) != NULL;
        marks += mark;
        const cJSON *sk = get(v[s], "skipped");
        if (!cJSON_IsBool(sk) || cJSON_IsTrue(sk) != mark)
            fail_msg("step %d: --log skipped %s, the progress line %s", s, cJSON_IsTrue(sk) ? "true" : "false",
                     mark ? "skipped" : "not");
        if (get(v[s], "loss_scale")->valuedouble != scale)
            fail_msg("step %d: loss_scale %g, expected %g", s, get(v[s], "loss_scale")->valuedouble, scale);
        if (mark) scale /= 2;
    }
    if (marks < 2) fail_msg("fewer than 2 steps skipped (%d): the run does not overflow\n%s", marks, out);
    assert_int_equal((int)get(j, "skipped_steps")->valuedouble, marks);
    assert_true(get(j, "loss_scale")->valuedouble == get(v[5], "loss_scale")->valuedouble);
    free_lines(v, n);
    cJSON_Delete(j);
    free(out), free(args), free(log);
}

/* --offload optim: every step's record has the host ledger's peaks (optimizer state there, the total at least
 * that), as --json has for each rank; the last record's and --json's optimizer bytes agree (allocated once). */
static void test_log_host_peak(void **state) {
    (void)state;
    char *log = prog_fmt("%s/host.jsonl", tmpdir);
    char *args = prog_fmt(TINY " --steps 3 --parallel fsdp --world 2 --offload optim --log %s --json", log);
    char *out = NULL;
    int rc = prog_run(trainer, args, tmpdir, &out, NULL);
    if (rc != 0) fail_msg("exit %d:\n%s", rc, out);
    cJSON *j = prog_last_json(out);
    int n = 0;
    cJSON **v = read_lines(log, &n);
    assert_int_equal(n, 1 + 3);
    double optim = 0;
    for (int i = 1; i < n; i++) {
        const cJSON *h = get(v[i], "host_peak_bytes");
        optim = get(h, "optim")->valuedouble;
        if (!(optim > 0) || get(h, "total")->valuedouble < optim)
            fail_msg("step %d: host optim %g, total %g", i, optim, get(h, "total")->valuedouble);
        assert_true(get(get(v[i], "peak_bytes"), "optim")->valuedouble == 0); /* none on the device */
    }
    const cJSON *hj = get(j, "host_peak_bytes");
    if (get(hj, "optim")->valuedouble != optim)
        fail_msg("--json host optim %g, the log's last %g", get(hj, "optim")->valuedouble, optim);
    assert_int_equal(cJSON_GetArraySize(get(j, "host_per_rank")), 2);
    assert_true(get(cJSON_GetArrayItem(get(j, "host_per_rank"), 1), "optim")->valuedouble > 0);
    free_lines(v, n);
    cJSON_Delete(j);
    free(out), free(args), free(log);
}

/* A file name that is not UTF-8 (a name may hold any bytes): --log's and --json's JSON stays valid UTF-8, the
 * byte written as U+FFFD. Oracle: the output's bytes (cJSON reads invalid UTF-8 too, so it cannot tell). */
static void test_log_not_utf8_name(void **state) {
    (void)state;
    char *data = prog_fmt("%s/na\xffme.txt", tmpdir), *log = prog_fmt("%s/u8.jsonl", tmpdir);
    FILE *f = fopen(data, "wb");
    assert_non_null(f);
    for (int i = 0; i < 200; i++) fputs("some text to train on. ", f);
    assert_int_equal(fclose(f), 0);
    char *args = prog_fmt(TINY " --steps 1 --data '%s' --log '%s' --json", data, log), *out = NULL;
    int rc = prog_run(trainer, args, tmpdir, &out, NULL);
    if (rc != 0) fail_msg("exit %d:\n%s", rc, out);
    char *text = prog_slurp(log);
    const char *json = strrchr(out, '{') ? strstr(out, "{\"losses\"") : NULL;
    assert_non_null(json);
    assert_null(strchr(text, '\xff'));
    assert_null(strchr(json, '\xff'));
    assert_non_null(strstr(text, "na\xef\xbf\xbdme.txt"));
    assert_non_null(strstr(json, "na\xef\xbf\xbdme.txt"));
    free(text), free(out), free(args), free(log), free(data);
}

/* A TINY run to steps with a checkpoint every 2 steps in ck and --log log, resuming from ck when resume: exit 0. */
static void run_logged(const char *log, const char *ck, int steps, int resume) {
    char *a = prog_fmt(TINY " --steps %d --save-every 2 --ckpt-dir %s%s%s --log %s", steps, ck,
                       resume ? " --resume " : "", resume ? ck : "", log), *out = NULL;
    int rc = prog_run(trainer, a, tmpdir, &out, NULL);
    if (rc != 0) fail_msg("%s: exit %d\n%s", a, rc, out);
    free(out), free(a);
}

/* --resume appends to the log; --check-ddp's DDP run is not logged. */
static void test_log_resume_and_check_ddp(void **state) {
    (void)state;
    char *log = prog_fmt("%s/r.jsonl", tmpdir), *ck = prog_fmt("%s/ck", tmpdir), *out = NULL;
    run_logged(log, ck, 2, 0);
    run_logged(log, ck, 4, 1);
    int n = 0;
    cJSON **v = read_lines(log, &n);
    const char *want[] = { "config", "train", "train", "config", "train", "train" };
    const int steps[] = { 0, 1, 2, 0, 3, 4 };
    assert_int_equal(n, 6);
    for (int i = 0; i < n; i++) {
        assert_string_equal(get(v[i], "type")->valuestring, want[i]);
        if (steps[i]) assert_int_equal(get(v[i], "step")->valueint, steps[i]);
    }
    free_lines(v, n);
    char *a3 = prog_fmt(TINY " --steps 2 --world 2 --parallel fsdp --check-ddp --log %s", log);
    int rc = prog_run(trainer, a3, tmpdir, &out, NULL);
    if (rc != 0) fail_msg("check-ddp: exit %d\n%s", rc, out);
    free(out);
    v = read_lines(log, &n);
    assert_int_equal(n, 3); /* the config and the fsdp run's two steps */
    assert_string_equal(get(get(v[0], "config"), "parallel")->valuestring, "fsdp");
    free_lines(v, n);
    free(a3), free(log), free(ck);
}

/* A log that a failed run left ending inside a line (its write cut short by a full disk) and a run that resumes
 * into it: the resumed run's config record starts a line of its own (appended to the cut line, it was lost with it:
 * that line is skipped as not JSON). Oracle: the lines of the file, the cut one alone. */
static void test_log_resume_after_cut_line(void **state) {
    (void)state;
    char *log = prog_fmt("%s/cut.jsonl", tmpdir), *ck = prog_fmt("%s/ckcut", tmpdir);
    run_logged(log, ck, 2, 0);
    FILE *f = fopen(log, "a");
    assert_non_null(f);
    fputs("{\"type\":\"train\",\"step\":3,\"lo", f); /* the record of step 3, cut short */
    assert_int_equal(fclose(f), 0);
    run_logged(log, ck, 3, 1);
    char *text = prog_slurp(log);
    const char *want[] = { "config", "train", "train", NULL, "config", "train" };
    int n = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"), n++) {
        assert_true(n < 6);
        cJSON *j = cJSON_Parse(line);
        if (!want[n]) {
            assert_string_equal(line, "{\"type\":\"train\",\"step\":3,\"lo");
            assert_null(j);
            continue;
        }
        if (!j) fail_msg("line %d is not JSON: %.80s", n + 1, line);
        assert_string_equal(get(j, "type")->valuestring, want[n]);
        cJSON_Delete(j);
    }
    assert_int_equal(n, 6);
    free(text), free(log), free(ck);
}

/* A run refused once it has started to build (a --load that is not a weights file, a --resume of a checkpoint of
 * another model) leaves the --log of an earlier run as it was: neither emptied (a new run) nor given a config
 * line of a run that never trained (--resume). Oracle: the file's bytes before and after. */
static void test_log_kept_by_refused_run(void **state) {
    (void)state;
    char *log = prog_fmt("%s/kept.jsonl", tmpdir), *ck = prog_fmt("%s/ckkept", tmpdir);
    char *junk = prog_fmt("%s/junk.safetensors", tmpdir);
    run_logged(log, ck, 2, 0);
    FILE *f = fopen(junk, "w");
    assert_non_null(f);
    fputs("junk", f);
    assert_int_equal(fclose(f), 0);
    char *before = prog_slurp(log);
    char *args[2] = { prog_fmt(TINY " --steps 2 --load %s --log %s", junk, log),
                      prog_fmt(TINY " --steps 4 --dim 64 --ckpt-dir %s --resume %s --log %s", ck, ck, log) };
    for (int i = 0; i < 2; i++) {
        char *out = NULL;
        int rc = prog_run(trainer, args[i], tmpdir, &out, NULL);
        if (rc == 0) fail_msg("%s: exit 0, expected a refusal\n%s", args[i], out);
        char *after = prog_slurp(log);
        if (strcmp(before, after) != 0)
            fail_msg("%s (exit %d) changed the log:\n%s\nwas:\n%s", args[i], rc, after, before);
        free(after), free(out), free(args[i]);
    }
    free(before), free(junk), free(log), free(ck);
}

/* --log /dev/stdout with stdout a file (> out): the log's lines and the progress lines in it, one after the other (a
 * second offset into the file wrote them over each other), and the file not emptied once the banner is in it.
 * Oracle: the banner first, the config and the last step's record whole. */
static void test_log_to_stdout(void **state) {
    (void)state;
    char *out = NULL, *err = NULL, *a = prog_fmt(TINY " --steps 2 --log /dev/stdout");
    assert_int_equal(prog_run(trainer, a, tmpdir, &out, &err), 0);
    if (strncmp(out, "model: ", 7) != 0 || !strstr(out, "{\"type\":\"config\"") || !strstr(out, "\"step\":2"))
        fail_msg("--log /dev/stdout: the output lost the banner or the log:\n%s", out);
    free(out), free(err), free(a);
}

static int has_event(const cJSON *root, const char *name, const char *group) {
    const cJSON *ev;
    cJSON_ArrayForEach(ev, cJSON_GetObjectItem(root, "traceEvents")) {
        const cJSON *nm = cJSON_GetObjectItem(ev, "name"), *args = cJSON_GetObjectItem(ev, "args");
        if (!cJSON_IsString(nm) || strcmp(nm->valuestring, name)) continue;
        if (!group) return 1;
        const cJSON *g = args ? cJSON_GetObjectItem(args, "group") : NULL;
        if (cJSON_IsString(g) && strcmp(g->valuestring, group) == 0) return 1;
    }
    return 0;
}

/* Whether root has the span "step" with args {"step": step}. */
static int has_step(const cJSON *root, int step) {
    const cJSON *ev;
    cJSON_ArrayForEach(ev, cJSON_GetObjectItem(root, "traceEvents")) {
        const cJSON *nm = cJSON_GetObjectItem(ev, "name"), *args = cJSON_GetObjectItem(ev, "args");
        const cJSON *k = args ? cJSON_GetObjectItem(args, "step") : NULL;
        if (cJSON_IsString(nm) && !strcmp(nm->valuestring, "step") && cJSON_IsNumber(k) && k->valueint == step)
            return 1;
    }
    return 0;
}

/* --trace DIR: a file per rank with the steps (one span name, the step an argument), the layers (named by their
 * tensors), the collectives; a small --trace-events says so. An earlier run's file of a rank this run does not have
 * (rank-2.json of a run of 3 ranks) is set aside as rank-2.json.prev: it stayed, and tools/trace_merge showed it as a
 * third rank of this run. */
static void test_trace(void **state) {
    (void)state;
    char *dir = prog_fmt("%s/trace", tmpdir), *stale = prog_fmt("%s/trace/rank-2.json", tmpdir);
    char *aside = prog_fmt("%s.prev", stale);
    assert_int_equal(mkdir(dir, 0777), 0);
    write_text(stale, "{\"traceEvents\":[\n{\"name\":\"step\",\"cat\":\"step\",\"ph\":\"X\",\"ts\":1,\"dur\":2,"
                      "\"pid\":2,\"tid\":0}\n]}\n");
    char *args = prog_fmt(TINY " --steps 2 --world 2 --parallel ddp --trace %s", dir);
    char *out = NULL;
    int nev[2] = {0, 0};
    int rc = prog_run(trainer, args, tmpdir, &out, NULL);
    if (rc != 0) fail_msg("exit %d\n%s", rc, out);
    free(out);
    if (access(stale, F_OK) == 0) fail_msg("%s, an earlier run's, is still there beside this run's 2 ranks", stale);
    assert_int_equal(access(aside, F_OK), 0);
    free(stale), free(aside);
    for (int r = 0; r < 2; r++) {
        char *p = prog_fmt("%s/rank-%d.json", dir, r);
        char *text = prog_slurp(p);
        cJSON *j = cJSON_Parse(text);
        if (!j) fail_msg("%s is not JSON", p);
        assert_true(has_step(j, 1) && has_step(j, 2)); /* one span name, the step its argument */
        const char *label[3] = { "wte+wpe", "h.0", "ln_f" }; /* embedding, the block, the head: their tensors */
        for (int l = 0; l < 3; l++) {
            char nm[32];
            snprintf(nm, sizeof nm, "forward %s", label[l]);
            assert_true(has_event(j, nm, NULL));
            snprintf(nm, sizeof nm, "backward %s", label[l]);
            assert_true(has_event(j, nm, NULL));
        }
        assert_true(has_event(j, "optimizer", NULL));
        assert_true(has_event(j, "all_reduce", "world")); /* DDP's gradients over the world */
        assert_int_equal((int)cJSON_GetObjectItem(cJSON_GetObjectItem(j, "otherData"), "dropped")->valuedouble, 0);
        nev[r] = cJSON_GetArraySize(cJSON_GetObjectItem(j, "traceEvents"));
        cJSON_Delete(j);
        free(text), free(p);
    }
    free(args);
    /* tools/trace_merge: both ranks' events in one file, a process per rank */
    const char *src = __FILE__, *slash = strrchr(src, '/');
    char *merge = prog_fmt("'%.*s../tools/trace_merge' '%s' > '%s/all.json'", slash ? (int)(slash - src + 1) : 0, src, dir, dir);
    assert_int_equal(system(merge), 0);
    char *all = prog_fmt("%s/all.json", dir), *merged = prog_slurp(all);
    cJSON *m = cJSON_Parse(merged);
    if (!m) fail_msg("tools/trace_merge wrote no JSON: %.200s", merged);
    int per_pid[2] = {0, 0};
    const cJSON *ev;
    cJSON_ArrayForEach(ev, cJSON_GetObjectItem(m, "traceEvents")) {
        int pid = (int)cJSON_GetObjectItem(ev, "pid")->valuedouble;
        assert_true(pid == 0 || pid == 1);
        per_pid[pid]++;
    }
    assert_int_equal(per_pid[0], nev[0]);
    assert_int_equal(per_pid[1], nev[1]);
    cJSON_Delete(m);
    free(merged), free(all), free(merge);
    char *err = NULL;
    args = prog_fmt(TINY " --steps 2 --trace %s --trace-events 10", dir);
    rc = prog_run(trainer, args, tmpdir, &out, &err);
    if (rc != 0) fail_msg("exit %d\n%s%s", rc, out, err);
    assert_non_null(strstr(err, "rank 0's trace filled up at 10 events"));
    char *p = prog_fmt("%s/rank-0.json", dir), *text = prog_slurp(p);
    cJSON *j = cJSON_Parse(text);
    assert_non_null(j);
    assert_true(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "otherData"), "dropped")->valuedouble > 0);
    assert_true(has_event(j, "trace full", NULL));
    cJSON_Delete(j);
    free(text), free(p), free(out), free(err), free(args), free(dir);
}

/* The peak MFU divides by (examples/train/peak.c). Oracles: with FSC_CACHE_DIR set, the first run measures and
 * writes the cache, the second reads the same number; a cached peak below the steps' own rate is raised to the
 * fastest step's, every logged MFU stays at most 1 and the cache holds the raised number; --peak-tflops is used as
 * given (and a step above it is raised too); several ranks (a BLAS thread each) have a cache file of their own, a
 * run of --threads 1's; an empty FSC_CACHE_DIR caches nothing. */
static const char *peak_of(const char *args, double *tflops) {
    char *out = NULL, *full = prog_fmt("--layers 1 --dim 16 --heads 2 --seq 8 --batch 4 --steps 3 --json --log '%s/pk.jsonl' %s",
                                       tmpdir, args);
    int rc = prog_run(trainer, full, tmpdir, &out, NULL);
    if (rc != 0) fail_msg("fsc-train %s: exit %d\n%s", full, rc, out);
    cJSON *j = prog_last_json(out);
    *tflops = get(j, "peak_tflops")->valuedouble;
    static char source[16];
    snprintf(source, sizeof source, "%s", get(j, "peak_source")->valuestring);
    cJSON_Delete(j);
    free(out), free(full);
    int n = 0;
    char *path = prog_fmt("%s/pk.jsonl", tmpdir);
    cJSON **v = read_lines(path, &n);
    for (int i = 0; i < n; i++) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(v[i], "mfu");
        if (m && m->valuedouble > 1.0) fail_msg("%s: a logged MFU of %g", args, m->valuedouble);
    }
    free_lines(v, n);
    free(path);
    return source;
}

static void test_mfu_peak(void **state) {
    (void)state;
    char *dir = prog_fmt("%s/cache", tmpdir), *file = prog_fmt("%s/peak-cpu-0threads.txt", dir);
    setenv("FSC_CACHE_DIR", dir, 1);
    double a = 0, b = 0;
    assert_string_equal(peak_of("", &a), "measured");
    assert_true(a > 0);
    char *text = prog_slurp(file);
    assert_true(fabs(strtod(text, NULL) - a) <= 1e-5 * a);
    free(text);
    assert_string_equal(peak_of("", &b), "cached");
    assert_true(fabs(b - a) <= 1e-5 * a);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fputs("1e-9\n", f);
    fclose(f);
    assert_string_equal(peak_of("", &b), "raised");
    assert_true(b > 1e-9);
    text = prog_slurp(file);
    assert_true(fabs(strtod(text, NULL) - b) <= 1e-5 * b);
    free(text);
    assert_string_equal(peak_of("--peak-tflops 1000", &b), "given");
    assert_true(b == 1000.0);
    assert_string_equal(peak_of("--peak-tflops 1e-9", &b), "raised");
    /* several ranks run with a BLAS thread each: their rank's peak is not that of one rank on the library's default
     * threads (it was read from, and written to, the same file: MFU off by the cores' count) */
    char *one = prog_fmt("%s/peak-cpu-1threads.txt", dir);
    assert_string_not_equal(peak_of("--world 2 --parallel ddp", &b), "cached"); /* measured (a busy machine: raised) */
    assert_int_equal(access(one, F_OK), 0);
    assert_string_not_equal(peak_of("--threads 1", &b), "measured");
    free(one);
    setenv("FSC_CACHE_DIR", "", 1);
    unlink(file);
    assert_string_equal(peak_of("", &b), "measured");
    assert_int_equal(access(file, F_OK), -1);
    setenv("FSC_CACHE_DIR", "/tmp/fsc_test_cache", 1); /* as prog_setup left it */
    free(dir), free(file);
}

int main(int argc, char **argv) {
    (void)argc;
    if (prog_setup(argv[0], "test_trainer_logs", "train_gpt", trainer, sizeof trainer, tmpdir, sizeof tmpdir)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_version_and_misspelt),
        cmocka_unit_test(test_config_file),
        cmocka_unit_test(test_log_not_utf8_name),
        cmocka_unit_test(test_config_json_reproduces),
        cmocka_unit_test(test_hf_config),
        cmocka_unit_test(test_config_json_long_data),
        cmocka_unit_test(test_config_json_paths),
        cmocka_unit_test(test_save_checked_first),
        cmocka_unit_test(test_outputs_are_not_inputs),
        cmocka_unit_test(test_outputs_are_not_one_file),
        cmocka_unit_test(test_log),
        cmocka_unit_test(test_log_host_peak),
        cmocka_unit_test(test_log_resume_and_check_ddp),
        cmocka_unit_test(test_log_kept_by_refused_run),
        cmocka_unit_test(test_log_to_stdout),
        cmocka_unit_test(test_log_resume_after_cut_line),
        cmocka_unit_test(test_trace),
        cmocka_unit_test(test_mfu_peak),
        cmocka_unit_test(test_log_skipped_step_lr),
        cmocka_unit_test(test_log_skipped_and_scale),
        cmocka_unit_test(test_log_val_not_finite),
        cmocka_unit_test(test_comm_per_step_is_steps),
        cmocka_unit_test(test_config_default_takes_back),
    };
    if (getenv("FSC_TEST_FILTER")) cmocka_set_test_filter(getenv("FSC_TEST_FILTER")); /* one test: its name */
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    test_rmtree(tmpdir);
    return rc;
}
