/* Tests of lib/core/launch.c: the launcher environment, the TCP and file rendezvous, and
 * fsc_cluster_run_from_env on a machine without a GPU.
 * Oracles: parsed fields equal the variables set; every rank ends with rank 0's blob byte for byte;
 * bad variables, absent peers and strangers fail with the stated status and a message naming the cause,
 * within the timeout given. */
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <time.h>
#include <unistd.h>
#include "testutil.h"
#include "core/rendezvous_impl.h"
#include "core/device_impl.h"

/* ---- a fake environment: "NAME=value" strings, NULL-terminated ---- */

static const char *fake_env(void *ctx, const char *name) {
    size_t n = strlen(name);
    for (const char **e = ctx; *e; e++)
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=') return *e + n + 1;
    return NULL;
}

static fsc_status parse(const char **vars, fsc_launch_env *out) {
    return fsc_launch_env_parse(fake_env, (void *)vars, out);
}

static void test_env_torchrun(void **state) {
    const char *v[] = {"RANK=5", "WORLD_SIZE=8", "LOCAL_RANK=1", "MASTER_ADDR=node07", "MASTER_PORT=29500",
                       "FSC_RENDEZVOUS_TIMEOUT=2.5", NULL};
    fsc_launch_env e;
    assert_ok(parse(v, &e));
    assert_int_equal(e.launcher, FSC_LAUNCHER_TORCHRUN);
    assert_string_equal(fsc_launcher_name(e.launcher), "torchrun");
    assert_int_equal(e.rank, 5);
    assert_int_equal(e.world, 8);
    assert_int_equal(e.local_rank, 1);
    assert_string_equal(e.master_addr, "node07");
    assert_int_equal(e.master_port, 29500);
    assert_true(e.timeout_s == 2.5);
    assert_true(e.comm_timeout_s == 600.0);
    assert_string_equal(e.rendezvous_file, "");
}

static void test_env_slurm(void **state) {
    const char *v[] = {"SLURM_PROCID=3", "SLURM_NTASKS=4", "SLURM_LOCALID=3", "FSC_RENDEZVOUS_FILE=/shared/id",
                       "FSC_COMM_TIMEOUT=30", NULL};
    fsc_launch_env e;
    assert_ok(parse(v, &e));
    assert_int_equal(e.launcher, FSC_LAUNCHER_SLURM);
    assert_int_equal(e.rank, 3);
    assert_int_equal(e.world, 4);
    assert_int_equal(e.local_rank, 3);
    assert_string_equal(e.rendezvous_file, "/shared/id");
    assert_true(e.timeout_s == 60.0);
    assert_true(e.comm_timeout_s == 30.0);
    assert_string_equal(e.master_addr, "");
    assert_int_equal(e.master_port, 0);
}

static void test_env_openmpi(void **state) {
    const char *v[] = {"OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_LOCAL_RANK=0", NULL};
    fsc_launch_env e;
    assert_ok(parse(v, &e));
    assert_int_equal(e.launcher, FSC_LAUNCHER_OPENMPI);
    assert_int_equal(e.rank, 0);
    assert_int_equal(e.world, 2);
}

static void test_env_none_is_one_process(void **state) {
    const char *v[] = {"HOME=/root", NULL};
    fsc_launch_env e;
    assert_ok(parse(v, &e));
    assert_int_equal(e.launcher, FSC_LAUNCHER_NONE);
    assert_int_equal(e.rank, 0);
    assert_int_equal(e.world, 1);
    assert_int_equal(e.local_rank, 0);
}

static void test_env_priority(void **state) {
    fsc_launch_env e;
    /* torchrun inside a Slurm job: torchrun's variables win */
    const char *a[] = {"SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_LOCALID=0", "RANK=6", "WORLD_SIZE=16",
                       "LOCAL_RANK=6", NULL};
    assert_ok(parse(a, &e));
    assert_int_equal(e.launcher, FSC_LAUNCHER_TORCHRUN);
    assert_int_equal(e.rank, 6);
    /* Slurm and Open MPI agreeing: Slurm */
    const char *b[] = {"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_LOCAL_RANK=1",
                       "SLURM_PROCID=1", "SLURM_NTASKS=2", "SLURM_LOCALID=1", NULL};
    assert_ok(parse(b, &e));
    assert_int_equal(e.launcher, FSC_LAUNCHER_SLURM);
    /* mpirun in a batch script: inherited SLURM_* disagree with Open MPI's -> refuse to guess */
    const char *c[] = {"OMPI_COMM_WORLD_RANK=3", "OMPI_COMM_WORLD_SIZE=8", "OMPI_COMM_WORLD_LOCAL_RANK=3",
                       "SLURM_PROCID=0", "SLURM_NTASKS=1", "SLURM_LOCALID=0", NULL};
    assert_err(parse(c, &e), FSC_ERR_INVALID, "FSC_LAUNCHER=openmpi");
    /* the same world but another rank (sbatch -n 2 running mpirun -n 2: every process inherits SLURM_PROCID=0), and
     * no SLURM_PROCID (salloc -n 2): refused too, never every process rank 0 (MPI's start then hung, rank 1
     * finalizing, rank 0 waiting in the first collective) or "SLURM_PROCID is not set" */
    const char *g[] = {"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_LOCAL_RANK=1",
                       "SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_LOCALID=0", NULL};
    assert_err(parse(g, &e), FSC_ERR_INVALID,
               "both Slurm (SLURM_NTASKS=2, SLURM_PROCID=0) and Open MPI (OMPI_COMM_WORLD_SIZE=2, "
               "OMPI_COMM_WORLD_RANK=1) variables are set and disagree: set FSC_LAUNCHER=openmpi");
    const char *h[] = {"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_LOCAL_RANK=1",
                       "SLURM_NTASKS=2", "SLURM_JOB_ID=7", NULL};
    assert_err(parse(h, &e), FSC_ERR_INVALID, "(SLURM_NTASKS=2, SLURM_PROCID=unset)");
    /* ... and FSC_LAUNCHER settles it */
    const char *d[] = {"OMPI_COMM_WORLD_RANK=3", "OMPI_COMM_WORLD_SIZE=8", "OMPI_COMM_WORLD_LOCAL_RANK=3",
                       "SLURM_PROCID=0", "SLURM_NTASKS=1", "SLURM_LOCALID=0", "FSC_LAUNCHER=openmpi", NULL};
    assert_ok(parse(d, &e));
    assert_int_equal(e.launcher, FSC_LAUNCHER_OPENMPI);
    assert_int_equal(e.rank, 3);
    assert_int_equal(e.world, 8);
    const char *f[] = {"RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1", "FSC_LAUNCHER=none", NULL};
    assert_ok(parse(f, &e));
    assert_int_equal(e.world, 1);
}

