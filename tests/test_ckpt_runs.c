/* A checkpoint directory belongs to one run (lib/ckpt/ckpt_save.c claims it, ckpt_load.c hands the run on).
 * Oracles:
 *   - a fresh engine (another seed and learning rate) saving into a DIR that holds a longer run's
 *     checkpoints is refused with FSC_ERR_INVALID and a message naming the other run and start_over, and
 *     DIR is unchanged: the same entries, every metadata.json byte for byte;
 *   - an engine that resumed from DIR continues its run: its saves go in, all with the same run_id;
 *   - an engine that resumed another run's checkpoint may not save into DIR either;
 *   - with start_over the other run's checkpoints are removed (a file of another name stays), the new run's
 *     is the only one, and resuming DIR continues the new run exactly: losses, parameters and optimizer
 *     state equal the new run's straight training bit for bit;
 *   - every fresh run has its own run id. */
#include "ckpttest.h"

static ct_job first(void) { return ct_make(2, FSC_PAR_DDP); }

static ct_job second(void) { /* another run: another seed and learning rate */
    ct_job j = ct_make(2, FSC_PAR_DDP);
    j.run.seed = 99;
    j.run.oc.lr = 0.05f;
    return j;
}

static void run_id(const char *dir, int64_t step, char *out) {
    char p[600];
    fsc_ckpt_meta *m = NULL;
    ct_step_path(p, sizeof p, dir, step);
    assert_ok(fsc_ckpt_meta_read(p, &m));
    memcpy(out, m->run_id, FSC_CKPT_RUN_ID);
    fsc_ckpt_meta_free(m);
}

/* The names in dir and each step-*\/metadata.json, as one string (caller frees). */
static char *snapshot(const char *dir) {
    size_t cap = 1 << 20, n = 0;
    char *s = calloc(1, cap);
    struct dirent **list = NULL;
    int k = scandir(dir, &list, NULL, alphasort);
    assert_true(k >= 0);
    for (int i = 0; i < k; i++) {
        char p[700];
        n += (size_t)snprintf(s + n, cap - n, "%s\n", list[i]->d_name);
        snprintf(p, sizeof p, "%s/%s/metadata.json", dir, list[i]->d_name);
        FILE *f = fopen(p, "rb");
        if (f) {
            n += fread(s + n, 1, cap - n - 1, f);
            fclose(f);
        }
        free(list[i]);
    }
    free(list);
    return s;
}

static void test_ckpt_one_run_per_dir(void **state) {
    (void)state;
    char *dir = ct_tmpdir(), *other = ct_tmpdir(), p[700];
    char x[FSC_CKPT_RUN_ID], x2[FSC_CKPT_RUN_ID], y[FSC_CKPT_RUN_ID], z[FSC_CKPT_RUN_ID];
    /* run X: steps 2 and 4 in DIR (the second save by the engine that resumed the first) */
    ct_job a = first();
    a.to = 2;
    a.save_dir = dir;
    ct_run(&a);
    a.resume = dir;
    a.from = 2;
    a.to = 4;
    ct_run(&a);
    run_id(dir, 2, x);
    run_id(dir, 4, x2);
    assert_string_equal(x, x2);
    snprintf(p, sizeof p, "%s/notes.txt", dir); /* not a checkpoint: nobody's to remove */
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fclose(f);
    char *before = snapshot(dir);

    /* a fresh run: refused, nothing changed */
    ct_job b = second();
    b.to = 2;
    b.save_dir = dir;
    assert_err(ct_try(&b), FSC_ERR_INVALID, "holds the checkpoints of another run");
    if (!strstr(fsc_last_error(), x) || !strstr(fsc_last_error(), "start_over"))
        fail_msg("message: %s", fsc_last_error());
    char *after = snapshot(dir);
    assert_string_equal(before, after);
    free(after);

    /* an engine continuing another run (Y, from its own directory): refused too */
    ct_job c = second();
    c.to = 1;
    c.save_dir = other;
    ct_run(&c);
    run_id(other, 1, y);
    assert_string_not_equal(x, y);
    c.resume = other;
    c.from = 1;
    c.to = 2;
    c.save_dir = dir;
    assert_err(ct_try(&c), FSC_ERR_INVALID, "continues run");
    assert_non_null(strstr(fsc_last_error(), y));
    after = snapshot(dir);
    assert_string_equal(before, after);
    free(after);

    /* starting over: X's checkpoints go, notes.txt stays; resuming continues the new run exactly */
    b.save.start_over = 1;
    ct_run(&b);
    int64_t step;
    char latest[700];
    assert_ok(fsc_ckpt_latest(dir, latest, sizeof latest, &step));
    assert_int_equal(step, 2);
    run_id(dir, 2, z);
    assert_string_not_equal(z, x);
    assert_string_not_equal(z, y);
    ct_step_path(p, sizeof p, dir, 4);
    struct stat st;
    assert_int_not_equal(stat(p, &st), 0);
    snprintf(p, sizeof p, "%s/notes.txt", dir);
    assert_int_equal(stat(p, &st), 0);
    ct_job straight = second(), r = second();
    straight.to = 4;
    ct_run(&straight);
    r.resume = dir;
    r.from = 2;
    r.to = 4;
    ct_run(&r);
    assert_int_equal(r.loaded_step, 2);
    assert_memory_equal(&straight.loss[2], &r.loss[2], 2 * sizeof(double));
    ct_assert_state_equal(&straight, &r, "resumed after starting over");

    free(before);
    ct_free(&a);
    ct_free(&b);
    ct_free(&c);
    ct_free(&straight);
    ct_free(&r);
    ct_rmtree(dir);
    ct_rmtree(other);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ckpt_one_run_per_dir),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
