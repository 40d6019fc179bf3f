/* The tensor-parallel layers' split backward (layers.h's ops->split; lib/layers/tp_basic.c, tp_transformer.c) on a
 * tensor group of 2 ranks.
 * Oracle: sequential models of the tensor-parallel layers, run over two micro-batches as backward_input then
 * backward_weight (B0 B1 W0 W1, as a zero-bubble pipeline runs them), give on every rank every parameter gradient
 * (this rank's slices) and the gradient w.r.t. the range's input bit for bit as the whole backward:
 *   - without sequence parallelism: the vocab-parallel token embedding, a column-parallel then a row-parallel
 *     linear, attention with rotary embedding and grouped-query heads, the GELU and the SwiGLU MLP with residuals,
 *     the GPT-2 block packed and with separate q/k/v, the Llama block, the head after an RMSNorm;
 *   - with sequence parallelism: the embedding with positions, the same attention, MLPs and blocks, the head
 *     after a LayerNorm (its norm's gradients summed over the group in the weight part);
 *   - the embedding, both linears and the head without a norm.
 * Besides, attention with biases and the blocks with 2 heads (1 on a rank, whose probabilities (B, 1, T, T) are
 * narrower than the kept (B T, C) gradient, so it goes to the stash; 4 heads keep it over them): under sp the
 * attention and the packed GPT-2 block, without sp the attention, the separate GPT-2 and the Llama block.
 * A record over the layers after the embedding checks the input gradient, one over all of them the embedding's.
 * The whole backward's gradients are mostly nonzero (the comparison sees real values). */
#include <stdlib.h>
#include <string.h>
#include "test_tp_util.h"

enum { T = 4, C = 8, V = 12, B = 2, HEADS = 4, MAXL = 10 };

typedef struct {
    int variant;
} split_case;

/* The layers of a variant on tensor group tp; returns their number. */
static fsc_status layers_of(int variant, fsc_comm *tp, fsc_layer **l, int *n) {
    const int sp = variant == 1;
    int k = 0;
    fsc_embedding_opts eo = { .T = T, .C = C, .V = V, .positions = sp, .tp = tp, .sp = sp };
    FSC_TRY(fsc_layer_embedding_opts(&eo, &l[k++]));
    if (variant != 1) {
        fsc_linear_opts lo = fsc_linear_opts_default(C, 2 * C);
        lo.rows = T, lo.tp = tp, lo.tp_mode = FSC_TP_COLUMN;
        FSC_TRY(fsc_layer_linear(&lo, &l[k++]));
        lo = fsc_linear_opts_default(2 * C, C);
        lo.rows = T, lo.tp = tp, lo.tp_mode = FSC_TP_ROW;
        FSC_TRY(fsc_layer_linear(&lo, &l[k++]));
    }
    fsc_attention_opts bias = fsc_attention_opts_default(T, C, 2); /* 1 head a rank */
    bias.bias = 1, bias.residual = 1, bias.tp = tp, bias.sp = sp;
    if (variant != 0) FSC_TRY(fsc_layer_attention(&bias, &l[k++]));
    fsc_block_opts narrow = fsc_block_opts_default(FSC_BLOCK_GPT2, T, C, 2);
    narrow.separate_qkv = !sp, narrow.tp = tp, narrow.sp = sp;
    if (variant != 0) FSC_TRY(fsc_layer_block(&narrow, &l[k++]));
    narrow = fsc_block_opts_default(FSC_BLOCK_LLAMA, T, C, 2);
    narrow.tp = tp;
    if (variant == 2) FSC_TRY(fsc_layer_block(&narrow, &l[k++]));
    if (variant != 2) {
        fsc_attention_opts ao = fsc_attention_opts_default(T, C, HEADS);
        ao.kv_heads = 2, ao.rope_theta = 10000.0f, ao.residual = 1, ao.tp = tp, ao.sp = sp;
        FSC_TRY(fsc_layer_attention(&ao, &l[k++]));
        fsc_mlp_opts mo = fsc_mlp_opts_default(C);
        mo.rows = T, mo.residual = 1, mo.tp = tp, mo.sp = sp;
        FSC_TRY(fsc_layer_gelu_mlp(&mo, &l[k++]));
        mo.F = 12;
        FSC_TRY(fsc_layer_swiglu_mlp(&mo, &l[k++]));
        fsc_block_opts bo = fsc_block_opts_default(FSC_BLOCK_GPT2, T, C, HEADS);
        bo.tp = tp, bo.sp = sp;
        FSC_TRY(fsc_layer_block(&bo, &l[k++]));
        bo.separate_qkv = 1;
        FSC_TRY(fsc_layer_block(&bo, &l[k++]));
        bo = fsc_block_opts_default(FSC_BLOCK_LLAMA, T, C, HEADS);
        bo.kv_heads = 2, bo.tp = tp, bo.sp = sp;
        FSC_TRY(fsc_layer_block(&bo, &l[k++]));
    }
    fsc_lm_head_opts ho = { .T = T, .C = C, .V = V, .eps = 1e-5f, .tp = tp, .sp = sp,
                            .norm = variant == 0 ? FSC_HEAD_NORM_RMSNORM
                                                 : variant == 1 ? FSC_HEAD_NORM_LAYERNORM : FSC_HEAD_NORM_NONE };
    FSC_TRY(fsc_layer_lm_head_opts(&ho, &l[k++]));
    *n = k;
    return FSC_OK;
}

