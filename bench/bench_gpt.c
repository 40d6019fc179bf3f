/* bench_gpt: training throughput of a fixed small GPT on one rank, against the sgemm peak of the same
 * machine measured in the same run on the same threads. A benchmark, not a test: it prints numbers.
 *
 * Model: 4 layers, width 256, 4 heads, context 128, batch 8, vocabulary 256 (bytes).
 * FLOP per training step = 6 x params x tokens + attention, where attention counts the causal half of
 * the score and value products: forward 2 x B x T^2 x C per layer, backward twice that, so 6 x B x T^2 x C
 * per layer. Tokens/s is the median over the measured steps.
 * The sgemm peak is the best rate of a sweep of shapes before training and of a short probe (the best of
 * the model's shapes, 3 calls) after every step; the fraction of it is the strict figure. Other programs on a shared
 * machine slow steps and probes alike, so the median over steps of (step rate / the probe right after it)
 * is printed too, as the same-conditions fraction.
 * Usage: bench_gpt [--steps N] [--warmup N] [--threads N] [--data PATH] */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "fsc/fsc.h"
#include "bench_util.h"

int openblas_get_num_threads(void);

typedef struct {
    int steps, warmup, threads;
    const char *data;
    fsc_gpt_config gc;
    int B;
    /* results */
    double *step_s;
    double *probe;      /* (steps) sgemm GFLOP/s measured right after each measured step */
    double gemm_gflops;
    char gemm_shape[64];
    int best_shape[3];
    int blas_threads;
} bench;

static double clock_s(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Best GFLOP/s of C = A B (row-major, M x K times K x N) over reps (0: a few, by size) repetitions. */
static double sgemm_gflops(int M, int N, int K, float *A, float *B, float *C, int reps) {
    double best = 1e30;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, A, K, B, N, 0.0f, C, N); /* warm */
    if (reps <= 0) reps = (int)fmax(3.0, fmin(20.0, 2e9 / (2.0 * M * N * K)));
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, A, K, B, N, 0.0f, C, N);
        double t = now_s() - t0;
        if (t < best) best = t;
    }
    return 2.0 * M * N * K / best * 1e-9;
}

typedef struct { float *A, *B, *C; } gemm_bufs;

/* The sgemm peak on this thread's BLAS settings: a square size and the model's own shapes (B*T rows). */
static void measure_peak(bench *b, gemm_bufs *g) {
    int BT = b->B * b->gc.seq, C = b->gc.dim;
    int shapes[][3] = {{1024, 1024, 1024}, {BT, 3 * C, C}, {BT, 4 * C, C}, {BT, C, 4 * C}, {BT, C, C},
                       {BT, b->gc.vocab, C}};
    size_t cap = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        size_t m = (size_t)shapes[i][0], n = (size_t)shapes[i][1], k = (size_t)shapes[i][2];
        size_t need = m * k > k * n ? m * k : k * n;
        if (m * n > need) need = m * n;
        if (need > cap) cap = need;
    }
    float *A = malloc(cap * sizeof(float)), *Bm = malloc(cap * sizeof(float)), *Cm = malloc(cap * sizeof(float));
    if (!A || !Bm || !Cm) { free(A); free(Bm); free(Cm); return; }
    for (size_t i = 0; i < cap; i++) {
        A[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
        Bm[i] = (float)((i * 40503u) % 1000) * 1e-3f - 0.5f;
    }
    double best_model = 0.0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        double gf = sgemm_gflops(shapes[i][0], shapes[i][1], shapes[i][2], A, Bm, Cm, 0);
        printf("  sgemm %5d x %5d x %5d: %7.1f GFLOP/s\n", shapes[i][0], shapes[i][1], shapes[i][2], gf);
        if (gf > b->gemm_gflops) {
            b->gemm_gflops = gf;
            snprintf(b->gemm_shape, sizeof b->gemm_shape, "%dx%dx%d", shapes[i][0], shapes[i][1], shapes[i][2]);
        }
        if (i > 0 && gf > best_model) { /* the probe uses the best of the model's shapes (cheap to repeat) */
            best_model = gf;
            memcpy(b->best_shape, shapes[i], sizeof b->best_shape);
        }
    }
    *g = (gemm_bufs){ A, Bm, Cm };
}

