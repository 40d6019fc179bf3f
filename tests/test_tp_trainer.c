/* The trainer's tensor-parallel options (--tp composed with --pp, --dp and every --parallel,
 * --sequence-parallel, --order in examples/train_gpt.c), run as a program (build/<x>/train_gpt next to this
 * binary's folder).
 * Oracle: the same training on one rank. Losses within 1e-6 relative (tensor parallelism splits sums:
 * docs/tensor_parallel.md); another rank order gives the same losses bit for bit; --check-ddp of a 3D FSDP
 * run, of tp 2 x pp 2 under zbv and of the Llama's under zb-h1 reports bit-identical weights; the initial weights file byte-identical; the --json summary's traffic
 * by group present, summing to the total; the unsupported combinations refused with a message. */
#include <libgen.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "test_tp_util.h"
#include "trainertest.h"

static char trainer[PATH_MAX], tmpdir[64];
static const char *model = "--layers 2 --dim 32 --heads 4 --seq 16 --batch 4 --steps 3 --vocab 256";

/* Run the trainer with args; its stdout and stderr together (malloc), rc its exit status. */
static char *run(const char *args, int *rc) {
    char *out = NULL;
    *rc = prog_run(trainer, args, tmpdir, &out, NULL);
    return out;
}

/* The --json line of a run of the model with args. */
static cJSON *json_of(const char *args) { return prog_json(trainer, tmpdir, model, args); }

static double loss_at(const cJSON *j, int s) {
    return cJSON_GetArrayItem(cJSON_GetObjectItem(j, "losses"), s)->valuedouble;
}

static void test_tp_trainer_runs(void **state) {
    (void)state;
    cJSON *ref = json_of("");
    const char *cases[] = { "--tp 2 --dp 2 --parallel ddp", "--tp 4 --sequence-parallel",
                            "--tp 2 --world 4 --parallel ddp --sequence-parallel",
                            "--tp 2 --pp 2 --dp 2 --parallel zero1 --chunks 2 --schedule 1f1b --sequence-parallel",
                            "--tp 2 --pp 2 --parallel pipe --accum 2", "--tp 2 --dp 2 --parallel ddp --order dp,pp,tp" };
    double first[3] = { 0, 0, 0 };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        cJSON *j = json_of(cases[k]);
        for (int s = 0; s < 3; s++) {
            double e = fabs(loss_at(j, s) - loss_at(ref, s)) / loss_at(ref, s);
            if (!(e <= 1e-6)) fail_msg("%s: loss of step %d differs by %.3g", cases[k], s, e);
        }
        if (k == 0)
            for (int s = 0; s < 3; s++) first[s] = loss_at(j, s);
        if (strstr(cases[k], "--order")) /* the same computation placed on other ranks */
            for (int s = 0; s < 3; s++) assert_memory_equal(&first[s], &(double){ loss_at(j, s) }, sizeof(double));
        const cJSON *g = cJSON_GetObjectItem(j, "comm_bytes_per_step_by_group");
        assert_non_null(g);
        double tensor = cJSON_GetObjectItem(g, "tensor")->valuedouble, data = cJSON_GetObjectItem(g, "data")->valuedouble;
        double total = cJSON_GetObjectItem(j, "comm_bytes_per_step")->valuedouble, sum = 0;
        for (const cJSON *x = g->child; x; x = x->next) sum += x->valuedouble;
        assert_true(tensor > 0);
        assert_true(strstr(cases[k], "--dp 2") || strstr(cases[k], "--world 4") ? data > 0 : data == 0);
        assert_true((cJSON_GetObjectItem(g, "pipeline") != NULL) == (strstr(cases[k], "--pp 2") != NULL));
        assert_null(cJSON_GetObjectItem(g, "expert"));
        assert_true(fabs(sum - total) <= 1e-6 * total);
        printf("  %s: bytes per step by group: tensor %.0f, data %.0f", cases[k], tensor, data);
        if (cJSON_GetObjectItem(g, "pipeline"))
            printf(", pipeline %.0f", cJSON_GetObjectItem(g, "pipeline")->valuedouble);
        printf("\n");
        cJSON_Delete(j);
    }
    cJSON_Delete(ref);
    /* --check-ddp: the oracle keeps the tensor groups and drops the pipeline */
    int rc;
    char args[512];
    snprintf(args, sizeof args, "%s --tp 2 --pp 2 --dp 2 --parallel fsdp --chunks 2 --schedule 1f1b --check-ddp", model);
    char *out = run(args, &rc);
    if (rc != 0 || !strstr(out, "bit-identical: yes")) fail_msg("train_gpt %s: exit %d\n%s", args, rc, out);
    assert_non_null(strstr(out, "layout: world 8 = pp 2 x dp 2 x tp 2 (tensor fastest)"));
    free(out);
    /* zbv (two chunks per rank in a V, W actions: the tensor-parallel blocks' split backward) */
    snprintf(args, sizeof args, "--layers 4 --dim 32 --heads 4 --seq 16 --batch 4 --steps 3 --vocab 256 --world 4 "
             "--tp 2 --pp 2 --schedule zbv --accum 2 --sequence-parallel --check-ddp");
    out = run(args, &rc);
    if (rc != 0 || !strstr(out, "bit-identical: yes")) fail_msg("train_gpt %s: exit %d\n%s", args, rc, out);
    free(out);
    /* the Llama under zb-h1: its untied embedding and head split too (the head's RMSNorm gradient kept for W) */
    snprintf(args, sizeof args, "--model llama --layers 2 --dim 32 --heads 4 --kv-heads 2 --seq 16 --batch 4 --steps 3 "
             "--vocab 256 --world 4 --tp 2 --pp 2 --schedule zb-h1 --accum 2 --sequence-parallel --check-ddp");
    out = run(args, &rc);
    if (rc != 0 || !strstr(out, "bit-identical: yes")) fail_msg("train_gpt %s: exit %d\n%s", args, rc, out);
    free(out);
}

