/* Corrupted, truncated, malformed and edited checkpoints are refused with a message naming the file, the
 * field and the tensor.
 * Oracle: a good checkpoint (fsdp full_shard on 2 ranks: two shard files) verifies and loads; each damage
 * below makes verify (fsc_ckpt_verify, then the GPT's fsc_gpt_check_tensors, as ckpt_tool verify does) and
 * fsc_ckpt_load (on every rank of a new engine) fail with the stated status and a message that contains the
 * damaged file's name and, where one is involved, the tensor's or the field's: truncated files, a flipped
 * data byte, a missing shard, metadata.json truncated or missing, any edit of metadata.json that does not
 * recompute its checksum (metadata_crc32), and edits that do,
 * each caught by the field's second source: wrong shapes and tensor sets against the model configuration,
 * ranges that do not cover a tensor or overlap, an unknown dtype, a wrong piece checksum, a path as a file
 * name, an unknown version, a swapped entry, the step against the directory name, optim_steps and the
 * scaler's counts against the step, file names against the world size, the world against tp. Checkpoints
 * of another model or optimizer verify but do not load into this engine. With a model configuration that
 * is not the GPT's (model.h's config), the tensor set is checked against itself: every optimizer state
 * of a parameter the checkpoint holds, with its shape, and every parameter with every state. */
#include <cjson/cJSON.h>
#include <zlib.h>
#include "ckpttest.h"

typedef ct_fixture fixture;

static ct_job job(void) { return ct_fsdp(2, FSC_SHARD_FULL); }

static void spit(const char *path, const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, n, f), n);
    fclose(f);
}

/* A copy of the good checkpoint in a fresh DIR; *ck receives DIR/step-00000001 (caller frees dir). */
static char *copy_good(const fixture *f, char *ck, size_t cap) {
    char *dir = ct_tmpdir();
    ct_step_path(ck, cap, dir, 1);
    assert_int_equal(mkdir(ck, 0777), 0);
    const char *names[] = { "metadata.json", "rank-00000-of-00002.safetensors", "rank-00001-of-00002.safetensors" };
    for (int i = 0; i < 3; i++) {
        char a[700], b[700];
        size_t n;
        snprintf(a, sizeof a, "%s/%s", f->path, names[i]);
        snprintf(b, sizeof b, "%s/%s", ck, names[i]);
        char *data = ct_slurp(a, &n);
        assert_non_null(data);
        spit(b, data, n);
        free(data);
    }
    return dir;
}

/* What ckpt_tool verify runs: fsc_ckpt_verify (the GPT's check of the parameters against the recorded
 * configuration among its checks) */
static fsc_status verify(const char *ck, fsc_ckpt_meta **out) {
    fsc_ckpt_meta *m = NULL;
    fsc_status s = fsc_ckpt_verify(ck, &m);
    if (out && s == FSC_OK) *out = m;
    else fsc_ckpt_meta_free(m);
    return s;
}

/* verify (the library's and the GPT's checks) and load must both fail with st and a message holding every
 * needle */
static void expect_refused(const char *ck, fsc_status st, const char *n1, const char *n2) {
    fsc_status s = verify(ck, NULL);
    if (s != st) fail_msg("verify: %s (expected %s): %s", fsc_status_str(s), fsc_status_str(st), fsc_last_error());
    if (!strstr(fsc_last_error(), n1) || (n2 && !strstr(fsc_last_error(), n2)))
        fail_msg("verify: message \"%s\" lacks \"%s\" or \"%s\"", fsc_last_error(), n1, n2 ? n2 : "");
    ct_job j = job();
    j.load = ck;
    s = ct_try(&j);
    if (s != st) fail_msg("load: %s (expected %s): %s", fsc_status_str(s), fsc_status_str(st), fsc_last_error());
    if (!strstr(fsc_last_error(), n1) || (n2 && !strstr(fsc_last_error(), n2)))
        fail_msg("load: message \"%s\" lacks \"%s\" or \"%s\"", fsc_last_error(), n1, n2 ? n2 : "");
    ct_free(&j);
}

