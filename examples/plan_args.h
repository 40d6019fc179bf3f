/* fsc-plan's command line (docs/planning.md): fsc-train's options, parsed by the trainer's own table, defaults,
 * --config files and checks (examples/train/options.c, config.c, checks.c, models.c), and the planner's options of
 * its own table below (the cluster, the memory budget, the rates, the search). An argument whose name is the
 * planner's is taken here, every other one goes to the trainer's parser in order, so fsc-plan plans any fsc-train
 * command line, and the job it plans is the trainer's (job.c's plan_job, as fsc-train --plan builds it).
 * Shared by examples/plan_tool.c and fuzz/fuzz_plan_args.c.
 * Not here: the planning (lib/plan), the search (plan_search.h), the tables (plan_print.h). */
#ifndef FSC_EXAMPLES_PLAN_ARGS_H
#define FSC_EXAMPLES_PLAN_ARGS_H
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <libgen.h>
#include <sys/stat.h>
#include <unistd.h>
#include "train/train.h"
#include "suggest.h"

/* --cluster's presets: one GPU and its node's links, from the vendors' datasheets (docs/planning.md names each).
 * Peak dense matrix rates (no sparsity) in TFLOP/s at bf16/f16 (tensor cores) and at fp32 (no tensor cores);
 * HBM in GB/s; NVLink a GPU's bandwidth one way (half the bidirectional figure); InfiniBand one 400 Gb/s (H100,
 * H200) or 200 Gb/s (A100) adapter a GPU; latencies a ring step's as NCCL's tuning model takes them (NVLink
 * 3.4 us, network 14 us, Ring/Simple); a GPU's eighth of its DGX host's memory bandwidth (offload's work); a kernel
 * launch's fixed cost, 3 us (a null kernel's, docs/planning.md gives the source; not measured on these GPUs). */
typedef struct {
    const char *name;
    int ranks;
    double memory, tflops_bf16, tflops_fp32, hbm_gbps, nvlink_gbps, nvlink_us, ib_gbps, ib_us, host_gbps, launch_us;
} cluster_preset;

static const cluster_preset plan_presets[] = {
    {"h100-sxm-8", 8, 80e9, 989.4, 66.9, 3350, 450, 3.4, 50, 14, 76.8, 3},
    {"h200-8", 8, 141e9, 989.4, 66.9, 4800, 450, 3.4, 50, 14, 76.8, 3},
    {"a100-sxm-8", 8, 80e9, 312, 19.5, 2039, 300, 3.4, 25, 14, 51.2, 3},
};

typedef struct {
    train_config t;      /* fsc-train's options, resolved and checked as the trainer does */
    int given[NOPT];     /* which of them were given (the trainer's table) */
    int balance[1024];   /* --balance's blocks per stage (the job points at it) */
    int cluster, nodes, search, search_precision;
    int time_model;      /* --time: 0 auto, 1 replay, 2 formula */
    float tflops, mem_bandwidth;
    float launch_us;     /* --launch-us, when launch_given */
    int launch_given;
    const char *memory, *search_config;
    double memory_bytes; /* --memory, or the cluster's GPU memory; 0: none */
    char memory_name[64];
} plan_config;

typedef enum { P_INT, P_FLOAT, P_STR, P_FLAG, P_CHOICE } plan_opt_kind;
typedef struct {
    const char *name, *arg, *def, *help;
    plan_opt_kind kind;
    size_t off;
    double lo, hi;
    const char *choices;
} plan_option;

