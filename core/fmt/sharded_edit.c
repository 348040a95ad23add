/* SPDX-License-Identifier: MIT */
/*
 * sharded_edit.c -- a sharded checkpoint (fmt/sharded.c) after structural
 * edits (ckpt/edit.c): the edited root, one flat dict of tensors, is
 * shared out among the shards again, every shard whose tensors changed is
 * written anew by its own format (struct pt_format.stage: a safetensors
 * file's new header, a torch.save archive's new data.pkl), the index gets
 * the new weight_map and metadata.total_size, and only when every new file
 * is written and sealed are they renamed over the old ones
 * (docs/FORMATS.md, "Restructuring a sharded checkpoint").
 *
 * Where each tensor goes: a tensor of a shard stays in that shard, under
 * its new name and at its place in the shard's order; a tensor set anew
 * takes the place of the one it replaces; a new key goes last into the
 * shard holding the fewest tensor bytes.  A shard left without tensors is
 * written empty and drops out of the weight_map (no file is deleted).
 * What a shard holds that the index never named stays in it.
 *
 * The index is written as transformers' save_pretrained writes it: its
 * weight_map sorted by key (json.dumps(sort_keys=True), indent 2), every
 * other byte of it as it was but the value of metadata.total_size, the sum
 * of the tensors' bytes.
 */
#include <errno.h>
#include <limits.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

#include <uthash.h>

#include "base/json.h"
#include "ckpt/ckpt_i.h"

/* A name in a message: at most 80 bytes of it. */
#define SHOWN(p, n) (int)((n) > 80 ? 80 : (n)), (const char *)(p)

struct ent {                            /* an entry of the edited root */
	struct pt_value *key;
	struct pt_value *val;
	const struct pt_tensor *t;
	size_t part;
	bool own;                       /* one of its shard's tensors (else
					 * made by an edit) */
	bool placed;                    /* a new tensor put in its shard */
	UT_hash_handle hh;              /* by tensor (a shard's own) */
	UT_hash_handle hk;              /* by key (a new one) */
};

struct part {                           /* one shard */
	struct pt_ckpt *ck;
	const uint8_t *name;            /* as the index names it */
	size_t name_len;
	struct pt_value *was;           /* its root before */
	struct pt_value *root;          /* after: NULL while untouched */
	uint64_t bytes;                 /* tensor bytes it gets */
	size_t n;                       /* tensors it gets */
	uint64_t size;                  /* its new file's */
	bool sealed;                    /* r is a sealed new file */
	struct pt_replace r;
	UT_hash_handle hh;              /* by name */
	UT_hash_handle hc;              /* by checkpoint */
};

struct oldkey {                         /* a weight_map key before */
	const uint8_t *p;
	size_t len;
	size_t part;
	UT_hash_handle hh;
};

struct plan {
	struct pt_ckpt *ck;
	struct ent *e;
	size_t n;
	struct ent *by_t;
	struct ent *by_key;
	struct part *p;
	size_t np;
	struct part *by_name;
	struct part *by_ck;
	struct ent **news;              /* the entries made by edits */
	size_t n_news;
	struct oldkey *old;             /* hash, the array in oldkeys */
	struct oldkey *oldkeys;
	struct pt_js j;                 /* the old index, scanned */
	size_t wm[2], ts[2];            /* where its weight_map and
					 * total_size values lie ({0, 0}:
					 * absent) */
	struct pt_buf index;            /* the new index */
	bool index_new;                 /* differs from the old one */
	bool adds;                      /* the new weight_map names a (key,
					 * shard) the old one did not */
	uint64_t total;                 /* the tensors' bytes */
	struct pt_error *err;
};

static int oom(struct plan *pl)
{
	return pt_fail(pl->err, -ENOMEM, "out of memory");
}

/* ---- the old index ---- */

static size_t value_at(const struct pt_js *j)
{
	size_t i = j->pos;

	while (i < j->len && (j->p[i] == ' ' || j->p[i] == '\t' ||
			      j->p[i] == '\n' || j->p[i] == '\r'))
		i++;
	return i;
}

static bool key_is(const uint8_t *k, size_t n, const char *s)
{
	return n == strlen(s) && memcmp(k, s, n) == 0;
}

