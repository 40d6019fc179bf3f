/* A program's own model family trained by the trainer: runs build/<x>/train_family (examples/train_family.c: it
 * registers the family "mini" with fsc/family.h and calls the trainer's fsc_train_main), with --model mini.
 *
 * Oracles: the banner names the family and its parameter count is the one of its layers (computed here from the
 * layer shapes); 8 steps lower the loss; FSDP on 2 ranks and a 2-stage pipeline with ZeRO-2 equal DDP bit for bit
 * (--check-ddp, the trainer's own comparison); tensor parallelism (the family's build) on 2 ranks reports the
 * losses of one rank within 1e-4 relative; a run resumed from its step-2 checkpoint reports the uninterrupted
 * run's later losses bit for bit; --plan's predicted per-rank peaks (the planner run on the family's configuration
 * text) equal the run's measured ones byte for byte, on one rank, with FSDP on 2 and with tp 2; fsc-train, which
 * has not registered "mini", refuses --model mini naming it, and the family's own refusal of a configuration
 * reaches the user (exit 2). */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <unistd.h>
#include "trainertest.h"

static char prog[PATH_MAX];
static char tmpdir[64];

#define TINY "--model mini --layers 2 --dim 16 --heads 4 --seq 8 --batch 4"

static cJSON *run_json(const char *extra) {
    char *args = prog_fmt(TINY " --data '%s/data.txt' %s", tmpdir, extra);
    cJSON *j = prog_json(prog, tmpdir, "", args);
    free(args);
    return j;
}

static void assert_bit_identical(cJSON *j, const char *what) {
    cJSON *k = cJSON_GetObjectItem(j, "check_ddp");
    if (!k || !cJSON_IsTrue(cJSON_GetObjectItem(k, "bit_identical"))) fail_msg("%s: not bit-identical with DDP", what);
}

static void test_trains(void **st) {
    (void)st;
    char *out = NULL, *args = prog_fmt(TINY " --data '%s/data.txt' --steps 8 --json", tmpdir);
    assert_int_equal(prog_run(prog, args, tmpdir, &out, NULL), 0);
    if (!strstr(out, "model: mini, 2 layers, width 16, 4 heads")) fail_msg("no banner naming mini:\n%s", out);
    cJSON *j = prog_last_json(out);
    /* embeddings V C + T C; a GPT-2 block: 2 norms (2 C each), c_attn C 3C + 3C, c_proj C C + C, MLP C 4C + 4C and
     * 4C C + C; the head: its norm 2 C and V C */
    const size_t C = 16, T = 8, V = 256;
    const size_t block = 4 * C + (3 * C * C + 3 * C) + (C * C + C) + (4 * C * C + 4 * C) + (4 * C * C + C);
    assert_int_equal((size_t)cJSON_GetObjectItem(j, "params")->valuedouble, V * C + T * C + 2 * block + 2 * C + V * C);
    double loss[8];
    prog_doubles(j, "losses", loss, 8, NAN);
    for (int i = 0; i < 8; i++) assert_true(isfinite(loss[i]));
    if (!(loss[7] < loss[0])) fail_msg("the loss did not go down: %g then %g", loss[0], loss[7]);
    cJSON_Delete(j);
    free(out), free(args);
}

static void test_strategies_equal_ddp(void **st) {
    (void)st;
    cJSON *j = run_json("--steps 3 --world 2 --parallel fsdp --check-ddp");
    assert_bit_identical(j, "fsdp on 2 ranks");
    cJSON_Delete(j);
    j = run_json("--steps 3 --world 4 --pp 2 --parallel zero2 --accum 2 --check-ddp");
    assert_bit_identical(j, "a 2-stage pipeline with zero2 in each stage");
    cJSON_Delete(j);
}

static void test_tensor_parallel(void **st) {
    (void)st;
    cJSON *a = run_json("--steps 3"), *b = run_json("--steps 3 --world 2 --tp 2");
    double la[3], lb[3];
    prog_doubles(a, "losses", la, 3, NAN);
    prog_doubles(b, "losses", lb, 3, NAN);
    for (int i = 0; i < 3; i++)
        if (!(fabs(la[i] - lb[i]) <= 1e-4 * fabs(la[i]))) fail_msg("step %d: tp 1 %.9g, tp 2 %.9g", i, la[i], lb[i]);
    cJSON_Delete(a), cJSON_Delete(b);
}

