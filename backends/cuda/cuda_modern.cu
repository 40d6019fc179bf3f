/* Kernels of the cuda device for today's language models beyond GPT-2 and for simple regressors: rotary
 * position embeddings, SiLU and SwiGLU, the elementwise product and the squared error (contracts in
 * fsc/plugin/device_ops.h; RMS norm is with layer norm in cuda_norm.cu). The CPU backend's float expressions,
 * compiled without FMA contraction: the product is bit-identical to it; SiLU/SwiGLU differ by expf's last
 * bits; rotary angles are computed in double (pow, sincos) and rounded to float as on the CPU, so they differ
 * only where the two libraries' double results round to different floats. The squared error sums a row in
 * double, a warp per row (lanes, then a butterfly): deterministic, not the CPU's order. No atomics. */
#include "cuda_internal.h"

#define GRID_STRIDE(i, n) for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
                               i += (size_t)gridDim.x * blockDim.x)

/* ---- rotary position embedding: a thread per (row, i < D/2), looping over the heads ---- */

__global__ void rope_kernel(float *out, const float *inp, int B, int T, int H, int D, int ld, double theta, int dir) {
    int h2 = D / 2;
    size_t n = (size_t)B * T * h2;
    GRID_STRIDE(k, n) {
        size_t r = k / h2;
        int i = (int)(k % h2), t = (int)(r % (size_t)T);
        double inv = 1.0 / pow(theta, (double)(2 * i) / (double)D);
        double sd, cd;
        sincos((double)t * inv, &sd, &cd);
        float c = (float)cd, s = dir > 0 ? (float)sd : -(float)sd;
        for (int h = 0; h < H; h++) {
            size_t base = r * (size_t)ld + (size_t)h * D;
            float x1 = inp[base + i], x2 = inp[base + i + h2];
            out[base + i] = x1 * c - x2 * s;
            out[base + i + h2] = x2 * c + x1 * s;
        }
    }
}

static fsc_status rope(void *ctx, float *out, const float *inp, int B, int T, int H, int D, int ld, float theta,
                       int dir, const char *what) {
    cu_ctx *c = cu_of(ctx);
    if (B < 0 || T < 0 || H < 0 || D < 0)
        return cu_err(FSC_ERR_INVALID, "%s: negative size (B=%d T=%d H=%d D=%d)", what, B, T, H, D);
    if (D % 2 != 0) return cu_err(FSC_ERR_INVALID, "%s: head size %d must be even", what, D);
    if ((int64_t)H * D > ld)
        return cu_err(FSC_ERR_INVALID, "%s: %d heads of %d columns do not fit a row of %d", what, H, D, ld);
    if (!(theta > 0.0f)) return cu_err(FSC_ERR_INVALID, "%s: theta %g must be positive", what, (double)theta);
    size_t n = (size_t)B * T * (D / 2);
    if (n == 0 || H == 0) return FSC_OK;
    FSC_TRY(cu_enter(c));
    rope_kernel<<<cu_blocks(n, CU_THREADS), CU_THREADS, 0, cu_stream_of(c)>>>(out, inp, B, T, H, D, ld, (double)theta,
                                                                             dir);
    return cu_launched(what);
}

fsc_status cu_rope_forward(void *ctx, float *out, const float *inp, int B, int T, int H, int D, int ld, float theta) {
    return rope(ctx, out, inp, B, T, H, D, ld, theta, 1, "rope_forward");
}

fsc_status cu_rope_backward(void *ctx, float *dinp, const float *dout, int B, int T, int H, int D, int ld,
                            float theta) {
    return rope(ctx, dinp, dout, B, T, H, D, ld, theta, -1, "rope_backward");
}

/* ---- SiLU, SwiGLU, product ---- */

__device__ __forceinline__ float sigmoid_f(float x) { return 1.0f / (1.0f + expf(-x)); }

__global__ void silu_forward_kernel(float *out, const float *inp, size_t n) {
    GRID_STRIDE(i, n) out[i] = inp[i] * sigmoid_f(inp[i]);
}

__global__ void silu_backward_kernel(float *dinp, const float *inp, const float *dout, size_t n) {
    GRID_STRIDE(i, n) {
        float x = inp[i], s = sigmoid_f(x);
        dinp[i] = (s * (1.0f + x * (1.0f - s))) * dout[i];
    }
}

__global__ void swiglu_forward_kernel(float *out, const float *gate, const float *up, size_t n) {
    GRID_STRIDE(i, n) {
        float g = gate[i];
        out[i] = (g * sigmoid_f(g)) * up[i];
    }
}

