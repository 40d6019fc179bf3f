/* The Llama with mixture-of-experts decoder layers (llama.h's moe_* fields; lib/layers/block_moe.c, moe_mlp.c) in
 * the training engine on the simulated cluster, and in the trainer.
 * Oracles:
 * - description: the model's tensors are fsc_llama_param_info's (names, shapes, owners, experts), the MoE layers
 *   hold mlp.gate.weight and mlp.experts.{e}.{c_fc,c_proj}.{weight,bias} in place of the SwiGLU MLP, sizes sum
 *   to fsc_llama_num_params; the model's initial values are fsc_llama_init_values' bit for bit (experts' biases
 *   0, norms 1); the configuration text records the MoE fields, a dense Llama's text has none, and the text
 *   builds the same model (fsc_model_from_config);
 * - expert parallelism: ep = world (2 and 4 ranks) equals ep = 1 with DDP bit for bit: every step's loss,
 *   load-balancing loss, gradient norm, assignments and drops, and the final parameters (the expert layer adds
 *   its weight gradients source rank by source rank, DDP's order; tests/test_moe_engine.c says why);
 * - gradients: the model's gradient of the mean loss equals central finite differences (eps 1e-2) of its float
 *   forward within 2e-2 of the tensor's largest difference plus 1e-4, at sampled elements of every tensor of an MoE
 *   decoder layer (attention, norms, the gate, both experts), with 2 experts, top-2 and capacity factor 1 (every
 *   token keeps both choices, so the objective is smooth: no routing decision can flip) and moe_aux 0;
 * - FSDP (full_shard) and ZeRO-2 equal DDP bit for bit with every expert on every rank, and zero1, zero2 and
 *   fsdp (also with prefetch and layer checkpointing) equal DDP bit for bit with ep 2 of 4 ranks;
 * - layer checkpointing equals none bit for bit (losses, aux loss, drops, norms, parameters), ep 1 and ep 2;
 * - the trainer runs --model llama --moe-experts 4 --ep 2 on 2 ranks with the losses of --ep 1, bit for bit as
 *   printed (17 digits), and reports the MoE layers in its JSON. */
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <unistd.h>
#include "modeltest.h"
#include "trainertest.h"
#include "fsc/llama.h"

enum { GB = 8, STEPS = 3 };

static fsc_llama_config moe_llama(void) {
    return (fsc_llama_config){ .layers = 3, .dim = 16, .heads = 4, .kv_heads = 2, .ffn = 24, .seq = 8, .vocab = 32,
                               .rope_theta = 10000.0f, .norm_eps = 1e-5f, .moe_experts = 4, .moe_top_k = 2,
                               .moe_every = 1, .moe_capacity = 1.0f, .moe_aux = 0.01f };
}

