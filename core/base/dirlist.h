/* SPDX-License-Identifier: MIT */
/*
 * dirlist.h -- the names of a directory: a local one, or an S3 prefix
 * (remote.h), as ckpt.h's pt_ckpt_pick() takes them.
 */
#ifndef PTFS_CORE_BASE_DIRLIST_H
#define PTFS_CORE_BASE_DIRLIST_H

#include <stdbool.h>
#include <stddef.h>

#include "base/buf.h"

/* Listings are read up to this many names, at most, and this many bytes
 * of them (a local directory's 100,000 names of NAME_MAX bytes fit; a
 * server's names may be longer: S3 keys reach 1,024 bytes) */
#define PT_MAX_DIR_ENTRIES 100000
#define PT_MAX_DIR_BYTES ((size_t)32 << 20)

/* One name; @regular: a file (not a directory, device...). */
struct pt_dir_entry {
	const char *name;
	bool regular;
};

struct pt_dir_list {
	struct pt_dir_entry *e;         /* valid after pt_dir_list_end() */
	size_t n, cap;
	struct pt_buf names;            /* the names, one after the other */
};

void pt_dir_list_init(struct pt_dir_list *l);
/* Add @name (@len bytes, copied).  -EFBIG past PT_MAX_DIR_ENTRIES names
 * or PT_MAX_DIR_BYTES of them, -ENOMEM; the list is then as it was. */
int pt_dir_list_add(struct pt_dir_list *l, const char *name, size_t len,
		    bool regular);
/* Done adding: e[i].name point into names.  0 or -ENOMEM (an add's copy
 * failed). */
int pt_dir_list_end(struct pt_dir_list *l);
void pt_dir_list_free(struct pt_dir_list *l);

#endif /* PTFS_CORE_BASE_DIRLIST_H */
