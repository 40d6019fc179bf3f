/* The TCP rendezvous (launch.h; protocol in rendezvous_impl.h): rank 0 hands the communicator's id to
 * the other ranks at MASTER_ADDR:MASTER_PORT and admits only ranks that prove they know the job's token.
 * Rank 0 listens on MASTER_ADDR only (not every interface) and serves all pending connections at once
 * with poll(), each with its own deadline, so an idle or garbage connection is dropped without delaying
 * anyone; each rank id is given out once, and a second claim to it is refused, never displacing the first.
 * The token never crosses the wire: a rank answers rank 0's random challenge with an HMAC, and rank 0 signs
 * its answer for the rank's own nonce. The id itself travels in clear (as NCCL's own bootstrap does).
 * Not here: the environment, the file rendezvous and opening the communicator (launch.c). */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>
#include "core/rendezvous_impl.h"

const unsigned char fsc_rdv_magic[8] = {'F', 'S', 'C', 'R', 'D', 'V', '0', '2'};
#define MAX_WORLD (1 << 20)

static fsc_status random_bytes(unsigned char *p, size_t n) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = getrandom(p + got, n - got, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return fsc_error(FSC_ERR_IO, "rendezvous: no random bytes for a nonce: %s", strerror(errno));
        got += (size_t)r;
    }
    return FSC_OK;
}

static fsc_status check_token(const char *token) {
    if (!token || !*token)
        return fsc_error(FSC_ERR_INVALID, "rendezvous: no job token (every rank must know the same token: set "
                         "FSC_RENDEZVOUS_TOKEN, or run under a launcher that names the job)");
    return FSC_OK;
}

static fsc_status check_blob(const char *who, const void *blob, size_t len) {
    if (!blob) return fsc_error(FSC_ERR_INVALID, "%s: blob is NULL", who);
    if (len == 0 || len > FSC_RENDEZVOUS_MAX_BLOB)
        return fsc_error(FSC_ERR_INVALID, "%s: blob of %zu bytes (1..%d allowed)", who, len, FSC_RENDEZVOUS_MAX_BLOB);
    return FSC_OK;
}

/* ---- messages ---- */

void fsc_rdv_key(const char *token, unsigned char key[FSC_SHA256_BYTES]) { fsc_sha256(token, strlen(token), key); }

void fsc_rdv_hello_mac(const unsigned char *key, const unsigned char *n0, const unsigned char *hello32,
                       unsigned char mac[FSC_SHA256_BYTES]) {
    fsc_hmac_ctx h;
    fsc_hmac_init(&h, key, FSC_SHA256_BYTES);
    fsc_hmac_update(&h, "fsc-rdv-hello", 13);
    fsc_hmac_update(&h, n0, FSC_RDV_NONCE);
    fsc_hmac_update(&h, hello32, 32);
    fsc_hmac_final(&h, mac);
}

void fsc_rdv_answer_mac(const unsigned char *key, const unsigned char *nr, const unsigned char *n0,
                        const unsigned char *head20, const void *blob, size_t blob_len,
                        unsigned char mac[FSC_SHA256_BYTES]) {
    fsc_hmac_ctx h;
    fsc_hmac_init(&h, key, FSC_SHA256_BYTES);
    fsc_hmac_update(&h, "fsc-rdv-answer", 14);
    fsc_hmac_update(&h, nr, FSC_RDV_NONCE);
    fsc_hmac_update(&h, n0, FSC_RDV_NONCE);
    fsc_hmac_update(&h, head20, 20);
    if (blob_len) fsc_hmac_update(&h, blob, blob_len);
    fsc_hmac_final(&h, mac);
}

/* ---- rank 0 ---- */

typedef struct {
    int fd;          /* -1: a free slot */
    double since, deadline;
    int phase;       /* 0: challenge going out, 1: hello coming in, 2: answer going out */
    int rank;        /* the rank reserved while its answer goes out, or -1 */
    unsigned char nonce[FSC_RDV_NONCE];
    unsigned char in[FSC_RDV_HELLO];
    size_t in_n, out_n, out_off;
    unsigned char out[FSC_RDV_ANSWER + FSC_RENDEZVOUS_MAX_BLOB];
} rdv_conn;