/* Two micro-batches over layers [first, n-1]: the whole backward (split 0) or the split one; the gradients (host,
 * tensor after tensor) into g and the second micro-batch's input gradient (first > 0) into gin. */
static fsc_status run(fsc_device *dev, fsc_model *m, int n, int first, int split, float *g, float *gin,
                      size_t in_floats) {
    fsc_status s = FSC_OK;
    size_t tot = 0;
    for (int t = 0; t < m->n_tensors && s == FSC_OK; t++) {
        const size_t k = m->info[t].numel;
        float *h = malloc(k * sizeof(float));
        if (!h) return fsc_error(FSC_ERR_NOMEM, "test: out of memory");
        m->ops->init_values(m->ctx, 3, t, 0, k, h);
        for (size_t i = 0; i < k; i++) h[i] += 0.01f * (float)(i % 7); /* norms off their constant start */
        s = fsc_device_calloc(dev, FSC_TAG_ACTS, k * sizeof(float), (void **)&m->param[t]);
        if (s == FSC_OK) s = fsc_device_calloc(dev, FSC_TAG_ACTS, k * sizeof(float), (void **)&m->grad[t]);
        if (s == FSC_OK) s = fsc_device_upload(dev, m->param[t], h, k * sizeof(float));
        free(h);
    }
    fsc_model_acts *a[2] = { NULL, NULL };
    int32_t tok[B * T], tgt[B * T];
    float *x = calloc(in_floats, sizeof(float));
    if (!x) s = fsc_error(FSC_ERR_NOMEM, "test: out of memory");
    fsc_model_hooks h = { 0 };
    for (int k = 0; k < 2 && s == FSC_OK; k++) {
        fsc_model_acts_opts o = { .B = B, .first = first, .last = n - 1, .split = split };
        s = m->ops->acts_create(m->ctx, &o, &a[k]);
        for (int i = 0; i < B * T; i++) tok[i] = (i * 5 + k) % V, tgt[i] = (i * 3 + 2 * k + 1) % V;
        for (size_t i = 0; i < in_floats; i++) x[i] = (float)((i * 37 + (size_t)k * 11) % 23) / 23.0f - 0.5f;
        if (s == FSC_OK) s = m->ops->set_batch(m->ctx, a[k], first == 0 ? tok : NULL, tgt);
        if (s == FSC_OK && first > 0)
            s = fsc_device_upload(dev, m->ops->stream(m->ctx, a[k], FSC_STREAM_INPUT), x, in_floats * sizeof(float));
        if (s == FSC_OK) s = m->ops->forward(m->ctx, a[k], &h, NULL);
    }
    const float ds = 1.0f / (2 * B * T);
    if (!split) {
        for (int k = 0; k < 2 && s == FSC_OK; k++) s = m->ops->backward(m->ctx, a[k], &h, ds);
    } else { /* B0 B1 W0 W1: the weight parts in ascending order, after both input parts */
        for (int k = 0; k < 2 && s == FSC_OK; k++) s = m->ops->backward_input(m->ctx, a[k], &h, ds);
        for (int k = 0; k < 2 && s == FSC_OK; k++) s = m->ops->backward_weight(m->ctx, a[k], &h, ds);
    }
    if (s == FSC_OK && first > 0)
        s = fsc_device_download(dev, gin, m->ops->stream(m->ctx, a[1], FSC_STREAM_GRAD_INPUT),
                                in_floats * sizeof(float));
    for (int t = 0; t < m->n_tensors; t++) {
        const size_t k = m->info[t].numel;
        if (s == FSC_OK) s = fsc_device_download(dev, g + tot, m->grad[t], k * sizeof(float));
        tot += k;
        fsc_device_release(dev, m->param[t]), fsc_device_release(dev, m->grad[t]);
        m->param[t] = m->grad[t] = NULL;
    }
    for (int k = 0; k < 2; k++)
        if (a[k]) m->ops->acts_free(m->ctx, a[k]);
    free(x);
    return s;
}

