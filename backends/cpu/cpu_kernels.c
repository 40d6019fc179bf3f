/* CPU kernels: gemm on OpenBLAS, elementwise ops, bias, embedding and layer norm.
 * Every sum here runs in a fixed order (these loops are single-threaded), so the bits never depend on
 * the thread count. sgemm is OpenBLAS's: the same call gives the same bits every time, also when many
 * ranks call it at once, but the partition of C among OpenBLAS threads changes which micro-kernel tile
 * an element falls in, so results differ between OpenBLAS thread counts (process-global; see
 * cpu_device.c). Runs compared bit for bit must use the same count, as ranks of one process always do.
 * Plain loops the compiler can vectorize; no function pointers per element. */
#include <math.h>
#include <string.h>
#include <cblas.h>
#include "cpu.h"
#include "cpu_math.h"

#define CHECK_DIM(cond, ...) \
    do { if (!(cond)) return fsc_error(FSC_ERR_INVALID, __VA_ARGS__); } while (0)

fsc_status cpu_gemm(void *ctx, int transa, int transb, int M, int N, int K, float alpha, const float *A, int lda,
                    int64_t sa, const float *B, int ldb, int64_t sb, float beta, float *C, int ldc, int64_t sc,
                    int batch) {
    CHECK_DIM(M >= 0 && N >= 0 && K >= 0 && batch >= 0, "gemm: negative size (M=%d N=%d K=%d batch=%d)", M, N, K, batch);
    int acols = transa ? M : K, bcols = transb ? K : N;
    CHECK_DIM(lda >= (acols > 1 ? acols : 1), "gemm: lda %d < %d columns of A%s", lda, acols, transa ? "^T" : "");
    CHECK_DIM(ldb >= (bcols > 1 ? bcols : 1), "gemm: ldb %d < %d columns of B%s", ldb, bcols, transb ? "^T" : "");
    CHECK_DIM(ldc >= (N > 1 ? N : 1), "gemm: ldc %d < N = %d", ldc, N);
    if (M == 0 || N == 0 || batch == 0) return FSC_OK;
    for (int b = 0; b < batch; b++) {
        float *Cb = C + (int64_t)b * sc;
        if (K == 0) { /* C = beta * C; beta 0 overwrites (NaN in C does not survive) */
            for (int i = 0; i < M; i++) {
                float *row = Cb + (size_t)i * (size_t)ldc;
                for (int j = 0; j < N; j++) row[j] = (beta == 0.0f) ? 0.0f : beta * row[j];
            }
            continue;
        }
        cblas_sgemm(CblasRowMajor, transa ? CblasTrans : CblasNoTrans, transb ? CblasTrans : CblasNoTrans, M, N,
                    K, alpha, A + (int64_t)b * sa, lda, B + (int64_t)b * sb, ldb, beta, Cb, ldc);
    }
    return FSC_OK;
}

static int is_float_type(fsc_dtype t) { return t == FSC_F32 || t == FSC_BF16 || t == FSC_F16; }

fsc_status cpu_convert(void *ctx, void *dst, fsc_dtype dt, const void *src, fsc_dtype st, size_t n) {
    if (!is_float_type(dt) || !is_float_type(st))
        return fsc_error(FSC_ERR_INVALID, "convert: %s to %s (only f32, bf16 and f16 convert)", fsc_dtype_name(st),
                         fsc_dtype_name(dt));
    if (dt == st) {
        if (dst != src) memmove(dst, src, n * fsc_dtype_size(dt));
    } else if (st == FSC_F32 && dt == FSC_BF16) {
        const float *s = src;
        uint16_t *d = dst;
        for (size_t i = 0; i < n; i++) d[i] = fsc_cpu_f32_to_bf16(s[i]);
    } else if (st == FSC_BF16 && dt == FSC_F32) {
        const uint16_t *s = src;
        float *d = dst;
        for (size_t i = 0; i < n; i++) d[i] = fsc_cpu_bf16_to_f32(s[i]);
    } else {
        fsc_convert_host(dst, dt, src, st, n);
    }
    return FSC_OK;
}

fsc_status cpu_scale(void *ctx, float *x, float a, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = a * x[i];
    return FSC_OK;
}

fsc_status cpu_axpy(void *ctx, float *y, float a, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = y[i] + a * x[i];
    return FSC_OK;
}

fsc_status cpu_add(void *ctx, float *out, const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
    return FSC_OK;
}

#define GELU_S 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_C 0.044715f

/* 0.5 x (1 + tanh u) = x sigmoid(2u) = x / (1 + exp(-2u)), u = S (x + c x^3): one vectorizable exp. */
fsc_status cpu_gelu_forward(void *ctx, float *out, const float *inp, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_S * (x + GELU_C * x * x * x);
        out[i] = x / (1.0f + fsc_cpu_expf(-2.0f * u));
    }
    return FSC_OK;
}

/* d/dx [0.5 x (1 + tanh u)] = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) S (1 + 3 c x^2); with s = sigmoid(2u):
 * 0.5 (1 + tanh u) = s and 1 - tanh^2 u = 4 s (1 - s), so the derivative is s + 2 x s (1 - s) S (1 + 3 c x^2). */
