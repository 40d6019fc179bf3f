/* libFuzzer harness for the spec of token files (lib/io/data.c, fsc_data_open): the comma-separated list of paths
 * and globs that fsc-train's --data and --val-data, and fsc-tokenize --decode's TOKENS, take from the command line.
 * The harness works in a folder of its own (made once; the working directory while a spec is opened and read)
 * holding a.bin, b.bin, a file named "a,b.bin", one named "x[1].bin", an empty e.bin and d/c.bin, each of a few distinct bytes; a spec is read
 * as bytes (vocabulary 256). Checks beyond "no crash, no leak": a refusal returns no stream and sets a message;
 * an accepted spec is a stream of at least one file, each a regular file that exists, its tokens the file's bytes
 * in the order of the list; a spec without '*', '?', '[' or '\' that does not name a file itself is exactly its
 * comma-separated entries, in order.
 * Input: the spec (up to 255 bytes; specs holding ".." or an entry that starts with '/' or '\' (an escaped '/') are
 * skipped: they would leave the folder).
 * Build and run: ci/fuzz.sh SECONDS fuzz/fuzz_data_spec.c (or make fuzz). */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "fsc/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) __builtin_trap();                                                                \
    } while (0)

static void put(const char *name, const char *text) {
    FILE *f = fopen(name, "wb");
    CHECK(f);
    CHECK(fputs(text, f) >= 0 && fclose(f) == 0);
}

static char dir[] = "/tmp/fsc_fuzz_data_spec_XXXXXX";

static const char *const names[] = { "a.bin", "b.bin", "a,b.bin", "x[1].bin", "e.bin", "d/c.bin", "d" };

/* The folder and its files removed at the campaign's end. */
static void remove_folder(void) {
    char p[128];
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) snprintf(p, sizeof p, "%s/%s", dir, names[i]), remove(p);
    rmdir(dir);
}

/* The folder of files, made once; entered for each input (libFuzzer's own paths are relative to where it started). */
static void enter(void) {
    static int made;
    if (made) {
        CHECK(chdir(dir) == 0);
        return;
    }
    CHECK(mkdtemp(dir) && chdir(dir) == 0);
    put("a.bin", "abcd"), put("b.bin", "efg"), put("a,b.bin", "hijkl"), put("x[1].bin", "mn"), put("e.bin", "");
    CHECK(mkdir("d", 0700) == 0);
    put("d/c.bin", "opqrs");
    atexit(remove_folder);
    made = 1;
}

/* The bytes of the file at path (at most cap), their count in *n; 0 when it cannot be read. */
static int slurp(const char *path, uint8_t *buf, size_t cap, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    *n = fread(buf, 1, cap, f);
    fclose(f);
    return 1;
}

/* The checks on one spec, in the folder. */
static void check_spec(const char *spec) {
    fsc_data *d = (fsc_data *)spec; /* must be set to NULL on a refusal */
    if (fsc_data_open(&d, spec, FSC_DATA_BYTES, 256) != FSC_OK) {
        CHECK(d == NULL);
        CHECK(fsc_last_error()[0] != '\0');
        return;
    }
    const int n = fsc_data_files(d);
    CHECK(n >= 1 && fsc_data_format_of(d) == FSC_DATA_BYTES);
    /* every file exists and is regular; the stream is their bytes, in order */
    uint8_t want[4096], file[64];
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        struct stat sb;
        const char *p = fsc_data_file(d, i);
        size_t got = 0;
        CHECK(p && stat(p, &sb) == 0 && S_ISREG(sb.st_mode) && slurp(p, file, sizeof file, &got));
        CHECK(got == (size_t)sb.st_size && fsc_data_file_tokens(d, i) == got && total + got <= sizeof want);
        memcpy(want + total, file, got);
        total += got;
    }
    CHECK(fsc_data_tokens(d) == total);
    int32_t out[4096];
    CHECK(fsc_data_read(d, 0, total, out) == FSC_OK);
    for (size_t j = 0; j < total; j++) CHECK(out[j] == want[j]);
    /* a plain list (no pattern, not itself a file's name) is its entries */
    struct stat sb;
    if (!strpbrk(spec, "*?[\\") && !(strchr(spec, ',') && stat(spec, &sb) == 0)) {
        int k = 0;
        for (const char *p = spec;; k++) {
            const char *c = strchr(p, ',');
            const size_t len = c ? (size_t)(c - p) : strlen(p);
            CHECK(k < n && strlen(fsc_data_file(d, k)) == len && !strncmp(fsc_data_file(d, k), p, len));
            if (!c) break;
            p = c + 1;
        }
        CHECK(k + 1 == n);
    }
    fsc_data_free(d);
}

/* Whether a pattern of spec may name ".." without writing it: glob(3) matches a component's leading period only when
 * written, but ".*", ".?" and "\.\." match ".." (and the folder above holds what it holds). */
static int may_go_up(const char *spec) {
    if (!strpbrk(spec, "*?[")) return 0;
    for (const char *p = spec; *p; p++)
        if ((p == spec || p[-1] == '/' || p[-1] == ',') && (*p == '.' || *p == '\\')) return 1;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char spec[256];
    if (size >= sizeof spec || memchr(data, 0, size)) return 0;
    memcpy(spec, data, size);
    spec[size] = '\0';
    if (strstr(spec, "..") || may_go_up(spec)) return 0; /* stay in the folder: no way up, no entry from the root */
    for (const char *e = spec; e; e = strchr(e, ',') ? strchr(e, ',') + 1 : NULL)
        if (*e == '/' || *e == '\\') return 0;
    int back = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    CHECK(back >= 0);
    enter();
    check_spec(spec);
    CHECK(fchdir(back) == 0 && close(back) == 0);
    return 0;
}
