/* The Llama's tensor-parallel form (llama.h's fsc_llama_build through parallel.h's fsc_engine_create_built) on the
 * simulated cluster: a Llama of 2 layers, dim 32, 4 heads, 2 kv heads (4 kv heads where the tensor group has 4
 * ranks: kv heads must divide by it), AdamW with clipping, 3 steps of 8 sequences.
 *
 * Oracles:
 *   - tp 2 (with and without sequence parallelism) and tp 4 against tp 1: every step's loss within 1e-4 relative
 *     and the full parameters after 3 steps within 2e-3 absolute (the weights are O(0.02) to O(1); row-parallel
 *     products and the vocab-parallel cross entropy sum in another order, so bits differ by nature); the full
 *     parameters before any step bit-equal (each slice starts from the full tensor's keyed values);
 *   - at tp 2 on 4 ranks (dp 2 x tp 2): FSDP (full_shard, shard_grad_op, no_shard; block and model wrapping),
 *     ZeRO-1 and ZeRO-2 equal DDP bit for bit (every step's loss, the full parameters), with sequence parallelism
 *     too, and DDP and FSDP with the engine's layer checkpointing (layers recomputed in backward);
 *   - 3D: dp 2 x tp 2 x pp 2 on 8 ranks (GPipe and 1F1B without recomputation, GPipe recomputing every stage's
 *     forward in backward) equals dp 2 x tp 2 DDP accumulating the same 2 micro-batches bit for bit;
 *   - a training checkpoint written at tp 2 (FSDP, 4 ranks; sharded and full; 4 kv heads) loads at tp 1 (1 rank),
 *     at tp 2 x pp 2 and at tp 4 (4 ranks) with bit-equal full parameters;
 *   - at dp 2 x tp 2 (with and without sequence parallelism), one tensor rank passing other inputs or other targets
 *     than its tensor group's rank 0 fails the step on every rank with FSC_ERR_INVALID, the message naming the
 *     tensor rank, and updates nothing (the full parameters stay bit-equal); fsc_engine_eval fails so too, and
 *     fsc_engine_predict on other inputs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "modeltest.h"
#include "fsc/llama.h"

enum { GB = 8, MAXSTEPS = 3 };

static fsc_llama_config cfg(int kv_heads) {
    return (fsc_llama_config){ .layers = 2, .dim = 32, .heads = 4, .kv_heads = kv_heads, .ffn = 64, .seq = 8,
                               .vocab = 32, .rope_theta = 10000.0f, .norm_eps = 1e-5f };
}

typedef struct {
    int world, kv_heads;
    fsc_parallel_opts po;
    fsc_llama_build_arg arg;
    int steps;
    const char *save_ckpt, *load_ckpt;
    int save_full;         /* the full format (else sharded) */
    double loss[MAXSTEPS];
    size_t P;
    float *before, *after; /* (P) the full parameters before the first step and after the last */
} job;

static void sample(size_t i, const fsc_llama_config *c, int32_t *tok, int32_t *tgt) {
    for (int t = 0; t < c->seq; t++) {
        uint64_t h = (i * 1009 + (size_t)t) * 0x9E3779B97F4A7C15ull, h2 = (i * 1009 + (size_t)t + 1) * 0x9E3779B97F4A7C15ull;
        tok[t] = (int32_t)((h >> 33) % (uint64_t)c->vocab);
        tgt[t] = (int32_t)((h2 >> 33) % (uint64_t)c->vocab);
    }
}

