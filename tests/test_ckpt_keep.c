/* Tests of lib/ckpt/ckpt_keep.c: retention (fsc_ckpt_prune) and the resume that may be a run's first and
 * skips damaged checkpoints (fsc_ckpt_try_resume), on real checkpoints of the small GPT (ckpttest.h) on 2
 * simulated FSDP ranks, the save after such a resume (claim_dir in ckpt_save.c), and the readers without an engine
 * (fsc_ckpt_latest_read, fsc_ckpt_latest_sound). */
#include <fcntl.h>
#include <pthread.h>
#include <time.h>
#include <cjson/cJSON.h>
#include "ckpttest.h"

/* DIR with complete checkpoints of steps 1 .. n of one run (each resumed from the one before). */
static char *make_run(int n) {
    char *dir = ct_tmpdir();
    for (int k = 1; k <= n; k++) {
        ct_job j = ct_fsdp(2, FSC_SHARD_FULL);
        j.from = k - 1, j.to = k;
        j.resume = k > 1 ? dir : NULL;
        j.save_dir = dir;
        ct_run(&j);
        ct_free(&j);
    }
    return dir;
}

static int exists(const char *dir, const char *name) {
    char p[700];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    struct stat st;
    return lstat(p, &st) == 0;
}

static void touch(const char *dir, const char *name, const char *text) {
    char p[700];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void make_dir(const char *dir, const char *name) {
    char p[700];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    assert_int_equal(mkdir(p, 0700), 0);
}

/* Oracle: keeping K after writing step w removes exactly the complete checkpoints older than w beyond the
 * newest K - 1 of them; never step w, a newer one, an incomplete step directory, a leftover of an
 * interrupted save, or a directory holding a file a save does not write (reported, and left whole: it still
 * verifies); a step w that is not complete removes nothing. */
/* Entries of dir whose name holds what a removal renames a checkpoint to while it empties it (ckpt_fs.c). */
static int removing_left(const char *dir) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) n += strstr(e->d_name, ".tmp-removing-") != NULL;
    closedir(d);
    return n;
}

static void test_prune(void **state) {
    (void)state;
    char *dir = make_run(5);
    make_dir(dir, "step-00000000");            /* incomplete: no metadata.json */
    touch(dir, "step-00000000/rank-00000-of-00002.safetensors", "x");
    make_dir(dir, "step-00000002.tmp-abcdef"); /* an interrupted save */
    touch(dir, "step-00000001/notes.txt", "mine");
    make_dir(dir, "step-00000009");            /* newer than the one written, complete */
    touch(dir, "step-00000009/metadata.json", "{}");
    int removed = -1;
    char rep[1024];
    assert_err(fsc_ckpt_prune(dir, 7, 2, &removed, rep, sizeof rep), FSC_ERR_STATE, "step-00000007 is not a complete checkpoint");
    assert_int_equal(removed, 0);
    assert_true(exists(dir, "step-00000001") && exists(dir, "step-00000002") && exists(dir, "step-00000003"));
    assert_ok(fsc_ckpt_prune(dir, 4, 2, &removed, rep, sizeof rep)); /* keeps 4 and 3 */
    assert_int_equal(removed, 1);                                   /* 2; 1 holds notes.txt */
    assert_non_null(strstr(rep, "step-00000001: left in place: it holds notes.txt"));
    assert_int_equal(removing_left(dir), 0); /* left in place under its own name */
    assert_false(exists(dir, "step-00000002"));
    assert_true(exists(dir, "step-00000001/notes.txt") && exists(dir, "step-00000003") && exists(dir, "step-00000004"));
    char one[700]; /* "left in place" is true: the checkpoint is whole (before, its files were removed) */
    ct_step_path(one, sizeof one, dir, 1);
    assert_ok(fsc_ckpt_verify(one, NULL));
    assert_true(exists(dir, "step-00000005") && exists(dir, "step-00000009")); /* newer than 4 */
    assert_ok(fsc_ckpt_prune(dir, 5, 1, &removed, rep, sizeof rep));
    assert_int_equal(removed, 2); /* 4 and 3 */
    assert_false(exists(dir, "step-00000003") || exists(dir, "step-00000004"));
    assert_int_equal(removing_left(dir), 0); /* each took a leftover's name while it went, and is gone whole */
    assert_true(exists(dir, "step-00000005") && exists(dir, "step-00000009"));
    assert_true(exists(dir, "step-00000000/rank-00000-of-00002.safetensors") && exists(dir, "step-00000002.tmp-abcdef"));
    char p[700];
    ct_step_path(p, sizeof p, dir, 5);
    assert_ok(fsc_ckpt_verify(p, NULL)); /* the one kept is intact */
    assert_err(fsc_ckpt_prune(dir, 5, 0, NULL, NULL, 0), FSC_ERR_INVALID, "keep 0");
    ct_rmtree(dir);
}

