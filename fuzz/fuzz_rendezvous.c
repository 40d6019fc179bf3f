/* libFuzzer harness for the bytes the rendezvous reads from others (lib/core/launch.c): the first byte
 * picks what the rest is, all for a world of 2 and a 128-byte id.
 *   0  the file rank 1 reads (fsc_rendezvous_file): taken exactly when it is magic, world 2, length 128
 *      and 128 bytes; a file of another world waits for rank 0 to replace it (a timeout), anything else
 *      is FSC_ERR_FORMAT.
 *   1  a client's hello to rank 0 (fsc_rendezvous_serve on 127.0.0.1; its first 16 bytes are sent, and a
 *      shorter one is cut off by a reset): the server answers it as the protocol says (nothing to a stranger,
 *      a refusal to a wrong rank or length, the id to rank 1), counts only a genuine rank 1 and then serves
 *      the real rank 1 that connects next.
 *   2  rank 0's answer to rank 1 (fsc_rendezvous_fetch against a fake rank 0): the id when the answer is
 *      well formed, else FSC_ERR_FORMAT or FSC_ERR_INVALID as its status says. Answers that end early make
 *      the client reconnect until its timeout (no parsing; the unit tests cover it), so they are skipped.
 * Every refusal sets a message. Build and run: ci/fuzz.sh SECONDS fuzz/fuzz_rendezvous.c (or make fuzz). */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "fsc/fsc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { ID = 128, WORLD = 2 };
static const unsigned char MAGIC[8] = {'F', 'S', 'C', 'R', 'D', 'V', '0', '1'};
static unsigned char id[ID]; /* what rank 0 serves */

static uint32_t get_u32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}
static void put_u32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24), p[1] = (unsigned char)(v >> 16), p[2] = (unsigned char)(v >> 8), p[3] = (unsigned char)v;
}

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
    int framed = n >= 16 && memcmp(d, MAGIC, 8) == 0 && get_u32(d + 12) == ID && n == 16 + ID;
    unsigned char blob[ID];
    fsc_clear_error();
    fsc_status st = fsc_rendezvous_file(path, 1, WORLD, blob, ID, 1e-6);
    if (framed && get_u32(d + 8) == WORLD) {
        if (st != FSC_OK || memcmp(blob, d + 16, ID) != 0) __builtin_trap();
    } else {
        if (st != (framed ? FSC_ERR_TIMEOUT : FSC_ERR_FORMAT)) __builtin_trap();
        check_refusal();
    }
}

/* ---- sockets on 127.0.0.1 ---- */

static int dial(int port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) abort();
    return fd;
}

/* Everything fd receives until the peer closes (at most cap bytes). */
static size_t drain(int fd, unsigned char *buf, size_t cap) {
    size_t got = 0;
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 5000) <= 0) abort(); /* the server closed every connection it took */
        ssize_t r = recv(fd, buf + got, cap - got, 0);
        if (r <= 0) return got;
        got += (size_t)r;
        if (got == cap) return got;
    }
}

/* ---- 1: a hello to rank 0 ---- */

