/* fsc-train (built from this file; build/train_gpt is a link to it): train a GPT-2 or a Llama on a file of
 * tokens (bytes, llm.c shards, uint16), on one rank or on a simulated cluster, with the public fsc API
 * only. One table of options is the parser, the defaults and the --help text.
 *
 * Data order (a contract, the same for every world size, strategy and --data-format): with N tokens in the
 * stream of --data (its files concatenated in order), global batch B and context T, sequence i of step s
 * starts at ((s*B + i) * T) mod (N - T); its inputs are the T tokens from there and its targets the next T.
 * With --world W, rank r takes sequences [r*B/W, (r+1)*B/W); with a pipeline (--pp P) or tensor
 * parallelism (--tp T), world = dp x tp x pp laid out by --order (Megatron's: rank = (stage * dp + d) * tp
 * + tensor index), every rank of data-parallel index d takes the sequences [d*B/dp, (d+1)*B/dp).
 * The training function runs on every rank (SPMD); rank 0 prints one line per step and, with --json, the
 * last line of output is one JSON object with every loss, throughput, memory and communication. */
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <cjson/cJSON.h>
#include "fsc/fsc.h"
#include "fsc/llama.h"
#include "tied_head.h"
#include "train_flight.h"
#include "train_log.h"
#include "train_same.h"
#include "suggest.h"

typedef struct {
    int model;      /* index into "gpt2|llama" */
    int layers, dim, heads, seq, vocab;
    int kv_heads, ffn;            /* llama: 0 gives --heads and Llama's rule */
    float rope_theta, norm_eps;   /* llama */
    const char *data;
    int data_format;    /* fsc_data_format */
    int batch, steps;
    float lr;
    int optimizer;  /* fsc_optim_kind */
    float momentum, weight_decay, clip;
    int decay_all;      /* weight decay on every tensor (fsc_optim_config.decay_all) */
    int lr_schedule;    /* fsc_lr_kind */
    int warmup;         /* steps of learning-rate warmup */
    float min_lr;       /* where cosine and linear decay end */
    const char *val_data; /* validation tokens (--data-format) */
    int val_every, val_batches;
    uint64_t seed;
    const char *init_save, *save, *load;
    int save_dtype;     /* --save/--init-save element type: index into "f32|bf16|f16" */
    int json;
    int world;
    int parallel;   /* fsc_parallel_kind */
    int shard;      /* fsc_shard_strategy */
    int wrap;       /* fsc_wrap_policy */
    size_t wrap_min_params;
    int precision;  /* index into precision_dtype */
    int accum;
    int check_ddp;
    int threads;
    int device;         /* index into device_names */
    int pp, dp, chunks; /* pipeline stages, data-parallel ranks (0: world / pp), micro-batches (0: --accum) */
    int schedule;       /* fsc_pipe_schedule */
    int virtual_stages; /* interleaved: chunks per pipeline rank */
    int pipe_ckpt;      /* index into pipe_ckpt_mode */
    const char *balance;
    int save_every;     /* training checkpoints (docs/checkpoints.md) */
    const char *ckpt_dir, *resume;
    int keep_last;      /* checkpoints --ckpt-dir keeps (0: all) */
    int ckpt_format;    /* fsc_ckpt_format */
    int ckpt_overwrite; /* a new run may take over --ckpt-dir from another run */
    int tp, sequence_parallel; /* tensor parallelism (docs/tensor_parallel.md) */
    const char *order;  /* rank order of dp x tp x pp, fastest first */
    int moe_experts, moe_top_k, moe_every, ep; /* mixture of experts (docs/tensor_parallel.md) */
    float moe_capacity, moe_aux;
    int nonfinite;      /* fsc_nonfinite_policy */
    int max_skipped_steps;
    int reduce;         /* 0 ordered (the simulator's bits), 1 native (processes: MPI's/NCCL's own sums), 2 exact */
    int unit;           /* --reduce exact: sequences per unit (0: the per-rank micro-batch) */
    const char *config, *log, *trace; /* --config FILE.json, --log FILE.jsonl, --trace DIR (train_log.h, trace.h) */
    char *strs;         /* the text of --config's string values (the options point into it; malloc'd as large as
                           the file, which holds them all; main frees it) */
    size_t nstrs, strs_cap;
    int trace_events;
    const char *flight; /* --flight-recorder DIR (train_flight.h) */
    float peak_tflops;  /* per rank, for MFU; 0: measured */
    float sim_bandwidth, sim_latency; /* simulated ranks: the network (GB/s, us; 0: no cost) */
    int prefetch;       /* overlap communication with computation (docs/overlap.md) */
    int offload;        /* fsc_offload_mode (docs/offload.md) */
    float sim_copy;     /* simulated ranks: host<->device copy bandwidth (GB/s; 0: no cost) */
} train_config;

typedef enum { K_INT, K_U64, K_FLOAT, K_STR, K_FLAG, K_CHOICE, K_WRAP } opt_kind;

typedef struct {
    const char *name;    /* without the leading "--" */
    const char *arg;     /* placeholder in --help; NULL for a flag */
    const char *def;     /* default, parsed like user input; NULL: none */
    const char *help;
    opt_kind kind;
    size_t off;          /* offsetof(train_config, field) */
    double lo, hi;       /* K_INT, K_FLOAT: allowed range */
    const char *choices; /* K_CHOICE: "a|b|c", the value stored is the index */
} option;

#define F(field) offsetof(train_config, field)
static const option options[] = {
    {"model", "NAME", "gpt2", "model family: gpt2|llama (Hugging Face LlamaForCausalLM layout)", K_CHOICE, F(model), 0, 0, "gpt2|llama"},
    {"layers", "N", "4", "transformer blocks", K_INT, F(layers), 1, 1024, NULL},
    {"dim", "C", "128", "model width (channels)", K_INT, F(dim), 1, 65536, NULL},
    {"heads", "H", "4", "attention heads (must divide --dim)", K_INT, F(heads), 1, 65536, NULL},
    {"seq", "T", "64", "context length (tokens per sequence)", K_INT, F(seq), 1, 1 << 20, NULL},
    {"vocab", "V", "256", "vocabulary size; every token of --data must be below it", K_INT, F(vocab), 1, 1 << 24, NULL},
    {"kv-heads", "K", NULL, "llama: key/value heads, grouped-query attention below --heads (default: --heads)", K_INT, F(kv_heads), 1, 65536, NULL},
    {"ffn", "N", NULL, "MLP hidden width (default: 4 x --dim for gpt2, the only width it has; for llama "
     "2/3 x 4 x --dim rounded up to a multiple of 256)", K_INT, F(ffn), 1, 1 << 20, NULL},
    {"rope-theta", "X", "10000", "llama: rotary embedding base", K_FLOAT, F(rope_theta), 0, INFINITY, NULL},
    {"norm-eps", "X", "1e-5", "llama: RMSNorm epsilon", K_FLOAT, F(norm_eps), 0, INFINITY, NULL},
    {"data", "PATH", "examples/data/coriolanus.txt", "training tokens: a file, or a comma list or glob of files read as one stream in order (the default is also found from any directory: beside the program, or installed in share/fsc)", K_STR, F(data), 0, 0, NULL},
    {"data-format", "F", "auto", "auto (llmc when a file begins with llm.c's magic, else bytes; refused above --vocab 256)|bytes (a byte a token)|llmc (llm.c shards)|u16 (headerless uint16, nanoGPT's .bin)", K_CHOICE, F(data_format), 0, 0, "auto|bytes|llmc|u16"},
    {"batch", "B", "8", "sequences per step (global batch over all ranks)", K_INT, F(batch), 1, 1 << 20, NULL},
    {"steps", "S", "30", "optimizer steps", K_INT, F(steps), 0, 1e9, NULL},
    {"lr", "X", "0.003", "learning rate", K_FLOAT, F(lr), 0, INFINITY, NULL},
    {"optimizer", "NAME", "adamw", "sgd|adamw", K_CHOICE, F(optimizer), 0, 0, "sgd|adamw"},
    {"momentum", "X", "0.9", "SGD momentum (0: plain SGD)", K_FLOAT, F(momentum), 0, 1, NULL},
    {"weight-decay", "X", "0", "weight decay (SGD: L2 in the gradient; AdamW: decoupled)", K_FLOAT, F(weight_decay), 0, INFINITY, NULL},
    {"decay-all", NULL, NULL, "weight decay on every tensor (default: matrices only, not biases, norms or embeddings)", K_FLAG, F(decay_all), 0, 0, NULL},
    {"lr-schedule", "S", "constant", "learning rate by step: constant|cosine|linear (after --warmup steps, cosine or linear decay from --lr to --min-lr at --steps)", K_CHOICE, F(lr_schedule), 0, 0, "constant|cosine|linear"},
    {"warmup", "N", "0", "steps of linear learning-rate warmup: step k (from 0) takes --lr x (k+1)/N", K_INT, F(warmup), 0, 1e9, NULL},
    {"min-lr", "X", "0", "the learning rate cosine and linear decay reach at --steps", K_FLOAT, F(min_lr), 0, INFINITY, NULL},
    {"val-data", "PATH", NULL, "validation tokens (files as --data, in --data-format): the mean loss of --val-batches batches, every --val-every steps", K_STR, F(val_data), 0, 0, NULL},
    {"val-every", "K", "0", "validate after every K steps and after the last (0: after the last only)", K_INT, F(val_every), 0, 1e9, NULL},
    {"val-batches", "N", "4", "validation batches of --batch sequences: steps 0..N-1 of --val-data by the data order, the same every time", K_INT, F(val_batches), 1, 1e6, NULL},
    {"clip", "X", "1", "clip gradients to this global L2 norm (0: off)", K_FLOAT, F(clip), 0, INFINITY, NULL},
    {"nonfinite", "MODE", "stop", "a step with inf/NaN loss or gradients (fp32, bf16): stop with an error|skip it", K_CHOICE, F(nonfinite), 0, 0, "stop|skip"},
    {"max-skipped-steps", "N", "100", "fail after N steps in a row skipped for inf/NaN (fp16 overflows included)", K_INT, F(max_skipped_steps), 1, 1e9, NULL},
    {"seed", "N", "1", "seed of the keyed parameter initialization", K_U64, F(seed), 0, 0, NULL},
    {"init-save", "PATH", NULL, "write the weights before the first step (safetensors)", K_STR, F(init_save), 0, 0, NULL},
    {"save", "PATH", NULL, "write the weights after the last step (safetensors recording the model: build/sample reads it)", K_STR, F(save), 0, 0, NULL},
    {"save-dtype", "T", "f32", "element type of --save and --init-save files: f32|bf16|f16 (rounded to nearest even)", K_CHOICE, F(save_dtype), 0, 0, "f32|bf16|f16"},
    {"load", "PATH", NULL, "load weights before training: safetensors in the Hugging Face layout of --model (GPT2LMHeadModel's or LlamaForCausalLM's state dict too), F32, BF16 or F16", K_STR, F(load), 0, 0, NULL},
    {"save-every", "K", "0", "write a training checkpoint every K steps into --ckpt-dir (0: never)", K_INT, F(save_every), 0, 1e9, NULL},
    {"ckpt-dir", "DIR", NULL, "where --save-every writes checkpoints: DIR/step-NNNNNNNN, atomically", K_STR, F(ckpt_dir), 0, 0, NULL},
    {"ckpt-format", "F", "sharded", "checkpoint format: sharded (a file per rank)|full (single-rank weights layout)", K_CHOICE, F(ckpt_format), 0, 0, "sharded|full"},
    {"ckpt-overwrite", NULL, NULL, "start over in a --ckpt-dir holding another run's checkpoints: they are removed at the first save (without it: refused)", K_FLAG, F(ckpt_overwrite), 0, 0, NULL},
    {"resume", "DIR", NULL, "continue from the newest complete checkpoint in DIR that loads (any --world and --parallel) up to --steps; a damaged one is skipped, with a message; none there (or no DIR): start a new run; DIR/step-NNNNNNNN: from that checkpoint", K_STR, F(resume), 0, 0, NULL},
    {"keep-last", "K", "0", "after each checkpoint is written, remove the older ones of --ckpt-dir beyond the newest K (0: keep all)", K_INT, F(keep_last), 0, 1e9, NULL},
    {"json", NULL, NULL, "end with one JSON line: losses, throughput, memory, communication, config", K_FLAG, F(json), 0, 0, NULL},
    {"config", "FILE", NULL, "options from a JSON object {\"option\": value, ...} (names as here; the command line wins)", K_STR, F(config), 0, 0, NULL},
    {"log", "FILE", NULL, "write one JSON object per line to FILE (.jsonl): the config, then every step and validation, flushed as they come", K_STR, F(log), 0, 0, NULL},
    {"trace", "DIR", NULL, "write a Chrome/Perfetto trace per rank, DIR/rank-N.json (open in ui.perfetto.dev)", K_STR, F(trace), 0, 0, NULL},
    {"trace-events", "N", "262144", "events each rank's trace keeps at most (about 120 bytes each); later ones are counted, not kept", K_INT, F(trace_events), 1, 1 << 26, NULL},
    {"flight-recorder", "DIR", NULL, "on a failed collective or SIGUSR1, write each rank's last collectives to DIR/flight-rank-N.json (default: --ckpt-dir, else --trace); fsc-ckpt flight DIR names where the ranks diverge", K_STR, F(flight), 0, 0, NULL},
    {"peak-tflops", "X", "0", "peak TFLOP/s of one rank's device for MFU (0: measure its fp32 gemm at start)", K_FLOAT, F(peak_tflops), 0, 1e9, NULL},
    {"world", "N", "1", "simulated ranks (threads); under a launcher (mpirun, srun, torchrun) one rank per process: omit it or give the launcher's number", K_INT, F(world), 1, 1024, NULL},
    {"reduce", "MODE", "ordered", "gradient sums: ordered (in rank order, the simulated ranks' bits)|native (processes started by a launcher: MPI's or NCCL's own all-reduce, faster, bits may differ)|exact (int64 fixed point: the same bits at any --world, --accum and --parallel; docs/determinism.md)", K_CHOICE, F(reduce), 0, 0, "ordered|native|exact"},
    {"unit", "U", "0", "--reduce exact: sequences per unit of work, each run as one micro-batch wherever it is placed (0: the per-rank micro-batch)", K_INT, F(unit), 0, 1 << 20, NULL},
    {"sim-bandwidth", "GBPS", "0", "simulated ranks: every link's bandwidth in GB/s; a collective then takes a ring algorithm's time (docs/overlap.md) (0: no cost)", K_FLOAT, F(sim_bandwidth), 0, 1e9, NULL},
    {"sim-latency", "US", "0", "simulated ranks: every link's latency in microseconds (0: none)", K_FLOAT, F(sim_latency), 0, 1e9, NULL},
    {"prefetch", "0|1", "1", "overlap communication with computation: fsdp gathers the next unit ahead and reduce-scatters during backward; ddp and zero reduce buckets during backward; pipelines send and receive stage boundaries asynchronously, receives posted a micro-batch ahead (the same bits either way)", K_INT, F(prefetch), 0, 1, NULL},
    {"sim-copy-bandwidth", "GBPS", "0", "simulated ranks: host<->device copies (offload's among them) take bytes / GBPS of the rank's time, as over PCIe (docs/offload.md) (0: no cost)", K_FLOAT, F(sim_copy), 0, 1e9, NULL},
    {"offload", "MODE", "none", "host memory: none|optim (optimizer state and step on the host; fsdp, zero1, zero2)|all (also fsdp's fp32 master parameters and reduced gradients); the same bits (docs/offload.md)", K_CHOICE, F(offload), 0, 0, "none|optim|all"},
    {"parallel", "KIND", "none", "none|ddp|fsdp|zero1|zero2|pipe (pipe: --pp stages with ddp in each stage; "
     "the others compose with --pp too)", K_CHOICE, F(parallel), 0, 0, "none|ddp|fsdp|zero1|zero2|pipe"},
    {"shard", "KIND", "full", "fsdp sharding: full|grad_op|none|hybrid", K_CHOICE, F(shard), 0, 0, "full|grad_op|none|hybrid"},
    {"wrap", "POLICY", "block", "fsdp units: block|model|min-params:N", K_WRAP, F(wrap), 0, 0, NULL},
    {"precision", "P", "fp32", "parameters and gradient reduction: fp32|bf16|fp16", K_CHOICE, F(precision), 0, 0, "fp32|bf16|fp16"},
    {"accum", "K", "1", "micro-batches per step (gradient accumulation)", K_INT, F(accum), 1, 1 << 20, NULL},
    {"check-ddp", NULL, NULL, "also train with DDP and report whether the weights are bit-identical", K_FLAG, F(check_ddp), 0, 0, NULL},
    {"device", "NAME", "cpu", "device of every rank: cpu|cuda (cuda needs build/libfsc_cuda.so and a GPU; under a launcher each process drives its GPU through NCCL, a single process too)", K_CHOICE, F(device), 0, 0, "cpu|cuda"},
    {"threads", "N", "0", "BLAS threads per rank (0: 1 with several ranks, else the library default)", K_INT, F(threads), 0, 1024, NULL},
    {"pp", "P", "1", "pipeline stages (world = dp x tp x pp, laid out by --order)", K_INT, F(pp), 1, 1024, NULL},
    {"dp", "D", "0", "data-parallel ranks (0: --world / (--tp x --pp); without --world, world = D x T x P)", K_INT, F(dp), 0, 1024, NULL},
    {"chunks", "M", "0", "pipeline micro-batches per step (another name for --accum)", K_INT, F(chunks), 0, 1 << 20, NULL},
    {"schedule", "S", "gpipe", "pipeline schedule: gpipe|1f1b|interleaved (docs/pipeline.md)", K_CHOICE, F(schedule), 0, 0, "gpipe|1f1b|interleaved"},
    {"virtual-stages", "V", "1", "with --schedule interleaved: chunks of blocks per pipeline rank (--balance then has pp x V entries)", K_INT, F(virtual_stages), 1, 1024, NULL},
    {"balance", "N,N,..", NULL, "pipeline blocks per stage (default: as even as possible)", K_STR, F(balance), 0, 0, NULL},
    {"tp", "T", "1", "tensor-parallel ranks (world = dp x tp x pp; --parallel runs over each data group)", K_INT, F(tp), 1, 1024, NULL},
    {"sequence-parallel", NULL, NULL, "with --tp: layer norms and residuals on sequence shards", K_FLAG, F(sequence_parallel), 0, 0, NULL},
    {"order", "O", "tp,dp,pp", "rank order of dp x tp x pp, fastest first (tp,dp,pp: Megatron's, tensor ranks adjacent)", K_STR, F(order), 0, 0, NULL},
    {"checkpoint", "MODE", "except_last", "pipeline micro-batches that keep only their stage input: always|except_last|never", K_CHOICE, F(pipe_ckpt), 0, 0, "always|except_last|never"},
    {"moe-experts", "E", "0", "experts of each MoE block, GELU MLPs of the block's MLP width (llama: --ffn) (0: dense)", K_INT, F(moe_experts), 0, 4096, NULL},
    {"moe-top-k", "K", "1", "experts per token: 1 (Switch) or 2 (GShard)", K_INT, F(moe_top_k), 1, 2, NULL},
    {"moe-every", "N", "1", "blocks N-1, 2N-1, ... get an MoE MLP (1: every block)", K_INT, F(moe_every), 1, 1024, NULL},
    {"moe-capacity", "F", "1.25", "capacity factor: ceil(F x K x tokens / E) slots per expert, rank and micro-batch", K_FLOAT, F(moe_capacity), 0, 1024, NULL},
    {"moe-aux", "X", "0.01", "coefficient of the load-balancing loss in the objective", K_FLOAT, F(moe_aux), 0, INFINITY, NULL},
    {"ep", "G", "1", "expert-parallel ranks: G adjacent data-parallel ranks split the experts (ddp, zero1, zero2, fsdp)", K_INT, F(ep), 1, 1024, NULL},
};
#undef F
#define NOPT ((int)(sizeof options / sizeof options[0]))

