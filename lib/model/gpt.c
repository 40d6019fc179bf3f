/* The GPT-2 model's description: configuration checks, parameter tensors in Hugging Face order with
 * names and shapes (MoE blocks included), initial values from the keyed RNG, binding the tables to flat buffers.
 * Not here: the model built from layers (gpt_model.c), gpt.h's fsc_gpt view and records (gpt_acts.c), files
 * (gpt_io.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fsc/gpt.h"
#include "fsc/rng.h"

/* Limits that keep every size and gemm dimension inside int and the names inside 64 bytes. */
#define MAX_LAYERS 100000
#define MAX_DIM (1 << 16)
#define MAX_HEADS (1 << 16)
#define MAX_SEQ (1 << 20)
#define MAX_VOCAB (1 << 24)
#define MAX_EXPERTS 4096
#define MAX_MOE_FACTOR 1e6 /* moe_capacity and moe_aux */
#define MAX_TENSORS (1 << 28)

static int moe_every(const fsc_gpt_config *c) { return c->moe_every ? c->moe_every : 1; }

static fsc_status validate_moe(const fsc_gpt_config *c) {
    if (c->moe_experts == 0) {
        if (c->moe_top_k || c->moe_every || c->moe_capacity != 0.0f || c->moe_aux != 0.0f)
            return fsc_error(FSC_ERR_INVALID, "gpt config: moe_top_k, moe_every, moe_capacity and moe_aux apply to "
                             "MoE models only (set moe_experts)");
        return FSC_OK;
    }
    if (c->moe_experts < 1 || c->moe_experts > MAX_EXPERTS)
        return fsc_error(FSC_ERR_INVALID, "gpt config: moe_experts is %d, must be in [1, %d] (0: no MoE)",
                         c->moe_experts, MAX_EXPERTS);
    int k = c->moe_top_k ? c->moe_top_k : 1;
    if (k != 1 && k != 2)
        return fsc_error(FSC_ERR_INVALID, "gpt config: moe_top_k is %d; top-1 and top-2 gating are supported", k);
    if (k > c->moe_experts)
        return fsc_error(FSC_ERR_INVALID, "gpt config: top-%d gating needs at least %d experts, not %d", k, k,
                         c->moe_experts);
    if (c->moe_every < 0 || moe_every(c) > c->layers)
        return fsc_error(FSC_ERR_INVALID, "gpt config: moe_every is %d; with %d blocks it must be in [1, %d] (every "
                         "N-th block is an MoE block)", c->moe_every, c->layers, c->layers);
    /* at most MAX_MOE_FACTOR, the MoE layer's own limit (moe_part_init): a config this accepts builds */
    if (!(c->moe_capacity >= 0.0f) || !(c->moe_capacity <= MAX_MOE_FACTOR))
        return fsc_error(FSC_ERR_INVALID, "gpt config: moe_capacity %g must be a positive number, at most %g (0: 1.0)",
                         (double)c->moe_capacity, MAX_MOE_FACTOR);
    if (!(c->moe_aux >= 0.0f) || !(c->moe_aux <= MAX_MOE_FACTOR))
        return fsc_error(FSC_ERR_INVALID, "gpt config: moe_aux %g must be a finite number >= 0, at most %g",
                         (double)c->moe_aux, MAX_MOE_FACTOR);
    double nt = 4.0 + 12.0 * c->layers + (double)(c->layers / moe_every(c)) * (4.0 * c->moe_experts - 3.0);
    if (nt > MAX_TENSORS)
        return fsc_error(FSC_ERR_INVALID, "gpt config: %d layers with %d experts make %.0f tensors, more than %d",
                         c->layers, c->moe_experts, nt, MAX_TENSORS);
    return FSC_OK;
}

