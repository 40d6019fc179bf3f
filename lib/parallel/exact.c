/* The engine's exact reduction mode (po.reduce_exact, docs/determinism.md): the same bits at any world size.
 *
 * A step runs its local batch as units of U sequences, each one micro-batch wherever it is placed, so a unit's
 * gradient depends only on its data and the weights. Every gradient reduction of the step (fsc_engine_reduce,
 * the strategies' buckets) then carries one unit's gradient on this rank: it is converted to int64 on the step's
 * exponent E (fsc/exact.h), summed over the group as int64 (associative: no order matters) and added to an int64
 * shadow of the reduced gradient it is for (the first term of an element is stored there: no zeroing, and a direct
 * all-reduce receives into the shadow). After the last backward:
 *   1. A = max over every unit gradient of every rank of |g| (an all-reduce of maxima over the world, or, when the
 *      data group is the world, one more value in the all-gather of the units' losses below: exact);
 *   2. E' = fsc_exact_exponent(A, units of the global batch): what every configuration computes;
 *   3. E' = E: the shadows become the reduced f32 gradients, once. E' != E (the first step, a changed scale, or
 *      a gradient out of E's range, which A shows): the step is recomputed on E' (with one unit per rank on DDP
 *      only its reductions run again, from the unit gradients still in place: replay). The bits never depend on
 *      the exponent a step started from, only on E', a function of the step's unit gradients.
 *   A non-finite gradient (A = inf) poisons the reduced gradients, so the engine's vote skips or stops the step.
 * The loss and the MoE statistics are sums of one double per unit: all units' values are gathered and added in
 * ascending order (the sorted multiset is the same in every configuration).
 * The step is step.c's list over the units with the tail R E O: fsc_exact_prepare sets the units up and begins
 * the first attempt, E (fsc_exact_settle) does 1 to 3 after R and asks the runner for another attempt (the list
 * from its start) or replays; O's sums are fsc_exact_sums.
 * Every strategy reduces this way (ddp, zero1/2 and fsdp: their reductions are fsc_engine_reduce's; hybrid
 * sharding sums over the shard group, then across the replicas); a pipeline reduces every micro-batch's
 * gradient of each stage, and its last stage's per-micro-batch losses are summed and sent to every stage.
 * Expert parallelism: an expert's rank computes its gradient from the units of every rank of its expert group, so
 * the model hands each source's part (model.h's grad_term) here instead of adding it: converted at once and added
 * as int64, it joins the reduction whose input holds that gradient (the expert-data group's), in which the float
 * gradient itself is zero. Not here: the integer arithmetic (lib/core/exact.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "fsc/exact.h"
#include "exact.h"
#include "pipe.h"
#include "step.h"

typedef struct fsc_exact fsc_exact;

/* The terms by source of one expert gradient in this unit (fsc_exact_term): their int64 sum so far. */
typedef struct {
    const float *grad;  /* the gradient they are for (device, n floats); NULL: a free entry */
    size_t n, cap;
    int64_t *q;         /* (cap) host */
} term_sum;

enum { INFLIGHT = 4 }; /* int64 reductions in flight at most (each with a buffer of its own) */

/* A reduction in flight: its request, its int64 buffer (device) and where its result goes. */
typedef struct {
    fsc_comm_req *req;  /* NULL: the slot is free */
    int64_t *buf;       /* device, cap elements, kept between steps */
    size_t cap;
    const int64_t *res; /* the result: inside buf (nout), or the shadow itself (fresh on the direct path) */
    int k;              /* into shadow k from element at */
    size_t at, nout;
    int fresh;          /* the first term of its shadow elements in this attempt: landed by a copy, not a sum */
    uint64_t issued;    /* when it was started (the x->issued count) */
} flight;

/* A reduction of the attempt (fsc_exact_reduce's arguments), kept to run it again on another exponent. */
typedef struct {
    fsc_comm *c, *then;
    int rs;
    const float *in, *out;
    size_t n;
} reduction;

/* The elements of a shadow written in this attempt: disjoint ranges [lo, hi), adjacent ones merged. An element
 * outside them holds no term yet (its int64 is stale, read as 0): so the first term of a range is stored, not
 * added to a zeroed shadow, and a direct all-reduce writes its result straight into the shadow. */
typedef struct {
    size_t (*r)[2];
    int n, cap;
} ranges;

