/* libFuzzer harness for the trainer's command line (examples/train/options.c, config.c, checks.c and models.c,
 * compiled into the harness): the input split at NUL bytes is argv[1..]. The options go through parse_args,
 * check_launcher (no launcher's variables under the fuzzer: simulated ranks), resolve_layout, resolve_model and
 * check_config as in main. A refusal says why; an accepted configuration holds together (world = dp x tp x pp
 * within [1, 1024], the batch splits over the data-parallel ranks and micro-batches, the model of either family
 * (--model gpt2: --ffn 4 x --dim, --kv-heads --heads; --model llama: a valid Llama, MoE fields included, whose
 * heads, kv heads, ffn and vocabulary split over --tp), the rank order, the layout of every rank and the balance
 * are valid), and its --json record (config_object) fed back to the parser as options gives the same configuration.
 * Build and run: ci/fuzz.sh SECONDS fuzz/fuzz_train_args.c (or make fuzz). */
#include "../examples/train/options.c"
#include "../examples/train/config.c"
#include "../examples/train/checks.c"
#include "../examples/train/models.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FZ_MAX_ARGS 256

/* Split data at NUL bytes into argv[1..] (each its own allocation, so a read past an argument's end is
 * caught); argv[0] is the program name. Returns argc. */
static int fz_split(const uint8_t *data, size_t size, char **argv) {
    int argc = 0;
    argv[argc++] = strdup("train_gpt");
    size_t i = 0;
    while (i < size && argc < FZ_MAX_ARGS) {
        size_t n = 0;
        while (i + n < size && data[i + n] != 0) n++;
        char *a = malloc(n + 1);
        if (!a) abort();
        memcpy(a, data + i, n);
        a[n] = '\0';
        argv[argc++] = a;
        i += n + 1;
    }
    return argc;
}

/* Feed c's --json record back to the parser as "--name=value" options: the same configuration. */
static void fz_round_trip(const train_config *c) {
    cJSON *o = config_object(c);
    if (!o) abort();
    char *text = cJSON_PrintUnformatted(o);
    cJSON *back = text ? cJSON_Parse(text) : NULL;
    if (!back) __builtin_trap(); /* the record is valid JSON */
    cJSON_Delete(back);
    free(text);
    char *argv[NOPT + 1];
    int argc = 0;
    argv[argc++] = strdup("train_gpt");
    for (int i = 0; i < NOPT; i++) {
        const option *op = &options[i];
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, op->name);
        if (!v) __builtin_trap(); /* every option is in the record */
        char num[64];
        const char *val;
        if (cJSON_IsNull(v) || cJSON_IsFalse(v)) continue;
        if (cJSON_IsTrue(v)) val = NULL;
        else if (cJSON_IsRaw(v) || cJSON_IsString(v)) val = v->valuestring;
        else if (cJSON_IsNumber(v)) val = (snprintf(num, sizeof num, "%.17g", v->valuedouble), num);
        else __builtin_trap();
        size_t n = strlen(op->name) + (val ? strlen(val) + 1 : 0) + 3;
        char *a = malloc(n);
        if (!a) abort();
        snprintf(a, n, "--%s%s%s", op->name, val ? "=" : "", val ? val : "");
        argv[argc++] = a;
    }
    train_config d;
    int given[NOPT];
    char err[512] = "";
    if (parse_args(argc, argv, &d, given, err, sizeof err) != 0) __builtin_trap();
    for (int i = 0; i < NOPT; i++) {
        const option *op = &options[i];
        const char *x = (const char *)c + op->off, *y = (const char *)&d + op->off;
        int same;
        switch (op->kind) {
        case K_U64: same = memcmp(x, y, sizeof(uint64_t)) == 0; break;
        case K_FLOAT: same = memcmp(x, y, sizeof(float)) == 0; break;
        case K_STR: {
            const char *s = *(const char *const *)x, *t = *(const char *const *)y;
            same = (!s && !t) || (s && t && strcmp(s, t) == 0);
            break;
        }
        case K_WRAP: same = c->wrap == d.wrap && c->wrap_min_params == d.wrap_min_params; break;
        default: same = memcmp(x, y, sizeof(int)) == 0; break;
        }
        if (!same) __builtin_trap();
    }
    for (int i = 0; i < argc; i++) free(argv[i]);
    free(d.strs);
    cJSON_Delete(o);
}

