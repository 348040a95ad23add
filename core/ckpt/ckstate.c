/* SPDX-License-Identifier: MIT */
/*
 * ckstate.c -- the services a checkpoint's state offers to the layers that
 * fill it (formats, torch values) and read it (the tree): memory owned
 * until close, warnings, the pickles kept, the globals a full unpickler
 * would import, files and folders added under /.ptfs.  struct pt_ckpt
 * itself is defined in ckpt/ckpt_i.h.  Nothing here calls a format, the
 * tree or ckpt.c.
 */
#include "ckpt/ckpt_i.h"
#include "base/hash.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *pt__own(struct pt_ckpt *ck, void *p)
{
	if (!p)
		return NULL;
	if (ck->n_owned == ck->cap_owned) {
		size_t nc = ck->cap_owned ? ck->cap_owned * 2 : 256;
		void **q = realloc(ck->owned, nc * sizeof(*q));
		if (!q) {
			free(p);
			return NULL;
		}
		ck->owned = q;
		ck->cap_owned = nc;
	}
	ck->owned[ck->n_owned++] = p;
	return p;
}

/* pt__alloc() blocks: 64 KiB, or one of its own for a big request. */
#define PT_BLK_SIZE (64u << 10)

struct pt_blk {
	struct pt_blk *next;
	size_t used, size;
	max_align_t data[];
};

void *pt__alloc(struct pt_ckpt *ck, size_t n)
{
	struct pt_blk *b = ck->blks;
	size_t need = n ? (n + 7) & ~(size_t)7 : 8;
	uint8_t *p;

	if (need < n)
		return NULL;
	if (need > PT_BLK_SIZE / 4) {
		if (need > SIZE_MAX - sizeof(*b))
			return NULL;
		b = malloc(sizeof(*b) + need);
		if (!b)
			return NULL;
		b->used = b->size = need;
		/* behind the head, which keeps filling */
		b->next = ck->blks ? ck->blks->next : NULL;
		if (ck->blks)
			ck->blks->next = b;
		else
			ck->blks = b;
		memset(b->data, 0, n);
		return b->data;
	}
	if (!b || b->size - b->used < need) {
		b = malloc(sizeof(*b) + PT_BLK_SIZE);
		if (!b)
			return NULL;
		pt_populate(b, sizeof(*b) + PT_BLK_SIZE);
		b->used = 0;
		b->size = PT_BLK_SIZE;
		b->next = ck->blks;
		ck->blks = b;
	}
	p = (uint8_t *)b->data + b->used;
	b->used += need;
	memset(p, 0, n);
	return p;
}

/* ---- the storages by key ---- */

static void st_slot_put(uint32_t *slots, size_t nslots, const char *key,
			uint32_t pos)
{
	pt_slot_put(slots, nslots, pt_hash_name(key, strlen(key)), pos + 1);
}

/* Room for @want storages: the list, and an index at most half full. */
static bool st_room(struct pt_ckpt *ck, size_t want)
{
	uint32_t *slots;
	size_t ns, i;

	if (want >= UINT32_MAX / 4)
		return false;
	if (want > ck->cap_st) {
		size_t cap = ck->cap_st ? ck->cap_st : 16;
		struct pt_storage **l;

		while (cap < want)
			cap *= 2;
		l = realloc(ck->st_list, cap * sizeof(*l));
		if (!l)
			return false;
		ck->st_list = l;
		ck->cap_st = cap;
	}
	if (2 * want <= ck->n_st_slots)
		return true;
	for (ns = ck->n_st_slots ? 2 * ck->n_st_slots : 32; ns < 2 * want;
	     ns *= 2)
		;
	slots = calloc(ns, sizeof(*slots));
	if (!slots)
		return false;
	for (i = 0; i < ck->n_st; i++)
		st_slot_put(slots, ns, ck->st_list[i]->key, (uint32_t)i);
	free(ck->st_slots);
	ck->st_slots = slots;
	ck->n_st_slots = ns;
	return true;
}

