/* Every public function called with each of its pointer arguments NULL (the others valid or at least non-NULL):
 * a function returning fsc_status refuses it with FSC_ERR_INVALID and a message naming the argument; any other
 * function does nothing and returns 0 / NULL (or the value its header documents). Arguments a header documents
 * as optional ("may be NULL") are left out. The table has a row per public function, and the first test checks
 * it against the public API as ci/public_api.sh lists it from the headers (the names libfsc.so exports,
 * ci/check_exports.sh): a new public function without a row fails this suite. Run from the repository root.
 * Not here: what each function does with valid arguments (its own test file). */
#include "testutil.h"
#include <ctype.h>
#include "../sim/sim.h"

/* The non-NULL stand-in for every argument but the one under test: zeroed memory for handles, buffers and
 * configurations (each function checks its pointers before it reads any), a real CPU device for devices and
 * the world communicator of a simulated cluster of one rank for the communicator's own functions. */
static _Alignas(64) unsigned char blob[1 << 16];
#define P ((void *)blob)
static fsc_device *dev;
#define DEV dev
static sim_cluster *cluster;
static fsc_comm *comm;
#define COMM comm

static fsc_status dummy_forward(void *ctx, float *out, const float *inp) { return FSC_OK; }
static const char *dummy_lookup(void *ctx, const char *name) { return NULL; }
static fsc_status dummy_build(void *arg, fsc_device *d, fsc_comm *tensor, fsc_model **out) { return FSC_OK; }

/* Whether msg holds name as a word (not as part of a longer identifier). */
static int names(const char *msg, const char *name) {
    size_t n = strlen(name);
    for (const char *p = strstr(msg, name); p; p = strstr(p + 1, name)) {
        int before = p > msg && (isalnum((unsigned char)p[-1]) || p[-1] == '_');
        int after = isalnum((unsigned char)p[n]) || p[n] == '_';
        if (!before && !after) return 1;
    }
    return 0;
}

static void expect_invalid(fsc_status s, const char *call, const char *arg) {
    if (s != FSC_ERR_INVALID)
        fail_msg("%s -> %s (expected invalid argument): %s", call, fsc_status_str(s), fsc_last_error());
    if (!names(fsc_last_error(), arg)) fail_msg("%s: message \"%s\" does not name %s", call, fsc_last_error(), arg);
}

/* Each call starts from zeroed stand-ins and no message. */
#define FRESH() (memset(blob, 0, sizeof blob), fsc_clear_error())
#define INVALID(call, arg) do { FRESH(); expect_invalid((call), #call, arg); } while (0)
#define CALL(call) do { FRESH(); call; } while (0)
#define RET0(call) do { FRESH(); if ((call) != 0) fail_msg("%s is not 0", #call); } while (0)
#define RETNULL(call) do { FRESH(); if ((call) != NULL) fail_msg("%s is not NULL", #call); } while (0)
#define RETVAL(call, v) do { FRESH(); if ((call) != (v)) fail_msg("%s is not %s", #call, #v); } while (0)
#define RETSTR(call, str) do { FRESH(); if (strcmp((call), (str)) != 0) fail_msg("%s is not \"%s\"", #call, str); } while (0)

/* The NULL cases of each public function, by header: one call per pointer argument, the arguments the header
 * lets be NULL listed instead ("may be NULL"). A buffer with a count is tested with a count of 1. */

static void null_fsc_bpe_decode(void) {
    INVALID(fsc_bpe_decode(NULL, P, 0, P, 0, P), "b");
    INVALID(fsc_bpe_decode(P, NULL, 1, P, 1, P), "ids");
    INVALID(fsc_bpe_decode(P, P, 0, NULL, 1, P), "out");
    INVALID(fsc_bpe_decode(P, P, 0, P, 0, NULL), "len");
}

static void null_fsc_bpe_encode(void) {
    INVALID(fsc_bpe_encode(NULL, P, 0, P, P), "b");
    INVALID(fsc_bpe_encode(P, NULL, 1, P, P), "text");
    INVALID(fsc_bpe_encode(P, P, 1, NULL, P), "ids");
    INVALID(fsc_bpe_encode(P, P, 0, P, NULL), "n");
}

static void null_fsc_bpe_decode_more(void) {
    INVALID(fsc_bpe_decode_more(NULL, P, 0, P, 0, P), "b");
    INVALID(fsc_bpe_decode_more(P, NULL, 1, P, 1, P), "ids");
    INVALID(fsc_bpe_decode_more(P, P, 0, NULL, 1, P), "out");
    INVALID(fsc_bpe_decode_more(P, P, 0, P, 0, NULL), "len");
}

static void null_fsc_bpe_encode_more(void) {
    INVALID(fsc_bpe_encode_more(NULL, P, 0, P, P), "b");
    INVALID(fsc_bpe_encode_more(P, NULL, 1, P, P), "text");
    INVALID(fsc_bpe_encode_more(P, P, 1, NULL, P), "ids");
    INVALID(fsc_bpe_encode_more(P, P, 0, P, NULL), "n");
}

static void null_fsc_bpe_max_ids(void) {
    RET0(fsc_bpe_max_ids(NULL, 5));
}

static void null_fsc_bpe_load_spm(void) {
    INVALID(fsc_bpe_load_spm(NULL, P), "out");
    INVALID(fsc_bpe_load_spm(P, NULL), "path");
}

static void null_fsc_bpe_load_spm_memory(void) {
    INVALID(fsc_bpe_load_spm_memory(NULL, P, 0), "out");
    INVALID(fsc_bpe_load_spm_memory(P, NULL, 1), "buf");
}

static void null_fsc_bpe_eot(void) {
    RETVAL(fsc_bpe_eot(NULL), -1);
}

static void null_fsc_bpe_unk(void) {
    RETVAL(fsc_bpe_unk(NULL), -1);
}

static void null_fsc_bpe_free(void) {
    CALL(fsc_bpe_free(NULL));
}

static void null_fsc_bpe_load(void) {
    INVALID(fsc_bpe_load(NULL, P), "out");
    INVALID(fsc_bpe_load(P, NULL), "path");
}

static void null_fsc_bpe_load_file(void) {
    INVALID(fsc_bpe_load_file(NULL, P), "out");
    INVALID(fsc_bpe_load_file(P, NULL), "spec");
}

static void null_fsc_bpe_load_hf(void) {
    INVALID(fsc_bpe_load_hf(NULL, P, P), "out");
    INVALID(fsc_bpe_load_hf(P, NULL, P), "vocab_json");
    INVALID(fsc_bpe_load_hf(P, P, NULL), "merges_txt");
}

static void null_fsc_bpe_load_hf_memory(void) {
    INVALID(fsc_bpe_load_hf_memory(NULL, P, 0, P, 0), "out");
    INVALID(fsc_bpe_load_hf_memory(P, NULL, 1, P, 0), "vocab");
    INVALID(fsc_bpe_load_hf_memory(P, P, 0, NULL, 1), "merges");
}

static void null_fsc_bpe_load_tokenizer_json(void) {
    INVALID(fsc_bpe_load_tokenizer_json(NULL, P), "out");
    INVALID(fsc_bpe_load_tokenizer_json(P, NULL), "path");
}

static void null_fsc_bpe_load_tokenizer_json_memory(void) {
    INVALID(fsc_bpe_load_tokenizer_json_memory(NULL, P, 0), "out");
    INVALID(fsc_bpe_load_tokenizer_json_memory(P, NULL, 1), "buf");
}

static void null_fsc_bpe_load_default(void) {
    INVALID(fsc_bpe_load_default(NULL), "out");
}

static void null_fsc_bpe_load_memory(void) {
    INVALID(fsc_bpe_load_memory(NULL, P, 0), "out");
    INVALID(fsc_bpe_load_memory(P, NULL, 1), "buf");
}

static void null_fsc_bpe_split_point(void) {
    RET0(fsc_bpe_split_point(NULL, 0, 0));
}

static void null_fsc_bpe_token(void) {
    RETNULL(fsc_bpe_token(NULL, 0, P));
    RETNULL(fsc_bpe_token(P, 0, NULL));
}

static void null_fsc_bpe_vocab(void) {
    RET0(fsc_bpe_vocab(NULL));
}

static void null_fsc_checkpoint_wrapper_create(void) {
    INVALID(fsc_checkpoint_wrapper_create(NULL, 0, 0, P), "dev");
    INVALID(fsc_checkpoint_wrapper_create(DEV, 0, 0, NULL), "out");
}

static void null_fsc_checkpoint_wrapper_device_bytes(void) {
    RET0(fsc_checkpoint_wrapper_device_bytes(NULL));
}

static void null_fsc_checkpoint_wrapper_forward(void) {
    /* may be NULL: ctx */
    INVALID(fsc_checkpoint_wrapper_forward(NULL, dummy_forward, P, P, P), "w");
    INVALID(fsc_checkpoint_wrapper_forward(P, NULL, P, P, P), "fn");
    INVALID(fsc_checkpoint_wrapper_forward(P, dummy_forward, P, NULL, P), "out");
    INVALID(fsc_checkpoint_wrapper_forward(P, dummy_forward, P, P, NULL), "inp");
}

static void null_fsc_checkpoint_wrapper_free(void) {
    CALL(fsc_checkpoint_wrapper_free(NULL));
}

static void null_fsc_checkpoint_wrapper_recompute(void) {
    /* may be NULL: inp, ctx */
    INVALID(fsc_checkpoint_wrapper_recompute(NULL, dummy_forward, P, P), "w");
    INVALID(fsc_checkpoint_wrapper_recompute(P, NULL, P, P), "fn");
}

static void null_fsc_checkpoint_wrapper_release(void) {
    CALL(fsc_checkpoint_wrapper_release(NULL));
}

static void null_fsc_ckpt_check_file(void) {
    INVALID(fsc_ckpt_check_file(NULL, 0, P, 0), "m");
    INVALID(fsc_ckpt_check_file(P, 0, NULL, 0), "f");
}

static void null_fsc_ckpt_clean(void) {
    /* may be NULL: left, report */
    INVALID(fsc_ckpt_clean(NULL, P, P, 0), "dir");
}

static void null_fsc_ckpt_full_state(void) {
    /* may be NULL: host */
    INVALID(fsc_ckpt_full_state(NULL, 0, P), "e");
}

static void null_fsc_ckpt_latest(void) {
    INVALID(fsc_ckpt_latest(NULL, P, 0, P), "dir");
    INVALID(fsc_ckpt_latest("/tmp", P, 0, P), "cap is 0");
    INVALID(fsc_ckpt_latest(P, NULL, 0, P), "path");
    INVALID(fsc_ckpt_latest(P, P, 0, NULL), "step");
}

static void null_fsc_ckpt_load(void) {
    /* may be NULL: step */
    INVALID(fsc_ckpt_load(NULL, P, P), "e");
    INVALID(fsc_ckpt_load(P, NULL, P), "path");
}

static void null_fsc_ckpt_load_weights(void) {
    /* may be NULL: step */
    INVALID(fsc_ckpt_load_weights(NULL, P, P), "e");
    INVALID(fsc_ckpt_load_weights(P, NULL, P), "path");
}

static void null_fsc_ckpt_meta_find(void) {
    RETNULL(fsc_ckpt_meta_find(NULL, P));
    RETNULL(fsc_ckpt_meta_find(P, NULL));
}

static void null_fsc_ckpt_meta_free(void) {
    CALL(fsc_ckpt_meta_free(NULL));
}

static void null_fsc_ckpt_meta_params(void) {
    INVALID(fsc_ckpt_meta_params(NULL, P, P), "m");
    INVALID(fsc_ckpt_meta_params(P, NULL, P), "out");
    INVALID(fsc_ckpt_meta_params(P, P, NULL), "n");
}

static void null_fsc_ckpt_meta_parse(void) {
    /* may be NULL: what */
    INVALID(fsc_ckpt_meta_parse(NULL, 0, P, P), "text");
    INVALID(fsc_ckpt_meta_parse(P, 0, P, NULL), "out");
}

static void null_fsc_ckpt_meta_read(void) {
    INVALID(fsc_ckpt_meta_read(NULL, P), "path");
    INVALID(fsc_ckpt_meta_read(P, NULL), "out");
}

static void null_fsc_ckpt_prune(void) {
    /* may be NULL: removed, report */
    INVALID(fsc_ckpt_prune(NULL, 0, 0, P, P, 0), "dir");
}

static void null_fsc_ckpt_resume(void) {
    /* may be NULL: step */
    INVALID(fsc_ckpt_resume(NULL, P, P), "e");
    INVALID(fsc_ckpt_resume(P, NULL, P), "dir");
}

static void null_fsc_ckpt_save(void) {
    /* may be NULL: opts */
    INVALID(fsc_ckpt_save(NULL, P, 0, P), "e");
    INVALID(fsc_ckpt_save(P, NULL, 0, P), "dir");
}

static void null_fsc_ckpt_try_resume(void) {
    /* may be NULL: step, loaded, skipped */
    INVALID(fsc_ckpt_try_resume(NULL, P, P, P, 0, P, 0), "e");
    INVALID(fsc_ckpt_try_resume(P, NULL, P, P, 0, P, 0), "dir");
}

static void null_fsc_ckpt_latest_sound(void) {
    char buf[64];
    INVALID(fsc_ckpt_latest_sound(NULL, buf, sizeof buf, P, NULL, 0), "dir");
    INVALID(fsc_ckpt_latest_sound(P, NULL, sizeof buf, P, NULL, 0), "path");
    INVALID(fsc_ckpt_latest_sound(P, buf, sizeof buf, NULL, NULL, 0), "step");
}

static void null_fsc_ckpt_latest_read(void) {
    char buf[64];
    /* may be NULL: meta, skipped */
    INVALID(fsc_ckpt_latest_read(NULL, 0, buf, sizeof buf, P, NULL, NULL, 0), "dir");
    INVALID(fsc_ckpt_latest_read(P, 0, NULL, sizeof buf, P, NULL, NULL, 0), "path");
    INVALID(fsc_ckpt_latest_read(P, 0, buf, sizeof buf, NULL, NULL, NULL, 0), "step");
}

static void null_fsc_settings_create(void) {
    INVALID(fsc_settings_create(NULL), "out");
}

static void null_fsc_settings_add(void) {
    fsc_settings *set = NULL;
    assert_int_equal(fsc_settings_create(&set), FSC_OK);
    INVALID(fsc_settings_add(NULL, "a", "b"), "settings");
    INVALID(fsc_settings_add(set, NULL, "b"), "name");
    fsc_settings_free(set);
    assert_int_equal(fsc_settings_create(&set), FSC_OK);
    INVALID(fsc_settings_add(set, "a", NULL), "fmt");
    fsc_settings_free(set);
}

static void null_fsc_settings_count(void) {
    RET0(fsc_settings_count(NULL));
}

static void null_fsc_settings_agree(void) {
    fsc_settings *set = NULL;
    assert_int_equal(fsc_settings_create(&set), FSC_OK);
    INVALID(fsc_settings_agree(NULL, COMM, DEV), "settings");
    INVALID(fsc_settings_agree(set, NULL, DEV), "comm");
    INVALID(fsc_settings_agree(set, COMM, NULL), "dev");
    fsc_settings_free(set);
}

static void null_fsc_settings_free(void) {
    CALL(fsc_settings_free(NULL));
}

static void null_fsc_flight_create(void) {
    fsc_flight *f = NULL;
    INVALID(fsc_flight_create(NULL, &f), "opts");
    fsc_flight_opts o = fsc_flight_opts_default();
    INVALID(fsc_flight_create(&o, NULL), "out");
}

static void null_fsc_flight_free(void) {
    CALL(fsc_flight_free(NULL));
}

static void null_fsc_comm_set_flight(void) {
    CALL(fsc_comm_set_flight(NULL, NULL)); /* f may be NULL: stop recording */
}

static void null_fsc_flight_failed(void) {
    RET0(fsc_flight_failed(NULL));
}

static void null_fsc_flight_write(void) {
    INVALID(fsc_flight_write(NULL, "x", NULL), "recorder"); /* msg may be NULL */
}

static void null_fsc_flight_watch_start(void) {
    INVALID(fsc_flight_watch_start(NULL), "out");
}

static void null_fsc_flight_watch_add(void) {
    INVALID(fsc_flight_watch_add(NULL, P), "watcher");
}

static void null_fsc_flight_watch_remove(void) {
    CALL(fsc_flight_watch_remove(NULL, NULL));
}

static void null_fsc_flight_watch_signal(void) {
    CALL(fsc_flight_watch_signal(NULL));
}

static void null_fsc_flight_watch_written(void) {
    RET0(fsc_flight_watch_written(NULL));
}

static void null_fsc_flight_watch_stop(void) {
    CALL(fsc_flight_watch_stop(NULL));
}

static void null_fsc_flight_diagnose_dir(void) {
    char rep[64];
    INVALID(fsc_flight_diagnose_dir(NULL, rep, sizeof rep), "dir");
    INVALID(fsc_flight_diagnose_dir(".", NULL, 1), "report");
}

static void null_fsc_ckpt_lock(void) {
    fsc_ckpt_dir_lock *l = NULL;
    INVALID(fsc_ckpt_lock(NULL, "d", &l), "e");
    INVALID(fsc_ckpt_lock(P, NULL, &l), "dir");
    INVALID(fsc_ckpt_lock(P, "d", NULL), "out");
}

static void null_fsc_ckpt_unlock(void) {
    CALL(fsc_ckpt_unlock(NULL));
}

static void null_fsc_st_remove_leftovers(void) {
    INVALID(fsc_st_remove_leftovers(NULL, NULL), "path"); /* removed may be NULL */
}

static void null_fsc_exact_absmax(void) {
    RETVAL(fsc_exact_absmax(NULL, 4), 0.0);
}

static void null_fsc_exact_add_f32(void) {
    RETVAL(fsc_exact_add_f32(NULL, P, 4, 0), (size_t)4);
    RETVAL(fsc_exact_add_f32(P, NULL, 4, 0), (size_t)4);
}

static void null_fsc_exact_from_f32(void) {
    double amax = 0;
    RETVAL(fsc_exact_from_f32(NULL, P, 4, 0, &amax), (size_t)4);
    RETVAL(fsc_exact_from_f32(P, NULL, 4, 0, &amax), (size_t)4);
    RETVAL(fsc_exact_from_f32(P, P, 4, 0, NULL), (size_t)4);
}

static void null_fsc_exact_add_i64(void) {
    CALL(fsc_exact_add_i64(NULL, P, 4));
    CALL(fsc_exact_add_i64(P, NULL, 4));
}

static void null_fsc_exact_to_f32(void) {
    CALL(fsc_exact_to_f32(NULL, P, 4, 0));
    CALL(fsc_exact_to_f32(P, NULL, 4, 0));
}

