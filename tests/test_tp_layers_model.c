/* The tensor-parallel forms of the built-in layers (layers.h with tp, sp; lib/layers/tp_*.c) in sequential models,
 * run directly on a simulated cluster whose world is the tensor group.
 *
 * Oracles:
 *   - the vocab-parallel embeddings (with and without positions, with and without sequence parallelism) give the
 *     unsplit embedding's output and wte/wpe gradients bit for bit at tp 2;
 *   - a model of each layer kind at tp 2 (and 4 where the sizes divide), with and without sequence parallelism,
 *     gives the loss of the same model at tp 1 (the unsplit layers) within 1e-5 relative and every full gradient
 *     (the slices put together by fsc_param_full_index) within 1e-4 of the largest: row-parallel sums add their
 *     pieces in another order, so bits differ by nature. Models: the Llama's layers (GQA, rotary, RMSNorm, SwiGLU,
 *     final norm in the head), GPT-2's (packed c_attn in 3 parts, separate q/k/v, LayerNorm, GELU, head tied to the
 *     vocab-parallel wte), standalone attention and MLP layers with residuals and biases, column- and row-parallel
 *     linears around a GELU with an MSE loss; llama.h's fsc_llama_model_create_tp (2 layers, dim 32, 4 heads, 2 kv
 *     heads at tp 2; 4 kv heads at tp 2 and 4: kv heads must divide by the group size);
 *   - the initial slices are the full tensors' values (checked through the same gathering);
 *   - the models of the Llama's, GPT-2's and the standalone layers at tp 2, with and without sp, describe themselves
 *     (model.h's config, recorded in checkpoints and weights files) as the unsplit model does;
 *   - GPT-2's layers at tp 2 with sp: gradients of split and replicated tensors against central finite differences
 *     of the loss (2e-2 relative or 2e-4 absolute);
 *   - bad options are refused with a message: sp without tp, heads / kv heads / vocabulary / F not dividing, T not
 *     dividing under sp, tp_mode without tp, an MoE block with tp, a head whose vocabulary has fewer rows than the
 *     group has ranks (no padding helps). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "test_tp_util.h"
#include "fsc/layers.h"
#include "fsc/llama.h"

enum { M_LLAMA = 0, M_GPT, M_PARTS, M_LINEAR, M_LLAMA_MODEL, M_LLAMA_MODEL4, M_COUNT };
enum { B = 2, T = 4, C = 16, V = 32, H = 4, KVH = 2, F = 24, IN = 8, HID = 16 };

/* The model of kind `kind` on tensor group tp (NULL: the unsplit layers). */
static fsc_status build(fsc_device *dev, fsc_comm *tp, int sp, int kind, fsc_model **out) {
    fsc_seq_layer sl[8];
    memset(sl, 0, sizeof sl);
    int n = 0;
    fsc_layer *l = NULL;
    const int size = tp ? fsc_comm_size(tp) : 1;
#define ADD(call, pre)                                         \
    do {                                                       \
        FSC_TRY(call);                                         \
        sl[n++] = (fsc_seq_layer){ .layer = l, .prefix = pre }; \
    } while (0)
    if (kind == M_LLAMA_MODEL || kind == M_LLAMA_MODEL4) { /* llama.h's model: 2 layers, dim 32, 4 heads */
        fsc_llama_config lc = { .layers = 2, .dim = 32, .heads = 4, .kv_heads = kind == M_LLAMA_MODEL ? 2 : 4,
                                .ffn = 64, .seq = T, .vocab = V, .rope_theta = 10000.0f, .norm_eps = 1e-5f };
        return fsc_llama_model_create_tp(dev, &lc, tp, sp, out);
    }
    if (kind == M_LLAMA) {
        ADD(fsc_layer_embedding_opts(&(fsc_embedding_opts){ .T = T, .C = C, .V = V, .tp = tp, .sp = sp }, &l),
            "model.embed_tokens.");
        for (int i = 0; i < 2; i++) {
            fsc_block_opts o = fsc_block_opts_default(FSC_BLOCK_LLAMA, T, C, H);
            o.kv_heads = KVH, o.F = F, o.tp = tp, o.sp = sp;
            ADD(fsc_layer_block(&o, &l), i ? "model.layers.1." : "model.layers.0.");
        }
        fsc_lm_head_opts ho = { .T = T, .C = C, .V = V, .norm = FSC_HEAD_NORM_RMSNORM, .eps = 1e-5f,
                                .norm_name = "model.norm.", .head_name = "lm_head.weight", .tp = tp, .sp = sp };
        ADD(fsc_layer_lm_head_opts(&ho, &l), NULL);
    } else if (kind == M_GPT) {
        ADD(fsc_layer_embedding_opts(&(fsc_embedding_opts){ .T = T, .C = C, .V = V, .positions = 1, .tp = tp,
                                                             .sp = sp }, &l), "");
        fsc_block_opts o = fsc_block_opts_default(FSC_BLOCK_GPT2, T, C, H);
        o.tp = tp, o.sp = sp;
        ADD(fsc_layer_block(&o, &l), "h.0.");
        o.separate_qkv = 1, o.F = F;
        ADD(fsc_layer_block(&o, &l), "h.1.");
        fsc_lm_head_opts ho = { .T = T, .C = C, .V = V, .norm = FSC_HEAD_NORM_LAYERNORM, .norm_name = "ln_f.",
                                .head_name = "lm_head.weight", .tp = tp, .sp = sp };
        ADD(fsc_layer_lm_head_opts(&ho, &l), NULL);
        sl[n - 1].tie[0] = (fsc_layer_tie){ .param = "lm_head.weight", .to = "wte.weight" };
    } else if (kind == M_PARTS) {
        ADD(fsc_layer_embedding_opts(&(fsc_embedding_opts){ .T = T, .C = C, .V = V, .positions = 1, .tp = tp,
                                                             .sp = sp }, &l), "");
        fsc_attention_opts ao = fsc_attention_opts_default(T, C, H);
        ao.kv_heads = KVH, ao.bias = 1, ao.residual = 1, ao.rope_theta = 10000.0f, ao.tp = tp, ao.sp = sp;
        ADD(fsc_layer_attention(&ao, &l), "attn.");
        fsc_mlp_opts mo = fsc_mlp_opts_default(C);
        mo.rows = T, mo.F = F, mo.residual = 1, mo.tp = tp, mo.sp = sp;
        ADD(fsc_layer_swiglu_mlp(&mo, &l), "swiglu.");
        ADD(fsc_layer_gelu_mlp(&mo, &l), "gelu.");
        fsc_lm_head_opts ho = { .T = T, .C = C, .V = V, .tp = tp, .sp = sp };
        ADD(fsc_layer_lm_head_opts(&ho, &l), "head.");
    } else {
        fsc_linear_opts a = fsc_linear_opts_default(IN, HID);
        a.tp = tp, a.tp_mode = tp ? FSC_TP_COLUMN : FSC_TP_NONE, a.out_in = 1;
        ADD(fsc_layer_linear(&a, &l), "in.");
        ADD(fsc_layer_gelu((size_t)HID / (size_t)size, &l), "act.");
        fsc_linear_opts b = fsc_linear_opts_default(HID, 3);
        b.tp = tp, b.tp_mode = tp ? FSC_TP_ROW : FSC_TP_NONE;
        ADD(fsc_layer_linear(&b, &l), "out.");
        ADD(fsc_layer_mse(3, &l), NULL);
    }
#undef ADD
    return fsc_seq_model_create(dev, sl, n, out);
}

