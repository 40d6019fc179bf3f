/* bench_offload: what offloading to host memory saves on the device (docs/offload.md). A benchmark, not a
 * test: it prints numbers.
 *
 * A GPT trained for a few steps on the simulated cluster with fsdp full_shard (block units), zero1 and zero2,
 * each with --offload none, optim and all (all: fsdp only). For every run: the largest per-rank peak of the
 * device's ledger per tag (params, grads, optim; the sum of those three peaks), the host ledger's peaks
 * (e->host), the step time without and with a host<->device copy cost (fsc_cluster_opts.sim_copy_gbps: what
 * offload's copies cost where they are not hidden), and the device sum against none's. The ideal of offload all is the working set of
 * the gathered units: the units gathered at once (prefetch: 2) and their full gradients, printed beside it.
 * Then the overlap of the copies (asynchronous with prefetch 1, each waited for where it starts with prefetch 0):
 * fsdp with offload all and optim, zero2 with optim, each with the copy bandwidth set so that a step's copies take
 * as long as its compute (bytes copied per step / the step time without a copy cost). Per run the median step time
 * of rank 0 with prefetch 0 and 1, without and with the copy cost; the copy time exposed (with - without) and the
 * fraction of it prefetch 1 hides, and the same-run ratio of the steps.
 * Usage: bench_offload [--world N] [--layers L] [--dim C] [--steps N] [--copy-gbps G] (default 0.5)
 *                      [--overlap-world N] (the copy overlap rows' world, default 1) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fsc/fsc.h"
#include "bench_util.h"

#define MAX_WORLD 64

typedef struct {
    fsc_gpt_config gc;
    fsc_parallel_opts po;
    int B, steps;
    size_t dev[MAX_WORLD][FSC_TAG_COUNT], host[MAX_WORLD][FSC_TAG_COUNT];
    double sec;         /* rank 0, the steps after the first */
    double step_s[64];  /* rank 0, each step's time */
    size_t up[MAX_WORLD], down[MAX_WORLD]; /* bytes uploaded and downloaded by each rank over the steps after the first */
} run;

static fsc_status rank_fn(fsc_rank *r, void *arg) {
    run *R = arg;
    const int T = R->gc.seq, lb = R->B / r->world;
    fsc_optim_config oc = {.kind = FSC_OPT_ADAMW, .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f};
    fsc_engine *e = NULL;
    fsc_status s = fsc_engine_create(r, &R->gc, &R->po, &oc, 1, &e);
    int32_t *tok = malloc((size_t)lb * T * sizeof(int32_t)), *tgt = malloc((size_t)lb * T * sizeof(int32_t));
    if (s == FSC_OK && (!tok || !tgt)) s = fsc_error(FSC_ERR_NOMEM, "bench_offload: out of host memory");
    double t0 = 0;
    for (int step = 0; step < R->steps && s == FSC_OK; step++) {
        for (int i = 0; i < lb * T; i++) {
            uint32_t x = (uint32_t)(step * 7919 + (r->rank * lb * T + i) * 2654435761u);
            tok[i] = (int32_t)(x >> 24) % R->gc.vocab;
            tgt[i] = (int32_t)((x >> 16) & 255) % R->gc.vocab;
        }
        if (step == 1) {
            t0 = now_s();
            fsc_device_reset_copied(r->dev);
        }
        double ts = now_s();
        s = fsc_engine_step(e, tok, tgt, lb, R->B, NULL);
        if (r->rank == 0 && step < 64) R->step_s[step] = now_s() - ts;
    }
    if (r->rank == 0) R->sec = R->steps > 1 ? (now_s() - t0) / (R->steps - 1) : 0;
    if (r->rank < MAX_WORLD) {
        R->up[r->rank] = fsc_device_copied_bytes(r->dev, 1);
        R->down[r->rank] = fsc_device_copied_bytes(r->dev, 0);
    }
    fsc_device *h = s == FSC_OK ? fsc_engine_host_device(e) : NULL;
    for (int t = 0; t < FSC_TAG_COUNT && r->rank < MAX_WORLD; t++) {
        R->dev[r->rank][t] = fsc_device_peak_bytes(r->dev, (fsc_tag)t);
        R->host[r->rank][t] = h ? fsc_device_peak_bytes(h, (fsc_tag)t) : 0;
    }
    free(tok);
    free(tgt);
    fsc_engine_free(e);
    return s;
}