struct fsc_exact {
    int E;          /* this attempt's exponent: the last step's to start (a guess, never the bits) */
    uint64_t terms; /* units in the global batch */
    double amax;    /* largest |element| of the unit gradients this rank reduced in this attempt */
    int64_t **acc;  /* (e->ngsegs) the reduced gradients as int64, host */
    ranges *wr;     /* (e->ngsegs) the elements of each acc written in this attempt */
    int direct;     /* device memory is host memory (the cpu device, no modelled copy cost): no staging */
    float *hf;      /* host staging of a reduction: f32 in, */
    int64_t *hq;    /* its int64s */
    size_t cap;
    flight fl[INFLIGHT];
    uint64_t issued;/* reductions started so far */
    term_sum *ts;   /* (nts) expert gradients by source waiting for their reduction */
    int nts;
    reduction *log; /* (nlog) the attempt's reductions in order; valid while `kept` */
    int nlog, logcap;
    int kept;       /* the attempt's unit gradients are still where its reductions read them (replay) */
    int replaying;
    double *rec;    /* the data group's records (gather_records), then this rank's own */
    size_t reccap;
    int rec_m;      /* rows of values in the records gathered last */
    /* the step in progress (fsc_exact_prepare) */
    double *vals;   /* (4 x its units, of nvals) the units' values: m rows (the loss; with aux_stats the aux loss,
                     * assigned, dropped) of the step's units */
    size_t nvals;
    int U, m;       /* sequences per unit, rows of vals */
    int records;    /* the data group is the world, no pipeline: the records carry the largest magnitude too */
    fsc_status batch; /* a pipeline's batch check (each stage against the last stage's group), the last attempt's */
};

fsc_status fsc_exact_validate(const fsc_layout *l, const fsc_parallel_opts *po) {
    if (po->reduce_exact != 0 && po->reduce_exact != 1)
        return fsc_error(FSC_ERR_INVALID, "reduce_exact must be 0 or 1, not %d", po->reduce_exact);
    if (po->unit < 0) return fsc_error(FSC_ERR_INVALID, "unit must be >= 1 sequences (0: the micro-batch), not %d",
                                       po->unit);
    if (!po->reduce_exact) {
        if (po->unit) return fsc_error(FSC_ERR_INVALID, "unit %d applies to the exact reduction (reduce_exact)", po->unit);
        return FSC_OK;
    }
    return FSC_OK;
}

fsc_status fsc_exact_create(fsc_engine *e) {
    fsc_exact *x = calloc(1, sizeof *x);
    if (!x) return fsc_error(FSC_ERR_NOMEM, "reduce exact: out of memory");
    e->exact = x;
    x->E = FSC_EXACT_ZERO_EXPONENT;
    x->direct = !strcmp(fsc_device_name(e->dev), "cpu") && !fsc_device_has_copy_cost(e->dev);
    x->acc = calloc((size_t)e->ngsegs + 1, sizeof *x->acc);
    x->wr = calloc((size_t)e->ngsegs + 1, sizeof *x->wr);
    if (!x->acc || !x->wr) return fsc_error(FSC_ERR_NOMEM, "reduce exact: out of memory");
    for (int k = 0; k < e->ngsegs; k++) {
        x->acc[k] = malloc((e->glens[k] + 1) * sizeof(int64_t)); /* read only where written (x->wr) */
        if (!x->acc[k]) return fsc_error(FSC_ERR_NOMEM, "reduce exact: out of memory for %zu gradients", e->glens[k]);
    }
    return FSC_OK;
}

void fsc_exact_free(fsc_engine *e) {
    fsc_exact *x = e->exact;
    if (!x) return;
    for (int i = 0; i < INFLIGHT; i++) {
        if (x->fl[i].req) (void)fsc_comm_wait(x->fl[i].req); /* left by a failed step */
        fsc_comm_req_free(x->fl[i].req);
        fsc_device_release(e->dev, x->fl[i].buf);
    }
    for (int k = 0; x->acc && k < e->ngsegs; k++) free(x->acc[k]);
    for (int k = 0; x->wr && k < e->ngsegs; k++) free(x->wr[k].r);
    free(x->acc);
    free(x->wr);
    for (int i = 0; i < x->nts; i++) free(x->ts[i].q);
    free(x->ts);
    free(x->hf);
    free(x->hq);
    free(x->rec);
    free(x->log);
    free(x->vals);
    free(x);
    e->exact = NULL;
}

static fsc_status reserve(fsc_exact *x, size_t n) {
    if (n <= x->cap) return FSC_OK;
    float *f = realloc(x->hf, n * sizeof *f);
    if (f) x->hf = f;
    int64_t *q = realloc(x->hq, n * sizeof *q);
    if (q) x->hq = q;
    if (!f || !q) return fsc_error(FSC_ERR_NOMEM, "reduce exact: out of memory for %zu elements", n);
    x->cap = n;
    return FSC_OK;
}

