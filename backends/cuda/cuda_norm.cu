/* Row and column reductions of the cuda device: layer norm and RMS norm forward/backward, the bias gradient
 * and the token/position embedding. Deterministic without float atomics:
 * - a row (layer norm) is reduced by one warp, lanes striding the row, then a butterfly (xor shuffles),
 *   which leaves the same bits in every lane;
 * - column sums (bias grad, layer norm dw/db) cut the rows into fixed chunks of CS_CHUNK rows; in a chunk
 *   32 lanes stride the rows and a fixed tree adds the lanes; chunks are then added in ascending order.
 *   The cut depends only on N, never on the GPU or the launch;
 * - the embedding backward gives each (t, c) of dwpe one thread adding b = 0, 1, ... in order, and each
 *   token of dwte one thread per column adding that token's positions in (b, t) order: the CPU's order,
 *   so those results are the CPU backend's bits. */
#include <math.h>
#include <algorithm>
#include <vector>
#include "cuda_internal.h"

#define CS_LANES 32
#define CS_CHUNK 512 /* rows per chunk: part of the definition of the result */

__device__ __forceinline__ double warp_sum_d(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_sum_f(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* ---- column sums: out0[col] += sum_n a0(n, col), out1 likewise (out1 may be unused) ---- */

template <class F>
__global__ void colsum_kernel(F f, size_t N, int OC, float *p0, float *p1, int direct) {
    __shared__ float s0[CS_LANES][33], s1[CS_LANES][33];
    int tx = threadIdx.x, ty = threadIdx.y;
    int col = blockIdx.x * 32 + tx;
    size_t r0 = (size_t)blockIdx.y * CS_CHUNK, r1 = r0 + CS_CHUNK < N ? r0 + CS_CHUNK : N;
    float a0 = 0.0f, a1 = 0.0f;
    if (col < OC)
        for (size_t n = r0 + ty; n < r1; n += CS_LANES) f(n, col, a0, a1);
    s0[ty][tx] = a0;
    s1[ty][tx] = a1;
    __syncthreads();
    for (int s = CS_LANES / 2; s > 0; s >>= 1) {
        if (ty < s) {
            s0[ty][tx] += s0[ty + s][tx];
            s1[ty][tx] += s1[ty + s][tx];
        }
        __syncthreads();
    }
    if (ty == 0 && col < OC) {
        if (direct) { /* a single chunk: straight into the outputs */
            p0[col] += s0[0][tx];
            if (p1) p1[col] += s1[0][tx];
        } else {
            p0[(size_t)blockIdx.y * OC + col] = s0[0][tx];
            if (p1) p1[(size_t)blockIdx.y * OC + col] = s1[0][tx];
        }
    }
}

__global__ void colsum_finish(float *out0, float *out1, const float *p0, const float *p1, unsigned chunks, int OC) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= OC) return;
    float a0 = 0.0f, a1 = 0.0f;
    for (unsigned k = 0; k < chunks; k++) {
        a0 += p0[(size_t)k * OC + col];
        if (p1) a1 += p1[(size_t)k * OC + col];
    }
    out0[col] += a0;
    if (out1) out1[col] += a1;
}

template <class F>
static fsc_status colsum(cu_ctx *c, const char *who, F f, size_t N, int OC, float *out0, float *out1) {
    size_t chunks = (N + CS_CHUNK - 1) / CS_CHUNK;
    if (chunks > 65535) return cu_err(FSC_ERR_INVALID, "%s: %zu rows (at most %d)", who, N, 65535 * CS_CHUNK);
    dim3 block(32, CS_LANES), grid((unsigned)((OC + 31) / 32), (unsigned)chunks);
    cudaStream_t s = cu_stream_of(c);
    if (chunks == 1) {
        colsum_kernel<<<grid, block, 0, s>>>(f, N, OC, out0, out1, 1);
        return cu_launched(who);
    }
    void *scratch;
    FSC_TRY(cu_scratch(c, 2 * chunks * (size_t)OC * sizeof(float), &scratch));
    float *p0 = (float *)scratch, *p1 = out1 ? p0 + chunks * (size_t)OC : NULL;
    colsum_kernel<<<grid, block, 0, s>>>(f, N, OC, p0, p1, 0);
    FSC_TRY(cu_launched(who));
    colsum_finish<<<(OC + 255) / 256, 256, 0, s>>>(out0, out1, p0, p1, (unsigned)chunks, OC);
    return cu_launched(who);
}

