/* Custom pipeline schedules in random orders (fsc_parallel_opts.schedule = FSC_SCHED_CUSTOM): the promise that
 * every valid list of actions gives DDP's bits, whatever order its actions run in, tested on lists drawn at
 * random.
 * The generator runs the ranks together: at each step it picks, at random (weights per kind drawn per case, so
 * that some lists run all the forwards first and others their backwards and Ws as early as they can), one action
 * that some rank could run next: the next F, B or W of one of its chunks in ascending micro-batch order, B after
 * its F, W after its B, and an F or B only when what it receives is at the head of its stream (first in, first
 * out per link, direction and, in a V, chunk, with buffered sends). The lists it writes are deadlock-free by
 * construction and interleave chunks and place Ws at random; every one must pass fsc_pipe_schedule_validate_placed,
 * and a copy with two actions of one kind and chunk swapped on one rank must be refused.
 * Cases: P 2, 3, 4; one chunk per rank, two in a loop, two in a V; M from 1 to 2P + 1; no W, W on every rank, W
 * on some ranks only; every pipeline checkpoint mode; prefetch 0 and 1 (chunks need prefetch); even and random
 * balances of an 8-block GPT whose embedding is tied to its head; and dp 2 x pp 2 with ZeRO-2 and FSDP inside
 * the stages. Oracle: DDP over the same micro-batches (tests/pipetest.h): every rank's loss of both steps and the
 * final parameters, bit for bit.
 * A failure names the seed and the case and prints the lists. FSC_PIPE_RANDOM_SEED and FSC_PIPE_RANDOM_CASES
 * change the seed and the number of cases (longer hunts); the defaults run in the suite. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include "fsc/pipe_schedule.h"
#include "pipetest.h"

#define MAXP 4
#define MAXM (2 * MAXP + 1)
#define LAYERS 8

typedef struct {
    uint64_t s;
} rng;

static uint64_t rng_next(rng *r) { /* splitmix64 */
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int rng_int(rng *r, int n) { return (int)(rng_next(r) % (uint64_t)n); }

/* A stream of messages into a rank (stage and micro-batch of each), first in, first out. */
typedef struct {
    int stage[2 * MAXP * MAXM], micro[2 * MAXP * MAXM];
    int head, tail;
} queue;

typedef struct {
    fsc_pipe_placement pl;
    int p, v, m;
    int withw[MAXP];    /* rank r's list has W actions */
    int weight[3];      /* the generator's weight of a candidate F, B, W */
} spec;

/* The stream a message to stage g travels on (fwd: an output, else an input gradient): per receiving rank,
 * direction, sending rank and, in a V, the receiving chunk (chunk 1's messages have links of their own). */
static queue *stream_of(queue *q, const spec *sp, int g, int fwd) {
    const int p = sp->p, to = fsc_pipe_stage_rank(sp->pl, p, g);
    const int from = fsc_pipe_stage_rank(sp->pl, p, fwd ? g - 1 : g + 1);
    const int cls = sp->pl == FSC_PIPE_V ? g / p : 0;
    return &q[((to * 2 + !fwd) * p + from) * 2 + cls];
}

static int at_head(queue *q, const spec *sp, int g, int fwd, int k) {
    const queue *s = stream_of(q, sp, g, fwd);
    return s->head < s->tail && s->stage[s->head] == g && s->micro[s->head] == k;
}

static void send_to(queue *q, const spec *sp, int g, int fwd, int k) {
    queue *s = stream_of(q, sp, g, fwd);
    s->stage[s->tail] = g, s->micro[s->tail] = k;
    s->tail++;
}

typedef struct {
    int r, c, kind;
} cand_t;

/* Random lists (above) into a[r] (lens[r] actions); 0, or -1 if no rank could move (a bug of the generator). */
static int generate(const spec *sp, rng *R, fsc_pipe_action a[MAXP][3 * 2 * MAXM], int *lens) {
    const int p = sp->p, v = sp->v, m = sp->m, S = p * v;
    static queue q[MAXP * 2 * MAXP * 2];
    int nx[MAXP][2][3]; /* next micro-batch of each rank, chunk and kind */
    int left = 0;
    memset(q, 0, sizeof q);
    memset(nx, 0, sizeof nx);
    for (int r = 0; r < p; r++) {
        lens[r] = 0;
        left += (2 + sp->withw[r]) * v * m;
    }
    for (; left > 0; left--) {
        cand_t cand[MAXP * 2 * 3];
        int nc = 0, total = 0;
        for (int r = 0; r < p; r++)
            for (int c = 0; c < v; c++) {
                const int g = fsc_pipe_stage_at(sp->pl, p, r, c), *n = nx[r][c];
                if (n[0] < m && (g == 0 || at_head(q, sp, g, 1, n[0]))) cand[nc++] = (cand_t){ r, c, 0 };
                if (n[1] < n[0] && (g == S - 1 || at_head(q, sp, g, 0, n[1]))) cand[nc++] = (cand_t){ r, c, 1 };
                if (sp->withw[r] && n[2] < n[1]) cand[nc++] = (cand_t){ r, c, 2 };
            }
        if (nc == 0) return -1;
        for (int i = 0; i < nc; i++) total += sp->weight[cand[i].kind];
        int pick = rng_int(R, total), i = 0;
        while (pick >= sp->weight[cand[i].kind]) pick -= sp->weight[cand[i].kind], i++;
        const int r = cand[i].r, c = cand[i].c, kind = cand[i].kind, k = nx[r][c][kind]++;
        const int g = fsc_pipe_stage_at(sp->pl, p, r, c);
        a[r][lens[r]++] = (fsc_pipe_action){ (fsc_pipe_action_kind)kind, k, c };
        if (kind == 0 && g > 0) stream_of(q, sp, g, 1)->head++;
        if (kind == 0 && g < S - 1) send_to(q, sp, g + 1, 1, k);
        if (kind == 1 && g < S - 1) stream_of(q, sp, g, 0)->head++;
        if (kind == 1 && g > 0) send_to(q, sp, g - 1, 0, k);
    }
    return 0;
}

