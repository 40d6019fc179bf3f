/* The planner's memory half (lib/plan, backends/count). Oracle: the per-rank ledger peaks fsc_plan_memory
 * predicts on the counting device equal, byte for byte and tag by tag (host memory of offload included), the
 * peaks of the same job run for real on the cpu device (fsc_plan_measure), over a matrix of layouts; a job given
 * as a configuration text (a GPT-2's, a Llama's) plans what the job of the model's struct plans, field for field,
 * and an unknown family's text is refused naming it. The time
 * half: the counting device's work per kernel equals its arguments' FLOPs and bytes worked out by hand, and
 * fsc_plan_time's arithmetic on a fixed case equals the model's formulas worked out by hand (no timing is
 * tested). The counting device's own tests are in test_device.c. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <math.h>
#include "fsc/fsc.h"
#include "core/kernels.h" /* fsc_k_*, fsc_count_work */
#include "plan/plan_impl.h"     /* plan_memory_roles */

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

/* The counting device's work per call, worked out by hand from the arguments: a 64 x 32 x 16 product (65536
 * FLOPs; A, B read and C written: 4 x (64 x 16 + 16 x 32 + 64 x 32) = 14336 bytes; intensity 4.57, bin
 * floor(2 log2 4.57) + 32 = 36), a GELU of 1000 values (8000 nominal FLOPs, 8000 bytes: bin 32), a device copy
 * of 1000 bytes (read and written, no FLOPs: bin 0). */
static void test_plan_kernel_work(void **st) {
    (void)st;
    fsc_device *d = NULL;
    assert_int_equal(fsc_device_create("count", NULL, &d), FSC_OK);
    void *big = NULL;
    assert_int_equal(fsc_device_alloc(d, FSC_TAG_ACTS, (size_t)1 << 20, &big), FSC_OK);
    float *x = big;
    assert_int_equal(fsc_k_gemm(d, 0, 0, 64, 32, 16, 1.0f, x, 16, 0, x, 32, 0, 0.0f, x, 32, 0, 1), FSC_OK);
    assert_int_equal(fsc_k_gelu_forward(d, x, x, 1000), FSC_OK);
    assert_int_equal(fsc_device_copy(d, x, x + 1000, 1000), FSC_OK);
    double f[FSC_PLAN_BINS], b[FSC_PLAN_BINS];
    fsc_count_work(d, f, b);
    assert_int_equal(fsc_count_calls(d), 3); /* a gemm, a GELU and a copy */
    for (int i = 0; i < FSC_PLAN_BINS; i++) {
        const double wf = i == 36 ? 65536 : i == 32 ? 8000 : 0, wb = i == 36 ? 14336 : i == 32 ? 8000 : i == 0 ? 2000 : 0;
        if (f[i] != wf || b[i] != wb) fail_msg("bin %d: %.0f FLOPs %.0f bytes, want %.0f and %.0f", i, f[i], b[i], wf, wb);
    }
    fsc_device_release(d, big);
    fsc_device_free(d);
}

/* Attention on the counting device counts every head's products of a sweep of row blocks at once (fsc_count_bulk,
 * fsc_count_gemm_rows, its sweeps kept: backward's second sweep of dk is the first's of dv): the same calls, FLOPs
 * and bytes in the same bins as block by block and head by head, which the device does while it moves a replay's
 * clock (fsc_count_set_rates on: no bulk). Grouped-query heads (6 over 2: products that add into dk and dv read
 * C), a last row block of fewer rows (T = 70 over blocks of 32), forward and backward. */
static void count_attention(int bulk, double *f, double *b, uint64_t *calls, uint64_t *flops) {
    fsc_device *d = NULL;
    assert_int_equal(fsc_device_create("count", NULL, &d), FSC_OK);
    fsc_device_set_whole_products(d, bulk == 2); /* 2: as GPUs run them, bulk */
    if (!bulk) fsc_count_set_rates(d, 1e30, 1e30, 0); /* no replay clock on this thread: nothing moves */
    assert_int_equal(fsc_count_bulk(d), bulk != 0);
    void *big = NULL;
    assert_int_equal(fsc_device_alloc(d, FSC_TAG_ACTS, (size_t)1 << 20, &big), FSC_OK);
    float *x = big;
    const fsc_attn_core_dims c = {.B = 2, .T = 70, .NH = 6, .KVH = 2, .HS = 8};
    assert_int_equal(fsc_attn_core_forward(d, &c, x, 48, x, 48, x, 16, x, 16, x, x), FSC_OK);
    assert_int_equal(fsc_attn_core_backward(d, &c, x, x, x, x, 48, x, 48, x, 16, x, 16, x, x), FSC_OK);
    fsc_count_work(d, f, b);
    *calls = fsc_count_calls(d);
    *flops = fsc_count_gemm_flops(d);
    fsc_device_release(d, big);
    fsc_device_free(d);
}

static void test_plan_attention_bulk(void **st) {
    (void)st;
    double f1[FSC_PLAN_BINS], b1[FSC_PLAN_BINS], f0[FSC_PLAN_BINS], b0[FSC_PLAN_BINS];
    uint64_t calls1, calls0, flops1, flops0;
    count_attention(1, f1, b1, &calls1, &flops1);
    count_attention(0, f0, b0, &calls0, &flops0);
    /* 3 row blocks x 6 heads x (2 products forward + 4 backward), the two softmaxes */
    assert_int_equal(calls0, 3 * 6 * 6 + 2);
    assert_int_equal(calls1, calls0);
    assert_int_equal(flops1, flops0);
    int bins = 0;
    for (int i = 0; i < FSC_PLAN_BINS; i++) {
        if (f1[i] != f0[i] || b1[i] != b0[i])
            fail_msg("bin %d: in bulk %.0f FLOPs %.0f bytes, call by call %.0f and %.0f", i, f1[i], b1[i], f0[i], b0[i]);
        bins += f0[i] > 0;
    }
    assert_true(bins > 2); /* the blocks' products fall in several bins */
}

/* fsc_plan_job.whole_products (the fsc-plan --cluster presets'): attention's products counted as GPUs run them,
 * each head's whole: 6 heads x 6 products and the two softmaxes, each product over all T x T scores (2 B T T HS
 * FLOPs: the causal zeros too). A job's step then makes fewer calls and more FLOPs than the cpu's blocks (T = 70:
 * 3 blocks of 32 query rows), and fsc_plan_measure (the cpu device) is not changed by it. */
static void test_plan_whole_products(void **st) {
    (void)st;
    double f[FSC_PLAN_BINS], b[FSC_PLAN_BINS];
    uint64_t calls, flops, calls0, flops0;
    count_attention(2, f, b, &calls, &flops);
    assert_int_equal(calls, 6 * 6 + 2);
    assert_int_equal(flops, 6ull * 6 * 2 * 2 * 70 * 70 * 8);
    count_attention(1, f, b, &calls0, &flops0);
    assert_true(calls0 > calls && flops0 < flops);
    fsc_plan_job j = small_gpt(1, 2);
    j.gpt.seq = 70;
    fsc_plan_rank blocks, whole;
    assert_int_equal(fsc_plan_memory(&j, &blocks), FSC_OK);
    j.whole_products = 1;
    assert_int_equal(fsc_plan_memory(&j, &whole), FSC_OK);
    /* per block and head, forward and backward: 3 x 4 x 6 products become 4 x 6; the step's other calls alike */
    assert_true(blocks.kernel_calls - whole.kernel_calls == 2 * (3 - 1) * 4 * 6);
    assert_true(whole.gemm_flops > blocks.gemm_flops);
    assert_int_equal(whole.peak_total, blocks.peak_total);
}

/* A real plan's step holds its work: every gemm FLOP in the bins, bytes beyond the products', the data group's
 * all-reduces at its size, its calls summing to its bytes. */
