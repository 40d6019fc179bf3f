/* The trainer's overlap and network options (examples/train_gpt.c: --prefetch, --sim-bandwidth,
 * --sim-latency; docs/overlap.md), run as the built program.
 * Oracles: fsdp (full_shard), zero1 and zero2 with --prefetch 1 and 0 on a simulated network report
 * "bit-identical: yes" against DDP (--check-ddp), and they and ddp print the same losses either way; bad values are refused with a
 * message naming the option. */
#include "trainertest.h"

static char trainer[PATH_MAX];
static char tmpdir[64];

#define TINY "--layers 3 --dim 16 --heads 2 --seq 8 --batch 8 --steps 3 --world 4"

static void test_prefetch_is_bit_identical_to_ddp(void **state) {
    (void)state;
    const char *kinds[] = {"fsdp", "zero1", "zero2", "ddp"};
    for (int k = 0; k < 4; k++) {
        const int ddp = k == 3; /* --check-ddp compares other strategies with it */
        char *losses[2] = {NULL, NULL};
        for (int p = 0; p <= 1; p++) {
            char *args = prog_fmt(TINY " --data '%s/data.txt' --parallel %s --prefetch %d --sim-latency 100 "
                                  "--sim-bandwidth 2 %s --json", tmpdir, kinds[k], p, ddp ? "" : "--check-ddp");
            losses[p] = prog_losses(trainer, args, tmpdir, ddp ? NULL : "bit-identical: yes", NULL);
            free(args);
        }
        if (strcmp(losses[0], losses[1]) != 0)
            fail_msg("%s: losses differ with --prefetch: %s vs %s", kinds[k], losses[0], losses[1]);
        free(losses[0]);
        free(losses[1]);
    }
}

static void test_bad_values_refused(void **state) {
    (void)state;
    const char *bad[][2] = {
        {"--prefetch 2", "--prefetch"},
        {"--sim-bandwidth -1", "--sim-bandwidth"},
        {"--sim-latency x", "--sim-latency"},
    };
    for (int k = 0; k < 3; k++) {
        char *args = prog_fmt(TINY " --data '%s/data.txt' %s", tmpdir, bad[k][0]);
        prog_refused(trainer, args, tmpdir, -1, bad[k][1]);
        free(args);
    }
}

int main(int argc, char **argv) {
    (void)argc;
    if (prog_setup(argv[0], "test_trainer_overlap", "train_gpt", trainer, sizeof trainer, tmpdir, sizeof tmpdir))
        return 1;
    if (prog_write_letters(tmpdir, "data.txt", 600)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefetch_is_bit_identical_to_ddp),
        cmocka_unit_test(test_bad_values_refused),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    test_rmtree(tmpdir);
    return rc;
}
