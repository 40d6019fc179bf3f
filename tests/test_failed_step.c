/* A step that fails in the middle of its backward (a layer's error, every rank alike) leaves nothing behind: the
 * steps after it train exactly as the same steps of an engine that never failed.
 * Oracle: the loss and the full parameters after two good steps, with and without one failed step before them,
 * bit for bit, for every strategy with gradient accumulation (2 micro-batches: the strategies keep gradients
 * between micro-batches, which a failure leaves half made), prefetch on and off. FSDP kept the failed step's
 * accumulated full gradient and added the next step's to it. */
#include <stdatomic.h>
#include <time.h>
#include "testutil.h"
#include "fsc/fsc.h"

typedef struct {
    fsc_layer l;
    int n;
} bad_layer;

static _Thread_local int fail_now;     /* ranks are threads: each sets its own */
static _Thread_local int fail_fwd_now; /* the forward refuses too */

static size_t bl_bytes(const fsc_layer *l, int B) { return (size_t)B * ((const bad_layer *)l)->n * sizeof(float); }
static fsc_status bl_fwd(const fsc_layer *l, const fsc_layer_call *c, float *out, const void *in) {
    if (fail_fwd_now) return fsc_error(FSC_ERR_NUMERIC, "bad_layer: forward refuses");
    return fsc_device_copy(c->dev, out, in, bl_bytes(l, c->B));
}
static fsc_status bl_bwd(const fsc_layer *l, const fsc_layer_call *c, float *dinp, const float *dout, const void *in) {
    (void)in;
    if (fail_now) return fsc_error(FSC_ERR_NUMERIC, "bad_layer: backward refuses");
    return dinp ? fsc_device_copy(c->dev, dinp, dout, bl_bytes(l, c->B)) : FSC_OK;
}
static const fsc_layer_ops bl_ops = { .rec_bytes = bl_bytes, .forward = bl_fwd, .backward = bl_bwd };

static fsc_layer *bad(int n) {
    bad_layer *y = calloc(1, sizeof *y);
    assert_non_null(y);
    snprintf(y->l.kind, sizeof y->l.kind, "bad");
    y->l.ops = &bl_ops;
    y->l.in_bytes = (size_t)n * sizeof(float);
    y->l.out_floats = n;
    y->n = n;
    return &y->l;
}

/* The bad layer with the split backward: its input part passes the gradient on, its weight part (no parameters)
 * refuses while fail_now is set. */
static fsc_status bs_bwd(const fsc_layer *l, const fsc_layer_call *c, float *dinp, const float *dout, const void *in) {
    (void)in;
    if (!dinp) return fail_now ? fsc_error(FSC_ERR_NUMERIC, "bad_layer: weight part refuses") : FSC_OK;
    return fsc_device_copy(c->dev, dinp, dout, bl_bytes(l, c->B));
}
static const fsc_layer_ops bs_ops = { .split = 1, .rec_bytes = bl_bytes, .forward = bl_fwd, .backward = bs_bwd };

static fsc_layer *lin(int in, int out) {
    fsc_linear_opts o = fsc_linear_opts_default(in, out);
    fsc_layer *l = NULL;
    assert_ok(fsc_layer_linear(&o, &l));
    return l;
}

enum { NP = 76 }; /* 4x8 + 8 + 8x4 + 4 */

typedef struct {
    fsc_parallel_kind kind;
    int prefetch, fail_first;
    double loss;
    float params[NP];
} job;

/* The model of the tests: linear 4 -> 8, the bad layer, linear 8 -> 4, MSE. */
static fsc_status make_model(fsc_device *dev, fsc_model **m) {
    fsc_layer *ms = NULL;
    FSC_TRY(fsc_layer_mse(4, &ms));
    fsc_seq_layer sl[4];
    memset(sl, 0, sizeof sl);
    sl[0].layer = lin(4, 8), sl[0].prefix = "a.";
    sl[1].layer = bad(8), sl[1].prefix = "bad.";
    sl[2].layer = lin(8, 4), sl[2].prefix = "b.";
    sl[3].layer = ms;
    return fsc_seq_model_create(dev, sl, 4, m);
}

