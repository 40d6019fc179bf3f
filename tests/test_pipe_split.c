/* The split backward (layers.h's ops->split, model.h's backward_input and backward_weight) on one device.
 *
 * Oracle: two sequential language models of every built-in layer that splits (token embedding, LayerNorm, GELU
 * MLP with a residual, linear, RMSNorm, LM head after a final LayerNorm; embedding with positions, attention with
 * rotary embedding and grouped-query heads, SwiGLU MLP, the GPT-2 block packed (its inner gradients kept in the
 * stash) and separate, the Llama block, the head after an RMSNorm) and one that does not (GELU), run over two
 * micro-batches as backward_input then backward_weight (the second micro-batch's input part before the first's
 * weight part, as a zero-bubble pipeline runs them), gives every parameter gradient and the gradient w.r.t. the
 * range's input bit for bit as the whole backward; a record over the layers after the embedding checks the input
 * gradient, one over all of them the embedding's. The same for the mixture-of-experts layers (the MoE MLP with and
 * without a residual, the GPT-2 and Llama blocks with an MoE MLP; top-1 and top-2 routing with drops and a
 * load-balancing loss), also as the model's first layer on float inputs (its input part runs for its stash though
 * no one needs its input gradient); with the exact reduction's grad_term the MoE weight parts hand the same pieces
 * in the same order as the whole backward. The small layers with the head tied to the token embedding, in records
 * made with split_tied (the tied layers split too: their records keep more), give the same bits, and the tied
 * gradient a record without the owner leaves for its caller is the whole backward's; running the weight parts in
 * descending order changes them. A record over the GELU alone (no split area) and one over the token embedding
 * alone (no input gradient: its weight part reads the output gradient its input part kept) give the whole backward's
 * bits. Layer checkpointing with the split gives the whole backward's bits too. Misuse is refused: a split record's
 * backward, backward_input of a record made without split, a weight part before its input part. */
#include <stdlib.h>
#include <string.h>
#include "testutil.h"

enum { T = 4, C = 8, V = 11, B = 2, NL = 7, HEADS = 2 };

static fsc_device *g_dev;
static int g_ckpt, g_offload; /* run's records: layer checkpointing, and with it the layers' inputs offloaded */

static int setup(void **st) {
    (void)st;
    return fsc_device_create("cpu", &(fsc_device_opts){ .threads = 1 }, &g_dev) == FSC_OK ? 0 : -1;
}
static int teardown(void **st) {
    (void)st;
    fsc_device_free(g_dev);
    return 0;
}

static void *dalloc(size_t bytes) {
    void *p = NULL;
    assert_ok(fsc_device_calloc(g_dev, FSC_TAG_ACTS, bytes ? bytes : 4, &p));
    return p;
}

/* The second model: the attention layer, the SwiGLU MLP and the three blocks; the packed and the separate GPT-2
 * blocks with packed_heads heads (their input parts keep two inner gradients over the attention probabilities when
 * they have room: 8 heads room for both, 2 for one, 1 for none; the Llama block has 2). */
static void transformer(fsc_layer **l, int packed_heads) {
    assert_ok(fsc_layer_embedding(T, C, V, &l[0]));
    fsc_attention_opts ao = fsc_attention_opts_default(T, C, HEADS);
    ao.kv_heads = 1, ao.rope_theta = 10000.0f, ao.residual = 1;
    assert_ok(fsc_layer_attention(&ao, &l[1]));
    fsc_mlp_opts mo = fsc_mlp_opts_default(C);
    mo.rows = T, mo.F = 12, mo.residual = 1;
    assert_ok(fsc_layer_swiglu_mlp(&mo, &l[2]));
    fsc_block_opts bo = fsc_block_opts_default(FSC_BLOCK_GPT2, T, C, packed_heads);
    assert_ok(fsc_layer_block(&bo, &l[3]));
    bo = fsc_block_opts_default(FSC_BLOCK_GPT2, T, C, packed_heads); /* the separate block's kept gradients too */
    bo.separate_qkv = 1;
    assert_ok(fsc_layer_block(&bo, &l[4]));
    bo = fsc_block_opts_default(FSC_BLOCK_LLAMA, T, C, HEADS);
    assert_ok(fsc_layer_block(&bo, &l[5]));
    fsc_lm_head_opts ho = { .T = T, .C = C, .V = V, .norm = FSC_HEAD_NORM_RMSNORM, .eps = 1e-5f };
    assert_ok(fsc_layer_lm_head_opts(&ho, &l[6]));
}

