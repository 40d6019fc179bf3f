/* The trainer's pipeline options (examples/train_gpt.c, run as build/<x>/train_gpt next to this binary's
 * tests/ folder). Oracle: the trainer's own --check-ddp (DDP over the data-parallel ranks with the same
 * micro-batches) reports bit-identical losses and weights for --parallel pipe and for FSDP inside a
 * pipeline; the --json summary describes every stage (layers, peak activation bytes, measured bubble
 * beside the ideal (P-1)/(M+P-1)); bad layouts and balances are errors that name the option. */
#include <cjson/cJSON.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "trainertest.h"

static char trainer[PATH_MAX];
static char tmpdir[64];

#define TINY "--layers 3 --dim 16 --heads 2 --seq 8 --batch 8 --steps 2 --vocab 128"

/* Run the trainer with args; exit code, stdout in *out and stderr in *err (the caller frees). */
static int run(const char *args, char **out, char **err) {
    char *full = NULL;
    if (asprintf(&full, TINY " --data '%s/data.txt' %s", tmpdir, args) < 0) fail_msg("out of memory");
    int rc = prog_run(trainer, full, tmpdir, out, err);
    free(full);
    return rc;
}

static double num(cJSON *o, const char *k) {
    cJSON *x = cJSON_GetObjectItem(o, k);
    if (!cJSON_IsNumber(x)) fail_msg("JSON lacks the number %s", k);
    return x->valuedouble;
}

static void check_run(const char *args, int pp, int M) {
    char *out, *err;
    int rc = run(args, &out, &err);
    if (rc != 0) fail_msg("train_gpt %s: exit %d: %s", args, rc, err);
    cJSON *j = prog_last_json(out);
    cJSON *chk = cJSON_GetObjectItem(j, "check_ddp");
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(chk, "bit_identical")));
    cJSON *p = cJSON_GetObjectItem(j, "pipeline");
    assert_non_null(p);
    assert_int_equal((int)num(p, "pp"), pp);
    assert_int_equal((int)num(p, "micro_batches"), M);
    assert_true(fabs(num(p, "ideal_bubble") - (double)(pp - 1) / (M + pp - 1)) < 1e-12);
    cJSON *stages = cJSON_GetObjectItem(p, "stages");
    assert_int_equal(cJSON_GetArraySize(stages), pp);
    int next = 0;
    for (int s = 0; s < pp; s++) {
        cJSON *x = cJSON_GetArrayItem(stages, s);
        assert_int_equal((int)num(x, "first_layer"), next); /* the stages tile the layers 0 .. L+1 */
        next = (int)num(x, "last_layer") + 1;
        assert_true(num(x, "peak_acts_bytes") > 0);
        assert_true(num(x, "bubble") >= 0 && num(x, "bubble") <= 1);
    }
    assert_int_equal(next, 5);
    assert_non_null(strstr(out, "stage 1: layers"));
    cJSON_Delete(j);
    free(out);
    free(err);
}

static void test_trainer_pipeline_equals_ddp(void **st) {
    (void)st;
    check_run("--parallel pipe --pp 2 --chunks 2 --check-ddp --json", 2, 2);
    check_run("--parallel pipe --pp 3 --balance 1,1,1 --schedule 1f1b --checkpoint never --chunks 4 --check-ddp "
              "--json", 3, 4);
    check_run("--parallel fsdp --pp 2 --dp 2 --schedule 1f1b --chunks 2 --check-ddp --json", 2, 2);
}

/* --schedule interleaved --virtual-stages 2: bit-identical to DDP (--check-ddp), the ideal bubble
 * (P-1)/(v M+P-1) in the summary. */
/* --check-ddp of a pipeline whose data-parallel group is one rank (dp x tp = 1): its DDP oracle runs on one rank,
 * which fsc_cluster_run gives the library's BLAS threads, where the pipeline's ranks have one each; with products
 * OpenBLAS splits over threads (width 64) the oracle's bits differed and the run said "no" (exit 3). The oracle now
 * takes the pipeline's one thread a rank (no --threads given). */
static void test_trainer_pipeline_oracle_threads(void **st) {
    (void)st;
    char *full = NULL, *out = NULL, *err = NULL;
    if (asprintf(&full, "--layers 2 --dim 64 --heads 4 --seq 16 --batch 8 --steps 3 --vocab 128 --data '%s/data.txt' "
                 "--parallel pipe --pp 2 --world 2 --chunks 2 --check-ddp", tmpdir) < 0)
        fail_msg("out of memory");
    const int rc = prog_run(trainer, full, tmpdir, &out, &err);
    if (rc != 0 || !strstr(out, "bit-identical: yes")) fail_msg("train_gpt %s: exit %d: %s%s", full, rc, out, err);
    free(full), free(out), free(err);
}

static void test_trainer_interleaved_equals_ddp(void **st) {
    (void)st;
    const char *args = "--layers 4 --parallel pipe --pp 2 --chunks 4 --schedule interleaved --virtual-stages 2 "
                       "--balance 1,1,1,1 --check-ddp --json";
    char *out, *err;
    int rc = run(args, &out, &err);
    if (rc != 0) fail_msg("train_gpt %s: exit %d: %s", args, rc, err);
    cJSON *j = prog_last_json(out);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "check_ddp"), "bit_identical")));
    cJSON *p = cJSON_GetObjectItem(j, "pipeline");
    assert_non_null(p);
    assert_true(fabs(num(p, "ideal_bubble") - 1.0 / (2 * 4 + 1)) < 1e-12);
    assert_non_null(strstr(out, "4 micro-batches, interleaved"));
    /* rank 0 holds 2 (P-1) + (v-1) P + 1 = 5 chunk records of 4 micro-batches: not "5 micro-batches in flight" */
    assert_non_null(strstr(out, "(5 chunk records in flight)"));
    assert_null(strstr(out, "micro-batches in flight"));
    cJSON_Delete(j);
    free(out);
    free(err);
}

