/* SPDX-License-Identifier: MIT */
/*
 * safetensors.c -- `ptfs export --to safetensors`: every tensor of the
 * tree under its dotted key, in one file or in hub-style shards.
 *
 * The file: 8-byte little-endian header length, the JSON header
 * ({"__metadata__": {...}, KEY: {"dtype", "shape", "data_offsets"}, ...},
 * keys sorted, padded with spaces to a multiple of 8 bytes so the data
 * that follows is aligned), then the tensors back to back in key order, no
 * gap and no overlap.  Non-tensor values go into __metadata__, each as the
 * JSON text of the value in a string ("epoch": "7", "name": "\"run-1\""),
 * beside "format": "pt" which transformers' loader asks for.
 *
 * Tied tensors (several keys over the same storage bytes, e.g. an
 * embedding and an output layer): safetensors cannot share bytes between
 * keys, and torch's save_model answers by keeping one key and dropping the
 * others, which a plain load_file() or a strict load_state_dict() then
 * misses.  We write every key with its own copy, so that the file holds
 * exactly the checkpoint's keys, and say which keys were tied on stderr.
 *
 * The last section makes the same file as a generated file of the mount,
 * /.ptfs/export/model.safetensors.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/json.h"
#include "export/export.h"

/* The header limit of the reference reader (100 MB). */
#define ST_HEADER_MAX (100u << 20)

/* The safetensors dtype name ("F32", "BF16", "F8_E4M3", ...) of a torch
 * dtype name, or NULL when safetensors has none. */
static const char *pt_safetensors_dtype(const char *t)
{
	static const char *const map[][2] = {
		{ "float64", "F64" }, { "float32", "F32" }, { "float16", "F16" },
		{ "bfloat16", "BF16" }, { "int64", "I64" }, { "int32", "I32" },
		{ "int16", "I16" }, { "int8", "I8" }, { "uint8", "U8" },
		{ "uint16", "U16" }, { "uint32", "U32" }, { "uint64", "U64" },
		{ "bool", "BOOL" }, { "float8_e4m3fn", "F8_E4M3" },
		{ "float8_e5m2", "F8_E5M2" }, { "float8_e8m0fnu", "F8_E8M0" },
		{ "complex64", "C64" },
	};
	size_t i;

	for (i = 0; i < sizeof(map) / sizeof(map[0]); i++)
		if (strcmp(map[i][0], t) == 0)
			return map[i][1];
	return NULL;
}

/* A JSON string body that every JSON reader takes: str values that held
 * lone surrogates (pickled with "surrogatepass", 0xED 0xA0-0xBF ..) get
 * U+FFFD for each, since strict readers (serde_json, which the reference
 * safetensors library uses) refuse lone surrogate escapes. */
static void json_str(struct pt_buf *b, const char *s)
{
	const uint8_t *p = (const uint8_t *)s, *run = p;

	for (; *p; p++) {
		if (p[0] == 0xED && p[1] >= 0xA0 && p[1] <= 0xBF && p[2]) {
			pt_json_str(b, run, (size_t)(p - run));
			pt_buf_puts(b, "\\ufffd");
			p += 2;
			run = p + 1;
		}
	}
	pt_json_str(b, run, (size_t)(p - run));
}

static const struct pt_xlist *sort_list;

static int by_key(const void *a, const void *b)
{
	const size_t *x = a, *y = b;

	return strcmp(sort_list->v[*x].key, sort_list->v[*y].key);
}

static int by_storage(const void *a, const void *b)
{
	const struct pt_xitem *x = &sort_list->v[*(const size_t *)a];
	const struct pt_xitem *y = &sort_list->v[*(const size_t *)b];

	if (x->ti.storage != y->ti.storage)
		return (uintptr_t)x->ti.storage < (uintptr_t)y->ti.storage ? -1 : 1;
	if (x->ti.byte_lo != y->ti.byte_lo)
		return x->ti.byte_lo < y->ti.byte_lo ? -1 : 1;
	return strcmp(x->key, y->key);
}

/* Keys over the very same bytes as an earlier one (tied weights, not
 * views): one note each. */
static void note_ties(const struct pt_xlist *xl, size_t *idx, size_t n,
		      struct pt_buf *notes)
{
	size_t i;

