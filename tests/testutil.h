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

#endif
