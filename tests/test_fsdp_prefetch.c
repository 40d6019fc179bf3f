/* Overlap of communication with computation (po.prefetch, docs/overlap.md): FSDP's all-gather prefetch and
 * overlapped reduce-scatter, DDP's and ZeRO's bucket reductions during backward.
 * Oracles: every strategy (ddp, zero1, zero2, fsdp full_shard with and without reshard, shard_grad_op,
 * no_shard, hybrid_shard) with prefetch 1 gives the losses and parameters of the same run with prefetch 0
 * bit for bit, and of DDP; with gradient accumulation reducing every micro-batch and with bf16 too; on a
 * simulated network (so collectives really run while layers compute) as without. Hybrid sharding (whose
 * reduction is a reduce-scatter over the world then an all-gather across replicas, both overlapped) on 4 and 8
 * ranks with groups of 2 and 4, with accumulation, no_sync and offload all. Prefetch moves no extra
 * bytes (same calls and bytes per operation, but for full_shard's one all-gather less per micro-batch: the
 * last unit stays gathered for backward) and the ledger's peak parameter memory grows by at most
 * (limit - 1) gathered blocks. Pipelines whose stages send asynchronously and post their receives ahead give
 * the bits of synchronous sends and receives, on a network too, for 2 to 4 stages and 1 to 5 micro-batches,
 * with one receive buffer per direction in the ledger. */
#include "partest.h"

/* pt_train with a network of lat_us per link: the collectives take time, so they overlap for real */
static void train_net(pt_run *run, double lat_us) {
    size_t P = fsc_gpt_num_params(&run->cfg);
    free(run->params);
    run->params = calloc(P, sizeof(float));
    fsc_cluster_opts co = {.world = run->world, .device = "cpu", .timeout_s = 60, .sim_latency_us = lat_us};
    assert_ok(fsc_cluster_run(&co, pt_rank_fn, run));
}

typedef struct {
    fsc_parallel_kind kind;
    fsc_shard_strategy sh;
    int reshard;
    int hybrid;
    const char *what;
} pf_case;

static const pf_case cases[] = {
    {FSC_PAR_DDP, 0, -1, 0, "ddp"},
    {FSC_PAR_ZERO1, 0, -1, 0, "zero1"},
    {FSC_PAR_ZERO2, 0, -1, 0, "zero2"},
    {FSC_PAR_FSDP, FSC_SHARD_FULL, 1, 0, "fsdp full_shard"},
    {FSC_PAR_FSDP, FSC_SHARD_FULL, 0, 0, "fsdp full_shard, no reshard"},
    {FSC_PAR_FSDP, FSC_SHARD_GRAD_OP, -1, 0, "fsdp shard_grad_op"},
    {FSC_PAR_FSDP, FSC_SHARD_NONE, -1, 0, "fsdp no_shard"},
    {FSC_PAR_FSDP, FSC_SHARD_HYBRID, -1, 2, "fsdp hybrid_shard"},
};

static pt_run make(int N, const pf_case *c, int prefetch, int accum, fsc_dtype dt) {
    pt_run r = pt_make(N, c->kind);
    r.cfg.layers = 4; /* several units, so that prefetching has something ahead */
    r.po.shard = c->sh;
    r.po.reshard_after_forward = c->reshard;
    r.po.hybrid_group = c->hybrid;
    r.po.prefetch = prefetch;
    r.po.accum = accum;
    r.po.no_sync = 0; /* with accum > 1: every micro-batch reduces (accumulating) */
    r.po.param_dtype = r.po.reduce_dtype = dt;
    r.po.bucket_bytes = 2048; /* ddp/zero: several buckets */
    return r;
}

/* The same calls and bytes (rank 0): prefetch moves nothing more (but full_shard and hybrid keep the last unit
 * gathered for backward: one all-gather less per micro-batch). */
