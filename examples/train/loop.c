/* What every rank runs (SPMD): build the engine the options describe, start (--load, --resume, --init-save), train
 * --steps steps (each: its batch, the learning rate, the step, validation, rank 0's report, a checkpoint), then end
 * (the final weights, --save, the measures the report needs). proc_fn is the same under a launcher, with
 * --check-ddp's oracle in the same launch.
 * Not here: the step itself (the engine's, lib/parallel), what is printed (report.c, summary.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "train.h"
#include "../train_same.h"

/* --load: a weights file, or a checkpoint's weights (step-NNNNNNNN; not its optimizer state: a new run). Collective. */
static fsc_status load_weights(fsc_engine *e, const char *path) {
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) return fsc_ckpt_load_weights(e, path, NULL);
    return fsc_engine_load_weights(e, path);
}

/* Before the first step: this rank's place in the layout (rank 0 prints it), --ckpt-dir locked, --load's weights,
 * --resume's checkpoint (*start: the step to continue at), --ckpt-dir/train_config.json, --log's config line,
 * --init-save. Collective. */
static fsc_status start_run(fsc_rank *r, run_state *st, fsc_engine *e, fsc_ckpt_dir_lock **lock, int *start) {
    const train_config *c = st->cfg;
    const fsc_layout *lay = fsc_engine_layout(e);
    st->lay[r->rank] = *lay;
    if (r->rank == 0 && r->world > 1) {
        char line[192];
        fsc_layout_describe(lay, line, sizeof line);
        printf("layout: %s%s\n", line, c->sequence_parallel ? ", sequence parallel" : "");
        fflush(stdout);
    }
    *start = 0; /* a resumed run continues at the checkpoint's step (the data order is a function of it) */
    if (c->ckpt_dir) FSC_TRY(lock_ckpt_dir(r, e, c->ckpt_dir, lock));
    if (c->load) FSC_TRY(load_weights(e, c->load));
    if (c->resume) FSC_TRY(resume_run(r, c, e, start));
    if (c->ckpt_dir) FSC_TRY(write_run_config(r, st));
    FSC_TRY(begin_log(r, st)); /* the run is accepted: --log replaced (or appended to) from here */
    if (c->init_save) FSC_TRY(save_weights(r, e, c, c->init_save));
    return FSC_OK;
}

/* Rank 0's communication so far, in all (*all) and by kind of group (group[FSC_GROUP_COUNT]). */
static void comm_now(const fsc_engine *e, fsc_comm_stats *all, fsc_comm_stats *group) {
    fsc_engine_comm_stats(e, all);
    for (int g = 0; g < FSC_GROUP_COUNT; g++) (void)fsc_engine_comm_stats_group(e, (fsc_group_kind)g, &group[g]);
}

/* into += a - b (b NULL: a alone), each operation's calls and bytes; with sign -1, into -= that. */
static void comm_add(fsc_comm_stats *into, const fsc_comm_stats *a, const fsc_comm_stats *b, int sign) {
    for (int op = 0; op < FSC_OP_COUNT; op++) {
        const uint64_t calls = a->calls[op] - (b ? b->calls[op] : 0);
        const double bytes = a->bytes[op] - (b ? b->bytes[op] : 0);
        into->calls[op] = sign > 0 ? into->calls[op] + calls : into->calls[op] - calls;
        into->bytes[op] += sign > 0 ? bytes : -bytes;
    }
}

/* Rank 0: the traffic since all and group (comm_now's) counted as off the steps (validation, a checkpoint), so the
 * report's communication per step is the training steps' alone. */
static void comm_off(run_state *st, const fsc_engine *e, const fsc_comm_stats *all, const fsc_comm_stats *group) {
    fsc_comm_stats a, g[FSC_GROUP_COUNT];
    comm_now(e, &a, g);
    comm_add(&st->off_comm, &a, all, 1);
    for (int k = 0; k < FSC_GROUP_COUNT; k++) comm_add(&st->off_groups[k], &g[k], &group[k], 1);
}

/* One step (from 0): its batch by the data order, the scheduled learning rate, the engine's step, validation when
 * due, rank 0's report, a checkpoint when due. tok and tgt hold this rank's part of a batch. Collective. */
static fsc_status train_step(fsc_rank *r, run_state *st, fsc_engine *e, run_measures *m, int step,
                             int32_t *tok, int32_t *tgt) {
    const train_config *c = st->cfg;
    const int d = fsc_engine_layout(e)->data, bl = c->batch / c->dp;
    FSC_TRY(fill_batch(st, d, step, tok, tgt));
    double t0 = now_ms();
    fsc_step_info info = {0};
    FSC_TRY(fsc_engine_set_lr(e, lr_at(c, step))); /* a resumed run takes the same rates */
    fsc_status s = fsc_engine_step_model(e, tok, tgt, bl, c->batch, &info); /* every family's: int32 tokens */
    if (s != FSC_OK) return fsc_error_prefix(s, "step %d/%d", step + 1, c->steps);
    double ms = now_ms() - t0, val_loss = NAN;
    fsc_comm_stats all, group[FSC_GROUP_COUNT]; /* validation's and the checkpoint's traffic is not the step's */
    if (r->rank == 0) comm_now(e, &all, group);
    if (st->val && val_due(c, step)) FSC_TRY(validate(st, e, d, tok, tgt, &val_loss));
    if (r->rank == 0) peak_raise(st, m, ms);
    if (r->rank == 0) FSC_TRY(report_step(st, r, e, m, step, &info, ms, val_loss));
    s = save_checkpoint(r, c, e, step);
    if (r->rank == 0) comm_off(st, e, &all, group);
    return s;
}

