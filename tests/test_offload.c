/* Offload to host memory (po.offload, docs/offload.md; lib/parallel/offload.c and fsdp.c's offload all).
 * Oracles:
 *  - bits: every strategy that offloads (zero1 and zero2 with optim; fsdp full_shard with and without reshard,
 *    shard_grad_op, no_shard and hybrid_shard with optim and all) gives the losses, the clipped gradient norms and
 *    the final parameters of the same run without offload bit for bit, after 3 steps of AdamW with clipping, and
 *    holds no optimizer state on the devices; with f32 and bf16, with accumulation (reducing every micro-batch, and
 *    once under no_sync), with prefetch 0 and 1;
 *  - checkpoints: a run saved with offload and resumed without (and the reverse) equals the run without a
 *    break bit for bit (parameters and optimizer states); weights saved by fsdp with offload all load into fsdp
 *    with every mode and zero2 with optim as the saver's parameters, bit for bit, offload all's host masters
 *    written in place (the load uploads less than a quarter of them), and a bf16 weights file loads with optim
 *    and all as without offload;
 *  - memory: the device ledger holds no optimizer state with optim or all, and with all its parameters and
 *    gradients peak below the run without offload by at least the master and reduced-gradient shards but those
 *    in transit (one unit's, two with prefetch), which the host ledger holds instead;
 *  - tensor parallelism (tp 2; dp 1, 2 and 4; with and without sequence parallelism): zero1 and zero2 with optim,
 *    fsdp full_shard, shard_grad_op, no_shard and hybrid_shard with optim and all give the losses, the clipped
 *    gradient norms and the final parameters of the same run without offload bit for bit, with f32 and bf16,
 *    accumulation, prefetch 0 and 1 and the exact reduction; a checkpoint saved at dp 2 x tp 2 with offload resumes
 *    without (and the reverse, and optim into all) with the run's state unbroken, and loads at tp 1 with the saver's
 *    state; a weights file of dp 2 x tp 2 (sp) is checked as above (check_weights);
 *  - refusals: ddp (inside pipeline stages too), zero with all and a bad mode fail with FSC_ERR_UNSUPPORTED /
 *    FSC_ERR_INVALID (offload inside pipeline stages, with tensor parallelism too: tests/test_pipe_offload.c);
 *  - the simulator's copy bandwidth: copies take at least bytes / bandwidth, and offload keeps its bits with it
 *    (fsdp, zero1 and zero2, optim and all, prefetch 0 and 1 with limits 2 and 3, with accumulation). The
 *    asynchronous copies are made at their wait on the cpu device (device.h), so a strategy that read a copy's
 *    destination early would compute other bits here. */
#include <time.h>
#include "ckpttest.h"

typedef struct {
    fsc_parallel_kind kind;
    fsc_shard_strategy sh;
    int reshard, hybrid, all; /* all: offload all runs with it too */
    const char *what;
} of_case;

static const of_case cases[] = {
    {FSC_PAR_ZERO1, 0, -1, 0, 0, "zero1"},
    {FSC_PAR_ZERO2, 0, -1, 0, 0, "zero2"},
    {FSC_PAR_FSDP, FSC_SHARD_FULL, 1, 0, 1, "fsdp full_shard"},
    {FSC_PAR_FSDP, FSC_SHARD_FULL, 0, 0, 1, "fsdp full_shard, no reshard"},
    {FSC_PAR_FSDP, FSC_SHARD_GRAD_OP, -1, 0, 1, "fsdp shard_grad_op"},
    {FSC_PAR_FSDP, FSC_SHARD_NONE, -1, 0, 1, "fsdp no_shard"},
    {FSC_PAR_FSDP, FSC_SHARD_HYBRID, -1, 2, 1, "fsdp hybrid_shard"},
};

static pt_run make(int N, const of_case *c, fsc_offload_mode off, int accum, int no_sync, fsc_dtype dt, int pf) {
    pt_run r = pt_make(N, c->kind);
    r.cfg.layers = 3;
    r.po.shard = c->sh;
    r.po.reshard_after_forward = c->reshard;
    r.po.hybrid_group = c->hybrid;
    r.po.offload = off;
    r.po.accum = accum;
    r.po.no_sync = no_sync;
    r.po.prefetch = pf;
    r.po.param_dtype = r.po.reduce_dtype = dt;
    r.po.bucket_bytes = 2048; /* zero2: several buckets, so several optimizer segments */
    return r;
}

/* A layout: dp ranks x tp (tp 1: the engines without tensor parallelism; tp 2: the GPT built on a tensor group of 2,
 * sp: with sequence parallelism), the model's sequence seq (0: partest's default). */
typedef struct { int dp, tp, sp, seq; } of_layout;

static const char *layout_name(of_layout l, char *buf, size_t n) {
    snprintf(buf, n, "dp %d x tp %d%s", l.dp, l.tp, l.sp ? " (sp)" : "");
    return buf;
}

/* tensor parallelism: the GPT built on a tensor group of 2 at dp x tp 2, with and without sequence parallelism */
static pt_run make_tp(int dp, int sp, const of_case *c, fsc_offload_mode off, int accum, int no_sync, fsc_dtype dt,
                      int pf) {
    pt_run r = make(2 * dp, c, off, accum, no_sync, dt, pf);
    r.po.tp = 2;
    r.po.sequence_parallel = sp;
    r.cfg.seq = 8; /* the sequence splits over the tensor group under sp */
    return r;
}

