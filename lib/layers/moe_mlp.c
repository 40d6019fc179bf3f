/* The mixture-of-experts MLP as a layer (layers.h's fsc_layer_moe_mlp) and the MoE part every MoE layer shares
 * (moe_impl.h): moe.h's layer (GShard/Switch routing, capacity, load-balancing loss, expert parallelism over an
 * all-to-all) on a micro-batch's B x rows tokens as one dispatch group, its parameters declared as the layer's (the
 * gate, then each expert's c_fc and c_proj in order, model.h's expert set on each), its routing record and last
 * statistics as the record's host state, the statistics summed into the model's aux_stats and the expert group
 * set through the model's set_expert_group.
 * Not here: routing and the experts' products (lib/moe), the blocks with an MoE MLP (block_moe.c). */
#include "moe_impl.h"

static const char *const expert_names[4] = { "c_fc.weight", "c_fc.bias", "c_proj.weight", "c_proj.bias" };

fsc_status moe_part_init(moe_part *mp, const char *what, int rows, int C, int F, int E, int k, float cf, float aux) {
    const int kk = k ? k : 1;
    if (rows < 1 || C < 1 || F < 0 || E < 1 || (kk != 1 && kk != 2) || kk > E || !(cf >= 0.0f) || !(aux >= 0.0f) ||
        cf > 1e6f || aux > 1e6f)
        return fsc_error(FSC_ERR_INVALID, "%s: need rows, C >= 1, F >= 0 (0: 4 C), experts >= 1, top-k 1 or 2 (0: 1) "
                         "and at most the experts, capacity and aux finite, >= 0 and at most 1e6 (got rows %d, C %d, F %d, %d "
                         "experts, top-%d, capacity %g, aux %g)", what, rows, C, F, E, kk, (double)cf, (double)aux);
    const int H = F ? F : layers_4c(C);
    if (C > (1 << 16) || H > (1 << 18) || E > 4096) /* moe.c's limits, said when the layer is made */
        return fsc_error(FSC_ERR_INVALID, "%s: C %d, F %d and %d experts: at most 65536, 262144 and 4096", what, C, H, E);
    memset(mp, 0, sizeof *mp);
    mp->mc = (fsc_moe_config){ .dim = C, .hidden = H, .experts = E, .top_k = kk, .capacity_factor = cf,
                               .expert = FSC_MOE_EXPERT_MLP, .name = "mlp" };
    mp->aux = aux;
    mp->rows = rows;
    return FSC_OK;
}

fsc_status moe_part_declare(fsc_layer **l, moe_part *mp, const char *prefix) {
    const int64_t C = mp->mc.dim, F = mp->mc.hidden;
    const int64_t d0[4] = { C, F, F, C }, d1[4] = { F, 0, C, 0 };
    char name[64];
    mp->first = (*l)->n_params;
    snprintf(name, sizeof name, "%sgate.weight", prefix);
    FSC_TRY(layer_param(l, name, C, mp->mc.experts, fsc_init_normal(LAYER_STD)));
    for (int e = 0; e < mp->mc.experts; e++)
        for (int t = 0; t < 4; t++) {
            snprintf(name, sizeof name, "%sexperts.%d.%s", prefix, e, expert_names[t]);
            FSC_TRY(layer_param(l, name, d0[t], d1[t], t % 2 ? fsc_init_const(0.0f) : fsc_init_normal(LAYER_STD)));
        }
    return FSC_OK;
}

int moe_param_expert(const fsc_layer *l, int k) {
    const moe_part *mp = &((const moe_base *)l)->mp;
    const int j = k - mp->first - 1;
    return j >= 0 && j < 4 * mp->mc.experts ? j / 4 : -1;
}

static fsc_status need_moe(const moe_part *mp) {
    return mp->moe ? FSC_OK : fsc_error(FSC_ERR_STATE, "moe layer: no record made (the layer runs on records)");
}

fsc_status moe_part_forward(const moe_part *mp, const fsc_layer_call *c, float *out, const float *in) {
    moe_state *st = c->state;
    FSC_TRY(need_moe(mp));
    if (!st || !st->rec) return fsc_error(FSC_ERR_STATE, "moe layer: the record has no MoE state");
    return fsc_moe_forward(mp->moe, out, st->rec, in, c->param + mp->first, &st->st);
}

