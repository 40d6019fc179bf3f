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
 * Cases: P 2, 3, 4; one chunk per rank, two (on 2 ranks also three) in a loop, two in a V; M from 1 to 2P + 1;
 * no W, W on every rank, W on some ranks only; every pipeline checkpoint mode, and layer checkpointing (with W
 * too); prefetch 0 and 1 (chunks need prefetch); even and random balances of an 8-block GPT whose embedding
 * is tied to its head; dp 2 x pp 2 with W (on every rank or some) and DDP, ZeRO-1, ZeRO-2 and FSDP inside the
 * stages; a mixture of experts in every second block (pp 2 and 3, and dp 2 x pp 2 with the experts spread over
 * the data ranks); chunks in loops and Vs on communicators whose sends wait for their receive (NCCL's,
 * sim_sync_sends), dp 1 and dp 2 x pp 2 with FSDP. Oracle: DDP over the same micro-batches (tests/pipetest.h): every rank's loss of both steps
 * and the final parameters, bit for bit.
 * A failure names the seed and the case and prints the lists. FSC_PIPE_RANDOM_SEED and FSC_PIPE_RANDOM_CASES
 * change the seed and the number of cases (longer hunts); the defaults run in the suite. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include "fsc/pipe_schedule.h"
#include "pipetest.h"

#define MAXP 4
#define MAXV 3
#define MAXM (2 * MAXP + 1)
#define LAYERS 8

#include "randlists.h" /* (after MAXP, MAXV and MAXM) */

/* "rank 0: F0.0 F1.0 B0.0 ...; rank 1: ..." (micro-batch.chunk) */
static void print_lists(const list_spec *sp, fsc_pipe_action a[MAXP][3 * MAXV * MAXM], const int *lens) {
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
    run refs[2][3][MAXM + 1]; /* [moe][dp][m]: DDP over dp ranks, m micro-batches */
    int lists, runs;
} state_t;

