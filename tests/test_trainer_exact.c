/* The trainer's --reduce exact and --unit (examples/train_gpt.c, lib/parallel/exact.c, docs/determinism.md).
 * Oracles: a global batch of 12 in units of 1 gives byte-identical --save files and the same --json losses
 * after 5 steps at (--world N, --accum K) = (1,12), (2,6), (3,4), (4,3), (6,2), (12,1) with ddp, fsdp (full,
 * grad_op, hybrid), zero1 and zero2 (none at N 1); --unit 2 at (1,12), (2,3), (3,1) agrees likewise; so does FSDP
 * with offload all; so do MoE models, with expert parallelism too; so do checkpoints resumed at another world
 * size or under another pipeline schedule; what exact mode does not run with is refused naming the option; --world 1
 * (one BLAS thread unless --threads) equals --world 2 with products big enough for OpenBLAS to split; an --accum that
 * --unit overrides is said in a note, not refused. */
#include "trainertest.h"

static char trainer[PATH_MAX], tmpdir[64];

#define MODEL "--layers 2 --dim 16 --heads 2 --seq 8 --vocab 128 --batch 12 --steps 5 --lr 0.01 --clip 1"

/* Train with args at world n, accum k with strategy par (at n 1: none); the --save file's bytes in *bytes (the
 * caller frees), the losses as text; the output must hold must (NULL: anything). */
static char *train_must(int n, int k, const char *par, const char *args, const char *must, char **bytes, size_t *len) {
    char *save = prog_fmt("%s/w_%d_%d.st", tmpdir, n, k);
    char *full = prog_fmt(MODEL " --data '%s/data.txt' --world %d --accum %d --parallel %s --reduce exact %s --save "
                          "'%s' --json", tmpdir, n, k, n == 1 ? "none" : par, args, save);
    char *losses = prog_losses(trainer, full, tmpdir, must, NULL);
    FILE *f = fopen(save, "rb");
    if (!f) fail_msg("%s: no --save file", full);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    *bytes = malloc(*len + 1);
    if (!*bytes || fread(*bytes, 1, *len, f) != *len) fail_msg("%s: cannot read the --save file", full);
    fclose(f);
    free(save), free(full);
    return losses;
}

static char *train(int n, int k, const char *par, const char *args, char **bytes, size_t *len) {
    return train_must(n, k, par, args, NULL, bytes, len);
}

static const char *const strategies[] = { "ddp", "fsdp --shard full", "fsdp --shard grad_op",
                                          "fsdp --shard hybrid", "zero1", "zero2" };

/* Every (N, K) of nk with every strategy against nk[0] (N 1: none). */
static void matrix(const char *args, const int (*nk)[2], int count) {
    char *ref_bytes = NULL, *bytes = NULL;
    size_t ref_len = 0, len = 0;
    char *ref = train(nk[0][0], nk[0][1], "none", args, &ref_bytes, &ref_len);
    for (int i = 1; i < count; i++)
        for (size_t p = 0; p < sizeof strategies / sizeof strategies[0]; p++) {
            char *l = train(nk[i][0], nk[i][1], strategies[p], args, &bytes, &len);
            if (strcmp(l, ref))
                fail_msg("%s %s at --world %d --accum %d: losses %s, at --world %d --accum %d: %s", strategies[p], args,
                         nk[i][0], nk[i][1], l, nk[0][0], nk[0][1], ref);
            if (len != ref_len || memcmp(bytes, ref_bytes, len))
                fail_msg("%s %s: the --save file at --world %d --accum %d differs from --world %d --accum %d's",
                         strategies[p], args, nk[i][0], nk[i][1], nk[0][0], nk[0][1]);
            free(l), free(bytes);
        }
    free(ref), free(ref_bytes);
}

static void test_any_world_accumulation_and_strategy(void **state) {
    (void)state;
    static const int nk[][2] = { { 1, 12 }, { 2, 6 }, { 3, 4 }, { 4, 3 }, { 6, 2 }, { 12, 1 } };
    matrix("", nk, 6);
    static const int nk2[][2] = { { 1, 12 }, { 2, 3 }, { 3, 1 } }; /* units of 2: 6 per step */
    matrix("--unit 2", nk2, 3);
}

