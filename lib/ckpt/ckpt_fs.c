/* Checkpoint files without an engine: directory names and listing (the newest complete checkpoint,
 * removal of what interrupted saves left), synced writes, reading pieces with their checksums, and the
 * structural and checksum verification behind fsc_ckpt_verify and the inspection tool.
 * Checksums are zlib's crc32 over the bytes of each piece as stored.
 * Removal never follows a symbolic link and removes only regular files of the names a save writes: a
 * directory that holds anything else is left in place, whole, and the caller is told what and why. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include "ckpt_impl.h"
#include "fsc/family.h"
#include "fsc/generate.h"
#include "fsc/gpt.h"

static const char *errstr(int err, char *buf, size_t cap) { return strerror_r(err, buf, cap); }

fsc_status ck_join(char *buf, size_t cap, const char *a, const char *b) {
    int n = snprintf(buf, cap, "%s/%s", a, b);
    if (n < 0 || (size_t)n >= cap) {
        if (cap > 0) buf[0] = 0; /* no truncated path a caller could open (fsc_ckpt_latest's "/t" of a 3-byte path) */
        return fsc_error(FSC_ERR_INVALID, "checkpoint path %s/%s is too long", a, b);
    }
    return FSC_OK;
}

int ck_parse_step_name(const char *name, int64_t *step) {
    if (strncmp(name, "step-", 5) != 0) return 0;
    const char *d = name + 5;
    size_t n = strlen(d);
    if (n < 8 || n > 18 || (n > 8 && d[0] == '0')) return 0; /* only the names a save gives (step-%08lld): every
        reader rebuilds a step's path from its number, so step-000000006 would be listed as step 6 and then opened as
        step-00000006 */
    int64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (d[i] < '0' || d[i] > '9') return 0;
        v = v * 10 + (d[i] - '0');
    }
    *step = v;
    return 1;
}

/* A leftover of an interrupted save: "step-<digits>.tmp-<anything>". */
static int is_tmp_name(const char *name) {
    if (strncmp(name, "step-", 5) != 0) return 0;
    const char *p = name + 5;
    while (*p >= '0' && *p <= '9') p++;
    return p > name + 5 && strncmp(p, ".tmp-", 5) == 0;
}

/* Digits, at least one, from *p on; advances *p. */
static int digits(const char **p) {
    const char *q = *p;
    while (**p >= '0' && **p <= '9') (*p)++;
    return *p > q;
}

/* A file a save writes in its directory: metadata.json, model.safetensors, optim.safetensors,
 * rank-NNNNN-of-NNNNN.safetensors, or one of these safetensors names with the writer's temporary suffix
 * ".tmp.<pid>.<k>". */
static int save_file_name(const char *name) {
    if (!strcmp(name, CK_META_NAME)) return 1;
    const char *p = name;
    if (!strncmp(p, "model.", 6) || !strncmp(p, "optim.", 6)) {
        p += 5;
    } else {
        if (strncmp(p, "rank-", 5) != 0) return 0;
        p += 5;
        if (!digits(&p) || strncmp(p, "-of-", 4) != 0) return 0;
        p += 4;
        if (!digits(&p)) return 0;
    }
    if (strncmp(p, ".safetensors", 12) != 0) return 0;
    p += 12;
    if (!*p) return 1;
    if (strncmp(p, ".tmp.", 5) != 0) return 0;
    p += 5;
    if (!digits(&p) || *p++ != '.' || !digits(&p)) return 0;
    return *p == 0;
}

