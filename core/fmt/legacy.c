/* SPDX-License-Identifier: MIT */
/*
 * legacy.c -- the legacy pickle-stream format of torch.save
 * (_use_new_zipfile_serialization=False, the default before torch 1.6;
 * docs/FORMATS.md, "Legacy stream layout"), and plain pickles whose
 * storages are embedded as torch.storage._load_from_bytes(bytes) calls
 * (docs/FORMATS.md, "Storages pickled inside bytes"), each of which holds
 * a complete legacy stream.
 *
 * A legacy file is five pickles (magic number, protocol version 1001,
 * sys_info, the object, the sorted list of storage keys) followed, for
 * each key in that list, by an i64le element count and the storage's
 * bytes.  Element sizes come from the persistent ids of the object pickle,
 * so that pickle is decoded first; every storage is then served from its
 * place in the file (PT_ST_FILE, zero-copy).
 *
 * Before classification the open hooks rewrite two kinds of node so that
 * torch.c sees what torch.load would return: a ('module', class, file,
 * source) persistent id becomes the class itself (a GLOBAL node), and a
 * _load_from_bytes(b) call becomes a persistent id whose value is that
 * call, which the storage hook below resolves to the storage it rebuilds.
 * The graph is not shared with anyone yet, so this is safe.
 */
#include "ckpt/ckpt_i.h"
#include "base/text.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 0x1950a86a20f9469cfc6c as little-endian two's complement bytes. */
static const uint8_t lg_magic[10] = {
	0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19,
};

#define LG_NPICKLES 5
#define LG_FIRST_WINDOW (1u << 20)

static const char *const lg_names[LG_NPICKLES] = {
	"magic number", "protocol version", "sys_info", "object",
	"storage keys",
};

/* A root storage: named by the persistent ids, data in the stream. */
struct lg_root {
	char *key;                      /* root key (owned) */
	const struct pt_dtype *dtype;   /* of the first pid naming it */
	uint64_t numel;                 /* elements, from that pid */
	uint64_t off;                   /* data offset in the stream */
	bool has_data;                  /* listed in the key list */
	UT_hash_handle hh;              /* by key */
};

/* One decoded legacy stream (the file, or a _load_from_bytes blob). */
struct lg_stream {
	struct pt_pickle *pk[LG_NPICKLES]; /* NULL once handed to ck */
	struct pt_value *obj;           /* root of the object pickle */
	struct pt_value *keys;          /* root of the key-list pickle */
	size_t off[LG_NPICKLES + 1];    /* pickle i is off[i] .. off[i+1] */
	struct lg_root *roots;          /* by key */
	bool big_endian;                /* sys_info says little_endian False */
	uint64_t data_end;              /* end of the last storage */
};

/* Where offset 0 of a stream lies: in the file, or in memory. */
struct lg_base {
	uint64_t file_off;              /* UINT64_MAX when not in the file */
	const uint8_t *mem;             /* the stream's bytes when in memory */
};

static void lg_stream_free(struct lg_stream *s)
{
	struct lg_root *r, *tmp;
	int i;

	HASH_ITER(hh, s->roots, r, tmp) {
		HASH_DEL(s->roots, r);
		free(r->key);
		free(r);
	}
	for (i = 0; i < LG_NPICKLES; i++) {
		pt_pickle_free(s->pk[i]);
		s->pk[i] = NULL;
	}
}

static bool lg_is_magic(const struct pt_value *v)
{
	size_t n;

	if (!v || v->kind != PT_V_BIGINT)
		return false;
	n = v->u.s.len;
	while (n > sizeof(lg_magic) && v->u.s.p[n - 1] == 0)
		n--;
	return n == sizeof(lg_magic) && memcmp(v->u.s.p, lg_magic, n) == 0;
}

static bool lg_tag(const struct pt_value *v, const char *tag)
{
	char t[16];

	return pt_value_text(v, t, sizeof(t)) && strcmp(t, tag) == 0;
}

