/* Loading training checkpoints into an engine of any world size and parallel setting (ckpt.h).
 *
 * World rank 0 reads and validates metadata.json, once, and broadcasts it: the head and the tensors to
 * every rank, then each tensor's pieces, of which a rank keeps those it holds (so no rank but 0 parses
 * JSON, and the others keep only their share of the piece table). Every rank checks it against its engine
 * (model configuration, optimizer kind, every tensor present with its shape, nothing extra), then for each
 * piece this rank holds (the strategy's holdings, replicas included) reads the element ranges from
 * whichever files hold them: each overlapping piece is streamed through one CK_CHUNK host buffer, the
 * overlaps are uploaded into the optimizer's segments, and the piece's crc32 is checked. Then the
 * optimizer's step count, the loss scaler and the run id, and the strategy's after_load (refresh derived
 * copies). Each phase ends in ck_agree. Weights only (fsc_ckpt_load_weights): the parameters' pieces, whatever
 * optimizer wrote the checkpoint or the engine uses; the writer's state tensors are skipped, the counters left.
 * Resume: rank 0 removes leftover temporary directories (skipping what it may not remove) and picks the
 * newest complete checkpoint. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ckpt_impl.h"

typedef struct {
    fsc_engine *e;
    const char *path;        /* the checkpoint directory */
    fsc_ckpt_meta *m;
    fsc_st_file **files;     /* opened when first needed */
    float *host;             /* CK_CHUNK floats */
    fsc_holding *h;          /* sorted by (tensor, first) */
    int nh;
    int disjoint;            /* no two holdings of a tensor overlap: a search finds the first that can */
    int *total;              /* ranks other than 0, while the metadata arrives: each tensor's piece count */
    int weights_only;        /* fsc_ckpt_load_weights: the parameters, not the optimizer's state nor its counters */
    int states;              /* the optimizer states loaded with the parameters: the engine's, or 0 (weights only) */
} loader;

/* The index from which holdings of tensor t may overlap elements from `first` on. */
static int first_holding(const loader *L, int t, uint64_t first) {
    int i = fsc_holdings_at(L->h, L->nh, t, L->disjoint ? first : 0);
    if (L->disjoint && i > 0 && L->h[i - 1].tensor == t) i--;
    return i;
}

static void shape_text(char *buf, size_t cap, int ndim, const int64_t *shape) {
    fsc_shape_str(buf, cap, ndim, shape);
}

