/* SPDX-License-Identifier: MIT */
/*
 * crc.c -- patch a CRC-32 for changed ranges (crc.h): libdeflate computes
 * the CRCs of the changed bytes, zlib's crc32_combine64() shifts their
 * difference past the unchanged tail.
 */
#include "container/crc.h"

#include <libdeflate.h>
#include <zlib.h>

uint32_t pt_crc32_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b)
{
	return (uint32_t)crc32_combine64(crc_a, crc_b, (z_off64_t)len_b);
}

uint32_t pt_crc32_patch(uint32_t crc, uint64_t len, uint64_t off,
			const void *old, const void *new_, size_t n)
{
	uint32_t d;

	if (n == 0)
		return crc;
	d = libdeflate_crc32(0, old, n) ^ libdeflate_crc32(0, new_, n);
	return crc ^ pt_crc32_combine(d, 0, len - off - n);
}
