/* Token datasets (data.h): the files of a spec, each checked for its format's structure when opened, and read
 * as one stream of tokens by position with pread (no mapping: a file that shrinks under a run is an error that
 * names it, not a SIGBUS, and a stream of any number of files costs no mappings or descriptors between reads).
 * Token values are checked as they are read.
 *
 * Not here: which sequences a step takes beyond the one formula of the data order (the trainer splits a
 * global batch over its ranks), tokenizers (the files hold token ids). */
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "fsc/data.h"

typedef struct {
    char *path;          /* name in messages */
    char *at;            /* what each read opens: path, relative ones resolved against the working directory at
                          * open (a later chdir of the program does not move the stream) */
    const uint8_t *mem;  /* a memory image (fsc_data_open_memory); NULL: the file at path, read with pread */
    uint64_t size;       /* its bytes when opened; every read checks the file still has them */
    dev_t dev;           /* the file's identity when opened (a file renamed over it is refused) */
    ino_t ino;
    uint64_t ntok;       /* tokens in this file */
    uint64_t first;      /* its first token's position in the stream */
    uint64_t tok_off;    /* byte offset of the first token in the file (the llm.c header) */
} data_file;

struct fsc_data {
    fsc_data_format fmt;
    int detected;        /* the format was auto's, detected from file `from` */
    int from;
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

static int has_magic(const uint8_t *buf, uint64_t len) {
    return len >= 4 && le32(buf) == FSC_DATA_LLMC_MAGIC;
}

/* Decide the format of the stream from its first file (AUTO only). */
static fsc_status detect(const char *name, const uint8_t *buf, uint64_t len, int vocab, fsc_data_format *fmt) {
    if (has_magic(buf, len)) *fmt = FSC_DATA_LLMC;
    else if (vocab <= 256) *fmt = FSC_DATA_BYTES;
    else
        return fsc_error(FSC_ERR_INVALID, "%s has no llm.c header and the vocabulary (%d) is above 256, so its "
                         "bytes cannot be the tokens: give the format u16 for headerless uint16 tokens (nanoGPT's "
                         "train.bin) or bytes", name, vocab);
    return FSC_OK;
}

/* Check one file against the stream's format and fill in where its tokens lie: buf holds its first
 * min(len, FSC_DATA_LLMC_HEADER) bytes (or all of a memory image), len is its size. */
static fsc_status parse_file(data_file *f, const uint8_t *buf, uint64_t len, fsc_data_format fmt, const char *from) {
    const char *name = f->path;
    f->tok_off = 0;
    if (fmt != FSC_DATA_LLMC && has_magic(buf, len))
        return fsc_error(FSC_ERR_FORMAT, "%s begins with llm.c's magic %d: it is an llm.c token shard, not %s (%s%s%s)",
                         name, FSC_DATA_LLMC_MAGIC, fmt == FSC_DATA_BYTES ? "bytes" : "headerless uint16 tokens",
                         from ? "the stream's format, detected from its first file " : "read it with the format llmc",
                         from ? from : "", from ? ": the files of one stream share one format" : "");
    if (fmt == FSC_DATA_BYTES) {
        f->ntok = len;
        return FSC_OK;
    }
    if (fmt == FSC_DATA_U16) {
        if (len % 2)
            return fsc_error(FSC_ERR_FORMAT, "%s: %llu bytes, not a multiple of 2: not a file of uint16 tokens",
                             name, (unsigned long long)len);
        f->ntok = len / 2;
        return FSC_OK;
    }
    if (!has_magic(buf, len))
        return fsc_error(FSC_ERR_FORMAT, "%s is not an llm.c token shard: it does not begin with the magic %d%s",
                         name, FSC_DATA_LLMC_MAGIC, len < 4 ? " (shorter than 4 bytes)" : "");
    if (len < FSC_DATA_LLMC_HEADER)
        return fsc_error(FSC_ERR_FORMAT, "%s: %llu bytes, shorter than llm.c's %d-byte header", name,
                         (unsigned long long)len, FSC_DATA_LLMC_HEADER);
    uint32_t version = le32(buf + 4), count = le32(buf + 8);
    if (version != 1)
        return fsc_error(version == 2 ? FSC_ERR_UNSUPPORTED : FSC_ERR_FORMAT, "%s: llm.c shard version %u: fsc "
                         "reads version 1 (uint16 tokens)%s", name, version,
                         version == 2 ? "; version 2 holds uint32 tokens" : "");
    if (count > INT32_MAX)
        return fsc_error(FSC_ERR_FORMAT, "%s: the header's token count %d is negative", name, (int32_t)count);
    uint64_t body = len - FSC_DATA_LLMC_HEADER;
    if (body != 2 * (uint64_t)count)
        return fsc_error(FSC_ERR_FORMAT, "%s: the header says %u tokens (%llu bytes after the %d-byte header), but "
                         "the file holds %llu bytes after it%s", name, count, 2 * (unsigned long long)count,
                         FSC_DATA_LLMC_HEADER, (unsigned long long)body,
                         body < 2 * (uint64_t)count ? " (truncated?)" : "");
    f->tok_off = FSC_DATA_LLMC_HEADER, f->ntok = count;
    return FSC_OK;
}

/* Add file path to the stream; cwd: the working directory at open that a relative path is read from (NULL: path
 * as it is, a memory image's name or when the directory has no name). */
static fsc_status add_file(fsc_data *d, const char *path, const char *cwd) {
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
    if (!cwd || path[0] == '/' || strlen(cwd) + strlen(path) + 2 > PATH_MAX) f->at = strdup(path); /* too long to
                                                                   * open joined: relative, as without a name */
    else if ((f->at = malloc(strlen(cwd) + strlen(path) + 2))) sprintf(f->at, "%s/%s", cwd, path);
    return f->at ? FSC_OK : fsc_error(FSC_ERR_NOMEM, "data: out of memory");
}

/* For the message on a path that names nothing: a note when it begins or ends with white space, which is part of
 * the name but not seen in the message ("a.bin, b.bin": the list is split at the commas alone), else "". */
static const char *space_note(const char *path) {
    const size_t n = strlen(path);
    if (n == 0 || (!strchr(" \t\n\r\v\f", path[0]) && !strchr(" \t\n\r\v\f", path[n - 1]))) return "";
    return " (the name begins or ends with white space, which is part of it: a list of files is split at its commas "
           "alone, so give \"a.bin,b.bin\", without spaces)";
}

/* Open file f for reading into *fd, its status in *sb: a regular file (refused before anything is read
 * otherwise; a kind named "now" when the file was opened before, as a replacement). */
static fsc_status open_file(const data_file *f, int *fd, struct stat *sb, const char *now) {
    int d = open(f->at, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO must not block: refused below */
    if (d < 0) {
        const int e = errno;
        return fsc_error(FSC_ERR_IO, "%s: cannot open: %s%s", f->path, strerror(e),
                         e == ENOENT ? space_note(f->path) : "");
    }
    if (fstat(d, sb) != 0) {
        int e = errno;
        close(d);
        return fsc_error(FSC_ERR_IO, "%s: cannot stat: %s", f->path, strerror(e));
    }
    if (!S_ISREG(sb->st_mode)) {
        close(d);
        const char *kind = S_ISDIR(sb->st_mode) ? "a directory" : S_ISCHR(sb->st_mode) || S_ISBLK(sb->st_mode)
                         ? "a device" : S_ISFIFO(sb->st_mode) ? "a FIFO" : "not a file";
        return fsc_error(*now ? FSC_ERR_IO : FSC_ERR_INVALID, "%s is %s%s: give a regular file of tokens", f->path,
                         now, kind);
    }
    *fd = d;
    return FSC_OK;
}

/* Bytes [off, off + len) of open file f into dst; a file that ends early shrank after it was opened. */
static fsc_status pread_all(const data_file *f, int fd, uint64_t off, size_t len, uint8_t *dst) {
    for (size_t got = 0; got < len;) {
        ssize_t r = pread(fd, dst + got, len - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return fsc_error(FSC_ERR_IO, "%s: cannot read: %s", f->path, strerror(errno));
        if (r == 0)
            return fsc_error(FSC_ERR_IO, "%s: the file ends at byte %llu, but it held %llu bytes when opened: it was "
                             "truncated while in use", f->path, (unsigned long long)(off + got),
                             (unsigned long long)f->size);
        got += (size_t)r;
    }
    return FSC_OK;
}

/* Bytes [off, off + len) of file f (its image, or the file opened for this read, which must still be the file
 * opened first, of the same size) into dst. */
static fsc_status read_bytes(const data_file *f, uint64_t off, size_t len, uint8_t *dst) {
    if (f->mem) {
        memcpy(dst, f->mem + off, len);
        return FSC_OK;
    }
    int fd = -1;
    struct stat sb;
    FSC_TRY(open_file(f, &fd, &sb, "now "));
    fsc_status s = FSC_OK;
    if (sb.st_dev != f->dev || sb.st_ino != f->ino || (uint64_t)sb.st_size != f->size)
        s = fsc_error(FSC_ERR_IO, "%s changed while in use: %s (%llu bytes when opened, %lld now); the files of a "
                      "stream must not change while it is read", f->path, sb.st_dev != f->dev || sb.st_ino != f->ino
                      ? "another file took its name" : (uint64_t)sb.st_size < f->size ? "it was truncated"
                      : "its size changed", (unsigned long long)f->size, (long long)sb.st_size);
    if (s == FSC_OK) s = pread_all(f, fd, off, len, dst);
    close(fd);
    return s;
}

/* Open file f, record its size and identity, and read its first bytes, up to an llm.c header, into head. */
static fsc_status probe_file(data_file *f, uint8_t *head, size_t *hlen) {
    int fd = -1;
    struct stat sb;
    FSC_TRY(open_file(f, &fd, &sb, ""));
    f->size = (uint64_t)sb.st_size, f->dev = sb.st_dev, f->ino = sb.st_ino;
    *hlen = f->size < FSC_DATA_LLMC_HEADER ? (size_t)f->size : FSC_DATA_LLMC_HEADER;
    fsc_status s = pread_all(f, fd, 0, *hlen, head);
    close(fd);
    return s;
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

/* Parse file i (its first bytes buf, its size len) into the stream: detect the format from the first file. */
static fsc_status take(fsc_data *d, int i, const uint8_t *buf, uint64_t len) {
    d->f[i].first = d->ntok;
    if (len == 0) return FSC_OK; /* an empty file adds nothing in any format, and tells none */
    if (d->fmt == FSC_DATA_AUTO) {
        FSC_TRY(detect(d->f[i].path, buf, len, d->vocab, &d->fmt));
        d->detected = 1, d->from = i;
    }
    FSC_TRY(parse_file(&d->f[i], buf, len, d->fmt, d->detected && d->from != i ? d->f[d->from].path : NULL));
    d->ntok += d->f[i].ntok;
    return FSC_OK;
}

/* A stream of empty files only (auto detected nothing): bytes, as detect reads a file without the magic, where the
 * vocabulary allows them; above 256 the emptiness is the error, not the format (detect's advice to give u16 would
 * lead to a stream of no tokens). */
static fsc_status settle(fsc_data *d) {
    if (d->fmt != FSC_DATA_AUTO || d->n == 0) return FSC_OK;
    if (d->vocab <= 256) return d->fmt = FSC_DATA_BYTES, FSC_OK;
    return fsc_error(FSC_ERR_INVALID, "%s%s empty: the stream holds no tokens (and auto no bytes to tell its format "
                     "by)", d->f[0].path, d->n > 1 ? " and every other file of the stream are" : " is");
}

/* glob(3)'s folder that could not be read, for the message (glob's callback has no argument of its own: a thread's
 * own copy) */
static _Thread_local char *glob_failed;
static _Thread_local int glob_errno;
static int glob_error(const char *path, int err) {
    if (!glob_failed) glob_failed = strdup(path), glob_errno = err;
    return 1; /* stop: GLOB_ERR */
}

/* Add the paths of one item of a spec: a path, or a glob matching at least one file. */
static fsc_status add_item(fsc_data *d, const char *item, const char *cwd) {
    struct stat sb;
    if (!strpbrk(item, "*?[") || stat(item, &sb) == 0) /* a file named x[1].bin is itself */
        return add_file(d, item, cwd);
    glob_t g;
    glob_failed = NULL, glob_errno = 0;
    int rc = glob(item, GLOB_ERR, glob_error, &g);
    if (rc == GLOB_NOMATCH)
        return free(glob_failed), glob_failed = NULL, fsc_error(FSC_ERR_INVALID, "%s matches no file%s", item,
                                                                space_note(item));
    if (rc != 0) {
        fsc_status s = fsc_error(FSC_ERR_IO, "%s: cannot read the folder%s%s of this pattern%s%s%s", item,
                                 glob_failed ? " " : "s", glob_failed ? glob_failed : "", glob_errno ? ": " : "",
                                 glob_errno ? strerror(glob_errno) : "", glob_errno == ENOENT ? space_note(item) : "");
        free(glob_failed), glob_failed = NULL;
        if (rc != GLOB_NOSPACE) globfree(&g);
        return s;
    }
    fsc_status s = FSC_OK;
    for (size_t k = 0; k < g.gl_pathc && s == FSC_OK; k++) s = add_file(d, g.gl_pathv[k], cwd);
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
    char *list = strdup(spec), *cwd = getcwd(NULL, 0); /* no name (removed, too long): relative paths stay so */
    fsc_status s = list ? FSC_OK : fsc_error(FSC_ERR_NOMEM, "data: out of memory");
    int items = 1, item = 1;
    for (const char *c = spec; *c; c++) items += *c == ',';
    struct stat sb;
    if (s == FSC_OK && strspn(spec, ",") == strlen(spec))
        s = fsc_error(FSC_ERR_INVALID, "\"%s\": the list of files is empty", spec);
    else if (s == FSC_OK && strchr(spec, ',') && stat(spec, &sb) == 0) /* a file named a,b.bin is itself */
        s = add_file(d, spec, cwd), list[0] = '\0';
    for (char *p = list, *next; s == FSC_OK && p && *list; p = next, item++) {
        next = strchr(p, ',');
        if (next) *next++ = '\0';
        s = *p ? add_item(d, p, cwd) : fsc_error(FSC_ERR_INVALID, "\"%s\": entry %d of %d is an empty path in the "
                                                 "list of files (a comma too many?)", spec, item, items);
    }
    free(list), free(cwd);
    for (int i = 0; s == FSC_OK && i < d->n; i++) {
        uint8_t head[FSC_DATA_LLMC_HEADER];
        size_t hlen = 0;
        s = probe_file(&d->f[i], head, &hlen);
        if (s == FSC_OK) s = take(d, i, head, d->f[i].size);
    }
    if (s == FSC_OK) s = settle(d);
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
        if (!bufs[i] && lens[i] > 0) { /* an image that is not there, not an empty one */
            s = fsc_error(FSC_ERR_INVALID, "fsc_data_open_memory: bufs[%d] is NULL for %zu bytes", i, lens[i]);
            break;
        }
        char name[32];
        snprintf(name, sizeof name, "memory[%d]", i);
        s = add_file(d, name, NULL);
        if (s != FSC_OK) break;
        d->f[i].mem = bufs[i] ? bufs[i] : (const uint8_t *)""; /* NULL of 0 bytes: an empty file */
        d->f[i].size = bufs[i] ? lens[i] : 0;
        s = take(d, i, d->f[i].mem, d->f[i].size);
    }
    if (s == FSC_OK) s = settle(d);
    if (s != FSC_OK) {
        fsc_data_free(d);
        return s;
    }
    *out = d;
    return FSC_OK;
}

void fsc_data_free(fsc_data *d) {
    if (!d) return;
    for (int i = 0; i < d->n; i++) free(d->f[i].path), free(d->f[i].at);
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

static fsc_status bad_token(const fsc_data *d, const data_file *f, uint64_t k, uint32_t v) {
    int w = d->fmt == FSC_DATA_BYTES ? 1 : 2;
    return fsc_error(FSC_ERR_FORMAT, "%s: token %u at offset %llu (byte %llu of the file) is not below the "
                     "vocabulary size %d", f->path, v, (unsigned long long)k,
                     (unsigned long long)(f->tok_off + k * (uint64_t)w), d->vocab);
}

/* Tokens k0 .. k0+m-1 of file f into out (m int32): a byte or a little-endian uint16 each (llmc, u16), read into
 * the start of out and widened in place from the last (token j's int32 covers only bytes of tokens j and later,
 * and token j is read before it is written); the first token not below the vocabulary is the error. */
static fsc_status read_tokens(const fsc_data *d, const data_file *f, uint64_t k0, size_t m, int32_t *out) {
    const size_t w = d->fmt == FSC_DATA_BYTES ? 1 : 2;
    uint8_t *raw = (uint8_t *)out;
    FSC_TRY(read_bytes(f, f->tok_off + k0 * w, m * w, raw));
    size_t bad = m;
    for (size_t j = m; j-- > 0;) {
        uint32_t v = w == 1 ? raw[j] : (uint32_t)raw[2 * j] | (uint32_t)raw[2 * j + 1] << 8;
        if (v >= (uint32_t)d->vocab) bad = j;
        out[j] = (int32_t)v;
    }
    return bad < m ? bad_token(d, f, k0 + bad, (uint32_t)out[bad]) : FSC_OK;
}

fsc_status fsc_data_read(const fsc_data *d, uint64_t pos, size_t n, int32_t *out) {
    FSC_CHECK_ARG(d);
    FSC_CHECK_BUF(out, n);
    if (!d || (n && !out)) return fsc_error(FSC_ERR_INVALID, "fsc_data_read: NULL argument");
    if (pos > d->ntok || n > d->ntok - pos)
        return fsc_error(FSC_ERR_INVALID, "data: tokens %llu .. %llu asked for, but the stream holds %llu",
                         (unsigned long long)pos, (unsigned long long)pos + n, (unsigned long long)d->ntok);
    int i = n ? file_at(d, pos) : 0;
    for (size_t got = 0; got < n; i++) {
        const data_file *f = &d->f[i];
        uint64_t k = pos + got - f->first;
        size_t m = f->ntok - k < n - got ? (size_t)(f->ntok - k) : n - got;
        FSC_TRY(read_tokens(d, f, k, m, out + got));
        got += m;
    }
    return FSC_OK;
}

fsc_status fsc_data_check(const fsc_data *d) {
    FSC_CHECK_ARG(d);
    if (d->fmt == FSC_DATA_BYTES && d->vocab >= 256) return FSC_OK;
    if (d->fmt != FSC_DATA_BYTES && d->vocab >= 65536) return FSC_OK;
    const size_t chunk = (size_t)1 << 20; /* tokens per read (a 4 MiB buffer), whatever the files' sizes */
    int32_t *buf = malloc(chunk * sizeof *buf);
    if (!buf) return fsc_error(FSC_ERR_NOMEM, "fsc_data_check: out of memory");
    fsc_status s = FSC_OK;
    for (int i = 0; i < d->n && s == FSC_OK; i++) {
        const data_file *f = &d->f[i];
        for (uint64_t k = 0; k < f->ntok && s == FSC_OK; k += chunk)
            s = read_tokens(d, f, k, f->ntok - k < chunk ? (size_t)(f->ntok - k) : chunk, buf);
    }
    free(buf);
    return s;
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
    /* each named: the range's message below blamed the sequences for a batch or context of 0 */
    if (step < 0) return fsc_error(FSC_ERR_INVALID, "data: step %lld is negative", (long long)step);
    if (batch < 1) return fsc_error(FSC_ERR_INVALID, "data: a batch of %d sequences (need at least 1)", batch);
    if (seq < 1) return fsc_error(FSC_ERR_INVALID, "data: a context of %d tokens (need at least 1)", seq);
    if (first < 0 || count < 0 || count > batch - first) /* the last one in long long: first + count may pass int */
        return fsc_error(FSC_ERR_INVALID, "data: sequences %d .. %lld of a batch of %d (step %lld, context %d)", first,
                         (long long)first + count - 1, batch, (long long)step, seq);
    if (d->ntok <= (uint64_t)seq)
        return fsc_error(FSC_ERR_INVALID, "data: %llu tokens, but a context of %d needs at least %lld",
                         (unsigned long long)d->ntok, seq, (long long)seq + 1);
    size_t T = (size_t)seq;
    int32_t row[1025]; /* a context of up to 1024: its T + 1 tokens in one read (each read opens the file) */
    for (int j = 0; j < count; j++) {
        uint64_t start = fsc_data_seq_start(d->ntok, step, batch, seq, (int64_t)first + j);
        int32_t *x = tok + (size_t)j * T, *y = tgt + (size_t)j * T;
        if (T < sizeof row / sizeof *row) {
            FSC_TRY(fsc_data_read(d, start, T + 1, row));
            memcpy(x, row, T * sizeof *x);
            memcpy(y, row + 1, T * sizeof *y);
            continue;
        }
        FSC_TRY(fsc_data_read(d, start, T, x));
        memcpy(y, x + 1, (T - 1) * sizeof *y);
        FSC_TRY(fsc_data_read(d, start + T, 1, y + T - 1));
    }
    return FSC_OK;
}
