/* SPDX-License-Identifier: MIT */
/*
 * mem.c -- two sources that hold no resources of their own: bytes in memory,
 * and a byte range of another source (a blob inside a file).
 */
#include "io/source.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- memory ---- */

struct mem_source {
	struct pt_source s;
	const uint8_t *mem;             /* borrowed */
};

static int mem_read(const struct pt_source *s, void *buf, size_t n,
		    uint64_t off, struct pt_error *err)
{
	const struct mem_source *m = s->priv;

	(void)err;
	memcpy(buf, m->mem + off, n);
	return 0;
}

static void mem_close(struct pt_source *s)
{
	free(s->priv);
}

static const struct pt_source_ops mem_ops = {
	.read = mem_read,
	.close = mem_close,
};

int pt_source_mem(const void *mem, uint64_t len, const char *name,
		  struct pt_source **out, struct pt_error *err)
{
	struct mem_source *m = calloc(1, sizeof(*m));

	*out = NULL;
	if (!m)
		return pt_fail(err, -ENOMEM, "out of memory");
	m->mem = mem;
	m->s.ops = &mem_ops;
	m->s.size = len;
	m->s.name = name;
	m->s.priv = m;
	*out = &m->s;
	return 0;
}

/* ---- a range of another source ---- */

struct sub_source {
	struct pt_source s;
	const struct pt_source *parent; /* borrowed */
	uint64_t off;                   /* of byte 0 in the parent */
};

static int sub_read(const struct pt_source *s, void *buf, size_t n,
		    uint64_t off, struct pt_error *err)
{
	const struct sub_source *b = s->priv;

	return pt_source_read(b->parent, buf, n, b->off + off, err);
}

static void sub_region(const struct pt_source *s, uint64_t off, uint64_t n)
{
	const struct sub_source *b = s->priv;

	pt_source_region(b->parent, b->off + off, n);
}

static void sub_prefetch(const struct pt_source *s, uint64_t off, uint64_t n)
{
	const struct sub_source *b = s->priv;

	pt_source_prefetch(b->parent, b->off + off, n);
}

static bool sub_extent(const struct pt_source *s, uint64_t off, uint64_t n,
		       int *fd, uint64_t *file_off)
{
	const struct sub_source *b = s->priv;

	return pt_source_extent(b->parent, b->off + off, n, fd, file_off);
}

static int sub_check(const struct pt_source *s, enum pt_check how,
		     struct pt_error *err)
{
	const struct sub_source *b = s->priv;

	return pt_source_check(b->parent, how, err);
}

static int sub_open_sibling(const struct pt_source *s, const char *rel,
			    struct pt_source **out, struct pt_error *err)
{
	const struct sub_source *b = s->priv;

	return pt_source_open_sibling(b->parent, rel, out, err);
}

static const struct pt_source_ops sub_ops = {
	.read = sub_read,
	.region = sub_region,
	.prefetch = sub_prefetch,
	.extent = sub_extent,
	.check = sub_check,
	.open_sibling = sub_open_sibling,
	.close = mem_close,
};

int pt_source_sub(const struct pt_source *parent, uint64_t off,
		  uint64_t len, const char *name, struct pt_source **out,
		  struct pt_error *err)
{
	struct sub_source *b;

	*out = NULL;
	if (off > parent->size || len > parent->size - off)
		return pt_fail(err, -EIO,
			       "%s: bytes [%llu, +%llu) lie beyond the end of %s (%llu bytes)",
			       name, (unsigned long long)off,
			       (unsigned long long)len, parent->name,
			       (unsigned long long)parent->size);
	b = calloc(1, sizeof(*b));
	if (!b)
		return pt_fail(err, -ENOMEM, "out of memory");
	b->parent = parent;
	b->off = off;
	b->s.ops = &sub_ops;
	b->s.size = len;
	b->s.name = name;
	b->s.costly_reads = parent->costly_reads;
	b->s.mtime = parent->mtime;
	b->s.priv = b;
	*out = &b->s;
	return 0;
}
