/* bench_split: the split backward's own cost, per layer kind. A sequential model of one layer of each kind the
 * zero-bubble pipelines split (the embedding with positions, a linear layer, a LayerNorm, attention with a residual,
 * the GELU MLP with a residual, the packed GPT-2 block, the Llama block and the LM head with its final LayerNorm and cross entropy,
 * tied to the embedding's table as in the GPT) at bench_pipe's zb shape (width 384, 12 heads, context 64, vocab 256,
 * a micro-batch of 4 sequences). Each round runs, on the same inputs and parameters, the forward and the whole
 * backward over a record made without split, and the forward, backward_input and backward_weight over one made with
 * split and split_tied (so the tied head and embedding split too, as under zbv), in alternating order, and times
 * each layer's part between the model's pre_backward and post_backward hooks. With 1 BLAS thread the time is the
 * thread's CPU time (what bench_pipe's virtual clock counts), with 2 the wall clock; the rounds alternate 1 and 2
 * threads, and the table gives each layer's median whole backward, input part B, weight part W and (B + W) / whole.
 * Then (tp 1) the same for tensor-parallel layers on 2 simulated ranks (tp_rank), 1 BLAS thread each, rank 0's
 * thread CPU time. Prints numbers only: no timing is checked.
 * Usage: bench_split [rounds] [width] [tp] (default 9, 384 and 1; heads width / 32; tp 0: no tensor-parallel
 * table). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "fsc/fsc.h"
#include "bench_util.h"

enum { NL = 8, T = 64, V = 256, BS = 4, MAXR = 64 };
static const char *const kind[NL] = { "embedding", "linear", "layernorm", "attention", "gelu_mlp", "gpt2_block",
                                      "llama_block", "lm_head+loss" };

/* The clock of a round: the thread's CPU time with 1 thread, else the wall clock (seconds). */
typedef struct {
    int cpu;
    double t0[NL], *acc; /* acc[l]: this pass's time of layer l */
} timer;

