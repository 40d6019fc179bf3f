/* Tests of lib/io/safetensors.c and safetensors_write.c: bit-exact round trips, partial reads, a golden file
 * from an independent writer (tests/gen_golden_safetensors.py), atomic commit, and one test per kind of
 * malformed file. */
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "testutil.h"

static char g_dir[64]; /* a fresh temporary directory for this binary */

static int setup_dir(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/fsc_test_st_XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

/* Files in g_dir whose names start with prefix. */
static int count_files(const char *prefix) {
    DIR *d = opendir(g_dir);
    int n = 0;
    for (struct dirent *de; d && (de = readdir(d));)
        if (de->d_name[0] != '.' && !strncmp(de->d_name, prefix, strlen(prefix))) n++;
    if (d) closedir(d);
    return n;
}

static int teardown_dir(void **state) {
    (void)state;
    test_rmtree(g_dir);
    return 0;
}

static void path_in_dir(char *buf, size_t cap, const char *name) { snprintf(buf, cap, "%s/%s", g_dir, name); }

static int file_exists(const char *p) { return access(p, F_OK) == 0; }

/* A file image: 8-byte little-endian length, the header text as given, then data_len bytes 0,1,2,... */
static uint8_t *make_image(const char *hdr, size_t data_len, size_t *len) {
    size_t h = strlen(hdr);
    *len = 8 + h + data_len;
    uint8_t *b = malloc(*len);
    assert_non_null(b);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)h >> (8 * i));
    memcpy(b + 8, hdr, h);
    for (size_t i = 0; i < data_len; i++) b[8 + h + i] = (uint8_t)i;
    return b;
}

/* Parsing hdr with data_len bytes of data must fail with st and a message containing needle
 * (or, with st FSC_OK, succeed: the well-formed neighbour of a malformed case). */
static void expect_bad(const char *hdr, size_t data_len, fsc_status st, const char *needle) {
    size_t len;
    uint8_t *b = make_image(hdr, data_len, &len);
    fsc_st_file *f = (fsc_st_file *)1;
    if (st == FSC_OK) {
        assert_ok(fsc_st_parse_buffer(b, len, &f));
        fsc_st_close(f);
    } else {
        assert_err(fsc_st_parse_buffer(b, len, &f), st, needle);
        assert_null(f);
    }
    free(b);
}

/* Oracle: what was written is read back bit for bit, with the declared names, dtypes, shapes, metadata,
 * in declaration order, for every dtype and ndim 0..4; the header is padded with spaces to 8 bytes. */
static void test_roundtrip_all_dtypes(void **state) {
    (void)state;
    char path[256];
    path_in_dir(path, sizeof path, "rt.safetensors");
    struct { const char *name; fsc_dtype dt; int ndim; int64_t shape[4]; size_t es; } t[] = {
        {"w.f32", FSC_F32, 2, {3, 5}, 4},     {"b.bf16", FSC_BF16, 1, {7}, 2},
        {"h.f16", FSC_F16, 3, {2, 3, 2}, 2},  {"scalar.i32", FSC_I32, 0, {0}, 4},
        {"u.u8", FSC_U8, 4, {2, 1, 3, 2}, 1}, {"empty", FSC_F32, 2, {0, 4}, 4},
        {"odd \"name\"\\", FSC_U8, 1, {3}, 1},
    };
    int nt = (int)(sizeof t / sizeof t[0]);
    uint8_t *data[8];
    size_t numel[8];
    fsc_st_writer *w;
    assert_ok(fsc_st_writer_open(path, &w));
    for (int i = 0; i < nt; i++) {
        numel[i] = 1;
        for (int d = 0; d < t[i].ndim; d++) numel[i] *= (size_t)t[i].shape[d];
        data[i] = malloc(numel[i] * t[i].es + 1);
        for (size_t k = 0; k < numel[i] * t[i].es; k++) data[i][k] = (uint8_t)(k * 37 + (size_t)i * 11 + 1);
        assert_ok(fsc_st_writer_add(w, t[i].name, t[i].dt, t[i].ndim, t[i].shape));
    }
    assert_ok(fsc_st_writer_meta(w, "format", "pt"));
    assert_ok(fsc_st_writer_meta(w, "note", "quote \" backslash \\ newline \n tab \t"));
    assert_ok(fsc_st_writer_meta(w, "caf\xc3\xa9", "\xe2\x82\xac 5")); /* UTF-8, written as it is */
    assert_ok(fsc_st_writer_begin_data(w));
    for (int i = nt - 1; i >= 0; i--) { /* second half first, then the first half */
        size_t h = numel[i] / 2;
        assert_ok(fsc_st_writer_write(w, i, data[i] + h * t[i].es, h, numel[i] - h));
        assert_ok(fsc_st_writer_write(w, i, data[i], 0, h));
    }
    assert_ok(fsc_st_writer_commit(w));

    fsc_st_file *f;
    assert_ok(fsc_st_open(path, &f));
    assert_int_equal(fsc_st_count(f), nt);
    assert_string_equal(fsc_st_metadata(f, "format"), "pt");
    assert_string_equal(fsc_st_metadata(f, "note"), "quote \" backslash \\ newline \n tab \t");
    assert_string_equal(fsc_st_metadata(f, "caf\xc3\xa9"), "\xe2\x82\xac 5");
    assert_null(fsc_st_metadata(f, "absent"));
    uint64_t at = 0;
    for (int i = 0; i < nt; i++) {
        const fsc_st_entry *e = fsc_st_entry_at(f, i);
        assert_non_null(e);
        assert_string_equal(e->name, t[i].name);
        assert_ptr_equal(fsc_st_find(f, t[i].name), e);
        assert_int_equal(e->dtype, t[i].dt);
        assert_int_equal(e->ndim, t[i].ndim);
        for (int d = 0; d < t[i].ndim; d++) assert_int_equal(e->shape[d], t[i].shape[d]);
        assert_int_equal(e->begin, at); /* declaration order is file order */
        at = e->end;
        uint8_t *back = malloc(numel[i] * t[i].es + 1);
        assert_ok(fsc_st_read(f, e, back, 0, numel[i]));
        assert_memory_equal(back, data[i], numel[i] * t[i].es);
        free(back);
        free(data[i]);
    }
    assert_null(fsc_st_find(f, "nope"));
    assert_null(fsc_st_entry_at(f, nt));
    fsc_st_close(f);

    /* The header length is a multiple of 8 and the padding is spaces. */
    FILE *fp = fopen(path, "rb");
    uint8_t len8[8];
    assert_int_equal(fread(len8, 1, 8, fp), 8);
    uint64_t hl = 0;
    for (int i = 0; i < 8; i++) hl |= (uint64_t)len8[i] << (8 * i);
    assert_int_equal(hl % 8, 0);
    char *hdr = malloc(hl + 1);
    assert_int_equal(fread(hdr, 1, hl, fp), hl);
    hdr[hl] = 0;
    fclose(fp);
    assert_int_equal(hdr[0], '{');
    char *close = strrchr(hdr, '}');
    for (char *p = close + 1; *p; p++) assert_int_equal(*p, ' ');
    free(hdr);
}

