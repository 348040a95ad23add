/* SPDX-License-Identifier: MIT */
/*
 * tree.c -- the mounted tree of LAYOUT.md, built lazily: its nodes.
 *
 * Nodes are created per (parent, entry) on first use, from the entry
 * tables of entries.c, so a pickle whose references multiply costs only
 * what is visited, and a container that holds itself becomes a symlink
 * where it would repeat.  Here too: lookups by name, index and path,
 * pt_tree_walk() (the one walk every consumer of the tree goes through,
 * with its one budget), tree.json and the other generated texts of
 * /.ptfs (made as their nodes are), and the tree's life (made at open,
 * freed at close).
 *
 * Locking: one mutex guards creation of tables and nodes.  Published
 * pointers (a value's table, a directory's child slots) are written with
 * release stores and read with acquire loads, so lookups of nodes that
 * already exist, and all reads of file contents, take no lock.
 */
#include "ckpt/tree_i.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/cancel.h"
#include "ckpt/names.h"

/* A zeroed node, or NULL when out of memory (call under the lock). */
static struct pt_node *node_alloc(struct pt_tree *t)
{
	struct node_blk *b = t->blks;

	if (!b || b->used == NODE_BLOCK) {
		b = calloc(1, sizeof(*b));
		if (!b)
			return NULL;
		b->next = t->blks;
		t->blks = b;
	}
	return &b->n[b->used++];
}

static char *keep_text(struct pt_tree *t, char *s)
{
	if (!s)
		return NULL;
	if (!pt_grow((void **)&t->texts, &t->cap_texts, t->n_texts, sizeof(char *))) {
		free(s);
		return NULL;
	}
	t->texts[t->n_texts++] = s;
	return s;
}

/* ---- node contents ---- */

static const char *scalar_text(struct pt_ckpt *ck, const struct pt_value *v,
			       size_t *len)
{
	struct pt_buf b;
	char *s;

	pt_buf_init(&b);
	switch (v->kind) {
	case PT_V_NONE:
		pt_buf_puts(&b, "None");
		break;
	case PT_V_BOOL:
		pt_buf_puts(&b, v->u.b ? "True" : "False");
		break;
	case PT_V_INT:
		pt_buf_printf(&b, "%lld", (long long)v->u.i);
		break;
	case PT_V_BIGINT:
		pt_bigint_decimal(&b, v->u.s.p, v->u.s.len);
		break;
	case PT_V_FLOAT:
		pt_repr_float(&b, v->u.f);
		break;
	case PT_V_STR:
		pt_buf_add(&b, v->u.s.p, v->u.s.len);
		break;
	default:
		break;
	}
	pt_buf_putc(&b, '\n');
	if (b.oom) {
		pt_buf_free(&b);
		return NULL;
	}
	s = keep_text(ck->tree, pt_buf_take(&b, len));
	return s;
}

/* 0, or -EINTR when pt_cancelled() ended it (tree.json, pickle.txt). */
int pt__gen_text(struct pt_ckpt *ck, enum gen g, struct pt_buf *b)
{
	int i, rc;

	switch (g) {
	case GEN_INFO:
		pt_ckpt_info(ck, b);
		break;
	case GEN_TREE:
		/* ~400 bytes a tensor: one allocation, not 15 copies */
		pt_buf_expect(b, 448 * (size_t)ck->n_tensors + 4096);
		return pt_tree_json(ck, b, 1000000, NULL);
	case GEN_PICKLE:
		for (i = 0; i < ck->n_pickles; i++) {
			const uint8_t *p;
			uint8_t *own;
			struct pt_error err;

			if (ck->n_pickles > 1)
				pt_buf_printf(b, "# %s\n", ck->pickles[i].label);
			if (pt__pickle_input(ck, i, &p, &own, &err)) {
				pt_buf_printf(b, "# cannot read it again: %s\n",
					      err.msg);
				continue;
			}
			rc = pt_pickle_disasm(p, ck->pickles[i].len, b, 256u << 20);
			free(own);
			if (rc)
				return rc;
		}
		break;
	}
	return 0;
}

/* A NAME.png node holds its picture, made with the node and freed with the
 * tree; pictures.c draws it. */
static bool pic_node_init(struct pt_ckpt *ck, struct pt_node *n)
{
	struct pt_pic *g = calloc(1, sizeof(*g));

	if (!g)
		return false;
	pthread_mutex_init(&g->mu, NULL);
	g->ck = ck;
	g->parent = n->parent;
	n->uk = U_PIC;
	n->u.pic = g;
	n->type = PT_NT_FILE;
	return true;
}

static void pic_free(struct pt_pic *g)
{
	if (!g)
		return;
	pthread_mutex_destroy(&g->mu);
	free(g->data);
	free(g);
}

/* The rest of node_new() for a pickle value (R_VALUE): a file, a
 * directory, or a link where a container repeats an ancestor. */
static struct pt_node *value_node(struct pt_ckpt *ck, struct pt_node *parent,
				  struct pt_node *n)
{
	struct pt_tree *t = ck->tree;
	size_t len = 0;

