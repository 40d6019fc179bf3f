/* Saving training checkpoints (ckpt.h).
 *
 * Both formats: rank 0 makes DIR/step-N.tmp-XXXXXX and broadcasts its name; the data files are written
 * and fsynced; the ranks' piece records (tensor, element range, crc32 per state) are gathered and checked
 * to tile every tensor exactly once; rank 0 writes metadata.json (fsynced), fsyncs the directory, renames
 * it to DIR/step-N and fsyncs DIR. Every phase ends in ck_agree, so all ranks return the same status.
 *   sharded: each rank writes the pieces its holdings mark `write`, straight from the optimizer's
 *            segments through one CK_CHUNK host buffer (no gather, no extra device memory);
 *   full:    rank 0 writes model.safetensors (the single-rank weights layout, the model's configuration in its
 *            metadata as a weights file records it) and optim.safetensors, receiving the other ranks' pieces one
 *            CK_CHUNK at a time.
 * A failed save removes its temporary directory; an injected crash (tests) leaves it, as a dead process
 * would. Before anything is written rank 0 claims DIR for the engine's run: its newest checkpoint must be
 * of the same run (or there is none); start_over removes every other run's checkpoint instead. A fresh
 * engine gets a new random run id at its first save.
 * Not here: reading (ckpt_load.c), the metadata text (ckpt_meta.c). */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>
#include <cjson/cJSON.h>
#include "ckpt_impl.h"

#define TMP_NAME 96

static const int ck_root[1] = { 0 }; /* the one rank a full checkpoint's tensors stream to */

static const char *errstr(int err, char *buf, size_t cap) { return strerror_r(err, buf, cap); }

static fsc_status crash(fsc_engine *e, const char *where) {
    return fsc_error(FSC_ERR_IO, "checkpoint: injected crash of rank %d %s (test)", ENG(e).r->rank, where);
}

static int crashes(const fsc_engine *e, const fsc_ckpt_save_opts *o, fsc_ckpt_crash at) {
    return o->crash_at == at && o->crash_rank == ENG(e).r->rank;
}

/* This rank's holdings and, sorted by (tensor, first), the indices of those it writes. */
typedef struct {
    fsc_holding *h;
    int nh;
    int *w;
    int nw;
} held;

static int cmp_w(const void *a, const void *b, void *ctx) {
    const fsc_holding *h = ctx, *x = &h[*(const int *)a], *y = &h[*(const int *)b];
    if (x->tensor != y->tensor) return x->tensor < y->tensor ? -1 : 1;
    return x->first < y->first ? -1 : x->first > y->first;
}

static fsc_status held_make(fsc_engine *e, held *hd) {
    memset(hd, 0, sizeof *hd);
    FSC_TRY(fsc_holdings_sorted(e, &hd->h, &hd->nh));
    hd->w = malloc(((size_t)hd->nh + 1) * sizeof(int));
    if (!hd->w) return fsc_error(FSC_ERR_NOMEM, "checkpoint: out of host memory");
    for (int i = 0; i < hd->nh; i++)
        if (hd->h[i].write && hd->h[i].n > 0) hd->w[hd->nw++] = i;
    qsort_r(hd->w, (size_t)hd->nw, sizeof(int), cmp_w, hd->h);
    return FSC_OK;
}

static void held_free(held *hd) {
    free(hd->h);
    free(hd->w);
}

/* ---- sharded: this rank's file ---- */

