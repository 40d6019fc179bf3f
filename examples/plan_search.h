/* fsc-plan --search (docs/planning.md): the layouts of a job that fit a rank's memory, ranked by predicted step
 * time. Each candidate (strategy and fsdp sharding, pipeline stages, tensor-parallel ranks, micro-batches) is
 * planned as fsc-plan plans one job (fsc_plan_memory, then fsc_plan_time at the same rates); one the engine
 * refuses (a layout the model does not divide) is left out and counted. The winner can be written as an
 * fsc-train --config file.
 * Not here: the options (plan_tool.c), the planning (lib/plan). */
#ifndef FSC_EXAMPLES_PLAN_SEARCH_H
#define FSC_EXAMPLES_PLAN_SEARCH_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "fsc/fsc.h"
#include "plan_print.h"

typedef struct {
    fsc_parallel_kind kind;
    fsc_shard_strategy shard;
    int pp, tp, accum;
    int recompute;              /* activation checkpointing (--recompute) */
    fsc_pipe_schedule schedule; /* pp > 1 */
    int vstages;                /* interleaved: chunks per rank (2); else 1 */
    fsc_offload_mode offload;
    int precision;              /* --precision's index: 0 fp32, 1 bf16, 2 fp16 */
    size_t peak;                /* the largest rank's peak total */
    size_t tag[FSC_TAG_COUNT];  /* that rank's peaks per tag */
    fsc_plan_step t;
} plan_candidate;

/* What varies beside the layout: the precisions to try (--precision's indices) and the rates at each. */
typedef struct {
    int precision[2], nprecision;
    fsc_plan_rates rates[3];
    int replay;                 /* step times by fsc_plan_replay (--time), else fsc_plan_time */
} search_space;

enum { SEARCH_MAX = 4096 };

/* fsc-train's --parallel, --shard, --schedule, --offload and --precision words of a candidate */
static inline const char *search_parallel(const plan_candidate *c) {
    static const char *const name[] = {"none", "ddp", "fsdp", "zero1", "zero2"};
    return c->pp > 1 && c->kind == FSC_PAR_DDP ? "pipe" : name[c->kind];
}
static inline const char *search_shard(const plan_candidate *c) {
    static const char *const name[] = {"full", "grad_op", "none", "hybrid"};
    return name[c->shard];
}
static inline const char *search_schedule(const plan_candidate *c) {
    switch (c->schedule) {
    case FSC_SCHED_1F1B: return "1f1b";
    case FSC_SCHED_INTERLEAVED: return "interleaved";
    case FSC_SCHED_ZB_H1: return "zb-h1";
    case FSC_SCHED_ZBV: return "zbv";
    default: return "gpipe";
    }
}
static inline const char *search_offload(const plan_candidate *c) {
    static const char *const name[] = {"none", "optim", "all"};
    return name[c->offload];
}
static inline const char *search_precision(const plan_candidate *c) {
    static const char *const name[] = {"fp32", "bf16", "fp16"};
    return name[c->precision];
}

/* A pipeline's chunks per rank under schedule s with virtual_stages v (the engine's count) */
static inline int search_chunks(fsc_pipe_schedule s, int v) {
    return s == FSC_SCHED_ZBV ? 2 : (s == FSC_SCHED_INTERLEAVED || s == FSC_SCHED_CUSTOM) && v > 1 ? v : 1;
}

/* The step time of job j (r: fsc_plan_memory's ranks) at rates: replayed (fsc_plan_replay) or by the formula. */
static inline fsc_status plan_step_time(const fsc_plan_job *j, const fsc_plan_rank *r, const fsc_plan_rates *rt,
                                        int replay, fsc_plan_step *out) {
    return replay ? fsc_plan_replay(j, rt, out) : fsc_plan_time(j, r, rt, out);
}

