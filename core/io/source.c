/* SPDX-License-Identifier: MIT */
/*
 * source.c -- what every source shares: range checks around the ops, and
 * reading into a new buffer.  The sources themselves live in file.c (local
 * files) and mem.c (memory, sub-ranges).
 */
#include "io/source.h"

#include "base/buf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static bool in_range(const struct pt_source *s, uint64_t off, uint64_t n)
{
	return off <= s->size && n <= s->size - off;
}

void pt_source_close(struct pt_source *s)
{
	if (s)
		s->ops->close(s);
}

int pt_source_read(const struct pt_source *s, void *buf, size_t n,
		   uint64_t off, struct pt_error *err)
{
	if (!in_range(s, off, n))
		return pt_fail(err, -EIO,
			       "read of %zu bytes at 0x%llx beyond end of file (%llu bytes)",
			       n, (unsigned long long)off,
			       (unsigned long long)s->size);
	if (n == 0)
		return 0;
	return s->ops->read(s, buf, n, off, err);
}

int pt_source_dup(const struct pt_source *s, uint64_t off, size_t n,
		  uint8_t **out, struct pt_error *err)
{
	uint8_t *b;
	int rc;

	*out = NULL;
	if (n == SIZE_MAX)
		return pt_fail(err, -EFBIG, "record too large");
	b = malloc(n + 1);
	if (!b)
		return pt_fail(err, -ENOMEM, "out of memory reading %zu bytes", n);
	pt_populate(b, n);
	rc = pt_source_read(s, b, n, off, err);
	if (rc) {
		free(b);
		return rc;
	}
	b[n] = 0;
	*out = b;
	return 0;
}

void pt_source_region(const struct pt_source *s, uint64_t off, uint64_t n)
{
	if (s->ops->region && in_range(s, off, n))
		s->ops->region(s, off, n);
}

void pt_source_prefetch(const struct pt_source *s, uint64_t off, uint64_t n)
{
	if (s->ops->prefetch && in_range(s, off, n))
		s->ops->prefetch(s, off, n);
}

bool pt_source_extent(const struct pt_source *s, uint64_t off, uint64_t n,
		      int *fd, uint64_t *file_off)
{
	return s->ops->extent && in_range(s, off, n) &&
	       s->ops->extent(s, off, n, fd, file_off);
}

int pt_source_check(const struct pt_source *s, enum pt_check how,
		    struct pt_error *err)
{
	return s->ops->check ? s->ops->check(s, how, err) : 0;
}

bool pt_source_has_siblings(const struct pt_source *s)
{
	return s->ops->open_sibling != NULL;
}

int pt_source_open_sibling(const struct pt_source *s, const char *rel,
			   struct pt_source **out, struct pt_error *err)
{
	*out = NULL;
	if (!s->ops->open_sibling)
		return pt_fail(err, -ENOTSUP,
			       "%s: has no files beside it (not a local file)",
			       s->name);
	return s->ops->open_sibling(s, rel, out, err);
}
