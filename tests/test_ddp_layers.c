/* Sequential models (layers.h) under every strategy, layer checkpointing and pipelines on the simulated cluster,
 * with a layer written in this file against the public interface (a residual GELU layer).
 *
 * Models:
 *   regressor  linear "in." (D -> H) | resgelu "block.0." | resgelu "block.1." | gelu | linear "out." (H -> D,
 *              weight tied to in.weight, read as [out, in]) | mse
 *   lm         embedding | rmsnorm | attention (rotary, 2 kv heads for 4 heads, residual) | layernorm |
 *              swiglu_mlp (residual) | layernorm | gelu_mlp (residual) | lm_head (weight tied to wte.weight)
 * Oracles: FSDP (full_shard, shard_grad_op, hybrid_shard, no_shard; block, model and min_params wrapping), ZeRO-1
 * and ZeRO-2 on 4 ranks equal DDP on 4 ranks bit for bit (every step's loss, the final parameters); DDP with layer
 * checkpointing equals DDP without; a 2-stage pipeline over 2 data ranks (GPipe and 1F1B, the tied weight across
 * the stages, every pipeline checkpoint mode) equals DDP on 2 ranks accumulating the same micro-batches bit for
 * bit. Training lowers the loss. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "modeltest.h"

/* ---- a user layer: out = in + gelu(in W + b), W "weight" (H, H), b "bias" (H) ------------------------------- */
typedef struct {
    fsc_layer l; /* first */
    int H;
} resgelu;

static size_t rg_rec(const fsc_layer *l, int B) { return 2 * (size_t)B * ((const resgelu *)l)->H * sizeof(float); }
static size_t rg_work(const fsc_layer *l, int B) { return 2 * (size_t)B * ((const resgelu *)l)->H * sizeof(float); }

static fsc_status rg_forward(const fsc_layer *l, const fsc_layer_call *c, float *out, const void *in) {
    const int H = ((const resgelu *)l)->H;
    const size_t n = (size_t)c->B * H;
    float *z = c->rec, *a = z + n; /* saved: the pre-activation and the activation */
    FSC_TRY(fsc_linear_forward(c->dev, z, NULL, in, c->param[0], c->param[1], (size_t)c->B, H, H, 0));
    FSC_TRY(fsc_gelu_forward(c->dev, a, NULL, z, n));
    return fsc_residual_forward(c->dev, out, in, a, n);
}

static fsc_status rg_backward(const fsc_layer *l, const fsc_layer_call *c, float *dinp, const float *dout,
                              const void *in) {
    const int H = ((const resgelu *)l)->H;
    const size_t n = (size_t)c->B * H;
    float *z = c->rec, *dz = c->work;
    fsc_gelu_rec gr = { .inp = z, .n = n };
    FSC_TRY(fsc_gelu_backward(c->dev, dz, &gr, dout));
    fsc_linear_rec lr = { .inp = in, .N = (size_t)c->B, .C = H, .OC = H };
    FSC_TRY(fsc_linear_backward(c->dev, dinp, c->grad[0], c->grad[1], &lr, dz, c->param[0], 0.0f, 1.0f));
    return dinp ? fsc_residual_backward(c->dev, dinp, NULL, dout, n) : FSC_OK;
}

static const fsc_layer_ops rg_ops = { .rec_bytes = rg_rec, .work_bytes = rg_work, .forward = rg_forward,
                                      .backward = rg_backward };

static fsc_status resgelu_create(int H, fsc_layer **out) {
    resgelu *r = calloc(1, sizeof *r);
    if (!r) return fsc_error(FSC_ERR_NOMEM, "resgelu: out of memory");
    strcpy(r->l.kind, "resgelu");
    r->l.ops = &rg_ops;
    r->l.in_bytes = (size_t)H * sizeof(float);
    r->l.out_floats = (size_t)H;
    r->H = H;
    *out = &r->l;
    const int64_t w[2] = { H, H }, b[1] = { H };
    fsc_status s = fsc_layer_add_param(*out, "weight", 2, w, fsc_init_normal(0.3f));
    if (s == FSC_OK) s = fsc_layer_add_param(*out, "bias", 1, b, fsc_init_normal(0.1f));
    if (s != FSC_OK) fsc_layer_free(*out), *out = NULL;
    return s;
}

