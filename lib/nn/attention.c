/* Causal multi-head self-attention (the part between the QKV projection and the output projection).
 * q, k and v are read in place from the (B, T, 3C) qkv rows (head h of q at column h*HS, of k at C + h*HS,
 * of v at 2C + h*HS) and the output is written in place into the (B, T, C) rows, so no layout shuffles:
 * every product is a strided batched gemm over the B sequences of one head.
 *
 * Causality: the scores and probabilities of row i are only needed (and only nonzero) for columns j <= i,
 * so on the CPU every product runs over row blocks of ROWS queries: rows [i0, i1) need columns [0, i1) only,
 * and the transposed products (dv, dk) need rows [j0, T) only. That skips close to half of the work, and keeps
 * each call below OpenBLAS's threading threshold, which runs small products faster on one thread. The skipped
 * terms are exact zeros (the softmax writes 0 above the diagonal), so every element is the same sum as the
 * full product's, in the same order. Other devices (GPUs) run each head's product whole, one call of T rows:
 * blocks of 32 rows were thousands of launches of tiny products a step there (a GPT-2 124M step on an H200
 * spent most of its time in them). The whole products also compute the scores above the diagonal, which the
 * softmax ignores (it writes exact zeros there), and multiply the probabilities' zeros above it.
 * On the counting device (the planner's dry run, fsc_count_bulk) the heads' products, alike but for their
 * pointers, are counted at once, a sweep of row blocks by one call (fsc_count_gemm_rows): the same totals as
 * block by block and head by head.
 * The core runs on views (rows of any stride) and maps query heads to key/value heads, so grouped-query
 * attention (lib/nn/self_attention.c) shares it; the packed (B, T, 3C) layout is the GPT's view of it.
 * Not here: the projections (linear.c, self_attention.c). */
#include <math.h>
#include <limits.h>
#include "fsc/nn.h"
#include "core/kernels.h"

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
    if (!rec) return;
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

/* The shapes every product shares: head h of sequence b; scores have row stride T and batch stride
 * NH*T*T. A view's batch stride (over b) is T times its row stride. */
typedef struct {
    int B, T, HS;
    int64_t stt;
    int rows; /* queries per row block: ROWS on the CPU, T (the whole product) elsewhere */
} dims;

static int rows_for(const fsc_device *dev, int T) { return fsc_device_whole_products(dev) ? T : ROWS; }

/* S[i0:i1, 0:i1] = X[i0:i1] (ldx, batch stride sx) @ Y[0:i1]^T (ldy, sy): scores of a row block */
static fsc_status scores(fsc_device *dev, const dims *d, float *S, const float *X, int ldx, int64_t sx,
                         const float *Y, int ldy, int64_t sy) {
    for (int i0 = 0; i0 < d->T; i0 += d->rows) {
        int i1 = i0 + d->rows < d->T ? i0 + d->rows : d->T;
        FSC_TRY(fsc_k_gemm(dev, 0, 1, i1 - i0, i1, d->HS, 1.0f, X + (size_t)i0 * ldx, ldx, sx, Y, ldy, sy, 0.0f,
                           S + (size_t)i0 * d->T, d->T, d->stt, d->B));
    }
    return FSC_OK;
}

/* O[i0:i1] (ldo, so) = P[i0:i1, 0:i1] @ Y[0:i1] (ldy, sy): P lower triangular */
static fsc_status lower_times(fsc_device *dev, const dims *d, float *O, int ldo, int64_t so, const float *P,
                              const float *Y, int ldy, int64_t sy) {
    for (int i0 = 0; i0 < d->T; i0 += d->rows) {
        int i1 = i0 + d->rows < d->T ? i0 + d->rows : d->T;
        FSC_TRY(fsc_k_gemm(dev, 0, 0, i1 - i0, d->HS, i1, 1.0f, P + (size_t)i0 * d->T, d->T, d->stt, Y, ldy, sy,
                           0.0f, O + (size_t)i0 * ldo, ldo, so, d->B));
    }
    return FSC_OK;
}

/* O[j0:j1] (ldo, so) = P[j0:T, j0:j1]^T @ Y[j0:T] (ldy, sy) + beta O: P lower triangular */
static fsc_status lower_t_times(fsc_device *dev, const dims *d, float *O, int ldo, int64_t so, const float *P,
                                const float *Y, int ldy, int64_t sy, float beta) {
    for (int j0 = 0; j0 < d->T; j0 += d->rows) {
        int j1 = j0 + d->rows < d->T ? j0 + d->rows : d->T;
        FSC_TRY(fsc_k_gemm(dev, 1, 0, j1 - j0, d->HS, d->T - j0, 1.0f, P + (size_t)j0 * d->T + j0, d->T, d->stt,
                           Y + (size_t)j0 * ldy, ldy, sy, beta, O + (size_t)j0 * ldo, ldo, so, d->B));
    }
    return FSC_OK;
}

