/* Tests of staging through host memory in the simulated communicator (sim/sim_stage.c, sim/sim_comm.c),
 * the path that lets simulated ranks share a GPU. This machine has no GPU, so staging is exercised two ways:
 * forced on the cpu device (fsc_cluster_opts.stage_through_host), and on a fake device defined here whose
 * memory is not readable as host memory (every byte is stored XOR a key of its rank, so reading it directly,
 * or through another rank's device, gives wrong bytes).
 * Oracles: every collective, every dtype, worlds 1..8, gives the direct (zero-copy) path's bytes exactly,
 * recorded output by output; a rank whose staging fails fails the collective on every rank with a message
 * naming it and the group keeps working; FSDP trained with staging equals DDP bit for bit; GPU ordinals
 * follow FSC_SIM_GPUS. Rank functions never call cmocka: they return errors, tests assert on those. */
#include <pthread.h>
#include <stdlib.h>
#include "partest.h"
#include "core/comm_impl.h"
#include "core/device_impl.h"
#include "../sim/sim.h"

#define CHECK(cond, ...)                                              \
    do {                                                              \
        if (!(cond)) return fsc_error(FSC_ERR_INTERNAL, __VA_ARGS__); \
    } while (0)

#define MAXW 8

static uint64_t mix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* ---- the fake device: memory is host memory, but every byte is stored XOR the rank's key ---- */

typedef struct {
    unsigned char key;
    int fail_download, fail_upload; /* the next such call fails */
} fake_ctx;

static void xor_copy(const fake_ctx *c, unsigned char *dst, const unsigned char *src, size_t n) {
    const uint64_t k8 = 0x0101010101010101ull * c->key;
    size_t i = 0;
    for (uint64_t w; i + 8 <= n; i += 8) { /* by words: ThreadSanitizer checks every access */
        memcpy(&w, src + i, 8);
        w ^= k8;
        memcpy(dst + i, &w, 8);
    }
    for (; i < n; i++) dst[i] = src[i] ^ c->key;
}
static fsc_status fake_upload(void *ctx, void *dst, const void *src, size_t n) {
    fake_ctx *c = ctx;
    if (c->fail_upload) {
        c->fail_upload = 0;
        return fsc_error(FSC_ERR_IO, "fake upload failure");
    }
    xor_copy(c, dst, src, n);
    return FSC_OK;
}
static fsc_status fake_download(void *ctx, void *dst, const void *src, size_t n) {
    fake_ctx *c = ctx;
    if (c->fail_download) {
        c->fail_download = 0;
        return fsc_error(FSC_ERR_IO, "fake download failure");
    }
    xor_copy(c, dst, src, n);
    return FSC_OK;
}
/* device to device: both sides hold bytes XOR the same key (a group of one copies recv = send on the device) */
static fsc_status fake_copy(void *ctx, void *dst, const void *src, size_t n) {
    (void)ctx;
    if (n && dst != src) memmove(dst, src, n);
    return FSC_OK;
}
static const fsc_device_ops fake_ops = {.abi_version = FSC_DEVICE_ABI_VERSION, .name = "fake",
                                        .upload = fake_upload, .download = fake_download, .copy = fake_copy};

/* Device memory of either kind: the fake device has no ledger, so its memory is plain malloc. */
static fsc_status dalloc(fsc_device *dev, size_t bytes, unsigned char **out) {
    *out = NULL;
    if (dev->ops != &fake_ops) return fsc_device_alloc(dev, FSC_TAG_COMM, bytes ? bytes : 1, (void **)out);
    *out = malloc(bytes ? bytes : 1);
    return *out ? FSC_OK : fsc_error(FSC_ERR_NOMEM, "fake alloc");
}
static void dfree(fsc_device *dev, void *p) {
    if (dev->ops == &fake_ops) free(p);
    else fsc_device_release(dev, p);
}

