/* SPDX-License-Identifier: MIT */
/*
 * safetensors.c -- safetensors files (docs/FORMATS.md, "safetensors header").
 *
 * A file is [u64le N][N bytes of JSON][data].  The header is one object:
 * "name": {"dtype", "shape", "data_offsets": [begin, end]} per tensor, in
 * file order, plus an optional "__metadata__" object of strings.  There is
 * no pickle: open() checks every entry against the data section (offsets
 * inside it, end - begin == numel * itemsize, no two tensors overlapping,
 * known dtypes, shapes that do not overflow), then synthesizes the value
 * graph the tree expects -- a dict of str keys to tensor nodes that are
 * already classified, each over its own PT_ST_FILE storage (zero copy).
 * The header itself is /.ptfs/header.json, the metadata
 * /.ptfs/metadata.json.  The header is read with
 * the JSON scanner of base/json.h.
 */
#include "ckpt/ckpt_i.h"
#include "container/journal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The reference implementation's cap on the header (docs/FORMATS.md,
 * "safetensors header"). */
#define ST_MAX_HEADER 100000000u
/* ---- safetensors ---- */

static const struct {
	const char *st;         /* safetensors name */
	const char *torch;      /* dtype.c name, NULL: unsupported */
	unsigned bits;          /* bits per element */
} st_dtypes[] = {
	{ "BOOL", "bool", 8 },
	{ "U8", "uint8", 8 },
	{ "I8", "int8", 8 },
	{ "F8_E5M2", "float8_e5m2", 8 },
	{ "F8_E4M3", "float8_e4m3fn", 8 },
	{ "F8_E8M0", "float8_e8m0fnu", 8 },
	{ "F8_E4M3FNUZ", "float8_e4m3fnuz", 8 },
	{ "F8_E5M2FNUZ", "float8_e5m2fnuz", 8 },
	{ "I16", "int16", 16 },
	{ "U16", "uint16", 16 },
	{ "F16", "float16", 16 },
	{ "BF16", "bfloat16", 16 },
	{ "I32", "int32", 32 },
	{ "U32", "uint32", 32 },
	{ "F32", "float32", 32 },
	{ "C64", "complex64", 64 },
	{ "F64", "float64", 64 },
	{ "I64", "int64", 64 },
	{ "U64", "uint64", 64 },
	/* 4-bit floats: packed two per byte, served as opaque bytes */
	{ "F4", "float4_e2m1fn_x2", 4 },
	{ "F6_E2M3", NULL, 6 },
	{ "F6_E3M2", NULL, 6 },
};

struct st_ent {
	const uint8_t *name;            /* in the scanner's strings */
	size_t name_len;
	const struct pt_dtype *dt;
	unsigned bits;
	uint32_t rank;
	size_t shape_at;                /* first dim in st_parse.dims */
	uint64_t begin, end;            /* relative to the data section */
	uint64_t numel;
	uint64_t nbytes;
	UT_hash_handle hh;              /* duplicate names */
};

struct st_parse {
	struct st_ent *ents;
	size_t n, cap;
	int64_t *dims;
	size_t ndims, capdims;
	struct pt_buf meta;             /* __metadata__ re-serialized */
	size_t n_meta;
};

static const char *ent_name(const struct st_ent *e, char *buf, size_t cap)
{
	return pt__js_printable(e->name, e->name_len, buf, cap);
}

/* "__metadata__": {"k": "v", ...} or null, re-serialized as JSON. */
static int st_metadata(struct pt_js *j, struct st_parse *ps, uint64_t cap)
{
	const uint8_t *k, *v;
	size_t kn, vn;
	bool empty, more = true;
	int rc;

	if (pt__js_peek(j) == 'n')
		return pt__js_skip(j);  /* null */
	if (ps->meta.len)
		return pt__js_fail(j, "a second __metadata__");
	rc = pt__js_open(j, '{', &empty);
	if (rc)
		return rc;
	pt_buf_putc(&ps->meta, '{');
	while (!empty && more) {
		rc = pt__js_key(j, &k, &kn);
		if (rc)
			return rc;
		if (pt__js_peek(j) != '"')
			return pt__js_fail(j, "__metadata__ values must be strings");
		rc = pt__js_str(j, &v, &vn);
		if (rc)
			return rc;
		if (++ps->n_meta > cap)
			return pt_fail(j->err, -EFBIG,
				       "%s: more than %" PRIu64 " __metadata__ entries",
				       j->what, cap);
		pt_buf_puts(&ps->meta, ps->n_meta > 1 ? ", \"" : "\"");
		pt_json_str(&ps->meta, k, kn);
		pt_buf_puts(&ps->meta, "\": \"");
		pt_json_str(&ps->meta, v, vn);
		pt_buf_putc(&ps->meta, '"');
		rc = pt__js_next(j, '}', &more);
		if (rc)
			return rc;
	}
	pt_buf_puts(&ps->meta, "}\n");
	if (ps->meta.oom)
		return pt_fail(j->err, -ENOMEM, "out of memory");
	return 0;
}