/* What a run gives: the loss and the full tensors' initial values and gradients (tensor order, full sizes). */
typedef struct {
    int kind, sp;
    double loss;
    int nfd;                  /* finite differences: elements (tensor, full index) to perturb, and their results */
    int fd_tensor[4];
    size_t fd_index[4];
    double fd[4];
    size_t tbase[32];         /* where each tensor starts in init and grad */
    char tname[32][64];
    float *init, *grad; /* (total full elements) */
    size_t total;
} result;

static void samples(int kind, int32_t *tok, int32_t *tgt, float *x, float *y) {
    for (int i = 0; i < B * T; i++) tok[i] = (i * 7 + 3) % V, tgt[i] = (i * 5 + 1) % V;
    for (int i = 0; i < B * IN; i++) x[i] = (float)sin(0.7 * i + 0.1);
    for (int i = 0; i < B * 3; i++) y[i] = (float)cos(0.3 * i);
    (void)kind;
}

static fsc_status model_rank(fsc_rank *r, void *arg) {
    result *res = arg;
    fsc_comm *tp = r->world > 1 ? r->comm : NULL;
    fsc_model *m = NULL;
    FSC_TRY(build(r->dev, tp, tp ? res->sp : 0, res->kind, &m));
    const int nt = m->n_tensors;
    float **p = calloc((size_t)nt, sizeof *p), **g = calloc((size_t)nt, sizeof *g);
    size_t total = 0, maxn = 0;
    fsc_status s = p && g ? FSC_OK : fsc_error(FSC_ERR_NOMEM, "test: host memory");
    for (int i = 0; i < nt && s == FSC_OK; i++) {
        const fsc_param_info *t = &m->info[i];
        total += fsc_param_full_numel(t);
        if (t->numel > maxn) maxn = t->numel;
        s = fsc_device_alloc(r->dev, FSC_TAG_PARAMS, t->numel * sizeof(float), (void **)&p[i]);
        if (s == FSC_OK) s = fsc_device_calloc(r->dev, FSC_TAG_GRADS, t->numel * sizeof(float), (void **)&g[i]);
        m->param[i] = p[i], m->grad[i] = g[i];
    }
    float *h = malloc(maxn * sizeof(float) + 4);
    if (s == FSC_OK && !h) s = fsc_error(FSC_ERR_NOMEM, "test: host memory");
    if (s == FSC_OK && r->rank == 0) {
        res->total = total;
        res->init = calloc(total, sizeof(float)), res->grad = calloc(total, sizeof(float));
    }
    for (int i = 0; i < nt && s == FSC_OK; i++) {
        m->ops->init_values(m->ctx, 42, i, 0, m->info[i].numel, h);
        s = fsc_device_upload(r->dev, p[i], h, m->info[i].numel * sizeof(float));
    }
    if (s == FSC_OK) s = fsc_comm_barrier(r->comm);
    /* put the slices together: each rank writes its elements; replicated tensors come from rank 0 (pass 0: the
     * initial values, before the passes; pass 1: the gradients, after) */
    for (int pass = 0; pass < 1 && s == FSC_OK; pass++) {
        size_t base = 0;
        for (int i = 0; i < nt && s == FSC_OK; i++) {
            const fsc_param_info *t = &m->info[i];
            s = fsc_device_download(r->dev, h, p[i], t->numel * sizeof(float));
            if (s == FSC_OK && (t->split != FSC_SPLIT_NONE || r->rank == 0))
                for (size_t e = 0; e < t->numel; e++) res->init[base + fsc_param_full_index(t, e)] = h[e];
            if (r->rank == 0 && i < 32) res->tbase[i] = base, snprintf(res->tname[i], 64, "%s", t->name);
            base += fsc_param_full_numel(t);
        }
    }
    int32_t tok[B * T], tgt[B * T];
    float x[B * IN], y[B * 3];
    samples(res->kind, tok, tgt, x, y);
    const int lin = res->kind == M_LINEAR;
    fsc_model_acts *a = NULL;
    double loss = 0;
    if (s == FSC_OK) s = m->ops->acts_create(m->ctx, &(fsc_model_acts_opts){ .B = B, .first = 0,
                                                                           .last = m->n_layers - 1 }, &a);
    if (s == FSC_OK) s = m->ops->set_batch(m->ctx, a, lin ? (const void *)x : tok, lin ? (const void *)y : tgt);
    if (s == FSC_OK) s = m->ops->forward(m->ctx, a, &(fsc_model_hooks){ 0 }, &loss);
    if (s == FSC_OK) s = m->ops->backward(m->ctx, a, &(fsc_model_hooks){ 0 }, 1.0f / (B * T));
    if (s == FSC_OK && r->rank == 0) res->loss = loss;
    /* central finite differences of the mean loss: every rank holding the element (its slice's owner, or every
     * rank for a replicated tensor) moves it by +-eps, and the group runs forward together */
    for (int k = 0; k < res->nfd && s == FSC_OK; k++) {
        const int i = res->fd_tensor[k];
        const fsc_param_info *t = &m->info[i];
        size_t at = SIZE_MAX;
        for (size_t e = 0; e < t->numel; e++)
            if (fsc_param_full_index(t, e) == res->fd_index[k]) at = e;
        const float eps = 1e-2f;
        double l2[2] = { 0, 0 };
        float v = 0;
        if (at != SIZE_MAX) s = fsc_device_download(r->dev, &v, p[i] + at, sizeof v);
        for (int sign = 0; sign < 2 && s == FSC_OK; sign++) {
            const float moved = v + (sign ? -eps : eps);
            if (at != SIZE_MAX) s = fsc_device_upload(r->dev, p[i] + at, &moved, sizeof moved);
            if (s == FSC_OK) s = m->ops->set_batch(m->ctx, a, lin ? (const void *)x : tok, lin ? (const void *)y : tgt);
            if (s == FSC_OK) s = m->ops->forward(m->ctx, a, &(fsc_model_hooks){ 0 }, &l2[sign]);
        }
        if (s == FSC_OK && at != SIZE_MAX) s = fsc_device_upload(r->dev, p[i] + at, &v, sizeof v);
        if (r->rank == 0) res->fd[k] = (l2[0] - l2[1]) / (2.0 * eps) / (B * T);
    }
    for (int pass = 1; pass < 2 && s == FSC_OK; pass++) {
        size_t base = 0;
        for (int i = 0; i < nt && s == FSC_OK; i++) {
            const fsc_param_info *t = &m->info[i];
            s = fsc_device_download(r->dev, h, pass ? g[i] : p[i], t->numel * sizeof(float));
            float *dst = (pass ? res->grad : res->init) + base;
            if (s == FSC_OK && (t->split != FSC_SPLIT_NONE || r->rank == 0))
                for (size_t e = 0; e < t->numel; e++) dst[fsc_param_full_index(t, e)] = h[e];
            base += fsc_param_full_numel(t);
        }
    }
    if (a) m->ops->acts_free(m->ctx, a);
    for (int i = 0; i < nt; i++) {
        if (p) fsc_device_release(r->dev, p[i]);
        if (g) fsc_device_release(r->dev, g[i]);
    }
    free(p), free(g), free(h);
    fsc_model_free(m);
    return s;
}