/* Remove directory `name` of the directory open as dfd (`shown` in messages) as ck_remove_dir says. */
static fsc_status remove_at(int dfd, const char *name, const char *shown) {
    char eb[128], why[300] = "";
    struct stat st, st2;
    int gone = 0; /* files removed */
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT) return FSC_OK;
        return fsc_error(FSC_ERR_IO, "%s: cannot examine it: %s", shown, errstr(errno, eb, sizeof eb));
    }
    if (!S_ISDIR(st.st_mode))
        return fsc_error(FSC_ERR_IO, "%s: left in place: a %s, not a directory a save made", shown,
                         S_ISLNK(st.st_mode) ? "symbolic link" : "file");
    int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return fsc_error(FSC_ERR_IO, "%s: left in place: cannot open it: %s", shown, errstr(errno, eb, sizeof eb));
    DIR *d = NULL;
    if (fstat(fd, &st2) != 0 || st2.st_dev != st.st_dev || st2.st_ino != st.st_ino || !(d = fdopendir(fd))) {
        close(fd);
        return fsc_error(FSC_ERR_IO, "%s: left in place: it changed while being removed", shown);
    }
    /* Look, then remove: a directory holding anything else is left whole ("left in place" is then true); what
     * appears in between is checked again and stops the removal ("partly removed"). */
    char gone_name[300];
    int renamed = 0;
    snprintf(gone_name, sizeof gone_name, "%s", name);
    for (int pass = 0; pass < 2 && !why[0]; pass++) {
        /* before the first file goes, a checkpoint takes a leftover's name (step-N.tmp-removing-PID): killed here,
         * it is what fsc_ckpt_clean removes, never a step-N that looks whole with files missing */
        char tmp[300];
        if (pass == 1 && !strstr(name, ".tmp-") && snprintf(tmp, sizeof tmp, "%s.tmp-removing-%ld", name,
                                                              (long)getpid()) < (int)sizeof tmp &&
            renameat(dfd, name, dfd, tmp) == 0)
            snprintf(gone_name, sizeof gone_name, "%s", tmp), renamed = 1;
        rewinddir(d);
        for (struct dirent *de; !why[0] && (de = readdir(d)) != NULL;) {
            const char *f = de->d_name;
            struct stat fs;
            if (!strcmp(f, ".") || !strcmp(f, "..")) continue;
            if (!save_file_name(f)) {
                snprintf(why, sizeof why, "it holds %.100s, which a save does not write", f);
            } else if (fstatat(fd, f, &fs, AT_SYMLINK_NOFOLLOW) != 0) {
                if (errno != ENOENT) snprintf(why, sizeof why, "cannot examine %.100s: %s", f, errstr(errno, eb, sizeof eb));
            } else if (!S_ISREG(fs.st_mode)) {
                snprintf(why, sizeof why, "its %.100s is not a regular file", f);
            } else if (pass == 1 && unlinkat(fd, f, 0) != 0 && errno != ENOENT) {
                snprintf(why, sizeof why, "cannot remove %.100s: %s", f, errstr(errno, eb, sizeof eb));
            } else if (pass == 1) {
                gone++;
            }
        }
    }
    closedir(d);
    if (why[0] && renamed && !gone && renameat(dfd, gone_name, dfd, name) == 0) renamed = 0; /* whole: its name back */
    if (why[0])
        return fsc_error(FSC_ERR_IO, "%s%s%s%s: %s: %s", shown, renamed ? " (now " : "", renamed ? gone_name : "",
                         renamed ? ")" : "", gone ? "partly removed" : "left in place", why);
    if (unlinkat(dfd, gone_name, AT_REMOVEDIR) != 0 && errno != ENOENT)
        return fsc_error(FSC_ERR_IO, "%s: emptied of a save's files but not removed: %s", shown,
                         errstr(errno, eb, sizeof eb));
    return FSC_OK;
}

fsc_status ck_remove_dir(const char *path) {
    char eb[128], parent[4096];
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    size_t n = slash ? (size_t)(slash - path) : 0;
    if (n >= sizeof parent || !*base) return fsc_error(FSC_ERR_INVALID, "%s: not a removable checkpoint path", path);
    if (slash && n == 0) snprintf(parent, sizeof parent, "/");
    else if (slash) snprintf(parent, sizeof parent, "%.*s", (int)n, path);
    else snprintf(parent, sizeof parent, ".");
    int dfd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        if (errno == ENOENT) return FSC_OK;
        return fsc_error(FSC_ERR_IO, "%s: cannot open the directory: %s", parent, errstr(errno, eb, sizeof eb));
    }
    fsc_status s = remove_at(dfd, base, path);
    close(dfd);
    return s;
}

fsc_status ck_fsync_dir(const char *path) {
    char eb[128];
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return fsc_error(FSC_ERR_IO, "%s: cannot open the directory: %s", path, errstr(errno, eb, sizeof eb));
    fsc_status s = FSC_OK;
    if (fsync(fd) != 0 && errno != EINVAL && errno != EROFS)
        s = fsc_error(FSC_ERR_IO, "%s: cannot fsync the directory: %s", path, errstr(errno, eb, sizeof eb));
    close(fd);
    return s;
}

