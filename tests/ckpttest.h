/* Shared by the checkpoint tests: a job trains the small GPT of partest.h on the simulated cluster for
 * steps [from, to) of the synthetic data order, optionally after loading or resuming a checkpoint and
 * optionally saving one at the end, and collects the losses, the full parameters and the gathered
 * optimizer state. Temporary directories come from mkdtemp and are removed by ct_rmtree. */
#ifndef FSC_CKPTTEST_H
#define FSC_CKPTTEST_H
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>
#include "partest.h"

typedef struct {
    pt_run run;                /* model, parallel and optimizer options, world, batch, seed */
    int from, to;              /* train steps [from, to) */
    const char *load;          /* a checkpoint directory to load first (NULL: none) */
    const char *resume;        /* or a DIR to resume from (the newest checkpoint in it) */
    int weights_only;          /* load: fsc_ckpt_load_weights (the parameters only) instead of fsc_ckpt_load */
    const char *weights_file;  /* or a weights file to load first (fsc_engine_load_weights) */
    const char *save_dir;      /* save into this DIR after training, as step `to` (NULL: no save) */
    fsc_ckpt_save_opts save;
    /* results */
    double loss[PT_MAX_STEPS]; /* by absolute step */
    int64_t loaded_step;
    float *params;             /* (P) after training */
    float *state[2];           /* (P) gathered optimizer states after training */
} ct_job;

static inline ct_job ct_make(int world, fsc_parallel_kind kind) {
    ct_job j;
    memset(&j, 0, sizeof j);
    j.run = pt_make(world, kind);
    j.run.batch = 24;
    j.loaded_step = -1;
    return j;
}

static inline ct_job ct_fsdp(int world, fsc_shard_strategy sh) {
    ct_job j = ct_make(world, FSC_PAR_FSDP);
    j.run.po.shard = sh;
    return j;
}

static fsc_status ct_rank_fn(fsc_rank *r, void *arg) {
    ct_job *j = arg;
    pt_run *run = &j->run;
    /* data as partest's DDP rank dpi of the data-parallel group (a pipeline's stages share it) */
    int dp = r->world / (run->po.pp > 1 ? run->po.pp : 1), dpi = r->rank % dp;
    const int T = run->cfg.seq, B = run->batch;
    const size_t ntok = 4096;
    fsc_engine *e = NULL;
    fsc_status s = fsc_engine_create(r, &run->cfg, &run->po, &run->oc, run->seed, &e);
    if (s != FSC_OK) return s;
    if (run->po.tp > 1) dp = fsc_engine_layout(e)->dp, dpi = fsc_engine_layout(e)->data; /* tensor ranks: one data */
    const int lb = B / dp;
    int64_t step = -1;
    if (j->load) s = j->weights_only ? fsc_ckpt_load_weights(e, j->load, &step) : fsc_ckpt_load(e, j->load, &step);
    else if (j->weights_file) s = fsc_engine_load_weights(e, j->weights_file);
    else if (j->resume) s = fsc_ckpt_resume(e, j->resume, &step);
    if (r->rank == 0) j->loaded_step = step;
    int32_t *tok = malloc((size_t)lb * T * sizeof(int32_t)), *tgt = malloc((size_t)lb * T * sizeof(int32_t));
    for (int st = j->from; st < j->to && s == FSC_OK; st++) {
        for (int i = 0; i < lb; i++) {
            size_t start = ((size_t)(st * B + dpi * lb + i) * T) % (ntok - T);
            for (int t = 0; t < T; t++) {
                tok[i * T + t] = pt_token(start + t, run->cfg.vocab);
                tgt[i * T + t] = pt_token(start + t + 1, run->cfg.vocab);
            }
        }
        fsc_step_info info;
        s = fsc_engine_step(e, tok, tgt, lb, lb * dp, &info); /* B / dp rounds down on 5 ranks */
        if (s == FSC_OK && r->rank == 0) j->loss[st] = info.loss;
    }
    free(tok);
    free(tgt);
    if (s == FSC_OK) s = fsc_engine_full_params(e, r->rank == 0 ? j->params : NULL);
    int ns = run->oc.kind == FSC_OPT_ADAMW ? 2 : (run->oc.momentum != 0.0f ? 1 : 0);
    for (int k = 0; k < ns && s == FSC_OK; k++) s = fsc_ckpt_full_state(e, k, r->rank == 0 ? j->state[k] : NULL);
    if (s == FSC_OK && j->save_dir) s = fsc_ckpt_save(e, j->save_dir, j->to, &j->save);
    fsc_engine_free(e);
    return s;
}