struct bias_term {
    const float *dout;
    int OC;
    __device__ void operator()(size_t n, int col, float &a0, float &) const { a0 += dout[n * (size_t)OC + col]; }
};

fsc_status cu_bias_grad(void *ctx, float *dbias, const float *dout, size_t N, int OC) {
    cu_ctx *c = cu_of(ctx);
    if (OC < 0) return cu_err(FSC_ERR_INVALID, "bias_grad: negative width %d", OC);
    if (N == 0 || OC == 0) return FSC_OK;
    FSC_TRY(cu_enter(c));
    return colsum(c, "bias_grad", bias_term{dout, OC}, N, OC, dbias, (float *)NULL);
}

/* ---- layer norm ---- */

__global__ void layernorm_forward_kernel(float *out, float *mean, float *rstd, const float *inp, const float *w,
                                         const float *b, size_t N, int C) {
    int lane = threadIdx.x % 32, wpb = blockDim.x / 32;
    for (size_t row = (size_t)blockIdx.x * wpb + threadIdx.x / 32; row < N; row += (size_t)gridDim.x * wpb) {
        const float *x = inp + row * C; /* (C) */
        float *o = out + row * C;
        double s = 0.0;
        for (int i = lane; i < C; i += 32) s += x[i];
        s = warp_sum_d(s);
        float m = (float)(s / C);
        double v = 0.0;
        for (int i = lane; i < C; i += 32) {
            float d = x[i] - m;
            v += (double)(d * d);
        }
        v = warp_sum_d(v);
        float r = 1.0f / sqrtf((float)(v / C) + 1e-5f);
        for (int i = lane; i < C; i += 32) o[i] = (r * (x[i] - m)) * w[i] + b[i];
        if (lane == 0) {
            mean[row] = m;
            rstd[row] = r;
        }
    }
}

__global__ void layernorm_dinp_kernel(float *dinp, const float *dout, const float *inp, const float *w,
                                      const float *mean, const float *rstd, size_t N, int C) {
    int lane = threadIdx.x % 32, wpb = blockDim.x / 32;
    for (size_t row = (size_t)blockIdx.x * wpb + threadIdx.x / 32; row < N; row += (size_t)gridDim.x * wpb) {
        const float *x = inp + row * C, *d = dout + row * C; /* (C) */
        float *dx = dinp + row * C;
        float m = mean[row], r = rstd[row];
        float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
        for (int i = lane; i < C; i += 32) {
            float norm = (x[i] - m) * r;
            float dnorm = w[i] * d[i];
            dnorm_mean += dnorm;
            dnorm_norm_mean += dnorm * norm;
        }
        dnorm_mean = warp_sum_f(dnorm_mean) / (float)C;
        dnorm_norm_mean = warp_sum_f(dnorm_norm_mean) / (float)C;
        for (int i = lane; i < C; i += 32) {
            float norm = (x[i] - m) * r;
            float dnorm = w[i] * d[i];
            dx[i] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * r;
        }
    }
}

struct ln_terms {
    const float *dout, *inp, *mean, *rstd;
    int C;
    __device__ void operator()(size_t n, int col, float &a0, float &a1) const {
        size_t i = n * (size_t)C + col;
        float d = dout[i];
        float norm = (inp[i] - mean[n]) * rstd[n];
        a0 += norm * d; /* dw */
        a1 += d;        /* db */
    }
};

static unsigned row_blocks(size_t N) {
    size_t b = (N + 7) / 8; /* 8 warps (rows) per block of 256 threads */
    return b > 65535u * 8u ? 65535u * 8u : (unsigned)(b ? b : 1);
}