fsc_status fsc_gpt_config_validate(const fsc_gpt_config *c) {
    FSC_CHECK_ARG(c);
    if (c->layers < 1 || c->layers > MAX_LAYERS)
        return fsc_error(FSC_ERR_INVALID, "gpt config: layers is %d, must be in [1, %d]", c->layers, MAX_LAYERS);
    if (c->dim < 1 || c->dim > MAX_DIM)
        return fsc_error(FSC_ERR_INVALID, "gpt config: dim (model width) is %d, must be in [1, %d]", c->dim, MAX_DIM);
    if (c->heads < 1 || c->heads > MAX_HEADS)
        return fsc_error(FSC_ERR_INVALID, "gpt config: heads is %d, must be in [1, %d]", c->heads, MAX_HEADS);
    if (c->dim % c->heads != 0)
        return fsc_error(FSC_ERR_INVALID, "gpt config: dim %d is not a multiple of heads %d", c->dim, c->heads);
    if (c->seq < 1 || c->seq > MAX_SEQ)
        return fsc_error(FSC_ERR_INVALID, "gpt config: seq (context length) is %d, must be in [1, %d]", c->seq,
                         MAX_SEQ);
    if (c->vocab < 1 || c->vocab > MAX_VOCAB)
        return fsc_error(FSC_ERR_INVALID, "gpt config: vocab is %d, must be in [1, %d]", c->vocab, MAX_VOCAB);
    if (c->padded_vocab && (c->padded_vocab < c->vocab || c->padded_vocab > MAX_VOCAB))
        return fsc_error(FSC_ERR_INVALID, "gpt config: padded_vocab is %d, must be 0 (none) or in [vocab %d, %d]",
                         c->padded_vocab, c->vocab, MAX_VOCAB);
    return validate_moe(c);
}

/* An MoE block has 4 E - 3 tensors more than a dense one; blocks [0, b) hold b / N MoE blocks. */
static int moe_extra(const fsc_gpt_config *c) { return c->moe_experts ? 4 * c->moe_experts - 3 : 0; }

int fsc_gpt_block_is_moe(const fsc_gpt_config *c, int b) {
    if (!c) return 0;
    return c->moe_experts > 0 && b >= 0 && b < c->layers && (b + 1) % moe_every(c) == 0;
}

int fsc_gpt_num_moe_blocks(const fsc_gpt_config *c) {
    if (!c) return 0;
    return c->moe_experts ? c->layers / moe_every(c) : 0;
}

int fsc_gpt_block_num_tensors(const fsc_gpt_config *c, int b) {
    if (!c) return 0;
    return FSC_GPT_BLOCK_PARAMS + (fsc_gpt_block_is_moe(c, b) ? moe_extra(c) : 0);
}

int fsc_gpt_block_first_tensor(const fsc_gpt_config *c, int b) {
    if (!c) return 0;
    int moe_before = c->moe_experts ? b / moe_every(c) : 0;
    return 2 + FSC_GPT_BLOCK_PARAMS * b + moe_before * moe_extra(c);
}

int fsc_gpt_num_tensors(const fsc_gpt_config *c) {
    if (!c) return 0;
    return fsc_gpt_block_first_tensor(c, c->layers) + 2;
}

/* The block holding tensor i (2 <= i < num_tensors - 2) and the index inside it. */
static void locate(const fsc_gpt_config *c, int i, int *b, int *k) {
    int lo = 0, hi = c->layers - 1; /* the last block whose first tensor is <= i */
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (fsc_gpt_block_first_tensor(c, mid) <= i) lo = mid;
        else hi = mid - 1;
    }
    *b = lo;
    *k = i - fsc_gpt_block_first_tensor(c, lo);
}

/* Inside an MoE block, k >= 8: the gate (8), or tensor t of expert e. */
enum { MOE_GATE = FSC_B_FC_W };
static const char *const expert_names[4] = { "c_fc.weight", "c_fc.bias", "c_proj.weight", "c_proj.bias" };

static const char *const block_names[FSC_GPT_BLOCK_PARAMS] = {
    "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
    "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight",
    "mlp.c_proj.bias",
};

static void set_shape(fsc_param_info *p, int ndim, int64_t d0, int64_t d1) {
    p->ndim = ndim;
    p->shape[0] = d0;
    p->shape[1] = ndim == 2 ? d1 : 0;
    p->numel = (size_t)d0 * (size_t)(ndim == 2 ? d1 : 1);
}