/* --schedule zb-h1 (the split backward): bit-identical to DDP (--check-ddp), the ideal bubble (P-1)/(3M+P-1)
 * in the summary; and with FSDP inside 2 x 2 stages. */
static void test_trainer_zb_h1_equals_ddp(void **st) {
    (void)st;
    const char *args = "--layers 4 --parallel pipe --pp 2 --chunks 4 --schedule zb-h1 --check-ddp --json";
    char *out, *err;
    int rc = run(args, &out, &err);
    if (rc != 0) fail_msg("train_gpt %s: exit %d: %s", args, rc, err);
    cJSON *j = prog_last_json(out);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "check_ddp"), "bit_identical")));
    cJSON *p = cJSON_GetObjectItem(j, "pipeline");
    assert_non_null(p);
    assert_true(fabs(num(p, "ideal_bubble") - 1.0 / (3 * 4 + 1)) < 1e-12);
    assert_non_null(strstr(out, "4 micro-batches, zb-h1"));
    cJSON_Delete(j);
    free(out);
    free(err);
    args = "--parallel fsdp --pp 2 --dp 2 --chunks 4 --schedule zb-h1 --check-ddp --json";
    rc = run(args, &out, &err);
    if (rc != 0) fail_msg("train_gpt %s: exit %d: %s", args, rc, err);
    j = prog_last_json(out);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "check_ddp"), "bit_identical")));
    cJSON_Delete(j);
    free(out);
    free(err);
}

/* The losses of a run (--json's "losses", n of them); its output must hold said (unless NULL). */
static void losses_of(const char *args, double *l, int n, const char *said) {
    char *out, *err;
    int rc = run(args, &out, &err);
    if (rc != 0) fail_msg("train_gpt %s: exit %d: %s", args, rc, err);
    cJSON *j = prog_last_json(out);
    prog_doubles(j, "losses", l, n, -1.0);
    cJSON_Delete(j);
    if (said && !strstr(out, said) && !strstr(err, said)) fail_msg("train_gpt %s: \"%s\" not in\n%s%s", args, said, out, err);
    free(out);
    free(err);
}

/* --schedule zbv (two chunks per rank in a V): bit-identical to DDP (--check-ddp), the ideal bubble 0 in the
 * summary, also with ZeRO-2 inside 2 x 2 stages; a checkpoint saved under zbv resumes under 1f1b, and one saved under 1f1b under zbv, their later losses
 * those of an uninterrupted run, bit for bit; --virtual-stages other than 2 with zbv is refused. */
static void test_trainer_zbv(void **st) {
    (void)st;
    const char *args = "--layers 4 --parallel pipe --pp 2 --chunks 4 --schedule zbv --check-ddp --json";
    char *out, *err;
    int rc = run(args, &out, &err);
    if (rc != 0) fail_msg("train_gpt %s: exit %d: %s", args, rc, err);
    cJSON *j = prog_last_json(out);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "check_ddp"), "bit_identical")));
    cJSON *p = cJSON_GetObjectItem(j, "pipeline");
    assert_non_null(p);
    assert_true(fabs(num(p, "ideal_bubble") - 1.0 / (6 * 4 + 1)) < 1e-12); /* the fill: (P-1) / (6M + P-1) */
    assert_non_null(strstr(out, "4 micro-batches, zbv"));
    /* the V: rank 0 holds stages 0 and 3 (the embedding and block 1, block 4 and the head), rank 1 stages 1 and 2 */
    assert_non_null(strstr(out, "stage 0: layers 0-1, 4-5 |"));
    assert_non_null(strstr(out, "stage 1: layers 2, 3 |"));
    cJSON *ch = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(p, "stages"), 0), "chunks");
    assert_int_equal(cJSON_GetArraySize(ch), 2);
    static const int want[2][3] = { { 0, 0, 1 }, { 3, 4, 5 } };
    for (int c = 0; c < 2; c++)
        for (int i = 0; i < 3; i++)
            assert_int_equal(cJSON_GetArrayItem(cJSON_GetArrayItem(ch, c), i)->valueint, want[c][i]);
    cJSON_Delete(j);
    free(out);
    free(err);
    args = "--layers 4 --parallel zero2 --pp 2 --dp 2 --chunks 4 --schedule zbv --check-ddp --json";
    rc = run(args, &out, &err);
    if (rc != 0) fail_msg("train_gpt %s: exit %d: %s", args, rc, err);
    j = prog_last_json(out);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "check_ddp"), "bit_identical")));
    cJSON_Delete(j);
    free(out);
    free(err);
    static const char *const scheds[2][2] = { { "zbv", "1f1b" }, { "1f1b", "zbv" } };
    double ref[4], l[4];
    losses_of("--layers 4 --parallel pipe --pp 2 --chunks 4 --schedule zbv --steps 4 --json", ref, 4, NULL);
    for (int k = 0; k < 2; k++) {
        char *a = NULL, *b = NULL;
        if (asprintf(&a, "--layers 4 --parallel pipe --pp 2 --chunks 4 --schedule %s --steps 2 --save-every 2 "
                     "--ckpt-dir '%s/zbv%d' --json", scheds[k][0], tmpdir, k) < 0 ||
            asprintf(&b, "--layers 4 --parallel pipe --pp 2 --chunks 4 --schedule %s --steps 4 --save-every 2 --ckpt-dir '%s/zbv%d' "
                     "--resume '%s/zbv%d' --json", scheds[k][1], tmpdir, k, tmpdir, k) < 0)
            fail_msg("out of memory");
        losses_of(a, l, 2, NULL);
        losses_of(b, l, 4, "step-00000002 at step 2"); /* "resumed from D/step-00000002 at step 2" */
        for (int i = 2; i < 4; i++)
            if (memcmp(&l[i], &ref[i], sizeof l[i]))
                fail_msg("saved under %s, resumed under %s: loss %d is %.17g, uninterrupted %.17g", scheds[k][0],
                         scheds[k][1], i, l[i], ref[i]);
        free(a);
        free(b);
    }
    rc = run("--layers 4 --parallel pipe --pp 2 --schedule zbv --virtual-stages 3", &out, &err);
    assert_int_not_equal(rc, 0);
    if (!strstr(err, "--schedule zbv runs two chunks per pipeline rank")) fail_msg("zbv with 3 chunks: %s", err);
    free(out);
    free(err);
}

