/* fsc_model_from_config (lib/model/model_config.c): the built-in models from their configuration text, the text a
 * weights file records. Oracles: a GPT-2 record (no family, or "gpt2") and a Llama record build the model their
 * fields describe (the same parameter count as the model made from the same configuration directly); bad text
 * (not JSON, not an object, a family that is not a string or not built in, a missing field, a number out of range,
 * not an integer, of the wrong type, too large for a float) is refused with FSC_ERR_FORMAT, a message naming what
 * is wrong, and no model. A family a program registers (family.h) is built from its text as the built-in ones are:
 * its from_config gets the text and its model is the one returned; names that are taken or malformed are refused.
 * fsc_engine_create_config (family.h) makes the engine of a text's family: for the GPT and the Llama, on 2 ranks
 * with tensor parallelism and without, the parameters after a step are bit for bit those of the engine made from
 * the configuration struct (fsc_engine_create; fsc_engine_create_built with fsc_llama_build); a registered family
 * without a tensor-parallel builder trains at tp 1 and is refused at tp 2, naming the family.
 * A registered family whose model is made of layers (fsc_seq_model_create, as docs/models.md's "mini") records its
 * text, so the model a weights file of its engine records is built again by fsc_model_from_config (the sampler's
 * way) and loads the file: the file recorded the layers' description, which no family reads ("names no built-in
 * model"). A layer's or a model's text that is not one JSON object is refused when the engine is made, naming the
 * layer.
 * fsc_model_check_held and fsc_model_config_check_held: a model's own tensors pass, exactly; one missing, of another
 * shape or (exactly) one more is refused naming it; a padded vocabulary's real rows pass as a file holds them; a text
 * its family refuses and one that cannot be told here are told apart by status.
 */
#include <cjson/cJSON.h>
#include "testutil.h"
#include "fsc/family.h"
#include "fsc/generate.h"
#include "fsc/gpt.h"
#include "fsc/llama.h"
#include "fsc/gpt_engine.h"
#include "fsc/layers.h"
#include "fsc/safetensors.h"

static void test_builds_the_recorded_model(void **state) {
    (void)state;
    fsc_device *dev = NULL;
    assert_ok(fsc_device_create("cpu", NULL, &dev));
    fsc_gpt_config g = { .layers = 2, .dim = 8, .heads = 2, .seq = 4, .vocab = 10 };
    fsc_model *m = NULL;
    assert_ok(fsc_model_from_config(dev, "{\"layers\":2,\"dim\":8,\"heads\":2,\"seq\":4,\"vocab\":10}", &m));
    assert_int_equal(fsc_model_num_params(m), fsc_gpt_num_params(&g));
    fsc_model_free(m);
    m = NULL;
    assert_ok(fsc_model_from_config(dev, "{\"family\":\"gpt2\",\"layers\":2,\"dim\":8,\"heads\":2,\"seq\":4,"
                                         "\"vocab\":10}", &m));
    assert_int_equal(fsc_model_num_params(m), fsc_gpt_num_params(&g));
    fsc_model_free(m);

    fsc_llama_config lc = fsc_llama_config_default();
    lc.layers = 2, lc.dim = 8, lc.heads = 2, lc.kv_heads = 1, lc.ffn = 12, lc.seq = 4, lc.vocab = 10;
    fsc_model *ref = NULL;
    m = NULL;
    assert_ok(fsc_llama_model_create(dev, &lc, &ref));
    assert_ok(fsc_model_from_config(dev, "{\"family\":\"llama\",\"layers\":2,\"dim\":8,\"heads\":2,\"kv_heads\":1,"
                                         "\"ffn\":12,\"seq\":4,\"vocab\":10}", &m));
    assert_int_equal(fsc_model_num_params(m), fsc_model_num_params(ref));
    fsc_model_free(m);
    fsc_model_free(ref);
    fsc_device_free(dev);
}

static void refused(fsc_device *dev, const char *text, const char *needle) {
    static fsc_model other;
    fsc_model *m = &other; /* not NULL: a refusal must clear it */
    assert_err(fsc_model_from_config(dev, text, &m), FSC_ERR_FORMAT, needle);
    assert_null(m);
}

static void test_bad_text_is_refused(void **state) {
    (void)state;
    fsc_device *dev = NULL;
    assert_ok(fsc_device_create("cpu", NULL, &dev));
    refused(dev, "", "not a JSON object");
    refused(dev, "{\"layers\":2,\"dim\":8", "not a JSON object");         /* truncated */
    refused(dev, "[1,2]", "not a JSON object");
    refused(dev, "{\"layers\":1,\"dim\":8,\"heads\":2,\"seq\":4,\"vocab\":16,\"layers\":5}", "\"layers\" appears twice");
    refused(dev, "{\"family\":3,\"layers\":2}", "family is not a string");
    refused(dev, "{\"family\":\"bert\",\"layers\":2}", "unknown family 'bert'");
    refused(dev, "{\"dim\":8}", "names no built-in model");
    refused(dev, "{\"layers\":2,\"heads\":2,\"seq\":4,\"vocab\":10}", "dim is missing");
    refused(dev, "{\"layers\":0,\"dim\":8,\"heads\":2,\"seq\":4,\"vocab\":10}", "layers = 0");
    refused(dev, "{\"layers\":1.5,\"dim\":8,\"heads\":2,\"seq\":4,\"vocab\":10}", "layers = 1.5");
    refused(dev, "{\"layers\":3e9,\"dim\":8,\"heads\":2,\"seq\":4,\"vocab\":10}", "not an integer in");
    refused(dev, "{\"layers\":\"2\",\"dim\":8,\"heads\":2,\"seq\":4,\"vocab\":10}", "layers is missing or not");
    refused(dev, "{\"layers\":2,\"dim\":8,\"heads\":2,\"seq\":4,\"vocab\":10,\"moe_capacity\":1e39}",
            "moe_capacity is missing or not a finite number");
    refused(dev, "{\"family\":\"llama\",\"layers\":2,\"dim\":8,\"heads\":2,\"seq\":4,\"vocab\":10,\"rope_theta\":"
                 "\"x\"}", "rope_theta");
    refused(dev, "{\"family\":\"llama\",\"layers\":2,\"dim\":8,\"heads\":2,\"kv_heads\":-1,\"seq\":4,\"vocab\":10}",
            "kv_heads = -1");
    /* a key neither family reads is refused, not passed over: "rope-theta" (the trainer's spelling) would leave
     * the Llama at theta 10000, another model than the file's */
    refused(dev, "{\"family\":\"llama\",\"layers\":2,\"dim\":8,\"heads\":2,\"seq\":4,\"vocab\":10,\"rope-theta\":"
                 "500}", "unknown field \"rope-theta\" (did you mean \"rope_theta\"?)");
    refused(dev, "{\"layers\":2,\"dim\":8,\"heads\":2,\"seq\":4,\"vocab\":10,\"n_embd\":8}",
            "unknown field \"n_embd\" (the fields: family, layers");
    fsc_model *m = NULL;
    assert_err(fsc_model_from_config(dev, NULL, &m), FSC_ERR_INVALID, "NULL");
    assert_err(fsc_model_from_config(dev, "{}", NULL), FSC_ERR_INVALID, "out is NULL");
    fsc_device_free(dev);
}