/* A job that resumes with fsc_ckpt_try_resume from dir on 2 FSDP ranks, then optionally saves. */
typedef struct {
    ct_job j;
    const char *dir;
    int64_t step;
    char loaded[4096], skipped[8192];
    const char *save_dir;
    int64_t save_step;
} tr_job;

static fsc_status tr_rank_fn(fsc_rank *r, void *arg) {
    tr_job *t = arg;
    fsc_engine *e = NULL;
    FSC_TRY(fsc_engine_create(r, &t->j.run.cfg, &t->j.run.po, &t->j.run.oc, t->j.run.seed, &e));
    int64_t step = -2;
    char loaded[4096], skipped[8192];
    fsc_status s = fsc_ckpt_try_resume(e, t->dir, &step, loaded, sizeof loaded, skipped, sizeof skipped);
    if (s == FSC_OK) s = fsc_engine_full_params(e, r->rank == 0 ? t->j.params : NULL);
    for (int k = 0; k < 2 && s == FSC_OK && step >= 0; k++) /* AdamW's m and v */
        s = fsc_ckpt_full_state(e, k, r->rank == 0 ? t->j.state[k] : NULL);
    if (s == FSC_OK && t->save_dir) s = fsc_ckpt_save(e, t->save_dir, t->save_step, NULL);
    if (r->rank == 0) {
        t->step = step;
        snprintf(t->loaded, sizeof t->loaded, "%s", loaded);
        snprintf(t->skipped, sizeof t->skipped, "%s", skipped);
    }
    fsc_engine_free(e);
    return s;
}

static fsc_status tr_try(tr_job *t, const char *dir) {
    t->dir = dir;
    size_t P = fsc_gpt_num_params(&t->j.run.cfg);
    ct_free(&t->j);
    t->j.params = calloc(P, sizeof(float));
    t->j.state[0] = calloc(P, sizeof(float));
    t->j.state[1] = calloc(P, sizeof(float));
    fsc_cluster_opts co = { .world = 2, .device = "cpu", .timeout_s = 30 };
    return fsc_cluster_run(&co, tr_rank_fn, t);
}

static tr_job tr_make(void) {
    tr_job t;
    memset(&t, 0, sizeof t);
    t.j = ct_fsdp(2, FSC_SHARD_FULL);
    return t;
}

/* Checkpoint `path` loaded directly (the oracle of what a resume loads): its parameters and optimizer state
 * equal the resumed engine's, bit for bit. */
static void assert_loaded(const tr_job *t, const char *path, const char *what) {
    ct_job j = ct_fsdp(2, FSC_SHARD_FULL);
    j.load = path;
    ct_run(&j);
    ct_assert_state_equal(&t->j, &j, what);
    ct_free(&j);
}

