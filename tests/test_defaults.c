/* The defaults functions of the public options structs (fsc_*_default). The oracle: each returns options
 * that the function consuming them accepts (device, cluster, optimizer, model, activation record (the GPT's,
 * and model.h's for the GPT and the Llama), engine, checkpoint save, MoE layer), with
 * the values the headers document (torch.optim.AdamW's hyper-parameters, GPT-2 small's 124,439,808
 * parameters); and a zero-initialised fsc_parallel_opts, which the defaults function exists to replace, is
 * refused. The layer options of layers.h (linear, MLP, attention, transformer block) from their defaults
 * functions make layers with the parameters the header documents; a GPT-2 and a Llama strung from default blocks
 * declare the tensors (names and shapes, in order) of the built-in GPT and of the Llama of
 * fsc_llama_config_default's hyper-parameters. */
#include "testutil.h"

static fsc_gpt_config tiny(void) {
    fsc_gpt_config c = fsc_gpt_config_default();
    c.layers = 2, c.dim = 16, c.heads = 2, c.seq = 8, c.vocab = 32;
    return c;
}

static void test_device_and_optim_defaults(void **state) {
    (void)state;
    fsc_device_opts dopts = fsc_device_opts_default();
    fsc_device *dev = NULL;
    assert_ok(fsc_device_create("cpu", &dopts, &dev));
    fsc_optim_config oc = fsc_optim_config_default();
    assert_int_equal(oc.kind, FSC_OPT_ADAMW);
    assert_true(oc.lr == 1e-3f && oc.beta1 == 0.9f && oc.beta2 == 0.999f && oc.eps == 1e-8f &&
                oc.weight_decay == 1e-2f);
    fsc_optim *o = NULL;
    assert_ok(fsc_optim_create(dev, &oc, &o));
    fsc_optim_free(o);
    fsc_device_free(dev);
}

static void test_model_defaults(void **state) {
    (void)state;
    fsc_gpt_config g = fsc_gpt_config_default();
    assert_ok(fsc_gpt_config_validate(&g));
    assert_int_equal(fsc_gpt_num_params(&g), 124439808); /* GPT-2 small, head tied to wte */
    fsc_gpt_config c = tiny();
    fsc_device *dev = NULL;
    assert_ok(fsc_device_create("cpu", NULL, &dev));
    fsc_gpt *m = NULL;
    assert_ok(fsc_gpt_create(dev, &c, &m));
    fsc_gpt_acts_opts ao = fsc_gpt_acts_opts_default(&c, 2);
    assert_int_equal(ao.T, c.seq);
    assert_int_equal(ao.last, c.layers + 1);
    fsc_gpt_acts *a = NULL;
    assert_ok(fsc_gpt_acts_create(m, &ao, &a));
    fsc_gpt_acts_free(a);
    fsc_gpt_free(m);
    /* models of model.h: the GPT and the Llama, a record over the whole model */
    fsc_model *gm = NULL;
    assert_ok(fsc_gpt_model_create(dev, &c, &gm));
    fsc_model_acts_opts mo = fsc_model_acts_opts_default(gm, 2);
    assert_int_equal(mo.B, 2);
    assert_int_equal(mo.first, 0);
    assert_int_equal(mo.last, c.layers + 1);
    assert_int_equal(mo.checkpoint, 0);
    fsc_model_acts *ma = NULL;
    assert_ok(gm->ops->acts_create(gm->ctx, &mo, &ma));
    gm->ops->acts_free(gm->ctx, ma);
    fsc_model_free(gm);
    fsc_llama_config lc = fsc_llama_config_default();
    assert_ok(fsc_llama_config_validate(&lc));
    lc.layers = 2, lc.dim = 16, lc.heads = 2, lc.kv_heads = 1, lc.ffn = fsc_llama_default_ffn(16), lc.seq = 8,
    lc.vocab = 32;
    fsc_model *lm = NULL;
    assert_ok(fsc_llama_model_create(dev, &lc, &lm));
    mo = fsc_model_acts_opts_default(lm, 2);
    assert_int_equal(mo.last, lc.layers + 1);
    assert_ok(lm->ops->acts_create(lm->ctx, &mo, &ma));
    lm->ops->acts_free(lm->ctx, ma);
    fsc_model_free(lm);
    fsc_moe_config mc = fsc_moe_config_default(c.dim, 4);
    fsc_moe *moe = NULL;
    assert_ok(fsc_moe_create(dev, NULL, &mc, 1, &moe));
    assert_int_equal(fsc_moe_num_tensors(&mc), 1 + 4 * 4);
    fsc_moe_free(moe);
    fsc_device_free(dev);
}

static void assert_param(const fsc_layer *l, int i, const char *name, int64_t d0, int64_t d1) {
    assert_true(i < l->n_params);
    assert_string_equal(l->params[i].name, name);
    assert_int_equal(l->params[i].shape[0], d0);
    assert_int_equal(l->params[i].shape[1], d1);
}

