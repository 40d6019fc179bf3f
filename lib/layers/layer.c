/* The layer declaration helpers of layers.h: parameters, their initial values, freeing a layer.
 * Not here: the built-in layers (basic.c, transformer.c), the sequential model (seq.c, seq_run.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fsc/layers.h"

fsc_status fsc_layer_add_param(fsc_layer *l, const char *name, int ndim, const int64_t *shape, fsc_init init) {
    if (!l || !name || !name[0] || !shape)
        return fsc_error(FSC_ERR_INVALID, "layer: a parameter needs a layer, a name and a shape");
    if (l->n_params >= FSC_LAYER_MAX_PARAMS)
        return fsc_error(FSC_ERR_INVALID, "layer %s: more than %d parameters", l->kind, FSC_LAYER_MAX_PARAMS);
    if (ndim < 1 || ndim > 4)
        return fsc_error(FSC_ERR_INVALID, "layer %s: parameter %s has %d dimensions (1 to 4)", l->kind, name, ndim);
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
        p->shape[d] = shape[d];
        p->numel *= (size_t)shape[d];
    }
    p->init = init;
    l->n_params++;
    return FSC_OK;
}

fsc_status fsc_layer_set_init(fsc_layer *l, const char *name, fsc_init init) {
    for (int k = 0; l && name && k < l->n_params; k++)
        if (!strcmp(l->params[k].name, name)) {
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
    free(l);
}
