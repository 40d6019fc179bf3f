/* Tests of lib/core/sha256.c (the rendezvous' authentication).
 * Oracles: the published vectors: FIPS 180-4 examples and the NIST one-million-'a' message for SHA-256,
 * RFC 4231 test cases 1, 2, 4 and 6 for HMAC-SHA-256; feeding the same bytes in pieces gives the same
 * digest; the constant-time comparison agrees with memcmp. */
#include "testutil.h"
#include "core/sha256.h"

static void hex(const unsigned char *d, char *out) {
    for (int i = 0; i < FSC_SHA256_BYTES; i++) snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static void assert_digest(const unsigned char *d, const char *want) {
    char h[2 * FSC_SHA256_BYTES + 1];
    hex(d, h);
    assert_string_equal(h, want);
}

static void test_sha256_vectors(void **state) {
    unsigned char d[FSC_SHA256_BYTES];
    fsc_sha256("", 0, d);
    assert_digest(d, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    fsc_sha256("abc", 3, d);
    assert_digest(d, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"; /* 56 bytes: two blocks */
    fsc_sha256(m448, strlen(m448), d);
    assert_digest(d, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    fsc_sha256_ctx c;
    fsc_sha256_init(&c);
    char a[1000];
    memset(a, 'a', sizeof a);
    for (int i = 0; i < 1000; i++) fsc_sha256_update(&c, a, sizeof a);
    fsc_sha256_final(&c, d);
    assert_digest(d, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

/* Every split of a message into two updates gives the one-shot digest (block and padding edges). */
static void test_sha256_pieces(void **state) {
    unsigned char msg[200], whole[FSC_SHA256_BYTES], parts[FSC_SHA256_BYTES];
    for (size_t i = 0; i < sizeof msg; i++) msg[i] = (unsigned char)(i * 31 + 7);
    for (size_t n = 0; n <= sizeof msg; n += 1) {
        fsc_sha256(msg, n, whole);
        for (size_t cut = 0; cut <= n; cut += 13) {
            fsc_sha256_ctx c;
            fsc_sha256_init(&c);
            fsc_sha256_update(&c, msg, cut);
            fsc_sha256_update(&c, msg + cut, n - cut);
            fsc_sha256_final(&c, parts);
            assert_memory_equal(whole, parts, sizeof whole);
        }
    }
}

static void hmac(const void *key, size_t kn, const void *msg, size_t mn, unsigned char *out) {
    fsc_hmac_ctx c;
    fsc_hmac_init(&c, key, kn);
    fsc_hmac_update(&c, msg, mn);
    fsc_hmac_final(&c, out);
}

static void test_hmac_rfc4231(void **state) {
    unsigned char d[FSC_SHA256_BYTES], key[131];
    memset(key, 0x0b, 20);
    hmac(key, 20, "Hi There", 8, d);
    assert_digest(d, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
    hmac("Jefe", 4, "what do ya want for nothing?", 28, d);
    assert_digest(d, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    for (int i = 0; i < 25; i++) key[i] = (unsigned char)(i + 1);
    unsigned char cd[50];
    memset(cd, 0xcd, sizeof cd);
    hmac(key, 25, cd, sizeof cd, d);
    assert_digest(d, "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
    memset(key, 0xaa, sizeof key); /* a key longer than a block is hashed first */
    const char *m = "Test Using Larger Than Block-Size Key - Hash Key First";
    hmac(key, sizeof key, m, strlen(m), d);
    assert_digest(d, "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

static void test_equal_const_time(void **state) {
    unsigned char a[32], b[32];
    for (int i = 0; i < 32; i++) a[i] = b[i] = (unsigned char)i;
    assert_true(fsc_equal_const_time(a, b, sizeof a));
    assert_true(fsc_equal_const_time(a, b, 0));
    for (int i = 0; i < 32; i++) {
        b[i] ^= 0x80;
        assert_false(fsc_equal_const_time(a, b, sizeof a));
        b[i] ^= 0x80;
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sha256_vectors),
        cmocka_unit_test(test_sha256_pieces),
        cmocka_unit_test(test_hmac_rfc4231),
        cmocka_unit_test(test_equal_const_time),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
