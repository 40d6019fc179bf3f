/* Tests of examples/train_gpt.c: runs the built trainer (build/<x>/train_gpt, next to this binary's
 * tests/ folder) on tiny models and checks its options, errors, data order and JSON summary. */
#include <cjson/cJSON.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include "trainertest.h"

static char trainer[PATH_MAX];
static char tmpdir[64];

#define TINY "--layers 1 --dim 16 --heads 2 --seq 8 --batch 4 --steps 3"

/* A small deterministic text file of bytes < 128. */
static void write_data(const char *path, size_t n, unsigned mod) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    uint32_t x = 7;
    for (size_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        fputc((int)((x >> 24) % mod) + (mod < 128 ? 'a' : 0), f);
    }
    fclose(f);
}

/* Run the trainer with args; returns its exit code, stdout and stderr in *out / *err (caller frees). */
static int run(const char *args, char **out, char **err) {
    char *o = NULL, *e = NULL;
    int rc = prog_run(trainer, args, tmpdir, &o, &e);
    if (out) *out = o; else free(o);
    if (err) *err = e; else free(e);
    return rc;
}

/* Run a tiny training with extra args, return its losses. */
static void train_losses(const char *extra, double *l, int n) {
    char *args = prog_fmt(TINY " --data '%s/data.txt' --json %s", tmpdir, extra), *out = NULL, *err = NULL;
    int rc = run(args, &out, &err);
    if (rc != 0) fail_msg("trainer %s failed (%d): %s", args, rc, err);
    cJSON *j = prog_last_json(out);
    prog_doubles(j, "losses", l, n, 0.0);
    cJSON_Delete(j);
    free(out);
    free(err);
    free(args);
}

static int setup(void **st) {
    (void)st;
    char *path = prog_fmt("%s/data.txt", tmpdir);
    write_data(path, 61, 26); /* short, so the data order wraps around within 3 steps */
    free(path);
    return 0;
}

/* Oracle: every option of the table appears in --help (the usage text is generated from the table);
 * --help exits 0. */
static void test_help(void **st) {
    (void)st;
    char *out = NULL;
    assert_int_equal(run("--help", &out, NULL), 0);
    const char *names[] = {"--layers", "--dim", "--heads", "--seq", "--vocab", "--data", "--batch", "--steps",
                           "--lr", "--optimizer", "--momentum", "--weight-decay", "--clip", "--seed", "--init-save",
                           "--save", "--load", "--json", "--world", "--parallel", "--shard", "--wrap",
                           "--precision", "--accum", "--check-ddp", "--nonfinite", "--max-skipped-steps"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strstr(out, names[i])) fail_msg("--help lacks %s", names[i]);
    free(out);
}

