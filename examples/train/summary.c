/* The end of a run, on rank 0's process: --json's one line (every loss, throughput, memory, communication, the
 * pipeline's stages, mixture of experts, --check-ddp's verdict, the config), the pipeline's stage table, and the
 * --check-ddp table of memory and communication against DDP.
 * Not here: the results while the run goes (report.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "train.h"
#include "../train_log.h"
#include "../plan_print.h"

/* --json: the learning rate of every step and the validation losses (null for steps not run here or not
 * validated after). */
static void add_schedule_json(cJSON *root, const run_state *st) {
    const train_config *c = st->cfg;
    cJSON *lr = cJSON_AddArrayToObject(root, "lr"), *val = cJSON_AddArrayToObject(root, "val_loss");
    char buf[64];
    for (int s = 0; s < c->steps - st->first; s++) {
        snprintf(buf, sizeof buf, "%.17g", st->lr[s]); /* --log's digits: the same doubles */
        cJSON_AddItemToArray(lr, isfinite(st->lr[s]) ? cJSON_CreateRaw(buf) : cJSON_CreateNull());
        snprintf(buf, sizeof buf, "%.17g", st->val_loss[s]);
        cJSON_AddItemToArray(val, isfinite(st->val_loss[s]) ? cJSON_CreateRaw(buf) : cJSON_CreateNull());
    }
}

/* x per step this run ran (a resumed run: from its checkpoint on) */
static double per_step(const run_state *st, double x) { return st->timed ? x / st->timed : 0; }

static double comm_per_step(const run_state *st) {
    double total = 0;
    for (int op = 0; op < FSC_OP_COUNT; op++) total += st->comm.bytes[op];
    return per_step(st, total);
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
    cJSON_AddStringToObject(o, "schedule", c->sched ? "custom" : option_choice("schedule", c->schedule, buf, sizeof buf));
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
        cJSON *ch = cJSON_AddArrayToObject(x, "chunks"); /* [stage, first layer, last layer] of each chunk */
        for (int k = 0; k < p->chunks && k < FSC_PIPE_STATS_CHUNKS; k++)
            cJSON_AddItemToArray(ch, cJSON_CreateIntArray(p->chunk_layers[k], 3));
        cJSON_AddNumberToObject(x, "peak_acts_bytes", (double)acts);
        cJSON_AddNumberToObject(x, "bubble", bubble);
        cJSON_AddNumberToObject(x, "max_in_flight", p->max_in_flight);
        cJSON_AddItemToArray(a, x);
    }
    return o;
}

/* The stage table of a pipeline: layers, peak activations, micro-batches in flight, the bubble. */
void print_pipeline(const run_state *st) {
    const train_config *c = st->cfg;
    for (int s = 0; s < c->pp; s++) {
        size_t acts;
        double bubble;
        stage_summary(st, s, &acts, &bubble);
        const fsc_pipe_stats *p = stage_stats(st, s);
        char layers[256] = "";
        size_t n = 0;
        for (int k = 0; k < p->chunks && k < FSC_PIPE_STATS_CHUNKS && n < sizeof layers; k++) {
            const int *cl = p->chunk_layers[k];
            n += (size_t)(cl[1] == cl[2] ? snprintf(layers + n, sizeof layers - n, "%s%d", k ? ", " : "", cl[1])
                                         : snprintf(layers + n, sizeof layers - n, "%s%d-%d", k ? ", " : "", cl[1],
                                                    cl[2]));
        }
        /* with several chunks a rank, max_in_flight counts (micro-batch, chunk) records: up to v M, more than M */
        const char *what = p->chunks > 1 ? (p->max_in_flight == 1 ? "chunk record" : "chunk records")
                                         : (p->max_in_flight == 1 ? "micro-batch" : "micro-batches");
        printf("stage %d: layers %s%s | peak activations %.2f MiB (%d %s in flight) | bubble %.3f "
               "(ideal %.3f)\n", s, layers, p->chunks > FSC_PIPE_STATS_CHUNKS ? ", ..." : "",
               (double)acts / 1048576.0, p->max_in_flight, what, bubble, p->ideal_bubble);
    }
}