static void test_env_errors(void **state) {
    fsc_launch_env e;
    const char *a[] = {"RANK=1", "LOCAL_RANK=1", NULL};
    assert_err(parse(a, &e), FSC_ERR_INVALID, "WORLD_SIZE is not set");
    const char *b[] = {"RANK=one", "WORLD_SIZE=2", "LOCAL_RANK=1", NULL};
    assert_err(parse(b, &e), FSC_ERR_INVALID, "RANK is \"one\", not an integer");
    const char *c[] = {"RANK=2", "WORLD_SIZE=2", "LOCAL_RANK=0", NULL};
    assert_err(parse(c, &e), FSC_ERR_INVALID, "RANK is 2, outside [0, 1]");
    const char *d[] = {"RANK=0", "WORLD_SIZE=0", "LOCAL_RANK=0", NULL};
    assert_err(parse(d, &e), FSC_ERR_INVALID, "WORLD_SIZE is 0");
    const char *f[] = {"SLURM_PROCID=0", "SLURM_NTASKS=4", "SLURM_LOCALID=-1", NULL};
    assert_err(parse(f, &e), FSC_ERR_INVALID, "SLURM_LOCALID is -1");
    const char *g[] = {"SLURM_PROCID=0", "SLURM_NTASKS=4x", "SLURM_LOCALID=0", NULL};
    assert_err(parse(g, &e), FSC_ERR_INVALID, "SLURM_NTASKS is \"4x\"");
    const char *h[] = {"OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=99999999999999999999",
                       "OMPI_COMM_WORLD_LOCAL_RANK=0", NULL};
    assert_err(parse(h, &e), FSC_ERR_INVALID, "OMPI_COMM_WORLD_SIZE");
    const char *i[] = {"MASTER_PORT=70000", NULL};
    assert_err(parse(i, &e), FSC_ERR_INVALID, "MASTER_PORT is 70000");
    const char *j[] = {"MASTER_PORT=", NULL};
    assert_err(parse(j, &e), FSC_ERR_INVALID, "MASTER_PORT");
    const char *k[] = {"MASTER_ADDR=", NULL};
    assert_err(parse(k, &e), FSC_ERR_INVALID, "MASTER_ADDR is set but empty");
    const char *l[] = {"FSC_RENDEZVOUS_TIMEOUT=soon", NULL};
    assert_err(parse(l, &e), FSC_ERR_INVALID, "FSC_RENDEZVOUS_TIMEOUT");
    const char *m[] = {"FSC_RENDEZVOUS_TIMEOUT=-3", NULL};
    assert_err(parse(m, &e), FSC_ERR_INVALID, "FSC_RENDEZVOUS_TIMEOUT");
    const char *n[] = {"FSC_LAUNCHER=pbs", NULL};
    assert_err(parse(n, &e), FSC_ERR_INVALID, "FSC_LAUNCHER is \"pbs\"");
    assert_err(fsc_launch_env_parse(fake_env, (void *)a, NULL), FSC_ERR_INVALID, "out is NULL");
}

/* The job token: FSC_RENDEZVOUS_TOKEN wins, else the chosen launcher's name for the job; every rank of
 * one job derives the same text, other jobs another. */
