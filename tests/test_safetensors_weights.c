/* Tests of reading other programs' full-weights files (lib/io/safetensors_weights.c) through the library's
 * loaders (fsc_engine_load_weights, fsc_gpt_load) and of saving weights as bf16/f16 (fsc_engine_save_weights_dtype).
 *
 * Oracles (tests/gen_golden_hf.py: a tiny GPT-2 and a tiny Llama in float64 PyTorch, independent of fsc, their
 * weights written as the state dicts of transformers' GPT2LMHeadModel and LlamaForCausalLM, with the
 * "transformer." prefix, GPT-2's causal-mask buffers and tied lm_head.weight, the Llama's rotary buffers):
 * - each file (F32, F16, BF16) loads, and the model's loss on the golden batch equals PyTorch's loss computed
 *   with the file's values, to 1e-5 relative (fsc computes in float32, the reference in float64);
 * - F16 and BF16 values are converted exactly: each loaded tensor's float64 sum, in element order, equals the
 *   sum PyTorch computed of its rounded values, bit for bit (also through the GPT's own fsc_gpt_load);
 * - a GPT-2 file whose lm_head.weight differs from wte in one element is refused (FSC_ERR_FORMAT naming both);
 * - a file saved as bf16 or f16 holds those dtypes, each value the round-to-nearest-even of the model's
 *   (fsc_f32_to_bf16/f16, tested against hand values in test_dtype), records the model's configuration
 *   (FSC_ST_META_MODEL, from which fsc_model_from_config builds the same model), and loads back to the same bits;
 * - fsc_st_find_weight prefers a name to its prefixed form; fsc_st_read_f32 refuses an integer entry;
 * - a configuration record that is not a model (not an object, truncated, an unknown family, a field missing, of
 *   the wrong type or out of range) is refused by fsc_model_from_config with a message naming it. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>
#include <unistd.h>
#include "testutil.h"
#include "fsc/fsc.h"
#include "golden/hf_golden.h"

static char tmpdir[128];

static void golden_path(char *buf, size_t cap, const char *file) {
    const char *src = __FILE__, *slash = strrchr(src, '/');
    snprintf(buf, cap, "%.*sgolden/%s", slash ? (int)(slash - src + 1) : 0, src, file);
}

static fsc_status make_model(fsc_device *dev, int llama, fsc_model **m) {
    if (llama) {
        fsc_llama_config c = { .layers = HG_LLAMA_LAYERS, .dim = HG_LLAMA_DIM, .heads = HG_LLAMA_HEADS,
                               .kv_heads = HG_LLAMA_KV_HEADS, .ffn = HG_LLAMA_FFN, .seq = HG_LLAMA_SEQ,
                               .vocab = HG_LLAMA_VOCAB, .rope_theta = (float)HG_LLAMA_THETA,
                               .norm_eps = (float)HG_LLAMA_EPS };
        return fsc_llama_model_create(dev, &c, m);
    }
    fsc_gpt_config c = { .layers = HG_GPT_LAYERS, .dim = HG_GPT_DIM, .heads = HG_GPT_HEADS, .seq = HG_GPT_SEQ,
                         .vocab = HG_GPT_VOCAB };
    return fsc_gpt_model_create(dev, &c, m);
}

typedef struct {
    int llama;
    const char *path;       /* loaded */
    const char *save;       /* when set: saved there as save_dt after loading */
    fsc_dtype save_dt;
    double loss;
    float *params;          /* (P) the loaded parameters */
    size_t P;
} run;

static fsc_status load_rank(fsc_rank *r, void *arg) {
    run *g = arg;
    fsc_model *m = NULL;
    FSC_TRY(make_model(r->dev, g->llama, &m));
    fsc_parallel_opts po = fsc_parallel_opts_default();
    fsc_optim_config oc = fsc_optim_config_default();
    oc.kind = FSC_OPT_SGD, oc.lr = 0.0f;
    fsc_engine *e = NULL;
    fsc_status s = fsc_engine_create_model(r, m, &po, &oc, 1, &e);
    if (s == FSC_OK) s = fsc_engine_load_weights(e, g->path);
    g->P = fsc_model_num_params(m);
    if (s == FSC_OK && !(g->params = malloc(g->P * sizeof(float)))) s = fsc_error(FSC_ERR_NOMEM, "out of memory");
    if (s == FSC_OK) s = fsc_engine_full_params(e, g->params);
    if (s == FSC_OK && g->save) s = fsc_engine_save_weights_dtype(e, g->save, g->save_dt);
    const int T = g->llama ? HG_LLAMA_SEQ : HG_GPT_SEQ, V = g->llama ? HG_LLAMA_VOCAB : HG_GPT_VOCAB;
    int32_t tok[HG_BATCH * 8], tgt[HG_BATCH * 8];
    for (int b = 0; b < HG_BATCH; b++)
        for (int t = 0; t < T; t++) { /* gen_golden_hf.py's tokens() */
            tok[b * T + t] = (7 * b + 3 * t + 1) % V;
            tgt[b * T + t] = (5 * b + 11 * t + 2) % V;
        }
    fsc_step_info info;
    if (s == FSC_OK) s = fsc_engine_step_model(e, tok, tgt, HG_BATCH, HG_BATCH, &info);
    g->loss = info.loss;
    fsc_engine_free(e);
    fsc_model_free(m);
    return s;
}

