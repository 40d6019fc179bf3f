/* Tests of fsc-plan (examples/plan_tool.c) against fsc-train. Oracle: for the same options, fsc-plan --json's
 * per_rank (and host_per_rank with offload) equal fsc-train --steps 1 --json's, byte for byte and tag by tag on
 * every rank (the trainer's --peak-tflops is given so that its rank 0 does not first measure its device, which
 * takes workspace no training takes); a Llama 3 8B shape on 8 ranks is planned in a process that stays small;
 * --memory says a rank fits exactly when its peak total is at most the size; bad options are refused with a
 * message naming them. */
#include <cjson/cJSON.h>
#include <libgen.h>
#include <math.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include "trainertest.h"
#include "../examples/plan_search.h" /* search_keep */

static char planner[PATH_MAX], trainer[PATH_MAX];
static char tmpdir[64];

#define SMALL "--layers 2 --dim 64 --heads 4 --seq 32 --vocab 256 --batch 4"

static void same_array(const cJSON *a, const cJSON *b, const char *key, const char *args) {
    const cJSON *x = cJSON_GetObjectItem(a, key), *y = cJSON_GetObjectItem(b, key);
    if (!x || !y) fail_msg("%s: %s missing (planned %p, trained %p)", args, key, (void *)x, (void *)y);
    assert_int_equal(cJSON_GetArraySize(x), cJSON_GetArraySize(y));
    for (int r = 0; r < cJSON_GetArraySize(x); r++) {
        const cJSON *px = cJSON_GetArrayItem(x, r), *py = cJSON_GetArrayItem(y, r);
        for (int t = 0; t <= FSC_TAG_COUNT; t++) {
            const char *tag = t < FSC_TAG_COUNT ? fsc_tag_name((fsc_tag)t) : "total";
            double vx = cJSON_GetNumberValue(cJSON_GetObjectItem(px, tag));
            double vy = cJSON_GetNumberValue(cJSON_GetObjectItem(py, tag));
            if (vx != vy) fail_msg("%s: %s rank %d %s: planned %.0f, trained %.0f", args, key, r, tag, vx, vy);
        }
    }
}

static void check_against_trainer(const char *args, int host) {
    char *targs = prog_fmt("%s --steps 1 --peak-tflops 1", args);
    cJSON *p = prog_json(planner, tmpdir, "", args), *t = prog_json(trainer, tmpdir, "", targs);
    same_array(p, t, "per_rank", args);
    if (host) same_array(p, t, "host_per_rank", args);
    else assert_null(cJSON_GetObjectItem(p, "host_per_rank"));
    cJSON_Delete(p);
    cJSON_Delete(t);
    free(targs);
}