/* The old weight_map: each key's shard. */
static int old_weight_map(struct plan *pl)
{
	struct pt_js *j = &pl->j;
	size_t cap = 0, n = 0;
	bool empty, more = true;
	int rc = pt__js_open(j, '{', &empty);

	while (rc == 0 && !empty && more) {
		const uint8_t *k, *f;
		size_t kn, fn;
		struct part *p;
		struct oldkey *o;

		rc = pt__js_key(j, &k, &kn);
		if (rc == 0)
			rc = pt__js_str(j, &f, &fn);
		if (rc)
			break;
		HASH_FIND(hh, pl->by_name, f, fn, p);
		if (!p)                 /* sh_open() found them all */
			return pt_fail(pl->err, -ESTALE, "index: shard '%.*s' is gone",
				       SHOWN(f, fn));
		if (!pt_grow((void **)&pl->oldkeys, &cap, n, sizeof(*pl->oldkeys)))
			return oom(pl);
		o = &pl->oldkeys[n++];
		o->p = k;
		o->len = kn;
		o->part = (size_t)(p - pl->p);
		rc = pt__js_next(j, '}', &more);
	}
	/* the array is final: hash it */
	while (rc == 0 && n--)
		HASH_ADD_KEYPTR(hh, pl->old, pl->oldkeys[n].p, pl->oldkeys[n].len,
				&pl->oldkeys[n]);
	return rc;
}

/* "metadata": {..., "total_size": N, ...} */
static int old_metadata(struct plan *pl)
{
	struct pt_js *j = &pl->j;
	bool empty, more = true;
	int rc;

	if (pt__js_peek(j) != '{')
		return pt__js_skip(j);
	rc = pt__js_open(j, '{', &empty);
	while (rc == 0 && !empty && more) {
		const uint8_t *k;
		size_t kn;

		rc = pt__js_key(j, &k, &kn);
		if (rc)
			break;
		if (key_is(k, kn, "total_size"))
			pl->ts[0] = value_at(j);
		rc = pt__js_skip(j);
		if (key_is(k, kn, "total_size"))
			pl->ts[1] = j->pos;
		if (rc == 0)
			rc = pt__js_next(j, '}', &more);
	}
	return rc;
}

/* Scan the index as it was (/.ptfs/index.json: the text it opened). */
static int old_index(struct plan *pl)
{
	struct pt_ckpt *ck = pl->ck;
	struct pt_js *j = &pl->j;
	bool empty, more = true;
	int i, rc;

	for (i = 0; i < ck->n_meta_files; i++)
		if (strcmp(ck->meta_files[i].name, "index.json") == 0)
			break;
	if (i == ck->n_meta_files)
		return pt_fail(pl->err, -EINVAL, "the index's text is not kept");
	rc = pt__js_init(j, (const uint8_t *)ck->meta_files[i].data,
			 ck->meta_files[i].len, "index", pl->err);
	if (rc == 0)
		rc = pt__js_open(j, '{', &empty);
	while (rc == 0 && !empty && more) {
		const uint8_t *k;
		size_t kn;

		rc = pt__js_key(j, &k, &kn);
		if (rc)
			break;
		if (key_is(k, kn, "weight_map")) {
			pl->wm[0] = value_at(j);
			rc = old_weight_map(pl);
			pl->wm[1] = j->pos;
		} else if (key_is(k, kn, "metadata")) {
			rc = old_metadata(pl);
		} else {
			rc = pt__js_skip(j);
		}
		if (rc == 0)
			rc = pt__js_next(j, '}', &more);
	}
	return rc;
}

/* ---- sharing the tensors out ---- */

static int shards(struct plan *pl, const struct pt_shard_ref *sh, size_t n)
{
	size_t i;

	pl->np = n;
	pl->p = calloc(n ? n : 1, sizeof(*pl->p));
	if (!pl->p)
		return oom(pl);
	for (i = 0; i < n; i++) {
		struct part *p = &pl->p[i];

		p->ck = sh[i].ck;
		p->name = sh[i].name;
		p->name_len = sh[i].name_len;
		p->was = p->ck->root;
		if (!p->ck->fmt->stage || !pt_source_local_path(p->ck->src))
			return pt_fail(pl->err, -EROFS,
				       "shard '%.*s': a %s shard cannot be rewritten",
				       SHOWN(p->name, p->name_len), pt_ckpt_format(p->ck));
		HASH_ADD_KEYPTR(hh, pl->by_name, p->name, p->name_len, p);
		HASH_ADD(hc, pl->by_ck, ck, sizeof(p->ck), p);
	}
	return 0;
}

