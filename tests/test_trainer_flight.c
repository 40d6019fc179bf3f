/* Tests of the trainer's flight recorder (examples/train_flight.h, --flight-recorder) and of `ckpt_tool flight`.
 * Oracles: SIGUSR1 to a running trainer of simulated ranks makes every rank write DIR/flight-rank-N.json while
 * it keeps training (the records parse, with the world and the engine's data group, and the run goes on); the
 * records' directory defaults to --ckpt-dir; a run that succeeds writes none; ckpt_tool flight reads them; a
 * directory that cannot be made is refused with exit 2 naming the option. (The injected-fault diagnoses are
 * test_flight's; a stopped MPI rank is test_mpi's.) */
#include <limits.h>
#include <signal.h>
#include <time.h>
#include "io/flight_read.h"
#include <sys/stat.h>
#include "trainertest.h"

static char trainer[PATH_MAX], tool[PATH_MAX];
static char tmpdir[64];

#define TINY "--layers 1 --dim 32 --heads 2 --seq 16 --batch 4"

static void nap_ms(long ms) { nanosleep(&(struct timespec){0, ms * 1000000L}, NULL); }

static int exists(const char *dir, int rank) {
    char *p = prog_fmt("%s/flight-rank-%d.json", dir, rank);
    int ok = access(p, R_OK) == 0;
    free(p);
    return ok;
}

/* The comm named name in dir's record of rank (NULL: none); the record in *rec (the caller frees). */
static const flr_comm *comm_of(const char *dir, int rank, const char *name, flr_record **rec) {
    char *p = prog_fmt("%s/flight-rank-%d.json", dir, rank), *text = prog_slurp(p);
    assert_ok(flr_parse(text, strlen(text), p, rec));
    free(text), free(p);
    for (int i = 0; i < (*rec)->ncomms; i++)
        if (!strcmp((*rec)->comms[i].name, name)) return &(*rec)->comms[i];
    return NULL;
}