/* The gseg k holding out[0..n) and out's offset in it. */
static fsc_status find_shadow(const fsc_engine *e, const float *out, size_t n, int *k, size_t *at) {
    const uintptr_t p = (uintptr_t)out;
    for (int i = 0; i < e->ngsegs; i++) {
        const uintptr_t g = (uintptr_t)e->gsegs[i];
        if (p >= g && p + n * sizeof(float) <= g + e->glens[i] * sizeof(float)) {
            *k = i;
            *at = (p - g) / sizeof(float);
            return FSC_OK;
        }
    }
    return fsc_error(FSC_ERR_INTERNAL, "reduce exact: a reduction of %zu elements is for no reduced gradient", n);
}

/* Whether [lo, hi) meets a range of w. */
static int ranges_meet(const ranges *w, size_t lo, size_t hi) {
    for (int i = 0; i < w->n; i++)
        if (lo < w->r[i][1] && w->r[i][0] < hi) return 1;
    return 0;
}

/* [lo, hi) (meeting none of w's ranges) added to w, merged with a range it touches. */
static fsc_status ranges_add(ranges *w, size_t lo, size_t hi) {
    int below = -1, above = -1;
    for (int i = 0; i < w->n; i++) {
        if (w->r[i][1] == lo) below = i;
        if (w->r[i][0] == hi) above = i;
    }
    if (below >= 0 && above >= 0) { /* joins two: the one above goes */
        w->r[below][1] = w->r[above][1];
        w->r[above][0] = w->r[w->n - 1][0], w->r[above][1] = w->r[w->n - 1][1];
        w->n--;
        return FSC_OK;
    }
    if (below >= 0) w->r[below][1] = hi;
    if (above >= 0) w->r[above][0] = lo;
    if (below >= 0 || above >= 0) return FSC_OK;
    if (w->n == w->cap) {
        int cap = w->cap ? 2 * w->cap : 8;
        size_t(*r)[2] = realloc(w->r, (size_t)cap * sizeof *r);
        if (!r) return fsc_error(FSC_ERR_NOMEM, "reduce exact: out of memory");
        w->r = r, w->cap = cap;
    }
    w->r[w->n][0] = lo, w->r[w->n][1] = hi;
    w->n++;
    return FSC_OK;
}

static int cmp_range(const void *pa, const void *pb) {
    const size_t *a = pa, *b = pb;
    return (a[0] > b[0]) - (a[0] < b[0]);
}

static fsc_status land(fsc_engine *e, flight *f);

/* Before a sum into shadow k's elements [at, at + n): the first terms in flight into them landed. */
static fsc_status settle(fsc_engine *e, int k, size_t at, size_t n) {
    for (int i = 0; i < INFLIGHT; i++) {
        flight *g = &e->exact->fl[i];
        if (g->req && g->fresh && g->k == k && at < g->at + g->nout && g->at < at + n) FSC_TRY(land(e, g));
    }
    return FSC_OK;
}

/* Wait for the reduction in slot f and store its result in its shadow (fresh) or add it there. */
static fsc_status land(fsc_engine *e, flight *f) {
    fsc_exact *x = e->exact;
    if (!f->req) return FSC_OK;
    if (!f->fresh) FSC_TRY(settle(e, f->k, f->at, f->nout));
    fsc_status s = fsc_comm_wait(f->req);
    fsc_comm_req_free(f->req);
    f->req = NULL;
    FSC_TRY(s);
    int64_t *dst = x->acc[f->k] + f->at;
    if (f->res == dst) return FSC_OK; /* received in the shadow */
    if (f->fresh) return fsc_device_download(e->dev, dst, f->res, f->nout * sizeof(int64_t));
    const int64_t *r = f->res;
    if (!x->direct) {
        FSC_TRY(fsc_device_download(e->dev, x->hq, f->res, f->nout * sizeof(int64_t)));
        r = x->hq;
    }
    fsc_exact_add_i64(dst, r, f->nout);
    return FSC_OK;
}

/* Every reduction in flight landed. */
static fsc_status land_all(fsc_engine *e) {
    fsc_status s = FSC_OK;
    for (int i = 0; i < INFLIGHT; i++) {
        fsc_status t = land(e, &e->exact->fl[i]);
        if (s == FSC_OK) s = t;
    }
    return s;
}

/* An entry for the terms of grad (n floats), zeroed: a free one, or a new one. */
static fsc_status new_term_sum(fsc_exact *x, const float *grad, size_t n, term_sum **out) {
    term_sum *t = NULL;
    for (int i = 0; i < x->nts && !t; i++)
        if (!x->ts[i].grad) t = &x->ts[i];
    if (!t) {
        term_sum *a = realloc(x->ts, ((size_t)x->nts + 1) * sizeof *a);
        if (!a) return fsc_error(FSC_ERR_NOMEM, "reduce exact: out of memory");
        x->ts = a;
        t = &x->ts[x->nts++];
        *t = (term_sum){ 0 };
    }
    if (t->cap < n) {
        int64_t *q = realloc(t->q, n * sizeof *q);
        if (!q) return fsc_error(FSC_ERR_NOMEM, "reduce exact: out of memory for %zu gradients", n);
        t->q = q, t->cap = n;
    }
    memset(t->q, 0, n * sizeof *t->q);
    t->grad = grad, t->n = n;
    *out = t;
    return FSC_OK;
}

