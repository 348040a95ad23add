/* SPDX-License-Identifier: MIT */
/*
 * committed.c -- the tree after a commit: which nodes made so far show
 * what the commit changed (records it wrote; when it moved records,
 * everything that states offsets or the file's size), remade where they
 * are generated, for the front end to drop from the kernel's caches.
 */
#include "ckpt/tree_i.h"

#include <stdlib.h>
#include <string.h>

/* Which text R_GEN node @n holds (pickle.txt for none). */
static enum gen gen_of(const struct pt_tree *t, const struct pt_node *n)
{
	const struct dent *e;

	if (n->role != R_GEN || !t->meta_tab)
		return GEN_PICKLE;
	e = pt__tab_find(t->meta_tab, n->name, strlen(n->name));
	return e ? e->gen : GEN_PICKLE;
}

/* Make /.ptfs/@n (tree.json, info.txt) again and swap it in: its readers
 * hold glock (pt_node_read).  Outside the tree lock: tree.json walks the
 * tree, which takes it. */
static void regen(struct pt_ckpt *ck, struct pt_node *n)
{
	struct pt_tree *t = ck->tree;
	struct pt_buf b;
	const uint8_t *old;
	size_t i, len;
	char *s;

	pt_buf_init(&b);
	if (pt__gen_text(ck, gen_of(t, n), &b) != 0 || b.oom) {
		pt_buf_free(&b);
		return;                 /* the old text stays */
	}
	s = pt_buf_take(&b, &len);
	pthread_mutex_lock(&t->lock);
	pthread_mutex_lock(&t->glock);
	old = n->u.data;
	for (i = 0; i < t->n_texts && t->texts[i] != (const char *)old; i++)
		;
	if (s && i < t->n_texts) {
		t->texts[i] = s;
		n->u.data = (const uint8_t *)s;
		__atomic_store_n(&n->size, len, __ATOMIC_RELAXED);
		s = (char *)(uintptr_t)old;
	}
	pthread_mutex_unlock(&t->glock);
	pthread_mutex_unlock(&t->lock);
	free(s);
}

/*
 * Does node @x state the old layout in its contents or size?  Its size is
 * set again meanwhile.  A sidecar's text is made for each read, from the
 * offsets the commit has moved already: only its size was kept.
 * pickle.txt states no offset, and a record's bytes are the same wherever
 * it lies.
 */
static bool relaid(struct pt_ckpt *ck, struct pt_node *x)
{
	struct pt_tree *t = ck->tree;

	if (x->role == R_JSON) {
		t->scratch.len = 0;
		pt__tensor_json(ck, node_tensor(x), &t->scratch);
		if (!t->scratch.oom)
			__atomic_store_n(&x->size, t->scratch.len, __ATOMIC_RELAXED);
		/* pushed with the old text: push it again */
		__atomic_store_n(&x->pushed, false, __ATOMIC_RELAXED);
	} else if (x->role == R_VFILE && node_vf(x)->remake) {
		__atomic_store_n(&x->size, node_vf(x)->size, __ATOMIC_RELAXED);
	} else if (gen_of(t, x) == GEN_PICKLE) {
		return false;
	}
	return true;
}

/* What commits after a pt_ckpt_commits() mark changed. */
struct committed {
	bool moved;                     /* records moved */
	size_t n_recs;                  /* records they wrote */
	const struct pt_zip_entry **recs; /* those, sorted; NULL when out of
					   * memory: every record is taken */
};

static int ptr_cmp(const void *a, const void *b)
{
	uintptr_t x = (uintptr_t)*(const void *const *)a;
	uintptr_t y = (uintptr_t)*(const void *const *)b;

	return x < y ? -1 : x > y;
}

/* The records whose bytes commits after @since wrote into @c: those of
 * the storages they stamped (a writable storage lies in one record and
 * overlaps no other).  Stamps only grow: one that a later commit adds
 * meanwhile is left to that commit's call. */
static void written_records(struct pt_ckpt *ck, uint32_t since,
			    struct committed *c)
{
	const struct pt_storage *s;
	size_t n = 0, k = 0, i;

	for (i = 0; i < ck->n_st; i++) {
		s = ck->st_list[i];
		if (s->entry && __atomic_load_n(&s->committed, __ATOMIC_RELAXED) > since)
			n++;
	}
	if (n == 0)
		return;
	c->recs = malloc(n * sizeof(*c->recs));
	for (i = 0; i < ck->n_st; i++) {
		s = ck->st_list[i];
		if (c->recs && k < n && s->entry &&
		    __atomic_load_n(&s->committed, __ATOMIC_RELAXED) > since)
			c->recs[k++] = s->entry;
	}
	if (c->recs)
		qsort(c->recs, k, sizeof(*c->recs), ptr_cmp);
	c->n_recs = c->recs ? k : n;
}

/* Does node @x show what the commits changed (pt__tree_nodes_where()
 * collects those)? */
static bool stale(struct pt_ckpt *ck, struct pt_node *x, void *ctx)
{
	const struct committed *c = ctx;
	const struct pt_zip_entry *e = node_entry(x);

	if (e)
		return c->n_recs && (!c->recs || bsearch(&e, c->recs, c->n_recs,
							 sizeof(*c->recs), ptr_cmp));
	return c->moved && relaid(ck, x);
}

/* The front end's @fn comes last, without a lock: dropping a kernel cache
 * may wait for a request that needs one. */
void pt_tree_committed(struct pt_ckpt *ck, uint32_t since,
		       void (*fn)(void *ctx, struct pt_node *n), void *ctx)
{
	struct committed c = { .moved = false };
	struct pt_node **v;
	size_t i, n = 0;

	if (pt_ckpt_commits(ck) == since)
		return;
	c.moved = pt_ckpt_layout_gen(ck) > since;
	written_records(ck, since, &c);
	if (!c.n_recs && !c.moved)
		return;                 /* safetensors: no records */
	if (c.moved)
		pt__vfiles_remake(ck->tree);
	v = pt__tree_nodes_where(ck, stale, &c, &n);
	for (i = 0; v && i < n; i++)
		if (v[i]->role == R_GEN)
			regen(ck, v[i]);
	for (i = 0; v && fn && i < n; i++)
		fn(ctx, v[i]);
	free(v);
	free(c.recs);
}