/* The lines of file that hold needle (0 if the file cannot be read). */
static int count_lines(const char *file, const char *needle) {
    FILE *f = fopen(file, "r");
    if (!f) return 0;
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f)) n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

/* The lines of tmpdir/name that hold needle. */
static int count_lines_in(const char *name, const char *needle) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    return count_lines(path, needle);
}

/* --trace of a zbv run: every rank's file holds, per step, an F, a B and a W span ("pipe") of each micro-batch on
 * each of its 2 chunks, each with the time it waited; tools/pipe_timeline draws the last step of the 2 ranks as
 * an SVG holding one box per action (2 ranks x 3 kinds x 2 chunks x 4 micro-batches = 48); tools/pipe_replay replays
 * it and refuses what does not fit it. */
static void test_trainer_zbv_trace(void **st) {
    (void)st;
    char *args = NULL, *dir = NULL, *svg = NULL, *cmd = NULL;
    if (asprintf(&dir, "%s/zbvtrace", tmpdir) < 0 || asprintf(&svg, "%s/zbv.svg", tmpdir) < 0 ||
        asprintf(&args, "--layers 4 --parallel pipe --pp 2 --chunks 4 --schedule zbv --trace '%s'", dir) < 0)
        fail_msg("out of memory");
    char *out, *err;
    int rc = run(args, &out, &err);
    if (rc != 0) fail_msg("train_gpt %s: exit %d: %s", args, rc, err);
    for (int r = 0; r < 2; r++) {
        char file[600];
        snprintf(file, sizeof file, "%s/rank-%d.json", dir, r);
        const int steps = 2, per = 2 * 4; /* TINY's --steps 2; chunks x micro-batches */
        assert_int_equal(count_lines(file, "\"cat\":\"pipe\""), 3 * per * steps);
        assert_int_equal(count_lines(file, "\"wait_us\""), 3 * per * steps);
        assert_int_equal(count_lines(file, "\"name\":\"W3.1\""), steps);
    }
    const char *src = __FILE__, *slash = strrchr(src, '/');
    if (asprintf(&cmd, "'%.*s../tools/pipe_timeline' '%s' '%s'", slash ? (int)(slash - src + 1) : 0, src, dir, svg) < 0)
        fail_msg("out of memory");
    assert_int_equal(system(cmd), 0);
    assert_int_equal(count_lines(svg, "<svg "), 1);
    assert_int_equal(count_lines(svg, "<title>"), 48);
    assert_int_equal(count_lines(svg, ">rank 1<"), 1);
    /* a relative DIR that reads as an awk assignment (NAME=VALUE) is still read as the traces' directory */
    char tool[PATH_MAX], *tool_rel = NULL;
    if (asprintf(&tool_rel, "%.*s../tools/pipe_timeline", slash ? (int)(slash - src + 1) : 0, src) < 0 ||
        !realpath(tool_rel, tool))
        fail_msg("tools/pipe_timeline not found");
    free(cmd), free(svg);
    if (asprintf(&cmd, "cd '%s' && mv zbvtrace 'run=1' && '%s' 'run=1' zbv2.svg", tmpdir, tool) < 0 ||
        asprintf(&svg, "%s/zbv2.svg", tmpdir) < 0)
        fail_msg("out of memory");
    assert_int_equal(system(cmd), 0);
    assert_int_equal(count_lines(svg, "<title>"), 48);
    static const char *const bad_step[] = { "-1", "abc", "0", "1 2" }; /* refused: -1 and abc drew the last step */
    for (size_t i = 0; i < sizeof bad_step / sizeof *bad_step; i++) {
        free(cmd);
        if (asprintf(&cmd, "cd '%s' && '%s' 'run=1' zbv3.svg %s 2>/dev/null; test $? = 2", tmpdir, tool,
                     bad_step[i]) < 0)
            fail_msg("out of memory");
        if (system(cmd) != 0) fail_msg("tools/pipe_timeline 'run=1' zbv3.svg %s: not exit 2", bad_step[i]);
    }
    /* tools/pipe_replay (beside it) replays it: 2 ranks, 2 chunks in a V; a step the traces lack, a V or placement
     * other than the traces' labels say, a V of 0 or a placement it does not know are refused (they printed a replay
     * of nothing, 0.0 ms and bubble -nan, or of stages the run did not have) */
    static const char *const replay[][2] = { { "2 2 v", "0" }, { "2 2 v 3", "1" }, { "2 1 loop", "2" },
                                             { "2 2 loop", "2" }, { "2 0 v", "2" }, { "2 2 w", "2" } };
    const int at = (int)(strrchr(tool, '/') - tool + 1);
    for (size_t i = 0; i < sizeof replay / sizeof *replay; i++) {
        free(cmd);
        if (asprintf(&cmd, "cd '%s' && '%.*spipe_replay' 'run=1' %s >/dev/null 2>&1; test $? = %s", tmpdir, at, tool,
                     replay[i][0], replay[i][1]) < 0)
            fail_msg("out of memory");
        if (system(cmd) != 0) fail_msg("tools/pipe_replay 'run=1' %s: not exit %s", replay[i][0], replay[i][1]);
    }
    /* a killed run's traces: rank 1's cut inside its last step (2). By default both tools take the last step every
     * rank finished (1), saying why; step 2 asked for is refused naming rank 1. They took step 2: the replay
     * printed rank 1's compute as 0.0 ms and 'deadlocked (wrong P, V or placement?)', the timeline drew rank 0's
     * boxes alone and exited 0. */
    free(cmd);
    if (asprintf(&cmd, "cd '%s' && mkdir cut && cp 'run=1/rank-0.json' cut/ && n=$(grep -n '\"cat\":\"step\"' "
                 "'run=1/rank-1.json' | tail -1 | cut -d: -f1) && head -n $((n - 3)) 'run=1/rank-1.json' > "
                 "cut/rank-1.json", tmpdir) < 0)
        fail_msg("out of memory");
    assert_int_equal(system(cmd), 0);
    static const char *const killed[][4] = {
        { "pipe_replay", "cut 2 2 v", "0", "the trace of rank 1 ends before step 2 (a run killed in it?): step 1" },
        { "pipe_replay", "cut 2 2 v 2", "1", "the trace of rank 1 has no step 2" },
        { "pipe_timeline", "cut cut.svg", "0", "the trace of rank 1 ends before step 2 (a run killed in it?): step 1" },
        { "pipe_timeline", "cut cut2.svg 2", "1", "the trace of rank 1 has no step 2" },
    };
    for (size_t i = 0; i < sizeof killed / sizeof *killed; i++) {
        free(cmd);
        if (asprintf(&cmd, "cd '%s' && '%.*s%s' %s > /dev/null 2> killed.txt; test $? = %s && grep -qF '%s' killed.txt",
                     tmpdir, at, tool, killed[i][0], killed[i][1], killed[i][2], killed[i][3]) < 0)
            fail_msg("out of memory");
        if (system(cmd) != 0)
            fail_msg("tools/%s %s: not exit %s with '%s'", killed[i][0], killed[i][1], killed[i][2], killed[i][3]);
    }
    free(svg);
    if (asprintf(&svg, "%s/cut.svg", tmpdir) < 0) fail_msg("out of memory");
    assert_int_equal(count_lines(svg, "<title>"), 48); /* step 1, whole on both ranks */
    free(tool_rel);
    free(out), free(err), free(args), free(dir), free(svg), free(cmd);
}

