/* A program's misuse of the public API is refused with a message, never a crash or a silent wrap.
 * Oracles:
 * - a model whose tensors together hold more than 2^60 elements is refused when it is made (its byte count would wrap
 *   and the engine then allocated a wrapped size and uploaded into NULL, "fsc_device_upload: dst is NULL");
 * - a model that outlives its engine keeps no pointer into the engine's freed buffers: after fsc_engine_free its
 *   param/grad tables are NULL, and a generator over it fails with FSC_ERR_STATE (it read freed memory before);
 *   fsc_balance_by_time refuses a model bound to an engine (FSC_ERR_STATE), where it swapped the model's tables;
 * - fsc_ckpt_latest refusing a path buffer too small for the checkpoint's path leaves it "", not a truncated path
 *   ("/t") that a program loading it would open;
 * - a user's model whose acts_create succeeds without a record is refused naming the operation (the NULL record
 *   reached set_batch, a null access), and one whose stream_floats is 0 is refused by a pipeline at creation (its
 *   stages passed nothing and the step "succeeded");
 * - a hand-made rank without a device or a communicator is refused by every engine maker naming the missing field
 *   (the message named fsc_comm_agree, a function the caller never called);
 * - a generator over a language model a program strings from layers (fsc_seq_model_create, as a registered family
 *   builds its model) gives the logits of the same forward the model runs by hand (the generator passed no hooks,
 *   which the sequential model followed: a segmentation fault), and the sequential model's passes take hooks NULL
 *   as the GPT's and the Llama's do;
 * - a layer of a program's whose rec_bytes or work_bytes is past any memory (a negative int made a size_t) is refused
 *   when a record is made, naming the layer and the operation: the record's layout wrapped to a few bytes, and the
 *   layer then wrote its record over the record's other buffers without a word;
 * - the engine's 0-or-1 switches (checkpoint, sequence_parallel, the optimizer's decay_all) given another value are
 *   refused naming the field (2 acted as 1). */
#include "testutil.h"
#include "fsc/fsc.h"

static void test_model_too_large_in_all(void **st) {
    (void)st;
    fsc_device *dev;
    assert_ok(fsc_device_create("cpu", NULL, &dev));
    enum { NL = 4 }; /* four 2^30 x 2^30 weights: 2^62 elements, 2^64 bytes */
    fsc_seq_layer ls[NL + 1] = { 0 };
    static const char *pre[NL] = { "a.", "b.", "c.", "d." };
    for (int i = 0; i < NL; i++) {
        fsc_linear_opts lo = fsc_linear_opts_default(1 << 30, 1 << 30);
        lo.bias = 0;
        assert_ok(fsc_layer_linear(&lo, &ls[i].layer));
        ls[i].prefix = pre[i];
    }
    assert_ok(fsc_layer_mse((size_t)1 << 30, &ls[NL].layer));
    fsc_model *m = NULL;
    assert_err(fsc_seq_model_create(dev, ls, NL + 1, &m), FSC_ERR_INVALID, "2^60");
    assert_null(m);
    fsc_device_free(dev);
}

/* A GPT of one block of width 8, context 4, vocabulary 16. */
static fsc_gpt_config tiny_gpt(void) {
    fsc_gpt_config c = fsc_gpt_config_default();
    c.layers = 1, c.dim = 8, c.heads = 2, c.seq = 4, c.vocab = 16;
    return c;
}

/* The engine's 0-or-1 switches given another value are refused naming the field: checkpoint 2 (or -1) recomputed as 1
 * does and was recorded as 2 in the ranks' settings, sequence_parallel 2 was refused as "needs tensor parallelism"
 * (with tp it acted as 1), and the optimizer's decay_all -1 decayed every tensor. */
