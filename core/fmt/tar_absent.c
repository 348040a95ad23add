/* SPDX-License-Identifier: MIT */
/*
 * tar_absent.c -- stands in for the tar reader (fmt/tar.c) when ptfs is
 * built without libarchive (CMake: PTFS_WITH_LIBARCHIVE=OFF or libarchive
 * not found).  It claims the same files the reader would (a ustar header),
 * so a tar checkpoint of torch <= 0.1.9 fails with one line saying what is
 * missing instead of "unrecognised format".
 */
#include "fmt/fmt.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

static int tar_absent_probe(struct pt_ckpt *ck, const uint8_t *head, size_t n,
			    struct pt_error *err)
{
	(void)ck;
	(void)err;
	return n >= 262 && memcmp(head + 257, "ustar", 5) == 0;
}

static int tar_absent_open(struct pt_ckpt *ck, struct pt_error *err)
{
	(void)ck;
	return pt_fail(err, -ENOTSUP,
		       "tar checkpoint (torch <= 0.1.9): this ptfs was built without libarchive");
}

const struct pt_format pt_fmt_tar = {
	.name = "torch.save tar (torch <= 0.1.9; not built: no libarchive)",
	.probe = tar_absent_probe,
	.open = tar_absent_open,
};
