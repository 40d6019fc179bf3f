/* Which tensors weight decay applies to: fsc_optim_no_decay (lib/optim/optim.c) and the engine's rule
 * (lib/parallel/decay.c; model.h's fsc_param_decays: matrices, not biases, norms or embeddings).
 * Oracles:
 * - an optimizer segment with excluded ranges equals, element for element and bit for bit, a segment stepped
 *   without weight decay inside the ranges and one stepped with it outside (AdamW and SGD with momentum);
 * - after one step of an engine (any strategy, pipeline, tensor parallelism, the GPT and the Llama), every
 *   tensor the rule does not decay (wte, wpe, biases, norms; the Llama's embed_tokens) equals bit for bit the
 *   same run with weight_decay 0, and every tensor it decays equals the run with decay_all; the two references
 *   differ (the test is not vacuous); decay_all decays every tensor, as before the rule. */
#include <math.h>
#include "testutil.h"

enum { N = 12 };

static void test_optim_ranges(void **state) {
    (void)state;
    fsc_device *d = NULL;
    assert_ok(fsc_device_create("cpu", NULL, &d));
    for (int kind = 0; kind < 2; kind++) {
        fsc_optim_config c = { .kind = kind ? FSC_OPT_ADAMW : FSC_OPT_SGD, .lr = 0.1f, .momentum = 0.9f,
                               .weight_decay = 0.5f };
        fsc_optim_config c0 = c;
        c0.weight_decay = 0.0f;
        float p[3][N], g[N];
        for (int i = 0; i < N; i++) p[0][i] = p[1][i] = p[2][i] = 1.0f + 0.25f * (float)i, g[i] = 0.1f * (float)(i % 5) - 0.2f;
        float *dp[3], *dg;
        assert_ok(fsc_device_alloc(d, FSC_TAG_GRADS, sizeof g, (void **)&dg));
        assert_ok(fsc_device_upload(d, dg, g, sizeof g));
        fsc_optim *o[3];
        for (int k = 0; k < 3; k++) {
            assert_ok(fsc_device_alloc(d, FSC_TAG_PARAMS, sizeof p[k], (void **)&dp[k]));
            assert_ok(fsc_device_upload(d, dp[k], p[k], sizeof p[k]));
            assert_ok(fsc_optim_create(d, k == 1 ? &c0 : &c, &o[k]));
            assert_ok(fsc_optim_add(o[k], dp[k], dg, N, NULL));
        }
        /* o[2]: no decay on [2, 5) U [4, 7) U [0, 1) U [10, 12), given out of order and overlapping */
        assert_ok(fsc_optim_no_decay(o[2], 0, 4, 3));
        assert_ok(fsc_optim_no_decay(o[2], 0, 2, 3));
        assert_ok(fsc_optim_no_decay(o[2], 0, 10, 2));
        assert_ok(fsc_optim_no_decay(o[2], 0, 0, 1));
        assert_ok(fsc_optim_no_decay(o[2], 0, 3, 0));
        assert_err(fsc_optim_no_decay(o[2], 0, 11, 2), FSC_ERR_INVALID, "not in segment");
        assert_err(fsc_optim_no_decay(o[2], 1, 0, 1), FSC_ERR_INVALID, "does not exist");
        for (int step = 0; step < 3; step++)
            for (int k = 0; k < 3; k++) assert_ok(fsc_optim_step(o[k]));
        for (int k = 0; k < 3; k++) assert_ok(fsc_device_download(d, p[k], dp[k], sizeof p[k]));
        for (int i = 0; i < N; i++) {
            int nd = i < 1 || (i >= 2 && i < 7) || i >= 10;
            if (memcmp(&p[2][i], &p[nd ? 1 : 0][i], sizeof(float)) != 0)
                fail_msg("kind %d element %d (%s): %.9g, reference %.9g", kind, i, nd ? "no decay" : "decay",
                         (double)p[2][i], (double)p[nd ? 1 : 0][i]);
            if (p[0][i] == p[1][i]) fail_msg("element %d: decay makes no difference", i);
        }
        for (int k = 0; k < 3; k++) fsc_optim_free(o[k]), fsc_device_release(d, dp[k]);
        fsc_device_release(d, dg);
    }
    fsc_device_free(d);
}

enum { GB = 6, T = 6, V = 40 };

typedef struct {
    fsc_parallel_opts po;
    int world, llama;
    float wd;
    int decay_all;
    float *params;
} drun;

static fsc_gpt_config gcfg(void) { return (fsc_gpt_config){ .layers = 2, .dim = 16, .heads = 2, .seq = T, .vocab = V }; }

static fsc_llama_config lcfg(void) {
    fsc_llama_config c = fsc_llama_config_default();
    c.layers = 2, c.dim = 16, c.heads = 2, c.kv_heads = 2, c.ffn = 24, c.seq = T, c.vocab = V;
    return c;
}

