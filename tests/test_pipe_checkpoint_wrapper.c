/* The activation-checkpoint wrapper (lib/nn/checkpoint_wrapper.c) on a stack of GPT-2 blocks, outside any
 * pipeline. Oracle: the stack run plainly (one saved record per block). Checkpointed, with the input on the
 * device and offloaded to host memory, the forward output, every parameter gradient and the input gradient
 * are bit-identical, and the device ledger's activation peak drops exactly as the kept inputs say:
 * plain n records > one shared record + n device inputs > one shared record + 1 device input (offload).
 * Misuse (forward twice, recompute before forward) is a state error; an input past any memory is refused. */
#include <stdlib.h>
#include "testutil.h"
#include "fsc/checkpoint_wrapper.h"

enum { NB = 3, B = 2, T = 8 };

typedef struct {
    fsc_device *dev;
    fsc_block_rec *rec;
    const float *const *p;
    float *work;
} block_ctx;

static fsc_status block_fwd(void *ctx, float *out, const float *inp) {
    block_ctx *c = ctx;
    return fsc_block_forward(c->dev, out, c->rec, inp, c->p, c->work);
}

typedef struct {
    fsc_device *dev;
    fsc_gpt *m;
    fsc_gpt_config cfg;
    size_t P, btc;
    float *params, *grads, *x0, *dout, *work, *stream[2], *dres;
} fixture;

static void setup_fixture(fixture *f) {
    memset(f, 0, sizeof *f);
    f->cfg = (fsc_gpt_config){ .layers = NB, .dim = 16, .heads = 2, .seq = T, .vocab = 8 };
    assert_ok(fsc_device_create("cpu", &(fsc_device_opts){ .threads = 1 }, &f->dev));
    assert_ok(fsc_gpt_create(f->dev, &f->cfg, &f->m));
    f->P = fsc_gpt_num_params(&f->cfg);
    f->btc = (size_t)B * T * f->cfg.dim;
    assert_ok(fsc_device_alloc(f->dev, FSC_TAG_PARAMS, f->P * sizeof(float), (void **)&f->params));
    assert_ok(fsc_device_alloc(f->dev, FSC_TAG_GRADS, f->P * sizeof(float), (void **)&f->grads));
    fsc_gpt_bind_flat(f->m, f->params, f->grads);
    float *h = malloc(f->P * sizeof(float));
    size_t off = 0;
    for (int i = 0; i < f->m->n_tensors; i++) {
        fsc_gpt_init_values(&f->cfg, 5, i, 0, f->m->info[i].numel, h + off);
        off += f->m->info[i].numel;
    }
    assert_ok(fsc_device_upload(f->dev, f->params, h, f->P * sizeof(float)));
    free(h);
    float *hx = malloc(2 * f->btc * sizeof(float));
    fsc_rng_fill_normal(hx, 2 * f->btc, 7, "test input", 0, 0.0f, 1.0f);
    size_t wf = fsc_block_work_floats(B, T, f->cfg.dim, f->cfg.heads);
    /* the caller's buffers are workspace, so the ledger's acts tag counts records and kept inputs only */
    assert_ok(fsc_device_alloc(f->dev, FSC_TAG_WORKSPACE, f->btc * sizeof(float), (void **)&f->x0));
    assert_ok(fsc_device_alloc(f->dev, FSC_TAG_WORKSPACE, f->btc * sizeof(float), (void **)&f->dout));
    assert_ok(fsc_device_alloc(f->dev, FSC_TAG_WORKSPACE, f->btc * sizeof(float), (void **)&f->dres));
    assert_ok(fsc_device_alloc(f->dev, FSC_TAG_WORKSPACE, f->btc * sizeof(float), (void **)&f->stream[0]));
    assert_ok(fsc_device_alloc(f->dev, FSC_TAG_WORKSPACE, f->btc * sizeof(float), (void **)&f->stream[1]));
    assert_ok(fsc_device_alloc(f->dev, FSC_TAG_WORKSPACE, wf * sizeof(float), (void **)&f->work));
    assert_ok(fsc_device_upload(f->dev, f->x0, hx, f->btc * sizeof(float)));
    assert_ok(fsc_device_upload(f->dev, f->dout, hx + f->btc, f->btc * sizeof(float)));
    free(hx);
}