/* Oracle: a range read returns exactly those elements of what was written; ranges outside are refused. */
static void test_partial_reads(void **state) {
    (void)state;
    char path[256];
    path_in_dir(path, sizeof path, "part.safetensors");
    enum { N = 1000 };
    float v[N], back[N];
    for (int i = 0; i < N; i++) v[i] = (float)i * 0.25f - 7.0f;
    int64_t shape[2] = {10, 100}, s1 = 5;
    fsc_st_writer *w;
    assert_ok(fsc_st_writer_open(path, &w));
    assert_ok(fsc_st_writer_add(w, "small", FSC_U8, 1, &s1));
    assert_ok(fsc_st_writer_add(w, "x", FSC_F32, 2, shape));
    assert_ok(fsc_st_writer_begin_data(w));
    assert_ok(fsc_st_writer_write(w, 0, "abcde", 0, 5));
    for (int k = 0; k < N; k += 250) assert_ok(fsc_st_writer_write(w, 1, v + k, (uint64_t)k, 250));
    assert_ok(fsc_st_writer_commit(w));

    fsc_st_file *f, *g;
    assert_ok(fsc_st_open(path, &f));
    const fsc_st_entry *e = fsc_st_find(f, "x");
    assert_non_null(e);
    memset(back, 0, sizeof back);
    assert_ok(fsc_st_read(f, e, back, 123, 77));
    assert_bits_equal(back, v + 123, 77, "x[123:200]");
    assert_ok(fsc_st_read(f, e, back, N - 1, 1));
    assert_bits_equal(back, v + N - 1, 1, "x[999]");
    assert_ok(fsc_st_read(f, e, NULL, 5, 0));
    assert_err(fsc_st_read(f, e, back, 990, 11), FSC_ERR_INVALID, "outside tensor x");
    assert_err(fsc_st_read(f, e, back, UINT64_MAX, 2), FSC_ERR_INVALID, "outside tensor x");
    char s[6] = {0};
    assert_ok(fsc_st_read(f, fsc_st_find(f, "small"), s, 1, 3));
    assert_string_equal(s, "bcd");
    assert_ok(fsc_st_open(path, &g));
    assert_err(fsc_st_read(g, e, back, 0, 1), FSC_ERR_INVALID, "does not belong");
    fsc_st_close(g);

    /* Truncated after opening: the read says where the file ends. */
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(truncate(path, sb.st_size - 100), 0);
    assert_err(fsc_st_read(f, e, back, 900, 100), FSC_ERR_IO, "truncated");
    fsc_st_close(f);
    /* Truncated before opening: the message names the file. */
    { const char *pp = path; assert_err(fsc_st_open(path, &f), FSC_ERR_FORMAT, pp); }
    assert_err(fsc_st_open(path, &f), FSC_ERR_FORMAT, "outside the data section");
}

static void golden_path(char *buf, size_t cap) {
    const char *src = __FILE__, *slash = strrchr(src, '/');
    snprintf(buf, cap, "%.*sgolden/small.safetensors", slash ? (int)(slash - src + 1) : 0, src);
}

/* Oracle: the values that tests/gen_golden_safetensors.py (Python struct + json, not fsc) wrote;
 * half and bfloat16 bit patterns worked out by hand. */
static void test_golden_file(void **state) {
    (void)state;
    char path[512];
    golden_path(path, sizeof path);
    fsc_st_file *f;
    assert_ok(fsc_st_open(path, &f));
    assert_int_equal(fsc_st_count(f), 6);
    assert_string_equal(fsc_st_metadata(f, "format"), "pt");
    assert_string_equal(fsc_st_metadata(f, "source"), "gen_golden_safetensors.py");

    const fsc_st_entry *a = fsc_st_find(f, "a.f32");
    assert_non_null(a);
    assert_int_equal(a->dtype, FSC_F32);
    assert_int_equal(a->ndim, 2);
    assert_int_equal(a->shape[0], 2);
    assert_int_equal(a->shape[1], 3);
    float fa[6], ea[6] = {0.0f, 1.0f, -2.5f, 0.1f, 1e-30f, 65504.0f};
    assert_ok(fsc_st_read(f, a, fa, 0, 6));
    assert_bits_equal(fa, ea, 6, "a.f32");

    const fsc_st_entry *b = fsc_st_find(f, "b.bf16");
    uint16_t hb[4], eb[4] = {0x3F80, 0xC000, 0x3F00, 0x4040}; /* 1, -2, 0.5, 3 */
    assert_int_equal(b->dtype, FSC_BF16);
    assert_ok(fsc_st_read(f, b, hb, 0, 4));
    assert_memory_equal(hb, eb, sizeof eb);

    const fsc_st_entry *c = fsc_st_find(f, "c.f16");
    uint16_t hc[4], ec[4] = {0x3C00, 0xC000, 0x3800, 0x7BFF}; /* 1, -2, 0.5, 65504 */
    assert_int_equal(c->dtype, FSC_F16);
    assert_ok(fsc_st_read(f, c, hc, 0, 4));
    assert_memory_equal(hc, ec, sizeof ec);

    const fsc_st_entry *d = fsc_st_find(f, "d.i32");
    int32_t di = 0;
    assert_int_equal(d->dtype, FSC_I32);
    assert_int_equal(d->ndim, 0);
    assert_ok(fsc_st_read(f, d, &di, 0, 1));
    assert_int_equal(di, -123456789);

    const fsc_st_entry *u = fsc_st_find(f, "e.u8");
    uint8_t bu[6], eu[6] = {0, 1, 2, 3, 4, 255};
    assert_int_equal(u->dtype, FSC_U8);
    assert_int_equal(u->ndim, 4);
    assert_int_equal(u->shape[3], 3);
    assert_ok(fsc_st_read(f, u, bu, 0, 6));
    assert_memory_equal(bu, eu, 6);

    const fsc_st_entry *z = fsc_st_find(f, "f.empty");
    assert_int_equal(z->shape[0], 0);
    assert_int_equal(z->end - z->begin, 0);
    fsc_st_close(f);
}

