/* Tests for tensor-parallel slices as declarations (model.h's split fields, lib/core/param_split.c) and the
 * sequential model's use of them (layers.h's fsc_layer_add_param_split, lib/layers/seq.c).
 *
 * Oracles:
 *   - fsc_param_full_index equals the index computed by hand from the definition (the split dimension in `parts`
 *     equal parts, each cut in tp_size slices, slice tp_rank of each taken in order) for row, column and parts=3
 *     splits; the runs cover every local element once, in order, each run contiguous in the full tensor and
 *     agreeing with fsc_param_full_index; the slices of all tensor ranks together cover every full element once.
 *   - a slice's initial values (the sequential model's init_values) equal bit for bit the matching elements of
 *     the same tensor in the model built without tensor parallelism, for every tensor rank and any first/n window.
 *   - fsc_model_validate refuses inconsistent split declarations with a message naming the tensor;
 *     fsc_layer_add_param_split refuses a dimension that does not divide. */
#include "testutil.h"

static fsc_device *g_dev;

static int setup(void **st) {
    (void)st;
    return fsc_device_create("cpu", &(fsc_device_opts){ .threads = 1 }, &g_dev) == FSC_OK ? 0 : -1;
}
static int teardown(void **st) {
    (void)st;
    fsc_device_free(g_dev);
    return 0;
}

/* ---- a layer that only declares parameters (a loss layer of one term, so it is a whole model) ----------- */

static fsc_status nop_fwd(const fsc_layer *l, const fsc_layer_call *c, float *out, const void *in) {
    (void)l, (void)c, (void)out, (void)in;
    return FSC_OK;
}
static fsc_status nop_bwd(const fsc_layer *l, const fsc_layer_call *c, float *dinp, const float *dout,
                          const void *in) {
    (void)l, (void)c, (void)dinp, (void)dout, (void)in;
    return FSC_OK;
}
static const fsc_layer_ops nop_ops = { .forward = nop_fwd, .backward = nop_bwd };

/* The declared tensors: rows (12, 5) split rows; cols (4, 12) split cols; qkv (4, 12) cols in 3 parts; rq (12, 2)
 * rows in 3 parts; bias (12) cols in 3 parts; norm (5) replicated. */
#define NT 6
static const char *const names[NT] = { "rows", "cols", "qkv", "rq", "bias", "norm" };
static const int ndims[NT] = { 2, 2, 2, 2, 1, 1 };
static const int64_t shapes[NT][2] = { { 12, 5 }, { 4, 12 }, { 4, 12 }, { 12, 2 }, { 12, 0 }, { 5, 0 } };
static const int splits[NT] = { FSC_SPLIT_ROWS, FSC_SPLIT_COLS, FSC_SPLIT_COLS, FSC_SPLIT_ROWS, FSC_SPLIT_COLS,
                                FSC_SPLIT_NONE };
static const int partss[NT] = { 1, 1, 3, 3, 3, 0 };

static fsc_model *build(int rank, int T) {
    fsc_layer *l = calloc(1, sizeof *l);
    assert_non_null(l);
    snprintf(l->kind, sizeof l->kind, "decl");
    l->ops = &nop_ops;
    l->in_bytes = 4, l->out_floats = 1, l->loss_terms = 1, l->target_bytes = 4;
    for (int t = 0; t < NT; t++) {
        fsc_init in = t == NT - 1 ? fsc_init_const(1.0f) : fsc_init_normal(0.5f);
        if (T == 1) assert_ok(fsc_layer_add_param(l, names[t], ndims[t], shapes[t], in));
        else assert_ok(fsc_layer_add_param_split(l, names[t], ndims[t], shapes[t], splits[t], partss[t], rank, T, in));
    }
    fsc_model *m = NULL;
    assert_ok(fsc_seq_model_create(g_dev, &(fsc_seq_layer){ .layer = l, .prefix = "p." }, 1, &m));
    return m;
}

/* The definition, by hand: along the split dimension (width fw), local index i of a slice of width lw = fw / T
 * is in part q = i / (lw / P), at offset i % (lw / P) within rank's slice of that part. */