/* MoE: per step the load-balancing loss and the drops (null for steps a resumed run did not take; the loss null when
 * inf or NaN, the drops of a step skipped for such a loss kept, as its progress line has them), and the
 * expert group's communication per step and operation (rank 0's all-to-alls, and with clipping the norm). */
static cJSON *moe_object(const run_state *st) {
    const train_config *c = st->cfg;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "experts", c->moe_experts);
    cJSON_AddNumberToObject(o, "top_k", c->moe_top_k);
    cJSON_AddNumberToObject(o, "every", c->moe_every);
    cJSON_AddNumberToObject(o, "moe_blocks", model_family_of(c)->moe_blocks(c));
    cJSON_AddNumberToObject(o, "ep", c->ep);
    cJSON *aux = cJSON_AddArrayToObject(o, "aux_losses");
    cJSON *dr = cJSON_AddArrayToObject(o, "dropped"), *as = cJSON_AddArrayToObject(o, "assigned");
    char buf[64];
    for (int s = 0; s < c->steps - st->first; s++) {
        const int ran = isfinite(st->lr[s]); /* every step run here has its rate, a skipped one too (its loss NaN) */
        snprintf(buf, sizeof buf, "%.17g", st->aux[s]);
        cJSON_AddItemToArray(aux, ran && isfinite(st->aux[s]) ? cJSON_CreateRaw(buf) : cJSON_CreateNull());
        cJSON_AddItemToArray(dr, ran ? cJSON_CreateNumber((double)st->dropped[s]) : cJSON_CreateNull());
        cJSON_AddItemToArray(as, ran ? cJSON_CreateNumber((double)st->assigned[s]) : cJSON_CreateNull());
    }
    cJSON_AddNumberToObject(o, "drop_fraction", st->moe_assigned > 0 ? st->moe_dropped / st->moe_assigned : 0);
    cJSON *eg = cJSON_AddObjectToObject(o, "expert_comm_per_step");
    const fsc_comm_stats *x = &st->groups[FSC_GROUP_EXPERT];
    for (int op = 0; op < FSC_OP_COUNT; op++) {
        if (!x->calls[op]) continue;
        cJSON *p = cJSON_AddObjectToObject(eg, fsc_comm_op_name((fsc_comm_op)op));
        cJSON_AddNumberToObject(p, "calls", per_step(st, (double)x->calls[op]));
        cJSON_AddNumberToObject(p, "bytes", per_step(st, x->bytes[op]));
    }
    return o;
}


