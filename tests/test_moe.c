/* The mixture-of-experts layer (lib/moe) on the simulated cluster.
 * Oracles:
 * - identity experts: the output of a token is sum_k gate_k x (added in slot order), bit for bit; with top-2
 *   gating the kept gates sum to 1, so the layer returns its input within 2 ulp, exactly when only one
 *   choice was kept, and zero when every choice was dropped;
 * - routing: the first choice is the argmax of x Wg computed in double on the host; no expert takes more than
 *   its capacity in a group, first choices take slots before second choices, an assignment is dropped only
 *   when its expert is full, the counts add up, and the auxiliary loss equals E sum_e f_e P_e from host
 *   probabilities (1e-6);
 * - expert parallelism: G ranks (one dispatch group each, or two) equal one rank with every expert and G (or
 *   2 G) groups bit for bit: outputs, input gradients, every expert's gradients, and the gate gradient
 *   summed over ranks in rank order (with one group per rank; with two, a rank adds its groups before the
 *   ranks are added, another association: 1e-6 relative); the auxiliary loss (mean over groups) to 1e-15; the all-to-all traffic equals 4 calls of
 *   (G-1)/G x slots x C x 4 bytes per step and is printed;
 * - expert parallelism inside data parallelism: G ranks that each hold every expert and route their own tokens,
 *   with expert gradients summed in rank order, equal the G-rank expert-parallel layer bit for bit;
 * - gradients by source (fsc_moe_backward_terms): each source's piece of an expert gradient equals what the source
 *   rank computes for its own tokens holding every expert, bit for bit, and nothing is added to the gradient;
 * - records: two forwards in flight give what one at a time gives, bit for bit; a record of a layer with other
 *   shapes is refused by forward and backward with a message naming both (it crashed: SIGFPE), one of a layer
 *   with the same shapes serves;
 * - gradients: central finite differences of sum(out * R) + daux aux on a tiny layer, within 2e-2 relative
 *   plus 2e-3 absolute (float forward, h = 1e-2), skipping perturbations that change the routing; and, within
 *   1e-2 relative + 1e-4, the gate's gradient for a top-2 token whose only kept choice has p below float epsilon
 *   (the clamped denominator passes no gradient; through it the gradient was 0.053 instead of 0.944). */
#include "test_tp_util.h"

enum { C = 8, H = 12 };

static fsc_moe_config config(int E, int k, float cf, fsc_moe_expert kind) {
    return (fsc_moe_config){ .dim = C, .hidden = H, .experts = E, .top_k = k, .capacity_factor = cf,
                             .expert = kind, .name = "h.0.moe" };
}

/* ---- identity experts ---- */
typedef struct {
    int k;
    float cf;
} id_case;

static fsc_status identity_rank(fsc_rank *r, void *arg) {
    const id_case *c = arg;
    const int S = 16, E = 4;
    fsc_moe_config mc = config(E, c->k, c->cf, FSC_MOE_EXPERT_IDENTITY);
    fsc_moe *m;
    FSC_TRY(fsc_moe_create(r->dev, NULL, &mc, 5, &m));
    float *x = tt_normal(S * C, "x", 1.0f), *out = malloc(S * C * sizeof(float)), *gates = malloc(S * 2 * sizeof(float));
    int32_t ex[S * 2], kept[S * 2];
    float *dx, *dout;
    FSC_TRY(tt_up(r->dev, &dx, x, S * C));
    FSC_TRY(tt_up(r->dev, &dout, x, S * C));
    fsc_moe_stats st;
    fsc_moe_rec *rec;
    FSC_TRY(fsc_moe_rec_create(m, S, 1, &rec));
    FSC_TRY(fsc_moe_forward(m, dout, rec, dx, NULL, &st));
    FSC_TRY(tt_down(r->dev, out, dout, S * C));
    FSC_TRY(fsc_moe_routing(rec, ex, gates, kept));
    int whole = 0, partial = 0, none = 0;
    for (int n = 0; n < S; n++) {
        int nk = 0;
        for (int j = 0; j < c->k; j++) nk += kept[n * c->k + j];
        /* the contributions in slot order: the lower expert index first */
        int lo = 0;
        if (c->k == 2 && ex[n * 2 + 1] < ex[n * 2]) lo = 1;
        for (int i = 0; i < C; i++) {
            float xv = x[n * C + i], want = 0.0f;
            for (int t = 0; t < c->k; t++) {
                int j = c->k == 2 ? (t == 0 ? lo : 1 - lo) : 0;
                if (kept[n * c->k + j]) want = want + gates[n * c->k + j] * xv;
            }
            TT_TRUE(memcmp(&want, &out[n * C + i], sizeof(float)) == 0, "token %d: out %.9g, want %.9g", n,
                    (double)out[n * C + i], (double)want);
            if (c->k == 2 && nk == 2)
                TT_TRUE(fabsf(out[n * C + i] - xv) <= 2.5e-7f * fabsf(xv), "token %d: top-2 output %.9g is not its "
                        "input %.9g", n, (double)out[n * C + i], (double)xv);
            if (c->k == 2 && nk == 1) TT_TRUE(out[n * C + i] == xv, "token %d: one kept choice, gate not 1", n);
            if (nk == 0) TT_TRUE(out[n * C + i] == 0.0f, "token %d: dropped, output not zero", n);
        }
        whole += nk == c->k, partial += nk > 0 && nk < c->k, none += nk == 0;
    }
    TT_TRUE(st.tokens == S && st.assigned == (int64_t)S * c->k, "stats: tokens %lld assigned %lld",
            (long long)st.tokens, (long long)st.assigned);
    if (c->cf >= 2.0f) TT_TRUE(st.dropped == 0 && none == 0, "capacity factor %g dropped tokens", (double)c->cf);
    else TT_TRUE(st.dropped > 0, "capacity factor %g dropped nothing: the test would not cover drops", (double)c->cf);
    fsc_device_release(r->dev, dx), fsc_device_release(r->dev, dout);
    free(x), free(out), free(gates);
    fsc_moe_rec_free(rec);
    fsc_moe_free(m);
    (void)whole, (void)partial;
    return FSC_OK;
}

