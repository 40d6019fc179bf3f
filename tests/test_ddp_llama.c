/* The Llama (llama.h) under every strategy on the simulated cluster, checked bit for bit against DDP.
 *
 * Oracles: FSDP (full_shard, shard_grad_op, hybrid_shard, no_shard; block, model and min-params wrapping),
 * ZeRO-1 and ZeRO-2 on 4 ranks equal DDP on 4 ranks bit for bit (every step's loss, the final parameters), with
 * clipping on; layer checkpointing (recompute in backward) equals DDP bit for bit; a 2-stage pipeline over 2 data
 * ranks (GPipe and 1F1B, every pipeline checkpoint mode) equals DDP on 2 ranks accumulating the same
 * micro-batches bit for bit; weights saved by FSDP on 4 ranks under the Hugging Face names load into a single
 * rank with the same bits; a training checkpoint written by FSDP on 4 ranks resumes on ZeRO-2 on 2 ranks bit for
 * bit as DDP on 2 ranks resumes it. Training lowers the loss. A GPT-2 of the same shape refuses the Llama's
 * checkpoint and the Llama the GPT's, each with a message naming both families. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "modeltest.h"
#include "fsc/llama.h"

enum { GB = 8, MAXSTEPS = 4 };

static fsc_llama_config tiny(void) {
    return (fsc_llama_config){ .layers = 3, .dim = 16, .heads = 4, .kv_heads = 2, .ffn = 24, .seq = 8,
                               .vocab = 32, .rope_theta = 10000.0f, .norm_eps = 1e-5f };
}

typedef struct {
    int world;
    fsc_parallel_opts po;
    int steps, first_step;
    const char *load_ckpt, *save_ckpt, *save_weights, *load_weights;
    double loss[MAXSTEPS];
    size_t P;
    float *after; /* (P) after training */
} job;

/* tokens of sample i: a fixed pseudo-random text, targets the next token */
static void sample(size_t i, const fsc_llama_config *c, int32_t *tok, int32_t *tgt) {
    for (int t = 0; t < c->seq; t++) {
        uint64_t h = (i * 1009 + (size_t)t) * 0x9E3779B97F4A7C15ull, h2 = (i * 1009 + (size_t)t + 1) * 0x9E3779B97F4A7C15ull;
        tok[t] = (int32_t)((h >> 33) % (uint64_t)c->vocab);
        tgt[t] = (int32_t)((h2 >> 33) % (uint64_t)c->vocab);
    }
}

static fsc_status job_rank(fsc_rank *r, void *arg) {
    job *j = arg;
    fsc_llama_config c = tiny();
    fsc_model *m = NULL;
    FSC_TRY(fsc_llama_model_create(r->dev, &c, &m));
    fsc_optim_config oc = { .kind = FSC_OPT_ADAMW, .lr = 1e-2f, .weight_decay = 0.01f, .beta1 = 0.9f,
                            .beta2 = 0.999f, .eps = 1e-8f };
    fsc_engine *e = NULL;
    fsc_status s = fsc_engine_create_model(r, m, &j->po, &oc, 7, &e);
    const int dp = s == FSC_OK ? fsc_engine_layout(e)->dp : 1, di = s == FSC_OK ? fsc_engine_layout(e)->data : 0;
    const int lb = GB / dp;
    int32_t *tok = malloc((size_t)lb * c.seq * sizeof *tok), *tgt = malloc((size_t)lb * c.seq * sizeof *tgt);
    if (s == FSC_OK && (!tok || !tgt)) s = fsc_error(FSC_ERR_NOMEM, "test: out of memory");
    if (s == FSC_OK && j->load_ckpt) s = fsc_ckpt_load(e, j->load_ckpt, NULL);
    if (s == FSC_OK && j->load_weights) s = fsc_engine_load_weights(e, j->load_weights);
    for (int st = j->first_step; st < j->first_step + j->steps && s == FSC_OK; st++) {
        for (int i = 0; i < lb; i++)
            sample((size_t)st * GB + (size_t)di * lb + i, &c, tok + (size_t)i * c.seq, tgt + (size_t)i * c.seq);
        fsc_step_info info;
        s = fsc_engine_step_model(e, tok, tgt, lb, GB, &info);
        if (s == FSC_OK && r->rank == 0) j->loss[st - j->first_step] = info.loss;
    }
    if (s == FSC_OK) s = fsc_engine_full_params(e, r->rank == 0 ? j->after : NULL);
    if (s == FSC_OK && j->save_ckpt) s = fsc_ckpt_save(e, j->save_ckpt, j->first_step + j->steps, NULL);
    if (s == FSC_OK && j->save_weights) s = fsc_engine_save_weights(e, j->save_weights);
    free(tok);
    free(tgt);
    fsc_engine_free(e);
    fsc_model_free(m);
    return s;
}