/* The exit status of the shell command fmt (run in tmpdir; a signal or no shell: -1). */
static int sh_in_tmp(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *body = NULL, *cmd = NULL;
    if (vasprintf(&body, fmt, ap) < 0 || asprintf(&cmd, "cd '%s' && %s", tmpdir, body) < 0) fail_msg("out of memory");
    va_end(ap);
    int st = system(cmd);
    free(body);
    free(cmd);
    return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* A run's traces under tmpdir/dir (TINY, 4 micro-batches, the rest args). */
static void trace_run(const char *dir, const char *args) {
    char *full = NULL, *out, *err;
    if (asprintf(&full, "%s --chunks 4 --trace '%s/%s'", args, tmpdir, dir) < 0) fail_msg("out of memory");
    int rc = run(full, &out, &err);
    if (rc != 0) fail_msg("train_gpt %s: exit %d: %s", full, rc, err);
    free(full), free(out), free(err);
}

/* The text of tmpdir/name's first line holding needle, from needle on ("" when none). */
static void line_from(const char *name, const char *needle, char *buf, size_t cap) {
    char path[256], line[4096];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "r");
    buf[0] = 0;
    if (!f) return;
    while (fgets(line, sizeof line, f))
        if (strstr(line, needle)) {
            snprintf(buf, cap, "%s", strstr(line, needle));
            break;
        }
    fclose(f);
}

/* The replay tools take the stages from the traces' layout (each rank's process_labels event): a DDP trace (its
 * accumulation writes F and B spans of the same "pipe" kind) is refused, not replayed as a 2-stage pipeline
 * (bubble 0.500, exit 0); a pp 2 x dp 2 trace replays as 2 stages, ranks 0 and 2 (data rank 0; --data 1: ranks 1
 * and 3), as a pp 2 x dp 1 trace does (the same kinds and chunks per stage, the same formula bubble of the equal
 * replay, (P-1)/(M+P-1) = 0.200), where it was refused ("not 2 ranks") or, with P 4, replayed as 4 stages; a
 * trace without the labels (an older run's) is read as before, rank r stage r, saying the layout is unknown. */