int pt__storage_add(struct pt_ckpt *ck, struct pt_storage *st)
{
	if (!st_room(ck, ck->n_st + 1))
		return -ENOMEM;
	st_slot_put(ck->st_slots, ck->n_st_slots, st->key, (uint32_t)ck->n_st);
	ck->st_list[ck->n_st++] = st;
	return 0;
}

struct pt_storage *pt__storage_find(const struct pt_ckpt *ck,
				    const char *key)
{
	size_t len = strlen(key), i, mask = ck->n_st_slots - 1;

	if (!ck->n_st_slots)
		return NULL;
	for (i = pt_hash_name(key, len) & mask; ck->st_slots[i];
	     i = (i + 1) & mask) {
		struct pt_storage *st = ck->st_list[ck->st_slots[i] - 1];

		if (strcmp(st->key, key) == 0)
			return st;
	}
	return NULL;
}

/*
 * A format that knows how many storages to expect (a ZIP's record count)
 * sizes the list and the index once instead of doubling them ~15 times
 * for 20,000, each a copy into fresh pages.
 */
void pt__storages_expect(struct pt_ckpt *ck, size_t n)
{
	/* a hint from a count the file states: bounded as uthash's was */
	if (n > ck->n_st && n <= ((size_t)1 << 22))
		(void)st_room(ck, n);
}

void pt__storages_free(struct pt_ckpt *ck)
{
	free(ck->st_list);
	free(ck->st_slots);
	ck->st_list = NULL;
	ck->st_slots = NULL;
	ck->n_st = ck->cap_st = ck->n_st_slots = 0;
}

void pt__alloc_free(struct pt_ckpt *ck)
{
	while (ck->blks) {
		struct pt_blk *b = ck->blks;

		ck->blks = b->next;
		free(b);
	}
}

int pt__add_meta_file(struct pt_ckpt *ck, const char *name, void *data,
		      size_t len)
{
	struct pt_meta_file *m;

	if (!pt__own(ck, data))
		return -ENOMEM;
	if (ck->n_meta_files == PT_MAX_META_FILES)
		return -EFBIG;
	m = &ck->meta_files[ck->n_meta_files++];
	m->name = name;
	m->data = data;
	m->len = len;
	return 0;
}

int pt__add_meta_dir(struct pt_ckpt *ck, const char *name,
		     struct pt_value *root, const char *records)
{
	struct pt_meta_dir *m;

	if (ck->n_meta_dirs == PT_MAX_META_DIRS)
		return -EFBIG;
	m = &ck->meta_dirs[ck->n_meta_dirs++];
	m->name = name;
	m->root = root;
	m->records = records;
	return 0;
}