/* ---- the two models ---------------------------------------------------------------------------------------- */
enum { D_ = 5, H_ = 8, T_ = 4, C_ = 8, V_ = 11, GB = 8, MAXSTEPS = 3 };

static fsc_status regressor(fsc_device *dev, fsc_model **m) {
    fsc_layer *l[6] = { 0 };
    FSC_TRY(fsc_layer_linear(&(fsc_linear_opts){ .in = D_, .out = H_, .bias = 1 }, &l[0]));
    FSC_TRY(fsc_layer_set_init(l[0], "weight", fsc_init_normal(0.4f)));
    FSC_TRY(resgelu_create(H_, &l[1]));
    FSC_TRY(resgelu_create(H_, &l[2]));
    FSC_TRY(fsc_layer_gelu(H_, &l[3]));
    FSC_TRY(fsc_layer_linear(&(fsc_linear_opts){ .in = H_, .out = D_, .bias = 1, .out_in = 1 }, &l[4]));
    FSC_TRY(fsc_layer_mse(D_, &l[5]));
    fsc_seq_layer ls[6] = { { l[0], "in.", { { 0 } } }, { l[1], "block.0.", { { 0 } } },
                            { l[2], "block.1.", { { 0 } } }, { l[3], NULL, { { 0 } } },
                            { l[4], "out.", { { "weight", "in.weight" } } }, { l[5], NULL, { { 0 } } } };
    return fsc_seq_model_create(dev, ls, 6, m);
}

static fsc_status lm(fsc_device *dev, fsc_model **m) {
    fsc_layer *l[8] = { 0 };
    FSC_TRY(fsc_layer_embedding(T_, C_, V_, &l[0]));
    FSC_TRY(fsc_layer_set_init(l[0], "wte.weight", fsc_init_normal(0.3f)));
    FSC_TRY(fsc_layer_rmsnorm(T_, C_, 1e-5f, &l[1]));
    FSC_TRY(fsc_layer_attention(&(fsc_attention_opts){ .T = T_, .C = C_, .heads = 4, .kv_heads = 2, .residual = 1,
                                                       .rope_theta = 10000.0f }, &l[2]));
    FSC_TRY(fsc_layer_layernorm(T_, C_, &l[3]));
    FSC_TRY(fsc_layer_swiglu_mlp(&(fsc_mlp_opts){ .rows = T_, .C = C_, .F = 12, .residual = 1 }, &l[4]));
    FSC_TRY(fsc_layer_layernorm(T_, C_, &l[5]));
    FSC_TRY(fsc_layer_gelu_mlp(&(fsc_mlp_opts){ .rows = T_, .C = C_, .F = 16, .residual = 1 }, &l[6]));
    FSC_TRY(fsc_layer_lm_head(T_, C_, V_, &l[7]));
    fsc_seq_layer ls[8] = { { l[0], "", { { 0 } } }, { l[1], "layers.0.input_layernorm.", { { 0 } } },
                            { l[2], "layers.0.self_attn.", { { 0 } } }, { l[3], "layers.0.ln.", { { 0 } } },
                            { l[4], "layers.0.mlp.", { { 0 } } }, { l[5], "layers.1.ln.", { { 0 } } },
                            { l[6], "layers.1.mlp.", { { 0 } } }, { l[7], "lm_head.", { { "weight", "wte.weight" } } } };
    return fsc_seq_model_create(dev, ls, 8, m);
}

/* ---- training runs --------------------------------------------------------------------------------------- */
typedef struct {
    int world, is_lm;
    fsc_parallel_opts po;
    int steps;
    double loss[MAXSTEPS];
    size_t P;
    float *after; /* (P) after training */
} job;