static void check_same_traffic(const pt_run *a, const pt_run *b, const pf_case *c, int accum, const char *what) {
    for (int op = 0; op < FSC_OP_COUNT; op++) {
        int fewer = op == FSC_OP_ALL_GATHER && c->kind == FSC_PAR_FSDP &&
                    (c->sh == FSC_SHARD_FULL || c->sh == FSC_SHARD_HYBRID) && c->reshard != 0;
        if (fewer && b->comm[0].calls[op] == a->comm[0].calls[op] - (unsigned long long)accum) continue;
        if (a->comm[0].calls[op] != b->comm[0].calls[op] || a->comm[0].bytes[op] != b->comm[0].bytes[op])
            fail_msg("%s: %s calls %llu vs %llu", what, fsc_comm_op_name((fsc_comm_op)op),
                     (unsigned long long)a->comm[0].calls[op], (unsigned long long)b->comm[0].calls[op]);
    }
}

static void check_all(int N, int accum, fsc_dtype dt, double lat_us) {
    pt_run ddp = make(N, &cases[0], 0, accum, dt);
    train_net(&ddp, 0);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        if (cases[k].hybrid && N < 4) continue;
        pt_run a = make(N, &cases[k], 0, accum, dt), b = make(N, &cases[k], 1, accum, dt);
        train_net(&a, 0);
        train_net(&b, lat_us);
        char what[160];
        snprintf(what, sizeof what, "%s, world %d, accum %d, %s: prefetch 1 against 0", cases[k].what, N, accum,
                 fsc_dtype_name(dt));
        pt_assert_same(&a, &b, what);
        snprintf(what, sizeof what, "%s, world %d, accum %d, %s with prefetch: against ddp", cases[k].what, N, accum,
                 fsc_dtype_name(dt));
        pt_assert_same(&ddp, &b, what);
        check_same_traffic(&a, &b, &cases[k], accum, what);
        free(a.params);
        free(b.params);
    }
    free(ddp.params);
}

static void test_prefetch_same_bits_f32(void **state) {
    (void)state;
    check_all(2, 1, FSC_F32, 0);
    check_all(4, 1, FSC_F32, 0);
    check_all(3, 2, FSC_F32, 0);
}

/* accumulation over micro-batches that each reduce, bf16 compute and reduction */
static void test_prefetch_same_bits_accum_bf16(void **state) {
    (void)state;
    check_all(4, 2, FSC_F32, 0);
    check_all(2, 1, FSC_BF16, 0);
    check_all(4, 2, FSC_BF16, 0);
}

/* with a network (300 us per link and step): the collectives run on the progress threads while the rank
 * computes the next layers */
static void test_prefetch_same_bits_on_network(void **state) {
    (void)state;
    check_all(4, 2, FSC_F32, 300);
}

/* Hybrid sharding (the reduce-scatter over the world, then the all-gather across replicas, both during the
 * earlier units' backward): prefetch 1 equals prefetch 0 and DDP bit for bit on 4 ranks (groups of 2) and 8
 * (groups of 2 and 4), with and without a network, with accumulation reducing every micro-batch and under
 * no_sync, with offload all, and with 3 units in flight. */
static void check_hybrid(int N, int G, int accum, int no_sync, fsc_offload_mode off, int limit, double lat_us) {
    const pf_case c = {FSC_PAR_FSDP, FSC_SHARD_HYBRID, -1, G, "fsdp hybrid_shard"};
    pt_run ddp = make(N, &cases[0], 0, accum, FSC_F32), a = make(N, &c, 0, accum, FSC_F32),
           b = make(N, &c, 1, accum, FSC_F32);
    pt_run *all[] = {&ddp, &a, &b};
    for (int k = 0; k < 3; k++) {
        all[k]->batch = 48; /* 8 ranks x 2 micro-batches x 3 */
        all[k]->po.no_sync = no_sync;
    }
    b.po.offload = off;
    b.po.prefetch_limit = limit;
    train_net(&ddp, 0);
    train_net(&a, 0);
    train_net(&b, lat_us);
    char what[200];
    snprintf(what, sizeof what, "hybrid_shard %d, world %d, accum %d%s, offload %s, limit %d, latency %g us", G, N,
             accum, no_sync ? " (no_sync)" : "", fsc_offload_mode_name(off), limit, lat_us);
    pt_assert_same(&a, &b, what);
    pt_assert_same(&ddp, &b, what);
    check_same_traffic(&a, &b, &c, accum, what);
    for (int k = 0; k < 3; k++) free(all[k]->params);
}