fsc_status fsc_gpt_param_info(const fsc_gpt_config *c, int i, fsc_param_info *out) {
    FSC_CHECK_ARG(c);
    FSC_CHECK_ARG(out);
    FSC_TRY(fsc_gpt_config_validate(c));
    int n = fsc_gpt_num_tensors(c), L = c->layers;
    int64_t C = c->dim, V = fsc_gpt_vocab_rows(c), T = c->seq;
    if (i < 0 || i >= n) return fsc_error(FSC_ERR_INVALID, "gpt: tensor index %d out of range [0, %d)", i, n);
    memset(out, 0, sizeof *out);
    out->expert = -1;
    if (i == FSC_P_WTE) {
        snprintf(out->name, sizeof out->name, "wte.weight");
        set_shape(out, 2, V, C);
        out->file_rows = V > c->vocab ? c->vocab : 0; /* padding rows: not in weights files */
        out->layer = 0;
        out->decay = -1; /* an embedding: no weight decay by default (model.h) */
        out->nusers = 1; /* tied: the head's output projection */
        out->users[0] = L + 1;
        snprintf(out->alias, sizeof out->alias, "lm_head.weight"); /* GPT2LMHeadModel's copy of the tied head */
    } else if (i == FSC_P_WPE) {
        snprintf(out->name, sizeof out->name, "wpe.weight");
        set_shape(out, 2, T, C);
        out->layer = 0;
        out->decay = -1;
    } else if (i >= n - 2) {
        snprintf(out->name, sizeof out->name, "ln_f.%s", i == n - 2 ? "weight" : "bias");
        set_shape(out, 1, C, 0);
        out->layer = L + 1;
    } else {
        int b, k;
        locate(c, i, &b, &k);
        out->layer = b + 1;
        out->expert = -1;
        if (fsc_gpt_block_is_moe(c, b) && k >= MOE_GATE) {
            if (k == MOE_GATE) {
                snprintf(out->name, sizeof out->name, "h.%d.mlp.gate.weight", b);
                set_shape(out, 2, C, c->moe_experts);
                return FSC_OK;
            }
            int e = (k - MOE_GATE - 1) / 4, t = (k - MOE_GATE - 1) % 4;
            snprintf(out->name, sizeof out->name, "h.%d.mlp.experts.%d.%s", b, e, expert_names[t]);
            out->expert = e;
            k = FSC_B_FC_W + t; /* shaped as the dense MLP's tensor */
        } else {
            snprintf(out->name, sizeof out->name, "h.%d.%s", b, block_names[k]);
        }
        switch (k) {
        case FSC_B_ATTN_W: set_shape(out, 2, C, 3 * C); break;
        case FSC_B_ATTN_B: set_shape(out, 1, 3 * C, 0); break;
        case FSC_B_APROJ_W: set_shape(out, 2, C, C); break;
        case FSC_B_FC_W: set_shape(out, 2, C, 4 * C); break;
        case FSC_B_FC_B: set_shape(out, 1, 4 * C, 0); break;
        case FSC_B_MPROJ_W: set_shape(out, 2, 4 * C, C); break;
        default: set_shape(out, 1, C, 0); break; /* layer norms and the C-wide biases */
        }
    }
    return FSC_OK;
}

size_t fsc_gpt_num_params(const fsc_gpt_config *c) {
    if (!c) return 0;
    size_t C = (size_t)c->dim, L = (size_t)c->layers, M = (size_t)fsc_gpt_num_moe_blocks(c), E = (size_t)c->moe_experts;
    /* an MoE block trades the MLP (8 C^2 + 5 C) for a gate (C E) and E such MLPs */
    size_t moe = M ? M * (C * E + (E - 1) * (8 * C * C + 5 * C)) : 0;
    return (size_t)fsc_gpt_vocab_rows(c) * C + (size_t)c->seq * C + L * (12 * C * C + 13 * C) + 2 * C + moe;
}

/* Parse a decimal without leading zeros below `limit` at *p; -1 if there is none. */
static long parse_index(const char **p, long limit) {
    const char *q = *p;
    if (*q < '0' || *q > '9' || (*q == '0' && q[1] >= '0' && q[1] <= '9')) return -1;
    long v = 0;
    while (*q >= '0' && *q <= '9') {
        v = v * 10 + (*q++ - '0');
        if (v >= limit) return -1;
    }
    *p = q;
    return v;
}

