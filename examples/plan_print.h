/* The planner's output for programs (fsc-plan, and fsc-train's --plan): the per-rank table and fsc-train's --json
 * memory fields of the peaks fsc_plan_memory predicts, with each rank's step work (gemm TFLOP, collective
 * GB) beside them, and the predicted step time with the rates it used (fsc/plan.h, docs/planning.md).
 * Not here: the planning (lib/plan), the options (examples/plan_tool.c). */
#ifndef FSC_EXAMPLES_PLAN_PRINT_H
#define FSC_EXAMPLES_PLAN_PRINT_H
#include <stdio.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "fsc/fsc.h"

static inline cJSON *plan_tag_object(const size_t *peak, size_t total) {
    cJSON *o = cJSON_CreateObject();
    for (int t = 0; t < FSC_TAG_COUNT; t++) cJSON_AddNumberToObject(o, fsc_tag_name((fsc_tag)t), (double)peak[t]);
    cJSON_AddNumberToObject(o, "total", (double)total);
    return o;
}

/* fsc-train's --json memory fields of the predicted peaks into o: peak_bytes (rank 0), per_rank, and with offload
 * host_peak_bytes and host_per_rank (the trainer's --plan puts them in its "predicted" object); and
 * work_per_rank: each rank's step, its gemm FLOPs and its collectives' bytes per group. */
static inline void plan_json_fields(cJSON *o, const fsc_plan_rank *r, int world) {
    cJSON_AddItemToObject(o, "peak_bytes", plan_tag_object(r[0].peak, r[0].peak_total));
    cJSON *pr = cJSON_AddArrayToObject(o, "per_rank");
    for (int i = 0; i < world; i++) cJSON_AddItemToArray(pr, plan_tag_object(r[i].peak, r[i].peak_total));
    cJSON *w = cJSON_AddArrayToObject(o, "work_per_rank"); /* the step's gemm FLOPs and collective bytes per group */
    for (int i = 0; i < world; i++) {
        cJSON *x = cJSON_CreateObject(), *g = cJSON_CreateObject();
        cJSON_AddNumberToObject(x, "gemm_flops", r[i].gemm_flops);
        for (int k = 0; k < FSC_GROUP_COUNT; k++)
            cJSON_AddNumberToObject(g, fsc_group_kind_name((fsc_group_kind)k), r[i].comm_bytes[k]);
        cJSON_AddItemToObject(x, "comm_bytes", g);
        cJSON_AddItemToArray(w, x);
    }
    if (!r[0].has_host) return;
    cJSON_AddItemToObject(o, "host_peak_bytes", plan_tag_object(r[0].host_peak, r[0].host_peak_total));
    pr = cJSON_AddArrayToObject(o, "host_per_rank");
    for (int i = 0; i < world; i++) cJSON_AddItemToArray(pr, plan_tag_object(r[i].host_peak, r[i].host_peak_total));
}

static inline const char *plan_human(size_t b, char *buf, size_t cap) {
    if (b >= (size_t)1 << 30) snprintf(buf, cap, "%.2f GiB", (double)b / 1073741824.0);
    else snprintf(buf, cap, "%.1f MiB", (double)b / 1048576.0);
    return buf;
}

/* One line per rank: its coordinates, each tag's peak, the total; the host's total with offload. Ranks whose
 * line equals the previous one's are folded into it ("ranks 2-7"). */
static inline double plan_comm_total(const fsc_plan_rank *r) {
    double b = 0;
    for (int g = 0; g < FSC_GROUP_COUNT; g++) b += r->comm_bytes[g];
    return b;
}

static inline void plan_print_table(FILE *f, const fsc_plan_rank *r, int world) {
    char b[FSC_TAG_COUNT + 2][32];
    fprintf(f, "%-11s %-12s", "rank", "tp/dp/pp");
    for (int t = 0; t < FSC_TAG_COUNT; t++) fprintf(f, " %11s", fsc_tag_name((fsc_tag)t));
    fprintf(f, " %11s%s %9s %9s\n", "total", r[0].has_host ? "        host" : "", "TFLOP", "comm GB");
    for (int i = 0; i < world;) {
        int k = i + 1;
        while (k < world && !memcmp(r[k].peak, r[i].peak, sizeof r[i].peak) && r[k].peak_total == r[i].peak_total &&
               r[k].host_peak_total == r[i].host_peak_total && r[k].gemm_flops == r[i].gemm_flops &&
               plan_comm_total(&r[k]) == plan_comm_total(&r[i]))
            k++;
        char who[24], at[24];
        if (k - i == 1) snprintf(who, sizeof who, "%d", i);
        else snprintf(who, sizeof who, "%d-%d", i, k - 1);
        snprintf(at, sizeof at, "%d/%d/%d", r[i].tensor, r[i].data, r[i].stage);
        fprintf(f, "%-11s %-12s", who, k - i == 1 ? at : "");
        for (int t = 0; t < FSC_TAG_COUNT; t++) fprintf(f, " %11s", plan_human(r[i].peak[t], b[t], sizeof b[t]));
        fprintf(f, " %11s", plan_human(r[i].peak_total, b[FSC_TAG_COUNT], sizeof b[0]));
        if (r[0].has_host) fprintf(f, " %11s", plan_human(r[i].host_peak_total, b[FSC_TAG_COUNT + 1], sizeof b[0]));
        fprintf(f, " %9.3f %9.3f\n", r[i].gemm_flops * 1e-12, plan_comm_total(&r[i]) * 1e-9);
        i = k;
    }
}

