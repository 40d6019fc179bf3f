/* A padded LM head (layers.h's fsc_lm_head_opts.Vp > V) accumulates into its weight's gradient like every layer
 * (layers.h: "Parameter gradients accumulate into c->grad"): the padding rows' contribution is 0, so their gradient
 * keeps the value it had before backward, on one device (lib/layers/transformer.c) and on a tensor group of 2
 * (lib/layers/tp_basic.c, rank 1 holds the padding). Oracle: gradients filled with 0.25 before backward; after it,
 * rows [V, Vp) still hold 0.25 bit for bit, and the real rows moved. */
#include <math.h>
#include <stdlib.h>
#include "test_tp_util.h"

enum { T = 3, C = 4, V = 6, VP = 8, B = 2 };

static fsc_status head_case(fsc_device *dev, fsc_comm *tp, fsc_head_norm norm) {
    const int size = tp ? fsc_comm_size(tp) : 1, rank = tp ? fsc_comm_rank(tp) : 0;
    fsc_layer *l = NULL;
    fsc_lm_head_opts ho = { .T = T, .C = C, .V = V, .Vp = VP, .norm = norm, .eps = 1e-5f, .tp = tp };
    FSC_TRY(fsc_layer_lm_head_opts(&ho, &l));
    const int w = l->n_params - 1, rows = VP / size; /* this rank's rows [rank rows, (rank + 1) rows) */
    float *p[4] = { 0 }, *g[4] = { 0 }, *in = NULL, *h = NULL;
    void *rec = NULL, *work = NULL;
    int32_t *tgt = NULL;
    fsc_status s = FSC_OK;
    for (int k = 0; k < l->n_params && s == FSC_OK; k++) {
        const size_t n = l->params[k].numel;
        float *v = malloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++) v[i] = k == w ? ((rank * rows + (int)(i / C)) < V ? 0.1f * (float)sin(i + 1.0) : 0.0f)
                                                   : 1.0f;
        s = tt_up(dev, &p[k], v, n);
        for (size_t i = 0; i < n; i++) v[i] = 0.25f;
        if (s == FSC_OK) s = tt_up(dev, &g[k], v, n);
        free(v);
    }
    float hin[B * T * C];
    int32_t ht[B * T];
    for (int i = 0; i < B * T * C; i++) hin[i] = (float)cos(0.3 * i);
    for (int i = 0; i < B * T; i++) ht[i] = (i * 5 + 1) % V;
    if (s == FSC_OK) s = tt_up(dev, &in, hin, B * T * C);
    if (s == FSC_OK) s = fsc_device_alloc(dev, FSC_TAG_ACTS, sizeof ht, (void **)&tgt);
    if (s == FSC_OK) s = fsc_device_upload(dev, tgt, ht, sizeof ht);
    if (s == FSC_OK) s = fsc_device_calloc(dev, FSC_TAG_ACTS, l->ops->rec_bytes(l, B) + 4, &rec);
    if (s == FSC_OK) s = fsc_device_calloc(dev, FSC_TAG_ACTS, (l->ops->work_bytes ? l->ops->work_bytes(l, B) : 0) + 4,
                                           &work);
    fsc_layer_call c = { .dev = dev, .B = B, .param = (const float *const *)p, .grad = g, .rec = rec, .work = work,
                         .target = tgt, .dscale = 1.0f / (B * T) };
    float *out = NULL;
    if (s == FSC_OK) s = fsc_device_alloc(dev, FSC_TAG_ACTS, B * T * sizeof(float), (void **)&out);
    if (s == FSC_OK) s = l->ops->forward(l, &c, out, in);
    if (s == FSC_OK) s = l->ops->backward(l, &c, NULL, NULL, in);
    const size_t n = l->params[w].numel;
    h = malloc(n * sizeof(float));
    if (s == FSC_OK) s = tt_down(dev, h, g[w], n);
    int moved = 0;
    for (size_t i = 0; i < n && s == FSC_OK; i++) {
        const int row = rank * rows + (int)(i / C);
        if (row >= V && h[i] != 0.25f)
            s = fsc_error(FSC_ERR_INTERNAL, "rank %d: padding row %d's gradient %.9g, not the 0.25 it held (+= 0)", rank,
                          row, (double)h[i]);
        if (row < V && h[i] != 0.25f) moved = 1;
    }
    if (s == FSC_OK && rank == 0 && !moved) s = fsc_error(FSC_ERR_INTERNAL, "no real row's gradient moved");
    free(h);
    for (int k = 0; k < 4; k++) fsc_device_release(dev, p[k]), fsc_device_release(dev, g[k]);
    fsc_device_release(dev, in), fsc_device_release(dev, tgt), fsc_device_release(dev, rec);
    fsc_device_release(dev, work), fsc_device_release(dev, out);
    fsc_layer_free(l);
    return s;
}

static fsc_status rank_fn(fsc_rank *r, void *arg) {
    (void)arg;
    fsc_comm *tp = r->world > 1 ? r->comm : NULL;
    FSC_TRY(head_case(r->dev, tp, FSC_HEAD_NORM_NONE));
    FSC_TRY(head_case(r->dev, tp, FSC_HEAD_NORM_LAYERNORM));
    return head_case(r->dev, tp, FSC_HEAD_NORM_RMSNORM);
}

static void test_padded_head_accumulates(void **st) {
    (void)st;
    assert_ok(tt_run(1, rank_fn, NULL));
    assert_ok(tt_run(2, rank_fn, NULL));
}

int main(void) {
    const struct CMUnitTest tests[] = { cmocka_unit_test(test_padded_head_accumulates) };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
