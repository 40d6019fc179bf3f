/* bench_pipe: the measured pipeline bubble beside the ideal (P-1)/(M+P-1), for GPipe and 1F1B over a few
 * (P, M), on the simulated cluster (one thread per stage, one BLAS thread each), with the first stage's
 * peak activation memory (1F1B holds P micro-batches there, GPipe M).
 * The bubble of a stage is its idle fraction: time waiting in recv and in the closing loss broadcast over
 * the schedule's wall time (fsc_engine_pipe_stats). The ideal assumes equal stages, free communication
 * and a core per stage: on the wall clock, with more stages than cores, the stages share cores and the numbers mean less.
 * Balances come from fsc_balance_by_time.
 * Then, on a simulated network (--sim-bandwidth/--sim-latency's options) on which sending one micro-batch's
 * boundary activations takes about as long as a stage's compute of it: the step time with prefetch 0 (every
 * boundary message synchronous) and 1 (sends asynchronous, receives posted a micro-batch ahead;
 * docs/overlap.md), in alternating rounds, and their ratio per round (same run; the median is printed), with
 * checkpoint never and except_last.
 * Then the schedules side by side on such a network: P = 4, M = 8, GPipe, 1F1B, interleaved 1F1B with 2
 * chunks per rank, ZB-H1 and ZBV (prefetch on), each with its step time, measured bubble, every stage's peak
 * activations and most records in flight, and its formula ((P-1)/(M+P-1); interleaved (P-1)/(v M+P-1); ZB-H1
 * (P-1)/(3M+P-1) and ZBV (P-1)/(6M+P-1), its fill, which assume equal F, B and W), beside the bubble-free step: one rank's step of the
 * same M micro-batches (no pipeline) divided by P.
 * Last, 1F1B, interleaved, ZB-H1 and ZBV without a network (compute only, where the split backward's bubble is),
 * P = 2, M = 4 and P = 4, M = 8, in alternating rounds (the median of the step times and of the mean bubbles is
 * printed, and of each step over a bubble-free step measured just before it), with the bubble-free step as above, and
 * for 1F1B and interleaved the bound: the least mean bubble any
 * schedule could have with the stages' measured times (stage_bound; the formula when the stages are equal).
 * Every time is on the simulated cluster's virtual clock (cluster.h, docs/overlap.md): each stage's computation
 * is its own thread's CPU time, as if it had a core to itself, so four stages on a 2-core machine shared with
 * other programs measure what four devices would; the last argument "wall" measures on the machine's clock. On the
 * virtual clock every rank's thread runs on one core (pin_to_one_core; BENCH_PIPE_NO_PIN=1: not), so that no rank's
 * time includes the slowdown of another running beside it.
 * Usage: bench_pipe [steps] [rounds] [schedules|zb|zb-mlp|all] [virtual|wall] [width] [P] [vocab] [blocks] [mb]
 * (default 4 and 3, all, virtual, 128, both, 256, 8, 4; mb: the last table's sequences per micro-batch, the more the
 * larger each matrix product; the first step is not timed; blocks: of the last two tables' model, the more a
 * chunk holds, the less its embedding's and head's share; "schedules": only the third table, "zb" only the last, of a
 * model of that width: the wider, the more of a block's time is its matrix products, whose weight gradients W are;
 * "zb-mlp": the last table of an MLP stack instead of the GPT (mlp_stack: no attention, F, B and W about equal);
 * P: the last table's case of P stages only, 2 or 4, 0 both; and of that vocabulary: the larger, the more of the
 * last stage's time is the tied head's). The last table also prints every stage's peak activations and its F, B
 * and W time per step (fsc_pipe_stats.action_s), and ZB-H1's bubble over 1F1B's. */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "fsc/fsc.h"
#include "bench_util.h"

static int sim_clock = FSC_SIM_CLOCK_VIRTUAL; /* main's last argument */

typedef struct {
    fsc_gpt_config cfg;
    fsc_parallel_opts po;
    int steps, mb;
    int mlp; /* 1: the MLP stack of mlp_stack() with cfg's sizes instead of the GPT */
    double gbps, lat_us; /* the simulated network (0: none) */
    fsc_pipe_stats st[16];
    size_t ledger[16]; /* the device ledger's activation peak per rank (FSC_TAG_ACTS, since the engine was made) */
    double ms;        /* per timed step, rank 0 */
} bench;

