/* Tests of tools/plot's data extraction (tools/plot --data, read by fsc-jsonl: no gnuplot needed; only
 * test_quoted_names runs gnuplot, when it is on the PATH). Oracles: for a log written out by hand below (a config
 * line, train records with and without lr and mfu, a validation record, a resumed run's second config line and
 * records), the tables are exactly the ones written out by hand; a resumed run's repeated steps give one row each,
 * the last record's, in step order; a log the trainer wrote (--log) gives one row per step whose loss reads back
 * as --json's loss (the same double) and whose memory columns are the tags of the record; a log in JSON forms a
 * line-by-line text match misreads (test_json_forms says which) gives the tables written out by hand; bad usage
 * and a missing file fail; names with a single quote plot; a line break in a name runs no gnuplot command. */
#include <limits.h>
#include <sys/stat.h>
#include <stdlib.h>
#include "trainertest.h"

static char trainer[PATH_MAX], plot[PATH_MAX], jsonl[PATH_MAX + 16];
static char tmpdir[64];

static void test_hand_written(void **state) {
    (void)state;
    char log[128];
    snprintf(log, sizeof log, "%s/hand.jsonl", tmpdir);
    FILE *f = fopen(log, "w");
    assert_non_null(f);
    fputs("{\"type\":\"config\",\"config\":{\"steps\":3,\"lr\":0.5}}\n"
          "{\"type\":\"train\",\"step\":1,\"loss\":5.25,\"lr\":0.001,\"ms\":10,\"tokens_per_s\":1000,\"mfu\":0.25,"
          "\"eta_s\":2,\"elapsed_s\":0.01,\"peak_bytes\":{\"params\":1048576,\"acts\":2097152,\"total\":3145728}}\n"
          "{\"type\":\"val\",\"step\":1,\"val_loss\":5.5}\n"
          "{\"type\":\"train\",\"step\":2,\"loss\":4.5e-1,\"ms\":5,\"tokens_per_s\":2000,\"elapsed_s\":0.02,"
          "\"peak_bytes\":{\"params\":1048576,\"acts\":524288,\"total\":3145728}}\n"
          "{\"type\":\"config\",\"config\":{\"steps\":4}}\n"
          "{\"type\":\"train\",\"step\":3,\"loss\":-1,\"lr\":1e-05,\"ms\":5,\"tokens_per_s\":3000,\"mfu\":0.5,"
          "\"elapsed_s\":0.01,\"peak_bytes\":{\"params\":0,\"acts\":0,\"total\":0}}\n",
          f);
    assert_int_equal(fclose(f), 0);
    char *args = NULL, *out = NULL;
    assert_true(asprintf(&args, "--data '%s'", log) > 0);
    assert_int_equal(prog_run(plot, args, tmpdir, &out, NULL), 0);
    const char *want = "# train\n"
                       "step\tloss\tlr\ttokens_per_s\tmfu\tparams_mib\tacts_mib\ttotal_mib\n"
                       "1\t5.25\t0.001\t1000\t0.25\t1\t2\t3\n"
                       "2\t0.45\tNaN\t2000\tNaN\t1\t0.5\t3\n"
                       "3\t-1\t1e-05\t3000\t0.5\t0\t0\t0\n"
                       "\n\n# val\n"
                       "step\tval_loss\n"
                       "1\t5.5\n";
    if (strcmp(out, want) != 0) fail_msg("tools/plot --data gave:\n%s\nexpected:\n%s", out, want);
    free(out), free(args);
    assert_int_equal(prog_run(plot, "", tmpdir, NULL, NULL), 2);
    assert_int_equal(prog_run(plot, "--data", tmpdir, NULL, NULL), 2);
    assert_int_equal(prog_run(plot, "--data /nonexistent/x.jsonl", tmpdir, NULL, NULL), 1);
    assert_int_equal(prog_run(plot, "a.jsonl b.gif", tmpdir, NULL, NULL), 1); /* a.jsonl unreadable first */
}

/* A resumed run's log holds steps 2 and 3 twice (the killed run's and the resumed run's): the last record of a step
 * wins and rows come in step order, so the plot draws no line back in time; validation likewise. */
