/* Tests of the GPT's padded vocabulary (gpt.h's padded_vocab, llm.c's): wte of Vp rows, the real vocabulary V.
 * Oracles: the unpadded GPT of the same seed. A padded GPT trains to the unpadded one's losses bit for bit (AdamW
 * with weight decay on every tensor, sharded by FSDP over two ranks), its wte's first V rows equal the unpadded
 * wte and its padding rows stay 0 (they are in no logit, so their gradient is 0); a Hugging Face file of V rows
 * (the unpadded model's) loads into it with zero padding rows, and its own saved file has V rows, the unpadded
 * model's bytes; a file of a third row count is refused, naming the shape; the sampler never emits a padding id,
 * even when the padding rows hold weights that would win every softmax (greedy and sampled); the FLOPs per token
 * are the unpadded model's. */
#include <math.h>
#include "testutil.h"
#include "fsc/gpt_engine.h"
#include "fsc/generate.h"
#include "fsc/safetensors.h"

#define V 30
#define VP 40
#define C 16
#define T 8
#define STEPS 3

static fsc_gpt_config cfg(int padded) {
    return (fsc_gpt_config){ .layers = 2, .dim = C, .heads = 2, .seq = T, .vocab = V, .padded_vocab = padded ? VP : 0 };
}

typedef struct {
    double loss[2][STEPS];
    float *params[2]; /* the full parameters after the steps (rank 0) */
} train_arg;

static fsc_status train_rank(fsc_rank *r, void *arg) {
    train_arg *ta = arg;
    for (int padded = 0; padded < 2; padded++) {
        fsc_gpt_config g = cfg(padded);
        fsc_parallel_opts po = fsc_parallel_opts_default();
        po.kind = FSC_PAR_FSDP;
        fsc_optim_config oc = fsc_optim_config_default();
        oc.weight_decay = 0.1f, oc.decay_all = 1, oc.lr = 0.01f; /* wte decayed too: 0 stays 0 */
        fsc_engine *e = NULL;
        FSC_TRY(fsc_engine_create(r, &g, &po, &oc, 7, &e));
        int32_t tok[2 * T], tgt[2 * T];
        fsc_status s = FSC_OK;
        for (int k = 0; k < STEPS && s == FSC_OK; k++) {
            for (int i = 0; i < 2 * T; i++)
                tok[i] = (i * 7 + r->rank * 3 + k) % V, tgt[i] = (i * 5 + 1 + k) % V;
            fsc_step_info info;
            s = fsc_engine_step(e, tok, tgt, 2, 4, &info);
            if (s == FSC_OK && r->rank == 0) ta->loss[padded][k] = info.loss; /* the same on every rank */
        }
        if (s == FSC_OK) s = fsc_engine_full_params(e, r->rank == 0 ? ta->params[padded] : NULL);
        fsc_engine_free(e);
        FSC_TRY(s);
    }
    return FSC_OK;
}

static void test_trains_as_unpadded(void **state) {
    (void)state;
    fsc_gpt_config u = cfg(0), p = cfg(1);
    const size_t PU = fsc_gpt_num_params(&u), PP = fsc_gpt_num_params(&p);
    assert_int_equal(PP - PU, (size_t)(VP - V) * C);
    assert_int_equal(fsc_gpt_vocab_rows(&p), VP);
    assert_true(fsc_gpt_flops_per_token(&p) == fsc_gpt_flops_per_token(&u)); /* the padding multiplies nothing */
    train_arg ta = { .params = { malloc(PU * sizeof(float)), malloc(PP * sizeof(float)) } };
    fsc_cluster_opts co = fsc_cluster_opts_default();
    co.world = 2;
    assert_ok(fsc_cluster_run(&co, train_rank, &ta));
    for (int k = 0; k < STEPS; k++)
        if (memcmp(&ta.loss[0][k], &ta.loss[1][k], sizeof(double)))
            fail_msg("step %d: padded loss %.17g, unpadded %.17g", k + 1, ta.loss[1][k], ta.loss[0][k]);
    /* wte first (tensor 0): its V real rows, then the padding; every other tensor after it, bit for bit */
    assert_memory_equal(ta.params[0], ta.params[1], (size_t)V * C * sizeof(float));
    for (size_t i = (size_t)V * C; i < (size_t)VP * C; i++)
        if (ta.params[1][i] != 0.0f) fail_msg("padding element %zu of wte is %g, not 0", i, (double)ta.params[1][i]);
    assert_memory_equal(ta.params[0] + (size_t)V * C, ta.params[1] + (size_t)VP * C,
                        (PU - (size_t)V * C) * sizeof(float));
    assert_true(ta.params[0][0] != ta.params[1][(size_t)VP * C]); /* the tensors moved: not a vacuous compare */
    free(ta.params[0]), free(ta.params[1]);
}

