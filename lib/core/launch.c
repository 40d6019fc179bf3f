/* One process per GPU: fsc_cluster_run_from_env and its parts (launch.h).
 * Reads the launcher's environment (torchrun, Slurm, Open MPI), hands the NCCL unique id from rank 0 to
 * the other ranks (TCP at MASTER_ADDR:MASTER_PORT, or a shared file), opens the cuda device and the NCCL
 * communicator that the cuda plug-in exports, and runs the training function once.
 * No CUDA here: the GPU side lives in the plug-in (backends/cuda); without it, or without a GPU, the
 * run fails with FSC_ERR_UNSUPPORTED and a message. Not here: the simulated cluster (sim/). */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "fsc/fsc.h"
#include "core/device_impl.h"
#include "core/comm_impl.h"

/* ---- the launcher's environment ---- */

static const struct {
    fsc_launcher l;
    const char *name, *rank, *size, *local;
} launchers[] = {
    {FSC_LAUNCHER_TORCHRUN, "torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
    {FSC_LAUNCHER_SLURM, "slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
    {FSC_LAUNCHER_OPENMPI, "openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
};
#define N_LAUNCHERS (sizeof launchers / sizeof launchers[0])
#define MAX_WORLD (1 << 20)

const char *fsc_launcher_name(fsc_launcher l) {
    for (size_t i = 0; i < N_LAUNCHERS; i++)
        if (launchers[i].l == l) return launchers[i].name;
    return l == FSC_LAUNCHER_NONE ? "none" : "invalid";
}

static const char *env_get(fsc_env_lookup f, void *c, const char *name) { return f ? f(c, name) : getenv(name); }

/* A decimal integer in [lo, hi], surrounding blanks allowed. */
static fsc_status parse_long(const char *who, const char *name, const char *v, long lo, long hi, long *out) {
    if (!v) return fsc_error(FSC_ERR_INVALID, "%s: %s is not set", who, name);
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    const char *rest = end;
    while (*rest == ' ' || *rest == '\t' || *rest == '\n') rest++;
    if (end == v || *rest) return fsc_error(FSC_ERR_INVALID, "%s: %s is \"%s\", not an integer", who, name, v);
    if (errno == ERANGE || x < lo || x > hi)
        return fsc_error(FSC_ERR_INVALID, "%s: %s is %s, outside [%ld, %ld]", who, name, v, lo, hi);
    *out = x;
    return FSC_OK;
}

static fsc_status parse_seconds(const char *name, const char *v, double *out) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    while (*end == ' ' || *end == '\t' || *end == '\n') end++;
    if (end == v || *end || errno == ERANGE || !(x > 0) || x > 1e7)
        return fsc_error(FSC_ERR_INVALID, "%s is \"%s\": expected a number of seconds in (0, 1e7]", name, v);
    *out = x;
    return FSC_OK;
}

static fsc_status copy_string(const char *name, const char *v, char *dst, size_t cap) {
    if (!*v) return fsc_error(FSC_ERR_INVALID, "%s is set but empty", name);
    if (strlen(v) >= cap) return fsc_error(FSC_ERR_INVALID, "%s is %zu characters long (at most %zu)", name, strlen(v), cap - 1);
    memcpy(dst, v, strlen(v) + 1);
    return FSC_OK;
}

fsc_status fsc_launch_env_parse(fsc_env_lookup lookup, void *lookup_ctx, fsc_launch_env *out) {
    if (!out) return fsc_error(FSC_ERR_INVALID, "fsc_launch_env_parse: out is NULL");
    memset(out, 0, sizeof *out);
    out->world = 1;
    out->timeout_s = 60.0;
    out->comm_timeout_s = 600.0;
    int chosen = -1;
    const char *force = env_get(lookup, lookup_ctx, "FSC_LAUNCHER");
    if (force && *force) {
        if (strcmp(force, "none") != 0) {
            for (size_t i = 0; i < N_LAUNCHERS; i++)
                if (strcmp(force, launchers[i].name) == 0) chosen = (int)i;
            if (chosen < 0)
                return fsc_error(FSC_ERR_INVALID, "FSC_LAUNCHER is \"%s\" (known: torchrun, slurm, openmpi, none)", force);
        }
    } else {
        for (size_t i = 0; i < N_LAUNCHERS && chosen < 0; i++)
            if (env_get(lookup, lookup_ctx, launchers[i].rank) || env_get(lookup, lookup_ctx, launchers[i].size) ||
                env_get(lookup, lookup_ctx, launchers[i].local))
                chosen = (int)i;
    }
    if (chosen >= 0) {
        char who[64];
        snprintf(who, sizeof who, "%s launch", launchers[chosen].name);
        long world, rank, local;
        FSC_TRY(parse_long(who, launchers[chosen].size, env_get(lookup, lookup_ctx, launchers[chosen].size), 1,
                           MAX_WORLD, &world));
        FSC_TRY(parse_long(who, launchers[chosen].rank, env_get(lookup, lookup_ctx, launchers[chosen].rank), 0,
                           world - 1, &rank));
        FSC_TRY(parse_long(who, launchers[chosen].local, env_get(lookup, lookup_ctx, launchers[chosen].local), 0,
                           world - 1, &local));
        /* mpirun inside a Slurm allocation inherits the batch script's SLURM_* variables: refuse to guess */
        const char *ompi = env_get(lookup, lookup_ctx, "OMPI_COMM_WORLD_SIZE");
        if (!force && launchers[chosen].l == FSC_LAUNCHER_SLURM && ompi && strtol(ompi, NULL, 10) != world)
            return fsc_error(FSC_ERR_INVALID, "both Slurm (SLURM_NTASKS=%ld) and Open MPI (OMPI_COMM_WORLD_SIZE=%s) "
                             "variables are set and disagree: set FSC_LAUNCHER=openmpi or FSC_LAUNCHER=slurm", world, ompi);
        out->launcher = launchers[chosen].l;
        out->world = (int)world;
        out->rank = (int)rank;
        out->local_rank = (int)local;
    }
    const char *v;
    if ((v = env_get(lookup, lookup_ctx, "MASTER_ADDR")))
        FSC_TRY(copy_string("MASTER_ADDR", v, out->master_addr, sizeof out->master_addr));
    if ((v = env_get(lookup, lookup_ctx, "MASTER_PORT"))) {
        long port;
        FSC_TRY(parse_long("rendezvous", "MASTER_PORT", v, 1, 65535, &port));
        out->master_port = (int)port;
    }
    if ((v = env_get(lookup, lookup_ctx, "FSC_RENDEZVOUS_FILE")))
        FSC_TRY(copy_string("FSC_RENDEZVOUS_FILE", v, out->rendezvous_file, sizeof out->rendezvous_file));
    if ((v = env_get(lookup, lookup_ctx, "FSC_RENDEZVOUS_TIMEOUT")))
        FSC_TRY(parse_seconds("FSC_RENDEZVOUS_TIMEOUT", v, &out->timeout_s));
    if ((v = env_get(lookup, lookup_ctx, "FSC_COMM_TIMEOUT")))
        FSC_TRY(parse_seconds("FSC_COMM_TIMEOUT", v, &out->comm_timeout_s));
    return FSC_OK;
}

/* ---- TCP rendezvous ----
 * hello  (rank -> 0): magic[8] rank:u32 len:u32                       (big-endian)
 * answer (0 -> rank): magic[8] status:u32 len:u32 world:u32 blob[len] (blob only when status is 0) */

static const char MAGIC[8] = {'F', 'S', 'C', 'R', 'D', 'V', '0', '1'};
enum { RDV_OK = 0, RDV_BAD_LEN = 1, RDV_BAD_RANK = 2 };

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int ms_until(double deadline) {
    double r = deadline - now_s();
    return r <= 0 ? 0 : (r > 1e6 ? 1000000000 : (int)(r * 1000.0) + 1);
}

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

static void put_u32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24), p[1] = (unsigned char)(v >> 16), p[2] = (unsigned char)(v >> 8), p[3] = (unsigned char)v;
}
static uint32_t get_u32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

