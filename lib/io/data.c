/* Token datasets (data.h): the files of a spec mapped read-only, each checked for its format's structure
 * when opened, and read as one stream of tokens by position. Token values are checked as they are read.
 *
 * Not here: which sequences a step takes beyond the one formula of the data order (the trainer splits a
 * global batch over its ranks), tokenizers (the files hold token ids). */
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "fsc/data.h"

typedef struct {
    char *path;          /* name in messages */
    void *map;           /* the mapping (NULL: memory image or empty file) */
    size_t map_len;
    const uint8_t *tok;  /* first token's byte */
    uint64_t ntok;       /* tokens in this file */
    uint64_t first;      /* its first token's position in the stream */
    uint64_t tok_off;    /* byte offset of the first token in the file (the llm.c header) */
} data_file;

struct fsc_data {
    fsc_data_format fmt;
    int vocab;
    int n, cap;
    data_file *f;        /* (n) in stream order */
    uint64_t ntok;
};

static const char *format_names[] = {"auto", "bytes", "llmc", "u16"};

const char *fsc_data_format_name(fsc_data_format f) {
    return (unsigned)f < sizeof format_names / sizeof format_names[0] ? format_names[f] : "?";
}

fsc_status fsc_data_format_parse(const char *name, fsc_data_format *out) {
    FSC_CHECK_ARG(name);
    FSC_CHECK_ARG(out);
    for (int i = 0; i < (int)(sizeof format_names / sizeof format_names[0]); i++)
        if (name && !strcmp(name, format_names[i])) {
            *out = (fsc_data_format)i;
            return FSC_OK;
        }
    return fsc_error(FSC_ERR_INVALID, "data format \"%.40s\": give auto, bytes, llmc or u16", name ? name : "");
}

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int has_magic(const uint8_t *buf, size_t len) {
    return len >= 4 && le32(buf) == FSC_DATA_LLMC_MAGIC;
}

/* Decide the format of the stream from its first file (AUTO only). */
static fsc_status detect(const char *name, const uint8_t *buf, size_t len, int vocab, fsc_data_format *fmt) {
    if (has_magic(buf, len)) *fmt = FSC_DATA_LLMC;
    else if (vocab <= 256) *fmt = FSC_DATA_BYTES;
    else
        return fsc_error(FSC_ERR_INVALID, "%s has no llm.c header and the vocabulary (%d) is above 256, so its "
                         "bytes cannot be the tokens: give the format u16 for headerless uint16 tokens (nanoGPT's "
                         "train.bin) or bytes", name, vocab);
    return FSC_OK;
}

/* Check one file image against the stream's format and fill in where its tokens lie. */
static fsc_status parse_file(data_file *f, const uint8_t *buf, size_t len, fsc_data_format fmt) {
    const char *name = f->path;
    f->tok = buf, f->tok_off = 0;
    if (fmt != FSC_DATA_LLMC && has_magic(buf, len))
        return fsc_error(FSC_ERR_FORMAT, "%s begins with llm.c's magic %d: it is an llm.c token shard, not %s "
                         "(give the format llmc, or auto)", name, FSC_DATA_LLMC_MAGIC,
                         fmt == FSC_DATA_BYTES ? "bytes" : "headerless uint16 tokens");
    if (fmt == FSC_DATA_BYTES) {
        f->ntok = len;
        return FSC_OK;
    }
    if (fmt == FSC_DATA_U16) {
        if (len % 2)
            return fsc_error(FSC_ERR_FORMAT, "%s: %zu bytes, not a multiple of 2: not a file of uint16 tokens",
                             name, len);
        f->ntok = len / 2;
        return FSC_OK;
    }
    if (!has_magic(buf, len))
        return fsc_error(FSC_ERR_FORMAT, "%s is not an llm.c token shard: it does not begin with the magic %d%s",
                         name, FSC_DATA_LLMC_MAGIC, len < 4 ? " (shorter than 4 bytes)" : "");
    if (len < FSC_DATA_LLMC_HEADER)
        return fsc_error(FSC_ERR_FORMAT, "%s: %zu bytes, shorter than llm.c's %d-byte header", name, len,
                         FSC_DATA_LLMC_HEADER);
    uint32_t version = le32(buf + 4), count = le32(buf + 8);
    if (version != 1)
        return fsc_error(version == 2 ? FSC_ERR_UNSUPPORTED : FSC_ERR_FORMAT, "%s: llm.c shard version %u: fsc "
                         "reads version 1 (uint16 tokens)%s", name, version,
                         version == 2 ? "; version 2 holds uint32 tokens" : "");
    if (count > INT32_MAX)
        return fsc_error(FSC_ERR_FORMAT, "%s: the header's token count %d is negative", name, (int32_t)count);
    uint64_t body = (uint64_t)len - FSC_DATA_LLMC_HEADER;
    if (body != 2 * (uint64_t)count)
        return fsc_error(FSC_ERR_FORMAT, "%s: the header says %u tokens (%llu bytes after the %d-byte header), but "
                         "the file holds %llu bytes after it%s", name, count, 2 * (unsigned long long)count,
                         FSC_DATA_LLMC_HEADER, (unsigned long long)body,
                         body < 2 * (uint64_t)count ? " (truncated?)" : "");
    f->tok = buf + FSC_DATA_LLMC_HEADER, f->tok_off = FSC_DATA_LLMC_HEADER, f->ntok = count;
    return FSC_OK;
}

