/* The modules of today's language models that are one kernel each, and the squared-error loss: RMS norm,
 * rotary position embedding, SiLU, SwiGLU, the elementwise product, MSE. Each is a thin forward/backward
 * pair over the device kernels (fsc/plugin/device_ops.h) that fills or reads its record.
 * Not here: the SwiGLU MLP with its projections (mlp.c), grouped-query attention (self_attention.c). */
#include "fsc/nn.h"
#include "core/kernels.h"

fsc_status fsc_rmsnorm_forward(fsc_device *dev, float *out, fsc_rmsnorm_rec *rec, float *rstd, const float *inp,
                               const float *w, size_t N, int C, float eps) {
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(out);
    FSC_CHECK_ARG(rstd);
    FSC_CHECK_ARG(inp);
    FSC_CHECK_ARG(w);
    if (C <= 0) return fsc_error(FSC_ERR_INVALID, "RMS norm: width C=%d must be positive", C);
    if (!(eps >= 0.0f)) return fsc_error(FSC_ERR_INVALID, "RMS norm: eps %g must not be negative", (double)eps);
    if (rec) *rec = (fsc_rmsnorm_rec){ .inp = inp, .rstd = rstd, .N = N, .C = C };
    if (N == 0) return FSC_OK;
    return fsc_k_rmsnorm_forward(dev, out, rstd, inp, w, N, C, eps);
}

fsc_status fsc_rmsnorm_backward(fsc_device *dev, float *dinp, float *dw, const fsc_rmsnorm_rec *rec,
                                const float *dout, const float *w) {
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(rec);
    FSC_CHECK_ARG(dout);
    FSC_CHECK_ARG(w);
    if (!dinp && !dw) return fsc_error(FSC_ERR_INVALID, "RMS norm backward: dinp and dw are both NULL");
    if (rec->N == 0) return FSC_OK;
    return fsc_k_rmsnorm_backward(dev, dinp, dw, dout, rec->inp, w, rec->rstd, rec->N, rec->C);
}

fsc_status fsc_rope_forward(fsc_device *dev, float *out, const float *inp, int B, int T, int H, int D, int ld,
                            float theta) {
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(out);
    FSC_CHECK_ARG(inp);
    return fsc_k_rope_forward(dev, out, inp, B, T, H, D, ld, theta);
}

fsc_status fsc_rope_backward(fsc_device *dev, float *dinp, const float *dout, int B, int T, int H, int D, int ld,
                             float theta) {
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(dinp);
    FSC_CHECK_ARG(dout);
    return fsc_k_rope_backward(dev, dinp, dout, B, T, H, D, ld, theta);
}

fsc_status fsc_silu_forward(fsc_device *dev, float *out, fsc_ew_rec *rec, const float *inp, size_t n) {
    if (rec) *rec = (fsc_ew_rec){ .a = inp, .b = NULL, .n = n };
    FSC_CHECK_ARG(dev);
    FSC_CHECK_BUF(out, n);
    FSC_CHECK_BUF(inp, n);
    return n ? fsc_k_silu_forward(dev, out, inp, n) : FSC_OK;
}

fsc_status fsc_silu_backward(fsc_device *dev, float *dinp, const fsc_ew_rec *rec, const float *dout) {
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(dinp);
    FSC_CHECK_ARG(rec);
    FSC_CHECK_ARG(dout);
    return rec->n ? fsc_k_silu_backward(dev, dinp, rec->a, dout, rec->n) : FSC_OK;
}

fsc_status fsc_swiglu_forward(fsc_device *dev, float *out, fsc_ew_rec *rec, const float *gate, const float *up,
                              size_t n) {
    if (rec) *rec = (fsc_ew_rec){ .a = gate, .b = up, .n = n };
    FSC_CHECK_ARG(dev);
    FSC_CHECK_BUF(out, n);
    FSC_CHECK_BUF(gate, n);
    FSC_CHECK_BUF(up, n);
    return n ? fsc_k_swiglu_forward(dev, out, gate, up, n) : FSC_OK;
}

fsc_status fsc_swiglu_backward(fsc_device *dev, float *dgate, float *dup, const fsc_ew_rec *rec, const float *dout) {
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(dgate);
    FSC_CHECK_ARG(dup);
    FSC_CHECK_ARG(rec);
    FSC_CHECK_ARG(dout);
    return rec->n ? fsc_k_swiglu_backward(dev, dgate, dup, rec->a, rec->b, dout, rec->n) : FSC_OK;
}

fsc_status fsc_mul_forward(fsc_device *dev, float *out, fsc_ew_rec *rec, const float *a, const float *b, size_t n) {
    if (rec) *rec = (fsc_ew_rec){ .a = a, .b = b, .n = n };
    FSC_CHECK_ARG(dev);
    FSC_CHECK_BUF(out, n);
    FSC_CHECK_BUF(a, n);
    FSC_CHECK_BUF(b, n);
    return n ? fsc_k_mul_forward(dev, out, a, b, n) : FSC_OK;
}

fsc_status fsc_mul_backward(fsc_device *dev, float *da, float *db, const fsc_ew_rec *rec, const float *dout) {
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(rec);
    FSC_CHECK_ARG(dout);
    if (rec->n == 0 || (!da && !db)) return FSC_OK;
    return fsc_k_mul_backward(dev, da, db, rec->a, rec->b, dout, rec->n);
}

fsc_status fsc_mse_forward(fsc_device *dev, float *losses, fsc_mse_rec *rec, const float *pred,
                           const float *target, size_t N, int C) {
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(losses);
    FSC_CHECK_ARG(pred);
    FSC_CHECK_ARG(target);
    if (C <= 0) return fsc_error(FSC_ERR_INVALID, "squared error: width C=%d must be positive", C);
    if (rec) *rec = (fsc_mse_rec){ .pred = pred, .target = target, .N = N, .C = C };
    return N ? fsc_k_mse_forward(dev, losses, pred, target, N, C) : FSC_OK;
}

fsc_status fsc_mse_backward(fsc_device *dev, float *dpred, const fsc_mse_rec *rec, float dscale) {
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(dpred);
    FSC_CHECK_ARG(rec);
    return rec->N ? fsc_k_mse_backward(dev, dpred, rec->pred, rec->target, rec->N, rec->C, dscale) : FSC_OK;
}
