/* SPDX-License-Identifier: MIT */
/*
 * dcp.c -- distributed checkpoints (torch.distributed.checkpoint, and
 * 1.13's prototype torch.distributed._shard.checkpoint): a directory
 * holding `.metadata` and `*.distcp` files (docs/FORMATS.md,
 * "Distributed checkpoint files").
 *
 * `.metadata` is a plain pickle of a Metadata dataclass.  The safe pickle
 * machine gives its inert graph, and this file reads three things from it
 * (iteratively, never recursing): state_dict_metadata {fqn:
 * TensorStorageMetadata | BytesStorageMetadata}, storage_data
 * {MetadataIndex(fqn, offset): _StorageInfo(relative_path, offset,
 * length)}, and for each tensor its TensorProperties (dtype) and chunks
 * (ChunkStorageMetadata(offsets, sizes)).  Classes are recognised by their
 * qualified name under a torch.distributed module; nothing is imported.
 *
 * The mount shows one flat dict at the root, keyed by the FQNs as stored
 * (dotted names stay single names, LAYOUT.md "Names"):
 *
 *   - a tensor is ONE file, the C-order bytes of the global tensor.  Each
 *     chunk's bytes are a torch.save zip inside a .distcp file (or, from
 *     writers that store raw bytes, exactly the chunk's bytes); the zip is
 *     indexed in place (pt_source_sub) and its one tensor must be the
 *     chunk, C-contiguous, uncompressed.  A tensor held by one chunk is
 *     served zero-copy from its file (struct pt_storage.home); a tensor in
 *     several chunks is a PT_ST_CHUNKS storage that torch.c assembles run
 *     by run.  Before that, the chunks must tile the tensor exactly.
 *   - a non-tensor value (BytesStorageMetadata) is the torch.save blob of
 *     the object, or raw bytes for io.BytesIO values: a blob whose pickle
 *     is a single None, bool, int, float, str or bytes shows that value;
 *     anything else shows the blob's bytes.
 *
 * Each .distcp file is opened once, as a bare byte source
 * (pt__ckpt_open_child, bare), and kept until close; over a remote source
 * all of them open together first, in parallel (dcp_open_ahead).  DCP mounts are read-only
 * (pt_ckpt_writable() is false for every format but torch.save zips).
 */
#include "ckpt/ckpt_i.h"
#include "base/text.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define DCP_MAX_FILES 65536             /* distinct .distcp files */
#define DCP_MAX_CHUNKS (1u << 20)       /* chunks of all tensors */
#define DCP_MAX_TENSOR_CHUNKS 65536     /* chunks of one tensor */
#define DCP_MAX_OVERLAP_TESTS 100000000ull /* box pairs compared, in all */
#define DCP_MAX_BLOB_PICKLE (1u << 20)  /* data.pkl of one chunk or value */
#define DCP_MAX_INLINE (16u << 20)      /* raw value bytes kept in memory */
#define DCP_MAX_INLINE_ALL (256u << 20) /* ... for all values together */
#define DCP_ITEM_HEAD (68u << 10)       /* what a blob's ZIP reader reads
					 * at its start (a 64 KiB window
					 * from its first record on) */
#define DCP_ITEM_TAIL ((64u << 10) + 22) /* ... at its end: where the
					 * end record is looked for (22
					 * bytes and a comment of up to
					 * 64 KiB) */

struct dcp_file {                       /* one .distcp file */
	char *name;                     /* relative_path, NUL-terminated */
	struct pt_ckpt *ck;             /* bare child (pt__ckpt_open_child) */
	UT_hash_handle hh;
};

struct dcp_sd {                         /* one storage_data item */
	uint8_t *key;                   /* fqn + offsets, see sd_key() */
	size_t key_len;
	const struct pt_value *path;    /* relative_path (a str) */
	uint64_t off;                   /* offset in the file */
	uint64_t len;                   /* length in the file */
	UT_hash_handle hh;
};

struct dcp_state {
	struct dcp_file *files;         /* by name */
	size_t n_files;
	struct dcp_file *ready;         /* opened ahead (dcp_open_ahead),
					 * not used yet */
	struct dcp_sd *sd;              /* by key */
	uint64_t n_chunks;              /* chunks accepted so far */
	uint64_t n_listed;              /* chunks listed (also empty ones) */
	uint64_t overlap_tests;         /* budget for the tiling check */
	uint64_t inline_bytes;          /* raw value bytes read */
	char *dir;                      /* the directory, for file paths */
};

/* ---- reading the value graph ---- */

static bool is_str_n(const struct pt_value *v, const char *s)
{
	size_t n = strlen(s);

	return v && v->kind == PT_V_STR && v->u.s.len == n &&
	       memcmp(v->u.s.p, s, n) == 0;
}

/* An object of the class @name (qualname) from a torch.distributed
 * module: NEWOBJ/REDUCE of that global. */
static bool is_class(const struct pt_value *v, const char *name)
{
	const struct pt_value *c;

	if (!v || (v->kind != PT_V_OBJ && v->kind != PT_V_CALL))
		return false;
	c = v->u.call.callable;
	return c && c->kind == PT_V_GLOBAL &&
	       strncmp(c->u.global.module, "torch.distributed.", 18) == 0 &&
	       strcmp(c->u.global.name, name) == 0;
}

static const char *class_name(const struct pt_value *v)
{
	const struct pt_value *c;

	if (!v || (v->kind != PT_V_OBJ && v->kind != PT_V_CALL))
		return "(not an object)";
	c = v->u.call.callable;
	return c && c->kind == PT_V_GLOBAL ? c->u.global.name : "(unknown)";
}

/* @d[@key] for a dict with str keys (the last item wins, as in Python). */
static const struct pt_value *dget(const struct pt_value *d, const char *key)
{
	const struct pt_value *found = NULL;
	size_t i;

	if (!d || d->kind != PT_V_DICT)
		return NULL;
	for (i = 0; i + 1 < d->u.dict.kv.n; i += 2)
		if (is_str_n(d->u.dict.kv.v[i], key))
			found = d->u.dict.kv.v[i + 1];
	return found;
}

/* Field @key of a dataclass instance: its BUILD state is a dict, or a
 * (dict or None, slots dict) pair. */
static const struct pt_value *field(const struct pt_value *obj,
				    const char *key)
{
	const struct pt_value *st, *f = NULL;

	if (!obj || (obj->kind != PT_V_OBJ && obj->kind != PT_V_CALL))
		return NULL;
	st = pt_call_state(obj);
	if (st && st->kind == PT_V_DICT)
		return dget(st, key);
	if (st && st->kind == PT_V_TUPLE && st->u.seq.n == 2) {
		f = dget(st->u.seq.v[1], key);
		if (!f)
			f = dget(st->u.seq.v[0], key);
	}
	return f;
}

static bool as_u64(const struct pt_value *v, uint64_t *out)
{
	if (!v || v->kind != PT_V_INT || v->u.i < 0)
		return false;
	*out = (uint64_t)v->u.i;
	return true;
}

/* A torch.Size (REDUCE of torch.Size on a tuple), or a tuple or list, of
 * at most @max non-negative ints into @out; the count in *@n. */