static void load(run *g) {
    fsc_cluster_opts co = fsc_cluster_opts_default();
    assert_ok(fsc_cluster_run(&co, load_rank, g));
}

/* Each tensor's sum in element order (float64), as gen_golden_hf.py computes it. */
static void assert_sums(const float *p, int llama, const double *want, int n_tensors, const char *what) {
    fsc_device *dev;
    fsc_model *m;
    assert_ok(fsc_device_create("cpu", NULL, &dev));
    assert_ok(make_model(dev, llama, &m));
    assert_int_equal(m->n_tensors, n_tensors);
    size_t off = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        double s = 0;
        for (size_t j = 0; j < m->info[i].numel; j++) s += (double)p[off + j];
        if (s != want[i]) fail_msg("%s: tensor %s sums to %.17g, PyTorch's values to %.17g", what, m->info[i].name, s,
                                   want[i]);
        off += m->info[i].numel;
    }
    fsc_model_free(m);
    fsc_device_free(dev);
}

static void check_path(int llama, const char *path, double want_loss, const double *sums, int n_sums) {
    run g = { .llama = llama, .path = path };
    load(&g);
    assert_sums(g.params, llama, sums, n_sums, path);
    if (fabs(g.loss - want_loss) > 1e-5 * fabs(want_loss))
        fail_msg("%s: loss %.9g, PyTorch's %.9g", path, g.loss, want_loss);
    free(g.params);
}

static void check_file(int llama, const char *file, double want_loss, const double *sums, int n_sums) {
    char path[512];
    golden_path(path, sizeof path, file);
    check_path(llama, path, want_loss, sums, n_sums);
}

#define NSUMS(a) ((int)(sizeof(a) / sizeof *(a)))

static void test_gpt2_files(void **st) {
    (void)st;
    check_file(0, "hf_gpt2.safetensors", hg_loss_gpt2_f32, hg_sums_gpt2_f32, NSUMS(hg_sums_gpt2_f32));
    check_file(0, "hf_gpt2_f16.safetensors", hg_loss_gpt2_f16, hg_sums_gpt2_f16, NSUMS(hg_sums_gpt2_f16));
    check_file(0, "hf_gpt2_bf16.safetensors", hg_loss_gpt2_bf16, hg_sums_gpt2_bf16, NSUMS(hg_sums_gpt2_bf16));
}

static void test_llama_files(void **st) {
    (void)st;
    check_file(1, "hf_llama.safetensors", hg_loss_llama_f32, hg_sums_llama_f32, NSUMS(hg_sums_llama_f32));
    check_file(1, "hf_llama_bf16.safetensors", hg_loss_llama_bf16, hg_sums_llama_bf16, NSUMS(hg_sums_llama_bf16));
    check_file(1, "hf_llama_f16.safetensors", hg_loss_llama_f16, hg_sums_llama_f16, NSUMS(hg_sums_llama_f16));
}

/* The GPT's own single-rank loader reads the same files. */
static void test_gpt_load(void **st) {
    (void)st;
    fsc_device *dev;
    fsc_gpt *m;
    fsc_gpt_config c = { .layers = HG_GPT_LAYERS, .dim = HG_GPT_DIM, .heads = HG_GPT_HEADS, .seq = HG_GPT_SEQ,
                         .vocab = HG_GPT_VOCAB };
    assert_ok(fsc_device_create("cpu", NULL, &dev));
    assert_ok(fsc_gpt_create(dev, &c, &m));
    size_t P = fsc_gpt_num_params(&c);
    void *flat;
    assert_ok(fsc_device_alloc(dev, FSC_TAG_PARAMS, P * sizeof(float), &flat));
    fsc_gpt_bind_flat(m, flat, NULL);
    float *host = malloc(P * sizeof(float));
    char path[512];
    golden_path(path, sizeof path, "hf_gpt2_bf16.safetensors");
    assert_ok(fsc_gpt_check_file(&c, path));
    assert_ok(fsc_gpt_load(m, path));
    assert_ok(fsc_device_download(dev, host, flat, P * sizeof(float)));
    assert_sums(host, 0, hg_sums_gpt2_bf16, NSUMS(hg_sums_gpt2_bf16), "fsc_gpt_load bf16");
    free(host);
    fsc_device_release(dev, flat);
    fsc_gpt_free(m);
    fsc_device_free(dev);
}