/* FSDP's offload all (masters and reduced gradients on the host; the exact sums land in host shadows): full,
 * grad_op and hybrid sharding at three world sizes, prefetch on and off, give one rank's bits without offload. */
static void test_offload_all(void **state) {
    (void)state;
    static const int nk[][2] = { { 2, 6 }, { 3, 4 }, { 4, 3 } };
    static const char *const shard[] = { "full", "grad_op", "hybrid --prefetch 0", "hybrid" };
    char *ref_bytes = NULL, *bytes = NULL;
    size_t ref_len = 0, len = 0;
    char *ref = train(1, 12, "none", "", &ref_bytes, &ref_len);
    for (int i = 0; i < 3; i++)
        for (int p = 0; p < 4; p++) {
            char *par = prog_fmt("fsdp --offload all --shard %s", shard[p]);
            char *l = train(nk[i][0], nk[i][1], par, "", &bytes, &len);
            if (strcmp(l, ref)) fail_msg("%s at --world %d: losses %s, one rank: %s", par, nk[i][0], l, ref);
            if (len != ref_len || memcmp(bytes, ref_bytes, len))
                fail_msg("%s at --world %d: the --save file differs from one rank's", par, nk[i][0]);
            free(l), free(bytes), free(par);
        }
    free(ref), free(ref_bytes);
}

/* Pipelines of 2 and 3 stages, GPipe and 1F1B, with ddp, fsdp and zero1 in the stages, at several data-parallel
 * sizes: the bits of one rank accumulating 12 micro-batches. */
static void test_pipelines(void **state) {
    (void)state;
    char *ref_bytes = NULL, *bytes = NULL;
    size_t ref_len = 0, len = 0;
    char *ref = train(1, 12, "none", "--layers 3", &ref_bytes, &ref_len);
    static const int cfg[][3] = { { 2, 2, 12 }, { 4, 2, 6 }, { 6, 2, 4 }, { 3, 3, 12 }, { 6, 3, 6 }, { 12, 3, 3 } };
    static const char *const sched[] = { "gpipe", "1f1b" }, *const inner[] = { "pipe", "fsdp", "zero1" };
    for (int c = 0; c < 6; c++)
        for (int k = 0; k < 2; k++) {
            const char *par = inner[(c + k) % 3];
            char *a = prog_fmt("--layers 3 --pp %d --schedule %s", cfg[c][1], sched[k]);
            char *l = train(cfg[c][0], cfg[c][2], par, a, &bytes, &len);
            if (strcmp(l, ref) || len != ref_len || memcmp(bytes, ref_bytes, len))
                fail_msg("%s %s at --world %d --accum %d: not the bits of one rank (losses %s, one rank %s)", par, a,
                         cfg[c][0], cfg[c][2], l, ref);
            free(a), free(l), free(bytes);
        }
    free(ref), free(ref_bytes);
}

/* Interleaved (2 chunks a rank), zb-h1 and zbv (docs/pipeline.md), DDP in the stages at 1 and 2 data-parallel
 * ranks, FSDP (full, grad_op, hybrid sharding) and ZeRO-1/2 at 2: the bits of one rank accumulating 12
 * micro-batches. */