/* A language model without attention: a token embedding, cfg->layers GELU MLPs (C -> 4C -> C, residual) and an LM
 * head with a LayerNorm (not tied). A block's forward, input gradient and weight gradient are two matrix products
 * each, so F, B and W are about equal, as the zero-bubble schedules' formulas assume; a GPT block's attention
 * (its per-head products and softmax) and its norms have no W. */
static fsc_status mlp_stack(fsc_device *dev, const fsc_gpt_config *cfg, fsc_model **out) {
    enum { MAXL = 66 };
    fsc_layer *l[MAXL] = { 0 };
    fsc_seq_layer ls[MAXL];
    char names[MAXL][24];
    const int T = cfg->seq, C = cfg->dim, n = cfg->layers + 2;
    fsc_status s = fsc_layer_token_embedding(T, C, cfg->vocab, &l[0]);
    for (int i = 1; s == FSC_OK && i <= cfg->layers; i++) {
        fsc_mlp_opts mo = fsc_mlp_opts_default(C);
        mo.rows = T, mo.residual = 1;
        s = fsc_layer_gelu_mlp(&mo, &l[i]);
    }
    fsc_lm_head_opts ho = { .T = T, .C = C, .V = cfg->vocab, .norm = FSC_HEAD_NORM_LAYERNORM, .eps = 1e-5f };
    if (s == FSC_OK) s = fsc_layer_lm_head_opts(&ho, &l[n - 1]);
    for (int i = 0; i < n; i++) {
        snprintf(names[i], sizeof names[i], i == 0 ? "emb." : i == n - 1 ? "head." : "mlp.%d.", i - 1);
        ls[i] = (fsc_seq_layer){ .layer = l[i], .prefix = names[i] };
    }
    if (s == FSC_OK) return fsc_seq_model_create(dev, ls, n, out); /* it takes the layers, also when it fails */
    for (int i = 0; i < n; i++) fsc_layer_free(l[i]);
    return s;
}

static fsc_status rank_fn(fsc_rank *r, void *arg) {
    bench *b = arg;
    const int T = b->cfg.seq, B = b->po.accum * b->mb;
    fsc_optim_config oc = { .kind = FSC_OPT_ADAMW, .lr = 1e-3f };
    fsc_engine *e = NULL;
    fsc_model *m = NULL;
    if (b->mlp) {
        FSC_TRY(mlp_stack(r->dev, &b->cfg, &m));
        fsc_status cs = fsc_engine_create_model(r, m, &b->po, &oc, 1, &e);
        if (cs != FSC_OK) {
            fsc_model_free(m);
            return cs;
        }
    } else {
        FSC_TRY(fsc_engine_create(r, &b->cfg, &b->po, &oc, 1, &e));
    }
    int32_t *tok = malloc((size_t)B * T * sizeof(int32_t));
    fsc_status s = tok ? FSC_OK : fsc_error(FSC_ERR_NOMEM, "bench: out of memory");
    for (int i = 0; tok && i < B * T; i++) tok[i] = (int32_t)((i * 31 + 7) % b->cfg.vocab);
    double t0 = 0;
    for (int step = 0; step < b->steps && s == FSC_OK; step++) {
        if (step == 1) { /* the first step allocates the pools: not timed */
            fsc_engine_reset_pipe_stats(e);
            t0 = 1e3 * now_s();
        }
        s = m ? fsc_engine_step_model(e, tok, tok, B, B, NULL) : fsc_engine_step(e, tok, tok, B, B, NULL);
    }
    if (s == FSC_OK && r->rank == 0) b->ms = (1e3 * now_s() - t0) / (b->steps - 1);
    if (s == FSC_OK) s = fsc_engine_pipe_stats(e, &b->st[r->rank]);
    b->ledger[r->rank] = fsc_device_peak_bytes(r->dev, FSC_TAG_ACTS);
    free(tok);
    fsc_engine_free(e);
    fsc_model_free(m);
    return s;
}