static void test_env_token(void **state) {
    fsc_launch_env e;
    const char *t[] = {"RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1", "TORCHELASTIC_RUN_ID=8f3c", "SLURM_JOB_ID=77", NULL};
    assert_ok(parse(t, &e));
    assert_string_equal(e.token, "torchrun:TORCHELASTIC_RUN_ID=8f3c");
    assert_string_equal(e.token_source, "TORCHELASTIC_RUN_ID");
    const char *none[] = {"RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1", "TORCHELASTIC_RUN_ID=none", NULL};
    assert_ok(parse(none, &e)); /* torchrun's default run id names no job */
    assert_string_equal(e.token, "");
    assert_string_equal(e.token_source, "");
    const char *sl[] = {"SLURM_PROCID=0", "SLURM_NTASKS=4", "SLURM_LOCALID=0", "SLURM_JOB_ID=123456",
                        "SLURM_STEP_ID=2", NULL};
    assert_ok(parse(sl, &e));
    assert_string_equal(e.token, "slurm:SLURM_JOB_ID=123456;SLURM_STEP_ID=2");
    assert_string_equal(e.token_source, "SLURM_JOB_ID");
    const char *om[] = {"OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_LOCAL_RANK=0",
                        "OMPI_MCA_orte_ess_jobid=99", "PMIX_NAMESPACE=prterun-n1-4242@1", NULL};
    assert_ok(parse(om, &e));
    assert_string_equal(e.token, "openmpi:PMIX_NAMESPACE=prterun-n1-4242@1");
    const char *om2[] = {"OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_LOCAL_RANK=0",
                         "OMPI_MCA_orte_ess_jobid=99", NULL};
    assert_ok(parse(om2, &e));
    assert_string_equal(e.token, "openmpi:OMPI_MCA_orte_ess_jobid=99");
    const char *mine[] = {"SLURM_PROCID=0", "SLURM_NTASKS=4", "SLURM_LOCALID=0", "SLURM_JOB_ID=123456",
                          "FSC_RENDEZVOUS_TOKEN=s3cret", NULL};
    assert_ok(parse(mine, &e));
    assert_string_equal(e.token, "s3cret");
    assert_string_equal(e.token_source, "FSC_RENDEZVOUS_TOKEN");
    const char *empty[] = {"FSC_RENDEZVOUS_TOKEN=", NULL};
    assert_err(parse(empty, &e), FSC_ERR_INVALID, "FSC_RENDEZVOUS_TOKEN is set but empty");
    char long_id[400] = "SLURM_JOB_ID=";
    memset(long_id + 13, '7', 300);
    const char *lng[] = {"SLURM_PROCID=0", "SLURM_NTASKS=4", "SLURM_LOCALID=0", long_id, NULL};
    assert_err(parse(lng, &e), FSC_ERR_INVALID, "SLURM_JOB_ID is too long");
    const char *alone[] = {"FSC_RENDEZVOUS_TOKEN=x", NULL}; /* no launcher: only the explicit token */
    assert_ok(parse(alone, &e));
    assert_string_equal(e.token, "x");
}

/* ---- TCP rendezvous between threads on 127.0.0.1 ---- */

#define TOKEN "slurm:SLURM_JOB_ID=4242;SLURM_STEP_ID=0"

typedef struct {
    int port, rank;
    const char *token; /* NULL: TOKEN */
    double timeout;
    unsigned char blob[FSC_UNIQUE_ID_BYTES];
    size_t len;
    fsc_status st;
    char msg[512];
} client_arg;

static void *client_main(void *p) {
    client_arg *a = p;
    a->st = fsc_rendezvous_fetch("127.0.0.1", a->port, a->token ? a->token : TOKEN, a->rank, a->blob, a->len,
                                 a->timeout);
    snprintf(a->msg, sizeof a->msg, "%s", fsc_last_error());
    return NULL;
}

static void random_blob(unsigned char *b, size_t n) {
    srand((unsigned)time(NULL) ^ (unsigned)getpid());
    for (size_t i = 0; i < n; i++) b[i] = (unsigned char)(rand() & 0xff);
    b[0] |= 1; /* never all zeros */
}

static double elapsed_since(const struct timespec *t0) {
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0->tv_nsec);
}

/* Rank 0 in a thread: serves `world` ranks, records how it ended and how long it took. */
typedef struct {
    fsc_rendezvous_server *srv;
    int world;
    double timeout;
    unsigned char id[FSC_UNIQUE_ID_BYTES];
    size_t len;
    fsc_status st;
    double seconds;
    char msg[1024];
    pthread_t th;
} server_arg;

static void *server_main(void *p) {
    server_arg *a = p;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    a->st = fsc_rendezvous_serve(a->srv, TOKEN, a->world, a->id, a->len, a->timeout);
    a->seconds = elapsed_since(&t0);
    snprintf(a->msg, sizeof a->msg, "%s", fsc_last_error());
    return NULL;
}

static void start_server(server_arg *a, int world, double timeout, int *port) {
    memset(a, 0, sizeof *a);
    assert_ok(fsc_rendezvous_listen("127.0.0.1", 0, &a->srv, port));
    a->world = world, a->timeout = timeout, a->len = FSC_UNIQUE_ID_BYTES;
    random_blob(a->id, a->len);
    assert_int_equal(pthread_create(&a->th, NULL, server_main, a), 0);
}

static void join_server(server_arg *a) {
    pthread_join(a->th, NULL);
    fsc_rendezvous_close(a->srv);
}

/* Fetch synchronously as rank `rank` with `token`. */
static void fetch_as(client_arg *c, int port, int rank, const char *token, double timeout) {
    memset(c, 0, sizeof *c);
    c->port = port, c->rank = rank, c->token = token, c->timeout = timeout, c->len = FSC_UNIQUE_ID_BYTES;
    client_main(c);
}

/* A TCP connection to 127.0.0.x:port that sends nothing (or what is given). */
static int dial(const char *ip, int port, const char *say) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, ip, &sa.sin_addr);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return -1;
    }
    if (say) assert_int_equal(send(fd, say, strlen(say), MSG_NOSIGNAL), (ssize_t)strlen(say));
    return fd;
}

static void test_tcp_rendezvous_four_ranks(void **state) {
    fsc_rendezvous_server *srv;
    int port = 0;
    assert_ok(fsc_rendezvous_listen("127.0.0.1", 0, &srv, &port));
    assert_true(port > 0);
    unsigned char id[FSC_UNIQUE_ID_BYTES];
    random_blob(id, sizeof id);
    client_arg c[3];
    pthread_t th[3];
    for (int i = 0; i < 3; i++) {
        memset(&c[i], 0, sizeof c[i]);
        c[i].port = port, c[i].rank = i + 1, c[i].timeout = 10.0, c[i].len = sizeof id;
        assert_int_equal(pthread_create(&th[i], NULL, client_main, &c[i]), 0);
    }
    fsc_status st = fsc_rendezvous_serve(srv, TOKEN, 4, id, sizeof id, 10.0);
    for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
    fsc_rendezvous_close(srv);
    assert_ok(st);
    for (int i = 0; i < 3; i++) {
        if (c[i].st != FSC_OK) fail_msg("rank %d: %s", c[i].rank, c[i].msg);
        assert_memory_equal(c[i].blob, id, sizeof id);
    }
}