struct fsc_rendezvous_server {
    int fd, port;
    char addr[INET6_ADDRSTRLEN]; /* the address listened on, for messages */
    int loopback;
    rdv_conn *conns;             /* FSC_RDV_MAX_PENDING slots */
    int nconn;
    /* the session */
    unsigned char *taken;        /* per rank: 0 free, 1 answer under way, 2 served; NULL: no session */
    int world, served, refused, dropped;
    size_t len;
    unsigned char key[FSC_SHA256_BYTES];
    unsigned char blob[FSC_RENDEZVOUS_MAX_BLOB];
};

fsc_status fsc_rdv_server_new(int listen_fd, int port, fsc_rendezvous_server **out) {
    *out = NULL;
    fsc_rendezvous_server *s = calloc(1, sizeof *s);
    rdv_conn *c = calloc(FSC_RDV_MAX_PENDING, sizeof *c);
    if (!s || !c) {
        free(s);
        free(c);
        return fsc_error(FSC_ERR_NOMEM, "rendezvous: out of memory");
    }
    for (int i = 0; i < FSC_RDV_MAX_PENDING; i++) c[i].fd = -1;
    s->fd = listen_fd;
    s->port = port;
    s->conns = c;
    *out = s;
    return FSC_OK;
}

static void conn_close(fsc_rendezvous_server *s, rdv_conn *c) {
    if (c->fd < 0) return;
    close(c->fd);
    if (c->rank >= 0 && s->taken && s->taken[c->rank] == 1) s->taken[c->rank] = 0; /* its answer never went */
    c->fd = -1;
    s->nconn--;
}

static void drop(fsc_rendezvous_server *s, rdv_conn *c) {
    s->dropped++;
    conn_close(s, c);
}

void fsc_rdv_end(fsc_rendezvous_server *s) {
    for (int i = 0; i < FSC_RDV_MAX_PENDING; i++) conn_close(s, &s->conns[i]);
    free(s->taken);
    s->taken = NULL;
    memset(s->key, 0, sizeof s->key);
}

fsc_status fsc_rdv_begin(fsc_rendezvous_server *s, const char *token, int world, const void *blob, size_t len) {
    FSC_TRY(check_token(token));
    FSC_TRY(check_blob("rendezvous", blob, len));
    if (world < 1 || world > MAX_WORLD) return fsc_error(FSC_ERR_INVALID, "rendezvous: world size %d", world);
    fsc_rdv_end(s);
    s->taken = calloc((size_t)world, 1);
    if (!s->taken) return fsc_error(FSC_ERR_NOMEM, "rendezvous: out of memory for %d ranks", world);
    s->world = world;
    s->served = s->refused = s->dropped = 0;
    s->len = len;
    memcpy(s->blob, blob, len);
    fsc_rdv_key(token, s->key);
    return FSC_OK;
}

int fsc_rdv_served(const fsc_rendezvous_server *s) { return s->served; }
int fsc_rdv_pending(const fsc_rendezvous_server *s) { return s->nconn; }

/* A complete hello: the answer it gets, or nothing for a stranger without the magic. */
static void judge(fsc_rendezvous_server *s, rdv_conn *c) {
    const unsigned char *h = c->in;
    if (memcmp(h, fsc_rdv_magic, 8) != 0) {
        drop(s, c);
        return;
    }
    unsigned char mac[FSC_SHA256_BYTES];
    fsc_rdv_hello_mac(s->key, c->nonce, h, mac);
    uint32_t rank = fsc_rdv_get_u32(h + 8), their_len = fsc_rdv_get_u32(h + 12), status;
    if (!fsc_equal_const_time(mac, h + 32, sizeof mac)) status = FSC_RDV_BAD_TOKEN, s->refused++;
    else if (their_len != s->len) status = FSC_RDV_BAD_LEN;
    else if (rank < 1 || rank >= (uint32_t)s->world) status = FSC_RDV_BAD_RANK;
    else if (s->taken[rank]) status = FSC_RDV_TAKEN;
    else status = FSC_RDV_OK;
    unsigned char *a = c->out;
    int ok = status == FSC_RDV_OK, stranger = status == FSC_RDV_BAD_TOKEN;
    memcpy(a, fsc_rdv_magic, 8);
    fsc_rdv_put_u32(a + 8, status);
    fsc_rdv_put_u32(a + 12, stranger ? 0 : (uint32_t)s->len);
    fsc_rdv_put_u32(a + 16, stranger ? 0 : (uint32_t)s->world);
    if (ok) memcpy(a + FSC_RDV_ANSWER, s->blob, s->len);
    if (stranger) memset(a + 20, 0, FSC_SHA256_BYTES);
    else fsc_rdv_answer_mac(s->key, h + 16, c->nonce, a, ok ? s->blob : NULL, ok ? s->len : 0, a + 20);
    if (ok) {
        s->taken[rank] = 1;
        c->rank = (int)rank;
    }
    c->out_n = FSC_RDV_ANSWER + (ok ? s->len : 0);
    c->out_off = 0;
    c->phase = 2;
}

