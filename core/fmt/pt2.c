/* SPDX-License-Identifier: MIT */
/*
 * pt2.c -- torch.export archives (docs/FORMATS.md, "torch.export archives").
 *
 * PT2 archive (archive_format = "pt2", ~2.6+), one folder <prefix>/:
 *   models/<model>.json                       the serialized program
 *   data/weights/<model>_weights_config.json  {"config": {FQN: {path_name,
 *       is_param, use_pickle, tensor_meta: {dtype, sizes, strides,
 *       storage_offset, requires_grad, device, layout}}}}
 *   data/weights/<path_name>                  raw storage bytes, or a
 *                                             torch.save blob (use_pickle)
 *   data/constants/<model>_constants_config.json and data/constants/...
 *   data/aotinductor/<model>/...              AOTInductor compiled code
 * The root is the weights by FQN (a flat dict, like a state_dict); with
 * several models, one directory per model.  Constants go to
 * /.ptfs/constants, and /.ptfs/models, /.ptfs/extra, /.ptfs/aotinductor
 * are shortcuts to those record folders.  tensor_meta.dtype is
 * torch/_export/serde/schema.py ScalarType (FLOAT = 7: checked against a
 * real archive); layout must be Strided (7); sizes must be plain ints.
 *
 * torch.export.save of 2.1-~2.5 (root-level serialized_exported_program.json):
 * serialized_state_dict.pt and serialized_constants.pt are complete
 * torch.save ZIP blobs inside the archive.  Each is indexed as a nested
 * archive over a copy of its bytes in memory (a stored blob's tensors are
 * still read from the file at outer + inner offset); the state dict is the
 * root and the constants /.ptfs/constants.  Weights with use_pickle are
 * such blobs too.  Tensors of nested blobs are read-only and not
 * zero-copy (no record of the outer archive holds exactly them).
 */
#include "ckpt/ckpt_i.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define P2_MAX_NESTED 64

/* A torch.save blob inside the archive. */
struct p2_nested {
	struct pt_zip *zip;
	struct pt_source *src;          /* over mem */
	const uint8_t *mem;             /* the blob's bytes */
	uint64_t file_off;              /* of mem[0] in the file, or
					 * UINT64_MAX (the blob is deflated) */
	char tag[160];                  /* storage keys are "<tag>/<key>" */
};

struct p2_state {
	struct p2_nested nested[P2_MAX_NESTED];
	int n_nested;
	struct p2_nested *cur;          /* the blob being classified */
};

/* ---- nested torch.save blobs ---- */

static int p2_storage(struct pt_ckpt *ck, const struct pt_value *pidv,
		      struct pt_storage **out, struct pt_error *err)
{
	struct p2_state *s = ck->fmt_state;
	struct p2_nested *nb = s ? s->cur : NULL;
	const struct pt_value *pid = pidv->u.pid, *cls;
	const struct pt_zip_entry *e;
	const struct pt_dtype *dt;
	struct pt_storage *st;
	char key[128], hkey[300], rel[160];
	uint64_t need;
	int rc;

