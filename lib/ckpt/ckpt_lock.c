/* One writer per checkpoint directory (fsc_ckpt_lock, ckpt.h): a lock on DIR/.lock that the kernel releases
 * when its holder dies, so a second run into the same DIR is refused before it writes anything, and a run
 * restarted after a kill is refused while processes of the killed one still live.
 *
 * The protocol, on flock(2) locks (each open file description its own holder, so ranks that are threads of
 * one process and ranks that are processes behave alike):
 *   1. world rank 0 takes the exclusive lock without waiting: it fails while any process of any run holds
 *      the file, in either mode. It writes who holds it ("pid P on host H since T") into the file.
 *   2. it turns its lock into a shared one, and every rank in another process than rank 0's takes a shared
 *      lock too; from then on rank 0's step 1 fails for every other run until the last of these processes
 *      has closed the file or died.
 * Every step ends in an agreement, so every rank returns the same verdict and message. A file system without
 * locks gives FSC_ERR_UNSUPPORTED on every rank. The file stays when the run ends (removing it would let two
 * runs lock two different files of one name).
 *
 * ck_dir_in_use tells fsc_ckpt_clean that another live run holds DIR, whose .tmp- directories are then saves in
 * progress, not leftovers.
 *
 * Not here: which run's checkpoints a DIR holds (run ids: ckpt_save.c), what a save writes. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "ckpt_impl.h"

#define LOCK_NAME ".lock"

struct fsc_ckpt_dir_lock {
    int fd;
};

static int unsupported(int err) { return err == ENOLCK || err == EOPNOTSUPP || err == ENOSYS || err == EINVAL; }

/* Open (creating it, and dir one level) dir/.lock, a regular file, into *fd. */
static fsc_status open_lock(const char *dir, const char *path, int *fd) {
    char eb[128];
    *fd = -1;
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return fsc_error(FSC_ERR_IO, "%s: cannot create the checkpoint directory: %s", dir, strerror_r(errno, eb, sizeof eb));
    int f = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0666);
    if (f < 0) return fsc_error(FSC_ERR_IO, "%s: cannot open the lock file: %s", path, strerror_r(errno, eb, sizeof eb));
    struct stat st;
    if (fstat(f, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(f);
        return fsc_error(FSC_ERR_IO, "%s: not a regular file: it cannot lock the directory", path);
    }
    *fd = f;
    return FSC_OK;
}

/* The holder's line of the lock file (printable characters up to the first newline) into buf. */
static void read_holder(int fd, char *buf, size_t cap) {
    ssize_t n = pread(fd, buf, cap - 1, 0);
    size_t k = 0;
    for (ssize_t i = 0; i < n && buf[i] != '\n'; i++) buf[k++] = buf[i] >= 32 && buf[i] < 127 ? buf[i] : '?';
    buf[k] = 0;
    if (!k) snprintf(buf, cap, "a process that has not written its name yet");
}

/* The failed lock's message: who holds it (in use), or that the file system has no locks. */
static fsc_status refused(int err, int fd, const char *dir, const char *path) {
    char eb[128], who[200];
    if (unsupported(err))
        return fsc_error(FSC_ERR_UNSUPPORTED, "%s: cannot lock it: the file system does not support locks (%s): "
                         "nothing keeps a second run from writing there", path, strerror_r(err, eb, sizeof eb));
    if (err != EWOULDBLOCK)
        return fsc_error(FSC_ERR_IO, "%s: cannot lock it: %s", path, strerror_r(err, eb, sizeof eb));
    read_holder(fd, who, sizeof who);
    return fsc_error(FSC_ERR_STATE, "%s is in use by another run: its lock file %s is held by %s (or by that "
                     "run's processes still exiting); two runs must not write into one checkpoint directory: wait "
                     "until that one has ended, or choose another directory", dir, LOCK_NAME, who);
}

