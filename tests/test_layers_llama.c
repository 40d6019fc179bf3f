/* The Llama built from layers (lib/layers: token embedding, Llama-flavour blocks, RMSNorm, untied LM head in a
 * sequential model) against the built-in Llama (lib/model/llama*.c).
 *
 * Oracles: the two declare the same tensors (Hugging Face names, shapes, owning layers but the head's, in the same
 * order; the sequential model's final RMSNorm is a layer of its own, the Llama's is in its head layer) with
 * the same keyed initial values; given the same weights and micro-batches they give bit-identical losses and
 * bit-identical gradients of every tensor, over two micro-batches accumulating, with and without layer
 * checkpointing (recomputation in backward), and over a range split in two records as a 2-stage pipeline runs
 * it (the boundary stream and its gradient handed across). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "testutil.h"
#include "fsc/llama.h"

static fsc_llama_config cfg(void) {
    return (fsc_llama_config){ .layers = 3, .dim = 16, .heads = 4, .kv_heads = 2, .ffn = 24, .seq = 8,
                               .vocab = 32, .rope_theta = 10000.0f, .norm_eps = 1e-5f };
}

/* The Llama as a sequential model of built-in layers. */
static fsc_model *llama_of_layers(fsc_device *dev, const fsc_llama_config *c) {
    enum { MAXL = 8 };
    fsc_seq_layer sl[MAXL];
    static char prefix[MAXL][32];
    const int n = c->layers + 3;
    assert_true(n <= MAXL);
    fsc_layer *l;
    assert_ok(fsc_layer_token_embedding(c->seq, c->dim, c->vocab, &l));
    sl[0] = (fsc_seq_layer){ .layer = l, .prefix = "model.embed_tokens." };
    for (int i = 0; i < c->layers; i++) {
        fsc_block_opts o = { .kind = FSC_BLOCK_LLAMA, .T = c->seq, .C = c->dim, .heads = c->heads,
                             .kv_heads = c->kv_heads, .F = c->ffn, .rope_theta = c->rope_theta, .eps = c->norm_eps };
        assert_ok(fsc_layer_block(&o, &l));
        snprintf(prefix[i], sizeof prefix[i], "model.layers.%d.", i);
        sl[1 + i] = (fsc_seq_layer){ .layer = l, .prefix = prefix[i] };
    }
    assert_ok(fsc_layer_rmsnorm(c->seq, c->dim, c->norm_eps, &l));
    sl[n - 2] = (fsc_seq_layer){ .layer = l, .prefix = "model.norm." };
    assert_ok(fsc_layer_lm_head(c->seq, c->dim, c->vocab, &l));
    sl[n - 1] = (fsc_seq_layer){ .layer = l, .prefix = "lm_head." };
    fsc_model *m;
    assert_ok(fsc_seq_model_create(dev, sl, n, &m));
    return m;
}

/* Point the model's param/grad at flat device buffers: the weights w (host), zero gradients. */
typedef struct {
    float *p, *g;
    size_t P;
} bound;

static bound bind(fsc_device *dev, fsc_model *m, const float *w) {
    bound b = { .P = fsc_model_num_params(m) };
    assert_ok(fsc_device_alloc(dev, FSC_TAG_PARAMS, b.P * sizeof(float), (void **)&b.p));
    assert_ok(fsc_device_calloc(dev, FSC_TAG_GRADS, b.P * sizeof(float), (void **)&b.g));
    assert_ok(fsc_device_upload(dev, b.p, w, b.P * sizeof(float)));
    size_t off = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        m->param[i] = b.p + off;
        m->grad[i] = b.g + off;
        off += m->info[i].numel;
    }
    return b;
}

/* Forward and backward of micro-batch `mb` (B samples) over the whole model in one record, or in two records
 * [0, cut] and [cut + 1, n - 1] handing the stream across (cut > 0); returns the loss sum. */
static double step(fsc_device *dev, fsc_model *m, int B, int mb, int ckpt, int cut) {
    const fsc_llama_config c = cfg();
    const size_t N = (size_t)B * c.seq;
    int32_t *tok = malloc(N * sizeof *tok), *tgt = malloc(N * sizeof *tgt);
    for (size_t i = 0; i < N; i++) {
        tok[i] = (int32_t)((i * 7 + (size_t)mb * 13 + 3) % (size_t)c.vocab);
        tgt[i] = (int32_t)((i * 11 + (size_t)mb * 5 + 1) % (size_t)c.vocab);
    }
    const float dscale = 1.0f / (float)(2 * N);
    double loss = 0;
    const fsc_model_ops *o = m->ops;
    const fsc_model_hooks nohooks = { 0 };
    if (!cut) {
        fsc_model_acts *a;
        assert_ok(o->acts_create(m->ctx, &(fsc_model_acts_opts){ .B = B, .last = m->n_layers - 1, .checkpoint = ckpt },
                                 &a));
        assert_ok(o->set_batch(m->ctx, a, tok, tgt));
        assert_ok(o->forward(m->ctx, a, &nohooks, &loss));
        assert_ok(o->backward(m->ctx, a, &nohooks, dscale));
        o->acts_free(m->ctx, a);
    } else {
        fsc_model_acts *a0, *a1;
        assert_ok(o->acts_create(m->ctx, &(fsc_model_acts_opts){ .B = B, .last = cut, .checkpoint = ckpt }, &a0));
        assert_ok(o->acts_create(m->ctx, &(fsc_model_acts_opts){ .B = B, .first = cut + 1,
                                                                   .last = m->n_layers - 1, .checkpoint = ckpt }, &a1));
        const size_t sb = o->stream_floats(m->ctx, B) * sizeof(float);
        assert_ok(o->set_batch(m->ctx, a0, tok, NULL));
        assert_ok(o->set_batch(m->ctx, a1, NULL, tgt));
        double none = 1;
        assert_ok(o->forward(m->ctx, a0, &nohooks, &none));
        assert_true(none == 0.0);
        assert_ok(fsc_device_copy(dev, o->stream(m->ctx, a1, FSC_STREAM_INPUT), o->stream(m->ctx, a0, FSC_STREAM_OUTPUT),
                                  sb));
        assert_ok(o->forward(m->ctx, a1, &nohooks, &loss));
        assert_ok(o->backward(m->ctx, a1, &nohooks, dscale));
        assert_ok(fsc_device_copy(dev, o->stream(m->ctx, a0, FSC_STREAM_GRAD_OUTPUT),
                                  o->stream(m->ctx, a1, FSC_STREAM_GRAD_INPUT), sb));
        assert_ok(o->backward(m->ctx, a0, &nohooks, dscale));
        o->acts_free(m->ctx, a0);
        o->acts_free(m->ctx, a1);
    }
    free(tok), free(tgt);
    return loss;
}

