/* Tests of the padded vocabulary on the Llama (llama.h's padded_vocab) and under tensor parallelism (the GPT's and
 * the Llama's vocab-parallel embedding and head over Vp rows).
 * Oracles: the unpadded model of the same seed.
 *   - a padded Llama (V 30, Vp 40) trains to the unpadded one's losses bit for bit (FSDP over two ranks, AdamW with
 *     weight decay on every tensor); the real rows of model.embed_tokens.weight and lm_head.weight and every other
 *     tensor are the unpadded model's bits, the padding rows of both stay 0;
 *   - a Hugging Face file of V rows (the unpadded Llama's) loads into the padded Llama (zero padding rows, the other
 *     tensors the same), its own file has V rows of both tables; the sampler never emits a padding id, even with
 *     lm_head's padding rows loud enough to win every softmax (greedy and sampled);
 *   - tp 2 (vocab-parallel embedding and head over Vp 40 = 2 x 20 rows: the second rank holds 10 real and 10 padding
 *     rows), GPT and Llama: every step's loss within 1e-6 relative of tp 2 unpadded (V 30 = 2 x 15; measured 1e-8),
 *     the real rows and the other tensors within 1e-4 (measured 1e-7 on the Llama, 8e-6 on the GPT: AdamW divides
 *     by the root of the second moment, so an element whose gradient is near 0 moves by up to lr whatever the
 *     rounding), the padding rows exactly 0, fsc_engine_predict's outputs (V columns) within 1e-5. Not bit for
 *     bit: the group's softmax combines per-slice maxima and sums over other column slices (20 | 10 against
 *     15 | 15), so its sums run in another order;
 *   - padding that leaves a tensor rank no real row (V 30, Vp 60 at tp 2) is refused, saying so. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "testutil.h"
#include "fsc/gpt_engine.h"
#include "fsc/llama.h"
#include "fsc/generate.h"
#include "fsc/safetensors.h"

#define V 30
#define VP 40
#define C 16
#define T 8
#define STEPS 3

static fsc_llama_config lcfg(int padded) {
    return (fsc_llama_config){ .layers = 2, .dim = C, .heads = 2, .kv_heads = 2, .ffn = 32, .seq = T, .vocab = V,
                               .rope_theta = 10000.0f, .norm_eps = 1e-5f, .padded_vocab = padded };
}
static fsc_gpt_config gcfg(int padded) {
    return (fsc_gpt_config){ .layers = 2, .dim = C, .heads = 2, .seq = T, .vocab = V, .padded_vocab = padded };
}

typedef struct {
    int gpt, tp, world, padded;
    fsc_parallel_kind kind;
    double loss[STEPS];
    float *params;          /* the full parameters after the steps (rank 0) */
    float out[4 * T * V];   /* rank 0: predict's outputs of its sequences after the steps */
    size_t per;
    fsc_status made;
    char why[512];
} job;

static size_t nparams(int gpt, int padded) { /* padded: 0 or not */
    fsc_llama_config l = lcfg(padded ? VP : 0);
    fsc_gpt_config g = gcfg(padded ? VP : 0);
    return gpt ? fsc_gpt_num_params(&g) : fsc_llama_num_params(&l);
}

static fsc_status make_engine(fsc_rank *r, const job *j, fsc_engine **e) {
    fsc_parallel_opts po = fsc_parallel_opts_default();
    po.kind = j->kind, po.tp = j->tp;
    fsc_optim_config oc = fsc_optim_config_default();
    oc.weight_decay = 0.1f, oc.decay_all = 1, oc.lr = 0.01f; /* the tables decayed too: 0 stays 0 */
    if (j->gpt) {
        fsc_gpt_config g = gcfg(j->padded);
        return fsc_engine_create(r, &g, &po, &oc, 7, e);
    }
    fsc_llama_build_arg a = { .cfg = lcfg(j->padded) };
    return fsc_engine_create_built(r, fsc_llama_build, &a, &po, &oc, 7, e);
}