/* A copy of the golden GPT-2 file with element 5 of lm_head.weight changed: refused by both loaders. */
static void test_untied_head_refused(void **st) {
    (void)st;
    char src[512], dst[600];
    golden_path(src, sizeof src, "hf_gpt2.safetensors");
    snprintf(dst, sizeof dst, "%s/untied.safetensors", tmpdir);
    FILE *f = fopen(src, "rb");
    assert_non_null(f);
    static unsigned char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    assert_true(n > 8 && n < sizeof buf);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | buf[i];
    fsc_st_file *sf;
    assert_ok(fsc_st_open(src, &sf));
    const fsc_st_entry *e = fsc_st_find(sf, "lm_head.weight");
    assert_non_null(e);
    assert_int_equal(e->dtype, FSC_F32);
    size_t at = 8 + (size_t)hlen + (size_t)e->begin + 5 * sizeof(float);
    fsc_st_close(sf);
    float v;
    memcpy(&v, buf + at, sizeof v);
    v += 0.25f;
    memcpy(buf + at, &v, sizeof v);
    f = fopen(dst, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, n, f), n);
    fclose(f);
    run g = { .llama = 0, .path = dst };
    fsc_cluster_opts co = fsc_cluster_opts_default();
    assert_err(fsc_cluster_run(&co, load_rank, &g), FSC_ERR_FORMAT,
               "lm_head.weight differs from transformer.wte.weight at element 5");
    free(g.params);
    fsc_gpt_config c = { .layers = HG_GPT_LAYERS, .dim = HG_GPT_DIM, .heads = HG_GPT_HEADS, .seq = HG_GPT_SEQ,
                         .vocab = HG_GPT_VOCAB };
    assert_err(fsc_gpt_check_file(&c, dst), FSC_ERR_FORMAT, "a separate output head is not supported");
    unlink(dst);
}

/* Saving as bf16/f16: dtypes, rounded values, the configuration record, and the reload. */
static void check_save(int llama, fsc_dtype dt) {
    char src[512], out[600], cfg[512];
    golden_path(src, sizeof src, llama ? "hf_llama.safetensors" : "hf_gpt2.safetensors");
    snprintf(out, sizeof out, "%s/saved_%s.safetensors", tmpdir, fsc_dtype_name(dt));
    run g = { .llama = llama, .path = src, .save = out, .save_dt = dt };
    load(&g);
    fsc_device *dev;
    fsc_model *m, *m2;
    assert_ok(fsc_device_create("cpu", NULL, &dev));
    assert_ok(make_model(dev, llama, &m));
    fsc_st_file *f;
    assert_ok(fsc_st_open(out, &f));
    assert_int_equal(fsc_st_count(f), m->n_tensors);
    const char *rec = fsc_st_metadata(f, FSC_ST_META_MODEL);
    assert_non_null(rec);
    m->ops->config(m->ctx, cfg, sizeof cfg);
    assert_string_equal(rec, cfg);
    assert_ok(fsc_model_from_config(dev, rec, &m2)); /* the record builds the same model */
    m2->ops->config(m2->ctx, cfg, sizeof cfg);
    assert_string_equal(rec, cfg);
    float *want = malloc(g.P * sizeof(float));
    size_t off = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        const fsc_st_entry *e = fsc_st_find(f, m->info[i].name);
        assert_non_null(e);
        assert_int_equal(e->dtype, dt);
        uint16_t h[4096];
        assert_true(m->info[i].numel <= 4096);
        assert_ok(fsc_st_read(f, e, h, 0, m->info[i].numel));
        for (size_t j = 0; j < m->info[i].numel; j++) {
            float x = g.params[off + j];
            uint16_t r = dt == FSC_BF16 ? fsc_f32_to_bf16(x) : fsc_f32_to_f16(x);
            if (h[j] != r) fail_msg("%s element %zu: stored %#x, round(%.9g) is %#x", m->info[i].name, j, h[j], x, r);
            want[off + j] = dt == FSC_BF16 ? fsc_bf16_to_f32(r) : fsc_f16_to_f32(r);
        }
        off += m->info[i].numel;
    }
    fsc_st_close(f);
    run back = { .llama = llama, .path = out };
    load(&back);
    assert_bits_equal(back.params, want, g.P, "weights reloaded from the bf16/f16 file");
    free(want), free(back.params), free(g.params);
    fsc_model_free(m2);
    fsc_model_free(m);
    fsc_device_free(dev);
    unlink(out);
}

static void test_save_dtype(void **st) {
    (void)st;
    check_save(0, FSC_BF16);
    check_save(0, FSC_F16);
    check_save(1, FSC_BF16);
}

/* A save onto a directory fails with its message and leaves no temporary file (before, "<path>.tmp.<pid>.0" stayed,
 * holding the whole model, when the rename failed; now the path is refused before anything is written). */