static const fsc_dtype precision_dtype[] = {FSC_F32, FSC_BF16, FSC_F16};
static const fsc_pipe_checkpoint pipe_ckpt_mode[] = {FSC_PIPE_CKPT_ALWAYS, FSC_PIPE_CKPT_EXCEPT_LAST, FSC_PIPE_CKPT_NEVER};
#define PAR_PIPE 5 /* --parallel pipe: a pipeline with ddp in each stage */

/* The strategy inside each stage's data group. */
static fsc_parallel_kind strategy(const train_config *c) {
    return c->parallel == PAR_PIPE ? FSC_PAR_DDP : (fsc_parallel_kind)c->parallel;
}

static int option_index(const char *name);
static const char *option_near(const char *name, size_t len);

/* The layout options together: world = dp x pp, --chunks names --accum. */
static int resolve_layout(train_config *c, const int *given, char *err, size_t cap) {
    int gw = given[option_index("world")];
    if (c->chunks) {
        if (given[option_index("accum")])
            return snprintf(err, cap, "--chunks and --accum both give the micro-batches per step: give one"), -1;
        c->accum = c->chunks;
    }
    int mp = c->pp * c->tp; /* model-parallel ranks per data-parallel index */
    char tps[32] = "";
    if (c->tp > 1) snprintf(tps, sizeof tps, " x --tp %d", c->tp);
    if (c->dp) {
        if (gw && c->world != c->dp * mp)
            return snprintf(err, cap, "--world %d is not --dp %d%s x --pp %d", c->world, c->dp, tps, c->pp), -1;
        if ((long long)c->dp * mp > 1024)
            return snprintf(err, cap, "--dp %d%s x --pp %d is more than 1024 ranks", c->dp, tps, c->pp), -1;
        c->world = c->dp * mp;
    } else if (!gw) {
        if (mp > 1024) return snprintf(err, cap, "--tp %d x --pp %d is more than 1024 ranks", c->tp, c->pp), -1;
        c->world = mp;
    }
    if (c->world % mp != 0)
        return c->tp > 1 ? snprintf(err, cap, "--world %d does not split into --tp %d x --pp %d (world = dp x tp x pp)",
                                    c->world, c->tp, c->pp)
                         : snprintf(err, cap, "--world %d does not split into --pp %d pipeline stages (world = dp x pp)",
                                    c->world, c->pp), -1;
    c->dp = c->world / mp;
    return 0;
}

static void usage(FILE *f) {
    fprintf(f, "usage: fsc-train [options]   (build/fsc-train; build/train_gpt is the same program)\n"
               "Train a GPT-2 or a Llama on a file of tokens with fsc, on one rank or a simulated cluster.\n\n");
    for (int i = 0; i < NOPT; i++) {
        const option *o = &options[i];
        char lhs[64];
        snprintf(lhs, sizeof lhs, "--%s%s%s", o->name, o->arg ? " " : "", o->arg ? o->arg : "");
        fprintf(f, "  %-22s %s", lhs, o->help);
        if (o->def) fprintf(f, " (default %s)", o->def);
        fputc('\n', f);
    }
    fprintf(f, "  %-22s %s\n", "--help", "print this text");
    fprintf(f, "  %-22s %s\n", "--version", "print the version and exit");
}

static const char *choice_name(const char *choices, int idx, char *buf, size_t cap) {
    const char *p = choices;
    for (int i = 0; i < idx && p; i++) {
        p = strchr(p, '|');
        if (p) p++;
    }
    if (!p) return "?";
    size_t n = strcspn(p, "|");
    if (n >= cap) n = cap - 1;
    memcpy(buf, p, n);
    buf[n] = '\0';
    return buf;
}

/* Parse value v for option o into c. On error writes a message naming the option. */
static int set_option(train_config *c, const option *o, const char *v, char *err, size_t cap) {
    char *field = (char *)c + o->off;
    char *end = NULL;
    errno = 0;
    switch (o->kind) {
    case K_INT: {
        long long x = strtoll(v, &end, 10);
        if (!*v || *end || errno) return snprintf(err, cap, "--%s: '%s' is not an integer", o->name, v), -1;
        if ((double)x < o->lo || (double)x > o->hi)
            return snprintf(err, cap, "--%s: %lld is out of range [%.0f, %.0f]", o->name, x, o->lo, o->hi), -1;
        *(int *)field = (int)x;
        return 0;
    }
    case K_U64: {
        unsigned long long x = strtoull(v, &end, 10);
        if (!*v || *end || errno || strchr(v, '-'))
            return snprintf(err, cap, "--%s: '%s' is not a non-negative integer", o->name, v), -1;
        *(uint64_t *)field = (uint64_t)x;
        return 0;
    }
    case K_FLOAT: { /* decimal only: strtod would also read 0x10 as 16 */
        double x = strtod(v, &end);
        if (!*v || *end || strspn(v, "0123456789+-.eE") != strlen(v))
            return snprintf(err, cap, "--%s: '%s' is not a decimal number", o->name, v), -1;
        if ((errno == ERANGE && fabs(x) < 1) || (x != 0 && fabs(x) < FLT_MIN)) /* a float would hold 0 or a denormal */
            return snprintf(err, cap, "--%s: %s is too small for a float (the smallest is %g; give 0 for none)", o->name,
                            v, (double)FLT_MIN), -1;
        if (errno || !isfinite(x) || !isfinite((float)x))
            return snprintf(err, cap, "--%s: '%s' is not a finite number", o->name, v), -1;
        if (x < o->lo || x > o->hi) {
            if (isinf(o->hi)) return snprintf(err, cap, "--%s: %s is out of range (must be >= %g)", o->name, v, o->lo), -1;
            return snprintf(err, cap, "--%s: %s is out of range [%g, %g]", o->name, v, o->lo, o->hi), -1;
        }
        *(float *)field = (float)x;
        return 0;
    }
    case K_STR:
        if (!*v) return snprintf(err, cap, "--%s: empty path", o->name), -1;
        *(const char **)field = v;
        return 0;
    case K_FLAG:
        *(int *)field = 1;
        return 0;
    case K_CHOICE: {
        int idx = 0;
        for (const char *p = o->choices; p; idx++) {
            size_t n = strcspn(p, "|");
            if (strlen(v) == n && strncmp(p, v, n) == 0) {
                *(int *)field = idx;
                return 0;
            }
            p = strchr(p, '|');
            if (p) p++;
        }
        return snprintf(err, cap, "--%s: unknown value '%s' (expected %s)", o->name, v, o->choices), -1;
    }
    case K_WRAP:
        if (strcmp(v, "block") == 0) c->wrap = FSC_WRAP_BLOCK;
        else if (strcmp(v, "model") == 0) c->wrap = FSC_WRAP_MODEL;
        else if (strncmp(v, "min-params:", 11) == 0) {
            const char *num = v + 11;
            unsigned long long x = strtoull(num, &end, 10);
            if (!*num || *end || errno || strchr(num, '-') || x == 0)
                return snprintf(err, cap, "--%s: '%s' needs a positive count after min-params:", o->name, v), -1;
            c->wrap = FSC_WRAP_MIN_PARAMS;
            c->wrap_min_params = (size_t)x;
        } else
            return snprintf(err, cap, "--%s: unknown value '%s' (expected block, model or min-params:N)", o->name, v), -1;
        return 0;
    }
    return snprintf(err, cap, "--%s: internal error", o->name), -1;
}

/* Every option at its default, none given. */
static int set_defaults(train_config *c, int *given, char *err, size_t cap) {
    memset(c, 0, sizeof *c);
    for (int i = 0; i < NOPT; i++) {
        given[i] = 0;
        if (options[i].def && set_option(c, &options[i], options[i].def, err, cap) != 0) return -1;
    }
    return 0;
}

/* Whether option o holds the same value in a and b. */
static int same_value(const option *o, const train_config *a, const train_config *b) {
    const char *x = (const char *)a + o->off, *y = (const char *)b + o->off;
    switch (o->kind) {
    case K_U64: return memcmp(x, y, sizeof(uint64_t)) == 0;
    case K_FLOAT: return memcmp(x, y, sizeof(float)) == 0;
    case K_STR: {
        const char *s = *(const char *const *)x, *t = *(const char *const *)y;
        return (!s && !t) || (s && t && strcmp(s, t) == 0);
    }
    case K_WRAP: return a->wrap == b->wrap && a->wrap_min_params == b->wrap_min_params;
    default: return memcmp(x, y, sizeof(int)) == 0;
    }
}

/* The options of a JSON object (text, len bytes; `name` for messages: "--config FILE") over c: keys are option
 * names without "--", values of the option's kind (integer options: integral numbers; --seed also a string of
 * digits; floats: numbers; paths and choices: strings; flags: true or false). null, false and 0 for a count
 * without a default leave an option as it is (the run's config.json writes them for options not set). A key whose value differs from the default marks
 * the option given, as on the command line. String values are copied into c->strs. Returns 0 or -1 (err). */
