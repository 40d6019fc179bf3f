/* bench_dp: the benchmark GPT (4 layers, width 256, 4 heads, context 128, global batch 8, bytes) on 2
 * simulated ranks with DDP, FSDP flat (one unit) and FSDP per block, one BLAS thread per rank. Prints the
 * median tokens/s, the step time relative to DDP measured in the same run, per-rank peak memory by tag and
 * communication per step. A benchmark, not a test: it prints numbers.
 * Usage: bench_dp [--steps N] [--warmup N] [--world N] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "fsc/fsc.h"

typedef struct {
    fsc_gpt_config gc;
    fsc_parallel_opts po;
    int B, steps, warmup;
    double *step_s;                 /* (steps) rank 0 */
    size_t peak[FSC_TAG_COUNT];     /* rank 0 */
    double comm_bytes;              /* rank 0, per step */
} run;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static fsc_status rank_fn(fsc_rank *r, void *arg) {
    run *R = arg;
    const int T = R->gc.seq, lb = R->B / r->world;
    fsc_optim_config oc = { .kind = FSC_OPT_ADAMW, .lr = 1e-3f };
    fsc_engine *e;
    FSC_TRY(fsc_engine_create(r, &R->gc, &R->po, &oc, 1, &e));
    int32_t *tok = malloc((size_t)lb * T * sizeof(int32_t)), *tgt = malloc((size_t)lb * T * sizeof(int32_t));
    fsc_status s = FSC_OK;
    for (int step = 0; step < R->warmup + R->steps && s == FSC_OK; step++) {
        for (int i = 0; i < lb * T; i++) {
            uint32_t x = (uint32_t)(step * 7919 + (r->rank * lb * T + i) * 2654435761u);
            tok[i] = (int32_t)(x >> 24);
            tgt[i] = (int32_t)((x >> 16) & 255);
        }
        if (step == R->warmup) fsc_engine_reset_comm_stats(e);
        double t0 = now_s();
        s = fsc_engine_step(e, tok, tgt, lb, R->B, NULL);
        if (r->rank == 0 && step >= R->warmup) R->step_s[step - R->warmup] = now_s() - t0;
    }
    if (r->rank == 0) {
        fsc_comm_stats cs;
        fsc_engine_comm_stats(e, &cs);
        double total = 0;
        for (int op = 0; op < FSC_OP_COUNT; op++) total += cs.bytes[op];
        R->comm_bytes = total / R->steps;
        for (int t = 0; t < FSC_TAG_COUNT; t++) R->peak[t] = fsc_device_peak_bytes(r->dev, (fsc_tag)t);
    }
    free(tok);
    free(tgt);
    fsc_engine_free(e);
    return s;
}

int main(int argc, char **argv) {
    int steps = 10, warmup = 2, world = 2;
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
    struct { const char *name; fsc_parallel_kind kind; fsc_wrap_policy wrap; double fairscale; } cases[] = {
        { "ddp", FSC_PAR_DDP, FSC_WRAP_BLOCK, 7000 },
        { "fsdp flat", FSC_PAR_FSDP, FSC_WRAP_MODEL, 4200 },
        { "fsdp per block", FSC_PAR_FSDP, FSC_WRAP_BLOCK, 5450 },
    };
    const int ncase = sizeof cases / sizeof cases[0];
    double med[3] = { 0 };
    printf("bench_dp: GPT 4 layers, width 256, 4 heads, context 128, vocab 256, global batch 8, world %d, "
           "1 BLAS thread per rank, AdamW; median of %d steps after %d warm-up\n", world, steps, warmup);
    printf("%-16s %10s %10s %9s %10s %10s %10s %10s %12s %11s\n", "strategy", "tokens/s", "ms/step", "vs ddp",
           "params KiB", "grads KiB", "optim KiB", "acts KiB", "comm KiB/st", "FairScale*");
    for (int c = 0; c < ncase; c++) {
        run R = { .gc = { 4, 256, 4, 128, 256 }, .B = 8, .steps = steps, .warmup = warmup };
        R.po = (fsc_parallel_opts){ .kind = cases[c].kind, .shard = FSC_SHARD_FULL, .wrap = cases[c].wrap,
                                    .reshard_after_forward = -1, .param_dtype = FSC_F32, .reduce_dtype = FSC_F32,
                                    .accum = 1, .clip = 1.0f };
        R.step_s = calloc((size_t)steps, sizeof(double));
        fsc_cluster_opts co = { .world = world, .device = "cpu", .threads_per_rank = 1 };
        fsc_status s = fsc_cluster_run(&co, rank_fn, &R);
        if (s != FSC_OK) {
            fprintf(stderr, "bench_dp: %s: %s\n", cases[c].name, fsc_last_error());
            return 1;
        }
        qsort(R.step_s, (size_t)steps, sizeof(double), cmp_double);
        med[c] = R.step_s[steps / 2];
        printf("%-16s %10.0f %10.1f %9.2f %10.1f %10.1f %10.1f %10.1f %12.1f %11.0f\n", cases[c].name,
               8.0 * 128 / med[c], med[c] * 1e3, med[c] / med[0], R.peak[FSC_TAG_PARAMS] / 1024.0,
               R.peak[FSC_TAG_GRADS] / 1024.0, R.peak[FSC_TAG_OPTIM] / 1024.0, R.peak[FSC_TAG_ACTS] / 1024.0,
               R.comm_bytes / 1024.0, cases[c].fairscale);
        printf("RESULT dp %s tokens_per_s %.0f step_ratio_vs_ddp %.3f\n", cases[c].name, 8.0 * 128 / med[c],
               med[c] / med[0]);
        free(R.step_s);
    }
    printf("* FairScale 0.4.13 tokens/s on this machine kind as given in the issue (PyTorch 1.13 CPU, gloo, 2 "
           "processes x 1 thread, same GPT and global batch); not measured here (FairScale is not packaged).\n");
    printf("fsdp per block / ddp step time: %.3f (target <= 1.10)\n", med[2] / med[0]);
    return 0;
}
