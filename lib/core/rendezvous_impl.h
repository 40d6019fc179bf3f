/* Private to the library: the TCP rendezvous protocol (lib/core/rendezvous.c) in pieces that tests and the
 * fuzzer drive over socketpair() (no TCP port per input), and small time helpers shared with launch.c.
 *
 * Protocol (integers big-endian; K = SHA-256 of the job token; MAC = HMAC-SHA-256 with key K):
 *   challenge (0 -> r, on accept)  magic[8] n0[16]                                          24 bytes
 *   hello     (r -> 0)             magic[8] rank:u32 len:u32 nr[16] mac[32]                  64 bytes
 *                                  mac = MAC("hello" n0 hello[0..32))
 *   answer    (0 -> r)             magic[8] status:u32 len:u32 world:u32 mac[32] blob[len]   52 (+len) bytes
 *                                  mac = MAC("answer" nr n0 answer[0..20) blob), blob only when status is OK;
 *                                  all zeros for BAD_TOKEN (rank 0 cannot authenticate to a stranger)
 * Rank 0 drops without an answer a connection that does not send a hello with the magic in time. */
#ifndef FSC_CORE_RENDEZVOUS_IMPL_H
#define FSC_CORE_RENDEZVOUS_IMPL_H
#include <errno.h>
#include <stdint.h>
#include <time.h>
#include "fsc/launch.h"
#include "core/sha256.h"

#define FSC_RDV_NONCE 16
#define FSC_RDV_CHALLENGE 24
#define FSC_RDV_HELLO 64
#define FSC_RDV_ANSWER 52
#define FSC_RDV_HANDSHAKE_S 5.0 /* how long rank 0 gives one connection to finish its hello */
#define FSC_RDV_MAX_PENDING 128 /* connections rank 0 serves at once; a new one evicts the oldest */

extern const unsigned char fsc_rdv_magic[8]; /* "FSCRDV02" */

enum { FSC_RDV_OK = 0, FSC_RDV_BAD_LEN = 1, FSC_RDV_BAD_RANK = 2, FSC_RDV_BAD_TOKEN = 3, FSC_RDV_TAKEN = 4 };

void fsc_rdv_key(const char *token, unsigned char key[FSC_SHA256_BYTES]);
void fsc_rdv_hello_mac(const unsigned char *key, const unsigned char *n0, const unsigned char *hello32,
                       unsigned char mac[FSC_SHA256_BYTES]);
void fsc_rdv_answer_mac(const unsigned char *key, const unsigned char *nr, const unsigned char *n0,
                        const unsigned char *head20, const void *blob, size_t blob_len,
                        unsigned char mac[FSC_SHA256_BYTES]);

/* Rank 0 without its own listening socket: listen_fd -1 serves only connections handed to fsc_rdv_adopt. */
fsc_status fsc_rdv_server_new(int listen_fd, int port, fsc_rendezvous_server **out);
/* Start (or restart) a session: the token, world and blob that fsc_rendezvous_serve would take. */
fsc_status fsc_rdv_begin(fsc_rendezvous_server *s, const char *token, int world, const void *blob, size_t len);
/* Serve connected socket fd (made non-blocking; the server closes it), challenging with nonce n0 (NULL:
 * random). A full table evicts the oldest connection whose answer is not under way. */
fsc_status fsc_rdv_adopt(fsc_rendezvous_server *s, int fd, const unsigned char *n0);
/* Wait at most until `until` (CLOCK_MONOTONIC seconds) for any connection to make progress and advance
 * them all; accepts on the listening socket. FSC_OK, or an error when the listening socket fails. */
fsc_status fsc_rdv_pump(fsc_rendezvous_server *s, double until);
int fsc_rdv_served(const fsc_rendezvous_server *s);  /* ranks answered with the blob in this session */
int fsc_rdv_pending(const fsc_rendezvous_server *s); /* connections open */
void fsc_rdv_end(fsc_rendezvous_server *s);          /* close every connection, forget the session */

/* One attempt of rank `rank` on connected socket fd, with client nonce nr. FSC_OK with *retry 0: blob
 * holds the id; FSC_OK with *retry 1: the connection ended early (try again); else a final error. */
fsc_status fsc_rdv_fetch_fd(int fd, const char *token, const unsigned char *nr, int rank, void *blob, size_t len,
                            double deadline, const char *where, int *retry);

/* ---- time and byte helpers (launch.c shares them) ---- */

static inline double fsc_rdv_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Milliseconds left until deadline for poll(), rounded up; 0 once it has passed. */
static inline int fsc_rdv_ms_until(double deadline) {
    double r = deadline - fsc_rdv_now();
    return r <= 0 ? 0 : (r > 1e6 ? 1000000000 : (int)(r * 1000.0) + 1);
}

static inline void fsc_rdv_sleep(double s) {
    if (!(s > 0)) return;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

static inline void fsc_rdv_put_u32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24), p[1] = (unsigned char)(v >> 16), p[2] = (unsigned char)(v >> 8),
    p[3] = (unsigned char)v;
}

static inline uint32_t fsc_rdv_get_u32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

#endif
