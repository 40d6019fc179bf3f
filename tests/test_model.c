/* A model that is not the GPT, written in this file against the public interface only (model.h, nn.h): a
 * tied-weight MLP regressor on float features, trained with every strategy, a pipeline and checkpoints.
 *
 * The model: K + 2 layers on inputs x (B, D) and targets y (B, D):
 *   layer 0       h0 = gelu(x @ in.weight + in.bias)              in.weight (D, H), in.bias (H)
 *   layer k       hk = gelu(h(k-1) @ hidden.{k-1}.weight + bias)  (H, H), (H)       for k = 1 .. K
 *   layer K + 1   pred = hK @ in.weight^T + out.bias, loss = sum over elements of (pred - y)^2
 * in.weight is tied: owned by layer 0 and used by the output layer, whose gradient for it goes into the
 * model's tied-gradient buffer and is added by layer 0's backward before its own (model.h's contract).
 * The loss has D terms per sample, so the engine reports the mean squared error over the global batch.
 *
 * Oracles: FSDP (full_shard, shard_grad_op, hybrid_shard, no_shard, each wrap policy), ZeRO-1 and ZeRO-2 on
 * 4 ranks equal DDP on 4 ranks bit for bit (every step's loss, the final parameters); DDP on 4 ranks equals
 * one rank accumulating the 4 ranks' micro-batches to float rounding (a bias gradient sums its rows across
 * micro-batches in another association than the reduction over ranks); a 2-stage pipeline over 2 data ranks
 * (GPipe and 1F1B, the tied weight across the stages) equals DDP on 2 ranks accumulating the same
 * micro-batches bit for bit; a checkpoint written by FSDP on 4 ranks
 * loads into DDP on 2 ranks with the same parameters, and continues bit for bit as FSDP on 2 ranks does, while
 * FSDP on 4 ranks resumed from it equals an uninterrupted run. Training lowers the loss. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "modeltest.h"

/* ---- the model -------------------------------------------------------------------------------------- */

#define MLP_MAXK 4
#define MLP_MAXT (3 + 2 * MLP_MAXK)

typedef struct {
    int D, H, K;
    fsc_device *dev;
    fsc_param_info info[MLP_MAXT];
    float *param[MLP_MAXT], *grad[MLP_MAXT], *tied[MLP_MAXT];
    fsc_model m;
} mlp;

typedef struct {
    int B, first, last;
    float *mem;                   /* one device allocation for everything below */
    size_t bytes;
    float *x;                     /* input of `first`: (B, D) features (first 0) or (B, H) */
    float *y, *pred, *gpred;      /* (B, D) with the output layer */
    float *loss;                  /* (B) */
    float *z[MLP_MAXK + 1], *a[MLP_MAXK + 1], *da[MLP_MAXK + 1]; /* (B, H) per hidden-type layer */
    float *dz, *gin;              /* (B, H) scratch; the gradient w.r.t. the input of first (> 0) */
    fsc_linear_rec lr[MLP_MAXK + 2];
    fsc_gelu_rec gr[MLP_MAXK + 1];
    fsc_mse_rec mr;
} mlp_acts;

static int out_layer(const mlp *n) { return n->K + 1; }
static int w_of(int l) { return l == 0 ? 0 : 2 * l; }  /* the weight of hidden-type layer l */
static int bias_out(const mlp *n) { return 2 + 2 * n->K; }

static fsc_status m_acts_create(void *ctx, const fsc_model_acts_opts *o, fsc_model_acts **out) {
    mlp *n = ctx;
    if (o->checkpoint) return fsc_error(FSC_ERR_UNSUPPORTED, "mlp: no layer checkpointing");
    mlp_acts *a = calloc(1, sizeof *a);
    if (!a) return fsc_error(FSC_ERR_NOMEM, "mlp: out of memory");
    a->B = o->B, a->first = o->first, a->last = o->last;
    const size_t BD = (size_t)o->B * n->D, BH = (size_t)o->B * n->H;
    const int has_out = o->last == out_layer(n), hid_last = has_out ? n->K : o->last;
    size_t f = o->first == 0 ? BD : BH;                                        /* x */
    if (has_out) f += 3 * BD + (size_t)o->B;                                   /* y, pred, gpred, loss */
    for (int l = o->first; l <= hid_last; l++) f += 3 * BH;                    /* z, a, da */
    f += 2 * BH;                                                               /* dz, gin */
    a->bytes = f * sizeof(float);
    fsc_status s = fsc_device_calloc(n->dev, FSC_TAG_ACTS, a->bytes, (void **)&a->mem);
    if (s != FSC_OK) {
        free(a);
        return s;
    }
    float *p = a->mem;
    a->x = p, p += o->first == 0 ? BD : BH;
    if (has_out) a->y = p, p += BD, a->pred = p, p += BD, a->gpred = p, p += BD, a->loss = p, p += o->B;
    for (int l = o->first; l <= hid_last; l++) a->z[l] = p, p += BH, a->a[l] = p, p += BH, a->da[l] = p, p += BH;
    a->dz = p, p += BH;
    a->gin = p;
    *out = (fsc_model_acts *)a;
    return FSC_OK;
}

