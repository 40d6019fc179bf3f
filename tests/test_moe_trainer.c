/* The trainer's mixture-of-experts options (--moe-experts, --moe-top-k, --moe-every, --moe-capacity, --moe-aux,
 * --ep in examples/train_gpt.c), run as a program (build/<x>/train_gpt next to this binary's folder).
 * Oracles:
 * - --check-ddp of an expert-parallel run with one expert group (--ep 4 on 4 ranks) reports weights and losses
 *   bit-identical to DDP with every expert on every rank (tests/test_moe_engine.c says why); --check-ddp of
 *   zero1, zero2 and fsdp (every --shard) with --ep 2 on 4 ranks, --accum 2 and --prefetch 1 reports them
 *   bit-identical to DDP with --ep 2;
 * - --check-ddp of pipelines (--pp 2 and 4, ddp, zero1, zero2 and fsdp, --ep 2; gpipe, 1f1b, zb-h1, zbv and
 *   interleaved; zb-h1 and zbv with --recompute 1 too) reports them bit-identical to DDP over the data-parallel
 *   ranks, and the --json aux losses and drops
 *   equal a DDP run's;
 * - --ep 2 on 4 ranks: losses within 1e-6 relative of --ep 1 (the expert gradients' sums associate
 *   differently), the same drops;
 * - the --json summary's "moe" object: a load-balancing loss and drop count per step, assignments equal to
 *   top-k x tokens x MoE blocks, drops <= assignments, and the expert group's all-to-alls per step equal to
 *   the formula (4 per MoE block and micro-batch of (G-1)/G x E x cap x C x 4 bytes, cap = min(tokens,
 *   ceil(F k tokens / E)) for a rank's micro-batch); the "expert" group in comm_bytes_per_step_by_group;
 *   none of it for a dense run;
 * - the initial weights file of --ep 2 byte-identical to --ep 1's;
 * - invalid combinations refused (exit 2) with a message naming the option. */
#include <libgen.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "test_tp_util.h"
#include "trainertest.h"

static char trainer[PATH_MAX], tmpdir[64];
static const char *model = "--layers 2 --dim 16 --heads 2 --seq 8 --batch 8 --steps 2 --vocab 256 --threads 1";

/* Run the trainer with args; its stdout and stderr together (malloc), rc its exit status. */
static char *run(const char *args, int *rc) {
    char *out = NULL;
    *rc = prog_run(trainer, args, tmpdir, &out, NULL);
    return out;
}

/* The --json line of a run of the model with args. */
static cJSON *json_of(const char *args) { return prog_json(trainer, tmpdir, model, args); }

static double num(const cJSON *o, const char *path) {
    char buf[128];
    snprintf(buf, sizeof buf, "%s", path);
    const cJSON *x = o;
    for (char *k = strtok(buf, "."); k && x; k = strtok(NULL, ".")) x = cJSON_GetObjectItem(x, k);
    if (!x || !cJSON_IsNumber(x)) fail_msg("JSON lacks the number %s", path);
    return x->valuedouble;
}

static double item(const cJSON *o, const char *arr, int i) {
    const cJSON *a = cJSON_GetObjectItem(o, arr);
    if (!a || !cJSON_GetArrayItem(a, i)) fail_msg("JSON lacks %s[%d]", arr, i);
    return cJSON_GetArrayItem(a, i)->valuedouble;
}

static const char *moe = "--moe-experts 4 --moe-top-k 2 --moe-capacity 1 --world 4 --parallel ddp";