static void null_fsc_ckpt_verify(void) {
    /* may be NULL: out */
    INVALID(fsc_ckpt_verify(NULL, P), "path");
}

static void null_fsc_ckpt_write_file(void) {
    INVALID(fsc_ckpt_write_file(NULL, P, P, 0), "dir");
    INVALID(fsc_ckpt_write_file("/nonexistent_fsc", NULL, P, 0), "name");
    INVALID(fsc_ckpt_write_file("/nonexistent_fsc", "n", NULL, 1), "data");
}

static void null_fsc_cluster_run(void) {
    /* may be NULL: opts, arg */
    INVALID(fsc_cluster_run(P, NULL, P), "fn");
}

static void null_fsc_cluster_run_from_env(void) {
    /* may be NULL: arg */
    INVALID(fsc_cluster_run_from_env(NULL, P), "fn");
}

static void null_fsc_cluster_run_from_env_opts(void) {
    /* may be NULL: opts, arg */
    INVALID(fsc_cluster_run_from_env_opts(P, NULL, P), "fn");
}

static void null_fsc_comm_agree(void) {
    INVALID(fsc_comm_agree(NULL, DEV, 0), "comm");
    INVALID(fsc_comm_agree(COMM, NULL, 0), "dev");
}

static void null_fsc_comm_all_gather(void) {
    INVALID(fsc_comm_all_gather(NULL, P, P, 0, 0), "comm");
    INVALID(fsc_comm_all_gather(COMM, NULL, P, 1, 0), "send");
    INVALID(fsc_comm_all_gather(COMM, P, NULL, 1, 0), "recv");
}

static void null_fsc_comm_all_reduce(void) {
    INVALID(fsc_comm_all_reduce(NULL, P, P, 0, 0, 0), "comm");
    INVALID(fsc_comm_all_reduce(COMM, NULL, P, 1, 0, 0), "send");
    INVALID(fsc_comm_all_reduce(COMM, P, NULL, 1, 0, 0), "recv");
}

static void null_fsc_comm_all_reduce_host(void) {
    INVALID(fsc_comm_all_reduce_host(NULL, DEV, P, 0), "comm");
    INVALID(fsc_comm_all_reduce_host(COMM, NULL, P, 0), "dev");
    INVALID(fsc_comm_all_reduce_host(COMM, DEV, NULL, 0), "value");
}

static void null_fsc_comm_all_to_all(void) {
    INVALID(fsc_comm_all_to_all(NULL, P, P, 0, 0), "comm");
    INVALID(fsc_comm_all_to_all(COMM, NULL, P, 1, 0), "send");
    INVALID(fsc_comm_all_to_all(COMM, P, NULL, 1, 0), "recv");
}

static void null_fsc_comm_barrier(void) {
    INVALID(fsc_comm_barrier(NULL), "comm");
}

static void null_fsc_comm_broadcast(void) {
    INVALID(fsc_comm_broadcast(NULL, P, 0, 0, 0), "comm");
    INVALID(fsc_comm_broadcast(COMM, NULL, 1, 0, 0), "buf");
}

static void null_fsc_comm_free(void) {
    CALL(fsc_comm_free(NULL));
}

static void null_fsc_comm_get_stats(void) {
    RETNULL(fsc_comm_get_stats(NULL));
}

static void null_fsc_comm_get_trace(void) {
    RETNULL(fsc_comm_get_trace(NULL));
}

static void null_fsc_comm_iall_gather(void) {
    INVALID(fsc_comm_iall_gather(NULL, P, P, 0, 0, P), "comm");
    INVALID(fsc_comm_iall_gather(COMM, NULL, P, 1, 0, P), "send");
    INVALID(fsc_comm_iall_gather(COMM, P, NULL, 1, 0, P), "recv");
    INVALID(fsc_comm_iall_gather(COMM, P, P, 0, 0, NULL), "req");
}

static void null_fsc_comm_iall_reduce(void) {
    INVALID(fsc_comm_iall_reduce(NULL, P, P, 0, 0, 0, P), "comm");
    INVALID(fsc_comm_iall_reduce(COMM, NULL, P, 1, 0, 0, P), "send");
    INVALID(fsc_comm_iall_reduce(COMM, P, NULL, 1, 0, 0, P), "recv");
    INVALID(fsc_comm_iall_reduce(COMM, P, P, 0, 0, 0, NULL), "req");
}

static void null_fsc_comm_iall_to_all(void) {
    INVALID(fsc_comm_iall_to_all(NULL, P, P, 0, 0, P), "comm");
    INVALID(fsc_comm_iall_to_all(COMM, NULL, P, 1, 0, P), "send");
    INVALID(fsc_comm_iall_to_all(COMM, P, NULL, 1, 0, P), "recv");
    INVALID(fsc_comm_iall_to_all(COMM, P, P, 0, 0, NULL), "req");
}

static void null_fsc_comm_ibroadcast(void) {
    INVALID(fsc_comm_ibroadcast(NULL, P, 0, 0, 0, P), "comm");
    INVALID(fsc_comm_ibroadcast(COMM, NULL, 1, 0, 0, P), "buf");
    INVALID(fsc_comm_ibroadcast(COMM, P, 0, 0, 0, NULL), "req");
}

static void null_fsc_comm_irecv(void) {
    INVALID(fsc_comm_irecv(NULL, P, 0, 0, 0, P), "comm");
    INVALID(fsc_comm_irecv(COMM, NULL, 1, 0, 0, P), "buf");
    INVALID(fsc_comm_irecv(COMM, P, 0, 0, 0, NULL), "req");
}

static void null_fsc_comm_ireduce_scatter(void) {
    INVALID(fsc_comm_ireduce_scatter(NULL, P, P, 0, 0, 0, P), "comm");
    INVALID(fsc_comm_ireduce_scatter(COMM, NULL, P, 1, 0, 0, P), "send");
    INVALID(fsc_comm_ireduce_scatter(COMM, P, NULL, 1, 0, 0, P), "recv");
    INVALID(fsc_comm_ireduce_scatter(COMM, P, P, 0, 0, 0, NULL), "req");
}

static void null_fsc_comm_isend(void) {
    INVALID(fsc_comm_isend(NULL, P, 0, 0, 0, P), "comm");
    INVALID(fsc_comm_isend(COMM, NULL, 1, 0, 0, P), "buf");
    INVALID(fsc_comm_isend(COMM, P, 0, 0, 0, NULL), "req");
}

static void null_fsc_comm_name(void) {
    RETSTR(fsc_comm_name(NULL), "");
}

static void null_fsc_comm_rank(void) {
    RETVAL(fsc_comm_rank(NULL), -1);
}

static void null_fsc_comm_recv(void) {
    INVALID(fsc_comm_recv(NULL, P, 0, 0, 0), "comm");
    INVALID(fsc_comm_recv(COMM, NULL, 1, 0, 0), "buf");
}

static void null_fsc_comm_reduce_scatter(void) {
    INVALID(fsc_comm_reduce_scatter(NULL, P, P, 0, 0, 0), "comm");
    INVALID(fsc_comm_reduce_scatter(COMM, NULL, P, 1, 0, 0), "send");
    INVALID(fsc_comm_reduce_scatter(COMM, P, NULL, 1, 0, 0), "recv");
}

static void null_fsc_comm_req_free(void) {
    /* may be NULL: req */
}

static void null_fsc_comm_reset_stats(void) {
    CALL(fsc_comm_reset_stats(NULL));
}

static void null_fsc_comm_send(void) {
    INVALID(fsc_comm_send(NULL, P, 0, 0, 0), "comm");
    INVALID(fsc_comm_send(COMM, NULL, 1, 0, 0), "buf");
}

static void null_fsc_comm_set_name(void) {
    CALL(fsc_comm_set_name(NULL, P));
    CALL(fsc_comm_set_name(COMM, NULL));
}

static void null_fsc_comm_set_trace(void) {
    CALL(fsc_comm_set_trace(NULL, P));
    CALL(fsc_comm_set_trace(COMM, NULL));
}

static void null_fsc_comm_size(void) {
    RET0(fsc_comm_size(NULL));
}

static void null_fsc_comm_split(void) {
    INVALID(fsc_comm_split(NULL, 0, 0, P), "comm");
    INVALID(fsc_comm_split(COMM, 0, 0, NULL), "out");
}

static void null_fsc_comm_test(void) {
    INVALID(fsc_comm_test(NULL, P), "req");
    INVALID(fsc_comm_test(P, NULL), "done");
}

static void null_fsc_comm_total_bytes(void) {
    RET0(fsc_comm_total_bytes(NULL));
}

static void null_fsc_comm_wait(void) {
    INVALID(fsc_comm_wait(NULL), "req");
}

static void null_fsc_data_batch(void) {
    INVALID(fsc_data_batch(NULL, 0, 0, 0, 0, 0, P, P), "d");
    INVALID(fsc_data_batch(P, 0, 0, 0, 0, 1, NULL, P), "tok");
    INVALID(fsc_data_batch(P, 0, 0, 0, 0, 1, P, NULL), "tgt");
}

static void null_fsc_data_check(void) {
    INVALID(fsc_data_check(NULL), "d");
}

static void null_fsc_data_file(void) {
    RETNULL(fsc_data_file(NULL, 0));
}

static void null_fsc_data_file_tokens(void) {
    RET0(fsc_data_file_tokens(NULL, 0));
}

static void null_fsc_data_files(void) {
    RET0(fsc_data_files(NULL));
}

static void null_fsc_data_format_of(void) {
    CALL((void)fsc_data_format_of(NULL)); /* fsc_data_format */
}

static void null_fsc_data_format_parse(void) {
    INVALID(fsc_data_format_parse(NULL, P), "name");
    INVALID(fsc_data_format_parse(P, NULL), "out");
}

static void null_fsc_data_free(void) {
    CALL(fsc_data_free(NULL));
}

static void null_fsc_data_open(void) {
    INVALID(fsc_data_open(NULL, P, 0, 0), "out");
    INVALID(fsc_data_open(P, NULL, 0, 0), "spec");
}

static void null_fsc_data_open_memory(void) {
    INVALID(fsc_data_open_memory(NULL, 0, P, P, 0, 0), "out");
    INVALID(fsc_data_open_memory(P, 1, NULL, P, 0, 0), "bufs");
    INVALID(fsc_data_open_memory(P, 1, P, NULL, 0, 0), "lens");
}

static void null_fsc_data_read(void) {
    INVALID(fsc_data_read(NULL, 0, 0, P), "d");
    INVALID(fsc_data_read(P, 0, 1, NULL), "out");
}

static void null_fsc_data_tokens(void) {
    RET0(fsc_data_tokens(NULL));
}

static void null_fsc_device_alloc(void) {
    INVALID(fsc_device_alloc(NULL, 0, 0, P), "dev");
    INVALID(fsc_device_alloc(DEV, 0, 0, NULL), "out");
}

static void null_fsc_device_calloc(void) {
    INVALID(fsc_device_calloc(NULL, 0, 0, P), "dev");
    INVALID(fsc_device_calloc(DEV, 0, 0, NULL), "out");
}

static void null_fsc_device_copied_bytes(void) {
    RET0(fsc_device_copied_bytes(NULL, 0));
}

static void null_fsc_device_copy(void) {
    INVALID(fsc_device_copy(NULL, P, P, 0), "dev");
    INVALID(fsc_device_copy(DEV, NULL, P, 1), "dst");
    INVALID(fsc_device_copy(DEV, P, NULL, 1), "src");
}

static void null_fsc_device_copy_wait(void) {
    /* may be NULL: copy */
}

static void null_fsc_device_create(void) {
    /* may be NULL: opts */
    INVALID(fsc_device_create(NULL, P, P), "name");
    INVALID(fsc_device_create(P, P, NULL), "out");
}

static void null_fsc_device_current_bytes(void) {
    RET0(fsc_device_current_bytes(NULL, 0));
}

static void null_fsc_device_download(void) {
    INVALID(fsc_device_download(NULL, P, P, 0), "dev");
    INVALID(fsc_device_download(DEV, NULL, P, 1), "host_dst");
    INVALID(fsc_device_download(DEV, P, NULL, 1), "src");
}

static void null_fsc_device_download_async(void) {
    INVALID(fsc_device_download_async(NULL, P, P, 0, P), "dev");
    INVALID(fsc_device_download_async(DEV, NULL, P, 1, P), "host_dst");
    INVALID(fsc_device_download_async(DEV, P, NULL, 1, P), "src");
    INVALID(fsc_device_download_async(DEV, P, P, 0, NULL), "out");
}

static void null_fsc_device_free(void) {
    CALL(fsc_device_free(NULL));
}

static void null_fsc_device_measure_tflops(void) {
    INVALID(fsc_device_measure_tflops(NULL, 0, P), "dev");
    INVALID(fsc_device_measure_tflops(DEV, 0, NULL), "tflops");
}

static void null_fsc_device_memset(void) {
    INVALID(fsc_device_memset(NULL, P, 0, 0), "dev");
    INVALID(fsc_device_memset(DEV, NULL, 0, 1), "dst");
}

static void null_fsc_device_name(void) {
    RETSTR(fsc_device_name(NULL), "(null)");
}

static void null_fsc_device_peak_bytes(void) {
    RET0(fsc_device_peak_bytes(NULL, 0));
}

static void null_fsc_device_peak_total(void) {
    RET0(fsc_device_peak_total(NULL));
}

static void null_fsc_device_release(void) {
    CALL(fsc_device_release(NULL, P));
    CALL(fsc_device_release(DEV, NULL));
}

static void null_fsc_device_reset_copied(void) {
    CALL(fsc_device_reset_copied(NULL));
}

static void null_fsc_device_reset_peak(void) {
    CALL(fsc_device_reset_peak(NULL));
}

static void null_fsc_device_sync(void) {
    INVALID(fsc_device_sync(NULL), "dev");
}

static void null_fsc_device_upload(void) {
    INVALID(fsc_device_upload(NULL, P, P, 0), "dev");
    INVALID(fsc_device_upload(DEV, NULL, P, 1), "dst");
    INVALID(fsc_device_upload(DEV, P, NULL, 1), "host_src");
}

static void null_fsc_device_upload_async(void) {
    INVALID(fsc_device_upload_async(NULL, P, P, 0, P), "dev");
    INVALID(fsc_device_upload_async(DEV, NULL, P, 1, P), "dst");
    INVALID(fsc_device_upload_async(DEV, P, NULL, 1, P), "host_src");
    INVALID(fsc_device_upload_async(DEV, P, P, 0, NULL), "out");
}

static void null_fsc_convert_host(void) {
    CALL(fsc_convert_host(NULL, 0, P, 0, 0));
    CALL(fsc_convert_host(P, 0, NULL, 0, 0));
    CALL(fsc_convert_host(NULL, FSC_F32, P, FSC_BF16, 4)); /* with elements: nothing read or written */
    CALL(fsc_convert_host(P, FSC_BF16, NULL, FSC_F32, 4));
}

static void null_fsc_dtype_parse(void) {
    RETVAL(fsc_dtype_parse(NULL, P), -1);
    RETVAL(fsc_dtype_parse("f32", NULL), 0); /* out may be NULL: a check of the name */
}

static void null_fsc_engine_predict(void) {
    INVALID(fsc_engine_predict(NULL, P, 1, P, P), "e");
    INVALID(fsc_engine_predict(P, NULL, 1, P, P), "inputs");
    INVALID(fsc_engine_predict(P, P, 1, NULL, P), "out");
    INVALID(fsc_engine_predict(P, P, 1, P, NULL), "per_sample");
}
static void null_fsc_engine_eval(void) {
    INVALID(fsc_engine_eval(NULL, P, P, 0, 0, P), "e");
    INVALID(fsc_engine_eval(P, NULL, P, 0, 0, P), "inputs");
    INVALID(fsc_engine_eval(P, P, NULL, 0, 0, P), "targets");
    INVALID(fsc_engine_eval(P, P, P, 0, 0, NULL), "loss");
}

static void null_fsc_generate(void) {
    INVALID(fsc_generate(NULL, P, 0, 0, P), "g");
    INVALID(fsc_generate(P, NULL, 0, 0, P), "tokens");
    INVALID(fsc_generate(P, P, 0, 0, NULL), "o");
}

static void null_fsc_generator_context(void) {
    RET0(fsc_generator_context(NULL));
}

static void null_fsc_generator_create(void) {
    INVALID(fsc_generator_create(NULL, P, P), "dev");
    INVALID(fsc_generator_create(DEV, NULL, P), "m");
    INVALID(fsc_generator_create(DEV, P, NULL), "out");
}

static void null_fsc_generator_free(void) {
    CALL(fsc_generator_free(NULL));
}

static void null_fsc_generator_next(void) {
    INVALID(fsc_generator_next(NULL, P, 0, P, P), "g");
    INVALID(fsc_generator_next(P, NULL, 0, P, P), "tokens");
    INVALID(fsc_generator_next(P, P, 0, NULL, P), "logits");
    INVALID(fsc_generator_next(P, P, 0, P, NULL), "vocab");
}

static void null_fsc_model_family_register(void) { INVALID(fsc_model_family_register(NULL), "f"); }

static void null_fsc_model_family_find(void) { RETNULL(fsc_model_family_find(NULL)); }

static void null_fsc_model_family_of(void) {
    INVALID(fsc_model_family_of(NULL, P), "config");
    INVALID(fsc_model_family_of(P, NULL), "out");
}

static void null_fsc_engine_create_config(void) {
    INVALID(fsc_engine_create_config(NULL, P, P, P, 0, P), "r");
    INVALID(fsc_engine_create_config(P, NULL, P, P, 0, P), "config");
    INVALID(fsc_engine_create_config(P, P, NULL, P, 0, P), "po");
    INVALID(fsc_engine_create_config(P, P, P, NULL, 0, P), "oc");
    INVALID(fsc_engine_create_config(P, P, P, P, 0, NULL), "out");
}

static void null_fsc_model_from_config(void) {
    INVALID(fsc_model_from_config(NULL, P, P), "dev");
    INVALID(fsc_model_from_config(DEV, NULL, P), "config");
    INVALID(fsc_model_from_config(DEV, P, NULL), "out");
}

static void null_fsc_model_config_check_held(void) {
    /* held may be NULL with n 0 */
    INVALID(fsc_model_config_check_held(NULL, P, 1, 0), "config");
    INVALID(fsc_model_config_check_held(P, NULL, 1, 0), "held");
}

static void null_fsc_model_check_held(void) {
    /* what may be NULL; held with n 0 */
    INVALID(fsc_model_check_held(NULL, P, 1, 0, NULL), "m");
    INVALID(fsc_model_check_held(P, NULL, 1, 0, NULL), "held");
}

