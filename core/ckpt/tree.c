/* SPDX-License-Identifier: MIT */
/*
 * tree.c -- the mounted tree of LAYOUT.md, built lazily.
 *
 * A directory's entry table (names after LAYOUT.md's rules 1-5, collisions
 * settled in pickle order) is built once per value, the first time any
 * directory showing that value is listed or searched, and shared by every
 * place the value appears.  Nodes are created per (parent, entry) on first
 * use, so a pickle whose references multiply costs only what is visited,
 * and a container that holds itself becomes a symlink where it would
 * repeat.  Lookups are O(1) per component (a hash index per table).
 *
 * Locking: one mutex guards creation of tables and nodes.  Published
 * pointers (a value's table, a directory's child slots) are written with
 * release stores and read with acquire loads, so lookups of nodes that
 * already exist, and all reads of file contents, take no lock.
 */
#include "ckpt/ckpt_i.h"

#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/cancel.h"
#include "base/hash.h"
#include "ckpt/names.h"

enum role {
	R_VALUE,        /* a pickle value */
	R_JSON,         /* NAME.json of a tensor value */
	R_META,         /* /.ptfs */
	R_RECDIR,       /* a folder made of name parts: /.ptfs/records, and
			 * the levels of dotted keys with the nested option */
	R_RECORD,       /* a raw archive record */
	R_GEN,          /* generated text under /.ptfs */
	R_BLOB,         /* a format's file under /.ptfs (ck->meta_files) */
	R_VDIR,         /* a generated directory, filled on first use */
	R_VFILE,        /* a generated file (struct pt_vfile) */
	R_PNG,          /* NAME.png of a tensor value (opts.previews) */
};

enum gen {
	GEN_INFO,
	GEN_TREE,
	GEN_PICKLE,
};

/* An entry and its name live in the tree's pool (pool_alloc): 40,000
 * entries of a 20,000-tensor directory cost no malloc each. */
struct dent {
	const char *name;               /* encoded, unique in its table */
	struct pt_value *val;           /* R_VALUE, R_JSON */
	union {
		const struct pt_value *key; /* R_VALUE: a dict key that is
					     * not a str (or that the name no
					     * longer spells), else NULL */
		const struct pt_zip_entry *entry; /* R_RECORD */
		struct dtab *sub;               /* R_RECDIR */
		enum gen gen;                   /* R_GEN */
		const struct pt_meta_file *blob; /* R_BLOB */
		struct pt_vfile *vf;            /* R_VFILE */
	};
	uint32_t idx;                   /* position in the table */
	uint32_t hash;                  /* of the name (pt_hash_name) */
	uint8_t role;
};

struct dtab {
	struct dent **ents;             /* n entries, listing order */
	size_t n;
	size_t cap;
	uint32_t *slots;                /* by name: open addressing, idx + 1
					 * and a hash tag (slot_of(); 0:
					 * empty), nslots a power of two at
					 * least twice n */
	size_t nslots;
	struct pt_tree *t;              /* the tree it belongs to */
	int err;                        /* a directory that cannot be listed
					 * (-EFBIG past max_dir_entries, ...):
					 * kept, empty, so that every later
					 * call gets the error at once */
};

/* Pool blocks: 64 KiB, or one of its own for a long name. */
#define POOL_BLOCK (64u << 10)

struct pool_blk {
	struct pool_blk *next;
	size_t used, size;
	max_align_t data[];
};

/* What a node's union holds (set with the node, never changed). */
enum node_u {
	U_NONE,         /* directories, and files without one */
	U_TENSOR,       /* tensor files and their NAME.json */
	U_DATA,         /* contents held in memory (text, bytes, links,
			 * /.ptfs blobs) */
	U_ENTRY,        /* R_RECORD */
	U_VF,           /* R_VFILE */
	U_PIC,          /* R_PNG */
};

/* 72 bytes: one per listed entry (40,000 for a 20,000-tensor state
 * dict listed with its sidecars), so what only some roles need shares
 * one union, read through node_tensor() and its siblings. */
struct pt_node {
	struct pt_node *parent;
	const char *name;
	uint64_t id;
	struct pt_value *val;
	const struct pt_value *key;     /* a dict key that is not a str */
	uint64_t size;
	uint32_t depth;
	uint8_t type;                   /* enum pt_ntype */
	uint8_t role;
	uint8_t uk;                     /* enum node_u */
	bool pushed;                    /* returned by pt_tree_next_sidecars() */
	union {
		struct {                /* PT_NT_DIR */
			struct dtab *tab;
			struct pt_node **kids; /* slot per entry */
		} dir;
		const struct pt_tensor *tensor;
		const uint8_t *data;
		const struct pt_zip_entry *entry;
		struct pt_vfile *vf;
		struct pt_pic *pic;
	} u;
};

#define NODE_GET(fn, type, field, kind) \
	static inline type fn(const struct pt_node *n) \
	{ \
		return n->uk == (kind) ? n->u.field : NULL; \
	}
NODE_GET(node_tensor, const struct pt_tensor *, tensor, U_TENSOR)
NODE_GET(node_data, const uint8_t *, data, U_DATA)
NODE_GET(node_entry, const struct pt_zip_entry *, entry, U_ENTRY)
NODE_GET(node_vf, struct pt_vfile *, vf, U_VF)
NODE_GET(node_pic, struct pt_pic *, pic, U_PIC)
#undef NODE_GET

/* Generated directories of /.ptfs (export, stats). */
#define PT_VDIRS 4

/* Nodes are carved from blocks: no allocation per node, and a node's
 * address (its inode number) never changes. */
#define NODE_BLOCK 256

struct node_blk {
	struct node_blk *next;
	size_t used;
	struct pt_node n[NODE_BLOCK];
};