static void m_acts_free(void *ctx, fsc_model_acts *am) {
    mlp *n = ctx;
    mlp_acts *a = (mlp_acts *)am;
    if (a) fsc_device_release(n->dev, a->mem);
    free(a);
}

static size_t m_acts_bytes(void *ctx, const fsc_model_acts *a) {
    (void)ctx;
    return ((const mlp_acts *)a)->bytes;
}

static fsc_status m_set_batch(void *ctx, fsc_model_acts *am, const void *inputs, const void *targets) {
    mlp *n = ctx;
    mlp_acts *a = (mlp_acts *)am;
    const size_t BD = (size_t)a->B * n->D * sizeof(float);
    if (a->first == 0) FSC_TRY(fsc_device_upload(n->dev, a->x, inputs, BD));
    if (a->last == out_layer(n)) FSC_TRY(fsc_device_upload(n->dev, a->y, targets, BD));
    return FSC_OK;
}

static float *m_stream(void *ctx, fsc_model_acts *am, fsc_stream which) {
    mlp *n = ctx;
    mlp_acts *a = (mlp_acts *)am;
    const int inner_last = a->last < out_layer(n);
    switch (which) {
    case FSC_STREAM_INPUT: return a->first > 0 ? a->x : NULL;
    case FSC_STREAM_OUTPUT: return inner_last ? a->a[a->last] : NULL;
    case FSC_STREAM_GRAD_OUTPUT: return inner_last ? a->da[a->last] : NULL;
    default: return a->first > 0 ? a->gin : NULL;
    }
}

static size_t m_stream_floats(void *ctx, int B) { return (size_t)B * ((mlp *)ctx)->H; }

static fsc_status hook(fsc_status (*f)(void *, int), void *ctx, int l) { return f ? f(ctx, l) : FSC_OK; }

static fsc_status m_forward(void *ctx, fsc_model_acts *am, const fsc_model_hooks *h, double *loss_sum) {
    mlp *n = ctx;
    mlp_acts *a = (mlp_acts *)am;
    const size_t B = (size_t)a->B;
    if (loss_sum) *loss_sum = 0;
    for (int l = a->first; l <= a->last; l++) {
        FSC_TRY(hook(h->pre_forward, h->ctx, l));
        const float *in = l == a->first ? a->x : a->a[l - 1];
        if (l < out_layer(n)) {
            int C = l == 0 ? n->D : n->H, w = w_of(l);
            FSC_TRY(fsc_linear_forward(n->dev, a->z[l], &a->lr[l], in, n->param[w], n->param[w + 1], B, C, n->H, 0));
            FSC_TRY(fsc_gelu_forward(n->dev, a->a[l], &a->gr[l], a->z[l], B * n->H));
        } else { /* the tied output projection: in.weight (D, H) read as (out, in) */
            FSC_TRY(fsc_linear_forward(n->dev, a->pred, &a->lr[l], in, n->param[0], n->param[bias_out(n)], B, n->H,
                                       n->D, 1));
            FSC_TRY(fsc_mse_forward(n->dev, a->loss, &a->mr, a->pred, a->y, B, n->D));
            if (loss_sum) {
                float *host = malloc(B * sizeof(float));
                if (!host) return fsc_error(FSC_ERR_NOMEM, "mlp: out of memory");
                fsc_status s = fsc_device_download(n->dev, host, a->loss, B * sizeof(float));
                for (size_t i = 0; i < B; i++) *loss_sum += host[i];
                free(host);
                FSC_TRY(s);
            }
        }
        FSC_TRY(hook(h->post_forward, h->ctx, l));
    }
    return FSC_OK;
}