	if (!nb)
		return pt_fail(err, -EBADMSG, "a persistent id outside a torch.save blob");
	if (!pid || pid->kind != PT_V_TUPLE || pid->u.seq.n < 5 ||
	    pid->u.seq.v[2]->kind != PT_V_STR ||
	    !pt_value_text(pid->u.seq.v[2], key, sizeof(key)) ||
	    pid->u.seq.v[4]->kind != PT_V_INT || pid->u.seq.v[4]->u.i < 0)
		return pt_fail(err, -EBADMSG,
			       "%s: persistent id is not a ('storage', type, key, location, numel) tuple",
			       nb->tag);
	snprintf(hkey, sizeof(hkey), "%s/%s", nb->tag, key);
	st = pt__storage_find(ck, hkey);
	if (st) {
		*out = st;
		return 0;
	}
	cls = pid->u.seq.v[1];
	dt = cls->kind == PT_V_GLOBAL ? pt_dtype_from_storage(cls->u.global.name) : NULL;
	if (!dt)
		return pt_fail(err, -ENOTSUP, "%s: storage '%s': unknown storage type", nb->tag, key);
	snprintf(rel, sizeof(rel), "data/%s", key);
	e = pt_zip_find_rel(nb->zip, rel);
	if (!e)
		return pt_fail(err, -EBADMSG, "%s: storage '%s': record '%s' is missing", nb->tag, key, rel);
	if (!pt_mul_u64((uint64_t)pid->u.seq.v[4]->u.i, dt->size, &need) || e->usize < need)
		return pt_fail(err, -EBADMSG, "%s: storage '%s': record '%s' is shorter than the pickle says",
			       nb->tag, key, e->name);
	st = calloc(1, sizeof(*st));
	if (!st || !pt__own(ck, st) || !(st->key = pt__own(ck, strdup(hkey))))
		return pt_fail(err, -ENOMEM, "out of memory");
	st->dtype = dt;
	st->nbytes = e->usize;
	st->id = ck->n_storages++;
	/* st->entry stays NULL: the record is not one of the outer archive */
	if (e->method == PT_ZIP_STORED && nb->file_off != UINT64_MAX) {
		st->kind = PT_ST_FILE;
		st->file_off = nb->file_off + e->data_off;
	} else if (e->method == PT_ZIP_STORED) {
		st->kind = PT_ST_MEM;
		st->mem = nb->mem + e->data_off;
	} else {
		rc = pt_zip_inflated(nb->zip, e, &st->mem, err);
		if (rc)
			return rc;
		st->kind = PT_ST_MEM;
	}
	if (pt__storage_add(ck, st))
		return pt_fail(err, -ENOMEM, "out of memory");
	*out = st;
	return 0;
}

/* Open the blob in record @e as a torch.save archive, decode its data.pkl
 * and classify it; *@root gets the object. */
static int p2_blob(struct pt_ckpt *ck, struct p2_state *s,
		   const struct pt_zip_entry *e, const char *tag,
		   struct pt_value **root, struct pt_error *err)
{
	struct p2_nested *nb;
	const struct pt_zip_entry *pkl;
	uint8_t *buf = NULL, *copy = NULL;
	size_t len = 0;
	char *label;
	int rc;

	if (s->n_nested == P2_MAX_NESTED)
		return pt_fail(err, -EFBIG, "more than %d torch.save blobs", P2_MAX_NESTED);
	if (e->usize > ck->opts.limits.max_inflate_bytes)
		return pt_fail(err, -EFBIG,
			       "%s: a nested torch.save blob of %" PRIu64 " bytes exceeds the limit of %" PRIu64,
			       e->name, e->usize, ck->opts.limits.max_inflate_bytes);
	nb = &s->nested[s->n_nested++];
	snprintf(nb->tag, sizeof(nb->tag), "%s", tag);
	if (e->method == PT_ZIP_STORED) {
		rc = pt_source_dup(ck->src, e->data_off, (size_t)e->usize, &copy, err);
		if (rc)
			return rc;
		if (!pt__own(ck, copy))
			return pt_fail(err, -ENOMEM, "out of memory");
		nb->mem = copy;
		nb->file_off = e->data_off;
	} else {
		rc = pt_zip_inflated(ck->zip, e, &nb->mem, err);
		if (rc)
			return rc;
		nb->file_off = UINT64_MAX;
	}
	rc = pt_source_mem(nb->mem, e->usize, e->name, &nb->src, err);
	if (!rc)
		rc = pt_zip_open(&nb->zip, nb->src, &ck->opts.limits, err);
	if (rc) {
		pt_error_prefix(err, "%s (nested torch.save archive)", e->name);
		return rc;
	}
	pkl = pt_zip_find_rel(nb->zip, "data.pkl");
	if (!pkl)
		return pt_fail(err, -EBADMSG, "%s: nested archive has no data.pkl", e->name);
	rc = pt_zip_read(nb->zip, pkl, &buf, &len, err);
	if (rc)
		return rc;
	label = pt__own(ck, strdup(e->name));
	if (!label) {
		free(buf);
		return pt_fail(err, -ENOMEM, "out of memory");
	}
	rc = pt__load_pickle(ck, buf, len, label,
			     pkl->method == PT_ZIP_STORED && nb->file_off != UINT64_MAX ?
			     nb->file_off + pkl->data_off : UINT64_MAX,
			     root, NULL, err);
	if (rc)
		return rc;
	s->cur = nb;
	rc = pt__classify_value(ck, *root, err);
	s->cur = NULL;
	if (rc)
		pt_error_prefix(err, "%s", e->name);
	return rc;
}

