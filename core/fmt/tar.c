/* SPDX-License-Identifier: MIT */
/*
 * tar.c -- the tar container of torch <= 0.1.9 (docs/FORMATS.md,
 * "Tar layout"), which torch.load still reads.
 *
 * An uncompressed tar with the members sys_info (a pickle), pickle (the
 * object; tensors and storages are persistent ids str(id), module classes
 * (class, source_file, source) tuples), tensors (count, then per tensor a
 * pickle (key, storage_id, type) and binary sizes/strides/offset) and
 * storages (count, then per storage a pickle (key, location, type), an
 * i64le element count and the bytes; finally a pickled list of views
 * (view_key, root_key, offset, numel)).
 *
 * libarchive walks the headers; since the archive is not compressed, each
 * member's data is a byte range of the file (checked against what
 * libarchive reads), so storages are served from the file.  Before
 * classification, a persistent id that names a tensor is rewritten into
 * torch._utils._rebuild_tensor(<storage pid>, offset, size, stride) and a
 * module pid into its class, so that torch.c sees the values torch.load
 * returns.
 *
 * libarchive is loaded on the first tar checkpoint (base/dl.h): with it
 * come libxml2, ICU, libstdc++ and five compressors, which no other
 * checkpoint needs.
 */
#include "ckpt/ckpt_i.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <archive.h>
#include <archive_entry.h>

#include "base/dl.h"

/* the libarchive functions used here */
#define LA_FNS(X) \
	X(archive_read_new) X(archive_read_support_format_tar) \
	X(archive_read_support_filter_none) X(archive_read_open2) \
	X(archive_read_next_header) X(archive_read_data) \
	X(archive_read_free) X(archive_filter_bytes) X(archive_error_string) \
	X(archive_set_error) X(archive_entry_pathname) \
	X(archive_entry_filetype) X(archive_entry_size)

PT_DL_DEFINE(la, LA_FNS, "libarchive.so.13",
	     "tar checkpoints need libarchive (Debian: libarchive13)");

#define archive_read_new la_fn.archive_read_new
#define archive_read_support_format_tar la_fn.archive_read_support_format_tar
#define archive_read_support_filter_none la_fn.archive_read_support_filter_none
#define archive_read_open2 la_fn.archive_read_open2
#define archive_read_next_header la_fn.archive_read_next_header
#define archive_read_data la_fn.archive_read_data
#define archive_read_free la_fn.archive_read_free
#define archive_filter_bytes la_fn.archive_filter_bytes
#define archive_error_string la_fn.archive_error_string
#define archive_set_error la_fn.archive_set_error
#define archive_entry_pathname la_fn.archive_entry_pathname
#define archive_entry_filetype la_fn.archive_entry_filetype
#define archive_entry_size la_fn.archive_entry_size

#define TAR_CHECK_BYTES 512
#define TAR_SMALL_WINDOW (64u << 10)

enum { M_SYS_INFO, M_PICKLE, M_TENSORS, M_STORAGES, M_COUNT };

static const char *const tar_members[M_COUNT] = {
	"sys_info", "pickle", "tensors", "storages",
};

struct tar_member {
	bool found;
	uint64_t off;                   /* data offset in the file */
	uint64_t size;                  /* data bytes */
};

/* A storage of the storages member, or a view of one. */
struct tar_st {
	char *key;                      /* decimal id (owned) */
	const struct pt_dtype *dtype;
	uint64_t off;                   /* file offset of the data */
	uint64_t nbytes;
	char *location;                 /* owned, may be NULL */
	UT_hash_handle hh;
};

struct tar_state {
	struct tar_member m[M_COUNT];
	struct tar_st *st;              /* by key */
};

/* ---- libarchive over a pt_source ---- */

struct tar_io {
	const struct pt_source *src;
	uint64_t pos;
	struct pt_error err;
	uint8_t buf[64 << 10];
};

static la_ssize_t tar_read_cb(struct archive *a, void *ctx, const void **out)
{
	struct tar_io *io = ctx;
	uint64_t left = io->src->size - io->pos;
	size_t n = left < sizeof(io->buf) ? (size_t)left : sizeof(io->buf);

	*out = io->buf;
	if (n == 0)
		return 0;
	if (pt_source_read(io->src, io->buf, n, io->pos, &io->err)) {
		archive_set_error(a, EIO, "%s", io->err.msg);
		return -1;
	}
	io->pos += n;
	return (la_ssize_t)n;
}

