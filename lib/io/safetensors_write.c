/* safetensors writer (safetensors.h): declares tensors, lays them out in declaration order, writes the
 * header (padded with spaces to a multiple of 8 bytes, as the reference implementation does) into
 * "<path>.tmp.<pid>.<k>", then the data in pieces with pwrite; commit fsyncs, renames onto path and fsyncs
 * the directory. A writer killed before its commit leaves that temporary, which fsc_st_remove_leftovers removes
 * once its process is gone.
 *
 * Not here: reading and the dtype table (safetensors.c), dtype conversion (dtype.c). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "safetensors_impl.h"
#include "core/json_str_impl.h" /* fsc_utf8_len, fsc_json_str_char */

static void le64_put(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }

/* The header is JSON, which readers (the safetensors crate, Python's json) require in UTF-8: the offset of the first
 * byte of s that begins no valid UTF-8 character, or -1. */
static long utf8_bad_at(const char *s) {
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        const int k = fsc_utf8_len(p);
        if (!k) return (long)(p - (const unsigned char *)s);
        p += k;
    }
    return -1;
}

struct fsc_st_writer {
    char *path, *tmp;
    int fd;
    int n, cap;
    fsc_st_entry *e;       /* declaration order = file order */
    uint64_t *written;     /* bytes written per tensor, checked by commit */
    int n_meta, cap_meta;
    char **meta;           /* key, value pairs in the order given */
    uint64_t data_start, data_len;
    int state;             /* 0 declaring, 1 writing data, 2 a write failed, 3 renamed onto path */
};

/* Where a save to path writes: path itself, or, where path is a symbolic link, the file it points to (*real, a new
 * string the caller frees); NULL (errno set) for a link to nothing. */
static const char *through_link(const char *path, char **real) {
    struct stat lb;
    *real = NULL;
    if (lstat(path, &lb) != 0 || !S_ISLNK(lb.st_mode)) return path;
    return *real = realpath(path, NULL);
}

fsc_status fsc_st_writer_open(const char *path, fsc_st_writer **out) {
    FSC_CHECK_ARG(path);
    FSC_CHECK_ARG(out);
    char eb[128];
    if (!out) return fsc_error(FSC_ERR_INVALID, "fsc_st_writer_open: out is NULL");
    *out = NULL;
    if (!path || !*path) return fsc_error(FSC_ERR_INVALID, "fsc_st_writer_open: empty path");
    /* commit renames the temporary onto path: that would replace a device (/dev/null), a FIFO or a directory's
     * link with a regular file, and a link to a file with the file. A path that exists must be a regular file,
     * and a link to one is written where it points (the link stays). */
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
        return fsc_error(FSC_ERR_INVALID, "%s: exists and is not a regular file (%s): weights are written to a "
                         "regular file, which replaces it", path, S_ISDIR(sb.st_mode) ? "a directory"
                         : S_ISCHR(sb.st_mode) || S_ISBLK(sb.st_mode) ? "a device" : S_ISFIFO(sb.st_mode) ? "a FIFO"
                         : "a socket or other special file");
    char *real = NULL;
    const char *target = through_link(path, &real);
    if (!target)
        return fsc_error(FSC_ERR_INVALID, "%s: a link to nothing (%s): give the file's own path", path,
                         errstr(errno, eb, sizeof eb));
    path = target;
    fsc_st_writer *w = calloc(1, sizeof *w);
    size_t tl = strlen(path) + 64;
    if (!w || !(w->path = strdup(path)) || !(w->tmp = malloc(tl))) {
        if (w) { free(w->path); free(w); }
        fsc_status st = fsc_error(FSC_ERR_NOMEM, "%s: out of memory", path);
        free(real);
        return st;
    }
    free(real);
    path = w->path;
    w->fd = -1;
    for (int k = 0; k < 1000 && w->fd < 0; k++) {
        snprintf(w->tmp, tl, "%s.tmp.%ld.%d", path, (long)getpid(), k);
        w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (w->fd < 0 && errno != EEXIST) break;
    }
    if (w->fd < 0) {
        fsc_status st = fsc_error(FSC_ERR_IO, "%s: cannot create the temporary file %s: %s", path, w->tmp,
                                  errstr(errno, eb, sizeof eb));
        free(w->tmp); free(w->path); free(w);
        return st;
    }
    *out = w;
    return FSC_OK;
}