typedef struct {
    fsc_rank r;
    fsc_device dev;
    fake_ctx fc;
    fsc_rank_fn fn;
    void *arg;
    sim_cluster *cl;
    fsc_status status;
    char msg[512];
    pthread_t th;
} fake_rank;

static void *fake_main(void *p) {
    fake_rank *fr = p;
    fr->status = fr->fn(&fr->r, fr->arg);
    snprintf(fr->msg, sizeof(fr->msg), "%s", fsc_last_error());
    if (fr->status != FSC_OK) sim_cluster_fail(fr->cl, fr->r.rank, fr->status, fr->msg);
    sim_cluster_exit(fr->cl, fr->r.rank);
    return NULL;
}

/* fsc_cluster_run's job on fake devices: world threads, each with its own fake device (key 0x5A + 37 r). */
/* not inlined: inlined into its caller's loop, gcc 12 at -O3 misjudges fr's bounds (-Wstringop-overflow) */
#if defined(__GNUC__)
__attribute__((noinline))
#endif
static fsc_status fake_run(int world, fsc_rank_fn fn, void *arg) {
    if (world < 1 || world > MAXW) return fsc_error(FSC_ERR_INVALID, "fake_run: world %d outside 1..%d", world, MAXW);
    fake_rank *fr = calloc((size_t)world, sizeof *fr);
    if (!fr) return fsc_error(FSC_ERR_NOMEM, "fake_run: out of memory");
    sim_cluster *cl = NULL;
    fsc_status cs = sim_cluster_create(world, 20, &cl);
    if (cs != FSC_OK) {
        free(fr);
        return cs;
    }
    fsc_status s = FSC_OK;
    for (int r = 0; r < world; r++) {
        fr[r].fc.key = (unsigned char)(0x5A + 37 * r);
        fr[r].dev = (fsc_device){.ops = &fake_ops, .ctx = &fr[r].fc};
        fr[r].r = (fsc_rank){.rank = r, .world = world, .local_rank = r, .dev = &fr[r].dev};
        fr[r].fn = fn;
        fr[r].arg = arg;
        fr[r].cl = cl;
        if (s == FSC_OK) s = sim_comm_open(cl, r, &fr[r].dev, 0, &fr[r].r.comm);
    }
    for (int r = 0; s == FSC_OK && r < world; r++)
        if (pthread_create(&fr[r].th, NULL, fake_main, &fr[r]) != 0) s = fsc_error(FSC_ERR_INTERNAL, "thread");
    for (int r = 0; s == FSC_OK && r < world; r++) pthread_join(fr[r].th, NULL);
    for (int r = 0; s == FSC_OK && r < world; r++)
        if (fr[r].status != FSC_OK && s == FSC_OK) s = fsc_error(fr[r].status, "rank %d: %s", r, fr[r].msg);
    for (int r = 0; r < world; r++) fsc_comm_free(fr[r].r.comm);
    sim_cluster_free(cl);
    free(fr);
    return s;
}

/* ---- the script: every collective, recorded output by output ---- */

typedef struct {
    unsigned char *p;
    size_t n, cap;
} out_log;

typedef struct {
    out_log log[MAXW];
} script_rec;

/* Append bytes of device memory at src to the log. */
static fsc_status record(out_log *L, fsc_device *dev, const void *src, size_t bytes) {
    if (L->n + bytes > L->cap) {
        size_t cap = L->cap ? L->cap : 4096;
        while (cap < L->n + bytes) cap *= 2;
        unsigned char *p = realloc(L->p, cap);
        if (!p) return fsc_error(FSC_ERR_NOMEM, "log");
        L->p = p;
        L->cap = cap;
    }
    FSC_TRY(fsc_device_download(dev, L->p + L->n, src, bytes));
    L->n += bytes;
    return FSC_OK;
}

