/* fsc-plan --search (docs/planning.md): the layouts of a job that fit a rank's memory, ranked by predicted step
 * time. Each candidate (strategy, fsdp sharding and wrapping, pipeline stages and schedule, tensor-parallel and
 * expert-parallel ranks, micro-batches; offload and activation checkpointing where it is over the memory) is
 * planned as fsc-plan plans one job (fsc_plan_memory first, then, if it fits, its step time at the same rates); one
 * the engine refuses (a layout the model does not divide) is left out and counted. The winner can be written as an
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
    fsc_wrap_policy wrap;       /* fsdp's units (--wrap): block or model (or the options' min-params) */
    size_t wrap_min_params;     /* FSC_WRAP_MIN_PARAMS: the options' N */
    int pp, tp, accum;
    int ep;                     /* expert-parallel ranks (MoE models; 1: none) */
    int recompute;              /* activation checkpointing (--recompute) */
    fsc_pipe_schedule schedule; /* pp > 1 */
    int vstages;                /* interleaved: chunks per rank (2 to 4); else 1 */
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

/* What a search did: layouts listed, over the memory, refused by the engine, planned (memory) and timed. */
typedef struct {
    int n, over, refused, planned, timed;
    int fit; /* layouts that fit: n of them listed, the fastest SEARCH_MAX when more */
} search_count;

enum { SEARCH_MAX = 4096 };
enum { SEARCH_MAX_CHUNKS = 4 }; /* interleaved: 2 to 4 chunks a rank */

