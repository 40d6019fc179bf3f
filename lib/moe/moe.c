/* The mixture-of-experts layer (moe.h): gate, dispatch of tokens to capacity slots, all-to-all to the
 * ranks holding the experts, the experts, all-to-all back, and the weighted combine; backward in reverse.
 *
 * Layouts. Source side (the rank's own tokens): slots (E, groups, cap, C), slot (e, g, c) at
 * (e groups + g) cap + c. An all-to-all sends rank j the block of its experts (El, groups, cap, C); the
 * rank receives (G, El, groups, cap, C) and reorders it to the expert side (El, G, groups, cap, C), so each
 * local expert's R = G groups cap rows are contiguous in (source rank, group, slot) order. On one rank with
 * G x groups groups the expert side is the same matrix: the layer is bit-identical across expert-parallel
 * sizes. The reorder is the heads_merge/heads_split shuffle of the attention kernels (NH = G, T = El).
 *
 * The experts run per (source rank, group) block of cap rows, and each block's weight gradients are
 * computed into a zeroed scratch and then added to the gradients: the sum over blocks is a plain sequence
 * of additions in block order, whatever the products and the bias-gradient kernel do inside a block. With a
 * term sink (fsc_moe_backward_terms) each source rank's blocks are added the same way into a zeroed sum of
 * their own, handed to the sink instead of the gradients: that source's tokens' part, as one rank computes it.
 *
 * Row gathers use the embedding kernel on a table with an extra zero row (token index S marks an empty
 * slot); the weighted combine scales rows with a batched K = 1 gemm and scatter-adds them with the
 * embedding's backward kernel (a token's two contributions are added in slot order; two addends commute).
 * Not here: routing arithmetic (moe_route.c). */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "moe_impl.h"
#include "moe_split.h"
#include "fsc/nn.h"
#include "fsc/rng.h"
#include "core/kernels.h"

struct fsc_moe {
    fsc_moe_config cfg;
    char name[64];
    fsc_device *dev;
    fsc_comm *ep;           /* NULL: one rank */
    int G, rank, E, El, C, H, k;
    size_t per_expert;      /* floats of one expert's parameters (0 for identity experts) */
    size_t P;
    /* fsc_moe_create only: (P) the gate (C, E), then El experts: c_fc.w (C, H), c_fc.b (H), c_proj.w (H, C),
     * c_proj.b (C); and the tables into them (1 + 4 E entries, NULL for other ranks' experts) */
    float *params, *grads;
    const float **ptab;
    float **gtab;
};

/* What one forward keeps for its backward. */
struct fsc_moe_rec {
    fsc_device *dev;
    int S, groups, cap;
    int E, k, C, H, mlp;    /* the maker's shapes: what slots and sizes follow */
    size_t slots;           /* E groups cap */
    moe_route route;
    const float *inp;
    int fwd_done;
    size_t bytes;
    float *mem;             /* one allocation: */
    int32_t *idx;           /* (slots) token of each slot, S when empty */
    float *sgate;           /* (slots) combine weights */
    float *xe, *hpre, *hact;/* expert side (slots, C), (slots, H), (slots, H) */
    float *ysrc;            /* source side (slots, C): expert outputs back at their tokens' rank */
    float *zrow, *pe;       /* (C) zeros; (C) scratch the embedding backward kernel writes */
};

static size_t r64(size_t n) { return (n + 63) / 64 * 64; }

float *fsc_moe_params(fsc_moe *m) {
    if (!m) return NULL;
    return m->params;
}
float *fsc_moe_grads(fsc_moe *m) {
    if (!m) return NULL;
    return m->grads;
}
size_t fsc_moe_num_local(const fsc_moe *m) {
    if (!m) return 0;
    return m->P;
}
size_t fsc_moe_expert_offset(const fsc_moe *m, int j) {
    if (!m) return 0;
    return (size_t)m->C * m->E + (size_t)j * m->per_expert;
}

int fsc_moe_num_tensors(const fsc_moe_config *cfg) {
    if (!cfg || cfg->experts < 1 || cfg->experts > 4096) return 0; /* not a layer's (fsc_moe_create refuses it) */
    return cfg->expert == FSC_MOE_EXPERT_IDENTITY ? 1 : 1 + 4 * cfg->experts;
}

void fsc_moe_local_experts(const fsc_moe *m, int *first, int *count) {
    if (!m || !first || !count) return;
    *first = m->rank * m->El;
    *count = m->El;
}

int fsc_moe_capacity(const fsc_moe *m, int S, int groups) {
    if (!m || S < 1 || groups < 1 || S % groups != 0) return 0; /* no dispatch groups of S / groups tokens */
    return moe_capacity(S / groups, m->E, m->k, m->cfg.capacity_factor);
}

/* local expert j's tensors in a table: c_fc.weight, c_fc.bias, c_proj.weight, c_proj.bias */
static int tab_index(const fsc_moe *m, int j, int t) { return 1 + 4 * (m->rank * m->El + j) + t; }