/* Read or write exactly n bytes before deadline: 0 done, -1 timeout, -2 peer closed, -3 error (errno). */
static int io_full(int fd, void *buf, size_t n, double deadline, int writing) {
    unsigned char *p = buf;
    while (n > 0) {
        struct pollfd pfd = {fd, (short)(writing ? POLLOUT : POLLIN), 0};
        int ms = ms_until(deadline);
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

struct fsc_rendezvous_server {
    int fd;
    int port;
};

static fsc_status check_blob(const char *who, size_t len) {
    if (len == 0 || len > FSC_RENDEZVOUS_MAX_BLOB)
        return fsc_error(FSC_ERR_INVALID, "%s: blob of %zu bytes (1..%d allowed)", who, len, FSC_RENDEZVOUS_MAX_BLOB);
    return FSC_OK;
}

fsc_status fsc_rendezvous_listen(const char *addr, int port, fsc_rendezvous_server **out, int *bound_port) {
    if (!out) return fsc_error(FSC_ERR_INVALID, "fsc_rendezvous_listen: out is NULL");
    *out = NULL;
    if (port < 0 || port > 65535) return fsc_error(FSC_ERR_INVALID, "rendezvous: port %d outside [0, 65535]", port);
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    int rc = getaddrinfo(addr, ps, &hints, &res);
    if (rc != 0)
        return fsc_error(FSC_ERR_INVALID, "rendezvous: cannot resolve the address \"%s\" to listen on: %s",
                         addr ? addr : "*", gai_strerror(rc));
    int fd = -1, err = 0;
    /* with no address, prefer the IPv6 wildcard in dual-stack mode so IPv4 peers reach it too */
    for (int pass = 0; pass < 2 && fd < 0; pass++) {
        for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
            if ((pass == 0) != (ai->ai_family == AF_INET6 && !addr)) continue;
            int s = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
            if (s < 0) { err = errno; continue; }
            int one = 1, zero = 0;
            setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
            if (ai->ai_family == AF_INET6) setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
            if (bind(s, ai->ai_addr, ai->ai_addrlen) != 0 || listen(s, 256) != 0) {
                err = errno;
                close(s);
                continue;
            }
            fd = s;
        }
    }
    freeaddrinfo(res);
    if (fd < 0)
        return fsc_error(FSC_ERR_IO, "rendezvous: cannot listen on %s port %d: %s%s", addr ? addr : "every interface",
                         port, strerror(err),
                         err == EADDRINUSE ? " (another job holds it? set MASTER_PORT to a free port)" : "");
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int bp = port;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
        bp = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port : ((struct sockaddr_in *)&ss)->sin_port);
    fsc_rendezvous_server *s = calloc(1, sizeof *s);
    if (!s) {
        close(fd);
        return fsc_error(FSC_ERR_NOMEM, "rendezvous: out of memory");
    }
    s->fd = fd;
    s->port = bp;
    if (bound_port) *bound_port = bp;
    *out = s;
    return FSC_OK;
}