static bool int_seq(const struct pt_value *v, int64_t *out, uint32_t max,
		    uint32_t *n)
{
	size_t i;

	if (v && (v->kind == PT_V_CALL || v->kind == PT_V_OBJ) &&
	    pt__is_global(v->u.call.callable, "torch", "Size")) {
		const struct pt_value *a = v->u.call.args;
		v = a && a->u.seq.n == 1 ? a->u.seq.v[0] : NULL;
	}
	if (!v || (v->kind != PT_V_TUPLE && v->kind != PT_V_LIST) ||
	    v->u.seq.n > max)
		return false;
	for (i = 0; i < v->u.seq.n; i++) {
		const struct pt_value *e = v->u.seq.v[i];

		if (!e || e->kind != PT_V_INT || e->u.i < 0)
			return false;
		out[i] = e->u.i;
	}
	*n = (uint32_t)v->u.seq.n;
	return true;
}

static const char *pname(const struct pt_value *s, char *buf, size_t cap)
{
	if (!s || s->kind != PT_V_STR)
		return "?";
	return pt__js_printable(s->u.s.p, s->u.s.len, buf, cap);
}

/* ---- storage_data ---- */

/*
 * The lookup key of MetadataIndex(fqn, offset): u64 length of the fqn,
 * its bytes, then 'N' for offset None, or 'S', the rank and each offset
 * as u64.  MetadataIndex hashes and compares (fqn, offset) only; index is
 * a hint.  *@out is malloc()ed.
 */
static int sd_key(const uint8_t *fqn, size_t fqn_len, const int64_t *offs,
		  uint32_t rank, bool none, uint8_t **out, size_t *len)
{
	size_t n = 8 + fqn_len + 1 + (none ? 0 : 4 + 8 * (size_t)rank), at;
	uint8_t *k = malloc(n);
	uint64_t fl = fqn_len;
	uint32_t i;

	*out = NULL;
	if (!k)
		return -ENOMEM;
	memcpy(k, &fl, 8);
	memcpy(k + 8, fqn, fqn_len);
	at = 8 + fqn_len;
	k[at++] = none ? 'N' : 'S';
	if (!none) {
		memcpy(k + at, &rank, 4);
		at += 4;
		for (i = 0; i < rank; i++, at += 8)
			memcpy(k + at, &offs[i], 8);
	}
	*out = k;
	*len = n;
	return 0;
}

static void sd_free(struct dcp_sd **map)
{
	struct dcp_sd *e, *tmp;

	HASH_ITER(hh, *map, e, tmp) {
		HASH_DEL(*map, e);
		free(e->key);
		free(e);
	}
}

static int parse_storage_data(struct pt_ckpt *ck, struct dcp_state *s,
			      const struct pt_value *sd, struct pt_error *err)
{
	const uint32_t max_rank = ck->opts.limits.max_rank;
	int64_t *offs;
	size_t i;
	int rc = 0;

	if (!sd || sd->kind != PT_V_DICT)
		return pt_fail(err, -EBADMSG, "storage_data is not a dict");
	offs = calloc(max_rank + 1, sizeof(*offs));
	if (!offs)
		return pt_fail(err, -ENOMEM, "out of memory");
	for (i = 0; i + 1 < sd->u.dict.kv.n && !rc; i += 2) {
		const struct pt_value *mi = sd->u.dict.kv.v[i];
		const struct pt_value *si = sd->u.dict.kv.v[i + 1];
		const struct pt_value *fqn = field(mi, "fqn");
		const struct pt_value *off = field(mi, "offset");
		const struct pt_value *path = field(si, "relative_path");
		const struct pt_value *td = field(si, "transform_descriptors");
		struct dcp_sd *e, *old;
		uint32_t rank = 0;
		bool none = !off || off->kind == PT_V_NONE;
		char nb[100];

		if (!is_class(mi, "MetadataIndex") || !fqn ||
		    fqn->kind != PT_V_STR) {
			rc = pt_fail(err, -EBADMSG,
				     "storage_data: item %zu: key is not a MetadataIndex(fqn, ...)",
				     i / 2);
			break;
		}
		if (!none && !int_seq(off, offs, max_rank, &rank)) {
			rc = pt_fail(err, -EBADMSG,
				     "storage_data: '%s': offset is not a torch.Size",
				     pname(fqn, nb, sizeof(nb)));
			break;
		}
		if (!is_class(si, "_StorageInfo") || !path ||
		    path->kind != PT_V_STR) {
			rc = pt_fail(err, -EBADMSG,
				     "storage_data: '%s': value is not a _StorageInfo(relative_path, offset, length)",
				     pname(fqn, nb, sizeof(nb)));
			break;
		}
		if (td && td->kind != PT_V_NONE &&
		    !((td->kind == PT_V_LIST || td->kind == PT_V_TUPLE) &&
		      td->u.seq.n == 0)) {
			rc = pt_fail(err, -ENOTSUP,
				     "storage_data: '%s': stream transforms (transform_descriptors) are not supported",
				     pname(fqn, nb, sizeof(nb)));
			break;
		}
		e = calloc(1, sizeof(*e));
		if (!e) {
			rc = pt_fail(err, -ENOMEM, "out of memory");
			break;
		}
		e->path = path;
		if (!as_u64(field(si, "offset"), &e->off) ||
		    !as_u64(field(si, "length"), &e->len)) {
			free(e);
			rc = pt_fail(err, -EBADMSG,
				     "storage_data: '%s': offset or length is not a non-negative integer",
				     pname(fqn, nb, sizeof(nb)));
			break;
		}
		if (sd_key(fqn->u.s.p, fqn->u.s.len, offs, rank, none, &e->key,
			   &e->key_len)) {
			free(e);
			rc = pt_fail(err, -ENOMEM, "out of memory");
			break;
		}
		HASH_FIND(hh, s->sd, e->key, e->key_len, old);
		if (old) {              /* SETITEMS again: the later wins */
			HASH_DEL(s->sd, old);
			free(old->key);
			free(old);
		}
		HASH_ADD_KEYPTR(hh, s->sd, e->key, e->key_len, e);
	}
	free(offs);
	return rc;
}

static const struct dcp_sd *sd_find(const struct dcp_state *s,
				    const struct pt_value *fqn,
				    const int64_t *offs, uint32_t rank,
				    bool none, int *rc)
{
	struct dcp_sd *e = NULL;
	uint8_t *k;
	size_t kn;

	*rc = sd_key(fqn->u.s.p, fqn->u.s.len, offs, rank, none, &k, &kn);
	if (*rc)
		return NULL;
	HASH_FIND(hh, s->sd, k, kn, e);
	free(k);
	return e;
}

/* ---- .distcp files ---- */

/* A plain file name: no '/', NUL, "." or "..", not empty. */
static bool plain_name(const uint8_t *p, size_t n)
{
	return n > 0 && n < 1024 && !memchr(p, '/', n) && !memchr(p, '\0', n) &&
	       !(n == 1 && p[0] == '.') &&
	       !(n == 2 && p[0] == '.' && p[1] == '.');
}