/* Plan one candidate of base: 0 and *c filled, or -1 when the engine refuses the layout. */
static inline int search_one(const fsc_plan_job *base, const search_space *sp, plan_candidate *c, fsc_plan_rank *r) {
    static const fsc_dtype dtype[] = {FSC_F32, FSC_BF16, FSC_F16};
    fsc_plan_job j = *base;
    j.po.kind = c->kind, j.po.shard = c->shard, j.po.pp = c->pp, j.po.tp = c->tp, j.po.accum = c->accum;
    j.po.checkpoint = c->recompute, j.po.schedule = c->schedule, j.po.offload = c->offload;
    j.po.param_dtype = j.po.reduce_dtype = dtype[c->precision];
    /* base's chunks and balance are for its pp and schedule: a candidate of another pp or number of chunks (the
     * search's schedules run one) takes one chunk and the default balance, else the engine refuses it */
    if (c->pp == 1 || c->schedule != base->po.schedule) j.po.virtual_stages = 1;
    if (c->pp > 1 && c->schedule == FSC_SCHED_INTERLEAVED) j.po.virtual_stages = c->vstages;
    if (c->pp != base->po.pp || search_chunks(c->schedule, j.po.virtual_stages) !=
                                    search_chunks(base->po.schedule, base->po.virtual_stages))
        j.po.balance = NULL;
    if (fsc_plan_memory(&j, r) != FSC_OK || plan_step_time(&j, r, &sp->rates[c->precision], sp->replay, &c->t) != FSC_OK)
        return -1;
    c->peak = 0;
    for (int i = 0; i < j.world; i++)
        if (r[i].peak_total > c->peak || i == 0) {
            c->peak = r[i].peak_total;
            memcpy(c->tag, r[i].peak, sizeof c->tag);
        }
    return 0;
}

static inline int search_cmp(const void *a, const void *b) {
    const double x = ((const plan_candidate *)a)->t.step_s, y = ((const plan_candidate *)b)->t.step_s;
    return x < y ? -1 : x > y;
}

/* Every candidate of base (its world and batch fixed) that the engine runs and that fits memory bytes (0: no
 * limit), fastest first, into out (SEARCH_MAX); returns how many; *refused counts the layouts the engine
 * refused, *over those over memory. The layouts: tp and pp dividing the world, the strategies over the data
 * ranks (pipelines: ddp in each stage), 1, 2, 4 or 8 micro-batches, activation checkpointing off and on, the
 * pipeline schedules gpipe, 1f1b, interleaved (2 chunks a rank), zb-h1 and zbv, sp's precisions; without an offload in base, a sharded strategy
 * over memory is tried again with its optimizer offloaded. r: job->world ranks of scratch. */
static inline int plan_search(const fsc_plan_job *base, const search_space *sp, double memory, plan_candidate *out,
                              fsc_plan_rank *r, int *refused, int *over) {
    static const struct { fsc_parallel_kind kind; fsc_shard_strategy shard; } strat[] = {
        {FSC_PAR_DDP, FSC_SHARD_FULL}, {FSC_PAR_FSDP, FSC_SHARD_FULL}, {FSC_PAR_FSDP, FSC_SHARD_GRAD_OP},
        {FSC_PAR_FSDP, FSC_SHARD_HYBRID}, {FSC_PAR_ZERO1, FSC_SHARD_FULL}, {FSC_PAR_ZERO2, FSC_SHARD_FULL},
    };
    static const int accums[] = {1, 2, 4, 8};
    static const fsc_pipe_schedule scheds[] = {FSC_SCHED_GPIPE, FSC_SCHED_1F1B, FSC_SCHED_INTERLEAVED, FSC_SCHED_ZB_H1,
                                               FSC_SCHED_ZBV};
    int n = 0;
    *refused = *over = 0;
    for (int tp = 1; tp <= base->world; tp++) {
        for (int pp = 1; tp * pp <= base->world; pp++) {
            if (base->world % (tp * pp)) continue;
            const int dp = base->world / (tp * pp);
            for (size_t s = 0; s < sizeof strat / sizeof strat[0]; s++) {
                if (dp == 1 && s > 0) continue; /* one data rank: the strategies are the same */
                if (pp > 1 && strat[s].kind != FSC_PAR_DDP) continue; /* pipelines: ddp in each stage */
                if (strat[s].shard == FSC_SHARD_HYBRID && (dp < 4 || dp % 2)) continue; /* two groups of 2 at least */
                for (size_t a = 0; a < sizeof accums / sizeof accums[0]; a++) {
                    if (base->batch % dp || (base->batch / dp) % accums[a]) continue;
                    for (int rc = 0; rc < 2; rc++)
                        for (size_t k = 0; k < (pp > 1 ? sizeof scheds / sizeof scheds[0] : 1); k++)
                            for (int p = 0; p < sp->nprecision && n < SEARCH_MAX; p++) {
                                plan_candidate c = {
                                    .kind = dp == 1 && pp == 1 && tp == 1 ? FSC_PAR_NONE : strat[s].kind,
                                    .shard = strat[s].shard, .pp = pp, .tp = tp, .accum = accums[a], .recompute = rc,
                                    .schedule = pp > 1 ? scheds[k] : base->po.schedule, .offload = base->po.offload,
                                    .precision = sp->precision[p],
                                    .vstages = pp > 1 && scheds[k] == FSC_SCHED_INTERLEAVED ? 2 : 1};
                                if (search_one(base, sp, &c, r) != 0) {
                                    (*refused)++;
                                    continue;
                                }
                                const int shards = c.kind == FSC_PAR_FSDP || c.kind == FSC_PAR_ZERO1 ||
                                                   c.kind == FSC_PAR_ZERO2;
                                if (memory > 0 && (double)c.peak > memory && c.offload == FSC_OFFLOAD_NONE && shards) {
                                    c.offload = FSC_OFFLOAD_OPTIM; /* the optimizer on the host, then */
                                    if (search_one(base, sp, &c, r) != 0) {
                                        (*refused)++;
                                        continue;
                                    }
                                }
                                if (memory > 0 && (double)c.peak > memory) (*over)++;
                                else out[n++] = c;
                            }
                }
            }
        }
    }
    qsort(out, (size_t)n, sizeof *out, search_cmp);
    return n;
}

