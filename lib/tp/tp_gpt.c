/* The tensor-parallel GPT-2's description (tp.h): which tensors are split and how, this rank's slices in
 * one flat buffer, their initial values from the keyed RNG at the full tensors' element indices, and full
 * tensors gathered to tensor rank 0 (for export and for tests) or read from a full-weights file.
 * Not here: forward and backward (tp_gpt_run.c), the building blocks (tp_layers.c, tp_vocab.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tp_impl.h"
#include "fsc/safetensors.h"
#include "core/device_impl.h"

fsc_status fsc_tp_check_config(const fsc_gpt_config *cfg, int T) {
    FSC_TRY(fsc_gpt_config_validate(cfg));
    if (T < 1) return fsc_error(FSC_ERR_INVALID, "tensor parallel: group size %d must be >= 1", T);
    if (cfg->moe_experts > 0)
        return fsc_error(FSC_ERR_UNSUPPORTED, "tensor parallel: a GPT with MoE blocks (moe_experts %d) is not "
                         "supported with tensor parallelism yet", cfg->moe_experts);
    if (cfg->heads % T != 0)
        return fsc_error(FSC_ERR_INVALID, "tensor parallel: %d heads do not split over a tensor group of %d",
                         cfg->heads, T);
    if (cfg->vocab % T != 0)
        return fsc_error(FSC_ERR_INVALID, "tensor parallel: a vocabulary of %d does not split over a tensor group "
                         "of %d (pad it to a multiple of %d)", cfg->vocab, T, T);
    return FSC_OK;
}

/* Split kind of block tensor k (FSC_B_*) and of the others. */
static void describe(tp_tensor *t, const fsc_gpt_config *c, int i, int T) {
    int nt = fsc_gpt_num_tensors(c), k = (i - 2) % FSC_GPT_BLOCK_PARAMS;
    t->split = TP_REPLICATED;
    t->parts = 1;
    if (i == FSC_P_WTE) t->split = TP_SPLIT_ROWS;
    else if (i >= 2 && i < nt - 2) {
        if (k == FSC_B_ATTN_W || k == FSC_B_ATTN_B) t->split = TP_SPLIT_COLS, t->parts = 3;
        else if (k == FSC_B_FC_W || k == FSC_B_FC_B) t->split = TP_SPLIT_COLS;
        else if (k == FSC_B_APROJ_W || k == FSC_B_MPROJ_W) t->split = TP_SPLIT_ROWS;
    }
    t->local = t->full;
    if (t->split == TP_SPLIT_ROWS) t->local.shape[0] /= T;
    if (t->split == TP_SPLIT_COLS) t->local.shape[t->full.ndim - 1] /= T;
    t->local.numel = (size_t)t->local.shape[0] * (size_t)(t->local.ndim == 2 ? t->local.shape[1] : 1);
}

size_t tp_num_runs(const tp_tensor *t) {
    if (t->split != TP_SPLIT_COLS) return 1;
    return (size_t)(t->full.ndim == 2 ? t->full.shape[0] : 1) * (size_t)t->parts;
}

tp_run tp_run_at(const tp_tensor *t, int r, int T, size_t k) {
    tp_run run = { 0, 0, t->local.numel };
    if (t->split == TP_SPLIT_ROWS) run.full = (size_t)r * t->local.numel;
    if (t->split != TP_SPLIT_COLS) return run;
    size_t cols = (size_t)t->full.shape[t->full.ndim - 1], part = cols / (size_t)t->parts, w = part / (size_t)T;
    size_t row = k / (size_t)t->parts, q = k % (size_t)t->parts;
    run.local = row * (cols / (size_t)T) + q * w;
    run.full = row * cols + q * part + (size_t)r * w;
    run.n = w;
    return run;
}