/* Run the job; returns the cluster's status (the message says which rank failed and why). */
static inline fsc_status ct_try(ct_job *j) {
    size_t P = fsc_gpt_num_params(&j->run.cfg);
    free(j->params);
    free(j->state[0]);
    free(j->state[1]);
    j->params = calloc(P, sizeof(float));
    j->state[0] = calloc(P, sizeof(float));
    j->state[1] = calloc(P, sizeof(float));
    fsc_cluster_opts co = { .world = j->run.world, .device = "cpu", .timeout_s = 30 };
    return fsc_cluster_run(&co, ct_rank_fn, j);
}

static inline void ct_run(ct_job *j) { assert_ok(ct_try(j)); }

static inline void ct_free(ct_job *j) {
    free(j->params);
    free(j->state[0]);
    free(j->state[1]);
    j->params = j->state[0] = j->state[1] = NULL;
}

/* Parameters and optimizer states bit for bit. */
static inline void ct_assert_state_equal(const ct_job *a, const ct_job *b, const char *what) {
    size_t P = fsc_gpt_num_params(&a->run.cfg);
    char msg[160];
    snprintf(msg, sizeof msg, "%s: parameters", what);
    assert_bits_equal(a->params, b->params, P, msg);
    for (int k = 0; k < 2; k++) {
        snprintf(msg, sizeof msg, "%s: optimizer state %d", what, k);
        assert_bits_equal(a->state[k], b->state[k], P, msg);
    }
}

/* A fresh temporary directory (caller frees with ct_rmtree). */
static inline char *ct_tmpdir(void) {
    const char *base = getenv("TMPDIR");
    char buf[512];
    snprintf(buf, sizeof buf, "%s/fsc-ckpt-test-XXXXXX", base && *base ? base : "/tmp");
    char *d = mkdtemp(buf);
    if (!d) fail_msg("mkdtemp failed");
    return strdup(d);
}

/* Remove a directory tree and free the name. */
static inline void ct_rmtree(char *dir) {
    test_rmtree(dir);
    free(dir);
}

/* The path of DIR/step-NNNNNNNN (static buffer per call site is the caller's). */
static inline void ct_step_path(char *buf, size_t cap, const char *dir, int64_t step) {
    snprintf(buf, cap, "%s/step-%08lld", dir, (long long)step);
}

/* The fixture of the tests that damage or measure one saved checkpoint: DIR holds a checkpoint of one step
 * of fsdp full_shard on 2 ranks, at path (DIR/step-00000001). */
typedef struct {
    char *dir;
    char path[600];
} ct_fixture;

static inline int ct_fixture_setup(void **state) {
    ct_fixture *f = calloc(1, sizeof *f);
    f->dir = ct_tmpdir();
    ct_job j = ct_fsdp(2, FSC_SHARD_FULL);
    j.to = 1;
    j.save_dir = f->dir;
    ct_run(&j);
    ct_free(&j);
    ct_step_path(f->path, sizeof f->path, f->dir, 1);
    *state = f;
    return 0;
}

static inline int ct_fixture_teardown(void **state) {
    ct_fixture *f = *state;
    ct_rmtree(f->dir);
    free(f);
    return 0;
}

/* A whole file (NUL-terminated; its length in *len), or NULL (*len 0) if it cannot be opened. */
static inline char *ct_slurp(const char *path, size_t *len) {
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (fread(b, 1, (size_t)n, f) != (size_t)n) n = 0;
    b[n] = 0;
    fclose(f);
    *len = (size_t)n;
    return b;
}

#endif
