/* Tests of lib/ckpt/ckpt_lock.c: one writer per checkpoint directory (fsc_ckpt_lock), on engines of the small
 * GPT (partest.h) on 2 simulated ranks.
 * Oracles: while a lock is held, a second fsc_ckpt_lock of the directory fails with FSC_ERR_STATE on every rank,
 * naming the holder's pid (this process, or a child process that holds it), and succeeds once the holder has
 * unlocked or been killed (the kernel releases it); a process holding only the shared lock (a rank of a killed
 * job still exiting) keeps a new run out too; a .lock that is a symbolic link, a FIFO or a directory is refused
 * (no hang) and nothing outside is touched; fsc_ckpt_clean leaves a live run's temporary directories alone. */
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/file.h>
#include <sys/wait.h>
#include "ckpttest.h"

#define WORLD 2

typedef struct {
    const char *dir;
    int twice;                    /* lock again while holding it, then after unlocking */
    fsc_status got[WORLD];        /* the (first or second) lock's verdict per rank */
    char msg[WORLD][600];
    char report[WORLD][700];      /* the refusal as the trainer and the cluster report it (--ckpt-dir, the rank) */
    fsc_status relock;            /* twice: the lock after the unlock, rank 0 */
} lock_job;

static fsc_status lock_fn(fsc_rank *r, void *arg) {
    lock_job *j = arg;
    pt_run run = pt_make(WORLD, FSC_PAR_DDP);
    fsc_engine *e = NULL;
    FSC_TRY(fsc_engine_create(r, &run.cfg, &run.po, &run.oc, run.seed, &e));
    fsc_ckpt_dir_lock *a = NULL, *b = NULL;
    fsc_status s = fsc_ckpt_lock(e, j->dir, &a);
    if (s == FSC_OK && j->twice) s = fsc_ckpt_lock(e, j->dir, &b);
    j->got[r->rank] = s;
    snprintf(j->msg[r->rank], sizeof j->msg[0], "%s", s == FSC_OK ? "" : fsc_last_error());
    if (s != FSC_OK) {
        fsc_error_prefix(s, "--ckpt-dir");
        fsc_error_rank(s, "rank %d", r->rank);
    }
    snprintf(j->report[r->rank], sizeof j->report[0], "%s", s == FSC_OK ? "" : fsc_last_error());
    if (j->twice && a) {
        fsc_ckpt_unlock(a);
        a = NULL;
        fsc_status t = fsc_ckpt_lock(e, j->dir, &a);
        if (r->rank == 0) j->relock = t;
    }
    fsc_ckpt_unlock(a);
    fsc_ckpt_unlock(b);
    fsc_engine_free(e);
    return FSC_OK;
}

static void run_lock(lock_job *j) {
    fsc_cluster_opts co = { .world = WORLD, .device = "cpu", .timeout_s = 30 };
    assert_ok(fsc_cluster_run(&co, lock_fn, j));
}

/* Every rank refused with FSC_ERR_STATE, the message naming pid `holder`; reported by any rank with the trainer's
 * prefix, the failing rank is named once, first (it was "rank 1: --ckpt-dir: rank 0: ..."). */
static void assert_refused(const lock_job *j, long holder) {
    char pid[64];
    snprintf(pid, sizeof pid, "held by pid %ld on host", holder);
    for (int r = 0; r < WORLD; r++) {
        if (j->got[r] != FSC_ERR_STATE || !strstr(j->msg[r], "is in use by another run") || !strstr(j->msg[r], pid))
            fail_msg("rank %d: status %d, message \"%s\" (expected \"%s\")", r, j->got[r], j->msg[r], pid);
        if (strncmp(j->report[r], "rank 0: --ckpt-dir: ", 20) != 0 || strstr(j->report[r] + 20, "rank "))
            fail_msg("rank %d reports \"%s\"", r, j->report[r]);
    }
}

/* In this process: the second lock is refused, naming this process; after the unlock it is taken again. */
static void test_lock_twice(void **state) {
    (void)state;
    char *dir = ct_tmpdir();
    lock_job j = { .dir = dir, .twice = 1 };
    run_lock(&j);
    assert_refused(&j, (long)getpid());
    assert_int_equal(j.relock, FSC_OK);
    char p[700];
    snprintf(p, sizeof p, "%s/.lock", dir);
    size_t n;
    char *text = ct_slurp(p, &n), want[64];
    snprintf(want, sizeof want, "pid %ld on host ", (long)getpid());
    if (strncmp(text, want, strlen(want)) != 0) fail_msg(".lock holds \"%s\"", text);
    free(text);
    ct_rmtree(dir);
}

/* A child holds the lock (mode: fsc_ckpt_lock on one rank, or only a shared flock as a rank of a killed job
 * still exiting) until killed; ready is written once it holds it. */