static void test_failed_save_leaves_nothing(void **st) {
    (void)st;
    char src[512], out[600];
    golden_path(src, sizeof src, "hf_gpt2.safetensors");
    snprintf(out, sizeof out, "%s/asdir", tmpdir);
    assert_int_equal(mkdir(out, 0700), 0);
    run g = { .path = src, .save = out, .save_dt = FSC_F32 };
    fsc_cluster_opts co = fsc_cluster_opts_default();
    assert_err(fsc_cluster_run(&co, load_rank, &g), FSC_ERR_INVALID, "asdir: exists and is not a regular file (a directory)");
    free(g.params);
    DIR *d = opendir(tmpdir);
    assert_non_null(d);
    for (struct dirent *de; (de = readdir(d)) != NULL;)
        if (!strncmp(de->d_name, "asdir.tmp.", 10)) fail_msg("left behind: %s", de->d_name);
    closedir(d);
    rmdir(out);
}

static void test_find_and_read(void **st) {
    (void)st;
    char path[600];
    snprintf(path, sizeof path, "%s/names.safetensors", tmpdir);
    fsc_st_writer *w;
    int64_t two = 2;
    assert_ok(fsc_st_writer_open(path, &w));
    assert_ok(fsc_st_writer_add(w, "transformer.a", FSC_F32, 1, &two));
    assert_ok(fsc_st_writer_add(w, "a", FSC_BF16, 1, &two));
    assert_ok(fsc_st_writer_add(w, "transformer.b", FSC_F16, 1, &two));
    assert_ok(fsc_st_writer_add(w, "i", FSC_I32, 1, &two));
    assert_ok(fsc_st_writer_begin_data(w));
    const float fa[2] = { 1.0f, 2.0f }, ab[2] = { 3.0f, -0.5f }, fb[2] = { 0.25f, 65504.0f };
    const int32_t iv[2] = { 1, 2 };
    assert_ok(fsc_st_writer_write(w, 0, fa, 0, 2));
    assert_ok(fsc_st_writer_write_f32(w, 1, ab, 0, 2));
    assert_ok(fsc_st_writer_write_f32(w, 2, fb, 0, 2));
    assert_ok(fsc_st_writer_write(w, 3, iv, 0, 2));
    assert_err(fsc_st_writer_write_f32(w, 3, fa, 0, 2), FSC_ERR_INVALID, "F32, BF16 or F16 only");
    assert_ok(fsc_st_writer_commit(w));
    fsc_st_file *f;
    assert_ok(fsc_st_open(path, &f));
    assert_string_equal(fsc_st_find_weight(f, "a")->name, "a"); /* the name itself first */
    assert_string_equal(fsc_st_find_weight(f, "b")->name, "transformer.b");
    assert_null(fsc_st_find_weight(f, "c"));
    const fsc_st_entry *once = NULL;
    assert_err(fsc_st_find_weight_once(f, "a", "names.safetensors", &once), FSC_ERR_FORMAT,
               "names.safetensors: tensor a is there twice, as a and as transformer.a");
    assert_ok(fsc_st_find_weight_once(f, "b", NULL, &once));
    assert_string_equal(once->name, "transformer.b");
    assert_ok(fsc_st_find_weight_once(f, "c", NULL, &once));
    assert_null(once);
    assert_string_equal(fsc_st_weight_name("transformer.h.0.attn.bias"), "h.0.attn.bias");
    assert_string_equal(fsc_st_weight_name("lm_head.weight"), "lm_head.weight");
    float out[2];
    assert_ok(fsc_st_read_f32(f, fsc_st_find_weight(f, "a"), out, 0, 2));
    assert_bits_equal(out, ab, 2, "bf16 read as f32");
    assert_ok(fsc_st_read_f32(f, fsc_st_find_weight(f, "b"), out, 1, 1));
    assert_true(out[0] == 65504.0f);
    assert_err(fsc_st_read_f32(f, fsc_st_find(f, "i"), out, 0, 2), FSC_ERR_FORMAT, "i has dtype I32");
    assert_err(fsc_st_read_f32(f, fsc_st_find(f, "a"), out, 1, 2), FSC_ERR_INVALID, "");
    fsc_st_close(f);
    unlink(path);
}

/* A configuration record that is not a model (fsc_model_from_config reads it from a file's metadata or the
 * sampler's --model-config): refused with FSC_ERR_FORMAT saying which field, and no model returned. */
