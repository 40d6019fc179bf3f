/* The Llama model's description (llama.h): configuration checks and defaults, the tensors in Hugging Face
 * LlamaForCausalLM names and shapes, initial values from the keyed RNG, the configuration text checkpoints
 * record, and the model object handed to the engine (model.h). Not here: running it (llama_run.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "fsc/llama.h"
#include "fsc/rng.h"
#include "llama_impl.h"

/* Limits that keep every size and gemm dimension inside int and the names inside 64 bytes. */
#define MAX_LAYERS 100000
#define MAX_DIM (1 << 16)
#define MAX_FFN (1 << 20)
#define MAX_SEQ (1 << 20)
#define MAX_VOCAB (1 << 24)

int fsc_llama_default_ffn(int dim) {
    long long h = 8LL * dim / 3; /* int(2 * 4 * dim / 3), Meta's rule */
    return (int)((h + 255) / 256 * 256);
}

fsc_llama_config fsc_llama_config_default(void) {
    return (fsc_llama_config){ .layers = 4, .dim = 128, .heads = 4, .kv_heads = 4, .ffn = fsc_llama_default_ffn(128),
                               .seq = 64, .vocab = 256, .rope_theta = 10000.0f, .norm_eps = 1e-5f };
}

fsc_status fsc_llama_config_validate(const fsc_llama_config *c) {
    if (!c) return fsc_error(FSC_ERR_INVALID, "llama config: NULL");
    if (c->layers < 1 || c->layers > MAX_LAYERS)
        return fsc_error(FSC_ERR_INVALID, "llama config: layers is %d, must be in [1, %d]", c->layers, MAX_LAYERS);
    if (c->dim < 1 || c->dim > MAX_DIM)
        return fsc_error(FSC_ERR_INVALID, "llama config: dim (model width) is %d, must be in [1, %d]", c->dim,
                         MAX_DIM);
    if (c->heads < 1 || c->heads > c->dim || c->dim % c->heads != 0)
        return fsc_error(FSC_ERR_INVALID, "llama config: heads %d must divide dim %d", c->heads, c->dim);
    if ((c->dim / c->heads) % 2 != 0)
        return fsc_error(FSC_ERR_INVALID, "llama config: the head size dim / heads = %d / %d = %d must be even "
                         "(rotary embeddings rotate pairs of channels)", c->dim, c->heads, c->dim / c->heads);
    if (c->kv_heads < 1 || c->kv_heads > c->heads || c->heads % c->kv_heads != 0)
        return fsc_error(FSC_ERR_INVALID, "llama config: kv_heads %d must divide heads %d (grouped-query "
                         "attention shares each key/value head among heads / kv_heads query heads)", c->kv_heads,
                         c->heads);
    if (c->ffn < 1 || c->ffn > MAX_FFN)
        return fsc_error(FSC_ERR_INVALID, "llama config: ffn (the MLP's hidden width) is %d, must be in [1, %d] "
                         "(Llama's rule for dim %d gives %d)", c->ffn, MAX_FFN, c->dim,
                         fsc_llama_default_ffn(c->dim));
    if (c->seq < 1 || c->seq > MAX_SEQ)
        return fsc_error(FSC_ERR_INVALID, "llama config: seq (context length) is %d, must be in [1, %d]", c->seq,
                         MAX_SEQ);
    if (c->vocab < 1 || c->vocab > MAX_VOCAB)
        return fsc_error(FSC_ERR_INVALID, "llama config: vocab is %d, must be in [1, %d]", c->vocab, MAX_VOCAB);
    if (!(c->rope_theta > 0.0f) || !isfinite(c->rope_theta))
        return fsc_error(FSC_ERR_INVALID, "llama config: rope_theta %g must be a positive number (Llama: 10000)",
                         (double)c->rope_theta);
    if (!(c->norm_eps > 0.0f) || !isfinite(c->norm_eps))
        return fsc_error(FSC_ERR_INVALID, "llama config: norm_eps %g must be a positive number (Llama: 1e-5)",
                         (double)c->norm_eps);
    return FSC_OK;
}

int fsc_llama_num_tensors(const fsc_llama_config *c) { return 1 + LLAMA_LAYER_PARAMS * c->layers + 2; }

size_t fsc_llama_num_params(const fsc_llama_config *c) {
    size_t C = (size_t)c->dim, HD = C / (size_t)c->heads, KV = HD * (size_t)c->kv_heads, F = (size_t)c->ffn;
    size_t layer = 2 * C * C + 2 * KV * C + 3 * F * C + 2 * C; /* q, o; k, v; gate, up, down; two norms */
    return 2 * (size_t)c->vocab * C + (size_t)c->layers * layer + C;
}