static void test_prefetch_hybrid_same_bits(void **state) {
    (void)state;
    const int groups[][2] = {{4, 2}, {8, 2}, {8, 4}};
    for (int k = 0; k < 3; k++) {
        const int N = groups[k][0], G = groups[k][1];
        check_hybrid(N, G, 1, 0, FSC_OFFLOAD_NONE, 2, 0);
        check_hybrid(N, G, 1, 0, FSC_OFFLOAD_NONE, 2, 300);
        check_hybrid(N, G, 2, 0, FSC_OFFLOAD_NONE, 2, 300);
        check_hybrid(N, G, 2, 1, FSC_OFFLOAD_NONE, 2, 0);
        check_hybrid(N, G, 2, 0, FSC_OFFLOAD_ALL, 2, 300);
        check_hybrid(N, G, 2, 0, FSC_OFFLOAD_NONE, 3, 200);
    }
}

/* Pipelines (2 stages x 2 data ranks, 4 micro-batches, GPipe and 1F1B, each checkpoint mode): the stage
 * outputs and the input gradients are sent while the stage goes on; with fsdp and ddp inside, on a network,
 * prefetch 1 equals 0. */
static void test_prefetch_pipeline_same_bits(void **state) {
    (void)state;
    const fsc_pipe_checkpoint modes[] = {FSC_PIPE_CKPT_NEVER, FSC_PIPE_CKPT_EXCEPT_LAST, FSC_PIPE_CKPT_ALWAYS};
    const fsc_pipe_schedule scheds[] = {FSC_SCHED_GPIPE, FSC_SCHED_1F1B};
    for (int c = 0; c < 2; c++) {
        for (int m = 0; m < 3 * 2; m++) {
            const pf_case *k = &cases[c == 0 ? 0 : 3];
            pt_run a = make(4, k, 0, 4, FSC_F32), b = make(4, k, 1, 4, FSC_F32);
            a.po.pp = b.po.pp = 2;
            a.po.no_sync = b.po.no_sync = 1; /* pipelines reduce once per step */
            a.po.pipe_checkpoint = b.po.pipe_checkpoint = modes[m % 3];
            a.po.schedule = b.po.schedule = scheds[m / 3];
            train_net(&a, 0);
            train_net(&b, 200);
            char what[96];
            snprintf(what, sizeof what, "pipeline with %s inside, checkpoint mode %d, schedule %d", k->what, m % 3,
                     m / 3);
            pt_assert_same(&a, &b, what);
            free(a.params);
            free(b.params);
        }
    }
}

/* Pipelines whose receives are posted ahead (the next input, the next output gradient: docs/overlap.md) on a
 * network with latency and bandwidth, so that messages arrive late and the stages run at different paces:
 * 3 stages (uneven balance) and 4, 1, 2, 3 and 5 micro-batches of 2 sequences, GPipe and 1F1B, every
 * checkpoint mode; checkpointed outputs leave from a ring of send buffers (a ring of 2, the default limit, on 3
 * stages, of 1 on 4, reused by every next checkpointed micro-batch); prefetch 1 equals prefetch 0 bit for bit,
 * and (ledger) holds exactly one receive buffer per direction more activation memory (one on the first and the
 * last stage, two on the others), and on every stage but the last min(limit, checkpointed micro-batches) send
 * buffers. */
