/* FSDP against DDP on the simulated cluster.
 * Oracle: DDP on the same world size with the same data. Every FSDP strategy, with and without
 * reshard_after_forward, flat and nested wrapping, gives bit-identical losses and parameters after
 * several AdamW steps with clipping. Communication and memory are checked against the formulas. A save
 * whose write fails on rank 0 fails on every rank at once with the writer's message. */
#include "savefail.h"

static const int worlds[] = { 1, 2, 3, 4, 8 };

static pt_run fsdp_run(int world, fsc_shard_strategy sh, fsc_wrap_policy wrap, int reshard) {
    pt_run r = pt_make(world, FSC_PAR_FSDP);
    r.po.shard = sh;
    r.po.wrap = wrap;
    r.po.reshard_after_forward = reshard;
    return r;
}

static void test_fsdp_equals_ddp(void **state) {
    (void)state;
    for (size_t w = 0; w < sizeof worlds / sizeof worlds[0]; w++) {
        int N = worlds[w];
        pt_run ddp = pt_make(N, FSC_PAR_DDP);
        pt_train(&ddp);
        /* clipping must really happen for this test to cover it */
        assert_true(ddp.info[0].grad_norm > ddp.po.clip);
        struct { fsc_shard_strategy sh; fsc_wrap_policy wrap; int reshard; const char *what; } cases[] = {
            { FSC_SHARD_FULL, FSC_WRAP_BLOCK, 1, "full_shard per block" },
            { FSC_SHARD_FULL, FSC_WRAP_BLOCK, 0, "full_shard per block, no reshard" },
            { FSC_SHARD_FULL, FSC_WRAP_MODEL, 1, "full_shard flat" },
            { FSC_SHARD_GRAD_OP, FSC_WRAP_BLOCK, -1, "shard_grad_op" },
            { FSC_SHARD_NONE, FSC_WRAP_BLOCK, -1, "no_shard" },
        };
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            pt_run f = fsdp_run(N, cases[c].sh, cases[c].wrap, cases[c].reshard);
            pt_train(&f);
            char what[96];
            snprintf(what, sizeof what, "%s, world %d", cases[c].what, N);
            pt_assert_same(&ddp, &f, what);
            free(f.params);
        }
        if (N >= 4) { /* hybrid: groups of 2 (and 4 on 8 ranks) */
            for (int G = 2; G < N; G *= 2) {
                pt_run f = fsdp_run(N, FSC_SHARD_HYBRID, FSC_WRAP_BLOCK, -1);
                f.po.hybrid_group = G;
                pt_train(&f);
                char what[64];
                snprintf(what, sizeof what, "hybrid_shard group %d, world %d", G, N);
                pt_assert_same(&ddp, &f, what);
                free(f.params);
            }
        }
        free(ddp.params);
    }
}

/* min-params wrapping: blocks at or above the threshold are units, else they stay in the root */
static void test_fsdp_min_params_wrap(void **state) {
    (void)state;
    pt_run ddp = pt_make(3, FSC_PAR_DDP);
    pt_train(&ddp);
    size_t block = 0;
    fsc_param_info pi;
    for (int k = 0; k < FSC_GPT_BLOCK_PARAMS; k++) {
        assert_ok(fsc_gpt_param_info(&ddp.cfg, 2 + k, &pi));
        block += pi.numel;
    }
    size_t thresholds[] = { block, block + 1 };
    for (int i = 0; i < 2; i++) {
        pt_run f = fsdp_run(3, FSC_SHARD_FULL, FSC_WRAP_MIN_PARAMS, -1);
        f.po.wrap_min_params = thresholds[i];
        pt_train(&f);
        pt_assert_same(&ddp, &f, "min-params wrap");
        /* units: 1 + L when blocks are wrapped, 1 otherwise; reduce-scatters = units */
        uint64_t units = i == 0 ? 1 + (uint64_t)ddp.cfg.layers : 1;
        assert_int_equal(f.comm[0].calls[FSC_OP_REDUCE_SCATTER], units);
        free(f.params);
    }
    free(ddp.params);
}