	sort_list = xl;
	qsort(idx, n, sizeof(*idx), by_storage);
	for (i = 1; i < n; i++) {
		const struct pt_xitem *h = &xl->v[idx[i - 1]], *c = &xl->v[idx[i]];

		if (c->ti.storage == h->ti.storage && c->ti.nbytes &&
		    c->ti.byte_lo == h->ti.byte_lo && c->ti.byte_hi == h->ti.byte_hi &&
		    c->ti.contiguous && h->ti.contiguous)
			pt_buf_printf(notes, "%s: tied to %s (same bytes): written as its own copy\n",
				      c->key, h->key);
	}
}

/*
 * The tensors to write, sorted by key, in *@order (malloc()ed): fails on
 * keys that collide and, unless opts->skip_unsupported, on dtypes
 * safetensors cannot express (all of them listed in @err's line).
 */
int pt__st_plan(const struct pt_xlist *xl, const struct pt_export_opts *opts,
		size_t **order, size_t *n_out, struct pt_buf *notes,
		struct pt_error *err)
{
	size_t *idx = malloc((xl->n + 1) * sizeof(*idx)), i, n = 0;
	struct pt_buf bad;

	if (!idx)
		return pt_fail(err, -ENOMEM, "out of memory");
	pt_buf_init(&bad);
	for (i = 0; i < xl->n; i++) {
		const struct pt_xitem *it = &xl->v[i];

		if (pt_safetensors_dtype(it->ti.dtype) && !it->ti.packed) {
			idx[n++] = i;
			continue;
		}
		if (opts->skip_unsupported)
			pt_buf_printf(notes, "%s: %s has no safetensors dtype: left out\n",
				      it->key, it->ti.dtype);
		else
			pt_buf_printf(&bad, "%s%s (%s)", bad.len ? ", " : "", it->key,
				      it->ti.dtype);
	}
	if (bad.len) {
		pt_fail(err, -ENOTSUP, "safetensors has no dtype for: %s (use --skip-unsupported to leave them out)",
			bad.p);
		pt_buf_free(&bad);
		free(idx);
		return -ENOTSUP;
	}
	pt_buf_free(&bad);
	note_ties(xl, idx, n, notes);
	qsort(idx, n, sizeof(*idx), by_key);
	for (i = 1; i < n; i++)
		if (strcmp(xl->v[idx[i - 1]].key, xl->v[idx[i]].key) == 0) {
			pt_fail(err, -EEXIST, "two tensors have the key %s (%s and %s)",
				xl->v[idx[i]].key, xl->v[idx[i - 1]].path,
				xl->v[idx[i]].path);
			free(idx);
			return -EEXIST;
		}
	*order = idx;
	*n_out = n;
	return 0;
}

/* The header of a file holding tensors @idx[0..@n), padded. */
void pt__st_header(const struct pt_xlist *xl, const size_t *idx, size_t n,
		   struct pt_buf *h)
{
	uint64_t off = 0;
	size_t i;
	bool fmt = false;
	uint32_t d;

	pt_buf_puts(h, "{\"__metadata__\":{");
	for (i = 0; i < xl->nm; i++) {
		fmt |= strcmp(xl->m[i].key, "format") == 0;
		pt_buf_puts(h, i ? ",\"" : "\"");
		json_str(h, xl->m[i].key);
		pt_buf_puts(h, "\":\"");
		json_str(h, xl->m[i].json);
		pt_buf_putc(h, '"');
	}
	if (!fmt)
		pt_buf_puts(h, xl->nm ? ",\"format\":\"pt\"" : "\"format\":\"pt\"");
	pt_buf_putc(h, '}');
	for (i = 0; i < n; i++) {
		const struct pt_xitem *it = &xl->v[idx[i]];

		pt_buf_puts(h, ",\"");
		json_str(h, it->key);
		pt_buf_printf(h, "\":{\"dtype\":\"%s\",\"shape\":[",
			      pt_safetensors_dtype(it->ti.dtype));
		for (d = 0; d < it->ti.rank; d++)
			pt_buf_printf(h, "%s%" PRId64, d ? "," : "", it->ti.shape[d]);
		pt_buf_printf(h, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}",
			      off, off + it->ti.nbytes);
		off += it->ti.nbytes;
	}
	pt_buf_putc(h, '}');
	while ((h->len + 8) % 8)
		pt_buf_putc(h, ' ');
}

