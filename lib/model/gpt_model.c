/* The GPT of gpt.h as a model of model.h: the engine, strategies, pipelines and checkpoints run it through the
 * model interface only. Layers 0 (embedding), 1..L (blocks), L+1 (head); wte is tied (owned by layer 0, used by
 * the head) with m->dwte_head as its tied-gradient buffer; inputs and targets are int32 tokens, seq per sample,
 * one loss term per token. The configuration recorded in checkpoints is the JSON object checkpoints have always
 * held ({"layers", "dim", "heads", "seq", "vocab"} and the MoE fields for MoE models).
 * Not here: the layers (gpt_run.c), the tensor-parallel GPT (lib/tp/tp_engine.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "fsc/gpt.h"
#include "fsc/nn.h"

typedef struct {
    fsc_model m;      /* first: the model handed out */
    fsc_gpt *g;
    float **tied;     /* (n_tensors): dwte_head for wte, NULL elsewhere */
} gpt_model;

static fsc_gpt *G(void *ctx) { return ((gpt_model *)ctx)->g; }

static fsc_status g_create(void *ctx, const fsc_model_acts_opts *o, fsc_model_acts **out) {
    fsc_gpt *g = G(ctx);
    fsc_gpt_acts_opts go = { .B = o->B, .T = g->cfg.seq, .first = o->first, .last = o->last,
                             .checkpoint = o->checkpoint, .offload_inputs = o->offload_inputs };
    fsc_gpt_acts *a = NULL;
    FSC_TRY(fsc_gpt_acts_create(g, &go, &a));
    *out = (fsc_model_acts *)a;
    return FSC_OK;
}

static void g_free(void *ctx, fsc_model_acts *a) {
    (void)ctx;
    fsc_gpt_acts_free((fsc_gpt_acts *)a);
}

static size_t g_bytes(void *ctx, const fsc_model_acts *a) {
    (void)ctx;
    return fsc_gpt_acts_bytes((const fsc_gpt_acts *)a);
}

static fsc_status g_set_batch(void *ctx, fsc_model_acts *a, const void *inputs, const void *targets) {
    (void)ctx;
    return fsc_gpt_acts_set_batch((fsc_gpt_acts *)a, inputs, targets);
}

static float *g_stream(void *ctx, fsc_model_acts *am, fsc_stream which) {
    (void)ctx;
    fsc_gpt_acts *a = (fsc_gpt_acts *)am;
    switch (which) {
    case FSC_STREAM_INPUT: return fsc_gpt_acts_input(a);
    case FSC_STREAM_OUTPUT: return fsc_gpt_acts_output(a);
    case FSC_STREAM_GRAD_OUTPUT: return fsc_gpt_acts_grad_output(a);
    default: return fsc_gpt_acts_grad_input(a);
    }
}

static size_t g_stream_floats(void *ctx, int B) {
    const fsc_gpt *g = G(ctx);
    return (size_t)B * g->cfg.seq * g->cfg.dim;
}

static fsc_status g_forward(void *ctx, fsc_model_acts *a, const fsc_model_hooks *h, double *loss_sum) {
    return fsc_gpt_forward(G(ctx), (fsc_gpt_acts *)a, h, loss_sum);
}

static fsc_status g_backward(void *ctx, fsc_model_acts *a, const fsc_model_hooks *h, float dscale) {
    return fsc_gpt_backward(G(ctx), (fsc_gpt_acts *)a, h, dscale);
}

static void g_init(void *ctx, uint64_t seed, int i, size_t first, size_t n, float *out) {
    fsc_gpt_init_values(&G(ctx)->cfg, seed, i, first, n, out);
}

/* Bytes of parameters (x param_scale) and of one micro-batch's saved activations, as fsc_balance_by_size. */
static double g_layer_cost(void *ctx, int l, int B, float param_scale) {
    const fsc_gpt_config *c = &G(ctx)->cfg;
    const double C = c->dim, V = c->vocab, T = c->seq, N = (double)B * c->seq, ps = param_scale;
    if (l == 0) return 4.0 * (ps * (V * C + T * C) + N * C);
    if (l == c->layers + 1) return 4.0 * (ps * 2 * C + V * C + N * V + N * C + 3 * N);
    return 4.0 * (ps * (12 * C * C + 13 * C) + (double)fsc_block_saved_floats(B, c->seq, c->dim, c->heads) + N * C);
}

