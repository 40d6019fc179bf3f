/* Tests of the flight recorder (lib/core/flight.c, flight_watch.c) and its reader (lib/io/flight_read.c,
 * flight_diag.c). Oracles:
 *   - a ring keeps a communicator's last `depth` calls with their numbers, operations, counts, dtypes and states,
 *     and a record written and read back says so; groups split alike on every rank share an id;
 *   - injected faults on the simulated cluster (a rank that calls a collective the others never call, a rank
 *     that calls another collective than the others, a rank that stops and leaves no record): every rank that
 *     fails writes its record, and the diagnosis names the diverging rank, the operation, its number and the
 *     group with its world ranks; the timeout message itself names the call's number;
 *   - a signal handler's request makes the watcher write every recorder while the ranks keep calling (TSan);
 *   - damaged records are named and counted as silent, never crash the reader.
 * Rank functions record what they saw; the test asserts after the run (cmocka is not thread-safe). */
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>
#include "io/flight_read.h"
#include "testutil.h"

#define W 4
#define REPORT 8192

typedef struct {
    const char *dir;
    int fault;                 /* which injected fault (below) */
    size_t depth;
    atomic_int written;        /* ranks that wrote their record */
    fsc_status st[W];
    char msg[W][1024];
} run;

enum { NONE, EXTRA_GATHER, MISMATCH, STOPPED };

static void nap_ms(long ms) { nanosleep(&(struct timespec){ms / 1000, (ms % 1000) * 1000000L}, NULL); }

/* Five rounds of (all_reduce on the world, all_gather on "data", a split of the world's ranks alike); the fault
 * strikes in round 3. */
static fsc_status rounds(fsc_rank *r, run *t, fsc_comm *data) {
    float x[W] = {0}, y[W * W] = {0};
    for (int i = 0; i < 5; i++) {
        if (i == 3 && t->fault == EXTRA_GATHER && r->rank == 3) FSC_TRY(fsc_comm_all_gather(data, x, y, W, FSC_F32));
        if (i == 3 && t->fault == MISMATCH && r->rank == 2) FSC_TRY(fsc_comm_broadcast(r->comm, x, W, FSC_F32, 0));
        if (i == 3 && t->fault == STOPPED && r->rank == 1) {
            for (int k = 0; k < 3000 && atomic_load(&t->written) < W - 1; k++) nap_ms(10); /* "stopped" */
            return fsc_error(FSC_ERR_INTERNAL, "stopped");
        }
        FSC_TRY(fsc_comm_all_reduce(r->comm, x, x, W, FSC_F32, FSC_SUM));
        FSC_TRY(fsc_comm_all_gather(data, x, y, W, FSC_F32));
    }
    return FSC_OK;
}

static fsc_status rank_fn(fsc_rank *r, void *arg) {
    run *t = arg;
    fsc_flight *f = NULL;
    FSC_TRY(fsc_flight_create(&(fsc_flight_opts){.rank = r->rank, .world = r->world, .depth = t->depth, .dir = t->dir},
                              &f));
    fsc_comm_set_flight(r->comm, f);
    fsc_comm *data = NULL;
    fsc_status s = fsc_comm_split(r->comm, 0, r->rank, &data);
    if (s == FSC_OK) fsc_comm_set_name(data, "data"), s = rounds(r, t, data);
    t->st[r->rank] = s;
    snprintf(t->msg[r->rank], sizeof t->msg[r->rank], "%s", s == FSC_OK ? "" : fsc_last_error());
    if (s != FSC_OK && !(t->fault == STOPPED && r->rank == 1)) { /* a stopped rank writes nothing */
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", fsc_last_error());
        if (fsc_flight_write(f, "failure", msg) == FSC_OK) atomic_fetch_add(&t->written, 1);
    } else if (s == FSC_OK && fsc_flight_write(f, "end", NULL) == FSC_OK) {
        atomic_fetch_add(&t->written, 1);
    }
    fsc_comm_free(data);
    fsc_flight_free(f); /* the world still records into it until the cluster frees it */
    return s;
}

static char *tmpdir(void) {
    static char buf[64];
    snprintf(buf, sizeof buf, "/tmp/fsc_test_flight_XXXXXX");
    assert_non_null(mkdtemp(buf));
    return buf;
}

static void diagnose(run *t, int fault, char *report) {
    t->fault = fault;
    atomic_init(&t->written, 0);
    fsc_cluster_opts co = fsc_cluster_opts_default();
    co.world = W, co.timeout_s = fault == NONE ? 30 : 0.5;
    fsc_status s = fsc_cluster_run(&co, rank_fn, t);
    assert_int_equal(s != FSC_OK, fault != NONE);
    assert_ok(fsc_flight_diagnose_dir(t->dir, report, REPORT));
    print_message("%s", report);
}

static void expect(const char *report, const char *needle) {
    if (!strstr(report, needle)) fail_msg("the report lacks \"%s\":\n%s", needle, report);
}

/* Oracle: rank 3 calls an all_gather on data that the others never call; they wait in the world's next
 * all_reduce. The verdict names rank 3 and its call, and where the others are; the numbers are the calls'
 * places on their communicators (data: 3 gathers done, the extra is #4; world: the split #1, 3 all_reduces,
 * the next #5). Each rank's error names its call's number. */
static void test_extra_collective_is_named(void **state) {
    (void)state;
    run t = {.dir = tmpdir()};
    char report[REPORT];
    diagnose(&t, EXTRA_GATHER, report);
    expect(report, "verdict: rank 3 waits in all_gather #4 of group data(0-3)");
    expect(report, "ranks 0-2 wait in all_reduce #5 of group world(0-3)");
    expect(report, "group data(0-3), call #4: rank 3 is in all_gather (4 x f32); ranks 0-2 never called it");
    assert_non_null(strstr(t.msg[3], "collective #4: all_gather on comm 'data' (rank 3 of 4)"));
    test_rmtree(t.dir);
}