	switch (pt__vclass(n->val)) {
	case PT_C_TENSOR:
		n->type = PT_NT_FILE;
		n->uk = U_TENSOR;
		n->u.tensor = n->val->aux;
		n->size = n->u.tensor->nbytes;
		return n;
	case PT_C_BYTES: {
		const struct pt_bytes *b = n->val->aux;
		n->type = PT_NT_FILE;
		n->uk = U_DATA;
		n->u.data = b->p;
		n->size = b->len;
		return n;
	}
	case PT_C_TEXT:
		n->type = PT_NT_FILE;
		n->uk = U_DATA;
		n->u.data = n->val->aux;
		n->size = strlen(n->val->aux);
		return n;
	case PT_C_MAP:
	case PT_C_SEQ:
	case PT_C_OBJECT: {
		const struct pt_node *a;
		uint32_t up = 0;

		for (a = parent; a; a = a->parent, up++) {
			if (a->val == n->val && a->role == R_VALUE) {
				/* a cycle: link to where it first appears */
				struct pt_buf b;
				uint32_t i;

				pt_buf_init(&b);
				if (up == 0)
					pt_buf_putc(&b, '.');
				for (i = 0; i < up; i++)
					pt_buf_puts(&b, i ? "/.." : "..");
				n->type = PT_NT_LINK;
				n->uk = U_DATA;
				n->u.data = (const uint8_t *)keep_text(t, pt_buf_take(&b, &len));
				n->size = len;
				return n->u.data ? n : NULL;
			}
		}
		n->type = PT_NT_DIR;
		return n;
	}
	default:
		n->type = PT_NT_FILE;
		n->uk = U_DATA;
		n->u.data = (const uint8_t *)scalar_text(ck, n->val, &len);
		n->size = len;
		return n->u.data ? n : NULL;
	}
}

static struct pt_node *node_new(struct pt_ckpt *ck, struct pt_node *parent,
				const struct dent *e, char *gen, size_t gen_len)
{
	struct pt_tree *t = ck->tree;
	struct pt_node *n = node_alloc(t);

	if (!n)
		return NULL;
	n->parent = parent;
	n->name = e->name;
	n->id = ++t->next_id;
	n->depth = parent ? parent->depth + 1 : 0;
	n->role = e->role;
	n->val = e->val;
	n->key = e->role == R_VALUE ? e->key : NULL;
	switch (e->role) {
	case R_VALUE:
		break;
	case R_JSON:
		/* only its size: the text is made again for each read
		 * (~1 us), so listing 20,000 sidecars keeps no 6 MB of
		 * JSON in memory */
		t->scratch.len = 0;
		pt__tensor_json(ck, e->val->aux, &t->scratch);
		if (t->scratch.oom)
			return NULL;
		n->type = PT_NT_FILE;
		n->uk = U_TENSOR;
		n->u.tensor = e->val->aux;
		n->size = t->scratch.len;
		return n;
	case R_META:
		/* its table is built on first use (node_tab) */
		n->type = PT_NT_DIR;
		return n;
	case R_RECDIR:
		n->type = PT_NT_DIR;
		n->u.dir.tab = e->sub;
		return n;
	case R_RECORD:
		n->type = PT_NT_FILE;
		n->uk = U_ENTRY;
		n->u.entry = e->entry;
		n->size = n->u.entry->usize;
		return n;
	case R_BLOB:
		n->type = PT_NT_FILE;
		n->uk = U_DATA;
		n->u.data = e->blob->data;
		n->size = e->blob->len;
		return n;
	case R_VDIR:
		n->type = PT_NT_DIR;            /* table made by pt__vdir_tab() */
		return n;
	case R_VFILE:
		n->type = PT_NT_FILE;
		n->uk = U_VF;
		n->u.vf = e->vf;
		n->size = e->vf->size;
		return n;
	case R_PNG:
		return pic_node_init(ck, n) ? n : NULL;
	case R_GEN:
		/* generated by the caller, outside the lock (tree.json walks
		 * the tree, which takes the lock itself) */
		n->type = PT_NT_FILE;
		n->uk = U_DATA;
		n->u.data = (const uint8_t *)keep_text(t, gen);
		n->size = gen_len;
		return n->u.data ? n : NULL;
	}
	return value_node(ck, parent, n);
}

/* ---- lookups ---- */

static struct dtab *root_table(struct pt_ckpt *ck, int *rc);

/* The table of directory @dir, made on first use: the root's here,
 * /.ptfs's and its records' by dotptfs.c, a generated directory's by
 * generated.c, a value's by entries.c. */
static struct dtab *node_tab(struct pt_ckpt *ck, struct pt_node *dir, int *rc)
{
	struct pt_tree *t = ck->tree;
	struct dtab *d = __atomic_load_n(&dir->u.dir.tab, __ATOMIC_ACQUIRE);

	if (d && d->err) {
		*rc = d->err;   /* a generated directory that failed for good */
		return NULL;
	}
	if (d)
		return d;
	if (dir->role == R_VDIR)
		return pt__vdir_tab(ck, dir, rc);
	if (dir == t->root || dir->role == R_META || dir->role == R_RECDIR) {
		pthread_mutex_lock(&t->lock);
		d = dir->u.dir.tab;
		if (!d && dir->role == R_RECDIR) {
			/* /.ptfs/records, left for its first use */
			*rc = pt__records_table(ck, &d);
			if (*rc)
				d = NULL;
		} else if (!d) {
			d = dir == t->root ? root_table(ck, rc) : pt__meta_table(ck, rc);
			if (d)
				__atomic_store_n(&dir->u.dir.tab, d, __ATOMIC_RELEASE);
		}
		pthread_mutex_unlock(&t->lock);
		return d;
	}
	d = pt__value_tab(ck, dir->val, rc);
	if (d) {
		/* kept only while it is the value's table: an edit may have
		 * retired it meanwhile (pt__tree_touched()) */
		pthread_mutex_lock(&t->lock);
		if (!dir->u.dir.tab && dir->val->aux == d) {
			if (pt_grow((void **)&d->users, &d->cap_users, d->n_users,
				    sizeof(*d->users)))
				d->users[d->n_users++] = dir;
			else
				d->users_lost = true;
			__atomic_store_n(&dir->u.dir.tab, d, __ATOMIC_RELEASE);
		}
		pthread_mutex_unlock(&t->lock);
	}
	return d;
}