fsc_status fsc_st_writer_add(fsc_st_writer *w, const char *name, fsc_dtype dt, int ndim, const int64_t *shape) {
    FSC_CHECK_ARG(w);
    FSC_CHECK_ARG(name);
    FSC_CHECK_BUF(shape, ndim); /* a scalar (ndim 0) has no shape */
    if (w->state != 0)
        return fsc_error(FSC_ERR_STATE, "%s: tensor %s added after the data was begun", w->path, name);
    size_t len = strlen(name);
    if (len >= FSC_ST_MAX_NAME)
        return fsc_error(FSC_ERR_INVALID, "%s: tensor name of %zu bytes is longer than the limit of %d", w->path, len,
                         FSC_ST_MAX_NAME - 1);
    if (!strcmp(name, "__metadata__"))
        return fsc_error(FSC_ERR_INVALID, "%s: __metadata__ is reserved and cannot name a tensor", w->path);
    const long bad = utf8_bad_at(name);
    if (bad >= 0)
        return fsc_error(FSC_ERR_INVALID, "%s: tensor name \"%.*s...\" is not UTF-8 at byte %ld: a safetensors header "
                         "is JSON, which its readers require in UTF-8", w->path, (int)(bad < 60 ? bad : 60), name, bad);
    size_t es = st_size(dt);
    if (!es) return fsc_error(FSC_ERR_INVALID, "%s: tensor %s has an invalid dtype %d", w->path, name, (int)dt);
    if (ndim < 0 || ndim > 4)
        return fsc_error(FSC_ERR_INVALID, "%s: tensor %s has %d dimensions; 0 to 4 are supported", w->path, name, ndim);
    for (int d = 0; d < ndim; d++)
        if (shape[d] < 0 || (uint64_t)shape[d] > MAX_JSON_INT)
            return fsc_error(FSC_ERR_INVALID, "%s: tensor %s has dimension %d of size %lld", w->path, name, d,
                             (long long)shape[d]);
    int ovf;
    uint64_t numel = st_shape_numel(ndim, shape, &ovf);
    if (ovf || numel > (MAX_JSON_INT - w->data_len) / es)
        return fsc_error(FSC_ERR_INVALID, "%s: tensor %s is too large for a safetensors file", w->path, name);
    for (int i = 0; i < w->n; i++)
        if (!strcmp(w->e[i].name, name)) return fsc_error(FSC_ERR_INVALID, "%s: tensor %s added twice", w->path, name);
    if (w->n == w->cap) {
        int cap = w->cap ? 2 * w->cap : 16;
        fsc_st_entry *e = realloc(w->e, (size_t)cap * sizeof *e);
        if (!e) return fsc_error(FSC_ERR_NOMEM, "%s: out of memory", w->path);
        w->e = e;
        uint64_t *wr = realloc(w->written, (size_t)cap * sizeof *wr);
        if (!wr) return fsc_error(FSC_ERR_NOMEM, "%s: out of memory", w->path);
        w->written = wr;
        w->cap = cap;
    }
    fsc_st_entry *e = &w->e[w->n];
    memset(e, 0, sizeof *e);
    memcpy(e->name, name, len + 1);
    e->dtype = dt;
    e->ndim = ndim;
    for (int d = 0; d < ndim; d++) e->shape[d] = shape[d];
    e->begin = w->data_len;
    e->end = e->begin + numel * es;
    w->data_len = e->end;
    w->written[w->n++] = 0;
    return FSC_OK;
}

fsc_status fsc_st_writer_meta(fsc_st_writer *w, const char *key, const char *value) {
    FSC_CHECK_ARG(w);
    FSC_CHECK_ARG(key);
    FSC_CHECK_ARG(value);
    if (w->state != 0)
        return fsc_error(FSC_ERR_STATE, "%s: metadata %s added after the data was begun", w->path, key);
    for (int i = 0; i < w->n_meta; i++)
        if (!strcmp(w->meta[2 * i], key))
            return fsc_error(FSC_ERR_INVALID, "%s: metadata key %s given twice", w->path, key);
    const long kbad = utf8_bad_at(key), vbad = kbad >= 0 ? -1 : utf8_bad_at(value);
    if (kbad >= 0 || vbad >= 0)
        return fsc_error(FSC_ERR_INVALID, "%s: metadata %s \"%.*s...\" is not UTF-8 at byte %ld: a safetensors header "
                         "is JSON, which its readers require in UTF-8", w->path, kbad >= 0 ? "key" : "value",
                         (int)((kbad >= 0 ? kbad : vbad) < 60 ? (kbad >= 0 ? kbad : vbad) : 60), kbad >= 0 ? key : value,
                         kbad >= 0 ? kbad : vbad);
    if (w->n_meta == w->cap_meta) {
        int cap = w->cap_meta ? 2 * w->cap_meta : 8;
        char **m = realloc(w->meta, (size_t)cap * 2 * sizeof *m);
        if (!m) return fsc_error(FSC_ERR_NOMEM, "%s: out of memory", w->path);
        w->meta = m;
        w->cap_meta = cap;
    }
    char *k = strdup(key), *v = strdup(value);
    if (!k || !v) { free(k); free(v); return fsc_error(FSC_ERR_NOMEM, "%s: out of memory", w->path); }
    w->meta[2 * w->n_meta] = k;
    w->meta[2 * w->n_meta + 1] = v;
    w->n_meta++;
    return FSC_OK;
}

