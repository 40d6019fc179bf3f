/* Tests of the FLOPs the trainer's MFU divides by (model.h's flops operation, fsc_model_flops,
 * fsc_gpt_flops_per_token, the Llama's and tensor parallelism's) and of the measured gemm rate (lib/core/peak.c).
 * Oracles: GPT-2 small (124M) gives nanoGPT's estimate_mfu count, 6 N + 12 L C T per token with N its
 * parameters less the position embedding: 6 x 123,653,376 + 12 x 12 x 768 x 1024 = 855,166,464, written out by
 * hand here; the default Llama's count is derived by hand from its shapes below (and its parameter total checked
 * against fsc_llama_num_params, so the derivation is the model's); an MoE GPT counts only top-k experts, and so
 * does an MoE Llama (its count derived by hand below); the
 * models' operation gives B x T times the per-token count, on one rank and with tensor parallelism (where every
 * rank reports the full step's FLOPs); a model without the operation gives 0; the gemm rate is positive and
 * finite. */
#include <math.h>
#include "testutil.h"

static void test_gpt2_small_is_nanogpts(void **state) {
    (void)state;
    fsc_gpt_config g = { .layers = 12, .dim = 768, .heads = 12, .seq = 1024, .vocab = 50257 };
    assert_int_equal(fsc_gpt_num_params(&g), 124439808); /* GPT-2 small with its biases, tied head */
    assert_true(fsc_gpt_flops_per_token(&g) == 855166464.0);
}

static void test_moe_counts_top_k(void **state) {
    (void)state;
    fsc_gpt_config d = { .layers = 2, .dim = 32, .heads = 2, .seq = 16, .vocab = 64 };
    fsc_gpt_config m = d;
    m.moe_experts = 4, m.moe_top_k = 1, m.moe_every = 1, m.moe_capacity = 1.25f, m.moe_aux = 0.01f;
    /* each MoE block adds 3 experts' MLPs (8 C^2 + 5 C each) and the router: only the router multiplies more */
    double extra = (double)fsc_gpt_num_params(&m) - (double)fsc_gpt_num_params(&d) - 2 * 3 * (8.0 * 32 * 32 + 5 * 32);
    assert_true(extra >= 0 && extra < 2 * 32 * 8);
    assert_true(fabs(fsc_gpt_flops_per_token(&m) - fsc_gpt_flops_per_token(&d) - 6 * extra) < 1e-6);
    fsc_gpt_config z = m; /* moe_top_k 0 is top-1 (gpt.h): the same count */
    z.moe_top_k = 0;
    assert_ok(fsc_gpt_config_validate(&z));
    if (fsc_gpt_flops_per_token(&z) != fsc_gpt_flops_per_token(&m))
        fail_msg("moe_top_k 0: %.0f FLOPs per token, top-1: %.0f", fsc_gpt_flops_per_token(&z),
                 fsc_gpt_flops_per_token(&m));
}

static void test_llama_by_hand(void **state) {
    (void)state;
    fsc_llama_config c = fsc_llama_config_default(); /* L 4, C 128, 4 heads, 4 kv, F 512, T 64, V 256 */
    /* embed V C = 32768; per block q, k, v, o 4 C^2 = 65536, gate, up, down 3 C F = 196608, two norms 256;
     * final norm 128; untied head V C = 32768 */
    const double total = 32768 + 4 * (65536 + 196608 + 256) + 128 + 32768;
    assert_int_equal(fsc_llama_num_params(&c), (size_t)total);
    const double per_token = 6 * (total - 32768) + 12.0 * 4 * 128 * 64; /* = 6,888,192 */
    fsc_device *dev = NULL;
    assert_ok(fsc_device_create("cpu", NULL, &dev));
    fsc_model *m = NULL;
    assert_ok(fsc_llama_model_create(dev, &c, &m));
    assert_true(fsc_model_flops(m, 3) == 3 * 64 * per_token);
    assert_true(fsc_model_flops(m, 0) == 0);
    fsc_model_free(m);
    fsc_gpt_config g = { .layers = 2, .dim = 16, .heads = 2, .seq = 8, .vocab = 32 };
    assert_ok(fsc_gpt_model_create(dev, &g, &m));
    assert_true(fsc_model_flops(m, 5) == 5 * 8 * fsc_gpt_flops_per_token(&g));
    fsc_model_free(m);
    assert_true(fsc_model_flops(NULL, 1) == 0);
    fsc_model_ops none = { 0 };
    fsc_model bare = { .ops = &none };
    assert_true(fsc_model_flops(&bare, 1) == 0);
    double tf = 0;
    assert_ok(fsc_device_measure_tflops(dev, 64, &tf));
    assert_true(tf > 0 && isfinite(tf));
    assert_err(fsc_device_measure_tflops(dev, 1 << 20, &tf), FSC_ERR_INVALID, "8192");
    fsc_device_free(dev);
}

