/* Non-finite numbers in the engine (lib/parallel/engine.c, lib/optim/gradnorm.c) on the simulated cluster,
 * with DDP and FSDP (and, for loading, ZeRO, tensor and pipeline parallelism).
 * Oracles:
 *   - a step whose loss or gradients hold inf/NaN applies no update on any rank: with nonfinite stop (the
 *     default) every rank fails with FSC_ERR_NUMERIC naming the optimizer step; with skip every rank
 *     reports the step skipped and the parameters keep their bits; max_skipped_steps in a row fail, with
 *     the count in the message;
 *   - f16 loss scaling never backs off below min_loss_scale (default 1), its runs stop after
 *     max_skipped_steps overflows in a row, a checkpoint at the floor is written and reads back, and a
 *     transient run of overflows that ends before the limit trains to the same bits as with the default;
 *   - fsc_engine_save_weights and fsc_ckpt_save refuse an engine holding inf/NaN (nothing is written) and
 *     fsc_engine_load_weights refuses a weights file holding one, naming the tensor and element;
 *   - ckpt verification (fsc_ckpt_check_file, whose piece reader checkpoint loads share) refuses a piece
 *     with a NaN whose checksum is right, naming the tensor and element.
 * Inf parameters are made by one SGD step with lr = weight decay = 1e30: every weight that is not 0
 * becomes +-inf, while that step's own loss is finite. */
#include <math.h>
#include <zlib.h>
#include "testutil.h"

#define W 4
#define MAXS 200

typedef enum { ACT_NONE = 0, ACT_SAVE } nf_action;

typedef struct {
    fsc_gpt_config cfg;
    fsc_parallel_opts po;
    fsc_optim_config oc;
    int world, batch, steps;
    const char *load;          /* weights to load before the first step */
    const char *resume;        /* a checkpoint to load (fsc_ckpt_load) before the first step, after load */
    const char *dir;           /* after step save_after: fsc_engine_save_weights(dir/w.safetensors) and
                                * fsc_ckpt_save(dir/ckpt) */
    int save_after;
    /* results per rank */
    fsc_status st[W];
    char msg[W][512];
    int done[W];               /* steps that returned FSC_OK */
    int skipped[W][MAXS];
    float scale[W][MAXS];
    double loss[W][MAXS];
    fsc_status load_st[W], wsave_st[W], csave_st[W], check_st[W];
    char load_msg[W][512], wsave_msg[W][512], csave_msg[W][512];
    float *params_a, *params_b; /* rank 0: full parameters after step 1 and after the last step run */
} nf_run;

static int32_t token(size_t i, int vocab) {
    uint64_t x = i * 0x9E3779B97F4A7C15ull;
    x ^= x >> 29;
    return (int32_t)((x + (i / 3)) % (uint64_t)vocab);
}

static void keep(char *dst, fsc_status s) { snprintf(dst, 512, "%s", s == FSC_OK ? "" : fsc_last_error()); }

static fsc_status nf_rank(fsc_rank *r, void *arg) {
    nf_run *run = arg;
    const int T = run->cfg.seq, B = run->batch, dp = r->world / (run->po.tp > 1 ? run->po.tp : 1) /
                                                   (run->po.pp > 1 ? run->po.pp : 1);
    fsc_engine *e = NULL;
    fsc_status s = fsc_engine_create(r, &run->cfg, &run->po, &run->oc, 77, &e);
    if (s != FSC_OK) return s;
    const int lb = B / dp, d = fsc_engine_layout(e)->data;
    int32_t *tok = malloc((size_t)lb * T * sizeof *tok), *tgt = malloc((size_t)lb * T * sizeof *tgt);
    if (!tok || !tgt) s = fsc_error(FSC_ERR_NOMEM, "test: out of memory");
    if (s == FSC_OK && run->load) {
        s = fsc_engine_load_weights(e, run->load);
        run->load_st[r->rank] = s;
        keep(run->load_msg[r->rank], s);
    }
    if (s == FSC_OK && run->resume) s = fsc_ckpt_load(e, run->resume, NULL);
    for (int step = 0; step < run->steps && s == FSC_OK; step++) {
        for (int i = 0; i < lb; i++) {
            size_t start = ((size_t)(step * B + d * lb + i) * T) % (4096 - T);
            for (int t = 0; t < T; t++) {
                tok[i * T + t] = token(start + t, run->cfg.vocab);
                tgt[i * T + t] = token(start + t + 1, run->cfg.vocab);
            }
        }
        fsc_step_info info = { 0 };
        s = fsc_engine_step(e, tok, tgt, lb, B, &info);
        run->skipped[r->rank][step] = info.skipped;
        run->scale[r->rank][step] = info.loss_scale;
        run->loss[r->rank][step] = info.loss;
        if (s != FSC_OK) break;
        run->done[r->rank] = step + 1;
        if (step == 0 && run->params_a) s = fsc_engine_full_params(e, r->rank == 0 ? run->params_a : NULL);
        if (s == FSC_OK && run->dir && step + 1 == run->save_after) {
            char p[512];
            run->check_st[r->rank] = fsc_engine_check_finite(e);
            snprintf(p, sizeof p, "%s/w.safetensors", run->dir);
            run->wsave_st[r->rank] = fsc_engine_save_weights(e, p);
            keep(run->wsave_msg[r->rank], run->wsave_st[r->rank]);
            snprintf(p, sizeof p, "%s/ckpt", run->dir);
            run->csave_st[r->rank] = fsc_ckpt_save(e, p, step + 1, NULL);
            keep(run->csave_msg[r->rank], run->csave_st[r->rank]);
        }
    }
    if (s == FSC_OK && run->params_b) s = fsc_engine_full_params(e, r->rank == 0 ? run->params_b : NULL);
    run->st[r->rank] = s;
    keep(run->msg[r->rank], s);
    free(tok);
    free(tgt);
    fsc_engine_free(e);
    return FSC_OK; /* the test reads every rank's own status */
}