/* Flip one byte in the middle of file name of checkpoint dir/step. */
static void corrupt(const char *dir, int64_t step, const char *name) {
    char p[800];
    snprintf(p, sizeof p, "%s/step-%08lld/%s", dir, (long long)step, name);
    int fd = open(p, O_RDWR);
    assert_true(fd >= 0);
    off_t n = lseek(fd, 0, SEEK_END);
    unsigned char c;
    assert_int_equal(pread(fd, &c, 1, n - 5), 1);
    c ^= 0x40;
    assert_int_equal(pwrite(fd, &c, 1, n - 5), 1);
    close(fd);
}

/* Oracle: an absent or empty DIR is a fresh start (step -1, nothing loaded, the engine's parameters those
 * of a fresh engine of the seed, bit for bit); a sound newest checkpoint is loaded (parameters and AdamW
 * state equal a direct load of it). */
static void test_try_resume_fresh_and_newest(void **state) {
    (void)state;
    char *dir = make_run(2), absent[700];
    snprintf(absent, sizeof absent, "%s/absent", dir);
    char *empty = ct_tmpdir();
    ct_job fresh = ct_fsdp(2, FSC_SHARD_FULL); /* no steps: the initial parameters */
    ct_run(&fresh);
    size_t P = fsc_gpt_num_params(&fresh.run.cfg);
    const char *none[] = {absent, empty};
    for (int k = 0; k < 2; k++) {
        tr_job t = tr_make();
        assert_ok(tr_try(&t, none[k]));
        assert_int_equal(t.step, -1);
        assert_string_equal(t.loaded, "");
        assert_string_equal(t.skipped, "");
        assert_bits_equal(t.j.params, fresh.params, P, "a fresh start");
        ct_free(&t.j);
    }
    tr_job t = tr_make();
    assert_ok(tr_try(&t, dir));
    assert_int_equal(t.step, 2);
    assert_non_null(strstr(t.loaded, "step-00000002"));
    char p[700];
    ct_step_path(p, sizeof p, dir, 2);
    assert_loaded(&t, p, "resumed from step 2");
    ct_free(&t.j);
    ct_free(&fresh);
    ct_rmtree(empty);
    ct_rmtree(dir);
}

/* Oracle: given one checkpoint (DIR/step-00000002, DIR holding a newer step 3), that one is loaded (equal to a
 * direct load of it), also with a trailing slash; a directory named like a checkpoint without metadata.json is
 * refused (FSC_ERR_IO naming it), never taken for an empty DIR and a fresh start. Before, both were a fresh
 * start at step -1. */
static void test_try_resume_one_checkpoint(void **state) {
    (void)state;
    char *dir = make_run(3), p[700], q[720];
    ct_step_path(p, sizeof p, dir, 2);
    snprintf(q, sizeof q, "%s/", p);
    const char *given[] = {p, q};
    for (int k = 0; k < 2; k++) {
        tr_job t = tr_make();
        assert_ok(tr_try(&t, given[k]));
        assert_int_equal(t.step, 2);
        assert_string_equal(t.loaded, given[k]);
        assert_loaded(&t, p, "resumed from the step given");
        ct_free(&t.j);
    }
    ct_step_path(p, sizeof p, dir, 9);
    assert_int_equal(mkdir(p, 0700), 0);
    tr_job t = tr_make();
    assert_err(tr_try(&t, p), FSC_ERR_IO, "step-00000009 is named like a checkpoint but is not a complete one");
    ct_free(&t.j);
    ct_rmtree(dir);
}

/* Oracle: a damaged newest checkpoint (a corrupted shard; then also unreadable metadata in the one before)
 * is skipped with a message naming it and why, and the newest sound one is loaded (parameters and
 * optimizer state equal a direct load, though the failed load may have written part of the state); every
 * one damaged is FSC_ERR_FORMAT naming the count; a sound checkpoint of another model is that refusal, with
 * nothing skipped. */
