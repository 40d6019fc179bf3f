/* Running the tensor-parallel GPT-2 (tp.h): the activation record of one micro-batch, and forward and
 * backward through the embedding, the blocks and the head with the tensor group's collectives.
 *
 * A block, with N = B T token rows and Nl = N / size under sequence parallelism (else Nl = N):
 *   ln1 = LN(x)                         (Nl, C)    replicated, or this rank's sequence shard
 *   ln1f = sp ? all_gather(ln1) : ln1   (N, C)     (f: identity; sp: gather)
 *   qkv = ln1f @ c_attn[:, my heads]    (N, 3 Cl)  column-parallel, Q K V of this rank's heads
 *   atty = attention(qkv)               (N, Cl)
 *   s = atty @ attn.c_proj[my rows, :]  (N, C)     row-parallel partial sum
 *   res2 = x + (reduce(s) + bias)       (Nl, C)    reduce: all-reduce (g), or reduce-scatter (sp)
 *   and the same for the MLP: ln2, c_fc (column), GELU, mlp.c_proj (row), residual.
 * Backward runs it in reverse: the reductions become all-reduces (f) or reduce-scatters (sp) of the
 * column-parallel input gradients; under sp the row-parallel output gradient is all-gathered first.
 * The gradient stream dres (Nl, C) is updated in place, as in gpt_run.c.
 *
 * A record covers a range of layers (0 embedding, 1..L blocks, L+1 head) with gpt.h's contract, so a
 * pipeline stage runs its range and several micro-batches can be in flight: hooks around every layer,
 * the input stream x[first - 1] and output stream x[last] at the boundaries, the head's part of the tied
 * wte gradient left in dwte_head when the range lacks the embedding. Under sequence parallelism the layer
 * norms' partial gradients are summed over the group at the end of their layer's backward, before its
 * post-backward hook (a strategy may reduce them there).
 * Not here: the description and files (tp_gpt.c), the building blocks (tp_layers.c, tp_vocab.c). */
#include <stdlib.h>
#include <string.h>
#include "tp_impl.h"
#include "core/device_impl.h"

static size_t r64(size_t n) { return (n + 63) / 64 * 64; }

typedef struct {
    float *base;
    size_t off;
} arena;

static float *take(arena *ar, size_t n) {
    float *p = ar->base ? ar->base + ar->off : NULL;
    ar->off += r64(n);
    return p;
}

static size_t max2(size_t a, size_t b) { return a > b ? a : b; }

/* Scratch of one block: forward qkv (N, 3Cl), s (N, C), attention work; backward g (N, C), d1 and d2
 * (N, 4Cl), p (N, C), attention work. */
typedef struct {
    float *qkv, *s, *aw;           /* forward */
    float *g, *d1, *d2, *p, *awb;  /* backward */
} blk_work;

static size_t block_work_floats(const fsc_tp_gpt *m, int B) {
    int T = m->cfg.seq;
    size_t N = (size_t)B * T, C = (size_t)m->C, Cl = (size_t)m->Cl;
    size_t aw = fsc_attention_work_floats(B, T, m->Cl, m->NHl);
    size_t fwd = r64(N * 3 * Cl) + r64(N * C) + aw;
    size_t bwd = r64(N * C) + 2 * r64(N * 4 * Cl) + r64(N * C) + aw;
    return max2(fwd, bwd);
}

static blk_work split_work(const fsc_tp_gpt *m, float *work, int B) {
    size_t N = (size_t)B * m->cfg.seq, C = (size_t)m->C, Cl = (size_t)m->Cl;
    blk_work w;
    w.qkv = work;
    w.s = w.qkv + r64(N * 3 * Cl);
    w.aw = w.s + r64(N * C);
    w.g = work;
    w.d1 = w.g + r64(N * C);
    w.d2 = w.d1 + r64(N * 4 * Cl);
    w.p = w.d2 + r64(N * 4 * Cl);
    w.awb = w.p + r64(N * C);
    return w;
}