static const struct pt_value *lg_item(const struct pt_value *t, size_t i)
{
	if (!t || (t->kind != PT_V_TUPLE && t->kind != PT_V_LIST) ||
	    i >= t->u.seq.n)
		return NULL;
	return t->u.seq.v[i];
}

static bool lg_uint(const struct pt_value *v, uint64_t *out)
{
	if (!v || v->kind != PT_V_INT || v->u.i < 0)
		return false;
	*out = (uint64_t)v->u.i;
	return true;
}

static bool lg_is_lfb(const struct pt_value *v)
{
	return v && v->kind == PT_V_CALL &&
	       pt__is_global(v->u.call.callable, "torch.storage",
			     "_load_from_bytes");
}

static int lg_by_id(const void *a, const void *b)
{
	const struct pt_value *x = *(struct pt_value *const *)a;
	const struct pt_value *y = *(struct pt_value *const *)b;

	return x->id < y->id ? -1 : x->id > y->id;
}

int pt__legacy_refs(struct pt_value *root, uint32_t count,
		    struct pt_value ***out, size_t *n_out,
		    struct pt_error *err)
{
	struct pt_vstack stack = { 0 }, refs = { 0 };
	uint8_t *seen = calloc((size_t)count / 8 + 1, 1);
	int rc = 0;

	*out = NULL;
	*n_out = 0;
	if (!seen || pt_vstack_push(&stack, root)) {
		rc = -ENOMEM;
		goto out;
	}
	while (stack.n > 0 && rc == 0) {
		struct pt_value *v = stack.v[--stack.n];

		if (v->id < count) {
			if (seen[v->id / 8] & (1u << (v->id % 8)))
				continue;
			seen[v->id / 8] |= (uint8_t)(1u << (v->id % 8));
		}
		if (v->kind == PT_V_PERSID || lg_is_lfb(v))
			rc = pt_vstack_push(&refs, v);
		else
			rc = pt_vstack_push_children(&stack, v);
	}
out:
	pt_vstack_free(&stack);
	free(seen);
	if (rc) {
		pt_vstack_free(&refs);
		return pt_fail(err, -ENOMEM, "out of memory");
	}
	if (refs.n > 1)
		qsort(refs.v, refs.n, sizeof(*refs.v), lg_by_id);
	*out = refs.v;
	*n_out = refs.n;
	return 0;
}

void pt__legacy_to_global(struct pt_value *v, const struct pt_value *cls)
{
	const char *m = cls->u.global.module, *name = cls->u.global.name;

	memset(&v->u, 0, sizeof(v->u));
	v->kind = PT_V_GLOBAL;
	v->u.global.module = m;
	v->u.global.name = name;
}

/* _load_from_bytes(b) -> PERSID whose value is (a copy of) the call. */
static int lg_rewrite_lfb(struct pt_pickle *pk, struct pt_value *v,
			  struct pt_error *err)
{
	struct pt_value *copy = pt_pickle_alloc(pk, sizeof(*copy));

	if (!copy)
		return pt_fail(err, -ENOMEM, "out of memory");
	*copy = *v;
	copy->id = UINT32_MAX;
	memset(&v->u, 0, sizeof(v->u));
	v->kind = PT_V_PERSID;
	v->u.pid = copy;
	return 0;
}

/*
 * Decode the five pickles of a stream held in @buf[0..@len).  *@retry is
 * set when a pickle could not be decoded, which may only mean that @buf
 * ends too early.
 */
static int lg_pickles(struct pt_ckpt *ck, const uint8_t *buf, size_t len,
		      struct lg_stream *s, bool *retry, const char *what,
		      struct pt_error *err)
{
	const struct pt_value *v, *le;
	size_t pos = 0, used = 0, i, k;
	int rc;

