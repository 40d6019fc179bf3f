/* Pipeline parallelism (lib/parallel/pipe.c) on the simulated cluster.
 * Oracle: DDP over the dp data-parallel ranks with gradient accumulation over the same M micro-batches
 * (accum = M, no_sync). Every schedule (GPipe, 1F1B) and checkpoint mode (always, except_last, never),
 * P in {2, 3, 4} with uneven balances of a 5-block model, and dp x pp with DDP, FSDP and ZeRO inside the
 * stage groups give bit-identical losses (on every rank) and parameters after several AdamW steps with
 * clipping that clips; bf16 and f16 with loss scaling too. Memory: 1F1B holds at most P micro-batches of
 * activations on the first stage where GPipe holds M (counts and the device ledger), and checkpointing
 * lowers the ledger's activation peak. Messages per step are counted. Bad options are clear errors.
 * With prefetch 1 (asynchronous sends, receives posted ahead on a communicator per link and direction) the same
 * oracle over every balance of the 5 blocks on 2 to 4 stages and 1 to 6 micro-batches, with evaluations
 * (equal to the step's loss) and a failed step; the ledger then holds exactly one receive buffer per direction
 * more, and the ring of send buffers of checkpointed outputs (min(prefetch_limit, checkpointed micro-batches)). */
#include <unistd.h>
#include "pipetest.h"
#include "core/comm_impl.h" /* fsc_comm_wrap: a plug-in table of the test's own */

static const char *sched_name[] = { "gpipe", "1f1b" };
static const char *ckpt_name[] = { "except_last", "always", "never" };

/* Interleaved 1F1B (virtual stages): p = 2, 3, 4 ranks of v = 2 or 3 chunks of an 8-block GPT (its wte tied to
 * the head, on stage 0 and the last stage: ranks 0 and p - 1), even and uneven balances over the p x v chunks,
 * m = p, 2p micro-batches (m = p runs all forwards first), every checkpoint mode, an evaluation before each
 * step, and dp 2 x pp 2. Oracle: DDP's bits over the same micro-batches, on every rank; the evaluation equals
 * the step's loss. */
static void test_pipe_interleaved_equals_ddp(void **state) {
    (void)state;
    static const int uneven[] = { 1, 3, 2, 2 }, uneven6[] = { 2, 1, 1, 1, 2, 1 };
    struct { int dp, pp, v, m; const int *bal; } cases[] = {
        { 1, 2, 2, 2, NULL }, { 1, 2, 2, 4, uneven }, { 1, 2, 3, 4, uneven6 }, { 1, 3, 2, 3, NULL },
        { 1, 3, 2, 6, uneven6 }, { 1, 4, 2, 4, NULL }, { 1, 4, 2, 8, NULL }, { 2, 2, 2, 4, NULL },
    };
    run refs[2][9]; /* [dp - 1][m]: DDP over dp ranks, m micro-batches */
    memset(refs, 0, sizeof refs);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (int ck = 0; ck < 3; ck++) {
            run p = make_split(cases[c].dp, cases[c].pp, FSC_PAR_DDP, cases[c].m);
            p.eval = 1;
            p.po.schedule = FSC_SCHED_INTERLEAVED;
            p.po.virtual_stages = cases[c].v;
            p.po.balance = cases[c].bal;
            p.po.pipe_checkpoint = (fsc_pipe_checkpoint)ck;
            run *ref = &refs[cases[c].dp - 1][cases[c].m];
            if (!ref->params) *ref = reference(&p);
            train(&p);
            char what[128];
            snprintf(what, sizeof what, "dp %d x pp %d, %d chunks per rank (balance %s), %d micro-batches, checkpoint "
                     "%s", cases[c].dp, cases[c].pp, cases[c].v, cases[c].bal ? "uneven" : "even", cases[c].m,
                     ckpt_name[ck]);
            assert_same(ref, &p, what);
            for (int st = 0; st < p.steps; st++)
                for (int rk = 0; rk < p.world; rk++)
                    if (memcmp(&p.ev[rk][st], &p.loss[rk][st], sizeof(double)) != 0)
                        fail_msg("%s: evaluation of step %d on rank %d %.17g, the step's loss %.17g", what, st, rk,
                                 p.ev[rk][st], p.loss[rk][st]);
            assert_true(p.stats[0].ideal_bubble > 0);
            assert_true(fabs(p.stats[0].ideal_bubble -
                             (double)(cases[c].pp - 1) / (cases[c].v * cases[c].m + cases[c].pp - 1)) < 1e-12);
            free(p.params);
        }
    }
    for (int d = 0; d < 2; d++)
        for (int m = 0; m < 9; m++) free(refs[d][m].params);
}

/* Interleaved with layer checkpointing (po.checkpoint: every block recomputed in its backward) too. */
static void test_pipe_interleaved_layer_checkpoint(void **state) {
    (void)state;
    run p = make_split(1, 2, FSC_PAR_DDP, 4);
    p.po.checkpoint = 1;
    p.po.schedule = FSC_SCHED_INTERLEAVED;
    p.po.virtual_stages = 2;
    run ref = reference(&p);
    train(&p);
    assert_same(&ref, &p, "interleaved, 2 x 2 chunks, layer checkpointing");
    free(p.params);
    free(ref.params);
}

/* The split schedules (zb-h1, zbv, a custom list with W) with layer checkpointing (po.checkpoint: every block
 * recomputed in its B, into a record of its own that its W reads), every pipeline checkpoint mode, pp 2 and 3, and
 * dp 2 x pp 2 with FSDP full_shard (whose backward hooks gather each block before its recomputation, in B and in
 * W) and with zero2. Oracle: DDP's bits (layer checkpointing on DDP's side too). The activation peak under zb-h1 is
 * below the same schedule's without layer checkpointing on the first stage, and not above on the last (whose tied
 * head, the largest record here, runs whole in B: without checkpointing its record is released there, with it the
 * blocks' shared record is the head's size). */
static void test_pipe_split_layer_checkpoint(void **state) {
    (void)state;
    static const fsc_pipe_schedule scheds[] = { FSC_SCHED_ZB_H1, FSC_SCHED_ZBV };
    static const char *const sname[] = { "zb-h1", "zbv" };
    struct { int dp, pp; fsc_parallel_kind kind; fsc_shard_strategy sh; const char *what; } cases[] = {
        { 1, 2, FSC_PAR_DDP, 0, "ddp" }, { 1, 3, FSC_PAR_DDP, 0, "ddp" },
        { 2, 2, FSC_PAR_FSDP, FSC_SHARD_FULL, "fsdp full_shard" }, { 2, 2, FSC_PAR_ZERO2, 0, "zero2" },
    };
    run refs[2]; /* [dp - 1] */
    memset(refs, 0, sizeof refs);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int sc = 0; sc < 2; sc++)
            for (int ck = 0; ck < 3; ck++) {
                if (c > 1 && ck != FSC_PIPE_CKPT_EXCEPT_LAST) continue;
                run p = make_split(cases[c].dp, cases[c].pp, cases[c].kind, 6);
                p.po.checkpoint = 1;
                p.po.shard = cases[c].sh;
                p.po.schedule = scheds[sc];
                p.po.pipe_checkpoint = (fsc_pipe_checkpoint)ck;
                run *ref = &refs[cases[c].dp - 1];
                if (!ref->params) *ref = reference(&p);
                char what[128];
                snprintf(what, sizeof what, "dp %d x pp %d, %s inside %s stages, layer checkpointing, checkpoint %s",
                         cases[c].dp, cases[c].pp, cases[c].what, sname[sc], ckpt_name[ck]);
                train(&p);
                assert_same(ref, &p, what);
                if (c == 0 && sc == 0 && ck == FSC_PIPE_CKPT_NEVER) { /* the memory: less than without */
                    run q = make_split(1, 2, FSC_PAR_DDP, 6);
                    q.po.schedule = FSC_SCHED_ZB_H1;
                    q.po.pipe_checkpoint = FSC_PIPE_CKPT_NEVER;
                    train(&q);
                    assert_same(ref, &q, "zb-h1, pp 2, no layer checkpointing");
                    for (int rk = 0; rk < 2; rk++) /* the last stage's head: not held to W without either */
                        if (p.acts_peak[rk] > q.acts_peak[rk] || (rk == 0 && p.acts_peak[rk] == q.acts_peak[rk]))
                            fail_msg("zb-h1 with layer checkpointing: stage %d's activation peak %zu bytes, %zu "
                                     "without", rk, p.acts_peak[rk], q.acts_peak[rk]);
                    free(q.params);
                }
                free(p.params);
            }
    free(refs[0].params), free(refs[1].params);
}

/* A communicator plug-in without the optional asynchronous calls (fsc_comm_ops.start, wait, test: a started call
 * runs at its start), as a table forwarding every call to the simulated rank's communicator; sends_wait as
 * fwd_waits says (the simulated sends stay buffered: what is checked is what the pipeline does with the table). */
typedef struct {
    fsc_comm *inner;
    int owns; /* a split's, freed with it (the world's is the cluster's) */
} fwd_ctx;

static fsc_status fwd_all_reduce(void *x, const void *s, void *r, size_t n, fsc_dtype dt, fsc_redop op) {
    return fsc_comm_all_reduce(((fwd_ctx *)x)->inner, s, r, n, dt, op);
}
static fsc_status fwd_reduce_scatter(void *x, const void *s, void *r, size_t n, fsc_dtype dt, fsc_redop op) {
    return fsc_comm_reduce_scatter(((fwd_ctx *)x)->inner, s, r, n, dt, op);
}
static fsc_status fwd_all_gather(void *x, const void *s, void *r, size_t n, fsc_dtype dt) {
    return fsc_comm_all_gather(((fwd_ctx *)x)->inner, s, r, n, dt);
}
static fsc_status fwd_broadcast(void *x, void *b, size_t n, fsc_dtype dt, int root) {
    return fsc_comm_broadcast(((fwd_ctx *)x)->inner, b, n, dt, root);
}
static fsc_status fwd_send(void *x, const void *b, size_t n, fsc_dtype dt, int peer) {
    return fsc_comm_send(((fwd_ctx *)x)->inner, b, n, dt, peer);
}
static fsc_status fwd_recv(void *x, void *b, size_t n, fsc_dtype dt, int peer) {
    return fsc_comm_recv(((fwd_ctx *)x)->inner, b, n, dt, peer);
}
static fsc_status fwd_all_to_all(void *x, const void *s, void *r, size_t n, fsc_dtype dt) {
    return fsc_comm_all_to_all(((fwd_ctx *)x)->inner, s, r, n, dt);
}
static fsc_status fwd_barrier(void *x) { return fsc_comm_barrier(((fwd_ctx *)x)->inner); }
static fsc_status fwd_split(void *x, int color, int key, void **out, int *rank, int *size) {
    fwd_ctx *n = calloc(1, sizeof *n);
    if (!n) return fsc_error(FSC_ERR_NOMEM, "forward: out of memory");
    fsc_status s = fsc_comm_split(((fwd_ctx *)x)->inner, color, key, &n->inner);
    if (s != FSC_OK) {
        free(n);
        return s;
    }
    n->owns = 1;
    *out = n, *rank = fsc_comm_rank(n->inner), *size = fsc_comm_size(n->inner);
    return FSC_OK;
}
static void fwd_destroy(void *x) {
    fwd_ctx *c = x;
    if (c->owns) fsc_comm_free(c->inner);
    free(c);
}
#define FWD_OPS(waits)                                                                                              \
    {                                                                                                               \
        .abi_version = FSC_COMM_ABI_VERSION, .name = "forward", .all_reduce = fwd_all_reduce,                       \
        .reduce_scatter = fwd_reduce_scatter, .all_gather = fwd_all_gather, .broadcast = fwd_broadcast,             \
        .send = fwd_send, .recv = fwd_recv, .all_to_all = fwd_all_to_all, .barrier = fwd_barrier,                   \
        .split = fwd_split, .destroy = fwd_destroy, .sends_wait = waits                                             \
    }
