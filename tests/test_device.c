/* Tests for lib/core/device.c (and the memory side of backends/cpu/cpu_device.c).
 * Oracles: ledger numbers are sums of the byte counts the test allocated, worked out by hand;
 * bad names and a missing or broken cuda plug-in fail with the documented status and a message; a plug-in
 * named by FSC_CUDA_PLUGIN that is not one (a text file, a library without the entry point, another ABI
 * version) is FSC_ERR_INVALID naming the file and the reason, and no other plug-in is tried instead.
 * Asynchronous copies: the data is the source's once waited for, copies complete in issue order, the cpu device
 * makes them at the wait (so early readers are caught), a backend without them copies at the start, and the
 * simulated link runs a copy while the caller continues and queues copies one behind the other (wall clock from
 * below and start latency from above, with a modelled time far above any scheduling delay).
 * The counting device (backends/count): large allocations fake and counted, small ones real and zeroed, copies
 * touching real memory only, the kernels answering on the host answering zeros, its host device counting too.
 * The typed kernel calls (core/kernels.h): the table's own bits, and FSC_ERR_UNSUPPORTED for a NULL entry.
 * A copy or memset whose size carries a pointer past the address space (a negative size) is FSC_ERR_INVALID. */
#include <stdlib.h>
#include <time.h>
#include "testutil.h"
#include "core/device_impl.h"

static void test_create_cpu(void **state) {
    (void)state;
    fsc_device *d = NULL;
    assert_ok(fsc_device_create("cpu", NULL, &d));
    assert_non_null(d);
    assert_string_equal(fsc_device_name(d), "cpu");
    assert_int_equal(d->ops->abi_version, FSC_DEVICE_ABI_VERSION);
    assert_null(d->ops->stream_create); /* in-order device: no streams */
    assert_ok(fsc_device_sync(d));
    fsc_device_free(d);
    fsc_device_opts o = {.threads = 1};
    assert_ok(fsc_device_create("cpu", &o, &d));
    fsc_device_free(d);
    fsc_device_free(NULL);
}

static void test_bad_names_and_opts(void **state) {
    (void)state;
    fsc_device *d = (fsc_device *)1;
    assert_err(fsc_device_create("tpu", NULL, &d), FSC_ERR_INVALID, "unknown device \"tpu\"");
    assert_null(d);
    assert_err(fsc_device_create(NULL, NULL, &d), FSC_ERR_INVALID, "NULL");
    fsc_device_opts o = {.threads = -2};
    assert_err(fsc_device_create("cpu", &o, &d), FSC_ERR_INVALID, "threads");
}

static void test_cuda_without_plugin(void **state) {
    (void)state;
    fsc_device *d = NULL;
    setenv("FSC_CUDA_PLUGIN", "/nonexistent/libfsc_cuda.so", 1);
    fsc_status s = fsc_device_create("cuda", NULL, &d);
    unsetenv("FSC_CUDA_PLUGIN");
    /* only the named file is tried, so even a machine with a plug-in installed fails here */
    assert_err(s, FSC_ERR_INVALID, "cannot load /nonexistent/libfsc_cuda.so as the cuda plug-in");
    assert_non_null(strstr(fsc_last_error(), "FSC_CUDA_PLUGIN"));
    assert_null(d);
}

static void test_cuda_plugin_directory(void **state) {
    (void)state;
    fsc_device *d = NULL;
    setenv("FSC_CUDA_PLUGIN", "/proc", 1); /* a directory: the plug-in is looked for inside it */
    fsc_status s = fsc_device_create("cuda", NULL, &d);
    unsetenv("FSC_CUDA_PLUGIN");
    assert_err(s, FSC_ERR_INVALID, "/proc/libfsc_cuda.so");
}

/* ---- FSC_CUDA_PLUGIN naming something that is not a plug-in: an error naming the file and the reason ----
 * The fakes are small shared libraries this test compiles with the C compiler ($CC, else cc). */

typedef struct {
    char dir[64];
    char text[128];  /* a regular file that is not a shared library */
    char nosym[128]; /* a shared library without fsc_cuda_device_open */
    char abi[128];   /* a plug-in whose table has another ABI version */
    char fake[128];  /* dir/libfsc_cuda.so: a plug-in that refuses with "fake plug-in at <dir>" */
} fakes;

static int build_so(const char *dir, const char *name, const char *src, char *out, size_t cap) {
    char c[160], cmd[512];
    snprintf(c, sizeof c, "%s/%s.c", dir, name);
    snprintf(out, cap, "%s/%s", dir, name);
    FILE *f = fopen(c, "w");
    if (!f) return -1;
    fputs(src, f);
    fclose(f);
    const char *cc = getenv("CC");
    snprintf(cmd, sizeof cmd, "%s -shared -fPIC -o %s %s 2>&1", cc && *cc ? cc : "cc", out, c);
    return system(cmd) == 0 ? 0 : -1;
}