static void test_plan_equals_trainer(void **st) {
    (void)st;
    check_against_trainer(SMALL, 0);
    check_against_trainer(SMALL " --world 2 --parallel ddp", 0);
    check_against_trainer(SMALL " --world 4 --parallel fsdp --shard hybrid --precision bf16", 0);
    check_against_trainer(SMALL " --world 2 --parallel fsdp --shard grad_op --wrap model", 0);
    check_against_trainer(SMALL " --world 2 --parallel zero1 --optimizer sgd", 0);
    check_against_trainer(SMALL " --world 2 --parallel zero2 --offload optim", 1);
    check_against_trainer(SMALL " --world 2 --parallel fsdp --offload all --prefetch 0", 1);
    check_against_trainer(SMALL " --world 4 --pp 2 --parallel pipe --accum 2 --schedule 1f1b", 0);
    check_against_trainer("--model llama " SMALL " --kv-heads 2 --world 4 --tp 2 --parallel fsdp --sequence-parallel", 0);
    check_against_trainer(SMALL " --world 2 --parallel ddp --moe-experts 4 --moe-top-k 2 --ep 2", 0);
    check_against_trainer(SMALL " --world 2 --parallel fsdp --recompute 1 --accum 2", 0);
    check_against_trainer(SMALL " --world 2 --pp 2 --parallel pipe --accum 2 --schedule zb-h1", 0);
    check_against_trainer(SMALL " --layers 8 --world 2 --pp 2 --parallel pipe --accum 2 --schedule interleaved "
                                "--virtual-stages 4", 0);
    /* a schedule of one's own (--schedule-file), as fsc-train takes it: zb-h1's lists with the last rank's Ws late */
    char path[128];
    snprintf(path, sizeof path, "%s/own.sched", tmpdir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("placement loop\n0F0 0F1 0B0 0W0 0B1 0W1\n1F0 1B0 1F1 1B1 1W0 1W1\n", f);
    fclose(f);
    char *args = prog_fmt(SMALL " --world 2 --pp 2 --parallel pipe --accum 2 --schedule-file %s", path);
    check_against_trainer(args, 0);
    char *search = prog_fmt("%s --search", args);
    prog_refused(planner, search, tmpdir, 2, "--search varies the built-in schedules: leave out --schedule-file");
    free(search);
    free(args);
    prog_refused(planner, SMALL " --world 2 --pp 2 --accum 2 --print-schedule", tmpdir, 2,
                 "--print-schedule is fsc-train's");
}

/* fsc-train --plan: its --json's "predicted" per_rank (host_per_rank with offload) equal the same run's measured
 * ones, byte for byte and tag by tag; the table is printed before the first step. */
static void check_trainer_plan(const char *args, int host) {
    char *targs = prog_fmt("%s --steps 1 --peak-tflops 1 --plan", args);
    cJSON *t = prog_json(trainer, tmpdir, "", targs);
    const cJSON *p = cJSON_GetObjectItem(t, "predicted");
    if (!p) fail_msg("%s: no \"predicted\" object", targs);
    same_array(p, t, "per_rank", targs);
    if (host) same_array(p, t, "host_per_rank", targs);
    assert_true(cJSON_GetNumberValue(cJSON_GetObjectItem(p, "ms_per_step")) > 0); /* and the step time */
    cJSON_Delete(t);
    free(targs);
}

static void test_trainer_plan(void **st) {
    (void)st;
    check_trainer_plan(SMALL " --world 2 --parallel zero2 --offload optim", 1);
    check_trainer_plan(SMALL " --world 4 --pp 2 --parallel pipe --accum 2 --schedule 1f1b", 0);
    check_trainer_plan("--model llama " SMALL " --kv-heads 2 --world 4 --tp 2 --parallel fsdp --sequence-parallel", 0);
    char *out = NULL;
    assert_int_equal(prog_run(trainer, SMALL " --steps 1 --plan --world 2 --parallel fsdp", tmpdir, &out, NULL), 0);
    const char *table = strstr(out, "predicted per rank (--plan):"), *step = strstr(out, "step    1/1");
    assert_non_null(table);
    assert_non_null(step);
    assert_true(table < step);
    assert_non_null(strstr(table, "0-1 "));
    free(out);
    cJSON *t = prog_json(trainer, tmpdir, SMALL, "--steps 1");
    assert_null(cJSON_GetObjectItem(t, "predicted")); /* only with --plan */
    cJSON_Delete(t);
}

/* The step time at given rates: twice the device's rates halve the compute; the network's time is the same;
 * the rates are those given. */
static void test_plan_time_rates(void **st) {
    (void)st;
    const char *net = "--world 2 --parallel fsdp --sim-bandwidth 0.5 --sim-latency 20";
    char *a1 = prog_fmt("%s --tflops 0.1 --mem-bandwidth 10", net), *a2 = prog_fmt("%s --tflops 0.2 --mem-bandwidth 20", net);
    cJSON *j1 = prog_json(planner, tmpdir, SMALL, a1), *j2 = prog_json(planner, tmpdir, SMALL, a2);
    const double c1 = cJSON_GetNumberValue(cJSON_GetObjectItem(j1, "compute_ms"));
    const double c2 = cJSON_GetNumberValue(cJSON_GetObjectItem(j2, "compute_ms"));
    assert_true(c1 > 0 && fabs(c1 - 2 * c2) <= 1e-9 * c1);
    assert_true(cJSON_GetNumberValue(cJSON_GetObjectItem(j1, "comm_ms")) > 0);
    assert_true(cJSON_GetNumberValue(cJSON_GetObjectItem(j1, "comm_ms")) ==
                cJSON_GetNumberValue(cJSON_GetObjectItem(j2, "comm_ms")));
    const cJSON *r = cJSON_GetObjectItem(j1, "rates");
    assert_true(fabs(cJSON_GetNumberValue(cJSON_GetObjectItem(r, "tflops")) - 0.1) < 1e-7); /* a float option */
    assert_true(fabs(cJSON_GetNumberValue(cJSON_GetObjectItem(r, "net_latency_us")) - 20) < 1e-5);
    cJSON_Delete(j1);
    cJSON_Delete(j2);
    free(a1);
    free(a2);
    prog_refused(planner, "--tflops -1", tmpdir, 2, "--tflops '-1'");
    prog_refused(planner, "--sim-latency x", tmpdir, 2, "--sim-latency: 'x' is not a decimal number");
}

/* --cluster: the preset's figures (docs/planning.md) as the rates, its GPU memory as --memory's default, --nodes x
 * 8 ranks as the world; bf16 takes the tensor-core rate, fp32 the other; a given rate wins. */
static void test_plan_cluster(void **st) {
    (void)st;
    cJSON *j = prog_json(planner, tmpdir, SMALL, "--cluster h100-sxm-8 --nodes 2 --parallel fsdp --batch 16 --precision bf16");
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "per_rank")), 16);
    assert_true(cJSON_GetNumberValue(cJSON_GetObjectItem(j, "memory_bytes")) == 80e9);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(j, "fits")));
    const cJSON *r = cJSON_GetObjectItem(j, "rates");
    assert_true(fabs(cJSON_GetNumberValue(cJSON_GetObjectItem(r, "tflops")) - 989.4) < 1e-9);
    assert_true(fabs(cJSON_GetNumberValue(cJSON_GetObjectItem(r, "memory_gbps")) - 3350) < 1e-9);
    assert_int_equal((int)cJSON_GetNumberValue(cJSON_GetObjectItem(r, "node_ranks")), 8);
    assert_true(fabs(cJSON_GetNumberValue(cJSON_GetObjectItem(r, "node_gbps")) - 450) < 1e-9);
    assert_true(fabs(cJSON_GetNumberValue(cJSON_GetObjectItem(r, "net_gbps")) - 50) < 1e-9);
    cJSON_Delete(j);
    j = prog_json(planner, tmpdir, SMALL, "--cluster a100-sxm-8 --world 8 --batch 8 --parallel ddp --tflops 7");
    r = cJSON_GetObjectItem(j, "rates");
    assert_true(fabs(cJSON_GetNumberValue(cJSON_GetObjectItem(r, "tflops")) - 7) < 1e-6);
    assert_true(fabs(cJSON_GetNumberValue(cJSON_GetObjectItem(r, "memory_gbps")) - 2039) < 1e-9);
    cJSON_Delete(j);
    j = prog_json(planner, tmpdir, SMALL, "--cluster h200-8 --batch 8 --parallel ddp");
    assert_true(fabs(cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "rates"), "tflops")) - 66.9) < 1e-9);
    assert_true(cJSON_GetNumberValue(cJSON_GetObjectItem(j, "memory_bytes")) == 141e9);
    cJSON_Delete(j);
    prog_refused(planner, "--nodes 2", tmpdir, 2, "--nodes needs --cluster");
    /* --search-config where no file can be written: refused before the search (it failed after it, exit 1) */
    prog_refused(planner, SMALL " --world 2 --search --search-config /nonexistent/dir/x.json", tmpdir, 2,
                 "cannot write into /nonexistent/dir");
    /* a step past 2^64 FLOPs: refused (the counters wrapped: a step's time from a count mod 2^64) */
    prog_refused(planner, "--layers 1024 --dim 65536 --heads 64 --seq 131072 --batch 1 --cluster h100-sxm-8 --world 1",
                 tmpdir, 1, "pass 2^64 FLOPs");
    prog_refused(planner, "--cluster h100-sxm-8 --nodes 2 --world 8", tmpdir, 2, "--world 8 is not --nodes 2 x 8");
    prog_refused(planner, "--cluster h100-sxm-8 --nodes 129", tmpdir, 2, "is 1032 ranks: fsc plans at most 1024");
    prog_refused(planner, "--cluster v100", tmpdir, 2, "--cluster 'v100'");
    /* the replay on the cluster's two levels: --time auto replays 2 nodes (16 ranks), not 4; with prefetch 0 the
     * replayed step of ddp is compute + comm, the formula's terms of the two-level model */
    static const struct { const char *args, *time; } when[] = {
        {"--nodes 2 --batch 16 --time replay", "replay"}, {"--nodes 2 --batch 16", "replay"},
        {"--nodes 4 --batch 32", "formula"}, {"--nodes 2 --batch 16 --time formula", "formula"}};
    for (size_t k = 0; k < sizeof when / sizeof when[0]; k++) {
        char *args = prog_fmt("--cluster h100-sxm-8 --parallel ddp --prefetch 0 %s", when[k].args);
        j = prog_json(planner, tmpdir, SMALL, args);
        const char *how = cJSON_GetStringValue(cJSON_GetObjectItem(j, "time"));
        if (!how || strcmp(how, when[k].time)) fail_msg("%s: time %s, want %s", args, how ? how : "none", when[k].time);
        const double ms = cJSON_GetNumberValue(cJSON_GetObjectItem(j, "ms_per_step")),
                     sum = cJSON_GetNumberValue(cJSON_GetObjectItem(j, "compute_ms")) +
                           cJSON_GetNumberValue(cJSON_GetObjectItem(j, "comm_ms"));
        if (!(ms > 0) || fabs(ms - sum) > 1e-5 * sum) fail_msg("%s: %.9f ms a step, compute + comm %.9f", args, ms, sum);
        cJSON_Delete(j);
        free(args);
    }
}