static fsc_status train_rank(fsc_rank *r, void *arg) {
    job *j = arg;
    fsc_engine *e = NULL;
    fsc_status s = make_engine(r, j, &e);
    if (r->rank == 0) {
        j->made = s;
        snprintf(j->why, sizeof j->why, "%s", s == FSC_OK ? "" : fsc_last_error());
    }
    if (s != FSC_OK) return FSC_OK; /* a refusal is the result */
    const int dp = fsc_engine_layout(e)->dp, di = fsc_engine_layout(e)->data, lb = 4 / dp;
    int32_t tok[4 * T], tgt[4 * T];
    for (int k = 0; k <= STEPS && s == FSC_OK; k++) {
        for (int i = 0; i < lb * T; i++)
            tok[i] = (i * 7 + di * 3 + (k == STEPS)) % V, tgt[i] = (i * 5 + 1 + di) % V; /* a batch to learn */
        if (k == STEPS) break;
        fsc_step_info info;
        s = fsc_engine_step_model(e, tok, tgt, lb, 4, &info);
        if (s == FSC_OK && r->rank == 0) j->loss[k] = info.loss; /* the same on every rank */
    }
    float mine[4 * T * V];
    size_t per = 0;
    if (s == FSC_OK) s = fsc_engine_predict(e, tok, lb, r->rank == 0 ? j->out : mine, r->rank == 0 ? &j->per : &per);
    if (s == FSC_OK) s = fsc_engine_full_params(e, r->rank == 0 ? j->params : NULL);
    fsc_engine_free(e);
    return s;
}

static void run(job *j) {
    j->params = calloc(nparams(j->gpt, j->padded), sizeof(float));
    fsc_cluster_opts co = fsc_cluster_opts_default();
    co.world = j->world;
    assert_ok(fsc_cluster_run(&co, train_rank, j));
}

/* The padded model's parameters against the unpadded one's: the tables' real rows and every other tensor within
 * tol (0: the same bits), the padding rows 0. The GPT: wte first; the Llama: embed_tokens first, lm_head last. */
static void compare(const float *u, const float *p, int gpt, double tol, const char *what) {
    const size_t PU = nparams(gpt, 0), PP = nparams(gpt, 1), R = (size_t)V * C, PR = (size_t)(VP - V) * C;
    struct { size_t at_u, at_p, n; } parts[3] = { { 0, 0, R }, { R, R + PR, PU - R - (gpt ? 0 : R) },
                                                  { PU - R, PP - R - PR, gpt ? 0 : R } };
    double worst = 0;
    for (int k = 0; k < 3; k++)
        for (size_t i = 0; i < parts[k].n; i++) {
            const float a = u[parts[k].at_u + i], b = p[parts[k].at_p + i];
            worst = fmax(worst, fabs((double)a - b));
            if (tol == 0 ? memcmp(&a, &b, sizeof a) != 0 : !(fabs((double)a - b) <= tol))
                fail_msg("%s: element %zu of part %d: unpadded %.9g, padded %.9g", what, i, k, (double)a, (double)b);
        }
    if (getenv("FSC_TEST_VERBOSE")) fprintf(stderr, "  %s: max |parameter difference| %.3g\n", what, worst);
    for (size_t i = 0; i < PR; i++) {
        if (p[R + i] != 0.0f) fail_msg("%s: padding element %zu of the token table is %g", what, i, (double)p[R + i]);
        if (!gpt && p[PP - PR + i] != 0.0f)
            fail_msg("%s: padding element %zu of lm_head is %g", what, i, (double)p[PP - PR + i]);
    }
}

static void test_llama_trains_as_unpadded(void **state) {
    (void)state;
    fsc_llama_config u = lcfg(0), p = lcfg(VP);
    assert_int_equal(fsc_llama_num_params(&p) - fsc_llama_num_params(&u), 2 * (size_t)(VP - V) * C);
    assert_int_equal(fsc_llama_vocab_rows(&p), VP);
    job ju = { .world = 2, .tp = 1, .kind = FSC_PAR_FSDP }, jp = ju;
    jp.padded = VP;
    run(&ju);
    run(&jp);
    assert_int_equal(ju.made, FSC_OK);
    assert_int_equal(jp.made, FSC_OK);
    for (int k = 0; k < STEPS; k++)
        if (memcmp(&ju.loss[k], &jp.loss[k], sizeof(double)))
            fail_msg("step %d: padded loss %.17g, unpadded %.17g", k + 1, jp.loss[k], ju.loss[k]);
    assert_int_equal((int)jp.per, T * V);
    compare(ju.params, jp.params, 0, 0, "llama, fsdp 2");
    assert_memory_equal(ju.out, jp.out, sizeof ju.out);
    free(ju.params), free(jp.params);
}