static fsc_status rank_fn(fsc_rank *r, void *arg) {
    drun *run = arg;
    fsc_optim_config oc = { .kind = FSC_OPT_ADAMW, .lr = 1e-2f, .weight_decay = run->wd, .decay_all = run->decay_all };
    fsc_engine *e = NULL;
    fsc_model *lm = NULL;
    if (run->llama && run->po.tp > 1) { /* its tensor-parallel layers, built on the engine's tensor group */
        fsc_llama_build_arg ba = { .cfg = lcfg() };
        FSC_TRY(fsc_engine_create_built(r, fsc_llama_build, &ba, &run->po, &oc, 11, &e));
    } else if (run->llama) {
        fsc_llama_config c = lcfg();
        FSC_TRY(fsc_llama_model_create(r->dev, &c, &lm));
        fsc_status s = fsc_engine_create_model(r, lm, &run->po, &oc, 11, &e);
        if (s != FSC_OK) fsc_model_free(lm);
        FSC_TRY(s);
    } else {
        fsc_gpt_config c = gcfg();
        FSC_TRY(fsc_engine_create(r, &c, &run->po, &oc, 11, &e));
    }
    const fsc_layout *l = fsc_engine_layout(e);
    const int lb = GB / l->dp;
    int32_t tok[GB * T], tgt[GB * T];
    for (int i = 0; i < lb * T; i++) tok[i] = (l->data * 7 + i * 3) % V, tgt[i] = (l->data * 5 + i * 11 + 1) % V;
    fsc_step_info info;
    fsc_status s = fsc_engine_step_model(e, tok, tgt, lb, GB, &info);
    if (s == FSC_OK) s = fsc_engine_full_params(e, r->rank == 0 ? run->params : NULL);
    fsc_engine_free(e);
    fsc_model_free(lm);
    return s;
}

/* The full model's tensors (names, shapes, rule) on one CPU device. */
static fsc_model *host_model(int llama, fsc_device **dev) {
    assert_ok(fsc_device_create("cpu", NULL, dev));
    fsc_model *m = NULL;
    if (llama) {
        fsc_llama_config c = lcfg();
        assert_ok(fsc_llama_model_create(*dev, &c, &m));
    } else {
        fsc_gpt_config c = gcfg();
        assert_ok(fsc_gpt_model_create(*dev, &c, &m));
    }
    return m;
}

static void run(drun *r, size_t P) {
    r->params = calloc(P, sizeof(float));
    assert_non_null(r->params);
    fsc_cluster_opts co = { .world = r->world, .device = "cpu", .timeout_s = 60, .threads_per_rank = 1 };
    assert_ok(fsc_cluster_run(&co, rank_fn, r));
}

static void check_layout(int world, int llama, fsc_parallel_opts po, const char *what) {
    fsc_device *dev = NULL;
    fsc_model *m = host_model(llama, &dev);
    const size_t P = fsc_model_num_params(m);
    drun rule = { .po = po, .world = world, .llama = llama, .wd = 0.5f };
    drun none = rule, all = rule;
    none.wd = 0.0f;
    all.decay_all = 1;
    run(&rule, P), run(&none, P), run(&all, P);
    size_t off = 0;
    int decayed = 0, kept = 0, differ[2] = { 0, 0 };
    for (int i = 0; i < m->n_tensors; off += m->info[i].numel, i++) {
        const fsc_param_info *pi = &m->info[i];
        const int dec = fsc_param_decays(pi);
        const int is_emb = strstr(pi->name, "wte") || strstr(pi->name, "wpe") || strstr(pi->name, "embed_tokens");
        if (dec != (pi->ndim >= 2 && !is_emb)) fail_msg("%s: %s decays %d", what, pi->name, dec);
        decayed += dec, kept += !dec;
        const float *ref = dec ? all.params : none.params;
        char w[160];
        snprintf(w, sizeof w, "%s: %s (%s)", what, pi->name, dec ? "decayed" : "not decayed");
        assert_bits_equal(rule.params + off, ref + off, pi->numel, w);
        /* decay moves a tensor that is not zero (biases start at zero and stay there under decay alone) */
        if (memcmp(all.params + off, none.params + off, pi->numel * sizeof(float))) differ[dec]++;
    }
    if (!decayed || !kept) fail_msg("%s: %d tensors decayed, %d not", what, decayed, kept);
    if (!differ[0] || !differ[1]) fail_msg("%s: decay moves %d kept and %d decayed tensors", what, differ[0], differ[1]);
    free(rule.params), free(none.params), free(all.params);
    fsc_model_free(m);
    fsc_device_free(dev);
}

static fsc_parallel_opts opts(fsc_parallel_kind k) {
    fsc_parallel_opts po = fsc_parallel_opts_default();
    po.kind = k;
    return po;
}

static void test_engine_rule(void **state) {
    (void)state;
    check_layout(1, 0, opts(FSC_PAR_NONE), "gpt, one rank");
    check_layout(3, 0, opts(FSC_PAR_FSDP), "gpt, fsdp on 3 ranks");
    check_layout(2, 0, opts(FSC_PAR_ZERO2), "gpt, zero2 on 2 ranks");
    fsc_parallel_opts pp = opts(FSC_PAR_DDP);
    pp.pp = 2, pp.accum = 2;
    check_layout(2, 0, pp, "gpt, 2 pipeline stages");
    fsc_parallel_opts tp = opts(FSC_PAR_FSDP);
    tp.tp = 2;
    check_layout(4, 0, tp, "gpt, tp 2 x fsdp 2");
    check_layout(1, 1, opts(FSC_PAR_NONE), "llama, one rank");
    check_layout(2, 1, opts(FSC_PAR_ZERO1), "llama, zero1 on 2 ranks");
    check_layout(4, 1, tp, "llama, tp 2 x fsdp 2");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_optim_ranges),
        cmocka_unit_test(test_engine_rule),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