/* Every rank of the group has the same configuration (a mismatch would hang or corrupt the collectives). */
static fsc_status check_same(fsc_device *dev, fsc_comm *tp, const fsc_gpt_config *cfg, int sp) {
    int T = fsc_comm_size(tp);
    int32_t mine[6] = { cfg->layers, cfg->dim, cfg->heads, cfg->seq, cfg->vocab, sp };
    int32_t *all = malloc((size_t)T * sizeof mine);
    void *d = NULL;
    if (!all) return fsc_error(FSC_ERR_NOMEM, "tensor parallel: out of host memory");
    fsc_status s = fsc_device_alloc(dev, FSC_TAG_COMM, (size_t)(T + 1) * sizeof mine, &d);
    if (s == FSC_OK) s = fsc_device_upload(dev, d, mine, sizeof mine);
    if (s == FSC_OK) s = fsc_comm_all_gather(tp, d, (char *)d + sizeof mine, sizeof mine, FSC_U8);
    if (s == FSC_OK) s = fsc_device_download(dev, all, (char *)d + sizeof mine, (size_t)T * sizeof mine);
    for (int r = 0; r < T && s == FSC_OK; r++)
        if (memcmp(all + 6 * r, mine, sizeof mine) != 0)
            s = fsc_error(FSC_ERR_INVALID, "tensor parallel: rank %d of the tensor group has another configuration "
                          "(layers %d dim %d heads %d seq %d vocab %d sequence_parallel %d) than rank %d", r,
                          all[6 * r], all[6 * r + 1], all[6 * r + 2], all[6 * r + 3], all[6 * r + 4], all[6 * r + 5],
                          fsc_comm_rank(tp));
    fsc_device_release(dev, d);
    free(all);
    return s;
}

/* The run k of tensor t's slice clipped to local elements [first, first + n); 0 when they do not meet. */
static int run_clip(const tp_tensor *t, int r, int T, size_t k, size_t first, size_t n, tp_run *out) {
    tp_run run = tp_run_at(t, r, T, k);
    size_t a = run.local > first ? run.local : first;
    size_t b = run.local + run.n < first + n ? run.local + run.n : first + n;
    if (a >= b) return 0;
    *out = (tp_run){ a, run.full + (a - run.local), b - a };
    return 1;
}

void tp_init_local(const fsc_tp_gpt *m, int i, size_t first, size_t n, float *out) {
    const tp_tensor *t = &m->t[i];
    tp_run run;
    for (size_t k = 0; k < tp_num_runs(t); k++)
        if (run_clip(t, m->rank, m->size, k, first, n, &run))
            fsc_gpt_init_values(&m->cfg, m->seed, i, run.full, run.n, out + (run.local - first));
}

fsc_status tp_read_local(const fsc_tp_gpt *m, fsc_st_file *f, const fsc_st_entry *e, int i, size_t first, size_t n,
                         float *out) {
    const tp_tensor *t = &m->t[i];
    tp_run run;
    for (size_t k = 0; k < tp_num_runs(t); k++)
        if (run_clip(t, m->rank, m->size, k, first, n, &run))
            FSC_TRY(fsc_st_read(f, e, out + (run.local - first), run.full, run.n));
    return FSC_OK;
}

static fsc_status init_values(fsc_tp_gpt *m) {
    size_t most = 0;
    for (int i = 0; i < m->n_tensors; i++)
        if (m->t[i].local.numel > most) most = m->t[i].local.numel;
    float *host = malloc(most * sizeof(float));
    if (!host) return fsc_error(FSC_ERR_NOMEM, "tensor parallel: out of host memory for initial values");
    fsc_status s = FSC_OK;
    for (int i = 0; i < m->n_tensors && s == FSC_OK; i++) {
        tp_init_local(m, i, 0, m->t[i].local.numel, host);
        s = fsc_device_upload(m->dev, m->param[i], host, m->t[i].local.numel * sizeof(float));
    }
    free(host);
    return s;
}

static int is_layernorm(const fsc_gpt_config *c, int i) {
    int nt = fsc_gpt_num_tensors(c), k = (i - 2) % FSC_GPT_BLOCK_PARAMS;
    if (i >= nt - 2) return 1;
    return i >= 2 && (k == FSC_B_LN1_W || k == FSC_B_LN1_B || k == FSC_B_LN2_W || k == FSC_B_LN2_B);
}