/* Oracle: the file appears at path only at commit, complete; no temporary file remains. */
static void test_commit_is_atomic(void **state) {
    (void)state;
    char path[256];
    path_in_dir(path, sizeof path, "atomic.safetensors");
    int64_t n = 4;
    float v[4] = {1, 2, 3, 4};
    fsc_st_writer *w;
    assert_ok(fsc_st_writer_open(path, &w));
    assert_ok(fsc_st_writer_add(w, "v", FSC_F32, 1, &n));
    assert_ok(fsc_st_writer_begin_data(w));
    assert_ok(fsc_st_writer_write(w, 0, v, 0, 4));
    assert_false(file_exists(path));
    assert_int_equal(count_files("atomic.safetensors.tmp."), 1);
    assert_ok(fsc_st_writer_commit(w));
    assert_true(file_exists(path));
    assert_int_equal(count_files("atomic.safetensors.tmp."), 0);

    /* Overwriting keeps the old file until the new one commits. */
    assert_ok(fsc_st_writer_open(path, &w));
    assert_ok(fsc_st_writer_add(w, "other", FSC_U8, 1, &n));
    assert_ok(fsc_st_writer_begin_data(w));
    fsc_st_file *f;
    assert_ok(fsc_st_open(path, &f));
    assert_non_null(fsc_st_find(f, "v"));
    fsc_st_close(f);
    fsc_st_writer_abort(w);
    assert_int_equal(count_files("atomic.safetensors.tmp."), 0);
    assert_ok(fsc_st_open(path, &f));
    assert_non_null(fsc_st_find(f, "v"));
    fsc_st_close(f);
    unlink(path);
}

/* Oracle: commit renames onto the path, so a path that is not a regular file is refused at open and left as it
 * is (a FIFO here; /dev/null is the same case: --save /dev/null replaced the device with a file as root), and a
 * link to a file is written where it points, the link staying a link. */
static void test_writer_path_not_regular(void **state) {
    (void)state;
    char fifo[256], target[256], link[256];
    path_in_dir(fifo, sizeof fifo, "fifo.safetensors");
    path_in_dir(target, sizeof target, "target.safetensors");
    path_in_dir(link, sizeof link, "link.safetensors");
    assert_int_equal(mkfifo(fifo, 0600), 0);
    fsc_st_writer *w = (fsc_st_writer *)1;
    assert_err(fsc_st_writer_open(fifo, &w), FSC_ERR_INVALID, "not a regular file (a FIFO)");
    assert_null(w);
    struct stat sb;
    assert_int_equal(lstat(fifo, &sb), 0);
    assert_true(S_ISFIFO(sb.st_mode));
    assert_int_equal(count_files("fifo.safetensors.tmp."), 0);

    FILE *f0 = fopen(target, "w");
    assert_non_null(f0);
    fputs("old", f0);
    fclose(f0);
    assert_int_equal(symlink("target.safetensors", link), 0);
    int64_t n = 2;
    float v[2] = {1, 2};
    assert_ok(fsc_st_writer_open(link, &w));
    assert_ok(fsc_st_writer_add(w, "v", FSC_F32, 1, &n));
    assert_ok(fsc_st_writer_begin_data(w));
    assert_ok(fsc_st_writer_write(w, 0, v, 0, 2));
    assert_ok(fsc_st_writer_commit(w));
    assert_int_equal(lstat(link, &sb), 0);
    assert_true(S_ISLNK(sb.st_mode));
    fsc_st_file *f;
    assert_ok(fsc_st_open(target, &f));
    assert_non_null(fsc_st_find(f, "v"));
    fsc_st_close(f);

    char dangling[256];
    path_in_dir(dangling, sizeof dangling, "dangling.safetensors");
    assert_int_equal(symlink("nowhere/x.safetensors", dangling), 0);
    assert_err(fsc_st_writer_open(dangling, &w), FSC_ERR_INVALID, "a link to nothing");
    unlink(fifo), unlink(link), unlink(target), unlink(dangling);
}

static void touch_file(const char *name) {
    char p[512];
    snprintf(p, sizeof p, "%s/%.200s", g_dir, name);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs("x", f);
    fclose(f);
}

static int present(const char *name) {
    char p[512];
    struct stat st;
    snprintf(p, sizeof p, "%s/%.200s", g_dir, name);
    return lstat(p, &st) == 0;
}

/* Oracle: of the temporary names of writers of w.st (a writer killed before its commit leaves one), exactly
 * those of processes that are gone are removed: not this process's, not a live process's, not a link (its
 * target stays), not another target's, not a name that only starts like one; w.st itself stays. */
static void test_remove_leftovers(void **state) {
    (void)state;
    pid_t gone = fork(), alive;
    if (gone == 0) _exit(0);
    assert_int_equal(waitpid(gone, NULL, 0), gone); /* its pid is free now */
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    if ((alive = fork()) == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* gone with this test, whatever happens to it */
        close(ready[0]);
        for (;;) pause();
    }
    char name[11][96], p[512], target[300];
    long me = (long)getpid();
    snprintf(name[0], 96, "w.st.tmp.%ld.0", (long)gone);   /* removed */
    snprintf(name[1], 96, "w.st.tmp.%ld.17", (long)gone);  /* removed */
    snprintf(name[2], 96, "w.st.tmp.%ld.0", me);           /* this process's */
    snprintf(name[3], 96, "w.st.tmp.%ld.0", (long)alive);  /* a live writer's */
    snprintf(name[4], 96, "v.st.tmp.%ld.0", (long)gone);   /* another target */
    snprintf(name[5], 96, "w.st.tmp.%ld.0.bak", (long)gone);
    snprintf(name[6], 96, "w.st.tmp.%ldx.0", (long)gone);
    snprintf(name[7], 96, "w.st.tmp.%ld", (long)gone);
    snprintf(name[8], 96, "w.st");
    snprintf(name[9], 96, "xw.st.tmp.%ld.0", (long)gone);
    for (int i = 0; i < 10; i++) touch_file(name[i]);
    snprintf(name[10], 96, "w.st.tmp.%ld.5", (long)gone); /* a link: stays, and so does its target */
    snprintf(target, sizeof target, "%s/victim", g_dir);
    touch_file("victim");
    snprintf(p, sizeof p, "%s/%s", g_dir, name[10]);
    assert_int_equal(symlink(target, p), 0);
    int removed = -1;
    snprintf(p, sizeof p, "%s/w.st", g_dir);
    assert_ok(fsc_st_remove_leftovers(p, &removed));
    assert_int_equal(removed, 2);
    for (int i = 0; i < 11; i++)
        if (present(name[i]) != (i >= 2)) fail_msg("%s: %s", name[i], i >= 2 ? "removed" : "left");
    assert_true(present("victim"));
    kill(alive, SIGKILL);
    waitpid(alive, NULL, 0);
    close(ready[0]), close(ready[1]);
    char rel[] = "no-such-dir/w.st"; /* a missing directory holds none */
    assert_ok(fsc_st_remove_leftovers(rel, &removed));
    assert_int_equal(removed, 0);
}