/* One case: random lists of the spec drawn from seed, checked by the validator, trained against DDP. */
static void one_case(state_t *st, uint64_t seed, int dp, fsc_parallel_kind kind, int moe, int sync, list_spec sp) {
    rng R = { seed };
    fsc_pipe_action a[MAXP][3 * MAXV * MAXM];
    int lens[MAXP];
    for (int i = 0; i < 3; i++) sp.weight[i] = 1 << (2 * rng_int(&R, 3)); /* 1, 4 or 16 */
    const int ck = rng_int(&R, 3), prefetch = sp.v > 1 ? 1 : rng_int(&R, 2);
    int nw = 0;
    for (int r = 0; r < sp.p; r++) nw += sp.withw[r];
    const int layer_ckpt = rng_int(&R, 2); /* recompute every block */
    int bal[MAXP * MAXV], *balance = NULL;
    if (rng_int(&R, 2)) { /* a random balance: every stage at least one block */
        const int S = sp.p * sp.v;
        for (int s = 0; s < S; s++) bal[s] = 1;
        for (int b = S; b < LAYERS; b++) bal[rng_int(&R, S)]++;
        balance = bal;
    }
    char what[288];
    snprintf(what, sizeof what, "seed 0x%016" PRIx64 ": %s%sdp %d (%s) x pp %d, %d chunks in a %s, %d micro-batches, "
             "W on %d of %d ranks, weights F %d B %d W %d, checkpoint %s%s, prefetch %d, balance %s", seed,
             sync ? "sends that wait, " : "", moe ? "MoE (ep = dp), " : "", dp,
             kind_names[kind], sp.p, sp.v, sp.pl == FSC_PIPE_V ? "V" : "loop", sp.m, nw, sp.p, sp.weight[0],
             sp.weight[1], sp.weight[2], ckpt_names[ck], layer_ckpt ? " and every layer" : "", prefetch,
             balance ? "random" : "even");
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
    if (moe) { /* every second block's MLP a mixture of 4 experts, top 2, spread over the data ranks */
        pr.cfg.moe_experts = 4, pr.cfg.moe_top_k = 2, pr.cfg.moe_every = 2;
        pr.cfg.moe_capacity = 0.75f, pr.cfg.moe_aux = 0.01f;
        pr.po.ep = dp;
    }
    pr.steps = 2;
    /* ZeRO-2: a bucket per layer, so that a stage reduces several buckets in its backward (the waits of its
     * reductions in flight, prefetch_limit, run inside the pipeline's actions) */
    if (kind == FSC_PAR_ZERO2) pr.po.bucket_bytes = 1;
    pr.po.prefetch = prefetch;
    pr.po.pipe_checkpoint = (fsc_pipe_checkpoint)ck;
    pr.po.checkpoint = layer_ckpt;
    pr.po.schedule = FSC_SCHED_CUSTOM;
    pr.po.placement = sp.pl;
    pr.po.virtual_stages = sp.v;
    pr.po.balance = balance;
    pr.po.actions = lists;
    pr.po.nactions = lens;
    run *ref = &st->refs[moe][dp][sp.m];
    if (!ref->params) *ref = reference(&pr);
    fsc_cluster_opts co = { .world = pr.world, .device = "cpu", .timeout_s = 30, .sim_sync_sends = sync };
    pr.params = calloc(fsc_gpt_num_params(&pr.cfg), sizeof(float));
    assert_non_null(pr.params);
    if (fsc_cluster_run(&co, rank_fn, &pr) != FSC_OK) {
        print_lists(&sp, a, lens);
        fail_msg("%s: %s", what, fsc_last_error());
    }
    int same = 1;
    for (int step = 0; step < pr.steps; step++)
        for (int rk = 0; rk < pr.world; rk++)
            same &= memcmp(&ref->loss[0][step], &pr.loss[rk][step], sizeof(double)) == 0;
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
static void draw_w(list_spec *sp, int mode, rng *R) {
    for (int r = 0; r < sp->p; r++) sp->withw[r] = mode == 1 ? 1 : mode == 2 ? rng_int(R, 2) : 0;
    if (mode == 2) {
        const int with = rng_int(R, sp->p), without = (with + 1 + rng_int(R, sp->p - 1)) % sp->p;
        sp->withw[with] = 1, sp->withw[without] = 0;
    }
}

/* Found by the test above: a rank of two chunks whose lists run chunk 0's last W before chunk 1's (Ws are local,
 * any order runs). The strategies reduce in each chunk's last W and took chunk 0's as the rank's last: DDP and
 * ZeRO reduced chunk 1's last weight gradients before its W made them, FSDP gathered the root unit again after
 * its reduction, and the next step ran on stale values. The engine now runs the last Ws at the end of the list,
 * highest chunk first. Rank 0 of a V with W (chunk 0's W of the last micro-batch before chunk 1's), rank 1 with
 * and without W, and the same in a loop: DDP's bits under DDP, ZeRO-1, ZeRO-2 and FSDP over 2 data ranks. */
static int parse_list(const char *s, fsc_pipe_action *a) {
    int n = 0, k, c, used;
    char kind;
    while (sscanf(s, " %c%d.%d%n", &kind, &k, &c, &used) == 3) {
        a[n++] = (fsc_pipe_action){ kind == 'F' ? FSC_ACT_FORWARD : kind == 'B' ? FSC_ACT_BACKWARD : FSC_ACT_WEIGHT,
                                    k, c };
        s += used;
    }
    return n;
}

static void test_pipe_custom_last_w_order(void **state) {
    (void)state;
    static const char *const r0 = "F0.0 F1.0 F2.0 F3.0 F0.1 F1.1 B0.1 F2.1 B1.1 B2.1 F3.1 B0.0 B3.1 B1.0 W0.0 "
                                  "B2.0 B3.0 W1.0 W0.1 W2.0 W3.0 W1.1 W2.1 W3.1";
    static const char *const r1[] = { "F0.0 F1.0 F2.0 F0.1 F1.1 F3.0 F2.1 B0.1 B1.1 B2.1 F3.1 B0.0 B1.0 B2.0 B3.1 B3.0",
                                      "F0.0 F1.0 F2.0 F0.1 F1.1 F3.0 F2.1 B0.1 B1.1 B2.1 F3.1 B0.0 B1.0 B2.0 B3.1 B3.0 "
                                      "W0.0 W1.0 W2.0 W3.0 W0.1 W1.1 W2.1 W3.1" };
    /* a loop: rank 0 gives rank 1 its output of chunk 0, rank 1 gives rank 0 its output of chunk 1 (stage 2) */
    static const char *const l0 = "F0.0 F1.0 F2.0 F3.0 F0.1 F1.1 F2.1 F3.1 B0.1 B1.1 B2.1 B3.1 B0.0 B1.0 B2.0 B3.0 "
                                  "W0.0 W1.0 W2.0 W3.0 W0.1 W1.1 W2.1 W3.1";
    static const fsc_parallel_kind kinds[] = { FSC_PAR_DDP, FSC_PAR_ZERO1, FSC_PAR_ZERO2, FSC_PAR_FSDP };
    run ref;
    memset(&ref, 0, sizeof ref);
    for (int c = 0; c < 3; c++)
        for (int k = 0; k < 4; k++) {
            fsc_pipe_action a0[24], a1[24];
            int n[2] = { parse_list(c < 2 ? r0 : l0, a0), parse_list(c < 2 ? r1[c] : l0, a1) };
            const fsc_pipe_action *lists[] = { a0, a1 };
            run p = make(2, 2, kinds[k], 4, 1);
            p.cfg.layers = LAYERS;
            p.steps = 2;
            p.po.prefetch = 1;
            p.po.schedule = FSC_SCHED_CUSTOM;
            p.po.placement = c < 2 ? FSC_PIPE_V : FSC_PIPE_LOOP;
            p.po.virtual_stages = 2;
            p.po.actions = lists;
            p.po.nactions = n;
            if (!ref.params) ref = reference(&p);
            char what[96];
            snprintf(what, sizeof what, "%s, rank 1 %s W, %s", c < 2 ? "V" : "loop", c == 0 ? "without" : "with",
                     kind_names[kinds[k]]);
            run_against(&ref, &p, what);
        }
    free(ref.params);
}

/* Found by tests/test_resume_random.c: DDP with small buckets (a bucket per layer) inside interleaved stages,
 * whose checkpointed micro-batches recompute their forward in backward. In the last micro-batch's backward chunk 1
 * reduced each layer as it ended; then chunk 0's recompute of an earlier micro-batch, starting at the rank's first
 * layer, reset DDP's range of pending gradients to "from the top", so chunk 0's first reduction covered chunk 1's
 * gradients again (summed twice over the data ranks). DDP now starts a pending range at the layer that begins it
 * and leaves it alone in forwards. dp 2 x pp 2 with 2 and 3 chunks, 2 and 4 micro-batches, the checkpoint modes
 * that recompute: DDP's bits. */
static void test_pipe_ddp_small_buckets_chunks(void **state) {
    (void)state;
    static const int cfg[][3] = { { 2, 2, 4 }, { 2, 4, 4 }, { 3, 2, 6 } }; /* chunks, micro-batches, blocks */
    for (int c = 0; c < 3; c++)
        for (int ck = 0; ck < 2; ck++) { /* except_last, always */
            run p = make(2, 2, FSC_PAR_DDP, cfg[c][1], 1);
            p.cfg.layers = cfg[c][2];
            p.steps = 2;
            p.po.prefetch = 1; /* chunks need prefetch */
            p.po.bucket_bytes = 1;
            p.po.schedule = FSC_SCHED_INTERLEAVED;
            p.po.virtual_stages = cfg[c][0];
            p.po.pipe_checkpoint = (fsc_pipe_checkpoint)ck;
            run ref = reference(&p);
            char what[96];
            snprintf(what, sizeof what, "ddp, a bucket per layer, %d chunks, %d micro-batches, checkpoint %s",
                     cfg[c][0], cfg[c][1], ckpt_names[ck]);
            run_against(&ref, &p, what);
            free(ref.params);
        }
}

/* P 2, 3, 4 x (one chunk, two (P 2: or three) in a loop, two in a V) x (no W, W everywhere, W on some ranks),
 * then cycling, each with its M in 1 .. 2P + 1, checkpoint modes, prefetch and balance drawn; then dp 2 x pp 2. */
static void test_pipe_random_lists(void **state) {
    (void)state;
    const uint64_t seed = env_u64("FSC_PIPE_RANDOM_SEED", 0x5eed2024ull);
    const int ncases = (int)env_u64("FSC_PIPE_RANDOM_CASES", 108);
    static state_t st;
    memset(&st, 0, sizeof st);
    rng R = { seed };
    for (int c = 0; c < ncases; c++) {
        list_spec sp;
        memset(&sp, 0, sizeof sp);
        sp.p = 2 + c % 3;
        const int lay = c / 3 % 3;
        sp.v = lay == 0 ? 1 : lay == 1 && sp.p == 2 && rng_int(&R, 2) ? 3 : 2;
        sp.pl = lay == 2 ? FSC_PIPE_V : FSC_PIPE_LOOP;
        sp.m = 1 + rng_int(&R, 2 * sp.p + 1);
        draw_w(&sp, c / 9 % 3, &R);
        one_case(&st, rng_next(&R), 1, FSC_PAR_DDP, 0, 0, sp);
    }
    /* dp 2 x pp 2 with every strategy inside the stages (the sharded ones reduce per bucket or unit) */
    static const fsc_parallel_kind kinds[] = { FSC_PAR_DDP, FSC_PAR_ZERO1, FSC_PAR_ZERO2, FSC_PAR_FSDP };
    for (int c = 0; c < (ncases / 4 > 24 ? ncases / 4 : 24); c++) {
        list_spec sp;
        memset(&sp, 0, sizeof sp);
        sp.p = 2;
        sp.v = c % 3 ? 2 : 1;
        sp.pl = c % 3 == 2 ? FSC_PIPE_V : FSC_PIPE_LOOP;
        sp.m = 1 + rng_int(&R, 5);
        draw_w(&sp, 1 + rng_int(&R, 2), &R);
        one_case(&st, rng_next(&R), 2, kinds[c / 3 % 4], 0, 0, sp);
    }
    /* a mixture of experts in every second block: pp 2 and 3 on one data rank, dp 2 x pp 2 with ep 2 */
    for (int c = 0; c < (ncases / 9 > 12 ? ncases / 9 : 12); c++) {
        list_spec sp;
        memset(&sp, 0, sizeof sp);
        const int dp = c % 4 == 3 ? 2 : 1;
        sp.p = dp == 2 ? 2 : 2 + c % 2;
        sp.v = c % 3 ? 2 : 1;
        sp.pl = c % 3 == 2 ? FSC_PIPE_V : FSC_PIPE_LOOP;
        sp.m = 1 + rng_int(&R, 2 * sp.p + 1);
        draw_w(&sp, rng_int(&R, 3), &R);
        one_case(&st, rng_next(&R), dp, dp == 2 ? kinds[(c / 4 + 1) % 4] : FSC_PAR_DDP, 1, 0, sp); /* zero1, 2, fsdp */
    }
    /* sends that wait for their receive (NCCL's, sim_sync_sends): chunks in a loop (2, on 2 ranks also 3) and in
     * a V over 2 to 4 ranks, W drawn as above; every fourth case dp 2 x pp 2 with FSDP inside the stages */
    const int nsync = ncases / 4 > 24 ? ncases / 4 : 24, runs = st.runs;
    for (int c = 0; c < nsync; c++) {
        list_spec sp;
        memset(&sp, 0, sizeof sp);
        const int dp = c % 4 == 3 ? 2 : 1;
        sp.p = dp == 2 ? 2 : 2 + c % 3;
        sp.v = sp.p == 2 && c % 5 == 0 ? 3 : 2;
        sp.pl = c % 3 == 1 && sp.v == 2 ? FSC_PIPE_V : FSC_PIPE_LOOP;
        sp.m = 1 + rng_int(&R, 2 * sp.p + 1);
        draw_w(&sp, rng_int(&R, 3), &R);
        one_case(&st, rng_next(&R), dp, dp == 2 ? FSC_PAR_FSDP : FSC_PAR_DDP, 0, 1, sp);
    }
    printf("random custom schedules: %d lists validated, %d runs equal to DDP (seed 0x%016" PRIx64 "), %d of them "
           "with sends that wait for their receive\n", st.lists, st.runs, seed, st.runs - runs);
    for (int x = 0; x < 2; x++)
        for (int d = 0; d < 3; d++)
            for (int m = 0; m <= MAXM; m++) free(st.refs[x][d][m].params);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pipe_custom_last_w_order),
        cmocka_unit_test(test_pipe_ddp_small_buckets_chunks),
        cmocka_unit_test(test_pipe_random_lists),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