static la_int64_t tar_skip_cb(struct archive *a, void *ctx, la_int64_t req)
{
	struct tar_io *io = ctx;
	uint64_t left = io->src->size - io->pos;

	(void)a;
	if (req <= 0)
		return 0;
	if ((uint64_t)req > left)
		req = (la_int64_t)left;
	io->pos += (uint64_t)req;
	return req;
}

/*
 * Find the four members and where their data lies.  After a header is
 * read, the bytes libarchive has consumed end where the data starts; the
 * first bytes of each member are compared with the file there, so a
 * layout this reasoning does not cover fails instead of misreading.
 */
static int tar_scan(struct pt_ckpt *ck, struct tar_state *ts,
		    struct pt_error *err)
{
	struct archive *a;
	struct archive_entry *e;
	struct tar_io *io = NULL;
	uint8_t want[TAR_CHECK_BYTES], got[TAR_CHECK_BYTES];
	uint64_t n_entries = 0;
	int rc, r, i;

	rc = pt_dl_load(&la_dl, err);
	if (rc)
		return rc;
	a = archive_read_new();
	io = calloc(1, sizeof(*io));
	if (!a || !io) {
		rc = pt_fail(err, -ENOMEM, "out of memory");
		goto out;
	}
	io->src = ck->src;
	archive_read_support_format_tar(a);
	archive_read_support_filter_none(a);
	if (archive_read_open2(a, io, NULL, tar_read_cb, tar_skip_cb, NULL) !=
	    ARCHIVE_OK) {
		rc = pt_fail(err, -EBADMSG, "tar: %s", archive_error_string(a));
		goto out;
	}
	for (;;) {
		const char *name;
		la_int64_t pos, size;
		la_ssize_t k;
		size_t chk;

		r = archive_read_next_header(a, &e);
		if (r == ARCHIVE_EOF)
			break;
		if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
			rc = pt_fail(err, -EBADMSG, "tar: %s",
				     archive_error_string(a));
			goto out;
		}
		if (++n_entries > ck->opts.limits.max_records) {
			rc = pt_fail(err, -EFBIG, "tar: more than %" PRIu64 " members",
				     ck->opts.limits.max_records);
			goto out;
		}
		name = archive_entry_pathname(e);
		for (i = 0; i < M_COUNT; i++)
			if (name && strcmp(name, tar_members[i]) == 0)
				break;
		if (i == M_COUNT || archive_entry_filetype(e) != AE_IFREG)
			continue;
		pos = archive_filter_bytes(a, 0);
		size = archive_entry_size(e);
		if (pos < 0 || size < 0 || (uint64_t)size > ck->src->size ||
		    (uint64_t)pos > ck->src->size - (uint64_t)size) {
			rc = pt_fail(err, -EBADMSG,
				     "tar: member '%s' lies outside the file", name);
			goto out;
		}
		chk = (uint64_t)size < TAR_CHECK_BYTES ? (size_t)size : TAR_CHECK_BYTES;
		k = chk ? archive_read_data(a, got, chk) : 0;
		if (k != (la_ssize_t)chk) {
			rc = pt_fail(err, -EBADMSG, "tar: member '%s': %s", name,
				     k < 0 ? archive_error_string(a) : "short read");
			goto out;
		}
		rc = pt_source_read(ck->src, want, chk, (uint64_t)pos, err);
		if (rc)
			goto out;
		if (memcmp(want, got, chk) != 0) {
			rc = pt_fail(err, -ENOTSUP,
				     "tar: member '%s' is not stored as one byte range of the file",
				     name);
			goto out;
		}
		/* tarfile.getmember(): the last member of a name wins */
		ts->m[i].found = true;
		ts->m[i].off = (uint64_t)pos;
		ts->m[i].size = (uint64_t)size;
	}
out:
	if (a)
		archive_read_free(a);
	free(io);
	return rc;
}

/* ---- members ---- */

/* Decode the pickle at @off (inside a member ending at @end) into *@pk,
 * reading a small window first and the limit's worth when that is short.
 * *@buf holds the bytes the graph points into (caller frees). */
