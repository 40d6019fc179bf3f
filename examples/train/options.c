/* The trainer's options: one table is the parser, the defaults and the --help text. Defaults, then --config's
 * file (config.c), then the command line (it wins); given[i] says whether option i was set. An option is
 * added here only: a row of the table and a field of train_config (train.h).
 * Not here: what the options mean together (checks.c). */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "train.h"
#include "../suggest.h"

#define F(field) offsetof(train_config, field)
const option options[NOPT] = {
    {"model", "NAME", "gpt2", "model family: gpt2|llama (Hugging Face LlamaForCausalLM layout), or one the program registered (docs/models.md)", K_STR, F(model), 0, 0, NULL},
    {"layers", "N", "4", "transformer blocks", K_INT, F(layers), 1, 1024, NULL},
    {"dim", "C", "128", "model width (channels)", K_INT, F(dim), 1, 65536, NULL},
    {"heads", "H", "4", "attention heads (must divide --dim)", K_INT, F(heads), 1, 65536, NULL},
    {"seq", "T", "64", "context length (tokens per sequence)", K_INT, F(seq), 1, 1 << 20, NULL},
    {"vocab", "V", "256", "vocabulary size; every token of --data must be below it", K_INT, F(vocab), 1, 1 << 24, NULL},
    {"padded-vocab", "VP", NULL, "rows of the embedding table (and llama's lm_head), >= --vocab (llm.c's padding, 50257 to 50304): padding rows start at 0, are never in the softmax, never updated, never sampled; weights files hold --vocab rows; with --tp it divides by --tp (default, or 0: --vocab)", K_INT, F(padded_vocab), 0, 1 << 24, NULL},
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
    {"load", "PATH", NULL, "load weights before training: safetensors in the Hugging Face layout of --model (GPT2LMHeadModel's or LlamaForCausalLM's state dict too), F32, BF16 or F16; or a checkpoint (DIR/step-NNNNNNNN): its weights, not its optimizer state (a new run, any --optimizer)", K_STR, F(load), 0, 0, NULL},
    {"save-every", "K", "0", "write a training checkpoint every K steps into --ckpt-dir (0: never)", K_INT, F(save_every), 0, 1e9, NULL},
    {"ckpt-dir", "DIR", NULL, "where --save-every writes checkpoints: DIR/step-NNNNNNNN, atomically", K_STR, F(ckpt_dir), 0, 0, NULL},
    {"ckpt-format", "F", "sharded", "checkpoint format: sharded (a file per rank)|full (single-rank weights layout)", K_CHOICE, F(ckpt_format), 0, 0, "sharded|full"},
    {"ckpt-overwrite", NULL, NULL, "start over in a --ckpt-dir holding another run's checkpoints: they are removed at the first save (without it: refused)", K_FLAG, F(ckpt_overwrite), 0, 0, NULL},
    {"resume", "DIR", NULL, "continue from the newest complete checkpoint in DIR that loads (any --world and --parallel) up to --steps; a damaged one is skipped, with a message; none there (or no DIR): start a new run; DIR/step-NNNNNNNN: from that checkpoint", K_STR, F(resume), 0, 0, NULL},
    {"keep-last", "K", "0", "after each checkpoint is written, remove the older ones of --ckpt-dir beyond the newest K (0: keep all)", K_INT, F(keep_last), 0, 1e9, NULL},
    {"json", NULL, NULL, "end with one JSON line: losses, throughput, memory, communication, config", K_FLAG, F(json), 0, 0, NULL},
    {"plan", NULL, NULL, "before training, print each rank's predicted peak memory per tag and the predicted step time (fsc-plan's table: the engine's setup and two steps on the counting device, this machine's rates calibrated, --sim-bandwidth and --sim-latency; docs/planning.md); --json adds a \"predicted\" object beside the measured values", K_FLAG, F(plan), 0, 0, NULL},
    {"config", "FILE", NULL, "options from a JSON object {\"option\": value, ...} (names as here; the command line wins): a run's --ckpt-dir/train_config.json, or that directory", K_STR, F(config), 0, 0, NULL},
    {"log", "FILE", NULL, "write one JSON object per line to FILE (.jsonl): the config, then every step and validation, flushed as they come", K_STR, F(log), 0, 0, NULL},
    {"trace", "DIR", NULL, "write a Chrome/Perfetto trace per rank, DIR/rank-N.json (open in ui.perfetto.dev)", K_STR, F(trace), 0, 0, NULL},
    {"trace-events", "N", "262144", "events each rank's trace keeps at most (about 150 bytes each); later ones are counted, not kept", K_INT, F(trace_events), 1, 1 << 26, NULL},
    {"flight-recorder", "DIR", NULL, "on a failed collective or SIGUSR1, write each rank's last collectives to DIR/flight-rank-N.json (default: --ckpt-dir, else --trace); fsc-ckpt flight DIR names where the ranks diverge", K_STR, F(flight), 0, 0, NULL},
    {"peak-tflops", "X", "0", "peak TFLOP/s of one rank's device for MFU (0: its fp32 gemm rate, measured once per machine and cached in FSC_CACHE_DIR, default ~/.cache/fsc; raised to any faster step's rate, so MFU stays at most 100%; --json says which)", K_FLOAT, F(peak_tflops), 0, 1e9, NULL},
    {"world", "N", "1", "simulated ranks (threads); under a launcher (mpirun, srun, torchrun) one rank per process: omit it or give the launcher's number", K_INT, F(world), 1, 1024, NULL},
    {"reduce", "MODE", "ordered", "gradient sums: ordered (in rank order, the simulated ranks' bits)|native (processes started by a launcher: MPI's or NCCL's own all-reduce, faster, bits may differ)|exact (int64 fixed point: the same bits at any --world, --accum, --parallel and --ep with the same --unit; docs/determinism.md)", K_CHOICE, F(reduce), 0, 0, "ordered|native|exact"},
    {"unit", "U", "0", "--reduce exact: sequences per unit of work, each run as one micro-batch wherever it is placed (0: the per-rank micro-batch)", K_INT, F(unit), 0, 1 << 20, NULL},
    {"sim-bandwidth", "GBPS", "0", "simulated ranks: every link's bandwidth in GB/s; a collective then takes a ring algorithm's time (docs/overlap.md) (0: no cost)", K_FLOAT, F(sim_bandwidth), 0, 1e9, NULL},
    {"sim-latency", "US", "0", "simulated ranks: every link's latency in microseconds (0: none)", K_FLOAT, F(sim_latency), 0, 1e9, NULL},
    {"prefetch", "0|1", "1", "overlap communication with computation: fsdp gathers the next unit ahead and reduce-scatters during backward; ddp and zero reduce buckets during backward; pipelines send and receive stage boundaries asynchronously, receives posted a micro-batch ahead (the same bits either way)", K_INT, F(prefetch), 0, 1, NULL},
    {"sim-clock", "C", "wall", "simulated ranks: the time steps are measured in: wall (the machine's: the ranks share its cores)|virtual (each rank's own: its thread's CPU time, as if it had a core to itself, plus the modelled network and copies; steps, --log, --trace and pipeline bubbles read it; docs/overlap.md)", K_CHOICE, F(sim_clock), 0, 0, "wall|virtual"},
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
    {"threads", "N", "0", "BLAS threads per rank (0: 1 with several ranks or --reduce exact, else the library default)", K_INT, F(threads), 0, 1024, NULL},
    {"pp", "P", "1", "pipeline stages (world = dp x tp x pp, laid out by --order)", K_INT, F(pp), 1, 1024, NULL},
    {"dp", "D", "0", "data-parallel ranks (0: --world / (--tp x --pp); without --world, world = D x T x P)", K_INT, F(dp), 0, 1024, NULL},
    {"chunks", "M", "0", "pipeline micro-batches per step (another name for --accum)", K_INT, F(chunks), 0, 1 << 20, NULL},
    {"schedule", "S", "gpipe", "pipeline schedule: gpipe|1f1b|interleaved|zb-h1|zbv (zero bubble: split backward; zbv: two chunks per rank in a V, --balance then has 2 pp entries; docs/pipeline.md)", K_CHOICE, F(schedule), 0, 0, "gpipe|1f1b|interleaved|zb-h1|zbv"},
    {"virtual-stages", "V", "1", "with --schedule interleaved: chunks of blocks per pipeline rank (--balance then has pp x V entries)", K_INT, F(virtual_stages), 1, 1024, NULL},
    {"schedule-file", "FILE", NULL, "a pipeline schedule of your own: one line of actions per pipeline rank, such as 0F0 0F1 0B0 0W0 (stage, F, B (or PyTorch's I) or W, micro-batch; docs/pipeline.md), validated before the run (instead of --schedule and --virtual-stages)", K_STR, F(schedule_file), 0, 0, NULL},
    {"print-schedule", NULL, NULL, "print the run's pipeline schedule in --schedule-file's text (every rank's actions) and stop", K_FLAG, F(print_schedule), 0, 0, NULL},
    {"balance", "N,N,..", NULL, "pipeline blocks per stage (default: as even as possible)", K_STR, F(balance), 0, 0, NULL},
    {"tp", "T", "1", "tensor-parallel ranks (world = dp x tp x pp; --parallel runs over each data group)", K_INT, F(tp), 1, 1024, NULL},
    {"sequence-parallel", NULL, NULL, "with --tp: layer norms and residuals on sequence shards", K_FLAG, F(sequence_parallel), 0, 0, NULL},
    {"order", "O", "tp,dp,pp", "rank order of dp x tp x pp, fastest first (tp,dp,pp: Megatron's, tensor ranks adjacent)", K_STR, F(order), 0, 0, NULL},
    {"recompute", "0|1", "0", "activation checkpointing: each block keeps only its input and recomputes its activations in backward (less acts memory, one more forward of the blocks)", K_INT, F(recompute), 0, 1, NULL},
    {"checkpoint", "MODE", "except_last", "pipeline micro-batches that keep only their stage input: always|except_last|never", K_CHOICE, F(pipe_ckpt), 0, 0, "always|except_last|never"},
    {"moe-experts", "E", "0", "experts of each MoE block, GELU MLPs of the block's MLP width (llama: --ffn) (0: dense)", K_INT, F(moe_experts), 0, 4096, NULL},
    {"moe-top-k", "K", "1", "experts per token: 1 (Switch) or 2 (GShard)", K_INT, F(moe_top_k), 1, 2, NULL},
    {"moe-every", "N", "1", "blocks N-1, 2N-1, ... get an MoE MLP (1: every block)", K_INT, F(moe_every), 1, 1024, NULL},
    {"moe-capacity", "F", "1.25", "capacity factor: min(tokens, ceil(F x K x tokens / E)) slots per expert, rank and micro-batch", K_FLOAT, F(moe_capacity), 0, 1024, NULL},
    {"moe-aux", "X", "0.01", "coefficient of the load-balancing loss in the objective", K_FLOAT, F(moe_aux), 0, 1e6, NULL},
    {"ep", "G", "1", "expert-parallel ranks: G adjacent data-parallel ranks split the experts (ddp, zero1, zero2, fsdp)", K_INT, F(ep), 1, 1024, NULL},
};
#undef F
_Static_assert(sizeof options / sizeof options[0] == NOPT, "NOPT (train.h) counts the rows of options[]");

