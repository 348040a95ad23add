/* SPDX-License-Identifier: MIT */
/*
 * edit.c -- checkpoint surgery: structural edits of the value graph.
 *
 * Each edit changes the graph of a checkpoint opened with opts.editable
 * (every argument of its pickle kept) the way the same edit in Python
 * changes the loaded object: an entry leaves its dict or list, a key is
 * renamed in place, a value moves to another mapping, a scalar or a
 * tensor gets a new value in its slot.  Values reached from elsewhere too
 * (memo sharing, tied storages) are never changed themselves; only the
 * slot that holds them is.  Paths are the tree's names, and the listings
 * an edit changes are made again on next use (the other nodes stay what
 * they are: a mount's inodes), so a batch of edits (a CLI command, a
 * mount's pending changes) sees its own earlier edits.
 *
 * Nothing reaches the file until pt_edit_commit(), which hands the graph
 * to the format's restructure() hook (fmt/fmt.h): the torch.save writer
 * re-emits the pickle and keeps only the storages it still names; the
 * safetensors writer writes a new header and moves the data; a sharded
 * checkpoint writes the shards the edits touched and its index together
 * (fmt/sharded_edit.c), and refuses mkdir (struct pt_format.flat).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/text.h"
#include "ckpt/ckpt_i.h"
#include "ckpt/editlog_i.h"
#include "ckpt/names.h"
#include "ckpt/tree_i.h"

/* A path in a message: at most 80 bytes of it ("%.*s%s"). */
#define SHOWN(p) (int)(strlen(p) > 80 ? 80 : strlen(p)), (p), \
		 (strlen(p) > 80 ? "..." : "")

/* A node made by an edit: zeroed, owned by ck, id past every pickle's. */
static struct pt_value *node_new(struct pt_ckpt *ck, enum pt_vkind kind)
{
	struct pt_value *v = pt__alloc(ck, sizeof(*v));

	if (v) {
		v->kind = (uint8_t)kind;
		v->id = UINT32_MAX;
	}
	return v;
}

/* A new None, bool, int, float or str: the caller sets its value. */
static struct pt_value *scalar_new(struct pt_ckpt *ck, enum pt_vkind kind)
{
	struct pt_value *v = node_new(ck, kind);

	if (v)
		v->aux16 = PT_C_SCALAR;
	return v;
}

static struct pt_value *str_new(struct pt_ckpt *ck, const void *p, size_t n)
{
	struct pt_value *v = scalar_new(ck, PT_V_STR);
	uint8_t *copy = pt__alloc(ck, n + 1);

	if (!v || !copy)
		return NULL;
	memcpy(copy, p, n);
	v->u.s.p = copy;
	v->u.s.len = n;
	v->u.s.in_off = UINT64_MAX;
	return v;
}

static struct pt_value *int_new(struct pt_ckpt *ck, int64_t i)
{
	struct pt_value *v = scalar_new(ck, PT_V_INT);

	if (v)
		v->u.i = i;
	return v;
}

static struct pt_value *bool_new(struct pt_ckpt *ck, bool b)
{
	struct pt_value *v = scalar_new(ck, PT_V_BOOL);

	if (v)
		v->u.b = b;
	return v;
}

/* A sequence of @n slots (arena), for tuples and grown sequences. */
static bool seq_init(struct pt_ckpt *ck, struct pt_vseq *s, size_t n)
{
	s->v = pt__alloc(ck, (n ? n : 1) * sizeof(*s->v));
	s->n = 0;
	s->cap = n;
	return s->v != NULL;
}

static struct pt_value *tuple_new(struct pt_ckpt *ck, size_t n)
{
	struct pt_value *v = node_new(ck, PT_V_TUPLE);

	if (!v || !seq_init(ck, &v->u.seq, n))
		return NULL;
	v->u.seq.n = n;
	v->aux16 = PT_C_SEQ;
	return v;
}

static struct pt_value *ints_tuple(struct pt_ckpt *ck, const int64_t *x,
				   uint32_t n)
{
	struct pt_value *t = tuple_new(ck, n);
	uint32_t i;

	for (i = 0; t && i < n; i++)
		if (!(t->u.seq.v[i] = int_new(ck, x[i])))
			return NULL;
	return t;
}

static struct pt_value *global_new(struct pt_ckpt *ck, const char *module,
				   const char *name)
{
	struct pt_value *v = node_new(ck, PT_V_GLOBAL);

	if (v) {
		v->u.global.module = module;    /* static strings */
		v->u.global.name = name;
		v->aux16 = PT_C_TEXT;
	}
	return v;
}

static struct pt_value *call_new(struct pt_ckpt *ck, struct pt_value *fn,
				 struct pt_value *args)
{
	struct pt_value *v = node_new(ck, PT_V_CALL);

	if (!v || !fn || !args)
		return NULL;
	v->u.call.callable = fn;
	v->u.call.args = args;
	return v;
}

/* Append @a (and @b when not NULL) to @s, moving it to a bigger array of
 * the arena when full (arrays of the pickle's arena cannot grow). */
static bool seq_append(struct pt_ckpt *ck, struct pt_vseq *s,
		       struct pt_value *a, struct pt_value *b)
{
	size_t need = s->n + (b ? 2 : 1);

	if (need > s->cap) {
		struct pt_vseq g;

		if (!seq_init(ck, &g, need * 2))
			return false;
		if (s->n)
			memcpy(g.v, s->v, s->n * sizeof(*s->v));
		g.n = s->n;
		*s = g;
	}
	s->v[s->n++] = a;
	if (b)
		s->v[s->n++] = b;
	return true;
}

static void seq_cut(struct pt_vseq *s, size_t pos, size_t k)
{
	memmove(s->v + pos, s->v + pos + k, (s->n - pos - k) * sizeof(*s->v));
	s->n -= k;
}

/* ---- finding what a path names ---- */

/*
 * Graph changes happen between edit_lock() and edit_done(), under the
 * tree's lock (the one table fills take), so that no thread lists a
 * sequence while it is being cut.  edit_done() retires the tables of the
 * directory values whose listing changed (@a, @b: NULL is fine): every
 * other node keeps its identity, which a mount's inode numbers are.
 */
static void edit_lock(struct pt_ckpt *ck)
{
	pthread_mutex_lock(&ck->tree->lock);
}

static int edit_done(struct pt_ckpt *ck, struct pt_value *a, struct pt_value *b)
{
	if (a)
		pt__tree_touched(ck, a);
	if (b && b != a)
		pt__tree_touched(ck, b);
	ck->edits.n++;
	pthread_mutex_unlock(&ck->tree->lock);
	return 0;
}

/* Whether the checkpoint can be restructured: 0, or -errno with @err. */
static int need_restructurable(struct pt_ckpt *ck, struct pt_error *err)
{
	if (!ck->opts.editable)
		return pt_fail(err, -EINVAL, "checkpoint not opened for editing");
	if (!ck->fmt->restructure)
		return pt_fail(err, -EROFS, "%s checkpoints cannot be restructured",
			       pt_ckpt_format(ck));
	if (ck->kind_name)
		return pt_fail(err, -EROFS,
			       "%s: structural edits are refused, its code may refer to any attribute",
			       ck->kind_name);
	return 0;
}