static void test_moe_identity_experts(void **state) {
    (void)state;
    id_case cases[] = { { 1, 4.0f }, { 1, 0.5f }, { 2, 4.0f }, { 2, 0.6f } };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) assert_ok(tt_run(1, identity_rank, &cases[i]));
}

/* ---- routing and capacity ---- */
static fsc_status capacity_rank(fsc_rank *r, void *arg) {
    const int k = *(const int *)arg;
    const int S = 24, E = 4, groups = 2, Sg = S / groups;
    const float cf = 0.75f;
    fsc_moe_config mc = config(E, k, cf, FSC_MOE_EXPERT_MLP);
    fsc_moe *m;
    FSC_TRY(fsc_moe_create(r->dev, NULL, &mc, 6, &m));
    float *x = tt_normal(S * C, "cap.x", 1.0f), *wg = malloc(C * E * sizeof(float));
    /* a larger gate than the initial one, so the probabilities are far from uniform */
    float *big = tt_normal(C * E, "cap.wg", 1.0f);
    FSC_TRY(fsc_device_upload(r->dev, fsc_moe_params(m), big, C * E * sizeof(float)));
    memcpy(wg, big, C * E * sizeof(float));
    float *dx, *dout, gates[S * 2];
    int32_t ex[S * 2], kept[S * 2];
    FSC_TRY(tt_up(r->dev, &dx, x, S * C));
    FSC_TRY(tt_up(r->dev, &dout, x, S * C));
    fsc_moe_stats st;
    fsc_moe_rec *rec;
    FSC_TRY(fsc_moe_rec_create(m, S, groups, &rec));
    FSC_TRY(fsc_moe_forward(m, dout, rec, dx, NULL, &st));
    FSC_TRY(fsc_moe_routing(rec, ex, gates, kept));
    int cap = (int)ceil(cf * k * Sg / (double)E);
    TT_TRUE(st.capacity == cap, "capacity %d, want %d", st.capacity, cap);
    int64_t dropped = 0;
    double aux = 0;
    for (int g = 0; g < groups; g++) {
        int used[4] = { 0 }, first_dropped[4] = { 0 }, second_kept[4] = { 0 };
        double P[4] = { 0 }, f[4] = { 0 };
        for (int n = g * Sg; n < (g + 1) * Sg; n++) {
            double z[4], mx = -1e300, sum = 0;
            for (int e = 0; e < E; e++) {
                z[e] = 0;
                for (int i = 0; i < C; i++) z[e] += (double)x[n * C + i] * wg[i * E + e];
                mx = z[e] > mx ? z[e] : mx;
            }
            int best = 0;
            for (int e = 0; e < E; e++) {
                sum += exp(z[e] - mx);
                if (z[e] > z[best]) best = e;
            }
            for (int e = 0; e < E; e++) P[e] += exp(z[e] - mx) / sum / Sg;
            TT_TRUE(ex[n * k] == best, "token %d: first choice %d, the host's argmax is %d", n, ex[n * k], best);
            f[best] += 1.0 / Sg;
            for (int j = 0; j < k; j++) {
                int e = ex[n * k + j];
                if (kept[n * k + j]) used[e]++, second_kept[e] += j == 1;
                else dropped++, first_dropped[e] += j == 0;
            }
        }
        for (int e = 0; e < E; e++) {
            TT_TRUE(used[e] <= cap, "group %d: expert %d took %d tokens over its capacity %d", g, e, used[e], cap);
            TT_TRUE(!(second_kept[e] && first_dropped[e]), "group %d: expert %d kept a second choice while dropping "
                    "a first choice", g, e);
            aux += E * f[e] * P[e] / groups;
        }
        for (int n = g * Sg; n < (g + 1) * Sg; n++)
            for (int j = 0; j < k; j++)
                if (!kept[n * k + j]) TT_TRUE(used[ex[n * k + j]] == cap, "token %d dropped by a non-full expert", n);
    }
    TT_TRUE(dropped == st.dropped && dropped > 0, "dropped %lld, stats say %lld", (long long)dropped,
            (long long)st.dropped);
    TT_TRUE(fabs(aux - st.aux_loss) <= 1e-6 * aux, "auxiliary loss %.9g, host %.9g", st.aux_loss, aux);
    if (getenv("FSC_TEST_VERBOSE"))
        fprintf(stderr, "  top-%d: capacity %d, dropped %lld of %lld, aux %.6f\n", k, cap, (long long)st.dropped,
                (long long)st.assigned, st.aux_loss);
    fsc_device_release(r->dev, dx), fsc_device_release(r->dev, dout);
    free(x), free(wg), free(big);
    fsc_moe_rec_free(rec);
    fsc_moe_free(m);
    return FSC_OK;
}

/* The capacity of a factor a float rounds up: 1.1 (1.10000002 as a float) x 40 tokens / 4 experts is 11 slots, as
 * the factor given says, not 12 (the ceiling of 11.0000002); 1.2 x 40 / 8 = 6, 0.6 x 2 x 40 / 8 = 6, 0.3 x 40 / 4 =
 * 3; a product above a whole number still rounds up (1.13 x 40 / 4 = 11.3: 12; 20000001 / 2 = 10000000.5, where a
 * tolerance relative to the float's rounding had snapped it down). Oracle: the exact fractions. Tokens and groups
 * that make no dispatch groups (0 groups, 0 or negative tokens, 10 tokens in 3 groups) give 0. */