static double clock_s(const timer *tm) {
    if (!tm->cpu) return now_s();
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static fsc_status pre_bwd(void *ctx, int l) {
    timer *tm = ctx;
    tm->t0[l] = clock_s(tm);
    return FSC_OK;
}
static fsc_status post_bwd(void *ctx, int l) {
    timer *tm = ctx;
    tm->acc[l] += clock_s(tm) - tm->t0[l];
    return FSC_OK;
}

static fsc_status build(fsc_device *dev, int C, fsc_model **out) {
    fsc_layer *l[NL] = { NULL };
    fsc_status s = fsc_layer_embedding(T, C, V, &l[0]);
    fsc_linear_opts lo = fsc_linear_opts_default(C, C);
    lo.rows = T;
    if (s == FSC_OK) s = fsc_layer_linear(&lo, &l[1]);
    if (s == FSC_OK) s = fsc_layer_layernorm(T, C, &l[2]);
    fsc_attention_opts ao = fsc_attention_opts_default(T, C, C / 32);
    ao.bias = 1, ao.residual = 1;
    if (s == FSC_OK) s = fsc_layer_attention(&ao, &l[3]);
    fsc_mlp_opts mo = fsc_mlp_opts_default(C);
    mo.rows = T, mo.residual = 1;
    if (s == FSC_OK) s = fsc_layer_gelu_mlp(&mo, &l[4]);
    fsc_block_opts bo = fsc_block_opts_default(FSC_BLOCK_GPT2, T, C, C / 32);
    if (s == FSC_OK) s = fsc_layer_block(&bo, &l[5]);
    fsc_block_opts lb = fsc_block_opts_default(FSC_BLOCK_LLAMA, T, C, C / 32);
    if (s == FSC_OK) s = fsc_layer_block(&lb, &l[6]);
    fsc_lm_head_opts ho = { .T = T, .C = C, .V = V, .norm = FSC_HEAD_NORM_LAYERNORM };
    if (s == FSC_OK) s = fsc_layer_lm_head_opts(&ho, &l[7]);
    if (s != FSC_OK) {
        for (int i = 0; i < NL; i++) fsc_layer_free(l[i]);
        return s;
    }
    static const char *pre[NL] = { "emb.", "lin.", "ln.", "attn.", "mlp.", "h.0.", "h.1.", "head." };
    fsc_seq_layer ls[NL];
    for (int i = 0; i < NL; i++) ls[i] = (fsc_seq_layer){ .layer = l[i], .prefix = pre[i] };
    ls[NL - 1].tie[0] = (fsc_layer_tie){ .param = "weight", .to = "emb.wte.weight" };
    return fsc_seq_model_create(dev, ls, NL, out);
}

/* Times model m's first nl layers on dev (cpu: the thread's CPU time, else the wall clock): the forward and the
 * whole backward over a record made without split, the forward, backward_input and backward_weight over one made
 * with split (split_first: the split record first); whole[l], bpart[l], wpart[l] in ms. */
static fsc_status time_layers(fsc_device *dev, fsc_model *m, int nl, int cpu, int split_first, double *whole,
                              double *bpart, double *wpart) {
    fsc_model_acts *a[2] = { NULL, NULL };
    int32_t *tok = malloc(sizeof(int32_t) * BS * T), *tgt = malloc(sizeof(int32_t) * BS * T);
    fsc_status s = tok && tgt ? FSC_OK : fsc_error(FSC_ERR_NOMEM, "bench_split: out of memory");
    for (int t = 0; s == FSC_OK && t < m->n_tensors; t++) {
        const size_t n = m->info[t].numel;
        float *h = malloc(n * sizeof(float));
        if (!h) s = fsc_error(FSC_ERR_NOMEM, "bench_split: out of memory");
        if (s == FSC_OK) m->ops->init_values(m->ctx, 1, t, 0, n, h);
        if (s == FSC_OK) s = fsc_device_calloc(dev, FSC_TAG_PARAMS, n * sizeof(float), (void **)&m->param[t]);
        if (s == FSC_OK) s = fsc_device_calloc(dev, FSC_TAG_GRADS, n * sizeof(float), (void **)&m->grad[t]);
        if (s == FSC_OK) s = fsc_device_upload(dev, m->param[t], h, n * sizeof(float));
        free(h);
    }
    for (int i = 0; tok && tgt && i < BS * T; i++) tok[i] = (i * 31 + 7) % V, tgt[i] = (i * 17 + 3) % V;
    for (int k = 0; s == FSC_OK && k < 2; k++) {
        fsc_model_acts_opts o = { .B = BS, .first = 0, .last = nl - 1, .split = k, .split_tied = k };
        s = m->ops->acts_create(m->ctx, &o, &a[k]);
        if (s == FSC_OK) s = m->ops->set_batch(m->ctx, a[k], tok, tgt);
    }
    timer tm = { .cpu = cpu };
    fsc_model_hooks h = { .ctx = &tm, .pre_backward = pre_bwd, .post_backward = post_bwd }, none = { 0 };
    const float ds = 1.0f / (BS * T);
    for (int i = 0; i < nl; i++) whole[i] = bpart[i] = wpart[i] = 0;
    for (int j = 0; s == FSC_OK && j < 2; j++) {
        const int k = j ^ !split_first; /* 1: the split record */
        s = m->ops->forward(m->ctx, a[k], &none, NULL);
        if (s == FSC_OK && !k) {
            tm.acc = whole;
            s = m->ops->backward(m->ctx, a[k], &h, ds);
        } else if (s == FSC_OK) {
            tm.acc = bpart;
            s = m->ops->backward_input(m->ctx, a[k], &h, ds);
            tm.acc = wpart;
            if (s == FSC_OK) s = m->ops->backward_weight(m->ctx, a[k], &h, ds);
        }
    }
    for (int i = 0; i < nl; i++) whole[i] *= 1e3, bpart[i] *= 1e3, wpart[i] *= 1e3;
    for (int k = 0; k < 2; k++)
        if (a[k]) m->ops->acts_free(m->ctx, a[k]);
    for (int t = 0; t < m->n_tensors; t++) fsc_device_release(dev, m->param[t]), fsc_device_release(dev, m->grad[t]);
    free(tok), free(tgt);
    return s;
}

/* One round on a device of `threads` BLAS threads: whole[l], bpart[l], wpart[l] in ms. */
static fsc_status round_of(int threads, int C, int split_first, double *whole, double *bpart, double *wpart) {
    fsc_device *dev = NULL;
    FSC_TRY(fsc_device_create("cpu", &(fsc_device_opts){ .threads = threads }, &dev));
    fsc_model *m = NULL;
    fsc_status s = build(dev, C, &m);
    if (s == FSC_OK) s = time_layers(dev, m, NL, threads == 1, split_first, whole, bpart, wpart);
    fsc_model_free(m);
    fsc_device_free(dev);
    return s;
}

/* The tensor-parallel layers on a tensor group of 2 simulated ranks (1 BLAS thread each, the rank thread's CPU
 * time): the vocab-parallel embedding, a Llama block (its default MLP width) and a GPT-2 block with separate q/k/v,
 * both split over the group's heads and MLP units, and the vocab-parallel head with its final LayerNorm. */
enum { NTP = 4 };
static const char *const tp_kind[NTP] = { "tp2_embedding", "tp2_llama_blk", "tp2_gpt2_sep", "tp2_lm_head" };
typedef struct {
    int C, split_first;
    double *whole, *bpart, *wpart; /* rank 0's */
} tp_round;

static fsc_status tp_rank(fsc_rank *r, void *arg) {
    const tp_round *tr = arg;
    const int C = tr->C;
    fsc_layer *l[NTP] = { NULL };
    fsc_embedding_opts eo = { .T = T, .C = C, .V = V, .positions = 1, .tp = r->comm };
    fsc_status s = fsc_layer_embedding_opts(&eo, &l[0]);
    fsc_block_opts lb = fsc_block_opts_default(FSC_BLOCK_LLAMA, T, C, C / 32);
    lb.tp = r->comm;
    if (s == FSC_OK) s = fsc_layer_block(&lb, &l[1]);
    fsc_block_opts gb = fsc_block_opts_default(FSC_BLOCK_GPT2, T, C, C / 32);
    gb.separate_qkv = 1, gb.tp = r->comm;
    if (s == FSC_OK) s = fsc_layer_block(&gb, &l[2]);
    fsc_lm_head_opts ho = { .T = T, .C = C, .V = V, .norm = FSC_HEAD_NORM_LAYERNORM, .tp = r->comm };
    if (s == FSC_OK) s = fsc_layer_lm_head_opts(&ho, &l[3]);
    if (s != FSC_OK) {
        for (int i = 0; i < NTP; i++) fsc_layer_free(l[i]);
        return s;
    }
    static const char *pre[NTP] = { "emb.", "h.0.", "h.1.", "head." };
    fsc_seq_layer ls[NTP];
    for (int i = 0; i < NTP; i++) ls[i] = (fsc_seq_layer){ .layer = l[i], .prefix = pre[i] };
    fsc_model *m = NULL;
    FSC_TRY(fsc_seq_model_create(r->dev, ls, NTP, &m));
    double w[NTP], b[NTP], x[NTP];
    s = time_layers(r->dev, m, NTP, 1, tr->split_first, w, b, x);
    if (s == FSC_OK && r->rank == 0)
        for (int i = 0; i < NTP; i++) tr->whole[i] = w[i], tr->bpart[i] = b[i], tr->wpart[i] = x[i];
    fsc_model_free(m);
    return s;
}

/* A row per layer, then "all": the medians over the rounds of whole, B, W and (B + W) / whole. */
static void table(const char *tag, const char *const *names, int nl, double (*w)[MAXR], double (*b)[MAXR],
                  double (*x)[MAXR], double (*r)[MAXR], int rounds) {
    printf("%-14s %9s %9s %9s %9s %9s\n", "layer", "whole ms", "B ms", "W ms", "B+W ms", "(B+W)/whole");
    for (int l = 0; l <= nl; l++) {
        const double mw = median(w[l], rounds), mb = median(b[l], rounds), mx = median(x[l], rounds),
                     mr = median(r[l], rounds);
        const char *name = l < nl ? names[l] : "all";
        printf("%-14s %9.3f %9.3f %9.3f %9.3f %9.3f\n", name, mw, mb, mx, mb + mx, mr);
        printf("RESULT split %s %s whole_ms %.4f b_ms %.4f w_ms %.4f ratio %.4f\n", tag, name, mw, mb, mx, mr);
    }
}

/* Per-layer times of a round (nl layers) into round k of w, b, x, r, with the sums as row nl. */
static void keep_round(int nl, int k, const double *ww, const double *bb, const double *xx, double (*w)[MAXR],
                       double (*b)[MAXR], double (*x)[MAXR], double (*r)[MAXR]) {
    double sw = 0, sb = 0, sx = 0;
    for (int l = 0; l <= nl; l++) {
        const double wl = l < nl ? ww[l] : sw, bl = l < nl ? bb[l] : sb, xl = l < nl ? xx[l] : sx;
        w[l][k] = wl, b[l][k] = bl, x[l][k] = xl, r[l][k] = wl > 0 ? (bl + xl) / wl : 0;
        if (l < nl) sw += wl, sb += bl, sx += xl;
    }
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 9;
    const int C = argc > 2 ? atoi(argv[2]) : 384, tp = argc > 3 ? atoi(argv[3]) : 1;
    if (rounds < 1) rounds = 1;
    if (rounds > MAXR) rounds = MAXR;
    if (C < 32 || C % 32) {
        fprintf(stderr, "bench_split: width %d: a multiple of 32 at least 32\n", C);
        return 2;
    }
    printf("bench_split: backward vs backward_input + backward_weight per layer, width %d, %d heads, context %d, "
           "vocab %d, %d sequences; median of %d rounds (1 thread: CPU time; 2 threads: wall clock)\n", C, C / 32, T,
           V, BS, rounds);
    static double w[2][NL + 1][MAXR], b[2][NL + 1][MAXR], x[2][NL + 1][MAXR], r[2][NL + 1][MAXR];
    static double tw[NTP + 1][MAXR], tb[NTP + 1][MAXR], tx[NTP + 1][MAXR], trr[NTP + 1][MAXR];
    for (int k = 0; k < rounds; k++) {
        for (int th = 0; th < 2; th++) {
            double ww[NL], bb[NL], xx[NL];
            /* the first (warm-up) pass of each round does not count: run the round twice, keep the second */
            for (int rep = 0; rep < 2; rep++)
                if (round_of(th + 1, C, (k + rep) & 1, ww, bb, xx) != FSC_OK) {
                    fprintf(stderr, "bench_split: %s\n", fsc_last_error());
                    return 1;
                }
            keep_round(NL, k, ww, bb, xx, w[th], b[th], x[th], r[th]);
        }
        if (!tp) continue;
        double ww[NTP], bb[NTP], xx[NTP];
        for (int rep = 0; rep < 2; rep++) {
            tp_round tr = { C, (k + rep) & 1, ww, bb, xx };
            fsc_cluster_opts co = { .world = 2, .device = "cpu", .timeout_s = 600, .threads_per_rank = 1 };
            if (fsc_cluster_run(&co, tp_rank, &tr) != FSC_OK) {
                fprintf(stderr, "bench_split: %s\n", fsc_last_error());
                return 1;
            }
        }
        keep_round(NTP, k, ww, bb, xx, tw, tb, tx, trr);
    }
    for (int th = 0; th < 2; th++) {
        char tag[32];
        snprintf(tag, sizeof tag, "threads=%d", th + 1);
        printf("\n%d BLAS thread%s\n", th + 1, th ? "s" : "");
        table(tag, kind, NL, w[th], b[th], x[th], r[th], rounds);
    }
    if (tp) {
        printf("\ntensor parallel, 2 ranks of 1 BLAS thread (rank 0's thread CPU time)\n");
        table("threads=1", tp_kind, NTP, tw, tb, tx, trr, rounds);
    }
    return 0;
}