static void test_plan_step_work(void **st) {
    (void)st;
    fsc_plan_job j = small_gpt(2, 2);
    j.po.kind = FSC_PAR_DDP;
    fsc_plan_rank r[2];
    assert_int_equal(fsc_plan_memory(&j, r), FSC_OK);
    double f = 0, b = 0;
    for (int i = 0; i < FSC_PLAN_BINS; i++) f += r[0].work_flops[i], b += r[0].work_bytes[i];
    assert_true(f > r[0].gemm_flops && r[0].gemm_flops > 0);
    assert_true(b > 0);
    /* calls: at least a gemm each for the 2 blocks' 4 products, forward and backward's two */
    assert_true(r[0].kernel_calls >= 2 * 4 * 3 && r[0].kernel_calls == r[1].kernel_calls);
    assert_int_equal(r[0].group_size[FSC_GROUP_DATA], 2);
    assert_true(r[0].comm[FSC_GROUP_DATA].calls[FSC_OP_ALL_REDUCE] > 0);
    double sum = 0;
    for (int op = 0; op < FSC_OP_COUNT; op++) sum += r[0].comm[FSC_GROUP_DATA].bytes[op];
    assert_true(sum == r[0].comm_bytes[FSC_GROUP_DATA]);
}

static void assert_near(double got, double want, const char *what) {
    if (fabs(got - want) > 1e-12 * fabs(want)) fail_msg("%s: %.17g, want %.17g", what, got, want);
}

/* fsc_plan_time on a fixed case, worked out by hand at 1e11 FLOP/s, 1e10 B/s, links of 1e9 B/s and 10 us:
 * rank 0 computes max(1e9 / 1e11, 1e6 / 1e10) + max(1e3 / 1e11, 1e8 / 1e10) = 0.02 s and communicates 3
 * all-reduces of a pair, 2 (N - 1) latencies each, with 4e6 bytes (6e-5 + 4e-3 s) and 2 sends of 1e6 bytes
 * (2e-5 + 1e-3 s; their receives are free): 5.08e-3 s. Rank 1 all-reduces 5e7 bytes once: 2e-5 + 0.05 s. With
 * prefetch a rank's step is the larger, without it the sum; a pipeline of 2 stages with 4 micro-batches
 * stretches compute by 5/4. */
static void test_plan_time_arithmetic(void **st) {
    (void)st;
    fsc_plan_job j = small_gpt(2, 2);
    fsc_plan_rank r[2];
    memset(r, 0, sizeof r);
    r[0].work_flops[40] = 1e9, r[0].work_bytes[40] = 1e6;
    r[0].work_flops[20] = 1e3, r[0].work_bytes[20] = 1e8;
    for (int i = 0; i < 2; i++) { /* each rank's communicators: data (a pair), tensor (itself), a link */
        r[i].ncomms = 3;
        r[i].comms[0] = (fsc_plan_comm){.id = 1, .kind = FSC_GROUP_DATA, .size = 2};
        r[i].comms[1] = (fsc_plan_comm){.id = 10 + (uint64_t)i, .kind = FSC_GROUP_TENSOR, .size = 1};
        r[i].comms[1].stats.calls[FSC_OP_ALL_REDUCE] = 9; /* a group of one rank costs nothing */
        r[i].comms[1].stats.bytes[FSC_OP_ALL_REDUCE] = 9e9;
        r[i].comms[2] = (fsc_plan_comm){.id = 2, .kind = FSC_GROUP_PIPELINE, .size = 2};
    }
    r[0].comms[0].stats.calls[FSC_OP_ALL_REDUCE] = 3, r[0].comms[0].stats.bytes[FSC_OP_ALL_REDUCE] = 4e6;
    r[0].comms[2].stats.calls[FSC_OP_SEND] = 2, r[0].comms[2].stats.bytes[FSC_OP_SEND] = 1e6;
    r[0].comms[2].stats.calls[FSC_OP_RECV] = 2, r[0].comms[2].stats.bytes[FSC_OP_RECV] = 1e6;
    r[1].comms[0].stats.calls[FSC_OP_ALL_REDUCE] = 1, r[1].comms[0].stats.bytes[FSC_OP_ALL_REDUCE] = 5e7;
    const fsc_plan_rates rt = {.flops_per_s = 1e11, .bytes_per_s = 1e10, .net_bytes_per_s = 1e9, .net_latency_s = 1e-5};
    fsc_plan_step t;
    j.po.prefetch = 0; /* compute + comm: rank 0 0.02508 s, rank 1 0.05002 s */
    assert_int_equal(fsc_plan_time(&j, r, &rt, &t), FSC_OK);
    assert_int_equal(t.rank, 1);
    assert_near(t.step_s, 0.05002, "no prefetch: step");
    r[1].comms[0].stats.bytes[FSC_OP_ALL_REDUCE] = 1e6; /* rank 1: 2e-5 + 1e-3 s */
    assert_int_equal(fsc_plan_time(&j, r, &rt, &t), FSC_OK);
    assert_int_equal(t.rank, 0);
    assert_near(t.compute_s, 0.02, "compute");
    assert_near(t.comm_s, 5.08e-3, "comm");
    assert_near(t.step_s, 0.02508, "no prefetch: step");
    j.po.prefetch = 1;
    assert_int_equal(fsc_plan_time(&j, r, &rt, &t), FSC_OK);
    assert_near(t.step_s, 0.02, "prefetch: step");
    j.po.pp = 2, j.po.accum = 4;
    assert_int_equal(fsc_plan_time(&j, r, &rt, &t), FSC_OK);
    assert_near(t.compute_s, 0.025, "pipeline: compute");
    assert_near(t.step_s, 0.025, "pipeline: step");
    fsc_plan_rates bad = rt;
    bad.bytes_per_s = 0;
    assert_int_equal(fsc_plan_time(&j, r, &bad, &t), FSC_ERR_INVALID);
    assert_non_null(strstr(fsc_last_error(), "bytes_per_s"));
    bad = rt, bad.net_latency_s = -1;
    assert_int_equal(fsc_plan_time(&j, r, &bad, &t), FSC_ERR_INVALID);
    assert_non_null(strstr(fsc_last_error(), "net_latency_s"));
    assert_int_equal(fsc_plan_calibrate(0, 0, &bad), FSC_ERR_INVALID);
    assert_non_null(strstr(fsc_last_error(), "world"));
}

/* Two levels at 2 ranks a node (node links 1e11 B/s and 1 us, network 1e10 B/s and 10 us), worked out by hand:
 * rank 0 all-reduces once on each of three groups: {0, 1} on its node (2 node latencies + 1e6 / 1e11 B/s:
 * 1.2e-5 s), the world {0 .. 3} over 2 nodes with 2 ranks on each (2 node + 2 network latencies + 3e6 / 1e10:
 * 3.22e-4 s) and {0, 2} over 2 nodes with one on each (2 network latencies + 1e6 / 1e10: 1.2e-4 s): 4.54e-4 s.
 * The same groups on one level (node_ranks 0): 6 all-reduces of a pair or the world at the network's rates. */