static void sample(const job *j, size_t i, void *x, void *y) {
    for (int d = 0; d < (j->is_lm ? T_ : D_); d++) {
        uint64_t h = (i * 131 + (size_t)d) * 0x9E3779B97F4A7C15ull;
        if (j->is_lm) {
            ((int32_t *)x)[d] = (int32_t)((h >> 40) % V_);
            ((int32_t *)y)[d] = (int32_t)(((h >> 40) + 3) % V_);
        } else {
            ((float *)x)[d] = (float)((h >> 40) % 2000) / 1000.0f - 1.0f;
        }
    }
    for (int d = 0; !j->is_lm && d < D_; d++)
        ((float *)y)[d] = sinf(2.0f * ((float *)x)[d]) * 0.5f + 0.25f * ((float *)x)[(d + 1) % D_];
}

static fsc_status job_rank(fsc_rank *r, void *arg) {
    job *j = arg;
    fsc_model *m = NULL;
    FSC_TRY(j->is_lm ? lm(r->dev, &m) : regressor(r->dev, &m));
    fsc_optim_config oc = { .kind = FSC_OPT_ADAMW, .lr = 1e-2f, .weight_decay = 0.01f, .beta1 = 0.9f,
                            .beta2 = 0.999f, .eps = 1e-8f };
    fsc_engine *e = NULL;
    fsc_status s = fsc_engine_create_model(r, m, &j->po, &oc, 5, &e);
    const int dp = s == FSC_OK ? fsc_engine_layout(e)->dp : 1, di = s == FSC_OK ? fsc_engine_layout(e)->data : 0;
    const int lb = GB / dp;
    char *x = malloc((size_t)lb * m->sample_input_bytes), *y = malloc((size_t)lb * m->sample_target_bytes);
    for (int st = 0; st < j->steps && s == FSC_OK; st++) {
        for (int i = 0; i < lb; i++)
            sample(j, (size_t)st * GB + (size_t)di * lb + i, x + i * m->sample_input_bytes,
                   y + i * m->sample_target_bytes);
        fsc_step_info info;
        s = fsc_engine_step_model(e, x, y, lb, GB, &info);
        if (s == FSC_OK && r->rank == 0) j->loss[st] = info.loss;
    }
    if (s == FSC_OK) s = fsc_engine_full_params(e, r->rank == 0 ? j->after : NULL);
    free(x), free(y);
    fsc_engine_free(e);
    fsc_model_free(m);
    return s;
}

static job make(int is_lm, int world, fsc_parallel_kind kind) {
    job j;
    memset(&j, 0, sizeof j);
    j.is_lm = is_lm, j.world = world, j.steps = MAXSTEPS;
    j.po = mt_opts(kind, 1.0f);
    fsc_device *dev = NULL;
    fsc_model *m = NULL;
    assert_ok(fsc_device_create("cpu", NULL, &dev));
    assert_ok(is_lm ? lm(dev, &m) : regressor(dev, &m));
    j.P = fsc_model_num_params(m);
    fsc_model_free(m);
    fsc_device_free(dev);
    return j;
}

static void train(job *j) {
    mt_train(j->world, 60, j->P, &j->after, job_rank, j);
}

static void assert_same(const job *a, const job *b, const char *what) {
    mt_assert_same(a->loss, b->loss, a->steps, a->after, b->after, a->P, what);
}

