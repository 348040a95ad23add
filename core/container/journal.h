/* SPDX-License-Identifier: MIT */
/*
 * journal.h -- commits that cost what changed: patch a file's bytes either
 * in a clone of it (FICLONE, then rename: atomic) or in place behind an
 * undo journal, and roll an interrupted in-place patch back.
 *
 * The undo journal (the way SQLite's rollback journal works): before the
 * first byte of the file FILE changes, FILE.ptfs-journal holds the old
 * bytes of every range about to change, the file's device, inode and
 * size, the CRC-32 of each 512-byte sector of the new bytes, and
 * checksums; it is fsynced and so is its directory.  Then the ranges are
 * written and FILE is fsynced; then the journal is marked finished
 * (fdatasync), removed, and the directory fsynced.  The journal is created
 * O_CREAT|O_EXCL|O_NOFOLLOW, mode 0600, and given FILE's owner (fchown,
 * when the committer is root; a committer that is not root owns FILE or
 * is the one who will recover it).
 *
 * Trust.  A journal beside FILE is applied (FILE rolled back from it) only
 * when all of these hold:
 *  - it is a regular file (lstat: never a symlink; opened O_NOFOLLOW) with
 *    one link, owned by FILE's owner, by root or by the recovering user
 *    (who writes FILE with its own rights anyway), not writable by group
 *    or others: no other user can make ptfs write chosen bytes into FILE;
 *  - its header and body checksums hold, and the device, inode and size
 *    it records are FILE's;
 *  - every sector of every range of FILE holds either its old bytes (in
 *    the journal) or its new ones (their CRC is in the journal).
 * Otherwise nothing is written to FILE and the journal is set aside
 * (renamed to FILE.ptfs-journal.invalid, .invalid.1, ...: never deleted,
 * never applied) with one line saying why.  When its range table and
 * checksums are still readable, that line also says what FILE holds:
 * "torn" with the byte ranges that are not the old bytes when some
 * sectors are new and some old, or that a sector holds neither (FILE was
 * written by another program after the crash, say torch.save: a journal
 * that passes every other check is set aside then too, and FILE is used
 * as it is).  A journal whose header was never written (all zeros: it is
 * written last) belonged to a commit that stopped before FILE changed;
 * no other message says FILE was not touched unless its bytes show it.
 * A damaged or untrusted journal never keeps FILE from opening.
 *
 * A valid journal with every sector old (the commit had not written yet),
 * or marked finished with every sector new (it had), needs nothing
 * written to FILE: it is removed.  Any other valid journal is rolled
 * back: the old bytes written again (idempotent: a crash during recovery
 * is recovered again; a journal marked finished over a FILE that is not
 * all new is rolled back too), FILE fsynced, the journal removed.
 *
 * Read-only opens write nothing: pt_journal_recover() with @apply false
 * renames, removes and rolls back nothing.  It ignores (with a note) a
 * journal that needs nothing written -- FILE is then wholly the old or
 * wholly the new file, proven sector by sector -- and an untrusted or
 * damaged one; a valid journal that must be rolled back makes it fail
 * with -EUCLEAN and "needs recovery: run 'ptfs recover FILE'".  Serving
 * the old bytes from the journal instead is not attempted.
 *
 * Temporary files of a killed rewrite or clone (".FILE.ptfs-XXXXXX"
 * beside FILE) are removed by the next recovery with @apply whatever
 * their age when they are provably dead and ours: that exact name,
 * regular, one link, owned by FILE's owner or this user, and no live
 * writer holds their flock (pt_replace_sweep()); read-only opens only
 * mention them.
 *
 * A committer holds an exclusive flock() on FILE from before it creates
 * the journal until the journal is gone; recovery takes the same lock
 * before it reads a journal, so a journal whose writer is alive (a mount
 * committing while `ptfs ls` runs) is never mistaken for an interrupted
 * one (a read-only recovery does not wait for the lock when the journal
 * is one it would not trust anyway: any reader can hold it).  The kernel
 * releases the lock of a killed process.
 *
 * Layout (little-endian): "PTFSJRNL" (or "PTFSDONE" once finished), u32
 * version 2, u32 header size 80, u64 file size, u64 range count, u64 old
 * bytes, u64 inode, u64 sector size 512, u64 device, u64 0, u32 CRC-32 of
 * bytes 0..71 (computed with "PTFSJRNL" in bytes 0..7, so it holds for a
 * finished journal too), u32 0; then per range u64 offset, u64 length
 * (sorted, disjoint, adding up to the old bytes); then the old bytes of
 * the ranges in order; then the CRC-32 of each piece of each range's new
 * bytes cut at multiples of 512 of the file offset; then u32 CRC-32 of
 * everything from byte 80, "PTFSJEND".
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
 * Patch the file at @path (symlinks resolved) in place behind the undo
 * journal described above.  Ranges must not overlap and must lie inside
 * the file.  On failure the file is as it was (rolled back at once, or by
 * the next recovery -- pt_journal_recover() with @apply: `ptfs recover`,
 * a writable open -- when even that failed: the message says so).  -EBUSY
 * when something already lies at the journal's name.
 */
