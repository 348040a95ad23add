/* SPDX-License-Identifier: MIT */
/*
 * source.h -- the input: a file descriptor, or a memory buffer.
 *
 * Core reads the checkpoint with pread() into its own buffers and never maps
 * it: a file truncated under a mount then gives a short read (-EIO), not a
 * SIGBUS.  The in-memory form serves unit tests and fuzzers.
 */
#ifndef PTFS_CORE_SOURCE_H
#define PTFS_CORE_SOURCE_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

struct pt_source {
	int fd;                 /* file to pread, or -1 */
	const uint8_t *mem;     /* else bytes in memory (borrowed) */
	uint64_t size;          /* bytes in the input */
	const char *name;       /* for messages (borrowed) */
	uint64_t base;          /* fd sources: file offset of byte 0 (0 but
				 * for pt_source_sub()) */
};

/* A source over @fd; fstat gives the size.  Returns 0 or -errno. */
int pt_source_fd(struct pt_source *s, int fd, const char *name,
		 struct pt_error *err);

/* A source over @len bytes at @mem (borrowed for the source's life). */
void pt_source_mem(struct pt_source *s, const void *mem, uint64_t len,
		   const char *name);

/*
 * A source over bytes [@off, @off + @len) of @parent (a blob inside a
 * file, e.g. a torch.save zip embedded in a DCP .distcp file): offsets
 * given to pt_source_read() count from @off.  Borrows @parent's fd or
 * memory, which must outlive @s.  -EIO (with a message naming @name) when
 * the range does not lie inside @parent.
 */
int pt_source_sub(struct pt_source *s, const struct pt_source *parent,
		  uint64_t off, uint64_t len, const char *name,
		  struct pt_error *err);

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

#endif /* PTFS_CORE_SOURCE_H */
