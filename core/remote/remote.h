/* SPDX-License-Identifier: MIT */
/*
 * remote.h -- a checkpoint read where it lives: http://, https://,
 * s3://BUCKET/KEY and hf://ORG/REPO[@REVISION]/PATH.
 *
 * The optional library ptfs_remote (libcurl) is the only part of core/ that
 * knows bytes are remote.  An object is read by HTTP range requests into a
 * block cache on disk (a sparse file plus a bitmap of the blocks held, per
 * object, shared by concurrent processes), pinned at open to one version
 * (ETag; a hub branch resolved to its commit), so that everything read
 * after open is immutable: a change on the server makes reads fail with
 * -EIO (pt_remote_check: -ESTALE with the reason) instead of mixing two
 * versions.  Validators, strongest first: the ETag (If-Match and If-Range
 * on every range request), else Last-Modified and the size
 * (If-Unmodified-Since), else the size alone; every response's
 * Content-Range total is checked against the size.
 *
 * Transient failures (timeouts, resets, 5xx, 429) are retried with
 * exponential backoff and jitter until a deadline (opts.timeout_s) passes.
 */
#ifndef PTFS_CORE_REMOTE_H
#define PTFS_CORE_REMOTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "base/dirlist.h"
#include "base/error.h"

struct pt_remote;

struct pt_remote_opts {
	const char *cache_dir;   /* NULL: $XDG_CACHE_HOME/ptfs, ~/.cache/ptfs */
	uint64_t cache_size;     /* LRU bound of the cache in bytes */
	unsigned timeout_s;      /* retry deadline of one read, seconds */
	const char *cafile;      /* CA bundle (NULL: $CURL_CA_BUNDLE, system) */
	const char *s3_endpoint; /* NULL: $AWS_ENDPOINT_URL_S3, $AWS_ENDPOINT_URL,
				  * the AWS profile's (aws.h) or AWS itself */
	/* Where warnings and trace lines go (core never prints): @level is
	 * a syslog level (4 warning, 7 trace), @line one line without a
	 * "ptfs: " prefix nor newline; NULL drops them.  May be called from
	 * the request engine's thread. */
	void (*log)(int level, const char *line);
};

/* Defaults: 10 GiB cache, 60 s timeout. */
void pt_remote_opts_default(struct pt_remote_opts *o);

/*
 * Open @url: one request learns the object's size and version (a range GET
 * that also brings its first or last block; a conditional request when the
 * cache holds the object already).  401/403/404 and other failures give one
 * line naming the URL, never a credential.
 */
int pt_remote_open(struct pt_remote **out, const char *url,
		   const struct pt_remote_opts *o, struct pt_error *err);

/* Does @url name a "directory" (it ends with '/')? */
bool pt_remote_is_prefix(const char *url);

/*
 * The names directly under the directory @url names, into @l (dirlist.h,
 * done): s3://BUCKET/PREFIX/ is listed page after page (ListObjectsV2),
 * at most PT_MAX_DIR_ENTRIES names; keys are files, common prefixes are
 * not.  Other schemes have no listing: -EISDIR with a line saying to
 * name the checkpoint's file.  S3's refusals give the lines of an open.
 */
int pt_remote_list(const char *url, const struct pt_remote_opts *o,
		   struct pt_dir_list *l, struct pt_error *err);

/* Open the object named @rel relative to @r (a shard beside its index),
 * sharing @r's options and pinned revision. */
int pt_remote_open_sibling(struct pt_remote *r, const char *rel,
			   struct pt_remote **out, struct pt_error *err);

uint64_t pt_remote_size(const struct pt_remote *r);
/* Last-Modified of the object (0 when the server gave none). */
struct timespec pt_remote_mtime(const struct pt_remote *r);
const char *pt_remote_name(const struct pt_remote *r);

/* Exactly @n bytes at @off; blocks until they are held.  0 or -errno. */
int pt_remote_read(struct pt_remote *r, void *buf, size_t n, uint64_t off,
		   struct pt_error *err);

/* When [@off, @off + @n) is in the cache already: the cache file's
 * descriptor (owned by @r) and the offset there, for zero copy; else false
 * (then pt_remote_read() fetches it). */
bool pt_remote_extent(struct pt_remote *r, uint64_t off, uint64_t n, int *fd,
		      uint64_t *file_off);

/* Hint: [@off, @off + @n) is one region (io/source.h: a tensor's
 * storage): reads inside it that continue each other are read ahead of,
 * up to its end.  Reads outside every region are fetched exactly (their
 * blocks).  Never blocks. */
void pt_remote_region(struct pt_remote *r, uint64_t off, uint64_t n);

/* Hint: [@off, @off + @n) is read whole, soon (a record): its missing
 * blocks are requested now (as RM_CHUNK ranges in parallel, up to the
 * read-ahead window's bound); returns at once. */
void pt_remote_prefetch(struct pt_remote *r, uint64_t off, uint64_t n);

/* 0 while the object is unchanged, -ESTALE once a response showed a new
 * version. */
int pt_remote_check(struct pt_remote *r, struct pt_error *err);

void pt_remote_close(struct pt_remote *r);

#endif /* PTFS_CORE_REMOTE_H */
