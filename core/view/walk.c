/* SPDX-License-Identifier: MIT */
/*
 * walk.c -- listing tensor files depth first, and the thread pool.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include "view/walk.h"

void pt_view_items_free(struct pt_view_item *v, size_t n)
{
	size_t i;

	for (i = 0; v && i < n; i++) {
		free(v[i].path);
		free(v[i].key);
	}
	free(v);
}

static int push_item(struct pt_view_item **v, size_t *n, size_t *cap,
		     const char *path, struct pt_node *node)
{
	char *p, *k, *c;

	if (*n == *cap) {
		size_t nc = *cap ? *cap * 2 : 64;
		struct pt_view_item *q = realloc(*v, nc * sizeof(*q));
		if (!q)
			return -ENOMEM;
		*v = q;
		*cap = nc;
	}
	p = strdup(path);
	k = strdup(path);
	if (!p || !k) {
		free(p);
		free(k);
		return -ENOMEM;
	}
	for (c = k; *c; c++)
		if (*c == '/')
			*c = '.';
	(*v)[(*n)++] = (struct pt_view_item){ p, k, node };
	return 0;
}

struct collect {
	struct pt_view_item *items;
	size_t n, cap;
};

static int visit(void *ctx, const struct pt_walk *w)
{
	struct collect *c = ctx;
	struct pt_nattr a;

	pt_node_attr(w->node, &a);
	if (!a.tensor)
		return 0;
	return push_item(&c->items, &c->n, &c->cap, w->path, w->node);
}

int pt_view_tensors(struct pt_ckpt *ck, struct pt_node *top, const char *prefix,
		    struct pt_view_item **out, size_t *nout, struct pt_error *err)
{
	struct collect c = { NULL, 0, 0 };
	struct pt_buf path;
	struct pt_nattr a;
	int rc = 0;

	pt_buf_init(&path);
	pt_buf_puts(&path, prefix);
	while (path.len && path.p[path.len - 1] == '/')
		path.p[--path.len] = '\0';
	pt_node_attr(top, &a);
	if (a.type != PT_NT_DIR) {
		if (a.tensor)
			rc = push_item(&c.items, &c.n, &c.cap, path.p ? path.p : "", top);
		if (rc)
			pt_fail(err, rc, "out of memory");
	} else {
		/* the walk leaves out sidecars, pictures and /.ptfs; a folder
		 * that cannot be listed is left out too (its error is not
		 * fatal here: the other tensors still count) */
		struct pt_error werr;

		pt_error_clear(&werr);
		rc = pt_tree_walk(ck, top, path.p ? path.p : "", PT_WALK_WHOLE, visit,
				  &c, &werr);
		if (rc == -E2BIG || rc == -EINTR)
			pt_fail(err, rc, "%s", werr.msg);
		else if (rc == -ENOMEM)
			pt_fail(err, rc, "out of memory");
		else
			rc = 0;
	}
	pt_buf_free(&path);
	if (rc) {
		pt_view_items_free(c.items, c.n);
		c.items = NULL;
		c.n = 0;
	}
	*out = c.items;
	*nout = c.n;
	return rc;
}

/* 0 when items @a and @b show the same bytes in the same layout. */
static int tensor_cmp(const struct pt_view_item *v, size_t a, size_t b)
{
	struct pt_tinfo s, t;
	int c;

	if (!pt_node_tinfo(v[a].node, &s) || !pt_node_tinfo(v[b].node, &t) ||
	    !s.storage || !t.storage)
		return (v[a].node > v[b].node) - (v[a].node < v[b].node);
	if (s.storage != t.storage)
		return ((uintptr_t)s.storage > (uintptr_t)t.storage) -
		       ((uintptr_t)s.storage < (uintptr_t)t.storage);
	if (s.offset != t.offset)
		return s.offset < t.offset ? -1 : 1;
	if (s.rank != t.rank)
		return s.rank < t.rank ? -1 : 1;
	if (s.byteorder != t.byteorder)
		return s.byteorder - t.byteorder;
	if (s.ndarray != t.ndarray)
		return s.ndarray - t.ndarray;
	if ((c = strcmp(s.dtype, t.dtype)) != 0 ||
	    (c = memcmp(s.shape, t.shape, s.rank * sizeof(*s.shape))) != 0)
		return c;
	return memcmp(s.stride, t.stride, s.rank * sizeof(*s.stride));
}

/* Same tensors next to each other, in item order among themselves. */
static int same_cmp(const void *x, const void *y, void *ctx)
{
	size_t a = *(const size_t *)x, b = *(const size_t *)y;
	int c = tensor_cmp(ctx, a, b);

	return c ? c : (a > b) - (a < b);
}

size_t *pt_view_same(const struct pt_view_item *v, size_t n)
{
	size_t *idx = malloc((n ? n : 1) * sizeof(*idx));
	size_t *rep = malloc((n ? n : 1) * sizeof(*rep));
	size_t i, first = 0;

	if (!idx || !rep) {
		free(idx);
		free(rep);
		return NULL;
	}
	for (i = 0; i < n; i++)
		idx[i] = i;
	qsort_r(idx, n, sizeof(*idx), same_cmp, (void *)(uintptr_t)v);
	for (i = 0; i < n; i++) {
		if (i == 0 || tensor_cmp(v, idx[first], idx[i]) != 0)
			first = i;      /* the smallest index of its run */
		rep[idx[i]] = idx[first];
	}
	free(idx);
	return rep;
}

struct pool {
	size_t n, next;
	void (*fn)(void *ctx, size_t i);
	void *ctx;
};

static void *worker(void *arg)
{
	struct pool *p = arg;
	size_t i;

	while ((i = __atomic_fetch_add(&p->next, 1, __ATOMIC_RELAXED)) < p->n)
		p->fn(p->ctx, i);
	return NULL;
}

void pt_view_parallel(size_t n, unsigned jobs, void (*fn)(void *ctx, size_t i),
		      void *ctx)
{
	struct pool p = { n, 0, fn, ctx };
	pthread_t *tid;
	unsigned k, started = 0;

	if (jobs > n)
		jobs = (unsigned)n;
	if (jobs < 1)
		jobs = 1;
	tid = jobs > 1 ? calloc(jobs - 1, sizeof(*tid)) : NULL;
	for (k = 0; tid && k + 1 < jobs; k++)
		if (pthread_create(&tid[k], NULL, worker, &p) == 0)
			started++;
		else
			break;
	worker(&p);
	for (k = 0; k < started; k++)
		pthread_join(tid[k], NULL);
	free(tid);
}