static void test_new_schedules(void **state) {
    (void)state;
    char *ref_bytes = NULL, *bytes = NULL;
    size_t ref_len = 0, len = 0;
    char *ref = train(1, 12, "none", "--layers 4", &ref_bytes, &ref_len);
    static const struct { int world, accum; const char *par, *args; } cfg[] = {
        { 2, 12, "pipe", "--layers 4 --pp 2 --schedule interleaved --virtual-stages 2" },
        { 4, 6, "ddp", "--layers 4 --pp 2 --schedule interleaved --virtual-stages 2" },
        { 2, 12, "pipe", "--layers 4 --pp 2 --schedule zb-h1" },
        { 4, 6, "ddp", "--layers 4 --pp 2 --schedule zb-h1" },
        { 2, 12, "pipe", "--layers 4 --pp 2 --schedule zbv" },
        { 4, 6, "ddp", "--layers 4 --pp 2 --schedule zbv" },
        { 4, 6, "fsdp --shard full", "--layers 4 --pp 2 --schedule interleaved --virtual-stages 2" },
        { 4, 6, "zero1", "--layers 4 --pp 2 --schedule interleaved --virtual-stages 2" },
        { 4, 6, "fsdp --shard grad_op", "--layers 4 --pp 2 --schedule zb-h1" },
        { 4, 6, "zero2", "--layers 4 --pp 2 --schedule zb-h1" },
        { 4, 6, "fsdp --shard hybrid", "--layers 4 --pp 2 --schedule zbv" },
        { 4, 6, "fsdp --shard full", "--layers 4 --pp 2 --schedule zbv" },
        { 4, 6, "zero1", "--layers 4 --pp 2 --schedule zbv" },
    };
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        char *l = train(cfg[c].world, cfg[c].accum, cfg[c].par, cfg[c].args, &bytes, &len);
        if (strcmp(l, ref) || len != ref_len || memcmp(bytes, ref_bytes, len))
            fail_msg("%s %s at --world %d --accum %d: not the bits of one rank (losses %s, one rank %s)", cfg[c].par,
                     cfg[c].args, cfg[c].world, cfg[c].accum, l, ref);
        free(l), free(bytes);
    }
    free(ref), free(ref_bytes);
}

/* The validation loss (fsc_engine_eval): the same bits at every world size, accumulation, strategy and pipeline. */
static void test_validation(void **state) {
    (void)state;
    static const char *const cfg[] = { "--world 1 --accum 12", "--world 3 --accum 4 --parallel ddp",
                                       "--world 4 --accum 3 --parallel fsdp", "--world 6 --accum 2 --parallel zero2",
                                       "--world 4 --pp 2 --accum 6 --parallel pipe --schedule 1f1b" };
    char *ref = NULL;
    for (int i = 0; i < 5; i++) {
        char *a = prog_fmt(MODEL " --layers 3 --steps 4 --data '%s/data.txt' --val-data '%s/data.txt' --val-every 2 "
                           "--val-batches 2 --reduce exact %s --json", tmpdir, tmpdir, cfg[i]);
        char *out = NULL;
        int rc = prog_run(trainer, a, tmpdir, &out, NULL);
        if (rc != 0) fail_msg("%s: exit %d\n%s", a, rc, out);
        cJSON *j = prog_last_json(out);
        char *v = cJSON_PrintUnformatted(cJSON_GetObjectItem(j, "val_loss"));
        if (!v || !strstr(v, "null,")) fail_msg("%s: no validation losses in %s", a, out);
        if (!ref) ref = v;
        else if (strcmp(v, ref)) fail_msg("%s: validation losses %s, at --world 1: %s", cfg[i], v, ref);
        if (v != ref) free(v);
        cJSON_Delete(j);
        free(a), free(out);
    }
    free(ref);
}

/* An MoE model run with each of cfg[0 .. n) (steps more): the weights, the losses and the MoE statistics (the aux
 * losses, the dropped tokens) of every run are cfg[0]'s bits. */
static void moe_runs(const char *const *cfg, int n, int steps) {
    char *ref = NULL, *ref_w = NULL;
    for (int i = 0; i < n; i++) {
        char *w = prog_fmt("%s/moe_%d.st", tmpdir, i);
        char *a = prog_fmt(MODEL " --steps %d --moe-experts 4 --moe-every 1 --data '%s/data.txt' --reduce exact %s "
                           "--save '%s' --json", steps, tmpdir, cfg[i], w);
        char *out = NULL;
        int rc = prog_run(trainer, a, tmpdir, &out, NULL);
        if (rc != 0) fail_msg("%s: exit %d\n%s", a, rc, out);
        cJSON *j = prog_last_json(out), *m = cJSON_GetObjectItem(j, "moe");
        char *l = cJSON_PrintUnformatted(cJSON_GetObjectItem(j, "losses"));
        char *aux = cJSON_PrintUnformatted(cJSON_GetObjectItem(m, "aux_losses"));
        char *drop = cJSON_PrintUnformatted(cJSON_GetObjectItem(m, "dropped"));
        if (!l || !aux || !drop) fail_msg("%s: no losses or MoE statistics in %s", a, out);
        char *v = prog_fmt("%s %s %s", l, aux, drop);
        if (!ref) {
            ref = v, ref_w = w, w = NULL;
        } else {
            if (strcmp(v, ref)) fail_msg("%s: losses, aux losses, dropped %s; with %s: %s", cfg[i], v, cfg[0], ref);
            char *cmp = prog_fmt("cmp -s '%s' '%s'", w, ref_w);
            if (system(cmp) != 0) fail_msg("%s: the --save file differs from %s's", cfg[i], cfg[0]);
            free(cmp), free(v);
        }
        cJSON_Delete(j);
        free(l), free(aux), free(drop), free(a), free(out), free(w);
    }
    free(ref), free(ref_w);
}

