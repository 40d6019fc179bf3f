/* ZeRO-1 (OSS) and ZeRO-2 (sharded DDP) against DDP on the simulated cluster.
 * Oracle: DDP on the same world size with the same data and options. Both stages give bit-identical
 * losses and parameters on 1..8 ranks with AdamW and SGD (momentum, weight decay), clipping that clips,
 * accumulation with and without no_sync, bf16, and f16 with loss scaling (the same skipped steps on every
 * rank). Communication per step equals 2 x (N-1)/N x padded parameter bytes exactly, optimizer state per
 * rank is DDP's / N up to padding exactly, ZeRO-2 holds fewer gradient bytes than ZeRO-1 (ledger). Also
 * sync_from_rank0 and activation checkpointing; weight files and the checkpoint hooks (holdings, after_load).
 * A save whose write fails on rank 0 fails on every rank at once with the writer's message (savefail.h). */
#include <unistd.h>
#include "savefail.h"
#include "parallel/engine_impl.h"

static const fsc_parallel_kind kinds[] = { FSC_PAR_ZERO1, FSC_PAR_ZERO2 };

/* A run of zero1 or zero2; zero2 with one bucket per layer (small buckets) unless buckets is 0. */
static pt_run zero_run(int world, fsc_parallel_kind kind, size_t bucket_bytes) {
    pt_run r = pt_make(world, kind);
    r.po.bucket_bytes = bucket_bytes;
    r.batch = 4 * world; /* splits evenly on odd worlds too, and into 2 micro-batches */
    return r;
}

static pt_run ddp_run(int world) {
    pt_run r = pt_make(world, FSC_PAR_DDP);
    r.batch = 4 * world;
    return r;
}

/* Train ddp and both zero stages with the options set by cfg; assert bit equality. */
typedef void (*pt_config_fn)(pt_run *r);

static void check_against_ddp(int N, pt_config_fn cfg, const char *what, size_t bucket2) {
    pt_run ddp = ddp_run(N);
    if (cfg) cfg(&ddp);
    pt_train(&ddp);
    /* clipping, where on, must really happen for the test to cover it */
    if (ddp.po.clip > 0 && !(ddp.info[0].grad_norm > ddp.po.clip))
        fail_msg("%s, world %d: the gradient norm %g does not exceed the clip %g", what, N, ddp.info[0].grad_norm,
                 (double)ddp.po.clip);
    for (size_t k = 0; k < 2; k++) {
        pt_run z = zero_run(N, kinds[k], kinds[k] == FSC_PAR_ZERO2 ? bucket2 : 0);
        if (cfg) cfg(&z);
        z.po.kind = kinds[k];
        pt_train(&z);
        char msg[128];
        snprintf(msg, sizeof msg, "%s, %s, world %d", fsc_parallel_kind_name(kinds[k]), what, N);
        pt_assert_same(&ddp, &z, msg);
        free(z.params);
    }
    free(ddp.params);
}

static void test_zero_adamw_clip_worlds_1_to_8(void **state) {
    (void)state;
    for (int N = 1; N <= 8; N++) check_against_ddp(N, NULL, "adamw with clipping", 1);
    /* zero2 with the default bucket size (one bucket for this model) */
    check_against_ddp(3, NULL, "adamw, default buckets", 0);
}

static void sgd_cfg(pt_run *r) {
    r->oc = (fsc_optim_config){ .kind = FSC_OPT_SGD, .lr = 0.05f, .momentum = 0.9f, .weight_decay = 0.01f };
    r->steps = 4;
}
static void test_zero_sgd(void **state) {
    (void)state;
    const int worlds[] = { 2, 5, 8 };
    for (int i = 0; i < 3; i++) check_against_ddp(worlds[i], sgd_cfg, "sgd momentum weight decay", 1);
}

static void accum_cfg(pt_run *r) { r->po.accum = 2; }
static void accum_nosync_cfg(pt_run *r) {
    r->po.accum = 2;
    r->po.no_sync = 1;
}
static void test_zero_accumulation(void **state) {
    (void)state;
    for (int N = 2; N <= 3; N++) {
        check_against_ddp(N, accum_cfg, "accumulation, reduce every micro-batch", 1);
        check_against_ddp(N, accum_nosync_cfg, "accumulation with no_sync", 1);
    }
}

