/* The mixture-of-experts MLP as a layer (layers.h's fsc_layer_moe_mlp; lib/layers/moe_mlp.c) in a sequential
 * model on one device.
 * Oracles:
 * - declaration: 1 + 4 E parameters (past the 16 of a dense layer: the table grows) named gate.weight and
 *   experts.{e}.{c_fc,c_proj}.{weight,bias}, the model's info[].expert set on the experts' tensors and n_experts E,
 *   the model's ops offering aux_stats and set_expert_group; impossible options refused with a message;
 * - gradients: the model's gradients of the mean loss (linear -> MoE MLP with residual -> MSE) equal central
 *   finite differences (eps 1e-2) of its float forward within 2e-2 of the tensor's largest difference plus 1e-4 at
 *   sampled elements of every tensor, with 2 experts, top-2, capacity factor 1 (every token keeps both choices: no
 *   routing decision can flip) and aux 0; the input layer's gradient checks the MoE layer's input gradient;
 * - statistics: aux_stats reports k x tokens assignments, no drops at that capacity, a positive aux loss; with
 *   capacity factor 0.25 and top-1 some assignments are dropped. */
#include <math.h>
#include <stdlib.h>
#include "testutil.h"

enum { ROWS = 4, C = 8, F = 6, IN = 3, B = 2 };

static fsc_status build(fsc_device *dev, int E, int k, float cf, fsc_model **m) {
    fsc_layer *a = NULL, *b = NULL, *c = NULL;
    fsc_linear_opts lo = fsc_linear_opts_default(IN, C);
    lo.rows = ROWS;
    FSC_TRY(fsc_layer_linear(&lo, &a));
    fsc_moe_mlp_opts mo = { .rows = ROWS, .C = C, .F = F, .experts = E, .top_k = k, .capacity = cf, .aux = 0.0f,
                            .residual = 1 };
    fsc_status s = fsc_layer_moe_mlp(&mo, &b);
    if (s == FSC_OK) s = fsc_layer_mse((size_t)ROWS * C, &c);
    if (s != FSC_OK) {
        fsc_layer_free(a), fsc_layer_free(b), fsc_layer_free(c);
        return s;
    }
    fsc_seq_layer sl[3] = { { .layer = a, .prefix = "in." }, { .layer = b, .prefix = "moe." }, { .layer = c } };
    return fsc_seq_model_create(dev, sl, 3, m);
}

static void test_declaration(void **st) {
    fsc_device *dev = *st;
    fsc_model *m;
    assert_ok(build(dev, 8, 2, 1.0f, &m));
    fsc_layer *l = fsc_seq_model_layer(m, 1);
    assert_int_equal(l->n_params, 1 + 4 * 8);
    assert_string_equal(l->params[0].name, "gate.weight");
    assert_string_equal(l->params[1 + 4 * 7 + 2].name, "experts.7.c_proj.weight");
    assert_int_equal(m->n_experts, 8);
    assert_non_null(m->ops->aux_stats);
    assert_non_null(m->ops->set_expert_group);
    for (int i = 0; i < m->n_tensors; i++) {
        const char *e = strstr(m->info[i].name, "experts.");
        assert_int_equal(m->info[i].expert, e ? atoi(e + 8) : -1);
    }
    fsc_model_free(m);
    fsc_layer *x = NULL;
    assert_err(fsc_layer_moe_mlp(&(fsc_moe_mlp_opts){ .rows = 1, .C = 4, .experts = 1, .top_k = 2 }, &x),
               FSC_ERR_INVALID, "top-2");
    assert_null(x);
}

