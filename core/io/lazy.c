/* SPDX-License-Identifier: MIT */
/*
 * lazy.c -- a sibling source opened on first use (lazy.h).
 */
#include "io/lazy.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct lazy_source {
	struct pt_source s;
	const struct pt_source *parent;
	char *rel;
	char *name;                     /* s.name: "REL (beside PARENT)" */
	pthread_mutex_t lock;
	bool tried;                     /* the open was attempted */
	struct pt_source *real;         /* after a successful open */
	struct pt_error fail;           /* after a failed one */
};

/* The real source, opened on the first call: 0 or the open's failure. */
static int lazy_real(const struct pt_source *s, struct pt_source **real,
		     struct pt_error *err)
{
	struct lazy_source *l = s->priv;
	struct pt_error e;
	int rc = 0;

	pthread_mutex_lock(&l->lock);
	if (!l->tried) {
		l->tried = true;
		pt_error_clear(&e);
		rc = pt_source_open_sibling(l->parent, l->rel, &l->real, &e);
		if (rc == 0 && l->real->size < s->size) {
			rc = pt_fail(&e, -EIO,
				     "%s has %" PRIu64 " bytes, %" PRIu64 " were expected",
				     l->rel, l->real->size, s->size);
			pt_source_close(l->real);
			l->real = NULL;
		}
		if (rc)
			l->fail = e;
	}
	*real = l->real;
	if (!l->real)
		rc = pt_fail(err, l->fail.code ? l->fail.code : -EIO, "%s",
			     l->fail.msg);
	pthread_mutex_unlock(&l->lock);
	return rc;
}

static int lazy_read(const struct pt_source *s, void *buf, size_t n,
		     uint64_t off, struct pt_error *err)
{
	struct pt_source *real;
	int rc = lazy_real(s, &real, err);

	return rc ? rc : pt_source_read(real, buf, n, off, err);
}

/* Never blocks: only a source already open is given a hint. */
static struct pt_source *lazy_open_now(const struct pt_source *s)
{
	struct lazy_source *l = s->priv;
	struct pt_source *real;

	pthread_mutex_lock(&l->lock);
	real = l->real;
	pthread_mutex_unlock(&l->lock);
	return real;
}

static void lazy_region(const struct pt_source *s, uint64_t off, uint64_t n)
{
	struct pt_source *real = lazy_open_now(s);

	if (real)
		pt_source_region(real, off, n);
}

static void lazy_prefetch(const struct pt_source *s, uint64_t off, uint64_t n)
{
	struct pt_source *real = lazy_open_now(s);

	if (real)
		pt_source_prefetch(real, off, n);
}

static bool lazy_extent(const struct pt_source *s, uint64_t off, uint64_t n,
			int *fd, uint64_t *file_off)
{
	struct pt_error e;
	struct pt_source *real;

	pt_error_clear(&e);
	return lazy_real(s, &real, &e) == 0 &&
	       pt_source_extent(real, off, n, fd, file_off);
}

static int lazy_check(const struct pt_source *s, enum pt_check how,
		      struct pt_error *err)
{
	struct lazy_source *l = s->priv;
	struct pt_source *real;

	pthread_mutex_lock(&l->lock);
	real = l->real;
	pthread_mutex_unlock(&l->lock);
	return real ? pt_source_check(real, how, err) : 0;
}

static int lazy_sibling(const struct pt_source *s, const char *rel,
			struct pt_source **out, struct pt_error *err)
{
	const struct lazy_source *l = s->priv;

	return pt_source_open_sibling(l->parent, rel, out, err);
}

static void lazy_close(struct pt_source *s)
{
	struct lazy_source *l = s->priv;

	pt_source_close(l->real);
	pthread_mutex_destroy(&l->lock);
	free(l->rel);
	free(l->name);
	free(l);
}

static const struct pt_source_ops lazy_ops = {
	.read = lazy_read,
	.region = lazy_region,
	.prefetch = lazy_prefetch,
	.extent = lazy_extent,
	.check = lazy_check,
	.open_sibling = lazy_sibling,
	.close = lazy_close,
};

int pt_source_lazy_sibling(const struct pt_source *parent, const char *rel,
			   struct pt_source **out, struct pt_error *err)
{
	struct lazy_source *l = calloc(1, sizeof(*l));

	*out = NULL;
	if (!l || !(l->rel = strdup(rel)) ||
	    asprintf(&l->name, "%s (beside %s)", rel,
		     parent->name ? parent->name : "the model") < 0) {
		if (l)
			free(l->rel);
		free(l);
		return pt_fail(err, -ENOMEM, "out of memory");
	}
	pthread_mutex_init(&l->lock, NULL);
	l->parent = parent;
	l->s.ops = &lazy_ops;
	l->s.name = l->name;
	l->s.priv = l;
	l->s.costly_reads = parent->costly_reads;
	*out = &l->s;
	return 0;
}