/* ---- JSON weight configs ---- */

static bool key_is(const uint8_t *k, size_t n, const char *s)
{
	return n == strlen(s) && memcmp(k, s, n) == 0;
}

/* schema.py ScalarType */
static const char *const p2_dtypes[] = {
	[1] = "uint8", [2] = "int8", [3] = "int16", [4] = "int32",
	[5] = "int64", [6] = "float16", [7] = "float32", [8] = "float64",
	[9] = "complex32", [10] = "complex64", [11] = "complex128",
	[12] = "bool", [13] = "bfloat16", [28] = "uint16",
	[29] = "float8_e4m3fn", [30] = "float8_e5m2",
	[31] = "float8_e4m3fnuz", [32] = "float8_e5m2fnuz",
	[33] = "float8_e8m0fnu", [34] = "uint32", [35] = "uint64",
};

struct p2_meta {
	const uint8_t *path;            /* path_name */
	size_t plen;
	bool use_pickle;
	bool have_meta;
	uint64_t dtype;
	uint64_t layout;
	uint32_t rank, nstrides;
	int64_t sizes[64];
	int64_t strides[64];
	int64_t offset;
	bool requires_grad;
	const uint8_t *device;
	size_t dlen;
};

/* {"as_int": n}; symbolic sizes are not supported. */
static int p2_symint(struct pt_js *j, int64_t *v)
{
	const uint8_t *k;
	size_t kn;
	bool empty, more = true, got = false;
	uint64_t u;
	int rc;

	if (pt__js_peek(j) != '{') {
		rc = pt__js_uint(j, INT64_MAX, &u);
		*v = (int64_t)u;
		return rc;
	}
	rc = pt__js_open(j, '{', &empty);
	while (!rc && !empty && more) {
		rc = pt__js_key(j, &k, &kn);
		if (rc)
			break;
		if (key_is(k, kn, "as_int")) {
			rc = pt__js_uint(j, INT64_MAX, &u);
			*v = (int64_t)u;
			got = true;
		} else {
			return pt_fail(j->err, -ENOTSUP, "%s: a symbolic size or stride is not supported", j->what);
		}
		if (!rc)
			rc = pt__js_next(j, '}', &more);
	}
	if (!rc && !got)
		rc = pt_fail(j->err, -EBADMSG, "%s: an empty size", j->what);
	return rc;
}

static int p2_symints(struct pt_js *j, int64_t *v, uint32_t *n)
{
	bool empty, more = true;
	int rc;

	*n = 0;
	rc = pt__js_open(j, '[', &empty);
	if (rc || empty)
		return rc;
	while (more) {
		if (*n == 64)
			return pt_fail(j->err, -EFBIG, "%s: more than 64 dimensions", j->what);
		rc = p2_symint(j, &v[(*n)++]);
		if (!rc)
			rc = pt__js_next(j, ']', &more);
		if (rc)
			return rc;
	}
	return 0;
}