static void test_description(void **st) {
    fsc_device *dev = *st;
    fsc_llama_config c = moe_llama();
    c.moe_every = 2, c.moe_experts = 3; /* layer 1 only */
    assert_ok(fsc_llama_config_validate(&c));
    assert_int_equal(fsc_llama_num_tensors(&c), 1 + 9 * 3 + 2 + (4 * 3 - 2));
    assert_int_equal(fsc_llama_num_moe_layers(&c), 1);
    fsc_model *m;
    assert_ok(fsc_llama_model_create(dev, &c, &m));
    assert_int_equal(m->n_tensors, fsc_llama_num_tensors(&c));
    assert_int_equal(m->n_experts, 3);
    size_t total = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        fsc_param_info p;
        assert_ok(fsc_llama_param_info(&c, i, &p));
        const fsc_param_info *g = &m->info[i];
        assert_string_equal(g->name, p.name);
        assert_int_equal(g->layer, p.layer);
        assert_int_equal(g->expert, p.expert);
        assert_int_equal(g->numel, p.numel);
        assert_int_equal(g->ndim, p.ndim);
        total += p.numel;
        float *want = malloc(p.numel * sizeof(float)), *got = malloc(p.numel * sizeof(float));
        fsc_llama_init_values(&c, 5, i, 0, p.numel, want);
        m->ops->init_values(m->ctx, 5, i, 0, p.numel, got);
        assert_bits_equal(want, got, p.numel, p.name);
        if (strstr(p.name, ".bias")) assert_true(got[0] == 0.0f && p.expert >= 0);
        free(want), free(got);
    }
    assert_int_equal(total, fsc_llama_num_params(&c));
    const char *names[] = { "model.layers.1.mlp.gate.weight", "model.layers.1.mlp.experts.2.c_proj.bias",
                            "model.layers.0.mlp.gate_proj.weight", "model.layers.1.post_attention_layernorm.weight" };
    for (int k = 0; k < 4; k++) assert_true(fsc_model_tensor_index(m, names[k]) >= 0);
    assert_int_equal(fsc_model_tensor_index(m, "model.layers.1.mlp.gate_proj.weight"), -1);
    char txt[512];
    fsc_llama_config_json(&c, txt, sizeof txt);
    assert_non_null(strstr(txt, "\"moe_experts\":3"));
    assert_ok(fsc_llama_config_check_json(&c, txt));
    fsc_model *m2; /* the record builds the same model (fsc_model_from_config: the sampler's and weights files') */
    assert_ok(fsc_model_from_config(dev, txt, &m2));
    char txt2[512];
    m2->ops->config(m2->ctx, txt2, sizeof txt2);
    assert_string_equal(txt2, txt);
    assert_int_equal(m2->n_tensors, m->n_tensors);
    assert_int_equal(m2->n_experts, 3);
    fsc_model_free(m2);
    fsc_llama_config d = moe_llama();
    d.moe_experts = d.moe_top_k = d.moe_every = 0, d.moe_capacity = d.moe_aux = 0;
    fsc_llama_config_json(&d, txt, sizeof txt);
    assert_null(strstr(txt, "moe"));
    fsc_model_free(m);
    d.moe_top_k = 2;
    assert_err(fsc_llama_config_validate(&d), FSC_ERR_INVALID, "apply to MoE models only");
    /* above the MoE layer's limit (1e6): refused here, not when the engine builds the layer */
    d = moe_llama();
    d.moe_aux = 1e30f;
    assert_err(fsc_llama_config_validate(&d), FSC_ERR_INVALID, "moe_aux 1e+30");
    d = moe_llama();
    d.moe_capacity = 2e6f;
    assert_err(fsc_llama_config_validate(&d), FSC_ERR_INVALID, "moe_capacity 2e+06");
}

