/* Saving weights and reading the full parameters under pipelines, tensor parallelism and expert parallelism with a
 * sharding strategy, without the whole model in any rank's memory (lib/parallel/stream.c: each tensor streamed
 * from the ranks that hold it to the ranks that want it, one bounded chunk at a time).
 * Oracles:
 * - the weights file is the single-rank engine's, byte for byte (a padded vocabulary's rows left out, f32 and
 *   bf16), for pp 2, pp 4, tp 2, tp 2 x pp 2 and ep 2 (ep staged, with and without a pipeline), with DDP, FSDP,
 *   ZeRO-1 and ZeRO-2 inside; fsc_engine_full_params gives every rank that passes a buffer the single rank's
 *   parameters bit for bit (rank 0 and the last rank ask, the others pass NULL);
 * - device memory: during the save every rank's communication buffers (the ledger's FSC_TAG_COMM peak, reset
 *   before it, above what was allocated then) stay within twice the largest tensor's bytes, where gathering a whole stage or the whole model
 *   through the device needs many tensors' worth;
 * - host memory: with the process's data limit (RLIMIT_DATA: heap and private mappings) set to what it uses plus
 *   16 MiB, a 4-stage pipeline of about 26 MB of parameters saves its weights and hands rank 0 the full parameters
 *   (rank 0's buffer allocated before the limit), where a copy of the whole model on any rank is refused. Not
 *   under the sanitizers, whose allocators map memory of their own;
 * - a full disk part-way through a streamed save (pp 2 x dp 2, tp 2) fails every rank promptly with the writer's
 *   message and leaves no file (savefail.h). */
#include <stdio.h>
#include <sys/resource.h>
#include <unistd.h>
#include "savefail.h"
#include "fsc/safetensors.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SB_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SB_SANITIZED 1
#endif
#endif
#ifndef SB_SANITIZED
#define SB_SANITIZED 0
#endif

#define SB_WORLD 8
#define SB_MARGIN ((size_t)16 << 20) /* the data limit above what the process uses */

typedef struct {
    fsc_gpt_config cfg;
    fsc_parallel_opts po;
    int world;
    fsc_dtype dt;               /* the file's element type */
    const char *path;           /* the weights file written */
    float *params[SB_WORLD];    /* fsc_engine_full_params of ranks 0 and world-1 (NULL: not asked) */
    size_t comm_peak[SB_WORLD]; /* FSC_TAG_COMM peak during the save above what was allocated before, per rank */
    int limit;                  /* lower RLIMIT_DATA around the save (rank 0) */
    struct rlimit old;          /* the limit before */
    int limited;                /* rank 0 lowered it */
} sb_run;

/* A GPT whose stages and layers are many tensors' worth: its largest tensors (wte, the MLP's) are 16K floats, a
 * layer 49K; 250 tokens padded to 256 rows (the file holds 250). */
static fsc_gpt_config sb_config(void) {
    return (fsc_gpt_config){ .layers = 4, .dim = 64, .heads = 4, .seq = 8, .vocab = 250, .padded_vocab = 256 };
}

static fsc_gpt_config sb_moe_config(void) {
    fsc_gpt_config c = sb_config();
    c.moe_experts = 4, c.moe_top_k = 2, c.moe_every = 1, c.moe_capacity = 1.0f, c.moe_aux = 0.01f;
    return c;
}

/* Bytes of VmData in /proc/self/status (what RLIMIT_DATA counts), 0 when unreadable. */
static size_t vm_data(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    size_t kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmData: %zu kB", &kb) == 1) break;
    if (f) fclose(f);
    return kb * 1024;
}

static fsc_status sb_rank(fsc_rank *r, void *arg) {
    sb_run *run = arg;
    fsc_optim_config oc = pt_adamw();
    fsc_engine *e = NULL;
    FSC_TRY(fsc_engine_create(r, &run->cfg, &run->po, &oc, 77, &e));
    const int asks = r->rank == 0 || r->rank == r->world - 1;
    fsc_status s = fsc_comm_barrier(r->comm);
    if (s == FSC_OK && run->limit && r->rank == 0 && getrlimit(RLIMIT_DATA, &run->old) == 0) {
        struct rlimit lim = run->old;
        lim.rlim_cur = (rlim_t)(vm_data() + SB_MARGIN);
        if (vm_data() > 0 && (run->old.rlim_cur == RLIM_INFINITY || lim.rlim_cur < run->old.rlim_cur))
            run->limited = setrlimit(RLIMIT_DATA, &lim) == 0;
    }
    if (s == FSC_OK) s = fsc_comm_barrier(r->comm);
    fsc_device_reset_peak(r->dev);
    const size_t held = fsc_device_current_bytes(r->dev, FSC_TAG_COMM); /* a pipeline's links, kept */
    if (s == FSC_OK) s = fsc_engine_save_weights_dtype(e, run->path, run->dt);
    if (r->rank < SB_WORLD) run->comm_peak[r->rank] = fsc_device_peak_bytes(r->dev, FSC_TAG_COMM) - held;
    if (s == FSC_OK) s = fsc_engine_full_params(e, asks ? run->params[r->rank] : NULL);
    fsc_status b = fsc_comm_barrier(r->comm);
    if (r->rank == 0 && run->limited) setrlimit(RLIMIT_DATA, &run->old);
    fsc_engine_free(e);
    return s != FSC_OK ? s : b;
}

