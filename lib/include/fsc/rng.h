/* Counter-based random numbers (Philox-4x32-10) keyed by (seed, name, element index).
 * The value for element i of the tensor called name depends only on (seed, name, i): a rank that
 * holds elements [a, b) of a tensor fills exactly the values the whole tensor would have there. */
#ifndef FSC_RNG_H
#define FSC_RNG_H
#include "export.h"
#include <stddef.h>
#include <stdint.h>

FSC_BEGIN_DECLS

/* Philox-4x32-10 of counter ctr under key. */
void fsc_philox4x32(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);
/* 64-bit key of a name (FNV-1a), mixed with the seed; NULL is the name "". */
uint64_t fsc_rng_key(uint64_t seed, const char *name);
/* Uniform [0, 1) float of element index under key. */
float fsc_rng_uniform(uint64_t key, uint64_t index);
/* Standard normal of element index under key (Box-Muller on the element's own counter). */
float fsc_rng_normal(uint64_t key, uint64_t index);
/* Fill out[0..n) with mean + std * normal for indices [first, first+n) of tensor name. */
void fsc_rng_fill_normal(float *out, size_t n, uint64_t seed, const char *name, uint64_t first,
                         float mean, float std);

FSC_END_DECLS

#endif
