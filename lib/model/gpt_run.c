/* Running the GPT-2 model: the activation record of one micro-batch for a range of layers, and forward
 * and backward over that range with the wrappers' hooks around every layer.
 *
 * Layers: 0 the embedding, 1..L the blocks (nn.h), L+1 the head (ln_f, logits = ln_f(x) wte^T, cross
 * entropy). The residual stream x[j] is the output of layer j (the input of layer j+1); the record holds
 * x[j] for j in [lo, hi] (lo = first - 1, or 0 with the embedding; hi = min(last, L)). Backward keeps one
 * gradient stream dres (B, T, C) updated in place from the head down to the embedding; it is both the
 * record's grad_output (set by a caller whose range ends before the head) and its grad_input.
 *
 * Checkpoint: every block's record is bound to one shared area; backward recomputes a block's forward
 * (the same kernels on the same input, so the same bits) just before the block's backward.
 * Offload (with checkpoint): block inputs that are neither the record's input nor output nor the head's
 * input live in two alternating device buffers, with a host copy each, uploaded again for the recompute.
 * MoE blocks (gpt_moe.c) keep a record of their own kind with the MoE layer's record inside; they are
 * not checkpointed (their forward is collective over the expert group and routes on the host).
 * Not here: the model description and initial values (gpt.c), files (gpt_io.c). */
#include <stdlib.h>
#include <string.h>
#include "fsc/gpt.h"
#include "fsc/nn.h"
#include "core/device_impl.h"
#include "gpt_moe.h"

struct fsc_gpt_acts {
    fsc_gpt *m;
    fsc_gpt_acts_opts o;
    int L, C, NH, V;
    size_t N;                /* B * T */
    int b0, b1;              /* blocks in range: layers b0..b1 (none when b0 > b1) */
    int has_emb, has_head;
    int lo, hi;              /* stream range */
    float *mem;              /* the one device allocation, FSC_TAG_ACTS */
    size_t bytes;
    int32_t *tok, *tgt;      /* (B, T) device */
    float **x;               /* x[j - lo]: (B, T, C) output of layer j */
    float **xhost;           /* offload: host copy of x[j - lo], or NULL where x stays on device */
    size_t host_bytes;
    fsc_block_rec *blk;      /* b1 - b0 + 1 records (all bound to one area under checkpoint) */
    gpt_moe_rec *mblk;       /* b1 - b0 + 1: the records of MoE blocks (unused for dense ones) */
    fsc_moe_stats moe;       /* the MoE blocks of the last forward, summed */
    float *lnf;              /* (B, T, C) */
    float *lnf_mean, *lnf_rstd; /* (B, T) */
    float *logits;           /* (B, T, V) */
    float *losses;           /* (B, T) */
    float *dres;             /* (B, T, C) gradient stream */
    float *work;             /* scratch of blocks and head */
    int have_tok, have_tgt, fwd_done;
};

static size_t r64(size_t n) { return (n + 63) / 64 * 64; }

/* Lay the record out in one allocation: with base NULL only the total (in floats) is computed. */
typedef struct { float *base; size_t off; } arena;
static float *take(arena *ar, size_t n) {
    float *p = ar->base ? ar->base + ar->off : NULL;
    ar->off += r64(n);
    return p;
}

static int stream_is_dedicated(const fsc_gpt_acts *a, int j) {
    if (!a->o.offload_inputs) return 1;
    return (j == a->lo && a->o.first > 0) || (j == a->hi && a->o.last <= a->L) || (j == a->L && a->has_head);
}

