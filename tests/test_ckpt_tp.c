/* Training checkpoints with tensor parallelism (lib/ckpt with lib/parallel/tensor.c's holdings in full-tensor
 * coordinates). Oracles:
 * - resume is exact at the same layout: dp 2 x tp 2 (DDP) and dp 2 x tp 2 x pp 2 (ZeRO-1) trained 2 steps,
 *   saved, loaded into a new engine and trained 2 more give the bits of 4 steps straight: losses, full
 *   parameters (fsc_engine_full_params) and the gathered optimizer state (fsc_ckpt_full_state);
 * - resharding: a checkpoint of dp 2 x tp 2 loads into a single rank (tp 1), into dp 2 x tp 4 with FSDP and,
 *   in the full format, into tp 4 with ZeRO-2; one of tp 1 loads into dp 2 x tp 2 with ZeRO-1: the loaded
 *   parameters and optimizer state equal the saved ones bit for bit, and training continues (two more steps
 *   on tp 1 and on tp 4 agree within the tensor-parallel tolerance, 1e-5 relative in the loss);
 * - the metadata stores full tensors (global shapes) and the replicated tensors once. */
#include <math.h>
#include "ckpttest.h"
#include "test_tp_util.h"

enum { GB = 8, NSTEPS = 4, MAXW = 8 };

static fsc_gpt_config cfg(void) { return (fsc_gpt_config){ .layers = 2, .dim = 24, .heads = 4, .seq = 8, .vocab = 48 }; }

typedef struct {
    fsc_parallel_opts po;
    int world, from, to;
    const char *load, *save_dir;
    fsc_ckpt_format format;
    double loss[NSTEPS + 2];
    float *params, *state[2];
} job;

static job make(int dp, int tp, int pp, fsc_parallel_kind kind) {
    job j;
    memset(&j, 0, sizeof j);
    j.po = (fsc_parallel_opts){ .kind = kind, .tp = tp, .pp = pp, .accum = pp > 1 ? 2 : 1, .no_sync = 1,
                                .reshard_after_forward = -1, .param_dtype = FSC_F32, .reduce_dtype = FSC_F32,
                                .clip = 0.5f };
    j.world = dp * tp * pp;
    return j;
}

static fsc_status rank_fn(fsc_rank *r, void *arg) {
    job *j = arg;
    fsc_gpt_config c = cfg();
    fsc_optim_config oc = { .kind = FSC_OPT_ADAMW, .lr = 1e-3f, .weight_decay = 0.1f, .beta1 = 0.9f,
                            .beta2 = 0.999f, .eps = 1e-8f };
    fsc_engine *e = NULL;
    FSC_TRY(fsc_engine_create(r, &c, &j->po, &oc, 9, &e));
    const fsc_layout *l = fsc_engine_layout(e);
    const int lb = GB / l->dp;
    int32_t tok[GB * 8], tgt[GB * 8];
    int64_t step = -1;
    fsc_status s = j->load ? fsc_ckpt_load(e, j->load, &step) : FSC_OK;
    if (s == FSC_OK && j->load && step != j->from)
        s = fsc_error(FSC_ERR_INTERNAL, "loaded step %lld, want %d", (long long)step, j->from);
    for (int st = j->from; st < j->to && s == FSC_OK; st++) {
        tt_batch(st, l->data * lb, lb, tok, tgt);
        fsc_step_info info;
        s = fsc_engine_step(e, tok, tgt, lb, GB, &info);
        if (s == FSC_OK && r->rank == 0) j->loss[st] = info.loss;
    }
    if (s == FSC_OK) s = fsc_engine_full_params(e, r->rank == 0 ? j->params : NULL);
    for (int k = 0; k < 2 && s == FSC_OK; k++) s = fsc_ckpt_full_state(e, k, r->rank == 0 ? j->state[k] : NULL);
    fsc_ckpt_save_opts so = { .format = j->format };
    if (s == FSC_OK && j->save_dir) s = fsc_ckpt_save(e, j->save_dir, j->to, &so);
    fsc_engine_free(e);
    return s;
}

static void run(job *j) {
    fsc_gpt_config c = cfg();
    size_t P = fsc_gpt_num_params(&c);
    j->params = calloc(P, sizeof(float));
    j->state[0] = calloc(P, sizeof(float));
    j->state[1] = calloc(P, sizeof(float));
    assert_ok(tt_run(j->world, rank_fn, j));
}

static void done(job *j) {
    free(j->params);
    free(j->state[0]);
    free(j->state[1]);
}

static void assert_same_state(const job *a, const job *b, const char *what) {
    fsc_gpt_config c = cfg();
    size_t P = fsc_gpt_num_params(&c);
    char msg[160];
    size_t nz = 0;
    for (size_t i = 0; i < P; i++) nz += a->params[i] != 0.0f && a->state[1][i] != 0.0f;
    if (nz < P / 2) fail_msg("%s: only %zu of %zu parameters and states are nonzero (nothing gathered?)", what, nz, P);
    snprintf(msg, sizeof msg, "%s: parameters", what);
    assert_bits_equal(a->params, b->params, P, msg);
    for (int k = 0; k < 2; k++) {
        snprintf(msg, sizeof msg, "%s: optimizer state %d", what, k);
        assert_bits_equal(a->state[k], b->state[k], P, msg);
    }
}