/* The file an item lives in, opened on first use. */
static int dcp_file(struct pt_ckpt *ck, struct dcp_state *s,
		    const struct pt_value *name, struct dcp_file **out,
		    struct pt_error *err)
{
	const uint8_t *p = name->u.s.p;
	size_t n = name->u.s.len;
	struct pt_source *src;
	struct dcp_file *f;
	char nb[100];
	int rc;

	HASH_FIND(hh, s->files, p, n, f);
	if (f) {
		*out = f;
		return 0;
	}
	if (!plain_name(p, n))
		return pt_fail(err, -EBADMSG,
			       "storage file '%s' is not a plain file name in the checkpoint's directory",
			       pname(name, nb, sizeof(nb)));
	if (s->n_files >= DCP_MAX_FILES)
		return pt_fail(err, -EFBIG, "more than %u .distcp files",
			       DCP_MAX_FILES);
	HASH_FIND(hh, s->ready, p, n, f);
	if (f) {
		HASH_DEL(s->ready, f);
		HASH_ADD_KEYPTR(hh, s->files, f->name, n, f);
		s->n_files++;
		*out = f;
		return 0;
	}
	f = calloc(1, sizeof(*f));
	if (!f)
		return pt_fail(err, -ENOMEM, "out of memory");
	f->name = strndup((const char *)p, n);
	if (!f->name) {
		free(f);
		return pt_fail(err, -ENOMEM, "out of memory");
	}
	rc = pt_source_open_sibling(ck->src, f->name, &src, err);
	if (rc)
		pt_error_prefix(err, "%s/%s", s->dir, f->name);
	else
		rc = pt__ckpt_open_child(ck, src, false, &f->ck, err);
	if (rc) {
		free(f->name);
		free(f);
		return rc;
	}
	HASH_ADD_KEYPTR(hh, s->files, f->name, n, f);
	s->n_files++;
	*out = f;
	return 0;
}

static void files_free(struct dcp_file **files)
{
	struct dcp_file *f, *tmp;

	HASH_ITER(hh, *files, f, tmp) {
		HASH_DEL(*files, f);
		pt__ckpt_free(f->ck);
		free(f->name);
		free(f);
	}
}

/* Into s->ready, not opened yet: every file storage_data names (plain
 * names only, at most DCP_MAX_FILES), in the order first named. */
static int ahead_names(struct dcp_state *s, size_t *n, struct pt_error *err)
{
	struct dcp_sd *e, *tmp;
	struct dcp_file *f;

	*n = 0;
	HASH_ITER(hh, s->sd, e, tmp) {
		const uint8_t *p = e->path->u.s.p;
		size_t len = e->path->u.s.len;

		HASH_FIND(hh, s->ready, p, len, f);
		if (f || !plain_name(p, len))
			continue;
		if (*n >= DCP_MAX_FILES)
			break;
		f = calloc(1, sizeof(*f));
		if (f)
			f->name = strndup((const char *)p, len);
		if (!f || !f->name) {
			free(f);
			return pt_fail(err, -ENOMEM, "out of memory");
		}
		HASH_ADD_KEYPTR(hh, s->ready, f->name, len, f);
		(*n)++;
	}
	return 0;
}

/*
 * The bytes dcp_entries() reads of each item, asked for now, all at once
 * (pt_source_prefetch: a remote source starts fetching them): the first
 * and the last bytes of its range that blob_open() reads (DCP_ITEM_HEAD,
 * DCP_ITEM_TAIL), where a torch.save blob's data.pkl and its ZIP end
 * records lie.  Read one item after the other, each would cost its own
 * round trips; the bytes between them are left alone.
 */
static void prefetch_items(const struct dcp_state *s)
{
	const struct dcp_sd *e, *tmp;
	const struct dcp_file *f;

	HASH_ITER(hh, s->sd, e, tmp) {
		uint64_t head = e->len < DCP_ITEM_HEAD ? e->len : DCP_ITEM_HEAD;
		uint64_t tail = e->len < DCP_ITEM_TAIL ? e->len : DCP_ITEM_TAIL;

		HASH_FIND(hh, s->ready, e->path->u.s.p, e->path->u.s.len, f);
		if (!f || !e->len)
			continue;
		pt_source_prefetch(f->ck->src, e->off, head);
		pt_source_prefetch(f->ck->src, e->off + e->len - tail, tail);
	}
}

/*
 * Over a remote source, open every .distcp file storage_data names, all
 * together (pt__ckpt_open_siblings: in parallel), into s->ready, where
 * dcp_file() takes each when an entry first needs it: a directory of 100
 * files costs the round trips of one open, not of 100 in series.  A file
 * that fails to open is left out, and dcp_file() opens it again where
 * the entries need it, and fails there as it does locally.  Then the
 * items' metadata is asked for, all together (prefetch_items).  Locally
 * this does nothing: an open or a read costs no round trip.
 */
static int dcp_open_ahead(struct pt_ckpt *ck, struct dcp_state *s,
			  struct pt_error *err)
{
	struct pt_child_open *v;
	struct dcp_file *f, *tmp;
	size_t n, i = 0;
	int rc;

	if (!ck->src->costly_reads)
		return 0;
	rc = ahead_names(s, &n, err);
	v = rc ? NULL : calloc(n + 1, sizeof(*v));
	if (!v) {
		files_free(&s->ready);
		return rc ? rc : pt_fail(err, -ENOMEM, "out of memory");
	}
	HASH_ITER(hh, s->ready, f, tmp)
		v[i++].name = f->name;
	pt__ckpt_open_siblings(ck, v, n, false, false);
	i = 0;
	HASH_ITER(hh, s->ready, f, tmp) {
		f->ck = v[i++].ck;
		if (f->ck)
			continue;
		HASH_DEL(s->ready, f);
		free(f->name);
		free(f);
	}
	free(v);
	prefetch_items(s);
	return 0;
}

/* ---- blobs: torch.save zips inside a .distcp ---- */

struct blob {                           /* an opened torch.save blob */
	struct pt_source *src;          /* the blob's range of its file */
	struct pt_zip *z;
	uint8_t *pkl;                   /* data.pkl */
	struct pt_pickle *pk;
	struct pt_value *root;
};

static void blob_close(struct blob *b)
{
	pt_pickle_free(b->pk);
	free(b->pkl);
	pt_zip_close(b->z);
	pt_source_close(b->src);
	memset(b, 0, sizeof(*b));
}

static bool blob_is_zip(const struct dcp_file *f, uint64_t off, uint64_t len)
{
	uint8_t m[4];
	struct pt_error e;

	pt_error_clear(&e);
	return len >= 4 &&
	       pt_source_read(f->ck->src, m, 4, off, &e) == 0 &&
	       memcmp(m, "PK\3\4", 4) == 0;
}

/* Index the zip at [off, off + len) of @f and decode its data.pkl. */
static int blob_open(struct pt_ckpt *ck, const struct dcp_file *f,
		     uint64_t off, uint64_t len, struct blob *b,
		     struct pt_error *err)
{
	const struct pt_zip_entry *e;
	size_t n = 0, used;
	int rc;