/* Second pass assigns pointers; returns the floats used. Ping-pong buffers come first when offloading. */
static size_t layout(fsc_gpt_acts *a, float *base) {
    arena ar = { base, 0 };
    int B = a->o.B, T = a->o.T, C = a->C, NH = a->NH;
    size_t N = a->N, btc = N * (size_t)C;
    a->tok = (int32_t *)take(&ar, N);
    a->tgt = (int32_t *)take(&ar, N);
    float *pp[2] = { NULL, NULL };
    if (a->o.offload_inputs) pp[0] = take(&ar, btc), pp[1] = take(&ar, btc);
    for (int j = a->lo; j <= a->hi; j++)
        a->x[j - a->lo] = stream_is_dedicated(a, j) ? take(&ar, btc) : pp[j % 2];
    a->dres = take(&ar, btc);
    size_t saved = fsc_block_saved_floats(B, T, C, NH);
    float *shared = a->o.checkpoint && a->b0 <= a->b1 ? take(&ar, saved) : NULL;
    size_t work = 0;
    for (int l = a->b0; l <= a->b1; l++) {
        if (fsc_gpt_block_is_moe(&a->m->cfg, l - 1)) { /* never checkpointed (fsc_gpt_acts_create) */
            float *s = take(&ar, fsc_block_attn_saved_floats(B, T, C, NH));
            if (base) fsc_block_attn_rec_bind(&a->mblk[l - a->b0].blk, s, B, T, C, NH);
            size_t w = gpt_moe_work_floats(B, T, C, NH);
            if (w > work) work = w;
            continue;
        }
        float *s = a->o.checkpoint ? shared : take(&ar, saved);
        if (base) fsc_block_rec_bind(&a->blk[l - a->b0], s, B, T, C, NH);
        size_t w = fsc_block_work_floats(B, T, C, NH);
        if (w > work) work = w;
    }
    if (a->has_head) {
        a->lnf = take(&ar, btc);
        a->lnf_mean = take(&ar, N);
        a->lnf_rstd = take(&ar, N);
        a->logits = take(&ar, N * (size_t)a->V);
        a->losses = take(&ar, N);
        size_t hw = r64(N * (size_t)a->V) + r64(btc); /* dlogits, dln_f */
        if (hw > work) work = hw;
    }
    a->work = take(&ar, work);
    return ar.off;
}

