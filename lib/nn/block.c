/* The GPT-2 transformer block (pre-LayerNorm) composed from the modules, forward and backward.
 * The record keeps what backward needs; everything else lives in a scratch the caller provides and
 * may share between blocks. The residual stream's gradient is updated in place, as in llm.c.
 * Not here: the embedding and the head (lib/model/), parameter storage. */
#include "fsc/nn.h"

static size_t r64(size_t n) { return (n + 63) / 64 * 64; }

size_t fsc_block_attn_saved_floats(int B, int T, int C, int NH) {
    /* ln1, atty, res2, ln2; 4 statistics; attention */
    return 4 * r64((size_t)B * T * C) + 4 * r64((size_t)B * T) + fsc_attention_saved_floats(B, T, C, NH);
}

size_t fsc_block_saved_floats(int B, int T, int C, int NH) {
    return fsc_block_attn_saved_floats(B, T, C, NH) + 2 * r64(4 * (size_t)B * T * C); /* fch, fch_gelu */
}

/* W: the attention scratch, and dfch (B, T, 4C) in backward */
static size_t w_floats(int B, int T, int C, int NH) {
    size_t a = fsc_attention_work_floats(B, T, C, NH), f = r64(4 * (size_t)B * T * C);
    return a > f ? a : f;
}

size_t fsc_block_work_floats(int B, int T, int C, int NH) {
    /* A: dfch_gelu / dqkv; W: attention scratch / dfch; S: projection output / dln2, datty, dln1 */
    return r64(4 * (size_t)B * T * C) + w_floats(B, T, C, NH) + r64((size_t)B * T * C);
}

void fsc_block_attn_rec_bind(fsc_block_rec *rec, float *saved, int B, int T, int C, int NH) {
    if (!rec) return;
    size_t btc = r64((size_t)B * T * C), bt = r64((size_t)B * T);
    float *p = saved;
    rec->inp = NULL;
    rec->ln1 = p;      p += btc;  /* (B, T, C) */
    rec->atty = p;     p += btc;  /* (B, T, C) */
    rec->res2 = p;     p += btc;  /* (B, T, C) */
    rec->ln2 = p;      p += btc;  /* (B, T, C) */
    rec->ln1_mean = p; p += bt;   /* (B, T) */
    rec->ln1_rstd = p; p += bt;
    rec->ln2_mean = p; p += bt;
    rec->ln2_rstd = p; p += bt;
    fsc_attention_rec_bind(&rec->attn, p, B, T, C, NH); /* qkv, att */
    rec->fch = rec->fch_gelu = NULL;
    rec->B = B, rec->T = T, rec->C = C, rec->NH = NH;
}

void fsc_block_rec_bind(fsc_block_rec *rec, float *saved, int B, int T, int C, int NH) {
    if (!rec) return;
    fsc_block_attn_rec_bind(rec, saved, B, T, C, NH);
    rec->fch = saved + fsc_block_attn_saved_floats(B, T, C, NH); /* (B, T, 4C) */
    rec->fch_gelu = rec->fch + r64(4 * (size_t)B * T * C);        /* (B, T, 4C) */
}

/* Scratch pieces, shared by forward and backward (see fsc_block_work_floats). */
typedef struct {
    float *a; /* (B, T, 4C) dfch_gelu, then dqkv (3C) in backward */
    float *w; /* attention scratch; dfch (B, T, 4C) in backward */
    float *s; /* (B, T, C) projection output; dln2, datty, dln1 in backward */
} block_work;

static block_work split_work(float *work, const fsc_block_rec *r) {
    block_work bw;
    bw.a = work;
    bw.w = work + r64(4 * (size_t)r->B * r->T * r->C);
    bw.s = bw.w + w_floats(r->B, r->T, r->C, r->NH);
    return bw;
}

fsc_status fsc_block_attn_forward(fsc_device *dev, fsc_block_rec *rec, const float *inp, const float *const *p,
                                  float *proj, float *attn_work) {
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(rec);
    FSC_CHECK_ARG(inp);
    FSC_CHECK_ARG(p);
    FSC_CHECK_ARG(proj);
    FSC_CHECK_ARG(attn_work);
    int C = rec->C;
    size_t N = (size_t)rec->B * rec->T;
    rec->inp = inp;
    FSC_TRY(fsc_layernorm_forward(dev, rec->ln1, NULL, rec->ln1_mean, rec->ln1_rstd, inp, p[FSC_B_LN1_W],
                                  p[FSC_B_LN1_B], N, C));
    /* the projection goes straight into the attention record, which keeps it for backward */
    FSC_TRY(fsc_linear_forward(dev, rec->attn.qkv, NULL, rec->ln1, p[FSC_B_ATTN_W], p[FSC_B_ATTN_B], N, C, 3 * C,
                               0));
    FSC_TRY(fsc_attention_forward(dev, rec->atty, &rec->attn, rec->attn.qkv, attn_work));
    FSC_TRY(fsc_linear_forward(dev, proj, NULL, rec->atty, p[FSC_B_APROJ_W], p[FSC_B_APROJ_B], N, C, C, 0));
    FSC_TRY(fsc_residual_forward(dev, rec->res2, inp, proj, N * C));
    return fsc_layernorm_forward(dev, rec->ln2, NULL, rec->ln2_mean, rec->ln2_rstd, rec->res2, p[FSC_B_LN2_W],
                                 p[FSC_B_LN2_B], N, C);
}