static int tar_pickle_at(struct pt_ckpt *ck, uint64_t off, uint64_t end,
			 struct pt_pickle **pk, uint8_t **buf, size_t *used,
			 const char *what, struct pt_error *err)
{
	uint64_t left = end - off, win;
	int rc;

	win = left < TAR_SMALL_WINDOW ? left : TAR_SMALL_WINDOW;
	for (;;) {
		rc = pt_source_dup(ck->src, off, (size_t)win, buf, err);
		if (rc)
			return rc;
		rc = pt_pickle_load(pk, *buf, (size_t)win, used,
				    &ck->opts.limits, err);
		if (rc == 0)
			return 0;
		free(*buf);
		*buf = NULL;
		if (win == left || win >= ck->opts.limits.max_pickle_bytes ||
		    win >= SIZE_MAX) {
			pt_error_prefix(err, "tar: %s at offset %" PRIu64, what, off);
			return rc;
		}
		pt_error_clear(err);
		win = left < ck->opts.limits.max_pickle_bytes ?
		      left : ck->opts.limits.max_pickle_bytes;
		if (win > SIZE_MAX)
			win = SIZE_MAX;
	}
}

/* A storage or tensor id as text: ints in decimal, str as is. */
static bool tar_key(const struct pt_value *v, char *tmp, size_t cap)
{
	if (v && v->kind == PT_V_INT) {
		snprintf(tmp, cap, "%" PRId64, v->u.i);
		return true;
	}
	return pt_value_text(v, tmp, cap);
}

static const struct pt_value *tar_item(const struct pt_value *t, size_t i)
{
	if (!t || (t->kind != PT_V_TUPLE && t->kind != PT_V_LIST) ||
	    i >= t->u.seq.n)
		return NULL;
	return t->u.seq.v[i];
}

static int tar_add_st(struct tar_state *ts, const char *key,
		      const struct pt_dtype *dt, uint64_t off,
		      uint64_t nbytes, const char *loc, struct pt_error *err)
{
	struct tar_st *s;

	HASH_FIND_STR(ts->st, key, s);
	if (s) {        /* a later entry replaces the object, as in torch */
		HASH_DEL(ts->st, s);
		free(s->key);
		free(s->location);
		free(s);
	}
	s = calloc(1, sizeof(*s));
	if (!s || !(s->key = strdup(key)) ||
	    (loc && !(s->location = strdup(loc)))) {
		if (s)
			free(s->key);
		free(s);
		return pt_fail(err, -ENOMEM, "out of memory");
	}
	s->dtype = dt;
	s->off = off;
	s->nbytes = nbytes;
	HASH_ADD_KEYPTR(hh, ts->st, s->key, strlen(s->key), s);
	return 0;
}

/* The count pickle at the start of a member. */
static int tar_count(struct pt_ckpt *ck, const struct tar_member *m,
		     const char *what, uint64_t *count, uint64_t *pos,
		     struct pt_error *err)
{
	struct pt_pickle *pk = NULL;
	uint8_t *buf = NULL;
	const struct pt_value *v;
	size_t used = 0;
	int rc;

	rc = tar_pickle_at(ck, m->off, m->off + m->size, &pk, &buf, &used,
			   what, err);
	if (rc)
		return rc;
	v = pt_pickle_root(pk);
	if (!v || v->kind != PT_V_INT || v->u.i < 0 ||
	    (uint64_t)v->u.i > m->size)
		rc = pt_fail(err, -EBADMSG, "tar: %s: count is not a plausible integer",
			     what);
	else
		*count = (uint64_t)v->u.i;
	*pos = m->off + used;
	pt_pickle_free(pk);
	free(buf);
	return rc;
}

static int tar_storages(struct pt_ckpt *ck, struct tar_state *ts,
			struct pt_error *err)
{
	const struct tar_member *m = &ts->m[M_STORAGES];
	uint64_t end = m->off + m->size, count = 0, pos = 0, i;
	struct pt_pickle *pk = NULL;
	uint8_t *buf = NULL;
	int rc;