static void run_model(int kind, int sp, int world, result *out) {
    memset(out, 0, sizeof *out);
    out->kind = kind, out->sp = sp;
    assert_ok(tt_run(world, model_rank, out));
}

static fsc_status compare(const result *got, const result *want, const char *what) {
    if (got->total != want->total)
        return fsc_error(FSC_ERR_INTERNAL, "%s: %zu full elements, the unsplit model has %zu", what, got->total,
                         want->total);
    TT_BITS(got->init, want->init, want->total, "initial values");
    const double le = fabs(got->loss - want->loss) / fabs(want->loss);
    if (!(le <= 1e-5))
        return fsc_error(FSC_ERR_INTERNAL, "%s: loss %.9g vs %.9g unsplit (relative %.3g > 1e-5)", what, got->loss,
                         want->loss, le);
    TT_CLOSE(got->grad, want->grad, want->total, 1e-4, what);
    return FSC_OK;
}

static void test_tp_layer_models_match_tp1(void **state) {
    (void)state;
    static const char *names[M_COUNT] = { "llama layers", "gpt2 layers (tied head)", "attention + mlps", "linears",
                                          "llama model (2 kv heads)", "llama model (4 kv heads)" };
    for (int kind = 0; kind < M_COUNT; kind++) {
        result want;
        run_model(kind, 0, 1, &want);
        for (int world = 2; world <= 4; world *= 2) {
            if (world == 4 && (kind == M_LLAMA || kind == M_PARTS || kind == M_LLAMA_MODEL)) continue; /* 2 kv heads */
            for (int sp = 0; sp < (kind == M_LINEAR ? 1 : 2); sp++) {
                result got;
                run_model(kind, sp, world, &got);
                char what[96];
                snprintf(what, sizeof what, "%s at tp %d%s", names[kind], world, sp ? " with sp" : "");
                assert_ok(compare(&got, &want, what));
                free(got.init), free(got.grad);
            }
        }
        free(want.init), free(want.grad);
    }
}