/* Oracle: rank 2 broadcasts where the others all-reduce (call #5 of the world): the simulator refuses the
 * mismatch on every rank, and the verdict names rank 2 as the one that called something else. */
static void test_mismatch_is_named(void **state) {
    (void)state;
    run t = {.dir = tmpdir()};
    char report[REPORT];
    diagnose(&t, MISMATCH, report);
    expect(report, "group world(0-3), call #5: ranks 0,1,3 are in all_reduce (4 x f32); rank 2 called something "
                   "else (a mismatch)");
    expect(report, "verdict: rank 2 waits in broadcast #5 of group world(0-3)");
    test_rmtree(t.dir);
}

/* Oracle: rank 1 stops before the world's call #5 and writes nothing; the others time out there. The verdict
 * names rank 1 as silent, the others waiting for it, and the world rank of the silent member is implied. */
static void test_stopped_rank_is_named(void **state) {
    (void)state;
    run t = {.dir = tmpdir()};
    char report[REPORT];
    diagnose(&t, STOPPED, report);
    expect(report, "records of 3 of 4 ranks");
    expect(report, "verdict: rank 1 left no record");
    expect(report, "ranks 0,2,3 wait in all_reduce #5 of group world(0-3)");
    for (int r = 0; r < W; r++)
        if (r != 1) assert_non_null(strstr(t.msg[r], "collective #5: all_reduce on comm 'world'"));
    test_rmtree(t.dir);
}

/* Oracle: the records an earlier run left in the directory are not read as this run's. A run whose every rank
 * wrote a record (the mismatch) is followed, in the same directory, by one where rank 1 stops and writes nothing;
 * a record of a rank 7 the second run does not have lies there too. Each rank's recorder moves its earlier
 * record aside (flight-rank-N.json.prev), rank 0's also those of ranks beyond its world, and removes one it cannot
 * move (rank 1's .prev is a directory there), so the verdict names rank 1 as silent, not as the earlier run's rank 1
 * in its broadcast. */
static void test_earlier_records_set_aside(void **state) {
    (void)state;
    run t = {.dir = tmpdir()};
    char report[REPORT], path[128], prev[160];
    diagnose(&t, MISMATCH, report);
    snprintf(path, sizeof path, "%s/flight-rank-0.json", t.dir);
    snprintf(prev, sizeof prev, "%s/flight-rank-7.json", t.dir);
    assert_int_equal(link(path, prev), 0); /* rank 0's record under rank 7's name */
    snprintf(path, sizeof path, "%s/flight-rank-1.json.prev", t.dir); /* a place rank 1's cannot be moved to: */
    assert_int_equal(mkdir(path, 0700), 0);                           /* removed instead, the run made all the same */
    snprintf(path, sizeof path, "%s/flight-rank-1.json.prev/x", t.dir);
    FILE *x = fopen(path, "w");
    assert_non_null(x);
    assert_int_equal(fclose(x), 0);
    diagnose(&t, STOPPED, report);
    expect(report, "records of 3 of 4 ranks");
    expect(report, "verdict: rank 1 left no record");
    for (int r = 0; r < 8; r++) {
        struct stat sb;
        snprintf(path, sizeof path, "%s/flight-rank-%d.json", t.dir, r);
        snprintf(prev, sizeof prev, "%s.prev", path);
        assert_int_equal(stat(path, &sb) == 0, r < W && r != 1); /* this run's records: not the stopped rank's */
        assert_int_equal(stat(prev, &sb) == 0, r < W || r == 7); /* the earlier run's, set aside */
    }
    test_rmtree(t.dir);
}

/* Oracle: a run without a fault leaves nothing pending; a ring of depth 3 keeps the last 3 calls, in order,
 * completed, and the groups' ids agree across ranks (the diagnosis pairs them: data(0-3)). */
static void test_clean_run_and_ring(void **state) {
    (void)state;
    run t = {.dir = tmpdir(), .depth = 3};
    char report[REPORT];
    diagnose(&t, NONE, report);
    expect(report, "records of 4 of 4 ranks");
    expect(report, "verdict: no rank diverges");
    char path[256], *text = NULL;
    snprintf(path, sizeof path, "%s/flight-rank-2.json", t.dir);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    text = calloc(1, 1 << 16);
    size_t n = fread(text, 1, (1 << 16) - 1, f);
    fclose(f);
    flr_record *r = NULL;
    assert_ok(flr_parse(text, n, path, &r));
    assert_int_equal(r->rank, 2);
    assert_int_equal(r->world, W);
    assert_string_equal(r->reason, "end");
    assert_int_equal(r->ncomms, 2);
    for (int i = 0; i < 2; i++) {
        const flr_comm *c = &r->comms[i];
        int world = !strcmp(c->name, "world");
        assert_true(world || !strcmp(c->name, "data"));
        assert_int_equal(c->ncalls, 3);
        assert_int_equal(c->rank, 2);
        assert_int_equal(c->size, W);
        assert_int_equal(c->closed, 0); /* the record was written before data was freed */
        for (int k = 0; k < 3; k++) {
            assert_int_equal(c->calls[k].seq, (world ? 4 : 3) + k);
            assert_int_equal(c->calls[k].state, FLR_COMPLETED);
            assert_int_equal(c->calls[k].count, W);
            assert_true(c->calls[k].t1 >= c->calls[k].t0);
        }
        assert_int_equal(c->calls[2].op, world ? FSC_OP_ALL_REDUCE : FSC_OP_ALL_GATHER);
    }
    flr_free(r);
    free(text);
    test_rmtree(t.dir);
}