/* Lay the record out in one allocation; with base NULL only the size (floats) is computed. */
static size_t layout(fsc_tp_gpt *m, tp_acts *a, float *base) {
    arena ar = { base, 0 };
    int B = a->B, T = m->cfg.seq, L = m->cfg.layers;
    size_t N = a->N, Nl = a->Nl, C = (size_t)m->C, Cl = (size_t)m->Cl;
    const int emb = a->first == 0, head = a->last == L + 1;
    const int b0 = a->first > 1 ? a->first : 1, b1 = a->last < L ? a->last : L; /* blocks b0..b1 (layers) */
    if (emb) a->tok = (int32_t *)take(&ar, N);
    if (head) a->tgt = (int32_t *)take(&ar, N);
    for (int j = 0; j <= L; j++) a->x[j] = j >= a->first - 1 && j <= a->last ? take(&ar, Nl * C) : NULL;
    a->dres = take(&ar, Nl * C);
    for (int l = b0 - 1; l < b1; l++) {
        tp_block_rec *r = &a->blk[l];
        r->ln1 = take(&ar, Nl * C), r->ln1_mean = take(&ar, Nl), r->ln1_rstd = take(&ar, Nl);
        r->ln1f = m->sp ? take(&ar, N * C) : r->ln1;
        float *saved = take(&ar, fsc_attention_saved_floats(B, T, m->Cl, m->NHl));
        if (base) fsc_attention_rec_bind(&r->attn, saved, B, T, m->Cl, m->NHl);
        r->atty = take(&ar, N * Cl);
        r->res2 = take(&ar, Nl * C);
        r->ln2 = take(&ar, Nl * C), r->ln2_mean = take(&ar, Nl), r->ln2_rstd = take(&ar, Nl);
        r->ln2f = m->sp ? take(&ar, N * C) : r->ln2;
        r->fch = take(&ar, N * 4 * Cl), r->fch_gelu = take(&ar, N * 4 * Cl);
    }
    size_t work = b0 <= b1 ? block_work_floats(m, B) : 64;
    if (head) {
        a->lnf = take(&ar, Nl * C), a->lnf_mean = take(&ar, Nl), a->lnf_rstd = take(&ar, Nl);
        a->lnff = m->sp ? take(&ar, N * C) : a->lnf;
        a->logits = take(&ar, N * ((size_t)m->Vl + 1));
        a->losses = take(&ar, N), a->q = take(&ar, N);
        work = max2(work, max2(fsc_tp_xent_work_floats(N),
                               r64(N * ((size_t)m->Vl + 1)) + r64(N * C) + r64(Nl * C) + 64));
    }
    if (emb) work = max2(work, fsc_tp_embedding_work_floats(B, T, m->C, m->Vl, m->sp) + (m->sp ? r64(N * C) : 0));
    a->work = take(&ar, work);
    return ar.off;
}

void tp_acts_free(fsc_device *dev, tp_acts *a) {
    if (!a) return;
    fsc_device_release(dev, a->mem);
    free(a->x);
    free(a->blk);
    free(a);
}

fsc_status tp_acts_create(fsc_tp_gpt *m, int B, int first, int last, tp_acts **out) {
    *out = NULL;
    int T = m->cfg.seq, L = m->cfg.layers;
    size_t N = (size_t)B * T;
    if (first < 0 || last > L + 1 || first > last)
        return fsc_error(FSC_ERR_INVALID, "tensor parallel gpt: layer range [%d, %d] is outside [0, %d]", first, last,
                         L + 1);
    if (B < 1 || (double)B * T > 2147483647.0 / 4 || (double)B * m->NHl > 2147483647.0)
        return fsc_error(FSC_ERR_INVALID, "tensor parallel gpt: batch of %d sequences is out of range", B);
    if (m->sp && N % (size_t)m->size != 0)
        return fsc_error(FSC_ERR_INVALID, "sequence parallel: %d x %d token rows do not split over a tensor group "
                         "of %d", B, T, m->size);
    tp_acts *a = calloc(1, sizeof *a);
    if (!a) return fsc_error(FSC_ERR_NOMEM, "tensor parallel gpt: out of host memory");
    a->B = B, a->first = first, a->last = last, a->layers = L, a->N = N, a->Nl = m->sp ? N / (size_t)m->size : N;
    a->x = calloc((size_t)L + 1, sizeof *a->x);
    a->blk = calloc((size_t)L, sizeof *a->blk);
    fsc_status s = FSC_OK;
    if (!a->x || !a->blk) s = fsc_error(FSC_ERR_NOMEM, "tensor parallel gpt: out of host memory");
    size_t floats = s == FSC_OK ? layout(m, a, NULL) : 0;
    if (s == FSC_OK) s = fsc_device_alloc(m->dev, FSC_TAG_ACTS, floats * sizeof(float), (void **)&a->mem);
    if (s != FSC_OK) {
        tp_acts_free(m->dev, a);
        return s;
    }
    a->bytes = floats * sizeof(float);
    layout(m, a, a->mem);
    *out = a;
    return FSC_OK;
}

