/* Pipeline balances: how many blocks (the layers between a model's first and last) each stage runs. A balance
 * from text ("2,3,1"), and torchgpipe's two helpers for any model (model.h): by size (the model's layer_cost,
 * or the parameter bytes of each layer's declared tensors) and by time (each layer's forward + backward
 * measured on a device). Both cut the blocks into contiguous non-empty stages minimizing the largest stage
 * cost, with the first layer counted on stage 0 and the last on the last stage.
 * Not here: running the pipeline (pipe.c). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "pipe.h"
#include "core/clock_impl.h"

/* A model whose layers a pipeline can split: at least one block between the first and the last layer. */
static fsc_status check_layers(const fsc_model *m, const char *what) {
    if (!m) return fsc_error(FSC_ERR_INVALID, "%s: model is NULL", what);
    if (m->n_layers < 3)
        return fsc_error(FSC_ERR_INVALID, "%s: the model has %d layers; a pipeline needs blocks between its first "
                         "and last layer (at least 3 layers)", what, m->n_layers);
    return FSC_OK;
}

fsc_status fsc_balance_parse(const char *text, const fsc_model *m, int pp, int *out) {
    FSC_CHECK_ARG(text);
    FSC_CHECK_ARG(m);
    FSC_CHECK_ARG(out);
    if (!text || !*text) return fsc_error(FSC_ERR_INVALID, "balance: empty (expected blocks per stage, e.g. 2,2)");
    FSC_TRY(check_layers(m, "balance"));
    if (pp < 1) return fsc_error(FSC_ERR_INVALID, "balance: pp must be >= 1, not %d", pp);
    int n = 1;
    for (const char *q = text; *q; q++) n += *q == ',';
    if (n != pp)
        return fsc_error(FSC_ERR_INVALID, "balance '%s' has %d entries but there are %d pipeline stages", text, n, pp);
    const char *p = text;
    for (int i = 0; i < n; i++) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < -1000000000L || v > 1000000000L || (*end != ',' && *end != '\0'))
            return fsc_error(FSC_ERR_INVALID, "balance '%s': expected comma-separated block counts", text);
        out[i] = (int)v;
        p = end + 1;
    }
    return fsc_pipe_check_balance(out, pp, m->n_layers - 2);
}

/* Cut costs c[0..L) into pp contiguous non-empty parts of at most limit each, taking as many as fit
 * while leaving one per later part. Returns whether everything fits (parts in out, if not NULL). */
static int cut(const uint64_t *c, int L, int pp, uint64_t limit, int *out) {
    int i = 0;
    for (int s = 0; s < pp; s++) {
        int n = 0, stop = L - (pp - s - 1);
        uint64_t sum = 0;
        while (i < stop && sum + c[i] <= limit) sum += c[i++], n++;
        if (n == 0) return 0;
        if (out) out[s] = n;
    }
    return i == L;
}

/* The smallest largest-part cost: exact binary search over integers. */
static fsc_status partition(const uint64_t *c, int L, int pp, int *out) {
    if (pp < 1 || pp > L)
        return fsc_error(FSC_ERR_INVALID, "balance: %d pipeline stages for %d blocks (need 1 <= pp <= blocks)", pp, L);
    uint64_t lo = 0, hi = 0;
    for (int i = 0; i < L; i++) {
        if (c[i] > lo) lo = c[i];
        hi += c[i];
    }
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (cut(c, L, pp, mid, NULL)) hi = mid;
        else lo = mid + 1;
    }
    cut(c, L, pp, lo, out);
    return FSC_OK;
}

/* Cost of layer l: the model's layer_cost, or param_scale x the bytes of the tensors the layer uses (owns or
 * shares: a stage running a user of a tied tensor keeps a replica). */