/* The third model: the mixture-of-experts layers (the MoE MLP with and without a residual, the GPT-2 and Llama
 * blocks with an MoE MLP), top-2 routing whose small capacity drops assignments, and a load-balancing loss. */
static void moe(fsc_layer **l) {
    assert_ok(fsc_layer_token_embedding(T, C, V, &l[0]));
    fsc_moe_mlp_opts mo = { .rows = T, .C = C, .F = 12, .experts = 4, .top_k = 2, .capacity = 0.75f, .aux = 0.1f,
                            .residual = 1 };
    assert_ok(fsc_layer_moe_mlp(&mo, &l[1]));
    fsc_block_opts bo = fsc_block_opts_default(FSC_BLOCK_GPT2, T, C, HEADS);
    bo.moe_experts = 4, bo.moe_top_k = 2, bo.moe_capacity = 0.75f, bo.moe_aux = 0.1f;
    assert_ok(fsc_layer_block(&bo, &l[2]));
    fsc_block_opts lo = fsc_block_opts_default(FSC_BLOCK_LLAMA, T, C, HEADS);
    lo.kv_heads = 1, lo.rope_theta = 10000.0f, lo.F = 12;
    lo.moe_experts = 2, lo.moe_top_k = 1, lo.moe_capacity = 1.0f, lo.moe_aux = 0.1f;
    assert_ok(fsc_layer_block(&lo, &l[3]));
    mo.residual = 0, mo.experts = 2, mo.top_k = 1, mo.capacity = 0.5f;
    assert_ok(fsc_layer_moe_mlp(&mo, &l[4]));
    assert_ok(fsc_layer_rmsnorm(T, C, 1e-5f, &l[5]));
    fsc_lm_head_opts ho = { .T = T, .C = C, .V = V, .norm = FSC_HEAD_NORM_LAYERNORM };
    assert_ok(fsc_layer_lm_head_opts(&ho, &l[6]));
}

/* The fourth model: MoE layers from the first on (the first layer splits too: its input part still runs, for the
 * stash its weight part reads), on float inputs. */
static void moe_first(fsc_layer **l) {
    fsc_moe_mlp_opts mo = { .rows = T, .C = C, .F = 12, .experts = 4, .top_k = 2, .capacity = 0.75f, .aux = 0.1f,
                            .residual = 1 };
    assert_ok(fsc_layer_moe_mlp(&mo, &l[0]));
    fsc_block_opts bo = fsc_block_opts_default(FSC_BLOCK_GPT2, T, C, HEADS);
    bo.moe_experts = 2, bo.moe_top_k = 1, bo.moe_capacity = 1.0f, bo.moe_aux = 0.1f;
    assert_ok(fsc_layer_block(&bo, &l[1]));
    assert_ok(fsc_layer_moe_mlp(&mo, &l[2]));
    fsc_block_opts lo = fsc_block_opts_default(FSC_BLOCK_LLAMA, T, C, HEADS);
    lo.F = 12, lo.moe_experts = 4, lo.moe_top_k = 2, lo.moe_capacity = 0.75f, lo.moe_aux = 0.1f;
    assert_ok(fsc_layer_block(&lo, &l[3]));
    fsc_linear_opts li = fsc_linear_opts_default(C, C);
    li.rows = T;
    assert_ok(fsc_layer_linear(&li, &l[4]));
    assert_ok(fsc_layer_rmsnorm(T, C, 1e-5f, &l[5]));
    fsc_lm_head_opts ho = { .T = T, .C = C, .V = V, .norm = FSC_HEAD_NORM_LAYERNORM };
    assert_ok(fsc_layer_lm_head_opts(&ho, &l[6]));
}

