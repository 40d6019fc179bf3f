/* Built-in layers without sequence structure: linear, GELU, LayerNorm, RMSNorm and the squared-error loss, each
 * over the nn.h modules. Records hold only what the module saves besides the layer's input (the model keeps the
 * input). Not here: embeddings, MLPs, attention and the LM head (transformer.c). */
#include "layers_impl.h"
#include "tp_layers.h"

/* ---- linear ---- */
typedef struct {
    fsc_layer l;
    fsc_linear_opts o;
} linear_layer;

static size_t rows_of(int rows) { return rows > 0 ? (size_t)rows : 1; }

static fsc_status lin_fwd(const fsc_layer *l, const fsc_layer_call *c, float *out, const void *in) {
    const linear_layer *y = (const linear_layer *)l;
    return fsc_linear_forward(c->dev, out, NULL, in, c->param[0], y->o.bias ? c->param[1] : NULL,
                              (size_t)c->B * rows_of(y->o.rows), y->o.in, y->o.out, y->o.out_in);
}

static fsc_status lin_bwd(const fsc_layer *l, const fsc_layer_call *c, float *dinp, const float *dout,
                          const void *in) {
    const linear_layer *y = (const linear_layer *)l;
    fsc_linear_rec r = { .inp = in, .N = (size_t)c->B * rows_of(y->o.rows), .C = y->o.in, .OC = y->o.out,
                         .w_out_in = y->o.out_in };
    return fsc_linear_backward(c->dev, dinp, c->grad[0], y->o.bias ? c->grad[1] : NULL, &r, dout, c->param[0], 0.0f,
                               1.0f);
}

static void lin_config(const fsc_layer *l, char *buf, size_t cap) {
    const linear_layer *y = (const linear_layer *)l;
    snprintf(buf, cap, "{\"rows\":%d,\"in\":%d,\"out\":%d,\"bias\":%d,\"out_in\":%d}", y->o.rows, y->o.in, y->o.out,
             y->o.bias, y->o.out_in);
}

static const fsc_layer_ops lin_ops = { .forward = lin_fwd, .backward = lin_bwd, .config = lin_config, .split = 1 };

fsc_linear_opts fsc_linear_opts_default(int in, int out) {
    return (fsc_linear_opts){ .rows = 1, .in = in, .out = out, .bias = 1, .out_in = 0 };
}

fsc_status fsc_layer_linear(const fsc_linear_opts *o, fsc_layer **out) {
    FSC_CHECK_ARG(out);
    *out = NULL; /* also after a failure, options NULL included */
    FSC_CHECK_ARG(o);
    if (!o || o->in < 1 || o->out < 1 || o->rows < 0)
        return fsc_error(FSC_ERR_INVALID, "linear layer: need in, out >= 1 and rows >= 0");
    if (o->tp || o->tp_mode) return fsc_tp_layer_linear(o, out); /* tp_basic.c */
    FSC_TRY(layer_new(sizeof(linear_layer), "linear", &lin_ops, out));
    linear_layer *y = (linear_layer *)*out;
    y->o = *o;
    y->o.rows = (int)rows_of(o->rows);
    y->l.in_bytes = rows_of(o->rows) * (size_t)o->in * sizeof(float);
    y->l.out_floats = rows_of(o->rows) * (size_t)o->out;
    FSC_TRY(layer_param(out, "weight", o->out_in ? o->out : o->in, o->out_in ? o->in : o->out,
                        fsc_init_normal(LAYER_STD)));
    if (o->bias) FSC_TRY(layer_param(out, "bias", o->out, 0, fsc_init_const(0.0f)));
    return FSC_OK;
}

/* ---- GELU ---- */
static fsc_status gelu_fwd(const fsc_layer *l, const fsc_layer_call *c, float *out, const void *in) {
    return fsc_gelu_forward(c->dev, out, NULL, in, (size_t)c->B * l->out_floats);
}

static fsc_status gelu_bwd(const fsc_layer *l, const fsc_layer_call *c, float *dinp, const float *dout,
                           const void *in) {
    if (!dinp) return FSC_OK;
    fsc_gelu_rec r = { .inp = in, .n = (size_t)c->B * l->out_floats };
    return fsc_gelu_backward(c->dev, dinp, &r, dout);
}

static void gelu_config(const fsc_layer *l, char *buf, size_t cap) { snprintf(buf, cap, "{\"n\":%zu}", l->out_floats); }

static const fsc_layer_ops gelu_ops = { .forward = gelu_fwd, .backward = gelu_bwd, .config = gelu_config };

fsc_status fsc_layer_gelu(size_t n, fsc_layer **out) {
    FSC_CHECK_ARG(out);
    *out = NULL; /* also after a failure */
    if (n < 1 || n > ((size_t)1 << 30))
        return fsc_error(FSC_ERR_INVALID, "gelu layer: n = %zu; need 1 <= n <= 2^30 (floats per sample)", n);
    FSC_TRY(layer_new(sizeof(fsc_layer), "gelu", &gelu_ops, out));
    (*out)->in_bytes = n * sizeof(float);
    (*out)->out_floats = n;
    return FSC_OK;
}