static void test_resume(void **st) {
    (void)st;
    char *ck = prog_fmt("--steps 4 --save-every 2 --ckpt-dir '%s/ck'", tmpdir);
    char *re = prog_fmt("--steps 4 --resume '%s/ck/step-00000002'", tmpdir);
    cJSON *a = run_json(ck), *b = run_json(re);
    double la[4], lb[4];
    prog_doubles(a, "losses", la, 4, NAN);
    prog_doubles(b, "losses", lb, 4, NAN);
    for (int i = 2; i < 4; i++)
        if (memcmp(&la[i], &lb[i], sizeof la[i])) fail_msg("step %d: %.17g, resumed %.17g", i, la[i], lb[i]);
    cJSON_Delete(a), cJSON_Delete(b);
    free(ck), free(re);
}

/* --plan plans the family's configuration text: "predicted" per_rank equal the run's measured ledger peaks, tag by
 * tag on every rank, with a step time. */
static void check_plan(const char *extra) {
    char *args = prog_fmt("--steps 1 --peak-tflops 1 --plan %s", extra);
    cJSON *j = run_json(args);
    const cJSON *p = cJSON_GetObjectItem(j, "predicted");
    if (!p) fail_msg("%s: no \"predicted\" object", args);
    const cJSON *x = cJSON_GetObjectItem(p, "per_rank"), *y = cJSON_GetObjectItem(j, "per_rank");
    assert_int_equal(cJSON_GetArraySize(x), cJSON_GetArraySize(y));
    assert_true(cJSON_GetArraySize(x) >= 1);
    for (int r = 0; r < cJSON_GetArraySize(x); r++)
        for (int t = 0; t <= FSC_TAG_COUNT; t++) {
            const char *tag = t < FSC_TAG_COUNT ? fsc_tag_name((fsc_tag)t) : "total";
            const cJSON *vx = cJSON_GetObjectItem(cJSON_GetArrayItem(x, r), tag);
            const cJSON *vy = cJSON_GetObjectItem(cJSON_GetArrayItem(y, r), tag);
            if (!vx || !vy || cJSON_GetNumberValue(vx) != cJSON_GetNumberValue(vy))
                fail_msg("%s: rank %d %s: predicted %.0f, measured %.0f", args, r, tag, cJSON_GetNumberValue(vx),
                         cJSON_GetNumberValue(vy));
        }
    assert_true(cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetArrayItem(y, 0), "params")) > 0);
    assert_true(cJSON_GetNumberValue(cJSON_GetObjectItem(p, "ms_per_step")) > 0);
    cJSON_Delete(j);
    free(args);
}

static void test_plan(void **st) {
    (void)st;
    check_plan("");
    check_plan("--world 2 --parallel fsdp");
    check_plan("--world 2 --tp 2"); /* the family's build on the tensor group */
}

static void test_refused(void **st) {
    (void)st;
    char fsc_train[PATH_MAX + 16];
    snprintf(fsc_train, sizeof fsc_train, "%.*s/fsc-train", (int)(strrchr(prog, '/') - prog), prog);
    char *args = prog_fmt(TINY " --data '%s/data.txt' --steps 1", tmpdir);
    prog_refused(fsc_train, args, tmpdir, 2, "--model mini: no such model family");
    free(args);
    args = prog_fmt(TINY " --data '%s/data.txt' --steps 1 --layers 65", tmpdir);
    prog_refused(prog, args, tmpdir, 2, "mini: dim 16 does not split into 4 heads, or more than 64 layers (65)");
    free(args);
}

int main(int argc, char **argv) {
    (void)argc;
    if (prog_setup(argv[0], "test_trainer_family", "train_family", prog, sizeof prog, tmpdir, sizeof tmpdir)) return 1;
    if (prog_write_letters(tmpdir, "data.txt", 400)) return 1; /* bytes below --vocab 256 */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_trains),
        cmocka_unit_test(test_strategies_equal_ddp),
        cmocka_unit_test(test_tensor_parallel),
        cmocka_unit_test(test_resume),
        cmocka_unit_test(test_plan),
        cmocka_unit_test(test_refused),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    test_rmtree(tmpdir);
    return rc;
}