static void free_fixture(fixture *f) {
    float *bufs[] = { f->params, f->grads, f->x0, f->dout, f->dres, f->stream[0], f->stream[1], f->work };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) fsc_device_release(f->dev, bufs[i]);
    fsc_gpt_free(f->m);
    fsc_device_free(f->dev);
}

/* mode 0: plain, 1: checkpointed, 2: checkpointed with offload. Downloads the output, the gradients
 * (params, then the input's) into host; returns the ledger's acts peak. */
static size_t run_stack(fixture *f, int mode, float *out, float *grads) {
    fsc_device *dev = f->dev;
    const int C = f->cfg.dim, NH = f->cfg.heads;
    size_t saved = fsc_block_saved_floats(B, T, C, NH);
    assert_ok(fsc_device_memset(dev, f->grads, 0, f->P * sizeof(float)));
    fsc_device_reset_peak(dev);
    float *area;
    assert_ok(fsc_device_alloc(dev, FSC_TAG_ACTS, (mode ? 1 : NB) * saved * sizeof(float), (void **)&area));
    fsc_block_rec rec[NB];
    block_ctx ctx[NB];
    fsc_checkpoint_wrapper *w[NB] = { 0 };
    float *x[NB + 1]; /* plain: every block's input kept by the caller; checkpointed: two alternating buffers */
    float *plain_x[NB + 1] = { 0 };
    for (int l = 0; l < NB; l++) {
        fsc_block_rec_bind(&rec[l], area + (mode ? 0 : (size_t)l * saved), B, T, C, NH);
        int t0 = fsc_gpt_block_first_tensor(&f->cfg, l);
        ctx[l] = (block_ctx){ dev, &rec[l], (const float *const *)&f->m->param[t0], f->work };
        if (mode) assert_ok(fsc_checkpoint_wrapper_create(dev, f->btc, mode == 2, &w[l]));
    }
    x[0] = f->x0;
    for (int l = 1; l <= NB; l++) {
        if (mode) {
            x[l] = f->stream[l % 2];
        } else {
            assert_ok(fsc_device_alloc(dev, FSC_TAG_WORKSPACE, f->btc * sizeof(float), (void **)&plain_x[l]));
            x[l] = plain_x[l];
        }
    }
    for (int l = 0; l < NB; l++) {
        if (mode) assert_ok(fsc_checkpoint_wrapper_forward(w[l], block_fwd, &ctx[l], x[l + 1], x[l]));
        else assert_ok(block_fwd(&ctx[l], x[l + 1], x[l]));
    }
    assert_ok(fsc_device_download(dev, out, x[NB], f->btc * sizeof(float)));
    assert_ok(fsc_device_copy(dev, f->dres, f->dout, f->btc * sizeof(float)));
    for (int l = NB - 1; l >= 0; l--) {
        if (mode) {
            const float *inp = NULL;
            assert_ok(fsc_checkpoint_wrapper_recompute(w[l], block_fwd, &ctx[l], &inp));
            assert_true(rec[l].inp == inp);
        }
        int t0 = fsc_gpt_block_first_tensor(&f->cfg, l);
        assert_ok(fsc_block_backward(dev, f->dres, &f->m->grad[t0], &rec[l], ctx[l].p, f->work));
        if (mode) fsc_checkpoint_wrapper_release(w[l]);
    }
    assert_ok(fsc_device_download(dev, grads, f->grads, f->P * sizeof(float)));
    assert_ok(fsc_device_download(dev, grads + f->P, f->dres, f->btc * sizeof(float)));
    size_t peak = fsc_device_peak_bytes(dev, FSC_TAG_ACTS);
    for (int l = 0; l < NB; l++) fsc_checkpoint_wrapper_free(w[l]);
    for (int l = 1; l <= NB; l++) fsc_device_release(dev, plain_x[l]);
    fsc_device_release(dev, area);
    return peak;
}