const fsc_dtype precision_dtype[3] = {FSC_F32, FSC_BF16, FSC_F16};
const fsc_pipe_checkpoint pipe_ckpt_mode[3] = {FSC_PIPE_CKPT_ALWAYS, FSC_PIPE_CKPT_EXCEPT_LAST, FSC_PIPE_CKPT_NEVER};
const fsc_pipe_schedule pipe_schedule_kind[5] = {FSC_SCHED_GPIPE, FSC_SCHED_1F1B, FSC_SCHED_INTERLEAVED, FSC_SCHED_ZB_H1,
                                                 FSC_SCHED_ZBV};

int config_chunks(const train_config *c) {
    if (c->sched) return c->sched->v;
    return pipe_schedule_kind[c->schedule] == FSC_SCHED_ZBV ? 2 : c->virtual_stages;
}

void usage(FILE *f) {
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

const char *choice_name(const char *choices, int idx, char *buf, size_t cap) {
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

/* Whether o's lower bound is itself refused, its range (lo, hi]: a capacity factor of 0 gives an expert no slot. */
static int lo_refused(const option *o) { return o->kind == K_FLOAT && strcmp(o->name, "moe-capacity") == 0; }

/* Parse value v for option o into c. On error writes a message naming the option. */
int set_option(train_config *c, const option *o, const char *v, char *err, size_t cap) {
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
            return snprintf(err, cap, "--%s: %s is too small for a float (the smallest is %g%s)", o->name, v,
                            (double)FLT_MIN, lo_refused(o) ? "" : "; give 0 for none"), -1;
        if ((errno == ERANGE && fabs(x) >= 1) || (isfinite(x) && !isfinite((float)x))) /* a float would hold inf */
            return snprintf(err, cap, "--%s: %s is too large for a float (the largest is %g)", o->name, v,
                            (double)FLT_MAX), -1;
        if (errno || !isfinite(x) || !isfinite((float)x))
            return snprintf(err, cap, "--%s: '%s' is not a finite number", o->name, v), -1;
        if (x < o->lo || (x == o->lo && lo_refused(o)) || x > o->hi) {
            const char *gt = lo_refused(o) ? ">" : ">=", *open = lo_refused(o) ? "(" : "[";
            if (isinf(o->hi))
                return snprintf(err, cap, "--%s: %s is out of range (must be %s %g)", o->name, v, gt, o->lo), -1;
            return snprintf(err, cap, "--%s: %s is out of range %s%g, %g]", o->name, v, open, o->lo, o->hi), -1;
        }
        *(float *)field = (float)x;
        return 0;
    }
    case K_STR:
        if (!*v) return snprintf(err, cap, "--%s: empty path", o->name), -1;
        *(const char **)field = v;
        return 0;
    case K_FLAG: /* "0": off again (--FLAG=false over a --config that set it) */
        *(int *)field = strcmp(v, "0") != 0;
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
int set_defaults(train_config *c, int *given, char *err, size_t cap) {
    memset(c, 0, sizeof *c);
    for (int i = 0; i < NOPT; i++) {
        given[i] = 0;
        if (options[i].def && set_option(c, &options[i], options[i].def, err, cap) != 0) return -1;
    }
    return 0;
}

/* Whether option o holds the same value in a and b. */
int same_value(const option *o, const train_config *a, const train_config *b) {
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
            v = "1";
            if (eq && (!strcmp(eq + 1, "false") || !strcmp(eq + 1, "0"))) v = "0";
            else if (eq && strcmp(eq + 1, "true") != 0 && strcmp(eq + 1, "1") != 0)
                return snprintf(err, cap, "--%s takes no value (or =false to turn off what a --config set)",
                                options[k].name), -1;
        } else if (eq) {
            v = eq + 1;
        } else {
            if (a + 1 >= argc) return snprintf(err, cap, "--%s needs a value (%s)", options[k].name, options[k].arg), -1;
            v = argv[++a];
        }
        if (set_option(c, &options[k], v, err, cap) != 0) return -1;
        given[k] = options[k].kind == K_FLAG && !strcmp(v, "0") ? -1 : 1; /* -1: a flag turned off (parse_args) */
    }
    return 0;
}

