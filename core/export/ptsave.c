/* SPDX-License-Identifier: MIT */
/*
 * ptsave.c -- `ptfs export --to pt`: the checkpoint as a torch.save ZIP
 * that torch.load(weights_only=True) of torch >= 2.6 accepts.
 *
 * The pickle (data.pkl, protocol 2, written by pickle_out.c) names only
 * globals on the weights-only allowlist (torch/_weights_only_unpickler.py,
 * _get_allowed_globals(), read at pytorch commit 00f730b66e58 and present
 * since 2.5/2.6): collections.OrderedDict, torch.Size, torch.device,
 * torch.<Type>Storage, torch.storage.UntypedStorage (what torch writes for
 * dtypes without a typed storage class: uint16/32/64, float8...), torch.<dtype>,
 * torch._utils._rebuild_tensor_v2/_v3, torch._utils._rebuild_parameter,
 * torch._utils._rebuild_sparse_tensor and torch.serialization._get_layout
 * (sparse tensors, written as they were),
 * _codecs.encode (bytes), builtins.bytearray, builtins.set.  Every other
 * value becomes something plain, and is named on stderr (the notes):
 * objects of other classes -> a dict of their state, numpy arrays ->
 * tensors, frozensets -> sets, complex numbers -> (real, imag), global
 * references -> their "module.name" text, quantized tensors -> their
 * integer representation.  Tensors keep their storages (ties and views
 * stay shared); storages are written whole, little-endian, as "cpu".
 *
 * The archive is laid out like torch 2.x writes it: archive/data.pkl,
 * archive/.format_version, archive/.storage_alignment, archive/byteorder,
 * archive/data/N (each payload 64-byte aligned by an "FB" extra field),
 * archive/version; stored records, ZIP64 end records.
 */
#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <uthash.h>

#include "ckpt/ckpt_i.h"        /* the value graph, tensors and storages */
#include "export/export.h"
#include "decode/pickle_out.h"
#include "ckpt/names.h"
#include "container/zipwrite.h"
#include "io/fd.h"

struct memo {
	const void *key;
	uint32_t idx;
	UT_hash_handle hh;
};

struct pst {                            /* a storage to write */
	struct pt_storage *st;
	const struct pt_dtype *dt;      /* element type written */
	char byteorder;
};

struct pk {
	struct pt_ckpt *ck;
	struct pt_buf b;
	struct memo *memo;
	uint32_t next;
	struct memo *stmap;             /* storage -> index in sts */
	struct pst *sts;
	size_t nst, capst;
	struct pt_buf *notes;
	struct pt_buf path;             /* where we are, for notes */
	int rc;
	unsigned depth;
};