/* One configuration's ms per step, or < 0 after printing the error. */
static double step_ms(bench *b, int P) {
    fsc_cluster_opts co = { .world = P, .device = "cpu", .threads_per_rank = 1, .timeout_s = 600,
                            .sim_bandwidth_gbps = b->gbps, .sim_latency_us = b->lat_us, .sim_clock = sim_clock };
    if (fsc_cluster_run(&co, rank_fn, b) != FSC_OK) {
        fprintf(stderr, "bench_pipe: %s\n", fsc_last_error());
        return -1;
    }
    return b->ms;
}

/* Prefetch 0 against 1 on a network: 2 stages, 8 micro-batches of 4 sequences, never checkpointed and
 * checkpointed except the last (whose outputs leave from a send buffer, docs/overlap.md). */
static int network(const fsc_gpt_config *cfg, const int *balance, int steps, int rounds) {
    const int P = 2, M = 8, mb = 4;
    const double bytes = (double)mb * cfg->seq * cfg->dim * sizeof(float);
    bench c = { .cfg = *cfg, .steps = steps, .mb = mb };
    c.po = (fsc_parallel_opts){ .kind = FSC_PAR_DDP, .pp = P, .accum = M, .no_sync = 1,
                                .schedule = FSC_SCHED_1F1B, .pipe_checkpoint = FSC_PIPE_CKPT_NEVER,
                                .balance = balance };
    double t_c = step_ms(&c, P); /* compute alone: one micro-batch's stage forward+backward ~ t_c / (M + 1) */
    if (t_c < 0) return 1;
    /* a message (a + bytes / b) about one stage forward: a third of a micro-batch's forward + backward */
    const double msg_ms = t_c / (M + P - 1) / 3, lat_us = msg_ms * 1e3 / 4 < 20 ? msg_ms * 1e3 / 4 : 20;
    const double gbps = bytes / ((msg_ms - lat_us * 1e-3) * 1e-3) / 1e9;
    printf("\nnetwork: %.3f GB/s, %.0f us per link (a boundary message %.2f ms, %.0f KiB); P %d, M %d, 1f1b and "
           "gpipe; compute alone %.1f ms/step\n", gbps, lat_us, msg_ms, bytes / 1024, P, M, t_c);
    printf("%-6s %-11s %12s %12s %10s\n", "sched", "checkpoint", "pf0 ms", "pf1 ms", "pf1/pf0");
    for (int v = 0; v < 4; v++) {
        const int sc = v % 2;
        const fsc_pipe_checkpoint ck = v < 2 ? FSC_PIPE_CKPT_NEVER : FSC_PIPE_CKPT_EXCEPT_LAST;
        const char *ckn = v < 2 ? "never" : "except_last";
        double r[16], t0s = 0, t1s = 0;
        if (rounds > 16) rounds = 16;
        for (int k = 0; k < rounds; k++) {
            double t[2];
            for (int pf = 0; pf < 2; pf++) {
                bench b = c;
                b.gbps = gbps;
                b.lat_us = lat_us;
                b.po.schedule = (fsc_pipe_schedule)sc;
                b.po.pipe_checkpoint = ck;
                b.po.prefetch = pf;
                if ((t[pf] = step_ms(&b, P)) < 0) return 1;
            }
            r[k] = t[1] / t[0];
            t0s += t[0] / rounds, t1s += t[1] / rounds;
        }
        qsort(r, (size_t)rounds, sizeof r[0], cmp_double);
        printf("%-6s %-11s %12.1f %12.1f %10.3f\n", sc ? "1f1b" : "gpipe", ckn, t0s, t1s, r[rounds / 2]);
        printf("RESULT pipe_net %s ckpt %s pf0_ms %.2f pf1_ms %.2f ratio %.4f\n", sc ? "1f1b" : "gpipe", ckn, t0s,
               t1s, r[rounds / 2]);
        fflush(stdout);
    }
    return 0;
}

/* The bubble-free step of P stages: one rank's step over the same M micro-batches (no pipeline, no network) / P. */
static double ideal_ms(const fsc_gpt_config *cfg, int mlp, int steps, int M, int mb, int P) {
    bench one = { .cfg = *cfg, .steps = steps, .mb = mb, .mlp = mlp };
    one.po = (fsc_parallel_opts){ .kind = FSC_PAR_DDP, .pp = 1, .accum = M, .no_sync = 1, .prefetch = 1 };
    const double t = step_ms(&one, 1);
    return t < 0 ? t : t / P;
}