static void test_resumed_log(void **state) {
    (void)state;
    char log[128];
    snprintf(log, sizeof log, "%s/resumed.jsonl", tmpdir);
    FILE *f = fopen(log, "w");
    assert_non_null(f);
    fputs("{\"type\":\"config\",\"config\":{\"model\":\"llama\",\"layers\":4,\"dim\":128,\"world\":4,"
          "\"parallel\":\"fsdp\",\"precision\":\"fp32\"}}\n"
          "{\"type\":\"train\",\"step\":1,\"loss\":5,\"tokens_per_s\":10}\n"
          "{\"type\":\"train\",\"step\":2,\"loss\":4,\"tokens_per_s\":10}\n"
          "{\"type\":\"val\",\"step\":2,\"val_loss\":4.5}\n"
          "{\"type\":\"train\",\"step\":3,\"loss\":3,\"tokens_per_s\":10}\n"
          "{\"type\":\"config\",\"config\":{\"model\":\"llama\"}}\n"
          "{\"type\":\"train\",\"step\":2,\"loss\":4.25,\"tokens_per_s\":20}\n"
          "{\"type\":\"val\",\"step\":2,\"val_loss\":4.75}\n"
          "{\"type\":\"train\",\"step\":3,\"loss\":3.25,\"tokens_per_s\":20}\n"
          "{\"type\":\"train\",\"step\":4,\"loss\":2,\"tokens_per_s\":20}\n",
          f);
    assert_int_equal(fclose(f), 0);
    char *args = NULL, *out = NULL;
    assert_true(asprintf(&args, "--data '%s'", log) > 0);
    assert_int_equal(prog_run(plot, args, tmpdir, &out, NULL), 0);
    const char *want = "# train\n"
                       "step\tloss\tlr\ttokens_per_s\tmfu\n"
                       "1\t5\tNaN\t10\tNaN\n"
                       "2\t4.25\tNaN\t20\tNaN\n"
                       "3\t3.25\tNaN\t20\tNaN\n"
                       "4\t2\tNaN\t20\tNaN\n"
                       "\n\n# val\n"
                       "step\tval_loss\n"
                       "2\t4.75\n";
    if (strcmp(out, want) != 0) fail_msg("tools/plot --data gave:\n%s\nexpected:\n%s", out, want);
    free(out), free(args);
}

/* What a line-by-line text match gets wrong, read as JSON: spaces around colons and commas, keys in another order,
 * a key written with an escape ("\u006coss" is "loss"), an object nested inside a record that holds "step" and
 * "type" of its own, a nested value among the memory tags (not a tag), the tags of a later record in another
 * order (found by name), numbers as 1E+2, 2.50E-3 and null, a second config record whose nested object looks like
 * a train record, a train record whose step is a string and a val record without one (skipped, counted on stderr),
 * and a last line cut short (a killed run: skipped, said on stderr). The run's title (fsc-jsonl's
 * TITLE_FILE) keeps the model's name read through its escapes, without the quote. */
static void test_json_forms(void **state) {
    (void)state;
    char log[128], title[128];
    snprintf(log, sizeof log, "%s/forms.jsonl", tmpdir);
    snprintf(title, sizeof title, "%s/title.txt", tmpdir);
    FILE *f = fopen(log, "w");
    assert_non_null(f);
    fputs("{ \"type\" : \"config\", \"config\" : { \"model\" : \"ll\\u0061ma\\\"7\", \"layers\" : 2, \"dim\" : 64,"
          " \"world\" : 1, \"parallel\" : \"ddp\", \"precision\" : \"bf16\" } }\n"
          "{\"step\": 1, \"loss\": 1E+2, \"type\": \"train\", \"extra\": {\"step\": 99, \"type\": \"val\"},"
          " \"lr\": 2.50E-3, \"tokens_per_s\": 1.5e3,"
          " \"peak_bytes\": {\"params\": 1048576, \"detail\": {\"total\": 5}, \"total\": 3.145728e6}}\n"
          "{\"val_loss\":-0.5,\"step\":1,\"type\":\"val\"}\n"
          "\n"
          "{\"type\":\"train\",\"step\":2,\"\\u006coss\":0.75,\"mfu\":null,\"tokens_per_s\":2000,"
          "\"peak_bytes\":{\"total\":1048576,\"params\":0}}\n"
          "{\"type\":\"val\",\"step\":2,\"val_loss\":0.5}\n"
          "{\"type\":\"config\",\"config\":{\"model\":\"other\",\"note\":{\"type\":\"train\",\"step\":9,\"loss\":1}}}\n"
          "{\"type\":\"train\",\"step\":\"4\",\"loss\":1}\n"
          "{\"type\":\"val\",\"val_loss\":1}\n"
          "{\"type\":\"train\",\"step\":3,\"loss\":0.",
          f);
    assert_int_equal(fclose(f), 0);
    char *args = NULL, *out = NULL, *err = NULL;
    assert_true(asprintf(&args, "--data '%s'", log) > 0);
    assert_int_equal(prog_run(plot, args, tmpdir, &out, &err), 0);
    const char *want = "# train\n"
                       "step\tloss\tlr\ttokens_per_s\tmfu\tparams_mib\ttotal_mib\n"
                       "1\t100\t0.0025\t1500\tNaN\t1\t3\n"
                       "2\t0.75\tNaN\t2000\tNaN\t0\t1\n"
                       "\n\n# val\n"
                       "step\tval_loss\n"
                       "1\t-0.5\n"
                       "2\t0.5\n";
    if (strcmp(out, want) != 0) fail_msg("tools/plot --data gave:\n%s\nexpected:\n%s", out, want);
    if (!strstr(err, "skipped 1 line that is not a JSON object")) fail_msg("stderr: %s", err);
    if (!strstr(err, "skipped 2 train or val records without a finite number as its step")) fail_msg("stderr: %s", err);
    free(out), free(err), free(args);
    assert_true(asprintf(&args, "plot-data '%s' '%s'", log, title) > 0);
    assert_int_equal(prog_run(jsonl, args, tmpdir, NULL, NULL), 0);
    char *t = prog_slurp(title);
    assert_string_equal(t, "llama7, 2 layers x 64, 1 rank, ddp, bf16\n");
    free(t), free(args);
    /* fsc-jsonl's own usage and a missing file */
    assert_int_equal(prog_run(jsonl, "", tmpdir, NULL, NULL), 2);
    assert_int_equal(prog_run(jsonl, "plot-data", tmpdir, NULL, NULL), 2);
    assert_int_equal(prog_run(jsonl, "plot-data /nonexistent/x.jsonl", tmpdir, NULL, NULL), 1);
}

