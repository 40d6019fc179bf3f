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

static inline const char *errstr(int err, char *buf, size_t cap) { return strerror_r(err, buf, cap); }

#endif
