/* README's walkthrough ("Walkthrough: from a text to samples"), run as written at a tiny size: the block after the
 * marker line is taken from README.md, a few of its words replaced (each replacement must find its text, so a
 * README that drifts fails here), and run by /bin/sh -e in a temporary folder whose build/, tools/ and examples/
 * are this build's programs and the repository's folders. The replacements: no make (the programs are built);
 * a tiny model and 200 steps by command-line options after --config (the command line wins); the 10 s timeout
 * becomes a kill -9 right after the first complete checkpoint (step 5 of 200), failing if the run ended first;
 * make plot becomes tools/plot (its --data tables without gnuplot, so nothing is installed); fewer sampled tokens.
 * Oracles: the script exits 0; the second run says it resumed from a checkpoint; the killed-and-resumed run's
 * final weights file equals, byte for byte, the one of the same command run through without a kill; the sampler
 * printed the prompt; the log holds validation records; the merged trace has a process for rank 3. */
#include <limits.h>
#include <stdlib.h>
#include "trainertest.h"

static char trainer[PATH_MAX], bindir[PATH_MAX], root[PATH_MAX];
static char tmpdir[64];

#define MARKER "<!-- walkthrough: tests/test_walkthrough.c runs the next block -->"
#define TINY "--layers 2 --dim 32 --batch 8 --steps 200 --warmup 4 --val-every 10 --val-batches 2 --save-every 5"

/* s with every `from` replaced by `to` (a new string); fails the test unless there were exactly `count`. */
static char *replace(char *s, const char *from, const char *to, int count) {
    size_t lf = strlen(from), lt = strlen(to);
    int n = 0;
    for (const char *p = s; (p = strstr(p, from)); p += lf) n++;
    if (n != count)
        fail_msg("README's walkthrough has %d of \"%s\" (this test expects %d): update tests/test_walkthrough.c", n,
                 from, count);
    char *out = malloc(strlen(s) + (size_t)n * lt + 1), *o = out;
    if (!out) fail_msg("out of memory");
    for (const char *p = s, *q; ; p = q + lf) {
        q = strstr(p, from);
        size_t k = q ? (size_t)(q - p) : strlen(p);
        memcpy(o, p, k), o += k;
        if (!q) break;
        memcpy(o, to, lt), o += lt;
    }
    *o = '\0';
    free(s);
    return out;
}

/* The fenced block after MARKER in README.md. */
static char *readme_block(void) {
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/README.md", root);
    char *readme = prog_slurp(path);
    const char *m = strstr(readme, MARKER);
    if (!m) fail_msg("README.md has no line %s", MARKER);
    const char *start = strstr(m, "```sh\n");
    if (!start) fail_msg("README.md: no ```sh block after the walkthrough marker");
    start += 6;
    const char *end = strstr(start, "\n```");
    if (!end) fail_msg("README.md: the walkthrough block does not end");
    char *block = strndup(start, (size_t)(end - start) + 1);
    free(readme);
    return block;
}

static const char prelude[] =
    "set -e\n"
    "kill_after_checkpoint() { # the README's timeout -s KILL: kill -9 as soon as a checkpoint is complete\n"
    "  \"$@\" > run/killed.out 2>&1 &\n"
    "  pid=$!\n"
    "  while :; do\n"
    "    for d in run/ck/step-*; do case $d in *.tmp*) ;; *) [ -f \"$d/metadata.json\" ] && break 2;; esac; done\n"
    "    kill -0 $pid 2>/dev/null || break\n"
    "    sleep 0.01\n"
    "  done\n"
    "  kill -9 $pid 2>/dev/null || true\n"
    "  rc=0; wait $pid || rc=$?\n"
    "  cat run/killed.out\n"
    "  [ $rc = 137 ] || { echo \"walkthrough: the first run ended (status $rc) before the kill\"; exit 3; }\n"
    "}\n"
    "plot() { if command -v gnuplot > /dev/null; then tools/plot \"$1\" \"$2\"; "
    "else tools/plot --data \"$1\" > run/plot.tsv; fi; }\n";