/* Whether one more edit may be made: restructurable, and within the
 * budget of listings kept.  The commit of the edits made is never
 * refused for that budget (they are made: what they kept is spent). */
static int need_editable(struct pt_ckpt *ck, struct pt_error *err)
{
	uint64_t kept = ck->tree ? ck->tree->retired_entries : 0;
	int rc = need_restructurable(ck, err);

	/* each edit lists its directory again and keeps the old listing
	 * until close: the same budget as one walk of the tree */
	if (!rc && kept > ck->opts.limits.max_walk_entries)
		rc = pt_fail(err, -E2BIG,
			     "these edits listed directories again %" PRIu64 " entries over (max_walk_entries %" PRIu64 "): commit them and remount, or use 'ptfs rm' for large dicts",
			     kept, ck->opts.limits.max_walk_entries);
	return rc;
}

static struct pt_node *find(struct pt_ckpt *ck, const char *path,
			    struct pt_error *err, int *rc)
{
	struct pt_node *n = pt_tree_path(ck, path, rc);

	if (!n) {
		if (*rc == 0 || *rc == -ENOENT)
			*rc = pt_fail(err, -ENOENT, "%.*s%s: no such entry", SHOWN(path));
		else
			*rc = pt_fail(err, *rc, "%.*s%s: %s", SHOWN(path), strerror(-*rc));
	}
	return n;
}

/* A value the tree shows as a directory that entries can be added to. */
static bool is_mapping(const struct pt_node *n)
{
	return n->role == R_VALUE && n->type == PT_NT_DIR && n->val &&
	       pt__vclass(n->val) == PT_C_MAP;
}

static int slots_of(struct pt_ckpt *ck, struct pt_value *dir,
		    struct pt_entry_slot **all, size_t *n)
{
	return pt__entry_slots(ck, dir, all, n);
}

/* The slot of the entry @n (a value of the object, not /.ptfs, not a
 * NAME.json), for an edit that changes it (@what: "removed", ...). */
static int slot_of(struct pt_ckpt *ck, const char *path, struct pt_node *n,
		   struct pt_slot *s, const char *what, struct pt_error *err)
{
	struct pt_node *p = n->parent;
	int rc;

	if (!p)
		return pt_fail(err, -EPERM, "%.*s%s: the root cannot be %s", SHOWN(path), what);
	if (n->role != R_VALUE || p->role != R_VALUE || !p->val)
		return pt_fail(err, -EPERM, "%.*s%s: not a value of the checkpoint%s",
			       SHOWN(path), n->role == R_JSON ?
			       " (NAME.json describes the tensor NAME)" : "");
	rc = pt__entry_slot(ck, p->val, n->name, s);
	if (rc)
		return pt_fail(err, rc, "%.*s%s: %s", SHOWN(path), strerror(-rc));
	if (s->kind == PT_SLOT_NAMED)
		return pt_fail(err, -EPERM, "%.*s%s: an object's %s cannot be %s",
			       SHOWN(path), n->name, what);
	if (ck->edits.holes && s->kind == PT_SLOT_ITEM && s->owner->kind == PT_V_TUPLE &&
	    strcmp(what, "removed") == 0)
		return 0;       /* rm -r in a mount: see pt_edit_keep_names() */
	if (s->kind != PT_SLOT_PAIR && s->owner->kind != PT_V_LIST &&
	    s->owner->kind != PT_V_SET && s->owner->kind != PT_V_CALL &&
	    s->owner->kind != PT_V_OBJ)
		return pt_fail(err, -EPERM, "%.*s%s: a %s cannot change", SHOWN(path),
			       s->owner->kind == PT_V_TUPLE ? "tuple" : "frozenset");
	return 0;
}

/* The value in slot @s. */
static struct pt_value **slot_value(const struct pt_slot *s)
{
	if (s->kind == PT_SLOT_PAIR)
		return &s->seq->v[s->pos + 1];
	if (s->kind == PT_SLOT_LISTPAIR)
		return &s->seq->v[s->pos]->u.seq.v[1];
	return &s->seq->v[s->pos];
}

/* Put @val in slot @s (a (key, value) tuple is made anew: it may be
 * shared). */
static int slot_set(struct pt_ckpt *ck, const struct pt_slot *s,
		    struct pt_value *key, struct pt_value *val)
{
	struct pt_value *pair;

	switch (s->kind) {
	case PT_SLOT_PAIR:
		if (key)
			s->seq->v[s->pos] = key;
		s->seq->v[s->pos + 1] = val;
		return 0;
	case PT_SLOT_LISTPAIR:
		pair = tuple_new(ck, 2);
		if (!pair)
			return -ENOMEM;
		pair->u.seq.v[0] = key ? key : s->seq->v[s->pos]->u.seq.v[0];
		pair->u.seq.v[1] = val;
		s->seq->v[s->pos] = pair;
		return 0;
	default:
		s->seq->v[s->pos] = val;
		return 0;
	}
}

/* Put @v in slot @s of entry @n, as one edit. */
static int replace_value(struct pt_ckpt *ck, const struct pt_slot *s,
			 const struct pt_node *n, struct pt_value *v,
			 struct pt_error *err)
{
	int rc;

	edit_lock(ck);
	rc = slot_set(ck, s, NULL, v);
	if (rc) {
		pthread_mutex_unlock(&ck->tree->lock);
		return pt_fail(err, rc, "out of memory");
	}
	return edit_done(ck, n->parent->val, NULL);
}

/* Whether removing the entry of slot @s leaves a hole in its sequence
 * (pt_edit_keep_names(): a list's or tuple's item, a mapping's pair)
 * rather than cutting it out. */
static bool leaves_hole(const struct pt_ckpt *ck, const struct pt_slot *s)
{
	if (!ck->edits.holes)
		return false;
	if (s->kind == PT_SLOT_PAIR || s->kind == PT_SLOT_LISTPAIR)
		return true;
	return s->kind == PT_SLOT_ITEM &&
	       (s->owner->kind == PT_V_LIST || s->owner->kind == PT_V_TUPLE);
}

/*
 * Take the entry of slot @s out of its sequence: cut, or with
 * pt_edit_keep_names() it leaves a hole (a pair: two) that keeps the
 * others' indexes and slots (closed by pt_edit_commit()), so that the
 * directory's table hides the entry in place (pt__tree_hide()) rather
 * than being listed again: `rm -r` of N entries costs N, not N².
 */
static int slot_remove(struct pt_ckpt *ck, const struct pt_slot *s)
{
	size_t i;

	if (!leaves_hole(ck, s)) {
		seq_cut(s->seq, s->pos, s->kind == PT_SLOT_PAIR ? 2 : 1);
		return 0;
	}
	/* newest first: rm -r empties one sequence after another */
	for (i = ck->edits.n_holed; i-- > 0 && ck->edits.holed[i] != s->seq;)
		;
	if (i == SIZE_MAX) {
		i = ck->edits.n_holed;
		if (!pt_grow((void **)&ck->edits.holed, &ck->edits.cap_holed, i,
			     sizeof(*ck->edits.holed)))
			return -ENOMEM;
		ck->edits.holed[ck->edits.n_holed++] = s->seq;
	}
	s->seq->v[s->pos] = &pt__hole;
	if (s->kind == PT_SLOT_PAIR)
		s->seq->v[s->pos + 1] = &pt__hole;
	return 0;
}