static void test_ckpt_good_verifies_and_loads(void **state) {
    fixture *f = *state;
    fsc_ckpt_meta *m = NULL;
    assert_ok(verify(f->path, &m));
    assert_int_equal(m->nfiles, 2);
    const ct_job g = job();
    assert_int_equal(m->ntensors, 3 * fsc_gpt_num_tensors(&g.run.cfg));
    fsc_ckpt_meta_free(m);
    ct_job j = job();
    j.load = f->path;
    ct_run(&j);
    ct_free(&j);
}

/* A safetensors file's header length: its first 8 bytes, little-endian. */
static uint64_t header_len(const char *b) {
    uint64_t n = 0;
    for (int i = 0; i < 8; i++) n |= (uint64_t)(uint8_t)b[i] << (8 * i);
    return n;
}

static void test_ckpt_truncated_shard(void **state) {
    char ck[600], p[700];
    char *dir = copy_good(*state, ck, sizeof ck);
    snprintf(p, sizeof p, "%s/rank-00001-of-00002.safetensors", ck);
    size_t n;
    char *b = ct_slurp(p, &n);
    spit(p, b, n - 100); /* the tail of the last tensor's data is gone */
    expect_refused(ck, FSC_ERR_FORMAT, "rank-00001-of-00002.safetensors", "optim.v.");
    spit(p, b, 5); /* not even the header length */
    expect_refused(ck, FSC_ERR_FORMAT, "rank-00001-of-00002.safetensors", NULL);
    free(b);
    ct_rmtree(dir);
}

/* flip one byte inside the data of entry k of a shard; the message names that tensor */
static void test_ckpt_flipped_byte(void **state) {
    char ck[600], p[700];
    char *dir = copy_good(*state, ck, sizeof ck);
    snprintf(p, sizeof p, "%s/rank-00000-of-00002.safetensors", ck);
    fsc_st_file *sf;
    assert_ok(fsc_st_open(p, &sf));
    const fsc_st_entry *e = fsc_st_entry_at(sf, 5);
    char tensor[FSC_ST_MAX_NAME];
    snprintf(tensor, sizeof tensor, "%s", e->name);
    *strchr(tensor, '@') = 0;
    uint64_t begin = e->begin;
    fsc_st_close(sf);
    size_t n;
    char *b = ct_slurp(p, &n);
    const uint64_t hlen = header_len(b);
    b[8 + hlen + begin + 3] ^= 0x10;
    spit(p, b, n);
    free(b);
    char needle[FSC_ST_MAX_NAME + 8];
    snprintf(needle, sizeof needle, "tensor %s,", tensor);
    expect_refused(ck, FSC_ERR_FORMAT, "rank-00000-of-00002.safetensors", needle);
    assert_non_null(strstr(fsc_last_error(), "checksum"));
    ct_rmtree(dir);
}

/* A shard holding an entry that no piece of the metadata names: verify refused it, and now load does too (it
 * loaded the pieces and said nothing, so a resume took a checkpoint verify calls damaged). */
static void test_ckpt_stray_entry(void **state) {
    char ck[600], p[700];
    char *dir = copy_good(*state, ck, sizeof ck);
    snprintf(p, sizeof p, "%s/rank-00000-of-00002.safetensors", ck);
    size_t n;
    char *b = ct_slurp(p, &n);
    const uint64_t hlen = header_len(b);
    cJSON *h = cJSON_ParseWithLength(b + 8, (size_t)hlen);
    assert_non_null(h);
    const size_t data = n - 8 - (size_t)hlen;
    cJSON *e = cJSON_AddObjectToObject(h, "extra@0");
    cJSON_AddStringToObject(e, "dtype", "F32");
    cJSON_AddItemToObject(e, "shape", cJSON_CreateIntArray((const int[]){ 1 }, 1));
    cJSON_AddItemToObject(e, "data_offsets", cJSON_CreateDoubleArray((const double[]){ (double)data, (double)data + 4 }, 2));
    char *text = cJSON_PrintUnformatted(h);
    size_t tl = strlen(text), padded = (tl + 7) / 8 * 8;
    char *out = calloc(8 + padded + data + 4, 1);
    assert_non_null(out);
    for (int i = 0; i < 8; i++) out[i] = (char)(padded >> (8 * i));
    memset(out + 8, ' ', padded), memcpy(out + 8, text, tl);
    memcpy(out + 8 + padded, b + 8 + hlen, data);
    spit(p, out, 8 + padded + data + 4);
    expect_refused(ck, FSC_ERR_FORMAT, "rank-00000-of-00002.safetensors", "entry extra@0 is in no piece");
    free(out), free(text), free(b);
    cJSON_Delete(h);
    ct_rmtree(dir);
}