/* The gradient check above, on one device through the model's operations. */
static void test_gradients(void **st) {
    fsc_device *dev = *st;
    fsc_llama_config c = { .layers = 1, .dim = 8, .heads = 2, .kv_heads = 1, .ffn = 12, .seq = 4, .vocab = 11,
                           .rope_theta = 10000.0f, .norm_eps = 1e-5f, .moe_experts = 2, .moe_top_k = 2,
                           .moe_every = 1, .moe_capacity = 1.0f, .moe_aux = 0.0f };
    enum { B = 2 };
    const int N = B * c.seq;
    fsc_model *m;
    assert_ok(fsc_llama_model_create(dev, &c, &m));
    const size_t P = fsc_model_num_params(m);
    float *hp = malloc(P * sizeof(float)), *hg = malloc(P * sizeof(float)), *dp, *dg;
    assert_ok(fsc_device_alloc(dev, FSC_TAG_PARAMS, P * sizeof(float), (void **)&dp));
    assert_ok(fsc_device_calloc(dev, FSC_TAG_GRADS, P * sizeof(float), (void **)&dg));
    size_t *off = calloc((size_t)m->n_tensors + 1, sizeof *off);
    for (int i = 0; i < m->n_tensors; i++) {
        off[i + 1] = off[i] + m->info[i].numel;
        m->param[i] = dp + off[i], m->grad[i] = dg + off[i];
        m->ops->init_values(m->ctx, 3, i, 0, m->info[i].numel, hp + off[i]);
        for (size_t k = 0; k < m->info[i].numel; k++) /* biases too */
            hp[off[i] + k] += 0.1f * sinf((float)(off[i] + k));
    }
    assert_ok(fsc_device_upload(dev, dp, hp, P * sizeof(float)));
    int32_t tok[B * 4], tgt[B * 4];
    for (int k = 0; k < N; k++) tok[k] = (k * 7 + 3) % c.vocab, tgt[k] = (k * 5 + 1) % c.vocab;
    fsc_model_acts *a;
    assert_ok(m->ops->acts_create(m->ctx, &(fsc_model_acts_opts){ .B = B, .last = m->n_layers - 1 }, &a));
    assert_ok(m->ops->set_batch(m->ctx, a, tok, tgt));
    double loss;
    assert_ok(m->ops->forward(m->ctx, a, NULL, &loss));
    assert_ok(m->ops->backward(m->ctx, a, NULL, 1.0f / (float)N));
    assert_ok(fsc_device_download(dev, hg, dg, P * sizeof(float)));
    int checked = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        if (m->info[i].layer != 1) continue; /* the MoE decoder layer */
        const size_t n = m->info[i].numel;
        size_t idx[6] = { 0, n - 1, n / 2, n / 3, (2 * n) / 3, n / 5 };
        double fd[6], mx = 0;
        for (int k = 0; k < 6; k++) {
            float *x = hp + off[i] + idx[k];
            const float v = *x, eps = 1e-2f;
            double f[2];
            for (int sgn = 0; sgn < 2; sgn++) {
                *x = v + (sgn ? -eps : eps);
                assert_ok(fsc_device_upload(dev, dp + off[i] + idx[k], x, sizeof(float)));
                assert_ok(m->ops->forward(m->ctx, a, NULL, &f[sgn]));
            }
            *x = v;
            assert_ok(fsc_device_upload(dev, dp + off[i] + idx[k], x, sizeof(float)));
            fd[k] = (f[0] - f[1]) / (2.0 * eps * N);
            mx = fmax(mx, fabs(fd[k]));
        }
        for (int k = 0; k < 6; k++)
            if (!(fabs(hg[off[i] + idx[k]] - fd[k]) <= 2e-2 * mx + 1e-4))
                fail_msg("%s[%zu]: gradient %.7g, finite difference %.7g (max |fd| %.3g)", m->info[i].name, idx[k],
                         (double)hg[off[i] + idx[k]], fd[k], mx);
        checked++;
    }
    assert_int_equal(checked, 7 + 4 * 2); /* q k v o, the gate, 2 experts x 4, two norms */
    m->ops->acts_free(m->ctx, a);
    fsc_device_release(dev, dp), fsc_device_release(dev, dg);
    free(hp), free(hg), free(off);
    fsc_model_free(m);
}

typedef struct {
    int world;
    fsc_parallel_opts po;
    fsc_step_info info[STEPS];
    size_t P;
    float *after;
} job;

static void sample(size_t i, const fsc_llama_config *c, int32_t *tok, int32_t *tgt) {
    for (int t = 0; t < c->seq; t++) {
        const uint64_t h = (i * 1009 + (size_t)t) * 0x9E3779B97F4A7C15ull,
                       h2 = (i * 1009 + (size_t)t + 1) * 0x9E3779B97F4A7C15ull;
        tok[t] = (int32_t)((h >> 33) % (uint64_t)c->vocab);
        tgt[t] = (int32_t)((h2 >> 33) % (uint64_t)c->vocab);
    }
}