static fsc_status rounding_rank(fsc_rank *r, void *arg) {
    (void)arg;
    static const struct { int E, k; float cf; int S, want; } c[] = {
        { 4, 1, 1.1f, 40, 11 }, { 8, 1, 1.2f, 40, 6 }, { 8, 2, 0.6f, 40, 6 }, { 4, 1, 0.3f, 40, 3 },
        { 4, 1, 1.13f, 40, 12 }, { 2, 1, 1.0f, 20000001, 10000001 }, /* 10000000.5: a large product still rounds up */
    };
    for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
        fsc_moe_config mc = config(c[i].E, c[i].k, c[i].cf, FSC_MOE_EXPERT_MLP);
        fsc_moe *m;
        FSC_TRY(fsc_moe_create(r->dev, NULL, &mc, 6, &m));
        const int got = fsc_moe_capacity(m, c[i].S, 1);
        /* no dispatch groups of S / groups tokens: 0 (groups 0 divided by zero: SIGFPE) */
        const int none[4] = { fsc_moe_capacity(m, c[i].S, 0), fsc_moe_capacity(m, 0, 1), fsc_moe_capacity(m, -4, 2),
                              fsc_moe_capacity(m, 10, 3) };
        fsc_moe_free(m);
        for (int j = 0; j < 4; j++) TT_TRUE(none[j] == 0, "capacity case %d of no groups: %d, want 0", j, none[j]);
        TT_TRUE(got == c[i].want, "E %d, k %d, factor %g: capacity %d, want %d", c[i].E, c[i].k, (double)c[i].cf,
                got, c[i].want);
    }
    return FSC_OK;
}

static void test_moe_capacity_and_routing(void **state) {
    (void)state;
    for (int k = 1; k <= 2; k++) assert_ok(tt_run(1, capacity_rank, &k));
    assert_ok(tt_run(1, rounding_rank, NULL));
    /* the parameter table's entries: 1 + 4 E for a layer's count of experts, 0 for one no layer has (it wrapped) */
    fsc_moe_config mc = fsc_moe_config_default(8, 4);
    const int experts[] = { 4096, 0, -1, 4097, 1 << 30 }, want[] = { 1 + 4 * 4096, 0, 0, 0, 0 };
    for (int i = 0; i < 5; i++) {
        mc.experts = experts[i];
        assert_int_equal(fsc_moe_num_tensors(&mc), want[i]);
    }
}

/* ---- expert parallelism equals one rank, bit for bit ---- */
enum { EP_S = 12, EP_E = 8 };

typedef struct {
    int G, k, groups;   /* ranks, top-k, dispatch groups per rank */
    int replicated;     /* every rank holds every expert and routes only its own tokens (no expert group) */
    float *terms;       /* NULL, or the expert gradients by source (fsc_moe_backward_terms): rank r's of source q at
                         * (r G + q) pe, pe the floats of a rank's experts */
    float *out, *dinp;  /* (G S, C) */
    float *grads;       /* per rank: the flat gradient buffer (rank r at r * P1, P1 = the rank's length) */
    size_t P1;
    double aux[8];
    fsc_comm_stats comm[8];
} ep_run;

/* A term sink: each piece into its source's copy of the rank's expert gradients (the pieces of an expert come
 * source by source, each as its four tensors). */
typedef struct {
    fsc_device *dev;
    const float *grads; /* the layer's flat gradients (device): the gate, then the rank's experts */
    float *terms;       /* (G pe) host */
    int G, calls;
    size_t pe;
} term_log;

static fsc_status log_term(void *ctx, float *grad, const float *piece, size_t n) {
    term_log *t = ctx;
    const int src = t->calls++ / 4 % t->G;
    const size_t at = (size_t)(grad - t->grads) - (size_t)C * EP_E;
    if (at + n > t->pe) return fsc_error(FSC_ERR_INTERNAL, "a term for no expert gradient of this rank");
    return fsc_device_download(t->dev, t->terms + (size_t)src * t->pe + at, piece, n * sizeof(float));
}

static fsc_status ep_rank(fsc_rank *r, void *arg) {
    ep_run *run = arg;
    int G = r->world, S = EP_S * run->groups * (run->G / G); /* the single rank takes every rank's tokens */
    int groups = run->groups * (run->G / G);
    fsc_moe_config mc = config(EP_E, run->k, 1.0f, FSC_MOE_EXPERT_MLP);
    fsc_moe *m;
    FSC_TRY(fsc_moe_create(r->dev, G > 1 && !run->replicated ? r->comm : NULL, &mc, 11, &m));
    /* a larger gate, so that routing is uneven and tokens are dropped */
    float *big = tt_normal(C * EP_E, "ep.wg", 1.0f);
    FSC_TRY(fsc_device_upload(r->dev, fsc_moe_params(m), big, C * EP_E * sizeof(float)));
    size_t all = (size_t)run->G * EP_S * run->groups;
    float *x = tt_normal(all * C, "ep.x", 1.0f), *dy = tt_normal(all * C, "ep.dy", 1.0f);
    size_t first = (size_t)r->rank * S * C;
    float *dx, *dout, *ddy, *ddx;
    FSC_TRY(tt_up(r->dev, &dx, x + first, (size_t)S * C));
    FSC_TRY(tt_up(r->dev, &ddy, dy + first, (size_t)S * C));
    FSC_TRY(tt_up(r->dev, &dout, dy, (size_t)S * C));
    FSC_TRY(tt_up(r->dev, &ddx, dy, (size_t)S * C));
    fsc_moe_stats st;
    fsc_moe_rec *rec;
    FSC_TRY(fsc_moe_rec_create(m, S, groups, &rec));
    if (r->comm) fsc_comm_reset_stats(r->comm);
    FSC_TRY(fsc_moe_forward(m, dout, rec, dx, NULL, &st));
    /* the single rank's auxiliary loss is the mean over G times more groups */
    const size_t pe = fsc_moe_num_local(m) - (size_t)C * EP_E;
    term_log tl = { r->dev, fsc_moe_grads(m), run->terms ? run->terms + (size_t)r->rank * G * pe : NULL, G, 0, pe };
    FSC_TRY(fsc_moe_backward_terms(m, ddx, NULL, rec, ddy, NULL, 0.01f / (float)G, /* a rank's share of the mean */
                                   run->terms ? log_term : NULL, &tl)); /* (exact: G is 2 or 4) */
    FSC_TRY(tt_down(r->dev, run->out + first, dout, (size_t)S * C));
    FSC_TRY(tt_down(r->dev, run->dinp + first, ddx, (size_t)S * C));
    FSC_TRY(tt_down(r->dev, run->grads + r->rank * run->P1, fsc_moe_grads(m), fsc_moe_num_local(m)));
    run->aux[r->rank] = st.aux_loss;
    run->comm[r->rank] = *fsc_comm_get_stats(r->comm);
    TT_TRUE(st.dropped > 0, "no token was dropped: the test would not cover drops");
    fsc_device_release(r->dev, dx), fsc_device_release(r->dev, dout);
    fsc_device_release(r->dev, ddy), fsc_device_release(r->dev, ddx);
    free(big), free(x), free(dy);
    fsc_moe_rec_free(rec);
    fsc_moe_free(m);
    return FSC_OK;
}

