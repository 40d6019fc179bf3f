/* Tests of the Llama model (lib/model/llama.c, llama_run.c) on one rank.
 *
 * Oracles:
 * - configuration checks reject each impossible configuration with a message naming it; the default ffn is
 *   Llama's rule (dim 4096 gives HF's 11008); tensors carry the Hugging Face names, shapes and owning layers;
 *   fsc_llama_num_params equals the sum of the declared tensors;
 * - the loss and every weight after one SGD step equal an independent float64 PyTorch reference
 *   (tests/gen_golden_llama.py, committed as tests/golden/llama_golden.h and llama_init.safetensors, loaded
 *   through the engine's weight file under the HF names): the loss to 1e-6 relative, each weight to
 *   2e-7 + 2e-5 x |lr x its gradient| (fsc computes in float32, the reference in float64);
 * - the gradient of the whole model (embedding, attention with rotary and grouped-query heads, SwiGLU MLP, the
 *   norms, the head) equals central finite differences of the summed loss (step 1e-2, two elements of
 *   every tensor: its largest gradient and one in the middle) within 1e-3 + 1e-2 relative. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "testutil.h"
#include "fsc/llama.h"
#include "golden/llama_golden.h"

static fsc_llama_config golden_config(void) {
    return (fsc_llama_config){ .layers = LG_LAYERS, .dim = LG_DIM, .heads = LG_HEADS, .kv_heads = LG_KV_HEADS,
                               .ffn = LG_FFN, .seq = LG_SEQ, .vocab = LG_VOCAB, .rope_theta = (float)LG_THETA,
                               .norm_eps = (float)LG_EPS };
}

/* The golden batch: the rule gen_golden_llama.py uses. */
static void golden_tokens(int32_t *tok, int32_t *tgt) {
    for (int b = 0; b < LG_BATCH; b++)
        for (int t = 0; t < LG_SEQ; t++) {
            tok[b * LG_SEQ + t] = (7 * b + 3 * t + 1) % LG_VOCAB;
            tgt[b * LG_SEQ + t] = (5 * b + 11 * t + 2) % LG_VOCAB;
        }
}

static void golden_path(char *buf, size_t cap, const char *file) {
    const char *src = __FILE__, *slash = strrchr(src, '/');
    snprintf(buf, cap, "%.*sgolden/%s", slash ? (int)(slash - src + 1) : 0, src, file);
}