static void null_fsc_sample_token(void) {
    RETVAL(fsc_sample_token(NULL, 1, P, 0, P), -1);
    RETVAL(fsc_sample_token(P, 1, NULL, 0, P), -1);
    RETVAL(fsc_sample_token(P, 1, P, 0, NULL), 0); /* scratch NULL: greedy */
}

static void null_fsc_gpt_acts_bytes(void) {
    RET0(fsc_gpt_acts_bytes(NULL));
}

static void null_fsc_gpt_acts_create(void) {
    INVALID(fsc_gpt_acts_create(NULL, P, P), "m");
    INVALID(fsc_gpt_acts_create(P, NULL, P), "o");
    INVALID(fsc_gpt_acts_create(P, P, NULL), "out");
}

static void null_fsc_gpt_acts_free(void) {
    CALL(fsc_gpt_acts_free(NULL));
}

static void null_fsc_gpt_acts_grad_input(void) {
    RETNULL(fsc_gpt_acts_grad_input(NULL));
}

static void null_fsc_gpt_acts_grad_output(void) {
    RETNULL(fsc_gpt_acts_grad_output(NULL));
}

static void null_fsc_gpt_acts_input(void) {
    RETNULL(fsc_gpt_acts_input(NULL));
}

static void null_fsc_gpt_acts_logits(void) {
    RETNULL(fsc_gpt_acts_logits(NULL));
}

static void null_fsc_gpt_acts_moe_rec(void) {
    RETNULL(fsc_gpt_acts_moe_rec(NULL, 0));
}

static void null_fsc_gpt_acts_moe_stats(void) {
    CALL(fsc_gpt_acts_moe_stats(NULL, P));
    CALL(fsc_gpt_acts_moe_stats(P, NULL));
}

static void null_fsc_gpt_acts_opts_default(void) {
    CALL((void)fsc_gpt_acts_opts_default(NULL, 0)); /* fsc_gpt_acts_opts */
}

static void null_fsc_gpt_acts_output(void) {
    RETNULL(fsc_gpt_acts_output(NULL));
}

static void null_fsc_gpt_acts_set_batch(void) {
    /* may be NULL: tokens, targets (where the record holds no embedding, no head: test_gpt.c) */
    INVALID(fsc_gpt_acts_set_batch(NULL, P, P), "a");
}

static void null_fsc_gpt_backward(void) {
    /* may be NULL: h */
    INVALID(fsc_gpt_backward(NULL, P, P, 0), "m");
    INVALID(fsc_gpt_backward(P, NULL, P, 0), "a");
}

static void null_fsc_gpt_bind_flat(void) {
    CALL(fsc_gpt_bind_flat(NULL, P, P));
    CALL(fsc_gpt_bind_flat(P, NULL, P));
    CALL(fsc_gpt_bind_flat(P, P, NULL));
}

static void null_fsc_gpt_block_first_tensor(void) {
    RET0(fsc_gpt_block_first_tensor(NULL, 0));
}

static void null_fsc_gpt_block_is_moe(void) {
    RET0(fsc_gpt_block_is_moe(NULL, 0));
}

static void null_fsc_gpt_block_num_tensors(void) {
    RET0(fsc_gpt_block_num_tensors(NULL, 0));
}

static void null_fsc_gpt_check_file(void) {
    INVALID(fsc_gpt_check_file(NULL, P), "cfg");
    INVALID(fsc_gpt_check_file(P, NULL), "path");
}

static void null_fsc_gpt_check_tensors(void) {
    INVALID(fsc_gpt_check_tensors(NULL, P, 0), "recorded");
    INVALID(fsc_gpt_check_tensors(P, NULL, 1), "params");
}

static void null_fsc_gpt_config_check_json(void) {
    INVALID(fsc_gpt_config_check_json(NULL, P), "c");
    INVALID(fsc_gpt_config_check_json(P, NULL), "recorded");
}

static void null_fsc_gpt_config_json(void) {
    CALL(fsc_gpt_config_json(NULL, P, 0));
    CALL(fsc_gpt_config_json(P, NULL, 0));
}

static void null_fsc_gpt_config_validate(void) {
    INVALID(fsc_gpt_config_validate(NULL), "c");
}

static void null_fsc_gpt_create(void) {
    INVALID(fsc_gpt_create(NULL, P, P), "dev");
    INVALID(fsc_gpt_create(DEV, NULL, P), "cfg");
    INVALID(fsc_gpt_create(DEV, P, NULL), "out");
}

static void null_fsc_gpt_flops_per_token(void) {
    RET0(fsc_gpt_flops_per_token(NULL));
}

static void null_fsc_gpt_forward(void) {
    /* may be NULL: h, loss_sum */
    INVALID(fsc_gpt_forward(NULL, P, P, P), "m");
    INVALID(fsc_gpt_forward(P, NULL, P, P), "a");
}

static void null_fsc_gpt_free(void) {
    CALL(fsc_gpt_free(NULL));
}

static void null_fsc_gpt_init_values(void) {
    CALL(fsc_gpt_init_values(NULL, 0, 0, 0, 0, P));
    CALL(fsc_gpt_init_values(P, 0, 0, 0, 0, NULL));
}

static void null_fsc_gpt_load(void) {
    INVALID(fsc_gpt_load(NULL, P), "m");
    INVALID(fsc_gpt_load(P, NULL), "path");
}

static void null_fsc_gpt_local_experts(void) {
    CALL(fsc_gpt_local_experts(NULL, P, P));
    CALL(fsc_gpt_local_experts(P, NULL, P));
    CALL(fsc_gpt_local_experts(P, P, NULL));
}

static void null_fsc_gpt_model_create(void) {
    INVALID(fsc_gpt_model_create(NULL, P, P), "dev");
    INVALID(fsc_gpt_model_create(DEV, NULL, P), "cfg");
    INVALID(fsc_gpt_model_create(DEV, P, NULL), "out");
}

static void null_fsc_gpt_model_create_tp(void) {
    /* may be NULL: tp */
    INVALID(fsc_gpt_model_create_tp(NULL, P, P, 0, P), "dev");
    INVALID(fsc_gpt_model_create_tp(DEV, NULL, P, 0, P), "cfg");
    INVALID(fsc_gpt_model_create_tp(DEV, P, P, 0, NULL), "out");
}

static void null_fsc_gpt_model_gpt(void) {
    RETNULL(fsc_gpt_model_gpt(NULL));
}

static void null_fsc_gpt_num_moe_blocks(void) {
    RET0(fsc_gpt_num_moe_blocks(NULL));
}

static void null_fsc_gpt_num_params(void) {
    RET0(fsc_gpt_num_params(NULL));
}

static void null_fsc_gpt_num_tensors(void) {
    RET0(fsc_gpt_num_tensors(NULL));
}

static void null_fsc_gpt_vocab_rows(void) {
    RET0(fsc_gpt_vocab_rows(NULL));
}

static void null_fsc_gpt_param_index(void) {
    RETVAL(fsc_gpt_param_index(NULL, "wte.weight"), -1);
    RETVAL(fsc_gpt_param_index(P, NULL), -1);
}

static void null_fsc_gpt_param_info(void) {
    INVALID(fsc_gpt_param_info(NULL, 0, P), "c");
    INVALID(fsc_gpt_param_info(P, 0, NULL), "out");
}

static void null_fsc_gpt_save(void) {
    INVALID(fsc_gpt_save(NULL, P), "m");
    INVALID(fsc_gpt_save(P, NULL), "path");
}

static void null_fsc_gpt_set_expert_group(void) {
    /* may be NULL: ep */
    INVALID(fsc_gpt_set_expert_group(NULL, P), "m");
}

static void null_fsc_engine_create(void) {
    INVALID(fsc_engine_create(NULL, P, P, P, 0, P), "r");
    INVALID(fsc_engine_create(P, NULL, P, P, 0, P), "cfg");
    INVALID(fsc_engine_create(P, P, NULL, P, 0, P), "fsc_engine_create: po");
    INVALID(fsc_engine_create(P, P, P, NULL, 0, P), "fsc_engine_create: oc");
    INVALID(fsc_engine_create(P, P, P, P, 0, NULL), "out");
}

static void null_fsc_engine_step(void) {
    /* may be NULL: info */
    INVALID(fsc_engine_step(NULL, P, P, 0, 0, P), "e");
    INVALID(fsc_engine_step(P, NULL, P, 0, 0, P), "tokens");
    INVALID(fsc_engine_step(P, P, NULL, 0, 0, P), "targets");
}

static void null_fsc_tp_check_config(void) {
    INVALID(fsc_tp_check_config(NULL, 0), "cfg");
}

static void null_fsc_launch_env_parse(void) {
    /* may be NULL: lookup, lookup_ctx */
    INVALID(fsc_launch_env_parse(dummy_lookup, P, NULL), "out");
}

static void null_fsc_rendezvous_close(void) {
    CALL(fsc_rendezvous_close(NULL));
}

static void null_fsc_rendezvous_fetch(void) {
    /* (the other arguments valid: a rendezvous checks them in its own order; addr is "the address") */
    INVALID(fsc_rendezvous_fetch(NULL, 1, "t", 1, P, 1, 1.0), "address");
    INVALID(fsc_rendezvous_fetch("127.0.0.1", 1, NULL, 1, P, 1, 1.0), "token");
    INVALID(fsc_rendezvous_fetch("127.0.0.1", 1, "t", 1, NULL, 1, 1.0), "blob");
}

static void null_fsc_rendezvous_file(void) {
    INVALID(fsc_rendezvous_file(NULL, 0, 2, P, 1, 1.0), "path");
    INVALID(fsc_rendezvous_file("/nonexistent_fsc/rdv", 0, 2, NULL, 1, 1.0), "blob");
}

static void null_fsc_rendezvous_listen(void) {
    /* may be NULL: bound_port */
    INVALID(fsc_rendezvous_listen(NULL, 0, P, P), "address");
    INVALID(fsc_rendezvous_listen("127.0.0.1", 0, NULL, P), "out");
}

static void null_fsc_rendezvous_serve(void) {
    INVALID(fsc_rendezvous_serve(NULL, "t", 2, P, 1, 1.0), "server");
    INVALID(fsc_rendezvous_serve(P, NULL, 2, P, 1, 1.0), "token");
    INVALID(fsc_rendezvous_serve(P, "t", 2, NULL, 1, 1.0), "blob");
}

static void null_fsc_rendezvous_tcp(void) {
    /* (rank 1 of 2: a world of one needs no address or token) */
    INVALID(fsc_rendezvous_tcp(NULL, 1, "t", 1, 2, P, 1, 1.0), "address");
    INVALID(fsc_rendezvous_tcp("127.0.0.1", 1, NULL, 1, 2, P, 1, 1.0), "token");
    INVALID(fsc_rendezvous_tcp("127.0.0.1", 1, "t", 1, 2, NULL, 1, 1.0), "blob");
}

static void null_fsc_layer_add_param(void) {
    INVALID(fsc_layer_add_param(NULL, P, 0, P, (fsc_init){0}), "l");
    INVALID(fsc_layer_add_param(P, NULL, 0, P, (fsc_init){0}), "name");
    INVALID(fsc_layer_add_param(P, P, 0, NULL, (fsc_init){0}), "shape");
}

static void null_fsc_layer_add_param_split(void) {
    INVALID(fsc_layer_add_param_split(NULL, P, 0, P, 0, 0, 0, 0, (fsc_init){0}), "l");
    INVALID(fsc_layer_add_param_split(P, NULL, 0, P, 0, 0, 0, 0, (fsc_init){0}), "name");
    INVALID(fsc_layer_add_param_split(P, P, 0, NULL, 0, 0, 0, 0, (fsc_init){0}), "full_shape");
}

static void null_fsc_layer_attention(void) {
    INVALID(fsc_layer_attention(NULL, P), "o");
    INVALID(fsc_layer_attention(P, NULL), "out");
}

static void null_fsc_layer_block(void) {
    INVALID(fsc_layer_block(NULL, P), "o");
    INVALID(fsc_layer_block(P, NULL), "out");
}

static void null_fsc_layer_embedding(void) {
    INVALID(fsc_layer_embedding(0, 0, 0, NULL), "out");
}

static void null_fsc_layer_embedding_opts(void) {
    INVALID(fsc_layer_embedding_opts(NULL, P), "o");
    INVALID(fsc_layer_embedding_opts(P, NULL), "out");
}

static void null_fsc_layer_free(void) {
    CALL(fsc_layer_free(NULL));
}

static void null_fsc_layer_gelu(void) {
    INVALID(fsc_layer_gelu(0, NULL), "out");
}

static void null_fsc_layer_gelu_mlp(void) {
    INVALID(fsc_layer_gelu_mlp(NULL, P), "o");
    INVALID(fsc_layer_gelu_mlp(P, NULL), "out");
}

static void null_fsc_layer_layernorm(void) {
    INVALID(fsc_layer_layernorm(0, 0, NULL), "out");
}

static void null_fsc_layer_linear(void) {
    INVALID(fsc_layer_linear(NULL, P), "o");
    INVALID(fsc_layer_linear(P, NULL), "out");
}

static void null_fsc_layer_lm_head(void) {
    INVALID(fsc_layer_lm_head(0, 0, 0, NULL), "out");
}

static void null_fsc_layer_lm_head_opts(void) {
    INVALID(fsc_layer_lm_head_opts(NULL, P), "o");
    INVALID(fsc_layer_lm_head_opts(P, NULL), "out");
}

static void null_fsc_layer_moe_mlp(void) {
    INVALID(fsc_layer_moe_mlp(NULL, P), "o");
    INVALID(fsc_layer_moe_mlp(P, NULL), "out");
}

static void null_fsc_layer_xent(void) {
    INVALID(fsc_layer_xent(3, NULL), "out");
}
static void null_fsc_layer_mse(void) {
    INVALID(fsc_layer_mse(0, NULL), "out");
}

static void null_fsc_layer_rmsnorm(void) {
    INVALID(fsc_layer_rmsnorm(0, 0, 0, NULL), "out");
}

static void null_fsc_layer_set_init(void) {
    INVALID(fsc_layer_set_init(NULL, P, (fsc_init){0}), "l");
    INVALID(fsc_layer_set_init(P, NULL, (fsc_init){0}), "name");
}

static void null_fsc_layer_swiglu_mlp(void) {
    INVALID(fsc_layer_swiglu_mlp(NULL, P), "o");
    INVALID(fsc_layer_swiglu_mlp(P, NULL), "out");
}

static void null_fsc_layer_token_embedding(void) {
    INVALID(fsc_layer_token_embedding(0, 0, 0, NULL), "out");
}

static void null_fsc_seq_model_create(void) {
    INVALID(fsc_seq_model_create(NULL, P, 0, P), "dev");
    INVALID(fsc_seq_model_create(DEV, NULL, 0, P), "layers");
    INVALID(fsc_seq_model_create(DEV, P, 0, NULL), "out");
    INVALID(fsc_seq_model_create(NULL, NULL, 0, NULL), "dev"); /* (with no layers to take) */
}

static void null_fsc_seq_model_layer(void) {
    RETNULL(fsc_seq_model_layer(NULL, 0));
}

static void null_fsc_llama_build(void) {
    /* may be NULL: tp */
    INVALID(fsc_llama_build(NULL, DEV, P, P), "arg");
    INVALID(fsc_llama_build(P, NULL, P, P), "dev");
    INVALID(fsc_llama_build(P, DEV, P, NULL), "out");
}

static void null_fsc_llama_config_check_json(void) {
    INVALID(fsc_llama_config_check_json(NULL, P), "c");
    INVALID(fsc_llama_config_check_json(P, NULL), "recorded");
}

static void null_fsc_llama_config_json(void) {
    CALL(fsc_llama_config_json(NULL, P, 0));
    CALL(fsc_llama_config_json(P, NULL, 0));
}

static void null_fsc_llama_config_validate(void) {
    INVALID(fsc_llama_config_validate(NULL), "c");
}

static void null_fsc_llama_init_values(void) {
    CALL(fsc_llama_init_values(NULL, 0, 0, 0, 0, P));
    CALL(fsc_llama_init_values(P, 0, 0, 0, 0, NULL));
}

static void null_fsc_llama_layer_is_moe(void) {
    RET0(fsc_llama_layer_is_moe(NULL, 0));
}

static void null_fsc_llama_model_create(void) {
    INVALID(fsc_llama_model_create(NULL, P, P), "dev");
    INVALID(fsc_llama_model_create(DEV, NULL, P), "cfg");
    INVALID(fsc_llama_model_create(DEV, P, NULL), "out");
}

static void null_fsc_llama_model_create_tp(void) {
    /* may be NULL: tp */
    INVALID(fsc_llama_model_create_tp(NULL, P, P, 0, P), "dev");
    INVALID(fsc_llama_model_create_tp(DEV, NULL, P, 0, P), "cfg");
    INVALID(fsc_llama_model_create_tp(DEV, P, P, 0, NULL), "out");
}

static void null_fsc_llama_num_moe_layers(void) {
    RET0(fsc_llama_num_moe_layers(NULL));
}

static void null_fsc_llama_num_params(void) {
    RET0(fsc_llama_num_params(NULL));
}

static void null_fsc_llama_vocab_rows(void) {
    RET0(fsc_llama_vocab_rows(NULL));
}

static void null_fsc_llama_num_tensors(void) {
    RET0(fsc_llama_num_tensors(NULL));
}

static void null_fsc_llama_param_info(void) {
    INVALID(fsc_llama_param_info(NULL, 0, P), "c");
    INVALID(fsc_llama_param_info(P, 0, NULL), "out");
}

static void null_fsc_model_acts_make(void) {
    fsc_model_acts *a;
    INVALID(fsc_model_acts_make(NULL, NULL, P, &a), "m");
    INVALID(fsc_model_acts_make(P, NULL, NULL, &a), "o");
    INVALID(fsc_model_acts_make(P, NULL, P, NULL), "out");
}

static void null_fsc_model_acts_opts_default(void) {
    CALL((void)fsc_model_acts_opts_default(NULL, 0)); /* fsc_model_acts_opts */
}

static void null_fsc_model_flops(void) {
    RET0(fsc_model_flops(NULL, 0));
}

static void null_fsc_model_free(void) {
    CALL(fsc_model_free(NULL));
}

static void null_fsc_model_num_full_params(void) {
    RET0(fsc_model_num_full_params(NULL));
}

static void null_fsc_model_num_params(void) {
    RET0(fsc_model_num_params(NULL));
}

static void null_fsc_model_tensor_index(void) {
    RETVAL(fsc_model_tensor_index(NULL, P), -1); /* no tensor, not the first one */
    RETVAL(fsc_model_tensor_index(P, NULL), -1);
}

