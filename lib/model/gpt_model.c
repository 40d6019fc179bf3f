/* The GPT of gpt.h as a model of model.h, built from layers (layers.h): a sequential model of the embedding
 * (wte, wpe), L GPT-2 blocks (FSC_BLOCK_GPT2: packed c_attn and nn.h's fsc_block_*; MoE blocks with an MoE MLP)
 * and the LM head with its final LayerNorm (ln_f), its weight tied to wte. The layers name the tensors as
 * fsc_gpt_param_info does, in its order (checked at creation), so checkpoints and weight files are the same. The
 * model wraps the layers' model (its tables, records, passes) to keep the GPT's own limits on a record, token
 * messages, configuration record and its checks, and per-layer cost; gpt.h's fsc_gpt is a view of the same tables
 * (fsc_gpt_create, gpt_acts.c). Inputs and targets are int32 tokens, seq per sample, one loss term per token.
 * Its logits are the LM head layer's, its FLOPs the full configuration's (also on a tensor group), and wte.weight
 * declares lm_head.weight as its alias (GPT2LMHeadModel's copy of the tied head).
 * Not here: the layers and the records, passes and hooks (lib/layers), the description (gpt.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "fsc/gpt.h"
#include "fsc/layers.h"
#include "fsc/nn.h"
#include "seq_wrap.h"
#include "io/json_lock.h" /* fsc_json_parse: cJSON under the library's lock */

typedef struct {
    seq_wrap w;       /* first: the model handed out, over the sequential model of the GPT's layers */
    fsc_gpt g;        /* gpt.h's view of the same tables */
} gpt_model;

static gpt_model *GM(void *ctx) { return ctx; }
static fsc_model *S(void *ctx) { return GM(ctx)->w.seq; }

/* The GPT's limits on a record (every gemm dimension inside int), then the layers'. */
static fsc_status g_check(void *ctx, const fsc_model_acts_opts *o) {
    const fsc_gpt_config *c = &GM(ctx)->g.cfg;
    const int L = c->layers;
    if (o->B < 1) return fsc_error(FSC_ERR_INVALID, "gpt acts: batch B=%d; need B >= 1", o->B);
    if (o->first < 0 || o->last > L + 1 || o->first > o->last)
        return fsc_error(FSC_ERR_INVALID, "gpt acts: layer range [%d, %d] is not inside [0, %d] (%d blocks)",
                         o->first, o->last, L + 1, L);
    if (o->offload_inputs && !o->checkpoint)
        return fsc_error(FSC_ERR_INVALID, "gpt acts: offload_inputs needs checkpoint (only checkpointed layer "
                         "inputs are offloaded)");
    double est = (double)o->B * c->seq * ((double)c->heads * c->seq * 3 + (double)c->dim * 16 * (L + 2) +
                                          (double)fsc_gpt_vocab_rows(c) * 2);
    if ((double)o->B * c->seq > 2147483647.0 || (double)o->B * c->heads > 2147483647.0 || est > 1e15)
        return fsc_error(FSC_ERR_INVALID, "gpt acts: B=%d T=%d is too large for this model", o->B, c->seq);
    return FSC_OK;
}
/* The view's dwte_head is the layers' tied-gradient buffer of wte, made with the first record that holds the embedding
 * or the head (seq_run.c): set after every record made. */
static fsc_status g_create(void *ctx, const fsc_model_acts_opts *o, fsc_model_acts **out) {
    *out = NULL;
    FSC_TRY(g_check(ctx, o));
    const fsc_status st = S(ctx)->ops->acts_create(S(ctx)->ctx, o, out);
    GM(ctx)->g.dwte_head = S(ctx)->tied_grad[FSC_P_WTE];
    return st;
}
static fsc_status g_remake(void *ctx, fsc_model_acts *old, const fsc_model_acts_opts *o, fsc_model_acts **out) {
    const fsc_status st = seq_wrap_acts_remake(ctx, g_check(ctx, o), old, o, out);
    GM(ctx)->g.dwte_head = S(ctx)->tied_grad[FSC_P_WTE];
    return st;
}