/* A mixture of experts without expert parallelism: the same bits at every world size, accumulation and strategy. */
static void test_moe(void **state) {
    (void)state;
    static const char *const cfg[] = { "--world 1 --accum 12", "--world 3 --accum 4 --parallel ddp",
                                       "--world 4 --accum 3 --parallel fsdp", "--world 6 --accum 2 --parallel zero2" };
    moe_runs(cfg, 4, 4);
}

/* Expert parallelism: (world, accum, ep) = (2,6,2), (4,3,2) and (4,3,4) with ddp, fsdp (every shard strategy), zero1
 * and zero2 give one rank's bits (an expert's gradient from each source unit is a term of its own). */
static void test_moe_expert_parallel(void **state) {
    (void)state;
    static const char *const where[] = { "--world 2 --accum 6 --ep 2", "--world 4 --accum 3 --ep 2",
                                         "--world 4 --accum 3 --ep 4" };
    static const char *const par[] = { "ddp", "fsdp --shard full", "fsdp --shard grad_op", "fsdp --shard hybrid",
                                       "fsdp --shard none", "zero1", "zero2" };
    const char *cfg[1 + 3 * 7] = { "--world 1 --accum 12" };
    char *own[3 * 7];
    for (int i = 0; i < 3; i++)
        for (int p = 0; p < 7; p++)
            cfg[1 + i * 7 + p] = own[i * 7 + p] = prog_fmt("%s --parallel %s", where[i], par[p]);
    moe_runs(cfg, 1 + 3 * 7, 5);
    for (int i = 0; i < 3 * 7; i++) free(own[i]);
}

/* Pipelines of MoE blocks: each unit's MoE statistics gathered from every stage's layers (pipe_stats.c) give one
 * rank's losses, aux losses, drops and --save bytes with 2 stages, GPipe and 1F1B, with 1 and 2 data-parallel ranks
 * (ddp, fsdp) and expert parallelism inside the stages' data groups. */
static void test_moe_pipeline(void **state) {
    (void)state;
    static const char *const cfg[] = { "--world 1 --accum 12", "--world 2 --pp 2 --accum 12 --unit 1",
                                       "--world 4 --pp 2 --dp 2 --accum 6 --unit 1 --parallel ddp --schedule 1f1b",
                                       "--world 4 --pp 2 --dp 2 --accum 6 --unit 1 --parallel fsdp",
                                       "--world 4 --pp 2 --dp 2 --accum 6 --unit 1 --parallel ddp --ep 2" };
    moe_runs(cfg, 5, 4);
}

/* MoE blocks in interleaved, zb-h1 and zbv stages with FSDP (the root, wrap model: a unit across chunks) and ZeRO
 * inside, expert parallelism too: the bits and the MoE statistics of one rank. */
static void test_moe_new_schedules(void **state) {
    (void)state;
    static const char *const cfg[] = {
        "--layers 4 --world 1 --accum 12",
        "--layers 4 --world 4 --pp 2 --dp 2 --accum 6 --unit 1 --parallel fsdp --ep 2 --schedule zbv",
        "--layers 4 --world 4 --pp 2 --dp 2 --accum 6 --unit 1 --parallel zero1 --schedule interleaved "
        "--virtual-stages 2",
        "--layers 4 --world 4 --pp 2 --dp 2 --accum 6 --unit 1 --parallel zero2 --ep 2 --schedule zb-h1",
        "--layers 4 --world 4 --pp 2 --dp 2 --accum 6 --unit 1 --parallel fsdp --wrap model --ep 2 --schedule "
        "interleaved --virtual-stages 2",
    };
    moe_runs(cfg, 5, 3);
}

