/* The backend-comparison harness for the cuda plug-in (backends/cuda): every kernel runs on cuda and on
 * the cpu reference with the same random inputs (a fresh seed each run, printed; never zeros), output
 * buffers poisoned with NaN beforehand, and the results are compared with a normalized error bound per
 * kernel and dtype: max |cuda - cpu| / max |cpu| <= bound. Oracles:
 * - bound 0 (bit-identical to the cpu backend): copies, layout shuffles, conversions, the embedding,
 *   elementwise arithmetic (products and the squared error's gradient included) and the optimizers (the
 *   plug-in has no FMA contraction and IEEE div/sqrt), the exact fixed-point sum of squares, absmax;
 * - small bounds where the order of a sum or the last bits of expf/tanhf/sin/cos differ (gemm, norms,
 *   softmax, SiLU/SwiGLU, rotary embeddings, ...);
 * - every cuda reduction gives the same bits when run twice (determinism).
 * Without the plug-in, a driver or a GPU the kernel tests report themselves skipped with the reason; the
 * plug-in tests still check that it loads, exports its entry points and refuses cleanly.
 * On a GPU machine (ci/gpu_check.sh): FSC_REQUIRE_GPU=1 turns every skip into a failure, and FSC_TEST_DIGEST=FILE
 * writes a hash of every cuda result the harness compares, one line each, so that two runs with the same
 * FSC_TEST_SEED can be compared for the same bits (every kernel deterministic, not only the reductions). */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include "testutil.h"
#include "core/device_impl.h"
#include "core/comm_impl.h"

typedef struct {
    char plugin[1024];  /* path of libfsc_cuda.so, "" if none was found */
    void *handle;       /* our dlopen of it, kept open so fsc_plugin_init stays in effect */
    fsc_device *cpu, *gpu;
    char why[1024];     /* why gpu is NULL */
    uint64_t rng;
} H;

static int require_gpu; /* FSC_REQUIRE_GPU=1: a skip is a failure (set once in group_setup) */
static FILE *digest;    /* FSC_TEST_DIGEST: "what hash" of every cuda result compared, or NULL */

/* 64-bit FNV-1a of a cuda result, written as one line of the digest file */
static void digest_add(const char *what, const void *p, size_t bytes) {
    if (!digest) return;
    uint64_t x = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < bytes; i++) x = (x ^ ((const unsigned char *)p)[i]) * 0x100000001b3ull;
    fprintf(digest, "%s %zu %016llx\n", what, bytes, (unsigned long long)x);
}

/* A test that cannot run: skipped, or failed where a GPU is required */
#define SKIP_OR_FAIL(...)                                          \
    do {                                                           \
        if (require_gpu) fail_msg("FSC_REQUIRE_GPU=1: " __VA_ARGS__); \
        print_message("skipped: " __VA_ARGS__);                     \
        skip();                                                    \
    } while (0)

/* ---- setup: find the plug-in, open both devices ---- */

static int find_plugin(char *out, size_t cap) {
    const char *env = getenv("FSC_CUDA_PLUGIN");
    if (env && *env) {
        snprintf(out, cap, "%s", env);
        return access(out, R_OK) == 0;
    }
    char exe[1024];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 64);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            strcpy(slash, "/../libfsc_cuda.so"); /* build/<variant>/tests/x -> build/<variant>/libfsc_cuda.so */
            if (access(exe, R_OK) == 0) {
                snprintf(out, cap, "%s", exe);
                return 1;
            }
        }
    }
    if (access("build/libfsc_cuda.so", R_OK) == 0) {
        snprintf(out, cap, "build/libfsc_cuda.so");
        return 1;
    }
    return 0;
}

static int group_setup(void **state) {
    H *h = calloc(1, sizeof *h);
    if (!h) return -1;
    const char *req = getenv("FSC_REQUIRE_GPU"), *dg = getenv("FSC_TEST_DIGEST");
    require_gpu = req && *req && strcmp(req, "0") != 0;
    if (dg && *dg && !(digest = fopen(dg, "w"))) {
        fprintf(stderr, "FSC_TEST_DIGEST: cannot write %s\n", dg);
        return -1;
    }
    h->rng = ((uint64_t)time(NULL) << 20) ^ (uint64_t)getpid() ^ 0x9e3779b97f4a7c15ull;
    print_message("seed %llu (FSC_TEST_SEED reproduces a run)\n", (unsigned long long)h->rng);
    const char *seed = getenv("FSC_TEST_SEED");
    if (seed && *seed) h->rng = strtoull(seed, NULL, 10);
    if (fsc_device_create("cpu", NULL, &h->cpu) != FSC_OK) return -1;
    if (!find_plugin(h->plugin, sizeof h->plugin)) {
        h->plugin[0] = '\0';
        snprintf(h->why, sizeof h->why, "the cuda plug-in libfsc_cuda.so is not built (no nvcc) and "
                 "FSC_CUDA_PLUGIN is not set");
    } else {
        setenv("FSC_CUDA_PLUGIN", h->plugin, 1); /* the core loads the same file */
        h->handle = dlopen(h->plugin, RTLD_NOW | RTLD_LOCAL);
        if (h->handle) {
            fsc_plugin_init_fn init;
            void *sym = dlsym(h->handle, "fsc_plugin_init");
            memcpy(&init, &sym, sizeof init);
            if (sym) init(FSC_DEVICE_ABI_VERSION, fsc_error);
        }
        fsc_status s = fsc_device_create("cuda", NULL, &h->gpu);
        if (s != FSC_OK) {
            snprintf(h->why, sizeof h->why, "%s", fsc_last_error());
            h->gpu = NULL;
        }
    }
    if (!h->gpu) print_message("cuda kernel tests skipped: %s\n", h->why);
    *state = h;
    return 0;
}

static int group_teardown(void **state) {
    H *h = *state;
    fsc_device_free(h->gpu);
    fsc_device_free(h->cpu);
    if (h->handle) dlclose(h->handle);
    free(h);
    if (digest && fclose(digest) != 0) return -1;
    digest = NULL;
    return 0;
}

#define NEED_GPU(h)                                                  \
    do {                                                             \
        if (!(h)->gpu) SKIP_OR_FAIL("no cuda device: %s\n", (h)->why); \
    } while (0)

/* ---- random inputs, poisoned outputs, comparison ---- */

static uint64_t next_u64(H *h) {
    h->rng ^= h->rng << 13, h->rng ^= h->rng >> 7, h->rng ^= h->rng << 17;
    return h->rng;
}
/* uniform in [lo, hi), never exactly zero */
static float urand(H *h, float lo, float hi) {
    float u = (float)((next_u64(h) >> 40) + 1) / 16777217.0f;
    float x = lo + (hi - lo) * u;
    return x == 0.0f ? 1e-3f : x;
}
static float *host_rand(H *h, size_t n, float lo, float hi) {
    float *x = malloc(n * sizeof *x + 1);
    for (size_t i = 0; i < n; i++) x[i] = urand(h, lo, hi);
    return x;
}

/* The same host data on both devices. */
typedef struct {
    void *c, *g;
    size_t bytes;
} pair;

static pair pair_of(H *h, const void *host, size_t bytes) {
    pair p = {NULL, NULL, bytes};
    assert_ok(fsc_device_alloc(h->cpu, FSC_TAG_WORKSPACE, bytes ? bytes : 1, &p.c));
    assert_ok(fsc_device_alloc(h->gpu, FSC_TAG_WORKSPACE, bytes ? bytes : 1, &p.g));
    if (host && bytes) {
        assert_ok(fsc_device_upload(h->cpu, p.c, host, bytes));
        assert_ok(fsc_device_upload(h->gpu, p.g, host, bytes));
    }
    return p;
}
static pair pair_rand(H *h, size_t n, float lo, float hi) {
    float *x = host_rand(h, n, lo, hi);
    pair p = pair_of(h, x, n * sizeof(float));
    free(x);
    return p;
}
static pair pair_nan(H *h, size_t n) {
    float *x = malloc(n * sizeof *x + 1);
    for (size_t i = 0; i < n; i++) x[i] = NAN;
    pair p = pair_of(h, x, n * sizeof(float));
    free(x);
    return p;
}
static void pair_free(H *h, pair *p) {
    fsc_device_release(h->cpu, p->c);
    fsc_device_release(h->gpu, p->g);
}

/* Download both and check max |g - c| / max |c| <= bound over [0, n); NaN must match NaN. */
static void compare(H *h, const char *what, pair *p, size_t n, double bound) {
    float *c = malloc(n * sizeof *c + 1), *g = malloc(n * sizeof *g + 1);
    assert_ok(fsc_device_download(h->cpu, c, p->c, n * sizeof(float)));
    assert_ok(fsc_device_download(h->gpu, g, p->g, n * sizeof(float)));
    digest_add(what, g, n * sizeof(float));
    double maxref = 0.0, maxerr = 0.0;
    size_t worst = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(c[i]) != isnan(g[i]))
            fail_msg("%s: element %zu: cpu %.9g, cuda %.9g (an output left unwritten is NaN)", what, i, (double)c[i],
                     (double)g[i]);
        if (isnan(c[i])) continue;
        double e = fabs((double)g[i] - (double)c[i]);
        if (fabs((double)c[i]) > maxref) maxref = fabs((double)c[i]);
        if (e > maxerr) maxerr = e, worst = i;
    }
    double norm = maxerr / (maxref > 1e-30 ? maxref : 1e-30);
    if (norm > bound)
        fail_msg("%s: normalized error %.3g > bound %.3g (element %zu: cpu %.9g, cuda %.9g)", what, norm, bound, worst,
                 (double)c[worst], (double)g[worst]);
    free(c);
    free(g);
}

