/* The GPT with mixture-of-experts blocks (lib/model/gpt.c, gpt_moe.c, gpt_run.c) on one rank.
 * Oracles:
 * - description: blocks N-1, 2N-1, ... are MoE blocks with 9 + 4 E tensors named h.{i}.mlp.gate.weight and
 *   h.{i}.mlp.experts.{e}.{c_fc,c_proj}.{weight,bias}; fsc_gpt_param_index inverts fsc_gpt_param_info on
 *   every tensor and refuses the names a block does not have; fsc_gpt_num_params is the sum of the
 *   shapes; a configuration with moe_experts 0 describes exactly the dense GPT (the same infos);
 * - initial values: every tensor the dense GPT also has gets the dense GPT's values (keyed by name), an
 *   expert's c_fc.weight the keyed RNG's N(0, 0.02) under its own name, c_proj.weight N(0, 0.02/sqrt(2L)),
 *   biases 0, the gate N(0, 0.02) (checked value by value against fsc_rng_fill_normal);
 * - gradients: finite differences (central at h = 5e-3 and h/2, Richardson-extrapolated; the forward is
 *   float, the loss summed in double) of the objective
 *   mean cross entropy + moe_aux x (sum over MoE blocks of the load-balancing loss) equal the analytic
 *   gradients of every tensor kind (gate, experts, the MoE block's layer norms and attention, the dense
 *   block, wte) within 3e-2 relative plus 2e-3 of the tensor's largest gradient plus 2e-5 (the float
 *   forward's noise over h), skipping perturbations that change any routing decision (fsc_moe_routing of
 *   every block); top-1 and top-2, with and without dropped tokens, a large load-balancing coefficient
 *   (0.5) so that its gradient matters;
 * - capacity and counts: fsc_gpt_acts_moe_stats gives tokens = B T per MoE block, assigned = k B T, capacity
 *   max(1, ceil(cf k B T / E)), no expert keeps more than its capacity, drops > 0 exactly when the
 *   capacity is below the demand; the aux loss (the sum over blocks) is finite and positive;
 * - files: fsc_gpt_save then fsc_gpt_load into another model gives the same bits, and fsc_gpt_check_file
 *   refuses the file for the dense model (names);
 * - errors: impossible MoE configurations are refused with messages (checkpointed MoE blocks are not). */
#include <math.h>
#include <stdlib.h>
#include <unistd.h>
#include "gpttest.h"

static fsc_gpt_config moe_cfg(int E, int k, int every, float cf, float aux) {
    return (fsc_gpt_config){ .layers = 3, .dim = 8, .heads = 2, .seq = 4, .vocab = 11, .moe_experts = E,
                             .moe_top_k = k, .moe_every = every, .moe_capacity = cf, .moe_aux = aux };
}

