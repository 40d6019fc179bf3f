/* libFuzzer harness for fsc-plan's command line (examples/plan_args.h over the trainer's examples/train/options.c,
 * config.c, checks.c, models.c and job.c, compiled into the harness): the input split at NUL bytes is argv[1..].
 * The planner's own options are taken out, the rest go through the trainer's parser and checks (plan_parse), then
 * the job is built as fsc-plan builds it (plan_job). A refusal says why; an accepted command line holds together:
 * world = dp x tp x pp within [1, 1024], the batch splits over the data-parallel ranks and micro-batches, the job
 * is the configuration's (world, batch, model family, tp, pp, micro-batches, recompute), --memory is a size of at
 * least one byte, --launch-us a number of microseconds in [0, 1e6] (0 when not given), a --cluster's world is
 * --nodes x its GPUs, --search-config and --search-precision come with --search. Nothing is planned (a job of
 * any size is only described).
 * Build and run: ci/fuzz.sh SECONDS fuzz/fuzz_plan_args.c (or make fuzz). */
#include <string.h>
#include "../examples/train/options.c"
#include "../examples/train/config.c"
#include "../examples/train/checks.c"
#include "../examples/train/models.c"
#include "../examples/train/job.c"
#include "../examples/plan_args.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FZ_MAX_ARGS 256

/* Split data at NUL bytes into argv[1..] (each its own allocation); argv[0] is the program name. Returns argc. */
static int fz_split(const uint8_t *data, size_t size, char **argv) {
    int argc = 0;
    argv[argc++] = strdup("fsc-plan");
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

static void fz_check_accepted(plan_config *c) {
    const train_config *t = &c->t;
    if (t->world < 1 || t->world > 1024) __builtin_trap();
    if (t->dp < 1 || t->tp < 1 || t->pp < 1 || (long long)t->dp * t->tp * t->pp != t->world) __builtin_trap();
    if (t->accum < 1 || t->batch % t->dp != 0 || (t->batch / t->dp) % t->accum != 0) __builtin_trap();
    const cluster_preset *p = plan_preset(c);
    if (c->cluster && !p) __builtin_trap();
    if (p && c->nodes && c->nodes * p->ranks != t->world) __builtin_trap();
    if (!p && c->nodes) __builtin_trap();
    if ((c->search_config || c->search_precision) && !c->search) __builtin_trap();
    if (c->memory && !(c->memory_bytes >= 1)) __builtin_trap();
    if (!c->memory && c->memory_bytes != 0) __builtin_trap();
    if (!(c->tflops >= 0) || !(c->mem_bandwidth >= 0)) __builtin_trap();
    if (c->launch_given ? !(c->launch_us >= 0 && c->launch_us <= 1e6) : c->launch_us != 0) __builtin_trap();
    fsc_plan_job j;
    if (plan_job(t, c->balance, &j) != FSC_OK) __builtin_trap(); /* an accepted command line describes a job */
    if (j.world != t->world || j.batch != t->batch || j.po.tp != t->tp || j.po.pp != t->pp || j.po.accum != t->accum)
        __builtin_trap();
    if (j.po.checkpoint != t->recompute || (j.model == FSC_PLAN_LLAMA) != (strcmp(t->model, "llama") == 0)) __builtin_trap();
    if (j.model == FSC_PLAN_LLAMA && fsc_llama_config_validate(&j.llama) != FSC_OK) __builtin_trap();
    if (j.model == FSC_PLAN_GPT && fsc_gpt_config_validate(&j.gpt) != FSC_OK) __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *argv[FZ_MAX_ARGS];
    int argc = fz_split(data, size, argv);
    for (int i = 1; i < argc; i++) /* --schedule-file opens a file (its text has fuzz_pipe_sched_text): not here */
        if (strstr(argv[i], "schedule-f")) {
            for (int k = 0; k < argc; k++) free(argv[k]);
            return 0;
        }
    plan_config *c = malloc(sizeof *c);
    if (!c) abort();
    char err[512] = "";
    int rc = plan_parse(argc, argv, c, err, sizeof err);
    if (rc != 0 && rc != 1 && rc != 2) { /* the trainer's parser: 1 --help, 2 --version */
        if (rc != -1 || err[0] == 0) __builtin_trap(); /* a refusal says why */
    } else if (rc == 0) {
        fz_check_accepted(c);
    }
    for (int i = 0; i < argc; i++) free(argv[i]);
    free_schedule_file(&c->t);
    free(c->t.strs);
    free(c);
    return 0;
}