static size_t by_hand(int t, int rank, int T, size_t local) {
    const int P = partss[t] > 1 ? partss[t] : 1;
    if (splits[t] == FSC_SPLIT_NONE) return local;
    if (ndims[t] == 1 || splits[t] == FSC_SPLIT_COLS) {
        const size_t fw = (size_t)(ndims[t] == 1 ? shapes[t][0] : shapes[t][1]), lw = fw / (size_t)T;
        const size_t row = local / lw, i = local % lw, w = lw / (size_t)P;
        return row * fw + (i / w) * (fw / (size_t)P) + (size_t)rank * w + i % w;
    }
    const size_t C = (size_t)shapes[t][1], fw = (size_t)shapes[t][0], lw = fw / (size_t)T, w = lw / (size_t)P;
    const size_t i = local / C, c = local % C;
    return ((i / w) * (fw / (size_t)P) + (size_t)rank * w + i % w) * C + c;
}

static void test_index_and_runs(void **st) {
    (void)st;
    const int sizes[] = { 2, 4 };
    for (int si = 0; si < 2; si++) {
        const int T = sizes[si];
        for (int t = 0; t < NT; t++) {
            const size_t full = (size_t)shapes[t][0] * (size_t)(ndims[t] == 2 ? shapes[t][1] : 1);
            unsigned char *seen = calloc(full, 1);
            assert_non_null(seen);
            for (int r = 0; r < T; r++) {
                fsc_model *m = build(r, T);
                const fsc_param_info *p = &m->info[t];
                assert_int_equal(fsc_param_full_numel(p), full);
                for (size_t i = 0; i < p->numel; i++) {
                    const size_t f = fsc_param_full_index(p, i);
                    if (f != by_hand(t, r, T, i))
                        fail_msg("%s rank %d of %d: local %zu is full %zu, by hand %zu", p->name, r, T, i, f,
                                 by_hand(t, r, T, i));
                    if (splits[t] != FSC_SPLIT_NONE) seen[f]++;
                }
                size_t next = 0;
                for (size_t k = 0; k < fsc_param_num_runs(p); k++) {
                    const fsc_param_run run = fsc_param_run_at(p, k, 0, p->numel);
                    assert_int_equal(run.local, next);
                    for (size_t j = 0; j < run.n; j++)
                        assert_int_equal(run.full + j, fsc_param_full_index(p, run.local + j));
                    next += run.n;
                    /* clipped to a window of 3 elements from 1 */
                    const fsc_param_run c = fsc_param_run_at(p, k, 1, 3);
                    if (c.n) {
                        assert_true(c.local >= 1 && c.local + c.n <= 4);
                        assert_int_equal(c.full, fsc_param_full_index(p, c.local));
                    }
                }
                assert_int_equal(next, p->numel);
                const size_t past = fsc_param_num_runs(p); /* no such run: nothing, whatever the window */
                assert_int_equal(fsc_param_run_at(p, past, 0, SIZE_MAX / 2).n, 0);
                assert_int_equal(fsc_param_run_at(p, past + 5, p->numel, 100).n, 0);
                fsc_model_free(m);
            }
            for (size_t f = 0; f < full && splits[t] != FSC_SPLIT_NONE; f++)
                if (seen[f] != 1) fail_msg("%s at tp %d: full element %zu is in %d slices", names[t], T, f, seen[f]);
            free(seen);
        }
    }
}

/* Every slice's initial values are the tp=1 tensor's at the matching elements, bit for bit. */
static void test_init_values(void **st) {
    (void)st;
    fsc_model *one = build(0, 1);
    const int sizes[] = { 2, 3 };
    for (int si = 0; si < 2; si++) {
        const int T = sizes[si];
        for (int r = 0; r < T; r++) {
            fsc_model *m = NULL;
            if (T == 3) { /* a split of 3 ranks: only the tensors whose dimension divides */
                fsc_layer *l = calloc(1, sizeof *l);
                assert_non_null(l);
                snprintf(l->kind, sizeof l->kind, "decl");
                l->ops = &nop_ops;
                l->in_bytes = 4, l->out_floats = 1, l->loss_terms = 1, l->target_bytes = 4;
                for (int t = 0; t < NT; t++) {
                    const int sp = t == 2 || t == 4 ? FSC_SPLIT_NONE : splits[t], pa = sp ? 1 : 0;
                    fsc_init in = t == NT - 1 ? fsc_init_const(1.0f) : fsc_init_normal(0.5f);
                    if (t == 3) { /* rq (12, 2): rows in 3 slices of 4 */
                        assert_ok(fsc_layer_add_param_split(l, names[t], 2, shapes[t], FSC_SPLIT_ROWS, 1, r, 3, in));
                        continue;
                    }
                    assert_ok(fsc_layer_add_param_split(l, names[t], ndims[t], shapes[t], sp, pa, r, T, in));
                }
                assert_ok(fsc_seq_model_create(g_dev, &(fsc_seq_layer){ .layer = l, .prefix = "p." }, 1, &m));
            } else {
                m = build(r, T);
            }
            for (int t = 0; t < NT; t++) {
                const fsc_param_info *p = &m->info[t];
                assert_string_equal(p->name, one->info[t].name);
                float *full = malloc(one->info[t].numel * sizeof(float)), *loc = malloc(p->numel * sizeof(float));
                float *win = malloc(p->numel * sizeof(float));
                assert_true(full && loc && win);
                one->ops->init_values(one->ctx, 7, t, 0, one->info[t].numel, full);
                m->ops->init_values(m->ctx, 7, t, 0, p->numel, loc);
                for (size_t i = 0; i < p->numel; i++)
                    if (memcmp(&loc[i], &full[fsc_param_full_index(p, i)], sizeof(float)))
                        fail_msg("%s tp %d rank %d: element %zu is %.9g, the full tensor's %.9g", p->name, T, r, i,
                                 (double)loc[i], (double)full[fsc_param_full_index(p, i)]);
                /* a window [first, first + n) gives the same values as the whole slice there */
                const size_t first = p->numel / 3, n = p->numel - first - (p->numel > 4 ? 1 : 0);
                m->ops->init_values(m->ctx, 7, t, first, n, win);
                assert_bits_equal(win, loc + first, n, p->name);
                free(full), free(loc), free(win);
            }
            fsc_model_free(m);
        }
    }
    fsc_model_free(one);
}