/* The probe after a step: the best model shape again, best of 3 calls; it also raises the peak. */
static double probe_peak(bench *b, gemm_bufs *g) {
    if (!g->A) return 0.0;
    double gf = sgemm_gflops(b->best_shape[0], b->best_shape[1], b->best_shape[2], g->A, g->B, g->C, 3);
    if (gf > b->gemm_gflops) b->gemm_gflops = gf;
    return gf;
}

static uint8_t *load_tokens(const char *path, int vocab, size_t *n) {
    size_t cap = 1 << 20;
    uint8_t *buf = malloc(cap);
    if (!buf) return NULL;
    FILE *f = path ? fopen(path, "rb") : NULL;
    *n = f ? fread(buf, 1, cap, f) : 0;
    if (f) fclose(f);
    if (*n < 4096) { /* no corpus: deterministic bytes */
        uint32_t x = 12345;
        for (size_t i = 0; i < cap; i++) buf[i] = (uint8_t)((x = x * 1664525u + 1013904223u) >> 24);
        *n = cap;
    }
    for (size_t i = 0; i < *n; i++) buf[i] = (uint8_t)(buf[i] % (unsigned)vocab);
    return buf;
}

static fsc_status bench_fn(fsc_rank *r, void *arg) {
    bench *b = arg;
    b->blas_threads = openblas_get_num_threads();
    printf("sgemm peak on this rank's thread (%d BLAS threads):\n", b->blas_threads);
    gemm_bufs g = { NULL, NULL, NULL };
    measure_peak(b, &g);
    fsc_parallel_opts po = {.kind = FSC_PAR_NONE, .reshard_after_forward = -1, .param_dtype = FSC_F32,
                            .reduce_dtype = FSC_F32, .accum = 1, .no_sync = 1, .clip = 1.0f};
    fsc_optim_config oc = {.kind = FSC_OPT_ADAMW, .lr = 1e-3f};
    fsc_engine *e = NULL;
    FSC_TRY(fsc_engine_create(r, &b->gc, &po, &oc, 1, &e));
    int T = b->gc.seq;
    size_t n = (size_t)b->B * (size_t)T, ntok = 0;
    int32_t *tok = malloc(n * sizeof *tok), *tgt = malloc(n * sizeof *tgt);
    uint8_t *data = load_tokens(b->data, b->gc.vocab, &ntok);
    fsc_status s = tok && tgt && data ? FSC_OK : fsc_error(FSC_ERR_NOMEM, "bench: out of host memory");
    for (int step = 0; step < b->warmup + b->steps && s == FSC_OK; step++) {
        for (int i = 0; i < b->B; i++) { /* the trainer's data order */
            size_t start = ((size_t)step * (size_t)b->B + (size_t)i) * (size_t)T % (ntok - (size_t)T);
            for (int t = 0; t < T; t++) {
                tok[(size_t)i * T + t] = data[start + (size_t)t];
                tgt[(size_t)i * T + t] = data[start + (size_t)t + 1];
            }
        }
        fsc_step_info info;
        double t0 = now_s(), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
        s = fsc_engine_step(e, tok, tgt, b->B, b->B, &info);
        double dt = now_s() - t0, dc = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
        if (s == FSC_OK) {
            double pg = step >= b->warmup ? probe_peak(b, &g) : 0.0;
            printf("  step %2d%s loss %.4f  cpu %7.1f ms  %7.1f ms", step + 1,
                   step < b->warmup ? " (warm-up)" : "         ", info.loss, dc * 1e3, dt * 1e3);
            if (step >= b->warmup) {
                printf("  sgemm probe %6.1f GFLOP/s", pg);
                b->step_s[step - b->warmup] = dt;
                b->probe[step - b->warmup] = pg;
            }
            printf("\n");
        }
    }
    free(tok);
    free(tgt);
    free(data);
    free(g.A);
    free(g.B);
    free(g.C);
    fsc_engine_free(e);
    return s;
}

