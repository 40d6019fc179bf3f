/* The job the options describe, as the library takes it: the engine's parallel options, the optimizer's, and the
 * planner's job (fsc/plan.h) that --plan and fsc-plan plan. Shared by fsc-train and fsc-plan (which parses
 * fsc-train's options with the same table).
 * Not here: the options themselves (options.c), the model configurations (models.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "train.h"

/* The library's parallel options of the run: its defaults, then what the options set (an option the table lacks
 * keeps its default). balance (1024 entries) holds --balance's blocks per stage. */
fsc_status parallel_opts(const train_config *c, int *balance, fsc_parallel_opts *out) {
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
    po.schedule = pipe_schedule_kind[c->schedule];
    po.virtual_stages = c->virtual_stages;
    if (c->sched && c->pp > 1) { /* --schedule-file: the engine validates and copies the lists */
        po.schedule = FSC_SCHED_CUSTOM;
        po.actions = (const fsc_pipe_action *const *)c->sched->lists;
        po.nactions = c->sched->lens;
        po.virtual_stages = c->sched->v;
        po.placement = c->sched->placement;
    }
    po.pipe_checkpoint = pipe_ckpt_mode[c->pipe_ckpt];
    po.checkpoint = c->recompute;
    po.tp = c->tp;
    po.sequence_parallel = c->sequence_parallel;
    po.order = c->order;
    po.ep = c->ep;
    if (c->balance) {
        /* both models have --layers blocks between the embedding and the head; parse reads only n_layers */
        FSC_TRY(fsc_balance_parse(c->balance, &(fsc_model){ .n_layers = c->layers + 2 }, c->pp * config_chunks(c),
                                  balance));
        po.balance = balance;
    }
    *out = po;
    return FSC_OK;
}

/* The optimizer: AdamW's betas and eps from the library, the rest from the options. */
fsc_optim_config optim_config(const train_config *c) {
    fsc_optim_config oc = fsc_optim_config_default();
    oc.kind = (fsc_optim_kind)c->optimizer;
    oc.lr = c->lr;
    oc.weight_decay = c->weight_decay;
    oc.decay_all = c->decay_all;
    if (oc.kind == FSC_OPT_SGD) oc.momentum = c->momentum;
    return oc;
}

/* The job fsc-train runs with these options, as fsc_plan_memory takes it (balance: 1024 entries, for --balance).
 * A built-in family's model is its plan hook's; any other family's is its configuration text (j->config,
 * model_text's: malloc'd, freed with plan_job_free). */
fsc_status plan_job(const train_config *c, int *balance, fsc_plan_job *j) {
    *j = fsc_plan_job_default();
    const model_family *f = model_family_of(c);
    if (!f) return fsc_error(FSC_ERR_INVALID, "--model %s: no such model family", c->model);
    FSC_TRY(parallel_opts(c, balance, &j->po));
    if (f->plan) {
        f->plan(c, j);
    } else if (!(j->config = model_text(c))) { /* any other family: its configuration text, as the run builds it */
        return fsc_error(FSC_ERR_NOMEM, "out of memory for the model's configuration");
    }
    j->oc = optim_config(c);
    j->world = c->world;
    j->batch = c->batch;
    j->seed = c->seed;
    return FSC_OK;
}


void plan_job_free(fsc_plan_job *j) {
    free((void *)j->config);
    j->config = NULL;
}

/* --schedule-file: the file's lists, checked against --pp and the micro-batches (c->sched). */
int load_schedule_file(train_config *c, char *err, size_t cap) {
    if (!c->schedule_file || c->pp < 2) return 0;
    FILE *f = fopen(c->schedule_file, "rb");
    if (!f) return snprintf(err, cap, "--schedule-file %s: cannot open: %s", c->schedule_file, strerror(errno)), -1;
    enum { MAX_BYTES = 64 << 20 }; /* far more than any schedule: 2^20 micro-batches of a few ranks */
    char *text = NULL;
    size_t n = 0, have = 0;
    int nomem = 0;
    while (!feof(f) && !ferror(f) && n <= MAX_BYTES) { /* grows with what the file holds */
        if (n == have) {
            char *t = realloc(text, have = have ? 2 * have : 4096);
            if (!t) {
                nomem = 1;
                break;
            }
            text = t;
        }
        n += fread(text + n, 1, have - n, f);
    }
    const int bad = ferror(f);
    fclose(f);
    if (nomem || bad || n > MAX_BYTES) {
        free(text);
        return snprintf(err, cap, "--schedule-file %s: %s", c->schedule_file,
                        nomem ? "out of memory" : bad ? "cannot read" : "larger than 64 MiB"), -1;
    }
    fsc_pipe_schedule_lists *s = calloc(1, sizeof *s);
    fsc_status st = s ? fsc_pipe_schedule_parse(text, n, s) : fsc_error(FSC_ERR_NOMEM, "out of memory");
    free(text);
    if (st != FSC_OK) {
        free(s);
        return snprintf(err, cap, "--schedule-file %s: %s", c->schedule_file, fsc_last_error()), -1;
    }
    c->sched = s;
    if (s->p != c->pp)
        return snprintf(err, cap, "--schedule-file %s has %d lines of actions (pipeline ranks) but --pp is %d",
                        c->schedule_file, s->p, c->pp), -1;
    if (s->m != c->accum)
        return snprintf(err, cap, "--schedule-file %s runs %d micro-batches but the run has %d (--chunks)",
                        c->schedule_file, s->m, c->accum), -1;
    return 0;
}

void free_schedule_file(train_config *c) {
    fsc_pipe_schedule_lists_free(c->sched);
    free(c->sched);
    c->sched = NULL;
}

/* --print-schedule: the lists of every rank (the file's, or the built-in schedule's for --pp, the chunks per rank
 * and the micro-batches) in the text --schedule-file reads. */
int print_schedule_text(const train_config *c, FILE *f, char *err, size_t cap) {
    const int p = c->pp, v = config_chunks(c);
    fsc_pipe_action **lists = c->sched ? c->sched->lists : calloc((size_t)p, sizeof *lists);
    int *lens = c->sched ? c->sched->lens : calloc((size_t)p, sizeof *lens);
    const fsc_pipe_placement pl = c->sched ? c->sched->placement : fsc_pipe_schedule_placement(pipe_schedule_kind[c->schedule]);
    fsc_status st = lists && lens ? FSC_OK : fsc_error(FSC_ERR_NOMEM, "out of memory");
    for (int r = 0; r < p && st == FSC_OK && !c->sched; r++)
        st = fsc_pipe_schedule_make(pipe_schedule_kind[c->schedule], p, v, c->accum, r, &lists[r], &lens[r]);
    size_t len = 0;
    char *text = NULL;
    if (st == FSC_OK) st = fsc_pipe_schedule_format(pl, p, v, (const fsc_pipe_action *const *)lists, lens, NULL, 0, &len);
    if (st == FSC_OK && !(text = malloc(len + 1))) st = fsc_error(FSC_ERR_NOMEM, "out of memory");
    if (st == FSC_OK) st = fsc_pipe_schedule_format(pl, p, v, (const fsc_pipe_action *const *)lists, lens, text, len + 1, &len);
    if (st == FSC_OK) fputs(text, f);
    free(text);
    for (int r = 0; r < p && lists && !c->sched; r++) fsc_pipe_schedule_free(lists[r]);
    if (!c->sched) free(lists), free(lens);
    if (st != FSC_OK) return snprintf(err, cap, "--print-schedule: %s", fsc_last_error()), -1;
    return 0;
}
