/* fsc_model_from_config (lib/model/model_config.c): the built-in models from their configuration text, the text a
 * weights file records. Oracles: a GPT-2 record (no family, or "gpt2") and a Llama record build the model their
 * fields describe (the same parameter count as the model made from the same configuration directly); bad text
 * (not JSON, not an object, a family that is not a string or not built in, a missing field, a number out of range,
 * not an integer, of the wrong type, too large for a float) is refused with FSC_ERR_FORMAT, a message naming what
 * is wrong, and no model. */
#include "testutil.h"
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_builds_the_recorded_model),
        cmocka_unit_test(test_bad_text_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
