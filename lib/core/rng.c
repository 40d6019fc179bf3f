/* Counter-based random numbers (rng.h): Philox-4x32-10 (Salmon et al., "Parallel random numbers:
 * as easy as 1, 2, 3", SC'11) keyed by (seed, tensor name); the counter is the element index.
 * Element i's value depends on nothing else, so any slice of a tensor can be filled on its own. */
#include <math.h>
#include "fsc/rng.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

void fsc_philox4x32(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    if (!ctr || !key || !out) return;
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3], k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0, p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c0 = n0;
        c1 = (uint32_t)p1;
        c2 = n2;
        c3 = (uint32_t)p0;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

static uint64_t splitmix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t fsc_rng_key(uint64_t seed, const char *name) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a 64 */
    for (const unsigned char *p = (const unsigned char *)(name ? name : ""); *p; p++) {
        h ^= *p;
        h *= 0x100000001b3ull;
    }
    return splitmix64(h ^ splitmix64(seed));
}

static void philox_index(uint64_t key, uint64_t index, uint32_t out[4]) {
    const uint32_t ctr[4] = {(uint32_t)index, (uint32_t)(index >> 32), 0, 0};
    const uint32_t k[2] = {(uint32_t)key, (uint32_t)(key >> 32)};
    fsc_philox4x32(ctr, k, out);
}

float fsc_rng_uniform(uint64_t key, uint64_t index) {
    uint32_t r[4];
    philox_index(key, index, r);
    return (float)(r[0] >> 8) * 0x1.0p-24f; /* top 24 bits: exact, in [0, 1) */
}

float fsc_rng_normal(uint64_t key, uint64_t index) {
    uint32_t r[4];
    philox_index(key, index, r);
    double u1 = ((double)(r[0] >> 8) + 1.0) * 0x1.0p-24; /* (0, 1]: log is finite */
    double u2 = (double)(r[1] >> 8) * 0x1.0p-24;         /* [0, 1) */
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

void fsc_rng_fill_normal(float *out, size_t n, uint64_t seed, const char *name, uint64_t first,
                         float mean, float std) {
    if (!out) return; /* status.h: nothing on a NULL buffer */
    uint64_t key = fsc_rng_key(seed, name);
    for (size_t i = 0; i < n; i++) out[i] = mean + std * fsc_rng_normal(key, first + i);
}