static void test_bad_model_config(void **st) {
    (void)st;
    fsc_device *dev;
    assert_ok(fsc_device_create("cpu", NULL, &dev));
    static const struct { const char *text, *needle; } cases[] = {
        { "", "not a JSON object" },
        { "[1, 2]", "not a JSON object" },
        { "{\"layers\":1,\"dim\":8", "not a JSON object" }, /* truncated */
        { "{\"family\":7}", "family is not a string" },
        { "{\"family\":\"bert\"}", "unknown family 'bert'" },
        { "{\"dim\":8}", "names no built-in model" },
        { "{\"layers\":0,\"dim\":8,\"heads\":2,\"seq\":4,\"vocab\":16}", "layers = 0 is not an integer in [1," },
        { "{\"layers\":1,\"dim\":8.5,\"heads\":2,\"seq\":4,\"vocab\":16}", "dim = 8.5 is not an integer" },
        { "{\"layers\":1,\"dim\":8,\"heads\":2,\"seq\":4,\"vocab\":1e300}", "vocab = 1.0000000000000001e+300 is not" },
        { "{\"layers\":1,\"dim\":8,\"heads\":\"2\",\"seq\":4,\"vocab\":16}", "heads is missing or not a number" },
        { "{\"layers\":1,\"dim\":8,\"heads\":2,\"seq\":4}", "vocab is missing or not a number" },
        { "{\"family\":\"llama\",\"layers\":1,\"dim\":8,\"heads\":2,\"seq\":4,\"vocab\":16,\"rope_theta\":1e39}",
          "rope_theta is missing or not a finite number" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        fsc_model *m = (fsc_model *)&m; /* must come back NULL */
        assert_err(fsc_model_from_config(dev, cases[i].text, &m), FSC_ERR_FORMAT, cases[i].needle);
        assert_null(m);
    }
    fsc_device_free(dev);
}

/* A copy of golden file src at dst, each entry's name without the prefix strip (NULL: as it is), with one more F32
 * entry, extra (NULL: none), of n elements 0.5: a file of another program holding a tensor fsc's model lacks. */
static void copy_with_entry(const char *src, const char *dst, const char *strip, const char *extra, int64_t n) {
    fsc_st_file *f;
    fsc_st_writer *w;
    assert_ok(fsc_st_open(src, &f));
    assert_ok(fsc_st_writer_open(dst, &w));
    const int N = fsc_st_count(f);
    for (int i = 0; i < N; i++) {
        const fsc_st_entry *e = fsc_st_entry_at(f, i);
        const char *name = e->name;
        if (strip && !strncmp(name, strip, strlen(strip))) name += strlen(strip);
        assert_ok(fsc_st_writer_add(w, name, e->dtype, e->ndim, e->shape));
    }
    if (extra) assert_ok(fsc_st_writer_add(w, extra, FSC_F32, 1, &n));
    assert_ok(fsc_st_writer_begin_data(w));
    static unsigned char buf[1 << 16];
    for (int i = 0; i < N; i++) {
        const fsc_st_entry *e = fsc_st_entry_at(f, i);
        const size_t size = fsc_dtype_size(e->dtype), k = size ? (size_t)(e->end - e->begin) / size : 0;
        assert_true(k * size <= sizeof buf);
        assert_ok(fsc_st_read(f, e, buf, 0, k));
        assert_ok(fsc_st_writer_write(w, i, buf, 0, k));
    }
    if (extra) {
        float v[64];
        assert_true(n <= 64);
        for (int j = 0; j < n; j++) v[j] = 0.5f;
        assert_ok(fsc_st_writer_write(w, N, v, 0, (uint64_t)n));
    }
    assert_ok(fsc_st_writer_commit(w));
    fsc_st_close(f);
}

/* A Llama file holding model.layers.0.self_attn.q_proj.bias (a Llama with attention_bias: a layer fsc's Llama
 * has, in a form it lacks) is refused by fsc_engine_load_weights (FSC_ERR_INVALID naming the entry); before,
 * the bias was ignored and the file loaded as another model. GPT-2 files holding Hugging Face's attention-mask
 * buffers h.N.attn.bias (no X.weight beside them) still load, under the "transformer." prefix (the golden file)
 * and without it. Oracle: the status and message of the load; the golden Llama file itself loads. */
static void test_llama_extra_bias_refused(void **st) {
    (void)st;
    char src[512], dst[600];
    golden_path(src, sizeof src, "hf_llama.safetensors");
    snprintf(dst, sizeof dst, "%s/llama_qbias.safetensors", tmpdir);
    copy_with_entry(src, dst, NULL, "model.layers.0.self_attn.q_proj.bias", HG_LLAMA_DIM);
    run g = { .llama = 1, .path = dst };
    fsc_cluster_opts co = fsc_cluster_opts_default();
    assert_err(fsc_cluster_run(&co, load_rank, &g), FSC_ERR_INVALID, "model.layers.0.self_attn.q_proj.bias");
    free(g.params);
    unlink(dst);
    copy_with_entry(src, dst, NULL, NULL, 0); /* the copy itself loads: only the bias was refused */
    run same = { .llama = 1, .path = dst };
    load(&same);
    free(same.params);
    unlink(dst);
    golden_path(src, sizeof src, "hf_gpt2.safetensors");
    snprintf(dst, sizeof dst, "%s/gpt2_noprefix.safetensors", tmpdir);
    copy_with_entry(src, dst, "transformer.", NULL, 0);
    fsc_st_file *f;
    assert_ok(fsc_st_open(dst, &f));
    assert_non_null(fsc_st_find(f, "h.0.attn.bias"));
    fsc_st_close(f);
    for (int pre = 0; pre < 2; pre++) {
        golden_path(src, sizeof src, "hf_gpt2.safetensors");
        run gpt = { .llama = 0, .path = pre ? src : dst };
        load(&gpt);
        free(gpt.params);
    }
    unlink(dst);
}

/* A copy of safetensors file src at dst whose header text has `from` replaced by `to` (NULL: as it is) and, when
 * extra is set, one more entry: `"extra":{"dtype":"<dt>","shape":<shape>,"data_offsets":[D,D+bytes]}` at the end
 * of the data section D, its bytes 0x01 (a file of another program holding buffers fsc does not read). */
static void graft(const char *src, const char *dst, const char *from, const char *to, const char *extra,
                  const char *dt, const char *shape, size_t bytes) {
    FILE *in = fopen(src, "rb");
    assert_non_null(in);
    fseek(in, 0, SEEK_END);
    const size_t len = (size_t)ftell(in);
    rewind(in);
    unsigned char *b = malloc(len);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, len, in), len);
    fclose(in);
    uint64_t hl = 0;
    for (int i = 0; i < 8; i++) hl |= (uint64_t)b[i] << (8 * i);
    const size_t data = len - 8 - (size_t)hl; /* the data section's bytes */
    char *h = calloc(1, hl + 4096);
    assert_non_null(h);
    memcpy(h, b + 8, hl);
    while (hl && h[hl - 1] == ' ') h[--hl] = '\0'; /* the padding */
    if (from) {
        char *at = strstr(h, from);
        assert_non_null(at);
        const size_t fl = strlen(from), tl = strlen(to);
        memmove(at + tl, at + fl, strlen(at + fl) + 1);
        memcpy(at, to, tl);
    }
    if (extra) {
        char *end = strrchr(h, '}');
        assert_non_null(end);
        snprintf(end, 512, ",\"%s\":{\"dtype\":\"%s\",\"shape\":%s,\"data_offsets\":[%zu,%zu]}}", extra, dt, shape,
                 data, data + bytes);
    }
    hl = strlen(h);
    FILE *out = fopen(dst, "wb");
    assert_non_null(out);
    unsigned char n8[8];
    for (int i = 0; i < 8; i++) n8[i] = (unsigned char)(hl >> (8 * i));
    fwrite(n8, 1, 8, out);
    fwrite(h, 1, hl, out);
    fwrite(b + len - data, 1, data, out);
    for (size_t i = 0; extra && i < bytes; i++) fputc(1, out);
    fclose(out);
    free(h);
    free(b);
}