/* ---- the embeddings alone, bit for bit: output and gradients for a given output gradient ---- */
typedef struct {
    int positions, sp;
    float out[B * T * C], dwte[V * C], dwpe[T * C];
} emb_result;

static fsc_status emb_rank(fsc_rank *r, void *arg) {
    emb_result *res = arg;
    fsc_comm *tp = r->world > 1 ? r->comm : NULL;
    fsc_layer *l;
    FSC_TRY(fsc_layer_embedding_opts(&(fsc_embedding_opts){ .T = T, .C = C, .V = V, .positions = res->positions,
                                                            .tp = tp, .sp = tp ? res->sp : 0 }, &l));
    const int np = l->n_params, Vl = V / r->world;
    const size_t rows = tp && res->sp ? B * T / r->world : B * T, r0 = tp && res->sp ? r->rank * rows : 0;
    float *w[2] = { NULL, NULL }, *dw[2] = { NULL, NULL }, *out = NULL, *dout = NULL;
    int32_t *tok = NULL;
    void *rec = NULL, *work = NULL;
    float host[V * C], hd[B * T * C];
    int32_t ht[B * T];
    for (int i = 0; i < B * T; i++) ht[i] = (i * 11 + 5) % V;
    for (int i = 0; i < B * T * C; i++) hd[i] = (float)sin(0.37 * i);
    fsc_status s = FSC_OK;
    for (int k = 0; k < np && s == FSC_OK; k++) {
        const size_t n = l->params[k].numel, off = k == 0 && tp ? (size_t)r->rank * Vl * C : 0;
        for (size_t e = 0; e < n; e++) host[e] = (float)cos(0.1 * (double)(off + e) + k);
        s = fsc_device_alloc(r->dev, FSC_TAG_PARAMS, n * sizeof(float), (void **)&w[k]);
        if (s == FSC_OK) s = fsc_device_upload(r->dev, w[k], host, n * sizeof(float));
        if (s == FSC_OK) s = fsc_device_calloc(r->dev, FSC_TAG_GRADS, n * sizeof(float), (void **)&dw[k]);
    }
    if (s == FSC_OK) s = fsc_device_alloc(r->dev, FSC_TAG_ACTS, sizeof ht, (void **)&tok);
    if (s == FSC_OK) s = fsc_device_upload(r->dev, tok, ht, sizeof ht);
    if (s == FSC_OK) s = fsc_device_alloc(r->dev, FSC_TAG_ACTS, sizeof hd, (void **)&out);
    if (s == FSC_OK) s = fsc_device_alloc(r->dev, FSC_TAG_ACTS, sizeof hd, (void **)&dout);
    if (s == FSC_OK) s = fsc_device_upload(r->dev, dout, hd + r0 * C, rows * C * sizeof(float));
    if (s == FSC_OK) s = fsc_device_alloc(r->dev, FSC_TAG_ACTS, l->ops->rec_bytes ? l->ops->rec_bytes(l, B) + 4 : 4, &rec);
    if (s == FSC_OK) s = fsc_device_alloc(r->dev, FSC_TAG_ACTS, l->ops->work_bytes ? l->ops->work_bytes(l, B) + 4 : 4, &work);
    const float *cp[2] = { w[0], w[1] };
    float *cg[2] = { dw[0], dw[1] };
    fsc_layer_call c = { .dev = r->dev, .B = B, .param = cp, .grad = cg, .rec = rec, .work = work };
    if (s == FSC_OK) s = l->ops->forward(l, &c, out, tok);
    if (s == FSC_OK) s = l->ops->backward(l, &c, NULL, dout, tok);
    if (s == FSC_OK) s = fsc_device_download(r->dev, hd, out, rows * C * sizeof(float));
    /* with sp each rank writes its rows; without, every rank holds the whole output and rank 0 writes it */
    if (s == FSC_OK && ((tp && res->sp) || r->rank == 0)) memcpy(res->out + r0 * C, hd, rows * C * sizeof(float));
    if (s == FSC_OK) s = fsc_device_download(r->dev, host, dw[0], (size_t)Vl * C * sizeof(float));
    if (s == FSC_OK) memcpy(res->dwte + (tp ? (size_t)r->rank * Vl * C : 0), host, (size_t)Vl * C * sizeof(float));
    if (s == FSC_OK && np > 1 && r->rank == 0) s = fsc_device_download(r->dev, res->dwpe, dw[1], sizeof res->dwpe);
    for (int k = 0; k < 2; k++) fsc_device_release(r->dev, w[k]), fsc_device_release(r->dev, dw[k]);
    fsc_device_release(r->dev, tok), fsc_device_release(r->dev, out), fsc_device_release(r->dev, dout);
    fsc_device_release(r->dev, rec), fsc_device_release(r->dev, work);
    fsc_layer_free(l);
    return s;
}