static int st_dtype(struct pt_js *j, struct st_ent *e)
{
	const uint8_t *s;
	size_t n, i;
	char nb[100], db[100];
	int rc;

	rc = pt__js_str(j, &s, &n);
	if (rc)
		return rc;
	for (i = 0; i < sizeof(st_dtypes) / sizeof(st_dtypes[0]); i++) {
		if (strlen(st_dtypes[i].st) != n || memcmp(st_dtypes[i].st, s, n))
			continue;
		if (!st_dtypes[i].torch)
			return pt_fail(j->err, -ENOTSUP,
				       "tensor '%s': dtype %s is not supported",
				       ent_name(e, nb, sizeof(nb)), st_dtypes[i].st);
		e->dt = pt_dtype_from_torch(st_dtypes[i].torch);
		e->bits = st_dtypes[i].bits;
		if (!e->dt)
			return pt_fail(j->err, -ENOTSUP, "dtype %s: no torch type",
				       st_dtypes[i].st);
		return 0;
	}
	return pt_fail(j->err, -EBADMSG, "tensor '%s': unknown dtype '%s'",
		       ent_name(e, nb, sizeof(nb)),
		       pt__js_printable(s, n, db, sizeof(db)));
}

/* {"dtype": ..., "shape": [...], "data_offsets": [b, e]}; other members
 * are skipped, as the reference reader does. */
static int st_tensor(struct pt_js *j, struct st_parse *ps, struct st_ent *e,
		     const struct pt_limits *lim)
{
	const uint8_t *k;
	size_t kn;
	bool empty, more = true, sempty, smore;
	unsigned seen = 0;
	char nb[100];
	int rc;

	rc = pt__js_open(j, '{', &empty);
	if (rc)
		return rc;
	while (!empty && more) {
		unsigned bit = 0;

		rc = pt__js_key(j, &k, &kn);
		if (rc)
			return rc;
		if (kn == 5 && memcmp(k, "dtype", 5) == 0)
			bit = 1;
		else if (kn == 5 && memcmp(k, "shape", 5) == 0)
			bit = 2;
		else if (kn == 12 && memcmp(k, "data_offsets", 12) == 0)
			bit = 4;
		if (bit & seen)
			return pt__js_fail(j, "a tensor member appears twice");
		seen |= bit;
		if (bit == 1) {
			rc = st_dtype(j, e);
		} else if (bit == 2) {
			e->shape_at = ps->ndims;
			e->rank = 0;
			rc = pt__js_open(j, '[', &sempty);
			smore = true;
			while (!rc && !sempty && smore) {
				uint64_t d;

				if (e->rank == lim->max_rank)
					return pt_fail(j->err, -EFBIG,
						       "tensor '%s': more than %u dimensions",
						       ent_name(e, nb, sizeof(nb)),
						       lim->max_rank);
				rc = pt__js_uint(j, INT64_MAX, &d);
				if (rc)
					break;
				if (!pt_grow((void **)&ps->dims, &ps->capdims,
					      ps->ndims, sizeof(*ps->dims)))
					return pt_fail(j->err, -ENOMEM, "out of memory");
				ps->dims[ps->ndims++] = (int64_t)d;
				e->rank++;
				rc = pt__js_next(j, ']', &smore);
			}
		} else if (bit == 4) {
			rc = pt__js_open(j, '[', &sempty);
			if (!rc && sempty)
				rc = pt__js_fail(j, "data_offsets must be [begin, end]");
			if (!rc)
				rc = pt__js_uint(j, UINT64_MAX, &e->begin);
			if (!rc && pt__js_peek(j) != ',')
				rc = pt__js_fail(j, "data_offsets must be [begin, end]");
			if (!rc) {
				j->pos++;
				rc = pt__js_uint(j, UINT64_MAX, &e->end);
			}
			if (!rc && pt__js_peek(j) != ']')
				rc = pt__js_fail(j, "data_offsets must be [begin, end]");
			if (!rc)
				j->pos++;
		} else {
			rc = pt__js_skip(j);
		}
		if (rc)
			return rc;
		rc = pt__js_next(j, '}', &more);
		if (rc)
			return rc;
	}
	if (seen != 7)
		return pt_fail(j->err, -EBADMSG, "tensor '%s': no %s",
			       ent_name(e, nb, sizeof(nb)),
			       !(seen & 1) ? "dtype" : !(seen & 2) ? "shape" :
							       "data_offsets");
	return 0;
}