/* Entries fsc cannot read (a dtype it lacks, such as Hugging Face's I64 position_ids and BOOL masks, or more than
 * 4 dimensions) beside the model's tensors: the file opens, those entries are listed with the reason and reading
 * them fails with it, and the model loads with the golden values (they made the file unloadable before). A model
 * tensor stored as I64 is refused naming the tensor and the dtype; a tensor held under its own name and under the
 * "transformer." prefix is refused naming both (one of them was loaded silently before). Oracle: the golden sums
 * and loss (gen_golden_hf.py, PyTorch) and the statuses and messages. */
static void test_unreadable_entries(void **st) {
    (void)st;
    char src[512], dst[600];
    golden_path(src, sizeof src, "hf_gpt2.safetensors");
    snprintf(dst, sizeof dst, "%s/gpt2_i64.safetensors", tmpdir);
    graft(src, dst, NULL, NULL, "transformer.position_ids", "I64", "[1,8]", 64);
    char dst2[600];
    snprintf(dst2, sizeof dst2, "%s/gpt2_i64_bool5.safetensors", tmpdir);
    graft(dst, dst2, NULL, NULL, "mask", "BOOL", "[1,1,2,2,2]", 8);
    fsc_st_file *f;
    assert_ok(fsc_st_open(dst2, &f));
    const fsc_st_entry *pe = fsc_st_find(f, "transformer.position_ids"), *me = fsc_st_find(f, "mask");
    assert_non_null(pe);
    assert_non_null(me);
    assert_string_equal(pe->unreadable, "dtype I64");
    assert_string_equal(me->unreadable, "dtype BOOL");
    assert_null(fsc_st_find(f, "transformer.wte.weight")->unreadable);
    int64_t buf[8];
    assert_err(fsc_st_read(f, pe, buf, 0, 1), FSC_ERR_UNSUPPORTED, "transformer.position_ids has dtype I64");
    assert_err(fsc_st_read_f32(f, me, (float *)buf, 0, 1), FSC_ERR_FORMAT, "mask has dtype BOOL");
    fsc_st_close(f);
    check_path(0, dst2, hg_loss_gpt2_f32, hg_sums_gpt2_f32, NSUMS(hg_sums_gpt2_f32));
    unlink(dst2);
    graft(src, dst2, NULL, NULL, "five", "F32", "[1,1,1,1,2]", 8);
    assert_ok(fsc_st_open(dst2, &f));
    assert_string_equal(fsc_st_find(f, "five")->unreadable, "more than 4 dimensions");
    assert_err(fsc_st_read(f, fsc_st_find(f, "five"), buf, 0, 1), FSC_ERR_UNSUPPORTED, "five has more than 4 dimensions");
    fsc_st_close(f);
    check_path(0, dst2, hg_loss_gpt2_f32, hg_sums_gpt2_f32, NSUMS(hg_sums_gpt2_f32));
    unlink(dst2);
    /* a model tensor as I64: the same 64 bytes as 8 I64 values */
    graft(src, dst2, "\"transformer.h.0.ln_1.weight\":{\"dtype\":\"F32\",\"shape\":[16]",
          "\"transformer.h.0.ln_1.weight\":{\"dtype\":\"I64\",\"shape\":[8]", NULL, NULL, NULL, 0);
    run g = { .llama = 0, .path = dst2 };
    fsc_cluster_opts co = fsc_cluster_opts_default();
    assert_err(fsc_cluster_run(&co, load_rank, &g), FSC_ERR_FORMAT,
               "h.0.ln_1.weight has dtype I64 but the model expects floats");
    free(g.params);
    unlink(dst2);
    unlink(dst);
    /* wte under both names */
    snprintf(dst, sizeof dst, "%s/gpt2_twice.safetensors", tmpdir);
    copy_with_entry(src, dst, NULL, "wte.weight", 4);
    run t = { .llama = 0, .path = dst };
    assert_err(fsc_cluster_run(&co, load_rank, &t), FSC_ERR_FORMAT,
               "tensor wte.weight is there twice, as wte.weight and as transformer.wte.weight");
    free(t.params);
    unlink(dst);
}