/* The shard a tensor of the root came from (its storage's home:
 * sharded.c), or SIZE_MAX: an edit made it. */
static size_t home_part(const struct plan *pl, const struct pt_tensor *t)
{
	struct part *p;

	HASH_FIND(hc, pl->by_ck, &t->st->home, sizeof(t->st->home), p);
	return p ? (size_t)(p - pl->p) : SIZE_MAX;
}

/* The entries of the edited root, each with its shard. */
static int entries(struct plan *pl)
{
	const struct pt_vseq *kv = &pl->ck->root->u.dict.kv;
	size_t i, s, least;

	if (pl->ck->root->kind != PT_V_DICT)
		return pt_fail(pl->err, -EINVAL, "the root is no longer a dict");
	pl->e = calloc(kv->n / 2 + 1, sizeof(*pl->e));
	pl->news = calloc(kv->n / 2 + 1, sizeof(*pl->news));
	if (!pl->e || !pl->news)
		return oom(pl);
	for (i = 0; i + 1 < kv->n; i += 2) {
		struct ent *e = &pl->e[pl->n++];
		struct pt_value *k = kv->v[i];
		const struct pt_value *v = kv->v[i + 1];
		struct oldkey *o;

		e->key = k;
		e->val = kv->v[i + 1];
		e->t = v->aux16 == PT_C_TENSOR ? v->aux : NULL;
		if (k->kind != PT_V_STR)
			return pt_fail(pl->err, -EINVAL,
				       "a sharded checkpoint's names are strings");
		if (!e->t)
			return pt_fail(pl->err, -EINVAL,
				       "a sharded checkpoint holds tensors only: '%.*s' is not one",
				       SHOWN(k->u.s.p, k->u.s.len));
		e->part = home_part(pl, e->t);
		e->own = e->part != SIZE_MAX;
		if (!e->own) {
			HASH_FIND(hh, pl->old, k->u.s.p, k->u.s.len, o);
			e->part = o ? o->part : SIZE_MAX;
			HASH_ADD_KEYPTR(hk, pl->by_key, k->u.s.p, k->u.s.len, e);
			pl->news[pl->n_news++] = e;
		} else {
			HASH_ADD_PTR(pl->by_t, t, e);
		}
		if (e->part != SIZE_MAX) {
			pl->p[e->part].bytes += e->t->nbytes;
			pl->p[e->part].n++;
		}
		pl->total += e->t->nbytes;
	}
	/* new keys: each to the shard holding the fewest bytes then */
	for (i = 0; i < pl->n_news; i++) {
		struct ent *e = pl->news[i];

		if (e->part != SIZE_MAX)
			continue;
		if (!pl->np)
			return pt_fail(pl->err, -EINVAL, "the index names no shard");
		for (least = 0, s = 1; s < pl->np; s++)
			if (pl->p[s].bytes <= pl->p[least].bytes)
				least = s;
		e->part = least;
		pl->p[least].bytes += e->t->nbytes;
		pl->p[least].n++;
	}
	return 0;
}

/* The (key, value) sequences of a shard's root (a dict, or an
 * OrderedDict: the pairs of its argument and those set onto it). */
static size_t root_seqs(struct pt_value *r, struct pt_vseq **out)
{
	struct pt_value *a0;
	size_t k = 0;

	if (r->kind == PT_V_DICT) {
		out[k++] = &r->u.dict.kv;
		return k;
	}
	if (r->kind != PT_V_CALL && r->kind != PT_V_OBJ)
		return 0;
	a0 = r->u.call.args && r->u.call.args->u.seq.n ?
	     r->u.call.args->u.seq.v[0] : NULL;
	if (a0 && a0->kind == PT_V_DICT)
		out[k++] = &a0->u.dict.kv;
	if (r->u.call.ext)
		out[k++] = &r->u.call.ext->kv;
	return k;
}