static void test_gradients_and_stats(void **st) {
    fsc_device *dev = *st;
    fsc_model *m;
    assert_ok(build(dev, 2, 2, 1.0f, &m));
    const size_t P = fsc_model_num_params(m);
    float *hp = malloc(P * sizeof(float)), *hg = malloc(P * sizeof(float)), *dp, *dg;
    assert_ok(fsc_device_alloc(dev, FSC_TAG_PARAMS, P * sizeof(float), (void **)&dp));
    assert_ok(fsc_device_calloc(dev, FSC_TAG_GRADS, P * sizeof(float), (void **)&dg));
    size_t *off = calloc((size_t)m->n_tensors + 1, sizeof *off);
    for (int i = 0; i < m->n_tensors; i++) {
        off[i + 1] = off[i] + m->info[i].numel;
        m->param[i] = dp + off[i], m->grad[i] = dg + off[i];
        for (size_t k = 0; k < m->info[i].numel; k++) hp[off[i] + k] = 0.4f * sinf((float)(3 * (off[i] + k) + 1));
    }
    assert_ok(fsc_device_upload(dev, dp, hp, P * sizeof(float)));
    float x[B * ROWS * IN], y[B * ROWS * C];
    for (int k = 0; k < B * ROWS * IN; k++) x[k] = cosf((float)k);
    for (int k = 0; k < B * ROWS * C; k++) y[k] = 0.3f * sinf((float)(2 * k));
    fsc_model_acts *a;
    assert_ok(m->ops->acts_create(m->ctx, &(fsc_model_acts_opts){ .B = B, .last = 2 }, &a));
    assert_ok(m->ops->set_batch(m->ctx, a, x, y));
    const fsc_model_hooks none = { 0 };
    const double terms = (double)B * ROWS * C;
    double loss;
    assert_ok(m->ops->forward(m->ctx, a, &none, &loss));
    assert_ok(m->ops->backward(m->ctx, a, &none, (float)(1.0 / terms)));
    assert_ok(fsc_device_download(dev, hg, dg, P * sizeof(float)));
    fsc_model_aux ax;
    m->ops->aux_stats(m->ctx, a, &ax);
    assert_true(ax.assigned == 2.0 * B * ROWS && ax.dropped == 0 && ax.aux_loss > 0);
    for (int i = 0; i < m->n_tensors; i++) {
        const size_t n = m->info[i].numel;
        size_t idx[5] = { 0, n - 1, n / 2, n / 3, (2 * n) / 3 };
        double fd[5], mx = 0;
        for (int k = 0; k < 5; k++) {
            float *p = hp + off[i] + idx[k];
            const float v = *p, eps = 1e-2f;
            double f[2];
            for (int sgn = 0; sgn < 2; sgn++) {
                *p = v + (sgn ? -eps : eps);
                assert_ok(fsc_device_upload(dev, dp + off[i] + idx[k], p, sizeof(float)));
                assert_ok(m->ops->forward(m->ctx, a, &none, &f[sgn]));
            }
            *p = v;
            assert_ok(fsc_device_upload(dev, dp + off[i] + idx[k], p, sizeof(float)));
            fd[k] = (f[0] - f[1]) / (2.0 * eps * terms);
            mx = fmax(mx, fabs(fd[k]));
        }
        for (int k = 0; k < 5; k++)
            if (!(fabs(hg[off[i] + idx[k]] - fd[k]) <= 2e-2 * mx + 1e-4))
                fail_msg("%s[%zu]: gradient %.7g, finite difference %.7g (max |fd| %.3g)", m->info[i].name, idx[k],
                         (double)hg[off[i] + idx[k]], fd[k], mx);
    }
    m->ops->acts_free(m->ctx, a);
    fsc_model_free(m);
    /* a small capacity drops assignments */
    assert_ok(build(dev, 2, 1, 0.25f, &m));
    for (int i = 0; i < m->n_tensors; i++) m->param[i] = dp + off[i], m->grad[i] = dg + off[i];
    assert_ok(m->ops->acts_create(m->ctx, &(fsc_model_acts_opts){ .B = B, .last = 2 }, &a));
    assert_ok(m->ops->set_batch(m->ctx, a, x, y));
    assert_ok(m->ops->forward(m->ctx, a, &none, &loss));
    m->ops->aux_stats(m->ctx, a, &ax);
    assert_true(ax.assigned == 1.0 * B * ROWS && ax.dropped > 0);
    m->ops->acts_free(m->ctx, a);
    fsc_model_free(m);
    fsc_device_release(dev, dp), fsc_device_release(dev, dg);
    free(hp), free(hg), free(off);
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_declaration),
        cmocka_unit_test(test_gradients_and_stats),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