static fsc_status run(fsc_rank *r, void *arg) {
    job *j = arg;
    fsc_model *m = NULL;
    fsc_engine *e = NULL;
    fsc_status s = make_model(r->dev, &m);
    fsc_parallel_opts po = fsc_parallel_opts_default();
    po.kind = j->kind, po.accum = 2, po.prefetch = j->prefetch;
    fsc_optim_config oc = fsc_optim_config_default();
    if (s == FSC_OK) s = fsc_engine_create_model(r, m, &po, &oc, 1, &e);
    float x[16], y[16];
    for (int i = 0; i < 16; i++) x[i] = (float)(i % 7) / 7, y[i] = (float)(i % 3) / 3;
    fsc_step_info info;
    if (s == FSC_OK && j->fail_first) {
        fail_now = 1;
        fsc_status f = fsc_engine_step_model(e, x, y, 4, 4 * r->world, &info);
        fail_now = 0;
        if (f != FSC_ERR_NUMERIC || !strstr(fsc_last_error(), "backward refuses"))
            s = fsc_error(FSC_ERR_INTERNAL, "the failing step gave %s: %s", fsc_status_str(f), fsc_last_error());
    }
    for (int k = 0; k < 2 && s == FSC_OK; k++) s = fsc_engine_step_model(e, x, y, 4, 4 * r->world, &info);
    if (s == FSC_OK && r->rank == 0) j->loss = info.loss;
    if (s == FSC_OK) s = fsc_engine_full_params(e, r->rank == 0 ? j->params : NULL);
    fsc_engine_free(e);
    fsc_model_free(m);
    return s;
}

static void test_failed_step_leaves_nothing(void **state) {
    (void)state;
    const fsc_parallel_kind kinds[] = { FSC_PAR_NONE, FSC_PAR_DDP, FSC_PAR_FSDP, FSC_PAR_ZERO1, FSC_PAR_ZERO2 };
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++)
        for (int pf = 0; pf < 2; pf++) {
            job j[2];
            for (int f = 0; f < 2; f++) {
                memset(&j[f], 0, sizeof j[f]);
                j[f].kind = kinds[k], j[f].prefetch = pf, j[f].fail_first = f;
                fsc_cluster_opts co = { .world = kinds[k] == FSC_PAR_NONE ? 1 : 2, .timeout_s = 30 };
                assert_ok(fsc_cluster_run(&co, run, &j[f]));
            }
            if (memcmp(&j[0].loss, &j[1].loss, sizeof j[0].loss) || memcmp(j[0].params, j[1].params, sizeof j[0].params))
                fail_msg("%s, prefetch %d: after a failed step loss %.9g, else %.9g (parameters %s)",
                         fsc_parallel_kind_name(kinds[k]), pf, j[1].loss, j[0].loss,
                         memcmp(j[0].params, j[1].params, sizeof j[0].params) ? "differ" : "equal");
        }
}

/* A step that fails on ONE rank only (the bad layer's backward refuses on rank 1 at its second call; rank 0's
 * backward runs on): the ranks must not go on pairing different steps. Rank 0's second call meets rank 1's third
 * (rank 1 calls once more, so every collective has its partner), and from there every call fails on every rank
 * with a message naming "different calls", applying no update.
 * Oracle: the statuses and messages of each rank's calls (OK; then rank 0 two failures naming "different calls",
 * rank 1 its own NUMERIC, then two such failures), and each rank's own replica of the parameters before and after every failed call, bit for bit (a
 * failed call changes nothing), for DDP and ZeRO-2 with 2 simulated ranks, and DDP with the exact reduction (whose
 * records carry the count). Before the fix rank 0's calls returned
 * OK and updated with gradients mixed from different steps. */
enum { CALLS = 4 };

typedef struct {
    fsc_parallel_kind kind;
    int exact; /* --reduce exact: the step count travels in its records instead */
    fsc_status st[2][CALLS];
    char why[2][CALLS][512];
    int changed[2][CALLS]; /* the call changed this rank's parameters */
    float last[2][NP];     /* each rank's replica at its end */
} desync_job;