static void null_fsc_model_validate(void) {
    INVALID(fsc_model_validate(NULL), "m");
}

static void null_fsc_param_decays(void) {
    RET0(fsc_param_decays(NULL));
}

static void null_fsc_param_full_index(void) {
    RET0(fsc_param_full_index(NULL, 0));
}

static void null_fsc_param_full_numel(void) {
    RET0(fsc_param_full_numel(NULL));
}

static void null_fsc_param_num_runs(void) {
    RET0(fsc_param_num_runs(NULL));
}

static void null_fsc_param_run_at(void) {
    CALL((void)fsc_param_run_at(NULL, 0, 0, 0)); /* fsc_param_run */
}

static void null_fsc_param_used_by(void) {
    RET0(fsc_param_used_by(NULL, 0));
}

static void null_fsc_moe_backward(void) {
    /* may be NULL: g, p */
    INVALID(fsc_moe_backward(NULL, P, P, P, P, P, 0), "m");
    INVALID(fsc_moe_backward(P, NULL, P, P, P, P, 0), "dinp");
    INVALID(fsc_moe_backward(P, P, P, NULL, P, P, 0), "rec");
    INVALID(fsc_moe_backward(P, P, P, P, NULL, P, 0), "dout");
}

static void null_fsc_moe_backward_terms(void) {
    /* may be NULL: g, p, term, term_ctx */
    INVALID(fsc_moe_backward_terms(NULL, P, P, P, P, P, 0, NULL, NULL), "m");
    INVALID(fsc_moe_backward_terms(P, NULL, P, P, P, P, 0, NULL, NULL), "dinp");
    INVALID(fsc_moe_backward_terms(P, P, P, NULL, P, P, 0, NULL, NULL), "rec");
    INVALID(fsc_moe_backward_terms(P, P, P, P, NULL, P, 0, NULL, NULL), "dout");
}

static void null_fsc_moe_capacity(void) {
    RET0(fsc_moe_capacity(NULL, 0, 0));
}

static void null_fsc_moe_create(void) {
    /* may be NULL: ep */
    INVALID(fsc_moe_create(NULL, P, P, 0, P), "dev");
    INVALID(fsc_moe_create(DEV, P, NULL, 0, P), "cfg");
    INVALID(fsc_moe_create(DEV, P, P, 0, NULL), "out");
}

static void null_fsc_moe_create_view(void) {
    /* may be NULL: ep */
    INVALID(fsc_moe_create_view(NULL, P, P, P), "dev");
    INVALID(fsc_moe_create_view(DEV, P, NULL, P), "cfg");
    INVALID(fsc_moe_create_view(DEV, P, P, NULL), "out");
}

static void null_fsc_moe_expert_offset(void) {
    RET0(fsc_moe_expert_offset(NULL, 0));
}

static void null_fsc_moe_forward(void) {
    /* may be NULL: p, stats */
    INVALID(fsc_moe_forward(NULL, P, P, P, P, P), "m");
    INVALID(fsc_moe_forward(P, NULL, P, P, P, P), "out");
    INVALID(fsc_moe_forward(P, P, NULL, P, P, P), "rec");
    INVALID(fsc_moe_forward(P, P, P, NULL, P, P), "inp");
}

static void null_fsc_moe_free(void) {
    CALL(fsc_moe_free(NULL));
}

static void null_fsc_moe_grads(void) {
    RETNULL(fsc_moe_grads(NULL));
}

static void null_fsc_moe_local_experts(void) {
    CALL(fsc_moe_local_experts(NULL, P, P));
    CALL(fsc_moe_local_experts(P, NULL, P));
    CALL(fsc_moe_local_experts(P, P, NULL));
}

static void null_fsc_moe_num_local(void) {
    RET0(fsc_moe_num_local(NULL));
}

static void null_fsc_moe_num_tensors(void) {
    RET0(fsc_moe_num_tensors(NULL));
}

static void null_fsc_moe_params(void) {
    RETNULL(fsc_moe_params(NULL));
}

static void null_fsc_moe_rec_bytes(void) {
    RET0(fsc_moe_rec_bytes(NULL));
}

static void null_fsc_moe_rec_create(void) {
    INVALID(fsc_moe_rec_create(NULL, 0, 0, P), "m");
    INVALID(fsc_moe_rec_create(P, 0, 0, NULL), "out");
}

static void null_fsc_moe_rec_free(void) {
    CALL(fsc_moe_rec_free(NULL));
}

static void null_fsc_moe_routing(void) {
    /* may be NULL: experts, gates, kept */
    INVALID(fsc_moe_routing(NULL, P, P, P), "rec");
}

static void null_fsc_attention_backward(void) {
    INVALID(fsc_attention_backward(NULL, P, P, P, P), "dev");
    INVALID(fsc_attention_backward(DEV, NULL, P, P, P), "dqkv");
    INVALID(fsc_attention_backward(DEV, P, NULL, P, P), "rec");
    INVALID(fsc_attention_backward(DEV, P, P, NULL, P), "dout");
    INVALID(fsc_attention_backward(DEV, P, P, P, NULL), "work");
}

static void null_fsc_attention_forward(void) {
    fsc_attention_rec r = { .qkv = P, .att = P, .B = 1, .T = 1, .C = 1, .NH = 1 }; /* checked before the rest */
    INVALID(fsc_attention_forward(NULL, P, &r, P, P), "dev");
    INVALID(fsc_attention_forward(DEV, NULL, &r, P, P), "out");
    INVALID(fsc_attention_forward(DEV, P, NULL, P, P), "rec");
    INVALID(fsc_attention_forward(DEV, P, &r, NULL, P), "qkv");
    INVALID(fsc_attention_forward(DEV, P, &r, P, NULL), "work");
}

static void null_fsc_attention_rec_bind(void) {
    CALL(fsc_attention_rec_bind(NULL, P, 0, 0, 0, 0));
    CALL(fsc_attention_rec_bind(P, NULL, 0, 0, 0, 0));
}

static void null_fsc_attn_core_backward(void) {
    INVALID(fsc_attn_core_backward(NULL, P, P, P, P, P, 0, P, 0, P, 0, P, 0, P, P), "dev");
    INVALID(fsc_attn_core_backward(DEV, NULL, P, P, P, P, 0, P, 0, P, 0, P, 0, P, P), "d");
    INVALID(fsc_attn_core_backward(DEV, P, NULL, P, P, P, 0, P, 0, P, 0, P, 0, P, P), "dq");
    INVALID(fsc_attn_core_backward(DEV, P, P, NULL, P, P, 0, P, 0, P, 0, P, 0, P, P), "dk");
    INVALID(fsc_attn_core_backward(DEV, P, P, P, NULL, P, 0, P, 0, P, 0, P, 0, P, P), "dv");
    INVALID(fsc_attn_core_backward(DEV, P, P, P, P, NULL, 0, P, 0, P, 0, P, 0, P, P), "dout");
    INVALID(fsc_attn_core_backward(DEV, P, P, P, P, P, 0, NULL, 0, P, 0, P, 0, P, P), "q");
    INVALID(fsc_attn_core_backward(DEV, P, P, P, P, P, 0, P, 0, NULL, 0, P, 0, P, P), "k");
    INVALID(fsc_attn_core_backward(DEV, P, P, P, P, P, 0, P, 0, P, 0, NULL, 0, P, P), "v");
    INVALID(fsc_attn_core_backward(DEV, P, P, P, P, P, 0, P, 0, P, 0, P, 0, NULL, P), "att");
    INVALID(fsc_attn_core_backward(DEV, P, P, P, P, P, 0, P, 0, P, 0, P, 0, P, NULL), "work");
}

static void null_fsc_attn_core_forward(void) {
    INVALID(fsc_attn_core_forward(NULL, P, P, 0, P, 0, P, 0, P, 0, P, P), "dev");
    INVALID(fsc_attn_core_forward(DEV, NULL, P, 0, P, 0, P, 0, P, 0, P, P), "d");
    INVALID(fsc_attn_core_forward(DEV, P, NULL, 0, P, 0, P, 0, P, 0, P, P), "out");
    INVALID(fsc_attn_core_forward(DEV, P, P, 0, NULL, 0, P, 0, P, 0, P, P), "q");
    INVALID(fsc_attn_core_forward(DEV, P, P, 0, P, 0, NULL, 0, P, 0, P, P), "k");
    INVALID(fsc_attn_core_forward(DEV, P, P, 0, P, 0, P, 0, NULL, 0, P, P), "v");
    INVALID(fsc_attn_core_forward(DEV, P, P, 0, P, 0, P, 0, P, 0, NULL, P), "att");
    INVALID(fsc_attn_core_forward(DEV, P, P, 0, P, 0, P, 0, P, 0, P, NULL), "work");
}

static void null_fsc_block_attn_backward(void) {
    INVALID(fsc_block_attn_backward(NULL, P, P, P, P, P, P, P), "dev");
    INVALID(fsc_block_attn_backward(DEV, NULL, P, P, P, P, P, P), "dres");
    INVALID(fsc_block_attn_backward(DEV, P, NULL, P, P, P, P, P), "g");
    INVALID(fsc_block_attn_backward(DEV, P, P, NULL, P, P, P, P), "rec");
    INVALID(fsc_block_attn_backward(DEV, P, P, P, NULL, P, P, P), "p");
    INVALID(fsc_block_attn_backward(DEV, P, P, P, P, NULL, P, P), "dln2");
    INVALID(fsc_block_attn_backward(DEV, P, P, P, P, P, NULL, P), "dqkv");
    INVALID(fsc_block_attn_backward(DEV, P, P, P, P, P, P, NULL), "attn_work");
}

static void null_fsc_block_attn_forward(void) {
    INVALID(fsc_block_attn_forward(NULL, P, P, P, P, P), "dev");
    INVALID(fsc_block_attn_forward(DEV, NULL, P, P, P, P), "rec");
    INVALID(fsc_block_attn_forward(DEV, P, NULL, P, P, P), "inp");
    INVALID(fsc_block_attn_forward(DEV, P, P, NULL, P, P), "p");
    INVALID(fsc_block_attn_forward(DEV, P, P, P, NULL, P), "proj");
    INVALID(fsc_block_attn_forward(DEV, P, P, P, P, NULL), "attn_work");
}

static void null_fsc_block_attn_rec_bind(void) {
    CALL(fsc_block_attn_rec_bind(NULL, P, 0, 0, 0, 0));
    CALL(fsc_block_attn_rec_bind(P, NULL, 0, 0, 0, 0));
}

static void null_fsc_block_backward(void) {
    INVALID(fsc_block_backward(NULL, P, P, P, P, P), "dev");
    INVALID(fsc_block_backward(DEV, NULL, P, P, P, P), "dres");
    INVALID(fsc_block_backward(DEV, P, NULL, P, P, P), "g");
    INVALID(fsc_block_backward(DEV, P, P, NULL, P, P), "rec");
    INVALID(fsc_block_backward(DEV, P, P, P, NULL, P), "p");
    INVALID(fsc_block_backward(DEV, P, P, P, P, NULL), "work");
}

static void null_fsc_block_forward(void) {
    /* may be NULL: out */
    INVALID(fsc_block_forward(NULL, P, P, P, P, P), "dev");
    INVALID(fsc_block_forward(DEV, P, NULL, P, P, P), "rec");
    INVALID(fsc_block_forward(DEV, P, P, NULL, P, P), "inp");
    INVALID(fsc_block_forward(DEV, P, P, P, NULL, P), "p");
    INVALID(fsc_block_forward(DEV, P, P, P, P, NULL), "work");
}

static void null_fsc_block_rec_bind(void) {
    CALL(fsc_block_rec_bind(NULL, P, 0, 0, 0, 0));
    CALL(fsc_block_rec_bind(P, NULL, 0, 0, 0, 0));
}

static void null_fsc_embedding_backward(void) {
    INVALID(fsc_embedding_backward(NULL, P, P, P, P), "dev");
    INVALID(fsc_embedding_backward(DEV, NULL, P, P, P), "dwte");
    INVALID(fsc_embedding_backward(DEV, P, NULL, P, P), "dwpe");
    INVALID(fsc_embedding_backward(DEV, P, P, NULL, P), "rec");
    INVALID(fsc_embedding_backward(DEV, P, P, P, NULL), "dout");
}

static void null_fsc_embedding_forward(void) {
    /* may be NULL: rec */
    INVALID(fsc_embedding_forward(NULL, P, P, P, P, P, 0, 0, 0), "dev");
    INVALID(fsc_embedding_forward(DEV, NULL, P, P, P, P, 0, 0, 0), "out");
    INVALID(fsc_embedding_forward(DEV, P, P, NULL, P, P, 0, 0, 0), "tok");
    INVALID(fsc_embedding_forward(DEV, P, P, P, NULL, P, 0, 0, 0), "wte");
    INVALID(fsc_embedding_forward(DEV, P, P, P, P, NULL, 0, 0, 0), "wpe");
}

static void null_fsc_gelu_backward(void) {
    INVALID(fsc_gelu_backward(NULL, P, P, P), "dev");
    INVALID(fsc_gelu_backward(DEV, NULL, P, P), "dinp");
    INVALID(fsc_gelu_backward(DEV, P, NULL, P), "rec");
    INVALID(fsc_gelu_backward(DEV, P, P, NULL), "dout");
}

static void null_fsc_gelu_forward(void) {
    /* may be NULL: rec */
    INVALID(fsc_gelu_forward(NULL, P, P, P, 0), "dev");
    INVALID(fsc_gelu_forward(DEV, NULL, P, P, 1), "out");
    INVALID(fsc_gelu_forward(DEV, P, P, NULL, 1), "inp");
}

static void null_fsc_layernorm_backward(void) {
    INVALID(fsc_layernorm_backward(NULL, P, P, P, P, P, P), "dev");
    INVALID(fsc_layernorm_backward(DEV, NULL, NULL, NULL, P, P, P), "all NULL"); /* dinp, or dw and db, may be NULL */
    INVALID(fsc_layernorm_backward(DEV, P, NULL, P, P, P, P), "dw is NULL");
    INVALID(fsc_layernorm_backward(DEV, P, P, NULL, P, P, P), "db is NULL");
    INVALID(fsc_layernorm_backward(DEV, P, P, P, NULL, P, P), "rec");
    INVALID(fsc_layernorm_backward(DEV, P, P, P, P, NULL, P), "dout");
    INVALID(fsc_layernorm_backward(DEV, P, P, P, P, P, NULL), "w");
}

static void null_fsc_layernorm_forward(void) {
    /* may be NULL: rec */
    INVALID(fsc_layernorm_forward(NULL, P, P, P, P, P, P, P, 0, 0), "dev");
    INVALID(fsc_layernorm_forward(DEV, NULL, P, P, P, P, P, P, 0, 0), "out");
    INVALID(fsc_layernorm_forward(DEV, P, P, NULL, P, P, P, P, 0, 0), "mean");
    INVALID(fsc_layernorm_forward(DEV, P, P, P, NULL, P, P, P, 0, 0), "rstd");
    INVALID(fsc_layernorm_forward(DEV, P, P, P, P, NULL, P, P, 0, 0), "inp");
    INVALID(fsc_layernorm_forward(DEV, P, P, P, P, P, NULL, P, 0, 0), "w");
    INVALID(fsc_layernorm_forward(DEV, P, P, P, P, P, P, NULL, 0, 0), "b");
}

static void null_fsc_linear_backward(void) {
    /* may be NULL: dinp, dw, db */
    INVALID(fsc_linear_backward(NULL, P, P, P, P, P, P, 0, 0), "dev");
    INVALID(fsc_linear_backward(DEV, P, P, P, NULL, P, P, 0, 0), "rec");
    INVALID(fsc_linear_backward(DEV, P, P, P, P, NULL, P, 0, 0), "dout");
    INVALID(fsc_linear_backward(DEV, P, P, P, P, P, NULL, 0, 0), "w");
}

static void null_fsc_linear_forward(void) {
    /* may be NULL: rec, b */
    /* (the dimensions are checked first: valid ones) */
    INVALID(fsc_linear_forward(NULL, P, P, P, P, P, 1, 1, 1, 0), "dev");
    INVALID(fsc_linear_forward(DEV, NULL, P, P, P, P, 1, 1, 1, 0), "out");
    INVALID(fsc_linear_forward(DEV, P, P, NULL, P, P, 1, 1, 1, 0), "inp");
    INVALID(fsc_linear_forward(DEV, P, P, P, NULL, P, 1, 1, 1, 0), "w");
}

static void null_fsc_mse_backward(void) {
    INVALID(fsc_mse_backward(NULL, P, P, 0), "dev");
    INVALID(fsc_mse_backward(DEV, NULL, P, 0), "dpred");
    INVALID(fsc_mse_backward(DEV, P, NULL, 0), "rec");
}

static void null_fsc_mse_forward(void) {
    /* may be NULL: rec */
    INVALID(fsc_mse_forward(NULL, P, P, P, P, 0, 0), "dev");
    INVALID(fsc_mse_forward(DEV, NULL, P, P, P, 0, 0), "losses");
    INVALID(fsc_mse_forward(DEV, P, P, NULL, P, 0, 0), "pred");
    INVALID(fsc_mse_forward(DEV, P, P, P, NULL, 0, 0), "target");
}

static void null_fsc_mul_backward(void) {
    /* may be NULL: da, db */
    INVALID(fsc_mul_backward(NULL, P, P, P, P), "dev");
    INVALID(fsc_mul_backward(DEV, P, P, NULL, P), "rec");
    INVALID(fsc_mul_backward(DEV, P, P, P, NULL), "dout");
}

static void null_fsc_mul_forward(void) {
    /* may be NULL: rec */
    INVALID(fsc_mul_forward(NULL, P, P, P, P, 0), "dev");
    INVALID(fsc_mul_forward(DEV, NULL, P, P, P, 1), "out");
    INVALID(fsc_mul_forward(DEV, P, P, NULL, P, 1), "a");
    INVALID(fsc_mul_forward(DEV, P, P, P, NULL, 1), "b");
}

