/* Tests for lib/core/device.c (and the memory side of backends/cpu/cpu_device.c).
 * Oracles: ledger numbers are sums of the byte counts the test allocated, worked out by hand;
 * bad names and a missing or broken cuda plug-in fail with the documented status and a message. */
#include <stdlib.h>
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
    if (s == FSC_OK) { /* a plug-in and a GPU are installed on this machine: nothing to check */
        fsc_device_free(d);
        skip();
    }
    assert_int_equal(s, FSC_ERR_UNSUPPORTED);
    assert_non_null(strstr(fsc_last_error(), "cuda"));
    assert_null(d);
}

static void test_cuda_plugin_directory(void **state) {
    (void)state;
    fsc_device *d = NULL;
    setenv("FSC_CUDA_PLUGIN", "/proc", 1); /* a directory: the plug-in is looked for inside it */
    fsc_status s = fsc_device_create("cuda", NULL, &d);
    unsetenv("FSC_CUDA_PLUGIN");
    if (s == FSC_OK) { /* found elsewhere, with a GPU */
        fsc_device_free(d);
        skip();
    }
    assert_int_equal(s, FSC_ERR_UNSUPPORTED);
    assert_non_null(strstr(fsc_last_error(), "/proc/libfsc_cuda.so"));
}

static void test_cuda_plugin_without_entry_point(void **state) {
    (void)state;
    fsc_device *d = NULL;
    setenv("FSC_CUDA_PLUGIN", "libm.so.6", 1); /* loads, but exports no fsc_cuda_device_open */
    fsc_status s = fsc_device_create("cuda", NULL, &d);
    unsetenv("FSC_CUDA_PLUGIN");
    assert_int_equal(s, FSC_ERR_UNSUPPORTED);
    assert_non_null(strstr(fsc_last_error(), "fsc_cuda_device_open"));
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
    fsc_device_release(d, x);
    fsc_device_release(d, y);
    fsc_device_free(d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_cpu),
        cmocka_unit_test(test_bad_names_and_opts),
        cmocka_unit_test(test_cuda_without_plugin),
        cmocka_unit_test(test_cuda_plugin_directory),
        cmocka_unit_test(test_cuda_plugin_without_entry_point),
        cmocka_unit_test(test_ledger),
        cmocka_unit_test(test_release_unknown_pointer),
        cmocka_unit_test(test_many_allocations),
        cmocka_unit_test(test_copies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