/* Device buffer := n elements of rank's input (floats of full mantissa and both signs, wide integers). */
static fsc_status fill(fsc_device *dev, unsigned char *d, fsc_dtype dt, int salt, int rank, size_t n,
                       unsigned char *host) {
    size_t es = fsc_dtype_size(dt);
    for (size_t i = 0; i < n; i++) {
        uint64_t h = mix(((uint64_t)(unsigned)salt << 40) ^ ((uint64_t)(unsigned)rank << 32) ^ i);
        float v = ldexpf(0.5f + (float)(h & 0xFFFFFF) / 33554432.0f, (int)((h >> 24) % 9) - 4);
        if ((h >> 40) & 1) v = -v;
        uint16_t u;
        int32_t k = (int32_t)(uint32_t)(h >> 32);
        unsigned char *x = host + i * es;
        switch (dt) {
        case FSC_F32: memcpy(x, &v, 4); break;
        case FSC_BF16: u = fsc_f32_to_bf16(v), memcpy(x, &u, 2); break;
        case FSC_F16: u = fsc_f32_to_f16(v), memcpy(x, &u, 2); break;
        case FSC_I32: memcpy(x, &k, 4); break;
        default: *x = (unsigned char)(h >> 13); break;
        }
    }
    return fsc_device_upload(dev, d, host, n * es);
}

/* Device buffer := a poison pattern, so an output the call did not write shows. */
static fsc_status poison(fsc_device *dev, unsigned char *d, size_t bytes, unsigned char *host) {
    memset(host, 0xA7, bytes);
    return fsc_device_upload(dev, d, host, bytes);
}