static double layer_cost(const fsc_model *m, int l, int B, float param_scale) {
    if (m->ops->layer_cost) return m->ops->layer_cost(m->ctx, l, B, param_scale);
    double n = 0;
    for (int i = 0; i < m->n_tensors; i++)
        if (fsc_param_used_by(&m->info[i], l)) n += (double)m->info[i].numel;
    return 4.0 * (double)param_scale * n;
}

fsc_status fsc_balance_by_size(const fsc_model *m, int pp, int B, float param_scale, int *out) {
    FSC_CHECK_ARG(m);
    FSC_CHECK_ARG(out);
    FSC_TRY(check_layers(m, "balance_by_size"));
    FSC_TRY(fsc_model_validate(m));
    if (B < 1) return fsc_error(FSC_ERR_INVALID, "balance_by_size: micro-batch of %d samples (need >= 1)", B);
    if (!(param_scale >= 0) || param_scale > 1e6f)
        return fsc_error(FSC_ERR_INVALID, "balance_by_size: param_scale %g must be in [0, 1e6]", (double)param_scale);
    const int L = m->n_layers - 2;
    uint64_t *c = calloc((size_t)L, sizeof *c);
    if (!c) return fsc_error(FSC_ERR_NOMEM, "balance_by_size: out of memory");
    for (int b = 0; b < L; b++) c[b] = (uint64_t)layer_cost(m, b + 1, B, param_scale);
    c[0] += (uint64_t)layer_cost(m, 0, B, param_scale); /* the first layer runs on stage 0, the last on the last */
    c[L - 1] += (uint64_t)layer_cost(m, L + 1, B, param_scale);
    fsc_status s = partition(c, L, pp, out);
    free(c);
    return s;
}

/* ---- by time ---- */

typedef struct {
    fsc_device *dev;
    double *t;      /* (n_layers) seconds this repeat, per layer */
    double start;
    fsc_status err;
} timer;

static fsc_status t_start(void *ctx, int l) {
    timer *tm = ctx;
    (void)l;
    FSC_TRY(fsc_device_sync(tm->dev));
    tm->start = fsc_clock_now();
    return FSC_OK;
}
static fsc_status t_stop(void *ctx, int l) {
    timer *tm = ctx;
    FSC_TRY(fsc_device_sync(tm->dev));
    tm->t[l] += fsc_clock_now() - tm->start;
    return FSC_OK;
}

/* The model's param/grad pointers point into flat buffers of P floats each (restored by the caller). */
static fsc_status bind_initial(fsc_device *dev, fsc_model *m, float *params, float *grads) {
    float *host = NULL;
    size_t off = 0;
    fsc_status s = FSC_OK;
    for (int i = 0; i < m->n_tensors && s == FSC_OK; i++) { /* the keyed initial values, one tensor at a time */
        const size_t n = m->info[i].numel;
        m->param[i] = params + off;
        m->grad[i] = grads + off;
        off += n;
        float *h = realloc(host, n * sizeof(float));
        if (!h) s = fsc_error(FSC_ERR_NOMEM, "balance_by_time: out of memory");
        else host = h;
        if (s == FSC_OK) m->ops->init_values(m->ctx, 1, i, 0, n, host);
        if (s == FSC_OK) s = fsc_device_upload(dev, m->param[i], host, n * sizeof(float));
    }
    free(host);
    return s;
}