/* Clients that start before rank 0 listens keep retrying until it does. */
static void test_tcp_clients_before_server(void **state) {
    /* find a free port, release it, then let the client knock on it before the server binds it */
    fsc_rendezvous_server *probe;
    int port = 0;
    assert_ok(fsc_rendezvous_listen("127.0.0.1", 0, &probe, &port));
    fsc_rendezvous_close(probe);
    client_arg c = {.port = port, .rank = 1, .timeout = 10.0, .len = 32};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, client_main, &c), 0);
    struct timespec ts = {0, 300 * 1000 * 1000};
    nanosleep(&ts, NULL);
    fsc_rendezvous_server *srv;
    assert_ok(fsc_rendezvous_listen("127.0.0.1", port, &srv, NULL));
    unsigned char id[32];
    random_blob(id, sizeof id);
    fsc_status st = fsc_rendezvous_serve(srv, TOKEN, 2, id, sizeof id, 10.0);
    pthread_join(th, NULL);
    fsc_rendezvous_close(srv);
    assert_ok(st);
    if (c.st != FSC_OK) fail_msg("client: %s", c.msg);
    assert_memory_equal(c.blob, id, sizeof id);
}

static void test_tcp_timeout_when_rank0_never_comes(void **state) {
    fsc_rendezvous_server *probe;
    int port = 0;
    assert_ok(fsc_rendezvous_listen("127.0.0.1", 0, &probe, &port));
    fsc_rendezvous_close(probe); /* nobody listens there now */
    unsigned char id[FSC_UNIQUE_ID_BYTES];
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_err(fsc_rendezvous_fetch("127.0.0.1", port, TOKEN, 2, id, sizeof id, 0.4), FSC_ERR_TIMEOUT, "refused");
    assert_non_null(strstr(fsc_last_error(), "rank 2 could not get the id"));
    double dt = elapsed_since(&t0);
    assert_true(dt >= 0.35 && dt < 3.0);
}

static void test_tcp_server_timeout_names_missing_ranks(void **state) {
    fsc_rendezvous_server *srv;
    int port = 0;
    assert_ok(fsc_rendezvous_listen("127.0.0.1", 0, &srv, &port));
    unsigned char id[16];
    random_blob(id, sizeof id);
    client_arg c = {.port = port, .rank = 1, .timeout = 5.0, .len = sizeof id};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, client_main, &c), 0);
    fsc_status st = fsc_rendezvous_serve(srv, TOKEN, 3, id, sizeof id, 0.5); /* rank 2 never comes */
    pthread_join(th, NULL);
    fsc_rendezvous_close(srv);
    assert_int_equal(st, FSC_ERR_TIMEOUT);
    assert_non_null(strstr(fsc_last_error(), "only 1 of the 2"));
    assert_non_null(strstr(fsc_last_error(), "127.0.0.1 is a loopback address")); /* the hint for other hosts */
    assert_int_equal(c.st, FSC_OK); /* the rank that came still got the id */
    assert_memory_equal(c.blob, id, sizeof id);
}

static void test_tcp_bad_address_and_args(void **state) {
    unsigned char id[8];
    fsc_status s = fsc_rendezvous_fetch("no-such-host.invalid", 29500, TOKEN, 1, id, sizeof id, 0.5);
    /* a resolver that cannot be reached says "try again" until the timeout; one that can says "no such name" */
    if (s == FSC_ERR_TIMEOUT) assert_non_null(strstr(fsc_last_error(), "resolving"));
    else assert_err(s, FSC_ERR_INVALID, "cannot resolve MASTER_ADDR \"no-such-host.invalid\"");
    assert_err(fsc_rendezvous_fetch("", 29500, TOKEN, 1, id, sizeof id, 1.0), FSC_ERR_INVALID, "MASTER_ADDR");
    assert_err(fsc_rendezvous_fetch("127.0.0.1", 0, TOKEN, 1, id, sizeof id, 1.0), FSC_ERR_INVALID, "port 0");
    assert_err(fsc_rendezvous_fetch("127.0.0.1", 29500, TOKEN, 1, id, 0, 1.0), FSC_ERR_INVALID, "blob of 0 bytes");
    assert_err(fsc_rendezvous_fetch("127.0.0.1", 29500, TOKEN, 0, id, sizeof id, 1.0), FSC_ERR_INVALID, "rank 0");
    assert_err(fsc_rendezvous_fetch("127.0.0.1", 29500, NULL, 1, id, sizeof id, 1.0), FSC_ERR_INVALID, "no job token");
    assert_err(fsc_rendezvous_fetch("127.0.0.1", 29500, "", 1, id, sizeof id, 1.0), FSC_ERR_INVALID, "no job token");
    assert_err(fsc_rendezvous_tcp("127.0.0.1", 29500, TOKEN, 4, 4, id, sizeof id, 1.0), FSC_ERR_INVALID,
               "rank 4 of world 4");
    assert_err(fsc_rendezvous_tcp("127.0.0.1", 29500, NULL, 0, 2, id, sizeof id, 1.0), FSC_ERR_INVALID, "no job token");
    assert_ok(fsc_rendezvous_tcp(NULL, 0, NULL, 0, 1, id, sizeof id, 1.0)); /* a world of one needs nobody */
    /* rank 0 listens where it is told, never on every interface by default */
    fsc_rendezvous_server *a, *b;
    assert_err(fsc_rendezvous_listen(NULL, 0, &a, NULL), FSC_ERR_INVALID, "no address to listen on");
    int port = 0;
    assert_ok(fsc_rendezvous_listen("127.0.0.1", 0, &a, &port));
    assert_err(fsc_rendezvous_serve(a, "", 2, id, sizeof id, 1.0), FSC_ERR_INVALID, "no job token");
    /* the port rank 0 wants is taken */
    assert_err(fsc_rendezvous_listen("127.0.0.1", port, &b, NULL), FSC_ERR_IO, "in use");
    fsc_rendezvous_close(a);
    /* an address of another host cannot be listened on (TEST-NET-1, never local), unless the kernel is told
     * to allow it (net.ipv4.ip_nonlocal_bind) */
    FILE *nl = fopen("/proc/sys/net/ipv4/ip_nonlocal_bind", "r");
    int nonlocal = nl && fgetc(nl) == '1';
    if (nl) fclose(nl);
    if (!nonlocal) assert_err(fsc_rendezvous_listen("192.0.2.1", 0, &b, NULL), FSC_ERR_IO, "own host");
}

