/* SPDX-License-Identifier: MIT */
/*
 * source.c -- a remote object as a core source (io/source.h): the rest of
 * core reads, prefetches and checks it like any other input and never
 * learns that its bytes come over the network.  Bytes already in the block
 * cache have an extent (the cache file: zero-copy replies); there is no
 * local path (read-only: commits refuse).  A URL that names a directory
 * (s3://BUCKET/PREFIX/) opens the checkpoint file its listing picks.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/url.h"
#include "ckpt/ckpt.h"
#include "remote/remote_source.h"

static int rs_read(const struct pt_source *s, void *buf, size_t n,
		   uint64_t off, struct pt_error *err)
{
	return pt_remote_read(s->priv, buf, n, off, err);
}

static void rs_region(const struct pt_source *s, uint64_t off, uint64_t n)
{
	pt_remote_region(s->priv, off, n);
}

static void rs_prefetch(const struct pt_source *s, uint64_t off, uint64_t n)
{
	pt_remote_prefetch(s->priv, off, n);
}

static bool rs_extent(const struct pt_source *s, uint64_t off, uint64_t n,
		      int *fd, uint64_t *file_off)
{
	return pt_remote_extent(s->priv, off, n, fd, file_off);
}

static int rs_check(const struct pt_source *s, enum pt_check how,
		    struct pt_error *err)
{
	(void)how;      /* the version (ETag) answers both questions */
	return pt_remote_check(s->priv, err);
}

static int rs_wrap(struct pt_remote *r, struct pt_source **out,
		   struct pt_error *err);

static int rs_sibling(const struct pt_source *s, const char *rel,
		      struct pt_source **out, struct pt_error *err)
{
	struct pt_remote *r;
	int rc;

	*out = NULL;
	rc = pt_remote_open_sibling(s->priv, rel, &r, err);
	return rc ? rc : rs_wrap(r, out, err);
}

static void rs_close(struct pt_source *s)
{
	pt_remote_close(s->priv);
	free(s);
}

static const struct pt_source_ops rs_ops = {
	.read = rs_read,
	.region = rs_region,
	.prefetch = rs_prefetch,
	.extent = rs_extent,
	.check = rs_check,
	.open_sibling = rs_sibling,
	.close = rs_close,
};

static int rs_wrap(struct pt_remote *r, struct pt_source **out,
		   struct pt_error *err)
{
	struct pt_source *s = calloc(1, sizeof(*s));

	if (!s) {
		pt_remote_close(r);
		return pt_fail(err, -ENOMEM, "out of memory");
	}
	s->ops = &rs_ops;
	s->size = pt_remote_size(r);
	s->name = pt_remote_name(r);
	s->mtime = pt_remote_mtime(r);
	s->priv = r;
	s->costly_reads = true;
	*out = s;
	return 0;
}

/* The URL of the checkpoint's file under the directory @url names (a
 * sharded index, a DCP .metadata: ckpt.h, pt_ckpt_pick()), malloc()ed. */
static int rs_pick(const char *url, const struct pt_remote_opts *o,
		   char **file_url, struct pt_error *err)
{
	struct pt_dir_list l;
	char *file = NULL;
	int rc;

	pt_dir_list_init(&l);
	rc = pt_remote_list(url, o, &l, err);
	if (!rc) {
		rc = pt_ckpt_pick(l.e, l.n, &file, err);
		if (rc) {
			char shown[2048];

			pt_error_prefix(err, "%s",
					pt_url_redact(url, shown, sizeof(shown)));
		}
	}
	if (!rc && asprintf(file_url, "%s%s%s", url,
			    url[strlen(url) - 1] == '/' ? "" : "/", file) < 0) {
		*file_url = NULL;
		rc = pt_fail(err, -ENOMEM, "out of memory");
	}
	free(file);
	pt_dir_list_free(&l);
	return rc;
}

int pt_source_open_remote(const char *url, const struct pt_remote_opts *o,
			  struct pt_source **out, struct pt_error *err)
{
	struct pt_remote *r;
	char *file_url = NULL;
	int rc = 0;

	*out = NULL;
	if (pt_remote_is_prefix(url)) {
		rc = rs_pick(url, o, &file_url, err);
		url = file_url;
	}
	if (!rc)
		rc = pt_remote_open(&r, url, o, err);
	free(file_url);
	return rc ? rc : rs_wrap(r, out, err);
}