/* Run a cuda reduction twice from the same inputs: the same bits. */
static void same_bits_twice(H *h, const char *what, const void *a, const void *b, size_t bytes) {
    if (memcmp(a, b, bytes) != 0) fail_msg("%s: two cuda runs on the same inputs differ", what);
    digest_add(what, b, bytes);
}

/* Run a kernel on both devices: for (EACH(w)) assert_ok(FSC_K(DEV(h, w), op, P(x, w), ...)); */
#define EACH(w) int w = 0; w < 2; w++
#define DEV(h, w) ((w) ? (h)->gpu : (h)->cpu)
#define P(p, w) ((w) ? (p).g : (p).c)
#define PF(p, w) ((float *)P(p, w))

/* Compare host arrays: max |g - c| / max |c| <= bound; equal values (infinities too) match, NaN must
 * match NaN. */
static void compare_host(const char *what, const float *c, const float *g, size_t n, double bound) {
    digest_add(what, g, n * sizeof(float));
    double maxref = 0.0, maxerr = 0.0;
    size_t worst = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(c[i]) != isnan(g[i]))
            fail_msg("%s: element %zu: cpu %.9g, cuda %.9g (an output left unwritten is NaN)", what, i, (double)c[i],
                     (double)g[i]);
        if (isnan(c[i]) || c[i] == g[i]) {
            if (!isnan(c[i]) && isfinite(c[i]) && fabs((double)c[i]) > maxref) maxref = fabs((double)c[i]);
            continue;
        }
        double e = fabs((double)g[i] - (double)c[i]);
        if (fabs((double)c[i]) > maxref) maxref = fabs((double)c[i]);
        if (!(e <= maxerr)) maxerr = e, worst = i;
    }
    double norm = maxerr / (maxref > 1e-30 ? maxref : 1e-30);
    if (!(norm <= bound))
        fail_msg("%s: normalized error %.3g > bound %.3g (element %zu: cpu %.9g, cuda %.9g)", what, norm, bound, worst,
                 (double)c[worst], (double)g[worst]);
}

static float *download(fsc_device *d, const void *p, size_t n) {
    float *x = malloc(n * sizeof *x + 1);
    assert_ok(fsc_device_download(d, x, p, n * sizeof(float)));
    return x;
}

/* ---- the plug-in itself: needs no GPU ---- */

static void *sym(H *h, const char *name) {
    void *p = dlsym(h->handle, name);
    if (!p) fail_msg("%s does not export %s", h->plugin, name);
    return p;
}

static void test_plugin_loads_and_refuses_cleanly(void **state) {
    H *h = *state;
    if (!h->plugin[0]) SKIP_OR_FAIL("%s\n", h->why);
    if (!h->handle) {
        void *again = dlopen(h->plugin, RTLD_NOW | RTLD_LOCAL);
        fail_msg("dlopen %s: %s", h->plugin, again ? "(worked the second time)" : dlerror());
    }
    fsc_device_open_fn open;
    void *p = sym(h, "fsc_cuda_device_open");
    memcpy(&open, &p, sizeof open);
    sym(h, "fsc_plugin_init");
    sym(h, "fsc_cuda_last_error");
    const fsc_device_ops *ops = NULL;
    void *ctx = NULL;
    assert_err(open(FSC_DEVICE_ABI_VERSION + 1, NULL, &ops, &ctx), FSC_ERR_UNSUPPORTED, "interface version");
    assert_null(ops);
    fsc_status s = open(FSC_DEVICE_ABI_VERSION, NULL, &ops, &ctx);
    if (s == FSC_OK) { /* a GPU: every entry is there, the optional ones included */
        assert_int_equal(ops->abi_version, FSC_DEVICE_ABI_VERSION);
        assert_string_equal(ops->name, "cuda");
        const char *base = (const char *)&ops->alloc; /* from alloc to the last entry: function pointers only */
        size_t nf = (size_t)((const char *)(&ops->host_free + 1) - base) / sizeof(void (*)(void));
        for (size_t i = 0; i < nf; i++) {
            void (*fp)(void);
            memcpy(&fp, base + i * sizeof fp, sizeof fp);
            if (!fp) fail_msg("entry %zu of the cuda table is NULL", i);
        }
        ops->destroy(ctx);
    } else {
        assert_err(s, FSC_ERR_UNSUPPORTED, "cuda: ");
        assert_null(ops);
        print_message("no GPU here, as expected without one: %s\n", fsc_last_error());
    }
    /* the NCCL entry points check their arguments before touching NCCL or a GPU */
    fsc_nccl_comm_open_fn copen;
    fsc_nccl_get_unique_id_fn gid;
    p = sym(h, "fsc_nccl_comm_open");
    memcpy(&copen, &p, sizeof copen);
    p = sym(h, "fsc_nccl_get_unique_id");
    memcpy(&gid, &p, sizeof gid);
    unsigned char id[128] = {1};
    uint32_t not_a_device[16] = {0};
    const fsc_comm_ops *cops = NULL;
    void *cctx = NULL;
    assert_err(copen(FSC_COMM_ABI_VERSION + 1, id, sizeof id, 0, 1, not_a_device, 1.0, 0, &cops, &cctx),
               FSC_ERR_UNSUPPORTED, "interface version");
    assert_err(copen(FSC_COMM_ABI_VERSION, id, sizeof id, 0, 1, not_a_device, 1.0, 0, &cops, &cctx), FSC_ERR_INVALID,
               "not a cuda device");
    assert_err(copen(FSC_COMM_ABI_VERSION, id, sizeof id, 2, 2, not_a_device, 1.0, 0, &cops, &cctx), FSC_ERR_INVALID,
               "rank 2 of world 2");
    assert_err(copen(FSC_COMM_ABI_VERSION, id, 16, 0, 1, not_a_device, 1.0, 0, &cops, &cctx), FSC_ERR_INVALID,
               "16-byte id");
    assert_err(gid(id, 16), FSC_ERR_INVALID, "need 128");
    assert_null(cops);
}

/* NCCL is loaded when a communicator is first needed, not linked: without it, opening one is an error naming the
 * library (the plug-in itself loaded without it in the test above). The first load decides for the process, so
 * this test is registered last. */
static void test_nccl_loaded_on_demand(void **state) {
    H *h = *state;
    if (!h->handle) SKIP_OR_FAIL("%s\n", h->why[0] ? h->why : "the plug-in did not load");
    fsc_nccl_get_unique_id_fn gid;
    void *p = sym(h, "fsc_nccl_get_unique_id");
    memcpy(&gid, &p, sizeof gid);
    unsigned char id[128] = {1};
    setenv("FSC_NCCL_LIBRARY", "/nonexistent/libnccl.so.2", 1);
    assert_err(gid(id, sizeof id), FSC_ERR_UNSUPPORTED, "cannot load /nonexistent/libnccl.so.2 (FSC_NCCL_LIBRARY)");
    unsetenv("FSC_NCCL_LIBRARY");
}

static void test_device_create_reports_reason(void **state) {
    H *h = *state;
    if (h->gpu) {
        assert_string_equal(fsc_device_name(h->gpu), "cuda");
        assert_non_null(h->gpu->ops->gemm_ex);
        assert_non_null(h->gpu->ops->stream_create);
        return;
    }
    fsc_device *d = NULL;
    fsc_status s = fsc_device_create("cuda", NULL, &d);
    assert_int_equal(s, FSC_ERR_UNSUPPORTED);
    assert_null(d);
    const char *msg = fsc_last_error();
    assert_non_null(strstr(msg, "cuda"));
    if (h->plugin[0] && h->handle) /* the plug-in loaded, so the reason is the GPU's, in words */
        assert_non_null(strstr(msg, "GPU"));
    print_message("fsc_device_create(\"cuda\"): %s\n", msg);
    /* and the cpu keeps working */
    float *x;
    assert_ok(fsc_device_alloc(h->cpu, FSC_TAG_ACTS, 64, (void **)&x));
    fsc_device_release(h->cpu, x);
}

/* ---- memory ---- */

/* Offload's host memory (docs/offload.md): a host device of the GPU takes pinned memory from the plug-in's
 * host_alloc, the GPU uploads from it and downloads into it (unstaged), and its ledger is its own. Oracle: the
 * bytes round-trip unchanged; the GPU's ledger does not count the host bytes. */
