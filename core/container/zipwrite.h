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
 *
 * pt_zip_write_plan() is the general form: the new archive is an ordered
 * list of records (a plan), each an original record kept, an original
 * record with new contents, or a new record; originals the plan does not
 * name are dropped.  Before anything is created the new file's exact size
 * is computed and checked against the free space of the target's
 * filesystem (-ENOSPC: "needs N bytes in DIR, M free").  pt_zip_rewrite()
 * is the plan that keeps every record in place.
 */
#ifndef PTFS_CORE_ZIPWRITE_H
#define PTFS_CORE_ZIPWRITE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/error.h"
#include "container/replace.h"
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
 * One record of the new archive, in output order (pt_zip_write_plan()).
 *
 *   entry set,  change NULL   the original record, its bytes unchanged:
 *                             copied verbatim when it stays at its offset,
 *                             else re-headed (see pt_zip_write_plan())
 *   entry set,  change set    the original record with new contents
 *                             (change->entry is NULL or @entry)
 *   entry NULL, name set      a new record named @name (the full name,
 *                             prefix included) with @change's contents
 *                             (change->entry NULL), or empty when @change
 *                             is NULL
 *
 * @name with @entry renames the original record (NULL keeps its name).
 */
struct pt_zw_rec {
	const struct pt_zip_entry *entry; /* an original record, or NULL */
	const char *name;                 /* new name, or NULL */
	const struct pt_zw_change *change; /* new contents, or NULL */
};

/*
 * Write the archive @recs[0..@n) (its central directory in the same
 * order) over the archive at @path, whose index is @z (its source must
 * read the same file), atomically as pt_zip_rewrite() does.  Originals
 * not named in @recs are dropped; one may be named more than once under
 * different names.
 *
 * Layout (docs/FORMATS.md, "Record layout"): an original record that
 * is unchanged and stays at its offset is copied verbatim; any other gets
 * a fresh torch-style header.  New records are stored, with the first
 * record's DOS time, date and version fields and its UTF-8 flag.  Payloads
 * start at a multiple of the alignment ("<prefix>/.storage_alignment" of
 * the new archive, else 64).  An unchanged original record of at least
 * 4 KiB that moved is padded so that its payload keeps its offset modulo
 * 4096 (and the alignment): copy_file_range() can then share its blocks
 * on XFS (reflink) and btrfs.  Not when the new archive has
 * "<prefix>/.format_version": torch may compute offsets from the plain
 * layout there (docs/FORMATS.md, "Computed storage offsets").
 *
 * Every write passes the fault steps of container/replace.h (create,
 * write, copy, fsync, close, rename, ...).  Returns 0, or a negative errno
 * with a one-line message: -EINVAL for a bad plan (a name twice, a name
 * empty or of more than 65535 bytes, an entry of another archive, a change
 * of another record), -ENOSPC when the target's filesystem lacks room for
 * the new file, and pt_zip_rewrite()'s errors.  On any error the original
 * is untouched and no temporary file is left.  Each change's crc_out is
 * set after a success.  @expect and @faults may be NULL.
 */
int pt_zip_write_plan(const char *path, const struct pt_zip *z,
		      const struct pt_zw_rec *recs, size_t n,
		      const struct pt_zw_expect *expect,
		      const struct pt_zw_faults *faults, struct pt_error *err);

/*
 * pt_zip_write_plan() up to the rename, for a commit that replaces several
 * files together: the new archive written beside the original and sealed
 * (pt_replace_seal(), container/replace.h) into *@sealed, which the
 * caller gives to pt_replace_rename() or pt_replace_abort().  On failure
 * nothing is left beside the original.
 */
int pt_zip_stage_plan(const char *path, const struct pt_zip *z,
		      const struct pt_zw_rec *recs, size_t n,
		      struct pt_replace *sealed, struct pt_error *err);

/*
 * The size in bytes of the file pt_zip_write_plan() would write for this
 * plan, in *@size (nothing is written).  -EINVAL for a bad plan.
 */
int pt_zip_plan_size(const struct pt_zip *z, const struct pt_zw_rec *recs,
		     size_t n, uint64_t *size, struct pt_error *err);

/*
 * Rewrite the archive at @path, whose index is @z (its source must read the
 * same file), replacing the records named in @changes (@n of them; at most
 * one per record).  It is the plan of every record in local-header order
 * (the central directory keeps its own order), with moved records laid out
 * exactly as torch lays them out (no 4096 padding).  @expect may be NULL;
 * @faults may be NULL.  The new file keeps the original's mode and owner.
 * Returns 0, or a negative errno with a one-line message (-ENOSPC, also
 * before anything is written when the filesystem has no room for a second
 * copy, -EROFS, -EACCES, -ESTALE when the original changed, -EIO, ...).
 * On success @z describes the old file and must be reopened by the caller.
 */
int pt_zip_rewrite(const char *path, const struct pt_zip *z,
		   const struct pt_zw_change *changes, size_t n,
		   const struct pt_zw_expect *expect,
		   const struct pt_zw_faults *faults, struct pt_error *err);

/* CRC-32 (zlib polynomial) continued from @crc over @n bytes at @p. */
uint32_t pt_crc32(uint32_t crc, const void *p, size_t n);

#endif /* PTFS_CORE_ZIPWRITE_H */