/* A torch.save shard's new pickle names the storage of new tensor @e by
 * its key (zip_edit.c): make it one of shard @p's.  0 or -ENOMEM. */
static int own_storage(struct part *p, const struct ent *e)
{
	if (pt__storage_find(p->ck, e->t->st->key))
		return 0;
	return pt__storage_add(p->ck, e->t->st);
}

/* The new pairs of shard @p in @kv: its own in its order (renamed, the
 * removed left out or replaced by a new tensor of their key, what the
 * index did not name kept), then its other new tensors in the root's
 * order. */
static int new_pairs(struct plan *pl, struct part *p, struct pt_vseq *kv)
{
	struct pt_vseq *seqs[2];
	size_t ns = root_seqs(p->was, seqs), i, j, cap = 0;

	for (i = 0; i < ns; i++)
		cap += seqs[i]->n;
	cap += 2 * p->n;
	kv->v = pt__alloc(pl->ck, (cap ? cap : 1) * sizeof(*kv->v));
	kv->n = 0;
	kv->cap = cap;
	if (!kv->v)
		return oom(pl);
	for (i = 0; i < ns; i++)
		for (j = 0; j + 1 < seqs[i]->n; j += 2) {
			struct pt_value *k = seqs[i]->v[j], *v = seqs[i]->v[j + 1];
			const struct pt_tensor *t = v->aux16 == PT_C_TENSOR ? v->aux : NULL;
			struct ent *e = NULL;

			if (t && t->st->home == p->ck) {
				HASH_FIND_PTR(pl->by_t, &t, e);
				if (!e)         /* removed, or set anew */
					HASH_FIND(hk, pl->by_key, k->u.s.p, k->u.s.len, e);
				if (!e || e->placed || e->part != (size_t)(p - pl->p))
					continue;
				if (e->t != t) {        /* a new tensor */
					e->placed = true;
					v = e->val;
					if (own_storage(p, e))
						return oom(pl);
				}
				k = e->key;
			}
			kv->v[kv->n++] = k;
			kv->v[kv->n++] = v;
		}
	for (i = 0; i < pl->n_news; i++) {
		struct ent *e = pl->news[i];

		if (e->part != (size_t)(p - pl->p) || e->placed)
			continue;
		kv->v[kv->n++] = e->key;
		kv->v[kv->n++] = e->val;
		if (own_storage(p, e))
			return oom(pl);
	}
	return 0;
}

static bool same_pairs(const struct pt_vseq *a, struct pt_vseq *const *b,
		       size_t nb)
{
	size_t i, j, at = 0;

	for (i = 0; i < nb; i++)
		for (j = 0; j < b[i]->n; j++, at++) {
			const struct pt_value *x, *y = b[i]->v[j];

			if (at >= a->n)
				return false;
			x = a->v[at];
			if (x != y && (j % 2 || x->kind != PT_V_STR ||
				       y->kind != PT_V_STR || x->u.s.len != y->u.s.len ||
				       memcmp(x->u.s.p, y->u.s.p, x->u.s.len)))
				return false;
		}
	return at == a->n;
}

/* Shard @p's new root, when its pairs change (else p->root stays NULL):
 * a copy of its old root node holding the new pairs. */