static fsc_status write_shard(fsc_engine *e, const char *tmp, const held *hd, int nstates, fsc_piece *recs,
                              const fsc_ckpt_save_opts *o) {
    char path[4096], fname[64], name[FSC_ST_MAX_NAME];
    snprintf(fname, sizeof fname, "rank-%05d-of-%05d.safetensors", ENG(e).r->rank, ENG(e).r->world);
    FSC_TRY(ck_join(path, sizeof path, tmp, fname));
    fsc_st_writer *w = NULL;
    float *host = malloc(CK_CHUNK * sizeof(float));
    fsc_status s = host ? fsc_st_writer_open(path, &w) : fsc_error(FSC_ERR_NOMEM, "checkpoint: out of host memory");
    for (int st = 0; st <= nstates && s == FSC_OK; st++)
        for (int k = 0; k < hd->nw && s == FSC_OK; k++) {
            const fsc_holding *h = &hd->h[hd->w[k]];
            char g[FSC_ST_MAX_NAME];
            ck_global_name(g, sizeof g, ENG(e).oc->kind, st, ck_info(e, h->tensor)->name);
            snprintf(name, sizeof name, "%.120s@%zu", g, h->first);
            int64_t shape = (int64_t)h->n;
            s = fsc_st_writer_add(w, name, FSC_F32, 1, &shape);
        }
    if (s == FSC_OK) s = fsc_st_writer_meta(w, "format", "fsc-checkpoint-shard");
    if (s == FSC_OK) s = fsc_st_writer_begin_data(w);
    int entry = 0;
    for (int st = 0; st <= nstates && s == FSC_OK; st++)
        for (int k = 0; k < hd->nw && s == FSC_OK; k++, entry++) {
            const fsc_holding *h = &hd->h[hd->w[k]];
            const float *src = fsc_seg_ptr(e, st, h->seg) + h->seg_off;
            uLong crc = crc32(0L, Z_NULL, 0);
            for (size_t off = 0; off < h->n && s == FSC_OK; off += CK_CHUNK) {
                size_t n = h->n - off < CK_CHUNK ? h->n - off : CK_CHUNK;
                s = fsc_device_download(fsc_offload_seg_dev(e, st), host, src + off, n * sizeof(float));
                if (s == FSC_OK) crc = crc32(crc, (const Bytef *)host, (uInt)(n * sizeof(float)));
                if (s == FSC_OK) s = fsc_st_writer_write(w, entry, host, off, n);
            }
            recs[k].crc[st] = (uint32_t)crc;
            if (s == FSC_OK && entry == 0 && crashes(e, o, FSC_CKPT_CRASH_MID_SHARD)) s = crash(e, "mid-shard");
        }
    if (s == FSC_OK) {
        s = fsc_st_writer_commit(w);
        w = NULL;
    }
    fsc_st_writer_abort(w);
    free(host);
    return s;
}

/* ---- the metadata ---- */

static fsc_status meta_head(fsc_engine *e, fsc_ckpt_meta *m, int64_t step, fsc_ckpt_format fmt) {
    m->format = fmt;
    memcpy(m->run_id, ENG(e).run, sizeof m->run_id);
    m->step = step;
    m->optim_steps = fsc_optim_steps(ENG(e).opt);
    /* a step without an optimizer step each: no more than the caller's step leaves (its data position) */
    m->skipped_in_row = ENG(e).skips_in_row < step - m->optim_steps ? ENG(e).skips_in_row : step - m->optim_steps;
    m->seed = ENG(e).seed;
    FSC_TRY(ck_model_config(e, &m->model_config));
    m->optim = *ENG(e).oc;
    if (m->optim.kind == FSC_OPT_ADAMW && m->optim.beta1 == 0.0f && m->optim.beta2 == 0.0f && m->optim.eps == 0.0f) {
        m->optim.beta1 = 0.9f; /* the defaults fsc_optim_create fills in for an all-zero AdamW */
        m->optim.beta2 = 0.999f;
        m->optim.eps = 1e-8f;
    }
    m->kind = ENG(e).po->kind;
    m->shard = ENG(e).po->shard;
    m->world = ENG(e).r->world;
    m->tp = ENG(e).po->tp > 1 ? ENG(e).po->tp : 1;
    m->ep = ENG(e).po->ep > 1 ? ENG(e).po->ep : 1;
    m->pp = ENG(e).po->pp;
    m->hybrid_group = ENG(e).po->hybrid_group;
    m->accum = ENG(e).po->accum;
    m->param_dtype = ENG(e).po->param_dtype;
    m->reduce_dtype = ENG(e).po->reduce_dtype;
    m->clip = ENG(e).po->clip;
    m->scaler_enabled = ENG(e).use_scaler;
    m->scaler = *ENG(e).scaler;
    return FSC_OK;
}

/* Rank 0: the metadata of the gathered records (sorted by tensor, first). Sharded: file of rank r is
 * rank-r-of-N; full: model.safetensors and optim.safetensors with one piece per tensor (crc from fcrc). */