static void test_pinned_host_memory(void **state) {
    H *h = *state;
    NEED_GPU(h);
    fsc_device *host = NULL;
    assert_ok(fsc_device_create_host(h->gpu, &host));
    assert_non_null(host->mem_ops);
    size_t bytes = ((size_t)3 << 22) + 123, before = fsc_device_current_bytes(h->gpu, FSC_TAG_OPTIM);
    unsigned char *src = NULL, *back = NULL;
    void *d = NULL;
    assert_ok(fsc_device_alloc(host, FSC_TAG_OPTIM, bytes, (void **)&src));
    assert_ok(fsc_device_alloc(host, FSC_TAG_OPTIM, bytes, (void **)&back));
    assert_int_equal(fsc_device_current_bytes(h->gpu, FSC_TAG_OPTIM), before);
    for (size_t i = 0; i < bytes; i++) src[i] = (unsigned char)(next_u64(h) >> 56);
    assert_ok(fsc_device_alloc(h->gpu, FSC_TAG_COMM, bytes, &d));
    assert_ok(fsc_device_upload(h->gpu, d, src, bytes));
    assert_ok(fsc_device_download(h->gpu, back, d, bytes));
    assert_memory_equal(back, src, bytes);
    fsc_device_release(h->gpu, d);
    fsc_device_release(host, src);
    fsc_device_release(host, back);
    fsc_device_free(host);
}

/* Asynchronous copies (ABI 5) with pinned host memory: an upload, a kernel on the main stream that reads it
 * (scale by 2 after the wait made the stream wait for the copy), a download of the result and a second upload
 * queued behind it; waited in reverse order. Oracle: the bytes read back are the source's, doubled exactly. */
static void test_async_copies(void **state) {
    H *h = *state;
    NEED_GPU(h);
    assert_non_null(h->gpu->ops->upload_async);
    fsc_device *host = NULL;
    assert_ok(fsc_device_create_host(h->gpu, &host));
    const size_t n = ((size_t)3 << 20) + 17, bytes = n * sizeof(float);
    float *src = NULL, *back = NULL, *d = NULL, *d2 = NULL;
    assert_ok(fsc_device_alloc(host, FSC_TAG_PARAMS, bytes, (void **)&src));
    assert_ok(fsc_device_alloc(host, FSC_TAG_PARAMS, bytes, (void **)&back));
    for (size_t i = 0; i < n; i++) src[i] = (float)(next_u64(h) >> 40) * 0x1p-20f;
    assert_ok(fsc_device_alloc(h->gpu, FSC_TAG_COMM, bytes, (void **)&d));
    assert_ok(fsc_device_alloc(h->gpu, FSC_TAG_COMM, bytes, (void **)&d2));
    fsc_copy *up = NULL, *up2 = NULL, *down = NULL;
    assert_ok(fsc_device_upload_async(h->gpu, d, src, bytes, &up));
    assert_ok(fsc_device_copy_wait(up));
    assert_ok(FSC_K(h->gpu, scale, d, 2.0f, n));
    assert_ok(fsc_device_download_async(h->gpu, back, d, bytes, &down)); /* after the kernel */
    assert_ok(fsc_device_upload_async(h->gpu, d2, src, bytes, &up2));
    assert_ok(fsc_device_copy_wait(up2)); /* completes the download before it too */
    assert_ok(fsc_device_copy_wait(down));
    for (size_t i = 0; i < n; i++)
        if (back[i] != 2.0f * src[i]) fail_msg("element %zu: %g, want %g", i, (double)back[i], 2.0 * src[i]);
    memset(back, 0, bytes);
    assert_ok(fsc_device_download(h->gpu, back, d2, bytes));
    assert_memory_equal(back, src, bytes);
    fsc_device_release(h->gpu, d);
    fsc_device_release(h->gpu, d2);
    fsc_device_release(host, src);
    fsc_device_release(host, back);
    fsc_device_free(host);
}

/* Copies from two host threads at once (device_ops.h: the simulated communicator's progress thread uploads
 * and downloads a rank's buffers while the rank's thread copies too). Pageable memory goes through the device's
 * two staging buffers; each thread round-trips its own bytes, several staging buffers long, many times.
 * Oracle: every byte read back is the byte its own thread uploaded. */
typedef struct {
    fsc_device *gpu;
    unsigned char *src, *back;
    void *d;
    size_t bytes;
    int rounds, bad;
} copier;

static void *copy_rounds(void *p) {
    copier *k = p;
    for (int r = 0; r < k->rounds && !k->bad; r++) {
        memset(k->back, 0, k->bytes);
        if (fsc_device_upload(k->gpu, k->d, k->src, k->bytes) != FSC_OK ||
            fsc_device_download(k->gpu, k->back, k->d, k->bytes) != FSC_OK || memcmp(k->back, k->src, k->bytes) != 0)
            k->bad = r + 1;
    }
    return NULL;
}

static void test_copies_from_two_threads(void **state) {
    H *h = *state;
    NEED_GPU(h);
    copier k[2];
    pthread_t t[2];
    for (int i = 0; i < 2; i++) {
        k[i] = (copier){.gpu = h->gpu, .bytes = ((size_t)9 << 20) + 4093 * (size_t)i, .rounds = 12};
        k[i].src = malloc(k[i].bytes);
        k[i].back = malloc(k[i].bytes);
        assert_non_null(k[i].src);
        assert_non_null(k[i].back);
        for (size_t j = 0; j < k[i].bytes; j++) k[i].src[j] = (unsigned char)(next_u64(h) >> 56);
        assert_ok(fsc_device_alloc(h->gpu, FSC_TAG_COMM, k[i].bytes, &k[i].d));
    }
    for (int i = 0; i < 2; i++) assert_int_equal(pthread_create(&t[i], NULL, copy_rounds, &k[i]), 0);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < 2; i++) {
        if (k[i].bad) fail_msg("thread %d: round %d read back other bytes than it uploaded", i, k[i].bad);
        fsc_device_release(h->gpu, k[i].d);
        free(k[i].src);
        free(k[i].back);
    }
}

static void test_memory_and_copies(void **state) {
    H *h = *state;
    NEED_GPU(h);
    size_t bytes = ((size_t)3 << 22) + 123; /* more than the staging buffers: chunked copies */
    unsigned char *src = malloc(bytes), *back = malloc(bytes);
    for (size_t i = 0; i < bytes; i++) src[i] = (unsigned char)(next_u64(h) >> 56);
    size_t before = fsc_device_current_bytes(h->gpu, FSC_TAG_ACTS);
    void *a, *b;
    assert_ok(fsc_device_alloc(h->gpu, FSC_TAG_ACTS, bytes, &a));
    assert_ok(fsc_device_alloc(h->gpu, FSC_TAG_ACTS, bytes, &b));
    assert_int_equal(fsc_device_current_bytes(h->gpu, FSC_TAG_ACTS), before + 2 * bytes);
    assert_ok(fsc_device_upload(h->gpu, a, src, bytes));
    assert_ok(fsc_device_copy(h->gpu, b, a, bytes));
    assert_ok(fsc_device_download(h->gpu, back, b, bytes));
    assert_memory_equal(back, src, bytes);
    /* overlapping copy: memmove semantics */
    assert_ok(fsc_device_copy(h->gpu, (char *)a + 1000, a, 5000));
    memmove(src + 1000, src, 5000);
    assert_ok(fsc_device_download(h->gpu, back, a, bytes));
    assert_memory_equal(back, src, bytes);
    assert_ok(fsc_device_memset(h->gpu, b, 0x5a, 777));
    assert_ok(fsc_device_download(h->gpu, back, b, 777));
    for (size_t i = 0; i < 777; i++) assert_int_equal(back[i], 0x5a);
    /* freed memory comes back (cached) and works; calloc zeroes */
    fsc_device_release(h->gpu, b);
    assert_ok(fsc_device_calloc(h->gpu, FSC_TAG_ACTS, bytes, &b));
    assert_ok(fsc_device_download(h->gpu, back, b, bytes));
    for (size_t i = 0; i < bytes; i++)
        if (back[i]) fail_msg("calloc: byte %zu is %d", i, back[i]);
    fsc_device_release(h->gpu, a);
    fsc_device_release(h->gpu, b);
    assert_int_equal(fsc_device_current_bytes(h->gpu, FSC_TAG_ACTS), before);
    assert_ok(fsc_device_sync(h->gpu));
    free(src);
    free(back);
}

/* ---- gemm ---- */

