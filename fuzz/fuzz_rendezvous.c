/* libFuzzer harness for the bytes the rendezvous reads from others (lib/core/launch.c, rendezvous.c): the
 * first byte picks what the rest is, all for a 128-byte id. No TCP port is used: the TCP protocol runs
 * over socketpair(), through the same per-connection code rank 0 and the other ranks use on a socket
 * (rendezvous_impl.h), so millions of inputs leave nothing in TIME_WAIT.
 *   0  the file rank 1 reads (fsc_rendezvous_file, world 2): taken exactly when it is magic, world 2, length
 *      128 and 128 bytes; a file of another world waits for rank 0 to replace it (a timeout), anything else
 *      is FSC_ERR_FORMAT.
 *   1  a hello to rank 0 (world 3). Next byte: bit 0 signs the hello with the job's key (its first 32
 *      bytes, then the HMAC, as a real rank would), bit 1 admits a real rank 1 first. Rank 0 challenges
 *      with its nonce, then answers as the protocol says: nothing to a hello without the magic or cut short,
 *      BAD_TOKEN (unsigned, no id) to a wrong HMAC, then BAD_LEN, BAD_RANK, TAKEN for rank 1 already
 *      admitted, or the id, each signed for the rank's nonce; it counts only the genuine ranks.
 *   2  rank 0's side of the stream as rank 1 reads it (challenge, answer, id). Next byte: bit 0 signs the
 *      answer with the key for the challenge's nonce. Rank 1 takes the id exactly when everything is well
 *      formed and signed; a stream that ends early means "try again"; otherwise FSC_ERR_FORMAT or
 *      FSC_ERR_INVALID as the answer's status says. The hello rank 1 sent is itself checked.
 * Every refusal sets a message. Build and run: ci/fuzz.sh SECONDS fuzz/fuzz_rendezvous.c (or make fuzz). */
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "fsc/fsc.h"
#include "core/rendezvous_impl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { ID = 128 };
static const char TOKEN[] = "slurm:SLURM_JOB_ID=1234;SLURM_STEP_ID=0";
static const unsigned char FILE_MAGIC[8] = {'F', 'S', 'C', 'R', 'D', 'V', '0', '1'};
static const unsigned char N0[FSC_RDV_NONCE] = "rank-0-nonce-16";  /* rank 0's challenge */
static const unsigned char NR[FSC_RDV_NONCE] = "rank-1-nonce-16";  /* rank 1's nonce */
static unsigned char id[ID];                                        /* what rank 0 serves */
static unsigned char key[FSC_SHA256_BYTES];

#define get_u32 fsc_rdv_get_u32
#define put_u32 fsc_rdv_put_u32

static void check_refusal(void) {
    if (fsc_last_error()[0] == 0) __builtin_trap();
}

/* ---- 0: the file ---- */

static char dir[64], path[96];
static void remove_file(void) {
    unlink(path);
    rmdir(dir);
}

static void fuzz_file(const uint8_t *d, size_t n) {
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/fsc_fuzz_rendezvous_XXXXXX");
        if (!mkdtemp(dir)) abort();
        snprintf(path, sizeof path, "%s/id", dir);
        atexit(remove_file);
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || write(fd, d, n) != (ssize_t)n || close(fd) != 0) abort();
    int framed = n >= 16 && memcmp(d, FILE_MAGIC, 8) == 0 && get_u32(d + 12) == ID && n == 16 + ID;
    unsigned char blob[ID];
    fsc_clear_error();
    fsc_status st = fsc_rendezvous_file(path, 1, 2, blob, ID, 1e-6);
    if (framed && get_u32(d + 8) == 2) {
        if (st != FSC_OK || memcmp(blob, d + 16, ID) != 0) __builtin_trap();
    } else {
        if (st != (framed ? FSC_ERR_TIMEOUT : FSC_ERR_FORMAT)) __builtin_trap();
        check_refusal();
    }
}

/* ---- socket pairs ---- */

static void pair(int sv[2]) {
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) abort();
}

static void put_all(int fd, const void *p, size_t n) {
    if (n && send(fd, p, n, MSG_NOSIGNAL) != (ssize_t)n) abort(); /* fits in the socket buffer */
}

/* Everything fd receives until the peer closes (at most cap bytes). */
static size_t drain(int fd, unsigned char *buf, size_t cap) {
    size_t got = 0;
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 5000) <= 0) __builtin_trap(); /* rank 0 left a connection hanging */
        ssize_t r = recv(fd, buf + got, cap - got, 0);
        if (r <= 0) return got;
        got += (size_t)r;
        if (got == cap) return got;
    }
}

/* ---- 1: a hello to rank 0 ---- */