/* Where backward accumulates tensor i's gradient: grad[i], or under sp a layer norm's partial sum. */
static float *gacc(fsc_tp_gpt *m, int i) { return m->roff[i] == SIZE_MAX ? m->grad[i] : m->rgrad + m->roff[i]; }

/* Parameters (p) of block l (0-based); its gradient targets into g[FSC_GPT_BLOCK_PARAMS]. */
static const float *const *bparams(fsc_tp_gpt *m, int l) {
    return (const float *const *)&m->param[fsc_gpt_block_first_tensor(&m->cfg, l)];
}
static void bgrads(fsc_tp_gpt *m, int l, float **g) {
    int i0 = fsc_gpt_block_first_tensor(&m->cfg, l);
    for (int k = 0; k < FSC_GPT_BLOCK_PARAMS; k++) g[k] = gacc(m, i0 + k);
}

/* sp: the partial layer-norm gradients of tensors [i0, i1) summed over the group and added to grad
 * (their partial sums are contiguous in rgrad), then zeroed for the next backward. */
static fsc_status finish_layernorm_grads(fsc_tp_gpt *m, int i0, int i1) {
    if (!m->sp) return FSC_OK;
    size_t lo = SIZE_MAX, hi = 0;
    for (int i = i0; i < i1; i++) {
        if (m->roff[i] == SIZE_MAX) continue;
        if (m->roff[i] < lo) lo = m->roff[i];
        if (m->roff[i] + m->t[i].local.numel > hi) hi = m->roff[i] + m->t[i].local.numel;
    }
    if (lo >= hi) return FSC_OK;
    FSC_TRY(fsc_comm_all_reduce(m->tp, m->rgrad + lo, m->rgrad + lo, hi - lo, FSC_F32, FSC_SUM));
    for (int i = i0; i < i1; i++)
        if (m->roff[i] != SIZE_MAX)
            FSC_TRY(FSC_K(m->dev, axpy, m->grad[i], 1.0f, m->rgrad + m->roff[i], m->t[i].local.numel));
    return fsc_device_memset(m->dev, m->rgrad + lo, 0, (hi - lo) * sizeof(float));
}

/* sp: out (N, C) = gather of shard (Nl, C); else out is shard. */
static fsc_status gather_rows(fsc_tp_gpt *m, float *out, const float *shard, size_t Nl) {
    if (!m->sp) return FSC_OK;
    return fsc_tp_sp_gather(m->tp, out, shard, Nl * (size_t)m->C);
}

/* The row-parallel output: sp: shard (Nl, C) = reduce-scatter of s; else s (N, C) all-reduced in place and
 * returned in *red. Then the bias is added to the reduced rows. */
static fsc_status reduce_rows(fsc_tp_gpt *m, float *shard, float *s, size_t N, size_t Nl, const float *bias,
                              float **red) {
    size_t C = (size_t)m->C;
    if (m->sp) {
        FSC_TRY(fsc_tp_sp_reduce_scatter(m->tp, shard, s, Nl * C));
        *red = shard;
    } else {
        FSC_TRY(fsc_tp_g_forward(m->dev, m->tp, s, s, N * C));
        *red = s;
    }
    return FSC_K(m->dev, bias_add, *red, bias, Nl, m->C);
}

