/* Device operations on tensors for a layer of one's own (fsc/ops.h): argument checks, then the device's kernels
 * (the table of plugin/device_ops.h) or its copies. Nothing here goes through the host but fsc_op_fill's value
 * and fsc_op_sum's result. */
#include <limits.h>
#include <stdint.h>
#include "fsc/ops.h"
#include "fsc/device.h"
#include "core/kernels.h"

/* (Every function first refuses a NULL argument, so that the message names it whatever the others hold.)
 * t is a float32 contiguous tensor on a device (the same as *dev when *dev is set; *dev := its device);
 * *n := its elements. */
static fsc_status check(const char *fn, const char *name, const fsc_tensor *t, fsc_device **dev, size_t *n) {
    if (!t) return fsc_error(FSC_ERR_INVALID, "%s: %s is NULL", fn, name);
    if (t->ndim < 0 || t->ndim > FSC_MAX_DIMS)
        return fsc_error(FSC_ERR_INVALID, "%s: %s has %d dimensions (0..%d)", fn, name, t->ndim, FSC_MAX_DIMS);
    size_t span = 1; /* the product of the nonzero dimensions: bounded before numel or the strides multiply them */
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] < 0) return fsc_error(FSC_ERR_INVALID, "%s: %s has a negative dimension", fn, name);
        if (t->shape[d] > 0 && span > (SIZE_MAX / sizeof(float)) / (uint64_t)t->shape[d])
            return fsc_error(FSC_ERR_INVALID, "%s: %s has more elements than memory can hold", fn, name);
        if (t->shape[d] > 0) span *= (size_t)t->shape[d];
    }
    if (t->dtype != FSC_F32)
        return fsc_error(FSC_ERR_INVALID, "%s: %s is %s, not f32", fn, name, fsc_dtype_name(t->dtype));
    if (!t->dev) return fsc_error(FSC_ERR_INVALID, "%s: %s is not on a device (its dev is NULL)", fn, name);
    if (*dev && t->dev != *dev) return fsc_error(FSC_ERR_INVALID, "%s: %s is on another device", fn, name);
    if (!fsc_tensor_is_contiguous(t)) return fsc_error(FSC_ERR_INVALID, "%s: %s is not contiguous", fn, name);
    *n = (size_t)fsc_tensor_numel(t);
    if (*n && !t->data) return fsc_error(FSC_ERR_INVALID, "%s: %s's data is NULL for %zu elements", fn, name, *n);
    *dev = t->dev;
    return FSC_OK;
}

static fsc_status same_shape(const char *fn, const char *an, const fsc_tensor *a, const char *bn,
                             const fsc_tensor *b) {
    int same = a->ndim == b->ndim;
    for (int d = 0; same && d < a->ndim; d++) same = a->shape[d] == b->shape[d];
    if (same) return FSC_OK;
    char sa[96], sb[96];
    fsc_shape_str(sa, sizeof sa, a->ndim, a->shape);
    fsc_shape_str(sb, sizeof sb, b->ndim, b->shape);
    return fsc_error(FSC_ERR_INVALID, "%s: %s %s and %s %s differ in shape", fn, an, sa, bn, sb);
}

#define CHECK(t, dev, n) do { fsc_status s_ = check(__func__, #t, t, &(dev), &(n)); if (s_) return s_; } while (0)
#define SAME(a, b) do { fsc_status s_ = same_shape(__func__, #a, a, #b, b); if (s_) return s_; } while (0)

/* The checks of an elementwise call fn(o, a[, b]) (names on, an, bn; b NULL and bn NULL for two tensors): NULLs
 * first, then each tensor as check() wants it, o's shape a's and a's b's; *dev, *n := their device and elements. */