/* Gradient accumulation: K micro-batches equal DDP with K micro-batches, with and without no_sync. */
static void test_fsdp_accumulation(void **state) {
    (void)state;
    for (int N = 2; N <= 4; N++) {
        for (int ns = 0; ns <= 1; ns++) {
            pt_run ddp = pt_make(N, FSC_PAR_DDP);
            ddp.po.accum = 2;
            ddp.po.no_sync = ns;
            pt_train(&ddp);
            pt_run f = fsdp_run(N, FSC_SHARD_FULL, FSC_WRAP_BLOCK, -1);
            f.po.accum = 2;
            f.po.no_sync = ns;
            pt_train(&f);
            pt_assert_same(&ddp, &f, ns ? "accumulation with no_sync" : "accumulation, reduce every micro-batch");
            free(ddp.params);
            free(f.params);
        }
    }
}

/* Collective counts (FairScale's test): with no_sync over K micro-batches, every micro-batch gathers
 * 2 x units - 1 times (the root is not re-gathered for backward) and only the last reduce-scatters. */
static void test_fsdp_no_sync_counts(void **state) {
    (void)state;
    const int K = 3, N = 2;
    pt_run f = fsdp_run(N, FSC_SHARD_FULL, FSC_WRAP_BLOCK, 1);
    f.batch = 12;
    f.po.accum = K;
    f.po.no_sync = 1;
    f.po.clip = 0;
    pt_train(&f);
    uint64_t units = 1 + (uint64_t)f.cfg.layers;
    /* + 1 all-gather: the loss of the step */
    assert_int_equal(f.comm[0].calls[FSC_OP_ALL_GATHER], (uint64_t)K * (2 * units - 1) + 1);
    assert_int_equal(f.comm[0].calls[FSC_OP_REDUCE_SCATTER], units);
    free(f.params);
}

/* padded sizes of the units as FSDP builds them: root = wte, wpe, ln_f; one unit per block */
static void unit_sizes(const fsc_gpt_config *c, int N, size_t *root, size_t *block) {
    fsc_param_info pi;
    size_t r = 0, b = 0;
    int nt = fsc_gpt_num_tensors(c);
    for (int i = 0; i < nt; i++) {
        assert_ok(fsc_gpt_param_info(c, i, &pi));
        if (pi.layer >= 1 && pi.layer <= c->layers) {
            if (pi.layer == 1) b += pi.numel;
        } else {
            r += pi.numel;
        }
    }
    *root = (r + N - 1) / N * N;
    *block = (b + N - 1) / N * N;
}

/* Bytes per rank and step, as a ring sends them: full_shard = 3 (N-1)/N x padded parameter bytes, less
 * the root's backward gather (FairScale keeps the root gathered); shard_grad_op and DDP 2 (N-1)/N x; and
 * every strategy's non-finite vote, one float all-reduced. */
static void test_fsdp_comm_volume(void **state) {
    (void)state;
    for (int N = 2; N <= 4; N++) {
        pt_run ddp = pt_make(N, FSC_PAR_DDP);
        ddp.po.clip = 0;
        pt_train(&ddp);
        size_t P = fsc_gpt_num_params(&ddp.cfg), root, block;
        unit_sizes(&ddp.cfg, N, &root, &block);
        double f = (double)(N - 1) / N;
        double loss_bytes = f * 32.0 * N; /* the loss, the batch check, the step count: 4 doubles per rank, all-gathered */
        double vote = 2 * f * 4.0; /* the non-finite vote: one float all-reduced */
        assert_true(fabs(ddp.comm[0].bytes[FSC_OP_ALL_REDUCE] - 2 * f * 4.0 * P - vote) < 1e-6);
        assert_true(fabs(ddp.comm[0].bytes[FSC_OP_ALL_GATHER] - loss_bytes) < 1e-6);

        size_t padded = root + (size_t)ddp.cfg.layers * block;
        pt_run fs = fsdp_run(N, FSC_SHARD_FULL, FSC_WRAP_BLOCK, 1);
        fs.po.clip = 0;
        pt_train(&fs);
        double want_ag = f * 4.0 * (2.0 * padded - root) + loss_bytes;
        assert_true(fabs(fs.comm[0].bytes[FSC_OP_ALL_GATHER] - want_ag) < 1e-6);
        assert_true(fabs(fs.comm[0].bytes[FSC_OP_REDUCE_SCATTER] - f * 4.0 * padded) < 1e-6);
        assert_true(fabs(fs.comm[0].bytes[FSC_OP_ALL_REDUCE] - vote) < 1e-6);

        pt_run go = fsdp_run(N, FSC_SHARD_GRAD_OP, FSC_WRAP_BLOCK, -1);
        go.po.clip = 0;
        pt_train(&go);
        assert_true(fabs(go.comm[0].bytes[FSC_OP_ALL_GATHER] - (f * 4.0 * padded + loss_bytes)) < 1e-6);
        assert_true(fabs(go.comm[0].bytes[FSC_OP_REDUCE_SCATTER] - f * 4.0 * padded) < 1e-6);
        free(ddp.params);
        free(fs.params);
        free(go.params);
    }
}

