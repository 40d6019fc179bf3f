/* The checkpoint options of examples/train_gpt.c and the inspection command examples/ckpt_tool.c, run as
 * built (build/<x>/train_gpt and ckpt_tool, next to this binary's tests/ folder) on a tiny model.
 * Oracles: 6 steps straight equal 4 steps with --save-every 2 then --resume up to --steps 6 (losses of
 * steps 5 and 6 and the final weights file, bit for bit), also resuming with another --parallel on the same
 * world; bad combinations of options are refused with exit 2 and a message; a leftover named like an
 * interrupted save that is a link to a folder elsewhere does not stop --resume and the folder keeps its
 * file (a warning names the link); a new run (another seed and learning rate) into a --ckpt-dir holding a
 * longer run's checkpoints is refused with exit 2, leaving them byte for byte, and with --ckpt-overwrite
 * replaces them so that --resume continues the new run exactly; ckpt_tool lists the newest checkpoint,
 * shows tensors, pieces and checksums, verifies a good checkpoint and refuses a damaged one, naming the
 * file, and refuses metadata edited by hand (its checksum); --resume into a --ckpt-dir of another run is refused
 * with exit 2 before any step, that run's train_config.json byte for byte; ckpt_tool list prints steps in order;
 * ckpt_tool show prints the recorded model configuration whole; with a path too long for the system it says so. */
#include <cjson/cJSON.h>
#include <libgen.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>
#include "trainertest.h"

static char bindir[PATH_MAX];
static char tmpdir[64];

#define TINY "--layers 1 --dim 16 --heads 2 --seq 8 --batch 6 --world 3 --json"