static void g_aux(void *ctx, const fsc_model_acts *a, fsc_model_aux *out) {
    (void)ctx;
    fsc_moe_stats ms;
    fsc_gpt_acts_moe_stats((const fsc_gpt_acts *)a, &ms);
    out->aux_loss = ms.aux_loss;
    out->assigned = (double)ms.assigned;
    out->dropped = (double)ms.dropped;
}

static cJSON *config_json(const fsc_gpt_config *c) {
    cJSON *mo = cJSON_CreateObject();
    if (!mo) return NULL;
    cJSON_AddNumberToObject(mo, "layers", c->layers);
    cJSON_AddNumberToObject(mo, "dim", c->dim);
    cJSON_AddNumberToObject(mo, "heads", c->heads);
    cJSON_AddNumberToObject(mo, "seq", c->seq);
    cJSON_AddNumberToObject(mo, "vocab", c->vocab);
    if (c->moe_experts) { /* MoE models only: a dense model's configuration stays as it was */
        cJSON_AddNumberToObject(mo, "moe_experts", c->moe_experts);
        cJSON_AddNumberToObject(mo, "moe_top_k", c->moe_top_k);
        cJSON_AddNumberToObject(mo, "moe_every", c->moe_every);
        cJSON_AddNumberToObject(mo, "moe_capacity", c->moe_capacity);
        cJSON_AddNumberToObject(mo, "moe_aux", c->moe_aux);
    }
    return mo;
}

void fsc_gpt_config_json(const fsc_gpt_config *c, char *buf, size_t cap) {
    cJSON *mo = config_json(c);
    char *t = mo ? cJSON_PrintUnformatted(mo) : NULL;
    snprintf(buf, cap, "%s", t ? t : "{}");
    free(t);
    cJSON_Delete(mo);
}

static int num(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? (int)v->valuedouble : 0;
}

static void g_config(void *ctx, char *buf, size_t cap) { fsc_gpt_config_json(&G(ctx)->cfg, buf, cap); }

fsc_status fsc_gpt_config_check_json(const fsc_gpt_config *b, const char *recorded) {
    cJSON *o = cJSON_Parse(recorded);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return fsc_error(FSC_ERR_FORMAT, "the recorded model configuration is not a JSON object");
    }
    /* the GPT records no family (its configuration text predates the Llama); any other family is refused */
    const cJSON *fam = cJSON_GetObjectItemCaseSensitive(o, "family");
    if (fam && !(cJSON_IsString(fam) && !strcmp(fam->valuestring, "gpt2"))) {
        /* the trainer's other family gets its option; a program's own model, none */
        const int llama = cJSON_IsString(fam) && !strcmp(fam->valuestring, "llama");
        fsc_status s = cJSON_IsString(fam)
            ? fsc_error(FSC_ERR_INVALID, "written for a model of family '%.40s' (load it into that model%s); this "
                        "engine's model is a GPT-2 (family gpt2)", fam->valuestring,
                        llama ? ": train_gpt --model llama" : "")
            : fsc_error(FSC_ERR_FORMAT, "the recorded model configuration has a family that is not a string");
        cJSON_Delete(o);
        return s;
    }
    fsc_gpt_config a = { .layers = num(o, "layers"), .dim = num(o, "dim"), .heads = num(o, "heads"),
                         .seq = num(o, "seq"), .vocab = num(o, "vocab"), .moe_experts = num(o, "moe_experts"),
                         .moe_every = num(o, "moe_every") };
    cJSON_Delete(o);
    if (a.layers != b->layers || a.dim != b->dim || a.heads != b->heads || a.seq != b->seq || a.vocab != b->vocab)
        return fsc_error(FSC_ERR_INVALID, "written for a model of %d layers, width %d, %d heads, context %d, "
                         "vocab %d; this engine's model has %d, %d, %d, %d, %d", a.layers, a.dim, a.heads, a.seq,
                         a.vocab, b->layers, b->dim, b->heads, b->seq, b->vocab);
    int ea = a.moe_experts, eb = b->moe_experts, na = ea ? (a.moe_every ? a.moe_every : 1) : 0,
        nb = eb ? (b->moe_every ? b->moe_every : 1) : 0;
    if (ea != eb || na != nb)
        return fsc_error(FSC_ERR_INVALID, "written for a model with %d experts (moe_every %d; 0: dense); this "
                         "engine's model has %d experts (moe_every %d)", ea, na, eb, nb);
    return FSC_OK;
}