static fsc_status emb_compare(const emb_result *got, const emb_result *want) {
    TT_BITS(got->out, want->out, B * T * C, "embedding output");
    TT_BITS(got->dwte, want->dwte, V * C, "wte gradient");
    if (want->positions) TT_BITS(got->dwpe, want->dwpe, T * C, "wpe gradient");
    return FSC_OK;
}

static void test_tp_embeddings_bit_exact(void **state) {
    (void)state;
    for (int positions = 0; positions < 2; positions++) {
        emb_result *want = calloc(1, sizeof *want), *got = calloc(1, sizeof *got);
        want->positions = positions;
        assert_ok(tt_run(1, emb_rank, want));
        for (int sp = 0; sp < 2; sp++) {
            memset(got, 0, sizeof *got);
            got->positions = positions, got->sp = sp;
            assert_ok(tt_run(2, emb_rank, got));
            assert_ok(emb_compare(got, want));
        }
        free(want), free(got);
    }
}

/* ---- configuration: a model's description does not depend on the layout (its checkpoints load at any tp) ---- */
typedef struct {
    char same[3][2]; /* kind M_LLAMA, M_GPT, M_PARTS; sp */
    char older[3][2]; /* the split model accepts the description the tp layers wrote before, refuses another C */
    char tp_text[2048], one_text[2048];
} configs;