static int make_fakes(fakes *k) {
    snprintf(k->dir, sizeof k->dir, "/tmp/fsc_test_device_XXXXXX");
    if (!mkdtemp(k->dir)) return -1;
    snprintf(k->text, sizeof k->text, "%s/notes.txt", k->dir);
    FILE *f = fopen(k->text, "w");
    if (!f) return -1;
    fputs("not a shared library\n", f);
    fclose(f);
    char abi_src[512], fake_src[1024];
    snprintf(abi_src, sizeof abi_src,
             "static struct { int abi_version; void *rest[256]; } table = {%d, {0}};\n"
             "int fsc_cuda_device_open(int abi, const void *opts, const void **ops, void **ctx) {\n"
             "    (void)abi; (void)opts; *ops = &table; *ctx = 0; return 0;\n}\n", FSC_DEVICE_ABI_VERSION + 100);
    snprintf(fake_src, sizeof fake_src,
             "typedef int (*err_fn)(int, const char *, ...);\n"
             "static err_fn err;\n"
             "void fsc_plugin_init(int abi, err_fn e) { (void)abi; err = e; }\n"
             "int fsc_cuda_device_open(int abi, const void *opts, const void **ops, void **ctx) {\n"
             "    (void)abi; (void)opts; (void)ops; (void)ctx;\n"
             "    return err ? err(%d, \"fake plug-in at %s\") : %d;\n}\n",
             (int)FSC_ERR_UNSUPPORTED, k->dir, (int)FSC_ERR_UNSUPPORTED);
    if (build_so(k->dir, "nosym.so", "int not_a_plugin(void) { return 1; }\n", k->nosym, sizeof k->nosym) ||
        build_so(k->dir, "abi.so", abi_src, k->abi, sizeof k->abi) ||
        build_so(k->dir, "libfsc_cuda.so", fake_src, k->fake, sizeof k->fake))
        return -1;
    return 0;
}

/* assert_err with a needle that is an array */
static void expect_err(fsc_status got, fsc_status st, const char *needle) { assert_err(got, st, needle); }

static fsc_status open_with(const char *plugin) {
    fsc_device *d = NULL;
    setenv("FSC_CUDA_PLUGIN", plugin, 1);
    fsc_status s = fsc_device_create("cuda", NULL, &d);
    unsetenv("FSC_CUDA_PLUGIN");
    if (s == FSC_OK) fsc_device_free(d);
    return s;
}

static void test_cuda_plugin_that_is_not_one(void **state) {
    (void)state;
    fakes k;
    if (make_fakes(&k) != 0) {
        test_rmtree(k.dir);
        skip(); /* no C compiler to build the fakes with */
    }
    char want[300];
    /* not loadable: a text file */
    expect_err(open_with(k.text), FSC_ERR_INVALID, k.text);
    assert_non_null(strstr(fsc_last_error(), "cannot load"));
    /* loadable, no entry point: a library of this test, and one of the system's */
    snprintf(want, sizeof want, "%s is not an fsc cuda plug-in: it has no symbol fsc_cuda_device_open", k.nosym);
    expect_err(open_with(k.nosym), FSC_ERR_INVALID, want);
    expect_err(open_with("libm.so.6"), FSC_ERR_INVALID, "libm.so.6 is not an fsc cuda plug-in");
    /* a plug-in of another interface version */
    snprintf(want, sizeof want, "%s is a cuda plug-in for device ABI version %d, this library needs %d", k.abi,
             FSC_DEVICE_ABI_VERSION + 100, FSC_DEVICE_ABI_VERSION);
    expect_err(open_with(k.abi), FSC_ERR_INVALID, want);
    /* a working plug-in named by FSC_CUDA_PLUGIN (file or folder) is the one used: its own refusal comes back */
    snprintf(want, sizeof want, "fake plug-in at %s", k.dir);
    expect_err(open_with(k.fake), FSC_ERR_UNSUPPORTED, want);
    expect_err(open_with(k.dir), FSC_ERR_UNSUPPORTED, want);
    assert_non_null(strstr(fsc_last_error(), k.fake)); /* the message names the file */
    test_rmtree(k.dir);
}

/* With FSC_CUDA_PLUGIN naming a file that is not a plug-in, the plug-in the search would find (here the
 * fake, on the loader's path of a child process: LD_LIBRARY_PATH is read at start-up) is not used instead.
 * The child is this program, run with --open-cuda. */
static int child_open(const char *ld_path, const char *plugin, char *out, size_t cap) {
    char exe[1024], cmd[2048];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return -1;
    exe[n] = '\0';
    snprintf(cmd, sizeof cmd, "env -u FSC_CUDA_PLUGIN LD_LIBRARY_PATH='%s' %s%s%s '%s' --open-cuda", ld_path,
             plugin ? "FSC_CUDA_PLUGIN='" : "", plugin ? plugin : "", plugin ? "'" : "", exe);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t got = fread(out, 1, cap - 1, p);
    out[got] = '\0';
    return pclose(p) == 0 ? 0 : -1;
}