/* Input gradient of a column-parallel linear: partial p (N, C) summed over the group (f's backward), or
 * reduce-scattered to the shard (sp). Returns the reduced rows in *red. */
static fsc_status reduce_grad(fsc_tp_gpt *m, float *shard, float *p, size_t N, size_t Nl, float **red) {
    size_t C = (size_t)m->C;
    if (m->sp) {
        FSC_TRY(fsc_tp_sp_reduce_scatter(m->tp, shard, p, Nl * C));
        *red = shard;
        return FSC_OK;
    }
    *red = p;
    return fsc_tp_f_backward(m->dev, m->tp, p, p, N * C);
}

static fsc_status block_forward(fsc_tp_gpt *m, tp_acts *a, int l) {
    fsc_device *dev = m->dev;
    tp_block_rec *r = &a->blk[l];
    const float *const *p = bparams(m, l);
    const float *x = a->x[l]; /* block l (0-based) is layer l + 1: its input is layer l's output */
    float *out = a->x[l + 1], *red;
    size_t N = a->N, Nl = a->Nl;
    int C = m->C, Cl = m->Cl;
    blk_work w = split_work(m, a->work, a->B);
    r->inp = x;
    FSC_TRY(fsc_layernorm_forward(dev, r->ln1, NULL, r->ln1_mean, r->ln1_rstd, x, p[FSC_B_LN1_W], p[FSC_B_LN1_B], Nl, C));
    FSC_TRY(gather_rows(m, r->ln1f, r->ln1, Nl));
    FSC_TRY(fsc_linear_forward(dev, w.qkv, NULL, r->ln1f, p[FSC_B_ATTN_W], p[FSC_B_ATTN_B], N, C, 3 * Cl, 0));
    FSC_TRY(fsc_attention_forward(dev, r->atty, &r->attn, w.qkv, w.aw));
    FSC_TRY(fsc_linear_forward(dev, w.s, NULL, r->atty, p[FSC_B_APROJ_W], NULL, N, Cl, C, 0));
    FSC_TRY(reduce_rows(m, r->res2, w.s, N, Nl, p[FSC_B_APROJ_B], &red));
    FSC_TRY(fsc_residual_forward(dev, r->res2, x, red, Nl * (size_t)C));
    FSC_TRY(fsc_layernorm_forward(dev, r->ln2, NULL, r->ln2_mean, r->ln2_rstd, r->res2, p[FSC_B_LN2_W],
                                  p[FSC_B_LN2_B], Nl, C));
    FSC_TRY(gather_rows(m, r->ln2f, r->ln2, Nl));
    FSC_TRY(fsc_linear_forward(dev, r->fch, NULL, r->ln2f, p[FSC_B_FC_W], p[FSC_B_FC_B], N, C, 4 * Cl, 0));
    FSC_TRY(fsc_gelu_forward(dev, r->fch_gelu, NULL, r->fch, N * 4 * (size_t)Cl));
    FSC_TRY(fsc_linear_forward(dev, w.s, NULL, r->fch_gelu, p[FSC_B_MPROJ_W], NULL, N, 4 * Cl, C, 0));
    FSC_TRY(reduce_rows(m, out, w.s, N, Nl, p[FSC_B_MPROJ_B], &red));
    return fsc_residual_forward(dev, out, r->res2, red, Nl * (size_t)C);
}