	*retry = false;
	for (i = 0; i < LG_NPICKLES; i++) {
		s->off[i] = pos;
		rc = pt_pickle_load(&s->pk[i], buf + pos, len - pos, &used,
				    &ck->opts.limits, err);
		if (rc) {
			*retry = true;
			pt_error_prefix(err, "%s: pickle %zu (%s) at offset %zu",
					what, i + 1, lg_names[i], pos);
			return rc;
		}
		pos += used;
	}
	s->off[LG_NPICKLES] = pos;
	if (!lg_is_magic(pt_pickle_root(s->pk[0])))
		return pt_fail(err, -EBADMSG,
			       "%s: the first pickle is not torch's magic number", what);
	v = pt_pickle_root(s->pk[1]);
	if (!v || v->kind != PT_V_INT || v->u.i != 1001)
		return pt_fail(err, -ENOTSUP,
			       "%s: protocol version is not 1001", what);
	v = pt_pickle_root(s->pk[2]);
	if (v && v->kind == PT_V_DICT)
		for (k = 0; k + 1 < v->u.dict.kv.n; k += 2) {
			le = v->u.dict.kv.v[k + 1];
			if (lg_tag(v->u.dict.kv.v[k], "little_endian") &&
			    le->kind == PT_V_BOOL && !le->u.b)
				s->big_endian = true;
		}
	s->obj = pt_pickle_root(s->pk[3]);
	s->keys = pt_pickle_root(s->pk[4]);
	return 0;
}

/* Record the root storage of every storage pid, the first pid of a key
 * giving its type; rewrite module pids and _load_from_bytes calls. */
static int lg_roots(struct pt_pickle *pk, struct pt_value **refs, size_t n,
		    struct lg_stream *s, bool rewrite, const char *what,
		    struct pt_error *err)
{
	size_t i;
	int rc;

	for (i = 0; i < n; i++) {
		struct pt_value *ref = refs[i];
		const struct pt_value *pid, *cls;
		const struct pt_dtype *dt;
		struct lg_root *r;
		char key[256];
		uint64_t numel;

		if (ref->kind != PT_V_PERSID) {
			if (rewrite) {
				rc = lg_rewrite_lfb(pk, ref, err);
				if (rc)
					return rc;
			}
			continue;
		}
		pid = ref->u.pid;
		cls = lg_item(pid, 1);
		if (lg_tag(lg_item(pid, 0), "module")) {
			if (!cls || cls->kind != PT_V_GLOBAL)
				return pt_fail(err, -EBADMSG,
					       "%s: module persistent id does not name a class", what);
			if (rewrite)
				pt__legacy_to_global(ref, cls);
			continue;
		}
		if (!lg_tag(lg_item(pid, 0), "storage") || pid->u.seq.n < 5)
			return pt_fail(err, -EBADMSG,
				       "%s: persistent id is not a ('storage', type, key, location, numel, view) tuple",
				       what);
		if (!pt_value_text(lg_item(pid, 2), key, sizeof(key)))
			return pt_fail(err, -EBADMSG,
				       "%s: storage key is not a short string", what);
		HASH_FIND_STR(s->roots, key, r);
		if (r)
			continue;
		if (!cls || cls->kind != PT_V_GLOBAL)
			return pt_fail(err, -EBADMSG,
				       "%s: storage '%s': type is not a global", what, key);
		dt = pt_dtype_from_storage(cls->u.global.name);
		if (!dt)
			return pt_fail(err, -ENOTSUP,
				       "%s: storage '%s': unknown storage type %s.%s",
				       what, key, cls->u.global.module,
				       cls->u.global.name);
		if (!lg_uint(lg_item(pid, 4), &numel))
			return pt_fail(err, -EBADMSG,
				       "%s: storage '%s': element count is not a non-negative integer",
				       what, key);
		r = calloc(1, sizeof(*r));
		if (!r || !(r->key = strdup(key))) {
			free(r);
			return pt_fail(err, -ENOMEM, "out of memory");
		}
		r->dtype = dt;
		r->numel = numel;
		HASH_ADD_KEYPTR(hh, s->roots, r->key, strlen(r->key), r);
	}
	return 0;
}

/*
 * Locate each listed storage after the pickles: i64le numel (which must
 * equal the pid's, as torch checks) and numel * itemsize bytes, inside
 * @src.
 */