/* A program's family "tiny": a one-block GPT of width 8 whatever its text says but its "vocab"; counts its calls
 * and refuses a text with "bad"; with "none" it returns FSC_OK without a model (a family's bug). */
static int tiny_calls;
static fsc_status tiny_from_config(fsc_device *dev, const char *config, fsc_model **out) {
    tiny_calls++;
    if (strstr(config, "bad")) return fsc_error(FSC_ERR_FORMAT, "tiny: bad field");
    if (strstr(config, "none")) return FSC_OK; /* a family's bug: success without a model */
    fsc_gpt_config g = { .layers = 1, .dim = 8, .heads = 2, .seq = 4, .vocab = strstr(config, "12") ? 12 : 10 };
    return fsc_gpt_model_create(dev, &g, out);
}

/* Whether held tensors are those a model declares (fsc_model_check_held; the sampler's check of a file, ckpt_tool
 * verify's of a checkpoint, the trainer's of --load's record). Oracles: a model's own declarations pass, exactly; one
 * missing, of another shape, or (exactly) one more is FSC_ERR_FORMAT naming it; a padded vocabulary's tensor held with
 * its real rows passes only as a file holds it. From a configuration text (fsc_model_config_check_held): its model's
 * tensors pass; a text of more layers names the tensor and its family's model; a text its family refuses is
 * FSC_ERR_INVALID; not JSON, or a family this program does not know, is FSC_ERR_UNSUPPORTED (not checked). */
static void test_check_held(void **state) {
    (void)state;
    fsc_device *dev = NULL;
    fsc_model *m = NULL;
    assert_ok(fsc_device_create("count", NULL, &dev));
    const char *gpt = "{\"layers\":2,\"dim\":8,\"heads\":2,\"seq\":4,\"vocab\":10,\"padded_vocab\":16}";
    assert_ok(fsc_model_from_config(dev, gpt, &m));
    const int n = m->n_tensors;
    fsc_param_info *held = calloc((size_t)n + 1, sizeof *held);
    assert_non_null(held);
    memcpy(held, m->info, (size_t)n * sizeof *held);
    assert_ok(fsc_model_check_held(m, held, n, FSC_HELD_EXACT, NULL));
    assert_err(fsc_model_check_held(m, held + 1, n - 1, 0, NULL), FSC_ERR_FORMAT,
               "holds no tensor wte.weight, which the model declares");
    snprintf(held[n].name, sizeof held[n].name, "h.2.ln_1.weight"); /* one more: a block the model lacks */
    held[n].ndim = 1, held[n].shape[0] = 8;
    assert_ok(fsc_model_check_held(m, held, n + 1, 0, NULL));
    assert_err(fsc_model_check_held(m, held, n + 1, FSC_HELD_EXACT, "its gpt2 model"), FSC_ERR_FORMAT,
               "holds tensor h.2.ln_1.weight, which its gpt2 model does not declare");
    const int wte = fsc_model_tensor_index(m, "wte.weight");
    assert_true(wte >= 0 && m->info[wte].file_rows == 10);
    held[wte].shape[0] = 10; /* the real rows, as a weights file holds them */
    assert_ok(fsc_model_check_held(m, held, n, FSC_HELD_EXACT | FSC_HELD_FILE_ROWS, NULL));
    assert_err(fsc_model_check_held(m, held, n, FSC_HELD_EXACT, NULL), FSC_ERR_FORMAT,
               "wte.weight has shape [10, 8] but the model expects [16, 8]");
    held[wte].shape[0] = 12;
    assert_err(fsc_model_check_held(m, held, n, FSC_HELD_FILE_ROWS, NULL), FSC_ERR_FORMAT,
               "but the model expects [16, 8] (or its unpadded rows)");
    held[wte].shape[0] = 16;
    /* from a configuration text */
    assert_ok(fsc_model_config_check_held(gpt, held, n, FSC_HELD_EXACT));
    assert_err(fsc_model_config_check_held("{\"layers\":3,\"dim\":8,\"heads\":2,\"seq\":4,\"vocab\":10,"
                                           "\"padded_vocab\":16}", held, n, FSC_HELD_EXACT), FSC_ERR_FORMAT,
               "holds no tensor h.2.ln_1.weight, which its gpt2 model declares");
    assert_err(fsc_model_config_check_held("{\"layers\":2,\"dim\":8,\"heads\":3,\"seq\":4,\"vocab\":10}", held, n,
                                           0), FSC_ERR_INVALID, "heads");
    assert_err(fsc_model_config_check_held("{\"layers\":2,", held, n, 0), FSC_ERR_UNSUPPORTED, "not checked");
    assert_err(fsc_model_config_check_held("{\"family\":\"nobody\"}", held, n, 0), FSC_ERR_UNSUPPORTED, "nobody");
    free(held);
    fsc_model_free(m);
    fsc_device_free(dev);
}

