/* libFuzzer harness for the trainer's --config parser (apply_config_text of examples/train/config.c, compiled into
 * the harness with the option table, the checks and the model families): the input is the file's text. A refusal
 * must say why; an accepted object holds only option names, each once, and the configuration it gives, written as
 * the run's config.json is (config_object) and read back, is the same configuration (every option), with the same
 * options marked given (those that differ from their defaults). Build and run: ci/fuzz.sh SECONDS
 * fuzz/fuzz_train_config.c (or make fuzz). */
#include "../examples/train/options.c"
#include "../examples/train/config.c"
#include "../examples/train/checks.c"
#include "../examples/train/models.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fz_same(const train_config *a, const train_config *b) {
    for (int i = 0; i < NOPT; i++)
        if (!same_value(&options[i], a, b)) __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1); /* its own allocation: a read past the end is caught */
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    train_config c, def;
    int given[NOPT], dgiven[NOPT];
    char err[512] = "";
    if (set_defaults(&c, given, err, sizeof err) != 0 || set_defaults(&def, dgiven, err, sizeof err) != 0)
        __builtin_trap();
    int rc = apply_config_text(&c, given, text, size, "--config fuzz", err, sizeof err);
    if (rc != 0) {
        if (rc != -1 || strncmp(err, "--config fuzz: ", 15) != 0 || !err[15]) __builtin_trap(); /* says why */
        free(text);
        free(c.strs);
        return 0;
    }
    cJSON *root = cJSON_ParseWithLength(text, size);
    if (!cJSON_IsObject(root)) __builtin_trap();
    const cJSON *it;
    int seen[NOPT] = {0};
    cJSON_ArrayForEach(it, root) {
        int k = option_index(it->string);
        if (k < 0 || seen[k]++) __builtin_trap(); /* only option names, each once */
    }
    cJSON_Delete(root);
    for (int i = 0; i < NOPT; i++) /* given: exactly the options that differ from their defaults */
        if (given[i] != !same_value(&options[i], &c, &def)) __builtin_trap();
    if (c.config) __builtin_trap(); /* a config file names no other */
    /* the run's config.json of this configuration reads back as the same configuration */
    cJSON *o = config_object(&c);
    char *out = o ? cJSON_Print(o) : NULL;
    if (!out) __builtin_trap();
    train_config d;
    int dg[NOPT];
    if (set_defaults(&d, dg, err, sizeof err) != 0) __builtin_trap();
    if (apply_config_text(&d, dg, out, strlen(out), "--config again", err, sizeof err) != 0) __builtin_trap();
    fz_same(&c, &d);
    for (int i = 0; i < NOPT; i++)
        if (dg[i] != given[i]) __builtin_trap();
    free(out);
    cJSON_Delete(o);
    free(text);
    free(c.strs), free(d.strs); /* the options' strings (apply_config_text) */
    return 0;
}