/* --launch-us: a kernel call's fixed cost. The GPU presets' is 3 us (docs/planning.md); --launch-us 0 is the
 * roofline alone (the presets' step before they had one); --launch-us X grows the formula's compute and step
 * (prefetch 0) by exactly kernel_calls x X, reported as launch_ms; the replay stays compute + comm; given without a
 * cluster it replaces the calibrated cost; a negative or non-number cost is refused. */
static void test_plan_launch(void **st) {
    (void)st;
    static const char *const how[] = {"formula", "replay"};
    for (int h = 0; h < 2; h++) {
        double ms[3], compute[3], calls[3], launch[3];
        static const char *const given[] = {"", "--launch-us 0", "--launch-us 10"};
        for (int k = 0; k < 3; k++) {
            char *args = prog_fmt("--cluster h100-sxm-8 --parallel fsdp --prefetch 0 --batch 8 --time %s %s", how[h],
                                  given[k]);
            cJSON *j = prog_json(planner, tmpdir, SMALL, args);
            ms[k] = cJSON_GetNumberValue(cJSON_GetObjectItem(j, "ms_per_step"));
            compute[k] = cJSON_GetNumberValue(cJSON_GetObjectItem(j, "compute_ms"));
            calls[k] = cJSON_GetNumberValue(cJSON_GetObjectItem(j, "kernel_calls"));
            launch[k] = cJSON_GetNumberValue(cJSON_GetObjectItem(j, "launch_ms"));
            const double us = cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "rates"), "kernel_us")),
                         want = k == 0 ? 3 : k == 1 ? 0 : 10;
            const double sum = compute[k] + cJSON_GetNumberValue(cJSON_GetObjectItem(j, "comm_ms"));
            if (us != want) fail_msg("%s: kernel_us %g, want %g", args, us, want);
            if (!(calls[k] > 100) || fabs(launch[k] - calls[k] * want * 1e-3) > 1e-9 * (launch[k] + 1))
                fail_msg("%s: %g calls, launch_ms %.9f", args, calls[k], launch[k]);
            if (fabs(ms[k] - sum) > 1e-5 * sum) fail_msg("%s: %.9f ms a step, compute + comm %.9f", args, ms[k], sum);
            cJSON_Delete(j);
            free(args);
        }
        assert_true(calls[0] == calls[1] && calls[1] == calls[2]);
        for (int k = 0; k < 3; k += 2) { /* 3 us and 10 us against none: exactly the calls' cost more */
            const double d = calls[k] * (k == 0 ? 3 : 10) * 1e-3;
            if (fabs(compute[k] - compute[1] - d) > 1e-9 * d || fabs(ms[k] - ms[1] - d) > 1e-5 * ms[k])
                fail_msg("%s, %s: compute %.9f and step %.9f ms against %.9f and %.9f without: want %.9f more", how[h],
                         given[k], compute[k], ms[k], compute[1], ms[1], d);
        }
    }
    cJSON *j = prog_json(planner, tmpdir, SMALL, "--world 2 --parallel ddp --tflops 0.1 --mem-bandwidth 10 --launch-us 2.5");
    assert_true(fabs(cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "rates"), "kernel_us")) - 2.5) < 1e-6);
    cJSON_Delete(j);
    /* both rates given, nothing calibrated: a call costs nothing unless --launch-us says (its help says so) */
    j = prog_json(planner, tmpdir, SMALL, "--world 2 --parallel ddp --tflops 0.1 --mem-bandwidth 10");
    assert_true(cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "rates"), "kernel_us")) == 0);
    cJSON_Delete(j);
    char *out = NULL;
    assert_int_equal(prog_run(planner, "--help", tmpdir, &out, NULL), 0);
    assert_non_null(strstr(out, "and 0 when both are given"));
    free(out);
    prog_refused(planner, "--launch-us -1", tmpdir, 2, "--launch-us '-1': expected a number in [0, 1e+06]");
    prog_refused(planner, "--launch-us nan", tmpdir, 2, "--launch-us 'nan'");
}

