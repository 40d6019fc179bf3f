/* Tests for lib/core/tensor.c: contiguous tensors, views and their argument checks.
 * Oracles: strides and offsets derived by hand for row-major layouts; error cases must fail with
 * FSC_ERR_INVALID and a message naming the problem. */
#include "testutil.h"

static void test_make_contiguous(void **state) {
    (void)state;
    float buf[24];
    int64_t shape[3] = {2, 3, 4};
    fsc_tensor t = fsc_tensor_make(buf, FSC_F32, 3, shape, NULL);
    assert_int_equal(t.ndim, 3);
    assert_int_equal(t.stride[0], 12);
    assert_int_equal(t.stride[1], 4);
    assert_int_equal(t.stride[2], 1);
    assert_int_equal(fsc_tensor_numel(&t), 24);
    assert_int_equal(fsc_tensor_nbytes(&t), 96);
    assert_true(fsc_tensor_is_contiguous(&t));
    assert_ptr_equal(t.data, buf);
    assert_null(t.dev);
    fsc_tensor s = fsc_tensor_make(NULL, FSC_BF16, 0, NULL, NULL);
    assert_int_equal(fsc_tensor_numel(&s), 1); /* a scalar */
    assert_int_equal(fsc_tensor_nbytes(&s), 2);
    /* more dimensions than a tensor holds, or fewer than none: the empty tensor (its data NULL), never a tensor of
     * the first FSC_MAX_DIMS dimensions' elements */
    const int64_t five[5] = { 2, 3, 4, 5, 6 };
    const int bad[2] = { FSC_MAX_DIMS + 1, -1 };
    for (int k = 0; k < 2; k++) {
        fsc_tensor e = fsc_tensor_make(buf, FSC_F32, bad[k], five, NULL);
        assert_null(e.data);
        assert_int_equal(e.ndim, 0);
    }
}

static void test_narrow(void **state) {
    (void)state;
    float buf[24];
    int64_t shape[3] = {2, 3, 4};
    fsc_tensor t = fsc_tensor_make(buf, FSC_F32, 3, shape, NULL), v;
    assert_ok(fsc_tensor_narrow(&t, 0, 1, 1, &v));
    assert_ptr_equal(v.data, buf + 12);
    assert_int_equal(v.shape[0], 1);
    assert_true(fsc_tensor_is_contiguous(&v));
    assert_ok(fsc_tensor_narrow(&t, 1, 1, 2, &v));
    assert_ptr_equal(v.data, buf + 4);
    assert_int_equal(v.shape[1], 2);
    assert_int_equal(v.stride[0], 12);
    assert_false(fsc_tensor_is_contiguous(&v)); /* rows of 8 with a stride of 12 */
    assert_ok(fsc_tensor_narrow(&t, 2, 4, 0, &v)); /* empty at the end is fine */
    assert_int_equal(fsc_tensor_numel(&v), 0);
    assert_err(fsc_tensor_narrow(&t, 3, 0, 1, &v), FSC_ERR_INVALID, "dimension 3");
    assert_err(fsc_tensor_narrow(&t, -1, 0, 1, &v), FSC_ERR_INVALID, "out of range");
    assert_err(fsc_tensor_narrow(&t, 1, 2, 2, &v), FSC_ERR_INVALID, "[2, 4)");
    assert_err(fsc_tensor_narrow(&t, 0, -1, 1, &v), FSC_ERR_INVALID, "outside shape [2, 3, 4]");
    assert_err(fsc_tensor_narrow(&t, 0, 0, -1, &v), FSC_ERR_INVALID, "outside");
    /* sizes past int64 (UBSan: no signed overflow): the end of a range, a shape's strides and count saturate */
    assert_err(fsc_tensor_narrow(&t, 0, INT64_MAX, 1, &v), FSC_ERR_INVALID, "outside shape");
    const int64_t huge[2] = { INT64_MAX, 4 };
    fsc_tensor big = fsc_tensor_make(NULL, FSC_F32, 2, huge, NULL);
    assert_true(fsc_tensor_numel(&big) == INT64_MAX);
    fsc_tensor h = fsc_tensor_make(NULL, FSC_F16, 3, shape, NULL);
    assert_ok(fsc_tensor_narrow(&h, 0, 1, 1, &v)); /* no data: only the shape changes */
    assert_null(v.data);
}

