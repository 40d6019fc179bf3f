/* Tests of examples/train_gpt.c with --model llama: runs the built trainer (build/<x>/train_gpt, next to this
 * binary's tests/ folder) on tiny Llamas.
 *
 * Oracles: FSDP on 2 ranks and a 2-stage pipeline with ZeRO-2 inside each stage report bit-identical losses and
 * weights against DDP (--check-ddp, the trainer's own bitwise comparison; exit 3 otherwise); the parameter count
 * is the Llama's; the saved weights carry the Hugging Face names and shapes (--ffn defaulting to Llama's rule)
 * and load back; tensor parallelism: FSDP at dp 2 x tp 2, ZeRO-2 with sequence parallelism and dp 2 x tp 2 x pp 2
 * equal DDP at the same tp bit for bit (--check-ddp), and tp 2 reports the losses of tp 1 within 1e-4 relative;
 * sizes that do not split over --tp and the options of one family given to the other are refused with exit 2 and
 * a message naming the option. */
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <unistd.h>
#include "trainertest.h"
#include "fsc/llama.h"

static char trainer[PATH_MAX];
static char tmpdir[64];

#define TINY "--model llama --layers 2 --dim 16 --heads 4 --kv-heads 2 --seq 8 --batch 4 --steps 3"

/* The JSON of a tiny run with extra args (fails the test if the run fails). */
static cJSON *run_json(const char *extra) {
    char *args = prog_fmt(TINY " --data '%s/data.txt' %s", tmpdir, extra);
    cJSON *j = prog_json(trainer, tmpdir, "", args);
    free(args);
    return j;
}

static void assert_bit_identical(cJSON *j, const char *what) {
    cJSON *k = cJSON_GetObjectItem(j, "check_ddp");
    if (!k || !cJSON_IsTrue(cJSON_GetObjectItem(k, "bit_identical"))) fail_msg("%s: not bit-identical with DDP", what);
}

static void test_fsdp_and_pipeline_equal_ddp(void **st) {
    (void)st;
    cJSON *j = run_json("--world 2 --parallel fsdp --check-ddp");
    assert_bit_identical(j, "fsdp on 2 ranks");
    fsc_llama_config c = { .layers = 2, .dim = 16, .heads = 4, .kv_heads = 2, .ffn = fsc_llama_default_ffn(16),
                           .seq = 8, .vocab = 256, .rope_theta = 1e4f, .norm_eps = 1e-5f };
    assert_int_equal((size_t)cJSON_GetObjectItem(j, "params")->valuedouble, fsc_llama_num_params(&c));
    cJSON *cfg = cJSON_GetObjectItem(j, "config");
    assert_string_equal(cJSON_GetObjectItem(cfg, "model")->valuestring, "llama");
    assert_int_equal(cJSON_GetObjectItem(cfg, "ffn")->valueint, 256);
    cJSON_Delete(j);
    j = run_json("--world 4 --pp 2 --parallel zero2 --accum 2 --schedule 1f1b --check-ddp");
    assert_bit_identical(j, "a 2-stage pipeline with zero2 in each stage");
    cJSON_Delete(j);
}

static void test_weights_in_hf_names(void **st) {
    (void)st;
    char *path = prog_fmt("%s/w.safetensors", tmpdir), *extra = prog_fmt("--save '%s'", path);
    cJSON_Delete(run_json(extra));
    fsc_st_file *f = NULL;
    assert_ok(fsc_st_open(path, &f));
    const fsc_st_entry *e = fsc_st_find(f, "model.layers.1.mlp.gate_proj.weight");
    assert_non_null(e);
    assert_int_equal(e->shape[0], 256); /* --ffn: Llama's rule for dim 16 */
    assert_int_equal(e->shape[1], 16);
    e = fsc_st_find(f, "model.layers.0.self_attn.v_proj.weight");
    assert_non_null(e);
    assert_int_equal(e->shape[0], 8); /* 2 kv heads of 4 */
    assert_non_null(fsc_st_find(f, "lm_head.weight"));
    assert_non_null(fsc_st_find(f, "model.norm.weight"));
    assert_int_equal(fsc_st_count(f), 1 + 9 * 2 + 2);
    fsc_st_close(f);
    free(extra);
    extra = prog_fmt("--load '%s' --world 2 --parallel zero1", path);
    cJSON_Delete(run_json(extra));
    free(extra);
    free(path);
}

static void test_tensor_parallel(void **st) {
    (void)st;
    cJSON *j = run_json("--world 4 --tp 2 --parallel fsdp --check-ddp");
    assert_bit_identical(j, "fsdp at dp 2 x tp 2");
    double tp2[3], tp1[3];
    prog_doubles(j, "losses", tp2, 3, 0.0);
    cJSON_Delete(j);
    j = run_json("--world 2 --parallel ddp");
    prog_doubles(j, "losses", tp1, 3, 0.0);
    cJSON_Delete(j);
    for (int i = 0; i < 3; i++)
        if (!(fabs(tp2[i] - tp1[i]) <= 1e-4 * fabs(tp1[i])))
            fail_msg("step %d: loss %.9g at tp 2, %.9g at tp 1", i, tp2[i], tp1[i]);
    j = run_json("--world 4 --tp 2 --sequence-parallel --parallel zero2 --check-ddp");
    assert_bit_identical(j, "zero2 at dp 2 x tp 2 with sequence parallelism");
    cJSON_Delete(j);
    j = run_json("--world 8 --tp 2 --pp 2 --parallel ddp --accum 2 --check-ddp");
    assert_bit_identical(j, "dp 2 x tp 2 x pp 2");
    cJSON_Delete(j);
}