/* A flag turned off on the command line is not given, nor is it by the file (its value there is overruled). */
static void flags_off(int *given, int *cgiven) {
    for (int i = 0; i < NOPT; i++)
        if (given[i] < 0) given[i] = 0, cgiven[i] = 0;
}

/* Defaults, then --config's file, then argv (the command line wins). Returns 0 to run, 1 for --help, 2 for
 * --version, -1 on error (message in err). given[i] says whether option i was set on the command line or to
 * another value than its default by the config file. */
int parse_args(int argc, char **argv, train_config *c, int *given, char *err, size_t cap) {
    if (set_defaults(c, given, err, cap) != 0) return -1;
    int rc = parse_argv(argc, argv, c, given, err, cap); /* finds --config (and --help, and bad options) */
    int cgiven[NOPT] = {0};
    flags_off(given, cgiven);
    if (rc != 0 || !c->config) return rc;
    const char *path = c->config;
    if (set_defaults(c, given, err, cap) != 0 || apply_config_file(c, cgiven, path, err, cap) != 0) return -1;
    rc = parse_argv(argc, argv, c, given, err, cap);
    flags_off(given, cgiven);
    /* --accum and --chunks are one option under two names: the command line's replaces the file's */
    const int ia = option_index("accum"), ic = option_index("chunks");
    if (given[ia] && !given[ic]) c->chunks = 0, cgiven[ic] = 0;
    if (given[ic] && !given[ia]) { /* the file's --accum back to its default: the run records --chunks alone */
        if (set_option(c, &options[ia], options[ia].def, err, cap) != 0) return -1;
        cgiven[ia] = 0;
    }
    /* so are --schedule-file and --schedule with --virtual-stages (the schedule): the command line's replaces the
     * file's, which was refused as both ("drop --schedule") */
    const int isf = option_index("schedule-file"), is = option_index("schedule"), iv = option_index("virtual-stages");
    if (given[isf] && !given[is] && !given[iv]) {
        if (set_option(c, &options[is], options[is].def, err, cap) != 0 ||
            set_option(c, &options[iv], options[iv].def, err, cap) != 0)
            return -1;
        cgiven[is] = 0, cgiven[iv] = 0;
    }
    if ((given[is] || given[iv]) && !given[isf]) c->schedule_file = NULL, cgiven[isf] = 0;
    for (int i = 0; i < NOPT; i++) given[i] |= cgiven[i];
    return rc;
}

int option_index(const char *name) {
    for (int i = 0; i < NOPT; i++)
        if (strcmp(options[i].name, name) == 0) return i;
    return -1;
}

/* The option a misspelt name[0..len) was likely meant to be (suggest.h), or NULL. */
const char *option_near(const char *name, size_t len) {
    suggest s = {0};
    for (int i = 0; i < NOPT; i++) suggest_try(&s, name, len, options[i].name);
    return suggest_result(&s);
}

/* The name of choice idx of option opt, as its table entry spells it. */
const char *option_choice(const char *opt, int idx, char *buf, size_t cap) {
    return choice_name(options[option_index(opt)].choices, idx, buf, cap);
}
