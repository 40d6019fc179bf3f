/* Elementwise kernels of the cuda device: dtype conversion, scale/axpy/add, GELU, bias add and the
 * optimizer updates. One thread per element in grid-stride loops; no reductions, so nothing here
 * depends on launch geometry. The plug-in is compiled without FMA contraction (--fmad=false), so with
 * IEEE division and square root these give the CPU backend's bits (GELU differs by tanhf's last bits). */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include "cuda_internal.h"

#define GRID_STRIDE(i, n) for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
                               i += (size_t)gridDim.x * blockDim.x)

__global__ void probe_kernel(int *x) {
    if (x) *x = 1;
}

const void *cu_probe_kernel(void) { return (const void *)probe_kernel; }

/* ---- conversion (round to nearest, ties to even) ---- */

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }
template <class T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __forceinline__ __half from_f32<__half>(float x) { return __float2half_rn(x); }

template <class D, class S> __global__ void convert_kernel(D *dst, const S *src, size_t n) {
    GRID_STRIDE(i, n) dst[i] = from_f32<D>(to_f32(src[i]));
}

template <class D> static void launch_from(cudaStream_t s, D *dst, const void *src, fsc_dtype st, size_t n) {
    unsigned g = cu_blocks(n, CU_THREADS);
    if (st == FSC_F32) convert_kernel<<<g, CU_THREADS, 0, s>>>(dst, (const float *)src, n);
    else if (st == FSC_BF16) convert_kernel<<<g, CU_THREADS, 0, s>>>(dst, (const __nv_bfloat16 *)src, n);
    else convert_kernel<<<g, CU_THREADS, 0, s>>>(dst, (const __half *)src, n);
}

static int is_float_type(fsc_dtype t) { return t == FSC_F32 || t == FSC_BF16 || t == FSC_F16; }
static size_t type_size(fsc_dtype t) { return t == FSC_F32 ? 4 : 2; }
static const char *type_name(fsc_dtype t) {
    static const char *names[] = {"f32", "bf16", "f16", "i32", "u8"};
    return (unsigned)t < 5 ? names[t] : "invalid";
}

fsc_status cu_convert_on(cudaStream_t s, void *dst, fsc_dtype dt, const void *src, fsc_dtype st, size_t n) {
    if (n == 0) return FSC_OK;
    if (dt == FSC_F32) launch_from(s, (float *)dst, src, st, n);
    else if (dt == FSC_BF16) launch_from(s, (__nv_bfloat16 *)dst, src, st, n);
    else launch_from(s, (__half *)dst, src, st, n);
    return cu_launched("convert");
}

fsc_status cu_convert(void *ctx, void *dst, fsc_dtype dt, const void *src, fsc_dtype st, size_t n) {
    cu_ctx *c = cu_of(ctx);
    if (!is_float_type(dt) || !is_float_type(st))
        return cu_err(FSC_ERR_INVALID, "convert: %s to %s (only f32, bf16 and f16 convert)", type_name(st),
                      type_name(dt));
    if (n == 0) return FSC_OK;
    FSC_TRY(cu_enter(c));
    if (dt == st) return cu_copy(ctx, dst, src, n * type_size(dt));
    const char *d = (const char *)dst, *x = (const char *)src;
    size_t db = n * type_size(dt), sb = n * type_size(st);
    if (d < x + sb && x < d + db) { /* in place (or overlapping): through scratch, as a sequential loop would */
        void *tmp;
        FSC_TRY(cu_scratch(c, db, &tmp));
        FSC_TRY(cu_convert_on(cu_stream_of(c), tmp, dt, src, st, n));
        return cu_check(cudaMemcpyAsync(dst, tmp, db, cudaMemcpyDeviceToDevice, cu_stream_of(c)), "convert");
    }
    return cu_convert_on(cu_stream_of(c), dst, dt, src, st, n);
}

/* ---- scale, axpy, add ---- */

__global__ void scale_kernel(float *x, float a, size_t n) {
    GRID_STRIDE(i, n) x[i] = a * x[i];
}
__global__ void divide_kernel(float *x, float d, size_t n) {
    GRID_STRIDE(i, n) x[i] = x[i] / d;
}
__global__ void axpy_kernel(float *y, float a, const float *x, size_t n) {
    GRID_STRIDE(i, n) y[i] = y[i] + a * x[i];
}
__global__ void add_kernel(float *out, const float *a, const float *b, size_t n) {
    GRID_STRIDE(i, n) out[i] = a[i] + b[i];
}

fsc_status cu_divide_on(cudaStream_t s, float *x, float d, size_t n) {
    if (n == 0) return FSC_OK;
    divide_kernel<<<cu_blocks(n, CU_THREADS), CU_THREADS, 0, s>>>(x, d, n);
    return cu_launched("divide");
}

fsc_status cu_scale(void *ctx, float *x, float a, size_t n) {
    cu_ctx *c = cu_of(ctx);
    if (n == 0) return FSC_OK;
    FSC_TRY(cu_enter(c));
    scale_kernel<<<cu_blocks(n, CU_THREADS), CU_THREADS, 0, cu_stream_of(c)>>>(x, a, n);
    return cu_launched("scale");
}

fsc_status cu_axpy(void *ctx, float *y, float a, const float *x, size_t n) {
    cu_ctx *c = cu_of(ctx);
    if (n == 0) return FSC_OK;
    FSC_TRY(cu_enter(c));
    axpy_kernel<<<cu_blocks(n, CU_THREADS), CU_THREADS, 0, cu_stream_of(c)>>>(y, a, x, n);
    return cu_launched("axpy");
}

