/* bench_dp: the benchmark GPT (4 layers, width 256, 4 heads, context 128, global batch 8, bytes) on 2
 * simulated ranks with DDP, FSDP flat (one unit) and FSDP per block, one BLAS thread per rank. Prints the
 * median tokens/s, the step time relative to DDP, per-rank peak memory by tag and communication per step.
 * A benchmark, not a test: it prints numbers.
 *
 * Timing: the three engines live side by side on the same simulated cluster and take turns, one step
 * each per round, so a burst of load from other processes hits all three alike. The ratio to DDP is the
 * median over rounds of (this strategy's step) / (DDP's step in the same round). Memory and
 * communication come from a separate short run of each strategy alone (the ledger is per device).
 * Usage: bench_dp [--steps N] [--warmup N] [--world N] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fsc/fsc.h"
#include "bench_util.h"

enum { NCASE = 3 };
#define BENCH_GPT { .layers = 4, .dim = 256, .heads = 4, .seq = 128, .vocab = 256 }

static const struct {
    const char *name;
    fsc_parallel_kind kind;
    fsc_wrap_policy wrap;
    double fairscale;
} cases[NCASE] = {
    { "ddp", FSC_PAR_DDP, FSC_WRAP_BLOCK, 7000 },
    { "fsdp flat", FSC_PAR_FSDP, FSC_WRAP_MODEL, 4200 },
    { "fsdp per block", FSC_PAR_FSDP, FSC_WRAP_BLOCK, 5450 },
};

typedef struct {
    fsc_gpt_config gc;
    int B, steps, warmup;
    int only;                       /* memory run: the one case; timing run: -1 (all, in turns) */
    double *step_s;                 /* (NCASE x steps) rank 0 */
    size_t peak[FSC_TAG_COUNT];     /* memory run, rank 0 */
    double comm_bytes;              /* memory run, rank 0, per step */
} run;

static fsc_parallel_opts opts_of(int c) {
    return (fsc_parallel_opts){ .kind = cases[c].kind, .shard = FSC_SHARD_FULL, .wrap = cases[c].wrap,
                                .reshard_after_forward = -1, .param_dtype = FSC_F32, .reduce_dtype = FSC_F32,
                                .accum = 1, .clip = 1.0f };
}

static fsc_status rank_fn(fsc_rank *r, void *arg) {
    run *R = arg;
    const int T = R->gc.seq, lb = R->B / r->world;
    const int c0 = R->only >= 0 ? R->only : 0, c1 = R->only >= 0 ? R->only + 1 : NCASE;
    fsc_optim_config oc = { .kind = FSC_OPT_ADAMW, .lr = 1e-3f };
    fsc_engine *e[NCASE] = { 0 };
    fsc_status s = FSC_OK;
    for (int c = c0; c < c1 && s == FSC_OK; c++) {
        fsc_parallel_opts po = opts_of(c);
        s = fsc_engine_create(r, &R->gc, &po, &oc, 1, &e[c]);
    }
    int32_t *tok = malloc((size_t)lb * T * sizeof(int32_t)), *tgt = malloc((size_t)lb * T * sizeof(int32_t));
    if (s == FSC_OK && (!tok || !tgt)) s = fsc_error(FSC_ERR_NOMEM, "bench_dp: out of host memory");
    for (int step = 0; step < R->warmup + R->steps && s == FSC_OK; step++) {
        for (int i = 0; i < lb * T; i++) {
            uint32_t x = (uint32_t)(step * 7919 + (r->rank * lb * T + i) * 2654435761u);
            tok[i] = (int32_t)(x >> 24);
            tgt[i] = (int32_t)((x >> 16) & 255);
        }
        for (int c = c0; c < c1 && s == FSC_OK; c++) {
            if (step == R->warmup) {
                fsc_engine_reset_comm_stats(e[c]);
                if (R->only >= 0) fsc_device_reset_peak(r->dev);
            }
            double t0 = now_s();
            s = fsc_engine_step(e[c], tok, tgt, lb, R->B, NULL);
            if (r->rank == 0 && step >= R->warmup) R->step_s[c * R->steps + step - R->warmup] = now_s() - t0;
        }
    }
    if (s == FSC_OK && r->rank == 0 && R->only >= 0) {
        fsc_comm_stats cs;
        fsc_engine_comm_stats(e[R->only], &cs);
        double total = 0;
        for (int op = 0; op < FSC_OP_COUNT; op++) total += cs.bytes[op];
        R->comm_bytes = total / R->steps;
        for (int t = 0; t < FSC_TAG_COUNT; t++) R->peak[t] = fsc_device_peak_bytes(r->dev, (fsc_tag)t);
    }
    free(tok);
    free(tgt);
    for (int c = 0; c < NCASE; c++) fsc_engine_free(e[c]);
    return s;
}