fsc_status cpu_gelu_backward(void *ctx, float *dinp, const float *inp, const float *dout, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_S * (x + GELU_C * x * x * x);
        float s = 1.0f / (1.0f + fsc_cpu_expf(-2.0f * u));
        float g = s + 2.0f * x * s * (1.0f - s) * GELU_S * (1.0f + 3.0f * GELU_C * x * x);
        dinp[i] = g * dout[i];
    }
    return FSC_OK;
}

fsc_status cpu_bias_add(void *ctx, float *out, const float *bias, size_t N, int OC) {
    CHECK_DIM(OC >= 0, "bias_add: negative width %d", OC);
    for (size_t n = 0; n < N; n++) {
        float *o = out + n * (size_t)OC;
        for (int j = 0; j < OC; j++) o[j] += bias[j];
    }
    return FSC_OK;
}

fsc_status cpu_bias_grad(void *ctx, float *dbias, const float *dout, size_t N, int OC) {
    CHECK_DIM(OC >= 0, "bias_grad: negative width %d", OC);
    for (size_t n = 0; n < N; n++) { /* rows in ascending order, each added into dbias */
        const float *d = dout + n * (size_t)OC;
        for (int j = 0; j < OC; j++) dbias[j] += d[j];
    }
    return FSC_OK;
}

fsc_status cpu_encoder_forward(void *ctx, float *out, const int32_t *tok, const float *wte, const float *wpe,
                               int B, int T, int C) {
    CHECK_DIM(B >= 0 && T >= 0 && C >= 0, "encoder_forward: negative size (B=%d T=%d C=%d)", B, T, C);
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            int32_t ix = tok[b * T + t];
            CHECK_DIM(ix >= 0, "encoder_forward: token %d at (b=%d, t=%d) is negative", (int)ix, b, t);
            float *o = out + ((size_t)b * T + t) * C;         /* (C) */
            const float *we = wte + (size_t)ix * C, *wp = wpe + (size_t)t * C;
            for (int i = 0; i < C; i++) o[i] = we[i] + wp[i];
        }
    }
    return FSC_OK;
}

fsc_status cpu_encoder_backward(void *ctx, float *dwte, float *dwpe, const float *dout, const int32_t *tok,
                                int B, int T, int C) {
    CHECK_DIM(B >= 0 && T >= 0 && C >= 0, "encoder_backward: negative size (B=%d T=%d C=%d)", B, T, C);
    for (int i = 0; i < B * T; i++)
        CHECK_DIM(tok[i] >= 0, "encoder_backward: token %d at position %d is negative", (int)tok[i], i);
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            const float *d = dout + ((size_t)b * T + t) * C; /* (C) */
            float *dte = dwte + (size_t)tok[b * T + t] * C, *dpe = dwpe + (size_t)t * C;
            for (int i = 0; i < C; i++) {
                dte[i] += d[i];
                dpe[i] += d[i];
            }
        }
    }
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

fsc_status cpu_layernorm_forward(void *ctx, float *out, float *mean, float *rstd, const float *inp,
                                 const float *w, const float *b, size_t N, int C) {
    CHECK_DIM(C > 0, "layernorm_forward: width %d must be positive", C);
    for (size_t n = 0; n < N; n++) {
        const float *x = inp + n * (size_t)C; /* (C) */
        float *o = out + n * (size_t)C;
        float m = row_sum8(x, C) / (float)C;
        float r = 1.0f / sqrtf(row_sqdev8(x, m, C) / (float)C + 1e-5f);
        for (int i = 0; i < C; i++) o[i] = (r * (x[i] - m)) * w[i] + b[i];
        mean[n] = m;
        rstd[n] = r;
    }
    return FSC_OK;
}

/* dinp, dw, db += for one row; restrict (the buffers are distinct) lets the loop vectorize */
static void ln_backward_row(float *restrict dx, float *restrict dw, float *restrict db, const float *x,
                            const float *d, const float *w, float m, float r, float dnorm_mean,
                            float dnorm_norm_mean, int C) {
    for (int i = 0; i < C; i++) {
        float norm = (x[i] - m) * r;
        float dnorm = w[i] * d[i];
        db[i] += d[i];
        dw[i] += norm * d[i];
        dx[i] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * r;
    }
}

/* Per row: the two means of the standard layer norm backward (lane sums as above), then dinp, and dw/db
 * accumulated row after row in ascending order. */
fsc_status cpu_layernorm_backward(void *ctx, float *dinp, float *dw, float *db, const float *dout,
                                  const float *inp, const float *w, const float *mean, const float *rstd,
                                  size_t N, int C) {
    CHECK_DIM(C > 0, "layernorm_backward: width %d must be positive", C);
    for (size_t n = 0; n < N; n++) {
        const float *x = inp + n * (size_t)C, *d = dout + n * (size_t)C; /* (C) */
        float *dx = dinp + n * (size_t)C;
        float m = mean[n], r = rstd[n];
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
        ln_backward_row(dx, dw, db, x, d, w, m, r, dnorm_mean, dnorm_norm_mean, C);
    }
    return FSC_OK;
}
