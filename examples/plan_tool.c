/* fsc-plan: each rank's peak memory of a training job before it is launched (docs/planning.md).
 * Takes fsc-train's model and layout options (the same names, values and defaults) and prints, per rank, the
 * ledger's peak bytes per tag that fsc-train --steps 1 would report (its --json per_rank), found by running the
 * engine's setup and one step on the counting device (fsc/plan.h): nothing is allocated beyond a few
 * kilobytes per rank, so a Llama 3 8B on 8 ranks answers in seconds on a laptop. --json prints fsc-train's
 * peak_bytes, per_rank, host_peak_bytes and host_per_rank fields. Then the predicted step time (fsc_plan_time) at
 * a rank's rates (given, or this machine's cpu device calibrated and shared among simulated ranks) over
 * fsc-train's simulated network (--sim-bandwidth, --sim-latency).
 * --search plans every layout of the world instead (plan_search.h), ranks those that fit --memory by predicted
 * time, and --search-config FILE writes the fastest as an fsc-train --config file.
 * Not here: the planning (lib/plan). */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "fsc/fsc.h"
#include "plan_print.h"
#include "plan_search.h"

typedef struct {
    int model, layers, dim, heads, seq, vocab, kv_heads, ffn;
    int batch, optimizer, world, parallel, shard, precision, accum, pp, tp, sequence_parallel, schedule;
    int pipe_ckpt, offload, prefetch, moe_experts, moe_top_k, moe_every, ep, json, threads, search, cluster, nodes;
    int recompute, virtual_stages, search_precision;
    float momentum, clip, moe_capacity, tflops, mem_bandwidth, sim_bandwidth, sim_latency;
    const char *wrap, *memory, *search_config;
} plan_config;

typedef enum { K_INT, K_FLOAT, K_STR, K_FLAG, K_CHOICE } opt_kind;
typedef struct {
    const char *name, *arg, *def, *help;
    opt_kind kind;
    size_t off;
    double lo, hi;
    const char *choices;
} option;