void fsc_rendezvous_close(fsc_rendezvous_server *s) {
    if (!s) return;
    close(s->fd);
    free(s);
}

fsc_status fsc_rendezvous_serve(fsc_rendezvous_server *s, int world, const void *blob, size_t len, double timeout_s) {
    if (!s || !blob) return fsc_error(FSC_ERR_INVALID, "fsc_rendezvous_serve: NULL server or blob");
    FSC_TRY(check_blob("fsc_rendezvous_serve", len));
    if (world < 1 || world > MAX_WORLD) return fsc_error(FSC_ERR_INVALID, "rendezvous: world size %d", world);
    if (!(timeout_s > 0)) return fsc_error(FSC_ERR_INVALID, "rendezvous: timeout %g s must be positive", timeout_s);
    unsigned char *served = calloc((size_t)world, 1);
    unsigned char *answer = malloc(20 + len);
    if (!served || !answer) {
        free(served);
        free(answer);
        return fsc_error(FSC_ERR_NOMEM, "rendezvous: out of memory");
    }
    int need = world - 1, got = 0;
    double deadline = now_s() + timeout_s;
    fsc_status st = FSC_OK;
    while (got < need) {
        struct pollfd pfd = {s->fd, POLLIN, 0};
        int ms = ms_until(deadline);
        if (ms == 0) {
            st = fsc_error(FSC_ERR_TIMEOUT, "rendezvous: rank 0 waited %g s on port %d but only %d of the %d other "
                           "ranks connected (are they running with the same MASTER_ADDR/MASTER_PORT? "
                           "FSC_RENDEZVOUS_TIMEOUT sets the wait)", timeout_s, s->port, got, need);
            break;
        }
        int pr = poll(&pfd, 1, ms);
        if (pr <= 0) continue; /* timeout is checked above; EINTR retries */
        int c = accept4(s->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (c < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) continue;
            st = fsc_error(FSC_ERR_IO, "rendezvous: accept on port %d failed: %s", s->port, strerror(errno));
            break;
        }
        unsigned char hello[16];
        double hs_deadline = now_s() + 5.0 < deadline ? now_s() + 5.0 : deadline;
        if (io_full(c, hello, sizeof hello, hs_deadline, 0) == 0 && memcmp(hello, MAGIC, 8) == 0) {
            uint32_t rank = get_u32(hello + 8), their_len = get_u32(hello + 12);
            uint32_t status = their_len != len ? RDV_BAD_LEN : (rank < 1 || rank >= (uint32_t)world) ? RDV_BAD_RANK : RDV_OK;
            memcpy(answer, MAGIC, 8);
            put_u32(answer + 8, status);
            put_u32(answer + 12, (uint32_t)len);
            put_u32(answer + 16, (uint32_t)world);
            memcpy(answer + 20, blob, len);
            size_t n = 20 + (status == RDV_OK ? len : 0);
            if (io_full(c, answer, n, hs_deadline, 1) == 0 && status == RDV_OK && !served[rank]) {
                served[rank] = 1;
                got++;
            }
        } /* anything else (a port scanner, a stale client) is dropped without counting */
        close(c);
    }
    free(served);
    free(answer);
    return st;
}