static void note(struct pk *k, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void note(struct pk *k, const char *fmt, ...)
{
	char line[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	pt_buf_printf(k->notes, "%s: %s\n", k->path.len ? k->path.p : "(root)",
		      line);
}

static bool memo_find(struct memo **h, const void *key, uint32_t *idx)
{
	struct memo *m;

	HASH_FIND_PTR(*h, &key, m);
	if (m)
		*idx = m->idx;
	return m != NULL;
}

static void memo_add(struct pk *k, struct memo **h, const void *key,
		     uint32_t idx)
{
	struct memo *m = calloc(1, sizeof(*m));

	if (!m) {
		k->rc = -ENOMEM;
		return;
	}
	m->key = key;
	m->idx = idx;
	HASH_ADD_PTR(*h, key, m);
}

/* Memoize the value on top of the stack as @v. */
static void put(struct pk *k, const void *v)
{
	memo_add(k, &k->memo, v, k->next);
	pko_put(&k->b, k->next++);
}

static void emit(struct pk *k, const struct pt_value *v);

static void emit_tuple_of(struct pk *k, struct pt_value *const *v, size_t n)
{
	size_t i;

	if (n > 3)
		pko_op(&k->b, PKO_MARK);
	for (i = 0; i < n; i++)
		emit(k, v[i]);
	pko_tuple(&k->b, n);
}

static void emit_ints(struct pk *k, const int64_t *v, uint32_t n)
{
	uint32_t i;

	if (n > 3)
		pko_op(&k->b, PKO_MARK);
	for (i = 0; i < n; i++)
		pko_int(&k->b, v[i]);
	pko_tuple(&k->b, n);
}

static void empty_ordered_dict(struct pk *k)
{
	pko_global(&k->b, "collections", "OrderedDict");
	pko_tuple(&k->b, 0);
	pko_op(&k->b, PKO_REDUCE);
}

/* The storage class and element type a tensor of @dt is written with. */
static const struct pt_dtype *write_dtype(struct pk *k, const struct pt_dtype *dt)
{
	const char *as = NULL;

	if (strcmp(dt->name, "qint8") == 0)
		as = "int8";
	else if (strcmp(dt->name, "quint8") == 0 || dt->packed)
		as = "uint8";
	else if (strcmp(dt->name, "qint32") == 0)
		as = "int32";
	if (!as)
		return dt;
	note(k, "%s tensor written as its integer representation (quantization parameters dropped)",
	     dt->name);
	return pt_dtype_from_torch(as);
}

/* ('storage', torch.XStorage, 'N', 'cpu', numel) BINPERSID */
static void emit_storage(struct pk *k, const struct pt_tensor *t,
			 const struct pt_dtype *dt)
{
	uint32_t idx;
	char key[24];

	if (!memo_find(&k->stmap, t->st, &idx)) {
		if (k->nst == k->capst) {
			size_t nc = k->capst ? k->capst * 2 : 16;
			struct pst *q = realloc(k->sts, nc * sizeof(*q));
			if (!q) {
				k->rc = -ENOMEM;
				return;
			}
			k->sts = q;
			k->capst = nc;
		}
		idx = (uint32_t)k->nst;
		k->sts[k->nst++] = (struct pst){ t->st, dt, t->byteorder };
		memo_add(k, &k->stmap, t->st, idx);
	}
	snprintf(key, sizeof(key), "%u", idx);
	pko_op(&k->b, PKO_MARK);
	pko_cstr(&k->b, "storage");
	if (dt->storage)
		pko_global(&k->b, "torch", dt->storage);
	else
		pko_global(&k->b, "torch.storage", "UntypedStorage");
	pko_cstr(&k->b, key);
	pko_cstr(&k->b, "cpu");
	pko_int(&k->b, (int64_t)(t->st->nbytes / (dt->storage ? dt->size : 1)));
	pko_tuple(&k->b, 5);
	pko_op(&k->b, PKO_BINPERSID);
}

static void emit_tensor(struct pk *k, const struct pt_tensor *t)
{
	const struct pt_dtype *dt = write_dtype(k, t->dtype);
	bool v3 = dt->storage == NULL;

	if (t->kind == PT_TK_NDARRAY)
		note(k, "%s", "numpy array written as a torch tensor");
	if (t->kind == PT_TK_STORAGE) {
		emit_storage(k, t, dt);
		return;
	}
	if (t->kind == PT_TK_PARAMETER)
		pko_global(&k->b, "torch._utils", "_rebuild_parameter");
	pko_global(&k->b, "torch._utils", v3 ? "_rebuild_tensor_v3" : "_rebuild_tensor_v2");
	pko_op(&k->b, PKO_MARK);
	emit_storage(k, t, dt);
	pko_int(&k->b, t->kind == PT_TK_NDARRAY ? (int64_t)(t->byte_lo / dt->size) : t->offset);
	emit_ints(k, t->shape, t->rank);
	emit_ints(k, t->stride, t->rank);
	pko_bool(&k->b, t->kind != PT_TK_PARAMETER && t->requires_grad);
	empty_ordered_dict(k);
	if (v3) {
		pko_global(&k->b, "torch", dt->name);
		pko_op(&k->b, PKO_TUPLE);       /* 7 items after the mark */
	} else {
		pko_op(&k->b, PKO_TUPLE);
	}
	pko_op(&k->b, PKO_REDUCE);
	if (t->kind == PT_TK_PARAMETER) {
		pko_bool(&k->b, t->requires_grad);
		empty_ordered_dict(k);
		pko_tuple(&k->b, 3);
		pko_op(&k->b, PKO_REDUCE);
	}
}

/* Key text for the notes' paths. */
static void path_push(struct pk *k, const struct pt_value *key, size_t i,
		      size_t *saved)
{
	*saved = k->path.len;
	if (k->path.len)
		pt_buf_putc(&k->path, '/');
	if (key)
		pt_key_text(&k->path, key);
	else
		pt_buf_printf(&k->path, "%zu", i);
	pt_buf_putc(&k->path, '\0');
	k->path.len--;
}

static void path_pop(struct pk *k, size_t saved)
{
	k->path.len = saved;
	if (k->path.p)
		k->path.p[saved] = '\0';
}

/* SETITEMS of pairs @kv (kv->v[2i], kv->v[2i+1]) onto the dict on top. */
static void emit_pairs(struct pk *k, const struct pt_vseq *kv)
{
	size_t i, saved;

	if (kv->n < 2)
		return;
	pko_op(&k->b, PKO_MARK);
	for (i = 0; i + 1 < kv->n; i += 2) {
		emit(k, kv->v[i]);
		path_push(k, kv->v[i], 0, &saved);
		emit(k, kv->v[i + 1]);
		path_pop(k, saved);
	}
	pko_op(&k->b, PKO_SETITEMS);
}

static void emit_items(struct pk *k, const struct pt_vseq *s, size_t *idx)
{
	size_t i, saved;

	if (!s || s->n == 0)
		return;
	pko_op(&k->b, PKO_MARK);
	for (i = 0; i < s->n; i++) {
		path_push(k, NULL, (*idx)++, &saved);
		emit(k, s->v[i]);
		path_pop(k, saved);
	}
	pko_op(&k->b, PKO_APPENDS);
}

static const struct pt_vseq *seq_of(const struct pt_value *v)
{
	if (v && (v->kind == PT_V_TUPLE || v->kind == PT_V_LIST ||
		  v->kind == PT_V_SET || v->kind == PT_V_FROZENSET))
		return &v->u.seq;
	return NULL;
}

static const struct pt_value *arg0(const struct pt_value *v)
{
	const struct pt_value *a = v->u.call.args;

	return a && a->kind == PT_V_TUPLE && a->u.seq.n ? a->u.seq.v[0] : NULL;
}

/* A mapping class instance (OrderedDict, defaultdict, ...) or a dict. */
static void emit_map(struct pk *k, const struct pt_value *v)
{
	const struct pt_value *a0, *st;
	const struct pt_vseq *s;
	bool od = false;
	size_t i;

	if (v->kind != PT_V_DICT) {
		const struct pt_value *fn = v->u.call.callable;
		od = pt__is_global(fn, "collections", "OrderedDict");
		if (!od && fn && fn->kind == PT_V_GLOBAL)
			note(k, "%s written as a dict", fn->u.global.name);
	}
	if (od)
		empty_ordered_dict(k);
	else
		pko_op(&k->b, PKO_EMPTY_DICT);
	put(k, v);
	if (v->kind == PT_V_DICT) {
		emit_pairs(k, &v->u.dict.kv);
		return;
	}
	a0 = arg0(v);
	if (a0 && a0->kind == PT_V_DICT) {
		emit_pairs(k, &a0->u.dict.kv);
	} else if ((s = seq_of(a0)) != NULL) {
		for (i = 0; i < s->n; i++) {
			const struct pt_vseq *pair = seq_of(s->v[i]);
			struct pt_vseq one;
			if (!pair || pair->n != 2)
				continue;
			one.v = pair->v;
			one.n = 2;
			emit_pairs(k, &one);
		}
	}
	emit_pairs(k, pt_call_kv(v));
	st = pt_call_state(v);
	/* an OrderedDict's attributes (a state_dict's _metadata) */
	if (od && st && st->kind == PT_V_DICT && st->u.dict.kv.n) {
		emit(k, st);
		pko_op(&k->b, PKO_BUILD);
	}
}

static void emit_seq(struct pk *k, const struct pt_value *v)
{
	const struct pt_vseq *s = seq_of(v);
	size_t idx = 0;

	if (v->kind == PT_V_TUPLE) {
		emit_tuple_of(k, s->v, s->n);
		put(k, v);
		return;
	}
	if (v->kind != PT_V_LIST && v->kind != PT_V_TUPLE && !s &&
	    (pt__is_global(v->u.call.callable, "builtins", "set") ||
	     pt__is_global(v->u.call.callable, "__builtin__", "set"))) {
		pko_global(&k->b, "builtins", "set");
		pko_op(&k->b, PKO_EMPTY_LIST);
		emit_items(k, seq_of(arg0(v)), &idx);
		emit_items(k, pt_call_items(v), &idx);
		pko_tuple(&k->b, 1);
		pko_op(&k->b, PKO_REDUCE);
		put(k, v);
		return;
	}
	if (v->kind == PT_V_SET || v->kind == PT_V_FROZENSET) {
		if (v->kind == PT_V_FROZENSET)
			note(k, "%s", "frozenset written as a set");
		pko_global(&k->b, "builtins", "set");
		pko_op(&k->b, PKO_EMPTY_LIST);
		emit_items(k, s, &idx);
		pko_tuple(&k->b, 1);
		pko_op(&k->b, PKO_REDUCE);
		put(k, v);
		return;
	}
	if (v->kind != PT_V_LIST) {
		const struct pt_value *fn = v->u.call.callable;
		if (pt__is_global(fn, "torch", "Size") && (s = seq_of(arg0(v)))) {
			pko_global(&k->b, "torch", "Size");
			emit_tuple_of(k, s->v, s->n);
			pko_tuple(&k->b, 1);
			pko_op(&k->b, PKO_REDUCE);
			put(k, v);
			return;
		}
		if (fn && fn->kind == PT_V_GLOBAL)
			note(k, "%s written as a list", fn->u.global.name);
	}
	pko_op(&k->b, PKO_EMPTY_LIST);
	put(k, v);
	if (v->kind == PT_V_LIST) {
		emit_items(k, s, &idx);
		return;
	}
	emit_items(k, seq_of(arg0(v)), &idx);
	emit_items(k, pt_call_items(v), &idx);
}

/* bytes: _codecs.encode(latin-1 text, 'latin1'), as Python 3 pickles
 * bytes at protocol 2. */
static void emit_bytes(struct pk *k, const uint8_t *p, size_t n, bool array)
{
	struct pt_buf u;
	size_t i;

	pt_buf_init(&u);
	for (i = 0; i < n; i++) {
		if (p[i] < 0x80) {
			pt_buf_putc(&u, (char)p[i]);
		} else {
			pt_buf_putc(&u, (char)(0xc0 | (p[i] >> 6)));
			pt_buf_putc(&u, (char)(0x80 | (p[i] & 0x3f)));
		}
	}
	if (array)
		pko_global(&k->b, "builtins", "bytearray");
	pko_global(&k->b, "_codecs", "encode");
	pko_str(&k->b, u.p ? u.p : "", u.len);
	pko_cstr(&k->b, "latin1");
	pko_tuple(&k->b, 2);
	pko_op(&k->b, PKO_REDUCE);
	if (array) {
		pko_tuple(&k->b, 1);
		pko_op(&k->b, PKO_REDUCE);
	}
	if (u.oom)
		k->rc = -ENOMEM;
	pt_buf_free(&u);
}

/* An object of a class torch refuses: a dict of what it holds (its state
 * dict, or both dicts of a (dict, slots) state, items set on it, its
 * arguments when there is nothing else). */
static void emit_object(struct pk *k, const struct pt_value *v)
{
	const struct pt_value *fn = v->u.call.callable, *st = pt_call_state(v);
	const struct pt_vseq *pair = st && st->kind == PT_V_TUPLE ? &st->u.seq : NULL;
	char cls[256];
	size_t idx = 0, saved;

	if (fn && fn->kind == PT_V_GLOBAL)
		snprintf(cls, sizeof(cls), "%s.%s", fn->u.global.module,
			 fn->u.global.name);
	else
		snprintf(cls, sizeof(cls), "an object");
	/* copyreg._reconstructor(cls, base, state): the class is its first
	 * argument */
	if (fn && pt__is_global(fn, "copy_reg", "_reconstructor") &&
	    arg0(v) && arg0(v)->kind == PT_V_GLOBAL)
		snprintf(cls, sizeof(cls), "%s.%s", arg0(v)->u.global.module,
			 arg0(v)->u.global.name);
	if (fn && pt__is_global(fn, "copyreg", "_reconstructor") &&
	    arg0(v) && arg0(v)->kind == PT_V_GLOBAL)
		snprintf(cls, sizeof(cls), "%s.%s", arg0(v)->u.global.module,
			 arg0(v)->u.global.name);
	note(k, "%s written as a dict of its state", cls);
	pko_op(&k->b, PKO_EMPTY_DICT);
	put(k, v);
	if (st && st->kind == PT_V_DICT) {
		emit_pairs(k, &st->u.dict.kv);
	} else if (pair && pair->n == 2) {
		if (pair->v[0]->kind == PT_V_DICT)
			emit_pairs(k, &pair->v[0]->u.dict.kv);
		if (pair->v[1]->kind == PT_V_DICT)
			emit_pairs(k, &pair->v[1]->u.dict.kv);
	} else if (st) {
		pko_cstr(&k->b, "state");
		path_push(k, NULL, 0, &saved);
		emit(k, st);
		path_pop(k, saved);
		pko_op(&k->b, PKO_SETITEM);
	}
	emit_pairs(k, pt_call_kv(v));
	if (pt_call_items(v)->n) {
		pko_cstr(&k->b, "items");
		pko_op(&k->b, PKO_EMPTY_LIST);
		emit_items(k, pt_call_items(v), &idx);
		pko_op(&k->b, 's');
	}
	if (!st && !pt_call_kv(v)->n && !pt_call_items(v)->n && v->u.call.args &&
	    v->u.call.args->u.seq.n) {
		pko_cstr(&k->b, "args");
		emit(k, v->u.call.args);
		pko_op(&k->b, 's');
	}
}

/* A call of a function on the allowlist that needs nothing but its
 * arguments, written as it was (a sparse tensor: its layout and its
 * components); false for anything else. */
static bool emit_allowed_call(struct pk *k, const struct pt_value *v)
{
	const struct pt_value *fn = v->u.call.callable;

	if (!fn || v->kind != PT_V_CALL || !v->u.call.args ||
	    pt_call_state(v) || pt_call_kv(v)->n || pt_call_items(v)->n ||
	    !(pt__is_global(fn, "torch._utils", "_rebuild_sparse_tensor") ||
	      pt__is_global(fn, "torch.serialization", "_get_layout")))
		return false;
	pko_global(&k->b, fn->u.global.module, fn->u.global.name);
	emit(k, v->u.call.args);
	pko_op(&k->b, PKO_REDUCE);
	put(k, v);
	return true;
}

/* Values shown as text: a device, a dtype, a complex number, a global. */
static void emit_text(struct pk *k, const struct pt_value *v)
{
	const char *text = v->aux;
	size_t n = strlen(text);

	if (n && text[n - 1] == '\n')
		n--;
	if (v->kind == PT_V_GLOBAL) {
		if (strcmp(v->u.global.module, "torch") == 0 &&
		    pt_dtype_from_torch(v->u.global.name)) {
			pko_global(&k->b, "torch", pt_dtype_from_torch(v->u.global.name)->name);
			return;
		}
		note(k, "reference to %s written as its name", text);
		pko_str(&k->b, text, n);
		return;
	}
	if (pt__is_global(v->u.call.callable, "torch", "device")) {
		pko_global(&k->b, "torch", "device");
		pko_str(&k->b, text, n);
		pko_tuple(&k->b, 1);
		pko_op(&k->b, PKO_REDUCE);
		return;
	}
	if (v->u.call.args && v->u.call.args->u.seq.n == 2 &&
	    v->u.call.args->u.seq.v[0]->kind == PT_V_FLOAT) {
		note(k, "complex %s written as a (real, imag) tuple", text);
		emit_tuple_of(k, v->u.call.args->u.seq.v, 2);
		return;
	}
	note(k, "%s written as text", text);
	pko_str(&k->b, text, n);
}

static void emit(struct pk *k, const struct pt_value *v)
{
	const struct pt_bytes *by;
	uint32_t idx;

	if (k->rc)
		return;
	if (memo_find(&k->memo, v, &idx)) {
		pko_get(&k->b, idx);
		return;
	}
	if (++k->depth > k->ck->opts.limits.max_depth) {
		k->rc = -EFBIG;
		return;
	}
	switch (v->kind) {
	case PT_V_NONE:
		pko_none(&k->b);
		goto out;
	case PT_V_BOOL:
		pko_bool(&k->b, v->u.b);
		goto out;
	case PT_V_INT:
		pko_int(&k->b, v->u.i);
		goto out;
	case PT_V_BIGINT:
		if (v->u.s.len < 256) {
			pko_long(&k->b, v->u.s.p, v->u.s.len);
		} else {
			struct pt_buf d;
			pt_buf_init(&d);
			pt_bigint_decimal(&d, v->u.s.p, v->u.s.len);
			note(k, "%s", "integer over 2040 bits written as its decimal text");
			pko_str(&k->b, d.p ? d.p : "", d.len);
			pt_buf_free(&d);
		}
		goto out;
	case PT_V_FLOAT:
		pko_float(&k->b, v->u.f);
		goto out;
	case PT_V_STR:
		pko_str(&k->b, v->u.s.p, v->u.s.len);
		goto out;
	default:
		break;
	}
	switch (pt__vclass(v)) {
	case PT_C_TENSOR:
		emit_tensor(k, v->aux);
		put(k, v);
		break;
	case PT_C_BYTES:
		by = v->aux;
		emit_bytes(k, by->p, by->len, v->kind == PT_V_BYTEARRAY);
		put(k, v);
		break;
	case PT_C_TEXT:
		emit_text(k, v);
		break;
	case PT_C_MAP:
		emit_map(k, v);
		break;
	case PT_C_SEQ:
		emit_seq(k, v);
		break;
	case PT_C_OBJECT:
		if (!emit_allowed_call(k, v))
			emit_object(k, v);
		break;
	default:
		note(k, "%s", "value of unknown kind written as None");
		pko_none(&k->b);
		break;
	}
out:
	k->depth--;
}

/* ---- the ZIP archive ---- */

struct zrec {
	char name[64];
	uint64_t lho, size;
	uint32_t crc;
};

struct zw {
	struct pt_xout *o;
	struct zrec *r;
	size_t n, cap;
};

static void le16(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void le32(uint8_t *p, uint64_t v)
{
	le16(p, (uint32_t)(v & 0xffff));
	le16(p + 2, (uint32_t)((v >> 16) & 0xffff));
}

static void le64(uint8_t *p, uint64_t v)
{
	le32(p, v & 0xffffffffu);
	le32(p + 4, v >> 32);
}

/* Local header of record @name holding @size bytes, its payload padded to
 * 64 bytes with an "FB" extra field (and a ZIP64 extra when large).  The
 * CRC is patched in after the data (zw_end_record). */
static int zw_begin(struct zw *z, const char *name, uint64_t size,
		    struct pt_error *err)
{
	uint8_t h[30 + 64 + 20 + 68];
	size_t nl = strlen(name), at, pad;
	bool z64 = size >= 0xffffffffu;
	struct zrec *r;

	if (z->n == z->cap) {
		size_t nc = z->cap ? z->cap * 2 : 16;
		r = realloc(z->r, nc * sizeof(*r));
		if (!r)
			return pt_fail(err, -ENOMEM, "out of memory");
		z->r = r;
		z->cap = nc;
	}
	r = &z->r[z->n++];
	memset(r, 0, sizeof(*r));
	snprintf(r->name, sizeof(r->name), "%s", name);
	r->lho = z->o->off;
	r->size = size;
	memset(h, 0, sizeof(h));
	le32(h, 0x04034b50);
	le16(h + 4, z64 ? 45 : 20);
	le16(h + 12, 0x21);                     /* 1980-01-01 */
	le32(h + 18, z64 ? 0xffffffffu : size);
	le32(h + 22, z64 ? 0xffffffffu : size);
	le16(h + 26, (uint32_t)nl);
	memcpy(h + 30, name, nl);
	at = 30 + nl;
	if (z64) {
		le16(h + at, 1);
		le16(h + at + 2, 16);
		le64(h + at + 4, size);
		le64(h + at + 12, size);
		at += 20;
	}
	pad = (64 - (r->lho + at + 4) % 64) % 64;
	le16(h + at, 0x4246);                   /* "FB" */
	le16(h + at + 2, (uint32_t)pad);
	at += 4 + pad;
	le16(h + 28, (uint32_t)(at - 30 - nl));
	return pt_xout_write(z->o, h, at, err);
}

static int zw_crc(struct zw *z, uint32_t crc, struct pt_error *err)
{
	struct zrec *r = &z->r[z->n - 1];
	uint8_t c[4];
	int rc;

	r->crc = crc;
	le32(c, crc);
	rc = pt_pwrite_full(z->o->fd, c, 4, r->lho + 14);
	if (rc)
		return pt_fail(err, rc, "%s: %s", z->o->path, strerror(-rc));
	return 0;
}

static int zw_mem(struct zw *z, const char *name, const void *p, size_t n,
		  struct pt_error *err)
{
	int rc = zw_begin(z, name, n, err);

	if (!rc)
		rc = pt_xout_write(z->o, p, n, err);
	return rc ? rc : zw_crc(z, pt_crc32(0, p, n), err);
}

/* Central directory and ZIP64 end records, as torch writes them. */
static int zw_finish(struct zw *z, struct pt_error *err)
{
	uint64_t cd = z->o->off, cd_end;
	uint8_t h[46 + 64 + 28], e[56 + 20 + 22];
	size_t i;
	int rc = 0;

	for (i = 0; i < z->n && !rc; i++) {
		const struct zrec *r = &z->r[i];
		size_t nl = strlen(r->name);
		bool z64 = r->size >= 0xffffffffu || r->lho >= 0xffffffffu;

		memset(h, 0, sizeof(h));
		le32(h, 0x02014b50);
		le16(h + 4, z64 ? 45 : 20);
		le16(h + 6, z64 ? 45 : 20);
		le16(h + 14, 0x21);
		le32(h + 16, r->crc);
		le32(h + 20, z64 ? 0xffffffffu : r->size);
		le32(h + 24, z64 ? 0xffffffffu : r->size);
		le16(h + 28, (uint32_t)nl);
		le16(h + 30, z64 ? 28 : 0);
		le32(h + 42, z64 ? 0xffffffffu : r->lho);
		memcpy(h + 46, r->name, nl);
		if (z64) {
			le16(h + 46 + nl, 1);
			le16(h + 48 + nl, 24);
			le64(h + 50 + nl, r->size);
			le64(h + 58 + nl, r->size);
			le64(h + 66 + nl, r->lho);
		}
		rc = pt_xout_write(z->o, h, 46 + nl + (z64 ? 28 : 0), err);
	}
	if (rc)
		return rc;
	cd_end = z->o->off;
	memset(e, 0, sizeof(e));
	le32(e, 0x06064b50);                    /* ZIP64 EOCD */
	le64(e + 4, 44);
	le16(e + 12, 45);
	le16(e + 14, 45);
	le64(e + 24, z->n);
	le64(e + 32, z->n);
	le64(e + 40, cd_end - cd);
	le64(e + 48, cd);
	le32(e + 56, 0x07064b50);               /* locator */
	le64(e + 64, cd_end);
	le32(e + 72, 1);
	le32(e + 76, 0x06054b50);               /* EOCD */
	le16(e + 84, z->n >= 0xffff ? 0xffff : (uint32_t)z->n);
	le16(e + 86, z->n >= 0xffff ? 0xffff : (uint32_t)z->n);
	le32(e + 88, cd_end - cd >= 0xffffffffu ? 0xffffffffu : cd_end - cd);
	le32(e + 92, cd >= 0xffffffffu ? 0xffffffffu : cd);
	return pt_xout_write(z->o, e, sizeof(e), err);
}

/* archive/data/N: the storage's bytes, little-endian. */
static int zw_storage(struct zw *z, struct pt_ckpt *ck, const struct pst *s,
		      size_t idx, struct pt_error *err)
{
	struct pt_tensor whole;
	char name[48];
	uint64_t done = 0, n = s->st->nbytes;
	uint32_t crc = 0;
	unsigned unit = s->dt->size;
	size_t cap;
	uint8_t *buf = pt__xbuf(&cap);
	int rc;

	if (!buf)
		return pt_fail(err, -ENOMEM, "out of memory");
	if (strncmp(s->dt->name, "complex", 7) == 0)
		unit /= 2;
	snprintf(name, sizeof(name), "archive/data/%zu", idx);
	rc = zw_begin(z, name, n, err);
	memset(&whole, 0, sizeof(whole));
	whole.dtype = s->st->dtype ? s->st->dtype : s->dt;
	whole.st = s->st;
	whole.nbytes = n;
	whole.byte_hi = n;
	whole.contiguous = true;
	cap -= cap % 16;
	while (!rc && done < n) {
		size_t want = n - done < cap ? (size_t)(n - done) : cap;
		ssize_t got = pt__tensor_read(ck, &whole, buf, want, done, err);

		if (got != (ssize_t)want) {
			rc = got < 0 ? (int)got : pt_fail(err, -EIO, "storage %zu ended early", idx);
			break;
		}
		if (s->byteorder == '>' && unit > 1)
			pt_swap_elems(buf, want / unit, unit);
		crc = pt_crc32(crc, buf, want);
		rc = pt_xout_write(z->o, buf, want, err);
		pt_ckpt_progress(ck, PT_PROGRESS_DONE, want);
		done += want;
	}
	return rc ? rc : zw_crc(z, crc, err);
}

int pt_export_pt(struct pt_ckpt *ck, const char *out,
		 const struct pt_export_opts *opts, struct pt_buf *notes,
		 struct pt_error *err)
{
	struct pk k;
	struct pt_xout o;
	struct zw z = { 0 };
	struct memo *m, *tmp;
	size_t i;
	int rc;

	memset(&k, 0, sizeof(k));
	k.ck = ck;
	k.notes = notes;
	pt_buf_init(&k.b);
	pt_buf_init(&k.path);
	pko_proto(&k.b, 2);
	emit(&k, ck->root);
	pko_stop(&k.b);
	if (k.nst == 0)
		note(&k, "%s", "no tensor: the file holds the other values only");
	rc = k.rc == -EFBIG ? pt_fail(err, -EFBIG, "nesting deeper than max_depth") :
	     k.rc || k.b.oom ? pt_fail(err, -ENOMEM, "out of memory") : 0;
	if (!rc)
		rc = pt_xout_open(&o, out, err);
	o.nosync = opts->no_fsync;
	if (!rc) {
		z.o = &o;
		rc = zw_mem(&z, "archive/data.pkl", k.b.p, k.b.len, err);
		if (!rc)
			rc = zw_mem(&z, "archive/.format_version", "1", 1, err);
		if (!rc)
			rc = zw_mem(&z, "archive/.storage_alignment", "64", 2, err);
		if (!rc)
			rc = zw_mem(&z, "archive/byteorder", "little", 6, err);
		for (i = 0; i < k.nst && !rc; i++)
			rc = zw_storage(&z, ck, &k.sts[i], i, err);
		if (!rc)
			rc = zw_mem(&z, "archive/version", "3\n", 2, err);
		if (!rc)
			rc = zw_finish(&z, err);
		if (!rc)
			rc = pt_xout_commit(&o, ck, err);
		pt_xout_abort(&o);
	}
	HASH_ITER(hh, k.memo, m, tmp) {
		HASH_DEL(k.memo, m);
		free(m);
	}
	HASH_ITER(hh, k.stmap, m, tmp) {
		HASH_DEL(k.stmap, m);
		free(m);
	}
	free(k.sts);
	free(z.r);
	pt_buf_free(&k.b);
	pt_buf_free(&k.path);
	return rc;
}