static const fsc_comm_ops fwd_buffered = FWD_OPS(0), fwd_waiting = FWD_OPS(1);

typedef struct {
    run *r;
    const fsc_comm_ops *ops;
} fwd_run;

static fsc_status rank_fwd(fsc_rank *rk, void *arg) {
    fwd_run *f = arg;
    fwd_ctx *x = calloc(1, sizeof *x);
    if (!x) return fsc_error(FSC_ERR_NOMEM, "forward: out of memory");
    x->inner = rk->comm;
    fsc_rank mine = *rk;
    FSC_TRY(fsc_comm_wrap(f->ops, x, rk->rank, rk->world, "forward", &mine.comm));
    fsc_status s = rank_fn(&mine, f->r);
    fsc_comm_free(mine.comm);
    return s;
}

/* Oracle: on a plug-in without start and wait (optional in the ABI) a pipeline never posts a receive ahead, which
 * would run where it is posted and wait there for a message this stage's own later actions cause: with buffered
 * sends and one chunk per rank, prefetch 1 (the default) runs the synchronous program, DDP's bits; where sends wait
 * (no program runs there without posted receives) and with chunks the engine refuses, naming the missing calls. It
 * hung until the cluster's timeout ("recv ... timed out") in all three. */
static void test_pipe_comm_without_start(void **state) {
    (void)state;
    run p = make(1, 2, FSC_PAR_DDP, 4, 1);
    p.po.prefetch = 1;
    p.po.schedule = FSC_SCHED_1F1B;
    run ref = reference(&p);
    free(p.params);
    p.params = calloc(fsc_gpt_num_params(&p.cfg), sizeof(float));
    fsc_cluster_opts co = { .world = p.world, .device = "cpu", .timeout_s = 5 };
    fwd_run f = { &p, &fwd_buffered };
    if (fsc_cluster_run(&co, rank_fwd, &f) != FSC_OK) fail_msg("buffered, no start: %s", fsc_last_error());
    assert_same(&ref, &p, "a plug-in without start, buffered sends, 1f1b with prefetch 1");
    f.ops = &fwd_waiting;
    assert_err(fsc_cluster_run(&co, rank_fwd, &f), FSC_ERR_UNSUPPORTED, "no asynchronous calls");
    assert_non_null(strstr(fsc_last_error(), "sends wait for their receive"));
    run q = make_split(1, 2, FSC_PAR_DDP, 4);
    q.po.schedule = FSC_SCHED_INTERLEAVED;
    q.po.virtual_stages = 2;
    q.params = calloc(fsc_gpt_num_params(&q.cfg), sizeof(float));
    fwd_run g = { &q, &fwd_buffered };
    assert_err(fsc_cluster_run(&co, rank_fwd, &g), FSC_ERR_UNSUPPORTED, "with several chunks per rank");
    free(p.params), free(q.params), free(ref.params);
}

/* Sends that wait for their receive (fsc_cluster_opts.sim_sync_sends: NCCL's semantics, on which a synchronous
 * 1F1B deadlocks, each stage sending before it receives from the same neighbour). gpipe, 1f1b, zb-h1 and zbv with
 * prefetch 0 and 1 (the pipeline sends on its per-link communicators either way), pp 2 to 4, every checkpoint mode
 * in turn, uneven balances, dp 2 x pp 2 with FSDP inside, a custom list of one chunk per rank, and interleaved in
 * every checkpoint mode: DDP's bits (random custom lists of chunks in loops and Vs: test_pipe_random.c). */
static void test_pipe_sync_sends(void **state) {
    (void)state;
    static const fsc_pipe_schedule scheds[] = { FSC_SCHED_GPIPE, FSC_SCHED_1F1B, FSC_SCHED_ZB_H1, FSC_SCHED_ZBV };
    static const char *const sname[] = { "gpipe", "1f1b", "zb-h1", "zbv" };
    static const int b2[] = { 5, 3 }, b3[] = { 2, 4, 2 }, b4[] = { 3, 1, 2, 2 };
    const int *uneven[] = { b2, b3, b4 };
    int n = 0;
    for (int pp = 2; pp <= 4; pp++) {
        run ref[2]; /* [dp - 1] */
        memset(ref, 0, sizeof ref);
        for (int sc = 0; sc < 4; sc++)
            for (int pf = 0; pf < 2; pf++) {
                const int zbv = scheds[sc] == FSC_SCHED_ZBV;
                if (zbv && !pf) continue; /* chunks need prefetch */
                const int dp = pp == 2 && sc == 1 ? 2 : 1;
                run p = make(dp, pp, dp > 1 ? FSC_PAR_FSDP : FSC_PAR_DDP, 2 * pp, 1);
                p.cfg.layers = 8;
                p.steps = 2;
                p.sync_sends = 1;
                p.po.prefetch = pf;
                p.po.schedule = scheds[sc];
                p.po.pipe_checkpoint = (fsc_pipe_checkpoint)(n++ % 3);
                if (!zbv && pf) p.po.balance = uneven[pp - 2];
                if (!ref[dp - 1].params) ref[dp - 1] = reference(&p);
                char what[128];
                snprintf(what, sizeof what, "sends that wait: %s, dp %d x pp %d, prefetch %d, checkpoint %s",
                         sname[sc], dp, pp, pf, ckpt_name[p.po.pipe_checkpoint]);
                train(&p);
                assert_same(&ref[dp - 1], &p, what);
                free(p.params);
            }
        free(ref[0].params), free(ref[1].params);
    }
    /* a custom list of one chunk per rank: 1F1B's with every W deferred to the end of the rank's list */
    static const char text[] = "0F0 0F1 0B0 0F2 0B1 0B2 0W0 0W1 0W2\n1F0 1B0 1F1 1B1 1F2 1B2 1W0 1W1 1W2\n";
    fsc_pipe_schedule_lists sl;
    assert_ok(fsc_pipe_schedule_parse(text, sizeof text - 1, &sl));
    run q = make_split(1, 2, FSC_PAR_DDP, sl.m);
    q.sync_sends = 1;
    q.po.schedule = FSC_SCHED_CUSTOM;
    q.po.actions = (const fsc_pipe_action *const *)sl.lists;
    q.po.nactions = sl.lens;
    run qref = reference(&q);
    train(&q);
    assert_same(&qref, &q, "sends that wait: a custom list of one chunk per rank");
    free(q.params), free(qref.params);
    fsc_pipe_schedule_lists_free(&sl);
    /* interleaved, 2 chunks in a loop, pp 2 to 4, every checkpoint mode: it deadlocked there while a stage waited
     * for a send before reusing its buffer (the tied gradient before the head's next backward, a checkpointed
     * output's ring slot, a record whose input gradient was in flight); those now take new buffers */
    for (int pp = 2; pp <= 4; pp++) {
        run iref;
        memset(&iref, 0, sizeof iref);
        for (int ck = 0; ck < 3; ck++) {
            run r = make_split(1, pp, FSC_PAR_DDP, 2 * pp);
            r.sync_sends = 1;
            r.po.schedule = FSC_SCHED_INTERLEAVED;
            r.po.virtual_stages = 2;
            r.po.pipe_checkpoint = (fsc_pipe_checkpoint)ck;
            if (!iref.params) iref = reference(&r);
            char what[96];
            snprintf(what, sizeof what, "sends that wait: interleaved, pp %d, checkpoint %s", pp, ckpt_name[ck]);
            train(&r);
            assert_same(&iref, &r, what);
            free(r.params);
        }
        free(iref.params);
    }
}

/* ZB-H1 (W actions: each backward split into B, the input gradient, and a later W, the weight gradients):
 * p = 2, 3, 4 stages of the 5-block GPT (its wte tied to the head: those two layers run whole in B), m = p and
 * 2p micro-batches, every pipeline checkpoint mode, prefetch 0 and 1, an evaluation before each step. Oracle:
 * DDP's bits over the same micro-batches, on every rank; uneven balances over 2, 3 and 4 stages in every checkpoint
 * mode; and dp 2 x pp 2. Every stage holds p micro-batches (a record
 * lives until its W: 1F1B's peak, the first stage's), which also shows that the Ws run apart from the Bs; the
 * ideal bubble is (p-1)/(3m+p-1). */
static void test_pipe_zb_h1_equals_ddp(void **state) {
    (void)state;
    run refs[9]; /* [m]: DDP over the same m micro-batches */
    memset(refs, 0, sizeof refs);
    for (int pp = 2; pp <= 4; pp++)
        for (int m = pp; m <= 2 * pp; m += pp)
            for (int ck = 0; ck < 3 * 2; ck++) {
                run p = make(1, pp, FSC_PAR_DDP, m, 1);
                p.steps = 2;
                p.eval = 1;
                p.po.schedule = FSC_SCHED_ZB_H1;
                p.po.pipe_checkpoint = (fsc_pipe_checkpoint)(ck % 3);
                p.po.prefetch = ck / 3;
                if (!refs[m].params) refs[m] = reference(&p);
                train(&p);
                char what[96];
                snprintf(what, sizeof what, "zb-h1, pp %d, %d micro-batches, checkpoint %s, prefetch %d", pp, m,
                         ckpt_name[ck % 3], ck / 3);
                assert_same(&refs[m], &p, what);
                for (int rk = 0; rk < p.world; rk++) {
                    if (memcmp(&p.ev[rk][1], &p.loss[rk][1], sizeof(double)) != 0)
                        fail_msg("%s: evaluation on rank %d differs from the step's loss", what, rk);
                    if (p.stats[rk].max_in_flight != pp)
                        fail_msg("%s: rank %d held %d micro-batches, not %d", what, rk, p.stats[rk].max_in_flight, pp);
                }
                assert_true(fabs(p.stats[0].ideal_bubble - (double)(pp - 1) / (3 * m + pp - 1)) < 1e-12);
                free(p.params);
            }
    /* uneven balances of the 5 blocks, every checkpoint mode, 4 micro-batches */
    static const int b2[] = { 3, 2 }, b3[] = { 1, 3, 1 }, b4[] = { 1, 1, 2, 1 };
    const int *bals[] = { b2, b3, b4 };
    for (int pp = 2; pp <= 4; pp++)
        for (int ck = 0; ck < 3; ck++) {
            run p = make(1, pp, FSC_PAR_DDP, 4, 1);
            p.steps = 2;
            p.po.schedule = FSC_SCHED_ZB_H1;
            p.po.prefetch = 1;
            p.po.balance = bals[pp - 2];
            p.po.pipe_checkpoint = (fsc_pipe_checkpoint)ck;
            if (!refs[4].params) refs[4] = reference(&p);
            train(&p);
            char what[96];
            snprintf(what, sizeof what, "zb-h1, pp %d, uneven balance, checkpoint %s", pp, ckpt_name[ck]);
            assert_same(&refs[4], &p, what);
            free(p.params);
        }
    for (int m = 0; m < 9; m++) free(refs[m].params);
    run p = make(2, 2, FSC_PAR_DDP, 4, 1); /* dp 2 x pp 2: DDP reduces in the last W */
    p.steps = 2;
    p.po.schedule = FSC_SCHED_ZB_H1;
    p.po.prefetch = 1;
    run ref = reference(&p);
    train(&p);
    assert_same(&ref, &p, "zb-h1, dp 2 x pp 2");
    free(p.params);
    free(ref.params);
}

/* ZB-H1's activations against 1F1B's, P = 4, M = 8, checkpoint never, prefetch 0 and 1: the output gradients and
 * stashes W needs are held only from a micro-batch's B to its W (the sequential model's split areas), so the first
 * stage, which holds 1F1B's peak (P records) and runs each W right after its B, holds less than one record more
 * than 1F1B there; and the runner's count follows the areas: the ledger's peak is the schedule's on every stage.
 * Holding them from F to W (every record made with them) fails the first check. */