static int lg_layout(const struct pt_source *src, struct lg_stream *s,
		     const char *what, struct pt_error *err)
{
	uint64_t pos = s->off[LG_NPICKLES];
	size_t i;

	if (!s->keys || (s->keys->kind != PT_V_LIST &&
			 s->keys->kind != PT_V_TUPLE))
		return pt_fail(err, -EBADMSG,
			       "%s: the storage key list is not a list", what);
	for (i = 0; i < s->keys->u.seq.n; i++) {
		struct lg_root *r;
		uint8_t b8[8];
		uint64_t numel, nbytes, data, end;
		char key[256];
		int rc;

		if (!pt_value_text(s->keys->u.seq.v[i], key, sizeof(key)))
			return pt_fail(err, -EBADMSG,
				       "%s: storage key %zu is not a short string", what, i);
		HASH_FIND_STR(s->roots, key, r);
		if (!r)
			return pt_fail(err, -EBADMSG,
				       "%s: storage '%s' is listed but no persistent id names it",
				       what, key);
		if (!pt_add_u64(pos, 8, &data) || data > src->size)
			return pt_fail(err, -EBADMSG,
				       "%s: storage '%s': element count at offset %" PRIu64 " is past the end (%" PRIu64 " bytes)",
				       what, key, pos, src->size);
		rc = pt_source_read(src, b8, 8, pos, err);
		if (rc)
			return rc;
		numel = pt_le64(b8);
		if (numel != r->numel)
			return pt_fail(err, -EBADMSG,
				       "%s: storage '%s' at offset %" PRIu64 " holds %" PRId64 " elements, its persistent id says %" PRIu64,
				       what, key, pos, (int64_t)numel, r->numel);
		if (!pt_mul_u64(numel, r->dtype->size, &nbytes) ||
		    !pt_add_u64(data, nbytes, &end) || end > src->size)
			return pt_fail(err, -EBADMSG,
				       "%s: storage '%s': %" PRIu64 " elements at offset %" PRIu64 " run past the end (%" PRIu64 " bytes)",
				       what, key, numel, data, src->size);
		r->off = data;
		r->has_data = true;
		pos = end;
	}
	s->data_end = pos;
	return 0;
}

/* Allocate a storage; @key is copied.  Added to the checkpoint's
 * storages (pt__storage_add). */
static int lg_new_storage(struct pt_ckpt *ck, const char *key,
			  const struct pt_dtype *dt, uint64_t nbytes,
			  const struct lg_base *b, uint64_t off,
			  const char *loc, struct pt_storage **out,
			  struct pt_error *err)
{
	struct pt_storage *st = calloc(1, sizeof(*st));

	if (!st || !pt__own(ck, st))
		return pt_fail(err, -ENOMEM, "out of memory");
	st->key = pt__own(ck, strdup(key));
	st->location = loc && loc[0] ? pt__own(ck, strdup(loc)) : NULL;
	if (!st->key || (loc && loc[0] && !st->location))
		return pt_fail(err, -ENOMEM, "out of memory");
	st->dtype = dt;
	st->nbytes = nbytes;
	if (b->file_off != UINT64_MAX) {
		st->kind = PT_ST_FILE;
		st->file_off = b->file_off + off;
	} else {
		st->kind = PT_ST_MEM;
		st->mem = b->mem + off;
	}
	st->id = ck->n_storages++;
	if (pt__storage_add(ck, st))
		return pt_fail(err, -ENOMEM, "out of memory");
	*out = st;
	return 0;
}

/*
 * The storage a legacy pid stands for: its root storage, or with
 * view_metadata (view_key, offset, numel) the slice of it (docs/FORMATS.md,
 * "Storage views in legacy streams").  Pids
 * that share a key share the storage, as in torch (one table for root
 * and view keys); with @fresh a new storage is made under a key not used
 * yet (blobs of _load_from_bytes are independent of each other).
 */