static fsc_status block_backward(fsc_tp_gpt *m, tp_acts *a, int l) {
    fsc_device *dev = m->dev;
    const tp_block_rec *r = &a->blk[l];
    const float *const *p = bparams(m, l);
    float *g[FSC_GPT_BLOCK_PARAMS];
    bgrads(m, l, g);
    float *dres = a->dres, *red;
    size_t N = a->N, Nl = a->Nl;
    int C = m->C, Cl = m->Cl;
    blk_work w = split_work(m, a->work, a->B);
    /* MLP: the row-parallel output's gradient is dres (gathered under sp); its bias gets the full sum */
    const float *G = m->sp ? w.g : dres;
    FSC_TRY(gather_rows(m, w.g, dres, Nl));
    fsc_linear_rec mproj = { r->fch_gelu, N, 4 * Cl, C, 0 };
    FSC_TRY(fsc_linear_backward(dev, w.d1, g[FSC_B_MPROJ_W], g[FSC_B_MPROJ_B], &mproj, G, p[FSC_B_MPROJ_W], 0.0f,
                                1.0f));
    fsc_gelu_rec gelu = { r->fch, N * 4 * (size_t)Cl };
    FSC_TRY(fsc_gelu_backward(dev, w.d2, &gelu, w.d1));
    fsc_linear_rec fc = { r->ln2f, N, C, 4 * Cl, 0 };
    FSC_TRY(fsc_linear_backward(dev, w.p, g[FSC_B_FC_W], g[FSC_B_FC_B], &fc, w.d2, p[FSC_B_FC_W], 0.0f, 1.0f));
    FSC_TRY(reduce_grad(m, w.g, w.p, N, Nl, &red));
    fsc_layernorm_rec ln2 = { r->res2, r->ln2_mean, r->ln2_rstd, Nl, C };
    FSC_TRY(fsc_layernorm_backward(dev, dres, g[FSC_B_LN2_W], g[FSC_B_LN2_B], &ln2, red, p[FSC_B_LN2_W]));
    /* attention */
    FSC_TRY(gather_rows(m, w.g, dres, Nl));
    fsc_linear_rec aproj = { r->atty, N, Cl, C, 0 };
    FSC_TRY(fsc_linear_backward(dev, w.d1, g[FSC_B_APROJ_W], g[FSC_B_APROJ_B], &aproj, G, p[FSC_B_APROJ_W], 0.0f,
                                1.0f)); /* datty (N, Cl) */
    FSC_TRY(fsc_attention_backward(dev, w.d2, &r->attn, w.d1, w.awb)); /* dqkv (N, 3 Cl) */
    fsc_linear_rec attn = { r->ln1f, N, C, 3 * Cl, 0 };
    FSC_TRY(fsc_linear_backward(dev, w.p, g[FSC_B_ATTN_W], g[FSC_B_ATTN_B], &attn, w.d2, p[FSC_B_ATTN_W], 0.0f,
                                1.0f));
    FSC_TRY(reduce_grad(m, w.g, w.p, N, Nl, &red));
    fsc_layernorm_rec ln1 = { r->inp, r->ln1_mean, r->ln1_rstd, Nl, C };
    return fsc_layernorm_backward(dev, dres, g[FSC_B_LN1_W], g[FSC_B_LN1_B], &ln1, red, p[FSC_B_LN1_W]);
}

static fsc_status head_forward(fsc_tp_gpt *m, tp_acts *a, double *loss_sum) {
    fsc_device *dev = m->dev;
    int lnf = m->n_tensors - 2, C = m->C, Vl = m->Vl, ld = Vl + 1;
    size_t N = a->N, Nl = a->Nl;
    FSC_TRY(fsc_layernorm_forward(dev, a->lnf, NULL, a->lnf_mean, a->lnf_rstd, a->x[m->cfg.layers], m->param[lnf],
                                  m->param[lnf + 1], Nl, C));
    FSC_TRY(gather_rows(m, a->lnff, a->lnf, Nl));
    /* logits (N, Vl) with row stride Vl + 1 = lnff (N, C) @ wte_slice^T */
    FSC_TRY(FSC_K(dev, gemm, 0, 1, (int)N, Vl, C, 1.0f, a->lnff, C, 0, m->param[FSC_P_WTE], C, 0, 0.0f, a->logits,
                  ld, 0, 1));
    FSC_TRY(fsc_tp_xent_forward(dev, m->tp, a->losses, &a->xrec, a->logits, a->host_tgt, a->tgt, a->q, N, Vl, ld, m->v0,
                                a->work));
    return FSC_K(dev, sum, loss_sum, a->losses, N);
}

