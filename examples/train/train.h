/* The trainer's parts (fsc-train; its main is examples/train_gpt.c, which reads as parse, build, loop, save):
 *   options.c  the option table: the parser, the defaults and the --help text
 *   config.c   --config FILE.json over the defaults, and the options as one JSON object (--json, train_config.json)
 *   checks.c   the options together (layout, model, MoE, the launcher's processes) before anything runs
 *   models.c   the model families (gpt2, llama): one entry each, found by --model's name
 *   data.c     --data and --val-data: the files, each step's batch by the data order, the validation loss
 *   loop.c     what every rank runs: build the engine, train --steps steps, save
 *   ckpt.c     --ckpt-dir, --save-every, --resume, --keep-last and the weights files (--save, --init-save)
 *   report.c   the results the ranks share, the progress line and --log, the banner
 *   summary.c  the end of a run: --json, the pipeline's stages, the --check-ddp table
 *   peak.c     the peak FLOP rate MFU divides by: given, cached per machine, or measured; never below a step's
 *   plan.c     --plan: the planner's prediction of the run (fsc/plan.h) before the ranks start
 *   job.c      the engine's and optimizer's options of the run, the planner's job (fsc-plan links it too)
 * The state is in two structs: train_config (the options, filled by the parser) and run_state (what the ranks
 * share: inputs read-only, results each rank writes in its own slots). Public API only (fsc/fsc.h).
 * Not here: the formatting of one step's record (../train_log.h), the flight recorder (../train_flight.h), the
 * comparison of every process's options (../train_same.h). */
#ifndef FSC_TRAIN_H
#define FSC_TRAIN_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <cjson/cJSON.h>
#include "fsc/fsc.h"
#include "fsc/llama.h"

typedef struct {
    const char *model; /* --model: a family's name (models.c: gpt2, llama, or one the library has registered) */
    int layers, dim, heads, seq, vocab;
    int padded_vocab;             /* 0 gives --vocab */
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
    int plan;           /* --plan: the planner's prediction before training (plan.c) */
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
    int schedule;       /* index into pipe_schedule_kind */
    int virtual_stages; /* interleaved: chunks per pipeline rank */
    const char *schedule_file; /* --schedule-file: a pipeline schedule of one's own (the text of pipe_schedule.h) */
    int print_schedule; /* --print-schedule: print the run's pipeline schedule as that text, and stop */
    fsc_pipe_schedule_lists *sched; /* --schedule-file's lists, read by load_schedule_file (not an option) */
    int searched;       /* fsc-plan --search (not an option): the strategy, offload's partner and the schedule are the
                           search's to vary, so check_config leaves their combinations to each candidate */
    int pipe_ckpt;      /* index into pipe_ckpt_mode */
    int recompute;      /* --recompute: activation checkpointing of every block */
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
    int sim_clock;      /* simulated ranks: FSC_SIM_CLOCK_WALL or _VIRTUAL (cluster.h) */
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

enum { NOPT = 84 }; /* options in the table (options.c checks the count) */
extern const option options[NOPT];

extern const fsc_dtype precision_dtype[3];          /* --precision */
extern const fsc_pipe_checkpoint pipe_ckpt_mode[3]; /* --checkpoint */
extern const fsc_pipe_schedule pipe_schedule_kind[5]; /* --schedule */
/* --schedule-file: the file's lists into c->sched (after resolve_layout: they must have --pp ranks and the run's
 * micro-batches); free_schedule_file frees them. 0, or -1 with the message in err. */
int load_schedule_file(train_config *c, char *err, size_t cap);
void free_schedule_file(train_config *c);
/* --print-schedule: the run's pipeline schedule (its file's, or the built-in one's) as text on f (NULL: made and
 * checked only). */
int print_schedule_text(const train_config *c, FILE *f, char *err, size_t cap);
/* Chunks of blocks per pipeline rank: --virtual-stages, or 2 with --schedule zbv (a V). */
int config_chunks(const train_config *c);
#define PAR_PIPE 5    /* --parallel pipe: a pipeline with ddp in each stage */
#define CONFIG_MAX (1 << 20) /* bytes of a --config file, and of the train_config.json --resume compares */
/* --ckpt-dir's record of the run's options (config.json before: Hugging Face's name for a model's configuration,
 * which --save now writes beside the weights); --config and --resume read either */
#define RUN_CONFIG "train_config.json"

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
    int skipped_steps;   /* of which skipped (no update: inf/NaN loss or gradients) */
    double loss_scale;   /* the last step's loss scale (fp16's scaler; 1 without) */
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
    fsc_comm_stats off_comm, off_groups[FSC_GROUP_COUNT]; /* rank 0's validation and checkpoint traffic, taken out
                                                            * of comm and groups at the end (loop.c) */
    fsc_layout *lay;        /* (world) every rank's place in dp x tp x pp */
    double *aux;            /* (steps - first) MoE: rank 0's fsc_step_info.aux_loss */
    int64_t *assigned, *dropped; /* (steps - first) MoE: token-to-expert assignments and drops over the global batch */
    int procs;              /* one rank per process (a launcher): the per-rank slots are gathered at the end */
    FILE *log;              /* --log, rank 0's process only (NULL: none) */
    double tflops;          /* rank 0: one rank's peak for MFU (peak.c; 0: unknown) */
    char peak_source[16];   /* rank 0: where tflops came from: given, cached, measured, raised, unknown */
    double trace_origin;    /* --trace: the time every rank's timestamps count from (fsc_trace_now_us) */
    fsc_plan_rank *plan;    /* (world) --plan: the predicted peaks and work (plan.c), rank 0's process; NULL without */
    fsc_plan_rates plan_rates; /* --plan: the rates of the predicted step time (this machine's, calibrated) */
    fsc_plan_step plan_step;
} run_state;