static fsc_status own_params(fsc_engine *e, fsc_device *dev, float *out) {
    fsc_model *m = fsc_engine_model(e);
    size_t off = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        if (off + m->info[i].numel > NP) return fsc_error(FSC_ERR_INTERNAL, "more than %d parameters", NP);
        FSC_TRY(fsc_device_download(dev, out + off, m->param[i], m->info[i].numel * sizeof(float)));
        off += m->info[i].numel;
    }
    return off == NP ? FSC_OK : fsc_error(FSC_ERR_INTERNAL, "%zu parameters, not %d", off, NP);
}

static fsc_status desync_run(fsc_rank *r, void *arg) {
    desync_job *j = arg;
    fsc_model *m = NULL;
    fsc_engine *e = NULL;
    fsc_status s = make_model(r->dev, &m);
    fsc_parallel_opts po = fsc_parallel_opts_default();
    po.kind = j->kind, po.reduce_exact = j->exact;
    fsc_optim_config oc = fsc_optim_config_default();
    if (s == FSC_OK) s = fsc_engine_create_model(r, m, &po, &oc, 1, &e);
    const int calls = r->rank == 1 ? CALLS : CALLS - 1; /* rank 1's failed call met no call of rank 0 */
    for (int k = 0; k < calls && s == FSC_OK; k++) {
        float x[16], y[16], before[NP], after[NP];
        for (int i = 0; i < 16; i++) x[i] = (float)((i + 3 * k + 5 * r->rank) % 7) / 7, y[i] = (float)(i % 3) / 3;
        s = own_params(e, r->dev, before);
        if (s != FSC_OK) break;
        fail_now = k == 1 && r->rank == 1;
        fsc_step_info info;
        j->st[r->rank][k] = fsc_engine_step_model(e, x, y, 4, 4 * r->world, &info);
        fail_now = 0;
        snprintf(j->why[r->rank][k], sizeof j->why[r->rank][k], "%s", j->st[r->rank][k] ? fsc_last_error() : "");
        s = own_params(e, r->dev, after);
        j->changed[r->rank][k] = memcmp(before, after, sizeof before) != 0;
        memcpy(j->last[r->rank], after, sizeof after);
    }
    fsc_engine_free(e);
    fsc_model_free(m);
    return s;
}

/* A pipeline whose action fails (W of micro-batch 0 on both stages, zb-h1, prefetch 0) leaves a boundary message of
 * that step unread: stage 1 ran B of micro-batch 1 and sent its input gradient, which stage 0, stopped at its W0,
 * never read. The next step took it for its own micro-batch 0's and trained on it without a word (the steps after
 * differed from DDP's). Now every later step is refused on each stage whose action failed, naming the action and
 * "make the engine again", and changes no parameter. */
static fsc_status pipe_fail_run(fsc_rank *r, void *arg) {
    fsc_status *st = arg; /* [rank][3] */
    fsc_layer *ms = NULL;
    FSC_TRY(fsc_layer_mse(4, &ms));
    fsc_layer *b0 = bad(8), *b1 = bad(4);
    b0->ops = &bs_ops, b1->ops = &bs_ops;
    fsc_seq_layer sl[5];
    memset(sl, 0, sizeof sl);
    sl[0].layer = lin(4, 8), sl[0].prefix = "a.";
    sl[1].layer = b0, sl[1].prefix = "bad0.";
    sl[2].layer = lin(8, 4), sl[2].prefix = "b.";
    sl[3].layer = b1, sl[3].prefix = "bad1.";
    sl[4].layer = ms;
    fsc_model *m = NULL;
    fsc_engine *e = NULL;
    fsc_status s = fsc_seq_model_create(r->dev, sl, 5, &m);
    static const int balance[2] = { 1, 2 }; /* stage 0: a, bad0; stage 1: b, bad1, the loss */
    fsc_parallel_opts po = fsc_parallel_opts_default();
    po.kind = FSC_PAR_DDP, po.pp = 2, po.accum = 2, po.no_sync = 1, po.prefetch = 0;
    po.schedule = FSC_SCHED_ZB_H1, po.pipe_checkpoint = FSC_PIPE_CKPT_NEVER, po.balance = balance;
    fsc_optim_config oc = fsc_optim_config_default();
    if (s == FSC_OK) s = fsc_engine_create_model(r, m, &po, &oc, 1, &e);
    float x[16], y[16], before[NP] = { 0 }, after[NP] = { 0 };
    for (int k = 0; k < 3 && s == FSC_OK; k++) {
        for (int i = 0; i < 16; i++) x[i] = (float)((i + 3 * k) % 7) / 7, y[i] = (float)(i % 3) / 3;
        if (k == 2) s = fsc_engine_full_params(e, before);
        fail_now = k == 1;
        fsc_step_info info;
        if (s == FSC_OK) st[r->rank * 3 + k] = fsc_engine_step_model(e, x, y, 4, 4, &info);
        fail_now = 0;
        if (k == 2 && st[r->rank * 3 + k] != FSC_OK && !strstr(fsc_last_error(), "make the engine again"))
            s = fsc_error(FSC_ERR_INTERNAL, "rank %d, the step after: \"%s\"", r->rank, fsc_last_error());
        if (k == 2 && s == FSC_OK) s = fsc_engine_full_params(e, after);
        if (k == 2 && s == FSC_OK && memcmp(before, after, sizeof before) != 0)
            s = fsc_error(FSC_ERR_INTERNAL, "rank %d: the refused step changed the parameters", r->rank);
    }
    fsc_engine_free(e);
    fsc_model_free(m);
    return s;
}