/* Rank 0's record of dir, its world ring's calls' states as letters ("ci": completed, issued). */
static void states_of(const char *dir, char *out) {
    char path[256], text[1 << 14];
    snprintf(path, sizeof path, "%s/flight-rank-0.json", dir);
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(text, 1, sizeof text, f) : 0;
    if (f) fclose(f);
    flr_record *r = NULL;
    out[0] = 0;
    if (flr_parse(text, n, path, &r) != FSC_OK) return;
    for (size_t k = 0; k < r->comms[0].ncalls && k < 15; k++)
        out[k] = "?iwcf"[r->comms[0].calls[k].state], out[k + 1] = 0;
    flr_free(r);
}

typedef struct {
    const char *dir;
    char before[16], after[16];
} async_run;

static fsc_status async_fn(fsc_rank *r, void *arg) {
    async_run *a = arg;
    fsc_flight *f = NULL;
    FSC_TRY(fsc_flight_create(&(fsc_flight_opts){.rank = r->rank, .world = r->world, .dir = a->dir}, &f));
    fsc_comm_set_flight(r->comm, f);
    float x[8] = {0};
    fsc_comm_req *q = NULL;
    fsc_status s = fsc_comm_barrier(r->comm);
    if (s == FSC_OK) s = fsc_comm_iall_reduce(r->comm, x, x, 8, FSC_F32, FSC_SUM, &q);
    if (s == FSC_OK && r->rank == 0 && fsc_flight_write(f, "test", NULL) == FSC_OK) states_of(a->dir, a->before);
    if (s == FSC_OK) s = fsc_comm_wait(q);
    fsc_comm_req_free(q);
    if (s == FSC_OK && r->rank == 0 && fsc_flight_write(f, "test", NULL) == FSC_OK) states_of(a->dir, a->after);
    fsc_comm_set_flight(r->comm, NULL);
    fsc_flight_free(f);
    return s;
}

/* Oracle: an asynchronous call is recorded as issued when started and completed once waited for. */
static void test_async_states(void **state) {
    (void)state;
    async_run a = {.dir = tmpdir()};
    fsc_cluster_opts co = fsc_cluster_opts_default();
    co.world = 2, co.timeout_s = 30;
    assert_ok(fsc_cluster_run(&co, async_fn, &a));
    assert_string_equal(a.before, "ci");
    assert_string_equal(a.after, "cc");
    test_rmtree(a.dir);
}

/* ---- the watcher ---- */

static fsc_flight_watch *watch; /* the handler's: a signal handler reaches the program's state through a global */

static void on_usr1(int sig) {
    (void)sig;
    fsc_flight_watch_signal(watch);
}

typedef struct {
    const char *dir;
    atomic_int added, stop;
    fsc_status st[2];
} busy_run;

static fsc_status busy_fn(fsc_rank *r, void *arg) {
    busy_run *b = arg;
    fsc_flight *f = NULL;
    FSC_TRY(fsc_flight_create(&(fsc_flight_opts){.rank = r->rank, .world = 2, .depth = 8, .dir = b->dir}, &f));
    fsc_comm_set_flight(r->comm, f);
    fsc_status s = fsc_flight_watch_add(watch, f);
    atomic_fetch_add(&b->added, 1);
    float x[16] = {0};
    for (int i = 0; s == FSC_OK && i < 100000; i++) {
        int go = !atomic_load(&b->stop);
        s = fsc_comm_all_reduce_host(r->comm, r->dev, x, FSC_MAX);
        if (s == FSC_OK) s = fsc_comm_barrier(r->comm);
        if (s == FSC_OK && x[0] != 0) break; /* every rank saw stop: leave together */
        x[0] = go ? 0.0f : 1.0f;
    }
    b->st[r->rank] = s;
    fsc_flight_watch_remove(watch, f);
    fsc_flight_free(f);
    return s;
}

static void *run_busy(void *arg) {
    fsc_cluster_opts co = fsc_cluster_opts_default();
    co.world = 2, co.timeout_s = 60;
    fsc_cluster_run(&co, busy_fn, arg);
    return NULL;
}

/* Oracle: SIGUSR1, through the program's handler, makes the watcher write both ranks' records while they keep
 * calling collectives; the records parse, with the reason "signal" and calls in increasing order. */
static void test_signal_writes_records(void **state) {
    (void)state;
    busy_run b = {.dir = tmpdir()};
    atomic_init(&b.added, 0), atomic_init(&b.stop, 0);
    assert_ok(fsc_flight_watch_start(&watch));
    struct sigaction sa = {0}, old;
    sa.sa_handler = on_usr1;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    assert_int_equal(sigaction(SIGUSR1, &sa, &old), 0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, run_busy, &b), 0);
    for (int k = 0; k < 3000 && atomic_load(&b.added) < 2; k++) nap_ms(10);
    for (int i = 0; i < 5; i++) {
        unsigned long before = fsc_flight_watch_written(watch);
        raise(SIGUSR1);
        for (int k = 0; k < 3000 && fsc_flight_watch_written(watch) < before + 2; k++) nap_ms(10);
        assert_true(fsc_flight_watch_written(watch) >= before + 2);
    }
    atomic_store(&b.stop, 1);
    pthread_join(th, NULL);
    sigaction(SIGUSR1, &old, NULL);
    fsc_flight_watch_stop(watch);
    watch = NULL;
    assert_ok(b.st[0]);
    assert_ok(b.st[1]);
    char report[REPORT];
    assert_ok(fsc_flight_diagnose_dir(b.dir, report, sizeof report));
    expect(report, "records of 2 of 2 ranks");
    for (int r = 0; r < 2; r++) {
        char path[256], text[1 << 14];
        snprintf(path, sizeof path, "%s/flight-rank-%d.json", b.dir, r);
        FILE *f = fopen(path, "rb");
        assert_non_null(f);
        size_t n = fread(text, 1, sizeof text, f);
        fclose(f);
        flr_record *rec = NULL;
        assert_ok(flr_parse(text, n, path, &rec));
        assert_string_equal(rec->reason, "signal");
        assert_true(rec->ncomms == 1 && rec->comms[0].ncalls > 0);
        flr_free(rec);
    }
    test_rmtree(b.dir);
}