static void test_config(void **st) {
    (void)st;
    assert_int_equal(fsc_llama_default_ffn(4096), 11008); /* Llama 7B's intermediate_size */
    assert_int_equal(fsc_llama_default_ffn(128), 512);
    assert_int_equal(fsc_llama_default_ffn(16), 256);
    fsc_llama_config d = fsc_llama_config_default();
    assert_ok(fsc_llama_config_validate(&d));
    assert_int_equal(d.ffn, 512);
    assert_int_equal(d.kv_heads, d.heads);
    fsc_llama_config c = d;
    c.heads = 3;
    assert_err(fsc_llama_config_validate(&c), FSC_ERR_INVALID, "heads 3 must divide dim 128");
    c = d, c.kv_heads = 3;
    assert_err(fsc_llama_config_validate(&c), FSC_ERR_INVALID, "kv_heads 3 must divide heads 4");
    c = d, c.heads = 128, c.kv_heads = 1;
    assert_err(fsc_llama_config_validate(&c), FSC_ERR_INVALID, "must be even");
    c = d, c.ffn = 0;
    assert_err(fsc_llama_config_validate(&c), FSC_ERR_INVALID, "ffn");
    c = d, c.rope_theta = 0.0f;
    assert_err(fsc_llama_config_validate(&c), FSC_ERR_INVALID, "rope_theta");
    c = d, c.norm_eps = -1.0f;
    assert_err(fsc_llama_config_validate(&c), FSC_ERR_INVALID, "norm_eps");
    c = d, c.vocab = 0;
    assert_err(fsc_llama_config_validate(&c), FSC_ERR_INVALID, "vocab");
    c = d, c.layers = 0;
    assert_err(fsc_llama_config_validate(&c), FSC_ERR_INVALID, "layers");
    fsc_device *dev = NULL;
    fsc_model *m = NULL;
    assert_ok(fsc_device_create("cpu", NULL, &dev));
    assert_err(fsc_llama_model_create(dev, &c, &m), FSC_ERR_INVALID, "layers");
    assert_null(m);
    fsc_llama_config g = golden_config();
    assert_ok(fsc_llama_model_create(dev, &g, &m));
    assert_ok(fsc_model_validate(m));
    assert_int_equal(m->n_layers, LG_LAYERS + 2);
    assert_int_equal(m->n_tensors, 1 + 9 * LG_LAYERS + 2);
    assert_int_equal(fsc_model_num_params(m), fsc_llama_num_params(&g));
    assert_int_equal(fsc_llama_num_params(&g), LG_PARAMS);
    int k = fsc_model_tensor_index(m, "model.layers.1.self_attn.k_proj.weight");
    assert_int_equal(k, 1 + 9 + 1);
    assert_int_equal(m->info[k].shape[0], LG_KV_HEADS * (LG_DIM / LG_HEADS));
    assert_int_equal(m->info[k].shape[1], LG_DIM);
    assert_int_equal(m->info[k].layer, 2);
    int down = fsc_model_tensor_index(m, "model.layers.0.mlp.down_proj.weight");
    assert_int_equal(m->info[down].shape[0], LG_DIM);
    assert_int_equal(m->info[down].shape[1], LG_FFN);
    int head = fsc_model_tensor_index(m, "lm_head.weight");
    assert_int_equal(head, m->n_tensors - 1);
    assert_int_equal(m->info[head].layer, LG_LAYERS + 1);
    assert_int_equal(m->info[head].nusers, 0); /* untied */
    assert_true(fsc_model_tensor_index(m, "model.norm.weight") == m->n_tensors - 2);
    assert_true(fsc_model_tensor_index(m, "model.layers.0.post_attention_layernorm.weight") == 9);
    /* initial values: linears N(0, 0.02), norms 1, keyed by name (a shard equals the slice of the whole) */
    size_t n = m->info[0].numel;
    float *all = malloc(n * sizeof *all), *part = malloc(100 * sizeof *part);
    m->ops->init_values(m->ctx, 5, 0, 0, n, all);
    m->ops->init_values(m->ctx, 5, 0, 37, 100, part);
    assert_bits_equal(part, all + 37, 100, "a shard's initial values");
    double s2 = 0;
    for (size_t i = 0; i < n; i++) s2 += (double)all[i] * all[i];
    assert_true(fabs(sqrt(s2 / n) - 0.02) < 0.003);
    m->ops->init_values(m->ctx, 5, 9, 0, 16, part);
    for (int i = 0; i < 16; i++) assert_true(part[i] == 1.0f);
    char json[256];
    m->ops->config(m->ctx, json, sizeof json);
    assert_non_null(strstr(json, "\"family\":\"llama\""));
    assert_non_null(strstr(json, "\"kv_heads\":2"));
    free(all);
    free(part);
    fsc_model_free(m);
    fsc_device_free(dev);
}

/* ---- the PyTorch reference -------------------------------------------------------------------------- */

typedef struct {
    double loss;
    float *before, *after; /* (P) */
} golden_run;

static fsc_status golden_rank(fsc_rank *r, void *arg) {
    golden_run *g = arg;
    fsc_llama_config c = golden_config();
    fsc_model *m = NULL;
    FSC_TRY(fsc_llama_model_create(r->dev, &c, &m));
    fsc_parallel_opts po = { .kind = FSC_PAR_NONE, .accum = 1, .reshard_after_forward = -1, .param_dtype = FSC_F32,
                             .reduce_dtype = FSC_F32 };
    fsc_optim_config oc = { .kind = FSC_OPT_SGD, .lr = (float)LG_LR };
    fsc_engine *e = NULL;
    char path[512];
    golden_path(path, sizeof path, "llama_init.safetensors");
    int32_t tok[LG_BATCH * LG_SEQ], tgt[LG_BATCH * LG_SEQ];
    golden_tokens(tok, tgt);
    fsc_step_info info;
    fsc_status s = fsc_engine_create_model(r, m, &po, &oc, 1, &e);
    if (s == FSC_OK) s = fsc_engine_load_weights(e, path);
    if (s == FSC_OK) s = fsc_engine_full_params(e, g->before);
    if (s == FSC_OK) s = fsc_engine_step_model(e, tok, tgt, LG_BATCH, LG_BATCH, &info);
    if (s == FSC_OK) s = fsc_engine_full_params(e, g->after);
    g->loss = info.loss;
    fsc_engine_free(e);
    fsc_model_free(m);
    return s;
}

/* Oracle: a recorded configuration that differs from the model's is refused naming the first differing field and
 * both values (a field the record lacks, or one only the record has, as "absent"); the same values written
 * otherwise (10000.0 for 10000, another key order; an MoE field's default 0 for its value 1) load. */
