/* SPDX-License-Identifier: MIT */
/*
 * source.h -- the input: where a checkpoint's bytes come from.
 *
 * A source is a small vtable (struct pt_source_ops) so that a local file,
 * a memory buffer, a byte range of another source, an HTTP(S) range
 * reader (core/remote/source.c, over a block cache on disk) and the
 * mount's overlay of uncommitted writes are interchangeable.  Nothing
 * above core/io knows which one it holds: bytes are read with
 * pt_source_read(), zero copy asks for an extent (a local fd range, or
 * nothing), "has it changed?" is a check.
 *
 * Local files are read with pread() into our own buffers and never mapped:
 * a file truncated under a mount then gives a short read (-EIO), not a
 * SIGBUS.  Memory sources serve unit tests and fuzzers.
 *
 * Sources are not thread-safe objects by themselves, but every built-in
 * op is safe to call from several threads at once (pread, memcpy, fstat);
 * remote sources must keep that promise too.
 */
#ifndef PTFS_CORE_SOURCE_H
#define PTFS_CORE_SOURCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

#include "base/error.h"

struct pt_source;

/* What pt_source_check() compares with the state at open. */
enum pt_check {
	/* the bytes this source reads: a local file rewritten or truncated
	 * in place (fstat of our descriptor: size, mtime); a file replaced
	 * by rename still reads its old, consistent bytes and passes */
	PT_CHECK_READS,
	/* the name: the object the source's name designates now is still the
	 * one opened (stat of the path: device, inode, size, mtime; for
	 * remote sources the ETag); commits check this before replacing */
	PT_CHECK_NAME,
};

struct pt_source_ops {
	/* Exactly @n bytes at @off into @buf; 0, or -errno with one line in
	 * @err.  pt_source_read() has checked that the range lies inside
	 * the source.  May block; must be thread-safe. */
	int (*read)(const struct pt_source *s, void *buf, size_t n,
		    uint64_t off, struct pt_error *err);
	/* Hint: [@off, @off + @n) is one region read front to back (a
	 * tensor's storage, a stored record): a source that fetches ahead
	 * (remote) may do so inside it while the reads stay sequential,
	 * never past its end; bytes outside every region (the format's
	 * metadata) are fetched exactly as read.  Given again and again
	 * (each read may repeat it), it costs a lookup.  Never blocks,
	 * never fails.  NULL when the source gains nothing from hints. */
	void (*region)(const struct pt_source *s, uint64_t off, uint64_t n);
	/* Hint: [@off, @off + @n) is read whole, soon (a record read in one
	 * piece): a source that fetches may start now, in one request.  Never
	 * blocks, never fails.  NULL when the source gains nothing. */
	void (*prefetch)(const struct pt_source *s, uint64_t off, uint64_t n);
	/* Where [@off, @off + @n) lies in a local file, for zero copy
	 * (splice, copy_file_range): its descriptor in *@fd (owned by the
	 * source) and offset in *@file_off, and true; false when the bytes
	 * are not in a local file (memory, remote).  NULL means never. */
	bool (*extent)(const struct pt_source *s, uint64_t off, uint64_t n,
		       int *fd, uint64_t *file_off);
	/* 0 when unchanged since open in the sense of @how (enum pt_check),
	 * -ESTALE (one line in @err) when changed, another -errno when it
	 * cannot tell.  Safe to call on every read (one fstat). */
	int (*check)(const struct pt_source *s, enum pt_check how,
		     struct pt_error *err);
	/* A new source for the object @rel (a plain relative name) beside
	 * this one: a shard named by *.index.json, a DCP .distcp file.  A
	 * local file opens "<directory of its path>/@rel".  NULL when the
	 * source has no neighbours (memory). */
	int (*open_sibling)(const struct pt_source *s, const char *rel,
			    struct pt_source **out, struct pt_error *err);
	/* Free the source and its state (not its parent, for sub-ranges). */
	void (*close)(struct pt_source *s);
};

struct pt_source {
	const struct pt_source_ops *ops;
	uint64_t size;                  /* bytes in the source */
	const char *name;               /* for messages: the file's path, or
					 * the name given at creation */
	struct timespec mtime;          /* last modification; 0 unknown */
	void *priv;                     /* the implementation's state */
	bool costly_reads;              /* each read may cost a round trip
					 * (a remote object): formats defer
					 * what they can to first use */
};

