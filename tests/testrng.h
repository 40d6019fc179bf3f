/* The random tests' generator (test_pipe_random.c, test_tp_random.c, test_resume_random.c): splitmix64, so that a
 * printed seed reproduces a case on every machine. */
#ifndef FSC_TESTRNG_H
#define FSC_TESTRNG_H
#include <stdint.h>

typedef struct {
    uint64_t s;
} rng;

static inline uint64_t rng_next(rng *r) { /* splitmix64 */
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* 0 .. n-1 */
static inline int rng_int(rng *r, int n) { return (int)(rng_next(r) % (uint64_t)n); }

#endif