static void test_try_resume_skips_damaged(void **state) {
    (void)state;
    char *dir = make_run(3), p[700];
    corrupt(dir, 3, "rank-00001-of-00002.safetensors");
    tr_job t = tr_make();
    assert_ok(tr_try(&t, dir));
    assert_int_equal(t.step, 2);
    if (!strstr(t.skipped, "step-00000003 skipped, damaged") || !strstr(t.skipped, "checksum"))
        fail_msg("skipped: \"%s\"", t.skipped);
    ct_step_path(p, sizeof p, dir, 2); /* whatever the failed load of step 3 wrote is step 2's now */
    assert_loaded(&t, p, "resumed from step 2 past a corrupted step 3");
    touch(dir, "step-00000002/metadata.json", "not json");
    assert_ok(tr_try(&t, dir));
    assert_int_equal(t.step, 1);
    ct_step_path(p, sizeof p, dir, 1);
    assert_loaded(&t, p, "resumed from step 1");
    assert_non_null(strstr(t.skipped, "step-00000003 skipped"));
    assert_non_null(strstr(t.skipped, "step-00000002 skipped"));
    corrupt(dir, 1, "metadata.json");
    assert_err(tr_try(&t, dir), FSC_ERR_FORMAT, "every complete checkpoint (3) is damaged");
    ct_free(&t.j);
    ct_rmtree(dir);
    /* another model: refused as such, nothing skipped */
    dir = make_run(1);
    tr_job o = tr_make();
    o.j.run.cfg.dim = 32;
    fsc_status s = tr_try(&o, dir);
    if (s == FSC_OK || strstr(fsc_last_error(), "damaged")) fail_msg("another model: %s", fsc_last_error());
    assert_string_equal(o.skipped, "");
    ct_free(&o.j);
    ct_rmtree(dir);
}

/* Oracle: a newest checkpoint whose metadata records a GPT of more blocks than its tensors hold (an edit with its
 * checksum recomputed) is damaged, as ckpt_tool verify says: resume and the reader's fallback skip it naming the
 * missing tensor (a resume stopped there with "malformed data"). */
static void test_model_record_damaged(void **state) {
    (void)state;
    char *dir = make_run(3), meta[800], path[700], skipped[4096];
    snprintf(meta, sizeof meta, "%s/step-00000003/metadata.json", dir);
    size_t n;
    char *text = ct_slurp(meta, &n);
    cJSON *root = cJSON_ParseWithLength(text, n);
    assert_non_null(root);
    cJSON *model = cJSON_GetObjectItem(root, "model");
    cJSON_SetNumberValue(cJSON_GetObjectItem(model, "layers"), cJSON_GetObjectItem(model, "layers")->valuedouble + 1);
    char *out = cJSON_Print(root);
    test_reseal_metadata(out);
    FILE *f = fopen(meta, "w");
    assert_non_null(f);
    fputs(out, f);
    fclose(f);
    int64_t step = 0;
    assert_ok(fsc_ckpt_latest_sound(dir, path, sizeof path, &step, skipped, sizeof skipped));
    assert_int_equal(step, 2);
    if (!strstr(skipped, "step-00000003 skipped, damaged") || !strstr(skipped, "has no tensor"))
        fail_msg("skipped: \"%s\"", skipped);
    tr_job t = tr_make();
    assert_ok(tr_try(&t, dir));
    assert_int_equal(t.step, 2);
    if (!strstr(t.skipped, "step-00000003 skipped, damaged")) fail_msg("resume skipped: \"%s\"", t.skipped);
    ct_free(&t.j);
    free(out), free(text);
    cJSON_Delete(root);
    ct_rmtree(dir);
}

/* Oracle: fsc_ckpt_latest_sound (a reader's fallback, without an engine) gives the newest checkpoint that
 * verifies, naming each damaged newer one skipped and why, as try_resume does; none is step -1 and ""; every one
 * damaged is FSC_ERR_FORMAT naming the count; nothing in the directory changes (a leftover temporary stays). */