static fsc_status init_params(fsc_moe *m, uint64_t seed) {
    float *h = malloc(m->P * sizeof(float));
    if (!h) return fsc_error(FSC_ERR_NOMEM, "moe: out of host memory for %zu parameters", m->P);
    char nm[128];
    size_t C = (size_t)m->C, H = (size_t)m->H;
    snprintf(nm, sizeof nm, "%s.gate.weight", m->name);
    fsc_rng_fill_normal(h, C * m->E, seed, nm, 0, 0.0f, 0.02f);
    for (int j = 0; j < m->El && m->per_expert; j++) {
        int e = m->rank * m->El + j;
        float *p = h + fsc_moe_expert_offset(m, j);
        snprintf(nm, sizeof nm, "%s.experts.%d.c_fc.weight", m->name, e);
        fsc_rng_fill_normal(p, C * H, seed, nm, 0, 0.0f, 0.02f);
        memset(p + C * H, 0, H * sizeof(float));
        snprintf(nm, sizeof nm, "%s.experts.%d.c_proj.weight", m->name, e);
        fsc_rng_fill_normal(p + C * H + H, H * C, seed, nm, 0, 0.0f, 0.02f);
        memset(p + 2 * C * H + H, 0, C * sizeof(float));
    }
    fsc_status s = fsc_device_upload(m->dev, m->params, h, m->P * sizeof(float));
    free(h);
    return s;
}

/* The tables of an owning layer: the gate, then this rank's experts. */
static fsc_status own_tables(fsc_moe *m) {
    int n = fsc_moe_num_tensors(&m->cfg);
    m->ptab = calloc((size_t)n, sizeof *m->ptab);
    m->gtab = calloc((size_t)n, sizeof *m->gtab);
    if (!m->ptab || !m->gtab) return fsc_error(FSC_ERR_NOMEM, "moe: out of host memory");
    m->ptab[0] = m->params, m->gtab[0] = m->grads;
    size_t C = (size_t)m->C, H = (size_t)m->H, sub[4] = { 0, C * H, C * H + H, 2 * C * H + H };
    for (int j = 0; j < m->El && m->per_expert; j++)
        for (int t = 0; t < 4; t++) {
            size_t off = fsc_moe_expert_offset(m, j) + sub[t];
            m->ptab[tab_index(m, j, t)] = m->params + off;
            m->gtab[tab_index(m, j, t)] = m->grads + off;
        }
    return FSC_OK;
}

static fsc_status create(fsc_device *dev, fsc_comm *ep, const fsc_moe_config *cfg, fsc_moe **out) {
    *out = NULL;
    if (!dev || !cfg) return fsc_error(FSC_ERR_INVALID, "moe: device or config NULL");
    int G = ep ? fsc_comm_size(ep) : 1;
    int H = cfg->hidden ? cfg->hidden : 4 * cfg->dim;
    float cf = cfg->capacity_factor ? cfg->capacity_factor : 1.0f;
    if (cfg->dim < 1 || cfg->experts < 1 || H < 1 || cfg->dim > (1 << 16) || H > (1 << 18) || cfg->experts > 4096)
        return fsc_error(FSC_ERR_INVALID, "moe: dim %d, hidden %d and experts %d must be positive (and at most "
                         "65536, 262144 and 4096)", cfg->dim, H, cfg->experts);
    if (cfg->top_k != 1 && cfg->top_k != 2)
        return fsc_error(FSC_ERR_INVALID, "moe: top_k is %d; top-1 and top-2 gating are supported", cfg->top_k);
    if (cfg->top_k > cfg->experts)
        return fsc_error(FSC_ERR_INVALID, "moe: top-%d gating needs at least %d experts, not %d", cfg->top_k,
                         cfg->top_k, cfg->experts);
    if (!(cf > 0) || !isfinite(cf))
        return fsc_error(FSC_ERR_INVALID, "moe: capacity factor %g must be a positive number", (double)cf);
    if (cfg->experts % G != 0)
        return fsc_error(FSC_ERR_INVALID, "moe: %d experts do not split over an expert-parallel group of %d",
                         cfg->experts, G);
    if (cfg->expert != FSC_MOE_EXPERT_MLP && cfg->expert != FSC_MOE_EXPERT_IDENTITY)
        return fsc_error(FSC_ERR_INVALID, "moe: unknown expert kind %d", (int)cfg->expert);
    fsc_moe *m = calloc(1, sizeof *m);
    if (!m) return fsc_error(FSC_ERR_NOMEM, "moe: out of host memory");
    m->cfg = *cfg;
    m->cfg.hidden = H, m->cfg.capacity_factor = cf;
    snprintf(m->name, sizeof m->name, "%s", cfg->name ? cfg->name : "moe");
    m->cfg.name = m->name;
    m->dev = dev, m->ep = ep, m->G = G, m->rank = ep ? fsc_comm_rank(ep) : 0;
    m->E = cfg->experts, m->El = cfg->experts / G, m->C = cfg->dim, m->H = H, m->k = cfg->top_k;
    m->per_expert = cfg->expert == FSC_MOE_EXPERT_MLP ? 2 * (size_t)m->C * H + (size_t)H + (size_t)m->C : 0;
    m->P = (size_t)m->C * m->E + (size_t)m->El * m->per_expert;
    *out = m;
    return FSC_OK;
}

