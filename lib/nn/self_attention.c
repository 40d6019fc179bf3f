/* Causal self-attention with its projections, as Llama has it: separate q/k/v/o linears (weights [out, in],
 * biases optional), rotary embeddings on q and k, grouped-query heads (KVH key/value heads shared by NH / KVH
 * query heads each, transformers' repeat_kv order: query head h reads kv head h / (NH / KVH)).
 * q, k, v live in their own (B, T, heads * HS) buffers in the record; the core product (attention.c) reads
 * them in place. Backward overwrites the input gradient; parameter gradients accumulate.
 * Not here: the packed-qkv attention of the GPT (attention.c), the kernels (fsc/plugin/device_ops.h). */
#include <limits.h>
#include "fsc/nn.h"

static size_t r64(size_t n) { return (n + 63) / 64 * 64; }

static size_t nbt(const fsc_self_attn_config *c) { return (size_t)c->B * c->T; }
static size_t qsz(const fsc_self_attn_config *c) { return nbt(c) * c->NH * c->HS; }
static size_t kvsz(const fsc_self_attn_config *c) { return nbt(c) * c->KVH * c->HS; }
static size_t ttsz(const fsc_self_attn_config *c) { return (size_t)c->B * c->NH * c->T * c->T; }

size_t fsc_self_attn_saved_floats(const fsc_self_attn_config *c) {
    if (!c) return 0;
    return 2 * r64(qsz(c)) + 2 * r64(kvsz(c)) + r64(ttsz(c));
}

size_t fsc_self_attn_work_floats(const fsc_self_attn_config *c) {
    if (!c) return 0;
    return 2 * r64(ttsz(c)) + 2 * r64(qsz(c)) + 2 * r64(kvsz(c));
}

void fsc_self_attn_rec_bind(fsc_self_attn_rec *rec, float *saved, const fsc_self_attn_config *c) {
    if (!rec || !c) return;
    *rec = (fsc_self_attn_rec){ .cfg = *c };
    rec->q = saved;                      /* (B, T, NH HS) */
    rec->k = rec->q + r64(qsz(c));       /* (B, T, KVH HS) */
    rec->v = rec->k + r64(kvsz(c));      /* (B, T, KVH HS) */
    rec->y = rec->v + r64(kvsz(c));      /* (B, T, NH HS) */
    rec->att = rec->y + r64(qsz(c));     /* (B, NH, T, T) */
}

static fsc_status check(const fsc_self_attn_rec *r, const char *what) {
    const fsc_self_attn_config *c = &r->cfg;
    if (c->B <= 0 || c->T <= 0 || c->C <= 0 || c->NH <= 0 || c->KVH <= 0 || c->HS <= 0 || c->NH % c->KVH != 0 ||
        (int64_t)c->NH * c->HS > INT_MAX || nbt(c) > (size_t)INT_MAX)
        return fsc_error(FSC_ERR_INVALID, "self-attention %s: bad dimensions B=%d T=%d C=%d NH=%d KVH=%d HS=%d "
                         "(KVH must divide NH)", what, c->B, c->T, c->C, c->NH, c->KVH, c->HS);
    if (c->rope_theta < 0.0f || (c->rope_theta > 0.0f && c->HS % 2 != 0))
        return fsc_error(FSC_ERR_INVALID, "self-attention %s: rotary embeddings need theta > 0 (0: none) and an "
                         "even head size (theta %g, HS %d)", what, (double)c->rope_theta, c->HS);
    if (!r->q || !r->k || !r->v || !r->y || !r->att)
        return fsc_error(FSC_ERR_INVALID, "self-attention %s: the record is not bound to memory", what);
    return FSC_OK;
}