static void test_plan_time_two_levels(void **st) {
    (void)st;
    fsc_plan_job j = small_gpt(4, 4);
    j.po.prefetch = 0;
    fsc_plan_rank r[4];
    memset(r, 0, sizeof r);
    for (int i = 0; i < 4; i++) {
        r[i].ncomms = 3;
        r[i].comms[0] = (fsc_plan_comm){.id = 100 + (uint64_t)(i / 2), .kind = FSC_GROUP_DATA, .size = 2};
        r[i].comms[1] = (fsc_plan_comm){.id = 7, .kind = FSC_GROUP_WORLD, .size = 4};
        r[i].comms[2] = (fsc_plan_comm){.id = 200 + (uint64_t)(i % 2), .kind = FSC_GROUP_DATA, .size = 2};
    }
    r[0].comms[0].stats.calls[FSC_OP_ALL_REDUCE] = 1, r[0].comms[0].stats.bytes[FSC_OP_ALL_REDUCE] = 1e6;
    r[0].comms[1].stats.calls[FSC_OP_ALL_REDUCE] = 1, r[0].comms[1].stats.bytes[FSC_OP_ALL_REDUCE] = 3e6;
    r[0].comms[2].stats.calls[FSC_OP_ALL_REDUCE] = 1, r[0].comms[2].stats.bytes[FSC_OP_ALL_REDUCE] = 1e6;
    fsc_plan_rates rt = {.flops_per_s = 1e12, .bytes_per_s = 1e12, .net_bytes_per_s = 1e10, .net_latency_s = 1e-5,
                         .node_ranks = 2, .node_bytes_per_s = 1e11, .node_latency_s = 1e-6};
    fsc_plan_step t;
    assert_int_equal(fsc_plan_time(&j, r, &rt, &t), FSC_OK);
    assert_int_equal(t.rank, 0);
    assert_near(t.comm_s, 1.2e-5 + 3.22e-4 + 1.2e-4, "two levels");
    rt.node_ranks = 0; /* one level: (2 + 2 + 6) x 1e-5 s + 5e6 / 1e10 */
    assert_int_equal(fsc_plan_time(&j, r, &rt, &t), FSC_OK);
    assert_near(t.comm_s, 1e-4 + 5e-4, "one level");
    rt.node_ranks = 4; /* every group on one node: 10 node latencies + 5e6 / 1e11 */
    assert_int_equal(fsc_plan_time(&j, r, &rt, &t), FSC_OK);
    assert_near(t.comm_s, 1e-5 + 5e-5, "one node");
    rt.node_ranks = -1;
    assert_int_equal(fsc_plan_time(&j, r, &rt, &t), FSC_ERR_INVALID);
    assert_non_null(strstr(fsc_last_error(), "node_ranks"));
    /* offload's work on the host: its bytes at the host's bandwidth, added to compute (free at bandwidth 0) */
    rt.node_ranks = 0;
    r[0].host_work_bytes = 3e9;
    assert_int_equal(fsc_plan_time(&j, r, &rt, &t), FSC_OK);
    assert_near(t.compute_s, 0, "host work at bandwidth 0");
    rt.host_bytes_per_s = 1e11;
    assert_int_equal(fsc_plan_time(&j, r, &rt, &t), FSC_OK);
    assert_near(t.compute_s, 0.03, "host work: 3e9 / 1e11 B/s");
    rt.host_bytes_per_s = -1;
    assert_int_equal(fsc_plan_time(&j, r, &rt, &t), FSC_ERR_INVALID);
    assert_non_null(strstr(fsc_last_error(), "host_bytes_per_s"));
    /* each kernel call's fixed cost, added to compute: 2000 calls at 5 us */
    rt.host_bytes_per_s = 0;
    r[0].kernel_calls = 2000;
    rt.kernel_s = 5e-6;
    assert_int_equal(fsc_plan_time(&j, r, &rt, &t), FSC_OK);
    assert_near(t.compute_s, 0.01, "kernel calls");
    rt.kernel_s = -1;
    assert_int_equal(fsc_plan_time(&j, r, &rt, &t), FSC_ERR_INVALID);
    assert_non_null(strstr(fsc_last_error(), "kernel_s"));
}

/* The simulator's network: each rank's booked seconds of a job's step (fsc_cluster_opts.sim_net_seconds of a run
 * of the setup and one step less those of the setup alone), on the counting device like the planner's run. */
typedef struct {
    const fsc_plan_job *job;
    int step;
} net_run;

static fsc_status net_rank(fsc_rank *r, void *arg) {
    const net_run *n = arg;
    const fsc_plan_job *j = n->job;
    fsc_engine *e = NULL;
    fsc_model *lm = NULL;
    fsc_status s;
    if (j->model == FSC_PLAN_LLAMA && j->po.tp > 1) {
        fsc_llama_build_arg ba = {.cfg = j->llama, .sp = j->sequence_parallel};
        s = fsc_engine_create_built(r, fsc_llama_build, &ba, &j->po, &j->oc, j->seed, &e);
    } else if (j->model == FSC_PLAN_LLAMA) {
        s = fsc_llama_model_create(r->dev, &j->llama, &lm);
        if (s == FSC_OK) s = fsc_engine_create_model(r, lm, &j->po, &j->oc, j->seed, &e);
    } else {
        s = fsc_engine_create(r, &j->gpt, &j->po, &j->oc, j->seed, &e);
    }
    const int T = j->model == FSC_PLAN_LLAMA ? j->llama.seq : j->gpt.seq;
    if (s == FSC_OK && n->step) {
        const int bl = j->batch / fsc_engine_layout(e)->dp;
        int32_t *tok = calloc((size_t)bl * (size_t)T + 1, sizeof *tok);
        fsc_step_info info = {0};
        s = !tok ? FSC_ERR_NOMEM
            : j->model == FSC_PLAN_LLAMA ? fsc_engine_step_model(e, tok, tok, bl, j->batch, &info)
                                         : fsc_engine_step(e, tok, tok, bl, j->batch, &info);
        free(tok);
    }
    fsc_engine_free(e);
    fsc_model_free(lm);
    return s;
}

/* The network: every link lat_us and gbps, and with node_ranks > 0 (two levels) the links within a node node_us and
 * node_gbps. */
typedef struct {
    double lat_us, gbps;
    int node_ranks;
    double node_us, node_gbps;
} sim_links;

static void sim_step_seconds(const fsc_plan_job *j, const sim_links *l, double *out) {
    double *setup = calloc((size_t)j->world, sizeof *setup);
    assert_non_null(setup);
    for (int step = 0; step < 2; step++) {
        fsc_cluster_opts co = fsc_cluster_opts_default();
        co.world = j->world;
        co.device = "count";
        co.threads_per_rank = 1;
        co.sim_latency_us = l->lat_us;
        co.sim_bandwidth_gbps = l->gbps;
        co.sim_node_ranks = l->node_ranks;
        co.sim_node_latency_us = l->node_us;
        co.sim_node_bandwidth_gbps = l->node_gbps;
        co.sim_net_seconds = step ? out : setup;
        net_run n = {j, step};
        if (fsc_cluster_run(&co, net_rank, &n) != FSC_OK) fail_msg("simulator: %s", fsc_last_error());
    }
    for (int i = 0; i < j->world; i++) out[i] -= setup[i];
    free(setup);
}

/* Oracle: the simulator. Every rank's communication time as fsc_plan_time costs it (each communicator at its own
 * size: hybrid sharding's shard and replica groups, the expert and expert-data groups, the tensor group, a
 * pipeline's links and the clipping norm's groups) equals the seconds the simulated network booked on that
 * rank's link for the same step (sim_net.c's ring costs of the calls it took part in). With node_ranks > 0 the
 * network has two levels (nodes of node_ranks ranks): each group's nodes and ranks on one node, found by the
 * planner from its ranks' group ids and by the simulator from its members' world ranks, must agree. */
static void check_comm_time_links(const char *name, const fsc_plan_job *j, int node_ranks) {
    const sim_links l = {.lat_us = 7, .gbps = 0.5, .node_ranks = node_ranks, .node_us = 1.5, .node_gbps = 4};
    fsc_plan_rank *r = calloc((size_t)j->world, sizeof *r), *one = calloc((size_t)j->world, sizeof *one);
    double *want = calloc((size_t)j->world, sizeof *want);
    assert_non_null(r);
    assert_non_null(one);
    assert_non_null(want);
    if (fsc_plan_memory(j, r) != FSC_OK) fail_msg("%s: plan: %s", name, fsc_last_error());
    sim_step_seconds(j, &l, want);
    const fsc_plan_rates rt = {.flops_per_s = 1e30, .bytes_per_s = 1e30, .net_bytes_per_s = l.gbps * 1e9,
                               .net_latency_s = l.lat_us * 1e-6, .node_ranks = node_ranks,
                               .node_bytes_per_s = l.node_gbps * 1e9, .node_latency_s = l.node_us * 1e-6};
    for (int i = 0; i < j->world; i++) {
        /* rank i's communication alone: the others keep their groups (the members) but no calls or work */
        for (int k = 0; k < j->world; k++) {
            one[k] = r[k];
            if (k == i) continue;
            for (int c = 0; c < one[k].ncomms; c++) one[k].comms[c].stats = (fsc_comm_stats){0};
            memset(one[k].work_flops, 0, sizeof one[k].work_flops);
            memset(one[k].work_bytes, 0, sizeof one[k].work_bytes);
        }
        fsc_plan_step t;
        assert_int_equal(fsc_plan_time(j, one, &rt, &t), FSC_OK);
        if (!(want[i] > 0) || t.rank != i || fabs(t.comm_s - want[i]) > 1e-9 * want[i])
            fail_msg("%s: rank %d: predicted communication %.9g s (slowest rank %d), the simulator booked %.9g s", name,
                     i, t.comm_s, t.rank, want[i]);
    }
    free(r);
    free(one);
    free(want);
}