fsc_status fsc_moe_create_view(fsc_device *dev, fsc_comm *ep, const fsc_moe_config *cfg, fsc_moe **out) {
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(cfg);
    FSC_CHECK_ARG(out);
    return create(dev, ep, cfg, out);
}

fsc_status fsc_moe_create(fsc_device *dev, fsc_comm *ep, const fsc_moe_config *cfg, uint64_t seed, fsc_moe **out) {
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(cfg);
    FSC_CHECK_ARG(out);
    fsc_moe *m;
    FSC_TRY(create(dev, ep, cfg, &m));
    fsc_status s = fsc_device_alloc(dev, FSC_TAG_PARAMS, m->P * sizeof(float), (void **)&m->params);
    if (s == FSC_OK) s = fsc_device_calloc(dev, FSC_TAG_GRADS, m->P * sizeof(float), (void **)&m->grads);
    if (s == FSC_OK) s = init_params(m, seed);
    if (s == FSC_OK) s = own_tables(m);
    if (s != FSC_OK) {
        fsc_moe_free(m);
        return s;
    }
    *out = m;
    return FSC_OK;
}

void fsc_moe_free(fsc_moe *m) {
    if (!m) return;
    fsc_device_release(m->dev, m->params);
    fsc_device_release(m->dev, m->grads);
    free(m->ptab);
    free(m->gtab);
    free(m);
}

fsc_status fsc_moe_rec_create(fsc_moe *m, int S, int groups, fsc_moe_rec **out) {
    FSC_CHECK_ARG(out);
    *out = NULL;
    FSC_CHECK_ARG(m);
    if (S < 1 || groups < 1 || S % groups != 0)
        return fsc_error(FSC_ERR_INVALID, "moe: %d tokens do not split into %d dispatch groups", S, groups);
    int cap = fsc_moe_capacity(m, S, groups);
    double slots = (double)m->E * groups * cap;
    if (slots * (m->H > m->C ? m->H : m->C) > INT_MAX || (double)S * m->C > INT_MAX || (double)S * m->E > INT_MAX)
        return fsc_error(FSC_ERR_INVALID, "moe: %d tokens with %d experts of capacity %d are too many for one call",
                         S, m->E, cap);
    fsc_moe_rec *r = calloc(1, sizeof *r);
    if (!r) return fsc_error(FSC_ERR_NOMEM, "moe record: out of host memory");
    r->dev = m->dev, r->S = S, r->groups = groups, r->cap = cap, r->slots = (size_t)slots;
    r->E = m->E, r->k = m->k, r->C = m->C, r->H = m->H, r->mlp = m->per_expert > 0;
    size_t sl = r->slots, C = (size_t)m->C, H = (size_t)m->H, mlp = m->per_expert ? 1 : 0;
    size_t n = 2 * r64(sl) + 2 * r64(sl * C) + 2 * mlp * r64(sl * H) + 2 * r64(C);
    fsc_status s = fsc_device_alloc(m->dev, FSC_TAG_ACTS, n * sizeof(float), (void **)&r->mem);
    if (s != FSC_OK) {
        free(r);
        return s;
    }
    r->bytes = n * sizeof(float);
    float *p = r->mem;
    r->idx = (int32_t *)p, p += r64(sl);
    r->sgate = p, p += r64(sl);
    r->xe = p, p += r64(sl * C);
    r->ysrc = p, p += r64(sl * C);
    r->hpre = mlp ? p : NULL, p += mlp * r64(sl * H);
    r->hact = mlp ? p : NULL, p += mlp * r64(sl * H);
    r->zrow = p, p += r64(C);
    r->pe = p;
    s = fsc_device_memset(m->dev, r->zrow, 0, C * sizeof(float));
    if (s != FSC_OK) {
        fsc_moe_rec_free(r);
        return s;
    }
    *out = r;
    return FSC_OK;
}

void fsc_moe_rec_free(fsc_moe_rec *r) {
    if (!r) return;
    fsc_device_release(r->dev, r->mem);
    moe_route_free(&r->route);
    free(r);
}

size_t fsc_moe_rec_bytes(const fsc_moe_rec *r) { return r ? r->bytes : 0; }

/* source side (E, groups, cap, C) -> expert side (El, G, groups, cap, C); tmp: slots C floats */
static fsc_status to_experts(fsc_moe *m, const fsc_moe_rec *r, float *dst, const float *src, float *tmp) {
    size_t n = r->slots * (size_t)m->C;
    if (m->G == 1) return fsc_device_copy(m->dev, dst, src, n * sizeof(float));
    size_t block = n / (size_t)m->G, X = block / (size_t)m->El;
    FSC_TRY(fsc_comm_all_to_all(m->ep, src, tmp, block, FSC_F32));
    return fsc_k_heads_merge(m->dev, dst, tmp, 1, m->El, m->G, (int)X);
}

/* expert side -> source side (the inverse) */
static fsc_status to_sources(fsc_moe *m, const fsc_moe_rec *r, float *dst, const float *src, float *tmp) {
    size_t n = r->slots * (size_t)m->C;
    if (m->G == 1) return fsc_device_copy(m->dev, dst, src, n * sizeof(float));
    size_t block = n / (size_t)m->G, X = block / (size_t)m->El;
    FSC_TRY(fsc_k_heads_split(m->dev, tmp, src, 1, m->El, m->G, (int)X));
    return fsc_comm_all_to_all(m->ep, tmp, dst, block, FSC_F32);
}

