/* The Llama model (llama.h): configuration checks and defaults, the tensors in Hugging Face LlamaForCausalLM
 * names and shapes, initial values from the keyed RNG, the configuration text checkpoints record, and the model
 * handed to the engine (model.h): a sequential model of layers (layers.h: the token embedding, a Llama block
 * per decoder layer, the LM head with its final RMSNorm), wrapped to keep the Llama's own configuration
 * record, its check and its per-layer cost. Not here: the layers and the records, passes and hooks (lib/layers). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "fsc/llama.h"
#include "fsc/layers.h"
#include "fsc/nn.h"
#include "fsc/rng.h"
#include "core/locale_impl.h"
#include "layers/layers_impl.h"
#include "llama_impl.h"
#include "seq_wrap.h"
#include "io/json_lock.h" /* fsc_json_parse: cJSON under the library's lock */

/* Tensors per decoder layer, in the order of llama.h (Hugging Face's state dict order). */
#define LLAMA_LAYER_PARAMS 9
enum { LL_Q = 0, LL_K, LL_V, LL_O, LL_GATE, LL_UP, LL_DOWN, LL_NORM1, LL_NORM2 };

/* Limits that keep every size and gemm dimension inside int and the names inside 64 bytes. */
#define MAX_LAYERS 100000
#define MAX_DIM (1 << 16)
#define MAX_FFN (1 << 20)
#define MAX_SEQ (1 << 20)
#define MAX_VOCAB (1 << 24)

int fsc_llama_default_ffn(int dim) { return layers_llama_ffn(dim); } /* Meta's rule, with the Llama block */

fsc_llama_config fsc_llama_config_default(void) {
    return (fsc_llama_config){ .layers = 4, .dim = 128, .heads = 4, .kv_heads = 4, .ffn = fsc_llama_default_ffn(128),
                               .seq = 64, .vocab = 256, .rope_theta = 10000.0f, .norm_eps = 1e-5f };
}

fsc_status fsc_llama_config_validate(const fsc_llama_config *c) {
    FSC_CHECK_ARG(c);
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
    if (c->padded_vocab && (c->padded_vocab < c->vocab || c->padded_vocab > MAX_VOCAB))
        return fsc_error(FSC_ERR_INVALID, "llama config: padded_vocab is %d, must be 0 (none) or in [vocab %d, %d]",
                         c->padded_vocab, c->vocab, MAX_VOCAB);
    if (!(c->rope_theta > 0.0f) || !isfinite(c->rope_theta))
        return fsc_error(FSC_ERR_INVALID, "llama config: rope_theta %g must be a positive number (Llama: 10000)",
                         (double)c->rope_theta);
    if (!(c->norm_eps > 0.0f) || !isfinite(c->norm_eps))
        return fsc_error(FSC_ERR_INVALID, "llama config: norm_eps %g must be a positive number (Llama: 1e-5)",
                         (double)c->norm_eps);
    return llama_moe_validate(c);
}

int fsc_llama_num_tensors(const fsc_llama_config *c) { /* an MoE layer trades the 3 MLP tensors for 1 + 4 E */
    if (!c) return 0;
    return 1 + LLAMA_LAYER_PARAMS * c->layers + 2 + fsc_llama_num_moe_layers(c) * (4 * c->moe_experts - 2);
}

size_t fsc_llama_num_params(const fsc_llama_config *c) {
    if (!c) return 0;
    size_t C = (size_t)c->dim, HD = C / (size_t)c->heads, KV = HD * (size_t)c->kv_heads, F = (size_t)c->ffn;
    size_t layer = 2 * C * C + 2 * KV * C + 3 * F * C + 2 * C; /* q, o; k, v; gate, up, down; two norms */
    const size_t M = (size_t)fsc_llama_num_moe_layers(c), E = (size_t)c->moe_experts; /* MoE: gate and experts */
    const size_t moe = M ? M * (C * E + E * (2 * C * F + F + C) - 3 * F * C) : 0;
    return 2 * (size_t)fsc_llama_vocab_rows(c) * C + (size_t)c->layers * layer + C + moe;
}

