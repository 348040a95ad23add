/* SPDX-License-Identifier: MIT */
/* test_json.c -- base/json.c: the scanner over good and corrupt documents,
 * and the emitter (always valid UTF-8 JSON, surrogates as \udXXX). */
#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "base/buf.h"
#include "base/json.h"
#include "base/text.h"

/* {"name": [1, 2], "s": "x\u00e9\ud83d\ude00", "skip": {"a": [true, null, -1.5e3]}} */
static void test_scan_document(void **state)
{
	static const char doc[] =
		" {\"name\": [1, 2], \"s\": \"x\\u00e9\\ud83d\\ude00\\n\","
		" \"skip\": {\"a\": [true, null, -1.5e3, \"\\\"\"]}} ";
	struct pt_error err;
	struct pt_js j;
	const uint8_t *s;
	size_t n;
	uint64_t v;
	bool empty, more;

	(void)state;
	pt_error_clear(&err);
	assert_int_equal(pt__js_init(&j, (const uint8_t *)doc, sizeof(doc) - 1, "doc", &err), 0);
	assert_int_equal(pt__js_open(&j, '{', &empty), 0);
	assert_false(empty);
	assert_int_equal(pt__js_key(&j, &s, &n), 0);
	assert_memory_equal(s, "name", 4);
	assert_int_equal(pt__js_open(&j, '[', &empty), 0);
	assert_int_equal(pt__js_uint(&j, 10, &v), 0);
	assert_int_equal(v, 1);
	assert_int_equal(pt__js_next(&j, ']', &more), 0);
	assert_true(more);
	assert_int_equal(pt__js_uint(&j, 10, &v), 0);
	assert_int_equal(v, 2);
	assert_int_equal(pt__js_next(&j, ']', &more), 0);
	assert_false(more);
	assert_int_equal(pt__js_next(&j, '}', &more), 0);
	assert_true(more);
	assert_int_equal(pt__js_key(&j, &s, &n), 0);
	assert_int_equal(pt__js_str(&j, &s, &n), 0);
	assert_int_equal(n, 1 + 2 + 4 + 1);
	assert_memory_equal(s, "x\xc3\xa9\xf0\x9f\x98\x80\n", n);
	assert_true(pt_utf8_valid(s, n));
	assert_int_equal(pt__js_next(&j, '}', &more), 0);
	assert_int_equal(pt__js_key(&j, &s, &n), 0);
	assert_int_equal(pt__js_skip(&j), 0);
	assert_int_equal(pt__js_next(&j, '}', &more), 0);
	assert_false(more);
	assert_int_equal(pt__js_end(&j), 0);
	free(pt__js_take(&j));
	pt__js_free(&j);
}

/* Skip one value of each document: it must fail with -EBADMSG and a
 * message naming the document and a byte offset. */
static const char *const corrupt[] = {
	"",                             /* nothing */
	"{",                            /* unterminated object */
	"[1, 2",                        /* unterminated array */
	"[1,]",                         /* trailing comma */
	"{\"a\" 1}",                    /* missing colon */
	"{1: 2}",                       /* key not a string */
	"\"abc",                        /* unterminated string */
	"\"a\x01\"",                    /* control character */
	"\"\\x\"",                      /* bad escape */
	"\"\\u12\"",                    /* truncated \u */
	"\"\\uzzzz\"",                  /* bad hex */
	"\"\\udc00\"",                  /* lone low surrogate */
	"\"\\ud800\"",                  /* lone high surrogate */
	"\"\\ud800\\u0041\"",           /* bad pair */
	"\"\xed\xa0\x80\"",             /* raw surrogate */
	"\"\xc0\xaf\"",                 /* overlong */
	"\"\xff\"",                     /* not UTF-8 */
	"tru",                          /* truncated literal */
	"nul",
	"-",                            /* bad number */
	"01",                           /* leading zero */
	"1.",                           /* fraction without digits */
	"1e",                           /* exponent without digits */
	"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]",
};

static void test_corrupt_table(void **state)
{
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(corrupt) / sizeof(*corrupt); i++) {
		struct pt_error err;
		struct pt_js j;
		int rc;

		pt_error_clear(&err);
		assert_int_equal(pt__js_init(&j, (const uint8_t *)corrupt[i],
					     strlen(corrupt[i]), "doc", &err), 0);
		rc = pt__js_skip(&j);
		if (rc == 0)
			rc = pt__js_end(&j);
		if (rc != -EBADMSG)
			fail_msg("case %zu (%s): rc %d", i, corrupt[i], rc);
		if (strncmp(err.msg, "doc: at byte ", 13) != 0)
			fail_msg("case %zu: message '%s'", i, err.msg);
		pt__js_free(&j);
	}
}

static void test_uint_limits(void **state)
{
	static const char *const bad[] = { "-1", "1.5", "1e3", "18446744073709551616", "11" };
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		struct pt_error err;
		struct pt_js j;
		uint64_t v;

		pt_error_clear(&err);
		assert_int_equal(pt__js_init(&j, (const uint8_t *)bad[i], strlen(bad[i]), "n", &err), 0);
		if (pt__js_uint(&j, 10, &v) == 0 && pt__js_end(&j) == 0)
			fail_msg("%s accepted as an integer <= 10", bad[i]);
		pt__js_free(&j);
	}
}