void pt__warn(struct pt_ckpt *ck, const char *fmt, ...)
{
	char line[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (ck->warnings.p && strstr(ck->warnings.p, line))
		return;
	pt_buf_puts(&ck->warnings, line);
	pt_buf_putc(&ck->warnings, '\n');
}

/* Keep a decoded pickle (and its bytes, unless @borrowed) until close. */
static int keep_pickle(struct pt_ckpt *ck, struct pt_pickle *pk, uint8_t *buf,
		       size_t len, const char *label, uint64_t file_off,
		       bool borrowed, struct pt_error *err)
{
	struct pt_pickled *pd;

	if (ck->n_pickles == PT_MAX_PICKLES) {
		pt_pickle_free(pk);
		if (!borrowed)
			free(buf);
		return pt_fail(err, -EFBIG, "too many pickles");
	}
	pd = &ck->pickles[ck->n_pickles++];
	pd->pk = pk;
	pd->buf = buf;
	pd->len = len;
	pd->label = label;
	pd->file_off = file_off;
	pd->borrowed = borrowed;
	return 0;
}

static int load_pickle(struct pt_ckpt *ck, uint8_t *buf, size_t len,
		       const char *label, uint64_t file_off,
		       struct pt_value **root, size_t *used,
		       pt_pickle_reduce_fn reduce, struct pt_error *err)
{
	struct pt_pickle *pk = NULL;
	size_t u = 0;
	int rc;

	if (len > ck->opts.limits.max_pickle_bytes) {
		free(buf);
		return pt_fail(err, -EFBIG,
			       "%s: %zu bytes exceeds the pickle limit of %" PRIu64,
			       label, len, ck->opts.limits.max_pickle_bytes);
	}
	if (reduce)
		rc = pt_pickle_load_lean(&pk, buf, len, &u, &ck->opts.limits,
					 reduce, ck, err);
	else
		rc = pt_pickle_load(&pk, buf, len, &u, &ck->opts.limits, err);
	if (rc) {
		pt_error_prefix(err, "%s", label);
		free(buf);
		return rc;
	}
	rc = keep_pickle(ck, pk, buf, len, label, file_off, false, err);
	if (rc)
		return rc;
	*root = pt_pickle_root(pk);
	if (used)
		*used = u;
	return 0;
}

int pt__load_pickle(struct pt_ckpt *ck, uint8_t *buf, size_t len,
		    const char *label, uint64_t file_off,
		    struct pt_value **root, size_t *used, struct pt_error *err)
{
	return load_pickle(ck, buf, len, label, file_off, root, used, NULL,
			   err);
}

int pt__load_pickle_lean(struct pt_ckpt *ck, uint8_t *buf, size_t len,
			 const char *label, uint64_t file_off,
			 struct pt_value **root, pt_pickle_reduce_fn reduce,
			 struct pt_error *err)
{
	return load_pickle(ck, buf, len, label, file_off, root, NULL, reduce,
			   err);
}

/* Strings and long ints of @pd's graph whose text is in its input, into
 * @out; false when a bytes value's is (or out of memory). */
static bool pinned_text(const struct pt_pickled *pd, struct pt_vstack *out)
{
	uint32_t count = pt_pickle_count(pd->pk);
	struct pt_vstack st = { 0 };
	uint8_t *seen = calloc(count / 8 + 1, 1);
	bool ok = seen && !pt_vstack_push(&st, pt_pickle_root(pd->pk));

	while (ok && st.n > 0) {
		struct pt_value *v = st.v[--st.n];
		bool in;

		if (v->id >= count || (seen[v->id / 8] & (1u << (v->id % 8))))
			continue;
		seen[v->id / 8] |= (uint8_t)(1u << (v->id % 8));
		in = v->u.s.p >= pd->buf && v->u.s.p < pd->buf + pd->len;
		switch (v->kind) {
		case PT_V_STR:
		case PT_V_BIGINT:
			if (in && v->u.s.len && pt_vstack_push(out, v))
				ok = false;
			break;
		case PT_V_BYTES:
		case PT_V_BYTEARRAY:
			if (in && v->u.s.len)
				ok = false;
			break;
		default:
			if (pt_vstack_push_children(&st, v))
				ok = false;
			break;
		}
	}
	pt_vstack_free(&st);
	free(seen);
	return ok;
}

void pt__unpin_pickle(struct pt_ckpt *ck, int i)
{
	struct pt_pickled *pd = &ck->pickles[i];
	struct pt_vstack strs = { 0 };
	size_t k, total = 0;
	uint8_t *block, *q;

	if (pd->borrowed || !pd->buf || pd->file_off == UINT64_MAX ||
	    !pinned_text(pd, &strs))
		goto out;
	for (k = 0; k < strs.n; k++)
		total += strs.v[k]->u.s.len;
	block = malloc(total ? total : 1);
	if (!block || !pt__own(ck, block))
		goto out;
	for (k = 0, q = block; k < strs.n; k++) {
		struct pt_value *v = strs.v[k];

		memcpy(q, v->u.s.p, v->u.s.len);
		v->u.s.p = q;
		v->u.s.in_off = UINT64_MAX;
		q += v->u.s.len;
	}
	free(pd->buf);
	pd->buf = NULL;
out:
	pt_vstack_free(&strs);
}

int pt__pickle_input(struct pt_ckpt *ck, int i, const uint8_t **p,
		     uint8_t **owned, struct pt_error *err)
{
	const struct pt_pickled *pd = &ck->pickles[i];
	int rc;

	*owned = NULL;
	*p = pd->buf;
	if (pd->buf)
		return 0;
	rc = pt_source_dup(ck->src, pd->file_off, pd->len, owned, err);
	*p = *owned;
	return rc;
}

int pt__add_pickle(struct pt_ckpt *ck, struct pt_pickle *pk, uint8_t *buf,
		   size_t len, const char *label, uint64_t file_off,
		   struct pt_error *err)
{
	return keep_pickle(ck, pk, buf, len, label, file_off, true, err);
}

/* Globals whose presence means a full unpickler would run code. */
static const char *const dangerous_modules[] = {
	"os", "posix", "nt", "subprocess", "sys", "builtins", "__builtin__",
	"socket", "shutil", "runpy", "pty", "commands", "webbrowser",
	"importlib", "pickle", "_pickle", "marshal", "ctypes", "code",
	"pdb", "timeit", "bdb", "operator", "functools", "types", "platform",
	"asyncio", "multiprocessing", "requests", "urllib", "http", "ssl",
	"tempfile", "glob", "io", "codecs", "zipimport", "pip", "setuptools",
	"distutils", "numpy.testing", "torch.hub", "torch.serialization",
	"torch.jit", "torch._inductor", "torch.utils.cpp_extension",
};

static const char *const safe_builtins[] = {
	"set", "frozenset", "bytearray", "bytes", "complex", "dict", "list",
	"tuple", "slice", "object", "int", "float", "str", "bool", "range",
};

static bool global_is_dangerous(const char *m, const char *n)
{
	size_t i;

	if (strcmp(m, "builtins") == 0 || strcmp(m, "__builtin__") == 0) {
		for (i = 0; i < sizeof(safe_builtins) / sizeof(*safe_builtins); i++)
			if (strcmp(n, safe_builtins[i]) == 0)
				return false;
		return true;
	}
	if (strcmp(m, "torch.serialization") == 0 && strcmp(n, "_get_layout") == 0)
		return false;
	if (strcmp(m, "torch.jit._pickle") == 0)
		return false;
	for (i = 0; i < sizeof(dangerous_modules) / sizeof(*dangerous_modules); i++) {
		size_t k = strlen(dangerous_modules[i]);
		if (strncmp(m, dangerous_modules[i], k) == 0 &&
		    (m[k] == '\0' || m[k] == '.'))
			return true;
	}
	if (strcmp(m, "torch") == 0 && strcmp(n, "load") == 0)
		return true;
	if (strcmp(m, "torch.storage") == 0 && strcmp(n, "_load_from_bytes") == 0)
		return true;
	return false;
}

/* List each distinct global once in the summary ("imports: ..."), as the
 * names a full unpickler would import; capped so a hostile file cannot
 * make the summary huge. */
static void note_global(struct pt_ckpt *ck, const char *m, const char *n)
{
	char name[256];

	snprintf(name, sizeof(name), " %s.%s,", m, n);
	if (ck->globals.len > 8192 || (ck->globals.p && strstr(ck->globals.p, name)))
		return;
	pt_buf_puts(&ck->globals, name);
}

void pt__note_global(struct pt_ckpt *ck, const struct pt_value *g)
{
	const char *m = g->u.global.module, *n = g->u.global.name;

	if (g->id == UINT32_MAX) /* made by a format, not named by the file */
		return;
	note_global(ck, m, n);
	if (global_is_dangerous(m, n))
		pt__warn(ck, "dangerous global %s.%s: a full unpickler (torch.load with weights_only=False) would import it",
			 m, n);
}

int pt__js_keep(struct pt_js *j, struct pt_ckpt *ck)
{
	if (!pt__own(ck, pt__js_take(j)))
		return pt_fail(j->err, -ENOMEM, "out of memory");
	return 0;
}