static fsc_status g_config_check(void *ctx, const char *recorded) {
    return fsc_gpt_config_check_json(&G(ctx)->cfg, recorded);
}

static fsc_status g_check_tensors(void *ctx, const char *recorded, const fsc_param_info *params, int n) {
    (void)ctx; /* the recorded configuration describes the tensors, whatever this model's own */
    return fsc_gpt_check_tensors(recorded, params, n);
}

static const float *g_logits(void *ctx, const fsc_model_acts *a, int *vocab) {
    *vocab = G(ctx)->cfg.vocab;
    return fsc_gpt_acts_logits((const fsc_gpt_acts *)a);
}

double fsc_gpt_flops_per_token(const fsc_gpt_config *c) {
    const double C = c->dim, T = c->seq;
    double mm = (double)fsc_gpt_num_params(c) - T * C; /* wpe is looked up, not multiplied */
    if (c->moe_experts > c->moe_top_k) /* each token runs top-k of the E experts, each 4C x C twice plus biases */
        mm -= (double)(c->moe_experts - c->moe_top_k) * (8.0 * C * C + 5.0 * C) * fsc_gpt_num_moe_blocks(c);
    return fsc_lm_flops_per_token(mm, c->layers, c->dim, c->seq);
}

static double g_flops(void *ctx, int B) {
    const fsc_gpt_config *c = &G(ctx)->cfg;
    return fsc_gpt_flops_per_token(c) * (double)B * (double)c->seq;
}

static fsc_status g_set_ep(void *ctx, fsc_comm *ep) { return fsc_gpt_set_expert_group(G(ctx), ep); }

static void g_destroy(fsc_model *m) {
    gpt_model *gm = (gpt_model *)m;
    fsc_gpt_free(gm->g);
    free(gm->tied);
    free(gm);
}

#define GPT_OPS(aux, ep)                                                                                            \
    { .acts_create = g_create, .acts_free = g_free, .acts_bytes = g_bytes, .set_batch = g_set_batch,                \
      .stream = g_stream, .stream_floats = g_stream_floats, .forward = g_forward, .backward = g_backward,           \
      .init_values = g_init, .layer_cost = g_layer_cost, .aux_stats = aux, .config = g_config,                      \
      .config_check = g_config_check, .check_tensors = g_check_tensors, .set_expert_group = ep,                   \
      .destroy = g_destroy, .logits = g_logits, .flops = g_flops }
static const fsc_model_ops dense_ops = GPT_OPS(NULL, NULL);
static const fsc_model_ops moe_ops = GPT_OPS(g_aux, g_set_ep);

fsc_status fsc_gpt_model_create(fsc_device *dev, const fsc_gpt_config *cfg, fsc_model **out) {
    *out = NULL;
    gpt_model *gm = calloc(1, sizeof *gm);
    if (!gm) return fsc_error(FSC_ERR_NOMEM, "gpt model: out of host memory");
    fsc_status s = fsc_gpt_create(dev, cfg, &gm->g);
    if (s == FSC_OK && !(gm->tied = calloc((size_t)gm->g->n_tensors, sizeof *gm->tied)))
        s = fsc_error(FSC_ERR_NOMEM, "gpt model: out of host memory");
    if (s != FSC_OK) {
        fsc_gpt_free(gm->g);
        free(gm);
        return s;
    }
    fsc_gpt *g = gm->g;
    gm->tied[FSC_P_WTE] = g->dwte_head;
    gm->m = (fsc_model){ .n_layers = cfg->layers + 2, .n_tensors = g->n_tensors, .info = g->info,
                         .param = g->param, .grad = g->grad, .tied_grad = gm->tied,
                         .sample_input_bytes = (size_t)cfg->seq * sizeof(int32_t),
                         .sample_target_bytes = (size_t)cfg->seq * sizeof(int32_t), .loss_terms = cfg->seq,
                         .n_experts = cfg->moe_experts, .ops = cfg->moe_experts ? &moe_ops : &dense_ops, .ctx = gm };
    *out = &gm->m;
    return FSC_OK;
}

fsc_gpt *fsc_gpt_model_gpt(fsc_model *m) {
    return m && m->ops && (m->ops == &dense_ops || m->ops == &moe_ops) ? ((gpt_model *)m->ctx)->g : NULL;
}
