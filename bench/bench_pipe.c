/* bench_pipe: the measured pipeline bubble beside the ideal (P-1)/(M+P-1), for GPipe and 1F1B over a few
 * (P, M), on the simulated cluster (one thread per stage, one BLAS thread each), with the first stage's
 * peak activation memory (1F1B holds P micro-batches there, GPipe M).
 * The bubble of a stage is its idle fraction: time waiting in recv and in the closing loss broadcast over
 * the schedule's wall time (fsc_engine_pipe_stats). The ideal assumes equal stages, free communication
 * and a core per stage: with more stages than cores the stages share cores and the numbers mean less.
 * Balances come from fsc_balance_by_time. Usage: bench_pipe [steps] (default 4; the first is not timed). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include "fsc/fsc.h"

typedef struct {
    fsc_gpt_config cfg;
    fsc_parallel_opts po;
    int steps, mb;
    fsc_pipe_stats st[16];
    double ms;        /* per timed step, rank 0 */
} bench;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static fsc_status rank_fn(fsc_rank *r, void *arg) {
    bench *b = arg;
    const int T = b->cfg.seq, B = b->po.accum * b->mb;
    fsc_optim_config oc = { .kind = FSC_OPT_ADAMW, .lr = 1e-3f };
    fsc_engine *e = NULL;
    FSC_TRY(fsc_engine_create(r, &b->cfg, &b->po, &oc, 1, &e));
    int32_t *tok = malloc((size_t)B * T * sizeof(int32_t));
    fsc_status s = tok ? FSC_OK : fsc_error(FSC_ERR_NOMEM, "bench: out of memory");
    for (int i = 0; tok && i < B * T; i++) tok[i] = (int32_t)((i * 31 + 7) % b->cfg.vocab);
    double t0 = 0;
    for (int step = 0; step < b->steps && s == FSC_OK; step++) {
        if (step == 1) { /* the first step allocates the pools: not timed */
            fsc_engine_reset_pipe_stats(e);
            t0 = now_ms();
        }
        s = fsc_engine_step(e, tok, tok, B, B, NULL);
    }
    if (s == FSC_OK && r->rank == 0) b->ms = (now_ms() - t0) / (b->steps - 1);
    if (s == FSC_OK) s = fsc_engine_pipe_stats(e, &b->st[r->rank]);
    free(tok);
    fsc_engine_free(e);
    return s;
}

int main(int argc, char **argv) {
    int steps = argc > 1 ? atoi(argv[1]) : 4;
    if (steps < 2) steps = 2;
    const int cases[][2] = { { 2, 2 }, { 2, 4 }, { 2, 8 }, { 4, 4 }, { 4, 8 }, { 4, 16 } };
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    fsc_gpt_config cfg = { .layers = 8, .dim = 128, .heads = 4, .seq = 64, .vocab = 256 };
    printf("bench_pipe: GPT %d blocks, width %d, context %d, vocab %d; micro-batch 4 sequences; %ld cores\n",
           cfg.layers, cfg.dim, cfg.seq, cfg.vocab, cores);
    printf("%-3s %-3s %-6s %8s %9s  %-30s %12s %9s\n", "P", "M", "sched", "ideal", "measured", "per stage",
           "acts0 MiB", "ms/step");
    fsc_device *dev = NULL;
    if (fsc_device_create("cpu", &(fsc_device_opts){ .threads = 1 }, &dev) != FSC_OK) {
        fprintf(stderr, "bench_pipe: %s\n", fsc_last_error());
        return 1;
    }
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int P = cases[c][0], M = cases[c][1];
        int balance[16];
        fsc_model *m = NULL;
        fsc_status bs = fsc_gpt_model_create(dev, &cfg, &m);
        if (bs == FSC_OK) bs = fsc_balance_by_time(dev, m, P, 4, 3, balance);
        fsc_model_free(m);
        if (bs != FSC_OK) {
            fprintf(stderr, "bench_pipe: %s\n", fsc_last_error());
            return 1;
        }
        for (int sc = 0; sc < 2; sc++) {
            bench b = { .cfg = cfg, .steps = steps, .mb = 4 };
            b.po = (fsc_parallel_opts){ .kind = FSC_PAR_DDP, .pp = P, .accum = M, .no_sync = 1,
                                        .schedule = (fsc_pipe_schedule)sc,
                                        .pipe_checkpoint = FSC_PIPE_CKPT_NEVER, .balance = balance };
            fsc_cluster_opts co = { .world = P, .device = "cpu", .threads_per_rank = 1, .timeout_s = 600 };
            if (fsc_cluster_run(&co, rank_fn, &b) != FSC_OK) {
                fprintf(stderr, "bench_pipe: %s\n", fsc_last_error());
                return 1;
            }
            double mean = 0;
            char per[64] = "", *w = per;
            for (int s = 0; s < P; s++) {
                mean += b.st[s].bubble / P;
                w += snprintf(w, sizeof per - (size_t)(w - per), "%s%.3f", s ? " " : "", b.st[s].bubble);
            }
            printf("%-3d %-3d %-6s %8.3f %9.3f  %-30s %12.2f %9.1f%s\n", P, M, sc ? "1f1b" : "gpipe",
                   b.st[0].ideal_bubble, mean, per, (double)b.st[0].peak_acts_bytes / 1048576.0, b.ms,
                   P > cores ? "  (more stages than cores)" : "");
            printf("RESULT pipe P=%d M=%d %s measured %.4f ideal %.4f\n", P, M, sc ? "1f1b" : "gpipe", mean,
                   b.st[0].ideal_bubble);
            fflush(stdout);
        }
    }
    fsc_device_free(dev);
    return 0;
}
