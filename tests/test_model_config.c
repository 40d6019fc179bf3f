/* fsc_model_from_config (lib/model/model_config.c): the built-in models from their configuration text, the text a
 * weights file records. Oracles: a GPT-2 record (no family, or "gpt2") and a Llama record build the model their
 * fields describe (the same parameter count as the model made from the same configuration directly); bad text
 * (not JSON, not an object, a family that is not a string or not built in, a missing field, a number out of range,
 * not an integer, of the wrong type, too large for a float) is refused with FSC_ERR_FORMAT, a message naming what
 * is wrong, and no model. A family a program registers (family.h) is built from its text as the built-in ones are:
 * its from_config gets the text and its model is the one returned; names that are taken or malformed are refused.
 */
#include "testutil.h"
#include "fsc/family.h"
#include "fsc/generate.h"
#include "fsc/gpt.h"
#include "fsc/llama.h"

static void test_builds_the_recorded_model(void **state) {
    (void)state;
    fsc_device *dev = NULL;
    assert_ok(fsc_device_create("cpu", NULL, &dev));
    fsc_gpt_config g = { .layers = 2, .dim = 8, .heads = 2, .seq = 4, .vocab = 10 };
    fsc_model *m = NULL;
    assert_ok(fsc_model_from_config(dev, "{\"layers\":2,\"dim\":8,\"heads\":2,\"seq\":4,\"vocab\":10}", &m));
    assert_int_equal(fsc_model_num_params(m), fsc_gpt_num_params(&g));
    fsc_model_free(m);
    m = NULL;
    assert_ok(fsc_model_from_config(dev, "{\"family\":\"gpt2\",\"layers\":2,\"dim\":8,\"heads\":2,\"seq\":4,"
                                         "\"vocab\":10}", &m));
    assert_int_equal(fsc_model_num_params(m), fsc_gpt_num_params(&g));
    fsc_model_free(m);

    fsc_llama_config lc = fsc_llama_config_default();
    lc.layers = 2, lc.dim = 8, lc.heads = 2, lc.kv_heads = 1, lc.ffn = 12, lc.seq = 4, lc.vocab = 10;
    fsc_model *ref = NULL;
    m = NULL;
    assert_ok(fsc_llama_model_create(dev, &lc, &ref));
    assert_ok(fsc_model_from_config(dev, "{\"family\":\"llama\",\"layers\":2,\"dim\":8,\"heads\":2,\"kv_heads\":1,"
                                         "\"ffn\":12,\"seq\":4,\"vocab\":10}", &m));
    assert_int_equal(fsc_model_num_params(m), fsc_model_num_params(ref));
    fsc_model_free(m);
    fsc_model_free(ref);
    fsc_device_free(dev);
}

static void refused(fsc_device *dev, const char *text, const char *needle) {
    static fsc_model other;
    fsc_model *m = &other; /* not NULL: a refusal must clear it */
    assert_err(fsc_model_from_config(dev, text, &m), FSC_ERR_FORMAT, needle);
    assert_null(m);
}

static void test_bad_text_is_refused(void **state) {
    (void)state;
    fsc_device *dev = NULL;
    assert_ok(fsc_device_create("cpu", NULL, &dev));
    refused(dev, "", "not a JSON object");
    refused(dev, "{\"layers\":2,\"dim\":8", "not a JSON object");         /* truncated */
    refused(dev, "[1,2]", "not a JSON object");
    refused(dev, "{\"family\":3,\"layers\":2}", "family is not a string");
    refused(dev, "{\"family\":\"bert\",\"layers\":2}", "unknown family 'bert'");
    refused(dev, "{\"dim\":8}", "names no built-in model");
    refused(dev, "{\"layers\":2,\"heads\":2,\"seq\":4,\"vocab\":10}", "dim is missing");
    refused(dev, "{\"layers\":0,\"dim\":8,\"heads\":2,\"seq\":4,\"vocab\":10}", "layers = 0");
    refused(dev, "{\"layers\":1.5,\"dim\":8,\"heads\":2,\"seq\":4,\"vocab\":10}", "layers = 1.5");
    refused(dev, "{\"layers\":3e9,\"dim\":8,\"heads\":2,\"seq\":4,\"vocab\":10}", "not an integer in");
    refused(dev, "{\"layers\":\"2\",\"dim\":8,\"heads\":2,\"seq\":4,\"vocab\":10}", "layers is missing or not");
    refused(dev, "{\"layers\":2,\"dim\":8,\"heads\":2,\"seq\":4,\"vocab\":10,\"moe_capacity\":1e39}",
            "moe_capacity is missing or not a finite number");
    refused(dev, "{\"family\":\"llama\",\"layers\":2,\"dim\":8,\"heads\":2,\"seq\":4,\"vocab\":10,\"rope_theta\":"
                 "\"x\"}", "rope_theta");
    refused(dev, "{\"family\":\"llama\",\"layers\":2,\"dim\":8,\"heads\":2,\"kv_heads\":-1,\"seq\":4,\"vocab\":10}",
            "kv_heads = -1");
    fsc_model *m = NULL;
    assert_err(fsc_model_from_config(dev, NULL, &m), FSC_ERR_INVALID, "NULL");
    assert_err(fsc_model_from_config(dev, "{}", NULL), FSC_ERR_INVALID, "out is NULL");
    fsc_device_free(dev);
}