static fsc_status script(fsc_rank *r, out_log *L) {
    const int N = r->world, me = r->rank;
    fsc_device *dev = r->dev;
    fsc_comm *c = r->comm;
    const fsc_dtype dts[] = {FSC_F32, FSC_BF16, FSC_F16, FSC_I32, FSC_U8};
    const fsc_redop ops[] = {FSC_SUM, FSC_AVG, FSC_MAX};
    const size_t counts[] = {0, 1, 37, 300}; /* 300: two tiles of 256, uneven chunks */
    const size_t maxb = 2 * 300 * MAXW * 4;
    unsigned char *a = NULL, *b = NULL, *host = malloc(maxb);
    fsc_status s = host ? FSC_OK : fsc_error(FSC_ERR_NOMEM, "host");
    if (s == FSC_OK) s = dalloc(dev, maxb, &a);
    if (s == FSC_OK) s = dalloc(dev, maxb, &b);
    int salt = 1;
    /* reductions: all-reduce and reduce-scatter, out of place and in place */
    for (size_t d = 0; s == FSC_OK && d < 4; d++) {
        for (size_t o = 0; s == FSC_OK && o < 3; o++) {
            fsc_dtype dt = dts[d];
            if (dt == FSC_I32 && ops[o] == FSC_AVG) continue;
            for (size_t k = 0; s == FSC_OK && k < 4; k++, salt++) {
                size_t n = counts[k], es = fsc_dtype_size(dt), full = n * (size_t)N;
                if ((s = fill(dev, a, dt, salt, me, full, host)) || (s = poison(dev, b, full * es, host)) ||
                    (s = fsc_comm_all_reduce(c, a, b, full, dt, ops[o])) || (s = record(L, dev, b, full * es)) ||
                    (s = fsc_comm_all_reduce(c, a, a, n, dt, ops[o])) || (s = record(L, dev, a, full * es)))
                    break;
                if ((s = fill(dev, a, dt, salt, me, full, host)) || (s = poison(dev, b, full * es, host)) ||
                    (s = fsc_comm_reduce_scatter(c, a, b, n, dt, ops[o])) || (s = record(L, dev, b, full * es)) ||
                    (s = fsc_comm_reduce_scatter(c, a, a + (size_t)me * n * es, n, dt, ops[o])) ||
                    (s = record(L, dev, a, full * es)))
                    break;
            }
        }
    }
    /* data movement: all-gather (out of place and in place), broadcast from the first and last root, all-to-all */
    for (size_t d = 0; s == FSC_OK && d < 5; d++) {
        for (size_t k = 0; s == FSC_OK && k < 4; k++, salt++) {
            fsc_dtype dt = dts[d];
            size_t n = counts[k], es = fsc_dtype_size(dt), full = n * (size_t)N;
            if ((s = fill(dev, a, dt, salt, me, n, host)) || (s = poison(dev, b, full * es, host)) ||
                (s = fsc_comm_all_gather(c, a, b, n, dt)) || (s = record(L, dev, b, full * es)) ||
                (s = poison(dev, b, full * es, host)) ||
                (s = fill(dev, b + (size_t)me * n * es, dt, salt, me, n, host)) ||
                (s = fsc_comm_all_gather(c, b + (size_t)me * n * es, b, n, dt)) || (s = record(L, dev, b, full * es)))
                break;
            for (int root = 0; s == FSC_OK && root < N; root += N > 2 ? N - 1 : 1) { /* first and last */
                s = me == root ? fill(dev, a, dt, salt + 1000, me, n, host) : poison(dev, a, n * es, host);
                if (s || (s = fsc_comm_broadcast(c, a, n, dt, root)) || (s = record(L, dev, a, n * es))) break;
            }
            if (s || (s = fill(dev, a, dt, salt + 2000, me, full, host)) || (s = poison(dev, b, full * es, host)) ||
                (s = fsc_comm_all_to_all(c, a, b, n, dt)) || (s = record(L, dev, b, full * es)))
                break;
        }
    }
    /* point to point: a ring of three messages (one empty), then every pair */
    for (int it = 0; s == FSC_OK && it < 3; it++) {
        const int next = (me + 1) % N, prev = (me + N - 1) % N;
        fsc_dtype dt = it == 1 ? FSC_BF16 : FSC_F32;
        size_t n = it == 2 ? 0 : 300, es = fsc_dtype_size(dt);
        if ((s = fill(dev, a, dt, 900 + it, me, n, host)) || (s = fsc_comm_send(c, a, n, dt, next)) ||
            (s = poison(dev, b, n * es + 1, host)) || (s = fsc_comm_recv(c, b, n, dt, prev)) ||
            (s = record(L, dev, b, n * es + 1)))
            break;
    }
    for (int j = 0; s == FSC_OK && j < N; j++)
        if ((s = fill(dev, a + 64 * j, FSC_I32, 950 + j, me, 16, host))) break;
    for (int j = 0; s == FSC_OK && j < N; j++) s = fsc_comm_send(c, a + 64 * j, 16, FSC_I32, j);
    for (int j = N - 1; s == FSC_OK && j >= 0; j--)
        if ((s = fsc_comm_recv(c, b, 16, FSC_I32, j)) || (s = record(L, dev, b, 64))) break;
    /* a split group (parity, reversed) staged as its parent */
    fsc_comm *sub = NULL;
    if (s == FSC_OK) s = fsc_comm_split(c, me % 2, -me, &sub);
    if (s == FSC_OK) s = fill(dev, a, FSC_F32, 990, me, 300, host);
    if (s == FSC_OK) s = fsc_comm_all_reduce(sub, a, b, 300, FSC_F32, FSC_SUM);
    if (s == FSC_OK) s = record(L, dev, b, 300 * 4);
    if (s == FSC_OK) s = fsc_comm_all_gather(sub, a, b, 40, FSC_F16);
    if (s == FSC_OK) s = record(L, dev, b, (size_t)fsc_comm_size(sub) * 40 * 2);
    if (s == FSC_OK) s = fsc_comm_barrier(sub);
    fsc_comm_free(sub);
    if (s == FSC_OK) s = fsc_comm_barrier(c);
    dfree(dev, a);
    dfree(dev, b);
    free(host);
    return s;
}

static fsc_status rank_script(fsc_rank *r, void *arg) {
    script_rec *rec = arg;
    return script(r, &rec->log[r->rank]);
}

static void rec_free(script_rec *rec) {
    for (int k = 0; k < MAXW; k++) free(rec->log[k].p);
    memset(rec, 0, sizeof(*rec));
}

