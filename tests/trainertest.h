/* Shared by the tests that run a built program (the trainer, ckpt_tool): run a command line with its output
 * captured in files of a temporary folder, read them back, and parse the JSON line that ends the output. */
#ifndef FSC_TRAINERTEST_H
#define FSC_TRAINERTEST_H
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "testutil.h"

/* A whole file as a string ("" if it cannot be read; the caller frees). */
static inline char *prog_slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return strdup("");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)(n > 0 ? n : 0) + 1);
    if (!s) fail_msg("out of memory");
    size_t got = n > 0 ? fread(s, 1, (size_t)n, f) : 0;
    s[got] = '\0';
    fclose(f);
    return s;
}

/* Run `'prog' args` with stdout to dir/out and stderr to dir/err (or both to dir/out when err is NULL);
 * returns the exit status (-1 if killed) and the outputs in *out and *err (either may be NULL; caller frees). */
static inline int prog_run(const char *prog, const char *args, const char *dir, char **out, char **err) {
    char *cmd = NULL, p[600];
    int n = err ? asprintf(&cmd, "'%s' %s > '%s/out' 2> '%s/err'", prog, args, dir, dir)
                : asprintf(&cmd, "'%s' %s > '%s/out' 2>&1", prog, args, dir);
    if (n < 0) fail_msg("out of memory");
    int st = system(cmd);
    free(cmd);
    snprintf(p, sizeof p, "%s/out", dir);
    if (out) *out = prog_slurp(p);
    snprintf(p, sizeof p, "%s/err", dir);
    if (err) *err = prog_slurp(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The JSON object on the last non-empty line of out; fails the test if there is none. */
static inline cJSON *prog_last_json(const char *out) {
    const char *end = out + strlen(out);
    while (end > out && end[-1] == '\n') end--;
    const char *line = end;
    while (line > out && line[-1] != '\n') line--;
    cJSON *j = cJSON_ParseWithLength(line, (size_t)(end - line));
    if (!j) fail_msg("the last line is not JSON: %.*s", (int)(end - line), line);
    return j;
}

/* Run `'prog' <model> args --json` (stdout and stderr together) and return its JSON line; fails the test if
 * the run fails or prints none. */
static inline cJSON *prog_json(const char *prog, const char *dir, const char *model, const char *args) {
    char *full = NULL, *out = NULL;
    if (asprintf(&full, "%s %s --json", model, args) < 0) fail_msg("out of memory");
    int rc = prog_run(prog, full, dir, &out, NULL);
    if (rc != 0) fail_msg("%s %s: exit %d\n%s", prog, full, rc, out);
    cJSON *j = prog_last_json(out);
    free(out);
    free(full);
    return j;
}

/* printf into a new string (the caller frees); fails the test when out of memory. */
static inline char *prog_fmt(const char *f, ...) {
    va_list ap;
    va_start(ap, f);
    char *s = NULL;
    if (vasprintf(&s, f, ap) < 0) s = NULL;
    va_end(ap);
    if (!s) fail_msg("out of memory");
    return s;
}

/* Run a shell command line; its exit status in *status and the peak resident size its process tree reached
 * (getrusage's ru_maxrss, KiB) as the return value. */
static inline long prog_run_maxrss(const char *cmd, int *status) {
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    struct rusage ru;
    assert_int_equal(wait4(pid, status, 0, &ru), pid);
    return ru.ru_maxrss;
}

/* Write n deterministic letters ('a' + (i*7 + i/13) % 26) to dir/name: a small corpus of bytes below any
 * vocabulary. Returns 0, or 1 if the file cannot be written. */
static inline int prog_write_letters(const char *dir, const char *name, int n) {
    char *path = prog_fmt("%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    free(path);
    if (!f) return 1;
    for (int i = 0; i < n; i++) fputc('a' + (i * 7 + i / 13) % 26, f);
    return fclose(f) != 0;
}

/* Run `'prog' args` expecting it refused: exit status want (any but 0 when want < 0) and needle in its
 * stderr; fails the test otherwise. */
static inline void prog_refused(const char *prog, const char *args, const char *dir, int want, const char *needle) {
    char *out = NULL, *err = NULL;
    int rc = prog_run(prog, args, dir, &out, &err);
    if (want < 0 ? rc == 0 : rc != want)
        fail_msg("%s: exit %d (expected %s%d)\n%s%s", args, rc, want < 0 ? "not " : "", want < 0 ? 0 : want, out, err);
    if (!strstr(err, needle)) fail_msg("%s: the message lacks \"%s\": %s", args, needle, err);
    free(out);
    free(err);
}

/* The n numbers of the array j[key] into v (a null entry as null_as); fails the test if key is not an array of
 * n entries. */
static inline void prog_doubles(const cJSON *j, const char *key, double *v, int n, double null_as) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!cJSON_IsArray(a)) fail_msg("no array \"%s\" in the JSON line", key);
    assert_int_equal(cJSON_GetArraySize(a), n);
    for (int i = 0; i < n; i++) {
        const cJSON *x = cJSON_GetArrayItem(a, i);
        v[i] = cJSON_IsNull(x) ? null_as : x->valuedouble;
    }
}

/* Run `'prog' args` (stdout and stderr together; args should hold --json): exit 0 required, and must (unless
 * NULL) in the output. Returns the JSON line's "losses" as text (the caller frees); the output in *out unless
 * out is NULL (caller frees). */
static inline char *prog_losses(const char *prog, const char *args, const char *dir, const char *must, char **out) {
    char *o = NULL;
    int rc = prog_run(prog, args, dir, &o, NULL);
    if (rc != 0) fail_msg("%s: exit %d\n%s", args, rc, o);
    if (must && !strstr(o, must)) fail_msg("%s: the output lacks \"%s\"\n%s", args, must, o);
    cJSON *j = prog_last_json(o);
    char *losses = cJSON_PrintUnformatted(cJSON_GetObjectItem(j, "losses"));
    cJSON_Delete(j);
    if (!losses) fail_msg("%s: no losses in the JSON line", args);
    if (out) *out = o;
    else free(o);
    return losses;
}

/* The start of such a test's main: the program `prog` built next to the test (argv0's folder/../prog) into
 * path, and a fresh temporary folder /tmp/fsc_<test>_XXXXXX into tmpdir. Returns 0, or 1 after saying on
 * stderr what is missing. */
static inline int prog_setup(const char *argv0, const char *test, const char *prog, char *path, size_t cap,
                             char *tmpdir, size_t tcap) {
    char self[PATH_MAX];
    if (!realpath(argv0, self)) {
        fprintf(stderr, "%s: cannot resolve %s\n", test, argv0);
        return 1;
    }
    snprintf(path, cap, "%s/../%s", dirname(self), prog);
    if (access(path, X_OK) != 0) {
        fprintf(stderr, "%s: %s not found: build it first (make ... %s)\n", test, path, prog);
        return 1;
    }
    /* tools/plot and tools/trace_merge read JSON with this build's fsc-jsonl (tools/jsonl.sh) */
    char jsonl[PATH_MAX + 16];
    snprintf(jsonl, sizeof jsonl, "%s/../fsc-jsonl", self);
    if (access(jsonl, X_OK) == 0) setenv("FSC_JSONL", jsonl, 0);
    snprintf(tmpdir, tcap, "/tmp/fsc_%s_XXXXXX", test);
    /* the trainer's MFU peak cache (examples/train/peak.c): one for the suite, not the user's ~/.cache */
    setenv("FSC_CACHE_DIR", "/tmp/fsc_test_cache", 0);
    return mkdtemp(tmpdir) ? 0 : 1;
}

/* A trainer that is running, held in place: `'prog' args --log FIFO` started in the background (stdout and
 * stderr to dir/bg.out), its --log a FIFO (dir/bg.fifo) of one page that this test reads until `lines` lines
 * have come (its config line, then one per step) and then stops reading, so that the trainer blocks on its log
 * once the page is full and holds whatever it holds (its --ckpt-dir lock) until prog_held_end. Returns its pid
 * and the FIFO's read end in *fd; fails the test (with its output) if it exits first. */
static inline pid_t prog_start_held(const char *prog, const char *args, const char *dir, int lines, int *fd) {
    char *fifo = prog_fmt("%s/bg.fifo", dir), *cmd = prog_fmt("exec '%s' %s --log '%s' > '%s/bg.out' 2>&1", prog,
                                                                 args, fifo, dir);
    unlink(fifo);
    if (mkfifo(fifo, 0600) != 0) fail_msg("mkfifo %s failed", fifo);
    *fd = open(fifo, O_RDONLY | O_NONBLOCK | O_CLOEXEC); /* before the writer: its open then does not wait */
    if (*fd < 0) fail_msg("cannot open %s", fifo);
    fcntl(*fd, F_SETPIPE_SZ, 4096);
    pid_t pid = fork();
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    if (pid < 0) fail_msg("fork failed");
    int seen = 0, st;
    char c;
    while (seen < lines) {
        struct pollfd p = {.fd = *fd, .events = POLLIN};
        int ready = poll(&p, 1, 1000); /* a second at a time, to notice a trainer that ended (not a limit) */
        ssize_t n = ready > 0 ? read(*fd, &c, 1) : -1;
        if (n == 1 && c == '\n') seen++;
        if (n <= 0 && waitpid(pid, &st, WNOHANG) == pid) {
            char *out = prog_fmt("%s/bg.out", dir), *text = prog_slurp(out);
            fail_msg("'%s' %s ended before %d lines of its log:\n%s", prog, args, lines, text);
        }
    }
    free(fifo), free(cmd);
    return pid;
}

/* End a trainer of prog_start_held: its log's reader goes, so its next write kills it (SIGPIPE) or fails it;
 * returns once it has exited. */
static inline void prog_held_end(pid_t pid, int fd) {
    int st;
    close(fd);
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) continue;
}

#endif