static void test_llama_of_layers_is_the_llama(void **st) {
    (void)st;
    fsc_device *dev;
    assert_ok(fsc_device_create("cpu", &(fsc_device_opts){ .threads = 2 }, &dev));
    const fsc_llama_config c = cfg();
    fsc_model *ref, *seq;
    assert_ok(fsc_llama_model_create(dev, &c, &ref));
    seq = llama_of_layers(dev, &c);
    /* the final RMSNorm is a layer of its own here, part of the Llama's head layer there */
    assert_int_equal(seq->n_layers, ref->n_layers + 1);
    assert_int_equal(seq->n_tensors, ref->n_tensors);
    assert_int_equal(seq->loss_terms, ref->loss_terms);
    assert_int_equal(seq->sample_input_bytes, ref->sample_input_bytes);
    assert_int_equal(seq->sample_target_bytes, ref->sample_target_bytes);
    const size_t P = fsc_model_num_params(ref);
    float *w = malloc(P * sizeof(float)), *w2 = malloc(P * sizeof(float));
    size_t off = 0;
    for (int i = 0; i < ref->n_tensors; i++) { /* the same declaration and the same keyed initial values */
        const fsc_param_info *a = &ref->info[i], *b = &seq->info[i];
        assert_string_equal(b->name, a->name);
        assert_int_equal(b->ndim, a->ndim);
        for (int d = 0; d < a->ndim; d++) assert_int_equal(b->shape[d], a->shape[d]);
        assert_int_equal(b->layer, a->layer + (i == ref->n_tensors - 1)); /* lm_head.weight: one layer later */
        assert_int_equal(b->nusers, 0);
        ref->ops->init_values(ref->ctx, 5, i, 0, a->numel, w + off);
        seq->ops->init_values(seq->ctx, 5, i, 0, a->numel, w2 + off);
        off += a->numel;
    }
    assert_bits_equal(w2, w, P, "keyed initial values");
    for (size_t i = 0; i < P; i++) w[i] += 0.05f * sinf((float)i); /* norms away from 1 */
    float *ga = malloc(P * sizeof(float)), *gb = malloc(P * sizeof(float));
    static const int modes[][2] = { { 0, 0 }, { 1, 0 }, { 0, 2 }, { 1, 3 } }; /* checkpoint, pipeline cut */
    for (size_t k = 0; k < sizeof modes / sizeof modes[0]; k++) {
        bound br = bind(dev, ref, w), bs = bind(dev, seq, w);
        for (int mb = 0; mb < 2; mb++) { /* two micro-batches accumulating */
            double la = step(dev, ref, 2, mb, modes[k][0], modes[k][1]);
            double lb = step(dev, seq, 2, mb, modes[k][0], modes[k][1]);
            if (memcmp(&la, &lb, sizeof la) != 0)
                fail_msg("checkpoint %d, cut %d, micro-batch %d: loss %.17g (llama) vs %.17g (layers)", modes[k][0],
                         modes[k][1], mb, la, lb);
            assert_true(la > 0 && isfinite(la));
        }
        assert_ok(fsc_device_download(dev, ga, br.g, P * sizeof(float)));
        assert_ok(fsc_device_download(dev, gb, bs.g, P * sizeof(float)));
        off = 0;
        for (int i = 0; i < ref->n_tensors; i++) {
            char what[128];
            snprintf(what, sizeof what, "gradient of %s (checkpoint %d, cut %d)", ref->info[i].name, modes[k][0],
                     modes[k][1]);
            assert_bits_equal(gb + off, ga + off, ref->info[i].numel, what);
            off += ref->info[i].numel;
        }
        double n2 = 0;
        for (size_t i = 0; i < P; i++) n2 += (double)ga[i] * ga[i];
        assert_true(n2 > 0);
        fsc_device_release(dev, br.p), fsc_device_release(dev, br.g);
        fsc_device_release(dev, bs.p), fsc_device_release(dev, bs.g);
    }
    free(w), free(w2), free(ga), free(gb);
    fsc_model_free(seq);
    fsc_model_free(ref);
    fsc_device_free(dev);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama_of_layers_is_the_llama),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