/* Bytes of parameters (x param_scale) and of one micro-batch's saved activations, as fsc_balance_by_size. */
static double g_layer_cost(void *ctx, int l, int B, float param_scale) {
    const fsc_gpt_config *c = &GM(ctx)->g.cfg;
    const double C = c->dim, V = fsc_gpt_vocab_rows(c), T = c->seq, N = (double)B * c->seq, ps = param_scale;
    if (l == 0) return 4.0 * (ps * (V * C + T * C) + N * C);
    if (l == c->layers + 1) return 4.0 * (ps * 2 * C + V * C + N * V + N * C + 3 * N);
    return 4.0 * (ps * (12 * C * C + 13 * C) + (double)fsc_block_saved_floats(B, c->seq, c->dim, c->heads) + N * C);
}

static cJSON *config_json(const fsc_gpt_config *c) {
    cJSON *mo = cJSON_CreateObject();
    if (!mo) return NULL;
    cJSON_AddNumberToObject(mo, "layers", c->layers);
    cJSON_AddNumberToObject(mo, "dim", c->dim);
    cJSON_AddNumberToObject(mo, "heads", c->heads);
    cJSON_AddNumberToObject(mo, "seq", c->seq);
    cJSON_AddNumberToObject(mo, "vocab", c->vocab);
    if (fsc_gpt_vocab_rows(c) > c->vocab) /* padded models only, as MoE's fields */
        cJSON_AddNumberToObject(mo, "padded_vocab", c->padded_vocab);
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
    if (buf && cap) buf[0] = '\0';
    if (!c || !buf) return;
    cJSON *mo = config_json(c);
    char *t = mo ? cJSON_PrintUnformatted(mo) : NULL;
    snprintf(buf, cap, "%s", t ? t : "{}");
    cJSON_free(t); /* cJSON's allocator: a program may have set its hooks */
    cJSON_Delete(mo);
}

/* o[k] as an int (0 when absent or not a number); a number that is not an integer in [0, INT_MAX] gives 0 and
 * names k in *bad (when *bad is still NULL). */
static int num(const cJSON *o, const char *k, const char **bad) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(v)) return 0;
    const double x = v->valuedouble;
    if (x >= 0 && x <= 2147483647.0 && x == floor(x)) return (int)x;
    if (!*bad) *bad = k;
    return 0;
}

static void g_config(void *ctx, char *buf, size_t cap) { fsc_gpt_config_json(&GM(ctx)->g.cfg, buf, cap); }

fsc_status fsc_gpt_config_check_json(const fsc_gpt_config *b, const char *recorded) {
    FSC_CHECK_ARG_AS(b, "c");
    FSC_CHECK_ARG(recorded);
    cJSON *o = fsc_json_parse(recorded);
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
                        llama ? ": fsc-train --model llama" : "")
            : fsc_error(FSC_ERR_FORMAT, "the recorded model configuration has a family that is not a string");
        cJSON_Delete(o);
        return s;
    }
    const char *bad = NULL;
    fsc_gpt_config a = { .layers = num(o, "layers", &bad), .dim = num(o, "dim", &bad), .heads = num(o, "heads", &bad),
                         .seq = num(o, "seq", &bad), .vocab = num(o, "vocab", &bad),
                         .moe_experts = num(o, "moe_experts", &bad), .moe_every = num(o, "moe_every", &bad),
                         .padded_vocab = num(o, "padded_vocab", &bad), .moe_top_k = num(o, "moe_top_k", &bad) };
    if (bad) {
        char *t = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(o, bad));
        fsc_status s = fsc_error(FSC_ERR_FORMAT, "the recorded model configuration's %s (%.40s) is not an integer in "
                                 "[0, 2147483647]", bad, t ? t : "?");
        cJSON_free(t);
        cJSON_Delete(o);
        return s;
    }
    /* an MoE model's routing and objective: top-k (0: 1), capacity factor (0: 1.0) and aux coefficient, compared as
     * the floats they set (fsc_json_same_float) */
    const cJSON *cap = cJSON_GetObjectItemCaseSensitive(o, "moe_capacity"), *aux = cJSON_GetObjectItemCaseSensitive(o, "moe_aux");
    const int ka = a.moe_top_k ? a.moe_top_k : 1;
    const double capa = !cJSON_IsNumber(cap) || cap->valuedouble == 0 ? 1.0 : cap->valuedouble,
                 auxa = cJSON_IsNumber(aux) ? aux->valuedouble : 0.0;
    cJSON_Delete(o);
    if (a.layers != b->layers || a.dim != b->dim || a.heads != b->heads || a.seq != b->seq || a.vocab != b->vocab)
        return fsc_error(FSC_ERR_INVALID, "written for a model of %d layers, width %d, %d heads, context %d, "
                         "vocab %d; this engine's model has %d, %d, %d, %d, %d", a.layers, a.dim, a.heads, a.seq,
                         a.vocab, b->layers, b->dim, b->heads, b->seq, b->vocab);
    if (fsc_gpt_vocab_rows(&a) != fsc_gpt_vocab_rows(b)) /* the same vocabulary, padded to another row count */
        return fsc_error(FSC_ERR_INVALID, "written for a model of %d embedding rows (vocab %d, padded_vocab %d); this "
                         "engine's model has %d (vocab %d, padded_vocab %d)", fsc_gpt_vocab_rows(&a), a.vocab,
                         a.padded_vocab, fsc_gpt_vocab_rows(b), b->vocab, b->padded_vocab);
    int ea = a.moe_experts, eb = b->moe_experts, na = ea ? (a.moe_every ? a.moe_every : 1) : 0,
        nb = eb ? (b->moe_every ? b->moe_every : 1) : 0;
    if (ea != eb || na != nb)
        return fsc_error(FSC_ERR_INVALID, "written for a model with %d experts (moe_every %d; 0: dense); this "
                         "engine's model has %d experts (moe_every %d)", ea, na, eb, nb);
    if (eb) {
        const int kb = b->moe_top_k ? b->moe_top_k : 1;
        const float capb = b->moe_capacity != 0 ? b->moe_capacity : 1.0f, auxb = b->moe_aux;
        if (ka != kb || !fsc_json_same_float(capa, capb) || !fsc_json_same_float(auxa, auxb))
            return fsc_error(FSC_ERR_INVALID, "written for a model with moe_top_k %d, moe_capacity %.9g, moe_aux %.9g; "
                             "this engine's model has moe_top_k %d, moe_capacity %.9g, moe_aux %.9g", ka, capa, auxa,
                             kb, (double)capb, (double)auxb);
    }
    return FSC_OK;
}