/* The first model: the small layers. */
static void small(fsc_layer **l) {
    assert_ok(fsc_layer_token_embedding(T, C, V, &l[0]));
    assert_ok(fsc_layer_layernorm(T, C, &l[1]));
    fsc_mlp_opts mo = fsc_mlp_opts_default(C);
    mo.rows = T, mo.residual = 1;
    assert_ok(fsc_layer_gelu_mlp(&mo, &l[2]));
    assert_ok(fsc_layer_gelu((size_t)T * C, &l[3]));
    fsc_linear_opts lo = fsc_linear_opts_default(C, C);
    lo.rows = T;
    assert_ok(fsc_layer_linear(&lo, &l[4]));
    assert_ok(fsc_layer_rmsnorm(T, C, 1e-5f, &l[5]));
    fsc_lm_head_opts ho = { .T = T, .C = C, .V = V, .norm = FSC_HEAD_NORM_LAYERNORM };
    assert_ok(fsc_layer_lm_head_opts(&ho, &l[6]));
}

static fsc_model *lm(int variant) {
    fsc_layer *l[NL];
    /* 0 small, 1 the packed block with HEADS heads, 2 MoE, 3 MoE first, 4 and 5 the packed block with 8 and 1
     * heads (each way its kept gradients fit over the attention probabilities), 6 small with the head tied to the
     * token embedding */
    static const int packed_heads[] = { 0, HEADS, 0, 0, 8, 1, 0 };
    if (variant == 3) moe_first(l);
    else if (variant == 2) moe(l);
    else if (variant && variant < 6) transformer(l, packed_heads[variant]);
    else small(l);
    fsc_seq_layer ls[NL];
    static const char *pre[NL] = { "emb.", "ln.", "mlp.", "act.", "lin.", "rms.", "head." };
    for (int i = 0; i < NL; i++) ls[i] = (fsc_seq_layer){ .layer = l[i], .prefix = pre[i] };
    if (variant == 6) ls[NL - 1].tie[0] = (fsc_layer_tie){ .param = "weight", .to = "emb.weight" };
    fsc_model *m = NULL;
    assert_ok(fsc_seq_model_create(g_dev, ls, NL, &m));
    return m;
}

/* model.h's grad_term (the exact reduction's pieces of the experts' gradients): each piece is added into its
 * gradient, and the calls, their sizes and the pieces' bytes hashed in the order they come (FNV-1a). */
typedef struct {
    int calls;
    uint64_t hash;
} terms;

static fsc_status take_term(void *ctx, float *grad, const float *piece, size_t n) {
    terms *t = ctx;
    float *g = malloc(n * sizeof(float)), *q = malloc(n * sizeof(float));
    assert_non_null(g), assert_non_null(q);
    assert_ok(fsc_device_download(g_dev, g, grad, n * sizeof(float)));
    assert_ok(fsc_device_download(g_dev, q, piece, n * sizeof(float)));
    const unsigned char *b = (const unsigned char *)q;
    for (size_t i = 0; i < n * sizeof(float); i++) t->hash = (t->hash ^ b[i]) * 1099511628211ull;
    t->hash = (t->hash ^ n) * 1099511628211ull;
    for (size_t i = 0; i < n; i++) g[i] += q[i];
    assert_ok(fsc_device_upload(g_dev, grad, g, n * sizeof(float)));
    free(g), free(q);
    t->calls++;
    return FSC_OK;
}

/* Two micro-batches over layers [first, NL-1]: the whole backward (split 0), the split one (1; 2: a weight part
 * before its input part, refused; 3: with split_tied; 4: that, the weight parts in descending order); the gradients
 * (host, tensor after tensor, then the tied-gradient buffers) into g, the last input gradient (first > 0) into gin
 * and a record's bytes into *bytes (unless NULL; a split record's between its input and weight parts). */