static job make(int world, fsc_parallel_kind kind) {
    job j;
    memset(&j, 0, sizeof j);
    fsc_llama_config c = tiny();
    j.world = world;
    j.po = mt_opts(kind, 0.5f);
    j.steps = 3;
    j.P = fsc_llama_num_params(&c);
    return j;
}

static void train(job *j) {
    mt_train(j->world, 60, j->P, &j->after, job_rank, j);
}

static void done(job *j) {
    free(j->after);
    j->after = NULL;
}

static void assert_same(const job *a, const job *b, const char *what) {
    mt_assert_same(a->loss, b->loss, a->steps, a->after, b->after, a->P, what);
}

static void test_strategies_equal_ddp(void **st) {
    (void)st;
    job ddp = make(4, FSC_PAR_DDP);
    train(&ddp);
    assert_true(ddp.loss[2] < ddp.loss[0]); /* it learns */
    assert_true(fabs(ddp.loss[0] - log(32.0)) < 0.1); /* starts near uniform over the vocabulary */
    const mt_strategy cases[] = {
        { FSC_PAR_FSDP, FSC_SHARD_FULL, FSC_WRAP_BLOCK, 0, "fsdp full_shard" },
        { FSC_PAR_FSDP, FSC_SHARD_GRAD_OP, FSC_WRAP_BLOCK, 0, "fsdp shard_grad_op" },
        { FSC_PAR_FSDP, FSC_SHARD_HYBRID, FSC_WRAP_BLOCK, 0, "fsdp hybrid_shard" },
        { FSC_PAR_FSDP, FSC_SHARD_NONE, FSC_WRAP_BLOCK, 0, "fsdp no_shard" },
        { FSC_PAR_FSDP, FSC_SHARD_FULL, FSC_WRAP_MODEL, 0, "fsdp full_shard, one unit" },
        { FSC_PAR_FSDP, FSC_SHARD_FULL, FSC_WRAP_MIN_PARAMS, 0, "fsdp full_shard, min_params" },
        { FSC_PAR_FSDP, FSC_SHARD_FULL, FSC_WRAP_BLOCK, 1, "fsdp full_shard, layer checkpointing" },
        { FSC_PAR_ZERO1, 0, 0, 0, "zero1" },
        { FSC_PAR_ZERO2, 0, 0, 0, "zero2" },
        { FSC_PAR_DDP, 0, 0, 1, "ddp, layer checkpointing" },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        job j = make(4, cases[k].kind);
        mt_apply(&j.po, &cases[k], 2000);
        train(&j);
        assert_same(&ddp, &j, cases[k].what);
        done(&j);
    }
    done(&ddp);
}

static void test_pipeline_equals_ddp_accumulating(void **st) {
    (void)st;
    job ddp = make(2, FSC_PAR_DDP);
    mt_accumulate(&ddp.po, 2);
    train(&ddp);
    const fsc_pipe_checkpoint modes[3] = { FSC_PIPE_CKPT_EXCEPT_LAST, FSC_PIPE_CKPT_ALWAYS, FSC_PIPE_CKPT_NEVER };
    for (int k = 0; k < 4; k++) {
        job p = make(4, k == 3 ? FSC_PAR_FSDP : FSC_PAR_DDP);
        const int balance[2] = { 1, 2 }; /* layer 0 on stage 0 (with the embedding), 1 and 2 with the head */
        mt_pipeline(&p.po, k == 1, modes[k % 3], balance);
        train(&p);
        char what[64];
        snprintf(what, sizeof what, "pipeline case %d", k);
        assert_same(&ddp, &p, what);
        done(&p);
    }
    done(&ddp);
}

static void test_weights_and_checkpoints(void **st) {
    (void)st;
    char dir[] = "/tmp/fsc_test_ddp_llama_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char wpath[256], cpath[256];
    snprintf(wpath, sizeof wpath, "%s/w.safetensors", dir);
    snprintf(cpath, sizeof cpath, "%s/step-00000002", dir);
    job a = make(4, FSC_PAR_FSDP); /* two steps; weights and a checkpoint saved */
    a.steps = 2;
    a.save_weights = wpath;
    a.save_ckpt = dir;
    train(&a);
    /* the weight file holds every tensor under its Hugging Face name */
    fsc_st_file *f = NULL;
    assert_ok(fsc_st_open(wpath, &f));
    const fsc_st_entry *t = fsc_st_find(f, "model.layers.2.self_attn.k_proj.weight");
    assert_non_null(t);
    assert_int_equal(t->shape[0], 8);
    assert_int_equal(t->shape[1], 16);
    assert_non_null(fsc_st_find(f, "lm_head.weight"));
    assert_non_null(fsc_st_find(f, "model.layers.0.mlp.down_proj.weight"));
    fsc_st_close(f);
    job one = make(1, FSC_PAR_NONE); /* loads them: no steps, the same bits */
    one.steps = 0;
    one.load_weights = wpath;
    train(&one);
    assert_bits_equal(one.after, a.after, a.P, "weights loaded on one rank");
    job d2 = make(2, FSC_PAR_DDP), z2 = make(2, FSC_PAR_ZERO2); /* the checkpoint resharded */
    d2.steps = z2.steps = 2;
    d2.first_step = z2.first_step = 2;
    d2.load_ckpt = z2.load_ckpt = cpath;
    train(&d2);
    train(&z2);
    assert_same(&d2, &z2, "zero2 on 2 ranks vs ddp on 2 ranks, resumed from fsdp on 4");
    done(&a), done(&one), done(&d2), done(&z2);
    test_rmtree(dir);
}