static fsc_status g_config_check(void *ctx, const char *recorded) {
    return fsc_gpt_config_check_json(&GM(ctx)->g.cfg, recorded);
}

static fsc_status g_check_tensors(void *ctx, const char *recorded, const fsc_param_info *params, int n) {
    (void)ctx; /* the recorded configuration describes the tensors, whatever this model's own */
    return fsc_gpt_check_tensors(recorded, params, n);
}

/* The LM head layer's logits (layers.h), device floats (B, T, V); NULL when the record does not hold the head or
 * the head keeps them split over a tensor group. */
double fsc_gpt_flops_per_token(const fsc_gpt_config *c) {
    if (!c) return 0;
    const double C = c->dim, T = c->seq;
    double mm = (double)fsc_gpt_num_params(c) - T * C; /* wpe is looked up, not multiplied */
    mm -= (double)(fsc_gpt_vocab_rows(c) - c->vocab) * C; /* nor are a padded vocabulary's padding rows */
    const int k = c->moe_top_k ? c->moe_top_k : 1; /* 0: top-1 */
    if (c->moe_experts > k) /* each token runs top-k of the E experts, each 4C x C twice plus biases */
        mm -= (double)(c->moe_experts - k) * (8.0 * C * C + 5.0 * C) * fsc_gpt_num_moe_blocks(c);
    return fsc_lm_flops_per_token(mm, c->layers, c->dim, c->seq);
}

/* The full model's (the configuration's), also when built on a tensor group: every rank reports the step's FLOPs,
 * not its share. */
static double g_flops(void *ctx, int B) {
    const fsc_gpt_config *c = &GM(ctx)->g.cfg;
    return fsc_gpt_flops_per_token(c) * (double)B * (double)c->seq;
}

static fsc_status g_set_ep(void *ctx, fsc_comm *ep) {
    FSC_TRY(seq_wrap_set_expert_group(ctx, ep));
    GM(ctx)->g.ep = ep;
    return FSC_OK;
}

static void g_destroy(fsc_model *m) { seq_wrap_free((seq_wrap *)m); }

