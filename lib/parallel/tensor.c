/* Tensor parallelism inside the engine, for any model whose tensors declare how they are split (model.h's split
 * fields): the model's layers run the tensor group's collectives between the strategy's hooks, and the strategies
 * shard, reduce and step this rank's slices over the data group of ranks holding the same slices as if they were a
 * model of their own. What the engine adds here, driven by the split fields only:
 *   - full_info: each tensor as weights files and checkpoints see it (the full tensor's shape);
 *   - holdings: what a rank holds as runs of the full tensors (fsc_param_run_at); a replicated tensor is held
 *     whole by every tensor rank and written by tensor rank 0;
 *   - loading a full-weights file: each rank reads its slices' runs;
 *   - the clipping norm: every split tensor counted on every tensor rank and each replicated one on tensor rank 0,
 *     over the ranks that split this data rank's gradients across data, tensor and pipeline (the exact norm).
 * Not here: the layers (lib/layers, tp.h's building blocks), the groups (engine.c), the pipeline (pipe.c). */
#include <stdlib.h>
#include <string.h>
#include "parallel/engine_impl.h"

/* Whether tensor p is a slice: split over a group of more than one rank (split at tp_size 1, it is whole, held
 * like a replicated tensor). */
static int sliced(const fsc_param_info *p) { return p->split != FSC_SPLIT_NONE && p->tp_size > 1; }

fsc_status fsc_tensor_make_full_info(fsc_engine *e) {
    const fsc_model *m = e->m;
    e->full = calloc((size_t)m->n_tensors, sizeof *e->full);
    if (!e->full) return fsc_error(FSC_ERR_NOMEM, "engine: out of host memory");
    for (int i = 0; i < m->n_tensors; i++) {
        fsc_param_info *f = &e->full[i];
        *f = m->info[i];
        if (f->split == FSC_SPLIT_NONE) continue;
        memcpy(f->shape, f->full_shape, sizeof f->shape);
        f->numel = f->full_numel;
        f->split = FSC_SPLIT_NONE, f->parts = 0;
    }
    return FSC_OK;
}

fsc_status fsc_tensor_check_model(const fsc_model *m, const fsc_layout *l) {
    int slices = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        const fsc_param_info *p = &m->info[i];
        const int size = p->tp_size > 1 ? p->tp_size : 1;
        if (size == 1) continue; /* whole */
        if (size != l->tp || p->tp_rank != l->tensor)
            return fsc_error(FSC_ERR_INVALID, "engine: tensor %s is a slice for tensor rank %d of %d, but this rank is "
                             "tensor rank %d of %d (build the model on the tensor group the engine passes)", p->name,
                             p->tp_rank, size, l->tensor, l->tp);
        slices += sliced(p);
    }
    if (l->tp > 1 && !slices)
        return fsc_error(FSC_ERR_INVALID, "engine: tensor parallelism over %d ranks, but the model declares no split "
                         "tensor (its layers were not built on the tensor group)", l->tp);
    return FSC_OK;
}

fsc_status fsc_tensor_norm_pieces(fsc_engine *e, float ***segs, size_t **lens, int *nseg) {
    /* the group they are summed over (every rank holding a part of the gradient) is the engine's e->norm_comm
     * (fsc_layout_norm_group); the pieces: what this rank holds (the strategy's holdings), replicated tensors on
     * tensor rank 0 only */
    *segs = NULL, *lens = NULL, *nseg = 0;
    if (!e->st->holdings)
        return fsc_error(FSC_ERR_INTERNAL, "tensor parallelism: strategy %s does not describe its holdings", e->st->name);
    fsc_holding *h = NULL;
    int n = 0;
    FSC_TRY(e->st->holdings(e, &h, &n));
    float **g = calloc((size_t)n + 1, sizeof *g);
    size_t *l = calloc((size_t)n + 1, sizeof *l);
    if (!g || !l) {
        free(g), free(l), free(h);
        return fsc_error(FSC_ERR_NOMEM, "tensor parallelism: out of host memory");
    }
    int c = 0;
    for (int k = 0; k < n; k++) {
        if (!sliced(&e->m->info[h[k].tensor]) && e->lay.tensor != 0) continue;
        g[c] = (float *)fsc_optim_grad(e->opt, h[k].seg) + h[k].seg_off;
        l[c++] = h[k].n;
    }
    free(h);
    *segs = g, *lens = l, *nseg = c;
    return FSC_OK;
}

fsc_status fsc_tensor_holdings(fsc_engine *e, const fsc_holding *in, int nin, fsc_holding **out, int *nout) {
    *out = NULL;
    *nout = 0;
    for (int pass = 0; pass < 2; pass++) {
        size_t c = 0;
        for (int k = 0; k < nin; k++) {
            const fsc_holding *h = &in[k];
            const fsc_param_info *p = &e->m->info[h->tensor];
            const int wr = h->write && (sliced(p) || e->lay.tensor == 0);
            for (size_t r = 0; r < fsc_param_num_runs(p); r++) {
                const fsc_param_run run = fsc_param_run_at(p, r, h->first, h->n);
                if (!run.n) continue;
                if (pass == 1)
                    (*out)[c] = (fsc_holding){ .tensor = h->tensor, .first = run.full, .n = run.n, .seg = h->seg,
                                               .seg_off = h->seg_off + (run.local - h->first), .write = wr };
                c++;
            }
        }
        if (pass == 1) {
            *nout = (int)c;
            return FSC_OK;
        }
        if (c > ((size_t)1 << 24))
            return fsc_error(FSC_ERR_UNSUPPORTED, "checkpoint: tensor rank %d holds %zu runs of full tensors, above "
                             "the limit of %d", e->lay.tensor, c, 1 << 24);
        if (!(*out = malloc((c + 1) * sizeof **out)))
            return fsc_error(FSC_ERR_NOMEM, "checkpoint: out of host memory for %zu holdings", c);
    }
    return FSC_OK;
}

fsc_status fsc_tensor_load(fsc_engine *e, fsc_st_file *f) {
    fsc_holding *h = NULL;
    int n = 0;
    FSC_TRY(e->st->holdings(e, &h, &n));
    size_t most = 1;
    for (int k = 0; k < n; k++)
        if (h[k].n > most) most = h[k].n;
    float *host = malloc(most * sizeof(float));
    fsc_status s = host ? FSC_OK : fsc_error(FSC_ERR_NOMEM, "tensor parallelism: out of host memory loading weights");
    for (int k = 0; k < n && s == FSC_OK; k++) {
        const fsc_param_info *p = &e->m->info[h[k].tensor];
        const fsc_st_entry *en = fsc_st_find_weight(f, p->name);
        if (!en) s = fsc_error(FSC_ERR_FORMAT, "weights file lacks %s", p->name);
        for (size_t r = 0; s == FSC_OK && r < fsc_param_num_runs(p); r++) {
            const fsc_param_run run = fsc_param_run_at(p, r, h[k].first, h[k].n);
            if (run.n) s = fsc_engine_read_f32(f, en, host + (run.local - h[k].first), run.full, run.n);
        }
        if (s == FSC_OK) /* the masters' device: the host's under offload all (docs/offload.md) */
            s = fsc_device_upload(fsc_offload_seg_dev(e, 0), fsc_optim_param(e->opt, h[k].seg) + h[k].seg_off, host,
                                  h[k].n * sizeof(float));
    }
    free(host);
    free(h);
    return s;
}

void fsc_tensor_free(fsc_engine *e) {
    free(e->full);
    e->full = NULL;
}
