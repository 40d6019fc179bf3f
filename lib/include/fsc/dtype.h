/* Element types and host-side conversions (round to nearest, ties to even). */
#ifndef FSC_DTYPE_H
#define FSC_DTYPE_H
#include "export.h"
#include <stddef.h>
#include <stdint.h>

FSC_BEGIN_DECLS

/* FSC_I64: the exact reductions' fixed-point integers (exact.h); sums wrap, as i32's do. */
typedef enum { FSC_F32 = 0, FSC_BF16, FSC_F16, FSC_I32, FSC_U8, FSC_I64, FSC_DTYPE_COUNT } fsc_dtype;

size_t fsc_dtype_size(fsc_dtype t);          /* bytes per element; 0 for an invalid value */
const char *fsc_dtype_name(fsc_dtype t);     /* "f32", "bf16", "f16", "i32", "u8", "i64" */
int fsc_dtype_parse(const char *s, fsc_dtype *out); /* 0 on success, -1 if unknown or NULL; out may be NULL */

uint16_t fsc_f32_to_bf16(float x);   /* RNE; NaN stays NaN (quiet) */
float fsc_bf16_to_f32(uint16_t h);
uint16_t fsc_f32_to_f16(float x);    /* RNE; overflow to inf, subnormals kept */
float fsc_f16_to_f32(uint16_t h);
/* n elements from src (type st) to dst (type dt); float types only (f32, bf16, f16). */
void fsc_convert_host(void *dst, fsc_dtype dt, const void *src, fsc_dtype st, size_t n);

FSC_END_DECLS

#endif