static fsc_status elementwise(const char *fn, const char *on, fsc_tensor *o, const char *an, const fsc_tensor *a,
                              const char *bn, const fsc_tensor *b, fsc_device **dev, size_t *n) {
    if (!o || !a || (bn && !b))
        return fsc_error(FSC_ERR_INVALID, "%s: %s is NULL", fn, !o ? on : !a ? an : bn);
    size_t m, k;
    *dev = NULL;
    FSC_TRY(check(fn, on, o, dev, n));
    FSC_TRY(check(fn, an, a, dev, &m));
    if (bn) FSC_TRY(check(fn, bn, b, dev, &k));
    FSC_TRY(same_shape(fn, on, o, an, a));
    return bn ? same_shape(fn, an, a, bn, b) : FSC_OK;
}
#define ELEMENTWISE2(o, a, dev, n) FSC_TRY(elementwise(__func__, #o, o, #a, a, NULL, NULL, &(dev), &(n)))
#define ELEMENTWISE3(o, a, b, dev, n) FSC_TRY(elementwise(__func__, #o, o, #a, a, #b, b, &(dev), &(n)))

fsc_status fsc_op_matmul(fsc_tensor *c, const fsc_tensor *a, int transa, const fsc_tensor *b, int transb,
                         float alpha, float beta) {
    FSC_CHECK_ARG(c);
    FSC_CHECK_ARG(a);
    FSC_CHECK_ARG(b);
    fsc_device *dev = NULL;
    size_t nc, na, nb;
    CHECK(c, dev, nc);
    CHECK(a, dev, na);
    CHECK(b, dev, nb);
    if (a->ndim != 2 || b->ndim != 2 || c->ndim != 2)
        return fsc_error(FSC_ERR_INVALID, "fsc_op_matmul: a, b and c must be 2-D (they have %d, %d and %d dimensions)",
                         a->ndim, b->ndim, c->ndim);
    int64_t M = transa ? a->shape[1] : a->shape[0], K = transa ? a->shape[0] : a->shape[1];
    int64_t Kb = transb ? b->shape[1] : b->shape[0], N = transb ? b->shape[0] : b->shape[1];
    if (K != Kb || c->shape[0] != M || c->shape[1] != N)
        return fsc_error(FSC_ERR_INVALID,
                         "fsc_op_matmul: shapes do not chain: op(a) is [%lld, %lld], op(b) [%lld, %lld], c [%lld, %lld]"
                         " (want [M, K] [K, N] [M, N])", (long long)M, (long long)K, (long long)Kb, (long long)N,
                         (long long)c->shape[0], (long long)c->shape[1]);
    if (M > INT_MAX || N > INT_MAX || K > INT_MAX)
        return fsc_error(FSC_ERR_INVALID, "fsc_op_matmul: a dimension above %d", INT_MAX);
    /* c is written while a and b are read: they must not share memory (ops.h) */
    const uintptr_t c0 = (uintptr_t)c->data, c1 = c0 + nc * sizeof(float), a0 = (uintptr_t)a->data,
                    a1 = a0 + na * sizeof(float), b0 = (uintptr_t)b->data, b1 = b0 + nb * sizeof(float);
    if (nc && ((na && c0 < a1 && a0 < c1) || (nb && c0 < b1 && b0 < c1)))
        return fsc_error(FSC_ERR_INVALID, "fsc_op_matmul: c overlaps %s: the product is written while they are read "
                         "(give c its own memory)", na && c0 < a1 && a0 < c1 ? "a" : "b");
    if (M == 0 || N == 0) return FSC_OK;
    if (K == 0) return beta == 0.0f ? fsc_device_memset(dev, c->data, 0, nc * sizeof(float))
                                    : fsc_k_scale(dev, c->data, beta, nc);
    return fsc_k_gemm(dev, transa ? 1 : 0, transb ? 1 : 0, (int)M, (int)N, (int)K, alpha, a->data,
                      (int)a->shape[1], 0, b->data, (int)b->shape[1], 0, beta, c->data, (int)N, 0, 1);
}

fsc_status fsc_op_copy(fsc_tensor *dst, const fsc_tensor *src) {
    fsc_device *dev;
    size_t n;
    ELEMENTWISE2(dst, src, dev, n);
    return n ? fsc_device_copy(dev, dst->data, src->data, n * sizeof(float)) : FSC_OK;
}