static void test_latest_sound(void **state) {
    (void)state;
    char *dir = make_run(3), path[700], skipped[4096];
    int64_t step = 0;
    assert_ok(fsc_ckpt_latest_sound(dir, path, sizeof path, &step, skipped, sizeof skipped));
    assert_int_equal(step, 3);
    assert_non_null(strstr(path, "step-00000003"));
    assert_string_equal(skipped, "");
    corrupt(dir, 3, "rank-00001-of-00002.safetensors");
    touch(dir, "step-00000002/metadata.json", "not json");
    char tmp[800];
    snprintf(tmp, sizeof tmp, "%s/step-00000004.tmp-1", dir);
    assert_int_equal(mkdir(tmp, 0700), 0);
    assert_ok(fsc_ckpt_latest_sound(dir, path, sizeof path, &step, skipped, sizeof skipped));
    assert_int_equal(step, 1);
    assert_non_null(strstr(path, "step-00000001"));
    if (!strstr(skipped, "step-00000003 skipped, damaged") || !strstr(skipped, "checksum") ||
        !strstr(skipped, "step-00000002 skipped, damaged"))
        fail_msg("skipped: \"%s\"", skipped);
    assert_int_equal(access(tmp, F_OK), 0); /* a reader removes nothing */
    corrupt(dir, 1, "metadata.json");
    assert_err(fsc_ckpt_latest_sound(dir, path, sizeof path, &step, NULL, 0), FSC_ERR_FORMAT,
               "every complete checkpoint (3) is damaged");
    char *empty = ct_tmpdir();
    assert_ok(fsc_ckpt_latest_sound(empty, path, sizeof path, &step, skipped, sizeof skipped));
    assert_int_equal(step, -1);
    assert_string_equal(path, "");
    ct_rmtree(empty);
    ct_rmtree(dir);
}

/* A live run removes its older checkpoints while a reader reads them (--keep-last's retention renames one away, then
 * removes it): fsc_ckpt_latest_sound named a checkpoint that vanished while it was verified "skipped, damaged" (the
 * sampler, reading a training run's directory, said so and sampled an older one, or failed with "every complete
 * checkpoint (1) is damaged" under --keep-last 1). Oracle: whenever step 2 is renamed away at some moment of the
 * reader's call, it gives step 2 or step 1, and nothing skipped; so does fsc_ckpt_latest_read without a fallback
 * (ckpt_tool's verify and show of DIR), never an error (a removed checkpoint is not a damaged one). */
typedef struct {
    const char *from, *to;
    long delay_ns;
    int renamed; /* rename's result (checked by the test's thread) */
} vanish_arg;
static void *vanish(void *arg) {
    vanish_arg *v = arg;
    nanosleep(&(struct timespec){ 0, v->delay_ns }, NULL);
    v->renamed = rename(v->from, v->to);
    return NULL;
}
static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
/* mode 0: fsc_ckpt_latest_sound; 1: fsc_ckpt_latest_read verifying, without the fallback (reading the metadata
 * alone is too quick for the removal to fall inside it) */