static void test_gemm(void **state) {
    H *h = *state;
    NEED_GPU(h);
    const int M = 67, N = 45, K = 131, batch = 3;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            int lda = (ta ? M : K) + 5, ldb = (tb ? K : N) + 2, ldc = N + 4;
            int64_t sa = (int64_t)(ta ? K : M) * lda + 7, sb = (int64_t)(tb ? N : K) * ldb + 3,
                    sc = (int64_t)M * ldc + 11;
            pair A = pair_rand(h, (size_t)sa * batch, -1, 1), B = pair_rand(h, (size_t)sb * batch, -1, 1);
            pair C = pair_rand(h, (size_t)sc * batch, -1, 1);
            char what[64];
            snprintf(what, sizeof what, "gemm ta=%d tb=%d beta=0.3", ta, tb);
            for (EACH(w))
                assert_ok(FSC_K(DEV(h, w), gemm, ta, tb, M, N, K, 0.7f, PF(A, w), lda, sa, PF(B, w), ldb, sb, 0.3f,
                                PF(C, w), ldc, sc, batch));
            compare(h, what, &C, (size_t)sc * batch, 2e-5);
            pair_free(h, &C);
            C = pair_nan(h, (size_t)sc * batch); /* beta 0 must overwrite NaN; the padding stays NaN on both */
            snprintf(what, sizeof what, "gemm ta=%d tb=%d beta=0", ta, tb);
            for (EACH(w))
                assert_ok(FSC_K(DEV(h, w), gemm, ta, tb, M, N, K, 1.0f, PF(A, w), lda, sa, PF(B, w), ldb, sb, 0.0f,
                                PF(C, w), ldc, sc, batch));
            compare(h, what, &C, (size_t)sc * batch, 2e-5);
            pair_free(h, &A);
            pair_free(h, &B);
            pair_free(h, &C);
        }
    /* K = 0: C = beta C exactly; beta 0 clears NaN */
    pair A = pair_rand(h, 64, -1, 1), C = pair_nan(h, 6 * 7);
    for (EACH(w))
        assert_ok(FSC_K(DEV(h, w), gemm, 0, 0, 6, 7, 0, 1.0f, PF(A, w), 1, 0, PF(A, w), 7, 0, 0.0f, PF(C, w), 7, 0, 1));
    compare(h, "gemm K=0 beta=0", &C, 42, 0.0);
    pair_free(h, &C);
    C = pair_rand(h, 42, -1, 1);
    for (EACH(w))
        assert_ok(FSC_K(DEV(h, w), gemm, 0, 0, 6, 7, 0, 1.0f, PF(A, w), 1, 0, PF(A, w), 7, 0, 2.0f, PF(C, w), 7, 0, 1));
    compare(h, "gemm K=0 beta=2", &C, 42, 0.0);
    /* bad leading dimensions: both refuse */
    for (EACH(w))
        assert_err(FSC_K(DEV(h, w), gemm, 0, 0, 6, 7, 5, 1.0f, PF(A, w), 4, 0, PF(A, w), 7, 0, 0.0f, PF(C, w), 7, 0, 1),
                   FSC_ERR_INVALID, "lda 4");
    pair_free(h, &A);
    pair_free(h, &C);
}

/* A device opened with FSC_CUDA_TF32=1: products of values already rounded to bf16 lose nothing in TF32 (the f32
 * bound of test_gemm), arbitrary f32 values do lose bits (the error is TF32's, above the f32 bound: TF32 is on),
 * and a value of the variable other than 0 and 1 is refused by name. */
static void test_gemm_tf32(void **state) {
    H *h = *state;
    NEED_GPU(h);
    fsc_device *tf = NULL;
    setenv("FSC_CUDA_TF32", "yes", 1);
    fsc_status bad = fsc_device_create("cuda", NULL, &tf);
    setenv("FSC_CUDA_TF32", "1", 1);
    fsc_status ok = bad == FSC_OK ? FSC_ERR_INTERNAL : fsc_device_create("cuda", NULL, &tf);
    unsetenv("FSC_CUDA_TF32");
    assert_int_equal(bad, FSC_ERR_INVALID);
    assert_ok(ok);
    const int M = 96, N = 80, K = 512;
    for (int rounded = 1; rounded >= 0; rounded--) {
        float *a = host_rand(h, (size_t)M * K, -1, 1), *b = host_rand(h, (size_t)K * N, -1, 1);
        if (rounded) { /* to bf16 and back: the values a bf16 parameter copy holds */
            uint16_t *t = malloc((size_t)(M > N ? M : N) * K * 2);
            fsc_convert_host(t, FSC_BF16, a, FSC_F32, (size_t)M * K);
            fsc_convert_host(a, FSC_F32, t, FSC_BF16, (size_t)M * K);
            fsc_convert_host(t, FSC_BF16, b, FSC_F32, (size_t)K * N);
            fsc_convert_host(b, FSC_F32, t, FSC_BF16, (size_t)K * N);
            free(t);
        }
        float *ca, *cb, *cc, *ga, *gb, *gc;
        assert_ok(fsc_device_alloc(h->cpu, FSC_TAG_WORKSPACE, (size_t)M * K * 4, (void **)&ca));
        assert_ok(fsc_device_alloc(h->cpu, FSC_TAG_WORKSPACE, (size_t)K * N * 4, (void **)&cb));
        assert_ok(fsc_device_alloc(h->cpu, FSC_TAG_WORKSPACE, (size_t)M * N * 4, (void **)&cc));
        assert_ok(fsc_device_alloc(tf, FSC_TAG_WORKSPACE, (size_t)M * K * 4, (void **)&ga));
        assert_ok(fsc_device_alloc(tf, FSC_TAG_WORKSPACE, (size_t)K * N * 4, (void **)&gb));
        assert_ok(fsc_device_alloc(tf, FSC_TAG_WORKSPACE, (size_t)M * N * 4, (void **)&gc));
        assert_ok(fsc_device_upload(h->cpu, ca, a, (size_t)M * K * 4));
        assert_ok(fsc_device_upload(h->cpu, cb, b, (size_t)K * N * 4));
        assert_ok(fsc_device_upload(tf, ga, a, (size_t)M * K * 4));
        assert_ok(fsc_device_upload(tf, gb, b, (size_t)K * N * 4));
        assert_ok(FSC_K(h->cpu, gemm, 0, 0, M, N, K, 1.0f, ca, K, 0, cb, N, 0, 0.0f, cc, N, 0, 1));
        assert_ok(FSC_K(tf, gemm, 0, 0, M, N, K, 1.0f, ga, K, 0, gb, N, 0, 0.0f, gc, N, 0, 1));
        float *c = download(h->cpu, cc, (size_t)M * N), *g = download(tf, gc, (size_t)M * N);
        if (rounded) {
            compare_host("gemm tf32, bf16 values", c, g, (size_t)M * N, 2e-5);
        } else {
            double maxref = 0, maxerr = 0;
            for (size_t i = 0; i < (size_t)M * N; i++) {
                maxref = fmax(maxref, fabs((double)c[i]));
                maxerr = fmax(maxerr, fabs((double)g[i] - (double)c[i]));
            }
            print_message("gemm tf32, f32 values: normalized error %.3g\n", maxerr / maxref);
            if (!(maxerr / maxref > 2e-5 && maxerr / maxref < 1e-2))
                fail_msg("gemm tf32, f32 values: normalized error %.3g, not TF32's (between 2e-5 and 1e-2)",
                         maxerr / maxref);
        }
        free(a), free(b), free(c), free(g);
        fsc_device_release(h->cpu, ca), fsc_device_release(h->cpu, cb), fsc_device_release(h->cpu, cc);
        fsc_device_release(tf, ga), fsc_device_release(tf, gb), fsc_device_release(tf, gc);
    }
    fsc_device_free(tf);
}

/* bf16/f16 inputs: the reference is the cpu f32 gemm of the same (rounded) values. */
static void test_gemm_ex(void **state) {
    H *h = *state;
    NEED_GPU(h);
    if (!h->gpu->ops->gemm_ex) fail_msg("the cuda device has no gemm_ex");
    const int M = 70, N = 33, K = 257;
    const fsc_dtype types[2] = {FSC_BF16, FSC_F16};
    for (int ti = 0; ti < 2; ti++)
        for (int out16 = 0; out16 < 2; out16++) {
            fsc_dtype ab = types[ti], ct = out16 ? ab : FSC_F32;
            float *a = host_rand(h, (size_t)M * K, -1, 1), *b = host_rand(h, (size_t)N * K, -1, 1); /* B^T */
            uint16_t *a16 = malloc((size_t)M * K * 2), *b16 = malloc((size_t)N * K * 2);
            fsc_convert_host(a16, ab, a, FSC_F32, (size_t)M * K);
            fsc_convert_host(b16, ab, b, FSC_F32, (size_t)N * K);
            fsc_convert_host(a, FSC_F32, a16, ab, (size_t)M * K); /* the exact values the GPU sees */
            fsc_convert_host(b, FSC_F32, b16, ab, (size_t)N * K);
            float *ref_c, *ga, *gb, *gc;
            assert_ok(fsc_device_alloc(h->cpu, FSC_TAG_WORKSPACE, (size_t)M * N * 4, (void **)&ref_c));
            float *ca, *cb;
            assert_ok(fsc_device_alloc(h->cpu, FSC_TAG_WORKSPACE, (size_t)M * K * 4, (void **)&ca));
            assert_ok(fsc_device_alloc(h->cpu, FSC_TAG_WORKSPACE, (size_t)N * K * 4, (void **)&cb));
            assert_ok(fsc_device_upload(h->cpu, ca, a, (size_t)M * K * 4));
            assert_ok(fsc_device_upload(h->cpu, cb, b, (size_t)N * K * 4));
            assert_ok(FSC_K(h->cpu, gemm, 0, 1, M, N, K, 1.0f, ca, K, 0, cb, K, 0, 0.0f, ref_c, N, 0, 1));
            assert_ok(fsc_device_alloc(h->gpu, FSC_TAG_WORKSPACE, (size_t)M * K * 2, (void **)&ga));
            assert_ok(fsc_device_alloc(h->gpu, FSC_TAG_WORKSPACE, (size_t)N * K * 2, (void **)&gb));
            assert_ok(fsc_device_alloc(h->gpu, FSC_TAG_WORKSPACE, (size_t)M * N * 4, (void **)&gc));
            assert_ok(fsc_device_upload(h->gpu, ga, a16, (size_t)M * K * 2));
            assert_ok(fsc_device_upload(h->gpu, gb, b16, (size_t)N * K * 2));
            assert_ok(h->gpu->ops->gemm_ex(h->gpu->ctx, 0, 1, M, N, K, 1.0f, ga, K, 0, gb, K, 0, ab, 0.0f, gc, N, 0,
                                           ct, 1));
            float *c = download(h->cpu, ref_c, (size_t)M * N), *g = malloc((size_t)M * N * 4);
            if (ct == FSC_F32) {
                assert_ok(fsc_device_download(h->gpu, g, gc, (size_t)M * N * 4));
            } else {
                uint16_t *g16 = malloc((size_t)M * N * 2);
                assert_ok(fsc_device_download(h->gpu, g16, gc, (size_t)M * N * 2));
                fsc_convert_host(g, FSC_F32, g16, ct, (size_t)M * N);
                free(g16);
            }
            char what[64];
            snprintf(what, sizeof what, "gemm_ex %s -> %s", fsc_dtype_name(ab), fsc_dtype_name(ct));
            /* f32 out: only the order of the f32 sums differs; 16-bit out: one rounding of the result */
            compare_host(what, c, g, (size_t)M * N, ct == FSC_F32 ? 2e-5 : (ab == FSC_BF16 ? 1.0 / 128 : 1.0 / 1024));
            free(a), free(b), free(a16), free(b16), free(c), free(g);
            fsc_device_release(h->cpu, ref_c), fsc_device_release(h->cpu, ca), fsc_device_release(h->cpu, cb);
            fsc_device_release(h->gpu, ga), fsc_device_release(h->gpu, gb), fsc_device_release(h->gpu, gc);
        }
}