/* The engine's model, optimizer and tensors against the metadata. */
static fsc_status check_compat(loader *L) {
    const fsc_engine *e = L->e;
    const fsc_ckpt_meta *m = L->m;
    /* the model's configuration: the model judges (config_check), or the texts must be equal */
    const char *rec = m->model_config ? m->model_config : "{}";
    char what[4200]; /* the recorded tensors against the recorded configuration: the metadata's integrity */
    snprintf(what, sizeof what, "%s/%s", L->path, CK_META_NAME);
    FSC_TRY(ck_check_model_tensors(e, m, what));
    if (ENG(e).m->ops->config_check) {
        fsc_status s = ENG(e).m->ops->config_check(ENG(e).m->ctx, rec);
        if (s != FSC_OK) return fsc_error_prefix(s, "%s", L->path);
    } else {
        char *own = NULL;
        FSC_TRY(ck_model_config(e, &own));
        int same = !strcmp(own, rec);
        if (!same)
            fsc_error(FSC_ERR_INVALID, "%s: written for a model of configuration %.300s; this engine's model has "
                      "%.300s", L->path, rec, own);
        free(own);
        if (!same) return FSC_ERR_INVALID;
    }
    const int nstates = L->states, T = ENG(e).m->n_tensors, weights_only = L->weights_only;
    if (!weights_only && m->optim.kind != ENG(e).oc->kind)
        return fsc_error(FSC_ERR_INVALID, "%s: written with optimizer %s; this engine uses %s", L->path,
                         m->optim.kind == FSC_OPT_ADAMW ? "adamw" : "sgd", ENG(e).oc->kind == FSC_OPT_ADAMW ? "adamw" : "sgd");
    if (!weights_only && m->optim.kind == FSC_OPT_SGD && (m->optim.momentum != 0.0f) != (nstates > 0)) /* a buffer one side lacks */
        return fsc_error(FSC_ERR_INVALID, "%s: written with sgd momentum %g (%s momentum buffers); this engine uses "
                         "momentum %g (%s)", L->path, (double)m->optim.momentum, m->optim.momentum != 0.0f ? "with" : "no",
                         (double)ENG(e).oc->momentum, nstates > 0 ? "with them" : "none");
    char name[FSC_ST_MAX_NAME], s1[96], s2[96];
    for (int st = 0; st <= nstates; st++)
        for (int t = 0; t < T; t++) {
            const fsc_param_info *pi = ck_info(e, t);
            ck_global_name(name, sizeof name, ENG(e).oc->kind, st, pi->name);
            const fsc_ckpt_tensor *ct = fsc_ckpt_meta_find(m, name);
            if (!ct)
                return fsc_error(FSC_ERR_FORMAT, "%s: has no tensor %s (the checkpoint's optimizer: %s, momentum %g)",
                                 L->path, name, m->optim.kind == FSC_OPT_ADAMW ? "adamw" : "sgd", (double)m->optim.momentum);
            int same = ct->ndim == pi->ndim;
            for (int d = 0; same && d < pi->ndim; d++) same = ct->shape[d] == pi->shape[d];
            if (!same) {
                shape_text(s1, sizeof s1, ct->ndim, ct->shape);
                shape_text(s2, sizeof s2, pi->ndim, pi->shape);
                return fsc_error(FSC_ERR_FORMAT, "%s: tensor %s has shape %s in the checkpoint but %s in the model",
                                 L->path, name, s1, s2);
            }
        }
    if (m->ntensors != (nstates + 1) * T) {
        for (int i = 0; i < m->ntensors; i++) {
            const char *n = m->tensors[i].name;
            int known = weights_only && !strncmp(n, "optim.", 6); /* the writer's optimizer state, not loaded */
            for (int st = 0; st <= nstates && !known; st++)
                for (int t = 0; t < T && !known; t++) {
                    ck_global_name(name, sizeof name, ENG(e).oc->kind, st, ck_info(e, t)->name);
                    known = !strcmp(name, n);
                }
            if (!known)
                return fsc_error(FSC_ERR_FORMAT, "%s: holds tensor %s, which this engine has no place for (its "
                                 "optimizer keeps %d state%s per parameter)", L->path, n, nstates, nstates == 1 ? "" : "s");
        }
    }
    return FSC_OK;
}

static fsc_status open_file(loader *L, int i, const char *tensor, fsc_st_file **out, char *fname, size_t cap) {
    FSC_TRY(ck_join(fname, cap, L->path, L->m->files[i]));
    if (!L->files[i]) {
        fsc_status s = fsc_st_open(fname, &L->files[i]);
        if (s != FSC_OK) {
            char msg[700];
            snprintf(msg, sizeof msg, "%s", fsc_last_error());
            return fsc_error(s, "loading tensor %s: %s", tensor, msg);
        }
    }
    *out = L->files[i];
    return FSC_OK;
}

typedef struct {
    loader *L;
    int state, t;
} sink_ctx;

/* Upload the part of elements [first, first + n) that each of this rank's holdings of tensor t covers. */
static fsc_status upload(void *ctx, uint64_t first, const float *host, size_t n) {
    sink_ctx *c = ctx;
    loader *L = c->L;
    for (int i = first_holding(L, c->t, first); i < L->nh && L->h[i].tensor == c->t; i++) {
        const fsc_holding *h = &L->h[i];
        if (h->first >= first + n) break;
        uint64_t a = first > h->first ? first : h->first;
        uint64_t b = first + n < h->first + h->n ? first + n : h->first + h->n;
        if (a >= b) continue;
        float *dst = fsc_seg_ptr(L->e, c->state, h->seg) + h->seg_off + (a - h->first);
        FSC_TRY(fsc_device_upload(fsc_offload_seg_dev(L->e, c->state), dst, host + (a - first), (size_t)(b - a) * sizeof(float)));
    }
    return FSC_OK;
}

