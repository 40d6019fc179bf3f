/* Attention helpers and cross entropy of the cuda device: the (B,T,3C) <-> (B,NH,T,HS) layout shuffles,
 * the causal softmax over T x T score rows (a warp per row) and softmax cross entropy over the vocabulary
 * (a block per row). Reductions are fixed trees (xor-shuffle butterflies, then a fixed tree over the
 * block's warps), so the result does not depend on timing; sums of exponentials in cross entropy are in
 * double as in the CPU backend. Values above the causal diagonal are written as exact zeros. A target
 * outside [0, V) makes that row NaN and is reported at the next synchronization (cu_deferred_check). */
#include <math.h>
#include "cuda_internal.h"

#define CHECK_HEADS(what)                                                                                     \
    if (B < 0 || T < 0 || NH < 0 || HS < 0)                                                                   \
        return cu_err(FSC_ERR_INVALID, what ": negative size (B=%d T=%d NH=%d HS=%d)", B, T, NH, HS);        \
    if ((size_t)B * T * NH * HS == 0) return FSC_OK;

static unsigned row_grid(size_t rows) { return rows < 65535u * 8u ? (unsigned)(rows ? rows : 1) : 65535u * 8u; }

/* ---- layout shuffles: a block per (b, t) row of the (B, T, ...) side ---- */

/* dir 0: qkv -> q, k, v; dir 1: q, k, v -> qkv */
__global__ void qkv_kernel(float *qkv, float *q, float *k, float *v, int B, int T, int NH, int HS, int to_qkv) {
    int C = NH * HS;
    size_t BT = (size_t)B * T;
    for (size_t bt = blockIdx.x; bt < BT; bt += gridDim.x) {
        size_t b = bt / T, t = bt % T;
        float *row = qkv + bt * 3 * C; /* (3C) */
        for (int j = threadIdx.x; j < 3 * C; j += blockDim.x) {
            int s = j / C, h = (j % C) / HS, d = j % HS;
            float *x = (s == 0 ? q : s == 1 ? k : v) + ((b * NH + h) * T + t) * HS + d;
            if (to_qkv) row[j] = *x;
            else *x = row[j];
        }
    }
}

/* dir 0: btc -> bhts (heads_split); dir 1: bhts -> btc (heads_merge) */
__global__ void heads_kernel(float *btc, float *bhts, int B, int T, int NH, int HS, int to_btc) {
    int C = NH * HS;
    size_t BT = (size_t)B * T;
    for (size_t bt = blockIdx.x; bt < BT; bt += gridDim.x) {
        size_t b = bt / T, t = bt % T;
        for (int j = threadIdx.x; j < C; j += blockDim.x) {
            int h = j / HS, d = j % HS;
            float *y = bhts + ((b * NH + h) * T + t) * HS + d;
            if (to_btc) btc[bt * C + j] = *y;
            else *y = btc[bt * C + j];
        }
    }
}

fsc_status cu_qkv_split(void *ctx, float *q, float *k, float *v, const float *qkv, int B, int T, int NH, int HS) {
    cu_ctx *c = cu_of(ctx);
    CHECK_HEADS("qkv_split");
    FSC_TRY(cu_enter(c));
    qkv_kernel<<<row_grid((size_t)B * T), CU_THREADS, 0, cu_stream_of(c)>>>((float *)qkv, q, k, v, B, T, NH, HS, 0);
    return cu_launched("qkv_split");
}

fsc_status cu_qkv_merge(void *ctx, float *dqkv, const float *dq, const float *dk, const float *dv, int B, int T,
                        int NH, int HS) {
    cu_ctx *c = cu_of(ctx);
    CHECK_HEADS("qkv_merge");
    FSC_TRY(cu_enter(c));
    qkv_kernel<<<row_grid((size_t)B * T), CU_THREADS, 0, cu_stream_of(c)>>>(dqkv, (float *)dq, (float *)dk,
                                                                            (float *)dv, B, T, NH, HS, 1);
    return cu_launched("qkv_merge");
}

fsc_status cu_heads_merge(void *ctx, float *out, const float *y, int B, int T, int NH, int HS) {
    cu_ctx *c = cu_of(ctx);
    CHECK_HEADS("heads_merge");
    FSC_TRY(cu_enter(c));
    heads_kernel<<<row_grid((size_t)B * T), CU_THREADS, 0, cu_stream_of(c)>>>(out, (float *)y, B, T, NH, HS, 1);
    return cu_launched("heads_merge");
}

