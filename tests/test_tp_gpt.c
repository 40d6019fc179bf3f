/* The GPT's tensor-parallel form (fsc_gpt_model_create_tp: the GPT built on a tensor group from the layers'
 * tensor-parallel forms) in the engine (fsc_engine_create with po.tp), its weights files and its refusals.
 * Oracles:
 * - the initial weights at tp 2 and tp 4 (with and without sequence parallelism) are the unsharded model's:
 *   the weights file equals the single-rank engine's byte for byte, and so do the full parameters;
 * - after training at tp 4 (losses within 1e-6 relative of the single rank's, the tensor-parallel tolerance
 *   of docs/tensor_parallel.md: not bitwise, split sums), the file written equals the file a single rank
 *   writes after loading it, and loads at tp 2 with sequence parallelism, which writes the same file again;
 *   the trained file differs from the initial one (the comparison can fail); a missing file fails every rank;
 * - refusals name the reason: heads not dividing by the group, the vocabulary, sequence parallelism with a
 *   sequence that does not split. */
#include "test_tp_util.h"

#define STEPS 2
#define SEED 11
enum { GB = 4 };

static fsc_gpt_config cfg(void) { return (fsc_gpt_config){ .layers = 2, .dim = 24, .heads = 4, .seq = 8, .vocab = 48 }; }

typedef struct {
    fsc_gpt_config c;
    int tp, sp, steps;
    const char *load, *save_init, *save_end;
    double loss[STEPS];
    float *params;    /* full parameters after training, rank 0 */
} run;

static void batch(int s, int n, int32_t *tok, int32_t *tgt) {
    for (int i = 0; i < n * 8; i++) {
        uint32_t x = (uint32_t)(s * 1000 + i) * 2654435761u;
        tok[i] = (int32_t)((x >> 7) % 48u);
        tgt[i] = (int32_t)((x >> 17) % 48u);
    }
}

static fsc_status rank_fn(fsc_rank *r, void *arg) {
    run *x = arg;
    fsc_parallel_opts po = fsc_parallel_opts_default();
    po.tp = x->tp, po.sequence_parallel = x->sp;
    fsc_optim_config oc = { .kind = FSC_OPT_ADAMW, .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f };
    fsc_engine *e = NULL;
    FSC_TRY(fsc_engine_create(r, &x->c, &po, &oc, SEED, &e));
    fsc_status s = FSC_OK;
    if (x->load) s = fsc_engine_load_weights(e, x->load);
    if (s == FSC_OK && x->save_init) s = fsc_engine_save_weights(e, x->save_init);
    int32_t tok[GB * 8], tgt[GB * 8];
    for (int st = 0; st < x->steps && s == FSC_OK; st++) {
        batch(st, GB, tok, tgt); /* dp 1: every rank the whole batch */
        fsc_step_info info;
        s = fsc_engine_step(e, tok, tgt, GB, GB, &info);
        if (s == FSC_OK && r->rank == 0) x->loss[st] = info.loss;
    }
    if (s == FSC_OK && x->params) s = fsc_engine_full_params(e, r->rank == 0 ? x->params : NULL);
    if (s == FSC_OK && x->save_end) s = fsc_engine_save_weights(e, x->save_end);
    fsc_engine_free(e);
    return s;
}

static run make(int tp, int sp, int steps) {
    run x = { .c = cfg(), .tp = tp, .sp = sp, .steps = steps };
    x.params = calloc(fsc_gpt_num_params(&x.c), sizeof(float));
    return x;
}

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, *n, f), *n);
    fclose(f);
    return b;
}

static int same_file(const char *a, const char *b) {
    size_t na, nb;
    unsigned char *x = slurp(a, &na), *y = slurp(b, &nb);
    int same = na == nb && memcmp(x, y, na) == 0;
    free(x), free(y);
    return same;
}

