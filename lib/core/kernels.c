/* The typed kernel calls of core/kernels.h: each calls its entry of the device's table with the device's context,
 * or, where the backend left the entry NULL, fails FSC_ERR_UNSUPPORTED naming the device and the kernel. What a
 * kernel computes: plugin/device_ops.h. Every kernel the layers above the core launch passes here: one plain
 * call and a test of the entry on top of the backend's own call. */
#include "core/device_impl.h"

static fsc_status missing(const fsc_device *dev, const char *op) {
    return fsc_error(FSC_ERR_UNSUPPORTED, "device %s has no kernel %s (its backend's table leaves it NULL)",
                     dev->ops->name, op);
}

/* The body of every wrapper: dev's entry op with its context and the arguments. */
#define CALL(op, ...) return dev->ops->op ? dev->ops->op(dev->ctx, __VA_ARGS__) : missing(dev, #op)

fsc_status fsc_k_gemm(fsc_device *dev, int transa, int transb, int M, int N, int K, float alpha, const float *A,
                      int lda, int64_t sa, const float *B, int ldb, int64_t sb, float beta, float *C, int ldc,
                      int64_t sc, int batch) {
    CALL(gemm, transa, transb, M, N, K, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch);
}

fsc_status fsc_k_convert(fsc_device *dev, void *dst, fsc_dtype dt, const void *src, fsc_dtype st, size_t n) {
    CALL(convert, dst, dt, src, st, n);
}

fsc_status fsc_k_scale(fsc_device *dev, float *x, float a, size_t n) {
    CALL(scale, x, a, n);
}

fsc_status fsc_k_axpy(fsc_device *dev, float *y, float a, const float *x, size_t n) {
    CALL(axpy, y, a, x, n);
}

fsc_status fsc_k_add(fsc_device *dev, float *out, const float *a, const float *b, size_t n) {
    CALL(add, out, a, b, n);
}

fsc_status fsc_k_gelu_forward(fsc_device *dev, float *out, const float *inp, size_t n) {
    CALL(gelu_forward, out, inp, n);
}

fsc_status fsc_k_gelu_backward(fsc_device *dev, float *dinp, const float *inp, const float *dout, size_t n) {
    CALL(gelu_backward, dinp, inp, dout, n);
}

fsc_status fsc_k_bias_add(fsc_device *dev, float *out, const float *bias, size_t N, int OC) {
    CALL(bias_add, out, bias, N, OC);
}

fsc_status fsc_k_bias_grad(fsc_device *dev, float *dbias, const float *dout, size_t N, int OC) {
    CALL(bias_grad, dbias, dout, N, OC);
}

fsc_status fsc_k_encoder_forward(fsc_device *dev, float *out, const int32_t *tok, const float *wte, const float *wpe,
                                 int B, int T, int C) {
    CALL(encoder_forward, out, tok, wte, wpe, B, T, C);
}

fsc_status fsc_k_encoder_backward(fsc_device *dev, float *dwte, float *dwpe, const float *dout, const int32_t *tok,
                                  int B, int T, int C) {
    CALL(encoder_backward, dwte, dwpe, dout, tok, B, T, C);
}

fsc_status fsc_k_layernorm_forward(fsc_device *dev, float *out, float *mean, float *rstd, const float *inp,
                                   const float *w, const float *b, size_t N, int C) {
    CALL(layernorm_forward, out, mean, rstd, inp, w, b, N, C);
}