static void test_llama(void **state) {
    (void)state;
    static const int nk[][2] = { { 1, 12 }, { 2, 6 }, { 3, 4 }, { 4, 3 }, { 6, 2 }, { 12, 1 } };
    matrix("--model llama --kv-heads 1", nk, 6);
}

/* A checkpoint saved by fsdp at N 2 (K 6) after 2 steps, resumed to step 5 by zero2 at N 6 (K 2) and by one rank
 * (K 12): the --save file of an uninterrupted ddp run at N 6. */
static void test_resume_on_another_world(void **state) {
    (void)state;
    char *ref = NULL, *got = NULL;
    size_t ref_len = 0, len = 0;
    free(train(6, 2, "ddp", "", &ref, &ref_len));
    char *a = prog_fmt("--steps 2 --save-every 2 --ckpt-dir '%s/ck'", tmpdir);
    free(train(2, 6, "fsdp", a, &got, &len));
    free(got), free(a);
    static const int to[][2] = { { 6, 2 }, { 1, 12 } };
    for (int i = 0; i < 2; i++) {
        a = prog_fmt("--resume '%s/ck'", tmpdir);
        free(train(to[i][0], to[i][1], "zero2", a, &got, &len));
        if (len != ref_len || memcmp(got, ref, len))
            fail_msg("saved at --world 2, resumed at --world %d: the --save file differs from an uninterrupted run's",
                     to[i][0]);
        free(got), free(a);
    }
    free(ref);
}

/* Checkpoints written after 2 steps with FSDP or ZeRO inside zbv, zb-h1 and interleaved stages (and by ZeRO-2
 * without a pipeline), resumed to step 5 under another schedule, strategy and data-parallel size, or without a
 * pipeline: the losses of steps 3 to 5 and the --save file of one rank's uninterrupted run (4 blocks). */
static void test_resume_under_another_schedule(void **state) {
    (void)state;
    typedef struct { int world, accum; const char *par, *args; } where;
    static const struct { where save, to[3]; } cfg[] = {
        { { 4, 6, "fsdp --shard full", "--pp 2 --schedule zbv" },
          { { 4, 6, "zero2", "--pp 2 --schedule interleaved --virtual-stages 2" },
            { 6, 4, "zero2", "--pp 2 --schedule interleaved --virtual-stages 2" } } },
        { { 4, 6, "zero1", "--pp 2 --schedule zb-h1" },
          { { 4, 6, "fsdp --shard hybrid", "--pp 2 --schedule zbv" },
            { 4, 6, "fsdp --shard grad_op", "--pp 2 --schedule zbv" } } },
        { { 4, 6, "fsdp --shard full", "--pp 2 --schedule interleaved --virtual-stages 2" },
          { { 3, 4, "fsdp --shard full", "" }, { 2, 6, "ddp", "" }, { 1, 12, "none", "" } } },
        { { 4, 6, "fsdp --shard grad_op", "--pp 2 --schedule interleaved --virtual-stages 2 --ckpt-format full" },
          { { 4, 6, "zero1", "--pp 2 --schedule zb-h1" } } },
        { { 3, 4, "zero2", "" }, { { 4, 6, "fsdp --shard full", "--pp 2 --schedule zbv" } } },
    };
    char *ref_bytes = NULL, *bytes = NULL;
    size_t ref_len = 0, len = 0;
    char *ref = train(1, 12, "none", "--layers 4", &ref_bytes, &ref_len);
    const char *third = strchr(strchr(ref, ',') + 1, ',') + 1; /* ref's losses of steps 3 to 5 */
    char *head = prog_fmt("%.*s]", (int)(third - 1 - ref), ref), *tail = prog_fmt("[null,null,%s", third);
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        const where *s = &cfg[c].save;
        char *a = prog_fmt("--layers 4 --steps 2 --save-every 2 --ckpt-dir '%s/rs%zu' %s", tmpdir, c, s->args);
        char *l = train(s->world, s->accum, s->par, a, &bytes, &len);
        if (strcmp(l, head)) fail_msg("%s %s: losses %s, one rank: %s", s->par, a, l, head);
        free(l), free(bytes), free(a);
        for (int i = 0; i < 3 && cfg[c].to[i].world; i++) {
            const where *t = &cfg[c].to[i];
            a = prog_fmt("--layers 4 --resume '%s/rs%zu' %s", tmpdir, c, t->args);
            l = train_must(t->world, t->accum, t->par, a, "at step 2", &bytes, &len);
            if (strcmp(l, tail) || len != ref_len || memcmp(bytes, ref_bytes, len))
                fail_msg("saved by %s %s at --world %d, resumed by %s %s at --world %d: not the bits of an "
                         "uninterrupted run (losses %s, uninterrupted %s)", s->par, s->args, s->world, t->par, t->args,
                         t->world, l, ref);
            free(l), free(bytes), free(a);
        }
    }
    free(head), free(tail), free(ref), free(ref_bytes);
}

