/* Pipeline balances: how many blocks each stage runs. A balance from text ("2,3,1"), and torchgpipe's
 * two helpers: by size (parameters and saved activations) and by time (each layer's forward + backward
 * measured on a device). Both cut the blocks into contiguous non-empty stages minimizing the largest
 * stage cost, with the embedding counted on stage 0 and the head on the last stage.
 * Not here: running the pipeline (pipe.c). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "pipe.h"

fsc_status fsc_balance_parse(const char *text, const fsc_gpt_config *cfg, int pp, int *out) {
    if (!text || !*text) return fsc_error(FSC_ERR_INVALID, "balance: empty (expected blocks per stage, e.g. 2,2)");
    FSC_TRY(fsc_gpt_config_validate(cfg));
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
    return fsc_pipe_check_balance(out, pp, cfg->layers);
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

fsc_status fsc_balance_by_size(const fsc_gpt_config *cfg, int pp, int B, float param_scale, int *out) {
    FSC_TRY(fsc_gpt_config_validate(cfg));
    if (B < 1) return fsc_error(FSC_ERR_INVALID, "balance_by_size: micro-batch of %d sequences (need >= 1)", B);
    if (!(param_scale >= 0) || param_scale > 1e6f)
        return fsc_error(FSC_ERR_INVALID, "balance_by_size: param_scale %g must be in [0, 1e6]", (double)param_scale);
    const int L = cfg->layers;
    const double C = cfg->dim, V = cfg->vocab, T = cfg->seq, N = (double)B * cfg->seq;
    uint64_t *c = calloc((size_t)L, sizeof *c);
    if (!c) return fsc_error(FSC_ERR_NOMEM, "balance_by_size: out of memory");
    double block_params = 12 * C * C + 13 * C;
    double block_acts = (double)fsc_block_saved_floats(B, cfg->seq, cfg->dim, cfg->heads) + N * C;
    for (int b = 0; b < L; b++) c[b] = (uint64_t)(4.0 * (param_scale * block_params + block_acts));
    /* embedding: wte, wpe and its output stream; head: ln_f, the wte replica and logits, ln_f, losses */
    c[0] += (uint64_t)(4.0 * (param_scale * (V * C + T * C) + N * C));
    c[L - 1] += (uint64_t)(4.0 * (param_scale * 2 * C + V * C + N * V + N * C + 3 * N));
    fsc_status s = partition(c, L, pp, out);
    free(c);
    return s;
}

/* ---- by time ---- */

typedef struct {
    fsc_device *dev;
    double *t;      /* (L + 2) seconds this repeat, per layer */
    double start;
    fsc_status err;
} timer;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
static fsc_status t_start(void *ctx, int l) {
    timer *tm = ctx;
    (void)l;
    FSC_TRY(fsc_device_sync(tm->dev));
    tm->start = now_s();
    return FSC_OK;
}
static fsc_status t_stop(void *ctx, int l) {
    timer *tm = ctx;
    FSC_TRY(fsc_device_sync(tm->dev));
    tm->t[l] += now_s() - tm->start;
    return FSC_OK;
}

fsc_status fsc_balance_by_time(fsc_device *dev, const fsc_gpt_config *cfg, int pp, int B, int repeats, int *out) {
    FSC_TRY(fsc_gpt_config_validate(cfg));
    if (!dev) return fsc_error(FSC_ERR_INVALID, "balance_by_time: device is NULL");
    if (B < 1) return fsc_error(FSC_ERR_INVALID, "balance_by_time: micro-batch of %d sequences (need >= 1)", B);
    if (repeats < 1 || repeats > 1000)
        return fsc_error(FSC_ERR_INVALID, "balance_by_time: repeats %d must be in [1, 1000]", repeats);
    const int L = cfg->layers, T = cfg->seq;
    if (pp < 1 || pp > L)
        return fsc_error(FSC_ERR_INVALID, "balance: %d pipeline stages for %d blocks (need 1 <= pp <= blocks)", pp, L);
    const size_t P = fsc_gpt_num_params(cfg), N = (size_t)B * T;
    fsc_gpt *m = NULL;
    fsc_gpt_acts *a = NULL;
    float *params = NULL, *grads = NULL, *host = NULL;
    int32_t *tok = malloc(N * sizeof *tok);
    double *t = calloc((size_t)L + 2, sizeof *t), *best = calloc((size_t)L + 2, sizeof *best);
    uint64_t *c = calloc((size_t)L, sizeof *c);
    fsc_status s = tok && t && best && c ? FSC_OK : fsc_error(FSC_ERR_NOMEM, "balance_by_time: out of memory");
    if (s == FSC_OK) s = fsc_gpt_create(dev, cfg, &m);
    if (s == FSC_OK) s = fsc_device_alloc(dev, FSC_TAG_PARAMS, P * sizeof(float), (void **)&params);
    if (s == FSC_OK) s = fsc_device_calloc(dev, FSC_TAG_GRADS, P * sizeof(float), (void **)&grads);
    if (s == FSC_OK) { /* the keyed initial values, one tensor at a time */
        fsc_gpt_bind_flat(m, params, grads);
        for (int i = 0; i < m->n_tensors && s == FSC_OK; i++) {
            float *h = realloc(host, m->info[i].numel * sizeof(float));
            if (!h) s = fsc_error(FSC_ERR_NOMEM, "balance_by_time: out of memory");
            else host = h;
            if (s == FSC_OK) fsc_gpt_init_values(cfg, 1, i, 0, m->info[i].numel, host);
            if (s == FSC_OK) s = fsc_device_upload(dev, m->param[i], host, m->info[i].numel * sizeof(float));
        }
    }
    fsc_gpt_acts_opts o = { .B = B, .T = T, .first = 0, .last = L + 1 };
    if (s == FSC_OK) s = fsc_gpt_acts_create(m, &o, &a);
    for (size_t i = 0; i < N && tok; i++) tok[i] = (int32_t)((i * 7919u + 13u) % (size_t)cfg->vocab);
    if (s == FSC_OK) s = fsc_gpt_acts_set_batch(a, tok, tok);
    timer tm = { dev, t, 0, FSC_OK };
    fsc_gpt_hooks h = { &tm, t_start, t_stop, t_start, t_stop };
    for (int r = 0; r <= repeats && s == FSC_OK; r++) { /* r = 0 warms up */
        memset(t, 0, ((size_t)L + 2) * sizeof *t);
        s = fsc_gpt_forward(m, a, &h, NULL);
        if (s == FSC_OK) s = fsc_gpt_backward(m, a, &h, 1.0f / (float)N);
        for (int l = 0; l < L + 2 && r > 0; l++)
            if (r == 1 || t[l] < best[l]) best[l] = t[l];
    }
    if (s == FSC_OK) {
        for (int b = 0; b < L; b++) c[b] = (uint64_t)(best[b + 1] * 1e9) + 1;
        c[0] += (uint64_t)(best[0] * 1e9);
        c[L - 1] += (uint64_t)(best[L + 1] * 1e9);
        s = partition(c, L, pp, out);
    }
    fsc_gpt_acts_free(a);
    if (params) fsc_device_release(dev, params);
    if (grads) fsc_device_release(dev, grads);
    fsc_gpt_free(m);
    free(host);
    free(tok);
    free(t);
    free(best);
    free(c);
    return s;
}
