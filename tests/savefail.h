/* Fault injection for collective saves: a full disk on the writing rank. Included by the strategies' tests
 * (test_fsdp.c, test_zero.c). The test binary's own pwrite stands in for the C library's (the library's calls
 * resolve to it): while disk_full is set, writes past the first 8 bytes of a file (the data, after the
 * safetensors header) fail with ENOSPC, as on a full disk, and are counted. */
#ifndef FSC_SAVEFAIL_H
#define FSC_SAVEFAIL_H
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdatomic.h>
#include <time.h>
#include "partest.h"

static atomic_int disk_full, writes_failed;

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) {
    static ssize_t (*real)(int, const void *, size_t, off_t);
    if (atomic_load(&disk_full) && off > 8) {
        atomic_fetch_add(&writes_failed, 1);
        errno = ENOSPC;
        return -1;
    }
    if (!real) *(void **)&real = dlsym(RTLD_NEXT, "pwrite");
    return real(fd, buf, n, off);
}

typedef struct {
    pt_run cfg;
    const char *path;
    fsc_status st[PT_MAX_WORLD];
    char msg[PT_MAX_WORLD][512];
    double secs[PT_MAX_WORLD]; /* each rank's time in fsc_engine_save_weights */
} save_run;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static fsc_status save_rank_fn(fsc_rank *r, void *arg) {
    save_run *sr = arg;
    fsc_engine *e = NULL;
    FSC_TRY(fsc_engine_create(r, &sr->cfg.cfg, &sr->cfg.po, &sr->cfg.oc, sr->cfg.seed, &e));
    double t0 = now_s();
    fsc_status s = fsc_engine_save_weights(e, sr->path);
    sr->secs[r->rank] = now_s() - t0;
    sr->st[r->rank] = s;
    snprintf(sr->msg[r->rank], sizeof sr->msg[r->rank], "%s", s == FSC_OK ? "" : fsc_last_error());
    fsc_engine_free(e);
    return s;
}

/* Oracle: when rank 0's write of the weights fails part-way (a full disk, after the header), every rank
 * returns FSC_ERR_IO with the writer's message ("No space left on device"), promptly (well inside the
 * collective timeout, which a rank left waiting in the next collective would reach), and no file or
 * temporary file is left. The same save without the fault succeeds (the neighbour), and the fault did fire. */
static void check_save_fails_on_every_rank(pt_run cfg, int world, const char *what) {
    char dir[] = "/tmp/fsc_test_savefail_XXXXXX", path[128];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
    const double timeout = 10;
    save_run sr = { .cfg = cfg, .path = path };
    fsc_cluster_opts co = { .world = world, .device = "cpu", .timeout_s = timeout };
    atomic_store(&writes_failed, 0);
    atomic_store(&disk_full, 1);
    fsc_status s = fsc_cluster_run(&co, save_rank_fn, &sr);
    atomic_store(&disk_full, 0);
    assert_int_not_equal(s, FSC_OK);
    assert_true(atomic_load(&writes_failed) > 0);
    for (int r = 0; r < world; r++) {
        if (sr.st[r] != FSC_ERR_IO || !strstr(sr.msg[r], "No space left on device") || strstr(sr.msg[r], "timed out"))
            fail_msg("%s: rank %d returned %s: %s", what, r, fsc_status_str(sr.st[r]), sr.msg[r]);
        if (sr.secs[r] > timeout / 2)
            fail_msg("%s: rank %d took %.1f s to return the failure", what, r, sr.secs[r]);
    }
    DIR *d = opendir(dir);
    assert_non_null(d);
    for (struct dirent *de; (de = readdir(d));)
        if (de->d_name[0] != '.') fail_msg("%s: the failed save left %s", what, de->d_name);
    closedir(d);
    /* the neighbour: the same save with room on the disk */
    memset(sr.st, 0, sizeof sr.st);
    assert_ok(fsc_cluster_run(&co, save_rank_fn, &sr));
    assert_int_equal(access(path, F_OK), 0);
    test_rmtree(dir);
}

#endif