static fsc_status m_backward(void *ctx, fsc_model_acts *am, const fsc_model_hooks *h, float dscale) {
    mlp *n = ctx;
    mlp_acts *a = (mlp_acts *)am;
    for (int l = a->last; l >= a->first; l--) {
        FSC_TRY(hook(h->pre_backward, h->ctx, l));
        float *dinp = l == a->first ? (l > 0 ? a->gin : NULL) : a->da[l - 1];
        if (l == out_layer(n)) { /* in.weight's gradient into the tied buffer (overwritten) */
            FSC_TRY(fsc_mse_backward(n->dev, a->gpred, &a->mr, dscale));
            FSC_TRY(fsc_linear_backward(n->dev, dinp, n->tied[0], n->grad[bias_out(n)], &a->lr[l], a->gpred,
                                        n->param[0], 0.0f, 0.0f));
        } else {
            const int w = w_of(l);
            FSC_TRY(fsc_gelu_backward(n->dev, a->dz, &a->gr[l], a->da[l]));
            if (l == 0) /* the owner adds its users' part first */
                FSC_TRY(fsc_residual_backward(n->dev, n->grad[0], NULL, n->tied[0], n->info[0].numel));
            FSC_TRY(fsc_linear_backward(n->dev, dinp, n->grad[w], n->grad[w + 1], &a->lr[l], a->dz, n->param[w],
                                        0.0f, 1.0f));
        }
        FSC_TRY(hook(h->post_backward, h->ctx, l));
    }
    return FSC_OK;
}

static void m_init(void *ctx, uint64_t seed, int i, size_t first, size_t count, float *out) {
    mlp *n = ctx;
    const fsc_param_info *p = &n->info[i];
    float std = p->ndim == 1 ? 0.1f : 1.0f / sqrtf((float)p->shape[0]); /* weights: 1 / sqrt(fan in) */
    fsc_rng_fill_normal(out, count, seed, p->name, first, 0.0f, std);
}

static void m_config(void *ctx, char *buf, size_t cap) {
    mlp *n = ctx;
    snprintf(buf, cap, "{\"kind\":\"tied_mlp\",\"D\":%d,\"H\":%d,\"K\":%d}", n->D, n->H, n->K);
}

static const fsc_model_ops mlp_ops = {
    .acts_create = m_acts_create, .acts_free = m_acts_free, .acts_bytes = m_acts_bytes, .set_batch = m_set_batch,
    .stream = m_stream, .stream_floats = m_stream_floats, .forward = m_forward, .backward = m_backward,
    .init_values = m_init, .config = m_config,
};

static void set_info(fsc_param_info *p, const char *name, int ndim, int64_t d0, int64_t d1, int layer) {
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = ndim;
    p->shape[0] = d0;
    p->shape[1] = ndim == 2 ? d1 : 0;
    p->numel = (size_t)d0 * (size_t)(ndim == 2 ? d1 : 1);
    p->layer = layer;
    p->expert = -1;
}

/* Declare the model on dev (param/grad are the engine's to set). */
static fsc_status mlp_init(mlp *n, fsc_device *dev, int D, int H, int K) {
    memset(n, 0, sizeof *n);
    n->D = D, n->H = H, n->K = K, n->dev = dev;
    char name[64];
    set_info(&n->info[0], "in.weight", 2, D, H, 0);
    n->info[0].nusers = 1;
    n->info[0].users[0] = K + 1;
    set_info(&n->info[1], "in.bias", 1, H, 0, 0);
    for (int k = 0; k < K; k++) {
        snprintf(name, sizeof name, "hidden.%d.weight", k);
        set_info(&n->info[2 + 2 * k], name, 2, H, H, k + 1);
        snprintf(name, sizeof name, "hidden.%d.bias", k);
        set_info(&n->info[3 + 2 * k], name, 1, H, 0, k + 1);
    }
    set_info(&n->info[bias_out(n)], "out.bias", 1, D, 0, K + 1);
    FSC_TRY(fsc_device_calloc(dev, FSC_TAG_GRADS, (size_t)D * H * sizeof(float), (void **)&n->tied[0]));
    n->m = (fsc_model){ .n_layers = K + 2, .n_tensors = 3 + 2 * K, .info = n->info, .param = n->param,
                        .grad = n->grad, .tied_grad = n->tied, .sample_input_bytes = (size_t)D * sizeof(float),
                        .sample_target_bytes = (size_t)D * sizeof(float), .loss_terms = D, .ops = &mlp_ops, .ctx = n };
    return FSC_OK;
}

