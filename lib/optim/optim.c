/* Optimizers over flat segments: SGD (momentum, L2 weight decay) and AdamW (bias correction, decoupled
 * weight decay), with PyTorch's semantics. The arithmetic per element is the device's sgd/adamw kernel;
 * this file owns the segments, their state (FSC_TAG_OPTIM) and the step count. It knows nothing about
 * sharding: FSDP registers each unit's local shard as a segment, a single rank its one flat buffer.
 * Norms, clipping and loss scaling live in gradnorm.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "fsc/optim.h"
#include "core/kernels.h"

typedef struct {
    float *param;       /* (n) device */
    const float *grad;  /* (n) device */
    size_t n;
    float *state[2];    /* (n) each: SGD momentum buffer, or AdamW m and v; NULL when unused */
    size_t (*nd)[2];    /* (nnd) ranges [off, end) without weight decay: sorted, disjoint, not adjacent */
    int nnd;
} optim_segment;

struct fsc_optim {
    fsc_device *dev;
    fsc_optim_config cfg;
    int64_t steps;
    int nstates;
    int nseg, cap;
    optim_segment *seg;
};

static int finite_nonneg(float x) { return isfinite(x) && x >= 0.0f; }

static fsc_status validate(const fsc_optim_config *c) {
    if (c->kind != FSC_OPT_SGD && c->kind != FSC_OPT_ADAMW)
        return fsc_error(FSC_ERR_INVALID, "optimizer: unknown kind %d (expected sgd or adamw)", (int)c->kind);
    if (!finite_nonneg(c->lr)) return fsc_error(FSC_ERR_INVALID, "optimizer: learning rate %g must be finite and >= 0", (double)c->lr);
    if (!finite_nonneg(c->weight_decay))
        return fsc_error(FSC_ERR_INVALID, "optimizer: weight decay %g must be finite and >= 0", (double)c->weight_decay);
    if (c->decay_all != 0 && c->decay_all != 1) /* -1 and 2 acted as 1: every tensor decayed */
        return fsc_error(FSC_ERR_INVALID, "optimizer: decay_all must be 0 or 1, not %d", c->decay_all);
    if (c->kind == FSC_OPT_SGD) {
        if (!finite_nonneg(c->momentum))
            return fsc_error(FSC_ERR_INVALID, "sgd: momentum %g must be finite and >= 0", (double)c->momentum);
    } else {
        if (!(c->beta1 >= 0.0f && c->beta1 < 1.0f))
            return fsc_error(FSC_ERR_INVALID, "adamw: beta1 %g must be in [0, 1)", (double)c->beta1);
        if (!(c->beta2 >= 0.0f && c->beta2 < 1.0f))
            return fsc_error(FSC_ERR_INVALID, "adamw: beta2 %g must be in [0, 1)", (double)c->beta2);
        if (!finite_nonneg(c->eps) || c->eps == 0.0f) /* 0: a gradient of 0 with its moments 0 steps by 0 / 0 */
            return fsc_error(FSC_ERR_INVALID, "adamw: eps %g must be finite and > 0 (with 0, an element whose gradient "
                             "and moments are 0 becomes NaN)", (double)c->eps);
    }
    return FSC_OK;
}

fsc_status fsc_optim_create(fsc_device *dev, const fsc_optim_config *cfg, fsc_optim **out) {
    FSC_CHECK_ARG(out);
    *out = NULL;
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(cfg);
    fsc_optim_config c = *cfg;
    if (c.kind == FSC_OPT_ADAMW && c.beta1 == 0.0f && c.beta2 == 0.0f && c.eps == 0.0f) {
        c.beta1 = 0.9f;
        c.beta2 = 0.999f;
        c.eps = 1e-8f;
    }
    FSC_TRY(validate(&c));
    fsc_optim *o = calloc(1, sizeof *o);
    if (!o) return fsc_error(FSC_ERR_NOMEM, "fsc_optim_create: out of host memory");
    o->dev = dev;
    o->cfg = c;
    o->nstates = c.kind == FSC_OPT_ADAMW ? 2 : (c.momentum != 0.0f ? 1 : 0);
    *out = o;
    return FSC_OK;
}

