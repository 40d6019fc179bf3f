/* DDP on the simulated cluster.
 * Oracles: a world of one DDP rank equals the single-rank engine ("none") bit for bit; bucket size does not
 * change the bits (reductions are elementwise in rank order); broadcasting rank 0's initial weights equals
 * every rank initialising from the keyed RNG; all ranks hold identical parameters after training; losses
 * on 1 and 4 ranks agree to float rounding (the reduction order differs, the mathematics does not). */
#include "partest.h"

static void test_ddp_world1_equals_none(void **state) {
    (void)state;
    pt_run a = pt_make(1, FSC_PAR_NONE);
    pt_train(&a);
    pt_run b = pt_make(1, FSC_PAR_DDP);
    pt_train(&b);
    pt_assert_same(&a, &b, "ddp world 1 vs none");
    free(a.params);
    free(b.params);
}

static void test_ddp_bucket_size_irrelevant(void **state) {
    (void)state;
    pt_run a = pt_make(3, FSC_PAR_DDP);
    a.po.bucket_bytes = 256; /* a bucket per layer or so */
    pt_train(&a);
    pt_run b = pt_make(3, FSC_PAR_DDP);
    b.po.bucket_bytes = 1u << 30; /* one bucket */
    pt_train(&b);
    pt_assert_same(&a, &b, "bucket size");
    /* more buckets, more all-reduce calls, same bytes */
    assert_true(a.comm[0].calls[FSC_OP_ALL_REDUCE] > b.comm[0].calls[FSC_OP_ALL_REDUCE]);
    assert_true(fabs(a.comm[0].bytes[FSC_OP_ALL_REDUCE] - b.comm[0].bytes[FSC_OP_ALL_REDUCE]) < 1e-6);
    free(a.params);
    free(b.params);
}

/* A bf16 all-reduce runs in place in its converted copy: the communication buffers (ledger tag comm) hold one
 * bf16 copy of each bucket in flight, P x 2 bytes at most (every bucket in flight with prefetch; one at a time
 * without), not a send and a receive buffer each (P x 4), with one bucket and with a bucket per layer. And the
 * bits are those of ZeRO-2, whose reduce-scatters do not run in place. */
static void test_ddp_bf16_reduce_in_place(void **state) {
    (void)state;
    const fsc_gpt_config cfg = pt_small_config();
    const size_t P = fsc_gpt_num_params(&cfg);
    for (int pf = 0; pf <= 1; pf++) {
        for (int b = 0; b <= 1; b++) {
            pt_run a = pt_make(3, FSC_PAR_DDP);
            a.po.param_dtype = a.po.reduce_dtype = FSC_BF16;
            a.po.prefetch = pf;
            a.po.bucket_bytes = b ? 256 : 1u << 30;
            pt_train(&a);
            pt_run z = pt_make(3, FSC_PAR_ZERO2);
            z.po.param_dtype = z.po.reduce_dtype = FSC_BF16;
            pt_train(&z);
            pt_assert_same(&a, &z, "ddp bf16 against zero2 bf16");
            for (int r = 0; r < 3; r++)
                if (a.peak[r][FSC_TAG_COMM] > P * 2 + 1024)
                    fail_msg("prefetch %d, %s: rank %d holds %zu comm bytes for %zu bf16 gradients", pf,
                             b ? "a bucket per layer" : "one bucket", r, a.peak[r][FSC_TAG_COMM], P);
            free(a.params);
            free(z.params);
        }
    }
}

static void test_ddp_sync_from_rank0(void **state) {
    (void)state;
    pt_run a = pt_make(4, FSC_PAR_DDP);
    pt_train(&a);
    pt_run b = pt_make(4, FSC_PAR_DDP);
    b.po.sync_from_rank0 = 1;
    pt_train(&b);
    pt_assert_same(&a, &b, "sync from rank 0");
    free(a.params);
    free(b.params);
}

static void test_ddp_matches_single_rank_numerically(void **state) {
    (void)state;
    pt_run a = pt_make(1, FSC_PAR_NONE);
    pt_train(&a);
    pt_run b = pt_make(4, FSC_PAR_DDP);
    pt_train(&b);
    for (int s = 0; s < a.steps; s++) assert_true(fabs(a.loss[s] - b.loss[s]) < 1e-5 * fabs(a.loss[s]));
    size_t P = fsc_gpt_num_params(&a.cfg);
    double maxd = 0;
    for (size_t i = 0; i < P; i++) maxd = fmax(maxd, fabs((double)a.params[i] - b.params[i]));
    assert_true(maxd < 1e-4);
    free(a.params);
    free(b.params);
}

static void test_ddp_rejects_bad_options(void **state) {
    (void)state;
    pt_run a = pt_make(2, FSC_PAR_NONE);
    fsc_cluster_opts co = { .world = 2 };
    assert_err(fsc_cluster_run(&co, pt_rank_fn, &a), FSC_ERR_INVALID, "world of 1");
    pt_run b = pt_make(2, FSC_PAR_DDP);
    b.po.accum = 0;
    assert_err(fsc_cluster_run(&co, pt_rank_fn, &b), FSC_ERR_INVALID, "accum");
    pt_run c = pt_make(2, FSC_PAR_DDP);
    c.po.accum = 5; /* 12 local sequences do not split into 5 */
    c.params = calloc(fsc_gpt_num_params(&c.cfg), sizeof(float));
    assert_err(fsc_cluster_run(&co, pt_rank_fn, &c), FSC_ERR_INVALID, "micro-batches");
    free(c.params);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ddp_world1_equals_none),
        cmocka_unit_test(test_ddp_bucket_size_irrelevant),
        cmocka_unit_test(test_ddp_bf16_reduce_in_place),
        cmocka_unit_test(test_ddp_sync_from_rank0),
        cmocka_unit_test(test_ddp_matches_single_rank_numerically),
        cmocka_unit_test(test_ddp_rejects_bad_options),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