static fsc_status meta_build(fsc_engine *e, fsc_ckpt_meta *m, const fsc_piece *recs, int n, int nstates,
                             const uint32_t *fcrc) {
    const int T = ENG(e).m->n_tensors, N = ENG(e).r->world;
    int *fidx = malloc(((size_t)N + 1) * sizeof(int));
    m->files = calloc((size_t)(m->format == FSC_CKPT_FULL ? 2 : N) + 1, sizeof *m->files);
    m->tensors = calloc((size_t)T * (size_t)(nstates + 1), sizeof *m->tensors);
    if (!fidx || !m->files || !m->tensors) {
        free(fidx);
        return fsc_error(FSC_ERR_NOMEM, "checkpoint: out of host memory for the metadata");
    }
    if (m->format == FSC_CKPT_FULL) {
        snprintf(m->files[m->nfiles++], FSC_CKPT_MAX_FILE, "model.safetensors");
        if (nstates > 0) snprintf(m->files[m->nfiles++], FSC_CKPT_MAX_FILE, "optim.safetensors");
    } else {
        for (int r = 0; r < N; r++) fidx[r] = -1;
        for (int k = 0; k < n; k++) fidx[recs[k].rank] = 0;
        for (int r = 0; r < N; r++)
            if (fidx[r] == 0) {
                fidx[r] = m->nfiles;
                snprintf(m->files[m->nfiles++], FSC_CKPT_MAX_FILE, "rank-%05d-of-%05d.safetensors", r, N);
            }
    }
    fsc_status s = FSC_OK;
    for (int st = 0; st <= nstates && s == FSC_OK; st++) {
        for (int t = 0, k1 = 0; t < T && s == FSC_OK; t++) {
            const int k0 = k1; /* recs[k0, k1): the pieces of tensor t */
            while (k1 < n && recs[k1].t == t) k1++;
            const fsc_param_info *pi = ck_info(e, t);
            fsc_ckpt_tensor *ct = &m->tensors[m->ntensors++];
            ck_global_name(ct->name, sizeof ct->name, ENG(e).oc->kind, st, pi->name);
            ct->dtype = FSC_F32;
            ct->ndim = pi->ndim;
            for (int d = 0; d < pi->ndim; d++) ct->shape[d] = pi->shape[d];
            ct->numel = pi->numel;
            ct->pieces = calloc((size_t)(k1 - k0) + 1, sizeof *ct->pieces);
            if (!ct->pieces) {
                s = fsc_error(FSC_ERR_NOMEM, "checkpoint: out of host memory for the metadata");
                break;
            }
            if (m->format == FSC_CKPT_FULL) {
                ct->pieces[ct->npieces++] = (fsc_ckpt_piece){ .file = st == 0 ? 0 : 1, .first = 0, .n = pi->numel,
                                                              .crc32 = fcrc[st * T + t] };
                snprintf(ct->pieces[0].entry, sizeof ct->pieces[0].entry, "%s", ct->name);
                continue;
            }
            for (int k = k0; k < k1; k++) {
                fsc_ckpt_piece *p = &ct->pieces[ct->npieces++];
                p->file = fidx[recs[k].rank];
                p->first = recs[k].first;
                p->n = recs[k].n;
                p->crc32 = recs[k].crc[st];
                snprintf(p->entry, sizeof p->entry, "%.120s@%llu", ct->name, (unsigned long long)recs[k].first);
            }
        }
    }
    free(fidx);
    return s;
}

/* Rank 0: metadata.json into tmp, then the rename onto final (an existing final is moved aside first and
 * removed after), with the directory syncs that make it durable. */
static fsc_status finish(fsc_engine *e, const fsc_ckpt_meta *m, const char *dir, const char *tmp, const char *final,
                         const fsc_ckpt_save_opts *o) {
    char eb[128], path[4096];
    char *json = ck_meta_json(m);
    if (!json) return fsc_error(FSC_ERR_NOMEM, "checkpoint: out of memory for metadata.json");
    fsc_ckpt_meta *back = NULL; /* what a reader will see must validate */
    fsc_status s = fsc_ckpt_meta_parse(json, strlen(json), "checkpoint metadata (as written)", &back);
    if (s == FSC_OK) s = ck_check_model_tensors(e, back, "checkpoint metadata (as written)");
    fsc_ckpt_meta_free(back);
    if (s == FSC_OK && crashes(e, o, FSC_CKPT_CRASH_BEFORE_META)) s = crash(e, "before metadata.json");
    if (s == FSC_OK) s = ck_join(path, sizeof path, tmp, CK_META_NAME);
    if (s == FSC_OK) s = ck_write_synced(path, json, strlen(json));
    cJSON_free(json); /* cJSON's allocator: a program may have set its hooks */
    if (s == FSC_OK) s = ck_fsync_dir(tmp);
    if (s == FSC_OK && crashes(e, o, FSC_CKPT_CRASH_BEFORE_RENAME)) s = crash(e, "before the rename");
    if (s != FSC_OK) return s;
    char old[4096] = "";
    if (rename(tmp, final) != 0) {
        if (errno != ENOTEMPTY && errno != EEXIST)
            return fsc_error(FSC_ERR_IO, "%s: cannot rename %s onto it: %s", final, tmp, errstr(errno, eb, sizeof eb));
        /* the same step again: move the old one to a temporary name (resume removes it if we die) */
        int n = snprintf(old, sizeof old, "%s.tmp-replaced-XXXXXX", final);
        if (n < 0 || (size_t)n >= sizeof old || !mkdtemp(old))
            return fsc_error(FSC_ERR_IO, "%s: cannot make a directory to move the old checkpoint aside", final);
        if (rename(final, old) != 0 || rename(tmp, final) != 0)
            return fsc_error(FSC_ERR_IO, "%s: cannot replace the existing checkpoint: %s", final,
                             errstr(errno, eb, sizeof eb));
    }
    s = ck_fsync_dir(dir);
    if (s == FSC_OK && old[0]) ck_remove_dir(old); /* best effort: the new one is in place; resume reports it */
    return s;
}