static int needed(const loader *L, int t, const fsc_ckpt_piece *p) {
    for (int i = first_holding(L, t, p->first); i < L->nh && L->h[i].tensor == t; i++) {
        const fsc_holding *h = &L->h[i];
        if (h->first >= p->first + p->n) break;
        if (p->first < h->first + h->n) return 1;
    }
    return 0;
}

/* The engine's tensor that checkpoint tensor `name` belongs to (any state), or -1. */
static int engine_tensor(const loader *L, const char *name) {
    char g[FSC_ST_MAX_NAME];
    for (int st = 0; st <= L->states; st++)
        for (int t = 0; t < ENG(L->e).m->n_tensors; t++) {
            ck_global_name(g, sizeof g, ENG(L->e).oc->kind, st, ck_info(L->e, t)->name);
            if (!strcmp(g, name)) return t;
        }
    return -1;
}

/* Collective: rank 0's metadata without the pieces, its model configuration text included, to every
 * other rank (each tensor's piece count in L->total, npieces 0 until share_pieces). */
static fsc_status share_head(loader *L) {
    fsc_engine *e = L->e;
    const int root = ENG(e).r->rank == 0;
    fsc_ckpt_meta head;
    memset(&head, 0, sizeof head);
    if (root) head = *L->m;
    FSC_TRY(ck_agree(e, ck_bcast_host(e, &head, sizeof head)));
    head.model_config = NULL; /* rank 0's pointer: its text follows */
    fsc_status s = FSC_OK;
    if (!root) {
        L->m = calloc(1, sizeof *L->m);
        if (L->m) {
            *L->m = head;
            L->m->files = calloc((size_t)head.nfiles + 1, sizeof *L->m->files);
            L->m->tensors = calloc((size_t)head.ntensors + 1, sizeof *L->m->tensors);
            L->total = calloc((size_t)head.ntensors + 1, sizeof *L->total);
            L->m->ntensors = 0; /* until the tensors are here: fsc_ckpt_meta_free frees what is */
        }
        if (!L->m || !L->m->files || !L->m->tensors || !L->total)
            s = fsc_error(FSC_ERR_NOMEM, "%s: out of host memory for the metadata of %d tensors", L->path, head.ntensors);
    }
    FSC_TRY(ck_agree(e, s));
    /* the model's configuration text (checked against every rank's model) */
    uint64_t clen = root && L->m->model_config ? (uint64_t)strlen(L->m->model_config) + 1 : 0;
    FSC_TRY(ck_agree(e, ck_bcast_host(e, &clen, sizeof clen)));
    if (!root && clen && !(L->m->model_config = malloc((size_t)clen)))
        s = fsc_error(FSC_ERR_NOMEM, "%s: out of host memory for the model configuration", L->path);
    FSC_TRY(ck_agree(e, s));
    if (clen) FSC_TRY(ck_agree(e, ck_bcast_host(e, L->m->model_config, (size_t)clen)));
    if (!root && clen) L->m->model_config[clen - 1] = 0;
    s = ck_bcast_host(e, L->m->files, (size_t)head.nfiles * sizeof *L->m->files);
    if (s == FSC_OK) s = ck_bcast_host(e, L->m->tensors, (size_t)head.ntensors * sizeof *L->m->tensors);
    if (!root) {
        for (int i = 0; i < head.ntensors; i++) { /* rank 0's pointers: not ours */
            L->total[i] = L->m->tensors[i].npieces;
            L->m->tensors[i].pieces = NULL;
            L->m->tensors[i].npieces = 0;
        }
        L->m->ntensors = head.ntensors;
    }
    return ck_agree(e, s);
}

/* Collective: each tensor's pieces from rank 0, in bounded chunks; a rank other than 0 keeps the pieces
 * it holds part of (load_tensors reads no other). */