/* Tensor parallelism at a fixed degree (2, with and without sequence parallelism): the same bits at data-parallel
 * sizes 1, 2 and 3, every strategy, and with a pipeline. */
static void test_tensor_parallel(void **state) {
    (void)state;
    static const char *const cfg[] = { "--world 2 --accum 12 --parallel ddp", "--world 4 --accum 6 --parallel fsdp",
                                       "--world 6 --accum 4 --parallel zero2", "--world 8 --pp 2 --accum 6 --parallel ddp" };
    for (int sp = 0; sp < 2; sp++) {
        char *ref = NULL, *ref_w = NULL;
        for (int i = 0; i < 4; i++) {
            char *w = prog_fmt("%s/tp_%d.st", tmpdir, i);
            char *a = prog_fmt(MODEL " --data '%s/data.txt' --tp 2%s --reduce exact %s --save '%s' --json", tmpdir,
                               sp ? " --sequence-parallel" : "", cfg[i], w);
            char *l = prog_losses(trainer, a, tmpdir, NULL, NULL);
            if (!ref) {
                ref = l, ref_w = w, w = NULL;
            } else {
                if (strcmp(l, ref)) fail_msg("%s: losses %s, at dp 1: %s", a, l, ref);
                char *cmp = prog_fmt("cmp -s '%s' '%s'", w, ref_w);
                if (system(cmp) != 0) fail_msg("%s: the --save file differs from dp 1's", a);
                free(cmp), free(l);
            }
            free(a), free(w);
        }
        free(ref), free(ref_w);
    }
}

/* --reduce exact at --world 1 runs one BLAS thread, as each rank of --world 2 does, when --threads is not given: a
 * model whose MLP products (32 x 256 x 64 for one sequence) are big enough for OpenBLAS to split over its threads
 * trains to the same --save bytes and losses at --world 1 as at --world 2 --parallel ddp, --unit 1. Before, one rank
 * took the library's thread count (the machine's cores), other bits. Oracle: cmp of the two --save files. */
static void test_world_one_threads(void **state) {
    (void)state;
    const char *model = "--layers 1 --dim 64 --heads 2 --seq 32 --vocab 128 --batch 2 --steps 3 --lr 0.01 --clip 1";
    char *w[2], *l[2];
    for (int i = 0; i < 2; i++) {
        w[i] = prog_fmt("%s/threads_%d.st", tmpdir, i + 1);
        char *a = prog_fmt("%s --data '%s/data.txt' %s --reduce exact --unit 1 --save '%s' --json", model, tmpdir,
                           i ? "--world 2 --parallel ddp" : "--world 1", w[i]);
        l[i] = prog_losses(trainer, a, tmpdir, NULL, NULL);
        free(a);
    }
    char *cmp = prog_fmt("cmp -s '%s' '%s'", w[0], w[1]);
    if (system(cmp) != 0) fail_msg("the --save file at --world 1 differs from --world 2 --parallel ddp's (losses %s, %s)",
                                   l[0], l[1]);
    if (strcmp(l[0], l[1])) fail_msg("losses at --world 1 %s, at --world 2: %s", l[0], l[1]);
    free(cmp);
    for (int i = 0; i < 2; i++) free(w[i]), free(l[i]);
}