/* ---- full: rank 0 writes every tensor, streamed from its owners ---- */

typedef struct {
    fsc_st_writer *w;
    int entry;
    uLong crc;
} full_sink;

static fsc_status to_writer(void *ctx, uint64_t first, const float *host, size_t n) {
    full_sink *fs = ctx;
    fs->crc = crc32(fs->crc, (const Bytef *)host, (uInt)(n * sizeof(float)));
    return fsc_st_writer_write(fs->w, fs->entry, host, first, n);
}

/* Collective; on rank 0 fcrc[st * T + t] receives each tensor's crc32. */
static fsc_status write_full(fsc_engine *e, const char *tmp, const held *hd, const fsc_piece *recs, int n, int nstates,
                             uint32_t *fcrc, const fsc_ckpt_save_opts *o) {
    const int T = ENG(e).m->n_tensors, root = ENG(e).r->rank == 0;
    fsc_st_writer *w[2] = { NULL, NULL };
    float *host = NULL, *dbuf = NULL;
    char path[4096], name[FSC_ST_MAX_NAME];
    fsc_status s = FSC_OK;
    char *cfg = NULL; /* model.safetensors records the model, as a weights file does: the sampler reads it alone */
    if (root) {
        host = malloc(CK_CHUNK * sizeof(float));
        if (!host) s = fsc_error(FSC_ERR_NOMEM, "checkpoint: out of host memory");
        if (s == FSC_OK) s = fsc_device_alloc(ENG(e).dev, FSC_TAG_COMM, CK_CHUNK * sizeof(float), (void **)&dbuf);
        if (s == FSC_OK) s = ck_model_config(e, &cfg);
        for (int f = 0; f < (nstates > 0 ? 2 : 1) && s == FSC_OK; f++) {
            s = ck_join(path, sizeof path, tmp, f == 0 ? "model.safetensors" : "optim.safetensors");
            if (s == FSC_OK) s = fsc_st_writer_open(path, &w[f]);
            for (int st = f == 0 ? 0 : 1; st <= (f == 0 ? 0 : nstates) && s == FSC_OK; st++)
                for (int t = 0; t < T && s == FSC_OK; t++) {
                    const fsc_param_info *pi = ck_info(e, t);
                    ck_global_name(name, sizeof name, ENG(e).oc->kind, st, pi->name);
                    s = fsc_st_writer_add(w[f], name, FSC_F32, pi->ndim, pi->shape);
                }
            if (s == FSC_OK) s = fsc_st_writer_meta(w[f], "format", "pt");
            if (s == FSC_OK && f == 0) s = fsc_st_writer_meta(w[f], FSC_ST_META_MODEL, cfg);
            if (s == FSC_OK) s = fsc_st_writer_begin_data(w[f]);
        }
        free(cfg);
    }
    if (s == FSC_OK && !dbuf && fsc_stream_owner_offloaded(e)) /* its pieces go out through a device chunk */
        s = fsc_device_alloc(ENG(e).dev, FSC_TAG_COMM, CK_CHUNK * sizeof(float), (void **)&dbuf);
    s = ck_agree(e, s); /* the owners start sending only once rank 0 can receive */
    for (int st = 0; st <= nstates && s == FSC_OK; st++) {
        for (int t = 0; t < T && s == FSC_OK; t++) {
            full_sink fs = { w[st == 0 ? 0 : 1], st == 0 ? t : (st - 1) * T + t, crc32(0L, Z_NULL, 0) };
            /* agree per tensor: a rank 0 that failed must not leave the owners' next sends queued */
            s = ck_agree(e, fsc_stream_tensor(e, recs, n, hd->h, hd->nh, st, t, ck_root, 1, to_writer, &fs, host, dbuf));
            if (root) fcrc[st * T + t] = (uint32_t)fs.crc;
        }
        if (st == 0 && s == FSC_OK && root) {
            s = fsc_st_writer_commit(w[0]);
            w[0] = NULL;
            if (s == FSC_OK && crashes(e, o, FSC_CKPT_CRASH_MID_SHARD)) s = crash(e, "after model.safetensors");
        }
        s = ck_agree(e, s);
    }
    if (s == FSC_OK && root && w[1]) {
        s = fsc_st_writer_commit(w[1]);
        w[1] = NULL;
    }
    fsc_st_writer_abort(w[0]);
    fsc_st_writer_abort(w[1]);
    fsc_device_release(ENG(e).dev, dbuf);
    free(host);
    return s;
}