/* rows (slots, C) of src (S, C) by idx; an empty slot (S) gets zeros. table: (S + 1, C) scratch. */
static fsc_status gather_rows(fsc_moe *m, const fsc_moe_rec *r, float *dst, const float *src, float *table) {
    size_t SC = (size_t)r->S * m->C;
    FSC_TRY(fsc_device_copy(m->dev, table, src, SC * sizeof(float)));
    FSC_TRY(fsc_device_memset(m->dev, table + SC, 0, (size_t)m->C * sizeof(float)));
    return fsc_k_encoder_forward(m->dev, dst, r->idx, table, r->zrow, (int)r->slots, 1, m->C);
}

/* dst (S, C) = (add ? dst : 0) + rows of src (slots, C) at their tokens, in slot order.
 * table: (S + 1, C) scratch. */
static fsc_status scatter_rows(fsc_moe *m, const fsc_moe_rec *r, float *dst, const float *src, float *table,
                               int add) {
    size_t SC = (size_t)r->S * m->C, zero_from = add ? SC : 0;
    if (add) FSC_TRY(fsc_device_copy(m->dev, table, dst, SC * sizeof(float)));
    FSC_TRY(fsc_device_memset(m->dev, table + zero_from, 0, (SC + m->C - zero_from) * sizeof(float)));
    FSC_TRY(fsc_k_encoder_backward(m->dev, table, r->pe, src, r->idx, (int)r->slots, 1, m->C));
    return fsc_device_copy(m->dev, dst, table, SC * sizeof(float));
}

/* dst[s, :] = w[s] * src[s, :] for every slot: a batch of (1 x 1) @ (1 x C) products */
static fsc_status scale_rows(fsc_moe *m, const fsc_moe_rec *r, float *dst, const float *src, const float *w) {
    int C = m->C;
    return fsc_k_gemm(m->dev, 0, 0, 1, C, 1, 1.0f, w, 1, 1, src, C, C, 0.0f, dst, C, C, (int)r->slots);
}

/* out[s] = a[s, :] . b[s, :] for every slot: a batch of (1 x C) @ (C x 1) products */
static fsc_status dot_rows(fsc_moe *m, const fsc_moe_rec *r, float *out, const float *a, const float *b) {
    int C = m->C;
    return fsc_k_gemm(m->dev, 0, 0, 1, 1, C, 1.0f, a, C, C, b, 1, C, 0.0f, out, 1, 1, (int)r->slots);
}

/* A record sized by another layer (other experts, top-k, capacity factor, widths or expert kind) would be read
 * past; one of a layer with the same shapes fits. */
static fsc_status check_rec(const fsc_moe *m, const fsc_moe_rec *r, const char *what) {
    const int cap = fsc_moe_capacity(m, r->S, r->groups), mlp = m->per_expert > 0;
    if (r->E == m->E && r->k == m->k && r->C == m->C && r->H == m->H && r->mlp == mlp && r->cap == cap)
        return FSC_OK;
    return fsc_error(FSC_ERR_INVALID, "moe %s: the record was made for a layer of %d %s experts, top-%d, width %d, "
                     "hidden width %d and capacity %d (groups of %d tokens); this layer (%s) has %d %s experts, "
                     "top-%d, width %d, hidden width %d and capacity %d: make its records with its own "
                     "fsc_moe_rec_create", what, r->E, r->mlp ? "MLP" : "identity", r->k, r->C, r->H, r->cap,
                     r->S / r->groups, m->name, m->E, mlp ? "MLP" : "identity", m->k, m->C, m->H, cap);
}

static fsc_status check_table(const fsc_moe *m, const float *const *p, const char *what) {
    if (!p) return fsc_error(FSC_ERR_INVALID, "moe %s: no parameter table (a view layer needs one)", what);
    if (!p[0]) return fsc_error(FSC_ERR_STATE, "moe %s: %s.gate.weight is NULL", what, m->name);
    for (int j = 0; j < m->El && m->per_expert; j++)
        for (int t = 0; t < 4; t++)
            if (!p[tab_index(m, j, t)])
                return fsc_error(FSC_ERR_STATE, "moe %s: a tensor of %s.experts.%d is NULL", what, m->name,
                                 m->rank * m->El + j);
    return FSC_OK;
}

/* The experts on their rows, one product per block of cap rows: ye (slots, C) from the saved xe. */
static fsc_status experts_forward(fsc_moe *m, fsc_moe_rec *r, float *ye, const float *const *p) {
    size_t cap = (size_t)r->cap, C = (size_t)m->C, H = (size_t)m->H, nb = r->slots / cap;
    if (!m->per_expert) return fsc_device_copy(m->dev, ye, r->xe, r->slots * C * sizeof(float));
    size_t per = nb / (size_t)m->El; /* blocks per expert: G groups */
    for (size_t b = 0; b < nb; b++) {
        int j = (int)(b / per);
        const float *fw = p[tab_index(m, j, 0)], *fb = p[tab_index(m, j, 1)];
        const float *pw = p[tab_index(m, j, 2)], *pb = p[tab_index(m, j, 3)];
        float *x = r->xe + b * cap * C, *hp = r->hpre + b * cap * H, *ha = r->hact + b * cap * H, *y = ye + b * cap * C;
        FSC_TRY(fsc_linear_forward(m->dev, hp, NULL, x, fw, fb, cap, m->C, m->H, 0));
        FSC_TRY(fsc_gelu_forward(m->dev, ha, NULL, hp, cap * H));
        FSC_TRY(fsc_linear_forward(m->dev, y, NULL, ha, pw, pb, cap, m->H, m->C, 0));
    }
    return FSC_OK;
}