static void test_registered_family(void **state) {
    (void)state;
    fsc_device *dev = NULL;
    assert_ok(fsc_device_create("cpu", NULL, &dev));
    fsc_model *m = NULL;
    assert_err(fsc_model_from_config(dev, "{\"family\":\"tiny\"}", &m), FSC_ERR_FORMAT, "unknown family 'tiny'");
    assert_null(fsc_model_family_find("tiny"));
    assert_ok(fsc_model_family_register(&(fsc_model_family){ "tiny", tiny_from_config, NULL }));
    const fsc_model_family *f = fsc_model_family_find("tiny");
    assert_non_null(f);
    assert_string_equal(f->name, "tiny");
    assert_ok(fsc_model_from_config(dev, "{\"family\":\"tiny\",\"vocab\":12}", &m));
    assert_int_equal(tiny_calls, 1);
    fsc_gpt_config g = { .layers = 1, .dim = 8, .heads = 2, .seq = 4, .vocab = 12 };
    assert_int_equal(fsc_model_num_params(m), fsc_gpt_num_params(&g)); /* the family's model, from its text */
    fsc_model_free(m);
    m = NULL;
    assert_err(fsc_model_from_config(dev, "{\"family\":\"tiny\",\"bad\":1}", &m), FSC_ERR_FORMAT, "tiny: bad field");
    assert_null(m);
    /* a family that says FSC_OK without a model is refused, not handed on as a model */
    assert_err(fsc_model_from_config(dev, "{\"family\":\"tiny\",\"none\":1}", &m), FSC_ERR_INVALID,
               "from_config returned FSC_OK without a model");
    assert_null(m);
    /* the built-in families are found and stay theirs; taken and malformed names are refused */
    assert_non_null(fsc_model_family_find("gpt2"));
    assert_non_null(fsc_model_family_find("llama"));
    assert_null(fsc_model_family_find("bert"));
    assert_err(fsc_model_family_register(&(fsc_model_family){ "tiny", tiny_from_config, NULL }), FSC_ERR_INVALID,
               "already registered");
    assert_err(fsc_model_family_register(&(fsc_model_family){ "llama", tiny_from_config, NULL }), FSC_ERR_INVALID,
               "already registered");
    assert_err(fsc_model_family_register(&(fsc_model_family){ "a b", tiny_from_config, NULL }), FSC_ERR_INVALID, "'a b'");
    assert_err(fsc_model_family_register(&(fsc_model_family){ "", tiny_from_config, NULL }), FSC_ERR_INVALID, "a name is");
    assert_err(fsc_model_family_register(&(fsc_model_family){ "nobuild", NULL, NULL }), FSC_ERR_INVALID, "from_config");
    assert_null(fsc_model_family_find("nobuild"));
    /* at most 32: the 33rd is refused (one is "tiny", one test_registered_family_of_layers' "layered") */
    static char names[40][16];
    fsc_status s = FSC_OK;
    int i = 0;
    for (; i < 40 && s == FSC_OK; i++) {
        snprintf(names[i], sizeof names[i], "f%d", i);
        s = fsc_model_family_register(&(fsc_model_family){ names[i], tiny_from_config, NULL });
    }
    assert_int_equal(s, FSC_ERR_UNSUPPORTED);
    assert_int_equal(i, 31);
    /* the registry keeps its own copy of a name: the caller's string may change or go */
    snprintf(names[0], sizeof names[0], "gone");
    f = fsc_model_family_find("f0");
    assert_non_null(f);
    assert_string_equal(f->name, "f0");
    assert_null(fsc_model_family_find("gone"));
    fsc_device_free(dev);
}

/* One step of the engine of the text and of the engine made directly, on every rank of a world of 2. */
typedef struct {
    const char *text;
    int llama, tp;
    fsc_gpt_config g;
    fsc_llama_config l;
    float *a, *b; /* full parameters after the step: from the text, directly */
    size_t n;
    fsc_status refused; /* the text's engine's status when it is expected to fail (FSC_OK otherwise) */
    char msg[256];      /* and its message */
} cfg_job;

static fsc_status one_step(fsc_engine *e, int dp, float *out) {
    int32_t tok[8], tgt[8];
    for (int i = 0; i < 8; i++) tok[i] = (i * 7 + 3) % 10, tgt[i] = (i * 5 + 1) % 10;
    fsc_step_info info;
    FSC_TRY(fsc_engine_step_model(e, tok, tgt, 2, 2 * dp, &info));
    return fsc_engine_full_params(e, out);
}

static fsc_status cfg_rank(fsc_rank *r, void *arg) {
    cfg_job *j = arg;
    fsc_parallel_opts po = fsc_parallel_opts_default();
    po.kind = FSC_PAR_DDP;
    po.tp = j->tp;
    fsc_optim_config oc = fsc_optim_config_default();
    fsc_engine *e = NULL;
    fsc_status s = fsc_engine_create_config(r, j->text, &po, &oc, 7, &e);
    if (j->refused != FSC_OK) {
        if (r->rank == 0) j->refused = s == FSC_OK ? FSC_ERR_INTERNAL : s;
        if (r->rank == 0) snprintf(j->msg, sizeof j->msg, "%s", fsc_last_error());
        fsc_engine_free(e);
        return FSC_OK;
    }
    FSC_TRY(s);
    if (r->rank == 0) j->n = fsc_model_num_full_params(fsc_engine_model(e));
    s = one_step(e, 2 / j->tp, r->rank == 0 ? j->a : NULL);
    fsc_engine_free(e);
    FSC_TRY(s);
    if (j->llama) {
        fsc_llama_build_arg ba = { .cfg = j->l };
        FSC_TRY(fsc_engine_create_built(r, fsc_llama_build, &ba, &po, &oc, 7, &e));
    } else {
        FSC_TRY(fsc_engine_create(r, &j->g, &po, &oc, 7, &e));
    }
    s = one_step(e, 2 / j->tp, r->rank == 0 ? j->b : NULL);
    fsc_engine_free(e);
    return s;
}

static void run_cfg(cfg_job *j) {
    j->a = calloc(1 << 16, sizeof(float)), j->b = calloc(1 << 16, sizeof(float));
    fsc_cluster_opts co = fsc_cluster_opts_default();
    co.world = 2;
    assert_ok(fsc_cluster_run(&co, cfg_rank, j));
    if (j->refused == FSC_OK) {
        assert_true(j->n > 0 && j->n < (1 << 16));
        assert_memory_equal(j->a, j->b, j->n * sizeof(float));
    }
    free(j->a), free(j->b);
}