static void test_trainer_trace_layout(void **st) {
    (void)st;
    trace_run("lay_ddp", "--world 2 --parallel ddp");
    trace_run("lay_pp", "--parallel pipe --pp 2");
    trace_run("lay_pp_dp", "--world 4 --parallel pipe --pp 2");
    const char *src = __FILE__, *slash = strrchr(src, '/');
    char *rel = NULL, tools[PATH_MAX];
    if (asprintf(&rel, "%.*s../tools", slash ? (int)(slash - src + 1) : 0, src) < 0 || !realpath(rel, tools))
        fail_msg("tools/ not found");
    free(rel);
    /* DDP: refused by both, exit 2 */
    assert_int_equal(sh_in_tmp("'%s/pipe_replay' lay_ddp 2 1 > ddp.txt 2>&1", tools), 2);
    assert_int_equal(count_lines_in("ddp.txt", "not a pipeline trace: its layout is pp 1 x dp 2 x tp 1"), 1);
    assert_int_equal(count_lines_in("ddp.txt", "replay, "), 0);
    assert_int_equal(sh_in_tmp("'%s/pipe_timeline' lay_ddp ddp.svg 2> ddp2.txt", tools), 2);
    assert_int_equal(count_lines_in("ddp2.txt", "not a pipeline trace"), 1);
    /* pp 2 x dp 2: data rank 0's pipeline, ranks 0 and 2, like pp 2 x dp 1's ranks 0 and 1 */
    assert_int_equal(sh_in_tmp("'%s/pipe_replay' lay_pp 2 1 > pp.txt", tools), 0);
    assert_int_equal(sh_in_tmp("'%s/pipe_replay' lay_pp_dp 2 1 > ppdp.txt", tools), 0);
    assert_int_equal(count_lines_in("ppdp.txt", "stages 0 1 on ranks 0 2"), 1);
    assert_int_equal(count_lines_in("ppdp.txt", ": compute "), 2);
    assert_int_equal(count_lines_in("ppdp.txt", "rank 0: compute "), 1);
    assert_int_equal(count_lines_in("ppdp.txt", "rank 2: compute "), 1);
    assert_int_equal(count_lines_in("pp.txt", ": compute "), 2);
    char a[512], b[512];
    line_from("pp.txt", "replay, equal:", a, sizeof a);
    line_from("ppdp.txt", "replay, equal:", b, sizeof b);
    if (!strstr(a, "bubble 0.200 (per rank 0.200 0.200)") || !strstr(b, "bubble 0.200 (per rank 0.200 0.200)"))
        fail_msg("equal replays of 2 stages and 4 micro-batches: pp 2 x dp 1 '%s', pp 2 x dp 2 '%s'", a, b);
    for (int r = 0; r < 2; r++) { /* each stage's kinds and chunks, as pp 2 x dp 1's */
        char na[32], nb[32];
        snprintf(na, sizeof na, "rank %d: compute", r);
        snprintf(nb, sizeof nb, "rank %d: compute", 2 * r);
        line_from("pp.txt", na, a, sizeof a);
        line_from("ppdp.txt", nb, b, sizeof b);
        if (!strstr(a, "(kind and chunk: F0 ") || !strstr(b, "(kind and chunk: F0 ") || !strstr(a, " B0 ") ||
            !strstr(b, " B0 "))
            fail_msg("stage %d: pp 2 x dp 1 '%s', pp 2 x dp 2 '%s'", r, a, b);
    }
    assert_int_equal(sh_in_tmp("'%s/pipe_replay' --data 1 lay_pp_dp 2 1 > ppdp1.txt", tools), 0);
    assert_int_equal(count_lines_in("ppdp1.txt", "stages 0 1 on ranks 1 3"), 1);
    assert_int_equal(count_lines_in("ppdp1.txt", "rank 3: compute "), 1);
    assert_int_equal(sh_in_tmp("'%s/pipe_replay' lay_pp_dp 4 1 2> ppdp4.txt", tools), 2);
    assert_int_equal(count_lines_in("ppdp4.txt", "P is 4 but the trace's pipeline has 2 stages"), 1);
    assert_int_equal(sh_in_tmp("'%s/pipe_replay' --data 2 lay_pp_dp 2 1 2>/dev/null", tools), 2);
    /* the labels say each rank's chunks and their placement: a V or placement other than theirs is refused */
    assert_int_equal(count_lines_in("lay_pp_dp/rank-2.json", "\"chunks\":1,\"placement\":\"loop\""), 1);
    assert_int_equal(sh_in_tmp("'%s/pipe_replay' lay_pp_dp 2 2 2> ppdpv.txt", tools), 2);
    assert_int_equal(count_lines_in("ppdpv.txt", "V is 2 but the trace's ranks hold 1 chunks each"), 1);
    assert_int_equal(sh_in_tmp("'%s/pipe_replay' lay_pp_dp 2 1 v 2> ppdpv.txt", tools), 2);
    assert_int_equal(count_lines_in("ppdpv.txt", "the placement is v but the trace's chunks sit in a loop"), 1);
    assert_int_equal(sh_in_tmp("'%s/pipe_timeline' lay_pp_dp ppdp.svg", tools), 0);
    assert_int_equal(count_lines_in("ppdp.svg", "<title>"), 2 * 2 * 4); /* 2 stages x F, B x 4 micro-batches */
    assert_int_equal(count_lines_in("ppdp.svg", ">rank 2<"), 1);
    assert_int_equal(count_lines_in("ppdp.svg", ">rank 1<"), 0);
    /* without the labels: as before, every rank a stage, with a note */
    assert_int_equal(sh_in_tmp("mkdir lay_old && for f in lay_pp/rank-*.json; do grep -v process_labels \"$f\" > "
                               "lay_old/\"${f#lay_pp/}\"; done"), 0);
    assert_int_equal(count_lines_in("lay_old/rank-1.json", "process_labels"), 0);
    assert_int_equal(sh_in_tmp("'%s/pipe_replay' lay_old 2 1 > old.txt 2> old2.txt", tools), 0);
    assert_int_equal(count_lines_in("old.txt", ": compute "), 2);
    assert_int_equal(count_lines_in("old2.txt", "the layout is unknown"), 1);
    assert_int_equal(sh_in_tmp("'%s/pipe_timeline' lay_old old.svg 2> old3.txt", tools), 0);
    assert_int_equal(count_lines_in("old.svg", "<title>"), 2 * 2 * 4);
    assert_int_equal(count_lines_in("old3.txt", "the layout is unknown"), 1);
}

/* Write text to tmpdir/name. */
static void write_file(const char *name, const char *text) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_true(fputs(text, f) >= 0);
    assert_int_equal(fclose(f), 0);
}

/* The replay tools on odd input. Steps past 2^31 (a trace's step numbers raised by 3000000000): the replay and the
 * picture name the step by its digits and STEP 3000000001 is found (mawk's keys made every such step "3e+09", one
 * step, STEP 3000000001 "has no step", and printf %d printed 2147483647). A STEP past the traces' last says which
 * step is their last (it guessed a killed run), and leaves an earlier out.svg as it was (it was emptied). A DIR
 * that is missing is named (it printed the usage alone), an empty one is said to hold no rank-N.json (pipe_replay
 * printed cat's "No such file" and "not 2 ranks"), an argument past STEP is refused (it was ignored). */