/* Where the experts' weight gradients by source go (fsc_moe_backward_terms); fn NULL: into the gradients. */
typedef struct {
    fsc_status (*fn)(void *ctx, float *grad, const float *piece, size_t n);
    void *ctx;
} term_sink;

/* A source's sum (per_expert floats, the expert's four tensors in table order) to the sink. */
static fsc_status hand_terms(fsc_moe *m, const term_sink *ts, float *const *g, int j, const float *sum) {
    size_t C = (size_t)m->C, H = (size_t)m->H, len[4] = { C * H, H, H * C, C }, at = 0;
    for (int t = 0; t < 4; at += len[t], t++) FSC_TRY(ts->fn(ts->ctx, g[tab_index(m, j, t)], sum + at, len[t]));
    return FSC_OK;
}

/* dxe (slots, C) = (overwrites) the experts' input gradient from dye; parameter gradients += block by
 * block through a zeroed scratch, or with a sink each source's blocks into a zeroed sum handed to it. The split
 * backward runs one side at a time: its input part (g NULL) writes every block's hidden gradient (the gradient
 * w.r.t. c_fc's output) into kept (slots, H), its weight part (dxe NULL) reads it back; without kept (NULL) it
 * lives in the scratch. work: 2 cap H + per_expert floats (rounded), and per_expert more with a sink. */
static fsc_status experts_backward(fsc_moe *m, fsc_moe_rec *r, float *dxe, float *const *g, const float *dye,
                                   const float *const *p, float *work, const term_sink *ts, float *kept) {
    size_t cap = (size_t)r->cap, C = (size_t)m->C, H = (size_t)m->H, nb = r->slots / cap;
    if (!m->per_expert) return dxe ? fsc_device_copy(m->dev, dxe, dye, r->slots * C * sizeof(float)) : FSC_OK;
    size_t per = nb / (size_t)m->El, groups = (size_t)r->groups; /* blocks per expert: G sources x groups */
    float *dha = work, *dhp = work + r64(cap * H), *sg = dhp + r64(cap * H), *src = sg + r64(m->per_expert);
    size_t len[4] = { C * H, H, H * C, C };
    float *sub[4] = { sg, sg + C * H, sg + C * H + H, sg + 2 * C * H + H };
    for (size_t b = 0; b < nb; b++) {
        int j = (int)(b / per);
        size_t gi = b % per % groups; /* the block's group in its source's */
        const int derive = dxe || !kept; /* the weight part reads the kept hidden gradient */
        float *dh = kept ? kept + b * cap * H : dhp;
        if (g) FSC_TRY(fsc_device_memset(m->dev, sg, 0, m->per_expert * sizeof(float)));
        fsc_linear_rec proj = { r->hact + b * cap * H, cap, m->H, m->C, 0 };
        FSC_TRY(fsc_linear_backward(m->dev, derive ? dha : NULL, g ? sub[2] : NULL, g ? sub[3] : NULL, &proj,
                                    dye + b * cap * C, p[tab_index(m, j, 2)], 0.0f, 0.0f));
        fsc_gelu_rec gr = { r->hpre + b * cap * H, cap * H };
        if (derive) FSC_TRY(fsc_gelu_backward(m->dev, dh, &gr, dha));
        fsc_linear_rec fc = { r->xe + b * cap * C, cap, m->C, m->H, 0 };
        FSC_TRY(fsc_linear_backward(m->dev, dxe ? dxe + b * cap * C : NULL, g ? sub[0] : NULL, g ? sub[1] : NULL,
                                    &fc, dh, p[tab_index(m, j, 0)], 0.0f, 0.0f));
        if (!g) continue;
        if (!ts->fn) {
            for (int t = 0; t < 4; t++) FSC_TRY(fsc_k_axpy(m->dev, g[tab_index(m, j, t)], 1.0f, sub[t], len[t]));
            continue;
        }
        if (gi == 0) FSC_TRY(fsc_device_memset(m->dev, src, 0, m->per_expert * sizeof(float)));
        FSC_TRY(fsc_k_axpy(m->dev, src, 1.0f, sg, m->per_expert));
        if (gi == groups - 1) FSC_TRY(hand_terms(m, ts, g, j, src));
    }
    return FSC_OK;
}