static fsc_status job_rank(fsc_rank *r, void *arg) {
    job *j = arg;
    fsc_llama_config c = moe_llama();
    fsc_model *m = NULL;
    FSC_TRY(fsc_llama_model_create(r->dev, &c, &m));
    fsc_optim_config oc = { .kind = FSC_OPT_ADAMW, .lr = 1e-2f, .weight_decay = 0.01f, .beta1 = 0.9f,
                            .beta2 = 0.999f, .eps = 1e-8f };
    fsc_engine *e = NULL;
    fsc_status s = fsc_engine_create_model(r, m, &j->po, &oc, 7, &e);
    const int lb = GB / r->world;
    int32_t *tok = malloc((size_t)lb * c.seq * sizeof *tok), *tgt = malloc((size_t)lb * c.seq * sizeof *tgt);
    for (int step = 0; step < STEPS && s == FSC_OK; step++) {
        for (int i = 0; i < lb; i++)
            sample((size_t)step * GB + (size_t)r->rank * lb + i, &c, tok + (size_t)i * c.seq, tgt + (size_t)i * c.seq);
        fsc_step_info info;
        s = fsc_engine_step_model(e, tok, tgt, lb, GB, &info);
        if (s == FSC_OK && r->rank == 0) j->info[step] = info;
    }
    if (s == FSC_OK) s = fsc_engine_full_params(e, r->rank == 0 ? j->after : NULL);
    free(tok), free(tgt);
    fsc_engine_free(e);
    fsc_model_free(m);
    return s;
}

static job make(int world, fsc_parallel_kind kind, int ep) {
    job j;
    memset(&j, 0, sizeof j);
    fsc_llama_config c = moe_llama();
    j.world = world;
    j.po = mt_opts(kind, 0.5f);
    j.po.ep = ep;
    j.P = fsc_llama_num_params(&c);
    return j;
}

static void train(job *j) { mt_train(j->world, 60, j->P, &j->after, job_rank, j); }

static void assert_same(const job *a, const job *b, const char *what) {
    for (int s = 0; s < STEPS; s++) {
        const fsc_step_info *x = &a->info[s], *y = &b->info[s];
        if (memcmp(&x->loss, &y->loss, sizeof(double)) || memcmp(&x->aux_loss, &y->aux_loss, sizeof(double)) ||
            memcmp(&x->grad_norm, &y->grad_norm, sizeof(double)) || x->moe_dropped != y->moe_dropped ||
            x->moe_assigned != y->moe_assigned)
            fail_msg("%s: step %d differs: loss %.17g vs %.17g, aux %.17g vs %.17g, norm %.17g vs %.17g, dropped "
                     "%lld vs %lld", what, s, x->loss, y->loss, x->aux_loss, y->aux_loss, x->grad_norm, y->grad_norm,
                     (long long)x->moe_dropped, (long long)y->moe_dropped);
    }
    assert_bits_equal(a->after, b->after, a->P, what);
}

static void test_ep_equals_ep1(void **st) {
    (void)st;
    for (int W = 2; W <= 4; W *= 2) {
        job a = make(W, FSC_PAR_DDP, 1), b = make(W, FSC_PAR_DDP, W);
        train(&a), train(&b);
        char what[64];
        snprintf(what, sizeof what, "llama: ep %d vs ep 1 on %d ranks", W, W);
        assert_same(&a, &b, what);
        assert_true(a.info[0].moe_dropped > 0); /* capacity factor 1, top-2: drops are covered */
        assert_int_equal(a.info[0].moe_assigned, (int64_t)2 * GB * 8 * 3); /* k x tokens x MoE layers */
        assert_true(a.info[0].aux_loss > 0 && a.info[0].aux_loss < 3 * 4);
        assert_true(a.info[STEPS - 1].loss < a.info[0].loss);
        free(a.after), free(b.after);
    }
}