fsc_status fsc_self_attn_forward(fsc_device *dev, float *out, fsc_self_attn_rec *rec, const float *inp,
                                 const fsc_self_attn_params *p, float *work) {
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(rec);
    FSC_CHECK_ARG(inp);
    FSC_CHECK_ARG(p);
    FSC_CHECK_ARG(work);
    FSC_TRY(check(rec, "forward"));
    const fsc_self_attn_config *c = &rec->cfg;
    rec->inp = inp;
    size_t N = nbt(c);
    int QW = c->NH * c->HS, KW = c->KVH * c->HS;
    FSC_TRY(fsc_linear_forward(dev, rec->q, NULL, inp, p->wq, p->bq, N, c->C, QW, 1));
    FSC_TRY(fsc_linear_forward(dev, rec->k, NULL, inp, p->wk, p->bk, N, c->C, KW, 1));
    FSC_TRY(fsc_linear_forward(dev, rec->v, NULL, inp, p->wv, p->bv, N, c->C, KW, 1));
    if (c->rope_theta > 0.0f) {
        FSC_TRY(fsc_rope_forward(dev, rec->q, rec->q, c->B, c->T, c->NH, c->HS, QW, c->rope_theta));
        FSC_TRY(fsc_rope_forward(dev, rec->k, rec->k, c->B, c->T, c->KVH, c->HS, KW, c->rope_theta));
    }
    fsc_attn_core_dims d = { c->B, c->T, c->NH, c->KVH, c->HS };
    FSC_TRY(fsc_attn_core_forward(dev, &d, rec->y, QW, rec->q, QW, rec->k, KW, rec->v, KW, rec->att, work));
    if (!out) return FSC_OK;
    return fsc_linear_forward(dev, out, NULL, rec->y, p->wo, p->bo, N, QW, c->C, 1);
}

fsc_status fsc_self_attn_backward(fsc_device *dev, float *dinp, const fsc_self_attn_grads *g,
                                  const fsc_self_attn_rec *rec, const float *dout, const fsc_self_attn_params *p,
                                  float *work) {
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(dinp);
    return fsc_self_attn_backward_parts(dev, dinp, g, rec, dout, p, work);
}

fsc_status fsc_self_attn_backward_parts(fsc_device *dev, float *dinp, const fsc_self_attn_grads *g,
                                        const fsc_self_attn_rec *rec, const float *dout,
                                        const fsc_self_attn_params *p, float *work) {
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(g);
    FSC_CHECK_ARG(rec);
    FSC_CHECK_ARG(dout);
    FSC_CHECK_ARG(p);
    FSC_CHECK_ARG(work);
    FSC_TRY(check(rec, "backward"));
    const fsc_self_attn_config *c = &rec->cfg;
    size_t N = nbt(c);
    int QW = c->NH * c->HS, KW = c->KVH * c->HS;
    float *core_work = work;                         /* 2 (B, NH, T, T) */
    float *dy = work + 2 * r64(ttsz(c));             /* (B, T, NH HS) */
    float *dq = dy + r64(qsz(c));                    /* (B, T, NH HS) */
    float *dk = dq + r64(qsz(c));                    /* (B, T, KVH HS) */
    float *dv = dk + r64(kvsz(c));                   /* (B, T, KVH HS) */
    fsc_linear_rec o = { .inp = rec->y, .N = N, .C = QW, .OC = c->C, .w_out_in = 1 };
    FSC_TRY(fsc_linear_backward(dev, dy, g->wo, g->bo, &o, dout, p->wo, 0.0f, 1.0f));
    fsc_attn_core_dims d = { c->B, c->T, c->NH, c->KVH, c->HS };
    FSC_TRY(fsc_attn_core_backward(dev, &d, dq, dk, dv, dy, QW, rec->q, QW, rec->k, KW, rec->v, KW, rec->att,
                                   core_work));
    if (c->rope_theta > 0.0f) {
        FSC_TRY(fsc_rope_backward(dev, dq, dq, c->B, c->T, c->NH, c->HS, QW, c->rope_theta));
        FSC_TRY(fsc_rope_backward(dev, dk, dk, c->B, c->T, c->KVH, c->HS, KW, c->rope_theta));
    }
    fsc_linear_rec lq = { .inp = rec->inp, .N = N, .C = c->C, .OC = QW, .w_out_in = 1 };
    fsc_linear_rec lkv = { .inp = rec->inp, .N = N, .C = c->C, .OC = KW, .w_out_in = 1 };
    FSC_TRY(fsc_linear_backward(dev, dinp, g->wq, g->bq, &lq, dq, p->wq, 0.0f, 1.0f));
    FSC_TRY(fsc_linear_backward(dev, dinp, g->wk, g->bk, &lkv, dk, p->wk, 1.0f, 1.0f));
    return fsc_linear_backward(dev, dinp, g->wv, g->bv, &lkv, dv, p->wv, 1.0f, 1.0f);
}