static fsc_status job_rank(fsc_rank *r, void *arg) {
    job *j = arg;
    const fsc_llama_config c = j->arg.cfg;
    fsc_optim_config oc = { .kind = FSC_OPT_ADAMW, .lr = 1e-2f, .weight_decay = 0.01f, .beta1 = 0.9f,
                            .beta2 = 0.999f, .eps = 1e-8f };
    fsc_engine *e = NULL;
    FSC_TRY(fsc_engine_create_built(r, fsc_llama_build, &j->arg, &j->po, &oc, 7, &e));
    const int dp = fsc_engine_layout(e)->dp, di = fsc_engine_layout(e)->data, lb = GB / dp;
    int32_t *tok = malloc((size_t)lb * c.seq * sizeof *tok), *tgt = malloc((size_t)lb * c.seq * sizeof *tgt);
    fsc_status s = tok && tgt ? FSC_OK : fsc_error(FSC_ERR_NOMEM, "test: out of memory");
    if (s == FSC_OK && j->load_ckpt) s = fsc_ckpt_load(e, j->load_ckpt, NULL);
    if (s == FSC_OK && j->before) s = fsc_engine_full_params(e, r->rank == 0 ? j->before : NULL);
    for (int st = 0; st < j->steps && s == FSC_OK; st++) {
        for (int i = 0; i < lb; i++)
            sample((size_t)st * GB + (size_t)di * lb + i, &c, tok + (size_t)i * c.seq, tgt + (size_t)i * c.seq);
        fsc_step_info info;
        s = fsc_engine_step_model(e, tok, tgt, lb, GB, &info);
        if (s == FSC_OK && r->rank == 0) j->loss[st] = info.loss;
    }
    if (s == FSC_OK) s = fsc_engine_full_params(e, r->rank == 0 ? j->after : NULL);
    fsc_ckpt_save_opts so = fsc_ckpt_save_opts_default();
    if (j->save_full) so.format = FSC_CKPT_FULL;
    if (s == FSC_OK && j->save_ckpt) s = fsc_ckpt_save(e, j->save_ckpt, j->steps, &so);
    free(tok);
    free(tgt);
    fsc_engine_free(e);
    return s;
}

/* A job on dp x tp ranks (tp 1: no tensor group). */
static job make(int dp, int tp, int sp, int kv_heads, fsc_parallel_kind kind) {
    job j;
    memset(&j, 0, sizeof j);
    j.arg.cfg = cfg(kv_heads);
    j.arg.sp = sp;
    j.world = dp * tp;
    j.po = mt_opts(kind, 0.5f);
    j.po.tp = tp;
    j.po.sequence_parallel = sp;
    j.steps = MAXSTEPS;
    j.P = fsc_llama_num_params(&j.arg.cfg);
    return j;
}

static void train(job *j) { mt_train(j->world, 120, j->P, &j->after, job_rank, j); }
static void done(job *j) {
    free(j->after), free(j->before);
    j->after = j->before = NULL;
}

static void test_tp_against_tp1(void **st) {
    (void)st;
    for (int kvh = 2; kvh <= 4; kvh += 2) {
        job one = make(1, 1, 0, kvh, FSC_PAR_DDP);
        one.before = calloc(one.P, sizeof(float));
        train(&one);
        assert_true(one.loss[2] < one.loss[0]); /* it learns */
        for (int tp = 2; tp <= kvh; tp *= 2)
            for (int sp = 0; sp < 2; sp++) {
                job j = make(1, tp, sp, kvh, FSC_PAR_DDP);
                j.before = calloc(j.P, sizeof(float));
                train(&j);
                char what[96];
                snprintf(what, sizeof what, "tp %d%s (%d kv heads) against tp 1", tp, sp ? " sp" : "", kvh);
                assert_bits_equal(j.before, one.before, j.P, what);
                for (int s = 0; s < MAXSTEPS; s++)
                    if (!(fabs(j.loss[s] - one.loss[s]) <= 1e-4 * fabs(one.loss[s])))
                        fail_msg("%s: loss of step %d %.9g vs %.9g", what, s, j.loss[s], one.loss[s]);
                double worst = 0;
                for (size_t i = 0; i < j.P; i++) worst = fmax(worst, fabs((double)j.after[i] - one.after[i]));
                if (getenv("FSC_TEST_VERBOSE")) fprintf(stderr, "  %s: max |param difference| %.3g\n", what, worst);
                if (!(worst <= 2e-3)) fail_msg("%s: the parameters differ by %.3g (> 2e-3)", what, worst);
                done(&j);
            }
        done(&one);
    }
}

