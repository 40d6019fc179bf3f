/* SHA-256 (FIPS 180-4) and HMAC-SHA-256 (RFC 2104), incremental; private to the library.
 * For the rendezvous' proof that a rank belongs to the job (lib/core/rendezvous.c): small and
 * dependency-free, not fast. Not for checksums of large data (crc32 does that). */
#ifndef FSC_CORE_SHA256_H
#define FSC_CORE_SHA256_H
#include <stddef.h>
#include <stdint.h>

#define FSC_SHA256_BYTES 32

typedef struct {
    uint32_t h[8];
    uint64_t bytes;      /* message length so far */
    unsigned char buf[64];
    size_t fill;         /* bytes waiting in buf */
} fsc_sha256_ctx;

void fsc_sha256_init(fsc_sha256_ctx *c);
void fsc_sha256_update(fsc_sha256_ctx *c, const void *data, size_t n);
void fsc_sha256_final(fsc_sha256_ctx *c, unsigned char out[FSC_SHA256_BYTES]);
void fsc_sha256(const void *data, size_t n, unsigned char out[FSC_SHA256_BYTES]);

typedef struct {
    fsc_sha256_ctx inner, outer;
} fsc_hmac_ctx;

void fsc_hmac_init(fsc_hmac_ctx *c, const void *key, size_t key_len);
void fsc_hmac_update(fsc_hmac_ctx *c, const void *data, size_t n);
void fsc_hmac_final(fsc_hmac_ctx *c, unsigned char out[FSC_SHA256_BYTES]);

/* 1 when the n bytes at a and b are equal; the time taken does not depend on where they differ. */
int fsc_equal_const_time(const void *a, const void *b, size_t n);

#endif