/* ---- tests ------------------------------------------------------------------------------------------------ */
static void strategies_equal_ddp(int is_lm) {
    job ddp = make(is_lm, 4, FSC_PAR_DDP);
    train(&ddp);
    assert_true(ddp.loss[MAXSTEPS - 1] < ddp.loss[0]); /* it learns */
    const mt_strategy cases[] = {
        { FSC_PAR_FSDP, FSC_SHARD_FULL, FSC_WRAP_BLOCK, 0, "fsdp full_shard" },
        { FSC_PAR_FSDP, FSC_SHARD_GRAD_OP, FSC_WRAP_BLOCK, 0, "fsdp shard_grad_op" },
        { FSC_PAR_FSDP, FSC_SHARD_HYBRID, FSC_WRAP_BLOCK, 0, "fsdp hybrid_shard" },
        { FSC_PAR_FSDP, FSC_SHARD_NONE, FSC_WRAP_BLOCK, 0, "fsdp no_shard" },
        { FSC_PAR_FSDP, FSC_SHARD_FULL, FSC_WRAP_MODEL, 0, "fsdp full_shard, one unit" },
        { FSC_PAR_FSDP, FSC_SHARD_FULL, FSC_WRAP_MIN_PARAMS, 1, "fsdp full_shard, min_params, layer checkpointing" },
        { FSC_PAR_ZERO1, 0, 0, 0, "zero1" },
        { FSC_PAR_ZERO2, 0, 0, 0, "zero2" },
        { FSC_PAR_DDP, 0, 0, 1, "ddp with layer checkpointing" },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        job j = make(is_lm, 4, cases[k].kind);
        mt_apply(&j.po, &cases[k], 80);
        train(&j);
        assert_same(&ddp, &j, cases[k].what);
        free(j.after);
    }
    free(ddp.after);
}

static void pipeline_equals_ddp(int is_lm, const int *balance) {
    job ddp = make(is_lm, 2, FSC_PAR_DDP);
    mt_accumulate(&ddp.po, 2);
    train(&ddp);
    const fsc_pipe_checkpoint modes[3] = { FSC_PIPE_CKPT_EXCEPT_LAST, FSC_PIPE_CKPT_ALWAYS, FSC_PIPE_CKPT_NEVER };
    for (int sched = 0; sched < 2; sched++)
        for (int c = 0; c < 3; c++) {
            job p = make(is_lm, 4, sched ? FSC_PAR_FSDP : FSC_PAR_DDP);
            mt_pipeline(&p.po, sched, modes[c], balance);
            train(&p);
            assert_same(&ddp, &p, sched ? "pipeline 1f1b with fsdp" : "pipeline gpipe");
            free(p.after);
        }
    free(ddp.after);
}

static void test_regressor_strategies(void **st) {
    (void)st;
    strategies_equal_ddp(0);
}
static void test_lm_strategies(void **st) {
    (void)st;
    strategies_equal_ddp(1);
}
static void test_regressor_pipeline(void **st) {
    (void)st;
    const int balance[2] = { 2, 2 }; /* in, block.0, block.1 | gelu, out (tied to in.weight), mse */
    pipeline_equals_ddp(0, balance);
}
static void test_lm_pipeline(void **st) {
    (void)st;
    const int balance[2] = { 3, 3 }; /* embedding .. layers.0.ln | mlp .. lm_head (tied to wte) */
    pipeline_equals_ddp(1, balance);
}

/* fsc_engine_step is the GPT's (int32 tokens): on an engine of another model it is refused, not run on the
 * tokens read as that model's samples (a regressor's floats: a read past the caller's buffer). */
static fsc_status step_other_model(fsc_rank *r, void *arg) {
    (void)arg;
    fsc_model *m = NULL;
    FSC_TRY(regressor(r->dev, &m));
    fsc_optim_config oc = fsc_optim_config_default();
    fsc_parallel_opts po = fsc_parallel_opts_default();
    fsc_engine *e = NULL;
    fsc_status s = fsc_engine_create_model(r, m, &po, &oc, 1, &e);
    int32_t tok[4] = { 0 };
    if (s == FSC_OK) s = fsc_engine_step(e, tok, tok, 1, 1, NULL);
    fsc_engine_free(e);
    fsc_model_free(m);
    return s;
}

static void test_gpt_step_on_another_model(void **st) {
    (void)st;
    assert_err(fsc_cluster_run(&(fsc_cluster_opts){ .world = 1, .timeout_s = 30 }, step_other_model, NULL),
               FSC_ERR_INVALID, "the engine's model is not the GPT");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_regressor_strategies),
        cmocka_unit_test(test_gpt_step_on_another_model),
        cmocka_unit_test(test_lm_strategies),
        cmocka_unit_test(test_regressor_pipeline),
        cmocka_unit_test(test_lm_pipeline),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
