/* SPDX-License-Identifier: MIT */
/*
 * entries.c -- a directory's entry table: the names a value shows.
 *
 * A directory's entry table (names after LAYOUT.md's rules 1-5, collisions
 * settled in pickle order) is built once per value, the first time any
 * directory showing that value is listed or searched, and shared by every
 * place the value appears.  Lookups are O(1) per component (a hash index
 * per table).  Entries and their names live in the tree's pool.  Tables
 * are filled under the tree lock.
 */
#include "ckpt/tree_i.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/hash.h"
#include "ckpt/names.h"

/* @n zeroed bytes (8-byte aligned) that live as long as the tree, or
 * NULL when out of memory.  Call under the lock. */
static void *pool_alloc(struct pt_tree *t, size_t n)
{
	struct pool_blk *b = t->pool;
	size_t need = (n + 7) & ~(size_t)7;
	uint8_t *p;

	if (need < n || need > SIZE_MAX - sizeof(*b))
		return NULL;
	if (!b || b->size - b->used < need) {
		size_t size = need > POOL_BLOCK / 4 ? need : POOL_BLOCK;

		b = malloc(sizeof(*b) + size);
		if (!b)
			return NULL;
		pt_populate(b, sizeof(*b) + size);
		b->used = 0;
		b->size = size;
		if (size == need && t->pool) {
			/* a one-off: the current block keeps filling */
			b->next = t->pool->next;
			t->pool->next = b;
		} else {
			b->next = t->pool;
			t->pool = b;
		}
	}
	p = (uint8_t *)b->data + b->used;
	b->used += need;
	memset(p, 0, n);
	return p;
}

struct dtab *pt__tab_new(struct pt_tree *t)
{
	struct dtab *d = calloc(1, sizeof(*d));

	if (!d)
		return NULL;
	if (!pt_grow((void **)&t->tabs, &t->cap_tabs, t->n_tabs, sizeof(*t->tabs))) {
		free(d);
		return NULL;
	}
	t->tabs[t->n_tabs++] = d;
	d->t = t;
	return d;
}

/* Drop every entry of @d (entries and names are the pool's). */
void pt__tab_clear(struct dtab *d)
{
	free(d->slots);
	d->slots = NULL;
	d->nslots = 0;
	free(d->ents);
	d->ents = NULL;
	d->n = d->cap = 0;
}

void pt__tab_free(struct dtab *d)
{
	if (!d)
		return;
	pt__tab_clear(d);
	free(d->rec);
	free(d->users);
	free(d);
}

/* The entry named @name (@len bytes), or NULL. */
/*
 * Slots hold idx + 1 (0: empty).  While a table's entries fit in 24 bits
 * (nslots <= SLOT_TAGGED_MAX, any directory below 8 million entries) the
 * top 8 bits hold the top bits of the name's hash, so a probe rejects
 * 255 of 256 other names without reading their entries (a cache miss
 * each).
 */
#define SLOT_TAGGED_MAX ((size_t)1 << 25)
#define SLOT_IDX_MASK 0x00ffffffu

static uint32_t slot_of(size_t nslots, const struct dent *e)
{
	if (nslots > SLOT_TAGGED_MAX)
		return e->idx + 1;
	return (e->hash & ~SLOT_IDX_MASK) | (e->idx + 1);
}

/* pt__tab_find() with the name's hash known */
static struct dent *tab_find_h(const struct dtab *d, const char *name,
			       size_t len, uint32_t h)
{
	size_t i, mask = d->nslots - 1;
	bool tagged = d->nslots <= SLOT_TAGGED_MAX;
	uint32_t tag = h & ~SLOT_IDX_MASK;

	if (!d->nslots)
		return NULL;
	for (i = h & mask; d->slots[i]; i = (i + 1) & mask) {
		uint32_t v = d->slots[i];
		struct dent *e;

		if (tagged) {
			if ((v & ~SLOT_IDX_MASK) != tag)
				continue;
			v &= SLOT_IDX_MASK;
		}
		e = d->ents[v - 1];
		if (e->hash == h && memcmp(e->name, name, len) == 0 &&
		    e->name[len] == '\0')
			return e;
	}
	return NULL;
}