static void test_ckpt_missing_shard(void **state) {
    char ck[600], p[700];
    char *dir = copy_good(*state, ck, sizeof ck);
    snprintf(p, sizeof p, "%s/rank-00001-of-00002.safetensors", ck);
    assert_int_equal(unlink(p), 0);
    expect_refused(ck, FSC_ERR_IO, "rank-00001-of-00002.safetensors", NULL);
    /* the load's message also says which tensor needed it */
    assert_non_null(strstr(fsc_last_error(), "loading tensor"));
    snprintf(p, sizeof p, "%s/metadata.json", ck);
    assert_int_equal(unlink(p), 0);
    expect_refused(ck, FSC_ERR_IO, "metadata.json", NULL);
    ct_rmtree(dir);
}

/* ---- metadata edits ---- */

/* The rule of docs/checkpoints.md, independently of the library: metadata_crc32, the first member, is
 * zlib's crc32 of the text with its 8 hex digits read as "00000000". */
static void reseal(char *text) { test_reseal_metadata(text); }

typedef void (*edit_fn)(cJSON *root);

/* A copy of the good checkpoint (copy_good) whose metadata fn edits, its checksum recomputed when sealed. */
static char *edit_good(const fixture *f, char *ck, size_t cap, edit_fn fn, int sealed) {
    char *dir = copy_good(f, ck, cap), p[700];
    snprintf(p, sizeof p, "%s/metadata.json", ck);
    size_t n;
    char *text = ct_slurp(p, &n);
    cJSON *root = cJSON_ParseWithLength(text, n);
    assert_non_null(root);
    fn(root);
    char *out = cJSON_Print(root);
    if (sealed) reseal(out);
    spit(p, out, strlen(out));
    free(out);
    cJSON_Delete(root);
    free(text);
    return dir;
}

static cJSON *tensor_named(cJSON *root, const char *name) {
    cJSON *t;
    cJSON_ArrayForEach(t, cJSON_GetObjectItem(root, "tensors"))
        if (!strcmp(cJSON_GetObjectItem(t, "name")->valuestring, name)) return t;
    fail_msg("no tensor %s", name);
    return NULL;
}
static cJSON *piece(cJSON *root, const char *name, int k) {
    return cJSON_GetArrayItem(cJSON_GetObjectItem(tensor_named(root, name), "pieces"), k);
}
static void set_num(cJSON *o, const char *key, double v) { cJSON_SetNumberValue(cJSON_GetObjectItem(o, key), v); }