	rc = tar_count(ck, m, "storages", &count, &pos, err);
	for (i = 0; rc == 0 && i < count; i++) {
		const struct pt_value *t, *cls;
		const struct pt_dtype *dt;
		char key[64], loc[64];
		uint8_t b8[8];
		uint64_t numel, nbytes, data;
		size_t used = 0;
		bool two;

		rc = tar_pickle_at(ck, pos, end, &pk, &buf, &used, "storages",
				   err);
		if (rc)
			break;
		t = pt_pickle_root(pk);
		/* (key, location, type); the first writer had no location */
		two = t && t->kind == PT_V_TUPLE && t->u.seq.n == 2;
		cls = tar_item(t, two ? 1 : 2);
		if (!tar_key(tar_item(t, 0), key, sizeof(key)) || !cls ||
		    cls->kind != PT_V_GLOBAL) {
			rc = pt_fail(err, -EBADMSG,
				     "tar: storages: entry %" PRIu64 " is not (key, location, storage type)",
				     i);
			break;
		}
		if (two || !tar_key(tar_item(t, 1), loc, sizeof(loc)))
			loc[0] = '\0';
		dt = pt_dtype_from_storage(cls->u.global.name);
		if (!dt) {
			rc = pt_fail(err, -ENOTSUP,
				     "tar: storage '%s': unknown storage type %s.%s",
				     key, cls->u.global.module, cls->u.global.name);
			break;
		}
		pos += used;
		pt_pickle_free(pk);
		pk = NULL;
		free(buf);
		buf = NULL;
		if (end - pos < 8) {
			rc = pt_fail(err, -EBADMSG,
				     "tar: storage '%s': element count past the end of the member", key);
			break;
		}
		rc = pt_source_read(ck->src, b8, 8, pos, err);
		if (rc)
			break;
		numel = pt_le64(b8);
		data = pos + 8;
		if (!pt_mul_u64(numel, dt->size, &nbytes) || nbytes > end - data) {
			rc = pt_fail(err, -EBADMSG,
				     "tar: storage '%s': %" PRId64 " elements at offset %" PRIu64 " run past the end of the member",
				     key, (int64_t)numel, data);
			break;
		}
		rc = tar_add_st(ts, key, dt, data, nbytes, loc[0] ? loc : NULL, err);
		pos = data + nbytes;
	}
	if (rc == 0 && pos < end) {
		/* the list of views: (view_key, root_key, offset, numel) */
		const struct pt_value *l;
		size_t used = 0;

		rc = tar_pickle_at(ck, pos, end, &pk, &buf, &used,
				   "storage views", err);
		l = rc ? NULL : pt_pickle_root(pk);
		if (rc == 0 && (!l || (l->kind != PT_V_LIST && l->kind != PT_V_TUPLE)))
			rc = pt_fail(err, -EBADMSG, "tar: storage views are not a list");
		for (i = 0; rc == 0 && i < l->u.seq.n; i++) {
			const struct pt_value *v = l->u.seq.v[i];
			const struct pt_value *o = tar_item(v, 2), *n = tar_item(v, 3);
			char vkey[64], rkey[64];
			struct tar_st *root;
			uint64_t lo, len, hi;

			if (!tar_key(tar_item(v, 0), vkey, sizeof(vkey)) ||
			    !tar_key(tar_item(v, 1), rkey, sizeof(rkey)) ||
			    !o || o->kind != PT_V_INT || o->u.i < 0 ||
			    !n || n->kind != PT_V_INT || n->u.i < 0) {
				rc = pt_fail(err, -EBADMSG,
					     "tar: storage view %" PRIu64 " is not (key, root, offset, numel)", i);
				break;
			}
			HASH_FIND_STR(ts->st, rkey, root);
			if (!root) {
				rc = pt_fail(err, -EBADMSG,
					     "tar: storage view '%s': root storage '%s' is missing",
					     vkey, rkey);
				break;
			}
			if (!pt_mul_u64((uint64_t)o->u.i, root->dtype->size, &lo) ||
			    !pt_mul_u64((uint64_t)n->u.i, root->dtype->size, &len) ||
			    !pt_add_u64(lo, len, &hi) || hi > root->nbytes) {
				rc = pt_fail(err, -EBADMSG,
					     "tar: storage view '%s' lies outside storage '%s'",
					     vkey, rkey);
				break;
			}
			rc = tar_add_st(ts, vkey, root->dtype, root->off + lo, len,
					root->location, err);
		}
	}
	pt_pickle_free(pk);
	free(buf);
	return rc;
}

/* ---- rewriting tensor pids ---- */

static struct pt_value *tar_node(struct pt_pickle *pk, uint8_t kind)
{
	struct pt_value *v = pt_pickle_alloc(pk, sizeof(*v));

	if (v) {
		memset(v, 0, sizeof(*v));
		v->kind = kind;
		v->id = UINT32_MAX;
	}
	return v;
}

static struct pt_value *tar_tuple(struct pt_pickle *pk, size_t n)
{
	struct pt_value *v = tar_node(pk, PT_V_TUPLE);

