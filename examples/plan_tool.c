/* fsc-plan: each rank's peak memory of a training job before it is launched, its predicted step time, and the
 * fastest layout that fits (docs/planning.md).
 * Takes fsc-train's options, parsed by the trainer's own table, defaults, --config files and checks (plan_args.h),
 * plans the job fsc-train would run with them (job.c's plan_job, as fsc-train --plan does) and prints, per rank,
 * the ledger's peak bytes per tag that fsc-train would report for two steps or more (its --json per_rank), found by
 * running the engine's setup and two steps on the counting device (fsc/plan.h): nothing is allocated beyond a few
 * kilobytes per rank, so a Llama 3 8B on 8 ranks answers in a fraction of a second. --json prints fsc-train's
 * peak_bytes, per_rank, host_peak_bytes and host_per_rank fields. Then the predicted step time (fsc_plan_time) at
 * a rank's rates (given; a --cluster preset's; or this machine's cpu device calibrated and shared among simulated
 * ranks) over fsc-train's simulated network (--sim-bandwidth, --sim-latency) or the cluster's two levels of links.
 * --search plans every layout of the world instead (plan_search.h), ranks those that fit --memory by predicted
 * time, and --search-config FILE writes the fastest as an fsc-train --config file.
 * Not here: the planning (lib/plan), the options (plan_args.h, examples/train/options.c). */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "fsc/fsc.h"
#include "plan_args.h"
#include "plan_print.h"
#include "plan_search.h"

static const char *prog = "fsc-plan";

static void plan_usage(FILE *f) {
    fprintf(f, "usage: %s [options]\n"
               "Each rank's peak memory per tag for fsc-train with the same options, from the engine's setup and one\n"
               "step run on the counting device (nothing allocated), and the predicted step time at a rank's rates over\n"
               "the network; --search ranks every layout that fits --memory. The planner's options:\n", prog);
    for (int i = 0; i < PLAN_NOPT; i++) {
        const plan_option *o = &plan_options[i];
        char left[48];
        snprintf(left, sizeof left, "--%s%s%s", o->name, o->arg ? " " : "", o->arg ? o->arg : "");
        fprintf(f, "  %-24s %s%s%s%s\n", left, o->help, o->def ? " (default " : "", o->def ? o->def : "", o->def ? ")" : "");
    }
    fprintf(f, "and fsc-train's options, the same table (those of the model, the layout, the job, --config FILE, --json,\n"
               "--threads: BLAS threads a rank when calibrating, --sim-bandwidth and --sim-latency: the network):\n");
    for (int i = 0; i < NOPT; i++) {
        const option *o = &options[i];
        char left[48];
        snprintf(left, sizeof left, "--%s%s%s", o->name, o->arg ? " " : "", o->arg ? o->arg : "");
        fprintf(f, "  %-24s %s%s%s%s\n", left, o->help, o->def ? " (default " : "", o->def ? o->def : "", o->def ? ")" : "");
    }
    fprintf(f, "  %-24s %s\n  %-24s %s\n", "--help", "this text", "--version", "the version");
}

/* --time auto replays up to these many ranks: this machine's rates (one level of links), a --cluster preset's (two
 * levels). A replay runs the setup and two steps on the counting device, the formula one: a Llama 3 8B with fsdp
 * on h100-sxm-8 nodes took 2.8 s replayed against 0.7 s by the formula at 16 ranks, 13.8 s against 3.2 s at 64, on
 * two loaded cores (docs/planning.md). */
enum { PLAN_REPLAY_RANKS = 64, PLAN_REPLAY_RANKS_CLUSTER = 16 };

/* Whether the step time is replayed (--time replay, or auto up to the ranks above). */
static int plan_replays(const plan_config *c, const fsc_plan_rates *rt) {
    if (c->time_model == 1) return 1;
    return c->time_model == 0 && c->t.world <= (rt->node_ranks > 0 ? PLAN_REPLAY_RANKS_CLUSTER : PLAN_REPLAY_RANKS);
}

/* How many ranks' peak totals exceed memory bytes; their numbers into over (cap bytes, may be NULL), runs of three
 * or more consecutive ranks as "a-b", ending in " ..." when cap cuts the list short. */
static int plan_over(const fsc_plan_rank *r, int world, double memory, char *over, size_t cap) {
    int n = 0, cut = 0;
    size_t used = 0;
    if (over && cap) over[0] = '\0';
    for (int i = 0; i < world; i++) {
        if ((double)r[i].peak_total <= memory) continue;
        int j = i;
        while (j + 1 < world && (double)r[j + 1].peak_total > memory) j++;
        if (j == i + 1) j = i; /* two ranks: "0 1" */
        n += j - i + 1;
        char run[32];
        if (j > i) snprintf(run, sizeof run, "%s%d-%d", used ? " " : "", i, j);
        else snprintf(run, sizeof run, "%s%d", used ? " " : "", i);
        if (over && !cut && used + strlen(run) + 5 < cap) used += (size_t)snprintf(over + used, cap - used, "%s", run);
        else cut = 1;
        i = j;
    }
    if (over && cut && used + 5 <= cap) snprintf(over + used, cap - used, " ...");
    return n;
}