static void test_walkthrough(void **state) {
    (void)state;
    char *block = readme_block();
    block = replace(block, "make lib build/fsc-train build/sample\n", "", 1);
    block = replace(block, "build/fsc-train --config run/llama.json", "build/fsc-train --config run/llama.json " TINY, 2);
    block = replace(block, "timeout -s KILL 10 ", "kill_after_checkpoint ", 1);
    block = replace(block, "--tokens 200", "--tokens 20", 1);
    block = replace(block, "make plot LOG=run/log.jsonl OUT=run/loss.png", "plot run/log.jsonl run/loss.png", 1);

    char path[PATH_MAX + 64], *cmd = NULL;
    snprintf(path, sizeof path, "%s/walk.sh", tmpdir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(prelude, f);
    fputs(block, f);
    assert_int_equal(fclose(f), 0);
    free(block);
    assert_true(asprintf(&cmd, "cd '%s' && ln -s '%s' build && ln -s '%s/tools' tools && ln -s '%s/examples' examples",
                         tmpdir, bindir, root, root) > 0);
    assert_int_equal(system(cmd), 0);
    free(cmd);

    char *out = NULL;
    assert_true(asprintf(&cmd, "-c \"cd '%s' && sh walk.sh\"", tmpdir) > 0);
    int rc = prog_run("/bin/sh", cmd, tmpdir, &out, NULL);
    free(cmd);
    if (rc != 0) fail_msg("README's walkthrough failed (exit %d):\n%s", rc, out);
    if (!strstr(out, "resumed from run/ck/step-")) fail_msg("the second run did not resume:\n%s", out);
    if (!strstr(out, "\nMENENIUS:")) fail_msg("the sampler did not print the prompt:\n%s", out);
    if (getenv("FSC_TEST_VERBOSE")) fputs(out, stderr);
    free(out);

    /* the same command without the kill: the same weights, byte for byte */
    assert_true(asprintf(&cmd, "-c \"cd '%s' && build/fsc-train --config run/llama.json " TINY
                               " --ckpt-dir run/ref --resume run/ref --log run/ref.jsonl --trace run/reftrace"
                               " --save run/ref.safetensors\"", tmpdir) > 0);
    rc = prog_run("/bin/sh", cmd, tmpdir, &out, NULL);
    free(cmd);
    if (rc != 0) fail_msg("the uninterrupted run failed (exit %d):\n%s", rc, out);
    free(out);
    assert_true(asprintf(&cmd, "cmp '%s/run/llama.safetensors' '%s/run/ref.safetensors'", tmpdir, tmpdir) > 0);
    assert_int_equal(system(cmd), 0);
    free(cmd);

    snprintf(path, sizeof path, "%s/run/log.jsonl", tmpdir);
    char *log = prog_slurp(path);
    assert_non_null(strstr(log, "\"type\":\"val\""));
    free(log);
    snprintf(path, sizeof path, "%s/run/trace.json", tmpdir);
    char *trace = prog_slurp(path);
    assert_non_null(strstr(trace, "\"name\":\"rank 3\""));
    free(trace);
    snprintf(path, sizeof path, "%s/run/loss.png", tmpdir);
    if (access(path, R_OK) != 0) { /* no gnuplot: the tables */
        snprintf(path, sizeof path, "%s/run/plot.tsv", tmpdir);
        char *tab = prog_slurp(path);
        assert_non_null(strstr(tab, "# val\nstep\tval_loss\n10\t"));
        free(tab);
    }
}

int main(int argc, char **argv) {
    (void)argc;
    if (prog_setup(argv[0], "test_walkthrough", "fsc-train", trainer, sizeof trainer, tmpdir, sizeof tmpdir)) return 1;
    snprintf(bindir, sizeof bindir, "%s", trainer);
    *strrchr(bindir, '/') = '\0';
    char src[PATH_MAX];
    const char *file = __FILE__, *slash = strrchr(file, '/'); /* README.md above tests/ */
    snprintf(src, sizeof src, "%.*s..", slash ? (int)(slash - file + 1) : 0, file);
    if (!slash) snprintf(src, sizeof src, "..");
    if (!realpath(src, root) || !realpath(bindir, src)) {
        fprintf(stderr, "test_walkthrough: cannot find the repository (run from its root)\n");
        return 1;
    }
    snprintf(bindir, sizeof bindir, "%s", src);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_walkthrough),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    test_rmtree(tmpdir);
    return rc;
}