static ep_run ep_make(int G, int k, int groups, int world) {
    ep_run run = { .G = G, .k = k, .groups = groups };
    size_t all = (size_t)G * EP_S * groups;
    size_t per_expert = 2 * (size_t)C * H + H + C;
    run.P1 = (size_t)C * EP_E + (size_t)(EP_E / world) * per_expert;
    run.out = calloc(all * C, sizeof(float));
    run.dinp = calloc(all * C, sizeof(float));
    run.grads = calloc(run.P1 * world, sizeof(float));
    return run;
}

/* G ranks, each with every expert and only its own tokens: data parallelism without an expert group */
static ep_run ep_make_replicated(int G, int k) {
    ep_run run = ep_make(G, k, 1, 1);
    free(run.grads);
    run.grads = calloc(run.P1 * G, sizeof(float));
    run.replicated = 1;
    return run;
}

static void ep_free(ep_run *r) {
    free(r->out), free(r->dinp), free(r->grads), free(r->terms);
}

static void test_moe_expert_parallel_equals_one_rank(void **state) {
    (void)state;
    for (int G = 2; G <= 4; G *= 2)
        for (int k = 1; k <= 2; k++)
            for (int groups = 1; groups <= 2; groups++) {
                ep_run one = ep_make(G, k, groups, 1), ep = ep_make(G, k, groups, G);
                assert_ok(tt_run(1, ep_rank, &one));
                assert_ok(tt_run(G, ep_rank, &ep));
                size_t all = (size_t)G * EP_S * groups * C;
                char what[96];
                snprintf(what, sizeof what, "G %d top-%d %d groups: output", G, k, groups);
                assert_bits_equal(ep.out, one.out, all, what);
                snprintf(what, sizeof what, "G %d top-%d %d groups: input gradient", G, k, groups);
                assert_bits_equal(ep.dinp, one.dinp, all, what);
                /* the gate: the sum over ranks in rank order; the experts: each rank's slice */
                float gate[C * EP_E];
                for (int i = 0; i < C * EP_E; i++) {
                    gate[i] = ep.grads[i];
                    for (int r = 1; r < G; r++) gate[i] += ep.grads[r * ep.P1 + i];
                }
                if (groups == 1) {
                    assert_bits_equal(gate, one.grads, C * EP_E, "gate gradient");
                } else { /* a rank first adds its own groups, then the ranks are added: another association */
                    double e = tt_rel_err(gate, one.grads, C * EP_E);
                    if (!(e <= 1e-6)) fail_msg("gate gradient with 2 groups per rank: relative error %.3g", e);
                }
                size_t pe = ep.P1 - C * EP_E;
                for (int r = 0; r < G; r++)
                    assert_bits_equal(ep.grads + r * ep.P1 + C * EP_E, one.grads + C * EP_E + r * pe, pe,
                                      "expert gradients");
                double aux = 0;
                for (int r = 0; r < G; r++) aux += ep.aux[r];
                assert_true(aux / G == one.aux[0] || fabs(aux / G - one.aux[0]) <= 1e-15 * one.aux[0]);
                /* communication: 2 all-to-alls forward, 2 backward, each (G-1)/G of the slot buffer */
                int Sg = EP_S, cap = (int)ceil(1.0 * k * Sg / EP_E);
                double slots_bytes = (double)EP_E * groups * cap * C * 4;
                for (int r = 0; r < G; r++) {
                    assert_int_equal(ep.comm[r].calls[FSC_OP_ALL_TO_ALL], 4);
                    assert_true(fabs(ep.comm[r].bytes[FSC_OP_ALL_TO_ALL] - 4 * (G - 1.0) / G * slots_bytes) < 1e-6);
                }
                printf("  moe all-to-all, %d ranks, top-%d, %d group(s) per rank: %.0f bytes per rank per step "
                       "(4 calls)\n", G, k, groups, ep.comm[0].bytes[FSC_OP_ALL_TO_ALL]);
                ep_free(&one), ep_free(&ep);
            }
}

/* The oracle of expert parallelism inside data parallelism: G ranks that each hold every expert and route
 * their own tokens (one group each), with the expert gradients summed over the ranks in rank order (as the
 * data-parallel all-reduce sums them), equal the G-rank expert-parallel layer bit for bit: outputs, input
 * gradients, each rank's gate gradient, and each expert's gradient on the rank that holds it. */