struct dent *pt__tab_find(const struct dtab *d, const char *name,
			  size_t len)
{
	struct dent *e = tab_find_h(d, name, len, pt_hash_name(name, len));

	return e && !e->hidden ? e : NULL;
}

bool pt__tab_has(const struct dtab *d, const char *name, size_t len)
{
	return pt__tab_find(d, name, len) != NULL;
}

/* Room for @want entries in the name index; false when out of memory. */
static bool tab_room(struct dtab *d, size_t want)
{
	uint32_t *slots;
	size_t ns, i;

	if (2 * want <= d->nslots)
		return true;
	if (want >= UINT32_MAX / 4)
		return false;
	for (ns = d->nslots ? 2 * d->nslots : 16; ns < 2 * want; ns *= 2)
		;
	slots = calloc(ns, sizeof(*slots));
	if (!slots)
		return false;
	for (i = 0; i < d->n; i++)
		pt_slot_put(slots, ns, d->ents[i]->hash,
			    slot_of(ns, d->ents[i]));
	free(d->slots);
	d->slots = slots;
	d->nslots = ns;
	return true;
}

static bool tab_reserve(struct dtab *d)
{
	return tab_room(d, d->n + 1);
}

/*
 * About @more entries are coming (the items of a dict or a list): size
 * the listing and the name index for them at once, instead of doubling
 * both ~15 times for 40,000 entries (each a copy into fresh pages).
 * Only a hint: false when out of memory, and the caller goes on.
 */
static bool tab_expect(struct dtab *d, size_t more)
{
	size_t want = d->n + more;
	void *q;

	if (more > ((size_t)1 << 24) || want <= d->cap)
		return tab_room(d, want);
	q = realloc(d->ents, want * sizeof(*d->ents));
	if (!q)
		return false;
	d->ents = q;
	d->cap = want;
	return tab_room(d, want);
}

/* Add an entry named @name (@len bytes, already encoded, not yet in the
 * table; copied) whose pt_hash_name() is @h.  NULL when out of memory. */
static struct dent *tab_add_h(struct dtab *d, const char *name, size_t len,
			      uint32_t h, uint8_t role, struct pt_value *val)
{
	struct dent *e;
	char *nm;

	if (!pt_grow((void **)&d->ents, &d->cap, d->n, sizeof(*d->ents)) ||
	    !tab_reserve(d) || len == SIZE_MAX ||
	    !(e = pool_alloc(d->t, sizeof(*e))) ||
	    !(nm = pool_alloc(d->t, len + 1)))
		return NULL;
	memcpy(nm, name, len);
	nm[len] = '\0';
	e->name = nm;
	e->idx = (uint32_t)d->n;
	e->hash = h;
	e->role = role;
	e->val = val;
	d->ents[d->n++] = e;
	pt_slot_put(d->slots, d->nslots, h, slot_of(d->nslots, e));
	return e;
}

struct dent *pt__tab_add(struct dtab *d, const char *name, size_t len,
			 uint8_t role, struct pt_value *val)
{
	return tab_add_h(d, name, len, pt_hash_name(name, len), role, val);
}

/* TorchScript's restore_type_tag(obj, type) and build_*list(list) are
 * the object itself. */
struct pt_value *pt__tree_deref(struct pt_value *v)
{
	int hops = 0;

	while (v && v->kind == PT_V_CALL && hops++ < 16 &&
	       v->u.call.callable &&
	       v->u.call.callable->kind == PT_V_GLOBAL &&
	       strcmp(v->u.call.callable->u.global.module, "torch.jit._pickle") == 0 &&
	       v->u.call.args && v->u.call.args->kind == PT_V_TUPLE &&
	       v->u.call.args->u.seq.n >= 1)
		v = v->u.call.args->u.seq.v[0];
	return v;
}