	memset(b, 0, sizeof(*b));
	rc = pt_source_sub(f->ck->src, off, len, f->name, &b->src, err);
	if (!rc)
		rc = pt_zip_open(&b->z, b->src, &ck->opts.limits, err);
	if (rc)
		return rc;
	e = pt_zip_find_rel(b->z, "data.pkl");
	if (!e)
		return pt_fail(err, -EBADMSG, "torch.save blob without data.pkl");
	if (e->usize > DCP_MAX_BLOB_PICKLE)
		return pt_fail(err, -EFBIG,
			       "data.pkl of %" PRIu64 " bytes exceeds the limit of %u",
			       e->usize, DCP_MAX_BLOB_PICKLE);
	rc = pt_zip_read(b->z, e, &b->pkl, &n, err);
	if (!rc)
		rc = pt_pickle_load(&b->pk, b->pkl, n, &used, &ck->opts.limits,
				    err);
	if (rc)
		return rc;
	b->root = pt_pickle_root(b->pk);
	return 0;
}

static const struct pt_value *arg(const struct pt_value *call, size_t i)
{
	const struct pt_value *a = call->u.call.args;

	return a && i < a->u.seq.n ? a->u.seq.v[i] : NULL;
}

static bool is_call_of(const struct pt_value *v, const char *module,
		       const char *name)
{
	return v && (v->kind == PT_V_CALL || v->kind == PT_V_OBJ) &&
	       pt__is_global(v->u.call.callable, module, name);
}

/*
 * The data of the chunk in blob @b: the pickle must be one tensor
 * (_rebuild_tensor_v2/_v3, perhaps inside a Parameter) of dtype @dt and
 * shape @sizes, C-contiguous, whose bytes lie in a stored record.  Its
 * first byte's offset in the .distcp file goes to *@data_off.
 */
static int blob_chunk(struct blob *b, uint64_t blob_off,
		      const struct pt_dtype *dt, const int64_t *sizes,
		      uint32_t rank, uint64_t nbytes, uint64_t *data_off,
		      struct pt_error *err)
{
	const struct pt_value *v = b->root, *pid, *cls, *key, *sz, *sd;
	const struct pt_zip_entry *e;
	const struct pt_dtype *sdt;
	int64_t *dims = NULL;
	uint64_t expect = 1, lo;
	uint32_t n = 0, ns = 0, d;
	char rec[64];
	int rc = 0;

	if (is_call_of(v, "torch._utils", "_rebuild_parameter") ||
	    is_call_of(v, "torch._utils", "_rebuild_parameter_with_state") ||
	    is_call_of(v, "torch.nn.parameter", "Parameter"))
		v = arg(v, 0);
	if (!is_call_of(v, "torch._utils", "_rebuild_tensor_v2") &&
	    !is_call_of(v, "torch._utils", "_rebuild_tensor_v3"))
		return pt_fail(err, -EBADMSG, "blob does not hold one plain tensor");
	pid = arg(v, 0);
	pid = pid && pid->kind == PT_V_PERSID ? pid->u.pid : NULL;
	if (!pid || pid->kind != PT_V_TUPLE || pid->u.seq.n < 5 ||
	    !is_str_n(pid->u.seq.v[0], "storage"))
		return pt_fail(err, -EBADMSG, "blob's tensor has no storage");
	cls = pid->u.seq.v[1];
	key = pid->u.seq.v[2];
	if (!cls || cls->kind != PT_V_GLOBAL || !key || key->kind != PT_V_STR ||
	    key->u.s.len == 0 || key->u.s.len > 40 ||
	    memchr(key->u.s.p, '/', key->u.s.len) ||
	    memchr(key->u.s.p, '\0', key->u.s.len))
		return pt_fail(err, -EBADMSG, "blob's storage id is malformed");
	sdt = pt_dtype_from_storage(cls->u.global.name);
	if (!sdt)
		return pt_fail(err, -EBADMSG, "blob's storage class %s is unknown",
			       cls->u.global.name);
	if (sdt != pt_dtype_untyped() && strcmp(sdt->name, dt->name) != 0)
		return pt_fail(err, -EBADMSG,
			       "blob holds %s, the metadata says %s",
			       sdt->name, dt->name);
	lo = 0;
	if (!as_u64(arg(v, 1), &lo))
		return pt_fail(err, -EBADMSG, "blob's storage offset is not an integer");
	dims = calloc(2 * (size_t)rank + 2, sizeof(*dims));
	if (!dims)
		return pt_fail(err, -ENOMEM, "out of memory");
	sz = arg(v, 2);
	sd = arg(v, 3);
	if (!int_seq(sz, dims, rank, &n) || n != rank ||
	    !int_seq(sd, dims + rank + 1, rank, &ns) || ns != rank) {
		rc = pt_fail(err, -EBADMSG,
			     "blob's tensor does not have the chunk's rank %u", rank);
		goto out;
	}
	for (d = rank; d-- > 0;) {
		if (dims[d] != sizes[d]) {
			rc = pt_fail(err, -EBADMSG,
				     "blob's tensor has size %" PRId64 " in dim %u, the chunk %" PRId64,
				     dims[d], d, sizes[d]);
			goto out;
		}
		if (sizes[d] != 1 && (uint64_t)dims[rank + 1 + d] != expect) {
			rc = pt_fail(err, -ENOTSUP,
				     "blob's tensor is not C-contiguous");
			goto out;
		}
		expect *= (uint64_t)sizes[d];   /* <= numel, checked */
	}
	snprintf(rec, sizeof(rec), "data/%.*s", (int)key->u.s.len,
		 (const char *)key->u.s.p);
	e = pt_zip_find_rel(b->z, rec);
	if (!e) {
		rc = pt_fail(err, -EBADMSG, "blob has no record %s", rec);
		goto out;
	}
	if (e->method != PT_ZIP_STORED) {
		rc = pt_fail(err, -ENOTSUP, "blob's record %s is compressed", rec);
		goto out;
	}
	if (!pt_mul_u64(lo, dt->size, &lo) || lo > e->usize ||
	    nbytes > e->usize - lo || e->csize != e->usize) {
		rc = pt_fail(err, -EBADMSG,
			     "blob's record %s has %" PRIu64 " bytes, too few for the chunk",
			     rec, e->usize);
		goto out;
	}
	/* inside the blob, which lies inside the file */
	*data_off = blob_off + e->data_off + lo;
out:
	free(dims);
	return rc;
}

/* ---- tensors ---- */

static _Thread_local uint32_t sort_rank;

static int chunk_cmp(const void *a, const void *b)
{
	const struct pt_chunk *x = a, *y = b;
	uint32_t d;

	for (d = 0; d < sort_rank; d++)
		if (x->offsets[d] != y->offsets[d])
			return x->offsets[d] < y->offsets[d] ? -1 : 1;
	return 0;
}

static bool boxes_meet(const struct pt_chunk *a, const struct pt_chunk *b,
		       uint32_t rank)
{
	uint32_t d;

	for (d = 0; d < rank; d++)
		if (a->offsets[d] >= b->offsets[d] + b->sizes[d] ||
		    b->offsets[d] >= a->offsets[d] + a->sizes[d])
			return false;
	return true;
}