/* The steps from start to --steps, counted from the communication of the first (the statistics of setup left
 * out). The report's measures (train_log.h): FLOPs of a step of the global batch, the peak of all ranks. */
static fsc_status train_loop(fsc_rank *r, run_state *st, fsc_engine *e, int start, int32_t *tok, int32_t *tgt) {
    const train_config *c = st->cfg;
    fsc_engine_reset_comm_stats(e);
    run_measures m = {.tokens = (double)c->batch * (double)c->seq,
                      .flops = fsc_model_flops(fsc_engine_model(e), c->batch),
                      .peak_flops = r->rank == 0 ? (double)r->world * st->tflops * 1e12 : 0, .t0_ms = now_ms()};
    for (int step = start; step < c->steps; step++) FSC_TRY(train_step(r, st, e, &m, step, tok, tgt));
    return FSC_OK;
}

/* After the last step (or a failed one): the results the report needs (communication, pipeline measures, peak
 * memory; shared between processes), --check-ddp's full weights, --save. Returns s or the first failure after it.
 * Collective. */
static fsc_status end_run(fsc_rank *r, run_state *st, fsc_engine *e, fsc_status s) {
    const train_config *c = st->cfg;
    if (r->rank == 0) {
        peak_keep(st, r->dev);
        fsc_engine_comm_stats(e, &st->comm);
        comm_add(&st->comm, &st->off_comm, NULL, -1); /* the training steps' alone */
        for (int g = 0; g < FSC_GROUP_COUNT; g++) {
            st->ngroups[g] = fsc_engine_comm_stats_group(e, (fsc_group_kind)g, &st->groups[g]);
            comm_add(&st->groups[g], &st->off_groups[g], NULL, -1);
        }
    }
    if (st->pstats) fsc_engine_pipe_stats(e, &st->pstats[r->rank]);
    if (s == FSC_OK && st->params) s = fsc_engine_full_params(e, r->rank == 0 ? st->params : NULL);
    if (s == FSC_OK && c->save) s = save_weights(r, e, c, c->save);
    read_peaks(r->dev, st->peak[r->rank]);
    fsc_device *hdev = fsc_engine_host_device(e);
    if (hdev) read_peaks(hdev, st->hpeak[r->rank]);
    if (st->procs) s = share_per_rank(r, st, s);
    return s;
}

/* A rank's run (arg: the run_state): the engine, start, the steps, the end. */
fsc_status train_fn(fsc_rank *r, void *arg) {
    run_state *st = arg;
    const train_config *c = st->cfg;
    int balance[1024];
    fsc_parallel_opts po;
    FSC_TRY(parallel_opts(c, balance, &po));
    const fsc_optim_config oc = optim_config(c);
    fsc_engine *e = NULL;
    fsc_trace *tr = NULL; /* --trace: this rank's recorder, attached to the world before the engine splits groups */
    if (r->rank == 0) peak_choose(st, c, r->dev);
    if (c->trace) { /* streamed to DIR/rank-N.json as it goes: a killed run keeps the steps it finished */
        char path[4200];
        trace_path(r, c, path, sizeof path);
        FSC_TRY(fsc_trace_create(&(fsc_trace_opts){.rank = r->rank, .max_events = (size_t)c->trace_events,
                                                   .origin_us = st->trace_origin, .path = path}, &tr));
        fsc_comm_set_trace(r->comm, tr);
    }
    fsc_status s = model_engine(r, c, &po, &oc, &e); /* any family's: its configuration text (models.c) */
    const int built = s == FSC_OK;
    if (built) fsc_engine_set_trace(e, tr);
    const size_t n = (size_t)(c->batch / c->dp) * (size_t)c->seq;
    int32_t *tok = NULL, *tgt = NULL;
    fsc_ckpt_dir_lock *lock = NULL;
    int start = 0;
    if (built) {
        tok = malloc(n * sizeof *tok), tgt = malloc(n * sizeof *tgt);
        s = tok && tgt ? FSC_OK : fsc_error(FSC_ERR_NOMEM, "train: out of host memory for the batch");
        if (s == FSC_OK) s = start_run(r, st, e, &lock, &start);
        if (s == FSC_OK) s = train_loop(r, st, e, start, tok, tgt);
        s = end_run(r, st, e, s);
    }
    free(tok);
    free(tgt);
    if (tr && built) { /* DIR/rank-N.json finished (a failed build leaves the stream fsc_trace_free ends) */
        fsc_status ts = write_trace(r, c, tr);
        if (s == FSC_OK) s = ts;
    }
    fsc_ckpt_unlock(lock);
    fsc_engine_free(e);
    fsc_comm_set_trace(r->comm, NULL);
    fsc_trace_free(tr);
    return s;
}

/* One rank per process: the run and, with --check-ddp, its DDP oracle on the first dp x tp ranks (the others
 * wait), in one launch (MPI starts once per process). */
fsc_status proc_fn(fsc_rank *r, void *arg) {
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
        fsc_device_reset_peak(r->dev); /* the oracle's peaks are its own, as on the fresh devices of simulated ranks */
        fsc_rank in = *r;
        in.world = w;
        in.comm = sub;
        s = train_fn(&in, j->ddp);
    }
    fsc_comm_free(sub);
    return fsc_comm_agree(r->comm, r->dev, s);
}