static int p2_tensor_meta(struct pt_js *j, struct p2_meta *m)
{
	const uint8_t *k;
	size_t kn;
	bool empty, more = true;
	int rc;

	m->have_meta = true;
	m->layout = 7;
	rc = pt__js_open(j, '{', &empty);
	while (!rc && !empty && more) {
		rc = pt__js_key(j, &k, &kn);
		if (rc)
			break;
		if (key_is(k, kn, "dtype")) {
			rc = pt__js_uint(j, 1000, &m->dtype);
		} else if (key_is(k, kn, "layout")) {
			rc = pt__js_uint(j, 1000, &m->layout);
		} else if (key_is(k, kn, "sizes")) {
			rc = p2_symints(j, m->sizes, &m->rank);
		} else if (key_is(k, kn, "strides")) {
			rc = p2_symints(j, m->strides, &m->nstrides);
		} else if (key_is(k, kn, "storage_offset")) {
			rc = p2_symint(j, &m->offset);
		} else if (key_is(k, kn, "requires_grad")) {
			m->requires_grad = pt__js_peek(j) == 't';
			rc = pt__js_skip(j);
		} else if (key_is(k, kn, "device") && pt__js_peek(j) == '{') {
			bool e2, m2 = true;
			const uint8_t *s;
			size_t sn;

			rc = pt__js_open(j, '{', &e2);
			while (!rc && !e2 && m2) {
				rc = pt__js_key(j, &s, &sn);
				if (!rc && key_is(s, sn, "type") && pt__js_peek(j) == '"')
					rc = pt__js_str(j, &m->device, &m->dlen);
				else if (!rc)
					rc = pt__js_skip(j);
				if (!rc)
					rc = pt__js_next(j, '}', &m2);
			}
		} else {
			rc = pt__js_skip(j);
		}
		if (!rc)
			rc = pt__js_next(j, '}', &more);
	}
	return rc;
}

static int p2_entry(struct pt_js *j, struct p2_meta *m)
{
	const uint8_t *k;
	size_t kn;
	bool empty, more = true;
	int rc;

	memset(m, 0, sizeof(*m));
	rc = pt__js_open(j, '{', &empty);
	while (!rc && !empty && more) {
		rc = pt__js_key(j, &k, &kn);
		if (rc)
			break;
		if (key_is(k, kn, "path_name") && pt__js_peek(j) == '"') {
			rc = pt__js_str(j, &m->path, &m->plen);
		} else if (key_is(k, kn, "use_pickle")) {
			m->use_pickle = pt__js_peek(j) == 't';
			rc = pt__js_skip(j);
		} else if (key_is(k, kn, "tensor_meta") && pt__js_peek(j) == '{') {
			rc = p2_tensor_meta(j, m);
		} else {
			rc = pt__js_skip(j);
		}
		if (!rc)
			rc = pt__js_next(j, '}', &more);
	}
	return rc;
}

/* One FQN's value: a tensor over record <dir>/<path_name>, or the object
 * in a torch.save blob there. */
static int p2_value(struct pt_ckpt *ck, struct p2_state *s, const char *dir,
		    const struct p2_meta *m, const char *fqn,
		    struct pt_value **out, struct pt_error *err)
{
	const struct pt_zip_entry *e;
	const struct pt_dtype *dt;
	struct pt_storage *st;
	struct pt_tensor *t = NULL;
	char rel[400];
	int rc;

