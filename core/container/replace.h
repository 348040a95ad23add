/* SPDX-License-Identifier: MIT */
/*
 * replace.h -- replace a file safely: the one way every writer of ptfs
 * turns new contents into the user's file.
 *
 *   pt_replace_begin()   resolve the real file behind @path (symlink
 *                        chains, relative and absolute: the target is
 *                        written, the links are kept), check it is the file
 *                        the caller indexed and that this user may write it
 *                        and keep its owner (else -EACCES / -EPERM: a
 *                        rewrite must not give the file away), create a
 *                        temporary file in the target's directory
 *   pt_replace_write()   full-write loops into the temporary file
 *   pt_replace_copy()    copy a range of another file (copy_file_range(),
 *                        read/write where it cannot)
 *   pt_replace_clone()   make the temporary file a clone of another file
 *                        (FICLONE: XFS reflink, btrfs, bcachefs, ZFS)
 *   pt_replace_commit()  give the temporary file the target's owner, then
 *                        its mode, then its extended attributes (after the
 *                        data: a write clears set-id bits and file
 *                        capabilities), fsync, close (both checked), look
 *                        once more that the target did not change, rename
 *                        over it, fsync the directory
 *   pt_replace_abort()   remove the temporary file; the target is untouched
 *
 * Until the rename the target is never written; after a successful rename
 * pt_replace_commit() returns 0 whatever happens next (a failed directory
 * fsync cannot be undone, and reporting it would make the caller believe
 * the old file is still there).  Errors are the real negative errno of the
 * failing call (-ENOSPC stays -ENOSPC) with one line in the struct
 * pt_error.
 *
 * Fault injection (tests): every step below counts its calls, process-wide,
 * once a test arms it; pt_fault_set() or, only in builds with
 * PTFS_FAULT_INJECTION (the test builds; never Release builds or the
 * Debian package, which ignore it and take no lock), the environment
 * variable PTFS_FAULT=STEP:N:ERR makes
 * the Nth call of STEP fail with errno ERR (a number or a name: ENOSPC,
 * EIO, EDQUOT, EROFS, EACCES, EPERM, EXDEV, EOPNOTSUPP), or, with ERR =
 * KILL, kills the process with SIGKILL right there (crash tests), or with
 * STOP stops it (SIGSTOP) until SIGCONT, then goes on (a live writer).  STEP is
 * one of create, owner, mode, xattr, write, copy, clone, fsync, close,
 * rename, dirfsync, the journal's jwrite, jfsync, patch, pfsync,
 * jremove (core/container/journal.c), and pending, the writes of a kept
 * writes file (core/ckpt/pending.c).
 */
#ifndef PTFS_CORE_CONTAINER_REPLACE_H
#define PTFS_CORE_CONTAINER_REPLACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>

#include "base/error.h"

/* What the target must still be (zero fields are not checked), so that a
 * commit never replaces a file another program changed meanwhile. */
struct pt_replace_expect {
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime;
};

/* One replacement in progress. */
struct pt_replace {
	char *real;             /* the target: symlinks resolved (malloc) */
	char *tmp;              /* the temporary file (malloc) */
	int fd;                 /* the temporary file, O_RDWR */
	int orig;               /* the target, read-only (its xattrs) */
	struct stat st;         /* the target when begin() looked */
	struct pt_replace_expect expect; /* checked again before rename */
};

/*
 * Resolve @path to the file it finally names (every symlink in the chain
 * followed, relative ones against their own directory) as an absolute,
 * malloc()ed path in *@real.  -ELOOP for a cycle, -ENOENT for a dangling
 * link, with the link named in the message.
 */
int pt_resolve_path(const char *path, char **real, struct pt_error *err);

/*
 * Start replacing the file at @path.  @expect may be NULL.  On success the
 * caller writes the complete new contents into r->fd (with the functions
 * below) and calls pt_replace_commit() or pt_replace_abort().
 */
int pt_replace_begin(struct pt_replace *r, const char *path,
		     const struct pt_replace_expect *expect,
		     struct pt_error *err);

