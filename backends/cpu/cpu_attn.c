/* CPU attention helpers and cross entropy: the (B,T,3C) <-> (B,NH,T,HS) layout shuffles, the causal
 * softmax over T x T score rows, and softmax cross entropy over the vocabulary.
 * Sums run in ascending index order in float (softmax) or double (cross entropy), one row at a time (rows
 * are split over the device's threads); the causal softmax
 * multiplies by 1/sum; exp is fsc_cpu_expf (cpu_math.h). Values above the diagonal are written as exact zeros. */
#include <math.h>
#include <string.h>
#include "cpu.h"
#include "cpu_math.h"

#define CHECK_DIM(cond, ...) \
    do { if (!(cond)) return fsc_error(FSC_ERR_INVALID, __VA_ARGS__); } while (0)
#define CHECK_HEADS(what) \
    CHECK_DIM(B >= 0 && T >= 0 && NH >= 0 && HS >= 0, what ": negative size (B=%d T=%d NH=%d HS=%d)", B, T, NH, HS)

/* direction 0: qkv -> q,k,v; 1: q,k,v -> qkv */
static void qkv_shuffle(float *qkv, float *q, float *k, float *v, int B, int T, int NH, int HS, int to_qkv) {
    size_t C = (size_t)NH * HS;
    float *dst3[3] = {q, k, v};
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            float *row = qkv + ((size_t)b * T + t) * 3 * C; /* (3C) */
            for (int s = 0; s < 3; s++)
                for (int h = 0; h < NH; h++) {
                    float *x = dst3[s] + (((size_t)b * NH + h) * T + t) * HS; /* (HS) */
                    float *r = row + s * C + (size_t)h * HS;
                    if (to_qkv) memcpy(r, x, (size_t)HS * sizeof(float));
                    else memcpy(x, r, (size_t)HS * sizeof(float));
                }
        }
}

fsc_status cpu_qkv_split(void *ctx, float *q, float *k, float *v, const float *qkv, int B, int T, int NH, int HS) {
    CHECK_HEADS("qkv_split");
    qkv_shuffle((float *)qkv, q, k, v, B, T, NH, HS, 0);
    return FSC_OK;
}

fsc_status cpu_qkv_merge(void *ctx, float *dqkv, const float *dq, const float *dk, const float *dv,
                         int B, int T, int NH, int HS) {
    CHECK_HEADS("qkv_merge");
    qkv_shuffle(dqkv, (float *)dq, (float *)dk, (float *)dv, B, T, NH, HS, 1);
    return FSC_OK;
}

static void heads_shuffle(float *btc, float *bhts, int B, int T, int NH, int HS, int to_btc) {
    size_t C = (size_t)NH * HS;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                float *y = bhts + (((size_t)b * NH + h) * T + t) * HS; /* (HS) */
                float *o = btc + ((size_t)b * T + t) * C + (size_t)h * HS;
                if (to_btc) memcpy(o, y, (size_t)HS * sizeof(float));
                else memcpy(y, o, (size_t)HS * sizeof(float));
            }
}

fsc_status cpu_heads_merge(void *ctx, float *out, const float *y, int B, int T, int NH, int HS) {
    CHECK_HEADS("heads_merge");
    heads_shuffle(out, (float *)y, B, T, NH, HS, 1);
    return FSC_OK;
}

fsc_status cpu_heads_split(void *ctx, float *dy, const float *dout, int B, int T, int NH, int HS) {
    CHECK_HEADS("heads_split");
    heads_shuffle((float *)dout, dy, B, T, NH, HS, 0);
    return FSC_OK;
}

/* The row kernels below split their rows over the device's threads (cpu_pool.c); a row is computed the
 * same way whichever thread takes it. */
typedef struct {
    float *out;
    const float *a, *b;
    int T;
    float scale;
} sm_arg;

static void softmax_forward_range(void *arg, size_t lo, size_t hi) {
    const sm_arg *sm = arg;
    const size_t T = (size_t)sm->T;
    const float scale = sm->scale;
    for (size_t r = lo; r < hi; r++) {
        size_t i = r % T;                       /* query position: columns 0..i are visible */
        const float *p = sm->a + r * T;         /* (T) */
        float *a = sm->out + r * T;
        float mx = -INFINITY;
        for (size_t j = 0; j <= i; j++) {
            float s = scale * p[j];
            mx = s > mx ? s : mx;
        }
        for (size_t j = 0; j <= i; j++) a[j] = fsc_cpu_expf(scale * p[j] - mx); /* vectorizes */
        float sum = 0.0f;
        for (size_t j = 0; j <= i; j++) sum += a[j];
        float inv = 1.0f / sum;
        for (size_t j = 0; j <= i; j++) a[j] *= inv;
        for (size_t j = i + 1; j < T; j++) a[j] = 0.0f;
    }
}