fsc_status fsc_exact_term(fsc_engine *e, float *grad, const float *piece, size_t n) {
    e->exact->kept = 0; /* a term by source is added as it comes: no replay */
    fsc_exact *x = e->exact;
    term_sum *t = NULL;
    for (int i = 0; i < x->nts && !t; i++)
        if (x->ts[i].grad == grad) t = &x->ts[i];
    if (t && t->n != n)
        return fsc_error(FSC_ERR_INTERNAL, "reduce exact: terms of %zu and %zu elements for one gradient", t->n, n);
    if (!t) FSC_TRY(new_term_sum(x, grad, n, &t));
    const float *h = piece;
    if (!x->direct) {
        FSC_TRY(reserve(x, n));
        FSC_TRY(fsc_device_download(e->dev, x->hf, piece, n * sizeof(float)));
        h = x->hf;
    }
    const double a = fsc_exact_absmax(h, n);
    if (a > x->amax) x->amax = a;
    (void)fsc_exact_add_f32(t->q, h, n, x->E); /* out of range: amax shows it, and the step is redone */
    return FSC_OK;
}

/* The terms waiting for gradients inside in[0 .. n) added to q (host, in's int64s); their entries freed. */
static fsc_status take_terms(fsc_exact *x, int64_t *q, const float *in, size_t n) {
    const uintptr_t lo = (uintptr_t)in, hi = lo + n * sizeof(float);
    for (int i = 0; i < x->nts; i++) {
        term_sum *t = &x->ts[i];
        const uintptr_t p = (uintptr_t)t->grad, end = p + t->n * sizeof(float);
        if (!t->grad || end <= lo || p >= hi) continue;
        if (p < lo || end > hi)
            return fsc_error(FSC_ERR_INTERNAL, "reduce exact: a reduction of %zu elements splits a gradient of %zu "
                             "elements taken by source", n, t->n);
        fsc_exact_add_i64(q + (p - lo) / sizeof(float), t->q, t->n);
        t->grad = NULL;
    }
    return FSC_OK;
}

/* in (n f32, device) on the exponent into dst (n int64, device), its magnitudes into amax, with the terms by
 * source of the gradients it holds. */
static fsc_status convert(fsc_engine *e, int64_t *dst, const float *in, size_t n) {
    fsc_exact *x = e->exact;
    if (x->direct) { /* out of range: amax shows it, and the step is redone */
        (void)fsc_exact_from_f32(dst, in, n, x->E, &x->amax);
        return take_terms(x, dst, in, n);
    }
    FSC_TRY(reserve(x, n));
    FSC_TRY(fsc_device_download(e->dev, x->hf, in, n * sizeof(float)));
    (void)fsc_exact_from_f32(x->hq, x->hf, n, x->E, &x->amax);
    FSC_TRY(take_terms(x, x->hq, in, n));
    return fsc_device_upload(e->dev, dst, x->hq, n * sizeof(int64_t));
}

/* The slot of the next reduction: the first free one (a step whose reductions land before the next start keeps
 * reusing one buffer, warm in the caches), else the oldest in flight. */
static flight *take_slot(fsc_exact *x) {
    flight *f = NULL;
    for (int i = 0; i < INFLIGHT && (!f || f->req); i++)
        if (!f || !x->fl[i].req || x->fl[i].issued < f->issued) f = &x->fl[i];
    f->issued = x->issued++;
    return f;
}