/* ---- elementwise ---- */

static void test_convert(void **state) {
    H *h = *state;
    NEED_GPU(h);
    const size_t n = 4099;
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) /* every scale: f16 overflow and subnormals, bf16 ties */
        x[i] = ldexpf(urand(h, -2, 2), (int)(next_u64(h) % 48) - 30);
    const fsc_dtype t[3] = {FSC_F32, FSC_BF16, FSC_F16};
    for (int si = 0; si < 3; si++)
        for (int di = 0; di < 3; di++) {
            size_t ss = fsc_dtype_size(t[si]), ds = fsc_dtype_size(t[di]);
            void *src = malloc(n * ss);
            fsc_convert_host(src, t[si], x, FSC_F32, n);
            /* s holds n of the larger type: it is converted in place below */
            pair s = pair_of(h, NULL, n * (ss > ds ? ss : ds)), d = pair_nan(h, n);
            assert_ok(fsc_device_upload(h->cpu, s.c, src, n * ss));
            assert_ok(fsc_device_upload(h->gpu, s.g, src, n * ss));
            for (EACH(w)) assert_ok(FSC_K(DEV(h, w), convert, P(d, w), t[di], P(s, w), t[si], n));
            unsigned char *c = malloc(n * ds), *g = malloc(n * ds);
            assert_ok(fsc_device_download(h->cpu, c, d.c, n * ds));
            assert_ok(fsc_device_download(h->gpu, g, d.g, n * ds));
            for (size_t i = 0; i < n * ds; i++)
                if (c[i] != g[i])
                    fail_msg("convert %s -> %s: byte %zu differs (element %zu = %.9g)", fsc_dtype_name(t[si]),
                             fsc_dtype_name(t[di]), i, i / ds, (double)x[i / ds]);
            /* in place (dst == src), where the sizes differ as well */
            for (EACH(w)) assert_ok(FSC_K(DEV(h, w), convert, P(s, w), t[di], P(s, w), t[si], n));
            assert_ok(fsc_device_download(h->cpu, c, s.c, n * ds));
            assert_ok(fsc_device_download(h->gpu, g, s.g, n * ds));
            if (memcmp(c, g, n * ds) != 0)
                fail_msg("convert in place %s -> %s differs", fsc_dtype_name(t[si]), fsc_dtype_name(t[di]));
            free(src), free(c), free(g);
            pair_free(h, &s), pair_free(h, &d);
        }
    pair s = pair_rand(h, 8, -1, 1);
    for (EACH(w)) assert_err(FSC_K(DEV(h, w), convert, P(s, w), FSC_I32, P(s, w), FSC_F32, 8), FSC_ERR_INVALID, "i32");
    pair_free(h, &s);
    free(x);
}

static void test_elementwise(void **state) {
    H *h = *state;
    NEED_GPU(h);
    const size_t n = 100003;
    pair x = pair_rand(h, n, -4, 4), y = pair_rand(h, n, -4, 4), out = pair_nan(h, n);
    for (EACH(w)) assert_ok(FSC_K(DEV(h, w), scale, PF(y, w), 0.37f, n));
    compare(h, "scale", &y, n, 0.0);
    for (EACH(w)) assert_ok(FSC_K(DEV(h, w), axpy, PF(y, w), -1.3f, PF(x, w), n));
    compare(h, "axpy", &y, n, 0.0);
    for (EACH(w)) assert_ok(FSC_K(DEV(h, w), add, PF(out, w), PF(x, w), PF(y, w), n));
    compare(h, "add", &out, n, 0.0);
    pair_free(h, &out);
    out = pair_nan(h, n);
    for (EACH(w)) assert_ok(FSC_K(DEV(h, w), gelu_forward, PF(out, w), PF(x, w), n));
    compare(h, "gelu_forward", &out, n, 2e-6);
    pair_free(h, &out);
    out = pair_nan(h, n);
    for (EACH(w)) assert_ok(FSC_K(DEV(h, w), gelu_backward, PF(out, w), PF(x, w), PF(y, w), n));
    compare(h, "gelu_backward", &out, n, 4e-6);
    pair_free(h, &x), pair_free(h, &y), pair_free(h, &out);
}

static void test_bias(void **state) {
    H *h = *state;
    NEED_GPU(h);
    const size_t N = 1537; /* more than one chunk of rows, not a multiple of anything */
    const int OC = 389;
    pair out = pair_rand(h, N * OC, -2, 2), bias = pair_rand(h, OC, -1, 1);
    for (EACH(w)) assert_ok(FSC_K(DEV(h, w), bias_add, PF(out, w), PF(bias, w), N, OC));
    compare(h, "bias_add", &out, N * OC, 0.0);
    float *init = host_rand(h, OC, -1, 1);
    pair db = pair_of(h, init, OC * sizeof(float));
    for (EACH(w)) assert_ok(FSC_K(DEV(h, w), bias_grad, PF(db, w), PF(out, w), N, OC));
    compare(h, "bias_grad", &db, OC, 5e-5);
    float *g1 = download(h->gpu, db.g, OC); /* determinism: again from the same start */
    assert_ok(fsc_device_upload(h->gpu, db.g, init, OC * sizeof(float)));
    assert_ok(FSC_K(h->gpu, bias_grad, (float *)db.g, (float *)out.g, N, OC));
    float *g2 = download(h->gpu, db.g, OC);
    same_bits_twice(h, "bias_grad", g1, g2, OC * sizeof(float));
    free(init), free(g1), free(g2);
    pair_free(h, &out), pair_free(h, &bias), pair_free(h, &db);
}

/* ---- embedding and layer norm ---- */

static pair pair_tokens(H *h, size_t n, int V, int allow_negative_at) {
    int32_t *t = malloc(n * sizeof *t);
    for (size_t i = 0; i < n; i++) t[i] = (int32_t)(next_u64(h) % (uint64_t)V);
    if (allow_negative_at >= 0) t[allow_negative_at] = -3;
    pair p = pair_of(h, t, n * sizeof *t);
    free(t);
    return p;
}

static void test_encoder(void **state) {
    H *h = *state;
    NEED_GPU(h);
    const int B = 3, T = 37, C = 131, V = 17; /* a small vocabulary: tokens repeat often */
    pair tok = pair_tokens(h, (size_t)B * T, V, -1);
    pair wte = pair_rand(h, (size_t)V * C, -1, 1), wpe = pair_rand(h, (size_t)T * C, -1, 1);
    pair out = pair_nan(h, (size_t)B * T * C);
    for (EACH(w))
        assert_ok(FSC_K(DEV(h, w), encoder_forward, PF(out, w), (int32_t *)P(tok, w), PF(wte, w), PF(wpe, w), B, T, C));
    compare(h, "encoder_forward", &out, (size_t)B * T * C, 0.0);
    /* backward accumulates into random gradients, in the cpu's order: the same bits */
    pair dwte = pair_rand(h, (size_t)V * C, -1, 1), dwpe = pair_rand(h, (size_t)T * C, -1, 1);
    for (EACH(w))
        assert_ok(FSC_K(DEV(h, w), encoder_backward, PF(dwte, w), PF(dwpe, w), PF(out, w), (int32_t *)P(tok, w), B, T, C));
    compare(h, "encoder_backward dwte", &dwte, (size_t)V * C, 0.0);
    compare(h, "encoder_backward dwpe", &dwpe, (size_t)T * C, 0.0);
    pair bad = pair_tokens(h, (size_t)B * T, V, 40);
    for (EACH(w))
        assert_err(FSC_K(DEV(h, w), encoder_backward, PF(dwte, w), PF(dwpe, w), PF(out, w), (int32_t *)P(bad, w), B, T,
                         C),
                   FSC_ERR_INVALID, "negative");
    assert_ok(fsc_device_sync(h->gpu));
    pair_free(h, &tok), pair_free(h, &wte), pair_free(h, &wpe), pair_free(h, &out);
    pair_free(h, &dwte), pair_free(h, &dwpe), pair_free(h, &bad);
}