static void run(fsc_model *m, int first, int split, float *g, float *gin, int floats, terms *tm, size_t *bytes) {
    size_t tot = 0;
    for (int t = 0; t < m->n_tensors; t++) {
        const size_t n = m->info[t].numel;
        float *h = malloc(n * sizeof(float));
        m->ops->init_values(m->ctx, 3, t, 0, n, h);
        for (size_t i = 0; i < n; i++) h[i] += 0.01f * (float)(i % 7); /* norms off their constant start */
        m->param[t] = dalloc(n * sizeof(float)), m->grad[t] = dalloc(n * sizeof(float));
        assert_ok(fsc_device_upload(g_dev, m->param[t], h, n * sizeof(float)));
        free(h);
    }
    fsc_model_acts *a[2];
    int32_t tok[B * T], tgt[B * T];
    float x[B * T * C];
    fsc_model_hooks h = { 0 };
    for (int k = 0; k < 2; k++) {
        fsc_model_acts_opts o = { .B = B, .first = first, .last = m->n_layers - 1, .split = split > 0,
                                  .split_tied = split > 2, .checkpoint = g_ckpt, .offload_inputs = g_offload,
                                  .grad_term = tm ? take_term : NULL, .grad_term_ctx = tm };
        assert_ok(m->ops->acts_create(m->ctx, &o, &a[k]));
        if (bytes) *bytes = m->ops->acts_bytes(m->ctx, a[k]);
        for (int i = 0; i < B * T; i++) tok[i] = (i * 5 + k) % V, tgt[i] = (i * 3 + 2 * k + 1) % V;
        for (int i = 0; i < B * T * C; i++) x[i] = (float)((i * 37 + k * 11) % 23) / 23.0f - 0.5f;
        assert_ok(m->ops->set_batch(m->ctx, a[k], first > 0 ? NULL : floats ? (void *)x : (void *)tok, tgt));
        if (first > 0)
            assert_ok(fsc_device_upload(g_dev, m->ops->stream(m->ctx, a[k], FSC_STREAM_INPUT), x, sizeof x));
        assert_ok(m->ops->forward(m->ctx, a[k], &h, NULL));
    }
    const float ds = 1.0f / (2 * B * T);
    if (split == 2) /* a weight part before its input part: the record holds no split area (an MoE layer's own
                     * check, "the record's input part has not run", stands behind it) */
        assert_err(m->ops->backward_weight(m->ctx, a[0], &h, ds), FSC_ERR_STATE, "whose backward_input did not run");
    else if (!split) {
        for (int k = 0; k < 2; k++) assert_ok(m->ops->backward(m->ctx, a[k], &h, ds));
    } else { /* B0 B1 W0 W1: the weight parts in ascending order, after both input parts */
        for (int k = 0; k < 2; k++) assert_ok(m->ops->backward_input(m->ctx, a[k], &h, ds));
        if (bytes) *bytes = m->ops->acts_bytes(m->ctx, a[1]); /* with the split area it holds until its W */
        for (int k = 0; k < 2; k++) assert_ok(m->ops->backward_weight(m->ctx, a[split == 4 ? 1 - k : k], &h, ds));
    }
    if (first > 0 && split != 2)
        assert_ok(fsc_device_download(g_dev, gin, m->ops->stream(m->ctx, a[1], FSC_STREAM_GRAD_INPUT),
                                      sizeof(float) * B * T * C));
    for (int t = 0; t < m->n_tensors; t++) {
        const size_t n = m->info[t].numel;
        assert_ok(fsc_device_download(g_dev, g + tot, m->grad[t], n * sizeof(float)));
        tot += n;
        fsc_device_release(g_dev, m->param[t]), fsc_device_release(g_dev, m->grad[t]);
    }
    for (int t = 0; t < m->n_tensors; t++) /* what a record without the owner leaves for its caller */
        if (m->info[t].nusers && split != 2) {
            assert_ok(fsc_device_download(g_dev, g + tot, m->tied_grad[t], m->info[t].numel * sizeof(float)));
            tot += m->info[t].numel;
        }
    for (int k = 0; k < 2; k++) m->ops->acts_free(m->ctx, a[k]);
}