static void test_strategies_equal_ddp_at_tp2(void **st) {
    (void)st;
    for (int sp = 0; sp < 2; sp++) {
        job ddp = make(2, 2, sp, 2, FSC_PAR_DDP);
        train(&ddp);
        const mt_strategy cases[] = {
            { FSC_PAR_FSDP, FSC_SHARD_FULL, FSC_WRAP_BLOCK, 0, "fsdp full_shard" },
            { FSC_PAR_FSDP, FSC_SHARD_GRAD_OP, FSC_WRAP_BLOCK, 0, "fsdp shard_grad_op" },
            { FSC_PAR_FSDP, FSC_SHARD_NONE, FSC_WRAP_BLOCK, 0, "fsdp no_shard" },
            { FSC_PAR_FSDP, FSC_SHARD_FULL, FSC_WRAP_MODEL, 0, "fsdp full_shard, one unit" },
            { FSC_PAR_ZERO1, 0, 0, 0, "zero1" },
            { FSC_PAR_ZERO2, 0, 0, 0, "zero2" },
        };
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
            job j = make(2, 2, sp, 2, cases[k].kind);
            mt_apply(&j.po, &cases[k], 2000);
            train(&j);
            char what[96];
            snprintf(what, sizeof what, "%s at dp 2 x tp 2%s", cases[k].what, sp ? " sp" : "");
            mt_assert_same(ddp.loss, j.loss, MAXSTEPS, ddp.after, j.after, j.P, what);
            done(&j);
        }
        /* layer checkpointing: each layer recomputed in backward (its collectives again, in the same order) */
        for (int k = 0; k < 2; k++) {
            job j = make(2, 2, sp, 2, k ? FSC_PAR_FSDP : FSC_PAR_DDP);
            j.po.checkpoint = 1;
            train(&j);
            char what[96];
            snprintf(what, sizeof what, "%s with layer checkpointing at dp 2 x tp 2%s", k ? "fsdp" : "ddp",
                     sp ? " sp" : "");
            mt_assert_same(ddp.loss, j.loss, MAXSTEPS, ddp.after, j.after, j.P, what);
            done(&j);
        }
        done(&ddp);
    }
}

static void test_3d_equals_ddp_accumulating(void **st) {
    (void)st;
    job ddp = make(2, 2, 0, 2, FSC_PAR_DDP);
    mt_accumulate(&ddp.po, 2);
    train(&ddp);
    for (int k = 0; k < 3; k++) {
        job p = make(2, 2, 0, 2, FSC_PAR_DDP);
        p.world = 8;
        const int balance[2] = { 1, 1 };
        mt_pipeline(&p.po, k == 1, k == 2 ? FSC_PIPE_CKPT_ALWAYS : FSC_PIPE_CKPT_NEVER, balance);
        train(&p);
        static const char *what[3] = { "dp 2 x tp 2 x pp 2 GPipe", "dp 2 x tp 2 x pp 2 1F1B",
                                       "dp 2 x tp 2 x pp 2 GPipe recomputing" };
        mt_assert_same(ddp.loss, p.loss, MAXSTEPS, ddp.after, p.after, p.P, what[k]);
        done(&p);
    }
    done(&ddp);
}

static void test_checkpoint_tp2_loads_at_tp1(void **st) {
    (void)st;
    char dir[] = "/tmp/fsc-tp-llama-XXXXXX";
    assert_non_null(mkdtemp(dir));
    for (int full = 0; full < 2; full++) {
        char path[600], step[640];
        snprintf(path, sizeof path, "%s/%s", dir, full ? "full" : "sharded");
        snprintf(step, sizeof step, "%s/step-%08d", path, 2);
        job w = make(2, 2, 0, 4, FSC_PAR_FSDP); /* 4 kv heads: it loads at tp 4 too */
        w.steps = 2;
        w.save_ckpt = path;
        w.save_full = full;
        train(&w);
        job l = make(1, 1, 0, 4, FSC_PAR_DDP);
        l.steps = 0;
        l.load_ckpt = step;
        train(&l);
        assert_bits_equal(l.after, w.after, w.P, full ? "full checkpoint of tp 2 loaded at tp 1"
                                                       : "sharded checkpoint of tp 2 loaded at tp 1");
        job q = make(1, 2, 0, 4, FSC_PAR_DDP); /* tp 2 x pp 2 on 4 ranks */
        q.world = 4;
        const int balance[2] = { 1, 1 };
        mt_pipeline(&q.po, 0, FSC_PIPE_CKPT_NEVER, balance);
        q.steps = 0;
        q.load_ckpt = step;
        train(&q);
        assert_bits_equal(q.after, w.after, w.P, "checkpoint of dp 2 x tp 2 loaded at tp 2 x pp 2");
        job f = make(1, 4, 0, 4, FSC_PAR_FSDP); /* tp 4 */
        f.steps = 0;
        f.load_ckpt = step;
        train(&f);
        assert_bits_equal(f.after, w.after, w.P, "checkpoint of dp 2 x tp 2 loaded at tp 4");
        done(&w), done(&l), done(&q), done(&f);
    }
    test_rmtree(dir);
}