static fsc_status split_rank(fsc_rank *r, void *arg) {
    const split_case *sc = arg;
    fsc_layer *l[MAXL];
    int n = 0;
    FSC_TRY(layers_of(sc->variant, r->comm, l, &n));
    fsc_seq_layer ls[MAXL];
    char pre[MAXL][16];
    for (int i = 0; i < n; i++) {
        snprintf(pre[i], sizeof pre[i], "l%d.", i);
        ls[i] = (fsc_seq_layer){ .layer = l[i], .prefix = pre[i] };
    }
    fsc_model *m = NULL;
    FSC_TRY(fsc_seq_model_create(r->dev, ls, n, &m));
    const size_t P = fsc_model_num_params(m), in_floats = (size_t)B * l[0]->out_floats;
    float *g0 = malloc(P * sizeof(float)), *g1 = malloc(P * sizeof(float));
    float *gin0 = malloc(in_floats * sizeof(float)), *gin1 = malloc(in_floats * sizeof(float));
    fsc_status s = g0 && g1 && gin0 && gin1 ? FSC_OK : fsc_error(FSC_ERR_NOMEM, "test: out of memory");
    for (int first = 0; first < 2 && s == FSC_OK; first++) {
        s = run(r->dev, m, n, first, 0, g0, gin0, in_floats);
        if (s == FSC_OK) s = run(r->dev, m, n, first, 1, g1, gin1, in_floats);
        if (s != FSC_OK) break;
        size_t nonzero = 0;
        for (size_t i = 0; i < P; i++) nonzero += g0[i] != 0.0f;
        if (nonzero <= P / 2) {
            s = fsc_error(FSC_ERR_INTERNAL, "variant %d: only %zu of %zu gradients are nonzero", sc->variant, nonzero,
                          P);
            break;
        }
        for (int t = 0, off = 0; t < m->n_tensors; off += (int)m->info[t].numel, t++)
            if (memcmp(g0 + off, g1 + off, m->info[t].numel * sizeof(float)) != 0) {
                s = fsc_error(FSC_ERR_INTERNAL, "variant %d, first layer %d, rank %d: the gradient of %s differs "
                              "between the split and the whole backward", sc->variant, first, r->rank,
                              m->info[t].name);
                break;
            }
        if (s == FSC_OK && first > 0 && memcmp(gin0, gin1, in_floats * sizeof(float)) != 0)
            s = fsc_error(FSC_ERR_INTERNAL, "variant %d, rank %d: the input gradient differs between the split and "
                          "the whole backward", sc->variant, r->rank);
    }
    free(g0), free(g1), free(gin0), free(gin1);
    fsc_model_free(m);
    return s;
}