void print_json(const run_state *st, const ddp_check *chk) {
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
    cJSON_AddNumberToObject(root, "skipped_steps", st->skipped_steps); /* this run's steps without an update */
    if (precision_dtype[c->precision] == FSC_F16 && st->timed) /* the last step's: none when none ran */
        cJSON_AddNumberToObject(root, "loss_scale", st->loss_scale);
    /* time the steps this run executed (a resumed run starts later), leaving out the first (warm-up)
     * unless it is the only one */
    int timed = st->timed > 1 ? st->timed - 1 : st->timed;
    double ms = st->timed > 1 ? st->sum_ms : st->first_ms;
    double tps = ms > 0 ? (double)timed * c->batch * c->seq / (ms * 1e-3) : 0;
    cJSON_AddNumberToObject(root, "tokens_per_s", tps);
    cJSON_AddNumberToObject(root, "ms_per_step", timed ? ms / timed : 0);
    /* the peak MFU divides by, per rank, and where it came from (peak.c) */
    cJSON_AddNumberToObject(root, "peak_tflops", st->tflops);
    cJSON_AddStringToObject(root, "peak_source", st->peak_source[0] ? st->peak_source : "unknown");
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
    for (int op = 0; op < FSC_OP_COUNT; op++) {
        cJSON *o = cJSON_AddObjectToObject(comm, fsc_comm_op_name((fsc_comm_op)op));
        cJSON_AddNumberToObject(o, "calls", (double)st->comm.calls[op]);
        cJSON_AddNumberToObject(o, "bytes", st->comm.bytes[op]);
    }
    cJSON_AddNumberToObject(root, "comm_bytes_per_step", comm_per_step(st));
    /* rank 0's bytes per step by kind of group (the kinds the run has; they sum to comm_bytes_per_step) */
    cJSON *g = cJSON_AddObjectToObject(root, "comm_bytes_per_step_by_group");
    for (int k = 0; k < FSC_GROUP_COUNT; k++) {
        if (!st->ngroups[k]) continue;
        double b = 0;
        for (int op = 0; op < FSC_OP_COUNT; op++) b += st->groups[k].bytes[op];
        cJSON_AddNumberToObject(g, fsc_group_kind_name((fsc_group_kind)k), per_step(st, b));
    }
    if (st->plan) { /* --plan */
        cJSON *p = cJSON_AddObjectToObject(root, "predicted");
        plan_json_fields(p, st->plan, c->world);
        plan_time_fields(p, &st->plan_step, &st->plan_rates);
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
    json_valid_utf8(root); /* a file name may hold bytes that are not UTF-8 */
    char *text = cJSON_PrintUnformatted(root);
    if (text) printf("%s\n", text);
    free(text);
    cJSON_Delete(root);
}

/* A row of the --check-ddp table: DDP's bytes, the run's and their ratio ("-" where DDP's are none). */
static void print_row(const char *label, double a, double b) {
    char ratio[16] = "-";
    if (a > 0) snprintf(ratio, sizeof ratio, "%.2f", b / a);
    printf("%-26s %11.1f KiB %11.1f KiB %8s\n", label, a / 1024.0, b / 1024.0, ratio);
}

/* A column's heading: the strategy, with the pipeline stages and the expert groups that set the run apart from its
 * oracle (DDP without a pipeline, with or without expert groups): "fsdp", "ddp ep 4", "zero1 pp 2 ep 2", "pp 2". */
static void column_name(const train_config *c, char *out, size_t cap) {
    const char *name = c->parallel == PAR_PIPE ? "pipe" : fsc_parallel_kind_name((fsc_parallel_kind)c->parallel);
    int n = c->parallel == FSC_PAR_NONE && c->pp > 1 ? snprintf(out, cap, "pp %d", c->pp)
            : c->parallel != PAR_PIPE && c->pp > 1   ? snprintf(out, cap, "%s pp %d", name, c->pp)
                                                     : snprintf(out, cap, "%s", name);
    if (c->ep > 1 && n > 0 && (size_t)n < cap) snprintf(out + n, cap - (size_t)n, " ep %d", c->ep);
}

/* The --check-ddp table: per-rank peak memory by tag (the largest over ranks), communication per step. */
void print_comparison(const run_state *ddp, const run_state *run, const ddp_check *chk) {
    const train_config *c = run->cfg;
    char oracle[32], name[32];
    column_name(ddp->cfg, oracle, sizeof oracle);
    column_name(c, name, sizeof name);
    printf("\n%-26s %14s %14s %8s\n", "per rank (max over ranks)", oracle, name, "ratio");
    for (int t = 0; t <= FSC_TAG_COUNT; t++) {
        size_t a = 0, b = 0;
        for (int r = 0; r < c->world; r++) {
            if (ddp->peak[r][t] > a) a = ddp->peak[r][t];
            if (run->peak[r][t] > b) b = run->peak[r][t];
        }
        char label[40];
        snprintf(label, sizeof label, "peak %s", t < FSC_TAG_COUNT ? fsc_tag_name((fsc_tag)t) : "total");
        print_row(label, a, b);
    }
    print_row("communication per step", comm_per_step(ddp), comm_per_step(run)); /* DDP on one rank: none */
    printf("bit-identical: %s (losses %s, final weights %s)\n", chk->losses_same && chk->params_same ? "yes" : "no",
           chk->losses_same ? "equal" : "differ", chk->params_same ? "equal" : "differ");
}