/* Serve one connection whose peer end has already sent its bytes; return what rank 0 sent back. */
static size_t serve_one(fsc_rendezvous_server *s, const unsigned char *hello, size_t n, unsigned char *ans,
                        size_t cap) {
    int sv[2];
    pair(sv);
    put_all(sv[1], hello, n);
    shutdown(sv[1], SHUT_WR); /* a hello cut short ends with the stream, not with rank 0's 5 s wait */
    if (fsc_rdv_adopt(s, sv[0], N0) != FSC_OK) __builtin_trap();
    for (int k = 0; fsc_rdv_pending(s) > 0; k++) {
        if (k == 100) __builtin_trap(); /* everything is there: rank 0 must finish at once */
        if (fsc_rdv_pump(s, fsc_rdv_now() + 1.0) != FSC_OK) __builtin_trap();
    }
    size_t got = drain(sv[1], ans, cap);
    close(sv[1]);
    return got;
}

static void fuzz_serve(const uint8_t *d, size_t n) {
    static fsc_rendezvous_server *s;
    if (!s && fsc_rdv_server_new(-1, 0, &s) != FSC_OK) abort();
    if (n < 1) return;
    int sign = d[0] & 1, first = d[0] & 2;
    d++, n--;
    unsigned char hello[FSC_RDV_HELLO + 16] = {0};
    if (n > sizeof hello) n = sizeof hello;
    memcpy(hello, d, n);
    if (sign && n >= 32) { /* signed as a rank knowing the token would */
        fsc_rdv_hello_mac(key, N0, hello, hello + 32);
        if (n < FSC_RDV_HELLO) n = FSC_RDV_HELLO;
    }
    if (fsc_rdv_begin(s, TOKEN, 3, id, ID) != FSC_OK) __builtin_trap();
    unsigned char ans[FSC_RDV_CHALLENGE + FSC_RDV_ANSWER + ID + 1];
    if (first) { /* a real rank 1 comes first */
        unsigned char real[FSC_RDV_HELLO];
        memcpy(real, fsc_rdv_magic, 8);
        put_u32(real + 8, 1);
        put_u32(real + 12, ID);
        memcpy(real + 16, NR, FSC_RDV_NONCE);
        fsc_rdv_hello_mac(key, N0, real, real + 32);
        size_t got = serve_one(s, real, sizeof real, ans, sizeof ans);
        if (got != FSC_RDV_CHALLENGE + FSC_RDV_ANSWER + ID || get_u32(ans + FSC_RDV_CHALLENGE + 8) != FSC_RDV_OK ||
            memcmp(ans + FSC_RDV_CHALLENGE + FSC_RDV_ANSWER, id, ID) != 0 || fsc_rdv_served(s) != 1)
            __builtin_trap();
    }
    size_t got = serve_one(s, hello, n, ans, sizeof ans);
    /* the challenge always comes first */
    if (got < FSC_RDV_CHALLENGE || memcmp(ans, fsc_rdv_magic, 8) != 0 || memcmp(ans + 8, N0, FSC_RDV_NONCE) != 0)
        __builtin_trap();
    const unsigned char *a = ans + FSC_RDV_CHALLENGE;
    size_t an = got - FSC_RDV_CHALLENGE;
    int before = first ? 1 : 0;
    if (n < FSC_RDV_HELLO || memcmp(hello, fsc_rdv_magic, 8) != 0) { /* a stranger: nothing */
        if (an != 0 || fsc_rdv_served(s) != before) __builtin_trap();
        return;
    }
    unsigned char mac[FSC_SHA256_BYTES];
    fsc_rdv_hello_mac(key, N0, hello, mac);
    uint32_t rank = get_u32(hello + 8), len = get_u32(hello + 12);
    uint32_t want = memcmp(mac, hello + 32, sizeof mac) != 0 ? FSC_RDV_BAD_TOKEN
                    : len != ID                              ? FSC_RDV_BAD_LEN
                    : rank < 1 || rank >= 3                  ? FSC_RDV_BAD_RANK
                    : rank == 1 && first                     ? FSC_RDV_TAKEN
                                                             : FSC_RDV_OK;
    size_t blob = want == FSC_RDV_OK ? ID : 0;
    if (an != FSC_RDV_ANSWER + blob || memcmp(a, fsc_rdv_magic, 8) != 0 || get_u32(a + 8) != want)
        __builtin_trap();
    if (fsc_rdv_served(s) != before + (want == FSC_RDV_OK)) __builtin_trap();
    if (want == FSC_RDV_BAD_TOKEN) { /* nothing about the job for a stranger */
        for (int i = 12; i < FSC_RDV_ANSWER; i++)
            if (a[i]) __builtin_trap();
        return;
    }
    if (get_u32(a + 12) != ID || get_u32(a + 16) != 3) __builtin_trap();
    if (blob && memcmp(a + FSC_RDV_ANSWER, id, ID) != 0) __builtin_trap();
    fsc_rdv_answer_mac(key, hello + 16, N0, a, blob ? id : NULL, blob, mac);
    if (memcmp(mac, a + 20, sizeof mac) != 0) __builtin_trap();
}