static void test_engine_from_config(void **state) {
    (void)state;
    for (int tp = 1; tp <= 2; tp++) {
        cfg_job g = { .text = "{\"layers\":2,\"dim\":8,\"heads\":2,\"seq\":4,\"vocab\":10}", .tp = tp,
                      .g = { .layers = 2, .dim = 8, .heads = 2, .seq = 4, .vocab = 10 } };
        run_cfg(&g);
        cfg_job l = { .text = "{\"family\":\"llama\",\"layers\":2,\"dim\":8,\"heads\":2,\"kv_heads\":2,"
                              "\"ffn\":16,\"seq\":4,\"vocab\":10}", .llama = 1, .tp = tp };
        l.l = fsc_llama_config_default();
        l.l.layers = 2, l.l.dim = 8, l.l.heads = 2, l.l.kv_heads = 2, l.l.ffn = 16, l.l.seq = 4, l.l.vocab = 10;
        run_cfg(&l);
    }
    /* "tiny" (test_registered_family) has no build: tp 2 is refused, naming it */
    cfg_job t = { .text = "{\"family\":\"tiny\"}", .tp = 2, .refused = FSC_ERR_INTERNAL };
    run_cfg(&t);
    assert_int_equal(t.refused, FSC_ERR_UNSUPPORTED);
    assert_non_null(strstr(t.msg, "'tiny' has no tensor-parallel form"));
    /* the builder on a tensor group refuses an unknown key as from_config does */
    cfg_job u = { .text = "{\"family\":\"llama\",\"layers\":2,\"dim\":8,\"heads\":2,\"seq\":4,\"vocab\":10,"
                          "\"norm-eps\":1e-6}", .tp = 2, .refused = FSC_ERR_INTERNAL };
    run_cfg(&u);
    assert_int_not_equal(u.refused, FSC_OK);
    assert_non_null(strstr(u.msg, "unknown field \"norm-eps\" (did you mean \"norm_eps\"?)"));
}

/* "layered": embedding | GPT-2 block | LM head, made of the built-in layers (docs/models.md's "mini", abridged) */
static fsc_status layered_from_config(fsc_device *dev, const char *config, fsc_model **out) {
    *out = NULL;
    fsc_seq_layer ls[3] = { { 0 } };
    fsc_block_opts b = fsc_block_opts_default(FSC_BLOCK_GPT2, 4, 8, 2);
    fsc_status s = fsc_layer_embedding(4, 8, strstr(config, "\"vocab\":12") ? 12 : 10, &ls[0].layer);
    if (s == FSC_OK) s = fsc_layer_block(&b, &ls[1].layer);
    if (s == FSC_OK) s = fsc_layer_lm_head(4, 8, strstr(config, "\"vocab\":12") ? 12 : 10, &ls[2].layer);
    ls[1].prefix = "h.0.", ls[2].prefix = "lm_head.";
    if (s == FSC_OK) return fsc_seq_model_create(dev, ls, 3, out);
    for (int i = 0; i < 3; i++) fsc_layer_free(ls[i].layer);
    return s;
}

static const char *layered_text = "{\"family\":\"layered\",\"vocab\":12}";

static fsc_status layered_save_rank(fsc_rank *r, void *arg) {
    fsc_parallel_opts po = fsc_parallel_opts_default();
    fsc_optim_config oc = fsc_optim_config_default();
    fsc_engine *e = NULL;
    FSC_TRY(fsc_engine_create_config(r, layered_text, &po, &oc, 7, &e));
    float *p = arg;
    fsc_status s = one_step(e, 1, p);
    if (s == FSC_OK) s = fsc_engine_save_weights(e, (const char *)(p + 4096));
    fsc_engine_free(e);
    return s;
}

static fsc_status layered_load_rank(fsc_rank *r, void *arg) {
    const float *p = arg;
    const char *path = (const char *)(p + 4096);
    fsc_st_file *f = NULL;
    FSC_TRY(fsc_st_open(path, &f));
    const char *rec = fsc_st_metadata(f, FSC_ST_META_MODEL);
    assert_non_null(rec);
    assert_string_equal(rec, layered_text);
    fsc_model *m = NULL;
    fsc_status s = fsc_model_from_config(r->dev, rec, &m);
    fsc_st_close(f);
    FSC_TRY(s);
    fsc_parallel_opts po = fsc_parallel_opts_default();
    fsc_optim_config oc = fsc_optim_config_default();
    fsc_engine *e = NULL;
    s = fsc_engine_create_model(r, m, &po, &oc, 1, &e);
    if (s == FSC_OK) s = fsc_engine_load_weights(e, path);
    float *q = calloc(4096, sizeof *q);
    if (s == FSC_OK) s = fsc_engine_full_params(e, q);
    if (s == FSC_OK) assert_memory_equal(q, p, fsc_model_num_params(m) * sizeof *q);
    free(q);
    fsc_engine_free(e);
    fsc_model_free(m);
    return s;
}

/* A checkpoint of the family's model that recorded its layers' description (as before the model recorded the
 * family's text; a model made with fsc_seq_model_create records it still) loads into the family's engine, with the
 * same parameters; one of other layers is refused, naming both texts. */
static fsc_status layered_old_ckpt_rank(fsc_rank *r, void *arg) {
    const char *dir = arg;
    char ck[300], saved[300];
    snprintf(saved, sizeof saved, "%s/ck", dir);
    snprintf(ck, sizeof ck, "%s/ck/step-00000001", dir);
    fsc_parallel_opts po = fsc_parallel_opts_default();
    fsc_optim_config oc = fsc_optim_config_default();
    fsc_model *m = NULL;
    fsc_engine *e = NULL;
    float *a = calloc(4096, sizeof *a), *b = calloc(4096, sizeof *b);
    fsc_status s = a && b ? layered_from_config(r->dev, layered_text, &m) : FSC_ERR_NOMEM;
    if (s == FSC_OK) s = fsc_engine_create_model(r, m, &po, &oc, 7, &e);
    if (s == FSC_OK) s = one_step(e, 1, a);
    if (s == FSC_OK) s = fsc_ckpt_save(e, saved, 1, NULL);
    fsc_engine_free(e);
    fsc_model_free(m);
    e = NULL;
    if (s == FSC_OK) s = fsc_engine_create_config(r, layered_text, &po, &oc, 8, &e);
    if (s == FSC_OK) s = fsc_ckpt_load(e, ck, NULL);
    if (s == FSC_OK) s = fsc_engine_full_params(e, b);
    if (s == FSC_OK) assert_memory_equal(a, b, fsc_model_num_params(fsc_engine_model(e)) * sizeof *a);
    fsc_engine_free(e);
    e = NULL;
    if (s == FSC_OK) s = fsc_engine_create_config(r, "{\"family\":\"layered\",\"vocab\":10}", &po, &oc, 8, &e);
    if (s == FSC_OK) {
        assert_int_equal(fsc_ckpt_load(e, ck, NULL), FSC_ERR_INVALID);
        assert_non_null(strstr(fsc_last_error(), "written for a model of configuration {\"sequential\":["));
        assert_non_null(strstr(fsc_last_error(), "this engine's model has {\"family\":\"layered\",\"vocab\":10}"));
    }
    fsc_engine_free(e);
    free(a), free(b);
    return s;
}