static void test_refusals(void **state) {
    (void)state;
    char *a = prog_fmt(MODEL " --data '%s/data.txt' --unit 2", tmpdir);
    prog_refused(trainer, a, tmpdir, 2, "--unit applies to --reduce exact only"); /* before any rank starts */
    free(a);
    a = prog_fmt(MODEL " --data '%s/data.txt' --world 2 --parallel ddp --reduce exact --unit 5", tmpdir);
    prog_refused(trainer, a, tmpdir, 2, "--unit 5 does not divide the 6 sequences per rank");
    free(a);
}

/* --accum with --unit and no pipeline sets nothing (the units are the micro-batches) and is not refused: a note on
 * stderr says what sets them, only where --accum would have run other micro-batches; the run trains (exit 0). */
static void test_unused_accum_noted(void **state) {
    (void)state;
    static const struct {
        const char *opts;
        int noted;
    } cases[] = {
        { "--world 1 --accum 12 --unit 2", 1 },                /* 6 units of 2, not 12 micro-batches */
        { "--world 1 --chunks 4 --unit 2", 1 },                /* --chunks, --accum's other name */
        { "--world 2 --parallel ddp --accum 3 --unit 2", 0 },  /* 6 a rank: 3 units of 2, as --accum says */
        { "--world 1 --unit 2", 0 },                           /* no --accum given */
        { "--world 1 --accum 12", 0 },                         /* no --unit: --accum sets the micro-batches */
        { "--world 2 --pp 2 --parallel pipe --accum 12 --unit 1", 0 }, /* a pipeline's micro-batches are --accum's */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *a = prog_fmt(MODEL " --steps 1 --data '%s/data.txt' --reduce exact %s", tmpdir, cases[i].opts);
        char *out = NULL, *err = NULL;
        int rc = prog_run(trainer, a, tmpdir, &out, &err);
        if (rc != 0) fail_msg("%s: exit %d\n%s%s", a, rc, out, err);
        const char *note = strstr(err, "fsc-train: note: ");
        if (cases[i].noted && !note) fail_msg("%s: no note on stderr:\n%s", cases[i].opts, err);
        if (!cases[i].noted && note) fail_msg("%s: a note where --accum is used: %s", cases[i].opts, note);
        if (i == 0 && !strstr(err, "note: --accum 12 has no effect: --unit 2 sets the micro-batches (each rank runs "
                                   "its 12 sequences as 6 units of 2"))
            fail_msg("%s: stderr: %s", cases[i].opts, err);
        if (i == 1 && !strstr(err, "note: --chunks 4 has no effect: --unit 2")) fail_msg("stderr: %s", err);
        free(a), free(out), free(err);
    }
}

int main(int argc, char **argv) {
    (void)argc;
    if (prog_setup(argv[0], "test_trainer_exact", "train_gpt", trainer, sizeof trainer, tmpdir, sizeof tmpdir)) return 1;
    if (prog_write_letters(tmpdir, "data.txt", 6000)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_any_world_accumulation_and_strategy),
        cmocka_unit_test(test_offload_all),
        cmocka_unit_test(test_pipelines),
        cmocka_unit_test(test_new_schedules),
        cmocka_unit_test(test_validation),
        cmocka_unit_test(test_moe),
        cmocka_unit_test(test_moe_expert_parallel),
        cmocka_unit_test(test_moe_pipeline),
        cmocka_unit_test(test_moe_new_schedules),
        cmocka_unit_test(test_llama),
        cmocka_unit_test(test_resume_on_another_world),
        cmocka_unit_test(test_resume_under_another_schedule),
        cmocka_unit_test(test_tensor_parallel),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_unused_accum_noted),
        cmocka_unit_test(test_world_one_threads),
    };
    if (getenv("FSC_TEST_FILTER")) cmocka_set_test_filter(getenv("FSC_TEST_FILTER")); /* one test: its name */
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char *cmd = prog_fmt("rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "test_trainer_exact: could not remove %s\n", tmpdir);
    free(cmd);
    return rc;
}