/* Move c on as far as it goes without waiting. */
static void step(fsc_rendezvous_server *s, rdv_conn *c) {
    while (c->fd >= 0) {
        if (c->phase == 1) {
            ssize_t r = recv(c->fd, c->in + c->in_n, FSC_RDV_HELLO - c->in_n, 0);
            if (r < 0 && errno == EINTR) continue;
            if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
            if (r <= 0) { /* closed or reset before a whole hello */
                drop(s, c);
                return;
            }
            c->in_n += (size_t)r;
            if (c->in_n == FSC_RDV_HELLO) judge(s, c);
        } else {
            ssize_t r = send(c->fd, c->out + c->out_off, c->out_n - c->out_off, MSG_NOSIGNAL);
            if (r < 0 && errno == EINTR) continue;
            if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
            if (r <= 0) {
                drop(s, c);
                return;
            }
            c->out_off += (size_t)r;
            if (c->out_off < c->out_n) continue;
            if (c->phase == 0) {
                c->phase = 1;
                c->in_n = 0;
                continue;
            }
            if (c->rank >= 0) {
                s->taken[c->rank] = 2;
                s->served++;
                c->rank = -1;
            }
            conn_close(s, c);
        }
    }
}

fsc_status fsc_rdv_adopt(fsc_rendezvous_server *s, int fd, const unsigned char *n0) {
    if (!s->taken) {
        close(fd);
        return fsc_error(FSC_ERR_STATE, "rendezvous: a connection arrived outside a session");
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0) {
        int err = errno;
        close(fd);
        return fsc_error(FSC_ERR_IO, "rendezvous: cannot make a connection non-blocking: %s", strerror(err));
    }
    rdv_conn *c = NULL, *oldest = NULL;
    for (int i = 0; i < FSC_RDV_MAX_PENDING && !c; i++) {
        rdv_conn *k = &s->conns[i];
        if (k->fd < 0) c = k;
        else if (k->phase != 2 && (!oldest || k->since < oldest->since)) oldest = k;
    }
    if (!c && oldest) { /* the table is full: the longest waiting hello is the likeliest to be idle */
        drop(s, oldest);
        c = oldest;
    }
    if (!c) { /* every slot is answering a rank: let this one come back */
        s->dropped++;
        close(fd);
        return FSC_OK;
    }
    unsigned char nonce[FSC_RDV_NONCE];
    if (n0) memcpy(nonce, n0, sizeof nonce);
    else if (random_bytes(nonce, sizeof nonce) != FSC_OK) {
        close(fd);
        return FSC_ERR_IO;
    }
    memset(c, 0, offsetof(rdv_conn, out));
    c->fd = fd;
    c->since = fsc_rdv_now();
    c->deadline = c->since + FSC_RDV_HANDSHAKE_S;
    c->rank = -1;
    memcpy(c->nonce, nonce, sizeof nonce);
    memcpy(c->out, fsc_rdv_magic, 8);
    memcpy(c->out + 8, nonce, sizeof nonce);
    c->out_n = FSC_RDV_CHALLENGE;
    s->nconn++;
    step(s, c);
    return FSC_OK;
}