/* the load-balancing loss's factor: its coefficient times each loss term's factor times the group's tokens */
static float daux_of(const moe_part *mp, const fsc_layer_call *c) {
    return mp->aux * c->dscale * (float)((size_t)c->B * (size_t)mp->rows);
}

static fsc_status need_state(const moe_part *mp, const fsc_layer_call *c) {
    const moe_state *st = c->state;
    FSC_TRY(need_moe(mp));
    return st && st->rec ? FSC_OK : fsc_error(FSC_ERR_STATE, "moe layer: the record has no MoE state");
}

fsc_status moe_part_backward(const moe_part *mp, const fsc_layer_call *c, float *dinp, const float *dout) {
    FSC_TRY(need_state(mp, c));
    moe_state *st = c->state;
    return fsc_moe_backward_terms(mp->moe, dinp, c->grad + mp->first, st->rec, dout, c->param + mp->first,
                                  daux_of(mp, c), c->term, c->term_ctx);
}

size_t moe_part_split_bytes(const moe_part *mp, int B) {
    return r256(fsc_moe_split_bytes(&mp->mc, B * mp->rows, 1));
}

fsc_status moe_part_backward_input(const moe_part *mp, const fsc_layer_call *c, float *dinp, const float *dout,
                                   void *stash) {
    FSC_TRY(need_state(mp, c));
    moe_state *st = c->state;
    return fsc_moe_backward_input(mp->moe, dinp, st->rec, dout, c->param + mp->first, daux_of(mp, c), stash);
}

fsc_status moe_part_backward_weight(const moe_part *mp, const fsc_layer_call *c, const void *stash) {
    FSC_TRY(need_state(mp, c));
    moe_state *st = c->state;
    return fsc_moe_backward_weight(mp->moe, c->grad + mp->first, st->rec, c->param + mp->first, stash, c->term,
                                   c->term_ctx);
}

fsc_status moe_state_create(fsc_layer *l, fsc_device *dev, int B, void **state) {
    moe_part *mp = &((moe_base *)l)->mp;
    *state = NULL;
    if ((double)B * mp->rows > 2147483647.0)
        return fsc_error(FSC_ERR_INVALID, "moe layer: %d samples of %d tokens are too many", B, mp->rows);
    if (!mp->moe) FSC_TRY(fsc_moe_create_view(dev, mp->ep, &mp->mc, &mp->moe));
    moe_state *st = calloc(1, sizeof *st);
    if (!st) return fsc_error(FSC_ERR_NOMEM, "moe layer: out of host memory");
    fsc_status s = fsc_moe_rec_create(mp->moe, B * mp->rows, 1, &st->rec);
    if (s != FSC_OK) {
        free(st);
        return s;
    }
    *state = st;
    return FSC_OK;
}

void moe_state_free(const fsc_layer *l, void *state) {
    (void)l;
    moe_state *st = state;
    if (!st) return;
    fsc_moe_rec_free(st->rec);
    free(st);
}

void moe_aux(const fsc_layer *l, const void *state, fsc_model_aux *sum) {
    (void)l;
    const moe_state *st = state;
    if (!st) return;
    sum->aux_loss += st->st.aux_loss;
    sum->assigned += (double)st->st.assigned;
    sum->dropped += (double)st->st.dropped;
}

fsc_status moe_set_expert_group(fsc_layer *l, fsc_comm *ep) {
    moe_part *mp = &((moe_base *)l)->mp;
    const int G = ep ? fsc_comm_size(ep) : 1;
    if (mp->mc.experts % G != 0)
        return fsc_error(FSC_ERR_INVALID, "moe layer: %d experts do not split over an expert-parallel group of %d",
                         mp->mc.experts, G);
    fsc_moe_free(mp->moe); /* made again for ep with the next record */
    mp->moe = NULL;
    mp->ep = ep;
    return FSC_OK;
}

void moe_part_free(moe_part *mp) {
    fsc_moe_free(mp->moe);
    mp->moe = NULL;
}

/* ---- the MoE MLP layer ---- */
typedef struct {
    moe_base b;
    int residual;
} moe_mlp_layer;

static size_t mm_N(const moe_mlp_layer *y, int B) { return (size_t)B * (size_t)y->b.mp.rows; }