/* Oracle: each bad command line exits with status 2 and a message naming the offending option. */
static void test_bad_options(void **st) {
    (void)st;
    struct { const char *args, *needle; } cases[] = {
        {"--bogus 3", "--bogus"},
        {"--steps abc", "--steps"},
        {"--steps 12x", "--steps"},
        {"--steps", "--steps"},
        {"--lr -0.5", "--lr"},
        {"--lr nan", "--lr"},
        {"--lr 0x10", "--lr: '0x10' is not a decimal number"}, /* not 16 */
        {"--lr 1e-50", "--lr: 1e-50 is too small for a float"}, /* not 0 */
        {"--clip 1e-400", "--clip: 1e-400 is too small for a float"},
        {"--lr 1e39", "--lr: 1e39 is too large for a float (the largest is 3.40282e+38)"}, /* finite, not "not finite" */
        {"--clip 1e400", "--clip: 1e400 is too large for a float"},
        {"--momentum 2 --optimizer sgd", "--momentum"},
        {"--optimizer adam", "--optimizer"},
        {"--parallel magic", "--parallel"},
        {"--precision fp8", "--precision"},
        {"--wrap min-params:", "--wrap"},
        {"--wrap min-params:-4", "--wrap"},
        {"--wrap everything --parallel fsdp --world 2", "--wrap"},
        {"--shard full --parallel ddp --world 2", "--shard"},
        /* groups of dp / 2 ranks: refused before the ranks start, not by each rank with a group size never given */
        {"--shard hybrid --parallel fsdp --world 5 --batch 5", "--shard hybrid shards over groups of half"},
        {"--shard hybrid --parallel fsdp --world 10 --pp 2 --layers 2 --batch 10", "5 ranks do not split"},
        {"--batch 6 --world 4 --parallel ddp", "--batch"},
        {"--batch 4 --accum 3", "--accum"},
        {"--batch 4 --chunks 3", "--chunks 3 does not divide"}, /* the option given, not its other name */
        {"--world 2", "--parallel"},
        {"--layers 0", "--layers"},
        {"--seed -1", "--seed"},
        {"--json=yes", "--json takes no value (or =false"},
        {"--dim 30 --heads 4", "heads"},
        {"--data /nonexistent/file.txt", "--data"},
        {"stray", "stray"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *err = NULL;
        int rc = run(cases[i].args, NULL, &err);
        if (rc != 2 || !strstr(err, cases[i].needle))
            fail_msg("'%s': exit %d, message \"%s\" (expected 2 and \"%s\")", cases[i].args, rc, err, cases[i].needle);
        free(err);
    }
}

/* Oracle: a run whose standard output cannot be written (/dev/full) fails, saying so, instead of exiting 0 with
 * its --json report lost. */
static void test_full_stdout(void **st) {
    (void)st;
    char *cmd = prog_fmt("'%s' " TINY " --data '%s/data.txt' --json > /dev/full 2> '%s/err'", trainer, tmpdir, tmpdir);
    int rc = system(cmd);
    char *path = prog_fmt("%s/err", tmpdir), *err = prog_slurp(path);
    if (!WIFEXITED(rc) || WEXITSTATUS(rc) != 1 || !strstr(err, "cannot write to standard output: No space left"))
        fail_msg("stdout to /dev/full: status %d, stderr \"%s\" (expected exit 1 and the message)", rc, err);
    free(err);
    free(path);
    free(cmd);
}

/* Oracle: the trainer's memory does not grow with --steps: a run of --steps 1000000000 (the maximum) reaches
 * step 2 (where a diverging SGD stops it) with a peak resident size under 1 GiB, where results kept for every
 * step would take 8 GB before step 1; --json says the step its arrays start at (1 in a run of fewer than 100000). */
static void test_steps_bounded(void **st) {
    (void)st;
    char *cmd = prog_fmt("'%s' " TINY " --steps 1000000000 --optimizer sgd --momentum 0 --lr 1e30 --weight-decay 1e30 "
                         "--clip 0 --data '%s/data.txt' > '%s/out' 2> '%s/err'", trainer, tmpdir, tmpdir, tmpdir);
    int status = 0;
    long maxrss_kib = prog_run_maxrss(cmd, &status);
    char *path = prog_fmt("%s/err", tmpdir), *err = prog_slurp(path);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 1 || !strstr(err, "step 2/1000000000: optimizer step 2"))
        fail_msg("--steps 1000000000: status %d, stderr \"%s\" (expected exit 1 at step 2)", status, err);
    if (maxrss_kib > 1024L * 1024L) fail_msg("--steps 1000000000: peak resident size %ld KiB", maxrss_kib);
    free(err);
    free(path);
    free(cmd);
    /* a run within the window: its arrays begin at step 1 */
    char *args = prog_fmt(TINY " --data '%s/data.txt' --json", tmpdir), *out = NULL;
    assert_int_equal(run(args, &out, NULL), 0);
    cJSON *j = prog_last_json(out);
    assert_int_equal(cJSON_GetObjectItem(j, "first_step")->valueint, 1);
    cJSON_Delete(j);
    free(out);
    free(args);
}

/* Oracle: a byte >= --vocab is an error naming its offset. */
static void test_data_vocab(void **st) {
    (void)st;
    char *path = prog_fmt("%s/bytes.bin", tmpdir);
    FILE *f = fopen(path, "wb");
    for (int i = 0; i < 100; i++) fputc(i == 57 ? 200 : 'a' + i % 20, f);
    fclose(f);
    char *args = prog_fmt(TINY " --vocab 128 --data '%s'", path), *err = NULL;
    assert_int_equal(run(args, NULL, &err), 2);
    assert_non_null(strstr(err, "offset 57"));
    free(err);
    free(args);
    free(path);
}

/* Run the trainer on --data path with the tiny model, stopped after 10 s (and, outside sanitizer builds,
 * held to 4 GB of address space), so that a trainer which waits on a FIFO or reads a device without end
 * fails this test instead of hanging or filling the machine. Returns the exit code and stderr in *err. */
static int run_data(const char *path, char **err) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    const char *limit = "";
#else
    const char *limit = "ulimit -v 4000000 2>/dev/null; ";