static fsc_status read_newest(int mode, const char *dir, char *path, size_t cap, int64_t *step, char *skipped,
                              size_t scap) {
    if (mode == 0) return fsc_ckpt_latest_sound(dir, path, cap, step, skipped, scap);
    fsc_ckpt_meta *m = NULL;
    fsc_status s = fsc_ckpt_latest_read(dir, FSC_CKPT_READ_VERIFY, path, cap, step, &m, skipped, scap);
    if (s == FSC_OK && (!m || m->step != *step)) s = fsc_error(FSC_ERR_INTERNAL, "the metadata is not step %lld's",
                                                               (long long)*step);
    fsc_ckpt_meta_free(m);
    return s;
}
static void test_latest_sound_while_removed(void **state) {
    (void)state;
    char *dir = make_run(2), path[700], skipped[4096], two[700], away[760];
    int64_t step = 0;
    snprintf(two, sizeof two, "%s/step-00000002", dir);
    snprintf(away, sizeof away, "%s.tmp-removing-1", two);
    for (int mode = 0; mode < 2; mode++) {
        double t0 = now_s();
        assert_ok(read_newest(mode, dir, path, sizeof path, &step, skipped, sizeof skipped));
        const double took = now_s() - t0; /* one call's time: the removals fall all over it */
        int mid = 0;
        for (int k = 0; k < 200; k++) {
            vanish_arg v = { two, away, (long)(took * 1e9 * (k % 100) / 100.0), -1 };
            pthread_t th;
            assert_int_equal(pthread_create(&th, NULL, vanish, &v), 0);
            const fsc_status s = read_newest(mode, dir, path, sizeof path, &step, skipped, sizeof skipped);
            pthread_join(th, NULL);
            assert_int_equal(v.renamed, 0);
            if (s != FSC_OK || skipped[0]) fail_msg("mode %d, removal %d: status %d, skipped \"%s\": %s", mode, k, s,
                                                     skipped, fsc_last_error());
            assert_true(step == 1 || step == 2);
            mid += step == 1;
            assert_int_equal(rename(away, two), 0);
        }
        print_message("mode %d: step 2 removed before or while it was read in %d of 200 calls\n", mode, mid);
    }
    ct_rmtree(dir);
}

/* Oracle: fsc_ckpt_latest_read gives dir's newest checkpoint read as asked, with its metadata: the metadata alone of
 * a newest whose data is damaged (ckpt_tool show); verifying, that checkpoint's error with path naming it (ckpt_tool
 * verify says it is damaged), or with the fallback the one before, the newest named skipped; none: step -1, "" and
 * no metadata. */
static void test_latest_read(void **state) {
    (void)state;
    char *dir = make_run(3), path[700], skipped[4096];
    int64_t step = 0;
    fsc_ckpt_meta *m = NULL;
    corrupt(dir, 3, "rank-00001-of-00002.safetensors");
    assert_ok(fsc_ckpt_latest_read(dir, 0, path, sizeof path, &step, &m, skipped, sizeof skipped));
    assert_int_equal(step, 3);
    assert_non_null(strstr(path, "step-00000003"));
    assert_true(m && m->step == 3);
    fsc_ckpt_meta_free(m);
    assert_err(fsc_ckpt_latest_read(dir, FSC_CKPT_READ_VERIFY, path, sizeof path, &step, &m, skipped, sizeof skipped),
               FSC_ERR_FORMAT, "checksum");
    assert_int_equal(step, 3);
    assert_non_null(strstr(path, "step-00000003"));
    assert_null(m);
    assert_string_equal(skipped, "");
    assert_ok(fsc_ckpt_latest_read(dir, FSC_CKPT_READ_VERIFY | FSC_CKPT_READ_FALLBACK, path, sizeof path, &step, &m,
                                   skipped, sizeof skipped));
    assert_int_equal(step, 2);
    assert_true(m && m->step == 2);
    if (!strstr(skipped, "step-00000003 skipped, damaged") || !strstr(skipped, "checksum"))
        fail_msg("skipped: \"%s\"", skipped);
    fsc_ckpt_meta_free(m);
    char *empty = ct_tmpdir();
    m = (fsc_ckpt_meta *)1;
    assert_ok(fsc_ckpt_latest_read(empty, FSC_CKPT_READ_VERIFY, path, sizeof path, &step, &m, NULL, 0));
    assert_int_equal(step, -1);
    assert_string_equal(path, "");
    assert_null(m);
    ct_rmtree(empty);
    ct_rmtree(dir);
}

/* Oracle: a step directory named with more digits than a save gives (step-000000003, a copy renamed by hand) is no
 * checkpoint to any reader: fsc_ckpt_latest, fsc_ckpt_latest_sound and a resume all take step 2, and none names a
 * step-00000003 that does not exist. Before, fsc_ckpt_latest (ckpt_tool) took step-000000003 as the newest, while
 * the others listed it as step 3, then opened step-00000003 and skipped it as "damaged: cannot open". */