/* One attempt on a connected socket: 0 done, 1 retry later (peer went away), or a final error status. */
static fsc_status fetch_once(int fd, int rank, void *blob, size_t len, double deadline, const char *where, int *retry) {
    unsigned char hello[16], head[20];
    memcpy(hello, MAGIC, 8);
    put_u32(hello + 8, (uint32_t)rank);
    put_u32(hello + 12, (uint32_t)len);
    *retry = 1;
    if (io_full(fd, hello, sizeof hello, deadline, 1) != 0 || io_full(fd, head, sizeof head, deadline, 0) != 0)
        return FSC_OK;
    *retry = 0;
    if (memcmp(head, MAGIC, 8) != 0)
        return fsc_error(FSC_ERR_FORMAT, "rendezvous: %s does not speak the fsc rendezvous protocol "
                         "(is MASTER_PORT used by another service?)", where);
    uint32_t status = get_u32(head + 8), their_len = get_u32(head + 12), world = get_u32(head + 16);
    if (status == RDV_BAD_LEN)
        return fsc_error(FSC_ERR_FORMAT, "rendezvous: rank 0 at %s sends %u-byte ids, rank %d expects %zu "
                         "(different fsc builds?)", where, their_len, rank, len);
    if (status == RDV_BAD_RANK)
        return fsc_error(FSC_ERR_INVALID, "rendezvous: rank 0 at %s has world size %u, rank %d is outside it", where,
                         world, rank);
    if (status != RDV_OK || their_len != len)
        return fsc_error(FSC_ERR_FORMAT, "rendezvous: malformed answer from %s", where);
    if (io_full(fd, blob, len, deadline, 0) != 0) *retry = 1;
    return FSC_OK;
}

