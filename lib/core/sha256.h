/* SHA-256 and HMAC-SHA-256, incremental; private to the library. For the rendezvous' proof that a rank belongs
 * to the job (lib/core/rendezvous.c) and digests of small records. Thin names over Nettle (GnuTLS's
 * cryptographic library): authentication code is not written by hand here. Not for checksums of large data
 * (crc32 does that). */
#ifndef FSC_CORE_SHA256_H
#define FSC_CORE_SHA256_H
#include <stddef.h>
#include <stdint.h>
#include <nettle/hmac.h>
#include <nettle/sha2.h>

#define FSC_SHA256_BYTES 32

typedef struct sha256_ctx fsc_sha256_ctx;

void fsc_sha256_init(fsc_sha256_ctx *c);
void fsc_sha256_update(fsc_sha256_ctx *c, const void *data, size_t n);
void fsc_sha256_final(fsc_sha256_ctx *c, unsigned char out[FSC_SHA256_BYTES]);
void fsc_sha256(const void *data, size_t n, unsigned char out[FSC_SHA256_BYTES]);

typedef struct hmac_sha256_ctx fsc_hmac_ctx;

void fsc_hmac_init(fsc_hmac_ctx *c, const void *key, size_t key_len);
void fsc_hmac_update(fsc_hmac_ctx *c, const void *data, size_t n);
void fsc_hmac_final(fsc_hmac_ctx *c, unsigned char out[FSC_SHA256_BYTES]);

/* 1 when the n bytes at a and b are equal; the time taken does not depend on where they differ. */
int fsc_equal_const_time(const void *a, const void *b, size_t n);

#endif