/* The sorted chunks @v[0..@n) lie inside @shape (checked by the caller),
 * and their volumes sum to numel: they tile it iff no two overlap.  Only
 * chunks whose first-dimension ranges meet are compared. */
static int check_tiling(struct dcp_state *s, const struct pt_chunk *v,
			size_t n, uint32_t rank, const char *who,
			struct pt_error *err)
{
	size_t i, j;

	if (rank == 0)
		return n > 1 ? pt_fail(err, -EBADMSG,
				       "tensor '%s': %zu chunks of a 0-dim tensor",
				       who, n) : 0;
	for (i = 0; i < n; i++)
		for (j = i + 1; j < n &&
		     v[j].offsets[0] < v[i].offsets[0] + v[i].sizes[0]; j++) {
			if (++s->overlap_tests > DCP_MAX_OVERLAP_TESTS)
				return pt_fail(err, -EFBIG,
					       "tensor '%s': chunk layout too complex to check",
					       who);
			if (boxes_meet(&v[i], &v[j], rank))
				return pt_fail(err, -EBADMSG,
					       "tensor '%s': chunks %zu and %zu overlap",
					       who, i, j);
		}
	return 0;
}

/* The dtype and requires_grad of TensorProperties @props. */
static int dcp_props(const struct pt_value *props, const char *who,
		     const struct pt_dtype **dt, bool *requires_grad,
		     struct pt_error *err)
{
	const struct pt_value *pst, *dtv = NULL, *rgv = NULL;

	pst = props ? pt_call_state(props) : NULL;
	if (is_class(props, "TensorProperties") && pst &&
	    pst->kind == PT_V_TUPLE && pst->u.seq.n >= 1) {
		/* __getstate__: (dtype, layout, requires_grad, memory
		 * format, pin_memory) */
		dtv = pst->u.seq.v[0];
		rgv = pst->u.seq.n >= 3 ? pst->u.seq.v[2] : NULL;
	} else if (is_class(props, "TensorProperties")) {
		dtv = field(props, "dtype");
		rgv = field(props, "requires_grad");
	}
	if (!dtv || dtv->kind != PT_V_GLOBAL ||
	    strcmp(dtv->u.global.module, "torch") != 0)
		return pt_fail(err, -EBADMSG,
			       "tensor '%s': properties have no torch dtype", who);
	*dt = pt_dtype_from_torch(dtv->u.global.name);
	if (!*dt || (*dt)->packed)
		return pt_fail(err, -ENOTSUP, "tensor '%s': dtype torch.%s is not supported",
			       who, dtv->u.global.name);
	*requires_grad = rgv && rgv->kind == PT_V_BOOL && rgv->u.b;
	return 0;
}

/* A C-contiguous tensor of @dt and the size in @tm, over a new storage
 * keyed @fqn with no bytes yet (PT_ST_NONE). */
static int dcp_new_tensor(struct pt_ckpt *ck, const struct pt_value *fqn,
			  const struct pt_value *tm, const struct pt_dtype *dt,
			  const char *who, struct pt_tensor **out,
			  struct pt_error *err)
{
	const uint32_t max_rank = ck->opts.limits.max_rank;
	struct pt_tensor *t;
	struct pt_storage *st;
	int64_t *dims;
	uint64_t numel = 1;
	uint32_t rank = 0, d;

	t = pt__own(ck, calloc(1, sizeof(*t)));
	st = pt__own(ck, calloc(1, sizeof(*st)));
	dims = pt__own(ck, calloc(2 * (size_t)max_rank + 2, sizeof(*dims)));
	if (!t || !st || !dims)
		return pt_fail(err, -ENOMEM, "out of memory");
	if (!int_seq(field(tm, "size"), dims, max_rank, &rank))
		return pt_fail(err, -EBADMSG,
			       "tensor '%s': size is not a torch.Size of at most %u dims",
			       who, max_rank);
	for (d = 0; d < rank; d++)
		if (!pt_mul_u64(numel, (uint64_t)dims[d], &numel))
			return pt_fail(err, -EBADMSG, "tensor '%s': element count overflows", who);
	t->dtype = dt;
	t->st = st;
	t->rank = rank;
	t->shape = dims;
	t->stride = dims + rank + 1;
	pt__dense_strides(rank, dims, false, t->stride); /* <= numel */
	if (!pt_mul_u64(numel, dt->size, &t->nbytes) || t->nbytes > INT64_MAX)
		return pt_fail(err, -EBADMSG, "tensor '%s': byte count overflows", who);
	t->numel = numel;
	t->byte_hi = t->nbytes;
	t->contiguous = true;
	t->kind = PT_TK_TENSOR;
	t->byteorder = dt->size == 1 ? '|' : '<';
	t->dtype_name = dt->name;
	st->key = (const char *)pt__own(ck, strndup((const char *)fqn->u.s.p,
						   fqn->u.s.len));
	if (!st->key)
		return pt_fail(err, -ENOMEM, "out of memory");
	st->dtype = dt;
	st->nbytes = t->nbytes;
	st->kind = PT_ST_NONE;
	st->id = ck->n_storages++;
	*out = t;
	return 0;
}

/* The non-empty chunks of list @chunks of tensor @t, checked to lie
 * inside it and to tile it exactly, sorted, in *@out (owned by ck). */
static int dcp_chunk_boxes(struct pt_ckpt *ck, struct dcp_state *s,
			   const struct pt_value *chunks,
			   const struct pt_tensor *t, const char *who,
			   struct pt_chunk **out, size_t *n_out,
			   struct pt_error *err)
{
	const uint32_t rank = t->rank;
	const int64_t *dims = t->shape;
	uint64_t vol_sum = 0;
	struct pt_chunk *cv;
	size_t i, n = 0;
	uint32_t d;