	if (!v)
		return NULL;
	v->u.seq.v = pt_pickle_alloc(pk, (n ? n : 1) * sizeof(*v->u.seq.v));
	if (!v->u.seq.v)
		return NULL;
	v->u.seq.n = n;
	v->u.seq.cap = n;
	return v;
}

static struct pt_value *tar_int(struct pt_pickle *pk, int64_t i)
{
	struct pt_value *v = tar_node(pk, PT_V_INT);

	if (v)
		v->u.i = i;
	return v;
}

/* A tensor of the tensors member, built as the call torch.c reads. */
struct tar_tensor {
	char *key;                      /* owned */
	struct pt_value *call;          /* _rebuild_tensor(...) node */
	UT_hash_handle hh;
};

static void tar_tensors_free(struct tar_tensor **h)
{
	struct tar_tensor *t, *tmp;

	HASH_ITER(hh, *h, t, tmp) {
		HASH_DEL(*h, t);
		free(t->key);
		free(t);
	}
}

/* Build torch._utils._rebuild_tensor(PERSID(skey), offset, size, stride)
 * in @pk's arena from the binary metadata at @pos. */
static int tar_tensor_call(struct pt_ckpt *ck, struct pt_pickle *pk,
			   const char *skey, uint64_t *pos, uint64_t end,
			   struct pt_value **out, struct pt_error *err)
{
	struct pt_value *fn, *args, *pid, *skv, *size, *stride;
	uint8_t hdr[8], *meta = NULL;
	uint64_t need;
	uint32_t ndim, d;
	size_t klen = strlen(skey);
	char *kcopy;
	int rc;

	if (end - *pos < 8)
		return pt_fail(err, -EBADMSG, "tar: tensors: metadata past the end of the member");
	rc = pt_source_read(ck->src, hdr, 8, *pos, err);
	if (rc)
		return rc;
	ndim = pt_le32(hdr);
	if (ndim > ck->opts.limits.max_rank)
		return pt_fail(err, -EFBIG, "tar: tensor of rank %u exceeds the limit of %u",
			       ndim, ck->opts.limits.max_rank);
	need = (uint64_t)ndim * 16 + 8;
	if (end - *pos - 8 < need)
		return pt_fail(err, -EBADMSG, "tar: tensors: metadata past the end of the member");
	meta = malloc((size_t)need);
	if (!meta)
		return pt_fail(err, -ENOMEM, "out of memory");
	rc = pt_source_read(ck->src, meta, (size_t)need, *pos + 8, err);
	if (rc)
		goto out;
	fn = tar_node(pk, PT_V_GLOBAL);
	args = tar_tuple(pk, 4);
	pid = tar_node(pk, PT_V_PERSID);
	skv = tar_node(pk, PT_V_STR);
	size = tar_tuple(pk, ndim);
	stride = tar_tuple(pk, ndim);
	kcopy = pt_pickle_alloc(pk, klen + 1);
	if (!fn || !args || !pid || !skv || !size || !stride || !kcopy) {
		rc = pt_fail(err, -ENOMEM, "out of memory");
		goto out;
	}
	fn->u.global.module = "torch._utils";
	fn->u.global.name = "_rebuild_tensor";
	memcpy(kcopy, skey, klen + 1);
	skv->u.s.p = (const uint8_t *)kcopy;
	skv->u.s.len = klen;
	skv->u.s.in_off = UINT64_MAX;
	pid->u.pid = skv;
	for (d = 0; d < ndim; d++) {
		size->u.seq.v[d] = tar_int(pk, (int64_t)pt_le64(meta + 8 * d));
		stride->u.seq.v[d] = tar_int(pk, (int64_t)pt_le64(meta + 8 * (ndim + d)));
		if (!size->u.seq.v[d] || !stride->u.seq.v[d]) {
			rc = pt_fail(err, -ENOMEM, "out of memory");
			goto out;
		}
	}
	args->u.seq.v[0] = pid;
	args->u.seq.v[1] = tar_int(pk, (int64_t)pt_le64(meta + 16 * (uint64_t)ndim));
	args->u.seq.v[2] = size;
	args->u.seq.v[3] = stride;
	if (!args->u.seq.v[1]) {
		rc = pt_fail(err, -ENOMEM, "out of memory");
		goto out;
	}
	*out = tar_node(pk, PT_V_CALL);
	if (!*out) {
		rc = pt_fail(err, -ENOMEM, "out of memory");
		goto out;
	}
	(*out)->u.call.callable = fn;
	(*out)->u.call.args = args;
	*pos += 8 + need;
out:
	free(meta);
	return rc;
}