static pt_run make_at(of_layout l, const of_case *c, fsc_offload_mode off, int accum, int no_sync, fsc_dtype dt,
                      int pf) {
    return l.tp > 1 ? make_tp(l.dp, l.sp, c, off, accum, no_sync, dt, pf) : make(l.dp, c, off, accum, no_sync, dt, pf);
}

/* Every case at layout l against itself without offload: the losses and final parameters, the clipped gradient norms
 * (the norm over the data group, and the tensor group at tp 2) bit for bit; no optimizer state on the devices. */
static void check_same(of_layout l, int accum, int no_sync, fsc_dtype dt, int pf) {
    char lay[24];
    layout_name(l, lay, sizeof lay);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        if (cases[k].hybrid && l.dp < 4) continue;
        if (l.dp == 1 && cases[k].kind == FSC_PAR_FSDP && cases[k].sh != FSC_SHARD_FULL) continue; /* one shard */
        pt_run base = make_at(l, &cases[k], FSC_OFFLOAD_NONE, accum, no_sync, dt, pf);
        pt_train(&base);
        if (!(base.info[0].grad_norm > base.po.clip)) fail_msg("%s, %s: the first step did not clip", cases[k].what, lay);
        for (int m = FSC_OFFLOAD_OPTIM; m <= (cases[k].all ? FSC_OFFLOAD_ALL : FSC_OFFLOAD_OPTIM); m++) {
            pt_run o = make_at(l, &cases[k], (fsc_offload_mode)m, accum, no_sync, dt, pf);
            pt_train(&o);
            char what[220];
            snprintf(what, sizeof what, "%s, %s, accum %d%s, %s, prefetch %d: offload %s against none", cases[k].what,
                     lay, accum, no_sync ? " (no_sync)" : "", fsc_dtype_name(dt), pf,
                     fsc_offload_mode_name((fsc_offload_mode)m));
            pt_assert_same(&base, &o, what);
            for (int s = 0; s < base.steps; s++) /* clipping was active: the norms are the same too */
                if (memcmp(&base.info[s].grad_norm, &o.info[s].grad_norm, sizeof(double)) != 0)
                    fail_msg("%s: grad norm of step %d differs: %.17g vs %.17g", what, s, o.info[s].grad_norm,
                             base.info[s].grad_norm);
            for (int r = 0; r < o.world; r++) /* the optimizer state on the host */
                if (o.peak[r][FSC_TAG_OPTIM] != 0) fail_msg("%s: rank %d's device holds optimizer state", what, r);
            free(o.params);
        }
        free(base.params);
    }
}

/* world N without tensor parallelism */
static void check_all(int N, int accum, int no_sync, fsc_dtype dt, int pf) {
    check_same((of_layout){N, 1, 0, 0}, accum, no_sync, dt, pf);
}

static void test_offload_same_bits_f32(void **state) {
    (void)state;
    check_all(2, 1, 1, FSC_F32, 1);
    check_all(4, 1, 1, FSC_F32, 0);
    check_all(3, 1, 1, FSC_F32, 1);
}

static void test_offload_same_bits_accum_bf16(void **state) {
    (void)state;
    check_all(4, 2, 0, FSC_F32, 1); /* every micro-batch reduces, accumulating into the (host) shard */
    check_all(2, 2, 1, FSC_F32, 1);
    check_all(4, 1, 1, FSC_BF16, 1);
    check_all(2, 2, 0, FSC_BF16, 0);
}

/* ---- checkpoints and weights files, at a layout (of_layout) ---- */
static ct_job ckpt_job(fsc_parallel_kind kind, of_layout l, fsc_offload_mode off) {
    ct_job j = ct_make(l.dp * l.tp, kind);
    j.run.po.offload = off;
    if (l.tp > 1) j.run.po.tp = l.tp, j.run.po.sequence_parallel = l.sp;
    if (l.seq) j.run.cfg.seq = l.seq;
    return j;
}

/* Saved with offload a after 2 steps, resumed with offload b for 2 more: the state of the run without offload and
 * without a break (parameters and both AdamW moments). At tp 2 the checkpoint also loads at tp 1 (the same dp, the
 * full tensors in one rank's slices) with offload b: the saver's state. */
