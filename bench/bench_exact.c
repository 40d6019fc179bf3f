/* bench_exact: the exact reduction (--reduce exact, docs/determinism.md) against the ordered one in the same run:
 * the benchmark GPT (4 layers, width 256, 4 heads, context 128, global batch 8) on 2 simulated ranks with DDP, one
 * BLAS thread per rank, each rank's 4 sequences one unit (U = the per-rank micro-batch). Prints the median step
 * time of each and their ratio (goal: exact <= 1.10 x ordered), communication bytes per step, and the error of
 * the reduced gradient of one step against a float64 reference (the two units' gradients, each from a rank of
 * its own, added in double). A benchmark, not a test: it prints numbers.
 *
 * Timing: the two engines live side by side on the same simulated cluster and take turns, one step each per
 * round; the ratio is the median over rounds of the same-round ratio.
 * Usage: bench_exact [--steps N] [--warmup N] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fsc/fsc.h"
#include "bench_util.h"

#define BENCH_GPT { .layers = 4, .dim = 256, .heads = 4, .seq = 128, .vocab = 256 }
enum { B = 8, WORLD = 2 };

typedef struct {
    fsc_gpt_config gc;
    int steps, warmup;
    double *step_s;        /* (2 x steps) rank 0: ordered, exact */
    double comm[2];        /* rank 0: bytes per step */
    size_t P;
    float *grad[2];        /* rank 0: (P) the reduced gradient of the first step, ordered and exact */
    float *unit[WORLD];    /* the gradient of each rank's unit, alone (the reference run) */
    int reference;         /* the reference run: one rank per unit, kind none */
    int only;              /* a communication run: that engine alone (the engines share the world's counters) */
    int recomputed;        /* rank 0: timed exact steps that ran twice (their exponent changed) */
} run;

static fsc_parallel_opts opts(int exact, int world) {
    fsc_parallel_opts po = fsc_parallel_opts_default();
    po.kind = world > 1 ? FSC_PAR_DDP : FSC_PAR_NONE;
    po.reduce_exact = exact;
    return po;
}

/* The batch of data rank d at step (its lb sequences of T tokens). */
static void batch(int32_t *tok, int32_t *tgt, int step, int d, int lb, int T) {
    for (int i = 0; i < lb * T; i++) {
        uint32_t x = (uint32_t)(step * 7919 + (d * lb * T + i) * 2654435761u);
        tok[i] = (int32_t)(x >> 24);
        tgt[i] = (int32_t)((x >> 16) & 255);
    }
}

/* The model's gradient tensors, in tensor order, into host (P floats). */
static fsc_status grads(fsc_engine *e, fsc_device *dev, float *host) {
    const fsc_model *m = fsc_engine_model(e);
    for (int i = 0; i < m->n_tensors; i++) {
        FSC_TRY(fsc_device_download(dev, host, m->grad[i], m->info[i].numel * sizeof(float)));
        host += m->info[i].numel;
    }
    return FSC_OK;
}

/* The reference run: each rank alone (kind none, world 1) on the unit of data rank `d`, with the global batch
 * of 4: its gradient is the unit's in the 2-rank run times 2 (a power of two: exact). lr 0 keeps the weights. */
static fsc_status reference(fsc_rank *r, run *R, int d) {
    const int T = R->gc.seq, lb = B / WORLD;
    fsc_optim_config oc = { .kind = FSC_OPT_ADAMW, .lr = 0.0f };
    fsc_parallel_opts po = opts(0, 1);
    fsc_engine *e = NULL;
    FSC_TRY(fsc_engine_create(r, &R->gc, &po, &oc, 1, &e));
    int32_t *tok = malloc((size_t)lb * T * sizeof(int32_t)), *tgt = malloc((size_t)lb * T * sizeof(int32_t));
    fsc_status s = tok && tgt ? FSC_OK : fsc_error(FSC_ERR_NOMEM, "bench_exact: out of host memory");
    if (s == FSC_OK) batch(tok, tgt, 0, d, lb, T);
    if (s == FSC_OK) s = fsc_engine_step(e, tok, tgt, lb, lb, NULL);
    if (s == FSC_OK) s = grads(e, r->dev, R->unit[d]);
    for (size_t i = 0; s == FSC_OK && i < R->P; i++) R->unit[d][i] *= 0.5f;
    free(tok), free(tgt);
    fsc_engine_free(e);
    return s;
}

static fsc_status rank_fn(fsc_rank *r, void *arg) {
    run *R = arg;
    if (R->reference) {
        for (int d = 0; d < WORLD; d++) FSC_TRY(reference(r, R, d));
        return FSC_OK;
    }
    const int T = R->gc.seq, lb = B / r->world;
    fsc_optim_config oc = { .kind = FSC_OPT_ADAMW, .lr = 1e-3f };
    fsc_engine *e[2] = { 0 };
    fsc_status s = FSC_OK;
    const int c0 = R->only >= 0 ? R->only : 0, c1 = R->only >= 0 ? R->only + 1 : 2;
    for (int c = c0; c < c1 && s == FSC_OK; c++) {
        fsc_parallel_opts po = opts(c, r->world);
        s = fsc_engine_create(r, &R->gc, &po, &oc, 1, &e[c]);
    }
    int32_t *tok = malloc((size_t)lb * T * sizeof(int32_t)), *tgt = malloc((size_t)lb * T * sizeof(int32_t));
    if (s == FSC_OK && (!tok || !tgt)) s = fsc_error(FSC_ERR_NOMEM, "bench_exact: out of host memory");
    for (int step = 0; step < R->warmup + R->steps && s == FSC_OK; step++) {
        batch(tok, tgt, step, r->rank, lb, T);
        for (int c = c0; c < c1 && s == FSC_OK; c++) {
            if (step == R->warmup) fsc_engine_reset_comm_stats(e[c]);
            double t0 = now_s();
            fsc_step_info info = { 0 };
            s = fsc_engine_step(e[c], tok, tgt, lb, B, &info);
            if (r->rank == 0 && step >= R->warmup) R->step_s[c * R->steps + step - R->warmup] = now_s() - t0;
            if (r->rank == 0 && step >= R->warmup && info.exact_attempts > 1) R->recomputed++;
            /* the first step's reduced gradient (DDP without accumulation reduces in place; no clipping) */
            if (s == FSC_OK && step == 0 && r->rank == 0 && R->only < 0) s = grads(e[c], r->dev, R->grad[c]);
        }
    }
    for (int c = c0; c < c1 && s == FSC_OK && r->rank == 0 && R->only >= 0; c++) {
        fsc_comm_stats cs;
        fsc_engine_comm_stats(e[c], &cs);
        double total = 0;
        for (int op = 0; op < FSC_OP_COUNT; op++) total += cs.bytes[op];
        R->comm[c] = total / R->steps;
    }
    free(tok), free(tgt);
    for (int c = 0; c < 2; c++) fsc_engine_free(e[c]);
    return s;
}