/* A program's family "tiny": a one-block GPT of width 8 whatever its text says but its "vocab"; counts its calls
 * and refuses a text with "bad". */
static int tiny_calls;
static fsc_status tiny_from_config(fsc_device *dev, const char *config, fsc_model **out) {
    tiny_calls++;
    if (strstr(config, "bad")) return fsc_error(FSC_ERR_FORMAT, "tiny: bad field");
    fsc_gpt_config g = { .layers = 1, .dim = 8, .heads = 2, .seq = 4, .vocab = strstr(config, "12") ? 12 : 10 };
    return fsc_gpt_model_create(dev, &g, out);
}

static void test_registered_family(void **state) {
    (void)state;
    fsc_device *dev = NULL;
    assert_ok(fsc_device_create("cpu", NULL, &dev));
    fsc_model *m = NULL;
    assert_err(fsc_model_from_config(dev, "{\"family\":\"tiny\"}", &m), FSC_ERR_FORMAT, "unknown family 'tiny'");
    assert_null(fsc_model_family_find("tiny"));
    assert_ok(fsc_model_family_register(&(fsc_model_family){ "tiny", tiny_from_config }));
    const fsc_model_family *f = fsc_model_family_find("tiny");
    assert_non_null(f);
    assert_string_equal(f->name, "tiny");
    assert_ok(fsc_model_from_config(dev, "{\"family\":\"tiny\",\"vocab\":12}", &m));
    assert_int_equal(tiny_calls, 1);
    fsc_gpt_config g = { .layers = 1, .dim = 8, .heads = 2, .seq = 4, .vocab = 12 };
    assert_int_equal(fsc_model_num_params(m), fsc_gpt_num_params(&g)); /* the family's model, from its text */
    fsc_model_free(m);
    m = NULL;
    assert_err(fsc_model_from_config(dev, "{\"family\":\"tiny\",\"bad\":1}", &m), FSC_ERR_FORMAT, "tiny: bad field");
    assert_null(m);
    /* the built-in families are found and stay theirs; taken and malformed names are refused */
    assert_non_null(fsc_model_family_find("gpt2"));
    assert_non_null(fsc_model_family_find("llama"));
    assert_null(fsc_model_family_find("bert"));
    assert_err(fsc_model_family_register(&(fsc_model_family){ "tiny", tiny_from_config }), FSC_ERR_INVALID,
               "already registered");
    assert_err(fsc_model_family_register(&(fsc_model_family){ "llama", tiny_from_config }), FSC_ERR_INVALID,
               "already registered");
    assert_err(fsc_model_family_register(&(fsc_model_family){ "a b", tiny_from_config }), FSC_ERR_INVALID, "'a b'");
    assert_err(fsc_model_family_register(&(fsc_model_family){ "", tiny_from_config }), FSC_ERR_INVALID, "a name is");
    assert_err(fsc_model_family_register(&(fsc_model_family){ "nobuild", NULL }), FSC_ERR_INVALID, "from_config");
    assert_null(fsc_model_family_find("nobuild"));
    /* at most 32: the 33rd is refused (one is "tiny") */
    static char names[40][16];
    fsc_status s = FSC_OK;
    int i = 0;
    for (; i < 40 && s == FSC_OK; i++) {
        snprintf(names[i], sizeof names[i], "f%d", i);
        s = fsc_model_family_register(&(fsc_model_family){ names[i], tiny_from_config });
    }
    assert_int_equal(s, FSC_ERR_UNSUPPORTED);
    assert_int_equal(i, 32);
    fsc_device_free(dev);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_builds_the_recorded_model),
        cmocka_unit_test(test_bad_text_is_refused),
        cmocka_unit_test(test_registered_family),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