static void test_trainer_trace_tools_odd(void **st) {
    (void)st;
    trace_run("odd_pp", "--parallel pipe --pp 2");
    const char *src = __FILE__, *slash = strrchr(src, '/');
    char *rel = NULL, tools[PATH_MAX];
    if (asprintf(&rel, "%.*s../tools", slash ? (int)(slash - src + 1) : 0, src) < 0 || !realpath(rel, tools))
        fail_msg("tools/ not found");
    free(rel);
    assert_int_equal(sh_in_tmp("mkdir odd_big && for f in odd_pp/rank-*.json; do "
                               "sed -E 's/\"step\":([0-9]+)/\"step\":300000000\\1/' \"$f\" > "
                               "odd_big/\"${f#odd_pp/}\"; done"),
                     0);
    assert_int_equal(count_lines_in("odd_big/rank-1.json", "\"step\":3000000002"), 1);
    assert_int_equal(sh_in_tmp("'%s/pipe_replay' odd_big 2 1 > big.txt", tools), 0);
    assert_int_equal(count_lines_in("big.txt", "step 3000000002: from the first action"), 1);
    assert_int_equal(sh_in_tmp("'%s/pipe_replay' odd_big 2 1 loop 3000000001 > big1.txt", tools), 0);
    assert_int_equal(count_lines_in("big1.txt", "step 3000000001: from the first action"), 1);
    assert_int_equal(sh_in_tmp("'%s/pipe_timeline' odd_big big.svg 3000000001", tools), 0);
    assert_int_equal(count_lines_in("big.svg", "pipeline actions of step 3000000001,"), 1);
    assert_int_equal(count_lines_in("big.svg", "<title>"), 2 * 2 * 4); /* 2 stages x F, B x 4 micro-batches */
    /* a STEP past the last: refused naming the last; out.svg kept */
    write_file("keep.svg", "keep\n");
    assert_int_equal(sh_in_tmp("'%s/pipe_timeline' odd_pp keep.svg 9 2> past.txt", tools), 1);
    assert_int_equal(count_lines_in("past.txt", "no step 9 in the traces: their last step is 2"), 1);
    assert_int_equal(count_lines_in("keep.svg", "keep"), 1);
    assert_int_equal(sh_in_tmp("'%s/pipe_replay' odd_pp 2 1 loop 9 > /dev/null 2> past2.txt", tools), 1);
    assert_int_equal(count_lines_in("past2.txt", "no step 9 in the traces: their last step is 2"), 1);
    /* a missing DIR, an empty one, an argument too many */
    assert_int_equal(sh_in_tmp("'%s/pipe_replay' odd_none 2 1 2> none.txt", tools), 2);
    assert_int_equal(count_lines_in("none.txt", "odd_none is not a directory"), 1);
    assert_int_equal(sh_in_tmp("'%s/pipe_timeline' odd_none none.svg 2> none2.txt", tools), 2);
    assert_int_equal(count_lines_in("none2.txt", "odd_none is not a directory"), 1);
    assert_int_equal(sh_in_tmp("mkdir odd_empty && '%s/pipe_replay' odd_empty 2 1 > empty.txt 2>&1", tools), 1);
    assert_int_equal(count_lines_in("empty.txt", "no rank-N.json in odd_empty"), 1);
    assert_int_equal(count_lines_in("empty.txt", "No such file"), 0);
    assert_int_equal(sh_in_tmp("'%s/pipe_replay' odd_pp 2 1 loop 2 3 > /dev/null 2>&1", tools), 2);
}

/* The peak activation bytes of the 2 stages of a run's JSON (pipeline.stages[].peak_acts_bytes). */
static void stage_peaks(cJSON *j, double pk[2]) {
    cJSON *stages = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "pipeline"), "stages");
    assert_int_equal(cJSON_GetArraySize(stages), 2);
    for (int s = 0; s < 2; s++) pk[s] = num(cJSON_GetArrayItem(stages, s), "peak_acts_bytes");
}

/* --print-schedule writes the built-in lists as text; --schedule-file runs them (and a list written by hand) as a
 * custom schedule: the built-in schedule's losses bit for bit and its peak activations on every stage (zbv's
 * lists, read back, held a record of the head's chunk longer on rank 0: 1.4x the built-in's peak there), DDP's
 * weights (--check-ddp); what does not fit the run is refused naming the file. */