static void test_layernorm(void **state) {
    H *h = *state;
    NEED_GPU(h);
    const size_t N = 1100;
    const int C = 771;
    pair inp = pair_rand(h, N * C, -3, 5), wt = pair_rand(h, C, 0.5f, 1.5f), bs = pair_rand(h, C, -1, 1);
    pair out = pair_nan(h, N * C), mean = pair_nan(h, N), rstd = pair_nan(h, N);
    for (EACH(w))
        assert_ok(FSC_K(DEV(h, w), layernorm_forward, PF(out, w), PF(mean, w), PF(rstd, w), PF(inp, w), PF(wt, w),
                        PF(bs, w), N, C));
    compare(h, "layernorm_forward out", &out, N * C, 1e-5);
    compare(h, "layernorm_forward mean", &mean, N, 1e-6);
    compare(h, "layernorm_forward rstd", &rstd, N, 1e-6);
    /* backward from the cpu's saved statistics on both, so only the backward is compared */
    float *m = download(h->cpu, mean.c, N), *r = download(h->cpu, rstd.c, N);
    assert_ok(fsc_device_upload(h->gpu, mean.g, m, N * sizeof(float)));
    assert_ok(fsc_device_upload(h->gpu, rstd.g, r, N * sizeof(float)));
    float *dinp0 = host_rand(h, N * C, -1, 1), *dw0 = host_rand(h, C, -1, 1), *db0 = host_rand(h, C, -1, 1);
    pair dout = pair_rand(h, N * C, -1, 1), dinp = pair_of(h, dinp0, N * C * sizeof(float));
    pair dw = pair_of(h, dw0, C * sizeof(float)), db = pair_of(h, db0, C * sizeof(float));
    for (EACH(w))
        assert_ok(FSC_K(DEV(h, w), layernorm_backward, PF(dinp, w), PF(dw, w), PF(db, w), PF(dout, w), PF(inp, w),
                        PF(wt, w), PF(mean, w), PF(rstd, w), N, C));
    compare(h, "layernorm_backward dinp", &dinp, N * C, 2e-5);
    compare(h, "layernorm_backward dw", &dw, C, 5e-5);
    compare(h, "layernorm_backward db", &db, C, 5e-5);
    /* determinism: the same bits from the same start, with each half run alone (ABI 6: the split backward) */
    float *dw1 = download(h->gpu, dw.g, C), *db1 = download(h->gpu, db.g, C), *dx1 = download(h->gpu, dinp.g, N * C);
    assert_ok(fsc_device_upload(h->gpu, dinp.g, dinp0, N * C * sizeof(float)));
    assert_ok(fsc_device_upload(h->gpu, dw.g, dw0, C * sizeof(float)));
    assert_ok(fsc_device_upload(h->gpu, db.g, db0, C * sizeof(float)));
    assert_ok(FSC_K(h->gpu, layernorm_backward, NULL, (float *)dw.g, (float *)db.g, (float *)dout.g, (float *)inp.g,
                    (float *)wt.g, (float *)mean.g, (float *)rstd.g, N, C));
    assert_ok(FSC_K(h->gpu, layernorm_backward, (float *)dinp.g, NULL, NULL, (float *)dout.g, (float *)inp.g,
                    (float *)wt.g, (float *)mean.g, (float *)rstd.g, N, C));
    float *dw2 = download(h->gpu, dw.g, C), *db2 = download(h->gpu, db.g, C), *dx2 = download(h->gpu, dinp.g, N * C);
    same_bits_twice(h, "layernorm_backward dw", dw1, dw2, C * sizeof(float));
    same_bits_twice(h, "layernorm_backward db", db1, db2, C * sizeof(float));
    same_bits_twice(h, "layernorm_backward dinp", dx1, dx2, N * C * sizeof(float));
    free(m), free(r), free(dinp0), free(dw0), free(db0), free(dw1), free(db1), free(dx1), free(dw2), free(db2), free(dx2);
    pair_free(h, &inp), pair_free(h, &wt), pair_free(h, &bs), pair_free(h, &out), pair_free(h, &mean);
    pair_free(h, &rstd), pair_free(h, &dout), pair_free(h, &dinp), pair_free(h, &dw), pair_free(h, &db);
}

/* ---- attention ---- */

static void test_attention_layouts(void **state) {
    H *h = *state;
    NEED_GPU(h);
    const int B = 2, T = 33, NH = 3, HS = 17;
    const size_t n = (size_t)B * T * NH * HS;
    pair qkv = pair_rand(h, 3 * n, -1, 1), q = pair_nan(h, n), k = pair_nan(h, n), v = pair_nan(h, n);
    for (EACH(w)) assert_ok(FSC_K(DEV(h, w), qkv_split, PF(q, w), PF(k, w), PF(v, w), PF(qkv, w), B, T, NH, HS));
    compare(h, "qkv_split q", &q, n, 0.0);
    compare(h, "qkv_split k", &k, n, 0.0);
    compare(h, "qkv_split v", &v, n, 0.0);
    pair dqkv = pair_nan(h, 3 * n);
    for (EACH(w)) assert_ok(FSC_K(DEV(h, w), qkv_merge, PF(dqkv, w), PF(q, w), PF(k, w), PF(v, w), B, T, NH, HS));
    compare(h, "qkv_merge", &dqkv, 3 * n, 0.0);
    pair out = pair_nan(h, n), back = pair_nan(h, n);
    for (EACH(w)) assert_ok(FSC_K(DEV(h, w), heads_merge, PF(out, w), PF(q, w), B, T, NH, HS));
    compare(h, "heads_merge", &out, n, 0.0);
    for (EACH(w)) assert_ok(FSC_K(DEV(h, w), heads_split, PF(back, w), PF(out, w), B, T, NH, HS));
    compare(h, "heads_split", &back, n, 0.0);
    pair_free(h, &qkv), pair_free(h, &q), pair_free(h, &k), pair_free(h, &v);
    pair_free(h, &dqkv), pair_free(h, &out), pair_free(h, &back);
}

static void test_softmax(void **state) {
    H *h = *state;
    NEED_GPU(h);
    const int BH = 5, T = 75;
    const size_t n = (size_t)BH * T * T;
    pair pre = pair_rand(h, n, -4, 4), att = pair_nan(h, n);
    for (EACH(w)) assert_ok(FSC_K(DEV(h, w), softmax_causal_forward, PF(att, w), PF(pre, w), BH, T, 0.3f));
    compare(h, "softmax_causal_forward", &att, n, 1e-6);
    float *g = download(h->gpu, att.g, n);
    for (size_t r = 0; r < (size_t)BH * T; r++)
        for (int j = (int)(r % T) + 1; j < T; j++)
            if (g[r * T + j] != 0.0f || signbit(g[r * T + j])) fail_msg("softmax: row %zu column %d above the diagonal", r, j);
    free(g);
    pair datt = pair_rand(h, n, -1, 1), dpre = pair_nan(h, n);
    for (EACH(w))
        assert_ok(FSC_K(DEV(h, w), softmax_causal_backward, PF(dpre, w), PF(datt, w), PF(att, w), BH, T, 0.3f));
    compare(h, "softmax_causal_backward", &dpre, n, 1e-5);
    pair_free(h, &pre), pair_free(h, &att), pair_free(h, &datt), pair_free(h, &dpre);
}

static void test_cross_entropy(void **state) {
    H *h = *state;
    NEED_GPU(h);
    const size_t N = 37;
    const int V = 5003, ld = 5011;
    pair logits = pair_rand(h, N * ld, -8, 8), tgt = pair_tokens(h, N, V, -1), losses = pair_nan(h, N);
    for (EACH(w))
        assert_ok(FSC_K(DEV(h, w), xent_forward, PF(losses, w), PF(logits, w), (int32_t *)P(tgt, w), N, V, ld));
    compare(h, "xent_forward", &losses, N, 1e-6);
    pair d = pair_nan(h, N * ld);
    for (EACH(w))
        assert_ok(FSC_K(DEV(h, w), xent_backward, PF(d, w), PF(logits, w), (int32_t *)P(tgt, w), N, V, ld, 1.0f / N));
    float *c = download(h->cpu, d.c, N * ld), *g = download(h->gpu, d.g, N * ld);
    for (size_t r = 0; r < N; r++) {
        compare_host("xent_backward", c + r * ld, g + r * ld, (size_t)V, 1e-6);
        for (int j = V; j < ld; j++)
            if (!isnan(g[r * ld + j])) fail_msg("xent_backward wrote column %d >= V of row %zu", j, r);
    }
    /* in place (ABI 7, the split backward's LM heads): the GPU's bits of dlogits over the logits */
    for (EACH(w))
        assert_ok(FSC_K(DEV(h, w), xent_backward, PF(logits, w), PF(logits, w), (int32_t *)P(tgt, w), N, V, ld,
                        1.0f / N));
    float *gi = download(h->gpu, logits.g, N * ld);
    for (size_t r = 0; r < N; r++)
        if (memcmp(gi + r * ld, g + r * ld, (size_t)V * sizeof(float)) != 0)
            fail_msg("xent_backward in place differs from its out-of-place bits in row %zu", r);
    free(c), free(g), free(gi);
    pair_free(h, &logits), pair_free(h, &tgt), pair_free(h, &losses), pair_free(h, &d);
}