static nf_run make(int world, fsc_parallel_kind kind, int steps) {
    nf_run r;
    memset(&r, 0, sizeof r);
    r.cfg = (fsc_gpt_config){ .layers = 2, .dim = 24, .heads = 2, .seq = 7, .vocab = 50 };
    r.po.kind = kind;
    r.po.accum = 1;
    r.po.reshard_after_forward = -1;
    r.po.param_dtype = r.po.reduce_dtype = FSC_F32;
    r.world = world;
    r.batch = 12;
    r.steps = steps;
    r.oc = (fsc_optim_config){ .kind = FSC_OPT_SGD, .lr = 1e-2f };
    return r;
}

/* One SGD step that makes every nonzero weight +-inf (its own loss is finite). */
static void blow_up(nf_run *r) { r->oc = (fsc_optim_config){ .kind = FSC_OPT_SGD, .lr = 1e30f, .weight_decay = 1e30f }; }

static void train(nf_run *r) {
    assert_ok(fsc_cluster_run(&(fsc_cluster_opts){ .world = r->world, .device = "cpu", .timeout_s = 30 }, nf_rank, r));
}

static void assert_all(const nf_run *r, const fsc_status *st, const char (*msg)[512], fsc_status want,
                       const char *needle, const char *what) {
    for (int k = 0; k < r->world; k++) {
        if (st[k] != want)
            fail_msg("%s: rank %d returned %s (expected %s): %s", what, k, fsc_status_str(st[k]), fsc_status_str(want),
                     msg ? msg[k] : "");
        if (msg && needle && !strstr(msg[k], needle))
            fail_msg("%s: rank %d's message \"%s\" lacks \"%s\"", what, k, msg[k], needle);
    }
}

static const struct {
    fsc_parallel_kind kind;
    int world;
    const char *name;
} strategies[] = { { FSC_PAR_DDP, 2, "ddp" }, { FSC_PAR_FSDP, 3, "fsdp" } };

static int exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0;
}

/* Stop (the default), f32 and bf16: step 1 makes inf weights; saving them is refused and writes nothing;
 * step 2's loss is not finite and every rank fails naming optimizer step 2. */
