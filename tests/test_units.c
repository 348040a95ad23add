/* SPDX-License-Identifier: MIT */
/* test_units.c -- base/units.c: every size suffix, every duration unit,
 * and a table of what is not a size (garbage, signs, overflow, empty). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "base/units.h"

struct unit_case {
	const char *s;
	int rc;
	uint64_t v;
};

#define KI ((uint64_t)1 << 10)
#define K1 ((uint64_t)1000)

static const struct unit_case size_cases[] = {
	{ "0", 0, 0 },
	{ "1", 0, 1 },
	{ "4096", 0, 4096 },
	{ "007", 0, 7 },
	{ "10B", 0, 10 },
	{ "10b", 0, 10 },
	/* a letter alone: powers of 1024, as coreutils reads them */
	{ "1k", 0, KI },
	{ "1K", 0, KI },
	{ "3M", 0, 3 * KI * KI },
	{ "3m", 0, 3 * KI * KI },
	{ "10G", 0, 10 * KI * KI * KI },
	{ "2T", 0, 2 * KI * KI * KI * KI },
	/* with B: SI */
	{ "1kB", 0, K1 },
	{ "1KB", 0, K1 },
	{ "100KB", 0, 100 * K1 },
	{ "5MB", 0, 5 * K1 * K1 },
	{ "10GB", 0, 10 * K1 * K1 * K1 },
	{ "10gb", 0, 10 * K1 * K1 * K1 },
	{ "2TB", 0, 2 * K1 * K1 * K1 * K1 },
	/* with iB: IEC */
	{ "1KiB", 0, KI },
	{ "500MiB", 0, 500 * KI * KI },
	{ "10GiB", 0, 10 * KI * KI * KI },
	{ "10gib", 0, 10 * KI * KI * KI },
	{ "2TiB", 0, 2 * KI * KI * KI * KI },
	/* the edges of uint64_t */
	{ "18446744073709551615", 0, UINT64_MAX },
	{ "18446744073709551616", -ERANGE, 0 },
	{ "99999999999999999999999", -ERANGE, 0 },
	{ "16777215T", 0, 16777215 * KI * KI * KI * KI },
	{ "16777216T", -ERANGE, 0 },
	{ "18446744073709552kB", -ERANGE, 0 },
	{ "18446744073709551kB", 0, 18446744073709551000u },
	/* not sizes */
	{ "", -EINVAL, 0 },
	{ "G", -EINVAL, 0 },
	{ "-1", -EINVAL, 0 },
	{ "+1", -EINVAL, 0 },
	{ " 1", -EINVAL, 0 },
	{ "1 ", -EINVAL, 0 },
	{ "1 G", -EINVAL, 0 },
	{ "1.5G", -EINVAL, 0 },
	{ "0x10", -EINVAL, 0 },
	{ "1e3", -EINVAL, 0 },
	{ "10X", -EINVAL, 0 },
	{ "10Gi", -EINVAL, 0 },
	{ "10GBB", -EINVAL, 0 },
	{ "10iB", -EINVAL, 0 },
	{ "10P", -EINVAL, 0 },
	{ "10s", -EINVAL, 0 },
	{ "abc", -EINVAL, 0 },
};

static const struct unit_case duration_cases[] = {
	{ "0", 0, 0 },
	{ "60", 0, 60000 },
	{ "60s", 0, 60000 },
	{ "60S", 0, 60000 },
	{ "1500ms", 0, 1500 },
	{ "2m", 0, 120000 },
	{ "1h", 0, 3600000 },
	{ "18446744073709551s", 0, 18446744073709551000u },
	{ "18446744073709552s", -ERANGE, 0 },
	{ "18446744073709551615ms", 0, UINT64_MAX },
	{ "18446744073709551616ms", -ERANGE, 0 },
	/* a size suffix is not a duration */
	{ "2K", -EINVAL, 0 },
	{ "2k", -EINVAL, 0 },
	{ "2G", -EINVAL, 0 },
	{ "2MB", -EINVAL, 0 },
	{ "", -EINVAL, 0 },
	{ "s", -EINVAL, 0 },
	{ "-5", -EINVAL, 0 },
	{ "+5", -EINVAL, 0 },
	{ " 5", -EINVAL, 0 },
	{ "5 s", -EINVAL, 0 },
	{ "1.5s", -EINVAL, 0 },
	{ "5sec", -EINVAL, 0 },
	{ "5d", -EINVAL, 0 },
};

static void check_table(const struct unit_case *c, size_t n,
			int (*parse)(const char *, uint64_t *))
{
	size_t i;

	for (i = 0; i < n; i++) {
		uint64_t v = 12345;
		int rc = parse(c[i].s, &v);

		if (rc != c[i].rc)
			fail_msg("'%s': rc %d, expected %d", c[i].s, rc, c[i].rc);
		if (rc == 0 && v != c[i].v)
			fail_msg("'%s': %llu, expected %llu", c[i].s,
				 (unsigned long long)v, (unsigned long long)c[i].v);
		if (rc != 0 && v != 12345)
			fail_msg("'%s': output written on failure", c[i].s);
	}
}

static void test_size_table(void **state)
{
	(void)state;
	check_table(size_cases, sizeof(size_cases) / sizeof(*size_cases),
		    pt_parse_size);
}

static void test_duration_table(void **state)
{
	(void)state;
	check_table(duration_cases,
		    sizeof(duration_cases) / sizeof(*duration_cases),
		    pt_parse_duration_ms);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_size_table),
		cmocka_unit_test(test_duration_table),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