void pt_edit_keep_names(struct pt_ckpt *ck)
{
	ck->edits.holes = true;
}

/* A list's items, holes among them, before the commit closed the holes. */
struct holed_was {
	struct pt_value **v;
	size_t n;
};

/*
 * Close the holes of every list for the commit to write the graph; each
 * list's items before that go to *@was (NULL when there are none) for
 * open_holes() to put back when the commit fails.  The tree keeps the
 * listings with the holes: a mount's names stay what they were.  0 or
 * -ENOMEM (nothing changed).
 */
static int close_holes(struct pt_ckpt *ck, struct holed_was **was)
{
	size_t i, j, k, n = ck->edits.n_holed;

	*was = n ? calloc(n, sizeof(**was)) : NULL;
	if (n && !*was)
		return -ENOMEM;
	for (i = 0; i < n; i++) {
		struct pt_vseq *s = ck->edits.holed[i];

		(*was)[i].n = s->n;
		(*was)[i].v = malloc((s->n ? s->n : 1) * sizeof(*s->v));
		if (!(*was)[i].v) {
			while (i--)
				free((*was)[i].v);
			free(*was);
			*was = NULL;
			return -ENOMEM;
		}
		memcpy((*was)[i].v, s->v, s->n * sizeof(*s->v));
	}
	edit_lock(ck);
	for (i = 0; i < n; i++) {
		struct pt_vseq *s = ck->edits.holed[i];

		for (j = k = 0; j < s->n; j++)
			if (s->v[j] != &pt__hole)
				s->v[k++] = s->v[j];
		s->n = k;
	}
	pthread_mutex_unlock(&ck->tree->lock);
	return 0;
}

/* The commit is over: @done, the holes are gone for good; failed, they
 * are back in place (the edits go on). */
static void open_holes(struct pt_ckpt *ck, struct holed_was *was, bool done)
{
	size_t i;

	if (!was)
		return;
	edit_lock(ck);
	for (i = 0; i < ck->edits.n_holed; i++) {
		struct pt_vseq *s = ck->edits.holed[i];

		if (!done) {
			/* the same array: compaction only moved items down */
			memcpy(s->v, was[i].v, was[i].n * sizeof(*s->v));
			s->n = was[i].n;
		}
		free(was[i].v);
	}
	if (done)
		ck->edits.n_holed = 0;
	pthread_mutex_unlock(&ck->tree->lock);
	free(was);
}

/*
 * The sequence new (key, value) pairs of mapping @m go to: a dict's own,
 * an object's state dict, else the items set onto the object (SETITEMS
 * after its REDUCE: an OrderedDict).
 */
static struct pt_vseq *pairs_of(struct pt_ckpt *ck, struct pt_value *m)
{
	struct pt_value *st;

	if (m->kind == PT_V_DICT)
		return &m->u.dict.kv;
	if (m->kind != PT_V_CALL && m->kind != PT_V_OBJ)
		return NULL;
	st = pt_call_state(m);
	if (st && st->kind == PT_V_DICT && m->kind == PT_V_OBJ)
		return &st->u.dict.kv;
	if (!m->u.call.ext) {
		m->u.call.ext = pt__alloc(ck, sizeof(*m->u.call.ext));
		if (!m->u.call.ext)
			return NULL;
	}
	return &m->u.call.ext->kv;
}

/* The key a new entry named @name (the tree's escapes undone) gets: a
 * str, refused when the tree could not show it under that name. */
static struct pt_value *key_for(struct pt_ckpt *ck, const char *path,
				const char *name, struct pt_error *err, int *rc)
{
	struct pt_buf raw, enc;
	struct pt_value *k = NULL;

	pt_buf_init(&raw);
	pt_buf_init(&enc);
	*rc = 0;
	if (!*name || strcmp(name, ".") == 0 || strcmp(name, "..") == 0) {
		*rc = pt_fail(err, -EINVAL, "%.*s%s: '%s' cannot name an entry",
			      SHOWN(path), name);
		goto out;
	}
	pt_name_decode(&raw, name);
	if (!raw.oom)
		pt_name_encode(&enc, raw.p ? (const uint8_t *)raw.p : (const uint8_t *)"", raw.len);
	if (raw.oom || enc.oom) {
		*rc = pt_fail(err, -ENOMEM, "out of memory");
	} else if (strlen(name) > PT_NAME_MAX) {
		*rc = pt_fail(err, -ENAMETOOLONG,
			      "%.*s%s: a name of %zu bytes would be shown shortened (at most %d)",
			      SHOWN(path), strlen(name), PT_NAME_MAX);
	} else if (enc.len != strlen(name) || memcmp(enc.p, name, enc.len)) {
		*rc = pt_fail(err, -EINVAL,
			      "%.*s%s: '%s' is not how the tree writes that key (it would show '%.*s')",
			      SHOWN(path), name, (int)enc.len, enc.p);
	} else if (!(k = str_new(ck, raw.p ? raw.p : "", raw.len))) {
		*rc = pt_fail(err, -ENOMEM, "out of memory");
	}
out:
	pt_buf_free(&raw);
	pt_buf_free(&enc);
	return k;
}

/* Split @path into its directory node and last name (in @name). */
static struct pt_node *parent_of(struct pt_ckpt *ck, const char *path,
				 char *name, size_t cap, struct pt_error *err,
				 int *rc)
{
	const char *slash;
	size_t len = strlen(path);
	char *dir;
	struct pt_node *p;

	while (len > 1 && path[len - 1] == '/')
		len--;
	slash = memrchr(path, '/', len);
	if (len - (slash ? (size_t)(slash + 1 - path) : 0) >= cap) {
		*rc = pt_fail(err, -ENAMETOOLONG, "%.64s...: name too long", path);
		return NULL;
	}
	snprintf(name, cap, "%.*s", (int)(len - (slash ? (size_t)(slash + 1 - path) : 0)),
		 slash ? slash + 1 : path);
	dir = strndup(path, slash ? (size_t)(slash - path) : 0);
	if (!dir) {
		*rc = pt_fail(err, -ENOMEM, "out of memory");
		return NULL;
	}
	p = find(ck, dir, err, rc);
	free(dir);
	if (p && !is_mapping(p)) {
		*rc = pt_fail(err, -ENOTDIR, "%.*s%s: its directory is not a mapping", SHOWN(path));
		return NULL;
	}
	return p;
}

/* ---- the edits ---- */

int pt_edit_remove(struct pt_ckpt *ck, const char *path, struct pt_error *err)
{
	struct pt_slot s;
	struct pt_node *n;
	int rc = need_editable(ck, err);

	if (rc || !(n = find(ck, path, err, &rc)))
		return rc;
	rc = slot_of(ck, path, n, &s, "removed", err);
	if (rc)
		return rc;
	edit_lock(ck);
	rc = slot_remove(ck, &s);
	if (rc) {
		pthread_mutex_unlock(&ck->tree->lock);
		return pt_fail(err, rc, "out of memory");
	}
	if (leaves_hole(ck, &s)) {
		/* the other entries keep their slots: no listing again */
		pt__tree_hide(ck, n->parent->val, n->name);
		edit_done(ck, NULL, NULL);
	} else {
		edit_done(ck, n->parent->val, NULL);
	}
	pt__edit_log(ck, PT_EDIT_RM, path, NULL, 0, NULL);
	return 0;
}

