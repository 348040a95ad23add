/* SPDX-License-Identifier: MIT */
/*
 * torchscript_json.c -- TorchScript archives in the 2019 layout
 * (torch 1.0/1.1: <prefix>/model.json + tensors/<n> + code/<name>.py +
 * attributes.pkl; no data.pkl: docs/FORMATS.md, "The 2019 TorchScript layout").
 * Current torch cannot read it at all; it is shown here all the same.
 *
 * model.json is a protobuf message written as JSON (proto3 mapping, so
 * 64-bit integers are strings):
 *
 *   {"protoVersion": "3",
 *    "mainModule": {"name": "m", "parameters": [{"name": "weight",
 *                   "tensorId": "0", "isBuffer": false}, ...],
 *                   "attributes": [{"type": "Tensor", "name": "v",
 *                   "id": "0"}, ...],
 *                   "submodules": [<module>, ...], ...},
 *    "tensors": [{"dims": ["3"], "offset": "0", "strides": ["1"],
 *                 "dataType": "FLOAT", "requiresGrad": false,
 *                 "data": {"key": "tensors/0"}, "device": "cpu"}, ...]}
 *
 * The tree: the main module is the root; each parameter is a tensor file
 * under its name, each attribute its value (attributes.pkl, whose
 * build_tensor_from_id(n) means tensors[n]), each submodule a directory,
 * so a Sequential's first weight is /0/weight as for current archives
 * (LAYOUT.md).  The tensor table is also what the code calls CONSTANTS:
 * CONSTANTS.c<i> is tensors[i], shown as /.ptfs/constants/c<i>.  Tensors
 * are served from their records without copying.  Nested modules are
 * parsed with an explicit stack (no recursion over the file).
 */
#include "ckpt/ckpt_i.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- model.json ---- */

struct tj_param {
	const uint8_t *name;
	size_t nlen;
	uint64_t id;                    /* tensorId, or attribute id */
	bool attr;                      /* an attribute (attributes.pkl) */
};

struct tj_mod {
	const uint8_t *name;
	size_t nlen;
	size_t parent;                  /* SIZE_MAX for the main module */
	size_t p0, np;                  /* its parameters and attributes */
	size_t nsub;
	bool has_params, has_attrs;
};

struct tj_tensor {
	const struct pt_dtype *dtype;
	const uint8_t *key;             /* data.key: record under the prefix */
	size_t klen;
	const uint8_t *device;
	size_t dlen;
	uint32_t rank;
	int64_t dims[32];
	int64_t strides[32];
	uint32_t nstrides;
	int64_t offset;
	bool requires_grad;
};

struct tj {
	struct pt_ckpt *ck;
	struct pt_js j;
	struct tj_mod *mods;
	size_t nmods, cap_mods;
	struct tj_param *params;
	size_t nparams, cap_params;
	struct tj_tensor *tensors;
	size_t ntensors, cap_tensors;
	const uint8_t *proto_version, *producer_name, *producer_version;
	size_t pv_len, pn_len, pver_len;
	bool have_main;
};

/* pt_grow(), within the format's own cap @max of elements. */
static bool tj_grow(void **arr, size_t *cap, size_t n, size_t elem,
		    uint64_t max)
{
	return n < max && pt_grow(arr, cap, n, elem);
}

static bool key_is(const uint8_t *k, size_t n, const char *s)
{
	return n == strlen(s) && memcmp(k, s, n) == 0;
}

/* A non-negative integer written as a JSON number or, as proto3 writes
 * 64-bit fields, a string of digits. */