static void test_moe_expert_parallel_equals_data_parallel(void **state) {
    (void)state;
    for (int G = 2; G <= 4; G *= 2)
        for (int k = 1; k <= 2; k++) {
            ep_run rep = ep_make_replicated(G, k), ep = ep_make(G, k, 1, G);
            assert_ok(tt_run(G, ep_rank, &rep));
            assert_ok(tt_run(G, ep_rank, &ep));
            size_t all = (size_t)G * EP_S * C, pe = ep.P1 - C * EP_E;
            assert_bits_equal(ep.out, rep.out, all, "output");
            assert_bits_equal(ep.dinp, rep.dinp, all, "input gradient");
            for (int r = 0; r < G; r++) {
                assert_bits_equal(ep.grads + r * ep.P1, rep.grads + r * rep.P1, C * EP_E, "gate gradient of a rank");
                float *sum = malloc(pe * sizeof(float));
                const float *first = rep.grads + C * EP_E + r * pe; /* rank 0's copy of rank r's experts */
                memcpy(sum, first, pe * sizeof(float));
                for (int q = 1; q < G; q++)
                    for (size_t i = 0; i < pe; i++) sum[i] += rep.grads[q * rep.P1 + C * EP_E + r * pe + i];
                assert_bits_equal(ep.grads + r * ep.P1 + C * EP_E, sum, pe, "expert gradients summed in rank order");
                free(sum);
            }
            ep_free(&rep), ep_free(&ep);
        }
}

/* Gradients by source (fsc_moe_backward_terms, the exact reduction's): on G expert-parallel ranks with two dispatch
 * groups each, rank r's piece of source q for its experts equals, bit for bit, the expert gradients that rank q
 * computes into zeroed gradients when it holds every expert and routes its own tokens (the replicated run); the
 * outputs, input gradients and gate gradients are the replicated run's, and the expert gradients stay zero. */
static void test_moe_gradient_terms_by_source(void **state) {
    (void)state;
    for (int G = 2; G <= 4; G *= 2)
        for (int k = 1; k <= 2; k++) {
            ep_run rep = ep_make(G, k, 2, 1), ep = ep_make(G, k, 2, G);
            free(rep.grads);
            rep.grads = calloc(rep.P1 * G, sizeof(float));
            rep.replicated = 1;
            const size_t all = (size_t)G * EP_S * 2 * C, pe = ep.P1 - C * EP_E;
            ep.terms = calloc((size_t)G * G * pe, sizeof(float));
            assert_ok(tt_run(G, ep_rank, &rep));
            assert_ok(tt_run(G, ep_rank, &ep));
            assert_bits_equal(ep.out, rep.out, all, "output");
            assert_bits_equal(ep.dinp, rep.dinp, all, "input gradient");
            float *zero = calloc(pe, sizeof(float));
            for (int r = 0; r < G; r++) {
                assert_bits_equal(ep.grads + r * ep.P1, rep.grads + r * rep.P1, C * EP_E, "gate gradient of a rank");
                assert_bits_equal(ep.grads + r * ep.P1 + C * EP_E, zero, pe, "expert gradients (taken by the sink)");
                for (int q = 0; q < G; q++)
                    assert_bits_equal(ep.terms + ((size_t)r * G + q) * pe, rep.grads + q * rep.P1 + C * EP_E + r * pe,
                                      pe, "an expert gradient's piece from one source");
            }
            free(zero);
            ep_free(&rep), ep_free(&ep);
        }
}

/* ---- records: several forwards in flight ---- */
/* Two micro-batches, forward A, forward B, backward A, backward B, equal forward A, backward A, forward B,
 * backward B bit for bit (outputs, input gradients, parameter gradients): B's forward leaves A's record alone. */
static fsc_status inflight_rank(fsc_rank *r, void *arg) {
    (void)arg;
    const int S = 12, E = 4, k = 2;
    fsc_moe_config mc = config(E, k, 1.0f, FSC_MOE_EXPERT_MLP);
    fsc_moe *m[2];
    fsc_moe_rec *ra[2], *rb[2];
    float *x = tt_normal(2 * S * C, "fl.x", 1.0f), *dy = tt_normal(2 * S * C, "fl.dy", 1.0f);
    float *big = tt_normal(C * E, "fl.wg", 1.0f);
    float *res[2][4];
    float *dx, *ddy, *out[2], *din[2];
    FSC_TRY(tt_up(r->dev, &dx, x, 2 * S * C));
    FSC_TRY(tt_up(r->dev, &ddy, dy, 2 * S * C));
    for (int v = 0; v < 2; v++) {
        FSC_TRY(fsc_moe_create(r->dev, NULL, &mc, 4, &m[v]));
        FSC_TRY(fsc_device_upload(r->dev, fsc_moe_params(m[v]), big, C * E * sizeof(float)));
        FSC_TRY(fsc_moe_rec_create(m[v], S, 1, &ra[v]));
        FSC_TRY(fsc_moe_rec_create(m[v], S, 1, &rb[v]));
        FSC_TRY(tt_up(r->dev, &out[v], x, 2 * S * C));
        FSC_TRY(tt_up(r->dev, &din[v], x, 2 * S * C));
    }
    const size_t SC = (size_t)S * C;
    /* v = 0: in flight; v = 1: one at a time */
    FSC_TRY(fsc_moe_forward(m[0], out[0], ra[0], dx, NULL, NULL));
    FSC_TRY(fsc_moe_forward(m[0], out[0] + SC, rb[0], dx + SC, NULL, NULL));
    FSC_TRY(fsc_moe_backward(m[0], din[0], NULL, ra[0], ddy, NULL, 0.1f));
    FSC_TRY(fsc_moe_backward(m[0], din[0] + SC, NULL, rb[0], ddy + SC, NULL, 0.1f));
    FSC_TRY(fsc_moe_forward(m[1], out[1], ra[1], dx, NULL, NULL));
    FSC_TRY(fsc_moe_backward(m[1], din[1], NULL, ra[1], ddy, NULL, 0.1f));
    FSC_TRY(fsc_moe_forward(m[1], out[1] + SC, rb[1], dx + SC, NULL, NULL));
    FSC_TRY(fsc_moe_backward(m[1], din[1] + SC, NULL, rb[1], ddy + SC, NULL, 0.1f));
    size_t P = fsc_moe_num_local(m[0]);
    for (int v = 0; v < 2; v++) {
        res[v][0] = malloc(2 * SC * sizeof(float)), res[v][1] = malloc(2 * SC * sizeof(float));
        res[v][2] = malloc(P * sizeof(float)), res[v][3] = NULL;
        FSC_TRY(tt_down(r->dev, res[v][0], out[v], 2 * SC));
        FSC_TRY(tt_down(r->dev, res[v][1], din[v], 2 * SC));
        FSC_TRY(tt_down(r->dev, res[v][2], fsc_moe_grads(m[v]), P));
    }
    TT_BITS(res[0][0], res[1][0], 2 * SC, "outputs with two forwards in flight");
    TT_BITS(res[0][1], res[1][1], 2 * SC, "input gradients with two forwards in flight");
    TT_BITS(res[0][2], res[1][2], P, "parameter gradients with two forwards in flight");
    /* a record runs backward once */
    fsc_status s = fsc_moe_backward(m[0], din[0], NULL, ra[0], ddy, NULL, 0.1f);
    TT_TRUE(s == FSC_ERR_STATE, "a second backward of one record was accepted");
    for (int v = 0; v < 2; v++) {
        fsc_moe_rec_free(ra[v]), fsc_moe_rec_free(rb[v]);
        fsc_device_release(r->dev, out[v]), fsc_device_release(r->dev, din[v]);
        free(res[v][0]), free(res[v][1]), free(res[v][2]);
        fsc_moe_free(m[v]);
    }
    fsc_device_release(r->dev, dx), fsc_device_release(r->dev, ddy);
    free(x), free(dy), free(big);
    return FSC_OK;
}