static void test_pipeline_action_failure_refuses_later_steps(void **state) {
    (void)state;
    fsc_status st[6];
    fsc_cluster_opts co = { .world = 2, .timeout_s = 30 };
    assert_ok(fsc_cluster_run(&co, pipe_fail_run, st));
    for (int r = 0; r < 2; r++) {
        if (st[r * 3] != FSC_OK) fail_msg("rank %d: the first step failed", r);
        if (st[r * 3 + 1] != FSC_ERR_NUMERIC) fail_msg("rank %d: the failing step gave %d", r, (int)st[r * 3 + 1]);
        if (st[r * 3 + 2] != FSC_ERR_STATE) fail_msg("rank %d: the step after gave %d, not FSC_ERR_STATE", r,
                                                     (int)st[r * 3 + 2]);
    }
}

static void test_one_rank_failure_stops_every_rank(void **state) {
    (void)state;
    const fsc_parallel_kind kinds[] = { FSC_PAR_DDP, FSC_PAR_ZERO2, FSC_PAR_DDP };
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
        static desync_job j;
        memset(&j, 0, sizeof j);
        j.kind = kinds[k], j.exact = k == 2;
        fsc_cluster_opts co = fsc_cluster_opts_default();
        co.world = 2, co.timeout_s = 30;
        assert_ok(fsc_cluster_run(&co, desync_run, &j));
        const char *name = k == 2 ? "ddp, reduce exact" : fsc_parallel_kind_name(kinds[k]);
        for (int r = 0; r < 2; r++) {
            if (j.st[r][0] != FSC_OK || !j.changed[r][0])
                fail_msg("%s rank %d: the first step gave %s (%s), parameters %s", name, r, fsc_status_str(j.st[r][0]),
                         j.why[r][0], j.changed[r][0] ? "updated" : "unchanged");
            for (int c = 1; c < (r == 1 ? CALLS : CALLS - 1); c++) {
                const int own = r == 1 && c == 1; /* rank 1's own failure */
                const char *needle = own ? "backward refuses" : "different calls";
                if ((own ? j.st[r][c] != FSC_ERR_NUMERIC : j.st[r][c] == FSC_OK) || !strstr(j.why[r][c], needle))
                    fail_msg("%s rank %d, call %d (after rank 1's call 1 failed alone): %s \"%s\", expected %s naming "
                             "\"%s\"", name, r, c, fsc_status_str(j.st[r][c]), j.why[r][c],
                             own ? "FSC_ERR_NUMERIC" : "a failure", needle);
                if (j.changed[r][c])
                    fail_msg("%s rank %d, call %d failed (%s) yet changed the rank's parameters", name, r, c,
                             fsc_status_str(j.st[r][c]));
            }
        }
        if (memcmp(j.last[0], j.last[1], sizeof j.last[0]))
            fail_msg("%s: the ranks' replicas differ at the end", name);
    }
}