static void e_shape(cJSON *r) { /* same element count, another shape */
    cJSON *sh = cJSON_GetObjectItem(tensor_named(r, "wte.weight"), "shape");
    double a = cJSON_GetArrayItem(sh, 0)->valuedouble, b = cJSON_GetArrayItem(sh, 1)->valuedouble;
    cJSON_SetNumberValue(cJSON_GetArrayItem(sh, 0), b);
    cJSON_SetNumberValue(cJSON_GetArrayItem(sh, 1), a);
}
/* the first tensor split over both ranks (its name goes to split_name, the needle of the cases below) */
static char split_name[FSC_ST_MAX_NAME];
static cJSON *split_tensor(cJSON *root) {
    cJSON *t;
    cJSON_ArrayForEach(t, cJSON_GetObjectItem(root, "tensors"))
        if (cJSON_GetArraySize(cJSON_GetObjectItem(t, "pieces")) == 2) {
            snprintf(split_name, sizeof split_name, "%s", cJSON_GetObjectItem(t, "name")->valuestring);
            return t;
        }
    fail_msg("no tensor has two pieces");
    return NULL;
}
static void e_gap(cJSON *r) { cJSON_DeleteItemFromArray(cJSON_GetObjectItem(split_tensor(r), "pieces"), 1); }
static void e_overlap(cJSON *r) {
    cJSON *p = cJSON_GetArrayItem(cJSON_GetObjectItem(split_tensor(r), "pieces"), 0);
    set_num(p, "n", cJSON_GetObjectItem(p, "n")->valuedouble + 1);
}
static void e_dtype(cJSON *r) { cJSON_ReplaceItemInObject(tensor_named(r, "ln_f.bias"), "dtype", cJSON_CreateString("F64")); }
static void e_crc(cJSON *r) {
    cJSON *p = piece(r, "optim.m.wpe.weight", 0);
    set_num(p, "crc32", (double)((uint32_t)cJSON_GetObjectItem(p, "crc32")->valuedouble ^ 1u));
}
static void e_path(cJSON *r) { cJSON_ReplaceItemInArray(cJSON_GetObjectItem(r, "files"), 1, cJSON_CreateString("../x.safetensors")); }
static void e_model(cJSON *r) { set_num(cJSON_GetObjectItem(r, "model"), "layers", 3); }
static void e_optim(cJSON *r) {
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(r, "optimizer"), "kind", cJSON_CreateString("sgd"));
}
static void e_version(cJSON *r) { set_num(r, "version", 3); }
static void e_step(cJSON *r) { set_num(r, "step", 2); } /* in step-00000001 */
static void e_optim_steps(cJSON *r) { set_num(r, "optim_steps", 1e9); }
static void e_scaler(cJSON *r) { /* one skipped step, but step == optim_steps */
    cJSON *sc = cJSON_GetObjectItem(r, "scaler");
    cJSON_ReplaceItemInObject(sc, "enabled", cJSON_CreateTrue());
    set_num(sc, "skipped", 1);
}
static void e_scaler_factor(cJSON *r) { /* a scaler that would grow by -2 (a resume takes its factors) */
    cJSON *sc = cJSON_GetObjectItem(r, "scaler");
    cJSON_ReplaceItemInObject(sc, "enabled", cJSON_CreateTrue());
    set_num(sc, "growth_factor", -2);
}
static void e_world(cJSON *r) { set_num(cJSON_GetObjectItem(r, "parallel"), "world", 3); }
static void e_tp(cJSON *r) { set_num(cJSON_GetObjectItem(r, "parallel"), "tp", 4); }
static void e_ep(cJSON *r) { set_num(cJSON_GetObjectItem(r, "parallel"), "ep", 3); }
static void e_no_ep(cJSON *r) { cJSON_DeleteItemFromObject(cJSON_GetObjectItem(r, "parallel"), "ep"); }
static void e_file_name(cJSON *r) {
    cJSON_ReplaceItemInArray(cJSON_GetObjectItem(r, "files"), 1, cJSON_CreateString("rank-00001-of-00002.st"));
}
static void e_run_id(cJSON *r) { cJSON_ReplaceItemInObject(r, "run_id", cJSON_CreateString("not-a-run")); }
static void e_dim(cJSON *r) { set_num(cJSON_GetObjectItem(r, "model"), "dim", 32); }
static void e_entry(cJSON *r) { /* two pieces of different sizes swap their entries */
    cJSON *a = piece(r, "wte.weight", 0), *b = NULL, *t, *p;
    double fa = cJSON_GetObjectItem(a, "file")->valuedouble, na = cJSON_GetObjectItem(a, "n")->valuedouble;
    cJSON_ArrayForEach(t, cJSON_GetObjectItem(r, "tensors")) cJSON_ArrayForEach(p, cJSON_GetObjectItem(t, "pieces"))
        if (!b && cJSON_GetObjectItem(p, "file")->valuedouble == fa && cJSON_GetObjectItem(p, "n")->valuedouble != na) b = p;
    assert_non_null(b);
    char *ea = strdup(cJSON_GetObjectItem(a, "entry")->valuestring);
    cJSON_ReplaceItemInObject(a, "entry", cJSON_CreateString(cJSON_GetObjectItem(b, "entry")->valuestring));
    cJSON_ReplaceItemInObject(b, "entry", cJSON_CreateString(ea));
    free(ea);
}
static void e_file_index(cJSON *r) { set_num(piece(r, "h.0.ln_1.bias", 0), "file", 7); }
static void e_no_tensor(cJSON *r) {
    cJSON *ts = cJSON_GetObjectItem(r, "tensors");
    cJSON *t;
    int i = 0;
    cJSON_ArrayForEach(t, ts) {
        if (!strcmp(cJSON_GetObjectItem(t, "name")->valuestring, "optim.v.ln_f.weight")) break;
        i++;
    }
    cJSON_DeleteItemFromArray(ts, i);
}

