/* Resharding: a checkpoint written with one (world size, parallel setting) loads into another.
 * Oracles, for pairs that change the world size (odd ones included) and the setting (ddp, fsdp with every
 * strategy, zero1, zero2, a pipeline, a single rank; fp32 and bf16 parameters):
 *   - the loaded parameters and optimizer state equal the saved ones bit for bit (full parameters from
 *     fsc_engine_full_params, the optimizer state gathered by fsc_ckpt_full_state);
 *   - training continues: two more steps in the new setting equal, bit for bit, two steps of DDP on the
 *     new world size loaded from the same checkpoint (every setting equals DDP on the same world).
 * Also the full format: model.safetensors is an ordinary weights file, and a full checkpoint reshards too. */
#include "ckpttest.h"

typedef struct {
    ct_job (*make)(void);
    const char *what;
} setting;

static ct_job fsdp4_full(void) { return ct_fsdp(4, FSC_SHARD_FULL); }
static ct_job ddp3(void) { return ct_make(3, FSC_PAR_DDP); }
static ct_job ddp2(void) { return ct_make(2, FSC_PAR_DDP); }
static ct_job fsdp3_none(void) { return ct_fsdp(3, FSC_SHARD_NONE); }
static ct_job fsdp4_hybrid(void) {
    ct_job j = ct_fsdp(4, FSC_SHARD_HYBRID);
    j.run.po.hybrid_group = 2;
    return j;
}
static ct_job fsdp8_full(void) { return ct_fsdp(8, FSC_SHARD_FULL); }
static ct_job fsdp2_grad_op(void) { return ct_fsdp(2, FSC_SHARD_GRAD_OP); }
static ct_job zero1_3(void) { return ct_make(3, FSC_PAR_ZERO1); }
static ct_job fsdp5_flat(void) {
    ct_job j = ct_fsdp(5, FSC_SHARD_FULL);
    j.run.po.wrap = FSC_WRAP_MODEL;
    return j;
}
static ct_job zero2_4(void) {
    ct_job j = ct_make(4, FSC_PAR_ZERO2);
    j.run.po.bucket_bytes = 1;
    return j;
}
/* bf16 parameters: zero and fsdp keep fp32 masters apart from the rounded copies they compute with */
static ct_job zero2_4_bf16(void) {
    ct_job j = zero2_4();
    j.run.po.param_dtype = j.run.po.reduce_dtype = FSC_BF16;
    return j;
}
static ct_job fsdp3_bf16(void) {
    ct_job j = ct_fsdp(3, FSC_SHARD_FULL);
    j.run.po.param_dtype = j.run.po.reduce_dtype = FSC_BF16;
    return j;
}
static ct_job single(void) { return ct_make(1, FSC_PAR_NONE); }
static ct_job fsdp3_full(void) { return ct_fsdp(3, FSC_SHARD_FULL); }

/* A pipeline of 2 stages x 2 data-parallel ranks (DDP inside the stages), 2 micro-batches: equal to DDP on 2
 * ranks with the same accumulation, so the partner settings use accum 2 with no_sync too. */
static ct_job pipe2x2(void) {
    ct_job j = ct_make(4, FSC_PAR_DDP);
    j.run.po.pp = 2;
    j.run.po.accum = 2;
    j.run.po.no_sync = 1;
    return j;
}
static ct_job fsdp3_accum(void) {
    ct_job j = ct_fsdp(3, FSC_SHARD_FULL);
    j.run.po.accum = 2;
    j.run.po.no_sync = 1;
    return j;
}

/* The setting `to` runs on to.run.world ranks; its DDP twin has the same world (dp for a pipeline). */
static ct_job ddp_twin(const ct_job *to) {
    int dp = to->run.world / (to->run.po.pp > 1 ? to->run.po.pp : 1);
    ct_job d = ct_make(dp, dp == 1 ? FSC_PAR_NONE : FSC_PAR_DDP);
    d.run.po.accum = to->run.po.accum;
    d.run.po.no_sync = to->run.po.no_sync;
    d.run.po.param_dtype = to->run.po.param_dtype;
    d.run.po.reduce_dtype = to->run.po.reduce_dtype;
    return d;
}