static pid_t start_holder(const char *dir, int shared_only) {
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t parent = getpid(), pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* a failed test does not leave it holding */
        if (getppid() != parent) _exit(1);
        close(ready[0]);
        char p[700];
        snprintf(p, sizeof p, "%s/.lock", dir);
        int fd = open(p, O_RDWR | O_CREAT, 0666);
        if (fd < 0 || flock(fd, shared_only ? LOCK_SH : LOCK_EX) != 0) _exit(1);
        if (!shared_only) {
            char line[64];
            int n = snprintf(line, sizeof line, "pid %ld on host h since then (1 rank)\n", (long)getpid());
            if (ftruncate(fd, 0) != 0 || pwrite(fd, line, (size_t)n, 0) != n) _exit(1);
        }
        if (write(ready[1], "x", 1) != 1) _exit(1);
        for (;;) pause();
    }
    close(ready[1]);
    char c;
    assert_int_equal(read(ready[0], &c, 1), 1);
    close(ready[0]);
    return pid;
}

static void kill_holder(pid_t pid) {
    int st;
    kill(pid, SIGKILL);
    assert_int_equal(waitpid(pid, &st, 0), pid);
}

/* Another process holds it: refused on every rank naming that process; once it is killed, taken. */
static void test_lock_other_process(void **state) {
    (void)state;
    char *dir = ct_tmpdir();
    pid_t holder = start_holder(dir, 0);
    lock_job j = { .dir = dir };
    run_lock(&j);
    assert_refused(&j, (long)holder);
    kill_holder(holder);
    lock_job k = { .dir = dir };
    run_lock(&k);
    assert_int_equal(k.got[0], FSC_OK);
    assert_int_equal(k.got[1], FSC_OK);
    ct_rmtree(dir);
}

/* A process holding the shared lock only (rank 1 of a killed job, still saving) keeps the next run out. */
static void test_lock_lingering_rank(void **state) {
    (void)state;
    char *dir = ct_tmpdir();
    lock_job first = { .dir = dir };
    run_lock(&first); /* the killed job's rank 0 wrote its name and is gone */
    assert_int_equal(first.got[0], FSC_OK);
    pid_t rank1 = start_holder(dir, 1);
    lock_job j = { .dir = dir };
    run_lock(&j);
    assert_refused(&j, (long)getpid());
    kill_holder(rank1);
    lock_job k = { .dir = dir };
    run_lock(&k);
    assert_int_equal(k.got[0], FSC_OK);
    ct_rmtree(dir);
}

/* fsc_ckpt_clean while another process holds the lock (a live run, whose .tmp- directories are its saves in
 * progress) removes nothing and says why; once that run is gone, the leftover is removed. Before, a resume from
 * a live run's directory removed the files of its save in progress. */
static void test_clean_spares_live_run(void **state) {
    (void)state;
    char *dir = ct_tmpdir(), p[700], rep[512];
    snprintf(p, sizeof p, "%s/step-00000003.tmp-abcdef", dir);
    assert_int_equal(mkdir(p, 0777), 0);
    pid_t holder = start_holder(dir, 0);
    int left = -1;
    assert_ok(fsc_ckpt_clean(dir, &left, rep, sizeof rep));
    struct stat st;
    assert_int_equal(stat(p, &st), 0);
    if (!strstr(rep, "is in use by another run")) fail_msg("report: %s", rep);
    kill_holder(holder);
    assert_ok(fsc_ckpt_clean(dir, &left, rep, sizeof rep));
    assert_int_equal(left, 0);
    assert_int_equal(stat(p, &st), -1);
    ct_rmtree(dir);
}

/* .lock that is no regular file: refused on every rank, without waiting on a FIFO or following a link. */
static void test_lock_not_a_file(void **state) {
    (void)state;
    char *dir = ct_tmpdir(), p[700], target[700];
    snprintf(p, sizeof p, "%s/.lock", dir);
    snprintf(target, sizeof target, "%s/elsewhere", dir);
    for (int k = 0; k < 3; k++) {
        if (k == 0) assert_int_equal(mkfifo(p, 0666), 0);
        if (k == 1) assert_int_equal(mkdir(p, 0777), 0);
        if (k == 2) assert_int_equal(symlink(target, p), 0);
        lock_job j = { .dir = dir };
        run_lock(&j);
        for (int r = 0; r < WORLD; r++)
            if (j.got[r] != FSC_ERR_IO || !strstr(j.msg[r], ".lock"))
                fail_msg("case %d, rank %d: status %d, message \"%s\"", k, r, j.got[r], j.msg[r]);
        if (k == 1) rmdir(p);
        else unlink(p);
    }
    struct stat st;
    assert_int_equal(lstat(target, &st), -1); /* the link's target was not created */
    ct_rmtree(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lock_twice),
        cmocka_unit_test(test_lock_other_process),
        cmocka_unit_test(test_lock_lingering_rank),
        cmocka_unit_test(test_lock_not_a_file),
        cmocka_unit_test(test_clean_spares_live_run),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