/* A save through a link writes its temporary beside the file the link points to (fsc_st_writer_open): a killed
 * one's leftover is found there from the link's path. Oracle: the leftover of a gone pid beside the target is
 * removed (1), the link and its target stay. */
static void test_remove_leftovers_through_link(void **state) {
    (void)state;
    pid_t gone = fork();
    if (gone == 0) _exit(0);
    assert_int_equal(waitpid(gone, NULL, 0), gone);
    char sub[400], tgt[500], lnk[500], left[600];
    snprintf(sub, sizeof sub, "%s/linked", g_dir);
    assert_int_equal(mkdir(sub, 0755), 0);
    snprintf(tgt, sizeof tgt, "%s/real.st", sub);
    snprintf(lnk, sizeof lnk, "%s/lnk.st", g_dir);
    snprintf(left, sizeof left, "%s.tmp.%ld.0", tgt, (long)gone);
    FILE *fp = fopen(tgt, "wb");
    assert_non_null(fp);
    fclose(fp);
    assert_non_null(fp = fopen(left, "wb"));
    fclose(fp);
    assert_int_equal(symlink(tgt, lnk), 0);
    int removed = -1;
    assert_ok(fsc_st_remove_leftovers(lnk, &removed));
    assert_int_equal(removed, 1);
    assert_int_equal(access(left, F_OK), -1);
    assert_int_equal(access(tgt, F_OK), 0);
    struct stat lb;
    assert_int_equal(lstat(lnk, &lb), 0);
    assert_true(S_ISLNK(lb.st_mode));
    unlink(lnk), unlink(tgt), rmdir(sub);
}

/* Oracle: abort and a refused commit leave nothing behind; commit refuses tensors not fully written. */
static void test_abort_and_incomplete(void **state) {
    (void)state;
    char path[256];
    path_in_dir(path, sizeof path, "inc.safetensors");
    int64_t n = 8;
    float v[8] = {0};
    fsc_st_writer *w;
    assert_ok(fsc_st_writer_open(path, &w));
    fsc_st_writer_abort(w); /* before anything was declared */
    assert_int_equal(count_files("inc.safetensors"), 0);

    assert_ok(fsc_st_writer_open(path, &w));
    assert_ok(fsc_st_writer_add(w, "v", FSC_F32, 1, &n));
    assert_ok(fsc_st_writer_begin_data(w));
    assert_ok(fsc_st_writer_write(w, 0, v, 0, 5));
    assert_err(fsc_st_writer_commit(w), FSC_ERR_STATE, "only 20 of its 32 bytes");
    fsc_st_writer_abort(w);
    assert_false(file_exists(path));
    assert_int_equal(count_files("inc.safetensors"), 0);

    /* A file with no tensors, metadata only, commits without begin_data. */
    assert_ok(fsc_st_writer_open(path, &w));
    assert_ok(fsc_st_writer_meta(w, "k", "v"));
    assert_ok(fsc_st_writer_commit(w));
    fsc_st_file *f;
    assert_ok(fsc_st_open(path, &f));
    assert_int_equal(fsc_st_count(f), 0);
    assert_string_equal(fsc_st_metadata(f, "k"), "v");
    fsc_st_close(f);
    unlink(path);
}