static bool inside(const struct pt_node *n, const struct pt_node *dir)
{
	for (; n; n = n->parent)
		if (n == dir)
			return true;
	return false;
}

/* Give the value of @s (entry @src) to the existing entry @dst. */
static int move_onto(struct pt_ckpt *ck, const char *to, struct pt_node *src,
		     struct pt_node *dst, const struct pt_slot *s,
		     struct pt_error *err)
{
	struct pt_value *val = *slot_value(s), *dval;
	struct pt_slot d;
	int rc;

	if (dst->type == PT_NT_DIR)
		return pt_fail(err, -EISDIR, "%.*s%s: a directory is in the way", SHOWN(to));
	rc = slot_of(ck, to, dst, &d, "replaced", err);
	if (rc)
		return rc;
	edit_lock(ck);
	dval = *slot_value(&d);
	rc = slot_set(ck, &d, NULL, val);
	if (rc) {
		pthread_mutex_unlock(&ck->tree->lock);
		return pt_fail(err, rc, "out of memory");
	}
	if (slot_remove(ck, s)) {
		/* the value is in both places: give the target its old one */
		slot_set(ck, &d, NULL, dval);
		pthread_mutex_unlock(&ck->tree->lock);
		return pt_fail(err, -ENOMEM, "out of memory");
	}
	pt__tree_moved(ck, src, dst->parent->val);
	edit_done(ck, src->parent->val, dst->parent->val);
	(void)pt_tree_lookup(ck, dst->parent, dst->name, &rc);  /* as above */
	return 0;
}

int pt_edit_move(struct pt_ckpt *ck, const char *from, const char *to,
		 struct pt_error *err)
{
	char name[4096];
	struct pt_slot s;
	struct pt_node *n, *dst, *dir;
	struct pt_value *key, *val;
	struct pt_vseq *kv;
	int rc = need_editable(ck, err);

	if (rc || !(n = find(ck, from, err, &rc)))
		return rc;
	rc = slot_of(ck, from, n, &s, "moved", err);
	if (rc)
		return rc;
	dst = pt_tree_path(ck, to, &rc);
	if (dst && dst == n)
		return 0;
	if (dst && is_mapping(dst)) {
		/* mv A DIR: DIR/A */
		dir = dst;
		snprintf(name, sizeof(name), "%s", n->name);
		dst = pt_tree_lookup(ck, dir, name, &rc);
	} else {
		dir = NULL;
	}
	if (dst) {
		if (inside(dst, n))
			return pt_fail(err, -EINVAL, "cannot move %.*s%s into itself", SHOWN(from));
		rc = move_onto(ck, to, n, dst, &s, err);
		if (rc == 0)
			pt__edit_log(ck, PT_EDIT_MV, from, to, strlen(to), NULL);
		return rc;
	}
	if (!dir && !(dir = parent_of(ck, to, name, sizeof(name), err, &rc)))
		return rc;
	if (inside(dir, n))
		return pt_fail(err, -EINVAL, "cannot move %.*s%s into itself", SHOWN(from));
	key = key_for(ck, to, name, err, &rc);
	if (!key)
		return rc;
	edit_lock(ck);
	val = *slot_value(&s);
	if (dir == n->parent && s.kind != PT_SLOT_ITEM) {
		/* a rename: the key changes in place, the order stays */
		rc = slot_set(ck, &s, key, val);
	} else {
		kv = pairs_of(ck, dir->val);
		if (!kv || !seq_append(ck, kv, key, val))
			rc = -ENOMEM;
		else if ((rc = slot_remove(ck, &s)))
			kv->n -= 2;
	}
	if (rc) {
		pthread_mutex_unlock(&ck->tree->lock);
		return pt_fail(err, rc, "out of memory");
	}
	pt__tree_moved(ck, n, dir->val);
	edit_done(ck, n->parent->val, dir->val);
	/* the node goes to its new place now: a mount's inode that the
	 * kernel has moved names its new path at once */
	(void)pt_tree_lookup(ck, dir, name, &rc);
	pt__edit_log(ck, PT_EDIT_MV, from, to, strlen(to), NULL);
	return 0;
}

/* Add @val under the new entry @path (its directory a mapping). */
static int add_entry(struct pt_ckpt *ck, const char *path,
		     struct pt_value *val, struct pt_error *err)
{
	char name[4096];
	struct pt_node *dir;
	struct pt_value *key;
	struct pt_vseq *kv;
	int rc;

	dir = parent_of(ck, path, name, sizeof(name), err, &rc);
	if (!dir)
		return rc;
	key = key_for(ck, path, name, err, &rc);
	if (!key)
		return rc;
	edit_lock(ck);
	kv = pairs_of(ck, dir->val);
	if (!kv || !seq_append(ck, kv, key, val)) {
		pthread_mutex_unlock(&ck->tree->lock);
		return pt_fail(err, -ENOMEM, "out of memory");
	}
	return edit_done(ck, dir->val, NULL);
}

int pt_edit_mkdir(struct pt_ckpt *ck, const char *path, struct pt_error *err)
{
	struct pt_value *d;
	int rc = need_editable(ck, err);

	if (rc)
		return rc;
	if (ck->fmt->flat)
		return pt_fail(err, -EPERM,
			       "%.*s%s: a %s is one flat mapping of names to tensors (dots in the names): no directories",
			       SHOWN(path), pt_ckpt_format(ck));
	if (pt_tree_path(ck, path, &rc))
		return pt_fail(err, -EEXIST, "%.*s%s: exists", SHOWN(path));
	d = node_new(ck, PT_V_DICT);
	if (!d || !seq_init(ck, &d->u.dict.kv, 8))
		return pt_fail(err, -ENOMEM, "out of memory");
	d->aux16 = PT_C_MAP;
	rc = add_entry(ck, path, d, err);
	if (rc == 0)
		pt__edit_log(ck, PT_EDIT_MKDIR, path, NULL, 0, NULL);
	return rc;
}

/* ---- scalars ---- */

static bool parse_int(const char *t, int64_t *out)
{
	char *end;
	long long v;

	if (!*t || *t == ' ')
		return false;
	errno = 0;
	v = strtoll(t, &end, 10);
	if (errno || *end)
		return false;
	*out = v;
	return true;
}

static bool parse_float(const char *t, double *out)
{
	char *end;

	if (!*t || *t == ' ')
		return false;
	*out = strtod(t, &end);
	return !*end;
}

/*
 * The value text @t gives a scalar that was @old: of the same type (an
 * int stays an int, a float takes ints and floats, a bool True or False,
 * a str any text), or None for "None" (a None takes None, True, False, an
 * int, a float, else the text as a str).
 */