static void check_resume(fsc_parallel_kind kind, of_layout l, fsc_offload_mode a, fsc_offload_mode b) {
    ct_job whole = ckpt_job(kind, l, FSC_OFFLOAD_NONE), first = ckpt_job(kind, l, a), second = ckpt_job(kind, l, b);
    whole.from = 0, whole.to = 4;
    ct_run(&whole);
    char *dir = ct_tmpdir(), path[700], lay[24], what[120];
    first.from = 0, first.to = 2, first.save_dir = dir;
    ct_run(&first);
    ct_step_path(path, sizeof path, dir, 2);
    second.from = 2, second.to = 4, second.load = path;
    ct_run(&second);
    snprintf(what, sizeof what, "%s, %s: saved with offload %s, resumed with %s", fsc_parallel_kind_name(kind),
             layout_name(l, lay, sizeof lay), fsc_offload_mode_name(a), fsc_offload_mode_name(b));
    ct_assert_state_equal(&whole, &second, what);
    if (l.tp > 1) {
        const of_layout l1 = {l.dp, 1, 0, l.seq};
        ct_job one = ckpt_job(kind, l1, b);
        one.from = one.to = 2, one.load = path;
        ct_run(&one);
        char lay1[24];
        snprintf(what, sizeof what, "%s: saved at %s with offload %s, loaded at %s with %s",
                 fsc_parallel_kind_name(kind), lay, fsc_offload_mode_name(a), layout_name(l1, lay1, sizeof lay1),
                 fsc_offload_mode_name(b));
        ct_assert_state_equal(&first, &one, what);
        ct_free(&one);
    }
    ct_free(&whole);
    ct_free(&first);
    ct_free(&second);
    ct_rmtree(dir);
}

/* Saved with offload, resumed without (and the reverse): the state of the run without a break. */
static void test_offload_checkpoint_resumes_without(void **state) {
    (void)state;
    const of_layout plain = {2, 1, 0, 0};
    check_resume(FSC_PAR_FSDP, plain, FSC_OFFLOAD_ALL, FSC_OFFLOAD_NONE);
    check_resume(FSC_PAR_FSDP, plain, FSC_OFFLOAD_OPTIM, FSC_OFFLOAD_NONE);
    check_resume(FSC_PAR_FSDP, plain, FSC_OFFLOAD_NONE, FSC_OFFLOAD_ALL);
    check_resume(FSC_PAR_ZERO2, plain, FSC_OFFLOAD_OPTIM, FSC_OFFLOAD_NONE);
}

/* Weights files: saved by an engine after 2 steps, loaded into engines with offload none, optim and all: every one
 * returns the saver's full parameters bit for bit (the masters were read into host memory under all). */
typedef struct {
    pt_run run;
    const char *path;
    int save;     /* 1: train 2 steps and save; 0: load */
    fsc_dtype dt; /* the saved file's dtype (FSC_F32: fsc_engine_save_weights) */
    float *params;
    size_t up[PT_MAX_WORLD], host[PT_MAX_WORLD]; /* bytes uploaded by the load; host params peak */
} of_weights;

static fsc_status weights_rank_fn(fsc_rank *r, void *arg) {
    of_weights *w = arg;
    pt_run *run = &w->run;
    const int T = run->cfg.seq;
    fsc_engine *e = NULL;
    FSC_TRY(fsc_engine_create(r, &run->cfg, &run->po, &run->oc, run->seed, &e));
    const fsc_layout *l = fsc_engine_layout(e);
    const int lb = run->batch / l->dp;
    int32_t *tok = calloc((size_t)lb * T, sizeof(int32_t)), *tgt = calloc((size_t)lb * T, sizeof(int32_t));
    fsc_status s = tok && tgt ? FSC_OK : FSC_ERR_NOMEM;
    for (int st = 0; st < 2 && w->save && s == FSC_OK; st++) {
        pt_batch(tok, tgt, st, run->batch, l->data, lb, T, run->cfg.vocab);
        s = fsc_engine_step(e, tok, tgt, lb, run->batch, NULL);
    }
    if (s == FSC_OK && w->save)
        s = w->dt == FSC_F32 ? fsc_engine_save_weights(e, w->path) : fsc_engine_save_weights_dtype(e, w->path, w->dt);
    else if (s == FSC_OK) {
        const size_t up0 = fsc_device_copied_bytes(r->dev, 1);
        s = fsc_engine_load_weights(e, w->path);
        w->up[r->rank] = fsc_device_copied_bytes(r->dev, 1) - up0;
        fsc_device *h = fsc_engine_host_device(e);
        w->host[r->rank] = h ? fsc_device_peak_bytes(h, FSC_TAG_PARAMS) : 0;
    }
    if (s == FSC_OK) s = fsc_engine_full_params(e, r->rank == 0 ? w->params : NULL);
    free(tok);
    free(tgt);
    fsc_engine_free(e);
    return s;
}

/* tp 1: partest's engine on dp ranks; tp 2: make_tp's (full_shard for fsdp) */
static void weights_run(of_weights *w, of_layout l, fsc_parallel_kind kind, fsc_offload_mode off, int save) {
    if (l.tp > 1) {
        const of_case c = {kind, FSC_SHARD_FULL, -1, 0, 0, ""};
        w->run = make_tp(l.dp, l.sp, &c, off, 1, 1, FSC_F32, 1);
    } else {
        w->run = pt_make(l.dp, kind);
        w->run.po.offload = off;
    }
    w->save = save;
    w->params = calloc(fsc_gpt_num_params(&w->run.cfg), sizeof(float));
    fsc_cluster_opts co = {.world = w->run.world, .device = "cpu", .timeout_s = 30};
    assert_ok(fsc_cluster_run(&co, weights_rank_fn, w));
}

/* Saved by fsdp with offload all, loaded by fsdp with every mode and by zero2 with optim: the saver's parameters;
 * with all the file is read into the host masters in place (the load uploads less than a quarter of a rank's
 * masters: its few agreement bytes, nothing like the masters). */