int fsc_llama_vocab_rows(const fsc_llama_config *c) {
    return !c ? 0 : c->padded_vocab > c->vocab ? c->padded_vocab : c->vocab;
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
    FSC_CHECK_ARG(c);
    FSC_CHECK_ARG(out);
    FSC_TRY(fsc_llama_config_validate(c));
    return c->moe_experts ? llama_moe_param_info(c, i, out) : llama_dense_param_info(c, i, out);
}

fsc_status llama_dense_param_info(const fsc_llama_config *c, int i, fsc_param_info *out) {
    int n = 1 + LLAMA_LAYER_PARAMS * c->layers + 2, L = c->layers;
    int64_t C = c->dim, V = fsc_llama_vocab_rows(c), F = c->ffn, HD = c->dim / c->heads, Q = HD * c->heads;
    int64_t KV = HD * c->kv_heads;
    if (i < 0 || i >= n) return fsc_error(FSC_ERR_INVALID, "llama: tensor index %d out of range [0, %d)", i, n);
    memset(out, 0, sizeof *out);
    out->expert = -1;
    if (i == 0) {
        snprintf(out->name, sizeof out->name, "model.embed_tokens.weight");
        set_shape(out, 2, V, C);
        out->file_rows = V > c->vocab ? c->vocab : 0; /* padding rows: not in weights files */
        out->layer = 0;
    } else if (i == n - 2) {
        snprintf(out->name, sizeof out->name, "model.norm.weight");
        set_shape(out, 1, C, 0);
        out->layer = L + 1;
    } else if (i == n - 1) {
        snprintf(out->name, sizeof out->name, "lm_head.weight");
        set_shape(out, 2, V, C);
        out->file_rows = V > c->vocab ? c->vocab : 0;
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
    if (p.ndim == 1) { /* RMSNorm weights 1, the MoE experts' biases 0 */
        const float v = p.expert >= 0 ? 0.0f : 1.0f;
        for (size_t j = 0; j < n; j++) out[j] = v;
        return;
    }
    fsc_rng_fill_normal(out, n, seed, p.name, first, 0.0f, 0.02f);
    const size_t real = p.file_rows ? (size_t)p.file_rows * (size_t)p.shape[1] : p.numel; /* padding rows: 0 */
    for (size_t j = real > first ? real - first : 0; j < n; j++) out[j] = 0.0f;
}

void fsc_llama_config_json(const fsc_llama_config *c, char *buf, size_t cap) {
    if (buf && cap) buf[0] = '\0';
    if (!c || !buf) return;
    const locale_t before = fsc_numbers_c(); /* 9.99999975e-06, never 9,99999975e-06: JSON whatever LC_NUMERIC */
    const int w = snprintf(buf, cap, "{\"family\":\"llama\",\"layers\":%d,\"dim\":%d,\"heads\":%d,\"kv_heads\":%d,\"ffn\":%d,"
             "\"seq\":%d,\"vocab\":%d,\"rope_theta\":%.9g,\"norm_eps\":%.9g}", c->layers, c->dim, c->heads,
             c->kv_heads, c->ffn, c->seq, c->vocab, (double)c->rope_theta, (double)c->norm_eps);
    int at = w;
    if (c->moe_experts && at > 0 && (size_t)at < cap) /* MoE models only: a dense Llama's text stays as it was */
        at += snprintf(buf + at - 1, cap - (size_t)at + 1, ",\"moe_experts\":%d,\"moe_top_k\":%d,\"moe_every\":%d,"
                       "\"moe_capacity\":%.9g,\"moe_aux\":%.9g}", c->moe_experts, c->moe_top_k, c->moe_every,
                       (double)c->moe_capacity, (double)c->moe_aux) - 1;
    if (fsc_llama_vocab_rows(c) > c->vocab && at > 0 && (size_t)at < cap) /* padded models only, as MoE's fields */
        snprintf(buf + at - 1, cap - (size_t)at + 1, ",\"padded_vocab\":%d}", c->padded_vocab);
    fsc_numbers_back(before);
}

/* A recorded number as the model takes it: moe_top_k, moe_every and moe_capacity 0 are 1 (llama.h). */
static double resolved(const cJSON *x) {
    const int one = !strcmp(x->string, "moe_top_k") || !strcmp(x->string, "moe_every") ||
                    !strcmp(x->string, "moe_capacity");
    return one && x->valuedouble == 0 ? 1.0 : x->valuedouble;
}

/* A recorded configuration whose text differs from this model's own (both JSON objects): FSC_OK when every field
 * holds the same value (numbers compared as the floats and integers they set: 10000.0 is 10000), else the error
 * naming the first field of own whose recorded value differs or is missing (or the first recorded field own
 * lacks) with both values. */
static fsc_status config_differs(const char *own, const char *recorded) {
    cJSON *a = fsc_json_parse(own), *b = fsc_json_parse(recorded);
    char field[64] = "", mine[64] = "", theirs[64] = "";
    int found = 0; /* a field differs (its name may be empty: "" is a JSON key) */
    const cJSON *x;
    cJSON_ArrayForEach(x, a) {
        const cJSON *y = cJSON_GetObjectItemCaseSensitive(b, x->string);
        const int same = y && (cJSON_IsNumber(x) ? cJSON_IsNumber(y) && fsc_json_same_float(resolved(x), resolved(y))
                                                 : cJSON_Compare(x, y, 1));
        if (same) continue;
        char *t = y ? cJSON_PrintUnformatted(y) : NULL, *m = cJSON_PrintUnformatted(x);
        snprintf(field, sizeof field, "%.40s", x->string);
        snprintf(mine, sizeof mine, "%.40s", m ? m : "?");
        snprintf(theirs, sizeof theirs, "%.40s", t ? t : "absent");
        cJSON_free(t), cJSON_free(m); /* cJSON's allocator: a program may have set its hooks */
        found = 1;
        break;
    }
    cJSON_ArrayForEach(x, b) {
        if (found) break;
        if (cJSON_GetObjectItemCaseSensitive(a, x->string)) continue;
        char *t = cJSON_PrintUnformatted(x);
        snprintf(field, sizeof field, "%.40s", x->string);
        snprintf(mine, sizeof mine, "absent");
        snprintf(theirs, sizeof theirs, "%.40s", t ? t : "?");
        cJSON_free(t);
        found = 1;
    }
    cJSON_Delete(a), cJSON_Delete(b);
    if (!found) return FSC_OK; /* the same values written otherwise (10000.0 for 10000) */
    return fsc_error(FSC_ERR_INVALID, "written for a Llama with %s%s%s %s; this engine's model has %s%s%s %s (recorded "
                     "configuration: %.300s)", field[0] ? "" : "\"", field, field[0] ? "" : "\"", theirs,
                     field[0] ? "" : "\"", field, field[0] ? "" : "\"", mine, recorded);
}

fsc_status fsc_llama_config_check_json(const fsc_llama_config *c, const char *recorded) {
    FSC_CHECK_ARG(c);
    FSC_CHECK_ARG(recorded);
    cJSON *o = fsc_json_parse(recorded);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return fsc_error(FSC_ERR_FORMAT, "the recorded model configuration is not a JSON object");
    }
    const cJSON *fam = cJSON_GetObjectItemCaseSensitive(o, "family");
    fsc_status s = FSC_OK;
    if (!fam) /* the GPT records no family */
        s = fsc_error(FSC_ERR_INVALID, "written for a GPT-2 model (no family recorded; load it into the GPT: "
                      "fsc-train --model gpt2); this engine's model is a Llama (family llama)");
    else if (!cJSON_IsString(fam))
        s = fsc_error(FSC_ERR_FORMAT, "the recorded model configuration has a family that is not a string");
    else if (strcmp(fam->valuestring, "llama") != 0)
        s = fsc_error(FSC_ERR_INVALID, "written for a model of family '%.40s'; this engine's model is a Llama "
                      "(family llama)", fam->valuestring);
    cJSON_Delete(o);
    FSC_TRY(s);
    char own[512];
    fsc_llama_config_json(c, own, sizeof own);
    return strcmp(own, recorded) != 0 ? config_differs(own, recorded) : FSC_OK;
}

