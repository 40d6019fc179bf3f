/* Training with data x tensor parallelism (tp_trainer.h): a tensor-parallel GPT per tensor group, DDP over the
 * data group, in the engine's order of operations (parallel.h): forward, backward with
 * dloss = 1 / (global_batch T), sum of gradients over the data group in rank order, exact-norm clipping,
 * optimizer step. With a tensor group of 1 it is DDP bit for bit.
 * An independent oracle for the tests (test_tp_3d.c, test_tp_3d_engine.c), compiled into them only: the engine
 * (lib/tp/tp_engine.c) runs tensor parallelism for training, with every strategy and pipelines, and equals
 * this trainer bit for bit with DDP and no pipeline. Not here: the model itself (tp_gpt*.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tp/tp_impl.h"
#include "tp_trainer.h"
#include "core/device_impl.h"

struct fsc_tp_trainer {
    fsc_rank *r;
    fsc_layout l;
    fsc_comm *tensor, *data, *pipe;
    fsc_tp_train_opts o;
    fsc_tp_gpt *m;
    fsc_optim *opt;
    float **segs;   /* gradient segments for the norm: every split tensor, replicated ones on tensor rank 0 */
    size_t *lens;
    int nseg;
};

void fsc_tp_trainer_free(fsc_tp_trainer *t) {
    if (!t) return;
    fsc_optim_free(t->opt);
    fsc_tp_gpt_free(t->m);
    fsc_comm_free(t->tensor);
    fsc_comm_free(t->data);
    fsc_comm_free(t->pipe);
    free(t->segs);
    free(t->lens);
    free(t);
}

static fsc_status norm_segments(fsc_tp_trainer *t) {
    fsc_tp_gpt *m = t->m;
    t->segs = calloc((size_t)m->n_tensors, sizeof *t->segs);
    t->lens = calloc((size_t)m->n_tensors, sizeof *t->lens);
    if (!t->segs || !t->lens) return fsc_error(FSC_ERR_NOMEM, "tensor-parallel trainer: out of host memory");
    for (int i = 0; i < m->n_tensors; i++) {
        if (m->t[i].split == TP_REPLICATED && m->rank != 0) continue;
        t->segs[t->nseg] = m->grad[i];
        t->lens[t->nseg] = m->t[i].local.numel;
        t->nseg++;
    }
    return FSC_OK;
}

fsc_status fsc_tp_trainer_create(fsc_rank *r, const fsc_gpt_config *cfg, const fsc_tp_train_opts *o,
                                 const fsc_optim_config *oc, uint64_t seed, fsc_tp_trainer **out) {
    *out = NULL;
    if (!r || !cfg || !o || !oc) return fsc_error(FSC_ERR_INVALID, "tensor-parallel trainer: NULL argument");
    if (o->clip < 0 || !isfinite(o->clip))
        return fsc_error(FSC_ERR_INVALID, "tensor-parallel trainer: clip must be a finite number >= 0, not %g",
                         (double)o->clip);
    fsc_layout l;
    FSC_TRY(fsc_layout_make(r->world, o->tp, o->dp, 1, r->rank, &l));
    FSC_TRY(fsc_tp_check_config(cfg, l.tp));
    fsc_tp_trainer *t = calloc(1, sizeof *t);
    if (!t) return fsc_error(FSC_ERR_NOMEM, "tensor-parallel trainer: out of host memory");
    t->r = r, t->l = l, t->o = *o;
    t->o.tp = l.tp, t->o.dp = l.dp;
    fsc_tp_opts to = { .sequence_parallel = o->sequence_parallel };
    fsc_status s = fsc_layout_split(r->comm, &l, &t->tensor, &t->data, &t->pipe);
    if (s == FSC_OK) s = fsc_tp_gpt_create(r->dev, t->tensor, cfg, &to, seed, &t->m);
    if (s == FSC_OK) s = fsc_optim_create(r->dev, oc, &t->opt);
    if (s == FSC_OK) s = fsc_optim_add(t->opt, t->m->params, t->m->grads, t->m->P, NULL);
    /* the engine's weight-decay rule (model.h's fsc_param_decays) over the flat slices, in tensor order */
    for (int i = 0, off = 0; s == FSC_OK && !oc->decay_all && i < t->m->n_tensors; off += (int)t->m->linfo[i].numel, i++)
        if (!fsc_param_decays(&t->m->linfo[i])) s = fsc_optim_no_decay(t->opt, 0, (size_t)off, t->m->linfo[i].numel);
    if (s == FSC_OK) s = norm_segments(t);
    if (s != FSC_OK) {
        fsc_tp_trainer_free(t);
        return s;
    }
    *out = t;
    return FSC_OK;
}