/* The description tensor-parallel layers wrote before they described themselves as the unsplit layer: their
 * "tp" and "sp" (a linear's "tp_mode" too) in every layer, a head without a norm as "norm":"none" with its "eps";
 * with C another width when other_c. The caller frees it with cJSON_free. */
static char *older_text(const char *unsplit, int sp, int other_c) {
    cJSON *j = cJSON_Parse(unsplit), *l;
    cJSON_ArrayForEach(l, cJSON_GetObjectItemCaseSensitive(j, "sequential")) {
        cJSON *o = cJSON_GetObjectItemCaseSensitive(l, "layer");
        const char *kind = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(l, "kind"));
        if (!cJSON_IsObject(o) || !kind) continue;
        cJSON_AddNumberToObject(o, "tp", 2);
        if (!strcmp(kind, "linear")) cJSON_AddStringToObject(o, "tp_mode", "column");
        else cJSON_AddNumberToObject(o, "sp", sp);
        if (!strcmp(kind, "lm_head") && !cJSON_GetObjectItemCaseSensitive(o, "norm"))
            cJSON_AddStringToObject(o, "norm", "none"), cJSON_AddNumberToObject(o, "eps", 1e-5);
        if (other_c && cJSON_GetObjectItemCaseSensitive(o, "C"))
            cJSON_ReplaceItemInObjectCaseSensitive(o, "C", cJSON_CreateNumber(3));
    }
    char *text = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return text;
}

static fsc_status config_rank(fsc_rank *r, void *arg) {
    configs *cf = arg;
    char *a = malloc(1 << 16), *b = malloc(1 << 16);
    fsc_status s = a && b ? FSC_OK : fsc_error(FSC_ERR_NOMEM, "test: out of memory");
    for (int kind = M_LLAMA; kind <= M_PARTS && s == FSC_OK; kind++)
        for (int sp = 0; sp < 2 && s == FSC_OK; sp++) {
            fsc_model *split = NULL, *whole = NULL;
            s = build(r->dev, r->comm, sp, kind, &split);
            if (s == FSC_OK) s = build(r->dev, NULL, 0, kind, &whole);
            if (s == FSC_OK) {
                split->ops->config(split->ctx, a, 1 << 16);
                whole->ops->config(whole->ctx, b, 1 << 16);
                char *older = older_text(b, sp, 0), *other = older_text(b, sp, 1);
                const int ok = older && split->ops->config_check(split->ctx, older) == FSC_OK;
                const int refused = other && split->ops->config_check(split->ctx, other) == FSC_ERR_INVALID;
                cJSON_free(older), cJSON_free(other);
                if (r->rank == 0) {
                    cf->older[kind - M_LLAMA][sp] = ok && refused;
                    cf->same[kind - M_LLAMA][sp] = strcmp(a, b) == 0;
                    if (strcmp(a, b) != 0) snprintf(cf->tp_text, sizeof cf->tp_text, "%s", a);
                    if (strcmp(a, b) != 0) snprintf(cf->one_text, sizeof cf->one_text, "%s", b);
                }
            }
            fsc_model_free(split), fsc_model_free(whole);
        }
    free(a), free(b);
    return s;
}