static int lg_storage(struct pt_ckpt *ck, struct lg_stream *s,
		      const struct lg_base *b, const struct pt_value *pid,
		      bool fresh, struct pt_storage **out,
		      struct pt_error *err)
{
	const struct pt_value *view = lg_item(pid, 5), *cls = lg_item(pid, 1);
	const struct pt_dtype *dt;
	struct pt_storage *st;
	struct lg_root *r;
	char key[256], vkey[256], ukey[300], loc[64];
	uint64_t off, nbytes;
	unsigned k;

	*out = NULL;
	if (!lg_tag(lg_item(pid, 0), "storage") ||
	    !pt_value_text(lg_item(pid, 2), key, sizeof(key)))
		return pt_fail(err, -EBADMSG,
			       "persistent id is not a ('storage', type, key, location, numel, view) tuple");
	if (!pt_value_text(lg_item(pid, 3), loc, sizeof(loc)))
		loc[0] = '\0';
	HASH_FIND_STR(s->roots, key, r);
	if (!r || !r->has_data)
		return pt_fail(err, -EBADMSG,
			       "storage '%s' has no data in the file (not in the storage key list)",
			       key);
	dt = r->dtype;
	off = r->off;
	nbytes = r->numel * dt->size;   /* checked by lg_layout */
	if (view && view->kind != PT_V_NONE) {
		uint64_t voff, vnumel, vend;
		const struct pt_dtype *vdt = NULL;

		if (!pt_value_text(lg_item(view, 0), vkey, sizeof(vkey)) ||
		    !lg_uint(lg_item(view, 1), &voff) ||
		    !lg_uint(lg_item(view, 2), &vnumel))
			return pt_fail(err, -EBADMSG,
				       "storage '%s': view metadata is not (key, offset, numel)",
				       key);
		if (!pt_add_u64(voff, vnumel, &vend) || vend > r->numel)
			return pt_fail(err, -EBADMSG,
				       "storage '%s': view '%s' of %" PRIu64 " elements at %" PRIu64 " is outside its %" PRIu64 " elements",
				       key, vkey, vnumel, voff, r->numel);
		if (cls && cls->kind == PT_V_GLOBAL)
			vdt = pt_dtype_from_storage(cls->u.global.name);
		if (vdt && vdt->size == dt->size)
			dt = vdt;
		off += voff * dt->size;
		nbytes = vnumel * dt->size;
		memcpy(key, vkey, sizeof(key));
	}
	st = pt__storage_find(ck, key);
	if (st && !fresh) {
		*out = st;
		return 0;
	}
	snprintf(ukey, sizeof(ukey), "%s", key);
	for (k = 2; st; k++) {
		snprintf(ukey, sizeof(ukey), "%s~%u", key, k);
		st = pt__storage_find(ck, ukey);
	}
	return lg_new_storage(ck, ukey, dt, nbytes, b, off, loc, out, err);
}

/* The file offset of bytes at @p when they lie in a stored pickle. */
static uint64_t lg_file_off(const struct pt_ckpt *ck, const struct pt_value *v)
{
	int i;

	if (v->u.s.in_off == UINT64_MAX)
		return UINT64_MAX;
	for (i = 0; i < ck->n_pickles; i++) {
		const struct pt_pickled *pd = &ck->pickles[i];

		if (pd->file_off != UINT64_MAX && v->u.s.in_off < pd->len &&
		    pd->buf + v->u.s.in_off == v->u.s.p)
			return pd->file_off + v->u.s.in_off;
	}
	return UINT64_MAX;
}

/* _codecs.encode(text, 'latin1'): each code point is one byte. */
static int lg_latin1(struct pt_ckpt *ck, const struct pt_value *s,
		     const uint8_t **out, size_t *len, struct pt_error *err)
{
	uint8_t *q = malloc(s->u.s.len + 1);
	size_t n = 0;

	if (!q || !pt__own(ck, q))
		return pt_fail(err, -ENOMEM, "out of memory");
	if (pt_latin1_encode(s->u.s.p, s->u.s.len, q, &n))
		return pt_fail(err, -EBADMSG,
			       "_load_from_bytes: text is not latin-1");
	*out = q;
	*len = n;
	return 0;
}