/* The node entry @e of @dir had before the last edit that changed @dir's
 * listing, when @e is the same entry (same name, role, value and key), or
 * the node whose value an edit moved to @e; NULL otherwise.  Under the
 * tree lock. */
static struct pt_node *reused(struct pt_tree *t, struct pt_node *dir,
			      const struct dent *e)
{
	size_t k;

	if (e->role != R_VALUE && e->role != R_JSON && e->role != R_META)
		return NULL;
	if (e->role == R_VALUE) {
		for (k = 0; k < t->n_moved; k++) {
			struct pt_node *n = t->moved[k].n;

			if (n->val != e->val || t->moved[k].to != dir->val)
				continue;
			t->moved[k] = t->moved[--t->n_moved];
			n->parent = dir;
			n->name = e->name;
			n->key = e->key;
			n->depth = dir->depth + 1;
			return n;
		}
	}
	for (k = t->n_retired; k-- > 0;) {
		const struct retired *r = &t->retired[k];
		const struct dent *o;
		struct pt_node *n;

		if (r->dir != dir)
			continue;
		o = pt__tab_find(r->tab, e->name, strlen(e->name));
		n = o ? r->kids[o->idx] : NULL;
		if (!n)
			continue;       /* not made then: an older listing may have */
		if (n->role == e->role && n->val == e->val &&
		    (e->role != R_VALUE || n->key == e->key))
			return n;
		return NULL;
	}
	return NULL;
}

/* The child node for entry @i of @dir's table @d. */
static struct pt_node *child_at(struct pt_ckpt *ck, struct pt_node *dir,
				struct dtab *d, size_t i, int *rc)
{
	struct pt_tree *t = ck->tree;
	struct pt_node **kids = __atomic_load_n(&dir->u.dir.kids, __ATOMIC_ACQUIRE);
	struct pt_node *n;
	char *gen = NULL;
	size_t gen_len = 0;
	uint64_t layout = 0;

	if (kids) {
		n = __atomic_load_n(&kids[i], __ATOMIC_ACQUIRE);
		if (n)
			return n;
	}
	/* Nesting deeper than max_depth (a hostile chain of lists) is cut
	 * here: it bounds the ancestor walk of node_new()'s cycle check,
	 * and every walk of the tree, to max_depth steps per node. */
	if (dir->depth >= ck->opts.limits.max_depth) {
		*rc = -EFBIG;
		return NULL;
	}
again:
	if (d->ents[i]->role == R_GEN) {
		struct pt_buf b;

		layout = pt_ckpt_layout_gen(ck);
		pt_buf_init(&b);
		*rc = pt__gen_text(ck, d->ents[i]->gen, &b);
		if (*rc || b.oom) {
			pt_buf_free(&b);
			if (!*rc)
				*rc = -ENOMEM;
			return NULL;
		}
		gen = pt_buf_take(&b, &gen_len);
	}
	pthread_mutex_lock(&t->lock);
	if (gen && pt_ckpt_layout_gen(ck) != layout) {
		/* a commit moved records meanwhile, and pt_tree_committed()
		 * may have looked for this node already: make it again */
		pthread_mutex_unlock(&t->lock);
		free(gen);
		gen = NULL;
		goto again;
	}
	if (dir->role == R_VALUE && dir->u.dir.tab != d) {
		/* an edit retired @d after the caller found entry @i in it:
		 * a node of that listing, not kept among the new one's */
		n = node_new(ck, dir, d->ents[i], gen, gen_len);
		gen = NULL;
		if (!n)
			*rc = -ENOMEM;
		goto out;
	}
	if (!dir->u.dir.kids) {
		kids = calloc(d->n ? d->n : 1, sizeof(*kids));
		if (!kids) {
			*rc = -ENOMEM;
			n = NULL;
			goto out;
		}
		__atomic_store_n(&dir->u.dir.kids, kids, __ATOMIC_RELEASE);
	}
	kids = dir->u.dir.kids;
	n = kids[i];
	if (!n) {
		n = t->n_retired ? reused(t, dir, d->ents[i]) : NULL;
		if (!n)
			n = node_new(ck, dir, d->ents[i], gen, gen_len);
		gen = NULL;
		if (!n)
			*rc = -ENOMEM;
		else
			__atomic_store_n(&kids[i], n, __ATOMIC_RELEASE);
	}
out:
	pthread_mutex_unlock(&t->lock);
	free(gen);
	return n;
}

/* The table of directory @dir, made on first use; NULL with *@rc set
 * (-ENOTDIR, -EFBIG, -ENOMEM) when there is none.  The one prologue of
 * lookup, count and child. */
static struct dtab *dir_tab(struct pt_ckpt *ck, struct pt_node *dir, int *rc)
{
	struct dtab *d;