static void test_layer_defaults(void **state) {
    (void)state;
    fsc_device *dev = NULL;
    assert_ok(fsc_device_create("cpu", NULL, &dev));
    fsc_layer *l = NULL;
    /* linear: one row, a bias, W [in, out] */
    fsc_linear_opts lo = fsc_linear_opts_default(3, 5);
    assert_true(lo.rows == 1 && lo.in == 3 && lo.out == 5 && lo.bias == 1 && lo.out_in == 0);
    assert_ok(fsc_layer_linear(&lo, &l));
    assert_int_equal(l->n_params, 2);
    assert_param(l, 0, "weight", 3, 5);
    assert_param(l, 1, "bias", 5, 0);
    assert_int_equal(l->out_floats, 5);
    fsc_layer_free(l);
    /* MLPs: F = 4 C, one row, no residual */
    fsc_mlp_opts mo = fsc_mlp_opts_default(8);
    assert_true(mo.rows == 1 && mo.C == 8 && mo.F == 32 && mo.residual == 0);
    assert_ok(fsc_layer_gelu_mlp(&mo, &l));
    assert_int_equal(l->n_params, 4);
    assert_param(l, 0, "c_fc.weight", 8, 32);
    fsc_layer_free(l);
    assert_ok(fsc_layer_swiglu_mlp(&mo, &l));
    assert_int_equal(l->n_params, 3);
    assert_param(l, 0, "gate_proj.weight", 32, 8);
    fsc_layer_free(l);
    /* attention: kv_heads = heads, no biases, no residual, no rotation */
    fsc_attention_opts ao = fsc_attention_opts_default(4, 8, 2);
    assert_true(ao.T == 4 && ao.C == 8 && ao.heads == 2 && ao.kv_heads == 2 && ao.bias == 0 && ao.residual == 0 &&
                ao.rope_theta == 0.0f);
    assert_ok(fsc_layer_attention(&ao, &l));
    assert_int_equal(l->n_params, 4);
    assert_param(l, 1, "k_proj.weight", 8, 8);
    fsc_layer_free(l);
    /* blocks */
    fsc_block_opts go = fsc_block_opts_default(FSC_BLOCK_GPT2, 8, 16, 2);
    assert_true(go.kind == FSC_BLOCK_GPT2 && go.T == 8 && go.C == 16 && go.heads == 2 && go.kv_heads == 2 &&
                go.F == 64 && go.rope_theta == 0.0f && go.eps == 1e-5f && go.separate_qkv == 0);
    fsc_block_opts ko = fsc_block_opts_default(FSC_BLOCK_LLAMA, 8, 16, 2);
    assert_true(ko.kind == FSC_BLOCK_LLAMA && ko.kv_heads == 2 && ko.F == fsc_llama_default_ffn(16) &&
                ko.rope_theta == 10000.0f && ko.eps == 1e-5f && ko.separate_qkv == 0);

    /* the GPT-2 of default blocks: the built-in GPT's tensors */
    fsc_gpt_config gc = tiny();
    enum { L = 2 };
    static char prefix[L][32];
    fsc_seq_layer sl[L + 3];
    assert_ok(fsc_layer_embedding(gc.seq, gc.dim, gc.vocab, &l));
    sl[0] = (fsc_seq_layer){ .layer = l };
    for (int i = 0; i < L; i++) {
        go = fsc_block_opts_default(FSC_BLOCK_GPT2, gc.seq, gc.dim, gc.heads);
        assert_ok(fsc_layer_block(&go, &l));
        snprintf(prefix[i], sizeof prefix[i], "h.%d.", i);
        sl[1 + i] = (fsc_seq_layer){ .layer = l, .prefix = prefix[i] };
    }
    assert_ok(fsc_layer_layernorm(gc.seq, gc.dim, &l));
    sl[L + 1] = (fsc_seq_layer){ .layer = l, .prefix = "ln_f." };
    assert_ok(fsc_layer_lm_head(gc.seq, gc.dim, gc.vocab, &l));
    sl[L + 2] = (fsc_seq_layer){ .layer = l, .prefix = "lm_head.", .tie = { { "weight", "wte.weight" } } };
    fsc_model *seq = NULL, *ref = NULL;
    assert_ok(fsc_seq_model_create(dev, sl, L + 3, &seq));
    assert_ok(fsc_gpt_model_create(dev, &gc, &ref));
    assert_int_equal(ref->n_layers, L + 2); /* the GPT's final LayerNorm is in its head layer */
    assert_int_equal(seq->n_tensors, ref->n_tensors);
    for (int i = 0; i < ref->n_tensors; i++) {
        assert_string_equal(seq->info[i].name, ref->info[i].name);
        for (int d = 0; d < ref->info[i].ndim; d++) assert_int_equal(seq->info[i].shape[d], ref->info[i].shape[d]);
    }
    fsc_model_free(seq), fsc_model_free(ref);

    /* the Llama of default blocks: the tensors of the Llama of fsc_llama_config_default's hyper-parameters
     * (kv heads = heads, the ffn rule, theta 10000, eps 1e-5), smaller */
    fsc_llama_config lc = fsc_llama_config_default();
    lc.layers = L, lc.dim = 16, lc.heads = 2, lc.kv_heads = 2, lc.ffn = fsc_llama_default_ffn(16), lc.seq = 8;
    lc.vocab = 32;
    assert_ok(fsc_layer_token_embedding(lc.seq, lc.dim, lc.vocab, &l));
    sl[0] = (fsc_seq_layer){ .layer = l, .prefix = "model.embed_tokens." };
    for (int i = 0; i < L; i++) {
        ko = fsc_block_opts_default(FSC_BLOCK_LLAMA, lc.seq, lc.dim, lc.heads);
        assert_true(ko.rope_theta == lc.rope_theta && ko.eps == lc.norm_eps && ko.F == lc.ffn);
        assert_ok(fsc_layer_block(&ko, &l));
        snprintf(prefix[i], sizeof prefix[i], "model.layers.%d.", i);
        sl[1 + i] = (fsc_seq_layer){ .layer = l, .prefix = prefix[i] };
    }
    assert_ok(fsc_layer_rmsnorm(lc.seq, lc.dim, lc.norm_eps, &l));
    sl[L + 1] = (fsc_seq_layer){ .layer = l, .prefix = "model.norm." };
    assert_ok(fsc_layer_lm_head(lc.seq, lc.dim, lc.vocab, &l));
    sl[L + 2] = (fsc_seq_layer){ .layer = l, .prefix = "lm_head." };
    assert_ok(fsc_seq_model_create(dev, sl, L + 3, &seq));
    assert_ok(fsc_llama_model_create(dev, &lc, &ref));
    assert_int_equal(seq->n_tensors, ref->n_tensors);
    for (int i = 0; i < ref->n_tensors; i++) {
        assert_string_equal(seq->info[i].name, ref->info[i].name);
        for (int d = 0; d < ref->info[i].ndim; d++) assert_int_equal(seq->info[i].shape[d], ref->info[i].shape[d]);
    }
    fsc_model_free(seq), fsc_model_free(ref);
    fsc_device_free(dev);
}