/* A model of the tensor-parallel layers records the unsplit model's configuration (with and without sp): the
 * layout is not the model, and a checkpoint whose recorded configuration named tp or sp would load only at them. */
static void test_tp_config_is_the_unsplit_models(void **state) {
    (void)state;
    configs *cf = calloc(1, sizeof *cf);
    assert_ok(tt_run(2, config_rank, cf));
    for (int k = 0; k < 3; k++)
        for (int sp = 0; sp < 2; sp++)
            if (!cf->same[k][sp])
                fail_msg("model kind %d%s at tp 2: configuration %s, unsplit %s", k, sp ? " sp" : "", cf->tp_text,
                         cf->one_text);
            else if (!cf->older[k][sp]) /* checkpoints written before: they load as they did */
                fail_msg("model kind %d%s at tp 2: the description its layers wrote before (with tp and sp) is "
                         "refused, or one of another width accepted", k, sp ? " sp" : "");
    free(cf);
}

/* ---- refusals ---- */
typedef struct {
    char msg[10][256];
} refusals;

static fsc_status refuse_rank(fsc_rank *r, void *arg) {
    refusals mine, *out = &mine; /* every rank's own messages; rank 0 hands them back */
    fsc_layer *l = NULL;
    fsc_status st[9];
    fsc_attention_opts ao = fsc_attention_opts_default(T, C, H);
    ao.sp = 1; /* no tp */
    st[0] = fsc_layer_attention(&ao, &l);
    snprintf(out->msg[0], 256, "%s", fsc_last_error());
    ao = fsc_attention_opts_default(T, 12, 3);
    ao.tp = r->comm;
    st[1] = fsc_layer_attention(&ao, &l);
    snprintf(out->msg[1], 256, "%s", fsc_last_error());
    fsc_block_opts bo = fsc_block_opts_default(FSC_BLOCK_LLAMA, T, C, H);
    bo.kv_heads = 1, bo.F = F, bo.tp = r->comm;
    st[2] = fsc_layer_block(&bo, &l);
    snprintf(out->msg[2], 256, "%s", fsc_last_error());
    st[3] = fsc_layer_embedding_opts(&(fsc_embedding_opts){ .T = T, .C = C, .V = 33, .tp = r->comm }, &l);
    snprintf(out->msg[3], 256, "%s", fsc_last_error());
    fsc_lm_head_opts ho = { .T = 5, .C = C, .V = V, .tp = r->comm, .sp = 1 };
    st[4] = fsc_layer_lm_head_opts(&ho, &l);
    snprintf(out->msg[4], 256, "%s", fsc_last_error());
    fsc_mlp_opts mo = fsc_mlp_opts_default(C);
    mo.F = 25, mo.tp = r->comm;
    st[5] = fsc_layer_swiglu_mlp(&mo, &l);
    snprintf(out->msg[5], 256, "%s", fsc_last_error());
    fsc_linear_opts lo = fsc_linear_opts_default(4, 4);
    lo.tp_mode = FSC_TP_ROW;
    st[6] = fsc_layer_linear(&lo, &l);
    snprintf(out->msg[6], 256, "%s", fsc_last_error());
    lo.tp = r->comm, lo.tp_mode = FSC_TP_NONE;
    st[7] = fsc_layer_linear(&lo, &l);
    snprintf(out->msg[7], 256, "%s", fsc_last_error());
    bo = fsc_block_opts_default(FSC_BLOCK_GPT2, T, C, H);
    bo.moe_experts = 2, bo.moe_top_k = 1, bo.moe_capacity = 1.0f, bo.tp = r->comm;
    st[8] = fsc_layer_block(&bo, &l);
    snprintf(out->msg[8], 256, "%s", fsc_last_error());
    for (int k = 0; k < 9; k++)
        if (st[k] != FSC_ERR_INVALID) return fsc_error(FSC_ERR_INTERNAL, "refusal %d was not refused", k);
    /* a vocabulary smaller than the group: no padding gives every rank a real row */
    ho = (fsc_lm_head_opts){ .T = T, .C = C, .V = 1, .Vp = 2, .tp = r->comm };
    if (fsc_layer_lm_head_opts(&ho, &l) != FSC_ERR_UNSUPPORTED)
        return fsc_error(FSC_ERR_INTERNAL, "a head of 1 real row over 2 ranks was not refused");
    snprintf(out->msg[9], 256, "%s", fsc_last_error());
    if (r->rank == 0) memcpy(arg, &mine, sizeof mine);
    return FSC_OK;
}