static void test_moe_records_in_flight(void **state) {
    (void)state;
    assert_ok(tt_run(1, inflight_rank, NULL));
}

/* ---- finite differences ---- */
typedef struct {
    int k;
    float cf;
} fd_case;

/* sum(out * R) + daux aux for S tokens of width w; routing: the choices and whether they were kept */
static fsc_status fd_loss(fsc_moe *m, fsc_moe_rec *rec, fsc_device *dev, const float *dx, float *dout,
                          const float *R, int S, int w, int k, float daux, double *loss, int32_t *routing,
                          int64_t *dropped) {
    fsc_moe_stats st;
    FSC_TRY(fsc_moe_forward(m, dout, rec, dx, NULL, &st));
    if (dropped) *dropped = st.dropped;
    float *o = malloc((size_t)S * w * sizeof(float));
    FSC_TRY(tt_down(dev, o, dout, (size_t)S * w));
    double L = daux * st.aux_loss;
    for (int i = 0; i < S * w; i++) L += (double)o[i] * R[i];
    free(o);
    *loss = L;
    int32_t ex[64], kept[64];
    FSC_TRY(fsc_moe_routing(rec, ex, NULL, kept));
    for (int i = 0; i < S * 2; i++) routing[i] = i < S * k ? ex[i] * 2 + kept[i] : 0;
    return FSC_OK;
}

static fsc_status fd_rank(fsc_rank *r, void *arg) {
    const fd_case *c = arg;
    const int S = 6, Cs = 4, Hs = 6, E = 4;
    const float daux = 0.3f, h = 1e-2f;
    fsc_moe_config mc = { .dim = Cs, .hidden = Hs, .experts = E, .top_k = c->k, .capacity_factor = c->cf,
                          .expert = FSC_MOE_EXPERT_MLP, .name = "fd" };
    fsc_moe *m;
    FSC_TRY(fsc_moe_create(r->dev, NULL, &mc, 3, &m));
    fsc_moe_rec *rec;
    FSC_TRY(fsc_moe_rec_create(m, S, 1, &rec));
    size_t P = fsc_moe_num_local(m);
    float *p = tt_normal(P, "fd.p", 0.5f), *x = tt_normal(S * Cs, "fd.x", 1.0f), *R = tt_normal(S * Cs, "fd.R", 1.0f);
    float *dx, *dout, *dR, *ddx, *dinp = malloc(S * Cs * sizeof(float)), *grads = malloc(P * sizeof(float));
    FSC_TRY(fsc_device_upload(r->dev, fsc_moe_params(m), p, P * sizeof(float)));
    FSC_TRY(tt_up(r->dev, &dx, x, S * Cs));
    FSC_TRY(tt_up(r->dev, &dout, x, S * Cs));
    FSC_TRY(tt_up(r->dev, &dR, R, S * Cs));
    FSC_TRY(tt_up(r->dev, &ddx, x, S * Cs));
    /* analytic */
    double L0;
    int32_t base[12], now[12];
    int64_t dropped;
    FSC_TRY(fd_loss(m, rec, r->dev, dx, dout, R, S, Cs, c->k, daux, &L0, base, &dropped));
    TT_TRUE((dropped > 0) == (c->cf < 1.0f), "capacity factor %g: %lld assignments dropped", (double)c->cf,
            (long long)dropped);
    FSC_TRY(fsc_moe_backward(m, ddx, NULL, rec, dR, NULL, daux));
    FSC_TRY(tt_down(r->dev, dinp, ddx, S * Cs));
    FSC_TRY(tt_down(r->dev, grads, fsc_moe_grads(m), P));
    int checked = 0, skipped = 0;
    /* every input element and every parameter */
    for (size_t i = 0; i < (size_t)S * Cs + P; i++) {
        int is_x = i < (size_t)S * Cs;
        float *v = is_x ? x : p;
        size_t j = is_x ? i : i - (size_t)S * Cs;
        float *dst = is_x ? dx : fsc_moe_params(m);
        double Lp, Lm;
        float keep = v[j];
        int changed = 0;
        for (int sgn = -1; sgn <= 1; sgn += 2) {
            v[j] = keep + sgn * h;
            FSC_TRY(fsc_device_upload(r->dev, dst + j, v + j, sizeof(float)));
            FSC_TRY(fd_loss(m, rec, r->dev, dx, dout, R, S, Cs, c->k, daux, sgn < 0 ? &Lm : &Lp, now, NULL));
            changed |= memcmp(now, base, sizeof base) != 0;
        }
        v[j] = keep;
        FSC_TRY(fsc_device_upload(r->dev, dst + j, v + j, sizeof(float)));
        if (changed) {
            skipped++;
            continue;
        }
        double fd = (Lp - Lm) / (2.0 * h), an = is_x ? dinp[j] : grads[j];
        TT_TRUE(fabs(fd - an) <= 2e-2 * fabs(an) + 2e-3, "top-%d cf %g: %s %zu: analytic %.6g, finite difference "
                "%.6g", c->k, (double)c->cf, is_x ? "input" : "parameter", j, an, fd);
        checked++;
    }
    if (getenv("FSC_TEST_VERBOSE"))
        fprintf(stderr, "  top-%d cf %g: %d elements checked, %d skipped\n", c->k, (double)c->cf, checked, skipped);
    TT_TRUE(checked > 9 * (checked + skipped) / 10, "only %d of %d elements had a stable routing", checked,
            checked + skipped);
    fsc_device_release(r->dev, dx), fsc_device_release(r->dev, dout);
    fsc_device_release(r->dev, dR), fsc_device_release(r->dev, ddx);
    free(p), free(x), free(R), free(dinp), free(grads);
    fsc_moe_rec_free(rec);
    fsc_moe_free(m);
    return FSC_OK;
}