static void test_noncanonical_name(void **state) {
    (void)state;
    char *dir = make_run(3), from[800], to[800], path[700], skipped[4096];
    ct_step_path(from, sizeof from, dir, 3);
    snprintf(to, sizeof to, "%s/step-000000003", dir);
    assert_int_equal(rename(from, to), 0);
    int64_t step = -1;
    assert_ok(fsc_ckpt_latest(dir, path, sizeof path, &step));
    assert_int_equal(step, 2);
    assert_ok(fsc_ckpt_latest_sound(dir, path, sizeof path, &step, skipped, sizeof skipped));
    assert_int_equal(step, 2);
    assert_string_equal(skipped, "");
    tr_job t = tr_make();
    assert_ok(tr_try(&t, dir));
    assert_int_equal(t.step, 2);
    assert_string_equal(t.skipped, "");
    ct_free(&t.j);
    ct_rmtree(dir);
}

/* Oracle: a newest checkpoint whose metadata.json is a link that loops (or leads nowhere) is damaged, not absent:
 * skipped with a message naming it, by the reader's fallback and by a resume (before, both passed it over in
 * silence, as a folder that holds no checkpoint). */
static void test_metadata_link_damaged(void **state) {
    (void)state;
    char *dir = make_run(3), meta[800], path[700], skipped[4096];
    snprintf(meta, sizeof meta, "%s/step-00000003/metadata.json", dir);
    assert_int_equal(unlink(meta), 0);
    assert_int_equal(symlink("metadata.json", meta), 0);
    int64_t step = 0;
    assert_ok(fsc_ckpt_latest_sound(dir, path, sizeof path, &step, skipped, sizeof skipped));
    assert_int_equal(step, 2);
    if (!strstr(skipped, "step-00000003 skipped, damaged")) fail_msg("skipped: \"%s\"", skipped);
    tr_job t = tr_make();
    assert_ok(tr_try(&t, dir));
    assert_int_equal(t.step, 2);
    if (!strstr(t.skipped, "step-00000003 skipped, damaged")) fail_msg("resume skipped: \"%s\"", t.skipped);
    assert_int_equal(unlink(meta), 0);
    assert_int_equal(symlink("nowhere.json", meta), 0);
    assert_ok(fsc_ckpt_latest_sound(dir, path, sizeof path, &step, skipped, sizeof skipped));
    assert_int_equal(step, 2);
    if (!strstr(skipped, "step-00000003 skipped, damaged")) fail_msg("dangling: \"%s\"", skipped);
    ct_free(&t.j);
    ct_rmtree(dir);
}

/* Oracle: a newest step directory whose metadata.json cannot be examined (the directory a link that loops; without
 * search permission, where the tests do not run as root) is a damaged checkpoint, not an absent one: fsc_ckpt_latest
 * (ckpt_tool's DIR) names it, and the reader's fallback and a resume skip it with a message naming it and why. Before,
 * all three passed it over in silence (step 2 taken as the newest, no warning), as a folder without metadata.json. */
