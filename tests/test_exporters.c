/* SPDX-License-Identifier: MIT */
/* test_exporters.c -- export/exporters.c: the table of `ptfs export`
 * targets is well formed, and the lists the messages and usage texts are
 * made of come out of it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "export/export.h"

/* Every entry says what the command line, the usage and --list-targets
 * print; names are unique and made of [a-z0-9_] (the man page check,
 * tests/man_check.sh, reads "--to a|b|c" with that alphabet). */
static void test_table(void **state)
{
	const struct pt_exporter *const *x, *const *y;
	size_t n = 0;

	(void)state;
	for (x = pt_exporters; *x; x++, n++) {
		assert_non_null((*x)->name);
		assert_true((*x)->name[0] != '\0');
		assert_int_equal(strspn((*x)->name, "abcdefghijklmnopqrstuvwxyz0123456789_"),
				 strlen((*x)->name));
		assert_non_null((*x)->ext);
		assert_int_equal((*x)->ext[0], '.');
		assert_non_null((*x)->summary);
		assert_null(strchr((*x)->summary, '\n'));
		assert_non_null((*x)->write);
		assert_int_equal((*x)->accepts & ~(PT_XOPT_SHARD_SIZE | PT_XOPT_SKIP_UNSUPPORTED), 0);
		for (y = pt_exporters; y != x; y++)
			assert_string_not_equal((*x)->name, (*y)->name);
		assert_ptr_equal(pt_exporter_find((*x)->name), *x);
	}
	assert_true(n >= 2);
	assert_null(pt_exporter_find(""));
	assert_null(pt_exporter_find("csv"));
	assert_null(pt_exporter_find("safetensors "));
}

/* The names of the targets that accept @xopts, joined as the messages
 * and the usage join them, built here one by one. */
static void expect(unsigned xopts, const char *sep, const char *last,
		   char *out, size_t cap)
{
	const struct pt_exporter *const *x;
	size_t n = 0, i = 0;

	for (x = pt_exporters; *x; x++)
		n += ((*x)->accepts & xopts) == xopts;
	out[0] = '\0';
	for (x = pt_exporters; *x; x++) {
		if (((*x)->accepts & xopts) != xopts)
			continue;
		if (i > 0)
			strncat(out, i + 1 == n ? last : sep, cap - strlen(out) - 1);
		strncat(out, (*x)->name, cap - strlen(out) - 1);
		i++;
	}
}

/* The joined names: what "--to takes ...", "missing --to ..." and the
 * usage say. */
static void test_names(void **state)
{
	static const struct {
		unsigned xopts;
		const char *sep, *last;
	} cases[] = {
		{ 0, "|", "|" },
		{ 0, ", ", " or " },
		{ PT_XOPT_SHARD_SIZE, ", ", " or " },
		{ PT_XOPT_SKIP_UNSUPPORTED, ", ", " or " },
		{ PT_XOPT_SHARD_SIZE | PT_XOPT_SKIP_UNSUPPORTED, ", ", " or " },
	};
	char out[256], want[256];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		pt_exporter_names(cases[i].xopts, cases[i].sep, cases[i].last,
				  out, sizeof(out));
		expect(cases[i].xopts, cases[i].sep, cases[i].last, want, sizeof(want));
		assert_string_equal(out, want);
	}
}

/* A buffer too small is cut, never overrun, and stays a string. */
static void test_names_cut(void **state)
{
	char all[256], out[8 + 4];

	(void)state;
	pt_exporter_names(0, "|", "|", all, sizeof(all));
	assert_true(strlen(all) >= 8);
	memset(out, 'X', sizeof(out));
	pt_exporter_names(0, "|", "|", out, 8);
	assert_int_equal(strlen(out), 7);
	assert_memory_equal(out, all, 7);
	assert_int_equal(out[8], 'X');
	pt_exporter_names(0, "|", "|", out, 1);
	assert_string_equal(out, "");
	out[0] = 'X';
	pt_exporter_names(0, "|", "|", out, 0);         /* nothing written */
	assert_int_equal(out[0], 'X');
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_table),
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_names_cut),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
