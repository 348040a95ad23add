/* SPDX-License-Identifier: MIT */
/*
 * journal.h -- commits that cost what changed: patch a file's bytes either
 * in a clone of it (FICLONE, then rename: atomic) or in place behind an
 * undo journal, and roll an interrupted in-place patch back.
 *
 * The undo journal (the way SQLite's rollback journal works): before the
 * first byte of the file FILE changes, FILE.ptfs-journal holds the old
 * bytes of every range about to change, the file's size and inode, and
 * checksums; it is fsynced and so is its directory.  Then the ranges are
 * written and FILE is fsynced; then the journal is marked finished
 * (fdatasync), removed, and the directory fsynced.  A crash anywhere
 * leaves either no journal (old or new file, complete) or a journal:
 *
 *  - complete and valid: FILE may be half-patched; pt_journal_recover()
 *    writes the old bytes back (idempotent: a crash during recovery is
 *    recovered again) -- the old file;
 *  - marked finished: FILE is the new file; the journal is removed;
 *  - incomplete (short, bad magic, a checksum that fails): it was never
 *    fully written, and FILE is only touched after the complete journal is
 *    durable, so FILE was never touched -- the old file.  The journal is
 *    set aside as FILE.ptfs-journal.invalid (never deleted: evidence);
 *  - valid but for another file (size or inode differ), or for a file
 *    written again since (a sector of a range holds neither its old bytes
 *    nor the new ones, whose per-512-byte CRCs the journal keeps: say
 *    torch.save to the same path after the crash): nothing is touched,
 *    and the checkpoint is refused (-EBUSY) until a person looks.
 *
 * A committer holds an exclusive flock() on FILE from before it creates
 * the journal until the journal is gone; recovery takes the same lock
 * before it reads a journal, so a journal whose writer is alive (a mount
 * committing while `ptfs ls` runs) is never mistaken for an interrupted
 * one.  The kernel releases the lock of a killed process.
 *
 * Layout (little-endian): "PTFSJRNL" (or "PTFSDONE" once finished), u32
 * version 1, u32 header size 64, u64 file size, u64 range count, u64 old
 * bytes, u64 inode, u64 sector size 512, u32 CRC-32 of bytes 0..55, u32 0;
 * then per range u64 offset, u64 length (sorted, disjoint, adding up to
 * the old bytes); then the old bytes of the ranges in order; then the
 * CRC-32 of each 512 bytes of each range's new bytes; then u32 CRC-32 of
 * everything from byte 64, "PTFSJEND".
 */
#ifndef PTFS_CORE_CONTAINER_JOURNAL_H
#define PTFS_CORE_CONTAINER_JOURNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "container/replace.h"
#include "base/error.h"

/* How a commit writes (README "Commits"; -o commit=WAY). */
enum pt_commit_way {
	PT_COMMIT_AUTO = 0,     /* clone where the filesystem can, else rewrite */
	PT_COMMIT_REWRITE,      /* a whole new file beside, renamed over */
	PT_COMMIT_CLONE,        /* FICLONE, patch the clone, rename; or fail */
	PT_COMMIT_INPLACE,      /* patch the file behind the undo journal */
};

/* "auto", "rewrite", "clone", "inplace" <-> the enum; parse: 0 or -EINVAL. */
int pt_commit_way_parse(const char *s, enum pt_commit_way *out);
const char *pt_commit_way_name(enum pt_commit_way w);

/* New bytes for [off, off + len) of a file. */
struct pt_patch {
	uint64_t off;
	uint64_t len;
	/* Fill @buf with bytes [@at, @at + @n) of the new range (relative to
	 * its start); 0 or -errno.  NULL: take them from @data. */
	int (*read)(void *ctx, void *buf, size_t n, uint64_t at);
	void *ctx;
	const void *data;
};

/*
 * Clone the file at @path (symlinks resolved), patch the clone, fsync,
 * rename over the file (pt_replace_*).  -EOPNOTSUPP with no message when
 * the filesystem cannot clone (the caller then does something else);
 * otherwise 0 or -errno with the file untouched.
 */
int pt_patch_clone(const char *path, const struct pt_patch *p, size_t n,
		   const struct pt_replace_expect *expect,
		   struct pt_error *err);

/*
 * The full rewrite: copy the whole file to a temporary beside it
 * (copy_file_range(): shared extents where the filesystem can), patch the
 * copy, fsync, rename (pt_replace_*).  0 or -errno, the file untouched.
 */
int pt_patch_copy(const char *path, const struct pt_patch *p, size_t n,
		  const struct pt_replace_expect *expect, struct pt_error *err);

/*
 * Patch the file at @path (symlinks resolved) in place behind the undo
 * journal described above.  Ranges must not overlap and must lie inside
 * the file.  On failure the file is as it was (rolled back at once, or by
 * the next pt_journal_recover() when even that failed: the message says
 * so).
 */
int pt_patch_inplace(const char *path, const struct pt_patch *p, size_t n,
		     const struct pt_replace_expect *expect,
		     struct pt_error *err);

/*
 * Apply @p to the file at @path the way @way says: CLONE (or AUTO unless
 * *@no_clone) by pt_patch_clone(), INPLACE by pt_patch_inplace(), else the
 * rewrite: 1 (nothing done) when @own_rewrite (the caller has its own,
 * e.g. the ZIP64 rewriter), pt_patch_copy() otherwise.  AUTO falls back
 * from clone to the rewrite where the filesystem cannot clone, and sets
 * *@no_clone so later commits do not try again; CLONE fails there with a
 * message.  *@used gets the way taken.
 */
int pt_patch_apply(const char *path, enum pt_commit_way way,
		   const struct pt_patch *p, size_t n,
		   const struct pt_replace_expect *expect, bool own_rewrite,
		   bool *no_clone, enum pt_commit_way *used,
		   struct pt_error *err);

/* "<real path>.ptfs-journal" for @path (malloc), NULL without memory or
 * when @path cannot be resolved. */
char *pt_journal_path(const char *path);

/*
 * Bring the file at @path back to a consistent state if a journal lies
 * beside it (see above); without a journal, remove the temporary files a
 * killed rewrite or clone left beside it (pt_replace_sweep()).  Returns 0 when there was nothing to do, 1 when
 * something was done (one line in @note: what, and which journal), or a
 * negative errno with one line in @err when the file must not be used
 * (-EBUSY: a journal for another file; -EACCES/-EROFS: cannot write the
 * file to roll it back).
 */
int pt_journal_recover(const char *path, char *note, size_t cap,
		       struct pt_error *err);

#endif /* PTFS_CORE_CONTAINER_JOURNAL_H */
