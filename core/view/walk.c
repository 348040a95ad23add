/* SPDX-License-Identifier: MIT */
/*
 * walk.c -- listing tensor files depth first, and the thread pool.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
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

struct frame {
	struct pt_node *dir;
	size_t next;
	size_t plen;
};

int pt_view_tensors(struct pt_ckpt *ck, struct pt_node *top, const char *prefix,
		    struct pt_view_item **out, size_t *nout)
{
	struct frame *st = NULL;
	size_t n = 0, cap = 0, ni = 0, icap = 0;
	struct pt_view_item *items = NULL;
	struct pt_nattr a;
	struct pt_buf path;
	int rc = 0;

	pt_buf_init(&path);
	pt_buf_puts(&path, prefix);
	while (path.len && path.p[path.len - 1] == '/')
		path.p[--path.len] = '\0';
	pt_node_attr(top, &a);
	if (a.type != PT_NT_DIR) {
		if (a.tensor)
			rc = push_item(&items, &ni, &icap, path.p ? path.p : "", top);
		goto out;
	}
	st = malloc(16 * sizeof(*st));
	if (!st) {
		rc = -ENOMEM;
		goto out;
	}
	cap = 16;
	st[n++] = (struct frame){ top, 0, path.len };
	while (n > 0 && rc == 0) {
		struct frame *f = &st[n - 1];
		struct pt_node *c;
		const char *name;

		if (f->next >= pt_tree_count(ck, f->dir)) {
			n--;
			continue;
		}
		c = pt_tree_child(ck, f->dir, f->next++);
		if (!c)
			continue;
		name = pt_node_name(c);
		if (name[0] == '.' && f->dir == pt_tree_root(ck) &&
		    strcmp(name, ".ptfs") == 0)
			continue;
		pt_node_attr(c, &a);
		path.len = f->plen;
		if (path.len)
			pt_buf_putc(&path, '/');
		pt_buf_puts(&path, name);
		if (a.tensor) {
			f->next++;      /* its .json sidecar comes next */
			rc = push_item(&items, &ni, &icap, path.p, c);
		} else if (a.type == PT_NT_DIR) {
			if (n == cap) {
				struct frame *q = realloc(st, cap * 2 * sizeof(*q));
				if (!q) {
					rc = -ENOMEM;
					break;
				}
				st = q;
				cap *= 2;
			}
			st[n++] = (struct frame){ c, 0, path.len };
		}
	}
out:
	free(st);
	pt_buf_free(&path);
	if (rc) {
		pt_view_items_free(items, ni);
		items = NULL;
		ni = 0;
	}
	*out = items;
	*nout = ni;
	return rc;
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