static void test_moe_trainer_check_ddp(void **state) {
    (void)state;
    char args[512];
    snprintf(args, sizeof args, "%s --ep 4 --check-ddp", moe);
    cJSON *j = json_of(args);
    const cJSON *k = cJSON_GetObjectItem(j, "check_ddp");
    assert_non_null(k);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(k, "bit_identical")));
    cJSON_Delete(j);
    /* zero1, zero2 and fsdp with --ep 2 on 4 ranks against DDP with --ep 2, prefetch on */
    const char *sharded[] = { "zero1", "zero2", "fsdp", "fsdp --shard grad_op", "fsdp --shard none",
                              "fsdp --shard hybrid" };
    for (int i = 0; i < 6; i++) {
        snprintf(args, sizeof args, "%s --ep 2 --check-ddp --prefetch 1 --accum 2", moe);
        char *p = strstr(args, "--parallel ddp");
        assert_non_null(p);
        char rest[512];
        snprintf(rest, sizeof rest, "%s", p + strlen("--parallel ddp"));
        snprintf(p, sizeof args - (size_t)(p - args), "--parallel %s%s", sharded[i], rest);
        j = json_of(args);
        k = cJSON_GetObjectItem(j, "check_ddp");
        assert_non_null(k);
        if (!cJSON_IsTrue(cJSON_GetObjectItem(k, "bit_identical"))) fail_msg("%s: not bit-identical with DDP", args);
        cJSON_Delete(j);
    }
    /* pipelines: --pp 2 of 4 ranks (ddp with --ep 2: against DDP with the same expert groups, --check-ddp's
     * oracle for every strategy inside stages; zero2 and fsdp with --ep 2, --accum 2), and
     * --pp 4 with 1f1b; the aux losses and drops of the --json summary equal those of DDP (with the sharded
     * strategies' --ep, the oracle of --check-ddp) */
    const struct { const char *args; int dp, accum, ep; } piped[] = { /* and DDP's world, accum and ep */
        { "--parallel ddp --pp 2 --ep 2", 2, 1, 1 },
        { "--parallel ddp --pp 2 --ep 2 --accum 2", 2, 2, 2 }, /* the oracle: DDP with --ep 2 (with --ep 1, not equal) */
        { "--parallel zero2 --pp 2 --ep 2 --accum 2", 2, 2, 2 },
        { "--parallel fsdp --pp 2 --ep 2 --accum 2 --schedule 1f1b --prefetch 1", 2, 2, 2 },
        { "--parallel ddp --pp 4 --accum 2 --schedule 1f1b --checkpoint always", 1, 2, 1 },
        /* the zero-bubble and interleaved schedules, the MoE blocks' backward split into B and W */
        { "--parallel ddp --pp 2 --ep 2 --schedule zb-h1", 2, 1, 1 },
        { "--parallel zero2 --pp 2 --ep 2 --accum 2 --schedule zb-h1 --checkpoint never", 2, 2, 2 },
        { "--parallel fsdp --pp 2 --ep 2 --accum 2 --schedule zbv", 2, 2, 2 },
        { "--parallel zero1 --pp 2 --ep 2 --accum 2 --schedule interleaved --virtual-stages 2", 2, 2, 2 },
        /* with layer checkpointing: each MoE block recomputed (its all-to-alls again) in B, its W reading that */
        { "--parallel zero2 --pp 2 --ep 2 --accum 2 --schedule zb-h1 --checkpoint never --recompute 1", 2, 2, 2 },
        { "--parallel fsdp --pp 2 --ep 2 --accum 4 --schedule zbv --recompute 1", 2, 4, 2 },
    };
    for (size_t i = 0; i < sizeof piped / sizeof piped[0]; i++) {
        snprintf(args, sizeof args, "--moe-experts 4 --moe-top-k 2 --moe-capacity 1 --world 4 --layers 4 %s",
                 piped[i].args);
        char dargs[512];
        snprintf(dargs, sizeof dargs, "--moe-experts 4 --moe-top-k 2 --moe-capacity 1 --world %d --layers 4 "
                 "--parallel ddp --accum %d --ep %d", piped[i].dp, piped[i].accum, piped[i].ep);
        char full[600];
        snprintf(full, sizeof full, "%s --check-ddp", args);
        j = json_of(full);
        cJSON *d = json_of(dargs);
        k = cJSON_GetObjectItem(j, "check_ddp");
        assert_non_null(k);
        if (!cJSON_IsTrue(cJSON_GetObjectItem(k, "bit_identical"))) fail_msg("%s: not bit-identical with DDP", args);
        const cJSON *m = cJSON_GetObjectItem(j, "moe"), *dm = cJSON_GetObjectItem(d, "moe");
        for (int s = 0; s < 2; s++)
            if (item(m, "aux_losses", s) != item(dm, "aux_losses", s) || item(m, "dropped", s) != item(dm, "dropped", s))
                fail_msg("%s: step %d: aux loss %.17g, dropped %g; DDP's %.17g, %g", args, s,
                         item(m, "aux_losses", s), item(m, "dropped", s), item(dm, "aux_losses", s),
                         item(dm, "dropped", s));
        cJSON_Delete(j);
        cJSON_Delete(d);
    }
}

