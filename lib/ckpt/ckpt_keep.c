/* Which checkpoints a run keeps and which it resumes from: the complete checkpoints of a directory newest
 * first, removal of those older than the newest K after a save (fsc_ckpt_prune), and a resume that may be
 * a run's first and that skips a damaged newest checkpoint for the one before (fsc_ckpt_try_resume), and the
 * newest checkpoint read for a reader without an engine (fsc_ckpt_latest_read: ckpt_tool, the sampler), taken again
 * when a live run removes it while it is read, and the newest sound one (fsc_ckpt_latest_sound).
 * A complete checkpoint is a directory step-NNNNNNNN holding metadata.json (fsc_ckpt_latest's rule);
 * removal goes through ck_remove_dir, so only files of the names a save writes are ever removed. A resume
 * may also be given one checkpoint (DIR/step-NNNNNNNN), as loads, the sampler and ckpt_tool are.
 *
 * Not here: writing (ckpt_save.c), loading (ckpt_load.c), leftovers of interrupted saves (fsc_ckpt_clean). */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "ckpt_impl.h"

/* The steps of dir's complete checkpoints, newest first (*steps malloc'd; *n = 0 for a missing dir); with
 * unexaminable, also those whose metadata.json cannot be examined (ck_step_complete: the readers list them, so that
 * a resume names them as damaged), else only those where it is there (the old rule, for retention: a damaged one
 * must not take a kept place from a sound one). */
static fsc_status list_of(const char *dir, int unexaminable, int64_t **steps, int *n) {
    char eb[128];
    *steps = NULL, *n = 0;
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return FSC_OK;
        return fsc_error(FSC_ERR_IO, "%s: cannot list the checkpoint directory: %s", dir,
                         strerror_r(errno, eb, sizeof eb));
    }
    int cap = 0;
    fsc_status s = FSC_OK;
    for (struct dirent *de; s == FSC_OK && (de = readdir(d)) != NULL;) {
        int64_t step;
        if (!ck_parse_step_name(de->d_name, &step) || !ck_step_present(dir, de->d_name, unexaminable)) continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            int64_t *p = realloc(*steps, (size_t)cap * sizeof *p);
            if (!p) {
                s = fsc_error(FSC_ERR_NOMEM, "%s: out of memory listing checkpoints", dir);
                break;
            }
            *steps = p;
        }
        (*steps)[(*n)++] = step;
    }
    closedir(d);
    for (int i = 1; i < *n; i++) /* newest first: insertion sort (a handful of checkpoints) */
        for (int j = i; j > 0 && (*steps)[j] > (*steps)[j - 1]; j--) {
            int64_t t = (*steps)[j];
            (*steps)[j] = (*steps)[j - 1], (*steps)[j - 1] = t;
        }
    if (s != FSC_OK) free(*steps), *steps = NULL, *n = 0;
    return s;
}

static fsc_status list_complete(const char *dir, int64_t **steps, int *n) { return list_of(dir, 1, steps, n); }

static void step_path(char *buf, size_t cap, const char *dir, int64_t step) {
    snprintf(buf, cap, "%s/step-%08lld", dir, (long long)step);
}

int ck_newest_readable_of_run(const char *dir, const char *run) {
    int64_t *steps;
    int n, same = 0;
    char path[4096];
    if (!run[0] || list_complete(dir, &steps, &n) != FSC_OK) return 0;
    for (int i = 0; i < n; i++) {
        fsc_ckpt_meta *m = NULL;
        step_path(path, sizeof path, dir, steps[i]);
        if (fsc_ckpt_meta_read(path, &m) != FSC_OK) continue; /* unreadable: damaged */
        same = !strcmp(m->run_id, run);
        fsc_ckpt_meta_free(m);
        break;
    }
    free(steps);
    return same;
}

/* Append "; " and text to report (cap bytes), as far as it holds. */
static void append(char *report, size_t cap, const char *text) {
    if (!report || !cap) return;
    size_t used = strlen(report);
    if (used + 1 < cap) snprintf(report + used, cap - used, "%s%s", used ? "; " : "", text);
}

