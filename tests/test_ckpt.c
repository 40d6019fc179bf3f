/* Training checkpoints: resume exactness and atomicity (lib/ckpt).
 * Oracles:
 *   - resume is exact: training N steps straight and training K steps, saving, loading into a new engine
 *     and training N-K steps give bit-identical losses, parameters and optimizer state (same world and
 *     setting), for ddp, fsdp full_shard, zero1 and zero2, sharded and full formats, AdamW and SGD with
 *     momentum, and f16 loss scaling whose skipped steps make the optimizer's step count lag the data's;
 *   - a save that crashes at any point leaves the previous checkpoint as the newest complete one: resuming
 *     from the directory gives exactly the straight run, and the leftover temporary directory is removed. */
#include "ckpttest.h"

/* straight [0, n) against [0, k) + save + load + [k, n) */
static void check_resume(ct_job base, int k, int n, fsc_ckpt_format fmt, const char *what) {
    char *dir = ct_tmpdir(), path[600];
    ct_job straight = base;
    straight.from = 0;
    straight.to = n;
    ct_run(&straight);
    ct_job a = base;
    a.from = 0;
    a.to = k;
    a.save_dir = dir;
    a.save.format = fmt;
    ct_run(&a);
    ct_job b = base;
    ct_step_path(path, sizeof path, dir, k);
    b.load = path;
    b.from = k;
    b.to = n;
    ct_run(&b);
    assert_int_equal(b.loaded_step, k);
    for (int s = k; s < n; s++)
        if (memcmp(&straight.loss[s], &b.loss[s], sizeof(double)) != 0)
            fail_msg("%s: loss of step %d differs after resuming at %d: %.17g vs %.17g", what, s, k, straight.loss[s],
                     b.loss[s]);
    ct_assert_state_equal(&straight, &b, what);
    /* and the state really moved between the save and the end */
    assert_true(memcmp(a.params, b.params, fsc_gpt_num_params(&a.run.cfg) * sizeof(float)) != 0);
    ct_free(&straight);
    ct_free(&a);
    ct_free(&b);
    ct_rmtree(dir);
}

static void test_ckpt_resume_exact(void **state) {
    (void)state;
    check_resume(ct_make(3, FSC_PAR_DDP), 2, 5, FSC_CKPT_SHARDED, "ddp 3");
    check_resume(ct_fsdp(4, FSC_SHARD_FULL), 3, 5, FSC_CKPT_SHARDED, "fsdp full_shard 4");
    check_resume(ct_make(3, FSC_PAR_ZERO1), 2, 4, FSC_CKPT_SHARDED, "zero1 3");
    ct_job z2 = ct_make(2, FSC_PAR_ZERO2);
    z2.run.po.bucket_bytes = 1; /* one bucket per layer */
    check_resume(z2, 2, 4, FSC_CKPT_SHARDED, "zero2 2");
    ct_job one = ct_make(1, FSC_PAR_NONE);
    check_resume(one, 1, 3, FSC_CKPT_SHARDED, "single rank");
}

static void test_ckpt_resume_exact_full_format(void **state) {
    (void)state;
    check_resume(ct_fsdp(3, FSC_SHARD_FULL), 2, 4, FSC_CKPT_FULL, "fsdp full_shard 3, full format");
    check_resume(ct_make(2, FSC_PAR_DDP), 1, 3, FSC_CKPT_FULL, "ddp 2, full format");
}

/* SGD with momentum and f16 loss scaling from a huge scale: early steps are skipped, so the scale, the
 * good-step count and the optimizer's step count (behind the data position) must all come back. */
