/* Tests of lib/model/gpt_io.c: GPT-2 weights saved and loaded as safetensors in the Hugging Face layout,
 * and files for another model refused with messages naming the problem. */
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include "testutil.h"

static char g_dir[64];
static const fsc_gpt_config CFG = {.layers = 2, .dim = 32, .heads = 2, .seq = 16, .vocab = 64};

typedef struct {
    fsc_device *dev;
    fsc_gpt *m;
    float *params; /* device, flat */
} model;

static int setup_dir(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/fsc_test_gptio_XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown_dir(void **state) {
    (void)state;
    test_rmtree(g_dir);
    return 0;
}

/* A model on the CPU device with parameters bound to one flat buffer filled from seed (every element
 * distinct, biases and layer norms included, so a misplaced element is noticed). */
static void model_make(model *mm, const fsc_gpt_config *cfg, float seed) {
    assert_ok(fsc_device_create("cpu", NULL, &mm->dev));
    assert_ok(fsc_gpt_create(mm->dev, cfg, &mm->m));
    size_t n = fsc_gpt_num_params(cfg);
    assert_ok(fsc_device_alloc(mm->dev, FSC_TAG_PARAMS, n * sizeof(float), (void **)&mm->params));
    fsc_gpt_bind_flat(mm->m, mm->params, NULL);
    float *h = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) h[i] = seed + (float)i * 1e-3f;
    assert_ok(fsc_device_upload(mm->dev, mm->params, h, n * sizeof(float)));
    free(h);
}

static float *model_params(model *mm) {
    size_t n = fsc_gpt_num_params(&mm->m->cfg);
    float *h = malloc(n * sizeof(float));
    assert_ok(fsc_device_download(mm->dev, h, mm->params, n * sizeof(float)));
    return h;
}

static void model_free(model *mm) {
    fsc_device_release(mm->dev, mm->params);
    fsc_gpt_free(mm->m);
    fsc_device_free(mm->dev);
}

static void path_in_dir(char *buf, size_t cap, const char *name) { snprintf(buf, cap, "%s/%s", g_dir, name); }

/* Oracle: parameters after save + load into a differently filled model equal the saved ones bit for bit. */
static void test_roundtrip_bit_exact(void **state) {
    (void)state;
    char path[256];
    path_in_dir(path, sizeof path, "rt.safetensors");
    model a, b;
    model_make(&a, &CFG, 1.0f);
    model_make(&b, &CFG, -5.0f);
    assert_ok(fsc_gpt_save(a.m, path));
    assert_ok(fsc_gpt_check_file(&CFG, path));
    assert_ok(fsc_gpt_load(b.m, path));
    float *pa = model_params(&a), *pb = model_params(&b);
    assert_bits_equal(pb, pa, fsc_gpt_num_params(&CFG), "params after load");
    free(pa);
    free(pb);
    model_free(&a);
    model_free(&b);

    /* wte of 33000 x 32 floats is larger than gpt_io's 2^20-float host buffer: it goes in two pieces. */
    fsc_gpt_config big = {.layers = 1, .dim = 32, .heads = 1, .seq = 8, .vocab = 33000};
    model_make(&a, &big, 1.0f);
    model_make(&b, &big, -5.0f);
    assert_ok(fsc_gpt_save(a.m, path));
    assert_ok(fsc_gpt_load(b.m, path));
    pa = model_params(&a);
    pb = model_params(&b);
    assert_bits_equal(pb, pa, fsc_gpt_num_params(&big), "params after load (chunked)");
    free(pa);
    free(pb);
    model_free(&a);
    model_free(&b);
}