/* ---- the model object: the layers' model, wrapped ------------------------------------------------------- */

typedef struct {
    seq_wrap w;            /* first: the model handed out, over the sequential model of the Llama's layers */
    fsc_llama_config cfg;
} llama;

static fsc_model *seq_of(void *ctx) { return ((llama *)ctx)->w.seq; }

/* The Llama's own limit on a record (every size inside int), then the layers' record. */
static fsc_status l_check(void *ctx, const fsc_model_acts_opts *o) {
    const fsc_llama_config *c = &((llama *)ctx)->cfg;
    const int L = c->layers;
    if (o->B < 1) return fsc_error(FSC_ERR_INVALID, "llama acts: batch B=%d; need B >= 1", o->B);
    if (o->first < 0 || o->last > L + 1 || o->first > o->last)
        return fsc_error(FSC_ERR_INVALID, "llama acts: layer range [%d, %d] is not inside [0, %d] (%d decoder layers)",
                         o->first, o->last, L + 1, L);
    double est = (double)o->B * c->seq * ((double)c->heads * c->seq * 3 + (double)c->dim * 8 * (L + 2) +
                                          (double)c->ffn * 3 * L + (double)fsc_llama_vocab_rows(c) * 2);
    if ((double)o->B * c->seq > 2147483647.0 || (double)o->B * c->heads > 2147483647.0 || est > 1e15)
        return fsc_error(FSC_ERR_INVALID, "llama acts: B=%d is too large for this model", o->B);
    return FSC_OK;
}
static fsc_status l_acts_create(void *ctx, const fsc_model_acts_opts *o, fsc_model_acts **out) {
    *out = NULL;
    FSC_TRY(l_check(ctx, o));
    fsc_model *s = seq_of(ctx);
    return s->ops->acts_create(s->ctx, o, out);
}
static fsc_status l_acts_remake(void *ctx, fsc_model_acts *old, const fsc_model_acts_opts *o, fsc_model_acts **out) {
    return seq_wrap_acts_remake(ctx, l_check(ctx, o), old, o, out);
}