fsc_status fsc_gpt_acts_create(fsc_gpt *m, const fsc_gpt_acts_opts *o, fsc_gpt_acts **out) {
    *out = NULL;
    if (!m || !o) return fsc_error(FSC_ERR_INVALID, "gpt acts: model or options NULL");
    const fsc_gpt_config *c = &m->cfg;
    int L = c->layers;
    if (o->B < 1 || o->T < 1 || o->T > c->seq)
        return fsc_error(FSC_ERR_INVALID, "gpt acts: batch B=%d T=%d; need B >= 1 and 1 <= T <= seq %d", o->B,
                         o->T, c->seq);
    if (o->first < 0 || o->last > L + 1 || o->first > o->last)
        return fsc_error(FSC_ERR_INVALID, "gpt acts: layer range [%d, %d] is not inside [0, %d] (%d blocks)",
                         o->first, o->last, L + 1, L);
    if (o->offload_inputs && !o->checkpoint)
        return fsc_error(FSC_ERR_INVALID, "gpt acts: offload_inputs needs checkpoint (only checkpointed block "
                         "inputs are offloaded)");
    for (int l = o->first > 1 ? o->first : 1; o->checkpoint && l <= o->last && l <= L; l++)
        if (fsc_gpt_block_is_moe(c, l - 1))
            return fsc_error(FSC_ERR_INVALID, "gpt acts: activation checkpointing of MoE blocks is not supported "
                             "yet (block %d is one)", l - 1);
    /* every gemm dimension must fit int; the record must be addressable */
    double est = (double)o->B * o->T * ((double)c->heads * o->T * 3 + (double)c->dim * 16 * (L + 2) +
                                        (double)c->vocab * 2);
    if ((double)o->B * o->T > 2147483647.0 || (double)o->B * c->heads > 2147483647.0 || est > 1e15)
        return fsc_error(FSC_ERR_INVALID, "gpt acts: B=%d T=%d is too large for this model", o->B, o->T);
    fsc_gpt_acts *a = calloc(1, sizeof *a);
    if (!a) return fsc_error(FSC_ERR_NOMEM, "gpt acts: out of host memory");
    a->m = m;
    a->o = *o;
    a->L = L, a->C = c->dim, a->NH = c->heads, a->V = c->vocab;
    a->N = (size_t)o->B * o->T;
    a->has_emb = o->first == 0;
    a->has_head = o->last == L + 1;
    a->b0 = o->first > 1 ? o->first : 1;
    a->b1 = o->last < L ? o->last : L;
    a->lo = o->first == 0 ? 0 : o->first - 1;
    a->hi = o->last < L ? o->last : L;
    int ns = a->hi - a->lo + 1, nb = a->b1 >= a->b0 ? a->b1 - a->b0 + 1 : 0;
    a->x = calloc((size_t)ns, sizeof *a->x);
    a->xhost = calloc((size_t)ns, sizeof *a->xhost);
    a->blk = calloc(nb ? (size_t)nb : 1, sizeof *a->blk);
    a->mblk = calloc(nb ? (size_t)nb : 1, sizeof *a->mblk);
    fsc_status s = FSC_OK;
    if (!a->x || !a->xhost || !a->blk || !a->mblk) s = fsc_error(FSC_ERR_NOMEM, "gpt acts: out of host memory");
    size_t floats = layout(a, NULL);
    if (s == FSC_OK) s = fsc_device_alloc(m->dev, FSC_TAG_ACTS, floats * sizeof(float), (void **)&a->mem);
    if (s == FSC_OK) {
        a->bytes = floats * sizeof(float);
        layout(a, a->mem);
        for (int j = a->lo; j <= a->hi && s == FSC_OK; j++) {
            if (stream_is_dedicated(a, j)) continue;
            a->xhost[j - a->lo] = malloc(a->N * (size_t)a->C * sizeof(float));
            if (!a->xhost[j - a->lo]) s = fsc_error(FSC_ERR_NOMEM, "gpt acts: out of host memory (offload)");
            a->host_bytes += a->N * (size_t)a->C * sizeof(float);
        }
        for (int l = a->b0; l <= a->b1 && s == FSC_OK; l++) {
            if (!fsc_gpt_block_is_moe(c, l - 1)) continue;
            if (!m->moe || !m->moe[l - 1]) s = fsc_error(FSC_ERR_STATE, "gpt acts: block %d has no MoE layer", l - 1);
            else s = fsc_moe_rec_create(m->moe[l - 1], (int)a->N, 1, &a->mblk[l - a->b0].moe);
            if (s == FSC_OK) a->bytes += fsc_moe_rec_bytes(a->mblk[l - a->b0].moe);
        }
    }
    if (s != FSC_OK) {
        fsc_gpt_acts_free(a);
        return s;
    }
    *out = a;
    return FSC_OK;
}

void fsc_gpt_acts_free(fsc_gpt_acts *a) {
    if (!a) return;
    if (a->mem) fsc_device_release(a->m->dev, a->mem);
    if (a->xhost)
        for (int j = 0; j <= a->hi - a->lo; j++) free(a->xhost[j]);
    free(a->xhost);
    free(a->x);
    free(a->blk);
    if (a->mblk)
        for (int l = a->b0; l <= a->b1; l++) fsc_moe_rec_free(a->mblk[l - a->b0].moe);
    free(a->mblk);
    free(a);
}

size_t fsc_gpt_acts_bytes(const fsc_gpt_acts *a) { return a ? a->bytes : 0; }

void fsc_gpt_acts_moe_stats(const fsc_gpt_acts *a, fsc_moe_stats *out) {
    static const fsc_moe_stats none = { 0 };
    *out = a ? a->moe : none;
}

const fsc_moe_rec *fsc_gpt_acts_moe_rec(const fsc_gpt_acts *a, int b) {
    if (!a || b + 1 < a->b0 || b + 1 > a->b1 || !fsc_gpt_block_is_moe(&a->m->cfg, b)) return NULL;
    return a->mblk[b + 1 - a->b0].moe;
}

static fsc_status check_tokens(const int32_t *t, size_t n, int V, const char *what) {
    for (size_t i = 0; i < n; i++)
        if (t[i] < 0 || t[i] >= V)
            return fsc_error(FSC_ERR_INVALID, "gpt: %s[%zu] = %d is outside the vocabulary [0, %d)", what, i,
                             (int)t[i], V);
    return FSC_OK;
}