/* Train [0, 2), save; load and train [2, 4): the bits of [0, 4) straight. */
static void resume_exact(int dp, int tp, int pp, fsc_parallel_kind kind, const char *what) {
    char *dir = ct_tmpdir(), path[1024];
    job straight = make(dp, tp, pp, kind), first = straight, second = straight;
    straight.to = NSTEPS;
    run(&straight);
    first.to = 2, first.save_dir = dir;
    run(&first);
    ct_step_path(path, sizeof path, dir, 2);
    second.from = 2, second.to = NSTEPS, second.load = path;
    run(&second);
    for (int s = 2; s < NSTEPS; s++)
        if (memcmp(&straight.loss[s], &second.loss[s], sizeof(double)) != 0)
            fail_msg("%s: loss of step %d differs: %.17g vs %.17g", what, s, straight.loss[s], second.loss[s]);
    assert_same_state(&straight, &second, what);
    done(&straight), done(&first), done(&second);
    ct_rmtree(dir);
}

static void test_resume_dp2_tp2(void **st) {
    (void)st;
    resume_exact(2, 2, 1, FSC_PAR_DDP, "dp2 x tp2 ddp");
}

static void test_resume_dp2_tp2_pp2(void **st) {
    (void)st;
    resume_exact(2, 2, 2, FSC_PAR_ZERO1, "dp2 x tp2 x pp2 zero1");
}

/* The checkpoint of `src` (trained [0, 2) and saved) loaded into dst: the same state bit for bit; then dst
 * trains two more steps. */
static void load_into(const job *src, const char *dir, job *dst, const char *what) {
    char path[1024];
    ct_step_path(path, sizeof path, dir, 2);
    job probe = *dst;
    probe.from = probe.to = 2, probe.load = path;
    run(&probe);
    assert_same_state(src, &probe, what);
    done(&probe);
    dst->from = 2, dst->to = NSTEPS, dst->load = path;
    run(dst);
    for (int s = 2; s < NSTEPS; s++)
        if (!isfinite(dst->loss[s])) fail_msg("%s: loss of step %d is %g", what, s, dst->loss[s]);
}

static void close_losses(const job *a, const job *b, const char *what) {
    for (int s = 2; s < NSTEPS; s++)
        if (!(fabs(a->loss[s] - b->loss[s]) <= 1e-5 * fabs(b->loss[s])))
            fail_msg("%s: loss of step %d: %.9g vs %.9g", what, s, a->loss[s], b->loss[s]);
}

static void test_reshard_from_tp2(void **st) {
    (void)st;
    for (int full = 0; full < 2; full++) {
        char *dir = ct_tmpdir();
        job src = make(2, 2, 1, full ? FSC_PAR_FSDP : FSC_PAR_DDP);
        src.to = 2, src.save_dir = dir, src.format = full ? FSC_CKPT_FULL : FSC_CKPT_SHARDED;
        run(&src);
        job one = make(1, 1, 1, FSC_PAR_NONE), four = make(2, 4, 1, full ? FSC_PAR_ZERO2 : FSC_PAR_FSDP);
        if (full) four = make(1, 4, 1, FSC_PAR_ZERO2);
        load_into(&src, dir, &one, full ? "full tp2 fsdp -> tp1" : "tp2 ddp -> tp1 (one rank)");
        load_into(&src, dir, &four, full ? "full tp2 fsdp -> tp4 zero2" : "tp2 ddp -> dp2 x tp4 fsdp");
        close_losses(&four, &one, "tp4 continuation vs tp1");
        /* the metadata: full shapes, one piece per run (a c_fc row of a tensor rank), replicated tensors once */
        char path[1024];
        ct_step_path(path, sizeof path, dir, 2);
        fsc_ckpt_meta *m = NULL;
        assert_ok(fsc_ckpt_verify(path, &m));
        const fsc_ckpt_tensor *fc = fsc_ckpt_meta_find(m, "h.0.mlp.c_fc.weight");
        const fsc_ckpt_tensor *ln = fsc_ckpt_meta_find(m, "optim.v.h.1.ln_2.weight");
        assert_non_null(fc);
        assert_non_null(ln);
        assert_int_equal(fc->shape[0], 24);
        assert_int_equal(fc->shape[1], 96);
        assert_int_equal(fc->npieces, full ? 1 : 2 * 24);
        assert_int_equal(ln->npieces, 1);
        fsc_ckpt_meta_free(m);
        done(&src), done(&one), done(&four);
        ct_rmtree(dir);
    }
}

static void test_reshard_from_tp1(void **st) {
    (void)st;
    char *dir = ct_tmpdir();
    job src = make(2, 1, 1, FSC_PAR_DDP);
    src.to = 2, src.save_dir = dir;
    run(&src);
    job two = make(2, 2, 1, FSC_PAR_ZERO1);
    load_into(&src, dir, &two, "tp1 ddp -> dp2 x tp2 zero1");
    done(&src), done(&two);
    ct_rmtree(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resume_dp2_tp2),
        cmocka_unit_test(test_resume_dp2_tp2_pp2),
        cmocka_unit_test(test_reshard_from_tp2),
        cmocka_unit_test(test_reshard_from_tp1),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