#define PF(field) offsetof(plan_config, field)
static const plan_option plan_options[] = {
    {"cluster", "NAME", "none", "a GPU cluster's rates (docs/planning.md gives each figure's source): none (this machine's cpu device) or h100-sxm-8|h200-8|a100-sxm-8 (8 GPUs a node: their memory is --memory's default, their peak matrix rate at --precision, memory bandwidth, NVLink within a node and InfiniBand between nodes; given rates override them)", P_CHOICE, PF(cluster), 0, 0, "none|h100-sxm-8|h200-8|a100-sxm-8"},
    {"nodes", "N", "0", "with --cluster: nodes (0: --world / 8, else --world defaults to N x 8)", P_INT, PF(nodes), 0, 1 << 16, NULL},
    {"memory", "SIZE", NULL, "device memory of a rank (80GiB, 141GB, 8e10; suffixes B, KB, MB, GB, TB powers of 1000, KiB, MiB, GiB, TiB of 1024): say which ranks' peaks exceed it", P_STR, PF(memory), 0, 0, NULL},
    {"tflops", "X", "0", "a rank's matrix-product rate in TFLOP/s for the step time (0: --cluster's, else this machine's cpu device, calibrated, its cores shared by the simulated ranks)", P_FLOAT, PF(tflops), 0, 1e9, NULL},
    {"mem-bandwidth", "GBPS", "0", "a rank's memory bandwidth in GB/s (0: --cluster's, else this machine's, calibrated, shared as --tflops 0)", P_FLOAT, PF(mem_bandwidth), 0, 1e9, NULL},
    {"launch-us", "US", NULL, "the fixed cost of each kernel call and device copy of a rank, in microseconds, added to its roofline time (a GPU's kernel launch; not given: --cluster's, 3 us, else this machine's cpu call cost, calibrated with --tflops 0 or --mem-bandwidth 0, and 0 when both are given; 0: calls are free)", P_FLOAT, PF(launch_us), 0, 1e6, NULL},
    {"time", "MODEL", "auto", "how the step time is composed: replay (the step replayed on the counting device: each kernel at its roofline time, each collective at the simulated network's, in the engine's own order, so buckets, prefetch and a schedule's bubbles are the engine's; a cluster's two levels of links too), formula (max(compute, comm) with prefetch, their sum without; a pipeline's bubble its schedule's formula with equal F, B and W: (m + pp - 1) / m for gpipe and 1f1b), auto (replay up to 64 ranks on this machine's rates, up to 16 on a --cluster's, else formula)", P_CHOICE, PF(time_model), 0, 0, "auto|replay|formula"},
    {"search", NULL, NULL, "plan every layout of --world instead (ddp, fsdp full, grad_op and hybrid wrapped by block or model, zero1, zero2; tp and pp dividing the world; ep with --moe-experts; 1, 2, 4 or 8 micro-batches; pipeline schedules gpipe, 1f1b, interleaved (2 to 4 chunks), zb-h1, zbv; where a layout is over --memory: offload optim, then all, and --recompute 1), print those that fit --memory fastest first", P_FLAG, PF(search), 0, 0, NULL},
    {"search-precision", NULL, NULL, "with --search: also vary --precision over fp32 and bf16 (else --precision's)", P_FLAG, PF(search_precision), 0, 0, NULL},
    {"search-config", "FILE", NULL, "with --search: write the fastest layout with the options given as an fsc-train --config file", P_STR, PF(search_config), 0, 0, NULL},
};
#undef PF
#define PLAN_NOPT ((int)(sizeof plan_options / sizeof plan_options[0]))

static inline const cluster_preset *plan_preset(const plan_config *c) {
    return c->cluster > 0 && c->cluster <= (int)(sizeof plan_presets / sizeof plan_presets[0]) ? &plan_presets[c->cluster - 1]
                                                                                                 : NULL;
}

/* The planner's option named by name[0 .. len), or NULL */
static inline const plan_option *plan_option_find(const char *name, size_t len) {
    for (int i = 0; i < PLAN_NOPT; i++)
        if (strlen(plan_options[i].name) == len && strncmp(plan_options[i].name, name, len) == 0) return &plan_options[i];
    return NULL;
}

/* Set one of the planner's options from its text; 0, or -1 with err. */
static inline int plan_set_option(plan_config *c, const plan_option *o, const char *v, char *err, size_t cap) {
    char *p = (char *)c + o->off, *end = NULL;
    if (o->kind == P_FLAG) return *(int *)p = 1, 0;
    if (o->kind == P_STR) {
        if (!*v) return snprintf(err, cap, "--%s: empty value", o->name), -1;
        return *(const char **)p = v, 0;
    }
    if (o->kind == P_CHOICE) {
        size_t n = strlen(v);
        int idx = 0;
        for (const char *s = o->choices; *s; idx++) {
            const char *bar = strchr(s, '|');
            size_t len = bar ? (size_t)(bar - s) : strlen(s);
            if (len == n && strncmp(s, v, n) == 0) return *(int *)p = idx, 0;
            s += len + (bar != NULL);
        }
        return snprintf(err, cap, "--%s '%s': not one of %s", o->name, v, o->choices), -1;
    }
    double x = strtod(v, &end); /* decimal only: strtod would also read 0x10 as 16 */
    if (!*v || *end || strspn(v, "0123456789+-.eE") != strlen(v) || !(x >= o->lo && x <= o->hi) ||
        (o->kind == P_INT && x != floor(x)))
        return snprintf(err, cap, "--%s '%s': expected %s in [%g, %g]", o->name, v,
                        o->kind == P_INT ? "a whole number" : "a number", o->lo, o->hi), -1;
    if (o->kind == P_INT) *(int *)p = (int)x;
    else *(float *)p = (float)x;
    return 0;
}