const fsc_layout *fsc_tp_trainer_layout(const fsc_tp_trainer *t) { return &t->l; }
fsc_tp_gpt *fsc_tp_trainer_model(fsc_tp_trainer *t) { return t->m; }

/* Sum of one double per data rank, in rank order (as the engine sums losses). */
static fsc_status sum_over_data(fsc_tp_trainer *t, double local, double *total) {
    int n = fsc_comm_size(t->data);
    fsc_device *dev = t->r->dev;
    if (n == 1) {
        *total = local;
        return FSC_OK;
    }
    double *all = malloc((size_t)n * sizeof(double));
    void *d = NULL;
    fsc_status s = all ? FSC_OK : fsc_error(FSC_ERR_NOMEM, "tensor-parallel trainer: out of host memory");
    if (s == FSC_OK) s = fsc_device_alloc(dev, FSC_TAG_COMM, (size_t)(n + 1) * sizeof(double), &d);
    if (s == FSC_OK) s = fsc_device_upload(dev, d, &local, sizeof(double));
    if (s == FSC_OK) s = fsc_comm_all_gather(t->data, d, (double *)d + 1, sizeof(double), FSC_U8);
    if (s == FSC_OK) s = fsc_device_download(dev, all, (double *)d + 1, (size_t)n * sizeof(double));
    if (s == FSC_OK) {
        double acc = all[0];
        for (int i = 1; i < n; i++) acc += all[i];
        *total = acc;
    }
    fsc_device_release(dev, d);
    free(all);
    return s;
}

fsc_status fsc_tp_trainer_step(fsc_tp_trainer *t, const int32_t *tokens, const int32_t *targets, int local_batch,
                               int global_batch, fsc_step_info *info) {
    fsc_tp_gpt *m = t->m;
    int T = m->cfg.seq;
    if (local_batch < 1 || global_batch < local_batch)
        return fsc_error(FSC_ERR_INVALID, "tensor-parallel trainer: local batch %d, global batch %d (need 1 <= "
                         "local <= global)", local_batch, global_batch);
    fsc_step_info si = { .loss_scale = 1.0f };
    double ls = 0, total = 0;
    FSC_TRY(fsc_tp_gpt_zero_grads(m));
    FSC_TRY(fsc_tp_gpt_forward(m, tokens, targets, local_batch, &ls));
    FSC_TRY(fsc_tp_gpt_backward(m, 1.0f / ((float)global_batch * (float)T)));
    if (t->l.dp > 1) FSC_TRY(fsc_comm_all_reduce(t->data, m->grads, m->grads, m->P, FSC_F32, FSC_SUM));
    FSC_TRY(sum_over_data(t, ls, &total));
    si.loss = total / ((double)global_batch * T);
    if (t->o.clip > 0) {
        double norm = 0;
        FSC_TRY(fsc_grad_norm(t->r->dev, t->tensor, t->segs, t->lens, t->nseg, &norm));
        si.grad_norm = norm;
        if (norm > (double)t->o.clip) { /* fsc_grad_clip's factor, applied to every local slice */
            float factor = (float)((double)t->o.clip / (norm + 1e-6));
            FSC_TRY(FSC_K(t->r->dev, scale, m->grads, factor, m->P));
        }
    }
    FSC_TRY(fsc_optim_step(t->opt));
    if (info) *info = si;
    return FSC_OK;
}

void fsc_tp_trainer_comm_stats(const fsc_tp_trainer *t, fsc_comm_stats *tensor, fsc_comm_stats *data) {
    if (tensor) *tensor = *fsc_comm_get_stats(t->tensor);
    if (data) *data = *fsc_comm_get_stats(t->data);
}

void fsc_tp_trainer_reset_comm_stats(fsc_tp_trainer *t) {
    fsc_comm_reset_stats(t->tensor);
    fsc_comm_reset_stats(t->data);
}
