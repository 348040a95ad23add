/* SPDX-License-Identifier: MIT */
/*
 * zipwrite.h -- the ZIP64 rewriter: commit changed records atomically.
 *
 * pt_zip_rewrite() writes a new archive beside the original through the
 * safe-replace module (container/replace.h: symlinks followed to the real
 * file, owner, mode and xattrs kept, same directory,
 * temporary name), then fsync()s it, renames it over the original and
 * fsync()s the directory.  Until the rename the original is untouched; any
 * failure (no space, read-only directory, the original changed since it was
 * indexed, an I/O error, a callback error) removes the temporary file and
 * leaves the original exactly as it was.
 *
 * Layout: records keep their order, names, flags and extras.  A record that
 * is unchanged and stays at its offset is copied verbatim with
 * copy_file_range() (so copy-on-write filesystems can share extents),
 * including its local header, FB padding and data descriptor.  A changed
 * record, or one whose offset moved, gets a torch-style local header
 * (docs/FORMATS.md, "Record layout": zero CRC/sizes, bit 3 + data
 * descriptor, ZIP64 extra when size or offset >= 0xFFFFFFFF, FB padding to
 * the alignment) and
 * is written stored.  The central directory is regenerated with correct
 * CRC-32s (computed with libdeflate) and sizes, and the archive always ends
 * with ZIP64 EOCD + locator + EOCD, as torch writes it.  When every changed
 * record keeps its size, the new file differs from the old only in payload
 * bytes and CRC fields.
 */
#ifndef PTFS_CORE_ZIPWRITE_H
#define PTFS_CORE_ZIPWRITE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/error.h"
#include "container/zip.h"

/* New contents for one record. */
struct pt_zw_change {
	const struct pt_zip_entry *entry; /* the record replaced (borrowed) */
	uint64_t size;                    /* new uncompressed size */
	/* Fill @buf with bytes [@off, @off + @n) of the new contents; return
	 * 0 or a negative errno (the commit is then abandoned). */
	int (*read)(void *ctx, void *buf, size_t n, uint64_t off);
	void *ctx;                        /* passed to read */
	uint32_t *crc_out;                /* OUT (may be NULL): the CRC-32
					   * written, after a success */
};

/* What the original must still be, so a commit never overwrites a file
 * that another program changed since it was indexed.  Zero fields are not
 * checked. */
struct pt_zw_expect {
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime;
};

/* Test hooks: fail the Nth write() / before rename, to prove atomicity. */
struct pt_zw_faults {
	unsigned fail_write_at;           /* 1-based; 0 = never */
	int fail_rename;                  /* nonzero: fail instead of rename */
};

/*
 * Rewrite the archive at @path, whose index is @z (its source must read the
 * same file), replacing the records named in @changes (@n of them; at most
 * one per record).  @expect may be NULL; @faults may be NULL.  The new file
 * keeps the original's mode and owner.  Returns 0, or a negative errno with
 * a one-line message (-ENOSPC, -EROFS, -EACCES, -ESTALE when the original
 * changed, -EIO, ...).  On success @z describes the old file and must be
 * reopened by the caller.
 */
int pt_zip_rewrite(const char *path, const struct pt_zip *z,
		   const struct pt_zw_change *changes, size_t n,
		   const struct pt_zw_expect *expect,
		   const struct pt_zw_faults *faults, struct pt_error *err);

/* CRC-32 (zlib polynomial) continued from @crc over @n bytes at @p. */
uint32_t pt_crc32(uint32_t crc, const void *p, size_t n);

#endif /* PTFS_CORE_ZIPWRITE_H */