static void check_pair(ct_job from, ct_job to, fsc_ckpt_format fmt, const char *what) {
    char *dir = ct_tmpdir(), path[600];
    from.to = 2;
    from.save_dir = dir;
    from.save.format = fmt;
    ct_run(&from);
    ct_step_path(path, sizeof path, dir, 2);
    /* loaded state = saved state */
    ct_job b = to;
    b.load = path;
    b.from = b.to = 2;
    ct_run(&b);
    assert_int_equal(b.loaded_step, 2);
    ct_assert_state_equal(&from, &b, what);
    /* training continues as DDP on the new world would */
    ct_job c = to, d = ddp_twin(&to);
    c.load = d.load = path;
    c.from = d.from = 2;
    c.to = d.to = 4;
    ct_run(&c);
    ct_run(&d);
    for (int s = 2; s < 4; s++)
        if (memcmp(&c.loss[s], &d.loss[s], sizeof(double)) != 0 || !isfinite(c.loss[s]))
            fail_msg("%s: loss of step %d: %.17g, DDP on the new world %.17g", what, s, c.loss[s], d.loss[s]);
    ct_assert_state_equal(&c, &d, what);
    assert_true(memcmp(b.params, c.params, fsc_gpt_num_params(&b.run.cfg) * sizeof(float)) != 0);
    ct_free(&from);
    ct_free(&b);
    ct_free(&c);
    ct_free(&d);
    ct_rmtree(dir);
}

static void test_ckpt_reshard_pairs(void **state) {
    (void)state;
    const struct { setting a, b; } pairs[] = {
        { { fsdp4_full, "fsdp full_shard 4" }, { ddp3, "ddp 3" } },
        { { ddp2, "ddp 2" }, { fsdp3_none, "fsdp no_shard 3" } },
        { { ddp2, "ddp 2" }, { fsdp4_hybrid, "fsdp hybrid_shard 4 (groups of 2)" } },
        { { fsdp8_full, "fsdp full_shard 8" }, { fsdp2_grad_op, "fsdp shard_grad_op 2" } },
        { { zero1_3, "zero1 3" }, { fsdp5_flat, "fsdp full_shard 5, one flat unit" } },
        { { zero2_4, "zero2 4" }, { zero1_3, "zero1 3" } },
        { { fsdp4_hybrid, "fsdp hybrid_shard 4" }, { single, "a single rank" } },
        { { zero2_4_bf16, "zero2 4, bf16" }, { fsdp3_bf16, "fsdp full_shard 3, bf16" } },
        { { single, "a single rank" }, { fsdp3_full, "fsdp full_shard 3" } },
        { { fsdp3_accum, "fsdp full_shard 3" }, { pipe2x2, "a pipeline of 2 stages x ddp 2" } },
        { { pipe2x2, "a pipeline of 2 stages x ddp 2" }, { zero1_3, "zero1 3" } },
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        char what[160];
        snprintf(what, sizeof what, "%s -> %s", pairs[i].a.what, pairs[i].b.what);
        check_pair(pairs[i].a.make(), pairs[i].b.make(), FSC_CKPT_SHARDED, what);
    }
}

/* A full checkpoint reshards the same way, and its model.safetensors is a weights file any engine loads. */
static void test_ckpt_reshard_full_format(void **state) {
    (void)state;
    check_pair(fsdp4_full(), zero1_3(), FSC_CKPT_FULL, "full format: fsdp full_shard 4 -> zero1 3");
    char *dir = ct_tmpdir(), path[700];
    ct_job a = fsdp3_full();
    a.to = 1;
    a.save_dir = dir;
    a.save.format = FSC_CKPT_FULL;
    ct_run(&a);
    snprintf(path, sizeof path, "%s/step-00000001/model.safetensors", dir);
    fsc_gpt_config cfg = a.run.cfg;
    assert_ok(fsc_gpt_check_file(&cfg, path));
    fsc_device *dev;
    fsc_gpt *m;
    assert_ok(fsc_device_create("cpu", NULL, &dev));
    assert_ok(fsc_gpt_create(dev, &cfg, &m));
    size_t P = fsc_gpt_num_params(&cfg);
    float *flat;
    assert_ok(fsc_device_alloc(dev, FSC_TAG_PARAMS, P * sizeof(float), (void **)&flat));
    fsc_gpt_bind_flat(m, flat, NULL);
    assert_ok(fsc_gpt_load(m, path));
    float *host = malloc(P * sizeof(float));
    assert_ok(fsc_device_download(dev, host, flat, P * sizeof(float)));
    assert_bits_equal(a.params, host, P, "model.safetensors of a full checkpoint");
    free(host);
    fsc_device_release(dev, flat);
    fsc_gpt_free(m);
    fsc_device_free(dev);
    ct_free(&a);
    ct_rmtree(dir);
}

