/* Tests of the trainer's --resume and --keep-last (examples/train_gpt.c over lib/ckpt/ckpt_keep.c): README's
 * save-every/resume command works on a first run and after it, --keep-last leaves the newest K checkpoints,
 * and a damaged newest checkpoint is skipped with a message for the one before, the losses still those of
 * an uninterrupted run. A resumed run's comm bytes per step are the plain run's; a checkpoint whose last rate is not
 * this run's schedule's warns on stderr. */
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <dirent.h>
#include <math.h>
#include "trainertest.h"

static char trainer[PATH_MAX];
static char tmpdir[64];

#define TINY "--layers 1 --dim 16 --heads 2 --seq 8 --batch 4 --parallel fsdp --world 2"

/* Run TINY with args: exit 0 required; stdout+stderr in *out (caller frees), losses (null: -1) in l. */
static void train(const char *args, double *l, int n, char **out) {
    char *full = prog_fmt(TINY " %s --json", args), *o = NULL;
    int rc = prog_run(trainer, full, tmpdir, &o, NULL);
    if (rc != 0) fail_msg("%s: exit %d\n%s", full, rc, o);
    cJSON *j = prog_last_json(o);
    prog_doubles(j, "losses", l, n, -1.0);
    cJSON_Delete(j);
    free(full);
    if (out) *out = o;
    else free(o);
}

static int exists(const char *dir, const char *name) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    struct stat st;
    return stat(p, &st) == 0;
}

static void assert_same_from(const double *a, const double *ref, int from, int n, const char *what) {
    for (int i = from; i < n; i++)
        if (memcmp(&a[i], &ref[i], sizeof a[i])) fail_msg("%s: loss %d is %.17g, uninterrupted %.17g", what, i, a[i], ref[i]);
}

/* Oracle: README's `--save-every K --ckpt-dir D --resume D` on an absent D trains from step 0 (the losses of
 * a run without --resume, bit for bit) and says it starts a new run; run again with more steps it resumes
 * at the last checkpoint and its later losses equal an uninterrupted run's. --keep-last 2 leaves exactly
 * the newest 2 checkpoints. */
static void test_first_run_and_keep_last(void **state) {
    (void)state;
    double ref[6], l[6];
    train("--steps 6", ref, 6, NULL); /* uninterrupted, no checkpoints */
    char *dir = prog_fmt("%s/ck", tmpdir), *a = prog_fmt("--steps 4 --save-every 1 --ckpt-dir '%s' --resume '%s' --keep-last 2", dir, dir), *out;
    train(a, l, 4, &out);
    char *said = prog_fmt("no checkpoint in %s to resume from: starting a new run at step 0", dir);
    if (!strstr(out, said)) fail_msg("first run: \"%s\" not in\n%s", said, out);
    assert_same_from(l, ref, 0, 4, "first run");
    assert_true(exists(dir, "step-00000003") && exists(dir, "step-00000004"));
    assert_false(exists(dir, "step-00000001") || exists(dir, "step-00000002"));
    free(out);
    free(a);
    a = prog_fmt("--steps 6 --save-every 1 --ckpt-dir '%s' --resume '%s' --keep-last 2", dir, dir);
    train(a, l, 6, &out);
    char *from = prog_fmt("resumed from %s/step-00000004 at step 4", dir);
    if (!strstr(out, from)) fail_msg("second run: \"%s\" not in\n%s", from, out);
    /* saves and the resume say their size (the step directory's files) and time */
    char *six = prog_fmt("%s/step-00000006", dir), *line = prog_fmt("checkpoint %s (", six);
    const char *at = strstr(out, line);
    if (!at) fail_msg("second run: \"%s\" not in\n%s", line, out);
    double mib = -1, ms = -1;
    assert_int_equal(sscanf(at + strlen(line), "%lf MiB in %lf ms)", &mib, &ms), 2);
    assert_true(ms >= 0);
    double bytes = 0;
    DIR *d = opendir(six);
    assert_non_null(d);
    for (struct dirent *de; (de = readdir(d)) != NULL;) {
        struct stat st;
        char *f = prog_fmt("%s/%s", six, de->d_name);
        if (stat(f, &st) == 0 && S_ISREG(st.st_mode)) bytes += (double)st.st_size;
        free(f);
    }
    closedir(d);
    if (fabs(mib - bytes / 1048576.0) > 0.051) fail_msg("the save said %.1f MiB, its files hold %.3f", mib, bytes / 1048576.0);
    assert_non_null(strstr(strstr(out, from) + strlen(from), " MiB in "));
    free(six), free(line);
    assert_same_from(l, ref, 4, 6, "resumed run");
    assert_true(exists(dir, "step-00000005") && exists(dir, "step-00000006"));
    assert_false(exists(dir, "step-00000003") || exists(dir, "step-00000004"));
    free(out);
    free(a);
    free(from);
    free(said);
    free(dir);
}