typedef struct {
    fsc_parallel_opts po;
    int steps_ok;
    char dir[64];
} engine_job;

/* One engine step with the given options; with dir set, a checkpoint with the default save options. */
static fsc_status engine_fn(fsc_rank *r, void *arg) {
    engine_job *j = arg;
    fsc_gpt_config c = tiny();
    fsc_optim_config oc = fsc_optim_config_default();
    fsc_engine *e = NULL;
    FSC_TRY(fsc_engine_create(r, &c, &j->po, &oc, 7, &e));
    int32_t tok[2 * 8], tgt[2 * 8];
    for (int i = 0; i < 16; i++) tok[i] = (i * 3 + r->rank) % 32, tgt[i] = (i * 5 + 1) % 32;
    fsc_step_info info;
    fsc_status s = fsc_engine_step(e, tok, tgt, 2, 2 * r->world, &info);
    if (s == FSC_OK && r->rank == 0) j->steps_ok = 1;
    if (s == FSC_OK && j->dir[0]) {
        fsc_ckpt_save_opts so = fsc_ckpt_save_opts_default();
        s = fsc_ckpt_save(e, j->dir, 1, &so);
    }
    fsc_engine_free(e);
    return s;
}

static void test_engine_and_cluster_defaults(void **state) {
    (void)state;
    fsc_cluster_opts co = fsc_cluster_opts_default();
    assert_int_equal(co.world, 1);
    engine_job j = { .po = fsc_parallel_opts_default() };
    snprintf(j.dir, sizeof j.dir, "/tmp/fsc_test_defaults_%d", (int)getpid());
    test_rmtree(j.dir);
    assert_ok(fsc_cluster_run(&co, engine_fn, &j));
    assert_int_equal(j.steps_ok, 1);
    fsc_ckpt_meta *m = NULL;
    char path[128];
    snprintf(path, sizeof path, "%s/step-00000001", j.dir);
    assert_ok(fsc_ckpt_verify(path, &m));
    assert_int_equal(m->format, FSC_CKPT_SHARDED);
    fsc_ckpt_meta_free(m);
    test_rmtree(j.dir);

    /* the defaults with a strategy set, on two ranks */
    co.world = 2;
    engine_job d = { .po = fsc_parallel_opts_default() };
    d.po.kind = FSC_PAR_FSDP;
    assert_ok(fsc_cluster_run(&co, engine_fn, &d));
    assert_int_equal(d.steps_ok, 1);

    /* what the defaults replace: a zero-initialised struct is refused */
    co.world = 1;
    engine_job z;
    memset(&z, 0, sizeof z);
    assert_err(fsc_cluster_run(&co, engine_fn, &z), FSC_ERR_INVALID, "accum");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_device_and_optim_defaults),
        cmocka_unit_test(test_model_defaults),
        cmocka_unit_test(test_layer_defaults),
        cmocka_unit_test(test_engine_and_cluster_defaults),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