fsc_status fsc_k_layernorm_backward(fsc_device *dev, float *dinp, float *dw, float *db, const float *dout,
                                    const float *inp, const float *w, const float *mean, const float *rstd, size_t N,
                                    int C) {
    CALL(layernorm_backward, dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}

fsc_status fsc_k_qkv_split(fsc_device *dev, float *q, float *k, float *v, const float *qkv, int B, int T, int NH,
                           int HS) {
    CALL(qkv_split, q, k, v, qkv, B, T, NH, HS);
}

fsc_status fsc_k_qkv_merge(fsc_device *dev, float *dqkv, const float *dq, const float *dk, const float *dv, int B,
                           int T, int NH, int HS) {
    CALL(qkv_merge, dqkv, dq, dk, dv, B, T, NH, HS);
}

fsc_status fsc_k_heads_merge(fsc_device *dev, float *out, const float *y, int B, int T, int NH, int HS) {
    CALL(heads_merge, out, y, B, T, NH, HS);
}

fsc_status fsc_k_heads_split(fsc_device *dev, float *dy, const float *dout, int B, int T, int NH, int HS) {
    CALL(heads_split, dy, dout, B, T, NH, HS);
}

fsc_status fsc_k_softmax_causal_forward(fsc_device *dev, float *att, const float *pre, int BH, int T, float scale) {
    CALL(softmax_causal_forward, att, pre, BH, T, scale);
}

fsc_status fsc_k_softmax_causal_backward(fsc_device *dev, float *dpre, const float *datt, const float *att, int BH,
                                         int T, float scale) {
    CALL(softmax_causal_backward, dpre, datt, att, BH, T, scale);
}

fsc_status fsc_k_xent_forward(fsc_device *dev, float *losses, const float *logits, const int32_t *targets, size_t N,
                              int V, int ld) {
    CALL(xent_forward, losses, logits, targets, N, V, ld);
}

fsc_status fsc_k_xent_backward(fsc_device *dev, float *dlogits, const float *logits, const int32_t *targets, size_t N,
                               int V, int ld, float scale) {
    CALL(xent_backward, dlogits, logits, targets, N, V, ld, scale);
}

fsc_status fsc_k_sum(fsc_device *dev, double *host_out, const float *x, size_t n) {
    CALL(sum, host_out, x, n);
}

fsc_status fsc_k_absmax(fsc_device *dev, float *host_max, int *host_nonfinite, const float *x, size_t n) {
    CALL(absmax, host_max, host_nonfinite, x, n);
}

fsc_status fsc_k_sumsq_fixed(fsc_device *dev, uint64_t acc[2], const float *x, size_t n, int shift) {
    CALL(sumsq_fixed, acc, x, n, shift);
}

fsc_status fsc_k_adamw(fsc_device *dev, float *p, const float *g, float *m, float *v, size_t n, float lr, float b1,
                       float b2, float eps, float wd, float bc1, float bc2) {
    CALL(adamw, p, g, m, v, n, lr, b1, b2, eps, wd, bc1, bc2);
}

fsc_status fsc_k_sgd(fsc_device *dev, float *p, const float *g, float *buf, size_t n, float lr, float momentum,
                     float wd, int first) {
    CALL(sgd, p, g, buf, n, lr, momentum, wd, first);
}

fsc_status fsc_k_rmsnorm_forward(fsc_device *dev, float *out, float *rstd, const float *inp, const float *w, size_t N,
                                 int C, float eps) {
    CALL(rmsnorm_forward, out, rstd, inp, w, N, C, eps);
}

fsc_status fsc_k_rmsnorm_backward(fsc_device *dev, float *dinp, float *dw, const float *dout, const float *inp,
                                  const float *w, const float *rstd, size_t N, int C) {
    CALL(rmsnorm_backward, dinp, dw, dout, inp, w, rstd, N, C);
}

fsc_status fsc_k_rope_forward(fsc_device *dev, float *out, const float *inp, int B, int T, int H, int D, int ld,
                              float theta) {
    CALL(rope_forward, out, inp, B, T, H, D, ld, theta);
}

fsc_status fsc_k_rope_backward(fsc_device *dev, float *dinp, const float *dout, int B, int T, int H, int D, int ld,
                               float theta) {
    CALL(rope_backward, dinp, dout, B, T, H, D, ld, theta);
}

fsc_status fsc_k_silu_forward(fsc_device *dev, float *out, const float *inp, size_t n) {
    CALL(silu_forward, out, inp, n);
}

fsc_status fsc_k_silu_backward(fsc_device *dev, float *dinp, const float *inp, const float *dout, size_t n) {
    CALL(silu_backward, dinp, inp, dout, n);
}

fsc_status fsc_k_swiglu_forward(fsc_device *dev, float *out, const float *gate, const float *up, size_t n) {
    CALL(swiglu_forward, out, gate, up, n);
}

fsc_status fsc_k_swiglu_backward(fsc_device *dev, float *dgate, float *dup, const float *gate, const float *up,
                                 const float *dout, size_t n) {
    CALL(swiglu_backward, dgate, dup, gate, up, dout, n);
}

fsc_status fsc_k_mul_forward(fsc_device *dev, float *out, const float *a, const float *b, size_t n) {
    CALL(mul_forward, out, a, b, n);
}

fsc_status fsc_k_mul_backward(fsc_device *dev, float *da, float *db, const float *a, const float *b, const float *dout,
                              size_t n) {
    CALL(mul_backward, da, db, a, b, dout, n);
}

fsc_status fsc_k_mse_forward(fsc_device *dev, float *losses, const float *pred, const float *target, size_t N, int C) {
    CALL(mse_forward, losses, pred, target, N, C);
}

fsc_status fsc_k_mse_backward(fsc_device *dev, float *dpred, const float *pred, const float *target, size_t N, int C,
                              float scale) {
    CALL(mse_backward, dpred, pred, target, N, C, scale);
}