/* The table, fastest first, then what the winner's time and memory are made of. */
static inline void plan_print_search(FILE *f, const plan_candidate *c, int n, int world, int refused, int over) {
    char b[32];
    fprintf(f, "%-4s %-8s %-8s %3s %3s %3s %5s %4s %-6s %-7s %-5s %11s %10s %10s %10s\n", "#", "parallel", "shard", "tp",
            "pp", "dp", "accum", "rec", "sched", "offload", "prec", "peak", "ms/step", "compute", "comm");
    for (int i = 0; i < n; i++)
        fprintf(f, "%-4d %-8s %-8s %3d %3d %3d %5d %4d %-6s %-7s %-5s %11s %10.2f %10.2f %10.2f\n", i + 1,
                search_parallel(&c[i]), c[i].kind == FSC_PAR_FSDP ? search_shard(&c[i]) : "-", c[i].tp, c[i].pp,
                world / (c[i].tp * c[i].pp), c[i].accum, c[i].recompute, c[i].pp > 1 ? search_schedule(&c[i]) : "-",
                search_offload(&c[i]), search_precision(&c[i]), plan_human(c[i].peak, b, sizeof b),
                c[i].t.step_s * 1e3, c[i].t.compute_s * 1e3, c[i].t.comm_s * 1e3);
    fprintf(f, "%d layouts fit, %d over the memory, %d refused by the engine\n", n, over, refused);
    if (n == 0) return;
    int big = 0;
    for (int t = 1; t < FSC_TAG_COUNT; t++)
        if (c[0].tag[t] > c[0].tag[big]) big = t;
    char m[32];
    fprintf(f, "best: %s%s%s, tp %d, pp %d, accum %d, recompute %d%s%s, offload %s, %s: %s dominates its step (rank %d: "
               "compute %.2f ms, communication %.2f ms, %s); %s dominate its memory (%s of %s)\n",
            search_parallel(&c[0]), c[0].kind == FSC_PAR_FSDP ? " " : "",
            c[0].kind == FSC_PAR_FSDP ? search_shard(&c[0]) : "", c[0].tp, c[0].pp, c[0].accum, c[0].recompute,
            c[0].pp > 1 ? ", schedule " : "", c[0].pp > 1 ? search_schedule(&c[0]) : "", search_offload(&c[0]),
            search_precision(&c[0]), c[0].t.compute_s >= c[0].t.comm_s ? "compute" : "communication", c[0].t.rank,
            c[0].t.compute_s * 1e3, c[0].t.comm_s * 1e3,
            c[0].t.step_s < c[0].t.compute_s + c[0].t.comm_s ? "overlapped" : "one after the other",
            fsc_tag_name((fsc_tag)big), plan_human(c[0].tag[big], b, sizeof b), plan_human(c[0].peak, m, sizeof m));
}

#endif
