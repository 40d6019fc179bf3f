/* Tests of the trainer's learning-rate schedules, validation and weight-decay switch (examples/train_gpt.c over
 * fsc/schedule.h, fsc/eval.h and the engine's decay rule).
 * Oracles:
 * - the rate of every step in --json is fsc_lr_at of the options' schedule (and a few values by hand);
 * - a run killed after its checkpoint of step 3 and resumed from it ends with the uninterrupted run's losses, rates
 *   and weights, bit for bit (the schedule is a function of the step; the engine's rate is restored);
 * - the validation losses are the same bits under --parallel ddp, fsdp, zero1, zero2, a pipeline and tensor
 *   parallelism with FSDP (each against the run of equal data-parallel layout), and validating after every step
 *   leaves the training losses bit-identical to a run without --val-data;
 * - the progress line of a validated step shows the loss, the others do not; --json holds val_loss where computed;
 * - --decay-all changes the run when --weight-decay is set (the default rule spares embeddings, biases and norms);
 * - inconsistent options are refused with exit 2. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include "trainertest.h"

static char trainer[PATH_MAX];
static char tmpdir[64];

#define TINY "--layers 2 --dim 16 --heads 2 --seq 8 --batch 4 --steps 6 --lr 0.01"

/* The arrays k1 and k2 (k2 may be NULL) of one run's --json (n entries each; null as NAN). */
static void arrays(const char *args, const char *k1, double *v1, const char *k2, double *v2, int n) {
    char *full = prog_fmt(TINY " %s", args);
    cJSON *j = prog_json(trainer, tmpdir, "", full);
    for (int w = 0; w < 2; w++) {
        const char *key = w ? k2 : k1;
        double *v = w ? v2 : v1;
        if (!key) continue;
        prog_doubles(j, key, v, n, NAN);
    }
    cJSON_Delete(j);
    free(full);
}

static void array(const char *args, const char *key, double *v, int n) { arrays(args, key, v, NULL, NULL, n); }

static void assert_same(const double *a, const double *b, int n, const char *what) {
    for (int i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(double)) != 0 && !(isnan(a[i]) && isnan(b[i])))
            fail_msg("%s: entry %d differs: %.17g vs %.17g", what, i, a[i], b[i]);
}

static void test_rates(void **state) {
    (void)state;
    double lr[6];
    array("--lr-schedule cosine --warmup 2 --min-lr 0.001", "lr", lr, 6);
    const fsc_lr_schedule s = { .kind = FSC_LR_COSINE, .lr = 0.01f, .min_lr = 0.001f, .warmup = 2, .total = 6 };
    for (int i = 0; i < 6; i++)
        if ((float)lr[i] != fsc_lr_at(&s, i)) fail_msg("step %d: rate %.9g, schedule %.9g", i, lr[i], (double)fsc_lr_at(&s, i));
    assert_true((float)lr[0] == 0.005f && (float)lr[1] == 0.01f && (float)lr[2] == 0.01f); /* ramp, then the peak */
    assert_true(fabs(lr[4] - (0.001 + 0.009 * 0.5)) < 1e-9); /* halfway through the decay */
    array("--lr-schedule linear --min-lr 0.002", "lr", lr, 6);
    assert_true(fabs(lr[3] - (0.002 + 0.008 * 0.5)) < 1e-9);
    array("", "lr", lr, 6);
    for (int i = 0; i < 6; i++) assert_true((float)lr[i] == 0.01f); /* constant: the given rate itself */
}

/* Whether two files hold the same bytes. */
static int same_file(const char *a, const char *b) {
    FILE *f = fopen(a, "rb"), *g = fopen(b, "rb");
    int c1 = 0, c2 = 0;
    long n = 0;
    while (f && g && c1 == c2 && c1 != EOF) c1 = fgetc(f), c2 = fgetc(g), n++;
    int same = f && g && c1 == c2 && n > 1;
    if (f) fclose(f);
    if (g) fclose(g);
    return same;
}