typedef struct {
    char dir[256];
    float *hu, *hp, *sampled_logits; /* the unpadded model's and the padded one's full parameters (after the load) */
    fsc_status odd;                  /* the load of a file of V + 1 rows */
    char odd_msg[512];
    int gen_vocab;                   /* the generator's vocabulary */
    int32_t gen[2][64];              /* generated: greedy, sampled */
} io_arg;

static fsc_status engine_of(fsc_rank *r, const fsc_gpt_config *g, fsc_engine **e) {
    fsc_parallel_opts po = fsc_parallel_opts_default();
    fsc_optim_config oc = fsc_optim_config_default();
    oc.kind = FSC_OPT_SGD; /* the weights only */
    return fsc_engine_create(r, g, &po, &oc, 3, e);
}

/* Tensors of the padded GPT written with wte's padding rows loud: padding row k is +50 (k < 5) or -50 (k >= 5)
 * times real row k % 5, so for any hidden state one of each pair has a logit 50 times a real one's magnitude: they
 * would win every softmax they were in. */
static fsc_status write_loud_padding(fsc_engine *e, const char *path, float *host) {
    fsc_gpt_config p = cfg(1);
    FSC_TRY(fsc_engine_full_params(e, host));
    for (int k = 0; k < VP - V; k++)
        for (int c = 0; c < C; c++)
            host[(size_t)(V + k) * C + (size_t)c] = (k < 5 ? 50.0f : -50.0f) * host[(size_t)(k % 5) * C + (size_t)c];
    fsc_st_writer *w = NULL;
    FSC_TRY(fsc_st_writer_open(path, &w));
    fsc_status s = FSC_OK;
    const int n = fsc_gpt_num_tensors(&p);
    for (int i = 0; i < n && s == FSC_OK; i++) {
        fsc_param_info pi;
        s = fsc_gpt_param_info(&p, i, &pi);
        if (s == FSC_OK) s = fsc_st_writer_add(w, pi.name, FSC_F32, pi.ndim, pi.shape); /* all Vp rows */
    }
    if (s == FSC_OK) s = fsc_st_writer_begin_data(w);
    size_t off = 0;
    for (int i = 0; i < n && s == FSC_OK; i++) {
        fsc_param_info pi;
        s = fsc_gpt_param_info(&p, i, &pi);
        if (s == FSC_OK) s = fsc_st_writer_write_f32(w, i, host + off, 0, pi.numel);
        off += pi.numel;
    }
    if (s == FSC_OK) return fsc_st_writer_commit(w);
    fsc_st_writer_abort(w);
    return s;
}

static fsc_status io_rank(fsc_rank *r, void *arg) {
    io_arg *ia = arg;
    char pu[300], pp[300], po[300], pl[300];
    snprintf(pu, sizeof pu, "%s/u.safetensors", ia->dir);
    snprintf(pp, sizeof pp, "%s/p.safetensors", ia->dir);
    snprintf(po, sizeof po, "%s/odd.safetensors", ia->dir);
    snprintf(pl, sizeof pl, "%s/loud.safetensors", ia->dir);
    fsc_gpt_config u = cfg(0), p = cfg(1), odd = cfg(0);
    odd.vocab = V + 1;
    fsc_engine *eu = NULL, *ep = NULL, *eo = NULL;
    fsc_generator *g = NULL;
    fsc_status s = engine_of(r, &u, &eu);
    if (s == FSC_OK) s = engine_of(r, &p, &ep);
    if (s == FSC_OK) s = engine_of(r, &odd, &eo);
    if (s == FSC_OK) s = fsc_engine_save_weights(eu, pu); /* Hugging Face's: wte [V, C] */
    if (s == FSC_OK) s = fsc_engine_load_weights(ep, pu);
    if (s == FSC_OK) s = fsc_engine_full_params(eu, ia->hu);
    if (s == FSC_OK) s = fsc_engine_full_params(ep, ia->hp);
    if (s == FSC_OK) s = fsc_engine_save_weights(ep, pp); /* V rows again */
    if (s == FSC_OK) s = fsc_engine_save_weights(eo, po);
    if (s == FSC_OK) {
        ia->odd = fsc_engine_load_weights(ep, po);
        snprintf(ia->odd_msg, sizeof ia->odd_msg, "%s", fsc_last_error());
    }
    if (s == FSC_OK) s = write_loud_padding(ep, pl, ia->sampled_logits);
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
    fsc_engine_free(eu), fsc_engine_free(ep), fsc_engine_free(eo);
    return s;
}