static void check_weights(of_layout l) {
    char *dir = ct_tmpdir(), path[600], lay[24];
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
    of_weights saved = {.path = path};
    weights_run(&saved, l, FSC_PAR_FSDP, FSC_OFFLOAD_ALL, 1);
    const struct { fsc_parallel_kind kind; fsc_offload_mode m; } into[] = {
        {FSC_PAR_FSDP, FSC_OFFLOAD_NONE}, {FSC_PAR_FSDP, FSC_OFFLOAD_OPTIM}, {FSC_PAR_FSDP, FSC_OFFLOAD_ALL},
        {FSC_PAR_ZERO2, FSC_OFFLOAD_OPTIM},
    };
    for (size_t k = 0; k < sizeof into / sizeof into[0]; k++) {
        of_weights loaded = {.path = path};
        weights_run(&loaded, l, into[k].kind, into[k].m, 0);
        char what[120];
        snprintf(what, sizeof what, "%s weights saved with offload all, loaded by %s with %s",
                 layout_name(l, lay, sizeof lay), fsc_parallel_kind_name(into[k].kind), fsc_offload_mode_name(into[k].m));
        assert_bits_equal(saved.params, loaded.params, fsc_gpt_num_params(&saved.run.cfg), what);
        for (int r = 0; r < loaded.run.world && into[k].m == FSC_OFFLOAD_ALL; r++)
            if (!(loaded.host[r] > 0 && loaded.up[r] < loaded.host[r] / 4))
                fail_msg("%s: rank %d uploaded %zu bytes loading, its host masters are %zu bytes", what, r,
                         loaded.up[r], loaded.host[r]);
        free(loaded.params);
    }
    free(saved.params);
    ct_rmtree(dir);
}

static void test_offload_weights_save_and_load(void **state) {
    (void)state;
    check_weights((of_layout){2, 1, 0, 0});
}

/* A bf16 weights file (main's fsc_engine_save_weights_dtype, converted on load as Hugging Face files are), saved
 * without offload: offload all reads it into the host masters converted as the device path does, so every mode
 * loads the bits offload none loads. */
static void test_offload_loads_bf16_weights(void **state) {
    (void)state;
    const of_layout plain = {2, 1, 0, 0};
    char *dir = ct_tmpdir(), path[600];
    snprintf(path, sizeof path, "%s/w16.safetensors", dir);
    of_weights saved = {.path = path, .dt = FSC_BF16};
    weights_run(&saved, plain, FSC_PAR_FSDP, FSC_OFFLOAD_NONE, 1);
    of_weights ref = {.path = path};
    weights_run(&ref, plain, FSC_PAR_FSDP, FSC_OFFLOAD_NONE, 0);
    for (int m = FSC_OFFLOAD_OPTIM; m <= FSC_OFFLOAD_ALL; m++) {
        of_weights loaded = {.path = path};
        weights_run(&loaded, plain, FSC_PAR_FSDP, (fsc_offload_mode)m, 0);
        char what[64];
        snprintf(what, sizeof what, "bf16 weights loaded with offload %s", fsc_offload_mode_name((fsc_offload_mode)m));
        assert_bits_equal(ref.params, loaded.params, fsc_gpt_num_params(&ref.run.cfg), what);
        free(loaded.params);
    }
    free(ref.params);
    free(saved.params);
    ct_rmtree(dir);
}

/* ---- memory: both ledgers of every rank after training ---- */
typedef struct {
    pt_run run;
    size_t dev[PT_MAX_WORLD][FSC_TAG_COUNT], host[PT_MAX_WORLD][FSC_TAG_COUNT];
    size_t up[PT_MAX_WORLD], down[PT_MAX_WORLD]; /* bytes copied to and from the device in the last step */
} of_mem;

static fsc_status mem_rank_fn(fsc_rank *r, void *arg) {
    of_mem *m = arg;
    pt_run *run = &m->run;
    const int T = run->cfg.seq, lb = run->batch / r->world;
    fsc_engine *e = NULL;
    FSC_TRY(fsc_engine_create(r, &run->cfg, &run->po, &run->oc, run->seed, &e));
    int32_t *tok = calloc((size_t)lb * T, sizeof(int32_t)), *tgt = calloc((size_t)lb * T, sizeof(int32_t));
    fsc_status s = tok && tgt ? FSC_OK : FSC_ERR_NOMEM;
    for (int i = 0; i < lb * T && s == FSC_OK; i++) tok[i] = pt_token((size_t)i, run->cfg.vocab), tgt[i] = tok[i];
    for (int st = 0; st < 2 && s == FSC_OK; st++) {
        fsc_device_reset_copied(r->dev);
        s = fsc_engine_step(e, tok, tgt, lb, run->batch, NULL);
    }
    m->up[r->rank] = fsc_device_copied_bytes(r->dev, 1);
    m->down[r->rank] = fsc_device_copied_bytes(r->dev, 0);
    fsc_device *h = fsc_engine_host_device(e);
    if (run->po.offload != FSC_OFFLOAD_NONE && !h) s = fsc_error(FSC_ERR_INTERNAL, "offload without a host device");
    for (int t = 0; t < FSC_TAG_COUNT; t++) {
        m->dev[r->rank][t] = fsc_device_peak_bytes(r->dev, (fsc_tag)t);
        m->host[r->rank][t] = h ? fsc_device_peak_bytes(h, (fsc_tag)t) : 0;
    }
    free(tok);
    free(tgt);
    fsc_engine_free(e);
    return s;
}

