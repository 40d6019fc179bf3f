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
#include <cjson/cJSON.h>
#include "fsc/fsc.h"
#include "plan_print.h"

typedef struct {
    fsc_parallel_kind kind;
    fsc_shard_strategy shard;
    int pp, tp, accum;
    size_t peak;    /* the largest rank's peak total */
    fsc_plan_step t;
} plan_candidate;

enum { SEARCH_MAX = 512 };

/* fsc-train's --parallel and --shard words of a candidate */
static inline const char *search_parallel(const plan_candidate *c) {
    static const char *const name[] = {"none", "ddp", "fsdp", "zero1", "zero2"};
    return c->pp > 1 && c->kind == FSC_PAR_DDP ? "pipe" : name[c->kind];
}
static inline const char *search_shard(const plan_candidate *c) {
    static const char *const name[] = {"full", "grad_op", "none", "hybrid"};
    return name[c->shard];
}

/* Plan one candidate of base: 0 and *c filled, or -1 when the engine refuses the layout. */
static inline int search_one(const fsc_plan_job *base, const fsc_plan_rates *rt, plan_candidate *c,
                             fsc_plan_rank *r) {
    fsc_plan_job j = *base;
    j.po.kind = c->kind, j.po.shard = c->shard, j.po.pp = c->pp, j.po.tp = c->tp, j.po.accum = c->accum;
    if (fsc_plan_memory(&j, r) != FSC_OK || fsc_plan_time(&j, r, rt, &c->t) != FSC_OK) return -1;
    c->peak = 0;
    for (int i = 0; i < j.world; i++)
        if (r[i].peak_total > c->peak) c->peak = r[i].peak_total;
    return 0;
}

static inline int search_cmp(const void *a, const void *b) {
    const double x = ((const plan_candidate *)a)->t.step_s, y = ((const plan_candidate *)b)->t.step_s;
    return x < y ? -1 : x > y;
}

/* Every candidate of base (its world and batch fixed) that the engine runs and that fits memory bytes (0: no
 * limit), fastest first, into out (SEARCH_MAX); returns how many; *refused counts the layouts the engine
 * refused, *over those over memory. r: job->world ranks of scratch. */
static inline int plan_search(const fsc_plan_job *base, const fsc_plan_rates *rt, double memory, plan_candidate *out,
                              fsc_plan_rank *r, int *refused, int *over) {
    static const struct { fsc_parallel_kind kind; fsc_shard_strategy shard; } strat[] = {
        {FSC_PAR_DDP, FSC_SHARD_FULL}, {FSC_PAR_FSDP, FSC_SHARD_FULL}, {FSC_PAR_FSDP, FSC_SHARD_GRAD_OP},
        {FSC_PAR_ZERO1, FSC_SHARD_FULL}, {FSC_PAR_ZERO2, FSC_SHARD_FULL},
    };
    static const int accums[] = {1, 2, 4, 8};
    int n = 0;
    *refused = *over = 0;
    for (int tp = 1; tp <= base->world; tp++) {
        for (int pp = 1; tp * pp <= base->world; pp++) {
            if (base->world % (tp * pp)) continue;
            const int dp = base->world / (tp * pp);
            for (size_t s = 0; s < sizeof strat / sizeof strat[0]; s++) {
                if (dp == 1 && s > 0) continue; /* one data rank: the strategies are the same */
                if (pp > 1 && strat[s].kind != FSC_PAR_DDP) continue; /* pipelines: ddp in each stage */
                for (size_t a = 0; a < sizeof accums / sizeof accums[0] && n < SEARCH_MAX; a++) {
                    if (base->batch % dp || (base->batch / dp) % accums[a]) continue;
                    plan_candidate c = {.kind = dp == 1 && pp == 1 && tp == 1 ? FSC_PAR_NONE : strat[s].kind,
                                        .shard = strat[s].shard, .pp = pp, .tp = tp, .accum = accums[a]};
                    if (search_one(base, rt, &c, r) != 0) (*refused)++;
                    else if (memory > 0 && (double)c.peak > memory) (*over)++;
                    else out[n++] = c;
                }
            }
        }
    }
    qsort(out, (size_t)n, sizeof *out, search_cmp);
    return n;
}

/* The table, fastest first, then what the winner's time is made of. */
static inline void plan_print_search(FILE *f, const plan_candidate *c, int n, int world, int refused, int over) {
    char b[32];
    fprintf(f, "%-4s %-8s %-8s %3s %3s %3s %5s %11s %10s %10s %10s\n", "#", "parallel", "shard", "tp", "pp", "dp",
            "accum", "peak", "ms/step", "compute", "comm");
    for (int i = 0; i < n; i++)
        fprintf(f, "%-4d %-8s %-8s %3d %3d %3d %5d %11s %10.2f %10.2f %10.2f\n", i + 1, search_parallel(&c[i]),
                c[i].kind == FSC_PAR_FSDP ? search_shard(&c[i]) : "-", c[i].tp, c[i].pp, world / (c[i].tp * c[i].pp),
                c[i].accum, plan_human(c[i].peak, b, sizeof b), c[i].t.step_s * 1e3, c[i].t.compute_s * 1e3,
                c[i].t.comm_s * 1e3);
    fprintf(f, "%d layouts fit, %d over the memory, %d refused by the engine\n", n, over, refused);
    if (n > 0)
        fprintf(f, "best: %s%s%s, tp %d, pp %d, accum %d: %s dominates its step (rank %d: compute %.2f ms, "
                   "communication %.2f ms)\n", search_parallel(&c[0]), c[0].kind == FSC_PAR_FSDP ? " " : "",
                c[0].kind == FSC_PAR_FSDP ? search_shard(&c[0]) : "", c[0].tp, c[0].pp, c[0].accum,
                c[0].t.compute_s >= c[0].t.comm_s ? "compute" : "communication", c[0].t.rank, c[0].t.compute_s * 1e3,
                c[0].t.comm_s * 1e3);
}

#endif