fsc_status fsc_rendezvous_fetch(const char *addr, int port, int rank, void *blob, size_t len, double timeout_s) {
    if (!addr || !*addr) return fsc_error(FSC_ERR_INVALID, "rendezvous: no address of rank 0 (set MASTER_ADDR)");
    if (!blob) return fsc_error(FSC_ERR_INVALID, "fsc_rendezvous_fetch: blob is NULL");
    FSC_TRY(check_blob("fsc_rendezvous_fetch", len));
    if (port < 1 || port > 65535) return fsc_error(FSC_ERR_INVALID, "rendezvous: port %d outside [1, 65535]", port);
    if (rank < 1) return fsc_error(FSC_ERR_INVALID, "rendezvous: rank %d fetches; only ranks >= 1 do", rank);
    if (!(timeout_s > 0)) return fsc_error(FSC_ERR_INVALID, "rendezvous: timeout %g s must be positive", timeout_s);
    char ps[16], where[300], last[160] = "no attempt finished";
    snprintf(ps, sizeof ps, "%d", port);
    snprintf(where, sizeof where, "%s:%d", addr, port);
    double deadline = now_s() + timeout_s;
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
                    int ms = ms_until(deadline);
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
            int retry = 0;
            fsc_status s = fetch_once(fd, rank, blob, len, deadline, where, &retry);
            close(fd);
            if (s != FSC_OK) {
                freeaddrinfo(res);
                return s;
            }
            if (!retry) {
                freeaddrinfo(res);
                return FSC_OK;
            }
            snprintf(last, sizeof last, "rank 0 closed the connection before answering");
        }
        if (res) freeaddrinfo(res);
        if (ms_until(deadline) == 0)
            return fsc_error(FSC_ERR_TIMEOUT, "rendezvous: rank %d could not get the id from rank 0 at %s within %g s "
                             "(last error: %s); is rank 0 running, and are MASTER_ADDR/MASTER_PORT right? "
                             "(FSC_RENDEZVOUS_TIMEOUT sets the wait)", rank, where, timeout_s, last);
        double left = deadline - now_s();
        sleep_s(left < 0.1 ? (left > 0 ? left : 0) : 0.1);
    }
}

fsc_status fsc_rendezvous_tcp(const char *addr, int port, int rank, int world, void *blob, size_t len,
                              double timeout_s) {
    if (world < 1 || rank < 0 || rank >= world)
        return fsc_error(FSC_ERR_INVALID, "rendezvous: rank %d of world %d", rank, world);
    if (world == 1) return FSC_OK;
    if (rank > 0) return fsc_rendezvous_fetch(addr, port, rank, blob, len, timeout_s);
    if (port < 1 || port > 65535) return fsc_error(FSC_ERR_INVALID, "rendezvous: port %d outside [1, 65535]", port);
    fsc_rendezvous_server *s;
    FSC_TRY(fsc_rendezvous_listen(NULL, port, &s, NULL));
    fsc_status st = fsc_rendezvous_serve(s, world, blob, len, timeout_s);
    fsc_rendezvous_close(s);
    return st;
}

/* ---- file rendezvous: magic[8] world:u32 len:u32 blob[len], written to a temporary name and renamed ---- */