/* Each edit, written back with its checksum recomputed (sealed) or not, is refused by verify and load. */
static void test_ckpt_bad_metadata(void **state) {
    fixture *f = *state;
    const struct { edit_fn fn; fsc_status st; const char *n1, *n2; int sealed; } cases[] = {
        { e_step, FSC_ERR_FORMAT, "metadata.json", "metadata_crc32", 0 }, /* any edit by hand */
        { e_optim_steps, FSC_ERR_FORMAT, "metadata.json", "metadata_crc32", 0 },
        { e_shape, FSC_ERR_FORMAT, "wte.weight", "has [24, 50]", 1 }, /* against its states, first */
        { e_gap, FSC_ERR_FORMAT, split_name, "in no piece", 1 },
        { e_overlap, FSC_ERR_FORMAT, split_name, "overlap", 1 },
        { e_dtype, FSC_ERR_FORMAT, "ln_f.bias", "F64", 1 },
        { e_crc, FSC_ERR_FORMAT, "optim.m.wpe.weight", "checksum", 1 },
        { e_path, FSC_ERR_FORMAT, "metadata.json", "plain file name", 1 },
        { e_model, FSC_ERR_FORMAT, "metadata.json", "tensor h.2.", 1 },
        { e_dim, FSC_ERR_FORMAT, "wte.weight", "makes it [50, 32]", 1 },
        { e_optim, FSC_ERR_FORMAT, "optim.m.", "optimizer sgd", 1 },
        { e_version, FSC_ERR_UNSUPPORTED, "metadata.json", "version 3", 1 },
        { e_entry, FSC_ERR_FORMAT, "wte.weight", "names entry", 1 },
        { e_file_index, FSC_ERR_FORMAT, "h.0.ln_1.bias", "file 7", 1 },
        { e_no_tensor, FSC_ERR_FORMAT, "metadata.json", "has no tensor optim.v.ln_f.weight", 1 },
        { e_step, FSC_ERR_FORMAT, "step = 2", "directory is step-00000001", 1 },
        { e_optim_steps, FSC_ERR_FORMAT, "optim_steps = 1000000000", "step = 1", 1 },
        { e_scaler, FSC_ERR_FORMAT, "scaler.skipped = 1", "step - optim_steps = 0", 1 },
        { e_scaler_factor, FSC_ERR_FORMAT, "scaler.growth_factor = -2", "not a loss scaler's", 1 },
        { e_world, FSC_ERR_FORMAT, "rank-00000-of-00002.safetensors", "parallel.world = 3", 1 },
        { e_tp, FSC_ERR_FORMAT, "parallel.world = 2", "parallel.tp = 4", 1 },
        { e_ep, FSC_ERR_FORMAT, "parallel.ep = 3", "does not divide the 2 data ranks", 1 },
        { e_file_name, FSC_ERR_FORMAT, "rank-00001-of-00002.st", "shard name", 1 },
        { e_run_id, FSC_ERR_FORMAT, "metadata.json", "run_id", 1 },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char ck[600];
        char *dir = edit_good(f, ck, sizeof ck, cases[c].fn, cases[c].sealed);
        expect_refused(ck, cases[c].st, cases[c].n1, cases[c].n2);
        ct_rmtree(dir);
    }
    /* the record keeps the writer's ep (1 here); one written before it kept it verifies, as written with ep 1 */
    char ck[600];
    fsc_ckpt_meta *m = NULL;
    assert_int_equal(fsc_ckpt_verify(f->path, &m), FSC_OK);
    assert_int_equal(m->ep, 1);
    fsc_ckpt_meta_free(m);
    char *dir = edit_good(f, ck, sizeof ck, e_no_ep, 1);
    if (fsc_ckpt_verify(ck, &m) != FSC_OK) fail_msg("no parallel.ep: %s", fsc_last_error());
    assert_int_equal(m->ep, 1);
    fsc_ckpt_meta_free(m);
    ct_rmtree(dir);
}

/* Checkpoints of another model or optimizer are sound (verify accepts them) but not this engine's: another SGD
 * momentum, with buffers on one side only, is named as such (it was "malformed data: has no tensor"). */
