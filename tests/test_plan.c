/* The planner's memory half (lib/plan, backends/count). Oracle: the per-rank ledger peaks fsc_plan_memory
 * predicts on the counting device equal, byte for byte and tag by tag (host memory of offload included), the
 * peaks of the same job run for real on the cpu device (fsc_plan_measure), over a matrix of layouts. The
 * counting device's own tests are in test_device.c. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "fsc/fsc.h"

/* A small GPT every layout below divides: 2 layers (pp 2 puts one on each stage), 4 heads (tp 2); its
 * embedding, head, logits and several activations pass FSC_COUNT_REAL_MAX, so the counting device gives them
 * fake addresses (the dry path), while biases and norms stay real memory. */
static fsc_plan_job small_gpt(int world, int batch) {
    fsc_plan_job j = fsc_plan_job_default();
    j.gpt = (fsc_gpt_config){.layers = 2, .dim = 64, .heads = 4, .seq = 32, .vocab = 512};
    j.world = world;
    j.batch = batch;
    return j;
}

static fsc_plan_job small_llama(int world, int batch) {
    fsc_plan_job j = small_gpt(world, batch);
    j.model = FSC_PLAN_LLAMA;
    j.llama = (fsc_llama_config){.layers = 2, .dim = 64, .heads = 4, .kv_heads = 2, .ffn = 256, .seq = 32,
                                 .vocab = 512, .rope_theta = 10000.0f, .norm_eps = 1e-5f};
    return j;
}

/* predicted == measured on every rank and tag */
static void check_job(const char *name, const fsc_plan_job *j) {
    fsc_plan_rank *want = calloc((size_t)j->world, sizeof *want), *got = calloc((size_t)j->world, sizeof *got);
    assert_non_null(want);
    assert_non_null(got);
    fsc_status s = fsc_plan_measure(j, want);
    if (s != FSC_OK) fail_msg("%s: measure: %s", name, fsc_last_error());
    s = fsc_plan_memory(j, got);
    if (s != FSC_OK) fail_msg("%s: plan: %s", name, fsc_last_error());
    for (int r = 0; r < j->world; r++) {
        for (int t = 0; t < FSC_TAG_COUNT; t++) {
            if (got[r].peak[t] != want[r].peak[t])
                fail_msg("%s: rank %d %s: predicted %zu, measured %zu", name, r, fsc_tag_name((fsc_tag)t),
                         got[r].peak[t], want[r].peak[t]);
            if (got[r].host_peak[t] != want[r].host_peak[t])
                fail_msg("%s: rank %d host %s: predicted %zu, measured %zu", name, r, fsc_tag_name((fsc_tag)t),
                         got[r].host_peak[t], want[r].host_peak[t]);
        }
        assert_int_equal(got[r].peak_total, want[r].peak_total);
        assert_int_equal(got[r].host_peak_total, want[r].host_peak_total);
        assert_int_equal(got[r].has_host, want[r].has_host);
        assert_int_equal(got[r].stage, want[r].stage);
        for (int g = 0; g < FSC_GROUP_COUNT; g++) /* the dry run's collectives are the real run's */
            if (got[r].comm_bytes[g] != want[r].comm_bytes[g])
                fail_msg("%s: rank %d %s group: predicted %.0f bytes, measured %.0f", name, r,
                         fsc_group_kind_name((fsc_group_kind)g), got[r].comm_bytes[g], want[r].comm_bytes[g]);
        assert_true(got[r].gemm_flops > 0 && want[r].gemm_flops == 0);
        assert_true(want[r].peak[FSC_TAG_PARAMS] > 0);
    }
    free(want);
    free(got);
}

static void test_plan_single_rank(void **st) {
    (void)st;
    fsc_plan_job j = small_gpt(1, 2);
    check_job("gpt, one rank", &j);
    j = small_llama(1, 2);
    check_job("llama, one rank", &j);
}

/* The step's matrix products on one rank: PaLM's count, (6 N + 12 L C T) FLOPs a token, N the matrix
 * parameters (12 C^2 a block and the V x C head), is exactly what a GPT step multiplies (the attention's two
 * products forward, twice that backward; every weight's product forward and its two backward). */
static void test_plan_gemm_flops(void **st) {
    (void)st;
    fsc_plan_job j = small_gpt(1, 2);
    fsc_plan_rank r;
    assert_int_equal(fsc_plan_memory(&j, &r), FSC_OK);
    const double C = j.gpt.dim, L = j.gpt.layers, T = j.gpt.seq, V = j.gpt.vocab;
    double n = 12 * C * C * L + V * C, want = (6 * n + 12 * L * C * T) * T * j.batch;
    if (r.gemm_flops != want) fail_msg("gemm FLOPs %.0f, PaLM's count %.0f", r.gemm_flops, want);
}