static fsc_status file_publish(const char *path, int world, const void *blob, size_t len) {
    char tmp[1200];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp)
        return fsc_error(FSC_ERR_INVALID, "rendezvous file path too long: %s", path);
    unsigned char head[16];
    memcpy(head, MAGIC, 8);
    put_u32(head + 8, (uint32_t)world);
    put_u32(head + 12, (uint32_t)len);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return fsc_error(FSC_ERR_IO, "rendezvous: cannot create %s: %s", tmp, strerror(errno));
    int ok = write(fd, head, sizeof head) == (ssize_t)sizeof head && write(fd, blob, len) == (ssize_t)len &&
             fsync(fd) == 0;
    int err = errno;
    if (close(fd) != 0 && ok) ok = 0, err = errno;
    if (!ok || rename(tmp, path) != 0) {
        if (ok) err = errno;
        unlink(tmp);
        return fsc_error(FSC_ERR_IO, "rendezvous: cannot write %s: %s", path, strerror(err));
    }
    /* make the rename durable (best effort: some shared filesystems refuse fsync on directories) */
    char dir[1200];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) *(slash == dir ? slash + 1 : slash) = '\0';
    else snprintf(dir, sizeof dir, ".");
    int dfd = open(dir, O_RDONLY | O_CLOEXEC);
    if (dfd >= 0) {
        (void)fsync(dfd);
        close(dfd);
    }
    return FSC_OK;
}

fsc_status fsc_rendezvous_file(const char *path, int rank, int world, void *blob, size_t len, double timeout_s) {
    if (!path || !*path) return fsc_error(FSC_ERR_INVALID, "rendezvous: empty file path");
    if (!blob) return fsc_error(FSC_ERR_INVALID, "fsc_rendezvous_file: blob is NULL");
    FSC_TRY(check_blob("fsc_rendezvous_file", len));
    if (world < 1 || world > MAX_WORLD || rank < 0 || rank >= world)
        return fsc_error(FSC_ERR_INVALID, "rendezvous: rank %d of world %d", rank, world);
    if (!(timeout_s > 0)) return fsc_error(FSC_ERR_INVALID, "rendezvous: timeout %g s must be positive", timeout_s);
    if (rank == 0) return file_publish(path, world, blob, len);
    unsigned char *buf = malloc(16 + len + 1);
    if (!buf) return fsc_error(FSC_ERR_NOMEM, "rendezvous: out of memory");
    double deadline = now_s() + timeout_s;
    uint32_t stale_world = 0;
    fsc_status st = FSC_OK;
    for (;;) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0 && errno != ENOENT) {
            st = fsc_error(FSC_ERR_IO, "rendezvous: cannot open %s: %s", path, strerror(errno));
            break;
        }
        if (fd >= 0) {
            size_t got = 0;
            ssize_t r;
            while (got < 16 + len + 1 && (r = read(fd, buf + got, 16 + len + 1 - got)) > 0) got += (size_t)r;
            close(fd);
            if (got < 16 || memcmp(buf, MAGIC, 8) != 0) {
                st = fsc_error(FSC_ERR_FORMAT, "rendezvous: %s is not an fsc rendezvous file", path);
                break;
            }
            uint32_t w = get_u32(buf + 8), l = get_u32(buf + 12);
            if (l != len || got != 16 + len) {
                st = fsc_error(FSC_ERR_FORMAT, "rendezvous: %s holds a %u-byte id, rank %d expects %zu", path, l, rank, len);
                break;
            }
            if (w == (uint32_t)world) {
                memcpy(blob, buf + 16, len);
                break;
            }
            stale_world = w; /* left by an earlier run of another size: wait for rank 0 to replace it */
        }
        if (ms_until(deadline) == 0) {
            if (stale_world)
                st = fsc_error(FSC_ERR_TIMEOUT, "rendezvous: %s is for world size %u, not %d, and rank 0 did not "
                               "replace it within %g s (a file left by an earlier run? use a fresh path)", path,
                               stale_world, world, timeout_s);
            else
                st = fsc_error(FSC_ERR_TIMEOUT, "rendezvous: file %s did not appear within %g s (is rank 0 running "
                               "with the same FSC_RENDEZVOUS_FILE, on a filesystem every rank sees?)", path, timeout_s);
            break;
        }
        sleep_s(0.02);
    }
    free(buf);
    return st;
}

/* ---- fsc_cluster_run_from_env ---- */

static void *plugin_sym(fsc_device *dev, const char *name) {
    return dlsym(dev->plugin ? dev->plugin : RTLD_DEFAULT, name);
}