static void test_cuda_plugin_no_fallback(void **state) {
    (void)state;
    fakes k;
    if (make_fakes(&k) != 0) {
        test_rmtree(k.dir);
        skip();
    }
    char out[2048], want[200];
    snprintf(want, sizeof want, "fake plug-in at %s", k.dir);
    /* the oracle is reachable: without FSC_CUDA_PLUGIN the search finds the fake on the loader's path */
    assert_int_equal(child_open(k.dir, NULL, out, sizeof out), 0);
    if (!strstr(out, want)) fail_msg("without FSC_CUDA_PLUGIN the child did not find the fake: %s", out);
    /* with FSC_CUDA_PLUGIN naming a text file: that file's failure, and the fake is not tried */
    assert_int_equal(child_open(k.dir, k.text, out, sizeof out), 0);
    if (strstr(out, want) || !strstr(out, k.text) || !strstr(out, "cannot load"))
        fail_msg("with FSC_CUDA_PLUGIN=%s: %s", k.text, out);
    char code[16];
    snprintf(code, sizeof code, "%d ", (int)FSC_ERR_INVALID);
    assert_true(strncmp(out, code, strlen(code)) == 0);
    test_rmtree(k.dir);
}

static void test_ledger(void **state) {
    (void)state;
    fsc_device *d;
    assert_ok(fsc_device_create("cpu", NULL, &d));
    void *a, *b, *c, *z = (void *)1;
    assert_ok(fsc_device_alloc(d, FSC_TAG_PARAMS, 100, &a));
    assert_ok(fsc_device_alloc(d, FSC_TAG_GRADS, 200, &b));
    assert_int_equal(fsc_device_current_bytes(d, FSC_TAG_PARAMS), 100);
    assert_int_equal(fsc_device_current_bytes(d, FSC_TAG_GRADS), 200);
    assert_int_equal(fsc_device_peak_total(d), 300);
    fsc_device_release(d, a);
    assert_int_equal(fsc_device_current_bytes(d, FSC_TAG_PARAMS), 0);
    assert_int_equal(fsc_device_peak_bytes(d, FSC_TAG_PARAMS), 100);
    assert_ok(fsc_device_alloc(d, FSC_TAG_ACTS, 50, &c));
    assert_int_equal(fsc_device_peak_total(d), 300); /* 200 + 50 < 300 */
    assert_int_equal(fsc_device_peak_bytes(d, FSC_TAG_ACTS), 50);
    fsc_device_reset_peak(d);
    assert_int_equal(fsc_device_peak_bytes(d, FSC_TAG_PARAMS), 0);
    assert_int_equal(fsc_device_peak_bytes(d, FSC_TAG_GRADS), 200);
    assert_int_equal(fsc_device_peak_total(d), 250);
    assert_ok(fsc_device_alloc(d, FSC_TAG_WORKSPACE, 0, &z)); /* 0 bytes: NULL, not counted */
    assert_null(z);
    fsc_device_release(d, NULL);
    assert_int_equal(fsc_device_current_bytes(d, FSC_TAG_WORKSPACE), 0);
    assert_err(fsc_device_alloc(d, FSC_TAG_COUNT, 8, &z), FSC_ERR_INVALID, "tag");
    assert_string_equal(fsc_tag_name(FSC_TAG_OPTIM), "optim");
    assert_string_equal(fsc_tag_name(FSC_TAG_WORKSPACE), "workspace");
    fsc_device_release(d, b);
    fsc_device_release(d, c);
    for (int t = 0; t < FSC_TAG_COUNT; t++) assert_int_equal(fsc_device_current_bytes(d, (fsc_tag)t), 0);
    fsc_device_free(d);
}

static void test_release_unknown_pointer(void **state) {
    (void)state;
    fsc_device *d;
    assert_ok(fsc_device_create("cpu", NULL, &d));
    void *a;
    int local;
    assert_ok(fsc_device_alloc(d, FSC_TAG_COMM, 64, &a));
    fsc_clear_error();
    fsc_device_release(d, &local); /* never allocated here: message, no crash, ledger unchanged */
    assert_non_null(strstr(fsc_last_error(), "not a live allocation"));
    assert_int_equal(fsc_device_current_bytes(d, FSC_TAG_COMM), 64);
    fsc_device_release(d, a);
    fsc_clear_error();
    fsc_device_release(d, a); /* double release */
    assert_non_null(strstr(fsc_last_error(), "not a live allocation"));
    assert_int_equal(fsc_device_current_bytes(d, FSC_TAG_COMM), 0);
    fsc_device_free(d);
}

/* Many allocations released in a scrambled order: the hash map grows and deletes correctly. */
static void test_many_allocations(void **state) {
    (void)state;
    enum { N = 3000 };
    fsc_device *d;
    assert_ok(fsc_device_create("cpu", NULL, &d));
    void **p = malloc(N * sizeof *p);
    size_t expect[FSC_TAG_COUNT] = {0};
    for (int i = 0; i < N; i++) {
        assert_ok(fsc_device_alloc(d, (fsc_tag)(i % FSC_TAG_COUNT), (size_t)(i % 37 + 1), &p[i]));
        expect[i % FSC_TAG_COUNT] += (size_t)(i % 37 + 1);
    }
    for (int t = 0; t < FSC_TAG_COUNT; t++) assert_int_equal(fsc_device_current_bytes(d, (fsc_tag)t), expect[t]);
    fsc_clear_error();
    for (int k = 0; k < N; k++) {
        int i = (int)(((long)k * 1237) % N); /* 1237 is coprime with 3000: a permutation */
        fsc_device_release(d, p[i]);
        expect[i % FSC_TAG_COUNT] -= (size_t)(i % 37 + 1);
        if (k % 500 == 0)
            for (int t = 0; t < FSC_TAG_COUNT; t++)
                assert_int_equal(fsc_device_current_bytes(d, (fsc_tag)t), expect[t]);
    }
    assert_string_equal(fsc_last_error(), ""); /* no release was refused */
    for (int t = 0; t < FSC_TAG_COUNT; t++) assert_int_equal(fsc_device_current_bytes(d, (fsc_tag)t), 0);
    void *leak;
    assert_ok(fsc_device_alloc(d, FSC_TAG_ACTS, 128, &leak)); /* freed by fsc_device_free */
    fsc_device_free(d);
    free(p);
}

