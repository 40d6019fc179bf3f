/* The trainer's --offload option (examples/train_gpt.c; docs/offload.md), run as the built program.
 * Oracles: fsdp (full_shard, hybrid) with --offload optim and all, zero1 and zero2 with optim, and fsdp and zero2
 * with offload inside zbv, interleaved and zb-h1 pipeline stages (the MoE GPT with ep 2 and bf16 among them), report "bit-identical: yes" against DDP
 * (--check-ddp) and print the losses of the same run without offload; a checkpoint saved inside pipeline stages
 * under one schedule and offload mode resumes under another with the uninterrupted run's losses; the
 * per-step line reports the host ledger's peak only with offload; so do fsdp with all and zero2 with optim under
 * tensor parallelism (tp 2, with sequence parallelism, and inside pipeline stages); ddp with offload, zero1 with all
 * and a mode that is not one are refused with a message that says why. */
#include "trainertest.h"

static char trainer[PATH_MAX];
static char tmpdir[64];

#define TINY "--layers 3 --dim 16 --heads 2 --seq 8 --batch 8 --steps 3 --world 4 --clip 0.5"

/* Run the trainer; its losses as JSON text (caller frees); *host: whether a step line reports the host peak. */
static char *run_losses(const char *extra, int *host) {
    char *args = prog_fmt(TINY " --data '%s/data.txt' %s --check-ddp --json", tmpdir, extra), *out = NULL;
    char *losses = prog_losses(trainer, args, tmpdir, "bit-identical: yes", &out);
    *host = strstr(out, "| host peak ") != NULL;
    free(out);
    free(args);
    return losses;
}

static void test_offload_keeps_the_losses(void **state) {
    (void)state;
    const char *runs[][2] = {
        {"--parallel fsdp", "optim"}, {"--parallel fsdp", "all"}, {"--parallel fsdp --shard hybrid", "all"},
        {"--parallel zero1", "optim"}, {"--parallel zero2", "optim"},
        /* inside pipeline stages (dp 2 x pp 2): two chunks per rank in a V, interleaved, the split backward */
        {"--layers 4 --parallel fsdp --pp 2 --chunks 4 --schedule zbv", "all"},
        {"--layers 4 --parallel zero2 --pp 2 --chunks 4 --schedule interleaved --virtual-stages 2", "optim"},
        {"--layers 4 --parallel fsdp --pp 2 --chunks 4 --schedule zb-h1 --checkpoint never", "optim"},
        /* the MoE GPT with expert parallelism, and bf16, inside such stages */
        {"--layers 4 --parallel fsdp --pp 2 --chunks 4 --schedule zb-h1 --moe-experts 4 --ep 2", "all"},
        {"--layers 4 --parallel fsdp --pp 2 --chunks 4 --schedule zbv --precision bf16", "optim"},
        /* tensor parallelism (dp 2 x tp 2), with sequence parallelism, and inside pipeline stages (tp 2 x pp 2) */
        {"--tp 2 --parallel fsdp", "all"},
        {"--tp 2 --sequence-parallel --parallel zero2", "optim"},
        {"--layers 4 --tp 2 --sequence-parallel --parallel fsdp --pp 2 --chunks 2 --schedule 1f1b", "all"},
    };
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
        int host0 = 0, host1 = 0;
        char *with = prog_fmt("%s --offload %s", runs[k][0], runs[k][1]);
        char *a = run_losses(runs[k][0], &host0), *b = run_losses(with, &host1);
        if (strcmp(a, b) != 0) fail_msg("%s: losses differ with offload: %s vs %s", with, a, b);
        if (host0 || !host1) fail_msg("%s: the host peak is reported %s", with, host0 ? "without offload" : "not at all");
        free(a);
        free(b);
        free(with);
    }
}