static fsc_status accept_all(fsc_rendezvous_server *s) {
    for (int k = 0; k < 2 * FSC_RDV_MAX_PENDING; k++) {
        int c = accept4(s->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (c < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) return FSC_OK;
            if ((errno == EMFILE || errno == ENFILE) && s->nconn > 0) return FSC_OK; /* the pending ones go first */
            return fsc_error(FSC_ERR_IO, "rendezvous: accept on port %d failed: %s", s->port, strerror(errno));
        }
        FSC_TRY(fsc_rdv_adopt(s, c, NULL));
    }
    return FSC_OK;
}

fsc_status fsc_rdv_pump(fsc_rendezvous_server *s, double until) {
    struct pollfd pf[FSC_RDV_MAX_PENDING + 1];
    int slot[FSC_RDV_MAX_PENDING + 1];
    double now = fsc_rdv_now(), wake = until;
    int n = 0;
    for (int i = 0; i < FSC_RDV_MAX_PENDING; i++) {
        rdv_conn *c = &s->conns[i];
        if (c->fd < 0) continue;
        if (c->deadline <= now) { /* idle too long: dropped, nobody waits for it */
            drop(s, c);
            continue;
        }
        if (c->deadline < wake) wake = c->deadline;
        pf[n] = (struct pollfd){c->fd, (short)(c->phase == 1 ? POLLIN : POLLOUT), 0};
        slot[n++] = i;
    }
    if (s->fd >= 0) { /* a new connection evicts the oldest when the table is full */
        pf[n] = (struct pollfd){s->fd, POLLIN, 0};
        slot[n++] = -1;
    }
    int pr = poll(pf, (nfds_t)n, fsc_rdv_ms_until(wake));
    if (pr < 0 && errno == EINTR) return FSC_OK;
    if (pr < 0) return fsc_error(FSC_ERR_IO, "rendezvous: poll failed: %s", strerror(errno));
    for (int k = 0; k < n; k++) {
        if (!pf[k].revents) continue;
        if (slot[k] >= 0) step(s, &s->conns[slot[k]]);
        else FSC_TRY(accept_all(s));
    }
    return FSC_OK;
}

/* ---- listening ---- */

static void describe(const struct sockaddr *sa, char *buf, size_t cap, int *loopback) {
    *loopback = 0;
    buf[0] = '\0';
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &a->sin_addr, buf, (socklen_t)cap);
        *loopback = (ntohl(a->sin_addr.s_addr) >> 24) == 127;
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &a->sin6_addr, buf, (socklen_t)cap);
        *loopback = IN6_IS_ADDR_LOOPBACK(&a->sin6_addr) ||
                    (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr) && a->sin6_addr.s6_addr[12] == 127);
    }
}

fsc_status fsc_rendezvous_listen(const char *addr, int port, fsc_rendezvous_server **out, int *bound_port) {
    if (!out) return fsc_error(FSC_ERR_INVALID, "fsc_rendezvous_listen: out is NULL");
    *out = NULL;
    if (!addr || !*addr)
        return fsc_error(FSC_ERR_INVALID, "rendezvous: no address to listen on (MASTER_ADDR: rank 0 listens there "
                         "only; \"0.0.0.0\" or \"::\" would mean every interface)");
    if (port < 0 || port > 65535) return fsc_error(FSC_ERR_INVALID, "rendezvous: port %d outside [0, 65535]", port);
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    int rc = getaddrinfo(addr, ps, &hints, &res);
    if (rc != 0)
        return fsc_error(FSC_ERR_INVALID, "rendezvous: cannot resolve the address \"%s\" to listen on: %s", addr,
                         gai_strerror(rc));
    int fd = -1, err = 0;
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
        int s = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
        if (s < 0) {
            err = errno;
            continue;
        }
        int one = 1;
        setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(s, ai->ai_addr, ai->ai_addrlen) != 0 || listen(s, 256) != 0) {
            err = errno;
            close(s);
            continue;
        }
        fd = s;
    }
    freeaddrinfo(res);
    if (fd < 0)
        return fsc_error(FSC_ERR_IO, "rendezvous: cannot listen on %s port %d: %s%s", addr, port, strerror(err),
                         err == EADDRINUSE      ? " (another job holds it? set MASTER_PORT to a free port)"
                         : err == EADDRNOTAVAIL ? " (MASTER_ADDR must be an address of rank 0's own host)"
                                                : "");
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int bp = port, loopback = 0;
    char text[INET6_ADDRSTRLEN] = "";
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
        bp = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                            : ((struct sockaddr_in *)&ss)->sin_port);
        describe((struct sockaddr *)&ss, text, sizeof text, &loopback);
    }
    fsc_rendezvous_server *s;
    fsc_status st = fsc_rdv_server_new(fd, bp, &s);
    if (st != FSC_OK) {
        close(fd);
        return st;
    }
    snprintf(s->addr, sizeof s->addr, "%s", text[0] ? text : addr);
    s->loopback = loopback;
    if (bound_port) *bound_port = bp;
    *out = s;
    return FSC_OK;
}