static void mlp_release(mlp *n) { fsc_device_release(n->dev, n->tied[0]); }

/* ---- training runs on the simulated cluster ------------------------------------------------------------ */

enum { D_ = 5, H_ = 7, K_ = 2, GB = 8, MAXSTEPS = 4 };

typedef struct {
    int world;
    fsc_parallel_opts po;
    int steps, first_step;     /* train steps [first_step, first_step + steps) of the data */
    const char *load;          /* a checkpoint to start from */
    const char *save_dir;      /* save after the last step as step first_step + steps */
    double loss[MAXSTEPS];
    size_t P;
    float *full;               /* (P) after loading (when load) */
    float *after;              /* (P) after training */
} job;

/* sample i of the synthetic data set: x in [-1, 1), y a smooth function of x */
static void sample(size_t i, float *x, float *y) {
    for (int d = 0; d < D_; d++) {
        uint64_t h = (i * 131 + (size_t)d) * 0x9E3779B97F4A7C15ull;
        x[d] = (float)((h >> 40) % 2000) / 1000.0f - 1.0f;
    }
    for (int d = 0; d < D_; d++) y[d] = sinf(2.0f * x[d]) * 0.5f + 0.25f * x[(d + 1) % D_];
}

static fsc_status job_rank(fsc_rank *r, void *arg) {
    job *j = arg;
    mlp n;
    FSC_TRY(mlp_init(&n, r->dev, D_, H_, K_));
    fsc_optim_config oc = { .kind = FSC_OPT_ADAMW, .lr = 2e-2f, .weight_decay = 0.01f, .beta1 = 0.9f,
                            .beta2 = 0.999f, .eps = 1e-8f };
    fsc_engine *e = NULL;
    fsc_status s = fsc_engine_create_model(r, &n.m, &j->po, &oc, 99, &e);
    const int dp = s == FSC_OK ? fsc_engine_layout(e)->dp : 1, di = s == FSC_OK ? fsc_engine_layout(e)->data : 0;
    const int lb = GB / dp;
    float *x = malloc((size_t)lb * D_ * sizeof(float)), *y = malloc((size_t)lb * D_ * sizeof(float));
    if (s == FSC_OK && j->load) s = fsc_ckpt_load(e, j->load, NULL);
    if (s == FSC_OK && j->load) s = fsc_engine_full_params(e, r->rank == 0 ? j->full : NULL);
    for (int st = j->first_step; st < j->first_step + j->steps && s == FSC_OK; st++) {
        for (int i = 0; i < lb; i++) sample((size_t)st * GB + (size_t)di * lb + i, x + i * D_, y + i * D_);
        fsc_step_info info;
        s = fsc_engine_step_model(e, x, y, lb, GB, &info);
        if (s == FSC_OK && r->rank == 0) j->loss[st - j->first_step] = info.loss;
    }
    if (s == FSC_OK) s = fsc_engine_full_params(e, r->rank == 0 ? j->after : NULL);
    if (s == FSC_OK && j->save_dir) s = fsc_ckpt_save(e, j->save_dir, j->first_step + j->steps, NULL);
    free(x);
    free(y);
    fsc_engine_free(e);
    mlp_release(&n);
    return s;
}

static size_t num_params(void) { return (size_t)D_ * H_ + H_ + (size_t)K_ * (H_ * H_ + H_) + D_; }

static job make(int world, fsc_parallel_kind kind) {
    job j;
    memset(&j, 0, sizeof j);
    j.world = world;
    j.po = mt_opts(kind, 0.5f);
    j.steps = 3;
    j.P = num_params();
    return j;
}

static void train(job *j) {
    free(j->full);
    j->full = calloc(j->P, sizeof(float));
    mt_train(j->world, 30, j->P, &j->after, job_rank, j);
}

static void done(job *j) {
    free(j->after);
    free(j->full);
    j->after = j->full = NULL;
}

static void assert_same(const job *a, const job *b, const char *what) {
    mt_assert_same(a->loss, b->loss, a->steps, a->after, b->after, a->P, what);
}

/* ---- tests ------------------------------------------------------------------------------------------- */