/* fsc-train --config FILE (a search's winner, x) trains at the largest per-rank peak the search predicted */
static void winner_trains(const cJSON *x, const char *file) {
    const double peak = cJSON_GetNumberValue(cJSON_GetObjectItem(x, "peak_bytes"));
    char *targs = prog_fmt("--config %s/%s --steps 1 --peak-tflops 1", tmpdir, file);
    cJSON *t = prog_json(trainer, tmpdir, "", targs);
    const cJSON *pr = cJSON_GetObjectItem(t, "per_rank");
    double most = 0;
    for (int r = 0; r < cJSON_GetArraySize(pr); r++) {
        double v = cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetArrayItem(pr, r), "total"));
        if (v > most) most = v;
    }
    if (most != peak) fail_msg("%s: the winner's peak: searched %.0f, trained %.0f", file, peak, most);
    cJSON_Delete(t);
    free(targs);
}

/* --search: every listed layout fits --memory, fastest first; the fastest written by --search-config is a
 * --config file fsc-train runs, at the peak the search predicted for it. */
static void test_plan_search(void **st) {
    (void)st;
    const char *rates = "--tflops 0.1 --mem-bandwidth 10 --sim-bandwidth 0.5 --sim-latency 20";
    { /* --offload optim with --search and no --parallel: the search's strategies take it (its ddp base was refused
       * up front, as fsc-train refuses ddp with offload) */
        char *o = prog_fmt("--world 2 --search --offload optim %s", rates);
        cJSON *jo = prog_json(planner, tmpdir, SMALL, o);
        const cJSON *so = cJSON_GetObjectItem(jo, "search");
        assert_true(cJSON_GetArraySize(so) > 0);
        for (int i = 0; i < cJSON_GetArraySize(so); i++)
            assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(so, i), "offload")), "optim");
        cJSON_Delete(jo);
        free(o);
    }
    char *args = prog_fmt("--world 2 --search --memory 2.4MiB --search-config %s/win.json %s", tmpdir, rates);
    cJSON *j = prog_json(planner, tmpdir, SMALL, args);
    const cJSON *a = cJSON_GetObjectItem(j, "search");
    int n = cJSON_GetArraySize(a);
    assert_true(n >= 2);
    assert_true(cJSON_GetNumberValue(cJSON_GetObjectItem(j, "over_memory")) > 0); /* ddp does not fit in 2.4 MiB */
    assert_int_equal((int)cJSON_GetNumberValue(cJSON_GetObjectItem(j, "fit")), n); /* all listed: below 4096 */
    for (int i = 0; i < n; i++) {
        const cJSON *x = cJSON_GetArrayItem(a, i);
        assert_true(cJSON_GetNumberValue(cJSON_GetObjectItem(x, "peak_bytes")) <= 2.4 * 1048576);
        if (i) assert_true(cJSON_GetNumberValue(cJSON_GetObjectItem(x, "ms_per_step")) >=
                           cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetArrayItem(a, i - 1), "ms_per_step")));
    }
    winner_trains(cJSON_GetArrayItem(a, 0), "win.json");
    cJSON_Delete(j);
    free(args);
    /* a memory only activation checkpointing with 4 micro-batches and tp 2 (its one data rank's optimizer on the
     * host) fits: the winner recomputes (0.68 MiB; 0.78 MiB without recomputing) */
    args = prog_fmt("--world 2 --search --search-precision --memory 0.75MiB --search-config %s/win2.json %s", tmpdir,
                    rates);
    j = prog_json(planner, tmpdir, SMALL, args);
    a = cJSON_GetObjectItem(j, "search");
    assert_true(cJSON_GetArraySize(a) >= 1);
    assert_int_equal((int)cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetArrayItem(a, 0), "recompute")), 1);
    winner_trains(cJSON_GetArrayItem(a, 0), "win2.json");
    cJSON_Delete(j);
    free(args);
    /* the options' balance and chunks are theirs: the layouts of another pp or schedule are still searched; the
     * options of a pipeline (--checkpoint) or of fsdp (--wrap) go to the winner's --config only when it is one */
    static const char *const fixed[] = {"--pp 2 --balance 1,1",
                                        "--layers 4 --pp 2 --schedule interleaved --virtual-stages 2 --accum 2",
                                        "--layers 4 --pp 2 --schedule zbv --balance 1,1,1,1",
                                        "--pp 2 --checkpoint never", "--parallel fsdp --wrap model"};
    for (size_t f = 0; f < sizeof fixed / sizeof fixed[0]; f++) {
        args = prog_fmt("--world 2 --search %s %s --search-config %s/fixed%zu.json", fixed[f], rates, tmpdir, f);
        j = prog_json(planner, tmpdir, SMALL, args);
        a = cJSON_GetObjectItem(j, "search");
        int pp1 = 0, pp2 = 0;
        for (int i = 0; i < cJSON_GetArraySize(a); i++) {
            const int pp = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetArrayItem(a, i), "pp"));
            pp1 += pp == 1, pp2 += pp == 2;
        }
        if (!pp1 || !pp2) fail_msg("%s: %d layouts of pp 1, %d of pp 2", args, pp1, pp2);
        char file[32];
        snprintf(file, sizeof file, "fixed%zu.json", f);
        winner_trains(cJSON_GetArrayItem(a, 0), file);
        cJSON_Delete(j);
        free(args);
    }
    prog_refused(planner, "--search-config x.json", tmpdir, 2, "--search-config needs --search");
    args = prog_fmt(SMALL " --world 2 --search --memory 1KiB %s", rates);
    prog_refused(planner, args, tmpdir, 1, "no layout of world 2 fits in 1KiB");
    free(args);
}

