/* Removing what interrupted saves left: fsc_ckpt_clean, and fsc_ckpt_resume, which calls it
 * (lib/ckpt/ckpt_fs.c).
 * Oracles:
 *   - nothing outside the checkpoint directory changes: a symbolic link named like a leftover
 *     (step-N.tmp-*) to a directory elsewhere, and a link inside a leftover named like a file a save
 *     writes, stay in place, and their targets keep every file and byte;
 *   - only files of the names a save writes are removed: a leftover that also holds another file or a
 *     directory keeps them and stays, and fsc_ckpt_clean counts it and names it in its report;
 *   - a leftover made only of a save's files (shards, their temporary names, metadata.json) is removed;
 *   - none of this stops a resume: with all these leftovers present, resuming loads the newest intact
 *     checkpoint (its step) and leaves the same things in place. */
#include <errno.h>
#include "ckpttest.h"

static void put(const char *dir, const char *name, const char *text) {
    char p[700];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    if (!f) fail_msg("cannot create %s: %s", p, strerror(errno));
    fputs(text, f);
    fclose(f);
}

static void mkdir_in(char *out, size_t cap, const char *dir, const char *name) {
    snprintf(out, cap, "%s/%s", dir, name);
    if (mkdir(out, 0777) != 0) fail_msg("cannot make %s: %s", out, strerror(errno));
}

static int exists(const char *dir, const char *name) {
    char p[700];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return lstat(p, &st) == 0;
}

static void assert_file(const char *dir, const char *name, const char *text) {
    char p[700], buf[64] = "";
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "r");
    if (!f) fail_msg("%s is gone", p);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    if (strcmp(buf, text) != 0) fail_msg("%s holds \"%s\", not \"%s\"", p, buf, text);
}

/* Outside: a folder with a file and a subfolder with a file, which no clean may touch. */
static char *make_outside(void) {
    char *o = ct_tmpdir(), sub[700];
    put(o, "a", "x");
    mkdir_in(sub, sizeof sub, o, "sub");
    put(sub, "b", "y");
    return o;
}

static void assert_outside_intact(const char *o) {
    char sub[700];
    assert_file(o, "a", "x");
    snprintf(sub, sizeof sub, "%s/sub", o);
    assert_file(sub, "b", "y");
}

/* In dir: a link named like a leftover to outside; a leftover whose metadata.json is a link to outside's
 * file; a leftover that holds a folder and a file of its own; a leftover of a save's files only. */
static void make_leftovers(const char *dir, const char *outside) {
    char p[700], q[700];
    snprintf(p, sizeof p, "%s/step-00000009.tmp-evil", dir);
    assert_int_equal(symlink(outside, p), 0);
    mkdir_in(p, sizeof p, dir, "step-00000008.tmp-link");
    snprintf(q, sizeof q, "%s/a", outside);
    char l[760];
    snprintf(l, sizeof l, "%s/metadata.json", p);
    assert_int_equal(symlink(q, l), 0);
    put(p, "rank-00000-of-00002.safetensors", "shard");
    mkdir_in(p, sizeof p, dir, "step-00000007.tmp-abcdef");
    put(p, "notes.txt", "mine");
    put(p, "metadata.json", "{");
    mkdir_in(q, sizeof q, p, "inner");
    put(q, "c", "z");
    mkdir_in(p, sizeof p, dir, "step-00000006.tmp-XYZ123");
    const char *ours[] = { "metadata.json", "model.safetensors", "optim.safetensors", "rank-00001-of-00002.safetensors",
                           "rank-00001-of-00002.safetensors.tmp.4242.0" };
    for (int i = 0; i < 5; i++) put(p, ours[i], "data");
}

static void assert_left_in_place(const char *dir) {
    char p[700];
    assert_true(exists(dir, "step-00000009.tmp-evil"));
    assert_true(exists(dir, "step-00000008.tmp-link/metadata.json")); /* the link itself */
    snprintf(p, sizeof p, "%s/step-00000007.tmp-abcdef", dir);
    assert_file(p, "notes.txt", "mine");
    snprintf(p, sizeof p, "%s/step-00000007.tmp-abcdef/inner", dir);
    assert_file(p, "c", "z");
    assert_false(exists(dir, "step-00000006.tmp-XYZ123"));
}

static void test_ckpt_clean_stays_inside(void **state) {
    (void)state;
    char *dir = ct_tmpdir(), *outside = make_outside(), report[2048];
    make_leftovers(dir, outside);
    int left = -1;
    assert_ok(fsc_ckpt_clean(dir, &left, report, sizeof report));
    assert_outside_intact(outside);
    assert_left_in_place(dir);
    assert_int_equal(left, 3);
    const char *needles[] = { "step-00000009.tmp-evil: left in place: a symbolic link",
                              "step-00000008.tmp-link: left in place: its metadata.json is not a regular file",
                              "step-00000007.tmp-abcdef: left in place: it holds", "which a save does not write" };
    for (int i = 0; i < 4; i++)
        if (!strstr(report, needles[i])) fail_msg("report \"%s\" lacks \"%s\"", report, needles[i]);
    /* again: the same three are left, nothing else happens */
    assert_ok(fsc_ckpt_clean(dir, &left, NULL, 0));
    assert_int_equal(left, 3);
    assert_outside_intact(outside);
    /* and a clean directory reports nothing */
    char *empty = ct_tmpdir();
    report[0] = 'x';
    assert_ok(fsc_ckpt_clean(empty, &left, report, sizeof report));
    assert_int_equal(left, 0);
    assert_string_equal(report, "");
    ct_rmtree(empty);
    ct_rmtree(dir);
    ct_rmtree(outside);
}

/* The reproduction of the report: an intact checkpoint, then the leftovers; resume loads it. */
static void test_ckpt_resume_past_leftovers(void **state) {
    (void)state;
    char *dir = ct_tmpdir(), *outside = make_outside();
    ct_job a = ct_fsdp(2, FSC_SHARD_FULL);
    a.to = 2;
    a.save_dir = dir;
    ct_run(&a);
    make_leftovers(dir, outside);
    ct_job r = ct_fsdp(2, FSC_SHARD_FULL);
    r.resume = dir;
    r.from = 2;
    r.to = 3;
    ct_run(&r);
    assert_int_equal(r.loaded_step, 2);
    assert_outside_intact(outside);
    assert_left_in_place(dir);
    ct_free(&a);
    ct_free(&r);
    ct_rmtree(dir);
    ct_rmtree(outside);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ckpt_clean_stays_inside),
        cmocka_unit_test(test_ckpt_resume_past_leftovers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
