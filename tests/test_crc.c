/* SPDX-License-Identifier: MIT */
/*
 * test_crc.c -- core/container/crc.c: a CRC-32 patched from the changed
 * ranges equals a full recompute, for random records and random edits
 * (first byte, last byte, whole record, several ranges in a row), and
 * crc32_combine agrees with the CRC of a concatenation.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <libdeflate.h>

#include "container/crc.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint32_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 11);
}

static void fill(uint8_t *p, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		p[i] = (uint8_t)rnd();
}

static void test_combine(void **state)
{
	uint8_t buf[5000];
	int i;

	(void)state;
	fill(buf, sizeof(buf));
	for (i = 0; i < 200; i++) {
		size_t cut = rnd() % sizeof(buf);
		uint32_t a = libdeflate_crc32(0, buf, cut);
		uint32_t b = libdeflate_crc32(0, buf + cut, sizeof(buf) - cut);

		assert_int_equal(pt_crc32_combine(a, b, sizeof(buf) - cut),
				 libdeflate_crc32(0, buf, sizeof(buf)));
	}
}

/* Apply one edit to @rec both ways and compare. */
static uint32_t edit(uint8_t *rec, size_t len, uint32_t crc, size_t off,
		     size_t n)
{
	uint8_t *old = malloc(n ? n : 1);
	uint8_t *nw = malloc(n ? n : 1);

	assert_non_null(old);
	assert_non_null(nw);
	memcpy(old, rec + off, n);
	fill(nw, n);
	memcpy(rec + off, nw, n);
	crc = pt_crc32_patch(crc, len, off, old, nw, n);
	assert_int_equal(crc, libdeflate_crc32(0, rec, len));
	free(old);
	free(nw);
	return crc;
}

static void test_patch_random(void **state)
{
	int round;

	(void)state;
	for (round = 0; round < 300; round++) {
		size_t len = 1 + rnd() % (round < 250 ? 4096 : 3u << 20);
		uint8_t *rec = malloc(len);
		uint32_t crc;
		int k;

		assert_non_null(rec);
		fill(rec, len);
		crc = libdeflate_crc32(0, rec, len);
		crc = edit(rec, len, crc, 0, 1);
		crc = edit(rec, len, crc, len - 1, 1);
		crc = edit(rec, len, crc, 0, len);
		crc = edit(rec, len, crc, len, 0);
		for (k = 0; k < 5; k++) {
			size_t off = rnd() % len;
			size_t n = rnd() % (len - off + 1);

			if (n > 65536)
				n = 65536;
			crc = edit(rec, len, crc, off, n);
		}
		free(rec);
	}
}

/* A zero-filled 5 GiB record, changed 12 KiB near its start: the patch
 * shifts across 5 GiB without touching it. */
static void test_patch_huge(void **state)
{
	const uint64_t len = 5ull << 30;
	static uint8_t zero[1 << 20];
	uint8_t nw[12288];
	uint32_t crc = 0;
	uint32_t patched;
	uint64_t i;

	(void)state;
	for (i = 0; i < len; i += sizeof(zero))
		crc = libdeflate_crc32(crc, zero, sizeof(zero));
	fill(nw, sizeof(nw));
	patched = pt_crc32_patch(crc, len, 4096, zero, nw, sizeof(nw));
	/* recompute: 4096 zeros, nw, the rest zeros */
	crc = libdeflate_crc32(0, zero, 4096);
	crc = libdeflate_crc32(crc, nw, sizeof(nw));
	for (i = 4096 + sizeof(nw); i < len;) {
		uint64_t k = len - i < sizeof(zero) ? len - i : sizeof(zero);

		crc = libdeflate_crc32(crc, zero, (size_t)k);
		i += k;
	}
	assert_int_equal(patched, crc);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_combine),
		cmocka_unit_test(test_patch_random),
		cmocka_unit_test(test_patch_huge),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