int main(int argc, char **argv) {
    bench b = {.steps = 15, .warmup = 3, .threads = 0, .data = "examples/data/coriolanus.txt",
               .gc = {.layers = 4, .dim = 256, .heads = 4, .seq = 128, .vocab = 256}, .B = 8};
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && strcmp(argv[i], "--steps") == 0) b.steps = atoi(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--warmup") == 0) b.warmup = atoi(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--threads") == 0) b.threads = atoi(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--data") == 0) b.data = argv[++i];
        else {
            fprintf(stderr, "usage: bench_gpt [--steps N] [--warmup N] [--threads N] [--data PATH]\n");
            return 2;
        }
    }
    if (b.steps < 1 || b.warmup < 0 || b.threads < 0) {
        fprintf(stderr, "bench_gpt: --steps must be >= 1, --warmup and --threads >= 0\n");
        return 2;
    }
    b.step_s = calloc((size_t)b.steps, sizeof(double));
    b.probe = calloc((size_t)b.steps, sizeof(double));
    double *frac = calloc((size_t)b.steps, sizeof(double));
    if (!b.step_s || !b.probe || !frac) return 1;
    size_t P = fsc_gpt_num_params(&b.gc);
    int L = b.gc.layers, C = b.gc.dim, T = b.gc.seq;
    printf("bench_gpt: GPT %d layers, width %d, %d heads, context %d, batch %d, vocab %d: %zu parameters\n", L, C,
           b.gc.heads, T, b.B, b.gc.vocab, P);
    fsc_status s = fsc_cluster_run(&(fsc_cluster_opts){.world = 1, .threads_per_rank = b.threads}, bench_fn, &b);
    if (s != FSC_OK) {
        fprintf(stderr, "bench_gpt: %s\n", fsc_last_error());
        free(b.step_s);
        free(b.probe);
        free(frac);
        return 1;
    }
    double tokens = (double)b.B * T;
    double flop = 6.0 * (double)P * tokens + 6.0 * (double)L * b.B * (double)T * T * C;
    for (int i = 0; i < b.steps; i++) frac[i] = b.probe[i] > 0 ? flop / b.step_s[i] * 1e-9 / b.probe[i] : 0.0;
    double fmed = median(frac, b.steps), med = median(b.step_s, b.steps);
    double gflops = flop / med * 1e-9;
    printf("FLOP per step = 6 x params x tokens + 6 x B x T^2 x C x layers = 6 x %zu x %.0f + 6 x %d x %d^2 x %d x %d"
           " = %.3f GFLOP\n", P, tokens, b.B, T, C, L, flop * 1e-9);
    printf("fsc: %d steps after %d warm-up, median %.1f ms/step: %.0f tokens/s, %.1f GFLOP/s = %.0f%% of the "
           "sgemm peak (%.1f GFLOP/s at %s, %d BLAS threads)\n",
           b.steps, b.warmup, med * 1e3, tokens / med, gflops, 100.0 * gflops / b.gemm_gflops, b.gemm_gflops,
           b.gemm_shape, b.blas_threads);
    printf("fsc: same-conditions fraction (median over steps of the step's rate / the sgemm probe after it): "
           "%.0f%%\n", 100.0 * fmed);
    printf("RESULT fsc tokens_per_s %.1f gflops %.2f sgemm_peak_gflops %.2f frac_peak %.3f frac_probe %.3f threads %d\n",
           tokens / med, gflops, b.gemm_gflops, gflops / b.gemm_gflops, fmed, b.blas_threads);
    free(b.step_s);
    free(b.probe);
    free(frac);
    return 0;
}