static void test_stop_and_refuse_to_save(void **state) {
    (void)state;
    for (size_t k = 0; k < sizeof strategies / sizeof strategies[0]; k++)
        for (int bf = 0; bf <= 1; bf++) {
            char dir[] = "/tmp/fsc_nf_XXXXXX", p[600], what[96];
            assert_non_null(mkdtemp(dir));
            nf_run r = make(strategies[k].world, strategies[k].kind, 3);
            if (bf) r.po.param_dtype = r.po.reduce_dtype = FSC_BF16;
            blow_up(&r);
            r.dir = dir;
            r.save_after = 1;
            snprintf(what, sizeof what, "%s %s", strategies[k].name, bf ? "bf16" : "f32");
            train(&r);
            for (int q = 0; q < r.world; q++) {
                assert_int_equal(r.done[q], 1);
                assert_true(isfinite(r.loss[q][0]));
                assert_int_equal(r.check_st[q], FSC_ERR_NUMERIC);
            }
            assert_all(&r, r.st, r.msg, FSC_ERR_NUMERIC, "optimizer step 2: the loss is", what);
            assert_all(&r, r.wsave_st, r.wsave_msg, FSC_ERR_NUMERIC, "inf", what);
            assert_all(&r, r.wsave_st, r.wsave_msg, FSC_ERR_NUMERIC, "parameter ", what);
            assert_all(&r, r.wsave_st, r.wsave_msg, FSC_ERR_NUMERIC, "not saved", what);
            assert_all(&r, r.csave_st, r.csave_msg, FSC_ERR_NUMERIC, "not written", what);
            assert_all(&r, r.csave_st, r.csave_msg, FSC_ERR_NUMERIC, ", element ", what);
            snprintf(p, sizeof p, "%s/w.safetensors", dir);
            assert_false(exists(p));
            snprintf(p, sizeof p, "%s/ckpt/step-00000001", dir);
            assert_false(exists(p));
            test_rmtree(dir);
        }
}

/* Skip: the steps after the blow-up are skipped on every rank without touching the parameters (bits), and
 * the third in a row fails with max_skipped_steps 3. */
static void test_skip_then_limit(void **state) {
    (void)state;
    const size_t P = fsc_gpt_num_params(&(fsc_gpt_config){ .layers = 2, .dim = 24, .heads = 2, .seq = 7, .vocab = 50 });
    for (size_t k = 0; k < sizeof strategies / sizeof strategies[0]; k++) {
        nf_run r = make(strategies[k].world, strategies[k].kind, 3);
        blow_up(&r);
        r.po.nonfinite = FSC_NONFINITE_SKIP;
        r.po.max_skipped_steps = 3;
        r.params_a = calloc(P, sizeof(float));
        r.params_b = calloc(P, sizeof(float));
        train(&r);
        for (int q = 0; q < r.world; q++) {
            assert_int_equal(r.st[q], FSC_OK);
            assert_int_equal(r.done[q], 3);
            assert_int_equal(r.skipped[q][0], 0);
            assert_int_equal(r.skipped[q][1], 1);
            assert_int_equal(r.skipped[q][2], 1);
        }
        assert_bits_equal(r.params_a, r.params_b, P, "skipped steps leave the parameters");
        /* a third skip in a row is the limit */
        r.steps = 4;
        train(&r);
        assert_all(&r, r.st, r.msg, FSC_ERR_NUMERIC, "3 steps in a row skipped", strategies[k].name);
        for (int q = 0; q < r.world; q++) assert_int_equal(r.done[q], 3);
        free(r.params_a);
        free(r.params_b);
    }
}

/* f16 whose huge initial scale overflows the first steps: with max_skipped_steps one above the longest run
 * of overflows the training equals the default's bit for bit; at its length the last overflow fails. */
static void test_f16_transient_overflows(void **state) {
    (void)state;
    const size_t P = fsc_gpt_num_params(&(fsc_gpt_config){ .layers = 2, .dim = 24, .heads = 2, .seq = 7, .vocab = 50 });
    for (size_t k = 0; k < sizeof strategies / sizeof strategies[0]; k++) {
        nf_run a = make(strategies[k].world, strategies[k].kind, 8);
        a.po.param_dtype = a.po.reduce_dtype = FSC_F16;
        a.po.init_loss_scale = 16777216.0f;
        a.oc = (fsc_optim_config){ .kind = FSC_OPT_ADAMW, .lr = 1e-2f };
        a.params_b = calloc(P, sizeof(float));
        train(&a);
        int lead = 0, run = 0, taken = 0;
        for (int s = 0; s < a.steps; s++) {
            run = a.skipped[0][s] ? run + 1 : 0;
            if (run > lead) lead = run;
            taken += !a.skipped[0][s];
        }
        assert_true(lead >= 1 && taken >= 1); /* overflows, then training */
        nf_run b = a;
        b.params_b = calloc(P, sizeof(float));
        b.po.max_skipped_steps = lead + 1;
        train(&b);
        for (int q = 0; q < b.world; q++) assert_int_equal(b.st[q], FSC_OK);
        assert_bits_equal(a.params_b, b.params_b, P, "f16 with max_skipped_steps above the overflows");
        nf_run c = a;
        c.params_b = NULL;
        c.po.max_skipped_steps = lead;
        train(&c);
        char want[64];
        snprintf(want, sizeof want, "%d steps in a row skipped", lead);
        assert_all(&c, c.st, c.msg, FSC_ERR_NUMERIC, want, strategies[k].name);
        free(a.params_b);
        free(b.params_b);
    }
}

