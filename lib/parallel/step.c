/* The runner of a step's actions (step.h), and the executor of the whole model on one rank.
 * A step is this rank's list of actions: the forwards and backwards made by a schedule, then the tail. With a
 * pipeline the schedule is the pipeline's (pipe_sched.c's built-in schedules or a custom list, run by pipe.c's
 * executor with its sends and receives); without one, the accumulation list F0 B0 F1 B1 ... F(K-1) B(K-1), which
 * is 1F1B on one rank (no warm-up forwards), made and validated by pipe_sched.c as any schedule. The runner appends
 * the tail, which no schedule holds: R (the strategy's end_backward) and O (engine.c's fsc_step_optimize: the
 * sums, unscale, the vote, clipping, the optimizer); with the exact reduction R E O, E (exact.c) ending an attempt
 * and, when the step must be recomputed, having the runner begin the list again. One loop runs every list: each
 * action a span of the trace (F, B, W with the seconds it waited for messages). An evaluation is a list of
 * forwards only (F of each micro-batch on each of this rank's chunks in turn) without a tail, run by the same
 * loop and executors, without trace spans of its actions.
 * Before each F, B or W of a step the runner sets the engine's place in it (e->micro, e->sync: their one writer),
 * so the strategies' hooks know which micro-batch runs and whether its backward reduces.
 * The whole model's executor is the accumulation loop's body: micro-batch k's record (e->acts, one: its
 * forward and backward are adjacent in the list) passed to the actions' compute (step_compute.c, the pipeline's
 * too), which sums the loss and MoE statistics in micro-batch order.
 * Not here: the compute of an action (step_compute.c); the strategy's begin_step (engine.c's step_model), what O
 * runs (engine.c), the integer sums and exponent of the exact reduction (exact.c). */
#include <stdlib.h>
#include "step.h"
#include "exact.h"
#include "pipe.h"

/* The whole model's list, made again when the number of micro-batches changes (the exact reduction's units), and
 * an evaluation's (any executor), made again when its length changes. */
struct fsc_step_list {
    fsc_pipe_action *a;
    int n, K;
    fsc_pipe_action *f; /* (nf) F of micro-batch k on chunk ch at k v + ch */
    int nf;
};

static fsc_status step_lists(fsc_engine *e, struct fsc_step_list **out) {
    if (!e->accum && !(e->accum = calloc(1, sizeof *e->accum)))
        return fsc_error(FSC_ERR_NOMEM, "engine: out of memory");
    *out = e->accum;
    return FSC_OK;
}

/* An evaluation's list: F of each of K micro-batches on each of v chunks, micro-batch by micro-batch. */
static fsc_status forward_list(fsc_engine *e, int K, int v, const fsc_pipe_action **out, int *n) {
    struct fsc_step_list *l = NULL;
    FSC_TRY(step_lists(e, &l));
    if (!l->f || l->nf != K * v) {
        free(l->f);
        l->nf = 0;
        if (!(l->f = malloc((size_t)K * (size_t)v * sizeof *l->f)))
            return fsc_error(FSC_ERR_NOMEM, "engine: out of memory for %d x %d actions", K, v);
        for (int k = 0; k < K; k++)
            for (int ch = 0; ch < v; ch++) l->f[k * v + ch] = (fsc_pipe_action){ FSC_ACT_FORWARD, k, ch };
        l->nf = K * v;
    }
    *out = l->f;
    *n = l->nf;
    return FSC_OK;
}

static fsc_status accum_list(fsc_engine *e, int K, const fsc_pipe_action **out, int *n) {
    struct fsc_step_list *l = NULL;
    FSC_TRY(step_lists(e, &l));
    if (!l->a || l->K != K) {
        fsc_pipe_schedule_free(l->a);
        l->a = NULL;
        l->K = 0;
        fsc_pipe_action *a = NULL;
        int na = 0;
        FSC_TRY(fsc_pipe_schedule_make(FSC_SCHED_1F1B, 1, 1, K, 0, &a, &na));
        const fsc_pipe_action *const lists[1] = { a };
        fsc_status s = fsc_pipe_schedule_validate(1, 1, K, lists, &na);
        if (s != FSC_OK) {
            fsc_pipe_schedule_free(a);
            return s;
        }
        l->a = a, l->n = na, l->K = K;
    }
    *out = l->a;
    *n = l->n;
    return FSC_OK;
}

void fsc_step_free(fsc_engine *e) {
    if (!e->accum) return;
    fsc_pipe_schedule_free(e->accum->a);
    free(e->accum->f);
    free(e->accum);
    e->accum = NULL;
}

/* ---- the whole model on this rank ---- */