struct pt_tree {
	pthread_mutex_t lock;
	struct pt_node *root;
	struct dtab *meta_tab;
	uint64_t next_id;
	struct dtab **tabs;             /* every table, for freeing */
	size_t n_tabs, cap_tabs;
	struct node_blk *blks;          /* every node, newest block first */
	struct pool_blk *pool;          /* entries and names of the tables */
	struct pt_buf scratch;          /* sizes of sidecars (under lock) */
	struct pt_buf kraw, kenc;       /* a key's text and its name, and */
	char *kname;                    /* the names claim() tries, kept
					 * between keys (tables are filled
					 * under the lock) */
	size_t kname_cap;
	char **texts;                   /* generated contents */
	size_t n_texts, cap_texts;
	bool nested;                    /* dotted keys as directories */
	const char *vname[PT_VDIRS];    /* the R_VDIR entries of /.ptfs */
	pt_vdir_fill vfill[PT_VDIRS];   /* fill them */
	void *vfill_ctx[PT_VDIRS];
	size_t n_vdirs;
	pthread_mutex_t vlock;          /* one fill at a time */
	char vmsg[PT_VDIRS][sizeof(((struct pt_error *)0)->msg)]; /* why a fill failed (under vlock) */
	bool vmsg_new[PT_VDIRS];        /* not taken yet */
	pthread_mutex_t glock;          /* R_GEN contents and sizes, which
					 * pt_tree_committed() swaps */
	pt_picture_fn pic_fn;           /* makes NAME.png (issue 15) */
	void *pic_ctx;
	bool previews;                  /* NAME.png beside tensors */
	struct pt_vfile **vfiles;       /* every generated file, for freeing */
	size_t n_vfiles, cap_vfiles;
};

static bool grow(void **arr, size_t *cap, size_t n, size_t elem)
{
	void *q;
	size_t nc;

	if (n < *cap)
		return true;
	nc = *cap ? *cap * 2 : 64;
	q = realloc(*arr, nc * elem);
	if (!q)
		return false;
	*arr = q;
	*cap = nc;
	return true;
}

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

static char *keep_text(struct pt_tree *t, char *s)
{
	if (!s)
		return NULL;
	if (!grow((void **)&t->texts, &t->cap_texts, t->n_texts, sizeof(char *))) {
		free(s);
		return NULL;
	}
	t->texts[t->n_texts++] = s;
	return s;
}

static struct dtab *tab_new(struct pt_tree *t)
{
	struct dtab *d = calloc(1, sizeof(*d));

	if (!d)
		return NULL;
	if (!grow((void **)&t->tabs, &t->cap_tabs, t->n_tabs, sizeof(*t->tabs))) {
		free(d);
		return NULL;
	}
	t->tabs[t->n_tabs++] = d;
	d->t = t;
	return d;
}

/* Drop every entry of @d (entries and names are the pool's). */
static void tab_clear(struct dtab *d)
{
	free(d->slots);
	d->slots = NULL;
	d->nslots = 0;
	free(d->ents);
	d->ents = NULL;
	d->n = d->cap = 0;
}