static void test_registered_family_of_layers(void **state) {
    (void)state;
    assert_ok(fsc_model_family_register(&(fsc_model_family){ "layered", layered_from_config, NULL }));
    float *p = calloc(4096 + 256, sizeof *p); /* the parameters after a step, then the file's path */
    char dir[] = "/tmp/fsc_family_XXXXXX";
    assert_non_null(mkdtemp(dir));
    snprintf((char *)(p + 4096), 256 * sizeof *p, "%s/layered.safetensors", dir);
    fsc_cluster_opts co = fsc_cluster_opts_default();
    assert_ok(fsc_cluster_run(&co, layered_save_rank, p));
    assert_ok(fsc_cluster_run(&co, layered_load_rank, p));
    assert_ok(fsc_cluster_run(&co, layered_old_ckpt_rank, dir));
    free(p);
    test_rmtree(dir);
}

/* A host program in a locale whose decimal point is a comma (de_DE, made with localedef when its source is
 * installed; skipped otherwise): the configuration texts a checkpoint and a weights file record stay JSON. The
 * sequential model's layers and the Llama wrote "eps":1,49999996e-05, which no reader parses: a checkpoint save
 * failed ("the model's configuration is not a JSON object"). Oracle: both texts parse, with the numbers set. */
static void test_config_text_in_a_decimal_comma_locale(void **state) {
    (void)state;
    const locale_t de = test_comma_locale();
    if (!de) skip(); /* no de_DE locale source here (the locales package): nothing to test with */
    fsc_device *dev = NULL;
    assert_ok(fsc_device_create("cpu", NULL, &dev));
    fsc_layer *norm = NULL, *mse = NULL;
    assert_ok(fsc_layer_rmsnorm(0, 8, 1.5e-5f, &norm));
    assert_ok(fsc_layer_mse(8, &mse));
    fsc_seq_layer sl[2] = { { .layer = norm, .prefix = "n." }, { .layer = mse } };
    fsc_model *m = NULL;
    assert_ok(fsc_seq_model_create(dev, sl, 2, &m));
    fsc_llama_config lc = fsc_llama_config_default();
    char seq[2048], llama[1024], probe[16];
    const locale_t before = uselocale(de);
    snprintf(probe, sizeof probe, "%.1f", 1.5);
    m->ops->config(m->ctx, seq, sizeof seq);
    fsc_llama_config_json(&lc, llama, sizeof llama);
    uselocale(before);
    freelocale(de);
    assert_string_equal(probe, "1,5"); /* the locale was in force */
    cJSON *js = cJSON_Parse(seq), *jl = cJSON_Parse(llama);
    if (!js) fail_msg("the sequential model's configuration is not JSON: %s", seq);
    if (!jl) fail_msg("the Llama's configuration is not JSON: %s", llama);
    const cJSON *layer = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(js, "sequential"), 0), "layer");
    assert_true((float)cJSON_GetNumberValue(cJSON_GetObjectItem(layer, "eps")) == 1.5e-5f);
    assert_true((float)cJSON_GetNumberValue(cJSON_GetObjectItem(jl, "norm_eps")) == lc.norm_eps);
    cJSON_Delete(js);
    cJSON_Delete(jl);
    fsc_model_free(m);
    fsc_device_free(dev);
}

/* A program's layer kind and prefix may hold a quote, a backslash or a control character: the sequential model's
 * configuration text (what a checkpoint records) wrote them as they were, so a model that built and trained failed
 * its first checkpoint save ("the model's configuration is not a JSON object"). Oracle: the text parses, and its
 * kind and prefix are the layer's own. */
static void test_config_text_escapes_names(void **state) {
    (void)state;
    fsc_device *dev = NULL;
    assert_ok(fsc_device_create("cpu", NULL, &dev));
    fsc_layer *norm = NULL, *mse = NULL;
    assert_ok(fsc_layer_rmsnorm(0, 8, 1e-5f, &norm));
    assert_ok(fsc_layer_mse(8, &mse));
    const char *kind = "my \"norm\"\\2\t", *prefix = "a\"b\\c.";
    snprintf(norm->kind, sizeof norm->kind, "%s", kind);
    fsc_seq_layer sl[2] = { { .layer = norm, .prefix = prefix }, { .layer = mse } };
    fsc_model *m = NULL;
    assert_ok(fsc_seq_model_create(dev, sl, 2, &m));
    char text[2048];
    m->ops->config(m->ctx, text, sizeof text);
    cJSON *j = cJSON_Parse(text);
    if (!j) fail_msg("the sequential model's configuration is not JSON: %s", text);
    const cJSON *first = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "sequential"), 0);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(first, "kind")), kind);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(first, "prefix")), prefix);
    cJSON_Delete(j);
    fsc_model_free(m);
    fsc_device_free(dev);
}

/* A layer kind or prefix may hold bytes that are not UTF-8 (a name in Latin-1, one cut mid-character) and DEL: the
 * sequential model escaped only quotes, backslashes and control characters, so its configuration text (recorded in
 * checkpoints) held the raw bytes, which strict JSON readers refuse. Oracle: the text is valid UTF-8 with no raw DEL,
 * and the names read back with each stray byte as U+FFFD (the trace's and flight record's rule). */