/* The rates of the step time: those given, then --cluster's, the rest this machine's (calibrated as the world's
 * simulated ranks; on --sim-clock virtual the memory roof fitted to job's kernels, fsc_plan_fit_rates). */
static fsc_status rates(const plan_config *c, const fsc_plan_job *job, fsc_plan_rates *rt) {
    *rt = (fsc_plan_rates){.flops_per_s = c->tflops * 1e12, .bytes_per_s = c->mem_bandwidth * 1e9,
                           .net_bytes_per_s = c->t.sim_bandwidth * 1e9, .net_latency_s = c->t.sim_latency * 1e-6,
                           .copy_bytes_per_s = c->t.sim_copy * 1e9};
    const cluster_preset *p = plan_preset(c);
    if (p) {
        if (!(rt->flops_per_s > 0)) rt->flops_per_s = (c->t.precision == 0 ? p->tflops_fp32 : p->tflops_bf16) * 1e12;
        if (!(rt->bytes_per_s > 0)) rt->bytes_per_s = p->hbm_gbps * 1e9;
        if (!(rt->net_bytes_per_s > 0)) rt->net_bytes_per_s = p->ib_gbps * 1e9;
        if (!(rt->net_latency_s > 0)) rt->net_latency_s = p->ib_us * 1e-6;
        rt->node_ranks = p->ranks;
        rt->node_bytes_per_s = p->nvlink_gbps * 1e9;
        rt->node_latency_s = p->nvlink_us * 1e-6;
        rt->host_bytes_per_s = p->host_gbps * 1e9;
        rt->kernel_s = (c->launch_given ? c->launch_us : p->launch_us) * 1e-6;
        return FSC_OK;
    }
    if (!(c->tflops > 0) || !(c->mem_bandwidth > 0)) {
        fsc_plan_rates cal;
        FSC_TRY(plan_sim_rates(c->t.world, c->t.threads, c->t.sim_clock, job, c->t.sim_bandwidth, c->t.sim_latency,
                                     c->t.sim_copy, &cal));
        if (!(c->tflops > 0)) rt->flops_per_s = cal.flops_per_s;
        if (!(c->mem_bandwidth > 0)) rt->bytes_per_s = cal.bytes_per_s;
        rt->kernel_s = cal.kernel_s; /* this machine's calls, with its rates */
    }
    if (c->launch_given) rt->kernel_s = c->launch_us * 1e-6; /* a given call cost wins over the calibrated */
    rt->host_bytes_per_s = rt->bytes_per_s; /* the cpu device's host memory is its own */
    return FSC_OK;
}

/* --search-config: the options given (the trainer's record of them, config_object) but those of the layout (and
 * --checkpoint where the winner is no pipeline), and the winner's layout (its --wrap with fsdp, its --ep with
 * experts), as fsc-train's --config JSON; 0, or -1 (said on stderr). */