static void test_tp_padded_as_unpadded(void **state) {
    (void)state;
    for (int gpt = 0; gpt < 2; gpt++) {
        job ju = { .gpt = gpt, .world = 2, .tp = 2, .kind = FSC_PAR_DDP }, jp = ju;
        jp.padded = VP;
        run(&ju);
        run(&jp);
        if (ju.made != FSC_OK || jp.made != FSC_OK) fail_msg("%s tp 2: %s%s", gpt ? "gpt" : "llama", ju.why, jp.why);
        for (int k = 0; k < STEPS; k++)
            if (!(fabs(ju.loss[k] - jp.loss[k]) <= 1e-6 * fabs(ju.loss[k])))
                fail_msg("%s tp 2, step %d: padded loss %.17g, unpadded %.17g", gpt ? "gpt" : "llama", k + 1,
                         jp.loss[k], ju.loss[k]);
        assert_true(ju.loss[STEPS - 1] < ju.loss[0]); /* it learns */
        if (getenv("FSC_TEST_VERBOSE"))
            fprintf(stderr, "  %s tp 2: last loss padded %.17g, unpadded %.17g\n", gpt ? "gpt" : "llama",
                    jp.loss[STEPS - 1], ju.loss[STEPS - 1]);
        compare(ju.params, jp.params, gpt, 1e-4, gpt ? "gpt tp 2" : "llama tp 2");
        assert_int_equal((int)jp.per, T * V);
        for (int i = 0; i < 4 * T * V; i++)
            if (!(fabs((double)ju.out[i] - jp.out[i]) <= 1e-5))
                fail_msg("%s tp 2: logit %d padded %.9g, unpadded %.9g", gpt ? "gpt" : "llama", i, (double)jp.out[i],
                         (double)ju.out[i]);
        free(ju.params), free(jp.params);
    }
    job big = { .world = 2, .tp = 2, .kind = FSC_PAR_DDP, .padded = 2 * V }; /* rank 1: 30 rows, all padding */
    run(&big);
    assert_int_equal(big.made, FSC_ERR_UNSUPPORTED);
    if (!strstr(big.why, "pad by fewer than 30 rows")) fail_msg("message: %s", big.why);
    free(big.params);
}

typedef struct {
    char dir[256];
    float *hu, *hp, *loud;
    int gen_vocab;
    int32_t gen[2][64];
} io_arg;

static fsc_status engine_of(fsc_rank *r, int padded, fsc_engine **e) {
    fsc_parallel_opts po = fsc_parallel_opts_default();
    fsc_optim_config oc = fsc_optim_config_default();
    oc.kind = FSC_OPT_SGD;
    fsc_llama_build_arg a = { .cfg = lcfg(padded) };
    return fsc_engine_create_built(r, fsc_llama_build, &a, &po, &oc, 3, e);
}

/* The padded Llama's tensors with lm_head's padding rows loud (+-50 times real rows), all Vp rows written. */
static fsc_status write_loud(fsc_engine *e, const char *path, float *host) {
    fsc_llama_config p = lcfg(VP);
    const size_t PP = fsc_llama_num_params(&p);
    FSC_TRY(fsc_engine_full_params(e, host));
    float *head = host + PP - (size_t)VP * C;
    for (int k = 0; k < VP - V; k++)
        for (int c = 0; c < C; c++)
            head[(size_t)(V + k) * C + (size_t)c] = (k < 5 ? 50.0f : -50.0f) * head[(size_t)(k % 5) * C + (size_t)c];
    fsc_st_writer *w = NULL;
    FSC_TRY(fsc_st_writer_open(path, &w));
    fsc_status s = FSC_OK;
    const int n = fsc_llama_num_tensors(&p);
    for (int i = 0; i < n && s == FSC_OK; i++) {
        fsc_param_info pi;
        s = fsc_llama_param_info(&p, i, &pi);
        if (s == FSC_OK) s = fsc_st_writer_add(w, pi.name, FSC_F32, pi.ndim, pi.shape);
    }
    if (s == FSC_OK) s = fsc_st_writer_begin_data(w);
    size_t off = 0;
    for (int i = 0; i < n && s == FSC_OK; i++) {
        fsc_param_info pi;
        s = fsc_llama_param_info(&p, i, &pi);
        if (s == FSC_OK) s = fsc_st_writer_write_f32(w, i, host + off, 0, pi.numel);
        off += pi.numel;
    }
    if (s == FSC_OK) return fsc_st_writer_commit(w);
    fsc_st_writer_abort(w);
    return s;
}