	if (chunks->u.seq.n > DCP_MAX_TENSOR_CHUNKS ||
	    s->n_listed + chunks->u.seq.n > DCP_MAX_CHUNKS)
		return pt_fail(err, -EFBIG, "tensor '%s': more than %u chunks",
			       who, chunks->u.seq.n > DCP_MAX_TENSOR_CHUNKS ?
			       DCP_MAX_TENSOR_CHUNKS : DCP_MAX_CHUNKS);
	s->n_listed += chunks->u.seq.n;     /* bounds the work, empty or not */
	cv = pt__own(ck, calloc(chunks->u.seq.n + 1, sizeof(*cv)));
	if (!cv)
		return pt_fail(err, -ENOMEM, "out of memory");
	for (i = 0; i < chunks->u.seq.n; i++) {
		const struct pt_value *c = chunks->u.seq.v[i];
		int64_t *box = pt__own(ck, calloc(2 * (size_t)rank + 2,
						  sizeof(*box)));
		uint32_t no = 0, nz = 0;
		uint64_t vol = 1;

		if (!box)
			return pt_fail(err, -ENOMEM, "out of memory");
		if (!is_class(c, "ChunkStorageMetadata") ||
		    !int_seq(field(c, "offsets"), box, rank, &no) || no != rank ||
		    !int_seq(field(c, "sizes"), box + rank + 1, rank, &nz) ||
		    nz != rank)
			return pt_fail(err, -EBADMSG,
				       "tensor '%s': chunk %zu is not a ChunkStorageMetadata of rank %u",
				       who, i, rank);
		for (d = 0; d < rank; d++) {
			int64_t o = box[d], z = box[rank + 1 + d];

			if (o > dims[d] || z > dims[d] - o)
				return pt_fail(err, -EBADMSG,
					       "tensor '%s': chunk %zu reaches past the tensor in dim %u (%" PRId64 " + %" PRId64 " > %" PRId64 ")",
					       who, i, d, o, z, dims[d]);
			vol *= (uint64_t)z;     /* <= numel: inside */
		}
		if (vol == 0)
			continue;       /* an empty shard holds nothing */
		cv[n].offsets = box;
		cv[n].sizes = box + rank + 1;
		if (!pt_add_u64(vol_sum, vol, &vol_sum) || vol_sum > t->numel)
			return pt_fail(err, -EBADMSG,
				       "tensor '%s': its chunks hold more elements than the tensor",
				       who);
		n++;
	}
	if (vol_sum != t->numel)
		return pt_fail(err, -EBADMSG,
			       "tensor '%s': its chunks hold %" PRIu64 " elements, the tensor has %" PRIu64,
			       who, vol_sum, t->numel);
	sort_rank = rank;
	qsort(cv, n, sizeof(*cv), chunk_cmp);
	*out = cv;
	*n_out = n;
	return check_tiling(s, cv, n, rank, who, err);
}

/* Where chunk @i (@c) of @fqn lies: its file and first byte there. */
static int dcp_chunk_place(struct pt_ckpt *ck, struct dcp_state *s,
			   const struct pt_value *fqn, const struct pt_dtype *dt,
			   uint32_t rank, struct pt_chunk *c, size_t i,
			   const char *who, struct pt_error *err)
{
	const struct dcp_sd *e;
	struct dcp_file *f;
	struct blob b;
	uint64_t cbytes = dt->size;
	uint32_t d;
	int rc;

	for (d = 0; d < rank; d++)
		cbytes *= (uint64_t)c->sizes[d];
	e = sd_find(s, fqn, c->offsets, rank, false, &rc);
	if (rc)
		return pt_fail(err, rc, "out of memory");
	if (!e)
		return pt_fail(err, -EBADMSG,
			       "tensor '%s': chunk %zu has no storage_data item", who, i);
	rc = dcp_file(ck, s, e->path, &f, err);
	if (rc) {
		pt_error_prefix(err, "tensor '%s'", who);
		return rc;
	}
	if (e->off > f->ck->src->size || e->len > f->ck->src->size - e->off)
		return pt_fail(err, -EBADMSG,
			       "tensor '%s': chunk %zu at [%" PRIu64 ", +%" PRIu64 ") lies outside %s (%" PRIu64 " bytes)",
			       who, i, e->off, e->len, f->name, f->ck->src->size);
	if (blob_is_zip(f, e->off, e->len)) {
		rc = blob_open(ck, f, e->off, e->len, &b, err);
		if (!rc)
			rc = blob_chunk(&b, e->off, dt, c->sizes, rank,
					cbytes, &c->file_off, err);
		blob_close(&b);
		if (rc) {
			pt_error_prefix(err, "tensor '%s': chunk %zu in %s at %" PRIu64,
					who, i, f->name, e->off);
			return rc;
		}
	} else if (e->len == cbytes) {
		c->file_off = e->off;   /* raw bytes */
	} else {
		return pt_fail(err, -EBADMSG,
			       "tensor '%s': chunk %zu in %s at %" PRIu64 " is neither a torch.save blob nor %" PRIu64 " raw bytes",
			       who, i, f->name, e->off, cbytes);
	}
	c->home = f->ck;
	return 0;
}

/* The TensorStorageMetadata @tm of @fqn as a tensor (its storage too):
 * one chunk is served from its file as it is, several are assembled
 * (PT_ST_CHUNKS). */
static int dcp_tensor(struct pt_ckpt *ck, struct dcp_state *s,
		      const struct pt_value *fqn, const struct pt_value *tm,
		      struct pt_tensor **out, struct pt_error *err)
{
	const struct pt_value *chunks = field(tm, "chunks");
	const struct pt_dtype *dt = NULL;
	struct pt_tensor *t = NULL;
	struct pt_storage *st;
	struct pt_chunk *cv = NULL;
	struct pt_chunks *cs;
	bool rg = false;
	size_t i, n = 0;
	char who[100];
	int rc;

	pname(fqn, who, sizeof(who));
	rc = dcp_props(field(tm, "properties"), who, &dt, &rg, err);
	if (!rc)
		rc = dcp_new_tensor(ck, fqn, tm, dt, who, &t, err);
	if (rc)
		return rc;
	t->requires_grad = rg;
	st = t->st;
	*out = t;
	if (!chunks || (chunks->kind != PT_V_LIST && chunks->kind != PT_V_TUPLE))
		return pt_fail(err, -EBADMSG, "tensor '%s': chunks is not a list", who);
	if (t->numel == 0)
		return 0;       /* nothing to read, whatever the chunks say */
	rc = dcp_chunk_boxes(ck, s, chunks, t, who, &cv, &n, err);
	for (i = 0; i < n && !rc; i++)
		rc = dcp_chunk_place(ck, s, fqn, dt, t->rank, &cv[i], i, who, err);
	if (rc)
		return rc;
	s->n_chunks += n;
	if (n == 1) {
		/* one chunk is the whole tensor: zero-copy from its file */
		st->kind = PT_ST_FILE;
		st->home = cv[0].home;
		st->file_off = cv[0].file_off;
		return 0;
	}
	cs = pt__own(ck, calloc(1, sizeof(*cs)));
	if (!cs)
		return pt_fail(err, -ENOMEM, "out of memory");
	cs->rank = t->rank;
	cs->shape = t->shape;
	cs->es = dt->size;
	cs->n = n;
	cs->v = cv;
	st->kind = PT_ST_CHUNKS;
	st->chunks = cs;
	return 0;
}

/* ---- other values ---- */

/* Protocol 2 pickles Python 3 bytes as _codecs.encode(text, 'latin1')
 * (and b'' as bytes()): the bytes, in new memory owned by @ck, as a
 * PT_C_BYTES node @v; 1 when @src is not that form or not latin-1. */
static int latin1_value(struct pt_ckpt *ck, struct pt_value *v,
			const struct pt_value *src)
{
	const struct pt_value *a0 = arg(src, 0);
	struct pt_bytes *bb;
	size_t n = 0;
	uint8_t *q;

	if (is_call_of(src, "builtins", "bytes") && !a0)
		a0 = NULL;
	else if (!is_call_of(src, "_codecs", "encode") || !a0 ||
		 a0->kind != PT_V_STR)
		return 1;
	q = pt__own(ck, malloc(a0 ? a0->u.s.len + 1 : 1));
	bb = pt__own(ck, calloc(1, sizeof(*bb)));
	if (!q || !bb)
		return -ENOMEM;
	if (a0 && pt_latin1_encode(a0->u.s.p, a0->u.s.len, q, &n))
		return 1;       /* past U+00FF: not latin-1 */
	bb->p = q;
	bb->len = n;
	v->kind = PT_V_BYTES;
	v->u.s.p = q;
	v->u.s.len = n;
	v->u.s.in_off = UINT64_MAX;
	v->aux = bb;
	v->aux16 = PT_C_BYTES;
	return 0;
}