#define F(field) offsetof(plan_config, field)
static const option options[] = {
    {"model", "NAME", "gpt2", "model family: gpt2|llama", K_CHOICE, F(model), 0, 0, "gpt2|llama"},
    {"layers", "N", "4", "transformer blocks", K_INT, F(layers), 1, 1024, NULL},
    {"dim", "C", "128", "model width (channels)", K_INT, F(dim), 1, 65536, NULL},
    {"heads", "H", "4", "attention heads (must divide --dim)", K_INT, F(heads), 1, 65536, NULL},
    {"seq", "T", "64", "context length (tokens per sequence)", K_INT, F(seq), 1, 1 << 20, NULL},
    {"vocab", "V", "256", "vocabulary size", K_INT, F(vocab), 1, 1 << 24, NULL},
    {"kv-heads", "K", "0", "llama: key/value heads (0: --heads)", K_INT, F(kv_heads), 0, 65536, NULL},
    {"ffn", "N", "0", "llama: MLP hidden width (0: 2/3 x 4 x --dim rounded up to a multiple of 256)", K_INT, F(ffn), 0, 1 << 20, NULL},
    {"batch", "B", "8", "sequences per step (global batch over all ranks)", K_INT, F(batch), 1, 1 << 20, NULL},
    {"optimizer", "NAME", "adamw", "sgd|adamw", K_CHOICE, F(optimizer), 0, 0, "sgd|adamw"},
    {"momentum", "X", "0.9", "SGD momentum (0: plain SGD, no momentum buffer)", K_FLOAT, F(momentum), 0, 1, NULL},
    {"clip", "X", "1", "clip gradients to this global L2 norm (0: off)", K_FLOAT, F(clip), 0, INFINITY, NULL},
    {"world", "N", "1", "ranks", K_INT, F(world), 1, 1 << 16, NULL},
    {"parallel", "KIND", "none", "none|ddp|fsdp|zero1|zero2|pipe (pipe: --pp stages with ddp in each stage)", K_CHOICE, F(parallel), 0, 0, "none|ddp|fsdp|zero1|zero2|pipe"},
    {"shard", "KIND", "full", "fsdp sharding: full|grad_op|none|hybrid", K_CHOICE, F(shard), 0, 0, "full|grad_op|none|hybrid"},
    {"wrap", "POLICY", "block", "fsdp units: block|model|min-params:N", K_STR, F(wrap), 0, 0, NULL},
    {"precision", "P", "fp32", "parameters and gradient reduction: fp32|bf16|fp16", K_CHOICE, F(precision), 0, 0, "fp32|bf16|fp16"},
    {"accum", "K", "1", "micro-batches per step", K_INT, F(accum), 1, 1 << 20, NULL},
    {"pp", "P", "1", "pipeline stages (world = dp x tp x pp)", K_INT, F(pp), 1, 1024, NULL},
    {"tp", "T", "1", "tensor-parallel ranks (world = dp x tp x pp)", K_INT, F(tp), 1, 1024, NULL},
    {"sequence-parallel", NULL, NULL, "with --tp: layer norms and residuals on sequence shards", K_FLAG, F(sequence_parallel), 0, 0, NULL},
    {"schedule", "S", "gpipe", "pipeline schedule: gpipe|1f1b|interleaved|zb-h1", K_CHOICE, F(schedule), 0, 0, "gpipe|1f1b|interleaved|zb-h1"},
    {"virtual-stages", "V", "1", "with --schedule interleaved: chunks of blocks per pipeline rank", K_INT, F(virtual_stages), 1, 1024, NULL},
    {"recompute", "0|1", "0", "activation checkpointing: each block keeps only its input and recomputes its activations in backward", K_INT, F(recompute), 0, 1, NULL},
    {"checkpoint", "MODE", "except_last", "pipeline micro-batches that keep only their stage input: always|except_last|never", K_CHOICE, F(pipe_ckpt), 0, 0, "always|except_last|never"},
    {"offload", "MODE", "none", "host memory: none|optim|all", K_CHOICE, F(offload), 0, 0, "none|optim|all"},
    {"prefetch", "0|1", "1", "overlap communication with computation", K_INT, F(prefetch), 0, 1, NULL},
    {"moe-experts", "E", "0", "experts of each MoE block (0: dense)", K_INT, F(moe_experts), 0, 4096, NULL},
    {"moe-top-k", "K", "1", "experts per token: 1 or 2", K_INT, F(moe_top_k), 1, 2, NULL},
    {"moe-every", "N", "1", "blocks N-1, 2N-1, ... get an MoE MLP", K_INT, F(moe_every), 1, 1024, NULL},
    {"moe-capacity", "F", "1.25", "capacity factor", K_FLOAT, F(moe_capacity), 0, 1024, NULL},
    {"ep", "G", "1", "expert-parallel ranks", K_INT, F(ep), 1, 1024, NULL},
    {"cluster", "NAME", "none", "a GPU cluster's rates (docs/planning.md gives each figure's source): none (this machine's cpu device) or h100-sxm-8|h200-8|a100-sxm-8 (8 GPUs a node: their memory is --memory's default, their peak matrix rate at --precision, memory bandwidth, NVLink within a node and InfiniBand between nodes; given rates override them)", K_CHOICE, F(cluster), 0, 0, "none|h100-sxm-8|h200-8|a100-sxm-8"},
    {"nodes", "N", "0", "with --cluster: nodes (0: --world / 8, else --world defaults to N x 8)", K_INT, F(nodes), 0, 1 << 16, NULL},
    {"memory", "SIZE", NULL, "device memory of a rank (80GiB, 141GB, 8e10; suffixes B, KB, MB, GB, TB powers of 1000, KiB, MiB, GiB, TiB of 1024): say which ranks' peaks exceed it", K_STR, F(memory), 0, 0, NULL},
    {"tflops", "X", "0", "a rank's matrix-product rate in TFLOP/s for the step time (0: this machine's cpu device, calibrated, its cores shared by the simulated ranks)", K_FLOAT, F(tflops), 0, 1e9, NULL},
    {"mem-bandwidth", "GBPS", "0", "a rank's memory bandwidth in GB/s (0: this machine's, calibrated, shared as --tflops 0)", K_FLOAT, F(mem_bandwidth), 0, 1e9, NULL},
    {"threads", "N", "0", "BLAS threads per rank when calibrating (0: fsc-train's default, 1 with several ranks)", K_INT, F(threads), 0, 1024, NULL},
    {"sim-bandwidth", "GBPS", "0", "the network: every link's bandwidth in GB/s, as fsc-train's simulated ranks take it (0: free)", K_FLOAT, F(sim_bandwidth), 0, 1e9, NULL},
    {"sim-latency", "US", "0", "the network: every link's latency in microseconds (0: none)", K_FLOAT, F(sim_latency), 0, 1e9, NULL},
    {"search", NULL, NULL, "plan every layout of --world instead (ddp, fsdp full, grad_op and hybrid, zero1, zero2; tp and pp dividing the world; 1, 2, 4 or 8 micro-batches; pipeline schedules gpipe, 1f1b, zb-h1; --recompute 0 and 1; offload optim where a layout does not fit without), print those that fit --memory fastest first", K_FLAG, F(search), 0, 0, NULL},
    {"search-precision", NULL, NULL, "with --search: also vary --precision over fp32 and bf16 (else --precision's)", K_FLAG, F(search_precision), 0, 0, NULL},
    {"search-config", "FILE", NULL, "with --search: write the fastest layout with the model and job options as an fsc-train --config file", K_STR, F(search_config), 0, 0, NULL},
    {"json", NULL, NULL, "print one JSON line: peak_bytes (rank 0), per_rank, and with offload host_peak_bytes, host_per_rank; ms_per_step, compute_ms, comm_ms, rates", K_FLAG, F(json), 0, 0, NULL},
};
#undef F
#define NOPT ((int)(sizeof options / sizeof options[0]))

