/* safetensors reader and writer (safetensors.h).
 *
 * Reader: the header is parsed with cJSON and validated completely before anything is used: the
 * header length against the file and FSC_ST_MAX_HEADER, every entry's dtype, shape and data_offsets,
 * byte counts against shapes (with overflow checks), offsets inside the data section, no overlaps, no
 * gaps, no trailing bytes, no duplicate names, names that fit FSC_ST_MAX_NAME. Tensor data is read on
 * demand by element range with pread (64-bit offsets), so a rank can load only its shard.
 *
 * Writer: declares tensors, lays them out in declaration order, writes the header (padded with spaces
 * to a multiple of 8 bytes, as the reference implementation does) into "<path>.tmp.<pid>.<k>", then the
 * data in pieces with pwrite; commit fsyncs, renames onto path and fsyncs the directory.
 *
 * Not here: dtype conversion (dtype.c), knowledge of any model's tensor names (gpt_io.c). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "fsc/safetensors.h"
#include "json_lock.h"

#define MAX_JSON_INT ((uint64_t)1 << 53) /* integers above this do not survive a JSON double */

/* safetensors dtype names: those fsc understands, and other valid ones it refuses as unsupported. */
static const struct { const char *name; fsc_dtype dt; size_t size; } st_types[] = {
    {"F32", FSC_F32, 4}, {"BF16", FSC_BF16, 2}, {"F16", FSC_F16, 2}, {"I32", FSC_I32, 4}, {"U8", FSC_U8, 1},
};
static const char *st_other_types[] = {"F64", "I64", "U64", "I16", "U16", "U32", "I8", "BOOL",
                                       "F8_E4M3", "F8_E5M2", "F8_E8M0", "F4", "F6_E2M3", "F6_E3M2", "C64"};

static size_t st_size(fsc_dtype dt) {
    for (size_t i = 0; i < sizeof st_types / sizeof st_types[0]; i++)
        if (st_types[i].dt == dt) return st_types[i].size;
    return 0;
}
static const char *st_name(fsc_dtype dt) {
    for (size_t i = 0; i < sizeof st_types / sizeof st_types[0]; i++)
        if (st_types[i].dt == dt) return st_types[i].name;
    return "?";
}

static const char *errstr(int err, char *buf, size_t cap) { return strerror_r(err, buf, cap); }