static fsc_status io_rank(fsc_rank *r, void *arg) {
    io_arg *ia = arg;
    char pu[300], pp[300], pl[300];
    snprintf(pu, sizeof pu, "%s/u.safetensors", ia->dir);
    snprintf(pp, sizeof pp, "%s/p.safetensors", ia->dir);
    snprintf(pl, sizeof pl, "%s/loud.safetensors", ia->dir);
    fsc_engine *eu = NULL, *ep = NULL;
    fsc_generator *g = NULL;
    fsc_status s = engine_of(r, 0, &eu);
    if (s == FSC_OK) s = engine_of(r, VP, &ep);
    if (s == FSC_OK) s = fsc_engine_save_weights(eu, pu); /* Hugging Face's: [V, C] tables */
    if (s == FSC_OK) s = fsc_engine_load_weights(ep, pu);
    if (s == FSC_OK) s = fsc_engine_full_params(eu, ia->hu);
    if (s == FSC_OK) s = fsc_engine_full_params(ep, ia->hp);
    if (s == FSC_OK) s = fsc_engine_save_weights(ep, pp); /* V rows again */
    if (s == FSC_OK) s = write_loud(ep, pl, ia->loud);
    if (s == FSC_OK) s = fsc_engine_load_weights(ep, pl);
    if (s == FSC_OK) s = fsc_generator_create(r->dev, fsc_engine_model(ep), &g);
    const float *lg;
    if (s == FSC_OK) s = fsc_generator_next(g, &(int32_t){ 1 }, 1, &lg, &ia->gen_vocab);
    for (int k = 0; k < 2 && s == FSC_OK; k++) {
        fsc_sample_opts so = { .temperature = k ? 1.0f : 0.0f, .top_k = 0, .seed = 5 };
        ia->gen[k][0] = 1, ia->gen[k][1] = 2;
        s = fsc_generate(g, ia->gen[k], 2, 62, &so);
    }
    fsc_generator_free(g);
    fsc_engine_free(eu), fsc_engine_free(ep);
    return s;
}

static void rows_of(const char *path, const char *name, int64_t *rows, float *first) {
    fsc_st_file *f = NULL;
    assert_ok(fsc_st_open(path, &f));
    const fsc_st_entry *en = fsc_st_find(f, name);
    assert_non_null(en);
    *rows = en->shape[0];
    assert_int_equal(en->shape[1], C);
    assert_ok(fsc_st_read_f32(f, en, first, 0, (size_t)V * C));
    fsc_st_close(f);
}

static void test_llama_hf_rows_and_sampler(void **state) {
    (void)state;
    const size_t PU = nparams(0, 0), PP = nparams(0, 1);
    io_arg ia = { .hu = malloc(PU * 4), .hp = malloc(PP * 4), .loud = malloc(PP * 4) };
    snprintf(ia.dir, sizeof ia.dir, "/tmp/fsc_test_vocab_pad_llama_%d", (int)getpid());
    assert_int_equal(mkdir(ia.dir, 0777), 0);
    fsc_cluster_opts co = fsc_cluster_opts_default();
    co.world = 1;
    assert_ok(fsc_cluster_run(&co, io_rank, &ia));
    compare(ia.hu, ia.hp, 0, 0, "a file of V rows loaded into Vp"); /* the same rows, zero padding */
    char pu[300], pp[300];
    snprintf(pu, sizeof pu, "%s/u.safetensors", ia.dir);
    snprintf(pp, sizeof pp, "%s/p.safetensors", ia.dir);
    static float a[V * C], b[V * C];
    const char *names[2] = { "model.embed_tokens.weight", "lm_head.weight" };
    for (int k = 0; k < 2; k++) {
        int64_t ru, rp;
        rows_of(pu, names[k], &ru, a);
        rows_of(pp, names[k], &rp, b);
        assert_int_equal(ru, V);
        assert_int_equal(rp, V);
        assert_memory_equal(a, b, sizeof a);
    }
    assert_int_equal(ia.gen_vocab, V);
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 64; i++)
            if (ia.gen[k][i] < 0 || ia.gen[k][i] >= V)
                fail_msg("%s token %d is %d, a padding id (vocabulary %d)", k ? "sampled" : "greedy", i,
                         (int)ia.gen[k][i], V);
    test_rmtree(ia.dir);
    free(ia.hu), free(ia.hp), free(ia.loud);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama_trains_as_unpadded),
        cmocka_unit_test(test_tp_padded_as_unpadded),
        cmocka_unit_test(test_llama_hf_rows_and_sampler),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