fsc_status cpu_softmax_causal_forward(void *ctx, float *att, const float *pre, int BH, int T, float scale) {
    CHECK_DIM(BH >= 0 && T >= 0, "softmax_causal_forward: negative size (BH=%d T=%d)", BH, T);
    sm_arg s = { att, pre, NULL, T, scale };
    cpu_parallel(ctx, (size_t)BH * T, 1, cpu_row_grain((size_t)T), softmax_forward_range, &s);
    return FSC_OK;
}

static void softmax_backward_range(void *arg, size_t lo, size_t hi) {
    const sm_arg *s = arg;
    const size_t T = (size_t)s->T;
    const float scale = s->scale;
    for (size_t r = lo; r < hi; r++) {
        size_t i = r % T;
        const float *a = s->b + r * T, *da = s->a + r * T; /* (T) */
        float *dp = s->out + r * T;
        float dot = 0.0f;
        for (size_t j = 0; j <= i; j++) dot += a[j] * da[j];
        for (size_t j = 0; j <= i; j++) dp[j] = scale * (a[j] * (da[j] - dot));
        for (size_t j = i + 1; j < T; j++) dp[j] = 0.0f;
    }
}

fsc_status cpu_softmax_causal_backward(void *ctx, float *dpre, const float *datt, const float *att,
                                       int BH, int T, float scale) {
    CHECK_DIM(BH >= 0 && T >= 0, "softmax_causal_backward: negative size (BH=%d T=%d)", BH, T);
    sm_arg s = { dpre, datt, att, T, scale };
    cpu_parallel(ctx, (size_t)BH * T, 1, cpu_row_grain((size_t)T), softmax_backward_range, &s);
    return FSC_OK;
}

/* max and log of sum exp(x - max) of one row; exps in chunks (vectorized), summed in double ascending */
static void row_logsumexp(const float *x, int V, float *mx_out, double *lse_out) {
    float mx = -INFINITY;
    for (int j = 0; j < V; j++) mx = x[j] > mx ? x[j] : mx;
    double s = 0.0;
    float e[256];
    for (int j0 = 0; j0 < V; j0 += 256) {
        int len = V - j0 < 256 ? V - j0 : 256;
        for (int j = 0; j < len; j++) e[j] = fsc_cpu_expf(x[j0 + j] - mx);
        for (int j = 0; j < len; j++) s += (double)e[j];
    }
    *mx_out = mx;
    *lse_out = log(s);
}

#define CHECK_XENT(what)                                                                                 \
    CHECK_DIM(V > 0 && ld >= V, what ": vocabulary %d and row stride %d (need 0 < V <= ld)", V, ld);      \
    for (size_t n = 0; n < N; n++)                                                                       \
        CHECK_DIM(targets[n] >= 0 && targets[n] < V, what ": target %d at row %zu is outside [0, %d)",   \
                  (int)targets[n], n, V)

typedef struct {
    float *out;
    const float *logits;
    const int32_t *targets;
    int V, ld;
    float scale;
} xent_arg;

static void xent_forward_range(void *arg, size_t lo, size_t hi) {
    const xent_arg *a = arg;
    for (size_t n = lo; n < hi; n++) {
        const float *x = a->logits + n * (size_t)a->ld; /* (V) */
        float mx;
        double lse;
        row_logsumexp(x, a->V, &mx, &lse);
        a->out[n] = (float)(lse - (double)(x[a->targets[n]] - mx));
    }
}

fsc_status cpu_xent_forward(void *ctx, float *losses, const float *logits, const int32_t *targets,
                            size_t N, int V, int ld) {
    CHECK_XENT("xent_forward");
    xent_arg a = { losses, logits, targets, V, ld, 0.0f };
    cpu_parallel(ctx, N, 1, cpu_row_grain((size_t)V), xent_forward_range, &a);
    return FSC_OK;
}

static void xent_backward_range(void *arg, size_t lo, size_t hi) {
    const xent_arg *a = arg;
    const int V = a->V;
    const float scale = a->scale;
    for (size_t n = lo; n < hi; n++) {
        const float *x = a->logits + n * (size_t)a->ld; /* (V) */
        float *d = a->out + n * (size_t)a->ld;
        float mx;
        double lse;
        row_logsumexp(x, V, &mx, &lse);
        float l = (float)lse;
        for (int j = 0; j < V; j++) d[j] = scale * fsc_cpu_expf(x[j] - mx - l);
        d[a->targets[n]] -= scale;
    }
}

/* Columns [V, ld) of dlogits are left untouched. */
fsc_status cpu_xent_backward(void *ctx, float *dlogits, const float *logits, const int32_t *targets,
                             size_t N, int V, int ld, float scale) {
    CHECK_XENT("xent_backward");
    xent_arg a = { dlogits, logits, targets, V, ld, scale };
    cpu_parallel(ctx, N, 1, cpu_row_grain((size_t)V), xent_backward_range, &a);
    return FSC_OK;
}