static void entry_rows(const char *path, const char *name, int64_t *rows, int64_t *cols, float *wte) {
    fsc_st_file *f = NULL;
    assert_ok(fsc_st_open(path, &f));
    const fsc_st_entry *en = fsc_st_find(f, name);
    assert_non_null(en);
    *rows = en->shape[0], *cols = en->shape[1];
    assert_ok(fsc_st_read_f32(f, en, wte, 0, (size_t)V * C));
    fsc_st_close(f);
}

static void test_hf_rows_and_sampler(void **state) {
    (void)state;
    fsc_gpt_config u = cfg(0), p = cfg(1);
    const size_t PU = fsc_gpt_num_params(&u), PP = fsc_gpt_num_params(&p);
    io_arg ia = { .hu = malloc(PU * 4), .hp = malloc(PP * 4), .sampled_logits = malloc(PP * 4) };
    snprintf(ia.dir, sizeof ia.dir, "/tmp/fsc_test_vocab_pad_%d", (int)getpid());
    assert_int_equal(mkdir(ia.dir, 0777), 0);
    fsc_cluster_opts co = fsc_cluster_opts_default();
    co.world = 1;
    assert_ok(fsc_cluster_run(&co, io_rank, &ia));
    /* V rows loaded into Vp: the same rows, zero padding, the other tensors the same */
    assert_memory_equal(ia.hu, ia.hp, (size_t)V * C * sizeof(float));
    for (size_t i = (size_t)V * C; i < (size_t)VP * C; i++) assert_true(ia.hp[i] == 0.0f);
    assert_memory_equal(ia.hu + (size_t)V * C, ia.hp + (size_t)VP * C, (PU - (size_t)V * C) * sizeof(float));
    /* saved with V rows, the unpadded file's values */
    char pu[300], pp[300];
    snprintf(pu, sizeof pu, "%s/u.safetensors", ia.dir);
    snprintf(pp, sizeof pp, "%s/p.safetensors", ia.dir);
    int64_t rows, cols;
    static float a[V * C], b[V * C];
    entry_rows(pu, "wte.weight", &rows, &cols, a);
    entry_rows(pp, "wte.weight", &rows, &cols, b);
    assert_int_equal(rows, V);
    assert_int_equal(cols, C);
    assert_memory_equal(a, b, sizeof a);
    /* neither V nor Vp rows: refused, naming both */
    assert_int_equal(ia.odd, FSC_ERR_FORMAT);
    if (!strstr(ia.odd_msg, "wte.weight has shape [31, 16] but the model expects [40, 16] (or its unpadded rows)"))
        fail_msg("message: %s", ia.odd_msg);
    /* padding rows at 50 would win every softmax: no generated token is one of them */
    assert_int_equal(ia.gen_vocab, V);
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 64; i++)
            if (ia.gen[k][i] < 0 || ia.gen[k][i] >= V)
                fail_msg("%s token %d is %d, a padding id (vocabulary %d)", k ? "sampled" : "greedy", i,
                         (int)ia.gen[k][i], V);
    test_rmtree(ia.dir);
    free(ia.hu), free(ia.hp), free(ia.sampled_logits);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_trains_as_unpadded),
        cmocka_unit_test(test_hf_rows_and_sampler),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