fsc_status ck_write_synced(const char *path, const void *buf, size_t len) {
    char eb[128];
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) return fsc_error(FSC_ERR_IO, "%s: cannot create: %s", path, errstr(errno, eb, sizeof eb));
    const char *p = buf;
    fsc_status s = FSC_OK;
    while (len > 0 && s == FSC_OK) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) s = fsc_error(FSC_ERR_IO, "%s: write failed: %s", path, w < 0 ? errstr(errno, eb, sizeof eb) : "no progress");
        else { p += w; len -= (size_t)w; }
    }
    if (s == FSC_OK && fsync(fd) != 0) s = fsc_error(FSC_ERR_IO, "%s: fsync failed: %s", path, errstr(errno, eb, sizeof eb));
    if (close(fd) != 0 && s == FSC_OK) s = fsc_error(FSC_ERR_IO, "%s: close failed: %s", path, errstr(errno, eb, sizeof eb));
    return s;
}

fsc_status ck_read_all(const char *path, size_t max, char **out, size_t *len) {
    char eb[128];
    *out = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return fsc_error(FSC_ERR_IO, "%s: cannot open: %s", path, errstr(errno, eb, sizeof eb));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return fsc_error(FSC_ERR_IO, "%s: not a regular file", path);
    }
    if ((uint64_t)st.st_size > max) {
        close(fd);
        return fsc_error(FSC_ERR_FORMAT, "%s: %lld bytes, above the limit of %zu bytes: too large", path,
                         (long long)st.st_size, max);
    }
    size_t n = (size_t)st.st_size, got = 0;
    char *buf = malloc(n + 1);
    if (!buf) {
        close(fd);
        return fsc_error(FSC_ERR_NOMEM, "%s: out of memory for %zu bytes", path, n);
    }
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    if (got != n) {
        free(buf);
        return fsc_error(FSC_ERR_IO, "%s: read %zu of %zu bytes", path, got, n);
    }
    buf[n] = 0;
    *out = buf;
    *len = n;
    return FSC_OK;
}

fsc_status ck_read_piece(fsc_st_file *f, const char *fname, const fsc_ckpt_tensor *t, const fsc_ckpt_piece *p,
                         float *buf, fsc_piece_sink sink, void *ctx) {
    const fsc_st_entry *en = fsc_st_find(f, p->entry);
    if (!en)
        return fsc_error(FSC_ERR_FORMAT, "%s: entry %s (tensor %s, elements [%llu, %llu)) is missing", fname, p->entry,
                         t->name, (unsigned long long)p->first, (unsigned long long)(p->first + p->n));
    uint64_t numel = 1;
    for (int d = 0; d < en->ndim; d++) numel *= (uint64_t)en->shape[d];
    if (en->dtype != FSC_F32 || numel != p->n)
        return fsc_error(FSC_ERR_FORMAT, "%s: entry %s (tensor %s) holds %llu %s elements; the metadata says %llu F32",
                         fname, p->entry, t->name, (unsigned long long)numel,
                         en->unreadable ? en->unreadable : fsc_dtype_name(en->dtype),
                         (unsigned long long)p->n);
    uLong crc = crc32(0L, Z_NULL, 0);
    uint64_t bad = p->n; /* the first inf/NaN, reported after the checksum (corruption is the likelier cause) */
    float bad_val = 0.0f;
    for (uint64_t off = 0; off < p->n;) {
        size_t k = p->n - off < CK_CHUNK ? (size_t)(p->n - off) : CK_CHUNK;
        fsc_status s = fsc_st_read(f, en, buf, off, k);
        if (s != FSC_OK) {
            char msg[600];
            snprintf(msg, sizeof msg, "%s", fsc_last_error());
            return fsc_error(s, "tensor %s: %s", t->name, msg);
        }
        crc = crc32(crc, (const Bytef *)buf, (uInt)(k * sizeof(float)));
        for (size_t i = 0; i < k && bad == p->n; i++)
            if (!isfinite(buf[i])) bad = off + i, bad_val = buf[i];
        if (sink) FSC_TRY(sink(ctx, p->first + off, buf, k));
        off += k;
    }
    if ((uint32_t)crc != p->crc32)
        return fsc_error(FSC_ERR_FORMAT, "%s: tensor %s, elements [%llu, %llu) (entry %s): checksum %08x does not match "
                         "the metadata's %08x: the file is corrupted", fname, t->name, (unsigned long long)p->first,
                         (unsigned long long)(p->first + p->n), p->entry, (unsigned)crc, (unsigned)p->crc32);
    if (bad < p->n) /* fsc never writes one (fsc_engine_check_finite before a save) */
        return fsc_error(FSC_ERR_NUMERIC, "%s: tensor %s, element %llu, is %s: refusing non-finite checkpoint values",
                         fname, t->name, (unsigned long long)(p->first + bad),
                         isnan(bad_val) ? "NaN" : bad_val > 0 ? "inf" : "-inf");
    return FSC_OK;
}

