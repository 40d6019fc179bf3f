/* CPU kernels of today's language models beyond GPT-2, and of simple regressors: RMS norm, rotary position
 * embeddings, SiLU and SwiGLU, the elementwise product and the squared error (contracts in plugin/device_ops.h).
 * As in cpu_kernels.c, every sum runs in a fixed order, so the bits never depend on the thread count:
 * elementwise work is split anywhere, per-row work by rows, sums over rows (RMS norm's dw) by columns.
 * Rotary angles are computed in double from the position and theta^(-2i/D), once per call into a table of
 * T x D/2 cosines and sines rounded to float. exp is fsc_cpu_expf (cpu_math.h).
 * Not here: layer norm, GELU, attention (cpu_kernels.c, cpu_attn.c). */
#include <math.h>
#include <stdlib.h>
#include "cpu.h"
#include "cpu_math.h"

#define CHECK_DIM(cond, ...) \
    do { if (!(cond)) return fsc_error(FSC_ERR_INVALID, __VA_ARGS__); } while (0)

/* ---- RMS norm ---- */

#define LANES 8
typedef struct {
    float *out, *rstd, *dinp, *dw;
    const float *inp, *w, *dout, *crstd;
    size_t N;
    int C;
    float eps;
} rms_arg;

/* sum of x^2 of a row in 8 lanes (lane l takes l, l+8, ...), lanes combined pairwise */
static inline float row_sumsq8(const float *x, int C) {
    float acc[LANES] = {0};
    int i = 0;
    for (; i + LANES <= C; i += LANES)
        for (int l = 0; l < LANES; l++) acc[l] += x[i + l] * x[i + l];
    for (int l = 0; i < C; i++, l++) acc[l] += x[i] * x[i];
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

static void rmsnorm_forward_range(void *p, size_t lo, size_t hi) {
    const rms_arg *a = p;
    int C = a->C;
    const float *w = a->w;
    for (size_t n = lo; n < hi; n++) {
        const float *x = a->inp + n * (size_t)C; /* (C) */
        float *o = a->out + n * (size_t)C;
        float r = 1.0f / sqrtf(row_sumsq8(x, C) / (float)C + a->eps);
        for (int i = 0; i < C; i++) o[i] = (x[i] * r) * w[i];
        a->rstd[n] = r;
    }
}

fsc_status cpu_rmsnorm_forward(void *ctx, float *out, float *rstd, const float *inp, const float *w, size_t N, int C,
                               float eps) {
    CHECK_DIM(C > 0, "rmsnorm_forward: width %d must be positive", C);
    CHECK_DIM(eps >= 0.0f, "rmsnorm_forward: eps %g must not be negative", (double)eps);
    rms_arg a = { .out = out, .rstd = rstd, .inp = inp, .w = w, .N = N, .C = C, .eps = eps };
    cpu_parallel(ctx, N, 1, cpu_row_grain((size_t)C), rmsnorm_forward_range, &a);
    return FSC_OK;
}

/* dinp += r (dnorm - norm * mean(dnorm * norm)) with norm = x r, dnorm = w dout, for rows [lo, hi) */
static void rms_backward_rows(void *p, size_t lo, size_t hi) {
    const rms_arg *a = p;
    int C = a->C;
    const float *w = a->w;
    for (size_t n = lo; n < hi; n++) {
        const float *x = a->inp + n * (size_t)C, *d = a->dout + n * (size_t)C; /* (C) */
        float *restrict dx = a->dinp + n * (size_t)C;
        float r = a->crstd[n];
        float acc[LANES] = {0};
        int i = 0;
        for (; i + LANES <= C; i += LANES)
            for (int l = 0; l < LANES; l++) acc[l] += (w[i + l] * d[i + l]) * (x[i + l] * r);
        for (int l = 0; i < C; i++, l++) acc[l] += (w[i] * d[i]) * (x[i] * r);
        float m = (((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))) / (float)C;
        for (i = 0; i < C; i++) dx[i] += (w[i] * d[i] - (x[i] * r) * m) * r;
    }
}

/* dw += for columns [lo, hi), rows in ascending order */
static void rms_backward_cols(void *p, size_t lo, size_t hi) {
    const rms_arg *a = p;
    size_t C = (size_t)a->C;
    float *restrict dw = a->dw;
    for (size_t n = 0; n < a->N; n++) {
        const float *x = a->inp + n * C, *d = a->dout + n * C; /* (C) */
        float r = a->crstd[n];
        for (size_t i = lo; i < hi; i++) dw[i] += (x[i] * r) * d[i];
    }
}

fsc_status cpu_rmsnorm_backward(void *ctx, float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                                const float *rstd, size_t N, int C) {
    CHECK_DIM(C > 0, "rmsnorm_backward: width %d must be positive", C);
    CHECK_DIM(dinp || dw, "rmsnorm_backward: dinp and dw are both NULL (nothing to compute)");
    rms_arg a = { .dinp = dinp, .dw = dw, .inp = inp, .w = w, .dout = dout, .crstd = rstd, .N = N, .C = C };
    if (dinp) cpu_parallel(ctx, N, 1, cpu_row_grain((size_t)C), rms_backward_rows, &a); /* either pass alone: */
    if (dw) cpu_parallel(ctx, (size_t)C, CPU_STEP, cpu_row_grain(N), rms_backward_cols, &a); /* the same bits */
    return FSC_OK;
}

/* ---- rotary position embedding ---- */

typedef struct {
    float *out;
    const float *inp;
    float *cs;       /* (T, D/2) cosines then (T, D/2) sines */
    double *inv;     /* (D/2) theta^(-2i/D) */
    int T, H, D, ld, dir; /* dir +1: rotate by +a (forward), -1: by -a (backward) */
} rope_arg;

/* rows t in [lo, hi) of the cos/sin table */
static void rope_table_range(void *p, size_t lo, size_t hi) {
    const rope_arg *a = p;
    int h2 = a->D / 2;
    float *c = a->cs, *s = a->cs + (size_t)a->T * h2;
    double *inv = a->inv;
    for (size_t t = lo; t < hi; t++)
        for (int i = 0; i < h2; i++) {
            double ang = (double)t * inv[i];
            c[t * h2 + i] = (float)cos(ang);
            s[t * h2 + i] = (float)sin(ang);
        }
}

/* rows (b, t) in [lo, hi) */
static void rope_apply_range(void *p, size_t lo, size_t hi) {
    const rope_arg *a = p;
    int h2 = a->D / 2;
    const float *ct = a->cs, *st = a->cs + (size_t)a->T * h2;
    for (size_t r = lo; r < hi; r++) {
        size_t t = r % (size_t)a->T;
        const float *c = ct + t * h2, *s = st + t * h2; /* (D/2) */
        for (int h = 0; h < a->H; h++) {
            const float *x = a->inp + r * (size_t)a->ld + (size_t)h * a->D; /* (D) */
            float *o = a->out + r * (size_t)a->ld + (size_t)h * a->D;
            for (int i = 0; i < h2; i++) {
                float x1 = x[i], x2 = x[i + h2];
                float sn = a->dir > 0 ? s[i] : -s[i];
                o[i] = x1 * c[i] - x2 * sn;
                o[i + h2] = x2 * c[i] + x1 * sn;
            }
        }
    }
}

static fsc_status rope(void *ctx, float *out, const float *inp, int B, int T, int H, int D, int ld, float theta,
                       int dir, const char *what) {
    CHECK_DIM(B >= 0 && T >= 0 && H >= 0 && D >= 0, "%s: negative size (B=%d T=%d H=%d D=%d)", what, B, T, H, D);
    CHECK_DIM(D % 2 == 0, "%s: head size %d must be even", what, D);
    CHECK_DIM((int64_t)H * D <= ld, "%s: %d heads of %d columns do not fit a row of %d", what, H, D, ld);
    CHECK_DIM(theta > 0.0f, "%s: theta %g must be positive", what, (double)theta);
    if (B == 0 || T == 0 || H == 0 || D == 0) return FSC_OK;
    float *cs = malloc((size_t)T * (size_t)D * sizeof *cs);
    double *inv = malloc((size_t)D / 2 * sizeof *inv);
    if (!cs || !inv) {
        free(cs), free(inv);
        return fsc_error(FSC_ERR_NOMEM, "%s: out of memory for a %d x %d table", what, T, D);
    }
    for (int i = 0; i < D / 2; i++) inv[i] = 1.0 / pow((double)theta, (double)(2 * i) / (double)D);
    rope_arg a = { out, inp, cs, inv, T, H, D, ld, dir };
    cpu_parallel(ctx, (size_t)T, 1, cpu_row_grain((size_t)D * 8), rope_table_range, &a);
    cpu_parallel(ctx, (size_t)B * T, 1, cpu_row_grain((size_t)H * D), rope_apply_range, &a);
    free(cs), free(inv);
    return FSC_OK;
}

fsc_status cpu_rope_forward(void *ctx, float *out, const float *inp, int B, int T, int H, int D, int ld, float theta) {
    return rope(ctx, out, inp, B, T, H, D, ld, theta, 1, "rope_forward");
}

fsc_status cpu_rope_backward(void *ctx, float *dinp, const float *dout, int B, int T, int H, int D, int ld,
                             float theta) {
    return rope(ctx, dinp, dout, B, T, H, D, ld, theta, -1, "rope_backward");
}

/* ---- SiLU, SwiGLU, product ---- */

typedef struct {
    float *o1, *o2;
    const float *a, *b, *c;
} ew3_arg;

static inline float sigmoid_f(float x) { return 1.0f / (1.0f + fsc_cpu_expf(-x)); }

static void silu_forward_range(void *p, size_t lo, size_t hi) {
    const ew3_arg *e = p;
    for (size_t i = lo; i < hi; i++) e->o1[i] = e->a[i] * sigmoid_f(e->a[i]);
}

/* silu'(x) = s (1 + x (1 - s)), s = sigmoid(x) */
static void silu_backward_range(void *p, size_t lo, size_t hi) {
    const ew3_arg *e = p;
    for (size_t i = lo; i < hi; i++) {
        float x = e->a[i], s = sigmoid_f(x);
        e->o1[i] = (s * (1.0f + x * (1.0f - s))) * e->b[i];
    }
}

fsc_status cpu_silu_forward(void *ctx, float *out, const float *inp, size_t n) {
    ew3_arg e = { out, NULL, inp, NULL, NULL };
    cpu_parallel(ctx, n, CPU_STEP, CPU_GRAIN, silu_forward_range, &e);
    return FSC_OK;
}

fsc_status cpu_silu_backward(void *ctx, float *dinp, const float *inp, const float *dout, size_t n) {
    ew3_arg e = { dinp, NULL, inp, dout, NULL };
    cpu_parallel(ctx, n, CPU_STEP, CPU_GRAIN, silu_backward_range, &e);
    return FSC_OK;
}

static void swiglu_forward_range(void *p, size_t lo, size_t hi) {
    const ew3_arg *e = p;
    for (size_t i = lo; i < hi; i++) {
        float g = e->a[i];
        e->o1[i] = (g * sigmoid_f(g)) * e->b[i];
    }
}

/* a gate, b up, c dout; o1 (dgate) may be c: each element is read before it is written */
static void swiglu_backward_range(void *p, size_t lo, size_t hi) {
    const ew3_arg *e = p;
    for (size_t i = lo; i < hi; i++) {
        float g = e->a[i], u = e->b[i], d = e->c[i], s = sigmoid_f(g);
        float dg = (d * u) * (s * (1.0f + g * (1.0f - s)));
        float du = d * (g * s);
        e->o1[i] = dg;
        e->o2[i] = du;
    }
}

fsc_status cpu_swiglu_forward(void *ctx, float *out, const float *gate, const float *up, size_t n) {
    ew3_arg e = { out, NULL, gate, up, NULL };
    cpu_parallel(ctx, n, CPU_STEP, CPU_GRAIN, swiglu_forward_range, &e);
    return FSC_OK;
}

fsc_status cpu_swiglu_backward(void *ctx, float *dgate, float *dup, const float *gate, const float *up,
                               const float *dout, size_t n) {
    ew3_arg e = { dgate, dup, gate, up, dout };
    cpu_parallel(ctx, n, CPU_STEP, CPU_GRAIN, swiglu_backward_range, &e);
    return FSC_OK;
}

static void mul_forward_range(void *p, size_t lo, size_t hi) {
    const ew3_arg *e = p;
    for (size_t i = lo; i < hi; i++) e->o1[i] = e->a[i] * e->b[i];
}

static void mul_backward_range(void *p, size_t lo, size_t hi) {
    const ew3_arg *e = p;
    if (e->o1)
        for (size_t i = lo; i < hi; i++) e->o1[i] += e->c[i] * e->b[i];
    if (e->o2)
        for (size_t i = lo; i < hi; i++) e->o2[i] += e->c[i] * e->a[i];
}

fsc_status cpu_mul_forward(void *ctx, float *out, const float *a, const float *b, size_t n) {
    ew3_arg e = { out, NULL, a, b, NULL };
    cpu_parallel(ctx, n, CPU_STEP, CPU_GRAIN, mul_forward_range, &e);
    return FSC_OK;
}

fsc_status cpu_mul_backward(void *ctx, float *da, float *db, const float *a, const float *b, const float *dout,
                            size_t n) {
    ew3_arg e = { da, db, a, b, dout };
    cpu_parallel(ctx, n, CPU_STEP, CPU_GRAIN, mul_backward_range, &e);
    return FSC_OK;
}

/* ---- squared error ---- */

typedef struct {
    float *out;
    const float *pred, *target;
    int C;
    float scale;
} mse_arg;

/* rows [lo, hi): (p - t) in float, its square exact in double, summed in double ascending */
static void mse_forward_range(void *p, size_t lo, size_t hi) {
    const mse_arg *a = p;
    for (size_t n = lo; n < hi; n++) {
        const float *x = a->pred + n * (size_t)a->C, *y = a->target + n * (size_t)a->C; /* (C) */
        double s = 0.0;
        for (int i = 0; i < a->C; i++) {
            double d = (double)(x[i] - y[i]);
            s += d * d;
        }
        a->out[n] = (float)s;
    }
}

static void mse_backward_range(void *p, size_t lo, size_t hi) {
    const mse_arg *a = p;
    float s2 = 2.0f * a->scale;
    for (size_t i = lo; i < hi; i++) a->out[i] = s2 * (a->pred[i] - a->target[i]);
}

fsc_status cpu_mse_forward(void *ctx, float *losses, const float *pred, const float *target, size_t N, int C) {
    CHECK_DIM(C >= 0, "mse_forward: negative width %d", C);
    mse_arg a = { losses, pred, target, C, 0.0f };
    cpu_parallel(ctx, N, 1, cpu_row_grain((size_t)C), mse_forward_range, &a);
    return FSC_OK;
}

fsc_status cpu_mse_backward(void *ctx, float *dpred, const float *pred, const float *target, size_t N, int C,
                            float scale) {
    CHECK_DIM(C >= 0, "mse_backward: negative width %d", C);
    mse_arg a = { dpred, pred, target, C, scale };
    cpu_parallel(ctx, N * (size_t)C, CPU_STEP, CPU_GRAIN, mse_backward_range, &a);
    return FSC_OK;
}