/* The records of the pieces this rank writes (crc filled by write_shard). */
static fsc_status make_recs(fsc_engine *e, const held *hd, fsc_piece **out) {
    fsc_piece *r = calloc((size_t)hd->nw + 1, sizeof *r);
    if (!r) return fsc_error(FSC_ERR_NOMEM, "checkpoint: out of host memory");
    for (int k = 0; k < hd->nw; k++) {
        const fsc_holding *h = &hd->h[hd->w[k]];
        r[k] = (fsc_piece){ .t = h->tensor, .rank = ENG(e).r->rank, .first = h->first, .n = h->n };
    }
    *out = r;
    return FSC_OK;
}

/* Everything between the temporary directory and the agreement on the rename. */
static fsc_status save_in(fsc_engine *e, const char *dir, const char *tmp, const char *final, int64_t step,
                          const fsc_ckpt_save_opts *o) {
    const int nstates = fsc_optim_num_states(ENG(e).opt), T = ENG(e).m->n_tensors;
    held hd;
    fsc_piece *mine = NULL, *all = NULL;
    int nall = 0;
    uint32_t *fcrc = NULL;
    fsc_ckpt_meta *m = NULL;
    fsc_status s = held_make(e, &hd);
    if (s == FSC_OK) s = make_recs(e, &hd, &mine);
    if (s == FSC_OK && o->format == FSC_CKPT_SHARDED && hd.nw > 0) s = write_shard(e, tmp, &hd, nstates, mine, o);
    s = ck_agree(e, s);
    if (s == FSC_OK) s = fsc_pieces_gather(e, mine, hd.nw, &all, &nall);
    if (s == FSC_OK) s = fsc_pieces_check(e, all, nall); /* every rank, same verdict */
    if (s == FSC_OK && o->format == FSC_CKPT_FULL) {
        fcrc = calloc((size_t)T * (size_t)(nstates + 1), sizeof *fcrc);
        s = ck_agree(e, fcrc ? FSC_OK : fsc_error(FSC_ERR_NOMEM, "checkpoint: out of host memory"));
        if (s == FSC_OK) s = write_full(e, tmp, &hd, all, nall, nstates, fcrc, o);
    }
    if (s == FSC_OK && ENG(e).r->rank == 0) {
        m = calloc(1, sizeof *m);
        if (!m) s = fsc_error(FSC_ERR_NOMEM, "checkpoint: out of host memory");
        if (s == FSC_OK) {
            s = meta_head(e, m, step, o->format);
            if (s == FSC_OK) s = meta_build(e, m, all, nall, nstates, fcrc);
        }
        if (s == FSC_OK) s = finish(e, m, dir, tmp, final, o);
    }
    s = ck_agree(e, s);
    fsc_ckpt_meta_free(m);
    free(fcrc);
    free(all);
    free(mine);
    held_free(&hd);
    return s;
}

/* ---- whose directory ---- */

/* A new random run id: 128 bits from getrandom, or (where it fails) from the clock, the process and an
 * address through splitmix64. */
static void new_run_id(char *out) {
    uint64_t w[2] = { 0, 0 };
    if (getrandom(w, sizeof w, GRND_NONBLOCK) != (ssize_t)sizeof w) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t x = ((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec) ^ ((uint64_t)getpid() << 40) ^
                     (uint64_t)(uintptr_t)out;
        for (int i = 0; i < 2; i++) {
            uint64_t z = (x += 0x9e3779b97f4a7c15ull);
            z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
            z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
            w[i] = z ^ (z >> 31);
        }
    }
    snprintf(out, FSC_CKPT_RUN_ID, "%016llx%016llx", (unsigned long long)w[0], (unsigned long long)w[1]);
}