/* ---- damaged records ---- */

static void put_file(const char *dir, const char *name, const char *text) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

#define GOOD(rank, state) \
    "{\"fsc_flight\":1,\"rank\":" #rank ",\"world\":3,\"reason\":\"timeout\",\"time_us\":2000000,\"comms\":[" \
    "{\"name\":\"world\",\"group\":\"66736377726c6400\",\"rank\":" #rank ",\"size\":3,\"calls\":[" \
    "{\"seq\":7,\"op\":\"all_reduce\",\"count\":4,\"dtype\":\"f32\",\"peer\":-1,\"state\":\"" state "\"," \
    "\"start_us\":1000000,\"end_us\":1500000,\"status\":\"timeout\"}]}]}"

/* Oracle: the parser refuses each damage with a message naming the file and the field; a directory with one
 * good record and damaged ones reports the damaged ranks as silent and still diagnoses. */
static void test_damaged_records(void **state) {
    (void)state;
    static const struct { const char *text, *needle; } bad[] = {
        { "", "not valid JSON" },
        { "{\"fsc_flight\":1,\"rank\":0,\"world\":3", "not valid JSON" },
        { "[1,2]", "not a JSON object" },
        { "{\"fsc_flight\":2}", "\"fsc_flight\" is 2" },
        { "{\"fsc_flight\":1,\"rank\":3,\"world\":3}", "\"rank\" is 3" },
        { "{\"fsc_flight\":1,\"rank\":0,\"world\":1e9}", "\"world\" is 1e+09" },
        { "{\"fsc_flight\":1,\"rank\":0,\"world\":1,\"time_us\":1,\"reason\":\"x\",\"comms\":{}}", "\"comms\"" },
        { "{\"fsc_flight\":1,\"rank\":0,\"world\":1,\"time_us\":1,\"reason\":7,\"comms\":[]}", "\"reason\"" },
        { "{\"fsc_flight\":1,\"rank\":0,\"world\":1,\"time_us\":1,\"reason\":\"x\",\"comms\":[{\"name\":\"w\","
          "\"group\":\"xyz\",\"rank\":0,\"size\":1,\"calls\":[]}]}", "16 hex digits" },
        { "{\"fsc_flight\":1,\"rank\":0,\"world\":1,\"time_us\":1,\"reason\":\"x\",\"comms\":[{\"name\":\"w\","
          "\"group\":\"0000000000000001\",\"rank\":0,\"size\":2,\"calls\":[]}]}", "\"size\" is 2" },
        { "{\"fsc_flight\":1,\"rank\":0,\"world\":1,\"time_us\":1,\"reason\":\"x\",\"comms\":[{\"name\":\"w\","
          "\"group\":\"0000000000000001\",\"rank\":0,\"size\":1,\"calls\":[{\"seq\":1,\"op\":\"gather\",\"count\":1,"
          "\"dtype\":\"f32\",\"peer\":-1,\"state\":\"issued\",\"start_us\":1}]}]}", "\"gather\" is not an operation" },
        { "{\"fsc_flight\":1,\"rank\":0,\"world\":1,\"time_us\":1,\"reason\":\"x\",\"comms\":[{\"name\":\"w\","
          "\"group\":\"0000000000000001\",\"rank\":0,\"size\":1,\"calls\":[{\"seq\":1,\"op\":\"barrier\",\"count\":0,"
          "\"dtype\":\"u8\",\"peer\":-1,\"state\":\"issued\",\"start_us\":1},{\"seq\":1,\"op\":\"barrier\",\"count\":0,"
          "\"dtype\":\"u8\",\"peer\":-1,\"state\":\"issued\",\"start_us\":1}]}]}", "appears twice" },
        { "{\"fsc_flight\":1,\"rank\":0,\"world\":1,\"time_us\":1,\"reason\":\"x\",\"comms\":[{\"name\":\"w\","
          "\"group\":\"0000000000000001\",\"rank\":0,\"size\":1,\"calls\":[{\"seq\":0.5,\"op\":\"barrier\"}]}]}",
          "\"seq\" is 0.5" },
        { "{\"fsc_flight\":1,\"rank\":0,\"world\":1,\"time_us\":1,\"reason\":\"x\",\"comms\":[{\"name\":\"w\","
          "\"group\":\"0000000000000001\",\"rank\":0,\"size\":1,\"calls\":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]}]}",
          "18 calls, more than a file of its size holds" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        flr_record *r = (flr_record *)1;
        fsc_status s = flr_parse(bad[i].text, strlen(bad[i].text), "f.json", &r);
        if (s != FSC_ERR_FORMAT || !strstr(fsc_last_error(), bad[i].needle) || !strstr(fsc_last_error(), "f.json"))
            fail_msg("case %zu: %s: \"%s\" lacks \"%s\"", i, fsc_status_str(s), fsc_last_error(), bad[i].needle);
        assert_null(r);
    }
    char *deep = malloc(8001); /* 8000 values in 8000 bytes: cJSON would allocate half a MiB for them */
    memset(deep, '[', 8000), deep[8000] = 0;
    flr_record *r = NULL;
    assert_err(flr_parse(deep, 8000, "deep.json", &r), FSC_ERR_FORMAT, "deep.json: 8000 JSON values in 8000 bytes");
    free(deep);
    char *dir = tmpdir();
    char report[REPORT];
    assert_err(fsc_flight_diagnose_dir(dir, report, sizeof report), FSC_ERR_FORMAT, "holds no readable flight record");
    put_file(dir, "flight-rank-0.json", GOOD(0, "failed"));
    put_file(dir, "flight-rank-1.json", "{\"fsc_flight\":1,\"rank\":1,");
    put_file(dir, "flight-rank-2.json", GOOD(1, "failed")); /* the wrong rank's record */
    put_file(dir, "flight-rank-x.json", "not even looked at");
    assert_ok(fsc_flight_diagnose_dir(dir, report, sizeof report));
    print_message("%s", report);
    expect(report, "damaged record: ");
    expect(report, "flight-rank-1.json: not valid JSON (cut short or damaged) (rank 1 counted as silent)");
    expect(report, "flight-rank-2.json: holds the record of rank 1 (rank 2 counted as silent)");
    expect(report, "verdict: rank 1 left no record (stopped, killed, or never reached a failure); rank 2 left no "
                   "record");
    expect(report, "; rank 0 waits in all_reduce #7 of group world(0-2)\n");
    /* a FIFO under a record's name is refused, never waited on */
    char fifo[256];
    snprintf(fifo, sizeof fifo, "%s/flight-rank-1.json", dir);
    assert_int_equal(remove(fifo), 0);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_ok(fsc_flight_diagnose_dir(dir, report, sizeof report));
    expect(report, "flight-rank-1.json: not a regular file (rank 1 counted as silent)");
    assert_err(fsc_flight_diagnose_dir("/nonexistent/fsc", report, sizeof report), FSC_ERR_IO, "cannot list");
    test_rmtree(dir);
    /* a recorder whose record the diagnosis could not read is refused when made, not when read */
    fsc_flight *f = NULL;
    assert_err(fsc_flight_create(&(fsc_flight_opts){ .rank = 0, .world = FSC_FLIGHT_MAX_WORLD + 1 }, &f),
               FSC_ERR_UNSUPPORTED, "above the 65536 a flight record can describe");
    assert_null(f);
    assert_ok(fsc_flight_create(&(fsc_flight_opts){ .rank = 0, .world = FSC_FLIGHT_MAX_WORLD }, &f));
    fsc_flight_free(f);
}

#define CALL(rank, seq, state, status, end) \
    "{\"fsc_flight\":1,\"rank\":" #rank ",\"world\":3,\"reason\":\"failure\",\"time_us\":9000000,\"comms\":[" \
    "{\"name\":\"data\",\"group\":\"00000000000000aa\",\"rank\":" #rank ",\"size\":3,\"calls\":[" \
    "{\"seq\":6,\"op\":\"all_reduce\",\"count\":4,\"dtype\":\"f32\",\"peer\":-1,\"state\":\"completed\"," \
    "\"start_us\":1000000,\"end_us\":1000001}," \
    "{\"seq\":" #seq ",\"op\":\"all_reduce\",\"count\":4,\"dtype\":\"f32\",\"peer\":-1,\"state\":\"" state "\"," \
    "\"start_us\":2000000,\"end_us\":" #end ",\"status\":\"" status "\"}]}]}"

/* Oracle: when every rank failed in the call, those that did not time out in it are what the others waited for
 * (a rank stopped inside the call, failing only when it resumes); a rank past the call the others wait in is the
 * smaller side; with every rank still waiting in it nobody is blamed, and the verdict says the call hangs. Written
 * by hand, as the ranks of an MPI job would leave them. */
static void test_stopped_inside_the_call(void **state) {
    (void)state;
    char *dir = tmpdir(), report[REPORT];
    put_file(dir, "flight-rank-0.json", CALL(0, 7, "failed", "timeout", 7000000));
    put_file(dir, "flight-rank-1.json", CALL(1, 7, "failed", "communication failure", 7000000));
    put_file(dir, "flight-rank-2.json", CALL(2, 7, "failed", "timeout", 7000000));
    assert_ok(fsc_flight_diagnose_dir(dir, report, sizeof report));
    print_message("%s", report);
    expect(report, "group data(0-2), call #7: ranks 0,2 timed out in it, waiting; rank 1 failed otherwise");
    expect(report, "verdict: rank 1 waits in all_reduce #7 of group data(0-2) (5.0 s, then failed: communication "
                   "failure); ranks 0,2 wait in all_reduce #7 of group data(0-2)\n");
    /* rank 1 went past the call the others still wait in, and is in no collective: the smaller side */
    put_file(dir, "flight-rank-1.json", CALL(1, 7, "completed", "", 7000000));
    put_file(dir, "flight-rank-2.json", CALL(2, 7, "waiting", "", 7000000));
    assert_ok(fsc_flight_diagnose_dir(dir, report, sizeof report));
    print_message("%s", report);
    expect(report, "group data(0-2), call #7: ranks 0,2 are in all_reduce (4 x f32); rank 1 completed it\n");
    expect(report, "group data(0-2), call #7: rank 1 went past it while ranks 0,2 still wait in it\n");
    expect(report, "verdict: rank 1 is not in a collective (the last call, all_reduce #7 of group data(0-2), completed "
                   "2.0 s before the record); ranks 0,2 wait in all_reduce #7 of group data(0-2)\n");
    /* all still waiting in the call: nobody is behind or ahead, and the verdict does not claim all is well */
    put_file(dir, "flight-rank-0.json", CALL(0, 7, "waiting", "", 7000000));
    put_file(dir, "flight-rank-1.json", CALL(1, 7, "waiting", "", 7000000));
    assert_ok(fsc_flight_diagnose_dir(dir, report, sizeof report));
    print_message("%s", report);
    expect(report, "verdict: no rank stands out in the stuck groups (their calls themselves may hang, or the network "
                   "failed); ranks 0-2 wait in all_reduce #7 of group data(0-2)\n");
    put_file(dir, "flight-rank-0.json", CALL(0, 7, "failed", "timeout", 7000000));
    /* all timed out, rank 1 only after the others had written their records (at 9 s): it was stopped inside */
    put_file(dir, "flight-rank-1.json", CALL(1, 7, "failed", "timeout", 9500000));
    put_file(dir, "flight-rank-2.json", CALL(2, 7, "failed", "timeout", 7000000));
    assert_ok(fsc_flight_diagnose_dir(dir, report, sizeof report));
    print_message("%s", report);
    expect(report, "group data(0-2), call #7: rank 1 failed in it only after every other member had given up");
    expect(report, "verdict: rank 1 waits in all_reduce #7 of group data(0-2) (7.5 s, then failed: timeout)");
    test_rmtree(dir);
}

/* A rank of a 3-rank world: call #89, an all_gather (state, status, end), then #90, an all_reduce (state, ...;
 * none when NULL), as an MPI job leaves them (the numbers, operations and sizes of a failing run's records). */
static void world_rank(const char *dir, int rank, const char *st89, const char *status89, long end89,
                       const char *st90, const char *status90, long end90) {
    char name[32], text[2048], more[512] = "";
    if (st90)
        snprintf(more, sizeof more, ",{\"seq\":90,\"op\":\"all_reduce\",\"count\":1,\"dtype\":\"f32\",\"peer\":-1,"
                 "\"state\":\"%s\",\"start_us\":3000000,\"end_us\":%ld,\"status\":\"%s\"}", st90, end90, status90);
    snprintf(text, sizeof text, "{\"fsc_flight\":1,\"rank\":%d,\"world\":3,\"reason\":\"failure\",\"time_us\":%ld,"
             "\"comms\":[{\"name\":\"world\",\"group\":\"66736377726c6400\",\"rank\":%d,\"size\":3,\"calls\":["
             "{\"seq\":88,\"op\":\"reduce_scatter\",\"count\":2923,\"dtype\":\"f32\",\"peer\":-1,"
             "\"state\":\"completed\",\"start_us\":1000000,\"end_us\":1000001},"
             "{\"seq\":89,\"op\":\"all_gather\",\"count\":24,\"dtype\":\"u8\",\"peer\":-1,\"state\":\"%s\","
             "\"start_us\":2000000,\"end_us\":%ld,\"status\":\"%s\"}%s]}]}", rank,
             (st90 ? end90 : end89) + 100000, rank, st89, end89, status89, more);
    snprintf(name, sizeof name, "flight-rank-%d.json", rank);
    put_file(dir, name, text);
}

/* Oracle: rank 1 stopped inside all_gather #89 once its part had gone out: ranks 0 and 2 completed it, went on
 * and timed out in all_reduce #90 waiting for it; rank 1, woken by mpirun, failed in #89 after their records. Or
 * its part reached rank 0 only: rank 2 timed out in #89 and rank 0 in #90 (then the smaller side, rank 0 past the
 * call, is not the suspect: rank 1 failed last). Or rank 1's record was written while it still waited (a signal):
 * the smaller side, rank 1 at the call the others completed. Or it left none. Each verdict names rank 1 in #89 and
 * where the others wait, and none says that no rank diverges. As an MPI job's ranks leave them, by hand. */
static void test_stopped_after_its_part(void **state) {
    (void)state;
    char *dir = tmpdir(), report[REPORT];
    world_rank(dir, 0, "completed", "", 2000001, "failed", "timeout", 8000000);
    world_rank(dir, 1, "failed", "timeout", 9500000, NULL, NULL, 0);
    world_rank(dir, 2, "completed", "", 2000001, "failed", "timeout", 8000000);
    assert_ok(fsc_flight_diagnose_dir(dir, report, sizeof report));
    print_message("%s", report);
    expect(report, "group world(0-2), call #89: rank 1 is in all_gather (24 x u8); ranks 0,2 completed it\n");
    expect(report, "group world(0-2), call #89: rank 1 failed in it only after every other member had given up "
                   "(stopped or hung inside the call)\n");
    expect(report, "verdict: rank 1 waits in all_gather #89 of group world(0-2) (7.5 s, then failed: timeout); ranks "
                   "0,2 wait in all_reduce #90 of group world(0-2)\n");
    assert_null(strstr(report, "no rank diverges"));
    world_rank(dir, 2, "failed", "timeout", 8000000, NULL, NULL, 0);
    assert_ok(fsc_flight_diagnose_dir(dir, report, sizeof report));
    print_message("%s", report);
    expect(report, "group world(0-2), call #89: ranks 1,2 are in all_gather (24 x u8); rank 0 completed it\n");
    expect(report, "verdict: rank 1 waits in all_gather #89 of group world(0-2) (7.5 s, then failed: timeout); rank 0 "
                   "waits in all_reduce #90 of group world(0-2); rank 2 waits in all_gather #89 of group world(0-2)\n");
    world_rank(dir, 1, "waiting", "", 9500000, NULL, NULL, 0);
    world_rank(dir, 2, "completed", "", 2000001, "failed", "timeout", 8000000);
    assert_ok(fsc_flight_diagnose_dir(dir, report, sizeof report));
    print_message("%s", report);
    expect(report, "group world(0-2), call #89: rank 1 did not complete it and ranks 0,2 did (stopped or hung inside "
                   "the call once its part had gone out)\n");
    expect(report, "verdict: rank 1 waits in all_gather #89 of group world(0-2) (7.6 s); ranks 0,2 wait in all_reduce "
                   "#90 of group world(0-2)\n");
    /* every rank in #89: rank 0 timed out, rank 2 failed otherwise when rank 0 left, rank 1 (stopped inside it)
     * timed out last, woken by mpirun: rank 1, not rank 2 (a CI run's shape) */
    world_rank(dir, 0, "failed", "timeout", 8000000, NULL, NULL, 0);
    world_rank(dir, 1, "failed", "timeout", 9500000, NULL, NULL, 0);
    world_rank(dir, 2, "failed", "communication failure", 8050000, NULL, NULL, 0);
    assert_ok(fsc_flight_diagnose_dir(dir, report, sizeof report));
    print_message("%s", report);
    expect(report, "group world(0-2), call #89: rank 1 failed in it only after every other member had given up "
                   "(stopped or hung inside the call)\n");
    if (!strstr(report, "verdict: rank 1 waits in all_gather #89 of group world(0-2)"))
        fail_msg("the verdict does not name rank 1:\n%s", report);
    world_rank(dir, 0, "completed", "", 2000001, "failed", "timeout", 8000000);
    world_rank(dir, 2, "completed", "", 2000001, "failed", "timeout", 8000000);
    char path[256];
    snprintf(path, sizeof path, "%s/flight-rank-1.json", dir);
    assert_int_equal(remove(path), 0);
    assert_ok(fsc_flight_diagnose_dir(dir, report, sizeof report));
    print_message("%s", report);
    expect(report, "verdict: rank 1 left no record (stopped, killed, or never reached a failure); ranks 0,2 wait in "
                   "all_reduce #90 of group world(0-2)\n");
    test_rmtree(dir);
}

#define SHARD_CALL(seq, state, status, end) \
    "{\"seq\":" #seq ",\"op\":\"all_gather\",\"count\":4,\"dtype\":\"f32\",\"peer\":-1,\"state\":\"" state "\"," \
    "\"start_us\":2000000,\"end_us\":" #end ",\"status\":\"" status "\"}"
#define TWO_GROUPS(rank, time, shard, world) \
    "{\"fsc_flight\":1,\"rank\":" #rank ",\"world\":3,\"reason\":\"failure\",\"time_us\":" #time ",\"comms\":[" \
    "{\"name\":\"shard\",\"group\":\"00000000000000aa\",\"rank\":" #rank ",\"size\":3,\"calls\":[" shard "]}," \
    "{\"name\":\"world\",\"group\":\"66736377726c6400\",\"rank\":" #rank ",\"size\":3,\"calls\":[" \
    "{\"seq\":9,\"op\":\"all_reduce\",\"count\":1,\"dtype\":\"f32\",\"peer\":-1,\"state\":\"completed\"," \
    "\"start_us\":1000000,\"end_us\":1000001}" world "]}]}"

/* Oracle: as above on the group shard, where rank 0 completed #5 and waits in #6 while rank 2 waits in #5 and
 * rank 1, stopped inside #5, failed last; rank 0 also issued a reduce_scatter on the world in the background (a
 * call ahead that ranks 1 and 2 never reached): that does not make rank 0 a suspect. */
static void test_issued_call_ahead(void **state) {
    (void)state;
    char *dir = tmpdir(), report[REPORT];
    put_file(dir, "flight-rank-0.json", TWO_GROUPS(0, 8100000, SHARD_CALL(5, "completed", "", 2000001) ","
                                                   SHARD_CALL(6, "failed", "timeout", 8000000),
                                                   ",{\"seq\":10,\"op\":\"reduce_scatter\",\"count\":4,\"dtype\":"
                                                   "\"f32\",\"peer\":-1,\"state\":\"issued\",\"start_us\":2000002}"));
    put_file(dir, "flight-rank-1.json", TWO_GROUPS(1, 9600000, SHARD_CALL(5, "failed", "timeout", 9500000), ""));
    put_file(dir, "flight-rank-2.json", TWO_GROUPS(2, 8100000, SHARD_CALL(5, "failed", "timeout", 8000000), ""));
    assert_ok(fsc_flight_diagnose_dir(dir, report, sizeof report));
    print_message("%s", report);
    expect(report, "group world(0-2), call #10: rank 0 is in reduce_scatter (4 x f32); ranks 1,2 never called it\n");
    expect(report, "verdict: rank 1 waits in all_gather #5 of group shard(0-2) (7.5 s, then failed: timeout); rank 0 "
                   "waits in all_gather #6 of group shard(0-2); rank 2 waits in all_gather #5 of group shard(0-2)\n");
    test_rmtree(dir);
}

#define WORLD_RS(seq, state, status, start, end) \
    ",{\"seq\":" #seq ",\"op\":\"reduce_scatter\",\"count\":4,\"dtype\":\"f32\",\"peer\":-1,\"state\":\"" state \
    "\",\"start_us\":" #start ",\"end_us\":" #end ",\"status\":\"" status "\"}"

/* Oracle (a CI run's shape): rank 1, stopped inside all_gather #5 of the shard group once its part had gone out,
 * failed in it last, woken by mpirun; it had started reduce_scatter #10 of the world before. Rank 0 completed #10
 * (its part from rank 1 had arrived) and timed out in #11; rank 2 timed out in #10, waiting for rank 1. On the
 * world rank 0 is the smaller side (it alone went past #10), but that rank 1 failed last in the shard group is
 * the stronger evidence: the verdict names rank 1 alone. */
static void test_stopped_in_one_group_late_in_another(void **state) {
    (void)state;
    char *dir = tmpdir(), report[REPORT];
    put_file(dir, "flight-rank-0.json", TWO_GROUPS(0, 8100000, SHARD_CALL(5, "completed", "", 2000001),
                                                   WORLD_RS(10, "completed", "", 1500000, 1500001)
                                                   WORLD_RS(11, "failed", "timeout", 2000002, 8000000)));
    put_file(dir, "flight-rank-1.json", TWO_GROUPS(1, 9600000,
                                                   SHARD_CALL(5, "failed", "communication failure", 9500000),
                                                   WORLD_RS(10, "waiting", "", 1500000, 0)));
    put_file(dir, "flight-rank-2.json", TWO_GROUPS(2, 8100000, SHARD_CALL(5, "completed", "", 2000001),
                                                   WORLD_RS(10, "failed", "timeout", 1500000, 8000000)));
    assert_ok(fsc_flight_diagnose_dir(dir, report, sizeof report));
    print_message("%s", report);
    expect(report, "group world(0-2), call #10: rank 0 went past it while ranks 1,2 still wait in it\n");
    expect(report, "group shard(0-2), call #5: rank 1 failed in it only after every other member had given up");
    expect(report, "verdict: rank 1 waits in all_gather #5 of group shard(0-2) (7.5 s, then failed: communication "
                   "failure); rank 0 waits in reduce_scatter #11 of group world(0-2); rank 2 waits in reduce_scatter "
                   "#10 of group world(0-2)\n");
    test_rmtree(dir);
}

/* A record's file is close-on-exec while it is written: a child that the host program starts meanwhile holds
 * nothing of the library's. Oracle: while the library writes a record of more than a pipe's 64 KiB into a FIFO
 * under the record's temporary name, its descriptor of it is close-on-exec (it was not, unlike every other file
 * the library opens). */
typedef struct { char tmp[320]; int fd, cloexec; atomic_int done; } fifo_reader;

static void *drain_fifo(void *arg) {
    fifo_reader *d = arg;
    for (int k = 0; k < 5000 && (d->cloexec = test_fd_cloexec(d->tmp, d->fd)) < 0; k++) nap_ms(1);
    char buf[4096];
    while (read(d->fd, buf, sizeof buf) > 0 || !atomic_load(&d->done)) nap_ms(0);
    return NULL;
}

static fsc_status cloexec_run(fsc_rank *r, void *arg) {
    fifo_reader *d = arg;
    const char *dir = d->tmp;
    fsc_flight *f = NULL;
    FSC_TRY(fsc_flight_create(&(fsc_flight_opts){.rank = 0, .world = 1, .depth = 1024, .dir = dir}, &f));
    fsc_comm_set_flight(r->comm, f);
    fsc_status s = FSC_OK;
    for (int i = 0; i < 1000 && s == FSC_OK; i++) s = fsc_comm_barrier(r->comm); /* about 150 KiB of record */
    char tmp[320];
    snprintf(tmp, sizeof tmp, "%.200s/flight-rank-0.json.tmp", dir);
    if (s == FSC_OK && mkfifo(tmp, 0600) != 0) s = fsc_error(FSC_ERR_IO, "mkfifo %s", tmp);
    d->fd = s == FSC_OK ? open(tmp, O_RDWR | O_NONBLOCK) : -1; /* a reader there already: the write does not wait */
    snprintf(d->tmp, sizeof d->tmp, "%s", tmp);
    pthread_t t;
    if (d->fd >= 0 && pthread_create(&t, NULL, drain_fifo, d) == 0) {
        s = fsc_flight_write(f, "test", NULL);
        atomic_store(&d->done, 1);
        pthread_join(t, NULL);
    } else if (s == FSC_OK) s = fsc_error(FSC_ERR_IO, "no reader");
    if (d->fd >= 0) close(d->fd);
    fsc_comm_set_flight(r->comm, NULL);
    fsc_flight_free(f);
    return s;
}

static void test_record_file_cloexec(void **state) {
    (void)state;
    static fifo_reader d;
    const char *dir = tmpdir();
    snprintf(d.tmp, sizeof d.tmp, "%s", dir);
    d.cloexec = -3;
    fsc_cluster_opts co = fsc_cluster_opts_default();
    assert_ok(fsc_cluster_run(&co, cloexec_run, &d));
    test_rmtree(dir);
    assert_int_equal(d.cloexec, 1);
}

/* A message that is not UTF-8 (a path in Latin-1, as an error names it) makes a record that is still JSON's UTF-8:
 * the byte that begins no character is U+FFFD, the rest kept (the record had the byte as it was, which Python's json
 * and jq refuse). Oracle: the file's bytes checked by the definition of UTF-8; the reader's message. */
static void test_record_is_utf8(void **state) {
    (void)state;
    const char *dir = tmpdir();
    fsc_flight *f = NULL;
    assert_ok(fsc_flight_create(&(fsc_flight_opts){.rank = 0, .world = 1, .dir = dir}, &f));
    assert_ok(fsc_flight_write(f, "failure", "--save /data/caf\xe9.safetensors: cannot write \xc3\xa9"));
    fsc_flight_free(f);
    char path[256];
    snprintf(path, sizeof path, "%s/flight-rank-0.json", dir);
    FILE *in = fopen(path, "rb");
    assert_non_null(in);
    char *text = calloc(1, 1 << 16);
    size_t n = fread(text, 1, (1 << 16) - 1, in);
    fclose(in);
    if (!test_valid_utf8((const unsigned char *)text)) fail_msg("the record is not UTF-8: %s", text);
    flr_record *r = NULL;
    assert_ok(flr_parse(text, n, path, &r));
    assert_string_equal(r->message, "--save /data/caf\xef\xbf\xbd.safetensors: cannot write \xc3\xa9");
    flr_free(r);
    free(text);
    test_rmtree(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_clean_run_and_ring),
        cmocka_unit_test(test_extra_collective_is_named),
        cmocka_unit_test(test_mismatch_is_named),
        cmocka_unit_test(test_stopped_rank_is_named),
        cmocka_unit_test(test_earlier_records_set_aside),
        cmocka_unit_test(test_async_states),
        cmocka_unit_test(test_signal_writes_records),
        cmocka_unit_test(test_damaged_records),
        cmocka_unit_test(test_stopped_inside_the_call),
        cmocka_unit_test(test_stopped_after_its_part),
        cmocka_unit_test(test_issued_call_ahead),
        cmocka_unit_test(test_stopped_in_one_group_late_in_another),
        cmocka_unit_test(test_record_file_cloexec),
        cmocka_unit_test(test_record_is_utf8),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