static void test_sharded_equals_ddp(void **st) {
    (void)st;
    job ddp = make(2, FSC_PAR_DDP, 1);
    train(&ddp);
    const fsc_parallel_kind kinds[] = { FSC_PAR_FSDP, FSC_PAR_ZERO2 };
    for (int k = 0; k < 2; k++) {
        job j = make(2, kinds[k], 1);
        train(&j);
        assert_same(&ddp, &j, fsc_parallel_kind_name(kinds[k]));
        free(j.after);
    }
    free(ddp.after);
    /* expert parallelism: ep 2 of 4 ranks, each strategy against DDP with ep 2; fsdp with prefetch and layer
     * checkpointing too */
    ddp = make(4, FSC_PAR_DDP, 2);
    train(&ddp);
    const fsc_parallel_kind ep_kinds[] = { FSC_PAR_ZERO1, FSC_PAR_ZERO2, FSC_PAR_FSDP, FSC_PAR_FSDP };
    for (int k = 0; k < 4; k++) {
        job j = make(4, ep_kinds[k], 2);
        j.po.prefetch = k == 3, j.po.checkpoint = k == 3;
        train(&j);
        char what[64];
        snprintf(what, sizeof what, "llama: %s ep 2%s vs ddp ep 2", fsc_parallel_kind_name(ep_kinds[k]),
                 k == 3 ? ", prefetch, checkpoint" : "");
        assert_same(&ddp, &j, what);
        free(j.after);
    }
    free(ddp.after);
}

/* Layer checkpointing (each layer recomputed in backward, the MoE layers' routing and all-to-alls again) equals
 * none bit for bit, with ep 1 and ep 2 on 2 ranks. */
static void test_checkpoint_equals_none(void **st) {
    (void)st;
    for (int ep = 1; ep <= 2; ep++) {
        job a = make(2, FSC_PAR_DDP, ep), b = make(2, FSC_PAR_DDP, ep);
        b.po.checkpoint = 1;
        train(&a), train(&b);
        char what[64];
        snprintf(what, sizeof what, "llama: checkpoint vs none, ep %d", ep);
        assert_same(&a, &b, what);
        assert_true(a.info[0].moe_dropped > 0 && a.info[0].aux_loss > 0);
        free(a.after), free(b.after);
    }
}

static char trainer[PATH_MAX], tmpdir[64];

static void test_trainer(void **st) {
    (void)st;
    const char *model = "--model llama --layers 2 --dim 16 --heads 4 --seq 8 --batch 8 --steps 3 --threads 1 "
                        "--moe-experts 4 --moe-top-k 2 --moe-capacity 1 --world 2 --parallel ddp";
    cJSON *one = prog_json(trainer, tmpdir, model, "--ep 1"), *two = prog_json(trainer, tmpdir, model, "--ep 2");
    const cJSON *l1 = cJSON_GetObjectItem(one, "losses"), *l2 = cJSON_GetObjectItem(two, "losses");
    assert_int_equal(cJSON_GetArraySize(l1), 3);
    for (int s = 0; s < 3; s++) {
        double x = cJSON_GetArrayItem(l1, s)->valuedouble, y = cJSON_GetArrayItem(l2, s)->valuedouble;
        if (memcmp(&x, &y, sizeof x)) fail_msg("step %d: --ep 2 loss %.17g, --ep 1 %.17g", s, y, x);
    }
    const cJSON *moe = cJSON_GetObjectItem(two, "moe");
    assert_non_null(moe);
    assert_int_equal(cJSON_GetObjectItem(moe, "moe_blocks")->valueint, 2);
    cJSON_Delete(one), cJSON_Delete(two);
}

static int setup(void **state) {
    fsc_device *dev;
    if (fsc_device_create("cpu", &(fsc_device_opts){ .threads = 1 }, &dev) != FSC_OK) return -1;
    *state = dev;
    return 0;
}
static int teardown(void **state) {
    fsc_device_free(*state);
    return 0;
}

int main(int argc, char **argv) {
    (void)argc;
    if (prog_setup(argv[0], "test_moe_llama", "train_gpt", trainer, sizeof trainer, tmpdir, sizeof tmpdir)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_description, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gradients, setup, teardown),
        cmocka_unit_test(test_ep_equals_ep1),
        cmocka_unit_test(test_sharded_equals_ddp),
        cmocka_unit_test(test_checkpoint_equals_none),
        cmocka_unit_test(test_trainer),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) rc = rc ? rc : 1;
    return rc;
}