#endif
    char *args = prog_fmt("-c \"%sexec timeout 10 '%s' " TINY " --data '%s'\"", limit, trainer, path);
    int rc = prog_run("sh", args, tmpdir, NULL, err);
    free(args);
    return rc;
}

/* Oracle: --data must be a regular file of at least --seq + 1 bytes. A FIFO (which once blocked the
 * trainer), a device (/dev/zero, read once until memory ran out), a directory, an empty file and one of
 * --seq bytes are each refused at once with exit 2 and a message saying what is wrong; a file of exactly
 * --seq + 1 bytes trains. */
static void test_data_not_a_file(void **st) {
    (void)st;
    char *fifo = prog_fmt("%s/fifo", tmpdir), *empty = prog_fmt("%s/empty.txt", tmpdir), *shortf = prog_fmt("%s/short.txt", tmpdir),
         *exact = prog_fmt("%s/exact.txt", tmpdir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    write_data(empty, 0, 26);
    write_data(shortf, 8, 26);  /* --seq 8 */
    write_data(exact, 9, 26);
    struct { const char *path, *needle; } cases[] = {
        {fifo, "is a FIFO"},
        {"/dev/zero", "is a device"},
        {tmpdir, "is a directory"},
        {empty, ": 0 tokens, but --seq 8 needs at least 9"},
        {shortf, "8 tokens, but --seq 8 needs at least 9"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *err = NULL;
        int rc = run_data(cases[i].path, &err);
        if (rc != 2 || !strstr(err, cases[i].needle) || !strstr(err, cases[i].path))
            fail_msg("--data %s: exit %d, message \"%s\" (expected 2 and \"%s\")", cases[i].path, rc, err,
                     cases[i].needle);
        free(err);
    }
    char *err = NULL;
    int rc = run_data(exact, &err);
    if (rc != 0) fail_msg("--data of exactly --seq + 1 bytes: exit %d: %s", rc, err);
    free(err);
    unlink(fifo);
    free(fifo);
    free(empty);
    free(shortf);
    free(exact);
}

/* The data-order contract, implemented here independently of the trainer. */
typedef struct {
    const uint8_t *data;
    size_t n;
    double loss[3];
} ref_arg;

static fsc_status ref_fn(fsc_rank *r, void *argp) {
    ref_arg *a = argp;
    fsc_gpt_config gc = {.layers = 1, .dim = 16, .heads = 2, .seq = 8, .vocab = 256};
    fsc_parallel_opts po = {.kind = FSC_PAR_NONE, .reshard_after_forward = -1, .param_dtype = FSC_F32,
                            .reduce_dtype = FSC_F32, .accum = 1, .no_sync = 1, .clip = 1.0f};
    fsc_optim_config oc = {.kind = FSC_OPT_ADAMW, .lr = 0.003f};
    fsc_engine *e = NULL;
    FSC_TRY(fsc_engine_create(r, &gc, &po, &oc, 1, &e));
    int B = 4, T = 8;
    int32_t tok[32], tgt[32];
    fsc_status s = FSC_OK;
    for (int step = 0; step < 3 && s == FSC_OK; step++) {
        for (int i = 0; i < B; i++) {
            size_t start = ((size_t)(step * B + i) * (size_t)T) % (a->n - (size_t)T);
            for (int t = 0; t < T; t++) {
                tok[i * T + t] = a->data[start + (size_t)t];
                tgt[i * T + t] = a->data[start + (size_t)t + 1];
            }
        }
        fsc_step_info info;
        s = fsc_engine_step(e, tok, tgt, B, B, &info);
        a->loss[step] = info.loss;
    }
    fsc_engine_free(e);
    return s;
}

/* Oracle: the trainer's losses equal, bit for bit, an engine driven directly by this test with batches
 * built from the documented data order ((s*B + i) * T) mod (N - T), with the trainer's defaults
 * (AdamW, lr 0.003, clip 1, seed 1). Losses in the JSON round-trip the doubles exactly. */
static void test_data_order_and_losses(void **st) {
    (void)st;
    char *path = prog_fmt("%s/data.txt", tmpdir);
    ref_arg a = {0};
    char *text = prog_slurp(path);
    free(path);
    a.data = (const uint8_t *)text;
    a.n = strlen(text);
    assert_ok(fsc_cluster_run(&(fsc_cluster_opts){.world = 1}, ref_fn, &a));
    double l[3];
    train_losses("", l, 3);
    for (int i = 0; i < 3; i++)
        if (memcmp(&l[i], &a.loss[i], sizeof l[i])) fail_msg("step %d: trainer %.17g, reference %.17g", i, l[i], a.loss[i]);
    assert_true(fabs(a.loss[0] - log(256.0)) < 0.2);
    free(text);
}

/* Oracle: the JSON summary holds every loss, throughput, per-tag peaks for each rank, communication per
 * operation and the configuration as given. Two ranks with DDP see the same sequences as one rank, so their
 * losses agree with one rank's to rounding (1e-5 relative); FSDP equals DDP bit for bit. */
static void test_json_and_world(void **st) {
    (void)st;
    char *args = prog_fmt(TINY " --data '%s/data.txt' --json --world 2 --parallel ddp --optimizer sgd "
                          "--lr 0.05 --momentum 0.5 --seed 9", tmpdir), *out = NULL;
    assert_int_equal(run(args, &out, NULL), 0);
    free(args);
    cJSON *j = prog_last_json(out);
    double ddp[3];
    prog_doubles(j, "losses", ddp, 3, 0.0);
    assert_true(cJSON_GetObjectItem(j, "tokens_per_s")->valuedouble > 0);
    cJSON *peak = cJSON_GetObjectItem(j, "peak_bytes");
    for (int t = 0; t < FSC_TAG_COUNT; t++) assert_non_null(cJSON_GetObjectItem(peak, fsc_tag_name((fsc_tag)t)));
    assert_true(cJSON_GetObjectItem(peak, "params")->valuedouble > 0);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "per_rank")), 2);
    cJSON *ar = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "comm"), "all_reduce");
    assert_true(cJSON_GetObjectItem(ar, "calls")->valuedouble >= 3 && cJSON_GetObjectItem(ar, "bytes")->valuedouble > 0);
    cJSON *cfg = cJSON_GetObjectItem(j, "config");
    assert_string_equal(cJSON_GetObjectItem(cfg, "optimizer")->valuestring, "sgd");
    assert_string_equal(cJSON_GetObjectItem(cfg, "parallel")->valuestring, "ddp");
    assert_int_equal(cJSON_GetObjectItem(cfg, "world")->valueint, 2);
    assert_true(cJSON_GetObjectItem(cfg, "momentum")->valuedouble == 0.5);
    assert_true(cJSON_GetObjectItem(cfg, "seed")->valuedouble == 9);
    cJSON_Delete(j);
    free(out);
    double one[3], fsdp[3];
    train_losses("--optimizer sgd --lr 0.05 --momentum 0.5 --seed 9", one, 3);
    train_losses("--optimizer sgd --lr 0.05 --momentum 0.5 --seed 9 --world 2 --parallel fsdp", fsdp, 3);
    for (int i = 0; i < 3; i++) {
        if (!(fabs(ddp[i] - one[i]) <= 1e-5 * one[i])) fail_msg("step %d: world 2 %.9g vs world 1 %.9g", i, ddp[i], one[i]);
        if (memcmp(&ddp[i], &fsdp[i], sizeof ddp[i])) fail_msg("step %d: fsdp %.17g vs ddp %.17g", i, fsdp[i], ddp[i]);
    }
}