fsc_status fsc_gpt_acts_set_batch(fsc_gpt_acts *a, const int32_t *tokens, const int32_t *targets) {
    a->fwd_done = 0;
    a->have_tok = a->have_tgt = 0;
    if (a->has_emb && !tokens)
        return fsc_error(FSC_ERR_INVALID, "gpt: tokens are NULL but the embedding (layer 0) is in the range");
    if (a->has_head && !targets)
        return fsc_error(FSC_ERR_INVALID, "gpt: targets are NULL but the head (layer %d) is in the range",
                         a->L + 1);
    if (tokens && a->has_emb) {
        FSC_TRY(check_tokens(tokens, a->N, a->V, "tokens"));
        FSC_TRY(fsc_device_upload(a->m->dev, a->tok, tokens, a->N * sizeof(int32_t)));
        a->have_tok = 1;
    }
    if (targets && a->has_head) {
        FSC_TRY(check_tokens(targets, a->N, a->V, "targets"));
        FSC_TRY(fsc_device_upload(a->m->dev, a->tgt, targets, a->N * sizeof(int32_t)));
        a->have_tgt = 1;
    }
    return FSC_OK;
}

float *fsc_gpt_acts_input(fsc_gpt_acts *a) { return a->o.first > 0 ? a->x[0] : NULL; }
float *fsc_gpt_acts_output(fsc_gpt_acts *a) { return a->o.last <= a->L ? a->x[a->hi - a->lo] : NULL; }
float *fsc_gpt_acts_grad_output(fsc_gpt_acts *a) { return a->o.last <= a->L ? a->dres : NULL; }
float *fsc_gpt_acts_grad_input(fsc_gpt_acts *a) { return a->o.first > 0 ? a->dres : NULL; }

/* Parameters (and gradients) of tensors [i0, i0 + n) must be materialized when layer uses them. */
static fsc_status need(const fsc_gpt *m, int i0, int n, int layer, int grads) {
    for (int i = i0; i < i0 + n; i++) {
        if (!m->param[i])
            return fsc_error(FSC_ERR_STATE, "gpt: parameter %s is not materialized (NULL) when layer %d runs",
                             m->info[i].name, layer);
        if (grads && !m->grad[i])
            return fsc_error(FSC_ERR_STATE, "gpt: gradient of %s is not bound (NULL) when layer %d runs backward",
                             m->info[i].name, layer);
    }
    return FSC_OK;
}

/* An MoE block's tensors: the 8 dense ones, the gate, and this rank's experts. */
static fsc_status need_moe(const fsc_gpt *m, int b, int layer, int grads) {
    int t0 = fsc_gpt_block_first_tensor(&m->cfg, b), first, count;
    FSC_TRY(need(m, t0, FSC_B_FC_W + 1, layer, grads));
    fsc_moe_local_experts(m->moe[b], &first, &count);
    return need(m, t0 + FSC_B_FC_W + 1 + 4 * first, 4 * count, layer, grads);
}

static void add_stats(fsc_moe_stats *sum, const fsc_moe_stats *st) {
    sum->aux_loss += st->aux_loss;
    sum->capacity = st->capacity;
    sum->tokens += st->tokens;
    sum->assigned += st->assigned;
    sum->dropped += st->dropped;
}

static float *xs(fsc_gpt_acts *a, int j) { return a->x[j - a->lo]; }
static float *xhost(fsc_gpt_acts *a, int j) { return a->xhost[j - a->lo]; }