/* Rank 0 of fsc_rendezvous_tcp listens on MASTER_ADDR only: 127.0.0.2 (also this host, another address)
 * is refused while 127.0.0.1 serves. Listening on every interface would accept both. */
typedef struct {
    int port;
    unsigned char id[FSC_UNIQUE_ID_BYTES];
    fsc_status st;
} tcp0_arg;

static void *tcp0_main(void *p) {
    tcp0_arg *a = p;
    a->st = fsc_rendezvous_tcp("127.0.0.1", a->port, TOKEN, 0, 2, a->id, sizeof a->id, 5.0);
    return NULL;
}

static void test_tcp_rank0_binds_master_addr(void **state) {
    fsc_rendezvous_server *probe;
    tcp0_arg a = {0};
    assert_ok(fsc_rendezvous_listen("127.0.0.1", 0, &probe, &a.port));
    fsc_rendezvous_close(probe);
    random_blob(a.id, sizeof a.id);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, tcp0_main, &a), 0);
    int fd = -1;
    for (int i = 0; i < 500 && fd < 0; i++) { /* wait until rank 0 listens */
        fd = dial("127.0.0.1", a.port, NULL);
        if (fd < 0) nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    }
    assert_true(fd >= 0);
    close(fd);
    int other = dial("127.0.0.2", a.port, NULL);
    if (other >= 0) close(other);
    client_arg c;
    fetch_as(&c, a.port, 1, TOKEN, 5.0);
    pthread_join(th, NULL);
    assert_int_equal(other, -1); /* refused: nothing listens on 127.0.0.2 */
    if (c.st != FSC_OK) fail_msg("rank 1: %s", c.msg);
    assert_ok(a.st);
    assert_memory_equal(c.blob, a.id, sizeof a.id);
}

/* Connections that say nothing (or a little) do not delay the real ranks, nor make rank 0 fail: before
 * rank 0 served one connection at a time with 5 s each, so three idle ones cost 15 s. More idle connections
 * than rank 0 keeps at once evict the oldest instead of locking the real ranks out. */
static void test_tcp_idle_connections_do_not_delay(void **state) {
    enum { IDLE = FSC_RDV_MAX_PENDING + 20 };
    server_arg s;
    int port;
    start_server(&s, 3, 3.0, &port);
    int idle[IDLE];
    for (int i = 0; i < IDLE; i++) {
        idle[i] = dial("127.0.0.1", port, i % 3 == 0 ? "FSC" : i % 3 == 1 ? NULL : "GET / HTTP/1.0\r\n");
        assert_true(idle[i] >= 0);
    }
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    client_arg c1, c2;
    fetch_as(&c1, port, 1, TOKEN, 3.0);
    fetch_as(&c2, port, 2, TOKEN, 3.0);
    double dt = elapsed_since(&t0);
    join_server(&s);
    for (int i = 0; i < IDLE; i++) close(idle[i]);
    if (c1.st != FSC_OK) fail_msg("rank 1: %s", c1.msg);
    if (c2.st != FSC_OK) fail_msg("rank 2: %s", c2.msg);
    if (s.st != FSC_OK) fail_msg("rank 0: %s", s.msg);
    assert_memory_equal(c1.blob, s.id, s.len);
    assert_memory_equal(c2.blob, s.id, s.len);
    assert_true(dt < 1.5);
    assert_true(s.seconds < 2.0);
}

/* A stranger sending a well-formed hello for rank 1 without the job's token is refused and gets nothing;
 * the real rank 1 then joins. Before, the stranger received the id and the real rank 1 timed out. */
static void test_tcp_stranger_without_token(void **state) {
    server_arg s;
    int port;
    start_server(&s, 2, 3.0, &port);
    client_arg x;
    fetch_as(&x, port, 1, "slurm:SLURM_JOB_ID=4243;SLURM_STEP_ID=0", 3.0); /* another job */
    assert_int_equal(x.st, FSC_ERR_INVALID);
    assert_non_null(strstr(x.msg, "could not prove this job's token"));
    unsigned char zero[FSC_UNIQUE_ID_BYTES] = {0};
    assert_memory_equal(x.blob, zero, sizeof zero); /* no id for the stranger */
    client_arg c;
    fetch_as(&c, port, 1, TOKEN, 3.0);
    join_server(&s);
    if (c.st != FSC_OK) fail_msg("rank 1: %s", c.msg);
    if (s.st != FSC_OK) fail_msg("rank 0: %s", s.msg);
    assert_memory_equal(c.blob, s.id, s.len);
    /* a job nobody else joins says how many it turned away */
    start_server(&s, 2, 0.5, &port);
    fetch_as(&x, port, 1, "guess", 3.0);
    join_server(&s);
    assert_int_equal(x.st, FSC_ERR_INVALID);
    assert_int_equal(s.st, FSC_ERR_TIMEOUT);
    assert_non_null(strstr(s.msg, "1 connection was refused for not proving this job's token"));
}