/* Oracle: the same seed gives the same losses; --init-save writes the initial weights, and training from
 * them with --load reproduces the losses bit for bit; --save writes a file that --load accepts. */
static void test_determinism_and_weights(void **st) {
    (void)st;
    double a[3], b[3], c[3];
    char *extra = prog_fmt("--init-save '%s/init.st' --save '%s/final.st'", tmpdir, tmpdir);
    train_losses(extra, a, 3);
    free(extra);
    train_losses("", b, 3);
    assert_memory_equal(a, b, sizeof a);
    extra = prog_fmt("--seed 5 --load '%s/init.st'", tmpdir);
    train_losses(extra, c, 3);
    free(extra);
    assert_memory_equal(a, c, sizeof a);
    extra = prog_fmt("--load '%s/final.st'", tmpdir);
    train_losses(extra, c, 3);
    free(extra);
    assert_true(c[0] < a[0]);  /* trained weights start lower */
    char *args = prog_fmt("--layers 2 --dim 16 --heads 2 --seq 8 --batch 4 --steps 1 --data '%s/data.txt' "
                          "--load '%s/init.st'", tmpdir, tmpdir), *err = NULL;
    assert_int_equal(run(args, NULL, &err), 1);  /* a file of another shape is refused */
    assert_non_null(strstr(err, "init.st"));
    free(err);
    free(args);
    /* the same shapes, another model: a file of more blocks (its h.1.* would be dropped), or of other heads (the
     * width split otherwise) is refused, naming the file and what differs */
    args = prog_fmt("--layers 2 --dim 16 --heads 2 --seq 8 --batch 4 --steps 1 --data '%s/data.txt' "
                    "--init-save '%s/two.st'", tmpdir, tmpdir);
    assert_int_equal(run(args, NULL, NULL), 0);
    free(args);
    const char *other[][2] = { { "--layers 1 --heads 2", "holds h.1." }, { "--layers 2 --heads 4", "heads 2" },
                               { "--model llama --layers 2 --heads 2", "family gpt2; this model is of family llama" } };
    for (int i = 0; i < 3; i++) {
        args = prog_fmt("%s --dim 16 --seq 8 --batch 4 --steps 1 --data '%s/data.txt' --load '%s/two.st'",
                        other[i][0], tmpdir, tmpdir);
        int rc = run(args, NULL, &err);
        if (rc != 1 || !strstr(err, "two.st") || !strstr(err, other[i][1]))
            fail_msg("%s: exit %d: %s", args, rc, err);
        free(err);
        free(args);
    }
}