/* The GPT-2 of the Llama's shape on one rank: one step, then a checkpoint saved into save, or only a load. */
typedef struct {
    const char *save, *load;
} gpt_job;

static fsc_status gpt_rank(fsc_rank *r, void *arg) {
    const gpt_job *g = arg;
    const fsc_llama_config lc = tiny();
    fsc_gpt_config c = { .layers = lc.layers, .dim = lc.dim, .heads = lc.heads, .seq = lc.seq, .vocab = lc.vocab };
    fsc_parallel_opts po = { .kind = FSC_PAR_NONE, .accum = 1, .reshard_after_forward = -1 };
    fsc_optim_config oc = { .kind = FSC_OPT_ADAMW, .lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f };
    fsc_engine *e = NULL;
    FSC_TRY(fsc_engine_create(r, &c, &po, &oc, 7, &e));
    int32_t tok[8], tgt[8];
    sample(0, &lc, tok, tgt);
    fsc_step_info info;
    fsc_status s = g->load ? fsc_ckpt_load(e, g->load, NULL) : fsc_engine_step(e, tok, tgt, 1, 1, &info);
    if (s == FSC_OK && g->save) s = fsc_ckpt_save(e, g->save, 1, NULL);
    fsc_engine_free(e);
    return s;
}

static void test_family_refused(void **st) {
    (void)st;
    char dir[] = "/tmp/fsc_test_llama_family_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char ldir[256], gdir[256], lpath[300], gpath[300];
    snprintf(ldir, sizeof ldir, "%s/llama", dir);
    snprintf(gdir, sizeof gdir, "%s/gpt", dir);
    snprintf(lpath, sizeof lpath, "%s/step-00000001", ldir);
    snprintf(gpath, sizeof gpath, "%s/step-00000001", gdir);
    job l = make(1, FSC_PAR_NONE); /* a Llama checkpoint */
    l.steps = 1;
    l.save_ckpt = ldir;
    train(&l);
    fsc_cluster_opts co = { .world = 1, .device = "cpu", .timeout_s = 60, .threads_per_rank = 1 };
    gpt_job g = { .save = gdir }; /* a GPT checkpoint, which loads back into the GPT */
    assert_ok(fsc_cluster_run(&co, gpt_rank, &g));
    g = (gpt_job){ .load = gpath };
    assert_ok(fsc_cluster_run(&co, gpt_rank, &g));
    g = (gpt_job){ .load = lpath }; /* the GPT refuses the Llama's */
    assert_err(fsc_cluster_run(&co, gpt_rank, &g), FSC_ERR_INVALID,
               "written for a model of family 'llama' (load it into that model: fsc-train --model llama); this "
               "engine's model is a GPT-2 (family gpt2)");
    job back = make(1, FSC_PAR_NONE); /* the Llama refuses the GPT's */
    back.steps = 0;
    back.load_ckpt = gpath;
    back.after = calloc(back.P, sizeof(float));
    assert_non_null(back.after);
    assert_err(fsc_cluster_run(&co, job_rank, &back), FSC_ERR_INVALID,
               "written for a GPT-2 model (no family recorded; load it into the GPT: fsc-train --model gpt2); this "
               "engine's model is a Llama (family llama)");
    job same = make(1, FSC_PAR_NONE); /* and loads its own */
    same.steps = 0;
    same.load_ckpt = lpath;
    train(&same);
    assert_bits_equal(same.after, l.after, l.P, "the Llama's own checkpoint");
    done(&l), done(&back), done(&same);
    test_rmtree(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_strategies_equal_ddp),
        cmocka_unit_test(test_pipeline_equals_ddp_accumulating),
        cmocka_unit_test(test_weights_and_checkpoints),
        cmocka_unit_test(test_family_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