bool pt__is_dir_class(const struct pt_value *v)
{
	enum pt_vclass c = pt__vclass(v);

	return c == PT_C_MAP || c == PT_C_SEQ || c == PT_C_OBJECT;
}

/* Does tensor @val claim NAME.png too (-o previews)? */
static bool wants_png(const struct dtab *d, const struct pt_value *val)
{
	return d->t->previews && val->aux;
}

/* Does @name (@len bytes) end in ".tensor"?  In any ASCII case: MIME
 * globs match names without case. */
static bool ends_tensor_sfx(const char *name, size_t len)
{
	return len >= PT_TENSOR_SFX_LEN &&
	       strncasecmp(name + len - PT_TENSOR_SFX_LEN, PT_TENSOR_SFX,
			   PT_TENSOR_SFX_LEN) == 0;
}

/*
 * Copy @base (@blen bytes) to @nm; in the suffix layout the name of
 * something else than a tensor that ends in ".tensor" gets that dot as
 * "%2E", so that only tensor files end in it.  The new length.
 */
static size_t claim_base(const struct dtab *d, bool tensor, char *nm,
			 const char *base, size_t blen)
{
	size_t dot;

	memcpy(nm, base, blen);
	if (!d->t->suffix || tensor || !ends_tensor_sfx(base, blen))
		return blen;
	dot = blen - PT_TENSOR_SFX_LEN;
	memcpy(nm + dot, "%2E", 3);
	memcpy(nm + dot + 3, base + dot + 1, PT_TENSOR_SFX_LEN - 1);
	return blen + 2;
}

/* In a table with rec: the last entry's value sits at d->cur. */
static bool tab_record(struct dtab *d)
{
	size_t cap = d->cap_rec;

	if (!d->rec)
		return true;
	while (cap < d->n)
		cap *= 2;
	if (cap != d->cap_rec) {
		struct pt_slot *r = realloc(d->rec, cap * sizeof(*r));

		if (!r)
			return false;
		d->rec = r;
		d->cap_rec = cap;
	}
	d->rec[d->n - 1] = d->cur;
	return true;
}

/* Claim a name for one value (LAYOUT.md rule 5): NAME, or NAME and
 * NAME.json (and NAME.png) for tensors, else NAME~2, NAME~3, ...; a
 * tensor's own file is NAME.tensor in the suffix layout. */
int pt__tab_claim(struct dtab *d, const char *base, size_t blen,
		  struct pt_value *val)
{
	bool tensor = val && pt__vclass(val) == PT_C_TENSOR;
	bool png = tensor && wants_png(d, val);
	bool sfx = tensor && d->t->suffix;
	struct pt_tree *t = d->t;
	char *nm, *js;
	size_t len, vlen;
	unsigned k;
	uint32_t hbase, hn, h, hp = 0, hj = 0;