static void test_emitter(void **state)
{
	static const struct {
		const char *in;
		size_t n;
		const char *out;
	} cases[] = {
		{ "plain", 5, "plain" },
		{ "q\"b\\", 4, "q\\\"b\\\\" },
		{ "\n\t\x01", 3, "\\n\\t\\u0001" },
		{ "\xc3\xa9", 2, "\xc3\xa9" },
		/* a lone surrogate as Python pickles it: its escape */
		{ "a\xed\xa0\x80z", 5, "a\\ud800z" },
		{ "\xed\xbf\xbf", 3, "\\udfff" },
		/* other invalid bytes: \u00XX of the byte */
		{ "\xff", 1, "\\u00ff" },
		{ "\xc0\xaf", 2, "\\u00c0\\u00af" },
		{ "\xe2\x82", 2, "\\u00e2\\u0082" },
	};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		struct pt_buf b;

		pt_buf_init(&b);
		pt_json_str(&b, (const uint8_t *)cases[i].in, cases[i].n);
		if (strcmp(b.p, cases[i].out) != 0)
			fail_msg("case %zu: got '%s'", i, b.p);
		if (!pt_utf8_valid((const uint8_t *)b.p, b.len))
			fail_msg("case %zu: output is not UTF-8", i);
		pt_buf_free(&b);
	}
	{
		const int64_t v[] = { 1, -2, INT64_MAX };
		struct pt_buf b;

		pt_buf_init(&b);
		pt_json_ints(&b, v, 3);
		assert_string_equal(b.p, "[1, -2, 9223372036854775807]");
		pt_buf_free(&b);
	}
}

/* One byte of every value at every place of a 17-byte string, so that
 * each lane of the 8-byte scan and the bytes after it see it: the same
 * text as escaping byte by byte. */
static void test_emitter_every_byte(void **state)
{
	char in[17], want[32];
	unsigned c;
	size_t pos;

	(void)state;
	for (c = 0; c < 256; c++) {
		if (c == 'a')           /* the filler */
			continue;
		if (c == '"' || c == '\\')
			snprintf(want, sizeof(want), "\\%c", (char)c);
		else if (c == '\n')
			snprintf(want, sizeof(want), "\\n");
		else if (c == '\t')
			snprintf(want, sizeof(want), "\\t");
		else if (c < 0x20 || c >= 0x80)
			snprintf(want, sizeof(want), "\\u%04x", c);
		else
			snprintf(want, sizeof(want), "%c", (char)c);
		for (pos = 0; pos < sizeof(in); pos++) {
			struct pt_buf b;

			memset(in, 'a', sizeof(in));
			in[pos] = (char)c;
			pt_buf_init(&b);
			pt_json_str(&b, (const uint8_t *)in, sizeof(in));
			if (b.len != sizeof(in) - 1 + strlen(want) ||
			    memcmp(b.p + pos, want, strlen(want)) != 0 ||
			    strspn(b.p, "a") != pos ||
			    strspn(b.p + pos + strlen(want), "a") !=
				    sizeof(in) - 1 - pos)
				fail_msg("byte 0x%02x at %zu: got '%s'", c, pos, b.p);
			pt_buf_free(&b);
		}
	}
}

/* pt_buf_put_i64() (@sign) or pt_buf_put_u64() of @v against printf */
static void check_decimal(uint64_t v, bool sign)
{
	struct pt_buf b;
	char want[32];

	pt_buf_init(&b);
	if (sign) {
		pt_buf_put_i64(&b, (int64_t)v);
		snprintf(want, sizeof(want), "%" PRId64, (int64_t)v);
	} else {
		pt_buf_put_u64(&b, v);
		snprintf(want, sizeof(want), "%" PRIu64, v);
	}
	if (strcmp(b.p, want) != 0)
		fail_msg("%s: got '%s'", want, b.p);
	pt_buf_free(&b);
}

/* Every number below 100,000, each power of ten and its neighbours,
 * the extremes: signed and unsigned. */
static void test_decimal(void **state)
{
	uint64_t v, p;

	(void)state;
	for (v = 0; v < 100000; v++) {
		check_decimal(v, false);
		check_decimal(0 - v, true);
	}
	for (p = 1; p <= UINT64_MAX / 10; p *= 10) {
		for (v = p * 10 - 1; v <= p * 10 + 1; v++) {
			check_decimal(v, false);
			check_decimal(v, true);
			check_decimal(0 - v, true);
		}
	}
	check_decimal(UINT64_MAX, false);
	check_decimal((uint64_t)INT64_MAX, true);
	check_decimal((uint64_t)INT64_MIN, true);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_scan_document),
		cmocka_unit_test(test_corrupt_table),
		cmocka_unit_test(test_uint_limits),
		cmocka_unit_test(test_emitter),
		cmocka_unit_test(test_emitter_every_byte),
		cmocka_unit_test(test_decimal),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