/* A copy of weights file src at dst whose model record (fsc_model) is rec: every entry (F32) as it was. */
static void rerecord(const char *src, const char *dst, const char *rec) {
    fsc_st_file *f = NULL;
    fsc_st_writer *w = NULL;
    assert_ok(fsc_st_open(src, &f));
    assert_ok(fsc_st_writer_open(dst, &w));
    assert_ok(fsc_st_writer_meta(w, "format", "pt"));
    assert_ok(fsc_st_writer_meta(w, FSC_ST_META_MODEL, rec));
    for (int i = 0; i < fsc_st_count(f); i++) {
        const fsc_st_entry *en = fsc_st_entry_at(f, i);
        assert_ok(fsc_st_writer_add(w, en->name, en->dtype, en->ndim, en->shape));
    }
    assert_ok(fsc_st_writer_begin_data(w));
    for (int i = 0; i < fsc_st_count(f); i++) {
        const fsc_st_entry *en = fsc_st_entry_at(f, i);
        const uint64_t n = (en->end - en->begin) / sizeof(float);
        float *v = malloc(n * sizeof *v + 1);
        assert_non_null(v);
        assert_ok(fsc_st_read_f32(f, en, v, 0, n));
        assert_ok(fsc_st_writer_write_f32(w, i, v, 0, n));
        free(v);
    }
    assert_ok(fsc_st_writer_commit(w));
    fsc_st_close(f);
}

/* Oracle: --load of a weights file whose model record is malformed is refused (exit 1) naming the file, the record
 * and what is wrong: not JSON, a record its family refuses, or a model of other tensors than the file holds (more or
 * fewer blocks, a longer context). It was loaded: the engine compared the record's family and heads only. The file
 * with its own record loads. */
static void test_load_record_checked(void **st) {
    (void)st;
    char *two = prog_fmt("%s/rec.st", tmpdir), *bad = prog_fmt("%s/rec-bad.st", tmpdir), *err = NULL;
    char *args = prog_fmt("--layers 2 --dim 16 --heads 2 --seq 8 --batch 4 --steps 0 --data '%s/data.txt' "
                          "--init-save '%s'", tmpdir, two);
    assert_int_equal(run(args, NULL, NULL), 0);
    free(args);
    static const char *const cases[][2] = {
        { "not json", "is not a JSON object: not json" },
        { "{\"layers\":3,\"dim\":16,\"heads\":2,\"seq\":8,\"vocab\":256}",
          "does not describe the tensors it holds: holds no tensor h.2." },
        { "{\"layers\":1,\"dim\":16,\"heads\":2,\"seq\":8,\"vocab\":256}",
          "does not describe the tensors it holds: holds tensor h.1." },
        { "{\"layers\":2,\"dim\":16,\"heads\":2,\"seq\":16,\"vocab\":256}",
          "wpe.weight has shape [8, 16] but its gpt2 model expects [16, 16]" },
        { "{\"layers\":2,\"dim\":16,\"heads\":2,\"seq\":8,\"vocab\":-1}", "is refused by its family: " },
        { "{\"layers\":2,\"dim\":16,\"heads\":2,\"seq\":8,\"vocab\":256}", NULL }, /* its own: loads */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        rerecord(two, bad, cases[i][0]);
        args = prog_fmt("--layers 2 --dim 16 --heads 2 --seq 8 --batch 4 --steps 1 --data '%s/data.txt' --load '%s'",
                        tmpdir, bad);
        const int rc = run(args, NULL, &err);
        if (cases[i][1] ? rc != 1 || !strstr(err, "--load") || !strstr(err, "rec-bad.st: its model record (fsc_model)")
                              || !strstr(err, cases[i][1])
                        : rc != 0)
            fail_msg("record %s: exit %d: %s", cases[i][0], rc, err);
        free(err), free(args);
    }
    free(two), free(bad);
}