/* A Llama of configuration c: poked (when poke_tensor >= 0) element 3 of that tensor set to poke, then loads
 * `load` (when set), then saves as save_dt at `save` (when set). */
typedef struct {
    fsc_llama_config c;
    const char *load, *save;
    fsc_dtype save_dt;
    int poke_tensor;
    float poke;
} llama_job;

static fsc_status llama_rank(fsc_rank *r, void *arg) {
    llama_job *j = arg;
    fsc_model *m = NULL;
    FSC_TRY(fsc_llama_model_create(r->dev, &j->c, &m));
    fsc_parallel_opts po = fsc_parallel_opts_default();
    fsc_optim_config oc = fsc_optim_config_default();
    fsc_engine *e = NULL;
    fsc_status s = fsc_engine_create_model(r, m, &po, &oc, 1, &e);
    if (s == FSC_OK && j->poke_tensor >= 0) {
        fsc_model *em = fsc_engine_model(e);
        float v[4];
        s = fsc_device_download(r->dev, v, em->param[j->poke_tensor], sizeof v);
        v[3] = j->poke;
        if (s == FSC_OK) s = fsc_device_upload(r->dev, em->param[j->poke_tensor], v, sizeof v);
    }
    if (s == FSC_OK && j->load) s = fsc_engine_load_weights(e, j->load);
    if (s == FSC_OK && j->save) s = fsc_engine_save_weights_dtype(e, j->save, j->save_dt);
    fsc_engine_free(e);
    fsc_model_free(m);
    return s;
}

static fsc_llama_config tiny_llama(float theta, float eps) {
    fsc_llama_config c = { .layers = 1, .dim = 8, .heads = 2, .kv_heads = 2, .ffn = 16, .seq = 4, .vocab = 16,
                           .rope_theta = theta, .norm_eps = eps };
    return c;
}

/* A Llama weights file records its model's configuration (FSC_ST_META_MODEL); one saved by a model of rope_theta
 * 1000 (or norm_eps 1e-6) loaded into a model of rope_theta 10000 (norm_eps 1e-5) is refused, FSC_ERR_INVALID
 * naming the field (before, only heads and kv_heads were compared, and the file loaded as another model); the
 * same file loads into a model of the recorded values. Oracle: the load's status and message. */
static void test_llama_recorded_theta_eps(void **st) {
    (void)st;
    static const struct { float theta, eps, load_theta, load_eps; const char *field; } cases[] = {
        { 1000.0f, 1e-5f, 10000.0f, 1e-5f, "rope_theta" },
        { 10000.0f, 1e-6f, 10000.0f, 1e-5f, "norm_eps" },
    };
    char path[600];
    snprintf(path, sizeof path, "%s/llama_cfg.safetensors", tmpdir);
    fsc_cluster_opts co = fsc_cluster_opts_default();
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        llama_job save = { .c = tiny_llama(cases[i].theta, cases[i].eps), .save = path, .save_dt = FSC_F32,
                           .poke_tensor = -1 };
        assert_ok(fsc_cluster_run(&co, llama_rank, &save));
        llama_job other = { .c = tiny_llama(cases[i].load_theta, cases[i].load_eps), .load = path, .poke_tensor = -1 };
        fsc_status s = fsc_cluster_run(&co, llama_rank, &other);
        if (s != FSC_ERR_INVALID || !strstr(fsc_last_error(), cases[i].field))
            fail_msg("a file saved with rope_theta %g, norm_eps %g loaded into rope_theta %g, norm_eps %g: %s (%s); "
                     "expected FSC_ERR_INVALID naming %s", (double)cases[i].theta, (double)cases[i].eps,
                     (double)cases[i].load_theta, (double)cases[i].load_eps, fsc_status_str(s), fsc_last_error(),
                     cases[i].field);
        llama_job same = { .c = save.c, .load = path, .poke_tensor = -1 };
        assert_ok(fsc_cluster_run(&co, llama_rank, &same));
        unlink(path);
    }
}