/* A second hello for an admitted rank id is refused and does not displace the first. */
static void test_tcp_duplicate_rank_refused(void **state) {
    server_arg s;
    int port;
    start_server(&s, 3, 3.0, &port);
    client_arg a, b, c;
    fetch_as(&a, port, 1, TOKEN, 3.0);
    fetch_as(&b, port, 1, TOKEN, 3.0);
    fetch_as(&c, port, 2, TOKEN, 3.0);
    join_server(&s);
    if (a.st != FSC_OK) fail_msg("first rank 1: %s", a.msg);
    assert_int_equal(b.st, FSC_ERR_INVALID);
    assert_non_null(strstr(b.msg, "already admitted a rank 1"));
    if (c.st != FSC_OK) fail_msg("rank 2: %s", c.msg);
    if (s.st != FSC_OK) fail_msg("rank 0: %s", s.msg);
    assert_memory_equal(a.blob, s.id, s.len);
    assert_memory_equal(c.blob, s.id, s.len);
}

/* A stranger on the port (wrong protocol) is not counted; a real rank after it is served. */
static void test_tcp_ignores_strangers(void **state) {
    fsc_rendezvous_server *srv;
    int port = 0;
    assert_ok(fsc_rendezvous_listen("127.0.0.1", 0, &srv, &port));
    int fd = dial("127.0.0.1", port, "GET / HTTP/1.0\r\n\r\n");
    assert_true(fd >= 0);
    client_arg c = {.port = port, .rank = 1, .timeout = 10.0, .len = 64};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, client_main, &c), 0);
    unsigned char id[64];
    random_blob(id, sizeof id);
    fsc_status st = fsc_rendezvous_serve(srv, TOKEN, 2, id, sizeof id, 10.0);
    pthread_join(th, NULL);
    close(fd);
    fsc_rendezvous_close(srv);
    assert_ok(st);
    assert_int_equal(c.st, FSC_OK);
    assert_memory_equal(c.blob, id, sizeof id);
}

/* A rank of another build (other blob size) or a non-fsc service answering: FSC_ERR_FORMAT. */
typedef struct {
    int fd;
    const char *reply;
} fake_server;

static void *fake_server_main(void *p) { /* one connection: say the reply at once, then wait for the close */
    fake_server *f = p;
    int c = accept(f->fd, NULL, NULL);
    if (c >= 0) {
        if (send(c, f->reply, strlen(f->reply), MSG_NOSIGNAL) < 0) {}
        char buf[64];
        while (recv(c, buf, sizeof buf, 0) > 0) {}
        close(c);
    }
    return NULL;
}

static void test_tcp_protocol_errors(void **state) {
    /* size mismatch: a genuine server with a 64-byte id, a client expecting 128 */
    fsc_rendezvous_server *srv;
    int port = 0;
    assert_ok(fsc_rendezvous_listen("127.0.0.1", 0, &srv, &port));
    client_arg c = {.port = port, .rank = 1, .timeout = 2.0, .len = 128};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, client_main, &c), 0);
    unsigned char id[64];
    random_blob(id, sizeof id);
    fsc_status st = fsc_rendezvous_serve(srv, TOKEN, 2, id, sizeof id, 0.7);
    pthread_join(th, NULL);
    fsc_rendezvous_close(srv);
    assert_int_equal(st, FSC_ERR_TIMEOUT); /* the mismatched rank does not count */
    assert_int_equal(c.st, FSC_ERR_FORMAT);
    assert_non_null(strstr(c.msg, "64-byte"));
    /* another service on the port, and an fsc of another protocol version */
    static const char *replies[] = {"HTTP/1.0 400 Bad Request\r\n\r\n", "FSCRDV01 an older rank 0 talking"};
    static const char *says[] = {"does not speak the fsc rendezvous protocol", "another version"};
    for (int k = 0; k < 2; k++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t sl = sizeof sa;
        assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
        assert_int_equal(listen(fd, 4), 0);
        assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
        fake_server f = {fd, replies[k]};
        assert_int_equal(pthread_create(&th, NULL, fake_server_main, &f), 0);
        unsigned char blob[8];
        assert_err(fsc_rendezvous_fetch("127.0.0.1", ntohs(sa.sin_port), TOKEN, 1, blob, sizeof blob, 2.0),
                   FSC_ERR_FORMAT, says[k]);
        pthread_join(th, NULL);
        close(fd);
    }
}

/* ---- file rendezvous ---- */

typedef struct {
    const char *path;
    int rank, world;
    double delay, timeout;
    unsigned char blob[FSC_UNIQUE_ID_BYTES];
    fsc_status st;
    char msg[512];
} file_arg;

static void *file_main(void *p) {
    file_arg *a = p;
    if (a->delay > 0) {
        struct timespec ts = {0, (long)(a->delay * 1e9)};
        nanosleep(&ts, NULL);
    }
    a->st = fsc_rendezvous_file(a->path, a->rank, a->world, a->blob, sizeof a->blob, a->timeout);
    snprintf(a->msg, sizeof a->msg, "%s", fsc_last_error());
    return NULL;
}

