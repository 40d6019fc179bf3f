/* Tensor-parallel slices of declared tensors (model.h's split fields): which element of the full tensor a local
 * element is, the slice as runs contiguous in the full tensor (what checkpoints, loading and initial values walk),
 * and the consistency check fsc_model_validate runs on each tensor's split fields.
 * Not here: splitting anything (the layers declare their slices), the engine's use of the runs (lib/parallel). */
#include <string.h>
#include "fsc/model.h"
#include "core/param_split.h"

static int split_dim(const fsc_param_info *p) { return p->split == FSC_SPLIT_ROWS ? 0 : p->ndim - 1; }
static size_t parts_of(const fsc_param_info *p) { return p->parts > 1 ? (size_t)p->parts : 1; }
static size_t tp_rank_of(const fsc_param_info *p) { return p->tp_size > 1 ? (size_t)p->tp_rank : 0; }

size_t fsc_param_full_numel(const fsc_param_info *p) {
    if (!p) return 0;
    return p->split != FSC_SPLIT_NONE && p->full_numel ? p->full_numel : p->numel;
}

size_t fsc_param_full_index(const fsc_param_info *p, size_t local) {
    if (!p) return 0;
    if (p->split == FSC_SPLIT_NONE) return local;
    const int d = split_dim(p);
    const size_t inner = p->split == FSC_SPLIT_ROWS ? p->numel / (size_t)p->shape[0] : 1;
    const size_t lw = (size_t)p->shape[d], fw = (size_t)p->full_shape[d]; /* the split dimension, local and full */
    const size_t w = lw / parts_of(p);                                    /* a part's slice */
    const size_t outer = local / (inner * lw), rest = local % (inner * lw);
    const size_t i = rest / inner, in = rest % inner;                      /* index along the split dimension */
    const size_t fi = (i / w) * (fw / parts_of(p)) + tp_rank_of(p) * w + i % w;
    return (outer * fw + fi) * inner + in;
}

size_t fsc_param_num_runs(const fsc_param_info *p) {
    if (!p) return 0;
    if (p->split == FSC_SPLIT_NONE) return 1;
    if (p->split == FSC_SPLIT_ROWS) return parts_of(p);
    return p->numel / (size_t)p->shape[p->ndim - 1] * parts_of(p);
}

fsc_param_run fsc_param_run_at(const fsc_param_info *p, size_t k, size_t first, size_t n) {
    if (!p || k >= fsc_param_num_runs(p)) return (fsc_param_run){0}; /* no such run: none of the elements */
    fsc_param_run run = { 0, 0, p->numel };
    if (p->split != FSC_SPLIT_NONE) {
        const int d = split_dim(p);
        const size_t inner = p->split == FSC_SPLIT_ROWS ? p->numel / (size_t)p->shape[0] : 1;
        const size_t lw = (size_t)p->shape[d], fw = (size_t)p->full_shape[d], P = parts_of(p);
        const size_t w = lw / P, row = k / P, q = k % P;
        run.local = (row * lw + q * w) * inner;
        run.full = (row * fw + q * (fw / P) + tp_rank_of(p) * w) * inner;
        run.n = w * inner;
    }
    const size_t a = run.local > first ? run.local : first;
    const size_t b = run.local + run.n < first + n ? run.local + run.n : first + n;
    if (a >= b) return (fsc_param_run){ 0, 0, 0 };
    return (fsc_param_run){ a, run.full + (a - run.local), b - a };
}

fsc_status fsc_param_check_split(const fsc_param_info *p) {
    if (p->split < FSC_SPLIT_NONE || p->split > FSC_SPLIT_COLS)
        return fsc_error(FSC_ERR_INVALID, "model: tensor %s has split %d (FSC_SPLIT_NONE, _ROWS or _COLS)", p->name,
                         p->split);
    if (p->parts < 0) return fsc_error(FSC_ERR_INVALID, "model: tensor %s has %d parts", p->name, p->parts);
    if (p->tp_size < 0 || (p->tp_size > 1 && (p->tp_rank < 0 || p->tp_rank >= p->tp_size)) ||
        (p->tp_size <= 1 && p->tp_rank != 0))
        return fsc_error(FSC_ERR_INVALID, "model: tensor %s is on tensor rank %d of %d", p->name, p->tp_rank,
                         p->tp_size);
    if (p->split == FSC_SPLIT_NONE) {
        int zero = 1, same = 1;
        for (int d = 0; d < 4; d++) zero = zero && p->full_shape[d] == 0;
        for (int d = 0; d < p->ndim; d++) same = same && p->full_shape[d] == p->shape[d];
        if (p->parts > 1 || (!zero && !same) || (p->full_numel != 0 && p->full_numel != p->numel))
            return fsc_error(FSC_ERR_INVALID, "model: tensor %s is not split but declares %d parts or a full shape "
                             "or size other than its shape", p->name, p->parts);
        return FSC_OK;
    }
    const int d = split_dim(p);
    const int64_t T = p->tp_size > 1 ? p->tp_size : 1, P = p->parts > 1 ? p->parts : 1;
    size_t n = 1;
    for (int k = 0; k < p->ndim; k++) {
        const int64_t want = k == d ? p->shape[k] * T : p->shape[k];
        if (p->full_shape[k] != want)
            return fsc_error(FSC_ERR_INVALID, "model: tensor %s is split along dimension %d over %lld ranks: its full "
                             "dimension %d is %lld, not %lld (its slice's %lld x %lld)", p->name, d, (long long)T, k,
                             (long long)p->full_shape[k], (long long)want, (long long)p->shape[k],
                             (long long)(k == d ? T : 1));
        n *= (size_t)p->full_shape[k];
    }
    if (p->shape[d] % P != 0)
        return fsc_error(FSC_ERR_INVALID, "model: tensor %s: its slice's dimension %d (%lld) is not %lld equal parts",
                         p->name, d, (long long)p->shape[d], (long long)P);
    if (p->full_numel != n)
        return fsc_error(FSC_ERR_INVALID, "model: tensor %s has full_numel %zu but its full shape holds %zu", p->name,
                         p->full_numel, n);
    return FSC_OK;
}