static void test_reshape(void **state) {
    (void)state;
    uint16_t buf[24];
    int64_t shape[3] = {2, 3, 4}, flat[2] = {6, 4}, bad[2] = {5, 5}, neg[2] = {-6, -4};
    fsc_tensor t = fsc_tensor_make(buf, FSC_BF16, 3, shape, NULL), r, v;
    assert_ok(fsc_tensor_reshape(&t, 2, flat, &r));
    assert_int_equal(r.stride[0], 4);
    assert_int_equal(r.dtype, FSC_BF16);
    assert_ptr_equal(r.data, buf);
    assert_err(fsc_tensor_reshape(&t, 2, bad, &r), FSC_ERR_INVALID, "24 elements");
    assert_err(fsc_tensor_reshape(&t, 2, neg, &r), FSC_ERR_INVALID, "negative");
    assert_err(fsc_tensor_reshape(&t, 5, flat, &r), FSC_ERR_INVALID, "dimensions");
    assert_ok(fsc_tensor_transpose(&t, 0, 2, &v));
    assert_err(fsc_tensor_reshape(&v, 2, flat, &r), FSC_ERR_INVALID, "not contiguous");
    /* a narrowed view along dim 0 is still contiguous and can be reshaped */
    assert_ok(fsc_tensor_narrow(&t, 0, 1, 1, &v));
    int64_t s2[2] = {3, 4};
    assert_ok(fsc_tensor_reshape(&v, 2, s2, &r));
    assert_ptr_equal(r.data, buf + 12);
}

static void test_transpose(void **state) {
    (void)state;
    float buf[6];
    int64_t shape[2] = {2, 3};
    fsc_tensor t = fsc_tensor_make(buf, FSC_F32, 2, shape, NULL), v;
    assert_ok(fsc_tensor_transpose(&t, 0, 1, &v));
    assert_int_equal(v.shape[0], 3);
    assert_int_equal(v.shape[1], 2);
    assert_int_equal(v.stride[0], 1);
    assert_int_equal(v.stride[1], 3);
    assert_false(fsc_tensor_is_contiguous(&v));
    assert_ok(fsc_tensor_transpose(&v, 1, 0, &v));
    assert_true(fsc_tensor_is_contiguous(&v));
    assert_err(fsc_tensor_transpose(&t, 0, 2, &v), FSC_ERR_INVALID, "(0, 2)");
}

/* Shapes whose element count passes int64 or size_t (UBSan: no signed overflow): a made tensor of such a shape is
 * contiguous (its strides and the check saturate alike; the check called [3, 2^62, 4] strided), its bytes are
 * SIZE_MAX (they wrapped to 2^64 - 4 and to 4 x a negative count), and a reshape to such a shape is refused (its
 * count wrapped, to 0 for [2^62, 4], and the view of 0 elements was accepted over a tensor of none). */
static void test_sizes_past_int64(void **state) {
    (void)state;
    const int64_t huge[4] = { 1 << 20, 1 << 20, 1 << 20, 1 << 20 }, wrap[2] = { (int64_t)1 << 62, 4 };
    const int64_t three[3] = { 3, (int64_t)1 << 62, 4 }; /* the check's count wrapped to 0 at dimension 0 */
    fsc_tensor t = fsc_tensor_make(NULL, FSC_F32, 4, huge, NULL), w = fsc_tensor_make(NULL, FSC_F32, 3, three, NULL), r;
    assert_true(fsc_tensor_is_contiguous(&t));
    assert_true(fsc_tensor_is_contiguous(&w));
    assert_true(fsc_tensor_nbytes(&t) == SIZE_MAX);
    const int64_t over[1] = { ((int64_t)1 << 62) + 1 }; /* 2^62 + 1 elements of 4 bytes: past size_t */
    fsc_tensor o = fsc_tensor_make(NULL, FSC_F32, 1, over, NULL);
    assert_true(fsc_tensor_nbytes(&o) == SIZE_MAX);
    const int64_t neg[2] = { -1, 4 };
    fsc_tensor n = fsc_tensor_make(NULL, FSC_F32, 2, neg, NULL);
    assert_true(fsc_tensor_nbytes(&n) == SIZE_MAX);
    const int64_t none[1] = { 0 };
    fsc_tensor z = fsc_tensor_make(NULL, FSC_F32, 1, none, NULL);
    assert_err(fsc_tensor_reshape(&z, 2, wrap, &r), FSC_ERR_INVALID, "more elements than int64");
    assert_err(fsc_tensor_reshape(&z, 4, huge, &r), FSC_ERR_INVALID, "more elements than int64");
}

static void test_shape_str(void **state) {
    (void)state;
    char buf[32];
    int64_t shape[4] = {2, 3, 4, 1000000000000LL};
    fsc_shape_str(buf, sizeof buf, 3, shape);
    assert_string_equal(buf, "[2, 3, 4]");
    fsc_shape_str(buf, sizeof buf, 0, shape);
    assert_string_equal(buf, "[]");
    fsc_shape_str(buf, 8, 4, shape); /* truncated, still terminated */
    assert_int_equal(strlen(buf), 7);
    assert_int_equal(strncmp(buf, "[2, 3, ", 7), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_make_contiguous), cmocka_unit_test(test_narrow), cmocka_unit_test(test_reshape),
        cmocka_unit_test(test_transpose),       cmocka_unit_test(test_shape_str),
        cmocka_unit_test(test_sizes_past_int64),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