static struct pt_value *scalar_from(struct pt_ckpt *ck, const struct pt_value *old,
				    const char *t, size_t len)
{
	struct pt_value *v;
	int64_t i;
	double f;
	bool none = strcmp(t, "None") == 0;
	bool tf = strcmp(t, "True") == 0 || strcmp(t, "False") == 0;

	if (old->kind == PT_V_STR && !(old->flags & PT_VF_PY2STR))
		return pt_utf8_valid((const uint8_t *)t, len) ? str_new(ck, t, len) : NULL;
	if (none)
		return scalar_new(ck, PT_V_NONE);
	if (tf && (old->kind == PT_V_BOOL || old->kind == PT_V_NONE))
		return bool_new(ck, t[0] == 'T');
	if ((old->kind == PT_V_INT || old->kind == PT_V_BIGINT || old->kind == PT_V_NONE) &&
	    parse_int(t, &i))
		return int_new(ck, i);
	if ((old->kind == PT_V_FLOAT || old->kind == PT_V_NONE) && parse_float(t, &f)) {
		v = scalar_new(ck, PT_V_FLOAT);
		if (v)
			v->u.f = f;
		return v;
	}
	if ((old->kind == PT_V_NONE || old->kind == PT_V_STR) &&
	    pt_utf8_valid((const uint8_t *)t, len))
		return str_new(ck, t, len);
	return NULL;
}

static const char *kind_word(const struct pt_value *v)
{
	switch (v->kind) {
	case PT_V_INT:
	case PT_V_BIGINT:
		return "an int";
	case PT_V_FLOAT:
		return "a float (or an int)";
	case PT_V_BOOL:
		return "True or False";
	default:
		return "UTF-8 text";
	}
}

bool pt_edit_scalar_node(const struct pt_node *n)
{
	const struct pt_value *v = n->val;

	return n->role == R_VALUE && n->type == PT_NT_FILE && v && n->parent &&
	       n->parent->role == R_VALUE && pt__vclass(v) == PT_C_SCALAR &&
	       v->kind != PT_V_BYTES && v->kind != PT_V_BYTEARRAY;
}

int pt_edit_scalar(struct pt_ckpt *ck, const char *path, const void *text,
		   size_t len, struct pt_error *err)
{
	struct pt_value *old, *v;
	struct pt_slot s;
	struct pt_node *n;
	size_t given = len;             /* the log keeps the text as given */
	char *t;
	int rc = need_editable(ck, err);

	if (rc || !(n = find(ck, path, err, &rc)))
		return rc;
	old = n->val;
	if (!pt_edit_scalar_node(n))
		return pt_fail(err, -EINVAL,
			       "%.*s%s: not a scalar (int, float, bool, str or None)", SHOWN(path));
	rc = slot_of(ck, path, n, &s, "changed", err);
	if (rc)
		return rc;
	/* one newline ends the text, as the tree shows it (echo 7 > epoch) */
	if (len && ((const char *)text)[len - 1] == '\n')
		len--;
	if (memchr(text, '\0', len))
		return pt_fail(err, -EINVAL, "%.*s%s: the new value holds a NUL byte", SHOWN(path));
	t = strndup(text, len);
	if (!t)
		return pt_fail(err, -ENOMEM, "out of memory");
	v = scalar_from(ck, old, t, len);
	free(t);
	if (!v)
		return pt_fail(err, -EINVAL, "%.*s%s: the new value must be %s, or None",
			       SHOWN(path), kind_word(old));
	rc = replace_value(ck, &s, n, v, err);
	if (rc == 0)
		pt__edit_log(ck, PT_EDIT_SCALAR, path, text, given, NULL);
	return rc;
}

/* ---- tensors ---- */

/* collections.OrderedDict(): a tensor's backward hooks */
static struct pt_value *no_hooks(struct pt_ckpt *ck)
{
	return call_new(ck, global_new(ck, "collections", "OrderedDict"),
			tuple_new(ck, 0));
}

/*
 * The persistent id torch.save writes for a storage (docs/FORMATS.md,
 * "Storage types and dtypes"): ('storage', torch.<Type>Storage, key,
 * 'cpu', numel), or torch.storage.UntypedStorage and the byte count for
 * dtypes without a storage class.
 */
static struct pt_value *pid_new(struct pt_ckpt *ck, const struct pt_storage *st)
{
	struct pt_value *t = tuple_new(ck, 5), *p = node_new(ck, PT_V_PERSID);
	const struct pt_dtype *dt = st->dtype;

	if (!t || !p)
		return NULL;
	t->u.seq.v[0] = str_new(ck, "storage", 7);
	t->u.seq.v[1] = dt->storage ? global_new(ck, "torch", dt->storage)
				    : global_new(ck, "torch.storage", "UntypedStorage");
	t->u.seq.v[2] = str_new(ck, st->key, strlen(st->key));
	t->u.seq.v[3] = str_new(ck, "cpu", 3);
	t->u.seq.v[4] = int_new(ck, (int64_t)(dt->storage ? st->nbytes / dt->size
							   : st->nbytes));
	if (!t->u.seq.v[0] || !t->u.seq.v[1] || !t->u.seq.v[2] ||
	    !t->u.seq.v[3] || !t->u.seq.v[4])
		return NULL;
	p->u.pid = t;
	p->aux16 = PT_C_ARGPID;
	return p;
}

/* The call torch.save writes for a dense tensor over all of @st:
 * _rebuild_tensor_v2(pid, 0, shape, stride, False, OrderedDict()), or
 * _v3 with the dtype last for dtypes without a storage class. */
static struct pt_value *rebuild_new(struct pt_ckpt *ck, struct pt_storage *st,
				    const struct pt_tensor *t)
{
	bool v3 = st->dtype->storage == NULL;
	struct pt_value *a = tuple_new(ck, v3 ? 7 : 6);

	if (!a)
		return NULL;
	a->u.seq.v[0] = pid_new(ck, st);
	a->u.seq.v[1] = int_new(ck, 0);
	a->u.seq.v[2] = ints_tuple(ck, t->shape, t->rank);
	a->u.seq.v[3] = ints_tuple(ck, t->stride, t->rank);
	a->u.seq.v[4] = bool_new(ck, false);
	a->u.seq.v[5] = no_hooks(ck);
	if (v3)
		a->u.seq.v[6] = global_new(ck, "torch", st->dtype->name);
	for (size_t i = 0; i < a->u.seq.n; i++)
		if (!a->u.seq.v[i])
			return NULL;
	return call_new(ck, global_new(ck, "torch._utils",
				       v3 ? "_rebuild_tensor_v3" : "_rebuild_tensor_v2"), a);
}

/* A new storage over the caller's bytes, keyed apart from the file's. */
static struct pt_storage *storage_new(struct pt_ckpt *ck,
				      const struct pt_dtype *dt,
				      const void *bytes, uint64_t len)
{
	struct pt_storage *st = pt__alloc(ck, sizeof(*st));
	char key[32];
	int n = snprintf(key, sizeof(key), "ptfs+%u", ck->edits.next_key++);
	char *k = pt__alloc(ck, (size_t)n + 1);

	if (!st || !k)
		return NULL;
	memcpy(k, key, (size_t)n + 1);
	st->key = k;
	st->dtype = dt;
	st->nbytes = len;
	st->kind = len ? PT_ST_MEM : PT_ST_NONE;
	st->mem = bytes;
	st->location = "cpu";
	st->id = ck->n_st;
	return pt__storage_add(ck, st) == 0 ? st : NULL;
}

