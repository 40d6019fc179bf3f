/* libFuzzer harness for the sampler's command line and prompt: parse_args and parse_prompt of examples/sample.c
 * (compiled into the harness, its main renamed). Input: byte 0 picks the model's vocabulary for the prompt (0:
 * a byte model, 256; else 2 + byte x 197, up to 50237), the rest is the arguments separated by NUL bytes. Checks
 * beyond "no crash": parse_args returns 0, 1 (--help, --version) or -1 with a message; an accepted command line
 * has --model, a device cpu or cuda and every number inside its option's range (--tokens 0..1e7, --temperature
 * 0..1e6, --top-k 0..1e9, --seed 0..2^53); its prompt (without a tokenizer; --tokens capped at 64 here, the
 * room parse_prompt reserves for them) is refused with a message or gives at least one token, each in [0, V):
 * for a byte model exactly the prompt's bytes, else the comma-separated ids (digits only) written back as the same
 * text.
 * Build and run: ci/fuzz.sh SECONDS fuzz/fuzz_sample_args.c (or make fuzz). */
#include <stdint.h>
#include <fcntl.h>
#include <unistd.h>
#define main sample_main
#include "../examples/sample.c"
#undef main

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FZ_MAX_ARGS 64

/* argv[1..] from data split at NUL bytes, each its own allocation; returns argc */
static int fz_split(const uint8_t *data, size_t size, char **argv) {
    int argc = 0;
    argv[argc++] = strdup("sample");
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
    if (size < 1) return 0;
    static int quiet = -1;
    if (quiet < 0) quiet = open("/dev/null", O_WRONLY); /* --help's text and --version go there */
    const int V = data[0] == 0 ? 256 : 2 + data[0] * 197;
    char *argv[FZ_MAX_ARGS];
    int argc = fz_split(data + 1, size - 1, argv);
    sample_config c;
    char err[512] = "";
    fflush(stdout);
    int saved = dup(1);
    dup2(quiet, 1);
    int rc = parse_args(argc, argv, &c, err, sizeof err);
    fflush(stdout);
    dup2(saved, 1), close(saved);
    if (rc == -1 && !err[0]) __builtin_trap();
    if (rc != 0 && rc != 1 && rc != -1) __builtin_trap();
    if (rc == 0) {
        if (!c.model || (strcmp(c.device, "cpu") && strcmp(c.device, "cuda"))) __builtin_trap();
        if (c.tokens < 0 || c.tokens > 10000000 || !(c.temperature >= 0 && c.temperature <= 1e6) || c.top_k < 0 ||
            c.seed < 0 || c.seed > 9007199254740992LL)
            __builtin_trap();
        if (c.tokens > 64) c.tokens = 64;
        int32_t *t = NULL;
        int n = 0;
        err[0] = '\0';
        if (parse_prompt(&c, V, NULL, &t, &n, err, sizeof err) != 0) {
            if (!err[0]) __builtin_trap();
        } else {
            const char *p = c.prompt ? c.prompt : V == 256 ? "\n" : "0";
            if (n < 1) __builtin_trap();
            for (int i = 0; i < n; i++)
                if (t[i] < 0 || t[i] >= V) __builtin_trap();
            if (V == 256) {
                if ((size_t)n != strlen(p)) __builtin_trap();
                for (int i = 0; i < n; i++)
                    if (t[i] != (unsigned char)p[i]) __builtin_trap();
            } else { /* the ids written back: the prompt, but for leading zeros (no sign, no white space) */
                if (strspn(p, "0123456789,") != strlen(p)) __builtin_trap();
                for (int i = 0; i < n; i++) {
                    char *end;
                    long v = strtol(p, &end, 10);
                    if (v != t[i] || (*end != ',' && *end != '\0') || (*end == '\0') != (i == n - 1)) __builtin_trap();
                    p = end + (*end == ',');
                }
            }
            free(t);
        }
    }
    for (int i = 0; i < argc; i++) free(argv[i]);
    return 0;
}