void fsc_rendezvous_close(fsc_rendezvous_server *s) {
    if (!s) return;
    fsc_rdv_end(s);
    if (s->fd >= 0) close(s->fd);
    free(s->conns);
    free(s);
}

fsc_status fsc_rendezvous_serve(fsc_rendezvous_server *s, const char *token, int world, const void *blob, size_t len,
                                double timeout_s) {
    if (!s) return fsc_error(FSC_ERR_INVALID, "fsc_rendezvous_serve: server is NULL");
    if (!(timeout_s > 0)) return fsc_error(FSC_ERR_INVALID, "rendezvous: timeout %g s must be positive", timeout_s);
    FSC_TRY(fsc_rdv_begin(s, token, world, blob, len));
    int need = world - 1;
    double deadline = fsc_rdv_now() + timeout_s;
    fsc_status st = FSC_OK;
    while (s->served < need && st == FSC_OK) {
        if (fsc_rdv_ms_until(deadline) == 0) {
            char refused[128] = "", lo[200] = "";
            if (s->refused)
                snprintf(refused, sizeof refused, "; %d connection%s refused for not proving this job's token",
                         s->refused, s->refused == 1 ? " was" : "s were");
            if (s->loopback)
                snprintf(lo, sizeof lo, "; %s is a loopback address, which ranks on other hosts cannot reach "
                         "(set MASTER_ADDR to an address of this host that they reach)", s->addr);
            st = fsc_error(FSC_ERR_TIMEOUT, "rendezvous: rank 0 waited %g s at %s port %d but only %d of the %d "
                           "other ranks joined%s%s (are they running with the same MASTER_ADDR/MASTER_PORT? "
                           "FSC_RENDEZVOUS_TIMEOUT sets the wait)", timeout_s, s->addr, s->port, s->served, need,
                           refused, lo);
            break;
        }
        st = fsc_rdv_pump(s, deadline);
    }
    fsc_rdv_end(s);
    return st;
}

/* ---- the other ranks ---- */