static void test_moe_trainer_json(void **state) {
    (void)state;
    char args[512];
    snprintf(args, sizeof args, "%s --ep 1", moe);
    cJSON *one = json_of(args);
    for (int accum = 1; accum <= 2; accum++) {
        snprintf(args, sizeof args, "%s --ep 2 --accum %d", moe, accum);
        cJSON *j = json_of(args);
        const cJSON *m = cJSON_GetObjectItem(j, "moe");
        assert_non_null(m);
        const int E = 4, k = 2, C = 16, G = 2, blocks = 2, steps = 2;
        int tokens = 8 / 4 / accum * 8; /* a rank's micro-batch */
        int cap = (int)ceil(1.0 * k * tokens / E);
        if (cap > tokens) cap = tokens;
        assert_int_equal((int)num(m, "moe_blocks"), blocks);
        for (int s = 0; s < steps; s++) {
            assert_true(item(m, "aux_losses", s) > 0);
            assert_int_equal((long long)item(m, "assigned", s), (long long)k * 8 * 8 * blocks);
            assert_true(item(m, "dropped", s) >= 0 && item(m, "dropped", s) <= item(m, "assigned", s));
            if (accum == 1) {
                double e = fabs(item(j, "losses", s) - item(one, "losses", s)) / item(one, "losses", s);
                if (!(e <= 1e-6)) fail_msg("--ep 2: loss of step %d differs from --ep 1 by %.3g", s, e);
                assert_true(item(m, "dropped", s) == item(cJSON_GetObjectItem(one, "moe"), "dropped", s));
            }
        }
        double bytes = 4.0 * blocks * accum * (G - 1.0) / G * E * cap * C * 4;
        assert_int_equal((int)num(m, "expert_comm_per_step.all_to_all.calls"), 4 * blocks * accum);
        if (fabs(num(m, "expert_comm_per_step.all_to_all.bytes") - bytes) > 1e-6)
            fail_msg("accum %d: %.0f all-to-all bytes per step, formula %.0f", accum,
                     num(m, "expert_comm_per_step.all_to_all.bytes"), bytes);
        assert_true(num(j, "comm_bytes_per_step_by_group.expert") >= bytes);
        printf("  --ep 2 on 4 ranks, --accum %d: %.0f all-to-all bytes per rank and step, drops %g of %g\n", accum,
               bytes, item(m, "dropped", 1), item(m, "assigned", 1));
        cJSON_Delete(j);
    }
    /* a dense run has none of it */
    cJSON *d = json_of("--world 4 --parallel ddp");
    assert_null(cJSON_GetObjectItem(d, "moe"));
    assert_null(cJSON_GetObjectItem(cJSON_GetObjectItem(d, "comm_bytes_per_step_by_group"), "expert"));
    assert_null(cJSON_GetObjectItem(one, "check_ddp"));
    cJSON_Delete(d);
    cJSON_Delete(one);
}

static void test_moe_trainer_weights(void **state) {
    (void)state;
    char a[128], b[128], args[768];
    snprintf(a, sizeof a, "%s/ep1.safetensors", tmpdir);
    snprintf(b, sizeof b, "%s/ep2.safetensors", tmpdir);
    const char *paths[2] = { a, b };
    for (int i = 0; i < 2; i++) {
        snprintf(args, sizeof args, "%s %s --steps 0 --ep %d --init-save %s", model, moe, i + 1, paths[i]);
        int rc;
        char *out = run(args, &rc);
        if (rc != 0) fail_msg("train_gpt %s: exit %d\n%s", args, rc, out);
        free(out);
    }
    snprintf(args, sizeof args, "cmp -s %s %s", a, b);
    assert_int_equal(system(args), 0);
    unlink(a), unlink(b);
}