	*rc = 0;
	if (dir->type != PT_NT_DIR) {
		*rc = -ENOTDIR;
		return NULL;
	}
	d = node_tab(ck, dir, rc);
	if (!d && !*rc)
		*rc = -ENOMEM;
	return d;
}

struct pt_node *pt_tree_lookup(struct pt_ckpt *ck, struct pt_node *dir,
			       const char *name, int *rc)
{
	struct dtab *d;
	struct dent *e;
	int dummy;

	if (!rc)
		rc = &dummy;
	d = dir_tab(ck, dir, rc);
	if (!d)
		return NULL;
	e = pt__tab_find(d, name, strlen(name));
	if (!e) {
		*rc = -ENOENT;
		return NULL;
	}
	return child_at(ck, dir, d, e->idx, rc);
}

int pt_tree_count(struct pt_ckpt *ck, struct pt_node *dir, size_t *n)
{
	int rc;
	struct dtab *d = dir_tab(ck, dir, &rc);

	*n = d ? d->n : 0;
	return rc;
}

int pt_tree_entries(struct pt_ckpt *ck, struct pt_node *dir, size_t *n)
{
	int rc;
	struct dtab *d = dir_tab(ck, dir, &rc);

	*n = d ? d->n - __atomic_load_n(&d->n_hidden, __ATOMIC_ACQUIRE) : 0;
	return rc;
}

struct pt_node *pt_tree_child(struct pt_ckpt *ck, struct pt_node *dir,
			      size_t i, int *rc)
{
	struct dtab *d;
	int dummy;

	if (!rc)
		rc = &dummy;
	d = dir_tab(ck, dir, rc);
	if (!d)
		return NULL;
	if (i >= d->n || __atomic_load_n(&d->ents[i]->hidden, __ATOMIC_ACQUIRE)) {
		*rc = -ENOENT;
		return NULL;
	}
	return child_at(ck, dir, d, i, rc);
}

struct pt_node *pt_tree_root(struct pt_ckpt *ck)
{
	return ck->tree->root;
}

struct pt_node *pt_tree_path(struct pt_ckpt *ck, const char *path, int *rc)
{
	struct pt_node *n = ck->tree->root;
	char comp[4096];
	int dummy = 0;

	if (!rc)
		rc = &dummy;
	*rc = 0;
	while (*path) {
		const char *e;
		size_t len;

		while (*path == '/')
			path++;
		if (!*path)
			break;
		e = strchr(path, '/');
		len = e ? (size_t)(e - path) : strlen(path);
		if (len >= sizeof(comp)) {
			*rc = -ENAMETOOLONG;
			return NULL;
		}
		memcpy(comp, path, len);
		comp[len] = '\0';
		n = pt_tree_lookup(ck, n, comp, rc);
		if (!n)
			return NULL;
		path += len;
	}
	return n;
}

/* ---- walks ---- */

/* The tables a PT_WALK_ONCE walk entered: a set of pointers (open
 * addressing, at most half full). */
struct seen {
	const void **p;
	size_t cap, n;
};

/* Add @x: 1 if new, 0 if there already, -ENOMEM. */
static int seen_add(struct seen *s, const void *x)
{
	size_t i, mask;

	if (2 * (s->n + 1) > s->cap) {
		struct seen g = { NULL, s->cap ? 2 * s->cap : 64, 0 };

		g.p = calloc(g.cap, sizeof(*g.p));
		if (!g.p)
			return -ENOMEM;
		for (i = 0; i < s->cap; i++)
			if (s->p[i])
				(void)seen_add(&g, s->p[i]);
		free(s->p);
		*s = g;
	}
	mask = s->cap - 1;
	for (i = ((uintptr_t)x >> 4) * 0x9e3779b97f4a7c15ull & mask; s->p[i];
	     i = (i + 1) & mask)
		if (s->p[i] == x)
			return 0;
	s->p[i] = x;
	s->n++;
	return 1;
}

/* The budget every walk draws on (pt_limits: max_walk_entries,
 * max_walk_bytes), and the caller's interruption: checked per entry. */
static int walk_charge(struct pt_ckpt *ck, uint64_t *entries, uint64_t *bytes,
		       size_t path_len, struct pt_error *err)
{
	const struct pt_limits *l = &ck->opts.limits;

	*bytes += path_len + 1;
	if (++*entries > l->max_walk_entries)
		return pt_fail_over(err, -E2BIG, "over %llu entries in one walk of the tree (references that multiply? -o max_walk_entries)",
			       (unsigned long long)l->max_walk_entries);
	if (*bytes > l->max_walk_bytes)
		return pt_fail_over(err, -E2BIG, "over %llu bytes of paths in one walk of the tree (-o max_walk_bytes)",
			       (unsigned long long)l->max_walk_bytes);
	if ((*entries & 255) == 0 && pt_cancelled())
		return pt_fail_over(err, -EINTR, "interrupted");
	return 0;
}

/* Whether a walk enters directory @c: not when PT_WALK_ONCE and its table
 * was entered before (0), 1 yes, or a negative errno. */
static int walk_enters(struct pt_ckpt *ck, struct pt_node *c, unsigned flags,
		       struct seen *seen)
{
	struct dtab *d;
	int rc = 0;

	if (!(flags & PT_WALK_ONCE))
		return 1;
	d = node_tab(ck, c, &rc);
	if (!d)
		return 1;       /* the walk meets the error itself */
	return seen_add(seen, d);
}