static int new_root(struct plan *pl, struct part *p)
{
	struct pt_vseq kv, *seqs[2];
	size_t ns = root_seqs(p->was, seqs);
	struct pt_value *r, *a0;
	int rc;

	if (!ns && (p->was->kind != PT_V_CALL && p->was->kind != PT_V_OBJ))
		return pt_fail(pl->err, -EINVAL, "shard '%.*s' is not a dict of tensors",
			       SHOWN(p->name, p->name_len));
	rc = new_pairs(pl, p, &kv);
	if (rc || same_pairs(&kv, seqs, ns))
		return rc;
	r = pt__alloc(pl->ck, sizeof(*r));
	if (!r)
		return oom(pl);
	*r = *p->was;
	if (r->kind == PT_V_DICT) {
		r->u.dict.kv = kv;
		p->root = r;
		return 0;
	}
	/* an OrderedDict: every pair set onto it, none in its argument */
	r->u.call.ext = pt__alloc(pl->ck, sizeof(*r->u.call.ext));
	if (!r->u.call.ext)
		return oom(pl);
	if (p->was->u.call.ext)
		*r->u.call.ext = *p->was->u.call.ext;
	else
		memset(r->u.call.ext, 0, sizeof(*r->u.call.ext));
	r->u.call.ext->kv = kv;
	a0 = r->u.call.args && r->u.call.args->u.seq.n ?
	     r->u.call.args->u.seq.v[0] : NULL;
	if (a0 && a0->kind == PT_V_DICT && a0->u.dict.kv.n) {
		struct pt_value *args = pt__alloc(pl->ck, sizeof(*args));
		struct pt_value *d = pt__alloc(pl->ck, sizeof(*d));
		struct pt_value **v = pt__alloc(pl->ck, r->u.call.args->u.seq.n * sizeof(*v));

		if (!args || !d || !v)
			return oom(pl);
		*args = *r->u.call.args;
		memcpy(v, args->u.seq.v, args->u.seq.n * sizeof(*v));
		*d = *a0;
		d->u.dict.kv.n = 0;
		v[0] = d;
		args->u.seq.v = v;
		r->u.call.args = args;
	}
	p->root = r;
	return 0;
}

/* ---- the new index ---- */

static int ent_cmp(const void *a, const void *b)
{
	const struct ent *x = *(const struct ent *const *)a;
	const struct ent *y = *(const struct ent *const *)b;
	size_t n = x->key->u.s.len < y->key->u.s.len ? x->key->u.s.len : y->key->u.s.len;
	int c = memcmp(x->key->u.s.p, y->key->u.s.p, n);

	if (c)
		return c;
	return x->key->u.s.len < y->key->u.s.len ? -1 : x->key->u.s.len > y->key->u.s.len;
}

/* The weight_map's new text: sorted, with indent 2 as transformers
 * writes it, or on one line (json.dumps' default) when it was. */
static int weight_map_text(struct plan *pl, struct pt_buf *b)
{
	struct ent **v = malloc((pl->n ? pl->n : 1) * sizeof(*v));
	const uint8_t *old = pl->j.p + pl->wm[0];
	bool flat = pl->wm[1] - pl->wm[0] > 2 && !memchr(old, '\n', pl->wm[1] - pl->wm[0]);
	size_t i;

	if (!v)
		return oom(pl);
	for (i = 0; i < pl->n; i++)
		v[i] = &pl->e[i];
	qsort(v, pl->n, sizeof(*v), ent_cmp);
	pt_buf_puts(b, !pl->n ? "{}" : flat ? "{" : "{\n");
	for (i = 0; i < pl->n; i++) {
		const struct part *p = &pl->p[v[i]->part];
		struct oldkey *o;

		pt_buf_puts(b, flat ? "\"" : "    \"");
		pt_json_str(b, v[i]->key->u.s.p, v[i]->key->u.s.len);
		pt_buf_puts(b, "\": \"");
		pt_json_str(b, p->name, p->name_len);
		if (i + 1 < pl->n)
			pt_buf_puts(b, flat ? "\", " : "\",\n");
		else
			pt_buf_puts(b, flat ? "\"}" : "\"\n  }");
		HASH_FIND(hh, pl->old, v[i]->key->u.s.p, v[i]->key->u.s.len, o);
		if (!o || o->part != v[i]->part)
			pl->adds = true;
	}
	free(v);
	return b->oom ? oom(pl) : 0;
}

/* The old index with the new weight_map and total_size put in. */
static int index_text(struct plan *pl)
{
	const uint8_t *old = pl->j.p;
	size_t cut[2][2] = { { pl->wm[0], pl->wm[1] }, { pl->ts[0], pl->ts[1] } };
	bool wm_first = pl->ts[1] == 0 || pl->wm[0] < pl->ts[0];
	size_t at = 0, k;
	int rc = 0;

	if (pl->wm[1] == 0)
		return pt_fail(pl->err, -EINVAL, "index: no weight_map");
	for (k = 0; k < 2 && rc == 0; k++) {
		size_t c = wm_first ? k : 1 - k;

		if (cut[c][1] == 0)
			continue;
		pt_buf_add(&pl->index, old + at, cut[c][0] - at);
		if (c == 0)
			rc = weight_map_text(pl, &pl->index);
		else
			pt_buf_printf(&pl->index, "%" PRIu64, pl->total);
		at = cut[c][1];
	}
	pt_buf_add(&pl->index, old + at, pl->j.len - at);
	if (rc == 0 && pl->index.oom)
		rc = oom(pl);
	pl->index_new = pl->index.len != pl->j.len ||
			memcmp(pl->index.p, old, pl->j.len) != 0;
	return rc;
}