static void le64_put(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static uint64_t le64_get(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static void shape_str(char *buf, size_t cap, int ndim, const int64_t *shape) {
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < ndim && k < cap; d++)
        k += (size_t)snprintf(buf + k, cap - k, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (k < cap) snprintf(buf + k, cap - k, "]");
}

/* Elements of a shape; 0 with *overflow set if the product does not fit 64 bits. */
static uint64_t shape_numel(int ndim, const int64_t *shape, int *overflow) {
    uint64_t n = 1;
    *overflow = 0;
    for (int d = 0; d < ndim; d++) if (shape[d] == 0) return 0;
    for (int d = 0; d < ndim; d++) {
        uint64_t s = (uint64_t)shape[d];
        if (n > UINT64_MAX / s) { *overflow = 1; return 0; }
        n *= s;
    }
    return n;
}

static uint64_t entry_numel(const fsc_st_entry *e) {
    int ovf;
    return shape_numel(e->ndim, e->shape, &ovf);
}

/* ---------------------------------------------------------------------------------------------- */
/* Reading */

struct fsc_st_file {
    char *what;            /* the path, for messages */
    int fd;                /* -1 when the image is in memory */
    uint8_t *image;        /* a copy of the whole file image (fsc_st_parse_buffer) */
    uint64_t data_start;   /* 8 + header length */
    uint64_t data_len;
    int n;
    fsc_st_entry *e;       /* header order */
    int *by_name;          /* indices of e sorted by name, for fsc_st_find */
    int n_meta;
    char **meta;           /* key, value, key, value, ... sorted by key */
};

/* cJSON resets a process-wide error pointer on every parse; ranks parse concurrently in one process.
 * The checkpoint metadata reader shares the lock (json_lock.h). */
pthread_mutex_t fsc_json_lock = PTHREAD_MUTEX_INITIALIZER;

/* A JSON number that is a non-negative integer below 2^53. 0 ok, -1 not an integer, -2 negative, -3 huge. */
static int json_u53(const cJSON *x, uint64_t *out) {
    if (!cJSON_IsNumber(x)) return -1;
    double v = x->valuedouble;
    if (v != v) return -1;
    if (v < 0) return -2;
    if (v > (double)MAX_JSON_INT) return -3;
    if (v != (double)(uint64_t)v) return -1;
    *out = (uint64_t)v;
    return 0;
}

static int cmp_offsets(const void *a, const void *b, void *base) {
    const fsc_st_entry *e = base, *x = &e[*(const int *)a], *y = &e[*(const int *)b];
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}
static int cmp_names(const void *a, const void *b, void *base) {
    const fsc_st_entry *e = base;
    return strcmp(e[*(const int *)a].name, e[*(const int *)b].name);
}
static int cmp_meta(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Parse one tensor entry of the header into e. */
static fsc_status parse_entry(const char *what, const cJSON *item, fsc_st_entry *e) {
    const char *name = item->string;
    size_t len = strlen(name);
    if (len >= FSC_ST_MAX_NAME)
        return fsc_error(FSC_ERR_FORMAT, "%s: tensor name of %zu bytes (\"%.40s...\") is longer than the limit of %d",
                         what, len, name, FSC_ST_MAX_NAME - 1);
    memcpy(e->name, name, len + 1);
    if (!cJSON_IsObject(item)) return fsc_error(FSC_ERR_FORMAT, "%s: entry %s is not a JSON object", what, name);

    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(item, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    if (!dt) return fsc_error(FSC_ERR_FORMAT, "%s: tensor %s has no dtype", what, name);
    if (!sh) return fsc_error(FSC_ERR_FORMAT, "%s: tensor %s has no shape", what, name);
    if (!off) return fsc_error(FSC_ERR_FORMAT, "%s: tensor %s has no data_offsets", what, name);

    if (!cJSON_IsString(dt)) return fsc_error(FSC_ERR_FORMAT, "%s: dtype of tensor %s is not a string", what, name);
    size_t es = 0;
    for (size_t i = 0; i < sizeof st_types / sizeof st_types[0]; i++)
        if (!strcmp(dt->valuestring, st_types[i].name)) { e->dtype = st_types[i].dt; es = st_types[i].size; }
    if (!es) {
        for (size_t i = 0; i < sizeof st_other_types / sizeof st_other_types[0]; i++)
            if (!strcmp(dt->valuestring, st_other_types[i]))
                return fsc_error(FSC_ERR_UNSUPPORTED, "%s: tensor %s has dtype %s, which fsc does not support "
                                 "(F32, BF16, F16, I32, U8)", what, name, st_other_types[i]);
        return fsc_error(FSC_ERR_FORMAT, "%s: tensor %s has unknown dtype \"%.32s\"", what, name, dt->valuestring);
    }

    if (!cJSON_IsArray(sh)) return fsc_error(FSC_ERR_FORMAT, "%s: shape of tensor %s is not an array", what, name);
    int nd = cJSON_GetArraySize(sh);
    if (nd > 4)
        return fsc_error(FSC_ERR_UNSUPPORTED, "%s: tensor %s has %d dimensions; fsc supports at most 4", what, name,
                         nd);
    e->ndim = nd;
    int d = 0;
    for (const cJSON *x = sh->child; x; x = x->next, d++) {
        uint64_t v;
        int r = json_u53(x, &v);
        if (r == -2) return fsc_error(FSC_ERR_FORMAT, "%s: tensor %s has a negative dimension", what, name);
        if (r == -3) return fsc_error(FSC_ERR_FORMAT, "%s: tensor %s has a huge dimension (above 2^53)", what, name);
        if (r)
            return fsc_error(FSC_ERR_FORMAT, "%s: shape of tensor %s holds something other than an integer", what,
                             name);
        e->shape[d] = (int64_t)v;
    }
    for (; d < 4; d++) e->shape[d] = 0;

    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2)
        return fsc_error(FSC_ERR_FORMAT, "%s: data_offsets of tensor %s is not an array of two integers", what, name);
    int rb = json_u53(off->child, &e->begin), re = json_u53(off->child->next, &e->end);
    if (rb || re)
        return fsc_error(FSC_ERR_FORMAT, "%s: data_offsets of tensor %s are not integers in [0, 2^53]", what, name);
    if (e->end < e->begin)
        return fsc_error(FSC_ERR_FORMAT, "%s: data_offsets [%llu, %llu] of tensor %s end before they begin", what,
                         (unsigned long long)e->begin, (unsigned long long)e->end, name);

    int ovf;
    uint64_t numel = shape_numel(e->ndim, e->shape, &ovf);
    char s[160];
    shape_str(s, sizeof s, e->ndim, e->shape);
    if (ovf || numel > UINT64_MAX / es)
        return fsc_error(FSC_ERR_FORMAT, "%s: tensor %s has shape %s, too large to address", what, name, s);
    if (numel * es != e->end - e->begin)
        return fsc_error(FSC_ERR_FORMAT, "%s: tensor %s has shape %s and dtype %s (%llu bytes) but data_offsets "
                         "[%llu, %llu] span %llu bytes", what, name, s, dt->valuestring,
                         (unsigned long long)(numel * es), (unsigned long long)e->begin,
                         (unsigned long long)e->end, (unsigned long long)(e->end - e->begin));
    return FSC_OK;
}

static fsc_status parse_metadata(fsc_st_file *f, const cJSON *item) {
    if (!cJSON_IsObject(item)) return fsc_error(FSC_ERR_FORMAT, "%s: __metadata__ is not a JSON object", f->what);
    int n = cJSON_GetArraySize(item);
    if (f->meta) return fsc_error(FSC_ERR_FORMAT, "%s: __metadata__ appears twice", f->what);
    f->meta = calloc((size_t)n * 2 + 1, sizeof(char *));
    if (!f->meta) return fsc_error(FSC_ERR_NOMEM, "%s: out of memory for __metadata__", f->what);
    for (const cJSON *x = item->child; x; x = x->next) {
        if (!cJSON_IsString(x))
            return fsc_error(FSC_ERR_FORMAT, "%s: __metadata__ value of \"%.60s\" is not a string", f->what, x->string);
        char *k = strdup(x->string), *v = strdup(x->valuestring);
        f->meta[2 * f->n_meta] = k;
        f->meta[2 * f->n_meta + 1] = v;
        f->n_meta++;
        if (!k || !v) return fsc_error(FSC_ERR_NOMEM, "%s: out of memory for __metadata__", f->what);
    }
    qsort(f->meta, (size_t)f->n_meta, 2 * sizeof(char *), cmp_meta);
    for (int i = 1; i < f->n_meta; i++)
        if (!strcmp(f->meta[2 * i - 2], f->meta[2 * i]))
            return fsc_error(FSC_ERR_FORMAT, "%s: __metadata__ key \"%.60s\" appears twice", f->what, f->meta[2 * i]);
    return FSC_OK;
}

/* Check that entries tile the data section exactly and that names are unique. */
static fsc_status check_layout(fsc_st_file *f) {
    int *ord = malloc(((size_t)f->n + 1) * sizeof(int));
    if (!ord) return fsc_error(FSC_ERR_NOMEM, "%s: out of memory", f->what);
    for (int i = 0; i < f->n; i++) ord[i] = i;
    fsc_status st = FSC_OK;
    qsort_r(ord, (size_t)f->n, sizeof(int), cmp_offsets, f->e);
    uint64_t at = 0;
    for (int k = 0; k < f->n && st == FSC_OK; k++) {
        const fsc_st_entry *e = &f->e[ord[k]];
        if (e->end > f->data_len)
            st = fsc_error(FSC_ERR_FORMAT, "%s: data_offsets [%llu, %llu] of tensor %s lie outside the data section "
                           "(%llu bytes)", f->what, (unsigned long long)e->begin, (unsigned long long)e->end,
                           e->name, (unsigned long long)f->data_len);
        else if (e->begin < at)
            st = fsc_error(FSC_ERR_FORMAT, "%s: tensor %s (bytes %llu..%llu) overlaps tensor %s", f->what, e->name,
                           (unsigned long long)e->begin, (unsigned long long)e->end, f->e[ord[k - 1]].name);
        else if (e->begin > at)
            st = fsc_error(FSC_ERR_FORMAT, "%s: gap in the data section: bytes %llu..%llu belong to no tensor",
                           f->what, (unsigned long long)at, (unsigned long long)e->begin);
        at = e->end;
    }
    if (st == FSC_OK && at != f->data_len)
        st = fsc_error(FSC_ERR_FORMAT, "%s: the data section has %llu bytes but the tensors cover only %llu "
                       "(trailing bytes)", f->what, (unsigned long long)f->data_len, (unsigned long long)at);
    if (st == FSC_OK) {
        for (int i = 0; i < f->n; i++) ord[i] = i;
        qsort_r(ord, (size_t)f->n, sizeof(int), cmp_names, f->e);
        for (int k = 1; k < f->n && st == FSC_OK; k++)
            if (!strcmp(f->e[ord[k]].name, f->e[ord[k - 1]].name))
                st = fsc_error(FSC_ERR_FORMAT, "%s: tensor name %s appears twice", f->what, f->e[ord[k]].name);
    }
    if (st != FSC_OK) { free(ord); return st; }
    f->by_name = ord;
    return FSC_OK;
}

/* Parse and validate the header text (hlen bytes, not NUL-terminated). */
static fsc_status parse_header(fsc_st_file *f, const char *hdr, size_t hlen) {
    const char *end = NULL;
    pthread_mutex_lock(&fsc_json_lock);
    cJSON *root = cJSON_ParseWithLengthOpts(hdr, hlen, &end, 0);
    pthread_mutex_unlock(&fsc_json_lock);
    if (!root) return fsc_error(FSC_ERR_FORMAT, "%s: the header is not valid JSON", f->what);
    fsc_status st = FSC_OK;
    for (const char *p = end; p && p < hdr + hlen; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            st = fsc_error(FSC_ERR_FORMAT, "%s: the header has bytes after its JSON object", f->what);
            break;
        }
    if (st == FSC_OK && !cJSON_IsObject(root))
        st = fsc_error(FSC_ERR_FORMAT, "%s: the header is not a JSON object", f->what);
    int n = 0;
    if (st == FSC_OK)
        for (const cJSON *x = root->child; x; x = x->next) n += strcmp(x->string, "__metadata__") != 0;
    if (st == FSC_OK && !(f->e = calloc((size_t)n + 1, sizeof(fsc_st_entry))))
        st = fsc_error(FSC_ERR_NOMEM, "%s: out of memory for %d header entries", f->what, n);
    for (const cJSON *x = st == FSC_OK ? root->child : NULL; x && st == FSC_OK; x = x->next) {
        if (!strcmp(x->string, "__metadata__")) st = parse_metadata(f, x);
        else if ((st = parse_entry(f->what, x, &f->e[f->n])) == FSC_OK) f->n++;
    }
    pthread_mutex_lock(&fsc_json_lock);
    cJSON_Delete(root);
    pthread_mutex_unlock(&fsc_json_lock);
    if (st == FSC_OK) st = check_layout(f);
    return st;
}

static fsc_st_file *file_new(const char *what) {
    fsc_st_file *f = calloc(1, sizeof *f);
    if (!f) return NULL;
    f->fd = -1;
    if (!(f->what = strdup(what))) { free(f); return NULL; }
    return f;
}

/* Validate the 8-byte length against the file size; sets data_start/data_len. */
static fsc_status check_lengths(fsc_st_file *f, const uint8_t *head8, uint64_t size, uint64_t *hlen) {
    if (size < 8)
        return fsc_error(FSC_ERR_FORMAT, "%s: the file is %llu bytes, shorter than the 8-byte header length",
                         f->what, (unsigned long long)size);
    uint64_t n = le64_get(head8);
    if (n > FSC_ST_MAX_HEADER)
        return fsc_error(FSC_ERR_FORMAT, "%s: header length %llu is larger than the limit of %u bytes", f->what,
                         (unsigned long long)n, (unsigned)FSC_ST_MAX_HEADER);
    if (n > size - 8)
        return fsc_error(FSC_ERR_FORMAT, "%s: header length %llu is larger than the file (%llu bytes); "
                         "truncated?", f->what, (unsigned long long)n, (unsigned long long)size);
    *hlen = n;
    f->data_start = 8 + n;
    f->data_len = size - 8 - n;
    return FSC_OK;
}

/* Read exactly len bytes at off; FSC_ERR_IO naming the file on failure or end of file. */
static fsc_status pread_all(int fd, const char *what, void *dst, uint64_t len, uint64_t off) {
    char eb[128];
    uint8_t *p = dst;
    while (len > 0) {
        size_t chunk = len > (1u << 30) ? (1u << 30) : (size_t)len;
        ssize_t r = pread(fd, p, chunk, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return fsc_error(FSC_ERR_IO, "%s: read failed at byte %llu: %s", what, (unsigned long long)off,
                                    errstr(errno, eb, sizeof eb));
        if (r == 0) return fsc_error(FSC_ERR_IO, "%s: the file ends at byte %llu, before the data it declares "
                                     "(truncated?)", what, (unsigned long long)off);
        p += r; off += (uint64_t)r; len -= (uint64_t)r;
    }
    return FSC_OK;
}

fsc_status fsc_st_open(const char *path, fsc_st_file **out) {
    char eb[128];
    if (!out) return fsc_error(FSC_ERR_INVALID, "fsc_st_open: out is NULL");
    *out = NULL;
    if (!path) return fsc_error(FSC_ERR_INVALID, "fsc_st_open: path is NULL");
    fsc_st_file *f = file_new(path);
    if (!f) return fsc_error(FSC_ERR_NOMEM, "%s: out of memory", path);
    f->fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO must not block: refused below */
    if (f->fd < 0) {
        fsc_status st = fsc_error(FSC_ERR_IO, "%s: cannot open: %s", path, errstr(errno, eb, sizeof eb));
        fsc_st_close(f);
        return st;
    }
    struct stat sb;
    fsc_status st = FSC_OK;
    uint8_t head8[8] = {0};
    uint64_t hlen = 0;
    char *hdr = NULL;
    if (fstat(f->fd, &sb) != 0) st = fsc_error(FSC_ERR_IO, "%s: cannot stat: %s", path, errstr(errno, eb, sizeof eb));
    else if (!S_ISREG(sb.st_mode)) st = fsc_error(FSC_ERR_IO, "%s: not a regular file", path);
    if (st == FSC_OK && sb.st_size >= 8) st = pread_all(f->fd, path, head8, 8, 0);
    if (st == FSC_OK) st = check_lengths(f, head8, (uint64_t)sb.st_size, &hlen);
    if (st == FSC_OK && !(hdr = malloc(hlen + 1)))
        st = fsc_error(FSC_ERR_NOMEM, "%s: out of memory for a header of %llu bytes", path, (unsigned long long)hlen);
    if (st == FSC_OK) st = pread_all(f->fd, path, hdr, hlen, 8);
    if (st == FSC_OK) st = parse_header(f, hdr, hlen);
    free(hdr);
    if (st != FSC_OK) { fsc_st_close(f); return st; }
    *out = f;
    return FSC_OK;
}

fsc_status fsc_st_parse_buffer(const void *buf, size_t len, fsc_st_file **out) {
    if (!out) return fsc_error(FSC_ERR_INVALID, "fsc_st_parse_buffer: out is NULL");
    *out = NULL;
    if (!buf && len) return fsc_error(FSC_ERR_INVALID, "fsc_st_parse_buffer: buf is NULL");
    fsc_st_file *f = file_new("safetensors buffer");
    if (!f) return fsc_error(FSC_ERR_NOMEM, "safetensors buffer: out of memory");
    uint64_t hlen = 0;
    const uint8_t *b = buf;
    fsc_status st = check_lengths(f, len >= 8 ? b : (const uint8_t *)"\0\0\0\0\0\0\0\0", len, &hlen);
    if (st == FSC_OK) st = parse_header(f, (const char *)b + 8, hlen);
    if (st == FSC_OK && !(f->image = malloc(len)))
        st = fsc_error(FSC_ERR_NOMEM, "safetensors buffer: out of memory for a copy of %zu bytes", len);
    if (st != FSC_OK) { fsc_st_close(f); return st; }
    memcpy(f->image, buf, len);
    *out = f;
    return FSC_OK;
}

void fsc_st_close(fsc_st_file *f) {
    if (!f) return;
    if (f->fd >= 0) close(f->fd);
    for (int i = 0; i < 2 * f->n_meta; i++) free(f->meta[i]);
    free(f->meta);
    free(f->e);
    free(f->by_name);
    free(f->image);
    free(f->what);
    free(f);
}

int fsc_st_count(const fsc_st_file *f) { return f ? f->n : 0; }

const fsc_st_entry *fsc_st_entry_at(const fsc_st_file *f, int i) {
    return f && i >= 0 && i < f->n ? &f->e[i] : NULL;
}

const fsc_st_entry *fsc_st_find(const fsc_st_file *f, const char *name) {
    if (!f || !name) return NULL;
    int lo = 0, hi = f->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        int c = strcmp(name, f->e[f->by_name[mid]].name);
        if (c == 0) return &f->e[f->by_name[mid]];
        if (c < 0) hi = mid - 1; else lo = mid + 1;
    }
    return NULL;
}

const char *fsc_st_metadata(const fsc_st_file *f, const char *key) {
    if (!f || !key) return NULL;
    for (int i = 0; i < f->n_meta; i++)
        if (!strcmp(f->meta[2 * i], key)) return f->meta[2 * i + 1];
    return NULL;
}

fsc_status fsc_st_read(fsc_st_file *f, const fsc_st_entry *e, void *dst, uint64_t first, uint64_t n) {
    if (!f || !e) return fsc_error(FSC_ERR_INVALID, "fsc_st_read: file or entry is NULL");
    if (e < f->e || e >= f->e + f->n)
        return fsc_error(FSC_ERR_INVALID, "%s: fsc_st_read: the entry does not belong to this file", f->what);
    uint64_t numel = entry_numel(e);
    if (first > numel || n > numel - first)
        return fsc_error(FSC_ERR_INVALID, "%s: elements [%llu, %llu + %llu) lie outside tensor %s of %llu elements",
                         f->what, (unsigned long long)first, (unsigned long long)first, (unsigned long long)n,
                         e->name, (unsigned long long)numel);
    if (n == 0) return FSC_OK;
    if (!dst) return fsc_error(FSC_ERR_INVALID, "%s: fsc_st_read: dst is NULL", f->what);
    size_t es = st_size(e->dtype);
    uint64_t off = f->data_start + e->begin + first * es;
    if (f->image) {
        memcpy(dst, f->image + off, (size_t)(n * es));
        return FSC_OK;
    }
    return pread_all(f->fd, f->what, dst, n * es, off);
}

/* ---------------------------------------------------------------------------------------------- */
/* Writing */

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

fsc_status fsc_st_writer_open(const char *path, fsc_st_writer **out) {
    char eb[128];
    if (!out) return fsc_error(FSC_ERR_INVALID, "fsc_st_writer_open: out is NULL");
    *out = NULL;
    if (!path || !*path) return fsc_error(FSC_ERR_INVALID, "fsc_st_writer_open: empty path");
    fsc_st_writer *w = calloc(1, sizeof *w);
    size_t tl = strlen(path) + 64;
    if (!w || !(w->path = strdup(path)) || !(w->tmp = malloc(tl))) {
        if (w) { free(w->path); free(w); }
        return fsc_error(FSC_ERR_NOMEM, "%s: out of memory", path);
    }
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
    if (!w || !name) return fsc_error(FSC_ERR_INVALID, "fsc_st_writer_add: writer or name is NULL");
    if (w->state != 0)
        return fsc_error(FSC_ERR_STATE, "%s: tensor %s added after the data was begun", w->path, name);
    size_t len = strlen(name);
    if (len >= FSC_ST_MAX_NAME)
        return fsc_error(FSC_ERR_INVALID, "%s: tensor name of %zu bytes is longer than the limit of %d", w->path, len,
                         FSC_ST_MAX_NAME - 1);
    if (!strcmp(name, "__metadata__"))
        return fsc_error(FSC_ERR_INVALID, "%s: __metadata__ is reserved and cannot name a tensor", w->path);
    size_t es = st_size(dt);
    if (!es) return fsc_error(FSC_ERR_INVALID, "%s: tensor %s has an invalid dtype %d", w->path, name, (int)dt);
    if (ndim < 0 || ndim > 4 || (ndim > 0 && !shape))
        return fsc_error(FSC_ERR_INVALID, "%s: tensor %s has %d dimensions; 0 to 4 are supported", w->path, name, ndim);
    for (int d = 0; d < ndim; d++)
        if (shape[d] < 0 || (uint64_t)shape[d] > MAX_JSON_INT)
            return fsc_error(FSC_ERR_INVALID, "%s: tensor %s has dimension %d of size %lld", w->path, name, d,
                             (long long)shape[d]);
    int ovf;
    uint64_t numel = shape_numel(ndim, shape, &ovf);
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
    if (!w || !key || !value) return fsc_error(FSC_ERR_INVALID, "fsc_st_writer_meta: writer, key or value is NULL");
    if (w->state != 0)
        return fsc_error(FSC_ERR_STATE, "%s: metadata %s added after the data was begun", w->path, key);
    for (int i = 0; i < w->n_meta; i++)
        if (!strcmp(w->meta[2 * i], key))
            return fsc_error(FSC_ERR_INVALID, "%s: metadata key %s given twice", w->path, key);
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
static void sb_json(strbuf *s, const char *t) { /* a JSON string literal */
    sb_put(s, "\"", 1);
    for (; *t; t++) {
        unsigned char c = (unsigned char)*t;
        char esc[8];
        if (c == '"' || c == '\\') { esc[0] = '\\'; esc[1] = (char)c; sb_put(s, esc, 2); }
        else if (c < 0x20) { snprintf(esc, sizeof esc, "\\u%04x", c); sb_put(s, esc, 6); }
        else sb_put(s, (const char *)t, 1);
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
    if (!w) return fsc_error(FSC_ERR_INVALID, "fsc_st_writer_write: writer is NULL");
    if (w->state == 0) return fsc_error(FSC_ERR_STATE, "%s: data written before fsc_st_writer_begin_data", w->path);
    if (w->state >= 2) return fsc_error(FSC_ERR_STATE, "%s: an earlier write or commit failed", w->path);
    if (i < 0 || i >= w->n)
        return fsc_error(FSC_ERR_INVALID, "%s: tensor index %d out of range (%d tensors)", w->path, i, w->n);
    const fsc_st_entry *e = &w->e[i];
    uint64_t numel = entry_numel(e);
    if (first > numel || n > numel - first)
        return fsc_error(FSC_ERR_INVALID, "%s: elements [%llu, %llu + %llu) lie outside tensor %s of %llu elements",
                         w->path, (unsigned long long)first, (unsigned long long)first, (unsigned long long)n,
                         e->name, (unsigned long long)numel);
    if (n == 0) return FSC_OK;
    if (!src) return fsc_error(FSC_ERR_INVALID, "%s: fsc_st_writer_write: src is NULL", w->path);
    size_t es = st_size(e->dtype);
    FSC_TRY(pwrite_all(w, src, n * es, w->data_start + e->begin + first * es));
    w->written[i] += n * es;
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