/* The largest over ranks of a peak. */
static size_t most(size_t (*v)[FSC_TAG_COUNT], int world, fsc_tag t) {
    size_t m = 0;
    for (int r = 0; r < world && r < MAX_WORLD; r++)
        if (v[r][t] > m) m = v[r][t];
    return m;
}

static double mib(size_t b) { return (double)b / 1048576.0; }

/* The median of rank 0's step times after the first. */
static double median_step(const run *R) {
    double v[64];
    int n = 0;
    for (int k = 1; k < R->steps && k < 64; k++) v[n++] = R->step_s[k];
    return median(v, n);
}

/* One training run of R's configuration with prefetch pf and copy bandwidth gbps (0: free): median step time. */
static int timed(run *R, int world, int pf, double gbps, double *sec) {
    R->po.prefetch = pf;
    fsc_cluster_opts co = {.world = world, .device = "cpu", .threads_per_rank = 1, .timeout_s = 600,
                           .sim_copy_gbps = gbps};
    if (fsc_cluster_run(&co, rank_fn, R) != FSC_OK) {
        fprintf(stderr, "bench_offload: %s\n", fsc_last_error());
        return 1;
    }
    *sec = median_step(R);
    return 0;
}

static double median3(double a, double b, double c) {
    return a > b ? (b > c ? b : (a > c ? c : a)) : (a > c ? a : (b > c ? c : b));
}

/* The copies' overlap: prefetch 0 (every copy waited for where it starts) against 1 (asynchronous), with the copy
 * bandwidth at which a step's copies take as long as the step computes. Each of the four runs three times,
 * interleaved, and the median of the three medians is printed (the shared machine's load drifts between runs).
 * world 1 by default: a simulated rank that sleeps through a modelled copy frees its core for the others, so with
 * more rank threads than free cores even synchronous copies would look partly hidden. */
static int overlap_rows(run *R, int world, int steps) {
    const struct { fsc_parallel_kind kind; fsc_offload_mode m; const char *name; } cfg[] = {
        {FSC_PAR_FSDP, FSC_OFFLOAD_ALL, "fsdp full_shard"}, {FSC_PAR_FSDP, FSC_OFFLOAD_OPTIM, "fsdp full_shard"},
        {FSC_PAR_ZERO2, FSC_OFFLOAD_OPTIM, "zero2"}};
    printf("\ncopy overlap, world %d: ms/step of rank 0 (median over %d steps, median of 3 runs); copy GB/s set so a "
           "step's copies take its compute time; exposed = with copies - without\n", world, steps - 1);
    printf("%-16s %-6s %9s %7s | %9s %9s %9s | %9s %9s %9s | %7s %9s\n", "strategy", "mode", "MiB/step", "GB/s",
           "pf0 free", "pf0 copy", "exposed", "pf1 free", "pf1 copy", "exposed", "hidden", "pf0/pf1");
    for (size_t k = 0; k < sizeof cfg / sizeof cfg[0]; k++) {
        R->po = fsc_parallel_opts_default();
        R->po.kind = cfg[k].kind;
        R->po.offload = cfg[k].m;
        R->steps = steps;
        double f1[3], f0[3], c0[3], c1[3];
        if (timed(R, world, 1, 0, &f1[0])) return 1;
        size_t bytes = R->up[0] + R->down[0]; /* rank 0, over the steps after the first */
        double per_step = (double)bytes / (steps - 1);
        double gbps = f1[0] > 0 ? per_step / f1[0] / 1e9 : 1.0;
        for (int i = 0; i < 3; i++)
            if ((i > 0 && timed(R, world, 1, 0, &f1[i])) || timed(R, world, 0, 0, &f0[i]) ||
                timed(R, world, 0, gbps, &c0[i]) || timed(R, world, 1, gbps, &c1[i]))
                return 1;
        double free1 = median3(f1[0], f1[1], f1[2]), free0 = median3(f0[0], f0[1], f0[2]);
        double copy0 = median3(c0[0], c0[1], c0[2]), copy1 = median3(c1[0], c1[1], c1[2]);
        double x0 = copy0 - free0, x1 = copy1 - free1;
        printf("%-16s %-6s %9.2f %7.3f | %9.1f %9.1f %9.1f | %9.1f %9.1f %9.1f | %6.0f%% %8.2fx\n", cfg[k].name,
               fsc_offload_mode_name(cfg[k].m), mib((size_t)per_step), gbps, free0 * 1e3, copy0 * 1e3, x0 * 1e3,
               free1 * 1e3, copy1 * 1e3, x1 * 1e3, x0 > 0 ? 100.0 * (1.0 - x1 / x0) : 0.0, copy1 > 0 ? copy0 / copy1 : 0);
    }
    return 0;
}