/* The rates of simulated ranks on this machine (fsc_plan_calibrate_clock: every rank measures at once, as they
 * share its cores when they train on the wall clock; on the virtual clock each its own thread's CPU time, and with
 * a job to fit, the memory roof fitted to that job's kernels, fsc_plan_fit_rates) and the simulated network's
 * link (GB/s, microseconds; 0: free) and host<->device copies (GB/s) as fsc-train's --sim-bandwidth,
 * --sim-latency and --sim-copy-bandwidth take them. */
static inline fsc_status plan_sim_rates(int world, int threads, int sim_clock, const fsc_plan_job *fit,
                                        double net_gbps, double net_us, double copy_gbps, fsc_plan_rates *rt) {
    FSC_TRY(fsc_plan_calibrate_clock(world, threads, sim_clock, rt));
    if (fit && sim_clock == FSC_SIM_CLOCK_VIRTUAL) FSC_TRY(fsc_plan_fit_rates(fit, rt));
    rt->host_bytes_per_s = rt->bytes_per_s; /* offload's host memory is the cpu device's own */
    rt->net_bytes_per_s = net_gbps * 1e9;
    rt->net_latency_s = net_us * 1e-6;
    rt->copy_bytes_per_s = copy_gbps * 1e9;
    return FSC_OK;
}

/* The predicted step and the rates behind it, as --json fields of o: ms_per_step, compute_ms, comm_ms, kernel_calls
 * and launch_ms (their fixed cost, part of compute_ms) of the slowest rank, slowest_rank, and rates {tflops,
 * memory_gbps, net_gbps, net_latency_us, host_gbps, kernel_us, ...}. */
static inline void plan_time_fields(cJSON *o, const fsc_plan_step *t, const fsc_plan_rates *rt) {
    cJSON_AddNumberToObject(o, "ms_per_step", t->step_s * 1e3);
    cJSON_AddNumberToObject(o, "compute_ms", t->compute_s * 1e3);
    cJSON_AddNumberToObject(o, "comm_ms", t->comm_s * 1e3);
    cJSON_AddNumberToObject(o, "slowest_rank", t->rank);
    cJSON_AddNumberToObject(o, "kernel_calls", t->calls);
    cJSON_AddNumberToObject(o, "launch_ms", t->calls_s * 1e3);
    cJSON *r = cJSON_AddObjectToObject(o, "rates");
    cJSON_AddNumberToObject(r, "tflops", rt->flops_per_s * 1e-12);
    cJSON_AddNumberToObject(r, "memory_gbps", rt->bytes_per_s * 1e-9);
    cJSON_AddNumberToObject(r, "net_gbps", rt->net_bytes_per_s * 1e-9);
    cJSON_AddNumberToObject(r, "net_latency_us", rt->net_latency_s * 1e6);
    cJSON_AddNumberToObject(r, "host_gbps", rt->host_bytes_per_s * 1e-9);
    cJSON_AddNumberToObject(r, "kernel_us", rt->kernel_s * 1e6);
    if (rt->node_ranks > 0) {
        cJSON_AddNumberToObject(r, "node_ranks", rt->node_ranks);
        cJSON_AddNumberToObject(r, "node_gbps", rt->node_bytes_per_s * 1e-9);
        cJSON_AddNumberToObject(r, "node_latency_us", rt->node_latency_s * 1e6);
    }
}

/* The table's last line: the predicted step, what it is made of, at which rates. */
static inline void plan_print_time(FILE *f, const fsc_plan_step *t, const fsc_plan_rates *rt, int prefetch) {
    fprintf(f, "predicted step: %.2f ms (rank %d: compute %.2f ms, communication %.2f ms, %s) at %.3f TFLOP/s, "
               "%.1f GB/s memory, network %.2f GB/s and %.1f us a link\n",
            t->step_s * 1e3, t->rank, t->compute_s * 1e3, t->comm_s * 1e3,
            prefetch ? "overlapped: prefetch" : "one after the other: no prefetch", rt->flops_per_s * 1e-12,
            rt->bytes_per_s * 1e-9, rt->net_bytes_per_s * 1e-9, rt->net_latency_s * 1e6);
    if (rt->kernel_s > 0)
        fprintf(f, "kernel calls: %.0f a step on rank %d at %.3g us each: %.2f ms of its compute\n", t->calls, t->rank,
                rt->kernel_s * 1e6, t->calls_s * 1e3);
    if (rt->node_ranks > 0)
        fprintf(f, "two levels: %d ranks a node, links within a node %.1f GB/s and %.1f us, between nodes above\n",
                rt->node_ranks, rt->node_bytes_per_s * 1e-9, rt->node_latency_s * 1e6);
}

#endif