static void bf16_cfg(pt_run *r) { r->po.param_dtype = r->po.reduce_dtype = FSC_BF16; }
static void bf16_params_cfg(pt_run *r) { r->po.param_dtype = FSC_BF16; }
static void test_zero_bf16(void **state) {
    (void)state;
    for (int N = 2; N <= 3; N++) check_against_ddp(N, bf16_cfg, "bf16", 1);
    check_against_ddp(4, bf16_params_cfg, "bf16 parameters, f32 reduction", 1);
    /* bf16 really changes the results against f32 */
    pt_run a = ddp_run(2), b = ddp_run(2);
    bf16_cfg(&b);
    pt_train(&a);
    pt_train(&b);
    assert_true(memcmp(&a.loss[1], &b.loss[1], sizeof(double)) != 0);
    free(a.params);
    free(b.params);
}

/* f16 with dynamic loss scaling: a huge initial scale overflows; every rank skips the same steps as DDP. */
static void f16_cfg(pt_run *r) {
    r->po.param_dtype = r->po.reduce_dtype = FSC_F16;
    r->po.init_loss_scale = 16777216.0f;
    r->steps = 8;
}
static void test_zero_f16_loss_scaling(void **state) {
    (void)state;
    const int N = 3;
    pt_run ddp = ddp_run(N);
    f16_cfg(&ddp);
    pt_train(&ddp);
    for (size_t k = 0; k < 2; k++) {
        pt_run z = zero_run(N, kinds[k], 1);
        f16_cfg(&z);
        pt_train(&z);
        pt_assert_same(&ddp, &z, "f16");
        int skipped = 0;
        for (int s = 0; s < z.steps; s++) {
            for (int r = 1; r < N; r++) assert_int_equal(z.skipped[r][s], z.skipped[0][s]);
            assert_int_equal(z.skipped[0][s], ddp.skipped[0][s]);
            skipped += z.skipped[0][s];
        }
        assert_true(skipped >= 1);      /* the overflow was caught */
        assert_true(skipped < z.steps); /* and the scale came down far enough to train */
        free(z.params);
    }
    free(ddp.params);
}

static void sync_cfg(pt_run *r) { r->po.sync_from_rank0 = 1; }
static void recompute_cfg(pt_run *r) { r->po.checkpoint = 1; }
static void test_zero_sync_from_rank0_and_recompute(void **state) {
    (void)state;
    check_against_ddp(3, sync_cfg, "sync_from_rank0", 1);
    check_against_ddp(2, recompute_cfg, "activation checkpointing", 1);
}

/* Padded sizes: zero1 pads the whole vector to a multiple of N; zero2 with one-layer buckets pads each
 * layer (layer 0: wte and wpe; blocks; the head: ln_f). */
static size_t padded_zero1(const fsc_gpt_config *c, int N) {
    size_t P = fsc_gpt_num_params(c);
    return (P + (size_t)N - 1) / (size_t)N * (size_t)N;
}
static size_t padded_zero2_per_layer(const fsc_gpt_config *c, int N, size_t *max_bucket) {
    size_t per_layer[64] = { 0 };
    fsc_param_info pi;
    for (int i = 0; i < fsc_gpt_num_tensors(c); i++) {
        assert_ok(fsc_gpt_param_info(c, i, &pi));
        per_layer[pi.layer] += pi.numel;
    }
    size_t sum = 0, mx = 0;
    for (int l = 0; l <= c->layers + 1; l++) {
        size_t p = (per_layer[l] + (size_t)N - 1) / (size_t)N * (size_t)N;
        sum += p;
        if (p > mx) mx = p;
    }
    if (max_bucket) *max_bucket = mx;
    return sum;
}

/* Bytes per rank and step as a ring sends them: reduce-scatter (N-1)/N x Pp x reduce bytes, all-gather
 * (N-1)/N x Pp x parameter bytes, plus the loss all-gather (one double per rank) and the non-finite vote (one
 * float all-reduced); nothing else. */