static int write_config(const plan_config *c, const plan_candidate *w) {
    static const char *const layout[] = {"parallel", "shard", "wrap", "tp", "pp", "dp", "ep", "world", "batch",
                                         "accum", "chunks", "recompute", "schedule", "virtual-stages", "offload",
                                         "precision", "config", "json", "plan", "balance", "sequence-parallel"};
    cJSON *all = config_object(&c->t), *o = cJSON_CreateObject();
    for (int i = 0; all && o && i < NOPT; i++) {
        int skip = !c->given[i];
        for (size_t k = 0; k < sizeof layout / sizeof layout[0] && !skip; k++) skip = !strcmp(options[i].name, layout[k]);
        if (w->pp == 1 && !strcmp(options[i].name, "checkpoint")) skip = 1;   /* a pipeline's only */
        if (w->pp == 1 && w->ep <= 1 && (w->kind == FSC_PAR_NONE || w->kind == FSC_PAR_DDP) &&
            !strcmp(options[i].name, "check-ddp"))
            skip = 1; /* a ddp winner is its own oracle: fsc-train refuses --check-ddp there */
        const cJSON *v = skip ? NULL : cJSON_GetObjectItemCaseSensitive(all, options[i].name);
        if (v) cJSON_AddItemToObject(o, options[i].name, cJSON_Duplicate(v, 1));
    }
    cJSON_Delete(all);
    cJSON_AddNumberToObject(o, "world", c->t.world);
    cJSON_AddNumberToObject(o, "batch", c->t.batch);
    cJSON_AddStringToObject(o, "parallel", search_parallel(w));
    char wb[40];
    if (w->kind == FSC_PAR_FSDP) cJSON_AddStringToObject(o, "shard", search_shard(w));
    if (w->kind == FSC_PAR_FSDP) cJSON_AddStringToObject(o, "wrap", search_wrap(w, wb, sizeof wb));
    if (w->ep > 1) cJSON_AddNumberToObject(o, "ep", w->ep);
    cJSON_AddNumberToObject(o, "tp", w->tp);
    cJSON_AddNumberToObject(o, "pp", w->pp);
    cJSON_AddNumberToObject(o, "accum", w->accum);
    cJSON_AddNumberToObject(o, "recompute", w->recompute);
    if (w->pp > 1) cJSON_AddStringToObject(o, "schedule", search_schedule(w));
    if (w->pp > 1 && w->schedule == FSC_SCHED_INTERLEAVED) cJSON_AddNumberToObject(o, "virtual-stages", w->vstages);
    if (w->pp > 1 && w->pp == c->t.pp && c->t.balance && config_chunks(&c->t) == search_chunks(w->schedule, 1))
        cJSON_AddStringToObject(o, "balance", c->t.balance); /* the user's, when it counts the winner's stages */
    cJSON_AddStringToObject(o, "offload", search_offload(w));
    cJSON_AddStringToObject(o, "precision", search_precision(w));
    if (c->t.sequence_parallel && w->tp > 1) cJSON_AddTrueToObject(o, "sequence-parallel");
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    FILE *f = text ? fopen(c->search_config, "w") : NULL;
    int bad = !f || fprintf(f, "%s\n", text) < 0;
    if (f && fclose(f) != 0) bad = 1;
    free(text);
    if (bad) fprintf(stderr, "%s: --search-config %s: cannot write it\n", prog, c->search_config);
    return bad ? -1 : 0;
}

/* --search: every layout, the table (or --json's "search" array), the winner's --config file. */
static int search(const plan_config *c, const fsc_plan_job *job, const fsc_plan_rates *rt, fsc_plan_rank *r) {
    const double memory = c->memory_bytes;
    plan_candidate *cand = calloc(SEARCH_MAX, sizeof *cand);
    if (!cand) return fprintf(stderr, "%s: out of memory\n", prog), 1;
    search_space sp = {.precision = {c->t.precision}, .nprecision = 1, .replay = plan_replays(c, rt)};
    if (c->search_precision) sp.precision[0] = 0, sp.precision[1] = 1, sp.nprecision = 2;
    for (int p = 0; p < 3; p++) { /* a cluster's matrix rate is its precision's; the rest alike */
        sp.rates[p] = *rt;
        const cluster_preset *pre = plan_preset(c);
        if (pre && !(c->tflops > 0)) sp.rates[p].flops_per_s = (p == 0 ? pre->tflops_fp32 : pre->tflops_bf16) * 1e12;
    }
    search_count k;
    const int n = plan_search(job, &sp, memory, cand, r, &k);
    if (c->t.json) {
        cJSON *root = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(root, "search");
        for (int i = 0; i < n; i++) {
            cJSON *x = cJSON_CreateObject();
            cJSON_AddStringToObject(x, "parallel", search_parallel(&cand[i]));
            char wb[40];
            cJSON_AddStringToObject(x, "shard", search_shard(&cand[i]));
            cJSON_AddStringToObject(x, "wrap", search_wrap(&cand[i], wb, sizeof wb));
            cJSON_AddNumberToObject(x, "ep", cand[i].ep);
            cJSON_AddNumberToObject(x, "tp", cand[i].tp);
            cJSON_AddNumberToObject(x, "pp", cand[i].pp);
            cJSON_AddNumberToObject(x, "accum", cand[i].accum);
            cJSON_AddNumberToObject(x, "recompute", cand[i].recompute);
            cJSON_AddStringToObject(x, "schedule", search_schedule(&cand[i]));
            cJSON_AddNumberToObject(x, "virtual_stages", cand[i].pp > 1 ? search_chunks(cand[i].schedule, cand[i].vstages) : 1); /* chunks */
            cJSON_AddStringToObject(x, "offload", search_offload(&cand[i]));
            cJSON_AddStringToObject(x, "precision", search_precision(&cand[i]));
            cJSON_AddNumberToObject(x, "peak_bytes", (double)cand[i].peak);
            cJSON_AddNumberToObject(x, "ms_per_step", cand[i].t.step_s * 1e3);
            cJSON_AddNumberToObject(x, "compute_ms", cand[i].t.compute_s * 1e3);
            cJSON_AddNumberToObject(x, "comm_ms", cand[i].t.comm_s * 1e3);
            cJSON_AddItemToArray(a, x);
        }
        cJSON_AddNumberToObject(root, "fit", k.fit); /* layouts that fit; listed: the fastest SEARCH_MAX */
        cJSON_AddNumberToObject(root, "refused", k.refused);
        cJSON_AddNumberToObject(root, "over_memory", k.over);
        cJSON_AddNumberToObject(root, "planned", k.planned);
        cJSON_AddNumberToObject(root, "timed", k.timed);
        cJSON_AddStringToObject(root, "time", sp.replay ? "replay" : "formula");
        char *text = cJSON_PrintUnformatted(root);
        cJSON_Delete(root);
        if (text) printf("%s\n", text);
        free(text);
    } else {
        plan_print_search(stdout, cand, c->t.world, &k);
    }
    int rc = 0;
    if (n == 0) fprintf(stderr, "%s: --search: no layout of world %d fits%s%s\n", prog, c->t.world,
                        c->memory ? " in " : "", c->memory ? c->memory : ""), rc = 1;
    else if (c->search_config && write_config(c, &cand[0]) != 0) rc = 1;
    free(cand);
    return rc;
}