static void assert_logs_equal(const script_rec *a, const script_rec *b, int world, const char *what) {
    for (int k = 0; k < world; k++) {
        if (a->log[k].n != b->log[k].n)
            fail_msg("%s, world %d, rank %d: %zu bytes recorded vs %zu", what, world, k, a->log[k].n, b->log[k].n);
        for (size_t i = 0; i < a->log[k].n; i++)
            if (a->log[k].p[i] != b->log[k].p[i])
                fail_msg("%s, world %d, rank %d: recorded byte %zu differs from the direct path", what, world, k, i);
    }
}

/* Oracle: with staging forced on cpu, and on the fake device whose memory cannot be read as host memory,
 * every output of every collective (all dtypes, reductions, in place and not, point to point, a split group)
 * equals the direct path's bytes on worlds 1..8. The direct path is checked against a serial reference in
 * test_sim_comm.c. */
static void test_staging_equals_direct(void **state) {
    (void)state;
    for (int w = 1; w <= MAXW; w++) {
        script_rec direct = {0}, staged = {0}, fake = {0};
        assert_ok(fsc_cluster_run(&(fsc_cluster_opts){.world = w, .timeout_s = 20}, rank_script, &direct));
        assert_ok(fsc_cluster_run(&(fsc_cluster_opts){.world = w, .timeout_s = 20, .stage_through_host = 1},
                                  rank_script, &staged));
        assert_ok(fake_run(w, rank_script, &fake));
        assert_true(direct.log[0].n > 20000); /* the script ran to its end on every variant */
        assert_logs_equal(&direct, &staged, w, "staged on cpu");
        assert_logs_equal(&direct, &fake, w, "fake device");
        rec_free(&direct);
        rec_free(&staged);
        rec_free(&fake);
    }
}

/* ---- failures while staging ---- */

typedef struct {
    fsc_status st[MAXW], after[MAXW], up, send;
    char msg[MAXW][512], up_msg[512], send_msg[512];
} fail_rec;

static fsc_status rank_stage_fail(fsc_rank *r, void *arg) {
    fail_rec *e = arg;
    fake_ctx *fc = r->dev->ctx;
    const int me = r->rank;
    unsigned char *a = NULL;
    FSC_TRY(dalloc(r->dev, 64 * 4, &a));
    float ones[64];
    for (int i = 0; i < 64; i++) ones[i] = 1.0f;
    FSC_TRY(fsc_device_upload(r->dev, a, ones, sizeof(ones)));
    /* rank 2's download fails: every rank's all-reduce fails at once */
    if (me == 2) fc->fail_download = 1;
    e->st[me] = fsc_comm_all_reduce(r->comm, a, a, 64, FSC_F32, FSC_SUM);
    snprintf(e->msg[me], sizeof(e->msg[me]), "%s", fsc_last_error());
    /* the group still works */
    FSC_TRY(fsc_device_upload(r->dev, a, ones, sizeof(ones)));
    e->after[me] = fsc_comm_all_reduce(r->comm, a, a, 64, FSC_F32, FSC_SUM);
    float out[64];
    FSC_TRY(fsc_device_download(r->dev, out, a, sizeof(out)));
    CHECK(out[63] == (float)r->world, "after the failure the sum is %g", (double)out[63]);
    /* rank 1's upload fails: only its call fails */
    if (me == 1) fc->fail_upload = 1;
    fsc_status s = fsc_comm_broadcast(r->comm, a, 16, FSC_F32, 0);
    if (me == 1) {
        e->up = s;
        snprintf(e->up_msg, sizeof(e->up_msg), "%s", fsc_last_error());
    } else {
        CHECK(s == FSC_OK, "broadcast failed on rank %d: %s", me, fsc_last_error());
    }
    fc->fail_upload = 0;
    /* rank 0's send fails at the download: nothing is queued, and the next send arrives */
    if (me == 0) {
        fc->fail_download = 1;
        e->send = fsc_comm_send(r->comm, a, 4, FSC_F32, 1);
        snprintf(e->send_msg, sizeof(e->send_msg), "%s", fsc_last_error());
        ones[0] = 7;
        FSC_TRY(fsc_device_upload(r->dev, a, ones, 16));
        FSC_TRY(fsc_comm_send(r->comm, a, 4, FSC_F32, 1));
    } else if (me == 1) {
        FSC_TRY(fsc_comm_recv(r->comm, a, 4, FSC_F32, 0));
        FSC_TRY(fsc_device_download(r->dev, out, a, 16));
        CHECK(out[0] == 7.0f, "received %g, expected the second message", (double)out[0]);
    }
    dfree(r->dev, a);
    return fsc_comm_barrier(r->comm);
}