static void test_zero_comm_volume(void **state) {
    (void)state;
    for (int N = 2; N <= 5; N++) {
        for (size_t k = 0; k < 2; k++) {
            for (int bf = 0; bf <= (N == 3); bf++) { /* bf16 halves both: reductions and gathers */
                pt_run z = zero_run(N, kinds[k], 1);
                z.po.clip = 0;
                if (bf) bf16_cfg(&z);
                z.steps = 1;
                pt_train(&z);
                size_t Pp = kinds[k] == FSC_PAR_ZERO1 ? padded_zero1(&z.cfg, N)
                                                      : padded_zero2_per_layer(&z.cfg, N, NULL);
                double f = (double)(N - 1) / N, es = bf ? 2.0 : 4.0;
                double loss_bytes = f * 32.0 * N; /* the loss, local and global batch, step count: 4 doubles per rank */
                for (int r = 0; r < N; r++) {
                    const fsc_comm_stats *st = &z.comm[r];
                    if (fabs(st->bytes[FSC_OP_REDUCE_SCATTER] - f * es * Pp) > 1e-6 ||
                        fabs(st->bytes[FSC_OP_ALL_GATHER] - loss_bytes - f * es * Pp) > 1e-6)
                        fail_msg("%s world %d rank %d: reduce-scatter %.1f all-gather %.1f bytes, want %.1f each",
                                 fsc_parallel_kind_name(kinds[k]), N, r, st->bytes[FSC_OP_REDUCE_SCATTER],
                                 st->bytes[FSC_OP_ALL_GATHER] - loss_bytes, f * es * Pp);
                    assert_true(fabs(st->bytes[FSC_OP_ALL_REDUCE] - 2.0 * f * 4.0) < 1e-6);
                    assert_true(st->bytes[FSC_OP_BROADCAST] == 0);
                    /* zero1 reduces once per step; zero2 once per layer */
                    uint64_t buckets = kinds[k] == FSC_PAR_ZERO1 ? 1 : (uint64_t)z.cfg.layers + 2;
                    assert_int_equal(st->calls[FSC_OP_REDUCE_SCATTER], buckets);
                    assert_int_equal(st->calls[FSC_OP_ALL_GATHER], buckets + 1);
                }
                free(z.params);
            }
        }
    }
}

/* Ledger: the optimizer state per rank is exactly DDP's / N up to padding (AdamW: 8 bytes per owned
 * element); gradient bytes: ZeRO-1 keeps the padded Pp (it reduce-scatters in place), ZeRO-2 the owned S
 * plus one layer's bucket at a time, both on top of what the model itself keeps (the head's part of the
 * tied embedding gradient). */
static void test_zero_memory(void **state) {
    (void)state;
    for (int N = 3; N <= 4; N++) {
        pt_run ddp = ddp_run(N);
        pt_train(&ddp);
        size_t P = fsc_gpt_num_params(&ddp.cfg);
        size_t Pp1 = padded_zero1(&ddp.cfg, N), maxb = 0;
        size_t Pp2 = padded_zero2_per_layer(&ddp.cfg, N, &maxb);
        size_t peak_grads[2] = { 0, 0 };
        for (size_t k = 0; k < 2; k++) {
            pt_run z = zero_run(N, kinds[k], 1);
            pt_train(&z);
            size_t Pp = k == 0 ? Pp1 : Pp2, S = Pp / (size_t)N;
            for (int r = 0; r < N; r++) {
                assert_int_equal(ddp.peak[r][FSC_TAG_OPTIM], 8 * P);
                assert_int_equal(z.peak[r][FSC_TAG_OPTIM], 8 * S);
                assert_true(z.peak[r][FSC_TAG_OPTIM] * (size_t)N - ddp.peak[r][FSC_TAG_OPTIM] < 8 * (size_t)N * 4);
                size_t model = ddp.peak[r][FSC_TAG_GRADS] - 4 * P; /* the model's own gradient buffers */
                size_t want = k == 0 ? model + 4 * Pp : model + 4 * (S + maxb);
                if (z.peak[r][FSC_TAG_GRADS] != want)
                    fail_msg("%s world %d rank %d: gradient peak %zu bytes, want %zu",
                             fsc_parallel_kind_name(kinds[k]), N, r, z.peak[r][FSC_TAG_GRADS], want);
                /* parameters: the replica plus nothing for f32 (the optimizer steps it in place) */
                assert_int_equal(z.peak[r][FSC_TAG_PARAMS], 4 * Pp);
            }
            peak_grads[k] = z.peak[0][FSC_TAG_GRADS];
            free(z.params);
        }
        if (N >= 4) assert_true(peak_grads[1] < peak_grads[0]);
        /* with overlap (prefetch, prefetch_limit 2) a bucket's reduction owns its gradient until it is waited
         * for, one at a time: S plus at most two buckets (the one reducing and the one computing), not every
         * bucket (DDP's gradients plus S, more than ZeRO-1) */
        pt_run z = zero_run(N, FSC_PAR_ZERO2, 1);
        z.po.prefetch = 1;
        z.po.prefetch_limit = 2;
        pt_train(&z);
        const size_t S = Pp2 / (size_t)N;
        for (int r = 0; r < N; r++) {
            size_t model = ddp.peak[r][FSC_TAG_GRADS] - 4 * P, most = model + 4 * (S + 2 * maxb);
            if (z.peak[r][FSC_TAG_GRADS] > most || z.peak[r][FSC_TAG_GRADS] < model + 4 * (S + maxb))
                fail_msg("zero2 prefetch world %d rank %d: gradient peak %zu bytes, want %zu to %zu", N, r,
                         z.peak[r][FSC_TAG_GRADS], model + 4 * (S + maxb), most);
        }
        free(z.params);
        free(ddp.params);
    }
}

