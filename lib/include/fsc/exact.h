/* Exact, order-free sums of float tensors (docs/determinism.md): fixed point on a shared exponent.
 * A float x becomes the int64 round(x 2^-E) (ties to even); int64 sums wrap, so they are associative and
 * commutative: any split of the terms over ranks, any order of adding them and any collective algorithm give
 * the same integers. The sum becomes a float once. E is chosen from the largest magnitude of any term and the
 * number of terms (fsc_exact_exponent), both of which every configuration agrees on, so that the sum cannot
 * overflow; a term outside that range is counted, never wrapped.
 *
 * Precision: each term is rounded to a multiple of 2^E (error <= 2^(E-1)), with 2^E < 2^(h + 16 - 61) amax
 * (h: the bits of the number of terms n <= 2^h), and the sum is rounded to f32 once. The error of a sum of n terms
 * is at most 0.5 ulp of the result plus n 2^(E-1) < 2^(2h-46) amax, against an f32 ordered sum's (n-1) half-ulps
 * of its partial sums. Not here: the engine's use of it (lib/parallel/exact.c). */
#ifndef FSC_EXACT_H
#define FSC_EXACT_H
#include "export.h"
#include <stddef.h>
#include <stdint.h>

FSC_BEGIN_DECLS

/* Exponents are multiples of this, so that a scale's drift mostly keeps the same exponent (the engine recomputes
 * a step whose exponent changed); it costs that many bits of the 62. */
#define FSC_EXACT_QUANTUM 16
/* NULL arrays: fsc_exact_absmax gives 0; the adds and conversions do nothing (those that count elements out of
 * range count all n). */
/* The exponent of sums whose terms are all zero. */
#define FSC_EXACT_ZERO_EXPONENT (-256)

/* The exponent E (a multiple of FSC_EXACT_QUANTUM) on which `terms` terms of magnitude at most amax add up
 * below 2^62 in magnitude: terms x amax x 2^-E <= 2^62. amax 0: FSC_EXACT_ZERO_EXPONENT. amax not finite:
 * INT32_MAX (no exponent holds it). */
int fsc_exact_exponent(double amax, uint64_t terms);
/* The largest |x[i]|, as a double; +inf if some element is inf or NaN; 0 for n 0. */
double fsc_exact_absmax(const float *x, size_t n);
/* acc[i] += round(x[i] 2^-E), ties to even, wrapping. Elements with |x[i]| 2^-E >= 2^62, inf or NaN add
 * nothing; the return value counts them (0: all in range). */
size_t fsc_exact_add_f32(int64_t *acc, const float *x, size_t n, int E);
/* out[i] = round(x[i] 2^-E) (0 for what fsc_exact_add_f32 counts, the return value), and *amax raised to the
 * largest |x[i]| (+inf if some element is inf or NaN): one pass for the engine's conversions. */
size_t fsc_exact_from_f32(int64_t *out, const float *x, size_t n, int E, double *amax);
/* acc[i] += x[i], wrapping (what a communicator's i64 sum does). */
void fsc_exact_add_i64(int64_t *acc, const int64_t *x, size_t n);
/* out[i] = acc[i] 2^E as f32: acc[i] rounded to f32 once (to nearest even), then scaled (exact unless the
 * result is subnormal or beyond f32's range). out may not alias acc. */
void fsc_exact_to_f32(float *out, const int64_t *acc, size_t n, int E);

FSC_END_DECLS

#endif