static int apply_config_text(train_config *c, int *given, const char *text, size_t len, const char *name, char *err,
                             size_t cap) {
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) return snprintf(err, cap, "%s: not JSON (near byte %ld)", name,
                               cJSON_GetErrorPtr() ? (long)(cJSON_GetErrorPtr() - text) : 0L), -1;
    int rc = 0;
    while (end < text + len && strchr(" \t\r\n", *end) && *end) end++;
    if (end < text + len) /* cJSON stops after the first value: {"steps":1}{"steps":100} must not run 1 step */
        rc = (snprintf(err, cap, "%s: text after the JSON object at byte %ld (a file holds one object)", name,
                       (long)(end - text)), -1);
    train_config def;
    int dgiven[NOPT];
    if (rc == 0 && !cJSON_IsObject(root)) rc = (snprintf(err, cap, "%s: expected a JSON object {\"option\": value, ...}", name), -1);
    if (rc == 0) rc = set_defaults(&def, dgiven, err, cap);
    int seen[NOPT] = {0};
    const cJSON *it;
    cJSON_ArrayForEach(it, root) {
        if (rc != 0) break;
        const char *key = it->string ? it->string : "";
        int k = option_index(key);
        if (k < 0) {
            const char *near = option_near(key, strlen(key));
            if (near) rc = (snprintf(err, cap, "%s: unknown option \"%.64s\" (did you mean \"%s\"?)", name, key, near), -1);
            else rc = (snprintf(err, cap, "%s: unknown option \"%.64s\" (keys are the options of --help without --)", name, key), -1);
            break;
        }
        const option *o = &options[k];
        if (seen[k]++) {
            rc = (snprintf(err, cap, "%s: \"%s\" appears twice", name, key), -1);
            break;
        }
        /* null, false, and 0 for a count without a default (--kv-heads, --ffn): not set, as the run's config.json
         * writes options that were not given */
        if (!o->def && o->kind == K_INT && cJSON_IsNumber(it) && it->valuedouble == 0) continue;
        if (cJSON_IsNull(it) || cJSON_IsFalse(it)) {
            if (cJSON_IsFalse(it) && o->kind != K_FLAG)
                rc = (snprintf(err, cap, "%s: \"%s\" takes %s, not false", name, key, o->arg), -1);
            continue;
        }
        if (k == option_index("config")) {
            rc = (snprintf(err, cap, "%s: \"config\": a config file cannot name another", name), -1);
            break;
        }
        char num[64];
        const char *v = NULL, *want = NULL;
        double x = cJSON_IsNumber(it) ? it->valuedouble : 0;
        int integral = cJSON_IsNumber(it) && isfinite(x) && x == floor(x) && fabs(x) <= 9007199254740992.0;
        switch (o->kind) {
        case K_INT:
            if (integral) v = (snprintf(num, sizeof num, "%.0f", x), num);
            else want = "an integer";
            break;
        case K_U64:
            if (integral) v = (snprintf(num, sizeof num, "%.0f", x), num);
            else if (cJSON_IsString(it)) v = it->valuestring;
            else want = "a non-negative integer (a string of digits above 2^53)";
            break;
        case K_FLOAT:
            if (cJSON_IsNumber(it)) v = (snprintf(num, sizeof num, "%.17g", x), num);
            else want = "a number";
            break;
        case K_FLAG:
            if (cJSON_IsTrue(it)) v = "1";
            else want = "true or false";
            break;
        default: /* paths, choices, the wrap policy */
            if (cJSON_IsString(it)) v = it->valuestring;
            else want = "a string";
        }
        if (want) {
            char gotn[48];
            snprintf(gotn, sizeof gotn, "%.17g", x);
            const char *got = cJSON_IsString(it) ? "a string" : cJSON_IsNumber(it) ? gotn : cJSON_IsBool(it) ? "a boolean"
                            : cJSON_IsArray(it) ? "an array" : "an object";
            rc = (snprintf(err, cap, "%s: \"%s\" must be %s, not %s", name, key, want, got), -1);
            break;
        }
        if (o->kind == K_STR) { /* the option keeps a pointer: copy the text where it lives as long as c */
            size_t n = strlen(v) + 1;
            if (!c->strs && (c->strs = malloc(len + 1)) != NULL) c->strs_cap = len + 1, c->nstrs = 0;
            if (n > c->strs_cap - c->nstrs) {
                rc = (snprintf(err, cap, "%s: out of memory for its paths", name), -1);
                break;
            }
            memcpy(c->strs + c->nstrs, v, n);
            v = c->strs + c->nstrs;
            c->nstrs += n;
        }
        if (set_option(c, o, v, err, cap) != 0) { /* its message, after the file's name */
            size_t ln = strlen(name) + 2, lm = strlen(err) + 1;
            if (ln < cap) {
                memmove(err + ln, err, lm < cap - ln ? lm : cap - ln);
                err[cap - 1] = '\0';
                memcpy(err, name, ln - 2);
                memcpy(err + ln - 2, ": ", 2);
            }
            rc = -1;
            break;
        }
        if (!same_value(o, c, &def)) given[k] = 1;
    }
    cJSON_Delete(root);
    return rc;
}

#define CONFIG_MAX (1 << 20) /* bytes of a --config file, and of the config.json --resume compares */

/* A regular file of at most CONFIG_MAX bytes (a FIFO or a device is refused without waiting on it) into *text
 * (malloc'd, NUL-terminated) and *n. 0, or -1 with err saying why after `name`. */
static int read_config_file(const char *path, const char *name, char **text, size_t *n, char *err, size_t cap) {
    *text = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return snprintf(err, cap, "%s: cannot open: %s", name, strerror(errno)), -1;
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size > CONFIG_MAX) {
        close(fd);
        return snprintf(err, cap, "%s: not a regular file of at most 1 MiB", name), -1;
    }
    size_t got = 0;
    *n = (size_t)sb.st_size;
    *text = malloc(*n + 1);
    while (*text && got < *n) {
        ssize_t r = read(fd, *text + got, *n - got);
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    if (!*text || got != *n) {
        free(*text);
        *text = NULL;
        return snprintf(err, cap, "%s: cannot read it", name), -1;
    }
    (*text)[*n] = 0;
    return 0;
}

/* --config FILE: a regular file of at most 1 MiB holding one JSON object (apply_config_text). */
static int apply_config_file(train_config *c, int *given, const char *path, char *err, size_t cap) {
    char name[300], *text;
    size_t n;
    snprintf(name, sizeof name, "--config %.280s", path);
    if (read_config_file(path, name, &text, &n, err, cap) != 0) return -1;
    int rc = apply_config_text(c, given, text, n, name, err, cap);
    free(text);
    return rc;
}

static int parse_argv(int argc, char **argv, train_config *c, int *given, char *err, size_t cap);

/* Defaults, then --config's file, then argv (the command line wins). Returns 0 to run, 1 for --help, 2 for
 * --version, -1 on error (message in err). given[i] says whether option i was set on the command line or to
 * another value than its default by the config file. */
static int parse_args(int argc, char **argv, train_config *c, int *given, char *err, size_t cap) {
    if (set_defaults(c, given, err, cap) != 0) return -1;
    int rc = parse_argv(argc, argv, c, given, err, cap); /* finds --config (and --help, and bad options) */
    if (rc != 0 || !c->config) return rc;
    const char *path = c->config;
    int cgiven[NOPT] = {0};
    if (set_defaults(c, given, err, cap) != 0 || apply_config_file(c, cgiven, path, err, cap) != 0) return -1;
    rc = parse_argv(argc, argv, c, given, err, cap);
    for (int i = 0; i < NOPT; i++) given[i] |= cgiven[i];
    return rc;
}

/* The options of argv over c. */
static int parse_argv(int argc, char **argv, train_config *c, int *given, char *err, size_t cap) {
    for (int a = 1; a < argc; a++) {
        const char *s = argv[a];
        if (strcmp(s, "--help") == 0 || strcmp(s, "-h") == 0) return 1;
        if (strcmp(s, "--version") == 0) return 2;
        if (strncmp(s, "--", 2) != 0)
            return snprintf(err, cap, "unexpected argument '%s' (options start with --; see --help)", s), -1;
        const char *name = s + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        int k = -1;
        for (int i = 0; i < NOPT; i++)
            if (strlen(options[i].name) == len && strncmp(options[i].name, name, len) == 0) k = i;
        if (k < 0) {
            const char *near = option_near(name, len);
            return snprintf(err, cap, "unknown option '--%.*s' (%s%s%s)", (int)len, name, near ? "did you mean --" : "see --help",
                            near ? near : "", near ? "?" : ""), -1;
        }
        const char *v;
        if (options[k].kind == K_FLAG) {
            if (eq) return snprintf(err, cap, "--%s takes no value", options[k].name), -1;
            v = "1";
        } else if (eq) {
            v = eq + 1;
        } else {
            if (a + 1 >= argc) return snprintf(err, cap, "--%s needs a value (%s)", options[k].name, options[k].arg), -1;
            v = argv[++a];
        }
        if (set_option(c, &options[k], v, err, cap) != 0) return -1;
        given[k] = 1;
    }
    return 0;
}

static int option_index(const char *name) {
    for (int i = 0; i < NOPT; i++)
        if (strcmp(options[i].name, name) == 0) return i;
    return -1;
}

/* The option a misspelt name[0..len) was likely meant to be (suggest.h), or NULL. */
static const char *option_near(const char *name, size_t len) {
    suggest s = {0};
    for (int i = 0; i < NOPT; i++) suggest_try(&s, name, len, options[i].name);
    return suggest_result(&s);
}

/* The name of choice idx of option opt, as its table entry spells it. */
static const char *option_choice(const char *opt, int idx, char *buf, size_t cap) {
    return choice_name(options[option_index(opt)].choices, idx, buf, cap);
}

/* The model the options describe (the MoE fields zero for a dense GPT). */
static fsc_gpt_config model_config(const train_config *c) {
    fsc_gpt_config g = {.layers = c->layers, .dim = c->dim, .heads = c->heads, .seq = c->seq, .vocab = c->vocab};
    if (c->moe_experts) {
        g.moe_experts = c->moe_experts, g.moe_top_k = c->moe_top_k, g.moe_every = c->moe_every;
        g.moe_capacity = c->moe_capacity, g.moe_aux = c->moe_aux;
    }
    return g;
}

#define MODEL_LLAMA 1 /* --model llama */

/* The Llama the options describe (after resolve_model). */
static fsc_llama_config llama_config(const train_config *c) {
    fsc_llama_config l = {.layers = c->layers, .dim = c->dim, .heads = c->heads, .kv_heads = c->kv_heads,
                          .ffn = c->ffn, .seq = c->seq, .vocab = c->vocab, .rope_theta = c->rope_theta,
                          .norm_eps = c->norm_eps};
    if (c->moe_experts) { /* MoE decoder layers of GELU experts of width --ffn */
        l.moe_experts = c->moe_experts, l.moe_top_k = c->moe_top_k, l.moe_every = c->moe_every;
        l.moe_capacity = c->moe_capacity, l.moe_aux = c->moe_aux;
    }
    return l;
}

/* The model options together: their defaults (--kv-heads: --heads; --ffn: the family's rule), the options of
 * one family only, what the Llama does not run yet. */
static int resolve_model(train_config *c, const int *given, char *err, size_t cap) {
    if (!c->kv_heads) c->kv_heads = c->heads;
    if (!c->ffn) c->ffn = c->model == MODEL_LLAMA ? fsc_llama_default_ffn(c->dim) : 4 * c->dim;
    if (c->model != MODEL_LLAMA) {
        const char *only[] = {"kv-heads", "rope-theta", "norm-eps"};
        for (int i = 0; i < 3; i++)
            if (given[option_index(only[i])]) return snprintf(err, cap, "--%s applies to --model llama only", only[i]), -1;
        if (c->ffn != 4 * c->dim)
            return snprintf(err, cap, "--ffn %d: the gpt2 MLP is 4 x --dim = %d wide (other widths: --model llama)",
                            c->ffn, 4 * c->dim), -1;
        return 0;
    }
    fsc_llama_config l = llama_config(c);
    if (fsc_llama_config_validate(&l) != FSC_OK) return snprintf(err, cap, "model: %s", fsc_last_error()), -1;
    if (c->tp > 1) { /* the tensor-parallel layers split heads, kv heads, the MLP width and the vocabulary */
        const char *what[4] = {"--heads", "--kv-heads", "--ffn", "--vocab"};
        const int n[4] = {c->heads, c->kv_heads, c->ffn, c->vocab};
        for (int i = 0; i < 4; i++)
            if (n[i] % c->tp != 0)
                return snprintf(err, cap, "--tp %d: %s %d does not divide over the tensor group (tensor parallelism "
                                "splits it)", c->tp, what[i], n[i]), -1;
        if (c->sequence_parallel && c->seq % c->tp != 0)
            return snprintf(err, cap, "--sequence-parallel: --seq %d does not divide by --tp %d (each rank holds "
                            "seq / tp rows of every sequence)", c->seq, c->tp), -1;
    }
    return 0;
}

/* The mixture-of-experts options together. */
static int check_moe(const train_config *c, const int *given, char *err, size_t cap) {
    if (!c->moe_experts) {
        const char *only[] = {"moe-top-k", "moe-every", "moe-capacity", "moe-aux", "ep"};
        for (int i = 0; i < 5; i++)
            if (given[option_index(only[i])])
                return snprintf(err, cap, "--%s applies to MoE models only (give --moe-experts E)", only[i]), -1;
        return 0;
    }
    if (c->moe_top_k > c->moe_experts)
        return snprintf(err, cap, "--moe-top-k %d needs at least %d experts (--moe-experts %d)", c->moe_top_k,
                        c->moe_top_k, c->moe_experts), -1;
    if (c->moe_every > c->layers)
        return snprintf(err, cap, "--moe-every %d but the model has %d blocks (--layers): no block would be an MoE "
                        "block", c->moe_every, c->layers), -1;
    if (!(c->moe_capacity > 0))
        return snprintf(err, cap, "--moe-capacity must be positive (a capacity factor), not %g", (double)c->moe_capacity), -1;
    if (c->tp > 1) return snprintf(err, cap, "--moe-experts with --tp > 1 is not supported yet"), -1;
    if (c->moe_experts % c->ep != 0)
        return snprintf(err, cap, "--ep %d does not divide --moe-experts %d (each rank of an expert group holds E / G "
                        "experts)", c->ep, c->moe_experts), -1;
    if (c->dp % c->ep != 0)
        return snprintf(err, cap, "--ep %d does not divide the %d data-parallel ranks (the expert group is part of the "
                        "data group)", c->ep, c->dp), -1;
    return 0;
}