/* dgate may be dout: each element is read before it is written */
__global__ void swiglu_backward_kernel(float *dgate, float *dup, const float *gate, const float *up, const float *dout,
                                       size_t n) {
    GRID_STRIDE(i, n) {
        float g = gate[i], u = up[i], d = dout[i], s = sigmoid_f(g);
        float dg = (d * u) * (s * (1.0f + g * (1.0f - s)));
        float du = d * (g * s);
        dgate[i] = dg;
        dup[i] = du;
    }
}

__global__ void mul_forward_kernel(float *out, const float *a, const float *b, size_t n) {
    GRID_STRIDE(i, n) out[i] = a[i] * b[i];
}

__global__ void mul_backward_kernel(float *da, float *db, const float *a, const float *b, const float *dout, size_t n) {
    GRID_STRIDE(i, n) {
        float d = dout[i];
        if (da) da[i] += d * b[i];
        if (db) db[i] += d * a[i];
    }
}

#define LAUNCH_EW(name, n, ...)                                                                    \
    do {                                                                                           \
        cu_ctx *c_ = cu_of(ctx);                                                                   \
        if ((n) == 0) return FSC_OK;                                                               \
        FSC_TRY(cu_enter(c_));                                                                     \
        name##_kernel<<<cu_blocks(n, CU_THREADS), CU_THREADS, 0, cu_stream_of(c_)>>>(__VA_ARGS__); \
        return cu_launched(#name);                                                                 \
    } while (0)

fsc_status cu_silu_forward(void *ctx, float *out, const float *inp, size_t n) {
    LAUNCH_EW(silu_forward, n, out, inp, n);
}

fsc_status cu_silu_backward(void *ctx, float *dinp, const float *inp, const float *dout, size_t n) {
    LAUNCH_EW(silu_backward, n, dinp, inp, dout, n);
}

fsc_status cu_swiglu_forward(void *ctx, float *out, const float *gate, const float *up, size_t n) {
    LAUNCH_EW(swiglu_forward, n, out, gate, up, n);
}

fsc_status cu_swiglu_backward(void *ctx, float *dgate, float *dup, const float *gate, const float *up,
                              const float *dout, size_t n) {
    LAUNCH_EW(swiglu_backward, n, dgate, dup, gate, up, dout, n);
}

fsc_status cu_mul_forward(void *ctx, float *out, const float *a, const float *b, size_t n) {
    LAUNCH_EW(mul_forward, n, out, a, b, n);
}

fsc_status cu_mul_backward(void *ctx, float *da, float *db, const float *a, const float *b, const float *dout,
                           size_t n) {
    if (!da && !db) return FSC_OK;
    LAUNCH_EW(mul_backward, n, da, db, a, b, dout, n);
}

/* ---- squared error ---- */

__global__ void mse_forward_kernel(float *losses, const float *pred, const float *target, size_t N, int C) {
    int lane = threadIdx.x % 32, wpb = blockDim.x / 32;
    for (size_t row = (size_t)blockIdx.x * wpb + threadIdx.x / 32; row < N; row += (size_t)gridDim.x * wpb) {
        const float *x = pred + row * C, *y = target + row * C; /* (C) */
        double s = 0.0;
        for (int i = lane; i < C; i += 32) {
            double d = (double)(x[i] - y[i]);
            s += d * d;
        }
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0) losses[row] = (float)s;
    }
}

__global__ void mse_backward_kernel(float *dpred, const float *pred, const float *target, float s2, size_t n) {
    GRID_STRIDE(i, n) dpred[i] = s2 * (pred[i] - target[i]);
}

fsc_status cu_mse_forward(void *ctx, float *losses, const float *pred, const float *target, size_t N, int C) {
    cu_ctx *c = cu_of(ctx);
    if (C < 0) return cu_err(FSC_ERR_INVALID, "mse_forward: negative width %d", C);
    if (N == 0) return FSC_OK;
    FSC_TRY(cu_enter(c));
    size_t b = (N + 7) / 8; /* 8 warps (rows) per block of 256 threads */
    unsigned g = b > 65535u * 8u ? 65535u * 8u : (unsigned)b;
    mse_forward_kernel<<<g, 256, 0, cu_stream_of(c)>>>(losses, pred, target, N, C);
    return cu_launched("mse_forward");
}

fsc_status cu_mse_backward(void *ctx, float *dpred, const float *pred, const float *target, size_t N, int C,
                           float scale) {
    if (C < 0) return cu_err(FSC_ERR_INVALID, "mse_backward: negative width %d", C);
    size_t n = N * (size_t)C;
    float s2 = 2.0f * scale; /* on the host, as the CPU backend computes it */
    LAUNCH_EW(mse_backward, n, dpred, pred, target, s2, n);
}