fsc_status fsc_block_attn_backward(fsc_device *dev, float *dres, float *const *g, const fsc_block_rec *rec,
                                   const float *const *p, float *dln2, float *dqkv, float *attn_work) {
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(dres);
    FSC_CHECK_ARG(g);
    FSC_CHECK_ARG(rec);
    FSC_CHECK_ARG(p);
    FSC_CHECK_ARG(dln2);
    FSC_CHECK_ARG(dqkv);
    FSC_CHECK_ARG(attn_work);
    int C = rec->C;
    size_t N = (size_t)rec->B * rec->T;
    fsc_layernorm_rec ln2 = { rec->res2, rec->ln2_mean, rec->ln2_rstd, N, C };
    FSC_TRY(fsc_layernorm_backward(dev, dres, g[FSC_B_LN2_W], g[FSC_B_LN2_B], &ln2, dln2, p[FSC_B_LN2_W]));
    /* dres is now the gradient w.r.t. res2 = x + aproj(attention(...)); dln2's memory takes datty, then dln1 */
    float *s = dln2;
    fsc_linear_rec aproj = { rec->atty, N, C, C, 0 };
    FSC_TRY(fsc_linear_backward(dev, s, g[FSC_B_APROJ_W], g[FSC_B_APROJ_B], &aproj, dres, p[FSC_B_APROJ_W],
                                0.0f, 1.0f)); /* datty */
    FSC_TRY(fsc_attention_backward(dev, dqkv, &rec->attn, s, attn_work));
    fsc_linear_rec attn = { rec->ln1, N, C, 3 * C, 0 };
    FSC_TRY(fsc_linear_backward(dev, s, g[FSC_B_ATTN_W], g[FSC_B_ATTN_B], &attn, dqkv, p[FSC_B_ATTN_W],
                                0.0f, 1.0f)); /* dln1 */
    fsc_layernorm_rec ln1 = { rec->inp, rec->ln1_mean, rec->ln1_rstd, N, C };
    return fsc_layernorm_backward(dev, dres, g[FSC_B_LN1_W], g[FSC_B_LN1_B], &ln1, s, p[FSC_B_LN1_W]);
}

fsc_status fsc_block_forward(fsc_device *dev, float *out, fsc_block_rec *rec, const float *inp,
                             const float *const *p, float *work) {
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(rec);
    FSC_CHECK_ARG(inp);
    FSC_CHECK_ARG(p);
    FSC_CHECK_ARG(work);
    int C = rec->C;
    size_t N = (size_t)rec->B * rec->T;
    if (N == 0 || C <= 0 || !rec->ln1)
        return fsc_error(FSC_ERR_INVALID, "block forward: record not bound or empty (B=%d T=%d C=%d)",
                         rec->B, rec->T, C);
    block_work bw = split_work(work, rec);
    FSC_TRY(fsc_block_attn_forward(dev, rec, inp, p, bw.s, bw.w));
    FSC_TRY(fsc_linear_forward(dev, rec->fch, NULL, rec->ln2, p[FSC_B_FC_W], p[FSC_B_FC_B], N, C, 4 * C, 0));
    FSC_TRY(fsc_gelu_forward(dev, rec->fch_gelu, NULL, rec->fch, N * 4 * C));
    if (!out) return FSC_OK; /* recomputation: everything backward needs is saved */
    FSC_TRY(fsc_linear_forward(dev, bw.s, NULL, rec->fch_gelu, p[FSC_B_MPROJ_W], p[FSC_B_MPROJ_B], N, 4 * C, C, 0));
    return fsc_residual_forward(dev, out, rec->res2, bw.s, N * C);
}

fsc_status fsc_block_backward(fsc_device *dev, float *dres, float *const *g, const fsc_block_rec *rec,
                              const float *const *p, float *work) {
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(dres);
    FSC_CHECK_ARG(g);
    FSC_CHECK_ARG(rec);
    FSC_CHECK_ARG(p);
    FSC_CHECK_ARG(work);
    int C = rec->C;
    size_t N = (size_t)rec->B * rec->T;
    if (N == 0 || C <= 0 || !rec->ln1 || !rec->inp)
        return fsc_error(FSC_ERR_STATE, "block backward: the record holds no forward (B=%d T=%d C=%d)",
                         rec->B, rec->T, C);
    block_work bw = split_work(work, rec);
    /* out = res2 + mproj(fch_gelu): the residual passes dres through; the MLP branch gets dres too */
    fsc_linear_rec mproj = { rec->fch_gelu, N, 4 * C, C, 0 };
    FSC_TRY(fsc_linear_backward(dev, bw.a, g[FSC_B_MPROJ_W], g[FSC_B_MPROJ_B], &mproj, dres, p[FSC_B_MPROJ_W],
                                0.0f, 1.0f));
    fsc_gelu_rec gelu = { rec->fch, N * 4 * C };
    FSC_TRY(fsc_gelu_backward(dev, bw.w, &gelu, bw.a)); /* dfch */
    fsc_linear_rec fc = { rec->ln2, N, C, 4 * C, 0 };
    FSC_TRY(fsc_linear_backward(dev, bw.s, g[FSC_B_FC_W], g[FSC_B_FC_B], &fc, bw.w, p[FSC_B_FC_W], 0.0f, 1.0f));
    return fsc_block_attn_backward(dev, dres, g, rec, p, bw.s, bw.a, bw.w); /* bw.s: dln2 */
}
