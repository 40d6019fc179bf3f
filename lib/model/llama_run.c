/* Running the Llama (llama.h): the activation record of one micro-batch for a range of layers, and forward and
 * backward over that range with the strategies' hooks around every layer.
 *
 * Layers: 0 the embedding, 1..L the decoder layers, L+1 the head (model.norm, lm_head, cross entropy). The
 * residual stream x[j] is the output of layer j; the record holds x[j] for j in [lo, hi] (lo = first - 1, or 0
 * with the embedding; hi = min(last, L)). Backward keeps one gradient stream dres (B, T, C), updated in place
 * from the head down to the embedding; it is the record's grad_output and grad_input.
 *
 * A decoder layer's record (layer_rec) keeps n1 = input_layernorm(x), h = x + attention, n2 =
 * post_attention_layernorm(h), the attention's record (q, k after rotation, v, probabilities, heads' output)
 * and the MLP's (gate, up, their SwiGLU). With checkpoint every layer's record is bound to one shared area and
 * backward recomputes the layer's forward (the same kernels on the same input: the same bits) right after its
 * pre_backward hook. offload_inputs is ignored.
 * Not here: the description, initial values and the model object (llama.c). */
#include <stdlib.h>
#include <string.h>
#include "fsc/nn.h"
#include "core/device_impl.h"
#include "llama_impl.h"

typedef struct {
    fsc_rmsnorm_rec n1, n2;
    float *ln1, *rstd1;       /* (B, T, C), (B, T) */
    fsc_self_attn_rec attn;
    float *h;                 /* (B, T, C) the residual stream after attention */
    float *ln2, *rstd2;       /* (B, T, C), (B, T) */
    fsc_swiglu_mlp_rec mlp;
} layer_rec;

typedef struct {
    llama *m;
    fsc_model_acts_opts o;
    int L, T, C, V;
    size_t N;                /* B * T */
    int b0, b1;              /* decoder layers in range: b0..b1 (none when b0 > b1) */
    int has_emb, has_head;
    int lo, hi;              /* stream range */
    float *mem;              /* the one device allocation, FSC_TAG_ACTS */
    size_t bytes;
    int32_t *tok, *tgt;      /* (B, T) device */
    float **x;               /* x[j - lo]: (B, T, C) output of layer j */
    layer_rec *rec;          /* b1 - b0 + 1 (all bound to one area under checkpoint) */
    float *lnf, *rstdf;      /* (B, T, C), (B, T) */
    fsc_rmsnorm_rec nf;
    float *logits;           /* (B, T, V) */
    float *losses;           /* (B, T) */
    float *dres;             /* (B, T, C) gradient stream */
    float *work;             /* scratch of layers, head and embedding */
    int have_tok, have_tgt, fwd_done;
} acts;

static size_t r64(size_t n) { return (n + 63) / 64 * 64; }

static fsc_self_attn_config attn_config(const fsc_llama_config *c, int B) {
    return (fsc_self_attn_config){ .B = B, .T = c->seq, .C = c->dim, .NH = c->heads, .KVH = c->kv_heads,
                                   .HS = c->dim / c->heads, .rope_theta = c->rope_theta };
}

size_t llama_layer_saved_floats(const fsc_llama_config *c, int B) {
    size_t N = (size_t)B * c->seq, NC = N * (size_t)c->dim;
    fsc_self_attn_config ac = attn_config(c, B);
    return 3 * r64(NC) + 2 * r64(N) + fsc_self_attn_saved_floats(&ac) + fsc_swiglu_mlp_saved_floats(N, c->ffn);
}

static size_t layer_work_floats(const fsc_llama_config *c, int B) {
    size_t N = (size_t)B * c->seq;
    fsc_self_attn_config ac = attn_config(c, B);
    size_t aw = fsc_self_attn_work_floats(&ac), mw = fsc_swiglu_mlp_work_floats(N, c->ffn);
    return r64(N * (size_t)c->dim) + (aw > mw ? aw : mw); /* one (B, T, C) scratch, then the module's */
}