static void test_plan_strategies(void **st) {
    (void)st;
    static const struct { const char *name; fsc_parallel_kind kind; fsc_shard_strategy shard; } rows[] = {
        {"ddp", FSC_PAR_DDP, FSC_SHARD_FULL},           {"fsdp full", FSC_PAR_FSDP, FSC_SHARD_FULL},
        {"fsdp grad_op", FSC_PAR_FSDP, FSC_SHARD_GRAD_OP}, {"fsdp hybrid", FSC_PAR_FSDP, FSC_SHARD_HYBRID},
        {"zero1", FSC_PAR_ZERO1, FSC_SHARD_FULL},       {"zero2", FSC_PAR_ZERO2, FSC_SHARD_FULL},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        fsc_plan_job j = small_gpt(4, 4);
        j.po.kind = rows[i].kind;
        j.po.shard = rows[i].shard;
        check_job(rows[i].name, &j);
    }
}

static void test_plan_precision_checkpoint_accum(void **st) {
    (void)st;
    fsc_plan_job j = small_gpt(2, 4);
    j.po.kind = FSC_PAR_FSDP;
    j.po.param_dtype = j.po.reduce_dtype = FSC_BF16;
    check_job("fsdp bf16", &j);
    j = small_gpt(2, 4);
    j.po.kind = FSC_PAR_DDP;
    j.po.checkpoint = 1;
    j.po.accum = 2;
    check_job("ddp, activation checkpointing, accum 2", &j);
    j = small_llama(2, 2);
    j.po.kind = FSC_PAR_ZERO2;
    j.po.param_dtype = j.po.reduce_dtype = FSC_F16;
    j.po.init_loss_scale = 1.0f; /* the real step must not overflow: the plan is of a step that updates */
    check_job("llama zero2 f16", &j);
}

static void test_plan_offload(void **st) {
    (void)st;
    fsc_plan_job j = small_gpt(2, 2);
    j.po.kind = FSC_PAR_FSDP;
    j.po.offload = FSC_OFFLOAD_OPTIM;
    check_job("fsdp offload optim", &j);
    j.po.offload = FSC_OFFLOAD_ALL;
    check_job("fsdp offload all", &j);
    j.po.kind = FSC_PAR_ZERO1;
    j.po.offload = FSC_OFFLOAD_OPTIM;
    check_job("zero1 offload optim", &j);
}

static void test_plan_pipeline_tensor(void **st) {
    (void)st;
    fsc_plan_job j = small_gpt(2, 2);
    j.po.kind = FSC_PAR_DDP;
    j.po.pp = 2;
    j.po.accum = 2;
    check_job("pp 2, gpipe", &j);
    j.po.schedule = FSC_SCHED_1F1B;
    j.po.clip = 1.0f; /* the grad norm's all-gather (which all-zero gradients would skip) */
    j.world = 4, j.batch = 4;
    check_job("pp 2 x dp 2, 1f1b, clipping", &j);
    j = small_llama(2, 2);
    j.po.kind = FSC_PAR_DDP;
    j.po.tp = 2;
    check_job("llama tp 2", &j);
    j = small_llama(4, 2);
    j.po.kind = FSC_PAR_FSDP;
    j.po.tp = 2;
    j.sequence_parallel = 1;
    check_job("llama tp 2 x fsdp 2, sequence parallel", &j);
}

static void test_plan_moe(void **st) {
    (void)st;
    fsc_plan_job j = small_gpt(2, 2);
    j.gpt.moe_experts = 4;
    j.gpt.moe_top_k = 2;
    j.po.kind = FSC_PAR_DDP;
    j.po.ep = 2;
    check_job("moe ep 2", &j);
}

static void test_plan_bad_jobs(void **st) {
    (void)st;
    fsc_plan_rank r[4];
    fsc_plan_job j = small_gpt(0, 1);
    assert_int_equal(fsc_plan_memory(&j, r), FSC_ERR_INVALID);
    assert_non_null(strstr(fsc_last_error(), "world"));
    j = small_gpt(4, 3);
    assert_int_equal(fsc_plan_memory(&j, r), FSC_ERR_INVALID);
    assert_non_null(strstr(fsc_last_error(), "batch 3"));
    j = small_gpt(2, 2);
    j.po.tp = 2; /* the GPT's heads split, but ddp with tp needs the model built on the group: the engine says */
    j.gpt.heads = 3;
    assert_int_not_equal(fsc_plan_memory(&j, r), FSC_OK);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_single_rank),
        cmocka_unit_test(test_plan_gemm_flops),
        cmocka_unit_test(test_plan_strategies),
        cmocka_unit_test(test_plan_precision_checkpoint_accum),
        cmocka_unit_test(test_plan_offload),
        cmocka_unit_test(test_plan_pipeline_tensor),
        cmocka_unit_test(test_plan_moe),
        cmocka_unit_test(test_plan_bad_jobs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