static void test_resume_exact(void **state) {
    (void)state;
    const char *sched = "--lr-schedule cosine --warmup 2 --min-lr 0.001 --weight-decay 0.1 --world 2 --parallel fsdp";
    double whole[6], resumed[6], lw[6], lr[6];
    char *a = prog_fmt("%s --save-every 3 --ckpt-dir %s/a --save %s/a.st", sched, tmpdir, tmpdir);
    arrays(a, "losses", whole, "lr", lw, 6);
    char *cmd = prog_fmt("rm -rf '%s/a/step-00000006'", tmpdir); /* killed after the checkpoint of step 3 */
    assert_int_equal(system(cmd), 0);
    char *b = prog_fmt("%s --resume %s/a --save %s/b.st", sched, tmpdir, tmpdir);
    arrays(b, "losses", resumed, "lr", lr, 6);
    assert_same(whole + 3, resumed + 3, 3, "losses after the resume");
    assert_same(lw + 3, lr + 3, 3, "rates after the resume");
    assert_true(isnan(resumed[0])); /* not run by the resumed run */
    char *pa = prog_fmt("%s/a.st", tmpdir), *pb = prog_fmt("%s/b.st", tmpdir);
    if (!same_file(pa, pb)) fail_msg("the resumed run's weights differ from the uninterrupted run's");
    free(a), free(b), free(cmd), free(pa), free(pb);
}

/* Oracle: the validation losses of the runs `val ref_args` and `val args` are the same bits (6 steps). */
static void assert_same_val(const char *val, const char *ref_args, const char *args, const char *what) {
    double ref[6], x[6];
    char *a = prog_fmt("%s %s", val, ref_args), *b = prog_fmt("%s %s", val, args);
    array(a, "val_loss", ref, 6);
    array(b, "val_loss", x, 6);
    assert_same(ref, x, 6, what);
    free(a), free(b);
}

static void test_validation_every_layout(void **state) {
    (void)state;
    char *val = prog_fmt("--val-data %s/val.txt --val-every 2 --val-batches 3", tmpdir);
    double ref[6], x[6], l0[6], l1[6];
    char *args = prog_fmt("%s --world 2 --parallel ddp", val);
    array(args, "val_loss", ref, 6);
    for (int i = 0; i < 6; i++)
        if (isnan(ref[i]) != (i % 2 == 0)) fail_msg("step %d: validation loss %g (every 2nd step)", i, ref[i]);
    const char *same[] = { "--world 2 --parallel fsdp", "--world 2 --parallel zero1", "--world 2 --parallel zero2",
                           "--world 2 --parallel fsdp --shard grad_op" };
    for (size_t k = 0; k < sizeof same / sizeof same[0]; k++) {
        free(args);
        args = prog_fmt("%s %s", val, same[k]);
        array(args, "val_loss", x, 6);
        assert_same(ref, x, 6, same[k]);
    }
    /* a pipeline of 2 stages x 2 data ranks against DDP on 2 ranks, both with 2 micro-batches */
    assert_same_val(val, "--world 2 --parallel ddp --accum 2", "--pp 2 --dp 2 --parallel ddp --chunks 2", "--pp 2 --dp 2");
    /* tensor parallelism: FSDP over the data group against DDP over it */
    assert_same_val(val, "--tp 2 --dp 2 --parallel ddp", "--tp 2 --dp 2 --parallel fsdp", "--tp 2 with fsdp");
    /* validating after every step does not change training */
    free(args);
    args = prog_fmt("--val-data %s/val.txt --val-every 1 --world 2 --parallel fsdp", tmpdir);
    array(args, "losses", l0, 6);
    array("--world 2 --parallel fsdp", "losses", l1, 6);
    assert_same(l0, l1, 6, "training losses with and without validation");
    free(args);
    free(val);
}

/* The Llama through the trainer (a pipeline and FSDP against DDP), mixture-of-experts blocks with expert
 * parallelism against every expert on every rank, and the validation tokens as uint16 files (training tokens
 * too: --data-format is theirs) against the same tokens as bytes. */