static fsc_status share_pieces(loader *L) {
    fsc_engine *e = L->e;
    const int root = ENG(e).r->rank == 0;
    const int per = (int)(CK_CHUNK * sizeof(float) / sizeof(fsc_ckpt_piece));
    fsc_ckpt_piece *buf = root ? NULL : malloc((size_t)per * sizeof *buf);
    FSC_TRY(ck_agree(e, root || buf ? FSC_OK : fsc_error(FSC_ERR_NOMEM, "%s: out of host memory", L->path)));
    fsc_status s = FSC_OK, mine = FSC_OK; /* a rank that ran out of memory still takes part to the end */
    for (int i = 0; i < L->m->ntensors && s == FSC_OK; i++) {
        fsc_ckpt_tensor *t = &L->m->tensors[i];
        if (L->weights_only && !strncmp(t->name, "optim.", 6)) continue; /* on every rank: no one reads them */
        const int total = root ? t->npieces : L->total[i], et = root ? -1 : engine_tensor(L, t->name);
        int cap = 0;
        for (int k0 = 0; k0 < total && s == FSC_OK; k0 += per) {
            const int n = total - k0 < per ? total - k0 : per;
            s = ck_bcast_host(e, root ? t->pieces + k0 : buf, (size_t)n * sizeof *buf);
            for (int j = 0; !root && s == FSC_OK && mine == FSC_OK && j < n; j++) {
                if (et < 0 || !needed(L, et, &buf[j])) continue;
                if (t->npieces == cap) {
                    fsc_ckpt_piece *g = realloc(t->pieces, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *g);
                    if (!g) {
                        mine = fsc_error(FSC_ERR_NOMEM, "%s: out of host memory for the pieces of %s", L->path, t->name);
                        break;
                    }
                    t->pieces = g;
                }
                t->pieces[t->npieces++] = buf[j];
            }
        }
    }
    free(buf);
    return ck_agree(e, s != FSC_OK ? s : mine);
}

static fsc_status load_tensors(loader *L) {
    fsc_engine *e = L->e;
    char name[FSC_ST_MAX_NAME], fname[4096];
    for (int st = 0; st <= L->states; st++)
        for (int t = 0; t < ENG(e).m->n_tensors; t++) {
            ck_global_name(name, sizeof name, ENG(e).oc->kind, st, ck_info(e, t)->name);
            const fsc_ckpt_tensor *ct = fsc_ckpt_meta_find(L->m, name);
            sink_ctx c = { L, st, t };
            for (int k = 0; ct && k < ct->npieces; k++) {
                const fsc_ckpt_piece *p = &ct->pieces[k];
                if (!needed(L, t, p)) continue;
                fsc_st_file *f = NULL;
                FSC_TRY(open_file(L, p->file, ct->name, &f, fname, sizeof fname));
                FSC_TRY(ck_read_piece(f, fname, ct, p, L->host, upload, &c));
            }
        }
    return FSC_OK;
}

static void restore_counters(loader *L) {
    fsc_engine *e = L->e;
    fsc_optim_set_steps(ENG(e).opt, L->m->optim_steps);
    (void)fsc_engine_set_lr(e, L->m->optim.lr); /* the rate of its last step (schedule.h); checked when read */
    if (L->m->scaler_enabled) fsc_engine_restore_scaler(e, &L->m->scaler);
    fsc_engine_restore_skips(e, L->m->skipped_in_row);
}

/* Every file's entries are the pieces the metadata places in it, as fsc_ckpt_verify sees them (rank 0, which has
 * every piece: the other ranks keep theirs only); the headers, not the data, which each holding's read checks, as
 * it says a file that does not open */
static fsc_status check_entries(const char *path, const fsc_ckpt_meta *m) {
    char file[4096];
    fsc_status s = FSC_OK;
    for (int i = 0; i < m->nfiles && s == FSC_OK; i++) {
        fsc_st_file *f = NULL;
        s = ck_join(file, sizeof file, path, m->files[i]);
        if (s == FSC_OK && fsc_st_open(file, &f) != FSC_OK) continue; /* said by the read that needs it, naming the tensor */
        if (s == FSC_OK) s = fsc_ckpt_check_file(m, i, f, 0);
        fsc_st_close(f);
    }
    return s;
}