static void test_copies(void **state) {
    (void)state;
    fsc_device *d;
    assert_ok(fsc_device_create("cpu", NULL, &d));
    float host[8] = {1, 2, 3, 4, 5, 6, 7, 8}, back[8] = {0};
    float *x, *y;
    assert_ok(fsc_device_calloc(d, FSC_TAG_ACTS, sizeof host, (void **)&x));
    assert_ok(fsc_device_alloc(d, FSC_TAG_ACTS, sizeof host, (void **)&y));
    assert_ok(fsc_device_download(d, back, x, sizeof back));
    for (int i = 0; i < 8; i++) assert_true(back[i] == 0.0f);
    assert_ok(fsc_device_upload(d, x, host, sizeof host));
    assert_ok(fsc_device_copy(d, y, x, sizeof host));
    assert_ok(fsc_device_download(d, back, y, sizeof back));
    assert_bits_equal(back, host, 8, "upload, copy, download");
    assert_ok(fsc_device_memset(d, y, 0, 4 * sizeof(float)));
    assert_ok(fsc_device_download(d, back, y, sizeof back));
    assert_true(back[3] == 0.0f && back[4] == 5.0f);
    assert_err(fsc_device_upload(d, NULL, host, 4), FSC_ERR_INVALID, "NULL");
    assert_ok(fsc_device_upload(d, NULL, NULL, 0));
    /* a negative size turned size_t is refused, buffers untouched: a copy of (size_t)-16 bytes ran memmove off the
     * end (a segmentation fault), one of SIZE_MAX copied nothing (its chunks' count wrapped) and said FSC_OK */
    const size_t neg = (size_t)-16;
    assert_err(fsc_device_copy(d, y + 4, y, neg), FSC_ERR_INVALID, "passes the end of the address space");
    assert_err(fsc_device_copy(d, y, x, SIZE_MAX), FSC_ERR_INVALID, "fsc_device_copy: dst + 18446744073709551615");
    assert_err(fsc_device_memset(d, y, 0, neg), FSC_ERR_INVALID, "fsc_device_memset: dst + ");
    assert_err(fsc_device_upload(d, y, host, neg), FSC_ERR_INVALID, "fsc_device_upload: dst + ");
    assert_err(fsc_device_download(d, back, y, neg), FSC_ERR_INVALID, "fsc_device_download: host_dst + ");
    fsc_copy *cp = (fsc_copy *)1;
    assert_err(fsc_device_upload_async(d, y, host, neg, &cp), FSC_ERR_INVALID, "fsc_device_upload_async: dst + ");
    assert_null(cp);
    assert_err(fsc_device_download_async(d, back, y, neg, &cp), FSC_ERR_INVALID, "download_async: host_dst + ");
    assert_ok(fsc_device_download(d, back, y, sizeof back));
    assert_true(back[3] == 0.0f && back[4] == 5.0f);
    fsc_device_release(d, x);
    fsc_device_release(d, y);
    fsc_device_free(d);
}

/* A host device (offload) takes its memory from the accelerator's host_alloc when it has one (pinned memory
 * on CUDA), keeps its own ledger, and returns the memory with host_free; without one it is the cpu backend's.
 * Oracle: the fake accelerator's counters and the host ledger's bytes, worked out by hand. */
static int host_allocs, host_frees;
static void *fake_host_alloc(void *ctx, size_t bytes) {
    (void)ctx;
    host_allocs++;
    return malloc(bytes);
}
static void fake_host_free(void *ctx, void *p) {
    (void)ctx;
    host_frees++;
    free(p);
}

static void test_host_device(void **state) {
    (void)state;
    fsc_device *cpu = NULL, *h = NULL;
    assert_ok(fsc_device_create("cpu", NULL, &cpu));
    assert_ok(fsc_device_create_host(cpu, &h)); /* the cpu backend has no host_alloc: plain memory */
    assert_null(h->mem_ops);
    assert_ptr_equal(h->comm_dev, cpu); /* its collectives' buffers: the accelerator's memory */
    fsc_device_free(h);
    fsc_device_ops ops = *cpu->ops; /* an accelerator with pinned host memory */
    ops.host_alloc = fake_host_alloc;
    ops.host_free = fake_host_free;
    fsc_device accel = *cpu;
    accel.ops = &ops;
    host_allocs = host_frees = 0;
    assert_ok(fsc_device_create_host(&accel, &h));
    void *a = NULL, *b = NULL;
    assert_ok(fsc_device_alloc(h, FSC_TAG_OPTIM, 1000, &a));
    assert_ok(fsc_device_calloc(h, FSC_TAG_PARAMS, 24, &b));
    assert_int_equal(host_allocs, 2);
    assert_int_equal(fsc_device_current_bytes(h, FSC_TAG_OPTIM), 1000);
    assert_int_equal(fsc_device_current_bytes(cpu, FSC_TAG_OPTIM), 0); /* the accelerator's ledger is apart */
    assert_int_equal(((unsigned char *)b)[23], 0);
    fsc_device_release(h, a);
    assert_int_equal(host_frees, 1);
    assert_int_equal(fsc_device_peak_bytes(h, FSC_TAG_OPTIM), 1000);
    fsc_device_free(h); /* b still live: returned with host_free */
    assert_int_equal(host_frees, 2);
    fsc_device_free(cpu);
}