/* GPipe, 1F1B, interleaved (v = 2), ZB-H1 and ZBV on a network as network()'s, scaled to P = 4: one boundary message a
 * third of a micro-batch's stage forward and backward (compute alone measured with 1F1B). */
static int schedules(const fsc_gpt_config *cfg, int steps) {
    const int P = 4, M = 8, mb = 4, V = 2;
    const double bytes = (double)mb * cfg->seq * cfg->dim * sizeof(float);
    bench c = { .cfg = *cfg, .steps = steps, .mb = mb };
    c.po = (fsc_parallel_opts){ .kind = FSC_PAR_DDP, .pp = P, .accum = M, .no_sync = 1, .prefetch = 1,
                                .schedule = FSC_SCHED_1F1B, .pipe_checkpoint = FSC_PIPE_CKPT_NEVER };
    const double t_c = step_ms(&c, P);
    if (t_c < 0) return 1;
    const double msg_ms = t_c / (M + P - 1) / 3, lat_us = msg_ms * 1e3 / 4 < 20 ? msg_ms * 1e3 / 4 : 20;
    const double gbps = bytes / ((msg_ms - lat_us * 1e-3) * 1e-3) / 1e9;
    printf("\nschedules: P %d, M %d, even balance, prefetch 1, checkpoint never; network %.3f GB/s, %.0f us per link "
           "(a boundary message %.2f ms); 1f1b compute alone %.1f ms/step\n", P, M, gbps, lat_us, msg_ms, t_c);
    const double ideal = ideal_ms(cfg, 0, steps, M, mb, P);
    if (ideal < 0) return 1;
    printf("bubble-free step (one rank's step / P): %.1f ms\n", ideal);
    printf("%-12s %8s %9s  %-24s %-24s %-12s %9s %7s\n", "sched", "formula", "measured", "bubble per stage",
           "acts MiB per stage", "records", "ms/step", "/ideal");
    const char *names[] = { "gpipe", "1f1b", "interleaved", "zb-h1", "zbv" };
    const fsc_pipe_schedule kinds[] = { FSC_SCHED_GPIPE, FSC_SCHED_1F1B, FSC_SCHED_INTERLEAVED, FSC_SCHED_ZB_H1,
                                        FSC_SCHED_ZBV };
    for (int sc = 0; sc < 5; sc++) {
        bench b = c;
        b.gbps = gbps;
        b.lat_us = lat_us;
        b.po.schedule = kinds[sc];
        b.po.virtual_stages = kinds[sc] == FSC_SCHED_INTERLEAVED ? V : 0;
        if (step_ms(&b, P) < 0) return 1;
        double mean = 0;
        char per[64] = "", acts[64] = "", recs[32] = "", *w = per, *x = acts, *y = recs;
        for (int s = 0; s < P; s++) {
            mean += b.st[s].bubble / P;
            w += snprintf(w, sizeof per - (size_t)(w - per), "%s%.3f", s ? " " : "", b.st[s].bubble);
            x += snprintf(x, sizeof acts - (size_t)(x - acts), "%s%.1f", s ? " " : "",
                          (double)b.st[s].peak_acts_bytes / 1048576.0);
            y += snprintf(y, sizeof recs - (size_t)(y - recs), "%s%d", s ? " " : "", b.st[s].max_full_records);
        }
        printf("%-12s %8.3f %9.3f  %-24s %-24s %-12s %9.1f %7.2f\n", names[sc], b.st[0].ideal_bubble, mean, per, acts,
               recs, b.ms, b.ms / ideal);
        printf("RESULT pipe_sched P=%d M=%d %s measured %.4f ideal %.4f ms %.2f vs_bubble_free %.3f\n", P, M,
               names[sc], mean, b.st[0].ideal_bubble, b.ms, b.ms / ideal);
        fflush(stdout);
    }
    return 0;
}

/* The least mean bubble any list of F and B actions could have with these stages' times, for stages in a loop (rank
 * r's first chunk is stage r) without W actions (GPipe, 1F1B, interleaved; -1 for the others): rank r's first action
 * waits for micro-batch 0's forward through the r stages before it, and its last, a backward of its first chunk, is
 * followed by the r backwards below it, so the step is at least max over r of (the forward and backward of every
 * rank q < r) + rank r's busy time (its step less its waits). A stage's forward and backward are estimated as its
 * rank's mean per action (fsc_pipe_stats.action_s over its v M forwards and backwards). With equal stages it is the
 * formula; with the head's work on the last stage and the embedding's on the first it says how much of the
 * measured bubble is theirs and how much the schedule's (and the actions' jitter). */