int main(int argc, char **argv) {
    int steps = 12, warmup = 2, world = 2;
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && !strcmp(argv[i], "--steps")) steps = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--warmup")) warmup = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--world")) world = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_dp [--steps N] [--warmup N] [--world N]\n");
            return 2;
        }
    }
    if (steps < 1 || warmup < 0 || world < 1 || 8 % world != 0) {
        fprintf(stderr, "bench_dp: steps >= 1, warmup >= 0, world dividing the batch of 8\n");
        return 2;
    }
    printf("bench_dp: GPT 4 layers, width 256, 4 heads, context 128, vocab 256, global batch 8, world %d, "
           "1 BLAS thread per rank, AdamW; %d rounds after %d warm-up, the strategies taking turns\n", world, steps,
           warmup);
    fsc_cluster_opts co = { .world = world, .device = "cpu", .threads_per_rank = 1 };
    run M[NCASE];
    for (int c = 0; c < NCASE; c++) { /* memory and communication: each strategy alone */
        M[c] = (run){ .gc = BENCH_GPT, .B = 8, .steps = 1, .warmup = 1, .only = c };
        M[c].step_s = calloc(NCASE, sizeof(double));
        fsc_status s = M[c].step_s ? fsc_cluster_run(&co, rank_fn, &M[c]) : FSC_ERR_NOMEM;
        free(M[c].step_s);
        if (s != FSC_OK) {
            fprintf(stderr, "bench_dp: %s: %s\n", cases[c].name, fsc_last_error());
            return 1;
        }
    }
    run R = { .gc = BENCH_GPT, .B = 8, .steps = steps, .warmup = warmup, .only = -1 };
    R.step_s = calloc((size_t)NCASE * steps, sizeof(double));
    double *ratio = calloc((size_t)steps, sizeof(double));
    if (!R.step_s || !ratio) return 1;
    if (fsc_cluster_run(&co, rank_fn, &R) != FSC_OK) {
        fprintf(stderr, "bench_dp: %s\n", fsc_last_error());
        return 1;
    }
    printf("%-16s %10s %10s %9s %10s %10s %10s %10s %12s %11s\n", "strategy", "tokens/s", "ms/step", "vs ddp",
           "params KiB", "grads KiB", "optim KiB", "acts KiB", "comm KiB/st", "FairScale*");
    double rmed[NCASE];
    for (int c = 0; c < NCASE; c++) {
        const double *t = R.step_s + (size_t)c * steps, *t0 = R.step_s;
        for (int i = 0; i < steps; i++) ratio[i] = t[i] / t0[i];
        rmed[c] = median(ratio, steps);
    }
    for (int c = 0; c < NCASE; c++) {
        double med = median(R.step_s + (size_t)c * steps, steps);
        printf("%-16s %10.0f %10.1f %9.3f %10.1f %10.1f %10.1f %10.1f %12.1f %11.0f\n", cases[c].name,
               8.0 * 128 / med, med * 1e3, rmed[c], M[c].peak[FSC_TAG_PARAMS] / 1024.0,
               M[c].peak[FSC_TAG_GRADS] / 1024.0, M[c].peak[FSC_TAG_OPTIM] / 1024.0, M[c].peak[FSC_TAG_ACTS] / 1024.0,
               M[c].comm_bytes / 1024.0, cases[c].fairscale);
        printf("RESULT dp %s tokens_per_s %.0f step_ratio_vs_ddp %.3f\n", cases[c].name, 8.0 * 128 / med, rmed[c]);
    }
    printf("* FairScale 0.4.13 tokens/s on this machine kind as given in the issue (PyTorch 1.13 CPU, gloo, 2 "
           "processes x 1 thread, same GPT and global batch); not measured here (FairScale is not packaged).\n");
    printf("fsdp per block / ddp step time (median over rounds of the same-round ratio): %.3f (target <= 1.10)\n",
           rmed[2]);
    free(R.step_s);
    free(ratio);
    return 0;
}