static sb_run sb_make(fsc_gpt_config cfg, int world, fsc_parallel_kind kind, int pp, int tp, int ep, const char *path) {
    sb_run x;
    memset(&x, 0, sizeof x);
    x.cfg = cfg;
    x.po = fsc_parallel_opts_default();
    x.po.kind = kind, x.po.pp = pp, x.po.tp = tp, x.po.ep = ep;
    x.po.accum = pp > 1 ? 2 : 1; /* a pipeline's micro-batches */
    x.world = world;
    x.dt = FSC_F32;
    x.path = path;
    const size_t P = fsc_gpt_num_params(&cfg);
    x.params[0] = calloc(P, sizeof(float));
    if (world > 1) x.params[world - 1] = calloc(P, sizeof(float));
    return x;
}

static void sb_free(sb_run *x) {
    for (int i = 0; i < SB_WORLD; i++) free(x->params[i]);
}

static void sb_go(sb_run *x) {
    fsc_cluster_opts co = { .world = x->world, .device = "cpu", .timeout_s = 60, .threads_per_rank = 1 };
    fsc_status s = fsc_cluster_run(&co, sb_rank, x);
    if (x->limited) setrlimit(RLIMIT_DATA, &x->old); /* a failed run's ranks may not have come back to it */
    assert_ok(s);
}

static unsigned char *read_file(const char *path, long *n) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)*n + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)*n, f), (size_t)*n);
    fclose(f);
    return b;
}

static void same_file(const char *a, const char *b, const char *what) {
    long na, nb;
    unsigned char *x = read_file(a, &na), *y = read_file(b, &nb);
    if (na != nb) fail_msg("%s: the weights file has %ld bytes, the single rank's %ld", what, nb, na);
    for (long i = 0; i < na; i++)
        if (x[i] != y[i]) fail_msg("%s: the weights file differs from the single rank's at byte %ld", what, i);
    assert_true(na > 100000);
    free(x);
    free(y);
}

/* The largest tensor of the model in bytes (f32). */
static size_t largest_tensor(const fsc_gpt_config *c) {
    fsc_device *dev = NULL;
    fsc_model *m = NULL;
    assert_ok(fsc_device_create("cpu", NULL, &dev));
    assert_ok(fsc_gpt_model_create(dev, c, &m));
    size_t most = 0;
    for (int i = 0; i < m->n_tensors; i++)
        if (m->info[i].numel > most) most = m->info[i].numel;
    fsc_model_free(m);
    fsc_device_free(dev);
    return most * sizeof(float);
}

typedef struct {
    const char *name;
    int moe, world, pp, tp, ep;
    fsc_parallel_kind kind;
    fsc_dtype dt;
} sb_case;

static void check_cases(const sb_case *cases, int n) {
    char ref[64], out[64];
    snprintf(ref, sizeof ref, "/tmp/fsc_save_bounded_%d_ref", (int)getpid());
    snprintf(out, sizeof out, "/tmp/fsc_save_bounded_%d_out", (int)getpid());
    for (int k = 0; k < n; k++) {
        const sb_case *c = &cases[k];
        const fsc_gpt_config cfg = c->moe ? sb_moe_config() : sb_config();
        const size_t P = fsc_gpt_num_params(&cfg), most = largest_tensor(&cfg);
        sb_run one = sb_make(cfg, 1, FSC_PAR_NONE, 1, 1, 1, ref);
        one.dt = c->dt;
        sb_go(&one);
        sb_run x = sb_make(cfg, c->world, c->kind, c->pp, c->tp, c->ep, out);
        x.dt = c->dt;
        sb_go(&x);
        for (int r = 0; r < c->world; r++)
            if (x.comm_peak[r] > 2 * most)
                fail_msg("%s: rank %d's communication buffers reached %zu bytes during the save, above twice the "
                         "largest tensor (%zu bytes)", c->name, r, x.comm_peak[r], most);
        same_file(ref, out, c->name);
        assert_bits_equal(one.params[0], x.params[0], P, c->name);
        assert_bits_equal(one.params[0], x.params[c->world - 1], P, c->name);
        sb_free(&one);
        sb_free(&x);
        unlink(ref);
        unlink(out);
    }
}