static double stage_bound(const fsc_pipe_stats *st, int P, int v, int M, fsc_pipe_schedule kind) {
    if (kind != FSC_SCHED_GPIPE && kind != FSC_SCHED_1F1B && kind != FSC_SCHED_INTERLEAVED) return -1;
    double prefix = 0, step = 0, busy = 0;
    for (int r = 0; r < P; r++) {
        const double n = st[r].steps > 0 ? st[r].steps : 1, c = (st[r].wall_s - st[r].wait_s) / n;
        step = prefix + c > step ? prefix + c : step;
        busy += c / P;
        prefix += (st[r].action_s[FSC_ACT_FORWARD] + st[r].action_s[FSC_ACT_BACKWARD]) / n / ((double)v * M);
    }
    return step > 0 ? 1 - busy / step : 0;
}

/* 1F1B, ZB-H1 and ZBV without a network, even balance, prefetch 1, checkpoint never: rounds of each, the median
 * step time and mean bubble of each, beside the bubble-free step (the median over the rounds too). */
static int zero_bubble(const fsc_gpt_config *cfg, int mlp, int steps, int rounds, int only_p, int mbs) {
    const int cases[][2] = { { 2, 4 }, { 4, 8 } };
    static const fsc_pipe_schedule kinds[] = { FSC_SCHED_1F1B, FSC_SCHED_ZB_H1, FSC_SCHED_INTERLEAVED, FSC_SCHED_ZBV };
    static const char *const names[] = { "1f1b", "zb-h1", "interleaved", "zbv" }; /* zb-h1 next to 1f1b */
    printf("\n1f1b, interleaved, zb-h1 and zbv, %s of %d blocks, width %d, vocab %d, no network, even balance, "
           "prefetch 1, checkpoint never, micro-batches of %d sequences; median of %d rounds\n",
           mlp ? "MLP stack" : "GPT", cfg->layers, cfg->dim, cfg->vocab, mbs, rounds);
    printf("%-3s %-3s %-11s %8s %8s %9s %12s %9s %7s\n", "P", "M", "sched", "formula", "bound", "measured", "acts0 MiB",
           "ms/step", "/ideal");
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int P = cases[c][0], M = cases[c][1];
        if (only_p && P != only_p) continue;
        double ms[4][16], bub[4][16], bound[4][16], formula[4] = { 0, 0, 0, 0 }, acts[4] = { 0, 0, 0, 0 }, ideal[16];
        double vs[4][16], zb_tw[16]; /* per round: step / the bubble-free step just before; zb-h1's waits / 1f1b's */
        fsc_pipe_stats last[4][16]; /* every stage's of the last round */
        size_t ledger[4][16];
        for (int round = 0; round < rounds && round < 16; round++) {
            if ((ideal[round] = ideal_ms(cfg, mlp, steps, M, mbs, P)) < 0) return 1;
            for (int z = 0; z < 4; z++) {
                /* each schedule's step over a bubble-free step measured just before it: the machine's speed
                 * drifts between runs a minute apart by more than the differences measured here */
                const double id = z == 0 ? ideal[round] : ideal_ms(cfg, mlp, steps, M, mbs, P);
                if (id < 0) return 1;
                bench b = { .cfg = *cfg, .steps = steps, .mb = mbs, .mlp = mlp };
                b.po = (fsc_parallel_opts){ .kind = FSC_PAR_DDP, .pp = P, .accum = M, .no_sync = 1, .prefetch = 1,
                                            .schedule = kinds[z], .pipe_checkpoint = FSC_PIPE_CKPT_NEVER,
                                            .virtual_stages = kinds[z] == FSC_SCHED_INTERLEAVED ? 2 : 0 };
                if (step_ms(&b, P) < 0) return 1;
                double mean = 0;
                for (int s = 0; s < P; s++) mean += b.st[s].bubble / P;
                ms[z][round] = b.ms, bub[z][round] = mean, vs[z][round] = b.ms / id;
                bound[z][round] = stage_bound(b.st, P, b.po.virtual_stages ? b.po.virtual_stages : 1, M, kinds[z]);
                formula[z] = b.st[0].ideal_bubble, acts[z] = (double)b.st[0].peak_acts_bytes / 1048576.0;
                memcpy(last[z], b.st, (size_t)P * sizeof b.st[0]);
                memcpy(ledger[z], b.ledger, (size_t)P * sizeof b.ledger[0]);
            }
            zb_tw[round] = bub[1][round] * ms[1][round] / (bub[0][round] * ms[0][round]);
        }
        const int n = rounds < 16 ? rounds : 16;
        qsort(ideal, (size_t)n, sizeof(double), cmp_double);
        qsort(zb_tw, (size_t)n, sizeof(double), cmp_double);
        printf("%-3d %-3d %-11s %8s %8s %9s %12s %9.1f\n", P, M, "ideal", "", "", "", "", ideal[n / 2]);
        for (int z = 0; z < 4; z++) {
            qsort(ms[z], (size_t)n, sizeof(double), cmp_double);
            qsort(bub[z], (size_t)n, sizeof(double), cmp_double);
            qsort(bound[z], (size_t)n, sizeof(double), cmp_double);
            qsort(vs[z], (size_t)n, sizeof(double), cmp_double);
            char bd[16] = "-";
            if (bound[z][n / 2] >= 0) snprintf(bd, sizeof bd, "%.3f", bound[z][n / 2]);
            printf("%-3d %-3d %-11s %8.3f %8s %9.3f %12.2f %9.1f %7.3f  (rounds %.3f .. %.3f)\n", P, M, names[z],
                   formula[z], bd, bub[z][n / 2], acts[z], ms[z][n / 2], vs[z][n / 2], vs[z][0], vs[z][n - 1]);
            printf("RESULT pipe_zb P=%d M=%d %s measured %.4f ideal %.4f ms %.2f vs_bubble_free %.3f%s%s\n", P, M,
                   names[z], bub[z][n / 2], formula[z], ms[z][n / 2], vs[z][n / 2],
                   bound[z][n / 2] >= 0 ? " bound " : "", bound[z][n / 2] >= 0 ? bd : "");
            /* the last round's stages: peak activations, and F, B, W per step (compute, waits excluded) */
            double most = 0;
            printf("    acts MiB");
            for (int st = 0; st < P; st++) {
                const double mib = (double)last[z][st].peak_acts_bytes / 1048576.0;
                most = mib > most ? mib : most;
                printf(" %.1f", mib);
            }
            printf(" (most %.1f; the ledger's", most);
            for (int st = 0; st < P; st++) printf(" %.1f", (double)ledger[z][st] / 1048576.0);
            printf("); F/B/W ms per step:");
            for (int st = 0; st < P; st++) {
                const fsc_pipe_stats *x = &last[z][st];
                const double k = x->steps ? 1e3 / x->steps : 0;
                printf(" %.1f/%.1f/%.1f", x->action_s[0] * k, x->action_s[1] * k, x->action_s[2] * k);
            }
            printf("\n");
            printf("RESULT pipe_zb_acts P=%d M=%d %s most_mib %.2f first_mib %.2f\n", P, M, names[z], most, acts[z]);
        }
        /* ZB-H1 against 1F1B: as fractions of their own steps, and as time waited per step */
        printf("    zb-h1 / 1f1b bubble: %.3f as fractions (medians), %.3f in time waited per step (the median of the "
               "rounds' ratios, %.3f .. %.3f)\n", bub[1][n / 2] / bub[0][n / 2], zb_tw[n / 2], zb_tw[0], zb_tw[n - 1]);
        /* the least ratio any list holding 1F1B's P micro-batches on the first stage has with its action times
         * (docs/pipeline.md): (F+B-W)/(F+B+W), from the last round's first stage under zb-h1 */
        const double *a = last[1][0].action_s, fbw = a[0] + a[1] + a[2];
        if (fbw > 0)
            printf("    zb-h1's floor at 1F1B's memory (F+B-W)/(F+B+W) on the first stage: %.3f (W/(F+B) %.3f; 0.4 "
                   "needs W/(F+B) >= 3/7 = 0.429)\n", (a[0] + a[1] - a[2]) / fbw, a[2] / (a[0] + a[1]));
        fflush(stdout);
    }
    return 0;
}