static int tar_tensors(struct pt_ckpt *ck, struct tar_state *ts,
		       struct pt_pickle *objpk, struct tar_tensor **h,
		       struct pt_error *err)
{
	const struct tar_member *m = &ts->m[M_TENSORS];
	uint64_t end = m->off + m->size, count = 0, pos = 0, i;
	struct pt_pickle *pk = NULL;
	uint8_t *buf = NULL;
	int rc;

	if (!m->found)
		return 0;
	rc = tar_count(ck, m, "tensors", &count, &pos, err);
	for (i = 0; rc == 0 && i < count; i++) {
		const struct pt_value *t;
		struct tar_tensor *tt;
		char key[64], skey[64];
		size_t used = 0;

		rc = tar_pickle_at(ck, pos, end, &pk, &buf, &used, "tensors", err);
		if (rc)
			break;
		t = pt_pickle_root(pk);
		if (!tar_key(tar_item(t, 0), key, sizeof(key))) {
			rc = pt_fail(err, -EBADMSG,
				     "tar: tensors: entry %" PRIu64 " is not (key, storage id, type)", i);
			break;
		}
		if (!tar_key(tar_item(t, 1), skey, sizeof(skey))) {
			rc = pt_fail(err, -ENOTSUP, "tar: tensor '%s' has no storage", key);
			break;
		}
		pos += used;
		pt_pickle_free(pk);
		pk = NULL;
		free(buf);
		buf = NULL;
		tt = calloc(1, sizeof(*tt));
		if (!tt || !(tt->key = strdup(key))) {
			free(tt);
			rc = pt_fail(err, -ENOMEM, "out of memory");
			break;
		}
		HASH_ADD_KEYPTR(hh, *h, tt->key, strlen(tt->key), tt);
		rc = tar_tensor_call(ck, objpk, skey, &pos, end, &tt->call, err);
	}
	pt_pickle_free(pk);
	free(buf);
	return rc;
}

/* Rewrite the persistent ids of the object pickle: tensors into rebuild
 * calls, module classes into globals; storages stay for the hook. */
static int tar_rewrite(struct pt_ckpt *ck, struct tar_state *ts,
		       struct pt_pickle *objpk, struct tar_tensor *h,
		       struct pt_error *err)
{
	struct pt_value **refs = NULL;
	size_t n = 0, i;
	int rc;

	rc = pt__legacy_refs(ck->root, pt_pickle_count(objpk), &refs, &n, err);
	for (i = 0; rc == 0 && i < n; i++) {
		struct pt_value *v = refs[i];
		const struct pt_value *pid = v->u.pid, *cls;
		struct tar_tensor *tt;
		struct tar_st *s;
		char key[64];

		if (v->kind != PT_V_PERSID)
			continue;       /* _load_from_bytes: left alone */
		cls = tar_item(pid, 0);
		if (cls && cls->kind == PT_V_GLOBAL) {
			pt__legacy_to_global(v, cls);
			continue;
		}
		if (!tar_key(pid, key, sizeof(key))) {
			rc = pt_fail(err, -EBADMSG,
				     "tar: persistent id is neither an object id nor a module");
			break;
		}
		HASH_FIND_STR(h, key, tt);
		if (tt) {
			uint32_t id = v->id;

			*v = *tt->call;
			v->id = id;
			continue;
		}
		HASH_FIND_STR(ts->st, key, s);
		if (!s) {
			rc = pt_fail(err, -EBADMSG,
				     "tar: persistent id '%s' names no tensor or storage", key);
			break;
		}
	}
	free(refs);
	return rc;
}

/* ---- the format ---- */

static int tar_probe(struct pt_ckpt *ck, const uint8_t *head, size_t n,
		      struct pt_error *err)
{
	(void)ck;
	(void)err;
	return n >= 262 && memcmp(head + 257, "ustar", 5) == 0;
}

static int tar_load_pickle(struct pt_ckpt *ck, const struct tar_member *m,
			   const char *label, struct pt_value **root,
			   struct pt_error *err)
{
	uint8_t *buf = NULL;
	int rc;