/* A pipeline step that fails on stage 0 (a token outside the vocabulary, prefetch on) leaves a receive posted for a
 * message the other stage never sends; fsc_engine_free waits for it (it fails at once: stage 0 gave up on its links)
 * and drops its error. Oracle: the message after fsc_engine_free is the step's, so a program that frees and then
 * returns the step's status reports the token, not a receive timing out (which fsc_cluster_run reported, blaming
 * rank 1). */
static fsc_status free_keeps_run(fsc_rank *r, void *arg) {
    char *why = arg; /* [2][512]: each rank's message after the step and after the free */
    fsc_gpt_config g = fsc_gpt_config_default();
    g.layers = 2, g.dim = 16, g.heads = 2, g.seq = 4, g.vocab = 32;
    fsc_parallel_opts po = fsc_parallel_opts_default();
    po.kind = FSC_PAR_DDP, po.pp = 2, po.accum = 2;
    fsc_optim_config oc = fsc_optim_config_default();
    fsc_engine *e = NULL;
    FSC_TRY(fsc_engine_create(r, &g, &po, &oc, 1, &e));
    int32_t tok[8], tgt[8];
    for (int i = 0; i < 8; i++) tok[i] = i, tgt[i] = i + 1;
    tok[3] = 99;
    fsc_step_info info;
    fsc_status s = fsc_engine_step(e, tok, tgt, 2, 2, &info);
    if (r->rank == 0) snprintf(why, 512, "%s", fsc_last_error());
    fsc_engine_free(e);
    if (r->rank == 0) snprintf(why + 512, 512, "%s", fsc_last_error());
    return s;
}

static void test_engine_free_keeps_the_message(void **state) {
    (void)state;
    char why[2][512];
    fsc_cluster_opts co = fsc_cluster_opts_default();
    co.world = 2, co.timeout_s = 2;
    assert_int_not_equal(fsc_cluster_run(&co, free_keeps_run, why), FSC_OK);
    if (!strstr(why[0], "tokens[3] = 99 is outside the vocabulary"))
        fail_msg("stage 0's step failed with \"%s\", not on its token", why[0]);
    if (strcmp(why[0], why[1]) != 0)
        fail_msg("fsc_engine_free changed the message \"%s\" into \"%s\"", why[0], why[1]);
}

/* A pipeline stage that fails alone (its layer's forward refuses on world rank 0, stage 0, prefetch on) stops every
 * rank at once. Stage 0 had posted the receive of an output gradient that stage 1, waiting for stage 0's output,
 * would never send: fsc_engine_free waited for it, so rank 0 never returned and every other rank waited in its
 * receive or collective until the cluster's timeout (FSC_ERR_TIMEOUT, "rank 0 never sent"), and fsc_cluster_run
 * blamed rank 1. Now the failed stage gives up on its boundary streams: the ranks waiting for it fail at once.
 * Oracle: with a 20 s timeout, fsc_cluster_run returns in under 10 s with rank 0's own status and message; every
 * other rank's step fails, not by a timeout, with a message naming world rank 0 and its error; for 2 ranks (pp 2)
 * and 4 (pp 2 x dp 2: rank 1, stage 0 of the other pipeline, waits for rank 0 in its data group). */
typedef struct {
    fsc_status st[4];
    char why[4][512];
} fast_job;

static fsc_status fast_run(fsc_rank *r, void *arg) {
    fast_job *j = arg;
    fsc_layer *ms = NULL;
    FSC_TRY(fsc_layer_mse(4, &ms));
    fsc_seq_layer sl[5];
    memset(sl, 0, sizeof sl);
    sl[0].layer = lin(4, 8), sl[0].prefix = "a.";
    sl[1].layer = bad(8), sl[1].prefix = "bad0.";
    sl[2].layer = lin(8, 4), sl[2].prefix = "b.";
    sl[3].layer = bad(4), sl[3].prefix = "bad1.";
    sl[4].layer = ms;
    fsc_model *m = NULL;
    fsc_engine *e = NULL;
    fsc_status s = fsc_seq_model_create(r->dev, sl, 5, &m);
    static const int balance[2] = { 1, 2 };
    fsc_parallel_opts po = fsc_parallel_opts_default();
    po.kind = FSC_PAR_DDP, po.pp = 2, po.accum = 2, po.no_sync = 1, po.prefetch = 1, po.balance = balance;
    fsc_optim_config oc = fsc_optim_config_default();
    if (s == FSC_OK) s = fsc_engine_create_model(r, m, &po, &oc, 1, &e);
    float x[16], y[16];
    for (int i = 0; i < 16; i++) x[i] = (float)(i % 7) / 7, y[i] = (float)(i % 3) / 3;
    for (int k = 0; k < 2 && s == FSC_OK; k++) {
        fsc_step_info info;
        fail_fwd_now = k == 1 && r->rank == 0;
        s = fsc_engine_step_model(e, x, y, 4, 4 * r->world / 2, &info);
        fail_fwd_now = 0;
    }
    j->st[r->rank] = s;
    snprintf(j->why[r->rank], sizeof j->why[r->rank], "%s", s ? fsc_last_error() : "");
    fsc_engine_free(e);
    fsc_model_free(m);
    if (s != FSC_OK) fsc_error(s, "%s", j->why[r->rank]);
    return s;
}