fsc_status fsc_op_zero(fsc_tensor *x) {
    fsc_device *dev = NULL;
    size_t n;
    CHECK(x, dev, n);
    return n ? fsc_device_memset(dev, x->data, 0, n * sizeof(float)) : FSC_OK;
}

/* Elements [0, have) of p copied over [have, n), doubling what is written each time (device copies). */
static fsc_status doubling(fsc_device *dev, float *p, size_t have, size_t n) {
    fsc_status s = FSC_OK;
    while (s == FSC_OK && have < n) {
        size_t k = have < n - have ? have : n - have;
        s = fsc_device_copy(dev, p + have, p, k * sizeof(float));
        have += k;
    }
    return s;
}

fsc_status fsc_op_fill(fsc_tensor *x, float value) {
    fsc_device *dev = NULL;
    size_t n;
    CHECK(x, dev, n);
    if (n == 0) return FSC_OK;
    fsc_status s = fsc_device_upload(dev, x->data, &value, sizeof value);
    return s == FSC_OK ? doubling(dev, x->data, 1, n) : s;
}

fsc_status fsc_op_scale(fsc_tensor *x, float alpha) {
    fsc_device *dev = NULL;
    size_t n;
    CHECK(x, dev, n);
    return n ? fsc_k_scale(dev, x->data, alpha, n) : FSC_OK;
}

fsc_status fsc_op_axpy(fsc_tensor *y, float alpha, const fsc_tensor *x) {
    fsc_device *dev;
    size_t n;
    ELEMENTWISE2(y, x, dev, n);
    return n ? fsc_k_axpy(dev, y->data, alpha, x->data, n) : FSC_OK;
}

fsc_status fsc_op_add(fsc_tensor *out, const fsc_tensor *a, const fsc_tensor *b) {
    fsc_device *dev;
    size_t n;
    ELEMENTWISE3(out, a, b, dev, n);
    return n ? fsc_k_add(dev, out->data, a->data, b->data, n) : FSC_OK;
}

fsc_status fsc_op_mul(fsc_tensor *out, const fsc_tensor *a, const fsc_tensor *b) {
    fsc_device *dev;
    size_t n;
    ELEMENTWISE3(out, a, b, dev, n);
    return n ? fsc_k_mul_forward(dev, out->data, a->data, b->data, n) : FSC_OK;
}

fsc_status fsc_op_mul_backward(fsc_tensor *da, fsc_tensor *db, const fsc_tensor *a, const fsc_tensor *b,
                               const fsc_tensor *dout) {
    FSC_CHECK_ARG(a);
    FSC_CHECK_ARG(b);
    FSC_CHECK_ARG(dout);
    fsc_device *dev = NULL;
    size_t n, m, k;
    CHECK(a, dev, n);
    CHECK(b, dev, m);
    CHECK(dout, dev, k);
    SAME(a, b);
    SAME(a, dout);
    if (da) {
        CHECK(da, dev, m);
        SAME(da, a);
    }
    if (db) {
        CHECK(db, dev, m);
        SAME(db, a);
    }
    if (n == 0 || (!da && !db)) return FSC_OK;
    return fsc_k_mul_backward(dev, da ? da->data : NULL, db ? db->data : NULL, a->data, b->data, dout->data, n);
}

/* The checks of a row call fn(x (N, C), v (C)), C <= INT_MAX, in the order the arguments are given (x first when
 * x_first): NULLs, each tensor as check() wants it, then the shapes; *dev, *n, *m := the device, x's and v's
 * elements. */