static void layer_bind(const fsc_llama_config *c, int B, layer_rec *r, float *s) {
    size_t N = (size_t)B * c->seq, NC = N * (size_t)c->dim;
    fsc_self_attn_config ac = attn_config(c, B);
    memset(r, 0, sizeof *r);
    r->ln1 = s, s += r64(NC);
    r->h = s, s += r64(NC);
    r->ln2 = s, s += r64(NC);
    r->rstd1 = s, s += r64(N);
    r->rstd2 = s, s += r64(N);
    fsc_self_attn_rec_bind(&r->attn, s, &ac);
    s += fsc_self_attn_saved_floats(&ac);
    fsc_swiglu_mlp_rec_bind(&r->mlp, s, N, c->dim, c->ffn);
}

/* Lay the record out in one allocation: with base NULL only the total (in floats) is computed. */
typedef struct { float *base; size_t off; } arena;
static float *take(arena *ar, size_t n) {
    float *p = ar->base ? ar->base + ar->off : NULL;
    ar->off += r64(n);
    return p;
}

static size_t layout(acts *a, float *base) {
    const fsc_llama_config *c = &a->m->cfg;
    arena ar = { base, 0 };
    size_t N = a->N, NC = N * (size_t)a->C, work = a->has_emb ? (size_t)a->T * a->C : 0; /* embedding: dwpe */
    a->tok = (int32_t *)take(&ar, N);
    a->tgt = (int32_t *)take(&ar, N);
    for (int j = a->lo; j <= a->hi; j++) a->x[j - a->lo] = take(&ar, NC);
    a->dres = take(&ar, NC);
    size_t saved = llama_layer_saved_floats(c, a->o.B);
    float *shared = a->o.checkpoint && a->b0 <= a->b1 ? take(&ar, saved) : NULL;
    for (int l = a->b0; l <= a->b1; l++) {
        float *s = a->o.checkpoint ? shared : take(&ar, saved);
        if (base) layer_bind(c, a->o.B, &a->rec[l - a->b0], s);
    }
    if (a->b0 <= a->b1 && layer_work_floats(c, a->o.B) > work) work = layer_work_floats(c, a->o.B);
    if (a->has_head) {
        a->lnf = take(&ar, NC);
        a->rstdf = take(&ar, N);
        a->logits = take(&ar, N * (size_t)a->V);
        a->losses = take(&ar, N);
        size_t hw = r64(N * (size_t)a->V) + r64(NC); /* dlogits, dlnf */
        if (hw > work) work = hw;
    }
    a->work = take(&ar, work);
    return ar.off;
}

fsc_status llama_acts_create(void *ctx, const fsc_model_acts_opts *o, fsc_model_acts **out) {
    llama *m = ctx;
    const fsc_llama_config *c = &m->cfg;
    *out = NULL;
    int L = c->layers;
    if (o->B < 1) return fsc_error(FSC_ERR_INVALID, "llama acts: batch B=%d; need B >= 1", o->B);
    if (o->first < 0 || o->last > L + 1 || o->first > o->last)
        return fsc_error(FSC_ERR_INVALID, "llama acts: layer range [%d, %d] is not inside [0, %d] (%d decoder layers)",
                         o->first, o->last, L + 1, L);
    double est = (double)o->B * c->seq * ((double)c->heads * c->seq * 3 + (double)c->dim * 8 * (L + 2) +
                                          (double)c->ffn * 3 * L + (double)c->vocab * 2);
    if ((double)o->B * c->seq > 2147483647.0 || (double)o->B * c->heads > 2147483647.0 || est > 1e15)
        return fsc_error(FSC_ERR_INVALID, "llama acts: B=%d is too large for this model", o->B);
    acts *a = calloc(1, sizeof *a);
    if (!a) return fsc_error(FSC_ERR_NOMEM, "llama acts: out of host memory");
    a->m = m;
    a->o = *o;
    a->L = L, a->T = c->seq, a->C = c->dim, a->V = c->vocab;
    a->N = (size_t)o->B * c->seq;
    a->has_emb = o->first == 0;
    a->has_head = o->last == L + 1;
    a->b0 = o->first > 1 ? o->first : 1;
    a->b1 = o->last < L ? o->last : L;
    a->lo = o->first == 0 ? 0 : o->first - 1;
    a->hi = o->last < L ? o->last : L;
    int ns = a->hi - a->lo + 1, nb = a->b1 >= a->b0 ? a->b1 - a->b0 + 1 : 0;
    a->x = calloc((size_t)ns, sizeof *a->x);
    a->rec = calloc(nb ? (size_t)nb : 1, sizeof *a->rec);
    fsc_status s = a->x && a->rec ? FSC_OK : fsc_error(FSC_ERR_NOMEM, "llama acts: out of host memory");
    size_t floats = s == FSC_OK ? layout(a, NULL) : 0;
    if (s == FSC_OK) s = fsc_device_alloc(m->dev, FSC_TAG_ACTS, floats * sizeof(float), (void **)&a->mem);
    if (s != FSC_OK) {
        llama_acts_free(ctx, (fsc_model_acts *)a);
        return s;
    }
    a->bytes = floats * sizeof(float);
    layout(a, a->mem);
    *out = (fsc_model_acts *)a;
    return FSC_OK;
}