static void test_pipeline_stage_failure_stops_every_rank_at_once(void **state) {
    (void)state;
    for (int world = 2; world <= 4; world += 2) {
        static fast_job j;
        memset(&j, 0, sizeof j);
        fsc_cluster_opts co = fsc_cluster_opts_default();
        co.world = world, co.timeout_s = 20;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        fsc_status s = fsc_cluster_run(&co, fast_run, &j);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        const double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        if (s != FSC_ERR_NUMERIC || !strstr(fsc_last_error(), "rank 0") || !strstr(fsc_last_error(), "forward refuses"))
            fail_msg("world %d: the run gave %s \"%s\", not rank 0's own failure", world, fsc_status_str(s),
                     fsc_last_error());
        if (secs >= co.timeout_s / 2)
            fail_msg("world %d: the run took %.1f s (the timeout is %g s)", world, secs, co.timeout_s);
        if (j.st[0] != FSC_ERR_NUMERIC) fail_msg("world %d: rank 0's step gave %s", world, fsc_status_str(j.st[0]));
        for (int r = 1; r < world; r++)
            if (j.st[r] == FSC_OK || j.st[r] == FSC_ERR_TIMEOUT || !strstr(j.why[r], "world rank 0") ||
                !strstr(j.why[r], "forward refuses"))
                fail_msg("world %d, rank %d: the step gave %s \"%s\", not a failure naming world rank 0's", world, r,
                         fsc_status_str(j.st[r]), j.why[r]);
    }
}

/* A rank that once gave up on its links is not blamed for a later run's failure it did not cause. Oracle: after the
 * failed pipeline step above (rank 0 revoked its links; both ranks handled it), rank 1 returns an unrelated error of
 * its own first and rank 0 another one 300 ms later: the run reports rank 1's (it reported rank 0's later one). */
static fsc_status stale_run(fsc_rank *r, void *arg) {
    fast_job *j = arg;
    (void)fast_run(r, j);
    if (r->rank == 1) return fsc_error(FSC_ERR_IO, "rank 1: a failure of its own, the first of the run");
    struct timespec nap = { 0, 300000000 };
    nanosleep(&nap, NULL);
    return fsc_error(FSC_ERR_NOMEM, "rank 0: a later failure of its own");
}

static void test_revoker_not_blamed_for_later_failures(void **state) {
    (void)state;
    static fast_job j;
    memset(&j, 0, sizeof j);
    fsc_cluster_opts co = fsc_cluster_opts_default();
    co.world = 2, co.timeout_s = 20;
    assert_err(fsc_cluster_run(&co, stale_run, &j), FSC_ERR_IO, "a failure of its own, the first of the run");
}

/* One rank alone passes a local batch that its own checks refuse (3 sequences, which do not split into accum 2's
 * micro-batches; the other rank passes 4): an evaluation and a prediction refuse it on every rank at once (the
 * split is agreed by the world before the pass). The refusing rank does not return from its function (a program
 * that goes on after an error: returning would wake the ranks waiting for it); before, the other rank went on into
 * the pass and waited for it in its first collective until the cluster's timeout. (A step still refuses on that
 * rank only: parallel.h.) Oracle: with a 10 s timeout each call returns on both ranks within 5 s, both with
 * FSC_ERR_INVALID and the refusing rank's message; DDP (the first collective: the loss's all-gather, or predict's
 * closing agreement) and FSDP (the forward's gathers). */
