/* SPDX-License-Identifier: MIT */
/* test_text.c -- base/text.c: the UTF-8 validator and the latin-1 encoder,
 * with a table of corrupt inputs for each. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "base/text.h"

struct utf8_case {
	const char *what;
	const char *s;
	size_t n;
	bool valid;
};

#define U(what, lit, ok) { what, lit, sizeof(lit) - 1, ok }

static const struct utf8_case utf8_cases[] = {
	U("empty", "", true),
	U("ascii", "hello", true),
	U("2 bytes", "\xc3\xa9", true),
	U("3 bytes", "\xe2\x82\xac", true),
	U("4 bytes", "\xf0\x9f\x98\x80", true),
	U("U+10FFFF", "\xf4\x8f\xbf\xbf", true),
	U("U+D7FF", "\xed\x9f\xbf", true),
	U("U+E000", "\xee\x80\x80", true),
	/* corrupt */
	U("lone continuation", "\x80", false),
	U("C0 overlong", "\xc0\xaf", false),
	U("C1 overlong", "\xc1\xbf", false),
	U("E0 overlong", "\xe0\x80\xaf", false),
	U("F0 overlong", "\xf0\x80\x80\xaf", false),
	U("high surrogate", "\xed\xa0\x80", false),
	U("low surrogate", "\xed\xbf\xbf", false),
	U("past U+10FFFF", "\xf4\x90\x80\x80", false),
	U("F5 lead", "\xf5\x80\x80\x80", false),
	U("FF byte", "\xff", false),
	U("truncated 2", "\xc3", false),
	U("truncated 3", "\xe2\x82", false),
	U("truncated 4", "\xf0\x9f\x98", false),
	U("bad continuation", "\xc3\x41", false),
	U("valid then bad", "ok\xc3\xa9\xed\xa0\x80", false),
};

static void test_utf8_table(void **state)
{
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(utf8_cases) / sizeof(*utf8_cases); i++) {
		const struct utf8_case *c = &utf8_cases[i];

		if (pt_utf8_valid((const uint8_t *)c->s, c->n) != c->valid)
			fail_msg("%s: expected %s", c->what,
				 c->valid ? "valid" : "invalid");
	}
}

static void test_utf8_len_and_put(void **state)
{
	static const uint32_t cps[] = { 0x41, 0xe9, 0x20ac, 0x1f600, 0x10ffff };
	uint8_t buf[4];
	size_t i, k;

	(void)state;
	for (i = 0; i < sizeof(cps) / sizeof(*cps); i++) {
		k = pt_utf8_put(buf, cps[i]);
		assert_int_equal(pt_utf8_len(buf, k), k);
		assert_int_equal(pt_utf8_len(buf, k - 1 ? k - 1 : 1),
				 k == 1 ? 1 : 0);
	}
	/* surrogatepass: written as three bytes, never valid */
	k = pt_utf8_put(buf, 0xd800);
	assert_int_equal(k, 3);
	assert_memory_equal(buf, "\xed\xa0\x80", 3);
	assert_int_equal(pt_utf8_len(buf, 3), 0);
	assert_int_equal(pt_utf8_surrogate(buf, 3), 0xd800);
	assert_int_equal(pt_utf8_surrogate((const uint8_t *)"\xed\x9f\xbf", 3), 0);
	assert_int_equal(pt_utf8_surrogate((const uint8_t *)"\xed\xbf\xbf", 3), 0xdfff);
	assert_int_equal(pt_utf8_surrogate((const uint8_t *)"\xed\xa0", 2), 0);
}

struct latin1_case {
	const char *what;
	const char *in;
	size_t n;
	const char *out;        /* NULL: refused */
	size_t out_n;
};

#define L(what, lit, res) { what, lit, sizeof(lit) - 1, res, sizeof(res) - 1 }
#define LBAD(what, lit) { what, lit, sizeof(lit) - 1, NULL, 0 }

static const struct latin1_case latin1_cases[] = {
	L("empty", "", ""),
	L("ascii", "abc", "abc"),
	L("U+0080", "\xc2\x80", "\x80"),
	L("U+00FF", "\xc3\xbf", "\xff"),
	L("mixed", "a\xc3\xa9z\xc2\xa0", "a\xe9z\xa0"),
	L("NUL", "\x00", "\x00"),
	/* corrupt, or past latin-1 (Python: UnicodeEncodeError) */
	LBAD("U+0101 (\xc4\x81, was byte 01)", "\xc4\x81"),
	LBAD("U+0401", "\xd0\x81"),
	LBAD("U+20AC", "\xe2\x82\xac"),
	LBAD("C0 overlong", "\xc0\x81"),
	LBAD("C2 without continuation", "\xc2"),
	LBAD("C3 followed by ascii", "\xc3\x41"),
	LBAD("lone continuation", "\xbf"),
	LBAD("surrogate", "\xed\xa0\x80"),
};

static void test_latin1_table(void **state)
{
	uint8_t out[16];
	size_t i, n;

	(void)state;
	for (i = 0; i < sizeof(latin1_cases) / sizeof(*latin1_cases); i++) {
		const struct latin1_case *c = &latin1_cases[i];
		int rc = pt_latin1_encode((const uint8_t *)c->in, c->n, out, &n);

		if (!c->out) {
			if (rc != -EILSEQ)
				fail_msg("%s: accepted", c->what);
			continue;
		}
		if (rc != 0)
			fail_msg("%s: refused", c->what);
		if (n != c->out_n || memcmp(out, c->out, n) != 0)
			fail_msg("%s: wrong bytes", c->what);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_utf8_table),
		cmocka_unit_test(test_utf8_len_and_put),
		cmocka_unit_test(test_latin1_table),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
