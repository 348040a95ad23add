/* SPDX-License-Identifier: MIT */
/*
 * units.c -- sizes and durations of options (see units.h).
 */
#include "base/units.h"

#include <errno.h>
#include <stddef.h>
#include <strings.h>

struct unit {
	const char *sfx;
	uint64_t mul;
};

/* The decimal number at @s times the multiplier of the suffix after it
 * in @u (@n entries), matched case-insensitively. */
static int parse_unit(const char *s, const struct unit *u, size_t n,
		      uint64_t *out)
{
	uint64_t v = 0;
	size_t i;

	if (*s < '0' || *s > '9')
		return -EINVAL;   /* empty, a sign, a space, a suffix alone */
	for (; *s >= '0' && *s <= '9'; s++) {
		if (__builtin_mul_overflow(v, 10, &v) ||
		    __builtin_add_overflow(v, (uint64_t)(*s - '0'), &v))
			return -ERANGE;
	}
	for (i = 0; i < n; i++) {
		if (strcasecmp(s, u[i].sfx) != 0)
			continue;
		if (__builtin_mul_overflow(v, u[i].mul, &v))
			return -ERANGE;
		*out = v;
		return 0;
	}
	return -EINVAL;
}

#define KI ((uint64_t)1 << 10)
#define K1 ((uint64_t)1000)

int pt_parse_size(const char *s, uint64_t *out)
{
	static const struct unit u[] = {
		{ "", 1 }, { "B", 1 },
		{ "K", KI }, { "M", KI * KI }, { "G", KI * KI * KI },
		{ "T", KI * KI * KI * KI },
		{ "KB", K1 }, { "MB", K1 * K1 }, { "GB", K1 * K1 * K1 },
		{ "TB", K1 * K1 * K1 * K1 },
		{ "KiB", KI }, { "MiB", KI * KI }, { "GiB", KI * KI * KI },
		{ "TiB", KI * KI * KI * KI },
	};

	return parse_unit(s, u, sizeof(u) / sizeof(*u), out);
}

int pt_parse_duration_ms(const char *s, uint64_t *out)
{
	static const struct unit u[] = {
		{ "", 1000 }, { "ms", 1 }, { "s", 1000 }, { "m", 60 * 1000 },
		{ "h", 60 * 60 * 1000 },
	};

	return parse_unit(s, u, sizeof(u) / sizeof(*u), out);
}
