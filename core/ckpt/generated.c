/* SPDX-License-Identifier: MIT */
/*
 * generated.c -- generated directories under /.ptfs (pt_tree_set_vdir():
 * /.ptfs/export, /.ptfs/stats): a front end's filler adds generated files
 * (struct pt_vfile) to one the first time it is used, outside the tree
 * lock and one filler at a time; a fill that failed for good is kept with
 * its error.  After a commit that moved records, the files with a remake
 * op make their contents again.
 */
#include "ckpt/tree_i.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cancel.h"

struct pt_vdir {
	struct pt_tree *t;
	struct dtab *top;
};

int pt_tree_set_vdir(struct pt_ckpt *ck, const char *name, pt_vdir_fill fill,
		     void *ctx)
{
	struct pt_tree *t = ck->tree;

	pthread_mutex_lock(&t->lock);
	if (t->n_vdirs == PT_VDIRS || t->meta_tab) {
		pthread_mutex_unlock(&t->lock);
		return -EBUSY;
	}
	/* added to /.ptfs when it is built */
	t->vname[t->n_vdirs] = name;
	t->vfill[t->n_vdirs] = fill;
	t->vfill_ctx[t->n_vdirs] = ctx;
	t->n_vdirs++;
	pthread_mutex_unlock(&t->lock);
	return 0;
}

static int vdir_add(struct pt_vdir *b, const char *rel,
		    const struct pt_vfile *vf);

/* Tables and the vfile list are shared with lookups in other threads:
 * changed under the tree lock. */
int pt_vdir_add(struct pt_vdir *b, const char *rel, const struct pt_vfile *vf)
{
	int rc;

	pthread_mutex_lock(&b->t->lock);
	rc = vdir_add(b, rel, vf);
	pthread_mutex_unlock(&b->t->lock);
	return rc;
}

static int vdir_add(struct pt_vdir *b, const char *rel,
		    const struct pt_vfile *vf)
{
	struct dtab *d = b->top;
	struct pt_vfile *copy;
	struct dent *e;
	const char *p = rel, *slash;

	while ((slash = strchr(p, '/')) != NULL) {
		size_t len = (size_t)(slash - p);

		e = pt__tab_find(d, p, len);
		if (e && e->role != R_RECDIR)
			return -EEXIST;
		if (!e) {
			struct dtab *sub = pt__tab_new(b->t);

			e = sub ? pt__tab_add(d, p, len, R_RECDIR, NULL) : NULL;
			if (!e)
				return -ENOMEM;
			e->sub = sub;
		}
		d = e->sub;
		p = slash + 1;
	}
	if (pt__tab_has(d, p, strlen(p)))
		return -EEXIST;
	copy = malloc(sizeof(*copy));
	if (!copy || !pt_grow((void **)&b->t->vfiles, &b->t->cap_vfiles,
				    b->t->n_vfiles, sizeof(*b->t->vfiles))) {
		free(copy);
		return -ENOMEM;
	}
	*copy = *vf;
	b->t->vfiles[b->t->n_vfiles++] = copy;
	e = pt__tab_add(d, p, strlen(p), R_VFILE, NULL);
	if (!e)
		return -ENOMEM;
	e->vf = copy;
	return 0;
}

/* A fill that failed for good (-EFBIG: the walk's budget is spent) is
 * kept as an empty table with its error, so every later use fails at once
 * instead of walking again; -EINTR and -ENOMEM may pass and are tried
 * again.  Its line waits in vmsg for pt_tree_take_error(). */
static struct dtab *vdir_failed(struct pt_tree *t, struct pt_node *dir,
				struct dtab *d, size_t k, int rc,
				const struct pt_error *err)
{
	snprintf(t->vmsg[k], sizeof(t->vmsg[k]), "%s", err->msg[0] ? err->msg : strerror(-rc));
	t->vmsg_new[k] = true;
	if (rc == -EINTR || rc == -ENOMEM)
		return NULL;    /* freed with the tree; tried again */
	pthread_mutex_lock(&t->lock);
	pt__tab_clear(d);
	d->err = rc;
	pthread_mutex_unlock(&t->lock);
	__atomic_store_n(&dir->u.dir.tab, d, __ATOMIC_RELEASE);
	return d;
}

/* The generated directory's table: filled once, outside the tree lock
 * (the filler walks the tree), one filler at a time. */
struct dtab *pt__vdir_tab(struct pt_ckpt *ck, struct pt_node *dir, int *rc)
{
	struct pt_tree *t = ck->tree;
	struct pt_vdir b;
	struct pt_error err;
	struct dtab *d;
	size_t k = 0;

	while (k + 1 < t->n_vdirs && strcmp(t->vname[k], dir->name) != 0)
		k++;
	*rc = pt_lock_or_cancel(&t->vlock);
	if (*rc)
		return NULL;
	d = __atomic_load_n(&dir->u.dir.tab, __ATOMIC_ACQUIRE);
	if (!d) {
		pthread_mutex_lock(&t->lock);
		d = pt__tab_new(t);
		pthread_mutex_unlock(&t->lock);
		b.t = t;
		b.top = d;
		pt_error_clear(&err);
		*rc = d ? t->vfill[k](t->vfill_ctx[k], ck, &b, &err) : -ENOMEM;
		if (*rc == 0)
			__atomic_store_n(&dir->u.dir.tab, d, __ATOMIC_RELEASE);
		else if (d)
			d = vdir_failed(t, dir, d, k, *rc, &err);
	}
	pthread_mutex_unlock(&t->vlock);
	if (d && d->err) {
		*rc = d->err;
		return NULL;
	}
	return d;
}

bool pt_tree_take_error(struct pt_ckpt *ck, const struct pt_node *dir,
			char *buf, size_t n)
{
	struct pt_tree *t = ck->tree;
	size_t k;
	bool got = false;

	if (dir->role != R_VDIR)
		return false;
	pthread_mutex_lock(&t->vlock);
	for (k = 0; k < t->n_vdirs; k++)
		if (strcmp(t->vname[k], dir->name) == 0 && t->vmsg_new[k]) {
			t->vmsg_new[k] = false;
			snprintf(buf, n, "%s", t->vmsg[k]);
			got = true;
		}
	pthread_mutex_unlock(&t->vlock);
	return got;
}

/* Generated files with a remake op make their contents again; under
 * vlock, so that a fill begun before the commit has added its files. */
void pt__vfiles_remake(struct pt_tree *t)
{
	struct pt_vfile **vfs;
	uint64_t *sizes;
	size_t i, n;

	pthread_mutex_lock(&t->vlock);
	pthread_mutex_lock(&t->lock);
	n = t->n_vfiles;
	vfs = malloc((n ? n : 1) * sizeof(*vfs));
	if (vfs && n)
		memcpy(vfs, t->vfiles, n * sizeof(*vfs));
	pthread_mutex_unlock(&t->lock);
	sizes = malloc((n ? n : 1) * sizeof(*sizes));
	/* outside the tree lock: they read tensors, not the tree */
	for (i = 0; vfs && sizes && i < n; i++)
		sizes[i] = vfs[i]->remake ? vfs[i]->remake(vfs[i]->ctx) : vfs[i]->size;
	pthread_mutex_lock(&t->lock);
	for (i = 0; vfs && sizes && i < n; i++)
		vfs[i]->size = sizes[i];        /* for nodes made later */
	pthread_mutex_unlock(&t->lock);
	pthread_mutex_unlock(&t->vlock);
	free(sizes);
	free(vfs);
}