	/* NAME, NAME~2 ... ; the "%2E" escape, "~N" and ".tensor" need at
	 * most 32 bytes; NAME.json after it */
	if (blen > SIZE_MAX / 2 - 96)
		return -ENOMEM;
	if (t->kname_cap < 2 * blen + 64) {
		free(t->kname);
		t->kname_cap = 0;
		t->kname = malloc(2 * blen + 64);
		if (!t->kname)
			return -ENOMEM;
		t->kname_cap = 2 * blen + 64;
	}
	nm = t->kname;
	js = t->kname + blen + 32;
	blen = claim_base(d, tensor, nm, base, blen);
	/* the names share their first bytes: hashed once (filling a
	 * directory of 20,000 tensors: 38.0 -> 28.0 M instructions) */
	hbase = pt_hash_more(PT_HASH_SEED, nm, blen);
	for (k = 1; k < 1000000; k++) {
		len = blen;
		hn = hbase;
		if (k > 1) {
			len += (size_t)snprintf(nm + blen, 16, "~%u", k);
			hn = pt_hash_more(hbase, nm + blen, len - blen);
		}
		vlen = len;
		if (sfx) {
			memcpy(nm + len, PT_TENSOR_SFX, PT_TENSOR_SFX_LEN);
			vlen += PT_TENSOR_SFX_LEN;
			h = pt_hash_end(pt_hash_more(hn, PT_TENSOR_SFX, PT_TENSOR_SFX_LEN));
		} else {
			h = pt_hash_end(hn);
		}
		nm[vlen] = '\0';
		if (tab_find_h(d, nm, vlen, h))
			continue;
		if (tensor) {
			memcpy(js, nm, len);
			memcpy(js + len, ".png", 5);
			if (png) {
				hp = pt_hash_end(pt_hash_more(hn, ".png", 4));
				if (tab_find_h(d, js, len + 4, hp))
					continue;
			}
			memcpy(js + len, ".json", 6);
			hj = pt_hash_end(pt_hash_more(hn, ".json", 5));
			if (tab_find_h(d, js, len + 5, hj))
				continue;
		}
		if (!tab_add_h(d, nm, vlen, h, R_VALUE, val) ||
		    !tab_record(d) ||
		    (tensor && !tab_add_h(d, js, len + 5, hj, R_JSON, val)))
			return -ENOMEM;
		if (png) {
			memcpy(js + len, ".png", 5);
			if (!tab_add_h(d, js, len + 4, hp, R_PNG, val))
				return -ENOMEM;
		}
		return 0;
	}
	return -EFBIG;
}

/*
 * The nested option: "a.b.c" is the entry "c" of directory "b" of
 * directory "a".  Each level is a directory of name parts (R_RECDIR) that
 * later keys with the same prefix share; a level whose name a value
 * already took is found or made under "~2", "~3", ... (rule 5).  Parts are
 * encoded like whole keys, so an empty part is "%".
 */
static int add_dotted(struct dtab *d, const char *p, size_t n,
		      struct pt_value *val)
{
	struct pt_buf enc, nm;
	int rc = 0;

	pt_buf_init(&enc);
	pt_buf_init(&nm);
	for (;;) {
		const char *dot = memchr(p, '.', n);
		size_t len = dot ? (size_t)(dot - p) : n;
		struct dent *e = NULL;
		unsigned k;

		enc.len = 0;
		pt_name_encode(&enc, (const uint8_t *)p, len);
		if (enc.oom) {
			rc = -ENOMEM;
			break;
		}
		if (!dot) {
			rc = pt__tab_claim(d, enc.p, enc.len, val);
			break;
		}
		for (k = 1; k < 1000000; k++) {
			nm.len = 0;
			pt_buf_add(&nm, enc.p, enc.len);
			if (k > 1)
				pt_buf_printf(&nm, "~%u", k);
			if (nm.oom)
				break;
			e = pt__tab_find(d, nm.p, nm.len);
			if (!e || e->role == R_RECDIR)
				break;
		}
		if (nm.oom || k == 1000000) {
			rc = nm.oom ? -ENOMEM : -EFBIG;
			break;
		}
		if (!e) {
			struct dtab *sub = pt__tab_new(d->t);

			e = sub ? pt__tab_add(d, nm.p, nm.len, R_RECDIR, NULL) : NULL;
			if (!e) {
				rc = -ENOMEM;
				break;
			}
			e->sub = sub;
		}
		d = e->sub;
		p = dot + 1;
		n -= len + 1;
	}
	pt_buf_free(&enc);
	pt_buf_free(&nm);
	return rc;
}

/* Does @name, with LAYOUT.md's escapes undone, spell @raw (@n bytes)?
 * Not when rule 4 cut it or rule 5 renamed it. */
static bool name_spells(const char *name, const char *raw, size_t n)
{
	static const char *const esc[] = { "%2F", "%25", "%00", "%2E" };
	static const char val[] = { '/', '%', '\0', '.' };
	size_t j = 0;
	int k;

	if (strcmp(name, "%") == 0)
		return n == 0;
	while (*name) {
		char c = *name;
		size_t step = 1;

		for (k = 0; k < 4; k++)
			if (strncmp(name, esc[k], 3) == 0) {
				c = val[k];
				step = 3;
				break;
			}
		if (j >= n || raw[j] != c)
			return false;
		j++;
		name += step;
	}
	return j == n;
}

