/* CPU kernels: gemm on OpenBLAS, elementwise ops, bias, embedding and layer norm.
 * Every sum here runs in a fixed order, so the bits never depend on the thread count: the pool
 * (cpu_pool.c) splits elementwise work anywhere, per-row work by rows and sums over rows by columns,
 * so each element is computed by the same operations in the same order whatever range holds it.
 * sgemm is OpenBLAS's: the same call gives the same bits every time, also when many ranks call it at
 * once, but the partition of C among OpenBLAS threads changes which micro-kernel tile an element falls
 * in, so results differ between OpenBLAS thread counts (process-global; see cpu_device.c). Runs compared
 * bit for bit must use the same count, as ranks of one process always do.
 * Plain loops the compiler can vectorize; no function pointers per element. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <cblas.h>
#include "cpu.h"
#include "cpu_math.h"

#define CHECK_DIM(cond, ...) \
    do { if (!(cond)) return fsc_error(FSC_ERR_INVALID, __VA_ARGS__); } while (0)

typedef struct {
    int transa, transb, M, N, K, lda, ldb, ldc;
    float alpha, beta;
    const float *A, *B;
    float *C;
    int64_t sa, sb, sc;
} gemm_arg;

/* Threads inside OpenBLAS at once, at most. OpenBLAS keeps a fixed table of work buffers (NUM_BUFFERS, at least
 * 50, and its own threads hold some): past it, it prints a warning to stderr, and then either grows the table
 * with a race that corrupts the heap (0.3.21: "corrupted double-linked list", an abort) or terminates the program
 * ("too many memory regions"). 513 simulated ranks multiplying at once got there. Calls beyond the gate wait
 * (no rank waits for another inside it: a product only computes), so the bits are the same. */
#define BLAS_CALLERS 32
static pthread_mutex_t blas_gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t blas_gate_cv = PTHREAD_COND_INITIALIZER;
static int blas_in;

static void blas_enter(void) {
    pthread_mutex_lock(&blas_gate_mu);
    while (blas_in >= BLAS_CALLERS) pthread_cond_wait(&blas_gate_cv, &blas_gate_mu);
    blas_in++;
    pthread_mutex_unlock(&blas_gate_mu);
}

static void blas_leave(void) {
    pthread_mutex_lock(&blas_gate_mu);
    blas_in--;
    pthread_cond_signal(&blas_gate_cv);
    pthread_mutex_unlock(&blas_gate_mu);
}

static void gemm_range(void *p, size_t lo, size_t hi) {
    const gemm_arg *g = p;
    if (g->K > 0) blas_enter();
    for (size_t b = lo; b < hi; b++) {
        float *Cb = g->C + (int64_t)b * g->sc;
        if (g->K == 0) { /* C = beta * C; beta 0 overwrites (NaN in C does not survive) */
            for (int i = 0; i < g->M; i++) {
                float *row = Cb + (size_t)i * (size_t)g->ldc;
                for (int j = 0; j < g->N; j++) row[j] = (g->beta == 0.0f) ? 0.0f : g->beta * row[j];
            }
            continue;
        }
        cblas_sgemm(CblasRowMajor, g->transa ? CblasTrans : CblasNoTrans, g->transb ? CblasTrans : CblasNoTrans,
                    g->M, g->N, g->K, g->alpha, g->A + (int64_t)b * g->sa, g->lda, g->B + (int64_t)b * g->sb, g->ldb,
                    g->beta, Cb, g->ldc);
    }
    if (g->K > 0) blas_leave();
}

/* OpenBLAS runs a product of at most this many M*N*K on the calling thread whatever its thread count
 * (GEMM_MULTITHREAD_THRESHOLD 4 x 65536): the entries of a batch of such products may run on the pool's
 * threads at once with the bits of a serial loop. Larger ones run one after another, each on OpenBLAS's
 * threads. */
#define SMALL_GEMM 262144.0