int main(int argc, char **argv) {
    for (int a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "--help") || !strcmp(argv[a], "-h")) return plan_usage(stdout), 0;
        if (!strcmp(argv[a], "--version")) return printf("%s %s\n", prog, fsc_version_string()), 0;
    }
    plan_config *c = calloc(1, sizeof *c);
    if (!c) return fprintf(stderr, "%s: out of memory\n", prog), 1;
    fsc_plan_job job;
    char err[512];
    if (plan_parse(argc, argv, c, err, sizeof err) != 0) { /* --help and --version were answered above */
        fprintf(stderr, "%s: %s\n", prog, err);
        free_schedule_file(&c->t);
        free(c->t.strs);
        free(c);
        return 2;
    }
    fsc_status s = plan_job(&c->t, c->balance, &job);
    job.seed = 1;
    job.whole_products = plan_preset(c) != NULL; /* a GPU cluster runs attention's products whole */
    fsc_plan_rank *r = s == FSC_OK ? calloc((size_t)c->t.world, sizeof *r) : NULL;
    if (s == FSC_OK && !r) s = fsc_error(FSC_ERR_NOMEM, "out of memory for %d ranks", c->t.world);
    fsc_plan_rates rt;
    if (s == FSC_OK) s = rates(c, &job, &rt);
    int rc = 0;
    if (s == FSC_OK && c->search) {
        rc = search(c, &job, &rt, r);
        plan_job_free(&job);
        free(r);
        free_schedule_file(&c->t);
        free(c->t.strs);
        free(c);
        return rc;
    }
    if (s == FSC_OK) s = fsc_plan_memory(&job, r);
    fsc_plan_step step = {0};
    const int replay = s == FSC_OK && plan_replays(c, &rt);
    if (s == FSC_OK) s = plan_step_time(&job, r, &rt, replay, &step);
    const int world = c->t.world;
    const double memory = c->memory_bytes;
    if (s != FSC_OK) {
        fprintf(stderr, "%s: %s\n", prog, fsc_last_error());
        rc = 1;
    } else if (c->t.json) {
        cJSON *root = cJSON_CreateObject();
        plan_json_fields(root, r, world);
        plan_time_fields(root, &step, &rt);
        cJSON_AddStringToObject(root, "time", replay ? "replay" : "formula");
        if (memory > 0) {
            cJSON_AddNumberToObject(root, "memory_bytes", memory);
            cJSON_AddBoolToObject(root, "fits", plan_over(r, world, memory, NULL, 0) == 0);
        }
        char *text = cJSON_PrintUnformatted(root);
        cJSON_Delete(root);
        if (text) {
            printf("%s\n", text);
        } else {
            fprintf(stderr, "%s: out of memory\n", prog);
            rc = 1;
        }
        free(text);
    } else {
        plan_print_table(stdout, r, world);
        plan_print_time(stdout, &step, &rt, c->t.prefetch);
        printf("step composed by %s\n", replay ? "the replay (the engine's own order of work)"
                                                : "the formula (max(compute, comm) with prefetch, else their sum)");
        char over[256];
        int n = memory > 0 ? plan_over(r, world, memory, over, sizeof over) : 0;
        if (memory > 0 && n) printf("does not fit in %s: %d rank%s over (%s)\n", c->memory, n, n == 1 ? "" : "s", over);
        else if (memory > 0) printf("fits in %s on every rank\n", c->memory);
    }
    plan_job_free(&job);
    free(r);
    free_schedule_file(&c->t);
    free(c->t.strs);
    free(c);
    return rc;
}