static void test_ckpt_other_model_or_optimizer(void **state) {
    (void)state;
    static const char *const why[4] = { "written for a model of 3 layers", "written with optimizer sgd",
                                        "written with sgd momentum 0.9 (with momentum buffers); this engine uses "
                                        "momentum 0 (none)",
                                        "written with sgd momentum 0 (no momentum buffers); this engine uses momentum "
                                        "0.5 (with them)" };
    for (int k = 0; k < 4; k++) {
        char *dir = ct_tmpdir(), ck[600];
        ct_job o = job();
        const fsc_optim_config sgd = { .kind = FSC_OPT_SGD, .lr = 0.05f };
        if (k == 0) o.run.cfg.layers += 1;
        else o.run.oc = sgd, o.run.oc.momentum = k == 3 ? 0.0f : 0.9f;
        o.to = 1;
        o.save_dir = dir;
        ct_run(&o);
        ct_step_path(ck, sizeof ck, dir, 1);
        assert_ok(verify(ck, NULL));
        ct_job j = job();
        if (k >= 2) j.run.oc = sgd, j.run.oc.momentum = k == 2 ? 0.0f : 0.5f;
        j.load = ck;
        assert_err(ct_try(&j), FSC_ERR_INVALID, why[k]);
        ct_free(&o);
        ct_free(&j);
        ct_rmtree(dir);
    }
}

/* A model whose configuration the checkpoint cannot read (model.h's config of a Llama, a sequential model,
 * a program's own): its tensors are checked against one another, every optimizer state against its
 * parameter, and against the model itself at load. The good checkpoint with another model's configuration
 * (sealed) verifies but loads into no GPT, which names the recorded family; each edit below is refused by
 * verify and load. */
static void m_other(cJSON *r) {
    cJSON_ReplaceItemInObject(r, "model", cJSON_Parse("{\"family\":\"mine\",\"layers\":2,\"width\":24}"));
}
/* another model that names no family (as the GPT does not) */
static void m_other_unnamed(cJSON *r) {
    cJSON_ReplaceItemInObject(r, "model", cJSON_Parse("{\"layers\":2,\"width\":24}"));
}
static void m_no_state(cJSON *r) { m_other(r), e_no_tensor(r); }
static void m_state_shape(cJSON *r) {
    m_other(r);
    cJSON *sh = cJSON_GetObjectItem(tensor_named(r, "optim.m.wte.weight"), "shape");
    double a = cJSON_GetArrayItem(sh, 0)->valuedouble, b = cJSON_GetArrayItem(sh, 1)->valuedouble;
    cJSON_SetNumberValue(cJSON_GetArrayItem(sh, 0), b);
    cJSON_SetNumberValue(cJSON_GetArrayItem(sh, 1), a);
}
static void m_no_param(cJSON *r) {
    m_other(r);
    cJSON *ts = cJSON_GetObjectItem(r, "tensors"), *t;
    int i = 0;
    cJSON_ArrayForEach(t, ts) {
        if (!strcmp(cJSON_GetObjectItem(t, "name")->valuestring, "ln_f.bias")) break;
        i++;
    }
    cJSON_DeleteItemFromArray(ts, i);
}
static void m_unknown_state(cJSON *r) {
    m_other(r);
    cJSON_ReplaceItemInObject(tensor_named(r, "ln_f.bias"), "name", cJSON_CreateString("optim.w.ln_f.bias"));
}

static void test_ckpt_other_model_config(void **state) {
    fixture *f = *state;
    const struct { edit_fn fn; const char *n1, *n2; } cases[] = {
        { m_other, NULL, NULL },
        { m_other_unnamed, NULL, NULL },
        { m_no_state, "has no tensor optim.v.ln_f.weight", "parameter ln_f.weight" },
        { m_state_shape, "optim.m.wte.weight has shape [24, 50]", "its parameter wte.weight has [50, 24]" },
        { m_no_param, "optim.m.ln_f.bias is a state of parameter ln_f.bias", "does not hold" },
        { m_unknown_state, "optim.w.ln_f.bias", "neither a parameter nor a state of optimizer adamw" },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char ck[600];
        char *dir = edit_good(f, ck, sizeof ck, cases[c].fn, 1);
        if (cases[c].n1) {
            expect_refused(ck, FSC_ERR_FORMAT, cases[c].n1, cases[c].n2);
        } else {
            fsc_ckpt_meta *m = NULL;
            assert_ok(verify(ck, &m));
            const int named = cases[c].fn == m_other;
            assert_non_null(strstr(m->model_config, named ? "\"family\":\"mine\"" : "\"width\":24"));
            fsc_ckpt_meta_free(m);
            ct_job j = job();
            j.load = ck;
            assert_err(ct_try(&j), FSC_ERR_INVALID,
                       named ? "written for a model of family 'mine' (load it into that model); this engine's model "
                               "is a GPT-2 (family gpt2)"
                             : "written for a model of 2 layers, width 0");
            ct_free(&j);
        }
        ct_rmtree(dir);
    }
}