fsc_status cu_add(void *ctx, float *out, const float *a, const float *b, size_t n) {
    cu_ctx *c = cu_of(ctx);
    if (n == 0) return FSC_OK;
    FSC_TRY(cu_enter(c));
    add_kernel<<<cu_blocks(n, CU_THREADS), CU_THREADS, 0, cu_stream_of(c)>>>(out, a, b, n);
    return cu_launched("add");
}

/* ---- GELU, tanh approximation (the CPU backend's formulas) ---- */

#define GELU_S 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_C 0.044715f

__global__ void gelu_forward_kernel(float *out, const float *inp, size_t n) {
    GRID_STRIDE(i, n) {
        float x = inp[i];
        float u = GELU_S * (x + GELU_C * x * x * x);
        out[i] = 0.5f * x * (1.0f + tanhf(u));
    }
}

__global__ void gelu_backward_kernel(float *dinp, const float *inp, const float *dout, size_t n) {
    GRID_STRIDE(i, n) {
        float x = inp[i];
        float u = GELU_S * (x + GELU_C * x * x * x);
        float th = tanhf(u);
        float sech2 = 1.0f - th * th;
        float g = 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_S * (1.0f + 3.0f * GELU_C * x * x);
        dinp[i] = g * dout[i];
    }
}

fsc_status cu_gelu_forward(void *ctx, float *out, const float *inp, size_t n) {
    cu_ctx *c = cu_of(ctx);
    if (n == 0) return FSC_OK;
    FSC_TRY(cu_enter(c));
    gelu_forward_kernel<<<cu_blocks(n, CU_THREADS), CU_THREADS, 0, cu_stream_of(c)>>>(out, inp, n);
    return cu_launched("gelu_forward");
}

fsc_status cu_gelu_backward(void *ctx, float *dinp, const float *inp, const float *dout, size_t n) {
    cu_ctx *c = cu_of(ctx);
    if (n == 0) return FSC_OK;
    FSC_TRY(cu_enter(c));
    gelu_backward_kernel<<<cu_blocks(n, CU_THREADS), CU_THREADS, 0, cu_stream_of(c)>>>(dinp, inp, dout, n);
    return cu_launched("gelu_backward");
}

/* ---- bias add: out[n, :] += bias, a block per row (grid-stride over rows) ---- */

__global__ void bias_add_kernel(float *out, const float *bias, size_t N, int OC) {
    for (size_t r = blockIdx.x; r < N; r += gridDim.x) {
        float *o = out + r * (size_t)OC;
        for (int j = threadIdx.x; j < OC; j += blockDim.x) o[j] += bias[j];
    }
}

fsc_status cu_bias_add(void *ctx, float *out, const float *bias, size_t N, int OC) {
    cu_ctx *c = cu_of(ctx);
    if (OC < 0) return cu_err(FSC_ERR_INVALID, "bias_add: negative width %d", OC);
    if (N == 0 || OC == 0) return FSC_OK;
    FSC_TRY(cu_enter(c));
    unsigned g = N < 65535u * 4u ? (unsigned)N : 65535u * 4u;
    bias_add_kernel<<<g, CU_THREADS, 0, cu_stream_of(c)>>>(out, bias, N, OC);
    return cu_launched("bias_add");
}

/* ---- optimizers: exactly the CPU backend's float expressions ---- */

__global__ void adamw_kernel(float *p, const float *g, float *m, float *v, size_t n, float lr, float lrwd, float b1,
                             float b2, float c1, float c2, float eps, float bc1, float bc2) {
    GRID_STRIDE(i, n) {
        float pi = p[i] - lrwd * p[i];
        float gi = g[i];
        float mi = b1 * m[i] + c1 * gi;
        float vi = b2 * v[i] + c2 * (gi * gi);
        m[i] = mi;
        v[i] = vi;
        p[i] = pi - lr * ((mi / bc1) / (sqrtf(vi / bc2) + eps));
    }
}

__global__ void sgd_kernel(float *p, const float *g, float *buf, size_t n, float lr, float momentum, float wd,
                           int first) {
    GRID_STRIDE(i, n) {
        float d = g[i] + wd * p[i];
        if (momentum != 0.0f) {
            d = first ? d : momentum * buf[i] + d;
            buf[i] = d;
        }
        p[i] = p[i] - lr * d;
    }
}

fsc_status cu_adamw(void *ctx, float *p, const float *g, float *m, float *v, size_t n, float lr, float b1, float b2,
                    float eps, float wd, float bc1, float bc2) {
    cu_ctx *c = cu_of(ctx);
    if (n == 0) return FSC_OK;
    FSC_TRY(cu_enter(c));
    float lrwd = lr * wd, c1 = 1.0f - b1, c2 = 1.0f - b2; /* on the host, as the CPU backend computes them */
    adamw_kernel<<<cu_blocks(n, CU_THREADS), CU_THREADS, 0, cu_stream_of(c)>>>(p, g, m, v, n, lr, lrwd, b1, b2, c1, c2,
                                                                               eps, bc1, bc2);
    return cu_launched("adamw");
}

fsc_status cu_sgd(void *ctx, float *p, const float *g, float *buf, size_t n, float lr, float momentum, float wd,
                  int first) {
    cu_ctx *c = cu_of(ctx);
    if (momentum != 0.0f && !buf)
        return cu_err(FSC_ERR_INVALID, "sgd: momentum %g needs a momentum buffer (buf is NULL)", (double)momentum);
    if (n == 0) return FSC_OK;
    FSC_TRY(cu_enter(c));
    sgd_kernel<<<cu_blocks(n, CU_THREADS), CU_THREADS, 0, cu_stream_of(c)>>>(p, g, buf, n, lr, momentum, wd, first);
    return cu_launched("sgd");
}