static fsc_status head_backward(fsc_tp_gpt *m, tp_acts *a, float dscale) {
    fsc_device *dev = m->dev;
    int lnf = m->n_tensors - 2, C = m->C, Vl = m->Vl, ld = Vl + 1;
    size_t N = a->N, Nl = a->Nl;
    float *dlogits = a->work;                          /* (N, Vl + 1) */
    float *dlnff = dlogits + r64(N * (size_t)ld);      /* (N, C) */
    float *dshard = dlnff + r64(N * (size_t)C);        /* (Nl, C) under sp */
    float *small = dshard + r64(Nl * (size_t)C);       /* 64 */
    float *red;
    FSC_TRY(fsc_tp_xent_backward(dev, dlogits, &a->xrec, dscale, small));
    /* dlnff (N, C) = dlogits (N, Vl) @ wte_slice (Vl, C); dwte_head (Vl, C) = dlogits^T @ lnff */
    FSC_TRY(FSC_K(dev, gemm, 0, 0, (int)N, C, Vl, 1.0f, dlogits, ld, 0, m->param[FSC_P_WTE], C, 0, 0.0f, dlnff, C, 0,
                  1));
    FSC_TRY(FSC_K(dev, gemm, 1, 0, Vl, C, (int)N, 1.0f, dlogits, ld, 0, a->lnff, C, 0, 0.0f, m->dwte_head, C, 0, 1));
    FSC_TRY(reduce_grad(m, dshard, dlnff, N, Nl, &red));
    FSC_TRY(fsc_device_memset(dev, a->dres, 0, Nl * (size_t)C * sizeof(float)));
    fsc_layernorm_rec nr = { a->x[m->cfg.layers], a->lnf_mean, a->lnf_rstd, Nl, C };
    return fsc_layernorm_backward(dev, a->dres, gacc(m, lnf), gacc(m, lnf + 1), &nr, red, m->param[lnf]);
}

fsc_status tp_acts_set_batch(fsc_tp_gpt *m, tp_acts *a, const int32_t *tokens, const int32_t *targets) {
    const int L = m->cfg.layers, V = m->cfg.vocab;
    const size_t N = a->N;
    a->batch_set = 0;
    if ((a->first == 0 && !tokens) || (a->last == L + 1 && !targets))
        return fsc_error(FSC_ERR_INVALID, "tensor parallel gpt: layers [%d, %d] need %s, but they are NULL",
                         a->first, a->last, a->first == 0 && !tokens ? "tokens" : "targets");
    for (size_t i = 0; i < N; i++)
        if ((a->first == 0 && (tokens[i] < 0 || tokens[i] >= V)) ||
            (a->last == L + 1 && (targets[i] < 0 || targets[i] >= V)))
            return fsc_error(FSC_ERR_INVALID, "tensor parallel gpt: token or target at %zu (%d, %d) is outside the "
                             "vocabulary [0, %d)", i, a->first == 0 ? (int)tokens[i] : 0,
                             a->last == L + 1 ? (int)targets[i] : 0, V);
    a->host_tgt = a->last == L + 1 ? targets : NULL;
    if (a->first == 0) {
        int32_t *local = malloc(N * sizeof(int32_t));
        if (!local) return fsc_error(FSC_ERR_NOMEM, "tensor parallel gpt: out of host memory");
        fsc_tp_vocab_localize(local, tokens, N, m->v0, m->Vl);
        fsc_status s = fsc_device_upload(m->dev, a->tok, local, N * sizeof(int32_t));
        free(local);
        FSC_TRY(s);
    }
    a->batch_set = 1;
    return FSC_OK;
}

#define HOOK(h, fn, l) ((h) && (h)->fn ? (h)->fn((h)->ctx, (l)) : FSC_OK)