/* Whether checkpoint directory path belongs to run `run` ("" matches none); *m (may be NULL) receives
 * its metadata when readable. */
static int of_run(const char *path, const char *run, fsc_ckpt_meta **m) {
    fsc_ckpt_meta *x = NULL;
    int same = fsc_ckpt_meta_read(path, &x) == FSC_OK && run[0] && !strcmp(x->run_id, run);
    if (m) *m = x;
    else fsc_ckpt_meta_free(x);
    return same;
}

/* Rank 0, start over: remove every complete checkpoint in dir that is not of the engine's run. */
static fsc_status remove_other_runs(fsc_engine *e, const char *dir) {
    char eb[128], path[4096];
    DIR *d = opendir(dir);
    if (!d) return fsc_error(FSC_ERR_IO, "%s: cannot list it: %s", dir, errstr(errno, eb, sizeof eb));
    fsc_status s = FSC_OK;
    for (struct dirent *de; s == FSC_OK && (de = readdir(d)) != NULL;) {
        int64_t st;
        struct stat sb;
        if (!ck_parse_step_name(de->d_name, &st) ||
            snprintf(path, sizeof path, "%s/%s/%s", dir, de->d_name, CK_META_NAME) >= (int)sizeof path ||
            stat(path, &sb) != 0)
            continue; /* not a complete checkpoint */
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        if (!of_run(path, ENG(e).run, NULL) && ck_remove_dir(path) != FSC_OK)
            s = fsc_error_prefix(FSC_ERR_IO, "%s: cannot start over", dir);
    }
    closedir(d);
    return s;
}

/* Rank 0: whether dir may take a checkpoint of the engine's run: its newest complete checkpoint is of
 * that run, or it has none; with start_over the others' are removed instead of refusing. */
static fsc_status claim_dir(fsc_engine *e, const char *dir, int start_over) {
    char path[4096], who[400];
    int64_t newest;
    FSC_TRY(fsc_ckpt_latest(dir, path, sizeof path, &newest));
    if (newest < 0) return FSC_OK;
    fsc_ckpt_meta *m = NULL;
    if (of_run(path, ENG(e).run, &m)) {
        fsc_ckpt_meta_free(m);
        return FSC_OK;
    }
    if (!m && ck_newest_readable_of_run(dir, ENG(e).run)) /* a damaged newest one, skipped by the resume */
        return FSC_OK;
    if (m)
        snprintf(who, sizeof who, "run %s, seed %llu, %s lr %g", m->run_id, (unsigned long long)m->seed,
                 m->optim.kind == FSC_OPT_ADAMW ? "adamw" : "sgd", (double)m->optim.lr);
    else
        snprintf(who, sizeof who, "unreadable: %.300s", fsc_last_error());
    fsc_ckpt_meta_free(m);
    if (start_over) return remove_other_runs(e, dir);
    return fsc_error(FSC_ERR_INVALID, "%s holds the checkpoints of another run (the newest, step-%08lld: %s), and "
                     "this engine %s%s: resume from that run, save elsewhere, or start over (fsc_ckpt_save_opts."
                     "start_over, the trainer's --ckpt-overwrite: its checkpoints are removed)", dir,
                     (long long)newest, who, ENG(e).run[0] ? "continues run " : "starts a new run", ENG(e).run);
}

/* DIR/step-N, which a save renames its directory onto, must be absent or a directory (a save replaces it): a link
 * or a file there is refused before anything is written. */
static fsc_status check_final(const char *dir, int64_t step) {
    char path[4096];
    struct stat st;
    int n = snprintf(path, sizeof path, "%s/step-%08lld", dir, (long long)step);
    if (n < 0 || (size_t)n >= sizeof path || lstat(path, &st) != 0 || S_ISDIR(st.st_mode)) return FSC_OK;
    return fsc_error(FSC_ERR_IO, "%s is a %s, not a checkpoint directory a save made: the checkpoint of step %lld would "
                     "replace it; remove it, or save into another directory", path,
                     S_ISLNK(st.st_mode) ? "symbolic link" : "file", (long long)step);
}

static fsc_status save(fsc_engine *e, const char *dir, int64_t step, const fsc_ckpt_save_opts *opts);