/* ---- the commit ---- */

/* Shard @p's new file: its size (@dry) or sealed beside it. */
static int shard_write(struct plan *pl, struct part *p, bool dry)
{
	struct pt_ckpt *sub = p->ck;
	int rc;

	sub->root = p->root;
	rc = dry ? sub->fmt->restructure(sub, true, &p->size, pl->err)
		 : sub->fmt->stage(sub, &p->r, pl->err);
	sub->root = p->was;
	if (rc)
		pt_error_prefix(pl->err, "shard '%.*s'", SHOWN(p->name, p->name_len));
	else
		p->sealed = !dry;
	return rc;
}

/* Room for every new file beside the index (the shards are files of its
 * directory), before anything is written. */
static int space(struct plan *pl, uint64_t need, size_t files)
{
	const char *path = pt_source_local_path(pl->ck->src);
	struct statvfs vfs;
	char *dir = strdup(path ? path : ".");
	char *slash = dir ? strrchr(dir, '/') : NULL;
	uint64_t avail;
	int rc = 0;

	if (!dir)
		return oom(pl);
	if (slash)
		*(slash == dir ? slash + 1 : slash) = '\0';
	else
		strcpy(dir, ".");
	avail = statvfs(dir, &vfs) == 0 && vfs.f_blocks ?
		(uint64_t)vfs.f_bavail * vfs.f_frsize : UINT64_MAX;
	if (need > avail)
		rc = pt_fail(pl->err, -ENOSPC,
			     "needs %" PRIu64 " bytes in %s for %zu new files, %" PRIu64 " free: %s",
			     need, dir, files, avail, strerror(ENOSPC));
	free(dir);
	return rc;
}

/* The index's new file, sealed beside it. */
static int index_write(struct plan *pl, struct pt_replace *r)
{
	struct pt_replace_expect ex = { 0 };
	struct pt_ckpt *ck = pl->ck;
	int rc = pt_source_check(ck->src, PT_CHECK_NAME, pl->err);

	ex.size = (off_t)ck->src->size;
	ex.mtime = ck->src->mtime;
	if (rc == 0)
		rc = pt_replace_begin(r, pt_source_local_path(ck->src), &ex, pl->err);
	if (rc)
		return rc;
	rc = pt_replace_write(r, pl->index.p, pl->index.len, 0, pl->err);
	if (rc) {
		pt_replace_abort(r);
		return rc;
	}
	return pt_replace_seal(r, pl->err);
}

/*
 * Rename the sealed files over the old ones: the index first when the
 * edits only take names out of it (a crash between two renames leaves an
 * index whose every name is in its shard, old or new), else last (then
 * the shards hold the new names before the index gives them).
 */
static int rename_all(struct plan *pl, struct pt_replace *ir)
{
	size_t n = 0, i, k, done = 0;
	struct pt_replace **order = calloc(pl->np + 1, sizeof(*order));
	char names[160] = "";
	int rc = 0;

	if (!order) {
		for (i = 0; i < pl->np; i++)
			if (pl->p[i].sealed)
				pt_replace_abort(&pl->p[i].r);
		if (ir)
			pt_replace_abort(ir);
		return oom(pl);
	}
	if (ir && !pl->adds)
		order[n++] = ir;
	for (i = 0; i < pl->np; i++)
		if (pl->p[i].sealed) {
			order[n++] = &pl->p[i].r;
			pl->p[i].sealed = false;
		}
	if (ir && pl->adds)
		order[n++] = ir;
	for (k = 0; k < n; k++) {
		const char *slash = strrchr(order[k]->real, '/');
		char base[PATH_MAX];
		size_t len = strlen(names);

		if (rc) {
			pt_replace_abort(order[k]);
			continue;
		}
		/* its name, for the message: the rename frees it */
		snprintf(base, sizeof(base), "%s", slash ? slash + 1 : order[k]->real);
		rc = pt_replace_rename(order[k], pl->err);
		if (rc == 0)
			done++;
		if (rc == 0 && len + strlen(base) + 3 < sizeof(names)) {
			if (len) {
				memcpy(names + len, ", ", 2);
				len += 2;
			}
			memcpy(names + len, base, strlen(base) + 1);
		}
	}
	if (rc && done)
		pt_error_prefix(pl->err, "%zu of %zu files replaced (%s), the rest not",
				done, n, names);
	free(order);
	return rc;
}