/* The head tied to the token embedding: with split_tied both split (the records keep their output gradients: more
 * bytes than split alone, where they run whole in the input part), the same bits as the whole backward, also the
 * tied gradient a record without the owner leaves; the weight parts in descending order differ. */
static void split_tied_equals_whole(void **st) {
    (void)st;
    fsc_model *m = lm(6);
    assert_non_null(m->ops->splits_tied);
    assert_int_equal(m->ops->splits_tied(m->ctx), 1);
    const size_t P = fsc_model_num_params(m), n = 2 * P; /* the tied buffer after the gradients */
    float *g0 = calloc(n, sizeof(float)), *g1 = calloc(n, sizeof(float));
    float gin0[B * T * C], gin1[B * T * C];
    size_t b0, b1, b2;
    for (int first = 0; first < 2; first++) {
        run(m, first, 0, g0, gin0, 0, NULL, &b0);
        run(m, first, 1, g1, gin1, 0, NULL, &b1);
        assert_memory_equal(g0, g1, n * sizeof(float)); /* split alone: the tied layers whole in the input part */
        run(m, first, 3, g1, gin1, 0, NULL, &b2);
        assert_true(first == 0 ? b2 > b1 : b2 >= b1); /* the embedding's output gradient (the head is the loss) */
        int nonzero = 0;
        for (size_t i = 0; i < n; i++) nonzero += g0[i] != 0.0f;
        assert_true(nonzero > (int)(P / 2));
        assert_memory_equal(g0, g1, n * sizeof(float));
        if (first > 0) assert_memory_equal(gin0, gin1, sizeof gin0);
        run(m, first, 4, g1, gin1, 0, NULL, &b2); /* W1 before W0: another order of the sums */
        assert_true(memcmp(g0, g1, n * sizeof(float)) != 0);
    }
    free(g0), free(g1);
    fsc_model_free(m);
}

static void split_equals_whole(void **st) {
    (void)st;
    for (int variant = 0; variant < 6; variant++) {
        fsc_model *m = lm(variant);
        const size_t P = fsc_model_num_params(m);
        float *g0 = malloc(P * sizeof(float)), *g1 = malloc(P * sizeof(float));
        float gin0[B * T * C], gin1[B * T * C];
        for (int first = 0; first < 2; first++) {
            run(m, first, 0, g0, gin0, variant == 3, NULL, NULL);
            run(m, first, 1, g1, gin1, variant == 3, NULL, NULL);
            int nonzero = 0;
            for (size_t i = 0; i < P; i++) nonzero += g0[i] != 0.0f;
            assert_true(nonzero > (int)(P / 2)); /* the comparison sees real gradients */
            assert_memory_equal(g0, g1, P * sizeof(float));
            if (first > 0) assert_memory_equal(gin0, gin1, sizeof gin0);
        }
        free(g0), free(g1);
        fsc_model_free(m);
    }
}

/* Layer checkpointing (one record shared by the layers, each recomputed in its backward) with the split: every
 * model, the tied one with split_tied too, and with the layers' inputs offloaded to the host, gives the whole
 * backward's bits without checkpointing, B0 B1 W0 W1. Each layer that splits recomputes into a record of its own in
 * the split area and its weight part reads that one (the input parts of the GPT-2 MLP, the attention and the head
 * write gradients over their records; the layers before overwrite the shared one); the weight part recomputes
 * nothing. While it waits for its backward a checkpointed record is smaller than a full one; from its input part to
 * its weight part it holds every splitting layer's record too. */