int main(int argc, char **argv) {
    int world = 4, layers = 8, dim = 256, steps = 3, overlap_world = 1;
    double copy_gbps = 0.5;
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && !strcmp(argv[i], "--world")) world = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--layers")) layers = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--dim")) dim = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--steps")) steps = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--copy-gbps")) copy_gbps = atof(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--overlap-world")) overlap_world = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_offload [--world N] [--layers L] [--dim C] [--steps N] [--copy-gbps G] "
                            "[--overlap-world N]\n");
            return 2;
        }
    }
    if (world < 1 || world > MAX_WORLD || overlap_world < 1 || overlap_world > MAX_WORLD || layers < 1 || dim < 8 ||
        steps < 2 || !(copy_gbps > 0)) {
        fprintf(stderr, "bench_offload: world and overlap world 1..%d, layers >= 1, dim >= 8, steps >= 2\n", MAX_WORLD);
        return 2;
    }
    static run R;
    memset(&R, 0, sizeof R);
    R.gc = (fsc_gpt_config){.layers = layers, .dim = dim, .heads = dim / 64 > 0 ? dim / 64 : 1, .seq = 64,
                            .vocab = 4096};
    R.B = 2 * world;
    R.steps = steps;
    const size_t P = fsc_gpt_num_params(&R.gc);
    size_t block = 0, root = 0; /* one block's parameters (a unit), the root unit's (embedding, head) */
    fsc_param_info pi;
    for (int i = 0; i < fsc_gpt_num_tensors(&R.gc); i++) {
        if (fsc_gpt_param_info(&R.gc, i, &pi) != FSC_OK) continue;
        if (pi.layer == 1) block += pi.numel;
        if (pi.layer == 0 || pi.layer == layers + 1) root += pi.numel;
    }
    /* gathered at once: the root (gathered for the whole step) and 2 blocks (prefetch limit 2), each with its
     * full gradient during backward */
    const size_t working = 2 * (root + 2 * block) * sizeof(float);
    printf("bench_offload: GPT %d layers, dim %d, vocab %d: %.2f M parameters (%.2f MiB fp32, a block %.2f MiB); "
           "world %d, AdamW, %d steps\n", layers, dim, R.gc.vocab, (double)P / 1e6, mib(P * 4), mib(block * 4),
           world, steps);
    printf("per-rank peak MiB (the largest rank), device ledger | host ledger\n");
    printf("ms/step: without a copy cost, and with host<->device copies at %g GB/s\n", copy_gbps);
    printf("%-20s %-6s %8s %8s %8s %9s | %8s %8s %8s | %8s %9s | %8s | %s\n", "strategy", "mode", "params", "grads",
           "optim", "p+g+o", "h.params", "h.grads", "h.optim", "ms/step", "copies", "vs none", "MiB/step up, down");
    const struct { fsc_parallel_kind kind; const char *name; int all; } strat[] = {
        {FSC_PAR_FSDP, "fsdp full_shard", 1}, {FSC_PAR_ZERO1, "zero1", 0}, {FSC_PAR_ZERO2, "zero2", 0}};
    for (size_t k = 0; k < sizeof strat / sizeof strat[0]; k++) {
        size_t base = 0;
        for (int m = FSC_OFFLOAD_NONE; m <= (strat[k].all ? FSC_OFFLOAD_ALL : FSC_OFFLOAD_OPTIM); m++) {
            R.po = fsc_parallel_opts_default();
            R.po.kind = strat[k].kind;
            R.po.offload = (fsc_offload_mode)m;
            memset(R.dev, 0, sizeof R.dev);
            memset(R.host, 0, sizeof R.host);
            fsc_cluster_opts co = {.world = world, .device = "cpu", .threads_per_rank = 1, .timeout_s = 600};
            if (fsc_cluster_run(&co, rank_fn, &R) != FSC_OK) {
                fprintf(stderr, "bench_offload: %s\n", fsc_last_error());
                return 1;
            }
            const double sec = R.sec;
            static run C; /* the same run with a copy cost (its memory is the same) */
            C = R;
            co.sim_copy_gbps = copy_gbps;
            if (fsc_cluster_run(&co, rank_fn, &C) != FSC_OK) {
                fprintf(stderr, "bench_offload: %s\n", fsc_last_error());
                return 1;
            }
            size_t p = most(R.dev, world, FSC_TAG_PARAMS), g = most(R.dev, world, FSC_TAG_GRADS),
                   o = most(R.dev, world, FSC_TAG_OPTIM);
            if (m == FSC_OFFLOAD_NONE) base = p + g + o;
            size_t up = 0, down = 0; /* the largest rank's */
            for (int r = 0; r < world && r < MAX_WORLD; r++) {
                if (R.up[r] > up) up = R.up[r];
                if (R.down[r] > down) down = R.down[r];
            }
            printf("%-20s %-6s %8.2f %8.2f %8.2f %9.2f | %8.2f %8.2f %8.2f | %8.1f %9.1f | %7.2fx | %6.2f, %6.2f\n",
                   strat[k].name, fsc_offload_mode_name((fsc_offload_mode)m), mib(p), mib(g), mib(o), mib(p + g + o),
                   mib(most(R.host, world, FSC_TAG_PARAMS)), mib(most(R.host, world, FSC_TAG_GRADS)),
                   mib(most(R.host, world, FSC_TAG_OPTIM)), sec * 1e3, C.sec * 1e3,
                   base ? (double)(p + g + o) / base : 0.0, mib(up) / (steps - 1), mib(down) / (steps - 1));
            size_t hosted = most(R.host, world, FSC_TAG_PARAMS) + most(R.host, world, FSC_TAG_GRADS) +
                            most(R.host, world, FSC_TAG_OPTIM);
            if (m == FSC_OFFLOAD_ALL)
                printf("RESULT offload all: device params+grads+optim %.2f MiB = %.2fx none; none's %.2f MiB less the "
                       "%.2f MiB now on the host is %.2f MiB (the rest: reduced shards in transit); the gathered units "
                       "(the root and 2 blocks, parameters and full gradients) are %.2f MiB\n", mib(p + g + o),
                       base ? (double)(p + g + o) / base : 0.0, mib(base), mib(hosted),
                       mib(base > hosted ? base - hosted : 0), mib(working));
        }
    }
    R.B = 2 * overlap_world;
    return overlap_rows(&R, overlap_world, steps > 5 ? steps : 5);
}