fsc_status fsc_exact_reduce(fsc_engine *e, fsc_comm *c, int rs, fsc_comm *then, const float *in, const float *out,
                            size_t n) {
    fsc_exact *x = e->exact;
    const int N = fsc_comm_size(c), M = then ? fsc_comm_size(then) : 1;
    const size_t nout = rs ? n / (size_t)N : n;
    if (x->kept && !x->replaying) { /* kept for a replay (no memory for it: the step is recomputed instead) */
        if (x->nlog == x->logcap) {
            int cap = x->logcap ? 2 * x->logcap : 16;
            reduction *l = realloc(x->log, (size_t)cap * sizeof *l);
            if (l) x->log = l, x->logcap = cap;
        }
        if (x->nlog < x->logcap) x->log[x->nlog++] = (reduction){ c, then, rs, in, out, n };
        else x->kept = 0;
    }
    int k = 0;
    size_t at = 0;
    FSC_TRY(find_shadow(e, out, nout, &k, &at));
    /* the first term of these shadow elements in this attempt: stored, not added (on the direct path the
     * collective writes it there); later terms of them are sums, landed after it */
    const int fresh = !ranges_meet(&x->wr[k], at, at + nout);
    if (fresh) FSC_TRY(ranges_add(&x->wr[k], at, at + nout));
    int64_t *shadow = x->acc[k] + at;
    if (N == 1 && M == 1 && fresh) { /* nothing to sum over: converted into the shadow (host), no device buffer */
        if (x->direct) return convert(e, shadow, in, n);
        FSC_TRY(reserve(x, n));
        FSC_TRY(fsc_device_download(e->dev, x->hf, in, n * sizeof(float)));
        (void)fsc_exact_from_f32(shadow, x->hf, n, x->E, &x->amax); /* out of range: amax shows it */
        return take_terms(x, shadow, in, n);
    }
    flight *f = take_slot(x);
    FSC_TRY(land(e, f)); /* the oldest in flight, when all slots are busy */
    if (f->cap < n) {
        fsc_device_release(e->dev, f->buf);
        f->buf = NULL, f->cap = 0;
        FSC_TRY(fsc_device_alloc(e->dev, FSC_TAG_COMM, n * sizeof(int64_t), (void **)&f->buf));
        f->cap = n;
    }
    FSC_TRY(convert(e, f->buf, in, n));
    int64_t *mine = rs ? f->buf + (size_t)fsc_comm_rank(c) * nout : f->buf; /* in place */
    int64_t *into = fresh && x->direct ? shadow : mine; /* where the result goes */
    f->res = into, f->k = k, f->at = at, f->nout = nout, f->fresh = fresh;
    if (N == 1 && M == 1) {
        const int64_t *r = mine;
        if (!x->direct) FSC_TRY(fsc_device_download(e->dev, fresh ? shadow : x->hq, mine, nout * sizeof(int64_t)));
        if (!fresh) FSC_TRY(settle(e, k, at, nout));
        if (!fresh) fsc_exact_add_i64(shadow, x->direct ? r : x->hq, nout);
        return FSC_OK;
    }
    if (M > 1) { /* hybrid: over the shard group, then across the replicas; landed at once */
        FSC_TRY(fsc_comm_reduce_scatter(c, f->buf, mine, nout, FSC_I64, FSC_SUM));
        FSC_TRY(fsc_comm_iall_reduce(then, mine, into, nout, FSC_I64, FSC_SUM, &f->req));
        return land(e, f);
    }
    /* in flight while the next layers' backward runs; landed when its slot is needed or the attempt ends */
    return rs ? fsc_comm_ireduce_scatter(c, f->buf, into, nout, FSC_I64, FSC_SUM, &f->req)
              : fsc_comm_iall_reduce(c, f->buf, fresh && x->direct ? shadow : f->buf, n, FSC_I64, FSC_SUM, &f->req);
}

static void begin_attempt(fsc_engine *e) {
    fsc_exact *x = e->exact;
    for (int i = 0; i < INFLIGHT; i++) { /* left by a failed step: waited for, dropped */
        if (x->fl[i].req) (void)fsc_comm_wait(x->fl[i].req);
        fsc_comm_req_free(x->fl[i].req);
        x->fl[i].req = NULL;
    }
    x->amax = 0;
    for (int k = 0; k < e->ngsegs; k++) x->wr[k].n = 0; /* no shadow element holds a term */
    for (int i = 0; i < x->nts; i++) x->ts[i].grad = NULL; /* left by a failed step */
    x->nlog = 0;
}

/* Whether an attempt of K units per rank leaves its unit gradients where its reductions read them until the step
 * ends, so that a second attempt only runs its reductions again (replay): one unit per rank on DDP (or none),
 * whose local gradients nothing clears or frees before the next step, without a pipeline, tensor or expert
 * parallelism or offload (expert terms by source clear kept themselves). The bits are a recomputation's: the unit
 * gradients and the units' values do not depend on the exponent. */
static int keeps_units(const fsc_engine *e, int K) {
    return K == 1 && !e->pipe && e->st == &fsc_strategy_ddp && e->po.tp <= 1 && e->po.ep <= 1 && !e->ep_comm &&
           e->po.offload == FSC_OFFLOAD_NONE;
}