/* The whole header: fills ps->ents in file order. */
static int st_header(struct pt_js *j, struct st_parse *ps,
		     const struct pt_limits *lim)
{
	const uint8_t *k;
	size_t kn;
	bool empty, more = true;
	int rc;

	if (pt__js_peek(j) != '{' || j->pos != 0)
		return pt__js_fail(j, "does not start with '{'");
	rc = pt__js_open(j, '{', &empty);
	if (rc)
		return rc;
	while (!empty && more) {
		rc = pt__js_key(j, &k, &kn);
		if (rc)
			return rc;
		if (kn == 12 && memcmp(k, "__metadata__", 12) == 0) {
			rc = st_metadata(j, ps, lim->max_dir_entries);
		} else {
			struct st_ent *e;

			if (ps->n >= lim->max_dir_entries)
				return pt_fail(j->err, -EFBIG,
					       "%s: more than %" PRIu64 " tensors",
					       j->what, lim->max_dir_entries);
			if (!pt_grow((void **)&ps->ents, &ps->cap, ps->n,
				      sizeof(*ps->ents)))
				return pt_fail(j->err, -ENOMEM, "out of memory");
			e = &ps->ents[ps->n++];
			memset(e, 0, sizeof(*e));
			e->name = k;
			e->name_len = kn;
			rc = st_tensor(j, ps, e, lim);
		}
		if (rc)
			return rc;
		rc = pt__js_next(j, '}', &more);
		if (rc)
			return rc;
	}
	return pt__js_end(j);
}

static int cmp_begin(const void *a, const void *b)
{
	const struct st_ent *x = *(const struct st_ent *const *)a;
	const struct st_ent *y = *(const struct st_ent *const *)b;

	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	if (x->end != y->end)
		return x->end < y->end ? -1 : 1;
	return 0;
}

/*
 * Every entry against the data section of @data_len bytes: sizes from
 * dtype and shape, offsets inside, unique names, no overlaps.  Holes (bytes
 * no tensor uses) are legal for us but not for the reference reader: a
 * warning.
 */
static int st_check(struct pt_ckpt *ck, struct st_parse *ps,
		    uint64_t data_len, struct pt_error *err)
{
	struct st_ent *byname = NULL, *dup, **order = NULL;
	uint64_t prev_end = 0, holes = 0;
	const struct st_ent *prev = NULL;
	char nb[100], nb2[100];
	size_t i, r;
	int rc = 0;

	for (i = 0; i < ps->n; i++) {
		struct st_ent *e = &ps->ents[i];
		uint64_t numel = 1, bits;
		bool zero = false;

		for (r = 0; r < e->rank; r++) {
			uint64_t d = (uint64_t)ps->dims[e->shape_at + r];

			if (d == 0)
				zero = true;
			else if (!pt_mul_u64(numel, d, &numel)) {
				rc = pt_fail(err, -EBADMSG,
					     "tensor '%s': element count overflows",
					     ent_name(e, nb, sizeof(nb)));
				goto out;
			}
		}
		e->numel = zero ? 0 : numel;
		if (!pt_mul_u64(e->numel, e->bits, &bits)) {
			rc = pt_fail(err, -EBADMSG, "tensor '%s': byte count overflows",
				     ent_name(e, nb, sizeof(nb)));
			goto out;
		}
		if (bits % 8) {
			rc = pt_fail(err, -EBADMSG,
				     "tensor '%s': %" PRIu64 " elements of %u bits do not fill whole bytes",
				     ent_name(e, nb, sizeof(nb)), e->numel, e->bits);
			goto out;
		}
		e->nbytes = bits / 8;
		if (e->begin > e->end || e->end > data_len) {
			rc = pt_fail(err, -EBADMSG,
				     "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] outside the data section of %" PRIu64 " bytes",
				     ent_name(e, nb, sizeof(nb)), e->begin, e->end,
				     data_len);
			goto out;
		}
		if (e->end - e->begin != e->nbytes) {
			rc = pt_fail(err, -EBADMSG,
				     "tensor '%s': data_offsets span %" PRIu64 " bytes, dtype and shape need %" PRIu64,
				     ent_name(e, nb, sizeof(nb)), e->end - e->begin,
				     e->nbytes);
			goto out;
		}
		HASH_FIND(hh, byname, e->name, e->name_len, dup);
		if (dup) {
			rc = pt_fail(err, -EBADMSG, "tensor '%s' appears twice",
				     ent_name(e, nb, sizeof(nb)));
			goto out;
		}
		HASH_ADD_KEYPTR(hh, byname, e->name, e->name_len, e);
	}
	order = malloc((ps->n ? ps->n : 1) * sizeof(*order));
	if (!order) {
		rc = pt_fail(err, -ENOMEM, "out of memory");
		goto out;
	}
	for (i = 0; i < ps->n; i++)
		order[i] = &ps->ents[i];
	qsort(order, ps->n, sizeof(*order), cmp_begin);
	for (i = 0; i < ps->n; i++) {
		const struct st_ent *e = order[i];

		if (e->nbytes == 0)
			continue;
		if (prev && e->begin < prev_end) {
			rc = pt_fail(err, -EBADMSG,
				     "tensors '%s' and '%s' overlap (bytes %" PRIu64 "..%" PRIu64 " and %" PRIu64 "..%" PRIu64 " of the data)",
				     ent_name(prev, nb, sizeof(nb)),
				     ent_name(e, nb2, sizeof(nb2)), prev->begin,
				     prev_end, e->begin, e->end);
			goto out;
		}
		holes += e->begin - prev_end;
		prev = e;
		prev_end = e->end;
	}
	holes += data_len - prev_end;
	if (holes)
		pt__warn(ck, "safetensors: %" PRIu64 " bytes of the data section belong to no tensor",
			 holes);
out:
	HASH_CLEAR(hh, byname);
	free(order);
	return rc;
}