typedef struct {
    fsc_parallel_kind kind;
    int predict;
    atomic_int done;
    fsc_status st[2];
    char why[2][512];
} lone_job;

static fsc_status lone_run(fsc_rank *r, void *arg) {
    lone_job *j = arg;
    fsc_layer *ms = NULL;
    FSC_TRY(fsc_layer_mse(4, &ms));
    fsc_seq_layer sl[3];
    memset(sl, 0, sizeof sl);
    sl[0].layer = lin(4, 8), sl[0].prefix = "a.";
    sl[1].layer = lin(8, 4), sl[1].prefix = "b.";
    sl[2].layer = ms;
    fsc_model *m = NULL;
    fsc_engine *e = NULL;
    fsc_status s = fsc_seq_model_create(r->dev, sl, 3, &m);
    fsc_parallel_opts po = fsc_parallel_opts_default();
    po.kind = j->kind, po.accum = 2;
    fsc_optim_config oc = fsc_optim_config_default();
    if (s == FSC_OK) s = fsc_engine_create_model(r, m, &po, &oc, 1, &e);
    float x[16], y[16], out[16];
    for (int i = 0; i < 16; i++) x[i] = (float)(i % 7) / 7, y[i] = (float)(i % 3) / 3;
    const int B = r->rank == 1 ? 3 : 4; /* rank 1's does not split into 2 micro-batches */
    double loss = 0;
    size_t per = 0;
    if (s == FSC_OK) {
        s = j->predict ? fsc_engine_predict(e, x, B, out, &per) : fsc_engine_eval(e, x, y, B, 7, &loss);
        j->st[r->rank] = s;
        snprintf(j->why[r->rank], sizeof j->why[r->rank], "%s", s ? fsc_last_error() : "");
        s = FSC_OK;
    }
    atomic_fetch_add(&j->done, 1);
    struct timespec nap = { 0, 10000000 };
    for (int k = 0; k < 3000 && atomic_load(&j->done) < r->world; k++) nanosleep(&nap, NULL); /* 30 s at most */
    fsc_engine_free(e);
    fsc_model_free(m);
    return s;
}

static void test_lone_local_refusal_refuses_every_rank(void **state) {
    (void)state;
    const fsc_parallel_kind kinds[] = { FSC_PAR_DDP, FSC_PAR_FSDP };
    int failed = 0;
    for (int k = 0; k < 2; k++)
        for (int predict = 0; predict < 2; predict++) {
            static lone_job j;
            memset(&j, 0, sizeof j);
            j.kind = kinds[k], j.predict = predict;
            const char *name = predict ? "predict" : "eval", *kind = fsc_parallel_kind_name(kinds[k]);
            fsc_cluster_opts co = fsc_cluster_opts_default();
            co.world = 2, co.timeout_s = 10;
            struct timespec t0, t1;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            assert_ok(fsc_cluster_run(&co, lone_run, &j));
            clock_gettime(CLOCK_MONOTONIC, &t1);
            const double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
            for (int r = 0; r < 2; r++)
                if (j.st[r] != FSC_ERR_INVALID || !strstr(j.why[r], "does not split into 2 micro-batches")) {
                    print_error("%s %s, rank %d: %s \"%s\", not rank 1's refusal of its local batch\n", kind, name, r,
                                fsc_status_str(j.st[r]), j.why[r]);
                    failed = 1;
                }
            if (secs >= co.timeout_s / 2) {
                print_error("%s %s: the run took %.1f s (the timeout is %g s)\n", kind, name, secs, co.timeout_s);
                failed = 1;
            }
        }
    if (failed) fail_msg("a rank's local refusal did not refuse every rank at once (above)");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_failed_step_leaves_nothing),
        cmocka_unit_test(test_one_rank_failure_stops_every_rank),
        cmocka_unit_test(test_pipeline_action_failure_refuses_later_steps),
        cmocka_unit_test(test_engine_free_keeps_the_message),
        cmocka_unit_test(test_pipeline_stage_failure_stops_every_rank_at_once),
        cmocka_unit_test(test_revoker_not_blamed_for_later_failures),
        cmocka_unit_test(test_lone_local_refusal_refuses_every_rank),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
