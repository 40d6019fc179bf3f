/* safetensors reader (safetensors.h), and the dtype table and checks the writer (safetensors_write.c) shares
 * through safetensors_impl.h.
 *
 * The header is validated completely before anything is used: its length against the file and
 * FSC_ST_MAX_HEADER (Hugging Face's cap), then each entry (safetensors_header.c: dtype, shape,
 * data_offsets, byte counts against shapes with overflow checks, names that fit FSC_ST_MAX_NAME), then here
 * the layout: offsets inside the data section, no overlaps, no gaps, no trailing bytes, no duplicate names.
 * Memory is bounded by what is read: the header (at most the file) and a few bytes per header byte for
 * the entries. Tensor data is read on demand by element range with pread (64-bit offsets), so a rank can
 * load only its shard.
 *
 * Not here: parsing the header text (safetensors_header.c), writing (safetensors_write.c), dtype
 * conversion (dtype.c), knowledge of any model's tensor names (gpt_io.c). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "safetensors_impl.h"

/* safetensors dtype names: those fsc understands, and other valid ones it refuses as unsupported. */
static const struct { const char *name; fsc_dtype dt; size_t size; } st_types[] = {
    {"F32", FSC_F32, 4}, {"BF16", FSC_BF16, 2}, {"F16", FSC_F16, 2}, {"I32", FSC_I32, 4}, {"U8", FSC_U8, 1},
};
static const struct { const char *name, *why; size_t size; } st_other_types[] = { /* size 0: packed */
#define OTHER(n, size) { n, "dtype " n, size }
    OTHER("F64", 8), OTHER("I64", 8), OTHER("U64", 8), OTHER("I16", 2), OTHER("U16", 2), OTHER("U32", 4),
    OTHER("I8", 1), OTHER("BOOL", 1), OTHER("F8_E4M3", 1), OTHER("F8_E5M2", 1), OTHER("F8_E8M0", 1), OTHER("F4", 0),
    OTHER("F6_E2M3", 0), OTHER("F6_E3M2", 0), OTHER("C64", 8),
#undef OTHER
};

size_t st_size(fsc_dtype dt) {
    for (size_t i = 0; i < sizeof st_types / sizeof st_types[0]; i++)
        if (st_types[i].dt == dt) return st_types[i].size;
    return 0;
}
const char *st_name(fsc_dtype dt) {
    for (size_t i = 0; i < sizeof st_types / sizeof st_types[0]; i++)
        if (st_types[i].dt == dt) return st_types[i].name;
    return "?";
}

fsc_status st_dtype_of(const char *what, const char *name, const char *s, size_t len, fsc_dtype *dt,
                       const char **other, const char **why, size_t *other_size) {
    *other = *why = NULL, *other_size = 0;
    for (size_t i = 0; i < sizeof st_types / sizeof st_types[0]; i++)
        if (len == strlen(st_types[i].name) && !memcmp(s, st_types[i].name, len)) {
            *dt = st_types[i].dt;
            return FSC_OK;
        }
    for (size_t i = 0; i < sizeof st_other_types / sizeof st_other_types[0]; i++)
        if (len == strlen(st_other_types[i].name) && !memcmp(s, st_other_types[i].name, len)) {
            *dt = FSC_DTYPE_COUNT, *other = st_other_types[i].name, *why = st_other_types[i].why;
            *other_size = st_other_types[i].size;
            return FSC_OK;
        }
    return fsc_error(FSC_ERR_FORMAT, "%s: tensor %s has unknown dtype \"%.32s\"", what, name, s);
}

static uint64_t le64_get(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

uint64_t st_shape_numel(int ndim, const int64_t *shape, int *overflow) {
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

fsc_status st_check_range(const char *what, const fsc_st_entry *e, uint64_t first, uint64_t n) {
    int ovf;
    uint64_t numel = st_shape_numel(e->ndim, e->shape, &ovf);
    if (first > numel || n > numel - first)
        return fsc_error(FSC_ERR_INVALID, "%s: elements [%llu, %llu + %llu) lie outside tensor %s of %llu elements",
                         what, (unsigned long long)first, (unsigned long long)first, (unsigned long long)n,
                         e->name, (unsigned long long)numel);
    return FSC_OK;
}

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
    char **meta;           /* key, value, key, value, ... sorted by key; one allocation with the text */
};

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

/* Parse and validate the header text (hlen bytes, modified in place) into f. */
static fsc_status parse_header(fsc_st_file *f, char *hdr, size_t hlen) {
    st_header h;
    fsc_status st = st_parse_header(f->what, hdr, hlen, &h);
    f->e = h.e;
    f->n = h.n;
    f->meta = h.meta;
    f->n_meta = h.n_meta;
    return st == FSC_OK ? check_layout(f) : st;
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
        return fsc_error(FSC_ERR_FORMAT, "%s: the header is too large: %llu bytes, above the limit of %u bytes "
                         "(Hugging Face's safetensors refuses such headers too)", f->what, (unsigned long long)n,
                         (unsigned)FSC_ST_MAX_HEADER);
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
    FSC_CHECK_ARG(path);
    FSC_CHECK_ARG(out);
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
    FSC_CHECK_ARG(out);
    *out = NULL;
    FSC_CHECK_BUF(buf, len);
    if (!buf && len) return fsc_error(FSC_ERR_INVALID, "fsc_st_parse_buffer: buf is NULL");
    fsc_st_file *f = file_new("safetensors buffer");
    if (!f) return fsc_error(FSC_ERR_NOMEM, "safetensors buffer: out of memory");
    uint64_t hlen = 0;
    const uint8_t *b = buf;
    fsc_status st = check_lengths(f, len >= 8 ? b : (const uint8_t *)"\0\0\0\0\0\0\0\0", len, &hlen);
    /* the copy the file keeps; its header is parsed in place (the data section stays as given) */
    if (st == FSC_OK && !(f->image = malloc(len)))
        st = fsc_error(FSC_ERR_NOMEM, "safetensors buffer: out of memory for a copy of %zu bytes", len);
    if (st == FSC_OK) {
        memcpy(f->image, buf, len);
        st = parse_header(f, (char *)f->image + 8, hlen);
    }
    if (st != FSC_OK) { fsc_st_close(f); return st; }
    *out = f;
    return FSC_OK;
}

void fsc_st_close(fsc_st_file *f) {
    if (!f) return;
    if (f->fd >= 0) close(f->fd);
    free(f->meta); /* one block: the pointers and the text */
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
    FSC_CHECK_ARG(f);
    FSC_CHECK_ARG(e);
    FSC_CHECK_BUF(dst, n);
    if (e < f->e || e >= f->e + f->n)
        return fsc_error(FSC_ERR_INVALID, "%s: fsc_st_read: the entry does not belong to this file", f->what);
    if (e->unreadable)
        return fsc_error(FSC_ERR_UNSUPPORTED, "%s: tensor %s has %s, which fsc does not read (F32, BF16, F16, I32 and "
                         "U8, at most 4 dimensions)", f->what, e->name, e->unreadable);
    FSC_TRY(st_check_range(f->what, e, first, n));
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