/*
 * torch.storage._load_from_bytes(b): b is a whole legacy stream whose
 * object is one storage.  Decode it and serve that storage from where b
 * lies (the file when b is a stored BINBYTES, else memory).
 */
static int lg_lfb_storage(struct pt_ckpt *ck, const struct pt_value *pidv,
			  struct pt_storage **out, struct pt_error *err)
{
	const struct pt_value *call = pidv->u.pid;
	const struct pt_value *arg = lg_item(call->u.call.args, 0);
	struct pt_value **refs = NULL;
	struct lg_stream s;
	struct lg_base b = { UINT64_MAX, NULL };
	struct pt_source *src = NULL;
	const uint8_t *p = NULL;
	size_t len = 0, nrefs = 0;
	bool retry;
	int rc;

	if (pidv->aux16 == PT_C_TENSOR && pidv->aux) {
		/* classified on its own first: the same storage */
		*out = ((const struct pt_tensor *)pidv->aux)->st;
		return 0;
	}
	memset(&s, 0, sizeof(s));
	if (arg && (arg->kind == PT_V_BYTES || arg->kind == PT_V_BYTEARRAY)) {
		p = arg->u.s.p;
		len = arg->u.s.len;
		b.file_off = lg_file_off(ck, arg);
	} else if (arg && arg->kind == PT_V_CALL &&
		   pt__is_global(arg->u.call.callable, "_codecs", "encode") &&
		   lg_item(arg->u.call.args, 0) &&
		   lg_item(arg->u.call.args, 0)->kind == PT_V_STR) {
		rc = lg_latin1(ck, lg_item(arg->u.call.args, 0), &p, &len, err);
		if (rc)
			return rc;
	} else {
		return pt_fail(err, -EBADMSG,
			       "torch.storage._load_from_bytes: argument is not bytes");
	}
	b.mem = p;
	rc = pt_source_mem(p, len, "_load_from_bytes", &src, err);
	if (!rc)
		rc = lg_pickles(ck, p, len, &s, &retry, "_load_from_bytes", err);
	if (!rc)
		rc = pt__legacy_refs(s.obj, pt_pickle_count(s.pk[3]), &refs,
				     &nrefs, err);
	if (!rc)
		rc = lg_roots(s.pk[3], refs, nrefs, &s, false,
			      "_load_from_bytes", err);
	if (!rc)
		rc = lg_layout(src, &s, "_load_from_bytes", err);
	if (!rc && (!s.obj || s.obj->kind != PT_V_PERSID))
		rc = pt_fail(err, -ENOTSUP,
			     "torch.storage._load_from_bytes: the embedded object is not a storage");
	if (!rc)
		rc = lg_storage(ck, &s, &b, s.obj->u.pid, true, out, err);
	free(refs);
	lg_stream_free(&s);
	pt_source_close(src);
	return rc;
}

/* ---- the legacy file ---- */

struct lg_state {
	struct lg_stream s;
};

static int legacy_probe(struct pt_ckpt *ck, const uint8_t *head, size_t n,
		         struct pt_error *err)
{
	struct pt_pickle *pk = NULL;
	bool yes;

	(void)err;
	if (pt_pickle_load(&pk, head, n, NULL, &ck->opts.limits, NULL))
		return false;
	yes = lg_is_magic(pt_pickle_root(pk));
	pt_pickle_free(pk);
	return yes;
}

/*
 * The five pickles are read from one window at the start of the file;
 * their lengths are known only once decoded, so a window that ends too
 * early is grown (x4) up to the pickle limit and decoded again.
 */