/* On the virtual clock a stage's time is its thread's CPU time. Threads of ranks running at once on the machine's
 * cores slow each other (caches, memory bandwidth) and so lengthen each other's CPU time by as much as a fifth
 * from one schedule to the next; on one core one rank runs at a time and each action's time is its own. The
 * ranks' threads inherit the main thread's affinity: it is set to the core it runs on. */
static void pin_to_one_core(void) {
    const int cpu = sched_getcpu();
    cpu_set_t set;
    CPU_ZERO(&set);
    if (cpu >= 0) CPU_SET(cpu, &set);
    if (cpu >= 0 && sched_setaffinity(0, sizeof set, &set) == 0)
        printf("bench_pipe: every rank's thread on cpu %d, one at a time (BENCH_PIPE_NO_PIN=1: on every core)\n", cpu);
    else
        printf("bench_pipe: could not keep the ranks on one core; their times may include each other's contention\n");
}

/* argv[i] as a whole number in [lo, hi], def where absent; 0, or -1 after a message naming the argument (atoi
 * read "x" as 0, "4x" as 4 and 99999999999 as 1215752191, and ran on them without a word). */
static int arg_int(int argc, char **argv, int i, const char *what, int def, long lo, long hi, int *out) {
    if (argc <= i) return *out = def, 0;
    char *end = NULL;
    errno = 0;
    const long x = strtol(argv[i], &end, 10);
    if (!argv[i][0] || *end || errno || x < lo || x > hi) {
        fprintf(stderr, "bench_pipe: %s '%s': a whole number from %ld to %ld\n", what, argv[i], lo, hi);
        return -1;
    }
    return *out = (int)x, 0;
}