/* A growing string for the header. */
typedef struct { char *p; size_t n, cap; int oom; } strbuf;

static void sb_put(strbuf *s, const char *src, size_t len) {
    if (s->oom) return;
    if (s->n + len + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 256;
        while (cap < s->n + len + 1) cap *= 2;
        char *p = realloc(s->p, cap);
        if (!p) { s->oom = 1; return; }
        s->p = p; s->cap = cap;
    }
    memcpy(s->p + s->n, src, len);
    s->n += len;
    s->p[s->n] = 0;
}
static void sb_str(strbuf *s, const char *t) { sb_put(s, t, strlen(t)); }
static void sb_json(strbuf *s, const char *t) { /* a JSON string literal (json_str_impl.h's rules) */
    sb_put(s, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)t; *p;) {
        char e[7];
        size_t n;
        p += fsc_json_str_char(p, e, &n);
        sb_put(s, e, n);
    }
    sb_put(s, "\"", 1);
}
static void sb_u64(strbuf *s, uint64_t v) {
    char b[24];
    snprintf(b, sizeof b, "%llu", (unsigned long long)v);
    sb_str(s, b);
}

/* pwrite exactly len bytes at off. */
static fsc_status pwrite_all(fsc_st_writer *w, const void *src, uint64_t len, uint64_t off) {
    char eb[128];
    const uint8_t *p = src;
    while (len > 0) {
        size_t chunk = len > (1u << 30) ? (1u << 30) : (size_t)len;
        ssize_t r = pwrite(w->fd, p, chunk, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            w->state = 2;
            return fsc_error(FSC_ERR_IO, "%s: write to %s failed: %s", w->path, w->tmp,
                             r < 0 ? errstr(errno, eb, sizeof eb) : "no progress");
        }
        p += r; off += (uint64_t)r; len -= (uint64_t)r;
    }
    return FSC_OK;
}

fsc_status fsc_st_writer_begin_data(fsc_st_writer *w) {
    FSC_CHECK_ARG(w);
    char eb[128];
    if (!w) return fsc_error(FSC_ERR_INVALID, "fsc_st_writer_begin_data: writer is NULL");
    if (w->state != 0) return fsc_error(FSC_ERR_STATE, "%s: the data was already begun", w->path);
    strbuf s = {0};
    sb_str(&s, "{");
    if (w->n_meta) {
        sb_str(&s, "\"__metadata__\":{");
        for (int i = 0; i < w->n_meta; i++) {
            if (i) sb_str(&s, ",");
            sb_json(&s, w->meta[2 * i]);
            sb_str(&s, ":");
            sb_json(&s, w->meta[2 * i + 1]);
        }
        sb_str(&s, "}");
    }
    for (int i = 0; i < w->n; i++) {
        const fsc_st_entry *e = &w->e[i];
        if (i || w->n_meta) sb_str(&s, ",");
        sb_json(&s, e->name);
        sb_str(&s, ":{\"dtype\":\"");
        sb_str(&s, st_name(e->dtype));
        sb_str(&s, "\",\"shape\":[");
        for (int d = 0; d < e->ndim; d++) {
            if (d) sb_str(&s, ",");
            sb_u64(&s, (uint64_t)e->shape[d]);
        }
        sb_str(&s, "],\"data_offsets\":[");
        sb_u64(&s, e->begin);
        sb_str(&s, ",");
        sb_u64(&s, e->end);
        sb_str(&s, "]}");
    }
    sb_str(&s, "}");
    while (!s.oom && s.n % 8) sb_str(&s, " ");
    if (s.oom) { free(s.p); return fsc_error(FSC_ERR_NOMEM, "%s: out of memory for the header", w->path); }
    if (s.n > FSC_ST_MAX_HEADER) {
        free(s.p);
        return fsc_error(FSC_ERR_INVALID, "%s: the header would be %zu bytes, above the limit of %u", w->path, s.n,
                         (unsigned)FSC_ST_MAX_HEADER);
    }
    uint8_t len8[8];
    le64_put(len8, s.n);
    fsc_status st = pwrite_all(w, len8, 8, 0);
    if (st == FSC_OK) st = pwrite_all(w, s.p, s.n, 8);
    free(s.p);
    if (st != FSC_OK) return st;
    w->data_start = 8 + s.n;
    if (ftruncate(w->fd, (off_t)(w->data_start + w->data_len)) != 0) {
        w->state = 2;
        return fsc_error(FSC_ERR_IO, "%s: cannot size %s to %llu bytes: %s", w->path, w->tmp,
                         (unsigned long long)(w->data_start + w->data_len), errstr(errno, eb, sizeof eb));
    }
    w->state = 1;
    return FSC_OK;
}