static fsc_status switches_rank(fsc_rank *r, void *arg) {
    (void)arg;
    const fsc_gpt_config c = tiny_gpt();
    static const char *const want[] = { "checkpoint (layer recomputation) must be 0 or 1, not 2",
                                        "checkpoint (layer recomputation) must be 0 or 1, not -1",
                                        "sequence_parallel must be 0 or 1, not 2", "decay_all must be 0 or 1, not -1" };
    for (int k = 0; k < 4; k++) {
        fsc_parallel_opts po = fsc_parallel_opts_default();
        fsc_optim_config oc = fsc_optim_config_default();
        if (k < 2) po.checkpoint = k ? -1 : 2;
        else if (k == 2) po.sequence_parallel = 2;
        else oc.decay_all = -1;
        fsc_engine *e = NULL;
        assert_err(fsc_engine_create(r, &c, &po, &oc, 1, &e), FSC_ERR_INVALID, want[k]);
        assert_null(e);
    }
    return FSC_OK;
}

static void test_switches_other_than_0_or_1(void **st) {
    (void)st;
    fsc_cluster_opts co = fsc_cluster_opts_default();
    assert_ok(fsc_cluster_run(&co, switches_rank, NULL));
}

static fsc_status after_free_rank(fsc_rank *r, void *arg) {
    (void)arg;
    const fsc_gpt_config c = tiny_gpt();
    fsc_model *m = NULL;
    fsc_engine *e = NULL;
    fsc_generator *g = NULL;
    assert_ok(fsc_gpt_model_create(r->dev, &c, &m));
    fsc_parallel_opts po = fsc_parallel_opts_default();
    fsc_optim_config oc = fsc_optim_config_default();
    assert_ok(fsc_engine_create_model(r, m, &po, &oc, 1, &e));
    assert_ok(fsc_generator_create(r->dev, m, &g));
    fsc_engine_free(e);
    for (int i = 0; i < m->n_tensors; i++) {
        assert_null(m->param[i]);
        assert_null(m->grad[i]);
    }
    const int32_t tok[2] = { 1, 2 };
    const float *lg;
    int V;
    assert_err(fsc_generator_next(g, tok, 2, &lg, &V), FSC_ERR_STATE, "not materialized");
    /* another engine takes the model and binds it again */
    assert_ok(fsc_engine_create_model(r, m, &po, &oc, 1, &e));
    assert_ok(fsc_generator_next(g, tok, 2, &lg, &V));
    /* timing the layers of a bound model would swap its tables under the engine: refused, the tables the engine's */
    int balance[1];
    float *p0 = m->param[0];
    assert_err(fsc_balance_by_time(r->dev, m, 1, 1, 1, balance), FSC_ERR_STATE, "bound to an engine");
    assert_ptr_equal(m->param[0], p0);
    fsc_generator_free(g);
    fsc_engine_free(e);
    assert_ok(fsc_balance_by_time(r->dev, m, 1, 1, 1, balance)); /* unbound: measured */
    assert_int_equal(balance[0], 1);
    fsc_model_free(m);
    return FSC_OK;
}

static void test_model_after_engine_free(void **st) {
    (void)st;
    fsc_cluster_opts o = fsc_cluster_opts_default();
    assert_ok(fsc_cluster_run(&o, after_free_rank, NULL));
}

static fsc_status latest_rank(fsc_rank *r, void *arg) {
    const char *dir = arg;
    const fsc_gpt_config c = tiny_gpt();
    fsc_parallel_opts po = fsc_parallel_opts_default();
    fsc_optim_config oc = fsc_optim_config_default();
    fsc_engine *e = NULL;
    assert_ok(fsc_engine_create(r, &c, &po, &oc, 1, &e));
    assert_ok(fsc_ckpt_save(e, dir, 5, NULL));
    fsc_engine_free(e);
    return FSC_OK;
}

static void test_rank_without_device_or_comm(void **st) {
    (void)st;
    fsc_device *dev;
    assert_ok(fsc_device_create("cpu", NULL, &dev));
    const fsc_gpt_config c = tiny_gpt();
    fsc_parallel_opts po = fsc_parallel_opts_default();
    fsc_optim_config oc = fsc_optim_config_default();
    fsc_model *m = NULL;
    assert_ok(fsc_gpt_model_create(dev, &c, &m));
    fsc_rank r = { .rank = 0, .world = 1, .dev = NULL, .comm = NULL };
    fsc_engine *e = NULL;
    assert_err(fsc_engine_create(&r, &c, &po, &oc, 1, &e), FSC_ERR_INVALID, "fsc_rank.dev is NULL");
    assert_err(fsc_engine_create_model(&r, m, &po, &oc, 1, &e), FSC_ERR_INVALID, "fsc_rank.dev is NULL");
    r.dev = dev;
    assert_err(fsc_engine_create(&r, &c, &po, &oc, 1, &e), FSC_ERR_INVALID, "fsc_rank.comm is NULL");
    assert_err(fsc_engine_create_model(&r, m, &po, &oc, 1, &e), FSC_ERR_INVALID, "fsc_rank.comm is NULL");
    assert_null(e);
    fsc_model_free(m);
    fsc_device_free(dev);
}

