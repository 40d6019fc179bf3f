/* Causal multi-head self-attention (the part between the QKV projection and the output projection):
 * split heads, q k^T as one batched gemm over B*NH, causal softmax, att v as one batched gemm, merge heads.
 * Backward runs the same pieces in reverse. Not here: the projections (linear.c). */
#include <math.h>
#include <limits.h>
#include "fsc/nn.h"
#include "fsc/device_impl.h"

/* Pieces of records and scratch start on 64-float (256-byte) boundaries, as GPU kernels like. */
static size_t r64(size_t n) { return (n + 63) / 64 * 64; }

size_t fsc_attention_saved_floats(int B, int T, int C, int NH) {
    return 3 * r64((size_t)B * T * C) + r64((size_t)B * NH * T * T);
}

size_t fsc_attention_work_floats(int B, int T, int C, int NH) {
    return 4 * r64((size_t)B * T * C) + 2 * r64((size_t)B * NH * T * T);
}

void fsc_attention_rec_bind(fsc_attention_rec *rec, float *saved, int B, int T, int C, int NH) {
    size_t btc = r64((size_t)B * T * C);
    rec->q = saved;             /* (B, NH, T, HS) */
    rec->k = saved + btc;       /* (B, NH, T, HS) */
    rec->v = saved + 2 * btc;   /* (B, NH, T, HS) */
    rec->att = saved + 3 * btc; /* (B, NH, T, T) */
    rec->B = B, rec->T = T, rec->C = C, rec->NH = NH;
}

static fsc_status check_rec(const fsc_attention_rec *r, const char *what) {
    if (r->B <= 0 || r->T <= 0 || r->C <= 0 || r->NH <= 0 || r->C % r->NH != 0 ||
        (size_t)r->B * r->NH > (size_t)INT_MAX)
        return fsc_error(FSC_ERR_INVALID, "attention %s: bad dimensions B=%d T=%d C=%d NH=%d (C must be a "
                         "multiple of NH)", what, r->B, r->T, r->C, r->NH);
    if (!r->q || !r->att)
        return fsc_error(FSC_ERR_INVALID, "attention %s: the record is not bound to memory", what);
    return FSC_OK;
}

fsc_status fsc_attention_forward(fsc_device *dev, float *out, fsc_attention_rec *rec, const float *qkv,
                                 float *work) {
    FSC_TRY(check_rec(rec, "forward"));
    int B = rec->B, T = rec->T, C = rec->C, NH = rec->NH, HS = C / NH, BH = B * NH;
    int64_t ths = (int64_t)T * HS, tt = (int64_t)T * T;
    float scale = 1.0f / sqrtf((float)HS);
    float *pre = work;                            /* (B, NH, T, T) */
    float *y = work + r64((size_t)BH * T * T);    /* (B, NH, T, HS) */
    FSC_TRY(FSC_K(dev, qkv_split, rec->q, rec->k, rec->v, qkv, B, T, NH, HS));
    /* pre[r] (T, T) = q[r] (T, HS) @ k[r]^T */
    FSC_TRY(FSC_K(dev, gemm, 0, 1, T, T, HS, 1.0f, rec->q, HS, ths, rec->k, HS, ths, 0.0f, pre, T, tt, BH));
    FSC_TRY(FSC_K(dev, softmax_causal_forward, rec->att, pre, BH, T, scale));
    /* y[r] (T, HS) = att[r] (T, T) @ v[r] (T, HS) */
    FSC_TRY(FSC_K(dev, gemm, 0, 0, T, HS, T, 1.0f, rec->att, T, tt, rec->v, HS, ths, 0.0f, y, HS, ths, BH));
    return FSC_K(dev, heads_merge, out, y, B, T, NH, HS);
}

fsc_status fsc_attention_backward(fsc_device *dev, float *dqkv, const fsc_attention_rec *rec, const float *dout,
                                  float *work) {
    FSC_TRY(check_rec(rec, "backward"));
    int B = rec->B, T = rec->T, C = rec->C, NH = rec->NH, HS = C / NH, BH = B * NH;
    int64_t ths = (int64_t)T * HS, tt = (int64_t)T * T;
    size_t btc = r64((size_t)B * T * C), bhtt = r64((size_t)BH * T * T);
    float scale = 1.0f / sqrtf((float)HS);
    float *dy = work;                  /* (B, NH, T, HS) */
    float *dq = work + btc;            /* (B, NH, T, HS) */
    float *dk = work + 2 * btc;        /* (B, NH, T, HS) */
    float *dv = work + 3 * btc;        /* (B, NH, T, HS) */
    float *datt = work + 4 * btc;      /* (B, NH, T, T) */
    float *dpre = datt + bhtt;         /* (B, NH, T, T) */
    FSC_TRY(FSC_K(dev, heads_split, dy, dout, B, T, NH, HS));
    /* datt[r] (T, T) = dy[r] (T, HS) @ v[r]^T */
    FSC_TRY(FSC_K(dev, gemm, 0, 1, T, T, HS, 1.0f, dy, HS, ths, rec->v, HS, ths, 0.0f, datt, T, tt, BH));
    /* dv[r] (T, HS) = att[r]^T (T, T) @ dy[r] */
    FSC_TRY(FSC_K(dev, gemm, 1, 0, T, HS, T, 1.0f, rec->att, T, tt, dy, HS, ths, 0.0f, dv, HS, ths, BH));
    FSC_TRY(FSC_K(dev, softmax_causal_backward, dpre, datt, rec->att, BH, T, scale));
    /* dq[r] = dpre[r] (T, T) @ k[r] (T, HS); dk[r] = dpre[r]^T @ q[r] */
    FSC_TRY(FSC_K(dev, gemm, 0, 0, T, HS, T, 1.0f, dpre, T, tt, rec->k, HS, ths, 0.0f, dq, HS, ths, BH));
    FSC_TRY(FSC_K(dev, gemm, 1, 0, T, HS, T, 1.0f, dpre, T, tt, rec->q, HS, ths, 0.0f, dk, HS, ths, BH));
    return FSC_K(dev, qkv_merge, dqkv, dq, dk, dv, B, T, NH, HS);
}