static fsc_status forward_body(fsc_moe *m, fsc_moe_rec *r, float *out, const float *inp, const float *const *p,
                               float *w) {
    size_t S = (size_t)r->S, C = (size_t)m->C, E = (size_t)m->E, sl = r->slots;
    int Sg = r->S / r->groups;
    float *gl = w;                          /* (S, E) gate logits */
    float *table = gl + r64(S * E);         /* (S + 1, C) */
    float *xsrc = table + r64((S + 1) * C); /* (slots, C) */
    float *tmp = xsrc + r64(sl * C);        /* (slots, C) */
    float *ye = tmp + r64(sl * C);          /* (slots, C) */
    for (int g = 0; g < r->groups; g++) /* per group: the same product on any expert-parallel size */
        FSC_TRY(fsc_linear_forward(m->dev, gl + (size_t)g * Sg * E, NULL, inp + (size_t)g * Sg * C, p[0], NULL,
                                   (size_t)Sg, m->C, m->E, 0));
    float *hl = malloc(S * E * sizeof(float));
    if (!hl) return fsc_error(FSC_ERR_NOMEM, "moe: out of host memory for %zu gate logits", S * E);
    fsc_status s = fsc_device_download(m->dev, hl, gl, S * E * sizeof(float));
    if (s == FSC_OK) s = moe_route_compute(&r->route, hl, r->S, m->E, m->k, r->groups, m->cfg.capacity_factor);
    free(hl);
    FSC_TRY(s);
    FSC_TRY(fsc_device_upload(m->dev, r->idx, r->route.idx, sl * sizeof(int32_t)));
    FSC_TRY(fsc_device_upload(m->dev, r->sgate, r->route.slot_gate, sl * sizeof(float)));
    /* dispatch, experts, combine */
    FSC_TRY(gather_rows(m, r, xsrc, inp, table));
    FSC_TRY(to_experts(m, r, r->xe, xsrc, tmp));
    FSC_TRY(experts_forward(m, r, ye, p));
    FSC_TRY(to_sources(m, r, r->ysrc, ye, tmp));
    FSC_TRY(scale_rows(m, r, xsrc, r->ysrc, r->sgate));
    return scatter_rows(m, r, out, xsrc, table, 0);
}

fsc_status fsc_moe_forward(fsc_moe *m, float *out, fsc_moe_rec *r, const float *inp, const float *const *p,
                           fsc_moe_stats *stats) {
    FSC_CHECK_ARG(m);
    FSC_CHECK_ARG(out);
    FSC_CHECK_ARG_AS(r, "rec");
    FSC_CHECK_ARG(inp);
    FSC_TRY(check_rec(m, r, "forward"));
    if (!p) p = m->ptab;
    FSC_TRY(check_table(m, p, "forward"));
    r->fwd_done = 0;
    moe_route_free(&r->route);
    r->inp = inp;
    size_t C = (size_t)m->C, sl = r->slots;
    size_t wn = r64((size_t)r->S * m->E) + r64(((size_t)r->S + 1) * C) + 3 * r64(sl * C);
    float *w;
    fsc_status s = fsc_device_alloc(m->dev, FSC_TAG_WORKSPACE, wn * sizeof(float), (void **)&w);
    if (s == FSC_OK) s = forward_body(m, r, out, inp, p, w);
    fsc_device_release(m->dev, w);
    if (s != FSC_OK) {
        moe_route_free(&r->route);
        return s;
    }
    r->fwd_done = 1;
    if (stats)
        *stats = (fsc_moe_stats){ .aux_loss = r->route.aux, .capacity = r->cap, .tokens = r->S,
                                  .assigned = (int64_t)r->S * m->k, .dropped = r->route.dropped };
    return FSC_OK;
}

/* The gate's weight gradient from the gate logits' gradient dl (S, E): per group, in order (as ranks in rank
 * order), through the scratch dwg (C, E), overwritten by each group. */
static fsc_status gate_weight(fsc_moe *m, const fsc_moe_rec *r, float *gate_grad, const float *dl, const float *p0,
                              float *dwg) {
    size_t C = (size_t)m->C, E = (size_t)m->E;
    int Sg = r->S / r->groups;
    for (int g = 0; g < r->groups; g++) {
        fsc_linear_rec lr = { r->inp + (size_t)g * Sg * C, (size_t)Sg, m->C, m->E, 0 };
        FSC_TRY(fsc_linear_backward(m->dev, NULL, dwg, NULL, &lr, dl + (size_t)g * Sg * E, p0, 0.0f, 0.0f));
        FSC_TRY(fsc_k_axpy(m->dev, gate_grad, 1.0f, dwg, C * E));
    }
    return FSC_OK;
}

/* The split backward's stash (moe_split.h): the experts' output gradients on the expert side (slots, C), their
 * hidden gradients (slots, H) and the gate logits' gradient (S, E). */
typedef struct { float *dye, *dh, *dl; } split_stash;
static split_stash stash_at(size_t slots, size_t C, size_t H, int mlp, void *base) {
    split_stash st;
    st.dye = base;
    st.dh = mlp ? st.dye + r64(slots * C) : NULL;
    st.dl = st.dye + r64(slots * C) + (mlp ? r64(slots * H) : 0);
    return st;
}

/* The backward's input side and, with gt, its weight side. Split (stash non-NULL, gt NULL): what the weight part
 * needs goes to the stash. */