static fsc_status load(fsc_engine *e, const char *path, int64_t *step, int weights_only) {
    loader L = { .e = e, .path = path, .weights_only = weights_only,
                 .states = weights_only ? 0 : fsc_optim_num_states(ENG(e).opt) };
    const int shared = fsc_comm_size(ENG(e).r->comm) > 1;
    fsc_status s = ENG(e).r->rank == 0 ? fsc_ckpt_meta_read(path, &L.m) : FSC_OK; /* read and parsed once */
    if (s == FSC_OK && ENG(e).r->rank == 0) s = check_entries(path, L.m);
    s = ck_agree(e, s);
    if (s == FSC_OK && shared) s = share_head(&L);
    if (s == FSC_OK) s = check_compat(&L);
    if (s == FSC_OK) s = fsc_holdings_sorted(e, &L.h, &L.nh);
    L.disjoint = 1;
    for (int i = 1; s == FSC_OK && i < L.nh; i++)
        if (L.h[i].tensor == L.h[i - 1].tensor && L.h[i].first < L.h[i - 1].first + L.h[i - 1].n) L.disjoint = 0;
    if (s == FSC_OK) {
        L.files = calloc((size_t)L.m->nfiles + 1, sizeof *L.files);
        L.host = malloc(CK_CHUNK * sizeof(float));
        if (!L.files || !L.host) s = fsc_error(FSC_ERR_NOMEM, "%s: out of host memory", path);
    }
    s = ck_agree(e, s);
    if (s == FSC_OK && shared) s = share_pieces(&L);
    if (s == FSC_OK) s = ck_agree(e, load_tensors(&L));
    if (s == FSC_OK) {
        if (!weights_only) restore_counters(&L);
        if (!weights_only) fsc_engine_continue_run(e, L.m->run_id, L.m->seed); /* its saves continue that run */
        if (step) *step = L.m->step;
        s = ck_agree(e, fsc_engine_after_load(e));
    }
    for (int i = 0; L.files && i < L.m->nfiles; i++) fsc_st_close(L.files[i]);
    free(L.files);
    free(L.host);
    free(L.h);
    free(L.total);
    fsc_ckpt_meta_free(L.m);
    return s;
}

fsc_status fsc_ckpt_load(fsc_engine *e, const char *path, int64_t *step) {
    FSC_CHECK_ARG(e);
    FSC_CHECK_ARG(path);
    return load(e, path, step, 0);
}

fsc_status fsc_ckpt_load_weights(fsc_engine *e, const char *path, int64_t *step) {
    FSC_CHECK_ARG(e);
    FSC_CHECK_ARG(path);
    return load(e, path, step, 1);
}

fsc_status fsc_ckpt_resume(fsc_engine *e, const char *dir, int64_t *step) {
    FSC_CHECK_ARG(e);
    FSC_CHECK_ARG(dir);
    char path[4096] = "", base[128] = "";
    int64_t found = -1;
    fsc_status s = FSC_OK;
    if (ENG(e).r->rank == 0) {
        s = fsc_ckpt_clean(dir, NULL, NULL, 0); /* what it must leave is skipped: fsc_ckpt_latest ignores it */
        if (s == FSC_OK) s = fsc_ckpt_latest(dir, path, sizeof path, &found);
        if (s == FSC_OK && found >= 0) {
            const char *slash = strrchr(path, '/');
            snprintf(base, sizeof base, "%.127s", slash ? slash + 1 : path);
        }
    }
    s = ck_agree(e, s);
    if (s == FSC_OK) s = ck_agree(e, ck_bcast_host(e, base, sizeof base));
    if (s != FSC_OK) return s;
    base[sizeof base - 1] = 0;
    if (!base[0])
        return fsc_error(FSC_ERR_IO, "%s: no complete checkpoint to resume from (a step-NNNNNNNN directory with "
                         "metadata.json)", dir);
    FSC_TRY(ck_join(path, sizeof path, dir, base));
    return fsc_ckpt_load(e, path, step);
}