static void test_ckpt_latest_small_buffer(void **st) {
    (void)st;
    char dir[] = "/tmp/fsc_misuse_XXXXXX";
    assert_non_null(mkdtemp(dir));
    fsc_cluster_opts o = fsc_cluster_opts_default();
    assert_ok(fsc_cluster_run(&o, latest_rank, dir));
    char small[6] = "xxxxx";
    int64_t step = 0;
    assert_err(fsc_ckpt_latest(dir, small, sizeof small, &step), FSC_ERR_INVALID, "too long");
    assert_string_equal(small, "");
    /* the readers without an engine likewise: they gave FSC_OK and the path cut to "/tmp/", another directory */
    for (int flags = 0; flags < 4; flags++) {
        fsc_ckpt_meta *m = (fsc_ckpt_meta *)1;
        memcpy(small, "xxxxx", sizeof small);
        step = 0;
        assert_err(fsc_ckpt_latest_read(dir, flags, small, sizeof small, &step, &m, NULL, 0), FSC_ERR_INVALID,
                   "longer than the 6 bytes of path");
        assert_string_equal(small, "");
        assert_int_equal(step, -1);
        assert_null(m);
    }
    memcpy(small, "xxxxx", sizeof small);
    assert_err(fsc_ckpt_latest_sound(dir, small, sizeof small, &step, NULL, 0), FSC_ERR_INVALID, "longer than");
    assert_string_equal(small, "");
    test_rmtree(dir);
}

/* A user's model around a sequential one, one operation misbehaving (mode). */
static _Thread_local fsc_model *inner_m;
static _Thread_local int bad_mode; /* 1: acts_create without a record, 2: stream_floats 0 */
static fsc_status w_acts_create(void *ctx, const fsc_model_acts_opts *o, fsc_model_acts **out) {
    (void)ctx;
    if (bad_mode == 1) return *out = NULL, FSC_OK;
    return inner_m->ops->acts_create(inner_m->ctx, o, out);
}
static size_t w_stream_floats(void *ctx, int B) {
    (void)ctx;
    return bad_mode == 2 ? 0 : inner_m->ops->stream_floats(inner_m->ctx, B);
}

static fsc_status wrapped_rank(fsc_rank *r, void *arg) {
    bad_mode = *(const int *)arg;
    fsc_seq_layer ls[4] = { 0 }; /* two blocks between the first and the last layer: two stages */
    fsc_linear_opts lo = fsc_linear_opts_default(4, 4);
    static const char *const pre[3] = { "a.", "b.", "c." };
    for (int i = 0; i < 3; i++) {
        assert_ok(fsc_layer_linear(&lo, &ls[i].layer));
        ls[i].prefix = pre[i];
    }
    assert_ok(fsc_layer_mse(4, &ls[3].layer));
    assert_ok(fsc_seq_model_create(r->dev, ls, 4, &inner_m));
    fsc_model_ops ops = *inner_m->ops;
    ops.acts_create = w_acts_create, ops.stream_floats = w_stream_floats, ops.destroy = NULL;
    fsc_model outer = *inner_m;
    outer.ops = &ops;
    fsc_parallel_opts po = fsc_parallel_opts_default();
    if (bad_mode == 2) po.pp = 2, po.accum = 2;
    fsc_optim_config oc = fsc_optim_config_default();
    fsc_engine *e = NULL;
    fsc_status s = fsc_engine_create_model(r, &outer, &po, &oc, 1, &e);
    if (s == FSC_OK) {
        float x[16] = { 1, 2, 3 }, y[16] = { 0 };
        fsc_step_info info;
        s = fsc_engine_step_model(e, x, y, 4, 4, &info);
    }
    fsc_engine_free(e);
    fsc_model_free(inner_m);
    return s;
}