/* Checks that need several options together. */
static int check_config(const train_config *c, const int *given, char *err, size_t cap) {
    if (given[option_index("save-dtype")] && !c->save && !c->init_save)
        return snprintf(err, cap, "--save-dtype applies to --save and --init-save only"), -1;
    fsc_gpt_config g = model_config(c);
    if (check_moe(c, given, err, cap) != 0) return -1;
    if (fsc_gpt_config_validate(&g) != FSC_OK) return snprintf(err, cap, "model: %s", fsc_last_error()), -1;
    int order[3];
    if (fsc_layout_parse_order(c->order, order) != FSC_OK) return snprintf(err, cap, "--order: %s", fsc_last_error()), -1;
    if (c->sequence_parallel && c->tp < 2) return snprintf(err, cap, "--sequence-parallel needs --tp 2 or more"), -1;
    if (c->tp > 1 && c->model != MODEL_LLAMA) { /* the Llama's: resolve_model */
        if (fsc_tp_check_config(&g, c->tp) != FSC_OK) return snprintf(err, cap, "--tp: %s", fsc_last_error()), -1;
    }
    if (c->tp > 1 && c->batch % c->dp == 0 && (c->batch / c->dp) % c->accum == 0 && c->sequence_parallel &&
        ((long long)(c->batch / c->dp / c->accum) * c->seq) % c->tp != 0)
        return snprintf(err, cap, "--sequence-parallel: a micro-batch of %d x %d token rows does not split over --tp %d",
                        c->batch / c->dp / c->accum, c->seq, c->tp), -1;
    if (c->pp > 1 || c->tp > 1 ? c->batch % c->dp != 0 : c->batch % c->world != 0)
        return c->pp > 1 || c->tp > 1 ? snprintf(err, cap, "--batch %d does not split evenly over %d data-parallel ranks (--dp)",
                                    c->batch, c->dp)
                         : snprintf(err, cap, "--batch %d does not split evenly over --world %d", c->batch, c->world), -1;
    if ((c->batch / c->dp) % c->accum != 0)
        return snprintf(err, cap, "--accum %d does not divide the %d sequences per rank (--batch %d / %s %d)",
                        c->accum, c->batch / c->dp, c->batch, c->pp > 1 || c->tp > 1 ? "--dp" : "--world", c->dp), -1;
    if (c->parallel == FSC_PAR_NONE && c->dp > 1)
        return c->tp > 1 || c->pp > 1
                   ? snprintf(err, cap, "--parallel none has no data parallelism; with --dp %d choose ddp, fsdp, zero1 or "
                              "zero2", c->dp)
                   : snprintf(err, cap, "--parallel none runs on one rank; with --world %d choose ddp or fsdp", c->world), -1;
    if (c->parallel == PAR_PIPE && c->pp < 2)
        return snprintf(err, cap, "--parallel pipe needs --pp 2 or more pipeline stages"), -1;
    if (c->pp < 2) {
        const char *only[] = {"schedule", "balance", "checkpoint", "virtual-stages"};
        for (int i = 0; i < 4; i++)
            if (given[option_index(only[i])])
                return snprintf(err, cap, "--%s applies to pipelines only (--pp 2 or more)", only[i]), -1;
    } else {
        if (c->pp > c->layers)
            return snprintf(err, cap, "--pp %d pipeline stages but the model has %d blocks (--layers): every stage "
                            "needs at least one", c->pp, c->layers), -1;
        if (c->pp * c->virtual_stages > c->layers)
            return snprintf(err, cap, "--pp %d x --virtual-stages %d chunks but the model has %d blocks (--layers): every "
                            "chunk needs at least one", c->pp, c->virtual_stages, c->layers), -1;
        int bal[1024];
        if (c->balance && fsc_balance_parse(c->balance, &(fsc_model){ .n_layers = g.layers + 2 }, c->pp * c->virtual_stages, bal) != FSC_OK)
            return snprintf(err, cap, "--balance: %s", fsc_last_error()), -1;
    }
    if (c->parallel != FSC_PAR_FSDP) {
        if (given[option_index("shard")]) return snprintf(err, cap, "--shard applies to --parallel fsdp only"), -1;
        if (given[option_index("wrap")]) return snprintf(err, cap, "--wrap applies to --parallel fsdp only"), -1;
    }
    if (precision_dtype[c->precision] == FSC_F16 && given[option_index("nonfinite")])
        return snprintf(err, cap, "--nonfinite applies to fp32 and bf16: fp16 loss scaling always skips a step with "
                        "inf/NaN and backs off the scale (up to --max-skipped-steps in a row)"), -1;
    if (c->optimizer != FSC_OPT_SGD && given[option_index("momentum")])
        return snprintf(err, cap, "--momentum applies to --optimizer sgd only"), -1;
    if (c->lr_schedule == FSC_LR_CONSTANT && given[option_index("min-lr")])
        return snprintf(err, cap, "--min-lr applies to --lr-schedule cosine and linear"), -1;
    if (c->lr_schedule != FSC_LR_CONSTANT && c->steps <= c->warmup)
        return snprintf(err, cap, "--lr-schedule %s decays after the --warmup %d steps: give more --steps than that (%d)",
                        c->lr_schedule == FSC_LR_COSINE ? "cosine" : "linear", c->warmup, c->steps), -1;
    if (c->lr_schedule != FSC_LR_CONSTANT && c->min_lr > c->lr)
        return snprintf(err, cap, "--min-lr %g is above --lr %g", (double)c->min_lr, (double)c->lr), -1;
    if (!c->val_data && (given[option_index("val-every")] || given[option_index("val-batches")]))
        return snprintf(err, cap, "--%s needs --val-data", given[option_index("val-every")] ? "val-every" : "val-batches"), -1;
    if (c->save_every && !c->ckpt_dir) return snprintf(err, cap, "--save-every needs --ckpt-dir DIR"), -1;
    if (c->ckpt_dir && !c->save_every) return snprintf(err, cap, "--ckpt-dir needs --save-every K"), -1;
    if (given[option_index("ckpt-format")] && !c->ckpt_dir)
        return snprintf(err, cap, "--ckpt-format applies to --save-every/--ckpt-dir only"), -1;
    if (c->ckpt_overwrite && !c->ckpt_dir)
        return snprintf(err, cap, "--ckpt-overwrite applies to --save-every/--ckpt-dir only"), -1;
    if (c->keep_last && !c->ckpt_dir) return snprintf(err, cap, "--keep-last applies to --save-every/--ckpt-dir only"), -1;
    if (c->ckpt_overwrite && c->resume && strcmp(c->resume, c->ckpt_dir) == 0)
        return snprintf(err, cap, "--ckpt-overwrite starts a new run in --ckpt-dir, --resume continues the one there: "
                        "give one"), -1;
    if (c->resume && c->load) return snprintf(err, cap, "--resume and --load both give the starting weights: give one"), -1;
    if (c->check_ddp && c->save_every)
        return snprintf(err, cap, "--check-ddp runs twice and both runs would write the same checkpoints: drop "
                        "--save-every"), -1;
    return 0;
}

/* A run without --resume starts a new run: a --ckpt-dir holding checkpoints belongs to another one, and
 * the library refuses the first save there (unless --ckpt-overwrite). Say so before training. */
static int check_ckpt_dir(const train_config *c, char *err, size_t cap) {
    char path[4096], who[160] = "";
    int64_t step;
    if (!c->ckpt_dir || c->resume || c->ckpt_overwrite) return 0;
    if (fsc_ckpt_latest(c->ckpt_dir, path, sizeof path, &step) != FSC_OK)
        return snprintf(err, cap, "--ckpt-dir: %s", fsc_last_error()), -1;
    if (step < 0) return 0;
    fsc_ckpt_meta *m = NULL;
    if (fsc_ckpt_meta_read(path, &m) == FSC_OK)
        snprintf(who, sizeof who, ": run %.8s, seed %llu, lr %g", m->run_id, (unsigned long long)m->seed,
                 (double)m->optim.lr);
    fsc_ckpt_meta_free(m);
    return snprintf(err, cap, "--ckpt-dir %s holds the checkpoints of another run (newest step %lld%s): continue it "
                    "with --resume %s, choose another --ckpt-dir, or give --ckpt-overwrite to start over (they are "
                    "removed at the first save)", c->ckpt_dir, (long long)step, who, c->ckpt_dir), -1;
}

/* The default corpus from any directory: without --data, when examples/data/coriolanus.txt is not found from
 * the working directory, it is looked up beside the program (the link /proc/self/exe names): in
 * ../share/fsc/ (an installed bin/fsc-train), ../examples/data/ and ../../examples/data/ (build/ and
 * build/<variant>/ of the source tree). buf (cap bytes) holds the path found. 0, or -1 with err saying what
 * to pass. */
static int find_default_data(train_config *c, const int *given, char *buf, size_t cap, char *err, size_t ecap) {
    if (given[option_index("data")] || access(c->data, F_OK) == 0) return 0;
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    char *slash = n > 0 ? (exe[n] = '\0', strrchr(exe, '/')) : NULL;
    if (slash) {
        *slash = '\0';
        const char *base = strrchr(c->data, '/') ? strrchr(c->data, '/') + 1 : c->data;
        const char *where[] = {"../share/fsc", "../examples/data", "../../examples/data"};
        for (int i = 0; i < 3; i++) {
            snprintf(buf, cap, "%s/%s/%s", exe, where[i], base);
            if (access(buf, R_OK) == 0) {
                c->data = buf;
                return 0;
            }
        }
    }
    return snprintf(err, ecap, "--data not given, and the default corpus %.80s is neither in this directory nor beside "
                    "the program (%.200s/../share/fsc, ../examples/data or ../../examples/data): give --data PATH (a "
                    "text file, llm.c token shards or a uint16 token file)", c->data, slash ? exe : "?"), -1;
}

/* The data (fsc/data.h): the files of --data, read as batches need them, not copied, so their size costs no
 * memory of their own; regular files (a device such as /dev/zero, a FIFO or a directory is refused before
 * anything is read) of --data-format, holding at least --seq + 1 tokens, every one below --vocab (checked here
 * in one pass), that must not change while training (a step that meets a changed file fails, naming it). */
static int load_data(const train_config *c, fsc_data **out, size_t *n, char *err, size_t cap) {
    fsc_data *d = NULL;
    fsc_status s = fsc_data_open(&d, c->data, (fsc_data_format)c->data_format, c->vocab);
    if (s == FSC_OK && fsc_data_tokens(d) <= (uint64_t)c->seq) {
        uint64_t nt = fsc_data_tokens(d);
        snprintf(err, cap, "--data %s: %s%llu tokens, but --seq %d needs at least %d", c->data,
                 nt ? "" : "the file is empty: ", (unsigned long long)nt, c->seq, c->seq + 1);
        fsc_data_free(d);
        return -1;
    }
    if (s == FSC_OK) s = fsc_data_check(d);
    if (s != FSC_OK) {
        snprintf(err, cap, "--data %s%s", fsc_last_error(),
                 strstr(fsc_last_error(), "vocabulary size") ? " (--vocab; is --data-format right?)" : "");
        fsc_data_free(d);
        return -1;
    }
    *out = d;
    *n = (size_t)fsc_data_tokens(d);
    return 0;
}

/* --json's per-step arrays hold at most the last RESULT_STEPS steps (with first_step, the step their first entry
 * is), so a run's memory does not grow with --steps; the totals cover every step, --log every step's line. */
enum { RESULT_STEPS = 100000 };

/* What the ranks share: inputs (read-only) and results (each rank writes only its own slots). */
typedef struct {
    const train_config *cfg;
    const train_config *asked; /* the options as given: --ckpt-dir/config.json */
    const fsc_data *data;
    size_t ntok;
    const fsc_data *val;  /* --val-data, NULL without */
    int first;            /* the step (from 0) of the per-step arrays' first entry: the last RESULT_STEPS are kept */
    double *lr;           /* (steps - first) the learning rate of each step, rank 0 */
    double *val_loss;     /* (steps - first) validation loss after each step, NAN where none was computed, rank 0 */
    double *losses;      /* (steps - first) rank 0; NAN for a step not run here */
    double *step_ms;     /* (steps - first) rank 0 */
    int timed;           /* rank 0's totals over every step run: steps, the first's time, the others' sum */
    double first_ms, sum_ms;
    double moe_dropped, moe_assigned; /* MoE: drops and assignments of the steps with a finite loss */
    uint64_t loss_bits;  /* FNV-1a of every loss's bits in step order (--check-ddp compares runs of any length) */
    size_t (*peak)[FSC_TAG_COUNT + 1]; /* (world) per tag, then the total */
    size_t (*hpeak)[FSC_TAG_COUNT + 1]; /* (world) the same of the host ledger (--offload; zeros without) */
    fsc_comm_stats comm; /* rank 0's communication (all the engine's groups), training steps only */
    size_t nparams;
    float *params;       /* (nparams) final full parameters from rank 0, when asked for (--check-ddp) */
    fsc_pipe_stats *pstats; /* (world) pipeline measurements, with --pp > 1 */
    fsc_comm_stats groups[FSC_GROUP_COUNT]; /* rank 0's traffic by kind of group */
    int ngroups[FSC_GROUP_COUNT];           /* communicators of each kind (0: the run has none) */
    fsc_layout *lay;        /* (world) every rank's place in dp x tp x pp */
    double *aux;            /* (steps - first) MoE: rank 0's fsc_step_info.aux_loss */
    int64_t *assigned, *dropped; /* (steps - first) MoE: token-to-expert assignments and drops over the global batch */
    int procs;              /* one rank per process (a launcher): the per-rank slots are gathered at the end */
    FILE *log;              /* --log, rank 0's process only (NULL: none) */
    double tflops;          /* rank 0: one rank's peak for MFU (--peak-tflops or measured; 0: unknown) */
    double trace_origin;    /* --trace: the time every rank's timestamps count from (fsc_trace_now_us) */
} run_state;