static fsc_status rows_vec(const char *fn, const fsc_tensor *x, const fsc_tensor *v, int x_first, fsc_device **dev,
                           size_t *n, size_t *m) {
    const fsc_tensor *first = x_first ? x : v, *second = x_first ? v : x;
    const char *name1 = x_first ? "x" : "v", *name2 = x_first ? "v" : "x";
    if (!first || !second) /* NULLs before anything else (elementwise's order) */
        return fsc_error(FSC_ERR_INVALID, "%s: %s is NULL", fn, !first ? name1 : name2);
    fsc_status s = check(fn, name1, first, dev, x_first ? n : m);
    if (s == FSC_OK) s = check(fn, name2, second, dev, x_first ? m : n);
    if (s != FSC_OK) return s;
    if (x->ndim != 2 || v->ndim != 1 || v->shape[0] != x->shape[1]) {
        char sx[96], sv[96];
        fsc_shape_str(sx, sizeof sx, x->ndim, x->shape);
        fsc_shape_str(sv, sizeof sv, v->ndim, v->shape);
        return fsc_error(FSC_ERR_INVALID, "%s: x %s and v %s are not (N, C) and (C)", fn, sx, sv);
    }
    if (x->shape[1] > INT_MAX) return fsc_error(FSC_ERR_INVALID, "%s: rows wider than %d", fn, INT_MAX);
    return FSC_OK;
}

fsc_status fsc_op_add_rows(fsc_tensor *x, const fsc_tensor *v) {
    fsc_device *dev = NULL;
    size_t n, m;
    fsc_status s = rows_vec(__func__, x, v, 1, &dev, &n, &m);
    if (s != FSC_OK || n == 0) return s;
    return fsc_k_bias_add(dev, x->data, v->data, (size_t)x->shape[0], (int)x->shape[1]);
}

fsc_status fsc_op_sum_rows(fsc_tensor *v, const fsc_tensor *x) {
    fsc_device *dev = NULL;
    size_t n, m;
    fsc_status s = rows_vec(__func__, x, v, 0, &dev, &n, &m);
    if (s != FSC_OK || n == 0) return s;
    return fsc_k_bias_grad(dev, v->data, x->data, (size_t)x->shape[0], (int)x->shape[1]);
}

fsc_status fsc_op_repeat_rows(fsc_tensor *x, const fsc_tensor *v) {
    fsc_device *dev = NULL;
    size_t n, m;
    fsc_status s = rows_vec(__func__, x, v, 1, &dev, &n, &m);
    if (s != FSC_OK || n == 0) return s;
    s = fsc_device_copy(dev, x->data, v->data, m * sizeof(float));
    return s == FSC_OK ? doubling(dev, x->data, m, n) : s;
}

fsc_status fsc_op_silu(fsc_tensor *out, const fsc_tensor *x) {
    fsc_device *dev;
    size_t n;
    ELEMENTWISE2(out, x, dev, n);
    return n ? fsc_k_silu_forward(dev, out->data, x->data, n) : FSC_OK;
}

fsc_status fsc_op_silu_backward(fsc_tensor *dx, const fsc_tensor *x, const fsc_tensor *dout) {
    fsc_device *dev;
    size_t n;
    ELEMENTWISE3(dx, x, dout, dev, n);
    return n ? fsc_k_silu_backward(dev, dx->data, x->data, dout->data, n) : FSC_OK;
}

fsc_status fsc_op_gelu(fsc_tensor *out, const fsc_tensor *x) {
    fsc_device *dev;
    size_t n;
    ELEMENTWISE2(out, x, dev, n);
    return n ? fsc_k_gelu_forward(dev, out->data, x->data, n) : FSC_OK;
}

fsc_status fsc_op_gelu_backward(fsc_tensor *dx, const fsc_tensor *x, const fsc_tensor *dout) {
    fsc_device *dev;
    size_t n;
    ELEMENTWISE3(dx, x, dout, dev, n);
    return n ? fsc_k_gelu_backward(dev, dx->data, x->data, dout->data, n) : FSC_OK;
}

fsc_status fsc_op_sum(const fsc_tensor *x, double *sum) {
    FSC_CHECK_ARG(x);
    FSC_CHECK_ARG(sum);
    fsc_device *dev = NULL;
    size_t n;
    CHECK(x, dev, n);
    *sum = 0;
    return n ? fsc_k_sum(dev, sum, x->data, n) : FSC_OK;
}