/* A copy of @src (a scalar) into @v; 1 when @src is not a scalar. */
static int copy_scalar(struct pt_ckpt *ck, struct pt_value *v,
		       const struct pt_value *src)
{
	struct pt_bytes *bb;
	uint8_t *p;

	switch (src->kind) {
	case PT_V_NONE:
	case PT_V_BOOL:
	case PT_V_INT:
	case PT_V_FLOAT:
		v->kind = src->kind;
		v->flags = src->flags;
		v->u = src->u;
		v->aux16 = PT_C_SCALAR;
		return 0;
	case PT_V_STR:
	case PT_V_BIGINT:
	case PT_V_BYTES:
	case PT_V_BYTEARRAY:
		p = pt__own(ck, malloc(src->u.s.len + 1));
		if (!p)
			return -ENOMEM;
		memcpy(p, src->u.s.p, src->u.s.len);
		v->kind = src->kind;
		v->flags = src->flags;
		v->u.s.p = p;
		v->u.s.len = src->u.s.len;
		v->u.s.in_off = UINT64_MAX;
		if (src->kind == PT_V_STR || src->kind == PT_V_BIGINT) {
			v->aux16 = PT_C_SCALAR;
			return 0;
		}
		bb = pt__own(ck, calloc(1, sizeof(*bb)));
		if (!bb)
			return -ENOMEM;
		bb->p = p;
		bb->len = src->u.s.len;
		v->aux = bb;
		v->aux16 = PT_C_BYTES;
		return 0;
	case PT_V_CALL:
		return latin1_value(ck, v, src);
	default:
		return 1;
	}
}

/* A raw value too large to keep in memory: a 1-D uint8 tensor served
 * from its file. */
static int raw_tensor(struct pt_ckpt *ck, struct pt_value *v,
		      const struct pt_value *fqn, const struct dcp_file *f,
		      const struct dcp_sd *e, struct pt_error *err)
{
	const struct pt_dtype *u8 = pt_dtype_untyped();
	struct pt_tensor *t = pt__own(ck, calloc(1, sizeof(*t)));
	struct pt_storage *st = pt__own(ck, calloc(1, sizeof(*st)));
	int64_t *dims = pt__own(ck, calloc(2, sizeof(*dims)));

	if (!t || !st || !dims)
		return pt_fail(err, -ENOMEM, "out of memory");
	st->key = (const char *)pt__own(ck, strndup((const char *)fqn->u.s.p,
						   fqn->u.s.len));
	if (!st->key)
		return pt_fail(err, -ENOMEM, "out of memory");
	st->dtype = u8;
	st->nbytes = e->len;
	st->kind = PT_ST_FILE;
	st->home = f->ck;
	st->file_off = e->off;
	st->id = ck->n_storages++;
	dims[0] = (int64_t)e->len;
	dims[1] = 1;
	t->dtype = u8;
	t->st = st;
	t->rank = 1;
	t->shape = dims;
	t->stride = dims + 1;
	t->numel = t->nbytes = t->byte_hi = e->len;
	t->contiguous = true;
	t->kind = PT_TK_TENSOR;
	t->byteorder = '|';
	t->dtype_name = u8->name;
	t->note = "the raw bytes of a non-tensor value (BytesStorageMetadata), too large to show as bytes";
	ck->n_tensors++;
	ck->tensor_bytes += t->nbytes;
	if (pt__storage_add(ck, st))
		return pt_fail(err, -ENOMEM, "out of memory");
	v->kind = PT_V_PERSID;
	v->u.pid = NULL;
	v->aux = t;
	v->aux16 = PT_C_TENSOR;
	return 0;
}

/* The BytesStorageMetadata entry @fqn into node @v. */
static int dcp_value(struct pt_ckpt *ck, struct dcp_state *s,
		     const struct pt_value *fqn, struct pt_value *v,
		     struct pt_error *err)
{
	const struct dcp_sd *e;
	struct dcp_file *f;
	struct pt_bytes *bb;
	struct pt_error e2;
	struct blob b;
	uint8_t *raw = NULL;
	char who[100];
	int rc;

	pname(fqn, who, sizeof(who));
	e = sd_find(s, fqn, NULL, 0, true, &rc);
	if (rc)
		return pt_fail(err, rc, "out of memory");
	if (!e)
		return pt_fail(err, -EBADMSG, "value '%s' has no storage_data item", who);
	rc = dcp_file(ck, s, e->path, &f, err);
	if (rc) {
		pt_error_prefix(err, "value '%s'", who);
		return rc;
	}
	if (e->off > f->ck->src->size || e->len > f->ck->src->size - e->off)
		return pt_fail(err, -EBADMSG,
			       "value '%s' at [%" PRIu64 ", +%" PRIu64 ") lies outside %s (%" PRIu64 " bytes)",
			       who, e->off, e->len, f->name, f->ck->src->size);
	if (blob_is_zip(f, e->off, e->len)) {
		/* a torch.save blob: its value when simple, else its bytes */
		pt_error_clear(&e2);
		rc = blob_open(ck, f, e->off, e->len, &b, &e2);
		if (!rc)
			rc = copy_scalar(ck, v, b.root);
		blob_close(&b);
		if (rc == -ENOMEM)
			return pt_fail(err, rc, "out of memory");
		if (rc == 0)
			return 0;
	}
	if (e->len > DCP_MAX_INLINE ||
	    s->inline_bytes + e->len > DCP_MAX_INLINE_ALL)
		return raw_tensor(ck, v, fqn, f, e, err);
	rc = pt_source_dup(f->ck->src, e->off, (size_t)e->len, &raw, err);
	if (rc)
		return rc;
	if (!pt__own(ck, raw))
		return pt_fail(err, -ENOMEM, "out of memory");
	bb = pt__own(ck, calloc(1, sizeof(*bb)));
	if (!bb)
		return pt_fail(err, -ENOMEM, "out of memory");
	s->inline_bytes += e->len;
	bb->p = raw;
	bb->len = (size_t)e->len;
	v->kind = PT_V_BYTES;
	v->u.s.p = raw;
	v->u.s.len = (size_t)e->len;
	v->u.s.in_off = UINT64_MAX;
	v->aux = bb;
	v->aux16 = PT_C_BYTES;
	return 0;
}

/* ---- the format ---- */

static int dcp_probe(struct pt_ckpt *ck, const uint8_t *head, size_t n,
		      struct pt_error *err)
{
	const char *base = strrchr(ck->path, '/');

	(void)head;
	(void)n;
	(void)err;
	base = base ? base + 1 : ck->path;
	return strcmp(base, ".metadata") == 0;
}

