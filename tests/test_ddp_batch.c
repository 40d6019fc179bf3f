/* The engine's batch check (fsc_engine_step, lib/parallel/engine.c and pipe.c): global_batch must be the
 * sum of the local batches over the data group, the same on every rank. The oracle: a consistent step
 * (even or uneven local batches) succeeds; an inconsistent one fails with FSC_ERR_INVALID and a message
 * naming the global batch on every rank of the world (the verdict rides on the world's vote: no rank goes on
 * alone, none fails by a collective's abort), for DDP, FSDP, ZeRO, a single rank, a pipeline (the last
 * stage's data group checks, every stage compares its own global batch) and tensor parallelism. */
#include "testutil.h"

#define MAXW 4

typedef struct {
    fsc_parallel_opts po;
    int local[MAXW], global[MAXW];   /* per rank */
    fsc_status st[MAXW];
    char msg[MAXW][512];
} batch_job;

static fsc_status batch_fn(fsc_rank *r, void *arg) {
    batch_job *j = arg;
    fsc_gpt_config c = fsc_gpt_config_default();
    c.layers = 2, c.dim = 16, c.heads = 2, c.seq = 8, c.vocab = 32;
    fsc_optim_config oc = fsc_optim_config_default();
    fsc_engine *e = NULL;
    FSC_TRY(fsc_engine_create(r, &c, &j->po, &oc, 3, &e));
    const int lb = j->local[r->rank];
    int32_t tok[8 * 8], tgt[8 * 8];
    const int d = fsc_engine_layout(e)->data; /* a tensor group's ranks pass the same samples */
    for (int i = 0; i < lb * c.seq; i++) tok[i] = (i * 3 + d) % 32, tgt[i] = (i * 7 + 1) % 32;
    fsc_step_info info;
    fsc_status s = fsc_engine_step(e, tok, tgt, lb, j->global[r->rank], &info);
    j->st[r->rank] = s;
    snprintf(j->msg[r->rank], sizeof j->msg[r->rank], "%s", s == FSC_OK ? "" : fsc_last_error());
    fsc_engine_free(e);
    return s;
}

/* Run world ranks with the given local and global batches; every rank must end with status want (and a
 * message naming "global batch" when it fails). */
static void run(const char *what, fsc_parallel_opts po, int world, const int *local, const int *global,
                fsc_status want) {
    batch_job j;
    memset(&j, 0, sizeof j);
    j.po = po;
    for (int i = 0; i < world; i++) j.local[i] = local[i], j.global[i] = global[i], j.st[i] = -1;
    fsc_cluster_opts co = fsc_cluster_opts_default();
    co.world = world;
    co.timeout_s = 20;
    fsc_status s = fsc_cluster_run(&co, batch_fn, &j);
    if (s != want) fail_msg("%s: cluster %s, expected %s: %s", what, fsc_status_str(s), fsc_status_str(want),
                            fsc_last_error());
    for (int i = 0; i < world; i++) {
        if (j.st[i] != want)
            fail_msg("%s: rank %d returned %s, expected %s on every rank: %s", what, i,
                     j.st[i] == (fsc_status)-1 ? "nothing" : fsc_status_str(j.st[i]), fsc_status_str(want), j.msg[i]);
        if (want != FSC_OK && !strstr(j.msg[i], "global batch"))
            fail_msg("%s: rank %d: message \"%s\" does not name the global batch", what, i, j.msg[i]);
    }
}

static fsc_parallel_opts opts(fsc_parallel_kind kind) {
    fsc_parallel_opts po = fsc_parallel_opts_default();
    po.kind = kind;
    return po;
}

static void test_data_parallel(void **state) {
    (void)state;
    const int two[] = { 2, 2 }, uneven[] = { 1, 3 }, four[] = { 4, 4 }, six[] = { 6, 6 }, mixed[] = { 4, 6 };
    const int big[] = { 4, 2 }, small[] = { 3, 3 };
    run("ddp 2+2 of 4", opts(FSC_PAR_DDP), 2, two, four, FSC_OK);
    run("ddp 1+3 of 4", opts(FSC_PAR_DDP), 2, uneven, four, FSC_OK);
    run("ddp 2+2 of 6", opts(FSC_PAR_DDP), 2, two, six, FSC_ERR_INVALID);
    run("ddp 2+2 of 2 (local passed as global)", opts(FSC_PAR_DDP), 2, two, two, FSC_ERR_INVALID);
    run("ddp ranks disagree (4 and 6)", opts(FSC_PAR_DDP), 2, two, mixed, FSC_ERR_INVALID);
    run("fsdp 2+2 of 6", opts(FSC_PAR_FSDP), 2, two, six, FSC_ERR_INVALID);
    run("ddp 4+2 of 3 (a global batch below a local one)", opts(FSC_PAR_DDP), 2, big, small, FSC_ERR_INVALID);
    run("zero2 1+3 of 4", opts(FSC_PAR_ZERO2), 2, uneven, four, FSC_OK);
    const int one[] = { 2 }, one4[] = { 4 };
    run("one rank, 2 of 2", opts(FSC_PAR_NONE), 1, one, one, FSC_OK);
    run("one rank, 2 of 4", opts(FSC_PAR_NONE), 1, one, one4, FSC_ERR_INVALID);
}

static void test_pipeline_and_tensor_parallel(void **state) {
    (void)state;
    fsc_parallel_opts pp = opts(FSC_PAR_DDP);
    pp.pp = 2;
    pp.accum = 2;
    const int two[] = { 2, 2, 2, 2 }, four[] = { 4, 4, 4, 4 }, last_wrong[] = { 2, 4 }, first_wrong[] = { 4, 2 };
    run("pp 2: 2 of 2", pp, 2, two, two, FSC_OK);
    run("pp 2: 2 of 4", pp, 2, two, four, FSC_ERR_INVALID);
    run("pp 2: the last stage's global batch wrong", pp, 2, two, last_wrong, FSC_ERR_INVALID);
    run("dp 2 x pp 2: 2+2 of 4", pp, 4, two, four, FSC_OK);
    run("dp 2 x pp 2: 2+2 of 2", pp, 4, two, two, FSC_ERR_INVALID);
    run("pp 2: the first stage's global batch wrong", pp, 2, two, first_wrong, FSC_ERR_INVALID);

    fsc_parallel_opts tp = opts(FSC_PAR_DDP);
    tp.tp = 2;
    run("tp 2: 2 of 2", tp, 2, two, two, FSC_OK);
    run("tp 2: 2 of 4", tp, 2, two, four, FSC_ERR_INVALID);
    /* dp 2 x tp 2: the data group of tensor rank 1 (world ranks 1, 3) disagrees, tensor rank 0's is right:
     * its ranks must stop too */
    const int one_group_wrong[] = { 4, 4, 4, 6 };
    run("dp 2 x tp 2: 2+2 of 4", tp, 4, two, four, FSC_OK);
    run("dp 2 x tp 2: one tensor rank's data group wrong", tp, 4, two, one_group_wrong, FSC_ERR_INVALID);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_data_parallel),
        cmocka_unit_test(test_pipeline_and_tensor_parallel),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
