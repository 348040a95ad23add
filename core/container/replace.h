/* SPDX-License-Identifier: MIT */
/*
 * replace.h -- commit new bytes into byte ranges of a local file by copying
 * it beside itself and renaming the copy over it (replace.c).
 */
#ifndef PTFS_CORE_REPLACE_H
#define PTFS_CORE_REPLACE_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "io/source.h"

/* New contents for the bytes [@off, @off + @len) of the file. */
struct pt_replace {
	uint64_t off;
	uint64_t len;
	/* Fill @buf with bytes [@off, @off + @n) of the new contents of the
	 * range (offsets count from the range's start); 0 or -errno. */
	int (*read)(void *ctx, void *buf, size_t n, uint64_t off);
	void *ctx;
};

/*
 * Replace the @n ranges @r (inside the file, not overlapping) of the local
 * file that @src reads (pt_source_local_path()): copy it beside itself as
 * "<dir>/.<name>.ptfs-XXXXXX" with the original's mode and owner, write
 * the new bytes, fsync, rename over the original, fsync the directory.
 * -ESTALE when the file changed on disk since @src opened it (checked
 * before and again just before the rename), -EROFS when @src is not a
 * local file, else -errno; a message in @err, the original untouched and
 * no temporary file left on any failure.  The caller reopens @src after a
 * success (pt_source_reopen()).
 */
int pt_replace_ranges(const struct pt_source *src, const struct pt_replace *r,
		      size_t n, struct pt_error *err);

#endif /* PTFS_CORE_REPLACE_H */