/* Set element el of tensor `name` in a safetensors file to v. */
static void patch_float(const char *path, const char *name, size_t el, float v) {
    fsc_st_file *f = NULL;
    assert_ok(fsc_st_open(path, &f));
    const fsc_st_entry *en = fsc_st_find(f, name);
    assert_non_null(en);
    uint64_t begin = en->begin;
    fsc_st_close(f);
    FILE *fp = fopen(path, "r+b");
    assert_non_null(fp);
    unsigned char b8[8];
    assert_int_equal(fread(b8, 1, 8, fp), 8);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | b8[i];
    assert_int_equal(fseek(fp, (long)(8 + hlen + begin + 4 * el), SEEK_SET), 0);
    assert_int_equal(fwrite(&v, sizeof v, 1, fp), 1);
    fclose(fp);
}

/* Run the trainer expecting exit status want and needles in its stderr. */
static void expect_run(const char *args, int want, const char *const *needles, int n) {
    char *out = NULL, *err = NULL;
    int rc = run(args, &out, &err);
    if (rc != want) fail_msg("'%s': exit %d (expected %d)\nstdout: %s\nstderr: %s", args, rc, want, out, err);
    for (int i = 0; i < n; i++)
        if (!strstr(err, needles[i])) fail_msg("'%s': stderr \"%s\" lacks \"%s\"", args, err, needles[i]);
    free(out);
    free(err);
}

/* Oracle (docs/fsdp.md, "Non-finite steps"): SGD with lr = weight decay = 1e30 makes every nonzero weight
 * inf in step 1 (whose loss is finite). Then a checkpoint is refused and nothing is written; the next step
 * stops the run (exit 1) naming it, on one rank and on an FSDP world; --nonfinite skip skips until
 * --max-skipped-steps in a row; fp16 skips with the scale at its floor until the limit; --load of a file with
 * one NaN is refused naming the tensor and element; --nonfinite with fp16 is an error. */
static void test_nonfinite(void **st) {
    (void)st;
    const char *blow = TINY " --optimizer sgd --momentum 0 --lr 1e30 --weight-decay 1e30 --clip 0";
    char *args = prog_fmt("%s --data '%s/data.txt' --save-every 1 --ckpt-dir '%s/nfck'", blow, tmpdir, tmpdir);
    expect_run(args, 1, (const char *const[]){"non-finite values", "checkpoint of step 1 not written", "inf"}, 3);
    free(args);
    args = prog_fmt("%s/nfck/step-00000001", tmpdir);
    assert_int_equal(access(args, F_OK), -1);
    free(args);
    const char *worlds[] = {"", "--world 2 --parallel fsdp"};
    for (int w = 0; w < 2; w++) {
        args = prog_fmt("%s --data '%s/data.txt' %s", blow, tmpdir, worlds[w]);
        expect_run(args, 1, (const char *const[]){"step 2/3: optimizer step 2: the loss is", "stopped before the update"}, 2);
        free(args);
    }
    args = prog_fmt("%s --data '%s/data.txt' --steps 5 --nonfinite skip --max-skipped-steps 2", blow, tmpdir);
    char *out = NULL, *err = NULL;
    assert_int_equal(run(args, &out, &err), 1);
    if (!strstr(out, "step    2/5") || !strstr(out, "skipped (inf/nan loss or gradients)") ||
        strstr(out, "step    3/5") || !strstr(err, "step 3/5: optimizer step 2: 2 steps in a row skipped"))
        fail_msg("'%s': step 2 skipped, step 3 the second in a row, expected; output:\n%s%s", args, out, err);
    free(out);
    free(err);
    free(args);
    args = prog_fmt("%s --data '%s/data.txt' --steps 40 --precision fp16 --max-skipped-steps 20", blow, tmpdir);
    expect_run(args, 1, (const char *const[]){"20 steps in a row skipped", "the loss scale is 1, its floor 1"}, 2);
    free(args);
    args = prog_fmt(TINY " --data '%s/data.txt' --precision fp16 --nonfinite stop", tmpdir);
    expect_run(args, 2, (const char *const[]){"--nonfinite applies to fp32 and bf16"}, 1);
    free(args);
    /* fp32 and bf16 without --nonfinite skip stop at the first inf/NaN step: a limit of skipped steps was ignored */
    const char *unskipped[] = {"", "--precision bf16", "--nonfinite stop"};
    for (int i = 0; i < 3; i++) {
        args = prog_fmt(TINY " --data '%s/data.txt' --max-skipped-steps 3 %s", tmpdir, unskipped[i]);
        expect_run(args, 2, (const char *const[]){"--max-skipped-steps applies to --nonfinite skip and --precision "
                                                   "fp16"}, 1);
        free(args);
    }
    args = prog_fmt(TINY " --data '%s/data.txt' --steps 0 --init-save '%s/nan.st'", tmpdir, tmpdir);
    expect_run(args, 0, NULL, 0);
    free(args);
    args = prog_fmt("%s/nan.st", tmpdir);
    patch_float(args, "h.0.mlp.c_fc.bias", 2, NAN);
    free(args);
    for (int w = 0; w < 2; w++) {
        args = prog_fmt(TINY " --data '%s/data.txt' --load '%s/nan.st' %s", tmpdir, tmpdir, worlds[w]);
        expect_run(args, 1, (const char *const[]){"nan.st: refusing non-finite weights", "h.0.mlp.c_fc.bias, element 2, is NaN"}, 2);
        free(args);
    }
}