static fsc_status backward_body(fsc_moe *m, fsc_moe_rec *r, float *dinp, float *const *gt, const float *dout,
                                const float *const *p, float daux, float *w, const term_sink *ts, float *stash) {
    size_t S = (size_t)r->S, C = (size_t)m->C, E = (size_t)m->E, sl = r->slots;
    int Sg = r->S / r->groups;
    float *table = w;                        /* (S + 1, C) */
    float *dg = table + r64((S + 1) * C);    /* (slots, C) dout at each slot */
    float *dy = dg + r64(sl * C);            /* (slots, C) */
    float *tmp = dy + r64(sl * C);           /* (slots, C) */
    float *dxe = tmp + r64(sl * C);          /* (slots, C) */
    float *dsl = dxe + r64(sl * C);          /* (slots) */
    float *dl = dsl + r64(sl);               /* (S, E) */
    float *dwg = dl + r64(S * E);            /* (C, E) */
    float *ew = dwg + r64(C * E);            /* 2 cap H + per_expert (2 per_expert with a sink) */
    float *dye = dg, *kept = NULL;           /* (slots, C) the experts' output gradient, expert side */
    if (stash) {
        const split_stash st = stash_at(sl, C, (size_t)m->H, m->per_expert > 0, stash);
        dye = st.dye, kept = st.dh, dl = st.dl;
    }
    FSC_TRY(gather_rows(m, r, dg, dout, table));
    FSC_TRY(dot_rows(m, r, dsl, r->ysrc, dg)); /* gradient of each combine weight */
    FSC_TRY(scale_rows(m, r, dy, dg, r->sgate));
    FSC_TRY(to_experts(m, r, dye, dy, tmp));
    FSC_TRY(experts_backward(m, r, dxe, gt, dye, p, ew, ts, kept));
    FSC_TRY(to_sources(m, r, dy, dxe, tmp));   /* dy: the dispatched rows' gradient, source side */
    /* the gate: routing gradient on the host, then through the per-group gate product */
    float *hs = malloc(sl * sizeof(float)), *hl = malloc(S * E * sizeof(float));
    fsc_status s = hs && hl ? FSC_OK : fsc_error(FSC_ERR_NOMEM, "moe backward: out of host memory");
    if (s == FSC_OK) s = fsc_device_download(m->dev, hs, dsl, sl * sizeof(float));
    if (s == FSC_OK) s = moe_route_backward(&r->route, hl, hs, daux);
    if (s == FSC_OK) s = fsc_device_upload(m->dev, dl, hl, S * E * sizeof(float));
    free(hs), free(hl);
    FSC_TRY(s);
    for (int g = 0; g < r->groups; g++) {
        fsc_linear_rec lr = { r->inp + (size_t)g * Sg * C, (size_t)Sg, m->C, m->E, 0 };
        FSC_TRY(fsc_linear_backward(m->dev, dinp + (size_t)g * Sg * C, NULL, NULL, &lr, dl + (size_t)g * Sg * E,
                                    p[0], 0.0f, 0.0f));
    }
    if (gt) FSC_TRY(gate_weight(m, r, gt[0], dl, p[0], dwg));
    return scatter_rows(m, r, dinp, dy, table, 1);
}

/* Workspace floats of a backward (weight: the weight part's). */
static size_t backward_work(const fsc_moe *m, const fsc_moe_rec *r, int weight, int term) {
    size_t S = (size_t)r->S, C = (size_t)m->C, E = (size_t)m->E, sl = r->slots, H = (size_t)m->H;
    size_t ew = r64(C * E) + 2 * r64((size_t)r->cap * H) + (term ? 2 : 1) * r64(m->per_expert);
    return weight ? ew : r64((S + 1) * C) + 4 * r64(sl * C) + r64(sl) + r64(S * E) + ew;
}

fsc_status fsc_moe_backward(fsc_moe *m, float *dinp, float *const *g, fsc_moe_rec *r, const float *dout,
                            const float *const *p, float daux) {
    return fsc_moe_backward_terms(m, dinp, g, r, dout, p, daux, NULL, NULL);
}

/* The record's forward state: 1 after a forward, 2 after a split backward's input part, 0 once differentiated. */
static fsc_status need_state(const fsc_moe_rec *r, int want, const char *what) {
    if (r->fwd_done == want) return FSC_OK;
    if (want == 2)
        return fsc_error(FSC_ERR_STATE, "moe %s: the record's input part has not run (the weight part follows "
                         "fsc_moe_backward_input of the same record, once)", what);
    if (r->fwd_done == 2)
        return fsc_error(FSC_ERR_STATE, "moe %s: the record waits for its weight part (fsc_moe_backward_weight)",
                         what);
    return fsc_error(FSC_ERR_STATE, "moe %s: no forward to differentiate (backward runs once per forward)", what);
}