/* A directory of the walk that cannot be listed: noted, the walk goes on. */
static void walk_unlisted(int *first_err, int crc, const char *path,
			  struct pt_error *err)
{
	if (*first_err)
		return;
	*first_err = crc ? crc : -ENOMEM;
	pt_fail(err, *first_err, "/%s: cannot be listed: %s", path,
		strerror(-*first_err));
}

int pt_tree_walk(struct pt_ckpt *ck, struct pt_node *top, const char *top_path,
		 unsigned flags, pt_walk_fn fn, void *ctx, struct pt_error *err)
{
	struct frame {
		struct pt_node *dir;
		struct dtab *tab;
		size_t next;
		size_t path_len;
	} *st = NULL;
	size_t n = 0, cap = 0;
	struct seen seen = { NULL, 0, 0 };
	struct pt_buf path;
	uint64_t entries = 0, bytes = 0;
	int first_err = 0, rc = 0;

	if (top->type != PT_NT_DIR)
		return -ENOTDIR;
	pt_buf_init(&path);
	pt_buf_puts(&path, top_path ? top_path : "");
	if (!pt_grow((void **)&st, &cap, n, sizeof(*st)) ||
	    walk_enters(ck, top, flags, &seen) < 0) {
		rc = -ENOMEM;
		goto out;
	}
	st[n++] = (struct frame){ top, NULL, 0, path.len };
	while (n > 0 && rc == 0) {
		struct frame *f = &st[n - 1];
		struct pt_walk w;
		struct pt_node *c;
		int crc = 0, r;

		if (!f->tab) {
			f->tab = node_tab(ck, f->dir, &crc);
			if (!f->tab) {
				path.len = f->path_len;
				pt_buf_putc(&path, '\0');
				walk_unlisted(&first_err, crc, path.p ? path.p : "", err);
				n--;
				continue;
			}
		}
		if (f->next == 0 && (flags & PT_WALK_WHOLE) &&
		    f->tab->n > ck->opts.limits.max_walk_entries - entries) {
			/* this directory alone passes what is left: say so
			 * now, not after making a million nodes */
			entries = ck->opts.limits.max_walk_entries;
			rc = walk_charge(ck, &entries, &bytes, 0, err);
			break;
		}
		if (f->next >= f->tab->n) {
			n--;
			continue;
		}
		/* sidecars (NAME.json, NAME.png) and /.ptfs are skipped
		 * before their nodes are made (a sidecar's JSON costs more
		 * than the entry, a picture much more), and what edits
		 * removed always */
		if (__atomic_load_n(&f->tab->ents[f->next]->hidden, __ATOMIC_ACQUIRE)) {
			f->next++;
			continue;
		}
		if (!(flags & PT_WALK_ALL) &&
		    (f->tab->ents[f->next]->role == R_JSON ||
		     f->tab->ents[f->next]->role == R_META ||
		     f->tab->ents[f->next]->role == R_PNG)) {
			f->next++;
			continue;
		}
		path.len = f->path_len;
		if (path.len)
			pt_buf_putc(&path, '/');
		pt_buf_puts(&path, f->tab->ents[f->next]->name);
		rc = path.oom ? -ENOMEM : walk_charge(ck, &entries, &bytes, path.len,
						      (flags & PT_WALK_CUT) ? NULL : err);
		if (rc == -E2BIG && (flags & PT_WALK_CUT))
			rc = PT_WALK_STOP;      /* cut, as the caller asked */
		if (rc)
			break;
		c = child_at(ck, f->dir, f->tab, f->next++, &crc);
		if (!c) {
			walk_unlisted(&first_err, crc, path.p, err);
			continue;
		}
		w.node = c;
		w.path = path.p;
		w.path_len = path.len;
		w.depth = (uint32_t)n;
		r = fn(ctx, &w);
		if (r < 0 || r == PT_WALK_STOP) {
			rc = r < 0 ? r : 0;
			break;
		}
		if (c->type != PT_NT_DIR || r == PT_WALK_SKIP)
			continue;
		r = walk_enters(ck, c, flags, &seen);
		if (r == 0)
			continue;
		if (r < 0 || !pt_grow((void **)&st, &cap, n, sizeof(*st))) {
			rc = -ENOMEM;
			break;
		}
		st[n++] = (struct frame){ c, NULL, 0, path.len };
	}
out:
	free(st);
	free(seen.p);
	pt_buf_free(&path);
	if (rc == -ENOMEM)
		pt_fail(err, rc, "out of memory");
	return rc == PT_WALK_STOP ? rc : rc ? rc : first_err;
}

/* ---- tree.json ---- */

/* A dict key that is not a str, or a str key the entry's name no longer
 * spells (cut, or renamed NAME~2), as JSON: readers rebuilding the object
 * need optimizer.state's int keys as ints: ", \"key\": 0". */