fsc_status fsc_ckpt_check_file(const fsc_ckpt_meta *m, int file, fsc_st_file *f, int check_data) {
    FSC_CHECK_ARG(m);
    FSC_CHECK_ARG(f);
    if (!m || !f || file < 0 || file >= m->nfiles)
        return fsc_error(FSC_ERR_INVALID, "fsc_ckpt_check_file: no metadata, no file or file index %d out of range", file);
    const char *fname = m->files[file];
    float *buf = check_data ? malloc(CK_CHUNK * sizeof(float)) : NULL;
    if (check_data && !buf) return fsc_error(FSC_ERR_NOMEM, "%s: out of host memory", fname);
    fsc_status s = FSC_OK;
    int used = 0;
    for (int i = 0; i < m->ntensors && s == FSC_OK; i++) {
        const fsc_ckpt_tensor *t = &m->tensors[i];
        for (int k = 0; k < t->npieces && s == FSC_OK; k++) {
            const fsc_ckpt_piece *p = &t->pieces[k];
            if (p->file != file) continue;
            used++;
            if (check_data) {
                s = ck_read_piece(f, fname, t, p, buf, NULL, NULL);
                continue;
            }
            const fsc_st_entry *en = fsc_st_find(f, p->entry);
            uint64_t numel = 1;
            for (int d = 0; en && d < en->ndim; d++) numel *= (uint64_t)en->shape[d];
            if (!en || en->dtype != FSC_F32 || numel != p->n)
                s = fsc_error(FSC_ERR_FORMAT, "%s: entry %s of tensor %s is missing or not %llu F32 elements", fname,
                              p->entry, t->name, (unsigned long long)p->n);
        }
    }
    free(buf);
    /* pieces name distinct entries (metadata validation), so equal counts mean no stray entries */
    if (s == FSC_OK && used != fsc_st_count(f)) {
        const char *stray = "?";
        for (int e = 0; e < fsc_st_count(f) && stray[0] == '?'; e++) {
            const char *en = fsc_st_entry_at(f, e)->name;
            int found = 0;
            for (int i = 0; i < m->ntensors && !found; i++)
                for (int k = 0; k < m->tensors[i].npieces && !found; k++)
                    found = m->tensors[i].pieces[k].file == file && !strcmp(m->tensors[i].pieces[k].entry, en);
            if (!found) stray = en;
        }
        s = fsc_error(FSC_ERR_FORMAT, "%s: holds %d entries but the metadata places %d pieces in it (entry %s is in "
                      "no piece)", fname, fsc_st_count(f), used, stray);
    }
    return s;
}

/* The tensors a model of another family than the GPT (whose own check is fsc_gpt_check_tensors) declares, built from
 * the recorded configuration on the counting device (no memory), against the recorded ones p: each there with its
 * shape, and no other (fsc_model_config_check_held). FSC_OK when that cannot be told here: the configuration names no
 * family this program knows (a program's own model) or does not build there for another reason than a bad field (no
 * memory, a program's family that needs more: a load says why), so that verify never calls a sound checkpoint
 * damaged for it. A configuration its family refuses is damage, as a GPT's is (fsc_gpt_check_tensors): no model
 * loads it. */
static fsc_status check_declared(const char *config, const fsc_param_info *p, int n) {
    const fsc_model_family *f = NULL;
    if (fsc_model_family_of(config, &f) != FSC_OK || !strcmp(f->name, "gpt2")) return FSC_OK;
    const fsc_status s = fsc_model_config_check_held(config, p, n, FSC_HELD_EXACT);
    if (s == FSC_ERR_UNSUPPORTED) return FSC_OK; /* not checked here: a load says why */
    if (s == FSC_ERR_INVALID)
        return fsc_error_prefix(FSC_ERR_FORMAT, "the recorded %s model's configuration is refused by its family",
                                f->name);
    return s;
}