static void test_config_text_names_utf8(void **state) {
    (void)state;
    fsc_device *dev = NULL;
    assert_ok(fsc_device_create("cpu", NULL, &dev));
    fsc_layer *norm = NULL, *mse = NULL;
    assert_ok(fsc_layer_rmsnorm(0, 8, 1e-5f, &norm));
    assert_ok(fsc_layer_mse(8, &mse));
    snprintf(norm->kind, sizeof norm->kind, "%s", "caf\xe9\x7f");
    fsc_seq_layer sl[2] = { { .layer = norm, .prefix = "\xc3\xa9t\xc3." }, { .layer = mse } };
    fsc_model *m = NULL;
    assert_ok(fsc_seq_model_create(dev, sl, 2, &m));
    char text[2048];
    m->ops->config(m->ctx, text, sizeof text);
    if (!test_valid_utf8((const unsigned char *)text) || strchr(text, 0x7f))
        fail_msg("the configuration text is not UTF-8 or holds a raw DEL: %s", text);
    cJSON *j = cJSON_Parse(text);
    if (!j) fail_msg("the sequential model's configuration is not JSON: %s", text);
    const cJSON *first = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "sequential"), 0);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(first, "kind")), "caf\xef\xbf\xbd\x7f");
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(first, "prefix")), "\xc3\xa9t\xef\xbf\xbd.");
    cJSON_Delete(j);
    fsc_model_free(m);
    fsc_device_free(dev);
}

/* A program's layer writes its settings as JSON of its own spacing and number forms; a checkpoint records them as
 * cJSON prints them. The sequential model compared its own text with the recorded one byte for byte, so the
 * checkpoint a run saved was refused by the same model ("written for a model of configuration ...{"n":4,
 * "eps":1.5e-05}...; this engine's model has ...{ "n": 4, "eps": 1.5e-5 }..."), and likewise a family's text with a
 * space in it. Oracle: both checkpoints load into the model that saved them, with its parameters. And a layer's
 * text of 3000 bytes (a program's layer with a long setting): the sequential model gave each layer 1024 bytes, so
 * the text was cut and the save refused it as not JSON; now it is recorded whole. */
static fsc_layer_ops spaced_ops;
static int long_layer_text; /* spaced_config: {"note":"xx...x"} of 3000 bytes instead */
static size_t spaced_most_cap; /* the largest buffer spaced_config was given (one rank: no race) */
static const char *bad_layer_text; /* spaced_config: this text instead (test_text_not_an_object_refused) */
static void spaced_config(const fsc_layer *l, char *buf, size_t cap) {
    (void)l;
    if (cap > spaced_most_cap) spaced_most_cap = cap;
    if (bad_layer_text) {
        snprintf(buf, cap, "%s", bad_layer_text);
        return;
    }
    if (!long_layer_text) {
        snprintf(buf, cap, "{ \"n\": 4, \"eps\": 1.5e-5, \"tab\": \"\\u0009\" }");
        return;
    }
    if (long_layer_text == 2) { /* {"note":"xx...x"} of 17 MiB: above FSC_MODEL_CONFIG_MAX, cut to cap - 1 */
        const size_t n = ((size_t)17 << 20) + 12;
        if (cap == 0) return;
        snprintf(buf, cap, "{\"note\":\"");
        for (size_t i = strlen(buf); i + 1 < cap && i < n - 2; i++) buf[i] = 'x', buf[i + 1] = '\0';
        if (n - 2 + 1 < cap) strcat(buf, "\"}");
        return;
    }
    char t[3001];
    memset(t, 'x', sizeof t - 1);
    memcpy(t, "{\"note\":\"", 9), memcpy(t + sizeof t - 3, "\"}", 2), t[sizeof t - 1] = '\0';
    snprintf(buf, cap, "%s", t);
}
static fsc_status spaced_model(fsc_device *dev, const char *unused, fsc_model **out) {
    (void)unused;
    fsc_layer *norm = NULL, *mse = NULL;
    FSC_TRY(fsc_layer_rmsnorm(0, 4, 1.5e-5f, &norm));
    spaced_ops = *norm->ops;
    spaced_ops.config = spaced_config;
    norm->ops = &spaced_ops;
    snprintf(norm->kind, sizeof norm->kind, "my\tnorm"); /* printed "my\u0009norm", recorded "my\tnorm" */
    fsc_status s = fsc_layer_mse(4, &mse);
    if (s != FSC_OK) {
        fsc_layer_free(norm);
        return s;
    }
    fsc_seq_layer sl[2] = { { .layer = norm, .prefix = "n." }, { .layer = mse } };
    return fsc_seq_model_create(dev, sl, 2, out);
}
static fsc_status spaced_ckpt_rank(fsc_rank *r, void *arg) {
    const char *dir = arg;
    char saved[300], ck[340];
    fsc_parallel_opts po = fsc_parallel_opts_default();
    fsc_optim_config oc = fsc_optim_config_default();
    float *a = calloc(4096, sizeof *a), *b = calloc(4096, sizeof *b);
    fsc_status s = a && b ? FSC_OK : FSC_ERR_NOMEM;
    for (int k = 0; k < 3 && s == FSC_OK; k++) { /* a program's layer; a family's text with a space; a long layer */
        snprintf(saved, sizeof saved, "%s/spaced%d", dir, k);
        snprintf(ck, sizeof ck, "%s/step-00000001", saved);
        fsc_model *m = NULL;
        fsc_engine *e = NULL;
        long_layer_text = k == 2;
        if (k != 1) s = spaced_model(r->dev, NULL, &m);
        if (s == FSC_OK && k != 1) s = fsc_engine_create_model(r, m, &po, &oc, 7, &e);
        if (s == FSC_OK && k == 1)
            s = fsc_engine_create_config(r, "{\"family\": \"layered\",\"vocab\":12}", &po, &oc, 7, &e);
        float x[8] = { 0.5f, -1, 2, 0.25f, 1, 1, -0.5f, 3 }, y[8] = { 1, 0, -1, 2, 0.5f, 0.5f, 1, 1 };
        int32_t tok[8] = { 1, 2, 3, 4, 5, 6, 7, 8 }, tgt[8] = { 2, 3, 4, 5, 6, 7, 8, 9 };
        fsc_step_info info;
        if (s == FSC_OK) s = k != 1 ? fsc_engine_step_model(e, x, y, 2, 2, &info)
                                    : fsc_engine_step_model(e, tok, tgt, 2, 2, &info);
        if (s == FSC_OK) s = fsc_engine_full_params(e, a);
        spaced_most_cap = 0;
        if (s == FSC_OK) s = fsc_ckpt_save(e, saved, 1, NULL);
        if (s == FSC_OK && k == 0 && spaced_most_cap > 4096) /* a short layer text: no 64 KiB buffer for it */
            s = fsc_error(FSC_ERR_INTERNAL, "a layer's short text was asked with %zu bytes", spaced_most_cap);
        if (s == FSC_OK && k == 2) { /* the layer's whole text in the checkpoint's record */
            fsc_ckpt_meta *meta = NULL;
            s = fsc_ckpt_meta_read(ck, &meta);
            const char *note = meta ? strstr(meta->model_config, "{\"note\":\"xxxx") : NULL; /* 2989 x's, then "} */
            if (s == FSC_OK && (!note || strspn(note + 9, "x") != 2989 || strncmp(note + 2998, "\"}", 2)))
                s = fsc_error(FSC_ERR_INTERNAL, "the long layer text is not recorded whole: %.200s", meta->model_config);
            fsc_ckpt_meta_free(meta);
        }
        if (s == FSC_OK && k != 1) s = fsc_engine_step_model(e, x, y, 2, 2, &info); /* away from the saved state */
        if (s == FSC_OK) s = fsc_ckpt_load(e, ck, NULL);
        if (s == FSC_OK) s = fsc_engine_full_params(e, b);
        if (s == FSC_OK) assert_memory_equal(a, b, fsc_model_num_params(fsc_engine_model(e)) * sizeof *a);
        fsc_engine_free(e);
        fsc_model_free(m);
    }
    free(a), free(b);
    return s;
}