/* The save, as one span of the engine's trace (trace.h) */
fsc_status fsc_ckpt_save(fsc_engine *e, const char *dir, int64_t step, const fsc_ckpt_save_opts *opts) {
    FSC_CHECK_ARG(e);
    FSC_CHECK_ARG(dir);
    if (!e || !dir || !*dir) return fsc_error(FSC_ERR_INVALID, "fsc_ckpt_save: no engine or no directory");
    fsc_trace_begin(ENG(e).trace, "ckpt", "checkpoint save");
    fsc_status s = save(e, dir, step, opts);
    fsc_trace_end(ENG(e).trace);
    return s;
}

static fsc_status save(fsc_engine *e, const char *dir, int64_t step, const fsc_ckpt_save_opts *opts) {
    if (step < 0 || step > 999999999999LL)
        return fsc_error(FSC_ERR_INVALID, "fsc_ckpt_save: step %lld out of range", (long long)step);
    fsc_ckpt_save_opts o = opts ? *opts : (fsc_ckpt_save_opts){ 0 };
    if (o.format != FSC_CKPT_SHARDED && o.format != FSC_CKPT_FULL)
        return fsc_error(FSC_ERR_INVALID, "fsc_ckpt_save: unknown format %d", (int)o.format);
    /* a crash asked for and never injected would let a test of it pass without testing anything */
    if (o.crash_at < FSC_CKPT_CRASH_NONE || o.crash_at > FSC_CKPT_CRASH_BEFORE_RENAME)
        return fsc_error(FSC_ERR_INVALID, "fsc_ckpt_save: unknown crash_at %d", (int)o.crash_at);
    const int world = ENG(e).r->world;
    if (o.crash_at != FSC_CKPT_CRASH_NONE && (o.crash_rank < 0 || o.crash_rank >= world))
        return fsc_error(FSC_ERR_INVALID, "fsc_ckpt_save: crash_rank %d is not a rank of the world of %d",
                         o.crash_rank, world);
    if (o.crash_at == FSC_CKPT_CRASH_MID_SHARD && o.format == FSC_CKPT_FULL && o.crash_rank != 0)
        return fsc_error(FSC_ERR_INVALID, "fsc_ckpt_save: crash_rank %d of the full format's FSC_CKPT_CRASH_MID_SHARD: "
                         "only rank 0 writes its files", o.crash_rank);
    if ((o.crash_at == FSC_CKPT_CRASH_BEFORE_META || o.crash_at == FSC_CKPT_CRASH_BEFORE_RENAME) && o.crash_rank != 0)
        return fsc_error(FSC_ERR_INVALID, "fsc_ckpt_save: crash_rank %d of FSC_CKPT_CRASH_%s: only rank 0 writes "
                         "metadata.json and renames the directory", o.crash_rank,
                         o.crash_at == FSC_CKPT_CRASH_BEFORE_META ? "BEFORE_META" : "BEFORE_RENAME");
    if (fsc_optim_steps(ENG(e).opt) > step) /* the same on every rank */
        return fsc_error(FSC_ERR_INVALID, "fsc_ckpt_save: step %lld, but the optimizer has taken %lld steps (step is "
                         "the number of training steps taken: the data position)", (long long)step,
                         (long long)fsc_optim_steps(ENG(e).opt));
    struct {
        char base[TMP_NAME];
        char run[FSC_CKPT_RUN_ID];
    } hd = { "", "" };
    char eb[128], *base = hd.base, tmp[4096], final[4096];
    fsc_status s = fsc_engine_check_finite(e); /* collective: never write inf or NaN */
    if (s != FSC_OK) return fsc_error_prefix(s, "%s: checkpoint of step %lld not written", dir, (long long)step);
    if (ENG(e).r->rank == 0) {
        if (mkdir(dir, 0777) != 0 && errno != EEXIST)
            s = fsc_error(FSC_ERR_IO, "%s: cannot create the checkpoint directory: %s", dir, errstr(errno, eb, sizeof eb));
        if (s == FSC_OK) s = check_final(dir, step);
        if (s == FSC_OK) s = claim_dir(e, dir, o.start_over);
        if (ENG(e).run[0]) memcpy(hd.run, ENG(e).run, sizeof hd.run);
        else new_run_id(hd.run);
        snprintf(base, TMP_NAME, "step-%08lld.tmp-XXXXXX", (long long)step);
        if (s == FSC_OK) s = ck_join(tmp, sizeof tmp, dir, base);
        if (s == FSC_OK && !mkdtemp(tmp))
            s = fsc_error(FSC_ERR_IO, "%s: cannot create a temporary directory in it: %s", dir,
                          errstr(errno, eb, sizeof eb));
        if (s == FSC_OK && chmod(tmp, 0755) != 0) /* mkdtemp's 0700 would hide the checkpoint from others */
            s = fsc_error(FSC_ERR_IO, "%s: cannot set its permissions: %s", tmp, errstr(errno, eb, sizeof eb));
        if (s == FSC_OK) snprintf(base, TMP_NAME, "%s", strrchr(tmp, '/') + 1);
    }
    s = ck_agree(e, s);
    if (s == FSC_OK) s = ck_agree(e, ck_bcast_host(e, &hd, sizeof hd));
    if (s != FSC_OK) return s;
    base[TMP_NAME - 1] = 0;
    hd.run[FSC_CKPT_RUN_ID - 1] = 0;
    fsc_engine_continue_run(e, hd.run, ENG(e).seed); /* this engine's run from now on */
    char fin[32];
    snprintf(fin, sizeof fin, "step-%08lld", (long long)step);
    s = ck_join(tmp, sizeof tmp, dir, base);
    if (s == FSC_OK) s = ck_join(final, sizeof final, dir, fin);
    s = ck_agree(e, s);
    if (s == FSC_OK) s = save_in(e, dir, tmp, final, step, &o);
    if (s != FSC_OK && o.crash_at == FSC_CKPT_CRASH_NONE && ENG(e).r->rank == 0) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", fsc_last_error());
        ck_remove_dir(tmp); /* best effort; resume removes what remains */
        fsc_error(s, "%s", msg);
    }
    return s;
}

