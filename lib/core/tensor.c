/* Tensors: shaped, strided views of memory (tensor.h). No allocation happens here; a tensor never
 * owns its data. Views (narrow, reshape, transpose) check their arguments and say what is wrong. */
#include <stdint.h>
#include <stdio.h>
#include "fsc/tensor.h"

fsc_tensor fsc_tensor_make(void *data, fsc_dtype dtype, int ndim, const int64_t *shape, fsc_device *dev) {
    fsc_tensor t = {0};
    /* no shape to read, or more dimensions than a tensor holds (or fewer than none): the empty tensor (no data),
     * which every op refuses, never a tensor of other elements than the shape's */
    if ((!shape && ndim > 0) || ndim < 0 || ndim > FSC_MAX_DIMS) return t;
    t.data = data;
    t.dtype = dtype;
    t.dev = dev;
    t.ndim = ndim;
    for (int i = 0; i < ndim; i++) t.shape[i] = shape[i];
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        t.stride[i] = s;
        if (__builtin_mul_overflow(s, t.shape[i], &s)) s = INT64_MAX; /* a size past int64: the ops refuse it */
    }
    return t;
}

int64_t fsc_tensor_numel(const fsc_tensor *t) {
    if (!t) return 0;
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        if (__builtin_mul_overflow(n, t->shape[i], &n)) return INT64_MAX; /* saturated: no size fits it */
    return n;
}

size_t fsc_tensor_nbytes(const fsc_tensor *t) {
    if (!t) return 0;
    const int64_t n = fsc_tensor_numel(t);
    size_t b;
    /* a count saturated at INT64_MAX or made of negative sizes: no memory holds it (the product wrapped before) */
    if (n < 0 || n == INT64_MAX || __builtin_mul_overflow((size_t)n, fsc_dtype_size(t->dtype), &b)) return SIZE_MAX;
    return b;
}

int fsc_tensor_is_contiguous(const fsc_tensor *t) {
    if (!t) return 0;
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->stride[i] != s) return 0;
        if (__builtin_mul_overflow(s, t->shape[i], &s)) s = INT64_MAX; /* saturated as fsc_tensor_make's strides */
    }
    return 1;
}

void fsc_shape_str(char *buf, size_t cap, int ndim, const int64_t *shape) {
    if (!buf || cap == 0) return;
    size_t used = 0;
    buf[0] = '\0';
    if (!shape) return;
    int n = snprintf(buf, cap, "[");
    if (n > 0) used = (size_t)n;
    for (int i = 0; i < ndim && used < cap; i++) {
        n = snprintf(buf + used, cap - used, i ? ", %lld" : "%lld", (long long)shape[i]);
        if (n < 0) return;
        used += (size_t)n;
    }
    if (used < cap) snprintf(buf + used, cap - used, "]");
}

fsc_status fsc_tensor_narrow(const fsc_tensor *t, int dim, int64_t start, int64_t len, fsc_tensor *out) {
    FSC_CHECK_ARG(t);
    FSC_CHECK_ARG(out);
    char s[96];
    if (dim < 0 || dim >= t->ndim)
        return fsc_error(FSC_ERR_INVALID, "narrow: dimension %d out of range for a %d-dim tensor", dim, t->ndim);
    if (start < 0 || len < 0 || start > t->shape[dim] || len > t->shape[dim] - start) {
        fsc_shape_str(s, sizeof s, t->ndim, t->shape);
        int64_t end; /* start + len, saturated (start INT64_MAX with len 1 wrapped) */
        if (__builtin_add_overflow(start, len, &end)) end = len > 0 ? INT64_MAX : INT64_MIN;
        return fsc_error(FSC_ERR_INVALID, "narrow: rows [%lld, %lld) of dimension %d are outside shape %s",
                         (long long)start, (long long)end, dim, s);
    }
    fsc_tensor r = *t;
    if (r.data) r.data = (char *)r.data + (size_t)(start * t->stride[dim]) * fsc_dtype_size(t->dtype);
    r.shape[dim] = len;
    *out = r;
    return FSC_OK;
}

fsc_status fsc_tensor_reshape(const fsc_tensor *t, int ndim, const int64_t *shape, fsc_tensor *out) {
    FSC_CHECK_ARG(t);
    FSC_CHECK_ARG(shape);
    FSC_CHECK_ARG(out);
    char s0[96], s1[96];
    if (ndim < 0 || ndim > FSC_MAX_DIMS)
        return fsc_error(FSC_ERR_INVALID, "reshape: %d dimensions (at most %d)", ndim, FSC_MAX_DIMS);
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return fsc_error(FSC_ERR_INVALID, "reshape: negative size %lld", (long long)shape[i]);
        if (__builtin_mul_overflow(n, shape[i], &n)) n = -1; /* past int64: equal to no tensor's count (it wrapped) */
    }
    fsc_shape_str(s0, sizeof s0, t->ndim, t->shape);
    fsc_shape_str(s1, sizeof s1, ndim, shape);
    if (n < 0) return fsc_error(FSC_ERR_INVALID, "reshape: %s has more elements than int64 counts", s1);
    if (!fsc_tensor_is_contiguous(t))
        return fsc_error(FSC_ERR_INVALID, "reshape: tensor of shape %s is not contiguous (a strided view)", s0);
    if (n != fsc_tensor_numel(t))
        return fsc_error(FSC_ERR_INVALID, "reshape: %s has %lld elements, %s has %lld", s0,
                         (long long)fsc_tensor_numel(t), s1, (long long)n);
    *out = fsc_tensor_make(t->data, t->dtype, ndim, shape, t->dev);
    return FSC_OK;
}

fsc_status fsc_tensor_transpose(const fsc_tensor *t, int d0, int d1, fsc_tensor *out) {
    FSC_CHECK_ARG(t);
    FSC_CHECK_ARG(out);
    if (d0 < 0 || d0 >= t->ndim || d1 < 0 || d1 >= t->ndim)
        return fsc_error(FSC_ERR_INVALID, "transpose: dimensions (%d, %d) out of range for a %d-dim tensor",
                         d0, d1, t->ndim);
    fsc_tensor r = *t;
    r.shape[d0] = t->shape[d1];
    r.shape[d1] = t->shape[d0];
    r.stride[d0] = t->stride[d1];
    r.stride[d1] = t->stride[d0];
    *out = r;
    return FSC_OK;
}