	if (!m->path || m->plen > 200 || memchr(m->path, '\0', m->plen) ||
	    memchr(m->path, '/', m->plen))
		return pt_fail(err, -EBADMSG, "'%s': no usable path_name", fqn);
	snprintf(rel, sizeof(rel), "%s/%.*s", dir, (int)m->plen, (const char *)m->path);
	e = pt_zip_find_rel(ck->zip, rel);
	if (!e)
		return pt_fail(err, -EBADMSG, "'%s': record '%s' is missing", fqn, rel);
	if (m->use_pickle)
		return p2_blob(ck, s, e, rel, out, err);
	if (!m->have_meta)
		return pt_fail(err, -ENOTSUP, "'%s': no tensor_meta (not a tensor?)", fqn);
	if (m->layout != 7)
		return pt_fail(err, -ENOTSUP, "'%s': layout %" PRIu64 " is not strided, not supported",
			       fqn, m->layout);
	dt = m->dtype < sizeof(p2_dtypes) / sizeof(*p2_dtypes) && p2_dtypes[m->dtype] ?
		     pt_dtype_from_torch(p2_dtypes[m->dtype]) : NULL;
	if (!dt)
		return pt_fail(err, -ENOTSUP, "'%s': dtype %" PRIu64 " (torch.export ScalarType) is not supported",
			       fqn, m->dtype);
	if (m->nstrides != m->rank)
		return pt_fail(err, -EBADMSG, "'%s': %u sizes but %u strides", fqn, m->rank, m->nstrides);
	st = pt__storage_find(ck, rel);
	if (!st) {
		st = pt__record_storage(ck, e, rel, (const char *)m->device,
					m->device ? m->dlen : 0, dt);
		if (!st)
			return pt_fail(err, -ENOMEM, "out of memory");
	}
	rc = pt__tensor_new(ck, dt, st, m->rank, m->sizes, m->strides, m->offset,
			    m->requires_grad, &t, err);
	if (rc) {
		pt_error_prefix(err, "'%s'", fqn);
		return rc;
	}
	*out = pt__tensor_value(ck, t);
	return *out ? 0 : pt_fail(err, -ENOMEM, "out of memory");
}

/* A weights or constants config: a dict FQN -> value in *@out. */
static int p2_config(struct pt_ckpt *ck, struct p2_state *s,
		     const struct pt_zip_entry *ce, const char *dir,
		     struct pt_value **out, struct pt_error *err)
{
	struct pt_js j;
	struct p2_meta m;
	const uint8_t *k;
	size_t kn, n = 0, cap = 0;
	struct {
		const uint8_t *name;
		size_t len;
		struct pt_value *v;
	} *items = NULL;
	uint8_t *buf = NULL;
	size_t len = 0, i;
	bool empty, more = true;
	char fqn[256];
	int rc;

	*out = NULL;
	if (ce->usize > ck->opts.limits.max_pickle_bytes)
		return pt_fail(err, -EFBIG, "%s: %" PRIu64 " bytes exceeds the limit of %" PRIu64,
			       ce->name, ce->usize, ck->opts.limits.max_pickle_bytes);
	rc = pt_zip_read(ck->zip, ce, &buf, &len, err);
	if (rc)
		return rc;
	if (!pt__own(ck, buf))
		return pt_fail(err, -ENOMEM, "out of memory");
	rc = pt__js_init(&j, buf, len, ce->name, err);
	if (rc)
		return rc;
	rc = pt__js_open(&j, '{', &empty);
	while (!rc && !empty && more) {
		rc = pt__js_key(&j, &k, &kn);
		if (rc)
			break;
		if (!key_is(k, kn, "config")) {
			rc = pt__js_skip(&j);
		} else {
			bool e2, m2 = true;

			rc = pt__js_open(&j, '{', &e2);
			while (!rc && !e2 && m2) {
				rc = pt__js_key(&j, &k, &kn);
				if (rc)
					break;
				if (n == cap) {
					size_t nc = cap ? cap * 2 : 16;
					void *q;

					if (n >= ck->opts.limits.max_values) {
						rc = pt_fail(err, -EFBIG, "%s: too many entries", ce->name);
						break;
					}
					q = realloc(items, nc * sizeof(*items));
					if (!q) {
						rc = pt_fail(err, -ENOMEM, "out of memory");
						break;
					}
					items = q;
					cap = nc;
				}
				items[n].name = k;
				items[n].len = kn;
				rc = p2_entry(&j, &m);
				if (!rc) {
					pt__js_printable(k, kn, fqn, sizeof(fqn));
					rc = p2_value(ck, s, dir, &m, fqn, &items[n].v, err);
					if (rc)
						pt_error_prefix(err, "%s", ce->name);
				}
				if (rc)
					break;
				n++;
				rc = pt__js_next(&j, '}', &m2);
			}
		}
		if (!rc)
			rc = pt__js_next(&j, '}', &more);
	}
	if (!rc)
		rc = pt__js_end(&j);
	if (!rc)
		rc = pt__js_keep(&j, ck);
	if (!rc) {
		*out = pt__value_dict(ck, n);
		if (!*out)
			rc = pt_fail(err, -ENOMEM, "out of memory");
		for (i = 0; !rc && i < n; i++)
			pt__value_dict_set(*out, i, items[i].name, items[i].len, items[i].v);
	}
	pt__js_free(&j);
	free(items);
	return rc;
}