static fsc_status create(fsc_device *dev, fsc_comm *tp, const fsc_gpt_config *cfg, const fsc_tp_opts *opts,
                         uint64_t seed, int bound, fsc_tp_gpt **out) {
    *out = NULL;
    if (!dev || !tp || !cfg) return fsc_error(FSC_ERR_INVALID, "tensor parallel gpt: device, group or config NULL");
    int T = fsc_comm_size(tp), sp = opts ? opts->sequence_parallel != 0 : 0;
    FSC_TRY(fsc_tp_check_config(cfg, T));
    FSC_TRY(check_same(dev, tp, cfg, sp));
    fsc_tp_gpt *m = calloc(1, sizeof *m);
    if (!m) return fsc_error(FSC_ERR_NOMEM, "tensor parallel gpt: out of host memory");
    m->cfg = *cfg, m->dev = dev, m->tp = tp, m->seed = seed;
    m->size = T, m->rank = fsc_comm_rank(tp), m->sp = sp;
    m->C = cfg->dim, m->Cl = cfg->dim / T, m->NHl = cfg->heads / T, m->Vl = cfg->vocab / T;
    m->v0 = m->rank * m->Vl;
    m->n_tensors = fsc_gpt_num_tensors(cfg);
    size_t nt = (size_t)m->n_tensors;
    m->t = calloc(nt, sizeof *m->t);
    m->param = calloc(nt, sizeof *m->param);
    m->grad = calloc(nt, sizeof *m->grad);
    m->roff = calloc(nt, sizeof *m->roff);
    m->linfo = calloc(nt, sizeof *m->linfo);
    fsc_status s = FSC_OK;
    if (!m->t || !m->param || !m->grad || !m->roff || !m->linfo)
        s = fsc_error(FSC_ERR_NOMEM, "tensor parallel gpt: out of memory");
    for (int i = 0; i < m->n_tensors && s == FSC_OK; i++) {
        s = fsc_gpt_param_info(cfg, i, &m->t[i].full);
        describe(&m->t[i], cfg, i, T);
        m->linfo[i] = m->t[i].local;
        /* the slice declared as model.h's split fields (TP_SPLIT_* are FSC_SPLIT_*) */
        m->linfo[i].split = m->t[i].split;
        m->linfo[i].parts = m->t[i].split == TP_REPLICATED ? 0 : m->t[i].parts;
        m->linfo[i].tp_rank = T > 1 ? m->rank : 0;
        m->linfo[i].tp_size = T;
        if (m->t[i].split != TP_REPLICATED) {
            memcpy(m->linfo[i].full_shape, m->t[i].full.shape, sizeof m->linfo[i].full_shape);
            m->linfo[i].full_numel = m->t[i].full.numel;
        }
        m->t[i].off = m->P;
        m->P += m->t[i].local.numel;
        m->roff[i] = SIZE_MAX;
        if (sp && is_layernorm(cfg, i)) m->roff[i] = m->nrgrad, m->nrgrad += m->t[i].local.numel;
    }
    if (s == FSC_OK && !bound) s = fsc_device_alloc(dev, FSC_TAG_PARAMS, m->P * sizeof(float), (void **)&m->params);
    if (s == FSC_OK && !bound) s = fsc_device_calloc(dev, FSC_TAG_GRADS, m->P * sizeof(float), (void **)&m->grads);
    if (s == FSC_OK && m->nrgrad)
        s = fsc_device_calloc(dev, FSC_TAG_GRADS, m->nrgrad * sizeof(float), (void **)&m->rgrad);
    if (s == FSC_OK)
        s = fsc_device_calloc(dev, FSC_TAG_GRADS, (size_t)m->Vl * m->C * sizeof(float), (void **)&m->dwte_head);
    for (int i = 0; i < m->n_tensors && s == FSC_OK && !bound; i++) {
        m->param[i] = m->params + m->t[i].off;
        m->grad[i] = m->grads + m->t[i].off;
    }
    if (s == FSC_OK && !bound) s = init_values(m);
    if (s != FSC_OK) {
        fsc_tp_gpt_free(m);
        return s;
    }
    m->view = (fsc_gpt){ .cfg = *cfg, .dev = dev, .n_tensors = m->n_tensors, .info = m->linfo, .param = m->param,
                         .grad = m->grad, .dwte_head = m->dwte_head };
    *out = m;
    return FSC_OK;
}

fsc_status fsc_tp_gpt_create(fsc_device *dev, fsc_comm *tp, const fsc_gpt_config *cfg, const fsc_tp_opts *opts,
                             uint64_t seed, fsc_tp_gpt **out) {
    return create(dev, tp, cfg, opts, seed, 0, out);
}

fsc_status tp_gpt_create_bound(fsc_device *dev, fsc_comm *tp, const fsc_gpt_config *cfg, const fsc_tp_opts *opts,
                               uint64_t seed, fsc_tp_gpt **out) {
    return create(dev, tp, cfg, opts, seed, 1, out);
}

