/* What reading checkpoint metadata may cost (lib/ckpt/ckpt_meta_check.c, ckpt_meta.c, ckpt_load.c).
 * Oracles:
 *   - a metadata.json above FSC_CKPT_MAX_META is refused as "too large", naming its size and the limit,
 *     by verify and by a load on every rank, without being read;
 *   - parsing allocates at most CK_PARSE_FACTOR (12) bytes per byte of text (plus a constant): measured with
 *     counting cJSON allocators on a real checkpoint's metadata and on JSON made of the smallest values just
 *     inside the bound; text beyond the bound is refused as too large before cJSON allocates anything;
 *   - a load on a simulated cluster of 4 ranks opens metadata.json once (world rank 0 reads it and sends the
 *     others what they need), counted by an open() that the test puts in front of the C library's, and
 *     the loaded state equals the saved one. */
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <cjson/cJSON.h>
#include <zlib.h>
#include "ckpttest.h"

#if defined(__SANITIZE_THREAD__)
#define CT_COUNT_OPENS 0
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CT_COUNT_OPENS 0
#endif
#endif
#ifndef CT_COUNT_OPENS
#define CT_COUNT_OPENS 1
#endif

#if CT_COUNT_OPENS
/* The process's open(): counts the opens of files named metadata.json (ThreadSanitizer builds keep the C
 * library's, whose interceptor tracks file descriptors; the count is not checked there). */
static atomic_int meta_opens;
int open(const char *path, int flags, ...) {
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) {
        va_list ap;
        va_start(ap, flags);
        mode = (mode_t)va_arg(ap, int);
        va_end(ap);
    }
    size_t n = strlen(path);
    if (n >= 13 && !strcmp(path + n - 13, "metadata.json")) atomic_fetch_add(&meta_opens, 1);
    return (int)syscall(SYS_openat, AT_FDCWD, path, flags, mode);
}
#endif

/* ---- counting cJSON's allocations (only while no cJSON object is alive) ---- */
static size_t cj_now, cj_peak, cj_calls;
static void *cj_malloc(size_t n) {
    size_t *p = malloc(n + sizeof(size_t) * 2);
    if (!p) return NULL;
    p[0] = n;
    cj_now += n;
    cj_calls++;
    if (cj_now > cj_peak) cj_peak = cj_now;
    return p + 2;
}
static void cj_free(void *q) {
    if (!q) return;
    size_t *p = (size_t *)q - 2;
    cj_now -= p[0];
    free(p);
}
static void cj_count(int on) {
    cJSON_Hooks h = { cj_malloc, cj_free };
    cj_now = cj_peak = cj_calls = 0;
    cJSON_InitHooks(on ? &h : NULL);
}

typedef ct_fixture fixture;

static ct_job job(int world) { return ct_fsdp(world, FSC_SHARD_FULL); }

/* The rule of docs/checkpoints.md: metadata_crc32 = crc32 of the text with its digits read as zeros. */
static void reseal(char *text, size_t len) {
    char *d = strstr(text, "\"metadata_crc32\":\"") + strlen("\"metadata_crc32\":\"");
    memcpy(d, "00000000", 8);
    char hex[9];
    snprintf(hex, sizeof hex, "%08x", (unsigned)crc32(0L, (const Bytef *)text, (uInt)len));
    memcpy(d, hex, 8);
}

static void test_ckpt_meta_too_large(void **state) {
    fixture *f = *state;
    char *dir = ct_tmpdir(), ck[600], p[700], q[700], buf[96];
    const char *needle = buf;
    ct_step_path(ck, sizeof ck, dir, 1);
    assert_int_equal(mkdir(ck, 0777), 0);
    const char *names[] = { "rank-00000-of-00002.safetensors", "rank-00001-of-00002.safetensors" };
    for (int i = 0; i < 2; i++) {
        snprintf(p, sizeof p, "%s/%s", f->path, names[i]);
        snprintf(q, sizeof q, "%s/%s", ck, names[i]);
        assert_int_equal(link(p, q), 0);
    }
    snprintf(p, sizeof p, "%s/metadata.json", ck);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)FSC_CKPT_MAX_META + 1), 0); /* sparse: no disk used */
    close(fd);
    snprintf(buf, sizeof buf, "%llu bytes, above the limit of %llu",
             (unsigned long long)FSC_CKPT_MAX_META + 1, (unsigned long long)FSC_CKPT_MAX_META);
    assert_err(fsc_ckpt_verify(ck, NULL), FSC_ERR_FORMAT, needle);
    assert_non_null(strstr(fsc_last_error(), "too large"));
    ct_job j = job(4);
    j.load = ck;
    assert_err(ct_try(&j), FSC_ERR_FORMAT, needle);
    assert_non_null(strstr(fsc_last_error(), "too large"));
    ct_free(&j);
    ct_rmtree(dir);
}