/* A layer's configuration text over 16 MiB: the sequential model answered an empty text (its way of saying that a
 * layer's text cannot be had), which the engine's settings agreement and the weights file took as the model's text
 * and a checkpoint save refused as "not a JSON object: " without the cause. Oracle: the engine is refused when it is
 * made, naming the layer and the 16 MiB limit, as a model's own text over the limit is. */
static fsc_status huge_layer_rank(fsc_rank *r, void *arg) {
    (void)arg;
    fsc_parallel_opts po = fsc_parallel_opts_default();
    fsc_optim_config oc = fsc_optim_config_default();
    fsc_model *m = NULL;
    fsc_engine *e = NULL;
    fsc_status s = spaced_model(r->dev, NULL, &m);
    if (s == FSC_OK) {
        assert_int_equal(fsc_engine_create_model(r, m, &po, &oc, 7, &e), FSC_ERR_INVALID);
        assert_null(e);
        assert_non_null(strstr(fsc_last_error(), "the model's configuration text is empty: sequential model: layer "
                                                 "0: the model's configuration text is longer than 16777216 bytes"));
    }
    fsc_model_free(m);
    return s;
}

static void test_huge_layer_text_refused(void **state) {
    (void)state;
    fsc_cluster_opts co = fsc_cluster_opts_default();
    co.world = 2;
    long_layer_text = 2; /* set before the ranks start, reset after they end */
    const fsc_status s = fsc_cluster_run(&co, huge_layer_rank, NULL);
    long_layer_text = 0;
    assert_ok(s);
}

/* A layer's configuration text, or a model's, that is not one JSON object: the engine was made and trained, and the
 * first checkpoint save refused "the model's configuration is not a JSON object", its text cut before the layer at
 * fault (and a weights file recorded the text). Oracle: the engine is refused when it is made; for a layer, naming the
 * layer and its text (a text followed by more, {"a":1},{"b":2}, made the model's text other JSON or none). */
static fsc_model_ops bad_model_ops;
static const char *bad_model_text; /* bad_model_config's text */
static void bad_model_config(void *ctx, char *buf, size_t cap) {
    (void)ctx;
    snprintf(buf, cap, "%s", bad_model_text);
}
static fsc_status bad_text_rank(fsc_rank *r, void *arg) {
    (void)arg;
    static const char *texts[] = { "not json", "[1,2]", "4", "{\"a\":1},{\"b\":2}", "{\"a\":1}garbage",
                                   "1}],\"x\":[{\"a\":1" };
    fsc_parallel_opts po = fsc_parallel_opts_default();
    fsc_optim_config oc = fsc_optim_config_default();
    const size_t nt = sizeof texts / sizeof *texts;
    for (size_t k = 0; k < nt + 2; k++) {
        fsc_model *m = NULL;
        fsc_engine *e = NULL;
        bad_layer_text = k < nt ? texts[k] : NULL;
        bad_model_text = k == nt ? "[1]" : "{\"a\":1}garbage"; /* the second: cJSON_Parse stops at the object */
        assert_ok(spaced_model(r->dev, NULL, &m));
        if (!bad_layer_text) { /* a model of a program's own (model.h's ops) with such a text */
            bad_model_ops = *m->ops;
            bad_model_ops.config = bad_model_config;
            m->ops = &bad_model_ops;
        }
        assert_int_equal(fsc_engine_create_model(r, m, &po, &oc, 7, &e), FSC_ERR_INVALID);
        assert_null(e);
        const char *msg = fsc_last_error();
        if (bad_layer_text)
            assert_non_null(strstr(msg, "layer 0 (my\tnorm): its configuration text is not a JSON object"));
        else
            assert_non_null(strstr(msg, "engine: the model's configuration text is not a JSON object"));
        assert_non_null(strstr(msg, bad_layer_text ? bad_layer_text : bad_model_text));
        fsc_model_free(m);
    }
    bad_layer_text = NULL;
    return FSC_OK;
}

static void test_text_not_an_object_refused(void **state) {
    (void)state;
    fsc_cluster_opts co = fsc_cluster_opts_default();
    assert_ok(fsc_cluster_run(&co, bad_text_rank, NULL));
}

static void test_checkpoint_of_spaced_config_text(void **state) {
    (void)state;
    char dir[] = "/tmp/fsc_spaced_XXXXXX";
    assert_non_null(mkdtemp(dir));
    fsc_cluster_opts co = fsc_cluster_opts_default();
    assert_ok(fsc_cluster_run(&co, spaced_ckpt_rank, dir));
    test_rmtree(dir);
}

/* A configuration text over 64 KiB (a family's text with a long field; a model of many layers): checkpoints and
 * weights files recorded it as "{}", so a checkpoint of one model loaded into another whose long text differs only
 * at its end (both "{}"). Oracle: the checkpoint's metadata and the weights file record the text whole; a model
 * whose text differs in its last field is refused the checkpoint; a text over 16 MiB is refused when the engine is
 * made, naming the limit (never recorded cut or as "{}"). */