static void test_save_pipelines(void **state) {
    (void)state;
    const sb_case cases[] = {
        { "pp 2 ddp", 0, 2, 2, 1, 1, FSC_PAR_DDP, FSC_F32 },
        { "pp 2 x dp 2 fsdp", 0, 4, 2, 1, 1, FSC_PAR_FSDP, FSC_F32 },
        { "pp 2 x dp 2 fsdp bf16", 0, 4, 2, 1, 1, FSC_PAR_FSDP, FSC_BF16 },
        { "pp 4 ddp", 0, 4, 4, 1, 1, FSC_PAR_DDP, FSC_F32 },
        { "pp 4 x dp 2 zero1", 0, 8, 4, 1, 1, FSC_PAR_ZERO1, FSC_F32 },
    };
    check_cases(cases, (int)(sizeof cases / sizeof cases[0]));
}

static void test_save_tensor_parallel(void **state) {
    (void)state;
    const sb_case cases[] = {
        { "tp 2 ddp", 0, 2, 1, 2, 1, FSC_PAR_DDP, FSC_F32 },
        { "tp 2 x dp 2 zero2", 0, 4, 1, 2, 1, FSC_PAR_ZERO2, FSC_F32 },
        { "tp 2 x pp 2 ddp", 0, 4, 2, 2, 1, FSC_PAR_DDP, FSC_F32 },
        { "tp 2 x pp 2 x dp 2 fsdp", 0, 8, 2, 2, 1, FSC_PAR_FSDP, FSC_F32 },
    };
    check_cases(cases, (int)(sizeof cases / sizeof cases[0]));
}

static void test_save_experts(void **state) {
    (void)state;
    const sb_case cases[] = {
        { "ep 2 fsdp", 1, 2, 1, 1, 2, FSC_PAR_FSDP, FSC_F32 },
        { "ep 2 x dp 2 zero1", 1, 4, 1, 1, 2, FSC_PAR_ZERO1, FSC_F32 },
        { "ep 2 x pp 2 fsdp", 1, 4, 2, 1, 2, FSC_PAR_FSDP, FSC_F32 },
    };
    check_cases(cases, (int)(sizeof cases / sizeof cases[0]));
}

/* Under a data limit 16 MiB above what the process uses, a pipeline of ~26 MB of parameters saves and hands rank 0
 * its full parameters; the file holds them. */
static void test_save_host_memory(void **state) {
    (void)state;
    if (SB_SANITIZED) skip();
    char path[64];
    snprintf(path, sizeof path, "/tmp/fsc_save_bounded_%d_big", (int)getpid());
    const fsc_gpt_config cfg = { .layers = 8, .dim = 256, .heads = 4, .seq = 8, .vocab = 256 };
    const size_t P = fsc_gpt_num_params(&cfg);
    assert_true(P * sizeof(float) > SB_MARGIN * 3 / 2); /* a copy of the model does not fit */
    sb_run x = sb_make(cfg, 4, FSC_PAR_DDP, 4, 1, 1, path);
    free(x.params[3]);
    x.params[3] = NULL; /* rank 0 only */
    x.limit = 1;
    sb_go(&x);
    assert_true(x.limited); /* the limit was in force */
    fsc_st_file *f = NULL;
    assert_ok(fsc_st_open(path, &f));
    float *v = malloc(P * sizeof(float));
    assert_non_null(v);
    size_t off = 0;
    fsc_device *dev = NULL;
    fsc_model *m = NULL;
    assert_ok(fsc_device_create("cpu", NULL, &dev));
    assert_ok(fsc_gpt_model_create(dev, &cfg, &m));
    for (int i = 0; i < m->n_tensors; i++) {
        const fsc_st_entry *en = fsc_st_find_weight(f, m->info[i].name);
        assert_non_null(en);
        assert_ok(fsc_st_read_f32(f, en, v + off, 0, m->info[i].numel));
        off += m->info[i].numel;
    }
    assert_int_equal(off, P);
    assert_bits_equal(v, x.params[0], P, "the full parameters and the saved file");
    fsc_model_free(m);
    fsc_device_free(dev);
    fsc_st_close(f);
    free(v);
    sb_free(&x);
    unlink(path);
}

static void test_save_disk_full(void **state) {
    (void)state;
    pt_run p = pt_make(4, FSC_PAR_FSDP);
    p.po.pp = 2;
    p.po.accum = 2;
    p.po.no_sync = 1;
    check_save_fails_on_every_rank(p, 4, "pp 2 x dp 2 fsdp");
    pt_run t = pt_make(2, FSC_PAR_DDP);
    t.cfg.heads = 2, t.cfg.dim = 24, t.cfg.vocab = 50;
    t.po.tp = 2;
    check_save_fails_on_every_rank(t, 2, "tp 2 ddp");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_save_pipelines),
        cmocka_unit_test(test_save_tensor_parallel),
        cmocka_unit_test(test_save_experts),
        cmocka_unit_test(test_save_host_memory),
        cmocka_unit_test(test_save_disk_full),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
