/* safetensors files (https://github.com/huggingface/safetensors): 8-byte little-endian header length,
 * a JSON header {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}},
 * then the data. The reader validates everything before use: lengths, offsets inside the file, offsets
 * that do not overlap and cover the data, shapes that match the byte counts, known dtypes, no duplicates,
 * strict JSON. A header above FSC_ST_MAX_HEADER is refused as too large before it is read, and parsing one
 * allocates at most about 6 bytes per byte read, whatever the header holds.
 * The writer writes to "<path>.tmp", fsyncs and renames, so a crash never leaves half a file at path. */
#ifndef FSC_SAFETENSORS_H
#define FSC_SAFETENSORS_H
#include "export.h"
#include <stddef.h>
#include <stdint.h>
#include "status.h"
#include "dtype.h"

FSC_BEGIN_DECLS

#define FSC_ST_MAX_NAME 160
/* The "__metadata__" key under which fsc's full-weights files record the model's configuration (model.h's config
 * text), so a program can build the model a file holds (generate.h's fsc_model_from_config). */
#define FSC_ST_META_MODEL "fsc_model"

#define FSC_ST_MAX_HEADER 100000000u /* headers above 100 MB are refused, as Hugging Face's safetensors does */

typedef struct {
    char name[FSC_ST_MAX_NAME];
    fsc_dtype dtype;       /* F32, BF16, F16, I32, U8 are understood; FSC_DTYPE_COUNT for an unreadable entry */
    int ndim;              /* 0..4 (0 for an unreadable entry of more dimensions) */
    int64_t shape[4];
    uint64_t begin, end;   /* byte offsets within the data section */
    const char *unreadable; /* NULL, or why fsc cannot read the entry (a static string): "dtype I64" (another valid
                             * safetensors dtype, such as Hugging Face's integer and boolean buffers) or "more than 4
                             * dimensions". Such an entry is listed and its bytes placed, so that a file is valid
                             * whatever it holds beside what a program reads; reading it fails with this reason */
} fsc_st_entry;

typedef struct fsc_st_file fsc_st_file;

/* Open and validate a file. The message names the file and the problem. */
fsc_status fsc_st_open(const char *path, fsc_st_file **out);
/* Validate a whole file image held in memory (used by the fuzz harness and tests). */
fsc_status fsc_st_parse_buffer(const void *buf, size_t len, fsc_st_file **out);
void fsc_st_close(fsc_st_file *f);
int fsc_st_count(const fsc_st_file *f);
const fsc_st_entry *fsc_st_entry_at(const fsc_st_file *f, int i);
const fsc_st_entry *fsc_st_find(const fsc_st_file *f, const char *name);
/* A value of the "__metadata__" object (strings only), or NULL. */
const char *fsc_st_metadata(const fsc_st_file *f, const char *key);
/* Read elements [first, first+n) of entry e into host memory dst. */
fsc_status fsc_st_read(fsc_st_file *f, const fsc_st_entry *e, void *dst, uint64_t first, uint64_t n);

/* Full-weights files of other programs (safetensors_weights.c). The entry of a model's tensor called name: name
 * itself, else name under the base-model prefix of Hugging Face's head classes ("transformer." + name, as
 * GPT2LMHeadModel's state dict holds GPT2Model's tensors); NULL if neither is there. fsc_st_weight_name: an
 * entry's name without such a prefix (the entry name itself when it has none). */
const fsc_st_entry *fsc_st_find_weight(const fsc_st_file *f, const char *name);
/* fsc_st_find_weight's entry into *out (NULL if absent), refused (FSC_ERR_FORMAT; path, which may be NULL, names
 * the file) where f holds the tensor under both names, its own and the prefixed one: which one was meant is unknown. */
fsc_status fsc_st_find_weight_once(const fsc_st_file *f, const char *name, const char *path, const fsc_st_entry **out);
const char *fsc_st_weight_name(const char *entry_name);
/* Read elements [first, first+n) of a float entry (F32, BF16 or F16) as float32 (exact: every BF16 and F16 value
 * is a float32); FSC_ERR_FORMAT for any other dtype. */
fsc_status fsc_st_read_f32(fsc_st_file *f, const fsc_st_entry *e, float *dst, uint64_t first, uint64_t n);
/* When f holds both the tensor `name` (found as fsc_st_find_weight does) and `copy` (exactly that name: another
 * name of the same values, such as a tied head: model.h's alias), the copy must have its shape and equal values after conversion
 * to float32; FSC_ERR_FORMAT naming the first differing element otherwise (path names the file). FSC_OK when
 * either is absent. */
fsc_status fsc_st_check_copy(fsc_st_file *f, const char *name, const char *copy, const char *path);

/* Writing: declare every tensor (name, dtype, shape) and optional metadata, then write the data of each
 * tensor in any order and in pieces, then commit. */
typedef struct fsc_st_writer fsc_st_writer;
fsc_status fsc_st_writer_open(const char *path, fsc_st_writer **out);
fsc_status fsc_st_writer_add(fsc_st_writer *w, const char *name, fsc_dtype dt, int ndim, const int64_t *shape);
fsc_status fsc_st_writer_meta(fsc_st_writer *w, const char *key, const char *value);
/* After the last add: writes the header. Then write elements [first, first+n) of tensor index i. */
fsc_status fsc_st_writer_begin_data(fsc_st_writer *w);
fsc_status fsc_st_writer_write(fsc_st_writer *w, int i, const void *src, uint64_t first, uint64_t n);
/* The same from float32 values, rounded (to nearest, ties to even) to the tensor's dtype: F32, BF16 or F16. */
fsc_status fsc_st_writer_write_f32(fsc_st_writer *w, int i, const float *src, uint64_t first, uint64_t n);
/* fsync, rename to path, fsync the directory. */
fsc_status fsc_st_writer_commit(fsc_st_writer *w);
/* Abandon: removes the temporary file (also frees w after a failed commit). */
void fsc_st_writer_abort(fsc_st_writer *w);
/* Remove what writers of path killed before their commit left (their temporary files): the files of path's
 * directory named exactly "<name>.tmp.<pid>.<k>" (name: path's last component; pid and k decimal) that are
 * regular files of this user whose process is no longer running on this machine (path a link to a file: beside the
 * file it points to, where fsc_st_writer_open writes). Never another name, a link,
 * this process's own, or a live process's (a writer on another machine writing the same path is not seen:
 * two writers of one path are a conflict anyway). *removed (may be NULL) counts them; FSC_ERR_IO only when the
 * directory cannot be listed (a missing one holds none). */
fsc_status fsc_st_remove_leftovers(const char *path, int *removed);

FSC_END_DECLS

#endif
