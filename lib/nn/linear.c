/* The linear module (gemm + bias) and the residual add, forward and backward through the device kernels.
 * Not here: parameter storage (the caller passes weights at the moment of use). */
#include <limits.h>
#include "fsc/nn.h"
#include "core/kernels.h"

static fsc_status check_dims(size_t N, int C, int OC, const char *what) {
    if (C <= 0 || OC <= 0 || N > (size_t)INT_MAX)
        return fsc_error(FSC_ERR_INVALID, "%s: bad dimensions N=%zu C=%d OC=%d (need C, OC > 0 and N <= %d)",
                         what, N, C, OC, INT_MAX);
    return FSC_OK;
}

/* out[n, :] = b for every row: one row, then doubling copies (log2 N device copies, each of rows already
 * written to the rows after them). */
static fsc_status fill_rows(fsc_device *dev, float *out, const float *b, size_t N, int OC) {
    size_t row = (size_t)OC * sizeof(float);
    FSC_TRY(fsc_device_copy(dev, out, b, row));
    for (size_t done = 1; done < N;) {
        size_t k = done < N - done ? done : N - done;
        FSC_TRY(fsc_device_copy(dev, out + done * (size_t)OC, out, k * row));
        done += k;
    }
    return FSC_OK;
}

fsc_status fsc_linear_forward(fsc_device *dev, float *out, fsc_linear_rec *rec, const float *inp,
                              const float *w, const float *b, size_t N, int C, int OC, int w_out_in) {
    FSC_TRY(check_dims(N, C, OC, "linear forward")); /* the dimensions first, then the pointers */
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(out);
    FSC_CHECK_ARG(inp);
    FSC_CHECK_ARG(w);
    if (rec) *rec = (fsc_linear_rec){ .inp = inp, .N = N, .C = C, .OC = OC, .w_out_in = w_out_in };
    if (N == 0) return FSC_OK;
    /* out (N, OC) = inp (N, C) @ w (+ b), w (C, OC) or (OC, C) transposed. With a bias, every row of out
     * starts as b and the gemm adds the product (beta 1): one pass over out instead of a zeroing pass, the
     * product and a bias pass. */
    if (b) FSC_TRY(fill_rows(dev, out, b, N, OC));
    return fsc_k_gemm(dev, 0, w_out_in ? 1 : 0, (int)N, OC, C, 1.0f, inp, C, 0, w, w_out_in ? C : OC, 0,
                      b ? 1.0f : 0.0f, out, OC, 0, 1);
}

fsc_status fsc_linear_backward(fsc_device *dev, float *dinp, float *dw, float *db, const fsc_linear_rec *rec,
                               const float *dout, const float *w, float dinp_beta, float dw_beta) {
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(rec);
    FSC_CHECK_ARG(dout);
    FSC_CHECK_ARG(w);
    size_t N = rec->N;
    int C = rec->C, OC = rec->OC;
    FSC_TRY(check_dims(N, C, OC, "linear backward"));
    if (N == 0) return FSC_OK;
    if (dinp) {
        /* dinp (N, C) = dout (N, OC) @ w^T: w (C, OC) -> transb; w (OC, C) -> plain */
        FSC_TRY(fsc_k_gemm(dev, 0, rec->w_out_in ? 0 : 1, (int)N, C, OC, 1.0f, dout, OC, 0, w,
                           rec->w_out_in ? C : OC, 0, dinp_beta, dinp, C, 0, 1));
    }
    if (dw) {
        if (!rec->w_out_in) /* dw (C, OC) = inp^T (C, N) @ dout (N, OC) */
            FSC_TRY(fsc_k_gemm(dev, 1, 0, C, OC, (int)N, 1.0f, rec->inp, C, 0, dout, OC, 0, dw_beta, dw, OC, 0, 1));
        else                /* dw (OC, C) = dout^T (OC, N) @ inp (N, C) */
            FSC_TRY(fsc_k_gemm(dev, 1, 0, OC, C, (int)N, 1.0f, dout, OC, 0, rec->inp, C, 0, dw_beta, dw, C, 0, 1));
    }
    if (db) FSC_TRY(fsc_k_bias_grad(dev, db, dout, N, OC));
    return FSC_OK;
}

fsc_status fsc_residual_forward(fsc_device *dev, float *out, const float *a, const float *b, size_t n) {
    FSC_CHECK_ARG(dev);
    FSC_CHECK_BUF(out, n);
    FSC_CHECK_BUF(a, n);
    FSC_CHECK_BUF(b, n);
    return fsc_k_add(dev, out, a, b, n);
}

fsc_status fsc_residual_backward(fsc_device *dev, float *da, float *db, const float *dout, size_t n) {
    FSC_CHECK_ARG(dev);
    FSC_CHECK_BUF(dout, n);
    if (da) FSC_TRY(fsc_k_axpy(dev, da, 1.0f, dout, n));
    if (db) FSC_TRY(fsc_k_axpy(dev, db, 1.0f, dout, n));
    return FSC_OK;
}