static const char *const layer_names[LLAMA_LAYER_PARAMS] = {
    "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
    "mlp.gate_proj.weight",    "mlp.up_proj.weight",      "mlp.down_proj.weight",    "input_layernorm.weight",
    "post_attention_layernorm.weight",
};

static void set_shape(fsc_param_info *p, int ndim, int64_t d0, int64_t d1) {
    p->ndim = ndim;
    p->shape[0] = d0;
    p->shape[1] = ndim == 2 ? d1 : 0;
    p->numel = (size_t)d0 * (size_t)(ndim == 2 ? d1 : 1);
}

fsc_status fsc_llama_param_info(const fsc_llama_config *c, int i, fsc_param_info *out) {
    FSC_TRY(fsc_llama_config_validate(c));
    int n = fsc_llama_num_tensors(c), L = c->layers;
    int64_t C = c->dim, V = c->vocab, F = c->ffn, HD = c->dim / c->heads, Q = HD * c->heads, KV = HD * c->kv_heads;
    if (i < 0 || i >= n) return fsc_error(FSC_ERR_INVALID, "llama: tensor index %d out of range [0, %d)", i, n);
    memset(out, 0, sizeof *out);
    out->expert = -1;
    if (i == 0) {
        snprintf(out->name, sizeof out->name, "model.embed_tokens.weight");
        set_shape(out, 2, V, C);
        out->layer = 0;
    } else if (i == n - 2) {
        snprintf(out->name, sizeof out->name, "model.norm.weight");
        set_shape(out, 1, C, 0);
        out->layer = L + 1;
    } else if (i == n - 1) {
        snprintf(out->name, sizeof out->name, "lm_head.weight");
        set_shape(out, 2, V, C);
        out->layer = L + 1;
    } else {
        int b = (i - 1) / LLAMA_LAYER_PARAMS, k = (i - 1) % LLAMA_LAYER_PARAMS;
        snprintf(out->name, sizeof out->name, "model.layers.%d.%s", b, layer_names[k]);
        out->layer = b + 1;
        switch (k) {
        case LL_Q: set_shape(out, 2, Q, C); break;
        case LL_K: case LL_V: set_shape(out, 2, KV, C); break;
        case LL_O: set_shape(out, 2, C, Q); break;
        case LL_GATE: case LL_UP: set_shape(out, 2, F, C); break;
        case LL_DOWN: set_shape(out, 2, C, F); break;
        default: set_shape(out, 1, C, 0); break; /* the two norms */
        }
    }
    return FSC_OK;
}

void fsc_llama_init_values(const fsc_llama_config *c, uint64_t seed, int i, size_t first, size_t n, float *out) {
    fsc_param_info p;
    if (fsc_llama_param_info(c, i, &p) != FSC_OK) return;
    if (p.ndim == 1) { /* RMSNorm weights */
        for (size_t j = 0; j < n; j++) out[j] = 1.0f;
        return;
    }
    fsc_rng_fill_normal(out, n, seed, p.name, first, 0.0f, 0.02f);
}

void fsc_llama_config_json(const fsc_llama_config *c, char *buf, size_t cap) {
    snprintf(buf, cap, "{\"family\":\"llama\",\"layers\":%d,\"dim\":%d,\"heads\":%d,\"kv_heads\":%d,\"ffn\":%d,"
             "\"seq\":%d,\"vocab\":%d,\"rope_theta\":%.9g,\"norm_eps\":%.9g}", c->layers, c->dim, c->heads,
             c->kv_heads, c->ffn, c->seq, c->vocab, (double)c->rope_theta, (double)c->norm_eps);
}

fsc_status fsc_llama_config_check_json(const fsc_llama_config *c, const char *recorded) {
    cJSON *o = cJSON_Parse(recorded);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return fsc_error(FSC_ERR_FORMAT, "the recorded model configuration is not a JSON object");
    }
    const cJSON *fam = cJSON_GetObjectItemCaseSensitive(o, "family");
    fsc_status s = FSC_OK;
    if (!fam) /* the GPT records no family */
        s = fsc_error(FSC_ERR_INVALID, "written for a GPT-2 model (no family recorded; load it into the GPT: "
                      "train_gpt --model gpt2); this engine's model is a Llama (family llama)");
    else if (!cJSON_IsString(fam))
        s = fsc_error(FSC_ERR_FORMAT, "the recorded model configuration has a family that is not a string");
    else if (strcmp(fam->valuestring, "llama") != 0)
        s = fsc_error(FSC_ERR_INVALID, "written for a model of family '%.40s'; this engine's model is a Llama "
                      "(family llama)", fam->valuestring);
    cJSON_Delete(o);
    FSC_TRY(s);
    char own[512];
    fsc_llama_config_json(c, own, sizeof own);
    if (strcmp(own, recorded) != 0)
        return fsc_error(FSC_ERR_INVALID, "written for a Llama of configuration %.300s; this engine's model has "
                         "%.300s", recorded, own);
    return FSC_OK;
}