/* ---- LayerNorm and RMSNorm: the record holds mean and rstd (N each) ---- */
typedef struct {
    fsc_layer l;
    int rows, C;
    float eps;       /* RMSNorm */
} norm_layer;

static size_t norm_rows(const fsc_layer_call *c, const norm_layer *y) { return (size_t)c->B * (size_t)y->rows; }
static size_t ln_rec(const fsc_layer *l, int B) {
    return 2 * r256((size_t)B * ((const norm_layer *)l)->rows * sizeof(float));
}

static fsc_status ln_fwd(const fsc_layer *l, const fsc_layer_call *c, float *out, const void *in) {
    const norm_layer *y = (const norm_layer *)l;
    const size_t N = norm_rows(c, y);
    float *mean = c->rec, *rstd = (float *)((char *)c->rec + r256(N * sizeof(float)));
    return fsc_layernorm_forward(c->dev, out, NULL, mean, rstd, in, c->param[0], c->param[1], N, y->C);
}

static fsc_status ln_bwd(const fsc_layer *l, const fsc_layer_call *c, float *dinp, const float *dout,
                         const void *in) {
    const norm_layer *y = (const norm_layer *)l;
    const size_t N = norm_rows(c, y);
    fsc_layernorm_rec r = { .inp = in, .mean = c->rec, .rstd = (float *)((char *)c->rec + r256(N * sizeof(float))),
                            .N = N, .C = y->C };
    if (!dinp && !c->grad[0]) return FSC_OK; /* the gradients: all bound, or none (the split's input part) */
    if (dinp) FSC_TRY(fsc_device_memset(c->dev, dinp, 0, N * (size_t)y->C * sizeof(float)));
    return fsc_layernorm_backward(c->dev, dinp, c->grad[0], c->grad[1], &r, dout, c->param[0]); /* either half */
}

static void norm_config(const fsc_layer *l, char *buf, size_t cap) {
    const norm_layer *y = (const norm_layer *)l;
    snprintf(buf, cap, "{\"rows\":%d,\"C\":%d,\"eps\":%.9g}", y->rows, y->C, (double)y->eps);
}

static const fsc_layer_ops ln_ops = { .rec_bytes = ln_rec, .forward = ln_fwd,
                                      .backward = ln_bwd, .config = norm_config, .split = 1 };

static fsc_status norm_new(int rows, int C, const char *kind, const fsc_layer_ops *ops, fsc_layer **out) {
    if (rows < 0 || C < 1) return fsc_error(FSC_ERR_INVALID, "%s layer: need C >= 1 and rows >= 0", kind);
    FSC_TRY(layer_new(sizeof(norm_layer), kind, ops, out));
    norm_layer *y = (norm_layer *)*out;
    y->rows = (int)rows_of(rows), y->C = C;
    y->l.in_bytes = (size_t)y->rows * C * sizeof(float);
    y->l.out_floats = (size_t)y->rows * C;
    return layer_param(out, "weight", C, 0, fsc_init_const(1.0f));
}

fsc_status fsc_layer_layernorm(int rows, int C, fsc_layer **out) {
    FSC_CHECK_ARG(out);
    *out = NULL; /* also after a failure */
    FSC_TRY(norm_new(rows, C, "layernorm", &ln_ops, out));
    ((norm_layer *)*out)->eps = 1e-5f;
    return layer_param(out, "bias", C, 0, fsc_init_const(0.0f));
}

static size_t rms_rec(const fsc_layer *l, int B) { return r256((size_t)B * ((const norm_layer *)l)->rows * sizeof(float)); }

static fsc_status rms_fwd(const fsc_layer *l, const fsc_layer_call *c, float *out, const void *in) {
    const norm_layer *y = (const norm_layer *)l;
    return fsc_rmsnorm_forward(c->dev, out, NULL, c->rec, in, c->param[0], norm_rows(c, y), y->C, y->eps);
}

static fsc_status rms_bwd(const fsc_layer *l, const fsc_layer_call *c, float *dinp, const float *dout,
                          const void *in) {
    const norm_layer *y = (const norm_layer *)l;
    const size_t N = norm_rows(c, y);
    fsc_rmsnorm_rec r = { .inp = in, .rstd = c->rec, .N = N, .C = y->C };
    if (!dinp && !c->grad[0]) return FSC_OK;
    if (dinp) FSC_TRY(fsc_device_memset(c->dev, dinp, 0, N * (size_t)y->C * sizeof(float)));
    return fsc_rmsnorm_backward(c->dev, dinp, c->grad[0], &r, dout, c->param[0]); /* either half alone, or both */
}

static const fsc_layer_ops rms_ops = { .rec_bytes = rms_rec, .forward = rms_fwd,
                                       .backward = rms_bwd, .config = norm_config, .split = 1 };

fsc_status fsc_layer_rmsnorm(int rows, int C, float eps, fsc_layer **out) {
    FSC_CHECK_ARG(out);
    *out = NULL; /* also after a failure */
    if (!(eps > 0.0f) || !isfinite(eps)) return fsc_error(FSC_ERR_INVALID, "rmsnorm layer: eps must be > 0 and finite");
    FSC_TRY(norm_new(rows, C, "rmsnorm", &rms_ops, out));
    ((norm_layer *)*out)->eps = eps;
    return FSC_OK;
}