/* cmd run by sh in a child process (the trainer, its output redirected). */
static pid_t spawn(const char *cmd) {
    pid_t job = fork();
    if (job == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    assert_true(job > 0);
    return job;
}

/* The bytes of the file out (0: none yet). */
static size_t out_bytes(const char *out) {
    char *text = prog_slurp(out);
    size_t n = strlen(text);
    free(text);
    return n;
}

/* Whether the file out comes to hold needle within a minute (bounded waits: a loaded machine may be slow). */
static int out_shows(const char *out, const char *needle) {
    for (int k = 0; k < 6000; k++) {
        char *text = prog_slurp(out);
        const int seen = strstr(text, needle) != NULL;
        free(text);
        if (seen) return 1;
        nap_ms(10);
    }
    return 0;
}

/* Whether the file out grows past before + 100 bytes within a minute: the run trains on. */
static int out_grows(const char *out, size_t before) {
    for (int k = 0; k < 6000; k++) {
        if (out_bytes(out) > before + 100) return 1;
        nap_ms(10);
    }
    return 0;
}

/* Oracle: SIGUSR1 to a training of 2 simulated ranks (FSDP) writes both ranks' records into --ckpt-dir (the
 * default), each holding the world and FSDP's shard group (split from the data group) with calls, and the
 * training goes on afterwards. */
static void test_signal_writes_every_rank(void **state) {
    (void)state;
    char *ck = prog_fmt("%s/ck", tmpdir), *out = prog_fmt("%s/sig.out", tmpdir);
    char *cmd = prog_fmt("exec '%s' " TINY " --world 2 --parallel fsdp --steps 1000000 --save-every 1000000 "
                         "--ckpt-dir '%s' > '%s' 2>&1", trainer, ck, out);
    pid_t job = spawn(cmd);
    const int started = out_shows(out, "step    3/");
    if (started) kill(job, SIGUSR1);
    for (int k = 0; k < 6000 && started && !(exists(ck, 0) && exists(ck, 1)); k++) nap_ms(10);
    const int going = started && out_grows(out, out_bytes(out)); /* it trains on after writing */
    kill(job, SIGKILL);
    waitpid(job, NULL, 0);
    if (!started) fail_msg("the trainer did not start:\n%s", prog_slurp(out));
    assert_true(exists(ck, 0) && exists(ck, 1));
    assert_true(going);
    for (int r = 0; r < 2; r++) {
        flr_record *rec = NULL;
        const flr_comm *w = comm_of(ck, r, "world", &rec), *d = NULL;
        assert_non_null(w);
        assert_string_equal(rec->reason, "signal");
        assert_int_equal(rec->world, 2);
        for (int i = 0; i < rec->ncomms; i++)
            if (!strcmp(rec->comms[i].name, "shard") && rec->comms[i].ncalls) d = &rec->comms[i];
        if (!d) fail_msg("rank %d's record has no shard group with calls", r);
        assert_int_equal(d->size, 2);
        flr_free(rec);
    }
    char *args = prog_fmt("flight '%s'", ck), *o = NULL;
    assert_int_equal(prog_run(tool, args, tmpdir, &o, NULL), 0);
    if (!strstr(o, "records of 2 of 2 ranks") || !strstr(o, "verdict: ")) fail_msg("ckpt_tool flight:\n%s", o);
    free(o), free(args), free(cmd), free(out), free(ck);
}

/* Oracle: SIGUSR1 to a trainer that records nothing (no --flight-recorder, --ckpt-dir or --trace) does not end it
 * (its default action would, with status 138: a job sent SIGUSR1 while it starts, before its recorder, died): the
 * run trains on, and only the SIGKILL that follows ends it. */
static void test_signal_without_recorder(void **state) {
    (void)state;
    char *out = prog_fmt("%s/sig_none.out", tmpdir);
    char *cmd = prog_fmt("exec '%s' " TINY " --steps 1000000 > '%s' 2>&1", trainer, out);
    pid_t job = spawn(cmd);
    const int started = out_shows(out, "step    3/");
    const size_t before = started ? out_bytes(out) : 0;
    if (started) kill(job, SIGUSR1);
    const int going = started && out_grows(out, before);
    kill(job, SIGKILL);
    int status = 0;
    waitpid(job, &status, 0);
    if (!started) fail_msg("the trainer did not start:\n%s", prog_slurp(out));
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL)
        fail_msg("the trainer ended by %s %d, not the test's SIGKILL", WIFSIGNALED(status) ? "signal" : "exit",
                 WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    assert_true(going);
    free(cmd), free(out);
}

/* Oracle: a run that succeeds leaves no record; a directory that cannot be made is refused (exit 2). */
static void test_clean_run_and_refusal(void **state) {
    (void)state;
    char *fr = prog_fmt("%s/fr", tmpdir);
    char *args = prog_fmt(TINY " --world 2 --parallel ddp --steps 2 --flight-recorder '%s'", fr);
    char *o = NULL;
    assert_int_equal(prog_run(trainer, args, tmpdir, &o, NULL), 0);
    assert_false(exists(fr, 0) || exists(fr, 1));
    free(o), free(args);
    args = prog_fmt("flight '%s'", fr);
    prog_refused(tool, args, tmpdir, 1, "holds no readable flight record");
    free(args);
    args = prog_fmt(TINY " --steps 1 --flight-recorder /dev/null/fr");
    prog_refused(trainer, args, tmpdir, 2, "--flight-recorder /dev/null/fr: cannot create the directory");
    free(args);
    /* the directory of the records by default names the option it came from (it named --flight-recorder) */
    args = prog_fmt(TINY " --steps 1 --save-every 1 --ckpt-dir /proc/fsc_no_dir");
    prog_refused(trainer, args, tmpdir, 2, "--ckpt-dir /proc/fsc_no_dir: cannot create the directory");
    free(args);
    /* folders that do not exist yet are made, with the folders above them (mkdir -p) */
    char *ck = prog_fmt("%s/new/runs/a", tmpdir), *tr = prog_fmt("%s/new/traces/t", tmpdir);
    args = prog_fmt(TINY " --steps 1 --save-every 1 --ckpt-dir '%s' --trace '%s'", ck, tr);
    assert_int_equal(prog_run(trainer, args, tmpdir, &o, NULL), 0);
    char *step = prog_fmt("%s/step-00000001", ck);
    struct stat sb;
    assert_int_equal(stat(step, &sb), 0);
    assert_int_equal(stat(tr, &sb), 0);
    assert_true(S_ISDIR(sb.st_mode));
    free(o), free(args), free(step), free(ck), free(tr), free(fr);
}

/* Oracle: SIGUSR1 sent without pause from the first step until the trainer exits (a monitor asking for records, or
 * mpirun passing one on as some processes finish) never ends a run that trained to the end: every run exits 0.
 * The handler was replaced by the default action (which ends the process) once the ranks had returned, so a request
 * in the last moments of a finished run killed it (exit by signal 10, at the first of the 5 runs). */
static void test_signal_at_the_end(void **state) {
    (void)state;
    char *fr = prog_fmt("%s/fr-end", tmpdir), *out = prog_fmt("%s/end.out", tmpdir);
    char *cmd = prog_fmt("exec '%s' " TINY " --world 2 --parallel fsdp --steps 200 --flight-recorder '%s' > '%s' 2>&1",
                         trainer, fr, out);
    for (int run = 0; run < 5; run++) {
        remove(out);
        pid_t job = spawn(cmd);
        int started = 0, status = 0;
        for (int k = 0; k < 60000 && !started; k++) { /* the handler is installed before the first step */
            char *text = prog_slurp(out);
            started = strstr(text, "step    1/") != NULL;
            free(text);
            if (!started && waitpid(job, &status, WNOHANG) == job) break;
            if (!started) nap_ms(1);
        }
        if (!started) fail_msg("the trainer did not start:\n%s", prog_slurp(out));
        while (waitpid(job, &status, WNOHANG) == 0) kill(job, SIGUSR1);
        char *text = prog_slurp(out);
        const char *tail = strlen(text) > 300 ? text + strlen(text) - 300 : text;
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            fail_msg("run %d: a trainer that got SIGUSR1 as it finished ended with %s %d; its output ends:\n%s", run,
                     WIFSIGNALED(status) ? "signal" : "exit status",
                     WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status), tail);
        if (!strstr(text, "step  200/200")) fail_msg("run %d did not train to the end:\n%s", run, tail);
        free(text);
    }
    free(cmd), free(out), free(fr);
}

int main(int argc, char **argv) {
    (void)argc;
    if (prog_setup(argv[0], "test_trainer_flight", "train_gpt", trainer, sizeof trainer, tmpdir, sizeof tmpdir))
        return 1;
    snprintf(tool, sizeof tool, "%.*s/ckpt_tool", (int)(strrchr(trainer, '/') - trainer), trainer);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_signal_writes_every_rank),
        cmocka_unit_test(test_signal_without_recorder),
        cmocka_unit_test(test_clean_run_and_refusal),
        cmocka_unit_test(test_signal_at_the_end),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    test_rmtree(tmpdir);
    return rc;
}