static void measure(of_mem *m, fsc_parallel_kind kind, fsc_offload_mode off, int prefetch) {
    memset(m, 0, sizeof *m);
    m->run = pt_make(4, kind);
    m->run.cfg.layers = 4;
    m->run.po.offload = off;
    m->run.po.prefetch = prefetch;
    fsc_cluster_opts co = {.world = 4, .device = "cpu", .timeout_s = 30};
    assert_ok(fsc_cluster_run(&co, mem_rank_fn, m));
}

/* with prefetch 0 and 1 (1: the reduce-scatters overlap, each in flight holding its unit's device shard) */
static void check_memory(int prefetch) {
    static of_mem none, optim, all, z;
    measure(&none, FSC_PAR_FSDP, FSC_OFFLOAD_NONE, prefetch);
    measure(&optim, FSC_PAR_FSDP, FSC_OFFLOAD_OPTIM, prefetch);
    measure(&all, FSC_PAR_FSDP, FSC_OFFLOAD_ALL, prefetch);
    measure(&z, FSC_PAR_ZERO1, FSC_OFFLOAD_OPTIM, prefetch);
    const int N = 4;
    const size_t shard = (fsc_gpt_num_params(&none.run.cfg) / N) * sizeof(float); /* at least this per rank */
    /* the largest unit's shard: the root (every tensor outside the wrapped blocks) or a block */
    size_t root = 0, block = 0;
    fsc_param_info pi;
    for (int i = 0; i < fsc_gpt_num_tensors(&none.run.cfg); i++) {
        assert_ok(fsc_gpt_param_info(&none.run.cfg, i, &pi));
        if (pi.layer == 1) block += pi.numel;
        if (pi.layer == 0 || pi.layer == none.run.cfg.layers + 1) root += pi.numel;
    }
    size_t big = ((root > block ? root : block) + N - 1) / N * sizeof(float);
    for (int r = 0; r < N; r++) {
        assert_true(none.dev[r][FSC_TAG_OPTIM] >= 2 * shard); /* AdamW's two moments */
        assert_int_equal(optim.dev[r][FSC_TAG_OPTIM], 0);
        assert_int_equal(all.dev[r][FSC_TAG_OPTIM], 0);
        assert_int_equal(z.dev[r][FSC_TAG_OPTIM], 0);
        assert_int_equal(optim.host[r][FSC_TAG_OPTIM], none.dev[r][FSC_TAG_OPTIM]);
        assert_int_equal(all.host[r][FSC_TAG_OPTIM], none.dev[r][FSC_TAG_OPTIM]);
        assert_true(z.host[r][FSC_TAG_OPTIM] >= 2 * shard);
        /* optim copies per step exactly the rank's masters and reduced gradients down and the masters up (the
         * host copies of the masters are its host params); all copies every reduced shard down and every master
         * up at least once (less the few bytes of the vote and the norm, which run on the host under all) */
        if (optim.down[r] - none.down[r] != 2 * optim.host[r][FSC_TAG_PARAMS] ||
            optim.up[r] - none.up[r] != optim.host[r][FSC_TAG_PARAMS])
            fail_msg("rank %d: offload optim copied %zu down and %zu up per step beyond none's, not 2 x %zu and %zu", r,
                     optim.down[r] - none.down[r], optim.up[r] - none.up[r], optim.host[r][FSC_TAG_PARAMS],
                     optim.host[r][FSC_TAG_PARAMS]);
        if (all.down[r] + 4096 < none.down[r] + all.host[r][FSC_TAG_GRADS] ||
            all.up[r] + 4096 < none.up[r] + all.host[r][FSC_TAG_PARAMS])
            fail_msg("rank %d: offload all copied %zu down and %zu up, none %zu and %zu, host shards %zu and %zu", r,
                     all.down[r], all.up[r], none.down[r], none.up[r], all.host[r][FSC_TAG_GRADS],
                     all.host[r][FSC_TAG_PARAMS]);
        /* optim keeps masters and reduced gradients on the device */
        assert_int_equal(optim.dev[r][FSC_TAG_PARAMS], none.dev[r][FSC_TAG_PARAMS]);
        assert_int_equal(optim.dev[r][FSC_TAG_GRADS], none.dev[r][FSC_TAG_GRADS]);
        /* all: the masters left the device (what remains is the gathered units), the host holds them */
        assert_true(all.host[r][FSC_TAG_PARAMS] >= shard);
        if (all.dev[r][FSC_TAG_PARAMS] + all.host[r][FSC_TAG_PARAMS] != none.dev[r][FSC_TAG_PARAMS])
            fail_msg("rank %d: offload all peak params %zu on the device + %zu on the host, none %zu", r,
                     all.dev[r][FSC_TAG_PARAMS], all.host[r][FSC_TAG_PARAMS], none.dev[r][FSC_TAG_PARAMS]);
        /* and the reduced gradients: on the device only the units' full gradients and one reduced shard (with
         * prefetch two: one in its reduction, one on its way to the host while the next unit computes) */
        assert_true(all.host[r][FSC_TAG_GRADS] >= shard);
        const size_t transit = (prefetch ? 2 : 1) * big;
        if (all.dev[r][FSC_TAG_GRADS] + all.host[r][FSC_TAG_GRADS] > none.dev[r][FSC_TAG_GRADS] + transit)
            fail_msg("prefetch %d, rank %d: offload all peak grads %zu on the device + %zu on the host, none %zu, reduced "
                     "shards in transit %zu", prefetch, r, all.dev[r][FSC_TAG_GRADS], all.host[r][FSC_TAG_GRADS],
                     none.dev[r][FSC_TAG_GRADS], transit);
    }
}