/* Top-2 with a token whose first choice was dropped and whose kept second choice has p below float epsilon: its
 * combine weight is p / eps (the renormalizing denominator clamped at eps, as FairScale's top2gating), so its
 * gradient is dg / eps through p alone, with nothing through the clamped denominator. Identity experts on one-hot
 * tokens (token t's logits are row t of the gate), 3 experts of capacity 1: token 0 takes expert 0, token 2 expert 1,
 * token 1 (logits 16, -5, 0) loses expert 0 and keeps expert 2 with p = e^-16 (1.1e-7). The gate's gradient of
 * sum(out) against central differences (h = 1e-2, the routing unchanged). */
static fsc_status clamp_rank(fsc_rank *r, void *arg) {
    (void)arg;
    enum { S = 3, E = 3 };
    const float h = 1e-2f, wg[S * E] = { 20, 1, 0, 16, -5, 0, 0, 20, -30 }, x[S * S] = { 1, 0, 0, 0, 1, 0, 0, 0, 1 };
    fsc_moe_config mc = { .dim = S, .experts = E, .top_k = 2, .capacity_factor = 0.5f,
                          .expert = FSC_MOE_EXPERT_IDENTITY, .name = "clamp" };
    fsc_moe *m;
    fsc_moe_rec *rec;
    FSC_TRY(fsc_moe_create(r->dev, NULL, &mc, 1, &m));
    FSC_TRY(fsc_moe_rec_create(m, S, 1, &rec));
    float w[S * E], one[S * S], o[S * S], grad[S * E], *dx, *dout, *dR, *ddx;
    for (int i = 0; i < S * S; i++) one[i] = 1.0f;
    memcpy(w, wg, sizeof w);
    FSC_TRY(fsc_device_upload(r->dev, fsc_moe_params(m), w, sizeof w));
    FSC_TRY(tt_up(r->dev, &dx, x, S * S));
    FSC_TRY(tt_up(r->dev, &dout, x, S * S));
    FSC_TRY(tt_up(r->dev, &dR, one, S * S));
    FSC_TRY(tt_up(r->dev, &ddx, x, S * S));
    int32_t ex[S * 2], kept[S * 2], base[S * 2];
    FSC_TRY(fsc_moe_forward(m, dout, rec, dx, NULL, NULL));
    FSC_TRY(fsc_moe_routing(rec, ex, NULL, base));
    TT_TRUE(ex[2] == 0 && !base[2] && ex[3] == 2 && base[3], "token 1: choices %d (kept %d) and %d (kept %d), wanted "
            "0 (dropped) and 2 (kept)", ex[2], base[2], ex[3], base[3]);
    FSC_TRY(fsc_moe_backward(m, ddx, NULL, rec, dR, NULL, 0.0f));
    FSC_TRY(tt_down(r->dev, grad, fsc_moe_grads(m), S * E));
    for (int j = 0; j < S * E; j++) {
        double L[2];
        for (int sgn = 0; sgn < 2; sgn++) {
            w[j] = wg[j] + (sgn ? h : -h);
            FSC_TRY(fsc_device_upload(r->dev, fsc_moe_params(m), w, sizeof w));
            FSC_TRY(fsc_moe_forward(m, dout, rec, dx, NULL, NULL));
            FSC_TRY(fsc_moe_routing(rec, ex, NULL, kept));
            TT_TRUE(!memcmp(kept, base, sizeof kept), "gate %d +- h changed the routing", j);
            FSC_TRY(tt_down(r->dev, o, dout, S * S));
            L[sgn] = 0;
            for (int i = 0; i < S * S; i++) L[sgn] += o[i];
        }
        w[j] = wg[j];
        const double fd = (L[1] - L[0]) / (2.0 * h);
        TT_TRUE(fabs(fd - grad[j]) <= 1e-2 * fabs(fd) + 1e-4, "gate element %d: analytic %.6g, finite difference "
                "%.6g", j, (double)grad[j], fd);
    }
    fsc_device_release(r->dev, dx), fsc_device_release(r->dev, dout);
    fsc_device_release(r->dev, dR), fsc_device_release(r->dev, ddx);
    fsc_moe_rec_free(rec);
    fsc_moe_free(m);
    return FSC_OK;
}

static void test_moe_clamped_gate_gradient(void **state) {
    (void)state;
    assert_ok(tt_run(1, clamp_rank, NULL));
}

static void test_moe_gradient_finite_differences(void **state) {
    (void)state;
    fd_case cases[] = { { 1, 2.0f }, { 2, 2.0f }, { 2, 0.7f } };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) assert_ok(tt_run(1, fd_rank, &cases[i]));
}