static void key_json(const struct pt_value *k, struct pt_buf *out)
{
	struct pt_buf t;

	if (k && k->kind == PT_V_STR) {
		pt_buf_puts(out, ", \"key\": \"");
		pt_json_str(out, k->u.s.p, k->u.s.len);
		pt_buf_putc(out, '"');
		return;
	}
	if (!k || (k->kind != PT_V_INT && k->kind != PT_V_BIGINT &&
		   k->kind != PT_V_BOOL && k->kind != PT_V_NONE &&
		   k->kind != PT_V_FLOAT))
		return;
	pt_buf_init(&t);
	if (k->kind == PT_V_NONE)
		pt_buf_puts(&t, "null");
	else if (k->kind == PT_V_BOOL)
		pt_buf_puts(&t, k->u.b ? "true" : "false");
	else if (k->kind == PT_V_INT)
		pt_buf_printf(&t, "%lld", (long long)k->u.i);
	else if (k->kind == PT_V_BIGINT)
		pt_bigint_decimal(&t, k->u.s.p, k->u.s.len);
	else if (k->u.f != k->u.f)
		pt_buf_puts(&t, "NaN");
	else if (k->u.f > 1.7976931348623157e308 || k->u.f < -1.7976931348623157e308)
		pt_buf_puts(&t, k->u.f > 0 ? "Infinity" : "-Infinity");
	else
		pt_repr_float(&t, k->u.f);
	pt_buf_printf(out, ", \"key\": %s", t.p ? t.p : "null");
	pt_buf_free(&t);
}

/* What kind of container a directory shows, for readers that rebuild the
 * object (contrib/python/ptfs_load.py): ", \"container\": \"dict\"" (dict,
 * list, tuple, set, or object with its "class"). */
static void container_json(const struct pt_node *n, struct pt_buf *out)
{
	const struct pt_value *v = n->val, *fn;
	const char *kind = "dict";

	if (n->role == R_VALUE && v) {
		switch (pt__vclass(v)) {
		case PT_C_SEQ:
			kind = v->kind == PT_V_TUPLE ? "tuple" :
			       v->kind == PT_V_SET || v->kind == PT_V_FROZENSET ? "set" : "list";
			if (v->kind == PT_V_CALL || v->kind == PT_V_OBJ) {
				fn = v->u.call.callable;
				kind = pt__is_global(fn, "torch", "Size") ? "tuple" :
				       pt__is_global(fn, "builtins", "set") ? "set" : "list";
			}
			break;
		case PT_C_OBJECT:
			fn = v->kind == PT_V_CALL || v->kind == PT_V_OBJ ? v->u.call.callable : NULL;
			pt_buf_puts(out, ", \"container\": \"object\"");
			if (fn && fn->kind == PT_V_GLOBAL) {
				pt_buf_puts(out, ", \"class\": \"");
				pt_json_str(out, (const uint8_t *)fn->u.global.module,
						strlen(fn->u.global.module));
				pt_buf_putc(out, '.');
				pt_json_str(out, (const uint8_t *)fn->u.global.name,
						strlen(fn->u.global.name));
				pt_buf_putc(out, '"');
			}
			return;
		default:
			break;
		}
	}
	pt_buf_printf(out, ", \"container\": \"%s\"", kind);
}

/*
 * Every entry is one JSON object with its path, type and size, tensors
 * with their metadata, small scalar files with their text.  Sidecars and
 * /.ptfs are left out (their content is inline).  Stops after
 * @max_entries entries, when the walk's budget is spent, or once the
 * text passes max_walk_bytes, with "truncated": true.  The byte cap
 * matters for deep trees: every entry repeats its whole path, so a chain
 * max_depth long ending in references that multiply would otherwise make
 * max_entries entries of ~2 * max_depth bytes each (20 GB), and it bounds
 * the cost of the ancestor walks too.  Directories that cannot be listed
 * show their "entries" as 0 and are left out.
 */
struct json_walk {
	struct pt_ckpt *ck;
	struct pt_buf *out;
	uint64_t count, max;
	bool first, truncated;
};

static int json_entry(void *ctx, const struct pt_walk *w)
{
	struct json_walk *j = ctx;
	struct pt_buf *out = j->out;
	struct pt_node *c = w->node;

	if (j->count++ >= j->max || out->len >= j->ck->opts.limits.max_walk_bytes) {
		j->truncated = true;
		return PT_WALK_STOP;
	}
	pt_buf_puts(out, j->first ? "\n {\"path\": \"" : ",\n {\"path\": \"");
	j->first = false;
	pt_json_str(out, (const uint8_t *)w->path, w->path_len);
	pt_buf_putc(out, '"');
	key_json(c->key, out);
	if (c->type == PT_NT_DIR) {
		size_t cnt = 0;

		(void)pt_tree_count(j->ck, c, &cnt);
		pt_buf_puts(out, ", \"type\": \"dir\", \"entries\": ");
		pt_buf_put_u64(out, cnt);
		container_json(c, out);
		pt_buf_putc(out, '}');
		return 0;
	}
	if (c->type == PT_NT_LINK) {
		pt_buf_puts(out, ", \"type\": \"link\", \"target\": \"");
		pt_json_str(out, node_data(c), c->size);
		pt_buf_puts(out, "\"}");
		return 0;
	}
	pt_buf_puts(out, ", \"type\": \"file\", \"size\": ");
	pt_buf_put_u64(out, c->size);
	if (node_tensor(c)) {
		pt_buf_puts(out, ", \"tensor\": ");
		pt__tensor_json(j->ck, node_tensor(c), out);
		out->len--; /* the newline */
	} else if (node_data(c) && c->size <= 4096 &&
		   pt__vclass(c->val) != PT_C_BYTES) {
		pt_buf_puts(out, ", \"value\": \"");
		pt_json_str(out, node_data(c), c->size ? c->size - 1 : 0);
		pt_buf_puts(out, "\", \"json\": ");
		pt_node_scalar_json(c, out);
	}
	pt_buf_putc(out, '}');
	return 0;
}