/* fsc_device_copied_bytes counts uploads and downloads apart (copies on the device are not counted) until
 * reset. Oracle: the byte counts of the calls. */
static void test_copied_bytes(void **state) {
    (void)state;
    fsc_device *d = NULL;
    assert_ok(fsc_device_create("cpu", NULL, &d));
    char host[100] = {0};
    void *a = NULL, *b = NULL;
    assert_ok(fsc_device_alloc(d, FSC_TAG_WORKSPACE, 100, &a));
    assert_ok(fsc_device_alloc(d, FSC_TAG_WORKSPACE, 100, &b));
    assert_ok(fsc_device_upload(d, a, host, 100));
    assert_ok(fsc_device_upload(d, a, host, 7));
    assert_ok(fsc_device_download(d, host, a, 50));
    assert_ok(fsc_device_copy(d, b, a, 100));
    assert_int_equal(fsc_device_copied_bytes(d, 1), 107);
    assert_int_equal(fsc_device_copied_bytes(d, 0), 50);
    fsc_device_reset_copied(d);
    assert_int_equal(fsc_device_copied_bytes(d, 1), 0);
    assert_int_equal(fsc_device_copied_bytes(d, 0), 0);
    fsc_device_release(d, a);
    fsc_device_release(d, b);
    fsc_device_free(d);
}

/* Asynchronous copies on the cpu device: made at the wait, in issue order; bytes counted at the start. */
static void test_async_copies(void **state) {
    (void)state;
    fsc_device *d = NULL;
    assert_ok(fsc_device_create("cpu", NULL, &d));
    float src[64], src2[64], back[64];
    for (int i = 0; i < 64; i++) src[i] = (float)i, src2[i] = (float)(100 + i), back[i] = -1.0f;
    float *a = NULL;
    assert_ok(fsc_device_calloc(d, FSC_TAG_WORKSPACE, sizeof src, (void **)&a));
    fsc_copy *up = NULL, *up2 = NULL, *down = NULL, *none = (fsc_copy *)1;
    assert_ok(fsc_device_upload_async(d, a, src, 0, &none));
    assert_null(none); /* 0 bytes: nothing to wait for */
    assert_ok(fsc_device_copy_wait(NULL));
    assert_ok(fsc_device_upload_async(d, a, src, sizeof src, &up));
    assert_non_null(up);
    assert_true(a[5] == 0.0f); /* not made before the wait on the cpu device */
    assert_ok(fsc_device_upload_async(d, a, src2, sizeof src2, &up2));
    assert_ok(fsc_device_download_async(d, back, a, sizeof back, &down));
    assert_int_equal(fsc_device_copied_bytes(d, 1), 2 * sizeof src);
    assert_int_equal(fsc_device_copied_bytes(d, 0), sizeof back);
    assert_ok(fsc_device_copy_wait(down)); /* completes the two uploads before it, in order */
    for (int i = 0; i < 64; i++) assert_true(back[i] == src2[i] && a[i] == src2[i]);
    assert_ok(fsc_device_copy_wait(up)); /* made already: the later upload's data stays */
    assert_ok(fsc_device_copy_wait(up2));
    assert_true(a[7] == src2[7]);
    /* fsc_device_sync makes queued copies; the handle still needs its wait */
    assert_ok(fsc_device_upload_async(d, a, src, sizeof src, &up));
    assert_ok(fsc_device_sync(d));
    assert_true(a[9] == src[9]);
    assert_ok(fsc_device_copy_wait(up));
    assert_err(fsc_device_upload_async(d, NULL, src, 4, &up), FSC_ERR_INVALID, "NULL pointer");
    assert_null(up);
    /* a backend without asynchronous copies: the core copies at the start */
    fsc_device_ops plain = *d->ops;
    plain.upload_async = NULL;
    const fsc_device_ops *own = d->ops;
    d->ops = &plain;
    assert_ok(fsc_device_upload_async(d, a, src2, sizeof src2, &up));
    assert_true(a[3] == src2[3]);
    assert_ok(fsc_device_copy_wait(up));
    d->ops = own;
    fsc_device_release(d, a);
    fsc_device_free(d);
}

/* A backend's start that fails (as a CUDA copy stream might). */
static fsc_status failing_copy_start(void *ctx, void *dst, const void *src, size_t bytes, void **copy) {
    (void)ctx, (void)dst, (void)src, (void)bytes;
    *copy = (void *)1; /* a backend may leave garbage: the core must not hand it out */
    return fsc_error(FSC_ERR_IO, "test backend: copy refused");
}