static void test_file_rendezvous(void **state) {
    char dir[] = "/tmp/fsc_test_launch_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/nccl_id", dir);
    file_arg a[4];
    pthread_t th[4];
    for (int r = 0; r < 4; r++) {
        memset(&a[r], 0, sizeof a[r]);
        a[r].path = path, a[r].rank = r, a[r].world = 4, a[r].timeout = 10.0;
        a[r].delay = r == 0 ? 0.2 : 0.0; /* readers start first and poll */
        if (r == 0) random_blob(a[r].blob, sizeof a[r].blob);
    }
    for (int r = 0; r < 4; r++) assert_int_equal(pthread_create(&th[r], NULL, file_main, &a[r]), 0);
    for (int r = 0; r < 4; r++) pthread_join(th[r], NULL);
    for (int r = 0; r < 4; r++) {
        if (a[r].st != FSC_OK) fail_msg("rank %d: %s", r, a[r].msg);
        assert_memory_equal(a[r].blob, a[0].blob, sizeof a[0].blob);
    }
    /* no temporary file left behind: only the published one */
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    assert_int_equal(access(tmp, F_OK), -1);
    /* a file from a run of another size is not taken: timeout naming it */
    file_arg s = {.path = path, .rank = 1, .world = 8, .timeout = 0.3};
    file_main(&s);
    assert_int_equal(s.st, FSC_ERR_TIMEOUT);
    assert_non_null(strstr(s.msg, "for world size 4, not 8"));
    unlink(path);
    /* nobody writes it: timeout */
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    file_arg n = {.path = path, .rank = 2, .world = 4, .timeout = 0.3};
    file_main(&n);
    assert_int_equal(n.st, FSC_ERR_TIMEOUT);
    assert_non_null(strstr(n.msg, "did not appear within"));
    assert_true(elapsed_since(&t0) < 3.0);
    /* garbage at the path */
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("not a rendezvous file, just text long enough", f);
    fclose(f);
    file_arg g = {.path = path, .rank = 1, .world = 4, .timeout = 1.0};
    file_main(&g);
    assert_int_equal(g.st, FSC_ERR_FORMAT);
    unlink(path);
    /* rank 0 cannot write there */
    file_arg w = {.path = "/nonexistent-dir/x/id", .rank = 0, .world = 2, .timeout = 1.0};
    file_main(&w);
    assert_int_equal(w.st, FSC_ERR_IO);
    assert_non_null(strstr(w.msg, "/nonexistent-dir/x/id"));
    rmdir(dir);
}

/* ---- fsc_cluster_run_from_env without a GPU ---- */

typedef struct {
    int calls, rank, world;
    int has_dev, has_comm;
    char dev[16];
} run_seen;

static fsc_status record_rank(fsc_rank *r, void *arg) {
    run_seen *s = arg;
    s->calls++;
    s->rank = r->rank, s->world = r->world;
    s->has_dev = r->dev != NULL, s->has_comm = r->comm != NULL;
    snprintf(s->dev, sizeof s->dev, "%s", fsc_device_name(r->dev));
    return FSC_OK;
}