static void test_tp_gpt_weights(void **state) {
    (void)state;
    char dir[] = "/tmp/fsc_tp_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char single[128], init[128], end4[128], end_single[128], reload[128];
    snprintf(single, sizeof single, "%s/single_init.safetensors", dir);
    snprintf(init, sizeof init, "%s/tp_init.safetensors", dir);
    snprintf(end4, sizeof end4, "%s/tp4_end.safetensors", dir);
    snprintf(end_single, sizeof end_single, "%s/tp4_end_single.safetensors", dir);
    snprintf(reload, sizeof reload, "%s/reload.safetensors", dir);
    const size_t P = fsc_gpt_num_params(&(fsc_gpt_config){ .layers = 2, .dim = 24, .heads = 4, .seq = 8,
                                                            .vocab = 48 });
    /* the single rank, trained */
    run ref = make(1, 0, STEPS);
    ref.save_init = single;
    assert_ok(tt_run(1, rank_fn, &ref));
    /* the initial weights of groups of 2 and 4 are the unsharded model's: the same file, the same parameters */
    const int sizes[][2] = { { 2, 0 }, { 2, 1 }, { 4, 0 }, { 4, 1 } };
    for (int k = 0; k < 4; k++) {
        run x = make(sizes[k][0], sizes[k][1], 0);
        x.save_init = init;
        assert_ok(tt_run(x.tp, rank_fn, &x));
        if (!same_file(single, init)) fail_msg("tp %d sp %d: the initial weights file differs", x.tp, x.sp);
        free(x.params);
    }
    /* after training at tp 4: close to the single rank; the file is what a single rank writes after loading it */
    run y = make(4, 0, STEPS);
    y.save_end = end4;
    assert_ok(tt_run(4, rank_fn, &y));
    for (int s = 0; s < STEPS; s++)
        if (!(fabs(y.loss[s] - ref.loss[s]) <= 1e-6 * ref.loss[s]))
            fail_msg("tp 4: loss of step %d %.9g vs %.9g", s, y.loss[s], ref.loss[s]);
    run one = make(1, 0, 0);
    one.load = end4, one.save_end = end_single;
    assert_ok(tt_run(1, rank_fn, &one));
    assert_true(same_file(end4, end_single));
    assert_bits_equal(one.params, y.params, P, "tp 4's full parameters loaded on one rank");
    /* and it loads into a group of 2 with sequence parallelism, which writes the same file again */
    run two = make(2, 1, 0);
    two.load = end4, two.save_end = reload;
    assert_ok(tt_run(2, rank_fn, &two));
    assert_true(same_file(end4, reload));
    assert_bits_equal(two.params, y.params, P, "tp 4's full parameters loaded at tp 2");
    assert_false(same_file(single, end4)); /* training changed the weights: the comparison can fail */
    /* a missing file fails every rank */
    run bad = make(2, 0, 0);
    bad.load = "/nonexistent/w.safetensors";
    assert_err(tt_run(2, rank_fn, &bad), FSC_ERR_IO, "nonexistent");
    const char *files[] = { single, init, end4, end_single, reload };
    for (int i = 0; i < 5; i++) unlink(files[i]);
    rmdir(dir);
    free(ref.params), free(y.params), free(one.params), free(two.params), free(bad.params);
}

static void test_tp_gpt_errors(void **state) {
    (void)state;
    run x = make(2, 0, 0);
    x.c.heads = 3; /* 3 heads over 2 ranks */
    assert_err(tt_run(2, rank_fn, &x), FSC_ERR_INVALID, "3 heads do not split over a tensor group of 2");
    x.c = cfg(), x.tp = 3; /* 4 heads over 3 ranks */
    assert_err(tt_run(3, rank_fn, &x), FSC_ERR_INVALID, "4 heads do not split over a tensor group of 3");
    x.c = cfg(), x.c.vocab = 50, x.tp = 4;
    assert_err(tt_run(4, rank_fn, &x), FSC_ERR_INVALID, "vocabulary of 50 does not split over a tensor group of 4");
    x.c = cfg(), x.c.seq = 3, x.c.heads = 2, x.c.dim = 8, x.tp = 2, x.sp = 1; /* 3 token rows per sequence */
    assert_err(tt_run(2, rank_fn, &x), FSC_ERR_INVALID, "sequence parallelism needs the sequence length T = 3");
    free(x.params);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tp_gpt_weights),
        cmocka_unit_test(test_tp_gpt_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