static int shape_numel(const struct pt_edit_tensor *et, uint64_t *numel)
{
	uint64_t n = 1;
	uint32_t i;

	for (i = 0; i < et->rank; i++) {
		if (et->shape[i] < 0 ||
		    (et->shape[i] && n > INT64_MAX / (uint64_t)et->shape[i]))
			return -EINVAL;
		n *= (uint64_t)et->shape[i];
	}
	*numel = n;
	return 0;
}

/* The value a new tensor @et gets: a tensor, or a Parameter when @like
 * (the tensor it replaces, or NULL) was one, with its requires_grad. */
static struct pt_value *tensor_new(struct pt_ckpt *ck, const char *path,
				   const struct pt_edit_tensor *et,
				   const struct pt_tensor *like,
				   struct pt_error *err, int *rc)
{
	const struct pt_dtype *dt = pt_dtype_from_torch(et->dtype);
	bool param = like && like->kind == PT_TK_PARAMETER;
	struct pt_tensor_spec sp = { 0 };
	struct pt_tensor *t;
	struct pt_storage *st;
	struct pt_value *v, *a;
	uint64_t numel;

	*rc = 0;
	if (!dt || dt->packed) {
		*rc = pt_fail(err, -EINVAL, "%.*s%s: '%s' is not a torch dtype", SHOWN(path), et->dtype);
		return NULL;
	}
	if (et->rank > ck->opts.limits.max_rank || shape_numel(et, &numel) ||
	    numel > UINT64_MAX / dt->size) {
		*rc = pt_fail(err, -EINVAL, "%.*s%s: bad shape", SHOWN(path));
		return NULL;
	}
	if (numel * dt->size != et->len) {
		*rc = pt_fail(err, -EINVAL, "%.*s%s: %" PRIu64 " bytes given, %s of that shape takes %" PRIu64,
			      SHOWN(path), et->len, dt->name, numel * dt->size);
		return NULL;
	}
	st = storage_new(ck, dt, et->bytes, et->len);
	sp.dtype = dt;
	sp.st = st;
	sp.rank = et->rank;
	sp.shape = et->shape;
	sp.requires_grad = like && like->requires_grad;
	sp.kind = param ? PT_TK_PARAMETER : PT_TK_TENSOR;
	sp.byteorder = dt->size == 1 ? '|' : ck->byteorder;
	if (!st || (*rc = pt__tensor_make(ck, &sp, &t, err)) != 0) {
		if (!*rc)
			*rc = pt_fail(err, -ENOMEM, "out of memory");
		return NULL;
	}
	v = rebuild_new(ck, st, t);
	if (v && param) {
		a = tuple_new(ck, 3);
		if (a) {
			a->u.seq.v[0] = v;
			a->u.seq.v[1] = bool_new(ck, t->requires_grad);
			a->u.seq.v[2] = no_hooks(ck);
		}
		v->aux16 = PT_C_TENSOR;
		v->aux = t;
		v = a && a->u.seq.v[1] && a->u.seq.v[2] ?
		    call_new(ck, global_new(ck, "torch._utils", "_rebuild_parameter"), a) : NULL;
	}
	if (!v) {
		*rc = pt_fail(err, -ENOMEM, "out of memory");
		return NULL;
	}
	v->aux16 = PT_C_TENSOR;
	v->aux = t;
	return v;
}

int pt_edit_tensor(struct pt_ckpt *ck, const char *path,
		   const struct pt_edit_tensor *et, bool replace,
		   struct pt_error *err)
{
	const struct pt_tensor *like = NULL;
	struct pt_value *v;
	struct pt_slot s;
	struct pt_node *n;
	int rc = need_editable(ck, err);

	if (rc)
		return rc;
	n = pt_tree_path(ck, path, &rc);
	if (n && !replace)
		return pt_fail(err, -EEXIST, "%.*s%s: exists", SHOWN(path));
	if (!n && replace)
		return pt_fail(err, -ENOENT, "%.*s%s: no such entry", SHOWN(path));
	if (n) {
		if (n->role != R_VALUE || !n->val || pt__vclass(n->val) != PT_C_TENSOR)
			return pt_fail(err, -EINVAL, "%.*s%s: not a tensor", SHOWN(path));
		like = n->val->aux;
		rc = slot_of(ck, path, n, &s, "replaced", err);
		if (rc)
			return rc;
	}
	v = tensor_new(ck, path, et, like, err, &rc);
	if (!v)
		return rc;
	if (!n) {
		rc = add_entry(ck, path, v, err);
		if (rc == 0)
			pt__edit_log(ck, PT_EDIT_TENSOR, path, NULL, 0, et);
		return rc;
	}
	rc = replace_value(ck, &s, n, v, err);
	if (rc == 0)
		pt__edit_log(ck, PT_EDIT_REPLACE, path, NULL, 0, et);
	return rc;
}

/* ---- renaming the keys of a mapping ---- */

struct renamed {
	const uint8_t *p;               /* the key's final text */
	size_t len;
	size_t at;                      /* entry index */
};

static int renamed_cmp(const void *a, const void *b)
{
	const struct renamed *x = a, *y = b;
	size_t n = x->len < y->len ? x->len : y->len;
	int c = memcmp(x->p, y->p, n);

	if (c)
		return c;
	return x->len < y->len ? -1 : x->len > y->len;
}

static struct pt_value **key_slot(const struct pt_slot *s)
{
	if (s->kind == PT_SLOT_PAIR)
		return &s->seq->v[s->pos];
	if (s->kind == PT_SLOT_LISTPAIR)
		return &s->seq->v[s->pos]->u.seq.v[0];
	return NULL;
}

/* Refuse a rename that gives two entries of @e one key. */
static int check_unique(struct renamed *r, size_t n,
			const struct pt_entry_slot *e, struct pt_error *err)
{
	size_t i;

	qsort(r, n, sizeof(*r), renamed_cmp);
	for (i = 1; i < n; i++)
		if (renamed_cmp(&r[i - 1], &r[i]) == 0)
			return pt_fail(err, -EEXIST, "%s and %s would both be named '%.*s'",
				       e[r[i - 1].at].name, e[r[i].at].name,
				       (int)(r[i].len > 200 ? 200 : r[i].len),
				       (const char *)r[i].p);
	return 0;
}

/*
 * The new text of every str key of @e (fn() of it, appended to @texts):
 * span[i] its offset and length there, or { SIZE_MAX, 0 } where it stays.
 * Refused when two keys would be one or a key could not be shown.
 */
static int plan_rename(struct pt_entry_slot *e, size_t n, pt_rename_fn fn,
		       void *ctx, struct pt_buf *texts, size_t (*span)[2],
		       struct pt_error *err)
{
	struct renamed *r = calloc(n ? n : 1, sizeof(*r));
	struct pt_buf enc;
	size_t i, k = 0;
	int rc = 0;