fsc_status fsc_st_writer_write(fsc_st_writer *w, int i, const void *src, uint64_t first, uint64_t n) {
    FSC_CHECK_ARG(w);
    FSC_CHECK_BUF(src, n);
    if (w->state == 0) return fsc_error(FSC_ERR_STATE, "%s: data written before fsc_st_writer_begin_data", w->path);
    if (w->state >= 2) return fsc_error(FSC_ERR_STATE, "%s: an earlier write or commit failed", w->path);
    if (i < 0 || i >= w->n)
        return fsc_error(FSC_ERR_INVALID, "%s: tensor index %d out of range (%d tensors)", w->path, i, w->n);
    const fsc_st_entry *e = &w->e[i];
    FSC_TRY(st_check_range(w->path, e, first, n));
    if (n == 0) return FSC_OK;
    if (!src) return fsc_error(FSC_ERR_INVALID, "%s: fsc_st_writer_write: src is NULL", w->path);
    size_t es = st_size(e->dtype);
    FSC_TRY(pwrite_all(w, src, n * es, w->data_start + e->begin + first * es));
    w->written[i] += n * es;
    return FSC_OK;
}

fsc_status fsc_st_writer_write_f32(fsc_st_writer *w, int i, const float *src, uint64_t first, uint64_t n) {
    FSC_CHECK_ARG(w);
    FSC_CHECK_BUF(src, n);
    if (!w || i < 0 || i >= w->n || w->e[i].dtype == FSC_F32 || n == 0 || !src)
        return fsc_st_writer_write(w, i, src, first, n); /* its checks and messages */
    const fsc_dtype dt = w->e[i].dtype;
    if (dt != FSC_BF16 && dt != FSC_F16)
        return fsc_error(FSC_ERR_INVALID, "%s: tensor %s has dtype %s: float32 values are written as F32, BF16 or "
                         "F16 only", w->path, w->e[i].name, st_name(dt));
    enum { CHUNK = 4096 };
    uint16_t h[CHUNK];
    for (uint64_t at = 0; at < n; at += CHUNK) {
        uint64_t k = n - at < CHUNK ? n - at : CHUNK;
        fsc_convert_host(h, dt, src + at, FSC_F32, (size_t)k);
        /* a finite value beyond the type's range rounds to inf: a file its readers refuse (non-finite weights) */
        const uint16_t inf = dt == FSC_F16 ? 0x7C00 : 0x7F80;
        for (uint64_t j = 0; j < k; j++)
            if ((h[j] & 0x7FFF) == inf && isfinite(src[at + j]))
                return fsc_error(FSC_ERR_NUMERIC, "%s: tensor %s, element %llu, is %.9g: beyond %s's range (its "
                                 "largest finite value is %s), it would be written as inf; save as f32%s", w->path,
                                 w->e[i].name, (unsigned long long)(first + at + j), (double)src[at + j], st_name(dt),
                                 dt == FSC_F16 ? "65504" : "3.38953139e38", dt == FSC_F16 ? " or bf16" : "");
        FSC_TRY(fsc_st_writer_write(w, i, h, first + at, k));
    }
    return FSC_OK;
}

/* fsync the directory holding path, so the rename is durable. */
static fsc_status sync_dir(const char *path) {
    char eb[128];
    char *dir = strdup(path);
    if (!dir) return fsc_error(FSC_ERR_NOMEM, "%s: out of memory", path);
    char *slash = strrchr(dir, '/');
    if (!slash) strcpy(dir, ".");
    else if (slash == dir) dir[1] = 0;
    else *slash = 0;
    fsc_status st = FSC_OK;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) st = fsc_error(FSC_ERR_IO, "%s: cannot open directory %s: %s", path, dir, errstr(errno, eb, sizeof eb));
    else if (fsync(fd) != 0 && errno != EINVAL && errno != EROFS)
        st = fsc_error(FSC_ERR_IO, "%s: cannot fsync directory %s: %s", path, dir, errstr(errno, eb, sizeof eb));
    if (fd >= 0) close(fd);
    free(dir);
    return st;
}