/* --memory's SIZE in bytes into *out; 0, or -1 with err. */
static inline int plan_parse_size(const char *v, double *out, char *err, size_t cap) {
    static const struct { const char *suffix; double mult; } units[] = {
        {"", 1}, {"B", 1}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
        {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
    };
    char *end = NULL;
    double x = strtod(v, &end);
    const int decimal = end != v && strspn(v, "0123456789+-.eE") == (size_t)(end - v); /* not 0x10, inf or nan */
    for (size_t i = 0; decimal && i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(end, units[i].suffix) != 0) continue;
        if (units[i].mult == 1 && x != floor(x)) break; /* bytes are whole: 1.5 is not 1.5 GB */
        *out = floor(x * units[i].mult);
        if (*out >= 1 && *out < 1.8e19) return 0;
        break;
    }
    return snprintf(err, cap, "--memory '%s': expected a size of at least 1 byte such as 80GiB, 141GB or 8e10 (suffixes "
                              "KB, MB, GB, TB, KiB, MiB, GiB, TiB; without one, or with B, a whole number of bytes)", v), -1;
}

/* Parse argv into c: the planner's options here, the rest (in order, with their values) through the trainer's
 * parse_args, then --cluster's world, the trainer's layout, model and option checks. 0, or -1 with err. Strings
 * point into argv (and into c->t.strs, --config's text: free it). 1 or 2: --help or --version was given. */