/* ---- the archive ---- */

static int p2_probe(struct pt_ckpt *ck, const uint8_t *head, size_t n,
		     struct pt_error *err)
{
	int rc = pt__zip_probe(ck, head, n, err);

	if (rc <= 0)
		return rc;
	return !pt_zip_find_rel(ck->zip, "data.pkl") &&
	       (pt_zip_find_rel(ck->zip, "archive_format") ||
		pt_zip_find(ck->zip, "serialized_exported_program.json"));
}

static char *p2_small(struct pt_ckpt *ck, const struct pt_zip_entry *e)
{
	uint8_t *buf = NULL;
	size_t len = 0;
	struct pt_error ignore;

	if (!e || e->usize > 256 || pt_zip_read(ck->zip, e, &buf, &len, &ignore))
		return NULL;
	while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r' ||
			   buf[len - 1] == ' ' || buf[len - 1] == '\0'))
		buf[--len] = '\0';
	return pt__own(ck, (char *)buf);
}

static bool ends_with(const char *s, size_t n, const char *suf)
{
	size_t k = strlen(suf);

	return n >= k && memcmp(s + n - k, suf, k) == 0;
}

/* 2.1-2.5: root-level records, each blob a torch.save archive. */
static int p2_open_early(struct pt_ckpt *ck, struct p2_state *s,
			 struct pt_error *err)
{
	const struct pt_zip_entry *sd = pt_zip_find(ck->zip, "serialized_state_dict.pt");
	const struct pt_zip_entry *cs = pt_zip_find(ck->zip, "serialized_constants.pt");
	struct pt_value *root = NULL, *consts = NULL;
	int rc;

	ck->kind_name = "torch.export archive (2.1-2.5 layout, serialized_exported_program.json)";
	ck->version = p2_small(ck, pt_zip_find(ck->zip, "version"));
	if (!sd)
		return pt_fail(err, -EBADMSG, "torch.export archive without serialized_state_dict.pt");
	rc = p2_blob(ck, s, sd, "serialized_state_dict.pt", &root, err);
	if (rc)
		return rc;
	if (cs) {
		rc = p2_blob(ck, s, cs, "serialized_constants.pt", &consts, err);
		if (rc)
			return rc;
	}
	ck->root = root;
	if ((consts && pt__add_meta_dir(ck, "constants", consts, NULL)) ||
	    pt__add_meta_dir(ck, "extra", NULL, "extra_files"))
		return pt_fail(err, -EFBIG, "too many /.ptfs directories");
	pt_buf_puts(&ck->notes, "program: /.ptfs/records/serialized_exported_program.json\n");
	return 0;
}

/* One model of a pt2 archive: its weights and constants. */
struct p2_model {
	char name[128];
	struct pt_value *w, *c;
};

struct p2_models {
	struct p2_model *v;
	size_t n, cap;
	size_t n_aoti;                  /* data/aotinductor/ records */
};

/* The model named @name (@k bytes), added when new; NULL when out of
 * memory or past 4096 models (message in @err). */