/* --ckpt-dir: this run's alone while it lives (fsc_ckpt_lock, docs/checkpoints.md), taken before anything is
 * written there; a file system without locks is said on stderr and the run goes on. Collective. */
static fsc_status lock_ckpt_dir(fsc_rank *r, fsc_engine *e, const char *dir, fsc_ckpt_dir_lock **lock) {
    fsc_status s = fsc_ckpt_lock(e, dir, lock);
    if (s == FSC_ERR_UNSUPPORTED && r->rank == 0)
        fprintf(stderr, "fsc-train: warning: --ckpt-dir %s: %s\n", dir, fsc_last_error());
    return s == FSC_ERR_UNSUPPORTED ? FSC_OK : s == FSC_OK ? s : fsc_error_prefix(s, "--ckpt-dir");
}

static cJSON *config_object(const train_config *c);

/* --ckpt-dir/config.json, the options as asked (loadable with --config; durable as checkpoints are): written by
 * rank 0 once the run holds the directory and has resumed, so that a refused run leaves the record as it was.
 * Collective. */
static fsc_status write_run_config(fsc_rank *r, const run_state *st) {
    fsc_status s = FSC_OK;
    if (r->rank == 0) {
        cJSON *o = config_object(st->asked);
        char *text = o ? cJSON_Print(o) : NULL;
        cJSON_Delete(o);
        s = text ? fsc_ckpt_write_file(st->cfg->ckpt_dir, "config.json", text, strlen(text))
                 : fsc_error(FSC_ERR_NOMEM, "out of memory");
        free(text);
        if (s != FSC_OK) fsc_error_prefix(s, "--ckpt-dir: config.json");
    }
    return fsc_comm_agree(r->comm, r->dev, s);
}

/* The result buffers of a run, zeroed (losses and validation losses NAN): 0, or -1 when out of memory
 * (results_free frees what was made). The per-step ones hold the last RESULT_STEPS steps. */
static int results_alloc(run_state *st, int steps, int world) {
    st->first = steps > RESULT_STEPS ? steps - RESULT_STEPS : 0;
    st->timed = 0, st->first_ms = st->sum_ms = st->moe_dropped = st->moe_assigned = 0;
    st->loss_bits = 14695981039346656037ull;
    size_t ns = (size_t)(steps - st->first) + 1, nw = (size_t)world;
    st->losses = calloc(ns, sizeof *st->losses);
    st->step_ms = calloc(ns, sizeof *st->step_ms);
    st->aux = calloc(ns, sizeof *st->aux);
    st->assigned = calloc(ns, sizeof *st->assigned);
    st->dropped = calloc(ns, sizeof *st->dropped);
    st->peak = calloc(nw, sizeof *st->peak);
    st->hpeak = calloc(nw, sizeof *st->hpeak);
    st->lay = calloc(nw, sizeof *st->lay);
    st->lr = calloc(ns, sizeof *st->lr);
    st->val_loss = malloc(ns * sizeof *st->val_loss);
    for (size_t i = 0; st->val_loss && i < ns; i++) st->val_loss[i] = NAN;
    for (size_t i = 0; st->losses && i < ns; i++) st->losses[i] = NAN; /* not run (a resumed run's first steps) */
    if (!st->lr || !st->val_loss) return -1;
    return st->losses && st->step_ms && st->aux && st->assigned && st->dropped && st->peak && st->hpeak && st->lay ? 0 : -1;
}

static void results_free(run_state *st) {
    free(st->losses);
    free(st->step_ms);
    free(st->aux);
    free(st->assigned);
    free(st->dropped);
    free(st->peak);
    free(st->hpeak);
    free(st->lay);
    free(st->lr);
    free(st->val_loss);
    free(st->params);
    free(st->pstats);
}

/* Rank 0's results of step (from 0): the totals of every step, and the values of one in the window. */
static void record_step(run_state *st, int step, const fsc_step_info *info, double ms, double lr, double val_loss) {
    if (st->timed++ == 0) st->first_ms = ms;
    else st->sum_ms += ms;
    if (isfinite(info->loss)) st->moe_dropped += (double)info->moe_dropped, st->moe_assigned += (double)info->moe_assigned;
    uint64_t b;
    memcpy(&b, &info->loss, sizeof b);
    for (int i = 0; i < 8; i++) st->loss_bits = (st->loss_bits ^ (b >> 8 * i & 0xff)) * 1099511628211ull;
    if (step < st->first) return;
    size_t k = (size_t)(step - st->first);
    st->losses[k] = info->loss, st->step_ms[k] = ms, st->lr[k] = lr, st->val_loss[k] = val_loss;
    st->aux[k] = info->aux_loss, st->assigned[k] = info->moe_assigned, st->dropped[k] = info->moe_dropped;
}

/* --check-ddp: whether two runs had the same loss at every step, bit for bit. */
static int same_losses(const run_state *a, const run_state *b) {
    size_t n = (size_t)(a->cfg->steps - a->first);
    return a->loss_bits == b->loss_bits && a->first == b->first && memcmp(a->losses, b->losses, n * sizeof(double)) == 0;
}

/* The trace's clock (fsc_trace_now_us), so --log times and --trace spans read on one clock. */
static double now_ms(void) { return 1e-3 * fsc_trace_now_us(); }

/* peak (FSC_TAG_COUNT + 1): dev's peak bytes by tag, then the peak of their sum (train_log.h's records). */
static void read_peaks(const fsc_device *dev, size_t *peak) {
    for (int t = 0; t < FSC_TAG_COUNT; t++) peak[t] = fsc_device_peak_bytes(dev, (fsc_tag)t);
    peak[FSC_TAG_COUNT] = fsc_device_peak_total(dev);
}

/* The sequences of data-parallel index d for step s, per the data-order contract (fsc_data_batch; every
 * stage and tensor rank of that index sees the same sequences). */
static fsc_status fill_batch(const run_state *st, int d, int s, int32_t *tok, int32_t *tgt) {
    const train_config *c = st->cfg;
    int bl = c->batch / c->dp;
    return fsc_data_batch(st->data, s, c->batch, c->seq, d * bl, bl, tok, tgt);
}

/* One rank per process: every rank's slots of the per-rank results (peak memory, layout, pipeline
 * measurements) to every rank, so rank 0 reports them as a single process does. Agrees on s first, so no rank
 * waits in a gather for one that failed. */
static fsc_status share_per_rank(fsc_rank *r, run_state *st, fsc_status s) {
    FSC_TRY(fsc_comm_agree(r->comm, r->dev, s));
    struct { void *base; size_t bytes; } slot[] = {
        {st->peak, sizeof *st->peak}, {st->hpeak, sizeof *st->hpeak}, {st->lay, sizeof *st->lay},
        {st->pstats, sizeof *st->pstats}};
    for (size_t i = 0; i < sizeof slot / sizeof slot[0]; i++) {
        if (!slot[i].base) continue;
        size_t b = slot[i].bytes, mine = (size_t)r->rank * b;
        uint8_t *d = NULL, *host = slot[i].base;
        FSC_TRY(fsc_device_alloc(r->dev, FSC_TAG_COMM, b * (size_t)r->world, (void **)&d));
        s = fsc_device_upload(r->dev, d + mine, host + mine, b);
        if (s == FSC_OK) s = fsc_comm_all_gather(r->comm, d + mine, d, b, FSC_U8);
        if (s == FSC_OK) s = fsc_device_download(r->dev, host, d, b * (size_t)r->world);
        fsc_device_release(r->dev, d);
        FSC_TRY(s);
    }
    return FSC_OK;
}

/* --val-data: the files as --data's (fsc/data.h, --data-format), at least --seq + 1 tokens, all below --vocab. */
static int load_val_data(const train_config *c, fsc_data **out, char *err, size_t cap) {
    fsc_status s = fsc_data_open(out, c->val_data, (fsc_data_format)c->data_format, c->vocab);
    if (s == FSC_OK && fsc_data_tokens(*out) <= (uint64_t)c->seq)
        s = fsc_error(FSC_ERR_INVALID, "%llu tokens, but --seq %d needs at least %d",
                      (unsigned long long)fsc_data_tokens(*out), c->seq, c->seq + 1);
    if (s == FSC_OK) s = fsc_data_check(*out);
    if (s == FSC_OK) return 0;
    snprintf(err, cap, "--val-data %s: %s", c->val_data, fsc_last_error());
    fsc_data_free(*out);
    *out = NULL;
    return -1;
}

/* Whether the run validates after step (from 0): every --val-every steps and after the last. */
static int val_due(const train_config *c, int step) {
    return (c->val_every > 0 && (step + 1) % c->val_every == 0) || step + 1 == c->steps;
}

/* The validation loss (collective): the mean of fsc_engine_eval over --val-batches batches of --batch sequences,
 * batch j being the sequences of step j of --val-data by the data order (this rank's part: those of data-parallel
 * index d), the same batches every time. tok and tgt hold this rank's part of a batch. */
static fsc_status validate(const run_state *st, fsc_engine *e, int d, int32_t *tok, int32_t *tgt, double *loss) {
    const train_config *c = st->cfg;
    const int bl = c->batch / c->dp;
    double sum = 0;
    for (int j = 0; j < c->val_batches; j++) {
        double l = 0;
        FSC_TRY(fsc_data_batch(st->val, j, c->batch, c->seq, d * bl, bl, tok, tgt));
        FSC_TRY(fsc_engine_eval(e, tok, tgt, bl, c->batch, &l));
        sum += l;
    }
    *loss = sum / c->val_batches;
    return FSC_OK;
}

/* --json: the learning rate of every step and the validation losses (null for steps not run here or not
 * validated after). */
static void add_schedule_json(cJSON *root, const run_state *st) {
    const train_config *c = st->cfg;
    cJSON *lr = cJSON_AddArrayToObject(root, "lr"), *val = cJSON_AddArrayToObject(root, "val_loss");
    char buf[64];
    for (int s = 0; s < c->steps - st->first; s++) {
        snprintf(buf, sizeof buf, "%.9g", st->lr[s]);
        cJSON_AddItemToArray(lr, isfinite(st->losses[s]) ? cJSON_CreateRaw(buf) : cJSON_CreateNull());
        snprintf(buf, sizeof buf, "%.17g", st->val_loss[s]);
        cJSON_AddItemToArray(val, isfinite(st->val_loss[s]) ? cJSON_CreateRaw(buf) : cJSON_CreateNull());
    }
}