static void split_checkpoint_equals_whole(void **st) {
    (void)st;
    for (int variant = 0; variant < 7; variant++) {
        fsc_model *m = lm(variant);
        const size_t P = fsc_model_num_params(m), n = variant == 6 ? 2 * P : P;
        float *g0 = calloc(n, sizeof(float)), *g1 = calloc(n, sizeof(float));
        float gin0[B * T * C], gin1[B * T * C];
        for (int first = 0; first < 2; first++) {
            size_t full, held;
            run(m, first, 0, g0, gin0, variant == 3, NULL, &full);
            for (int off = 0; off < 2; off++) {
                g_ckpt = 1, g_offload = off;
                size_t waiting;
                run(m, first, 0, g1, gin1, variant == 3, NULL, &waiting); /* whole, checkpointed */
                assert_true(waiting < full);
                assert_memory_equal(g0, g1, P * sizeof(float));
                run(m, first, variant == 6 ? 3 : 1, g1, gin1, variant == 3, NULL, &held);
                g_ckpt = 0, g_offload = 0;
                assert_true(held > waiting);
                int nonzero = 0;
                for (size_t i = 0; i < P; i++) nonzero += g0[i] != 0.0f;
                assert_true(nonzero > (int)(P / 2));
                if (memcmp(g0, g1, n * sizeof(float)) != 0)
                    fail_msg("model %d, first layer %d, offload %d: the checkpointed split's gradients differ from the "
                             "whole backward's", variant, first, off);
                if (first > 0) assert_memory_equal(gin0, gin1, sizeof gin0);
            }
        }
        free(g0), free(g1);
        fsc_model_free(m);
    }
}

/* The MoE layers' weight part hands the experts' gradients to grad_term (the exact reduction) as the whole
 * backward does: the same pieces in the same order, the same gradients. */
static void split_terms(void **st) {
    (void)st;
    for (int variant = 2; variant < 4; variant++) {
        fsc_model *m = lm(variant);
        const size_t P = fsc_model_num_params(m);
        float *g0 = malloc(P * sizeof(float)), *g1 = malloc(P * sizeof(float)), gin0[B * T * C], gin1[B * T * C];
        terms t0 = { 0, 14695981039346656037ull }, t1 = t0;
        run(m, 1, 0, g0, gin0, variant == 3, &t0, NULL);
        run(m, 1, 1, g1, gin1, variant == 3, &t1, NULL);
        assert_true(t0.calls > 0);
        assert_int_equal(t0.calls, t1.calls);
        assert_true(t0.hash == t1.hash);
        assert_memory_equal(g0, g1, P * sizeof(float));
        assert_memory_equal(gin0, gin1, sizeof gin0);
        free(g0), free(g1);
        fsc_model_free(m);
    }
}

static void split_misuse_refused(void **st) {
    (void)st;
    fsc_model *m = lm(2);
    float *g = malloc(fsc_model_num_params(m) * sizeof(float)), gin[B * T * C];
    run(m, 1, 2, g, gin, 0, NULL, NULL);
    free(g);
    fsc_model_free(m);
    m = lm(0);
    fsc_model_acts *a = NULL;
    fsc_model_hooks h = { 0 };
    assert_ok(m->ops->acts_create(m->ctx, &(fsc_model_acts_opts){ .B = B, .last = NL - 1 }, &a));
    assert_err(m->ops->backward_input(m->ctx, a, &h, 1.0f), FSC_ERR_STATE, "made with split");
    m->ops->acts_free(m->ctx, a);
    assert_ok(m->ops->acts_create(m->ctx, &(fsc_model_acts_opts){ .B = B, .last = NL - 1, .split = 1 }, &a));
    assert_err(m->ops->backward(m->ctx, a, &h, 1.0f), FSC_ERR_STATE, "backward_input");
    m->ops->acts_free(m->ctx, a);
    fsc_model_free(m);
}