	if (!r)
		return pt_fail(err, -ENOMEM, "out of memory");
	pt_buf_init(&enc);
	for (i = 0; i < n && rc == 0; i++) {
		struct pt_value **ks = key_slot(&e[i].slot);
		size_t at = texts->len;

		span[i][0] = SIZE_MAX;
		span[i][1] = 0;
		if (!ks || (*ks)->kind != PT_V_STR)
			continue;
		rc = fn(ctx, (*ks)->u.s.p, (*ks)->u.s.len, texts);
		if (rc < 0) {
			rc = pt_fail(err, rc, "%s: the new key cannot be made", e[i].name);
		} else if (texts->oom) {
			rc = pt_fail(err, -ENOMEM, "out of memory");
		} else if (rc == 0) {
			texts->len = at;
		} else {
			rc = 0;
			span[i][0] = at;
			span[i][1] = texts->len - at;
		}
	}
	for (i = 0; i < n && rc == 0; i++) {
		struct pt_value **ks = key_slot(&e[i].slot);

		if (!ks || (*ks)->kind != PT_V_STR)
			continue;
		r[k].at = i;
		if (span[i][0] == SIZE_MAX) {
			r[k].p = (*ks)->u.s.p;
			r[k++].len = (*ks)->u.s.len;
			continue;
		}
		r[k].p = (const uint8_t *)texts->p + span[i][0];
		r[k].len = span[i][1];
		enc.len = 0;
		pt_name_encode(&enc, r[k].p, r[k].len);
		if (enc.len > PT_NAME_MAX)
			rc = pt_fail(err, -ENAMETOOLONG,
				     "%s: its new key of %zu bytes would be shown shortened",
				     e[i].name, r[k].len);
		k++;
	}
	if (rc == 0)
		rc = check_unique(r, k, e, err);
	pt_buf_free(&enc);
	free(r);
	return rc;
}

/* The (key, value) sequences of mapping @m that hold str keys: a dict's
 * pairs, or those set onto an OrderedDict (and its first argument's). */
static size_t pair_seqs(struct pt_value *m, struct pt_vseq **out)
{
	size_t k = 0;
	struct pt_value *a0;

	if (m->kind == PT_V_DICT) {
		out[k++] = &m->u.dict.kv;
		return k;
	}
	if (m->kind != PT_V_CALL && m->kind != PT_V_OBJ)
		return 0;
	a0 = m->u.call.args && m->u.call.args->u.seq.n ? m->u.call.args->u.seq.v[0] : NULL;
	if (a0 && a0->kind == PT_V_DICT)
		out[k++] = &a0->u.dict.kv;
	if (m->u.call.ext)
		out[k++] = &m->u.call.ext->kv;
	return k;
}

/* Where str key @p (@n bytes) is in the pairs of @seqs, or false. */
static bool pair_find(struct pt_vseq **seqs, size_t ns, const void *p, size_t n,
		      struct pt_slot *at)
{
	size_t i, j;

	for (i = 0; i < ns; i++)
		for (j = 0; j + 1 < seqs[i]->n; j += 2) {
			const struct pt_value *k = seqs[i]->v[j];

			if (k->kind == PT_V_STR && k->u.s.len == n &&
			    memcmp(k->u.s.p, p, n) == 0) {
				at->seq = seqs[i];
				at->pos = j;
				at->kind = PT_SLOT_PAIR;
				return true;
			}
		}
	return false;
}

/*
 * A state dict's _metadata (module prefix -> {'version': N}) follows its
 * keys: prefix K is renamed as "K." would be, less the final dot ("" as
 * ""), as torch's consume_prefix_in_state_dict_if_present does for
 * "module."; a prefix that becomes one already there gives it its value.
 */
static int rename_metadata(struct pt_ckpt *ck, struct pt_value *sd,
			   pt_rename_fn fn, void *ctx)
{
	struct pt_value *st = (sd->kind == PT_V_CALL || sd->kind == PT_V_OBJ) ?
			      pt_call_state(sd) : NULL;
	struct pt_vseq *seqs[2];
	struct pt_slot at, dup;
	struct pt_buf in, out;
	size_t ns, i, j;
	int rc = 0;

	if (!st || st->kind != PT_V_DICT ||
	    !pair_find((struct pt_vseq *[]){ &st->u.dict.kv }, 1, "_metadata", 9, &at))
		return 0;
	ns = pair_seqs(at.seq->v[at.pos + 1], seqs);
	pt_buf_init(&in);
	pt_buf_init(&out);
	for (i = 0; i < ns && rc == 0; i++)
		for (j = 0; j + 1 < seqs[i]->n && rc == 0; j += 2) {
			struct pt_value *k = seqs[i]->v[j], *nk;

			if (k->kind != PT_V_STR)
				continue;
			in.len = out.len = 0;
			pt_buf_add(&in, k->u.s.p, k->u.s.len);
			if (k->u.s.len)
				pt_buf_putc(&in, '.');
			rc = fn(ctx, (const uint8_t *)(in.p ? in.p : ""), in.len, &out);
			if (rc <= 0 || in.oom || out.oom) {
				rc = rc < 0 ? rc : (in.oom || out.oom) ? -ENOMEM : 0;
				continue;
			}
			rc = 0;
			if (out.len && out.p[out.len - 1] == '.')
				out.len--;
			if (pair_find(seqs, ns, out.p ? out.p : "", out.len, &dup) &&
			    !(dup.seq == seqs[i] && dup.pos == j)) {
				dup.seq->v[dup.pos + 1] = seqs[i]->v[j + 1];
				seq_cut(seqs[i], j, 2);
				j -= 2;
				continue;
			}
			nk = str_new(ck, out.p ? out.p : "", out.len);
			if (!nk)
				rc = -ENOMEM;
			else
				seqs[i]->v[j] = nk;
		}
	pt_buf_free(&in);
	pt_buf_free(&out);
	return rc;
}

int pt_edit_rename(struct pt_ckpt *ck, const char *dir, pt_rename_fn fn,
		   void *ctx, struct pt_buf *log, struct pt_error *err)
{
	struct pt_entry_slot *e = NULL;
	struct pt_buf texts;
	size_t (*span)[2] = NULL;
	struct pt_node *d;
	size_t n = 0, i, renamed = 0;
	int rc = need_editable(ck, err);

	if (rc || !(d = find(ck, dir, err, &rc)))
		return rc;
	if (!is_mapping(d))
		return pt_fail(err, -ENOTDIR, "%.*s%s: not a mapping", SHOWN(*dir ? dir : "/"));
	pt_buf_init(&texts);
	rc = slots_of(ck, d->val, &e, &n);
	if (rc == 0 && !(span = calloc(n ? n : 1, sizeof(*span))))
		rc = -ENOMEM;
	if (rc) {
		rc = pt_fail(err, rc, "%.*s%s: %s", SHOWN(*dir ? dir : "/"), strerror(-rc));
		goto out;
	}
	rc = plan_rename(e, n, fn, ctx, &texts, span, err);
	edit_lock(ck);
	for (i = 0; i < n && rc == 0; i++) {
		struct pt_value **ks = key_slot(&e[i].slot), *k;

		if (span[i][0] == SIZE_MAX)
			continue;
		k = str_new(ck, texts.p + span[i][0], span[i][1]);
		if (!k) {
			rc = pt_fail(err, -ENOMEM, "out of memory");
			break;
		}
		if (log)
			pt_buf_printf(log, "%.*s -> %.*s\n", (int)(*ks)->u.s.len,
				      (const char *)(*ks)->u.s.p, (int)span[i][1],
				      texts.p + span[i][0]);
		rc = slot_set(ck, &e[i].slot, k, *slot_value(&e[i].slot));
		renamed++;
	}
	if (rc == 0 && renamed)
		rc = rename_metadata(ck, d->val, fn, ctx);
	if (renamed) {
		edit_done(ck, d->val, NULL);    /* what changed, even on failure */
		pt__edit_log_lost(ck, "rename of keys through a rule");
	}
	else
		pthread_mutex_unlock(&ck->tree->lock);
	if (rc > 0 || (rc < 0 && !err->msg[0]))
		rc = pt_fail(err, rc < 0 ? rc : -ENOMEM, "out of memory");
out:
	pt_buf_free(&texts);
	free(span);
	free(e);
	return rc;
}