static void test_ckpt_resume_exact_sgd_f16(void **state) {
    (void)state;
    ct_job j = ct_fsdp(3, FSC_SHARD_FULL);
    j.run.oc = (fsc_optim_config){ .kind = FSC_OPT_SGD, .lr = 0.05f, .momentum = 0.9f, .weight_decay = 0.01f };
    j.run.po.param_dtype = j.run.po.reduce_dtype = FSC_F16;
    j.run.po.init_loss_scale = 2097152.0f;
    check_resume(j, 4, 8, FSC_CKPT_SHARDED, "fsdp 3, sgd momentum, f16 loss scaling");
    /* the checkpoint at 4 really sits between skipped and taken steps */
    char *dir = ct_tmpdir(), path[600];
    j.from = 0;
    j.to = 4;
    j.save_dir = dir;
    ct_run(&j);
    ct_step_path(path, sizeof path, dir, 4);
    fsc_ckpt_meta *m = NULL;
    assert_ok(fsc_ckpt_meta_read(path, &m));
    assert_true(m->scaler_enabled);
    assert_true(m->optim_steps < 4 && m->optim_steps > 0);
    assert_true(m->scaler.scale < 2097152.0f);
    assert_int_equal(m->step, 4);
    fsc_ckpt_meta_free(m);
    ct_free(&j);
    ct_rmtree(dir);
}

/* A load continues the checkpoint's run: its saves record the seed of the initialization the parameters come
 * from, not the seed the loading engine was made with (which initialized nothing that survives the load). */
static void test_ckpt_load_keeps_seed(void **state) {
    (void)state;
    char *dir = ct_tmpdir(), path[600];
    ct_job a = ct_make(2, FSC_PAR_DDP);
    a.from = 0;
    a.to = 2;
    a.save_dir = dir;
    ct_run(&a);
    ct_job b = ct_make(2, FSC_PAR_ZERO1);
    b.run.seed = a.run.seed + 6;
    ct_step_path(path, sizeof path, dir, 2);
    b.load = path;
    b.from = 2;
    b.to = 3;
    b.save_dir = dir;
    ct_run(&b);
    ct_step_path(path, sizeof path, dir, 3);
    fsc_ckpt_meta *m = NULL;
    assert_ok(fsc_ckpt_meta_read(path, &m));
    if (m->seed != a.run.seed)
        fail_msg("the checkpoint saved after loading records seed %llu; the run's parameters come from seed %llu",
                 (unsigned long long)m->seed, (unsigned long long)a.run.seed);
    fsc_ckpt_meta_free(m);
    ct_free(&a);
    ct_free(&b);
    ct_rmtree(dir);
}

static int count_tmp(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *de; d && (de = readdir(d)) != NULL;) n += strstr(de->d_name, ".tmp-") != NULL;
    if (d) closedir(d);
    return n;
}

/* Crash during a save at every point: the previous checkpoint stays the newest, resume from the directory
 * continues exactly as the straight run, and resume removes the leftovers. */
static void test_ckpt_crash_leaves_last_good(void **state) {
    (void)state;
    struct { fsc_ckpt_crash at; int rank; fsc_ckpt_format fmt; } cases[] = {
        { FSC_CKPT_CRASH_MID_SHARD, 1, FSC_CKPT_SHARDED },
        { FSC_CKPT_CRASH_MID_SHARD, 0, FSC_CKPT_FULL },
        { FSC_CKPT_CRASH_BEFORE_META, 0, FSC_CKPT_SHARDED },
        { FSC_CKPT_CRASH_BEFORE_RENAME, 0, FSC_CKPT_SHARDED },
    };
    ct_job straight = ct_fsdp(3, FSC_SHARD_FULL);
    straight.to = 4;
    ct_run(&straight);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char *dir = ct_tmpdir(), path[600];
        ct_job a = ct_fsdp(3, FSC_SHARD_FULL);
        a.to = 2;
        a.save_dir = dir;
        ct_run(&a);
        ct_job b = ct_fsdp(3, FSC_SHARD_FULL);
        b.resume = dir;
        b.from = 2;
        b.to = 3;
        b.save_dir = dir;
        b.save = (fsc_ckpt_save_opts){ .format = cases[c].fmt, .crash_at = cases[c].at, .crash_rank = cases[c].rank };
        assert_err(ct_try(&b), FSC_ERR_IO, "injected crash");
        int64_t step;
        assert_ok(fsc_ckpt_latest(dir, path, sizeof path, &step));
        assert_int_equal(step, 2);
        assert_int_equal(count_tmp(dir), 1);
        ct_job r = ct_fsdp(3, FSC_SHARD_FULL);
        r.resume = dir;
        r.from = 2;
        r.to = 4;
        ct_run(&r);
        assert_int_equal(r.loaded_step, 2);
        assert_int_equal(count_tmp(dir), 0);
        for (int s = 2; s < 4; s++) assert_memory_equal(&straight.loss[s], &r.loss[s], sizeof(double));
        ct_assert_state_equal(&straight, &r, "resumed after a crashed save");
        ct_free(&a);
        ct_free(&b);
        ct_free(&r);
        ct_rmtree(dir);
    }
    ct_free(&straight);
}

