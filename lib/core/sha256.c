/* SHA-256 and HMAC-SHA-256 (sha256.h) through Nettle: the rendezvous authenticates ranks with them. Checked
 * against the FIPS 180-4 and RFC 4231 vectors in tests/test_sha256.c. Not here: the rendezvous protocol. */
#include <nettle/memops.h>
#include "core/sha256.h"

void fsc_sha256_init(fsc_sha256_ctx *c) { sha256_init(c); }
void fsc_sha256_update(fsc_sha256_ctx *c, const void *data, size_t n) { sha256_update(c, n, data); }
void fsc_sha256_final(fsc_sha256_ctx *c, unsigned char out[FSC_SHA256_BYTES]) {
    sha256_digest(c, FSC_SHA256_BYTES, out);
}

void fsc_sha256(const void *data, size_t n, unsigned char out[FSC_SHA256_BYTES]) {
    fsc_sha256_ctx c;
    sha256_init(&c);
    sha256_update(&c, n, data);
    sha256_digest(&c, FSC_SHA256_BYTES, out);
}

void fsc_hmac_init(fsc_hmac_ctx *c, const void *key, size_t key_len) { hmac_sha256_set_key(c, key_len, key); }
void fsc_hmac_update(fsc_hmac_ctx *c, const void *data, size_t n) { hmac_sha256_update(c, n, data); }
void fsc_hmac_final(fsc_hmac_ctx *c, unsigned char out[FSC_SHA256_BYTES]) {
    hmac_sha256_digest(c, FSC_SHA256_BYTES, out);
}

int fsc_equal_const_time(const void *a, const void *b, size_t n) { return n == 0 || memeql_sec(a, b, n); }