/* Tensors, storages and the dict, in header order. */
static int st_build(struct pt_ckpt *ck, struct st_parse *ps,
		    uint64_t data_off, struct pt_error *err)
{
	struct pt_tensor *ts;
	struct pt_storage *ss;
	struct pt_value *root;
	int64_t *dims;
	char *keys;
	size_t i, at = 0, kat = 0;

	root = pt__value_dict(ck, ps->n);
	ts = calloc(ps->n + 1, sizeof(*ts));
	if (!root || !ts || !pt__own(ck, ts))
		return pt_fail(err, -ENOMEM, "out of memory");
	ss = calloc(ps->n + 1, sizeof(*ss));
	if (!ss || !pt__own(ck, ss))
		return pt_fail(err, -ENOMEM, "out of memory");
	/* shape and stride of every tensor */
	dims = calloc(2 * ps->ndims + 1, sizeof(*dims));
	if (!dims || !pt__own(ck, dims))
		return pt_fail(err, -ENOMEM, "out of memory");
	/* storage keys: the tensor's index, "0" ... */
	keys = calloc(ps->n + 1, 21);
	if (!keys || !pt__own(ck, keys))
		return pt_fail(err, -ENOMEM, "out of memory");
	for (i = 0; i < ps->n; i++) {
		const struct st_ent *e = &ps->ents[i];
		struct pt_storage *st = &ss[i];
		struct pt_tensor *t = &ts[i];

		st->key = keys + kat;
		kat += (size_t)snprintf(keys + kat, 21, "%zu", i) + 1;
		st->dtype = e->dt;
		st->nbytes = e->nbytes;
		st->kind = PT_ST_FILE;
		st->writable = true;
		st->file_off = data_off + e->begin;
		st->id = ck->n_storages++;
		if (pt__storage_add(ck, st))
			return pt_fail(err, -ENOMEM, "out of memory");

		t->dtype = e->dt;
		t->st = st;
		t->rank = e->rank;
		t->shape = dims + at;
		t->stride = dims + at + e->rank;
		at += 2 * (size_t)e->rank;
		memcpy(t->shape, ps->dims + e->shape_at, e->rank * sizeof(int64_t));
		/* numel was checked: the strides fit */
		pt__dense_strides(e->rank, t->shape, false, t->stride);
		t->numel = e->numel;
		t->nbytes = e->nbytes;
		t->byte_hi = e->nbytes;
		t->contiguous = true;
		t->kind = PT_TK_TENSOR;
		t->byteorder = e->bits <= 8 ? '|' : '<';
		t->dtype_name = e->dt->name;
		if (e->bits == 4)
			t->note = "safetensors F4: two 4-bit values per byte; the shape counts values";
		ck->n_tensors++;
		ck->tensor_bytes += t->nbytes;
		pt__value_dict_set_tensor(root, i, e->name, e->name_len, t);
	}
	ck->root = root;
	return 0;
}