static void fuzz_serve(const uint8_t *d, size_t n) {
    static fsc_rendezvous_server *s; /* one rank 0 for every input: fresh ports would run out in TIME_WAIT */
    static int port;
    if (!s && fsc_rendezvous_listen("127.0.0.1", 0, &s, &port) != FSC_OK) abort();
    if (n > 16) n = 16;
    int stranger = n < 16 || memcmp(d, MAGIC, 8) != 0;
    uint32_t want = stranger ? 0 : get_u32(d + 12) != ID ? 1 : get_u32(d + 8) != 1 ? 2 : 0;
    int genuine = !stranger && want == 0;
    int a = dial(port), b = -1;
    if (n && send(a, d, n, MSG_NOSIGNAL) != (ssize_t)n) abort();
    if (n < 16) { /* a hello cut short: the connection is reset (a FIN would leave this side in TIME_WAIT) */
        struct linger lg = {1, 0};
        setsockopt(a, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        close(a);
        a = -1;
    }
    if (!genuine) { /* the real rank 1, served after a; nobody is left waiting for the next input */
        unsigned char hello[16];
        memcpy(hello, MAGIC, 8);
        put_u32(hello + 8, 1);
        put_u32(hello + 12, ID);
        b = dial(port);
        if (send(b, hello, 16, MSG_NOSIGNAL) != 16) abort();
    }
    fsc_clear_error();
    if (fsc_rendezvous_serve(s, WORLD, id, ID, 10.0) != FSC_OK) __builtin_trap(); /* rank 1 came */
    unsigned char ans[20 + ID + 1];
    size_t got = a >= 0 ? drain(a, ans, sizeof ans) : 0;
    if (stranger) {
        if (got != 0) __builtin_trap(); /* strangers get nothing */
    } else if (got != 20 + (genuine ? ID : 0) || memcmp(ans, MAGIC, 8) != 0 || get_u32(ans + 8) != want ||
               get_u32(ans + 12) != ID || get_u32(ans + 16) != WORLD || (genuine && memcmp(ans + 20, id, ID) != 0)) {
        __builtin_trap();
    }
    if (b >= 0) {
        got = drain(b, ans, sizeof ans);
        if (got != 20 + ID || get_u32(ans + 8) != 0 || memcmp(ans + 20, id, ID) != 0) __builtin_trap();
        close(b);
    }
    if (a >= 0) close(a);
}

/* ---- 2: rank 0's answer ---- */

typedef struct {
    int fd;
    const uint8_t *reply;
    size_t len;
} fake_rank0;

static void *fake_rank0_main(void *p) { /* one connection: read the hello, send the reply, close */
    fake_rank0 *f = p;
    struct pollfd pl = {f->fd, POLLIN, 0};
    if (poll(&pl, 1, 5000) <= 0) return NULL;
    int c = accept(f->fd, NULL, NULL);
    if (c < 0) return NULL;
    unsigned char hello[16];
    size_t got = 0;
    ssize_t r;
    while (got < 16 && (r = recv(c, hello + got, 16 - got, 0)) > 0) got += (size_t)r;
    if (send(c, f->reply, f->len, MSG_NOSIGNAL) < 0) {}
    close(c);
    return NULL;
}

static void fuzz_fetch(const uint8_t *d, size_t n) {
    static int fd = -1, port; /* one listening socket for every input */
    if (n > 4096) n = 4096;
    if (n < 20) return; /* ends early: the client retries until its timeout */
    int well = memcmp(d, MAGIC, 8) == 0, status = (int)get_u32(d + 8);
    uint32_t len = get_u32(d + 12);
    if (well && status == 0 && len == ID && n < 20 + ID) return; /* the id ends early: retries too */
    if (fd < 0) {
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t sl = sizeof sa;
        if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, 8) != 0 ||
            getsockname(fd, (struct sockaddr *)&sa, &sl) != 0)
            abort();
        port = ntohs(sa.sin_port);
    }
    fake_rank0 f = {fd, d, n};
    pthread_t th;
    if (pthread_create(&th, NULL, fake_rank0_main, &f) != 0) abort();
    unsigned char blob[ID];
    fsc_clear_error();
    fsc_status st = fsc_rendezvous_fetch("127.0.0.1", port, 1, blob, ID, 5.0);
    pthread_join(th, NULL);
    fsc_status want = !well ? FSC_ERR_FORMAT : status == 1 ? FSC_ERR_FORMAT : status == 2 ? FSC_ERR_INVALID
                    : status != 0 || len != ID ? FSC_ERR_FORMAT : FSC_OK;
    if (st != want) __builtin_trap();
    if (st == FSC_OK && memcmp(blob, d + 20, ID) != 0) __builtin_trap();
    if (st != FSC_OK) check_refusal();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    if (!id[0])
        for (int i = 0; i < ID; i++) id[i] = (unsigned char)(i * 37 + 1);
    switch (data[0] % 3) {
    case 0: fuzz_file(data + 1, size - 1); break;
    case 1: fuzz_serve(data + 1, size - 1); break;
    default: fuzz_fetch(data + 1, size - 1); break;
    }
    return 0;
}