static void test_pipe_zb_h1_memory(void **state) {
    (void)state;

    const int P = 4, M = 8;
    for (int pf = 0; pf < 2; pf++) {
        run f = make(1, P, FSC_PAR_DDP, M, 1), z = make(1, P, FSC_PAR_DDP, M, 1);
        f.po.pipe_checkpoint = z.po.pipe_checkpoint = FSC_PIPE_CKPT_NEVER;
        f.po.prefetch = z.po.prefetch = pf;
        f.po.schedule = FSC_SCHED_1F1B;
        z.po.schedule = FSC_SCHED_ZB_H1;
        f.steps = z.steps = 1;
        train(&f);
        train(&z);
        for (int s = 0; s < P; s++) {
            assert_int_equal(z.acts_peak[s], z.stats[s].peak_acts_bytes);
            assert_int_equal(f.stats[s].max_full_records, P - s);
            assert_int_equal(z.stats[s].max_full_records, P);
        }
        /* 1F1B's first stage holds P records: ZB-H1's holds less than P + 1 */
        if (z.acts_peak[0] * P >= f.acts_peak[0] * (size_t)(P + 1))
            fail_msg("prefetch %d: zb-h1's first stage held %zu bytes of activations, 1f1b's %zu: not below one record "
                     "more", pf, z.acts_peak[0], f.acts_peak[0]);
        if (getenv("FSC_TEST_VERBOSE"))
            fprintf(stderr, "  prefetch %d: first stage zb-h1 %zu bytes, 1f1b %zu (%.3fx)\n", pf, z.acts_peak[0],
                    f.acts_peak[0], (double)z.acts_peak[0] / (double)f.acts_peak[0]);
        free(f.params);
        free(z.params);
    }
}

/* ZB-H1's last stage with a head whose logits outweigh its blocks (vocabulary 2048, width 24): the tied head runs
 * whole in B, so its record (the logits) is dead once B ends; the sequential model keeps it in a whole area, held
 * from F to B and shared by the micro-batches waiting for their W, so the last stage holds the P records of its
 * blocks but one head's logits, not P. Oracle: 1F1B's last stage (one micro-batch at a time), which the whole area
 * may pass by less than P - 1 logits; keeping the head's record to W (in the record, as before) holds P - 1 more
 * logits and fails it. The losses and weights stay DDP's (one BLAS thread a rank: the 2048-wide products split
 * otherwise), and the runner's count the ledger's, with prefetch 0 and 1, and under every checkpoint mode the losses
 * and weights (with checkpoint always also the count: saved inputs pooled while records wait for W failed it). */
static void test_pipe_zb_h1_head_memory(void **state) {
    (void)state;
    const int P = 4, M = 8;
    for (int pf = 0; pf < 2; pf++) {
        run f = make(1, P, FSC_PAR_DDP, M, 1), z = make(1, P, FSC_PAR_DDP, M, 1);
        f.cfg.vocab = z.cfg.vocab = 2048;
        f.threads = z.threads = 1; /* DDP's one rank too: its products split as the pipeline's */
        f.po.pipe_checkpoint = z.po.pipe_checkpoint = FSC_PIPE_CKPT_NEVER;
        f.po.prefetch = z.po.prefetch = pf;
        f.po.schedule = FSC_SCHED_1F1B;
        z.po.schedule = FSC_SCHED_ZB_H1;
        f.steps = z.steps = 2;
        train(&f);
        train(&z);
        run ref = reference(&z);
        assert_same(&ref, &z, "zb-h1 with a large head");
        const size_t logits = (size_t)z.cfg.seq * (size_t)z.cfg.vocab * sizeof(float); /* one sequence a micro-batch */
        for (int s = 0; s < P; s++) assert_int_equal(z.acts_peak[s], z.stats[s].peak_acts_bytes);
        if (z.acts_peak[P - 1] >= f.acts_peak[P - 1] + (size_t)(P - 1) * logits)
            fail_msg("prefetch %d: zb-h1's last stage held %zu bytes of activations, 1f1b's %zu: %d more logits of "
                     "%zu bytes or more", pf, z.acts_peak[P - 1], f.acts_peak[P - 1], P - 1, logits);
        if (getenv("FSC_TEST_VERBOSE"))
            fprintf(stderr, "  prefetch %d: last stage zb-h1 %zu bytes, 1f1b %zu, logits %zu\n", pf, z.acts_peak[P - 1],
                    f.acts_peak[P - 1], logits);
        free(f.params);
        free(z.params);
        free(ref.params);
    }
    for (int ck = 0; ck < 3; ck++) { /* FairScale's modes: a checkpointed F gives its record back with its area;
                                       * always: the saved inputs, released at the recomputation, count as held */
        run z = make(1, P, FSC_PAR_DDP, M, 1);
        z.cfg.vocab = 2048;
        z.threads = 1;
        z.po.pipe_checkpoint = ck == 0 ? FSC_PIPE_CKPT_ALWAYS : ck == 1 ? FSC_PIPE_CKPT_EXCEPT_LAST : FSC_PIPE_CKPT_NEVER;
        z.po.schedule = FSC_SCHED_ZB_H1;
        z.po.prefetch = 0; /* prefetch's send rings grow with timing while idle records sit (pipe_link.c) */
        z.steps = 2;
        train(&z);
        run ref = reference(&z);
        assert_same(&ref, &z, "zb-h1 with a large head, a checkpoint mode");
        for (int s = 0; s < P && ck == 0; s++) /* except-last: a pool keeps a record of step 1 idle in step 2 */
            if (z.acts_peak[s] != z.stats[s].peak_acts_bytes)
                fail_msg("checkpoint mode %d: stage %d's ledger peak %zu, the schedule's count %zu", ck, s,
                         z.acts_peak[s], z.stats[s].peak_acts_bytes);
        free(z.params);
        free(ref.params);
    }
}

/* Interleaved stages keep a pool of records per chunk; a chunk that needs one while its pool is empty frees another
 * chunk's idle record first, so the ledger's peak is the schedule's count (P = 2 with v = 2 over the 5 blocks, M = 4
 * and 6, prefetch 1, checkpoint never). Keeping every chunk's most records (no freeing) fails it. */
static void test_pipe_chunk_pools(void **state) {
    (void)state;
    for (int m = 4; m <= 6; m += 2) {
        run p = make(1, 2, FSC_PAR_DDP, m, 1);
        p.po.pipe_checkpoint = FSC_PIPE_CKPT_NEVER;
        p.po.prefetch = 1;
        p.po.schedule = FSC_SCHED_INTERLEAVED;
        p.po.virtual_stages = 2;
        p.steps = 2;
        train(&p);
        for (int s = 0; s < 2; s++)
            if (p.acts_peak[s] != p.stats[s].peak_acts_bytes)
                fail_msg("interleaved, %d micro-batches: stage %d's ledger peak %zu, the schedule's count %zu", m, s,
                         p.acts_peak[s], p.stats[s].peak_acts_bytes);
        free(p.params);
    }
}

/* ZBV (two chunks per rank in a V, W actions): an 8-block GPT whose wte (owned by the first stage) and tied head
 * (the last stage) both run on rank 0, so the head's gradient of each micro-batch waits there for the embedding's
 * backward; the last rank hands its chunk 0's outputs to its chunk 1 itself. pp 2, 3 and 4, even and uneven
 * balances over the 2 pp chunks, m from 1 to 2 pp, every pipeline checkpoint mode, an evaluation before each
 * step, and dp 2 x pp 2. Oracle: DDP's bits over the same micro-batches, on every rank. */
static void test_pipe_zbv_equals_ddp(void **state) {
    (void)state;
    static const int uneven4[] = { 1, 3, 2, 2 }, uneven6[] = { 2, 1, 1, 1, 2, 1 }, uneven8[] = { 1, 1, 1, 1, 1, 1, 1, 1 };
    struct { int dp, pp, m; const int *bal; } cases[] = {
        { 1, 2, 1, NULL }, { 1, 2, 4, uneven4 }, { 1, 2, 3, NULL }, { 1, 3, 3, uneven6 }, { 1, 3, 6, NULL },
        { 1, 3, 2, NULL }, { 1, 4, 4, NULL }, { 1, 4, 8, uneven8 }, { 2, 2, 4, NULL },
    };
    run refs[2][9]; /* [dp - 1][m]: DDP over dp ranks, m micro-batches */
    memset(refs, 0, sizeof refs);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (int ck = 0; ck < 3; ck++) {
            run p = make_split(cases[c].dp, cases[c].pp, FSC_PAR_DDP, cases[c].m);
            p.eval = 1;
            p.po.schedule = FSC_SCHED_ZBV;
            p.po.balance = cases[c].bal;
            p.po.pipe_checkpoint = (fsc_pipe_checkpoint)ck;
            run *ref = &refs[cases[c].dp - 1][cases[c].m];
            if (!ref->params) *ref = reference(&p);
            train(&p);
            char what[128];
            snprintf(what, sizeof what, "zbv, dp %d x pp %d (balance %s), %d micro-batches, checkpoint %s", cases[c].dp,
                     cases[c].pp, cases[c].bal ? "uneven" : "even", cases[c].m, ckpt_name[ck]);
            assert_same(ref, &p, what);
            for (int st = 0; st < p.steps; st++)
                for (int rk = 0; rk < p.world; rk++)
                    if (memcmp(&p.ev[rk][st], &p.loss[rk][st], sizeof(double)) != 0)
                        fail_msg("%s: evaluation of step %d on rank %d %.17g, the step's loss %.17g", what, st, rk,
                                 p.ev[rk][st], p.loss[rk][st]);
            const double fill = (double)(cases[c].pp - 1) / (6.0 * cases[c].m + cases[c].pp - 1);
            assert_true(fabs(p.stats[0].ideal_bubble - fill) < 1e-12);
            free(p.params);
        }
    }
    for (int d = 0; d < 2; d++)
        for (int m = 0; m < 9; m++) free(refs[d][m].params);
}

/* ZBV's ranks need records of one chunk while the other's are idle, and the other way round later in the step. A
 * record given up for the other chunk is remade in its memory (model.h's acts_remake), so after the first step no
 * rank makes a record (P = 4, M = 8, even balance: the middle ranks' two chunks hold one block each), the ledger's
 * peak does not grow after the first step, and the bits are DDP's. Freeing and making instead (no acts_remake) makes
 * records in every step and fails the first check. */
static void test_pipe_zbv_records_remade(void **state) {
    (void)state;
    const int P = 4, M = 8;
    run one = make(1, P, FSC_PAR_DDP, M, 1), three = make(1, P, FSC_PAR_DDP, M, 1);
    one.cfg.layers = three.cfg.layers = 8;
    one.po.schedule = three.po.schedule = FSC_SCHED_ZBV;
    one.po.pipe_checkpoint = three.po.pipe_checkpoint = FSC_PIPE_CKPT_NEVER;
    one.po.prefetch = three.po.prefetch = 1;
    one.steps = 1;
    train(&one);
    run ref = reference(&three);
    train(&three);
    assert_same(&ref, &three, "zbv, pp 4, 8 micro-batches, records remade");
    int remade = 0;
    for (int r = 0; r < P; r++) {
        if (three.stats[r].records_made != one.stats[r].records_made)
            fail_msg("zbv rank %d made %d records in 3 steps, %d in the first: records made after the first step", r,
                     three.stats[r].records_made, one.stats[r].records_made);
        if (three.acts_peak[r] != one.acts_peak[r])
            fail_msg("zbv rank %d: the ledger's peak %zu after 3 steps, %zu after the first", r, three.acts_peak[r],
                     one.acts_peak[r]);
        remade += three.stats[r].records_remade;
    }
    assert_true(remade > 0); /* the case this test is about happens */
    free(one.params), free(three.params), free(ref.params);
}