static void test_models_and_formats(void **state) {
    (void)state;
    char *val = prog_fmt("--val-data %s/val.txt --val-every 3 --val-batches 2", tmpdir), *args = NULL;
    double ref[6], x[6];
    const char *llama[] = { "--model llama --world 2 --parallel ddp --accum 2", "--model llama --world 2 --parallel fsdp --accum 2",
                            "--model llama --pp 2 --dp 2 --parallel ddp --chunks 2" };
    for (int k = 0; k < 3; k++) {
        free(args);
        args = prog_fmt("%s %s", val, llama[k]);
        array(args, "val_loss", k ? x : ref, 6);
        if (k) assert_same(ref, x, 6, llama[k]);
    }
    assert_same_val(val, "--moe-experts 4 --world 2 --parallel ddp", "--moe-experts 4 --world 2 --parallel ddp --ep 2",
                    "--ep 2");
    /* the same tokens as uint16 */
    const char *names[2] = { "examples/data/coriolanus.txt", "val.txt" };
    for (int f = 0; f < 2; f++) {
        char *in = f ? prog_fmt("%s/%s", tmpdir, names[f]) : prog_fmt("%s", names[f]), *out = prog_fmt("%s/%d.u16", tmpdir, f);
        FILE *a = fopen(in, "rb"), *b = fopen(out, "wb");
        assert_non_null(a);
        assert_non_null(b);
        for (int c; (c = fgetc(a)) != EOF;) fputc(c, b), fputc(0, b);
        fclose(a), fclose(b);
        free(in), free(out);
    }
    free(args);
    args = prog_fmt("--val-data %s/val.txt --val-every 3", tmpdir);
    array(args, "val_loss", ref, 6);
    free(args);
    args = prog_fmt("--data %s/0.u16 --val-data %s/1.u16 --data-format u16 --val-every 3", tmpdir, tmpdir);
    array(args, "val_loss", x, 6);
    assert_same(ref, x, 6, "uint16 files against bytes");
    if (isnan(x[2]) || isnan(x[5]) || !isnan(x[0])) fail_msg("validation after steps 3 and 6 only");
    free(args);
    free(val);
}

static void test_progress_line(void **state) {
    (void)state;
    char *args = prog_fmt(TINY " --val-data %s/val.txt --val-every 4", tmpdir), *out = NULL;
    assert_int_equal(prog_run(trainer, args, tmpdir, &out, NULL), 0);
    const char *s4 = strstr(out, "step    4/6"), *s5 = strstr(out, "step    5/6"), *s6 = strstr(out, "step    6/6");
    assert_non_null(s4);
    assert_non_null(s5);
    assert_non_null(s6);
    const char *v = strstr(s4, "val ");
    if (!v || v > s5) fail_msg("step 4 shows no validation loss:\n%s", out);
    v = strstr(s5, "val ");
    if (v && v < s6) fail_msg("step 5 shows a validation loss:\n%s", out);
    if (!strstr(s6, "val ")) fail_msg("the last step shows no validation loss:\n%s", out);
    const char *s1 = strstr(out, "step    1/6");
    v = s1 ? strstr(s1, "val ") : NULL;
    if (!s1 || (v && v < s4 && v < strstr(s1, "step    2/6"))) fail_msg("step 1 shows a validation loss:\n%s", out);
    free(out);
    free(args);
}

static void test_decay_switch(void **state) {
    (void)state;
    double a[6], b[6], c[6], d[6];
    array("--weight-decay 0.5", "losses", a, 6);
    array("--weight-decay 0.5 --decay-all", "losses", b, 6);
    array("", "losses", c, 6);
    array("--decay-all", "losses", d, 6);
    if (!memcmp(a + 5, b + 5, sizeof(double))) fail_msg("--decay-all makes no difference with --weight-decay 0.5");
    assert_same(c, d, 6, "--decay-all without weight decay");
}

static void test_refused(void **state) {
    (void)state;
    const struct {
        const char *args, *needle;
    } bad[] = {
        { "--min-lr 0.001", "--min-lr applies to --lr-schedule cosine and linear" },
        { "--lr-schedule cosine --warmup 6", "more --steps" },
        { "--lr-schedule linear --min-lr 0.5", "above --lr" },
        { "--lr-schedule step", "lr-schedule" },
        { "--val-every 2", "needs --val-data" },
        { "--val-batches 2", "needs --val-data" },
        { "--val-data /nonexistent/val.txt", "--val-data /nonexistent/val.txt" },
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        char *args = prog_fmt(TINY " %s", bad[k].args);
        prog_refused(trainer, args, tmpdir, 2, bad[k].needle);
        free(args);
    }
}

int main(int argc, char **argv) {
    (void)argc;
    if (prog_setup(argv[0], "test_trainer_schedule", "train_gpt", trainer, sizeof trainer, tmpdir, sizeof tmpdir))
        return 1;
    /* validation text: another part of the play than the training text's first bytes */
    char *p = prog_fmt("%s/val.txt", tmpdir);
    FILE *f = fopen(p, "wb");
    if (!f) return 1;
    for (int i = 0; i < 3000; i++) fputc("the quick brown fox jumps over the lazy dog, menenius said. "[i % 60], f);
    fclose(f);
    free(p);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rates),          cmocka_unit_test(test_resume_exact),
        cmocka_unit_test(test_validation_every_layout), cmocka_unit_test(test_models_and_formats),
        cmocka_unit_test(test_progress_line),
        cmocka_unit_test(test_decay_switch),   cmocka_unit_test(test_refused),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    test_rmtree(tmpdir);
    return rc;
}