static void tp_split_equals_whole(void **st) {
    (void)st;
    for (int v = 0; v < 3; v++) {
        split_case sc = { .variant = v };
        assert_ok(tt_run(2, split_rank, &sc));
    }
}

/* Sequence parallelism keeps only this rank's rows in the records (Megatron's activation memory): the layers
 * gather their input again in backward rather than keep the gathered (B T, C) copy. At tp 2 (N = B T = 128 rows,
 * C = 64, every size a multiple of 64 floats, so no rounding) the attention's and the MLPs' records equal their
 * records without sp, and a block's hold the norms' outputs, their statistics and the residual h for N / 2 rows
 * instead of N (before, sp kept the gathered norm outputs besides: 2 N C floats more than without sp), an LM
 * head's its norm's output and statistics (before, N C floats more). The
 * gradients are the oracle's above (split_rank, sp variant) and the tensor-parallel engine tests'. */
static fsc_status sp_records_rank(fsc_rank *r, void *arg) {
    (void)arg;
    enum { RT = 64, RC = 64, RB = 2 };
    const size_t N = (size_t)RB * RT, Nl = N / 2;
    fsc_status s = FSC_OK;
    for (int kind = 0; kind < 6 && s == FSC_OK; kind++) {
        fsc_layer *l[2] = { NULL, NULL };
        for (int sp = 0; sp < 2 && s == FSC_OK; sp++) {
            if (kind == 0) {
                fsc_attention_opts ao = fsc_attention_opts_default(RT, RC, 4);
                ao.residual = 1, ao.tp = r->comm, ao.sp = sp;
                s = fsc_layer_attention(&ao, &l[sp]);
            } else if (kind <= 2) {
                fsc_mlp_opts mo = fsc_mlp_opts_default(RC);
                mo.rows = RT, mo.residual = 1, mo.tp = r->comm, mo.sp = sp;
                s = kind == 1 ? fsc_layer_gelu_mlp(&mo, &l[sp]) : fsc_layer_swiglu_mlp(&mo, &l[sp]);
            } else if (kind == 5) {
                fsc_lm_head_opts ho = { .T = RT, .C = RC, .V = 256, .eps = 1e-5f, .tp = r->comm, .sp = sp,
                                        .norm = FSC_HEAD_NORM_LAYERNORM };
                s = fsc_layer_lm_head_opts(&ho, &l[sp]);
            } else {
                fsc_block_opts bo = fsc_block_opts_default(kind == 3 ? FSC_BLOCK_GPT2 : FSC_BLOCK_LLAMA, RT, RC, 4);
                bo.tp = r->comm, bo.sp = sp;
                s = fsc_layer_block(&bo, &l[sp]);
            }
        }
        if (s == FSC_OK) {
            const size_t with = l[1]->ops->rec_bytes(l[1], RB), without = l[0]->ops->rec_bytes(l[0], RB);
            /* a block: ln1, h, ln2 (rows x C) and the norms' statistics (rows each; LayerNorm's mean and rstd);
             * the head: its norm's output and statistics */
            const size_t rows_saved = kind < 3   ? 0
                                      : kind == 5 ? (N - Nl) * ((size_t)RC + 2)
                                                  : (N - Nl) * (3 * (size_t)RC + (kind == 3 ? 4 : 2));
            if (with + rows_saved * sizeof(float) != without)
                s = fsc_error(FSC_ERR_INTERNAL, "rank %d, layer kind %d: the record holds %zu bytes with sp, %zu "
                              "without; want %zu fewer with sp", r->rank, kind, with, without,
                              rows_saved * sizeof(float));
        }
        fsc_layer_free(l[0]), fsc_layer_free(l[1]);
    }
    return s;
}

static void tp_sp_records_hold_rows(void **st) {
    (void)st;
    assert_ok(tt_run(2, sp_records_rank, NULL));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(tp_split_equals_whole),
        cmocka_unit_test(tp_sp_records_hold_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