/* P in {2, 3, 4}, uneven balances, both schedules, every checkpoint mode, prefetch 0 and 1 (asynchronous
 * sends and receives, docs/overlap.md): DDP's bits */
static void test_pipe_equals_ddp(void **state) {
    (void)state;
    static const int b2[] = { 3, 2 }, b3a[] = { 1, 3, 1 }, b3b[] = { 2, 1, 2 }, b4[] = { 1, 1, 2, 1 };
    struct { int pp; const int *bal; } cases[] = { { 2, b2 }, { 2, NULL }, { 3, b3a }, { 3, b3b }, { 4, b4 } };
    run base = make(1, 2, FSC_PAR_DDP, 4, 1);
    base.steps = 2; /* the second step runs on updated weights (the wte replica included) */
    run ref = reference(&base);
    assert_true(ref.info[0].grad_norm > base.po.clip); /* clipping clips: the norm over every stage counts */
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (int sc = 0; sc < 2; sc++) {
            for (int ck = 0; ck < 3 * 2; ck++) {
                run p = make(1, cases[c].pp, FSC_PAR_DDP, 4, 1);
                p.steps = base.steps;
                p.po.balance = cases[c].bal;
                p.po.schedule = (fsc_pipe_schedule)sc;
                p.po.pipe_checkpoint = (fsc_pipe_checkpoint)(ck % 3);
                p.po.prefetch = ck / 3;
                train(&p);
                char what[96];
                snprintf(what, sizeof what, "pp %d (balance %s), %s, checkpoint %s, prefetch %d", cases[c].pp,
                         cases[c].bal ? "uneven" : "even", sched_name[sc], ckpt_name[ck % 3], ck / 3);
                assert_same(&ref, &p, what);
                free(p.params);
            }
        }
    }
    free(ref.params);
}

/* A caller's own schedule (FSC_SCHED_CUSTOM): lists of F and B actions per rank (and one with W actions, GPipe's
 * order with the Ws last), validated at engine creation.
 * Two chunks per rank run depth-first (each micro-batch through both chunks, forwards, then each micro-batch's
 * backwards), with 3 micro-batches (no multiple of the ranks: that rule is the interleaved schedule's), and one
 * chunk per rank with more warm-up than 1F1B. Oracle: DDP's bits. A list that runs rank 1's backwards out of
 * order is refused when the engine is made, the message naming the action. */
static fsc_status create_fn(fsc_rank *rk, void *arg);
static void expect_error(run *r, const char *needle);

static void depth_first(int v, int m, fsc_pipe_action *a) {
    int n = 0;
    for (int k = 0; k < m; k++)
        for (int c = 0; c < v; c++) a[n++] = (fsc_pipe_action){ FSC_ACT_FORWARD, k, c };
    for (int k = 0; k < m; k++)
        for (int c = v - 1; c >= 0; c--) a[n++] = (fsc_pipe_action){ FSC_ACT_BACKWARD, k, c };
}

static void test_pipe_custom_schedule(void **state) {
    (void)state;
    fsc_pipe_action r0[12], r1[12];
    depth_first(2, 3, r0);
    depth_first(2, 3, r1);
    const fsc_pipe_action *const lists[] = { r0, r1 };
    const int n[] = { 12, 12 };
    run p = make_split(1, 2, FSC_PAR_DDP, 3);
    p.eval = 1;
    p.po.schedule = FSC_SCHED_CUSTOM;
    p.po.virtual_stages = 2;
    p.po.actions = lists;
    p.po.nactions = n;
    run ref = reference(&p);
    train(&p);
    assert_same(&ref, &p, "custom: 2 chunks per rank, depth-first, 3 micro-batches");
    free(p.params);
    /* one chunk per rank, rank 0 with 3 warm-up forwards */
    static const fsc_pipe_action w0[] = { { FSC_ACT_FORWARD, 0, 0 },  { FSC_ACT_FORWARD, 1, 0 },
                                          { FSC_ACT_FORWARD, 2, 0 },  { FSC_ACT_BACKWARD, 0, 0 },
                                          { FSC_ACT_BACKWARD, 1, 0 }, { FSC_ACT_BACKWARD, 2, 0 } };
    static const fsc_pipe_action w1[] = { { FSC_ACT_FORWARD, 0, 0 },  { FSC_ACT_BACKWARD, 0, 0 },
                                          { FSC_ACT_FORWARD, 1, 0 },  { FSC_ACT_BACKWARD, 1, 0 },
                                          { FSC_ACT_FORWARD, 2, 0 },  { FSC_ACT_BACKWARD, 2, 0 } };
    const fsc_pipe_action *const one[] = { w0, w1 };
    const int n1[] = { 6, 6 };
    run q = make_split(1, 2, FSC_PAR_DDP, 3);
    q.po.schedule = FSC_SCHED_CUSTOM;
    q.po.actions = one;
    q.po.nactions = n1;
    train(&q);
    assert_same(&ref, &q, "custom: one chunk per rank");
    free(q.params);
    /* with W actions: GPipe's order, all the Ws after all the Bs (every record held until then) */
    static const fsc_pipe_action z[] = { { FSC_ACT_FORWARD, 0, 0 },  { FSC_ACT_FORWARD, 1, 0 },
                                         { FSC_ACT_FORWARD, 2, 0 },  { FSC_ACT_BACKWARD, 0, 0 },
                                         { FSC_ACT_BACKWARD, 1, 0 }, { FSC_ACT_BACKWARD, 2, 0 },
                                         { FSC_ACT_WEIGHT, 0, 0 },   { FSC_ACT_WEIGHT, 1, 0 },
                                         { FSC_ACT_WEIGHT, 2, 0 } };
    const fsc_pipe_action *const zl[] = { z, z };
    const int nz[] = { 9, 9 };
    run u = make_split(1, 2, FSC_PAR_DDP, 3);
    u.po.schedule = FSC_SCHED_CUSTOM;
    u.po.actions = zl;
    u.po.nactions = nz;
    train(&u);
    assert_same(&ref, &u, "custom: with W actions");
    assert_int_equal(u.stats[1].max_in_flight, 3);
    free(u.params);
    /* W on rank 0 only (rank 1 runs its whole backwards in B): DDP's bits, and one ideal bubble, the schedule's, on
     * both stages: (P-1)/(3M+P-1) as the planner's; rank 1 said (P-1)/(M+P-1) (its own list has no W) */
    const fsc_pipe_action *const zw[] = { z, w0 };
    const int nzw[] = { 9, 6 };
    run w = make_split(1, 2, FSC_PAR_DDP, 3);
    w.po.schedule = FSC_SCHED_CUSTOM;
    w.po.actions = zw;
    w.po.nactions = nzw;
    train(&w);
    assert_same(&ref, &w, "custom: W on rank 0 only");
    for (int rk = 0; rk < 2; rk++)
        if (fabs(w.stats[rk].ideal_bubble - 1.0 / (3 * 3 + 1)) > 1e-12)
            fail_msg("custom, W on rank 0 only: rank %d's ideal bubble is %g, not the schedule's 1/10", rk,
                     w.stats[rk].ideal_bubble);
    free(w.params);
    free(ref.params);
    /* rank 1's backwards of micro-batches 0 and 1 on chunk 1 swapped: refused, naming the action */
    fsc_pipe_action t = r1[6];
    r1[6] = r1[8], r1[8] = t;
    fsc_cluster_opts co = { .world = p.world, .device = "cpu", .timeout_s = 30 };
    assert_err(fsc_cluster_run(&co, create_fn, &p), FSC_ERR_INVALID,
               "rank 1, action 6, B(mb 1, chunk 1) comes before micro-batch 0 of its chunk");
    p.po.actions = NULL;
    assert_err(fsc_cluster_run(&co, create_fn, &p), FSC_ERR_INVALID, "custom pipeline schedule needs actions");
}

/* A custom schedule placed in a V (po.placement FSC_PIPE_V, virtual_stages 2). The lists fsc_pipe_schedule_make
 * gives for zbv, passed as a custom schedule: zbv's bits and DDP's (losses on every rank, an evaluation before each
 * step equal to its loss, final parameters) and zbv's records in flight on every rank, over pp 2 and 3, even and
 * uneven balances, three checkpoint modes and dp 2 x pp 2; the same lists in a loop are refused (a message out of
 * order). A depth-first list (no W) in a V gives DDP's bits too, saves DDP's weights file byte for byte and,
 * loading it, trains as DDP loading it; with the last rank's two forwards of micro-batch 0 swapped it deadlocks
 * (chunk 1 waits for its own chunk 0) and is refused naming the wait. Placement V with a built-in schedule, with
 * other than two chunks, and an unknown placement are refused. */