static void test_prefetch_pipeline_receives_on_network(void **state) {
    (void)state;
    static const int b3[] = {1, 2, 1};
    const struct { int pp; const int *bal; } shapes[] = {{3, b3}, {4, NULL}};
    const int Ms[] = {1, 2, 3, 5};
    for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++) {
        for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++) {
            for (int m = 0; m < 3 * 2; m++) {
                const int P = shapes[sh].pp, M = Ms[mi];
                pt_run a = make(P, &cases[0], 0, M, FSC_F32), b = make(P, &cases[0], 1, M, FSC_F32);
                a.po.pp = b.po.pp = P;
                a.po.balance = b.po.balance = shapes[sh].bal;
                a.po.no_sync = b.po.no_sync = 1;
                a.po.pipe_checkpoint = b.po.pipe_checkpoint = (fsc_pipe_checkpoint)(m % 3);
                a.po.schedule = b.po.schedule = (fsc_pipe_schedule)(m / 3);
                const int limit = P == 4 ? 1 : 2;
                b.po.prefetch_limit = P == 4 ? 1 : 0; /* 0: 2 */
                a.batch = b.batch = 2 * M;
                a.steps = b.steps = 2;
                train_net(&a, 0);
                size_t Pn = fsc_gpt_num_params(&b.cfg);
                b.params = calloc(Pn, sizeof(float));
                fsc_cluster_opts co = {.world = P, .device = "cpu", .timeout_s = 60, .sim_latency_us = 150,
                                       .sim_bandwidth_gbps = 0.2};
                assert_ok(fsc_cluster_run(&co, pt_rank_fn, &b));
                char what[128];
                snprintf(what, sizeof what, "pipeline pp %d, %d micro-batches, checkpoint mode %d, schedule %d", P, M,
                         m % 3, m / 3);
                pt_assert_same(&a, &b, what);
                const size_t buf = 2 * (size_t)a.cfg.seq * a.cfg.dim * sizeof(float);
                const fsc_pipe_checkpoint ck = (fsc_pipe_checkpoint)(m % 3);
                const int nck = ck == FSC_PIPE_CKPT_ALWAYS ? M : ck == FSC_PIPE_CKPT_EXCEPT_LAST ? M - 1 : 0;
                const int ring = nck < limit ? nck : limit;
                for (int r = 0; r < P; r++) {
                    const size_t want = a.peak[r][FSC_TAG_ACTS] + buf * (size_t)((r > 0) + (r < P - 1)) +
                                        buf * (size_t)(r < P - 1 ? ring : 0);
                    if (b.peak[r][FSC_TAG_ACTS] != want)
                        fail_msg("%s: rank %d holds %zu activation bytes at peak, prefetch 0 %zu + buffers %zu", what,
                                 r, b.peak[r][FSC_TAG_ACTS], a.peak[r][FSC_TAG_ACTS], want - a.peak[r][FSC_TAG_ACTS]);
                }
                free(a.params);
                free(b.params);
            }
        }
    }
}

/* A tied tensor sent asynchronously (docs/overlap.md): a vocabulary of 4096 makes the wte the pipeline's
 * largest message, so on a slow network (0.05 GB/s: about 8 ms for the wte, 30 us for a boundary message) the
 * values reach the last stage well after micro-batch 0's input, and each micro-batch's tied gradient reaches
 * stage 0 late too: the head must wait for the values where it reads them, and stage 0 for each gradient
 * before its backward. 2 and 3 stages, GPipe and 1F1B, checkpoint never and except_last, 3 steps (a stale wte
 * replica would show from the second). Oracle: prefetch 1 on the network equals prefetch 0 bit for bit.
 * The simulated network books both ranks' links for a send, so the values (sent before stage 0's first output)
 * reach the last stage before micro-batch 0's input: a missing wait for them shows only when the receiving
 * progress thread runs late (it did in the TSan build: losses differ from step 1), not on every run. */
static void test_prefetch_pipeline_tied_on_network(void **state) {
    (void)state;
    for (int P = 2; P <= 3; P++) {
        for (int m = 0; m < 2 * 2; m++) {
            const int M = 3;
            pt_run a = make(P, &cases[0], 0, M, FSC_F32), b = make(P, &cases[0], 1, M, FSC_F32);
            a.cfg.vocab = b.cfg.vocab = 4096;
            a.cfg.layers = b.cfg.layers = 3;
            a.po.pp = b.po.pp = P;
            a.po.no_sync = b.po.no_sync = 1;
            a.po.pipe_checkpoint = b.po.pipe_checkpoint = m < 2 ? FSC_PIPE_CKPT_NEVER : FSC_PIPE_CKPT_EXCEPT_LAST;
            a.po.schedule = b.po.schedule = (fsc_pipe_schedule)(m % 2);
            a.batch = b.batch = 2 * M;
            train_net(&a, 0);
            b.params = calloc(fsc_gpt_num_params(&b.cfg), sizeof(float));
            fsc_cluster_opts co = {.world = P, .device = "cpu", .timeout_s = 60, .sim_latency_us = 20,
                                   .sim_bandwidth_gbps = 0.05};
            assert_ok(fsc_cluster_run(&co, pt_rank_fn, &b));
            char what[128];
            snprintf(what, sizeof what, "tied wte, pp %d, checkpoint %s, schedule %d", P,
                     m < 2 ? "never" : "except_last", m % 2);
            pt_assert_same(&a, &b, what);
            free(a.params);
            free(b.params);
        }
    }
}

