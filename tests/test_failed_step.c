/* A step that fails in the middle of its backward (a layer's error, every rank alike) leaves nothing behind: the
 * steps after it train exactly as the same steps of an engine that never failed.
 * Oracle: the loss and the full parameters after two good steps, with and without one failed step before them,
 * bit for bit, for every strategy with gradient accumulation (2 micro-batches: the strategies keep gradients
 * between micro-batches, which a failure leaves half made), prefetch on and off. FSDP kept the failed step's
 * accumulated full gradient and added the next step's to it. */
#include "testutil.h"
#include "fsc/fsc.h"

typedef struct {
    fsc_layer l;
    int n;
} bad_layer;

static _Thread_local int fail_now; /* ranks are threads: each sets its own */

static size_t bl_bytes(const fsc_layer *l, int B) { return (size_t)B * ((const bad_layer *)l)->n * sizeof(float); }
static fsc_status bl_fwd(const fsc_layer *l, const fsc_layer_call *c, float *out, const void *in) {
    return fsc_device_copy(c->dev, out, in, bl_bytes(l, c->B));
}
static fsc_status bl_bwd(const fsc_layer *l, const fsc_layer_call *c, float *dinp, const float *dout, const void *in) {
    (void)in;
    if (fail_now) return fsc_error(FSC_ERR_NUMERIC, "bad_layer: backward refuses");
    return dinp ? fsc_device_copy(c->dev, dinp, dout, bl_bytes(l, c->B)) : FSC_OK;
}
static const fsc_layer_ops bl_ops = { .rec_bytes = bl_bytes, .forward = bl_fwd, .backward = bl_bwd };

static fsc_layer *bad(int n) {
    bad_layer *y = calloc(1, sizeof *y);
    assert_non_null(y);
    snprintf(y->l.kind, sizeof y->l.kind, "bad");
    y->l.ops = &bl_ops;
    y->l.in_bytes = (size_t)n * sizeof(float);
    y->l.out_floats = n;
    y->n = n;
    return &y->l;
}

static fsc_layer *lin(int in, int out) {
    fsc_linear_opts o = fsc_linear_opts_default(in, out);
    fsc_layer *l = NULL;
    assert_ok(fsc_layer_linear(&o, &l));
    return l;
}

enum { NP = 76 }; /* 4x8 + 8 + 8x4 + 4 */

typedef struct {
    fsc_parallel_kind kind;
    int prefetch, fail_first;
    double loss;
    float params[NP];
} job;

static fsc_status run(fsc_rank *r, void *arg) {
    job *j = arg;
    fsc_layer *ms = NULL;
    FSC_TRY(fsc_layer_mse(4, &ms));
    fsc_seq_layer sl[4];
    memset(sl, 0, sizeof sl);
    sl[0].layer = lin(4, 8), sl[0].prefix = "a.";
    sl[1].layer = bad(8), sl[1].prefix = "bad.";
    sl[2].layer = lin(8, 4), sl[2].prefix = "b.";
    sl[3].layer = ms;
    fsc_model *m = NULL;
    fsc_engine *e = NULL;
    fsc_status s = fsc_seq_model_create(r->dev, sl, 4, &m);
    fsc_parallel_opts po = fsc_parallel_opts_default();
    po.kind = j->kind, po.accum = 2, po.prefetch = j->prefetch;
    fsc_optim_config oc = fsc_optim_config_default();
    if (s == FSC_OK) s = fsc_engine_create_model(r, m, &po, &oc, 1, &e);
    float x[16], y[16];
    for (int i = 0; i < 16; i++) x[i] = (float)(i % 7) / 7, y[i] = (float)(i % 3) / 3;
    fsc_step_info info;
    if (s == FSC_OK && j->fail_first) {
        fail_now = 1;
        fsc_status f = fsc_engine_step_model(e, x, y, 4, 4 * r->world, &info);
        fail_now = 0;
        if (f != FSC_ERR_NUMERIC || !strstr(fsc_last_error(), "backward refuses"))
            s = fsc_error(FSC_ERR_INTERNAL, "the failing step gave %s: %s", fsc_status_str(f), fsc_last_error());
    }
    for (int k = 0; k < 2 && s == FSC_OK; k++) s = fsc_engine_step_model(e, x, y, 4, 4 * r->world, &info);
    if (s == FSC_OK && r->rank == 0) j->loss = info.loss;
    if (s == FSC_OK) s = fsc_engine_full_params(e, r->rank == 0 ? j->params : NULL);
    fsc_engine_free(e);
    fsc_model_free(m);
    return s;
}

static void test_failed_step_leaves_nothing(void **state) {
    (void)state;
    const fsc_parallel_kind kinds[] = { FSC_PAR_NONE, FSC_PAR_DDP, FSC_PAR_FSDP, FSC_PAR_ZERO1, FSC_PAR_ZERO2 };
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++)
        for (int pf = 0; pf < 2; pf++) {
            job j[2];
            for (int f = 0; f < 2; f++) {
                memset(&j[f], 0, sizeof j[f]);
                j[f].kind = kinds[k], j[f].prefetch = pf, j[f].fail_first = f;
                fsc_cluster_opts co = { .world = kinds[k] == FSC_PAR_NONE ? 1 : 2, .timeout_s = 30 };
                assert_ok(fsc_cluster_run(&co, run, &j[f]));
            }
            if (memcmp(&j[0].loss, &j[1].loss, sizeof j[0].loss) || memcmp(j[0].params, j[1].params, sizeof j[0].params))
                fail_msg("%s, prefetch %d: after a failed step loss %.9g, else %.9g (parameters %s)",
                         fsc_parallel_kind_name(kinds[k]), pf, j[1].loss, j[0].loss,
                         memcmp(j[0].params, j[1].params, sizeof j[0].params) ? "differ" : "equal");
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_failed_step_leaves_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