/* Bad input to the asynchronous copies: each is an error with a message naming the call and the problem, *out is
 * NULL after it (nothing to wait for), and nothing is counted; a zero-byte download and a NULL wait are no-ops; a
 * backend's failure to start passes through with its message and leaves no handle. */
static void test_async_copy_errors(void **state) {
    (void)state;
    fsc_device *d = NULL;
    assert_ok(fsc_device_create("cpu", NULL, &d));
    float h[8] = {0}, *a = NULL;
    assert_ok(fsc_device_calloc(d, FSC_TAG_WORKSPACE, sizeof h, (void **)&a));
    fsc_copy *c = (fsc_copy *)1;
    assert_err(fsc_device_upload_async(d, a, h, sizeof h, NULL), FSC_ERR_INVALID, "fsc_device_upload_async: out is NULL");
    assert_err(fsc_device_download_async(NULL, h, a, sizeof h, &c), FSC_ERR_INVALID,
               "fsc_device_download_async: NULL device");
    assert_null(c);
    c = (fsc_copy *)1;
    assert_err(fsc_device_download_async(d, NULL, a, sizeof h, &c), FSC_ERR_INVALID, "NULL pointer for 32 bytes");
    assert_null(c);
    c = (fsc_copy *)1;
    assert_err(fsc_device_upload_async(d, a, NULL, sizeof h, &c), FSC_ERR_INVALID, "fsc_device_upload_async");
    assert_null(c);
    c = (fsc_copy *)1;
    assert_ok(fsc_device_download_async(d, NULL, NULL, 0, &c)); /* 0 bytes: no pointers needed, no handle */
    assert_null(c);
    assert_ok(fsc_device_copy_wait(c));
    assert_int_equal(fsc_device_copied_bytes(d, 0) + fsc_device_copied_bytes(d, 1), 0);
    fsc_device_ops failing = *d->ops;
    failing.upload_async = failing_copy_start;
    const fsc_device_ops *own = d->ops;
    d->ops = &failing;
    c = (fsc_copy *)1;
    assert_err(fsc_device_upload_async(d, a, h, sizeof h, &c), FSC_ERR_IO, "copy refused");
    assert_null(c);
    assert_int_equal(fsc_device_copied_bytes(d, 1), 0);
    d->ops = own;
    fsc_device_release(d, a);
    fsc_device_free(d);
}

/* The typed kernel calls the layers above the core use (core/kernels.h): each gives the same bits as the table's
 * own entry called with the device's context (FSC_K), an entry the backend left NULL is FSC_ERR_UNSUPPORTED naming
 * the device and the kernel (no call through NULL), and a host device's collectives go through its accelerator. */
static void test_typed_kernels(void **state) {
    (void)state;
    fsc_device *d = NULL;
    assert_ok(fsc_device_create("cpu", NULL, &d));
    enum { M = 5, N = 7, K = 3, n = M * N };
    float a[M * K], b[K * N], x[n], c1[n], c2[n], g1[n], g2[n];
    for (int i = 0; i < M * K; i++) a[i] = 0.37f * (float)(i % 11) - 1.1f;
    for (int i = 0; i < K * N; i++) b[i] = 0.21f * (float)(i % 7) - 0.6f;
    for (int i = 0; i < n; i++) x[i] = 0.13f * (float)i - 2.0f, c1[i] = c2[i] = 0.5f;
    assert_ok(fsc_k_gemm(d, 0, 0, M, N, K, 1.5f, a, K, 0, b, N, 0, 0.25f, c1, N, 0, 1));
    assert_ok(FSC_K(d, gemm, 0, 0, M, N, K, 1.5f, a, K, 0, b, N, 0, 0.25f, c2, N, 0, 1));
    assert_memory_equal(c1, c2, sizeof c1);
    assert_ok(fsc_k_axpy(d, c1, -0.75f, x, n));
    assert_ok(FSC_K(d, axpy, c2, -0.75f, x, n));
    assert_memory_equal(c1, c2, sizeof c1);
    assert_ok(fsc_k_gelu_forward(d, g1, c1, n));
    assert_ok(FSC_K(d, gelu_forward, g2, c2, n));
    assert_memory_equal(g1, g2, sizeof g1);
    double s1 = 0, s2 = 1;
    assert_ok(fsc_k_sum(d, &s1, g1, n));
    assert_ok(FSC_K(d, sum, &s2, g2, n));
    assert_memory_equal(&s1, &s2, sizeof s1);
    /* a backend without the entry: an error naming it, not a crash */
    fsc_device_ops holed = *d->ops;
    holed.gelu_forward = NULL;
    holed.adamw = NULL;
    const fsc_device_ops *own = d->ops;
    d->ops = &holed;
    assert_err(fsc_k_gelu_forward(d, g1, c1, n), FSC_ERR_UNSUPPORTED, "device cpu has no kernel gelu_forward");
    assert_err(fsc_k_adamw(d, c1, x, g1, g2, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 1.0f, 1.0f), FSC_ERR_UNSUPPORTED,
               "device cpu has no kernel adamw");
    assert_memory_equal(g1, g2, sizeof g1); /* nothing written */
    d->ops = own;
    /* collectives of a host device go through its accelerator's memory; another device's through its own */
    fsc_device *h = NULL, *lone = NULL;
    assert_ok(fsc_device_create_host(d, &h));
    assert_ok(fsc_device_create_host(NULL, &lone));
    assert_ptr_equal(fsc_device_for_comm(h), d);
    assert_ptr_equal(fsc_device_for_comm(d), d);
    assert_ptr_equal(fsc_device_for_comm(lone), lone);
    fsc_device_free(lone);
    fsc_device_free(h);
    fsc_device_free(d);
}

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The simulated link (fsc_device_set_copy_cost): 1 MiB at 0.01 GB/s is 104.9 ms. An asynchronous copy returns at
 * once (well under that) and its wait not before its modelled end; a second copy queues behind the first (its wait
 * not before twice that); a synchronous copy after them queues too. */