static int commit(struct plan *pl)
{
	struct pt_replace ir;
	uint64_t need = pl->index_new ? pl->index.len : 0;
	size_t i, files = 0;
	char note[512];
	int rc = 0;

	for (i = 0; i < pl->np && rc == 0; i++)
		if (pl->p[i].root) {
			rc = shard_write(pl, &pl->p[i], true);
			need += pl->p[i].size;
			files++;
		}
	files += pl->index_new;
	if (rc == 0)
		rc = space(pl, need, files);
	/* what a killed commit left beside the shards goes first, as a
	 * writable open of a file does (container/replace.h) */
	for (i = 0; i < pl->np && rc == 0; i++)
		if (pl->p[i].root)
			pt_replace_sweep(pt_source_local_path(pl->p[i].ck->src), false,
					 true, note, sizeof(note));
	for (i = 0; i < pl->np && rc == 0; i++)
		if (pl->p[i].root)
			rc = shard_write(pl, &pl->p[i], false);
	if (rc == 0 && pl->index_new)
		rc = index_write(pl, &ir);
	if (rc == 0)
		rc = rename_all(pl, pl->index_new ? &ir : NULL);
	for (i = 0; i < pl->np; i++)
		if (pl->p[i].sealed)    /* rename_all() not reached */
			pt_replace_abort(&pl->p[i].r);
	if (rc) {
		pt_error_prefix(pl->err, "commit (rewrite)");
		return rc;
	}
	snprintf(pl->ck->last_commit, sizeof(pl->ck->last_commit),
		 "rewrite, %" PRIu64 " bytes written in %zu files", need, files);
	return 0;
}

static void plan_free(struct plan *pl)
{
	HASH_CLEAR(hh, pl->by_t);
	HASH_CLEAR(hk, pl->by_key);
	HASH_CLEAR(hh, pl->by_name);
	HASH_CLEAR(hc, pl->by_ck);
	HASH_CLEAR(hh, pl->old);
	free(pl->oldkeys);
	free(pl->e);
	free(pl->news);
	free(pl->p);
	pt__js_free(&pl->j);
	pt_buf_free(&pl->index);
}

/*
 * struct pt_format.restructure of sharded checkpoints (fmt.h).  With @dry, *@size
 * is the size the index would have (the shards' are not counted: the
 * checkpoint's file is the index).
 */
int pt__sh_restructure(struct pt_ckpt *ck, const struct pt_shard_ref *sh,
		       size_t n, bool dry, uint64_t *size,
		       struct pt_error *err)
{
	struct plan pl;
	size_t i;
	int rc;

	memset(&pl, 0, sizeof(pl));
	pl.ck = ck;
	pl.err = err;
	pt_buf_init(&pl.index);
	rc = shards(&pl, sh, n);
	if (rc == 0)
		rc = old_index(&pl);
	if (rc == 0)
		rc = entries(&pl);
	for (i = 0; i < pl.np && rc == 0; i++)
		rc = new_root(&pl, &pl.p[i]);
	if (rc == 0)
		rc = index_text(&pl);
	if (rc == 0 && dry) {
		*size = pl.index_new ? pl.index.len : ck->src->size;
		for (i = 0; i < pl.np && rc == 0; i++)
			if (pl.p[i].root)
				rc = shard_write(&pl, &pl.p[i], true);
	} else if (rc == 0) {
		rc = commit(&pl);
	}
	plan_free(&pl);
	return rc;
}