static void test_offload_moves_memory_to_host(void **state) {
    (void)state;
    check_memory(0);
    check_memory(1);
}

/* The simulator's host<->device copy bandwidth (fsc_cluster_opts.sim_copy_gbps): an upload and a download of
 * 8 MiB at 1 GB/s each take at least 8.39 ms of the rank's time; a bad value is refused. Oracle: the wall clock from below (a loaded machine only makes it longer). */
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static fsc_status copy_rank_fn(fsc_rank *r, void *arg) {
    double *took = arg;
    const size_t bytes = (size_t)8 << 20;
    void *d = NULL, *h = malloc(bytes);
    fsc_status s = h ? fsc_device_alloc(r->dev, FSC_TAG_WORKSPACE, bytes, &d) : FSC_ERR_NOMEM;
    if (s == FSC_OK) memset(h, 1, bytes);
    double t0 = now_s();
    if (s == FSC_OK) s = fsc_device_upload(r->dev, d, h, bytes);
    if (s == FSC_OK) took[2 * r->rank] = now_s() - t0;
    t0 = now_s();
    if (s == FSC_OK) s = fsc_device_download(r->dev, h, d, bytes);
    if (s == FSC_OK) took[2 * r->rank + 1] = now_s() - t0;
    fsc_device_release(r->dev, d);
    free(h);
    return s;
}

static void test_simulated_copy_bandwidth(void **state) {
    (void)state;
    double took[4] = {0};
    fsc_cluster_opts co = {.world = 2, .device = "cpu", .timeout_s = 30, .sim_copy_gbps = 1.0};
    assert_ok(fsc_cluster_run(&co, copy_rank_fn, took));
    const double want = (double)((size_t)8 << 20) / 1e9;
    for (int k = 0; k < 4; k++)
        if (took[k] < want) fail_msg("copy %d took %.6f s, less than %.6f s at 1 GB/s", k, took[k], want);
    co.sim_copy_gbps = -1;
    assert_err(fsc_cluster_run(&co, copy_rank_fn, took), FSC_ERR_INVALID, "sim_copy_gbps");
    /* and offload keeps its bits under a copy cost (the copies then end in another order relative to the compute
     * and the collectives): synchronous (prefetch 0) and asynchronous, with accumulation */
    const struct { int c; fsc_offload_mode m; int accum, no_sync, pf, limit; } runs[] = {
        {2, FSC_OFFLOAD_ALL, 1, 1, 1, 0}, {2, FSC_OFFLOAD_ALL, 2, 0, 1, 0}, {2, FSC_OFFLOAD_ALL, 2, 0, 0, 0},
        {2, FSC_OFFLOAD_ALL, 2, 0, 1, 3}, {4, FSC_OFFLOAD_ALL, 1, 1, 1, 0}, {3, FSC_OFFLOAD_ALL, 2, 0, 1, 3},
        {0, FSC_OFFLOAD_OPTIM, 2, 0, 1, 0}, {1, FSC_OFFLOAD_OPTIM, 1, 1, 1, 0}, {1, FSC_OFFLOAD_OPTIM, 1, 1, 0, 0},
        {2, FSC_OFFLOAD_OPTIM, 2, 1, 1, 0},
    };
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
        const of_case *c = &cases[runs[k].c];
        pt_run a = make(2, c, FSC_OFFLOAD_NONE, runs[k].accum, runs[k].no_sync, FSC_F32, runs[k].pf);
        pt_run b = make(2, c, runs[k].m, runs[k].accum, runs[k].no_sync, FSC_F32, runs[k].pf);
        a.cfg.layers = b.cfg.layers = 4; /* several blocks: uploads ahead of more than one prefetch */
        a.po.prefetch_limit = b.po.prefetch_limit = runs[k].limit;
        pt_train(&a);
        b.params = calloc(fsc_gpt_num_params(&b.cfg), sizeof(float));
        co = (fsc_cluster_opts){.world = 2, .device = "cpu", .timeout_s = 30, .sim_copy_gbps = 5.0};
        assert_ok(fsc_cluster_run(&co, pt_rank_fn, &b));
        char what[160];
        snprintf(what, sizeof what, "%s, offload %s, accum %d, prefetch %d (limit %d), copies at 5 GB/s: against none",
                 c->what, fsc_offload_mode_name(runs[k].m), runs[k].accum, runs[k].pf, runs[k].limit);
        pt_assert_same(&a, &b, what);
        free(a.params);
        free(b.params);
    }
}