static void dcp_close(struct pt_ckpt *ck)
{
	struct dcp_state *s = ck->fmt_state;

	if (!s)
		return;
	files_free(&s->files);
	files_free(&s->ready);
	sd_free(&s->sd);
	free(s->dir);
	free(s);
	ck->fmt_state = NULL;
}

/* Duplicate FQNs (a pickle may SETITEMS the same key twice). */
struct fqn_seen {
	const uint8_t *p;
	size_t len;
	UT_hash_handle hh;
};

static int dcp_entries(struct pt_ckpt *ck, struct dcp_state *s,
		       const struct pt_value *sdm, struct pt_error *err)
{
	struct fqn_seen *seen = NULL, *fs, *it, *tmp;
	struct pt_value *root;
	size_t n, i, n_t = 0;
	char who[100];
	int rc = 0;

	n = sdm->u.dict.kv.n / 2;
	if (n > ck->opts.limits.max_dir_entries)
		return pt_fail(err, -EFBIG,
			       "state_dict_metadata: %zu entries exceed the limit of %" PRIu64,
			       n, ck->opts.limits.max_dir_entries);
	root = pt__value_dict(ck, n);
	if (!root)
		return pt_fail(err, -ENOMEM, "out of memory");
	fs = calloc(n + 1, sizeof(*fs));
	if (!fs)
		return pt_fail(err, -ENOMEM, "out of memory");
	for (i = 0; i < n && !rc; i++) {
		const struct pt_value *k = sdm->u.dict.kv.v[2 * i];
		const struct pt_value *m = sdm->u.dict.kv.v[2 * i + 1];
		struct fqn_seen *dup;
		struct pt_tensor *t = NULL;

		if (!k || k->kind != PT_V_STR) {
			rc = pt_fail(err, -EBADMSG,
				     "state_dict_metadata: key %zu is not a str", i);
			break;
		}
		pname(k, who, sizeof(who));
		HASH_FIND(hh, seen, k->u.s.p, k->u.s.len, dup);
		if (dup) {
			rc = pt_fail(err, -EBADMSG,
				     "state_dict_metadata: '%s' appears twice", who);
			break;
		}
		fs[i].p = k->u.s.p;
		fs[i].len = k->u.s.len;
		HASH_ADD_KEYPTR(hh, seen, fs[i].p, fs[i].len, &fs[i]);
		if (is_class(m, "TensorStorageMetadata")) {
			rc = dcp_tensor(ck, s, k, m, &t, err);
			if (rc)
				break;
			if (pt__storage_add(ck, t->st)) {
				rc = pt_fail(err, -ENOMEM, "out of memory");
				break;
			}
			pt__value_dict_set_tensor(root, i, k->u.s.p, k->u.s.len, t);
			ck->n_tensors++;
			ck->tensor_bytes += t->nbytes;
			n_t++;
		} else if (is_class(m, "BytesStorageMetadata")) {
			/* the key as for a tensor, then the value node */
			struct pt_value *v = root->u.dict.kv.v[2 * i + 1];

			pt__value_dict_set_tensor(root, i, k->u.s.p, k->u.s.len, NULL);
			memset(v, 0, sizeof(*v));
			v->id = (uint32_t)(2 * i + 2);
			rc = dcp_value(ck, s, k, v, err);
		} else {
			rc = pt_fail(err, -EBADMSG,
				     "state_dict_metadata: '%s' is a %s, not tensor or bytes metadata",
				     who, class_name(m));
		}
	}
	HASH_ITER(hh, seen, it, tmp) {
		HASH_DEL(seen, it);
	}
	free(fs);
	if (rc)
		return rc;
	ck->root = root;
	pt_buf_printf(&ck->notes,
		      "distributed checkpoint: %zu entries (%zu tensors, %zu other values), %" PRIu64 " chunks in %zu .distcp files\n",
		      n, n_t, n - n_t, s->n_chunks, s->n_files);
	return 0;
}

static int dcp_open(struct pt_ckpt *ck, struct pt_error *err)
{
	const struct pt_value *meta, *sdm;
	struct pt_value *root = NULL;
	struct dcp_state *s;
	const char *slash;
	uint8_t *buf = NULL;
	int rc;

	if (!pt_source_has_siblings(ck->src))
		return pt_fail(err, -ENOTSUP,
			       "distributed checkpoint in memory: its .distcp files lie beside it, open its directory");
	if (ck->src->size > ck->opts.limits.max_pickle_bytes)
		return pt_fail(err, -EFBIG,
			       ".metadata of %" PRIu64 " bytes exceeds the pickle limit of %" PRIu64,
			       ck->src->size, ck->opts.limits.max_pickle_bytes);
	s = calloc(1, sizeof(*s));
	if (!s)
		return pt_fail(err, -ENOMEM, "out of memory");
	ck->fmt_state = s;      /* dcp_close() frees it, also on failure */
	ck->kind_name = "torch.distributed.checkpoint (DCP)";
	slash = strrchr(ck->path, '/');
	s->dir = slash ? strndup(ck->path, (size_t)(slash - ck->path)) :
			 strdup(".");
	if (s->dir && !s->dir[0]) {
		free(s->dir);
		s->dir = strdup("/");
	}
	if (!s->dir)
		return pt_fail(err, -ENOMEM, "out of memory");
	rc = pt_source_dup(ck->src, 0, (size_t)ck->src->size, &buf, err);
	if (rc)
		return rc;
	rc = pt__load_pickle(ck, buf, (size_t)ck->src->size, ".metadata", 0,
			     &root, NULL, err);
	if (rc)
		return rc;
	meta = root;
	if (!is_class(meta, "Metadata"))
		return pt_fail(err, -EBADMSG,
			       ".metadata: the pickle is a %s, not a torch.distributed.checkpoint Metadata",
			       class_name(meta));
	sdm = field(meta, "state_dict_metadata");
	if (!sdm || sdm->kind != PT_V_DICT)
		return pt_fail(err, -EBADMSG,
			       ".metadata: state_dict_metadata is not a dict");
	rc = parse_storage_data(ck, s, field(meta, "storage_data"), err);
	if (!rc)
		rc = dcp_open_ahead(ck, s, err);
	if (!rc)
		rc = dcp_entries(ck, s, sdm, err);
	if (rc)
		pt_error_prefix(err, ".metadata");
	return rc;
}

/* struct pt_format.probe_dir: a directory with a regular file .metadata
 * (docs/FORMATS.md, "Recognition") opens that file. */
static int dcp_probe_dir(const struct pt_dir_entry *e, size_t n, char **file,
			 struct pt_error *err)
{
	size_t i;

	*file = NULL;
	for (i = 0; i < n; i++) {
		if (!e[i].regular || strcmp(e[i].name, ".metadata") != 0)
			continue;
		*file = strdup(".metadata");
		return *file ? 1 : pt_fail(err, -ENOMEM, "out of memory");
	}
	return 0;
}

const struct pt_format pt_fmt_dcp = {
	.name = "torch.distributed.checkpoint (DCP)",
	.probe = dcp_probe,
	.probe_dir = dcp_probe_dir,
	.open = dcp_open,
	.storage = NULL,
	.close = dcp_close,
};