static void l_config(void *ctx, char *buf, size_t cap) { fsc_llama_config_json(&((llama *)ctx)->cfg, buf, cap); }
static fsc_status l_config_check(void *ctx, const char *recorded) {
    return fsc_llama_config_check_json(&((llama *)ctx)->cfg, recorded);
}

/* Floats a decoder layer's record keeps for a micro-batch of B sequences: the two norms' outputs and rstd, h,
 * attention and MLP records (a block's record, counted in 64-float pieces). */
static size_t r64(size_t n) { return (n + 63) / 64 * 64; }
static size_t layer_saved_floats(const fsc_llama_config *c, int B) {
    size_t N = (size_t)B * c->seq, NC = N * (size_t)c->dim;
    fsc_self_attn_config ac = { .B = B, .T = c->seq, .C = c->dim, .NH = c->heads, .KVH = c->kv_heads,
                                .HS = c->dim / c->heads, .rope_theta = c->rope_theta };
    return 3 * r64(NC) + 2 * r64(N) + fsc_self_attn_saved_floats(&ac) + fsc_swiglu_mlp_saved_floats(N, c->ffn);
}

/* Bytes of parameters (x param_scale) and of one micro-batch's saved activations. */
static double l_layer_cost(void *ctx, int l, int B, float param_scale) {
    const llama *m = ctx;
    const fsc_llama_config *c = &m->cfg;
    double P = 0;
    for (int i = 0; i < m->w.m.n_tensors; i++)
        if (m->w.m.info[i].layer == l) P += (double)m->w.m.info[i].numel;
    double N = (double)B * c->seq, acts = N * c->dim;
    if (l == c->layers + 1) acts += N * c->vocab + N * c->dim + 2 * N;
    else if (l > 0) acts += (double)layer_saved_floats(c, B);
    return 4.0 * (param_scale * P + acts);
}

static void l_destroy(fsc_model *fm) { seq_wrap_free((seq_wrap *)fm); }

/* 6 x every parameter but the (untied) token embedding per token, plus attention (model.h's estimate); with MoE
 * layers only the top-k experts of each (each GELU expert 2 C F weights plus F + C biases). The configuration is
 * the full model's, also on a tensor group: every rank reports the step's FLOPs, not its share. */