/* The losses of a run (n steps; a resumed run's first ones null, read as -1); *out its stdout (caller frees). */
static void losses_of(const char *extra, double *l, int n, char **out) {
    char *args = prog_fmt(TINY " --data '%s/data.txt' --layers 4 --pp 2 --chunks 4 %s --json", tmpdir, extra), *err = NULL;
    int rc = prog_run(trainer, args, tmpdir, out, &err);
    if (rc != 0) fail_msg("train_gpt %s: exit %d: %s", args, rc, err);
    cJSON *j = prog_last_json(*out);
    prog_doubles(j, "losses", l, n, -1.0);
    cJSON_Delete(j);
    free(err);
    free(args);
}

/* Checkpoints across schedules and offload modes inside pipeline stages (dp 2 x pp 2): saved after 2 of 4 steps
 * under one schedule and offload mode, resumed under another, the last two losses are the uninterrupted run's
 * without offload bit for bit. */
static void test_offload_pipeline_checkpoints(void **state) {
    (void)state;
    const char *pairs[][3] = {
        {"--parallel fsdp", "--schedule zbv --offload all", "--schedule 1f1b"},
        {"--parallel fsdp", "--schedule 1f1b", "--schedule zb-h1 --offload all"},
        {"--parallel zero2", "--schedule zb-h1 --offload optim", "--schedule interleaved --virtual-stages 2 --offload optim"},
    };
    for (size_t k = 0; k < sizeof pairs / sizeof pairs[0]; k++) {
        double ref[4], l[4];
        char *out = NULL;
        char *plain = prog_fmt("%s --schedule 1f1b --steps 4", pairs[k][0]);
        losses_of(plain, ref, 4, &out);
        free(out);
        char *a = prog_fmt("%s %s --steps 2 --save-every 2 --ckpt-dir '%s/pc%zu'", pairs[k][0], pairs[k][1], tmpdir, k);
        char *b = prog_fmt("%s %s --steps 4 --save-every 2 --ckpt-dir '%s/pc%zu' --resume '%s/pc%zu'", pairs[k][0],
                           pairs[k][2], tmpdir, k, tmpdir, k);
        losses_of(a, l, 2, &out);
        free(out);
        losses_of(b, l, 4, &out);
        if (!strstr(out, "at step 2")) fail_msg("%s: did not resume at step 2:\n%s", b, out);
        free(out);
        for (int i = 2; i < 4; i++)
            if (memcmp(&l[i], &ref[i], sizeof l[i]))
                fail_msg("%s saved under %s, resumed under %s: loss %d is %.17g, uninterrupted %.17g", pairs[k][0],
                         pairs[k][1], pairs[k][2], i, l[i], ref[i]);
        free(plain);
        free(a);
        free(b);
    }
}

static void test_unsupported_refused(void **state) {
    (void)state;
    const char *bad[][2] = {
        {"--parallel ddp --offload optim", "--offload optim runs with --parallel fsdp, zero1 or zero2, not ddp"},
        {"--parallel zero1 --offload all", "--offload all runs with --parallel fsdp only, not zero1"},
        {"--parallel fsdp --offload cpu", "--offload"},
        {"--parallel none --world 1 --offload optim", "not none (on one rank too: --parallel zero1)"},
        {"--parallel pipe --pp 2 --offload optim", "not pipe (zero1 is ddp"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) { /* before any rank starts: exit 2 */
        char *args = prog_fmt(TINY " --data '%s/data.txt' %s", tmpdir, bad[k][0]);
        prog_refused(trainer, args, tmpdir, 2, bad[k][1]);
        free(args);
    }
}

int main(int argc, char **argv) {
    (void)argc;
    if (prog_setup(argv[0], "test_trainer_offload", "train_gpt", trainer, sizeof trainer, tmpdir, sizeof tmpdir))
        return 1;
    if (prog_write_letters(tmpdir, "data.txt", 600)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_offload_keeps_the_losses),
        cmocka_unit_test(test_offload_pipeline_checkpoints),
        cmocka_unit_test(test_unsupported_refused),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    test_rmtree(tmpdir);
    return rc;
}