static fsc_status train_fn(fsc_rank *r, void *arg) {
    run_state *st = arg;
    const train_config *c = st->cfg;
    fsc_gpt_config gc = model_config(c);
    /* the library's defaults, then what the options set (an option the table lacks keeps its default) */
    fsc_parallel_opts po = fsc_parallel_opts_default();
    po.kind = strategy(c);
    po.shard = (fsc_shard_strategy)c->shard;
    po.wrap = (fsc_wrap_policy)c->wrap;
    po.wrap_min_params = c->wrap_min_params;
    po.param_dtype = precision_dtype[c->precision];
    po.reduce_dtype = precision_dtype[c->precision];
    po.accum = c->accum;
    po.reduce_exact = c->reduce == 2;
    po.unit = c->unit;
    po.prefetch = c->prefetch;
    po.offload = (fsc_offload_mode)c->offload;
    po.clip = c->clip;
    po.nonfinite = (fsc_nonfinite_policy)c->nonfinite;
    po.max_skipped_steps = c->max_skipped_steps;
    po.pp = c->pp;
    po.schedule = (fsc_pipe_schedule)c->schedule;
    po.virtual_stages = c->virtual_stages;
    po.pipe_checkpoint = pipe_ckpt_mode[c->pipe_ckpt];
    po.tp = c->tp;
    po.sequence_parallel = c->sequence_parallel;
    po.order = c->order;
    po.ep = c->ep;
    int balance[1024];
    if (c->balance) {
        /* both models have --layers blocks between the embedding and the head; parse reads only n_layers */
        FSC_TRY(fsc_balance_parse(c->balance, &(fsc_model){ .n_layers = gc.layers + 2 }, c->pp * c->virtual_stages, balance));
        po.balance = balance;
    }
    fsc_optim_config oc = fsc_optim_config_default(); /* AdamW's betas and eps; the rest from the options */
    oc.kind = (fsc_optim_kind)c->optimizer;
    oc.lr = c->lr;
    oc.weight_decay = c->weight_decay;
    oc.decay_all = c->decay_all;
    if (oc.kind == FSC_OPT_SGD) oc.momentum = c->momentum;
    /* the rate of each step (fsc/schedule.h), a function of the step: a resumed run takes the same rates */
    const fsc_lr_schedule sched = { .kind = (fsc_lr_kind)c->lr_schedule, .lr = c->lr, .min_lr = c->min_lr,
                                    .warmup = c->warmup, .total = c->steps };
    fsc_engine *e = NULL;
    fsc_model *lm = NULL; /* --model llama: the model the engine runs (the GPT's engine owns its own) */
    fsc_trace *tr = NULL; /* --trace: this rank's recorder, attached to the world before the engine splits groups */
    if (r->rank == 0) st->tflops = c->peak_tflops;
    if (r->rank == 0 && !(c->peak_tflops > 0) && fsc_device_measure_tflops(r->dev, 512, &st->tflops) != FSC_OK)
        st->tflops = 0; /* no MFU then */
    if (c->trace) {
        FSC_TRY(fsc_trace_create(&(fsc_trace_opts){.rank = r->rank, .max_events = (size_t)c->trace_events,
                                                   .origin_us = st->trace_origin}, &tr));
        fsc_comm_set_trace(r->comm, tr);
    }
    fsc_status cs = FSC_OK;
    if (c->model == MODEL_LLAMA && c->tp > 1) { /* the engine builds its tensor-parallel form on the group */
        fsc_llama_build_arg ba = {.cfg = llama_config(c), .sp = c->sequence_parallel};
        cs = fsc_engine_create_built(r, fsc_llama_build, &ba, &po, &oc, c->seed, &e);
    } else if (c->model == MODEL_LLAMA) {
        fsc_llama_config lc = llama_config(c);
        cs = fsc_llama_model_create(r->dev, &lc, &lm);
        if (cs == FSC_OK) cs = fsc_engine_create_model(r, lm, &po, &oc, c->seed, &e);
    } else {
        cs = fsc_engine_create(r, &gc, &po, &oc, c->seed, &e);
    }
    if (cs != FSC_OK) {
        fsc_model_free(lm);
        fsc_comm_set_trace(r->comm, NULL);
        fsc_trace_free(tr);
        return cs;
    }
    fsc_engine_set_trace(e, tr);
    const fsc_layout *lay = fsc_engine_layout(e);
    st->lay[r->rank] = *lay;
    if (r->rank == 0 && r->world > 1) {
        char line[192];
        fsc_layout_describe(lay, line, sizeof line);
        printf("layout: %s%s\n", line, c->sequence_parallel ? ", sequence parallel" : "");
        fflush(stdout);
    }
    int bl = c->batch / c->dp;
    size_t n = (size_t)bl * (size_t)c->seq;
    int32_t *tok = malloc(n * sizeof *tok), *tgt = malloc(n * sizeof *tgt);
    fsc_status s = tok && tgt ? FSC_OK : fsc_error(FSC_ERR_NOMEM, "train: out of host memory for the batch");
    fsc_ckpt_dir_lock *lock = NULL;
    if (s == FSC_OK && c->ckpt_dir) s = lock_ckpt_dir(r, e, c->ckpt_dir, &lock);
    if (s == FSC_OK && c->load) s = fsc_engine_load_weights(e, c->load);
    int start = 0; /* a resumed run continues at the checkpoint's step (the data order is a function of it) */
    if (s == FSC_OK && c->resume) {
        int64_t at = 0;
        int left = 0;
        char rep[1024];
        if (r->rank == 0 && fsc_ckpt_clean(c->resume, &left, rep, sizeof rep) == FSC_OK && left) /* resume skips them */
            fprintf(stderr, "fsc-train: warning: %d leftover%s of interrupted saves not removed: %s\n", left,
                    left == 1 ? "" : "s", rep);
        char from[4096], skipped[4096];
        s = fsc_ckpt_try_resume(e, c->resume, &at, from, sizeof from, skipped, sizeof skipped);
        if (s == FSC_OK && r->rank == 0 && skipped[0]) fprintf(stderr, "fsc-train: warning: %s\n", skipped);
        if (s == FSC_OK && at < 0) { /* nothing to resume: a first run (README's save-every/resume example) */
            at = 0;
            if (r->rank == 0) printf("no checkpoint in %s to resume from: starting a new run at step 0\n", c->resume);
        }
        start = at < c->steps ? (int)at : c->steps;
        if (s == FSC_OK && r->rank == 0 && from[0]) {
            printf("resumed from %s at step %lld\n", from, (long long)at);
            if (at >= c->steps)
                fprintf(stderr, "fsc-train: warning: the checkpoint is at step %lld, --steps is %d: no step left to train "
                                "(give a larger --steps to continue)\n", (long long)at, c->steps);
        }
    }
    if (s == FSC_OK && c->ckpt_dir) s = write_run_config(r, st);
    static const fsc_dtype save_dt[] = { FSC_F32, FSC_BF16, FSC_F16 }; /* --save-dtype */
    if (s == FSC_OK && c->init_save) s = fsc_engine_save_weights_dtype(e, c->init_save, save_dt[c->save_dtype]);
    fsc_engine_reset_comm_stats(e);
    double tokens = (double)c->batch * (double)c->seq;
    /* the report's measures (train_log.h): FLOPs of a step of the global batch, the peak of all ranks, the mean
     * step time for the ETA (leaving out the first step of this run, the warm-up, once there are others) */
    const double step_flops = fsc_model_flops(fsc_engine_model(e), c->batch);
    const double peak_flops = r->rank == 0 ? (double)r->world * st->tflops * 1e12 : 0, run_t0 = now_ms();
    size_t peak[FSC_TAG_COUNT + 1], hpeak[FSC_TAG_COUNT + 1];
    for (int step = start; step < c->steps && s == FSC_OK; step++) {
        if ((s = fill_batch(st, lay->data, step, tok, tgt)) != FSC_OK) break;
        double t0 = now_ms();
        fsc_step_info info = {0};
        s = fsc_engine_set_lr(e, fsc_lr_at(&sched, step));
        if (s != FSC_OK) break;
        s = c->model == MODEL_LLAMA ? fsc_engine_step_model(e, tok, tgt, bl, c->batch, &info)
                                    : fsc_engine_step(e, tok, tgt, bl, c->batch, &info);
        if (s != FSC_OK) fsc_error_prefix(s, "step %d/%d", step + 1, c->steps);
        double ms = now_ms() - t0, val_loss = NAN;
        if (s == FSC_OK && st->val && val_due(c, step)) s = validate(st, e, lay->data, tok, tgt, &val_loss);
        if (s == FSC_OK && r->rank == 0) {
            record_step(st, step, &info, ms, fsc_engine_lr(e), val_loss);
            char moe[128] = "";
            if (c->moe_experts) {
                snprintf(moe, sizeof moe, " | aux %.4f | dropped %lld/%lld", info.aux_loss, (long long)info.moe_dropped,
                         (long long)info.moe_assigned);
            }
            fsc_device *host = fsc_engine_host_device(e); /* offload: host memory has its own ledger */
            if (host) {
                read_peaks(host, hpeak);
                snprintf(moe + strlen(moe), sizeof moe - strlen(moe), " | host peak %.1f MiB",
                         (double)hpeak[FSC_TAG_COUNT] / 1048576.0);
            }
            char extra[192];
            snprintf(extra, sizeof extra, "%s%s", moe, info.skipped ? " | skipped (inf/nan loss or gradients)" : "");
            double mean = st->timed > 1 ? st->sum_ms / (st->timed - 1) : st->first_ms;
            read_peaks(r->dev, peak);
            step_record rec = {.step = step + 1, .steps = c->steps, .loss = info.loss, .lr = fsc_engine_lr(e),
                               .val_loss = val_loss, .ms = ms, .tokens = tokens, .flops = step_flops,
                               .peak_flops = peak_flops, .eta_s = mean * 1e-3 * (c->steps - step - 1),
                               .elapsed_s = (now_ms() - run_t0) * 1e-3, .peak = peak,
                               .host_peak = host ? hpeak : NULL, .extra = extra};
            print_progress(stdout, &rec);
            if (st->log && log_step(st->log, &rec) != 0)
                s = fsc_error(FSC_ERR_IO, "--log %s: cannot write: %s", c->log, strerror(errno));
        }
        if (s == FSC_OK && c->save_every && (step + 1) % c->save_every == 0) {
            fsc_ckpt_save_opts so = {.format = (fsc_ckpt_format)c->ckpt_format, .start_over = c->ckpt_overwrite};
            s = fsc_ckpt_save(e, c->ckpt_dir, step + 1, &so);
            if (s == FSC_OK && r->rank == 0) printf("checkpoint %s/step-%08d\n", c->ckpt_dir, step + 1);
            char left[2048];
            if (s == FSC_OK && r->rank == 0 && c->keep_last) { /* durable on every rank: older ones may go */
                if (fsc_ckpt_prune(c->ckpt_dir, step + 1, c->keep_last, NULL, left, sizeof left) != FSC_OK)
                    snprintf(left, sizeof left, "%s", fsc_last_error());
                if (left[0]) fprintf(stderr, "fsc-train: warning: --keep-last %d: %s\n", c->keep_last, left);
            }
        }
    }
    if (r->rank == 0) {
        fsc_engine_comm_stats(e, &st->comm);
        for (int g = 0; g < FSC_GROUP_COUNT; g++)
            st->ngroups[g] = fsc_engine_comm_stats_group(e, (fsc_group_kind)g, &st->groups[g]);
    }
    if (st->pstats) fsc_engine_pipe_stats(e, &st->pstats[r->rank]);
    if (s == FSC_OK && st->params) s = fsc_engine_full_params(e, r->rank == 0 ? st->params : NULL);
    if (s == FSC_OK && c->save) s = fsc_engine_save_weights_dtype(e, c->save, save_dt[c->save_dtype]);
    read_peaks(r->dev, st->peak[r->rank]);
    fsc_device *hdev = fsc_engine_host_device(e);
    if (hdev) read_peaks(hdev, st->hpeak[r->rank]);
    if (st->procs) s = share_per_rank(r, st, s);
    free(tok);
    free(tgt);
    if (tr) { /* DIR/rank-N.json; a full recorder said so on stderr (the file says how many events it dropped) */
        char path[4200];
        snprintf(path, sizeof path, "%s/rank-%d.json", c->trace, r->rank);
        fsc_status ts = fsc_trace_write(tr, path);
        if (ts == FSC_OK && fsc_trace_dropped(tr))
            fprintf(stderr, "fsc-train: warning: rank %d's trace filled up at %zu events and dropped %zu later ones "
                    "(raise --trace-events)\n", r->rank, fsc_trace_count(tr), fsc_trace_dropped(tr));
        if (s == FSC_OK) s = ts;
    }
    fsc_ckpt_unlock(lock);
    fsc_engine_free(e);
    fsc_model_free(lm);
    fsc_comm_set_trace(r->comm, NULL);
    fsc_trace_free(tr);
    return s;
}

/* The configuration as the option table names it. */
static cJSON *config_object(const train_config *c) {
    cJSON *o = cJSON_CreateObject();
    char buf[64];
    for (int i = 0; i < NOPT; i++) {
        const option *op = &options[i];
        const char *field = (const char *)c + op->off;
        switch (op->kind) {
        case K_INT: cJSON_AddNumberToObject(o, op->name, *(const int *)field); break;
        case K_U64: /* a number, exactly; above 2^53 (where a JSON reader's double rounds) a string of digits */
            snprintf(buf, sizeof buf, "%llu", (unsigned long long)*(const uint64_t *)field);
            if (*(const uint64_t *)field > (1ull << 53)) cJSON_AddStringToObject(o, op->name, buf);
            else cJSON_AddRawToObject(o, op->name, buf);
            break;
        case K_FLOAT: { /* the shortest decimal that reads back as the same float */
            float x = *(const float *)field;
            for (int prec = 6; prec <= 9; prec++) {
                snprintf(buf, sizeof buf, "%.*g", prec, (double)x);
                if (strtof(buf, NULL) == x) break;
            }
            cJSON_AddRawToObject(o, op->name, buf);
            break;
        }
        case K_STR:
            if (*(const char *const *)field) cJSON_AddStringToObject(o, op->name, *(const char *const *)field);
            else cJSON_AddNullToObject(o, op->name);
            break;
        case K_FLAG: cJSON_AddBoolToObject(o, op->name, *(const int *)field); break;
        case K_CHOICE: cJSON_AddStringToObject(o, op->name, choice_name(op->choices, *(const int *)field, buf, sizeof buf)); break;
        case K_WRAP:
            if (c->wrap == FSC_WRAP_MIN_PARAMS) snprintf(buf, sizeof buf, "min-params:%zu", c->wrap_min_params);
            else snprintf(buf, sizeof buf, "%s", c->wrap == FSC_WRAP_MODEL ? "model" : "block");
            cJSON_AddStringToObject(o, op->name, buf);
            break;
        }
    }
    return o;
}

/* --check-ddp: the same run with DDP, compared bit for bit */

/* The oracle's --ep: for DDP every expert on every rank (bit-identical when G is the whole data group); for zero
 * and fsdp, DDP with the same expert groups (the same sums of expert gradients). */
static int oracle_ep(const train_config *c) { return c->parallel == FSC_PAR_DDP ? 1 : c->ep; }
typedef struct {
    int done, losses_same, params_same;
    const run_state *ddp;
} ddp_check;

static double comm_per_step(const run_state *st) {
    double total = 0;
    for (int op = 0; op < FSC_OP_COUNT; op++) total += st->comm.bytes[op];
    return st->cfg->steps ? total / st->cfg->steps : 0;
}

/* Per stage (from its data-parallel ranks): layers, the ledger's peak activation bytes (largest), the
 * measured bubble (mean) beside the ideal (P-1)/(M+P-1). */
static void stage_summary(const run_state *st, int s, size_t *acts, double *bubble) {
    const train_config *c = st->cfg;
    *acts = 0;
    *bubble = 0;
    int n = 0;
    for (int r = 0; r < c->world; r++) {
        if (st->lay[r].pipe != s) continue;
        if (st->peak[r][FSC_TAG_ACTS] > *acts) *acts = st->peak[r][FSC_TAG_ACTS];
        *bubble += st->pstats[r].bubble;
        n++;
    }
    if (n) *bubble /= n;
}

/* The pipeline measurements of stage s's first rank. */
static const fsc_pipe_stats *stage_stats(const run_state *st, int s) {
    for (int r = 0; r < st->cfg->world; r++)
        if (st->lay[r].pipe == s) return &st->pstats[r];
    return &st->pstats[0];
}

static cJSON *pipeline_object(const run_state *st) {
    const train_config *c = st->cfg;
    char buf[32];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "pp", c->pp);
    cJSON_AddNumberToObject(o, "dp", c->dp);
    cJSON_AddNumberToObject(o, "micro_batches", c->accum);
    cJSON_AddStringToObject(o, "schedule", option_choice("schedule", c->schedule, buf, sizeof buf));
    cJSON_AddStringToObject(o, "checkpoint", option_choice("checkpoint", c->pipe_ckpt, buf, sizeof buf));
    cJSON_AddNumberToObject(o, "ideal_bubble", st->pstats[0].ideal_bubble);
    cJSON *a = cJSON_AddArrayToObject(o, "stages");
    for (int s = 0; s < c->pp; s++) {
        size_t acts;
        double bubble;
        stage_summary(st, s, &acts, &bubble);
        const fsc_pipe_stats *p = stage_stats(st, s);
        cJSON *x = cJSON_CreateObject();
        cJSON_AddNumberToObject(x, "stage", s);
        cJSON_AddNumberToObject(x, "first_layer", p->first_layer);
        cJSON_AddNumberToObject(x, "last_layer", p->last_layer);
        cJSON_AddNumberToObject(x, "peak_acts_bytes", (double)acts);
        cJSON_AddNumberToObject(x, "bubble", bubble);
        cJSON_AddNumberToObject(x, "max_in_flight", p->max_in_flight);
        cJSON_AddItemToArray(a, x);
    }
    return o;
}

static void print_pipeline(const run_state *st) {
    const train_config *c = st->cfg;
    for (int s = 0; s < c->pp; s++) {
        size_t acts;
        double bubble;
        stage_summary(st, s, &acts, &bubble);
        const fsc_pipe_stats *p = stage_stats(st, s);
        printf("stage %d: layers %d-%d | peak activations %.2f MiB (%d micro-batches in flight) | bubble %.3f "
               "(ideal %.3f)\n", s, p->first_layer, p->last_layer, (double)acts / 1048576.0, p->max_in_flight,
               bubble, p->ideal_bubble);
    }
}

