/* Ranks that create their engines with different settings (lib/parallel/engine_settings.c) on simulated ranks:
 * each rank's function varies one option by its rank id, as processes started with different options would.
 * Oracle: equal settings create the engine and step; any difference (the learning rate, the seed, the
 * optimizer, a parallel option, the model, with and without tensor parallelism, through fsc_engine_create and
 * fsc_engine_create_model) fails creation on every rank with FSC_ERR_INVALID and one message naming the
 * setting and both values, within the cluster's timeout (no rank waits alone). */
#include "testutil.h"

#define MAXW 4

typedef enum { NONE, LR, SEED, OPTIMIZER, CLIP, KIND, WIDTH, TP_LR, MODEL_API } change;

typedef struct {
    change what;
    int world;
    fsc_status st[MAXW];
    char msg[MAXW][600];
} job;

static fsc_status create_fn(fsc_rank *r, void *arg) {
    job *j = arg;
    const int odd = r->rank == j->world - 1; /* the last rank differs */
    fsc_gpt_config c = fsc_gpt_config_default();
    c.layers = 2, c.dim = j->what == WIDTH && odd ? 32 : 16, c.heads = 2, c.seq = 8, c.vocab = 32;
    fsc_parallel_opts po = fsc_parallel_opts_default();
    po.kind = j->what == KIND && odd ? FSC_PAR_ZERO2 : FSC_PAR_FSDP;
    po.clip = j->what == CLIP && odd ? 0.0f : 1.0f;
    if (j->what == TP_LR) po.tp = 2;
    fsc_optim_config oc = fsc_optim_config_default();
    oc.lr = (j->what == LR || j->what == TP_LR) && odd ? 1e-4f : 1e-3f;
    if (j->what == OPTIMIZER && odd) oc.kind = FSC_OPT_SGD;
    const uint64_t seed = j->what == SEED && odd ? 4 : 3;
    fsc_engine *e = NULL;
    fsc_model *m = NULL;
    fsc_status s;
    if (j->what == MODEL_API) { /* a model the caller built: the last rank's is wider */
        c.dim = odd ? 32 : 16;
        s = fsc_gpt_model_create(r->dev, &c, &m);
        if (s == FSC_OK) s = fsc_engine_create_model(r, m, &po, &oc, seed, &e);
    } else {
        s = fsc_engine_create(r, &c, &po, &oc, seed, &e);
    }
    int32_t tok[4 * 8], tgt[4 * 8];
    for (int i = 0; i < 4 * 8; i++) tok[i] = (i * 3 + r->rank) % 32, tgt[i] = (i * 7 + 1) % 32;
    fsc_step_info info;
    const int dp = j->what == TP_LR ? j->world / 2 : j->world;
    if (s == FSC_OK) s = fsc_engine_step(e, tok, tgt, 4 / dp, 4, &info);
    j->st[r->rank] = s;
    snprintf(j->msg[r->rank], sizeof j->msg[r->rank], "%s", s == FSC_OK ? "" : fsc_last_error());
    fsc_engine_free(e);
    fsc_model_free(m);
    return s;
}

/* Every rank ends with want; when it fails, every rank's message contains needle and equals rank 0's. */
static void expect(change what, int world, fsc_status want, const char *needle) {
    job j;
    memset(&j, 0, sizeof j);
    j.what = what, j.world = world;
    for (int r = 0; r < world; r++) j.st[r] = (fsc_status)-1;
    fsc_cluster_opts co = fsc_cluster_opts_default();
    co.world = world;
    co.timeout_s = 20;
    fsc_status s = fsc_cluster_run(&co, create_fn, &j);
    if (s != want) fail_msg("change %d on %d ranks: %s, expected %s: %s", what, world, fsc_status_str(s),
                            fsc_status_str(want), fsc_last_error());
    for (int r = 0; r < world; r++) {
        if (j.st[r] != want) fail_msg("change %d: rank %d returned %d, expected %s: %s", what, r, (int)j.st[r],
                                      fsc_status_str(want), j.msg[r]);
        if (want == FSC_OK) continue;
        if (!strstr(j.msg[r], needle)) fail_msg("change %d: rank %d: \"%s\" lacks \"%s\"", what, r, j.msg[r], needle);
        if (strcmp(j.msg[r], j.msg[0]) != 0) fail_msg("change %d: rank %d: \"%s\", rank 0: \"%s\"", what, r, j.msg[r],
                                                      j.msg[0]);
    }
}

static void test_equal_settings_train(void **state) {
    (void)state;
    expect(NONE, 2, FSC_OK, NULL);
    expect(MODEL_API, 1, FSC_OK, NULL);
}

static void test_different_settings_refused_on_every_rank(void **state) {
    (void)state;
    expect(LR, 2, FSC_ERR_INVALID, "ranks disagree on optimizer.lr: rank 0 has 0.001, rank 1 has 0.0001");
    expect(SEED, 3, FSC_ERR_INVALID, "ranks disagree on seed: rank 0 has 3, rank 2 has 4");
    expect(OPTIMIZER, 2, FSC_ERR_INVALID, "ranks disagree on optimizer.kind: rank 0 has adamw, rank 1 has sgd");
    expect(CLIP, 2, FSC_ERR_INVALID, "ranks disagree on parallel.clip: rank 0 has 1, rank 1 has 0");
    expect(KIND, 2, FSC_ERR_INVALID, "ranks disagree on parallel.kind: rank 0 has fsdp, rank 1 has zero2");
    expect(WIDTH, 2, FSC_ERR_INVALID, "ranks disagree on model.config: rank 0 has {");
    /* tensor parallelism: the options are compared before they split the world into groups */
    expect(TP_LR, 4, FSC_ERR_INVALID, "ranks disagree on optimizer.lr: rank 0 has 0.001, rank 3 has 0.0001");
    expect(MODEL_API, 2, FSC_ERR_INVALID, "ranks disagree on model.config");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_equal_settings_train),
        cmocka_unit_test(test_different_settings_refused_on_every_rank),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