/* hybrid_shard's gradient reduction sends (N + N/G - 2)/N x padded elements per rank and step in the reduction
 * dtype: the reduce-scatter over the world and the all-gather across replicas both (a bf16 reduction's second
 * phase was sent in f32), with and without prefetch, and the bits stay DDP's. */
static void test_fsdp_hybrid_comm_volume(void **state) {
    (void)state;
    const int NG[][2] = { { 4, 2 }, { 6, 3 }, { 8, 2 } };
    for (size_t k = 0; k < sizeof NG / sizeof NG[0]; k++) {
        for (int bf = 0; bf <= 1; bf++) {
            const int N = NG[k][0], G = NG[k][1];
            pt_run ddp = pt_make(N, FSC_PAR_DDP);
            ddp.po.clip = 0;
            ddp.po.param_dtype = ddp.po.reduce_dtype = bf ? FSC_BF16 : FSC_F32;
            pt_train(&ddp);
            size_t root, block;
            unit_sizes(&ddp.cfg, N, &root, &block);
            const size_t padded = root + (size_t)ddp.cfg.layers * block;
            const double f = (double)(N - 1) / N, fg = (double)(G - 1) / G, es = bf ? 2.0 : 4.0;
            for (int pf = 0; pf <= 1; pf++) {
                pt_run h = fsdp_run(N, FSC_SHARD_HYBRID, FSC_WRAP_BLOCK, -1);
                h.po.hybrid_group = G;
                h.po.clip = 0;
                h.po.prefetch = pf;
                h.po.param_dtype = h.po.reduce_dtype = ddp.po.param_dtype;
                pt_train(&h);
                char what[96];
                snprintf(what, sizeof what, "hybrid_shard %d, world %d, %s, prefetch %d", G, N, bf ? "bf16" : "f32",
                         pf);
                pt_assert_same(&ddp, &h, what);
                /* the parameters' gathers over the group (prefetch keeps the last block for backward), the loss's
                 * all-gather, the vote */
                const double gathers = fg * es * (2.0 * padded - root - (pf ? block : 0)) + f * 32.0 * N + 2 * f * 4.0;
                const fsc_comm_stats *c = &h.comm[0];
                const double reduction = (double)c->bytes[FSC_OP_REDUCE_SCATTER] + (double)c->bytes[FSC_OP_ALL_GATHER] +
                                         (double)c->bytes[FSC_OP_ALL_REDUCE] - gathers;
                const double want = (double)(N + N / G - 2) / N * (double)padded * es;
                if (fabs(reduction - want) > 1e-6)
                    fail_msg("%s: the reduction sent %.0f bytes, not %.0f", what, reduction, want);
                free(h.params);
            }
            free(ddp.params);
        }
    }
}

/* Memory from the device ledger: params + grads + optimizer state per rank under full_shard is at most
 * DDP's / N, plus the padding, plus the units gathered at once (root and one block, params and grads). */