static fsc_status check_core(const fsc_attn_core_dims *c, int ldo, int ldq, int ldk, int ldv, const char *what) {
    if (c->B <= 0 || c->T <= 0 || c->NH <= 0 || c->KVH <= 0 || c->HS <= 0 || c->NH % c->KVH != 0 ||
        (size_t)c->B * c->NH > (size_t)INT_MAX)
        return fsc_error(FSC_ERR_INVALID, "attention %s: bad dimensions B=%d T=%d NH=%d KVH=%d HS=%d (KVH must "
                         "divide NH)", what, c->B, c->T, c->NH, c->KVH, c->HS);
    if ((int64_t)c->NH * c->HS > ldq || (int64_t)c->NH * c->HS > ldo || (int64_t)c->KVH * c->HS > ldk ||
        (int64_t)c->KVH * c->HS > ldv)
        return fsc_error(FSC_ERR_INVALID, "attention %s: row strides q %d, k %d, v %d, out %d are narrower than "
                         "the heads (%d and %d kv heads of %d)", what, ldq, ldk, ldv, ldo, c->NH, c->KVH, c->HS);
    return FSC_OK;
}

fsc_status fsc_attn_core_forward(fsc_device *dev, const fsc_attn_core_dims *c, float *out, int ldo, const float *q,
                                 int ldq, const float *k, int ldk, const float *v, int ldv, float *att, float *work) {
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG_AS(c, "d");
    FSC_CHECK_ARG(out);
    FSC_CHECK_ARG(q);
    FSC_CHECK_ARG(k);
    FSC_CHECK_ARG(v);
    FSC_CHECK_ARG(att);
    FSC_CHECK_ARG(work);
    FSC_TRY(check_core(c, ldo, ldq, ldk, ldv, "forward"));
    dims d = { c->B, c->T, c->HS, (int64_t)c->NH * c->T * c->T, rows_for(dev, c->T) };
    int64_t T = c->T, rep = c->NH / c->KVH;
    float scale = 1.0f / sqrtf((float)c->HS);
    float *pre = work; /* (B, NH, T, T), rows filled up to their block's last column */
    if (fsc_count_bulk(dev)) { /* the counting device: every head's products of the sweep at once */
        fsc_count_gemm_rows(dev, FSC_COUNT_SCORES, c->T, d.rows, c->HS, 0.0f, c->B, (uint64_t)c->NH);
        FSC_TRY(fsc_k_softmax_causal_forward(dev, att, pre, c->B * c->NH, c->T, scale));
        fsc_count_gemm_rows(dev, FSC_COUNT_LOWER, c->T, d.rows, c->HS, 0.0f, c->B, (uint64_t)c->NH);
        return FSC_OK;
    }
    for (int h = 0; h < c->NH; h++) {
        size_t hq = (size_t)h * c->HS, hk = (size_t)(h / rep) * c->HS;
        FSC_TRY(scores(dev, &d, pre + (size_t)h * T * T, q + hq, ldq, T * ldq, k + hk, ldk, T * ldk));
    }
    FSC_TRY(fsc_k_softmax_causal_forward(dev, att, pre, c->B * c->NH, c->T, scale));
    for (int h = 0; h < c->NH; h++) { /* out[:, h*HS : (h+1)*HS] = att v */
        size_t hq = (size_t)h * c->HS, hk = (size_t)(h / rep) * c->HS;
        FSC_TRY(lower_times(dev, &d, out + hq, ldo, T * ldo, att + (size_t)h * T * T, v + hk, ldv, T * ldv));
    }
    return FSC_OK;
}