/* Run build/<x>/<prog> args; returns the exit code and stdout, stderr (caller frees). */
static int run(const char *prog, const char *args, char **out, char **err) {
    char *cmd = NULL, p[600];
    if (asprintf(&cmd, "'%s/%s' %s > '%s/out' 2> '%s/err'", bindir, prog, args, tmpdir, tmpdir) < 0) fail_msg("oom");
    int st = system(cmd);
    free(cmd);
    for (int k = 0; k < 2; k++) {
        snprintf(p, sizeof p, "%s/%s", tmpdir, k ? "err" : "out");
        FILE *f = fopen(p, "rb");
        char *s = calloc(1, 1 << 20);
        if (f) {
            size_t n = fread(s, 1, (1 << 20) - 1, f);
            s[n] = 0;
            fclose(f);
        }
        if (k == 0 && out) *out = s;
        else if (k == 1 && err) *err = s;
        else free(s);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* the losses of the JSON line that ends the trainer's output (null: not run) */
static void losses(const char *out, double *l, int n) {
    const char *line = strstr(out, "{\"losses\"");
    assert_non_null(line);
    cJSON *j = cJSON_Parse(line);
    assert_non_null(j);
    cJSON *a = cJSON_GetObjectItem(j, "losses");
    assert_int_equal(cJSON_GetArraySize(a), n);
    for (int i = 0; i < n; i++) {
        cJSON *x = cJSON_GetArrayItem(a, i);
        l[i] = cJSON_IsNumber(x) ? x->valuedouble : -1.0;
    }
    cJSON_Delete(j);
}

static void train(const char *args, double *l, int n) {
    char *out = NULL, *err = NULL;
    int rc = run("train_gpt", args, &out, &err);
    if (rc != 0) fail_msg("train_gpt %s failed (%d): %s", args, rc, err);
    losses(out, l, n);
    free(out);
    free(err);
}

static int same_file(const char *a, const char *b) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", a, b);
    return system(cmd) == 0;
}

static void test_trainer_resume(void **st) {
    (void)st;
    char args[1024];
    double a[6], b[6], c[6];
    snprintf(args, sizeof args, TINY " --parallel fsdp --steps 6 --save '%s/straight.st'", tmpdir);
    train(args, a, 6);
    snprintf(args, sizeof args, TINY " --parallel fsdp --steps 4 --save-every 2 --ckpt-dir '%s/ck'", tmpdir);
    train(args, b, 4);
    snprintf(args, sizeof args, TINY " --parallel fsdp --steps 6 --resume '%s/ck' --save '%s/resumed.st'", tmpdir,
             tmpdir);
    train(args, b, 6);
    assert_true(b[3] == -1.0 && b[0] == -1.0); /* steps before the checkpoint were not run */
    assert_memory_equal(&a[4], &b[4], 2 * sizeof(double));
    char p1[128], p2[128];
    snprintf(p1, sizeof p1, "%s/straight.st", tmpdir);
    snprintf(p2, sizeof p2, "%s/resumed.st", tmpdir);
    assert_true(same_file(p1, p2));
    /* another strategy on the same world continues bit for bit too (it equals DDP there) */
    snprintf(args, sizeof args, TINY " --parallel zero2 --steps 6 --resume '%s/ck'", tmpdir);
    train(args, c, 6);
    assert_memory_equal(&a[4], &c[4], 2 * sizeof(double));
    /* --steps below the checkpoint's step: nothing left to run */
    snprintf(args, sizeof args, TINY " --parallel ddp --steps 3 --resume '%s/ck'", tmpdir);
    train(args, c, 3);
}

/* --load of a checkpoint takes its weights only: into another optimizer, training as from the same weights in the
 * file --save wrote (another reader), bit for bit */
static void test_trainer_load_checkpoint_weights(void **st) {
    (void)st;
    char args[1024], p1[128], p2[128];
    double a[2], b[2], c[2];
#define LW TINY " --parallel ddp --steps 2"
    snprintf(args, sizeof args, LW " --save-every 2 --ckpt-dir '%s/lw' --save '%s/lw.st'", tmpdir, tmpdir);
    train(args, a, 2);
    snprintf(args, sizeof args, LW " --optimizer sgd --load '%s/lw/step-00000002' --save '%s/lw_a.st'", tmpdir, tmpdir);
    train(args, b, 2);
    snprintf(args, sizeof args, LW " --optimizer sgd --load '%s/lw.st' --save '%s/lw_b.st'", tmpdir, tmpdir);
#undef LW
    train(args, c, 2);
    assert_memory_equal(b, c, sizeof b);
    assert_true(b[0] < a[0]); /* trained weights, not the initial ones */
    snprintf(p1, sizeof p1, "%s/lw_a.st", tmpdir);
    snprintf(p2, sizeof p2, "%s/lw_b.st", tmpdir);
    assert_true(same_file(p1, p2));
}

static void test_trainer_ckpt_options(void **st) {
    (void)st;
    char *err = NULL, args[512];
    const struct { const char *args, *needle; } bad[] = {
        { TINY " --parallel ddp --save-every 2", "--ckpt-dir" },
        { TINY " --parallel ddp --ckpt-dir /tmp/x", "--save-every" },
        { TINY " --parallel ddp --ckpt-format full", "--ckpt-format" },
        { TINY " --parallel ddp --ckpt-format half --save-every 1 --ckpt-dir /tmp/x", "sharded|full" },
        { TINY " --parallel ddp --resume /tmp/x --load /tmp/y", "give one" },
        { TINY " --parallel fsdp --check-ddp --save-every 1 --ckpt-dir /tmp/x", "--check-ddp" },
        { TINY " --parallel ddp --ckpt-overwrite", "--ckpt-overwrite applies" },
        { TINY " --parallel ddp --save-every 1 --ckpt-dir /tmp/x --resume /tmp/x --ckpt-overwrite", "give one" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(run("train_gpt", bad[i].args, NULL, &err), 2);
        if (!strstr(err, bad[i].needle)) fail_msg("%s: message \"%s\" lacks %s", bad[i].args, err, bad[i].needle);
        free(err);
    }
    /* nothing to resume: a first run starts fresh and says so (tests/test_trainer_resume.c has more) */
    snprintf(args, sizeof args, TINY " --parallel ddp --steps 2 --resume '%s/empty'", tmpdir);
    char *said = NULL;
    assert_int_equal(run("train_gpt", args, &said, NULL), 0);
    assert_non_null(strstr(said, "to resume from: starting a new run at step 0"));
    free(said);
    char *out = NULL;
    assert_int_equal(run("train_gpt", "--help", &out, NULL), 0);
    const char *names[] = { "--save-every", "--ckpt-dir", "--ckpt-format", "--resume", "--ckpt-overwrite" };
    for (int i = 0; i < 5; i++) assert_non_null(strstr(out, names[i]));
    free(out);
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *s = calloc(1, 1 << 20);
    size_t n = fread(s, 1, (1 << 20) - 1, f);
    s[n] = 0;
    fclose(f);
    return s;
}

/* The report's reproduction: a link named like a leftover to a folder elsewhere. */
static void test_trainer_resume_past_link(void **st) {
    (void)st;
    char args[1024], p[600], q[600], *err = NULL;
    snprintf(args, sizeof args, TINY " --parallel fsdp --steps 3 --save-every 1 --ckpt-dir '%s/lk'", tmpdir);
    double l[5];
    train(args, l, 3);
    snprintf(p, sizeof p, "%s/victim", tmpdir);
    assert_int_equal(mkdir(p, 0777), 0);
    snprintf(q, sizeof q, "%s/victim/a", tmpdir);
    FILE *f = fopen(q, "w");
    assert_non_null(f);
    fputs("x\n", f);
    fclose(f);
    snprintf(q, sizeof q, "%s/lk/step-00000009.tmp-evil", tmpdir);
    assert_int_equal(symlink(p, q), 0);
    snprintf(args, sizeof args, TINY " --parallel fsdp --steps 5 --resume '%s/lk'", tmpdir);
    assert_int_equal(run("train_gpt", args, NULL, &err), 0);
    if (!strstr(err, "warning") || !strstr(err, "step-00000009.tmp-evil") || !strstr(err, "symbolic link"))
        fail_msg("no warning about the link: %s", err);
    free(err);
    snprintf(q, sizeof q, "%s/victim/a", tmpdir);
    char *x = slurp(q);
    assert_non_null(x);
    assert_string_equal(x, "x\n");
    free(x);
}

/* Another run into a directory of checkpoints: refused, or with --ckpt-overwrite it starts over there. */
static void test_trainer_one_run_per_dir(void **st) {
    (void)st;
    char args[1024], p[600], *err = NULL, *out = NULL;
    double a[4], b[4], c[4];
    snprintf(args, sizeof args, TINY " --parallel ddp --steps 4 --save-every 2 --ckpt-dir '%s/runs'", tmpdir);
    train(args, a, 4);
    snprintf(p, sizeof p, "%s/runs/step-00000004/metadata.json", tmpdir);
    char *before = slurp(p);
    assert_non_null(before);
    const char *other = TINY " --parallel ddp --seed 2 --lr 0.01";
    snprintf(args, sizeof args, "%s --steps 2 --save-every 2 --ckpt-dir '%s/runs'", other, tmpdir);
    assert_int_equal(run("train_gpt", args, NULL, &err), 2);
    if (!strstr(err, "another run") || !strstr(err, "--ckpt-overwrite")) fail_msg("message: %s", err);
    free(err);
    char *after = slurp(p);
    assert_non_null(after);
    assert_string_equal(before, after); /* the longer run's checkpoints are as they were */
    free(after);
    /* starting over: the first run's checkpoints go, --resume continues the new run */
    snprintf(args, sizeof args, "%s --steps 2 --save-every 2 --ckpt-dir '%s/runs' --ckpt-overwrite", other, tmpdir);
    train(args, b, 2);
    assert_null(slurp(p));
    snprintf(args, sizeof args, "%s --steps 4", other);
    train(args, b, 4);
    snprintf(args, sizeof args, "%s --steps 4 --resume '%s/runs'", other, tmpdir);
    assert_int_equal(run("train_gpt", args, &out, &err), 0);
    assert_non_null(strstr(out, "at step 2"));
    losses(out, c, 4);
    assert_memory_equal(&b[2], &c[2], 2 * sizeof(double));
    free(out);
    free(err);
    free(before);
}

/* --resume A --ckpt-dir B, B holding another run's checkpoints: refused up front (exit 2, naming that run and
 * --ckpt-overwrite) before any step, B/train_config.json byte for byte as that run wrote it; --resume A --ckpt-dir A
 * (the same run) goes on. Before, the run trained, failed at its first save (exit 1) and had replaced B's
 * train_config.json with its own options. Oracle: the exit status, the output (no step line) and B's record. */
static void test_trainer_resume_into_other_dir(void **st) {
    (void)st;
    char *a = prog_fmt("%s/mine", tmpdir), *b = prog_fmt("%s/theirs", tmpdir), *conf = prog_fmt("%s/train_config.json", b);
    double l[4];
    char *args = prog_fmt(TINY " --parallel ddp --steps 2 --save-every 2 --ckpt-dir '%s'", a);
    train(args, l, 2);
    free(args);
    args = prog_fmt(TINY " --parallel ddp --seed 2 --lr 0.01 --steps 2 --save-every 2 --ckpt-dir '%s'", b);
    train(args, l, 2);
    free(args);
    char *before = slurp(conf), *out = NULL, *err = NULL;
    assert_non_null(before);
    args = prog_fmt(TINY " --parallel ddp --steps 4 --save-every 2 --resume '%s' --ckpt-dir '%s'", a, b);
    int rc = run("train_gpt", args, &out, &err);
    if (rc != 2) fail_msg("--resume %s --ckpt-dir %s: exit %d (expected 2)\n%s%s", a, b, rc, out, err);
    if (!strstr(err, "another run") || !strstr(err, "--ckpt-overwrite")) fail_msg("message: %s", err);
    if (strstr(out, "step    1/4") || strstr(out, "step    3/4")) fail_msg("it trained before refusing:\n%s", out);
    char *after = slurp(conf);
    assert_non_null(after);
    if (strcmp(before, after)) fail_msg("%s rewritten:\n%s\nwas:\n%s", conf, after, before);
    free(out), free(err), free(args), free(after);
    /* the same run's directory: resumed at step 2, saved at step 4 */
    args = prog_fmt(TINY " --parallel ddp --steps 4 --save-every 2 --resume '%s' --ckpt-dir '%s'", a, a);
    rc = run("train_gpt", args, &out, &err);
    if (rc != 0) fail_msg("--resume %s --ckpt-dir %s: exit %d\n%s%s", a, a, rc, out, err);
    assert_non_null(strstr(out, "at step 2"));
    char *four = prog_fmt("%s/step-00000004/metadata.json", a);
    assert_int_equal(access(four, F_OK), 0);
    free(four), free(out), free(err), free(args), free(before), free(conf), free(b), free(a);
}

/* Two runs into one --ckpt-dir at once (the issue's: the second's --keep-last removed the first's checkpoints):
 * while a trainer runs there, a second is refused on every rank (exit 1) naming the first's pid, before it writes
 * anything (the first's checkpoints and train_config.json as they were); once the first is killed the directory is
 * free again (the kernel released its lock). */
static void test_trainer_one_writer(void **st) {
    (void)st;
    char prog[PATH_MAX + 16], *err = NULL, pid[64];
    snprintf(prog, sizeof prog, "%s/train_gpt", bindir);
    char *dir = prog_fmt("%s/busy", tmpdir), *cfg = prog_fmt("%s/train_config.json", dir);
    char *first = prog_fmt(TINY " --parallel ddp --steps 100000 --save-every 2 --ckpt-dir '%s' --resume '%s'", dir, dir);
    char *second = prog_fmt(TINY " --parallel ddp --steps 40 --save-every 1 --ckpt-dir '%s' --resume '%s' --lr 1e-4 "
                            "--keep-last 3", dir, dir);
    int fd;
    pid_t a = prog_start_held(prog, first, tmpdir, 4, &fd); /* its config and steps 1-3: step-00000002 written */
    char *before = slurp(cfg);
    assert_non_null(before);
    assert_int_equal(run("train_gpt", second, NULL, &err), 1);
    snprintf(pid, sizeof pid, "held by pid %ld on host", (long)a);
    if (!strstr(err, "--ckpt-dir") || !strstr(err, "is in use by another run") || !strstr(err, pid))
        fail_msg("the second run's message lacks \"%s\": %s", pid, err);
    /* the rank that failed named once, first, whichever rank reports it (not "rank 2: --ckpt-dir: rank 0: ...") */
    const char *named = strstr(err, "rank 0: --ckpt-dir: ");
    if (!named || strstr(named + 8, "rank ")) fail_msg("the second run's message names more than one rank: %s", err);
    free(err);
    char *meta = prog_fmt("%s/step-00000002/metadata.json", dir), *after = slurp(cfg), *m = slurp(meta);
    assert_non_null(m);
    assert_string_equal(before, after);
    prog_held_end(a, fd);
    char *again = prog_fmt(TINY " --parallel ddp --steps 1 --save-every 1 --ckpt-dir '%s' --resume '%s'", dir, dir);
    assert_int_equal(run("train_gpt", again, NULL, &err), 0);
    free(err), free(again), free(meta), free(m), free(after), free(before), free(second), free(first), free(cfg);
    free(dir);
}

static void test_ckpt_tool(void **st) {
    (void)st;
    char args[1024], *out = NULL, *err = NULL;
    snprintf(args, sizeof args, TINY " --parallel zero1 --steps 2 --save-every 1 --ckpt-dir '%s/tool' "
             "--ckpt-format full", tmpdir);
    double l[2];
    train(args, l, 2);
    snprintf(args, sizeof args, "list '%s/tool'", tmpdir);
    assert_int_equal(run("ckpt_tool", args, &out, NULL), 0);
    const char *line = strstr(out, "step-00000002");
    assert_non_null(line);
    const char *nl = strchr(line, '\n'), *mark = strstr(line, "(newest)");
    assert_true(mark && (!nl || mark < nl));
    free(out);
    /* a save's temporary directory may be a live run's save in progress: not called only a leftover (a user told
     * so could remove it under the save) */
    char tmp[256];
    snprintf(tmp, sizeof tmp, "%s/tool/step-00000003.tmp-aB3dE9", tmpdir);
    assert_int_equal(mkdir(tmp, 0755), 0);
    snprintf(args, sizeof args, "list '%s/tool'", tmpdir);
    assert_int_equal(run("ckpt_tool", args, &out, NULL), 0);
    line = strstr(out, "step-00000003.tmp-aB3dE9");
    if (!line || !strstr(line, "a save in progress")) fail_msg("list: %s", out);
    free(out);
    assert_int_equal(rmdir(tmp), 0);
    snprintf(args, sizeof args, "show '%s/tool'", tmpdir);
    assert_int_equal(run("ckpt_tool", args, &out, NULL), 0);
    assert_non_null(strstr(out, "full format, step 2"));
    assert_non_null(strstr(out, ", ep 1, accum")); /* the writer's expert parallelism */
    assert_null(strstr(out, "skipped in a row")); /* no step skipped */
    assert_non_null(strstr(out, "optim.v.h.0.mlp.c_fc.weight"));
    assert_non_null(strstr(out, "crc32"));
    free(out);
    snprintf(args, sizeof args, "verify '%s/tool/step-00000001'", tmpdir);
    assert_int_equal(run("ckpt_tool", args, &out, NULL), 0);
    assert_non_null(strstr(out, "ok"));
    free(out);
    /* damage the optimizer file's last byte: verify names it */
    char p[256];
    snprintf(p, sizeof p, "%s/tool/step-00000001/optim.safetensors", tmpdir);
    FILE *f = fopen(p, "r+b");
    assert_non_null(f);
    fseek(f, -1, SEEK_END);
    int ch = fgetc(f);
    fseek(f, -1, SEEK_END);
    fputc(ch ^ 1, f);
    fclose(f);
    snprintf(args, sizeof args, "verify '%s/tool/step-00000001'", tmpdir);
    assert_int_equal(run("ckpt_tool", args, NULL, &err), 1);
    assert_non_null(strstr(err, "optim.safetensors"));
    assert_non_null(strstr(err, "checksum"));
    free(err);
    /* the step edited by hand in metadata.json: refused (its checksum), and so is resuming from it */
    snprintf(p, sizeof p, "%s/tool/step-00000002/metadata.json", tmpdir);
    char *meta = slurp(p), *at = strstr(meta, "\"step\":2,");
    assert_non_null(at);
    at[7] = '1';
    f = fopen(p, "wb");
    assert_non_null(f);
    fputs(meta, f);
    fclose(f);
    free(meta);
    snprintf(args, sizeof args, "verify '%s/tool'", tmpdir);
    assert_int_equal(run("ckpt_tool", args, NULL, &err), 1);
    assert_non_null(strstr(err, "metadata_crc32"));
    free(err);
    snprintf(args, sizeof args, TINY " --parallel zero1 --steps 3 --resume '%s/tool'", tmpdir);
    assert_int_equal(run("train_gpt", args, NULL, &err), 1);
    assert_non_null(strstr(err, "metadata_crc32"));
    free(err);
    assert_int_equal(run("ckpt_tool", "frobnicate x", NULL, NULL), 2);
    /* a path that is not there is named so (it was said to hold no complete checkpoint) */
    snprintf(args, sizeof args, "verify '%s/tool/absent'", tmpdir);
    assert_int_equal(run("ckpt_tool", args, NULL, &err), 1);
    if (!strstr(err, "absent: No such file or directory")) fail_msg("verify of a missing path: %s", err);
    free(err);
    /* a metadata.json that is a looping link: damaged, named with why (it said the folder held no checkpoint) */
    snprintf(p, sizeof p, "%s/tool/step-00000002/metadata.json", tmpdir);
    assert_int_equal(unlink(p), 0);
    assert_int_equal(symlink("metadata.json", p), 0);
    snprintf(args, sizeof args, "verify '%s/tool/step-00000002'", tmpdir);
    assert_int_equal(run("ckpt_tool", args, NULL, &err), 1);
    if (!strstr(err, "damaged") || !strstr(err, "symbolic links")) fail_msg("verify: %s", err);
    free(err);
}

/* ckpt_tool show prints the recorded model configuration whole (it cut it at 400 bytes without a mark). Oracle: a
 * configuration of 700 bytes (a field added to the model's record, the checksum resealed) is printed on the model
 * line, its last bytes included. */
static void test_ckpt_tool_show_whole_config(void **st) {
    (void)st;
    char *dir = prog_fmt("%s/long", tmpdir), *out = NULL;
    char *args = prog_fmt(TINY " --parallel ddp --steps 1 --save-every 1 --ckpt-dir '%s'", dir);
    double l[1];
    train(args, l, 1);
    char *meta = prog_fmt("%s/step-00000001/metadata.json", dir), *text = prog_slurp(meta);
    const char *at = strstr(text, "\"model\":{");
    assert_non_null(at);
    char note[640];
    memset(note, 'x', sizeof note - 1);
    note[sizeof note - 1] = 0;
    const size_t open = (size_t)(at - text) + strlen("\"model\":{");
    char *edited = prog_fmt("%.*s\"note\":\"%s-end\",%s", (int)open, text, note, text + open);
    test_reseal_metadata(edited);
    FILE *f = fopen(meta, "wb");
    assert_non_null(f);
    fputs(edited, f);
    assert_int_equal(fclose(f), 0);
    free(args);
    args = prog_fmt("show '%s'", dir);
    assert_int_equal(run("ckpt_tool", args, &out, NULL), 0);
    char *want = prog_fmt("model: {\"note\":\"%s-end\",\"layers\":1,", note);
    const char *line = strstr(out, "model: ");
    if (!line || strncmp(line, want, strlen(want)) != 0 || !strstr(line, "\"vocab\":256}\n"))
        fail_msg("the model line is not the whole configuration:\n%.1200s", line ? line : out);
    free(want), free(out), free(args), free(edited), free(text), free(meta), free(dir);
}

/* ckpt_tool keeps the cause with a path too long for the system (it cut paths into 4 KiB buffers, and library
 * messages into 1 KiB: "ckpt_tool: /tmp/.../dddd" and no cause, or "holds no complete checkpoint" for a folder whose
 * metadata.json path was too long). Oracle: show, verify, list and flight of a path of 4.4 KiB end with the whole
 * path and "File name too long"; show and verify of an existing folder of 4085 bytes name its metadata.json's path
 * as too long. */
static void test_ckpt_tool_long_path(void **st) {
    (void)st;
    char *err = NULL, *deep = prog_fmt("%s", tmpdir);
    for (int k = 0; k < 22; k++) {
        char *next = prog_fmt("%s/%0200d", deep, k);
        free(deep);
        deep = next;
    }
    static const char *const cmds[] = {"show", "verify", "list", "flight"};
    for (int c = 0; c < 4; c++) {
        char *args = prog_fmt("%s '%s'", cmds[c], deep), *want = prog_fmt("%s: File name too long\n", deep);
        assert_int_equal(run("ckpt_tool", args, NULL, &err), 1);
        const size_t n = strlen(err), w = strlen(want);
        if (n < w || strcmp(err + n - w, want) != 0) fail_msg("%s of a path of %zu bytes: %.200s ... %s", cmds[c],
                                                             strlen(deep), err, n > 200 ? err + n - 200 : err);
        free(args), free(want), free(err);
    }
    /* a folder that exists, its metadata.json's path too long (4085 + 14 bytes, the limit 4095) */
    deep[4085] = 0;
    char *cmd = prog_fmt("mkdir -p '%s'", deep);
    assert_int_equal(system(cmd), 0);
    for (int c = 0; c < 2; c++) {
        char *args = prog_fmt("%s '%s'", cmds[c], deep);
        char *want = prog_fmt("%s/metadata.json: File name too long\n", deep);
        assert_int_equal(run("ckpt_tool", args, NULL, &err), 1);
        const size_t n = strlen(err), w = strlen(want);
        if (n < w || strcmp(err + n - w, want) != 0) fail_msg("%s of a folder of %zu bytes: %.200s ... %s", cmds[c],
                                                             strlen(deep), err, n > 200 ? err + n - 200 : err);
        free(args), free(want), free(err);
    }
    free(cmd), free(deep);
}

/* A copy of dir's checkpoint `from` as step `to`: its step and metadata_crc32 rewritten, the copy sound. */
static void copy_step(const char *dir, int from, long long to) {
    char *src = prog_fmt("%s/step-%08d", dir, from), *dst = prog_fmt("%s/step-%08lld", dir, to);
    char *cmd = prog_fmt("cp -r '%s' '%s'", src, dst), *meta = prog_fmt("%s/metadata.json", dst);
    assert_int_equal(system(cmd), 0);
    char *text = prog_slurp(meta), *key = prog_fmt("\"step\":%d,", from), *at = strstr(text, key);
    assert_non_null(at);
    char *edited = prog_fmt("%.*s\"step\":%lld,%s", (int)(at - text), text, to, at + strlen(key));
    memcpy(edited + 19, "00000000", 8); /* {"metadata_crc32":"XXXXXXXX": zlib's crc32 with those digits 0 */
    char crc[9];
    snprintf(crc, sizeof crc, "%08lx", (unsigned long)crc32(0, (const unsigned char *)edited, (unsigned)strlen(edited)));
    memcpy(edited + 19, crc, 8);
    FILE *f = fopen(meta, "wb");
    assert_non_null(f);
    fputs(edited, f);
    fclose(f);
    free(src), free(dst), free(cmd), free(meta), free(text), free(key), free(edited);
}

/* ckpt_tool list prints the step directories in step order, whatever order the directory holds them in (it
 * printed readdir's order). Oracle: five checkpoints (steps 2, 4, 6, 8, 10); the lines naming them appear at
 * ascending offsets of the output, the newest marked; copies as steps 99999999 and 100000000 (nine digits: sorted
 * by name, it came first) are listed last, in that order. */
static void test_ckpt_tool_list_order(void **st) {
    (void)st;
    char *dir = prog_fmt("%s/order", tmpdir), *out = NULL;
    char *args = prog_fmt(TINY " --parallel ddp --steps 10 --save-every 2 --ckpt-dir '%s'", dir);
    double l[10];
    train(args, l, 10);
    free(args);
    args = prog_fmt("list '%s'", dir);
    assert_int_equal(run("ckpt_tool", args, &out, NULL), 0);
    const char *prev = NULL;
    for (int s = 2; s <= 10; s += 2) {
        char name[32];
        snprintf(name, sizeof name, "step-%08d", s);
        const char *at = strstr(out, name);
        if (!at) fail_msg("list lacks %s:\n%s", name, out);
        if (prev && at < prev) fail_msg("list prints %s before step-%08d: not in step order:\n%s", name, s - 2, out);
        prev = at;
    }
    const char *nl = strchr(prev, '\n'), *mark = strstr(prev, "(newest)");
    assert_true(mark && (!nl || mark < nl));
    free(out), free(args);
    /* past step 99999999 the names grow a digit: step-100000000 is listed after step-99999999 and marked the newest
     * (alphasort put it before step-99999999) */
    copy_step(dir, 10, 99999999);
    copy_step(dir, 10, 100000000);
    args = prog_fmt("list '%s'", dir);
    assert_int_equal(run("ckpt_tool", args, &out, NULL), 0);
    const char *before = strstr(out, "step-99999999"), *last = strstr(out, "step-100000000");
    if (!before || !last || last < before || !strstr(last, "(newest)") || strstr(before, "(newest)") < last)
        fail_msg("step-100000000 not last and newest:\n%s", out);
    free(out), free(args), free(dir);
}

/* Installed as fsc-ckpt (make install copies it under that name) the program names itself so: the usage
 * line and the messages say the name it was run as, not ckpt_tool. Oracle: the text of stderr. */
static void test_ckpt_tool_name(void **st) {
    (void)st;
    char link[PATH_MAX + 64], target[PATH_MAX + 32], *err = NULL, *out = NULL, args[PATH_MAX + 96];
    snprintf(link, sizeof link, "%s/fsc-ckpt", tmpdir);
    snprintf(target, sizeof target, "%s/ckpt_tool", bindir);
    unlink(link);
    assert_int_equal(symlink(target, link), 0);
    char *cmd = NULL;
    assert_true(asprintf(&cmd, "'%s' > '%s/out' 2> '%s/err'", link, tmpdir, tmpdir) > 0);
    int stat = system(cmd);
    free(cmd);
    assert_true(WIFEXITED(stat) && WEXITSTATUS(stat) == 2);
    snprintf(args, sizeof args, "%s/err", tmpdir);
    err = prog_slurp(args);
    if (strncmp(err, "usage: fsc-ckpt list DIR", 24) != 0) fail_msg("usage as fsc-ckpt: %s", err);
    free(err);
    assert_true(asprintf(&cmd, "'%s' verify '%s/none' > '%s/out' 2> '%s/err'", link, tmpdir, tmpdir, tmpdir) > 0);
    stat = system(cmd);
    free(cmd);
    assert_true(WIFEXITED(stat) && WEXITSTATUS(stat) == 1);
    err = prog_slurp(args);
    if (strncmp(err, "fsc-ckpt: ", 10) != 0 || strstr(err, "ckpt_tool")) fail_msg("error as fsc-ckpt: %s", err);
    free(err);
    /* and under its build name it stays ckpt_tool */
    assert_int_equal(run("ckpt_tool", "", &out, &err), 2);
    assert_non_null(strstr(err, "usage: ckpt_tool list DIR"));
    free(out), free(err);
    /* --version: the name it was run as and the library's version */
    char *want = NULL;
    assert_true(asprintf(&want, "ckpt_tool %s\n", fsc_version_string()) > 0);
    assert_int_equal(run("ckpt_tool", "--version", &out, &err), 0);
    assert_string_equal(out, want);
    free(out), free(err), free(want);
}

int main(int argc, char **argv) {
    (void)argc;
    char self[PATH_MAX];
    if (!realpath(argv[0], self)) return 1;
    snprintf(bindir, sizeof bindir, "%s/..", dirname(self));
    char t[PATH_MAX + 16];
    snprintf(t, sizeof t, "%s/ckpt_tool", bindir);
    if (access(t, X_OK) != 0) {
        fprintf(stderr, "test_ckpt_trainer: %s not found: build the examples first\n", t);
        return 1;
    }
    strcpy(tmpdir, "/tmp/fsc_test_ckpt_trainer_XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_trainer_resume),
        cmocka_unit_test(test_trainer_ckpt_options),
        cmocka_unit_test(test_trainer_load_checkpoint_weights),
        cmocka_unit_test(test_trainer_resume_past_link),
        cmocka_unit_test(test_trainer_one_run_per_dir),
        cmocka_unit_test(test_trainer_one_writer),
        cmocka_unit_test(test_ckpt_tool),
        cmocka_unit_test(test_ckpt_tool_name),
        cmocka_unit_test(test_trainer_resume_into_other_dir),
        cmocka_unit_test(test_ckpt_tool_list_order),
        cmocka_unit_test(test_ckpt_tool_show_whole_config),
        cmocka_unit_test(test_ckpt_tool_long_path),
    };
    if (getenv("FSC_TEST_FILTER")) cmocka_set_test_filter(getenv("FSC_TEST_FILTER")); /* one test: its name */
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "test_ckpt_trainer: could not remove %s\n", tmpdir);
    return rc;
}