/* Set element `el` of tensor `name` in a safetensors file to v. */
static void patch_float(const char *path, const char *name, size_t el, float v) {
    fsc_st_file *f = NULL;
    assert_ok(fsc_st_open(path, &f));
    const fsc_st_entry *en = fsc_st_find(f, name);
    assert_non_null(en);
    uint64_t begin = en->begin;
    fsc_st_close(f);
    FILE *fp = fopen(path, "r+b");
    assert_non_null(fp);
    uint64_t hlen = 0;
    unsigned char b8[8];
    assert_int_equal(fread(b8, 1, 8, fp), 8);
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | b8[i];
    assert_int_equal(fseek(fp, (long)(8 + hlen + begin + 4 * el), SEEK_SET), 0);
    assert_int_equal(fwrite(&v, sizeof v, 1, fp), 1);
    fclose(fp);
}

/* Initial weights of the test model as a file (a single-rank engine's). */
static fsc_status save_init(fsc_rank *r, void *arg) {
    const char *path = arg;
    fsc_gpt_config cfg = { .layers = 2, .dim = 24, .heads = 2, .seq = 7, .vocab = 50 };
    fsc_parallel_opts po = { .kind = FSC_PAR_NONE, .accum = 1, .reshard_after_forward = -1 };
    fsc_optim_config oc = { .kind = FSC_OPT_SGD, .lr = 1e-2f };
    fsc_engine *e = NULL;
    FSC_TRY(fsc_engine_create(r, &cfg, &po, &oc, 77, &e));
    fsc_status s = fsc_engine_save_weights(e, path);
    fsc_engine_free(e);
    return s;
}

/* Weights whose f16 copy overflows at any loss scale: the test model's initial weights (save_init) with one element
 * of wte set to 1e5, beyond f16's 65504 (finite in f32, so loading them succeeds), in a new temporary folder dir (a
 * mkdtemp template) as w = dir/big.safetensors. */
static void make_overflowing_weights(char *dir, char *w, size_t wcap) {
    assert_non_null(mkdtemp(dir));
    snprintf(w, wcap, "%s/big.safetensors", dir);
    assert_ok(fsc_cluster_run(&(fsc_cluster_opts){ .world = 1, .device = "cpu" }, save_init, w));
    patch_float(w, "wte.weight", 0, 1e5f);
}

/* A run of strategies[k] in f16 (parameters and reductions) that fails after max_skipped steps skipped in a row. */
static nf_run make_f16(size_t k, int steps, int max_skipped) {
    nf_run r = make(strategies[k].world, strategies[k].kind, steps);
    r.po.param_dtype = r.po.reduce_dtype = FSC_F16;
    r.po.max_skipped_steps = max_skipped;
    return r;
}

/* Remove what a run with dir set saved in dir (nf_rank: the checkpoints and w.safetensors). */
static void remove_saves(const char *dir) {
    char p[600];
    snprintf(p, sizeof p, "%s/ckpt", dir);
    test_rmtree(p);
    snprintf(p, sizeof p, "%s/w.safetensors", dir);
    unlink(p);
}

/* f16 whose weights overflow f16 (make_overflowing_weights): every step overflows at any scale. The scale backs off
 * to min_loss_scale and stays there, a checkpoint at the floor is written and verifies, and the step that makes
 * max_skipped_steps in a row fails. Without the floor the scale reaches 0 after about 165 skips and the
 * checkpoint's own metadata is invalid. */