/* Write one safetensors file of tensors @idx[0..@n) at @path. */
/* Write one safetensors file of tensors @idx[0..@n) as the temporary file
 * of @o (for @path); the caller commits or aborts it. */
static int write_file(struct pt_ckpt *ck, const struct pt_xlist *xl,
		      const size_t *idx, size_t n, const char *path,
		      const struct pt_export_opts *opts, struct pt_xout *o,
		      struct pt_error *err)
{
	struct pt_buf h;
	uint8_t len8[8];
	size_t i;
	int rc, b;

	pt_buf_init(&h);
	pt__st_header(xl, idx, n, &h);
	if (h.oom) {
		pt_buf_free(&h);
		return pt_fail(err, -ENOMEM, "out of memory");
	}
	if (h.len > ST_HEADER_MAX) {
		pt_buf_free(&h);
		return pt_fail(err, -EFBIG, "%s: header of %zu bytes is over the safetensors limit (100 MB)",
			       path, h.len);
	}
	for (b = 0; b < 8; b++)
		len8[b] = (uint8_t)((uint64_t)h.len >> (8 * b));
	rc = pt_xout_open(o, path, err);
	o->nosync = opts->no_fsync;
	if (!rc)
		rc = pt_xout_write(o, len8, 8, err);
	if (!rc)
		rc = pt_xout_write(o, h.p, h.len, err);
	pt_buf_free(&h);
	for (i = 0; i < n && !rc; i++) {
		const struct pt_xitem *it = &xl->v[idx[i]];

		rc = pt_xout_tensor(o, ck, it->node, &it->ti,
				    it->ti.byteorder == '>', err);
		if (rc && !strstr(err->msg, it->path)) {
			char m[sizeof(err->msg)];
			snprintf(m, sizeof(m), "%s", err->msg);
			pt_error_clear(err);
			pt_fail(err, rc, "%s: %s", it->path, m);
		}
	}
	return rc;
}

/* The most header bytes tensor @it can take in a file: its entry with
 * both data offsets at their widest (20 digits), and the 7 bytes of
 * padding the header may need. */
static uint64_t entry_bound(const struct pt_xitem *it)
{
	struct pt_buf k;
	uint64_t n;
	uint32_t d;

	pt_buf_init(&k);
	json_str(&k, it->key);
	n = k.len + sizeof(",\"\":{\"dtype\":\"\",\"shape\":[],\"data_offsets\":[,]}") +
	    strlen(pt_safetensors_dtype(it->ti.dtype)) + 2 * 20 + 7;
	for (d = 0; d < it->ti.rank; d++)
		n += 21;        /* a comma and up to 20 digits */
	pt_buf_free(&k);
	return n;
}

/* Where each shard starts (@first, @ns of them): files of at most
 * opts->shard_size bytes each, header and length included (a tensor too
 * large for that gets a file of its own); the total tensor bytes. */
static uint64_t plan_shards(const struct pt_xlist *xl, const size_t *idx,
			    size_t n, uint64_t max, size_t *first, size_t *ns)
{
	struct pt_buf base;
	uint64_t fill = 0, total = 0, head;
	size_t i;

	pt_buf_init(&base);
	pt__st_header(xl, idx, 0, &base);      /* the metadata part */
	head = 8 + base.len;
	pt_buf_free(&base);
	*ns = 0;
	for (i = 0; i < n; i++) {
		uint64_t b = xl->v[idx[i]].ti.nbytes + entry_bound(&xl->v[idx[i]]);

		if (i == 0 || fill + b > max) {
			first[(*ns)++] = i;
			fill = head;
		}
		fill += b;
		total += xl->v[idx[i]].ti.nbytes;
	}
	if (n == 0)
		first[(*ns)++] = 0;
	first[*ns] = n;
	return total;
}

/* Hub-style shards of at most opts->shard_size bytes each (a larger tensor
 * alone) and the index; model.safetensors alone when one shard does. */