static void test_trainer_schedule_file(void **st) {
    (void)st;
    static const char *const scheds[] = { "zb-h1", "zbv", "1f1b" };
    for (int k = 0; k < 3; k++) {
        char *args = NULL, *out, *err;
        if (asprintf(&args, "--layers 4 --parallel pipe --pp 2 --chunks 4 --schedule %s --print-schedule", scheds[k]) < 0)
            fail_msg("out of memory");
        if (run(args, &out, &err) != 0) fail_msg("train_gpt %s: %s", args, err);
        assert_non_null(strstr(out, "# fsc pipeline schedule: 2 ranks"));
        write_file("sched.txt", out);
        free(out), free(err), free(args);
        double ref[2], got[2], ref_pk[2], got_pk[2];
        if (asprintf(&args, "--layers 4 --parallel pipe --pp 2 --chunks 4 --schedule %s --json", scheds[k]) < 0)
            fail_msg("out of memory");
        losses_of(args, ref, 2, NULL);
        if (run(args, &out, &err) != 0) fail_msg("train_gpt %s: %s", args, err);
        cJSON *jb = prog_last_json(out);
        stage_peaks(jb, ref_pk);
        cJSON_Delete(jb);
        free(out), free(err), free(args);
        if (asprintf(&args, "--layers 4 --parallel pipe --pp 2 --chunks 4 --schedule-file '%s/sched.txt' --check-ddp "
                     "--json", tmpdir) < 0)
            fail_msg("out of memory");
        losses_of(args, got, 2, "custom (--schedule-file)");
        if (memcmp(ref, got, sizeof ref)) fail_msg("--schedule %s from its printed file: other losses", scheds[k]);
        if (run(args, &out, &err) != 0) fail_msg("train_gpt %s: %s", args, err);
        cJSON *j = prog_last_json(out);
        assert_true(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "check_ddp"), "bit_identical")));
        assert_string_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "pipeline"), "schedule")->valuestring, "custom");
        stage_peaks(j, got_pk);
        for (int s = 0; s < 2; s++)
            if (got_pk[s] != ref_pk[s])
                fail_msg("--schedule %s from its printed file: stage %d peaks at %.0f activation bytes, the built-in "
                         "at %.0f", scheds[k], s, got_pk[s], ref_pk[s]);
        cJSON_Delete(j);
        free(out), free(err), free(args);
    }
    /* by hand: all forwards, then backwards with their Ws at the end (GPipe's order, split), commas and comments */
    write_file("hand.txt", "# GPipe, split\n0F0, 0F1, 0B0, 0B1, 0W0, 0W1\n1F0 1F1 1B0 1B1 1W0 1W1  # the last rank\n");
    char *out, *err, *args = NULL;
    if (asprintf(&args, "--parallel pipe --pp 2 --chunks 2 --schedule-file '%s/hand.txt' --check-ddp --json", tmpdir) < 0)
        fail_msg("out of memory");
    if (run(args, &out, &err) != 0) fail_msg("train_gpt %s: %s", args, err);
    cJSON *j = prog_last_json(out);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "check_ddp"), "bit_identical")));
    cJSON_Delete(j);
    free(out), free(err), free(args);
    write_file("bad.txt", "0F0 0F1 0B0 0B1\n1F0 1B0 1F1 1X1\n");
    write_file("dead.txt", "0F0 0B0 0F1 0B1\n1F0 1F1 1B0 1B1\n");
    write_file("joined.txt", "0F0 0F1 0B0 0B1 1F0 1B0 1F1 1B1\n");   /* two ranks' lines on one: not a deadlock */
    write_file("cut.txt", "0F0 0F1 0B0 0B1\n1F0 1B0\n1F1 1B1\n");   /* a line cut in two: not rank 2's stage */
    char fifo[256];
    snprintf(fifo, sizeof fifo, "%s/fifo", tmpdir);
    assert_int_equal(mkfifo(fifo, 0600), 0); /* refused at once, not waited on */
    struct { const char *args, *needle; } cases[] = {
        { "--pp 2 --chunks 2 --schedule-file '%s/hand.txt' --schedule zbv", "drop --schedule" },
        { "--pp 2 --chunks 2 --schedule-file '%s/hand.txt' --virtual-stages 2", "drop --virtual-stages" },
        { "--pp 2 --chunks 4 --schedule-file '%s/hand.txt'", "hand.txt runs 2 micro-batches but the run has 4" },
        { "--pp 3 --chunks 2 --schedule-file '%s/hand.txt'", "hand.txt: pipeline schedule text: 2 lines of actions for 3 pipeline ranks" },
        { "--pp 2 --chunks 2 --schedule-file '%s/missing.txt'", "missing.txt: cannot open" },
        { "--pp 2 --chunks 2 --schedule-file '%s/bad.txt'", "line 2: '1X1' is not an action" },
        { "--pp 2 --chunks 2 --schedule-file '%s/dead.txt'", "deadlock" },
        { "--pp 2 --chunks 2 --schedule-file '%s/joined.txt'", "joined.txt: pipeline schedule text: 1 line of actions for 2 pipeline ranks (one line per rank: is a line cut in two" },
        { "--pp 2 --chunks 2 --schedule-file '%s/cut.txt'", "cut.txt: pipeline schedule text: 3 lines of actions for 2 pipeline ranks" },
        { "--pp 2 --chunks 2 --schedule-file '%s/fifo'", "fifo: not a regular file" },
        { "--world 2 --parallel ddp --schedule-file '%s/hand.txt'", "--schedule-file applies to pipelines only" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *a = NULL;
        if (asprintf(&a, cases[i].args, tmpdir) < 0) fail_msg("out of memory");
        char *full = NULL;
        if (asprintf(&full, "--parallel pipe %s", a) < 0) fail_msg("out of memory");
        const char *use = strstr(a, "--parallel") ? a : full;
        int rc = run(use, &out, &err);
        if (rc != 2) fail_msg("train_gpt %s: exit %d (expected 2): %s", use, rc, err);
        if (!strstr(err, cases[i].needle)) fail_msg("train_gpt %s: \"%s\" lacks \"%s\"", use, err, cases[i].needle);
        free(out), free(err), free(a), free(full);
    }
}

/* --schedule-file and --schedule (with --virtual-stages) are one choice: over a --config that set one, the command line's
 * other replaces it ("the command line wins"), as --chunks replaces a file's --accum. Both ways were refused as both
 * ("drop --schedule"), so a run's train_config.json could not be rerun under another schedule. Given both on the
 * command line, still refused. Oracle: the exit status and the schedule the run's JSON names. */
static void test_trainer_schedule_file_config(void **st) {
    (void)st;
    write_file("hand2.txt", "0F0 0F1 0B0 0B1 0W0 0W1\n1F0 1F1 1B0 1B1 1W0 1W1\n");
    char *cfg_path = NULL;
    if (asprintf(&cfg_path, "%s/hand2.txt", tmpdir) < 0) fail_msg("out of memory");
    char *text = NULL;
    if (asprintf(&text, "{\"parallel\": \"pipe\", \"pp\": 2, \"chunks\": 2, \"schedule-file\": \"%s\"}", cfg_path) < 0)
        fail_msg("out of memory");
    write_file("cfg_file.json", text);
    free(text), free(cfg_path);
    write_file("cfg_sched.json", "{\"parallel\": \"pipe\", \"pp\": 2, \"chunks\": 2, \"schedule\": \"interleaved\", "
                                 "\"virtual-stages\": 3}");
    struct { const char *args, *sched; } cases[] = {
        { "--config '%s/cfg_file.json' --schedule 1f1b --json", "1f1b" },
        { "--config '%s/cfg_file.json' --json", "custom" },
        { "--config '%s/cfg_sched.json' --schedule-file '%s/hand2.txt' --json", "custom" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *args = NULL, *out, *err;
        if (asprintf(&args, cases[i].args, tmpdir, tmpdir) < 0) fail_msg("out of memory");
        int rc = run(args, &out, &err);
        if (rc != 0) fail_msg("train_gpt %s: exit %d: %s", args, rc, err);
        cJSON *j = prog_last_json(out);
        const char *got = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "pipeline"), "schedule")->valuestring;
        if (strcmp(got, cases[i].sched)) fail_msg("train_gpt %s: schedule %s, expected %s", args, got, cases[i].sched);
        cJSON_Delete(j);
        free(out), free(err), free(args);
    }
    char *args = NULL, *out, *err;
    if (asprintf(&args, "--config '%s/cfg_file.json' --schedule-file '%s/hand2.txt' --schedule 1f1b", tmpdir, tmpdir) < 0)
        fail_msg("out of memory");
    assert_int_equal(run(args, &out, &err), 2);
    assert_non_null(strstr(err, "drop --schedule"));
    free(out), free(err), free(args);
}