static void test_refused(void **st) {
    (void)st;
    struct { const char *args, *needle; } cases[] = {
        { TINY " --world 4 --tp 4 --parallel none", "--tp 4: --kv-heads 2 does not divide over the tensor group" },
        { TINY " --world 2 --tp 2 --seq 9 --sequence-parallel", "--seq 9 does not divide by --tp 2" },
        /* before any rank starts (the model refused it after the banner) */
        { TINY " --world 2 --tp 2 --vocab 8 --padded-vocab 16", "--tp 2: --padded-vocab 16 (--vocab 8) leaves the last "
          "rank's slice of 8 rows without a real one" },
        { TINY " --moe-experts 2 --moe-top-k 3", "--moe-top-k" },
        { TINY " --kv-heads 3", "kv_heads 3 must divide heads 4" },
        { TINY " --norm-eps 0", "norm_eps" },
        { "--model gpt2 --kv-heads 2", "--kv-heads applies to --model llama only" },
        { "--model gpt2 --rope-theta 500", "--rope-theta applies to --model llama only" },
        { "--model gpt2 --dim 16 --ffn 32", "--ffn 32" },
        { "--model bert", "--model" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        prog_refused(trainer, cases[i].args, tmpdir, 2, cases[i].needle);
    }
    char *out = NULL; /* the options are in --help */
    assert_int_equal(prog_run(trainer, "--help", tmpdir, &out, NULL), 0);
    const char *names[] = { "--model NAME", "--kv-heads K", "--ffn N", "--rope-theta X", "--norm-eps X" };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strstr(out, names[i])) fail_msg("--help lacks %s", names[i]);
    free(out);
}

/* A Llama file without lm_head.weight (Hugging Face's state dict of a LlamaForCausalLM with tie_word_embeddings)
 * is refused by the trainer's --load and by the sampler with exit 1 and a message saying why: the embeddings are
 * tied and fsc's Llama is untied, so lm_head.weight is needed. The same file with the head loads. */
static void test_tied_head_refused(void **st) {
    (void)st;
    char *full = prog_fmt("%s/full.safetensors", tmpdir), *tied = prog_fmt("%s/tied.safetensors", tmpdir);
    char *extra = prog_fmt("--save '%s'", full);
    cJSON_Delete(run_json(extra));
    free(extra);
    fsc_st_file *f = NULL;
    fsc_st_writer *w = NULL;
    assert_ok(fsc_st_open(full, &f));
    assert_ok(fsc_st_writer_open(tied, &w));
    int keep[64], nk = 0;
    for (int i = 0; i < fsc_st_count(f) && nk < 64; i++) {
        const fsc_st_entry *e = fsc_st_entry_at(f, i);
        if (strcmp(e->name, "lm_head.weight") == 0) continue;
        assert_ok(fsc_st_writer_add(w, e->name, e->dtype, e->ndim, e->shape));
        keep[nk++] = i;
    }
    assert_int_equal(nk, fsc_st_count(f) - 1);
    assert_ok(fsc_st_writer_begin_data(w));
    for (int k = 0; k < nk; k++) {
        const fsc_st_entry *e = fsc_st_entry_at(f, keep[k]);
        uint64_t n = (e->end - e->begin) / 4;
        float *buf = malloc(n * sizeof *buf);
        assert_non_null(buf);
        assert_ok(fsc_st_read(f, e, buf, 0, n));
        assert_ok(fsc_st_writer_write_f32(w, k, buf, 0, n));
        free(buf);
    }
    assert_ok(fsc_st_writer_commit(w));
    fsc_st_close(f);
    const char *why = "lm_head.weight is missing: the file holds a Llama with tied embeddings";
    char *args = prog_fmt(TINY " --data '%s/data.txt' --load '%s'", tmpdir, tied), *err = NULL;
    int rc = prog_run(trainer, args, tmpdir, NULL, &err);
    if (rc != 1 || !strstr(err, why) || !strstr(err, "fsc's Llama is untied"))
        fail_msg("--load of a tied file: exit %d, \"%s\"", rc, err);
    free(err), free(args);
    char sampler[PATH_MAX + 16];
    snprintf(sampler, sizeof sampler, "%.*s/sample", (int)(strrchr(trainer, '/') - trainer), trainer);
    args = prog_fmt("--model '%s' --model-config '{\"family\":\"llama\",\"layers\":2,\"dim\":16,\"heads\":4,"
                    "\"kv_heads\":2,\"seq\":8,\"vocab\":256}'", tied);
    rc = prog_run(sampler, args, tmpdir, NULL, &err);
    if (rc != 1 || !strstr(err, why)) fail_msg("sample of a tied file: exit %d, \"%s\"", rc, err);
    free(err), free(args);
    args = prog_fmt("--model '%s' --tokens 2", full);
    assert_int_equal(prog_run(sampler, args, tmpdir, NULL, NULL), 0);
    free(args), free(full), free(tied);
}

int main(int argc, char **argv) {
    (void)argc;
    if (prog_setup(argv[0], "test_trainer_llama", "train_gpt", trainer, sizeof trainer, tmpdir, sizeof tmpdir)) return 1;
    if (prog_write_letters(tmpdir, "data.txt", 400)) return 1; /* bytes below --vocab 256 */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fsdp_and_pipeline_equal_ddp),
        cmocka_unit_test(test_weights_in_hf_names),
        cmocka_unit_test(test_tensor_parallel),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_tied_head_refused),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    test_rmtree(tmpdir);
    return rc;
}