static void test_async_copy_time(void **state) {
    (void)state;
    fsc_device *d = NULL;
    assert_ok(fsc_device_create("cpu", NULL, &d));
    fsc_device_set_copy_cost(d, 0.01);
    const size_t bytes = (size_t)1 << 20;
    const double t = (double)bytes / 0.01e9;
    char *h = calloc(bytes, 1);
    void *a = NULL;
    assert_non_null(h);
    assert_ok(fsc_device_alloc(d, FSC_TAG_WORKSPACE, bytes, &a));
    fsc_copy *c1 = NULL, *c2 = NULL;
    const double t0 = mono_s();
    assert_ok(fsc_device_upload_async(d, a, h, bytes, &c1));
    assert_ok(fsc_device_download_async(d, h, a, bytes, &c2));
    const double started = mono_s() - t0;
    if (started > t / 2) fail_msg("starting two copies took %.4f s, the caller should continue at once", started);
    assert_ok(fsc_device_copy_wait(c1));
    if (mono_s() - t0 < t) fail_msg("the first copy ended after %.4f s, before its %.4f s", mono_s() - t0, t);
    assert_ok(fsc_device_copy_wait(c2));
    if (mono_s() - t0 < 2 * t) fail_msg("the second copy ended after %.4f s, before 2 x %.4f s", mono_s() - t0, t);
    assert_ok(fsc_device_upload(d, a, h, bytes));
    if (mono_s() - t0 < 3 * t) fail_msg("a synchronous copy behind them ended after %.4f s", mono_s() - t0);
    fsc_device_release(d, a);
    free(h);
    fsc_device_free(d);
}

/* The counting device: large allocations are fake and counted, small ones real and zeroed; copies touch real
 * memory only; the kernels answering on the host answer zeros. */
static void test_count_device(void **st) {
    (void)st;
    fsc_device *d = NULL;
    assert_int_equal(fsc_device_create("count", NULL, &d), FSC_OK);
    assert_string_equal(fsc_device_name(d), "count");
    void *big = NULL, *big2 = NULL, *small = NULL;
    size_t huge = (size_t)1 << 40; /* a terabyte: counted, not there */
    assert_int_equal(fsc_device_alloc(d, FSC_TAG_PARAMS, huge, &big), FSC_OK);
    assert_int_equal(fsc_device_calloc(d, FSC_TAG_GRADS, huge, &big2), FSC_OK);
    assert_true(fsc_count_is_fake(big) && fsc_count_is_fake(big2) && big != big2);
    assert_int_equal(fsc_device_alloc(d, FSC_TAG_COMM, 64, &small), FSC_OK);
    assert_false(fsc_count_is_fake(small));
    assert_int_equal(fsc_device_peak_bytes(d, FSC_TAG_PARAMS), huge);
    assert_int_equal(fsc_device_peak_total(d), 2 * huge + 64);
    double x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y[8];
    assert_int_equal(fsc_device_upload(d, small, x, sizeof x), FSC_OK);
    assert_int_equal(fsc_device_download(d, y, small, sizeof y), FSC_OK);
    assert_memory_equal(x, y, sizeof x);
    assert_int_equal(fsc_device_upload(d, big, x, sizeof x), FSC_OK); /* nothing happens */
    assert_int_equal(fsc_device_download(d, y, big, sizeof y), FSC_OK);
    for (int i = 0; i < 8; i++) assert_true(y[i] == 0.0);
    double sum = 1.0;
    assert_int_equal(FSC_K(d, sum, &sum, big, huge / 4), FSC_OK);
    assert_true(sum == 0.0);
    float mx = 1.0f;
    int nonfinite = 1;
    assert_int_equal(FSC_K(d, absmax, &mx, &nonfinite, big, huge / 4), FSC_OK);
    assert_true(mx == 1.0f && nonfinite == 0); /* finite, not all zero: the grad norm takes its full path */
    /* what is written at a fake address is thrown away (parameter init skips computing it); not so elsewhere */
    assert_true(fsc_device_discards(d, big));
    assert_false(fsc_device_discards(d, small));
    fsc_device_release(d, big);
    fsc_device_release(d, big2);
    fsc_device_release(d, small);
    assert_int_equal(fsc_device_current_bytes(d, FSC_TAG_PARAMS), 0);
    fsc_device *cpu = NULL;
    assert_int_equal(fsc_device_create("cpu", NULL, &cpu), FSC_OK);
    assert_int_equal(fsc_device_alloc(cpu, FSC_TAG_PARAMS, 1 << 20, &big), FSC_OK);
    assert_false(fsc_device_discards(cpu, big));
    fsc_device_release(cpu, big);
    fsc_device_free(cpu);
    fsc_device *h = NULL; /* its host memory (offload) is counted, not there, too */
    assert_int_equal(fsc_device_create_host(d, &h), FSC_OK);
    assert_string_equal(fsc_device_name(h), "count");
    assert_int_equal(fsc_device_alloc(h, FSC_TAG_OPTIM, huge, &big), FSC_OK);
    assert_true(fsc_count_is_fake(big));
    fsc_device_release(h, big);
    fsc_device_free(h);
    fsc_device_free(d);
}