/* ---- errors ---- */
static fsc_status errors_rank(fsc_rank *r, void *arg) {
    (void)arg;
    fsc_moe *m;
    fsc_moe_config mc = config(6, 2, 1.0f, FSC_MOE_EXPERT_MLP);
    return fsc_moe_create(r->dev, r->comm, &mc, 1, &m); /* 6 experts over 4 ranks */
}

static fsc_status state_rank(fsc_rank *r, void *arg) {
    (void)arg;
    fsc_moe *m;
    fsc_moe_config mc = config(4, 1, 1.0f, FSC_MOE_EXPERT_MLP);
    FSC_TRY(fsc_moe_create(r->dev, NULL, &mc, 1, &m));
    float *d;
    fsc_moe_rec *rec = NULL, *bad = NULL;
    FSC_TRY(fsc_moe_rec_create(m, 16, 1, &rec));
    FSC_TRY(fsc_device_calloc(r->dev, FSC_TAG_ACTS, 64 * C * sizeof(float), (void **)&d));
    fsc_status s = fsc_moe_backward(m, d, NULL, rec, d, NULL, 0.0f);
    if (s == FSC_ERR_STATE) s = fsc_moe_rec_create(m, 10, 3, &bad);
    fsc_device_release(r->dev, d);
    fsc_moe_rec_free(rec);
    fsc_moe_rec_free(bad);
    fsc_moe_free(m);
    return s;
}

/* A record made by one layer handed to another of other shapes (experts, top-k, capacity, hidden width): refused
 * (its slots are the maker's), not read past; a layer of the same shapes may use it. */
static fsc_status foreign_rank(fsc_rank *r, void *arg) {
    const int S = 16, backward = *(const int *)arg; /* 0: the other layer's forward, 1: its backward */
    fsc_moe *small = NULL, *big = NULL, *twin = NULL;
    fsc_moe_rec *rec = NULL;
    float *x = NULL, *y = NULL;
    fsc_moe_config a = config(4, 1, 1.0f, FSC_MOE_EXPERT_MLP), b = config(8, 2, 2.0f, FSC_MOE_EXPERT_MLP);
    b.hidden = 3 * H;
    fsc_status s = fsc_moe_create(r->dev, NULL, &a, 1, &small);
    if (s == FSC_OK) s = fsc_moe_create(r->dev, NULL, &b, 2, &big);
    if (s == FSC_OK) s = fsc_moe_create(r->dev, NULL, &a, 3, &twin);
    if (s == FSC_OK) s = fsc_moe_rec_create(small, S, 1, &rec);
    if (s == FSC_OK) s = fsc_device_calloc(r->dev, FSC_TAG_ACTS, (size_t)S * C * sizeof(float), (void **)&x);
    if (s == FSC_OK) s = fsc_device_calloc(r->dev, FSC_TAG_ACTS, (size_t)S * C * sizeof(float), (void **)&y);
    if (s == FSC_OK) s = fsc_moe_forward(twin, y, rec, x, NULL, NULL); /* the same shapes: fine */
    if (s == FSC_OK) s = fsc_moe_backward(twin, x, NULL, rec, y, NULL, 0.0f);
    if (s == FSC_OK && backward) s = fsc_moe_forward(small, y, rec, x, NULL, NULL);
    if (s == FSC_OK && backward) s = fsc_moe_backward(big, x, NULL, rec, y, NULL, 0.0f);
    if (s == FSC_OK && !backward) s = fsc_moe_forward(big, y, rec, x, NULL, NULL);
    fsc_device_release(r->dev, x);
    fsc_device_release(r->dev, y);
    fsc_moe_rec_free(rec);
    fsc_moe_free(small), fsc_moe_free(big), fsc_moe_free(twin);
    return s;
}

static void test_moe_errors(void **state) {
    (void)state;
    assert_err(tt_run(4, errors_rank, NULL), FSC_ERR_INVALID, "6 experts do not split over an expert-parallel group of 4");
    assert_err(tt_run(1, state_rank, NULL), FSC_ERR_INVALID, "10 tokens do not split into 3 dispatch groups");
    const char *foreign = "the record was made for a layer of 4 MLP experts, top-1, width 8, hidden width 12 and "
                          "capacity 4 (groups of 16 tokens); this layer (h.0.moe) has 8 MLP experts, top-2, width 8, "
                          "hidden width 36 and capacity 8";
    for (int backward = 0; backward < 2; backward++) {
        assert_err(tt_run(1, foreign_rank, &backward), FSC_ERR_INVALID, foreign);
        assert_non_null(strstr(fsc_last_error(), backward ? "moe backward:" : "moe forward:"));
    }
    fsc_device *dev;
    assert_ok(fsc_device_create("cpu", NULL, &dev));
    fsc_moe *m;
    fsc_moe_config mc = config(4, 3, 1.0f, FSC_MOE_EXPERT_MLP);
    assert_err(fsc_moe_create(dev, NULL, &mc, 1, &m), FSC_ERR_INVALID, "top_k is 3");
    mc = config(1, 2, 1.0f, FSC_MOE_EXPERT_MLP);
    assert_err(fsc_moe_create(dev, NULL, &mc, 1, &m), FSC_ERR_INVALID, "top-2 gating needs at least 2 experts");
    mc = config(4, 1, -1.0f, FSC_MOE_EXPERT_MLP);
    assert_err(fsc_moe_create(dev, NULL, &mc, 1, &m), FSC_ERR_INVALID, "capacity factor -1");
    fsc_device_free(dev);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_moe_identity_experts),
        cmocka_unit_test(test_moe_capacity_and_routing),
        cmocka_unit_test(test_moe_expert_parallel_equals_one_rank),
        cmocka_unit_test(test_moe_expert_parallel_equals_data_parallel),
        cmocka_unit_test(test_moe_gradient_terms_by_source),
        cmocka_unit_test(test_moe_records_in_flight),
        cmocka_unit_test(test_moe_gradient_finite_differences),
        cmocka_unit_test(test_moe_clamped_gate_gradient),
        cmocka_unit_test(test_moe_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