static void test_f16_floor_and_limit(void **state) {
    (void)state;
    char dir[] = "/tmp/fsc_nf_XXXXXX", w[600], ck[600];
    make_overflowing_weights(dir, w, sizeof w);
    const float floors[] = { 0.0f, 4.0f }; /* 0: the default, 1 */
    for (size_t k = 0; k < sizeof strategies / sizeof strategies[0]; k++)
        for (int f = 0; f < 2; f++) {
            nf_run r = make_f16(k, 190, 180);
            r.po.min_loss_scale = floors[f];
            r.load = w;
            r.dir = dir;
            r.save_after = 175;
            train(&r);
            const float floor = f ? floors[f] : 1.0f;
            assert_all(&r, r.st, r.msg, FSC_ERR_NUMERIC, "180 steps in a row skipped", strategies[k].name);
            for (int q = 0; q < r.world; q++) {
                assert_int_equal(r.load_st[q], FSC_OK); /* 1e5 is finite: f16 overflows, the f32 master does not */
                assert_int_equal(r.done[q], 179);
                for (int s = 0; s < 180; s++) {
                    assert_int_equal(r.skipped[q][s], 1);
                    if (!(r.scale[q][s] >= floor)) fail_msg("step %d: loss scale %g below the floor %g", s + 1,
                                                            (double)r.scale[q][s], (double)floor);
                }
                assert_true(r.scale[q][178] == floor);
            }
            assert_all(&r, r.csave_st, r.csave_msg, FSC_OK, NULL, "checkpoint at the floor");
            snprintf(ck, sizeof ck, "%s/ckpt/step-00000175", dir);
            fsc_ckpt_meta *m = NULL;
            assert_ok(fsc_ckpt_meta_read(ck, &m));
            assert_true(m->scaler.scale == floor);
            fsc_ckpt_meta_free(m);
            remove_saves(dir);
        }
    test_rmtree(dir);
}

/* A run resumed from a checkpoint written after some steps skipped in a row counts on from them, as the run that
 * wrote it would have: with max_skipped_steps 4, a checkpoint after 3 overflows in a row (make_overflowing_weights)
 * and one more overflow after the resume is the limit. It was not: the count started again at 0 on a
 * resume, so a diverged run resumed from its checkpoints went past the limit and saved its weights. */
static void test_skips_in_row_resume(void **state) {
    (void)state;
    char dir[] = "/tmp/fsc_nf_XXXXXX", w[600], ck[600];
    make_overflowing_weights(dir, w, sizeof w);
    for (size_t k = 0; k < sizeof strategies / sizeof strategies[0]; k++) {
        nf_run r = make_f16(k, 3, 4);
        r.load = w;
        r.dir = dir;
        r.save_after = 3;
        train(&r);
        assert_all(&r, r.st, r.msg, FSC_OK, NULL, strategies[k].name);
        assert_all(&r, r.csave_st, r.csave_msg, FSC_OK, NULL, "checkpoint after 3 skipped steps");
        snprintf(ck, sizeof ck, "%s/ckpt/step-00000003", dir);
        fsc_ckpt_meta *m = NULL;
        assert_ok(fsc_ckpt_meta_read(ck, &m));
        assert_int_equal(m->skipped_in_row, 3);
        fsc_ckpt_meta_free(m);
        nf_run b = make_f16(k, 2, 4);
        b.resume = ck;
        train(&b);
        assert_all(&b, b.st, b.msg, FSC_ERR_NUMERIC, "4 steps in a row skipped", strategies[k].name);
        for (int q = 0; q < b.world; q++) assert_int_equal(b.done[q], 0);
        remove_saves(dir);
    }
    test_rmtree(dir);
}

/* Loading a weights file with one NaN fails on every rank of every strategy, naming tensor and element. */
/* A floor above the initial scale: the default initial scale (65536) is checked against min_loss_scale as a given
 * one is. It was not: with min_loss_scale 2^20 a run started at 65536 and its first overflow "backed off" to 2^20,
 * sixteen times the scale that had just overflowed. */
static void test_f16_floor_above_default_scale(void **state) {
    (void)state;
    nf_run r = make(1, FSC_PAR_NONE, 1);
    r.po.param_dtype = r.po.reduce_dtype = FSC_F16;
    r.po.min_loss_scale = 1048576.0f;
    fsc_status s = fsc_cluster_run(&(fsc_cluster_opts){ .world = 1, .device = "cpu", .timeout_s = 30 }, nf_rank, &r);
    assert_int_equal(s, FSC_ERR_INVALID);
    const char *want = "init_loss_scale 65536 (the default) is below min_loss_scale 1.04858e+06";
    if (!strstr(fsc_last_error(), want)) fail_msg("message \"%s\" lacks \"%s\"", fsc_last_error(), want);
    r = make(1, FSC_PAR_NONE, 1); /* at the floor is fine */
    r.po.param_dtype = r.po.reduce_dtype = FSC_F16;
    r.po.min_loss_scale = 65536.0f;
    train(&r);
    assert_all(&r, r.st, r.msg, FSC_OK, NULL, "a floor equal to the default scale");
}