void fsc_tp_gpt_free(fsc_tp_gpt *m) {
    if (!m) return;
    tp_acts_free(m->dev, m->acts);
    fsc_device_release(m->dev, m->params);
    fsc_device_release(m->dev, m->grads);
    fsc_device_release(m->dev, m->rgrad);
    fsc_device_release(m->dev, m->dwte_head);
    free(m->t), free(m->param), free(m->grad), free(m->roff), free(m->linfo);
    free(m);
}

float *fsc_tp_gpt_params(fsc_tp_gpt *m) { return m->params; }
float *fsc_tp_gpt_grads(fsc_tp_gpt *m) { return m->grads; }
size_t fsc_tp_gpt_num_local(const fsc_tp_gpt *m) { return m->P; }

fsc_status fsc_tp_gpt_local_info(const fsc_tp_gpt *m, int i, fsc_param_info *out) {
    if (i < 0 || i >= m->n_tensors)
        return fsc_error(FSC_ERR_INVALID, "tensor parallel gpt: tensor index %d out of range [0, %d)", i,
                         m->n_tensors);
    *out = m->t[i].local;
    return FSC_OK;
}

fsc_status fsc_tp_gpt_zero_grads(fsc_tp_gpt *m) {
    if (!m->grads)
        return fsc_error(FSC_ERR_STATE, "tensor parallel gpt: the gradients belong to the engine's strategy");
    return fsc_device_memset(m->dev, m->grads, 0, m->P * sizeof(float));
}

/* Every rank returns FSC_OK only if every rank of the group had FSC_OK (rank 0's file errors reach all). */
static fsc_status agree(fsc_tp_gpt *m, fsc_status mine) { return fsc_comm_agree(m->tp, m->dev, mine); }

/* Collective: tensor i in full into host (full numel floats) on rank 0; src is the local flat buffer
 * (params or grads). The other ranks send their slices to rank 0. tmp: device, local numel floats. */
static fsc_status gather_tensor(fsc_tp_gpt *m, const float *src, int i, float *host, float *slice, float *tmp) {
    const tp_tensor *t = &m->t[i];
    size_t n = t->local.numel;
    const float *mine = src + t->off;
    if (m->rank != 0) return t->split == TP_REPLICATED ? FSC_OK : fsc_comm_send(m->tp, mine, n, FSC_F32, 0);
    if (t->split == TP_REPLICATED) return fsc_device_download(m->dev, host, mine, n * sizeof(float));
    for (int r = 0; r < m->size; r++) {
        if (r == 0) FSC_TRY(fsc_device_download(m->dev, slice, mine, n * sizeof(float)));
        else {
            FSC_TRY(fsc_comm_recv(m->tp, tmp, n, FSC_F32, r));
            FSC_TRY(fsc_device_download(m->dev, slice, tmp, n * sizeof(float)));
        }
        for (size_t k = 0; k < tp_num_runs(t); k++) {
            tp_run run = tp_run_at(t, r, m->size, k);
            memcpy(host + run.full, slice + run.local, run.n * sizeof(float));
        }
    }
    return FSC_OK;
}

/* Collective: each tensor in full, handed to fn on rank 0 (fn may be NULL elsewhere). */
typedef fsc_status (*tensor_fn)(void *ctx, int i, const float *full, size_t n);
static fsc_status gather_all(fsc_tp_gpt *m, const float *src, tensor_fn fn, void *ctx) {
    size_t most = 0, most_local = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        if (m->t[i].full.numel > most) most = m->t[i].full.numel;
        if (m->t[i].local.numel > most_local) most_local = m->t[i].local.numel;
    }
    float *host = NULL, *slice = NULL, *tmp = NULL;
    fsc_status s = FSC_OK;
    if (m->rank == 0) {
        host = malloc(most * sizeof(float));
        slice = malloc(most_local * sizeof(float));
        if (!host || !slice) s = fsc_error(FSC_ERR_NOMEM, "tensor parallel gpt: out of host memory gathering tensors");
        if (s == FSC_OK) s = fsc_device_alloc(m->dev, FSC_TAG_COMM, most_local * sizeof(float), (void **)&tmp);
    }
    s = agree(m, s);
    fsc_status wrote = FSC_OK; /* a failing fn stops writing, not the collective */
    for (int i = 0; i < m->n_tensors && s == FSC_OK; i++) {
        s = gather_tensor(m, src, i, host, slice, tmp);
        if (s == FSC_OK && m->rank == 0 && wrote == FSC_OK && fn) wrote = fn(ctx, i, host, m->t[i].full.numel);
    }
    fsc_device_release(m->dev, tmp);
    free(host);
    free(slice);
    if (s != FSC_OK) return s;
    return agree(m, wrote);
}