/* ---- weights, full tensors, checkpoint hooks ---- */

typedef struct {
    pt_run run;
    const char *path;
    int save;                /* 1: save the fresh engine's weights; 0: load them */
    float *params;           /* (P) full parameters from rank 0 */
    const float *expect;     /* (P) the fp32 initial values of seed */
    unsigned *owned;         /* (P) how many ranks hold each element with write set */
} io_run;

/* On every rank: spoil the replicated parameters except the held pieces (with f32 parameters the
 * optimizer segments are the owned part of the replica), run after_load, compare the replica with the
 * expected fp32 values (rounded to the parameter dtype). */
static fsc_status check_after_load(fsc_engine *e, const io_run *io, const fsc_holding *h, int nh) {
    fsc_dtype dt = io->run.po.param_dtype;
    for (int i = 0; i < e->m->n_tensors; i++)
        FSC_TRY(fsc_device_memset(e->dev, e->m->param[i], 0x7f, e->m->info[i].numel * sizeof(float)));
    for (int i = 0; i < nh; i++)
        FSC_TRY(fsc_device_upload(e->dev, e->m->param[h[i].tensor] + h[i].first,
                                  io->expect + fsc_engine_tensor_offset(e, h[i].tensor) + h[i].first,
                                  h[i].n * sizeof(float)));
    FSC_TRY(e->st->after_load(e));
    fsc_status s = FSC_OK;
    for (int i = 0; i < e->m->n_tensors && s == FSC_OK; i++) {
        size_t n = e->m->info[i].numel, off = fsc_engine_tensor_offset(e, i);
        float *got = malloc(n * sizeof(float)), *want = malloc(n * sizeof(float));
        uint16_t *lo = malloc(n * sizeof(uint16_t));
        memcpy(want, io->expect + off, n * sizeof(float));
        if (dt != FSC_F32) {
            fsc_convert_host(lo, dt, want, FSC_F32, n);
            fsc_convert_host(want, FSC_F32, lo, dt, n);
        }
        s = fsc_device_download(e->dev, got, e->m->param[i], n * sizeof(float));
        if (s == FSC_OK && memcmp(got, want, n * sizeof(float)) != 0)
            s = fsc_error(FSC_ERR_INTERNAL, "rank %d: after_load left %s different from the shards",
                          fsc_comm_rank(e->comm), e->m->info[i].name);
        free(got);
        free(want);
        free(lo);
    }
    return s;
}

static fsc_status io_rank_fn(fsc_rank *r, void *arg) {
    io_run *io = arg;
    const pt_run *run = &io->run;
    fsc_engine *e = NULL;
    FSC_TRY(fsc_engine_create(r, &run->cfg, &run->po, &run->oc, run->seed, &e));
    fsc_status s = io->save ? fsc_engine_save_weights(e, io->path) : fsc_engine_load_weights(e, io->path);
    if (s == FSC_OK) s = fsc_engine_full_params(e, r->rank == 0 ? io->params : NULL);
    /* holdings: pieces inside their optimizer segments, each element held by exactly one writing rank */
    fsc_holding *h = NULL;
    int nh = 0;
    if (s == FSC_OK) s = e->st->holdings(e, &h, &nh);
    for (int i = 0; s == FSC_OK && i < nh; i++) {
        if (h[i].seg_off + h[i].n > fsc_optim_segment_len(e->opt, h[i].seg) || !h[i].write ||
            h[i].first + h[i].n > e->m->info[h[i].tensor].numel) {
            s = fsc_error(FSC_ERR_INTERNAL, "rank %d: holding %d is out of range", r->rank, i);
            break;
        }
        size_t off = fsc_engine_tensor_offset(e, h[i].tensor) + h[i].first;
        for (size_t j = 0; j < h[i].n; j++) __atomic_add_fetch(&io->owned[off + j], 1u, __ATOMIC_RELAXED);
        /* the segment holds the fp32 values of exactly these elements */
        float *got = malloc(h[i].n * sizeof(float));
        s = fsc_device_download(e->dev, got, fsc_optim_param(e->opt, h[i].seg) + h[i].seg_off,
                                h[i].n * sizeof(float));
        if (s == FSC_OK && memcmp(got, io->expect + off, h[i].n * sizeof(float)) != 0)
            s = fsc_error(FSC_ERR_INTERNAL, "rank %d: holding %d (%s from %zu) does not point at its values",
                          r->rank, i, e->m->info[h[i].tensor].name, h[i].first);
        free(got);
    }
    if (s == FSC_OK) s = check_after_load(e, io, h, nh);
    free(h);
    fsc_engine_free(e);
    return s;
}