static fsc_status whole_begin(fsc_engine *e, fsc_step_ctx *c) {
    c->fwd = -1;
    if (!c->eval) return accum_list(e, c->K, &c->acts, &c->nacts);
    c->rec = e->acts && e->acts_B == c->mb ? e->acts : NULL;
    if (c->rec) return FSC_OK;
    fsc_model_acts_opts o = { .B = c->mb, .first = e->lf, .last = e->ll, .checkpoint = e->po.checkpoint };
    FSC_TRY(fsc_model_acts_make(e->m, NULL, &o, &c->own));
    c->rec = c->own;
    return FSC_OK;
}

static fsc_status whole_forward(fsc_engine *e, fsc_step_ctx *c, int k, int ch) {
    (void)ch;
    FSC_TRY(fsc_step_forward_on(e, c, c->eval ? c->rec : e->acts, k, e->lf, e->ll, 0));
    c->fwd = k;
    return c->out_status == FSC_OK ? FSC_OK : fsc_error(c->out_status, "%s", c->out_why); /* predict stops at once */
}

static fsc_status whole_backward(fsc_engine *e, fsc_step_ctx *c, int k, int ch) {
    (void)ch;
    if (c->fwd != k) /* one record: the accumulation list puts each B right after its F */
        return fsc_error(FSC_ERR_INTERNAL, "step: B of micro-batch %d does not follow its F", k);
    return fsc_step_backward_on(e, c, e->acts, 0);
}

static fsc_status whole_weight(fsc_engine *e, fsc_step_ctx *c, int k, int ch) {
    (void)e, (void)c, (void)ch;
    return fsc_error(FSC_ERR_INTERNAL, "step: W of micro-batch %d in the accumulation list", k);
}

/* An evaluation's own record goes before its sums, as the record of a step stays: only what runs them is added. */
static fsc_status whole_end(fsc_engine *e, fsc_step_ctx *c) {
    fsc_step_release(e, c);
    return FSC_OK;
}

/* The loss (and the MoE statistics) over the data group, with the batch check: one all-gather. */
static fsc_status whole_sums(fsc_engine *e, fsc_step_ctx *c, double *total, double moe[3], fsc_status *batch) {
    if (!e->m->ops->aux_stats || c->eval)
        return fsc_engine_sum_over_ranks(e, &c->loss, 1, c->local_batch, c->global_batch, total, batch);
    double local[4] = { c->loss, c->moe[0], c->moe[1], c->moe[2] }, sums[4];
    FSC_TRY(fsc_engine_sum_over_ranks(e, local, 4, c->local_batch, c->global_batch, sums, batch));
    *total = sums[0];
    moe[0] = sums[1], moe[1] = sums[2], moe[2] = sums[3];
    return FSC_OK;
}

static const fsc_step_exec whole_exec = { whole_begin, { whole_forward, whole_backward, whole_weight }, whole_end,
                                          whole_sums };

/* ---- the runner ---- */

/* R: every gradient reduction of the step finished (the strategy's end_backward). */
static fsc_status reduced(fsc_engine *e, fsc_step_ctx *c) {
    (void)c;
    return e->st->end_backward ? e->st->end_backward(e) : FSC_OK;
}

/* A step's tail: R O; with the exact reduction R E O (E: exact.c). */
static const fsc_step_tail tail[] = { { "R", reduced }, { "O", fsc_step_optimize } };
static const fsc_step_tail exact_tail[] = { { "R", reduced }, { "E", fsc_exact_settle }, { "O", fsc_step_optimize } };

fsc_status fsc_step_prepare(fsc_engine *e, fsc_step_ctx *c, const void *inputs, const void *targets,
                            int local_batch, int global_batch, fsc_step_info *info) {
    FSC_TRY(fsc_ep_check_batch(e, local_batch, "step")); /* before any rank's own refusals: all reach it */
    const float loss_scale = e->use_scaler ? e->scaler.scale : 1.0f;
    *c = (fsc_step_ctx){ .x = e->pipe ? &fsc_pipe_exec : &whole_exec, .inputs = inputs, .targets = targets,
                         .local_batch = local_batch, .global_batch = global_batch, .K = e->po.accum,
                         .dscale = loss_scale / ((float)global_batch * (float)e->m->loss_terms), .fwd = -1,
                         .reduces = FSC_ACT_BACKWARD, .loss_scale = loss_scale, .info = info };
    c->wait = &c->no_wait;
    c->tail = e->exact ? exact_tail : tail;
    c->ntail = e->exact ? 3 : 2;
    if (e->exact) FSC_TRY(fsc_exact_prepare(e, c)); /* its units: c->K, c->units */
    if (local_batch < 1 || local_batch % c->K != 0)
        return fsc_error(FSC_ERR_INVALID, "the local batch of %d sequences does not split into %d micro-batches",
                         local_batch, c->K);
    c->mb = local_batch / c->K;
    return e->pipe ? FSC_OK : fsc_engine_ensure_acts(e, c->mb);
}