/* Tensor index of "mlp.gate.weight" or "mlp.experts.{e}.{name}" in MoE block b; -1 if none. */
static int moe_param_index(const fsc_gpt_config *c, int b, const char *p) {
    if (!fsc_gpt_block_is_moe(c, b)) return -1;
    int first = fsc_gpt_block_first_tensor(c, b) + MOE_GATE;
    if (!strcmp(p, "mlp.gate.weight")) return first;
    if (strncmp(p, "mlp.experts.", 12) != 0) return -1;
    p += 12;
    long e = parse_index(&p, c->moe_experts);
    if (e < 0 || *p++ != '.') return -1;
    for (int t = 0; t < 4; t++)
        if (!strcmp(p, expert_names[t])) return first + 1 + 4 * (int)e + t;
    return -1;
}

int fsc_gpt_param_index(const fsc_gpt_config *c, const char *name) {
    if (!name || fsc_gpt_config_validate(c) != FSC_OK) return -1;
    if (!strcmp(name, "wte.weight")) return FSC_P_WTE;
    if (!strcmp(name, "wpe.weight")) return FSC_P_WPE;
    int n = fsc_gpt_num_tensors(c);
    if (!strcmp(name, "ln_f.weight")) return n - 2;
    if (!strcmp(name, "ln_f.bias")) return n - 1;
    if (strncmp(name, "h.", 2) != 0) return -1;
    const char *p = name + 2;
    if (*p < '0' || *p > '9' || (*p == '0' && p[1] != '.')) return -1; /* digits, no leading zeros */
    long b = 0;
    while (*p >= '0' && *p <= '9') {
        b = b * 10 + (*p++ - '0');
        if (b >= c->layers) return -1;
    }
    if (*p++ != '.') return -1;
    int moe = fsc_gpt_block_is_moe(c, (int)b);
    for (int k = 0; k < FSC_GPT_BLOCK_PARAMS; k++)
        if (!strcmp(p, block_names[k]) && !(moe && k >= MOE_GATE)) return fsc_gpt_block_first_tensor(c, (int)b) + k;
    return moe ? moe_param_index(c, (int)b, p) : -1;
}

void fsc_gpt_init_values(const fsc_gpt_config *c, uint64_t seed, int i, size_t first, size_t n, float *out) {
    fsc_param_info p;
    if (fsc_gpt_param_info(c, i, &p) != FSC_OK) return;
    int in_block = i >= 2 && i < fsc_gpt_num_tensors(c) - 2, b = 0, k = 0;
    if (in_block) locate(c, i, &b, &k);
    if (in_block && fsc_gpt_block_is_moe(c, b) && k > MOE_GATE) /* an expert: as the dense MLP's tensor */
        k = FSC_B_FC_W + (k - MOE_GATE - 1) % 4;
    if (p.ndim == 1) { /* layer norm weights 1, every bias and layer norm bias 0 */
        int ln_weight = in_block ? (k == FSC_B_LN1_W || k == FSC_B_LN2_W) : !strcmp(p.name, "ln_f.weight");
        for (size_t j = 0; j < n; j++) out[j] = ln_weight ? 1.0f : 0.0f;
        return;
    }
    float std = 0.02f;
    if (in_block && (k == FSC_B_APROJ_W || k == FSC_B_MPROJ_W)) std = 0.02f / sqrtf(2.0f * (float)c->layers);
    fsc_rng_fill_normal(out, n, seed, p.name, first, 0.0f, std);
    const size_t real = p.file_rows ? (size_t)p.file_rows * (size_t)p.shape[1] : p.numel; /* padding rows: 0 */
    for (size_t j = real > first ? real - first : 0; j < n; j++) out[j] = 0.0f;
}

int fsc_gpt_vocab_rows(const fsc_gpt_config *c) {
    return !c ? 0 : c->padded_vocab > c->vocab ? c->padded_vocab : c->vocab;
}

void fsc_gpt_bind_flat(fsc_gpt *m, float *params, float *grads) {
    if (!m) return;
    size_t off = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        m->param[i] = params ? params + off : NULL;
        m->grad[i] = grads ? grads + off : NULL;
        off += m->info[i].numel;
    }
}

fsc_gpt_config fsc_gpt_config_default(void) {
    return (fsc_gpt_config){ .layers = 12, .dim = 768, .heads = 12, .seq = 1024, .vocab = 50257 };
}

fsc_gpt_acts_opts fsc_gpt_acts_opts_default(const fsc_gpt_config *c, int B) {
    return (fsc_gpt_acts_opts){ .B = B, .T = c ? c->seq : 0, .first = 0, .last = c ? c->layers + 1 : 0 };
}