/* A model whose one tensor carries the given split fields, validated. */
static fsc_status validate_one(fsc_param_info pi) {
    float *param[1] = { 0 }, *grad[1] = { 0 };
    static const fsc_model_ops ops = { .acts_create = (void *)1, .acts_free = (void *)1, .acts_bytes = (void *)1,
                                       .set_batch = (void *)1, .stream = (void *)1, .stream_floats = (void *)1,
                                       .forward = (void *)1, .backward = (void *)1, .init_values = (void *)1 };
    snprintf(pi.name, sizeof pi.name, "blk.w");
    pi.ndim = 2, pi.shape[0] = 4, pi.shape[1] = 6, pi.numel = 24, pi.expert = -1;
    fsc_model m = { .n_layers = 1, .n_tensors = 1, .info = &pi, .param = param, .grad = grad, .loss_terms = 1,
                    .ops = &ops };
    return fsc_model_validate(&m);
}

static void test_validate(void **st) {
    (void)st;
    /* consistent: (4, 6) is rank 1's column slice of (4, 12) at tp 2, of (8, 6) by rows, in 3 parts of (4, 12) */
    assert_ok(validate_one((fsc_param_info){ 0 }));
    assert_ok(validate_one((fsc_param_info){ .split = FSC_SPLIT_COLS, .tp_rank = 1, .tp_size = 2,
                                             .full_shape = { 4, 12 }, .full_numel = 48 }));
    assert_ok(validate_one((fsc_param_info){ .split = FSC_SPLIT_ROWS, .tp_rank = 1, .tp_size = 2,
                                             .full_shape = { 8, 6 }, .full_numel = 48 }));
    assert_ok(validate_one((fsc_param_info){ .split = FSC_SPLIT_COLS, .parts = 3, .tp_rank = 0, .tp_size = 2,
                                             .full_shape = { 4, 12 }, .full_numel = 48 }));
    assert_ok(validate_one((fsc_param_info){ .tp_rank = 1, .tp_size = 2, .full_shape = { 4, 6 } }));
    /* inconsistent */
    assert_err(validate_one((fsc_param_info){ .split = FSC_SPLIT_COLS, .tp_rank = 1, .tp_size = 2,
                                              .full_shape = { 4, 6 }, .full_numel = 24 }),
               FSC_ERR_INVALID, "blk.w");
    assert_err(validate_one((fsc_param_info){ .split = FSC_SPLIT_ROWS, .tp_rank = 0, .tp_size = 2,
                                              .full_shape = { 8, 12 }, .full_numel = 96 }),
               FSC_ERR_INVALID, "tensor blk.w is split along dimension 0");
    assert_err(validate_one((fsc_param_info){ .split = FSC_SPLIT_COLS, .tp_rank = 0, .tp_size = 2,
                                              .full_shape = { 4, 12 }, .full_numel = 40 }),
               FSC_ERR_INVALID, "blk.w has full_numel 40");
    assert_err(validate_one((fsc_param_info){ .split = FSC_SPLIT_COLS, .parts = 4, .tp_rank = 0, .tp_size = 2,
                                              .full_shape = { 4, 12 }, .full_numel = 48 }),
               FSC_ERR_INVALID, "blk.w");
    assert_err(validate_one((fsc_param_info){ .split = FSC_SPLIT_COLS, .tp_rank = 2, .tp_size = 2,
                                              .full_shape = { 4, 12 }, .full_numel = 48 }),
               FSC_ERR_INVALID, "blk.w is on tensor rank 2 of 2");
    assert_err(validate_one((fsc_param_info){ .split = 7 }), FSC_ERR_INVALID, "blk.w has split 7");
    assert_err(validate_one((fsc_param_info){ .parts = 3 }), FSC_ERR_INVALID, "blk.w is not split");
    assert_err(validate_one((fsc_param_info){ .full_shape = { 4, 7 } }), FSC_ERR_INVALID, "blk.w is not split");
    /* one tensor group per model */
    {
        fsc_model *m = build(1, 2);
        fsc_param_info *info = (fsc_param_info *)m->info;
        const int keep = info[2].tp_rank;
        info[2].tp_rank = 0;
        assert_err(fsc_model_validate(m), FSC_ERR_INVALID, "p.qkv is on tensor rank 0 of 2 but p.rows");
        info[2].tp_rank = keep;
        assert_ok(fsc_model_validate(m));
        fsc_model_free(m);
    }
    /* the layer refuses a dimension that does not split */
    fsc_layer l = { .kind = "decl" };
    assert_err(fsc_layer_add_param_split(&l, "w", 2, (int64_t[]){ 4, 10 }, FSC_SPLIT_COLS, 3, 0, 2, fsc_init_const(0)),
               FSC_ERR_INVALID, "parameter w: dimension 1 (10) does not split into 3 parts of 2 slices");
    assert_err(fsc_layer_add_param_split(&l, "w", 2, (int64_t[]){ 5, 10 }, FSC_SPLIT_ROWS, 1, 0, 2, fsc_init_const(0)),
               FSC_ERR_INVALID, "dimension 0 (5)");
    assert_err(fsc_layer_add_param_split(&l, "w", 2, (int64_t[]){ 4, 10 }, FSC_SPLIT_ROWS, 1, 2, 2, fsc_init_const(0)),
               FSC_ERR_INVALID, "on tensor rank 2 of 2");
    assert_int_equal(l.n_params, 0);
    assert_ok(fsc_layer_add_param_split(&l, "w", 2, (int64_t[]){ 4, 10 }, FSC_SPLIT_COLS, 1, 1, 2, fsc_init_const(0)));
    assert_int_equal(l.params[0].shape[0], 4);
    assert_int_equal(l.params[0].shape[1], 5);
    assert_int_equal(l.params[0].numel, 20);
    assert_int_equal(l.params[0].full_shape[1], 10);
    free(l.params); /* the layer's parameter table (a layer on the stack: not fsc_layer_free) */
}

