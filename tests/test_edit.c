/* SPDX-License-Identifier: MIT */
/*
 * test_edit.c -- ckpt/edit.c without a checkpoint: the NAME.json text a
 * writable mount takes for a new tensor (pt_edit_spec_parse()).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include <errno.h>

#include "ckpt/ckpt.h"

static int parse(const char *text, struct pt_edit_spec *sp, struct pt_error *err)
{
	pt_error_clear(err);
	return pt_edit_spec_parse(text, strlen(text), sp, err);
}

static void test_declarations(void **state)
{
	struct pt_edit_spec sp;
	struct pt_error err;

	(void)state;
	assert_int_equal(parse("{\"dtype\": \"float32\", \"shape\": [10, 4]}", &sp, &err), 0);
	assert_string_equal(sp.dtype, "float32");
	assert_int_equal(sp.rank, 2);
	assert_int_equal(sp.shape[0], 10);
	assert_int_equal(sp.shape[1], 4);
	assert_int_equal(sp.nbytes, 160);
	/* ptfs's own NAME.json: every key, C strides */
	assert_int_equal(parse("{\"dtype\": \"bfloat16\", \"shape\": [3, 1, 2], \"stride\": [2, 7, 1], "
			       "\"storage_offset\": 5, \"nbytes\": 12, \"requires_grad\": true, "
			       "\"byteorder\": \"little\", \"zero_copy\": false}\n", &sp, &err), 0);
	assert_string_equal(sp.dtype, "bfloat16");
	assert_int_equal(sp.nbytes, 12);
	/* a scalar, an empty tensor; an alias names the canonical dtype */
	assert_int_equal(parse("{\"shape\": [], \"dtype\": \"long\"}", &sp, &err), 0);
	assert_string_equal(sp.dtype, "int64");
	assert_int_equal(sp.rank, 0);
	assert_int_equal(sp.nbytes, 8);
	assert_int_equal(parse("{\"dtype\": \"int8\", \"shape\": [0, 5]}", &sp, &err), 0);
	assert_int_equal(sp.nbytes, 0);
}

static void refused(const char *text, const char *why)
{
	struct pt_edit_spec sp;
	struct pt_error err;

	assert_int_equal(parse(text, &sp, &err), -EINVAL);
	if (!strstr(err.msg, why))
		fail_msg("'%s': '%s' lacks '%s'", text, err.msg, why);
	assert_null(strchr(err.msg, '\n'));
}

static void test_refusals(void **state)
{
	(void)state;
	refused("{\"dtype\": \"float33\", \"shape\": [2]}", "not a torch dtype");
	refused("{\"dtype\": \"quint4x2\", \"shape\": [2]}", "not a torch dtype");
	refused("{\"dtype\": 4, \"shape\": [2]}", "must be a string");
	refused("{\"dtype\": \"float32\"}", "are needed");
	refused("{\"shape\": [2]}", "are needed");
	refused("{\"dtype\": \"float32\", \"shape\": [2, 3], \"stride\": [1, 2]}", "C order");
	refused("{\"dtype\": \"float32\", \"shape\": [2, 3], \"stride\": [3]}", "C order");
	refused("{\"dtype\": \"float32\", \"shape\": [-1]}", "the JSON");
	refused("{\"dtype\": \"float32\", \"shape\": [2,", "the JSON");
	refused("[1, 2]", "not a JSON object");
	refused("{\"dtype\": \"float64\", \"shape\": [4294967296, 4294967296]}", "too large");
	refused("{\"dtype\": \"float64\", \"shape\": [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, "
		"1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, "
		"1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]}", "64 dimensions");
	refused("{\"dtype\": \"float32\", \"shape\": [2]} x", "the JSON");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_declarations),
		cmocka_unit_test(test_refusals),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