#define GPT_OPS(aux, auxl, ep)                                                                                      \
    { .acts_create = g_create, .acts_free = seq_wrap_acts_free, .acts_bytes = seq_wrap_acts_bytes,                 \
      .set_batch = seq_wrap_set_batch, .stream = seq_wrap_stream, .stream_floats = seq_wrap_stream_floats,          \
      .forward = seq_wrap_forward, .backward = seq_wrap_backward, .init_values = seq_wrap_init,                     \
      .layer_cost = g_layer_cost, .aux_stats = aux, .aux_layers = auxl, .config = g_config,                        \
      .config_check = g_config_check, .check_tensors = g_check_tensors, .set_expert_group = ep,                   \
      .destroy = g_destroy, .logits = seq_wrap_logits, .logits_part = seq_wrap_logits_part, .flops = g_flops,      \
      .backward_input = seq_wrap_backward_input, .backward_weight = seq_wrap_backward_weight,                    \
      .splits_tied = seq_wrap_splits_tied, .acts_remake = g_remake }
static const fsc_model_ops dense_ops = GPT_OPS(NULL, NULL, NULL);
static const fsc_model_ops moe_ops = GPT_OPS(seq_wrap_aux, seq_wrap_aux_layers, g_set_ep);

/* Layers 0 the embedding, 1..L the blocks (h.{i}.), L+1 the final LayerNorm (ln_f.) and the head tied to wte. The
 * residual projections start at N(0, 0.02 / sqrt(2 L)) (GPT-2's), wpe at N(0, 0.02) as every other weight (fsc's
 * GPT has always drawn it so), the rest at the layers' defaults (biases 0, norm weights 1). */
static fsc_status build_layers(fsc_device *dev, const fsc_gpt_config *c, fsc_comm *tp, int sp, fsc_model **out) {
    const int L = c->layers, n = L + 2;
    fsc_seq_layer *sl = calloc((size_t)n, sizeof *sl);
    char(*prefix)[32] = calloc((size_t)n, sizeof *prefix);
    fsc_status st = sl && prefix ? FSC_OK : fsc_error(FSC_ERR_NOMEM, "gpt create: out of host memory");
    const fsc_init proj = fsc_init_normal(0.02f / sqrtf(2.0f * (float)L));
    fsc_layer *y = NULL;
    fsc_embedding_opts eo = { .T = c->seq, .C = c->dim, .V = c->vocab, .Vp = fsc_gpt_vocab_rows(c), .positions = 1,
                              .tp = tp, .sp = sp };
    if (st == FSC_OK) st = fsc_layer_embedding_opts(&eo, &y);
    if (st == FSC_OK) st = fsc_layer_set_init(y, "wpe.weight", fsc_init_normal(0.02f)); /* the layer's: 0.01 */
    if (st == FSC_OK) sl[0] = (fsc_seq_layer){ .layer = y };
    for (int b = 0; b < L && st == FSC_OK; b++) {
        const int moe = fsc_gpt_block_is_moe(c, b);
        fsc_block_opts o = fsc_block_opts_default(FSC_BLOCK_GPT2, c->seq, c->dim, c->heads);
        o.tp = tp, o.sp = sp;
        if (moe)
            o.moe_experts = c->moe_experts, o.moe_top_k = c->moe_top_k ? c->moe_top_k : 1,
            o.moe_capacity = c->moe_capacity, o.moe_aux = c->moe_aux;
        st = fsc_layer_block(&o, &y);
        if (st == FSC_OK) st = fsc_layer_set_init(y, "attn.c_proj.weight", proj);
        if (st == FSC_OK && !moe) st = fsc_layer_set_init(y, "mlp.c_proj.weight", proj);
        for (int e = 0; moe && e < c->moe_experts && st == FSC_OK; e++) {
            char name[48];
            snprintf(name, sizeof name, "mlp.experts.%d.c_proj.weight", e);
            st = fsc_layer_set_init(y, name, proj);
        }
        snprintf(prefix[b], sizeof prefix[b], "h.%d.", b);
        if (y) sl[1 + b] = (fsc_seq_layer){ .layer = y, .prefix = prefix[b] };
        y = NULL;
    }
    fsc_lm_head_opts ho = { .T = c->seq, .C = c->dim, .V = c->vocab, .Vp = fsc_gpt_vocab_rows(c),
                            .norm = FSC_HEAD_NORM_LAYERNORM,
                            .norm_name = "ln_f.", .tp = tp, .sp = sp };
    if (st == FSC_OK) st = fsc_layer_lm_head_opts(&ho, &y);
    if (st == FSC_OK)
        sl[n - 1] = (fsc_seq_layer){ .layer = y, .tie = { { .param = "weight", .to = "wte.weight" } } };
    if (st == FSC_OK) {
        st = fsc_seq_model_create(dev, sl, n, out); /* takes the layers, also when it fails */
    } else {
        for (int l = 0; sl && l < n; l++) fsc_layer_free(sl[l].layer);
    }
    free(sl), free(prefix);
    return st;
}