fsc_status cu_layernorm_forward(void *ctx, float *out, float *mean, float *rstd, const float *inp, const float *w,
                                const float *b, size_t N, int C) {
    cu_ctx *c = cu_of(ctx);
    if (C <= 0) return cu_err(FSC_ERR_INVALID, "layernorm_forward: width %d must be positive", C);
    if (N == 0) return FSC_OK;
    FSC_TRY(cu_enter(c));
    layernorm_forward_kernel<<<row_blocks(N), 256, 0, cu_stream_of(c)>>>(out, mean, rstd, inp, w, b, N, C);
    return cu_launched("layernorm_forward");
}

fsc_status cu_layernorm_backward(void *ctx, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                                 const float *w, const float *mean, const float *rstd, size_t N, int C) {
    cu_ctx *c = cu_of(ctx);
    if (C <= 0) return cu_err(FSC_ERR_INVALID, "layernorm_backward: width %d must be positive", C);
    if (!dw != !db) return cu_err(FSC_ERR_INVALID, "layernorm_backward: dw and db are given together or both NULL");
    if (!dinp && !dw) return cu_err(FSC_ERR_INVALID, "layernorm_backward: dinp, dw and db are all NULL");
    if (N == 0) return FSC_OK;
    FSC_TRY(cu_enter(c));
    if (dinp) { /* the two halves share nothing: either alone has its bits */
        layernorm_dinp_kernel<<<row_blocks(N), 256, 0, cu_stream_of(c)>>>(dinp, dout, inp, w, mean, rstd, N, C);
        FSC_TRY(cu_launched("layernorm_backward"));
    }
    return dw ? colsum(c, "layernorm_backward", ln_terms{dout, inp, mean, rstd, C}, N, C, dw, db) : FSC_OK;
}

/* ---- RMS norm: a warp per row as layer norm; dw by the column sums above ---- */

__global__ void rmsnorm_forward_kernel(float *out, float *rstd, const float *inp, const float *w, size_t N, int C,
                                       float eps) {
    int lane = threadIdx.x % 32, wpb = blockDim.x / 32;
    for (size_t row = (size_t)blockIdx.x * wpb + threadIdx.x / 32; row < N; row += (size_t)gridDim.x * wpb) {
        const float *x = inp + row * C; /* (C) */
        float *o = out + row * C;
        double s = 0.0;
        for (int i = lane; i < C; i += 32) s += (double)(x[i] * x[i]);
        s = warp_sum_d(s);
        float r = 1.0f / sqrtf((float)(s / C) + eps);
        for (int i = lane; i < C; i += 32) o[i] = (x[i] * r) * w[i];
        if (lane == 0) rstd[row] = r;
    }
}

__global__ void rmsnorm_dinp_kernel(float *dinp, const float *dout, const float *inp, const float *w,
                                    const float *rstd, size_t N, int C) {
    int lane = threadIdx.x % 32, wpb = blockDim.x / 32;
    for (size_t row = (size_t)blockIdx.x * wpb + threadIdx.x / 32; row < N; row += (size_t)gridDim.x * wpb) {
        const float *x = inp + row * C, *d = dout + row * C; /* (C) */
        float *dx = dinp + row * C;
        float r = rstd[row];
        float m = 0.0f;
        for (int i = lane; i < C; i += 32) m += (w[i] * d[i]) * (x[i] * r);
        m = warp_sum_f(m) / (float)C;
        for (int i = lane; i < C; i += 32) dx[i] += (w[i] * d[i] - (x[i] * r) * m) * r;
    }
}

struct rms_terms {
    const float *dout, *inp, *rstd;
    int C;
    __device__ void operator()(size_t n, int col, float &a0, float &) const {
        size_t i = n * (size_t)C + col;
        a0 += (inp[i] * rstd[n]) * dout[i]; /* dw */
    }
};