static void test_fsdp_memory(void **state) {
    (void)state;
    const int N = 4;
    pt_run ddp = pt_make(N, FSC_PAR_DDP);
    pt_train(&ddp);
    pt_run fs = fsdp_run(N, FSC_SHARD_FULL, FSC_WRAP_BLOCK, 1);
    pt_train(&fs);
    size_t root, block;
    unit_sizes(&ddp.cfg, N, &root, &block);
    for (int r = 0; r < N; r++) {
        size_t dd = ddp.peak[r][FSC_TAG_PARAMS] + ddp.peak[r][FSC_TAG_GRADS] + ddp.peak[r][FSC_TAG_OPTIM];
        size_t ff = fs.peak[r][FSC_TAG_PARAMS] + fs.peak[r][FSC_TAG_GRADS] + fs.peak[r][FSC_TAG_OPTIM];
        size_t units = 1 + (size_t)ddp.cfg.layers;
        size_t padding = units * (size_t)N * 16;         /* < N padded elements per unit, 16 bytes each */
        size_t gathered = 2 * 4 * (root + block);          /* params + grads of root and one block */
        /* the head's part of the tied embedding gradient (V x C) is a per-rank buffer on both paths */
        size_t head = 4 * (size_t)ddp.cfg.vocab * (size_t)ddp.cfg.dim;
        if (ff > dd / N + padding + gathered + head)
            fail_msg("rank %d: fsdp peak %zu > ddp %zu / %d + %zu + %zu + %zu", r, ff, dd, N, padding, gathered,
                     head);
        assert_true(ff < dd); /* and it really saves memory */
    }
    free(ddp.params);
    free(fs.params);
}

static fsc_status create_only(fsc_rank *r, void *arg) {
    pt_run *run = arg;
    fsc_engine *e = NULL;
    fsc_status s = fsc_engine_create(r, &run->cfg, &run->po, &run->oc, run->seed, &e);
    fsc_engine_free(e);
    return s;
}

/* hybrid_shard's default group (half the data group) that does not divide an odd data group is refused naming the
 * default and what to set, not only a group size the caller never gave. */
static void test_fsdp_hybrid_default_group_refused(void **state) {
    (void)state;
    pt_run h = fsdp_run(5, FSC_SHARD_HYBRID, FSC_WRAP_BLOCK, -1);
    fsc_cluster_opts co = { .world = 5, .device = "cpu", .timeout_s = 30 };
    assert_int_equal(fsc_cluster_run(&co, create_only, &h), FSC_ERR_INVALID);
    const char *msg = fsc_last_error();
    if (!strstr(msg, "group of 2 ranks (hybrid_group 0: half the data group) does not divide the data group of 5") ||
        !strstr(msg, "set hybrid_group"))
        fail_msg("unclear refusal: %s", msg);
    h.po.hybrid_group = 3; /* a group the caller gave: named as given */
    assert_int_equal(fsc_cluster_run(&co, create_only, &h), FSC_ERR_INVALID);
    msg = fsc_last_error();
    if (!strstr(msg, "group of 3 ranks does not divide the data group of 5") || strstr(msg, "hybrid_group 0"))
        fail_msg("unclear refusal: %s", msg);
}

/* A parameter or reduction dtype the strategies do not compute in is refused naming it. */
static void test_fsdp_bad_dtype_named(void **state) {
    (void)state;
    fsc_cluster_opts co = { .world = 2, .device = "cpu", .timeout_s = 30 };
    pt_run f = fsdp_run(2, FSC_SHARD_FULL, FSC_WRAP_BLOCK, -1);
    f.po.param_dtype = FSC_I32;
    assert_int_equal(fsc_cluster_run(&co, create_only, &f), FSC_ERR_INVALID);
    if (!strstr(fsc_last_error(), "parameter dtype must be f32, bf16 or f16, not i32"))
        fail_msg("refusal names no dtype: %s", fsc_last_error());
    f.po.param_dtype = FSC_F32;
    f.po.reduce_dtype = (fsc_dtype)77;
    assert_int_equal(fsc_cluster_run(&co, create_only, &f), FSC_ERR_INVALID);
    if (!strstr(fsc_last_error(), "gradient reduction dtype must be f32, bf16 or f16, not invalid (77)"))
        fail_msg("refusal names no dtype: %s", fsc_last_error());
}