/* What an accepted configuration promises the training function. */
static void fz_check_accepted(const train_config *c) {
    if (c->world < 1 || c->world > 1024) __builtin_trap(); /* --world's range, derived or given */
    if (c->dp < 1 || c->tp < 1 || c->pp < 1 || (long long)c->dp * c->tp * c->pp != c->world) __builtin_trap();
    if (c->accum < 1 || c->batch % c->dp != 0 || (c->batch / c->dp) % c->accum != 0) __builtin_trap();
    if (c->pp > c->layers || c->ep < 1 || c->seq < 1) __builtin_trap();
    fsc_gpt_config g = model_config(c);
    if (fsc_gpt_config_validate(&g) != FSC_OK) __builtin_trap();
    if (c->kv_heads < 1 || c->ffn < 1) __builtin_trap(); /* resolve_model filled in the defaults */
    if (!strcmp(c->model, "llama")) {
        fsc_llama_config l = llama_config(c);
        if (fsc_llama_config_validate(&l) != FSC_OK) __builtin_trap();
        if (c->tp > 1 && (c->heads % c->tp || c->kv_heads % c->tp || c->ffn % c->tp || c->vocab % c->tp))
            __builtin_trap();
    } else if (c->ffn != 4 * c->dim || c->kv_heads != c->heads) {
        __builtin_trap();
    }
    if (c->reduce) __builtin_trap(); /* --reduce native needs a launcher's processes */
    if ((c->prefetch != 0 && c->prefetch != 1) || !(c->sim_bandwidth >= 0) || !(c->sim_latency >= 0))
        __builtin_trap(); /* --prefetch 0|1, the network's values finite and >= 0 */
    if (c->offload < 0 || c->offload > 2 || !(c->sim_copy >= 0)) __builtin_trap(); /* --offload, copy bandwidth */
    int order[3];
    if (fsc_layout_parse_order(c->order, order) != FSC_OK) __builtin_trap();
    for (int r = 0; r < c->world; r += c->world > 1 ? c->world - 1 : 1) {
        fsc_layout l;
        if (fsc_layout_make_ordered(c->world, c->tp, c->dp, c->pp, order, r, &l) != FSC_OK) __builtin_trap();
        if (l.dp != c->dp || l.tp != c->tp || l.pp != c->pp) __builtin_trap();
    }
    if (c->pp > 1 && c->balance) {
        int bal[1024], sum = 0;
        if (fsc_balance_parse(c->balance, &(fsc_model){ .n_layers = g.layers + 2 }, c->pp, bal) != FSC_OK)
            __builtin_trap();
        for (int s = 0; s < c->pp; s++) sum += bal[s];
        if (sum != c->layers) __builtin_trap();
    }
    if (c->moe_experts && (c->moe_experts % c->ep != 0 || c->dp % c->ep != 0)) __builtin_trap();
    if (c->wrap == FSC_WRAP_MIN_PARAMS && c->wrap_min_params == 0) __builtin_trap();
    if (c->save_every && !c->ckpt_dir) __builtin_trap();
    fz_round_trip(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *argv[FZ_MAX_ARGS];
    int argc = fz_split(data, size, argv);
    train_config c;
    int given[NOPT];
    char err[512] = "";
    int rc = parse_args(argc, argv, &c, given, err, sizeof err);
    int me = 0, procs = 0;
    if (rc == 0) rc = check_launcher(&c, given, &me, &procs, err, sizeof err);
    if (rc == 0) rc = resolve_layout(&c, given, err, sizeof err);
    if (rc == 0) rc = resolve_model(&c, given, err, sizeof err);
    if (rc == 0) rc = check_config(&c, given, err, sizeof err);
    if (rc != 0 && rc != 1 && rc != 2) { /* 1: --help, 2: --version */
        if (rc != -1 || err[0] == 0) __builtin_trap(); /* a refusal says why */
    } else if (rc == 0) {
        fz_check_accepted(&c);
    }
    for (int i = 0; i < argc; i++) free(argv[i]);
    free(c.strs); /* --config's strings (apply_config_text) */
    return 0;
}