static void test_model_ops_misbehaving(void **st) {
    (void)st;
    fsc_cluster_opts o = fsc_cluster_opts_default();
    int mode = 1;
    assert_err(fsc_cluster_run(&o, wrapped_rank, &mode), FSC_ERR_INTERNAL, "acts_create returned FSC_OK without a record");
    mode = 2, o.world = 2;
    assert_err(fsc_cluster_run(&o, wrapped_rank, &mode), FSC_ERR_INVALID, "stream_floats(1) is 0");
}

/* embedding | GPT-2 block | LM head, T 4, C 8, V 16 */
static fsc_status seq_lm(fsc_device *dev, fsc_model **m) {
    fsc_seq_layer ls[3] = { { 0 } };
    fsc_block_opts b = fsc_block_opts_default(FSC_BLOCK_GPT2, 4, 8, 2);
    fsc_status s = fsc_layer_embedding(4, 8, 16, &ls[0].layer);
    if (s == FSC_OK) s = fsc_layer_block(&b, &ls[1].layer);
    if (s == FSC_OK) s = fsc_layer_lm_head(4, 8, 16, &ls[2].layer);
    ls[1].prefix = "h.0.", ls[2].prefix = "lm_head.";
    if (s == FSC_OK) return fsc_seq_model_create(dev, ls, 3, m);
    for (int i = 0; i < 3; i++) fsc_layer_free(ls[i].layer);
    return s;
}

/* A model of a program's own that follows model.h to the letter: it calls its hooks, never NULL */
static _Thread_local fsc_model *hooked_inner;
static fsc_status w_forward_hooked(void *ctx, fsc_model_acts *a, const fsc_model_hooks *h, double *loss_sum) {
    (void)ctx;
    if (!h) return fsc_error(FSC_ERR_INTERNAL, "forward: hooks NULL");
    return hooked_inner->ops->forward(hooked_inner->ctx, a, h, loss_sum);
}

static fsc_status seq_generate_rank(fsc_rank *r, void *arg) {
    (void)arg;
    fsc_model *m = NULL;
    fsc_engine *e = NULL;
    fsc_generator *g = NULL;
    assert_ok(seq_lm(r->dev, &m));
    fsc_parallel_opts po = fsc_parallel_opts_default();
    fsc_optim_config oc = fsc_optim_config_default();
    assert_ok(fsc_engine_create_model(r, m, &po, &oc, 1, &e));
    assert_ok(fsc_generator_create(r->dev, m, &g));
    const int32_t tok[4] = { 1, 2, 3, 0 }; /* the window: 3 tokens, then padding 0 */
    const float *lg;
    int V = 0;
    assert_ok(fsc_generator_next(g, tok, 3, &lg, &V));
    assert_int_equal(V, 16);
    /* a prompt of no tokens (or fewer) is refused, also when nothing is to be appended */
    int32_t gen[4] = { 1, 2, 3, 0 };
    const fsc_sample_opts so = { .temperature = 0 }; /* greedy */
    for (int n = 0; n >= -1; n--)
        for (int k = 0; k < 2; k++)
            assert_err(fsc_generate(g, gen, n, k, &so), FSC_ERR_INVALID, "a prompt of");
    /* the same forward by hand, hooks NULL: the logits of position 2 */
    fsc_model_acts_opts o = fsc_model_acts_opts_default(m, 1);
    fsc_model_acts *a = NULL;
    assert_ok(fsc_model_acts_make(m, NULL, &o, &a));
    const int32_t tgt[4] = { 0 };
    double loss = 0;
    assert_ok(m->ops->set_batch(m->ctx, a, tok, tgt));
    assert_ok(m->ops->forward(m->ctx, a, NULL, &loss));
    int V2 = 0;
    const float *d = m->ops->logits(m->ctx, a, &V2);
    assert_non_null(d);
    float want[16];
    assert_ok(fsc_device_download(r->dev, want, d + 2 * 16, sizeof want));
    assert_memory_equal(lg, want, sizeof want);
    assert_ok(m->ops->backward(m->ctx, a, NULL, 0.25f));
    m->ops->acts_free(m->ctx, a);
    fsc_generator_free(g);
    /* a generator hands a model of its own hooks (none), not NULL */
    hooked_inner = m;
    fsc_model_ops ops = *m->ops;
    ops.forward = w_forward_hooked, ops.destroy = NULL;
    fsc_model outer = *m;
    outer.ops = &ops;
    assert_ok(fsc_generator_create(r->dev, &outer, &g));
    assert_ok(fsc_generator_next(g, tok, 3, &lg, &V));
    assert_memory_equal(lg, want, sizeof want);
    fsc_generator_free(g);
    fsc_engine_free(e);
    fsc_model_free(m);
    return FSC_OK;
}

