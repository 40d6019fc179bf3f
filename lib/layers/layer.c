/* The layer declaration helpers of layers.h: parameters, their initial values, freeing a layer.
 * Not here: the built-in layers (basic.c, transformer.c), the sequential model (seq.c, seq_run.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fsc/layers.h"

/* Initial values a parameter can start from: a known kind, finite numbers, a standard deviation >= 0 (a NaN
 * reached the first step's loss, whose refusal advised a lower learning rate) */
static fsc_status init_check(const fsc_layer *l, const char *name, fsc_init init) {
    if (init.kind == FSC_INIT_NORMAL && isfinite(init.mean) && isfinite(init.std) && init.std >= 0) return FSC_OK;
    if (init.kind == FSC_INIT_CONST && isfinite(init.value)) return FSC_OK;
    return fsc_error(FSC_ERR_INVALID, "layer %s: parameter %s: initial values %s (need a finite mean and value and "
                     "a finite std >= 0)", l->kind, name,
                     init.kind == FSC_INIT_NORMAL ? "normal with a mean or std that is not finite, or std < 0"
                     : init.kind == FSC_INIT_CONST ? "constant and not finite" : "of an unknown kind");
}

fsc_status fsc_layer_add_param(fsc_layer *l, const char *name, int ndim, const int64_t *shape, fsc_init init) {
    FSC_CHECK_ARG(l);
    FSC_CHECK_ARG(name);
    FSC_CHECK_ARG(shape);
    if (!l || !name || !name[0] || !shape)
        return fsc_error(FSC_ERR_INVALID, "layer: a parameter needs a layer, a name and a shape");
    if (ndim < 1 || ndim > 4)
        return fsc_error(FSC_ERR_INVALID, "layer %s: parameter %s has %d dimensions (1 to 4)", l->kind, name, ndim);
    FSC_TRY(init_check(l, name, init));
    if (l->n_params >= l->cap_params) { /* the table grows: an MoE layer declares 1 + 4 E parameters */
        const int cap = l->cap_params ? 2 * l->cap_params : FSC_LAYER_MAX_PARAMS;
        fsc_layer_param *t = cap > l->n_params ? realloc(l->params, (size_t)cap * sizeof *t) : NULL;
        if (!t) return fsc_error(FSC_ERR_NOMEM, "layer %s: out of host memory for %d parameters", l->kind, cap);
        l->params = t, l->cap_params = cap;
    }
    fsc_layer_param *p = &l->params[l->n_params];
    memset(p, 0, sizeof *p);
    if (strlen(name) >= sizeof p->name)
        return fsc_error(FSC_ERR_INVALID, "layer %s: parameter name %s is longer than %zu characters", l->kind, name,
                         sizeof p->name - 1);
    for (int k = 0; k < l->n_params; k++)
        if (!strcmp(l->params[k].name, name))
            return fsc_error(FSC_ERR_INVALID, "layer %s: two parameters are called %s", l->kind, name);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = ndim;
    p->numel = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 1)
            return fsc_error(FSC_ERR_INVALID, "layer %s: parameter %s has dimension %d of size %lld", l->kind, name, d,
                             (long long)shape[d]);
        if ((uint64_t)shape[d] > ((uint64_t)1 << 60) / p->numel) /* elements, and their bytes, stay far from 2^64 */
            return fsc_error(FSC_ERR_INVALID, "layer %s: parameter %s of more than 2^60 elements (dimension %d of "
                             "size %lld)", l->kind, name, d, (long long)shape[d]);
        p->shape[d] = shape[d];
        p->numel *= (size_t)shape[d];
    }
    p->init = init;
    l->n_params++;
    return FSC_OK;
}

fsc_status fsc_layer_add_param_split(fsc_layer *l, const char *name, int ndim, const int64_t *full_shape, int split,
                                     int parts, int tp_rank, int tp_size, fsc_init init) {
    FSC_CHECK_ARG(l);
    FSC_CHECK_ARG(name);
    FSC_CHECK_ARG(full_shape);
    if (!l || !name || !full_shape || ndim < 1 || ndim > 4)
        return fsc_error(FSC_ERR_INVALID, "layer: a split parameter needs a layer, a name and a shape of 1 to 4 "
                         "dimensions");
    if (split < FSC_SPLIT_NONE || split > FSC_SPLIT_COLS)
        return fsc_error(FSC_ERR_INVALID, "layer %s: parameter %s has split %d (FSC_SPLIT_NONE, _ROWS or _COLS)",
                         l->kind, name, split);
    const int P = parts > 1 ? parts : 1, T = tp_size > 1 ? tp_size : 1;
    if (parts < 0 || tp_size < 0 || tp_rank < 0 || tp_rank >= T || (split == FSC_SPLIT_NONE && P > 1))
        return fsc_error(FSC_ERR_INVALID, "layer %s: parameter %s has %d parts on tensor rank %d of %d", l->kind,
                         name, parts, tp_rank, tp_size);
    int64_t shape[4] = { 0, 0, 0, 0 };
    memcpy(shape, full_shape, (size_t)ndim * sizeof *shape);
    if (split != FSC_SPLIT_NONE) {
        const int d = split == FSC_SPLIT_ROWS ? 0 : ndim - 1;
        if (full_shape[d] < 1 || full_shape[d] % ((int64_t)P * T) != 0)
            return fsc_error(FSC_ERR_INVALID, "layer %s: parameter %s: dimension %d (%lld) does not split into %d "
                             "parts of %d slices", l->kind, name, d, (long long)full_shape[d], P, T);
        shape[d] = full_shape[d] / T;
    }
    FSC_TRY(fsc_layer_add_param(l, name, ndim, shape, init));
    fsc_layer_param *p = &l->params[l->n_params - 1];
    p->split = split;
    p->parts = split == FSC_SPLIT_NONE ? 0 : parts;
    p->tp_rank = T > 1 ? tp_rank : 0;
    p->tp_size = tp_size;
    memcpy(p->full_shape, full_shape, (size_t)ndim * sizeof *p->full_shape);
    return FSC_OK;
}

fsc_status fsc_layer_set_init(fsc_layer *l, const char *name, fsc_init init) {
    FSC_CHECK_ARG(l);
    FSC_CHECK_ARG(name);
    for (int k = 0; l && name && k < l->n_params; k++)
        if (!strcmp(l->params[k].name, name)) {
            FSC_TRY(init_check(l, name, init));
            l->params[k].init = init;
            return FSC_OK;
        }
    return fsc_error(FSC_ERR_INVALID, "layer %s has no parameter called %s", l ? l->kind : "(null)",
                     name ? name : "(null)");
}

fsc_init fsc_init_normal(float std) { return (fsc_init){ .kind = FSC_INIT_NORMAL, .std = std }; }
fsc_init fsc_init_const(float v) { return (fsc_init){ .kind = FSC_INIT_CONST, .value = v }; }

void fsc_layer_free(fsc_layer *l) {
    if (!l) return;
    if (l->ops && l->ops->destroy) l->ops->destroy(l);
    free(l->params);
    free(l);
}
