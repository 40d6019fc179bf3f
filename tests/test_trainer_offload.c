/* The trainer's --offload option (examples/train_gpt.c; docs/offload.md), run as the built program.
 * Oracles: fsdp (full_shard, hybrid) with --offload optim and all, zero1 and zero2 with optim, and fsdp and zero2
 * with offload inside zbv, interleaved and zb-h1 pipeline stages, report "bit-identical: yes" against DDP
 * (--check-ddp) and print the losses of the same run without offload; the
 * per-step line reports the host ledger's peak only with offload; ddp with offload, zero1 with all, tensor
 * parallelism and a mode that is not one are refused with a message that says why. */
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

static void test_unsupported_refused(void **state) {
    (void)state;
    const char *bad[][2] = {
        {"--parallel ddp --offload optim", "fsdp, zero1 or zero2"},
        {"--parallel zero1 --offload all", "fsdp only"},
        {"--parallel fsdp --offload cpu", "--offload"},
        {"--tp 2 --parallel fsdp --offload optim", "tensor"},
    };
    for (int k = 0; k < 4; k++) {
        char *args = prog_fmt(TINY " --data '%s/data.txt' %s", tmpdir, bad[k][0]);
        prog_refused(trainer, args, tmpdir, -1, bad[k][1]);
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
        cmocka_unit_test(test_unsupported_refused),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    test_rmtree(tmpdir);
    return rc;
}