static void test_pipe_custom_v(void **state) {
    (void)state;
    static const int uneven6[] = { 2, 1, 1, 1, 2, 1 };
    struct { int dp, pp, m, ck; const int *bal; } cases[] = {
        { 1, 2, 4, 0, NULL }, { 1, 3, 5, 1, uneven6 }, { 2, 2, 3, 2, NULL },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int pp = cases[c].pp, m = cases[c].m;
        fsc_pipe_action *a[MAXS] = { NULL };
        int n[MAXS] = { 0 };
        for (int r = 0; r < pp; r++) assert_ok(fsc_pipe_schedule_make(FSC_SCHED_ZBV, pp, 2, m, r, &a[r], &n[r]));
        run z = make_split(cases[c].dp, pp, FSC_PAR_DDP, m);
        z.eval = 1;
        z.po.schedule = FSC_SCHED_ZBV;
        z.po.balance = cases[c].bal;
        z.po.pipe_checkpoint = (fsc_pipe_checkpoint)cases[c].ck;
        run ref = reference(&z);
        train(&z);
        run u = z;
        u.params = NULL;
        u.po.schedule = FSC_SCHED_CUSTOM;
        u.po.placement = FSC_PIPE_V;
        u.po.virtual_stages = 2;
        u.po.actions = (const fsc_pipe_action *const *)a;
        u.po.nactions = n;
        train(&u);
        char what[128];
        snprintf(what, sizeof what, "custom V with zbv's lists, dp %d x pp %d (balance %s), %d micro-batches, "
                 "checkpoint %s", cases[c].dp, pp, cases[c].bal ? "uneven" : "even", m, ckpt_name[cases[c].ck]);
        assert_same(&ref, &z, what);
        assert_same(&ref, &u, what);
        assert_same(&z, &u, what);
        for (int rk = 0; rk < u.world; rk++) {
            for (int st = 0; st < u.steps; st++)
                if (memcmp(&u.ev[rk][st], &u.loss[rk][st], sizeof(double)) != 0)
                    fail_msg("%s: evaluation of step %d on rank %d %.17g, the step's loss %.17g", what, st, rk,
                             u.ev[rk][st], u.loss[rk][st]);
            assert_int_equal(u.stats[rk].max_in_flight, z.stats[rk].max_in_flight);
            assert_int_equal(u.stats[rk].stage, z.stats[rk].stage);
            assert_int_equal(u.stats[rk].first_layer, z.stats[rk].first_layer);
            assert_int_equal(u.stats[rk].last_layer, z.stats[rk].last_layer);
        }
        u.po.placement = FSC_PIPE_LOOP; /* zbv's lists with loop-placed stages: out of order on the wrap-around */
        static const char *const want[] = { "rank 1, action 1, F(mb 0, chunk 1) receives its input from rank 0",
                                            "rank 1, action 3, F(mb 0, chunk 1) receives its input from rank 0" };
        expect_error(&u, want[pp - 2]);
        free(u.params);
        free(z.params);
        free(ref.params);
        for (int r = 0; r < pp; r++) fsc_pipe_schedule_free(a[r]);
    }
    fsc_pipe_action r0[12], r1[12];
    depth_first(2, 3, r0);
    depth_first(2, 3, r1);
    const fsc_pipe_action *const lists[] = { r0, r1 };
    const int n[] = { 12, 12 };
    run p = make_split(1, 2, FSC_PAR_DDP, 3);
    p.po.schedule = FSC_SCHED_CUSTOM;
    p.po.placement = FSC_PIPE_V;
    p.po.virtual_stages = 2;
    p.po.actions = lists;
    p.po.nactions = n;
    char wa[64], wb[64];
    snprintf(wa, sizeof wa, "/tmp/fsc_test_pipe_v_%d_a.safetensors", (int)getpid());
    snprintf(wb, sizeof wb, "/tmp/fsc_test_pipe_v_%d_b.safetensors", (int)getpid());
    run ref = reference(&p);
    ref.save = wb;
    train(&ref);
    p.save = wa;
    train(&p);
    assert_same(&ref, &p, "custom V: depth-first, 3 micro-batches");
    assert_int_equal(p.stats[0].last_layer, p.cfg.layers + 1); /* the V's first rank holds the head */
    assert_int_equal(p.stats[1].first_layer, 3); /* the last rank: stages 1 and 2, layers 3 to 6 (a loop: 3 to 9) */
    assert_int_equal(p.stats[1].last_layer, 6);
    FILE *fa = fopen(wa, "rb"), *fb = fopen(wb, "rb"); /* the weights saved from the V: DDP's, byte for byte */
    assert_non_null(fa);
    assert_non_null(fb);
    long at = 0;
    for (int ca = 0, cb = 0; ca != EOF; at++)
        if ((ca = fgetc(fa)) != (cb = fgetc(fb))) fail_msg("custom V: saved weights differ at byte %ld", at);
    assert_true(at > 1000);
    fclose(fa);
    fclose(fb);
    free(p.params);
    free(ref.params);
    p.params = NULL;
    p.save = NULL;
    p.load = wa; /* loaded into the V's stages: DDP loading them */
    run lref = reference(&p);
    train(&p);
    assert_same(&lref, &p, "custom V: after loading weights");
    assert_true(memcmp(&p.loss[0][0], &ref.loss[0][0], sizeof(double)) != 0); /* it did start elsewhere */
    free(p.params);
    free(lref.params);
    unlink(wa);
    unlink(wb);
    p.params = NULL;
    p.load = NULL;
    r1[0] = (fsc_pipe_action){ FSC_ACT_FORWARD, 0, 1 }; /* the last rank's F0.0 F0.1 as F0.1 F0.0 */
    r1[1] = (fsc_pipe_action){ FSC_ACT_FORWARD, 0, 0 };
    expect_error(&p, "rank 1 waits at action 0, F(mb 0, chunk 1), for its input from rank 1");
    depth_first(2, 3, r1);
    p.po.virtual_stages = 3;
    expect_error(&p, "placement V puts two chunks on every pipeline rank: it needs virtual_stages 2, not 3");
    p.po.virtual_stages = 0;
    expect_error(&p, "needs virtual_stages 2, not 0");
    p.po.virtual_stages = 2;
    p.po.schedule = FSC_SCHED_ZBV;
    expect_error(&p, "placement V is for a custom schedule (FSC_SCHED_CUSTOM): the built-in schedule zbv places its "
                 "own stages");
    p.po.schedule = FSC_SCHED_1F1B;
    p.po.virtual_stages = 0;
    expect_error(&p, "the built-in schedule 1f1b places its own stages");
    p.po.schedule = FSC_SCHED_CUSTOM;
    p.po.virtual_stages = 2;
    p.po.placement = (fsc_pipe_placement)5;
    expect_error(&p, "unknown pipeline placement 5");
}

/* The receives posted ahead (po.prefetch 1, docs/overlap.md) on the paths the test above leaves out: 1, 2 (of 2
 * sequences each: accumulation over micro-batches of several samples) and 5 micro-batches, 2 to 4 stages with
 * uneven balances, both schedules, every checkpoint mode, an evaluation (fsc_engine_eval) before every step and a
 * first step that fails (wrong global batch) after its micro-batches ran. Oracle: DDP's bits, doing the same;
 * every rank's evaluation of a step's batch equals that step's loss. */
static void test_pipe_prefetch_receives(void **state) {
    (void)state;
    static const int b2[] = { 3, 2 }, b3[] = { 1, 3, 1 }, b4[] = { 1, 1, 2, 1 };
    struct { int pp; const int *bal; } cases[] = { { 2, b2 }, { 3, b3 }, { 4, b4 } };
    const int Ms[] = { 1, 2, 5 };
    for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++) {
        const int M = Ms[mi], mb = M == 2 ? 2 : 1;
        run base = make(1, 2, FSC_PAR_DDP, M, mb);
        base.steps = 2;
        base.eval = base.bad_first = 1;
        run ref = reference(&base);
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            for (int sc = 0; sc < 2 * 3; sc++) {
                run p = make(1, cases[c].pp, FSC_PAR_DDP, M, mb);
                p.steps = base.steps;
                p.eval = p.bad_first = 1;
                p.po.balance = cases[c].bal;
                p.po.schedule = (fsc_pipe_schedule)(sc / 3);
                p.po.pipe_checkpoint = (fsc_pipe_checkpoint)(sc % 3);
                p.po.prefetch = 1;
                train(&p);
                char what[112];
                snprintf(what, sizeof what, "pp %d, %d micro-batches of %d, %s, checkpoint %s, prefetch 1",
                         cases[c].pp, M, mb, sched_name[sc / 3], ckpt_name[sc % 3]);
                assert_same(&ref, &p, what);
                for (int st = 0; st < p.steps; st++)
                    for (int rk = 0; rk < p.world; rk++)
                        if (memcmp(&p.ev[rk][st], &p.loss[rk][st], sizeof(double)) != 0)
                            fail_msg("%s: rank %d's eval before step %d gives %.17g, the step %.17g", what, rk, st,
                                     p.ev[rk][st], p.loss[rk][st]);
                free(p.params);
            }
        }
        free(ref.params);
    }
}

/* Every balance of the 5 blocks over 2, 3 and 4 stages, 1 to 6 micro-batches, both schedules, every checkpoint
 * mode, with the receives posted ahead (prefetch 1): one step of DDP's bits (and no deadlock, which would time out). */
static void test_pipe_prefetch_every_balance(void **state) {
    (void)state;
    for (int M = 1; M <= 6; M++) {
        run base = make(1, 2, FSC_PAR_DDP, M, 1);
        base.steps = 1;
        run ref = reference(&base);
        for (int P = 2; P <= 4; P++) {
            int bal[4] = { 1, 1, 1, 1 };
            for (;;) { /* the balances of 5 blocks over P stages, in lexicographic order */
                int sum = 0;
                for (int i = 0; i < P - 1; i++) sum += bal[i];
                if (sum < 5) {
                    bal[P - 1] = 5 - sum;
                    for (int sc = 0; sc < 2 * 3; sc++) {
                        run p = make(1, P, FSC_PAR_DDP, M, 1);
                        p.steps = 1;
                        p.po.balance = bal;
                        p.po.schedule = (fsc_pipe_schedule)(sc / 3);
                        p.po.pipe_checkpoint = (fsc_pipe_checkpoint)(sc % 3);
                        p.po.prefetch = 1;
                        train(&p);
                        char what[112];
                        snprintf(what, sizeof what, "balance %d,%d,%d,%d (pp %d), %d micro-batches, %s, checkpoint %s",
                                 bal[0], bal[1], P > 2 ? bal[2] : 0, P > 3 ? bal[3] : 0, P, M, sched_name[sc / 3],
                                 ckpt_name[sc % 3]);
                        assert_same(&ref, &p, what);
                        free(p.params);
                    }
                }
                int i = P - 2; /* next: the last of the first P - 1 entries that can grow */
                while (i >= 0 && ++bal[i] > 5 - (P - 1)) bal[i--] = 1;
                if (i < 0) break;
            }
        }
        free(ref.params);
    }
}

/* dp x pp: DDP, FSDP (full_shard, shard_grad_op, hybrid) and ZeRO-1/2 inside each stage's data group, prefetch 0
 * and 1 */
static void test_pipe_dp_x_pp(void **state) {
    (void)state;
    struct { int dp, pp; fsc_parallel_kind kind; fsc_shard_strategy sh; int sched; const char *what; } cases[] = {
        { 2, 2, FSC_PAR_DDP, 0, FSC_SCHED_1F1B, "ddp" },
        { 2, 2, FSC_PAR_FSDP, FSC_SHARD_FULL, FSC_SCHED_GPIPE, "fsdp full_shard" },
        { 2, 2, FSC_PAR_FSDP, FSC_SHARD_GRAD_OP, FSC_SCHED_1F1B, "fsdp shard_grad_op" },
        { 2, 2, FSC_PAR_ZERO1, 0, FSC_SCHED_1F1B, "zero1" },
        { 2, 2, FSC_PAR_ZERO2, 0, FSC_SCHED_GPIPE, "zero2" },
        { 3, 2, FSC_PAR_FSDP, FSC_SHARD_FULL, FSC_SCHED_1F1B, "fsdp full_shard, dp 3" },
        { 2, 3, FSC_PAR_ZERO2, 0, FSC_SCHED_1F1B, "zero2, pp 3" },
        { 4, 2, FSC_PAR_FSDP, FSC_SHARD_HYBRID, FSC_SCHED_1F1B, "fsdp hybrid_shard, dp 4" },
    };
    run refs[5] = { 0 };
    for (size_t i = 0; i < 2 * sizeof cases / sizeof cases[0]; i++) {
        const size_t c = i / 2;
        const int pf = (int)(i % 2); /* prefetch 0 and 1 */
        run p = make(cases[c].dp, cases[c].pp, cases[c].kind, 3, 1);
        p.po.prefetch = pf;
        p.po.shard = cases[c].sh;
        p.po.hybrid_group = 2;
        p.po.schedule = (fsc_pipe_schedule)cases[c].sched;
        run *ref = &refs[cases[c].dp];
        if (!ref->params) *ref = reference(&p);
        train(&p);
        char what[96];
        snprintf(what, sizeof what, "dp %d x pp %d, %s, prefetch %d", cases[c].dp, cases[c].pp, cases[c].what, pf);
        assert_same(ref, &p, what);
        /* rank = stage * dp + dp_index */
        for (int rk = 0; rk < p.world; rk++) {
            assert_int_equal(p.stats[rk].stage, rk / cases[c].dp);
            assert_int_equal(p.stats[rk].dp_index, rk % cases[c].dp);
        }
        free(p.params);
    }
    for (int i = 0; i < 5; i++) free(refs[i].params);
}

/* ZeRO-1, ZeRO-2 and FSDP (shard_grad_op, full_shard) inside the stages of the schedules with chunks or W actions
 * (interleaved with 2 chunks, zb-h1, zbv): dp 2 x pp 2 on an 8-block GPT, every pipeline checkpoint mode, and dp 2
 * x pp 3 (zbv: 6 chunks). Oracle: DDP's bits over the same micro-batches. With chunks, FSDP's prefetch stops at
 * the end of the chunk that runs (fsc_pipe_running_layers); letting it run on into the rank's next chunk changed
 * the bits of the checkpointed modes, which this test caught. */
