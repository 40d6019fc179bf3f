/* Generation from a language model on one rank (generate.h): the context window, one forward per token over a
 * record of one sample, the logits of the last real position, and the keyed choice of the next token.
 * Not here: which model (fsc_model_from_config, lib/model), loading weights (the engine), tokenizers. */
#include <math.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include "fsc/generate.h"
#include "fsc/rng.h"

struct fsc_generator {
    fsc_device *dev;
    fsc_model *m;
    fsc_model_acts *acts;   /* one sample over the whole model */
    int T;                  /* context window */
    int32_t *win, *tgt;     /* (T) host: the window and its (unused) targets */
    float *host;            /* (V) the last logits, allocated at the first forward */
    int V;
};

static int cmp_desc(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

/* A logit's unnormalized probability exp((l - mx) / t) against the largest logit mx; when mx is +inf, softmax's
 * limit: the +inf logits share the whole probability (inf - inf would make every weight NaN). */
static double weight(float l, double mx, double t) {
    return mx == INFINITY ? (l == INFINITY ? 1.0 : 0.0) : exp(((double)l - mx) / t);
}

/* A temperature finite and >= 0 and a top_k >= 0. */
static int opts_ok(const fsc_sample_opts *o) {
    return o && o->temperature >= 0.0f && isfinite(o->temperature) && o->top_k >= 0;
}

int32_t fsc_sample_token(const float *logits, int V, const fsc_sample_opts *o, uint64_t step, float *scratch) {
    if (!logits || V < 1 || !opts_ok(o)) return -1;
    int best = 0;
    for (int v = 0; v < V; v++) {
        if (isnan(logits[v])) return -1; /* no token is more likely than another: none picked */
        if (logits[v] > logits[best]) best = v;
    }
    if (logits[best] == -INFINITY) return -1; /* every logit -inf: none possible */
    if (o->temperature == 0.0f || !scratch) return best;
    float cut = -INFINITY; /* logits below cut are out (top-k) */
    if (o->top_k > 0 && o->top_k < V) {
        memcpy(scratch, logits, (size_t)V * sizeof(float));
        qsort(scratch, (size_t)V, sizeof(float), cmp_desc);
        cut = scratch[o->top_k - 1];
    }
    const double mx = logits[best], t = o->temperature;
    double total = 0;
    for (int v = 0; v < V; v++) total += logits[v] >= cut ? weight(logits[v], mx, t) : 0.0;
    const double u = (double)fsc_rng_uniform(fsc_rng_key(o->seed, "sample"), step) * total;
    double acc = 0;
    int last = best;
    for (int v = 0; v < V; v++) {
        if (!(logits[v] >= cut)) continue;
        acc += weight(logits[v], mx, t);
        last = v;
        if (u < acc) return v;
    }
    return last; /* rounding: u reached the total */
}

fsc_status fsc_generator_create(fsc_device *dev, fsc_model *m, fsc_generator **out) {
    FSC_CHECK_ARG(out);
    *out = NULL;
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(m);
    if (!dev || !m || !m->ops) return fsc_error(FSC_ERR_INVALID, "generator: device or model is NULL");
    if (!m->ops->logits)
        return fsc_error(FSC_ERR_INVALID, "generator: the model gives no logits (model.h's logits operation): it "
                         "is not a language model this library can sample");
    const size_t T = (size_t)m->loss_terms;
    if (m->sample_input_bytes != T * sizeof(int32_t) || m->sample_target_bytes != T * sizeof(int32_t))
        return fsc_error(FSC_ERR_INVALID, "generator: the model's samples are not sequences of %zu int32 tokens "
                         "(input %zu bytes, target %zu bytes)", T, m->sample_input_bytes, m->sample_target_bytes);
    fsc_generator *g = calloc(1, sizeof *g);
    if (g) g->win = calloc(T, sizeof *g->win), g->tgt = calloc(T, sizeof *g->tgt);
    if (!g || !g->win || !g->tgt) {
        fsc_generator_free(g);
        return fsc_error(FSC_ERR_NOMEM, "generator: out of host memory");
    }
    g->dev = dev, g->m = m, g->T = (int)T;
    fsc_model_acts_opts ao = fsc_model_acts_opts_default(m, 1);
    fsc_status s = fsc_model_acts_make(m, NULL, &ao, &g->acts);
    if (s != FSC_OK) {
        fsc_generator_free(g);
        return s;
    }
    *out = g;
    return FSC_OK;
}

int fsc_generator_context(const fsc_generator *g) { return g ? g->T : 0; }

fsc_status fsc_generator_next(fsc_generator *g, const int32_t *tokens, int n, const float **logits, int *vocab) {
    FSC_CHECK_ARG(g);
    FSC_CHECK_ARG(tokens);
    FSC_CHECK_ARG(logits);
    FSC_CHECK_ARG(vocab);
    if (!g || !tokens || n < 1 || !logits || !vocab)
        return fsc_error(FSC_ERR_INVALID, "generator: need a generator, at least one token and outputs");
    const int k = n < g->T ? n : g->T; /* the last k tokens, then padding */
    memset(g->win, 0, (size_t)g->T * sizeof *g->win);
    memcpy(g->win, tokens + (n - k), (size_t)k * sizeof *g->win);
    fsc_model *m = g->m;
    fsc_status s = m->ops->set_batch(m->ctx, g->acts, g->win, g->tgt);
    if (s != FSC_OK && n > k) /* the model names the window's token: say where the window starts in tokens */
        return fsc_error_prefix(s, "generator: the window is the last %d of %d tokens (its [0] is tokens[%d])", k, n,
                                n - k);
    FSC_TRY(s);
    double loss = 0;
    const fsc_model_hooks none = { 0 }; /* model.h: a model calls its hooks; a model's own may not take NULL */
    FSC_TRY(m->ops->forward(m->ctx, g->acts, &none, &loss));
    int V = 0;
    const float *d = m->ops->logits(m->ctx, g->acts, &V);
    if (!d || V < 1) return fsc_error(FSC_ERR_INTERNAL, "generator: the model's forward left no logits");
    if (!g->host || V != g->V) {
        free(g->host);
        if (!(g->host = malloc((size_t)V * sizeof(float)))) return fsc_error(FSC_ERR_NOMEM, "generator: out of memory");
        g->V = V;
    }
    FSC_TRY(fsc_device_download(g->dev, g->host, d + (size_t)(k - 1) * (size_t)V, (size_t)V * sizeof(float)));
    *logits = g->host;
    *vocab = V;
    return FSC_OK;
}

fsc_status fsc_generate(fsc_generator *g, int32_t *tokens, int n, int n_new, const fsc_sample_opts *o) {
    FSC_CHECK_ARG(g);
    FSC_CHECK_ARG(tokens);
    FSC_CHECK_ARG(o);
    if (!opts_ok(o)) return fsc_error(FSC_ERR_INVALID, "generate: temperature must be finite and >= 0, top_k >= 0");
    if (n_new < 0) return fsc_error(FSC_ERR_INVALID, "generate: %d new tokens", n_new);
    if (n < 1) return fsc_error(FSC_ERR_INVALID, "generate: a prompt of %d tokens (at least 1)", n);
    if (n > INT_MAX - n_new)
        return fsc_error(FSC_ERR_INVALID, "generate: %d tokens and %d new ones are more than %d", n, n_new, INT_MAX);
    float *scratch = NULL;
    fsc_status s = FSC_OK;
    for (int step = 0; step < n_new && s == FSC_OK; step++) {
        const float *lg;
        int V;
        s = fsc_generator_next(g, tokens, n + step, &lg, &V);
        if (s == FSC_OK && !scratch && !(scratch = malloc((size_t)V * sizeof(float))))
            s = fsc_error(FSC_ERR_NOMEM, "generate: out of host memory");
        const int32_t t = s == FSC_OK ? fsc_sample_token(lg, V, o, (uint64_t)step, scratch) : 0;
        if (s == FSC_OK && t < 0)
            s = fsc_error(FSC_ERR_NUMERIC, "generate: step %d: the model's logits hold NaN or are all -inf: no token "
                          "to pick (the weights may not be finite)", step);
        if (s == FSC_OK) tokens[n + step] = t;
    }
    free(scratch);
    return s;
}

void fsc_generator_free(fsc_generator *g) {
    if (!g) return;
    if (g->acts) g->m->ops->acts_free(g->m->ctx, g->acts);
    free(g->win), free(g->tgt), free(g->host);
    free(g);
}