static fsc_status add_file(fsc_data *d, const char *path) {
    if (d->n == d->cap) {
        int cap = d->cap ? 2 * d->cap : 8;
        data_file *f = realloc(d->f, (size_t)cap * sizeof *f);
        if (!f) return fsc_error(FSC_ERR_NOMEM, "data: out of memory for the list of files");
        d->f = f, d->cap = cap;
    }
    data_file *f = &d->f[d->n];
    memset(f, 0, sizeof *f);
    if (!(f->path = strdup(path))) return fsc_error(FSC_ERR_NOMEM, "data: out of memory");
    d->n++;
    return FSC_OK;
}

/* Map file f (a regular file, refused before anything is read otherwise). */
static fsc_status map_file(data_file *f, const uint8_t **buf, size_t *len) {
    int fd = open(f->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO must not block: refused below */
    if (fd < 0) return fsc_error(FSC_ERR_IO, "%s: cannot open: %s", f->path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return fsc_error(FSC_ERR_IO, "%s: cannot stat: %s", f->path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        const char *kind = S_ISDIR(sb.st_mode) ? "a directory" : S_ISCHR(sb.st_mode) || S_ISBLK(sb.st_mode) ? "a device"
                         : S_ISFIFO(sb.st_mode) ? "a FIFO" : "not a file";
        return fsc_error(FSC_ERR_INVALID, "%s is %s: give a regular file of tokens", f->path, kind);
    }
    if ((uint64_t)sb.st_size > SIZE_MAX) {
        close(fd);
        return fsc_error(FSC_ERR_UNSUPPORTED, "%s: %lld bytes do not fit this machine's address space", f->path,
                         (long long)sb.st_size);
    }
    *len = (size_t)sb.st_size;
    *buf = (const uint8_t *)"";
    if (*len == 0) {
        close(fd);
        return FSC_OK;
    }
    void *map = mmap(NULL, *len, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (map == MAP_FAILED) return fsc_error(FSC_ERR_IO, "%s: cannot map %zu bytes: %s", f->path, *len, strerror(e));
    f->map = map, f->map_len = *len;
    *buf = map;
    return FSC_OK;
}

static fsc_status new_data(fsc_data **out, fsc_data_format format, int vocab) {
    *out = NULL;
    if (vocab < 1 || vocab > (1 << 24))
        return fsc_error(FSC_ERR_INVALID, "data: vocabulary size %d is not in 1 .. 2^24", vocab);
    if ((unsigned)format > FSC_DATA_U16) return fsc_error(FSC_ERR_INVALID, "data: unknown format %d", (int)format);
    fsc_data *d = calloc(1, sizeof *d);
    if (!d) return fsc_error(FSC_ERR_NOMEM, "data: out of memory");
    d->fmt = format, d->vocab = vocab;
    *out = d;
    return FSC_OK;
}

/* Parse file i (its image buf, len) into the stream: detect the format from the first file. */
static fsc_status take(fsc_data *d, int i, const uint8_t *buf, size_t len) {
    if (d->fmt == FSC_DATA_AUTO) FSC_TRY(detect(d->f[i].path, buf, len, d->vocab, &d->fmt));
    FSC_TRY(parse_file(&d->f[i], buf, len, d->fmt));
    d->f[i].first = d->ntok;
    d->ntok += d->f[i].ntok;
    return FSC_OK;
}

/* Add the paths of one item of a spec: a path, or a glob matching at least one file. */
static fsc_status add_item(fsc_data *d, const char *item) {
    if (!*item) return fsc_error(FSC_ERR_INVALID, "data: an empty path in the list of files");
    if (!strpbrk(item, "*?[")) return add_file(d, item);
    glob_t g;
    int rc = glob(item, GLOB_ERR, NULL, &g);
    if (rc == GLOB_NOMATCH) return fsc_error(FSC_ERR_INVALID, "%s matches no file", item);
    if (rc != 0) return fsc_error(FSC_ERR_IO, "%s: cannot read the folders of this pattern", item);
    fsc_status s = FSC_OK;
    for (size_t k = 0; k < g.gl_pathc && s == FSC_OK; k++) s = add_file(d, g.gl_pathv[k]);
    globfree(&g);
    return s;
}

fsc_status fsc_data_open(fsc_data **out, const char *spec, fsc_data_format format, int vocab) {
    FSC_CHECK_ARG(out);
    FSC_CHECK_ARG(spec);
    fsc_data *d = NULL;
    if (!out || !spec) return fsc_error(FSC_ERR_INVALID, "fsc_data_open: NULL argument");
    *out = NULL;
    FSC_TRY(new_data(&d, format, vocab));
    char *list = strdup(spec);
    fsc_status s = list ? FSC_OK : fsc_error(FSC_ERR_NOMEM, "data: out of memory");
    for (char *p = list, *next; s == FSC_OK && p; p = next) {
        next = strchr(p, ',');
        if (next) *next++ = '\0';
        s = add_item(d, p);
    }
    free(list);
    for (int i = 0; s == FSC_OK && i < d->n; i++) {
        const uint8_t *buf = NULL;
        size_t len = 0;
        s = map_file(&d->f[i], &buf, &len);
        if (s == FSC_OK) s = take(d, i, buf, len);
    }
    if (s != FSC_OK) {
        fsc_data_free(d);
        return s;
    }
    *out = d;
    return FSC_OK;
}

fsc_status fsc_data_open_memory(fsc_data **out, int n, const void *const *bufs, const size_t *lens,
                                fsc_data_format format, int vocab) {
    FSC_CHECK_ARG(out);
    FSC_CHECK_BUF(bufs, n);
    FSC_CHECK_BUF(lens, n);
    fsc_data *d = NULL;
    if (!out || n < 1 || !bufs || !lens) return fsc_error(FSC_ERR_INVALID, "fsc_data_open_memory: no files");
    *out = NULL;
    FSC_TRY(new_data(&d, format, vocab));
    fsc_status s = FSC_OK;
    for (int i = 0; i < n && s == FSC_OK; i++) {
        char name[32];
        snprintf(name, sizeof name, "memory[%d]", i);
        s = add_file(d, name);
        if (s == FSC_OK) s = take(d, i, bufs[i] ? bufs[i] : (const void *)"", bufs[i] ? lens[i] : 0);
    }
    if (s != FSC_OK) {
        fsc_data_free(d);
        return s;
    }
    *out = d;
    return FSC_OK;
}

void fsc_data_free(fsc_data *d) {
    if (!d) return;
    for (int i = 0; i < d->n; i++) {
        if (d->f[i].map) munmap(d->f[i].map, d->f[i].map_len);
        free(d->f[i].path);
    }
    free(d->f);
    free(d);
}

uint64_t fsc_data_tokens(const fsc_data *d) { return d ? d->ntok : 0; }
fsc_data_format fsc_data_format_of(const fsc_data *d) { return d ? d->fmt : FSC_DATA_AUTO; }
int fsc_data_files(const fsc_data *d) { return d ? d->n : 0; }
const char *fsc_data_file(const fsc_data *d, int i) { return d && i >= 0 && i < d->n ? d->f[i].path : NULL; }
uint64_t fsc_data_file_tokens(const fsc_data *d, int i) { return d && i >= 0 && i < d->n ? d->f[i].ntok : 0; }

/* The file holding stream position pos (< d->ntok): the last file whose first token is at or before it and
 * that has tokens. */
static int file_at(const fsc_data *d, uint64_t pos) {
    int lo = 0, hi = d->n - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (d->f[mid].first <= pos) lo = mid;
        else hi = mid - 1;
    }
    while (d->f[lo].ntok == 0 || pos - d->f[lo].first >= d->f[lo].ntok) lo++; /* empty files share a start */
    return lo;
}

/* Token k of file f: a byte, or a little-endian uint16 (llmc, u16). */
static uint32_t token_at(const fsc_data *d, const data_file *f, uint64_t k) {
    return d->fmt == FSC_DATA_BYTES ? f->tok[k] : (uint32_t)f->tok[2 * k] | (uint32_t)f->tok[2 * k + 1] << 8;
}

static fsc_status bad_token(const fsc_data *d, const data_file *f, uint64_t k, uint32_t v) {
    int w = d->fmt == FSC_DATA_BYTES ? 1 : 2;
    return fsc_error(FSC_ERR_FORMAT, "%s: token %u at offset %llu (byte %llu of the file) is not below the "
                     "vocabulary size %d", f->path, v, (unsigned long long)k,
                     (unsigned long long)(f->tok_off + k * (uint64_t)w), d->vocab);
}

fsc_status fsc_data_read(const fsc_data *d, uint64_t pos, size_t n, int32_t *out) {
    FSC_CHECK_ARG(d);
    FSC_CHECK_BUF(out, n);
    if (!d || (n && !out)) return fsc_error(FSC_ERR_INVALID, "fsc_data_read: NULL argument");
    if (pos > d->ntok || n > d->ntok - pos)
        return fsc_error(FSC_ERR_INVALID, "data: tokens %llu .. %llu asked for, but the stream holds %llu",
                         (unsigned long long)pos, (unsigned long long)pos + n, (unsigned long long)d->ntok);
    uint32_t vocab = (uint32_t)d->vocab;
    int i = n ? file_at(d, pos) : 0;
    for (size_t got = 0; got < n; i++) {
        const data_file *f = &d->f[i];
        uint64_t k = pos + got - f->first;
        size_t m = f->ntok - k < n - got ? (size_t)(f->ntok - k) : n - got;
        for (size_t j = 0; j < m; j++, k++) {
            uint32_t v = token_at(d, f, k);
            if (v >= vocab) return bad_token(d, f, k, v);
            out[got + j] = (int32_t)v;
        }
        got += m;
    }
    return FSC_OK;
}

fsc_status fsc_data_check(const fsc_data *d) {
    FSC_CHECK_ARG(d);
    if (d->fmt == FSC_DATA_BYTES && d->vocab >= 256) return FSC_OK;
    if (d->fmt != FSC_DATA_BYTES && d->vocab >= 65536) return FSC_OK;
    for (int i = 0; i < d->n; i++) {
        const data_file *f = &d->f[i];
        if (f->map) madvise(f->map, f->map_len, MADV_SEQUENTIAL);
        for (uint64_t k = 0; k < f->ntok; k++) {
            uint32_t v = token_at(d, f, k);
            if (v >= (uint32_t)d->vocab) return bad_token(d, f, k, v);
        }
    }
    return FSC_OK;
}

uint64_t fsc_data_seq_start(uint64_t ntokens, int64_t step, int batch, int seq, int64_t i) {
    if (ntokens <= (uint64_t)seq || seq < 0) return 0;
    return (((uint64_t)step * (uint64_t)batch + (uint64_t)i) * (uint64_t)seq) % (ntokens - (uint64_t)seq);
}

fsc_status fsc_data_batch(const fsc_data *d, int64_t step, int batch, int seq, int first, int count,
                          int32_t *tok, int32_t *tgt) {
    FSC_CHECK_ARG(d);
    FSC_CHECK_BUF(tok, count);
    FSC_CHECK_BUF(tgt, count);
    if (!d || ((!tok || !tgt) && count > 0)) return fsc_error(FSC_ERR_INVALID, "fsc_data_batch: NULL argument");
    if (step < 0 || batch < 1 || seq < 1 || first < 0 || count < 0 || count > batch - first)
        return fsc_error(FSC_ERR_INVALID, "data: sequences %d .. %d of a batch of %d (step %lld, context %d)", first,
                         first + count - 1, batch, (long long)step, seq);
    if (d->ntok <= (uint64_t)seq)
        return fsc_error(FSC_ERR_INVALID, "data: %llu tokens, but a context of %d needs at least %d",
                         (unsigned long long)d->ntok, seq, seq + 1);
    size_t T = (size_t)seq;
    for (int j = 0; j < count; j++) {
        uint64_t start = fsc_data_seq_start(d->ntok, step, batch, seq, (int64_t)first + j);
        int32_t *x = tok + (size_t)j * T, *y = tgt + (size_t)j * T;
        FSC_TRY(fsc_data_read(d, start, T, x));
        memcpy(y, x + 1, (T - 1) * sizeof *y);
        FSC_TRY(fsc_data_read(d, start + T, 1, y + T - 1));
    }
    return FSC_OK;
}