static void test_trainer_log(void **state) {
    (void)state;
    char *args = NULL, *out = NULL;
    assert_true(asprintf(&args, "--layers 1 --dim 16 --heads 2 --seq 8 --batch 4 --steps 3 --log '%s/t.jsonl' --json",
                         tmpdir) > 0);
    int rc = prog_run(trainer, args, tmpdir, &out, NULL);
    if (rc != 0) fail_msg("trainer: exit %d\n%s", rc, out);
    cJSON *j = prog_last_json(out);
    free(out), free(args);
    assert_true(asprintf(&args, "--data '%s/t.jsonl'", tmpdir) > 0);
    assert_int_equal(prog_run(plot, args, tmpdir, &out, NULL), 0);
    char *line = strtok(out, "\n");
    assert_string_equal(line, "# train");
    line = strtok(NULL, "\n");
    assert_non_null(strstr(line, "step\tloss\tlr\ttokens_per_s\tmfu\tparams_mib\tgrads_mib\t"));
    for (int s = 0; s < 3; s++) {
        line = strtok(NULL, "\n");
        assert_non_null(line);
        int step = 0;
        char loss[64];
        assert_int_equal(sscanf(line, "%d\t%63[^\t]", &step, loss), 2);
        assert_int_equal(step, s + 1);
        double want = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "losses"), s)->valuedouble;
        if (strtod(loss, NULL) != want)
            fail_msg("step %d: the table's loss %s is not --json's %.17g", s + 1, loss, want);
    }
    assert_string_equal(strtok(NULL, "\n"), "# val");
    cJSON_Delete(j);
    free(out), free(args);
}

/* With gnuplot on the PATH: a log and a picture whose names hold a single quote plot (the names were pasted into
 * gnuplot's quoted strings as they are, which ended them: an error, or gnuplot running the rest of the name). */
static void test_quoted_names(void **state) {
    (void)state;
    if (system("command -v gnuplot >/dev/null 2>&1") != 0) {
        fprintf(stderr, "test_quoted_names: skipped: no gnuplot\n");
        return;
    }
    char log[128], png[128];
    snprintf(log, sizeof log, "%s/it's.jsonl", tmpdir);
    snprintf(png, sizeof png, "%s/it's.png", tmpdir);
    FILE *f = fopen(log, "w");
    assert_non_null(f);
    fputs("{\"type\":\"config\",\"config\":{\"model\":\"gpt2\",\"layers\":2,\"dim\":32}}\n"
          "{\"type\":\"train\",\"step\":1,\"loss\":3,\"lr\":0.001,\"tokens_per_s\":100,\"peak_bytes\":{\"params\":1}}\n"
          "{\"type\":\"train\",\"step\":2,\"loss\":2,\"lr\":0.002,\"tokens_per_s\":200,"
          "\"peak_bytes\":{\"params\":2}}\n",
          f);
    assert_int_equal(fclose(f), 0);
    char *args = NULL, *out = NULL;
    assert_true(asprintf(&args, "\"%s\" \"%s\"", log, png) > 0);
    int rc = prog_run(plot, args, tmpdir, &out, NULL);
    if (rc != 0) fail_msg("tools/plot %s: exit %d\n%s", args, rc, out ? out : "");
    struct stat st;
    assert_int_equal(stat(png, &st), 0);
    assert_true(st.st_size > 1000);
    free(args), free(out);
}