fsc_status cpu_gemm(void *ctx, int transa, int transb, int M, int N, int K, float alpha, const float *A, int lda,
                    int64_t sa, const float *B, int ldb, int64_t sb, float beta, float *C, int ldc, int64_t sc,
                    int batch) {
    CHECK_DIM(M >= 0 && N >= 0 && K >= 0 && batch >= 0, "gemm: negative size (M=%d N=%d K=%d batch=%d)", M, N, K, batch);
    int acols = transa ? M : K, bcols = transb ? K : N;
    CHECK_DIM(lda >= (acols > 1 ? acols : 1), "gemm: lda %d < %d columns of A%s", lda, acols, transa ? "^T" : "");
    CHECK_DIM(ldb >= (bcols > 1 ? bcols : 1), "gemm: ldb %d < %d columns of B%s", ldb, bcols, transb ? "^T" : "");
    CHECK_DIM(ldc >= (N > 1 ? N : 1), "gemm: ldc %d < N = %d", ldc, N);
    if (M == 0 || N == 0 || batch == 0) return FSC_OK;
    gemm_arg g = { transa, transb, M, N, K, lda, ldb, ldc, alpha, beta, A, B, C, sa, sb, sc };
    if (batch > 1 && (double)M * N * K <= SMALL_GEMM && (double)M * N * K * batch >= 65536.0)
        cpu_parallel(ctx, (size_t)batch, 1, 1, gemm_range, &g);
    else
        gemm_range(&g, 0, (size_t)batch);
    return FSC_OK;
}

static int is_float_type(fsc_dtype t) { return t == FSC_F32 || t == FSC_BF16 || t == FSC_F16; }

typedef struct {
    void *dst;
    const void *src;
} cvt_arg;

static void to_bf16_range(void *p, size_t lo, size_t hi) {
    const cvt_arg *a = p;
    const float *s = a->src;
    uint16_t *d = a->dst;
    for (size_t i = lo; i < hi; i++) d[i] = fsc_cpu_f32_to_bf16(s[i]);
}

static void from_bf16_range(void *p, size_t lo, size_t hi) {
    const cvt_arg *a = p;
    const uint16_t *s = a->src;
    float *d = a->dst;
    for (size_t i = lo; i < hi; i++) d[i] = fsc_cpu_bf16_to_f32(s[i]);
}

fsc_status cpu_convert(void *ctx, void *dst, fsc_dtype dt, const void *src, fsc_dtype st, size_t n) {
    if (!is_float_type(dt) || !is_float_type(st))
        return fsc_error(FSC_ERR_INVALID, "convert: %s to %s (only f32, bf16 and f16 convert)", fsc_dtype_name(st),
                         fsc_dtype_name(dt));
    cvt_arg a = { dst, src };
    size_t db = n * fsc_dtype_size(dt), sb = n * fsc_dtype_size(st);
    const char *d = dst, *x = src;
    if (dt == st) {
        if (dst != src) memmove(dst, src, db);
    } else if (n && d < x + sb && x < d + db) { /* in place (or overlapping): as if through a temporary */
        void *tmp = malloc(db);
        if (!tmp) return fsc_error(FSC_ERR_NOMEM, "convert in place: out of host memory for %zu bytes", db);
        fsc_convert_host(tmp, dt, src, st, n);
        memcpy(dst, tmp, db);
        free(tmp);
    } else if (st == FSC_F32 && dt == FSC_BF16) {
        cpu_parallel(ctx, n, CPU_STEP, CPU_GRAIN, to_bf16_range, &a);
    } else if (st == FSC_BF16 && dt == FSC_F32) {
        cpu_parallel(ctx, n, CPU_STEP, CPU_GRAIN, from_bf16_range, &a);
    } else {
        fsc_convert_host(dst, dt, src, st, n);
    }
    return FSC_OK;
}

/* Elementwise kernels: one argument block, a range function each, split anywhere. */
typedef struct {
    float *out;
    const float *a, *b;
    float s;
} ew_arg;

static void scale_range(void *p, size_t lo, size_t hi) {
    const ew_arg *e = p;
    float *x = e->out, a = e->s;
    for (size_t i = lo; i < hi; i++) x[i] = a * x[i];
}

static void axpy_range(void *p, size_t lo, size_t hi) {
    const ew_arg *e = p;
    float *y = e->out, a = e->s;
    const float *x = e->a;
    for (size_t i = lo; i < hi; i++) y[i] = y[i] + a * x[i];
}

static void add_range(void *p, size_t lo, size_t hi) {
    const ew_arg *e = p;
    float *out = e->out;
    const float *a = e->a, *b = e->b;
    for (size_t i = lo; i < hi; i++) out[i] = a[i] + b[i];
}

fsc_status cpu_scale(void *ctx, float *x, float a, size_t n) {
    ew_arg e = { x, NULL, NULL, a };
    cpu_parallel(ctx, n, CPU_STEP, CPU_GRAIN, scale_range, &e);
    return FSC_OK;
}

