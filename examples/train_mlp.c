/* Your own model, outside the library: an MLP regressor on synthetic data, built from fsc's layers and one
 * layer this file writes itself, trained with FSDP on 4 simulated ranks. It checks what fsc promises and says
 * so: FSDP equals DDP bit for bit (every step's loss and every parameter), a checkpoint saved by FSDP and
 * resumed continues bit for bit as an uninterrupted run, and with the exact reduction (reduce_exact,
 * docs/determinism.md) one rank accumulating 16 micro-batches, FSDP on 2 ranks and ZeRO-2 on 4 give the same
 * bits. Exit status 1 on any mismatch.
 *
 * Uses the public API only (#include <fsc/fsc.h>); the test suite builds it against the installed library:
 *   cc examples/train_mlp.c $(pkg-config --cflags --libs fsc) -lm -o train_mlp
 *
 * The model (docs/models.md explains the layer interface):
 *   linear "in." (4 -> 16) | scaled_silu "act.0." | linear "hidden." (16 -> 16) | scaled_silu "act.1." |
 *   linear "out." (16 -> 4) | mse
 * scaled_silu (out = scale * silu(in), one learned scale per feature) is this file's layer. It computes on the
 * device with fsc/ops.h (SiLU, products, a row sum), nothing through the host, so any device and every strategy
 * run it at the device's speed. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <fsc/fsc.h>

enum { IN = 4, HID = 16, GLOBAL_BATCH = 16, STEPS = 6, SAVE_AT = 3, WORLD = 4 };

/* ---- the layer: out = scale * silu(in), parameter "scale" (n) ------------------------------------------------ */
typedef struct {
    fsc_layer l; /* first: fsc's part */
    int n;
} scaled_silu;

/* the record keeps silu(in), the scratch holds one (B, n) product: both (B, n) floats */
static size_t st_bytes(const fsc_layer *l, int B) { return (size_t)B * ((const scaled_silu *)l)->n * sizeof(float); }

/* Views of the device pointers a call gets, for fsc/ops.h: (B, n) rows and an (n) vector */
static fsc_tensor rows(const fsc_layer_call *c, const void *p, int n) {
    return fsc_tensor_make((void *)p, FSC_F32, 2, (const int64_t[]){ c->B, n }, c->dev);
}
static fsc_tensor vec(const fsc_layer_call *c, const void *p, int n) {
    return fsc_tensor_make((void *)p, FSC_F32, 1, (const int64_t[]){ n }, c->dev);
}

/* t = silu(in) (kept), out = t * scale per feature: all on the device */
static fsc_status st_forward(const fsc_layer *l, const fsc_layer_call *c, float *out, const void *in) {
    const int n = ((const scaled_silu *)l)->n;
    fsc_tensor x = rows(c, in, n), t = rows(c, c->rec, n), o = rows(c, out, n), w = rows(c, c->work, n);
    fsc_tensor scale = vec(c, c->param[0], n);
    fsc_status s = fsc_op_silu(&t, &x);
    if (s == FSC_OK) s = fsc_op_repeat_rows(&w, &scale); /* each row := scale */
    if (s == FSC_OK) s = fsc_op_mul(&o, &t, &w);
    return s;
}

/* dscale += sum over samples of dout * t (in sample order); dinp = silu'(in) * dout * scale */
static fsc_status st_backward(const fsc_layer *l, const fsc_layer_call *c, float *dinp, const float *dout,
                              const void *in) {
    const int n = ((const scaled_silu *)l)->n;
    fsc_tensor x = rows(c, in, n), t = rows(c, c->rec, n), d = rows(c, dout, n), w = rows(c, c->work, n);
    fsc_tensor scale = vec(c, c->param[0], n), g = vec(c, c->grad[0], n);
    fsc_status s = fsc_op_mul(&w, &d, &t);
    if (s == FSC_OK) s = fsc_op_sum_rows(&g, &w);
    if (!dinp || s != FSC_OK) return s;
    fsc_tensor di = rows(c, dinp, n);
    s = fsc_op_repeat_rows(&w, &scale);
    if (s == FSC_OK) s = fsc_op_mul(&w, &w, &d);
    if (s == FSC_OK) s = fsc_op_silu_backward(&di, &x, &w);
    return s;
}

static void st_config(const fsc_layer *l, char *buf, size_t cap) {
    snprintf(buf, cap, "{\"n\":%d}", ((const scaled_silu *)l)->n);
}

static const fsc_layer_ops scaled_silu_ops = { .rec_bytes = st_bytes, .work_bytes = st_bytes, .forward = st_forward,
                                               .backward = st_backward, .config = st_config };

static fsc_status scaled_silu_create(int n, fsc_layer **out) {
    scaled_silu *y = calloc(1, sizeof *y);
    if (!y) return fsc_error(FSC_ERR_NOMEM, "scaled_silu: out of host memory");
    snprintf(y->l.kind, sizeof y->l.kind, "scaled_silu");
    y->l.ops = &scaled_silu_ops;
    y->l.in_bytes = (size_t)n * sizeof(float);
    y->l.out_floats = (size_t)n;
    y->n = n;
    *out = &y->l;
    const int64_t shape[1] = { n };
    fsc_status s = fsc_layer_add_param(*out, "scale", 1, shape, fsc_init_const(1.0f));
    if (s != FSC_OK) fsc_layer_free(*out), *out = NULL;
    return s;
}

