/* SPDX-License-Identifier: MIT */
/*
 * listing.h -- pages of a remote directory's listing, read (listing.c):
 * S3's ListObjectsV2 and the hub's tree API (docs/FORMATS.md, "Listing a
 * remote directory").  Each adds names to a dirlist.h list, by their name
 * below the directory listed; names holding a '/' are left out.  0,
 * -EBADMSG for an answer that is no listing, -EFBIG (dirlist.h's bound)
 * or -ENOMEM.
 */
#ifndef PTFS_CORE_REMOTE_LISTING_H
#define PTFS_CORE_REMOTE_LISTING_H

#include <stddef.h>

#include "base/dirlist.h"

/* One ListObjectsV2 page (@xml, @n bytes) of the keys under @prefix:
 * <Contents><Key> are files, <CommonPrefixes><Prefix> directories
 * (entities decoded).  *@token: the next page's continuation token
 * (malloc()ed), NULL after the last page. */
int rm_s3_list_parse(const char *xml, size_t n, const char *prefix,
		     struct pt_dir_list *l, char **token);

/* One page of the hub's tree of directory @dir ("" for the repository's
 * root, else "PATH/"): a JSON array of {"type": "file" | "directory",
 * "path": "..."} objects, other members skipped. */
int rm_hf_tree_parse(const char *json, size_t n, const char *dir,
		     struct pt_dir_list *l);

/* The URL of a Link header's rel="next" (@line, @n bytes: one header line
 * as received), malloc()ed into *@next; NULL when the line is no such
 * link.  0 or -ENOMEM. */
int rm_link_next(const char *line, size_t n, char **next);

#endif /* PTFS_CORE_REMOTE_LISTING_H */