/* Oracle: with the newest checkpoint's metadata damaged, the run says which checkpoint it skipped and why,
 * resumes from the one before, and its losses from there equal an uninterrupted run's. */
static void test_damaged_newest(void **state) {
    (void)state;
    double ref[5], l[5];
    train("--steps 5", ref, 5, NULL);
    char *dir = prog_fmt("%s/dmg", tmpdir), *a = prog_fmt("--steps 3 --save-every 1 --ckpt-dir '%s'", dir), *out;
    train(a, l, 3, NULL);
    free(a);
    char *meta = prog_fmt("%s/step-00000003/metadata.json", dir);
    FILE *f = fopen(meta, "w");
    assert_non_null(f);
    fputs("{\"broken\": true}", f);
    fclose(f);
    a = prog_fmt("--steps 5 --save-every 1 --ckpt-dir '%s' --resume '%s'", dir, dir);
    train(a, l, 5, &out);
    if (!strstr(out, "step-00000003 skipped, damaged") || !strstr(out, "resumed from") ||
        !strstr(out, "step-00000002 at step 2"))
        fail_msg("damaged newest: %s", out);
    assert_same_from(l, ref, 2, 5, "resumed past a damaged checkpoint");
    free(out);
    free(a);
    free(meta);
    free(dir);
}

/* Oracle: --keep-last needs a checkpoint directory (exit 2 naming it). */
static void test_keep_last_needs_dir(void **state) {
    (void)state;
    prog_refused(trainer, TINY " --keep-last 2", tmpdir, 2, "--keep-last applies to --save-every/--ckpt-dir");
}

/* The schedule and the decay rule are recorded in --ckpt-dir/train_config.json; --resume with options that change
 * the steps after the checkpoint (the rate, its schedule, --steps of a decaying schedule, the decay rule) warns,
 * naming each option with both values, and still resumes; the same options, or --steps of a constant schedule,
 * say nothing; a checkpoint at or past --steps says no step is left; the record under its old name, config.json,
 * is compared too, a Hugging Face config.json there is not. Oracle: the text of the output. */