/* The attempt's reductions again, on the exponent x->E, from the unit gradients where they still are. */
static fsc_status replay(fsc_engine *e) {
    fsc_exact *x = e->exact;
    x->amax = 0;
    for (int k = 0; k < e->ngsegs; k++) x->wr[k].n = 0;
    x->replaying = 1;
    fsc_status s = FSC_OK;
    for (int i = 0; i < x->nlog && s == FSC_OK; i++) {
        const reduction *r = &x->log[i];
        s = fsc_exact_reduce(e, r->c, r->rs, r->then, r->in, r->out, r->n);
    }
    x->replaying = 0;
    return s;
}

/* ascending, NaN last, equal values by their bits: a total order, so the sorted multiset is unique */
static int cmp_double(const void *pa, const void *pb) {
    double a = *(const double *)pa, b = *(const double *)pb;
    int na = isnan(a), nb = isnan(b);
    if (na || nb) return na - nb;
    if (a != b) return a < b ? -1 : 1;
    uint64_t ua, ub;
    memcpy(&ua, &a, 8), memcpy(&ub, &b, 8);
    return (ua > ub) - (ua < ub);
}

/* A rank's record of a step (or an evaluation) for its data group: the largest |element| of its unit gradients,
 * its local and global batch, its number of units K, the engine's step count (fsc_engine_check_calls), then m rows
 * of G (the group's units) values: its units' (the first min(K, G)), the rest 0. */
enum { REC_HEAD = 5 };

/* Every rank's record in x->rec (the data group's size x its length), one collective. */
static fsc_status gather_records(fsc_engine *e, const double *vals, int m, int K, int local_batch, int global_batch,
                                 double amax) {
    fsc_exact *x = e->exact;
    const size_t N = (size_t)fsc_comm_size(e->comm), G = (size_t)x->terms, W = REC_HEAD + (size_t)m * G;
    if (x->reccap < (N + 1) * W) {
        double *r = realloc(x->rec, (N + 1) * W * sizeof *r);
        if (!r) return fsc_error(FSC_ERR_NOMEM, "reduce exact: out of memory");
        x->rec = r, x->reccap = (N + 1) * W;
    }
    double *mine = x->rec + N * W;
    memset(mine, 0, W * sizeof *mine);
    mine[0] = amax, mine[1] = local_batch, mine[2] = global_batch, mine[3] = K, mine[4] = (double)e->calls;
    const size_t Kc = (size_t)K < G ? (size_t)K : G;
    for (int r = 0; r < m; r++)
        for (size_t k = 0; k < Kc; k++) memcpy(&mine[REC_HEAD + (size_t)r * G + k], &vals[(size_t)r * K + k], 8);
    x->rec_m = m;
    return fsc_engine_gather_host(e, e->comm, mine, W * sizeof *mine, x->rec);
}

/* From the gathered records: sums[r] = the sum over the data group's units of row r, added in ascending order
 * (each rank's units placed after those of the ranks before it, as the integer sum of G slots that each rank
 * fills with its units' bits would place them); *batch: the batch check of the group's local and global batches. */
static fsc_status sums_of_records(fsc_engine *e, int U, double *sums, fsc_status *batch) {
    fsc_exact *x = e->exact;
    const int N = fsc_comm_size(e->comm), m = x->rec_m;
    const size_t G = (size_t)x->terms, W = REC_HEAD + (size_t)m * G;
    double *pairs = malloc((size_t)N * 2 * sizeof(double)), *row = malloc((G + 1) * sizeof(double));
    uint64_t *slots = calloc((size_t)m * G + 1, sizeof(uint64_t));
    fsc_status s = pairs && slots && row ? FSC_OK : fsc_error(FSC_ERR_NOMEM, "reduce exact: out of memory");
    for (int j = 0; s == FSC_OK && j < N; j++) pairs[2 * j] = x->rec[j * W + 1], pairs[2 * j + 1] = x->rec[j * W + 2];
    if (s == FSC_OK) {
        *batch = fsc_engine_check_batch(pairs, N);
        if (*batch == FSC_OK) *batch = fsc_engine_check_calls(x->rec + 4, W, N);
        size_t off = 0; /* rank j's first unit in the group */
        for (int j = 0; j < N; j++) {
            const double *rj = x->rec + (size_t)j * W;
            const size_t K = (size_t)rj[3], Kc = K < G ? K : G;
            for (int r = 0; r < m; r++)
                for (size_t k = 0; k < Kc && off + k < G; k++) {
                    uint64_t b;
                    memcpy(&b, &rj[REC_HEAD + (size_t)r * G + k], 8);
                    slots[(size_t)r * G + off + k] += b; /* one rank's bits each (wrapping) */
                }
            off += pairs[2 * j] > 0 ? (size_t)pairs[2 * j] / (size_t)U : 0;
        }
    }
    for (int r = 0; s == FSC_OK && r < m; r++) {
        memcpy(row, slots + (size_t)r * G, G * sizeof(double));
        qsort(row, G, sizeof(double), cmp_double);
        double acc = 0;
        for (size_t i = 0; i < G; i++) acc += row[i];
        sums[r] = acc;
    }
    free(pairs), free(slots), free(row);
    return s;
}