	if (m->size > ck->opts.limits.max_pickle_bytes || m->size > SIZE_MAX)
		return pt_fail(err, -EFBIG,
			       "tar: member '%s' of %" PRIu64 " bytes exceeds the pickle limit",
			       label, m->size);
	rc = pt_source_dup(ck->src, m->off, (size_t)m->size, &buf, err);
	if (rc)
		return rc;
	return pt__load_pickle(ck, buf, (size_t)m->size, label, m->off, root,
			       NULL, err);
}

static int tar_open(struct pt_ckpt *ck, struct pt_error *err)
{
	struct tar_state *ts = calloc(1, sizeof(*ts));
	struct tar_tensor *h = NULL;
	struct pt_value *sys = NULL;
	struct pt_pickle *objpk;
	size_t k;
	int rc;

	if (!ts)
		return pt_fail(err, -ENOMEM, "out of memory");
	ck->fmt_state = ts;
	rc = tar_scan(ck, ts, err);
	if (rc)
		return rc;
	if (!ts->m[M_PICKLE].found || !ts->m[M_STORAGES].found)
		return pt_fail(err, -ENOTSUP,
			       "tar archive without 'pickle' and 'storages' members: not a torch.save checkpoint");
	if (ts->m[M_SYS_INFO].found) {
		rc = tar_load_pickle(ck, &ts->m[M_SYS_INFO], "sys_info", &sys, err);
		if (rc)
			return rc;
		for (k = 0; sys && sys->kind == PT_V_DICT && k + 1 < sys->u.dict.kv.n; k += 2) {
			const struct pt_value *key = sys->u.dict.kv.v[k];
			const struct pt_value *val = sys->u.dict.kv.v[k + 1];

			if (key->kind == PT_V_STR && key->u.s.len == 13 &&
			    memcmp(key->u.s.p, "little_endian", 13) == 0 &&
			    val->kind == PT_V_BOOL && !val->u.b)
				ck->byteorder = '>';
		}
	}
	rc = tar_load_pickle(ck, &ts->m[M_PICKLE], "pickle", &ck->root, err);
	if (rc)
		return rc;
	objpk = ck->pickles[ck->n_pickles - 1].pk;
	rc = tar_storages(ck, ts, err);
	if (rc == 0)
		rc = tar_tensors(ck, ts, objpk, &h, err);
	if (rc == 0)
		rc = tar_rewrite(ck, ts, objpk, h, err);
	tar_tensors_free(&h);
	return rc;
}

static int tar_storage(struct pt_ckpt *ck, const struct pt_value *pidv,
		       struct pt_storage **out, struct pt_error *err)
{
	struct tar_state *ts = ck->fmt_state;
	struct pt_storage *st;
	struct tar_st *s;
	char key[64];

	if (!tar_key(pidv->u.pid, key, sizeof(key)))
		return pt_fail(err, -EBADMSG, "tar: persistent id is not an object id");
	st = pt__storage_find(ck, key);
	if (st) {
		*out = st;
		return 0;
	}
	HASH_FIND_STR(ts->st, key, s);
	if (!s)
		return pt_fail(err, -EBADMSG, "tar: storage '%s' is missing", key);
	st = calloc(1, sizeof(*st));
	if (!st || !pt__own(ck, st))
		return pt_fail(err, -ENOMEM, "out of memory");
	st->key = pt__own(ck, strdup(key));
	st->location = s->location ? pt__own(ck, strdup(s->location)) : NULL;
	if (!st->key || (s->location && !st->location))
		return pt_fail(err, -ENOMEM, "out of memory");
	st->dtype = s->dtype;
	st->nbytes = s->nbytes;
	st->kind = PT_ST_FILE;
	st->file_off = s->off;
	st->id = ck->n_storages++;
	if (pt__storage_add(ck, st))
		return pt_fail(err, -ENOMEM, "out of memory");
	*out = st;
	return 0;
}

static void tar_close(struct pt_ckpt *ck)
{
	struct tar_state *ts = ck->fmt_state;
	struct tar_st *s, *tmp;

	if (!ts)
		return;
	HASH_ITER(hh, ts->st, s, tmp) {
		HASH_DEL(ts->st, s);
		free(s->key);
		free(s->location);
		free(s);
	}
	free(ts);
	ck->fmt_state = NULL;
}

const struct pt_format pt_fmt_tar = {
	.name = "torch.save tar (torch <= 0.1.9)",
	.probe = tar_probe,
	.open = tar_open,
	.storage = tar_storage,
	.close = tar_close,
};