/* The LM head without a norm, after a LayerNorm (with a padded vocabulary) and after an RMSNorm, as a model of its
 * own (the model's first layer: no input gradient; without a norm the split area would be empty but for the stash
 * of 0 bytes that marks the split), after a linear layer (a record of both and one of the head alone), and without
 * a norm tied to a token embedding (split_tied): B0 B1 W0 W1 give the whole backward's bits. The input parts write
 * each record's dlogits over its logits, and the weight parts read them there (the second input part in between). */
static void split_head(void **st) {
    (void)st;
    for (int kind = 0; kind < 3; kind++)
        for (int norm = FSC_HEAD_NORM_NONE; norm <= FSC_HEAD_NORM_RMSNORM; norm++) {
            if (kind == 2 && norm != FSC_HEAD_NORM_NONE) continue;
            fsc_layer *l[2];
            fsc_seq_layer ls[2];
            int n = 0;
            if (kind == 1) {
                fsc_linear_opts lo = fsc_linear_opts_default(C, C);
                lo.rows = T;
                assert_ok(fsc_layer_linear(&lo, &l[n++]));
            } else if (kind == 2) {
                assert_ok(fsc_layer_token_embedding(T, C, V, &l[n++]));
            }
            fsc_lm_head_opts ho = { .T = T, .C = C, .V = V, .Vp = norm == FSC_HEAD_NORM_LAYERNORM ? V + 3 : 0,
                                    .norm = (fsc_head_norm)norm, .eps = 1e-5f };
            assert_ok(fsc_layer_lm_head_opts(&ho, &l[n++]));
            static const char *pre[2][2] = { { "head." }, { "in.", "head." } };
            for (int i = 0; i < n; i++) ls[i] = (fsc_seq_layer){ .layer = l[i], .prefix = pre[n - 1][i] };
            if (kind == 2) ls[1].tie[0] = (fsc_layer_tie){ .param = "weight", .to = "in.weight" };
            fsc_model *m = NULL;
            assert_ok(fsc_seq_model_create(g_dev, ls, n, &m));
            const size_t P = fsc_model_num_params(m), tot = 2 * P; /* room for a tied buffer after the gradients */
            float *g0 = calloc(tot, sizeof(float)), *g1 = calloc(tot, sizeof(float));
            float gin0[B * T * C], gin1[B * T * C];
            for (int first = 0; first < n; first++) {
                run(m, first, 0, g0, gin0, kind != 2, NULL, NULL);
                run(m, first, kind == 2 ? 3 : 1, g1, gin1, kind != 2, NULL, NULL);
                int nonzero = 0; /* the head's weight (or its tied buffer) at least: real gradients */
                for (size_t i = 0; i < tot; i++) nonzero += g0[i] != 0.0f;
                assert_true(nonzero > V * C / 2);
                assert_memory_equal(g0, g1, tot * sizeof(float));
                if (first > 0) assert_memory_equal(gin0, gin1, sizeof gin0);
            }
            free(g0), free(g1);
            fsc_model_free(m);
        }
}

/* A record of the first layer alone (the token embedding: no input gradient, no stash): its weight part reads the
 * output gradient its input part kept, the whole backward's gradient. */