static void test_checkpoint_wrapper_bits_and_memory(void **state) {
    (void)state;
    fixture f;
    setup_fixture(&f);
    float *out[3], *g[3];
    size_t peak[3];
    for (int mode = 0; mode < 3; mode++) {
        out[mode] = malloc(f.btc * sizeof(float));
        g[mode] = malloc((f.P + f.btc) * sizeof(float));
        peak[mode] = run_stack(&f, mode, out[mode], g[mode]);
    }
    int nonzero = 0;
    for (size_t i = 0; i < f.P; i++) nonzero += g[0][i] != 0.0f;
    assert_true(nonzero > (int)(f.P / 2)); /* the gradients are really there */
    for (int mode = 1; mode < 3; mode++) {
        const char *what = mode == 1 ? "checkpointed" : "checkpointed with offload";
        assert_bits_equal(out[0], out[mode], f.btc, what);
        assert_bits_equal(g[0], g[mode], f.P + f.btc, what);
    }
    size_t rec = fsc_block_saved_floats(B, T, f.cfg.dim, f.cfg.heads) * sizeof(float), in = f.btc * sizeof(float);
    assert_int_equal(peak[0], NB * rec);
    assert_int_equal(peak[1], rec + NB * in);
    assert_int_equal(peak[2], rec + in);
    assert_true(peak[0] > peak[1] && peak[1] > peak[2]);
    for (int mode = 0; mode < 3; mode++) {
        free(out[mode]);
        free(g[mode]);
    }
    free_fixture(&f);
}

static void test_checkpoint_wrapper_states(void **state) {
    (void)state;
    fixture f;
    setup_fixture(&f);
    const int C = f.cfg.dim, NH = f.cfg.heads;
    float *area;
    assert_ok(fsc_device_alloc(f.dev, FSC_TAG_ACTS, fsc_block_saved_floats(B, T, C, NH) * sizeof(float),
                               (void **)&area));
    fsc_block_rec rec;
    fsc_block_rec_bind(&rec, area, B, T, C, NH);
    block_ctx ctx = { f.dev, &rec, (const float *const *)&f.m->param[2], f.work };
    fsc_checkpoint_wrapper *w;
    const float *inp;
    assert_err(fsc_checkpoint_wrapper_create(f.dev, 0, 0, &w), FSC_ERR_INVALID, "no elements");
    /* 2^62 + 1 floats: their bytes wrapped to 4, and a forward kept one float of the input without a word */
    assert_err(fsc_checkpoint_wrapper_create(f.dev, ((size_t)1 << 62) + 1, 0, &w), FSC_ERR_INVALID, "past any memory");
    assert_null(w);
    assert_ok(fsc_checkpoint_wrapper_create(f.dev, f.btc, 1, &w));
    assert_err(fsc_checkpoint_wrapper_recompute(w, block_fwd, &ctx, &inp), FSC_ERR_STATE, "run forward first");
    assert_ok(fsc_checkpoint_wrapper_forward(w, block_fwd, &ctx, f.stream[0], f.x0));
    assert_int_equal(fsc_checkpoint_wrapper_device_bytes(w), 0); /* offloaded: nothing on the device */
    assert_err(fsc_checkpoint_wrapper_forward(w, block_fwd, &ctx, f.stream[0], f.x0), FSC_ERR_STATE, "release");
    assert_ok(fsc_checkpoint_wrapper_recompute(w, block_fwd, &ctx, &inp));
    assert_int_equal(fsc_checkpoint_wrapper_device_bytes(w), f.btc * sizeof(float));
    fsc_checkpoint_wrapper_release(w);
    assert_int_equal(fsc_checkpoint_wrapper_device_bytes(w), 0);
    fsc_checkpoint_wrapper_free(w);
    fsc_device_release(f.dev, area);
    free_fixture(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_checkpoint_wrapper_bits_and_memory),
        cmocka_unit_test(test_checkpoint_wrapper_states),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
