/* bench_llama: training throughput of the built-in Llama beside the GPT-2 of the same width, depth, heads,
 * context and batch, on one rank, in one run (alternating steps, so load from other programs falls on both
 * alike). A benchmark, not a test: it prints numbers.
 *
 * Models: 4 layers, width 256, 4 heads, context 128, batch 8, vocabulary 256; the Llama with 2 key/value heads
 * and Llama's ffn rule (768 for width 256; the GPT's MLP is 1024 wide). Tokens/s is the median over the
 * measured steps. bench/torch_llama.py is the PyTorch baseline of the same Llama (ci/bench.sh runs both).
 * Usage: bench_llama [--steps N] [--warmup N] [--threads N] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fsc/fsc.h"
#include "bench_util.h"

typedef struct {
    int steps, warmup, threads, B;
    fsc_gpt_config gc;
    fsc_llama_config lc;
    double *gpt_s, *llama_s; /* (steps) seconds per measured step */
} bench;

static fsc_status bench_fn(fsc_rank *r, void *arg) {
    bench *b = arg;
    fsc_parallel_opts po = {.kind = FSC_PAR_NONE, .reshard_after_forward = -1, .param_dtype = FSC_F32,
                            .reduce_dtype = FSC_F32, .accum = 1, .no_sync = 1, .clip = 1.0f};
    fsc_optim_config oc = {.kind = FSC_OPT_ADAMW, .lr = 1e-3f};
    fsc_engine *eg = NULL, *el = NULL;
    fsc_model *lm = NULL;
    FSC_TRY(fsc_engine_create(r, &b->gc, &po, &oc, 1, &eg));
    fsc_status s = fsc_llama_model_create(r->dev, &b->lc, &lm);
    if (s == FSC_OK) s = fsc_engine_create_model(r, lm, &po, &oc, 1, &el);
    int T = b->gc.seq;
    size_t n = (size_t)b->B * (size_t)T;
    int32_t *tok = malloc(n * sizeof *tok), *tgt = malloc(n * sizeof *tgt);
    if (s == FSC_OK && (!tok || !tgt)) s = fsc_error(FSC_ERR_NOMEM, "bench: out of host memory");
    uint32_t x = 12345;
    for (int step = 0; step < b->warmup + b->steps && s == FSC_OK; step++) {
        for (size_t i = 0; i < n; i++) {
            tok[i] = (int32_t)((x = x * 1664525u + 1013904223u) >> 24);
            tgt[i] = (int32_t)((x = x * 1664525u + 1013904223u) >> 24);
        }
        fsc_step_info gi, li;
        double t0 = now_s();
        s = fsc_engine_step(eg, tok, tgt, b->B, b->B, &gi);
        double t1 = now_s();
        if (s == FSC_OK) s = fsc_engine_step_model(el, tok, tgt, b->B, b->B, &li);
        double t2 = now_s();
        if (s != FSC_OK) break;
        printf("  step %2d%s gpt2 loss %.4f %7.1f ms | llama loss %.4f %7.1f ms\n", step + 1,
               step < b->warmup ? " (warm-up)" : "          ", gi.loss, (t1 - t0) * 1e3, li.loss, (t2 - t1) * 1e3);
        if (step >= b->warmup) b->gpt_s[step - b->warmup] = t1 - t0, b->llama_s[step - b->warmup] = t2 - t1;
    }
    free(tok);
    free(tgt);
    fsc_engine_free(el);
    fsc_model_free(lm);
    fsc_engine_free(eg);
    return s;
}

int main(int argc, char **argv) {
    bench b = {.steps = 10, .warmup = 2, .threads = 0, .B = 8,
               .gc = {.layers = 4, .dim = 256, .heads = 4, .seq = 128, .vocab = 256}};
    b.lc = (fsc_llama_config){.layers = 4, .dim = 256, .heads = 4, .kv_heads = 2, .ffn = fsc_llama_default_ffn(256),
                              .seq = 128, .vocab = 256, .rope_theta = 10000.0f, .norm_eps = 1e-5f};
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && strcmp(argv[i], "--steps") == 0) b.steps = atoi(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--warmup") == 0) b.warmup = atoi(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--threads") == 0) b.threads = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_llama [--steps N] [--warmup N] [--threads N]\n");
            return 2;
        }
    }
    if (b.steps < 1 || b.warmup < 0 || b.threads < 0) {
        fprintf(stderr, "bench_llama: --steps must be >= 1, --warmup and --threads >= 0\n");
        return 2;
    }
    b.gpt_s = calloc((size_t)b.steps, sizeof(double));
    b.llama_s = calloc((size_t)b.steps, sizeof(double));
    if (!b.gpt_s || !b.llama_s) return 1;
    printf("bench_llama: 4 layers, width 256, 4 heads, context 128, batch 8, vocab 256: gpt2 %zu parameters, llama "
           "(2 kv heads, ffn %d) %zu parameters\n", fsc_gpt_num_params(&b.gc), b.lc.ffn, fsc_llama_num_params(&b.lc));
    fsc_status s = fsc_cluster_run(&(fsc_cluster_opts){.world = 1, .threads_per_rank = b.threads}, bench_fn, &b);
    if (s != FSC_OK) {
        fprintf(stderr, "bench_llama: %s\n", fsc_last_error());
        return 1;
    }
    double tokens = (double)b.B * b.gc.seq, g = tokens / median(b.gpt_s, b.steps), l = tokens / median(b.llama_s, b.steps);
    printf("RESULT llama %.0f tokens/s gpt2 %.0f tokens/s ratio %.2f\n", l, g, l / g);
    free(b.gpt_s);
    free(b.llama_s);
    return 0;
}