/* "pid P on host H" of this process, as lock_first writes it. */
static void my_name(char *buf, size_t cap) {
    char host[128] = "?";
    gethostname(host, sizeof host);
    host[sizeof host - 1] = 0;
    snprintf(buf, cap, "pid %ld on host %s since ", (long)getpid(), host);
}

/* Rank 0: the exclusive lock, the holder's line, then the shared lock. */
static fsc_status lock_first(const char *dir, const char *path, int world, int *fd) {
    FSC_TRY(open_lock(dir, path, fd));
    if (flock(*fd, LOCK_EX | LOCK_NB) != 0) return refused(errno, *fd, dir, path);
    char me[200], when[64] = "?", line[400], eb[128];
    my_name(me, sizeof me);
    struct tm tm;
    time_t now = time(NULL);
    if (gmtime_r(&now, &tm)) strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
    int n = snprintf(line, sizeof line, "%s%s (%d rank%s)\n", me, when, world, world == 1 ? "" : "s");
    if (ftruncate(*fd, 0) != 0 || pwrite(*fd, line, (size_t)n, 0) != n)
        return fsc_error(FSC_ERR_IO, "%s: cannot write the lock file: %s", path, strerror_r(errno, eb, sizeof eb));
    /* not atomic: a run that takes the exclusive lock in between makes this one fail, never both go on */
    if (flock(*fd, LOCK_SH | LOCK_NB) != 0) return refused(errno, *fd, dir, path);
    return FSC_OK;
}

int ck_dir_in_use(const char *dir, char *who, size_t cap) {
    char path[4096], me[200];
    if (ck_join(path, sizeof path, dir, LOCK_NAME) != FSC_OK) return 0;
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC); /* no file: no run ever locked dir */
    struct stat st;
    if (fd < 0) return 0;
    int held = 0;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
        read_holder(fd, who, cap);
        my_name(me, sizeof me);
        /* named by this process: its own lock, not tried (where flock is emulated by per-process fcntl locks, as
         * on NFS, trying and closing would release it) */
        held = strncmp(who, me, strlen(me)) != 0 && flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    }
    close(fd); /* also drops the exclusive lock if it was taken: nobody held it */
    return held;
}

fsc_status fsc_ckpt_lock(fsc_engine *e, const char *dir, fsc_ckpt_dir_lock **out) {
    if (out) *out = NULL;
    FSC_CHECK_ARG(e);
    FSC_CHECK_ARG(dir);
    FSC_CHECK_ARG(out);
    if (!*dir) return fsc_error(FSC_ERR_INVALID, "fsc_ckpt_lock: dir is empty");
    char path[4096];
    FSC_TRY(ck_join(path, sizeof path, dir, LOCK_NAME));
    const int root = ENG(e).r->rank == 0;
    int fd = -1;
    long pid0 = (long)getpid(); /* rank 0's process: its other ranks need no lock of their own */
    fsc_status s = root ? lock_first(dir, path, fsc_comm_size(ENG(e).r->comm), &fd) : FSC_OK;
    s = ck_agree(e, s);
    if (s == FSC_OK) s = ck_agree(e, ck_bcast_host(e, &pid0, sizeof pid0));
    if (s == FSC_OK && !root && pid0 != (long)getpid()) {
        s = open_lock(dir, path, &fd);
        if (s == FSC_OK && flock(fd, LOCK_SH | LOCK_NB) != 0) s = refused(errno, fd, dir, path);
    }
    s = ck_agree(e, s);
    fsc_ckpt_dir_lock *l = s == FSC_OK ? malloc(sizeof *l) : NULL;
    s = ck_agree(e, s != FSC_OK || l ? s : fsc_error(FSC_ERR_NOMEM, "fsc_ckpt_lock: out of memory"));
    if (s != FSC_OK) {
        free(l);
        if (fd >= 0) close(fd);
        return s;
    }
    l->fd = fd;
    *out = l;
    return FSC_OK;
}

void fsc_ckpt_unlock(fsc_ckpt_dir_lock *l) {
    if (!l) return;
    if (l->fd >= 0) close(l->fd);
    free(l);
}