fsc_status fsc_attn_core_backward(fsc_device *dev, const fsc_attn_core_dims *c, float *dq, float *dk, float *dv,
                                  const float *dout, int ldo, const float *q, int ldq, const float *k, int ldk,
                                  const float *v, int ldv, const float *att, float *work) {
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG_AS(c, "d");
    FSC_CHECK_ARG(dq);
    FSC_CHECK_ARG(dk);
    FSC_CHECK_ARG(dv);
    FSC_CHECK_ARG(dout);
    FSC_CHECK_ARG(q);
    FSC_CHECK_ARG(k);
    FSC_CHECK_ARG(v);
    FSC_CHECK_ARG(att);
    FSC_CHECK_ARG(work);
    FSC_TRY(check_core(c, ldo, ldq, ldk, ldv, "backward"));
    dims d = { c->B, c->T, c->HS, (int64_t)c->NH * c->T * c->T, rows_for(dev, c->T) };
    int64_t T = c->T, rep = c->NH / c->KVH;
    float scale = 1.0f / sqrtf((float)c->HS);
    float *datt = work;                                       /* (B, NH, T, T) */
    float *dpre = work + r64((size_t)c->B * c->NH * T * T);   /* (B, NH, T, T) */
    if (fsc_count_bulk(dev)) { /* the counting device: every head's products at once, by their beta */
        const uint64_t NH = (uint64_t)c->NH, KVH = (uint64_t)c->KVH; /* KVH heads of beta 0 (h % rep == 0) */
        fsc_count_gemm_rows(dev, FSC_COUNT_SCORES, c->T, d.rows, c->HS, 0.0f, c->B, NH);
        fsc_count_gemm_rows(dev, FSC_COUNT_LOWER_T, c->T, d.rows, c->HS, 0.0f, c->B, KVH);
        fsc_count_gemm_rows(dev, FSC_COUNT_LOWER_T, c->T, d.rows, c->HS, 1.0f, c->B, NH - KVH);
        FSC_TRY(fsc_k_softmax_causal_backward(dev, dpre, datt, att, c->B * c->NH, c->T, scale));
        fsc_count_gemm_rows(dev, FSC_COUNT_LOWER, c->T, d.rows, c->HS, 0.0f, c->B, NH);
        fsc_count_gemm_rows(dev, FSC_COUNT_LOWER_T, c->T, d.rows, c->HS, 0.0f, c->B, KVH);
        fsc_count_gemm_rows(dev, FSC_COUNT_LOWER_T, c->T, d.rows, c->HS, 1.0f, c->B, NH - KVH);
        return FSC_OK;
    }
    for (int h = 0; h < c->NH; h++) {
        size_t hq = (size_t)h * c->HS, hk = (size_t)(h / rep) * c->HS, htt = (size_t)h * T * T;
        float beta = h % rep ? 1.0f : 0.0f; /* the group's first query head overwrites, the others add */
        /* datt = dy v^T; dv += att^T dy */
        FSC_TRY(scores(dev, &d, datt + htt, dout + hq, ldo, T * ldo, v + hk, ldv, T * ldv));
        FSC_TRY(lower_t_times(dev, &d, dv + hk, ldv, T * ldv, att + htt, dout + hq, ldo, T * ldo, beta));
    }
    FSC_TRY(fsc_k_softmax_causal_backward(dev, dpre, datt, att, c->B * c->NH, c->T, scale));
    for (int h = 0; h < c->NH; h++) {
        size_t hq = (size_t)h * c->HS, hk = (size_t)(h / rep) * c->HS, htt = (size_t)h * T * T;
        float beta = h % rep ? 1.0f : 0.0f;
        /* dq = dpre k; dk += dpre^T q */
        FSC_TRY(lower_times(dev, &d, dq + hq, ldq, T * ldq, dpre + htt, k + hk, ldk, T * ldk));
        FSC_TRY(lower_t_times(dev, &d, dk + hk, ldk, T * ldk, dpre + htt, q + hq, ldq, T * ldq, beta));
    }
    return FSC_OK;
}

static fsc_attn_core_dims core_of(const fsc_attention_rec *r) {
    return (fsc_attn_core_dims){ r->B, r->T, r->NH, r->NH, r->C / r->NH };
}

fsc_status fsc_attention_forward(fsc_device *dev, float *out, fsc_attention_rec *rec, const float *qkv,
                                 float *work) {
    FSC_CHECK_ARG(rec);
    FSC_TRY(check_rec(rec, "forward")); /* the record's dimensions first (bad ones are the likelier mistake) */
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(out);
    FSC_CHECK_ARG(qkv);
    FSC_CHECK_ARG(work);
    int C = rec->C, ld3 = 3 * C;
    if (qkv != rec->qkv)
        FSC_TRY(fsc_device_copy(dev, rec->qkv, qkv, (size_t)rec->B * rec->T * ld3 * sizeof(float)));
    fsc_attn_core_dims c = core_of(rec);
    const float *q = rec->qkv;
    return fsc_attn_core_forward(dev, &c, out, C, q, ld3, q + C, ld3, q + 2 * (size_t)C, ld3, rec->att, work);
}

fsc_status fsc_attention_backward(fsc_device *dev, float *dqkv, const fsc_attention_rec *rec, const float *dout,
                                  float *work) {
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(dqkv);
    FSC_CHECK_ARG(rec);
    FSC_CHECK_ARG(dout);
    FSC_CHECK_ARG(work);
    FSC_TRY(check_rec(rec, "backward"));
    int C = rec->C, ld3 = 3 * C;
    fsc_attn_core_dims c = core_of(rec);
    const float *q = rec->qkv;
    return fsc_attn_core_backward(dev, &c, dqkv, dqkv + C, dqkv + 2 * (size_t)C, dout, C, q, ld3, q + C, ld3,
                                  q + 2 * (size_t)C, ld3, rec->att, work);
}