/* The head forward: ln_f, logits against the tied wte, per-token losses. */
static fsc_status head_forward(fsc_gpt *m, fsc_gpt_acts *a, double *loss_sum) {
    fsc_device *dev = m->dev;
    int lnf = m->n_tensors - 2, C = a->C, V = a->V;
    FSC_TRY(need(m, lnf, 2, a->L + 1, 0));
    FSC_TRY(need(m, FSC_P_WTE, 1, a->L + 1, 0));
    FSC_TRY(fsc_layernorm_forward(dev, a->lnf, NULL, a->lnf_mean, a->lnf_rstd, xs(a, a->L), m->param[lnf],
                                  m->param[lnf + 1], a->N, C));
    FSC_TRY(fsc_linear_forward(dev, a->logits, NULL, a->lnf, m->param[FSC_P_WTE], NULL, a->N, C, V, 1));
    FSC_TRY(fsc_xent_forward(dev, a->losses, NULL, a->logits, a->tgt, a->N, V, V));
    return FSC_K(dev, sum, loss_sum, a->losses, a->N);
}

/* The head backward: dres = (overwrites) the gradient w.r.t. x[L]; m->dwte_head = (overwrites) the head's
 * part of the wte gradient; ln_f gradients +=. */
static fsc_status head_backward(fsc_gpt *m, fsc_gpt_acts *a, float dscale) {
    fsc_device *dev = m->dev;
    int lnf = m->n_tensors - 2, C = a->C, V = a->V;
    FSC_TRY(need(m, lnf, 2, a->L + 1, 1));
    FSC_TRY(need(m, FSC_P_WTE, 1, a->L + 1, 0));
    float *dlogits = a->work;                        /* (B, T, V) */
    float *dlnf = a->work + r64(a->N * (size_t)V);   /* (B, T, C) */
    fsc_xent_rec xr = { a->logits, a->tgt, a->N, V, V };
    FSC_TRY(fsc_xent_backward(dev, dlogits, &xr, dscale));
    fsc_linear_rec lr = { a->lnf, a->N, C, V, 1 };
    FSC_TRY(fsc_linear_backward(dev, dlnf, m->dwte_head, NULL, &lr, dlogits, m->param[FSC_P_WTE], 0.0f, 0.0f));
    FSC_TRY(fsc_device_memset(dev, a->dres, 0, a->N * (size_t)C * sizeof(float)));
    fsc_layernorm_rec nr = { xs(a, a->L), a->lnf_mean, a->lnf_rstd, a->N, C };
    return fsc_layernorm_backward(dev, a->dres, m->grad[lnf], m->grad[lnf + 1], &nr, dlnf, m->param[lnf]);
}

static fsc_status hook(fsc_status (*fn)(void *, int), void *ctx, int layer) {
    return fn ? fn(ctx, layer) : FSC_OK;
}

fsc_status fsc_gpt_forward(fsc_gpt *m, fsc_gpt_acts *a, const fsc_gpt_hooks *h, double *loss_sum) {
    static const fsc_gpt_hooks none = { 0 };
    if (!h) h = &none;
    if (loss_sum) *loss_sum = 0.0;
    if (a->m != m) return fsc_error(FSC_ERR_INVALID, "gpt forward: the record belongs to another model");
    if ((a->has_emb && !a->have_tok) || (a->has_head && !a->have_tgt))
        return fsc_error(FSC_ERR_STATE, "gpt forward: no micro-batch set (call fsc_gpt_acts_set_batch first)");
    a->fwd_done = 0;
    memset(&a->moe, 0, sizeof a->moe);
    fsc_device *dev = m->dev;
    for (int l = a->o.first; l <= a->o.last; l++) {
        FSC_TRY(hook(h->pre_forward, h->ctx, l));
        if (l >= 1 && l <= a->L && fsc_gpt_block_is_moe(&m->cfg, l - 1)) {
            int t0 = fsc_gpt_block_first_tensor(&m->cfg, l - 1);
            FSC_TRY(need_moe(m, l - 1, l, 0));
            fsc_moe_stats st;
            FSC_TRY(gpt_moe_forward(dev, xs(a, l), &a->mblk[l - a->b0], xs(a, l - 1), m->moe[l - 1],
                                    (const float *const *)&m->param[t0], a->work, &st));
            add_stats(&a->moe, &st);
        } else if (l == 0) {
            FSC_TRY(need(m, FSC_P_WTE, 2, 0, 0));
            FSC_TRY(fsc_embedding_forward(dev, xs(a, 0), NULL, a->tok, m->param[FSC_P_WTE], m->param[FSC_P_WPE],
                                          a->o.B, a->o.T, a->C));
        } else if (l <= a->L) {
            int t0 = fsc_gpt_block_first_tensor(&m->cfg, l - 1);
            FSC_TRY(need(m, t0, FSC_GPT_BLOCK_PARAMS, l, 0));
            FSC_TRY(fsc_block_forward(dev, xs(a, l), &a->blk[l - a->b0], xs(a, l - 1),
                                      (const float *const *)&m->param[t0], a->work));
            if (xhost(a, l - 1)) /* offload the input before its buffer takes x[l + 1] */
                FSC_TRY(fsc_device_download(dev, xhost(a, l - 1), xs(a, l - 1), a->N * (size_t)a->C * sizeof(float)));
        } else {
            double ls = 0.0;
            FSC_TRY(head_forward(m, a, &ls));
            if (loss_sum) *loss_sum = ls;
        }
        FSC_TRY(hook(h->post_forward, h->ctx, l));
    }
    a->fwd_done = 1;
    return FSC_OK;
}