int pt_tree_json(struct pt_ckpt *ck, struct pt_buf *out, uint64_t max_entries,
		 struct pt_error *err)
{
	struct json_walk j = { ck, out, 0, max_entries, true, false };
	int rc;

	pt_buf_printf(out, "{\"format\": \"%s\", \"tensors\": %llu",
		      pt_ckpt_format(ck), (unsigned long long)ck->n_tensors);
	/* the object itself when it is not a directory (shown under the
	 * file's stem): "root": "value" */
	if (!pt__is_dir_class(ck->tree->root->val))
		pt_buf_puts(out, ", \"root\": \"value\"");
	else
		container_json(ck->tree->root, out);
	pt_buf_puts(out, ", \"entries\": [");
	rc = pt_tree_walk(ck, ck->tree->root, "", PT_WALK_CUT, json_entry, &j, err);
	if (rc == -EINTR)
		return rc;
	if (rc == PT_WALK_STOP)
		j.truncated = true;     /* the walk's budget is spent */
	pt_buf_printf(out, "\n], \"truncated\": %s}\n", j.truncated ? "true" : "false");
	return 0;
}

/* ---- the root, and the tree's life ---- */

int pt__tree_new(struct pt_ckpt *ck, struct pt_error *err)
{
	struct pt_tree *t = calloc(1, sizeof(*t));
	struct pt_node *root;

	if (!t)
		return pt_fail(err, -ENOMEM, "out of memory");
	pthread_mutex_init(&t->lock, NULL);
	pthread_mutex_init(&t->vlock, NULL);
	pthread_mutex_init(&t->glock, NULL);
	t->nested = ck->opts.nested;
	t->previews = ck->opts.previews;
	t->suffix = ck->opts.suffix;
	ck->tree = t;
	pt_buf_init(&t->scratch);
	root = node_alloc(t);
	if (!root)
		return pt_fail(err, -ENOMEM, "out of memory");
	t->root = root;
	root->name = "";
	root->id = ++t->next_id;
	root->type = PT_NT_DIR;
	root->role = R_VALUE;
	root->val = pt__tree_deref(ck->root);
	return 0;
}

/*
 * The root table: ".ptfs" first, then the object's entries, or the object
 * itself under the file's stem when it is not a directory (LAYOUT.md "The
 * root").  Built on first use like every other table (`ptfs info` never
 * needs it); called with the tree lock held.
 */
static struct dtab *root_table(struct pt_ckpt *ck, int *rc)
{
	struct pt_tree *t = ck->tree;
	struct pt_value *v = t->root->val;
	struct dtab *d = pt__tab_new(t);

	if (!d || !pt__tab_add(d, ".ptfs", 5, R_META, NULL)) {
		*rc = -ENOMEM;
		return NULL;
	}
	if (pt__is_dir_class(v)) {
		*rc = pt__tab_fill_value(ck, d, v);
	} else {
		struct pt_buf enc;

		pt_buf_init(&enc);
		pt_name_encode(&enc, (const uint8_t *)ck->stem, strlen(ck->stem));
		*rc = enc.oom ? -ENOMEM : pt__tab_claim(d, enc.p, enc.len, v);
		pt_buf_free(&enc);
	}
	return *rc ? NULL : d;
}

void pt__tree_free(struct pt_ckpt *ck)
{
	struct pt_tree *t = ck->tree;
	size_t i;

	if (!t)
		return;
	while (t->blks) {
		struct node_blk *b = t->blks;

		for (i = 0; i < b->used; i++) {
			pic_free(node_pic(&b->n[i]));
			if (b->n[i].type == PT_NT_DIR)
				free(b->n[i].u.dir.kids);
		}
		t->blks = b->next;
		free(b);
	}
	for (i = 0; i < t->n_retired; i++)
		free(t->retired[i].kids);
	free(t->retired);
	free(t->moved);
	for (i = 0; i < t->n_tabs; i++) {
		/* a tree made again (after an edit) fills its own tables */
		if (t->tabs[i]->of)
			t->tabs[i]->of->aux = NULL;
		pt__tab_free(t->tabs[i]);
	}
	for (i = 0; i < t->n_texts; i++)
		free(t->texts[i]);
	pt_buf_free(&t->scratch);
	pt_buf_free(&t->kraw);
	pt_buf_free(&t->kenc);
	free(t->kname);
	while (t->pool) {
		struct pool_blk *b = t->pool;

		t->pool = b->next;
		free(b);
	}
	for (i = 0; i < t->n_vfiles; i++) {
		if (t->vfiles[i]->free)
			t->vfiles[i]->free(t->vfiles[i]->ctx);
		free(t->vfiles[i]);
	}
	free(t->vfiles);
	pthread_mutex_destroy(&t->vlock);
	pthread_mutex_destroy(&t->glock);
	free(t->tabs);
	free(t->texts);
	pthread_mutex_destroy(&t->lock);
	free(t);
	ck->tree = NULL;
}

static bool shows(const struct pt_node *n, const struct pt_value *v)
{
	return n->type == PT_NT_DIR && n->role == R_VALUE && n->val == v;
}

/* Node @n showing an edited value lists it again on next use: its
 * table and children are kept as retired (until close). */