static int add_keyed(struct dtab *d, struct pt_value *key,
		     struct pt_value *val)
{
	/* the tree's buffers: tables are filled under its lock */
	struct pt_buf *raw = &d->t->kraw, *enc = &d->t->kenc;
	int rc;

	raw->len = 0;
	raw->oom = false;
	enc->len = 0;
	enc->oom = false;
	key = pt__tree_deref(key);
	if (pt__vclass(key) == PT_C_BYTES &&
	    key->kind != PT_V_BYTES && key->kind != PT_V_BYTEARRAY) {
		/* protocol 2 bytes: _codecs.encode(...) */
		const struct pt_bytes *b = key->aux;
		pt_repr_bytes(raw, b->p, b->len);
	} else {
		pt_key_text(raw, key);
	}
	if (raw->oom) {
		rc = -ENOMEM;
	} else if (d->t->nested && key->kind == PT_V_STR && raw->len &&
		   memchr(raw->p, '.', raw->len)) {
		rc = add_dotted(d, raw->p, raw->len, pt__tree_deref(val));
	} else {
		pt_name_encode(enc, (const uint8_t *)(raw->p ? raw->p : ""), raw->len);
		if (enc->oom)
			rc = -ENOMEM;
		else
			rc = pt__tab_claim(d, enc->p ? enc->p : "%", enc->p ? enc->len : 1, pt__tree_deref(val));
		if (rc == 0) {
			/* the value's entry, before its NAME.json, NAME.png */
			size_t j = d->n - 1;
			struct dent *e;

			while (j > 0 && d->ents[j]->role != R_VALUE)
				j--;
			e = d->ents[j];
			/* tree.json says "key": 0, or the str key a cut or
			 * renamed name no longer spells */
			if (e->role == R_VALUE &&
			    (key->kind != PT_V_STR ||
			     !name_spells(e->name, raw->p ? raw->p : "", raw->len)))
				e->key = key;
		}
	}
	return rc;
}

static int add_indexed(struct dtab *d, size_t i, struct pt_value *val)
{
	char num[24];
	int n = snprintf(num, sizeof(num), "%zu", i);

	return pt__tab_claim(d, num, (size_t)n, pt__tree_deref(val));
}

/* Where the next value added sits (recorded by pt__entry_slot()'s
 * tables); the graph is lent const to the fill, and only an edit, which
 * owns the checkpoint, writes through the slot. */
static void at(struct dtab *d, const struct pt_value *owner,
	       const struct pt_vseq *seq, size_t pos, enum pt_slot_kind kind)
{
	d->cur.owner = (struct pt_value *)(uintptr_t)owner;
	d->cur.seq = (struct pt_vseq *)(uintptr_t)seq;
	d->cur.pos = pos;
	d->cur.kind = (uint8_t)kind;
}

/* pairs k0 v0 k1 v1 ... (the kv vector of @owner) */
static int add_pairs(struct dtab *d, const struct pt_value *owner,
		     const struct pt_vseq *kv)
{
	size_t i;
	int rc;

	(void)tab_expect(d, kv->n);     /* a tensor takes NAME and NAME.json */
	for (i = 0; i + 1 < kv->n; i += 2) {
		if (kv->v[i] == &pt__hole)
			continue;       /* removed (pt_edit_keep_names()) */
		at(d, owner, kv, i, PT_SLOT_PAIR);
		rc = add_keyed(d, kv->v[i], kv->v[i + 1]);
		if (rc)
			return rc;
	}
	return 0;
}

struct pt_value pt__hole = { .kind = PT_V_NONE, .aux16 = PT_C_SCALAR };

static int add_seq(struct dtab *d, const struct pt_value *owner,
		   const struct pt_vseq *s, size_t *idx)
{
	size_t i;
	int rc;

	for (i = 0; i < s->n; i++) {
		if (s->v[i] == &pt__hole) {
			(*idx)++;
			continue;
		}
		at(d, owner, s, i, PT_SLOT_ITEM);
		rc = add_indexed(d, (*idx)++, s->v[i]);
		if (rc)
			return rc;
	}
	return 0;
}