/* Read or write exactly n bytes before deadline: 0 done, -1 timeout, -2 peer closed, -3 error. */
static int io_full(int fd, void *buf, size_t n, double deadline, int writing) {
    unsigned char *p = buf;
    while (n > 0) {
        struct pollfd pfd = {fd, (short)(writing ? POLLOUT : POLLIN), 0};
        int ms = fsc_rdv_ms_until(deadline);
        if (ms == 0) return -1;
        int pr = poll(&pfd, 1, ms);
        if (pr < 0 && errno == EINTR) continue;
        if (pr < 0) return -3;
        if (pr == 0) return -1;
        ssize_t r = writing ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
        if (r < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
        if (r < 0) return -3;
        if (r == 0) return -2;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static fsc_status not_ours(const unsigned char *magic, const char *where) {
    if (memcmp(magic, fsc_rdv_magic, 6) == 0)
        return fsc_error(FSC_ERR_FORMAT, "rendezvous: %s speaks another version of the fsc rendezvous protocol "
                         "(ranks from different fsc builds?)", where);
    return fsc_error(FSC_ERR_FORMAT, "rendezvous: %s does not speak the fsc rendezvous protocol "
                     "(is MASTER_PORT used by another service?)", where);
}

fsc_status fsc_rdv_fetch_fd(int fd, const char *token, const unsigned char *nr, int rank, void *blob, size_t len,
                            double deadline, const char *where, int *retry) {
    unsigned char key[FSC_SHA256_BYTES], ch[FSC_RDV_CHALLENGE], hello[FSC_RDV_HELLO], head[FSC_RDV_ANSWER];
    unsigned char got[FSC_RENDEZVOUS_MAX_BLOB], mac[FSC_SHA256_BYTES];
    *retry = 1;
    FSC_TRY(check_token(token));
    FSC_TRY(check_blob("rendezvous", blob, len));
    if (io_full(fd, ch, sizeof ch, deadline, 0) != 0) return FSC_OK;
    *retry = 0;
    if (memcmp(ch, fsc_rdv_magic, 8) != 0) return not_ours(ch, where);
    fsc_rdv_key(token, key);
    memcpy(hello, fsc_rdv_magic, 8);
    fsc_rdv_put_u32(hello + 8, (uint32_t)rank);
    fsc_rdv_put_u32(hello + 12, (uint32_t)len);
    memcpy(hello + 16, nr, FSC_RDV_NONCE);
    fsc_rdv_hello_mac(key, ch + 8, hello, hello + 32);
    *retry = 1;
    if (io_full(fd, hello, sizeof hello, deadline, 1) != 0 || io_full(fd, head, sizeof head, deadline, 0) != 0)
        return FSC_OK;
    *retry = 0;
    if (memcmp(head, fsc_rdv_magic, 8) != 0) return not_ours(head, where);
    uint32_t status = fsc_rdv_get_u32(head + 8), their_len = fsc_rdv_get_u32(head + 12);
    uint32_t world = fsc_rdv_get_u32(head + 16);
    if (status == FSC_RDV_BAD_TOKEN)
        return fsc_error(FSC_ERR_INVALID, "rendezvous: rank 0 at %s refused rank %d: it could not prove this job's "
                         "token (the ranks see different FSC_RENDEZVOUS_TOKEN values or job ids, or another job "
                         "listens at this MASTER_ADDR/MASTER_PORT)", where, rank);
    int ok = status == FSC_RDV_OK;
    if (ok && their_len != len) return fsc_error(FSC_ERR_FORMAT, "rendezvous: malformed answer from %s", where);
    if (ok && io_full(fd, got, len, deadline, 0) != 0) {
        *retry = 1;
        return FSC_OK;
    }
    fsc_rdv_answer_mac(key, nr, ch + 8, head, ok ? got : NULL, ok ? len : 0, mac);
    if (!fsc_equal_const_time(mac, head + 20, sizeof mac))
        return fsc_error(FSC_ERR_FORMAT, "rendezvous: the answer from %s is not signed with this job's token (is "
                         "MASTER_PORT used by another job?)", where);
    switch (status) {
    case FSC_RDV_OK: memcpy(blob, got, len); return FSC_OK;
    case FSC_RDV_BAD_LEN:
        return fsc_error(FSC_ERR_FORMAT, "rendezvous: rank 0 at %s sends %u-byte ids, rank %d expects %zu "
                         "(different fsc builds?)", where, their_len, rank, len);
    case FSC_RDV_BAD_RANK:
        return fsc_error(FSC_ERR_INVALID, "rendezvous: rank 0 at %s has world size %u, rank %d is outside it", where,
                         world, rank);
    case FSC_RDV_TAKEN:
        return fsc_error(FSC_ERR_INVALID, "rendezvous: rank 0 at %s already admitted a rank %d: two processes claim "
                         "the same rank (check the launcher's rank variables)", where, rank);
    default: return fsc_error(FSC_ERR_FORMAT, "rendezvous: malformed answer from %s (status %u)", where, status);
    }
}

fsc_status fsc_rendezvous_fetch(const char *addr, int port, const char *token, int rank, void *blob, size_t len,
                                double timeout_s) {
    if (!addr || !*addr) return fsc_error(FSC_ERR_INVALID, "rendezvous: no address of rank 0 (set MASTER_ADDR)");
    FSC_TRY(check_blob("fsc_rendezvous_fetch", blob, len));
    FSC_TRY(check_token(token));
    if (port < 1 || port > 65535) return fsc_error(FSC_ERR_INVALID, "rendezvous: port %d outside [1, 65535]", port);
    if (rank < 1) return fsc_error(FSC_ERR_INVALID, "rendezvous: rank %d fetches; only ranks >= 1 do", rank);
    if (!(timeout_s > 0)) return fsc_error(FSC_ERR_INVALID, "rendezvous: timeout %g s must be positive", timeout_s);
    char ps[16], where[300], last[160] = "no attempt finished";
    snprintf(ps, sizeof ps, "%d", port);
    snprintf(where, sizeof where, "%s:%d", addr, port);
    double deadline = fsc_rdv_now() + timeout_s;
    for (;;) {
        struct addrinfo hints = {0}, *res = NULL;
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        hints.ai_flags = AI_NUMERICSERV;
        int rc = getaddrinfo(addr, ps, &hints, &res);
        if (rc != 0 && rc != EAI_AGAIN)
            return fsc_error(FSC_ERR_INVALID, "rendezvous: cannot resolve MASTER_ADDR \"%s\": %s", addr, gai_strerror(rc));
        if (rc == EAI_AGAIN) snprintf(last, sizeof last, "resolving: %s", gai_strerror(rc));
        for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
            int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
            if (fd < 0) {
                snprintf(last, sizeof last, "socket: %s", strerror(errno));
                continue;
            }
            int err = 0;
            if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
                err = errno;
                if (err == EINPROGRESS) {
                    struct pollfd pfd = {fd, POLLOUT, 0};
                    int ms = fsc_rdv_ms_until(deadline);
                    int pr = poll(&pfd, 1, ms < 2000 ? ms : 2000);
                    socklen_t sl = sizeof err;
                    if (pr <= 0) err = ETIMEDOUT;
                    else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &sl) != 0) err = errno;
                }
            }
            if (err) {
                snprintf(last, sizeof last, "%s", strerror(err));
                close(fd);
                continue;
            }
            unsigned char nr[FSC_RDV_NONCE];
            int retry = 0;
            fsc_status s = random_bytes(nr, sizeof nr);
            if (s == FSC_OK) s = fsc_rdv_fetch_fd(fd, token, nr, rank, blob, len, deadline, where, &retry);
            close(fd);
            if (s != FSC_OK || !retry) {
                freeaddrinfo(res);
                return s;
            }
            snprintf(last, sizeof last, "rank 0 closed the connection before answering");
        }
        if (res) freeaddrinfo(res);
        if (fsc_rdv_ms_until(deadline) == 0)
            return fsc_error(FSC_ERR_TIMEOUT, "rendezvous: rank %d could not get the id from rank 0 at %s within %g s "
                             "(last error: %s); is rank 0 running, and are MASTER_ADDR/MASTER_PORT right? "
                             "(FSC_RENDEZVOUS_TIMEOUT sets the wait)", rank, where, timeout_s, last);
        double left = deadline - fsc_rdv_now();
        fsc_rdv_sleep(left < 0.1 ? left : 0.1);
    }
}

fsc_status fsc_rendezvous_tcp(const char *addr, int port, const char *token, int rank, int world, void *blob,
                              size_t len, double timeout_s) {
    if (world < 1 || rank < 0 || rank >= world)
        return fsc_error(FSC_ERR_INVALID, "rendezvous: rank %d of world %d", rank, world);
    if (world == 1) return FSC_OK;
    if (rank > 0) return fsc_rendezvous_fetch(addr, port, token, rank, blob, len, timeout_s);
    if (port < 1 || port > 65535) return fsc_error(FSC_ERR_INVALID, "rendezvous: port %d outside [1, 65535]", port);
    FSC_TRY(check_token(token));
    fsc_rendezvous_server *s;
    FSC_TRY(fsc_rendezvous_listen(addr, port, &s, NULL));
    fsc_status st = fsc_rendezvous_serve(s, token, world, blob, len, timeout_s);
    fsc_rendezvous_close(s);
    return st;
}
