/* The tied-gradient buffer of a pipeline's tied tensor (model.h's tied_grad; the GPT's dwte_head, V x C floats)
 * lives only on the ranks that run its owner or a user: the embedding's stage and the head's. Every rank builds the
 * whole model, and the model allocates a tied tensor's buffer with its first record whose range holds the owner or
 * a user, so a rank that runs neither (a middle stage) never holds one.
 * Oracle: the device ledger's FSC_TAG_GRADS peak of every rank equals the bytes its layers need, computed from the
 * model's declaration and the engine's stages (DDP inside the stages, f32, no_sync: the gradients of the tensors its
 * layers own, plus numel floats per tied tensor whose owner or a user the rank runs); the middle ranks' need holds
 * no V x C. 1f1b over 4 stages (prefetch 0), interleaved (3 ranks x 2 chunks: rank 0 the embedding, rank 2 the head) and zbv (4
 * ranks: rank 0 both), with an evaluation before each step, each bit-identical to DDP over the same micro-batches.
 * Allocating the buffers at the model's creation, as before, fails the peaks of the middle ranks by V x C. */
#include "pipetest.h"

typedef struct {
    const char *what;
    int pp, v, m;
    fsc_pipe_schedule sched;
} tg_case;

/* Every rank's ledger against its need; the ranks that run neither the embedding (layer 0) nor the head (the last
 * layer) need no tied buffer, the others one of V x C floats (zbv: rank 0 runs both, the last rank neither). */
static void check_ledger(const run *p, const char *what) {
    const size_t vc = (size_t)fsc_gpt_vocab_rows(&p->cfg) * (size_t)p->cfg.dim * sizeof(float);
    int middle = 0;
    for (int rk = 0; rk < p->world; rk++) {
        const int holds = rk == 0 || (p->po.schedule != FSC_SCHED_ZBV && rk == p->world - 1);
        middle += !holds;
        if (p->grads_tied[rk] != (holds ? vc : 0))
            fail_msg("%s: rank %d runs %s, but its need counts %zu bytes of tied buffers (V x C is %zu)", what, rk,
                     holds ? "the embedding or the head" : "neither the embedding nor the head", p->grads_tied[rk], vc);
        if (p->grads_peak[rk] != p->grads_need[rk])
            fail_msg("%s: rank %d's FSC_TAG_GRADS peak is %zu bytes, its layers need %zu (V x C is %zu)", what, rk,
                     p->grads_peak[rk], p->grads_need[rk], vc);
    }
    if (middle == 0) fail_msg("%s: no rank runs neither the embedding nor the head", what);
}

static void test_tied_grad_only_where_used(void **state) {
    (void)state;
    static const tg_case cases[] = {
        { "1f1b, pp 4", 4, 1, 4, FSC_SCHED_1F1B },
        { "interleaved, pp 3 x 2 chunks", 3, 2, 3, FSC_SCHED_INTERLEAVED },
        { "zbv, pp 4", 4, 2, 4, FSC_SCHED_ZBV },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        run p = make(1, cases[c].pp, FSC_PAR_DDP, cases[c].m, 1);
        p.cfg.layers = 8;
        p.cfg.vocab = 300; /* V x C 7,200 floats, about a block's parameters (7,224) */
        p.steps = 2;
        p.eval = 1; /* an evaluation (forward-only records) before each step */
        p.po.prefetch = c > 0; /* 1f1b: the tied messages on the pipeline group; the others on their own */
        p.po.schedule = cases[c].sched;
        p.po.virtual_stages = cases[c].sched == FSC_SCHED_INTERLEAVED ? cases[c].v : 0;
        run ref = reference(&p);
        train(&p);
        assert_same(&ref, &p, cases[c].what);
        check_ledger(&p, cases[c].what);
        free(p.params), free(ref.params);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tied_grad_only_where_used),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