/* ---- the model object ----------------------------------------------------------------------------- */

static void l_init(void *ctx, uint64_t seed, int i, size_t first, size_t n, float *out) {
    fsc_llama_init_values(&((llama *)ctx)->cfg, seed, i, first, n, out);
}

static void l_config(void *ctx, char *buf, size_t cap) { fsc_llama_config_json(&((llama *)ctx)->cfg, buf, cap); }
static fsc_status l_config_check(void *ctx, const char *recorded) {
    return fsc_llama_config_check_json(&((llama *)ctx)->cfg, recorded);
}

/* Bytes of parameters (x param_scale) and of one micro-batch's saved activations. */
static double l_layer_cost(void *ctx, int l, int B, float param_scale) {
    const llama *m = ctx;
    const fsc_llama_config *c = &m->cfg;
    double P = 0;
    for (int i = 0; i < m->m.n_tensors; i++)
        if (m->info[i].layer == l) P += (double)m->info[i].numel;
    double N = (double)B * c->seq, acts = N * c->dim;
    if (l == c->layers + 1) acts += N * c->vocab + N * c->dim + 2 * N;
    else if (l > 0) acts += (double)llama_layer_saved_floats(c, B);
    return 4.0 * (param_scale * P + acts);
}

static void l_destroy(fsc_model *fm) {
    llama *m = (llama *)fm;
    fsc_device_release(m->dev, m->zero_pos);
    free(m->info);
    free(m->param);
    free(m->grad);
    free(m);
}

static const fsc_model_ops llama_ops = {
    .acts_create = llama_acts_create, .acts_free = llama_acts_free, .acts_bytes = llama_acts_bytes,
    .set_batch = llama_set_batch, .stream = llama_stream, .stream_floats = llama_stream_floats,
    .forward = llama_forward, .backward = llama_backward, .init_values = l_init, .layer_cost = l_layer_cost,
    .config = l_config, .config_check = l_config_check, .destroy = l_destroy,
};

fsc_status fsc_llama_model_create(fsc_device *dev, const fsc_llama_config *cfg, fsc_model **out) {
    *out = NULL;
    if (!dev) return fsc_error(FSC_ERR_INVALID, "llama create: device is NULL");
    FSC_TRY(fsc_llama_config_validate(cfg));
    llama *m = calloc(1, sizeof *m);
    if (!m) return fsc_error(FSC_ERR_NOMEM, "llama create: out of host memory");
    int n = fsc_llama_num_tensors(cfg);
    m->cfg = *cfg;
    m->dev = dev;
    m->info = calloc((size_t)n, sizeof *m->info);
    m->param = calloc((size_t)n, sizeof *m->param);
    m->grad = calloc((size_t)n, sizeof *m->grad);
    m->m = (fsc_model){ .n_layers = cfg->layers + 2, .n_tensors = n, .info = m->info, .param = m->param,
                        .grad = m->grad, .sample_input_bytes = (size_t)cfg->seq * sizeof(int32_t),
                        .sample_target_bytes = (size_t)cfg->seq * sizeof(int32_t), .loss_terms = cfg->seq,
                        .ops = &llama_ops, .ctx = m };
    fsc_status s = m->info && m->param && m->grad ? FSC_OK : fsc_error(FSC_ERR_NOMEM, "llama create: out of host memory");
    for (int i = 0; i < n && s == FSC_OK; i++) s = fsc_llama_param_info(cfg, i, &m->info[i]);
    /* the embedding kernel adds a position table: Llama's is zeros (exact: x + 0 = x) */
    if (s == FSC_OK)
        s = fsc_device_calloc(dev, FSC_TAG_WORKSPACE, (size_t)cfg->seq * cfg->dim * sizeof(float), (void **)&m->zero_pos);
    if (s != FSC_OK) {
        l_destroy(&m->m);
        return s;
    }
    *out = &m->m;
    return FSC_OK;
}