/* Oracle: a failed download on rank 2 fails the all-reduce on every rank at once (rank 2 with its own
 * FSC_ERR_IO, the others with FSC_ERR_COMM naming rank 2 and the call), and the next all-reduce gives the
 * right sum; a failed upload fails only that rank's call; a failed send queues nothing. */
static void test_staging_failures(void **state) {
    (void)state;
    fail_rec *e = calloc(1, sizeof(*e));
    assert_ok(fake_run(4, rank_stage_fail, e));
    for (int k = 0; k < 4; k++) {
        if (k == 2) {
            if (e->st[k] != FSC_ERR_IO || !strstr(e->msg[k], "downloading 256 bytes from the 'fake' device for "
                                                                 "all_reduce: fake download failure"))
                fail_msg("rank 2: %s: %s", fsc_status_str(e->st[k]), e->msg[k]);
        } else if (e->st[k] != FSC_ERR_COMM ||
                   !strstr(e->msg[k], "rank 2 could not stage its buffers for all_reduce(64 x f32, sum) through "
                                      "host memory") ||
                   !strstr(e->msg[k], "fake download failure")) {
            fail_msg("rank %d: %s: %s", k, fsc_status_str(e->st[k]), e->msg[k]);
        }
        assert_int_equal(e->after[k], FSC_OK);
    }
    if (e->up != FSC_ERR_IO || !strstr(e->up_msg, "uploading 64 bytes to the 'fake' device for broadcast"))
        fail_msg("upload: %s: %s", fsc_status_str(e->up), e->up_msg);
    if (e->send != FSC_ERR_IO || !strstr(e->send_msg, "for send to rank 1: fake download failure"))
        fail_msg("send: %s: %s", fsc_status_str(e->send), e->send_msg);
    free(e);
}

/* ---- options ---- */

static fsc_status rank_nothing(fsc_rank *r, void *arg) {
    (void)r, (void)arg;
    return FSC_OK;
}

/* Oracle: GPU ordinals are 0 for every rank by default and rank % n with FSC_SIM_GPUS=n; a value that is not
 * a whole number >= 1 is refused naming the variable, and fsc_cluster_run on cuda refuses it before opening
 * any GPU; stage_through_host takes 0 or 1 only; staging needs a device. */
static void test_options(void **state) {
    (void)state;
    int ord = -1;
    unsetenv("FSC_SIM_GPUS");
    for (int r = 0; r < 5; r++) {
        assert_ok(sim_gpu_ordinal(r, &ord));
        assert_int_equal(ord, 0);
    }
    setenv("FSC_SIM_GPUS", "3", 1);
    for (int r = 0; r < 7; r++) {
        assert_ok(sim_gpu_ordinal(r, &ord));
        assert_int_equal(ord, r % 3);
    }
    const char *bad[] = {"0", "-2", "two", "3x", " "};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        setenv("FSC_SIM_GPUS", bad[i], 1);
        assert_err(sim_gpu_ordinal(1, &ord), FSC_ERR_INVALID, "is not a number of GPUs");
    }
    setenv("FSC_SIM_GPUS", "zero", 1);
    assert_err(fsc_cluster_run(&(fsc_cluster_opts){.world = 2, .device = "cuda"}, rank_nothing, NULL),
               FSC_ERR_INVALID, "rank 0: could not create its 'cuda' device: FSC_SIM_GPUS='zero'");
    /* the variable does not concern cpu clusters */
    assert_ok(fsc_cluster_run(&(fsc_cluster_opts){.world = 2}, rank_nothing, NULL));
    unsetenv("FSC_SIM_GPUS");
    assert_err(fsc_cluster_run(&(fsc_cluster_opts){.world = 2, .stage_through_host = 2}, rank_nothing, NULL),
               FSC_ERR_INVALID, "stage_through_host 2 must be 0 or 1");
    sim_cluster *cl = NULL;
    fsc_comm *c = NULL;
    assert_ok(sim_cluster_create(1, 1.0, &cl));
    assert_err(sim_comm_open(cl, 0, NULL, 1, &c), FSC_ERR_INVALID, "needs the rank's device");
    assert_null(c);
    sim_cluster_free(cl);
}

