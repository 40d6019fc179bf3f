/* The elementwise and normalization modules: embedding, layer norm, GELU, softmax cross entropy.
 * Each is a thin forward/backward pair over the device kernels that fills or reads its record.
 * Not here: linear (linear.c), attention (attention.c), the transformer block (block.c). */
#include "fsc/nn.h"
#include "core/kernels.h"

fsc_status fsc_embedding_forward(fsc_device *dev, float *out, fsc_embedding_rec *rec, const int32_t *tok,
                                 const float *wte, const float *wpe, int B, int T, int C) {
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(out);
    FSC_CHECK_ARG(tok);
    FSC_CHECK_ARG(wte);
    FSC_CHECK_ARG(wpe);
    if (B < 0 || T < 0 || C <= 0)
        return fsc_error(FSC_ERR_INVALID, "embedding: bad dimensions B=%d T=%d C=%d", B, T, C);
    if (rec) *rec = (fsc_embedding_rec){ .tok = tok, .B = B, .T = T, .C = C };
    if (B == 0 || T == 0) return FSC_OK;
    return fsc_k_encoder_forward(dev, out, tok, wte, wpe, B, T, C);
}

fsc_status fsc_embedding_backward(fsc_device *dev, float *dwte, float *dwpe, const fsc_embedding_rec *rec,
                                  const float *dout) {
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(dwte);
    FSC_CHECK_ARG(dwpe);
    FSC_CHECK_ARG(rec);
    FSC_CHECK_ARG(dout);
    if (rec->B == 0 || rec->T == 0) return FSC_OK;
    return fsc_k_encoder_backward(dev, dwte, dwpe, dout, rec->tok, rec->B, rec->T, rec->C);
}

fsc_status fsc_layernorm_forward(fsc_device *dev, float *out, fsc_layernorm_rec *rec, float *mean, float *rstd,
                                 const float *inp, const float *w, const float *b, size_t N, int C) {
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(out);
    FSC_CHECK_ARG(mean);
    FSC_CHECK_ARG(rstd);
    FSC_CHECK_ARG(inp);
    FSC_CHECK_ARG(w);
    FSC_CHECK_ARG(b);
    if (C <= 0) return fsc_error(FSC_ERR_INVALID, "layer norm: width C=%d must be positive", C);
    if (rec) *rec = (fsc_layernorm_rec){ .inp = inp, .mean = mean, .rstd = rstd, .N = N, .C = C };
    if (N == 0) return FSC_OK;
    return fsc_k_layernorm_forward(dev, out, mean, rstd, inp, w, b, N, C);
}

fsc_status fsc_layernorm_backward(fsc_device *dev, float *dinp, float *dw, float *db,
                                  const fsc_layernorm_rec *rec, const float *dout, const float *w) {
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(rec);
    FSC_CHECK_ARG(dout);
    FSC_CHECK_ARG(w);
    if (!dw != !db)
        return fsc_error(FSC_ERR_INVALID, "layer norm backward: dw and db are given together or both NULL (%s is NULL)",
                         dw ? "db" : "dw");
    if (!dinp && !dw) return fsc_error(FSC_ERR_INVALID, "layer norm backward: dinp, dw and db are all NULL");
    if (rec->N == 0) return FSC_OK;
    return fsc_k_layernorm_backward(dev, dinp, dw, db, dout, rec->inp, w, rec->mean, rec->rstd, rec->N, rec->C);
}

fsc_status fsc_gelu_forward(fsc_device *dev, float *out, fsc_gelu_rec *rec, const float *inp, size_t n) {
    if (rec) *rec = (fsc_gelu_rec){ .inp = inp, .n = n };
    FSC_CHECK_ARG(dev);
    FSC_CHECK_BUF(out, n);
    FSC_CHECK_BUF(inp, n);
    if (n == 0) return FSC_OK;
    return fsc_k_gelu_forward(dev, out, inp, n);
}

fsc_status fsc_gelu_backward(fsc_device *dev, float *dinp, const fsc_gelu_rec *rec, const float *dout) {
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(dinp);
    FSC_CHECK_ARG(rec);
    FSC_CHECK_ARG(dout);
    if (rec->n == 0) return FSC_OK;
    return fsc_k_gelu_backward(dev, dinp, rec->inp, dout, rec->n);
}

fsc_status fsc_xent_forward(fsc_device *dev, float *losses, fsc_xent_rec *rec, const float *logits,
                            const int32_t *targets, size_t N, int V, int ld) {
    if (V <= 0 || ld < V) /* the dimensions first, then the pointers */
        return fsc_error(FSC_ERR_INVALID, "cross entropy: need 0 < V <= ld, got V=%d ld=%d", V, ld);
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(losses);
    FSC_CHECK_ARG(logits);
    FSC_CHECK_ARG(targets);
    if (rec) *rec = (fsc_xent_rec){ .logits = logits, .targets = targets, .N = N, .V = V, .ld = ld };
    if (N == 0) return FSC_OK;
    return fsc_k_xent_forward(dev, losses, logits, targets, N, V, ld);
}

fsc_status fsc_xent_backward(fsc_device *dev, float *dlogits, const fsc_xent_rec *rec, float dscale) {
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(dlogits);
    FSC_CHECK_ARG(rec);
    if (rec->N == 0) return FSC_OK;
    return fsc_k_xent_backward(dev, dlogits, rec->logits, rec->targets, rec->N, rec->V, rec->ld, dscale);
}
