/* Helpers shared by the cmocka tests. */
#ifndef FSC_TESTUTIL_H
#define FSC_TESTUTIL_H
#include <stdarg.h>
#include <zlib.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>
#include <dirent.h>
#include <fcntl.h>
#include <locale.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include "fsc/fsc.h"

/* Assert a call succeeded; on failure print the library's message. */
#define assert_ok(expr)                                                                  \
    do {                                                                                 \
        fsc_status s_ = (expr);                                                          \
        if (s_ != FSC_OK) fail_msg("%s -> %s: %s", #expr, fsc_status_str(s_), fsc_last_error()); \
    } while (0)

/* Assert a call failed with status st and a message containing needle. */
#define assert_err(expr, st, needle)                                                     \
    do {                                                                                 \
        fsc_status s_ = (expr);                                                          \
        if (s_ != (st)) fail_msg("%s -> %s (expected %s): %s", #expr, fsc_status_str(s_), \
                                 fsc_status_str(st), fsc_last_error());                  \
        if ((needle) && !strstr(fsc_last_error(), (needle)))                             \
            fail_msg("%s: message \"%s\" lacks \"%s\"", #expr, fsc_last_error(), (const char *)(needle)); \
    } while (0)

/* Bitwise equality of two float arrays, reporting the first difference. */
static inline void assert_bits_equal(const float *a, const float *b, size_t n, const char *what) {
    for (size_t i = 0; i < n; i++) {
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0)
            fail_msg("%s: element %zu differs: %.9g vs %.9g", what, i, (double)a[i], (double)b[i]);
    }
}

/* Whether this process's open descriptors of path (but except) are close-on-exec: 1 if all are, 0 if one is not,
 * -1 if none is open. For a file the library holds open while another thread looks (a FIFO it waits on). */
static inline int test_fd_cloexec(const char *path, int except) {
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    int found = -1;
    for (struct dirent *e; (e = readdir(d));) {
        char link[300], to[4096];
        int fd = atoi(e->d_name);
        snprintf(link, sizeof link, "/proc/self/fd/%s", e->d_name);
        ssize_t n = e->d_name[0] == '.' || fd == except || fd == dirfd(d) ? -1 : readlink(link, to, sizeof to - 1);
        if (n < 0) continue;
        to[n] = '\0';
        if (strcmp(to, path) != 0) continue;
        int fl = fcntl(fd, F_GETFD);
        if (found != 0) found = fl >= 0 && (fl & FD_CLOEXEC) ? 1 : 0;
    }
    closedir(d);
    return found;
}

/* Remove a directory tree (a test's temporary folder); missing entries are ignored. */
static inline void test_rmtree(const char *dir) {
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *de;
        char p[1024];
        while ((de = readdir(d)) != NULL) {
            if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
            int n = snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
            if (n < 0 || (size_t)n >= sizeof p) continue; /* too long for a test folder: leave it */
            struct stat st;
            if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode)) test_rmtree(p);
            else unlink(p);
        }
        closedir(d);
    }
    rmdir(dir);
}

/* LeakSanitizer's switch, in ASan builds only (weak: NULL elsewhere). glibc keeps 39 bytes of LOCPATH's parsing
 * for good when it loads a locale from there, which LSan reports as fsc's leak at exit. */
void __lsan_disable(void) __attribute__((weak));
void __lsan_enable(void) __attribute__((weak));

/* A locale whose decimal point is a comma (de_DE, made with localedef when its source is installed: the locales
 * package), for uselocale; (locale_t)0 when none can be made (the caller skips). Free it with freelocale. */
static inline locale_t test_comma_locale(void) {
    char dir[] = "/tmp/fsc_locale_XXXXXX", cmd[300];
    if (!mkdtemp(dir)) return (locale_t)0;
    snprintf(cmd, sizeof cmd, "localedef -i de_DE -f UTF-8 %s/de_DE.UTF-8 >/dev/null 2>&1", dir);
    const char *old = getenv("LOCPATH");
    char *saved = old ? strdup(old) : NULL;
    locale_t de = (locale_t)0;
    if (system(cmd) == 0) {
        setenv("LOCPATH", dir, 1);
        if (__lsan_disable) __lsan_disable();
        de = newlocale(LC_ALL_MASK, "de_DE.UTF-8", (locale_t)0);
        if (__lsan_enable) __lsan_enable();
    }
    if (saved) setenv("LOCPATH", saved, 1);
    else unsetenv("LOCPATH");
    free(saved);
    test_rmtree(dir);
    return de;
}

/* A checkpoint's metadata.json text edited by a test, sealed again: its "metadata_crc32" set to the crc32 of the
 * text with that field's 8 hex digits zeroed (docs/checkpoints.md), so only the edit is what a reader refuses. */
static inline void test_reseal_metadata(char *text) {
    char *d = strstr(text, "\"metadata_crc32\"");
    assert_non_null(d);
    d = strchr(d + strlen("\"metadata_crc32\""), '"');
    assert_non_null(d);
    d++;
    memcpy(d, "00000000", 8);
    char hex[9];
    snprintf(hex, sizeof hex, "%08x", (unsigned)crc32(0L, (const Bytef *)text, (uInt)strlen(text)));
    memcpy(d, hex, 8);
}

/* Whether text is valid UTF-8, checked by the definition (no overlong form, no surrogate, nothing past U+10FFFF):
 * what a strict JSON reader (Python's json, jq) takes, and cJSON does not check. */
static inline int test_valid_utf8(const unsigned char *p) {
    while (*p) {
        const unsigned c = *p;
        int k = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
        unsigned cp = k == 1 ? c : k == 2 ? c & 0x1f : k == 3 ? c & 0x0f : c & 0x07;
        for (int j = 1; j < k; j++) {
            if ((p[j] & 0xc0) != 0x80) return 0;
            cp = cp << 6 | (p[j] & 0x3f);
        }
        const unsigned min[5] = { 0, 0, 0x80, 0x800, 0x10000 };
        if (!k || cp < min[k] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
        p += k;
    }
    return 1;
}

#endif