static void test_resume_options_differ(void **state) {
    (void)state;
    char *ck = prog_fmt("%s/differ", tmpdir), *args, *out = NULL;
    double l[8];
    args = prog_fmt("--steps 4 --lr-schedule cosine --warmup 1 --weight-decay 0.1 --save-every 2 --ckpt-dir %s --resume %s",
                    ck, ck);
    train(args, l, 4, &out);
    assert_null(strstr(out, "warning"));
    free(out), free(args);
    char *conf = prog_fmt("%s/train_config.json", ck), *text = prog_slurp(conf);
    assert_non_null(strstr(text, "\"lr-schedule\":\t\"cosine\""));
    assert_non_null(strstr(text, "\"decay-all\":\tfalse"));
    free(text), free(conf);
    /* the same options: resumed at 4, nothing to train, no option warning */
    args = prog_fmt("--steps 4 --lr-schedule cosine --warmup 1 --weight-decay 0.1 --save-every 2 --ckpt-dir %s --resume %s",
                    ck, ck);
    train(args, l, 4, &out);
    assert_null(strstr(out, "warning: --resume"));
    assert_non_null(strstr(out, "the checkpoint is at step 4, --steps is 4: no step left to train"));
    free(out), free(args);
    /* a longer cosine and the decay on every tensor: both named, and the run goes on from step 4 */
    args = prog_fmt("--steps 6 --lr-schedule cosine --warmup 1 --weight-decay 0.1 --decay-all --save-every 2 "
                    "--ckpt-dir %s --resume %s", ck, ck);
    train(args, l, 6, &out);
    if (!strstr(out, "--steps is 6, the run that wrote the checkpoints had 4") ||
        !strstr(out, "--decay-all is true, the run that wrote the checkpoints had false"))
        fail_msg("no warning of the changed options:\n%s", out);
    assert_null(strstr(out, "--lr is"));
    assert_non_null(strstr(out, "resumed from"));
    assert_true(l[3] == -1.0); /* null: not run here */
    assert_true(l[4] > 0 && l[5] > 0);
    free(out), free(args);
    /* a constant rate: --steps only says where the run stops; a lower --lr is named */
    char *ck2 = prog_fmt("%s/differ2", tmpdir);
    args = prog_fmt("--steps 2 --save-every 2 --ckpt-dir %s --resume %s", ck2, ck2);
    train(args, l, 2, NULL);
    free(args);
    args = prog_fmt("--steps 4 --save-every 2 --ckpt-dir %s --resume %s", ck2, ck2);
    train(args, l, 4, &out);
    assert_null(strstr(out, "warning"));
    free(out), free(args);
    args = prog_fmt("--steps 6 --lr 0.001 --save-every 2 --ckpt-dir %s --resume %s", ck2, ck2);
    train(args, l, 6, &out);
    assert_non_null(strstr(out, "--lr is 0.001, the run that wrote the checkpoints had 0.003"));
    assert_null(strstr(out, "--steps is"));
    free(out), free(args), free(ck), free(ck2);
}

/* --resume DIR/step-00000002 (DIR holding steps 2 and 4) resumes from that step, says so, and the later losses
 * are the uninterrupted run's; before, it started a new run at step 0 and exited 0. */
static void test_resume_one_step(void **state) {
    (void)state;
    double ref[4], l[4];
    train("--steps 4", ref, 4, NULL);
    char *ck = prog_fmt("%s/onestep", tmpdir), *out = NULL;
    char *args = prog_fmt("--steps 4 --save-every 2 --ckpt-dir %s", ck);
    train(args, l, 4, NULL);
    free(args);
    args = prog_fmt("--steps 4 --resume %s/step-00000002", ck);
    train(args, l, 4, &out);
    char *said = prog_fmt("resumed from %s/step-00000002 at step 2", ck);
    if (!strstr(out, said)) fail_msg("\"%s\" not in\n%s", said, out);
    assert_true(l[1] == -1.0);
    assert_same_from(l, ref, 2, 4, "resumed from the step given");
    assert_null(strstr(out, "warning"));
    free(out), free(args);
    /* its options are compared with the directory's train_config.json */
    args = prog_fmt("--steps 4 --lr 0.001 --resume %s/step-00000002", ck);
    train(args, l, 4, &out);
    if (!strstr(out, "--lr is 0.001, the run that wrote the checkpoints had 0.003")) fail_msg("no --lr warning:\n%s", out);
    free(out), free(args);
    args = prog_fmt("--steps 4 --lr 0.001 --resume %s/step-00000002/", ck); /* a trailing slash: the same */
    train(args, l, 4, &out);
    if (!strstr(out, "--lr is 0.001, the run that wrote the checkpoints had 0.003"))
        fail_msg("no --lr warning with a trailing slash:\n%s", out);
    free(out), free(args);
    /* a directory of a run from before the name changed: its config.json is compared; Hugging Face's is not */
    char *now = prog_fmt("%s/train_config.json", ck), *old = prog_fmt("%s/config.json", ck);
    assert_int_equal(rename(now, old), 0);
    args = prog_fmt("--steps 4 --lr 0.001 --resume %s/step-00000002", ck);
    train(args, l, 4, &out);
    if (!strstr(out, "--lr is 0.001, the run that wrote the checkpoints had 0.003"))
        fail_msg("no --lr warning from config.json:\n%s", out);
    free(out);
    FILE *f = fopen(old, "w");
    assert_non_null(f);
    fputs("{\"model_type\": \"gpt2\", \"lr\": 0.5}\n", f);
    assert_int_equal(fclose(f), 0);
    train(args, l, 4, &out);
    if (strstr(out, "warning: --resume")) fail_msg("a Hugging Face config.json compared:\n%s", out);
    free(now), free(old);
    free(said), free(out), free(args), free(ck);
}