static struct p2_model *p2_model(struct p2_models *m, const char *name,
				 size_t k, struct pt_error *err)
{
	size_t i;

	for (i = 0; i < m->n; i++)
		if (strlen(m->v[i].name) == k && memcmp(m->v[i].name, name, k) == 0)
			return &m->v[i];
	if (m->n == m->cap) {
		void *q;

		if (m->n >= 4096) {
			pt_fail(err, -EFBIG, "more than 4096 models");
			return NULL;
		}
		q = realloc(m->v, (m->cap ? m->cap * 2 : 8) * sizeof(*m->v));
		if (!q) {
			pt_fail(err, -ENOMEM, "out of memory");
			return NULL;
		}
		m->v = q;
		m->cap = m->cap ? m->cap * 2 : 8;
	}
	memset(&m->v[m->n], 0, sizeof(*m->v));
	memcpy(m->v[m->n].name, name, k);
	return &m->v[m->n++];
}

/* Every weights or constants config, and models/<m>.json, into @m. */
static int p2_scan(struct pt_ckpt *ck, struct p2_state *s,
		   struct p2_models *m, struct pt_error *err)
{
	const struct pt_zip_info *zi = pt_zip_info(ck->zip);
	size_t plen = strlen(zi->prefix) + (zi->prefix[0] ? 1 : 0);
	uint64_t r;
	int rc = 0;

	for (r = 0; r < zi->n_entries && !rc; r++) {
		const struct pt_zip_entry *e = pt_zip_entry_at(ck->zip, r);
		const char *rel = e->name + plen;
		size_t rl, base = 0, k;
		bool weights = false, consts = false;
		struct p2_model *md;

		if (e->name_len < plen ||
		    (plen && (strncmp(e->name, zi->prefix, plen - 1) != 0 ||
			      e->name[plen - 1] != '/')))
			continue;
		rl = e->name_len - plen;
		if (rl > 13 && strncmp(rel, "data/weights/", 13) == 0 &&
		    ends_with(rel, rl, "_weights_config.json") && !memchr(rel + 13, '/', rl - 13)) {
			weights = true;
			base = 13;
			k = rl - 13 - strlen("_weights_config.json");
		} else if (rl > 15 && strncmp(rel, "data/constants/", 15) == 0 &&
			   ends_with(rel, rl, "_constants_config.json") && !memchr(rel + 15, '/', rl - 15)) {
			consts = true;
			base = 15;
			k = rl - 15 - strlen("_constants_config.json");
		} else if (rl > 7 && strncmp(rel, "models/", 7) == 0 && ends_with(rel, rl, ".json") &&
			   !memchr(rel + 7, '/', rl - 7)) {
			base = 7;
			k = rl - 7 - 5;
		} else {
			if (rl > 17 && strncmp(rel, "data/aotinductor/", 17) == 0)
				m->n_aoti++;
			continue;
		}
		if (k >= sizeof(m->v->name) || k == 0)
			continue;
		md = p2_model(m, rel + base, k, err);
		if (!md)
			return err->code;
		if (weights && !md->w)
			rc = p2_config(ck, s, e, "data/weights", &md->w, err);
		else if (consts && !md->c)
			rc = p2_config(ck, s, e, "data/constants", &md->c, err);
	}
	return rc;
}

/* The root (weights) and /.ptfs/constants of models @m: the one model's
 * folders as they are, several models by name. */
static int p2_roots(struct pt_ckpt *ck, struct p2_models *m, bool *any_c,
		    struct pt_value **root, struct pt_value **croot,
		    struct pt_error *err)
{
	const size_t nm = m->n, w = sizeof(m->v->name);
	char *names;
	size_t i;

	*any_c = false;
	for (i = 0; i < nm; i++) {
		if (!m->v[i].w)
			m->v[i].w = pt__value_dict(ck, 0);
		if (!m->v[i].c)
			m->v[i].c = pt__value_dict(ck, 0);
		else
			*any_c = true;
		if (!m->v[i].w || !m->v[i].c)
			return pt_fail(err, -ENOMEM, "out of memory");
	}
	if (nm == 1) {
		*root = m->v[0].w;
		*croot = m->v[0].c;
		return 0;
	}
	names = calloc(nm + 1, w);
	if (!names || !pt__own(ck, names))
		return pt_fail(err, -ENOMEM, "out of memory");
	*root = pt__value_dict(ck, nm);
	*croot = pt__value_dict(ck, nm);
	if (!*root || !*croot)
		return pt_fail(err, -ENOMEM, "out of memory");
	for (i = 0; i < nm; i++) {
		char *p = names + i * w;

		memcpy(p, m->v[i].name, w);
		pt__value_dict_set(*root, i, (const uint8_t *)p, strlen(p), m->v[i].w);
		pt__value_dict_set(*croot, i, (const uint8_t *)p, strlen(p), m->v[i].c);
	}
	return 0;
}