static int legacy_open(struct pt_ckpt *ck, struct pt_error *err)
{
	static const char *const labels[LG_NPICKLES] = {
		"magic", "protocol_version", "sys_info", "object",
		"storage_keys",
	};
	uint64_t size = ck->src->size, win, cap;
	struct pt_value **refs = NULL;
	struct lg_state *state;
	struct lg_stream *s;
	uint8_t *buf = NULL;
	struct pt_pickle *objpk = NULL;
	size_t nrefs = 0;
	bool retry;
	int rc, i;

	state = calloc(1, sizeof(*state));
	if (!state)
		return pt_fail(err, -ENOMEM, "out of memory");
	ck->fmt_state = state;
	s = &state->s;
	if (!pt_add_u64(ck->opts.limits.max_pickle_bytes, LG_FIRST_WINDOW, &cap))
		cap = UINT64_MAX;
	if (cap > SIZE_MAX)
		cap = SIZE_MAX;
	win = size < LG_FIRST_WINDOW ? size : LG_FIRST_WINDOW;
	for (;;) {
		rc = pt_source_dup(ck->src, 0, (size_t)win, &buf, err);
		if (rc)
			return rc;
		rc = lg_pickles(ck, buf, (size_t)win, s, &retry, "legacy", err);
		if (rc == 0)
			break;
		lg_stream_free(s);
		memset(s, 0, sizeof(*s));
		free(buf);
		buf = NULL;
		if (!retry || win >= size || win >= cap)
			return rc;
		pt_error_clear(err);
		win = win > cap / 4 ? cap : win * 4;
		if (win > size)
			win = size;
	}
	if (!pt__own(ck, buf))
		return pt_fail(err, -ENOMEM, "out of memory");
	objpk = s->pk[3];
	for (i = 0; i < LG_NPICKLES; i++) {
		struct pt_pickle *pk = s->pk[i];

		s->pk[i] = NULL;
		rc = pt__add_pickle(ck, pk, buf + s->off[i],
				    s->off[i + 1] - s->off[i], labels[i],
				    s->off[i], err);
		if (rc)
			return rc;
	}
	ck->root = s->obj;
	if (s->big_endian)
		pt_buf_puts(&ck->notes,
			    "sys_info: saved on a big-endian machine (storages are little-endian on disk)\n");
	rc = pt__legacy_refs(s->obj, pt_pickle_count(objpk), &refs, &nrefs,
			     err);
	if (rc)
		return rc;
	rc = lg_roots(objpk, refs, nrefs, s, true, "legacy", err);
	free(refs);
	if (rc)
		return rc;
	rc = lg_layout(ck->src, s, "legacy", err);
	if (rc)
		return rc;
	if (s->data_end < size)
		pt__warn(ck, "legacy: %" PRIu64 " bytes after the last storage are ignored",
			 size - s->data_end);
	return 0;
}

static int legacy_storage(struct pt_ckpt *ck, const struct pt_value *pidv,
			  struct pt_storage **out, struct pt_error *err)
{
	static const struct lg_base file = { 0, NULL };
	struct lg_state *state = ck->fmt_state;

	if (lg_is_lfb(pidv->u.pid))
		return lg_lfb_storage(ck, pidv, out, err);
	if (ck->fmt != &pt_fmt_legacy || !state)
		return pt_fail(err, -EBADMSG,
			       "persistent id in a plain pickle (only torch.save files use them)");
	return lg_storage(ck, &state->s, &file, pidv->u.pid, false, out, err);
}

static void legacy_close(struct pt_ckpt *ck)
{
	struct lg_state *state = ck->fmt_state;

	if (!state)
		return;
	lg_stream_free(&state->s);
	free(state);
	ck->fmt_state = NULL;
}

const struct pt_format pt_fmt_legacy = {
	.name = "torch.save legacy (pickle stream)",
	.probe = legacy_probe,
	.open = legacy_open,
	.storage = legacy_storage,
	.close = legacy_close,
};

/* ---- a plain pickle ---- */

/*
 * A pickle that is not a torch.save file (pickle.dump of tensors): protocol
 * 2-5 start with PROTO; a protocol 0/1 pickle is claimed only when it
 * decodes completely within the probed head, so that text and other
 * formats are not mistaken for one.
 */