fsc_status cpu_axpy(void *ctx, float *y, float a, const float *x, size_t n) {
    ew_arg e = { y, x, NULL, a };
    cpu_parallel(ctx, n, CPU_STEP, CPU_GRAIN, axpy_range, &e);
    return FSC_OK;
}

fsc_status cpu_add(void *ctx, float *out, const float *a, const float *b, size_t n) {
    ew_arg e = { out, a, b, 0.0f };
    cpu_parallel(ctx, n, CPU_STEP, CPU_GRAIN, add_range, &e);
    return FSC_OK;
}

#define GELU_S 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_C 0.044715f

/* 0.5 x (1 + tanh u) = x sigmoid(2u) = x / (1 + exp(-2u)), u = S (x + c x^3): one vectorizable exp. */
static void gelu_forward_range(void *p, size_t lo, size_t hi) {
    const ew_arg *e = p;
    float *out = e->out;
    const float *inp = e->a;
    for (size_t i = lo; i < hi; i++) {
        float x = inp[i];
        float u = GELU_S * (x + GELU_C * x * x * x);
        out[i] = x / (1.0f + fsc_cpu_expf(-2.0f * u));
    }
}

fsc_status cpu_gelu_forward(void *ctx, float *out, const float *inp, size_t n) {
    ew_arg e = { out, inp, NULL, 0.0f };
    cpu_parallel(ctx, n, CPU_STEP, CPU_GRAIN, gelu_forward_range, &e);
    return FSC_OK;
}

/* d/dx [0.5 x (1 + tanh u)] = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) S (1 + 3 c x^2); with s = sigmoid(2u):
 * 0.5 (1 + tanh u) = s and 1 - tanh^2 u = 4 s (1 - s), so the derivative is s + 2 x s (1 - s) S (1 + 3 c x^2). */
static void gelu_backward_range(void *p, size_t lo, size_t hi) {
    const ew_arg *e = p;
    float *dinp = e->out;
    const float *inp = e->a, *dout = e->b;
    for (size_t i = lo; i < hi; i++) {
        float x = inp[i];
        float u = GELU_S * (x + GELU_C * x * x * x);
        float s = 1.0f / (1.0f + fsc_cpu_expf(-2.0f * u));
        float g = s + 2.0f * x * s * (1.0f - s) * GELU_S * (1.0f + 3.0f * GELU_C * x * x);
        dinp[i] = g * dout[i];
    }
}

fsc_status cpu_gelu_backward(void *ctx, float *dinp, const float *inp, const float *dout, size_t n) {
    ew_arg e = { dinp, inp, dout, 0.0f };
    cpu_parallel(ctx, n, CPU_STEP, CPU_GRAIN, gelu_backward_range, &e);
    return FSC_OK;
}

/* Row kernels split by rows, column sums by columns: a range of rows (or columns) is [lo, hi). */
typedef struct {
    float *out;
    const float *in;
    size_t N;
    int OC;
} rows_arg;

static void bias_add_range(void *p, size_t lo, size_t hi) {
    const rows_arg *r = p;
    for (size_t n = lo; n < hi; n++) {
        float *o = r->out + n * (size_t)r->OC;
        for (int j = 0; j < r->OC; j++) o[j] += r->in[j];
    }
}

fsc_status cpu_bias_add(void *ctx, float *out, const float *bias, size_t N, int OC) {
    CHECK_DIM(OC >= 0, "bias_add: negative width %d", OC);
    rows_arg r = { out, bias, N, OC };
    cpu_parallel(ctx, N, 1, cpu_row_grain((size_t)OC), bias_add_range, &r);
    return FSC_OK;
}

/* columns [lo, hi): rows in ascending order, each added into dbias */
static void bias_grad_range(void *p, size_t lo, size_t hi) {
    const rows_arg *r = p;
    float *db = r->out;
    for (size_t n = 0; n < r->N; n++) {
        const float *d = r->in + n * (size_t)r->OC;
        for (size_t j = lo; j < hi; j++) db[j] += d[j];
    }
}

fsc_status cpu_bias_grad(void *ctx, float *dbias, const float *dout, size_t N, int OC) {
    CHECK_DIM(OC >= 0, "bias_grad: negative width %d", OC);
    rows_arg r = { dbias, dout, N, OC };
    cpu_parallel(ctx, (size_t)OC, CPU_STEP, cpu_row_grain(N), bias_grad_range, &r);
    return FSC_OK;
}

typedef struct {
    float *out, *dwte, *dwpe;
    const float *wte, *wpe, *dout;
    const int32_t *tok;
    int B, T, C;
} enc_arg;