fsc_status fsc_step_prepare_eval(fsc_engine *e, fsc_step_ctx *c, const void *inputs, const void *targets,
                                 int local_batch, int global_batch, int mb, int n, double *units, float *out,
                                 size_t *per_sample) {
    *c = (fsc_step_ctx){ .x = e->pipe ? &fsc_pipe_exec : &whole_exec, .inputs = inputs, .targets = targets,
                         .local_batch = local_batch, .global_batch = global_batch, .K = n, .mb = mb,
                         .units = units, .fwd = -1, .reduces = FSC_ACT_BACKWARD, .eval = 1, .out = out,
                         .per_sample = per_sample };
    c->wait = &c->no_wait;
    return forward_list(e, n, e->pipe ? fsc_pipe_chunks(&e->po) : 1, &c->acts, &c->nacts);
}

void fsc_step_eval_enter(fsc_engine *e, int place[2]) {
    place[0] = e->micro, place[1] = e->sync;
    e->micro = 0;
    e->sync = 0;
}

void fsc_step_eval_leave(fsc_engine *e, const int place[2]) {
    e->micro = place[0];
    e->sync = place[1];
}

void fsc_step_release(fsc_engine *e, fsc_step_ctx *c) {
    if (c->own) e->m->ops->acts_free(e->m->ctx, c->own);
    c->own = c->rec = NULL;
}

/* Action a's place in the step, for the strategies' hooks (step.h's fsc_step_run); an evaluation keeps
 * fsc_step_eval_enter's. */
static void step_place(fsc_engine *e, const fsc_step_ctx *c, const fsc_pipe_action *a) {
    if (c->eval) return;
    e->micro = a->micro;
    e->sync = a->kind != FSC_ACT_FORWARD &&
              (e->exact || (!e->po.no_sync && a->kind == FSC_ACT_BACKWARD) ||
               (a->kind == c->reduces && a->micro == c->K - 1));
}

/* The exact reduction's next attempt (E found another exponent): the step from its start again, as step_model
 * began it: what the actions sum cleared, exact.c's attempt begun, the strategy's begin_step. */
static fsc_status step_again(fsc_engine *e, fsc_step_ctx *c) {
    c->again = 0;
    c->loss = 0;
    c->moe[0] = c->moe[1] = c->moe[2] = 0;
    c->fwd = -1;
    c->acts = NULL, c->nacts = 0;
    c->reduces = FSC_ACT_BACKWARD;
    c->wait = &c->no_wait, c->no_wait = 0;
    fsc_exact_begin_attempt(e, c);
    return e->st->begin_step ? e->st->begin_step(e) : FSC_OK;
}

/* The list once: the executor's begin, its actions, its end, the tail (up to an E that asks for another attempt). */
static fsc_status run_list(fsc_engine *e, fsc_step_ctx *c) {
    const fsc_step_exec *x = c->x;
    fsc_trace *tr = c->eval ? NULL : e->trace;
    FSC_TRY(x->begin(e, c));
    for (int i = 0; i < c->nacts; i++) {
        const fsc_pipe_action *a = &c->acts[i];
        const double waited = *c->wait;
        fsc_trace_begin(tr, "pipe", "%c%d.%d", "FBW"[a->kind], a->micro, a->chunk);
        step_place(e, c, a);
        fsc_status s = x->action[a->kind](e, c, a->micro, a->chunk);
        fsc_trace_arg(tr, "wait_us", (*c->wait - waited) * 1e6);
        fsc_trace_end(tr);
        FSC_TRY(s);
    }
    FSC_TRY(x->end(e, c));
    for (int i = 0; i < c->ntail && !c->again; i++) {
        fsc_trace_begin(tr, "tail", "%s", c->tail[i].name);
        fsc_status s = c->tail[i].run(e, c);
        fsc_trace_end(tr);
        FSC_TRY(s);
    }
    return FSC_OK;
}

fsc_status fsc_step_run(fsc_engine *e, fsc_step_ctx *c) {
    fsc_status s = run_list(e, c);
    while (s == FSC_OK && c->again) {
        s = step_again(e, c);
        if (s == FSC_OK) s = run_list(e, c);
    }
    if (c->tail == exact_tail) fsc_exact_end(e);
    return s;
}

fsc_status fsc_step_sums(fsc_engine *e, fsc_step_ctx *c, double *total, double moe[3], fsc_status *batch) {
    moe[0] = moe[1] = moe[2] = 0;
    FSC_TRY(c->x->sums(e, c, total, moe, batch));
    moe[0] /= (double)fsc_comm_size(e->comm) * c->K; /* one group per rank and micro-batch */
    return FSC_OK;
}