static void test_generate_sequential_model(void **st) {
    (void)st;
    fsc_cluster_opts o = fsc_cluster_opts_default();
    assert_ok(fsc_cluster_run(&o, seq_generate_rank, NULL));
}

/* copy: out = in, and forward keeps in in its record */
static size_t wrong_bytes(const fsc_layer *l, int B) { (void)l; return (size_t)(B * 8 - 101); } /* int, negative */
static fsc_status copy_fwd(const fsc_layer *l, const fsc_layer_call *c, float *out, const void *in) {
    FSC_TRY(fsc_device_copy(c->dev, c->rec, in, (size_t)c->B * l->in_bytes));
    return fsc_device_copy(c->dev, out, in, (size_t)c->B * l->in_bytes);
}
static fsc_status copy_bwd(const fsc_layer *l, const fsc_layer_call *c, float *dinp, const float *dout, const void *in) {
    (void)in;
    return dinp ? fsc_device_copy(c->dev, dinp, dout, (size_t)c->B * l->in_bytes) : FSC_OK;
}

static void test_layer_sizes_past_memory(void **st) {
    (void)st;
    fsc_device *dev;
    assert_ok(fsc_device_create("cpu", NULL, &dev));
    static const fsc_layer_ops rec_ops = { .rec_bytes = wrong_bytes, .forward = copy_fwd, .backward = copy_bwd };
    static const fsc_layer_ops work_ops = { .work_bytes = wrong_bytes, .forward = copy_fwd, .backward = copy_bwd };
    const fsc_layer_ops *ops[2] = { &rec_ops, &work_ops };
    static const char *const what[2] = { "layer 1 (copy): rec_bytes(2) is 18446744073709551531, past 2^63",
                                         "layer 1 (copy): work_bytes(2) is 18446744073709551531, past 2^63" };
    for (int k = 0; k < 2; k++) {
        fsc_seq_layer ls[3] = { { 0 } };
        fsc_linear_opts lo = fsc_linear_opts_default(4, 4);
        assert_ok(fsc_layer_linear(&lo, &ls[0].layer));
        fsc_layer *c = calloc(1, sizeof *c);
        assert_non_null(c);
        snprintf(c->kind, sizeof c->kind, "copy");
        c->ops = ops[k], c->in_bytes = 16, c->out_floats = 4;
        ls[1].layer = c;
        assert_ok(fsc_layer_mse(4, &ls[2].layer));
        fsc_model *m = NULL;
        assert_ok(fsc_seq_model_create(dev, ls, 3, &m));
        fsc_model_acts_opts o = fsc_model_acts_opts_default(m, 2);
        fsc_model_acts *a = NULL;
        assert_err(fsc_model_acts_make(m, NULL, &o, &a), FSC_ERR_INVALID, what[k]);
        assert_null(a);
        fsc_model_free(m);
    }
    fsc_device_free(dev);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model_too_large_in_all),
        cmocka_unit_test(test_model_after_engine_free),
        cmocka_unit_test(test_rank_without_device_or_comm),
        cmocka_unit_test(test_ckpt_latest_small_buffer),
        cmocka_unit_test(test_model_ops_misbehaving),
        cmocka_unit_test(test_generate_sequential_model),
        cmocka_unit_test(test_layer_sizes_past_memory),
        cmocka_unit_test(test_switches_other_than_0_or_1),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