/* --check-ddp: the run compared with its DDP oracle */
typedef struct {
    int done, losses_same, params_same;
    const run_state *ddp;
} ddp_check;

/* train_gpt.c: the trainer (fsc-train's main): parse, build, loop, report; the exit status. A program that registers
 * its own model family (fsc/family.h) calls it after registering, and --model NAME trains it. */
int fsc_train_main(int argc, char **argv);

/* options.c: the table, argv and --help. The parsers return 0, or -1 with a message naming the option in err. */
int parse_args(int argc, char **argv, train_config *c, int *given, char *err, size_t cap);
int set_option(train_config *c, const option *o, const char *v, char *err, size_t cap);
int set_defaults(train_config *c, int *given, char *err, size_t cap);
int same_value(const option *o, const train_config *a, const train_config *b);
void usage(FILE *f);
int option_index(const char *name);
const char *option_near(const char *name, size_t len);
const char *choice_name(const char *choices, int idx, char *buf, size_t cap);
const char *option_choice(const char *opt, int idx, char *buf, size_t cap);

/* config.c: JSON in and out */
int apply_config_text(train_config *c, int *given, const char *text, size_t len, const char *name, char *err,
                      size_t cap);
int apply_config_file(train_config *c, int *given, const char *path, char *err, size_t cap);
int read_text_file(const char *path, const char *name, size_t max, char **text, size_t *n, char *err, size_t cap);
cJSON *config_object(const train_config *c);
/* In o (config_object's), each path option's value made absolute against the working directory, but a default's:
 * what --ckpt-dir/train_config.json records, so that --config reruns the run from any directory */
void absolute_paths(cJSON *o);
/* x as the shortest decimal (%.6g to %.9g) that reads back as the same float (1e-05, not 9.99999975e-06) */
void float_text(float x, char *buf, size_t cap);

/* checks.c: the options together, in main's order (check_launcher, resolve_layout, resolve_model, check_config) */
int check_launcher(train_config *c, int *given, int *me, int *procs, char *err, size_t cap);
int resolve_layout(train_config *c, const int *given, char *err, size_t cap);
int resolve_model(train_config *c, const int *given, char *err, size_t cap);
int check_config(const train_config *c, const int *given, char *err, size_t cap);
fsc_parallel_kind strategy(const train_config *c);

/* models.c: the model families; nothing else asks which family a run trains. Every family's engine is the library's
 * fsc_engine_create_config of the options' configuration text (model_text); an entry holds what the trainer adds to
 * a built-in family (its options, banner, Hugging Face files, the planner's job). A family a program registered with
 * the library (family.h) and the trainer does not know gets the generic entry (its model built once to check it and
 * count its parameters; no MoE blocks or config.json; --plan plans its configuration text). */
typedef struct {
    const char *name;            /* --model NAME (NULL: the generic entry) */
    const char *const *options;  /* the options only this family takes (NULL-terminated; NULL: none) */
    int (*resolve)(train_config *c, char *err, size_t cap);         /* --ffn's default, the family's checks */
    int (*check_tp)(const train_config *c, char *err, size_t cap);  /* --tp > 1 (NULL: in resolve) */
    size_t (*num_params)(const train_config *c);
    int (*moe_blocks)(const train_config *c);                      /* blocks with an MoE MLP */
    void (*describe)(const train_config *c, char *buf, size_t cap); /* the banner's words after the heads */
    /* 1 with err when --load's file cannot be this family's weights (NULL: the loader says) */
    int (*check_load)(const char *path, char *err, size_t cap);
    /* Hugging Face's config.json of the model (GPT2Config, LlamaConfig), written beside --save's weights */
    cJSON *(*hf_config)(const train_config *c);
    /* --plan: the model of the planner's job (fsc/plan.h); NULL: the job's config is model_text's */
    void (*plan)(const train_config *c, fsc_plan_job *j);
} model_family;
/* 1 with err when --load's weights file records a model that does not describe it (a record not JSON, refused by its
 * family, or of other tensors than the file's); every family's check, after its own check_load */
int check_load_record(const char *path, char *err, size_t cap);
const model_family *model_family_find(const char *name);
const model_family *model_family_of(const train_config *c);
int check_family_options(const train_config *c, const int *given, char *err, size_t cap);
/* The model the options describe as a configuration text (family.h: "family", then every model option the run
 * gives a value: layers, dim, heads, seq, vocab, kv_heads, ffn, rope_theta, norm_eps, padded_vocab and the MoE
 * fields); a family reads the fields it knows. malloc'd (NULL when out of memory). */