static void retire(struct pt_tree *t, struct pt_node *n)
{
	/* out of memory: the old children are left, not freed (a thread
	 * may read them), and made anew */
	if (n->u.dir.tab)
		t->retired_entries += n->u.dir.tab->n;
	if (n->u.dir.kids && t->n_retired < t->cap_retired)
		t->retired[t->n_retired++] = (struct retired){
			.dir = n, .tab = n->u.dir.tab, .kids = n->u.dir.kids,
		};
	__atomic_store_n(&n->u.dir.kids, NULL, __ATOMIC_RELEASE);
	__atomic_store_n(&n->u.dir.tab, NULL, __ATOMIC_RELEASE);
}

/* Room for @more retired directories (out of memory: fewer are kept). */
static void retired_room(struct pt_tree *t, size_t more)
{
	size_t need = t->n_retired + more;

	if (need > t->cap_retired) {
		size_t cap = need * 2;
		struct retired *r = realloc(t->retired, cap * sizeof(*r));

		if (r) {
			t->retired = r;
			t->cap_retired = cap;
		}
	}
}

void pt__tree_touched(struct pt_ckpt *ck, struct pt_value *v)
{
	struct pt_tree *t = ck->tree;
	struct dtab *d = pt__is_dir_class(v) ? v->aux : NULL;
	struct node_blk *b;
	size_t i, need = 0;

	/* the nodes that list @v: its table's users and the root, which
	 * has a table of its own; every node when that list is lost */
	if (d && d->users_lost)
		for (b = t->blks; b; b = b->next)
			for (i = 0; i < b->used; i++)
				need += shows(&b->n[i], v) && b->n[i].u.dir.kids;
	else
		need = (d ? d->n_users : 0) + 1;
	retired_room(t, need);
	/* the old table stays in t->tabs, freed with the tree */
	if (pt__is_dir_class(v))
		__atomic_store_n((struct dtab **)&v->aux, NULL, __ATOMIC_RELEASE);
	if (d && d->users_lost) {
		for (b = t->blks; b; b = b->next)
			for (i = 0; i < b->used; i++)
				if (shows(&b->n[i], v))
					retire(t, &b->n[i]);
		return;
	}
	for (i = 0; d && i < d->n_users; i++)
		if (shows(d->users[i], v) && d->users[i]->u.dir.tab == d)
			retire(t, d->users[i]);
	if (shows(t->root, v))
		retire(t, t->root);
}

/* Hide entry @e of @d (when it is not hidden already). */
static void hide(struct dtab *d, struct dent *e)
{
	if (e->hidden)
		return;
	__atomic_store_n(&e->hidden, true, __ATOMIC_RELEASE);
	__atomic_store_n(&d->n_hidden, d->n_hidden + 1, __ATOMIC_RELEASE);
}

/* Hide entry @name of table @d (NULL is fine), and its sidecars. */
static void hide_entry(struct dtab *d, const char *name)
{
	struct dent *e;
	size_t i;

	if (!d || !(e = pt__tab_find(d, name, strlen(name))))
		return;
	hide(d, e);
	/* a tensor's NAME.json and NAME.png follow its entry (pt__tab_claim) */
	for (i = e->idx + 1; i < d->n && i <= e->idx + 2u; i++) {
		struct dent *s = d->ents[i];

		if ((s->role != R_JSON && s->role != R_PNG) || s->val != e->val)
			break;
		hide(d, s);
	}
}

void pt__tree_hide(struct pt_ckpt *ck, struct pt_value *v, const char *name)
{
	struct pt_node *root = ck->tree->root;

	/* the value's table, which every node showing it lists; the root
	 * has one of its own (with /.ptfs) */
	if (pt__is_dir_class(v))
		hide_entry(v->aux, name);
	if (root->val == v)
		hide_entry(root->u.dir.tab, name);
}

void pt__tree_moved(struct pt_ckpt *ck, struct pt_node *n,
		    const struct pt_value *to)
{
	struct pt_tree *t = ck->tree;

	if (t->n_moved == t->cap_moved) {
		size_t cap = t->cap_moved ? t->cap_moved * 2 : 8;
		struct moved *m = realloc(t->moved, cap * sizeof(*m));

		if (!m)
			return;         /* its new entry gets a new node */
		t->moved = m;
		t->cap_moved = cap;
	}
	t->moved[t->n_moved++] = (struct moved){ .n = n, .to = to };
}

/* The nodes made so far for which @pick (called under the tree lock, which
 * it may rely on, with @ctx) says yes, in a malloc()ed array of *@count;
 * NULL when out of memory. */
struct pt_node **pt__tree_nodes_where(struct pt_ckpt *ck,
				      bool (*pick)(struct pt_ckpt *ck,
						   struct pt_node *n, void *ctx),
				      void *ctx, size_t *count)
{
	struct pt_tree *t = ck->tree;
	struct pt_node **v;
	struct node_blk *b;
	size_t i, n = 0, cap = 0;

	pthread_mutex_lock(&t->lock);
	for (b = t->blks; b; b = b->next)
		cap += b->used;
	v = malloc((cap ? cap : 1) * sizeof(*v));
	for (b = t->blks; v && b; b = b->next)
		for (i = 0; i < b->used; i++)
			if (pick(ck, &b->n[i], ctx))
				v[n++] = &b->n[i];
	pthread_mutex_unlock(&t->lock);
	*count = n;
	return v;
}
