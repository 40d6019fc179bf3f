/* The job the options describe, as the library takes it: the engine's parallel options, the optimizer's, and the
 * planner's job (fsc/plan.h) that --plan and fsc-plan plan. Shared by fsc-train and fsc-plan (which parses
 * fsc-train's options with the same table).
 * Not here: the options themselves (options.c), the model configurations (models.c). */
#include <stdio.h>
#include <stdlib.h>
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
    char *text = NULL, name[300];
    size_t n = 0;
    snprintf(name, sizeof name, "--schedule-file %s", c->schedule_file);
    if (read_text_file(c->schedule_file, name, 64u << 20, &text, &n, err, cap) != 0) return -1; /* 2^20 micro-batches */
    fsc_pipe_schedule_lists *s = calloc(1, sizeof *s); /* --pp's lines (a cut or joined line named as such) */
    fsc_status st = s ? fsc_pipe_schedule_parse_ranks(text, n, c->pp, s) : fsc_error(FSC_ERR_NOMEM, "out of memory");
    free(text);
    if (st != FSC_OK) {
        free(s);
        return snprintf(err, cap, "%s: %s", name, fsc_last_error()), -1;
    }
    c->sched = s;
    if (s->m != c->accum)
        return snprintf(err, cap, "%s runs %d micro-batches but the run has %d (--chunks)", name, s->m, c->accum), -1;
    return 0;
}

void free_schedule_file(train_config *c) {
    fsc_pipe_schedule_lists_free(c->sched);
    free(c->sched);
    c->sched = NULL;
}

/* The text of p ranks' lists on f. */
static fsc_status put_lists(FILE *f, fsc_pipe_placement pl, int p, int v, fsc_pipe_action *const *lists, const int *lens) {
    const fsc_pipe_action *const *l = (const fsc_pipe_action *const *)lists;
    size_t len = 0;
    FSC_TRY(fsc_pipe_schedule_format(pl, p, v, l, lens, NULL, 0, &len));
    char *text = malloc(len + 1);
    fsc_status st = text ? fsc_pipe_schedule_format(pl, p, v, l, lens, text, len + 1, &len)
                         : fsc_error(FSC_ERR_NOMEM, "out of memory");
    if (st == FSC_OK && f) fputs(text, f); /* f NULL: checked, not printed (a launcher's other ranks) */
    free(text);
    return st;
}

/* --print-schedule: the lists of every rank (the file's, or the built-in schedule's for --pp, the chunks per rank
 * and the micro-batches) in the text --schedule-file reads. */
int print_schedule_text(const train_config *c, FILE *f, char *err, size_t cap) {
    const int p = c->pp, v = config_chunks(c);
    const fsc_pipe_schedule kind = pipe_schedule_kind[c->schedule];
    fsc_status st;
    if (c->sched) {
        st = put_lists(f, c->sched->placement, p, v, c->sched->lists, c->sched->lens);
    } else {
        fsc_pipe_action **lists = calloc((size_t)p, sizeof *lists);
        int *lens = calloc((size_t)p, sizeof *lens);
        st = lists && lens ? FSC_OK : fsc_error(FSC_ERR_NOMEM, "out of memory");
        for (int r = 0; r < p && st == FSC_OK; r++)
            st = fsc_pipe_schedule_make(kind, p, v, c->accum, r, &lists[r], &lens[r]);
        if (st == FSC_OK) st = put_lists(f, fsc_pipe_schedule_placement(kind), p, v, lists, lens);
        for (int r = 0; r < p && lists; r++) fsc_pipe_schedule_free(lists[r]);
        free(lists), free(lens);
    }
    if (st != FSC_OK) return snprintf(err, cap, "--print-schedule: %s", fsc_last_error()), -1;
    return 0;
}