/* ---- squared error: one loss value per sample (the sum over its n outputs), n loss terms; the record keeps the
 * predictions (its input) for fsc_engine_predict ---- */
static size_t pred_rec(const fsc_layer *l, int B) { return (size_t)B * l->in_bytes; }

static const float *pred_logits(const fsc_layer *l, const void *rec, int B, int *vocab) {
    (void)B;
    *vocab = (int)(l->in_bytes / sizeof(float)) / l->loss_terms;
    return rec;
}

static fsc_status mse_fwd(const fsc_layer *l, const fsc_layer_call *c, float *out, const void *in) {
    FSC_TRY(fsc_device_copy(c->dev, c->rec, in, (size_t)c->B * l->in_bytes));
    return fsc_mse_forward(c->dev, out, NULL, in, c->target, (size_t)c->B, l->loss_terms);
}

static fsc_status mse_bwd(const fsc_layer *l, const fsc_layer_call *c, float *dinp, const float *dout,
                          const void *in) {
    (void)dout;
    if (!dinp) return FSC_OK;
    fsc_mse_rec r = { .pred = in, .target = c->target, .N = (size_t)c->B, .C = l->loss_terms };
    return fsc_mse_backward(c->dev, dinp, &r, c->dscale);
}

static void mse_config(const fsc_layer *l, char *buf, size_t cap) { snprintf(buf, cap, "{\"n\":%d}", l->loss_terms); }

static const fsc_layer_ops mse_ops = { .rec_bytes = pred_rec, .forward = mse_fwd, .backward = mse_bwd,
                                       .config = mse_config, .logits = pred_logits };

fsc_status fsc_layer_mse(size_t n, fsc_layer **out) {
    FSC_CHECK_ARG(out);
    *out = NULL; /* also after a failure */
    if (n < 1 || n > (1u << 30)) return fsc_error(FSC_ERR_INVALID, "mse layer: need 1 <= n <= 2^30");
    FSC_TRY(layer_new(sizeof(fsc_layer), "mse", &mse_ops, out));
    (*out)->in_bytes = n * sizeof(float);
    (*out)->out_floats = 1;
    (*out)->loss_terms = (int)n;
    (*out)->target_bytes = n * sizeof(float);
    return FSC_OK;
}

/* ---- softmax cross entropy over `classes` logits per sample, an int32 class per sample, one loss term; the record
 * keeps the logits (its input) for fsc_engine_predict ---- */
static fsc_status xent_fwd(const fsc_layer *l, const fsc_layer_call *c, float *out, const void *in) {
    const int K = (int)(l->in_bytes / sizeof(float));
    FSC_TRY(fsc_device_copy(c->dev, c->rec, in, (size_t)c->B * l->in_bytes));
    return fsc_xent_forward(c->dev, out, NULL, in, c->target, (size_t)c->B, K, K);
}

static fsc_status xent_bwd(const fsc_layer *l, const fsc_layer_call *c, float *dinp, const float *dout,
                           const void *in) {
    (void)dout;
    if (!dinp) return FSC_OK;
    const int K = (int)(l->in_bytes / sizeof(float));
    fsc_xent_rec r = { .logits = in, .targets = c->target, .N = (size_t)c->B, .V = K, .ld = K };
    return fsc_xent_backward(c->dev, dinp, &r, c->dscale);
}

static fsc_status xent_check(const fsc_layer *l, const void *host, int B) {
    const int K = (int)(l->in_bytes / sizeof(float));
    const int32_t *t = host;
    for (int i = 0; i < B; i++)
        if (t[i] < 0 || t[i] >= K)
            return fsc_error(FSC_ERR_INVALID, "xent layer: sample %d has class %d, not in [0, %d)", i, (int)t[i], K);
    return FSC_OK;
}

static void xent_config(const fsc_layer *l, char *buf, size_t cap) {
    snprintf(buf, cap, "{\"classes\":%d}", (int)(l->in_bytes / sizeof(float)));
}

static const fsc_layer_ops xent_ops = { .rec_bytes = pred_rec, .forward = xent_fwd, .backward = xent_bwd,
                                        .config = xent_config, .check_target = xent_check,
                                        .logits = pred_logits };

fsc_status fsc_layer_xent(int classes, fsc_layer **out) {
    FSC_CHECK_ARG(out);
    *out = NULL;
    if (classes < 2 || classes > (1 << 24))
        return fsc_error(FSC_ERR_INVALID, "xent layer: need 2 <= classes <= 2^24, not %d", classes);
    FSC_TRY(layer_new(sizeof(fsc_layer), "xent", &xent_ops, out));
    (*out)->in_bytes = (size_t)classes * sizeof(float);
    (*out)->out_floats = 1;
    (*out)->loss_terms = 1;
    (*out)->target_bytes = sizeof(int32_t);
    return FSC_OK;
}