/* fsc-train's --parallel, --shard, --wrap, --schedule, --offload and --precision words of a candidate */
static inline const char *search_parallel(const plan_candidate *c) {
    static const char *const name[] = {"none", "ddp", "fsdp", "zero1", "zero2"};
    return c->pp > 1 && c->kind == FSC_PAR_DDP ? "pipe" : name[c->kind];
}
static inline const char *search_shard(const plan_candidate *c) {
    static const char *const name[] = {"full", "grad_op", "none", "hybrid"};
    return name[c->shard];
}
static inline const char *search_wrap(const plan_candidate *c, char *buf, size_t cap) {
    if (c->wrap == FSC_WRAP_MODEL) return "model";
    if (c->wrap == FSC_WRAP_MIN_PARAMS) return snprintf(buf, cap, "min-params:%zu", c->wrap_min_params), buf;
    return "block";
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

/* The job of candidate c of base. */
static inline fsc_plan_job search_job(const fsc_plan_job *base, const plan_candidate *c) {
    static const fsc_dtype dtype[] = {FSC_F32, FSC_BF16, FSC_F16};
    fsc_plan_job j = *base;
    j.po.kind = c->kind, j.po.shard = c->shard, j.po.pp = c->pp, j.po.tp = c->tp, j.po.accum = c->accum;
    j.po.wrap = c->wrap, j.po.wrap_min_params = c->wrap_min_params, j.po.ep = c->ep;
    j.po.checkpoint = c->recompute, j.po.schedule = c->schedule, j.po.offload = c->offload;
    j.po.param_dtype = j.po.reduce_dtype = dtype[c->precision];
    /* sequence parallelism splits the tensor group's rows: a layout without one runs without it (the engine refuses
     * it at tp 1), as the winner's --config writes it only with tp > 1 */
    if (c->tp == 1) j.po.sequence_parallel = 0, j.sequence_parallel = 0;
    /* base's chunks and balance are for its pp and schedule: a candidate of another pp or number of chunks takes
     * its own chunks and the default balance, else the engine refuses it */
    if (c->pp == 1 || c->schedule != base->po.schedule) j.po.virtual_stages = 1;
    if (c->pp > 1 && c->schedule == FSC_SCHED_INTERLEAVED) j.po.virtual_stages = c->vstages;
    if (c->pp != base->po.pp || search_chunks(c->schedule, j.po.virtual_stages) !=
                                    search_chunks(base->po.schedule, base->po.virtual_stages))
        j.po.balance = NULL;
    return j;
}

/* Plan candidate c's memory: 0 and c->peak, c->tag filled, or -1 when the engine refuses the layout. */
static inline int search_memory(const fsc_plan_job *base, plan_candidate *c, fsc_plan_rank *r, search_count *k) {
    const fsc_plan_job j = search_job(base, c);
    k->planned++;
    if (fsc_plan_memory(&j, r) != FSC_OK) return -1;
    c->peak = 0;
    for (int i = 0; i < j.world; i++)
        if (r[i].peak_total > c->peak || i == 0) {
            c->peak = r[i].peak_total;
            memcpy(c->tag, r[i].peak, sizeof c->tag);
        }
    return 0;
}

/* The next offload of c's layout to try when it is over the memory (optim, then all: fsdp's) into *d: 1, or 0 for
 * none: offload runs with fsdp, zero1 and zero2 (inside pipeline stages too, and with tp; the search's pipelines
 * carry ddp); all with fsdp only. One data rank without a pipeline (dp 1) has one layout for every strategy, listed
 * as none (ddp with tp): it offloads as zero1, then as fsdp, as fsc-train runs them on one rank. */
static inline int search_more_offload(const plan_candidate *c, int dp, plan_candidate *d) {
    const int one = dp == 1 && c->pp == 1 && (c->kind == FSC_PAR_NONE || c->kind == FSC_PAR_DDP || c->kind ==
                                              FSC_PAR_ZERO1);
    *d = *c;
    if (c->offload == FSC_OFFLOAD_NONE && (c->kind == FSC_PAR_FSDP || c->kind == FSC_PAR_ZERO1 ||
                                           c->kind == FSC_PAR_ZERO2 || one)) {
        if (one) d->kind = FSC_PAR_ZERO1;
        return d->offload = FSC_OFFLOAD_OPTIM, 1;
    }
    if (c->offload == FSC_OFFLOAD_OPTIM && (c->kind == FSC_PAR_FSDP || one)) {
        if (one) d->kind = FSC_PAR_FSDP, d->shard = FSC_SHARD_FULL;
        return d->offload = FSC_OFFLOAD_ALL, 1;
    }
    return 0;
}

/* c into out, k->n of the fastest kept: appended while there is room, else in place of the slowest when faster. */
static inline void search_keep(plan_candidate *out, search_count *k, const plan_candidate *c) {
    k->fit++;
    if (k->n < SEARCH_MAX) {
        out[k->n++] = *c;
        return;
    }
    int slow = 0;
    for (int i = 1; i < k->n; i++)
        if (out[i].t.step_s > out[slow].t.step_s) slow = i;
    if (c->t.step_s < out[slow].t.step_s) out[slow] = *c;
}

/* One layout c (recompute 0 and offload base's): planned; when over memory, with its optimizer on the host, then
 * (fsdp) everything offload can take there; and, when the layout as given is over memory, with activation
 * checkpointing too, with the same offloads where that is over. Every version that fits is timed at sp's rates and
 * listed in out. Checkpointing and offload only add work, so a layout that fits without them is not planned with
 * them; memory first: a version over memory is not timed. */
static inline void search_layout(const fsc_plan_job *base, const search_space *sp, double memory, plan_candidate c0,
                                 plan_candidate *out, fsc_plan_rank *r, search_count *k) {
    const int dp = base->world / (c0.tp * c0.pp);
    for (int rc = 0; rc < 2; rc++) {
        plan_candidate c = c0;
        c.recompute = rc;
        if (search_memory(base, &c, r, k) != 0) {
            k->refused++;
            return; /* recomputation does not make a refused layout run */
        }
        const int over_plain = memory > 0 && (double)c.peak > memory;
        for (plan_candidate d; over_plain && (double)c.peak > memory && search_more_offload(&c, dp, &d);) {
            if (search_memory(base, &d, r, k) != 0) break; /* that offload refused: the layout stays over */
            c = d;
        }
        if (memory > 0 && (double)c.peak > memory) {
            k->over++;
        } else {
            const fsc_plan_job j = search_job(base, &c);
            k->timed++; /* r holds c's plan (the last planned fits): the formula reads it */
            if (plan_step_time(&j, r, &sp->rates[c.precision], sp->replay, &c.t) != FSC_OK) k->refused++;
            else search_keep(out, k, &c);
        }
        if (!over_plain) return; /* fits without recomputation: recomputing only adds work */
    }
}

static inline int search_cmp(const void *a, const void *b) {
    const double x = ((const plan_candidate *)a)->t.step_s, y = ((const plan_candidate *)b)->t.step_s;
    return x < y ? -1 : x > y;
}

/* The model's blocks (the layers a pipeline's stages split) and experts, 0 where the job's text says (config). */
static inline void search_model(const fsc_plan_job *j, int *blocks, int *experts) {
    *blocks = j->config ? 0 : j->model == FSC_PLAN_LLAMA ? j->llama.layers : j->gpt.layers;
    *experts = j->config ? 0 : j->model == FSC_PLAN_LLAMA ? j->llama.moe_experts : j->gpt.moe_experts;
}

/* 1 where the engine is sure to refuse candidate c of base, so that it is counted as refused without a plan (a
 * plan runs the setup of every rank: at 1024 ranks a refused layout took as long as one that runs, and most of a
 * large world's tp and pp sizes do not divide a small model): a GPT's tensor-parallel checks (fsc_tp_check_config,
 * the engine's own) and a pipeline of more chunks than blocks (the engine's check). The rest are planned. */
static inline int search_refuses(const fsc_plan_job *base, const plan_candidate *c, int blocks) {
    if (blocks > 0 && c->pp > 1 && (long long)c->pp * search_chunks(c->schedule, c->vstages) > blocks) return 1;
    if (!base->config && base->model == FSC_PLAN_GPT && c->tp > 1 && fsc_tp_check_config(&base->gpt, c->tp) != FSC_OK)
        return 1;
    return 0;
}

/* Every candidate of base (its world and batch fixed) that the engine runs and that fits memory bytes (0: no
 * limit), fastest first, into out (the fastest SEARCH_MAX); k counts what fit and was listed (n), over the memory, refused by the
 * engine, planned and timed. The layouts: tp and pp dividing the world, the strategies over the data ranks
 * (pipelines: ddp in each stage), fsdp's wrapping (block and model, and the options' min-params), expert
 * parallelism (MoE models without tp or pp: each ep dividing the data ranks and the experts), 1, 2, 4 or 8
 * micro-batches, the pipeline schedules gpipe, 1f1b, interleaved (2 to 4 chunks a rank where the stages have a
 * block each and the micro-batches are a multiple of pp), zb-h1 and zbv, sp's precisions; and where a layout is
 * over memory, offload (optim, then all) and activation checkpointing (search_layout). r: job->world ranks of
 * scratch. */
static inline int plan_search(const fsc_plan_job *base, const search_space *sp, double memory, plan_candidate *out,
                              fsc_plan_rank *r, search_count *k) {
    static const struct { fsc_parallel_kind kind; fsc_shard_strategy shard; } strat[] = {
        {FSC_PAR_DDP, FSC_SHARD_FULL}, {FSC_PAR_FSDP, FSC_SHARD_FULL}, {FSC_PAR_FSDP, FSC_SHARD_GRAD_OP},
        {FSC_PAR_FSDP, FSC_SHARD_HYBRID}, {FSC_PAR_ZERO1, FSC_SHARD_FULL}, {FSC_PAR_ZERO2, FSC_SHARD_FULL},
    };
    static const int accums[] = {1, 2, 4, 8};
    static const fsc_pipe_schedule scheds[] = {FSC_SCHED_GPIPE, FSC_SCHED_1F1B, FSC_SCHED_INTERLEAVED, FSC_SCHED_ZB_H1,
                                               FSC_SCHED_ZBV};
    int blocks = 0, experts = 0;
    search_model(base, &blocks, &experts);
    fsc_wrap_policy wraps[3] = {FSC_WRAP_BLOCK, FSC_WRAP_MODEL, FSC_WRAP_MIN_PARAMS};
    const int nwraps = base->po.wrap == FSC_WRAP_MIN_PARAMS ? 3 : 2;
    *k = (search_count){0};
    for (int tp = 1; tp <= base->world; tp++) {
        for (int pp = 1; tp * pp <= base->world; pp++) {
            if (base->world % (tp * pp)) continue;
            const int dp = base->world / (tp * pp);
            for (size_t s = 0; s < sizeof strat / sizeof strat[0]; s++) {
                if (dp == 1 && s > 0) continue; /* one data rank: the strategies are the same */
                if (pp > 1 && strat[s].kind != FSC_PAR_DDP) continue; /* pipelines: ddp in each stage */
                if (strat[s].shard == FSC_SHARD_HYBRID && (dp < 4 || dp % 2)) continue; /* two groups of 2 at least */
                const int fsdp = strat[s].kind == FSC_PAR_FSDP;
                for (int w = 0; w < (fsdp ? nwraps : 1); w++) {
                    for (int ep = 1; ep <= (experts > 0 && tp == 1 && pp == 1 && dp > 1 ? dp : 1); ep++) {
                        if (dp % ep || (experts > 0 && experts % ep)) continue;
                        for (size_t a = 0; a < sizeof accums / sizeof accums[0]; a++) {
                            if (base->batch % dp || (base->batch / dp) % accums[a]) continue;
                            for (size_t q = 0; q < (pp > 1 ? sizeof scheds / sizeof scheds[0] : 1); q++) {
                                const int il = pp > 1 && scheds[q] == FSC_SCHED_INTERLEAVED;
                                for (int v = il ? 2 : 1; v <= (il ? SEARCH_MAX_CHUNKS : 1); v++) {
                                    /* interleaved: a block a stage at least, micro-batches a multiple of pp */
                                    if (il && ((blocks > 0 && pp * v > blocks) || accums[a] % pp)) continue;
                                    for (int p = 0; p < sp->nprecision; p++) {
                                        plan_candidate c = {
                                            .kind = dp == 1 && pp == 1 && tp == 1 ? FSC_PAR_NONE : strat[s].kind,
                                            .shard = strat[s].shard,
                                            .wrap = fsdp ? wraps[w] : base->po.wrap,
                                            .wrap_min_params = base->po.wrap_min_params, .pp = pp, .tp = tp,
                                            .accum = accums[a], .ep = ep,
                                            .schedule = pp > 1 ? scheds[q] : base->po.schedule,
                                            .vstages = v, .offload = base->po.offload,
                                            .precision = sp->precision[p]};
                                        if (search_refuses(base, &c, blocks)) k->refused++;
                                        else search_layout(base, sp, memory, c, out, r, k);
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    qsort(out, (size_t)k->n, sizeof *out, search_cmp);
    return k->n;
}

/* The table, fastest first, then what the winner's time and memory are made of. */
static inline void plan_print_search(FILE *f, const plan_candidate *c, int world, const search_count *k) {
    char b[32], wb[40];
    const int n = k->n;
    fprintf(f, "%-4s %-8s %-8s %-6s %3s %3s %3s %3s %5s %4s %-11s %2s %-7s %-5s %11s %10s %10s %10s\n", "#",
            "parallel", "shard", "wrap", "tp", "pp", "dp", "ep", "accum", "rec", "sched", "v", "offload", "prec",
            "peak", "ms/step", "compute", "comm");
    for (int i = 0; i < n; i++)
        fprintf(f, "%-4d %-8s %-8s %-6s %3d %3d %3d %3d %5d %4d %-11s %2d %-7s %-5s %11s %10.2f %10.2f %10.2f\n", i + 1,
                search_parallel(&c[i]), c[i].kind == FSC_PAR_FSDP ? search_shard(&c[i]) : "-",
                c[i].kind == FSC_PAR_FSDP ? search_wrap(&c[i], wb, sizeof wb) : "-", c[i].tp, c[i].pp,
                world / (c[i].tp * c[i].pp), c[i].ep, c[i].accum, c[i].recompute,
                c[i].pp > 1 ? search_schedule(&c[i]) : "-", c[i].pp > 1 ? search_chunks(c[i].schedule, c[i].vstages) : 1, /* zbv: 2 */
                search_offload(&c[i]),
                search_precision(&c[i]), plan_human(c[i].peak, b, sizeof b), c[i].t.step_s * 1e3,
                c[i].t.compute_s * 1e3, c[i].t.comm_s * 1e3);
    char listed[48] = "";
    if (k->fit > n) snprintf(listed, sizeof listed, " (the fastest %d listed)", n);
    fprintf(f, "%d layouts fit%s, %d over the memory, %d refused by the engine (%d planned, %d timed)\n", k->fit,
            listed, k->over, k->refused, k->planned, k->timed);
    if (n == 0) return;
    int big = 0;
    for (int t = 1; t < FSC_TAG_COUNT; t++)
        if (c[0].tag[t] > c[0].tag[big]) big = t;
    char m[32], ep[24] = "";
    if (c[0].ep > 1) snprintf(ep, sizeof ep, ", ep %d", c[0].ep);
    fprintf(f, "best: %s%s%s%s%s, tp %d, pp %d%s, accum %d, recompute %d%s%s, offload %s, %s: %s dominates its step "
               "(rank %d: compute %.2f ms, communication %.2f ms, %s); its largest memory: %s (%s of %s)\n",
            search_parallel(&c[0]), c[0].kind == FSC_PAR_FSDP ? " " : "",
            c[0].kind == FSC_PAR_FSDP ? search_shard(&c[0]) : "", c[0].kind == FSC_PAR_FSDP ? ", wrap " : "",
            c[0].kind == FSC_PAR_FSDP ? search_wrap(&c[0], wb, sizeof wb) : "", c[0].tp, c[0].pp, ep, c[0].accum,
            c[0].recompute, c[0].pp > 1 ? ", schedule " : "", c[0].pp > 1 ? search_schedule(&c[0]) : "",
            search_offload(&c[0]), search_precision(&c[0]),
            c[0].t.compute_s >= c[0].t.comm_s ? "compute" : "communication", c[0].t.rank, c[0].t.compute_s * 1e3,
            c[0].t.comm_s * 1e3, c[0].t.step_s < c[0].t.compute_s + c[0].t.comm_s ? "overlapped" : "one after the other",
            fsc_tag_name((fsc_tag)big), plan_human(c[0].tag[big], b, sizeof b), plan_human(c[0].peak, m, sizeof m));
}

#endif