/* Oracle: every family --help names for --model ("model family: gpt2|llama ...") is one the trainer builds
 * (examples/train/models.c finds its entry by that name): a step of each runs and the banner names it. */
static void test_model_families(void **st) {
    (void)st;
    char *help = NULL;
    assert_int_equal(prog_run(trainer, "--help", tmpdir, &help, NULL), 0);
    const char *p = strstr(help, "model family: ");
    assert_non_null(p);
    p += strlen("model family: ");
    int n = 0;
    while (*p && *p != ' ') {
        size_t len = strcspn(p, "| ");
        char *args = prog_fmt(TINY " --data '%s/data.txt' --steps 1 --model %.*s", tmpdir, (int)len, p);
        char *want = prog_fmt("model: %.*s, ", (int)len, p), *out = NULL, *err = NULL;
        int rc = run(args, &out, &err);
        if (rc != 0 || !strstr(out, want)) fail_msg("%s: exit %d, no '%s' line\n%s%s", args, rc, want, out, err);
        free(args), free(want), free(out), free(err);
        n++;
        p += len + (p[len] == '|');
    }
    assert_true(n >= 2); /* gpt2 and llama at least */
    free(help);
}

/* --padded-vocab (llm.c's padding): the losses of --vocab 250 bit for bit (the padding rows are in no logit), the
 * saved wte [250, C] with Hugging Face's config.json saying vocab_size 250, the file loading into the padded model
 * and into the unpadded one; --model llama's losses the unpadded Llama's bit for bit, and with --tp 2 (both
 * families; the Llama also with --sequence-parallel) the unpadded tp 2 run's printed losses; refused below --vocab
 * and, with --tp, when a tensor rank would hold no real row, naming the problem. */