/* Directory handling: the newest of several, the same step saved twice (by the run that resumed it),
 * temporary names ignored, nothing to resume from. */
static void test_ckpt_latest_and_replace(void **state) {
    (void)state;
    char *dir = ct_tmpdir(), path[600], p[700];
    int64_t step;
    assert_ok(fsc_ckpt_latest(dir, path, sizeof path, &step));
    assert_int_equal(step, -1);
    ct_job none = ct_make(2, FSC_PAR_DDP);
    none.resume = dir;
    assert_err(ct_try(&none), FSC_ERR_IO, "no complete checkpoint");
    ct_job a = ct_make(2, FSC_PAR_DDP);
    a.to = 1;
    a.save_dir = dir;
    ct_run(&a);
    a.resume = dir;
    a.from = 1;
    a.to = 2;
    ct_run(&a);
    a.from = 2;
    ct_run(&a); /* step 2 again: replaced */
    /* decoys: a temporary directory with a higher step, a directory without metadata, a stray file */
    snprintf(p, sizeof p, "%s/step-00000009.tmp-abcdef", dir);
    assert_int_equal(mkdir(p, 0777), 0);
    snprintf(p, sizeof p, "%s/step-00000008", dir);
    assert_int_equal(mkdir(p, 0777), 0);
    snprintf(p, sizeof p, "%s/step-7", dir);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fclose(f);
    assert_ok(fsc_ckpt_latest(dir, path, sizeof path, &step));
    assert_int_equal(step, 2);
    ct_step_path(p, sizeof p, dir, 2);
    assert_string_equal(path, p);
    assert_ok(fsc_ckpt_verify(path, NULL));
    assert_int_equal(count_tmp(dir), 1);
    int left = -1;
    assert_ok(fsc_ckpt_clean(dir, &left, NULL, 0));
    assert_int_equal(left, 0);
    assert_int_equal(count_tmp(dir), 0);
    ct_free(&none);
    ct_free(&a);
    ct_rmtree(dir);
}

/* Saving a step whose DIR/step-N is a symbolic link (to a checkpoint of the same run elsewhere) is refused before
 * anything is written, saying what is in the way (before: "cannot rename ... Not a directory" after writing the
 * whole checkpoint); the link and what it points to stay. */