/* The summary lines of models @m. */
static void p2_notes(struct pt_ckpt *ck, const struct p2_models *m)
{
	size_t i;

	pt_buf_printf(&ck->notes, "models: %zu", m->n);
	for (i = 0; i < m->n && i < 16; i++)
		pt_buf_printf(&ck->notes, "%s%s", i ? ", " : " (", m->v[i].name);
	pt_buf_puts(&ck->notes, m->n ? ")\n" : "\n");
	if (m->n_aoti)
		pt_buf_printf(&ck->notes,
			      "AOTInductor package: %zu compiled files in /.ptfs/aotinductor%s\n",
			      m->n_aoti, m->n ? "" : "; no weights stored outside the compiled code");
}

static int p2_open(struct pt_ckpt *ck, struct pt_error *err)
{
	struct p2_models m = { 0 };
	struct pt_value *root = NULL, *croot = NULL;
	struct p2_state *s;
	const char *fmt, *bo;
	bool any_c = false;
	int rc;

	s = calloc(1, sizeof(*s));
	if (!s)
		return pt_fail(err, -ENOMEM, "out of memory");
	ck->fmt_state = s;      /* p2_close() frees it, also on failure */
	if (!pt_zip_find_rel(ck->zip, "archive_format"))
		return p2_open_early(ck, s, err);
	fmt = p2_small(ck, pt_zip_find_rel(ck->zip, "archive_format"));
	if (!fmt || strcmp(fmt, "pt2") != 0)
		return pt_fail(err, -ENOTSUP, "archive_format record says '%.20s', not pt2",
			       fmt ? fmt : "?");
	ck->kind_name = "torch.export archive (.pt2)";
	ck->version = p2_small(ck, pt_zip_find_rel(ck->zip, ".data/version"));
	if (!ck->version)
		ck->version = p2_small(ck, pt_zip_find_rel(ck->zip, "version"));
	bo = p2_small(ck, pt_zip_find_rel(ck->zip, "byteorder"));
	if (bo && strcmp(bo, "big") == 0)
		ck->byteorder = '>';
	rc = p2_scan(ck, s, &m, err);
	if (!rc)
		rc = p2_roots(ck, &m, &any_c, &root, &croot, err);
	if (!rc) {
		ck->root = root;
		if ((any_c && pt__add_meta_dir(ck, "constants", croot, NULL)) ||
		    pt__add_meta_dir(ck, "models", NULL, "models") ||
		    pt__add_meta_dir(ck, "extra", NULL, "extra") ||
		    pt__add_meta_dir(ck, "aotinductor", NULL, "data/aotinductor"))
			rc = pt_fail(err, -EFBIG, "too many /.ptfs directories");
	}
	if (!rc)
		p2_notes(ck, &m);
	free(m.v);
	return rc;
}

static void p2_close(struct pt_ckpt *ck)
{
	struct p2_state *s = ck->fmt_state;
	int i;

	if (!s)
		return;
	for (i = 0; i < s->n_nested; i++) {
		pt_zip_close(s->nested[i].zip);
		pt_source_close(s->nested[i].src);
	}
	free(s);
	ck->fmt_state = NULL;
}

const struct pt_format pt_fmt_pt2 = {
	.name = "torch.export archive (.pt2)",
	.probe = p2_probe,
	.open = p2_open,
	.storage = p2_storage,
	.close = p2_close,
};