char *model_text(const train_config *c);
/* The engine of the run's model, any family (collective): fsc_engine_create_config of model_text. */
fsc_status model_engine(fsc_rank *r, const train_config *c, const fsc_parallel_opts *po, const fsc_optim_config *oc,
                        fsc_engine **e);
fsc_gpt_config model_config(const train_config *c);
fsc_llama_config llama_config(const train_config *c);

/* data.c */
int find_default_data(train_config *c, const int *given, char *buf, size_t cap, char *err, size_t ecap);
int load_data(const train_config *c, fsc_data **out, size_t *n, char *err, size_t cap);
int load_val_data(const train_config *c, const fsc_data *train, fsc_data **out, char *err, size_t cap);
fsc_status fill_batch(const run_state *st, int d, int s, int32_t *tok, int32_t *tgt);
int val_due(const train_config *c, int step);
fsc_status validate(const run_state *st, fsc_engine *e, int d, int32_t *tok, int32_t *tgt, double *loss);

/* loop.c: the functions every rank runs (fsc_cluster_run's) */
fsc_status train_fn(fsc_rank *r, void *arg);
typedef struct {
    run_state *st, *ddp; /* ddp: --check-ddp's oracle, NULL without */
} proc_job;
fsc_status proc_fn(fsc_rank *r, void *arg);
/* job.c: the library's options of the run (balance: 1024 entries for --balance) */
fsc_status parallel_opts(const train_config *c, int *balance, fsc_parallel_opts *out);
fsc_optim_config optim_config(const train_config *c);
/* job.c: the planner's job of these options (balance: 1024 entries, for --balance, read while it is planned) */
fsc_status plan_job(const train_config *c, int *balance, fsc_plan_job *j);
/* frees what plan_job allocated (a registered family's configuration text) */
void plan_job_free(fsc_plan_job *j);

/* plan.c: --plan's prediction into st->plan, its table on stdout; 0, or -1 (said on stderr) */
int plan_run(run_state *st);

/* ckpt.c */
int check_ckpt_dir(const train_config *c, char *err, size_t cap);
/* the learning rate of step (from 0) by the options' schedule (fsc/schedule.h): a function of the step alone */
float lr_at(const train_config *c, int64_t step);
int check_weights_path(const char *opt, const char *path, char *err, size_t cap);
int check_resume_config(const train_config *asked, const fsc_data *data, const char *dir);
fsc_status lock_ckpt_dir(fsc_rank *r, fsc_engine *e, const char *dir, fsc_ckpt_dir_lock **lock);
fsc_status write_run_config(fsc_rank *r, const run_state *st);
fsc_status resume_run(fsc_rank *r, const train_config *c, fsc_engine *e, int *start);
fsc_status save_checkpoint(fsc_rank *r, const train_config *c, fsc_engine *e, int step);
fsc_status save_weights(fsc_rank *r, fsc_engine *e, const train_config *c, const char *path);
/* mkdir -p: dir and the folders above it (0777 less the umask); 0, or -1 with errno. */
int make_dirs(const char *dir);

/* report.c */
int results_alloc(run_state *st, int steps, int world);
void results_free(run_state *st);
int same_losses(const run_state *a, const run_state *b);
double now_ms(void);
void read_peaks(const fsc_device *dev, size_t *peak);
fsc_status share_per_rank(fsc_rank *r, run_state *st, fsc_status s);
int open_outputs(const train_config *c, int me, const fsc_data *data, const fsc_data *val,
                 FILE **log, char *err, size_t cap);
fsc_status begin_log(fsc_rank *r, const run_state *st);
void print_banner(const run_state *st, const fsc_data *data);
/* An option given that sets nothing in this run (not refused: a combination the docs use), said on stderr */
void note_unused_options(const train_config *c, const int *given);
typedef struct {         /* rank 0's measures for the progress line and --log */
    double tokens;       /* of a step of the global batch */
    double flops;        /* of a step of the global batch (fsc_model_flops) */
    double peak_flops;   /* of all ranks together; 0: unknown */
    double t0_ms;        /* when the run's first step began (now_ms) */
} run_measures;
/* peak.c: st->tflops and st->peak_source on rank 0 before the first step; a step faster than the peak raises it
 * (so MFU stays at most 100%); at the end a raised peak goes to the cache. */
void peak_choose(run_state *st, const train_config *c, fsc_device *dev);
void peak_raise(run_state *st, run_measures *m, double ms);
void peak_keep(const run_state *st, fsc_device *dev);
fsc_status report_step(run_state *st, fsc_rank *r, fsc_engine *e, const run_measures *m, int step,
                       const fsc_step_info *info, double ms, double val_loss);
void trace_path(const fsc_rank *r, const train_config *c, char *buf, size_t cap);
fsc_status write_trace(fsc_rank *r, const train_config *c, fsc_trace *tr);

/* summary.c */
void print_pipeline(const run_state *st);
void print_json(const run_state *st, const ddp_check *chk);
void print_comparison(const run_state *ddp, const run_state *run, const ddp_check *chk);

#endif