static int tj_int(struct tj *t, const char *what, int64_t *out)
{
	const uint8_t *s;
	size_t n, i;
	uint64_t v = 0;
	int rc;

	if (pt__js_peek(&t->j) != '"') {
		rc = pt__js_uint(&t->j, INT64_MAX, &v);
		*out = (int64_t)v;
		return rc;
	}
	rc = pt__js_str(&t->j, &s, &n);
	if (rc)
		return rc;
	if (n == 0 || n > 18)
		return pt_fail(t->j.err, -EBADMSG, "model.json: %s is not a small non-negative integer", what);
	for (i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return pt_fail(t->j.err, -EBADMSG, "model.json: %s is not a non-negative integer", what);
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	*out = (int64_t)v;
	return 0;
}

/* true/false: the scanner has no reader for them; peek, then skip. */
static int tj_bool(struct tj *t, bool *out)
{
	int c = pt__js_peek(&t->j);

	*out = c == 't';
	return pt__js_skip(&t->j);
}

/* An array of integers into @v (at most @cap). */
static int tj_ints(struct tj *t, const char *what, int64_t *v, uint32_t cap,
		   uint32_t *n)
{
	bool empty, more = true;
	int rc;

	*n = 0;
	rc = pt__js_open(&t->j, '[', &empty);
	if (rc || empty)
		return rc;
	while (more) {
		if (*n == cap)
			return pt_fail(t->j.err, -EFBIG, "model.json: %s has more than %u entries", what, cap);
		rc = tj_int(t, what, &v[*n]);
		if (rc)
			return rc;
		(*n)++;
		rc = pt__js_next(&t->j, ']', &more);
		if (rc)
			return rc;
	}
	return 0;
}

/* caffe2 TensorProto data types that torch 1.0/1.1 wrote */
static const struct {
	const char *proto;
	const char *torch;
} tj_types[] = {
	{ "FLOAT", "float32" }, { "DOUBLE", "float64" },
	{ "FLOAT16", "float16" }, { "INT8", "int8" }, { "UINT8", "uint8" },
	{ "BYTE", "uint8" }, { "INT16", "int16" }, { "INT32", "int32" },
	{ "INT64", "int64" }, { "BOOL", "bool" },
};

static int tj_tensor(struct tj *t, struct tj_tensor *x)
{
	const uint8_t *k, *s;
	size_t kn, sn, i;
	bool empty, more = true, have_dims = false, q = false;
	char nm[96];
	int rc;

	memset(x, 0, sizeof(*x));
	rc = pt__js_open(&t->j, '{', &empty);
	if (rc)
		return rc;
	while (!empty && more) {
		rc = pt__js_key(&t->j, &k, &kn);
		if (rc)
			return rc;
		if (key_is(k, kn, "dims")) {
			rc = tj_ints(t, "dims", x->dims, 32, &x->rank);
			have_dims = true;
		} else if (key_is(k, kn, "strides")) {
			rc = tj_ints(t, "strides", x->strides, 32, &x->nstrides);
		} else if (key_is(k, kn, "offset")) {
			rc = tj_int(t, "offset", &x->offset);
		} else if (key_is(k, kn, "requiresGrad")) {
			rc = tj_bool(t, &x->requires_grad);
		} else if (key_is(k, kn, "isQuantized")) {
			rc = tj_bool(t, &q);
		} else if (key_is(k, kn, "device")) {
			rc = pt__js_str(&t->j, &x->device, &x->dlen);
		} else if (key_is(k, kn, "dataType")) {
			rc = pt__js_str(&t->j, &s, &sn);
			if (rc)
				return rc;
			for (i = 0; i < sizeof(tj_types) / sizeof(*tj_types); i++)
				if (key_is(s, sn, tj_types[i].proto))
					x->dtype = pt_dtype_from_torch(tj_types[i].torch);
			if (!x->dtype)
				return pt_fail(t->j.err, -ENOTSUP,
					       "model.json: tensor %zu has data type %s, not supported",
					       t->ntensors, pt__js_printable(s, sn, nm, sizeof(nm)));
		} else if (key_is(k, kn, "data")) {
			bool e2, m2 = true;

			rc = pt__js_open(&t->j, '{', &e2);
			while (!rc && !e2 && m2) {
				rc = pt__js_key(&t->j, &s, &sn);
				if (rc)
					break;
				if (key_is(s, sn, "key"))
					rc = pt__js_str(&t->j, &x->key, &x->klen);
				else
					rc = pt__js_skip(&t->j);
				if (!rc)
					rc = pt__js_next(&t->j, '}', &m2);
			}
		} else {
			rc = pt__js_skip(&t->j);
		}
		if (rc)
			return rc;
		rc = pt__js_next(&t->j, '}', &more);
		if (rc)
			return rc;
	}
	(void)have_dims;        /* no dims: a 0-d tensor */
	if (q)
		return pt_fail(t->j.err, -ENOTSUP, "model.json: tensor %zu is quantized, not supported", t->ntensors);
	if (!x->dtype)
		return pt_fail(t->j.err, -EBADMSG, "model.json: tensor %zu has no dataType", t->ntensors);
	if (!x->key)
		return pt_fail(t->j.err, -EBADMSG, "model.json: tensor %zu has no data key", t->ntensors);
	if (x->nstrides && x->nstrides != x->rank)
		return pt_fail(t->j.err, -EBADMSG, "model.json: tensor %zu has %u dims but %u strides",
			       t->ntensors, x->rank, x->nstrides);
	return 0;
}

/* One item of "parameters" or "attributes". */
static int tj_param(struct tj *t, struct tj_param *p, bool attr)
{
	const uint8_t *k;
	size_t kn;
	bool empty, more = true, have_id = false;
	int64_t id = 0;
	int rc;

	memset(p, 0, sizeof(*p));
	p->attr = attr;
	rc = pt__js_open(&t->j, '{', &empty);
	if (rc)
		return rc;
	while (!empty && more) {
		rc = pt__js_key(&t->j, &k, &kn);
		if (rc)
			return rc;
		if (key_is(k, kn, "name")) {
			rc = pt__js_str(&t->j, &p->name, &p->nlen);
		} else if (key_is(k, kn, attr ? "id" : "tensorId")) {
			rc = tj_int(t, attr ? "attribute id" : "tensorId", &id);
			have_id = true;
		} else {
			rc = pt__js_skip(&t->j);
		}
		if (rc)
			return rc;
		rc = pt__js_next(&t->j, '}', &more);
		if (rc)
			return rc;
	}
	if (!p->name || !have_id)
		return pt_fail(t->j.err, -EBADMSG, "model.json: a module %s without a name or %s",
			       attr ? "attribute" : "parameter", attr ? "id" : "tensorId");
	p->id = (uint64_t)id;
	return 0;
}

static int tj_params(struct tj *t, struct tj_mod *m, bool attr)
{
	const struct pt_limits *lim = &t->ck->opts.limits;
	bool empty, more = true;
	int rc;

	if (attr ? m->has_attrs : m->has_params)
		return pt_fail(t->j.err, -EBADMSG, "model.json: a module lists %s twice",
			       attr ? "attributes" : "parameters");
	if (m->np && m->p0 + m->np != t->nparams)
		return pt_fail(t->j.err, -EBADMSG, "model.json: a module's parameters and attributes are apart");
	if (!m->np)
		m->p0 = t->nparams;
	if (attr)
		m->has_attrs = true;
	else
		m->has_params = true;
	rc = pt__js_open(&t->j, '[', &empty);
	if (rc || empty)
		return rc;
	while (more) {
		if (!tj_grow((void **)&t->params, &t->cap_params, t->nparams,
			     sizeof(*t->params), lim->max_values))
			return pt_fail(t->j.err, -EFBIG, "model.json: too many parameters");
		rc = tj_param(t, &t->params[t->nparams], attr);
		if (rc)
			return rc;
		t->nparams++;
		m->np++;
		rc = pt__js_next(&t->j, ']', &more);
		if (rc)
			return rc;
	}
	return 0;
}

enum { F_KEY, F_AFTER_VALUE, F_SUB_ELEM, F_SUB_AFTER };

struct tj_frame {
	size_t mod;
	int phase;
};

static int tj_new_mod(struct tj *t, size_t parent, size_t *out)
{
	if (!tj_grow((void **)&t->mods, &t->cap_mods, t->nmods, sizeof(*t->mods),
		     t->ck->opts.limits.max_values))
		return pt_fail(t->j.err, -EFBIG, "model.json: too many modules");
	memset(&t->mods[t->nmods], 0, sizeof(*t->mods));
	t->mods[t->nmods].parent = parent;
	*out = t->nmods++;
	if (parent != SIZE_MAX)
		t->mods[parent].nsub++;
	return 0;
}

/* The main module and every submodule, iteratively. */
static int tj_modules(struct tj *t)
{
	uint32_t max_depth = t->ck->opts.limits.max_depth;
	struct tj_frame *st = NULL;
	size_t n = 0, cap = 0, mod;
	const uint8_t *k;
	size_t kn;
	bool empty, more;
	int rc;

	if (t->have_main)
		return pt_fail(t->j.err, -EBADMSG, "model.json: mainModule given twice");
	t->have_main = true;
	rc = tj_new_mod(t, SIZE_MAX, &mod);
	if (!rc)
		rc = pt__js_open(&t->j, '{', &empty);
	if (rc || empty)
		return rc;
	st = malloc(16 * sizeof(*st));
	if (!st)
		return pt_fail(t->j.err, -ENOMEM, "out of memory");
	cap = 16;
	st[n++] = (struct tj_frame){ mod, F_KEY };
	while (n > 0 && !rc) {
		struct tj_frame *f = &st[n - 1];
		struct tj_mod *m = &t->mods[f->mod];

		switch (f->phase) {
		case F_KEY:
			rc = pt__js_key(&t->j, &k, &kn);
			if (rc)
				break;
			f->phase = F_AFTER_VALUE;
			if (key_is(k, kn, "name")) {
				rc = pt__js_str(&t->j, &m->name, &m->nlen);
			} else if (key_is(k, kn, "parameters")) {
				rc = tj_params(t, m, false);
			} else if (key_is(k, kn, "attributes")) {
				rc = tj_params(t, m, true);
			} else if (key_is(k, kn, "submodules")) {
				rc = pt__js_open(&t->j, '[', &empty);
				if (!rc && !empty)
					f->phase = F_SUB_ELEM;
			} else {
				rc = pt__js_skip(&t->j);
			}
			break;
		case F_AFTER_VALUE:
			rc = pt__js_next(&t->j, '}', &more);
			if (!rc && more)
				f->phase = F_KEY;
			else if (!rc)
				n--;    /* the module is done */
			break;
		case F_SUB_ELEM:
			f->phase = F_SUB_AFTER;
			rc = tj_new_mod(t, f->mod, &mod);
			if (!rc)
				rc = pt__js_open(&t->j, '{', &empty);
			if (rc || empty)
				break;
			if (n >= max_depth) {
				rc = pt_fail(t->j.err, -EFBIG,
					     "model.json: modules nested more than %u deep", max_depth);
				break;
			}
			if (n == cap) {
				struct tj_frame *q = realloc(st, 2 * cap * sizeof(*st));
				if (!q) {
					rc = pt_fail(t->j.err, -ENOMEM, "out of memory");
					break;
				}
				st = q;
				cap *= 2;
			}
			st[n++] = (struct tj_frame){ mod, F_KEY };
			break;
		case F_SUB_AFTER:
			rc = pt__js_next(&t->j, ']', &more);
			if (!rc)
				f->phase = more ? F_SUB_ELEM : F_AFTER_VALUE;
			break;
		}
	}
	free(st);
	return rc;
}

static int tj_tensors(struct tj *t)
{
	bool empty, more = true;
	int rc;

	if (t->ntensors)
		return pt_fail(t->j.err, -EBADMSG, "model.json: tensors given twice");
	rc = pt__js_open(&t->j, '[', &empty);
	if (rc || empty)
		return rc;
	while (more) {
		if (!tj_grow((void **)&t->tensors, &t->cap_tensors, t->ntensors,
			     sizeof(*t->tensors), t->ck->opts.limits.max_values))
			return pt_fail(t->j.err, -EFBIG, "model.json: too many tensors");
		rc = tj_tensor(t, &t->tensors[t->ntensors]);
		if (rc)
			return rc;
		t->ntensors++;
		rc = pt__js_next(&t->j, ']', &more);
		if (rc)
			return rc;
	}
	return 0;
}

static int tj_parse(struct tj *t)
{
	const uint8_t *k;
	size_t kn;
	bool empty, more = true;
	int rc;

	rc = pt__js_open(&t->j, '{', &empty);
	while (!rc && !empty && more) {
		rc = pt__js_key(&t->j, &k, &kn);
		if (rc)
			break;
		if (key_is(k, kn, "mainModule"))
			rc = tj_modules(t);
		else if (key_is(k, kn, "tensors"))
			rc = tj_tensors(t);
		else if (key_is(k, kn, "protoVersion") && pt__js_peek(&t->j) == '"')
			rc = pt__js_str(&t->j, &t->proto_version, &t->pv_len);
		else if (key_is(k, kn, "producerName") && pt__js_peek(&t->j) == '"')
			rc = pt__js_str(&t->j, &t->producer_name, &t->pn_len);
		else if (key_is(k, kn, "producerVersion") && pt__js_peek(&t->j) == '"')
			rc = pt__js_str(&t->j, &t->producer_version, &t->pver_len);
		else
			rc = pt__js_skip(&t->j);
		if (!rc)
			rc = pt__js_next(&t->j, '}', &more);
	}
	if (!rc)
		rc = pt__js_end(&t->j);
	if (!rc && !t->have_main)
		rc = pt_fail(t->j.err, -EBADMSG, "model.json: no mainModule");
	return rc;
}

/* ---- building the tree ---- */

static int tj_storage_of(struct tj *t, const struct tj_tensor *x,
			 struct pt_storage **out, struct pt_error *err)
{
	struct pt_ckpt *ck = t->ck;
	const struct pt_zip_entry *e;
	struct pt_storage *st;
	char rel[512], nm[96];

	if (x->klen >= sizeof(rel) || memchr(x->key, '\0', x->klen))
		return pt_fail(err, -EBADMSG, "model.json: tensor data key is too long");
	memcpy(rel, x->key, x->klen);
	rel[x->klen] = '\0';
	st = pt__storage_find(ck, rel);
	if (st) {
		*out = st;
		return 0;
	}
	e = pt_zip_find_rel(ck->zip, rel);
	if (!e)
		return pt_fail(err, -EBADMSG, "model.json: tensor record '%s' is missing",
			       pt__js_printable(x->key, x->klen, nm, sizeof(nm)));
	st = pt__record_storage(ck, e, rel, (const char *)x->device,
				x->device ? x->dlen : 0, x->dtype);
	if (!st)
		return pt_fail(err, -ENOMEM, "out of memory");
	*out = st;
	return 0;
}

/* attributes.pkl: a tuple of attribute values (or absent). */
static int tj_attributes(struct tj *t, struct pt_value **out,
			 struct pt_error *err)
{
	const struct pt_zip_entry *e = pt_zip_find_rel(t->ck->zip, "attributes.pkl");
	uint8_t *buf = NULL;
	size_t len = 0;
	int rc;

	*out = NULL;
	if (!e)
		return 0;
	rc = pt_zip_read(t->ck->zip, e, &buf, &len, err);
	if (rc)
		return rc;
	return pt__load_pickle(t->ck, buf, len, "attributes.pkl",
			       e->method == PT_ZIP_STORED ? e->data_off : UINT64_MAX,
			       out, NULL, err);
}

/* The value of parameter or attribute @q (the @p-th of its module): a
 * tensor of table @tv, or an item of attributes.pkl (@attrs). */
static int tj_param_value(struct tj *t, const struct tj_param *q, size_t p,
			  struct pt_value **tv, struct pt_value *attrs,
			  struct pt_value **out, struct pt_error *err)
{
	const struct pt_value *c;

	if (!q->attr) {
		if (q->id >= t->ntensors)
			return pt_fail(err, -EBADMSG,
				       "model.json: parameter %zu names tensor %" PRIu64 " of %zu",
				       p, q->id, t->ntensors);
		*out = tv[q->id];
		return 0;
	}
	if (!attrs || (attrs->kind != PT_V_TUPLE && attrs->kind != PT_V_LIST) ||
	    q->id >= attrs->u.seq.n)
		return pt_fail(err, -EBADMSG,
			       "model.json: attribute %" PRIu64 " is not in attributes.pkl", q->id);
	*out = attrs->u.seq.v[q->id];
	c = *out;
	/* build_tensor_from_id(n): the tensor table */
	if (c->kind == PT_V_CALL &&
	    pt__is_global(c->u.call.callable, "torch.jit._pickle", "build_tensor_from_id") &&
	    c->u.call.args->u.seq.n == 1 &&
	    c->u.call.args->u.seq.v[0]->kind == PT_V_INT) {
		int64_t n = c->u.call.args->u.seq.v[0]->u.i;

		if (n < 0 || (uint64_t)n >= t->ntensors)
			return pt_fail(err, -EBADMSG,
				       "attributes.pkl: build_tensor_from_id(%" PRId64 ") is outside the %zu tensors",
				       n, t->ntensors);
		*out = tv[n];
	}
	return 0;
}

static int tj_build(struct tj *t, struct pt_error *err)
{
	struct pt_ckpt *ck = t->ck;
	struct pt_value **tv = NULL, **mv = NULL, *attrs = NULL, *consts;
	size_t *fill = NULL, i;
	int rc;

	tv = calloc(t->ntensors + 1, sizeof(*tv));
	mv = calloc(t->nmods + 1, sizeof(*mv));
	fill = calloc(t->nmods + 1, sizeof(*fill));
	if (!tv || !mv || !fill) {
		rc = pt_fail(err, -ENOMEM, "out of memory");
		goto out;
	}
	for (i = 0; i < t->ntensors; i++) {
		const struct tj_tensor *x = &t->tensors[i];
		struct pt_storage *st = NULL;
		struct pt_tensor *pt = NULL;

		rc = tj_storage_of(t, x, &st, err);
		if (!rc)
			rc = pt__tensor_new(ck, x->dtype, st, x->rank, x->dims,
					    x->nstrides ? x->strides : NULL,
					    x->offset, x->requires_grad, &pt, err);
		if (rc) {
			pt_error_prefix(err, "model.json: tensor %zu", i);
			goto out;
		}
		tv[i] = pt__tensor_value(ck, pt);
		if (!tv[i]) {
			rc = pt_fail(err, -ENOMEM, "out of memory");
			goto out;
		}
	}
	rc = tj_attributes(t, &attrs, err);
	if (rc)
		goto out;
	for (i = 0; i < t->nmods; i++) {
		mv[i] = pt__value_dict(ck, t->mods[i].np + t->mods[i].nsub);
		if (!mv[i]) {
			rc = pt_fail(err, -ENOMEM, "out of memory");
			goto out;
		}
	}
	for (i = 0; i < t->nmods; i++) {
		const struct tj_mod *m = &t->mods[i];
		size_t p;

		for (p = 0; p < m->np; p++) {
			const struct tj_param *q = &t->params[m->p0 + p];
			struct pt_value *val = NULL;

			rc = tj_param_value(t, q, p, tv, attrs, &val, err);
			if (rc)
				goto out;
			pt__value_dict_set(mv[i], fill[i]++, q->name, q->nlen, val);
		}
	}
	for (i = 1; i < t->nmods; i++) {
		const struct tj_mod *m = &t->mods[i];
		size_t par = m->parent;

		/* parents are created before their children */
		pt__value_dict_set(mv[par], fill[par]++, m->name ? m->name : (const uint8_t *)"", m->nlen, mv[i]);
	}
	ck->root = mv[0];
	/* CONSTANTS.c<i> is tensors[i] */
	consts = pt__numbered_dict(ck, tv, t->ntensors);
	if (!consts) {
		rc = pt_fail(err, -ENOMEM, "out of memory");
		goto out;
	}
	if (pt__add_meta_dir(ck, "constants", consts, NULL) ||
	    pt__add_meta_dir(ck, "code", NULL, "code")) {
		rc = pt_fail(err, -EFBIG, "too many /.ptfs directories");
		goto out;
	}
	rc = 0;
out:
	free(tv);
	free(mv);
	free(fill);
	return rc;
}

/* ---- the format ---- */

static int tj_probe(struct pt_ckpt *ck, const uint8_t *head, size_t n,
		     struct pt_error *err)
{
	int rc = pt__zip_probe(ck, head, n, err);

	if (rc <= 0)
		return rc;
	return pt_zip_find_rel(ck->zip, "model.json") &&
	       !pt_zip_find_rel(ck->zip, "data.pkl");
}

static int tj_open(struct pt_ckpt *ck, struct pt_error *err)
{
	const struct pt_zip_entry *e = pt_zip_find_rel(ck->zip, "model.json");
	const struct pt_zip_entry *ve = pt_zip_find_rel(ck->zip, "version");
	struct tj t;
	uint8_t *buf = NULL;
	size_t len = 0;
	char a[96], b[96], c[96], d[96];
	int rc;

	memset(&t, 0, sizeof(t));
	t.ck = ck;
	ck->kind_name = "TorchScript archive (2019 layout: model.json, tensors/)";
	if (!e)
		return pt_fail(err, -EBADMSG, "no model.json record");
	if (e->usize > ck->opts.limits.max_pickle_bytes)
		return pt_fail(err, -EFBIG, "model.json: %" PRIu64 " bytes exceeds the limit of %" PRIu64,
			       e->usize, ck->opts.limits.max_pickle_bytes);
	if (ve && ve->usize <= 64) {
		rc = pt_zip_read(ck->zip, ve, &buf, &len, err);
		if (rc)
			return rc;
		while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r' ||
				   buf[len - 1] == ' ' || buf[len - 1] == '\0'))
			buf[--len] = '\0';
		ck->version = pt__own(ck, (char *)buf);
		buf = NULL;
	}
	rc = pt_zip_read(ck->zip, e, &buf, &len, err);
	if (rc)
		return rc;
	/* the JSON as stored stays readable in /.ptfs/records */
	if (!pt__own(ck, buf))
		return pt_fail(err, -ENOMEM, "out of memory");
	rc = pt__js_init(&t.j, buf, len, "model.json", err);
	if (!rc)
		rc = tj_parse(&t);
	if (!rc)
		rc = pt__js_keep(&t.j, ck);
	if (!rc)
		rc = tj_build(&t, err);
	if (!rc) {
		pt_buf_printf(&ck->notes, "module: %s (model.json protoVersion %s, producer %s %s)\n",
			      t.mods[0].name ? pt__js_printable(t.mods[0].name, t.mods[0].nlen, a, sizeof(a)) : "?",
			      t.proto_version ? pt__js_printable(t.proto_version, t.pv_len, b, sizeof(b)) : "?",
			      t.producer_name ? pt__js_printable(t.producer_name, t.pn_len, c, sizeof(c)) : "?",
			      t.producer_version ? pt__js_printable(t.producer_version, t.pver_len, d, sizeof(d)) : "?");
		pt_buf_printf(&ck->notes, "modules: %zu, tensor table: %zu (also /.ptfs/constants)\n",
			      t.nmods, t.ntensors);
	}
	pt__js_free(&t.j);
	free(t.mods);
	free(t.params);
	free(t.tensors);
	return rc;
}

static int tj_storage(struct pt_ckpt *ck, const struct pt_value *pid,
		      struct pt_storage **out, struct pt_error *err)
{
	(void)ck;
	(void)pid;
	(void)out;
	return pt_fail(err, -ENOTSUP,
		       "attributes.pkl: a persistent id in the 2019 TorchScript layout is not supported");
}

const struct pt_format pt_fmt_ts_json = {
	.name = "TorchScript archive (2019 layout)",
	.probe = tj_probe,
	.open = tj_open,
	.storage = tj_storage,
	.close = NULL,
};