static void test_declaration_checked(void **st) {
    (void)st;
    mlp n;
    fsc_device *dev = NULL;
    assert_ok(fsc_device_create("cpu", NULL, &dev));
    assert_ok(mlp_init(&n, dev, D_, H_, K_));
    assert_ok(fsc_model_validate(&n.m));
    assert_int_equal(fsc_model_num_params(&n.m), num_params());
    assert_int_equal(fsc_model_tensor_index(&n.m, "hidden.1.bias"), 5);
    n.info[2].layer = 2; /* hidden.0.weight (layer 2) before hidden.0.bias (layer 0): out of order */
    n.info[3].layer = 0;
    assert_err(fsc_model_validate(&n.m), FSC_ERR_INVALID, "listed by owning layer");
    n.info[2].layer = 1, n.info[3].layer = 1;
    n.m.tied_grad = NULL; /* a tied tensor without a table of tied-gradient buffers */
    assert_err(fsc_model_validate(&n.m), FSC_ERR_INVALID, "tied-gradient buffers");
    n.m.tied_grad = n.tied;
    mlp_release(&n);
    fsc_device_free(dev);
}

/* One engine a model: a second engine made on a model another engine holds is refused on every rank (it pointed
 * the model's parameter tables at its own buffers, and the first engine then trained them, freed with the second:
 * a use after free under ASan), also on the model a built engine (the GPT's) owns; once the first is freed,
 * another engine takes the model and steps. */
static fsc_status one_engine_rank(fsc_rank *r, void *arg) {
    (void)arg;
    mlp n;
    FSC_TRY(mlp_init(&n, r->dev, D_, H_, K_));
    fsc_optim_config oc = fsc_optim_config_default();
    fsc_parallel_opts po = mt_opts(FSC_PAR_DDP, 0.0f);
    fsc_engine *e = NULL, *e2 = NULL;
    fsc_status s = fsc_engine_create_model(r, &n.m, &po, &oc, 99, &e);
    if (s == FSC_OK && fsc_engine_create_model(r, &n.m, &po, &oc, 99, &e2) != FSC_ERR_STATE)
        s = fsc_error(FSC_ERR_INTERNAL, "a second engine on a bound model was not refused as FSC_ERR_STATE");
    if (s == FSC_OK && (e2 || !strstr(fsc_last_error(), "bound to another engine")))
        s = fsc_error(FSC_ERR_INTERNAL, "the refusal made an engine or did not say why");
    fsc_engine_free(e);
    e = NULL;
    if (s == FSC_OK) s = fsc_engine_create_model(r, &n.m, &po, &oc, 99, &e); /* free again */
    /* a built engine's model (the GPT's, which the engine owns) is bound as well */
    fsc_gpt_config gc = { .layers = 1, .dim = 8, .heads = 2, .seq = 4, .vocab = 16 };
    fsc_engine *g = NULL, *g2 = NULL;
    if (s == FSC_OK) s = fsc_engine_create(r, &gc, &po, &oc, 7, &g);
    if (s == FSC_OK && fsc_engine_create_model(r, fsc_engine_model(g), &po, &oc, 7, &g2) != FSC_ERR_STATE)
        s = fsc_error(FSC_ERR_INTERNAL, "an engine on a GPT engine's own model was not refused as FSC_ERR_STATE");
    fsc_engine_free(g2);
    fsc_engine_free(g);
    const int lb = GB / r->world;
    float x[GB * D_], y[GB * D_];
    for (int i = 0; i < lb; i++) sample((size_t)r->rank * lb + i, x + i * D_, y + i * D_);
    fsc_step_info info;
    if (s == FSC_OK) s = fsc_engine_step_model(e, x, y, lb, GB, &info);
    fsc_engine_free(e);
    mlp_release(&n);
    return s;
}

static void test_one_engine_a_model(void **st) {
    (void)st;
    fsc_cluster_opts co = { .world = 2, .device = "cpu", .timeout_s = 30 };
    assert_ok(fsc_cluster_run(&co, one_engine_rank, NULL));
}