/* "rank 0: F0.0 F1.0 B0.0 ...; rank 1: ..." (micro-batch.chunk) */
static void print_lists(const spec *sp, fsc_pipe_action a[MAXP][3 * 2 * MAXM], const int *lens) {
    for (int r = 0; r < sp->p; r++) {
        fprintf(stderr, "  rank %d:", r);
        for (int i = 0; i < lens[r]; i++)
            fprintf(stderr, " %c%d.%d", "FBW"[a[r][i].kind], a[r][i].micro, a[r][i].chunk);
        fprintf(stderr, "\n");
    }
}

static const char *const ckpt_names[] = { "except_last", "always", "never" };
static const char *const kind_names[] = { "none", "ddp", "fsdp", "zero1", "zero2" };

typedef struct {
    run refs[3][MAXM + 1]; /* [dp][m]: DDP over dp ranks, m micro-batches */
    int lists, runs;
} state_t;

/* One case: random lists of the spec drawn from seed, checked by the validator, trained against DDP. */
static void one_case(state_t *st, uint64_t seed, int dp, fsc_parallel_kind kind, spec sp) {
    rng R = { seed };
    fsc_pipe_action a[MAXP][3 * 2 * MAXM];
    int lens[MAXP];
    for (int i = 0; i < 3; i++) sp.weight[i] = 1 << (2 * rng_int(&R, 3)); /* 1, 4 or 16 */
    const int ck = rng_int(&R, 3), prefetch = sp.v > 1 ? 1 : rng_int(&R, 2);
    int bal[MAXP * 2], *balance = NULL;
    if (rng_int(&R, 2)) { /* a random balance: every stage at least one block */
        const int S = sp.p * sp.v;
        for (int s = 0; s < S; s++) bal[s] = 1;
        for (int b = S; b < LAYERS; b++) bal[rng_int(&R, S)]++;
        balance = bal;
    }
    char what[256];
    int nw = 0;
    for (int r = 0; r < sp.p; r++) nw += sp.withw[r];
    snprintf(what, sizeof what, "seed 0x%016" PRIx64 ": dp %d (%s) x pp %d, %d chunks in a %s, %d micro-batches, W on "
             "%d of %d ranks, weights F %d B %d W %d, checkpoint %s, prefetch %d, balance %s", seed, dp,
             kind_names[kind], sp.p, sp.v, sp.pl == FSC_PIPE_V ? "V" : "loop", sp.m, nw, sp.p, sp.weight[0],
             sp.weight[1], sp.weight[2], ckpt_names[ck], prefetch, balance ? "random" : "even");
    if (generate(&sp, &R, a, lens) != 0) fail_msg("%s: the generator found no action to run", what);
    const fsc_pipe_action *lists[MAXP];
    for (int r = 0; r < sp.p; r++) lists[r] = a[r];
    fsc_status s = fsc_pipe_schedule_validate_placed(sp.pl, sp.p, sp.v, sp.m, lists, lens);
    if (s != FSC_OK) {
        print_lists(&sp, a, lens);
        fail_msg("%s: a list the generator ran to its end is refused: %s", what, fsc_last_error());
    }
    st->lists++;
    /* the generator's check: two actions of one kind and chunk swapped on a rank break the ascending order */
    if (sp.m > 1) {
        const int r = rng_int(&R, sp.p);
        int i, j;
        do {
            i = rng_int(&R, lens[r]), j = rng_int(&R, lens[r]);
        } while (a[r][i].kind != a[r][j].kind || a[r][i].chunk != a[r][j].chunk || a[r][i].micro == a[r][j].micro);
        fsc_pipe_action t = a[r][i];
        a[r][i] = a[r][j], a[r][j] = t;
        if (fsc_pipe_schedule_validate_placed(sp.pl, sp.p, sp.v, sp.m, lists, lens) != FSC_ERR_INVALID ||
            !strstr(fsc_last_error(), "ascending micro-batch order")) {
            print_lists(&sp, a, lens);
            fail_msg("%s: rank %d's actions %d and %d swapped are not refused as out of order (%s)", what, r, i, j,
                     fsc_last_error());
        }
        t = a[r][i];
        a[r][i] = a[r][j], a[r][j] = t;
    }
    run pr = make(dp, sp.p, kind, sp.m, 1);
    pr.cfg.layers = LAYERS;
    pr.steps = 2;
    pr.po.prefetch = prefetch;
    pr.po.pipe_checkpoint = (fsc_pipe_checkpoint)ck;
    pr.po.schedule = FSC_SCHED_CUSTOM;
    pr.po.placement = sp.pl;
    pr.po.virtual_stages = sp.v;
    pr.po.balance = balance;
    pr.po.actions = lists;
    pr.po.nactions = lens;
    run *ref = &st->refs[dp][sp.m];
    if (!ref->params) *ref = reference(&pr);
    fsc_cluster_opts co = { .world = pr.world, .device = "cpu", .timeout_s = 30 };
    pr.params = calloc(fsc_gpt_num_params(&pr.cfg), sizeof(float));
    assert_non_null(pr.params);
    if (fsc_cluster_run(&co, rank_fn, &pr) != FSC_OK) {
        print_lists(&sp, a, lens);
        fail_msg("%s: %s", what, fsc_last_error());
    }
    int same = 1;
    for (int step = 0; step < pr.steps; step++)
        for (int rk = 0; rk < pr.world; rk++) same &= memcmp(&ref->loss[0][step], &pr.loss[rk][step], sizeof(double)) == 0;
    same &= memcmp(ref->params, pr.params, fsc_gpt_num_params(&pr.cfg) * sizeof(float)) == 0;
    if (!same) print_lists(&sp, a, lens);
    assert_same(ref, &pr, what);
    free(pr.params);
    st->runs++;
}

