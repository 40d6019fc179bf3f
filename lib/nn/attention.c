/* Causal multi-head self-attention (the part between the QKV projection and the output projection).
 * q, k and v are read in place from the (B, T, 3C) qkv rows (head h of q at column h*HS, of k at C + h*HS,
 * of v at 2C + h*HS) and the output is written in place into the (B, T, C) rows, so no layout shuffles:
 * every product is a strided batched gemm over the B sequences of one head.
 *
 * Causality: the scores and probabilities of row i are only needed (and only nonzero) for columns j <= i,
 * so every product runs over row blocks of ROWS queries: rows [i0, i1) need columns [0, i1) only, and the
 * transposed products (dv, dk) need rows [j0, T) only. That skips close to half of the work, and keeps each
 * call below OpenBLAS's threading threshold, which runs small products faster on one thread. The skipped
 * terms are exact zeros (the softmax writes 0 above the diagonal), so every element is the same sum as the
 * full product's, in the same order.
 * Not here: the projections (linear.c). */
#include <math.h>
#include <limits.h>
#include "fsc/nn.h"
#include "core/device_impl.h"

enum { ROWS = 32 }; /* queries per row block */

/* Pieces of records and scratch start on 64-float (256-byte) boundaries, as GPU kernels like. */
static size_t r64(size_t n) { return (n + 63) / 64 * 64; }

size_t fsc_attention_saved_floats(int B, int T, int C, int NH) {
    return r64(3 * (size_t)B * T * C) + r64((size_t)B * NH * T * T);
}

size_t fsc_attention_work_floats(int B, int T, int C, int NH) {
    (void)C;
    return 2 * r64((size_t)B * NH * T * T);
}

void fsc_attention_rec_bind(fsc_attention_rec *rec, float *saved, int B, int T, int C, int NH) {
    rec->qkv = saved;                                  /* (B, T, 3C) */
    rec->att = saved + r64(3 * (size_t)B * T * C);     /* (B, NH, T, T) */
    rec->B = B, rec->T = T, rec->C = C, rec->NH = NH;
}

static fsc_status check_rec(const fsc_attention_rec *r, const char *what) {
    if (r->B <= 0 || r->T <= 0 || r->C <= 0 || r->NH <= 0 || r->C % r->NH != 0 ||
        (size_t)r->B * r->NH > (size_t)INT_MAX || (size_t)r->C * 3 > (size_t)INT_MAX)
        return fsc_error(FSC_ERR_INVALID, "attention %s: bad dimensions B=%d T=%d C=%d NH=%d (C must be a "
                         "multiple of NH)", what, r->B, r->T, r->C, r->NH);
    if (!r->qkv || !r->att)
        return fsc_error(FSC_ERR_INVALID, "attention %s: the record is not bound to memory", what);
    return FSC_OK;
}

/* The shapes every product shares: head h of sequence b. Row strides: qkv 3C, out/dout C, scores T;
 * batch strides (over b): qkv T*3C, out T*C, scores NH*T*T. */
typedef struct {
    int B, T, C, NH, HS, ld3;
    int64_t s3, s1, stt;
} dims;

static dims dims_of(const fsc_attention_rec *r) {
    dims d = { r->B, r->T, r->C, r->NH, r->C / r->NH, 3 * r->C, 0, 0, 0 };
    d.s3 = (int64_t)r->T * d.ld3;
    d.s1 = (int64_t)r->T * r->C;
    d.stt = (int64_t)r->NH * r->T * r->T;
    return d;
}

/* S[i0:i1, 0:i1] = X[i0:i1] (ldx, batch stride sx) @ Y[0:i1]^T (ldy, sy): scores of a row block */
static fsc_status scores(fsc_device *dev, const dims *d, float *S, const float *X, int ldx, int64_t sx,
                         const float *Y, int ldy, int64_t sy) {
    for (int i0 = 0; i0 < d->T; i0 += ROWS) {
        int i1 = i0 + ROWS < d->T ? i0 + ROWS : d->T;
        FSC_TRY(FSC_K(dev, gemm, 0, 1, i1 - i0, i1, d->HS, 1.0f, X + (size_t)i0 * ldx, ldx, sx, Y, ldy, sy, 0.0f,
                      S + (size_t)i0 * d->T, d->T, d->stt, d->B));
    }
    return FSC_OK;
}