/* A tie of slices must tie the same slice of the same full tensor. */
static void test_tie_of_slices(void **st) {
    (void)st;
    fsc_layer *a = calloc(1, sizeof *a), *b = calloc(1, sizeof *b);
    assert_true(a && b);
    for (int k = 0; k < 2; k++) {
        fsc_layer *l = k ? b : a;
        snprintf(l->kind, sizeof l->kind, "decl");
        l->ops = &nop_ops;
        l->in_bytes = 4, l->out_floats = 1;
    }
    b->loss_terms = 1, b->target_bytes = 4;
    assert_ok(fsc_layer_add_param_split(a, "w", 2, (int64_t[]){ 8, 4 }, FSC_SPLIT_ROWS, 1, 0, 2, fsc_init_normal(1)));
    /* the same local shape (4, 4) but a column slice of (4, 8): not the same tensor */
    assert_ok(fsc_layer_add_param_split(b, "w", 2, (int64_t[]){ 4, 8 }, FSC_SPLIT_COLS, 1, 0, 2, fsc_init_normal(1)));
    fsc_seq_layer ls[2] = { { .layer = a, .prefix = "a." },
                            { .layer = b, .prefix = "b.", .tie = { { .param = "w", .to = "a.w" } } } };
    fsc_model *m = NULL;
    assert_err(fsc_seq_model_create(g_dev, ls, 2, &m), FSC_ERR_INVALID, "ties w to a.w of another shape");
    assert_null(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_index_and_runs),
        cmocka_unit_test(test_init_values),
        cmocka_unit_test(test_validate),
        cmocka_unit_test(test_tie_of_slices),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