/* ---- reductions ---- */

static void test_reductions(void **state) {
    H *h = *state;
    NEED_GPU(h);
    const size_t n = ((size_t)1 << 20) + 12345;
    float *x = host_rand(h, n, -3, 3);
    pair p = pair_of(h, x, n * sizeof(float));
    double sc, sg, sg2, sabs = 0.0;
    for (size_t i = 0; i < n; i++) sabs += fabs((double)x[i]);
    assert_ok(FSC_K(h->cpu, sum, &sc, (float *)p.c, n));
    assert_ok(FSC_K(h->gpu, sum, &sg, (float *)p.g, n));
    assert_ok(FSC_K(h->gpu, sum, &sg2, (float *)p.g, n));
    if (!(fabs(sg - sc) <= 1e-12 * sabs)) fail_msg("sum: cpu %.17g, cuda %.17g", sc, sg);
    same_bits_twice(h, "sum", &sg, &sg2, sizeof sg);
    float mc, mg;
    int fc, fg;
    assert_ok(FSC_K(h->cpu, absmax, &mc, &fc, (float *)p.c, n));
    assert_ok(FSC_K(h->gpu, absmax, &mg, &fg, (float *)p.g, n));
    assert_true(mc == mg && fc == 0 && fg == 0);
    /* the fixed-point sum of squares is exact: the same 128 bits, carries included */
    uint64_t ac[2] = {~0ull - 5, 7}, ag[2] = {~0ull - 5, 7};
    assert_ok(FSC_K(h->cpu, sumsq_fixed, ac, (float *)p.c, n, 40));
    assert_ok(FSC_K(h->gpu, sumsq_fixed, ag, (float *)p.g, n, 40));
    if (ac[0] != ag[0] || ac[1] != ag[1])
        fail_msg("sumsq_fixed: cpu %llu:%llu, cuda %llu:%llu", (unsigned long long)ac[1], (unsigned long long)ac[0],
                 (unsigned long long)ag[1], (unsigned long long)ag[0]);
    assert_true(ac[1] > 7); /* the low word did carry */
    for (EACH(w)) assert_err(FSC_K(DEV(h, w), sumsq_fixed, ac, PF(p, w), n, 62), FSC_ERR_INVALID, "does not fit");
    for (EACH(w)) assert_err(FSC_K(DEV(h, w), sumsq_fixed, ac, PF(p, w), n, 2000), FSC_ERR_INVALID, "shift 2000");
    /* an inf, then a NaN: flagged on both */
    size_t at = next_u64(h) % n;
    x[at] = -INFINITY;
    assert_ok(fsc_device_upload(h->cpu, p.c, x, n * sizeof(float)));
    assert_ok(fsc_device_upload(h->gpu, p.g, x, n * sizeof(float)));
    assert_ok(FSC_K(h->cpu, absmax, &mc, &fc, (float *)p.c, n));
    assert_ok(FSC_K(h->gpu, absmax, &mg, &fg, (float *)p.g, n));
    assert_true(isinf(mc) && isinf(mg) && fc == 1 && fg == 1);
    x[next_u64(h) % n] = NAN;
    assert_ok(fsc_device_upload(h->cpu, p.c, x, n * sizeof(float)));
    assert_ok(fsc_device_upload(h->gpu, p.g, x, n * sizeof(float)));
    assert_ok(FSC_K(h->cpu, absmax, &mc, &fc, (float *)p.c, n));
    assert_ok(FSC_K(h->gpu, absmax, &mg, &fg, (float *)p.g, n));
    assert_true(isnan(mc) && isnan(mg) && fc == 1 && fg == 1);
    free(x);
    pair_free(h, &p);
}

/* ---- optimizers: the same float expressions, the same bits ---- */

static void test_optimizers(void **state) {
    H *h = *state;
    NEED_GPU(h);
    const size_t n = 50001;
    pair p = pair_rand(h, n, -1, 1), g = pair_rand(h, n, -0.1f, 0.1f), m = pair_rand(h, n, -0.01f, 0.01f);
    pair v = pair_rand(h, n, 1e-6f, 1e-3f);
    float bc1 = 1.0f - powf(0.9f, 3.0f), bc2 = 1.0f - powf(0.999f, 3.0f);
    for (EACH(w))
        assert_ok(FSC_K(DEV(h, w), adamw, PF(p, w), PF(g, w), PF(m, w), PF(v, w), n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f,
                        bc1, bc2));
    compare(h, "adamw p", &p, n, 0.0);
    compare(h, "adamw m", &m, n, 0.0);
    compare(h, "adamw v", &v, n, 0.0);
    for (int first = 1; first >= 0; first--)
        for (EACH(w)) assert_ok(FSC_K(DEV(h, w), sgd, PF(p, w), PF(g, w), PF(m, w), n, 0.05f, 0.9f, 0.01f, first));
    compare(h, "sgd p", &p, n, 0.0);
    compare(h, "sgd momentum buffer", &m, n, 0.0);
    for (EACH(w)) assert_ok(FSC_K(DEV(h, w), sgd, PF(p, w), PF(g, w), NULL, n, 0.05f, 0.0f, 0.0f, 0));
    compare(h, "sgd without momentum", &p, n, 0.0);
    for (EACH(w)) assert_err(FSC_K(DEV(h, w), sgd, PF(p, w), PF(g, w), NULL, n, 0.05f, 0.9f, 0.0f, 0), FSC_ERR_INVALID,
                             "momentum buffer");
    pair_free(h, &p), pair_free(h, &g), pair_free(h, &m), pair_free(h, &v);
}

/* ---- streams, events, errors found on the GPU ---- */

static void test_streams_and_events(void **state) {
    H *h = *state;
    NEED_GPU(h);
    const fsc_device_ops *o = h->gpu->ops;
    void *ctx = h->gpu->ctx, *side = NULL, *ev = NULL;
    const size_t n = 1 << 20;
    float *x = host_rand(h, n, -1, 1), *y = host_rand(h, n, -1, 1);
    float *dx, *dy;
    assert_ok(fsc_device_alloc(h->gpu, FSC_TAG_ACTS, n * 4, (void **)&dx));
    assert_ok(fsc_device_alloc(h->gpu, FSC_TAG_ACTS, n * 4, (void **)&dy));
    assert_ok(fsc_device_upload(h->gpu, dx, x, n * 4));
    assert_ok(fsc_device_upload(h->gpu, dy, y, n * 4));
    assert_ok(fsc_device_sync(h->gpu));
    assert_ok(o->stream_create(ctx, &side));
    assert_ok(o->set_stream(ctx, side));
    for (int i = 0; i < 8; i++) assert_ok(o->scale(ctx, dx, 2.0f, n)); /* x *= 256 on the side stream */
    assert_ok(o->event_record(ctx, &ev, NULL));
    assert_ok(o->set_stream(ctx, NULL));
    assert_ok(o->stream_wait(ctx, NULL, ev)); /* main waits for the side stream */
    assert_ok(o->add(ctx, dy, dx, dy, n));
    float *r = download(h->gpu, dy, n);
    for (size_t i = 0; i < n; i++)
        if (r[i] != 256.0f * x[i] + y[i]) fail_msg("stream order: element %zu is %.9g", i, (double)r[i]);
    void *again = ev;
    assert_ok(o->event_record(ctx, &again, side)); /* recording again reuses the event */
    assert_ptr_equal(again, ev);
    assert_err(o->set_stream(ctx, (void *)x), FSC_ERR_INVALID, "not a stream");
    assert_ok(o->stream_destroy(ctx, side));
    assert_err(o->stream_destroy(ctx, side), FSC_ERR_INVALID, "not a stream");
    assert_ok(fsc_device_sync(h->gpu));
    fsc_device_release(h->gpu, dx);
    fsc_device_release(h->gpu, dy);
    free(x), free(y), free(r);
}

/* ---- kernels of modern models: RMS norm, rotary embeddings, SiLU/SwiGLU, products, squared error ---- */