void llama_acts_free(void *ctx, fsc_model_acts *am) {
    acts *a = (acts *)am;
    if (!a) return;
    fsc_device_release(((llama *)ctx)->dev, a->mem);
    free(a->x);
    free(a->rec);
    free(a);
}

size_t llama_acts_bytes(void *ctx, const fsc_model_acts *a) {
    (void)ctx;
    return a ? ((const acts *)a)->bytes : 0;
}

static fsc_status check_tokens(const int32_t *t, size_t n, int V, const char *what) {
    for (size_t i = 0; i < n; i++)
        if (t[i] < 0 || t[i] >= V)
            return fsc_error(FSC_ERR_INVALID, "llama: %s[%zu] = %d is outside the vocabulary [0, %d)", what, i,
                             (int)t[i], V);
    return FSC_OK;
}

fsc_status llama_set_batch(void *ctx, fsc_model_acts *am, const void *inputs, const void *targets) {
    llama *m = ctx;
    acts *a = (acts *)am;
    a->fwd_done = a->have_tok = a->have_tgt = 0;
    if (a->has_emb && !inputs)
        return fsc_error(FSC_ERR_INVALID, "llama: tokens are NULL but the embedding (layer 0) is in the range");
    if (a->has_head && !targets)
        return fsc_error(FSC_ERR_INVALID, "llama: targets are NULL but the head (layer %d) is in the range", a->L + 1);
    if (a->has_emb) {
        FSC_TRY(check_tokens(inputs, a->N, a->V, "tokens"));
        FSC_TRY(fsc_device_upload(m->dev, a->tok, inputs, a->N * sizeof(int32_t)));
        a->have_tok = 1;
    }
    if (a->has_head) {
        FSC_TRY(check_tokens(targets, a->N, a->V, "targets"));
        FSC_TRY(fsc_device_upload(m->dev, a->tgt, targets, a->N * sizeof(int32_t)));
        a->have_tgt = 1;
    }
    return FSC_OK;
}

float *llama_stream(void *ctx, fsc_model_acts *am, fsc_stream which) {
    (void)ctx;
    acts *a = (acts *)am;
    switch (which) {
    case FSC_STREAM_INPUT: return a->o.first > 0 ? a->x[0] : NULL;
    case FSC_STREAM_OUTPUT: return a->o.last <= a->L ? a->x[a->hi - a->lo] : NULL;
    case FSC_STREAM_GRAD_OUTPUT: return a->o.last <= a->L ? a->dres : NULL;
    default: return a->o.first > 0 ? a->dres : NULL;
    }
}

size_t llama_stream_floats(void *ctx, int B) {
    const fsc_llama_config *c = &((llama *)ctx)->cfg;
    return (size_t)B * c->seq * c->dim;
}

/* Parameters (and gradients) of tensors [i0, i0 + n) must be bound when layer uses them. */
static fsc_status need(const llama *m, int i0, int n, int layer, int grads) {
    for (int i = i0; i < i0 + n; i++) {
        if (!m->param[i])
            return fsc_error(FSC_ERR_STATE, "llama: parameter %s is not materialized (NULL) when layer %d runs",
                             m->info[i].name, layer);
        if (grads && !m->grad[i])
            return fsc_error(FSC_ERR_STATE, "llama: gradient of %s is not bound (NULL) when layer %d runs backward",
                             m->info[i].name, layer);
    }
    return FSC_OK;
}

static float *xs(acts *a, int j) { return a->x[j - a->lo]; }
static int first_tensor(int l) { return 1 + LLAMA_LAYER_PARAMS * (l - 1); } /* of decoder layer l (1..L) */