/* The HF GPT-2 state dict keys and shapes (transformer.* without the prefix), written out by hand. */
static void hf_layout(const fsc_gpt_config *c, int i, char *name, int *ndim, int64_t *shape) {
    static const char *blk[12] = {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                                  "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                                  "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"};
    int64_t C = c->dim;
    int64_t shp[12][2] = {{C, 0}, {C, 0}, {C, 3 * C}, {3 * C, 0}, {C, C}, {C, 0},
                          {C, 0}, {C, 0}, {C, 4 * C}, {4 * C, 0}, {4 * C, C}, {C, 0}};
    int n = 2 + 12 * c->layers + 2;
    if (i == 0) { strcpy(name, "wte.weight"); *ndim = 2; shape[0] = c->vocab; shape[1] = C; return; }
    if (i == 1) { strcpy(name, "wpe.weight"); *ndim = 2; shape[0] = c->seq; shape[1] = C; return; }
    if (i >= n - 2) { strcpy(name, i == n - 2 ? "ln_f.weight" : "ln_f.bias"); *ndim = 1; shape[0] = C; return; }
    int b = (i - 2) / 12, k = (i - 2) % 12;
    sprintf(name, "h.%d.%s", b, blk[k]);
    *ndim = shp[k][1] ? 2 : 1;
    shape[0] = shp[k][0];
    shape[1] = shp[k][1];
}

/* Oracle: the saved file holds exactly HF's GPT-2 keys (hand-written above) for L=2, in HF order, F32,
 * with HF's shapes, contiguous in that order, with the values of the model's tensors. */
static void test_hf_layout(void **state) {
    (void)state;
    char path[256], name[64];
    path_in_dir(path, sizeof path, "layout.safetensors");
    model a;
    model_make(&a, &CFG, 0.5f);
    assert_ok(fsc_gpt_save(a.m, path));
    fsc_st_file *f;
    assert_ok(fsc_st_open(path, &f));
    assert_int_equal(fsc_st_count(f), 2 + 12 * 2 + 2);
    assert_string_equal(fsc_st_metadata(f, "format"), "pt");
    float *pa = model_params(&a);
    size_t off = 0;
    for (int i = 0; i < fsc_st_count(f); i++) {
        int ndim;
        int64_t shape[2];
        hf_layout(&CFG, i, name, &ndim, shape);
        const fsc_st_entry *e = fsc_st_entry_at(f, i);
        assert_string_equal(e->name, name);
        assert_int_equal(e->dtype, FSC_F32);
        assert_int_equal(e->ndim, ndim);
        size_t numel = 1;
        for (int d = 0; d < ndim; d++) {
            assert_int_equal(e->shape[d], shape[d]);
            numel *= (size_t)shape[d];
        }
        assert_int_equal(e->begin, off * sizeof(float));
        float *v = malloc(numel * sizeof(float));
        assert_ok(fsc_st_read(f, e, v, 0, numel));
        assert_bits_equal(v, pa + off, numel, name);
        free(v);
        off += numel;
    }
    assert_int_equal(off, fsc_gpt_num_params(&CFG));
    free(pa);
    fsc_st_close(f);
    model_free(&a);
}

/* Write a file in the HF layout for CFG, except: tensor `skip` left out, tensor `rename` called
 * `new_name`, tensor `reshape` given shape [2*d0, d1/2], tensor `i32` stored as I32, an extra tensor. */
typedef struct { int skip, rename, reshape, i32; const char *new_name, *extra; } variant;

static void write_variant(const char *path, variant v) {
    fsc_st_writer *w;
    char name[64];
    assert_ok(fsc_st_writer_open(path, &w));
    int n = 2 + 12 * CFG.layers + 2, idx[64], k = 0;
    for (int i = 0; i < n; i++) {
        int ndim;
        int64_t shape[2];
        hf_layout(&CFG, i, name, &ndim, shape);
        if (i == v.skip) continue;
        if (i == v.reshape) { shape[0] *= 2; shape[1] /= 2; }
        assert_ok(fsc_st_writer_add(w, i == v.rename ? v.new_name : name, i == v.i32 ? FSC_I32 : FSC_F32, ndim,
                                    shape));
        idx[k++] = i;
    }
    int64_t one = 1;
    if (v.extra) assert_ok(fsc_st_writer_add(w, v.extra, FSC_F32, 1, &one));
    assert_ok(fsc_st_writer_begin_data(w));
    float *zeros = calloc(1 << 16, sizeof(float));
    for (int j = 0; j < k; j++) {
        int ndim;
        int64_t shape[2];
        hf_layout(&CFG, idx[j], name, &ndim, shape);
        uint64_t numel = ndim == 2 ? (uint64_t)(shape[0] * shape[1]) : (uint64_t)shape[0];
        assert_ok(fsc_st_writer_write(w, j, zeros, 0, numel));
    }
    if (v.extra) assert_ok(fsc_st_writer_write(w, k, zeros, 0, 1));
    free(zeros);
    assert_ok(fsc_st_writer_commit(w));
}

#define NONE (-1)

/* Load and check_file must both refuse path with FSC_ERR_FORMAT and a message containing needle, and
 * load must leave the model's parameters untouched. */
static void expect_refused(const char *path, const char *needle) {
    model a;
    model_make(&a, &CFG, 2.0f);
    float *before = model_params(&a);
    assert_err(fsc_gpt_check_file(&CFG, path), FSC_ERR_FORMAT, needle);
    assert_err(fsc_gpt_load(a.m, path), FSC_ERR_FORMAT, needle);
    float *after = model_params(&a);
    assert_bits_equal(after, before, fsc_gpt_num_params(&CFG), "params after a refused load");
    free(before);
    free(after);
    model_free(&a);
}

/* Oracle for the refusals below: the message names the offending tensor and the difference. */
static void test_wellformed_variant_loads(void **state) {
    (void)state;
    char path[256];
    path_in_dir(path, sizeof path, "ok.safetensors");
    write_variant(path, (variant){NONE, NONE, NONE, NONE, NULL, NULL});
    assert_ok(fsc_gpt_check_file(&CFG, path));
}

static void test_missing_key(void **state) {
    (void)state;
    char path[256];
    path_in_dir(path, sizeof path, "missing.safetensors");
    write_variant(path, (variant){2 + 12 + 5, NONE, NONE, NONE, NULL, NULL});
    expect_refused(path, "tensor h.1.attn.c_proj.bias is missing");
}

static void test_wrong_key(void **state) {
    (void)state;
    char path[256];
    path_in_dir(path, sizeof path, "wrong.safetensors");
    write_variant(path, (variant){NONE, 1, NONE, NONE, "transformer.wpe.weights", NULL});
    expect_refused(path, "tensor wpe.weight is missing");
    /* GPT2LMHeadModel's name for it (the base model's prefix) is the tensor itself */
    write_variant(path, (variant){NONE, 1, NONE, NONE, "transformer.wpe.weight", NULL});
    assert_ok(fsc_gpt_check_file(&CFG, path));
}

static void test_extra_key(void **state) {
    (void)state;
    char path[256];
    path_in_dir(path, sizeof path, "extra.safetensors");
    write_variant(path, (variant){NONE, NONE, NONE, NONE, NULL, "h.2.ln_1.weight"});
    expect_refused(path, "unexpected tensor h.2.ln_1.weight");
    write_variant(path, (variant){NONE, NONE, NONE, NONE, NULL, "lm_head.weight"}); /* the tied head, wrong shape */
    expect_refused(path, "lm_head.weight, the model's tied copy of wte.weight, has another shape");
    write_variant(path, (variant){NONE, NONE, NONE, NONE, NULL, "transformer.lm_head.weight"});
    expect_refused(path, "unexpected tensor transformer.lm_head.weight");
    write_variant(path, (variant){NONE, NONE, NONE, NONE, NULL, "h.2.attn.bias"});
    expect_refused(path, "unexpected tensor h.2.attn.bias");
    write_variant(path, (variant){NONE, NONE, NONE, NONE, NULL, "h.01.attn.bias"});
    expect_refused(path, "unexpected tensor h.01.attn.bias");
}

/* Oracle: HF's causal-mask buffers of blocks the model has are not parameters; a file with them loads. */
static void test_hf_mask_buffers_ignored(void **state) {
    (void)state;
    char path[256];
    path_in_dir(path, sizeof path, "mask.safetensors");
    write_variant(path, (variant){NONE, NONE, NONE, NONE, NULL, "h.1.attn.bias"});
    assert_ok(fsc_gpt_check_file(&CFG, path));
    write_variant(path, (variant){NONE, NONE, NONE, NONE, NULL, "h.0.attn.masked_bias"});
    model a;
    model_make(&a, &CFG, 1.0f);
    assert_ok(fsc_gpt_load(a.m, path));
    model_free(&a);
}

static void test_wrong_shape(void **state) {
    (void)state;
    char path[256];
    path_in_dir(path, sizeof path, "shape.safetensors");
    write_variant(path, (variant){NONE, NONE, 2 + FSC_B_ATTN_W, NONE, NULL, NULL});
    expect_refused(path, "h.0.attn.c_attn.weight has shape [64, 48] but the model expects [32, 96]");
    /* A file for a wider model: the first tensor already differs. */
    fsc_gpt_config wide = CFG;
    wide.dim = 64;
    model a;
    model_make(&a, &wide, 0.0f);
    assert_ok(fsc_gpt_save(a.m, path));
    model_free(&a);
    expect_refused(path, "wte.weight has shape [64, 64] but the model expects [64, 32]");
    /* A file for a deeper model: h.2.* are unexpected. */
    fsc_gpt_config deep = CFG;
    deep.layers = 3;
    model_make(&a, &deep, 0.0f);
    assert_ok(fsc_gpt_save(a.m, path));
    model_free(&a);
    expect_refused(path, "unexpected tensor h.2.");
}

static void test_wrong_dtype(void **state) {
    (void)state;
    char path[256];
    path_in_dir(path, sizeof path, "dtype.safetensors");
    write_variant(path, (variant){NONE, NONE, NONE, 2 + 12 + FSC_B_FC_W, NULL, NULL});
    expect_refused(path, "h.1.mlp.c_fc.weight has dtype I32 but the model expects floats (F32, BF16 or F16)");
}

/* Oracle: a truncated file is refused before any parameter changes, naming the file. */
static void test_truncated(void **state) {
    (void)state;
    char path[256];
    path_in_dir(path, sizeof path, "trunc.safetensors");
    model a;
    model_make(&a, &CFG, 3.0f);
    assert_ok(fsc_gpt_save(a.m, path));
    model_free(&a);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(truncate(path, sb.st_size - 4), 0);
    const char *pp = path;
    expect_refused(path, pp);
    expect_refused(path, "outside the data section");
    assert_int_equal(truncate(path, 20), 0);
    expect_refused(path, "larger than the file");
}

/* Set element el of tensor `name` of a model to v (through the flat parameter buffer). */
static void model_poke(model *mm, const char *name, size_t el, float v) {
    int t = fsc_gpt_param_index(&mm->m->cfg, name);
    assert_true(t >= 0);
    size_t off = 0;
    for (int i = 0; i < t; i++) off += mm->m->info[i].numel;
    assert_ok(fsc_device_upload(mm->dev, mm->params + off + el, &v, sizeof v));
}

/* Oracle: a file holding inf or NaN is refused with FSC_ERR_NUMERIC naming the file, the tensor and the
 * element, also past the first 2^20-float chunk of a tensor. */
static void test_nonfinite_refused(void **state) {
    (void)state;
    char path[256];
    path_in_dir(path, sizeof path, "nan.safetensors");
    model a, b;
    model_make(&a, &CFG, 1.0f);
    model_make(&b, &CFG, 2.0f);
    model_poke(&a, "h.1.attn.c_attn.bias", 3, NAN);
    assert_ok(fsc_gpt_save(a.m, path));
    assert_err(fsc_gpt_load(b.m, path), FSC_ERR_NUMERIC, "h.1.attn.c_attn.bias, element 3, is NaN");
    assert_err(fsc_gpt_load(b.m, path), FSC_ERR_NUMERIC, "nan.safetensors");
    model_free(&a);
    model_free(&b);
    fsc_gpt_config big = {.layers = 1, .dim = 32, .heads = 1, .seq = 8, .vocab = 33000};
    model_make(&a, &big, 1.0f);
    model_make(&b, &big, 2.0f);
    model_poke(&a, "wte.weight", 1050000, -INFINITY);
    assert_ok(fsc_gpt_save(a.m, path));
    assert_err(fsc_gpt_load(b.m, path), FSC_ERR_NUMERIC, "wte.weight, element 1050000, is -inf");
    model_free(&a);
    model_free(&b);
}

/* Oracle: an unbound model cannot be saved or loaded, and a missing file is an I/O error. */
static void test_misuse(void **state) {
    (void)state;
    char path[256];
    path_in_dir(path, sizeof path, "none.safetensors");
    fsc_device *dev;
    fsc_gpt *m;
    assert_ok(fsc_device_create("cpu", NULL, &dev));
    assert_ok(fsc_gpt_create(dev, &CFG, &m));
    assert_err(fsc_gpt_save(m, path), FSC_ERR_STATE, "wte.weight is not materialized");
    assert_err(fsc_gpt_load(m, path), FSC_ERR_STATE, "not materialized");
    assert_int_equal(access(path, F_OK), -1);
    fsc_gpt_free(m);
    fsc_device_free(dev);
    assert_err(fsc_gpt_check_file(&CFG, path), FSC_ERR_IO, "cannot open");
    fsc_gpt_config bad = CFG;
    bad.heads = 5;
    assert_err(fsc_gpt_check_file(&bad, path), FSC_ERR_INVALID, "heads");
}

/* fsc_gpt_config_check_json: the model's own text is accepted, another size is INVALID naming both, and a recorded
 * size that is no integer in [0, INT_MAX] (too large for an int, a fraction, negative) is FORMAT naming the field
 * (found by fuzz/fuzz_config_check.c: it was converted to int unchecked). */
static void test_config_check(void **state) {
    (void)state;
    char own[512];
    fsc_gpt_config_json(&CFG, own, sizeof own);
    assert_ok(fsc_gpt_config_check_json(&CFG, own));
    assert_err(fsc_gpt_config_check_json(&CFG, "{\"layers\":3,\"dim\":32,\"heads\":2,\"seq\":16,\"vocab\":64}"),
               FSC_ERR_INVALID, "written for a model of 3 layers");
    const char *bad[3][2] = { { "5.5e48", "heads (5.5e+48) is not an integer" }, { "2.5", "heads (2.5) is not" },
                              { "-2", "heads (-2) is not" } };
    for (int i = 0; i < 3; i++) {
        char rec[256];
        snprintf(rec, sizeof rec, "{\"layers\":2,\"dim\":32,\"heads\":%s,\"seq\":16,\"vocab\":64}", bad[i][0]);
        assert_err(fsc_gpt_config_check_json(&CFG, rec), FSC_ERR_FORMAT, bad[i][1]);
    }
    /* an MoE model's top-k, capacity factor and aux coefficient must match too (a GPT accepted any, silently changing
     * the routing and the objective of a resumed run; the Llama refused): its own text loads, each change is refused */
    fsc_gpt_config moe = CFG;
    moe.moe_experts = 4, moe.moe_top_k = 1, moe.moe_every = 1, moe.moe_capacity = 1.25f, moe.moe_aux = 0.01f;
    fsc_gpt_config_json(&moe, own, sizeof own);
    assert_ok(fsc_gpt_config_check_json(&moe, own));
    fsc_gpt_config other[3] = { moe, moe, moe };
    other[0].moe_top_k = 2, other[1].moe_capacity = 2.0f, other[2].moe_aux = 0.02f;
    for (int i = 0; i < 3; i++) {
        assert_err(fsc_gpt_config_check_json(&other[i], own), FSC_ERR_INVALID, "moe_top_k 1, moe_capacity 1.25");
    }
    fsc_gpt_config dflt = moe; /* 0 is the default: top-1, capacity 1.0 */
    dflt.moe_top_k = 0, dflt.moe_capacity = 0;
    fsc_gpt_config_json(&dflt, own, sizeof own);
    moe.moe_capacity = 1.0f;
    assert_ok(fsc_gpt_config_check_json(&moe, own));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_check),
        cmocka_unit_test(test_roundtrip_bit_exact),
        cmocka_unit_test(test_hf_layout),
        cmocka_unit_test(test_wellformed_variant_loads),
        cmocka_unit_test(test_missing_key),
        cmocka_unit_test(test_wrong_key),
        cmocka_unit_test(test_extra_key),
        cmocka_unit_test(test_hf_mask_buffers_ignored),
        cmocka_unit_test(test_wrong_shape),
        cmocka_unit_test(test_wrong_dtype),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_nonfinite_refused),
        cmocka_unit_test(test_misuse),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