static void test_config_check(void **st) {
    (void)st;
    fsc_llama_config c = fsc_llama_config_default();
    c.layers = 2, c.dim = 16, c.heads = 4, c.kv_heads = 2, c.ffn = 32, c.seq = 8, c.vocab = 32;
    char own[512];
    fsc_llama_config_json(&c, own, sizeof own);
    assert_ok(fsc_llama_config_check_json(&c, own));
    assert_ok(fsc_llama_config_check_json(&c, "{\"family\":\"llama\",\"dim\":16,\"layers\":2,\"heads\":4,"
                                             "\"kv_heads\":2,\"ffn\":32,\"seq\":8,\"vocab\":32,\"rope_theta\":10000.0,"
                                             "\"norm_eps\":1e-05}"));
    struct { const char *from, *to, *says; } cases[] = {
        {"\"dim\":16", "\"dim\":32", "written for a Llama with dim 32; this engine's model has dim 16 (recorded "
                                    "configuration: {\"family\":\"llama\",\"layers\":2,\"dim\":32"},
        {"\"ffn\":32,", "", "written for a Llama with ffn absent; this engine's model has ffn 32"},
        {"\"norm_eps\":9.99999975e-06", "\"norm_eps\":1e-06", "with norm_eps 1e-06; this engine's model has norm_eps 9.99999975e-06"},
        {"}", ",\"moe_experts\":2}", "written for a Llama with moe_experts 2; this engine's model has moe_experts absent"},
        {"\"dim\":16", "\"dim\":1e300", "written for a Llama with dim 1e+300; this engine's model has dim 16"},
        /* a field of no name is a field too (it was taken for "no field differs": the record accepted) */
        {"}", ",\"\":64}", "written for a Llama with \"\" 64; this engine's model has \"\" absent"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char rec[600];
        const char *at = strstr(own, cases[i].from);
        if (!at) fail_msg("%s not in %s", cases[i].from, own);
        snprintf(rec, sizeof rec, "%.*s%s%s", (int)(at - own), own, cases[i].to, at + strlen(cases[i].from));
        assert_err(fsc_llama_config_check_json(&c, rec), FSC_ERR_INVALID, cases[i].says);
    }
    /* an MoE Llama: moe_top_k, moe_every and moe_capacity 0 are 1 (llama.h), so a record of zeros loads into the
     * same model with them written out, either way; another top-k is refused */
    fsc_llama_config z = c, one = c;
    z.moe_experts = one.moe_experts = 4;
    one.moe_top_k = 1, one.moe_every = 1, one.moe_capacity = 1.0f;
    char zt[512], ot[512];
    fsc_llama_config_json(&z, zt, sizeof zt);
    fsc_llama_config_json(&one, ot, sizeof ot);
    assert_ok(fsc_llama_config_check_json(&one, zt));
    assert_ok(fsc_llama_config_check_json(&z, ot));
    one.moe_top_k = 2;
    assert_err(fsc_llama_config_check_json(&one, zt), FSC_ERR_INVALID, "written for a Llama with moe_top_k 0; this "
               "engine's model has moe_top_k 2");
}

static void test_matches_pytorch(void **st) {
    (void)st;
    golden_run g = { 0 };
    g.before = calloc(LG_PARAMS, sizeof(float));
    g.after = calloc(LG_PARAMS, sizeof(float));
    fsc_cluster_opts co = { .world = 1, .device = "cpu", .timeout_s = 60, .threads_per_rank = 1 };
    assert_ok(fsc_cluster_run(&co, golden_rank, &g));
    double rel = fabs(g.loss - lg_loss) / lg_loss, worst = 0;
    size_t worst_i = 0;
    for (size_t i = 0; i < LG_PARAMS; i++) {
        double ref_step = (double)g.before[i] - lg_after[i]; /* lr x the reference gradient */
        double err = fabs((double)g.after[i] - lg_after[i]), tol = 2e-7 + 2e-5 * fabs(ref_step);
        if (err / tol > worst) worst = err / tol, worst_i = i;
    }
    print_message("llama vs PyTorch float64: loss %.9f vs %.9f (relative %.2e); weights: worst error/tolerance "
                  "%.3f at element %zu\n", g.loss, lg_loss, rel, worst, worst_i);
    assert_true(rel <= 1e-6);
    if (worst > 1.0)
        fail_msg("weight %zu after one SGD step: %.9g vs the reference %.9g", worst_i, (double)g.after[worst_i],
                 lg_after[worst_i]);
    free(g.before);
    free(g.after);
}

/* ---- finite differences ------------------------------------------------------------------------------ */

typedef struct {
    fsc_device *dev;
    fsc_model *m;
    fsc_model_acts *a;
    float *pd, *gd; /* (P) device */
    size_t P;
} runner;

/* The summed loss at host parameters p; with g, also its gradient (dscale 1). */
static double run_loss(runner *r, const float *p, float *g) {
    assert_ok(fsc_device_upload(r->dev, r->pd, p, r->P * sizeof(float)));
    int32_t tok[LG_BATCH * LG_SEQ], tgt[LG_BATCH * LG_SEQ];
    golden_tokens(tok, tgt);
    double loss = 0;
    assert_ok(r->m->ops->set_batch(r->m->ctx, r->a, tok, tgt));
    assert_ok(r->m->ops->forward(r->m->ctx, r->a, NULL, &loss));
    if (g) {
        assert_ok(fsc_device_memset(r->dev, r->gd, 0, r->P * sizeof(float)));
        assert_ok(r->m->ops->backward(r->m->ctx, r->a, NULL, 1.0f));
        assert_ok(fsc_device_download(r->dev, g, r->gd, r->P * sizeof(float)));
    }
    return loss;
}

static void test_gradient_finite_differences(void **st) {
    (void)st;
    runner r = { 0 };
    fsc_llama_config c = golden_config();
    assert_ok(fsc_device_create("cpu", NULL, &r.dev));
    assert_ok(fsc_llama_model_create(r.dev, &c, &r.m));
    r.P = fsc_model_num_params(r.m);
    assert_ok(fsc_device_alloc(r.dev, FSC_TAG_PARAMS, r.P * sizeof(float), (void **)&r.pd));
    assert_ok(fsc_device_alloc(r.dev, FSC_TAG_GRADS, r.P * sizeof(float), (void **)&r.gd));
    size_t *off = calloc((size_t)r.m->n_tensors + 1, sizeof *off);
    for (int i = 0; i < r.m->n_tensors; i++) {
        off[i + 1] = off[i] + r.m->info[i].numel;
        r.m->param[i] = r.pd + off[i];
        r.m->grad[i] = r.gd + off[i];
    }
    fsc_model_acts_opts o = { .B = LG_BATCH, .first = 0, .last = LG_LAYERS + 1 };
    assert_ok(r.m->ops->acts_create(r.m->ctx, &o, &r.a));
    /* weights of std 0.3 and norms 1 + N(0, 0.3): every path carries a gradient well above rounding */
    float *p = malloc(r.P * sizeof *p), *g = malloc(r.P * sizeof *g);
    for (int i = 0; i < r.m->n_tensors; i++) {
        fsc_rng_fill_normal(p + off[i], r.m->info[i].numel, 3, r.m->info[i].name, 0, 0.0f, 0.3f);
        if (r.m->info[i].ndim == 1)
            for (size_t j = 0; j < r.m->info[i].numel; j++) p[off[i] + j] += 1.0f;
    }
    run_loss(&r, p, g);
    const float h = 1e-2f;
    double worst = 0;
    for (int i = 0; i < r.m->n_tensors; i++) {
        size_t big = off[i]; /* the element of largest gradient, and one in the middle */
        for (size_t j = off[i]; j < off[i + 1]; j++)
            if (fabsf(g[j]) > fabsf(g[big])) big = j;
        size_t pick[2] = { big, off[i] + r.m->info[i].numel / 2 + 1 };
        for (int k = 0; k < 2; k++) {
            size_t j = pick[k];
            float keep = p[j];
            p[j] = keep + h;
            double lp = run_loss(&r, p, NULL);
            p[j] = keep - h;
            double lm = run_loss(&r, p, NULL);
            p[j] = keep;
            double fd = (lp - lm) / (2.0 * h), tol = 1e-3 + 1e-2 * fabs(fd);
            if (fabs(fd - g[j]) / tol > worst) worst = fabs(fd - g[j]) / tol;
            if (fabs(fd - g[j]) > tol)
                fail_msg("%s element %zu: backward %.6g, finite difference %.6g", r.m->info[i].name, j - off[i],
                         (double)g[j], fd);
        }
    }
    print_message("llama gradient vs central differences: worst error/tolerance %.3f\n", worst);
    free(p);
    free(g);
    free(off);
    r.m->ops->acts_free(r.m->ctx, r.a);
    fsc_device_release(r.dev, r.pd);
    fsc_device_release(r.dev, r.gd);
    fsc_model_free(r.m);
    fsc_device_free(r.dev);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config),
        cmocka_unit_test(test_config_check),
        cmocka_unit_test(test_matches_pytorch),
        cmocka_unit_test(test_gradient_finite_differences),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