static void io_cluster(io_run *io, int world, size_t P) {
    memset(io->params, 0, P * sizeof(float));
    memset(io->owned, 0, P * sizeof(unsigned));
    fsc_cluster_opts co = { .world = world, .device = "cpu", .timeout_s = 30 };
    assert_ok(fsc_cluster_run(&co, io_rank_fn, io));
    assert_bits_equal(io->expect, io->params, P, io->save ? "full params before saving" : "full params loaded");
    for (size_t i = 0; i < P; i++)
        if (io->owned[i] != 1) fail_msg("element %zu is held by %u writing ranks", i, io->owned[i]);
}

/* Weights written by zero with bf16 parameters are the fp32 masters (gathered), not the rounded replica;
 * they load into the other stage on another world size (f32 parameters, and the other way round) and give
 * back the same bits.
 * Holdings partition the model; after_load rebuilds the replica. Oracle: the keyed initial values. */
static void test_zero_weights_and_holdings(void **state) {
    (void)state;
    char path[] = "/tmp/fsc_test_zero_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    fsc_gpt_config cfg = pt_small_config();
    size_t P = fsc_gpt_num_params(&cfg);
    float *expect = malloc(P * sizeof(float)), *params = malloc(P * sizeof(float));
    unsigned *owned = malloc(P * sizeof(unsigned));
    int rounded = 0; /* bf16 rounding changes some initial value, so the check can tell masters from replica */
    for (int i = 0, off = 0; i < fsc_gpt_num_tensors(&cfg); i++) {
        fsc_param_info pi;
        assert_ok(fsc_gpt_param_info(&cfg, i, &pi));
        fsc_gpt_init_values(&cfg, 1234, i, 0, pi.numel, expect + off);
        for (size_t j = 0; j < pi.numel; j++)
            rounded |= fsc_bf16_to_f32(fsc_f32_to_bf16(expect[off + j])) != expect[off + j];
        off += (int)pi.numel;
    }
    assert_true(rounded);
    for (size_t k = 0; k < 2; k++) {
        io_run sv = { .run = zero_run(3, kinds[k], 1), .path = path, .save = 1, .params = params,
                      .expect = expect, .owned = owned };
        sv.run.po.param_dtype = k == 0 ? FSC_BF16 : FSC_F32;
        io_cluster(&sv, 3, P);
        /* the loading engine starts from other values (another seed): the file must replace them */
        io_run ld = { .run = zero_run(2, kinds[1 - k], 1), .path = path, .save = 0, .params = params,
                      .expect = expect, .owned = owned };
        ld.run.seed = 99;
        ld.run.po.param_dtype = k == 0 ? FSC_F32 : FSC_BF16;
        io_cluster(&ld, 2, P);
    }
    free(expect);
    free(params);
    free(owned);
    unlink(path);
}

/* Both stages, f32 and bf16 parameters (whose full weights are gathered bucket by bucket), one bucket per
 * layer: a full disk on the writer stops every rank with its message, none waits in a later bucket's gather. */
static void test_zero_save_fails_on_every_rank(void **state) {
    (void)state;
    for (int k = 0; k < 2; k++)
        for (int bf = 0; bf < 2; bf++) {
            pt_run r = zero_run(2, kinds[k], 1);
            if (bf) r.po.param_dtype = FSC_BF16;
            char what[64];
            snprintf(what, sizeof what, "%s, %s parameters", fsc_parallel_kind_name(kinds[k]), bf ? "bf16" : "f32");
            check_save_fails_on_every_rank(r, 2, what);
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zero_adamw_clip_worlds_1_to_8),
        cmocka_unit_test(test_zero_sgd),
        cmocka_unit_test(test_zero_accumulation),
        cmocka_unit_test(test_zero_bf16),
        cmocka_unit_test(test_zero_f16_loss_scaling),
        cmocka_unit_test(test_zero_sync_from_rank0_and_recompute),
        cmocka_unit_test(test_zero_comm_volume),
        cmocka_unit_test(test_zero_memory),
        cmocka_unit_test(test_zero_weights_and_holdings),
        cmocka_unit_test(test_zero_save_fails_on_every_rank),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
