/* Private: what the tensor-parallel forms of the built-in layers share (tp_basic.c, tp_transformer.c): the tensor
 * group of a layer, its checks, slice declaration, and the row movements of sequence parallelism around the
 * column- and row-parallel products (tp.h's building blocks). The constructors are reached from the plain ones
 * (basic.c, transformer.c, block.c) when their options name a tensor group.
 * Not here: the building blocks themselves (lib/tp), the unsplit layers. */
#ifndef FSC_TP_LAYERS_IMPL_H
#define FSC_TP_LAYERS_IMPL_H
#include "layers_impl.h"
#include "fsc/tp.h"
#include "core/kernels.h"

/* A layer's tensor group: size ranks, this one rank; sp: the stream is this rank's rows. */
typedef struct {
    fsc_comm *tp;
    int size, rank, sp;
} tp_group;

/* Check the options' group (sp needs tp) and fill g; kind names the layer in messages. */
static inline fsc_status tp_group_of(fsc_comm *tp, int sp, const char *kind, tp_group *g) {
    if (sp && !tp)
        return fsc_error(FSC_ERR_INVALID, "%s layer: sequence parallelism (sp) needs a tensor group (tp); without "
                         "one there is nothing to split the sequence over", kind);
    g->tp = tp;
    g->size = tp ? fsc_comm_size(tp) : 1;
    g->rank = tp ? fsc_comm_rank(tp) : 0;
    g->sp = sp ? 1 : 0;
    if (g->size < 1) return fsc_error(FSC_ERR_INVALID, "%s layer: the tensor group has no ranks", kind);
    return FSC_OK;
}

/* n (called what) must divide by the group size. */
static inline fsc_status tp_divides(const char *kind, const char *what, long long n, const tp_group *g) {
    if (n % g->size == 0) return FSC_OK;
    return fsc_error(FSC_ERR_INVALID, "%s layer: %s = %lld does not divide over a tensor group of %d ranks", kind, what,
                     n, g->size);
}

/* sp: the sequence T must divide by the group size (the stream is B*T/size rows per rank). */
static inline fsc_status tp_check_sp(const char *kind, int T, const tp_group *g) {
    if (!g->sp || T % g->size == 0) return FSC_OK;
    return fsc_error(FSC_ERR_INVALID, "%s layer: sequence parallelism needs the sequence length T = %d to divide by "
                     "the tensor group's %d ranks (each rank holds B*T/%d rows of the stream)", kind, T, g->size,
                     g->size);
}

/* Declare this rank's slice of a full tensor d0 x d1 (d1 0: a vector) split as given (FSC_SPLIT_NONE:
 * replicated); frees the layer on failure. */
static inline fsc_status tp_param(fsc_layer **l, const char *name, int64_t d0, int64_t d1, int split, int parts,
                                  const tp_group *g, fsc_init init) {
    int64_t shape[2] = { d0, d1 };
    fsc_status s = fsc_layer_add_param_split(*l, name, d1 ? 2 : 1, shape, split, parts, g->rank, g->size, init);
    if (s != FSC_OK) {
        fsc_layer_free(*l);
        *l = NULL;
    }
    return s;
}

/* Rows of the stream this rank holds of N: N / size under sp, else N. */
/* A token table's or head weight's initial values, Vp >= V rows of C: N(0, LAYER_STD), padding rows [V, Vp) 0 (in
 * the full tensor's elements: every slice draws the unsplit table's values). */
static inline fsc_init tp_table_init(int V, int Vp, int C) {
    fsc_init in = fsc_init_normal(LAYER_STD);
    if (Vp > V) in.limit = (size_t)V * (size_t)C;
    return in;
}

static inline size_t tp_rows(const tp_group *g, size_t N) { return g->sp ? N / (size_t)g->size : N; }

/* The input of a column-parallel product: sp: full (N, C) = the group's rows (Nl, C) gathered, returned;
 * else the rows themselves (nothing moves: f's forward is the identity). */
static inline fsc_status tp_gather_in(const tp_group *g, float *full, const float *rows, size_t Nl, int C,
                                      const float **got) {
    *got = rows;
    if (!g->sp) return FSC_OK;
    FSC_TRY(fsc_tp_sp_gather(g->tp, full, rows, Nl * (size_t)C));
    *got = full;
    return FSC_OK;
}

/* A row-parallel partial product s (N, C) reduced to the layer's rows: sp: out (Nl, C) = reduce-scatter of s;
 * else out (N, C) = the all-reduce of s (g's forward; out may be s). Then the replicated bias (may be NULL) is
 * added to those rows once. */
static inline fsc_status tp_reduce_out(const tp_group *g, fsc_device *dev, float *out, const float *s, size_t N,
                                       int C, const float *bias) {
    const size_t Nl = tp_rows(g, N);
    if (g->sp) FSC_TRY(fsc_tp_sp_reduce_scatter(g->tp, out, s, Nl * (size_t)C));
    else FSC_TRY(fsc_tp_g_forward(dev, g->tp, out, s, N * (size_t)C));
    if (bias && Nl > 0) FSC_TRY(fsc_k_bias_add(dev, out, bias, Nl, C));
    return FSC_OK;
}

/* The input gradient of a column-parallel product, partial p (N, C), summed over the group to the layer's rows:
 * sp: out (Nl, C) = reduce-scatter of p; else out (N, C) = the all-reduce of p (f's backward; out may be p). */
static inline fsc_status tp_reduce_grad(const tp_group *g, fsc_device *dev, float *out, const float *p, size_t N,
                                        int C) {
    if (g->sp) return fsc_tp_sp_reduce_scatter(g->tp, out, p, tp_rows(g, N) * (size_t)C);
    return fsc_tp_f_backward(dev, g->tp, out, p, N * (size_t)C);
}

static inline size_t r64f(size_t n) { return (n + 63) / 64 * 64; }

#endif