static const char *prog = "fsc-plan";

static void usage(FILE *f) {
    fprintf(f, "usage: %s [options]\n"
               "Each rank's peak memory per tag for fsc-train with the same options, from the engine's setup and one\n"
               "step run on the counting device (nothing allocated), and the predicted step time at a rank's rates over\n"
               "the simulated network; --search ranks every layout that fits --memory. Options (as fsc-train's):\n", prog);
    for (int i = 0; i < NOPT; i++) {
        char left[48];
        snprintf(left, sizeof left, "--%s%s%s", options[i].name, options[i].arg ? " " : "",
                 options[i].arg ? options[i].arg : "");
        fprintf(f, "  %-24s %s%s%s%s\n", left, options[i].help, options[i].def ? " (default " : "",
                options[i].def ? options[i].def : "", options[i].def ? ")" : "");
    }
    fprintf(f, "  %-24s %s\n  %-24s %s\n", "--help", "this text", "--version", "the version");
}

/* Set one option from its text; 0, or -1 with err. */
static int set_option(plan_config *c, const option *o, const char *v, char *err, size_t cap) {
    char *p = (char *)c + o->off, *end = NULL;
    if (o->kind == K_FLAG) return *(int *)p = 1, 0;
    if (o->kind == K_STR) return *(const char **)p = v, 0;
    if (o->kind == K_CHOICE) {
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
    double x = strtod(v, &end);
    if (!*v || *end || !(x >= o->lo && x <= o->hi) || (o->kind == K_INT && x != floor(x)))
        return snprintf(err, cap, "--%s '%s': expected %s in [%g, %g]", o->name, v,
                        o->kind == K_INT ? "a whole number" : "a number", o->lo, o->hi), -1;
    if (o->kind == K_INT) *(int *)p = (int)x;
    else *(float *)p = (float)x;
    return 0;
}

static int parse_args(int argc, char **argv, plan_config *c, char *err, size_t cap) {
    for (int i = 0; i < NOPT; i++)
        if (options[i].def && set_option(c, &options[i], options[i].def, err, cap) != 0) return -1;
    for (int a = 1; a < argc; a++) {
        const char *arg = argv[a];
        if (strncmp(arg, "--", 2) != 0) return snprintf(err, cap, "unexpected argument '%s'", arg), -1;
        const char *name = arg + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const option *o = NULL;
        for (int i = 0; i < NOPT && !o; i++)
            if (strlen(options[i].name) == len && strncmp(options[i].name, name, len) == 0) o = &options[i];
        if (!o) return snprintf(err, cap, "unknown option '%.*s' (%s --help lists them)", (int)len + 2, arg, prog), -1;
        const char *v = eq ? eq + 1 : NULL;
        if (o->kind == K_FLAG && v) return snprintf(err, cap, "--%s takes no value", o->name), -1;
        if (o->kind != K_FLAG && !v) {
            if (a + 1 >= argc) return snprintf(err, cap, "--%s needs a value (%s)", o->name, o->arg), -1;
            v = argv[++a];
        }
        if (set_option(c, o, v, err, cap) != 0) return -1;
    }
    return 0;
}

/* --memory's SIZE in bytes into *out; 0, or -1 with err. */
static int parse_size(const char *v, double *out, char *err, size_t cap) {
    static const struct { const char *suffix; double mult; } units[] = {
        {"", 1}, {"B", 1}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
        {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
    };
    char *end = NULL;
    double x = strtod(v, &end);
    for (size_t i = 0; end != v && i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(end, units[i].suffix) != 0) continue;
        *out = x * units[i].mult;
        if (*out >= 1 && *out < 1.8e19) return 0;
        break;
    }
    return snprintf(err, cap, "--memory '%s': expected a size of at least 1 byte such as 80GiB, 141GB or 8e10 (suffixes B, "
                              "KB, MB, GB, TB, KiB, MiB, GiB, TiB)", v), -1;
}

/* --cluster's presets: one GPU and its node's links, from the vendors' datasheets (docs/planning.md names each).
 * Peak dense matrix rates (no sparsity) in TFLOP/s at bf16/f16 (tensor cores) and at fp32 (no tensor cores);
 * HBM in GB/s; NVLink a GPU's bandwidth one way (half the bidirectional figure); InfiniBand one 400 Gb/s (H100,
 * H200) or 200 Gb/s (A100) adapter a GPU; latencies a ring step's as NCCL's tuning model takes them (NVLink
 * 3.4 us, network 14 us, Ring/Simple). */
typedef struct {
    const char *name;
    int ranks;
    double memory, tflops_bf16, tflops_fp32, hbm_gbps, nvlink_gbps, nvlink_us, ib_gbps, ib_us;
} cluster_preset;

static const cluster_preset presets[] = {
    {"h100-sxm-8", 8, 80e9, 989.4, 66.9, 3350, 450, 3.4, 50, 14},
    {"h200-8", 8, 141e9, 989.4, 66.9, 4800, 450, 3.4, 50, 14},
    {"a100-sxm-8", 8, 80e9, 312, 19.5, 2039, 300, 3.4, 25, 14},
};

static const cluster_preset *preset_of(const plan_config *c) { return c->cluster ? &presets[c->cluster - 1] : NULL; }

/* --cluster and --nodes: the world is --nodes x the node's GPUs unless --world is given (then --nodes, if given,
 * must agree with it); --nodes without --cluster is refused. 0, or -1 with err. */
static int cluster_world(int argc, char **argv, plan_config *c, char *err, size_t cap) {
    int world_given = 0;
    for (int a = 1; a < argc; a++)
        if (!strcmp(argv[a], "--world") || !strncmp(argv[a], "--world=", 8)) world_given = 1;
    const cluster_preset *p = preset_of(c);
    if (!p) return c->nodes ? snprintf(err, cap, "--nodes needs --cluster (a node's GPUs)"), -1 : 0;
    if (!world_given) c->world = (c->nodes ? c->nodes : 1) * p->ranks;
    else if (c->nodes && c->nodes * p->ranks != c->world)
        return snprintf(err, cap, "--world %d is not --nodes %d x %d GPUs of a %s node", c->world, c->nodes, p->ranks,
                        p->name), -1;
    return 0;
}

/* The job fsc-train would run with these options (its train_fn, one step). */
static int make_job(const plan_config *c, fsc_plan_job *j, char *err, size_t cap) {
    *j = fsc_plan_job_default();
    j->world = c->world;
    j->batch = c->batch;
    j->seed = 1;
    if (c->model == 1) {
        int ffn = c->ffn ? c->ffn : fsc_llama_default_ffn(c->dim);
        j->model = FSC_PLAN_LLAMA;
        j->llama = (fsc_llama_config){.layers = c->layers, .dim = c->dim, .heads = c->heads,
                                      .kv_heads = c->kv_heads ? c->kv_heads : c->heads, .ffn = ffn, .seq = c->seq,
                                      .vocab = c->vocab, .rope_theta = 10000.0f, .norm_eps = 1e-5f};
        if (c->moe_experts) {
            j->llama.moe_experts = c->moe_experts, j->llama.moe_top_k = c->moe_top_k, j->llama.moe_every = c->moe_every;
            j->llama.moe_capacity = c->moe_capacity, j->llama.moe_aux = 0.01f;
        }
        j->sequence_parallel = c->sequence_parallel;
    } else {
        if (c->kv_heads || c->ffn) return snprintf(err, cap, "--kv-heads and --ffn are llama's (--model llama)"), -1;
        j->gpt = (fsc_gpt_config){.layers = c->layers, .dim = c->dim, .heads = c->heads, .seq = c->seq,
                                  .vocab = c->vocab};
        if (c->moe_experts) {
            j->gpt.moe_experts = c->moe_experts, j->gpt.moe_top_k = c->moe_top_k, j->gpt.moe_every = c->moe_every;
            j->gpt.moe_capacity = c->moe_capacity, j->gpt.moe_aux = 0.01f;
        }
    }
    static const fsc_dtype dtype[] = {FSC_F32, FSC_BF16, FSC_F16};
    static const fsc_pipe_checkpoint ckpt[] = {FSC_PIPE_CKPT_ALWAYS, FSC_PIPE_CKPT_EXCEPT_LAST, FSC_PIPE_CKPT_NEVER};
    fsc_parallel_opts *po = &j->po;
    po->kind = c->parallel == 5 ? FSC_PAR_DDP : (fsc_parallel_kind)c->parallel;
    po->shard = (fsc_shard_strategy)c->shard;
    if (strcmp(c->wrap, "block") == 0) po->wrap = FSC_WRAP_BLOCK;
    else if (strcmp(c->wrap, "model") == 0) po->wrap = FSC_WRAP_MODEL;
    else if (strncmp(c->wrap, "min-params:", 11) == 0 && c->wrap[11] >= '0' && c->wrap[11] <= '9') {
        char *end = NULL;
        unsigned long long n = strtoull(c->wrap + 11, &end, 10);
        if (*end || n == 0) return snprintf(err, cap, "--wrap '%s': min-params:N needs a whole number N >= 1", c->wrap), -1;
        po->wrap = FSC_WRAP_MIN_PARAMS, po->wrap_min_params = (size_t)n;
    } else {
        return snprintf(err, cap, "--wrap '%s': not block, model or min-params:N", c->wrap), -1;
    }
    po->param_dtype = po->reduce_dtype = dtype[c->precision];
    po->accum = c->accum;
    po->prefetch = c->prefetch;
    po->offload = (fsc_offload_mode)c->offload;
    po->clip = c->clip;
    po->pp = c->pp;
    static const fsc_pipe_schedule sched[] = {FSC_SCHED_GPIPE, FSC_SCHED_1F1B, FSC_SCHED_INTERLEAVED, FSC_SCHED_ZB_H1};
    po->schedule = sched[c->schedule];
    po->virtual_stages = c->virtual_stages;
    po->checkpoint = c->recompute;
    po->pipe_checkpoint = ckpt[c->pipe_ckpt];
    po->tp = c->tp;
    po->sequence_parallel = c->sequence_parallel;
    po->ep = c->ep;
    j->oc.kind = (fsc_optim_kind)c->optimizer;
    if (j->oc.kind == FSC_OPT_SGD) j->oc.momentum = c->momentum;
    if (c->world % (c->tp * c->pp) != 0)
        return snprintf(err, cap, "--world %d does not split into --tp %d x --pp %d (world = dp x tp x pp)", c->world,
                        c->tp, c->pp), -1;
    return 0;
}

/* How many ranks' peak totals exceed memory bytes; their numbers into over (cap bytes, may be NULL). */
static int plan_over(const fsc_plan_rank *r, int world, double memory, char *over, size_t cap) {
    int n = 0;
    size_t used = 0;
    if (over && cap) over[0] = '\0';
    for (int i = 0; i < world; i++) {
        if ((double)r[i].peak_total <= memory) continue;
        if (over && used + 16 < cap) used += (size_t)snprintf(over + used, cap - used, "%s%d", n ? " " : "", i);
        n++;
    }
    if (over && used + 16 >= cap && cap > 4) snprintf(over + cap - 5, 5, " ...");
    return n;
}

/* The rates of the step time: those given, then --cluster's, the rest this machine's (calibrated as the world's
 * simulated ranks). */
static fsc_status rates(const plan_config *c, fsc_plan_rates *rt) {
    *rt = (fsc_plan_rates){.flops_per_s = c->tflops * 1e12, .bytes_per_s = c->mem_bandwidth * 1e9,
                           .net_bytes_per_s = c->sim_bandwidth * 1e9, .net_latency_s = c->sim_latency * 1e-6};
    const cluster_preset *p = preset_of(c);
    if (p) {
        if (!(rt->flops_per_s > 0)) rt->flops_per_s = (c->precision == 0 ? p->tflops_fp32 : p->tflops_bf16) * 1e12;
        if (!(rt->bytes_per_s > 0)) rt->bytes_per_s = p->hbm_gbps * 1e9;
        if (!(rt->net_bytes_per_s > 0)) rt->net_bytes_per_s = p->ib_gbps * 1e9;
        if (!(rt->net_latency_s > 0)) rt->net_latency_s = p->ib_us * 1e-6;
        rt->node_ranks = p->ranks;
        rt->node_bytes_per_s = p->nvlink_gbps * 1e9;
        rt->node_latency_s = p->nvlink_us * 1e-6;
        return FSC_OK;
    }
    if (c->tflops > 0 && c->mem_bandwidth > 0) return FSC_OK;
    fsc_plan_rates cal;
    FSC_TRY(plan_sim_rates(c->world, c->threads, c->sim_bandwidth, c->sim_latency, &cal));
    if (!(c->tflops > 0)) rt->flops_per_s = cal.flops_per_s;
    if (!(c->mem_bandwidth > 0)) rt->bytes_per_s = cal.bytes_per_s;
    return FSC_OK;
}

/* The option name of a field, for the --config file */
static const option *option_of(size_t off) {
    for (int i = 0; i < NOPT; i++)
        if (options[i].off == off) return &options[i];
    return NULL;
}

/* --search-config: the job's options (the model, the batch, the optimizer, precision, offload, prefetch) and the
 * winner's layout as fsc-train's --config JSON; 0, or -1 (said on stderr). */
static int write_config(const plan_config *c, const plan_candidate *w) {
    cJSON *o = cJSON_CreateObject();
    char buf[32];
    static const size_t ints[] = {offsetof(plan_config, layers), offsetof(plan_config, dim),
                                  offsetof(plan_config, heads), offsetof(plan_config, seq),
                                  offsetof(plan_config, vocab), offsetof(plan_config, batch),
                                  offsetof(plan_config, world), offsetof(plan_config, prefetch)};
    static const size_t choices[] = {offsetof(plan_config, model), offsetof(plan_config, optimizer)};
    for (size_t i = 0; i < sizeof choices / sizeof choices[0]; i++) {
        const option *op = option_of(choices[i]);
        const char *s = op->choices;
        for (int k = *(const int *)((const char *)c + choices[i]); k > 0; k--) s = strchr(s, '|') + 1;
        snprintf(buf, sizeof buf, "%.*s", (int)strcspn(s, "|"), s);
        cJSON_AddStringToObject(o, op->name, buf);
    }
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        cJSON_AddNumberToObject(o, option_of(ints[i])->name, *(const int *)((const char *)c + ints[i]));
    if (c->kv_heads) cJSON_AddNumberToObject(o, "kv-heads", c->kv_heads);
    if (c->ffn) cJSON_AddNumberToObject(o, "ffn", c->ffn);
    cJSON_AddStringToObject(o, "parallel", search_parallel(w));
    if (w->kind == FSC_PAR_FSDP) cJSON_AddStringToObject(o, "shard", search_shard(w));
    cJSON_AddNumberToObject(o, "tp", w->tp);
    cJSON_AddNumberToObject(o, "pp", w->pp);
    cJSON_AddNumberToObject(o, "accum", w->accum);
    cJSON_AddNumberToObject(o, "recompute", w->recompute);
    if (w->pp > 1) cJSON_AddStringToObject(o, "schedule", search_schedule(w));
    if (w->pp > 1 && w->schedule == FSC_SCHED_INTERLEAVED) cJSON_AddNumberToObject(o, "virtual-stages", c->virtual_stages);
    cJSON_AddStringToObject(o, "offload", search_offload(w));
    cJSON_AddStringToObject(o, "precision", search_precision(w));
    if (c->model == 1 && c->sequence_parallel && w->tp > 1) cJSON_AddTrueToObject(o, "sequence-parallel");
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    FILE *f = text ? fopen(c->search_config, "w") : NULL;
    int bad = !f || fprintf(f, "%s\n", text) < 0;
    if (f && fclose(f) != 0) bad = 1;
    free(text);
    if (bad) fprintf(stderr, "%s: --search-config %s: cannot write it\n", prog, c->search_config);
    return bad ? -1 : 0;
}

/* --search: every layout, the table (or --json's "search" array), the winner's --config file. */
static int search(const plan_config *c, const fsc_plan_job *job, const fsc_plan_rates *rt, double memory,
                  fsc_plan_rank *r) {
    plan_candidate *cand = calloc(SEARCH_MAX, sizeof *cand);
    if (!cand) return fprintf(stderr, "%s: out of memory\n", prog), 1;
    search_space sp = {.precision = {c->precision}, .nprecision = 1};
    if (c->search_precision) sp.precision[0] = 0, sp.precision[1] = 1, sp.nprecision = 2;
    for (int p = 0; p < 3; p++) { /* a cluster's matrix rate is its precision's; the rest alike */
        sp.rates[p] = *rt;
        const cluster_preset *pre = preset_of(c);
        if (pre && !(c->tflops > 0)) sp.rates[p].flops_per_s = (p == 0 ? pre->tflops_fp32 : pre->tflops_bf16) * 1e12;
    }
    int refused = 0, over = 0, n = plan_search(job, &sp, memory, cand, r, &refused, &over);
    if (c->json) {
        cJSON *root = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(root, "search");
        for (int i = 0; i < n; i++) {
            cJSON *x = cJSON_CreateObject();
            cJSON_AddStringToObject(x, "parallel", search_parallel(&cand[i]));
            cJSON_AddStringToObject(x, "shard", search_shard(&cand[i]));
            cJSON_AddNumberToObject(x, "tp", cand[i].tp);
            cJSON_AddNumberToObject(x, "pp", cand[i].pp);
            cJSON_AddNumberToObject(x, "accum", cand[i].accum);
            cJSON_AddNumberToObject(x, "recompute", cand[i].recompute);
            cJSON_AddStringToObject(x, "schedule", search_schedule(&cand[i]));
            cJSON_AddStringToObject(x, "offload", search_offload(&cand[i]));
            cJSON_AddStringToObject(x, "precision", search_precision(&cand[i]));
            cJSON_AddNumberToObject(x, "peak_bytes", (double)cand[i].peak);
            cJSON_AddNumberToObject(x, "ms_per_step", cand[i].t.step_s * 1e3);
            cJSON_AddNumberToObject(x, "compute_ms", cand[i].t.compute_s * 1e3);
            cJSON_AddNumberToObject(x, "comm_ms", cand[i].t.comm_s * 1e3);
            cJSON_AddItemToArray(a, x);
        }
        cJSON_AddNumberToObject(root, "refused", refused);
        cJSON_AddNumberToObject(root, "over_memory", over);
        char *text = cJSON_PrintUnformatted(root);
        cJSON_Delete(root);
        if (text) printf("%s\n", text);
        free(text);
    } else {
        plan_print_search(stdout, cand, n, c->world, refused, over);
    }
    int rc = 0;
    if (n == 0) fprintf(stderr, "%s: --search: no layout of world %d fits%s%s\n", prog, c->world,
                        c->memory ? " in " : "", c->memory ? c->memory : ""), rc = 1;
    else if (c->search_config && write_config(c, &cand[0]) != 0) rc = 1;
    free(cand);
    return rc;
}

int main(int argc, char **argv) {
    for (int a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "--help") || !strcmp(argv[a], "-h")) return usage(stdout), 0;
        if (!strcmp(argv[a], "--version")) return printf("%s %s\n", prog, fsc_version_string()), 0;
    }
    plan_config c = {0};
    fsc_plan_job job;
    char err[512];
    if (parse_args(argc, argv, &c, err, sizeof err) != 0 || cluster_world(argc, argv, &c, err, sizeof err) != 0 ||
        make_job(&c, &job, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", prog, err);
        return 2;
    }
    double memory = preset_of(&c) ? preset_of(&c)->memory : 0;
    char memory_name[64];
    if (!c.memory && memory > 0) /* the cluster's GPU memory, named for the messages */
        snprintf(memory_name, sizeof memory_name, "%.0f GB (%s)", memory * 1e-9, preset_of(&c)->name), c.memory = memory_name;
    else if (c.memory && parse_size(c.memory, &memory, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", prog, err);
        return 2;
    }
    if (c.search_config && !c.search) return fprintf(stderr, "%s: --search-config needs --search\n", prog), 2;
    fsc_plan_rank *r = calloc((size_t)c.world, sizeof *r);
    if (!r) return fprintf(stderr, "%s: out of memory\n", prog), 1;
    fsc_plan_rates rt;
    fsc_status s = rates(&c, &rt);
    if (s == FSC_OK && c.search) {
        int rc = search(&c, &job, &rt, memory, r);
        free(r);
        return rc;
    }
    if (s == FSC_OK) s = fsc_plan_memory(&job, r);
    fsc_plan_step step = {0};
    if (s == FSC_OK) s = fsc_plan_time(&job, r, &rt, &step);
    int rc = 0;
    if (s != FSC_OK) {
        fprintf(stderr, "%s: %s\n", prog, fsc_last_error());
        rc = 1;
    } else if (c.json) {
        cJSON *root = cJSON_CreateObject();
        plan_json_fields(root, r, c.world);
        plan_time_fields(root, &step, &rt);
        if (memory > 0) {
            cJSON_AddNumberToObject(root, "memory_bytes", memory);
            cJSON_AddBoolToObject(root, "fits", plan_over(r, c.world, memory, NULL, 0) == 0);
        }
        char *text = cJSON_PrintUnformatted(root);
        cJSON_Delete(root);
        if (text) {
            printf("%s\n", text);
        } else {
            fprintf(stderr, "%s: out of memory\n", prog);
            rc = 1;
        }
        free(text);
    } else {
        plan_print_table(stdout, r, c.world);
        plan_print_time(stdout, &step, &rt, c.prefetch);
        char over[256];
        int n = memory > 0 ? plan_over(r, c.world, memory, over, sizeof over) : 0;
        if (memory > 0 && n) printf("does not fit in %s: %d rank%s over (%s)\n", c.memory, n, n == 1 ? "" : "s", over);
        else if (memory > 0) printf("fits in %s on every rank\n", c.memory);
    }
    free(r);
    return rc;
}