/* The layers' tensors are fsc_gpt_param_info's, in its order (full shapes: a tensor-parallel slice's full tensor). */
static fsc_status check_tensors(const fsc_gpt_config *c, const fsc_model *seq) {
    if (seq->n_tensors != fsc_gpt_num_tensors(c))
        return fsc_error(FSC_ERR_INTERNAL, "gpt create: the layers declare %d tensors, the GPT has %d", seq->n_tensors,
                         fsc_gpt_num_tensors(c));
    for (int i = 0; i < seq->n_tensors; i++) {
        fsc_param_info want;
        FSC_TRY(fsc_gpt_param_info(c, i, &want));
        const fsc_param_info *got = &seq->info[i];
        int same = !strcmp(got->name, want.name) && got->layer == want.layer && got->ndim == want.ndim &&
                   got->expert == want.expert && got->nusers == want.nusers &&
                   got->decay == want.decay;
        for (int d = 0; d < want.ndim; d++)
            same = same && (got->split && got->tp_size > 1 ? got->full_shape[d] : got->shape[d]) == want.shape[d];
        if (!same)
            return fsc_error(FSC_ERR_INTERNAL, "gpt create: tensor %d is %s of layer %d (decay %d), expected %s of "
                             "layer %d (decay %d)", i, got->name, got->layer, got->decay, want.name, want.layer,
                             want.decay);
    }
    return FSC_OK;
}

fsc_status fsc_gpt_model_create(fsc_device *dev, const fsc_gpt_config *cfg, fsc_model **out) {
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(cfg);
    FSC_CHECK_ARG(out);
    return fsc_gpt_model_create_tp(dev, cfg, NULL, 0, out);
}

fsc_status fsc_gpt_model_create_tp(fsc_device *dev, const fsc_gpt_config *cfg, fsc_comm *tp, int sp,
                                   fsc_model **out) {
    FSC_CHECK_ARG(out);
    *out = NULL;
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(cfg);
    FSC_TRY(fsc_gpt_config_validate(cfg));
    if (tp && cfg->moe_experts > 0)
        return fsc_error(FSC_ERR_UNSUPPORTED, "tensor parallel: a GPT with MoE blocks (moe_experts %d) is not "
                         "supported with tensor parallelism yet", cfg->moe_experts);
    gpt_model *gm = calloc(1, sizeof *gm);
    if (!gm) return fsc_error(FSC_ERR_NOMEM, "gpt model: out of host memory");
    fsc_status st = build_layers(dev, cfg, tp, sp, &gm->w.seq);
    if (st == FSC_OK) st = check_tensors(cfg, gm->w.seq);
    if (st != FSC_OK) {
        seq_wrap_free(&gm->w);
        return st;
    }
    fsc_model *q = gm->w.seq;
    gm->w.name = "gpt";
    /* GPT2LMHeadModel's copy of the tied head (fsc_gpt_param_info's alias; the layers name no other file) */
    snprintf(((fsc_param_info *)q->info)[FSC_P_WTE].alias, sizeof q->info[FSC_P_WTE].alias, "lm_head.weight");
    if (fsc_gpt_vocab_rows(cfg) > cfg->vocab) /* weights files hold the real vocabulary's rows (gpt.h) */
        ((fsc_param_info *)q->info)[FSC_P_WTE].file_rows = cfg->vocab;
    seq_wrap_bind(&gm->w, cfg->moe_experts ? &moe_ops : &dense_ops);
    gm->g = (fsc_gpt){ .cfg = *cfg, .dev = dev, .n_tensors = q->n_tensors, .info = (fsc_param_info *)q->info,
                       .param = q->param, .grad = q->grad, .dwte_head = q->tied_grad[FSC_P_WTE], .model = &gm->w.m };
    *out = &gm->w.m;
    return FSC_OK;
}

fsc_gpt *fsc_gpt_model_gpt(fsc_model *m) {
    return m && m->ops && (m->ops == &dense_ops || m->ops == &moe_ops) ? &((gpt_model *)m->ctx)->g : NULL;
}