/* The search's other levers: a memory only fsdp with everything offloaded fits (a model of parameters more than
 * activations, one head: tp 2 refused) is won by offload all, and with two heads on 4 ranks by tp 2 x fsdp 2 with
 * offload all; an MoE model's layouts include ep 2, and a memory the replicated experts do not fit in is won by
 * ep 2; a deeper model's pipelines interleave 2 to 4 chunks a rank and fsdp wraps by block and the whole model.
 * Each winner trains from its --config file at the peak predicted. */
static void test_plan_search_levers(void **st) {
    (void)st;
    const char *rates = "--tflops 1 --mem-bandwidth 10 --sim-bandwidth 0.5 --sim-latency 20";
    char *args = prog_fmt("--world 2 --search --memory 12.5MB --search-config %s/all.json %s", tmpdir, rates);
    cJSON *j = prog_json(planner, tmpdir, "--layers 2 --dim 256 --heads 1 --seq 8 --vocab 256 --batch 2", args);
    const cJSON *a = cJSON_GetObjectItem(j, "search");
    assert_true(cJSON_GetArraySize(a) >= 1);
    const cJSON *w = cJSON_GetArrayItem(a, 0);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(w, "offload")), "all");
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(w, "parallel")), "fsdp");
    assert_true(cJSON_GetNumberValue(cJSON_GetObjectItem(j, "over_memory")) > 0);
    winner_trains(w, "all.json");
    cJSON_Delete(j);
    free(args);
    /* with two heads on 4 ranks a memory only tp 2 x fsdp 2 with everything offloaded fits is won by it */
    args = prog_fmt("--world 4 --search --memory 7MB --search-config %s/tpall.json %s", tmpdir, rates);
    j = prog_json(planner, tmpdir, "--layers 2 --dim 256 --heads 2 --seq 8 --vocab 256 --batch 4", args);
    w = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "search"), 0);
    assert_non_null(w);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(w, "offload")), "all");
    assert_int_equal((int)cJSON_GetNumberValue(cJSON_GetObjectItem(w, "tp")), 2);
    winner_trains(w, "tpall.json");
    cJSON_Delete(j);
    free(args);
    /* MoE: every layout (no budget) includes ep 2 ones; 20.2 MiB leaves ep 2 the fastest that fits */
    const char *moe = "--layers 2 --dim 128 --heads 1 --seq 16 --vocab 256 --batch 4 --moe-experts 8 --moe-top-k 2";
    args = prog_fmt("--world 2 --search %s", rates);
    j = prog_json(planner, tmpdir, moe, args);
    a = cJSON_GetObjectItem(j, "search");
    int ep2 = 0;
    for (int i = 0; i < cJSON_GetArraySize(a); i++)
        ep2 += (int)cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetArrayItem(a, i), "ep")) == 2;
    assert_true(ep2 > 0);
    cJSON_Delete(j);
    free(args);
    args = prog_fmt("--world 2 --search --memory 20.2MiB --search-config %s/ep.json %s", tmpdir, rates);
    j = prog_json(planner, tmpdir, moe, args);
    w = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "search"), 0);
    assert_non_null(w);
    assert_int_equal((int)cJSON_GetNumberValue(cJSON_GetObjectItem(w, "ep")), 2);
    winner_trains(w, "ep.json");
    cJSON_Delete(j);
    free(args);
    /* 8 blocks: interleaved pipelines of 2, 3 and 4 chunks a rank; fsdp by block and by the whole model */
    args = prog_fmt("--world 2 --search %s", rates);
    j = prog_json(planner, tmpdir, "--layers 8 --dim 64 --heads 4 --seq 32 --vocab 256 --batch 4", args);
    a = cJSON_GetObjectItem(j, "search");
    int chunks[5] = {0}, model = 0, block = 0;
    for (int i = 0; i < cJSON_GetArraySize(a); i++) {
        const cJSON *x = cJSON_GetArrayItem(a, i);
        const char *sched = cJSON_GetStringValue(cJSON_GetObjectItem(x, "schedule")),
                   *par = cJSON_GetStringValue(cJSON_GetObjectItem(x, "parallel")),
                   *wrap = cJSON_GetStringValue(cJSON_GetObjectItem(x, "wrap"));
        const int v = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(x, "virtual_stages"));
        if (!strcmp(par, "pipe") && !strcmp(sched, "interleaved") && v >= 2 && v <= 4) chunks[v]++;
        if (!strcmp(par, "fsdp")) model += !strcmp(wrap, "model"), block += !strcmp(wrap, "block");
    }
    if (!chunks[2] || !chunks[3] || !chunks[4] || !model || !block)
        fail_msg("interleaved with 2, 3, 4 chunks: %d, %d, %d layouts; fsdp wrapped by model %d, by block %d",
                 chunks[2], chunks[3], chunks[4], model, block);
    cJSON_Delete(j);
    free(args);
}