/* sums[r] = sum over the data group's units of vals[r K + k] (m rows of this rank's K units of U), added in
 * ascending order; *batch: the batch check of the group's local and global batches. */
static fsc_status sum_units(fsc_engine *e, const double *vals, int m, int K, int U, int local_batch,
                            int global_batch, double *sums, fsc_status *batch) {
    FSC_TRY(gather_records(e, vals, m, K, local_batch, global_batch, 0.0));
    return sums_of_records(e, U, sums, batch);
}

/* After an attempt's last backward: the agreed exponent; *again when the step must be recomputed on it, else
 * the reduced gradients from the shadows (poisoned with a NaN when some unit gradient was not finite). With
 * records (the data group is the world, no pipeline: the units' values vals, m rows of K, are this rank's final
 * ones) the largest magnitude travels in the records of sum_units, gathered here: one collective for both. */
static fsc_status finish_attempt(fsc_engine *e, int records, const double *vals, int m, int K, int local_batch,
                                 int global_batch, int *again) {
    fsc_exact *x = e->exact;
    FSC_TRY(land_all(e));
    float a = (float)x->amax; /* an f32's magnitude, or inf: exact */
    if (records) {
        FSC_TRY(gather_records(e, vals, m, K, local_batch, global_batch, x->amax));
        const size_t N = (size_t)fsc_comm_size(e->comm), W = REC_HEAD + (size_t)m * (size_t)x->terms;
        for (size_t j = 0; j < N; j++)
            if ((float)x->rec[j * W] > a) a = (float)x->rec[j * W];
    } else {
        FSC_TRY(fsc_comm_all_reduce_host(e->r->comm, e->dev, &a, FSC_MAX));
    }
    for (int i = 0; i < x->nts; i++)
        if (x->ts[i].grad)
            return fsc_error(FSC_ERR_INTERNAL, "reduce exact: an expert gradient's terms by source were never reduced");
    const int E = fsc_exact_exponent((double)a, x->terms);
    *again = E != INT32_MAX && E != x->E;
    if (*again) {
        x->E = E;
        return FSC_OK;
    }
    int finite = E != INT32_MAX; /* else the first element becomes a NaN */
    for (int k = 0; k < e->ngsegs; k++) {
        if (!e->glens[k]) continue;
        const int direct = x->direct && e->gdev == e->dev;
        if (!direct) FSC_TRY(reserve(x, e->glens[k]));
        float *g = direct ? e->gsegs[k] : x->hf;
        ranges *w = &x->wr[k]; /* the written elements in order; the others hold no term: 0 */
        if (w->n > 1) qsort(w->r, (size_t)w->n, sizeof *w->r, cmp_range);
        size_t next = 0;
        for (int i = 0; i < w->n; i++) {
            memset(g + next, 0, (w->r[i][0] - next) * sizeof(float));
            fsc_exact_to_f32(g + w->r[i][0], x->acc[k] + w->r[i][0], w->r[i][1] - w->r[i][0], x->E);
            next = w->r[i][1];
        }
        memset(g + next, 0, (e->glens[k] - next) * sizeof(float));
        if (!finite) g[0] = NAN, finite = 1;
        if (!direct) FSC_TRY(fsc_device_upload(e->gdev, e->gsegs[k], x->hf, e->glens[k] * sizeof(float)));
    }
    return FSC_OK;
}

/* ---- the step (step.c runs it: the list over the units, then R E O) ---- */