/* ---- the engine ---- */

/* Oracle: FSDP (full shard) on 4 ranks with every buffer staged through host memory equals DDP on the
 * direct path bit for bit, losses and final parameters; so does ZeRO-2 on 3 ranks. */
static void test_fsdp_staged_equals_ddp(void **state) {
    (void)state;
    const int worlds[] = {4, 3};
    const fsc_parallel_kind kinds[] = {FSC_PAR_FSDP, FSC_PAR_ZERO2};
    for (int i = 0; i < 2; i++) {
        pt_run ddp = pt_make(worlds[i], FSC_PAR_DDP);
        ddp.steps = 2;
        pt_train(&ddp);
        pt_run st = pt_make(worlds[i], kinds[i]);
        st.steps = 2;
        st.stage = 1;
        pt_train(&st);
        pt_assert_same(&ddp, &st, i ? "ZeRO-2 staged vs DDP" : "FSDP staged vs DDP");
        free(ddp.params);
        free(st.params);
    }
}

/* Oracle: a group of one stages nothing (a collective over one rank is the identity): DDP, FSDP and ZeRO-2 with
 * bf16 parameters on one rank with staging copy less than a tenth of the parameters' bytes between host and device
 * in 2 steps (the gradient norm's few bytes), where staging each collective copied the whole gradient down and up
 * every step (on an H200 most of a GPT-2 124M step); the losses and parameters are those of the direct path. On 2
 * ranks the staged step does copy the gradient (the count sees staging). */
static void test_group_of_one_stages_nothing(void **state) {
    (void)state;
    const fsc_parallel_kind kinds[] = {FSC_PAR_DDP, FSC_PAR_FSDP, FSC_PAR_ZERO2};
    for (int i = 0; i < 3; i++) {
        pt_run direct = pt_make(1, kinds[i]), st = pt_make(1, kinds[i]);
        direct.steps = st.steps = 2;
        direct.po.param_dtype = st.po.param_dtype = FSC_BF16;
        st.stage = 1;
        pt_train(&direct);
        pt_train(&st);
        pt_assert_same(&direct, &st, "one rank staged vs direct");
        const size_t P = fsc_gpt_num_params(&st.cfg) * sizeof(float);
        if (st.copied[0][0] + st.copied[0][1] >= P / 10)
            fail_msg("kind %d: one staged rank copied %zu bytes down and %zu up in 2 steps (parameters: %zu bytes)",
                     (int)kinds[i], st.copied[0][0], st.copied[0][1], P);
        free(direct.params);
        free(st.params);
    }
    pt_run two = pt_make(2, FSC_PAR_DDP);
    two.steps = 2;
    two.stage = 1;
    pt_train(&two);
    assert_true(two.copied[0][0] >= 2 * fsc_gpt_num_params(&two.cfg) * sizeof(float));
    free(two.params);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_staging_equals_direct),
        cmocka_unit_test(test_staging_failures),
        cmocka_unit_test(test_options),
        cmocka_unit_test(test_fsdp_staged_equals_ddp),
        cmocka_unit_test(test_group_of_one_stages_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
