/* Tensors: a typed, shaped view of device (or host) memory. A tensor does not own its memory;
 * views share it. Strides are in elements; a tensor made by fsc_tensor_make is contiguous, row-major. */
#ifndef FSC_TENSOR_H
#define FSC_TENSOR_H
#include "export.h"
#include <stdint.h>
#include "status.h"
#include "dtype.h"

FSC_BEGIN_DECLS

#define FSC_MAX_DIMS 4

typedef struct fsc_device fsc_device;

typedef struct {
    void *data;                   /* first element */
    fsc_dtype dtype;
    int ndim;
    int64_t shape[FSC_MAX_DIMS];
    int64_t stride[FSC_MAX_DIMS]; /* in elements */
    fsc_device *dev;              /* where data lives; NULL for host memory */
} fsc_tensor;

/* A contiguous tensor over data (shape NULL with ndim > 0, or ndim outside 0..FSC_MAX_DIMS: the empty tensor, data
 * NULL, which every op refuses). */
fsc_tensor fsc_tensor_make(void *data, fsc_dtype dtype, int ndim, const int64_t *shape, fsc_device *dev);
int64_t fsc_tensor_numel(const fsc_tensor *t);
size_t fsc_tensor_nbytes(const fsc_tensor *t);   /* numel x element size (contiguous extent); SIZE_MAX when no memory
                                                  * holds it (more than SIZE_MAX bytes, a negative size) */
int fsc_tensor_is_contiguous(const fsc_tensor *t);
/* Rows [start, start+len) of dimension 0. */
fsc_status fsc_tensor_narrow(const fsc_tensor *t, int dim, int64_t start, int64_t len, fsc_tensor *out);
/* Same elements, another shape (contiguous tensors only; numel must match). */
fsc_status fsc_tensor_reshape(const fsc_tensor *t, int ndim, const int64_t *shape, fsc_tensor *out);
/* Swap two dimensions (a strided view). */
fsc_status fsc_tensor_transpose(const fsc_tensor *t, int d0, int d1, fsc_tensor *out);
/* Writes "[2, 3, 4]" into buf. */
void fsc_shape_str(char *buf, size_t cap, int ndim, const int64_t *shape);

FSC_END_DECLS

#endif