fsc_status cu_rmsnorm_forward(void *ctx, float *out, float *rstd, const float *inp, const float *w, size_t N, int C,
                              float eps) {
    cu_ctx *c = cu_of(ctx);
    if (C <= 0) return cu_err(FSC_ERR_INVALID, "rmsnorm_forward: width %d must be positive", C);
    if (!(eps >= 0.0f)) return cu_err(FSC_ERR_INVALID, "rmsnorm_forward: eps %g must not be negative", (double)eps);
    if (N == 0) return FSC_OK;
    FSC_TRY(cu_enter(c));
    rmsnorm_forward_kernel<<<row_blocks(N), 256, 0, cu_stream_of(c)>>>(out, rstd, inp, w, N, C, eps);
    return cu_launched("rmsnorm_forward");
}

fsc_status cu_rmsnorm_backward(void *ctx, float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                               const float *rstd, size_t N, int C) {
    cu_ctx *c = cu_of(ctx);
    if (C <= 0) return cu_err(FSC_ERR_INVALID, "rmsnorm_backward: width %d must be positive", C);
    if (!dinp && !dw) return cu_err(FSC_ERR_INVALID, "rmsnorm_backward: dinp and dw are both NULL");
    if (N == 0) return FSC_OK;
    FSC_TRY(cu_enter(c));
    if (dinp) {
        rmsnorm_dinp_kernel<<<row_blocks(N), 256, 0, cu_stream_of(c)>>>(dinp, dout, inp, w, rstd, N, C);
        FSC_TRY(cu_launched("rmsnorm_backward"));
    }
    return dw ? colsum(c, "rmsnorm_backward", rms_terms{dout, inp, rstd, C}, N, C, dw, (float *)NULL) : FSC_OK;
}

/* ---- embedding ---- */

__global__ void encoder_forward_kernel(float *out, const int32_t *tok, const float *wte, const float *wpe, int B,
                                       int T, int C, unsigned long long *derr) {
    size_t BT = (size_t)B * T;
    for (size_t bt = blockIdx.x; bt < BT; bt += gridDim.x) {
        int32_t ix = tok[bt];
        int t = (int)(bt % (size_t)T);
        float *o = out + bt * C; /* (C) */
        if (ix < 0) {
            for (int i = threadIdx.x; i < C; i += blockDim.x) o[i] = __int_as_float(0x7fc00000);
            if (threadIdx.x == 0) atomicCAS(derr, 0ull, ((unsigned long long)CU_DERR_NEG_TOKEN << 56) | bt);
            continue;
        }
        const float *we = wte + (size_t)ix * C, *wp = wpe + (size_t)t * C;
        for (int i = threadIdx.x; i < C; i += blockDim.x) o[i] = we[i] + wp[i];
    }
}

fsc_status cu_encoder_forward(void *ctx, float *out, const int32_t *tok, const float *wte, const float *wpe, int B,
                              int T, int C) {
    cu_ctx *c = cu_of(ctx);
    if (B < 0 || T < 0 || C < 0) return cu_err(FSC_ERR_INVALID, "encoder_forward: negative size (B=%d T=%d C=%d)", B, T, C);
    size_t BT = (size_t)B * T;
    if (BT == 0 || C == 0) return FSC_OK;
    FSC_TRY(cu_enter(c));
    unsigned g = BT < 65535u * 8u ? (unsigned)BT : 65535u * 8u;
    encoder_forward_kernel<<<g, CU_THREADS, 0, cu_stream_of(c)>>>(out, tok, wte, wpe, B, T, C, c->derr_dev);
    return cu_launched("encoder_forward");
}

__global__ void encoder_dwpe_kernel(float *dwpe, const float *dout, int B, int T, int C) {
    size_t TC = (size_t)T * C;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < TC; i += (size_t)gridDim.x * blockDim.x) {
        float acc = dwpe[i];
        for (int b = 0; b < B; b++) acc += dout[(size_t)b * TC + i];
        dwpe[i] = acc;
    }
}