fsc_status fsc_optim_add(fsc_optim *o, float *param, const float *grad, size_t n, int *idx) {
    FSC_CHECK_ARG(o);
    FSC_CHECK_BUF(param, n);
    FSC_CHECK_BUF(grad, n);
    if (n > 0 && (!param || !grad))
        return fsc_error(FSC_ERR_INVALID, "fsc_optim_add: segment of %zu elements with a NULL buffer", n);
    if (o->nseg == o->cap) {
        int cap = o->cap ? 2 * o->cap : 8;
        optim_segment *s = realloc(o->seg, (size_t)cap * sizeof *s);
        if (!s) return fsc_error(FSC_ERR_NOMEM, "fsc_optim_add: out of host memory");
        o->seg = s;
        o->cap = cap;
    }
    optim_segment *s = &o->seg[o->nseg];
    memset(s, 0, sizeof *s);
    s->param = param;
    s->grad = grad;
    s->n = n;
    for (int k = 0; k < o->nstates; k++) {
        fsc_status st = fsc_device_calloc(o->dev, FSC_TAG_OPTIM, n * sizeof(float), (void **)&s->state[k]);
        if (st != FSC_OK) {
            for (int j = 0; j < k; j++) fsc_device_release(o->dev, s->state[j]);
            return st;
        }
    }
    if (idx) *idx = o->nseg;
    o->nseg++;
    return FSC_OK;
}

fsc_status fsc_optim_no_decay(fsc_optim *o, int idx, size_t off, size_t n) {
    FSC_CHECK_ARG(o);
    if (!o || idx < 0 || idx >= o->nseg)
        return fsc_error(FSC_ERR_INVALID, "fsc_optim_no_decay: segment %d does not exist (%d registered)", idx,
                         o ? o->nseg : 0);
    optim_segment *s = &o->seg[idx];
    if (off > s->n || n > s->n - off)
        return fsc_error(FSC_ERR_INVALID, "fsc_optim_no_decay: elements [%zu, %zu + %zu) are not in segment %d of "
                         "%zu", off, off, n, idx, s->n);
    if (n == 0) return FSC_OK;
    size_t(*r)[2] = realloc(s->nd, (size_t)(s->nnd + 1) * sizeof *r);
    if (!r) return fsc_error(FSC_ERR_NOMEM, "fsc_optim_no_decay: out of host memory");
    s->nd = r;
    /* insert in order of off, then merge what overlaps or touches */
    int k = s->nnd++;
    while (k > 0 && r[k - 1][0] > off) r[k][0] = r[k - 1][0], r[k][1] = r[k - 1][1], k--;
    r[k][0] = off, r[k][1] = off + n;
    int w = 0;
    for (int i = 1; i < s->nnd; i++) {
        if (r[i][0] <= r[w][1]) {
            if (r[i][1] > r[w][1]) r[w][1] = r[i][1];
        } else {
            w++;
            r[w][0] = r[i][0], r[w][1] = r[i][1];
        }
    }
    s->nnd = w + 1;
    return FSC_OK;
}

/* Elements [a, b) of segment s with weight decay wd. */
static fsc_status step_range(fsc_optim *o, optim_segment *s, size_t a, size_t b, float wd, float bc1, float bc2,
                             int first) {
    const fsc_optim_config *c = &o->cfg;
    if (b <= a) return FSC_OK;
    if (c->kind == FSC_OPT_ADAMW)
        return fsc_k_adamw(o->dev, s->param + a, s->grad + a, s->state[0] + a, s->state[1] + a, b - a, c->lr,
                           c->beta1, c->beta2, c->eps, wd, bc1, bc2);
    return fsc_k_sgd(o->dev, s->param + a, s->grad + a, s->state[0] ? s->state[0] + a : NULL, b - a, c->lr,
                     c->momentum, wd, first);
}

/* One segment: the ranges without weight decay and those between them. */
static fsc_status step_segment(fsc_optim *o, optim_segment *s, float bc1, float bc2, int first) {
    size_t at = 0;
    for (int k = 0; k < s->nnd; k++) {
        FSC_TRY(step_range(o, s, at, s->nd[k][0], o->cfg.weight_decay, bc1, bc2, first));
        FSC_TRY(step_range(o, s, s->nd[k][0], s->nd[k][1], 0.0f, bc1, bc2, first));
        at = s->nd[k][1];
    }
    return step_range(o, s, at, s->n, o->cfg.weight_decay, bc1, bc2, first);
}