static int st_probe(struct pt_ckpt *ck, const uint8_t *head, size_t n,
		     struct pt_error *err)
{
	uint64_t hl;

	(void)ck;
	(void)err;
	if (n < 9 || head[8] != '{')
		return false;
	hl = pt_le64(head);
	return hl >= 2 && hl <= ST_MAX_HEADER;
}

static int st_open(struct pt_ckpt *ck, struct pt_error *err)
{
	const struct pt_limits *lim = &ck->opts.limits;
	struct st_parse ps;
	struct pt_js j;
	uint8_t lenb[8], *hb = NULL;
	uint64_t hl, data_len;
	int rc;

	memset(&ps, 0, sizeof(ps));
	memset(&j, 0, sizeof(j));
	pt_buf_init(&ps.meta);
	rc = pt_source_read(ck->src, lenb, 8, 0, err);
	if (rc)
		return rc;
	hl = pt_le64(lenb);
	if (hl > ST_MAX_HEADER)
		return pt_fail(err, -EFBIG,
			       "safetensors header of %" PRIu64 " bytes exceeds the limit of %u",
			       hl, ST_MAX_HEADER);
	if (hl > ck->src->size - 8)
		return pt_fail(err, -EBADMSG,
			       "safetensors header of %" PRIu64 " bytes runs past the end of the file (%" PRIu64 " bytes)",
			       hl, ck->src->size);
	data_len = ck->src->size - 8 - hl;
	rc = pt_source_dup(ck->src, 8, (size_t)hl, &hb, err);
	if (rc)
		return rc;
	/* the header as stored is /.ptfs/header.json; ck owns it now */
	rc = pt__add_meta_file(ck, "header.json", hb, (size_t)hl);
	if (rc)
		return pt_fail(err, rc, "out of memory");
	rc = pt__js_init(&j, hb, (size_t)hl, "safetensors header", err);
	if (rc)
		goto out;
	rc = st_header(&j, &ps, lim);
	if (rc)
		goto out;
	rc = pt__js_keep(&j, ck);
	if (rc)
		goto out;
	rc = st_check(ck, &ps, data_len, err);
	if (rc)
		goto out;
	rc = st_build(ck, &ps, 8 + hl, err);
	if (rc)
		goto out;
	if (ps.meta.len) {
		size_t len = 0;
		char *m = pt_buf_take(&ps.meta, &len);

		rc = m ? pt__add_meta_file(ck, "metadata.json", m, len) : -ENOMEM;
		if (rc) {
			rc = pt_fail(err, rc, "out of memory");
			goto out;
		}
	}
	pt_buf_printf(&ck->notes, "safetensors header: %" PRIu64 " bytes, %zu tensors, %zu metadata entries\n",
		      hl, ps.n, ps.n_meta);
out:
	pt__js_free(&j);
	pt_buf_free(&ps.meta);
	free(ps.ents);
	free(ps.dims);
	return rc;
}

/* struct pt_format.commit: no checksums in the container, so a commit is
 * each storage's changed bytes where the old ones were: in a clone, in
 * place behind the journal, or in a full copy, as -o commit says
 * (container/journal.h; every way through container/replace.c: the real
 * file behind symlinks, owner then mode then xattrs, the real errno). */
static int st_commit(struct pt_ckpt *ck, const struct pt_commit *c, size_t n,
		     struct pt_error *err)
{
	enum pt_commit_way used = PT_COMMIT_REWRITE;
	struct pt_patch *p = NULL;
	void *subs = NULL;
	uint64_t bytes = 0;
	size_t np = 0;
	int rc;

	rc = pt_source_check(ck->src, PT_CHECK_NAME, err);
	if (rc)
		return rc;
	if (pt__commit_plan(c, n, &p, &subs, &np, &bytes) != 0)
		rc = pt_fail(err, -ENOMEM, "out of memory");
	else
		rc = pt__commit_patch(ck, p, np, false, &used, err);
	rc = pt__commit_end(ck, rc, used,
			    used == PT_COMMIT_REWRITE ? ck->src->size : bytes, err);
	free(p);
	free(subs);
	return rc;
}

const struct pt_format pt_fmt_safetensors = {
	.name = "safetensors",
	.probe = st_probe,
	.open = st_open,
	.storage = NULL,
	.close = NULL,
	.commit = st_commit,
	.restructure = pt__st_restructure,
	.stage = pt__st_stage,
};