static int same_file(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa && fb;
    while (same) {
        int ca = fgetc(fa), cb = fgetc(fb);
        if (ca != cb) same = 0;
        if (ca == EOF || cb == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

static void test_tp_trainer_files(void **state) {
    (void)state;
    char a[128], b[128], args[512];
    snprintf(a, sizeof a, "%s/one.safetensors", tmpdir);
    snprintf(b, sizeof b, "%s/tp.safetensors", tmpdir);
    int rc;
    snprintf(args, sizeof args, "%s --steps 0 --init-save %s", model, a);
    free(run(args, &rc));
    assert_int_equal(rc, 0);
    snprintf(args, sizeof args, "%s --steps 0 --tp 2 --dp 2 --parallel ddp --init-save %s", model, b);
    free(run(args, &rc));
    assert_int_equal(rc, 0);
    assert_true(same_file(a, b)); /* the tensor-parallel model starts from the unsharded weights */
    /* train with --tp, save, and load the result into a one-rank run: the first loss of a zero-lr run equals
     * what the tensor-parallel run would compute next, within the tolerance */
    snprintf(args, sizeof args, "%s --tp 2 --save %s", model, b);
    free(run(args, &rc));
    assert_int_equal(rc, 0);
    assert_false(same_file(a, b));
    snprintf(args, sizeof args, "%s --steps 1 --lr 0 --load %s --json", model, b);
    char *out = run(args, &rc);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "\"losses\""));
    free(out);
    unlink(a), unlink(b);
}

static void test_tp_trainer_refusals(void **state) {
    (void)state;
    struct { const char *args, *msg; } bad[] = {
        { "--tp 3", "4 heads do not split over a tensor group of 3" },
        /* the vocabulary in the options' names, as the Llama's (it was the library's field, "padded_vocab") */
        { "--tp 3 --heads 3 --dim 30", "--tp 3: --vocab 256 does not divide over the tensor group (tensor parallelism "
          "splits it; --padded-vocab 258 pads its rows to a multiple)" },
        { "--tp 2 --padded-vocab 257", "--tp 2: --padded-vocab 257 does not divide over the tensor group" },
        { "--tp 2 --padded-vocab 512", "--tp 2: --padded-vocab 512 (--vocab 256) leaves the last rank's slice of 256 "
          "rows without a real one: pad by fewer than 256 rows" },
        { "--sequence-parallel", "--sequence-parallel needs --tp 2 or more" },
        { "--tp 2 --world 4", "--parallel none has no data parallelism" },
        { "--tp 2 --world 3", "does not split into --tp 2 x --pp 1" },
        { "--tp 2 --pp 2 --dp 2 --world 4", "--world 4 is not --dp 2 x --tp 2 x --pp 2" },
        { "--tp 2 --save-every 1", "--save-every needs --ckpt-dir DIR" },
        { "--tp 2 --order tp,tp,pp", "names tp twice" },
        { "--tp 2 --dp 1 --batch 1 --seq 3 --sequence-parallel", "does not split over --tp 2" },
        /* the GPT as the Llama: a sample's stream is seq / tp rows a rank (it was refused only by the ranks) */
        { "--tp 2 --dp 1 --batch 2 --seq 7 --sequence-parallel", "--seq 7 does not divide by --tp 2" },
        /* found by fuzz/fuzz_train_args.c: the world derived from --tp x --pp was not held to --world's limit */
        { "--tp 32 --pp 64 --layers 64 --heads 32 --dim 128", "--tp 32 x --pp 64 is more than 1024 ranks" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char args[512];
        snprintf(args, sizeof args, "%s %s", model, bad[i].args);
        int rc;
        char *out = run(args, &rc);
        if (rc != 2 || !strstr(out, bad[i].msg))
            fail_msg("train_gpt %s: exit %d, output lacks \"%s\":\n%s", bad[i].args, rc, bad[i].msg, out);
        free(out);
    }
}

/* Training checkpoints with --tp: saved at dp 2 x tp 2, resumed at the same layout the last loss equals the
 * straight run's bit for bit; resumed at tp 1 and at tp 4 with FSDP the run continues. */
static void test_tp_trainer_checkpoints(void **state) {
    (void)state;
    char dir[128], args[512];
    snprintf(dir, sizeof dir, "%s/ckpt", tmpdir);
    cJSON *straight = json_of("--tp 2 --world 4 --parallel ddp");
    snprintf(args, sizeof args, "--tp 2 --world 4 --parallel ddp --steps 2 --save-every 2 --ckpt-dir %s", dir);
    cJSON_Delete(json_of(args));
    const char *layouts[] = { "--tp 2 --world 4 --parallel ddp", "--world 1", "--tp 4 --world 4 --parallel fsdp" };
    for (int k = 0; k < 3; k++) {
        snprintf(args, sizeof args, "%s --resume %s", layouts[k], dir);
        cJSON *j = json_of(args);
        const cJSON *a = cJSON_GetArrayItem(cJSON_GetObjectItem(straight, "losses"), 2);
        const cJSON *b = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "losses"), 2);
        if (!cJSON_IsNumber(a) || !cJSON_IsNumber(b)) fail_msg("%s: no loss of step 3", layouts[k]);
        if (k == 0 && a->valuedouble != b->valuedouble)
            fail_msg("resumed at the same layout: loss %.17g, straight %.17g", b->valuedouble, a->valuedouble);
        if (!(fabs(a->valuedouble - b->valuedouble) <= 1e-5 * fabs(a->valuedouble)))
            fail_msg("%s: loss %.17g, straight %.17g", layouts[k], b->valuedouble, a->valuedouble);
        cJSON_Delete(j);
    }
    cJSON_Delete(straight);
    snprintf(args, sizeof args, "rm -rf %s", dir);
    if (system(args) != 0) fail_msg("%s failed", args);
}

int main(int argc, char **argv) {
    (void)argc;
    char self[PATH_MAX];
    if (!realpath(argv[0], self)) return 1;
    snprintf(trainer, sizeof trainer, "%s/../train_gpt", dirname(self));
    if (access(trainer, X_OK) != 0) {
        fprintf(stderr, "test_tp_trainer: %s not found: build it first (make ... train_gpt)\n", trainer);
        return 1;
    }
    strcpy(tmpdir, "/tmp/fsc_test_tp_trainer_XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tp_trainer_runs),
        cmocka_unit_test(test_tp_trainer_files),
        cmocka_unit_test(test_tp_trainer_refusals),
        cmocka_unit_test(test_tp_trainer_checkpoints),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    rmdir(tmpdir);
    return rc;
}
