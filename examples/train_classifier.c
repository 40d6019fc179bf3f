/* A classifier of your own, outside the library: three interleaved spirals in the plane (a class per spiral), an
 * MLP of fsc's layers with a classification head (a linear layer with a bias, then fsc_layer_xent), trained with
 * FSDP on 4 simulated ranks. It prints the training loss and the accuracy on held-out points, read with
 * fsc_engine_predict, and checks what fsc promises: FSDP equals DDP bit for bit (every step's loss and every
 * parameter), and the classifier learns (held-out accuracy above 90%). Exit status 1 otherwise.
 *
 * Uses the public API only (#include <fsc/fsc.h>):
 *   cc examples/train_classifier.c $(pkg-config --cflags --libs fsc) -lm -o train_classifier
 *
 * The model: linear "in." (2 -> 64) | gelu | linear "hidden." (64 -> 64) | gelu | linear "head." (64 -> 3) | xent */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fsc/fsc.h>

enum { IN = 2, HID = 64, CLASSES = 3, GLOBAL_BATCH = 64, STEPS = 300, WORLD = 4, TEST = 600 };

/* ---- the data: point i of the training stream (or of the held-out set), on spiral i % CLASSES ----------------- */
static uint64_t mix(uint64_t x) {
    x ^= x >> 33, x *= 0xff51afd7ed558ccdull, x ^= x >> 33, x *= 0xc4ceb9fe1a85ec53ull, x ^= x >> 33;
    return x;
}
static float uniform(uint64_t key) { return (float)(mix(key) >> 40) / 16777216.0f; } /* [0, 1) */

static void point(uint64_t i, int held_out, float *x, int32_t *y) {
    const uint64_t key = i * 4 + (held_out ? 2 : 0) + 0x9e3779b97f4a7c15ull;
    const int c = (int)(i % CLASSES);
    const float r = uniform(key), t = 4.0f * r + 2.0943951f * (float)c; /* radius 0..1, a third of a turn apart */
    x[0] = r * cosf(t) + 0.03f * (uniform(key + 1) - 0.5f);
    x[1] = r * sinf(t) + 0.03f * (uniform(key + 1000003) - 0.5f);
    *y = c;
}

/* ---- the model ------------------------------------------------------------------------------------------- */
static fsc_status build_model(fsc_device *dev, fsc_model **out) {
    fsc_layer *l[6] = { 0 };
    fsc_linear_opts in = fsc_linear_opts_default(IN, HID), hid = fsc_linear_opts_default(HID, HID),
                    head = fsc_linear_opts_default(HID, CLASSES); /* with biases */
    fsc_status s = fsc_layer_linear(&in, &l[0]);
    if (s == FSC_OK) s = fsc_layer_set_init(l[0], "weight", fsc_init_normal(1.0f));
    if (s == FSC_OK) s = fsc_layer_gelu(HID, &l[1]);
    if (s == FSC_OK) s = fsc_layer_linear(&hid, &l[2]);
    if (s == FSC_OK) s = fsc_layer_set_init(l[2], "weight", fsc_init_normal(0.125f));
    if (s == FSC_OK) s = fsc_layer_gelu(HID, &l[3]);
    if (s == FSC_OK) s = fsc_layer_linear(&head, &l[4]);
    if (s == FSC_OK) s = fsc_layer_set_init(l[4], "weight", fsc_init_normal(0.125f));
    if (s == FSC_OK) s = fsc_layer_xent(CLASSES, &l[5]);
    if (s != FSC_OK) {
        for (int k = 0; k < 6; k++) fsc_layer_free(l[k]);
        return s;
    }
    const fsc_seq_layer layers[6] = { { .layer = l[0], .prefix = "in." }, { .layer = l[1] },
                                      { .layer = l[2], .prefix = "hidden." }, { .layer = l[3] },
                                      { .layer = l[4], .prefix = "head." }, { .layer = l[5] } };
    return fsc_seq_model_create(dev, layers, 6, out); /* the model owns the layers from here */
}

/* ---- one training run ------------------------------------------------------------------------------------ */
typedef struct {
    fsc_parallel_kind kind;
    double loss[STEPS]; /* rank 0: the loss of each step */
    size_t P;
    float *params;      /* rank 0: (P) the parameters after the run */
    double accuracy;    /* rank 0: on the held-out points */
} run;

/* The fraction of the TEST held-out points whose largest logit is their class (every rank predicts them all). */
static fsc_status held_out_accuracy(fsc_engine *e, double *accuracy) {
    float x[TEST * IN], logits[TEST * CLASSES];
    int32_t y[TEST];
    for (int i = 0; i < TEST; i++) point((uint64_t)i, 1, x + i * IN, &y[i]);
    size_t per = 0;
    FSC_TRY(fsc_engine_predict(e, x, TEST, logits, &per));
    if (per != CLASSES) return fsc_error(FSC_ERR_INTERNAL, "predict: %zu outputs per sample, expected %d", per, CLASSES);
    int right = 0;
    for (int i = 0; i < TEST; i++) {
        int best = 0;
        for (int c = 1; c < CLASSES; c++)
            if (logits[i * CLASSES + c] > logits[i * CLASSES + best]) best = c;
        right += best == y[i];
    }
    *accuracy = (double)right / TEST;
    return FSC_OK;
}