static uint64_t env_u64(const char *name, uint64_t dflt) {
    const char *s = getenv(name);
    return s && *s ? strtoull(s, NULL, 0) : dflt;
}

/* W on rank r: mode 0 none, 1 every rank, 2 some ranks (at least one with, one without) */
static void draw_w(spec *sp, int mode, rng *R) {
    for (int r = 0; r < sp->p; r++) sp->withw[r] = mode == 1 ? 1 : mode == 2 ? rng_int(R, 2) : 0;
    if (mode == 2) {
        const int with = rng_int(R, sp->p), without = (with + 1 + rng_int(R, sp->p - 1)) % sp->p;
        sp->withw[with] = 1, sp->withw[without] = 0;
    }
}

/* P 2, 3, 4 x (one chunk, two in a loop, two in a V) x (no W, W everywhere, W on some ranks), then cycling, each
 * with its M in 1 .. 2P + 1, checkpoint mode, prefetch and balance drawn. */
static void test_pipe_random_lists(void **state) {
    (void)state;
    const uint64_t seed = env_u64("FSC_PIPE_RANDOM_SEED", 0x5eed2024ull);
    const int ncases = (int)env_u64("FSC_PIPE_RANDOM_CASES", 54);
    static state_t st;
    memset(&st, 0, sizeof st);
    rng R = { seed };
    for (int c = 0; c < ncases; c++) {
        spec sp;
        memset(&sp, 0, sizeof sp);
        sp.p = 2 + c % 3;
        const int lay = c / 3 % 3;
        sp.v = lay ? 2 : 1;
        sp.pl = lay == 2 ? FSC_PIPE_V : FSC_PIPE_LOOP;
        sp.m = 1 + rng_int(&R, 2 * sp.p + 1);
        draw_w(&sp, c / 9 % 3, &R);
        one_case(&st, rng_next(&R), 1, FSC_PAR_DDP, sp);
    }
    /* dp 2 x pp 2 with a sharded strategy inside the stages */
    for (int c = 0; c < 6; c++) {
        spec sp;
        memset(&sp, 0, sizeof sp);
        sp.p = 2;
        sp.v = c % 3 ? 2 : 1;
        sp.pl = c % 3 == 2 ? FSC_PIPE_V : FSC_PIPE_LOOP;
        sp.m = 1 + rng_int(&R, 5);
        draw_w(&sp, rng_int(&R, 3), &R);
        one_case(&st, rng_next(&R), 2, c < 3 ? FSC_PAR_ZERO2 : FSC_PAR_FSDP, sp);
    }
    printf("random custom schedules: %d lists validated, %d runs equal to DDP (seed 0x%016" PRIx64 ")\n", st.lists,
           st.runs, seed);
    for (int d = 0; d < 3; d++)
        for (int m = 0; m <= MAXM; m++) free(st.refs[d][m].params);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pipe_random_lists),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