static void make_batch(int32_t *tok, int32_t *tgt, int n, int V, uint32_t salt) {
    uint32_t s = 2463534242u ^ salt;
    for (int i = 0; i <= n; i++) {
        s ^= s << 13, s ^= s >> 17, s ^= s << 5;
        int32_t t = (int32_t)(s % (uint32_t)V);
        if (i < n) tok[i] = t;
        if (i > 0) tgt[i - 1] = t;
    }
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

/* ---- description ---- */
static void test_moe_gpt_description(void **state) {
    (void)state;
    const int E = 4;
    fsc_gpt_config c = moe_cfg(E, 2, 2, 1.0f, 0.01f); /* blocks 0, 2 dense; block 1 MoE */
    assert_ok(fsc_gpt_config_validate(&c));
    assert_int_equal(fsc_gpt_num_moe_blocks(&c), 1);
    assert_false(fsc_gpt_block_is_moe(&c, 0));
    assert_true(fsc_gpt_block_is_moe(&c, 1));
    assert_false(fsc_gpt_block_is_moe(&c, 2));
    assert_int_equal(fsc_gpt_block_num_tensors(&c, 1), 9 + 4 * E);
    int n = fsc_gpt_num_tensors(&c);
    assert_int_equal(n, 2 + 12 + (9 + 4 * E) + 12 + 2);
    assert_int_equal(fsc_gpt_block_first_tensor(&c, 1), 14);
    assert_int_equal(fsc_gpt_block_first_tensor(&c, 2), 14 + 9 + 4 * E);
    size_t total = 0;
    int experts_seen = 0;
    for (int i = 0; i < n; i++) {
        fsc_param_info p;
        assert_ok(fsc_gpt_param_info(&c, i, &p));
        total += p.numel;
        assert_int_equal(fsc_gpt_param_index(&c, p.name), i);
        experts_seen += p.expert >= 0;
        if (i == 14 + 8) {
            assert_string_equal(p.name, "h.1.mlp.gate.weight");
            assert_int_equal(p.shape[0], 8);
            assert_int_equal(p.shape[1], E);
            assert_int_equal(p.expert, -1);
        }
        if (i == 14 + 9 + 4 * 3 + 2) {
            assert_string_equal(p.name, "h.1.mlp.experts.3.c_proj.weight");
            assert_int_equal(p.shape[0], 32);
            assert_int_equal(p.shape[1], 8);
            assert_int_equal(p.expert, 3);
            assert_int_equal(p.layer, 2);
        }
    }
    assert_int_equal(experts_seen, 4 * E);
    assert_int_equal(total, fsc_gpt_num_params(&c));
    /* names a block does not have */
    const char *bad[] = { "h.1.mlp.c_fc.weight", "h.0.mlp.gate.weight", "h.1.mlp.experts.4.c_fc.weight",
                          "h.1.mlp.experts.01.c_fc.weight", "h.1.mlp.experts.1.c_fc", "h.1.mlp.experts..c_fc.weight",
                          "h.2.mlp.experts.0.c_fc.weight" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (fsc_gpt_param_index(&c, bad[i]) != -1) fail_msg("%s was accepted", bad[i]);
    /* E = 0: the dense GPT's description, tensor by tensor */
    fsc_gpt_config d = { .layers = 3, .dim = 8, .heads = 2, .seq = 4, .vocab = 11 };
    assert_int_equal(fsc_gpt_num_tensors(&d), 2 + 36 + 2);
    assert_int_equal(fsc_gpt_num_params(&d), (size_t)11 * 8 + 4 * 8 + 3 * (12 * 64 + 13 * 8) + 16);
    for (int i = 0; i < fsc_gpt_num_tensors(&d); i++) {
        fsc_param_info p;
        assert_ok(fsc_gpt_param_info(&d, i, &p));
        assert_int_equal(p.expert, -1);
        assert_int_equal(fsc_gpt_param_index(&d, p.name), i);
    }
    for (int b = 0; b <= 3; b++) assert_int_equal(fsc_gpt_block_first_tensor(&d, b), 2 + 12 * b);
    /* every block MoE */
    c.moe_every = 1;
    assert_int_equal(fsc_gpt_num_moe_blocks(&c), 3);
    assert_int_equal(fsc_gpt_num_tensors(&c), 4 + 3 * (9 + 4 * E));
}

/* ---- initial values ---- */
static void test_moe_gpt_init_values(void **state) {
    (void)state;
    fsc_gpt_config c = moe_cfg(3, 1, 1, 0, 0), d = c;
    d.moe_experts = d.moe_top_k = d.moe_every = 0;
    const uint64_t seed = 77;
    for (int i = 0; i < fsc_gpt_num_tensors(&c); i++) {
        fsc_param_info p;
        assert_ok(fsc_gpt_param_info(&c, i, &p));
        float *v = malloc(p.numel * sizeof(float)), *w = malloc(p.numel * sizeof(float));
        fsc_gpt_init_values(&c, seed, i, 0, p.numel, v);
        int j = fsc_gpt_param_index(&d, p.name);
        if (j >= 0) { /* also a dense tensor: the same values */
            fsc_gpt_init_values(&d, seed, j, 0, p.numel, w);
            assert_bits_equal(v, w, p.numel, p.name);
        } else if (p.ndim == 1) {
            for (size_t k = 0; k < p.numel; k++) assert_true(v[k] == 0.0f);
        } else {
            float std = strstr(p.name, "c_proj") ? 0.02f / sqrtf(2.0f * 3) : 0.02f;
            fsc_rng_fill_normal(w, p.numel, seed, p.name, 0, 0.0f, std);
            assert_bits_equal(v, w, p.numel, p.name);
        }
        /* a range starting inside the tensor: the same values as the whole tensor's */
        if (p.numel > 5) {
            fsc_gpt_init_values(&c, seed, i, 3, 2, w);
            assert_bits_equal(v + 3, w, 2, "range");
        }
        free(v), free(w);
    }
}

/* ---- gradients ---- */
typedef struct {
    int k;
    float cf;
    int every;
} fd_case;

/* objective = loss_sum / N + aux * (sum of the blocks' aux losses); the routing of every MoE block
 * (expert * 2 + kept per token and choice, 2 N entries per block) */
static double objective(model *md, fsc_gpt_acts *a, const int32_t *tok, const int32_t *tgt, int N, float aux,
                        int32_t *routing) {
    double loss;
    fsc_moe_stats st;
    assert_ok(fsc_gpt_acts_set_batch(a, tok, tgt));
    assert_ok(fsc_gpt_forward(md->m, a, NULL, &loss));
    fsc_gpt_acts_moe_stats(a, &st);
    int k = md->m->cfg.moe_top_k;
    memset(routing, 0, (size_t)md->m->cfg.layers * 2 * N * sizeof(int32_t));
    for (int b = 0; b < md->m->cfg.layers; b++) {
        const fsc_moe_rec *r = fsc_gpt_acts_moe_rec(a, b);
        if (!r) continue;
        int32_t ex[24], kept[24];
        assert_ok(fsc_moe_routing(r, ex, NULL, kept));
        for (int i = 0; i < N * k; i++) routing[b * 2 * N + i] = ex[i] * 2 + kept[i];
    }
    return loss / N + (double)aux * st.aux_loss;
}

static void fd_check(fsc_device *dev, const fd_case *fc) {
    const float aux = 0.5f, h = 5e-3f;
    fsc_gpt_config c = moe_cfg(4, fc->k, fc->every, fc->cf, aux);
    c.layers = 2;
    model md;
    model_init(&md, dev, &c, 5);
    const int B = 3, T = c.seq, N = B * T;
    int32_t tok[12], tgt[12];
    make_batch(tok, tgt, N, c.vocab, 9);
    fsc_gpt_acts *a;
    fsc_gpt_acts_opts o = { .B = B, .T = T, .first = 0, .last = c.layers + 1 };
    assert_ok(fsc_gpt_acts_create(md.m, &o, &a));
    /* a gate large enough that routing is uneven */
    for (int b = 0; b < c.layers; b++) {
        if (!fsc_gpt_block_is_moe(&c, b)) continue;
        int g = fsc_gpt_block_first_tensor(&c, b) + FSC_B_FC_W;
        float *wg = malloc(md.m->info[g].numel * sizeof(float));
        fsc_rng_fill_normal(wg, md.m->info[g].numel, 3, "big gate", (size_t)b * 100, 0.0f, 0.5f);
        assert_ok(fsc_device_upload(dev, md.m->param[g], wg, md.m->info[g].numel * sizeof(float)));
        free(wg);
    }
    int32_t base[2 * 2 * 12], now[2 * 2 * 12];
    fsc_moe_stats st0;
    objective(&md, a, tok, tgt, N, aux, base);
    fsc_gpt_acts_moe_stats(a, &st0);
    assert_ok(fsc_gpt_backward(md.m, a, NULL, 1.0f / (float)N));
    if (fc->cf < 1.0f) assert_true(st0.dropped > 0);
    else assert_true(st0.dropped == 0);
    float *params = malloc(md.P * sizeof(float)), *grads = malloc(md.P * sizeof(float));
    assert_ok(fsc_device_download(dev, params, md.params, md.P * sizeof(float)));
    assert_ok(fsc_device_download(dev, grads, md.grads, md.P * sizeof(float)));
    int checked = 0, skipped = 0;
    double worst = 0; /* the largest error over its bound */
    size_t off = 0;
    for (int i = 0; i < md.m->n_tensors; i++) {
        const fsc_param_info *p = &md.m->info[i];
        double gmax = 0;
        for (size_t j = 0; j < p->numel; j++) gmax = fmax(gmax, fabs((double)grads[off + j]));
        /* a few elements of every tensor, spread over it */
        size_t step = p->numel > 6 ? p->numel / 6 : 1;
        for (size_t j = step / 2; j < p->numel; j += step) {
            float keep = params[off + j];
            double L[4]; /* at -h, +h, -h/2, +h/2 */
            int changed = 0;
            for (int q = 0; q < 4; q++) {
                float v = keep + (q % 2 ? 1.0f : -1.0f) * (q < 2 ? h : h / 2);
                assert_ok(fsc_device_upload(dev, md.params + off + j, &v, sizeof v));
                L[q] = objective(&md, a, tok, tgt, N, aux, now);
                changed |= memcmp(now, base, sizeof base) != 0;
            }
            assert_ok(fsc_device_upload(dev, md.params + off + j, &keep, sizeof keep));
            if (changed) { /* the routing is piecewise constant: no derivative across a change */
                skipped++;
                continue;
            }
            /* Richardson: the h^2 terms of the two central differences cancel */
            double fd = (4.0 * (L[3] - L[2]) / h - (L[1] - L[0]) / (2.0 * h)) / 3.0, an = grads[off + j];
            worst = fmax(worst, fabs(fd - an) / (3e-2 * fabs(an) + 2e-3 * gmax + 2e-5));
            if (fabs(fd - an) > 3e-2 * fabs(an) + 2e-3 * gmax + 2e-5)
                fail_msg("top-%d cf %g every %d: %s[%zu]: analytic %.6g, finite differences %.6g, largest gradient "
                         "of the tensor %.3g", fc->k, (double)fc->cf, fc->every, p->name, j, an, fd, gmax);
            checked++;
        }
        off += p->numel;
    }
    if (getenv("FSC_TEST_VERBOSE"))
        fprintf(stderr, "  top-%d cf %g every %d: %d checked, %d skipped, dropped %lld, aux %.6f, worst error %.2f "
                "of the bound\n", fc->k, (double)fc->cf, fc->every, checked, skipped, (long long)st0.dropped,
                st0.aux_loss, worst);
    assert_true(checked > 4 * skipped);
    free(params), free(grads);
    fsc_gpt_acts_free(a);
    model_free(&md);
}

static void test_moe_gpt_gradients(void **state) {
    fd_case cases[] = { { 1, 2.0f, 1 }, { 2, 2.0f, 2 }, { 2, 0.5f, 1 } };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) fd_check(*state, &cases[i]);
}

/* ---- capacity and counts ---- */
static void test_moe_gpt_capacity_and_stats(void **state) {
    fsc_device *dev = *state;
    for (int k = 1; k <= 2; k++)
        for (int lowcap = 0; lowcap <= 1; lowcap++) {
            float cf = lowcap ? 0.5f : 4.0f;
            fsc_gpt_config c = moe_cfg(4, k, 1, cf, 0.01f);
            model md;
            model_init(&md, dev, &c, 11);
            const int B = 2, T = c.seq, N = B * T;
            int32_t tok[8], tgt[8];
            make_batch(tok, tgt, N, c.vocab, 1);
            fsc_gpt_acts *a;
            fsc_gpt_acts_opts o = { .B = B, .T = T, .first = 0, .last = c.layers + 1 };
            assert_ok(fsc_gpt_acts_create(md.m, &o, &a));
            double loss;
            assert_ok(fsc_gpt_acts_set_batch(a, tok, tgt));
            assert_ok(fsc_gpt_forward(md.m, a, NULL, &loss));
            fsc_moe_stats st;
            fsc_gpt_acts_moe_stats(a, &st);
            int cap = (int)ceil(cf * k * N / 4.0);
            if (cap > N) cap = N;
            assert_int_equal(st.capacity, cap < 1 ? 1 : cap);
            assert_int_equal(st.tokens, 3 * N);
            assert_int_equal(st.assigned, 3 * k * N);
            /* capacity respected: at most E cap kept per block */
            assert_true(st.assigned - st.dropped <= 3 * 4 * (int64_t)st.capacity);
            if (lowcap) assert_true(st.dropped >= st.assigned - 3 * 4 * (int64_t)st.capacity && st.dropped > 0);
            else assert_int_equal(st.dropped, 0);
            assert_true(isfinite(st.aux_loss) && st.aux_loss > 0);
            fsc_gpt_acts_free(a);
            model_free(&md);
        }
}

/* ---- files ---- */
static void test_moe_gpt_files(void **state) {
    fsc_device *dev = *state;
    fsc_gpt_config c = moe_cfg(2, 1, 2, 0, 0);
    model a, b;
    model_init(&a, dev, &c, 1);
    model_init(&b, dev, &c, 2);
    char path[] = "/tmp/fsc_moe_gpt_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_ok(fsc_gpt_save(a.m, path));
    assert_ok(fsc_gpt_check_file(&c, path));
    assert_ok(fsc_gpt_load(b.m, path));
    float *pa = malloc(a.P * sizeof(float)), *pb = malloc(b.P * sizeof(float));
    assert_ok(fsc_device_download(dev, pa, a.params, a.P * sizeof(float)));
    assert_ok(fsc_device_download(dev, pb, b.params, b.P * sizeof(float)));
    assert_bits_equal(pa, pb, a.P, "weights after save and load");
    fsc_gpt_config d = c;
    d.moe_experts = d.moe_top_k = d.moe_every = 0;
    assert_err(fsc_gpt_check_file(&d, path), FSC_ERR_FORMAT, "mlp");
    unlink(path);
    free(pa), free(pb);
    model_free(&a), model_free(&b);
}

/* ---- errors ---- */
static void test_moe_gpt_errors(void **state) {
    fsc_device *dev = *state;
    fsc_gpt_config c = moe_cfg(4, 3, 1, 0, 0);
    assert_err(fsc_gpt_config_validate(&c), FSC_ERR_INVALID, "moe_top_k is 3");
    c = moe_cfg(1, 2, 1, 0, 0);
    assert_err(fsc_gpt_config_validate(&c), FSC_ERR_INVALID, "top-2 gating needs at least 2 experts");
    c = moe_cfg(4, 1, 4, 0, 0);
    assert_err(fsc_gpt_config_validate(&c), FSC_ERR_INVALID, "moe_every is 4");
    c = moe_cfg(4, 1, 1, -1.0f, 0);
    assert_err(fsc_gpt_config_validate(&c), FSC_ERR_INVALID, "moe_capacity -1");
    c = moe_cfg(4, 1, 1, 0, -0.5f);
    assert_err(fsc_gpt_config_validate(&c), FSC_ERR_INVALID, "moe_aux -0.5");
    /* above the MoE layer's limit (1e6): refused here, not when the engine builds the layer */
    c = moe_cfg(4, 1, 1, 2e6f, 0);
    assert_err(fsc_gpt_config_validate(&c), FSC_ERR_INVALID, "moe_capacity 2e+06");
    c = moe_cfg(4, 1, 1, 0, 1e30f);
    assert_err(fsc_gpt_config_validate(&c), FSC_ERR_INVALID, "moe_aux 1e+30");
    c = moe_cfg(4, 1, 1, 1e6f, 1e6f);
    assert_ok(fsc_gpt_config_validate(&c));
    c = moe_cfg(0, 2, 0, 0, 0);
    assert_err(fsc_gpt_config_validate(&c), FSC_ERR_INVALID, "apply to MoE models only");
    c = moe_cfg(5000, 1, 1, 0, 0);
    assert_err(fsc_gpt_config_validate(&c), FSC_ERR_INVALID, "moe_experts is 5000");
    /* checkpointed MoE blocks are records like any (test_moe_engine: they train bit for bit as without) */
    c = moe_cfg(4, 1, 2, 0, 0);
    model md;
    model_init(&md, dev, &c, 1);
    fsc_gpt_acts *a;
    fsc_gpt_acts_opts o = { .B = 1, .T = c.seq, .first = 0, .last = c.layers + 1, .checkpoint = 1 };
    assert_ok(fsc_gpt_acts_create(md.m, &o, &a));
    fsc_gpt_acts_free(a);
    /* experts that do not split over the group; a dense model has no expert group */
    fsc_comm *none = NULL;
    assert_ok(fsc_gpt_set_expert_group(md.m, none));
    model_free(&md);
    fsc_gpt_config d = { .layers = 1, .dim = 8, .heads = 2, .seq = 4, .vocab = 11 };
    model_init(&md, dev, &d, 1);
    assert_err(fsc_gpt_set_expert_group(md.m, NULL), FSC_ERR_INVALID, "needs an MoE model");
    model_free(&md);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_moe_gpt_description),
        cmocka_unit_test(test_moe_gpt_init_values),
        cmocka_unit_test_setup_teardown(test_moe_gpt_gradients, setup, teardown),
        cmocka_unit_test_setup_teardown(test_moe_gpt_capacity_and_stats, setup, teardown),
        cmocka_unit_test_setup_teardown(test_moe_gpt_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_moe_gpt_errors, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