/* A step in which tensor rank 1 of data rank 0 changes one of its samples' first token (skew 1) or target (skew 2). */
typedef struct {
    job j;
    int skew;
    fsc_status st[4], eval[4], predict[4];
    char why[4][320];
} skewed;

static fsc_status skewed_rank(fsc_rank *r, void *arg) {
    skewed *k = arg;
    const fsc_llama_config c = k->j.arg.cfg;
    fsc_optim_config oc = { .kind = FSC_OPT_SGD, .lr = 1e-1f };
    fsc_engine *e = NULL;
    FSC_TRY(fsc_engine_create_built(r, fsc_llama_build, &k->j.arg, &k->j.po, &oc, 7, &e));
    const fsc_layout *l = fsc_engine_layout(e);
    const int lb = GB / l->dp;
    int32_t tok[GB * 8], tgt[GB * 8];
    for (int i = 0; i < lb; i++) sample((size_t)l->data * lb + i, &c, tok + i * c.seq, tgt + i * c.seq);
    if (l->data == 0 && l->tensor == 1) {
        int32_t *t = k->skew == 1 ? tok : tgt;
        t[0] = (t[0] + 1) % c.vocab;
    }
    fsc_status s = fsc_engine_full_params(e, r->rank == 0 ? k->j.before : NULL);
    fsc_step_info info;
    if (s == FSC_OK) {
        k->st[r->rank] = fsc_engine_step_model(e, tok, tgt, lb, GB, &info);
        snprintf(k->why[r->rank], sizeof k->why[r->rank], "%s", fsc_last_error());
    }
    if (s == FSC_OK) s = fsc_engine_full_params(e, r->rank == 0 ? k->j.after : NULL);
    double loss;
    float *out = malloc((size_t)lb * c.seq * c.vocab * sizeof(float));
    size_t per = 0;
    if (s == FSC_OK) k->eval[r->rank] = fsc_engine_eval(e, tok, tgt, lb, GB, &loss);
    if (s == FSC_OK) k->predict[r->rank] = out ? fsc_engine_predict(e, tok, lb, out, &per) : FSC_ERR_NOMEM;
    free(out);
    fsc_engine_free(e);
    return s;
}

static void test_tensor_ranks_pass_the_same_samples(void **st) {
    (void)st;
    for (int sp = 0; sp < 2; sp++)
        for (int skew = 1; skew <= 2; skew++) {
            skewed k = { .j = make(2, 2, sp, 2, FSC_PAR_DDP), .skew = skew };
            k.j.before = calloc(k.j.P, sizeof(float));
            mt_train(k.j.world, 120, k.j.P, &k.j.after, skewed_rank, &k);
            for (int r = 0; r < 4; r++)
                if (k.st[r] != FSC_ERR_INVALID)
                    fail_msg("sp %d, other %s on a tensor rank: rank %d's step returned %d (%s)", sp,
                             skew == 1 ? "inputs" : "targets", r, (int)k.st[r], k.why[r]);
            /* Megatron's order: world rank 1 is tensor rank 1 of data rank 0 */
            assert_non_null(strstr(k.why[1], "tensor rank 1 of data rank 0"));
            assert_non_null(strstr(k.why[1], skew == 1 ? "other inputs" : "other targets"));
            for (int r = 2; r < 4; r++) /* the other data group's ranks name the cause too, not the batch sum */
                if (!strstr(k.why[r], "another rank found that its tensor group passed different samples"))
                    fail_msg("sp %d, skew %d: rank %d says '%s'", sp, skew, r, k.why[r]);
            assert_bits_equal(k.j.after, k.j.before, k.j.P, "the parameters after the refused step");
            for (int r = 0; r < 4; r++) { /* evaluation refuses them too; predict reads the inputs only */
                assert_int_equal(k.eval[r], FSC_ERR_INVALID);
                assert_int_equal(k.predict[r], skew == 1 ? FSC_ERR_INVALID : FSC_OK);
            }
            done(&k.j);
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tensor_ranks_pass_the_same_samples),
        cmocka_unit_test(test_tp_against_tp1),
        cmocka_unit_test(test_strategies_equal_ddp_at_tp2),
        cmocka_unit_test(test_3d_equals_ddp_accumulating),
        cmocka_unit_test(test_checkpoint_tp2_loads_at_tp1),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