/* MoE: per step the load-balancing loss and the drops (null for steps a resumed run did not take), and the
 * expert group's communication per step and operation (rank 0's all-to-alls, and with clipping the norm). */
static cJSON *moe_object(const run_state *st) {
    const train_config *c = st->cfg;
    fsc_gpt_config g = model_config(c);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "experts", c->moe_experts);
    cJSON_AddNumberToObject(o, "top_k", c->moe_top_k);
    cJSON_AddNumberToObject(o, "every", c->moe_every);
    cJSON_AddNumberToObject(o, "moe_blocks", c->model == MODEL_LLAMA ? fsc_llama_num_moe_layers(&(fsc_llama_config){
        .layers = c->layers, .moe_experts = c->moe_experts, .moe_every = c->moe_every }) : fsc_gpt_num_moe_blocks(&g));
    cJSON_AddNumberToObject(o, "ep", c->ep);
    cJSON *aux = cJSON_AddArrayToObject(o, "aux_losses");
    cJSON *dr = cJSON_AddArrayToObject(o, "dropped"), *as = cJSON_AddArrayToObject(o, "assigned");
    char buf[64];
    for (int s = 0; s < c->steps - st->first; s++) {
        int ran = isfinite(st->losses[s]) && st->step_ms[s] > 0;
        snprintf(buf, sizeof buf, "%.17g", st->aux[s]);
        cJSON_AddItemToArray(aux, ran ? cJSON_CreateRaw(buf) : cJSON_CreateNull());
        cJSON_AddItemToArray(dr, ran ? cJSON_CreateNumber((double)st->dropped[s]) : cJSON_CreateNull());
        cJSON_AddItemToArray(as, ran ? cJSON_CreateNumber((double)st->assigned[s]) : cJSON_CreateNull());
    }
    cJSON_AddNumberToObject(o, "drop_fraction", st->moe_assigned > 0 ? st->moe_dropped / st->moe_assigned : 0);
    cJSON *eg = cJSON_AddObjectToObject(o, "expert_comm_per_step");
    const fsc_comm_stats *x = &st->groups[FSC_GROUP_EXPERT];
    for (int op = 0; op < FSC_OP_COUNT; op++) {
        if (!x->calls[op]) continue;
        cJSON *p = cJSON_AddObjectToObject(eg, fsc_comm_op_name((fsc_comm_op)op));
        cJSON_AddNumberToObject(p, "calls", c->steps ? (double)x->calls[op] / c->steps : 0);
        cJSON_AddNumberToObject(p, "bytes", c->steps ? x->bytes[op] / c->steps : 0);
    }
    return o;
}

static void print_json(const run_state *st, const ddp_check *chk) {
    const train_config *c = st->cfg;
    cJSON *root = cJSON_CreateObject();
    cJSON *losses = cJSON_AddArrayToObject(root, "losses");
    add_schedule_json(root, st);
    char buf[64];
    for (int s = 0; s < c->steps - st->first; s++) {
        /* %.17g round-trips the double exactly; JSON has no NaN/inf, those become null */
        snprintf(buf, sizeof buf, "%.17g", st->losses[s]);
        cJSON_AddItemToArray(losses, isfinite(st->losses[s]) ? cJSON_CreateRaw(buf) : cJSON_CreateNull());
    }
    cJSON_AddNumberToObject(root, "first_step", st->first + 1); /* the step of the arrays' first entries */
    /* time the steps this run executed (a resumed run starts later), leaving out the first (warm-up)
     * unless it is the only one */
    int timed = st->timed > 1 ? st->timed - 1 : st->timed;
    double ms = st->timed > 1 ? st->sum_ms : st->first_ms;
    double tps = ms > 0 ? (double)timed * c->batch * c->seq / (ms * 1e-3) : 0;
    cJSON_AddNumberToObject(root, "tokens_per_s", tps);
    cJSON_AddNumberToObject(root, "ms_per_step", timed ? ms / timed : 0);
    cJSON_AddNumberToObject(root, "params", (double)st->nparams);
    cJSON_AddNumberToObject(root, "data_tokens", (double)st->ntok);
    cJSON_AddItemToObject(root, "peak_bytes", tag_object(st->peak[0]));
    cJSON *pr = cJSON_AddArrayToObject(root, "per_rank");
    for (int r = 0; r < c->world; r++) cJSON_AddItemToArray(pr, tag_object(st->peak[r]));
    if (c->offload) { /* the host ledger (docs/offload.md) */
        cJSON_AddItemToObject(root, "host_peak_bytes", tag_object(st->hpeak[0]));
        cJSON *hr = cJSON_AddArrayToObject(root, "host_per_rank");
        for (int r = 0; r < c->world; r++) cJSON_AddItemToArray(hr, tag_object(st->hpeak[r]));
    }
    cJSON *comm = cJSON_AddObjectToObject(root, "comm");
    double total = 0;
    for (int op = 0; op < FSC_OP_COUNT; op++) {
        cJSON *o = cJSON_AddObjectToObject(comm, fsc_comm_op_name((fsc_comm_op)op));
        cJSON_AddNumberToObject(o, "calls", (double)st->comm.calls[op]);
        cJSON_AddNumberToObject(o, "bytes", st->comm.bytes[op]);
        total += st->comm.bytes[op];
    }
    cJSON_AddNumberToObject(root, "comm_bytes_per_step", c->steps ? total / c->steps : 0);
    /* rank 0's bytes per step by kind of group (the kinds the run has; they sum to comm_bytes_per_step) */
    cJSON *g = cJSON_AddObjectToObject(root, "comm_bytes_per_step_by_group");
    for (int k = 0; k < FSC_GROUP_COUNT; k++) {
        if (!st->ngroups[k]) continue;
        double b = 0;
        for (int op = 0; op < FSC_OP_COUNT; op++) b += st->groups[k].bytes[op];
        cJSON_AddNumberToObject(g, fsc_group_kind_name((fsc_group_kind)k), c->steps ? b / c->steps : 0);
    }
    if (st->pstats) cJSON_AddItemToObject(root, "pipeline", pipeline_object(st));
    if (c->moe_experts) cJSON_AddItemToObject(root, "moe", moe_object(st));
    if (chk->done) {
        cJSON *k = cJSON_AddObjectToObject(root, "check_ddp");
        cJSON_AddBoolToObject(k, "bit_identical", chk->losses_same && chk->params_same);
        cJSON_AddBoolToObject(k, "losses_identical", chk->losses_same);
        cJSON_AddBoolToObject(k, "params_identical", chk->params_same);
        cJSON_AddItemToObject(k, "ddp_peak_bytes", tag_object(chk->ddp->peak[0]));
        cJSON_AddNumberToObject(k, "ddp_comm_bytes_per_step", comm_per_step(chk->ddp));
    }
    cJSON_AddItemToObject(root, "config", config_object(c));
    char *text = cJSON_PrintUnformatted(root);
    if (text) printf("%s\n", text);
    free(text);
    cJSON_Delete(root);
}

/* The --check-ddp table: per-rank peak memory by tag (the largest over ranks), communication per step. */
static void print_comparison(const run_state *ddp, const run_state *run, const ddp_check *chk) {
    const train_config *c = run->cfg;
    const char *name = c->parallel == PAR_PIPE ? "pipe" : fsc_parallel_kind_name((fsc_parallel_kind)c->parallel);
    printf("\n%-26s %14s %14s %8s\n", "per rank (max over ranks)", "ddp", name, "ratio");
    for (int t = 0; t <= FSC_TAG_COUNT; t++) {
        size_t a = 0, b = 0;
        for (int r = 0; r < c->world; r++) {
            if (ddp->peak[r][t] > a) a = ddp->peak[r][t];
            if (run->peak[r][t] > b) b = run->peak[r][t];
        }
        char label[40];
        snprintf(label, sizeof label, "peak %s", t < FSC_TAG_COUNT ? fsc_tag_name((fsc_tag)t) : "total");
        printf("%-26s %11.1f KiB %11.1f KiB %8.2f\n", label, a / 1024.0, b / 1024.0, a ? (double)b / a : 0.0);
    }
    double ca = comm_per_step(ddp), cb = comm_per_step(run);
    printf("%-26s %11.1f KiB %11.1f KiB %8.2f\n", "communication per step", ca / 1024.0, cb / 1024.0,
           ca ? cb / ca : 0.0);
    printf("bit-identical: %s (losses %s, final weights %s)\n", chk->losses_same && chk->params_same ? "yes" : "no",
           chk->losses_same ? "equal" : "differ", chk->params_same ? "equal" : "differ");
}

/* One rank per process: the run and, with --check-ddp, its DDP oracle on the first dp x tp ranks (the others
 * wait), in one launch (MPI starts once per process). */
typedef struct {
    run_state *st, *ddp;
} proc_job;

static fsc_status proc_fn(fsc_rank *r, void *arg) {
    proc_job *j = arg;
    cJSON *cfg = config_object(j->st->cfg); /* each process parsed its own options: all the same, or all refuse */
    fsc_status same = same_run(r, cfg, j->st->data, j->st->val);
    cJSON_Delete(cfg);
    FSC_TRY(same);
    FSC_TRY(train_fn(r, j->st));
    if (!j->ddp) return FSC_OK;
    const int w = j->ddp->cfg->world;
    if (r->rank == 0) {
        if (j->st->pstats) print_pipeline(j->st);
        printf("--check-ddp: the same training with DDP\n");
        fflush(stdout);
    }
    fsc_comm *sub = NULL;
    FSC_TRY(fsc_comm_split(r->comm, r->rank < w ? 0 : 1, r->rank, &sub));
    fsc_status s = FSC_OK;
    if (r->rank < w) {
        fsc_comm_set_name(sub, "world");
        fsc_rank in = *r;
        in.world = w;
        in.comm = sub;
        s = train_fn(&in, j->ddp);
    }
    fsc_comm_free(sub);
    return fsc_comm_agree(r->comm, r->dev, s);
}

/* The launcher's processes (mpirun, srun, torchrun): --world must be theirs or be left out. me is this
 * process's rank (0 without a launcher); *procs is 1 when the ranks are processes. */
static int check_launcher(train_config *c, int *given, int *me, int *procs, char *err, size_t cap) {
    fsc_launch_env env;
    *me = 0, *procs = 0;
    if (fsc_launch_env_parse(NULL, NULL, &env) != FSC_OK) return snprintf(err, cap, "%s", fsc_last_error()), -1;
    int gw = option_index("world");
    if (env.launcher != FSC_LAUNCHER_NONE && (c->sim_bandwidth > 0 || c->sim_latency > 0 || c->sim_copy > 0))
        return snprintf(err, cap, "--sim-bandwidth, --sim-latency and --sim-copy-bandwidth apply to simulated ranks; "
                        "processes started by a launcher use the real network and copies"), -1;
    if (env.launcher == FSC_LAUNCHER_NONE) {
        if (c->reduce == 1)
            return snprintf(err, cap, "--reduce native applies to processes started by a launcher (mpirun -n N); "
                            "simulated ranks always sum in rank order"), -1;
        return 0;
    }
    const char *l = fsc_launcher_name(env.launcher);
    if (given[gw] && c->world != env.world)
        return snprintf(err, cap, "--world %d, but the launcher (%s) started %d process%s: each process is one rank, "
                        "so start %d (mpirun -n %d ...) or leave --world out; for %d simulated ranks in one process "
                        "run without a launcher (or set FSC_LAUNCHER=none)", c->world, l, env.world,
                        env.world == 1 ? "" : "es", c->world, c->world, c->world), -1;
    c->world = env.world;
    given[gw] = 1;
    *me = env.rank;
    char dev[16];
    /* --device cuda: NCCL even for one process (one per GPU), as fsc_cluster_run_from_env_opts runs it */
    *procs = env.world > 1 || strcmp(option_choice("device", c->device, dev, sizeof dev), "cuda") == 0;
    if (!*procs && c->reduce == 1)
        return snprintf(err, cap, "--reduce native applies to several processes; this launcher started one"), -1;
    return 0;
}

/* --save or --init-save (opt), before training: the weights file can be written (path names a file, not a
 * directory, and the writer creates its temporary beside it: made and removed here), so that the weights are not
 * lost after the run; the temporaries a killed write of path left are removed first (fsc_st_remove_leftovers:
 * only those names, of processes that are gone). */
static int check_weights_path(const char *opt, const char *path, char *err, size_t cap) {
    struct stat sb;
    const char *slash = strrchr(path, '/');
    if (!*path || (slash && !slash[1])) return snprintf(err, cap, "--%s '%s': not a file name", opt, path), -1;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
        return snprintf(err, cap, "--%s %s: is a directory: give a file name (%s/model.safetensors)", opt, path, path), -1;
    int removed = 0;
    if (fsc_st_remove_leftovers(path, &removed) == FSC_OK && removed)
        fprintf(stderr, "fsc-train: --%s %s: removed %d temporary file%s of an interrupted write (%s.tmp.*)\n", opt,
                path, removed, removed == 1 ? "" : "s", path);
    fsc_st_writer *w = NULL;
    if (fsc_st_writer_open(path, &w) != FSC_OK)
        return snprintf(err, cap, "--%s %s (checked before training, so that the weights are not lost after it)",
                        opt, fsc_last_error()), -1;
    fsc_st_writer_abort(w);
    return 0;
}

/* What the run writes besides checkpoints, on rank 0's process: --save and --init-save checked (check_weights_path);
 * --log (from the start, or appended to with --resume) with the config as its first line; --trace's directory
 * (every process makes it). (--ckpt-dir's config.json: write_run_config, once the run is accepted.) */
static int open_outputs(const train_config *c, const train_config *asked, int me, FILE **log, char *err, size_t cap) {
    *log = NULL;
    if (c->trace && mkdir(c->trace, 0777) != 0 && errno != EEXIST)
        return snprintf(err, cap, "--trace %s: cannot create the directory: %s", c->trace, strerror(errno)), -1;
    if (me != 0) return 0;
    if (c->save && check_weights_path("save", c->save, err, cap) != 0) return -1;
    if (c->init_save && check_weights_path("init-save", c->init_save, err, cap) != 0) return -1;
    if (c->log) {
        if (!(*log = fopen(c->log, c->resume ? "a" : "w")))
            return snprintf(err, cap, "--log %s: cannot open: %s", c->log, strerror(errno)), -1;
        if (log_config(*log, config_object(asked)) != 0) {
            fclose(*log);
            *log = NULL;
            return snprintf(err, cap, "--log %s: cannot write: %s", c->log, strerror(errno)), -1;
        }
    }
    return 0;
}

