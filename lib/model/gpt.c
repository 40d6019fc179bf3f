/* The GPT-2 model's description: configuration checks, parameter tensors in Hugging Face order with
 * names and shapes, initial values from the keyed RNG, and the model object (pointer tables only).
 * Not here: running the model (gpt_run.c) and file input/output (gpt_io.c). */
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

fsc_status fsc_gpt_config_validate(const fsc_gpt_config *c) {
    if (!c) return fsc_error(FSC_ERR_INVALID, "gpt config: NULL");
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
    return FSC_OK;
}

int fsc_gpt_num_tensors(const fsc_gpt_config *c) { return 2 + FSC_GPT_BLOCK_PARAMS * c->layers + 2; }

int fsc_gpt_block_first_tensor(const fsc_gpt_config *c, int b) { return 2 + FSC_GPT_BLOCK_PARAMS * b; }

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
    FSC_TRY(fsc_gpt_config_validate(c));
    int n = fsc_gpt_num_tensors(c), L = c->layers;
    int64_t C = c->dim, V = c->vocab, T = c->seq;
    if (i < 0 || i >= n) return fsc_error(FSC_ERR_INVALID, "gpt: tensor index %d out of range [0, %d)", i, n);
    memset(out, 0, sizeof *out);
    if (i == FSC_P_WTE) {
        snprintf(out->name, sizeof out->name, "wte.weight");
        set_shape(out, 2, V, C);
        out->layer = 0;
    } else if (i == FSC_P_WPE) {
        snprintf(out->name, sizeof out->name, "wpe.weight");
        set_shape(out, 2, T, C);
        out->layer = 0;
    } else if (i >= n - 2) {
        snprintf(out->name, sizeof out->name, "ln_f.%s", i == n - 2 ? "weight" : "bias");
        set_shape(out, 1, C, 0);
        out->layer = L + 1;
    } else {
        int b = (i - 2) / FSC_GPT_BLOCK_PARAMS, k = (i - 2) % FSC_GPT_BLOCK_PARAMS;
        snprintf(out->name, sizeof out->name, "h.%d.%s", b, block_names[k]);
        out->layer = b + 1;
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
    size_t C = (size_t)c->dim, L = (size_t)c->layers;
    return (size_t)c->vocab * C + (size_t)c->seq * C + L * (12 * C * C + 13 * C) + 2 * C;
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
    for (int k = 0; k < FSC_GPT_BLOCK_PARAMS; k++)
        if (!strcmp(p, block_names[k])) return fsc_gpt_block_first_tensor(c, (int)b) + k;
    return -1;
}

void fsc_gpt_init_values(const fsc_gpt_config *c, uint64_t seed, int i, size_t first, size_t n, float *out) {
    fsc_param_info p;
    if (fsc_gpt_param_info(c, i, &p) != FSC_OK) return;
    int k = (i - 2) % FSC_GPT_BLOCK_PARAMS;
    int in_block = i >= 2 && i < fsc_gpt_num_tensors(c) - 2;
    if (p.ndim == 1) { /* layer norm weights 1, every bias and layer norm bias 0 */
        int ln_weight = in_block ? (k == FSC_B_LN1_W || k == FSC_B_LN2_W) : !strcmp(p.name, "ln_f.weight");
        for (size_t j = 0; j < n; j++) out[j] = ln_weight ? 1.0f : 0.0f;
        return;
    }
    float std = 0.02f;
    if (in_block && (k == FSC_B_APROJ_W || k == FSC_B_MPROJ_W)) std = 0.02f / sqrtf(2.0f * (float)c->layers);
    fsc_rng_fill_normal(out, n, seed, p.name, first, 0.0f, std);
}

fsc_status fsc_gpt_create(fsc_device *dev, const fsc_gpt_config *cfg, fsc_gpt **out) {
    *out = NULL;
    if (!dev) return fsc_error(FSC_ERR_INVALID, "gpt create: device is NULL");
    FSC_TRY(fsc_gpt_config_validate(cfg));
    fsc_gpt *m = calloc(1, sizeof *m);
    if (!m) return fsc_error(FSC_ERR_NOMEM, "gpt create: out of host memory");
    m->cfg = *cfg;
    m->dev = dev;
    m->n_tensors = fsc_gpt_num_tensors(cfg);
    m->info = calloc((size_t)m->n_tensors, sizeof *m->info);
    m->param = calloc((size_t)m->n_tensors, sizeof *m->param);
    m->grad = calloc((size_t)m->n_tensors, sizeof *m->grad);
    if (!m->info || !m->param || !m->grad) {
        fsc_gpt_free(m);
        return fsc_error(FSC_ERR_NOMEM, "gpt create: out of host memory");
    }
    for (int i = 0; i < m->n_tensors; i++) fsc_gpt_param_info(cfg, i, &m->info[i]);
    size_t wte_bytes = (size_t)cfg->vocab * cfg->dim * sizeof(float);
    fsc_status s = fsc_device_calloc(dev, FSC_TAG_GRADS, wte_bytes, (void **)&m->dwte_head);
    if (s != FSC_OK) {
        fsc_gpt_free(m);
        return s;
    }
    *out = m;
    return FSC_OK;
}

void fsc_gpt_free(fsc_gpt *m) {
    if (!m) return;
    fsc_device_release(m->dev, m->dwte_head);
    free(m->info);
    free(m->param);
    free(m->grad);
    free(m);
}

void fsc_gpt_bind_flat(fsc_gpt *m, float *params, float *grads) {
    size_t off = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        m->param[i] = params ? params + off : NULL;
        m->grad[i] = grads ? grads + off : NULL;
        off += m->info[i].numel;
    }
}