fsc_status tp_forward(fsc_tp_gpt *m, tp_acts *a, const fsc_gpt_hooks *h, double *loss_sum) {
    const int L = m->cfg.layers;
    if (loss_sum) *loss_sum = 0.0;
    if (!a->batch_set) return fsc_error(FSC_ERR_STATE, "tensor parallel gpt forward: no batch set");
    a->fwd_done = 0;
    double ls = 0;
    for (int l = a->first; l <= a->last; l++) {
        FSC_TRY(HOOK(h, pre_forward, l));
        if (l == 0)
            FSC_TRY(fsc_tp_embedding_forward(m->dev, m->tp, a->x[0], &a->erec, a->tok, m->param[FSC_P_WTE],
                                             m->param[FSC_P_WPE], a->B, m->cfg.seq, m->C, m->Vl, m->sp, a->work));
        else if (l <= L)
            FSC_TRY(block_forward(m, a, l - 1));
        else
            FSC_TRY(head_forward(m, a, &ls));
        FSC_TRY(HOOK(h, post_forward, l));
    }
    if (loss_sum) *loss_sum = ls;
    a->fwd_done = 1;
    return FSC_OK;
}

fsc_status tp_backward(fsc_tp_gpt *m, tp_acts *a, const fsc_gpt_hooks *h, float dscale) {
    const int L = m->cfg.layers, nt = m->n_tensors;
    if (!a->fwd_done)
        return fsc_error(FSC_ERR_STATE, "tensor parallel gpt backward: no forward to differentiate (backward runs "
                         "once per forward)");
    a->fwd_done = 0;
    fsc_device *dev = m->dev;
    for (int l = a->last; l >= a->first; l--) {
        FSC_TRY(HOOK(h, pre_backward, l));
        if (l == L + 1) {
            FSC_TRY(head_backward(m, a, dscale));
            FSC_TRY(finish_layernorm_grads(m, nt - 2, nt));
        } else if (l >= 1) {
            FSC_TRY(block_backward(m, a, l - 1));
            int i0 = fsc_gpt_block_first_tensor(&m->cfg, l - 1);
            FSC_TRY(finish_layernorm_grads(m, i0, i0 + FSC_GPT_BLOCK_PARAMS));
        } else {
            /* the embedding: the head's part of the tied wte gradient first, then the token rows */
            FSC_TRY(FSC_K(dev, axpy, m->grad[FSC_P_WTE], 1.0f, m->dwte_head, (size_t)m->Vl * m->C));
            const float *D = a->dres;
            float *full = a->work + fsc_tp_embedding_work_floats(a->B, m->cfg.seq, m->C, m->Vl, m->sp); /* (N, C) */
            if (m->sp) {
                FSC_TRY(gather_rows(m, full, a->dres, a->Nl));
                D = full;
            }
            FSC_TRY(fsc_tp_embedding_backward(dev, m->tp, m->grad[FSC_P_WTE], m->grad[FSC_P_WPE], &a->erec, D,
                                              a->work));
        }
        FSC_TRY(HOOK(h, post_backward, l));
    }
    return FSC_OK;
}

/* ---- the whole model on one record (tp.h) ---- */

static fsc_status ensure_acts(fsc_tp_gpt *m, int B) {
    if (m->acts && m->acts->B == B) return FSC_OK;
    tp_acts_free(m->dev, m->acts);
    m->acts = NULL;
    return tp_acts_create(m, B, 0, m->cfg.layers + 1, &m->acts);
}

fsc_status fsc_tp_gpt_forward(fsc_tp_gpt *m, const int32_t *tokens, const int32_t *targets, int B,
                              double *loss_sum) {
    if (loss_sum) *loss_sum = 0.0;
    if (!tokens || !targets) return fsc_error(FSC_ERR_INVALID, "tensor parallel gpt forward: tokens or targets NULL");
    FSC_TRY(ensure_acts(m, B));
    m->acts->fwd_done = 0;
    FSC_TRY(tp_acts_set_batch(m, m->acts, tokens, targets));
    return tp_forward(m, m->acts, NULL, loss_sum);
}

fsc_status fsc_tp_gpt_backward(fsc_tp_gpt *m, float dscale) {
    if (!m->acts)
        return fsc_error(FSC_ERR_STATE, "tensor parallel gpt backward: no forward to differentiate (backward runs "
                         "once per forward)");
    return tp_backward(m, m->acts, NULL, dscale);
}