/* --resume DIR: the options of DIR/config.json (the run that wrote the checkpoints; when DIR is one checkpoint, its
 * directory's) that decide the updates after a checkpoint, against this run's. A difference is allowed (lowering the
 * rate or extending a run is often meant) but said, once per option, on stderr: the resumed run is then not the
 * recorded run continued bit for bit (docs/checkpoints.md). No config.json (checkpoints from elsewhere): nothing to
 * compare. Returns the count. */
static int check_resume_config(const train_config *asked, const char *dir) {
    static const char *const keys[] = { "lr", "lr-schedule", "warmup", "min-lr", "steps", "optimizer", "momentum",
                                        "weight-decay", "decay-all", "clip", "batch", "seq", "data", "data-format" };
    char path[4200], why[512], *text = NULL;
    size_t n = 0;
    snprintf(path, sizeof path, "%s/metadata.json", dir);
    const int one = access(path, F_OK) == 0; /* one checkpoint: its directory's config.json */
    size_t dn = strlen(dir);
    while (dn > 1 && dir[dn - 1] == '/') dn--; /* runs/step-00000004/ names runs/step-00000004 */
    const char *slash = NULL;
    for (size_t i = 0; i < dn; i++) slash = dir[i] == '/' ? dir + i : slash;
    if (!one) snprintf(path, sizeof path, "%s/config.json", dir);
    else if (slash) snprintf(path, sizeof path, "%.*s/config.json", (int)(slash - dir), dir);
    else snprintf(path, sizeof path, "config.json");
    if (access(path, F_OK) != 0) return 0;
    if (read_config_file(path, path, &text, &n, why, sizeof why) != 0) {
        fprintf(stderr, "fsc-train: warning: --resume %s: %s: options not compared\n", dir, why);
        return 0;
    }
    cJSON *was = cJSON_ParseWithLength(text, n), *now = config_object(asked);
    int differ = 0;
    const cJSON *ws = cJSON_GetObjectItemCaseSensitive(was, "lr-schedule");
    const int decays = (cJSON_IsString(ws) && strcmp(ws->valuestring, "constant") != 0) ||
                       asked->lr_schedule != FSC_LR_CONSTANT; /* --steps sets where a decay ends */
    for (size_t i = 0; was && now && i < sizeof keys / sizeof *keys; i++) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(was, keys[i]), *b = cJSON_GetObjectItemCaseSensitive(now, keys[i]);
        if (!a || !b || (!strcmp(keys[i], "steps") && !decays)) continue;
        /* this run's numbers are raw text (config_object), the file's parsed: compared as the floats they set */
        char *sa = cJSON_PrintUnformatted(a), *sb = cJSON_PrintUnformatted(b), *ea = NULL, *eb = NULL;
        const int same = sa && sb && (!strcmp(sa, sb) || (strtof(sa, &ea) == strtof(sb, &eb) && ea != sa && !*ea &&
                                                          eb != sb && !*eb));
        if (same || !sa || !sb) {
            free(sa), free(sb);
            continue;
        }
        fprintf(stderr, "fsc-train: warning: --resume %s: --%s is %s, the run that wrote the checkpoints had %s "
                        "(%s): the steps from here differ from that run's\n", dir, keys[i], sb ? sb : "?",
                sa ? sa : "?", path);
        free(sa), free(sb);
        differ++;
    }
    if (!was && n > 0) fprintf(stderr, "fsc-train: warning: --resume %s: %s is not JSON: options not compared\n", dir, path);
    cJSON_Delete(was), cJSON_Delete(now);
    free(text);
    return differ;
}

static int train_main(int argc, char **argv, char **strs) {
    train_config c;
    int given[NOPT];
    char err[512];
    int rc = parse_args(argc, argv, &c, given, err, sizeof err);
    *strs = c.strs; /* main frees it */
    if (rc == 1) {
        usage(stdout);
        return 0;
    }
    if (rc == 2) {
        printf("fsc-train %s\n", fsc_version_string());
        return 0;
    }
    train_config asked = c; /* the options as given, before anything derives from them: the run's config.json */
    asked.config = NULL;    /* (its content is in) */
    int me = 0, procs = 0;
    if (rc == 0) rc = check_launcher(&c, given, &me, &procs, err, sizeof err);
    if (rc == 0) rc = resolve_layout(&c, given, err, sizeof err);
    if (rc == 0) rc = resolve_model(&c, given, err, sizeof err);
    if (rc == 0) rc = check_config(&c, given, err, sizeof err);
    if (rc == 0) rc = check_ckpt_dir(&c, err, sizeof err);
    char data_path[4200];
    if (rc == 0) rc = find_default_data(&c, given, data_path, sizeof data_path, err, sizeof err);
    if (rc != 0) {
        fprintf(stderr, "fsc-train: %s\n", err);
        return 2;
    }
    if (c.load && c.model == MODEL_LLAMA && tied_llama_head(c.load, err, sizeof err)) { /* as a failed load */
        fprintf(stderr, "fsc-train: --load %s\n", err);
        return 1;
    }
    if (c.check_ddp && c.pp == 1 && c.ep == 1 && (c.parallel == FSC_PAR_NONE || c.parallel == FSC_PAR_DDP)) {
        fprintf(stderr, "fsc-train: --check-ddp compares a sharded, pipelined or expert-parallel run with DDP: give "
                        "--parallel fsdp, zero1 or zero2, --pp 2 or more, or --ep 2 or more\n");
        return 2;
    }
    run_state st = {.cfg = &c, .asked = &asked, .procs = procs, .trace_origin = fsc_trace_now_us()};
    if (c.resume && me == 0) check_resume_config(&asked, c.resume); /* before config.json is rewritten */
    const char *fdir = flight_dir(c.flight, c.ckpt_dir, c.trace);
    if (open_outputs(&c, &asked, me, &st.log, err, sizeof err) != 0 || flight_start(fdir, err, sizeof err) != 0) {
        fprintf(stderr, "fsc-train: %s\n", err);
        return 2;
    }
    fsc_data *data = NULL;
    if (load_data(&c, &data, &st.ntok, err, sizeof err) != 0) {
        fprintf(stderr, "fsc-train: %s\n", err);
        return 2;
    }
    st.data = data;
    fsc_data *val = NULL;
    if (c.val_data && load_val_data(&c, &val, err, sizeof err) != 0) {
        fprintf(stderr, "fsc-train: %s\n", err);
        fsc_data_free(data);
        return 2;
    }
    st.val = val;
    fsc_gpt_config gc = model_config(&c);
    fsc_llama_config lc = llama_config(&c);
    st.nparams = c.model == MODEL_LLAMA ? fsc_llama_num_params(&lc) : fsc_gpt_num_params(&gc);
    if (results_alloc(&st, c.steps, c.world) != 0) {
        fprintf(stderr, "fsc-train: out of memory\n");
        return 1;
    }
    char pbuf[32], sbuf[32];
    char kv[64] = "", mbuf[16];
    if (c.model == MODEL_LLAMA) snprintf(kv, sizeof kv, " (%d kv), ffn %d", c.kv_heads, c.ffn);
    if (me != 0) freopen("/dev/null", "w", stdout); /* only rank 0 prints (errors still go to stderr) */
    printf("model: %s, %d layers, width %d, %d heads%s, context %d, vocab %d: %zu parameters | data: %s, %zu tokens (%s, %d file%s) | "
           "world %d, parallel %s, %s\n", option_choice("model", c.model, mbuf, sizeof mbuf),
           c.layers, c.dim, c.heads, kv, c.seq, c.vocab, st.nparams, c.data, st.ntok,
           fsc_data_format_name(fsc_data_format_of(data)), fsc_data_files(data), fsc_data_files(data) == 1 ? "" : "s", c.world,
           c.parallel == PAR_PIPE ? "pipe" : fsc_parallel_kind_name((fsc_parallel_kind)c.parallel),
           option_choice("precision", c.precision, pbuf, sizeof pbuf));
    if (c.moe_experts)
        printf("moe: %d of %d blocks (--moe-every %d) with %d experts, top-%d, capacity factor %g, aux %g; expert "
               "groups of %d ranks (%d experts per rank)\n", fsc_gpt_num_moe_blocks(&gc), c.layers, c.moe_every,
               c.moe_experts, c.moe_top_k, (double)c.moe_capacity, (double)c.moe_aux, c.ep, c.moe_experts / c.ep);
    if (procs)
        printf("processes: %d, one rank each, %s\n", c.world, c.reduce == 1 ? "--reduce native: the communicator's own "
               "sums (bits may differ from simulated ranks)" : c.reduce == 2 ? "--reduce exact: int64 sums (the bits "
               "of any world size)" : "--reduce ordered: sums in rank order (the simulated ranks' bits)");
    fflush(stdout);
    char dbuf[16];
    fsc_cluster_opts co = {.world = c.world, .device = option_choice("device", c.device, dbuf, sizeof dbuf),
                           .threads_per_rank = c.threads, .reduce_native = c.reduce == 1,
                           .sim_bandwidth_gbps = c.sim_bandwidth, .sim_latency_us = c.sim_latency,
                           .sim_copy_gbps = c.sim_copy};
    if (c.check_ddp && !(st.params = calloc(st.nparams, sizeof(float)))) {
        fprintf(stderr, "fsc-train: out of memory\n");
        return 1;
    }
    if (c.pp > 1) {
        st.pstats = calloc((size_t)c.world, sizeof *st.pstats);
        printf("pipeline: %d stages x %d data-parallel ranks, %d micro-batches, %s, checkpoint %s\n", c.pp, c.dp,
               c.accum, option_choice("schedule", c.schedule, sbuf, sizeof sbuf),
               option_choice("checkpoint", c.pipe_ckpt, pbuf, sizeof pbuf));
    }
    ddp_check chk = {0};
    train_config cd = c;
    cd.trace = NULL; /* the DDP oracle of --check-ddp is neither traced nor logged */
    run_state sd = st;
    sd.log = NULL;
    fsc_status s = FSC_OK;
    if (procs) { /* the DDP oracle runs inside the same launch */
        cd.parallel = FSC_PAR_DDP, cd.pp = 1, cd.world = c.dp * c.tp, cd.balance = NULL, cd.ep = oracle_ep(&c);
        cd.virtual_stages = 1;
        cd.offload = 0;
        if (c.check_ddp) sd.pstats = NULL, sd.cfg = &cd; /* (results_free frees sd's buffers when it has its own) */
        if (c.check_ddp && ((sd.params = calloc(st.nparams, sizeof(float))) == NULL ||
                            results_alloc(&sd, c.steps, c.world) != 0)) {
            fprintf(stderr, "fsc-train: out of memory\n");
            return 1;
        }
        proc_job job = {.st = &st, .ddp = c.check_ddp ? &sd : NULL};
        flight_job fj = {proc_fn, &job, fdir};
        s = fsc_cluster_run_from_env_opts(&co, flight_fn, &fj);
        if (s == FSC_OK && st.pstats && !c.check_ddp) print_pipeline(&st);
        if (s == FSC_OK && c.check_ddp) {
            chk.done = 1;
            chk.ddp = &sd;
            chk.losses_same = same_losses(&st, &sd);
            chk.params_same = memcmp(st.params, sd.params, st.nparams * sizeof(float)) == 0;
            print_comparison(&sd, &st, &chk);
        }
    } else {
        s = fsc_cluster_run(&co, flight_fn, &(flight_job){train_fn, &st, fdir});
    }
    if (!procs && s == FSC_OK && st.pstats) print_pipeline(&st);
    if (!procs && s == FSC_OK && c.check_ddp) {
        cd.parallel = FSC_PAR_DDP;
        cd.pp = 1; /* the oracle of a pipeline: DDP over its data-parallel ranks, the same micro-batches; */
        cd.world = c.dp * c.tp; /* with tensor parallelism on the same tensor groups */
        cd.balance = NULL;
        cd.virtual_stages = 1;
        cd.ep = oracle_ep(&c); /* the oracle of expert parallelism */
        cd.offload = 0; /* and of offload: everything on the device (ddp does not offload) */
        co.world = cd.world;
        sd.pstats = NULL;
        sd.cfg = &cd;
        sd.params = calloc(st.nparams, sizeof(float));
        if (results_alloc(&sd, c.steps, c.world) != 0 || !sd.params) {
            fprintf(stderr, "fsc-train: out of memory\n");
            return 1;
        }
        printf("--check-ddp: the same training with DDP\n");
        fflush(stdout);
        s = fsc_cluster_run(&co, flight_fn, &(flight_job){train_fn, &sd, fdir});
        if (s == FSC_OK) {
            chk.done = 1;
            chk.ddp = &sd;
            chk.losses_same = same_losses(&st, &sd);
            chk.params_same = memcmp(st.params, sd.params, st.nparams * sizeof(float)) == 0;
            print_comparison(&sd, &st, &chk);
        }
    }
    if (s != FSC_OK) {
        fprintf(stderr, "fsc-train: %s: %s\n", fsc_status_str(s), fsc_last_error());
        rc = 1;
    } else if (c.json) {
        print_json(&st, &chk);
    }
    if (chk.done && !(chk.losses_same && chk.params_same) && me == 0) rc = 3;
    flight_stop();
    if (sd.cfg == &cd) results_free(&sd);
    results_free(&st);
    fsc_data_free(data);
    fsc_data_free(val);
    if (st.log && fclose(st.log) != 0 && rc == 0) {
        fprintf(stderr, "fsc-train: --log %s: cannot write: %s\n", c.log, strerror(errno));
        rc = 1;
    }
    const int out_err = fflush(stdout) != 0 ? errno : ferror(stdout) ? EIO : 0;
    if (out_err && (rc == 0 || rc == 3)) { /* the report (--json, the progress) was lost: not a success */
        fprintf(stderr, "fsc-train: cannot write to standard output: %s\n", strerror(out_err));
        rc = 1;
    }
    return rc;
}

int main(int argc, char **argv) {
    char *strs = NULL;
    int rc = train_main(argc, argv, &strs);
    free(strs);
    return rc;
}