static void test_strategies_equal_ddp(void **st) {
    (void)st;
    job ddp = make(4, FSC_PAR_DDP);
    train(&ddp);
    assert_true(ddp.loss[2] < ddp.loss[0]); /* it learns */
    const mt_strategy cases[] = {
        { FSC_PAR_FSDP, FSC_SHARD_FULL, FSC_WRAP_BLOCK, 0, "fsdp full_shard" },
        { FSC_PAR_FSDP, FSC_SHARD_GRAD_OP, FSC_WRAP_BLOCK, 0, "fsdp shard_grad_op" },
        { FSC_PAR_FSDP, FSC_SHARD_HYBRID, FSC_WRAP_BLOCK, 0, "fsdp hybrid_shard" },
        { FSC_PAR_FSDP, FSC_SHARD_NONE, FSC_WRAP_BLOCK, 0, "fsdp no_shard" },
        { FSC_PAR_FSDP, FSC_SHARD_FULL, FSC_WRAP_MODEL, 0, "fsdp full_shard, one unit" },
        { FSC_PAR_FSDP, FSC_SHARD_FULL, FSC_WRAP_MIN_PARAMS, 0, "fsdp full_shard, min_params" },
        { FSC_PAR_ZERO1, 0, 0, 0, "zero1" },
        { FSC_PAR_ZERO2, 0, 0, 0, "zero2" },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        job j = make(4, cases[k].kind);
        mt_apply(&j.po, &cases[k], 50);
        train(&j);
        assert_same(&ddp, &j, cases[k].what);
        done(&j);
    }
    /* one rank accumulating the four ranks' micro-batches */
    job one = make(1, FSC_PAR_NONE);
    mt_accumulate(&one.po, 4);
    train(&one);
    for (int s = 0; s < 3; s++) assert_true(fabs(one.loss[s] - ddp.loss[s]) <= 1e-6 * fabs(ddp.loss[s]));
    for (size_t i = 0; i < one.P; i++) assert_true(fabsf(one.after[i] - ddp.after[i]) <= 1e-5f);
    done(&one);
    done(&ddp);
}

static void test_pipeline_equals_ddp_accumulating(void **st) {
    (void)st;
    job ddp = make(2, FSC_PAR_DDP);
    mt_accumulate(&ddp.po, 2);
    train(&ddp);
    for (int sched = 0; sched < 2; sched++) {
        job p = make(4, FSC_PAR_DDP);
        const int balance[2] = { 1, 1 }; /* hidden.0 on stage 0, hidden.1 and the tied output on stage 1 */
        mt_pipeline(&p.po, sched, FSC_PIPE_CKPT_EXCEPT_LAST, balance);
        train(&p);
        assert_same(&ddp, &p, sched ? "pipeline 1f1b" : "pipeline gpipe");
        done(&p);
    }
    done(&ddp);
}

static void test_checkpoint_reshards_and_continues(void **st) {
    (void)st;
    char dir[] = "/tmp/fsc_test_model_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/step-00000002", dir);
    job a = make(4, FSC_PAR_FSDP); /* two steps, saved */
    a.steps = 2;
    a.save_dir = dir;
    train(&a);
    job straight = make(4, FSC_PAR_FSDP); /* four steps without a break */
    straight.steps = 4;
    train(&straight);
    job resumed = make(4, FSC_PAR_FSDP); /* the same world and setting, resumed */
    resumed.steps = 2, resumed.first_step = 2, resumed.load = path;
    train(&resumed);
    assert_bits_equal(resumed.full, a.after, a.P, "fsdp 4 loaded");
    assert_bits_equal(resumed.after, straight.after, a.P, "fsdp 4 resumed vs straight");
    assert_true(memcmp(&resumed.loss[1], &straight.loss[3], sizeof(double)) == 0);
    job d2 = make(2, FSC_PAR_DDP); /* resharded into DDP on 2 ranks */
    d2.steps = 2, d2.first_step = 2, d2.load = path;
    train(&d2);
    assert_bits_equal(d2.full, a.after, a.P, "ddp 2 loaded from fsdp 4");
    job f2 = make(2, FSC_PAR_FSDP);
    f2.steps = 2, f2.first_step = 2, f2.load = path;
    train(&f2);
    assert_same(&d2, &f2, "ddp 2 vs fsdp 2 after resharding");
    for (int s = 0; s < 2; s++) assert_true(fabs(d2.loss[s] - straight.loss[2 + s]) <= 1e-5 * straight.loss[2 + s]);
    done(&a), done(&straight), done(&resumed), done(&d2), done(&f2);
    test_rmtree(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_declaration_checked),
        cmocka_unit_test(test_one_engine_a_model),
        cmocka_unit_test(test_strategies_equal_ddp),
        cmocka_unit_test(test_pipeline_equals_ddp_accumulating),
        cmocka_unit_test(test_checkpoint_reshards_and_continues),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