int pt_edit_commit(struct pt_ckpt *ck, struct pt_error *err)
{
	struct holed_was *was;
	int rc = need_restructurable(ck, err);

	if (rc || ck->edits.n == 0)
		return rc;
	if (close_holes(ck, &was))
		return pt_fail(err, -ENOMEM, "out of memory");
	rc = ck->fmt->restructure(ck, false, NULL, err);
	open_holes(ck, was, rc == 0);
	if (rc == 0)
		pt__edit_log_clear(ck);
	return rc;
}

int pt_edit_size(struct pt_ckpt *ck, uint64_t *size, struct pt_error *err)
{
	struct holed_was *was;
	int rc = need_restructurable(ck, err);

	if (rc)
		return rc;
	if (close_holes(ck, &was))
		return pt_fail(err, -ENOMEM, "out of memory");
	rc = ck->fmt->restructure(ck, true, size, err);
	open_holes(ck, was, false);
	return rc;
}

/* ---- a mount's new tensors: NAME.json written, values put back ---- */

/* The elements of @shape (rank @rank), or false on overflow. */
static bool spec_numel(const int64_t *shape, uint32_t rank, uint64_t *numel)
{
	uint64_t n = 1;
	uint32_t i;

	for (i = 0; i < rank; i++) {
		if (shape[i] && n > INT64_MAX / (uint64_t)shape[i])
			return false;
		n *= (uint64_t)shape[i];
	}
	*numel = n;
	return true;
}

/* A JSON array of at most @cap non-negative integers into @v. */
static int js_ints(struct pt_js *j, int64_t *v, uint32_t cap, uint32_t *n)
{
	bool empty, more = true;
	uint64_t d;
	int rc = pt__js_open(j, '[', &empty);

	*n = 0;
	while (!rc && !empty && more) {
		if (*n == cap)
			return pt__js_fail(j, "more than 64 dimensions");
		rc = pt__js_uint(j, INT64_MAX, &d);
		if (!rc)
			v[(*n)++] = (int64_t)d;
		if (!rc)
			rc = pt__js_next(j, ']', &more);
	}
	return rc;
}

/* Strides in elements that C order gives @shape (a dimension of one
 * element may have any: torch's is_contiguous() says the same). */
static bool c_order(const int64_t *shape, const int64_t *stride, uint32_t rank)
{
	int64_t want = 1;
	uint32_t i;

	for (i = rank; i-- > 0;) {
		if (shape[i] > 1 && stride[i] != want)
			return false;
		want *= shape[i] ? shape[i] : 1;
	}
	return true;
}

static int spec_members(struct pt_js *j, struct pt_edit_spec *sp,
			int64_t *stride, uint32_t *nstride, bool *shape_seen)
{
	const uint8_t *k, *s;
	size_t kn, sn;
	bool empty, more = true;
	char name[32];
	int rc = pt__js_open(j, '{', &empty);

	while (!rc && !empty && more) {
		rc = pt__js_key(j, &k, &kn);
		if (rc)
			break;
		if (kn == 5 && memcmp(k, "dtype", 5) == 0) {
			rc = pt__js_peek(j) == '"' ? pt__js_str(j, &s, &sn) :
			     pt__js_fail(j, "\"dtype\" must be a string");
			if (!rc && sn < sizeof(name)) {
				memcpy(name, s, sn);
				name[sn] = '\0';
				sp->dtype = pt_dtype_from_torch(name) ?
					    pt_dtype_from_torch(name)->name : NULL;
			}
			if (!rc && (sn >= sizeof(name) || !sp->dtype ||
				    pt_dtype_from_torch(name)->packed))
				rc = pt__js_fail(j, "\"dtype\" is not a torch dtype (float32, bfloat16, int64, ...)");
		} else if (kn == 5 && memcmp(k, "shape", 5) == 0) {
			rc = js_ints(j, sp->shape, PT_EDIT_MAX_RANK, &sp->rank);
			*shape_seen = true;
		} else if (kn == 6 && memcmp(k, "stride", 6) == 0) {
			rc = js_ints(j, stride, PT_EDIT_MAX_RANK, nstride);
		} else {
			rc = pt__js_skip(j);    /* ptfs's other keys */
		}
		if (!rc)
			rc = pt__js_next(j, '}', &more);
	}
	return rc;
}

int pt_edit_spec_parse(const void *text, size_t len, struct pt_edit_spec *sp,
		       struct pt_error *err)
{
	int64_t stride[PT_EDIT_MAX_RANK];
	uint32_t nstride = UINT32_MAX;
	bool shape_seen = false;
	uint64_t numel = 0;
	struct pt_js j;
	int rc = pt__js_init(&j, text, len, "the JSON", err);

	if (rc)
		return pt_fail(err, rc, "out of memory");
	memset(sp, 0, sizeof(*sp));
	if (pt__js_peek(&j) != '{')
		rc = pt__js_fail(&j, "not a JSON object");
	if (!rc)
		rc = spec_members(&j, sp, stride, &nstride, &shape_seen);
	if (!rc)
		rc = pt__js_end(&j);
	if (!rc && (!sp->dtype || !shape_seen))
		rc = pt_fail(err, -EINVAL, "\"dtype\" and \"shape\" are needed");
	if (!rc && nstride != UINT32_MAX &&
	    (nstride != sp->rank || !c_order(sp->shape, stride, sp->rank)))
		rc = pt_fail(err, -EINVAL, "\"stride\" must be C order for that shape (or left out)");
	if (!rc && (!spec_numel(sp->shape, sp->rank, &numel) ||
		    numel > UINT64_MAX / pt_dtype_from_torch(sp->dtype)->size))
		rc = pt_fail(err, -EINVAL, "\"shape\" too large");
	if (!rc)
		sp->nbytes = numel * pt_dtype_from_torch(sp->dtype)->size;
	pt__js_free(&j);
	return rc == -EBADMSG ? -EINVAL : rc;
}

struct pt_value *pt_edit_value(struct pt_ckpt *ck, const char *path)
{
	struct pt_node *n = pt_tree_path(ck, path, NULL);

	return n && n->role == R_VALUE ? n->val : NULL;
}

int pt_edit_put_back(struct pt_ckpt *ck, const char *path, struct pt_value *v,
		     struct pt_error *err)
{
	struct pt_slot s;
	struct pt_node *n;
	int rc = need_editable(ck, err);

	if (rc)
		return rc;
	n = find(ck, path, err, &rc);
	if (!n)
		return rc;
	rc = slot_of(ck, path, n, &s, "replaced", err);
	if (rc)
		return rc;
	return replace_value(ck, &s, n, v, err);
}