/* ops.h: every tensor argument NULL in turn (the stand-ins are zeroed tensors) */
static void null_fsc_op_matmul(void) {
    INVALID(fsc_op_matmul(NULL, P, 0, P, 0, 1, 0), "c");
    INVALID(fsc_op_matmul(P, NULL, 0, P, 0, 1, 0), "a");
    INVALID(fsc_op_matmul(P, P, 0, NULL, 0, 1, 0), "b");
}
static void null_fsc_op_copy(void) {
    INVALID(fsc_op_copy(NULL, P), "dst");
    INVALID(fsc_op_copy(P, NULL), "src");
}
static void null_fsc_op_zero(void) { INVALID(fsc_op_zero(NULL), "x"); }
static void null_fsc_op_fill(void) { INVALID(fsc_op_fill(NULL, 1), "x"); }
static void null_fsc_op_scale(void) { INVALID(fsc_op_scale(NULL, 1), "x"); }
static void null_fsc_op_axpy(void) {
    INVALID(fsc_op_axpy(NULL, 1, P), "y");
    INVALID(fsc_op_axpy(P, 1, NULL), "x");
}
static void null_fsc_op_add(void) {
    INVALID(fsc_op_add(NULL, P, P), "out");
    INVALID(fsc_op_add(P, NULL, P), "a");
    INVALID(fsc_op_add(P, P, NULL), "b");
}
static void null_fsc_op_mul(void) {
    INVALID(fsc_op_mul(NULL, P, P), "out");
    INVALID(fsc_op_mul(P, NULL, P), "a");
    INVALID(fsc_op_mul(P, P, NULL), "b");
}
static void null_fsc_op_mul_backward(void) { /* da and db may be NULL */
    INVALID(fsc_op_mul_backward(P, P, NULL, P, P), "a");
    INVALID(fsc_op_mul_backward(P, P, P, NULL, P), "b");
    INVALID(fsc_op_mul_backward(P, P, P, P, NULL), "dout");
}
static void null_fsc_op_add_rows(void) {
    INVALID(fsc_op_add_rows(NULL, P), "x");
    INVALID(fsc_op_add_rows(P, NULL), "v");
}
static void null_fsc_op_sum_rows(void) {
    INVALID(fsc_op_sum_rows(NULL, P), "v");
    INVALID(fsc_op_sum_rows(P, NULL), "x");
}
static void null_fsc_op_repeat_rows(void) {
    INVALID(fsc_op_repeat_rows(NULL, P), "x");
    INVALID(fsc_op_repeat_rows(P, NULL), "v");
}
static void null_fsc_op_silu(void) {
    INVALID(fsc_op_silu(NULL, P), "out");
    INVALID(fsc_op_silu(P, NULL), "x");
}
static void null_fsc_op_silu_backward(void) {
    INVALID(fsc_op_silu_backward(NULL, P, P), "dx");
    INVALID(fsc_op_silu_backward(P, NULL, P), "x");
    INVALID(fsc_op_silu_backward(P, P, NULL), "dout");
}
static void null_fsc_op_gelu(void) {
    INVALID(fsc_op_gelu(NULL, P), "out");
    INVALID(fsc_op_gelu(P, NULL), "x");
}
static void null_fsc_op_gelu_backward(void) {
    INVALID(fsc_op_gelu_backward(NULL, P, P), "dx");
    INVALID(fsc_op_gelu_backward(P, NULL, P), "x");
    INVALID(fsc_op_gelu_backward(P, P, NULL), "dout");
}
static void null_fsc_op_sum(void) {
    INVALID(fsc_op_sum(NULL, P), "x");
    INVALID(fsc_op_sum(P, NULL), "sum");
}

static void null_fsc_residual_backward(void) {
    /* may be NULL: da, db */
    INVALID(fsc_residual_backward(NULL, P, P, P, 0), "dev");
    INVALID(fsc_residual_backward(DEV, P, P, NULL, 1), "dout");
}

static void null_fsc_residual_forward(void) {
    INVALID(fsc_residual_forward(NULL, P, P, P, 0), "dev");
    INVALID(fsc_residual_forward(DEV, NULL, P, P, 1), "out");
    INVALID(fsc_residual_forward(DEV, P, NULL, P, 1), "a");
    INVALID(fsc_residual_forward(DEV, P, P, NULL, 1), "b");
}

static void null_fsc_rmsnorm_backward(void) {
    INVALID(fsc_rmsnorm_backward(NULL, P, P, P, P, P), "dev");
    INVALID(fsc_rmsnorm_backward(DEV, NULL, NULL, P, P, P), "both NULL"); /* dinp or dw may be NULL */
    INVALID(fsc_rmsnorm_backward(DEV, P, P, NULL, P, P), "rec");
    INVALID(fsc_rmsnorm_backward(DEV, P, P, P, NULL, P), "dout");
    INVALID(fsc_rmsnorm_backward(DEV, P, P, P, P, NULL), "w");
}

static void null_fsc_rmsnorm_forward(void) {
    /* may be NULL: rec */
    INVALID(fsc_rmsnorm_forward(NULL, P, P, P, P, P, 0, 0, 0), "dev");
    INVALID(fsc_rmsnorm_forward(DEV, NULL, P, P, P, P, 0, 0, 0), "out");
    INVALID(fsc_rmsnorm_forward(DEV, P, P, NULL, P, P, 0, 0, 0), "rstd");
    INVALID(fsc_rmsnorm_forward(DEV, P, P, P, NULL, P, 0, 0, 0), "inp");
    INVALID(fsc_rmsnorm_forward(DEV, P, P, P, P, NULL, 0, 0, 0), "w");
}

static void null_fsc_rope_backward(void) {
    INVALID(fsc_rope_backward(NULL, P, P, 0, 0, 0, 0, 0, 0), "dev");
    INVALID(fsc_rope_backward(DEV, NULL, P, 0, 0, 0, 0, 0, 0), "dinp");
    INVALID(fsc_rope_backward(DEV, P, NULL, 0, 0, 0, 0, 0, 0), "dout");
}

static void null_fsc_rope_forward(void) {
    INVALID(fsc_rope_forward(NULL, P, P, 0, 0, 0, 0, 0, 0), "dev");
    INVALID(fsc_rope_forward(DEV, NULL, P, 0, 0, 0, 0, 0, 0), "out");
    INVALID(fsc_rope_forward(DEV, P, NULL, 0, 0, 0, 0, 0, 0), "inp");
}

static void null_fsc_self_attn_backward(void) {
    INVALID(fsc_self_attn_backward(NULL, P, P, P, P, P, P), "dev");
    INVALID(fsc_self_attn_backward(DEV, NULL, P, P, P, P, P), "dinp");
    INVALID(fsc_self_attn_backward(DEV, P, NULL, P, P, P, P), "g");
    INVALID(fsc_self_attn_backward(DEV, P, P, NULL, P, P, P), "rec");
    INVALID(fsc_self_attn_backward(DEV, P, P, P, NULL, P, P), "dout");
    INVALID(fsc_self_attn_backward(DEV, P, P, P, P, NULL, P), "p");
    INVALID(fsc_self_attn_backward(DEV, P, P, P, P, P, NULL), "work");
}

static void null_fsc_self_attn_backward_parts(void) {
    /* may be NULL: dinp */
    INVALID(fsc_self_attn_backward_parts(NULL, P, P, P, P, P, P), "dev");
    INVALID(fsc_self_attn_backward_parts(DEV, P, NULL, P, P, P, P), "g");
    INVALID(fsc_self_attn_backward_parts(DEV, P, P, NULL, P, P, P), "rec");
    INVALID(fsc_self_attn_backward_parts(DEV, P, P, P, NULL, P, P), "dout");
    INVALID(fsc_self_attn_backward_parts(DEV, P, P, P, P, NULL, P), "p");
    INVALID(fsc_self_attn_backward_parts(DEV, P, P, P, P, P, NULL), "work");
}

static void null_fsc_self_attn_forward(void) {
    /* may be NULL: out */
    INVALID(fsc_self_attn_forward(NULL, P, P, P, P, P), "dev");
    INVALID(fsc_self_attn_forward(DEV, P, NULL, P, P, P), "rec");
    INVALID(fsc_self_attn_forward(DEV, P, P, NULL, P, P), "inp");
    INVALID(fsc_self_attn_forward(DEV, P, P, P, NULL, P), "p");
    INVALID(fsc_self_attn_forward(DEV, P, P, P, P, NULL), "work");
}

static void null_fsc_self_attn_rec_bind(void) {
    CALL(fsc_self_attn_rec_bind(NULL, P, P));
    CALL(fsc_self_attn_rec_bind(P, NULL, P));
    CALL(fsc_self_attn_rec_bind(P, P, NULL));
}

static void null_fsc_self_attn_saved_floats(void) {
    RET0(fsc_self_attn_saved_floats(NULL));
}

static void null_fsc_self_attn_work_floats(void) {
    RET0(fsc_self_attn_work_floats(NULL));
}

static void null_fsc_silu_backward(void) {
    INVALID(fsc_silu_backward(NULL, P, P, P), "dev");
    INVALID(fsc_silu_backward(DEV, NULL, P, P), "dinp");
    INVALID(fsc_silu_backward(DEV, P, NULL, P), "rec");
    INVALID(fsc_silu_backward(DEV, P, P, NULL), "dout");
}

static void null_fsc_silu_forward(void) {
    /* may be NULL: rec */
    INVALID(fsc_silu_forward(NULL, P, P, P, 0), "dev");
    INVALID(fsc_silu_forward(DEV, NULL, P, P, 1), "out");
    INVALID(fsc_silu_forward(DEV, P, P, NULL, 1), "inp");
}

static void null_fsc_swiglu_backward(void) {
    INVALID(fsc_swiglu_backward(NULL, P, P, P, P), "dev");
    INVALID(fsc_swiglu_backward(DEV, NULL, P, P, P), "dgate");
    INVALID(fsc_swiglu_backward(DEV, P, NULL, P, P), "dup");
    INVALID(fsc_swiglu_backward(DEV, P, P, NULL, P), "rec");
    INVALID(fsc_swiglu_backward(DEV, P, P, P, NULL), "dout");
}

static void null_fsc_swiglu_forward(void) {
    /* may be NULL: rec */
    INVALID(fsc_swiglu_forward(NULL, P, P, P, P, 0), "dev");
    INVALID(fsc_swiglu_forward(DEV, NULL, P, P, P, 1), "out");
    INVALID(fsc_swiglu_forward(DEV, P, P, NULL, P, 1), "gate");
    INVALID(fsc_swiglu_forward(DEV, P, P, P, NULL, 1), "up");
}

static void null_fsc_swiglu_mlp_backward(void) {
    INVALID(fsc_swiglu_mlp_backward(NULL, P, P, P, P, P, P, P, P, P, P), "dev");
    INVALID(fsc_swiglu_mlp_backward(DEV, NULL, P, P, P, P, P, P, P, P, P), "dinp");
    INVALID(fsc_swiglu_mlp_backward(DEV, P, NULL, P, P, P, P, P, P, P, P), "dw_gate");
    INVALID(fsc_swiglu_mlp_backward(DEV, P, P, NULL, P, P, P, P, P, P, P), "dw_up");
    INVALID(fsc_swiglu_mlp_backward(DEV, P, P, P, NULL, P, P, P, P, P, P), "dw_down");
    INVALID(fsc_swiglu_mlp_backward(DEV, P, P, P, P, NULL, P, P, P, P, P), "rec");
    INVALID(fsc_swiglu_mlp_backward(DEV, P, P, P, P, P, NULL, P, P, P, P), "dout");
    INVALID(fsc_swiglu_mlp_backward(DEV, P, P, P, P, P, P, NULL, P, P, P), "w_gate");
    INVALID(fsc_swiglu_mlp_backward(DEV, P, P, P, P, P, P, P, NULL, P, P), "w_up");
    INVALID(fsc_swiglu_mlp_backward(DEV, P, P, P, P, P, P, P, P, NULL, P), "w_down");
    INVALID(fsc_swiglu_mlp_backward(DEV, P, P, P, P, P, P, P, P, P, NULL), "work");
}

static void null_fsc_swiglu_mlp_backward_parts(void) {
    /* may be NULL: dinp, dw_gate, dw_up, dw_down */
    INVALID(fsc_swiglu_mlp_backward_parts(NULL, P, P, P, P, P, P, P, P, P, P), "dev");
    INVALID(fsc_swiglu_mlp_backward_parts(DEV, P, P, P, P, NULL, P, P, P, P, P), "rec");
    INVALID(fsc_swiglu_mlp_backward_parts(DEV, P, P, P, P, P, NULL, P, P, P, P), "dout");
    INVALID(fsc_swiglu_mlp_backward_parts(DEV, P, P, P, P, P, P, NULL, P, P, P), "w_gate");
    INVALID(fsc_swiglu_mlp_backward_parts(DEV, P, P, P, P, P, P, P, NULL, P, P), "w_up");
    INVALID(fsc_swiglu_mlp_backward_parts(DEV, P, P, P, P, P, P, P, P, NULL, P), "w_down");
    INVALID(fsc_swiglu_mlp_backward_parts(DEV, P, P, P, P, P, P, P, P, P, NULL), "work");
}

static void null_fsc_swiglu_mlp_forward(void) {
    /* may be NULL: out */
    INVALID(fsc_swiglu_mlp_forward(NULL, P, P, P, P, P, P), "dev");
    INVALID(fsc_swiglu_mlp_forward(DEV, P, NULL, P, P, P, P), "rec");
    INVALID(fsc_swiglu_mlp_forward(DEV, P, P, NULL, P, P, P), "inp");
    INVALID(fsc_swiglu_mlp_forward(DEV, P, P, P, NULL, P, P), "w_gate");
    INVALID(fsc_swiglu_mlp_forward(DEV, P, P, P, P, NULL, P), "w_up");
    INVALID(fsc_swiglu_mlp_forward(DEV, P, P, P, P, P, NULL), "w_down");
}

static void null_fsc_swiglu_mlp_rec_bind(void) {
    CALL(fsc_swiglu_mlp_rec_bind(NULL, P, 0, 0, 0));
    CALL(fsc_swiglu_mlp_rec_bind(P, NULL, 0, 0, 0));
}

static void null_fsc_xent_backward(void) {
    INVALID(fsc_xent_backward(NULL, P, P, 0), "dev");
    INVALID(fsc_xent_backward(DEV, NULL, P, 0), "dlogits");
    INVALID(fsc_xent_backward(DEV, P, NULL, 0), "rec");
}

static void null_fsc_xent_forward(void) {
    /* may be NULL: rec */
    /* (the dimensions are checked first: valid ones) */
    INVALID(fsc_xent_forward(NULL, P, P, P, P, 1, 1, 1), "dev");
    INVALID(fsc_xent_forward(DEV, NULL, P, P, P, 1, 1, 1), "losses");
    INVALID(fsc_xent_forward(DEV, P, P, NULL, P, 1, 1, 1), "logits");
    INVALID(fsc_xent_forward(DEV, P, P, P, NULL, 1, 1, 1), "targets");
}

static void null_fsc_grad_clip(void) {
    /* may be NULL: comm, norm */
    INVALID(fsc_grad_clip(NULL, P, P, P, 0, 0, P), "dev");
    INVALID(fsc_grad_clip(DEV, P, NULL, P, 1, 0, P), "segs");
    INVALID(fsc_grad_clip(DEV, P, P, NULL, 1, 0, P), "lens");
}

static void null_fsc_grad_norm(void) {
    /* may be NULL: comm */
    INVALID(fsc_grad_norm(NULL, P, P, P, 0, P), "dev");
    INVALID(fsc_grad_norm(DEV, P, NULL, P, 1, P), "segs");
    INVALID(fsc_grad_norm(DEV, P, P, NULL, 1, P), "lens");
    INVALID(fsc_grad_norm(DEV, P, P, P, 0, NULL), "norm");
}

static void null_fsc_grads_nonfinite(void) {
    /* may be NULL: comm */
    INVALID(fsc_grads_nonfinite(NULL, P, P, P, 0, P), "dev");
    INVALID(fsc_grads_nonfinite(DEV, P, NULL, P, 1, P), "segs");
    INVALID(fsc_grads_nonfinite(DEV, P, P, NULL, 1, P), "lens");
    INVALID(fsc_grads_nonfinite(DEV, P, P, P, 0, NULL), "found");
}

static void null_fsc_loss_scaler_init(void) {
    CALL(fsc_loss_scaler_init(NULL, 0, 0));
}

static void null_fsc_loss_scaler_update(void) {
    CALL(fsc_loss_scaler_update(NULL, 0));
}

static void null_fsc_nonfinite_vote(void) {
    /* may be NULL: comm */
    INVALID(fsc_nonfinite_vote(NULL, P, P, P, 0, 0, P), "dev");
    INVALID(fsc_nonfinite_vote(DEV, P, NULL, P, 1, 0, P), "segs");
    INVALID(fsc_nonfinite_vote(DEV, P, P, NULL, 1, 0, P), "lens");
    INVALID(fsc_nonfinite_vote(DEV, P, P, P, 0, 0, NULL), "found");
}

static void null_fsc_optim_add(void) {
    /* may be NULL: idx */
    INVALID(fsc_optim_add(NULL, P, P, 0, P), "o");
    INVALID(fsc_optim_add(P, NULL, P, 1, P), "param");
    INVALID(fsc_optim_add(P, P, NULL, 1, P), "grad");
}

static void null_fsc_optim_create(void) {
    INVALID(fsc_optim_create(NULL, P, P), "dev");
    INVALID(fsc_optim_create(DEV, NULL, P), "cfg");
    INVALID(fsc_optim_create(DEV, P, NULL), "out");
}

static void null_fsc_optim_free(void) {
    CALL(fsc_optim_free(NULL));
}

static void null_fsc_optim_grad(void) {
    RETNULL(fsc_optim_grad(NULL, 0));
}

static void null_fsc_optim_no_decay(void) {
    INVALID(fsc_optim_no_decay(NULL, 0, 0, 0), "o");
}

static void null_fsc_optim_num_segments(void) {
    RET0(fsc_optim_num_segments(NULL));
}

static void null_fsc_optim_num_states(void) {
    RET0(fsc_optim_num_states(NULL));
}

static void null_fsc_optim_param(void) {
    RETNULL(fsc_optim_param(NULL, 0));
}

static void null_fsc_optim_rebind(void) {
    INVALID(fsc_optim_rebind(NULL, 0, P, P), "o");
    INVALID(fsc_optim_rebind(P, 0, NULL, P), "param");
    INVALID(fsc_optim_rebind(P, 0, P, NULL), "grad");
}

static void null_fsc_optim_segment_len(void) {
    RET0(fsc_optim_segment_len(NULL, 0));
}

static void null_fsc_optim_set_lr(void) {
    CALL(fsc_optim_set_lr(NULL, 0));
}

static void null_fsc_optim_set_steps(void) {
    CALL(fsc_optim_set_steps(NULL, 0));
}

static void null_fsc_optim_state(void) {
    RETNULL(fsc_optim_state(NULL, 0, 0));
}

static void null_fsc_optim_step(void) {
    INVALID(fsc_optim_step(NULL), "o");
}

static void null_fsc_optim_step_end(void) {
    CALL(fsc_optim_step_end(NULL));
}

static void null_fsc_optim_step_segment(void) {
    INVALID(fsc_optim_step_segment(NULL, 0), "o");
}

static void null_fsc_optim_steps(void) {
    RET0(fsc_optim_steps(NULL));
}