static fsc_self_attn_params attn_params(float *const *p) {
    return (fsc_self_attn_params){ .wq = p[LL_Q], .wk = p[LL_K], .wv = p[LL_V], .wo = p[LL_O] };
}

/* Decoder layer forward: out = h + mlp(post_attention_layernorm(h)), h = x + attn(input_layernorm(x)).
 * out NULL: stop once the record is complete (recomputation). */
static fsc_status layer_forward(llama *m, acts *a, layer_rec *r, float *out, const float *x, float *const *p) {
    fsc_device *dev = m->dev;
    size_t N = a->N, NC = N * (size_t)a->C;
    float eps = m->cfg.norm_eps, *proj = a->work, *inner = a->work + r64(NC); /* proj (B, T, C) */
    fsc_self_attn_params ap = attn_params(p);
    FSC_TRY(fsc_rmsnorm_forward(dev, r->ln1, &r->n1, r->rstd1, x, p[LL_NORM1], N, a->C, eps));
    FSC_TRY(fsc_self_attn_forward(dev, proj, &r->attn, r->ln1, &ap, inner));
    FSC_TRY(fsc_residual_forward(dev, r->h, x, proj, NC));
    FSC_TRY(fsc_rmsnorm_forward(dev, r->ln2, &r->n2, r->rstd2, r->h, p[LL_NORM2], N, a->C, eps));
    FSC_TRY(fsc_swiglu_mlp_forward(dev, out ? proj : NULL, &r->mlp, r->ln2, p[LL_GATE], p[LL_UP], p[LL_DOWN]));
    return out ? fsc_residual_forward(dev, out, r->h, proj, NC) : FSC_OK;
}

/* dres: the gradient w.r.t. the layer's output on entry, w.r.t. its input on return; g +=. */
static fsc_status layer_backward(llama *m, acts *a, const layer_rec *r, float *const *p, float *const *g) {
    fsc_device *dev = m->dev;
    float *dln = a->work, *inner = a->work + r64(a->N * (size_t)a->C); /* dln (B, T, C) */
    FSC_TRY(fsc_swiglu_mlp_backward(dev, dln, g[LL_GATE], g[LL_UP], g[LL_DOWN], &r->mlp, a->dres, p[LL_GATE],
                                    p[LL_UP], p[LL_DOWN], inner));
    FSC_TRY(fsc_rmsnorm_backward(dev, a->dres, g[LL_NORM2], &r->n2, dln, p[LL_NORM2])); /* dres = d h */
    fsc_self_attn_params ap = attn_params(p);
    fsc_self_attn_grads ag = { .wq = g[LL_Q], .wk = g[LL_K], .wv = g[LL_V], .wo = g[LL_O] };
    FSC_TRY(fsc_self_attn_backward(dev, dln, &ag, &r->attn, a->dres, &ap, inner));
    return fsc_rmsnorm_backward(dev, a->dres, g[LL_NORM1], &r->n1, dln, p[LL_NORM1]); /* dres = d x */
}

static fsc_status head_forward(llama *m, acts *a, double *loss_sum) {
    fsc_device *dev = m->dev;
    int nrm = m->m.n_tensors - 2, head = nrm + 1;
    FSC_TRY(need(m, nrm, 2, a->L + 1, 0));
    FSC_TRY(fsc_rmsnorm_forward(dev, a->lnf, &a->nf, a->rstdf, xs(a, a->L), m->param[nrm], a->N, a->C,
                                m->cfg.norm_eps));
    FSC_TRY(fsc_linear_forward(dev, a->logits, NULL, a->lnf, m->param[head], NULL, a->N, a->C, a->V, 1));
    FSC_TRY(fsc_xent_forward(dev, a->losses, NULL, a->logits, a->tgt, a->N, a->V, a->V));
    return FSC_K(dev, sum, loss_sum, a->losses, a->N);
}