/* block x: one distinct token; its positions pos[off[u] .. off[u+1]) ascending */
__global__ void encoder_dwte_kernel(float *dwte, const float *dout, const int32_t *uniq, const int32_t *off,
                                    const int32_t *pos, int C) {
    int u = blockIdx.x, col = blockIdx.y * blockDim.x + threadIdx.x;
    if (col >= C) return;
    float *row = dwte + (size_t)uniq[u] * C;
    float acc = row[col];
    for (int p = off[u]; p < off[u + 1]; p++) acc += dout[(size_t)pos[p] * C + col];
    row[col] = acc;
}

fsc_status cu_encoder_backward(void *ctx, float *dwte, float *dwpe, const float *dout, const int32_t *tok, int B,
                               int T, int C) {
    cu_ctx *c = cu_of(ctx);
    if (B < 0 || T < 0 || C < 0)
        return cu_err(FSC_ERR_INVALID, "encoder_backward: negative size (B=%d T=%d C=%d)", B, T, C);
    size_t BT = (size_t)B * T;
    if (BT == 0 || C == 0) return FSC_OK;
    if (BT > 0x7fffffff) return cu_err(FSC_ERR_INVALID, "encoder_backward: %zu positions (at most 2^31 - 1)", BT);
    FSC_TRY(cu_enter(c));
    cudaStream_t s = cu_stream_of(c);
    encoder_dwpe_kernel<<<cu_blocks((size_t)T * C, CU_THREADS), CU_THREADS, 0, s>>>(dwpe, dout, B, T, C);
    FSC_TRY(cu_launched("encoder_backward (dwpe)"));
    /* bucket the positions by token on the host. Pinned buffer: [tokens (BT)] then the upload
     * [distinct tokens (U)][offsets (U + 1)][positions grouped by token, ascending (BT)] */
    int32_t *h;
    FSC_TRY(cu_host_scratch(c, (4 * BT + 1) * sizeof(int32_t), (void **)&h));
    FSC_TRY(cu_check(cudaMemcpyAsync(h, tok, BT * sizeof(int32_t), cudaMemcpyDeviceToHost, s), "encoder_backward"));
    FSC_TRY(cu_check(cudaStreamSynchronize(s), "encoder_backward"));
    std::vector<int32_t> order;
    try {
        order.resize(BT);
    } catch (...) {
        return cu_err(FSC_ERR_NOMEM, "encoder_backward: out of host memory");
    }
    for (size_t i = 0; i < BT; i++) {
        if (h[i] < 0)
            return cu_err(FSC_ERR_INVALID, "encoder_backward: token %d at position %zu is negative", (int)h[i], i);
        order[i] = (int32_t)i;
    }
    std::stable_sort(order.begin(), order.end(), [h](int32_t a, int32_t b) { return h[a] < h[b]; });
    size_t U = 0;
    for (size_t i = 0; i < BT; i++) U += (i == 0 || h[order[i]] != h[order[i - 1]]);
    int32_t *uniq = h + BT, *off = uniq + U, *pos = off + U + 1;
    for (size_t i = 0, u = 0; i < BT; i++) {
        if (i == 0 || h[order[i]] != h[order[i - 1]]) {
            uniq[u] = h[order[i]];
            off[u] = (int32_t)i;
            u++;
        }
        pos[i] = order[i];
    }
    off[U] = (int32_t)BT;
    int32_t *pack = uniq;
    size_t pack_words = 2 * U + 1 + BT;
    void *dscr;
    FSC_TRY(cu_scratch(c, pack_words * sizeof(int32_t), &dscr));
    int32_t *d = (int32_t *)dscr;
    FSC_TRY(cu_check(cudaMemcpyAsync(d, pack, pack_words * sizeof(int32_t), cudaMemcpyHostToDevice, s),
                     "encoder_backward"));
    FSC_TRY(cu_check(cudaEventRecord(c->host_ev, s), "encoder_backward"));
    dim3 grid((unsigned)U, (unsigned)((C + 127) / 128));
    encoder_dwte_kernel<<<grid, 128, 0, s>>>(dwte, dout, d, d + U, d + 2 * U + 1, C);
    return cu_launched("encoder_backward (dwte)");
}