static int write_shards(struct pt_ckpt *ck, const struct pt_xlist *xl,
			const size_t *idx, size_t n, const char *dir,
			const struct pt_export_opts *opts, struct pt_error *err)
{
	size_t *first = malloc((n + 2) * sizeof(*first)), ns = 0, i, s;
	uint64_t total;
	struct pt_buf name, ix;
	struct pt_xout *o = calloc(n + 2, sizeof(*o));
	bool made;
	int rc = 0;

	if (!first || !o) {
		free(first);
		free(o);
		return pt_fail(err, -ENOMEM, "out of memory");
	}
	for (i = 0; i < n + 2; i++)
		o[i].fd = -1;
	made = mkdir(dir, 0777) == 0;
	if (!made && errno != EEXIST) {
		free(first);
		free(o);
		return pt_fail(err, -errno, "%s: %s", dir, strerror(errno));
	}
	total = plan_shards(xl, idx, n, opts->shard_size, first, &ns);
	pt_buf_init(&name);
	pt_buf_init(&ix);
	pt_buf_printf(&ix, "{\n  \"metadata\": {\n    \"total_size\": %" PRIu64 "\n  },\n  \"weight_map\": {",
		      total);
	for (s = 0; s < ns && !rc; s++) {
		name.len = 0;
		if (ns == 1)
			pt_buf_printf(&name, "%s/model.safetensors", dir);
		else
			pt_buf_printf(&name, "%s/model-%05zu-of-%05zu.safetensors",
				      dir, s + 1, ns);
		rc = write_file(ck, xl, idx + first[s], first[s + 1] - first[s],
				name.p, opts, &o[s], err);
		for (i = first[s]; i < first[s + 1]; i++) {
			const char *k = xl->v[idx[i]].key;
			pt_buf_puts(&ix, i ? ",\n    \"" : "\n    \"");
			json_str(&ix, k);
			pt_buf_puts(&ix, "\": \"");
			pt_buf_puts(&ix, strrchr(name.p, '/') + 1);
			pt_buf_putc(&ix, '"');
		}
	}
	pt_buf_puts(&ix, "\n  }\n}\n");
	if (!rc && ns > 1) {
		name.len = 0;
		pt_buf_printf(&name, "%s/model.safetensors.index.json", dir);
		rc = pt_xout_open(&o[ns], name.p, err);
		o[ns].nosync = opts->no_fsync;
		if (!rc)
			rc = pt_xout_write(&o[ns], ix.p, ix.len, err);
	}
	/* every shard written: only now do they (then the index) appear */
	for (s = 0; s <= ns && !rc; s++)
		if (o[s].path)
			rc = pt_xout_commit(&o[s], ck, err);
	for (s = 0; s <= ns; s++)
		pt_xout_abort(&o[s]);
	if (rc && made)
		(void)rmdir(dir);       /* the directory we made, if still empty */
	free(o);
	pt_buf_free(&name);
	pt_buf_free(&ix);
	free(first);
	return rc;
}

int pt_export_safetensors(struct pt_ckpt *ck, const char *out,
			  const struct pt_export_opts *opts,
			  struct pt_buf *notes, struct pt_error *err)
{
	struct pt_xlist xl;
	size_t *idx = NULL, n = 0;
	int rc;

	rc = pt_export_collect(ck, &xl, notes, err);
	if (rc)
		return rc;
	rc = pt__st_plan(&xl, opts, &idx, &n, notes, err);
	if (!rc && n == 0)
		rc = pt_fail(err, -ENODATA, "%s", xl.n ?
			     "every tensor was left out: nothing to export" :
			     "the tree holds no tensor: nothing to export");
	if (!rc && opts->shard_size) {
		rc = write_shards(ck, &xl, idx, n, out, opts, err);
	} else if (!rc) {
		struct pt_xout o = { .fd = -1 };

		rc = write_file(ck, &xl, idx, n, out, opts, &o, err);
		if (!rc)
			rc = pt_xout_commit(&o, ck, err);
		pt_xout_abort(&o);
	}
	free(idx);
	pt_export_list_free(&xl);
	return rc;
}

/* ---- the generated form: /.ptfs/export/model.safetensors ----
 * The same bytes `ptfs export --to safetensors --skip-unsupported`
 * writes.  Its size is exact before any read; a read is served from the
 * header in memory and the tensors' bytes through pt__view_read_swapped(),
 * and a range that lies in one contiguous tensor is offered as an extent
 * (zero copy). */