static void check_comm_time(const char *name, const fsc_plan_job *j) { check_comm_time_links(name, j, 0); }

static void test_plan_comm_time_simulator(void **st) {
    (void)st;
    fsc_plan_job j = small_gpt(4, 4);
    j.po.kind = FSC_PAR_FSDP;
    j.po.shard = FSC_SHARD_HYBRID; /* shard groups of 2, replica groups of 2, the data group of 4 */
    check_comm_time("fsdp hybrid, world 4", &j);
    j.po.clip = 1.0f;
    check_comm_time("fsdp hybrid with clipping", &j);
    j = small_gpt(4, 4);
    j.gpt.moe_experts = 4;
    j.gpt.moe_top_k = 2;
    j.po.kind = FSC_PAR_FSDP;
    j.po.ep = 2; /* expert groups of 2, expert-data groups of 2 */
    check_comm_time("moe ep 2 x fsdp, world 4", &j);
    j = small_gpt(4, 4);
    j.po.kind = FSC_PAR_DDP;
    j.po.pp = 2;
    j.po.accum = 2;
    j.po.schedule = FSC_SCHED_1F1B;
    j.po.clip = 1.0f;
    check_comm_time("pp 2 x dp 2, 1f1b, clipping", &j);
    j = small_llama(4, 2);
    j.po.kind = FSC_PAR_FSDP;
    j.po.tp = 2;
    j.sequence_parallel = 1;
    check_comm_time("llama tp 2 x fsdp 2, sequence parallel", &j);
    j = small_gpt(4, 4);
    j.po.kind = FSC_PAR_ZERO2;
    check_comm_time("zero2, world 4", &j);
    /* two levels, nodes of 2 ranks: the data group of 4 spans 2 nodes with 2 on each, hybrid's shard groups are
     * on one node and its replica groups on two with one on each, a pipeline's links cross nodes */
    check_comm_time_links("zero2, world 4, nodes of 2", &j, 2);
    j.po.kind = FSC_PAR_FSDP;
    j.po.shard = FSC_SHARD_HYBRID;
    j.po.clip = 1.0f;
    check_comm_time_links("fsdp hybrid with clipping, nodes of 2", &j, 2);
    j = small_gpt(4, 4);
    j.gpt.moe_experts = 4;
    j.gpt.moe_top_k = 2;
    j.po.kind = FSC_PAR_FSDP;
    j.po.ep = 2;
    check_comm_time_links("moe ep 2 x fsdp, nodes of 2", &j, 2);
    j = small_gpt(4, 4);
    j.po.kind = FSC_PAR_DDP;
    j.po.pp = 2;
    j.po.accum = 2;
    j.po.schedule = FSC_SCHED_1F1B;
    check_comm_time_links("pp 2 x dp 2, 1f1b, nodes of 2", &j, 2);
    check_comm_time_links("pp 2 x dp 2, 1f1b, nodes of 3", &j, 3); /* nodes {0 1 2} {3}: uneven */
    fsc_cluster_opts co = fsc_cluster_opts_default(); /* the simulator refuses bad node links */
    co.sim_node_ranks = -1;
    net_run n = {&j, 0};
    assert_int_equal(fsc_cluster_run(&co, net_rank, &n), FSC_ERR_INVALID);
    assert_non_null(strstr(fsc_last_error(), "sim_node_ranks -1"));
    co.sim_node_ranks = 2, co.sim_node_latency_us = -1;
    assert_int_equal(fsc_cluster_run(&co, net_rank, &n), FSC_ERR_INVALID);
    assert_non_null(strstr(fsc_last_error(), "sim_node_latency_us -1"));
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
    fsc_plan_rank r[2], none[2];
    assert_int_equal(fsc_plan_memory(&j, r), FSC_OK); /* the host's step: AdamW reads 4 and writes 3 f32 arrays */
    j.po.offload = FSC_OFFLOAD_NONE;
    assert_int_equal(fsc_plan_memory(&j, none), FSC_OK);
    assert_true(none[0].host_work_bytes == 0);
    assert_true(r[0].host_work_bytes >= 7.0 * 4 * (double)r[0].host_peak[FSC_TAG_OPTIM] / 8);
    j.po.offload = FSC_OFFLOAD_OPTIM;
    j.po.offload = FSC_OFFLOAD_ALL;
    check_job("fsdp offload all", &j);
    j.po.kind = FSC_PAR_ZERO1;
    j.po.offload = FSC_OFFLOAD_OPTIM;
    check_job("zero1 offload optim", &j);
    /* with tensor parallelism: each rank's slices offloaded as a model of their own */
    j = small_gpt(4, 2);
    j.po.kind = FSC_PAR_FSDP;
    j.po.tp = 2;
    j.po.sequence_parallel = 1;
    j.po.clip = 1.0f; /* the norm over the tensor and data groups, on the host under all */
    j.po.offload = FSC_OFFLOAD_ALL;
    check_job("tp 2 x fsdp 2, sequence parallel, offload all", &j);
    j.po.kind = FSC_PAR_ZERO2;
    j.po.offload = FSC_OFFLOAD_OPTIM;
    check_job("tp 2 x zero2 2, sequence parallel, offload optim", &j);
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
    /* zb-h1's tied vocab-parallel head runs whole in B, its record (the logits) in the whole area: the last stage's
     * record is then small enough to be real memory on the counting device, where the head's loss, made from its
     * statistics in the (fake, zero) scratch, was log 0 = -inf and the plan stopped as a non-finite step */
    j = small_gpt(8, 2);
    j.gpt = (fsc_gpt_config){.layers = 6, .dim = 32, .heads = 2, .seq = 16, .vocab = 8192};
    j.po.kind = FSC_PAR_DDP;
    j.po.tp = 2, j.po.pp = 4, j.po.accum = 2;
    j.po.schedule = FSC_SCHED_ZB_H1;
    check_job("zb-h1, tp 2 x pp 4, vocabulary 8192", &j);
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

/* The exact reduction (po.reduce_exact): its int64 buffers, shadows and records planned as the cpu device runs
 * them, also where a gradient's reduction group is one rank (a data group of 1 under tp 2, an expert-data group of
 * 1 under ep 2 at world 2), which the cpu device converts straight into the reduced gradient's shadow. */
static void test_plan_exact(void **st) {
    (void)st;
    fsc_plan_job j = small_gpt(2, 4);
    j.po.reduce_exact = 1;
    j.po.kind = FSC_PAR_FSDP;
    j.po.accum = 2;
    check_job("exact, fsdp 2, accum 2", &j);
    j = small_gpt(1, 2);
    j.po.reduce_exact = 1;
    check_job("exact, one rank", &j);
    j = small_llama(2, 2);
    j.po.reduce_exact = 1;
    j.po.kind = FSC_PAR_DDP;
    j.po.tp = 2;
    check_job("exact, llama tp 2", &j);
    j = small_gpt(2, 2);
    j.gpt.moe_experts = 4;
    j.po.reduce_exact = 1;
    j.po.kind = FSC_PAR_ZERO2;
    j.po.ep = 2;
    check_job("exact, moe ep 2, zero2", &j);
    j.po.kind = FSC_PAR_FSDP;
    check_job("exact, moe ep 2, fsdp", &j);
}

/* The job of a configuration text (fsc_plan_job.config, any family's) plans what the job of the same model's
 * struct plans, field for field (peaks, work, collectives), and its prediction equals its measured run. */
static void same_plan(const char *name, const fsc_plan_job *a, const fsc_plan_job *b) {
    fsc_plan_rank *ra = calloc((size_t)a->world, sizeof *ra), *rb = calloc((size_t)a->world, sizeof *rb);
    assert_non_null(ra);
    assert_non_null(rb);
    if (fsc_plan_memory(a, ra) != FSC_OK) fail_msg("%s: the struct's plan: %s", name, fsc_last_error());
    if (fsc_plan_memory(b, rb) != FSC_OK) fail_msg("%s: the text's plan: %s", name, fsc_last_error());
    for (int r = 0; r < a->world; r++) {
        for (int t = 0; t < FSC_TAG_COUNT; t++)
            if (ra[r].peak[t] != rb[r].peak[t] || ra[r].host_peak[t] != rb[r].host_peak[t])
                fail_msg("%s: rank %d %s: the struct %zu (host %zu), the text %zu (host %zu)", name, r,
                         fsc_tag_name((fsc_tag)t), ra[r].peak[t], ra[r].host_peak[t], rb[r].peak[t],
                         rb[r].host_peak[t]);
        assert_int_equal(ra[r].peak_total, rb[r].peak_total);
        assert_true(ra[r].gemm_flops > 0 && ra[r].gemm_flops == rb[r].gemm_flops);
        assert_true(ra[r].kernel_calls == rb[r].kernel_calls);
        for (int i = 0; i < FSC_PLAN_BINS; i++)
            assert_true(ra[r].work_flops[i] == rb[r].work_flops[i] && ra[r].work_bytes[i] == rb[r].work_bytes[i]);
        for (int g = 0; g < FSC_GROUP_COUNT; g++) assert_true(ra[r].comm_bytes[g] == rb[r].comm_bytes[g]);
    }
    free(ra);
    free(rb);
    check_job(name, b);
}

static void test_plan_config_text(void **st) {
    (void)st;
    char text[1024];
    fsc_plan_job a = small_gpt(1, 2), b = a;
    fsc_gpt_config_json(&a.gpt, text, sizeof text);
    b.gpt = (fsc_gpt_config){0}; /* not read with a text */
    b.config = text;
    same_plan("gpt2 text, one rank", &a, &b);
    a = small_gpt(2, 2), a.po.kind = FSC_PAR_FSDP;
    b = a, b.config = text;
    same_plan("gpt2 text, fsdp 2", &a, &b);
    a = small_llama(2, 2), a.po.kind = FSC_PAR_DDP, a.po.tp = 2;
    fsc_llama_config_json(&a.llama, text, sizeof text);
    b = a, b.model = FSC_PLAN_GPT, b.config = text;
    same_plan("llama text, tp 2", &a, &b);
    fsc_plan_rank r[1];
    b = small_gpt(1, 1), b.config = "{\"family\":\"no-such\",\"layers\":2}";
    assert_int_not_equal(fsc_plan_memory(&b, r), FSC_OK);
    if (!strstr(fsc_last_error(), "no-such")) fail_msg("an unknown family's text: '%s'", fsc_last_error());
}

/* Oracle: the formula where it is exact. With prefetch 0 every kernel and collective of a step runs one after
 * another on every rank, and the ranks of DDP, FSDP and ZeRO do the same work, so no rank waits for another: the
 * replayed step (each kernel's roofline time on the modelled clock, each collective the network's ring time) is
 * compute + comm, the formula's terms of the same step's counts (fsc_plan_replay returns them; the rates put the
 * ridge point on a bin's edge, so the bins' roofline is each call's). With prefetch the replay overlaps what the
 * engine overlaps: between max(compute, comm) and their sum (to 1e-5). */
static void check_replay_at(const char *name, fsc_plan_job j, int serial, const fsc_plan_rates *rates) {
    const fsc_plan_rates rt = *rates;
    fsc_plan_step p;
    j.po.prefetch = !serial;
    if (fsc_plan_replay(&j, &rt, &p) != FSC_OK) fail_msg("%s: replay: %s", name, fsc_last_error());
    const fsc_plan_step f = p; /* the formula's terms */
    if (!(f.compute_s > 0) || !(f.comm_s > 0)) fail_msg("%s: compute %g s, comm %g s", name, f.compute_s, f.comm_s);
    const double lo = f.compute_s > f.comm_s ? f.compute_s : f.comm_s, hi = f.compute_s + f.comm_s;
    if (serial && fabs(p.step_s - hi) > 1e-7 * hi) /* 1e-7: the sums' rounding (the clock adds call by call) */
        fail_msg("%s: replayed %.9f s, want compute %.9f + comm %.9f = %.9f", name, p.step_s, f.compute_s, f.comm_s,
                 hi);
    if (!serial && !(p.step_s >= lo * (1 - 1e-5) && p.step_s <= hi * (1 + 1e-5)))
        fail_msg("%s: replayed %.9f s, want between max(compute, comm) %.9f and their sum %.9f", name, p.step_s,
                 lo, hi);
}

static void check_replay(const char *name, fsc_plan_job j, int serial) {
    const fsc_plan_rates rt = {.flops_per_s = 4e9, .bytes_per_s = 2e9, .net_bytes_per_s = 0.5e9,
                               .net_latency_s = 20e-6, .host_bytes_per_s = 2e9};
    check_replay_at(name, j, serial, &rt);
}

/* Two levels of links (nodes of 2 ranks, world 4: the data group spans 2 nodes with 2 ranks on each), the
 * formula's comm the two-level model's. */
static void check_replay_nodes(const char *name, fsc_plan_job j, int serial) {
    const fsc_plan_rates rt = {.flops_per_s = 4e9, .bytes_per_s = 2e9, .net_bytes_per_s = 0.5e9,
                               .net_latency_s = 20e-6, .host_bytes_per_s = 2e9, .node_ranks = 2,
                               .node_bytes_per_s = 4e9, .node_latency_s = 2e-6};
    check_replay_at(name, j, serial, &rt);
}

static void test_plan_replay(void **st) {
    (void)st;
    fsc_plan_job j = small_gpt(2, 4);
    j.po.kind = FSC_PAR_DDP;
    check_replay("ddp, world 2, prefetch 0", j, 1);
    check_replay("ddp, world 2, prefetch 1", j, 0);
    j.po.kind = FSC_PAR_FSDP;
    check_replay("fsdp, world 2, prefetch 0", j, 1);
    check_replay("fsdp, world 2, prefetch 1", j, 0);
    j.po.kind = FSC_PAR_ZERO2;
    check_replay("zero2, world 2, prefetch 0", j, 1);
    /* offload's copies over a modelled link (the simulator's sim_copy_gbps) lengthen the replayed step, the formula
     * does not cost them */
    fsc_plan_job o = small_gpt(2, 4);
    o.po.kind = FSC_PAR_ZERO1;
    o.po.offload = FSC_OFFLOAD_OPTIM;
    fsc_plan_rates rt = {.flops_per_s = 4e9, .bytes_per_s = 2e9, .host_bytes_per_s = 2e9};
    fsc_plan_step free_copies, slow_copies;
    assert_int_equal(fsc_plan_replay(&o, &rt, &free_copies), FSC_OK);
    rt.copy_bytes_per_s = 1e8;
    assert_int_equal(fsc_plan_replay(&o, &rt, &slow_copies), FSC_OK);
    if (!(slow_copies.step_s > free_copies.step_s * 1.01))
        fail_msg("offload optim: copies at 0.1 GB/s replayed %.6f s, free %.6f s", slow_copies.step_s,
                 free_copies.step_s);
    if (fabs(slow_copies.compute_s + slow_copies.comm_s - free_copies.compute_s - free_copies.comm_s) >
        1e-9 * free_copies.compute_s)
        fail_msg("offload optim: the formula's terms moved with the copy rate");
    rt.copy_bytes_per_s = -1; /* a bad rate is refused, not taken for free copies */
    assert_int_equal(fsc_plan_replay(&o, &rt, &slow_copies), FSC_ERR_INVALID);
    assert_non_null(strstr(fsc_last_error(), "copy_bytes_per_s is -1"));
}

/* The replay on two levels of links: the same oracle on a cluster of 2 nodes of 2 ranks; and the levels count (the
 * step on the same network as one level differs by what its node-local calls save). */
static void test_plan_replay_two_levels(void **st) {
    (void)st;
    fsc_plan_job j = small_gpt(4, 8);
    /* width 128: fsdp's units' shards at world 4 pass FSC_COUNT_REAL_MAX, so its collectives move no data; width 64
     * below: they are real memory, staged through host memory by the simulated communicator */
    j.gpt.dim = 128;
    j.po.kind = FSC_PAR_DDP;
    check_replay_nodes("ddp, 2 nodes of 2, prefetch 0", j, 1);
    check_replay_nodes("ddp, 2 nodes of 2, prefetch 1", j, 0);
    j.po.kind = FSC_PAR_FSDP;
    check_replay_nodes("fsdp, 2 nodes of 2, prefetch 0", j, 1);
    check_replay_nodes("fsdp, 2 nodes of 2, prefetch 1", j, 0);
    j.po.kind = FSC_PAR_ZERO2;
    check_replay_nodes("zero2, 2 nodes of 2, prefetch 0", j, 1);
    j.po.kind = FSC_PAR_FSDP;
    j.po.shard = FSC_SHARD_HYBRID; /* shard groups of 2 on a node, replica groups of 2 across */
    j.po.prefetch = 0;
    fsc_plan_rates rt = {.flops_per_s = 4e9, .bytes_per_s = 2e9, .net_bytes_per_s = 0.5e9, .net_latency_s = 20e-6,
                         .host_bytes_per_s = 2e9, .node_ranks = 2, .node_bytes_per_s = 4e9, .node_latency_s = 2e-6};
    fsc_plan_step two, one;
    assert_int_equal(fsc_plan_replay(&j, &rt, &two), FSC_OK);
    rt.node_ranks = 0;
    assert_int_equal(fsc_plan_replay(&j, &rt, &one), FSC_OK);
    if (!(two.comm_s < one.comm_s * 0.9) || !(two.step_s < one.step_s))
        fail_msg("fsdp hybrid: two levels replayed %.6f s (comm %.6f), one level %.6f s (comm %.6f)", two.step_s,
                 two.comm_s, one.step_s, one.comm_s);
    check_replay_nodes("fsdp hybrid, 2 nodes of 2, prefetch 0", j, 1);
}

/* A kernel call's fixed cost (a GPU's launch) in the formula, on a planned job's counts: 0 is the roofline alone;
 * at 4 us every rank's compute (and so its step, prefetch 0) grows by exactly its kernel_calls x 4 us, reported as
 * calls and calls_s; a pipeline's by that times its bubble; a negative or NaN cost is refused, naming it. */
static void test_plan_time_launch(void **st) {
    (void)st;
    fsc_plan_job j = small_gpt(2, 4);
    j.po.kind = FSC_PAR_FSDP;
    j.po.prefetch = 0;
    fsc_plan_rank r[2];
    assert_int_equal(fsc_plan_memory(&j, r), FSC_OK);
    assert_true(r[0].kernel_calls > 100);
    fsc_plan_rates rt = {.flops_per_s = 1e12, .bytes_per_s = 1e11, .net_bytes_per_s = 1e10, .net_latency_s = 1e-5};
    fsc_plan_step t0, t4;
    assert_int_equal(fsc_plan_time(&j, r, &rt, &t0), FSC_OK);
    assert_true(t0.calls_s == 0 && t0.calls == r[t0.rank].kernel_calls);
    rt.kernel_s = 4e-6;
    assert_int_equal(fsc_plan_time(&j, r, &rt, &t4), FSC_OK);
    assert_int_equal(t4.rank, t0.rank);
    assert_near(t4.calls_s, r[t4.rank].kernel_calls * 4e-6, "calls x 4 us");
    assert_near(t4.compute_s - t0.compute_s, r[t4.rank].kernel_calls * 4e-6, "compute grows by the calls' cost");
    assert_near(t4.step_s - t0.step_s, r[t4.rank].kernel_calls * 4e-6, "so does the step (prefetch 0)");
    assert_true(t4.comm_s == t0.comm_s);
    fsc_plan_job p = small_gpt(2, 4); /* 2 stages of 4 micro-batches: the calls' cost x (4 + 1) / 4 too */
    p.po.pp = 2, p.po.accum = 4, p.po.prefetch = 0;
    fsc_plan_rank pr[2];
    assert_int_equal(fsc_plan_memory(&p, pr), FSC_OK);
    assert_int_equal(fsc_plan_time(&p, pr, &rt, &t4), FSC_OK);
    assert_near(t4.calls_s, pr[t4.rank].kernel_calls * 4e-6 * 5 / 4, "a pipeline's calls, with its bubble");
    /* each schedule's own bubble, equal F, B and W: 4 blocks on 2 ranks, 4 micro-batches; interleaved's 2 chunks
     * (2 x 4 + 1) / (2 x 4), zb-h1's (3 x 4 + 1) / (3 x 4), zbv's fill (6 x 4 + 1) / (6 x 4); 1f1b's as gpipe's;
     * a custom list with Ws over 2 chunks in a loop (an interleaved zero bubble) as zbv's, without Ws as
     * interleaved's */
    fsc_pipe_action il[2][16], zb[2][24]; /* interleaved's lists, and the same with each B's W right after it */
    int nil[2] = {0, 0}, nzb[2] = {0, 0};
    for (int rk = 0; rk < 2; rk++) {
        fsc_pipe_action *a = NULL;
        assert_int_equal(fsc_pipe_schedule_make(FSC_SCHED_INTERLEAVED, 2, 2, 4, rk, &a, &nil[rk]), FSC_OK);
        assert_int_equal(nil[rk], 16);
        for (int i = 0; i < nil[rk]; i++) {
            il[rk][i] = zb[rk][nzb[rk]++] = a[i];
            if (a[i].kind == FSC_ACT_BACKWARD)
                zb[rk][nzb[rk]++] = (fsc_pipe_action){FSC_ACT_WEIGHT, a[i].micro, a[i].chunk};
        }
        fsc_pipe_schedule_free(a);
    }
    const fsc_pipe_action *const lw[] = {zb[0], zb[1]}, *const lf[] = {il[0], il[1]};
    const struct {
        fsc_pipe_schedule sched;
        int v;
        const fsc_pipe_action *const *actions;
        const int *n;
        double factor;
    } sc[] = {{FSC_SCHED_GPIPE, 1, NULL, NULL, 5.0 / 4},       {FSC_SCHED_1F1B, 1, NULL, NULL, 5.0 / 4},
              {FSC_SCHED_INTERLEAVED, 2, NULL, NULL, 9.0 / 8}, {FSC_SCHED_ZB_H1, 1, NULL, NULL, 13.0 / 12},
              {FSC_SCHED_ZBV, 1, NULL, NULL, 25.0 / 24},       {FSC_SCHED_CUSTOM, 2, lw, nzb, 25.0 / 24},
              {FSC_SCHED_CUSTOM, 2, lf, nil, 9.0 / 8}};
    for (size_t k = 0; k < sizeof sc / sizeof sc[0]; k++) {
        fsc_plan_job q = p;
        q.gpt.layers = 4, q.po.schedule = sc[k].sched, q.po.virtual_stages = sc[k].v, q.po.prefetch = 1;
        if (sc[k].actions) q.po.actions = sc[k].actions, q.po.nactions = sc[k].n;
        if (fsc_plan_memory(&q, pr) != FSC_OK) fail_msg("row %zu: %s", k, fsc_last_error());
        assert_int_equal(fsc_plan_time(&q, pr, &rt, &t4), FSC_OK);
        if (fabs(t4.calls_s - pr[t4.rank].kernel_calls * 4e-6 * sc[k].factor) > 1e-12 * t4.calls_s)
            fail_msg("row %zu: calls_s %.9g, want %.0f calls x 4 us x %.6f", k, t4.calls_s,
                     pr[t4.rank].kernel_calls, sc[k].factor);
    }
    const double bad[] = {-1e-6, NAN};
    for (int k = 0; k < 2; k++) {
        rt.kernel_s = bad[k];
        assert_int_equal(fsc_plan_time(&j, r, &rt, &t4), FSC_ERR_INVALID);
        if (!strstr(fsc_last_error(), "kernel_s is")) fail_msg("kernel_s %g: '%s'", bad[k], fsc_last_error());
        assert_int_equal(fsc_plan_replay(&j, &rt, &t4), FSC_ERR_INVALID);
        if (!strstr(fsc_last_error(), "fsc_plan_replay: kernel_s")) fail_msg("replay, kernel_s %g: '%s'", bad[k],
                                                                           fsc_last_error());
    }
}

/* The oracle where the collectives carry data: at width 64 and world 4 fsdp's and zero's shards are under
 * FSC_COUNT_REAL_MAX, so the simulated communicator stages them through host memory with the counting device's
 * copies. Those copies stand for the network's part of a call (a real communicator moves the data itself, in the
 * time the ring model gives the call): neither the formula's compute nor the replayed clock counts them (the
 * formula counted them once, and the replay came out 9% under compute + comm). One level and two; and with a
 * kernel call's fixed cost, which each counted call adds to both. */
static void test_plan_replay_small_shards(void **st) {
    (void)st;
    fsc_plan_job j = small_gpt(4, 8);
    const fsc_parallel_kind kinds[] = {FSC_PAR_DDP, FSC_PAR_FSDP, FSC_PAR_ZERO2};
    const char *names[] = {"ddp", "fsdp", "zero2"};
    for (int k = 0; k < 3; k++) {
        char name[96];
        j.po.kind = kinds[k];
        snprintf(name, sizeof name, "%s, width 64, world 4, prefetch 0", names[k]);
        check_replay(name, j, 1);
        snprintf(name, sizeof name, "%s, width 64, 2 nodes of 2, prefetch 0", names[k]);
        check_replay_nodes(name, j, 1);
    }
    j.po.kind = FSC_PAR_FSDP;
    check_replay("fsdp, width 64, world 4, prefetch 1", j, 0);
    const fsc_plan_rates rt = {.flops_per_s = 4e9, .bytes_per_s = 2e9, .net_bytes_per_s = 0.5e9,
                               .net_latency_s = 20e-6, .host_bytes_per_s = 2e9, .kernel_s = 5e-6};
    check_replay_at("fsdp, width 64, world 4, prefetch 0, 5 us a call", j, 1, &rt);
    fsc_plan_job o = small_gpt(2, 4); /* offload: the host's calls cost no launch, in the formula and the replay */
    o.po.kind = FSC_PAR_ZERO1;
    o.po.offload = FSC_OFFLOAD_OPTIM;
    check_replay_at("zero1 offload optim, world 2, prefetch 0, 5 us a call", o, 1, &rt);
    /* the staged collectives' copies are not the rank's calls: fsdp counts as many calls as at width 128, where
     * no collective stages */
    fsc_plan_rank r64[4], r128[4];
    assert_int_equal(fsc_plan_memory(&j, r64), FSC_OK);
    j.gpt.dim = 128;
    assert_int_equal(fsc_plan_memory(&j, r128), FSC_OK);
    if (r64[0].kernel_calls != r128[0].kernel_calls)
        fail_msg("fsdp, world 4: %g calls at width 64, %g at width 128", r64[0].kernel_calls, r128[0].kernel_calls);
}

/* One rank per role (fsc_plan_memory's way) plans what every rank running its step plans: per rank, every peak and
 * host peak, the coordinates, the work bins, FLOPs and calls, the collectives' calls and bytes per group and per
 * communicator (with its own id). *stepped: how many ranks ran the step with the shortcut. */
static void same_comm_stats(const char *name, int r, const char *what, const fsc_comm_stats *a, const fsc_comm_stats *b) {
    for (int op = 0; op < FSC_OP_COUNT; op++)
        if (a->calls[op] != b->calls[op] || a->bytes[op] != b->bytes[op])
            fail_msg("%s: rank %d %s %s: %llu calls %.0f bytes by role, %llu and %.0f every rank", name, r, what,
                     fsc_comm_op_name((fsc_comm_op)op), (unsigned long long)a->calls[op], a->bytes[op],
                     (unsigned long long)b->calls[op], b->bytes[op]);
}

static int check_roles(const char *name, const fsc_plan_job *j) {
    fsc_plan_rank *a = calloc((size_t)j->world, sizeof *a), *b = calloc((size_t)j->world, sizeof *b);
    assert_non_null(a);
    assert_non_null(b);
    int stepped = -1, all = -1;
    if (plan_memory_roles(j, a, 1, &stepped) != FSC_OK) fail_msg("%s: by role: %s", name, fsc_last_error());
    if (plan_memory_roles(j, b, 0, &all) != FSC_OK) fail_msg("%s: every rank: %s", name, fsc_last_error());
    assert_int_equal(all, j->world);
    for (int r = 0; r < j->world; r++) {
        const fsc_plan_rank *x = &a[r], *y = &b[r];
        for (int t = 0; t < FSC_TAG_COUNT; t++)
            if (x->peak[t] != y->peak[t] || x->host_peak[t] != y->host_peak[t])
                fail_msg("%s: rank %d %s: by role %zu (host %zu), every rank %zu (host %zu)", name, r,
                         fsc_tag_name((fsc_tag)t), x->peak[t], x->host_peak[t], y->peak[t], y->host_peak[t]);
        assert_int_equal(x->peak_total, y->peak_total);
        assert_int_equal(x->host_peak_total, y->host_peak_total);
        assert_int_equal(x->has_host, y->has_host);
        assert_int_equal(x->tensor, y->tensor);
        assert_int_equal(x->data, y->data);
        assert_int_equal(x->stage, y->stage);
        if (x->gemm_flops != y->gemm_flops || x->kernel_calls != y->kernel_calls || x->host_work_bytes != y->host_work_bytes)
            fail_msg("%s: rank %d: by role %.0f FLOPs %.0f calls %.0f host bytes, every rank %.0f, %.0f, %.0f", name, r,
                     x->gemm_flops, x->kernel_calls, x->host_work_bytes, y->gemm_flops, y->kernel_calls, y->host_work_bytes);
        for (int i = 0; i < FSC_PLAN_BINS; i++)
            if (x->work_flops[i] != y->work_flops[i] || x->work_bytes[i] != y->work_bytes[i])
                fail_msg("%s: rank %d bin %d: by role %.0f FLOPs %.0f bytes, every rank %.0f and %.0f", name, r, i,
                         x->work_flops[i], x->work_bytes[i], y->work_flops[i], y->work_bytes[i]);
        for (int g = 0; g < FSC_GROUP_COUNT; g++) {
            assert_int_equal(x->group_size[g], y->group_size[g]);
            assert_true(x->comm_bytes[g] == y->comm_bytes[g]);
            same_comm_stats(name, r, fsc_group_kind_name((fsc_group_kind)g), &x->comm[g], &y->comm[g]);
        }
        assert_int_equal(x->ncomms, y->ncomms);
        for (int k = 0; k < x->ncomms; k++) {
            assert_true(x->comms[k].id == y->comms[k].id);
            assert_int_equal(x->comms[k].kind, y->comms[k].kind);
            assert_int_equal(x->comms[k].size, y->comms[k].size);
            same_comm_stats(name, r, "communicator", &x->comms[k].stats, &y->comms[k].stats);
        }
    }
    free(a);
    free(b);
    return stepped;
}

static void test_plan_roles(void **st) {
    (void)st;
    static const struct {
        const char *name;
        fsc_parallel_kind kind;
        fsc_shard_strategy shard;
        int world, tp, pp, ep, accum, offload, moe, llama, sp, most; /* most: ranks that may run the step */
        int decay; /* 0: AdamW's default decay (matrices), 1: no weight decay, 2: decay_all */
    } rows[] = {
        /* ddp: the first data rank and one for the others */
        {"ddp world 4", FSC_PAR_DDP, FSC_SHARD_FULL, 4, 1, 1, 1, 1, 0, 0, 0, 0, 2, 0},
        {"ddp world 8, accum 2", FSC_PAR_DDP, FSC_SHARD_FULL, 8, 1, 1, 1, 2, 0, 0, 0, 0, 2, 0},
        {"pipeline 2 x dp 3", FSC_PAR_DDP, FSC_SHARD_FULL, 6, 1, 2, 1, 2, 0, 0, 0, 0, 4, 0},
        {"llama tp 2 x pp 2 x dp 2", FSC_PAR_DDP, FSC_SHARD_FULL, 8, 2, 2, 1, 2, 0, 0, 1, 0, 8, 0},
        {"llama tp 2 x pp 2 x dp 4", FSC_PAR_DDP, FSC_SHARD_FULL, 16, 2, 2, 1, 2, 0, 0, 1, 0, 8, 0},
        {"llama tp 2 x dp 3, sequence parallel", FSC_PAR_DDP, FSC_SHARD_FULL, 6, 2, 1, 1, 1, 0, 0, 1, 1, 4, 0},
        {"moe ep 2 x dp 4", FSC_PAR_DDP, FSC_SHARD_FULL, 8, 1, 1, 2, 1, 0, 1, 0, 0, 8, 0},
        /* sharded: each shard's place is its own role, but hybrid's replicas */
        {"fsdp world 4", FSC_PAR_FSDP, FSC_SHARD_FULL, 4, 1, 1, 1, 1, 0, 0, 0, 0, 4, 0},
        {"fsdp hybrid world 8", FSC_PAR_FSDP, FSC_SHARD_HYBRID, 8, 1, 1, 1, 1, 0, 0, 0, 0, 8, 0},
        {"fsdp hybrid world 8, offload all", FSC_PAR_FSDP, FSC_SHARD_HYBRID, 8, 1, 1, 1, 1, 2, 0, 0, 0, 8, 0},
        {"zero1 world 3", FSC_PAR_ZERO1, FSC_SHARD_FULL, 3, 1, 1, 1, 1, 0, 0, 0, 0, 3, 0},
        {"zero2 world 4, offload optim", FSC_PAR_ZERO2, FSC_SHARD_FULL, 4, 1, 1, 1, 1, 1, 0, 0, 0, 4, 0},
        /* no ranges without decay: the shards of equal size share a role (the first data rank and one for the
         * others, as ddp; hybrid: first or not in each of its two groups; the ledger and segment lengths tell apart
         * the ranks of unequal shards) */
        {"fsdp world 4, no weight decay", FSC_PAR_FSDP, FSC_SHARD_FULL, 4, 1, 1, 1, 1, 0, 0, 0, 0, 2, 1},
        {"fsdp world 8, decay_all", FSC_PAR_FSDP, FSC_SHARD_FULL, 8, 1, 1, 1, 1, 0, 0, 0, 0, 2, 2},
        {"fsdp hybrid world 8, no weight decay", FSC_PAR_FSDP, FSC_SHARD_HYBRID, 8, 1, 1, 1, 1, 0, 0, 0, 0, 4, 1},
        {"fsdp world 4, offload all, decay_all", FSC_PAR_FSDP, FSC_SHARD_FULL, 4, 1, 1, 1, 1, 2, 0, 0, 0, 2, 2},
        {"zero1 world 3, no weight decay", FSC_PAR_ZERO1, FSC_SHARD_FULL, 3, 1, 1, 1, 1, 0, 0, 0, 0, 3, 1},
        {"zero2 world 4, offload optim, decay_all", FSC_PAR_ZERO2, FSC_SHARD_FULL, 4, 1, 1, 1, 1, 1, 0, 0, 0, 4, 2},
        /* with tp the clipping norm's pieces differ by data rank (which tensors of its shard tp splits) */
        {"llama fsdp tp 2 x dp 4, no weight decay", FSC_PAR_FSDP, FSC_SHARD_FULL, 8, 2, 1, 1, 1, 0, 0, 1, 0, 8, 1},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        fsc_plan_job j = rows[i].llama ? small_llama(rows[i].world, rows[i].world) : small_gpt(rows[i].world, rows[i].world);
        j.po.kind = rows[i].kind;
        j.po.shard = rows[i].shard;
        j.po.tp = rows[i].tp;
        j.po.pp = rows[i].pp;
        j.po.ep = rows[i].ep;
        j.po.accum = rows[i].accum;
        j.po.clip = 1.0f;
        j.po.offload = rows[i].offload == 2 ? FSC_OFFLOAD_ALL : rows[i].offload ? FSC_OFFLOAD_OPTIM : FSC_OFFLOAD_NONE;
        j.sequence_parallel = rows[i].sp;
        if (rows[i].pp > 1) j.po.schedule = FSC_SCHED_1F1B;
        if (rows[i].moe) j.gpt.moe_experts = 4, j.gpt.moe_top_k = 2;
        if (rows[i].accum > 1) j.batch *= rows[i].accum;
        if (rows[i].decay == 1) j.oc.weight_decay = 0.0f;
        if (rows[i].decay == 2) j.oc.decay_all = 1;
        const int stepped = check_roles(rows[i].name, &j);
        if (stepped < 1 || stepped > rows[i].most)
            fail_msg("%s: %d of %d ranks ran the step, want 1 to %d", rows[i].name, stepped, j.world, rows[i].most);
        print_message("%-40s %d of %d ranks ran the step\n", rows[i].name, stepped, j.world);
    }
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
    j.po.tp = 2; /* 3 heads (width 48: a valid GPT) do not split over a tensor group of 2 */
    j.gpt.heads = 3, j.gpt.dim = 48;
    assert_int_not_equal(fsc_plan_memory(&j, r), FSC_OK);
    assert_non_null(strstr(fsc_last_error(), "3 heads do not split over a tensor group of 2"));
}

int main(void) {
    if (getenv("FSC_TEST_FILTER")) cmocka_set_test_filter(getenv("FSC_TEST_FILTER")); /* one test: its name */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_single_rank),
        cmocka_unit_test(test_plan_gemm_flops),
        cmocka_unit_test(test_plan_kernel_work),
        cmocka_unit_test(test_plan_attention_bulk),
        cmocka_unit_test(test_plan_whole_products),
        cmocka_unit_test(test_plan_step_work),
        cmocka_unit_test(test_plan_time_arithmetic),
        cmocka_unit_test(test_plan_time_two_levels),
        cmocka_unit_test(test_plan_comm_time_simulator),
        cmocka_unit_test(test_plan_strategies),
        cmocka_unit_test(test_plan_precision_checkpoint_accum),
        cmocka_unit_test(test_plan_offload),
        cmocka_unit_test(test_plan_pipeline_tensor),
        cmocka_unit_test(test_plan_moe),
        cmocka_unit_test(test_plan_exact),
        cmocka_unit_test(test_plan_config_text),
        cmocka_unit_test(test_plan_roles),
        cmocka_unit_test(test_plan_bad_jobs),
        cmocka_unit_test(test_plan_replay),
        cmocka_unit_test(test_plan_replay_two_levels),
        cmocka_unit_test(test_plan_replay_small_shards),
        cmocka_unit_test(test_plan_time_launch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