fsc_status fsc_optim_rebind(fsc_optim *o, int idx, float *param, const float *grad) {
    FSC_CHECK_ARG(o);
    FSC_CHECK_ARG(param);
    FSC_CHECK_ARG(grad);
    if (!o || idx < 0 || idx >= o->nseg)
        return fsc_error(FSC_ERR_INVALID, "fsc_optim_rebind: segment %d does not exist (%d registered)", idx,
                         o ? o->nseg : 0);
    if (o->seg[idx].n > 0 && (!param || !grad))
        return fsc_error(FSC_ERR_INVALID, "fsc_optim_rebind: segment %d: NULL buffer", idx);
    o->seg[idx].param = param;
    o->seg[idx].grad = grad;
    return FSC_OK;
}

/* Segment i of the step after o->steps. */
static fsc_status step_one(fsc_optim *o, int i) {
    const fsc_optim_config *c = &o->cfg;
    /* AdamW's bias corrections in double, then rounded once to float (the kernel's arguments) */
    const double t = (double)(o->steps + 1);
    const float bc1 = c->kind == FSC_OPT_ADAMW ? (float)(1.0 - pow((double)c->beta1, t)) : 0.0f;
    const float bc2 = c->kind == FSC_OPT_ADAMW ? (float)(1.0 - pow((double)c->beta2, t)) : 0.0f;
    const int first = o->steps == 0; /* SGD: the momentum buffer starts as the gradient */
    return o->seg[i].n ? step_segment(o, &o->seg[i], bc1, bc2, first) : FSC_OK;
}

fsc_status fsc_optim_step(fsc_optim *o) {
    FSC_CHECK_ARG(o);
    for (int i = 0; i < o->nseg; i++) FSC_TRY(step_one(o, i));
    o->steps++;
    return FSC_OK;
}

fsc_status fsc_optim_step_segment(fsc_optim *o, int seg) {
    FSC_CHECK_ARG(o);
    if (!o || seg < 0 || seg >= o->nseg)
        return fsc_error(FSC_ERR_INVALID, "fsc_optim_step_segment: segment %d does not exist (%d registered)", seg,
                         o ? o->nseg : 0);
    return step_one(o, seg);
}

void fsc_optim_step_end(fsc_optim *o) {
    if (o) o->steps++;
}

int64_t fsc_optim_steps(const fsc_optim *o) { return o ? o->steps : 0; }
void fsc_optim_set_steps(fsc_optim *o, int64_t steps) {
    if (o && steps >= 0) o->steps = steps;
}
void fsc_optim_set_lr(fsc_optim *o, float lr) {
    if (o && finite_nonneg(lr)) o->cfg.lr = lr;
}
int fsc_optim_num_segments(const fsc_optim *o) { return o ? o->nseg : 0; }
int fsc_optim_num_states(const fsc_optim *o) { return o ? o->nstates : 0; }

float *fsc_optim_state(fsc_optim *o, int seg, int which) {
    if (!o || seg < 0 || seg >= o->nseg || which < 0 || which >= o->nstates) return NULL;
    return o->seg[seg].state[which];
}

float *fsc_optim_param(fsc_optim *o, int seg) {
    if (!o || seg < 0 || seg >= o->nseg) return NULL;
    return o->seg[seg].param;
}

const float *fsc_optim_grad(const fsc_optim *o, int seg) {
    if (!o || seg < 0 || seg >= o->nseg) return NULL;
    return o->seg[seg].grad;
}

size_t fsc_optim_segment_len(const fsc_optim *o, int seg) {
    if (!o || seg < 0 || seg >= o->nseg) return 0;
    return o->seg[seg].n;
}

void fsc_optim_free(fsc_optim *o) {
    if (!o) return;
    for (int i = 0; i < o->nseg; i++) {
        for (int k = 0; k < o->nstates; k++) fsc_device_release(o->dev, o->seg[i].state[k]);
        free(o->seg[i].nd);
    }
    free(o->seg);
    free(o);
}

fsc_optim_config fsc_optim_config_default(void) {
    return (fsc_optim_config){ .kind = FSC_OPT_ADAMW, .lr = 1e-3f, .weight_decay = 1e-2f, .beta1 = 0.9f,
                               .beta2 = 0.999f, .eps = 1e-8f };
}