static void test_load_refuses_nonfinite(void **state) {
    (void)state;
    char dir[] = "/tmp/fsc_nf_XXXXXX", w[600];
    assert_non_null(mkdtemp(dir));
    snprintf(w, sizeof w, "%s/nan.safetensors", dir);
    assert_ok(fsc_cluster_run(&(fsc_cluster_opts){ .world = 1, .device = "cpu" }, save_init, w));
    patch_float(w, "h.1.mlp.c_fc.weight", 37, NAN);
    const struct {
        fsc_parallel_kind kind;
        int world, tp, pp;
    } cases[] = { { FSC_PAR_NONE, 1, 0, 0 }, { FSC_PAR_DDP, 2, 0, 0 }, { FSC_PAR_FSDP, 3, 0, 0 },
                  { FSC_PAR_ZERO2, 2, 0, 0 }, { FSC_PAR_DDP, 2, 2, 0 }, { FSC_PAR_DDP, 2, 0, 2 } };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        nf_run r = make(cases[k].world, cases[k].kind, 1);
        r.po.tp = cases[k].tp;
        r.po.pp = cases[k].pp;
        if (r.po.pp > 1) r.po.no_sync = 1;
        r.load = w;
        train(&r);
        char what[64];
        snprintf(what, sizeof what, "%s world %d tp %d pp %d", fsc_parallel_kind_name(cases[k].kind), cases[k].world,
                 cases[k].tp, cases[k].pp);
        assert_all(&r, r.load_st, r.load_msg, FSC_ERR_NUMERIC, "h.1.mlp.c_fc.weight, element 37, is NaN", what);
        assert_all(&r, r.load_st, r.load_msg, FSC_ERR_NUMERIC, "nan.safetensors", what);
        for (int q = 0; q < r.world; q++) assert_int_equal(r.done[q], 0);
    }
    test_rmtree(dir);
}

/* A checkpoint piece holding a NaN under a correct checksum: verification refuses it, naming the tensor and
 * the element (piece first + offset). */
static void test_ckpt_piece_refuses_nonfinite(void **state) {
    (void)state;
    char dir[] = "/tmp/fsc_nf_XXXXXX", path[600];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/rank-00000-of-00001.safetensors", dir);
    float x[10];
    for (int i = 0; i < 10; i++) x[i] = (float)i;
    x[6] = -INFINITY;
    fsc_st_writer *wr = NULL;
    int64_t shape = 10;
    assert_ok(fsc_st_writer_open(path, &wr));
    assert_ok(fsc_st_writer_add(wr, "ln_f.bias@14", FSC_F32, 1, &shape));
    assert_ok(fsc_st_writer_begin_data(wr));
    assert_ok(fsc_st_writer_write(wr, 0, x, 0, 10));
    assert_ok(fsc_st_writer_commit(wr));
    char files[1][FSC_CKPT_MAX_FILE] = { "rank-00000-of-00001.safetensors" };
    fsc_ckpt_piece piece = { .file = 0, .first = 14, .n = 10,
                             .crc32 = (uint32_t)crc32(crc32(0L, Z_NULL, 0), (const Bytef *)x, sizeof x) };
    snprintf(piece.entry, sizeof piece.entry, "ln_f.bias@14");
    fsc_ckpt_tensor t = { .dtype = FSC_F32, .ndim = 1, .shape = { 24 }, .numel = 24, .npieces = 1, .pieces = &piece };
    snprintf(t.name, sizeof t.name, "ln_f.bias");
    fsc_ckpt_meta m;
    memset(&m, 0, sizeof m);
    m.nfiles = 1;
    m.files = files;
    m.ntensors = 1;
    m.tensors = &t;
    fsc_st_file *f = NULL;
    assert_ok(fsc_st_open(path, &f));
    assert_ok(fsc_ckpt_check_file(&m, 0, f, 0)); /* the layout alone is fine */
    assert_err(fsc_ckpt_check_file(&m, 0, f, 1), FSC_ERR_NUMERIC, "tensor ln_f.bias, element 20, is -inf");
    fsc_st_close(f);
    test_rmtree(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stop_and_refuse_to_save),
        cmocka_unit_test(test_skip_then_limit),
        cmocka_unit_test(test_f16_transient_overflows),
        cmocka_unit_test(test_f16_floor_and_limit),
        cmocka_unit_test(test_skips_in_row_resume),
        cmocka_unit_test(test_f16_floor_above_default_scale),
        cmocka_unit_test(test_load_refuses_nonfinite),
        cmocka_unit_test(test_ckpt_piece_refuses_nonfinite),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