static void null_fsc_balance_by_size(void) {
    INVALID(fsc_balance_by_size(NULL, 0, 0, 0, P), "m");
    INVALID(fsc_balance_by_size(P, 0, 0, 0, NULL), "out");
}

static void null_fsc_balance_by_time(void) {
    INVALID(fsc_balance_by_time(NULL, P, 0, 0, 0, P), "dev");
    INVALID(fsc_balance_by_time(DEV, NULL, 0, 0, 0, P), "m");
    INVALID(fsc_balance_by_time(DEV, P, 0, 0, 0, NULL), "out");
}

static void null_fsc_balance_parse(void) {
    INVALID(fsc_balance_parse(NULL, P, 0, P), "text");
    INVALID(fsc_balance_parse(P, NULL, 0, P), "m");
    INVALID(fsc_balance_parse(P, P, 0, NULL), "out");
}

static void null_fsc_engine_check_finite(void) {
    INVALID(fsc_engine_check_finite(NULL), "e");
}

static void null_fsc_engine_comm_stats(void) {
    CALL(fsc_engine_comm_stats(NULL, P));
    CALL(fsc_engine_comm_stats(P, NULL));
}

static void null_fsc_engine_comm_stats_group(void) {
    RET0(fsc_engine_comm_stats_group(NULL, 0, P));
    RET0(fsc_engine_comm_stats_group(P, 0, NULL));
}

static void null_fsc_engine_create_built(void) {
    /* may be NULL: arg */
    INVALID(fsc_engine_create_built(NULL, dummy_build, P, P, P, 0, P), "r");
    INVALID(fsc_engine_create_built(P, NULL, P, P, P, 0, P), "build");
    INVALID(fsc_engine_create_built(P, dummy_build, P, NULL, P, 0, P), "po");
    INVALID(fsc_engine_create_built(P, dummy_build, P, P, NULL, 0, P), "oc");
    INVALID(fsc_engine_create_built(P, dummy_build, P, P, P, 0, NULL), "out");
}

static void null_fsc_engine_create_model(void) {
    INVALID(fsc_engine_create_model(NULL, P, P, P, 0, P), "r");
    INVALID(fsc_engine_create_model(P, NULL, P, P, 0, P), "m");
    INVALID(fsc_engine_create_model(P, P, NULL, P, 0, P), "po");
    INVALID(fsc_engine_create_model(P, P, P, NULL, 0, P), "oc");
    INVALID(fsc_engine_create_model(P, P, P, P, 0, NULL), "out");
}

static void null_fsc_engine_free(void) {
    CALL(fsc_engine_free(NULL));
}

static void null_fsc_engine_full_params(void) {
    /* may be NULL: host */
    INVALID(fsc_engine_full_params(NULL, P), "e");
}

static void null_fsc_engine_get_trace(void) {
    RETNULL(fsc_engine_get_trace(NULL));
}

static void null_fsc_engine_host_device(void) {
    RETNULL(fsc_engine_host_device(NULL));
}

static void null_fsc_engine_layout(void) {
    RETNULL(fsc_engine_layout(NULL));
}

static void null_fsc_engine_load_weights(void) {
    INVALID(fsc_engine_load_weights(NULL, P), "e");
    INVALID(fsc_engine_load_weights(P, NULL), "path");
}

static void null_fsc_engine_model(void) {
    RETNULL(fsc_engine_model(NULL));
}

static void null_fsc_engine_pipe_stats(void) {
    INVALID(fsc_engine_pipe_stats(NULL, P), "e");
    INVALID(fsc_engine_pipe_stats(P, NULL), "out");
}

static void null_fsc_engine_reset_comm_stats(void) {
    CALL(fsc_engine_reset_comm_stats(NULL));
}

static void null_fsc_engine_reset_pipe_stats(void) {
    CALL(fsc_engine_reset_pipe_stats(NULL));
}

static void null_fsc_engine_save_weights(void) {
    INVALID(fsc_engine_save_weights(NULL, P), "e");
    INVALID(fsc_engine_save_weights(P, NULL), "path");
}

static void null_fsc_engine_save_weights_dtype(void) {
    INVALID(fsc_engine_save_weights_dtype(NULL, P, 0), "e");
    INVALID(fsc_engine_save_weights_dtype(P, NULL, 0), "path");
}

static void null_fsc_engine_set_trace(void) {
    CALL(fsc_engine_set_trace(NULL, P)); /* t may be NULL: stop recording */
}

static void null_fsc_engine_step_model(void) {
    /* may be NULL: info */
    INVALID(fsc_engine_step_model(NULL, P, P, 0, 0, P), "e");
    INVALID(fsc_engine_step_model(P, NULL, P, 0, 0, P), "inputs");
    INVALID(fsc_engine_step_model(P, P, NULL, 0, 0, P), "targets");
}

static void null_fsc_layout_describe(void) {
    CALL(fsc_layout_describe(NULL, P, 0));
    CALL(fsc_layout_describe(P, NULL, 0));
}

static void null_fsc_plan_memory(void) {
    INVALID(fsc_plan_memory(NULL, P), "job");
    INVALID(fsc_plan_memory(P, NULL), "out");
}

static void null_fsc_plan_measure(void) {
    INVALID(fsc_plan_measure(NULL, P), "job");
    INVALID(fsc_plan_measure(P, NULL), "out");
}

static void null_fsc_plan_time(void) {
    INVALID(fsc_plan_time(NULL, P, P, P), "job");
    INVALID(fsc_plan_time(P, NULL, P, P), "r");
    INVALID(fsc_plan_time(P, P, NULL, P), "rates");
    INVALID(fsc_plan_time(P, P, P, NULL), "out");
}

static void null_fsc_plan_calibrate(void) {
    INVALID(fsc_plan_calibrate(1, 0, NULL), "out");
}
static void null_fsc_plan_fit_rates(void) {
    fsc_plan_job j = fsc_plan_job_default();
    fsc_plan_rates rt = {0};
    INVALID(fsc_plan_fit_rates(NULL, &rt), "job");
    INVALID(fsc_plan_fit_rates(&j, NULL), "rates");
}
static void null_fsc_plan_replay(void) {
    fsc_plan_job j = fsc_plan_job_default();
    fsc_plan_rates rt = {0};
    fsc_plan_step st;
    INVALID(fsc_plan_replay(NULL, &rt, &st), "job");
    INVALID(fsc_plan_replay(&j, NULL, &st), "rates");
    INVALID(fsc_plan_replay(&j, &rt, NULL), "out");
}
static void null_fsc_plan_calibrate_clock(void) {
    INVALID(fsc_plan_calibrate_clock(1, 0, FSC_SIM_CLOCK_VIRTUAL, NULL), "out");
}

static void null_fsc_layout_make(void) {
    INVALID(fsc_layout_make(0, 0, 0, 0, 0, NULL), "out");
}

static void null_fsc_layout_make_ordered(void) {
    /* may be NULL: order */
    INVALID(fsc_layout_make_ordered(0, 0, 0, 0, P, 0, NULL), "out");
}

static void null_fsc_layout_parse_order(void) {
    /* may be NULL: text */
    INVALID(fsc_layout_parse_order(P, NULL), "order");
}

static void null_fsc_layout_split(void) {
    INVALID(fsc_layout_split(NULL, P, P, P, P), "world");
    INVALID(fsc_layout_split(P, NULL, P, P, P), "l");
    INVALID(fsc_layout_split(P, P, NULL, P, P), "tensor");
    INVALID(fsc_layout_split(P, P, P, NULL, P), "data");
    INVALID(fsc_layout_split(P, P, P, P, NULL), "pipe");
}

static void null_fsc_philox4x32(void) {
    CALL(fsc_philox4x32(NULL, P, P));
    CALL(fsc_philox4x32(P, NULL, P));
    CALL(fsc_philox4x32(P, P, NULL));
}

static void null_fsc_rng_fill_normal(void) {
    CALL(fsc_rng_fill_normal(NULL, 0, 0, P, 0, 0, 0));
    CALL(fsc_rng_fill_normal(P, 0, 0, NULL, 0, 0, 0));
    CALL(fsc_rng_fill_normal(NULL, 4, 0, P, 0, 0, 0)); /* with elements: nothing written */
}

static void null_fsc_rng_key(void) {
    RETVAL(fsc_rng_key(7, NULL), fsc_rng_key(7, "")); /* the key of "" */
}

static void null_fsc_st_check_copy(void) {
    /* may be NULL: copy */
    INVALID(fsc_st_check_copy(NULL, P, P, P), "f");
    INVALID(fsc_st_check_copy(P, NULL, P, P), "name");
    INVALID(fsc_st_check_copy(P, P, P, NULL), "path");
}

static void null_fsc_st_close(void) {
    CALL(fsc_st_close(NULL));
}

static void null_fsc_st_count(void) {
    RET0(fsc_st_count(NULL));
}

static void null_fsc_st_entry_at(void) {
    RETNULL(fsc_st_entry_at(NULL, 0));
}

static void null_fsc_st_find(void) {
    RETNULL(fsc_st_find(NULL, P));
    RETNULL(fsc_st_find(P, NULL));
}

static void null_fsc_st_find_weight(void) {
    RETNULL(fsc_st_find_weight(NULL, P));
    RETNULL(fsc_st_find_weight(P, NULL));
}

static void null_fsc_st_find_weight_once(void) {
    const fsc_st_entry *e;
    INVALID(fsc_st_find_weight_once(NULL, P, P, &e), "f");
    INVALID(fsc_st_find_weight_once(P, NULL, P, &e), "name");
    INVALID(fsc_st_find_weight_once(P, P, P, NULL), "out");
}

static void null_fsc_st_metadata(void) {
    RETNULL(fsc_st_metadata(NULL, P));
    RETNULL(fsc_st_metadata(P, NULL));
}

static void null_fsc_st_open(void) {
    INVALID(fsc_st_open(NULL, P), "path");
    INVALID(fsc_st_open(P, NULL), "out");
}

static void null_fsc_st_parse_buffer(void) {
    INVALID(fsc_st_parse_buffer(NULL, 1, P), "buf");
    INVALID(fsc_st_parse_buffer(P, 0, NULL), "out");
}

static void null_fsc_st_read(void) {
    INVALID(fsc_st_read(NULL, P, P, 0, 0), "f");
    INVALID(fsc_st_read(P, NULL, P, 0, 0), "e");
    INVALID(fsc_st_read(P, P, NULL, 0, 1), "dst");
}

static void null_fsc_st_read_f32(void) {
    INVALID(fsc_st_read_f32(NULL, P, P, 0, 0), "f");
    INVALID(fsc_st_read_f32(P, NULL, P, 0, 0), "e");
    INVALID(fsc_st_read_f32(P, P, NULL, 0, 1), "dst");
}

static void null_fsc_st_weight_name(void) {
    RETNULL(fsc_st_weight_name(NULL));
}

static void null_fsc_st_writer_abort(void) {
    CALL(fsc_st_writer_abort(NULL));
}

static void null_fsc_st_writer_add(void) {
    INVALID(fsc_st_writer_add(NULL, P, 0, 0, P), "w");
    INVALID(fsc_st_writer_add(P, NULL, 0, 0, P), "name");
    INVALID(fsc_st_writer_add(P, P, 0, 1, NULL), "shape"); /* ndim 0 (a scalar) needs none */
}

static void null_fsc_st_writer_begin_data(void) {
    INVALID(fsc_st_writer_begin_data(NULL), "w");
}

static void null_fsc_st_writer_commit(void) {
    INVALID(fsc_st_writer_commit(NULL), "w");
}

static void null_fsc_st_writer_meta(void) {
    INVALID(fsc_st_writer_meta(NULL, P, P), "w");
    INVALID(fsc_st_writer_meta(P, NULL, P), "key");
    INVALID(fsc_st_writer_meta(P, P, NULL), "value");
}

static void null_fsc_st_writer_open(void) {
    INVALID(fsc_st_writer_open(NULL, P), "path");
    INVALID(fsc_st_writer_open(P, NULL), "out");
}

static void null_fsc_st_writer_write(void) {
    INVALID(fsc_st_writer_write(NULL, 0, P, 0, 0), "w");
    INVALID(fsc_st_writer_write(P, 0, NULL, 0, 1), "src");
}

static void null_fsc_st_writer_write_f32(void) {
    INVALID(fsc_st_writer_write_f32(NULL, 0, P, 0, 0), "w");
    INVALID(fsc_st_writer_write_f32(P, 0, NULL, 0, 1), "src");
}

static void null_fsc_engine_lr(void) {
    RET0(fsc_engine_lr(NULL));
}

static void null_fsc_engine_set_lr(void) {
    INVALID(fsc_engine_set_lr(NULL, 0), "e");
}

static void null_fsc_pipe_schedule_make(void) {
    INVALID(fsc_pipe_schedule_make(FSC_SCHED_GPIPE, 2, 1, 1, 0, NULL, P), "out");
    INVALID(fsc_pipe_schedule_make(FSC_SCHED_GPIPE, 2, 1, 1, 0, P, NULL), "n");
    INVALID(fsc_pipe_schedule_make(FSC_SCHED_CUSTOM, 2, 1, 1, 0, P, P), "the caller's own lists"); /* not "unknown" */
}

static void null_fsc_pipe_schedule_free(void) { CALL(fsc_pipe_schedule_free(NULL)); }

static void null_fsc_pipe_schedule_validate(void) {
    INVALID(fsc_pipe_schedule_validate(2, 1, 1, NULL, P), "lists");
    INVALID(fsc_pipe_schedule_validate(2, 1, 1, P, NULL), "lens");
}

static void null_fsc_pipe_schedule_validate_placed(void) {
    INVALID(fsc_pipe_schedule_validate_placed(FSC_PIPE_V, 2, 2, 1, NULL, P), "lists");
    INVALID(fsc_pipe_schedule_validate_placed(FSC_PIPE_V, 2, 2, 1, P, NULL), "lens");
}

static void null_fsc_pipe_schedule_parse(void) {
    INVALID(fsc_pipe_schedule_parse(NULL, 0, P), "text");
    INVALID(fsc_pipe_schedule_parse(P, 0, NULL), "out");
}

static void null_fsc_pipe_schedule_parse_ranks(void) {
    INVALID(fsc_pipe_schedule_parse_ranks(NULL, 0, 2, P), "text");
    INVALID(fsc_pipe_schedule_parse_ranks(P, 0, 2, NULL), "out");
}

static void null_fsc_pipe_schedule_lists_free(void) { CALL(fsc_pipe_schedule_lists_free(NULL)); }

static void null_fsc_pipe_schedule_format(void) {
    INVALID(fsc_pipe_schedule_format(FSC_PIPE_LOOP, 1, 1, NULL, P, NULL, 0, P), "lists");
    INVALID(fsc_pipe_schedule_format(FSC_PIPE_LOOP, 1, 1, P, NULL, NULL, 0, P), "lens");
    INVALID(fsc_pipe_schedule_format(FSC_PIPE_LOOP, 1, 1, P, P, NULL, 0, NULL), "len");
}

static void null_fsc_lr_at(void) {
    RET0(fsc_lr_at(NULL, 0));
}

static void null_fsc_lr_kind_parse(void) {
    INVALID(fsc_lr_kind_parse(NULL, P), "name");
    INVALID(fsc_lr_kind_parse(P, NULL), "out");
}

static void null_fsc_lr_schedule_validate(void) {
    INVALID(fsc_lr_schedule_validate(NULL), "s");
}

static void null_fsc_error(void) {
    /* fmt NULL: the message is the status's name, and the status is returned as always */
    FRESH();
    assert_int_equal(fsc_error(FSC_ERR_IO, NULL), FSC_ERR_IO);
    assert_string_equal(fsc_last_error(), "i/o error");
}

static void null_fsc_error_prefix(void) {
    /* fmt NULL: nothing to put before the message */
    FRESH();
    fsc_error(FSC_ERR_IO, "disk full");
    assert_int_equal(fsc_error_prefix(FSC_ERR_IO, NULL), FSC_ERR_IO);
    assert_string_equal(fsc_last_error(), "disk full");
}

static void null_fsc_error_rank(void) {
    FRESH();
    fsc_error(FSC_ERR_IO, "disk full");
    assert_int_equal(fsc_error_rank(FSC_ERR_IO, NULL), FSC_ERR_IO);
    assert_string_equal(fsc_last_error(), "disk full");
}

static void null_fsc_shape_str(void) {
    CALL(fsc_shape_str(NULL, 0, 0, P));
    CALL(fsc_shape_str(P, 0, 0, NULL));
    CALL(fsc_shape_str(P, 16, 2, NULL)); /* a NULL shape of 2 dimensions is not read */
}

static void null_fsc_tensor_is_contiguous(void) {
    RET0(fsc_tensor_is_contiguous(NULL));
}

static void null_fsc_tensor_make(void) {
    CALL((void)fsc_tensor_make(NULL, 0, 0, P, DEV)); /* fsc_tensor */
    CALL((void)fsc_tensor_make(P, 0, 0, NULL, DEV)); /* fsc_tensor */
    CALL((void)fsc_tensor_make(P, 0, 2, NULL, DEV)); /* a NULL shape of 2 dimensions is not read */
    assert_null(fsc_tensor_make(P, 0, 2, NULL, DEV).data);
    CALL((void)fsc_tensor_make(P, 0, 0, P, NULL)); /* fsc_tensor */
}

static void null_fsc_tensor_narrow(void) {
    INVALID(fsc_tensor_narrow(NULL, 0, 0, 0, P), "t");
    INVALID(fsc_tensor_narrow(P, 0, 0, 0, NULL), "out");
}

static void null_fsc_tensor_nbytes(void) {
    RET0(fsc_tensor_nbytes(NULL));
}

static void null_fsc_tensor_numel(void) {
    RET0(fsc_tensor_numel(NULL));
}

static void null_fsc_tensor_reshape(void) {
    INVALID(fsc_tensor_reshape(NULL, 0, P, P), "t");
    INVALID(fsc_tensor_reshape(P, 0, NULL, P), "shape");
    INVALID(fsc_tensor_reshape(P, 0, P, NULL), "out");
}

static void null_fsc_tensor_transpose(void) {
    INVALID(fsc_tensor_transpose(NULL, 0, 0, P), "t");
    INVALID(fsc_tensor_transpose(P, 0, 0, NULL), "out");
}

