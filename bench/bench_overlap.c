/* bench_overlap: how much communication prefetching hides (docs/overlap.md), on the simulated cluster with
 * a network. A benchmark, not a test: it prints numbers.
 *
 * For FSDP per block (full_shard), DDP and, on 4 or 8 ranks, FSDP hybrid_shard (groups of world / 2) on a GPT:
 * first the step without a network (compute: T_c, the
 * median step time) and the bytes a rank sends per step (B, fsc_engine_comm_stats); then a link bandwidth
 * b = B / T_c so that communication takes as long as computation (T_m = B / b = T_c, latency 0); then the
 * step on that network with prefetch 0 and 1. Printed against the ideal max(T_c, T_m) and the serial sum
 * T_c + T_m, with the fraction of communication hidden, (T_c + T_m - step) / T_m.
 * Load from other programs drifts: after a calibration run (the bandwidth) the three runs take turns in
 * rounds, and the ratios printed are medians over rounds of the same-round ratios.
 * Usage: bench_overlap [--world N] [--layers L] [--dim C] [--steps N] [--warmup N] [--ratio R] [--rounds N]
 *   (--ratio: T_m / T_c, default 1) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fsc/fsc.h"
#include "bench_util.h"

#define MAX_ROUNDS 15

typedef struct {
    fsc_gpt_config gc;
    fsc_parallel_opts po;
    int B, steps, warmup;
    double *step_s;     /* (steps) rank 0 */
    double bytes;       /* rank 0, per step: what the network carries */
    size_t peak_params; /* rank 0 */
} run;

static fsc_status rank_fn(fsc_rank *r, void *arg) {
    run *R = arg;
    const int T = R->gc.seq, lb = R->B / r->world;
    fsc_optim_config oc = {.kind = FSC_OPT_ADAMW, .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f};
    fsc_engine *e = NULL;
    fsc_status s = fsc_engine_create(r, &R->gc, &R->po, &oc, 1, &e);
    int32_t *tok = malloc((size_t)lb * T * sizeof(int32_t)), *tgt = malloc((size_t)lb * T * sizeof(int32_t));
    if (s == FSC_OK && (!tok || !tgt)) s = fsc_error(FSC_ERR_NOMEM, "bench_overlap: out of host memory");
    for (int step = 0; step < R->warmup + R->steps && s == FSC_OK; step++) {
        for (int i = 0; i < lb * T; i++) {
            uint32_t x = (uint32_t)(step * 7919 + (r->rank * lb * T + i) * 2654435761u);
            tok[i] = (int32_t)(x >> 24) % R->gc.vocab;
            tgt[i] = (int32_t)((x >> 16) & 255) % R->gc.vocab;
        }
        if (step == R->warmup) {
            fsc_engine_reset_comm_stats(e);
            fsc_device_reset_peak(r->dev);
        }
        s = fsc_comm_barrier(r->comm); /* every rank starts the step together */
        double t0 = now_s();
        if (s == FSC_OK) s = fsc_engine_step(e, tok, tgt, lb, R->B, NULL);
        if (r->rank == 0 && step >= R->warmup) R->step_s[step - R->warmup] = now_s() - t0;
    }
    if (s == FSC_OK && r->rank == 0) {
        fsc_comm_stats cs;
        fsc_engine_comm_stats(e, &cs);
        double total = 0;
        for (int op = 0; op < FSC_OP_COUNT; op++) total += cs.bytes[op];
        R->bytes = total / R->steps;
        R->peak_params = fsc_device_peak_bytes(r->dev, FSC_TAG_PARAMS);
    }
    free(tok);
    free(tgt);
    fsc_engine_free(e);
    return s;
}

/* Median step time of R on a network of gbps (0: none); fills R->bytes. */
static int measure(run *R, int world, double gbps, double *med) {
    fsc_cluster_opts co = {.world = world, .device = "cpu", .threads_per_rank = 1, .timeout_s = 600,
                           .sim_bandwidth_gbps = gbps};
    R->step_s = calloc((size_t)R->steps, sizeof(double));
    if (!R->step_s) return 1;
    fsc_status s = fsc_cluster_run(&co, rank_fn, R);
    if (s != FSC_OK) {
        fprintf(stderr, "bench_overlap: %s\n", fsc_last_error());
        free(R->step_s);
        return 1;
    }
    *med = median(R->step_s, R->steps);
    free(R->step_s);
    return 0;
}

