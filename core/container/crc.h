/* SPDX-License-Identifier: MIT */
/*
 * crc.h -- CRC-32 (the ZIP/zlib polynomial) of a record after some of its
 * bytes changed, from its old CRC and the changed ranges alone.
 *
 * The CRC is affine in the message: for messages of equal length,
 * crc(A) ^ crc(B) depends only on A ^ B, and a difference confined to
 * [off, off + k) contributes (crc(old) ^ crc(new)) shifted by the
 * L - off - k bytes that follow it -- which is crc32_combine(x, 0, n).
 * So a patch costs O(k) for the changed bytes (libdeflate) plus
 * O(log L) for the shift (zlib), however large the record.
 */
#ifndef PTFS_CORE_CONTAINER_CRC_H
#define PTFS_CORE_CONTAINER_CRC_H

#include <stddef.h>
#include <stdint.h>

/* CRC-32 of A || B from crc(A), crc(B) and |B| (zlib's crc32_combine64). */
uint32_t pt_crc32_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

/*
 * The CRC-32 of a record of @len bytes whose CRC was @crc after bytes
 * [@off, @off + @n) changed from @old to @new (both @n bytes).  The range
 * must lie within the record.
 */
uint32_t pt_crc32_patch(uint32_t crc, uint64_t len, uint64_t off,
			const void *old, const void *new_, size_t n);

#endif /* PTFS_CORE_CONTAINER_CRC_H */