/* ---- the model ------------------------------------------------------------------------------------------- */
static fsc_status build_model(fsc_device *dev, fsc_model **out) {
    fsc_layer *l[6] = { 0 };
    /* options start from their _default() functions, so a field added to the library later gets its default */
    fsc_linear_opts in = fsc_linear_opts_default(IN, HID), hid = fsc_linear_opts_default(HID, HID),
                    out_ = fsc_linear_opts_default(HID, IN);
    fsc_status s = fsc_layer_linear(&in, &l[0]);
    if (s == FSC_OK) s = fsc_layer_set_init(l[0], "weight", fsc_init_normal(0.5f));
    if (s == FSC_OK) s = scaled_silu_create(HID, &l[1]);
    if (s == FSC_OK) s = fsc_layer_linear(&hid, &l[2]);
    if (s == FSC_OK) s = fsc_layer_set_init(l[2], "weight", fsc_init_normal(0.25f));
    if (s == FSC_OK) s = scaled_silu_create(HID, &l[3]);
    if (s == FSC_OK) s = fsc_layer_linear(&out_, &l[4]);
    if (s == FSC_OK) s = fsc_layer_set_init(l[4], "weight", fsc_init_normal(0.25f));
    if (s == FSC_OK) s = fsc_layer_mse(IN, &l[5]);
    if (s != FSC_OK) {
        for (int k = 0; k < 6; k++) fsc_layer_free(l[k]);
        return s;
    }
    const fsc_seq_layer layers[6] = { { .layer = l[0], .prefix = "in." }, { .layer = l[1], .prefix = "act.0." },
                                      { .layer = l[2], .prefix = "hidden." }, { .layer = l[3], .prefix = "act.1." },
                                      { .layer = l[4], .prefix = "out." }, { .layer = l[5] } };
    return fsc_seq_model_create(dev, layers, 6, out); /* the model owns the layers from here */
}

/* sample i of the data set: x uniform in [-1, 1), y a smooth function of x */
static void sample(size_t i, float *x, float *y) {
    for (int d = 0; d < IN; d++) {
        uint64_t h = (i * 977 + (size_t)d + 1) * 0x9E3779B97F4A7C15ull;
        x[d] = (float)((h >> 40) % 2000) / 1000.0f - 1.0f;
    }
    for (int d = 0; d < IN; d++) y[d] = sinf(2.0f * x[d]) * x[(d + 1) % IN] + 0.3f * x[(d + 2) % IN];
}

/* ---- one training run ------------------------------------------------------------------------------------ */
typedef struct {
    fsc_parallel_kind kind;
    int world, accum, exact;  /* ranks (0: WORLD), micro-batches per step (0: 1), the exact reduction */
    int first, last;          /* steps [first, last) */
    const char *load;         /* checkpoint to start from, or NULL */
    const char *save_dir;     /* save after the last step, or NULL */
    double loss[STEPS];       /* rank 0: the loss of each step */
    size_t P;
    float *params;            /* rank 0: (P) the parameters after the run */
} run;

static fsc_status train_rank(fsc_rank *r, void *arg) {
    run *u = arg;
    fsc_model *m = NULL;
    fsc_engine *e = NULL;
    fsc_status s = build_model(r->dev, &m);
    fsc_parallel_opts po = fsc_parallel_opts_default(); /* full shard, block wrapping, prefetch, fp32 */
    po.kind = u->kind;
    po.accum = u->accum ? u->accum : 1;
    po.clip = 1.0f;
    po.reduce_exact = u->exact;
    fsc_optim_config oc = fsc_optim_config_default(); /* AdamW */
    oc.lr = 1e-2f;
    if (s == FSC_OK) s = fsc_engine_create_model(r, m, &po, &oc, 1234, &e);
    if (s == FSC_OK && u->load) s = fsc_ckpt_load(e, u->load, NULL);
    const int dp = s == FSC_OK ? fsc_engine_layout(e)->dp : 1, me = s == FSC_OK ? fsc_engine_layout(e)->data : 0;
    const int lb = GLOBAL_BATCH / dp;
    float *x = malloc((size_t)lb * IN * sizeof(float)), *y = malloc((size_t)lb * IN * sizeof(float));
    if (s == FSC_OK && (!x || !y)) s = fsc_error(FSC_ERR_NOMEM, "out of host memory");
    for (int step = u->first; step < u->last && s == FSC_OK; step++) {
        for (int i = 0; i < lb; i++) /* this rank's part of the global batch */
            sample((size_t)step * GLOBAL_BATCH + (size_t)me * lb + i, x + i * IN, y + i * IN);
        fsc_step_info info;
        s = fsc_engine_step_model(e, x, y, lb, GLOBAL_BATCH, &info);
        if (s == FSC_OK && r->rank == 0) u->loss[step] = info.loss;
    }
    if (s == FSC_OK && r->rank == 0) u->P = fsc_model_num_params(m);
    if (s == FSC_OK) s = fsc_engine_full_params(e, r->rank == 0 ? u->params : NULL);
    if (s == FSC_OK && u->save_dir) s = fsc_ckpt_save(e, u->save_dir, u->last, NULL);
    free(x), free(y);
    fsc_engine_free(e);
    fsc_model_free(m);
    return s;
}