static void split_first_alone(void **st) {
    (void)st;
    fsc_model *m = lm(0);
    fsc_model_hooks h = { 0 };
    const size_t n = m->info[0].numel;
    float d[B * T * C], *g[2] = { malloc(n * sizeof(float)), malloc(n * sizeof(float)) };
    int32_t tok[B * T];
    for (int i = 0; i < B * T; i++) tok[i] = (i * 5) % V;
    for (int i = 0; i < B * T * C; i++) d[i] = (float)(i % 5) - 2.0f;
    for (int t = 0; t < m->n_tensors; t++) m->param[t] = dalloc(m->info[t].numel * sizeof(float));
    m->grad[0] = dalloc(n * sizeof(float));
    for (int split = 0; split < 2; split++) {
        fsc_model_acts *a = NULL;
        assert_ok(m->ops->acts_create(m->ctx, &(fsc_model_acts_opts){ .B = B, .first = 0, .last = 0, .split = split },
                                      &a));
        assert_ok(m->ops->set_batch(m->ctx, a, tok, NULL));
        assert_ok(m->ops->forward(m->ctx, a, &h, NULL));
        assert_ok(fsc_device_upload(g_dev, m->ops->stream(m->ctx, a, FSC_STREAM_GRAD_OUTPUT), d, sizeof d));
        assert_ok(fsc_device_memset(g_dev, m->grad[0], 0, n * sizeof(float)));
        if (split) {
            assert_ok(m->ops->backward_input(m->ctx, a, &h, 1.0f));
            assert_ok(m->ops->backward_weight(m->ctx, a, &h, 1.0f));
        } else {
            assert_ok(m->ops->backward(m->ctx, a, &h, 1.0f));
        }
        assert_ok(fsc_device_download(g_dev, g[split], m->grad[0], n * sizeof(float)));
        m->ops->acts_free(m->ctx, a);
    }
    int nonzero = 0;
    for (size_t i = 0; i < n; i++) nonzero += g[0][i] != 0.0f;
    assert_true(nonzero > 0);
    assert_memory_equal(g[0], g[1], n * sizeof(float));
    for (int t = 0; t < m->n_tensors; t++) fsc_device_release(g_dev, m->param[t]), m->param[t] = NULL;
    fsc_device_release(g_dev, m->grad[0]), m->grad[0] = NULL;
    free(g[0]), free(g[1]);
    fsc_model_free(m);
}

/* A split record over layers none of which splits (the GELU alone): its split area is empty, and its input part then
 * weight part run (the whole backward in the input part) as the whole backward's, the same input gradient. */
static void split_of_nothing(void **st) {
    (void)st;
    fsc_model *m = lm(0);
    fsc_model_hooks h = { 0 };
    float x[B * T * C], d[B * T * C], gin[2][B * T * C];
    for (int i = 0; i < B * T * C; i++) x[i] = (float)((i * 37) % 23) / 23.0f - 0.5f, d[i] = (float)(i % 5) - 2.0f;
    for (int split = 0; split < 2; split++) {
        fsc_model_acts *a = NULL;
        assert_ok(m->ops->acts_create(m->ctx, &(fsc_model_acts_opts){ .B = B, .first = 3, .last = 3, .split = split },
                                      &a));
        assert_ok(fsc_device_upload(g_dev, m->ops->stream(m->ctx, a, FSC_STREAM_INPUT), x, sizeof x));
        assert_ok(m->ops->set_batch(m->ctx, a, NULL, NULL));
        assert_ok(m->ops->forward(m->ctx, a, &h, NULL));
        assert_ok(fsc_device_upload(g_dev, m->ops->stream(m->ctx, a, FSC_STREAM_GRAD_OUTPUT), d, sizeof d));
        if (split) {
            assert_ok(m->ops->backward_input(m->ctx, a, &h, 1.0f));
            assert_ok(m->ops->backward_weight(m->ctx, a, &h, 1.0f));
            assert_err(m->ops->backward_weight(m->ctx, a, &h, 1.0f), FSC_ERR_STATE, "whose backward_input did not run");
        } else {
            assert_ok(m->ops->backward(m->ctx, a, &h, 1.0f));
        }
        assert_ok(fsc_device_download(g_dev, gin[split], m->ops->stream(m->ctx, a, FSC_STREAM_GRAD_INPUT), sizeof x));
        m->ops->acts_free(m->ctx, a);
    }
    assert_memory_equal(gin[0], gin[1], sizeof x);
    fsc_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(split_equals_whole),
        cmocka_unit_test(split_terms),
        cmocka_unit_test(split_checkpoint_equals_whole),
        cmocka_unit_test(split_tied_equals_whole),
        cmocka_unit_test(split_misuse_refused),
        cmocka_unit_test(split_of_nothing),
        cmocka_unit_test(split_first_alone),
        cmocka_unit_test(split_head),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