/* scratch: the MoE output before the residual, and the input gradient nobody needs (the model's first layer) */
static size_t mm_work(const fsc_layer *l, int B) {
    const moe_mlp_layer *y = (const moe_mlp_layer *)l;
    return 2 * r256(mm_N(y, B) * (size_t)y->b.mp.mc.dim * sizeof(float));
}

static fsc_status mm_fwd(const fsc_layer *l, const fsc_layer_call *c, float *out, const void *in) {
    const moe_mlp_layer *y = (const moe_mlp_layer *)l;
    const size_t NC = mm_N(y, c->B) * (size_t)y->b.mp.mc.dim;
    float *o = y->residual ? c->work : out;
    FSC_TRY(moe_part_forward(&y->b.mp, c, o, in));
    return y->residual ? fsc_residual_forward(c->dev, out, in, o, NC) : FSC_OK;
}

/* Split (c->stash): the input part (c->grad NULL) computes dinp and keeps the MoE part's stash, the weight part
 * (dinp NULL) adds the gate's and the experts' gradients from it. */
static fsc_status mm_bwd(const fsc_layer *l, const fsc_layer_call *c, float *dinp, const float *dout,
                         const void *in) {
    (void)in;
    const moe_mlp_layer *y = (const moe_mlp_layer *)l;
    const size_t NC = mm_N(y, c->B) * (size_t)y->b.mp.mc.dim;
    const int weight_part = c->stash && c->grad[y->b.mp.first], input_part = c->stash && !weight_part;
    if (weight_part) return moe_part_backward_weight(&y->b.mp, c, c->stash);
    float *d = dinp ? dinp : (float *)((char *)c->work + r256(NC * sizeof(float)));
    if (input_part) FSC_TRY(moe_part_backward_input(&y->b.mp, c, d, dout, c->stash));
    else FSC_TRY(moe_part_backward(&y->b.mp, c, d, dout));
    return y->residual && dinp ? fsc_residual_backward(c->dev, dinp, NULL, dout, NC) : FSC_OK;
}

static size_t mm_split_bytes(const fsc_layer *l, int B) { return moe_part_split_bytes(&((const moe_base *)l)->mp, B); }

static void mm_config(const fsc_layer *l, char *buf, size_t cap) {
    const moe_mlp_layer *y = (const moe_mlp_layer *)l;
    const fsc_moe_config *m = &y->b.mp.mc;
    snprintf(buf, cap, "{\"rows\":%d,\"C\":%d,\"F\":%d,\"experts\":%d,\"top_k\":%d,\"capacity\":%.9g,\"aux\":%.9g,"
             "\"residual\":%d}", y->b.mp.rows, m->dim, m->hidden, m->experts, m->top_k, (double)m->capacity_factor,
             (double)y->b.mp.aux, y->residual);
}

static void mm_destroy(fsc_layer *l) { moe_part_free(&((moe_mlp_layer *)l)->b.mp); }

static const fsc_layer_ops mm_ops = { .split = 1, .split_bytes = mm_split_bytes, .work_bytes = mm_work, .forward = mm_fwd, .backward = mm_bwd,
                                      .config = mm_config, .destroy = mm_destroy, .state_create = moe_state_create,
                                      .state_free = moe_state_free, .aux = moe_aux,
                                      .set_expert_group = moe_set_expert_group, .param_expert = moe_param_expert };

fsc_status fsc_layer_moe_mlp(const fsc_moe_mlp_opts *o, fsc_layer **out) {
    FSC_CHECK_ARG(out);
    *out = NULL;
    FSC_CHECK_ARG(o);
    moe_part mp;
    FSC_TRY(moe_part_init(&mp, "moe mlp layer", o->rows > 0 ? o->rows : 1, o->C, o->F, o->experts, o->top_k,
                          o->capacity, o->aux));
    FSC_TRY(layer_new(sizeof(moe_mlp_layer), "moe_mlp", &mm_ops, out));
    moe_mlp_layer *y = (moe_mlp_layer *)*out;
    y->b.mp = mp;
    y->residual = o->residual;
    y->b.l.in_bytes = (size_t)mp.rows * (size_t)o->C * sizeof(float);
    y->b.l.out_floats = (size_t)mp.rows * (size_t)o->C;
    return moe_part_declare(out, &y->b.mp, "");
}