static const char *launch_vars[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS",
                                    "SLURM_LOCALID", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                                    "OMPI_COMM_WORLD_LOCAL_RANK", "FSC_LAUNCHER", "MASTER_ADDR", "MASTER_PORT",
                                    "FSC_RENDEZVOUS_FILE", "FSC_RENDEZVOUS_TIMEOUT", "FSC_COMM_TIMEOUT",
                                    "FSC_RENDEZVOUS_TOKEN", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "SLURM_STEP_ID",
                                    "PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "OMPI_MCA_orte_ess_jobid", NULL};

/* The places a plug-in is looked for: beside the program, its ../lib, beside the code of libfsc (here the
 * test program itself, linked statically: not listed twice), the loader's search. */
static void test_plugin_places(void **state) {
    char places[FSC_PLUGIN_PLACES][PATH_MAX + 64], exe[PATH_MAX + 1];
    ssize_t n = readlink("/proc/self/exe", exe, PATH_MAX);
    assert_true(n > 0);
    exe[n] = '\0';
    *strrchr(exe, '/') = '\0';
    assert_int_equal(fsc_plugin_places("libfsc_mpi.so", places), 3);
    char want[PATH_MAX + 64];
    snprintf(want, sizeof want, "%s/libfsc_mpi.so", exe);
    assert_string_equal(places[0], want);
    snprintf(want, sizeof want, "%s/../lib/libfsc_mpi.so", exe);
    assert_string_equal(places[1], want);
    assert_string_equal(places[2], "libfsc_mpi.so");
}

/* A GPU is found only with an NVIDIA device node and the cuda plug-in's file both present */
static void test_gpu_present(void **state) {
    char *saved = getenv("FSC_CUDA_PLUGIN") ? strdup(getenv("FSC_CUDA_PLUGIN")) : NULL;
    setenv("FSC_CUDA_PLUGIN", "/nonexistent/libfsc_cuda.so", 1);
    assert_int_equal(fsc_gpu_present(), 0);
    setenv("FSC_CUDA_PLUGIN", "/proc/self/exe", 1); /* a file that exists: the answer is then the device node's */
    int node = access("/dev/nvidia0", F_OK) == 0 || access("/proc/driver/nvidia/version", F_OK) == 0;
    assert_int_equal(fsc_gpu_present(), node);
    if (saved) setenv("FSC_CUDA_PLUGIN", saved, 1);
    else unsetenv("FSC_CUDA_PLUGIN");
    free(saved);
}

static void test_from_env_without_gpu(void **state) {
    for (const char **v = launch_vars; *v; v++) unsetenv(*v);
    char *saved = getenv("FSC_CUDA_PLUGIN") ? strdup(getenv("FSC_CUDA_PLUGIN")) : NULL;
    char *saved_dev = getenv("FSC_DEVICE") ? strdup(getenv("FSC_DEVICE")) : NULL;
    /* a plug-in path that does not exist: no GPU is found, so the default is the cpu, on every machine */
    setenv("FSC_CUDA_PLUGIN", "/nonexistent/libfsc_cuda.so", 1);
    unsetenv("FSC_DEVICE");
    run_seen seen = {0};
    assert_ok(fsc_cluster_run_from_env(record_rank, &seen));
    assert_int_equal(seen.calls, 1);
    assert_int_equal(seen.world, 1);
    assert_string_equal(seen.dev, "cpu");
    setenv("FSC_DEVICE", "tpu", 1);
    assert_err(fsc_cluster_run_from_env(record_rank, &seen), FSC_ERR_INVALID, "unknown device \"tpu\" (cpu or cuda)");
    /* CUDA asked for: only the named plug-in file is tried, so this fails on every machine */
    setenv("FSC_DEVICE", "cuda", 1);
    memset(&seen, 0, sizeof seen);
    fsc_status s = fsc_cluster_run_from_env(record_rank, &seen);
    assert_err(s, FSC_ERR_INVALID, "rank 0 of 1 (none): FSC_CUDA_PLUGIN: cannot load /nonexistent/libfsc_cuda.so");
    assert_int_equal(seen.calls, 0);
    /* the plug-in this build made, if any: on a machine without a GPU it must refuse cleanly */
    char exe[1024];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 64);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            strcpy(slash, "/../libfsc_cuda.so");
            if (access(exe, R_OK) == 0) {
                setenv("FSC_CUDA_PLUGIN", exe, 1);
                memset(&seen, 0, sizeof seen);
                s = fsc_cluster_run_from_env(record_rank, &seen);
                if (s == FSC_OK) {
                    assert_int_equal(seen.calls, 1);
                    assert_int_equal(seen.world, 1);
                } else {
                    print_message("from_env with %s: %s\n", exe, fsc_last_error());
                    assert_err(s, FSC_ERR_UNSUPPORTED, "cuda");
                    assert_int_equal(seen.calls, 0);
                }
            }
        }
    }
    /* a world of two with no way to meet: a clear error before any GPU is touched */
    setenv("RANK", "1", 1);
    setenv("WORLD_SIZE", "2", 1);
    setenv("LOCAL_RANK", "1", 1);
    assert_err(fsc_cluster_run_from_env(record_rank, &seen), FSC_ERR_INVALID, "MASTER_ADDR and MASTER_PORT");
    assert_non_null(strstr(fsc_last_error(), "on the cuda device (NCCL)"));
    assert_non_null(strstr(fsc_last_error(), "FSC_DEVICE=cpu"));
    /* the same without FSC_DEVICE and without a GPU: the cpu device, whose processes need MPI, not MASTER_ADDR */
    unsetenv("FSC_DEVICE");
    assert_err(fsc_cluster_run_from_env(record_rank, &seen), FSC_ERR_UNSUPPORTED, "cpu device talk through MPI");
    assert_null(strstr(fsc_last_error(), "MASTER_ADDR"));
    setenv("FSC_DEVICE", "cuda", 1);
    /* ... and a TCP rendezvous with no job token: refused before any GPU or socket is touched */
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", "29500", 1);
    setenv("TORCHELASTIC_RUN_ID", "none", 1);
    assert_err(fsc_cluster_run_from_env(record_rank, &seen), FSC_ERR_INVALID, "FSC_RENDEZVOUS_TOKEN");
    assert_non_null(strstr(fsc_last_error(), "rank 1 of 2 (torchrun): "));
    assert_non_null(strstr(fsc_last_error(), "--rdzv-id"));
    unsetenv("MASTER_ADDR");
    unsetenv("MASTER_PORT");
    setenv("WORLD_SIZE", "x", 1);
    assert_err(fsc_cluster_run_from_env(record_rank, &seen), FSC_ERR_INVALID, "WORLD_SIZE is \"x\"");
    assert_err(fsc_cluster_run_from_env(NULL, NULL), FSC_ERR_INVALID, "fn is NULL");
    for (const char **v = launch_vars; *v; v++) unsetenv(*v);
    if (saved) {
        setenv("FSC_CUDA_PLUGIN", saved, 1);
        free(saved);
    } else {
        unsetenv("FSC_CUDA_PLUGIN");
    }
    if (saved_dev) setenv("FSC_DEVICE", saved_dev, 1);
    else unsetenv("FSC_DEVICE");
    free(saved_dev);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_env_torchrun),
        cmocka_unit_test(test_env_slurm),
        cmocka_unit_test(test_env_openmpi),
        cmocka_unit_test(test_env_none_is_one_process),
        cmocka_unit_test(test_env_priority),
        cmocka_unit_test(test_env_errors),
        cmocka_unit_test(test_env_token),
        cmocka_unit_test(test_tcp_rendezvous_four_ranks),
        cmocka_unit_test(test_tcp_clients_before_server),
        cmocka_unit_test(test_tcp_timeout_when_rank0_never_comes),
        cmocka_unit_test(test_tcp_server_timeout_names_missing_ranks),
        cmocka_unit_test(test_tcp_bad_address_and_args),
        cmocka_unit_test(test_tcp_ignores_strangers),
        cmocka_unit_test(test_tcp_rank0_binds_master_addr),
        cmocka_unit_test(test_tcp_idle_connections_do_not_delay),
        cmocka_unit_test(test_tcp_stranger_without_token),
        cmocka_unit_test(test_tcp_duplicate_rank_refused),
        cmocka_unit_test(test_tcp_protocol_errors),
        cmocka_unit_test(test_file_rendezvous),
        cmocka_unit_test(test_plugin_places),
        cmocka_unit_test(test_gpu_present),
        cmocka_unit_test(test_from_env_without_gpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