/* ---- tensor parallelism: the GPT built on a tensor group of 2 (its slices sharded, reduced and stepped over the
 * data group of the ranks holding the same slices), dp 1 x tp 2 and dp 2 x tp 2, with and without sequence
 * parallelism (whose layers sum the norms' partial gradients over the tensor group) ---- */
/* dp x tp 2, without and with sequence parallelism */
static void check_tp(int dp, int accum, int no_sync, fsc_dtype dt, int pf) {
    for (int sp = 0; sp <= 1; sp++) check_same((of_layout){dp, 2, sp, 8}, accum, no_sync, dt, pf);
}

static void test_offload_tp_same_bits(void **state) {
    (void)state;
    check_tp(2, 1, 1, FSC_F32, 1);
    check_tp(1, 1, 1, FSC_F32, 0);
    check_tp(2, 2, 0, FSC_F32, 1); /* every micro-batch reduces, accumulating into the (host) shard */
    check_tp(2, 1, 1, FSC_BF16, 0);
}

/* The exact reduction (reduce_exact: each unit's gradient summed as fixed point) at dp 2 x tp 2 with sp, two
 * micro-batches: zero2 with optim, fsdp full_shard with optim and all, each against itself without offload. */
static void test_offload_tp_exact(void **state) {
    (void)state;
    const int pick[] = {1, 2};
    for (size_t i = 0; i < sizeof pick / sizeof pick[0]; i++) {
        const of_case *c = &cases[pick[i]];
        pt_run base = make_tp(2, 1, c, FSC_OFFLOAD_NONE, 2, 1, FSC_F32, 1);
        base.po.reduce_exact = 1;
        pt_train(&base);
        for (int m = FSC_OFFLOAD_OPTIM; m <= (c->all ? FSC_OFFLOAD_ALL : FSC_OFFLOAD_OPTIM); m++) {
            pt_run o = make_tp(2, 1, c, (fsc_offload_mode)m, 2, 1, FSC_F32, 1);
            o.po.reduce_exact = 1;
            pt_train(&o);
            char what[160];
            snprintf(what, sizeof what, "%s, dp 2 x tp 2 (sp), reduce_exact, accum 2: offload %s against none", c->what,
                     fsc_offload_mode_name((fsc_offload_mode)m));
            pt_assert_same(&base, &o, what);
            free(o.params);
        }
        free(base.params);
    }
}

/* dp 4 x tp 2: fsdp hybrid_shard (two-phase reductions; the norm over the shard group and the tensor group) */
static void test_offload_tp_hybrid(void **state) {
    (void)state;
    pt_run base = make_tp(4, 1, &cases[6], FSC_OFFLOAD_NONE, 1, 1, FSC_F32, 1);
    pt_train(&base);
    for (int m = FSC_OFFLOAD_OPTIM; m <= FSC_OFFLOAD_ALL; m++) {
        pt_run o = make_tp(4, 1, &cases[6], (fsc_offload_mode)m, 1, 1, FSC_F32, 1);
        pt_train(&o);
        pt_assert_same(&base, &o, m == FSC_OFFLOAD_ALL ? "hybrid_shard, dp 4 x tp 2 (sp): offload all against none"
                                                       : "hybrid_shard, dp 4 x tp 2 (sp): offload optim against none");
        free(o.params);
    }
    free(base.params);
}

/* Checkpoints of tensor slices at dp 2 x tp 2 (check_resume): resumed with offload from without (and the reverse,
 * and optim into all), the state of the run without a break; loaded at tp 1: the saver's state. */
static void test_offload_tp_checkpoint(void **state) {
    (void)state;
    const of_layout tp = {2, 2, 0, 8}, sp = {2, 2, 1, 8}; /* the sequence splits over the tensor group under sp */
    check_resume(FSC_PAR_FSDP, tp, FSC_OFFLOAD_ALL, FSC_OFFLOAD_NONE);
    check_resume(FSC_PAR_FSDP, sp, FSC_OFFLOAD_NONE, FSC_OFFLOAD_ALL);
    check_resume(FSC_PAR_FSDP, sp, FSC_OFFLOAD_OPTIM, FSC_OFFLOAD_ALL);
    check_resume(FSC_PAR_ZERO2, sp, FSC_OFFLOAD_OPTIM, FSC_OFFLOAD_NONE);
    check_resume(FSC_PAR_ZERO1, tp, FSC_OFFLOAD_NONE, FSC_OFFLOAD_OPTIM);
}

/* Weights files at dp 2 x tp 2 (sp), saved by fsdp with offload all (check_weights): every mode loads the saver's
 * parameters, offload all's slices read into the host masters in place. */
static void test_offload_tp_weights(void **state) {
    (void)state;
    check_weights((of_layout){2, 2, 1, 8});
}

static fsc_status create_only(fsc_rank *r, void *arg) {
    pt_run *run = arg;
    fsc_engine *e = NULL;
    fsc_status s = fsc_engine_create(r, &run->cfg, &run->po, &run->oc, run->seed, &e);
    fsc_engine_free(e);
    return s;
}