/* The Llama with MoE layers: its MoE MLP replaces gate, up and down (3 C F) by the router (C E) and E GELU experts
 * (2 C F + F + C each), of which a token runs top-k. */
static void test_llama_moe_counts_top_k(void **state) {
    (void)state;
    fsc_llama_config c = fsc_llama_config_default(); /* L 4, C 128, F 512, T 64, V 256 */
    c.moe_experts = 4, c.moe_top_k = 2, c.moe_every = 2; /* layers 1 and 3 */
    /* per MoE layer, against the dense layer: 128 x 4 + 2 x (2 x 128 x 512 + 512 + 128) - 3 x 512 x 128 = 67,328 */
    const double per_token = 6888192.0 + 6 * 2 * 67328.0; /* the dense default's (above) + two MoE layers' */
    fsc_device *dev = NULL;
    assert_ok(fsc_device_create("cpu", NULL, &dev));
    fsc_model *m = NULL;
    assert_ok(fsc_llama_model_create(dev, &c, &m));
    assert_true(fsc_model_flops(m, 2) == 2 * 64 * per_token);
    fsc_model_free(m);
    fsc_device_free(dev);
}

/* Tensor parallelism: each rank's engine model is its slices, but reports the full model's FLOPs. */
static fsc_status tp_fn(fsc_rank *r, void *arg) {
    double *out = arg;
    fsc_gpt_config g = { .layers = 2, .dim = 16, .heads = 2, .seq = 8, .vocab = 32 };
    fsc_parallel_opts po = fsc_parallel_opts_default();
    po.tp = 2;
    fsc_optim_config oc = fsc_optim_config_default();
    fsc_engine *e = NULL;
    FSC_TRY(fsc_engine_create(r, &g, &po, &oc, 1, &e));
    out[r->rank] = fsc_model_flops(fsc_engine_model(e), 2);
    fsc_engine_free(e);
    /* the Llama built on the tensor group by the engine */
    fsc_llama_build_arg ba = { .cfg = fsc_llama_config_default() };
    FSC_TRY(fsc_engine_create_built(r, fsc_llama_build, &ba, &po, &oc, 1, &e));
    out[2 + r->rank] = fsc_model_flops(fsc_engine_model(e), 2);
    fsc_engine_free(e);
    return FSC_OK;
}

static void test_tensor_parallel_full_model(void **state) {
    (void)state;
    double got[4] = { 0, 0, 0, 0 };
    fsc_cluster_opts co = fsc_cluster_opts_default();
    co.world = 2;
    assert_ok(fsc_cluster_run(&co, tp_fn, got));
    fsc_gpt_config g = { .layers = 2, .dim = 16, .heads = 2, .seq = 8, .vocab = 32 };
    for (int r = 0; r < 2; r++) assert_true(got[r] == 2 * 8 * fsc_gpt_flops_per_token(&g));
    for (int r = 0; r < 2; r++) assert_true(got[2 + r] == 2 * 64 * 6888192.0); /* the default Llama's (above) */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt2_small_is_nanogpts),
        cmocka_unit_test(test_moe_counts_top_k),
        cmocka_unit_test(test_llama_by_hand),
        cmocka_unit_test(test_llama_moe_counts_top_k),
        cmocka_unit_test(test_tensor_parallel_full_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