/* The ledger's peak parameter bytes: prefetching keeps at most limit - 1 more blocks gathered. */
static void test_prefetch_memory_is_bounded(void **state) {
    (void)state;
    const int N = 4;
    pt_run base = make(N, &cases[3], 0, 1, FSC_F32);
    train_net(&base, 0);
    size_t block = 0; /* padded elements of one block's unit */
    fsc_param_info pi;
    for (int i = 0; i < fsc_gpt_num_tensors(&base.cfg); i++) {
        assert_ok(fsc_gpt_param_info(&base.cfg, i, &pi));
        if (pi.layer == 1) block += pi.numel;
    }
    block = (block + N - 1) / N * N;
    for (int limit = 2; limit <= 3; limit++) {
        pt_run p = make(N, &cases[3], 1, 1, FSC_F32);
        p.po.prefetch_limit = limit;
        train_net(&p, 200);
        pt_assert_same(&base, &p, "prefetch with a limit");
        for (int r = 0; r < N; r++) {
            size_t a = base.peak[r][FSC_TAG_PARAMS], b = p.peak[r][FSC_TAG_PARAMS];
            size_t bound = a + (size_t)(limit - 1) * block * sizeof(float);
            if (b > bound) fail_msg("rank %d, limit %d: peak params %zu > %zu + %d blocks", r, limit, b, a, limit - 1);
            /* and it did prefetch: one more block gathered at the peak than without */
            if (b < a + block * sizeof(float)) fail_msg("rank %d, limit %d: peak params %zu, not above %zu + a block", r, limit, b, a);
        }
        free(p.params);
    }
    free(base.params);
}

/* With a bf16 reduction a reduction in flight reads its bf16 copy (ledger comm) only: the f32 gradient it was
 * handed (FSDP's unit, ZeRO-2's bucket) is released once converted, so the peak gradient bytes are prefetch 0's
 * (they held limit - 1 more units' or buckets' f32 gradients), every rank, limits 2 and 3. */
static void test_prefetch_bf16_reduction_frees_gradients(void **state) {
    (void)state;
    const int N = 4;
    const int which[] = {2, 3, 7}; /* zero2, fsdp full_shard, hybrid_shard */
    for (size_t k = 0; k < sizeof which / sizeof which[0]; k++) {
        const pf_case *c = &cases[which[k]];
        pt_run a = make(N, c, 0, 1, FSC_BF16);
        train_net(&a, 0);
        for (int limit = 2; limit <= 3; limit++) {
            pt_run b = make(N, c, 1, 1, FSC_BF16);
            b.po.prefetch_limit = limit;
            train_net(&b, 0);
            char what[96];
            snprintf(what, sizeof what, "%s, bf16, limit %d", c->what, limit);
            pt_assert_same(&a, &b, what);
            for (int r = 0; r < N; r++)
                if (b.peak[r][FSC_TAG_GRADS] != a.peak[r][FSC_TAG_GRADS])
                    fail_msg("%s: rank %d peaks at %zu gradient bytes, prefetch 0 at %zu", what, r,
                             b.peak[r][FSC_TAG_GRADS], a.peak[r][FSC_TAG_GRADS]);
            free(b.params);
        }
        free(a.params);
    }
}

static void test_prefetch_options_checked(void **state) {
    (void)state;
    fsc_parallel_opts d = fsc_parallel_opts_default();
    assert_int_equal(d.prefetch, 1);
    assert_int_equal(d.prefetch_limit, 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefetch_same_bits_f32),
        cmocka_unit_test(test_prefetch_same_bits_accum_bf16),
        cmocka_unit_test(test_prefetch_same_bits_on_network),
        cmocka_unit_test(test_prefetch_hybrid_same_bits),
        cmocka_unit_test(test_prefetch_pipeline_same_bits),
        cmocka_unit_test(test_prefetch_pipeline_receives_on_network),
        cmocka_unit_test(test_prefetch_pipeline_tied_on_network),
        cmocka_unit_test(test_prefetch_memory_is_bounded),
        cmocka_unit_test(test_prefetch_bf16_reduction_frees_gradients),
        cmocka_unit_test(test_prefetch_options_checked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