/* Oracle: every misuse of the writer is refused with a message naming it, and the file never appears. */
static void test_writer_misuse(void **state) {
    (void)state;
    char path[256], longname[300];
    path_in_dir(path, sizeof path, "bad.safetensors");
    int64_t s2[5] = {2, 2, 2, 2, 2}, neg = -3, huge[3] = {1ll << 40, 1ll << 40, 1ll << 40};
    fsc_st_writer *w;
    assert_err(fsc_st_writer_open("/nonexistent-dir-fsc/x.safetensors", &w), FSC_ERR_IO, "nonexistent-dir-fsc");
    assert_ok(fsc_st_writer_open(path, &w));
    assert_ok(fsc_st_writer_add(w, "a", FSC_F32, 1, s2));
    assert_err(fsc_st_writer_add(w, "a", FSC_F32, 1, s2), FSC_ERR_INVALID, "added twice");
    memset(longname, 'n', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    assert_err(fsc_st_writer_add(w, longname, FSC_F32, 1, s2), FSC_ERR_INVALID, "longer than");
    assert_err(fsc_st_writer_add(w, "__metadata__", FSC_F32, 1, s2), FSC_ERR_INVALID, "reserved");
    assert_err(fsc_st_writer_add(w, "five", FSC_F32, 5, s2), FSC_ERR_INVALID, "5 dimensions");
    assert_err(fsc_st_writer_add(w, "neg", FSC_F32, 1, &neg), FSC_ERR_INVALID, "size -3");
    assert_err(fsc_st_writer_add(w, "huge", FSC_F32, 3, huge), FSC_ERR_INVALID, "too large");
    assert_err(fsc_st_writer_add(w, "dt", FSC_DTYPE_COUNT, 1, s2), FSC_ERR_INVALID, "dtype");
    assert_ok(fsc_st_writer_meta(w, "k", "v"));
    assert_err(fsc_st_writer_meta(w, "k", "w"), FSC_ERR_INVALID, "given twice");
    /* the header is JSON, in UTF-8: a Latin-1 byte or a cut character is refused, naming where; UTF-8 is kept */
    assert_err(fsc_st_writer_meta(w, "caf\xe9", "x"), FSC_ERR_INVALID,
               "metadata key \"caf...\" is not UTF-8 at byte 3");
    assert_err(fsc_st_writer_meta(w, "k2", "ab\xe2\x82"), FSC_ERR_INVALID, "metadata value \"ab...\" is not UTF-8");
    assert_err(fsc_st_writer_add(w, "w\xff", FSC_F32, 1, s2), FSC_ERR_INVALID, "tensor name \"w...\" is not UTF-8");
    assert_ok(fsc_st_writer_meta(w, "caf\xc3\xa9", "\xe2\x82\xac"));
    assert_err(fsc_st_writer_write(w, 0, s2, 0, 1), FSC_ERR_STATE, "before fsc_st_writer_begin_data");
    assert_ok(fsc_st_writer_begin_data(w));
    assert_err(fsc_st_writer_add(w, "late", FSC_F32, 1, s2), FSC_ERR_STATE, "after the data was begun");
    assert_err(fsc_st_writer_meta(w, "late", "x"), FSC_ERR_STATE, "after the data was begun");
    assert_err(fsc_st_writer_begin_data(w), FSC_ERR_STATE, "already");
    assert_err(fsc_st_writer_write(w, 1, s2, 0, 1), FSC_ERR_INVALID, "out of range");
    assert_err(fsc_st_writer_write(w, 0, s2, 1, 2), FSC_ERR_INVALID, "outside tensor a");
    fsc_st_writer_abort(w);
    assert_false(file_exists(path));
    assert_int_equal(count_files("bad.safetensors"), 0);
}

/* ---- malformed files: each is refused with FSC_ERR_FORMAT (or UNSUPPORTED) and a message naming it ---- */

#define E1(dt, shape, b, e) "{\"t\":{\"dtype\":\"" dt "\",\"shape\":" shape ",\"data_offsets\":[" #b "," #e "]}}"

/* Oracle for the malformed cases below: a message fragment written for exactly that problem. */
static void test_short_file(void **state) {
    (void)state;
    fsc_st_file *f;
    assert_err(fsc_st_parse_buffer("\x02\0\0\0\0", 5, &f), FSC_ERR_FORMAT, "shorter than the 8-byte");
    assert_err(fsc_st_parse_buffer(NULL, 0, &f), FSC_ERR_FORMAT, "0 bytes");
    char path[256];
    path_in_dir(path, sizeof path, "short.safetensors");
    FILE *fp = fopen(path, "wb");
    fwrite("abc", 1, 3, fp);
    fclose(fp);
    { const char *pp = path; assert_err(fsc_st_open(path, &f), FSC_ERR_FORMAT, pp); }
    assert_err(fsc_st_open(path, &f), FSC_ERR_FORMAT, "shorter than the 8-byte");
    unlink(path);
    assert_err(fsc_st_open(path, &f), FSC_ERR_IO, "cannot open");
    assert_err(fsc_st_open(g_dir, &f), FSC_ERR_IO, "not a regular file");
    assert_int_equal(mkfifo(path, 0600), 0); /* opening a FIFO must not wait for a writer */
    assert_err(fsc_st_open(path, &f), FSC_ERR_IO, "not a regular file");
    unlink(path);
}

static void test_header_longer_than_file(void **state) {
    (void)state;
    size_t len;
    uint8_t *b = make_image("{}      ", 0, &len);
    b[0] = 9; /* 9 > the 8 bytes left */
    fsc_st_file *f;
    assert_err(fsc_st_parse_buffer(b, len, &f), FSC_ERR_FORMAT, "larger than the file");
    b[0] = 0; b[5] = 1; /* 2^40 */
    assert_err(fsc_st_parse_buffer(b, len, &f), FSC_ERR_FORMAT, "too large");
    memset(b, 0xff, 8); /* 2^64 - 1 */
    assert_err(fsc_st_parse_buffer(b, len, &f), FSC_ERR_FORMAT, "too large");
    free(b);
}

/* Oracle: Hugging Face's cap. A header of 100,000,001 bytes is refused as "too large", naming its size and
 * the limit, before anything is read or allocated (the file is sparse: 100 MB of nothing); one of exactly
 * 100,000,000 bytes passes the cap (and is then refused only as larger than this small image). */
static void test_header_too_large(void **state) {
    (void)state;
    assert_int_equal(FSC_ST_MAX_HEADER, 100000000u);
    uint8_t b[16] = {0};
    uint64_t n = FSC_ST_MAX_HEADER + 1ull;
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(n >> (8 * i));
    fsc_st_file *f;
    assert_err(fsc_st_parse_buffer(b, sizeof b, &f), FSC_ERR_FORMAT, "too large: 100000001 bytes");
    assert_err(fsc_st_parse_buffer(b, sizeof b, &f), FSC_ERR_FORMAT, "limit of 100000000 bytes");
    char path[256];
    path_in_dir(path, sizeof path, "huge_header.safetensors");
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, b, 8), 8);
    assert_int_equal(ftruncate(fd, (off_t)(8 + n)), 0);
    close(fd);
    assert_err(fsc_st_open(path, &f), FSC_ERR_FORMAT, "too large: 100000001 bytes");
    unlink(path);
    n = FSC_ST_MAX_HEADER;
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(n >> (8 * i));
    assert_err(fsc_st_parse_buffer(b, sizeof b, &f), FSC_ERR_FORMAT, "larger than the file");
}

static void test_header_not_json(void **state) {
    (void)state;
    expect_bad("{\"t\": {\"dtype\": ", 0, FSC_ERR_FORMAT, "not valid JSON");
    expect_bad("", 0, FSC_ERR_FORMAT, "not valid JSON");
    expect_bad("{} x", 0, FSC_ERR_FORMAT, "bytes after its JSON object");
    expect_bad("{}\n \t\r", 0, FSC_OK, NULL); /* trailing whitespace is fine */
}

static void test_header_not_object(void **state) {
    (void)state;
    expect_bad("[1, 2]", 0, FSC_ERR_FORMAT, "not a JSON object");
    expect_bad("\"str\"", 0, FSC_ERR_FORMAT, "not a JSON object");
    expect_bad("{\"t\": 5}", 0, FSC_ERR_FORMAT, "entry t is not a JSON object");
}