static void expect_refused(fsc_parallel_kind kind, fsc_offload_mode off, int pp, fsc_status want, const char *needle) {
    const int world = kind == FSC_PAR_NONE ? 1 : 2; /* none runs on one rank */
    pt_run run = pt_make(world, kind);
    run.po.offload = off;
    run.po.pp = pp;
    run.po.no_sync = 1;
    fsc_cluster_opts co = {.world = world, .device = "cpu", .timeout_s = 30};
    fsc_status s = fsc_cluster_run(&co, create_only, &run);
    assert_int_equal(s, want);
    if (!strstr(fsc_last_error(), needle)) fail_msg("message \"%s\" lacks \"%s\"", fsc_last_error(), needle);
}

static void test_offload_refuses_what_it_does_not_run(void **state) {
    (void)state;
    expect_refused(FSC_PAR_DDP, FSC_OFFLOAD_OPTIM, 1, FSC_ERR_UNSUPPORTED, "fsdp, zero1 or zero2");
    expect_refused(FSC_PAR_NONE, FSC_OFFLOAD_OPTIM, 1, FSC_ERR_UNSUPPORTED, "on one rank too");
    expect_refused(FSC_PAR_ZERO1, FSC_OFFLOAD_ALL, 1, FSC_ERR_UNSUPPORTED, "fsdp only");
    expect_refused(FSC_PAR_ZERO2, FSC_OFFLOAD_ALL, 1, FSC_ERR_UNSUPPORTED, "fsdp only");
    expect_refused(FSC_PAR_DDP, FSC_OFFLOAD_OPTIM, 2, FSC_ERR_UNSUPPORTED, "fsdp, zero1 or zero2"); /* in stages too */
    /* offload all names fsdp alone (it named zero1 and zero2 too, which refuse it) */
    expect_refused(FSC_PAR_DDP, FSC_OFFLOAD_ALL, 1, FSC_ERR_UNSUPPORTED, "offload all runs with fsdp, not ddp");
    expect_refused(FSC_PAR_NONE, FSC_OFFLOAD_ALL, 1, FSC_ERR_UNSUPPORTED, "use fsdp with a world of 1");
    expect_refused(FSC_PAR_FSDP, (fsc_offload_mode)7, 1, FSC_ERR_INVALID, "none, optim or all");
    /* the engine's other numbers, refused by name: an initial loss scale that was replaced by 65536 without a word,
     * and a prefetch limit whose message blamed prefetch */
    /* and 0-or-1 switches given another value (2 acted as 1; a reshard_after_forward below -1 as the default) */
    static const char *const wants[] = { "init_loss_scale must be a finite number >= 0",
                                         "init_loss_scale must be a finite number >= 0", "prefetch_limit must be >= 0",
                                         "wrap must be FSC_WRAP_BLOCK", "no_sync must be 0 or 1, not 2",
                                         "sync_from_rank0 must be 0 or 1, not -1",
                                         "reshard_after_forward must be -1 (the strategy's default), 0 or 1, not -2",
                                         "reshard_after_forward must be -1 (the strategy's default), 0 or 1, not 3" };
    for (int k = 0; k < 8; k++) { /* and an FSDP wrap policy that acted as wrapping the whole model */
        pt_run run = pt_make(2, FSC_PAR_FSDP);
        run.po.no_sync = 1;
        if (k < 2) run.po.init_loss_scale = k ? NAN : -3.0f;
        else if (k == 2) run.po.prefetch_limit = -4;
        else if (k == 3) run.po.wrap = (fsc_wrap_policy)7;
        else if (k == 4) run.po.no_sync = 2;
        else if (k == 5) run.po.sync_from_rank0 = -1;
        else run.po.reshard_after_forward = k == 6 ? -2 : 3;
        fsc_cluster_opts co = {.world = 2, .device = "cpu", .timeout_s = 30};
        assert_int_equal(fsc_cluster_run(&co, create_only, &run), FSC_ERR_INVALID);
        const char *want = wants[k];
        if (!strstr(fsc_last_error(), want)) fail_msg("message \"%s\" lacks \"%s\"", fsc_last_error(), want);
    }
    assert_int_equal(fsc_parallel_opts_default().offload, FSC_OFFLOAD_NONE);
    assert_string_equal(fsc_offload_mode_name(FSC_OFFLOAD_ALL), "all");
}

int main(void) {
    if (getenv("FSC_TEST_FILTER")) cmocka_set_test_filter(getenv("FSC_TEST_FILTER")); /* one test: its name */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_offload_same_bits_f32),
        cmocka_unit_test(test_offload_same_bits_accum_bf16),
        cmocka_unit_test(test_offload_checkpoint_resumes_without),
        cmocka_unit_test(test_offload_weights_save_and_load),
        cmocka_unit_test(test_offload_loads_bf16_weights),
        cmocka_unit_test(test_offload_moves_memory_to_host),
        cmocka_unit_test(test_offload_refuses_what_it_does_not_run),
        cmocka_unit_test(test_simulated_copy_bandwidth),
        cmocka_unit_test(test_offload_tp_same_bits),
        cmocka_unit_test(test_offload_tp_hybrid),
        cmocka_unit_test(test_offload_tp_exact),
        cmocka_unit_test(test_offload_tp_checkpoint),
        cmocka_unit_test(test_offload_tp_weights),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