/* dres = (overwrites) the gradient w.r.t. x[L]; norm and lm_head gradients +=. */
static fsc_status head_backward(llama *m, acts *a, float dscale) {
    fsc_device *dev = m->dev;
    int nrm = m->m.n_tensors - 2, head = nrm + 1;
    FSC_TRY(need(m, nrm, 2, a->L + 1, 1));
    float *dlogits = a->work;                         /* (B, T, V) */
    float *dlnf = a->work + r64(a->N * (size_t)a->V); /* (B, T, C) */
    fsc_xent_rec xr = { a->logits, a->tgt, a->N, a->V, a->V };
    FSC_TRY(fsc_xent_backward(dev, dlogits, &xr, dscale));
    fsc_linear_rec lr = { a->lnf, a->N, a->C, a->V, 1 };
    FSC_TRY(fsc_linear_backward(dev, dlnf, m->grad[head], NULL, &lr, dlogits, m->param[head], 0.0f, 1.0f));
    FSC_TRY(fsc_device_memset(dev, a->dres, 0, a->N * (size_t)a->C * sizeof(float)));
    return fsc_rmsnorm_backward(dev, a->dres, m->grad[nrm], &a->nf, dlnf, m->param[nrm]);
}

static fsc_status hook(fsc_status (*fn)(void *, int), void *ctx, int layer) { return fn ? fn(ctx, layer) : FSC_OK; }

fsc_status llama_forward(void *ctx, fsc_model_acts *am, const fsc_model_hooks *h, double *loss_sum) {
    static const fsc_model_hooks none = { 0 };
    llama *m = ctx;
    acts *a = (acts *)am;
    if (!h) h = &none;
    if (loss_sum) *loss_sum = 0.0;
    if (a->m != m) return fsc_error(FSC_ERR_INVALID, "llama forward: the record belongs to another model");
    if ((a->has_emb && !a->have_tok) || (a->has_head && !a->have_tgt))
        return fsc_error(FSC_ERR_STATE, "llama forward: no micro-batch set (set_batch first)");
    a->fwd_done = 0;
    for (int l = a->o.first; l <= a->o.last; l++) {
        FSC_TRY(hook(h->pre_forward, h->ctx, l));
        if (l == 0) {
            FSC_TRY(need(m, 0, 1, 0, 0));
            FSC_TRY(fsc_embedding_forward(m->dev, xs(a, 0), NULL, a->tok, m->param[0], m->zero_pos, a->o.B, a->T,
                                          a->C));
        } else if (l <= a->L) {
            int t0 = first_tensor(l);
            FSC_TRY(need(m, t0, LLAMA_LAYER_PARAMS, l, 0));
            FSC_TRY(layer_forward(m, a, &a->rec[l - a->b0], xs(a, l), xs(a, l - 1), &m->param[t0]));
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

fsc_status llama_backward(void *ctx, fsc_model_acts *am, const fsc_model_hooks *h, float dscale) {
    static const fsc_model_hooks none = { 0 };
    llama *m = ctx;
    acts *a = (acts *)am;
    if (!h) h = &none;
    if (a->m != m) return fsc_error(FSC_ERR_INVALID, "llama backward: the record belongs to another model");
    if (!a->fwd_done)
        return fsc_error(FSC_ERR_STATE, "llama backward: no forward to differentiate (backward runs once per forward)");
    a->fwd_done = 0;
    for (int l = a->o.last; l >= a->o.first; l--) {
        FSC_TRY(hook(h->pre_backward, h->ctx, l));
        if (l == a->L + 1) {
            FSC_TRY(head_backward(m, a, dscale));
        } else if (l >= 1) {
            int t0 = first_tensor(l);
            FSC_TRY(need(m, t0, LLAMA_LAYER_PARAMS, l, 1));
            layer_rec *r = &a->rec[l - a->b0];
            if (a->o.checkpoint) FSC_TRY(layer_forward(m, a, r, NULL, xs(a, l - 1), &m->param[t0]));
            FSC_TRY(layer_backward(m, a, r, &m->param[t0], &m->grad[t0]));
        } else {
            FSC_TRY(need(m, 0, 1, 0, 1));
            float *dpos = a->work; /* (T, C): the zero position table's gradient, discarded */
            FSC_TRY(fsc_device_memset(m->dev, dpos, 0, (size_t)a->T * a->C * sizeof(float)));
            fsc_embedding_rec er = { a->tok, a->o.B, a->T, a->C };
            FSC_TRY(fsc_embedding_backward(m->dev, m->grad[0], dpos, &er, a->dres));
        }
        FSC_TRY(hook(h->post_backward, h->ctx, l));
    }
    return FSC_OK;
}