static int do_run(run *u, size_t P) {
    u->params = calloc(P, sizeof(float));
    fsc_cluster_opts co = fsc_cluster_opts_default(); /* simulated ranks on the cpu device */
    co.world = u->world ? u->world : WORLD;
    fsc_status s = u->params ? fsc_cluster_run(&co, train_rank, u) : FSC_ERR_NOMEM;
    if (s != FSC_OK) fprintf(stderr, "train_mlp: %s: %s\n", fsc_status_str(s), fsc_last_error());
    return s == FSC_OK;
}

static int same_bits(const char *what, const double *la, const double *lb, int first, int last, const float *pa,
                     const float *pb, size_t P) {
    int ok = memcmp(la + first, lb + first, (size_t)(last - first) * sizeof(double)) == 0 &&
             memcmp(pa, pb, P * sizeof(float)) == 0;
    printf("%-58s %s\n", what, ok ? "bit-identical" : "MISMATCH");
    return ok;
}

int main(void) {
    /* the number of parameters, from the model itself */
    fsc_device *dev = NULL;
    fsc_model *m = NULL;
    fsc_status s = fsc_device_create("cpu", NULL, &dev);
    if (s == FSC_OK) s = build_model(dev, &m);
    if (s != FSC_OK) {
        fprintf(stderr, "train_mlp: %s\n", fsc_last_error());
        return 1;
    }
    const size_t P = fsc_model_num_params(m);
    printf("model: %d layers, %d tensors, %zu parameters; %d simulated ranks, global batch %d\n", m->n_layers,
           m->n_tensors, P, WORLD, GLOBAL_BATCH);
    fsc_model_free(m);
    fsc_device_free(dev);

    char dir[] = "/tmp/fsc_train_mlp_XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    run ddp = { .kind = FSC_PAR_DDP, .first = 0, .last = STEPS };
    run fsdp = { .kind = FSC_PAR_FSDP, .first = 0, .last = STEPS };
    run part = { .kind = FSC_PAR_FSDP, .first = 0, .last = SAVE_AT, .save_dir = dir };
    char path[256];
    snprintf(path, sizeof path, "%s/step-%08d", dir, SAVE_AT);
    run resumed = { .kind = FSC_PAR_FSDP, .first = SAVE_AT, .last = STEPS, .load = path };
    run ex1 = { .kind = FSC_PAR_NONE, .world = 1, .accum = GLOBAL_BATCH, .exact = 1, .first = 0, .last = STEPS };
    run ex2 = { .kind = FSC_PAR_FSDP, .world = 2, .accum = GLOBAL_BATCH / 2, .exact = 1, .first = 0, .last = STEPS };
    run ex4 = { .kind = FSC_PAR_ZERO2, .world = 4, .accum = GLOBAL_BATCH / 4, .exact = 1, .first = 0, .last = STEPS };
    int ok = do_run(&ddp, P) && do_run(&fsdp, P) && do_run(&part, P) && do_run(&resumed, P) && do_run(&ex1, P) &&
             do_run(&ex2, P) && do_run(&ex4, P);
    if (ok) {
        for (int k = 0; k < STEPS; k++) printf("step %d  loss (mse) %.6f\n", k, fsdp.loss[k]);
        ok &= same_bits("FSDP (full_shard, 4 ranks) vs DDP (4 ranks)", ddp.loss, fsdp.loss, 0, STEPS, ddp.params,
                        fsdp.params, P);
        ok &= same_bits("FSDP saved at step 3, resumed to step 6, vs uninterrupted", fsdp.loss, resumed.loss,
                        SAVE_AT, STEPS, fsdp.params, resumed.params, P);
        ok &= same_bits("exact: FSDP (2 ranks x 8) vs 1 rank x 16 micro-batches", ex1.loss, ex2.loss, 0, STEPS,
                        ex1.params, ex2.params, P);
        ok &= same_bits("exact: ZeRO-2 (4 ranks x 4) vs 1 rank x 16 micro-batches", ex1.loss, ex4.loss, 0, STEPS,
                        ex1.params, ex4.params, P);
        const int learns = fsdp.loss[STEPS - 1] < fsdp.loss[0];
        printf("%-58s %s\n", "loss decreases", learns ? "yes" : "NO");
        ok &= learns;
    }
    /* remove the checkpoint */
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "train_mlp: could not remove %s\n", dir);
    free(ddp.params), free(fsdp.params), free(part.params), free(resumed.params);
    free(ex1.params), free(ex2.params), free(ex4.params);
    printf("%s\n", ok ? "all checks passed" : "CHECKS FAILED");
    return ok ? 0 : 1;
}