static fsc_status train_rank(fsc_rank *r, void *arg) {
    run *u = arg;
    fsc_model *m = NULL;
    fsc_engine *e = NULL;
    fsc_status s = build_model(r->dev, &m);
    fsc_parallel_opts po = fsc_parallel_opts_default(); /* full shard, block wrapping, prefetch, fp32 */
    po.kind = u->kind;
    fsc_optim_config oc = fsc_optim_config_default(); /* AdamW */
    oc.lr = 1e-2f;
    if (s == FSC_OK) s = fsc_engine_create_model(r, m, &po, &oc, 7, &e);
    const int dp = s == FSC_OK ? fsc_engine_layout(e)->dp : 1, me = s == FSC_OK ? fsc_engine_layout(e)->data : 0;
    const int lb = GLOBAL_BATCH / dp;
    float *x = malloc((size_t)lb * IN * sizeof(float));
    int32_t *y = malloc((size_t)lb * sizeof(int32_t));
    if (s == FSC_OK && (!x || !y)) s = fsc_error(FSC_ERR_NOMEM, "out of host memory");
    for (int step = 0; step < STEPS && s == FSC_OK; step++) {
        for (int i = 0; i < lb; i++) /* this rank's part of the global batch */
            point((uint64_t)step * GLOBAL_BATCH + (uint64_t)me * lb + (uint64_t)i, 0, x + i * IN, &y[i]);
        fsc_step_info info;
        s = fsc_engine_step_model(e, x, y, lb, GLOBAL_BATCH, &info);
        if (s == FSC_OK && r->rank == 0) u->loss[step] = info.loss;
    }
    double acc = 0;
    if (s == FSC_OK) s = held_out_accuracy(e, &acc);
    if (s == FSC_OK && r->rank == 0) u->P = fsc_model_num_params(m), u->accuracy = acc;
    if (s == FSC_OK) s = fsc_engine_full_params(e, r->rank == 0 ? u->params : NULL);
    free(x), free(y);
    fsc_engine_free(e);
    fsc_model_free(m);
    return s;
}

static int do_run(run *u, size_t P) {
    u->params = calloc(P, sizeof(float));
    fsc_cluster_opts co = fsc_cluster_opts_default(); /* simulated ranks on the cpu device */
    co.world = WORLD;
    fsc_status s = u->params ? fsc_cluster_run(&co, train_rank, u) : FSC_ERR_NOMEM;
    if (s != FSC_OK) fprintf(stderr, "train_classifier: %s: %s\n", fsc_status_str(s), fsc_last_error());
    return s == FSC_OK;
}

int main(void) {
    fsc_device *dev = NULL;
    fsc_model *m = NULL;
    fsc_status s = fsc_device_create("cpu", NULL, &dev);
    if (s == FSC_OK) s = build_model(dev, &m);
    if (s != FSC_OK) {
        fprintf(stderr, "train_classifier: %s\n", fsc_last_error());
        return 1;
    }
    const size_t P = fsc_model_num_params(m);
    printf("model: %d layers, %zu parameters, %d classes; %d simulated ranks, global batch %d, %d steps\n",
           m->n_layers, P, CLASSES, WORLD, GLOBAL_BATCH, STEPS);
    fsc_model_free(m);
    fsc_device_free(dev);

    static run ddp = { .kind = FSC_PAR_DDP }, fsdp = { .kind = FSC_PAR_FSDP };
    int ok = do_run(&ddp, P) && do_run(&fsdp, P);
    if (ok) {
        for (int k = 0; k < STEPS; k += STEPS / 6) printf("step %3d  loss (cross entropy) %.6f\n", k, fsdp.loss[k]);
        printf("step %3d  loss (cross entropy) %.6f\n", STEPS - 1, fsdp.loss[STEPS - 1]);
        const int same = memcmp(ddp.loss, fsdp.loss, sizeof ddp.loss) == 0 &&
                         memcmp(ddp.params, fsdp.params, P * sizeof(float)) == 0 && ddp.accuracy == fsdp.accuracy;
        printf("%-44s %s\n", "FSDP (full_shard, 4 ranks) vs DDP (4 ranks)", same ? "bit-identical" : "MISMATCH");
        printf("%-44s %.1f%%\n", "held-out accuracy (fsc_engine_predict)", 100.0 * fsdp.accuracy);
        ok = same && fsdp.accuracy > 0.9;
    }
    free(ddp.params), free(fsdp.params);
    printf("%s\n", ok ? "all checks passed" : "CHECKS FAILED");
    return ok ? 0 : 1;
}