/* rows (b, t) in [lo, hi) */
static void encoder_forward_range(void *p, size_t lo, size_t hi) {
    const enc_arg *e = p;
    size_t C = (size_t)e->C;
    for (size_t r = lo; r < hi; r++) {
        float *o = e->out + r * C; /* (C) */
        const float *we = e->wte + (size_t)e->tok[r] * C, *wp = e->wpe + (r % (size_t)e->T) * C;
        for (size_t i = 0; i < C; i++) o[i] = we[i] + wp[i];
    }
}

fsc_status cpu_encoder_forward(void *ctx, float *out, const int32_t *tok, const float *wte, const float *wpe,
                               int B, int T, int C) {
    CHECK_DIM(B >= 0 && T >= 0 && C >= 0, "encoder_forward: negative size (B=%d T=%d C=%d)", B, T, C);
    for (int i = 0; i < B * T; i++)
        CHECK_DIM(tok[i] >= 0, "encoder_forward: token %d at (b=%d, t=%d) is negative", (int)tok[i], i / T, i % T);
    enc_arg e = { .out = out, .wte = wte, .wpe = wpe, .tok = tok, .B = B, .T = T, .C = C };
    cpu_parallel(ctx, (size_t)B * T, 1, cpu_row_grain((size_t)C), encoder_forward_range, &e);
    return FSC_OK;
}

/* columns [lo, hi) of every row, rows in (b, t) order */
static void encoder_backward_range(void *p, size_t lo, size_t hi) {
    const enc_arg *e = p;
    size_t C = (size_t)e->C;
    for (int b = 0; b < e->B; b++) {
        for (int t = 0; t < e->T; t++) {
            const float *d = e->dout + ((size_t)b * e->T + t) * C; /* (C) */
            float *dte = e->dwte + (size_t)e->tok[b * e->T + t] * C, *dpe = e->dwpe + (size_t)t * C;
            for (size_t i = lo; i < hi; i++) {
                dte[i] += d[i];
                dpe[i] += d[i];
            }
        }
    }
}

fsc_status cpu_encoder_backward(void *ctx, float *dwte, float *dwpe, const float *dout, const int32_t *tok,
                                int B, int T, int C) {
    CHECK_DIM(B >= 0 && T >= 0 && C >= 0, "encoder_backward: negative size (B=%d T=%d C=%d)", B, T, C);
    for (int i = 0; i < B * T; i++)
        CHECK_DIM(tok[i] >= 0, "encoder_backward: token %d at position %d is negative", (int)tok[i], i);
    enc_arg e = { .dwte = dwte, .dwpe = dwpe, .dout = dout, .tok = tok, .B = B, .T = T, .C = C };
    cpu_parallel(ctx, (size_t)C, CPU_STEP, cpu_row_grain((size_t)B * T), encoder_backward_range, &e);
    return FSC_OK;
}

/* Sums of a row in 8 lanes (lane l takes elements l, l+8, ...; each lane ascending), lanes combined
 * pairwise: a fixed order that the compiler turns into vector adds. */