static void tab_free(struct dtab *d)
{
	if (!d)
		return;
	tab_clear(d);
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

/* tab_find() with the name's hash known */
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

static struct dent *tab_find(const struct dtab *d, const char *name,
			     size_t len)
{
	return tab_find_h(d, name, len, pt_hash_name(name, len));
}

static bool tab_has(const struct dtab *d, const char *name, size_t len)
{
	return tab_find(d, name, len) != NULL;
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

	if (!grow((void **)&d->ents, &d->cap, d->n, sizeof(*d->ents)) ||
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

static struct dent *tab_add(struct dtab *d, const char *name, size_t len,
			    uint8_t role, struct pt_value *val)
{
	return tab_add_h(d, name, len, pt_hash_name(name, len), role, val);
}

/* TorchScript's restore_type_tag(obj, type) and build_*list(list) are
 * the object itself. */
static struct pt_value *deref(struct pt_value *v)
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

static bool is_dir_class(const struct pt_value *v)
{
	enum pt_vclass c = pt__vclass(v);

	return c == PT_C_MAP || c == PT_C_SEQ || c == PT_C_OBJECT;
}

/* Claim a name for one value (LAYOUT.md rule 5): NAME, or NAME and
 * NAME.json for tensors, else NAME~2, NAME~3, ... */
static bool wants_png(const struct dtab *d, const struct pt_value *val);

static int claim(struct dtab *d, const char *base, size_t blen,
		 struct pt_value *val)
{
	bool tensor = val && pt__vclass(val) == PT_C_TENSOR;
	bool png = tensor && wants_png(d, val);
	struct pt_tree *t = d->t;
	char *nm, *js;
	size_t len;
	unsigned k;
	uint32_t hbase, hn, h, hp = 0, hj = 0;

	/* NAME, NAME~2 ... ; the suffix and ".json" need at most 16 bytes;
	 * NAME.json after it */
	if (blen > SIZE_MAX / 2 - 64)
		return -ENOMEM;
	if (t->kname_cap < 2 * blen + 48) {
		free(t->kname);
		t->kname_cap = 0;
		t->kname = malloc(2 * blen + 48);
		if (!t->kname)
			return -ENOMEM;
		t->kname_cap = 2 * blen + 48;
	}
	nm = t->kname;
	js = t->kname + blen + 16;
	memcpy(nm, base, blen);
	/* the names share their first bytes: hashed once (filling a
	 * directory of 20,000 tensors: 38.0 -> 28.0 M instructions) */
	hbase = pt_hash_more(PT_HASH_SEED, base, blen);
	for (k = 1; k < 1000000; k++) {
		len = blen;
		hn = hbase;
		if (k > 1) {
			len += (size_t)snprintf(nm + blen, 16, "~%u", k);
			hn = pt_hash_more(hbase, nm + blen, len - blen);
		}
		nm[len] = '\0';
		h = pt_hash_end(hn);
		if (tab_find_h(d, nm, len, h))
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
		if (!tab_add_h(d, nm, len, h, R_VALUE, val) ||
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
			rc = claim(d, enc.p, enc.len, val);
			break;
		}
		for (k = 1; k < 1000000; k++) {
			nm.len = 0;
			pt_buf_add(&nm, enc.p, enc.len);
			if (k > 1)
				pt_buf_printf(&nm, "~%u", k);
			if (nm.oom)
				break;
			e = tab_find(d, nm.p, nm.len);
			if (!e || e->role == R_RECDIR)
				break;
		}
		if (nm.oom || k == 1000000) {
			rc = nm.oom ? -ENOMEM : -EFBIG;
			break;
		}
		if (!e) {
			struct dtab *sub = tab_new(d->t);

			e = sub ? tab_add(d, nm.p, nm.len, R_RECDIR, NULL) : NULL;
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
	key = deref(key);
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
		rc = add_dotted(d, raw->p, raw->len, deref(val));
	} else {
		pt_name_encode(enc, (const uint8_t *)(raw->p ? raw->p : ""), raw->len);
		if (enc->oom)
			rc = -ENOMEM;
		else
			rc = claim(d, enc->p ? enc->p : "%", enc->p ? enc->len : 1, deref(val));
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

	return claim(d, num, (size_t)n, deref(val));
}

/* pairs k0 v0 k1 v1 ... (a dict's kv vector) */
static int add_pairs(struct dtab *d, const struct pt_vseq *kv)
{
	size_t i;
	int rc;

	(void)tab_expect(d, kv->n);     /* a tensor takes NAME and NAME.json */
	for (i = 0; i + 1 < kv->n; i += 2) {
		rc = add_keyed(d, kv->v[i], kv->v[i + 1]);
		if (rc)
			return rc;
	}
	return 0;
}

static int add_seq(struct dtab *d, const struct pt_vseq *s, size_t *idx)
{
	size_t i;
	int rc;

	for (i = 0; i < s->n; i++) {
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
		return add_pairs(d, &v->u.dict.kv);
	a0 = deref(v->u.call.args && v->u.call.args->u.seq.n ?
			   v->u.call.args->u.seq.v[0] : NULL);
	if (a0 && a0->kind == PT_V_DICT) {
		rc = add_pairs(d, &a0->u.dict.kv);
		if (rc)
			return rc;
	} else if ((s = seq_of(a0)) != NULL) {
		for (i = 0; i < s->n; i++) {
			const struct pt_vseq *pair = seq_of(s->v[i]);
			if (!pair || pair->n != 2)
				continue;
			rc = add_keyed(d, pair->v[0], pair->v[1]);
			if (rc)
				return rc;
		}
	}
	return add_pairs(d, pt_call_kv(v));
}

static int fill_seq(struct dtab *d, const struct pt_value *v)
{
	const struct pt_vseq *s = seq_of(v);
	size_t idx = 0;
	int rc;

	if (s)
		return add_seq(d, s, &idx);
	if (v->u.call.args && v->u.call.args->u.seq.n) {
		s = seq_of(deref(v->u.call.args->u.seq.v[0]));
		if (s) {
			rc = add_seq(d, s, &idx);
			if (rc)
				return rc;
		}
	}
	return add_seq(d, pt_call_items(v), &idx);
}

static int add_named(struct dtab *d, const char *name, struct pt_value *val)
{
	return claim(d, name, strlen(name), deref(val));
}

/* An object: args/, then the state BUILD would receive (a dict's items,
 * both dicts of a (dict, slots) pair, or "state"), then items set or
 * appended onto it. */
static int fill_object(struct dtab *d, struct pt_value *v)
{
	struct pt_value *st = deref(pt_call_state(v));
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
	rc = add_pairs(d, pt_call_kv(v));
	if (rc)
		return rc;
	return add_seq(d, pt_call_items(v), &idx);
}

/* The entries of a directory value, within the entry cap. */
static int fill_value(struct pt_ckpt *ck, struct dtab *d, struct pt_value *v)
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

static struct dtab *value_tab(struct pt_ckpt *ck, struct pt_value *v, int *rc)
{
	struct pt_tree *t = ck->tree;
	struct dtab *d = __atomic_load_n((struct dtab **)&v->aux, __ATOMIC_ACQUIRE);

	if (d && !d->err)
		return d;
	pthread_mutex_lock(&t->lock);
	d = v->aux;
	if (d)
		goto out;
	d = tab_new(t);
	if (!d) {
		*rc = -ENOMEM;
		goto out;
	}
	*rc = fill_value(ck, d, v);
	if (*rc) {
		/* out of memory may pass; anything else would fail again */
		tab_clear(d);
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

/* 0, or -EINTR when pt_cancelled() ended it (tree.json). */
static int gen_text(struct pt_ckpt *ck, enum gen g, struct pt_buf *b)
{
	int i;

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
			pt_pickle_disasm(p, ck->pickles[i].len, b, 256u << 20);
			free(own);
		}
		break;
	}
	return 0;
}

static bool pic_node_init(struct pt_ckpt *ck, struct pt_node *n);

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
		n->type = PT_NT_DIR;            /* table made by vdir_tab() */
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

static struct dtab *root_table(struct pt_ckpt *ck, int *rc);
static int build_meta(struct pt_ckpt *ck, struct pt_tree *t);
static int records_table(struct pt_ckpt *ck, struct dtab **out);

/* The table of /.ptfs, built the first time it is listed or searched:
 * its records folder has one entry per archive record (20,000 for a
 * 20,000-tensor torch.save file), which most mounts never look at.
 * Call under the tree lock. */
static struct dtab *meta_table(struct pt_ckpt *ck, int *rc)
{
	struct pt_tree *t = ck->tree;

	if (!t->meta_tab) {
		*rc = build_meta(ck, t);
		if (*rc)
			t->meta_tab = NULL; /* its tables are freed with t */
	}
	return t->meta_tab;
}
static struct dtab *vdir_tab(struct pt_ckpt *ck, struct pt_node *dir, int *rc);

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
		return vdir_tab(ck, dir, rc);
	if (dir == t->root || dir->role == R_META || dir->role == R_RECDIR) {
		pthread_mutex_lock(&t->lock);
		d = dir->u.dir.tab;
		if (!d && dir->role == R_RECDIR) {
			/* /.ptfs/records, left for its first use */
			*rc = records_table(ck, &d);
			if (*rc)
				d = NULL;
		} else if (!d) {
			d = dir == t->root ? root_table(ck, rc) : meta_table(ck, rc);
			if (d)
				__atomic_store_n(&dir->u.dir.tab, d, __ATOMIC_RELEASE);
		}
		pthread_mutex_unlock(&t->lock);
		return d;
	}
	d = value_tab(ck, dir->val, rc);
	if (d)
		__atomic_store_n(&dir->u.dir.tab, d, __ATOMIC_RELEASE);
	return d;
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
		*rc = gen_text(ck, d->ents[i]->gen, &b);
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
	e = tab_find(d, name, strlen(name));
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
	if (i >= d->n) {
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

static uint64_t pic_size(const struct pt_node *n);
static ssize_t pic_read(const struct pt_node *n, void *buf, size_t len,
			uint64_t off, struct pt_error *err);

void pt_node_attr(const struct pt_node *n, struct pt_nattr *a)
{
	a->type = (enum pt_ntype)n->type;
	a->size = node_pic(n) ? pic_size(n) : n->size;
	a->id = n->id;
	a->tensor = node_tensor(n) && n->role == R_VALUE;
	{
		uint64_t lo;
		a->writable = pt_node_writable_storage(n, &lo) != NULL;
	}
}

const char *pt_node_name(const struct pt_node *n)
{
	return n->name;
}

struct pt_node *pt_node_parent(const struct pt_node *n)
{
	return n->parent;
}

int pt_node_send(struct pt_ckpt *ck, struct pt_node *node, uint64_t off,
		 size_t n, int (*send)(void *ctx, const void *p, size_t n),
		 void *ctx)
{
	bool gen = node->role == R_GEN;
	int rc;

	if (node->type == PT_NT_DIR || node_pic(node) || !node_data(node) ||
	    node->role == R_RECORD || node->role == R_JSON ||
	    node->role == R_VFILE)
		return -ENOENT;
	if (gen)        /* pt_tree_committed() may swap the text */
		pthread_mutex_lock(&ck->tree->glock);
	if (off >= node->size)
		n = 0;
	else if (n > node->size - off)
		n = (size_t)(node->size - off);
	rc = send(ctx, node_data(node) + (n ? off : 0), n);
	if (gen)
		pthread_mutex_unlock(&ck->tree->glock);
	return rc;
}

ssize_t pt_node_read(struct pt_ckpt *ck, struct pt_node *node, void *buf,
		     size_t n, uint64_t off, struct pt_error *err)
{
	if (node->type == PT_NT_DIR)
		return -EISDIR;
	if (node_pic(node))
		return pic_read(node, buf, n, off, err);
	if (off >= node->size)
		return 0;
	if (n > node->size - off)
		n = (size_t)(node->size - off);
	if (node->role == R_VALUE && node_tensor(node))
		return pt__tensor_read(ck, node_tensor(node), buf, n, off, err);
	if (node->role == R_RECORD) {
		long long got = pt_zip_pread(ck->zip, node_entry(node), buf, n, off, err);
		return (ssize_t)got;
	}
	if (node->role == R_JSON) {
		struct pt_buf b;

		pt_buf_init(&b);
		pt__tensor_json(ck, node_tensor(node), &b);
		if (b.oom || b.len != node->size) {
			bool oom = b.oom;

			pt_buf_free(&b);
			return oom ? pt_fail(err, -ENOMEM, "out of memory") :
				     pt_fail(err, -EIO, "tensor metadata changed size");
		}
		memcpy(buf, b.p + off, n);
		pt_buf_free(&b);
		return (ssize_t)n;
	}
	if (node->role == R_VFILE) {
		int rc = node_vf(node)->read(node_vf(node)->ctx, buf, n, off, err);
		return rc ? rc : (ssize_t)n;
	}
	if (node->role == R_GEN) {
		/* tree.json may be made again meanwhile (pt_tree_committed) */
		pthread_mutex_lock(&ck->tree->glock);
		if (off >= node->size)
			n = 0;
		else if (n > node->size - off)
			n = (size_t)(node->size - off);
		memcpy(buf, node_data(node) + off, n);
		pthread_mutex_unlock(&ck->tree->glock);
		return (ssize_t)n;
	}
	memcpy(buf, node_data(node) + off, n);
	return (ssize_t)n;
}

/* Where a file's bytes lie, when they lie in one piece of one file: the
 * checkpoint's, or for a sharded checkpoint the shard that holds the
 * tensor (struct pt_storage.home). */
bool pt_node_extent(struct pt_ckpt *ck, const struct pt_node *node,
		    uint64_t off, uint64_t n, int *fd, uint64_t *file_off)
{
	const struct pt_tensor *t = node_tensor(node);

	if (off > node->size || n > node->size - off)
		return false;
	if (node->role == R_VALUE && t) {
		const struct pt_ckpt *home = t->st->home ? t->st->home : ck;

		if (!t->contiguous || t->st->kind != PT_ST_FILE)
			return false;
		return pt_source_extent(home->src,
					t->st->file_off + t->byte_lo + off, n,
					fd, file_off);
	}
	if (node->role == R_RECORD && node_entry(node)->method == PT_ZIP_STORED)
		return pt_source_extent(ck->src, node_entry(node)->data_off + off,
					n, fd, file_off);
	if (node->role == R_VFILE && node_vf(node)->extent)
		return node_vf(node)->extent(node_vf(node)->ctx, off, n, fd, file_off);
	return false;
}

bool pt_node_tensor_json(struct pt_ckpt *ck, const struct pt_node *node,
			 struct pt_buf *out)
{
	if (!node_tensor(node) || (node->role != R_JSON && node->role != R_VALUE))
		return false;
	pt__tensor_json(ck, node_tensor(node), out);
	return true;
}

int pt_node_xattrs(struct pt_ckpt *ck, struct pt_node *node, struct pt_buf *out)
{
	const struct pt_tensor *t = node_tensor(node);
	struct pt_buf v;
	int count = 0;

	(void)ck;
	if (!t || node->role != R_VALUE)
		return 0;
	pt_buf_init(&v);
#define XA(name)                                                    \
	do {                                                        \
		pt_buf_puts(out, "user.ptfs." name);                \
		pt_buf_putc(out, '\0');                             \
		pt_buf_add(out, v.p ? v.p : "", v.len);             \
		pt_buf_putc(out, '\0');                             \
		v.len = 0;                                          \
		count++;                                            \
	} while (0)
	pt_buf_puts(&v, t->dtype_name);
	XA("dtype");
	pt_json_ints(&v, t->shape, t->rank);
	XA("shape");
	pt_json_ints(&v, t->stride, t->rank);
	XA("stride");
	pt_buf_printf(&v, "%lld", (long long)(t->kind == PT_TK_NDARRAY ? 0 : t->offset));
	XA("storage_offset");
	pt_buf_printf(&v, "%llu", (unsigned long long)t->nbytes);
	XA("nbytes");
	pt_buf_puts(&v, t->byteorder == '>' ? "big" : "little");
	XA("byteorder");
	pt_buf_puts(&v, t->kind == PT_TK_PARAMETER ? "parameter" :
			t->kind == PT_TK_NDARRAY ? "ndarray" : "tensor");
	XA("kind");
	if (t->st->entry) {
		pt_buf_add(&v, t->st->entry->name, t->st->entry->name_len);
		XA("storage_record");
	}
	if (t->st->kind == PT_ST_FILE && t->contiguous) {
		pt_buf_printf(&v, "%llu", (unsigned long long)(t->st->file_off + t->byte_lo));
		XA("file_offset");
	}
#undef XA
	pt_buf_free(&v);
	return count;
}

void pt_node_describe(struct pt_ckpt *ck, struct pt_node *node,
		      struct pt_buf *out)
{
	const struct pt_tensor *t = node_tensor(node);

	(void)ck;
	if (!t || node->role != R_VALUE)
		return;
	pt_buf_puts(out, t->dtype_name);
	pt_buf_putc(out, ' ');
	pt_json_ints(out, t->shape, t->rank);
	if (!t->contiguous)
		pt_buf_puts(out, " (view)");
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
	if (!grow((void **)&st, &cap, n, sizeof(*st)) ||
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
		 * than the entry, a picture much more) */
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
		if (r < 0 || !grow((void **)&st, &cap, n, sizeof(*st))) {
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

bool pt_node_class_is(const struct pt_node *n, const char *module,
		      const char *name)
{
	const struct pt_value *v = n->val, *fn;

	if (n->role != R_VALUE || !v || pt__vclass(v) != PT_C_OBJECT ||
	    (v->kind != PT_V_CALL && v->kind != PT_V_OBJ))
		return false;
	fn = v->u.call.callable;
	return pt__is_global(fn, module, name);
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
	if (!is_dir_class(ck->tree->root->val))
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

/* ---- /.ptfs and the root ---- */

/* /.ptfs/records: one folder per '/'-separated component of each record
 * name, every component encoded like a key. */
static int add_record(struct pt_tree *t, struct dtab *top,
		      const struct pt_zip_entry *ze)
{
	struct dtab *d = top;
	const char *p = ze->name;
	struct pt_buf enc;
	int rc = 0;

	pt_buf_init(&enc);
	for (;;) {
		const char *slash = strchr(p, '/');
		size_t len = slash ? (size_t)(slash - p) : strlen(p);
		struct dent *e;

		if (slash && len == 0) { /* "a//b" or a leading '/' */
			p = slash + 1;
			continue;
		}
		if (!slash && len == 0) /* a directory record "a/" */
			break;
		enc.len = 0;
		pt_name_encode(&enc, (const uint8_t *)p, len);
		if (enc.oom) {
			rc = -ENOMEM;
			break;
		}
		if (!slash) {
			/* the file; a folder of the same name gets "~2" */
			rc = claim(d, enc.p, enc.len, NULL);
			if (!rc) {
				d->ents[d->n - 1]->role = R_RECORD;
				d->ents[d->n - 1]->entry = ze;
			}
			break;
		}
		e = tab_find(d, enc.p, enc.len);
		if (!e || e->role != R_RECDIR) {
			struct dtab *sub = tab_new(t);

			if (!sub) {
				rc = -ENOMEM;
				break;
			}
			if (e) {
				rc = claim(d, enc.p, enc.len, NULL);
				if (rc)
					break;
				e = d->ents[d->n - 1];
			} else {
				e = tab_add(d, enc.p, enc.len, R_RECDIR, NULL);
				if (!e) {
					rc = -ENOMEM;
					break;
				}
			}
			e->role = R_RECDIR;
			e->sub = sub;
		}
		d = e->sub;
		p = slash + 1;
	}
	pt_buf_free(&enc);
	return rc;
}

/* The table of folder @rel ("a/b"; "" is @top itself; components encoded
 * like add_record() does) under /.ptfs/records, or NULL. */
static struct dtab *record_dir(struct dtab *top, const char *rel)
{
	struct pt_buf enc;
	struct dtab *d = top;

	pt_buf_init(&enc);
	while (d && rel[0]) {
		const char *slash = strchr(rel, '/');
		size_t len = slash ? (size_t)(slash - rel) : strlen(rel);
		struct dent *e = NULL;

		enc.len = 0;
		pt_name_encode(&enc, (const uint8_t *)rel, len);
		if (!enc.oom)
			e = tab_find(d, enc.p, enc.len);
		d = e && e->role == R_RECDIR ? e->sub : NULL;
		rel += len + (slash ? 1 : 0);
	}
	pt_buf_free(&enc);
	return d;
}

/* The table of /.ptfs/records: one entry per archive record, in folders
 * of the names' parts.  Call under the tree lock. */
static int records_table(struct pt_ckpt *ck, struct dtab **out)
{
	struct pt_tree *t = ck->tree;
	struct dtab *recs = tab_new(t);
	uint64_t i;
	int rc;

	if (!recs)
		return -ENOMEM;
	for (i = 0; i < pt_zip_info(ck->zip)->n_entries; i++) {
		rc = add_record(t, recs, pt_zip_entry_at(ck->zip, i));
		if (rc)
			return rc;
	}
	*out = recs;
	return 0;
}

static int build_meta(struct pt_ckpt *ck, struct pt_tree *t)
{
	struct dtab *recs;
	uint64_t i;
	int rc;

	t->meta_tab = tab_new(t);
	if (!t->meta_tab)
		return -ENOMEM;
	static const struct {
		const char *name;
		enum gen gen;
	} gens[] = { { "info.txt", GEN_INFO },
		     { "tree.json", GEN_TREE },
		     { "pickle.txt", GEN_PICKLE } };
	struct dent *e;

	for (i = 0; i < 3; i++) {
		e = tab_add(t->meta_tab, gens[i].name, strlen(gens[i].name),
			    R_GEN, NULL);
		if (!e)
			return -ENOMEM;
		e->gen = gens[i].gen;
	}
	/* a generated directory (pt_tree_set_vdir: /.ptfs/export) */
	for (i = 0; i < t->n_vdirs; i++) {
		if (tab_has(t->meta_tab, t->vname[i], strlen(t->vname[i])))
			continue;
		e = tab_add(t->meta_tab, t->vname[i], strlen(t->vname[i]), R_VDIR, NULL);
		if (!e)
			return -ENOMEM;
	}
	/* files the format added (a safetensors header, an index) */
	for (i = 0; i < (uint64_t)ck->n_meta_files; i++) {
		e = tab_add(t->meta_tab, ck->meta_files[i].name,
			    strlen(ck->meta_files[i].name), R_BLOB, NULL);
		if (!e)
			return -ENOMEM;
		e->blob = &ck->meta_files[i];
	}
	/* value trees a format added (TorchScript constants) */
	for (i = 0; i < (uint64_t)ck->n_meta_dirs; i++) {
		const struct pt_meta_dir *md = &ck->meta_dirs[i];

		if (!md->root)
			continue;
		rc = claim(t->meta_tab, md->name, strlen(md->name),
			   deref(md->root));
		if (rc)
			return rc;
	}
	if (!ck->zip)
		return 0;
	e = tab_add(t->meta_tab, "records", 7, R_RECDIR, NULL);
	if (!e)
		return -ENOMEM;
	for (i = 0; i < (uint64_t)ck->n_meta_dirs; i++)
		if (ck->meta_dirs[i].records)
			break;
	if (i == (uint64_t)ck->n_meta_dirs)
		return 0;       /* no shortcuts into it: made on first use */
	rc = records_table(ck, &e->sub);
	if (rc)
		return rc;
	recs = e->sub;
	/* shortcuts to record folders (/.ptfs/code, /.ptfs/extra) */
	for (i = 0; i < (uint64_t)ck->n_meta_dirs; i++) {
		const struct pt_meta_dir *md = &ck->meta_dirs[i];
		struct dtab *sub;

		if (!md->records || tab_has(t->meta_tab, md->name, strlen(md->name)))
			continue;
		sub = record_dir(recs, pt_zip_info(ck->zip)->prefix);
		if (sub)
			sub = record_dir(sub, md->records);
		if (!sub)
			continue;
		e = tab_add(t->meta_tab, md->name, strlen(md->name), R_RECDIR,
			    NULL);
		if (!e)
			return -ENOMEM;
		e->sub = sub;
	}
	return 0;
}

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
	root->val = deref(ck->root);
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
	struct dtab *d = tab_new(t);

	if (!d || !tab_add(d, ".ptfs", 5, R_META, NULL)) {
		*rc = -ENOMEM;
		return NULL;
	}
	if (is_dir_class(v)) {
		*rc = fill_value(ck, d, v);
	} else {
		struct pt_buf enc;

		pt_buf_init(&enc);
		pt_name_encode(&enc, (const uint8_t *)ck->stem, strlen(ck->stem));
		*rc = enc.oom ? -ENOMEM : claim(d, enc.p, enc.len, v);
		pt_buf_free(&enc);
	}
	return *rc ? NULL : d;
}

static void pic_free(struct pt_pic *g);

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
	for (i = 0; i < t->n_tabs; i++)
		tab_free(t->tabs[i]);
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

const struct pt_storage *pt_node_writable_storage(const struct pt_node *n, uint64_t *lo)
{
	const struct pt_tensor *t = node_tensor(n);

	if (!t || n->role != R_VALUE || !t->contiguous || !t->st->writable ||
	    t->st->home ||
	    t->st->kind != PT_ST_FILE || t->kind == PT_TK_NDARRAY ||
	    t->dtype->packed)
		return NULL;
	*lo = t->byte_lo;
	return t->st;
}

const struct pt_storage *pt_node_viewed_storage(const struct pt_node *n)
{
	const struct pt_tensor *t = node_tensor(n);

	/* a shard's storage (st->home) belongs to another checkpoint */
	if (!t || n->role != R_VALUE || !t->st->writable ||
	    t->st->kind != PT_ST_FILE || t->st->home)
		return NULL;
	return t->st;
}

/* ---- export accessors (issue 14: core/export/) ---- */

bool pt_node_tinfo(const struct pt_node *n, struct pt_tinfo *ti)
{
	const struct pt_tensor *t = node_tensor(n);

	if (!t || n->role != R_VALUE)
		return false;
	ti->dtype = t->dtype->name;
	ti->itemsize = t->dtype->size;
	ti->packed = t->dtype->packed;
	ti->rank = t->rank;
	ti->shape = t->shape;
	ti->stride = t->stride;
	ti->offset = t->offset;
	ti->numel = t->numel;
	ti->nbytes = t->nbytes;
	ti->byteorder = t->dtype->size == 1 ? '|' : t->byteorder;
	ti->contiguous = t->contiguous;
	ti->storage = t->st;
	ti->byte_lo = t->byte_lo;
	ti->byte_hi = t->byte_hi;
	ti->ndarray = t->kind == PT_TK_NDARRAY;
	ti->parameter = t->kind == PT_TK_PARAMETER;
	ti->requires_grad = t->requires_grad;
	return true;
}

int pt_node_storage_read(struct pt_ckpt *ck, const struct pt_node *node,
			 void *buf, size_t n, uint64_t off, struct pt_error *err)
{
	const struct pt_tensor *t = node_tensor(node);
	struct pt_tensor whole;
	ssize_t got;

	if (!t || node->role != R_VALUE)
		return -EINVAL;
	memset(&whole, 0, sizeof(whole));
	whole.dtype = t->dtype;
	whole.st = t->st;
	whole.nbytes = t->st->nbytes;
	whole.byte_hi = t->st->nbytes;
	whole.contiguous = true;
	got = pt__tensor_read(ck, &whole, buf, n, off, err);
	if (got < 0)
		return (int)got;
	return (size_t)got == n ? 0 : pt_fail(err, -EIO, "storage read past its end");
}

bool pt_node_str_key(const struct pt_node *n, const uint8_t **p, size_t *len)
{
	if (!n->key || n->key->kind != PT_V_STR)
		return false;
	*p = n->key->u.s.p;
	*len = n->key->u.s.len;
	return true;
}

bool pt_node_is_object(const struct pt_node *n)
{
	return n->role == R_VALUE && n->type == PT_NT_DIR && n->val &&
	       pt__vclass(n->val) == PT_C_OBJECT;
}

enum pt_nkind pt_node_kind(const struct pt_node *n)
{
	const struct pt_node *a;

	if (n->role == R_RECDIR) {
		/* a level of dotted keys (nested), unless under /.ptfs */
		for (a = n->parent; a; a = a->parent)
			if (a->role == R_META)
				return PT_NK_OTHER;
		return PT_NK_DIR;
	}
	if (n->role != R_VALUE)
		return PT_NK_OTHER;
	if (n->type == PT_NT_LINK)
		return PT_NK_LINK;
	if (n->type == PT_NT_DIR)
		return PT_NK_DIR;
	if (node_tensor(n))
		return PT_NK_TENSOR;
	return pt__vclass(n->val) == PT_C_BYTES ? PT_NK_BYTES : PT_NK_SCALAR;
}

bool pt_node_scalar_json(const struct pt_node *n, struct pt_buf *out)
{
	const struct pt_value *v = n->val;

	if (pt_node_kind(n) != PT_NK_SCALAR)
		return false;
	if (pt__vclass(v) == PT_C_TEXT) {
		size_t len = n->size;
		if (len && node_data(n)[len - 1] == '\n')
			len--;
		pt_buf_putc(out, '"');
		pt_json_str(out, node_data(n), len);
		pt_buf_putc(out, '"');
		return true;
	}
	switch (v->kind) {
	case PT_V_NONE:
		pt_buf_puts(out, "null");
		break;
	case PT_V_BOOL:
		pt_buf_puts(out, v->u.b ? "true" : "false");
		break;
	case PT_V_FLOAT:
		if (v->u.f != v->u.f)
			pt_buf_puts(out, "NaN");
		else if (v->u.f > 1.7976931348623157e308)
			pt_buf_puts(out, "Infinity");
		else if (v->u.f < -1.7976931348623157e308)
			pt_buf_puts(out, "-Infinity");
		else
			pt_buf_add(out, node_data(n), n->size - 1);
		break;
	case PT_V_STR:
		pt_buf_putc(out, '"');
		pt_json_str(out, v->u.s.p, v->u.s.len);
		pt_buf_putc(out, '"');
		break;
	default:        /* ints of any size: the decimal text */
		pt_buf_add(out, node_data(n), n->size ? n->size - 1 : 0);
		break;
	}
	return true;
}

static int file_unchanged(const struct pt_ckpt *ck, struct pt_error *err)
{
	int rc;

	if (!ck->src)
		return 0;
	rc = pt_source_check(ck->src, PT_CHECK_NAME, err);
	if (rc && rc != -ENOMEM) {
		pt_error_clear(err);
		return pt_fail(err, -ESTALE, "%s: changed on disk while it was read",
			       ck->path);
	}
	return rc;
}

int pt_ckpt_unchanged(const struct pt_ckpt *ck, struct pt_error *err)
{
	const struct pt_ckpt *last = ck;
	int rc = file_unchanged(ck, err);
	size_t i;

	for (i = 0; i < ck->n_st; i++) {
		const struct pt_storage *s = ck->st_list[i];

		if (rc)
			break;
		if (s->home && s->home != last) {
			last = s->home;
			rc = file_unchanged(last, err);
		}
	}
	return rc;
}

/* ---- generated files (issue 14: /.ptfs/export) ---- */

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

		e = tab_find(d, p, len);
		if (e && e->role != R_RECDIR)
			return -EEXIST;
		if (!e) {
			struct dtab *sub = tab_new(b->t);

			e = sub ? tab_add(d, p, len, R_RECDIR, NULL) : NULL;
			if (!e)
				return -ENOMEM;
			e->sub = sub;
		}
		d = e->sub;
		p = slash + 1;
	}
	if (tab_has(d, p, strlen(p)))
		return -EEXIST;
	copy = malloc(sizeof(*copy));
	if (!copy || !grow((void **)&b->t->vfiles, &b->t->cap_vfiles,
			   b->t->n_vfiles, sizeof(*b->t->vfiles))) {
		free(copy);
		return -ENOMEM;
	}
	*copy = *vf;
	b->t->vfiles[b->t->n_vfiles++] = copy;
	e = tab_add(d, p, strlen(p), R_VFILE, NULL);
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
	tab_clear(d);
	d->err = rc;
	pthread_mutex_unlock(&t->lock);
	__atomic_store_n(&dir->u.dir.tab, d, __ATOMIC_RELEASE);
	return d;
}

/* The generated directory's table: filled once, outside the tree lock
 * (the filler walks the tree), one filler at a time. */
static struct dtab *vdir_tab(struct pt_ckpt *ck, struct pt_node *dir, int *rc)
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
		d = tab_new(t);
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

bool pt_node_generated(const struct pt_node *n)
{
	return n->role == R_VFILE;
}

/* ---- issue 15: pictures beside tensors (NAME.png, -o previews) ---- */

/*
 * A picture is made whole by the front end's maker on its first stat or
 * read, under the node's own mutex (other lookups never wait for it), and
 * kept until close or a reset.  Lock order: a picture's, then the tree's
 * (finding the tensor file takes the tree lock).
 */
struct pt_pic {
	pthread_mutex_t mu;
	struct pt_ckpt *ck;
	struct pt_node *parent;         /* the tensor's folder */
	bool done;
	int rc;
	uint8_t *data;
	size_t len;
};

void pt_ckpt_set_picture_maker(struct pt_ckpt *ck, pt_picture_fn fn, void *ctx)
{
	ck->tree->pic_fn = fn;
	ck->tree->pic_ctx = ctx;
}

bool pt_node_lazy_size(const struct pt_node *n)
{
	return node_pic(n) != NULL;
}

uint64_t pt_node_id(const struct pt_node *n)
{
	return n->id;
}

static bool wants_png(const struct dtab *d, const struct pt_value *val)
{
	const struct pt_tensor *t = val->aux;

	return d->t->previews && t && t->numel >= 2;
}

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

/* Make the picture if it is not made; called with g->mu held. */
static void pic_make_locked(const struct pt_node *n, struct pt_error *err)
{
	struct pt_pic *g = node_pic(n);
	struct pt_tree *t = g->ck->tree;
	struct pt_node *tn = NULL;
	size_t len = strlen(n->name);
	char name[4096];
	int rc = 0;

	if (g->done)
		return;
	if (pt_cancelled()) {
		g->rc = pt_fail(err, -EINTR, "interrupted");
		return;         /* not done: made on the next use */
	}
	if (len > 4 && len - 4 < sizeof(name)) {
		memcpy(name, n->name, len - 4);         /* NAME of NAME.png */
		name[len - 4] = '\0';
		tn = pt_tree_lookup(g->ck, g->parent, name, &rc);
	}
	if (!t->pic_fn || !tn)
		g->rc = pt_fail(err, -EIO, "%s: nothing draws it", n->name);
	else
		g->rc = t->pic_fn(t->pic_ctx, g->ck, tn, &g->data, &g->len, err);
	/* an interrupted drawing is made again on the next use */
	g->done = g->rc != -EINTR;
}

/* 0 when the picture cannot be made (a read then says why). */
static uint64_t pic_size(const struct pt_node *n)
{
	struct pt_pic *g = node_pic(n);
	struct pt_error err;
	uint64_t size;

	pt_error_clear(&err);
	pthread_mutex_lock(&g->mu);
	pic_make_locked(n, &err);
	size = g->rc ? 0 : g->len;
	pthread_mutex_unlock(&g->mu);
	return size;
}

static ssize_t pic_read(const struct pt_node *n, void *buf, size_t len,
			uint64_t off, struct pt_error *err)
{
	struct pt_pic *g = node_pic(n);
	ssize_t got = pt_lock_or_cancel(&g->mu);

	if (got)
		return pt_fail(err, (int)got, "interrupted");
	pic_make_locked(n, err);
	if (g->rc) {
		got = pt_fail(err, g->rc, "%s: could not be drawn", n->name);
		if (!g->done)
			g->rc = 0;
	} else if (off >= g->len) {
		got = 0;
	} else {
		if (len > g->len - off)
			len = (size_t)(g->len - off);
		memcpy(buf, g->data + off, len);
		got = (ssize_t)len;
	}
	pthread_mutex_unlock(&g->mu);
	return got;
}

/* The nodes made so far for which @pick (called under the tree lock, which
 * it may rely on, with @ctx) says yes, in a malloc()ed array of *@count;
 * NULL when out of memory. */
static struct pt_node **nodes_where(struct pt_ckpt *ck,
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

static bool is_pic(struct pt_ckpt *ck, struct pt_node *n, void *ctx)
{
	(void)ck;
	(void)ctx;
	return node_pic(n) != NULL;
}

void pt_ckpt_pictures_reset(struct pt_ckpt *ck,
			    void (*fn)(void *ctx, struct pt_node *n), void *ctx)
{
	struct pt_node **pics;
	size_t i, n = 0;

	/* collected under the tree lock (nodes are being made), then each
	 * picture's own lock is taken without it (lock order above) */
	pics = nodes_where(ck, is_pic, NULL, &n);
	for (i = 0; i < n; i++) {
		struct pt_pic *g = node_pic(pics[i]);
		bool made;

		pthread_mutex_lock(&g->mu);
		made = g->done;
		free(g->data);
		g->data = NULL;
		g->len = 0;
		g->rc = 0;
		g->done = false;
		pthread_mutex_unlock(&g->mu);
		if (made && fn)
			fn(ctx, pics[i]);
	}
	free(pics);
}

/* ---- issue 17: the sidecars a reader is likely to read next ---- */

bool pt_node_is_sidecar(const struct pt_node *n)
{
	return n->role == R_JSON;
}

/* Entry index of @n in its directory's table, or SIZE_MAX. */
static size_t index_in_parent(const struct pt_node *n)
{
	const struct dtab *d = __atomic_load_n(&n->parent->u.dir.tab, __ATOMIC_ACQUIRE);
	const struct dent *e;

	if (!d)
		return SIZE_MAX;
	e = tab_find(d, n->name, strlen(n->name));
	return e ? e->idx : SIZE_MAX;
}

/*
 * Depth first from just after @from, over nodes and tables that already
 * exist only: a directory nobody listed or searched is not entered, so
 * nothing is built and no lock is taken (published pointers are read
 * with acquire loads, as in child_at()).  Every step is one entry, at
 * most @max_steps of them.  The caller serialises calls: `pushed` is
 * only set here (and cleared by pt_tree_committed()).
 */
size_t pt_tree_next_sidecars(struct pt_node *from, struct pt_node **out,
			     size_t max, size_t max_steps)
{
	struct pt_node *dir = from->parent;
	size_t i, got = 0, steps = 0;

	if (!dir || (i = index_in_parent(from)) == SIZE_MAX)
		return 0;
	for (i++; got < max && steps < max_steps; steps++) {
		const struct dtab *d = __atomic_load_n(&dir->u.dir.tab, __ATOMIC_ACQUIRE);
		struct pt_node **kids = __atomic_load_n(&dir->u.dir.kids, __ATOMIC_ACQUIRE);
		struct pt_node *n;

		if (d && kids && i < d->n) {
			n = __atomic_load_n(&kids[i++], __ATOMIC_ACQUIRE);
			if (!n)
				continue;
			if (n->role == R_JSON) {
				/* pt_tree_committed() clears it */
				if (!__atomic_exchange_n(&n->pushed, true, __ATOMIC_RELAXED))
					out[got++] = n;
			} else if (n->type == PT_NT_DIR && n->role != R_META &&
				   __atomic_load_n(&n->u.dir.kids, __ATOMIC_ACQUIRE)) {
				dir = n;
				i = 0;
			}
			continue;
		}
		/* the end of @dir: on after it in its parent */
		if (!dir->parent || (i = index_in_parent(dir)) == SIZE_MAX)
			break;
		i++;
		dir = dir->parent;
	}
	return got;
}

/* ---- after a commit ---- */

/* Which text R_GEN node @n holds (pickle.txt for none). */
static enum gen gen_of(const struct pt_tree *t, const struct pt_node *n)
{
	const struct dent *e;

	if (n->role != R_GEN || !t->meta_tab)
		return GEN_PICKLE;
	e = tab_find(t->meta_tab, n->name, strlen(n->name));
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
	if (gen_text(ck, gen_of(t, n), &b) != 0 || b.oom) {
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

/* Generated files with a remake op make their contents again; under
 * vlock, so that a fill begun before the commit has added its files. */
static void remake_vfiles(struct pt_tree *t)
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

/* Does node @x show what the commits changed (nodes_where() collects
 * those)? */
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
		remake_vfiles(ck->tree);
	v = nodes_where(ck, stale, &c, &n);
	for (i = 0; v && i < n; i++)
		if (v[i]->role == R_GEN)
			regen(ck, v[i]);
	for (i = 0; v && fn && i < n; i++)
		fn(ctx, v[i]);
	free(v);
	free(c.recs);
}