/* Mixed precision: bf16 parameters and reductions equal DDP with the same settings, bit for bit. */
static void test_fsdp_bf16(void **state) {
    (void)state;
    for (int N = 2; N <= 3; N++) {
        pt_run ddp = pt_make(N, FSC_PAR_DDP);
        ddp.po.param_dtype = ddp.po.reduce_dtype = FSC_BF16;
        pt_train(&ddp);
        pt_run f = fsdp_run(N, FSC_SHARD_FULL, FSC_WRAP_BLOCK, 1);
        f.po.param_dtype = f.po.reduce_dtype = FSC_BF16;
        pt_train(&f);
        pt_assert_same(&ddp, &f, "bf16");
        /* and bf16 really changed something against fp32 */
        pt_run f32 = pt_make(N, FSC_PAR_DDP);
        pt_train(&f32);
        assert_true(memcmp(&f32.loss[1], &ddp.loss[1], sizeof(double)) != 0);
        free(ddp.params);
        free(f.params);
        free(f32.params);
    }
}

/* f16 with dynamic loss scaling: a huge initial scale overflows, every rank skips the same steps, and
 * the result equals DDP's. */
static void test_fsdp_f16_loss_scaling(void **state) {
    (void)state;
    const int N = 3;
    pt_run ddp = pt_make(N, FSC_PAR_DDP);
    ddp.po.param_dtype = ddp.po.reduce_dtype = FSC_F16;
    ddp.po.init_loss_scale = 16777216.0f;
    ddp.steps = 8;
    pt_train(&ddp);
    pt_run f = fsdp_run(N, FSC_SHARD_FULL, FSC_WRAP_BLOCK, 1);
    f.po.param_dtype = f.po.reduce_dtype = FSC_F16;
    f.po.init_loss_scale = 16777216.0f;
    f.steps = 8;
    pt_train(&f);
    pt_assert_same(&ddp, &f, "f16");
    int skipped = 0;
    for (int s = 0; s < f.steps; s++) {
        for (int r = 1; r < N; r++) assert_int_equal(f.skipped[r][s], f.skipped[0][s]);
        assert_int_equal(f.skipped[0][s], ddp.skipped[0][s]);
        skipped += f.skipped[0][s];
    }
    assert_true(skipped >= 1);            /* the overflow was caught */
    assert_true(skipped < f.steps);       /* and the scale came down far enough to train */
    free(ddp.params);
    free(f.params);
}

/* sync_module_states: rank 0's initial values broadcast give the same run as the keyed init. */
static void test_fsdp_sync_from_rank0(void **state) {
    (void)state;
    pt_run a = fsdp_run(3, FSC_SHARD_FULL, FSC_WRAP_BLOCK, 1);
    pt_train(&a);
    pt_run b = fsdp_run(3, FSC_SHARD_FULL, FSC_WRAP_BLOCK, 1);
    b.po.sync_from_rank0 = 1;
    pt_train(&b);
    pt_assert_same(&a, &b, "sync_from_rank0");
    free(a.params);
    free(b.params);
}

/* ---- a write that fails on the writing rank (savefail.h) ---- */

static void test_fsdp_save_fails_on_every_rank(void **state) {
    (void)state;
    check_save_fails_on_every_rank(fsdp_run(2, FSC_SHARD_FULL, FSC_WRAP_BLOCK, 1), 2, "full_shard, world 2");
    check_save_fails_on_every_rank(fsdp_run(4, FSC_SHARD_FULL, FSC_WRAP_BLOCK, 1), 4, "full_shard, world 4");
    pt_run h = fsdp_run(4, FSC_SHARD_HYBRID, FSC_WRAP_BLOCK, 1);
    h.po.hybrid_group = 2;
    check_save_fails_on_every_rank(h, 4, "hybrid_shard 2, world 4");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fsdp_equals_ddp),
        cmocka_unit_test(test_fsdp_min_params_wrap),
        cmocka_unit_test(test_fsdp_accumulation),
        cmocka_unit_test(test_fsdp_no_sync_counts),
        cmocka_unit_test(test_fsdp_comm_volume),
        cmocka_unit_test(test_fsdp_hybrid_comm_volume),
        cmocka_unit_test(test_fsdp_hybrid_default_group_refused),
        cmocka_unit_test(test_fsdp_bad_dtype_named),
        cmocka_unit_test(test_fsdp_memory),
        cmocka_unit_test(test_fsdp_bf16),
        cmocka_unit_test(test_fsdp_f16_loss_scaling),
        cmocka_unit_test(test_fsdp_sync_from_rank0),
        cmocka_unit_test(test_fsdp_save_fails_on_every_rank),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