fsc_status fsc_exact_prepare(fsc_engine *e, fsc_step_ctx *c) {
    fsc_exact *x = e->exact;
    const int local_batch = c->local_batch, global_batch = c->global_batch;
    const int U = e->po.unit > 0 ? e->po.unit : local_batch / e->po.accum;
    if (e->po.unit == 0 && local_batch % e->po.accum != 0)
        return fsc_error(FSC_ERR_INVALID, "the local batch of %d sequences does not split into %d micro-batches",
                         local_batch, e->po.accum);
    if (U < 1 || local_batch % U != 0 || global_batch % U != 0)
        return fsc_error(FSC_ERR_INVALID, "reduce exact: the %s batch of %d sequences does not split into units of %d",
                         U >= 1 && local_batch % U != 0 ? "local" : "global",
                         U >= 1 && local_batch % U != 0 ? local_batch : global_batch, U);
    const int K = local_batch / U;
    if (e->pipe && K != e->po.accum)
        return fsc_error(FSC_ERR_INVALID, "reduce exact with a pipeline: the unit is the pipeline's micro-batch (the "
                         "local batch of %d / %d chunks), not %d sequences", local_batch, e->po.accum, U);
    x->terms = (uint64_t)(global_batch / U);
    const size_t nv = (size_t)4 * K;
    if (x->nvals < nv) {
        double *v = realloc(x->vals, nv * sizeof *v);
        if (!v) return fsc_error(FSC_ERR_NOMEM, "reduce exact: out of memory");
        x->vals = v, x->nvals = nv;
    }
    memset(x->vals, 0, nv * sizeof *x->vals);
    x->U = U, x->m = e->m->ops->aux_stats ? 4 : 1;
    x->records = !e->pipe && fsc_comm_size(e->comm) == fsc_comm_size(e->r->comm);
    x->batch = FSC_OK;
    c->K = K;
    c->units = e->pipe ? NULL : x->vals; /* each micro-batch's values (step.c's whole model) */
    if (e->pipe) fsc_pipe_set_unit_losses(e, x->vals); /* the last stage's losses */
    fsc_exact_begin_attempt(e, c);
    return FSC_OK;
}

void fsc_exact_begin_attempt(fsc_engine *e, const fsc_step_ctx *c) {
    e->exact->kept = keeps_units(e, c->K);
    begin_attempt(e);
}

/* E: with a pipeline, its sums first for the batch check (their loss is not used). Two attempts at most: E'
 * depends on the unit gradients only, which do not depend on E. */
fsc_status fsc_exact_settle(fsc_engine *e, fsc_step_ctx *c) {
    fsc_exact *x = e->exact;
    double total, moe[3];
    if (e->pipe) FSC_TRY(fsc_step_sums(e, c, &total, moe, &x->batch));
    int again = 0;
    FSC_TRY(finish_attempt(e, x->records, x->vals, x->m, c->K, c->local_batch, c->global_batch, &again));
    c->attempts++;
    if (again && c->attempts == 1 && x->kept) { /* the units' values in vals are the first attempt's */
        FSC_TRY(replay(e));
        FSC_TRY(finish_attempt(e, x->records, x->vals, x->m, c->K, c->local_batch, c->global_batch, &again));
        c->attempts++;
    }
    if (again && c->attempts == 2)
        return fsc_error(FSC_ERR_INTERNAL, "reduce exact: the exponent did not settle in two attempts");
    c->again = again;
    return FSC_OK;
}

fsc_status fsc_exact_sums(fsc_engine *e, fsc_step_ctx *c, double *total, double moe[3], fsc_status *batch) {
    fsc_exact *x = e->exact;
    const int K = c->K, m = x->m;
    double sums[4] = { 0, 0, 0, 0 };
    if (e->pipe) fsc_pipe_set_unit_losses(e, NULL);
    /* a pipeline's MoE statistics: each unit's from every stage's layers, on every stage (its losses are the last
     * stage's, brought to every stage below) */
    if (e->pipe && m == 4) FSC_TRY(fsc_pipe_aux_units(fsc_pipe_aux_of(e), e, x->vals, K));
    *batch = x->batch;
    const fsc_status mine = *batch; /* a pipeline's check (each stage against the last stage's group) */
    FSC_TRY(x->records ? sums_of_records(e, x->U, sums, batch)
                       : sum_units(e, x->vals, m, K, x->U, c->local_batch, c->global_batch, sums, batch));
    if (mine != FSC_OK) *batch = mine;
    if (e->pipe) FSC_TRY(fsc_pipe_from_last(e, sums)); /* the last stage's loss to every stage */
    *total = sums[0];
    moe[0] = sums[1] / (double)x->terms, moe[1] = sums[2], moe[2] = sums[3];
    return FSC_OK;
}

void fsc_exact_end(fsc_engine *e) {
    if (e->pipe) fsc_pipe_set_unit_losses(e, NULL);
}

fsc_status fsc_exact_sum_losses(fsc_engine *e, const double *vals, int K, int U, int local_batch, int global_batch,
                                double *sum, fsc_status *batch) {
    e->exact->terms = (uint64_t)(global_batch / U); /* this batch's units (the next step sets its own) */
    double sums[3] = { 0, 0, 0 };
    FSC_TRY(sum_units(e, vals, 1, K, U, local_batch, global_batch, sums, batch));
    if (e->pipe) FSC_TRY(fsc_pipe_from_last(e, sums));
    *sum = sums[0];
    return FSC_OK;
}

int fsc_exact_get_exponent(const fsc_engine *e) { return e->exact ? e->exact->E : 0; }

void fsc_exact_set_exponent(fsc_engine *e, int E) {
    if (e->exact) e->exact->E = E;
}