/* A record of another built-in family (a Llama's configuration over the GPT's tensors) is checked against the model
 * that configuration builds: verify names a tensor the Llama declares and the checkpoint lacks (before, only a
 * GPT's record was checked). */
static void m_llama(cJSON *r) {
    cJSON_ReplaceItemInObject(r, "model", cJSON_Parse("{\"family\":\"llama\",\"layers\":1,\"dim\":16,\"heads\":2,"
                                                      "\"kv_heads\":2,\"ffn\":32,\"seq\":8,\"vocab\":64,"
                                                      "\"rope_theta\":10000,\"norm_eps\":1e-05}"));
}

/* A Llama's record its family refuses (a field missing or out of range): no model loads it, so verify calls it
 * damaged, as it does a GPT's record out of range (before: "ok", the model not built and so not checked). */
static void m_llama_bad_field(cJSON *r) {
    cJSON_ReplaceItemInObject(r, "model", cJSON_Parse("{\"family\":\"llama\",\"layers\":\"x\"}"));
}
static void m_llama_huge_vocab(cJSON *r) {
    m_llama(r);
    cJSON_SetNumberValue(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "model"), "vocab"), 1073741824.0);
}

static void test_ckpt_llama_record_checked(void **state) {
    char ck[600];
    char *dir = edit_good(*state, ck, sizeof ck, m_llama, 1);
    assert_int_equal(verify(ck, NULL), FSC_ERR_FORMAT);
    assert_non_null(strstr(fsc_last_error(), "which its llama model declares"));
    ct_rmtree(dir);
    const struct { edit_fn fn; const char *why; } bad[] = { { m_llama_bad_field, "layers is missing" },
                                                            { m_llama_huge_vocab, "vocab is 1073741824" } };
    for (size_t c = 0; c < sizeof bad / sizeof bad[0]; c++) {
        dir = edit_good(*state, ck, sizeof ck, bad[c].fn, 1);
        assert_int_equal(verify(ck, NULL), FSC_ERR_FORMAT);
        assert_non_null(strstr(fsc_last_error(), "the recorded llama model's configuration is refused by its family"));
        assert_non_null(strstr(fsc_last_error(), bad[c].why));
        ct_rmtree(dir);
    }
}

static void test_ckpt_truncated_metadata(void **state) {
    char ck[600], p[700];
    char *dir = copy_good(*state, ck, sizeof ck);
    snprintf(p, sizeof p, "%s/metadata.json", ck);
    size_t n;
    char *b = ct_slurp(p, &n);
    spit(p, b, n / 2);
    expect_refused(ck, FSC_ERR_FORMAT, "metadata.json", "metadata_crc32");
    b[n / 2] = 0; /* the same half with its checksum recomputed: then the JSON itself is broken */
    reseal(b);
    spit(p, b, n / 2);
    expect_refused(ck, FSC_ERR_FORMAT, "metadata.json", "not valid JSON");
    spit(p, "", 0);
    expect_refused(ck, FSC_ERR_FORMAT, "metadata.json", "does not begin with its checksum");
    free(b);
    ct_rmtree(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ckpt_good_verifies_and_loads),
        cmocka_unit_test(test_ckpt_truncated_shard),
        cmocka_unit_test(test_ckpt_flipped_byte),
        cmocka_unit_test(test_ckpt_stray_entry),
        cmocka_unit_test(test_ckpt_missing_shard),
        cmocka_unit_test(test_ckpt_bad_metadata),
        cmocka_unit_test(test_ckpt_other_model_or_optimizer),
        cmocka_unit_test(test_ckpt_other_model_config),
        cmocka_unit_test(test_ckpt_truncated_metadata),
        cmocka_unit_test(test_ckpt_llama_record_checked),
    };
    return cmocka_run_group_tests(tests, ct_fixture_setup, ct_fixture_teardown);
}