static void writer_free(fsc_st_writer *w) {
    for (int i = 0; i < 2 * w->n_meta; i++) free(w->meta[i]);
    free(w->meta);
    free(w->e);
    free(w->written);
    free(w->tmp);
    free(w->path);
    free(w);
}

fsc_status fsc_st_writer_commit(fsc_st_writer *w) {
    FSC_CHECK_ARG(w);
    char eb[128];
    if (!w) return fsc_error(FSC_ERR_INVALID, "fsc_st_writer_commit: writer is NULL");
    if (w->state == 0) FSC_TRY(fsc_st_writer_begin_data(w));
    if (w->state >= 2 || w->fd < 0)
        return fsc_error(FSC_ERR_STATE, "%s: an earlier write or commit failed; abort the writer", w->path);
    for (int i = 0; i < w->n; i++)
        if (w->written[i] < w->e[i].end - w->e[i].begin)
            return fsc_error(FSC_ERR_STATE, "%s: tensor %s: only %llu of its %llu bytes were written", w->path,
                             w->e[i].name, (unsigned long long)w->written[i],
                             (unsigned long long)(w->e[i].end - w->e[i].begin));
    fsc_status st = FSC_OK;
    if (fsync(w->fd) != 0) st = fsc_error(FSC_ERR_IO, "%s: fsync of %s failed: %s", w->path, w->tmp,
                                          errstr(errno, eb, sizeof eb));
    if (close(w->fd) != 0 && st == FSC_OK)
        st = fsc_error(FSC_ERR_IO, "%s: close of %s failed: %s", w->path, w->tmp, errstr(errno, eb, sizeof eb));
    w->fd = -1;
    if (st == FSC_OK && rename(w->tmp, w->path) != 0)
        st = fsc_error(FSC_ERR_IO, "%s: cannot rename %s onto it: %s", w->path, w->tmp, errstr(errno, eb, sizeof eb));
    if (st != FSC_OK) { w->state = 2; return st; }
    w->state = 3;
    FSC_TRY(sync_dir(w->path)); /* w stays for fsc_st_writer_abort, which will not remove path */
    writer_free(w);
    return FSC_OK;
}

void fsc_st_writer_abort(fsc_st_writer *w) {
    if (!w) return;
    if (w->fd >= 0) close(w->fd);
    if (w->state != 3) unlink(w->tmp);
    writer_free(w);
}

/* "<pid>.<k>" after "<name>.tmp.": both decimal, nothing after; *pid set. */
static int leftover_suffix(const char *p, long *pid) {
    char *end;
    if (*p < '0' || *p > '9' || strspn(p, "0123456789") > 10) return 0;
    *pid = strtol(p, &end, 10);
    if (*end++ != '.' || *end < '0' || *end > '9') return 0;
    return end[strspn(end, "0123456789")] == 0;
}

fsc_status fsc_st_remove_leftovers(const char *path, int *removed) {
    char eb[128], dir[4096];
    if (removed) *removed = 0;
    FSC_CHECK_ARG(path);
    if (!*path) return fsc_error(FSC_ERR_INVALID, "fsc_st_remove_leftovers: empty path");
    /* a link to a file: its writer made its temporaries beside the file it points to (fsc_st_writer_open) */
    char *real = NULL;
    if (through_link(path, &real) && real) {
        const fsc_status s = fsc_st_remove_leftovers(real, removed);
        free(real);
        return s;
    }
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    size_t dn = slash ? (size_t)(slash - path) : 1, bn = strlen(base);
    if (dn >= sizeof dir || !bn) return fsc_error(FSC_ERR_INVALID, "%s: not a file path", path);
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (!dn) snprintf(dir, sizeof dir, "/");
    else snprintf(dir, sizeof dir, "%.*s", (int)dn, path);
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return FSC_OK;
        return fsc_error(FSC_ERR_IO, "%s: cannot list the directory: %s", dir, errstr(errno, eb, sizeof eb));
    }
    for (struct dirent *de; (de = readdir(d)) != NULL;) {
        const char *f = de->d_name;
        long pid;
        struct stat st;
        if (strncmp(f, base, bn) != 0 || strncmp(f + bn, ".tmp.", 5) != 0 || !leftover_suffix(f + bn + 5, &pid)) continue;
        if (pid <= 0 || pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* alive */
        if (fstatat(dirfd(d), f, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid())
            continue;
        if (unlinkat(dirfd(d), f, 0) == 0 && removed) (*removed)++;
    }
    closedir(d);
    return FSC_OK;
}