int main(int argc, char **argv) {
    if (argc > 10) {
        fprintf(stderr, "bench_pipe: %d arguments, at most 9: [steps] [rounds] [schedules|zb|zb-mlp|all] "
                "[virtual|wall] [width] [P] [vocab] [blocks] [mb]\n", argc - 1);
        return 2;
    }
    int steps, rounds, only_p, width, vocab, blocks, mbs;
    if (arg_int(argc, argv, 1, "steps", 4, 0, 1000000, &steps) ||
        arg_int(argc, argv, 2, "rounds", 3, 0, 1000000, &rounds) ||
        arg_int(argc, argv, 5, "width", 128, 32, 1 << 16, &width) ||
        arg_int(argc, argv, 6, "P", 0, 0, 4, &only_p) ||
        arg_int(argc, argv, 7, "vocab", 256, 2, 1 << 24, &vocab) ||
        arg_int(argc, argv, 8, "blocks (every one of 4 x 2 chunks needs one)", 8, 8, 64, &blocks) ||
        arg_int(argc, argv, 9, "micro-batch sequences", 4, 1, 64, &mbs))
        return 2;
    if (steps < 2) steps = 2; /* the first step is not timed */
    if (rounds < 1) rounds = 1;
    const char *mode = argc > 3 ? argv[3] : "all";
    if (strcmp(mode, "schedules") && strcmp(mode, "zb") && strcmp(mode, "zb-mlp") && strcmp(mode, "all")) {
        fprintf(stderr, "bench_pipe: %s: the tables are schedules, zb, zb-mlp or all\n", mode);
        return 2;
    }
    if (argc > 4 && strcmp(argv[4], "virtual") && strcmp(argv[4], "wall")) {
        fprintf(stderr, "bench_pipe: clock %s: virtual or wall\n", argv[4]);
        return 2;
    }
    if (argc > 4 && !strcmp(argv[4], "wall")) sim_clock = FSC_SIM_CLOCK_WALL;
    if (only_p != 0 && only_p != 2 && only_p != 4) {
        fprintf(stderr, "bench_pipe: P %s: 2 or 4 (the last table's cases), 0 both\n", argv[6]);
        return 2;
    }
    if (width % 32) {
        fprintf(stderr, "bench_pipe: width %d: a multiple of 32 (heads of 32)\n", width);
        return 2;
    }
    printf("bench_pipe: times on the %s clock\n", sim_clock == FSC_SIM_CLOCK_WALL ? "wall" : "virtual");
    if (sim_clock == FSC_SIM_CLOCK_VIRTUAL && !getenv("BENCH_PIPE_NO_PIN")) pin_to_one_core();
    fsc_gpt_config scfg = { .layers = blocks, .dim = width, .heads = width / 32, .seq = 64, .vocab = vocab };
    if (!strcmp(mode, "schedules")) return schedules(&scfg, steps);
    if (!strcmp(mode, "zb") || !strcmp(mode, "zb-mlp"))
        return zero_bubble(&scfg, !strcmp(mode, "zb-mlp"), steps, rounds, only_p, mbs);
    const int cases[][2] = { { 2, 2 }, { 2, 4 }, { 2, 8 }, { 4, 4 }, { 4, 8 }, { 4, 16 } };
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    fsc_gpt_config cfg = { .layers = 8, .dim = 128, .heads = 4, .seq = 64, .vocab = 256 };
    printf("bench_pipe: GPT %d blocks, width %d, context %d, vocab %d; micro-batch 4 sequences; %ld cores\n",
           cfg.layers, cfg.dim, cfg.seq, cfg.vocab, cores);
    printf("%-3s %-3s %-6s %8s %9s  %-30s %12s %9s\n", "P", "M", "sched", "ideal", "measured", "per stage",
           "acts0 MiB", "ms/step");
    fsc_device *dev = NULL;
    if (fsc_device_create("cpu", &(fsc_device_opts){ .threads = 1 }, &dev) != FSC_OK) {
        fprintf(stderr, "bench_pipe: %s\n", fsc_last_error());
        return 1;
    }
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int P = cases[c][0], M = cases[c][1];
        int balance[16];
        fsc_model *m = NULL;
        fsc_status bs = fsc_gpt_model_create(dev, &cfg, &m);
        if (bs == FSC_OK) bs = fsc_balance_by_time(dev, m, P, 4, 3, balance);
        fsc_model_free(m);
        if (bs != FSC_OK) {
            fprintf(stderr, "bench_pipe: %s\n", fsc_last_error());
            return 1;
        }
        for (int sc = 0; sc < 2; sc++) {
            bench b = { .cfg = cfg, .steps = steps, .mb = 4 };
            b.po = (fsc_parallel_opts){ .kind = FSC_PAR_DDP, .pp = P, .accum = M, .no_sync = 1,
                                        .schedule = (fsc_pipe_schedule)sc,
                                        .pipe_checkpoint = FSC_PIPE_CKPT_NEVER, .balance = balance };
            if (step_ms(&b, P) < 0) return 1;
            double mean = 0;
            char per[64] = "", *w = per;
            for (int s = 0; s < P; s++) {
                mean += b.st[s].bubble / P;
                w += snprintf(w, sizeof per - (size_t)(w - per), "%s%.3f", s ? " " : "", b.st[s].bubble);
            }
            printf("%-3d %-3d %-6s %8.3f %9.3f  %-30s %12.2f %9.1f%s\n", P, M, sc ? "1f1b" : "gpipe",
                   b.st[0].ideal_bubble, mean, per, (double)b.st[0].peak_acts_bytes / 1048576.0, b.ms,
                   P > cores && sim_clock == FSC_SIM_CLOCK_WALL ? "  (more stages than cores)" : "");
            printf("RESULT pipe P=%d M=%d %s measured %.4f ideal %.4f\n", P, M, sc ? "1f1b" : "gpipe", mean,
                   b.st[0].ideal_bubble);
            fflush(stdout);
        }
    }
    int balance[2];
    fsc_model *m = NULL;
    fsc_status bs = fsc_gpt_model_create(dev, &cfg, &m);
    if (bs == FSC_OK) bs = fsc_balance_by_time(dev, m, 2, 4, 3, balance);
    fsc_model_free(m);
    fsc_device_free(dev);
    if (bs != FSC_OK) {
        fprintf(stderr, "bench_pipe: %s\n", fsc_last_error());
        return 1;
    }
    if (network(&cfg, balance, steps, rounds)) return 1;
    if (schedules(&scfg, steps)) return 1; /* the last two tables: the model, P and mb of the arguments */
    return zero_bubble(&scfg, 0, steps, rounds, only_p, mbs);
}