static void test_moe_trainer_refusals(void **state) {
    (void)state;
    struct {
        const char *args, *msg;
    } bad[] = {
        { "--moe-top-k 2", "--moe-top-k applies to MoE models only" },
        { "--ep 2 --world 2 --parallel ddp", "--ep applies to MoE models only" },
        { "--moe-experts 4 --moe-top-k 3", "--moe-top-k: 3 is out of range [1, 2]" },
        { "--moe-experts 1 --moe-top-k 2", "--moe-top-k 2 needs at least 2 experts" },
        { "--moe-experts 4 --moe-every 3", "--moe-every 3 but the model has 2 blocks" },
        { "--moe-experts 6 --ep 4 --world 4 --parallel ddp", "--ep 4 does not divide --moe-experts 6" },
        { "--moe-experts 4 --ep 4 --world 2 --parallel ddp", "--ep 4 does not divide the 2 data-parallel ranks" },
        { "--moe-experts 4 --tp 2 --world 2 --parallel ddp", "--moe-experts with --tp > 1 is not supported yet" },
        /* the range the message states is the one refused: 0 is out too */
        { "--moe-experts 4 --moe-capacity 0", "--moe-capacity: 0 is out of range (0, 1024]" },
        { "--moe-experts 4 --moe-capacity -1", "--moe-capacity: -1 is out of range (0, 1024]" },
        { "--moe-experts 4 --moe-capacity 1025", "--moe-capacity: 1025 is out of range (0, 1024]" },
        /* a factor too small for a float: no "give 0 for none", which --moe-capacity refuses */
        { "--moe-experts 4 --moe-capacity 1e-40", "--moe-capacity: 1e-40 is too small for a float (the smallest is "
                                                  "1.17549e-38)" },
        { "--moe-experts 4 --moe-aux -1", "--moe-aux: -1 is out of range" },
        /* above the MoE layer's limit: refused as the option, before any rank starts */
        { "--moe-experts 4 --moe-aux 1e30", "--moe-aux: 1e30 is out of range [0, 1e+06]" },
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

/* A step skipped for a NaN loss ran: --json's moe.dropped and assigned have its counts (they were null, as for a step
 * a resumed run did not take, though the progress line printed them), its aux loss is null (NaN). sgd at --lr 1e30
 * with --weight-decay 1e30 overflows the weights at step 1, so steps 2 and 3 are skipped. Oracle: the progress lines'
 * "dropped D/A" of each step; assigned is top-k x tokens x MoE blocks whatever the loss. */
static void test_moe_trainer_skipped_step_counts(void **state) {
    (void)state;
    char *out = NULL;
    int rc = prog_run(trainer, "--layers 1 --dim 16 --heads 2 --seq 8 --batch 8 --steps 3 --vocab 256 --threads 1 "
                      "--moe-experts 4 --optimizer sgd --momentum 0 --lr 1e30 --weight-decay 1e30 --clip 0 "
                      "--nonfinite skip --json", tmpdir, &out, NULL);
    if (rc != 0) fail_msg("exit %d\n%s", rc, out);
    cJSON *j = prog_last_json(out);
    const cJSON *m = cJSON_GetObjectItem(j, "moe");
    assert_non_null(m);
    for (int s = 1; s <= 3; s++) {
        char key[32];
        snprintf(key, sizeof key, "step    %d/3", s);
        const char *at = strstr(out, key);
        char line[512] = "";
        if (at) snprintf(line, sizeof line, "%.*s", (int)strcspn(at, "\n"), at);
        const char *d = strstr(line, "| dropped ");
        long dropped = -1, assigned = -1;
        if (!d || sscanf(d, "| dropped %ld/%ld", &dropped, &assigned) != 2) fail_msg("step %d: no drops:\n%s", s, out);
        if (s > 1 && !strstr(line, "skipped")) fail_msg("step %d not skipped: the run does not overflow\n%s", s, out);
        const cJSON *dj = cJSON_GetArrayItem(cJSON_GetObjectItem(m, "dropped"), s - 1);
        const cJSON *aj = cJSON_GetArrayItem(cJSON_GetObjectItem(m, "assigned"), s - 1);
        if (!cJSON_IsNumber(dj) || !cJSON_IsNumber(aj)) fail_msg("step %d: moe.dropped or assigned is not a number", s);
        assert_int_equal((long)dj->valuedouble, dropped);
        assert_int_equal((long)aj->valuedouble, assigned);
        assert_int_equal(assigned, 8 * 8); /* top-1 x 64 tokens x 1 block */
    }
    assert_true(cJSON_IsNull(cJSON_GetArrayItem(cJSON_GetObjectItem(m, "aux_losses"), 1)));
    cJSON_Delete(j);
    free(out);
}

/* --check-ddp's verdict is the exit status too: 3 when the run and DDP differ (docs/parallel.md). ddp with --ep 2 of 4
 * ranks against DDP with --ep 1 differs (the expert gradients' sums associate differently: docs/tensor_parallel.md);
 * with --ep 4 of 4 it is equal, exit 0 (test_moe_trainer_check_ddp). */
static void test_moe_trainer_check_ddp_differs(void **state) {
    (void)state;
    char args[512];
    snprintf(args, sizeof args, "%s %s --ep 2 --steps 3 --check-ddp", model, moe);
    int rc;
    char *out = run(args, &rc);
    if (rc != 3 || !strstr(out, "bit-identical: no ("))
        fail_msg("train_gpt --ep 2 --check-ddp: exit %d (expected 3), output:\n%s", rc, out);
    free(out);
}

/* The --check-ddp table's columns name what each run is: the oracle of ddp with --ep 4 is DDP with every expert on
 * every rank ("ddp"), the oracle of a pipelined zero1 with --ep 2 is DDP with --ep 2 ("ddp ep 2"); both were "ddp"
 * and "zero1" before, a table of "ddp" against "ddp" whose memory differed. */
static void test_moe_trainer_check_ddp_columns(void **state) {
    (void)state;
    struct {
        const char *args, *head;
    } runs[] = {
        { "--ep 4", "per rank (max over ranks)             ddp       ddp ep 4    ratio\n" },
        { "--ep 2 --pp 2 --parallel zero1", "per rank (max over ranks)        ddp ep 2 zero1 pp 2 ep 2    ratio\n" },
    };
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        char args[512];
        snprintf(args, sizeof args, "%s %s %s --check-ddp", model, moe, runs[i].args);
        int rc;
        char *out = run(args, &rc);
        if (rc != 0 || !strstr(out, runs[i].head))
            fail_msg("train_gpt %s: exit %d, output lacks \"%s\":\n%s", runs[i].args, rc, runs[i].head, out);
        free(out);
    }
}

int main(int argc, char **argv) {
    (void)argc;
    char self[PATH_MAX];
    if (!realpath(argv[0], self)) return 1;
    snprintf(trainer, sizeof trainer, "%s/../train_gpt", dirname(self));
    if (access(trainer, X_OK) != 0) {
        fprintf(stderr, "test_moe_trainer: %s not found: build it first (make ... train_gpt)\n", trainer);
        return 1;
    }
    strcpy(tmpdir, "/tmp/fsc_test_moe_trainer_XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_moe_trainer_check_ddp),
        cmocka_unit_test(test_moe_trainer_check_ddp_columns),
        cmocka_unit_test(test_moe_trainer_check_ddp_differs),
        cmocka_unit_test(test_moe_trainer_json),
        cmocka_unit_test(test_moe_trainer_weights),
        cmocka_unit_test(test_moe_trainer_refusals),
        cmocka_unit_test(test_moe_trainer_skipped_step_counts),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    rmdir(tmpdir);
    return rc;
}