static int plain_probe(struct pt_ckpt *ck, const uint8_t *head, size_t n,
		        struct pt_error *err)
{
	struct pt_pickle *pk = NULL;

	(void)err;
	if (n >= 3 && head[0] == 0x80 && head[1] >= 2 && head[1] <= 5 &&
	    head[2] != 0x00)
		return true;
	if (pt_pickle_load(&pk, head, n, NULL, &ck->opts.limits, NULL))
		return false;
	pt_pickle_free(pk);
	return true;
}

/*
 * Bytes after the pickle's STOP are not part of what torch.load returns,
 * but a hostile file can hide a second pickle there for a loader that
 * reads on (the "steganographic" payloads of pickle scanners' test sets).
 * Decode any pickles found there, inert as always, only to name their
 * globals in the warnings, as a scanner would; at most 16 of them.
 */
static void scan_trailing(struct pt_ckpt *ck, const uint8_t *buf, size_t len,
			  size_t used)
{
	struct pt_vstack st = { 0 };
	int k;

	for (k = 0; k < 16 && used < len; k++) {
		struct pt_pickle *pk = NULL;
		size_t more = 0;
		uint8_t *seen;
		uint32_t count;

		if (pt_pickle_load(&pk, buf + used, len - used, &more,
				   &ck->opts.limits, NULL) != 0 || more == 0)
			break;
		count = pt_pickle_count(pk);
		seen = calloc((size_t)count / 8 + 1, 1);
		st.n = 0;
		if (seen && pt_vstack_push(&st, pt_pickle_root(pk)) == 0) {
			while (st.n > 0) {
				struct pt_value *v = st.v[--st.n];

				if (v->id < count) {
					if (seen[v->id / 8] & (1u << (v->id % 8)))
						continue;
					seen[v->id / 8] |= (uint8_t)(1u << (v->id % 8));
				}
				if (v->kind == PT_V_GLOBAL)
					pt__note_global(ck, v);
				if (pt_vstack_push_children(&st, v))
					break;
			}
		}
		free(seen);
		pt_pickle_free(pk);
		pt__warn(ck, "pickle: another pickle of %zu bytes follows at offset %zu (not part of the object; its globals are listed)",
			 more, used);
		used += more;
	}
	pt_vstack_free(&st);
}

static int plain_open(struct pt_ckpt *ck, struct pt_error *err)
{
	struct pt_value **refs = NULL;
	uint64_t size = ck->src->size;
	uint8_t *buf = NULL;
	size_t used = 0, nrefs = 0, i;
	int rc;

	if (size > ck->opts.limits.max_pickle_bytes || size > SIZE_MAX)
		return pt_fail(err, -EFBIG,
			       "pickle of %" PRIu64 " bytes exceeds the pickle limit of %" PRIu64,
			       size, ck->opts.limits.max_pickle_bytes);
	rc = pt_source_dup(ck->src, 0, (size_t)size, &buf, err);
	if (rc)
		return rc;
	rc = pt__load_pickle(ck, buf, (size_t)size, "plain pickle", 0, &ck->root,
			     &used, err);
	if (rc)
		return rc;
	if (used < size) {
		pt__warn(ck, "pickle: %" PRIu64 " bytes after its STOP are ignored",
			 size - used);
		scan_trailing(ck, ck->pickles[0].buf, (size_t)size, used);
	}
	rc = pt__legacy_refs(ck->root, pt_pickle_count(ck->pickles[0].pk),
			     &refs, &nrefs, err);
	for (i = 0; rc == 0 && i < nrefs; i++)
		if (refs[i]->kind != PT_V_PERSID)
			rc = lg_rewrite_lfb(ck->pickles[0].pk, refs[i], err);
	free(refs);
	return rc;
}

const struct pt_format pt_fmt_pickle = {
	.name = "plain pickle",
	.probe = plain_probe,
	.open = plain_open,
	.storage = legacy_storage,
	.close = NULL,
};