typedef struct {
    fsc_tp_gpt *m;
    float *out;
} flat_ctx;

static fsc_status to_flat(void *ctx, int i, const float *full, size_t n) {
    flat_ctx *f = ctx;
    size_t off = 0;
    for (int j = 0; j < i; j++) off += f->m->t[j].full.numel;
    memcpy(f->out + off, full, n * sizeof(float));
    return FSC_OK;
}

fsc_status tp_gather_flat(fsc_tp_gpt *m, const float *src, float *host) {
    flat_ctx f = { m, host };
    return gather_all(m, src, host ? to_flat : NULL, &f);
}

fsc_status fsc_tp_gpt_full_params(fsc_tp_gpt *m, float *host) {
    flat_ctx f = { m, host };
    return gather_all(m, m->params, host ? to_flat : NULL, &f);
}

fsc_status fsc_tp_gpt_full_grads(fsc_tp_gpt *m, float *host) {
    flat_ctx f = { m, host };
    return gather_all(m, m->grads, host ? to_flat : NULL, &f);
}

static fsc_status to_writer(void *ctx, int i, const float *full, size_t n) {
    return fsc_st_writer_write(ctx, i, full, 0, n);
}

fsc_status fsc_tp_gpt_save(fsc_tp_gpt *m, const char *path) {
    if (!path) return fsc_error(FSC_ERR_INVALID, "tensor parallel gpt save: path is NULL");
    fsc_st_writer *w = NULL;
    fsc_status s = FSC_OK;
    if (m->rank == 0) { /* the same header as fsc_gpt_save */
        s = fsc_st_writer_open(path, &w);
        if (s == FSC_OK) s = fsc_st_writer_meta(w, "format", "pt");
        for (int i = 0; i < m->n_tensors && s == FSC_OK; i++) {
            const fsc_param_info *p = &m->t[i].full;
            s = fsc_st_writer_add(w, p->name, FSC_F32, p->ndim, p->shape);
        }
        if (s == FSC_OK) s = fsc_st_writer_begin_data(w);
    }
    s = agree(m, s);
    if (s == FSC_OK) s = gather_all(m, m->params, to_writer, w);
    if (s == FSC_OK && w) {
        s = fsc_st_writer_commit(w);
        if (s != FSC_OK) fsc_st_writer_abort(w); /* a failed commit leaves w to abort */
        w = NULL;
    }
    if (w) fsc_st_writer_abort(w);
    return agree(m, s);
}

fsc_status fsc_tp_gpt_load(fsc_tp_gpt *m, const char *path) {
    fsc_st_file *f = NULL;
    float *host = NULL;
    fsc_status s = path ? fsc_gpt_check_file(&m->cfg, path)
                        : fsc_error(FSC_ERR_INVALID, "tensor parallel gpt load: path is NULL");
    if (s == FSC_OK) s = fsc_st_open(path, &f);
    size_t most = 0;
    for (int i = 0; i < m->n_tensors; i++)
        if (m->t[i].local.numel > most) most = m->t[i].local.numel;
    if (s == FSC_OK && !(host = malloc(most * sizeof(float))))
        s = fsc_error(FSC_ERR_NOMEM, "tensor parallel gpt load: out of host memory");
    for (int i = 0; i < m->n_tensors && s == FSC_OK; i++) {
        const tp_tensor *t = &m->t[i];
        const fsc_st_entry *e = fsc_st_find(f, t->full.name);
        s = tp_read_local(m, f, e, i, 0, t->local.numel, host);
        if (s == FSC_OK) s = fsc_device_upload(m->dev, m->param[i], host, t->local.numel * sizeof(float));
    }
    free(host);
    if (f) fsc_st_close(f);
    return agree(m, s);
}

fsc_tp_opts fsc_tp_opts_default(void) { return (fsc_tp_opts){ .sequence_parallel = 0 }; }