/* Saving as f16 or bf16 a finite weight beyond the type's range (70000 > f16's 65504; 3.4e38 > bf16's largest
 * finite 3.3895e38) fails with FSC_ERR_NUMERIC naming the tensor, and leaves no file (no temporary file either);
 * before, the value was written as inf, a file every loader then refused. The largest finite values (65504 as
 * f16) and ordinary weights save. Oracle: the save's status and message, the directory's listing, the stored
 * bits of the largest finite value. */
static void test_save_beyond_range_refused(void **st) {
    (void)st;
    char path[600];
    snprintf(path, sizeof path, "%s/range.safetensors", tmpdir);
    fsc_cluster_opts co = fsc_cluster_opts_default();
    fsc_device *dev;
    fsc_model *m;
    assert_ok(fsc_device_create("cpu", NULL, &dev));
    const fsc_llama_config c = tiny_llama(10000.0f, 1e-5f);
    assert_ok(fsc_llama_model_create(dev, &c, &m));
    const int t = 1; /* model.layers.0.self_attn.q_proj.weight */
    char tname[FSC_ST_MAX_NAME];
    snprintf(tname, sizeof tname, "%s", m->info[t].name);
    fsc_model_free(m);
    fsc_device_free(dev);
    static const struct { fsc_dtype dt; float v; int ok; } cases[] = {
        { FSC_F16, 70000.0f, 0 }, { FSC_BF16, 3.4e38f, 0 }, { FSC_F16, -70000.0f, 0 },
        { FSC_F16, 65504.0f, 1 }, { FSC_BF16, 1.0e38f, 1 }, { FSC_F16, 0.5f, 1 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        llama_job j = { .c = c, .save = path, .save_dt = cases[i].dt, .poke_tensor = t, .poke = cases[i].v };
        fsc_status s = fsc_cluster_run(&co, llama_rank, &j);
        if (cases[i].ok) {
            if (s != FSC_OK) fail_msg("%s save of %s holding %g: %s (%s)", fsc_dtype_name(cases[i].dt), tname,
                                      (double)cases[i].v, fsc_status_str(s), fsc_last_error());
            fsc_st_file *f;
            assert_ok(fsc_st_open(path, &f));
            float back[4];
            assert_ok(fsc_st_read_f32(f, fsc_st_find(f, tname), back, 0, 4));
            const uint16_t want = cases[i].dt == FSC_F16 ? fsc_f32_to_f16(cases[i].v) : fsc_f32_to_bf16(cases[i].v);
            const float wantf = cases[i].dt == FSC_F16 ? fsc_f16_to_f32(want) : fsc_bf16_to_f32(want);
            if (memcmp(&back[3], &wantf, sizeof wantf))
                fail_msg("%s save of %g: stored %.9g, expected %.9g", fsc_dtype_name(cases[i].dt),
                         (double)cases[i].v, (double)back[3], (double)wantf);
            fsc_st_close(f);
            unlink(path);
            continue;
        }
        if (s != FSC_ERR_NUMERIC || !strstr(fsc_last_error(), tname))
            fail_msg("%s save of %s holding the finite %g (beyond the type's range): %s (%s); expected "
                     "FSC_ERR_NUMERIC naming the tensor", fsc_dtype_name(cases[i].dt), tname, (double)cases[i].v,
                     fsc_status_str(s), fsc_last_error());
        DIR *d = opendir(tmpdir);
        assert_non_null(d);
        for (struct dirent *de; (de = readdir(d)) != NULL;)
            if (!strncmp(de->d_name, "range.safetensors", 17))
                fail_msg("%s save of %g failed yet left %s", fsc_dtype_name(cases[i].dt), (double)cases[i].v,
                         de->d_name);
        closedir(d);
    }
}

static int setup(void **st) {
    (void)st;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/fsc_test_stw_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **st) {
    (void)st;
    test_rmtree(tmpdir);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_find_and_read),  cmocka_unit_test(test_gpt2_files),
        cmocka_unit_test(test_llama_files),    cmocka_unit_test(test_gpt_load),
        cmocka_unit_test(test_untied_head_refused), cmocka_unit_test(test_save_dtype),
        cmocka_unit_test(test_failed_save_leaves_nothing),
        cmocka_unit_test(test_bad_model_config),
        cmocka_unit_test(test_llama_extra_bias_refused),
        cmocka_unit_test(test_llama_recorded_theta_eps),
        cmocka_unit_test(test_save_beyond_range_refused),
        cmocka_unit_test(test_unreadable_entries),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
