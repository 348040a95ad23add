/* SPDX-License-Identifier: MIT */
/* test_buf.c -- pt_buf and pt_error. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "base/buf.h"
#include "base/error.h"
#include "base/json.h"

static void test_printf_and_take(void **state)
{
	struct pt_buf b;
	size_t len;
	char *s;

	(void)state;
	pt_buf_init(&b);
	pt_buf_printf(&b, "%d-%s", 42, "x");
	pt_buf_puts(&b, "!");
	s = pt_buf_take(&b, &len);
	assert_string_equal(s, "42-x!");
	assert_int_equal(len, 5);
	free(s);
}

static void test_json_escape(void **state)
{
	static const uint8_t in[] = { 'a', '"', '\\', '\n', 0x01, 0xff,
				      0xc3, 0xa9 };
	struct pt_buf b;

	(void)state;
	pt_buf_init(&b);
	pt_json_str(&b, in, sizeof(in));
	assert_string_equal(b.p, "a\\\"\\\\\\n\\u0001\\u00ff\xc3\xa9");
	pt_buf_free(&b);
}

static void test_error_first_wins(void **state)
{
	struct pt_error e;

	(void)state;
	pt_error_clear(&e);
	assert_int_equal(pt_fail(&e, -EBADMSG, "first %d", 1), -EBADMSG);
	assert_int_equal(pt_fail(&e, -EIO, "second"), -EIO);
	assert_string_equal(e.msg, "first 1");
	pt_error_prefix(&e, "zip");
	assert_string_equal(e.msg, "zip: first 1");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_printf_and_take),
		cmocka_unit_test(test_json_escape),
		cmocka_unit_test(test_error_first_wins),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