fsc_status cu_heads_split(void *ctx, float *dy, const float *dout, int B, int T, int NH, int HS) {
    cu_ctx *c = cu_of(ctx);
    CHECK_HEADS("heads_split");
    FSC_TRY(cu_enter(c));
    heads_kernel<<<row_grid((size_t)B * T), CU_THREADS, 0, cu_stream_of(c)>>>((float *)dout, dy, B, T, NH, HS, 0);
    return cu_launched("heads_split");
}

/* ---- fixed-order reductions ---- */

__device__ __forceinline__ float warp_max_f(float v) {
    for (int o = 16; o > 0; o >>= 1) {
        float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = w > v ? w : v;
    }
    return v;
}
__device__ __forceinline__ float warp_sum_f(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ double warp_sum_d(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Over a block of XENT_THREADS: every thread gets the result. sh needs 32 entries. */
#define XENT_THREADS 512
__device__ float block_max_f(float v, float *sh) {
    int lane = threadIdx.x % 32, w = threadIdx.x / 32, nw = blockDim.x / 32;
    v = warp_max_f(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : -INFINITY;
    return warp_max_f(v);
}
__device__ double block_sum_d(double v, double *sh) {
    int lane = threadIdx.x % 32, w = threadIdx.x / 32, nw = blockDim.x / 32;
    v = warp_sum_d(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0;
    return warp_sum_d(v);
}

/* ---- causal softmax: a warp per row r of the BH*T rows; row i sees columns 0..i ---- */

__global__ void softmax_fwd_kernel(float *att, const float *pre, int BH, int T, float scale) {
    int lane = threadIdx.x % 32, wpb = blockDim.x / 32;
    size_t rows = (size_t)BH * T;
    for (size_t r = (size_t)blockIdx.x * wpb + threadIdx.x / 32; r < rows; r += (size_t)gridDim.x * wpb) {
        int i = (int)(r % (size_t)T);
        const float *p = pre + r * T; /* (T) */
        float *a = att + r * T;
        float mx = -INFINITY;
        for (int j = lane; j <= i; j += 32) {
            float s = scale * p[j];
            mx = s > mx ? s : mx;
        }
        mx = warp_max_f(mx);
        float sum = 0.0f;
        for (int j = lane; j <= i; j += 32) {
            float e = expf(scale * p[j] - mx);
            a[j] = e;
            sum += e;
        }
        float inv = 1.0f / warp_sum_f(sum);
        for (int j = lane; j <= i; j += 32) a[j] *= inv;
        for (int j = i + 1 + lane; j < T; j += 32) a[j] = 0.0f;
    }
}

__global__ void softmax_bwd_kernel(float *dpre, const float *datt, const float *att, int BH, int T, float scale) {
    int lane = threadIdx.x % 32, wpb = blockDim.x / 32;
    size_t rows = (size_t)BH * T;
    for (size_t r = (size_t)blockIdx.x * wpb + threadIdx.x / 32; r < rows; r += (size_t)gridDim.x * wpb) {
        int i = (int)(r % (size_t)T);
        const float *a = att + r * T, *da = datt + r * T; /* (T) */
        float *dp = dpre + r * T;
        float dot = 0.0f;
        for (int j = lane; j <= i; j += 32) dot += a[j] * da[j];
        dot = warp_sum_f(dot);
        for (int j = lane; j <= i; j += 32) dp[j] = scale * (a[j] * (da[j] - dot));
        for (int j = i + 1 + lane; j < T; j += 32) dp[j] = 0.0f;
    }
}

static unsigned warp_rows_grid(size_t rows) {
    size_t b = (rows + 7) / 8;
    return b > 65535u * 8u ? 65535u * 8u : (unsigned)(b ? b : 1);
}

fsc_status cu_softmax_causal_forward(void *ctx, float *att, const float *pre, int BH, int T, float scale) {
    cu_ctx *c = cu_of(ctx);
    if (BH < 0 || T < 0) return cu_err(FSC_ERR_INVALID, "softmax_causal_forward: negative size (BH=%d T=%d)", BH, T);
    if ((size_t)BH * T == 0) return FSC_OK;
    FSC_TRY(cu_enter(c));
    softmax_fwd_kernel<<<warp_rows_grid((size_t)BH * T), 256, 0, cu_stream_of(c)>>>(att, pre, BH, T, scale);
    return cu_launched("softmax_causal_forward");
}

fsc_status cu_softmax_causal_backward(void *ctx, float *dpre, const float *datt, const float *att, int BH, int T,
                                      float scale) {
    cu_ctx *c = cu_of(ctx);
    if (BH < 0 || T < 0) return cu_err(FSC_ERR_INVALID, "softmax_causal_backward: negative size (BH=%d T=%d)", BH, T);
    if ((size_t)BH * T == 0) return FSC_OK;
    FSC_TRY(cu_enter(c));
    softmax_bwd_kernel<<<warp_rows_grid((size_t)BH * T), 256, 0, cu_stream_of(c)>>>(dpre, datt, att, BH, T, scale);
    return cu_launched("softmax_causal_backward");
}

/* ---- cross entropy: a block per row ---- */

/* max and log(sum exp(x - max)) of one row, every thread gets both */
__device__ void row_logsumexp(const float *x, int V, float *mx_out, double *lse_out) {
    __shared__ float shf[32];
    __shared__ double shd[32];
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < V; j += blockDim.x) mx = x[j] > mx ? x[j] : mx;
    mx = block_max_f(mx, shf);
    double s = 0.0;
    for (int j = threadIdx.x; j < V; j += blockDim.x) s += (double)expf(x[j] - mx);
    s = block_sum_d(s, shd);
    *mx_out = mx;
    *lse_out = log(s);
}

__global__ void xent_fwd_kernel(float *losses, const float *logits, const int32_t *targets, size_t N, int V, int ld,
                                unsigned long long *derr) {
    for (size_t n = blockIdx.x; n < N; n += gridDim.x) {
        const float *x = logits + n * (size_t)ld; /* (V) */
        float mx;
        double lse;
        row_logsumexp(x, V, &mx, &lse);
        if (threadIdx.x == 0) {
            int32_t t = targets[n];
            if (t < 0 || t >= V) {
                losses[n] = __int_as_float(0x7fc00000);
                atomicCAS(derr, 0ull, ((unsigned long long)CU_DERR_TARGET << 56) | n);
            } else {
                losses[n] = (float)(lse - (double)(x[t] - mx));
            }
        }
    }
}

__global__ void xent_bwd_kernel(float *dlogits, const float *logits, const int32_t *targets, size_t N, int V, int ld,
                                float scale, unsigned long long *derr) {
    for (size_t n = blockIdx.x; n < N; n += gridDim.x) {
        const float *x = logits + n * (size_t)ld; /* (V) */
        float *d = dlogits + n * (size_t)ld;
        float mx;
        double lse;
        row_logsumexp(x, V, &mx, &lse);
        int32_t t = targets[n];
        if (t < 0 || t >= V) {
            for (int j = threadIdx.x; j < V; j += blockDim.x) d[j] = __int_as_float(0x7fc00000);
            if (threadIdx.x == 0) atomicCAS(derr, 0ull, ((unsigned long long)CU_DERR_TARGET << 56) | n);
            continue;
        }
        float l = (float)lse;
        for (int j = threadIdx.x; j < V; j += blockDim.x) {
            float g = scale * expf(x[j] - mx - l);
            if (j == t) g -= scale;
            d[j] = g;
        }
    }
}

#define CHECK_XENT(what)                                                                                    \
    if (V <= 0 || ld < V)                                                                                   \
        return cu_err(FSC_ERR_INVALID, what ": vocabulary %d and row stride %d (need 0 < V <= ld)", V, ld); \
    if (N == 0) return FSC_OK;

fsc_status cu_xent_forward(void *ctx, float *losses, const float *logits, const int32_t *targets, size_t N, int V,
                           int ld) {
    cu_ctx *c = cu_of(ctx);
    CHECK_XENT("xent_forward");
    FSC_TRY(cu_enter(c));
    xent_fwd_kernel<<<row_grid(N), XENT_THREADS, 0, cu_stream_of(c)>>>(losses, logits, targets, N, V, ld, c->derr_dev);
    return cu_launched("xent_forward");
}

/* Columns [V, ld) of dlogits are left untouched, as in the CPU backend. */
fsc_status cu_xent_backward(void *ctx, float *dlogits, const float *logits, const int32_t *targets, size_t N, int V,
                            int ld, float scale) {
    cu_ctx *c = cu_of(ctx);
    CHECK_XENT("xent_backward");
    FSC_TRY(cu_enter(c));
    xent_bwd_kernel<<<row_grid(N), XENT_THREADS, 0, cu_stream_of(c)>>>(dlogits, logits, targets, N, V, ld, scale,
                                                                       c->derr_dev);
    return cu_launched("xent_backward");
}
