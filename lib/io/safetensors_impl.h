/* Private to lib/io: what the safetensors reader (safetensors.c) and writer (safetensors_write.c) share. */
#ifndef FSC_SAFETENSORS_IMPL_H
#define FSC_SAFETENSORS_IMPL_H
#include <stdint.h>
#include <string.h>
#include "fsc/safetensors.h"

#define MAX_JSON_INT ((uint64_t)1 << 53) /* integers above this do not survive a JSON double */

size_t st_size(fsc_dtype dt);      /* bytes per element of a dtype safetensors files may hold; 0 for others */
const char *st_name(fsc_dtype dt); /* its safetensors name ("F32", ...); "?" for others */

/* Elements of a shape; 0 with *overflow set if the product does not fit 64 bits. */
uint64_t st_shape_numel(int ndim, const int64_t *shape, int *overflow);

/* FSC_ERR_INVALID, naming what (a path), unless elements [first, first + n) lie inside tensor e. */
fsc_status st_check_range(const char *what, const fsc_st_entry *e, uint64_t first, uint64_t n);

/* The dtype named by s (len bytes) for tensor name of file what: for a valid safetensors dtype fsc does not read,
 * FSC_DTYPE_COUNT with *other its name, *why "dtype " and its name (static) and *other_size its bytes per element
 * (0: packed under a byte); otherwise *other and *why NULL. FSC_ERR_FORMAT for an unknown name. */
fsc_status st_dtype_of(const char *what, const char *name, const char *s, size_t len, fsc_dtype *dt,
                       const char **other, const char **why, size_t *other_size);

/* A parsed header (safetensors_header.c): entries in header order, metadata as sorted key, value pairs
 * (meta is one allocation holding the pointers and the text). */
typedef struct {
    fsc_st_entry *e;
    int n;
    char **meta;
    int n_meta;
} st_header;

/* Parse and validate the header text hdr[0, hlen) of file what, each entry on its own (the layout across
 * entries is the caller's). hdr is modified (strings are unescaped in place). On failure *h holds what was
 * made so far: free it with st_header_free either way. */
fsc_status st_parse_header(const char *what, char *hdr, size_t hlen, st_header *h);
void st_header_free(st_header *h);

static inline const char *errstr(int err, char *buf, size_t cap) { return strerror_r(err, buf, cap); }

#endif