/* O[i0:i1] (ldo, so) = P[i0:i1, 0:i1] @ Y[0:i1] (ldy, sy): P lower triangular */
static fsc_status lower_times(fsc_device *dev, const dims *d, float *O, int ldo, int64_t so, const float *P,
                              const float *Y, int ldy, int64_t sy) {
    for (int i0 = 0; i0 < d->T; i0 += ROWS) {
        int i1 = i0 + ROWS < d->T ? i0 + ROWS : d->T;
        FSC_TRY(FSC_K(dev, gemm, 0, 0, i1 - i0, d->HS, i1, 1.0f, P + (size_t)i0 * d->T, d->T, d->stt, Y, ldy, sy,
                      0.0f, O + (size_t)i0 * ldo, ldo, so, d->B));
    }
    return FSC_OK;
}

/* O[j0:j1] (ldo, so) = P[j0:T, j0:j1]^T @ Y[j0:T] (ldy, sy): P lower triangular */
static fsc_status lower_t_times(fsc_device *dev, const dims *d, float *O, int ldo, int64_t so, const float *P,
                                const float *Y, int ldy, int64_t sy) {
    for (int j0 = 0; j0 < d->T; j0 += ROWS) {
        int j1 = j0 + ROWS < d->T ? j0 + ROWS : d->T;
        FSC_TRY(FSC_K(dev, gemm, 1, 0, j1 - j0, d->HS, d->T - j0, 1.0f, P + (size_t)j0 * d->T + j0, d->T, d->stt,
                      Y + (size_t)j0 * ldy, ldy, sy, 0.0f, O + (size_t)j0 * ldo, ldo, so, d->B));
    }
    return FSC_OK;
}

fsc_status fsc_attention_forward(fsc_device *dev, float *out, fsc_attention_rec *rec, const float *qkv,
                                 float *work) {
    FSC_TRY(check_rec(rec, "forward"));
    dims d = dims_of(rec);
    float scale = 1.0f / sqrtf((float)d.HS);
    float *pre = work; /* (B, NH, T, T), rows filled up to their block's last column */
    if (qkv != rec->qkv)
        FSC_TRY(fsc_device_copy(dev, rec->qkv, qkv, (size_t)d.B * d.T * d.ld3 * sizeof(float)));
    for (int h = 0; h < d.NH; h++) {
        const float *q = rec->qkv + (size_t)h * d.HS, *k = q + d.C; /* (T, HS) rows of stride 3C */
        FSC_TRY(scores(dev, &d, pre + (size_t)h * d.T * d.T, q, d.ld3, d.s3, k, d.ld3, d.s3));
    }
    FSC_TRY(FSC_K(dev, softmax_causal_forward, rec->att, pre, d.B * d.NH, d.T, scale));
    for (int h = 0; h < d.NH; h++) { /* out[:, h*HS : (h+1)*HS] = att v */
        const float *v = rec->qkv + 2 * (size_t)d.C + (size_t)h * d.HS;
        FSC_TRY(lower_times(dev, &d, out + (size_t)h * d.HS, d.C, d.s1, rec->att + (size_t)h * d.T * d.T, v,
                            d.ld3, d.s3));
    }
    return FSC_OK;
}

fsc_status fsc_attention_backward(fsc_device *dev, float *dqkv, const fsc_attention_rec *rec, const float *dout,
                                  float *work) {
    FSC_TRY(check_rec(rec, "backward"));
    dims d = dims_of(rec);
    float scale = 1.0f / sqrtf((float)d.HS);
    float *datt = work;                                           /* (B, NH, T, T) */
    float *dpre = work + r64((size_t)d.B * d.NH * d.T * d.T);     /* (B, NH, T, T) */
    for (int h = 0; h < d.NH; h++) {
        size_t hs = (size_t)h * d.HS, htt = (size_t)h * d.T * d.T;
        const float *dy = dout + hs, *v = rec->qkv + 2 * (size_t)d.C + hs;
        /* datt = dy v^T; dv = att^T dy */
        FSC_TRY(scores(dev, &d, datt + htt, dy, d.C, d.s1, v, d.ld3, d.s3));
        FSC_TRY(lower_t_times(dev, &d, dqkv + 2 * (size_t)d.C + hs, d.ld3, d.s3, rec->att + htt, dy, d.C, d.s1));
    }
    FSC_TRY(FSC_K(dev, softmax_causal_backward, dpre, datt, rec->att, d.B * d.NH, d.T, scale));
    for (int h = 0; h < d.NH; h++) {
        size_t hs = (size_t)h * d.HS, htt = (size_t)h * d.T * d.T;
        const float *q = rec->qkv + hs, *k = q + d.C;
        /* dq = dpre k; dk = dpre^T q */
        FSC_TRY(lower_times(dev, &d, dqkv + hs, d.ld3, d.s3, dpre + htt, k, d.ld3, d.s3));
        FSC_TRY(lower_t_times(dev, &d, dqkv + d.C + hs, d.ld3, d.s3, dpre + htt, q, d.ld3, d.s3));
    }
    return FSC_OK;
}
