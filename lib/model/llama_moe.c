/* The Llama's mixture-of-experts description (llama.h's moe_* fields): which decoder layers have an MoE MLP, the
 * checks of the MoE fields, and the tensors of a Llama with MoE layers (names, shapes, owners, experts) in the
 * layers' order. Not here: the dense Llama's description (llama.c), the MoE layers (lib/layers). */
#include <stdio.h>
#include <string.h>
#include "fsc/llama.h"
#include "llama_impl.h"

#define MAX_EXPERTS 4096
#define MAX_MOE_FACTOR 1e6 /* moe_capacity and moe_aux */

static int every(const fsc_llama_config *c) { return c->moe_every ? c->moe_every : 1; }

int fsc_llama_layer_is_moe(const fsc_llama_config *c, int b) {
    if (!c) return 0;
    return c->moe_experts > 0 && b >= 0 && b < c->layers && (b + 1) % every(c) == 0;
}

int fsc_llama_num_moe_layers(const fsc_llama_config *c) {
    if (!c) return 0;
    return c->moe_experts ? c->layers / every(c) : 0;
}

fsc_status llama_moe_validate(const fsc_llama_config *c) {
    if (c->moe_experts == 0) {
        if (c->moe_top_k || c->moe_every || c->moe_capacity != 0.0f || c->moe_aux != 0.0f)
            return fsc_error(FSC_ERR_INVALID, "llama config: moe_top_k, moe_every, moe_capacity and moe_aux apply to "
                             "MoE models only (set moe_experts)");
        return FSC_OK;
    }
    if (c->moe_experts < 1 || c->moe_experts > MAX_EXPERTS)
        return fsc_error(FSC_ERR_INVALID, "llama config: moe_experts is %d, must be in [1, %d] (0: no MoE)",
                         c->moe_experts, MAX_EXPERTS);
    const int k = c->moe_top_k ? c->moe_top_k : 1;
    if ((k != 1 && k != 2) || k > c->moe_experts)
        return fsc_error(FSC_ERR_INVALID, "llama config: moe_top_k %d: top-1 and top-2 gating over at least k experts "
                         "(%d)", k, c->moe_experts);
    if (c->moe_every < 0 || every(c) > c->layers)
        return fsc_error(FSC_ERR_INVALID, "llama config: moe_every is %d; with %d layers it must be in [1, %d]",
                         c->moe_every, c->layers, c->layers);
    /* at most MAX_MOE_FACTOR, the MoE layer's own limit (moe_part_init): a config this accepts builds */
    if (!(c->moe_capacity >= 0.0f) || !(c->moe_capacity <= MAX_MOE_FACTOR) || !(c->moe_aux >= 0.0f) ||
        !(c->moe_aux <= MAX_MOE_FACTOR))
        return fsc_error(FSC_ERR_INVALID, "llama config: moe_capacity %g and moe_aux %g must be >= 0 and at most %g",
                         (double)c->moe_capacity, (double)c->moe_aux, MAX_MOE_FACTOR);
    return FSC_OK;
}

/* Tensors of decoder layer b: 9, or 7 + 4 E with an MoE MLP. */
static int layer_tensors(const fsc_llama_config *c, int b) {
    return fsc_llama_layer_is_moe(c, b) ? 7 + 4 * c->moe_experts : 9;
}

static void shape2(fsc_param_info *p, int64_t d0, int64_t d1) {
    p->ndim = d1 ? 2 : 1;
    p->shape[0] = d0, p->shape[1] = d1;
    p->numel = (size_t)d0 * (size_t)(d1 ? d1 : 1);
}

/* Tensor k of MoE decoder layer b (named under "model.layers.{b}."). */
static void moe_layer_info(const fsc_llama_config *c, int b, int k, fsc_param_info *out) {
    const int64_t C = c->dim, F = c->ffn, HD = c->dim / c->heads, Q = HD * c->heads, KV = HD * c->kv_heads;
    const int E = c->moe_experts;
    static const char *const attn[4] = { "self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                         "self_attn.v_proj.weight", "self_attn.o_proj.weight" };
    static const char *const ex[4] = { "c_fc.weight", "c_fc.bias", "c_proj.weight", "c_proj.bias" };
    char rel[40];
    if (k < 4) {
        snprintf(rel, sizeof rel, "%s", attn[k]);
        const int64_t rows[4] = { Q, KV, KV, C }, cols[4] = { C, C, C, Q };
        shape2(out, rows[k], cols[k]);
    } else if (k == 4) {
        snprintf(rel, sizeof rel, "mlp.gate.weight");
        shape2(out, C, E);
    } else if (k < 5 + 4 * E) {
        const int e = (k - 5) / 4, t = (k - 5) % 4;
        snprintf(rel, sizeof rel, "mlp.experts.%d.%s", e, ex[t]);
        const int64_t d0[4] = { C, F, F, C }, d1[4] = { F, 0, C, 0 };
        shape2(out, d0[t], d1[t]);
        out->expert = e;
    } else {
        snprintf(rel, sizeof rel, "%s", k == 5 + 4 * E ? "input_layernorm.weight" : "post_attention_layernorm.weight");
        shape2(out, C, 0);
    }
    snprintf(out->name, sizeof out->name, "model.layers.%d.%.36s", b, rel);
}

fsc_status llama_moe_param_info(const fsc_llama_config *c, int i, fsc_param_info *out) {
    const int n = fsc_llama_num_tensors(c), L = c->layers;
    if (i < 0 || i >= n) return fsc_error(FSC_ERR_INVALID, "llama: tensor index %d out of range [0, %d)", i, n);
    const int nd = 1 + 9 * L + 2; /* the dense numbering */
    if (i == 0 || i >= n - 2) return llama_dense_param_info(c, i == 0 ? 0 : nd - (n - i), out);
    int first = 1;
    for (int b = 0; b < L; b++) {
        const int nb = layer_tensors(c, b);
        if (i < first + nb) {
            if (!fsc_llama_layer_is_moe(c, b)) return llama_dense_param_info(c, 1 + 9 * b + (i - first), out);
            memset(out, 0, sizeof *out);
            out->expert = -1;
            out->layer = b + 1;
            moe_layer_info(c, b, i - first, out);
            return FSC_OK;
        }
        first += nb;
    }
    return fsc_error(FSC_ERR_INTERNAL, "llama: tensor %d not found", i);
}