static double l_flops(void *ctx, int B) {
    const fsc_llama_config *c = &((llama *)ctx)->cfg;
    const double C = c->dim, F = c->ffn;
    const int k = c->moe_top_k ? c->moe_top_k : 1;
    /* nor the head's padding rows (a padded vocabulary: in no product) */
    double mm = (double)fsc_llama_num_params(c) - (double)fsc_llama_vocab_rows(c) * c->dim -
                (double)(fsc_llama_vocab_rows(c) - c->vocab) * c->dim;
    if (c->moe_experts > k)
        mm -= (double)(c->moe_experts - k) * (2.0 * C * F + F + C) * fsc_llama_num_moe_layers(c);
    return fsc_lm_flops_per_token(mm, c->layers, c->dim, c->seq) * (double)B * c->seq;
}


static const fsc_model_ops llama_ops = {
    .acts_create = l_acts_create, .acts_free = seq_wrap_acts_free, .acts_bytes = seq_wrap_acts_bytes,
    .set_batch = seq_wrap_set_batch, .stream = seq_wrap_stream, .stream_floats = seq_wrap_stream_floats,
    .forward = seq_wrap_forward, .backward = seq_wrap_backward, .init_values = seq_wrap_init,
    .layer_cost = l_layer_cost, .config = l_config, .config_check = l_config_check,
    .destroy = l_destroy, .logits = seq_wrap_logits, .logits_part = seq_wrap_logits_part, .flops = l_flops,
    .backward_input = seq_wrap_backward_input, .backward_weight = seq_wrap_backward_weight,
    .splits_tied = seq_wrap_splits_tied, .acts_remake = l_acts_remake,
};
static const fsc_model_ops llama_moe_ops = { /* with MoE layers: their statistics and expert group */
    .acts_create = l_acts_create, .acts_free = seq_wrap_acts_free, .acts_bytes = seq_wrap_acts_bytes,
    .set_batch = seq_wrap_set_batch, .stream = seq_wrap_stream, .stream_floats = seq_wrap_stream_floats,
    .forward = seq_wrap_forward, .backward = seq_wrap_backward, .init_values = seq_wrap_init,
    .layer_cost = l_layer_cost, .config = l_config, .config_check = l_config_check,
    .destroy = l_destroy, .aux_stats = seq_wrap_aux, .aux_layers = seq_wrap_aux_layers,
    .set_expert_group = seq_wrap_set_expert_group, .logits = seq_wrap_logits, .logits_part = seq_wrap_logits_part,
    .flops = l_flops,
    .backward_input = seq_wrap_backward_input, .backward_weight = seq_wrap_backward_weight,
    .splits_tied = seq_wrap_splits_tied, .acts_remake = l_acts_remake,
};

