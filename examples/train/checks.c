/* The options together, after the parser (options.c) and before anything is opened or run: the launcher's
 * processes, the layout (world = dp x tp x pp), the model's defaults and family, mixture of experts, and every
 * option that applies only with another. Each check refuses with a message naming the options.
 * Not here: one option's own value (its range, its choices: set_option in options.c). */
#include <stdio.h>
#include <string.h>
#include "train.h"

/* The strategy inside each stage's data group. */
fsc_parallel_kind strategy(const train_config *c) {
    return c->parallel == PAR_PIPE ? FSC_PAR_DDP : (fsc_parallel_kind)c->parallel;
}

/* The layout options together: world = dp x pp, --chunks names --accum. */
int resolve_layout(train_config *c, const int *given, char *err, size_t cap) {
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

/* The model options together: --kv-heads' default (--heads), the options of another family, then the family's
 * defaults and checks (models.c). */
int resolve_model(train_config *c, const int *given, char *err, size_t cap) {
    const model_family *f = model_family_of(c);
    if (!f)
        return snprintf(err, cap, "--model %s: no such model family (built-in: gpt2, llama; a program's own family is "
                        "registered before the trainer runs: docs/models.md)", c->model), -1;
    if (!c->kv_heads) c->kv_heads = c->heads;
    if (check_family_options(c, given, err, cap) != 0) return -1;
    return f->resolve(c, err, cap);
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
    if (c->tp > 1) return snprintf(err, cap, "--moe-experts with --tp > 1 is not supported yet"), -1;
    if (c->moe_experts % c->ep != 0)
        return snprintf(err, cap, "--ep %d does not divide --moe-experts %d (each rank of an expert group holds E / G "
                        "experts)", c->ep, c->moe_experts), -1;
    if (c->dp % c->ep != 0)
        return snprintf(err, cap, "--ep %d does not divide the %d data-parallel ranks (the expert group is part of the "
                        "data group)", c->ep, c->dp), -1;
    return 0;
}

/* The pipeline's options: only with --pp 2 or more, a stage per block at least, --balance. */
static int check_pipeline(const train_config *c, const int *given, char *err, size_t cap) {
    if (c->pp < 2) {
        const char *only[] = {"schedule", "balance", "checkpoint", "virtual-stages", "schedule-file", "print-schedule"};
        for (int i = 0; i < 6; i++)
            if (given[option_index(only[i])])
                return snprintf(err, cap, "--%s applies to pipelines only (--pp 2 or more)", only[i]), -1;
    } else {
        if (c->pp > c->layers)
            return snprintf(err, cap, "--pp %d pipeline stages but the model has %d blocks (--layers): every stage "
                            "needs at least one", c->pp, c->layers), -1;
        for (int i = 0; c->schedule_file && i < 2; i++)
            if (given[option_index(i ? "virtual-stages" : "schedule")])
                return snprintf(err, cap, "--schedule-file gives the schedule, its chunks per rank and their placement: "
                                "drop --%s", i ? "virtual-stages" : "schedule"), -1;
        if (pipe_schedule_kind[c->schedule] == FSC_SCHED_ZBV && given[option_index("virtual-stages")] &&
            c->virtual_stages != 2)
            return snprintf(err, cap, "--schedule zbv runs two chunks per pipeline rank (placed in a V), not "
                            "--virtual-stages %d", c->virtual_stages), -1;
        if (c->pp * config_chunks(c) > c->layers && pipe_schedule_kind[c->schedule] == FSC_SCHED_ZBV)
            return snprintf(err, cap, "--pp %d x 2 chunks (--schedule zbv) but the model has %d blocks (--layers): every "
                            "chunk needs at least one", c->pp, c->layers), -1;
        if (c->sched && c->pp * c->sched->v > c->layers)
            return snprintf(err, cap, "--pp %d x %d chunks (--schedule-file) but the model has %d blocks (--layers): "
                            "every chunk needs at least one", c->pp, c->sched->v, c->layers), -1;
        if (!c->sched && c->pp * c->virtual_stages > c->layers)
            return snprintf(err, cap, "--pp %d x --virtual-stages %d chunks but the model has %d blocks (--layers): every "
                            "chunk needs at least one", c->pp, c->virtual_stages, c->layers), -1;
        int bal[1024];
        if (c->balance && fsc_balance_parse(c->balance, &(fsc_model){ .n_layers = c->layers + 2 },
                                            c->pp * config_chunks(c), bal) != FSC_OK)
            return snprintf(err, cap, "--balance: %s", fsc_last_error()), -1;
    }
    return 0;
}

/* What the engine and the simulated cluster refuse of the options together, said here before any rank starts and in
 * the options' names: the exact reduction's unit, offload's strategies, the chunks of interleaved and V schedules,
 * and the virtual clock's one thread on the cpu device. */
static int check_engine_options(const train_config *c, char *err, size_t cap) {
    if (c->unit && c->reduce != 2) return snprintf(err, cap, "--unit applies to --reduce exact only"), -1;
    const int local = c->batch / c->dp; /* the batch splits over the data-parallel ranks: checked before */
    if (c->unit && local % c->unit != 0)
        return snprintf(err, cap, "--unit %d does not divide the %d sequences per rank (--batch %d / %d data-parallel "
                        "ranks)", c->unit, local, c->batch, c->dp), -1;
    if (c->unit && c->pp > 1 && local / c->unit != c->accum)
        return snprintf(err, cap, "--reduce exact with a pipeline: the unit is its micro-batch, so --unit is %d (the %d "
                        "sequences per rank / %s %d) or 0, not %d", local / c->accum, local, c->chunks ? "--chunks" :
                        "--accum", c->accum, c->unit), -1;
    if (c->searched) return 0; /* fsc-plan --search: each candidate layout is the engine's to refuse */
    const fsc_parallel_kind k = strategy(c);
    /* hybrid shards over groups of half the data-parallel ranks (the engine's default hybrid_group, dp / 2) */
    if (k == FSC_PAR_FSDP && c->shard == FSC_SHARD_HYBRID && c->dp >= 2 && c->dp % (c->dp / 2) != 0)
        return snprintf(err, cap, "--shard hybrid shards over groups of half the data-parallel ranks, and %d ranks do "
                        "not split into groups of %d: give an even number of data-parallel ranks", c->dp,
                        c->dp / 2), -1;
    if (c->offload != FSC_OFFLOAD_NONE) {
        const int all = c->offload == FSC_OFFLOAD_ALL;
        const char *par = c->parallel == PAR_PIPE ? "pipe" : fsc_parallel_kind_name(k);
        if (k == FSC_PAR_NONE || k == FSC_PAR_DDP || (all && k != FSC_PAR_FSDP))
            return snprintf(err, cap, "--offload %s runs with --parallel %s, not %s (%s)", all ? "all" : "optim",
                            all ? "fsdp only" : "fsdp, zero1 or zero2", par,
                            all ? "offload all keeps fsdp's sharded parameters on the host"
                            : k == FSC_PAR_DDP ? "zero1 is ddp with the optimizer state sharded, with --pp too"
                                               : "on one rank too: --parallel zero1"), -1;
    }
    if (c->pp > 1 && !c->sched && pipe_schedule_kind[c->schedule] != FSC_SCHED_INTERLEAVED &&
        pipe_schedule_kind[c->schedule] != FSC_SCHED_ZBV && c->virtual_stages > 1)
        return snprintf(err, cap, "--virtual-stages %d applies to --schedule interleaved (zbv runs two chunks a rank; "
                        "gpipe, 1f1b and zb-h1 one)", c->virtual_stages), -1;
    if (c->pp > 1 && !c->sched && pipe_schedule_kind[c->schedule] == FSC_SCHED_INTERLEAVED && c->accum % c->pp != 0)
        return snprintf(err, cap, "--schedule interleaved needs the micro-batches (%s %d) to be a multiple of --pp %d, "
                        "as Megatron's does", c->chunks ? "--chunks" : "--accum", c->accum, c->pp), -1;
    if (c->pp > 1 && config_chunks(c) > 1 && !c->prefetch)
        return snprintf(err, cap, "%s runs %d chunks a pipeline rank, whose streams need --prefetch 1 (communicators of "
                        "their own)", c->sched ? "--schedule-file" : pipe_schedule_kind[c->schedule] == FSC_SCHED_ZBV
                        ? "--schedule zbv" : "--schedule interleaved", config_chunks(c)), -1;
    if (c->sim_clock == FSC_SIM_CLOCK_VIRTUAL) {
        char dev[16];
        if (strcmp(option_choice("device", c->device, dev, sizeof dev), "cpu") != 0)
            return snprintf(err, cap, "--sim-clock virtual times each rank's thread on the cpu, not --device %s's "
                            "work: use --device cpu or --sim-clock wall", dev), -1;
        if (c->threads > 1)
            return snprintf(err, cap, "--sim-clock virtual counts the CPU time of each rank's own thread: it needs "
                            "--threads 1 (or 0), not %d", c->threads), -1;
    }
    return 0;
}

/* The layout options together: the rank order, tensor and sequence parallelism, the batch over the data-parallel
 * ranks and micro-batches, the strategy, the pipeline's options, the options of fsdp only. */
static int check_parallel(const train_config *c, const int *given, char *err, size_t cap) {
    int order[3];
    if (fsc_layout_parse_order(c->order, order) != FSC_OK) return snprintf(err, cap, "--order: %s", fsc_last_error()), -1;
    if (c->sequence_parallel && c->tp < 2) return snprintf(err, cap, "--sequence-parallel needs --tp 2 or more"), -1;
    const model_family *f = model_family_of(c);
    if (c->tp > 1 && f->check_tp && f->check_tp(c, err, cap) != 0) return -1;
    if (c->tp > 1 && c->batch % c->dp == 0 && (c->batch / c->dp) % c->accum == 0 && c->sequence_parallel &&
        ((long long)(c->batch / c->dp / c->accum) * c->seq) % c->tp != 0)
        return snprintf(err, cap, "--sequence-parallel: a micro-batch of %d x %d token rows does not split over --tp %d",
                        c->batch / c->dp / c->accum, c->seq, c->tp), -1;
    if (c->tp > 1 && c->sequence_parallel && c->seq % c->tp != 0) /* every family: B x seq / tp rows a rank */
        return snprintf(err, cap, "--sequence-parallel: --seq %d does not divide by --tp %d (between layers "
                        "each rank holds B x seq / tp consecutive rows of a micro-batch's B x seq)", c->seq, c->tp), -1;
    if (c->pp > 1 || c->tp > 1 ? c->batch % c->dp != 0 : c->batch % c->world != 0)
        return c->pp > 1 || c->tp > 1 ? snprintf(err, cap, "--batch %d does not split evenly over %d data-parallel ranks (--dp)",
                                    c->batch, c->dp)
                         : snprintf(err, cap, "--batch %d does not split evenly over --world %d", c->batch, c->world), -1;
    if ((c->batch / c->dp) % c->accum != 0)
        return snprintf(err, cap, "%s %d does not divide the %d sequences per rank (--batch %d / %s %d)",
                        c->chunks ? "--chunks" : "--accum", c->accum, c->batch / c->dp, c->batch,
                        c->pp > 1 || c->tp > 1 ? "--dp" : "--world", c->dp), -1;
    if (c->parallel == FSC_PAR_NONE && c->dp > 1)
        return c->tp > 1 || c->pp > 1
                   ? snprintf(err, cap, "--parallel none has no data parallelism; with --dp %d choose ddp, fsdp, zero1 or "
                              "zero2", c->dp)
                   : snprintf(err, cap, "--parallel none runs on one rank; with --world %d choose ddp, fsdp, zero1 or zero2", c->world), -1;
    if (c->parallel == PAR_PIPE && c->pp < 2)
        return snprintf(err, cap, "--parallel pipe needs --pp 2 or more pipeline stages"), -1;
    if (check_pipeline(c, given, err, cap) != 0) return -1;
    if (check_engine_options(c, err, cap) != 0) return -1;
    if (c->parallel != FSC_PAR_FSDP) {
        if (given[option_index("shard")]) return snprintf(err, cap, "--shard applies to --parallel fsdp only"), -1;
        if (given[option_index("wrap")]) return snprintf(err, cap, "--wrap applies to --parallel fsdp only"), -1;
    }
    return 0;
}

/* The step's options: loss scaling, the optimizer, the learning-rate schedule, validation. */
static int check_training(const train_config *c, const int *given, char *err, size_t cap) {
    if (precision_dtype[c->precision] == FSC_F16 && given[option_index("nonfinite")])
        return snprintf(err, cap, "--nonfinite applies to fp32 and bf16: fp16 loss scaling always skips a step with "
                        "inf/NaN and backs off the scale (up to --max-skipped-steps in a row)"), -1;
    /* the default's value is no setting: the command line takes back what a --config file set */
    if (precision_dtype[c->precision] != FSC_F16 && c->nonfinite != FSC_NONFINITE_SKIP &&
        given[option_index("max-skipped-steps")] && c->max_skipped_steps != 100)
        return snprintf(err, cap, "--max-skipped-steps applies to --nonfinite skip and --precision fp16 (fp32 and bf16 "
                        "stop at the first inf/NaN step, none is skipped) (--max-skipped-steps 100: unset)"), -1;
    if (c->optimizer != FSC_OPT_SGD && given[option_index("momentum")] && c->momentum != 0.9f)
        return snprintf(err, cap, "--momentum applies to --optimizer sgd only (--momentum 0.9: unset)"), -1;
    if (c->lr_schedule == FSC_LR_CONSTANT && given[option_index("min-lr")] && c->min_lr != 0)
        return snprintf(err, cap, "--min-lr applies to --lr-schedule cosine and linear (--min-lr 0: unset)"), -1;
    if (c->lr_schedule != FSC_LR_CONSTANT && c->steps <= c->warmup)
        return snprintf(err, cap, "--lr-schedule %s decays after the --warmup %d steps: give more --steps than that (%d)",
                        c->lr_schedule == FSC_LR_COSINE ? "cosine" : "linear", c->warmup, c->steps), -1;
    if (c->lr_schedule != FSC_LR_CONSTANT && c->min_lr > c->lr)
        return snprintf(err, cap, "--min-lr %g is above --lr %g", (double)c->min_lr, (double)c->lr), -1;
    if (!c->val_data && (given[option_index("val-every")] || given[option_index("val-batches")]))
        return snprintf(err, cap, "--%s needs --val-data", given[option_index("val-every")] ? "val-every" : "val-batches"), -1;
    return 0;
}

/* The checkpoint and weights options. */
static int check_ckpt_options(const train_config *c, const int *given, char *err, size_t cap) {
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

/* Checks that need several options together, in this order (the first refusal is the one said). */
int check_config(const train_config *c, const int *given, char *err, size_t cap) {
    if (given[option_index("save-dtype")] && !c->save && !c->init_save)
        return snprintf(err, cap, "--save-dtype applies to --save and --init-save only"), -1;
    fsc_gpt_config g = model_config(c);
    if (check_moe(c, given, err, cap) != 0) return -1;
    if (fsc_gpt_config_validate(&g) != FSC_OK) return snprintf(err, cap, "model: %s", fsc_last_error()), -1;
    if (check_parallel(c, given, err, cap) != 0) return -1;
    if (check_training(c, given, err, cap) != 0) return -1;
    /* fsc-plan --search varies the strategy: its winner's --config drops --check-ddp where it is ddp (plan_tool.c) */
    if (c->check_ddp && !c->searched && c->pp == 1 && c->ep == 1 &&
        (c->parallel == FSC_PAR_NONE || c->parallel == FSC_PAR_DDP))
        return snprintf(err, cap, "--check-ddp compares a sharded, pipelined or expert-parallel run with DDP: give "
                        "--parallel fsdp, zero1 or zero2, --pp 2 or more, or --ep 2 or more"), -1;
    return check_ckpt_options(c, given, err, cap);
}

/* The launcher's processes (mpirun, srun, torchrun): --world must be theirs or be left out. me is this
 * process's rank (0 without a launcher); *procs is 1 when the ranks are processes. */
int check_launcher(train_config *c, int *given, int *me, int *procs, char *err, size_t cap) {
    fsc_launch_env env;
    *me = 0, *procs = 0;
    if (fsc_launch_env_parse(NULL, NULL, &env) != FSC_OK) return snprintf(err, cap, "%s", fsc_last_error()), -1;
    int gw = option_index("world");
    if (env.launcher != FSC_LAUNCHER_NONE && (c->sim_bandwidth > 0 || c->sim_latency > 0 || c->sim_copy > 0 ||
                                              c->sim_clock != FSC_SIM_CLOCK_WALL))
        return snprintf(err, cap, "--sim-bandwidth, --sim-latency, --sim-copy-bandwidth and --sim-clock apply to "
                        "simulated ranks; processes started by a launcher use the real network, copies and clock"), -1;
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