struct st_item {
	struct pt_node *node;
	struct pt_tinfo ti;
	uint64_t start;                 /* offset in the generated file */
};

struct st_vf {
	struct pt_ckpt *ck;
	uint8_t *head;                  /* 8-byte length + header */
	size_t hlen;
	struct st_item *it;
	size_t n;
};

/* The last item starting at or before @off. */
static size_t st_find(const struct st_vf *v, uint64_t off)
{
	size_t lo = 0, hi = v->n;

	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;
		if (v->it[mid].start <= off)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

static int st_read(void *ctx, void *buf, size_t n, uint64_t off,
		   struct pt_error *err)
{
	const struct st_vf *v = ctx;
	uint8_t *p = buf;
	int rc;

	if (off < v->hlen) {
		size_t k = v->hlen - off < n ? (size_t)(v->hlen - off) : n;
		memcpy(p, v->head + off, k);
		p += k;
		n -= k;
		off += k;
	}
	while (n > 0) {
		const struct st_item *it = &v->it[st_find(v, off)];
		uint64_t rel = off - it->start, left = it->ti.nbytes - rel;
		size_t k = left < n ? (size_t)left : n;

		if (rel >= it->ti.nbytes)
			return pt_fail(err, -EIO, "generated safetensors: offset %llu outside its tensors",
				       (unsigned long long)off);
		rc = pt__view_read_swapped(v->ck, it->node, &it->ti, p, k, rel,
				it->ti.byteorder == '>', err);
		if (rc)
			return rc;
		p += k;
		n -= k;
		off += k;
	}
	return 0;
}

static bool st_extent(void *ctx, uint64_t off, uint64_t n, int *fd,
		      uint64_t *file_off)
{
	const struct st_vf *v = ctx;
	const struct st_item *it;

	if (off < v->hlen || v->n == 0)
		return false;
	it = &v->it[st_find(v, off)];
	if (it->ti.byteorder == '>' || off - it->start + n > it->ti.nbytes)
		return false;
	return pt_node_extent(v->ck, it->node, off - it->start, n, fd, file_off);
}

static void st_free(void *ctx)
{
	struct st_vf *v = ctx;

	free(v->head);
	free(v->it);
	free(v);
}

int pt__st_mount_files(struct pt_ckpt *ck, struct pt_vdir *d,
		       const struct pt_xlist *xl, struct pt_error *err)
{
	struct pt_export_opts o = { .skip_unsupported = true };
	struct pt_vfile vf = { 0 };
	struct pt_buf notes, h;
	struct st_vf *v = NULL;
	size_t *idx = NULL, n = 0, i;
	uint64_t at;
	int rc;

	pt_buf_init(&notes);
	pt_buf_init(&h);
	rc = pt__st_plan(xl, &o, &idx, &n, &notes, err);
	pt_buf_free(&notes);
	if (rc) {                       /* colliding keys: no such file */
		pt_error_clear(err);
		return rc == -ENOMEM ? rc : 0;
	}
	pt_buf_add(&h, "\0\0\0\0\0\0\0\0", 8);
	pt__st_header(xl, idx, n, &h);
	v = calloc(1, sizeof(*v));
	if (h.oom || !v || !(v->it = calloc(n ? n : 1, sizeof(*v->it)))) {
		rc = -ENOMEM;
		goto fail;
	}
	for (i = 0; i < 8; i++)
		h.p[i] = (char)((uint64_t)(h.len - 8) >> (8 * i));
	v->ck = ck;
	v->n = n;
	v->hlen = h.len;
	v->head = (uint8_t *)pt_buf_take(&h, NULL);
	for (i = 0, at = v->hlen; i < n; i++) {
		v->it[i].node = xl->v[idx[i]].node;
		v->it[i].ti = xl->v[idx[i]].ti;
		v->it[i].start = at;
		at += v->it[i].ti.nbytes;
	}
	free(idx);
	vf = (struct pt_vfile){ at, st_read, st_extent, st_free, v, NULL };
	rc = pt_vdir_add(d, "model.safetensors", &vf);
	if (rc)
		st_free(v);
	return rc;
fail:
	pt_buf_free(&h);
	if (v)
		free(v->it);
	free(v);
	free(idx);
	return rc;
}