/* Normwise error of x against ref: max |x - ref| / max |ref|. */
static double error(const float *x, const double *ref, size_t n) {
    double e = 0, m = 0;
    for (size_t i = 0; i < n; i++) e = fmax(e, fabs((double)x[i] - ref[i])), m = fmax(m, fabs(ref[i]));
    return m > 0 ? e / m : 0;
}

int main(int argc, char **argv) {
    int steps = 12, warmup = 2;
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && !strcmp(argv[i], "--steps")) steps = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--warmup")) warmup = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_exact [--steps N] [--warmup N]\n");
            return 2;
        }
    }
    if (steps < 1 || warmup < 0) {
        fprintf(stderr, "bench_exact: steps >= 1, warmup >= 0\n");
        return 2;
    }
    printf("bench_exact: GPT 4 layers, width 256, 4 heads, context 128, vocab 256, global batch 8, 2 ranks, DDP, "
           "units of 4 (the per-rank micro-batch), 1 BLAS thread per rank; %d rounds after %d warm-up, ordered and "
           "exact taking turns\n", steps, warmup);
    run R = { .gc = BENCH_GPT, .steps = steps, .warmup = warmup, .only = -1 };
    R.P = fsc_gpt_num_params(&R.gc);
    R.step_s = calloc((size_t)2 * steps, sizeof(double));
    double *ratio = calloc((size_t)steps, sizeof(double)), *ref = calloc(R.P, sizeof(double));
    for (int k = 0; k < 2; k++) R.grad[k] = calloc(R.P, sizeof(float)), R.unit[k] = calloc(R.P, sizeof(float));
    if (!R.step_s || !ratio || !ref || !R.grad[0] || !R.grad[1] || !R.unit[0] || !R.unit[1]) return 1;
    fsc_cluster_opts co = { .world = WORLD, .device = "cpu", .threads_per_rank = 1 };
    fsc_cluster_opts c1 = { .world = 1, .device = "cpu", .threads_per_rank = 1 };
    run Q = R, C[2];
    double comm_s[2]; /* the communication runs' own step times: R's are the timed rounds */
    Q.reference = 1;
    fsc_status st = fsc_cluster_run(&co, rank_fn, &R);
    if (st == FSC_OK) st = fsc_cluster_run(&c1, rank_fn, &Q);
    for (int c = 0; c < 2 && st == FSC_OK; c++) { /* communication per step of each alone, after a warm-up step */
        C[c] = R;
        C[c].only = c, C[c].steps = 1, C[c].warmup = 2; /* the third step: its exponent is the second's */
        C[c].step_s = comm_s; /* it writes step_s[c] */
        st = fsc_cluster_run(&co, rank_fn, &C[c]);
        R.comm[c] = C[c].comm[c];
    }
    if (st != FSC_OK) {
        fprintf(stderr, "bench_exact: %s\n", fsc_last_error());
        return 1;
    }
    for (size_t i = 0; i < R.P; i++) ref[i] = (double)R.unit[0][i] + (double)R.unit[1][i]; /* exact in double */
    for (int i = 0; i < steps; i++) ratio[i] = R.step_s[steps + i] / R.step_s[i];
    const double r = median(ratio, steps), eo = error(R.grad[0], ref, R.P), ee = error(R.grad[1], ref, R.P);
    const char *name[2] = { "ordered", "exact" };
    const double err[2] = { eo, ee };
    printf("%-10s %10s %10s %12s %22s\n", "reduce", "ms/step", "tokens/s", "comm KiB/st", "grad error vs f64");
    for (int c = 0; c < 2; c++) {
        double med = median(R.step_s + (size_t)c * steps, steps);
        printf("%-10s %10.1f %10.0f %12.1f %22.3g\n", name[c], med * 1e3, B * 128.0 / med, R.comm[c] / 1024.0, err[c]);
        printf("RESULT exact %s ms_per_step %.2f comm_bytes_per_step %.0f grad_error %.3g\n", name[c], med * 1e3,
               R.comm[c], err[c]);
    }
    printf("exact / ordered step time (median over rounds of the same-round ratio): %.3f (goal <= 1.10); exact steps "
           "recomputed on a new exponent: %d of %d\n", r, R.recomputed, steps);
    printf("grad error: max |g - g64| / max |g64| of the first step's reduced gradient; g64 the two units' gradients "
           "added in double\n");
    free(R.step_s), free(ratio), free(ref);
    for (int k = 0; k < 2; k++) free(R.grad[k]), free(R.unit[k]);
    return 0;
}