static inline int plan_parse(int argc, char **argv, plan_config *c, char *err, size_t cap) {
    memset(c, 0, sizeof *c);
    for (int i = 0; i < PLAN_NOPT; i++)
        if (plan_options[i].def && plan_set_option(c, &plan_options[i], plan_options[i].def, err, cap) != 0) return -1;
    char **targv = malloc(((size_t)argc + 1) * sizeof *targv);
    if (!targv) return snprintf(err, cap, "out of memory"), -1;
    int targc = 0, rc = 0;
    const char *unknown = NULL; /* the first argument named in neither table */
    targv[targc++] = argc > 0 ? argv[0] : "fsc-plan";
    for (int a = 1; a < argc && rc == 0; a++) {
        const char *arg = argv[a];
        const char *name = strncmp(arg, "--", 2) == 0 ? arg + 2 : NULL, *eq = name ? strchr(name, '=') : NULL;
        const size_t len = name ? (eq ? (size_t)(eq - name) : strlen(name)) : 0;
        const plan_option *o = name ? plan_option_find(name, len) : NULL;
        if (!o) { /* the trainer's, with its value when it takes one as the next argument */
            targv[targc++] = argv[a];
            char nm[64];
            const int k = name && len < sizeof nm ? (memcpy(nm, name, len), nm[len] = '\0', option_index(nm)) : -1;
            if (name && k < 0 && !unknown) unknown = arg;
            if (k >= 0 && !eq && options[k].kind != K_FLAG && a + 1 < argc) targv[targc++] = argv[++a];
            continue;
        }
        const char *v = eq ? eq + 1 : NULL;
        if (o->kind == P_FLAG && v) rc = (snprintf(err, cap, "--%s takes no value", o->name), -1);
        else if (o->kind != P_FLAG && !v && a + 1 >= argc) rc = (snprintf(err, cap, "--%s needs a value (%s)", o->name, o->arg), -1);
        else rc = plan_set_option(c, o, v ? v : (o->kind == P_FLAG ? "" : argv[++a]), err, cap);
        if (rc == 0 && o->off == offsetof(plan_config, launch_us)) c->launch_given = 1;
    }
    if (rc == 0) rc = parse_args(targc, targv, &c->t, c->given, err, cap);
    free(targv);
    if (rc < 0 && unknown && strncmp(err, "unknown option '--", 18) == 0) { /* the trainer's names the nearest of its own */
        const char *name = unknown + 2, *eq = strchr(name, '=');
        const size_t len = eq ? (size_t)(eq - name) : strlen(name);
        suggest s = {0};
        for (int i = 0; i < NOPT; i++) suggest_try(&s, name, len, options[i].name);
        for (int i = 0; i < PLAN_NOPT; i++) suggest_try(&s, name, len, plan_options[i].name);
        const char *near = suggest_result(&s);
        snprintf(err, cap, "unknown option '--%.*s' (%s%s%s)", (int)len, name, near ? "did you mean --" : "see --help",
                 near ? near : "", near ? "?" : "");
    }
    if (rc != 0) return rc > 0 ? rc : -1; /* 1: --help, 2: --version (the trainer's parser found them) */
    const cluster_preset *p = plan_preset(c);
    const int gw = c->given[option_index("world")], gd = c->given[option_index("dp")];
    if (!p && c->nodes) return snprintf(err, cap, "--nodes needs --cluster (a node's GPUs)"), -1;
    if (p && c->nodes * p->ranks > 1024) /* the trainer's --world range */
        return snprintf(err, cap, "--nodes %d x %d GPUs of a %s node is %d ranks: fsc plans at most 1024", c->nodes,
                        p->ranks, p->name, c->nodes * p->ranks), -1;
    if (p && !gw && !gd) c->t.world = (c->nodes ? c->nodes : 1) * p->ranks, c->given[option_index("world")] = 1;
    if (resolve_layout(&c->t, c->given, err, cap) != 0) return -1;
    if (c->given[option_index("print-schedule")])
        return snprintf(err, cap, "--print-schedule is fsc-train's: fsc-plan plans a schedule, it does not print one"), -1;
    if (c->search && c->given[option_index("schedule-file")])
        return snprintf(err, cap, "--search varies the built-in schedules: leave out --schedule-file (or plan the file's "
                        "lists without --search)"), -1;
    if (c->search && !c->given[option_index("parallel")] && c->t.world > 1) /* any strategy: the search varies it */
        c->t.parallel = c->t.pp > 1 ? PAR_PIPE : (int)FSC_PAR_DDP;
    c->t.searched = c->search;
    if (p && c->nodes && c->nodes * p->ranks != c->t.world)
        return snprintf(err, cap, "--world %d is not --nodes %d x %d GPUs of a %s node", c->t.world, c->nodes, p->ranks,
                        p->name), -1;
    if (resolve_model(&c->t, c->given, err, cap) != 0 || load_schedule_file(&c->t, err, cap) != 0 ||
        check_config(&c->t, c->given, err, cap) != 0)
        return -1; /* a --schedule-file's lists, checked as fsc-train checks them */
    if (c->search_config && !c->search) return snprintf(err, cap, "--search-config needs --search"), -1;
    if (c->search_config) { /* before the search, not after it: a folder that takes the file */
        char copy[4096];
        snprintf(copy, sizeof copy, "%s", c->search_config);
        const char *dir = dirname(copy); /* "." for a bare name */
        struct stat st;
        if (stat(c->search_config, &st) == 0 && S_ISDIR(st.st_mode))
            return snprintf(err, cap, "--search-config %.150s is a folder: give a file to write", c->search_config), -1;
        if (access(dir, W_OK) != 0)
            return snprintf(err, cap, "--search-config %.150s: cannot write into %.150s: %s", c->search_config, dir,
                            strerror(errno)), -1;
    }
    if (c->search_precision && !c->search) return snprintf(err, cap, "--search-precision needs --search"), -1;
    if (c->memory) return plan_parse_size(c->memory, &c->memory_bytes, err, cap);
    if (p) { /* the cluster's GPU memory, named for the messages */
        c->memory_bytes = p->memory;
        snprintf(c->memory_name, sizeof c->memory_name, "%.0f GB (%s)", p->memory * 1e-9, p->name);
        c->memory = c->memory_name;
    }
    return 0;
}

#endif