/* Write all @n bytes at @off of the temporary file. */
int pt_replace_write(struct pt_replace *r, const void *p, size_t n,
		     uint64_t off, struct pt_error *err);

/* Copy @n bytes at @src of @in to @dst of the temporary file. */
int pt_replace_copy(struct pt_replace *r, int in, uint64_t src, uint64_t n,
		    uint64_t dst, struct pt_error *err);

/*
 * Make the temporary file share all of @in's extents (FICLONE).  Returns
 * -EOPNOTSUPP, -EXDEV, -EINVAL or -ENOTTY (no message recorded) when the
 * filesystem cannot clone: the caller then copies instead.
 */
int pt_replace_clone(struct pt_replace *r, int in, struct pt_error *err);

/* Durably move the temporary file over the target; frees @r either way
 * (after a failure the temporary file is removed). */
int pt_replace_commit(struct pt_replace *r, struct pt_error *err);

/*
 * pt_replace_commit() in its two steps, for a commit that replaces several
 * files together (pt_patch_apply_files(), container/journal.h): seal --
 * owner, mode, xattrs, fsync, close, the last look at the target -- and
 * rename -- the rename and the directory's fsync.  A failed seal frees @r
 * (the target untouched); after a seal, @r is given to pt_replace_rename()
 * (frees it either way) or pt_replace_abort().
 */
int pt_replace_seal(struct pt_replace *r, struct pt_error *err);
int pt_replace_rename(struct pt_replace *r, struct pt_error *err);

/* Give up: remove the temporary file, free @r.  Safe after a failed begin
 * and after commit. */
void pt_replace_abort(struct pt_replace *r);

/*
 * Remove the temporary files an interrupted replacement of @path left
 * beside its real file (kill -9, power loss), whatever their age:
 * ".<name>.ptfs-XXXXXX" (exactly that pattern, for this file), regular,
 * one link, owned by the file's owner or by this user, and not locked
 * (a live writer flocks its temporary file from its creation to its
 * rename: the lock is the proof of life).  A writer also holds the
 * file's lock (pt_lock_file()) from before it creates its temporary file,
 * so the sweep runs only under that lock: held by the caller when
 * @locked, else taken here without waiting (a writer at work: nothing
 * done).  With @remove false nothing is removed (a read-only open): the
 * dead ones are only counted.  Returns how many, with one line in @note.
 */
int pt_replace_sweep(const char *path, bool locked, bool remove, char *note,
		     size_t cap);

/*
 * The writers' lock: an exclusive flock() on the file being replaced or
 * patched, taken on @fd (the file @real), waiting up to
 * pt_journal_lock_wait_ms (30000; tests lower it), then -EBUSY.  A
 * replacement holds it from begin to the rename, an in-place commit from
 * before its journal exists until the journal is gone, a recovery while it
 * reads a journal: so a live journal is never taken for an interrupted
 * one, and no writer copies a file another is patching or renames over
 * one another has just replaced.  close(@fd) or death releases it.
 */
extern unsigned pt_journal_lock_wait_ms;
int pt_lock_file(int fd, const char *real, struct pt_error *err);

/* fsync the directory holding @path; 0 or -errno (step "dirfsync"). */
int pt_fsync_parent(const char *path);

/* ---- fault injection (tests only) ---- */

/* 0, or the injected -errno for this call of @step (see above). */
int pt_fault(const char *step);

/* Fail the @nth call (1-based, counted from now) of @step with @errnum
 * (positive; -1 SIGKILL, -2 SIGSTOP); @step NULL clears every fault and
 * counter. */
void pt_fault_set(const char *step, unsigned nth, int errnum);

/* How many times @step ran since the last pt_fault_set(). */
unsigned pt_fault_count(const char *step);

/* pt_pwrite_full() (io/fd.h) of @n bytes at @off, as step @step: counted
 * once per call, and failed instead when a fault is set on it. */
int pt_pwrite_step(int fd, const void *p, size_t n, uint64_t off,
		   const char *step);

#endif /* PTFS_CORE_CONTAINER_REPLACE_H */