static void test_trainer_pipeline_errors(void **st) {
    (void)st;
    struct { const char *args, *needle; } cases[] = {
        { "--parallel pipe --pp 2 --balance 2,2", "--balance: balance sums to 4 but the model has 3 blocks" },
        { "--parallel pipe --pp 2 --balance 3,0", "stage 1 would have no block" },
        { "--parallel pipe --pp 2 --balance 1,1,1", "3 entries but there are 2" },
        { "--parallel pipe --pp 4", "--pp 4 pipeline stages but the model has 3 blocks" },
        { "--parallel ddp --pp 2 --world 3", "does not split into --pp 2" },
        { "--parallel ddp --pp 2 --dp 2 --world 8", "--world 8 is not --dp 2 x --pp 2" },
        { "--parallel pipe", "--parallel pipe needs --pp 2" },
        { "--parallel ddp --world 2 --checkpoint never", "--checkpoint applies to pipelines only" },
        { "--parallel pipe --pp 2 --chunks 2 --accum 2", "give one" },
        { "--parallel pipe --pp 2 --dp 3", "--batch 8 does not split evenly over 3 data-parallel ranks" },
        { "--parallel pipe --pp 2 --schedule zigzag", "--schedule: unknown value 'zigzag'" },
        { "--parallel ddp --world 2 --virtual-stages 2", "--virtual-stages applies to pipelines only" },
        { "--parallel pipe --pp 2 --schedule interleaved --virtual-stages 2",
          "--pp 2 x --virtual-stages 2 chunks but the model has 3 blocks" },
        { "--layers 4 --parallel pipe --pp 2 --schedule interleaved --virtual-stages 2 --balance 2,2",
          "2 entries but there are 4" },
        /* what the engine would refuse once the ranks run, said first in the options' names */
        { "--layers 4 --parallel pipe --pp 2 --schedule interleaved --virtual-stages 2 --chunks 1",
          "--schedule interleaved needs the micro-batches (--chunks 1) to be a multiple of --pp 2" },
        { "--layers 4 --parallel pipe --pp 2 --schedule interleaved --virtual-stages 2 --chunks 2 --prefetch 0",
          "--schedule interleaved runs 2 chunks a pipeline rank, whose streams need --prefetch 1" },
        { "--layers 4 --parallel pipe --pp 2 --schedule zbv --chunks 2 --prefetch 0",
          "--schedule zbv runs 2 chunks a pipeline rank, whose streams need --prefetch 1" },
        { "--layers 4 --parallel pipe --pp 2 --schedule zb-h1 --virtual-stages 2",
          "--virtual-stages 2 applies to --schedule interleaved" },
        { "--parallel ddp --world 2 --unit 2", "--unit applies to --reduce exact only" },
        { "--parallel ddp --world 2 --reduce exact --unit 3", "--unit 3 does not divide the 4 sequences per rank" },
        { "--parallel pipe --pp 2 --chunks 2 --reduce exact --unit 1",
          "the unit is its micro-batch, so --unit is 4 (the 8 sequences per rank / --chunks 2) or 0, not 1" },
        { "--parallel ddp --world 2 --sim-clock virtual --threads 2", "--sim-clock virtual counts the CPU time" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out, *err;
        int rc = run(cases[i].args, &out, &err);
        if (rc != 2) fail_msg("train_gpt %s: exit %d (expected 2): %s", cases[i].args, rc, err);
        if (!strstr(err, cases[i].needle))
            fail_msg("train_gpt %s: \"%s\" lacks \"%s\"", cases[i].args, err, cases[i].needle);
        free(out);
        free(err);
    }
}

int main(int argc, char **argv) {
    (void)argc;
    char self[PATH_MAX];
    if (!realpath(argv[0], self)) return 1;
    char *dir = dirname(self);
    snprintf(trainer, sizeof trainer, "%.*s/../train_gpt", (int)(sizeof trainer - 16), dir);
    if (access(trainer, X_OK) != 0) {
        fprintf(stderr, "test_pipe_trainer: %s not found: build it first\n", trainer);
        return 1;
    }
    strcpy(tmpdir, "/tmp/fsc_test_pipe_trainer_XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    char path[128];
    snprintf(path, sizeof path, "%s/data.txt", tmpdir);
    FILE *f = fopen(path, "wb"); /* letters in a fixed pseudo-random order */
    if (!f) return 1;
    for (unsigned i = 0, x = 7; i < 4000; i++) x = x * 1664525u + 1013904223u, fputc('a' + (int)((x >> 24) % 26), f);
    fclose(f);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_trainer_pipeline_equals_ddp),
        cmocka_unit_test(test_trainer_pipeline_oracle_threads),
        cmocka_unit_test(test_trainer_interleaved_equals_ddp),
        cmocka_unit_test(test_trainer_zb_h1_equals_ddp),
        cmocka_unit_test(test_trainer_zbv),
        cmocka_unit_test(test_trainer_zbv_trace),
        cmocka_unit_test(test_trainer_trace_layout),
        cmocka_unit_test(test_trainer_trace_tools_odd),
        cmocka_unit_test(test_trainer_schedule_file),
        cmocka_unit_test(test_trainer_schedule_file_config),
        cmocka_unit_test(test_trainer_pipeline_errors),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "test_pipe_trainer: could not remove %s\n", tmpdir);
    return rc;
}