fsc_status fsc_gpt_backward(fsc_gpt *m, fsc_gpt_acts *a, const fsc_gpt_hooks *h, float dscale) {
    static const fsc_gpt_hooks none = { 0 };
    if (!h) h = &none;
    if (a->m != m) return fsc_error(FSC_ERR_INVALID, "gpt backward: the record belongs to another model");
    if (!a->fwd_done)
        return fsc_error(FSC_ERR_STATE, "gpt backward: no forward to differentiate (backward runs once per "
                         "forward)");
    a->fwd_done = 0;
    fsc_device *dev = m->dev;
    for (int l = a->o.last; l >= a->o.first; l--) {
        FSC_TRY(hook(h->pre_backward, h->ctx, l));
        if (l == a->L + 1) {
            FSC_TRY(head_backward(m, a, dscale));
        } else if (l >= 1 && fsc_gpt_block_is_moe(&m->cfg, l - 1)) {
            int t0 = fsc_gpt_block_first_tensor(&m->cfg, l - 1);
            FSC_TRY(need_moe(m, l - 1, l, 1));
            float daux = m->cfg.moe_aux * dscale * (float)a->N;
            FSC_TRY(gpt_moe_backward(dev, a->dres, &m->grad[t0], &a->mblk[l - a->b0], m->moe[l - 1],
                                     (const float *const *)&m->param[t0], a->work, daux));
        } else if (l >= 1) {
            int t0 = fsc_gpt_block_first_tensor(&m->cfg, l - 1);
            FSC_TRY(need(m, t0, FSC_GPT_BLOCK_PARAMS, l, 1));
            const float *const *p = (const float *const *)&m->param[t0];
            fsc_block_rec *rec = &a->blk[l - a->b0];
            if (a->o.checkpoint) {
                if (xhost(a, l - 1))
                    FSC_TRY(fsc_device_upload(dev, xs(a, l - 1), xhost(a, l - 1), a->N * (size_t)a->C * sizeof(float)));
                FSC_TRY(fsc_block_forward(dev, NULL, rec, xs(a, l - 1), p, a->work));
            }
            FSC_TRY(fsc_block_backward(dev, a->dres, &m->grad[t0], rec, p, a->work));
        } else {
            FSC_TRY(need(m, FSC_P_WTE, 2, 0, 1));
            size_t n = (size_t)a->V * a->C;
            FSC_TRY(FSC_K(dev, axpy, m->grad[FSC_P_WTE], 1.0f, m->dwte_head, n));
            fsc_embedding_rec er = { a->tok, a->o.B, a->o.T, a->C };
            FSC_TRY(fsc_embedding_backward(dev, m->grad[FSC_P_WTE], m->grad[FSC_P_WPE], &er, a->dres));
        }
        FSC_TRY(hook(h->post_backward, h->ctx, l));
    }
    return FSC_OK;
}

const float *fsc_gpt_acts_logits(const fsc_gpt_acts *a) { return a && a->has_head ? a->logits : NULL; }