/* ---- 2: rank 0's answer ---- */

static void fuzz_fetch(const uint8_t *d, size_t n) {
    if (n < 1) return;
    int sign = d[0] & 1;
    d++, n--;
    enum { A = FSC_RDV_CHALLENGE, B = FSC_RDV_CHALLENGE + FSC_RDV_ANSWER };
    static unsigned char in[B + FSC_RENDEZVOUS_MAX_BLOB];
    if (n > sizeof in) n = sizeof in;
    memcpy(in, d, n);
    uint32_t status = n >= B ? get_u32(in + A + 8) : 0, len = n >= B ? get_u32(in + A + 12) : 0;
    int ok = status == FSC_RDV_OK && len == ID, whole = n >= B + ID;
    if (sign && n >= B) /* signed by a rank 0 knowing the token, for the nonces of this exchange */
        fsc_rdv_answer_mac(key, NR, in + 8, in + A, ok && whole ? in + B : NULL, ok && whole ? ID : 0, in + A + 20);
    int sv[2];
    pair(sv);
    put_all(sv[1], in, n);
    shutdown(sv[1], SHUT_WR);
    unsigned char blob[ID] = {0};
    int retry = -1;
    fsc_clear_error();
    fsc_status st = fsc_rdv_fetch_fd(sv[0], TOKEN, NR, 1, blob, ID, fsc_rdv_now() + 5.0, "fuzz", &retry);
    close(sv[0]);
    /* what rank 1 said: nothing before a challenge with the magic, then its signed hello */
    unsigned char h[FSC_RDV_HELLO + 1];
    size_t hn = drain(sv[1], h, sizeof h);
    close(sv[1]);
    int challenged = n >= A && memcmp(in, fsc_rdv_magic, 8) == 0;
    if (hn != (challenged ? FSC_RDV_HELLO : 0)) __builtin_trap();
    if (challenged) {
        unsigned char mac[FSC_SHA256_BYTES];
        fsc_rdv_hello_mac(key, in + 8, h, mac);
        if (memcmp(h, fsc_rdv_magic, 8) != 0 || get_u32(h + 8) != 1 || get_u32(h + 12) != ID ||
            memcmp(h + 16, NR, FSC_RDV_NONCE) != 0 || memcmp(mac, h + 32, sizeof mac) != 0)
            __builtin_trap();
    }
    /* the verdict */
    fsc_status want = FSC_OK;
    int want_retry = 0;
    if (n < A) want_retry = 1;
    else if (!challenged) want = FSC_ERR_FORMAT;
    else if (n < B) want_retry = 1;
    else if (memcmp(in + A, fsc_rdv_magic, 8) != 0) want = FSC_ERR_FORMAT;
    else if (status == FSC_RDV_BAD_TOKEN) want = FSC_ERR_INVALID;
    else if (status == FSC_RDV_OK && len != ID) want = FSC_ERR_FORMAT;
    else if (status == FSC_RDV_OK && !whole) want_retry = 1;
    else {
        unsigned char mac[FSC_SHA256_BYTES];
        fsc_rdv_answer_mac(key, NR, in + 8, in + A, ok ? in + B : NULL, ok ? ID : 0, mac);
        if (memcmp(mac, in + A + 20, sizeof mac) != 0) want = FSC_ERR_FORMAT;
        else if (status == FSC_RDV_OK) want = FSC_OK;
        else if (status == FSC_RDV_BAD_RANK || status == FSC_RDV_TAKEN) want = FSC_ERR_INVALID;
        else want = FSC_ERR_FORMAT; /* BAD_LEN or a status the protocol does not have */
    }
    if (st != want || (st == FSC_OK && retry != want_retry)) __builtin_trap();
    if (st == FSC_OK && !retry && memcmp(blob, in + B, ID) != 0) __builtin_trap();
    if (st == FSC_OK && retry) /* no id taken from an answer that ended early */
        for (int i = 0; i < ID; i++)
            if (blob[i]) __builtin_trap();
    if (st != FSC_OK) check_refusal();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    if (!id[0]) {
        for (int i = 0; i < ID; i++) id[i] = (unsigned char)(i * 37 + 1);
        fsc_rdv_key(TOKEN, key);
    }
    switch (data[0] % 3) {
    case 0: fuzz_file(data + 1, size - 1); break;
    case 1: fuzz_serve(data + 1, size - 1); break;
    default: fuzz_fetch(data + 1, size - 1); break;
    }
    return 0;
}