#define LANES 8
static inline float row_sum8(const float *x, int C) {
    float acc[LANES] = {0};
    int i = 0;
    for (; i + LANES <= C; i += LANES)
        for (int l = 0; l < LANES; l++) acc[l] += x[i + l];
    for (int l = 0; i < C; i++, l++) acc[l] += x[i];
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* sum_i (x_i - m)^2 in the same lane order */
static inline float row_sqdev8(const float *x, float m, int C) {
    float acc[LANES] = {0};
    int i = 0;
    for (; i + LANES <= C; i += LANES)
        for (int l = 0; l < LANES; l++) {
            float d = x[i + l] - m;
            acc[l] += d * d;
        }
    for (int l = 0; i < C; i++, l++) {
        float d = x[i] - m;
        acc[l] += d * d;
    }
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

typedef struct {
    float *out, *mean, *rstd, *dinp, *dw, *db;
    const float *inp, *w, *b, *dout, *cmean, *crstd;
    int C;
    size_t N;
} ln_arg;

static void layernorm_forward_range(void *p, size_t lo, size_t hi) {
    const ln_arg *a = p;
    int C = a->C;
    const float *w = a->w, *b = a->b;
    for (size_t n = lo; n < hi; n++) {
        const float *x = a->inp + n * (size_t)C; /* (C) */
        float *o = a->out + n * (size_t)C;
        float m = row_sum8(x, C) / (float)C;
        float r = 1.0f / sqrtf(row_sqdev8(x, m, C) / (float)C + 1e-5f);
        for (int i = 0; i < C; i++) o[i] = (r * (x[i] - m)) * w[i] + b[i];
        a->mean[n] = m;
        a->rstd[n] = r;
    }
}

fsc_status cpu_layernorm_forward(void *ctx, float *out, float *mean, float *rstd, const float *inp,
                                 const float *w, const float *b, size_t N, int C) {
    CHECK_DIM(C > 0, "layernorm_forward: width %d must be positive", C);
    ln_arg a = { .out = out, .mean = mean, .rstd = rstd, .inp = inp, .w = w, .b = b, .C = C, .N = N };
    cpu_parallel(ctx, N, 1, cpu_row_grain((size_t)C), layernorm_forward_range, &a);
    return FSC_OK;
}

/* dinp += for rows [lo, hi): the two means of the standard layer norm backward (lane sums as above),
 * then dx; restrict (the buffers are distinct) lets the last loop vectorize. */
static void ln_backward_rows(void *p, size_t lo, size_t hi) {
    const ln_arg *a = p;
    int C = a->C;
    const float *w = a->w;
    for (size_t n = lo; n < hi; n++) {
        const float *x = a->inp + n * (size_t)C, *d = a->dout + n * (size_t)C; /* (C) */
        float *restrict dx = a->dinp + n * (size_t)C;
        float m = a->cmean[n], r = a->crstd[n];
        float a1[LANES] = {0}, a2[LANES] = {0};
        int i = 0;
        for (; i + LANES <= C; i += LANES)
            for (int l = 0; l < LANES; l++) {
                float norm = (x[i + l] - m) * r;
                float dnorm = w[i + l] * d[i + l];
                a1[l] += dnorm;
                a2[l] += dnorm * norm;
            }
        for (int l = 0; i < C; i++, l++) {
            float norm = (x[i] - m) * r;
            float dnorm = w[i] * d[i];
            a1[l] += dnorm;
            a2[l] += dnorm * norm;
        }
        float dnorm_mean = (((a1[0] + a1[1]) + (a1[2] + a1[3])) + ((a1[4] + a1[5]) + (a1[6] + a1[7]))) / (float)C;
        float dnorm_norm_mean = (((a2[0] + a2[1]) + (a2[2] + a2[3])) + ((a2[4] + a2[5]) + (a2[6] + a2[7]))) / (float)C;
        for (i = 0; i < C; i++) {
            float norm = (x[i] - m) * r;
            float dnorm = w[i] * d[i];
            dx[i] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * r;
        }
    }
}

/* dw, db += for columns [lo, hi), rows in ascending order */
static void ln_backward_cols(void *p, size_t lo, size_t hi) {
    const ln_arg *a = p;
    size_t C = (size_t)a->C;
    float *restrict dw = a->dw, *restrict db = a->db;
    for (size_t n = 0; n < a->N; n++) {
        const float *x = a->inp + n * C, *d = a->dout + n * C; /* (C) */
        float m = a->cmean[n], r = a->crstd[n];
        for (size_t i = lo; i < hi; i++) {
            float norm = (x[i] - m) * r;
            db[i] += d[i];
            dw[i] += norm * d[i];
        }
    }
}

/* dinp by rows, then dw/db by columns (each row added in ascending order); the two passes share nothing, so either
 * runs alone (dinp NULL, or dw and db NULL) with the bits it has beside the other. */
fsc_status cpu_layernorm_backward(void *ctx, float *dinp, float *dw, float *db, const float *dout,
                                  const float *inp, const float *w, const float *mean, const float *rstd,
                                  size_t N, int C) {
    CHECK_DIM(C > 0, "layernorm_backward: width %d must be positive", C);
    CHECK_DIM(!dw == !db, "layernorm_backward: dw and db are given together or both NULL");
    CHECK_DIM(dinp || dw, "layernorm_backward: dinp, dw and db are all NULL (nothing to compute)");
    ln_arg a = { .dinp = dinp, .dw = dw, .db = db, .inp = inp, .w = w, .dout = dout, .cmean = mean, .crstd = rstd,
                 .C = C, .N = N };
    if (dinp) cpu_parallel(ctx, N, 1, cpu_row_grain((size_t)C), ln_backward_rows, &a);
    if (dw) cpu_parallel(ctx, (size_t)C, CPU_STEP, cpu_row_grain(N), ln_backward_cols, &a);
    return FSC_OK;
}