int pt_patch_inplace(const char *path, const struct pt_patch *p, size_t n,
		     const struct pt_replace_expect *expect,
		     struct pt_error *err);

/*
 * Apply @p to the file at @path the way @way says: CLONE (or AUTO unless
 * *@no_clone) by pt_patch_clone(), INPLACE by pt_patch_inplace(), else the
 * rewrite: 1 (nothing done) when @own_rewrite (the caller has its own,
 * e.g. the ZIP64 rewriter), a patched full copy otherwise.  AUTO falls back
 * from clone to the rewrite where the filesystem cannot clone, and sets
 * *@no_clone so later commits do not try again; CLONE fails there with a
 * message.  *@used gets the way taken.
 */
int pt_patch_apply(const char *path, enum pt_commit_way way,
		   const struct pt_patch *p, size_t n,
		   const struct pt_replace_expect *expect, bool own_rewrite,
		   bool *no_clone, enum pt_commit_way *used,
		   struct pt_error *err);

/* The patches of one file of a commit that writes several. */
struct pt_patch_file {
	const char *path;
	const struct pt_patch *p;
	size_t n;
	struct pt_replace_expect expect;
};

/*
 * Apply the patches of @n files as one commit.  One file: pt_patch_apply()
 * (no own rewrite).  Several: CLONE (or AUTO unless *@no_clone, falling
 * back as there) or REWRITE makes every file's patched copy beside it,
 * then seals them all -- owner, mode, xattrs, fsync, close, the last look
 * that no file changed meanwhile (pt_replace_seal()) -- and only then
 * renames them over the files in the order given, each rename followed by
 * its directory's fsync.  Any failure before the first rename leaves every
 * file untouched.  What is not atomic: a crash between two renames (a
 * window of a rename and a directory fsync per file) leaves the files
 * before it new and the rest old, each whole; a rename failing after
 * another succeeded (an I/O error) does the same, and the message names
 * the files replaced.  INPLACE has one journal per file and is refused
 * for several (-EOPNOTSUPP): its files could not roll back together.
 */
int pt_patch_apply_files(const struct pt_patch_file *f, size_t n,
			 enum pt_commit_way way, bool *no_clone,
			 enum pt_commit_way *used, struct pt_error *err);

/*
 * Deal with what an interrupted commit left beside the file at @path
 * (symlinks resolved), as described above: its journal, and the temporary
 * files of a killed rewrite or clone (pt_replace_sweep()).
 *
 * @apply true (writable mounts, `ptfs set`, `ptfs recover`): roll back or
 * remove a valid journal, set an untrusted or damaged one aside, remove
 * dead temporary files.  @apply false (read-only commands and mounts):
 * write, rename and remove nothing; -EUCLEAN when a valid journal must be
 * rolled back first.
 *
 * Returns 0 when there was nothing to do or say, 1 when something was
 * done or found (one line in @note: what, and which journal; the file may
 * be used), or a negative errno with one line in @err when the file must
 * not be used yet:
 *   -EUCLEAN  @apply false and a valid journal needs rolling back
 *             ("needs recovery: run 'ptfs recover FILE'");
 *   -EBUSY    another process is committing to it (locked for
 *             pt_journal_lock_wait_ms), or the file changed under us;
 *   -EACCES, -EPERM, -EROFS  a valid journal must be rolled back (or
 *             read) and this user cannot: the message says so;
 *   other     an I/O error reading or writing the file.
 */
int pt_journal_recover(const char *path, bool apply, char *note, size_t cap,
		       struct pt_error *err);

#endif /* PTFS_CORE_CONTAINER_JOURNAL_H */
