/* SPDX-License-Identifier: MIT */
/*
 * zippatch.h -- same-size changes of stored ZIP records as byte patches:
 * the changed data bytes plus the CRC-32 fields that name them (local
 * header, central directory entry, data descriptor where present), the new
 * CRC computed from the old one and the changed ranges (crc.h).  Nothing
 * else in the archive moves, so the patches can be applied in a clone or
 * in place (journal.h) at a cost of the bytes that changed.
 */
#ifndef PTFS_CORE_CONTAINER_ZIPPATCH_H
#define PTFS_CORE_CONTAINER_ZIPPATCH_H

#include <stddef.h>
#include <stdint.h>

#include "container/journal.h"
#include "base/error.h"
#include "container/zip.h"

/* New contents of one record. */
struct pt_zp_change {
	const struct pt_zip_entry *entry;
	uint64_t size;                  /* new size: must be the old one */
	/* bytes [off, off + len) of the record that may have changed, as
	 * n_ranges sorted, disjoint pairs; NULL: the whole record */
	const uint64_t (*ranges)[2];
	size_t n_ranges;
	/* bytes [@off, @off + @n) of the new record; 0 or -errno */
	int (*read)(void *ctx, void *buf, size_t n, uint64_t off);
	void *ctx;
};

/* The patches of a set of changes, sorted by file offset. */
struct pt_zp_plan {
	struct pt_patch *p;
	size_t n;
	uint32_t *crcs;                 /* new CRC-32 per change */
	uint64_t bytes;                 /* bytes the patches write */
	void *priv;
};

/*
 * Plan the patches for @n changes of the archive @z, read through @fd
 * (the same file).  1 (not an error, no message) when some change cannot
 * be a patch (a deflated record, a size that changes, a central directory
 * other than the one indexed): the caller rewrites the archive instead.  Reads the changed ranges' old and new bytes once
 * and the central directory; nothing else.
 */
int pt_zip_plan(const struct pt_zip *z, int fd, const struct pt_zp_change *c,
		size_t n, struct pt_zp_plan *plan, struct pt_error *err);

void pt_zip_plan_free(struct pt_zp_plan *plan);

#endif /* PTFS_CORE_CONTAINER_ZIPPATCH_H */