static void test_pipe_strategies_in_new_schedules(void **state) {
    (void)state;
    struct { fsc_parallel_kind kind; fsc_shard_strategy sh; const char *what; } kinds[] = {
        { FSC_PAR_ZERO1, 0, "zero1" }, { FSC_PAR_ZERO2, 0, "zero2" }, { FSC_PAR_FSDP, FSC_SHARD_GRAD_OP, "fsdp shard_grad_op" },
        { FSC_PAR_FSDP, FSC_SHARD_FULL, "fsdp full_shard" },
    };
    static const fsc_pipe_schedule scheds[] = { FSC_SCHED_1F1B, FSC_SCHED_INTERLEAVED, FSC_SCHED_ZB_H1, FSC_SCHED_ZBV };
    static const char *const sname[] = { "1f1b", "interleaved", "zb-h1", "zbv" };
    run ref = { 0 };
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        for (int sc = 0; sc < 4; sc++)
            for (int ck = 0; ck < 4; ck++) {
                const int pp = ck < 3 ? 2 : 3; /* the fourth: pp 3, checkpoint except_last */
                if (pp == 3 && scheds[sc] == FSC_SCHED_INTERLEAVED) continue; /* 4 micro-batches: not a multiple */
                run p = make_split(2, pp, kinds[k].kind, 4);
                p.po.shard = kinds[k].sh;
                p.po.schedule = scheds[sc];
                p.po.virtual_stages = scheds[sc] == FSC_SCHED_INTERLEAVED ? 2 : 0;
                p.po.pipe_checkpoint = (fsc_pipe_checkpoint)(ck % 3);
                if (!ref.params) ref = reference(&p);
                char what[128];
                snprintf(what, sizeof what, "dp 2 x pp %d, %s inside %s stages, checkpoint %s", pp, kinds[k].what,
                         sname[sc], ckpt_name[ck % 3]);
                run_against(&ref, &p, what);
            }
    free(ref.params);
}

/* Mixed precision: the last stage's wte replica carries stage 0's rounded values (prefetch 0, and 1: sent
 * asynchronously from a copy); f16 votes over the world */
static void test_pipe_low_precision(void **state) {
    (void)state;
    for (int v = 0; v < 4; v++) {
        const int f16 = v % 2;
        run p = make(2, 2, FSC_PAR_DDP, 2, 1);
        p.po.prefetch = v / 2;
        p.po.param_dtype = p.po.reduce_dtype = f16 ? FSC_F16 : FSC_BF16;
        p.po.schedule = FSC_SCHED_1F1B;
        if (f16) {
            p.po.init_loss_scale = 16777216.0f; /* overflows: steps are skipped */
            p.steps = 4;
        }
        run ref = reference(&p);
        train(&p);
        assert_same(&ref, &p, f16 ? "f16 with loss scaling" : "bf16");
        if (f16) assert_true(ref.info[0].skipped && p.info[0].skipped);
        run f32 = make(2, 2, FSC_PAR_DDP, 2, 1); /* and the precision really changed the result */
        train(&f32);
        assert_true(memcmp(&f32.loss[0][1], &p.loss[0][1], sizeof(double)) != 0);
        free(ref.params);
        free(p.params);
        free(f32.params);
    }
}

/* 1F1B: at most P - stage micro-batches alive on stage s (P on the first); GPipe: M. The ledger agrees, with
 * prefetch 1 too, which holds exactly one receive buffer per direction more. */
static void test_pipe_in_flight(void **state) {
    (void)state;
    const int P = 3, M = 6;
    run g = make(1, P, FSC_PAR_DDP, M, 1), f = make(1, P, FSC_PAR_DDP, M, 1);
    g.po.pipe_checkpoint = f.po.pipe_checkpoint = FSC_PIPE_CKPT_NEVER;
    f.po.schedule = FSC_SCHED_1F1B;
    g.steps = f.steps = 1;
    train(&g);
    train(&f);
    for (int s = 0; s < P; s++) {
        assert_int_equal(g.stats[s].max_in_flight, M);
        assert_int_equal(f.stats[s].max_in_flight, P - s);
        assert_int_equal(g.stats[s].max_full_records, M);
        /* the schedule's activations are the rank's only ones: the ledger peak is theirs */
        assert_int_equal(g.acts_peak[s], g.stats[s].peak_acts_bytes);
        assert_int_equal(f.acts_peak[s], f.stats[s].peak_acts_bytes);
        assert_int_equal(f.acts_peak[s] * M, g.acts_peak[s] * (size_t)(P - s));
    }
    /* receives posted ahead (prefetch 1): one buffer per direction more, in the ledger and the stats alike */
    run g1 = g, f1 = f;
    g1.params = f1.params = NULL;
    g1.po.prefetch = f1.po.prefetch = 1;
    train(&g1);
    train(&f1);
    const size_t buf = (size_t)g.cfg.seq * g.cfg.dim * sizeof(float); /* one sequence per micro-batch */
    for (int s = 0; s < P; s++) {
        const size_t extra = buf * (size_t)((s > 0) + (s < P - 1));
        assert_int_equal(g1.stats[s].max_full_records, M);
        assert_int_equal(f1.stats[s].max_in_flight, P - s);
        assert_int_equal(g1.acts_peak[s], g1.stats[s].peak_acts_bytes);
        assert_int_equal(f1.acts_peak[s], f1.stats[s].peak_acts_bytes);
        assert_int_equal(g1.acts_peak[s], g.acts_peak[s] + extra);
        assert_int_equal(f1.acts_peak[s], f.acts_peak[s] + extra);
    }
    free(g.params);
    free(f.params);
    free(g1.params);
    free(f1.params);
}

/* Checkpointed outputs leave from a ring of send buffers (prefetch 1, pipe_link.c): min(prefetch_limit (0: 2),
 * checkpointed micro-batches) of them on every stage but the last, reused within the step when the limit is
 * smaller. Oracle: DDP's bits; the ledger's activation peak and the stats' (peak_acts_bytes) are prefetch 0's
 * plus the receive buffers and the ring, for limits 1, 2 (0) and 3, GPipe and 1F1B, checkpoint always and
 * except_last. (The two peaks are compared with prefetch 0's, not with each other: under 1F1B with except_last
 * a middle stage's ledger also holds a saved input idle in its pool, which the stats do not count.) */
static void test_pipe_send_ring(void **state) {
    (void)state;
    const int P = 3, M = 5;
    run base = make(1, 2, FSC_PAR_DDP, M, 1);
    base.steps = 2;
    run ref = reference(&base);
    const size_t buf = (size_t)base.cfg.seq * base.cfg.dim * sizeof(float); /* one sequence per micro-batch */
    for (int v = 0; v < 2 * 2; v++) {
        run z = make(1, P, FSC_PAR_DDP, M, 1);
        z.steps = base.steps;
        z.po.schedule = (fsc_pipe_schedule)(v % 2);
        z.po.pipe_checkpoint = v < 2 ? FSC_PIPE_CKPT_ALWAYS : FSC_PIPE_CKPT_EXCEPT_LAST;
        train(&z); /* prefetch 0 */
        const int nck = v < 2 ? M : M - 1;
        for (int limit = 0; limit <= 3; limit++) {
            run p = z;
            p.params = NULL;
            p.po.prefetch = 1;
            p.po.prefetch_limit = limit;
            train(&p);
            char what[112];
            snprintf(what, sizeof what, "%s, checkpoint %s, prefetch_limit %d", sched_name[v % 2],
                     v < 2 ? "always" : "except_last", limit);
            assert_same(&ref, &p, what);
            const int lim = limit ? limit : 2, ring = nck < lim ? nck : lim;
            for (int s = 0; s < P; s++) {
                const size_t extra = buf * (size_t)((s > 0) + (s < P - 1) + (s < P - 1 ? ring : 0));
                if (p.acts_peak[s] != z.acts_peak[s] + extra ||
                    p.stats[s].peak_acts_bytes != z.stats[s].peak_acts_bytes + extra)
                    fail_msg("%s: stage %d: ledger %zu, stats %zu; prefetch 0 %zu, %zu; buffers %zu", what, s,
                             p.acts_peak[s], p.stats[s].peak_acts_bytes, z.acts_peak[s], z.stats[s].peak_acts_bytes,
                             extra);
            }
            free(p.params);
        }
        free(z.params);
    }
    free(ref.params);
}

/* Checkpointing lowers the activation peak (ledger) on every stage: always < except_last < never */
static void test_pipe_checkpoint_memory(void **state) {
    (void)state;
    const int P = 2, M = 4;
    size_t peak[3][2];
    int full[3];
    for (int ck = 0; ck < 3; ck++) {
        run r = make(1, P, FSC_PAR_DDP, M, 2);
        r.po.pipe_checkpoint = (fsc_pipe_checkpoint)ck;
        r.steps = 1;
        train(&r);
        for (int s = 0; s < P; s++) peak[ck][s] = r.acts_peak[s];
        full[ck] = r.stats[0].max_full_records;
        assert_int_equal(r.stats[0].max_in_flight, M);
        free(r.params);
    }
    assert_int_equal(full[FSC_PIPE_CKPT_ALWAYS], 1);
    assert_int_equal(full[FSC_PIPE_CKPT_EXCEPT_LAST], 2);
    assert_int_equal(full[FSC_PIPE_CKPT_NEVER], M);
    for (int s = 0; s < P; s++) {
        assert_true(peak[FSC_PIPE_CKPT_ALWAYS][s] < peak[FSC_PIPE_CKPT_EXCEPT_LAST][s]);
        assert_true(peak[FSC_PIPE_CKPT_EXCEPT_LAST][s] < peak[FSC_PIPE_CKPT_NEVER][s]);
    }
}

/* Messages per step: outputs forward, gradients back, wte once to the last stage, dwte_head per
 * micro-batch back to stage 0; the loss is broadcast to every stage; the bubble is measured. */
static void test_pipe_messages_and_stats(void **state) {
    (void)state;
    const int P = 3, M = 4;
    run r = make(1, P, FSC_PAR_DDP, M, 1);
    r.po.schedule = FSC_SCHED_1F1B;
    train(&r);
    const double btc = 4.0 * r.cfg.seq * r.cfg.dim, wte = 4.0 * r.cfg.vocab * r.cfg.dim;
    const double want_bytes[] = { M * btc + wte, 2 * M * btc, M * btc + M * wte };
    const uint64_t want_calls[] = { M + 1, 2 * M, 2 * M };
    for (int s = 0; s < P; s++) {
        assert_int_equal(r.comm[s].calls[FSC_OP_SEND], want_calls[s]);
        assert_true(fabs(r.comm[s].bytes[FSC_OP_SEND] - want_bytes[s]) < 1e-6);
        const fsc_pipe_stats *st = &r.stats[s];
        assert_int_equal(st->pp, P);
        assert_int_equal(st->steps, r.steps);
        assert_int_equal(st->micro_batches, M);
        assert_true(st->wall_s > 0 && st->wait_s >= 0 && st->wait_s <= st->wall_s);
        assert_true(st->bubble >= 0 && st->bubble <= 1);
        assert_true(fabs(st->ideal_bubble - (double)(P - 1) / (M + P - 1)) < 1e-12);
    }
    assert_int_equal(r.stats[0].first_layer, 0);
    assert_int_equal(r.stats[0].last_layer, 2); /* even: 2, 2, 1 blocks */
    assert_int_equal(r.stats[2].first_layer, 5);
    assert_int_equal(r.stats[2].last_layer, 6);
    free(r.params);
}

/* Weights saved from a pipeline are the file DDP writes, byte for byte; loaded into a pipeline (the last
 * stage's wte replica too: it is refreshed from stage 0), training goes on as DDP's from the same file. */
static void test_pipe_save_weights(void **state) {
    (void)state;
    char a[64], b[64];
    snprintf(a, sizeof a, "/tmp/fsc_test_pipe_%d_a.safetensors", (int)getpid());
    snprintf(b, sizeof b, "/tmp/fsc_test_pipe_%d_b.safetensors", (int)getpid());
    run p = make(2, 2, FSC_PAR_FSDP, 2, 1);
    p.save = a;
    run ref = reference(&p);
    ref.save = b;
    train(&ref);
    train(&p);
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    assert_non_null(fa);
    assert_non_null(fb);
    int ca, cb;
    long n = 0;
    do {
        ca = fgetc(fa), cb = fgetc(fb), n++;
        if (ca != cb) fail_msg("saved weights differ at byte %ld", n - 1);
    } while (ca != EOF);
    assert_true(n > 1000);
    fclose(fa);
    fclose(fb);
    run q = make(2, 2, FSC_PAR_DDP, 2, 1);
    q.load = a;
    q.po.schedule = FSC_SCHED_1F1B;
    run qref = reference(&q);
    train(&q);
    assert_same(&qref, &q, "after loading weights");
    assert_true(memcmp(&q.loss[0][0], &ref.loss[0][0], sizeof(double)) != 0); /* it did start elsewhere */
    free(q.params);
    free(qref.params);
    unlink(a);
    unlink(b);
    free(p.params);
    free(ref.params);
}