static void null_fsc_tp_column_backward(void) {
    /* may be NULL: dinp, db, work */
    INVALID(fsc_tp_column_backward(NULL, P, P, P, P, P, P, P, P), "dev");
    INVALID(fsc_tp_column_backward(DEV, NULL, P, P, P, P, P, P, P), "tp");
    INVALID(fsc_tp_column_backward(DEV, P, P, NULL, P, P, P, P, P), "dw");
    INVALID(fsc_tp_column_backward(DEV, P, P, P, P, NULL, P, P, P), "rec");
    INVALID(fsc_tp_column_backward(DEV, P, P, P, P, P, NULL, P, P), "dout");
    INVALID(fsc_tp_column_backward(DEV, P, P, P, P, P, P, NULL, P), "w");
}

static void null_fsc_tp_column_forward(void) {
    /* may be NULL: rec, b, work */
    INVALID(fsc_tp_column_forward(NULL, P, P, P, P, P, P, 0, 0, 0, 0, P), "dev");
    INVALID(fsc_tp_column_forward(DEV, NULL, P, P, P, P, P, 0, 0, 0, 0, P), "tp");
    INVALID(fsc_tp_column_forward(DEV, P, NULL, P, P, P, P, 0, 0, 0, 0, P), "out");
    INVALID(fsc_tp_column_forward(DEV, P, P, P, NULL, P, P, 0, 0, 0, 0, P), "inp");
    INVALID(fsc_tp_column_forward(DEV, P, P, P, P, NULL, P, 0, 0, 0, 0, P), "w");
}

static void null_fsc_tp_embedding_backward(void) {
    INVALID(fsc_tp_embedding_backward(NULL, P, P, P, P, P, P), "dev");
    INVALID(fsc_tp_embedding_backward(DEV, NULL, P, P, P, P, P), "tp");
    INVALID(fsc_tp_embedding_backward(DEV, P, NULL, P, P, P, P), "dwte");
    INVALID(fsc_tp_embedding_backward(DEV, P, P, NULL, P, P, P), "dwpe");
    INVALID(fsc_tp_embedding_backward(DEV, P, P, P, NULL, P, P), "rec");
    INVALID(fsc_tp_embedding_backward(DEV, P, P, P, P, NULL, P), "dout");
    INVALID(fsc_tp_embedding_backward(DEV, P, P, P, P, P, NULL), "work");
}

static void null_fsc_tp_embedding_forward(void) {
    /* may be NULL: rec */
    INVALID(fsc_tp_embedding_forward(NULL, P, P, P, P, P, P, 0, 0, 0, 0, 0, P), "dev");
    INVALID(fsc_tp_embedding_forward(DEV, NULL, P, P, P, P, P, 0, 0, 0, 0, 0, P), "tp");
    INVALID(fsc_tp_embedding_forward(DEV, P, NULL, P, P, P, P, 0, 0, 0, 0, 0, P), "out");
    INVALID(fsc_tp_embedding_forward(DEV, P, P, P, NULL, P, P, 0, 0, 0, 0, 0, P), "tok");
    INVALID(fsc_tp_embedding_forward(DEV, P, P, P, P, NULL, P, 0, 0, 0, 0, 0, P), "wte");
    INVALID(fsc_tp_embedding_forward(DEV, P, P, P, P, P, NULL, 0, 0, 0, 0, 0, P), "wpe");
    INVALID(fsc_tp_embedding_forward(DEV, P, P, P, P, P, P, 0, 0, 0, 0, 0, NULL), "work");
}

static void null_fsc_tp_f_backward(void) {
    INVALID(fsc_tp_f_backward(NULL, P, P, P, 0), "dev");
    INVALID(fsc_tp_f_backward(DEV, NULL, P, P, 0), "tp");
    INVALID(fsc_tp_f_backward(DEV, P, NULL, P, 1), "dinp");
    INVALID(fsc_tp_f_backward(DEV, P, P, NULL, 1), "dout");
}

static void null_fsc_tp_f_forward(void) {
    INVALID(fsc_tp_f_forward(NULL, P, P, P, 0), "dev");
    INVALID(fsc_tp_f_forward(DEV, NULL, P, P, 0), "tp");
    INVALID(fsc_tp_f_forward(DEV, P, NULL, P, 1), "out");
    INVALID(fsc_tp_f_forward(DEV, P, P, NULL, 1), "inp");
}

static void null_fsc_tp_g_backward(void) {
    INVALID(fsc_tp_g_backward(NULL, P, P, P, 0), "dev");
    INVALID(fsc_tp_g_backward(DEV, NULL, P, P, 0), "tp");
    INVALID(fsc_tp_g_backward(DEV, P, NULL, P, 1), "dinp");
    INVALID(fsc_tp_g_backward(DEV, P, P, NULL, 1), "dout");
}

static void null_fsc_tp_g_forward(void) {
    INVALID(fsc_tp_g_forward(NULL, P, P, P, 0), "dev");
    INVALID(fsc_tp_g_forward(DEV, NULL, P, P, 0), "tp");
    INVALID(fsc_tp_g_forward(DEV, P, NULL, P, 1), "out");
    INVALID(fsc_tp_g_forward(DEV, P, P, NULL, 1), "inp");
}

static void null_fsc_tp_row_backward(void) {
    /* may be NULL: tp, dinp, dw, db */
    INVALID(fsc_tp_row_backward(NULL, P, P, P, P, P, P, P), "dev");
    INVALID(fsc_tp_row_backward(DEV, P, P, P, P, NULL, P, P), "rec");
    INVALID(fsc_tp_row_backward(DEV, P, P, P, P, P, NULL, P), "dout");
    INVALID(fsc_tp_row_backward(DEV, P, P, P, P, P, P, NULL), "w");
}

static void null_fsc_tp_row_forward(void) {
    /* may be NULL: rec, b */
    INVALID(fsc_tp_row_forward(NULL, P, P, P, P, P, P, 0, 0, 0), "dev");
    INVALID(fsc_tp_row_forward(DEV, NULL, P, P, P, P, P, 0, 0, 0), "tp");
    INVALID(fsc_tp_row_forward(DEV, P, NULL, P, P, P, P, 0, 0, 0), "out");
    INVALID(fsc_tp_row_forward(DEV, P, P, P, NULL, P, P, 0, 0, 0), "inp");
    INVALID(fsc_tp_row_forward(DEV, P, P, P, P, NULL, P, 0, 0, 0), "w");
}

static void null_fsc_tp_sp_gather(void) {
    INVALID(fsc_tp_sp_gather(NULL, P, P, 0), "tp");
    INVALID(fsc_tp_sp_gather(P, NULL, P, 1), "out");
    INVALID(fsc_tp_sp_gather(P, P, NULL, 1), "inp");
}

static void null_fsc_tp_sp_reduce_scatter(void) {
    INVALID(fsc_tp_sp_reduce_scatter(NULL, P, P, 0), "tp");
    INVALID(fsc_tp_sp_reduce_scatter(P, NULL, P, 1), "out");
    INVALID(fsc_tp_sp_reduce_scatter(P, P, NULL, 1), "inp");
}

static void null_fsc_tp_vocab_localize(void) {
    CALL(fsc_tp_vocab_localize(NULL, P, 0, 0, 0));
    CALL(fsc_tp_vocab_localize(P, NULL, 0, 0, 0));
}

static void null_fsc_tp_xent_backward(void) {
    INVALID(fsc_tp_xent_backward(NULL, P, P, 0, P), "dev");
    INVALID(fsc_tp_xent_backward(DEV, NULL, P, 0, P), "dlogits");
    INVALID(fsc_tp_xent_backward(DEV, P, NULL, 0, P), "rec");
    INVALID(fsc_tp_xent_backward(DEV, P, P, 0, NULL), "work");
}

static void null_fsc_tp_xent_forward(void) {
    /* may be NULL: rec */
    INVALID(fsc_tp_xent_forward(NULL, P, P, P, P, P, P, P, 0, 0, 0, 0, P), "dev");
    INVALID(fsc_tp_xent_forward(DEV, NULL, P, P, P, P, P, P, 0, 0, 0, 0, P), "tp");
    INVALID(fsc_tp_xent_forward(DEV, P, NULL, P, P, P, P, P, 0, 0, 0, 0, P), "losses");
    INVALID(fsc_tp_xent_forward(DEV, P, P, P, NULL, P, P, P, 0, 0, 0, 0, P), "logits");
    INVALID(fsc_tp_xent_forward(DEV, P, P, P, P, NULL, P, P, 0, 0, 0, 0, P), "targets");
    INVALID(fsc_tp_xent_forward(DEV, P, P, P, P, P, NULL, P, 0, 0, 0, 0, P), "tgt");
    INVALID(fsc_tp_xent_forward(DEV, P, P, P, P, P, P, NULL, 0, 0, 0, 0, P), "q");
    INVALID(fsc_tp_xent_forward(DEV, P, P, P, P, P, P, P, 0, 0, 0, 0, NULL), "work");
}

static void null_fsc_trace_begin(void) {
    /* on a real recorder (a zeroed one holds no room, so it would read neither), its spans then closed */
    fsc_trace *t;
    assert_ok(fsc_trace_create(NULL, &t));
    void (*begin)(fsc_trace *, const char *, const char *, ...) = fsc_trace_begin; /* fmt NULL without a warning */
    CALL(fsc_trace_begin(NULL, "cat", "x"));
    CALL(fsc_trace_begin(t, NULL, "x"));
    CALL(begin(t, "cat", NULL));
    fsc_trace_end(t), fsc_trace_end(t);
    CALL(fsc_trace_span(t, NULL, NULL, 0, 0, NULL));
    assert_int_equal(fsc_trace_count(t), 3);
    fsc_trace_free(t);
}

static void null_fsc_trace_arg(void) {
    fsc_trace *t;
    assert_ok(fsc_trace_create(NULL, &t));
    fsc_trace_begin(t, "cat", "x");
    CALL(fsc_trace_arg(NULL, "k", 1));
    CALL(fsc_trace_arg(t, NULL, 1));
    fsc_trace_end(t);
    fsc_trace_free(t);
}

static void null_fsc_trace_capacity(void) {
    RET0(fsc_trace_capacity(NULL));
}

static void null_fsc_trace_count(void) {
    RET0(fsc_trace_count(NULL));
}

static void null_fsc_trace_create(void) {
    /* may be NULL: o */
    INVALID(fsc_trace_create(P, NULL), "out");
}

static void null_fsc_trace_dropped(void) {
    RET0(fsc_trace_dropped(NULL));
}

static void null_fsc_trace_end(void) {
    CALL(fsc_trace_end(NULL));
}

static void null_fsc_trace_free(void) {
    CALL(fsc_trace_free(NULL));
}

static void null_fsc_trace_span(void) {
    CALL(fsc_trace_span(NULL, P, P, 0, 0, P));
    CALL(fsc_trace_span(P, NULL, P, 0, 0, P));
    CALL(fsc_trace_span(P, P, NULL, 0, 0, P));
    CALL(fsc_trace_span(P, P, P, 0, 0, NULL));
}

static void null_fsc_trace_write(void) {
    INVALID(fsc_trace_write(NULL, P), "t");
    INVALID(fsc_trace_write(P, NULL), "path");
}