/* A log or picture name with a line break (a name may hold any byte but / and NUL): a gnuplot command ends at a
 * line break, so the rest of a name pasted into a quoted string ran as gnuplot commands (system("...") among
 * them). A stub gnuplot on the PATH keeps the script it is given: no line of it comes from the name; a picture name
 * with a line break is refused (exit 2), the script never run. Needs no gnuplot. */
static void test_line_break_names(void **state) {
    (void)state;
    char *bin = prog_fmt("%s/stubbin", tmpdir), *stub = prog_fmt("%s/gnuplot", bin);
    char *kept = prog_fmt("%s/kept.gp", tmpdir), *log = prog_fmt("%s/b\nsystem(\"date\")\nb.jsonl", tmpdir);
    assert_int_equal(mkdir(bin, 0755), 0);
    FILE *f = fopen(stub, "w");
    assert_non_null(f);
    fprintf(f, "#!/bin/sh\ncp \"$1\" '%s'\n", kept);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(chmod(stub, 0755), 0);
    f = fopen(log, "w");
    assert_non_null(f);
    fputs("{\"type\":\"train\",\"step\":1,\"loss\":3,\"lr\":0.001,\"tokens_per_s\":100,\"peak_bytes\":{\"params\":1}}\n", f);
    assert_int_equal(fclose(f), 0);
    char *path = prog_fmt("%s:%s", bin, getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin");
    char *was = strdup(getenv("PATH") ? getenv("PATH") : "");
    setenv("PATH", path, 1);
    char *args = prog_fmt("'%s' '%s/p.png'", log, tmpdir), *out = NULL; /* (the names hold no single quote) */
    int rc = prog_run(plot, args, tmpdir, &out, NULL);
    if (rc != 0) fail_msg("tools/plot: exit %d\n%s", rc, out ? out : "");
    free(out), free(args);
    char *gp = prog_slurp(kept);
    for (char *line = strtok(gp, "\n"); line; line = strtok(NULL, "\n"))
        if (strncmp(line, "system", 6) == 0 || strncmp(line, "b.jsonl", 7) == 0) fail_msg("a line from the name: %s", line);
    free(gp);
    unlink(kept);
    args = prog_fmt("'%s' '%s/q\nsystem(\"date\")\n#.png'", log, tmpdir);
    assert_int_equal(prog_run(plot, args, tmpdir, &out, NULL), 2);
    assert_non_null(strstr(out, "line break"));
    assert_int_equal(access(kept, F_OK), -1); /* gnuplot not run */
    setenv("PATH", was, 1);
    free(out), free(args), free(path), free(was), free(log), free(kept), free(stub), free(bin);
}

int main(int argc, char **argv) {
    (void)argc;
    if (prog_setup(argv[0], "test_plot", "train_gpt", trainer, sizeof trainer, tmpdir, sizeof tmpdir)) return 1;
    snprintf(jsonl, sizeof jsonl, "%s", trainer); /* this build's fsc-jsonl, beside the trainer */
    snprintf(strrchr(jsonl, '/') + 1, sizeof jsonl - (size_t)(strrchr(jsonl, '/') + 1 - jsonl), "fsc-jsonl");
    if (access(jsonl, X_OK) != 0) {
        fprintf(stderr, "test_plot: %s not found: build it first (make ... fsc-jsonl)\n", jsonl);
        return 1;
    }
    setenv("FSC_JSONL", jsonl, 1); /* tools/plot uses it */
    const char *src = __FILE__, *slash = strrchr(src, '/'); /* tools/ beside tests/ */
    snprintf(plot, sizeof plot, "%.*s../tools/plot", slash ? (int)(slash - src + 1) : 0, src);
    if (access(plot, X_OK) != 0) {
        fprintf(stderr, "test_plot: %s not found (run from the repository root)\n", plot);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_written),
        cmocka_unit_test(test_resumed_log),
        cmocka_unit_test(test_json_forms),
        cmocka_unit_test(test_trainer_log),
        cmocka_unit_test(test_quoted_names),
        cmocka_unit_test(test_line_break_names),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    test_rmtree(tmpdir);
    return rc;
}