/* Llama 3 8B's shape at 8 ranks: a plan of hundreds of GiB per rank in a process of a few tens of MiB. */
static void test_plan_large_model_small_process(void **st) {
    (void)st;
    char *cmd = prog_fmt("'%s' --model llama --layers 32 --dim 4096 --heads 32 --kv-heads 8 --ffn 14336 --vocab 128256 "
                         "--seq 8192 --world 8 --batch 8 --parallel fsdp --precision bf16 --json > '%s/out' 2>&1",
                         planner, tmpdir);
    int status = 0;
    long kib = prog_run_maxrss(cmd, &status);
    free(cmd);
    char *path = prog_fmt("%s/out", tmpdir), *out = prog_slurp(path);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) fail_msg("fsc-plan failed: %s", out);
    cJSON *j = prog_last_json(out);
    double params = cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "peak_bytes"), "params"));
    double total = cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "peak_bytes"), "total"));
    /* 8.03e9 parameters: an eighth of them in fp32 at least, the total above a GPU's memory */
    assert_true(params > 8.03e9 * 4 / 8);
    assert_true(total > 80.0 * (1u << 30));
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "per_rank")), 8);
    if (kib > 256 * 1024) fail_msg("fsc-plan's process reached %ld KiB to plan an 8B model", kib);
    cJSON_Delete(j);
    free(out);
    free(path);
}

/* --memory: a rank fits when its peak total is at most the size; the table says which ranks do not. */
static void test_plan_memory_budget(void **st) {
    (void)st;
    cJSON *j = prog_json(planner, tmpdir, SMALL, "--world 2 --parallel ddp");
    double total = cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "peak_bytes"), "total"));
    cJSON_Delete(j);
    char *args = prog_fmt("--world 2 --parallel ddp --memory %.0f", total);
    j = prog_json(planner, tmpdir, SMALL, args);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(j, "fits")));
    assert_true(cJSON_GetNumberValue(cJSON_GetObjectItem(j, "memory_bytes")) == total);
    cJSON_Delete(j);
    free(args);
    args = prog_fmt(SMALL " --world 2 --parallel ddp --memory %.0fB", total - 1);
    char *out = NULL;
    assert_int_equal(prog_run(planner, args, tmpdir, &out, NULL), 0);
    assert_non_null(strstr(out, "does not fit in "));
    assert_non_null(strstr(out, "2 ranks over (0 1)"));
    free(out);
    free(args);
    args = prog_fmt(SMALL " --world 4 --parallel ddp --memory 1KiB"); /* every rank over: one run of 4 */
    assert_int_equal(prog_run(planner, args, tmpdir, &out, NULL), 0);
    assert_non_null(strstr(out, "4 ranks over (0-3)\n"));
    free(out);
    free(args);
    assert_int_equal(prog_run(planner, SMALL " --memory 1TiB", tmpdir, &out, NULL), 0);
    assert_non_null(strstr(out, "fits in 1TiB on every rank"));
    free(out);
    prog_refused(planner, "--memory 80XB", tmpdir, 2, "--memory '80XB'");
    prog_refused(planner, "--memory 0.5", tmpdir, 2, "at least 1 byte");
    prog_refused(planner, "--memory inf", tmpdir, 2, "--memory 'inf'");
    prog_refused(planner, "--memory GiB", tmpdir, 2, "--memory 'GiB'");
    prog_refused(planner, "--memory 1.5", tmpdir, 2, "a whole number of bytes"); /* not 1.5 GB */
    prog_refused(planner, "--memory 0x10GB", tmpdir, 2, "--memory '0x10GB'");
    prog_refused(planner, "--mem-bandwidth 0x10", tmpdir, 2, "--mem-bandwidth '0x10': expected a number");
}