static char *long_text(size_t n, char last) { /* {"family":"layered","vocab":12,"note":"xx...x<last>"} */
    static const char head[] = "{\"family\":\"layered\",\"vocab\":12,\"note\":\"";
    char *t = malloc(sizeof head + n + 3);
    assert_non_null(t);
    memcpy(t, head, sizeof head - 1);
    memset(t + sizeof head - 1, 'x', n);
    t[sizeof head - 1 + n - 1] = last;
    memcpy(t + sizeof head - 1 + n, "\"}", 3);
    return t;
}
static fsc_status long_text_rank(fsc_rank *r, void *arg) {
    const char *dir = arg;
    char saved[300], ck[340], weights[340];
    snprintf(saved, sizeof saved, "%s/long", dir);
    snprintf(ck, sizeof ck, "%s/step-00000001", saved);
    snprintf(weights, sizeof weights, "%s/long.safetensors", dir);
    char *a = long_text(100000, 'A'), *b = long_text(100000, 'B');
    fsc_parallel_opts po = fsc_parallel_opts_default();
    fsc_optim_config oc = fsc_optim_config_default();
    fsc_engine *e = NULL;
    float *p = calloc(4096, sizeof *p);
    fsc_status s = p ? fsc_engine_create_config(r, a, &po, &oc, 7, &e) : FSC_ERR_NOMEM;
    if (s == FSC_OK) s = one_step(e, 1, p);
    if (s == FSC_OK) s = fsc_ckpt_save(e, saved, 1, NULL);
    if (s == FSC_OK) s = fsc_engine_save_weights(e, weights);
    if (s == FSC_OK) { /* model.h's contract: a text longer than the buffer is cut to cap - 1 bytes, not "{}" */
        const fsc_model *em = fsc_engine_model(e);
        char small[64];
        em->ops->config(em->ctx, small, sizeof small);
        assert_int_equal(strlen(small), sizeof small - 1);
        assert_memory_equal(small, a, sizeof small - 1);
    }
    fsc_engine_free(e);
    e = NULL;
    fsc_ckpt_meta *m = NULL;
    if (s == FSC_OK) s = fsc_ckpt_meta_read(ck, &m);
    if (s == FSC_OK) assert_string_equal(m->model_config, a);
    fsc_ckpt_meta_free(m);
    fsc_st_file *f = NULL;
    if (s == FSC_OK) s = fsc_st_open(weights, &f);
    if (s == FSC_OK) assert_string_equal(fsc_st_metadata(f, FSC_ST_META_MODEL), a);
    fsc_st_close(f);
    if (s == FSC_OK) s = fsc_engine_create_config(r, b, &po, &oc, 7, &e);
    if (s == FSC_OK) {
        assert_int_equal(fsc_ckpt_load(e, ck, NULL), FSC_ERR_INVALID);
        assert_non_null(strstr(fsc_last_error(), "written for a model of configuration"));
    }
    fsc_engine_free(e);
    e = NULL;
    char *huge = s == FSC_OK ? long_text((size_t)17 << 20, 'C') : NULL;
    if (huge) {
        assert_int_equal(fsc_engine_create_config(r, huge, &po, &oc, 7, &e), FSC_ERR_INVALID);
        assert_non_null(strstr(fsc_last_error(), "configuration text is longer than 16777216 bytes"));
        assert_null(e);
    }
    free(huge), free(a), free(b), free(p);
    return s;
}

static void test_long_config_text_recorded_whole(void **state) {
    (void)state;
    char dir[] = "/tmp/fsc_longcfg_XXXXXX";
    assert_non_null(mkdtemp(dir));
    fsc_cluster_opts co = fsc_cluster_opts_default();
    assert_ok(fsc_cluster_run(&co, long_text_rank, dir));
    test_rmtree(dir);
}

/* A host program's cJSON allocator (cJSON_InitHooks is process-wide): blocks 16 bytes into what malloc gave, as
 * fuzz/cjson_count.h's are, so a text cJSON printed and the library freed with free() instead of cJSON_free is
 * caught (free of a pointer malloc never returned: an abort). */
static void *hooked_malloc(size_t n) {
    char *p = malloc(n + 16);
    return p ? p + 16 : NULL;
}
static void hooked_free(void *p) {
    if (p) free((char *)p - 16);
}

/* Oracle: the GPT's configuration text and the refusal of a recorded configuration's bad field are printed by
 * cJSON and freed through it under a host program's hooks (they were freed with free(), an invalid free). */
static void test_cjson_hooks_of_the_host(void **state) {
    (void)state;
    cJSON_Hooks h = { hooked_malloc, hooked_free };
    cJSON_InitHooks(&h);
    fsc_gpt_config c = fsc_gpt_config_default();
    char buf[512];
    fsc_gpt_config_json(&c, buf, sizeof buf);
    fsc_device *dev = NULL;
    fsc_model *m = NULL;
    fsc_status s = fsc_device_create("cpu", NULL, &dev);
    if (s == FSC_OK) s = fsc_model_from_config(dev, "{\"layers\":1.5,\"dim\":8,\"heads\":2,\"seq\":4,\"vocab\":16}", &m);
    cJSON_InitHooks(NULL);
    fsc_model_free(m);
    fsc_device_free(dev);
    if (!strstr(buf, "\"layers\":")) fail_msg("fsc_gpt_config_json: %s", buf);
    assert_int_not_equal(s, FSC_OK);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_builds_the_recorded_model),
        cmocka_unit_test(test_bad_text_is_refused),
        cmocka_unit_test(test_check_held),
        cmocka_unit_test(test_registered_family_of_layers), /* before test_registered_family fills the table */
        cmocka_unit_test(test_checkpoint_of_spaced_config_text), /* after it: "layered" */
        cmocka_unit_test(test_long_config_text_recorded_whole), /* "layered" too */
        cmocka_unit_test(test_huge_layer_text_refused),
        cmocka_unit_test(test_text_not_an_object_refused),
        cmocka_unit_test(test_registered_family),
        cmocka_unit_test(test_engine_from_config), /* after test_registered_family: "tiny" */
        cmocka_unit_test(test_config_text_in_a_decimal_comma_locale),
        cmocka_unit_test(test_config_text_escapes_names),
        cmocka_unit_test(test_config_text_names_utf8),
        cmocka_unit_test(test_cjson_hooks_of_the_host),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