/* text of about n bytes: {"metadata_crc32":"...","x":[0,0,...]}, with `pad` spaces after each value */
static char *small_values(size_t n, int pad, size_t *len) {
    char *t = malloc(n + 64);
    size_t at = (size_t)sprintf(t, "{\"metadata_crc32\":\"00000000\",\"x\":[0");
    while (at + (size_t)pad + 4 < n) {
        t[at++] = ',';
        for (int k = 0; k < pad; k++) t[at++] = ' ';
        t[at++] = '0';
    }
    at += (size_t)sprintf(t + at, "]}");
    reseal(t, at);
    *len = at;
    return t;
}

static void test_ckpt_meta_parse_bound(void **state) {
    fixture *f = *state;
    fsc_ckpt_meta *m = NULL;
    char p[700];
    size_t len = 0;
    /* a real checkpoint's metadata: parsed within the bound */
    snprintf(p, sizeof p, "%s/metadata.json", f->path);
    char *text = ct_slurp(p, &len);
    assert_non_null(text);
    cj_count(1);
    fsc_status s = fsc_ckpt_meta_parse(text, len, "real", &m);
    size_t peak = cj_peak;
    cj_count(0);
    assert_ok(s);
    fsc_ckpt_meta_free(m);
    if (peak > (size_t)12 * len) fail_msg("a real checkpoint's %zu bytes took %zu bytes to parse", len, peak);
    free(text);
    /* the smallest values: refused before cJSON allocates anything ("too large"); with enough spaces
     * between them, inside the bound, parsed (and refused as metadata) within it */
    text = small_values((size_t)1 << 20, 0, &len);
    cj_count(1);
    s = fsc_ckpt_meta_parse(text, len, "dense", &m);
    size_t calls = cj_calls;
    cj_count(0);
    assert_int_equal(s, FSC_ERR_FORMAT);
    assert_null(m);
    if (!strstr(fsc_last_error(), "too large")) fail_msg("message: %s", fsc_last_error());
    assert_int_equal(calls, 0);
    free(text);
    for (int pad = 1; pad < 16; pad++) {
        text = small_values((size_t)1 << 20, pad, &len);
        cj_count(1);
        s = fsc_ckpt_meta_parse(text, len, "spaced", &m);
        peak = cj_peak;
        calls = cj_calls;
        cj_count(0);
        assert_int_equal(s, FSC_ERR_FORMAT);
        if (peak > (size_t)12 * len + ((size_t)12 << 16))
            fail_msg("%zu bytes with %d spaces per value took %zu bytes to parse", len, pad, peak);
        if (calls == 0 && !strstr(fsc_last_error(), "too large")) fail_msg("refused for: %s", fsc_last_error());
        free(text);
    }
}

static void test_ckpt_meta_read_once(void **state) {
    fixture *f = *state;
    ct_job w = job(2), r = job(4);
    w.load = f->path; /* the saved state, for comparison */
    ct_run(&w);
#if CT_COUNT_OPENS
    atomic_store(&meta_opens, 0);
#endif
    r.load = f->path;
    ct_run(&r);
#if CT_COUNT_OPENS
    assert_int_equal(atomic_load(&meta_opens), 1);
#endif
    assert_int_equal(r.loaded_step, 1);
    ct_assert_state_equal(&w, &r, "loaded on 4 ranks");
    ct_free(&w);
    ct_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ckpt_meta_too_large),
        cmocka_unit_test(test_ckpt_meta_parse_bound),
        cmocka_unit_test(test_ckpt_meta_read_once),
    };
    return cmocka_run_group_tests(tests, ct_fixture_setup, ct_fixture_teardown);
}