static const struct pt_vseq *seq_of(const struct pt_value *v)
{
	if (!v)
		return NULL;
	if (v->kind == PT_V_TUPLE || v->kind == PT_V_LIST ||
	    v->kind == PT_V_SET || v->kind == PT_V_FROZENSET)
		return &v->u.seq;
	return NULL;
}

/* Items of a mapping: a dict's pairs, the first argument of a mapping
 * class (a dict, or a list of pairs), then SETITEMS onto the object. */
static int fill_map(struct dtab *d, const struct pt_value *v)
{
	const struct pt_value *a0;
	const struct pt_vseq *s;
	size_t i;
	int rc;

	if (v->kind == PT_V_DICT)
		return add_pairs(d, v, &v->u.dict.kv);
	a0 = pt__tree_deref(v->u.call.args && v->u.call.args->u.seq.n ?
			    v->u.call.args->u.seq.v[0] : NULL);
	if (a0 && a0->kind == PT_V_DICT) {
		rc = add_pairs(d, a0, &a0->u.dict.kv);
		if (rc)
			return rc;
	} else if ((s = seq_of(a0)) != NULL) {
		for (i = 0; i < s->n; i++) {
			const struct pt_vseq *pair = seq_of(s->v[i]);
			if (!pair || pair->n != 2)
				continue;
			at(d, a0, s, i, PT_SLOT_LISTPAIR);
			rc = add_keyed(d, pair->v[0], pair->v[1]);
			if (rc)
				return rc;
		}
	}
	return add_pairs(d, v, pt_call_kv(v));
}

static int fill_seq(struct dtab *d, const struct pt_value *v)
{
	const struct pt_vseq *s = seq_of(v);
	size_t idx = 0;
	int rc;

	if (s)
		return add_seq(d, v, s, &idx);
	if (v->u.call.args && v->u.call.args->u.seq.n) {
		const struct pt_value *a0 = pt__tree_deref(v->u.call.args->u.seq.v[0]);

		s = seq_of(a0);
		if (s) {
			rc = add_seq(d, a0, s, &idx);
			if (rc)
				return rc;
		}
	}
	return add_seq(d, v, pt_call_items(v), &idx);
}

static int add_named(struct dtab *d, const char *name, struct pt_value *val)
{
	at(d, NULL, NULL, 0, PT_SLOT_NAMED);
	return pt__tab_claim(d, name, strlen(name), pt__tree_deref(val));
}

/* An object: args/, then the state BUILD would receive (a dict's items,
 * both dicts of a (dict, slots) pair, or "state"), then items set or
 * appended onto it. */
static int fill_object(struct dtab *d, struct pt_value *v)
{
	struct pt_value *st = pt__tree_deref(pt_call_state(v));
	const struct pt_vseq *pair;
	size_t idx = 0;
	int rc = 0;

	if (v->u.call.args && v->u.call.args->u.seq.n)
		rc = add_named(d, "args", v->u.call.args);
	if (!rc && pt_call_kwargs(v))
		rc = add_named(d, "kwargs", pt_call_kwargs(v));
	if (rc)
		return rc;
	if (st) {
		pair = st->kind == PT_V_TUPLE ? &st->u.seq : NULL;
		if (pt__vclass(st) == PT_C_MAP) {
			rc = fill_map(d, st);
		} else if (pair && pair->n == 2 &&
			   (pair->v[0]->kind == PT_V_NONE || pt__vclass(pair->v[0]) == PT_C_MAP) &&
			   (pair->v[1]->kind == PT_V_NONE || pt__vclass(pair->v[1]) == PT_C_MAP)) {
			if (pair->v[0]->kind != PT_V_NONE)
				rc = fill_map(d, pair->v[0]);
			if (!rc && pair->v[1]->kind != PT_V_NONE)
				rc = fill_map(d, pair->v[1]);
		} else {
			rc = add_named(d, "state", st);
		}
		if (rc)
			return rc;
	}
	rc = add_pairs(d, v, pt_call_kv(v));
	if (rc)
		return rc;
	return add_seq(d, v, pt_call_items(v), &idx);
}