/* A refused resume leaves the run's record alone: --ckpt-dir/train_config.json byte for byte as the run that
 * wrote the checkpoints left it, whether the refusal comes before training (a missing --val-data) or from the
 * checkpoint (another --dim, --optimizer or --model). Before, the record was rewritten first, recording the refused
 * options. */
static void test_refused_keeps_record(void **state) {
    (void)state;
    char *ck = prog_fmt("%s/record", tmpdir), *conf = prog_fmt("%s/train_config.json", ck);
    char *args = prog_fmt("--steps 2 --save-every 2 --ckpt-dir %s --resume %s", ck, ck);
    double l[4];
    train(args, l, 2, NULL);
    char *before = prog_slurp(conf);
    assert_non_null(strstr(before, "\"lr\":\t0.003"));
    const struct { const char *opts; int rc; const char *why; } bad[] = {
        { "--lr 0.3 --val-data /nonexistent.bin", 2, "--val-data" },
        { "--dim 32", 1, "" },
        { "--optimizer sgd", 1, "" },
        { "--model llama", 1, "" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *a = prog_fmt(TINY " --steps 4 --save-every 2 --ckpt-dir %s --resume %s %s", ck, ck, bad[i].opts);
        prog_refused(trainer, a, tmpdir, bad[i].rc, bad[i].why);
        char *after = prog_slurp(conf);
        if (strcmp(before, after) != 0) fail_msg("%s rewrote train_config.json:\n%s", bad[i].opts, after);
        free(after), free(a);
    }
    free(before), free(args), free(conf), free(ck);
}

/* DIR/train_config.json a FIFO (or anything but a regular file): --resume says it cannot compare the options and
 * goes on, without waiting on it (before, it hung opening the FIFO). */
static void test_resume_config_fifo(void **state) {
    (void)state;
    char *ck = prog_fmt("%s/fifo", tmpdir), *conf = prog_fmt("%s/train_config.json", ck), *out = NULL;
    char *args = prog_fmt("--steps 2 --save-every 2 --ckpt-dir %s --resume %s", ck, ck);
    double l[4];
    train(args, l, 2, NULL);
    assert_int_equal(unlink(conf), 0);
    assert_int_equal(mkfifo(conf, 0600), 0);
    free(args);
    args = prog_fmt("--steps 4 --save-every 2 --ckpt-dir %s --resume %s", ck, ck);
    train(args, l, 4, &out);
    if (!strstr(out, "not a regular file") || !strstr(out, "options not compared") || !strstr(out, "resumed from"))
        fail_msg("no word of the FIFO:\n%s", out);
    free(out), free(args), free(conf), free(ck);
}

/* --json's comm_bytes_per_step (and by group) of a run resumed at step 2 of 4 is the bytes of a step it ran: those of
 * the same run trained straight (ddp, world 2; no checkpoint written by either, so the steps' traffic alone). Before,
 * the bytes of the 2 steps run were divided by --steps (4): half. Oracle: the plain run's numbers, exactly. */
static void test_resume_comm_per_step(void **state) {
    (void)state;
    const char *model = "--layers 1 --dim 16 --heads 2 --seq 8 --batch 4 --world 2 --parallel ddp";
    char *ck = prog_fmt("%s/comm", tmpdir), *args = prog_fmt("--steps 2 --save-every 2 --ckpt-dir '%s'", ck);
    cJSON *plain = prog_json(trainer, tmpdir, model, "--steps 4");
    cJSON *first = prog_json(trainer, tmpdir, model, args);
    free(args);
    args = prog_fmt("--steps 4 --resume '%s'", ck);
    cJSON *resumed = prog_json(trainer, tmpdir, model, args);
    double l[4];
    prog_doubles(resumed, "losses", l, 4, -1.0);
    assert_true(l[1] == -1.0 && l[2] > 0); /* resumed at step 2: steps 3 and 4 run */
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(plain, "comm_bytes_per_step"),
                *r = cJSON_GetObjectItemCaseSensitive(resumed, "comm_bytes_per_step");
    assert_true(cJSON_IsNumber(p) && cJSON_IsNumber(r));
    assert_true(p->valuedouble > 0);
    if (r->valuedouble != p->valuedouble)
        fail_msg("comm_bytes_per_step: resumed at step 2 of 4 %.17g, the plain run %.17g", r->valuedouble, p->valuedouble);
    const cJSON *pg = cJSON_GetObjectItemCaseSensitive(plain, "comm_bytes_per_step_by_group"),
                *rg = cJSON_GetObjectItemCaseSensitive(resumed, "comm_bytes_per_step_by_group");
    assert_true(cJSON_IsObject(pg) && cJSON_IsObject(rg));
    assert_int_equal(cJSON_GetArraySize(rg), cJSON_GetArraySize(pg));
    const cJSON *g;
    cJSON_ArrayForEach(g, pg) {
        const cJSON *h = cJSON_GetObjectItemCaseSensitive(rg, g->string);
        if (!cJSON_IsNumber(h) || h->valuedouble != g->valuedouble)
            fail_msg("comm_bytes_per_step_by_group.%s: resumed %.17g, the plain run %.17g", g->string,
                     h ? h->valuedouble : -1.0, g->valuedouble);
    }
    cJSON_Delete(plain), cJSON_Delete(first), cJSON_Delete(resumed);
    free(args), free(ck);
}

/* A checkpoint whose last rate (the engine's, restored) is not what this run's schedule gives at its step warns on
 * stderr, naming the checkpoint and both rates, also when the directory has no train_config.json to compare the
 * options with (a checkpoint older than the record, or copied alone); resuming it under its own options says nothing
 * of the kind. Before, nothing was said without the record. Oracle: the text of stderr. */
static void test_resume_rate_warning(void **state) {
    (void)state;
    const char *sched = "--lr-schedule cosine --warmup 1";
    char *ck = prog_fmt("%s/rate", tmpdir), *args = prog_fmt("--steps 4 %s --save-every 2 --ckpt-dir '%s'", sched, ck);
    double l[4];
    train(args, l, 4, NULL);
    free(args);
    char *want = prog_fmt("%s/step-00000002 was trained at a rate of 0.003 at its step 2, where this run's schedule "
                          "gives 0.001", ck), *out = NULL, *err = NULL;
    args = prog_fmt(TINY " --steps 4 %s --resume '%s/step-00000002' --json", sched, ck);
    int rc = prog_run(trainer, args, tmpdir, &out, &err);
    if (rc != 0) fail_msg("%s: exit %d\n%s%s", args, rc, out, err);
    if (strstr(err, "was trained at a rate of")) fail_msg("a resume under the run's own options warned:\n%s", err);
    free(out), free(err), free(args);
    args = prog_fmt(TINY " --steps 4 %s --lr 0.001 --resume '%s/step-00000002' --json", sched, ck);
    rc = prog_run(trainer, args, tmpdir, &out, &err);
    if (rc != 0) fail_msg("%s: exit %d\n%s%s", args, rc, out, err);
    if (!strstr(err, want)) fail_msg("stderr lacks \"%s\":\n%s", want, err);
    free(out), free(err);
    /* without the run's record: the checkpoint's own rate is all there is to tell */
    char *conf = prog_fmt("%s/train_config.json", ck), *gone = prog_fmt("%s/train_config.json.away", ck);
    assert_int_equal(rename(conf, gone), 0);
    rc = prog_run(trainer, args, tmpdir, &out, &err);
    if (rc != 0) fail_msg("%s: exit %d\n%s%s", args, rc, out, err);
    if (!strstr(err, want)) fail_msg("without train_config.json, stderr lacks \"%s\":\n%s", want, err);
    assert_null(strstr(err, "--lr is"));
    free(out), free(err), free(args), free(conf), free(gone), free(want), free(ck);
}

/* The recorded options in another form are no difference: --data-format bytes where the run's auto read bytes, and
 * the same --data file by another path (./, absolute) warn of nothing; a copy of the file (another file) is still
 * named. Before, both forms warned that "the steps from here differ from that run's". Oracle: the text of stderr. */
static void test_resume_same_data_other_form(void **state) {
    (void)state;
    char *ck = prog_fmt("%s/form", tmpdir), *args = prog_fmt("--steps 2 --save-every 2 --ckpt-dir '%s'", ck), *out = NULL;
    char abs[PATH_MAX];
    double l[2];
    train(args, l, 2, NULL);
    free(args);
    assert_non_null(realpath("examples/data/coriolanus.txt", abs));
    const char *same[] = {"--data-format bytes", "--data ./examples/data/coriolanus.txt", "--data-format auto"};
    for (int i = 0; i < 3; i++) {
        args = prog_fmt("--steps 2 %s --resume '%s'", same[i], ck);
        train(args, l, 2, &out);
        if (strstr(out, "warning: --resume")) fail_msg("%s: a false warning:\n%s", same[i], out);
        free(out), free(args);
    }
    args = prog_fmt("--steps 2 --data '%s' --data-format bytes --resume '%s'", abs, ck);
    train(args, l, 2, &out);
    if (strstr(out, "warning: --resume")) fail_msg("an absolute path: a false warning:\n%s", out);
    free(out), free(args);
    char *copy = prog_fmt("%s/copy.txt", tmpdir), *text = prog_slurp(abs);
    FILE *f = fopen(copy, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
    args = prog_fmt("--steps 2 --data '%s' --resume '%s'", copy, ck);
    train(args, l, 2, &out);
    if (!strstr(out, "warning: --resume") || !strstr(out, "--data is")) fail_msg("another file not named:\n%s", out);
    free(out), free(args), free(copy), free(text), free(ck);
}

int main(int argc, char **argv) {
    (void)argc;
    if (prog_setup(argv[0], "test_trainer_resume", "train_gpt", trainer, sizeof trainer, tmpdir, sizeof tmpdir)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_run_and_keep_last),
        cmocka_unit_test(test_damaged_newest),
        cmocka_unit_test(test_keep_last_needs_dir),
        cmocka_unit_test(test_resume_options_differ),
        cmocka_unit_test(test_refused_keeps_record),
        cmocka_unit_test(test_resume_one_step),
        cmocka_unit_test(test_resume_config_fifo),
        cmocka_unit_test(test_resume_comm_per_step),
        cmocka_unit_test(test_resume_rate_warning),
        cmocka_unit_test(test_resume_same_data_other_form),
    };
    if (getenv("FSC_TEST_FILTER")) cmocka_set_test_filter(getenv("FSC_TEST_FILTER")); /* one test: its name */
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    test_rmtree(tmpdir);
    return rc;
}
