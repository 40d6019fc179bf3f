/* Tests of fsc_ckpt_write_file (lib/ckpt/ckpt_text.c): a file beside the checkpoints.
 * Oracles: the file reads back byte for byte, a second write replaces it whole, the directory is made when absent,
 * no temporary is left behind, names that are not plain or that a checkpoint could use are refused, and
 * fsc_ckpt_latest and fsc_ckpt_clean do not take it for a checkpoint or a leftover. */
#include <dirent.h>
#include "testutil.h"

static void test_write_replace(void **state) {
    (void)state;
    char dir[64] = "/tmp/fsc_test_ckpt_text_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char sub[128], path[160];
    snprintf(sub, sizeof sub, "%s/ck", dir);
    snprintf(path, sizeof path, "%s/config.json", sub);
    assert_ok(fsc_ckpt_write_file(sub, "config.json", "{\"a\": 1}\n", 9)); /* makes ck/ */
    char buf[64] = "";
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    assert_int_equal(fread(buf, 1, sizeof buf, f), 9);
    fclose(f);
    assert_string_equal(buf, "{\"a\": 1}\n");
    assert_ok(fsc_ckpt_write_file(sub, "config.json", "{}", 2)); /* replaced whole */
    memset(buf, 0, sizeof buf);
    f = fopen(path, "r");
    assert_non_null(f);
    assert_int_equal(fread(buf, 1, sizeof buf, f), 2);
    fclose(f);
    assert_string_equal(buf, "{}");
    int entries = 0;
    DIR *d = opendir(sub);
    for (struct dirent *de; (de = readdir(d)) != NULL;)
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) entries++;
    closedir(d);
    assert_int_equal(entries, 1); /* no temporary left */
    char latest[256];
    int64_t step = 0;
    assert_ok(fsc_ckpt_latest(sub, latest, sizeof latest, &step));
    assert_true(step < 0); /* not a checkpoint */
    int left = -1;
    assert_ok(fsc_ckpt_clean(sub, &left, NULL, 0));
    assert_int_equal(left, 0);
    assert_int_equal(access(path, F_OK), 0); /* not a leftover either */
    assert_err(fsc_ckpt_write_file(sub, "a/b", "x", 1), FSC_ERR_INVALID, "plain file name");
    assert_err(fsc_ckpt_write_file(sub, "step-00000001", "x", 1), FSC_ERR_INVALID, "not step-");
    assert_err(fsc_ckpt_write_file(sub, "..", "x", 1), FSC_ERR_INVALID, "plain");
    assert_err(fsc_ckpt_write_file(NULL, "c", "x", 1), FSC_ERR_INVALID, "no directory");
    assert_err(fsc_ckpt_write_file("/nonexistent_fsc/a/b", "c", "x", 1), FSC_ERR_IO, "cannot create");
    test_rmtree(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_write_replace),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