fsc_status fsc_ckpt_verify(const char *path, fsc_ckpt_meta **out) {
    if (out) *out = NULL;
    FSC_CHECK_ARG(path);
    fsc_ckpt_meta *m;
    FSC_TRY(fsc_ckpt_meta_read(path, &m));
    fsc_status s = FSC_OK;
    char file[4096];
    for (int i = 0; i < m->nfiles && s == FSC_OK; i++) {
        fsc_st_file *f = NULL;
        s = ck_join(file, sizeof file, path, m->files[i]);
        if (s == FSC_OK) s = fsc_st_open(file, &f);
        if (s == FSC_OK && (s = fsc_ckpt_check_file(m, i, f, 1)) != FSC_OK) {
            char msg[900]; /* its message starts with the file name: make that the path */
            snprintf(msg, sizeof msg, "%s", fsc_last_error());
            fsc_error(s, "%s/%s", path, msg);
        }
        fsc_st_close(f);
    }
    if (s == FSC_OK) { /* the record against its tensors: the GPT's check, another known family's model */
        fsc_param_info *p = NULL;
        int n = 0;
        const char *config = m->model_config ? m->model_config : "{}";
        s = fsc_ckpt_meta_params(m, &p, &n);
        if (s == FSC_OK) s = fsc_gpt_check_tensors(config, p, n);
        if (s == FSC_OK) s = check_declared(config, p, n);
        if (s != FSC_OK) fsc_error_prefix(s, "%s/%s", path, CK_META_NAME);
        free(p);
    }
    if (s == FSC_OK && out) *out = m;
    else fsc_ckpt_meta_free(m);
    return s;
}

int ck_step_present(const char *dir, const char *name, int unexaminable) {
    char meta[4096];
    struct stat st;
    int n = snprintf(meta, sizeof meta, "%s/%s/%s", dir, name, CK_META_NAME);
    if (n < 0 || (size_t)n >= sizeof meta) return 0;
    return lstat(meta, &st) == 0 || (unexaminable && errno != ENOENT && errno != ENOTDIR); /* EACCES: unreadable */
}

int ck_step_complete(const char *dir, const char *name) { return ck_step_present(dir, name, 1); }

fsc_status fsc_ckpt_latest(const char *dir, char *path, size_t cap, int64_t *step) {
    FSC_CHECK_ARG(dir);
    FSC_CHECK_ARG(path);
    FSC_CHECK_ARG(step);
    char eb[128];
    if (cap == 0) return fsc_error(FSC_ERR_INVALID, "fsc_ckpt_latest: cap is 0 (no room for the path)");
    path[0] = 0;
    *step = -1;
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return FSC_OK;
        return fsc_error(FSC_ERR_IO, "%s: cannot list the checkpoint directory: %s", dir, errstr(errno, eb, sizeof eb));
    }
    char best[256] = "";
    for (struct dirent *de; (de = readdir(d)) != NULL;) {
        int64_t s;
        if (!ck_parse_step_name(de->d_name, &s) || s <= *step) continue;
        if (!ck_step_complete(dir, de->d_name)) continue; /* not a checkpoint */
        *step = s;
        snprintf(best, sizeof best, "%s", de->d_name);
    }
    closedir(d);
    if (*step < 0) return FSC_OK;
    fsc_status s = ck_join(path, cap, dir, best);
    if (s != FSC_OK) *step = -1;
    return s;
}

fsc_status fsc_ckpt_clean(const char *dir, int *left, char *report, size_t cap) {
    FSC_CHECK_ARG(dir);
    char eb[128], p[4096];
    int n = 0;
    size_t used = 0;
    if (left) *left = 0;
    if (report && cap) report[0] = 0;
    if (!dir) return fsc_error(FSC_ERR_INVALID, "fsc_ckpt_clean: dir is NULL");
    char who[200];
    if (ck_dir_in_use(dir, who, sizeof who)) { /* its .tmp- directories are saves in progress */
        if (report && cap) snprintf(report, cap, "%s is in use by another run (%s): its temporary directories are "
                                    "left alone", dir, who);
        return FSC_OK;
    }
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return FSC_OK;
        return fsc_error(FSC_ERR_IO, "%s: cannot list the checkpoint directory: %s", dir, errstr(errno, eb, sizeof eb));
    }
    for (struct dirent *de; (de = readdir(d)) != NULL;) {
        if (!is_tmp_name(de->d_name)) continue;
        if (snprintf(p, sizeof p, "%s/%s", dir, de->d_name) >= (int)sizeof p) continue;
        if (remove_at(dirfd(d), de->d_name, p) == FSC_OK) continue;
        n++; /* left in place: say which and why, as far as report holds */
        if (report && used + 1 < cap) {
            int k = snprintf(report + used, cap - used, "%s%s", n > 1 ? "; " : "", fsc_last_error());
            used = k < 0 ? used : used + (size_t)k < cap ? used + (size_t)k : cap - 1;
        }
    }
    closedir(d);
    if (left) *left = n;
    return FSC_OK;
}
