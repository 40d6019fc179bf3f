/* The engine's model operations for the GPT of gpt.h (engine_impl.h, fsc_model_ops): records are
 * fsc_gpt_acts, initial values the keyed RNG's at the full tensors' element indices.
 * Not here: the tensor-parallel GPT's operations (lib/tp/tp_engine.c). */
#include "engine_impl.h"

static fsc_gpt_acts *G(fsc_model_acts *a) { return (fsc_gpt_acts *)a; }

static fsc_status g_create(fsc_engine *e, const fsc_gpt_acts_opts *o, fsc_model_acts **out) {
    fsc_gpt_acts *a = NULL;
    FSC_TRY(fsc_gpt_acts_create(e->m, o, &a));
    *out = (fsc_model_acts *)a;
    return FSC_OK;
}

static void g_free(fsc_engine *e, fsc_model_acts *a) {
    (void)e;
    fsc_gpt_acts_free(G(a));
}

static fsc_status g_set_batch(fsc_engine *e, fsc_model_acts *a, const int32_t *tokens, const int32_t *targets) {
    (void)e;
    return fsc_gpt_acts_set_batch(G(a), tokens, targets);
}

static float *g_stream(fsc_model_acts *a, int which) {
    switch (which) {
    case FSC_STREAM_INPUT: return fsc_gpt_acts_input(G(a));
    case FSC_STREAM_OUTPUT: return fsc_gpt_acts_output(G(a));
    case FSC_STREAM_GRAD_OUTPUT: return fsc_gpt_acts_grad_output(G(a));
    default: return fsc_gpt_acts_grad_input(G(a));
    }
}

static fsc_status g_forward(fsc_engine *e, fsc_model_acts *a, const fsc_gpt_hooks *h, double *loss_sum) {
    return fsc_gpt_forward(e->m, G(a), h, loss_sum);
}

static fsc_status g_backward(fsc_engine *e, fsc_model_acts *a, const fsc_gpt_hooks *h, float dscale) {
    return fsc_gpt_backward(e->m, G(a), h, dscale);
}

static size_t g_bytes(const fsc_model_acts *a) { return fsc_gpt_acts_bytes((const fsc_gpt_acts *)a); }

static size_t g_stream_floats(const fsc_engine *e, int B) { return (size_t)B * e->cfg.seq * e->cfg.dim; }

static void g_init(const fsc_engine *e, int i, size_t first, size_t n, float *out) {
    fsc_gpt_init_values(&e->cfg, e->seed, i, first, n, out);
}

const fsc_model_ops fsc_gpt_model_ops = {
    .acts_create = g_create,
    .acts_free = g_free,
    .set_batch = g_set_batch,
    .stream = g_stream,
    .forward = g_forward,
    .backward = g_backward,
    .acts_bytes = g_bytes,
    .stream_floats = g_stream_floats,
    .init_values = g_init,
};