static void test_rmsnorm_rope(void **state) {
    H *h = *state;
    NEED_GPU(h);
    const size_t N = 1100;
    const int C = 771;
    pair inp = pair_rand(h, N * C, -3, 5), wt = pair_rand(h, C, 0.5f, 1.5f);
    pair out = pair_nan(h, N * C), rstd = pair_nan(h, N);
    for (EACH(w))
        assert_ok(FSC_K(DEV(h, w), rmsnorm_forward, PF(out, w), PF(rstd, w), PF(inp, w), PF(wt, w), N, C, 1e-5f));
    compare(h, "rmsnorm_forward out", &out, N * C, 1e-5);
    compare(h, "rmsnorm_forward rstd", &rstd, N, 1e-6);
    float *r = download(h->cpu, rstd.c, N); /* backward from the cpu's statistics on both */
    assert_ok(fsc_device_upload(h->gpu, rstd.g, r, N * sizeof(float)));
    float *dinp0 = host_rand(h, N * C, -1, 1), *dw0 = host_rand(h, C, -1, 1);
    pair dout = pair_rand(h, N * C, -1, 1), dinp = pair_of(h, dinp0, N * C * sizeof(float));
    pair dw = pair_of(h, dw0, C * sizeof(float));
    for (EACH(w))
        assert_ok(FSC_K(DEV(h, w), rmsnorm_backward, PF(dinp, w), PF(dw, w), PF(dout, w), PF(inp, w), PF(wt, w),
                        PF(rstd, w), N, C));
    compare(h, "rmsnorm_backward dinp", &dinp, N * C, 2e-5);
    compare(h, "rmsnorm_backward dw", &dw, C, 5e-5);
    float *dw1 = download(h->gpu, dw.g, C), *dx1 = download(h->gpu, dinp.g, N * C);
    assert_ok(fsc_device_upload(h->gpu, dw.g, dw0, C * sizeof(float)));
    assert_ok(fsc_device_upload(h->gpu, dinp.g, dinp0, N * C * sizeof(float)));
    assert_ok(FSC_K(h->gpu, rmsnorm_backward, NULL, (float *)dw.g, (float *)dout.g, (float *)inp.g, (float *)wt.g,
                    (float *)rstd.g, N, C)); /* each half alone (ABI 6): the bits of both together */
    assert_ok(FSC_K(h->gpu, rmsnorm_backward, (float *)dinp.g, NULL, (float *)dout.g, (float *)inp.g, (float *)wt.g,
                    (float *)rstd.g, N, C));
    float *dw2 = download(h->gpu, dw.g, C), *dx2 = download(h->gpu, dinp.g, N * C);
    same_bits_twice(h, "rmsnorm_backward dw", dw1, dw2, C * sizeof(float));
    same_bits_twice(h, "rmsnorm_backward dinp", dx1, dx2, N * C * sizeof(float));
    free(r), free(dinp0), free(dw0), free(dw1), free(dw2), free(dx1), free(dx2);
    pair_free(h, &inp), pair_free(h, &wt), pair_free(h, &out), pair_free(h, &rstd), pair_free(h, &dout);
    pair_free(h, &dinp), pair_free(h, &dw);
    /* rotary: q and k heads inside packed rows (ld > H D; the columns past them stay NaN on both), positions
     * up to 300, in place as well. Angles are double on both sides: only float roundings of cos/sin differ. */
    const int B = 3, T = 300, NH = 5, D = 64, ld = NH * D + 70;
    size_t n = (size_t)B * T * ld;
    float *x = host_rand(h, n, -2, 2);
    pair src = pair_of(h, x, n * sizeof(float)), dst = pair_nan(h, n);
    for (EACH(w)) assert_ok(FSC_K(DEV(h, w), rope_forward, PF(dst, w), PF(src, w), B, T, NH, D, ld, 10000.0f));
    compare(h, "rope_forward", &dst, n, 1e-6);
    for (EACH(w)) assert_ok(FSC_K(DEV(h, w), rope_backward, PF(src, w), PF(src, w), B, T, NH, D, ld, 500000.0f));
    compare(h, "rope_backward in place", &src, n, 1e-6);
    free(x);
    pair_free(h, &src), pair_free(h, &dst);
}

static void test_gated_mse(void **state) {
    H *h = *state;
    NEED_GPU(h);
    const size_t n = 100003;
    pair x = pair_rand(h, n, -6, 6), y = pair_rand(h, n, -4, 4), d = pair_rand(h, n, -1, 1);
    pair o1 = pair_nan(h, n), o2 = pair_nan(h, n);
    for (EACH(w)) assert_ok(FSC_K(DEV(h, w), silu_forward, PF(o1, w), PF(x, w), n));
    compare(h, "silu_forward", &o1, n, 2e-6);
    for (EACH(w)) assert_ok(FSC_K(DEV(h, w), silu_backward, PF(o1, w), PF(x, w), PF(d, w), n));
    compare(h, "silu_backward", &o1, n, 4e-6);
    for (EACH(w)) assert_ok(FSC_K(DEV(h, w), swiglu_forward, PF(o1, w), PF(x, w), PF(y, w), n));
    compare(h, "swiglu_forward", &o1, n, 2e-6);
    for (EACH(w)) assert_ok(FSC_K(DEV(h, w), swiglu_backward, PF(o1, w), PF(o2, w), PF(x, w), PF(y, w), PF(d, w), n));
    compare(h, "swiglu_backward dgate", &o1, n, 4e-6);
    compare(h, "swiglu_backward dup", &o2, n, 4e-6);
    for (EACH(w)) assert_ok(FSC_K(DEV(h, w), mul_forward, PF(o1, w), PF(x, w), PF(y, w), n));
    compare(h, "mul_forward", &o1, n, 0.0);
    /* mul_backward accumulates: both sides start from the same bits (o2 held swiglu's dup, equal only to 4e-6) */
    pair_free(h, &o2);
    o2 = pair_rand(h, n, -1, 1);
    for (EACH(w)) assert_ok(FSC_K(DEV(h, w), mul_backward, PF(o1, w), PF(o2, w), PF(x, w), PF(y, w), PF(d, w), n));
    compare(h, "mul_backward da", &o1, n, 0.0);
    compare(h, "mul_backward db", &o2, n, 0.0);
    for (EACH(w)) assert_ok(FSC_K(DEV(h, w), mul_backward, NULL, PF(o2, w), PF(x, w), PF(y, w), PF(d, w), n));
    compare(h, "mul_backward db only", &o2, n, 0.0);
    const size_t N = 1237;
    const int C = 80; /* N C <= n */
    pair losses = pair_nan(h, N);
    for (EACH(w)) assert_ok(FSC_K(DEV(h, w), mse_forward, PF(losses, w), PF(x, w), PF(y, w), N, C));
    compare(h, "mse_forward", &losses, N, 1e-6);
    for (EACH(w)) assert_ok(FSC_K(DEV(h, w), mse_backward, PF(o1, w), PF(x, w), PF(y, w), N, C, 0.01f));
    compare(h, "mse_backward", &o1, N * C, 0.0);
    pair_free(h, &x), pair_free(h, &y), pair_free(h, &d), pair_free(h, &o1), pair_free(h, &o2);
    pair_free(h, &losses);
}

static void test_deferred_errors(void **state) {
    H *h = *state;
    NEED_GPU(h);
    const int B = 2, T = 8, C = 16, V = 11;
    pair tok = pair_tokens(h, (size_t)B * T, V, 5);
    pair wte = pair_rand(h, (size_t)V * C, -1, 1), wpe = pair_rand(h, (size_t)T * C, -1, 1);
    pair out = pair_nan(h, (size_t)B * T * C);
    /* the cpu sees the bad token at once; the GPU at the next synchronization, with the position */
    assert_err(FSC_K(h->cpu, encoder_forward, (float *)out.c, (int32_t *)tok.c, (float *)wte.c, (float *)wpe.c, B, T, C),
               FSC_ERR_INVALID, "negative");
    assert_ok(FSC_K(h->gpu, encoder_forward, (float *)out.g, (int32_t *)tok.g, (float *)wte.g, (float *)wpe.g, B, T, C));
    assert_err(fsc_device_sync(h->gpu), FSC_ERR_INVALID, "negative token at position 5");
    assert_ok(fsc_device_sync(h->gpu)); /* reported once */
    pair logits = pair_rand(h, (size_t)B * T * V, -1, 1), losses = pair_nan(h, (size_t)B * T);
    int32_t bad[16];
    for (int i = 0; i < 16; i++) bad[i] = i % V;
    bad[9] = V;
    assert_ok(fsc_device_upload(h->gpu, tok.g, bad, sizeof bad));
    assert_ok(FSC_K(h->gpu, xent_forward, (float *)losses.g, (float *)logits.g, (int32_t *)tok.g, (size_t)B * T, V, V));
    assert_err(fsc_device_sync(h->gpu), FSC_ERR_INVALID, "target at row 9");
    pair_free(h, &tok), pair_free(h, &wte), pair_free(h, &wpe), pair_free(h, &out);
    pair_free(h, &logits), pair_free(h, &losses);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plugin_loads_and_refuses_cleanly),
        cmocka_unit_test(test_device_create_reports_reason),
        cmocka_unit_test(test_memory_and_copies),
        cmocka_unit_test(test_pinned_host_memory),
        cmocka_unit_test(test_async_copies),
        cmocka_unit_test(test_copies_from_two_threads),
        cmocka_unit_test(test_gemm),
        cmocka_unit_test(test_gemm_ex),
        cmocka_unit_test(test_gemm_tf32),
        cmocka_unit_test(test_convert),
        cmocka_unit_test(test_elementwise),
        cmocka_unit_test(test_bias),
        cmocka_unit_test(test_encoder),
        cmocka_unit_test(test_layernorm),
        cmocka_unit_test(test_attention_layouts),
        cmocka_unit_test(test_softmax),
        cmocka_unit_test(test_cross_entropy),
        cmocka_unit_test(test_reductions),
        cmocka_unit_test(test_optimizers),
        cmocka_unit_test(test_streams_and_events),
        cmocka_unit_test(test_deferred_errors),
        cmocka_unit_test(test_rmsnorm_rope),
        cmocka_unit_test(test_gated_mse),
        cmocka_unit_test(test_nccl_loaded_on_demand), /* last: it leaves NCCL unloadable in this process */
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