fsc_status fsc_moe_backward_terms(fsc_moe *m, float *dinp, float *const *g, fsc_moe_rec *r, const float *dout,
                                  const float *const *p, float daux,
                                  fsc_status (*term)(void *term_ctx, float *grad, const float *piece, size_t n),
                                  void *term_ctx) {
    FSC_CHECK_ARG(m);
    FSC_CHECK_ARG(dinp);
    FSC_CHECK_ARG_AS(r, "rec");
    FSC_CHECK_ARG(dout);
    FSC_TRY(check_rec(m, r, "backward"));
    FSC_TRY(need_state(r, 1, "backward"));
    if (!p) p = m->ptab;
    if (!g) g = m->gtab;
    FSC_TRY(check_table(m, p, "backward"));
    FSC_TRY(check_table(m, (const float *const *)g, "backward (gradients)"));
    r->fwd_done = 0;
    const term_sink ts = { term, term_ctx };
    float *w;
    FSC_TRY(fsc_device_alloc(m->dev, FSC_TAG_WORKSPACE, backward_work(m, r, 0, term != NULL) * sizeof(float),
                             (void **)&w));
    fsc_status s = backward_body(m, r, dinp, g, dout, p, daux, w, &ts, NULL);
    fsc_device_release(m->dev, w);
    return s;
}

size_t fsc_moe_split_bytes(const fsc_moe_config *cfg, int S, int groups) {
    if (!cfg || cfg->experts < 1 || cfg->dim < 1 || S < 1 || groups < 1 || S % groups) return 0;
    const float cf = cfg->capacity_factor ? cfg->capacity_factor : 1.0f;
    const size_t cap = (size_t)moe_capacity(S / groups, cfg->experts, cfg->top_k == 2 ? 2 : 1, cf);
    const size_t slots = (size_t)cfg->experts * (size_t)groups * cap, C = (size_t)cfg->dim;
    const size_t H = cfg->expert == FSC_MOE_EXPERT_MLP ? (cfg->hidden ? (size_t)cfg->hidden : 4 * C) : 0;
    return (r64(slots * C) + r64(slots * H) + r64((size_t)S * (size_t)cfg->experts)) * sizeof(float);
}

fsc_status fsc_moe_backward_input(fsc_moe *m, float *dinp, fsc_moe_rec *r, const float *dout, const float *const *p,
                                  float daux, void *stash) {
    FSC_CHECK_ARG(m);
    FSC_CHECK_ARG(dinp);
    FSC_CHECK_ARG_AS(r, "rec");
    FSC_CHECK_ARG(dout);
    FSC_CHECK_ARG(stash);
    FSC_TRY(check_rec(m, r, "backward input part"));
    FSC_TRY(need_state(r, 1, "backward input part"));
    if (!p) p = m->ptab;
    FSC_TRY(check_table(m, p, "backward input part"));
    r->fwd_done = 0;
    const term_sink ts = { NULL, NULL };
    float *w;
    FSC_TRY(fsc_device_alloc(m->dev, FSC_TAG_WORKSPACE, backward_work(m, r, 0, 0) * sizeof(float), (void **)&w));
    fsc_status s = backward_body(m, r, dinp, NULL, dout, p, daux, w, &ts, stash);
    fsc_device_release(m->dev, w);
    if (s == FSC_OK) r->fwd_done = 2;
    return s;
}

fsc_status fsc_moe_backward_weight(fsc_moe *m, float *const *g, fsc_moe_rec *r, const float *const *p,
                                   const void *stash,
                                   fsc_status (*term)(void *term_ctx, float *grad, const float *piece, size_t n),
                                   void *term_ctx) {
    FSC_CHECK_ARG(m);
    FSC_CHECK_ARG_AS(r, "rec");
    FSC_CHECK_ARG(stash);
    FSC_TRY(check_rec(m, r, "backward weight part"));
    FSC_TRY(need_state(r, 2, "backward weight part"));
    if (!p) p = m->ptab;
    if (!g) g = m->gtab;
    FSC_TRY(check_table(m, p, "backward weight part"));
    FSC_TRY(check_table(m, (const float *const *)g, "backward weight part (gradients)"));
    r->fwd_done = 0;
    const term_sink ts = { term, term_ctx };
    const split_stash st = stash_at(r->slots, (size_t)m->C, (size_t)m->H, m->per_expert > 0, (void *)stash);
    float *w;
    FSC_TRY(fsc_device_alloc(m->dev, FSC_TAG_WORKSPACE, backward_work(m, r, 1, term != NULL) * sizeof(float),
                             (void **)&w));
    fsc_status s = experts_backward(m, r, NULL, g, st.dye, p, w + r64((size_t)m->C * m->E), &ts, st.dh);
    if (s == FSC_OK) s = gate_weight(m, r, g[0], st.dl, p[0], w);
    fsc_device_release(m->dev, w);
    return s;
}

fsc_status fsc_moe_routing(const fsc_moe_rec *r, int32_t *experts, float *gates, int32_t *kept) {
    FSC_CHECK_ARG_AS(r, "rec");
    if (!r || !r->route.expert) return fsc_error(FSC_ERR_STATE, "moe routing: the record holds no forward");
    size_t n = (size_t)r->S * r->route.k;
    for (size_t i = 0; i < n; i++) {
        if (experts) experts[i] = r->route.expert[i];
        if (gates) gates[i] = r->route.gate[i];
        if (kept) kept[i] = r->route.slot[i] >= 0;
    }
    return FSC_OK;
}

fsc_moe_config fsc_moe_config_default(int dim, int experts) {
    return (fsc_moe_config){ .dim = dim, .hidden = 4 * dim, .experts = experts, .top_k = 1,
                             .capacity_factor = 1.0f, .expert = FSC_MOE_EXPERT_MLP, .name = "moe" };
}
