/* libFuzzer harness for fsc-tokenize's command line: parse_args of examples/tokenize.c (compiled into the harness,
 * its main renamed; its messages go to /dev/null during the call). Input: the arguments separated by NUL bytes.
 * Checks beyond "no crash": it returns 0, 1 (--help, --version) or 2 (usage); an accepted command line has its two
 * files (TEXT or TOKENS, and OUT), --val F exactly with --val-out and F in (0, 1), and with --decode neither --eot
 * nor --val.
 * Build and run: ci/fuzz.sh SECONDS fuzz/fuzz_tokenize_args.c (or make fuzz). */
#include <stdint.h>
#define main tokenize_main
#include "../examples/tokenize.c"
#undef main

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FZ_MAX_ARGS 64

static int fz_split(const uint8_t *data, size_t size, char **argv) {
    int argc = 0;
    argv[argc++] = strdup("tokenize");
    for (size_t i = 0; i < size && argc < FZ_MAX_ARGS; argc++) {
        size_t n = 0;
        while (i + n < size && data[i + n] != 0) n++;
        argv[argc] = strndup((const char *)data + i, n);
        if (!argv[argc]) abort();
        i += n + 1;
    }
    return argc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int quiet = -1;
    if (quiet < 0) quiet = open("/dev/null", O_WRONLY);
    char *argv[FZ_MAX_ARGS];
    int argc = fz_split(data, size, argv);
    config c = {0};
    fflush(stdout), fflush(stderr);
    int out = dup(1), err = dup(2);
    dup2(quiet, 1), dup2(quiet, 2);
    int rc = parse_args(argc, argv, &c);
    fflush(stdout), fflush(stderr);
    dup2(out, 1), dup2(err, 2), close(out), close(err);
    if (rc != 0 && rc != 1 && rc != 2) __builtin_trap();
    if (rc == 0) {
        if (!c.in || !c.out) __builtin_trap();
        if ((c.val > 0) != (c.val_out != NULL) || (c.val_out && !(c.val > 0 && c.val < 1))) __builtin_trap();
        if (c.decode && (c.eot || c.val > 0 || c.val_out)) __builtin_trap();
    }
    for (int i = 0; i < argc; i++) free(argv[i]);
    return 0;
}