static void test_step_unexaminable(void **state) {
    (void)state;
    char *dir = make_run(3), three[700], aside[800], path[700], skipped[4096];
    ct_step_path(three, sizeof three, dir, 3);
    snprintf(aside, sizeof aside, "%s/aside", dir);
    for (int k = 0; k < 2; k++) {
        if (k == 0) {
            assert_int_equal(rename(three, aside), 0);
            assert_int_equal(symlink("step-00000003", three), 0); /* itself: ELOOP */
        } else {
            if (geteuid() == 0) break; /* root searches any directory */
            assert_int_equal(unlink(three), 0);
            assert_int_equal(rename(aside, three), 0);
            assert_int_equal(chmod(three, 0), 0); /* EACCES */
        }
        const char *why = k == 0 ? "symbolic links" : "Permission denied";
        int64_t step = -1;
        assert_ok(fsc_ckpt_latest(dir, path, sizeof path, &step));
        assert_int_equal(step, 3);
        assert_ok(fsc_ckpt_latest_sound(dir, path, sizeof path, &step, skipped, sizeof skipped));
        assert_int_equal(step, 2);
        if (!strstr(skipped, "step-00000003 skipped, damaged") || !strstr(skipped, why)) fail_msg("skipped: \"%s\"", skipped);
        tr_job t = tr_make();
        assert_ok(tr_try(&t, dir));
        assert_int_equal(t.step, 2);
        if (!strstr(t.skipped, "step-00000003 skipped, damaged")) fail_msg("resume skipped: \"%s\"", t.skipped);
        ct_free(&t.j);
        if (k == 1) assert_int_equal(chmod(three, 0755), 0);
    }
    ct_rmtree(dir);
}

/* Oracle: retention keeps the sound checkpoints: one whose metadata.json cannot be examined (a looping link) between
 * the one written and a sound older one takes no kept place, so with keep 2 the older sound one stays (it was
 * removed while the damaged one was counted as kept) and the damaged one is left alone. */
static void test_prune_skips_unexaminable(void **state) {
    (void)state;
    char *dir = make_run(3), one[700], two[700], aside[800];
    ct_step_path(one, sizeof one, dir, 1);
    ct_step_path(two, sizeof two, dir, 2);
    snprintf(aside, sizeof aside, "%s/aside", dir);
    assert_int_equal(rename(two, aside), 0);
    assert_int_equal(symlink("step-00000002", two), 0); /* itself: ELOOP */
    int removed = -1;
    char report[1024];
    assert_ok(fsc_ckpt_prune(dir, 3, 2, &removed, report, sizeof report));
    assert_int_equal(removed, 0);
    assert_ok(fsc_ckpt_verify(one, NULL));
    struct stat st;
    assert_int_equal(lstat(two, &st), 0); /* the damaged one: not removed here */
    ct_rmtree(dir);
}

/* Oracle: after a resume that skipped a newest checkpoint whose metadata cannot be read, the run's next
 * save into the same DIR is accepted (the newest readable checkpoint is its own run's) and replaces the
 * damaged one with a sound one; a fresh engine (another run) is still refused there. */
static void test_save_after_skip(void **state) {
    (void)state;
    char *dir = make_run(2), p[700];
    touch(dir, "step-00000002/metadata.json", "garbage");
    tr_job t = tr_make();
    t.save_dir = dir, t.save_step = 2;
    assert_ok(tr_try(&t, dir));
    assert_int_equal(t.step, 1);
    ct_step_path(p, sizeof p, dir, 2);
    assert_ok(fsc_ckpt_verify(p, NULL));
    ct_free(&t.j);
    touch(dir, "step-00000002/metadata.json", "garbage");
    ct_job fresh = ct_fsdp(2, FSC_SHARD_FULL);
    fresh.to = 0, fresh.save_dir = dir;
    assert_err(ct_try(&fresh), FSC_ERR_INVALID, "another run");
    ct_free(&fresh);
    ct_rmtree(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prune),
        cmocka_unit_test(test_try_resume_fresh_and_newest),
        cmocka_unit_test(test_try_resume_one_checkpoint),
        cmocka_unit_test(test_try_resume_skips_damaged),
        cmocka_unit_test(test_save_after_skip),
        cmocka_unit_test(test_model_record_damaged),
        cmocka_unit_test(test_latest_sound),
        cmocka_unit_test(test_latest_sound_while_removed),
        cmocka_unit_test(test_latest_read),
        cmocka_unit_test(test_metadata_link_damaged),
        cmocka_unit_test(test_noncanonical_name),
        cmocka_unit_test(test_step_unexaminable),
        cmocka_unit_test(test_prune_skips_unexaminable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