fsc_status fsc_ckpt_prune(const char *dir, int64_t written, int keep, int *removed, char *report, size_t cap) {
    FSC_CHECK_ARG(dir);
    char path[4096], meta[4200];
    struct stat st;
    if (removed) *removed = 0;
    if (report && cap) report[0] = 0;
    if (!dir || keep < 1) return fsc_error(FSC_ERR_INVALID, "fsc_ckpt_prune: no directory, or keep %d below 1", keep);
    step_path(path, sizeof path, dir, written);
    snprintf(meta, sizeof meta, "%s/%s", path, CK_META_NAME);
    if (stat(meta, &st) != 0) /* only after a save that is complete and durable */
        return fsc_error(FSC_ERR_STATE, "%s is not a complete checkpoint: nothing removed", path);
    int64_t *steps;
    int n;
    FSC_TRY(list_of(dir, 0, &steps, &n)); /* a damaged one never takes a kept place */
    int kept = 1; /* the one written */
    for (int i = 0; i < n; i++) {
        if (steps[i] >= written) continue; /* it, and any newer one (another timeline): never removed here */
        if (kept < keep) {
            kept++;
            continue;
        }
        step_path(path, sizeof path, dir, steps[i]);
        if (ck_remove_dir(path) == FSC_OK) {
            if (removed) (*removed)++;
        } else {
            append(report, cap, fsc_last_error());
        }
    }
    free(steps);
    (void)ck_fsync_dir(dir); /* the removals are done; a failed sync of the directory loses nothing kept */
    return FSC_OK;
}

/* What dir names: 1, a checkpoint itself (it holds metadata.json); -1, a directory named like one
 * (step-NNNNNNNN, or a leftover step-N.tmp-*) that is not complete; 0, a directory of checkpoints. */
static int names_checkpoint(const char *dir) {
    char meta[4200], base[64];
    struct stat st;
    if (snprintf(meta, sizeof meta, "%s/%s", dir, CK_META_NAME) < (int)sizeof meta && lstat(meta, &st) == 0) return 1;
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && dir[b - 1] != '/') b--;
    if (n - b >= sizeof base) return 0;
    memcpy(base, dir + b, n - b);
    base[n - b] = 0;
    int64_t at;
    char *tmp = strstr(base, ".tmp-");
    if (tmp) *tmp = 0;
    return ck_parse_step_name(base, &at) ? -1 : 0;
}

/* try_resume of dir that is one checkpoint: that one, loaded (no fallback: it was asked for). */
static fsc_status resume_one(fsc_engine *e, const char *dir, int kind, int64_t *step, char *loaded, size_t lcap) {
    if (kind < 0)
        return fsc_error(FSC_ERR_IO, "%s is named like a checkpoint but is not a complete one (no %s): give the "
                         "directory of checkpoints to resume from its newest complete one", dir, CK_META_NAME);
    FSC_TRY(fsc_ckpt_load(e, dir, step));
    if (loaded && lcap) snprintf(loaded, lcap, "%s", dir);
    return FSC_OK;
}

fsc_status fsc_ckpt_try_resume(fsc_engine *e, const char *dir, int64_t *step, char *loaded, size_t lcap,
                               char *skipped, size_t scap) {
    if (step) *step = -1;
    FSC_CHECK_ARG(e);
    FSC_CHECK_ARG(dir);
    if (loaded && lcap) loaded[0] = 0;
    if (skipped && scap) skipped[0] = 0;
    if (!e || !dir) return fsc_error(FSC_ERR_INVALID, "fsc_ckpt_try_resume: no engine or no directory");
    int root = ENG(e).r->rank == 0, nskipped = 0, kind = root ? names_checkpoint(dir) : 0;
    FSC_TRY(ck_agree(e, ck_bcast_host(e, &kind, sizeof kind)));
    if (kind) return resume_one(e, dir, kind, step, loaded, lcap);
    int64_t *steps = NULL;
    int n = 0;
    fsc_status s = FSC_OK;
    if (root) {
        s = fsc_ckpt_clean(dir, NULL, NULL, 0); /* what it must leave is not complete: never listed */
        if (s == FSC_OK) s = list_complete(dir, &steps, &n);
    }
    s = ck_agree(e, s);
    if (s == FSC_OK) s = ck_agree(e, ck_bcast_host(e, &n, sizeof n));
    if (s != FSC_OK) {
        free(steps);
        return s;
    }
    char path[4096], why[5200], msg[1200], all[8192] = "";
    for (int i = 0; i < n; i++) {
        int64_t at = root ? steps[i] : 0;
        FSC_TRY(ck_agree(e, ck_bcast_host(e, &at, sizeof at)));
        step_path(path, sizeof path, dir, at);
        s = fsc_ckpt_load(e, path, step);
        if (s == FSC_OK) {
            if (loaded && lcap) snprintf(loaded, lcap, "%s", path);
            free(steps);
            return FSC_OK;
        }
        /* Damaged, or refused for another reason (another model or optimizer)? Rank 0 verifies the files and
         * tells every rank why (why[0] != 0: damaged), so that any rank's message can say it. */
        snprintf(msg, sizeof msg, "%s", fsc_last_error());
        why[0] = 0;
        if (root && fsc_ckpt_verify(path, NULL) != FSC_OK)
            snprintf(why, sizeof why, "%s skipped, damaged: %.1000s", path, fsc_last_error());
        fsc_status b = ck_agree(e, ck_bcast_host(e, why, sizeof why));
        int damaged = why[0] != 0;
        if (b != FSC_OK) {
            free(steps);
            return b;
        }
        if (!damaged) {
            free(steps);
            return fsc_error(s, "%s", msg);
        }
        nskipped++;
        why[sizeof why - 1] = 0;
        append(all, sizeof all, why);
        append(skipped, scap, why);
    }
    free(steps);
    if (nskipped) return fsc_error(FSC_ERR_FORMAT, "%s: every complete checkpoint (%d) is damaged: %s", dir, nskipped, all);
    return FSC_OK; /* none: a fresh start, e untouched */
}