/* A row per public function: its NULL cases, or none for a function without pointer arguments. */
struct row {
    const char *name;
    void (*cases)(void);
};
#define ROW(f) { #f, null_##f }
#define NONE(f) { #f, NULL }
static const struct row rows[] = {
    /* bpe.h */
    ROW(fsc_bpe_decode),
    ROW(fsc_bpe_encode),
    ROW(fsc_bpe_encode_more),
    ROW(fsc_bpe_decode_more),
    ROW(fsc_bpe_max_ids),
    ROW(fsc_bpe_load_spm),
    ROW(fsc_bpe_load_spm_memory),
    ROW(fsc_bpe_eot),
    ROW(fsc_bpe_unk),
    ROW(fsc_bpe_free),
    ROW(fsc_bpe_load),
    ROW(fsc_bpe_load_default),
    ROW(fsc_bpe_load_file),
    ROW(fsc_bpe_load_hf),
    ROW(fsc_bpe_load_hf_memory),
    ROW(fsc_bpe_load_memory),
    ROW(fsc_bpe_split_point),
    ROW(fsc_bpe_token),
    ROW(fsc_bpe_load_tokenizer_json),
    ROW(fsc_bpe_load_tokenizer_json_memory),
    ROW(fsc_bpe_vocab),
    /* checkpoint_wrapper.h */
    ROW(fsc_checkpoint_wrapper_create),
    ROW(fsc_checkpoint_wrapper_device_bytes),
    ROW(fsc_checkpoint_wrapper_forward),
    ROW(fsc_checkpoint_wrapper_free),
    ROW(fsc_checkpoint_wrapper_recompute),
    ROW(fsc_checkpoint_wrapper_release),
    /* ckpt.h */
    ROW(fsc_ckpt_check_file),
    ROW(fsc_ckpt_clean),
    NONE(fsc_ckpt_format_name),
    ROW(fsc_ckpt_full_state),
    ROW(fsc_ckpt_latest),
    ROW(fsc_exact_absmax),
    ROW(fsc_exact_add_f32),
    ROW(fsc_exact_from_f32),
    ROW(fsc_exact_add_i64),
    ROW(fsc_exact_to_f32),
    ROW(fsc_ckpt_lock),
    ROW(fsc_ckpt_unlock),
    ROW(fsc_st_remove_leftovers),
    ROW(fsc_flight_create),
    ROW(fsc_flight_free),
    ROW(fsc_comm_set_flight),
    ROW(fsc_flight_failed),
    ROW(fsc_flight_write),
    ROW(fsc_flight_watch_start),
    ROW(fsc_flight_watch_add),
    ROW(fsc_flight_watch_remove),
    ROW(fsc_flight_watch_signal),
    ROW(fsc_flight_watch_written),
    ROW(fsc_flight_watch_stop),
    ROW(fsc_flight_diagnose_dir),
    ROW(fsc_settings_create),
    ROW(fsc_settings_add),
    ROW(fsc_settings_count),
    ROW(fsc_settings_agree),
    ROW(fsc_settings_free),
    ROW(fsc_ckpt_latest_sound),
    ROW(fsc_ckpt_latest_read),
    ROW(fsc_ckpt_load),
    ROW(fsc_ckpt_load_weights),
    ROW(fsc_ckpt_meta_find),
    ROW(fsc_ckpt_meta_free),
    ROW(fsc_ckpt_meta_params),
    ROW(fsc_ckpt_meta_parse),
    ROW(fsc_ckpt_meta_read),
    ROW(fsc_ckpt_prune),
    ROW(fsc_ckpt_resume),
    ROW(fsc_ckpt_save),
    NONE(fsc_ckpt_save_opts_default),
    NONE(fsc_flight_opts_default),
    NONE(fsc_exact_exponent),
    ROW(fsc_ckpt_try_resume),
    ROW(fsc_ckpt_verify),
    ROW(fsc_ckpt_write_file),
    /* cluster.h */
    NONE(fsc_cluster_opts_default),
    ROW(fsc_cluster_run),
    ROW(fsc_cluster_run_from_env),
    ROW(fsc_cluster_run_from_env_opts),
    /* comm.h */
    ROW(fsc_comm_agree),
    ROW(fsc_comm_all_gather),
    ROW(fsc_comm_all_reduce),
    ROW(fsc_comm_all_reduce_host),
    ROW(fsc_comm_all_to_all),
    ROW(fsc_comm_barrier),
    ROW(fsc_comm_broadcast),
    ROW(fsc_comm_free),
    ROW(fsc_comm_get_stats),
    ROW(fsc_comm_get_trace),
    ROW(fsc_comm_iall_gather),
    ROW(fsc_comm_iall_reduce),
    ROW(fsc_comm_iall_to_all),
    ROW(fsc_comm_ibroadcast),
    ROW(fsc_comm_irecv),
    ROW(fsc_comm_ireduce_scatter),
    ROW(fsc_comm_isend),
    ROW(fsc_comm_name),
    NONE(fsc_comm_op_name),
    ROW(fsc_comm_rank),
    ROW(fsc_comm_recv),
    ROW(fsc_comm_reduce_scatter),
    ROW(fsc_comm_req_free),
    ROW(fsc_comm_reset_stats),
    ROW(fsc_comm_send),
    ROW(fsc_comm_set_name),
    ROW(fsc_comm_set_trace),
    ROW(fsc_comm_size),
    ROW(fsc_comm_split),
    ROW(fsc_comm_test),
    ROW(fsc_comm_total_bytes),
    ROW(fsc_comm_wait),
    /* data.h */
    ROW(fsc_data_batch),
    ROW(fsc_data_check),
    ROW(fsc_data_file),
    ROW(fsc_data_file_tokens),
    ROW(fsc_data_files),
    NONE(fsc_data_format_name),
    ROW(fsc_data_format_of),
    ROW(fsc_data_format_parse),
    ROW(fsc_data_free),
    ROW(fsc_data_open),
    ROW(fsc_data_open_memory),
    ROW(fsc_data_read),
    NONE(fsc_data_seq_start),
    ROW(fsc_data_tokens),
    /* device.h */
    ROW(fsc_device_alloc),
    ROW(fsc_device_calloc),
    ROW(fsc_device_copied_bytes),
    ROW(fsc_device_copy),
    ROW(fsc_device_copy_wait),
    ROW(fsc_device_create),
    ROW(fsc_device_current_bytes),
    ROW(fsc_device_download),
    ROW(fsc_device_download_async),
    ROW(fsc_device_free),
    ROW(fsc_device_measure_tflops),
    ROW(fsc_device_memset),
    ROW(fsc_device_name),
    NONE(fsc_device_opts_default),
    ROW(fsc_device_peak_bytes),
    ROW(fsc_device_peak_total),
    ROW(fsc_device_release),
    ROW(fsc_device_reset_copied),
    ROW(fsc_device_reset_peak),
    ROW(fsc_device_sync),
    ROW(fsc_device_upload),
    ROW(fsc_device_upload_async),
    NONE(fsc_tag_name),
    /* dtype.h */
    NONE(fsc_bf16_to_f32),
    ROW(fsc_convert_host),
    NONE(fsc_dtype_name),
    ROW(fsc_dtype_parse),
    NONE(fsc_dtype_size),
    NONE(fsc_f16_to_f32),
    NONE(fsc_f32_to_bf16),
    NONE(fsc_f32_to_f16),
    /* eval.h */
    ROW(fsc_engine_eval),
    ROW(fsc_engine_predict),
    /* generate.h */
    ROW(fsc_generate),
    ROW(fsc_generator_context),
    ROW(fsc_generator_create),
    ROW(fsc_generator_free),
    ROW(fsc_generator_next),
    ROW(fsc_model_from_config),
    ROW(fsc_model_config_check_held),
    ROW(fsc_model_check_held),
    ROW(fsc_model_family_register),
    ROW(fsc_model_family_find),
    ROW(fsc_model_family_of),
    ROW(fsc_engine_create_config),
    ROW(fsc_sample_token),
    /* gpt.h */
    ROW(fsc_gpt_acts_bytes),
    ROW(fsc_gpt_acts_create),
    ROW(fsc_gpt_acts_free),
    ROW(fsc_gpt_acts_grad_input),
    ROW(fsc_gpt_acts_grad_output),
    ROW(fsc_gpt_acts_input),
    ROW(fsc_gpt_acts_logits),
    ROW(fsc_gpt_acts_moe_rec),
    ROW(fsc_gpt_acts_moe_stats),
    ROW(fsc_gpt_acts_opts_default),
    ROW(fsc_gpt_acts_output),
    ROW(fsc_gpt_acts_set_batch),
    ROW(fsc_gpt_backward),
    ROW(fsc_gpt_bind_flat),
    ROW(fsc_gpt_block_first_tensor),
    ROW(fsc_gpt_block_is_moe),
    ROW(fsc_gpt_block_num_tensors),
    ROW(fsc_gpt_check_file),
    ROW(fsc_gpt_check_tensors),
    ROW(fsc_gpt_config_check_json),
    NONE(fsc_gpt_config_default),
    ROW(fsc_gpt_config_json),
    ROW(fsc_gpt_config_validate),
    ROW(fsc_gpt_create),
    ROW(fsc_gpt_flops_per_token),
    ROW(fsc_gpt_forward),
    ROW(fsc_gpt_free),
    ROW(fsc_gpt_init_values),
    ROW(fsc_gpt_load),
    ROW(fsc_gpt_local_experts),
    ROW(fsc_gpt_model_create),
    ROW(fsc_gpt_model_create_tp),
    ROW(fsc_gpt_model_gpt),
    ROW(fsc_gpt_num_moe_blocks),
    ROW(fsc_gpt_num_params),
    ROW(fsc_gpt_num_tensors),
    ROW(fsc_gpt_param_index),
    ROW(fsc_gpt_param_info),
    ROW(fsc_gpt_save),
    ROW(fsc_gpt_set_expert_group),
    ROW(fsc_gpt_vocab_rows),
    /* gpt_engine.h */
    ROW(fsc_engine_create),
    ROW(fsc_engine_step),
    ROW(fsc_tp_check_config),
    /* launch.h */
    ROW(fsc_launch_env_parse),
    NONE(fsc_launcher_name),
    ROW(fsc_rendezvous_close),
    ROW(fsc_rendezvous_fetch),
    ROW(fsc_rendezvous_file),
    ROW(fsc_rendezvous_listen),
    ROW(fsc_rendezvous_serve),
    ROW(fsc_rendezvous_tcp),
    /* layers.h */
    NONE(fsc_attention_opts_default),
    NONE(fsc_block_opts_default),
    NONE(fsc_init_const),
    NONE(fsc_init_normal),
    ROW(fsc_layer_add_param),
    ROW(fsc_layer_add_param_split),
    ROW(fsc_layer_attention),
    ROW(fsc_layer_block),
    ROW(fsc_layer_embedding),
    ROW(fsc_layer_embedding_opts),
    ROW(fsc_layer_free),
    ROW(fsc_layer_gelu),
    ROW(fsc_layer_gelu_mlp),
    ROW(fsc_layer_layernorm),
    ROW(fsc_layer_linear),
    ROW(fsc_layer_lm_head),
    ROW(fsc_layer_lm_head_opts),
    ROW(fsc_layer_moe_mlp),
    ROW(fsc_layer_mse),
    ROW(fsc_layer_xent),
    ROW(fsc_layer_rmsnorm),
    ROW(fsc_layer_set_init),
    ROW(fsc_layer_swiglu_mlp),
    ROW(fsc_layer_token_embedding),
    NONE(fsc_linear_opts_default),
    NONE(fsc_mlp_opts_default),
    ROW(fsc_seq_model_create),
    ROW(fsc_seq_model_layer),
    /* llama.h */
    ROW(fsc_llama_build),
    ROW(fsc_llama_config_check_json),
    NONE(fsc_llama_config_default),
    ROW(fsc_llama_config_json),
    ROW(fsc_llama_config_validate),
    NONE(fsc_llama_default_ffn),
    ROW(fsc_llama_init_values),
    ROW(fsc_llama_layer_is_moe),
    ROW(fsc_llama_model_create),
    ROW(fsc_llama_model_create_tp),
    ROW(fsc_llama_num_moe_layers),
    ROW(fsc_llama_num_params),
    ROW(fsc_llama_vocab_rows),
    ROW(fsc_llama_num_tensors),
    ROW(fsc_llama_param_info),
    /* model.h */
    NONE(fsc_lm_flops_per_token),
    ROW(fsc_model_acts_make),
    ROW(fsc_model_acts_opts_default),
    ROW(fsc_model_flops),
    ROW(fsc_model_free),
    ROW(fsc_model_num_full_params),
    ROW(fsc_model_num_params),
    ROW(fsc_model_tensor_index),
    ROW(fsc_model_validate),
    ROW(fsc_param_decays),
    ROW(fsc_param_full_index),
    ROW(fsc_param_full_numel),
    ROW(fsc_param_num_runs),
    ROW(fsc_param_run_at),
    ROW(fsc_param_used_by),
    /* moe.h */
    ROW(fsc_moe_backward),
    ROW(fsc_moe_backward_terms),
    ROW(fsc_moe_capacity),
    NONE(fsc_moe_config_default),
    ROW(fsc_moe_create),
    ROW(fsc_moe_create_view),
    ROW(fsc_moe_expert_offset),
    ROW(fsc_moe_forward),
    ROW(fsc_moe_free),
    ROW(fsc_moe_grads),
    ROW(fsc_moe_local_experts),
    ROW(fsc_moe_num_local),
    ROW(fsc_moe_num_tensors),
    ROW(fsc_moe_params),
    ROW(fsc_moe_rec_bytes),
    ROW(fsc_moe_rec_create),
    ROW(fsc_moe_rec_free),
    ROW(fsc_moe_routing),
    /* nn.h */
    ROW(fsc_attention_backward),
    ROW(fsc_attention_forward),
    ROW(fsc_attention_rec_bind),
    NONE(fsc_attention_saved_floats),
    NONE(fsc_attention_work_floats),
    ROW(fsc_attn_core_backward),
    ROW(fsc_attn_core_forward),
    ROW(fsc_block_attn_backward),
    ROW(fsc_block_attn_forward),
    ROW(fsc_block_attn_rec_bind),
    NONE(fsc_block_attn_saved_floats),
    ROW(fsc_block_backward),
    ROW(fsc_block_forward),
    ROW(fsc_block_rec_bind),
    NONE(fsc_block_saved_floats),
    NONE(fsc_block_work_floats),
    ROW(fsc_embedding_backward),
    ROW(fsc_embedding_forward),
    ROW(fsc_gelu_backward),
    ROW(fsc_gelu_forward),
    ROW(fsc_layernorm_backward),
    ROW(fsc_layernorm_forward),
    ROW(fsc_linear_backward),
    ROW(fsc_linear_forward),
    ROW(fsc_mse_backward),
    ROW(fsc_mse_forward),
    ROW(fsc_mul_backward),
    ROW(fsc_mul_forward),
    ROW(fsc_residual_backward),
    ROW(fsc_residual_forward),
    ROW(fsc_rmsnorm_backward),
    ROW(fsc_rmsnorm_forward),
    ROW(fsc_rope_backward),
    ROW(fsc_rope_forward),
    ROW(fsc_self_attn_backward),
    ROW(fsc_self_attn_backward_parts),
    ROW(fsc_self_attn_forward),
    ROW(fsc_self_attn_rec_bind),
    ROW(fsc_self_attn_saved_floats),
    ROW(fsc_self_attn_work_floats),
    ROW(fsc_silu_backward),
    ROW(fsc_silu_forward),
    ROW(fsc_swiglu_backward),
    ROW(fsc_swiglu_forward),
    ROW(fsc_swiglu_mlp_backward),
    ROW(fsc_swiglu_mlp_backward_parts),
    ROW(fsc_swiglu_mlp_forward),
    ROW(fsc_swiglu_mlp_rec_bind),
    NONE(fsc_swiglu_mlp_saved_floats),
    NONE(fsc_swiglu_mlp_work_floats),
    ROW(fsc_xent_backward),
    ROW(fsc_xent_forward),
    /* ops.h */
    ROW(fsc_op_add),
    ROW(fsc_op_add_rows),
    ROW(fsc_op_axpy),
    ROW(fsc_op_copy),
    ROW(fsc_op_fill),
    ROW(fsc_op_gelu),
    ROW(fsc_op_gelu_backward),
    ROW(fsc_op_matmul),
    ROW(fsc_op_mul),
    ROW(fsc_op_mul_backward),
    ROW(fsc_op_repeat_rows),
    ROW(fsc_op_scale),
    ROW(fsc_op_silu),
    ROW(fsc_op_silu_backward),
    ROW(fsc_op_sum),
    ROW(fsc_op_sum_rows),
    ROW(fsc_op_zero),
    /* optim.h */
    ROW(fsc_grad_clip),
    ROW(fsc_grad_norm),
    ROW(fsc_grads_nonfinite),
    ROW(fsc_loss_scaler_init),
    ROW(fsc_loss_scaler_update),
    ROW(fsc_nonfinite_vote),
    ROW(fsc_optim_add),
    NONE(fsc_optim_config_default),
    ROW(fsc_optim_create),
    ROW(fsc_optim_free),
    ROW(fsc_optim_grad),
    ROW(fsc_optim_no_decay),
    ROW(fsc_optim_num_segments),
    ROW(fsc_optim_num_states),
    ROW(fsc_optim_param),
    ROW(fsc_optim_rebind),
    ROW(fsc_optim_segment_len),
    ROW(fsc_optim_set_lr),
    ROW(fsc_optim_set_steps),
    ROW(fsc_optim_state),
    ROW(fsc_optim_step),
    ROW(fsc_optim_step_end),
    ROW(fsc_optim_step_segment),
    ROW(fsc_optim_steps),
    /* parallel.h */
    ROW(fsc_balance_by_size),
    ROW(fsc_balance_by_time),
    ROW(fsc_balance_parse),
    ROW(fsc_engine_check_finite),
    ROW(fsc_engine_comm_stats),
    ROW(fsc_engine_comm_stats_group),
    ROW(fsc_engine_create_built),
    ROW(fsc_engine_create_model),
    ROW(fsc_engine_free),
    ROW(fsc_engine_full_params),
    ROW(fsc_engine_get_trace),
    ROW(fsc_engine_host_device),
    ROW(fsc_engine_layout),
    ROW(fsc_engine_load_weights),
    ROW(fsc_engine_model),
    ROW(fsc_engine_pipe_stats),
    ROW(fsc_engine_reset_comm_stats),
    ROW(fsc_engine_reset_pipe_stats),
    ROW(fsc_engine_save_weights),
    ROW(fsc_engine_save_weights_dtype),
    ROW(fsc_engine_set_trace),
    ROW(fsc_engine_step_model),
    NONE(fsc_group_kind_name),
    ROW(fsc_layout_describe),
    ROW(fsc_layout_make),
    ROW(fsc_layout_make_ordered),
    ROW(fsc_layout_parse_order),
    ROW(fsc_layout_split),
    NONE(fsc_offload_mode_name),
    NONE(fsc_parallel_kind_name),
    NONE(fsc_parallel_opts_default),
    /* plan.h */
    ROW(fsc_plan_calibrate),
    ROW(fsc_plan_calibrate_clock),
    ROW(fsc_plan_fit_rates),
    ROW(fsc_plan_replay),
    NONE(fsc_plan_job_default),
    ROW(fsc_plan_measure),
    ROW(fsc_plan_memory),
    ROW(fsc_plan_time),
    /* rng.h */
    ROW(fsc_philox4x32),
    ROW(fsc_rng_fill_normal),
    ROW(fsc_rng_key),
    NONE(fsc_rng_normal),
    NONE(fsc_rng_uniform),
    /* safetensors.h */
    ROW(fsc_st_check_copy),
    ROW(fsc_st_close),
    ROW(fsc_st_count),
    ROW(fsc_st_entry_at),
    ROW(fsc_st_find),
    ROW(fsc_st_find_weight),
    ROW(fsc_st_find_weight_once),
    ROW(fsc_st_metadata),
    ROW(fsc_st_open),
    ROW(fsc_st_parse_buffer),
    ROW(fsc_st_read),
    ROW(fsc_st_read_f32),
    ROW(fsc_st_weight_name),
    ROW(fsc_st_writer_abort),
    ROW(fsc_st_writer_add),
    ROW(fsc_st_writer_begin_data),
    ROW(fsc_st_writer_commit),
    ROW(fsc_st_writer_meta),
    ROW(fsc_st_writer_open),
    ROW(fsc_st_writer_write),
    ROW(fsc_st_writer_write_f32),
    /* schedule.h */
    ROW(fsc_engine_lr),
    ROW(fsc_engine_set_lr),
    ROW(fsc_pipe_schedule_format),
    ROW(fsc_pipe_schedule_free),
    ROW(fsc_pipe_schedule_lists_free),
    ROW(fsc_pipe_schedule_make),
    ROW(fsc_pipe_schedule_parse),
    ROW(fsc_pipe_schedule_parse_ranks),
    ROW(fsc_pipe_schedule_validate),
    ROW(fsc_pipe_schedule_validate_placed),
    NONE(fsc_pipe_schedule_placement),
    NONE(fsc_pipe_stage_at),
    NONE(fsc_pipe_stage_rank),
    ROW(fsc_lr_at),
    NONE(fsc_lr_kind_name),
    ROW(fsc_lr_kind_parse),
    ROW(fsc_lr_schedule_validate),
    /* status.h */
    NONE(fsc_clear_error),
    ROW(fsc_error),
    ROW(fsc_error_prefix),
    ROW(fsc_error_rank),
    NONE(fsc_last_error),
    NONE(fsc_status_str),
    /* tensor.h */
    ROW(fsc_shape_str),
    ROW(fsc_tensor_is_contiguous),
    ROW(fsc_tensor_make),
    ROW(fsc_tensor_narrow),
    ROW(fsc_tensor_nbytes),
    ROW(fsc_tensor_numel),
    ROW(fsc_tensor_reshape),
    ROW(fsc_tensor_transpose),
    /* tp.h */
    ROW(fsc_tp_column_backward),
    ROW(fsc_tp_column_forward),
    NONE(fsc_tp_column_work_floats),
    ROW(fsc_tp_embedding_backward),
    ROW(fsc_tp_embedding_forward),
    NONE(fsc_tp_embedding_work_floats),
    ROW(fsc_tp_f_backward),
    ROW(fsc_tp_f_forward),
    ROW(fsc_tp_g_backward),
    ROW(fsc_tp_g_forward),
    ROW(fsc_tp_row_backward),
    ROW(fsc_tp_row_forward),
    ROW(fsc_tp_sp_gather),
    ROW(fsc_tp_sp_reduce_scatter),
    ROW(fsc_tp_vocab_localize),
    ROW(fsc_tp_xent_backward),
    ROW(fsc_tp_xent_forward),
    NONE(fsc_tp_xent_work_floats),
    /* trace.h */
    ROW(fsc_trace_arg),
    ROW(fsc_trace_begin),
    ROW(fsc_trace_capacity),
    ROW(fsc_trace_count),
    ROW(fsc_trace_create),
    ROW(fsc_trace_dropped),
    ROW(fsc_trace_end),
    ROW(fsc_trace_free),
    NONE(fsc_trace_now_us),
    NONE(fsc_trace_opts_default),
    ROW(fsc_trace_span),
    ROW(fsc_trace_write),
    /* version.h */
    NONE(fsc_version),
    NONE(fsc_version_string),
};
#define N_ROWS (sizeof rows / sizeof rows[0])

static void run_row(void **state) {
    const struct row *r = *state;
    r->cases();
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* Names in a (sorted) that b (sorted) lacks, appended to out as " name". */
static void missing_from(const char *const *a, size_t na, const char *const *b, size_t nb, char *out, size_t cap) {
    for (size_t i = 0; i < na; i++)
        if (!bsearch(&a[i], b, nb, sizeof *b, cmp_str))
            snprintf(out + strlen(out), cap - strlen(out), " %s", a[i]);
}

/* The table against the public API: every public function has a row, every row a public function. */
static void test_table_covers_the_public_api(void **state) {
    static char names[1024][64];
    const char *api[1024], *table[N_ROWS];
    size_t n_api = 0;
    FILE *f = popen("sh ci/public_api.sh", "r");
    assert_non_null(f);
    while (n_api < 1024 && fgets(names[n_api], sizeof names[n_api], f)) {
        names[n_api][strcspn(names[n_api], "\n")] = '\0';
        api[n_api] = names[n_api];
        n_api++;
    }
    if (pclose(f) != 0 || n_api == 0 || n_api == 1024)
        fail_msg("sh ci/public_api.sh failed (run the test from the repository root)");
    qsort(api, n_api, sizeof api[0], cmp_str); /* (sort's order depends on the locale) */
    for (size_t i = 0; i < N_ROWS; i++) table[i] = rows[i].name;
    qsort(table, N_ROWS, sizeof table[0], cmp_str);
    for (size_t i = 1; i < N_ROWS; i++)
        if (!strcmp(table[i - 1], table[i])) fail_msg("%s has two rows", table[i]);
    char missing[4096] = "", stale[4096] = "";
    missing_from(api, n_api, table, N_ROWS, missing, sizeof missing);
    missing_from(table, N_ROWS, api, n_api, stale, sizeof stale);
    if (missing[0]) fail_msg("public functions without a row in tests/test_null_args.c:%s", missing);
    if (stale[0]) fail_msg("rows of tests/test_null_args.c naming no public function:%s", stale);
}

static int setup(void **state) {
    if (fsc_device_create("cpu", &(fsc_device_opts){ .threads = 1 }, &dev) != FSC_OK) return -1;
    if (sim_cluster_create(1, 10.0, &cluster) != FSC_OK) return -1;
    return sim_comm_open(cluster, 0, dev, 0, &comm) == FSC_OK ? 0 : -1;
}

static int teardown(void **state) {
    fsc_comm_free(comm);
    sim_cluster_free(cluster);
    fsc_device_free(dev);
    return 0;
}

int main(void) {
    struct CMUnitTest tests[1 + N_ROWS];
    size_t n = 0;
    tests[n++] = (struct CMUnitTest){ "table_covers_the_public_api", test_table_covers_the_public_api, NULL, NULL, NULL };
    for (size_t i = 0; i < N_ROWS; i++)
        if (rows[i].cases)
            tests[n++] = (struct CMUnitTest){ rows[i].name, run_row, NULL, NULL, (void *)&rows[i] };
    return _cmocka_run_group_tests("null_args", tests, n, setup, teardown);
}