/* fsc-plan reads fsc-train's --config files (the trainer's parser): the options from the file plan as on the
 * command line, and the command line wins */
static void test_plan_config_file(void **st) {
    (void)st;
    char *path = prog_fmt("%s/job.json", tmpdir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "{\"layers\": 2, \"dim\": 64, \"heads\": 4, \"seq\": 32, \"vocab\": 256, \"batch\": 4, "
               "\"world\": 2, \"parallel\": \"fsdp\", \"precision\": \"bf16\"}\n");
    fclose(f);
    char *args = prog_fmt("--config %s", path);
    cJSON *a = prog_json(planner, tmpdir, "", args);
    cJSON *b = prog_json(planner, tmpdir, "", SMALL " --world 2 --parallel fsdp --precision bf16");
    same_array(a, b, "per_rank", args);
    cJSON_Delete(a);
    cJSON_Delete(b);
    free(args);
    args = prog_fmt("--config %s --world 1 --parallel none", path);
    a = prog_json(planner, tmpdir, "", args);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(a, "per_rank")), 1);
    cJSON_Delete(a);
    free(args);
    free(path);
}

/* --sequence-parallel belongs to the layouts with tp > 1: the search plans those of tp 1 without it, as many layouts
 * and refusals as without the option (before: the engine refused every tp 1 layout, and the winner was a tp 2
 * layout slower than the tp 1 ones). */
static void test_plan_search_sequence_parallel(void **st) {
    (void)st;
    const char *rates = "--tflops 1 --mem-bandwidth 10 --sim-bandwidth 1 --sim-latency 10 --time formula";
    char *args = prog_fmt("--world 4 --search --tp 2 --sequence-parallel %s", rates);
    char *plain_args = prog_fmt("--world 4 --search %s", rates);
    cJSON *j = prog_json(planner, tmpdir, "--model llama " SMALL " --kv-heads 2", args);
    cJSON *plain = prog_json(planner, tmpdir, "--model llama " SMALL " --kv-heads 2", plain_args);
    const cJSON *a = cJSON_GetObjectItem(j, "search");
    int tp1 = 0;
    for (int i = 0; i < cJSON_GetArraySize(a); i++)
        tp1 += (int)cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetArrayItem(a, i), "tp")) == 1;
    if (!tp1) fail_msg("%s: no layout of tp 1 listed", args);
    assert_int_equal((int)cJSON_GetNumberValue(cJSON_GetObjectItem(j, "refused")),
                     (int)cJSON_GetNumberValue(cJSON_GetObjectItem(plain, "refused")));
    assert_int_equal(cJSON_GetArraySize(a), cJSON_GetArraySize(cJSON_GetObjectItem(plain, "search")));
    cJSON_Delete(j);
    cJSON_Delete(plain);
    free(args);
    free(plain_args);
}

/* --check-ddp is refused with ddp (and on one rank) as fsc-train refuses it, and the winner's --config drops it
 * where the winner is ddp or one rank, so that fsc-train runs the file. */
static void test_plan_check_ddp(void **st) {
    (void)st;
    prog_refused(planner, SMALL " --world 2 --parallel ddp --check-ddp", tmpdir, 2,
                 "--check-ddp compares a sharded, pipelined or expert-parallel run with DDP");
    prog_refused(planner, SMALL " --check-ddp", tmpdir, 2, "--check-ddp compares");
    char *args = prog_fmt("--search --search-config %s/cd.json --check-ddp --tflops 1 --mem-bandwidth 10", tmpdir);
    cJSON *j = prog_json(planner, tmpdir, SMALL, args); /* one rank: the only layout is "none" */
    winner_trains(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "search"), 0), "cd.json");
    cJSON_Delete(j);
    free(args);
}

/* One data rank (world 1, or tp x pp = world) has one layout for every strategy, listed as none, yet fsc-train
 * offloads there (--parallel zero1 --offload optim, fsdp --offload all): a model that fits 20 MB only so (27.4 MB
 * without, 14.2 MB with its optimizer on the host) is found, and its --config trains at the peak predicted (before:
 * "no layout of world 1 fits"). */
static void test_plan_search_one_rank_offload(void **st) {
    (void)st;
    char *args = prog_fmt("--search --memory 20MB --tflops 1 --mem-bandwidth 10 --search-config %s/one.json", tmpdir);
    cJSON *j = prog_json(planner, tmpdir, "--layers 2 --dim 256 --heads 1 --seq 8 --vocab 256 --batch 2", args);
    const cJSON *a = cJSON_GetObjectItem(j, "search");
    assert_true(cJSON_GetArraySize(a) >= 1);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(a, 0), "offload")), "optim");
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(a, 0), "parallel")), "zero1");
    winner_trains(cJSON_GetArrayItem(a, 0), "one.json");
    cJSON_Delete(j);
    free(args);
}