/* Interleaved stages (2 chunks per rank, dp 2): the weights file saved from them is DDP's byte for byte, and
 * interleaved stages that load it train as DDP loading it. */
static void test_pipe_interleaved_weights(void **state) {
    (void)state;
    char a[64], b[64];
    snprintf(a, sizeof a, "/tmp/fsc_test_pipe_%d_ia.safetensors", (int)getpid());
    snprintf(b, sizeof b, "/tmp/fsc_test_pipe_%d_ib.safetensors", (int)getpid());
    run p = make(2, 2, FSC_PAR_DDP, 2, 1);
    p.cfg.layers = 8;
    p.po.prefetch = 1;
    p.po.schedule = FSC_SCHED_INTERLEAVED;
    p.po.virtual_stages = 2;
    p.save = a;
    run ref = reference(&p);
    ref.save = b;
    train(&ref);
    train(&p);
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    assert_non_null(fa);
    assert_non_null(fb);
    int ca, cb;
    long n = 0;
    do {
        ca = fgetc(fa), cb = fgetc(fb), n++;
        if (ca != cb) fail_msg("weights saved from interleaved stages differ from DDP's at byte %ld", n - 1);
    } while (ca != EOF);
    assert_true(n > 1000);
    fclose(fa);
    fclose(fb);
    run q = p;
    q.save = NULL;
    q.params = NULL;
    q.load = a;
    run qref = reference(&q);
    train(&q);
    assert_same(&qref, &q, "interleaved after loading weights");
    assert_true(memcmp(&q.loss[0][0], &ref.loss[0][0], sizeof(double)) != 0); /* it did start elsewhere */
    free(q.params);
    free(qref.params);
    unlink(a);
    unlink(b);
    free(p.params);
    free(ref.params);
}

static fsc_status create_fn(fsc_rank *rk, void *arg) {
    run *r = arg;
    fsc_engine *e = NULL;
    fsc_status s = fsc_engine_create(rk, &r->cfg, &r->po, &r->oc, 1, &e);
    fsc_engine_free(e);
    return s;
}

static void expect_error(run *r, const char *needle) {
    fsc_cluster_opts co = { .world = r->world, .device = "cpu", .timeout_s = 30 };
    assert_err(fsc_cluster_run(&co, create_fn, r), FSC_ERR_INVALID, needle);
}

static void test_pipe_bad_options(void **state) {
    (void)state;
    static const int sum4[] = { 2, 2 }, empty[] = { 0, 5 }, three[] = { 1, 1, 3 };
    run r = make(1, 2, FSC_PAR_DDP, 2, 1);
    r.po.balance = sum4;
    expect_error(&r, "balance sums to 4 but the model has 5 blocks");
    r.po.balance = empty;
    expect_error(&r, "stage 0 would have no block");
    r = make(1, 6, FSC_PAR_DDP, 2, 1);
    expect_error(&r, "6 pipeline stages but the model has 5 blocks");
    r = make(1, 2, FSC_PAR_DDP, 2, 1);
    r.world = 3;
    expect_error(&r, "world of 3 ranks does not split into 2 pipeline stages");
    r = make(1, 2, FSC_PAR_DDP, 2, 1);
    r.po.no_sync = 0;
    expect_error(&r, "set no_sync");
    r.po.no_sync = 1;
    r.po.schedule = (fsc_pipe_schedule)7;
    expect_error(&r, "unknown pipeline schedule");
    r = make(1, 1, FSC_PAR_DDP, 2, 1);
    r.po.balance = three;
    expect_error(&r, "pp is 1");
    r = make(1, 2, FSC_PAR_DDP, 2, 1);
    r.po.pp = -2;
    expect_error(&r, "must be >= 1");
    r = make(1, 4, FSC_PAR_DDP, 6, 1); /* interleaved: micro-batches in groups of the stages */
    r.cfg.layers = 8;
    r.po.prefetch = 1;
    r.po.schedule = FSC_SCHED_INTERLEAVED;
    r.po.virtual_stages = 2;
    expect_error(&r, "micro-batches (accum 6) to be a multiple of the 4 pipeline stages");
    r.po.accum = 4;
    r.batch = 4;
    r.po.virtual_stages = 3;
    expect_error(&r, "4 pipeline stages x 3 virtual stages = 12 chunks but the model has 8 blocks");
    r.po.virtual_stages = 2147483647; /* no overflow in the count */
    expect_error(&r, "4 pipeline stages x 2147483647 virtual stages = 8589934588 chunks but the model has 8 blocks");
    r.po.virtual_stages = 2;
    r.po.schedule = FSC_SCHED_1F1B;
    expect_error(&r, "virtual_stages 2 needs the interleaved schedule");
    r.po.schedule = FSC_SCHED_INTERLEAVED;
    r.po.virtual_stages = -1;
    expect_error(&r, "virtual_stages (chunks per pipeline rank) must be >= 1");
    r = make(1, 1, FSC_PAR_DDP, 2, 1);
    r.po.virtual_stages = 2;
    expect_error(&r, "virtual_stages 2 but pp is 1");
    r = make(1, 2, FSC_PAR_DDP, 2, 1);
    r.po.schedule = FSC_SCHED_INTERLEAVED;
    r.po.virtual_stages = 2;
    fsc_cluster_opts co = { .world = r.world, .device = "cpu", .timeout_s = 30 };
    r.po.prefetch = 0;
    assert_err(fsc_cluster_run(&co, create_fn, &r), FSC_ERR_UNSUPPORTED,
               "interleaved schedule with 2 chunks per rank: stages on several chunks need prefetch 1");
    r = make(1, 2, FSC_PAR_DDP, 2, 1);
    r.po.schedule = FSC_SCHED_ZB_H1;
    r.po.virtual_stages = 2;
    r.cfg.layers = 8;
    expect_error(&r, "virtual_stages 2 needs the interleaved schedule");

    const fsc_model c = { .n_layers = five_blocks().layers + 2 }; /* parse reads only the layer count */
    int out[4];
    assert_ok(fsc_balance_parse("1,3,1", &c, 3, out));
    assert_int_equal(out[1], 3);
    assert_err(fsc_balance_parse("2,2,2", &c, 3, out), FSC_ERR_INVALID, "balance sums to 6 but the model has 5");
    assert_err(fsc_balance_parse("2,3", &c, 3, out), FSC_ERR_INVALID, "has 2 entries but there are 3");
    assert_err(fsc_balance_parse("2,3,0,0", &c, 3, out), FSC_ERR_INVALID, "has 4 entries but there are 3");
    assert_err(fsc_balance_parse("2,x,1", &c, 3, out), FSC_ERR_INVALID, "comma-separated");
    assert_err(fsc_balance_parse("5,0", &c, 2, out), FSC_ERR_INVALID, "stage 1 would have no block");
    assert_err(fsc_balance_parse("", &c, 2, out), FSC_ERR_INVALID, "empty");
    assert_err(fsc_balance_parse("2 3", &c, 1, out), FSC_ERR_INVALID, "comma-separated");
    const fsc_model two = { .n_layers = 2 };
    assert_err(fsc_balance_parse("1", &two, 1, out), FSC_ERR_INVALID, "at least 3 layers");
}

/* A model that declares one tensor of n[l] floats per layer and has no layer_cost: balance by size counts
 * its parameter bytes (it is never run). */
static fsc_status st_acts(void *ctx, const fsc_model_acts_opts *o, fsc_model_acts **out) {
    (void)ctx, (void)o, (void)out;
    return fsc_error(FSC_ERR_UNSUPPORTED, "not run");
}
static void st_free(void *ctx, fsc_model_acts *a) { (void)ctx, (void)a; }
static size_t st_bytes(void *ctx, const fsc_model_acts *a) { return (void)ctx, (void)a, 0; }
static fsc_status st_batch(void *ctx, fsc_model_acts *a, const void *i, const void *t) {
    return (void)ctx, (void)a, (void)i, (void)t, FSC_OK;
}
static float *st_stream(void *ctx, fsc_model_acts *a, fsc_stream w) { return (void)ctx, (void)a, (void)w, NULL; }
static size_t st_floats(void *ctx, int B) { return (void)ctx, (size_t)B; }
static fsc_status st_fwd(void *ctx, fsc_model_acts *a, const fsc_model_hooks *h, double *l) {
    return (void)ctx, (void)a, (void)h, (void)l, FSC_OK;
}
static fsc_status st_bwd(void *ctx, fsc_model_acts *a, const fsc_model_hooks *h, float d) {
    return (void)ctx, (void)a, (void)h, (void)d, FSC_OK;
}
static void st_init(void *ctx, uint64_t s, int i, size_t f, size_t n, float *o) {
    (void)ctx, (void)s, (void)i, (void)f, (void)n, (void)o;
}

/* Balances by size and by time: valid, and by size follows the costs (a large vocabulary weighs on the
 * last stage, which then runs fewer blocks; the optimum of a known case; a model without layer_cost by its
 * declared parameter bytes). */
static void test_pipe_balance_helpers(void **state) {
    (void)state;
    fsc_device *dev;
    assert_ok(fsc_device_create("cpu", &(fsc_device_opts){ .threads = 1 }, &dev));
    fsc_gpt_config c = { .layers = 8, .dim = 32, .heads = 2, .seq = 16, .vocab = 64 };
    fsc_model *m;
    int out[8];
    assert_ok(fsc_gpt_model_create(dev, &c, &m));
    assert_ok(fsc_balance_by_size(m, 4, 2, 4.0f, out));
    for (int s = 0; s < 4; s++) assert_int_equal(out[s], 2); /* small embedding and head: even */
    fsc_model_free(m);
    c.vocab = 4096;
    assert_ok(fsc_gpt_model_create(dev, &c, &m));
    assert_ok(fsc_balance_by_size(m, 4, 2, 4.0f, out));
    assert_ok(fsc_pipe_check_balance(out, 4, 8));
    assert_true(out[3] < 2 && out[0] < 2); /* wte weighs on both ends (the head's replica and logits) */
    assert_ok(fsc_balance_by_size(m, 1, 2, 4.0f, out));
    assert_int_equal(out[0], 8);
    assert_err(fsc_balance_by_size(m, 9, 2, 4.0f, out), FSC_ERR_INVALID, "9 pipeline stages for 8 blocks");
    fsc_model_free(m);

    /* no layer_cost: 6 layers of 10, 1, 1, 1, 7 and 10 floats (blocks 1, 1, 1, 7; the ends count with the first
     * and last stage): over 2 stages 10+1+1+1 | 7+10 (largest 17 floats) beats 10+1+1 | 1+7+10 (18) */
    static const size_t n[6] = { 10, 1, 1, 1, 7, 10 };
    fsc_param_info info[6];
    float *pp[6] = { 0 }, *gg[6] = { 0 };
    for (int l = 0; l < 6; l++) {
        info[l] = (fsc_param_info){ .ndim = 1, .shape = { (int64_t)n[l] }, .numel = n[l], .layer = l, .expert = -1 };
        snprintf(info[l].name, sizeof info[l].name, "t%d", l);
    }
    static const fsc_model_ops ops = { .acts_create = st_acts, .acts_free = st_free, .acts_bytes = st_bytes,
                                       .set_batch = st_batch, .stream = st_stream, .stream_floats = st_floats,
                                       .forward = st_fwd, .backward = st_bwd, .init_values = st_init };
    fsc_model sized = { .n_layers = 6, .n_tensors = 6, .info = info, .param = pp, .grad = gg,
                        .sample_input_bytes = 4, .sample_target_bytes = 4, .loss_terms = 1, .ops = &ops };
    int two[2];
    assert_ok(fsc_balance_by_size(&sized, 2, 1, 1.0f, two));
    assert_int_equal(two[0], 3); /* stage costs 4 x (10+1+1+1) = 52 and 4 x (7+10) = 68 */
    assert_int_equal(two[1], 1);
    assert_ok(fsc_balance_by_size(&sized, 2, 1, 0.0f, two)); /* nothing weighs: the greedy cut, as even */
    assert_ok(fsc_pipe_check_balance(two, 2, 4));

    c = (fsc_gpt_config){ .layers = 4, .dim = 16, .heads = 2, .seq = 8, .vocab = 32 };
    assert_ok(fsc_gpt_model_create(dev, &c, &m));
    assert_ok(fsc_balance_by_time(dev, m, 2, 1, 2, out));
    assert_ok(fsc_pipe_check_balance(out, 2, 4));
    assert_int_equal(fsc_device_current_bytes(dev, FSC_TAG_ACTS), 0); /* nothing left behind */
    assert_int_equal(fsc_device_current_bytes(dev, FSC_TAG_PARAMS), 0);
    assert_err(fsc_balance_by_time(dev, m, 2, 1, 0, out), FSC_ERR_INVALID, "repeats");
    fsc_model_free(m);
    /* a model of layers: the same call times any model */
    fsc_layer *ls[5];
    assert_ok(fsc_layer_linear(&(fsc_linear_opts){ .in = 4, .out = 8, .bias = 1 }, &ls[0]));
    assert_ok(fsc_layer_gelu(8, &ls[1]));
    assert_ok(fsc_layer_linear(&(fsc_linear_opts){ .in = 8, .out = 8, .bias = 1 }, &ls[2]));
    assert_ok(fsc_layer_linear(&(fsc_linear_opts){ .in = 8, .out = 2 }, &ls[3]));
    assert_ok(fsc_layer_mse(2, &ls[4]));
    fsc_seq_layer sl[5];
    static const char *const pre[5] = { "a.", "b.", "c.", "d.", "e." };
    for (int l = 0; l < 5; l++) sl[l] = (fsc_seq_layer){ .layer = ls[l], .prefix = pre[l] };
    assert_ok(fsc_seq_model_create(dev, sl, 5, &m));
    assert_ok(fsc_balance_by_time(dev, m, 3, 2, 1, out));
    assert_ok(fsc_pipe_check_balance(out, 3, 3));
    assert_int_equal(out[0], 1);
    fsc_model_free(m);
    fsc_device_free(dev);
}