static void test_padded_vocab(void **state) {
    (void)state;
    char *pa = prog_fmt(TINY " --vocab 250 --padded-vocab 256 --save %s/pad.safetensors", tmpdir);
    cJSON *u = prog_json(trainer, tmpdir, "", TINY " --vocab 250"), *p = prog_json(trainer, tmpdir, "", pa);
    char *lu = cJSON_PrintUnformatted(cJSON_GetObjectItem(u, "losses"));
    char *lp = cJSON_PrintUnformatted(cJSON_GetObjectItem(p, "losses"));
    assert_string_equal(lu, lp);
    const double extra = cJSON_GetObjectItem(p, "params")->valuedouble - cJSON_GetObjectItem(u, "params")->valuedouble;
    assert_int_equal((int)extra, 6 * 16); /* the padding rows: 6 of width 16 */
    char *path = prog_fmt("%s/pad.safetensors", tmpdir);
    fsc_st_file *f = NULL;
    assert_ok(fsc_st_open(path, &f));
    assert_int_equal(fsc_st_find(f, "wte.weight")->shape[0], 250);
    fsc_st_close(f);
    char *hf = prog_fmt("%s/config.json", tmpdir), *text = prog_slurp(hf);
    cJSON *h = cJSON_Parse(text);
    assert_int_equal(cJSON_GetObjectItem(h, "vocab_size")->valueint, 250);
    cJSON_Delete(h);
    char *l1 = prog_fmt(TINY " --vocab 250 --padded-vocab 256 --load %s", path);
    char *l2 = prog_fmt(TINY " --vocab 250 --load %s", path);
    cJSON *j1 = prog_json(trainer, tmpdir, "", l1), *j2 = prog_json(trainer, tmpdir, "", l2);
    char *s1 = cJSON_PrintUnformatted(cJSON_GetObjectItem(j1, "losses"));
    char *s2 = cJSON_PrintUnformatted(cJSON_GetObjectItem(j2, "losses"));
    assert_string_equal(s1, s2);
    prog_refused(trainer, TINY " --vocab 250 --padded-vocab 200", tmpdir, 2, "padded_vocab is 200");
    const char *same[4][2] = { { " --model llama --vocab 250", " --model llama --vocab 250 --padded-vocab 256" },
                               { " --vocab 250 --world 2 --tp 2", " --vocab 250 --padded-vocab 256 --world 2 --tp 2" },
                               { " --model llama --vocab 250 --world 2 --tp 2",
                                 " --model llama --vocab 250 --padded-vocab 256 --world 2 --tp 2" },
                               { " --model llama --vocab 250 --world 2 --tp 2 --sequence-parallel",
                                 " --model llama --vocab 250 --padded-vocab 256 --world 2 --tp 2 "
                                 "--sequence-parallel" } };
    for (int k = 0; k < 4; k++) { /* tp: the printed losses (6 digits); the runs differ in the last bits */
        char *a = prog_fmt(TINY "%s", same[k][0]), *b = prog_fmt(TINY "%s", same[k][1]);
        cJSON *ja = prog_json(trainer, tmpdir, "", a), *jb = prog_json(trainer, tmpdir, "", b);
        const cJSON *la = cJSON_GetObjectItem(ja, "losses"), *lb = cJSON_GetObjectItem(jb, "losses");
        assert_int_equal(cJSON_GetArraySize(la), cJSON_GetArraySize(lb));
        for (int i = 0; i < cJSON_GetArraySize(la); i++) {
            const double x = cJSON_GetArrayItem(la, i)->valuedouble, y = cJSON_GetArrayItem(lb, i)->valuedouble;
            if (k == 0 ? x != y : fabs(x - y) > 1e-5 * fabs(x)) fail_msg("%s: loss %d %.9g, unpadded %.9g", b, i, y, x);
        }
        cJSON_Delete(ja), cJSON_Delete(jb);
        free(a), free(b);
    }
    /* refused before any rank starts (exit 2), by fsc_tp_check_config: the model refused it after the banner */
    prog_refused(trainer, TINY " --vocab 250 --padded-vocab 512 --world 2 --tp 2", tmpdir, 2,
                 "pad by fewer than 256 rows");
    cJSON_Delete(u), cJSON_Delete(p), cJSON_Delete(j1), cJSON_Delete(j2);
    free(lu), free(lp), free(s1), free(s2), free(pa), free(path), free(hf), free(text), free(l1), free(l2);
}

int main(int argc, char **argv) {
    (void)argc;
    if (prog_setup(argv[0], "test_trainer", "train_gpt", trainer, sizeof trainer, tmpdir, sizeof tmpdir)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_help),
        cmocka_unit_test(test_model_families),
        cmocka_unit_test(test_bad_options),
        cmocka_unit_test(test_full_stdout),
        cmocka_unit_test(test_steps_bounded),
        cmocka_unit_test(test_data_vocab),
        cmocka_unit_test(test_data_not_a_file),
        cmocka_unit_test(test_data_order_and_losses),
        cmocka_unit_test(test_json_and_world),
        cmocka_unit_test(test_determinism_and_weights),
        cmocka_unit_test(test_load_record_checked),
        cmocka_unit_test(test_nonfinite),
        cmocka_unit_test(test_padded_vocab),
    };
    int rc = cmocka_run_group_tests(tests, setup, NULL);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "test_trainer: could not remove %s\n", tmpdir);
    return rc;
}