/* Simulated ranks on the counting device: a small collective carries its values (the engine's batch check and
 * error vote read them back), a large one moves nothing and completes on every rank. */
static fsc_status count_rank(fsc_rank *r, void *arg) {
    (void)arg;
    float v[4] = {(float)r->rank + 1, 0, 0, 0}, *d = NULL, *big = NULL;
    FSC_TRY(fsc_device_alloc(r->dev, FSC_TAG_COMM, sizeof v, (void **)&d));
    fsc_status s = fsc_device_upload(r->dev, d, v, sizeof v);
    if (s == FSC_OK) s = fsc_comm_all_reduce(r->comm, d, d, 4, FSC_F32, FSC_SUM);
    if (s == FSC_OK) s = fsc_device_download(r->dev, v, d, sizeof v);
    if (s == FSC_OK && v[0] != 3.0f) s = fsc_error(FSC_ERR_INTERNAL, "rank %d: the sum is %g, not 3", r->rank, v[0]);
    size_t n = (size_t)1 << 28; /* a GiB of floats: counted, not there */
    if (s == FSC_OK) s = fsc_device_alloc(r->dev, FSC_TAG_GRADS, n * sizeof(float), (void **)&big);
    if (s == FSC_OK) s = fsc_comm_all_reduce(r->comm, big, big, n, FSC_F32, FSC_SUM);
    if (s == FSC_OK && !fsc_count_is_fake(big)) s = fsc_error(FSC_ERR_INTERNAL, "a GiB allocation is real");
    fsc_device_release(r->dev, big);
    fsc_device_release(r->dev, d);
    return s;
}

static void test_count_cluster(void **state) {
    (void)state;
    fsc_cluster_opts o = fsc_cluster_opts_default();
    o.world = 2;
    o.device = "count";
    fsc_status s = fsc_cluster_run(&o, count_rank, NULL);
    if (s != FSC_OK) fail_msg("%s", fsc_last_error());
}

/* OpenBLAS's thread count is the process's: devices that set one give the count the process had back when the last
 * of them is freed, so a cluster of ranks of one thread each, or a device of 3, does not leave its count to what runs
 * after (a world-1 run after a world-2 one computed with 1 thread, and other bits). */
int openblas_get_num_threads(void);
void openblas_set_num_threads(int num_threads);
static fsc_status nothing(fsc_rank *r, void *arg) {
    (void)r, (void)arg;
    return FSC_OK;
}
static void test_blas_threads_given_back(void **state) {
    (void)state;
    openblas_set_num_threads(2);
    fsc_device *a = NULL, *b = NULL;
    assert_ok(fsc_device_create("cpu", &(fsc_device_opts){ .threads = 3 }, &a));
    assert_int_equal(openblas_get_num_threads(), 3);
    assert_ok(fsc_device_create("cpu", &(fsc_device_opts){ .threads = 1 }, &b));
    assert_int_equal(openblas_get_num_threads(), 1); /* the last set wins while both live */
    fsc_device_free(a);
    assert_int_equal(openblas_get_num_threads(), 1);
    fsc_device_free(b);
    assert_int_equal(openblas_get_num_threads(), 2);
    assert_ok(fsc_cluster_run(&(fsc_cluster_opts){ .world = 2, .timeout_s = 10 }, nothing, NULL));
    assert_int_equal(openblas_get_num_threads(), 2);
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "--open-cuda") == 0) { /* the child of test_cuda_plugin_no_fallback */
        fsc_device *d = NULL;
        fsc_status s = fsc_device_create("cuda", NULL, &d);
        printf("%d %s\n", (int)s, s == FSC_OK ? "opened" : fsc_last_error());
        if (s == FSC_OK) fsc_device_free(d);
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_cpu),
        cmocka_unit_test(test_blas_threads_given_back),
        cmocka_unit_test(test_bad_names_and_opts),
        cmocka_unit_test(test_cuda_without_plugin),
        cmocka_unit_test(test_cuda_plugin_directory),
        cmocka_unit_test(test_cuda_plugin_that_is_not_one),
        cmocka_unit_test(test_cuda_plugin_no_fallback),
        cmocka_unit_test(test_ledger),
        cmocka_unit_test(test_release_unknown_pointer),
        cmocka_unit_test(test_many_allocations),
        cmocka_unit_test(test_copies),
        cmocka_unit_test(test_host_device),
        cmocka_unit_test(test_copied_bytes),
        cmocka_unit_test(test_async_copies),
        cmocka_unit_test(test_async_copy_time),
        cmocka_unit_test(test_async_copy_errors),
        cmocka_unit_test(test_typed_kernels),
        cmocka_unit_test(test_count_device),
        cmocka_unit_test(test_count_cluster),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