/* Layers 0 the token embedding, 1..L the blocks, L+1 the final RMSNorm and the untied LM head. */
static fsc_status build_layers(fsc_device *dev, const fsc_llama_config *c, fsc_comm *tp, int sp, fsc_model **out) {
    const int L = c->layers, n = L + 2;
    fsc_seq_layer *sl = calloc((size_t)n, sizeof *sl);
    char(*prefix)[32] = calloc((size_t)n, sizeof *prefix);
    fsc_status st = sl && prefix ? FSC_OK : fsc_error(FSC_ERR_NOMEM, "llama create: out of host memory");
    fsc_layer *y = NULL;
    fsc_embedding_opts eo = { .T = c->seq, .C = c->dim, .V = c->vocab, .Vp = fsc_llama_vocab_rows(c), .tp = tp,
                              .sp = sp };
    if (st == FSC_OK) st = fsc_layer_embedding_opts(&eo, &y);
    if (st == FSC_OK) sl[0] = (fsc_seq_layer){ .layer = y, .prefix = "model.embed_tokens." };
    for (int i = 0; i < L && st == FSC_OK; i++) {
        fsc_block_opts o = { .kind = FSC_BLOCK_LLAMA, .T = c->seq, .C = c->dim, .heads = c->heads,
                             .kv_heads = c->kv_heads, .F = c->ffn, .rope_theta = c->rope_theta, .eps = c->norm_eps,
                             .tp = tp, .sp = sp };
        if (fsc_llama_layer_is_moe(c, i)) /* an MoE MLP of GELU experts of width ffn (block_moe.c) */
            o.moe_experts = c->moe_experts, o.moe_top_k = c->moe_top_k, o.moe_capacity = c->moe_capacity,
            o.moe_aux = c->moe_aux;
        st = fsc_layer_block(&o, &y);
        snprintf(prefix[i], sizeof prefix[i], "model.layers.%d.", i);
        if (st == FSC_OK) sl[1 + i] = (fsc_seq_layer){ .layer = y, .prefix = prefix[i] };
    }
    fsc_lm_head_opts ho = { .T = c->seq, .C = c->dim, .V = c->vocab, .Vp = fsc_llama_vocab_rows(c),
                            .norm = FSC_HEAD_NORM_RMSNORM,
                            .eps = c->norm_eps, .norm_name = "model.norm.", .head_name = "lm_head.weight",
                            .tp = tp, .sp = sp };
    if (st == FSC_OK) st = fsc_layer_lm_head_opts(&ho, &y);
    if (st == FSC_OK) sl[n - 1] = (fsc_seq_layer){ .layer = y };
    if (st == FSC_OK) {
        st = fsc_seq_model_create(dev, sl, n, out); /* takes the layers, also when it fails */
    } else {
        for (int l = 0; sl && l < n; l++) fsc_layer_free(sl[l].layer);
    }
    free(sl), free(prefix);
    return st;
}

fsc_status fsc_llama_model_create(fsc_device *dev, const fsc_llama_config *cfg, fsc_model **out) {
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(cfg);
    FSC_CHECK_ARG(out);
    return fsc_llama_model_create_tp(dev, cfg, NULL, 0, out);
}

fsc_status fsc_llama_build(void *arg, fsc_device *dev, fsc_comm *tp, fsc_model **out) {
    FSC_CHECK_ARG(arg);
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(out);
    const fsc_llama_build_arg *a = arg;
    if (!a) return fsc_error(FSC_ERR_INVALID, "llama build: no fsc_llama_build_arg");
    return fsc_llama_model_create_tp(dev, &a->cfg, tp, tp ? a->sp : 0, out);
}

fsc_status fsc_llama_model_create_tp(fsc_device *dev, const fsc_llama_config *cfg, fsc_comm *tp, int sp,
                                     fsc_model **out) {
    FSC_CHECK_ARG(out);
    *out = NULL;
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(cfg);
    FSC_TRY(fsc_llama_config_validate(cfg));
    llama *m = calloc(1, sizeof *m);
    if (!m) return fsc_error(FSC_ERR_NOMEM, "llama create: out of host memory");
    m->cfg = *cfg;
    fsc_status st = build_layers(dev, cfg, tp, sp, &m->w.seq);
    m->w.name = "llama";
    /* the layers' model names the tensors as fsc_llama_param_info does, in its order: check it */
    for (int i = 0; st == FSC_OK && i < m->w.seq->n_tensors; i++) {
        fsc_param_info want;
        st = fsc_llama_param_info(cfg, i, &want);
        const fsc_param_info *got = &m->w.seq->info[i];
        if (st == FSC_OK && (strcmp(got->name, want.name) != 0 || got->layer != want.layer ||
                             fsc_param_full_numel(got) != want.numel))
            st = fsc_error(FSC_ERR_INTERNAL, "llama create: tensor %d is %s of layer %d, expected %s of layer %d", i,
                           got->name, got->layer, want.name, want.layer);
        if (st == FSC_OK) /* weights files hold the real vocabulary's rows (llama.h's padded_vocab) */
            ((fsc_param_info *)got)->file_rows = want.file_rows;
    }
    if (st != FSC_OK) {
        seq_wrap_free(&m->w);
        return st;
    }
    seq_wrap_bind(&m->w, cfg->moe_experts ? &llama_moe_ops : &llama_ops);
    *out = &m->w.m;
    return FSC_OK;
}
