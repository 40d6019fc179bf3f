/* Tests of lib/core/json_str_impl.h: a C string written as a JSON string, to a file (fsc_json_put_str: trace.c,
 * flight.c) or into a buffer (fsc_json_str_buf: the sequential model's configuration text).
 * Oracles: the buffer form writes what the file form writes, byte for byte; the text parses with cJSON to the
 * string's characters, each byte that begins no valid UTF-8 character read back as U+FFFD, and is valid UTF-8;
 * a buffer too small holds "" and the return says the length needed, never a part of the string. */
#include <cjson/cJSON.h>
#include "testutil.h"
#include "core/json_str_impl.h"

static const char *const cases[] = {
    "",
    "plain.name",
    "a\"b\\c",
    "tab\there\nnew\x01\x1f del\x7f",
    "caf\xe9",             /* Latin-1 */
    "\xc3\xa9t\xc3",       /* UTF-8, then cut mid-character */
    "\xe2\x82\xac \xf0\x9f\x98\x80", /* 3 and 4 bytes */
    "\xed\xa0\x80 \xc0\xaf \xf4\x90\x80\x80", /* a surrogate, an overlong '/', past U+10FFFF */
};
static const char *const decoded[] = {
    "",
    "plain.name",
    "a\"b\\c",
    "tab\there\nnew\x01\x1f del\x7f",
    "caf\xef\xbf\xbd",
    "\xc3\xa9t\xef\xbf\xbd",
    "\xe2\x82\xac \xf0\x9f\x98\x80",
    "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd \xef\xbf\xbd\xef\xbf\xbd \xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd",
};

/* fsc_json_put_str's text for s (the caller frees it) */
static char *file_form(const char *s) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    fsc_json_put_str(f, s);
    fclose(f);
    return text;
}

static void test_buffer_form_equals_file_form(void **state) {
    (void)state;
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        char *want = file_form(cases[c]);
        char buf[FSC_JSON_STR_CAP(64)];
        assert_true(strlen(cases[c]) <= 64);
        const size_t len = fsc_json_str_buf(buf, sizeof buf, cases[c]);
        assert_int_equal(len, strlen(want));
        assert_string_equal(buf, want);
        if (!test_valid_utf8((const unsigned char *)buf)) fail_msg("case %zu: not UTF-8: %s", c, buf);
        cJSON *j = cJSON_Parse(buf);
        if (!cJSON_IsString(j)) fail_msg("case %zu: not a JSON string: %s", c, buf);
        assert_string_equal(cJSON_GetStringValue(j), decoded[c]);
        cJSON_Delete(j);
        free(want);
    }
}

/* Every capacity from 0 to one past the length: whole when the length is below it, else "" (cap > 0); the return
 * is the whole length every time; nothing is written at or past cap. */
static void test_buffer_too_small(void **state) {
    (void)state;
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        char *want = file_form(cases[c]);
        const size_t need = strlen(want);
        for (size_t cap = 0; cap <= need + 1; cap++) {
            char buf[FSC_JSON_STR_CAP(64) + 8];
            memset(buf, '#', sizeof buf);
            assert_int_equal(fsc_json_str_buf(buf, cap, cases[c]), need);
            if (cap > need) assert_string_equal(buf, want);
            else if (cap > 0) assert_string_equal(buf, "");
            for (size_t i = cap; i < sizeof buf; i++)
                if (buf[i] != '#') fail_msg("case %zu, cap %zu: byte %zu written", c, cap, i);
        }
        free(want);
    }
}

/* The bound FSC_JSON_STR_CAP holds for the worst case: every byte a 6-byte escape. */
static void test_cap_bound(void **state) {
    (void)state;
    char s[33], buf[FSC_JSON_STR_CAP(32)];
    memset(s, 0x01, 32), s[32] = '\0';
    assert_int_equal(fsc_json_str_buf(buf, sizeof buf, s), sizeof buf - 1);
    memset(s, 0xff, 32);
    assert_int_equal(fsc_json_str_buf(buf, sizeof buf, s), sizeof buf - 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_buffer_form_equals_file_form),
        cmocka_unit_test(test_buffer_too_small),
        cmocka_unit_test(test_cap_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
