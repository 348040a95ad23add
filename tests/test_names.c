/* SPDX-License-Identifier: MIT */
/* test_names.c -- ckpt/names.c (LAYOUT.md name rules) and decode/repr.c
 * (Python-compatible reprs), with tables of hostile names. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "base/text.h"
#include "ckpt/names.h"
#include "decode/repr.h"

static char *enc(const char *raw, size_t n)
{
	struct pt_buf b;

	pt_buf_init(&b);
	pt_name_encode(&b, (const uint8_t *)raw, n);
	assert_false(b.oom);
	return pt_buf_take(&b, NULL);
}

/* Names no file name may be, and what each becomes. */
static void test_encode_table(void **state)
{
	static const struct {
		const char *raw;
		size_t n;
		const char *out;
	} cases[] = {
		{ "weight", 6, "weight" },
		{ "", 0, "%" },
		{ ".", 1, "%2E" },
		{ "..", 2, "%2E%2E" },
		{ "...", 3, "..." },
		{ "a/b", 3, "a%2Fb" },
		{ "/", 1, "%2F" },
		{ "100%", 4, "100%25" },
		{ "%2F", 3, "%252F" },
		{ "a\0b", 3, "a%00b" },
		{ "\0", 1, "%00" },
		{ ".hidden", 7, ".hidden" },
		{ "\xc3\xa9t\xc3\xa9", 5, "\xc3\xa9t\xc3\xa9" },
	};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		char *s = enc(cases[i].raw, cases[i].n);

		if (strcmp(s, cases[i].out) != 0)
			fail_msg("case %zu: got '%s', want '%s'", i, s, cases[i].out);
		free(s);
	}
}

/* Rule 4: over PT_NAME_MAX bytes: head + "~" + 8 hex digits, cut on a
 * UTF-8 boundary, distinct for names that differ only at the end. */
static void test_encode_long(void **state)
{
	char raw[1000], *a, *b;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(raw); i++)
		raw[i] = 'x';
	a = enc(raw, PT_NAME_MAX);
	assert_int_equal(strlen(a), PT_NAME_MAX);
	free(a);
	a = enc(raw, sizeof(raw));
	raw[sizeof(raw) - 1] = 'y';
	b = enc(raw, sizeof(raw));
	assert_int_equal(strlen(a), PT_NAME_HEAD + 9);
	assert_int_equal(a[PT_NAME_HEAD], '~');
	assert_string_not_equal(a, b);
	free(a);
	free(b);
	/* 2-byte characters: the cut never splits one */
	for (i = 0; i + 1 < sizeof(raw); i += 2) {
		raw[i] = (char)0xc3;
		raw[i + 1] = (char)0xa9;
	}
	for (i = 0; i < 2; i++) {
		char *s = enc(raw, sizeof(raw) - 1 - i);
		char *tilde = strrchr(s, '~');

		assert_non_null(tilde);
		assert_true(pt_utf8_valid((const uint8_t *)s, (size_t)(tilde - s)));
		free(s);
	}
	/* '/' expanding to %2F pushes a name over the limit */
	memset(raw, '/', 100);
	a = enc(raw, 100);
	assert_non_null(strchr(a, '~'));
	assert_null(strchr(a, '/'));
	free(a);
}

static void test_repr_float(void **state)
{
	static const struct {
		double x;
		const char *out;
	} cases[] = {
		{ 0.1, "0.1" }, { 1.0, "1.0" }, { -0.0, "-0.0" }, { 1e-05, "1e-05" },
		{ 1e16, "1e+16" }, { 123456789012345.0, "123456789012345.0" },
		{ 0.0001, "0.0001" }, { 1.5e300, "1.5e+300" },
		{ 5e-324, "5e-324" }, { 0.30000000000000004, "0.30000000000000004" },
	};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		struct pt_buf b;

		pt_buf_init(&b);
		pt_repr_float(&b, cases[i].x);
		if (strcmp(b.p, cases[i].out) != 0)
			fail_msg("case %zu: got '%s', want '%s'", i, b.p, cases[i].out);
		pt_buf_free(&b);
	}
	{
		struct pt_buf b;

		pt_buf_init(&b);
		pt_repr_float(&b, INFINITY);
		pt_buf_putc(&b, ' ');
		pt_repr_float(&b, -INFINITY);
		pt_buf_putc(&b, ' ');
		pt_repr_float(&b, NAN);
		assert_string_equal(b.p, "inf -inf nan");
		pt_buf_free(&b);
	}
}

static void test_bigint(void **state)
{
	static const struct {
		const char *le;
		size_t n;
		const char *out;
	} cases[] = {
		{ "", 0, "0" },
		{ "\x01", 1, "1" },
		{ "\xff", 1, "-1" },
		{ "\x00\x01", 2, "256" },
		{ "\xff\x7f", 2, "32767" },
		{ "\x00\x80", 2, "-32768" },
		/* 2**64 */
		{ "\x00\x00\x00\x00\x00\x00\x00\x00\x01", 9, "18446744073709551616" },
		/* -(2**64) */
		{ "\x00\x00\x00\x00\x00\x00\x00\x00\xff", 9, "-18446744073709551616" },
	};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		struct pt_buf b;

		pt_buf_init(&b);
		pt_bigint_decimal(&b, (const uint8_t *)cases[i].le, cases[i].n);
		if (strcmp(b.p ? b.p : "", cases[i].out) != 0)
			fail_msg("case %zu: got '%s', want '%s'", i, b.p, cases[i].out);
		pt_buf_free(&b);
	}
}

static void test_key_text(void **state)
{
	struct pt_value s = { .kind = PT_V_STR }, i = { .kind = PT_V_INT };
	struct pt_value t = { .kind = PT_V_TUPLE }, by = { .kind = PT_V_BYTES };
	struct pt_value no = { .kind = PT_V_NONE }, bo = { .kind = PT_V_BOOL };
	struct pt_value l = { .kind = PT_V_LIST };
	struct pt_value *items[2] = { &i, &s };
	struct pt_buf b;

	(void)state;
	s.u.s.p = (const uint8_t *)"it's";
	s.u.s.len = 4;
	i.u.i = -7;
	by.u.s.p = (const uint8_t *)"\x00\xff'";
	by.u.s.len = 3;
	bo.u.b = true;
	t.u.seq.v = items;
	t.u.seq.n = 2;
	pt_buf_init(&b);
	pt_key_text(&b, &s);
	pt_buf_putc(&b, '|');
	pt_key_text(&b, &i);
	pt_buf_putc(&b, '|');
	pt_key_text(&b, &t);
	pt_buf_putc(&b, '|');
	pt_key_text(&b, &by);
	pt_buf_putc(&b, '|');
	pt_key_text(&b, &no);
	pt_buf_putc(&b, '|');
	pt_key_text(&b, &bo);
	pt_buf_putc(&b, '|');
	pt_key_text(&b, &l);
	assert_string_equal(b.p, "it's|-7|(-7, \"it's\")|b\"\\x00\\xff'\"|None|True|<builtins.list>");
	pt_buf_free(&b);
	/* a one-element tuple keeps its comma */
	t.u.seq.n = 1;
	pt_buf_init(&b);
	pt_key_text(&b, &t);
	assert_string_equal(b.p, "(-7,)");
	pt_buf_free(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_encode_table),
		cmocka_unit_test(test_encode_long),
		cmocka_unit_test(test_repr_float),
		cmocka_unit_test(test_bigint),
		cmocka_unit_test(test_key_text),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