int main(int argc, char **argv) {
    int world = 2, layers = 8, dim = 256, steps = 4, warmup = 1, rounds = 3;
    double ratio = 1.0;
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && !strcmp(argv[i], "--world")) world = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--layers")) layers = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--dim")) dim = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--steps")) steps = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--warmup")) warmup = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--ratio")) ratio = atof(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--rounds")) rounds = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_overlap [--world N] [--layers L] [--dim C] [--steps N] [--warmup N] "
                            "[--ratio R] [--rounds N]\n");
            return 2;
        }
    }
    const int B = 8;
    if (world < 2 || B % world || layers < 1 || dim < 4 || dim % 4 || steps < 1 || warmup < 0 || !(ratio > 0) ||
        rounds < 1 || rounds > MAX_ROUNDS) {
        fprintf(stderr, "bench_overlap: world >= 2 dividing 8, layers >= 1, dim a multiple of 4, steps >= 1, "
                        "ratio > 0, 1 to 15 rounds\n");
        return 2;
    }
    fsc_gpt_config gc = {.layers = layers, .dim = dim, .heads = 4, .seq = 128, .vocab = 256};
    printf("bench_overlap: GPT %d layers, width %d, 4 heads, context 128, vocab 256, global batch %d, world %d, 1 "
           "BLAS thread per rank; medians of %d steps after %d, over %d rounds; link bandwidth set so that communication takes %g x "
           "the computation (latency 0)\n", layers, dim, B, world, steps, warmup, rounds, ratio);
    printf("%-15s %8s %8s %8s %8s %9s %8s %8s %9s %8s %10s %11s\n", "strategy", "GB/s", "T_c ms", "T_m ms",
           "max ms", "sum ms", "pf0 ms", "pf1 ms", "pf1/max", "pf0/sum", "hidden pf1", "params KiB");
    const struct {
        const char *name;
        fsc_parallel_kind kind;
        fsc_shard_strategy shard;
    } cases[] = {{"fsdp per block", FSC_PAR_FSDP, FSC_SHARD_FULL}, {"ddp", FSC_PAR_DDP, FSC_SHARD_FULL},
                 {"fsdp hybrid", FSC_PAR_FSDP, FSC_SHARD_HYBRID}};
    for (int c = 0; c < 3; c++) {
        if (cases[c].shard == FSC_SHARD_HYBRID && world < 4) continue; /* groups of world / 2 ranks, 2 replicas */
        fsc_parallel_opts po = fsc_parallel_opts_default();
        po.kind = cases[c].kind;
        po.shard = cases[c].shard;
        po.clip = 1.0f;
        po.prefetch = 0;
        po.bucket_bytes = 1u << 20; /* ddp: buckets of 1 MiB, so that reductions can start during backward */
        run R = {.gc = gc, .po = po, .B = B, .steps = steps, .warmup = warmup};
        double tc, t0, t1;
        /* calibration (the bandwidth), after a first run that warms caches and allocators */
        if (measure(&R, world, 0, &tc) || measure(&R, world, 0, &tc)) return 1;
        const double bytes = R.bytes, gbps = bytes / (ratio * tc) / 1e9, tm = bytes / (gbps * 1e9);
        /* rounds of (no network, prefetch 0 on it, prefetch 1 on it): load from other programs drifts slowly,
         * so ratios within a round are steadier than across runs */
        double v[5][MAX_ROUNDS];
        size_t p0 = 0, p1 = 0;
        for (int k = 0; k < rounds; k++) {
            R.po.prefetch = 0;
            if (measure(&R, world, 0, &tc) || measure(&R, world, gbps, &t0)) return 1;
            p0 = R.peak_params;
            R.po.prefetch = 1;
            if (measure(&R, world, gbps, &t1)) return 1;
            p1 = R.peak_params;
            double mx = tc > tm ? tc : tm, sum = tc + tm;
            v[0][k] = tc, v[1][k] = t0, v[2][k] = t1, v[3][k] = t1 / mx, v[4][k] = t0 / sum;
        }
        double mtc = median(v[0], rounds), mt0 = median(v[1], rounds), mt1 = median(v[2], rounds);
        double r1 = median(v[3], rounds), r0 = median(v[4], rounds);
        double mx = mtc > tm ? mtc : tm, sum = mtc + tm, hidden = (sum - mt1) / tm;
        printf("%-15s %8.4f %8.1f %8.1f %8.1f %9.1f %8.1f %8.1f %9.3f %8.3f %9.0f%% %5.0f/%-5.0f\n", cases[c].name,
               gbps, mtc * 1e3, tm * 1e3, mx * 1e3, sum * 1e3, mt0 * 1e3, mt1 * 1e3, r1, r0, 100 * hidden,
               p0 / 1024.0, p1 / 1024.0);
        printf("RESULT overlap %s pf1_over_max %.3f pf0_over_sum %.3f hidden %.3f\n", cases[c].name, r1, r0, hidden);
    }
    printf("T_c: step without a network; T_m: bytes per step / bandwidth; pf0, pf1: the step on the network with "
           "--prefetch 0 and 1. Target (issue 12): fsdp pf1 within 15%% of max, pf0 near the sum. params KiB: peak "
           "parameter memory per rank, pf0/pf1.\n");
    return 0;
}