/* fsc_ckpt_load_weights: the parameters of an AdamW checkpoint into an engine of another layout and optimizer, the
 * writer's state and counters left out. Oracle: the same engine loading the full checkpoint's model.safetensors
 * (fsc_engine_load_weights, another reader) trains to the same bits; the full load, which keeps the moments, does
 * not. */
static void test_ckpt_load_weights_only(void **state) {
    (void)state;
    char *dir = ct_tmpdir(), path[600], weights[700];
    ct_job a = fsdp4_full();
    a.to = 2;
    a.save_dir = dir;
    a.save.format = FSC_CKPT_FULL;
    ct_run(&a);
    ct_step_path(path, sizeof path, dir, 2);
    snprintf(weights, sizeof weights, "%s/model.safetensors", path);
    size_t P = fsc_gpt_num_params(&a.run.cfg);
    /* an SGD engine without state: the parameters, bit for bit */
    ct_job b = zero1_3();
    b.run.oc.kind = FSC_OPT_SGD;
    b.run.oc.momentum = 0.0f;
    b.load = path, b.weights_only = 1;
    b.from = b.to = 2;
    ct_run(&b);
    assert_int_equal(b.loaded_step, 2);
    assert_bits_equal(a.params, b.params, P, "weights only into sgd zero1 3: parameters");
    /* the full load refuses the other optimizer */
    ct_job f = b;
    f.params = f.state[0] = f.state[1] = NULL;
    f.weights_only = 0;
    assert_int_equal(ct_try(&f), FSC_ERR_INVALID);
    assert_non_null(strstr(fsc_last_error(), "written with optimizer adamw"));
    ct_free(&f);
    /* an AdamW engine on another layout: fresh moments, its own step count and run */
    char *dir2 = ct_tmpdir(), path2[600];
    ct_job c = ddp3(), d = ddp3(), full = ddp3();
    c.load = full.load = path, c.weights_only = 1;
    d.weights_file = weights;
    c.from = d.from = full.from = 2;
    c.to = d.to = full.to = 4;
    c.save_dir = dir2;
    ct_run(&c);
    ct_run(&d);
    ct_run(&full);
    for (int s = 2; s < 4; s++)
        if (memcmp(&c.loss[s], &d.loss[s], sizeof(double)) != 0 || !isfinite(c.loss[s]))
            fail_msg("weights only: loss of step %d: %.17g, from model.safetensors %.17g", s, c.loss[s], d.loss[s]);
    ct_assert_state_equal(&c, &d, "weights only against model.safetensors");
    assert_true(memcmp(c.loss + 2, full.loss + 2, sizeof(double)) == 0); /* the same weights: the same first loss */
    assert_true(memcmp(c.params, full.params, P * sizeof(float)) != 0);  /* but not the moments */
    fsc_ckpt_meta *m1 = NULL, *m2 = NULL;
    ct_step_path(path2, sizeof path2, dir2, 4);
    assert_ok(fsc_ckpt_meta_read(path, &m1));
    assert_ok(fsc_ckpt_meta_read(path2, &m2));
    assert_int_equal(m1->optim_steps, 2);
    assert_int_equal(m2->optim_steps, 2); /* its own two steps, not 2 + 2 */
    assert_string_not_equal(m1->run_id, m2->run_id);
    fsc_ckpt_meta_free(m1);
    fsc_ckpt_meta_free(m2);
    ct_free(&a);
    ct_free(&b);
    ct_free(&c);
    ct_free(&d);
    ct_free(&full);
    ct_rmtree(dir);
    ct_rmtree(dir2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ckpt_reshard_pairs),
        cmocka_unit_test(test_ckpt_reshard_full_format),
        cmocka_unit_test(test_ckpt_load_weights_only),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