/* Whether checkpoint path is gone after its read failed: removed by a live run while it was read (--keep-last's
 * retention, a save replacing its step), not damaged; a newer one is then in its directory. */
static int removed_meanwhile(const char *path) {
    struct stat st;
    return lstat(path, &st) != 0 && errno == ENOENT;
}

/* Checkpoint path at into path (cap bytes) whole, 1; or path "" and 0 when it does not fit: a cut path names another
 * directory, which a caller would open (ck_join's rule, as fsc_ckpt_latest gives a path). */
static int give_path(char *path, size_t cap, const char *at) {
    const size_t n = strlen(at);
    if (n >= cap) return path[0] = 0, 0;
    memcpy(path, at, n + 1);
    return 1;
}

fsc_status fsc_ckpt_latest_read(const char *dir, int flags, char *path, size_t cap, int64_t *step, fsc_ckpt_meta **meta,
                                char *skipped, size_t scap) {
    if (meta) *meta = NULL;
    FSC_CHECK_ARG(dir);
    FSC_CHECK_ARG(path);
    FSC_CHECK_ARG(step);
    if (!cap) return fsc_error(FSC_ERR_INVALID, "fsc_ckpt_latest_read: cap is 0");
    *step = -1, path[0] = 0;
    if (skipped && scap) skipped[0] = 0;
    int64_t *steps = NULL;
    int n = 0, gone = 0;
    char at[4096], all[8192];
    /* A checkpoint whose read failed and whose directory is gone was not damaged but removed, and a newer one was
     * written: the directory is listed again (a bounded number of times: a run saving faster than one is read) */
    for (int round = 0; round == 0 || gone; round++) {
        FSC_TRY(list_complete(dir, &steps, &n));
        gone = 0, all[0] = 0;
        if (skipped && scap) skipped[0] = 0;
        for (int i = 0; i < n && !gone; i++) {
            step_path(at, sizeof at, dir, steps[i]);
            const int64_t steps_at = steps[i];
            fsc_ckpt_meta *m = NULL;
            const fsc_status s = flags & FSC_CKPT_READ_VERIFY ? fsc_ckpt_verify(at, meta ? &m : NULL)
                                                                : fsc_ckpt_meta_read(at, &m);
            if (s == FSC_OK) {
                free(steps);
                if (!give_path(path, cap, at)) {
                    fsc_ckpt_meta_free(m);
                    return fsc_error(FSC_ERR_INVALID, "fsc_ckpt_latest_read: checkpoint path %s is longer than the %zu "
                                     "bytes of path", at, cap);
                }
                *step = steps_at;
                if (meta) *meta = m;
                else fsc_ckpt_meta_free(m);
                return FSC_OK;
            }
            if (round < 16 && removed_meanwhile(at)) {
                gone = 1;
                continue;
            }
            if (!(flags & FSC_CKPT_READ_FALLBACK)) { /* its own error, path naming the checkpoint (when it fits) */
                give_path(path, cap, at);
                *step = steps[i];
                free(steps);
                return s;
            }
            char why[5200];
            snprintf(why, sizeof why, "%s skipped, damaged: %.1000s", at, fsc_last_error());
            append(all, sizeof all, why);
            append(skipped, scap, why);
        }
        free(steps);
        steps = NULL;
    }
    if (n) return fsc_error(FSC_ERR_FORMAT, "%s: every complete checkpoint (%d) is damaged: %s", dir, n, all);
    return FSC_OK;
}

fsc_status fsc_ckpt_latest_sound(const char *dir, char *path, size_t cap, int64_t *step, char *skipped, size_t scap) {
    FSC_CHECK_ARG(dir);
    FSC_CHECK_ARG(path);
    FSC_CHECK_ARG(step);
    if (!cap) return fsc_error(FSC_ERR_INVALID, "fsc_ckpt_latest_sound: cap is 0");
    const int flags = FSC_CKPT_READ_VERIFY | FSC_CKPT_READ_FALLBACK;
    return fsc_ckpt_latest_read(dir, flags, path, cap, step, NULL, skipped, scap);
}