fsc_status fsc_balance_by_time(fsc_device *dev, fsc_model *m, int pp, int B, int repeats, int *out) {
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(m);
    FSC_CHECK_ARG(out);
    if (m->engine) /* it would point the model's tables at its own buffers, then back, under the engine */
        return fsc_error(FSC_ERR_STATE, "balance_by_time: the model is bound to an engine (measure before creating "
                         "the engine, or after fsc_engine_free)");
    FSC_TRY(check_layers(m, "balance_by_time"));
    FSC_TRY(fsc_model_validate(m));
    if (!dev) return fsc_error(FSC_ERR_INVALID, "balance_by_time: device is NULL");
    if (B < 1) return fsc_error(FSC_ERR_INVALID, "balance_by_time: micro-batch of %d samples (need >= 1)", B);
    if (repeats < 1 || repeats > 1000)
        return fsc_error(FSC_ERR_INVALID, "balance_by_time: repeats %d must be in [1, 1000]", repeats);
    const int NL = m->n_layers, L = NL - 2;
    if (pp < 1 || pp > L)
        return fsc_error(FSC_ERR_INVALID, "balance: %d pipeline stages for %d blocks (need 1 <= pp <= blocks)", pp, L);
    const size_t P = fsc_model_num_params(m), nt = (size_t)m->n_tensors;
    fsc_model_acts *a = NULL;
    float *params = NULL, *grads = NULL;
    /* zero bytes as inputs and targets: token 0, feature 0.0, valid for any model's format */
    void *in = calloc((size_t)B, m->sample_input_bytes ? m->sample_input_bytes : 1);
    void *tg = calloc((size_t)B, m->sample_target_bytes ? m->sample_target_bytes : 1);
    float **keep_p = malloc(nt * sizeof *keep_p), **keep_g = malloc(nt * sizeof *keep_g); /* the caller's */
    double *t = calloc((size_t)NL, sizeof *t), *best = calloc((size_t)NL, sizeof *best);
    uint64_t *c = calloc((size_t)L, sizeof *c);
    fsc_status s = in && tg && keep_p && keep_g && t && best && c
                       ? FSC_OK : fsc_error(FSC_ERR_NOMEM, "balance_by_time: out of memory");
    const int saved = s == FSC_OK;
    if (saved) {
        memcpy(keep_p, m->param, nt * sizeof *keep_p);
        memcpy(keep_g, m->grad, nt * sizeof *keep_g);
        s = fsc_device_alloc(dev, FSC_TAG_PARAMS, P * sizeof(float), (void **)&params);
    }
    if (s == FSC_OK) s = fsc_device_calloc(dev, FSC_TAG_GRADS, P * sizeof(float), (void **)&grads);
    if (s == FSC_OK) s = bind_initial(dev, m, params, grads);
    fsc_model_acts_opts o = { .B = B, .first = 0, .last = NL - 1 };
    if (s == FSC_OK) s = fsc_model_acts_make(m, NULL, &o, &a);
    if (s == FSC_OK) s = m->ops->set_batch(m->ctx, a, in, tg);
    timer tm = { dev, t, 0, FSC_OK };
    fsc_model_hooks h = { &tm, t_start, t_stop, t_start, t_stop };
    const float dscale = 1.0f / ((float)B * (float)m->loss_terms);
    for (int r = 0; r <= repeats && s == FSC_OK; r++) { /* r = 0 warms up */
        memset(t, 0, (size_t)NL * sizeof *t);
        s = m->ops->forward(m->ctx, a, &h, NULL);
        if (s == FSC_OK) s = m->ops->backward(m->ctx, a, &h, dscale);
        for (int l = 0; l < NL && r > 0; l++)
            if (r == 1 || t[l] < best[l]) best[l] = t[l];
    }
    if (s == FSC_OK) {
        for (int b = 0; b < L; b++) c[b] = (uint64_t)(best[b + 1] * 1e9) + 1;
        c[0] += (uint64_t)(best[0] * 1e9);
        c[L - 1] += (uint64_t)(best[L + 1] * 1e9);
        s = partition(c, L, pp, out);
    }
    if (a) m->ops->acts_free(m->ctx, a);
    if (params) fsc_device_release(dev, params);
    if (grads) fsc_device_release(dev, grads);
    if (saved) {
        memcpy(m->param, keep_p, nt * sizeof *keep_p);
        memcpy(m->grad, keep_g, nt * sizeof *keep_g);
    }
    free(keep_p);
    free(keep_g);
    free(in);
    free(tg);
    free(t);
    free(best);
    free(c);
    return s;
}