/*
 * Open the local file @path read-only (O_CLOEXEC) and record what it is
 * (device, inode, size, mtime) for pt_source_check().  The source's name
 * is a copy of @path.  -errno with a message naming the error (ENOENT,
 * EACCES...), or "@path: not a regular file" (-EINVAL).
 */
int pt_source_open_file(const char *path, struct pt_source **out,
			struct pt_error *err);

/* A source over @len bytes at @mem (borrowed for the source's life),
 * named @name (borrowed).  0 or -ENOMEM. */
int pt_source_mem(const void *mem, uint64_t len, const char *name,
		  struct pt_source **out, struct pt_error *err);

/*
 * A source over bytes [@off, @off + @len) of @parent (a blob inside a file,
 * e.g. a torch.save zip embedded in a DCP .distcp file): offsets count
 * from @off; extents, checks and siblings are the parent's.  Borrows
 * @parent and @name, which must outlive it.  -EIO (with a message naming
 * @name) when the range does not lie inside @parent.
 */
int pt_source_sub(const struct pt_source *parent, uint64_t off,
		  uint64_t len, const char *name, struct pt_source **out,
		  struct pt_error *err);

/* Close @s (NULL is fine). */
void pt_source_close(struct pt_source *s);

/*
 * Read exactly @n bytes at @off into @buf.  A range outside the source, or a
 * short read (the file shrank), is -EIO with a message naming the offset.
 */
int pt_source_read(const struct pt_source *s, void *buf, size_t n,
		   uint64_t off, struct pt_error *err);

/* Read @n bytes at @off into a new malloc()ed buffer (*out; NULL on error).
 * One extra NUL byte is appended (not counted in @n) for text records. */
int pt_source_dup(const struct pt_source *s, uint64_t off, size_t n,
		  uint8_t **out, struct pt_error *err);

/* ops->region when there is one and the range lies inside @s. */
void pt_source_region(const struct pt_source *s, uint64_t off, uint64_t n);

/* ops->prefetch when there is one and the range lies inside @s. */
void pt_source_prefetch(const struct pt_source *s, uint64_t off, uint64_t n);

/* ops->extent, false when there is none or the range leaves @s. */
bool pt_source_extent(const struct pt_source *s, uint64_t off, uint64_t n,
		      int *fd, uint64_t *file_off);

/* ops->check; 0 when the source cannot change (memory). */
int pt_source_check(const struct pt_source *s, enum pt_check how,
		    struct pt_error *err);

/* Can @s open siblings (pt_source_open_sibling)?  False for memory. */
bool pt_source_has_siblings(const struct pt_source *s);

/* ops->open_sibling; -ENOTSUP with a message when @s has no neighbours. */
int pt_source_open_sibling(const struct pt_source *s, const char *rel,
			   struct pt_source **out, struct pt_error *err);

/*
 * For the commit engines, which replace the file itself: the path of the
 * local file @s reads (a pt_source_open_file() source), else NULL (memory,
 * sub-range and remote sources are read-only).
 */
const char *pt_source_local_path(const struct pt_source *s);

/*
 * After a commit replaced or patched the local file @s reads: reopen its
 * path and read the new file through the same descriptor number from now
 * on (dup2, so zero-copy replies in flight stay valid), take its size (a
 * rewrite may move records) and record its identity for
 * pt_source_check().  -EINVAL when @s is not a local file, else -errno;
 * messages name the problem.
 */
int pt_source_reopen(struct pt_source *s, struct pt_error *err);

/*
 * The identity pt_source_check() compares with (device, inode, size,
 * mtime) in *@st: 0, or -EINVAL when @s is not a local file.
 */
int pt_source_identity(const struct pt_source *s, struct stat *st);

/*
 * After a failed commit that wrote the file and put its bytes back (an
 * in-place commit rolled back): if the path still names the same file
 * (device, inode, size), take its new mtime as ours, so the rollback is
 * not mistaken for another program's change.  0, -ESTALE when it is
 * another file or size, -EINVAL when @s is not a local file.
 */
int pt_source_reaffirm(struct pt_source *s);

#endif /* PTFS_CORE_SOURCE_H */
