/* Matrix products of the cuda device on cuBLAS: f32 (full f32; TF32 tensor cores when the device was opened
 * with FSC_CUDA_TF32=1) and the optional gemm_ex with bf16/f16 inputs accumulated in f32 on tensor cores.
 * fsc is row-major, cuBLAS column-major: a row-major C (M x N, ldc) is a column-major C^T (N x M, ldc),
 * and C^T = op(B)^T op(A)^T, so we ask cuBLAS for the product of B and A with M and N swapped.
 * cuBLAS gives the same bits on every call for a fixed GPU model and library version; the handle gets one
 * workspace per stream (cu_blas_bind) so concurrent streams cannot disturb that. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include "cuda_internal.h"

static fsc_status check_dims(const char *who, int transa, int transb, int M, int N, int K, int lda, int ldb, int ldc,
                             int batch) {
    if (M < 0 || N < 0 || K < 0 || batch < 0)
        return cu_err(FSC_ERR_INVALID, "%s: negative size (M=%d N=%d K=%d batch=%d)", who, M, N, K, batch);
    int acols = transa ? M : K, bcols = transb ? K : N;
    if (lda < (acols > 1 ? acols : 1))
        return cu_err(FSC_ERR_INVALID, "%s: lda %d < %d columns of A%s", who, lda, acols, transa ? "^T" : "");
    if (ldb < (bcols > 1 ? bcols : 1))
        return cu_err(FSC_ERR_INVALID, "%s: ldb %d < %d columns of B%s", who, ldb, bcols, transb ? "^T" : "");
    if (ldc < (N > 1 ? N : 1)) return cu_err(FSC_ERR_INVALID, "%s: ldc %d < N = %d", who, ldc, N);
    return FSC_OK;
}

/* K = 0: C = beta * C, and beta 0 overwrites (NaN in C does not survive), as BLAS defines it. */
template <class T> __device__ __forceinline__ float ld_f(const T *p);
template <> __device__ __forceinline__ float ld_f<float>(const float *p) { return *p; }
template <> __device__ __forceinline__ float ld_f<__nv_bfloat16>(const __nv_bfloat16 *p) { return __bfloat162float(*p); }
template <> __device__ __forceinline__ float ld_f<__half>(const __half *p) { return __half2float(*p); }
template <class T> __device__ __forceinline__ void st_f(T *p, float x);
template <> __device__ __forceinline__ void st_f<float>(float *p, float x) { *p = x; }
template <> __device__ __forceinline__ void st_f<__nv_bfloat16>(__nv_bfloat16 *p, float x) { *p = __float2bfloat16_rn(x); }
template <> __device__ __forceinline__ void st_f<__half>(__half *p, float x) { *p = __float2half_rn(x); }

template <class T> __global__ void beta_kernel(T *C, int M, int N, int ldc, long long sc, int batch, float beta) {
    size_t total = (size_t)batch * M * N;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        size_t b = i / ((size_t)M * N), r = i % ((size_t)M * N);
        T *p = C + (long long)b * sc + (long long)(r / N) * ldc + (long long)(r % N);
        st_f<T>(p, beta == 0.0f ? 0.0f : beta * ld_f<T>(p));
    }
}

template <class T> static fsc_status beta_only(cu_ctx *c, T *C, int M, int N, int ldc, int64_t sc, int batch, float beta) {
    size_t total = (size_t)batch * M * N;
    beta_kernel<T><<<cu_blocks(total, CU_THREADS), CU_THREADS, 0, cu_stream_of(c)>>>(C, M, N, ldc, sc, batch, beta);
    return cu_launched("gemm (K = 0)");
}

fsc_status cu_gemm(void *ctx, int transa, int transb, int M, int N, int K, float alpha, const float *A, int lda,
                   int64_t sa, const float *B, int ldb, int64_t sb, float beta, float *C, int ldc, int64_t sc,
                   int batch) {
    cu_ctx *c = cu_of(ctx);
    FSC_TRY(check_dims("gemm", transa, transb, M, N, K, lda, ldb, ldc, batch));
    if (M == 0 || N == 0 || batch == 0) return FSC_OK;
    FSC_TRY(cu_enter(c));
    if (K == 0) return beta_only<float>(c, C, M, N, ldc, sc, batch, beta);
    FSC_TRY(cu_blas_bind(c));
    cublasOperation_t opa = transa ? CUBLAS_OP_T : CUBLAS_OP_N, opb = transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    return cu_blas_check(cublasSgemmStridedBatched(c->blas, opb, opa, N, M, K, &alpha, B, ldb, (long long)sb, A, lda,
                                                   (long long)sa, &beta, C, ldc, (long long)sc, batch),
                         "sgemm");
}

static int cuda_type(fsc_dtype t, cudaDataType_t *out) {
    switch (t) {
    case FSC_F32: *out = CUDA_R_32F; return 1;
    case FSC_BF16: *out = CUDA_R_16BF; return 1;
    case FSC_F16: *out = CUDA_R_16F; return 1;
    default: return 0;
    }
}

fsc_status cu_gemm_ex(void *ctx, int transa, int transb, int M, int N, int K, float alpha, const void *A, int lda,
                      int64_t sa, const void *B, int ldb, int64_t sb, fsc_dtype ab, float beta, void *C, int ldc,
                      int64_t sc, fsc_dtype ct, int batch) {
    cu_ctx *c = cu_of(ctx);
    cudaDataType_t tab, tc;
    if (!cuda_type(ab, &tab) || !cuda_type(ct, &tc) || (ct != FSC_F32 && ct != ab))
        return cu_err(FSC_ERR_INVALID, "gemm_ex: inputs of fsc_dtype %d and output of fsc_dtype %d (inputs f32, bf16 "
                      "or f16; output f32 or the inputs' dtype)", (int)ab, (int)ct);
    FSC_TRY(check_dims("gemm_ex", transa, transb, M, N, K, lda, ldb, ldc, batch));
    if (M == 0 || N == 0 || batch == 0) return FSC_OK;
    FSC_TRY(cu_enter(c));
    if (K == 0) {
        if (ct == FSC_F32) return beta_only<float>(c, (float *)C, M, N, ldc, sc, batch, beta);
        if (ct == FSC_BF16) return beta_only<__nv_bfloat16>(c, (__nv_bfloat16 *)C, M, N, ldc, sc, batch, beta);
        return beta_only<__half>(c, (__half *)C, M, N, ldc, sc, batch, beta);
    }
    FSC_TRY(cu_blas_bind(c));
    cublasOperation_t opa = transa ? CUBLAS_OP_T : CUBLAS_OP_N, opb = transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    /* f32 products and sums: tensor cores for 16-bit inputs; f32 inputs in full f32, or in TF32 under
     * FSC_CUDA_TF32=1 (cu_ctx.tf32) */
    cublasComputeType_t comp = ab == FSC_F32 && c->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    return cu_blas_check(cublasGemmStridedBatchedEx(c->blas, opb, opa, N, M, K, &alpha, B, tab, ldb, (long long)sb, A,
                                                    tab, lda, (long long)sa, &beta, C, tc, ldc, (long long)sc, batch,
                                                    comp, CUBLAS_GEMM_DEFAULT),
                         "gemm_ex");
}