static void test_plan_tool_usage(void **st) {
    (void)st;
    char *out = NULL;
    assert_int_equal(prog_run(planner, "--help", tmpdir, &out, NULL), 0);
    assert_non_null(strstr(out, "usage: fsc-plan "));
    assert_non_null(strstr(out, "--parallel KIND"));
    free(out);
    prog_refused(planner, "--world 0", tmpdir, 2, "--world: 0 is out of range");
    prog_refused(planner, "--bogus 1", tmpdir, 2, "unknown option '--bogus'");
    /* fsc-train's own parser and checks: the trainer's messages */
    prog_refused(planner, "--parallel tp", tmpdir, 2, "--parallel: unknown value 'tp'");
    prog_refused(planner, "--wrap min-params:x", tmpdir, 2, "--wrap: 'min-params:x'");
    prog_refused(planner, "--world 4 --pp 3", tmpdir, 2, "--world 4 does not split");
    prog_refused(planner, "--world 2 --batch 3 --parallel ddp", tmpdir, 2, "--batch 3 does not split");
    prog_refused(planner, "--ffn 100", tmpdir, 2, "other widths: --model llama");
    /* the planner's own */
    prog_refused(planner, "--search-precision", tmpdir, 2, "--search-precision needs --search");
    prog_refused(planner, "--memory", tmpdir, 2, "--memory needs a value");
    prog_refused(planner, "--search=1", tmpdir, 2, "--search takes no value");
    /* a misspelt name: the nearest of both tables (the trainer's parser alone offered --model for --node) */
    prog_refused(planner, "--node 2", tmpdir, 2, "unknown option '--node' (did you mean --nodes?)");
    prog_refused(planner, "--memroy 80GiB", tmpdir, 2, "(did you mean --memory?)");
    prog_refused(planner, "--worl 2", tmpdir, 2, "(did you mean --world?)");
    prog_refused(planner, "--parallel tp --bogus", tmpdir, 2, "--parallel: unknown value 'tp'"); /* the first said */
}

/* More layouts fit than the search lists: it keeps the fastest SEARCH_MAX (it kept the first met) and counts all. */
static void test_plan_search_keeps_fastest(void **st) {
    (void)st;
    plan_candidate *out = calloc(SEARCH_MAX, sizeof *out), c;
    search_count k = {0};
    memset(&c, 0, sizeof c);
    for (int i = 0; i < SEARCH_MAX; i++) {
        c.t.step_s = 1.0 + i;
        search_keep(out, &k, &c);
    }
    c.t.step_s = 0.5; /* faster than every one listed: in place of the slowest (4096 s) */
    search_keep(out, &k, &c);
    c.t.step_s = 5000.0; /* slower than every one listed: counted, not listed */
    search_keep(out, &k, &c);
    assert_int_equal(k.n, SEARCH_MAX);
    assert_int_equal(k.fit, SEARCH_MAX + 2);
    double slowest = 0, fastest = 1e9;
    for (int i = 0; i < k.n; i++) {
        slowest = out[i].t.step_s > slowest ? out[i].t.step_s : slowest;
        fastest = out[i].t.step_s < fastest ? out[i].t.step_s : fastest;
    }
    assert_true(fastest == 0.5 && slowest == SEARCH_MAX - 1.0);
    free(out);
}

/* Layouts the engine is sure to refuse (tp not dividing the heads, a pipeline of more stages than blocks) are counted
 * as refused without a plan: each plan runs every rank's setup, and at 1024 ranks the search spent 3.6 minutes on
 * 1124 such layouts of a 2-head, 2-block GPT. Without --memory every layout planned fits and is timed once. */
static void test_plan_search_refused_unplanned(void **st) {
    (void)st;
    cJSON *j = prog_json(planner, tmpdir, "--layers 1 --dim 32 --heads 1 --seq 16 --vocab 256 --batch 4",
                         "--world 4 --search --tflops 0.1 --mem-bandwidth 10 --time formula");
    const int refused = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(j, "refused"));
    const int planned = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(j, "planned"));
    const int timed = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(j, "timed"));
    assert_true(refused > 0);                  /* tp 2 and 4, pp 2 and 4 */
    assert_int_equal(planned, timed);          /* was planned = timed + refused */
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "search")), timed);
    cJSON_Delete(j);
}

int main(int argc, char **argv) {
    (void)argc;
    if (prog_setup(argv[0], "test_plan_tool", "fsc-plan", planner, sizeof planner, tmpdir, sizeof tmpdir)) return 1;
    char self[PATH_MAX];
    if (!realpath(argv[0], self)) return 1;
    snprintf(trainer, sizeof trainer, "%s/../fsc-train", dirname(self));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_search_keeps_fastest),
        cmocka_unit_test(test_plan_tool_usage),
        cmocka_unit_test(test_plan_config_file),
        cmocka_unit_test(test_plan_equals_trainer),
        cmocka_unit_test(test_plan_memory_budget),
        cmocka_unit_test(test_trainer_plan),
        cmocka_unit_test(test_plan_time_rates),
        cmocka_unit_test(test_plan_cluster),
        cmocka_unit_test(test_plan_launch),
        cmocka_unit_test(test_plan_search),
        cmocka_unit_test(test_plan_search_levers),
        cmocka_unit_test(test_plan_search_refused_unplanned),
        cmocka_unit_test(test_plan_search_one_rank_offload),
        cmocka_unit_test(test_plan_search_sequence_parallel),
        cmocka_unit_test(test_plan_check_ddp),
        cmocka_unit_test(test_plan_large_model_small_process),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "test_plan_tool: could not remove %s\n", tmpdir);
    return rc;
}