/* ---- the gathered optimizer state ---- */

typedef struct {
    float *dst; /* host + offset of the tensor */
} host_sink;

static fsc_status to_host(void *ctx, uint64_t first, const float *host, size_t n) {
    host_sink *hs = ctx;
    if (hs->dst) memcpy(hs->dst + first, host, n * sizeof(float));
    return FSC_OK;
}

fsc_status fsc_ckpt_full_state(fsc_engine *e, int which, float *host) {
    FSC_CHECK_ARG(e);
    const int nstates = fsc_optim_num_states(ENG(e).opt);
    if (which < 0 || which >= nstates)
        return fsc_error(FSC_ERR_INVALID, "fsc_ckpt_full_state: the optimizer keeps %d states, not state %d", nstates,
                         which);
    const int root = ENG(e).r->rank == 0;
    held hd;
    fsc_piece *mine = NULL, *all = NULL;
    int nall = 0;
    float *hbuf = NULL, *dbuf = NULL;
    fsc_status s = held_make(e, &hd);
    if (s == FSC_OK) s = make_recs(e, &hd, &mine);
    s = ck_agree(e, s);
    if (s == FSC_OK) s = fsc_pieces_gather(e, mine, hd.nw, &all, &nall);
    if (s == FSC_OK) s = fsc_pieces_check(e, all, nall);
    if (s == FSC_OK && root) {
        hbuf = malloc(CK_CHUNK * sizeof(float));
        s = hbuf ? fsc_device_alloc(ENG(e).dev, FSC_TAG_COMM, CK_CHUNK * sizeof(float), (void **)&dbuf)
                 : fsc_error(FSC_ERR_NOMEM, "checkpoint: out of host memory");
    }
    if (s == FSC_OK && !dbuf && fsc_stream_owner_offloaded(e)) /* its pieces go out through a device chunk */
        s = fsc_device_alloc(ENG(e).dev, FSC_TAG_COMM, CK_CHUNK * sizeof(float), (void **)&dbuf);
    s = ck_agree(e, s);
    size_t off = 0; /* of tensor t in the full model's flat vector */
    for (int t = 0; t < ENG(e).m->n_tensors && s == FSC_OK; off += ck_info(e, t)->numel, t++) {
        host_sink hs = { root && host ? host + off : NULL };
        s = ck_agree(e, fsc_stream_tensor(e, all, nall, hd.h, hd.nh, which + 1, t, ck_root, 1, to_host, &hs, hbuf, dbuf));
    }
    fsc_device_release(ENG(e).dev, dbuf);
    free(hbuf);
    free(all);
    free(mine);
    held_free(&hd);
    return s;
}

fsc_ckpt_save_opts fsc_ckpt_save_opts_default(void) {
    return (fsc_ckpt_save_opts){ .format = FSC_CKPT_SHARDED, .crash_at = FSC_CKPT_CRASH_NONE };
}