/* The entries of a directory value, within the entry cap. */
int pt__tab_fill_value(struct pt_ckpt *ck, struct dtab *d, struct pt_value *v)
{
	int rc;

	switch (pt__vclass(v)) {
	case PT_C_MAP:
		rc = fill_map(d, v);
		break;
	case PT_C_SEQ:
		rc = fill_seq(d, v);
		break;
	default:
		rc = fill_object(d, v);
		break;
	}
	if (rc == 0 && d->n > ck->opts.limits.max_dir_entries)
		rc = -EFBIG;
	return rc;
}

struct dtab *pt__value_tab(struct pt_ckpt *ck, struct pt_value *v, int *rc)
{
	struct pt_tree *t = ck->tree;
	struct dtab *d = __atomic_load_n((struct dtab **)&v->aux, __ATOMIC_ACQUIRE);

	if (d && !d->err)
		return d;
	pthread_mutex_lock(&t->lock);
	d = v->aux;
	if (d)
		goto out;
	d = pt__tab_new(t);
	if (!d) {
		*rc = -ENOMEM;
		goto out;
	}
	d->of = v;
	if (ck->opts.editable) {
		/* where each entry sits, for the edits (pt__entry_slots()) */
		d->cap_rec = 16;
		d->rec = malloc(d->cap_rec * sizeof(*d->rec));
	}
	*rc = ck->opts.editable && !d->rec ? -ENOMEM : pt__tab_fill_value(ck, d, v);
	if (*rc) {
		/* out of memory may pass; anything else would fail again */
		pt__tab_clear(d);
		d->err = *rc;
		if (*rc == -ENOMEM)
			d = NULL;
		else
			__atomic_store_n((struct dtab **)&v->aux, d, __ATOMIC_RELEASE);
		goto out;
	}
	__atomic_store_n((struct dtab **)&v->aux, d, __ATOMIC_RELEASE);
out:
	pthread_mutex_unlock(&t->lock);
	if (d && d->err) {
		*rc = d->err;
		return NULL;
	}
	return d;
}

/* The table of @dir with the slots of its entries (an editable open). */
static int slots_tab(struct pt_ckpt *ck, struct pt_value *dir, struct dtab **d)
{
	int rc = 0;

	*d = pt__value_tab(ck, dir, &rc);
	if (!*d)
		return rc ? rc : -ENOMEM;
	return (*d)->rec ? 0 : -EINVAL;        /* not opened with opts.editable */
}

int pt__entry_slot(struct pt_ckpt *ck, struct pt_value *dir, const char *name,
		   struct pt_slot *out)
{
	struct dtab *d;
	struct dent *e;
	int rc = slots_tab(ck, dir, &d);

	if (rc)
		return rc;
	e = pt__tab_find(d, name, strlen(name));
	if (!e || e->role != R_VALUE)
		return -ENOENT;
	*out = d->rec[e->idx];
	return 0;
}

int pt__entry_slots(struct pt_ckpt *ck, struct pt_value *dir,
		    struct pt_entry_slot **out, size_t *n)
{
	struct dtab *d;
	struct pt_entry_slot *v;
	size_t i, k = 0;
	int rc = 0;

	*out = NULL;
	*n = 0;
	rc = slots_tab(ck, dir, &d);
	if (rc)
		return rc;
	v = calloc(d->n ? d->n : 1, sizeof(*v));
	if (!v)
		return -ENOMEM;
	for (i = 0; i < d->n; i++) {
		if (d->ents[i]->role != R_VALUE || d->ents[i]->hidden)
			continue;
		v[k].name = d->ents[i]->name;  /* the tree's pool */
		v[k++].slot = d->rec[i];
	}
	*out = v;
	*n = k;
	return 0;
}