/* GPU of this process: the local rank's, or 0 when CUDA_VISIBLE_DEVICES leaves a single GPU visible. */
static int pick_ordinal(const fsc_launch_env *env) {
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    if (vis && *vis && !strchr(vis, ',')) return 0;
    return env->local_rank;
}

fsc_status fsc_cluster_run_from_env(fsc_rank_fn fn, void *arg) {
    if (!fn) return fsc_error(FSC_ERR_INVALID, "fsc_cluster_run_from_env: fn is NULL");
    fsc_launch_env env;
    FSC_TRY(fsc_launch_env_parse(NULL, NULL, &env));
    char who[96];
    snprintf(who, sizeof who, "rank %d of %d (%s)", env.rank, env.world, fsc_launcher_name(env.launcher));
    if (env.world > 1 && !env.rendezvous_file[0] && (!env.master_addr[0] || !env.master_port))
        return fsc_error(FSC_ERR_INVALID, "%s: a world of %d processes needs a rendezvous: set MASTER_ADDR and "
                         "MASTER_PORT (rank 0's host and a free port) or FSC_RENDEZVOUS_FILE (a path every rank sees)",
                         who, env.world);
    fsc_device *dev = NULL;
    fsc_device_opts dopts = {0};
    dopts.ordinal = pick_ordinal(&env);
    fsc_status s = fsc_device_create("cuda", &dopts, &dev);
    if (s != FSC_OK) return fsc_error_prefix(s, "%s", who);
    fsc_nccl_get_unique_id_fn get_id;
    fsc_nccl_comm_open_fn comm_open;
    void *p1 = plugin_sym(dev, "fsc_nccl_get_unique_id"), *p2 = plugin_sym(dev, "fsc_nccl_comm_open");
    memcpy(&get_id, &p1, sizeof get_id);
    memcpy(&comm_open, &p2, sizeof comm_open);
    if (!p1 || !p2) {
        fsc_device_free(dev);
        return fsc_error(FSC_ERR_UNSUPPORTED, "%s: the cuda plug-in has no NCCL communicator "
                         "(fsc_nccl_get_unique_id/fsc_nccl_comm_open missing)", who);
    }
    unsigned char id[FSC_UNIQUE_ID_BYTES] = {0};
    if (env.rank == 0) s = get_id(id, sizeof id);
    if (s == FSC_OK && env.world > 1) {
        if (env.rendezvous_file[0])
            s = fsc_rendezvous_file(env.rendezvous_file, env.rank, env.world, id, sizeof id, env.timeout_s);
        else
            s = fsc_rendezvous_tcp(env.master_addr, env.master_port, env.rank, env.world, id, sizeof id, env.timeout_s);
    }
    const fsc_comm_ops *cops = NULL;
    void *cctx = NULL;
    if (s == FSC_OK)
        s = comm_open(FSC_COMM_ABI_VERSION, id, sizeof id, env.rank, env.world, dev->ctx, env.comm_timeout_s, &cops,
                      &cctx);
    /* the communicator is up only once every rank has joined, so every rank has read the file */
    if (s == FSC_OK && env.rank == 0 && env.world > 1 && env.rendezvous_file[0]) unlink(env.rendezvous_file);
    fsc_comm *comm = NULL;
    if (s == FSC_OK) s = fsc_comm_wrap(cops, cctx, env.rank, env.world, "world", &comm);
    if (s != FSC_OK) {
        s = fsc_error_prefix(s, "%s", who);
        fsc_device_free(dev);
        return s;
    }
    fsc_rank r = {.rank = env.rank, .world = env.world, .local_rank = env.local_rank, .dev = dev, .comm = comm};
    s = fn(&r, arg);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", fsc_last_error());
    fsc_comm_free(comm);
    fsc_device_free(dev);
    if (s != FSC_OK) return fsc_error(s, "%s: %s", who, msg[0] ? msg : fsc_status_str(s));
    return FSC_OK;
}