/* The gradients of the GPT-2 layers at tp 2 with sequence parallelism against central finite differences of the
 * loss (float32 forward, eps 1e-2: within 2e-2 relative or 2e-4 absolute): an element of each kind of tensor,
 * split (c_attn's v part on rank 1, k_proj rows, the vocab-parallel wte tied to the head) and replicated (a norm
 * weight whose gradient is summed over the group under sp). */
static void test_tp_gradients_finite_differences(void **state) {
    (void)state;
    result *r = calloc(1, sizeof *r);
    r->kind = M_GPT, r->sp = 1;
    /* tensors of the GPT model: 0 wte, 1 wpe, 2.. block h.0 (ln_1.w, ln_1.b, c_attn.w, ...) */
    const int tensors[4] = { 0, 2, 4, 18 };
    const size_t index[4] = { 31 * C + 5, 7, 3 * C * 3 - 2, 40 };
    r->nfd = 4;
    for (int k = 0; k < 4; k++) r->fd_tensor[k] = tensors[k], r->fd_index[k] = index[k];
    assert_ok(tt_run(2, model_rank, r));
    for (int k = 0; k < 4; k++) {
        const char *name = r->tname[tensors[k]];
        const double g = r->grad[r->tbase[tensors[k]] + index[k]], fd = r->fd[k];
        if (getenv("FSC_TEST_VERBOSE"))
            fprintf(stderr, "  %s[%zu]: gradient %.6g, finite difference %.6g\n", name, index[k], g, fd);
        if (!(fabs(g - fd) <= 2e-2 * fabs(fd) + 2e-4))
            fail_msg("%s[%zu]: gradient %.9g, finite difference %.9g", name, index[k], g, fd);
    }
    free(r->init), free(r->grad), free(r);
}

static void test_tp_layer_refusals(void **state) {
    (void)state;
    refusals *r = calloc(1, sizeof *r);
    assert_ok(tt_run(2, refuse_rank, r));
    assert_non_null(strstr(r->msg[0], "needs a tensor group"));
    assert_non_null(strstr(r->msg[1], "heads = 3 does not divide over a tensor group of 2"));
    assert_non_null(strstr(r->msg[2], "kv_heads = 1 does not divide"));
    assert_non_null(strstr(r->msg[3], "vocabulary V = 33"));
    assert_non_null(strstr(r->msg[4], "T = 5 to divide"));
    assert_non_null(strstr(r->msg[5], "F = 25"));
    assert_non_null(strstr(r->msg[6], "tp_mode needs a tensor group"));
    assert_non_null(strstr(r->msg[7], "FSC_TP_COLUMN"));
    assert_non_null(strstr(r->msg[8], "MoE block has no tensor-parallel form"));
    assert_non_null(strstr(r->msg[9], "a vocabulary of 1 rows (V) over a tensor group of 2 ranks"));
    assert_non_null(strstr(r->msg[9], "at most 1 ranks"));
    free(r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tp_embeddings_bit_exact),
        cmocka_unit_test(test_tp_layer_models_match_tp1),
        cmocka_unit_test(test_tp_gradients_finite_differences),
        cmocka_unit_test(test_tp_layer_refusals),
        cmocka_unit_test(test_tp_config_is_the_unsplit_models),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