static void test_ckpt_save_onto_link(void **state) {
    (void)state;
    char *dir = ct_tmpdir(), *other = ct_tmpdir(), p[700], q[700];
    ct_job a = ct_make(2, FSC_PAR_DDP);
    a.to = 1;
    a.save_dir = other;
    ct_run(&a);
    ct_step_path(q, sizeof q, other, 1);
    ct_step_path(p, sizeof p, dir, 1);
    assert_int_equal(symlink(q, p), 0);
    ct_job b = ct_make(2, FSC_PAR_DDP); /* the same run, saving step 1 again into dir */
    b.load = q;
    b.from = b.to = 1;
    b.save_dir = dir;
    assert_err(ct_try(&b), FSC_ERR_IO, "step-00000001 is a symbolic link, not a checkpoint directory");
    assert_int_equal(count_tmp(dir), 0);
    struct stat st;
    assert_int_equal(lstat(p, &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    assert_ok(fsc_ckpt_verify(q, NULL));
    ct_free(&a), ct_free(&b);
    unlink(p);
    ct_rmtree(dir), ct_rmtree(other);
}

/* A crash asked for that the save cannot inject is refused, not ignored: a test of it would pass on a save that
 * never crashed. Oracle: on 2 ranks, an unknown crash_at, a crash_rank outside the world, the full format's
 * MID_SHARD on rank 1 (only rank 0 writes) and BEFORE_META or BEFORE_RENAME on rank 1 (only rank 0 writes the
 * metadata and renames) give FSC_ERR_INVALID naming the field on every rank and leave no
 * checkpoint; the save without them succeeds. Before, each of them saved the checkpoint without a crash. */
typedef struct {
    char dir[600];
    fsc_status st[6][2];
    char why[6][2][256];
} crash_opts_job;

static fsc_status crash_opts_rank(fsc_rank *r, void *arg) {
    crash_opts_job *j = arg;
    fsc_gpt_config g = fsc_gpt_config_default();
    g.layers = 1, g.dim = 16, g.heads = 2, g.seq = 4, g.vocab = 32;
    fsc_parallel_opts po = fsc_parallel_opts_default();
    po.kind = FSC_PAR_DDP;
    fsc_optim_config oc = fsc_optim_config_default();
    fsc_engine *e = NULL;
    FSC_TRY(fsc_engine_create(r, &g, &po, &oc, 1, &e));
    const fsc_ckpt_save_opts bad[6] = {
        { .format = FSC_CKPT_SHARDED, .crash_at = (fsc_ckpt_crash)9 },
        { .format = FSC_CKPT_SHARDED, .crash_at = FSC_CKPT_CRASH_MID_SHARD, .crash_rank = 2 },
        { .format = FSC_CKPT_SHARDED, .crash_at = FSC_CKPT_CRASH_BEFORE_META, .crash_rank = -1 },
        { .format = FSC_CKPT_FULL, .crash_at = FSC_CKPT_CRASH_MID_SHARD, .crash_rank = 1 },
        { .format = FSC_CKPT_SHARDED, .crash_at = FSC_CKPT_CRASH_BEFORE_META, .crash_rank = 1 }, /* rank 0 writes it */
        { .format = FSC_CKPT_FULL, .crash_at = FSC_CKPT_CRASH_BEFORE_RENAME, .crash_rank = 1 },  /* and renames */
    };
    fsc_status s = FSC_OK;
    for (int c = 0; c < 6; c++) {
        j->st[c][r->rank] = fsc_ckpt_save(e, j->dir, 0, &bad[c]);
        snprintf(j->why[c][r->rank], sizeof j->why[c][r->rank], "%s", j->st[c][r->rank] ? fsc_last_error() : "");
    }
    s = fsc_ckpt_save(e, j->dir, 1, NULL);
    fsc_engine_free(e);
    return s;
}

static void test_ckpt_crash_options_checked(void **state) {
    (void)state;
    static crash_opts_job j;
    memset(&j, 0, sizeof j);
    char *dir = ct_tmpdir();
    snprintf(j.dir, sizeof j.dir, "%s", dir);
    fsc_cluster_opts co = { .world = 2, .device = "cpu", .timeout_s = 30 };
    assert_ok(fsc_cluster_run(&co, crash_opts_rank, &j));
    const char *field[6] = { "crash_at 9", "crash_rank 2", "crash_rank -1", "crash_rank 1", "crash_rank 1 of "
                             "FSC_CKPT_CRASH_BEFORE_META", "crash_rank 1 of FSC_CKPT_CRASH_BEFORE_RENAME" };
    for (int c = 0; c < 6; c++)
        for (int r = 0; r < 2; r++)
            if (j.st[c][r] != FSC_ERR_INVALID || !strstr(j.why[c][r], field[c]))
                fail_msg("case %d, rank %d: the save gave %s \"%s\", not FSC_ERR_INVALID naming %s", c, r,
                         fsc_status_str(j.st[c][r]), j.why[c][r], field[c]);
    char path[700];
    int64_t step = -2;
    assert_ok(fsc_ckpt_latest(j.dir, path, sizeof path, &step));
    assert_int_equal(step, 1); /* the good save's; no step-00000000 */
    snprintf(path, sizeof path, "%s/step-00000000", j.dir);
    assert_int_not_equal(access(path, F_OK), 0);
    ct_rmtree(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ckpt_resume_exact),
        cmocka_unit_test(test_ckpt_resume_exact_full_format),
        cmocka_unit_test(test_ckpt_resume_exact_sgd_f16),
        cmocka_unit_test(test_ckpt_load_keeps_seed),
        cmocka_unit_test(test_ckpt_crash_leaves_last_good),
        cmocka_unit_test(test_ckpt_latest_and_replace),
        cmocka_unit_test(test_ckpt_save_onto_link),
        cmocka_unit_test(test_ckpt_crash_options_checked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