/* The exact reduction (reduce_exact, exact.c) inside the stages of interleaved (2 chunks a rank), zb-h1 and zbv:
 * every micro-batch's gradient of each chunk is a term of its own, reduced at the end of that chunk's backward (B
 * and, with W actions, W: B's term holds the layers that run whole in B, W's the others). An 8-block GPT with its
 * tied wte, pp 2, 4 micro-batches, dp 1 and 2 with DDP inside, every pipeline checkpoint mode (zb-h1 in mode never
 * with prefetch 0), and pp 4 with 8 micro-batches. Oracle: DDP with the exact reduction over the same micro-batches (its units), bit for bit. */
static void test_pipe_exact_new_schedules(void **state) {
    (void)state;
    static const fsc_pipe_schedule scheds[] = { FSC_SCHED_1F1B, FSC_SCHED_INTERLEAVED, FSC_SCHED_ZB_H1, FSC_SCHED_ZBV };
    static const char *const sname[] = { "1f1b", "interleaved", "zb-h1", "zbv" };
    static const struct { int dp, pp, m; } cases[] = { { 1, 2, 4 }, { 2, 2, 4 }, { 1, 4, 8 } };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        run ref;
        memset(&ref, 0, sizeof ref);
        for (int sc = 0; sc < 4; sc++)
            for (int ck = 0; ck < 3; ck++) {
                if (cases[c].pp == 4 && ck != 1) continue; /* pp 4: the default mode only */
                run p = make(cases[c].dp, cases[c].pp, FSC_PAR_DDP, cases[c].m, 1);
                p.cfg.layers = 8;
                p.steps = 3;
                p.po.reduce_exact = 1;
                p.po.prefetch = !(scheds[sc] == FSC_SCHED_ZB_H1 && ck == 2); /* zb-h1, never: synchronous reductions */
                p.po.schedule = scheds[sc];
                p.po.virtual_stages = scheds[sc] == FSC_SCHED_INTERLEAVED ? 2 : 0;
                p.po.pipe_checkpoint = (fsc_pipe_checkpoint)ck;
                if (!ref.params) ref = reference(&p);
                train(&p);
                char what[128];
                snprintf(what, sizeof what, "reduce exact, %s, dp %d x pp %d, %d micro-batches, checkpoint %s",
                         sname[sc], cases[c].dp, cases[c].pp, cases[c].m, ckpt_name[ck]);
                assert_same(&ref, &p, what);
                free(p.params);
            }
        free(ref.params);
    }
}

/* The exact reduction (reduce_exact) with ZeRO-1/2 and FSDP inside the stages of 1f1b, interleaved (2 chunks a
 * rank), zb-h1 and zbv: every backward (and W) of one chunk is a term of its own, so a ZeRO bucket holds one
 * chunk's tensors and an FSDP unit used by several of a rank's chunks (the root under a V; every block under wrap
 * model) reduces at the end of each of those chunks' backward. An 8-block GPT with its tied wte, pp 2, 4
 * micro-batches, dp 2 (hybrid_shard: dp 4, shard groups of 2), every sharding strategy, ZeRO-2 with buckets of
 * about a block, every pipeline checkpoint mode; ZeRO-1 and FSDP full_shard at dp 2 x pp 4 with 8 micro-batches.
 * Oracle: DDP with the exact reduction over the same micro-batches without a pipeline, bit for bit. */
static void test_pipe_exact_sharded(void **state) {
    (void)state;
    static const struct {
        fsc_parallel_kind kind;
        fsc_shard_strategy sh;
        fsc_wrap_policy wrap;
        size_t bucket;
        int dp;
        const char *what;
    } kinds[] = {
        { FSC_PAR_ZERO1, 0, 0, 0, 2, "zero1" },
        { FSC_PAR_ZERO2, 0, 0, 0, 2, "zero2" },
        { FSC_PAR_ZERO2, 0, 0, 4096, 2, "zero2 with 4 KiB buckets" },
        { FSC_PAR_FSDP, FSC_SHARD_FULL, FSC_WRAP_BLOCK, 0, 2, "fsdp full_shard" },
        { FSC_PAR_FSDP, FSC_SHARD_GRAD_OP, FSC_WRAP_BLOCK, 0, 2, "fsdp shard_grad_op" },
        { FSC_PAR_FSDP, FSC_SHARD_NONE, FSC_WRAP_BLOCK, 0, 2, "fsdp no_shard" },
        { FSC_PAR_FSDP, FSC_SHARD_HYBRID, FSC_WRAP_BLOCK, 0, 4, "fsdp hybrid_shard" },
        { FSC_PAR_FSDP, FSC_SHARD_FULL, FSC_WRAP_MODEL, 0, 2, "fsdp full_shard, wrap model" },
    };
    static const fsc_pipe_schedule scheds[] = { FSC_SCHED_1F1B, FSC_SCHED_INTERLEAVED, FSC_SCHED_ZB_H1, FSC_SCHED_ZBV };
    static const char *const sname[] = { "1f1b", "interleaved", "zb-h1", "zbv" };
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        run ref;
        memset(&ref, 0, sizeof ref);
        for (int sc = 0; sc < 4; sc++)
            for (int ck = 0; ck < 3; ck++) {
                run p = make(kinds[k].dp, 2, kinds[k].kind, 4, 1);
                p.cfg.layers = 8;
                p.steps = 2;
                p.po.reduce_exact = 1;
                p.po.prefetch = !(scheds[sc] == FSC_SCHED_ZB_H1 && ck == 2); /* zb-h1, never: synchronous reductions */
                p.po.shard = kinds[k].sh;
                p.po.wrap = kinds[k].wrap;
                p.po.bucket_bytes = kinds[k].bucket;
                p.po.schedule = scheds[sc];
                p.po.virtual_stages = scheds[sc] == FSC_SCHED_INTERLEAVED ? 2 : 0;
                p.po.pipe_checkpoint = (fsc_pipe_checkpoint)ck;
                if (!ref.params) ref = reference(&p);
                char what[160];
                snprintf(what, sizeof what, "reduce exact, dp %d x pp 2, %s inside %s stages, checkpoint %s",
                         kinds[k].dp, kinds[k].what, sname[sc], ckpt_name[ck]);
                run_against(&ref, &p, what);
            }
        free(ref.params);
    }
    /* pp 4 with 8 micro-batches (interleaved and zbv: a block a chunk), the default checkpoint mode */
    static const fsc_parallel_kind deep[] = { FSC_PAR_ZERO1, FSC_PAR_FSDP };
    for (int k = 0; k < 2; k++) {
        run ref;
        memset(&ref, 0, sizeof ref);
        for (int sc = 0; sc < 4; sc++) {
            run p = make(2, 4, deep[k], 8, 1);
            p.cfg.layers = 8;
            p.steps = 2;
            p.po.reduce_exact = 1;
            p.po.prefetch = 1;
            p.po.shard = FSC_SHARD_FULL;
            p.po.schedule = scheds[sc];
            p.po.virtual_stages = scheds[sc] == FSC_SCHED_INTERLEAVED ? 2 : 0;
            if (!ref.params) ref = reference(&p);
            char what[160];
            snprintf(what, sizeof what, "reduce exact, dp 2 x pp 4, %s inside %s stages",
                     k ? "fsdp full_shard" : "zero1", sname[sc]);
            run_against(&ref, &p, what);
        }
        free(ref.params);
    }
}

int main(void) {
    if (getenv("FSC_TEST_FILTER")) cmocka_set_test_filter(getenv("FSC_TEST_FILTER")); /* one test: its name */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pipe_equals_ddp),
        cmocka_unit_test(test_pipe_interleaved_equals_ddp),
        cmocka_unit_test(test_pipe_zb_h1_equals_ddp),
        cmocka_unit_test(test_pipe_zb_h1_memory),
        cmocka_unit_test(test_pipe_zb_h1_head_memory),
        cmocka_unit_test(test_pipe_chunk_pools),
        cmocka_unit_test(test_pipe_zbv_equals_ddp),
        cmocka_unit_test(test_pipe_zbv_records_remade),
        cmocka_unit_test(test_pipe_exact_new_schedules),
        cmocka_unit_test(test_pipe_exact_sharded),
        cmocka_unit_test(test_pipe_interleaved_layer_checkpoint),
        cmocka_unit_test(test_pipe_split_layer_checkpoint),
        cmocka_unit_test(test_pipe_sync_sends),
        cmocka_unit_test(test_pipe_comm_without_start),
        cmocka_unit_test(test_pipe_custom_schedule),
        cmocka_unit_test(test_pipe_custom_v),
        cmocka_unit_test(test_pipe_interleaved_weights),
        cmocka_unit_test(test_pipe_prefetch_receives),
        cmocka_unit_test(test_pipe_prefetch_every_balance),
        cmocka_unit_test(test_pipe_dp_x_pp),
        cmocka_unit_test(test_pipe_strategies_in_new_schedules),
        cmocka_unit_test(test_pipe_low_precision),
        cmocka_unit_test(test_pipe_in_flight),
        cmocka_unit_test(test_pipe_send_ring),
        cmocka_unit_test(test_pipe_checkpoint_memory),
        cmocka_unit_test(test_pipe_messages_and_stats),
        cmocka_unit_test(test_pipe_save_weights),
        cmocka_unit_test(test_pipe_bad_options),
        cmocka_unit_test(test_pipe_balance_helpers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