static void test_missing_fields(void **state) {
    (void)state;
    expect_bad("{\"t\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, FSC_ERR_FORMAT, "tensor t has no dtype");
    expect_bad("{\"t\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, FSC_ERR_FORMAT, "tensor t has no shape");
    expect_bad("{\"t\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, FSC_ERR_FORMAT, "tensor t has no data_offsets");
    expect_bad("{\"t\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, FSC_ERR_FORMAT, "not a string");
    expect_bad("{\"t\":{\"dtype\":\"F32\",\"shape\":1,\"data_offsets\":[0,4]}}", 4, FSC_ERR_FORMAT, "not an array");
    expect_bad(E1("F32", "[1]", 0, 4) "", 4, FSC_OK, NULL); /* the well-formed version parses */
}

/* An image of one entry t that parses, t unreadable for `why` (dtype FSC_DTYPE_COUNT, no dimensions beyond 4 kept)
 * and a read of it refused with FSC_ERR_UNSUPPORTED and needle. */
static void expect_unreadable(const char *hdr, size_t data_len, const char *why, const char *needle) {
    size_t len;
    uint8_t *b = make_image(hdr, data_len, &len);
    fsc_st_file *f;
    assert_ok(fsc_st_parse_buffer(b, len, &f));
    const fsc_st_entry *e = fsc_st_find(f, "t");
    assert_string_equal(e->unreadable, why);
    assert_int_equal(e->dtype, FSC_DTYPE_COUNT);
    assert_true(e->ndim <= 4);
    unsigned char v[8];
    assert_err(fsc_st_read(f, e, v, 0, 1), FSC_ERR_UNSUPPORTED, needle);
    fsc_st_close(f);
    free(b);
}

static void test_unknown_dtype(void **state) {
    (void)state;
    expect_bad(E1("F33", "[1]", 0, 4), 4, FSC_ERR_FORMAT, "unknown dtype \"F33\"");
    expect_bad(E1("f32", "[1]", 0, 4), 4, FSC_ERR_FORMAT, "unknown dtype");
    /* another valid dtype: the file opens, the entry says why it cannot be read and reading it fails so; its bytes
     * are still checked against its shape where the dtype's size is whole */
    expect_bad(E1("I64", "[1]", 0, 4), 4, FSC_ERR_FORMAT, "dtype I64 (8 bytes) but data_offsets [0, 4] span 4");
    expect_unreadable(E1("F64", "[1]", 0, 8), 8, "dtype F64", "tensor t has dtype F64, which fsc does not read");
    expect_bad(E1("F4", "[3]", 0, 2), 2, FSC_OK, NULL); /* packed under a byte: the layout places its bytes */
}

static void test_bad_dims(void **state) {
    (void)state;
    expect_bad(E1("F32", "[-1]", 0, 4), 4, FSC_ERR_FORMAT, "negative dimension");
    expect_bad(E1("F32", "[1e300]", 0, 4), 4, FSC_ERR_FORMAT, "other than an integer");
    expect_bad(E1("F32", "[1e0]", 0, 4), 4, FSC_ERR_FORMAT, "other than an integer"); /* integers are written so */
    expect_bad(E1("F32", "[1.0]", 0, 4), 4, FSC_ERR_FORMAT, "other than an integer");
    expect_bad(E1("F32", "[99999999999999999999999]", 0, 4), 4, FSC_ERR_FORMAT, "huge dimension");
    expect_bad(E1("F32", "[9007199254740994]", 0, 4), 4, FSC_ERR_FORMAT, "huge dimension");
    expect_bad(E1("F32", "[1.5]", 0, 4), 4, FSC_ERR_FORMAT, "other than an integer");
    expect_bad(E1("F32", "[\"2\"]", 0, 4), 4, FSC_ERR_FORMAT, "other than an integer");
    expect_bad(E1("F32", "[1,1,1,1,-1]", 0, 4), 4, FSC_ERR_FORMAT, "negative dimension"); /* checked all the same */
    expect_unreadable(E1("F32", "[1,1,1,1,1]", 0, 4), 4, "more than 4 dimensions", "tensor t has more than 4 dimensions");
}

static void test_shape_product_overflow(void **state) {
    (void)state;
    /* 2^32 * 2^32 wraps to 0 in 64 bits: a naive product would match the empty data. */
    expect_bad(E1("U8", "[4294967296,4294967296]", 0, 0), 0, FSC_ERR_FORMAT, "too large to address");
    /* 2^63 elements fit 64 bits, their 2^65 bytes do not. */
    expect_bad(E1("F32", "[1125899906842624,8192]", 0, 0), 0, FSC_ERR_FORMAT, "too large to address");
    expect_bad(E1("F32", "[2147483648,2147483648]", 0, 0), 0, FSC_ERR_FORMAT, "too large to address");
}

static void test_size_mismatch(void **state) {
    (void)state;
    expect_bad(E1("F32", "[2,2]", 0, 12), 12, FSC_ERR_FORMAT, "shape [2, 2] and dtype F32 (16 bytes)");
    expect_bad(E1("F32", "[2,2]", 0, 12), 12, FSC_ERR_FORMAT, "span 12 bytes");
    expect_bad(E1("BF16", "[]", 0, 4), 4, FSC_ERR_FORMAT, "(2 bytes)");
}

static void test_bad_offsets(void **state) {
    (void)state;
    expect_bad(E1("F32", "[2]", 0, 8), 4, FSC_ERR_FORMAT, "outside the data section (4 bytes)");
    expect_bad(E1("F32", "[2]", 8, 0), 8, FSC_ERR_FORMAT, "end before they begin");
    expect_bad("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4, FSC_ERR_FORMAT, "two integers");
    expect_bad("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 4, FSC_ERR_FORMAT, "two integers");
    expect_bad("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 4, FSC_ERR_FORMAT, "not integers");
    expect_bad(E1("U8", "[1]", 18446744073709551615, 18446744073709551616), 4, FSC_ERR_FORMAT, "not integers");
}

static void test_overlap(void **state) {
    (void)state;
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
               12, FSC_ERR_FORMAT, "tensor b (bytes 4..12) overlaps tensor a");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
               8, FSC_ERR_FORMAT, "overlaps");
}

static void test_gap_and_trailing(void **state) {
    (void)state;
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
               12, FSC_ERR_FORMAT, "gap in the data section: bytes 4..8");
    expect_bad(E1("F32", "[1]", 4, 8), 8, FSC_ERR_FORMAT, "bytes 0..4 belong to no tensor");
    expect_bad(E1("F32", "[1]", 0, 4), 8, FSC_ERR_FORMAT, "has 8 bytes but the tensors cover only 4");
    expect_bad("{}", 1, FSC_ERR_FORMAT, "cover only 0");
}

static void test_duplicate_names(void **state) {
    (void)state;
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
               "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
               8, FSC_ERR_FORMAT, "tensor name a appears twice");
    expect_bad("{\"__metadata__\":{},\"__metadata__\":{}}", 0, FSC_ERR_FORMAT, "__metadata__ appears twice");
    expect_bad("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0, FSC_ERR_FORMAT, "key \"k\" appears twice");
}

static void test_name_too_long(void **state) {
    (void)state;
    char hdr[512], name[200];
    memset(name, 'x', sizeof name - 1);
    name[sizeof name - 1] = 0;
    snprintf(hdr, sizeof hdr, "{\"%s\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", name);
    expect_bad(hdr, 1, FSC_ERR_FORMAT, "name of 199 bytes");
    name[FSC_ST_MAX_NAME] = 0; /* one byte too long for fsc_st_entry.name */
    snprintf(hdr, sizeof hdr, "{\"%s\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", name);
    expect_bad(hdr, 1, FSC_ERR_FORMAT, "name of 160 bytes");
    name[FSC_ST_MAX_NAME - 1] = 0; /* the longest allowed name */
    snprintf(hdr, sizeof hdr, "{\"%s\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", name);
    expect_bad(hdr, 1, FSC_OK, NULL);
}

static void test_bad_metadata(void **state) {
    (void)state;
    expect_bad("{\"__metadata__\":[1]}", 0, FSC_ERR_FORMAT, "__metadata__ is not a JSON object");
    expect_bad("{\"__metadata__\":{\"k\":1}}", 0, FSC_ERR_FORMAT, "value of \"k\" is not a string");
}

/* Oracle: strict JSON as Hugging Face's parser reads it. Each malformed text is refused as not valid JSON
 * (naming the problem), each hostile but valid one with its own message, and the neighbours parse. */
static void test_strict_json(void **state) {
    (void)state;
#define ENTRY(name) "\"" name "\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}"
    expect_bad("{" ENTRY("a") ",}", 1, FSC_ERR_FORMAT, "not valid JSON (expected a string");   /* trailing comma */
    expect_bad("{\"t\":{\"dtype\":\"U8\",\"shape\":[1,],\"data_offsets\":[0,1]}}", 1, FSC_ERR_FORMAT, "not valid JSON");
    expect_bad("{\"t\":{\"dtype\":\"U8\",\"shape\":[01],\"data_offsets\":[0,1]}}", 1, FSC_ERR_FORMAT, "not valid JSON");
    expect_bad("{\"t\":{\"dtype\":\"U8\",\"shape\":[+1],\"data_offsets\":[0,1]}}", 1, FSC_ERR_FORMAT, "not valid JSON");
    expect_bad("{'t':1}", 0, FSC_ERR_FORMAT, "not valid JSON (expected a string at byte 1");
    expect_bad("{" ENTRY("a\tb") "}", 1, FSC_ERR_FORMAT, "control character");  /* a raw tab in a name */
    expect_bad("{" ENTRY("a\xff") "}", 1, FSC_ERR_FORMAT, "invalid UTF-8");
    expect_bad("{" ENTRY("a\xc0\xaf") "}", 1, FSC_ERR_FORMAT, "invalid UTF-8"); /* overlong '/' */
    expect_bad("{" ENTRY("a\xed\xa0\x80") "}", 1, FSC_ERR_FORMAT, "invalid UTF-8"); /* a surrogate as UTF-8 */
    expect_bad("{" ENTRY("a\\ud800") "}", 1, FSC_ERR_FORMAT, "unpaired surrogate");
    expect_bad("{" ENTRY("a\\udc00\\ud800") "}", 1, FSC_ERR_FORMAT, "unpaired surrogate");
    expect_bad("{" ENTRY("a\\x") "}", 1, FSC_ERR_FORMAT, "invalid escape");
    expect_bad("{" ENTRY("a\\u12") "}", 1, FSC_ERR_FORMAT, "invalid \\u escape");
    expect_bad("{\"t\":tru}", 0, FSC_ERR_FORMAT, "not valid JSON (expected a value at byte 5");
    /* names and metadata are C strings: an escaped NUL is refused rather than cut short */
    expect_bad("{" ENTRY("a\\u0000b") "}", 1, FSC_ERR_FORMAT, "NUL character");
    expect_bad("{\"__metadata__\":{\"k\":\"v\\u0000w\"}}", 0, FSC_ERR_FORMAT, "NUL character");
    expect_bad("{\"t\":{\"dtype\":\"U8\\u0000\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, FSC_ERR_FORMAT, "unknown dtype");
    /* a field given twice is refused (JSON parsers disagree on which one wins) */
    expect_bad("{\"t\":{\"dtype\":\"U8\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, FSC_ERR_FORMAT,
               "field dtype twice");
    /* nesting: 128 levels are read (and skipped in an unknown field), 129 are refused */
    char deep[600];
    for (int levels = 128; levels <= 129; levels++) { /* the root, t, then levels - 2 arrays */
        int k = snprintf(deep, sizeof deep, "{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"x\":");
        for (int i = 0; i < levels - 2; i++) deep[k++] = '[';
        for (int i = 0; i < levels - 2; i++) deep[k++] = ']';
        snprintf(deep + k, sizeof deep - (size_t)k, "}}");
        if (levels == 128) expect_bad(deep, 1, FSC_OK, NULL);
        else expect_bad(deep, 1, FSC_ERR_FORMAT, "nested too deeply");
    }
    /* the neighbours: escapes and UTF-8 decode to the name, unknown fields of any type are skipped */
    size_t len;
    uint8_t *b = make_image("{\"a\\u00e9\\ud83d\\ude00\\n\\/\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],"
                            "\"extra\":{\"k\":[1,-2.5e3,true,false,null,\"s\"]}},"
                            "\"\xc3\xa9\":{\"data_offsets\":[1,2],\"shape\":[],\"dtype\":\"U8\"}}", 2, &len);
    fsc_st_file *f;
    assert_ok(fsc_st_parse_buffer(b, len, &f));
    assert_non_null(fsc_st_find(f, "a\xc3\xa9\xf0\x9f\x98\x80\n/"));
    assert_non_null(fsc_st_find(f, "\xc3\xa9"));
    fsc_st_close(f);
    free(b);
#undef ENTRY
}

/* ---- memory: what parsing may allocate, in proportion to the bytes read ---- */

/* The test's malloc family stands in for the C library's and counts the bytes the heap holds (sanitizer
 * builds keep their own allocator and skip the measurement). */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define COUNT_HEAP 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define COUNT_HEAP 0
#endif
#endif
#ifndef COUNT_HEAP
#define COUNT_HEAP 1
#endif

#if COUNT_HEAP
#include <malloc.h>
#include <stdatomic.h>
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);
static _Atomic long long heap_now, heap_peak;

static void heap_add(long long d) {
    long long now = atomic_fetch_add(&heap_now, d) + d, peak = atomic_load(&heap_peak);
    while (now > peak && !atomic_compare_exchange_weak(&heap_peak, &peak, now)) {}
}
void *malloc(size_t n) {
    void *p = __libc_malloc(n);
    if (p) heap_add((long long)malloc_usable_size(p));
    return p;
}
void *calloc(size_t a, size_t n) {
    void *p = __libc_calloc(a, n);
    if (p) heap_add((long long)malloc_usable_size(p));
    return p;
}
void *realloc(void *p, size_t n) {
    long long old = p ? (long long)malloc_usable_size(p) : 0;
    void *q = __libc_realloc(p, n);
    if (q) heap_add((long long)malloc_usable_size(q) - old);
    else if (!n) heap_add(-old);
    return q;
}
void free(void *p) {
    if (p) heap_add(-(long long)malloc_usable_size(p));
    __libc_free(p);
}
#endif

/* The most the heap held above its level before, while parsing image b (len bytes). */
static long long parse_peak(const uint8_t *b, size_t len, fsc_status *st) {
#if COUNT_HEAP
    atomic_store(&heap_peak, atomic_load(&heap_now));
    long long base = atomic_load(&heap_now);
#endif
    fsc_st_file *f = NULL;
    *st = fsc_st_parse_buffer(b, len, &f);
#if COUNT_HEAP
    long long peak = atomic_load(&heap_peak) - base;
#else
    long long peak = 0;
#endif
    fsc_st_close(f);
    return peak;
}

/* A header of about `bytes` made of `unit` repeated (with "%d" replaced by a counter), between head and
 * tail, as a file image with data_len bytes of data. */
static uint8_t *hostile_image(const char *head, const char *unit, const char *tail, size_t bytes, size_t data_len,
                              size_t *len, int *count) {
    size_t cap = bytes + 256;
    char *h = malloc(cap);
    assert_non_null(h);
    size_t k = (size_t)snprintf(h, cap, "%s", head);
    int i = 0;
    while (k + 64 + strlen(tail) < bytes) {
        if (i) h[k++] = ',';
        k += (size_t)snprintf(h + k, cap - k, unit, i, i);
        i++;
    }
    snprintf(h + k, cap - k, "%s", tail);
    uint8_t *b = make_image(h, data_len, len);
    free(h);
    *count = i;
    return b;
}

/* Oracle: parsing an image of L bytes allocates at most 6 L (the copy the file keeps, entries of 216 bytes
 * for at least 49 bytes of text each, their sort), whatever the header holds: arrays of numbers (a JSON
 * tree takes 80 bytes for each 2), thousands of empty members (each once bought a 216-byte entry for 7
 * bytes of text), metadata pairs and valid entries. Each hostile header is refused with its own message
 * (or parses, for the valid entries), quickly. */
static void test_hostile_headers_memory(void **state) {
    (void)state;
    const size_t MB = 1 << 20;
    struct { const char *head, *unit, *tail; fsc_status st; const char *needle; } cases[] = {
        { "{\"a\":[", "0", "]}", FSC_ERR_FORMAT, "entry a is not a JSON object" },
        { "{\"a\":{\"x\":[", "[]", "]}}", FSC_ERR_FORMAT, "tensor a has no dtype" },
        { "{", "\"%d\":{}", "}", FSC_ERR_FORMAT, "tensor 0 has no dtype" },
        { "{", "\"%d\":{\"dtype\":\"U8\",\"shape\":[1]}", "}", FSC_ERR_FORMAT, "tensor 0 has no data_offsets" },
        { "{\"__metadata__\":{", "\"%d\":\"\"", "}}", FSC_OK, NULL },
        { "{", "\"%d\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}", "}", FSC_OK, NULL },
        { "{", "\"%d\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[%d,0]}", "}", FSC_ERR_FORMAT, "data_offsets [1, 0] of tensor 1 end before" },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        size_t len;
        int count;
        uint8_t *b = hostile_image(cases[c].head, cases[c].unit, cases[c].tail, 8 * MB, 0, &len, &count);
        assert_true(count > 1000);
        fsc_status st;
        long long peak = parse_peak(b, len, &st);
        if (st != cases[c].st || (cases[c].needle && !strstr(fsc_last_error(), cases[c].needle)))
            fail_msg("case %zu: %s: %s", c, fsc_status_str(st), st ? fsc_last_error() : "ok");
        if (peak > 6 * (long long)len)
            fail_msg("case %zu (\"%s\" x %d): parsing %zu bytes took %lld bytes of heap", c, cases[c].unit, count, len,
                     peak);
        free(b);
    }
#if !COUNT_HEAP
    /* the parse results above were checked; the heap is not measured under a sanitizer */
    print_message("skipped: the heap bound is not measured under a sanitizer (its allocator is not counted)\n");
    skip();
#endif
}

/* Oracle: a well-formed image with metadata, an empty tensor and trailing header whitespace parses, and
 * its data can be read after the caller's buffer is gone. */
static void test_wellformed_neighbours(void **state) {
    (void)state;
    size_t len;
    uint8_t *b = make_image("{\"__metadata__\":{\"format\":\"pt\"},"
                            "\"z\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]},"
                            "\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}  \n",
                            2, &len);
    fsc_st_file *f;
    assert_ok(fsc_st_parse_buffer(b, len, &f));
    free(b); /* the parsed file keeps its own copy */
    uint8_t v[2];
    assert_ok(fsc_st_read(f, fsc_st_find(f, "a"), v, 0, 2));
    assert_int_equal(v[0], 0);
    assert_int_equal(v[1], 1);
    fsc_st_close(f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_all_dtypes),
        cmocka_unit_test(test_partial_reads),
        cmocka_unit_test(test_golden_file),
        cmocka_unit_test(test_commit_is_atomic),
        cmocka_unit_test(test_writer_path_not_regular),
        cmocka_unit_test(test_abort_and_incomplete),
        cmocka_unit_test(test_remove_leftovers),
        cmocka_unit_test(test_remove_leftovers_through_link),
        cmocka_unit_test(test_writer_misuse),
        cmocka_unit_test(test_short_file),
        cmocka_unit_test(test_header_longer_than_file),
        cmocka_unit_test(test_header_too_large),
        cmocka_unit_test(test_header_not_json),
        cmocka_unit_test(test_header_not_object),
        cmocka_unit_test(test_missing_fields),
        cmocka_unit_test(test_unknown_dtype),
        cmocka_unit_test(test_bad_dims),
        cmocka_unit_test(test_shape_product_overflow),
        cmocka_unit_test(test_size_mismatch),
        cmocka_unit_test(test_bad_offsets),
        cmocka_unit_test(test_overlap),
        cmocka_unit_test(test_gap_and_trailing),
        cmocka_unit_test(test_duplicate_names),
        cmocka_unit_test(test_name_too_long),
        cmocka_unit_test(test_bad_metadata),
        cmocka_unit_test(test_strict_json),
        cmocka_unit_test(test_hostile_headers_memory),
        cmocka_unit_test(test_wellformed_neighbours),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
