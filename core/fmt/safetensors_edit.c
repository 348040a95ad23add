/* SPDX-License-Identifier: MIT */
/*
 * safetensors_edit.c -- a safetensors file after structural edits
 * (ckpt/edit.c): a new header for the tensors the edited root dict holds,
 * in its order, "__metadata__" as it was, and their bytes laid out one
 * after the other behind it (docs/FORMATS.md, "Restructuring a
 * safetensors file").  The file is written whole beside the old one and
 * renamed over it (container/replace.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

#include "base/json.h"
#include "ckpt/ckpt_i.h"
#include "container/replace.h"

/* The header's name of a torch dtype (docs/FORMATS.md, "safetensors
 * header"). */
static const char *st_name(const char *torch)
{
	static const char *const map[][2] = {
		{ "bool", "BOOL" }, { "uint8", "U8" }, { "int8", "I8" },
		{ "float8_e5m2", "F8_E5M2" }, { "float8_e4m3fn", "F8_E4M3" },
		{ "float8_e8m0fnu", "F8_E8M0" }, { "float8_e4m3fnuz", "F8_E4M3FNUZ" },
		{ "float8_e5m2fnuz", "F8_E5M2FNUZ" }, { "int16", "I16" },
		{ "uint16", "U16" }, { "float16", "F16" }, { "bfloat16", "BF16" },
		{ "int32", "I32" }, { "uint32", "U32" }, { "float32", "F32" },
		{ "complex64", "C64" }, { "float64", "F64" }, { "int64", "I64" },
		{ "uint64", "U64" }, { "float4_e2m1fn_x2", "F4" },
	};
	size_t i;

	for (i = 0; i < sizeof(map) / sizeof(map[0]); i++)
		if (strcmp(map[i][0], torch) == 0)
			return map[i][1];
	return NULL;
}

/* The tensors the root dict holds now: each a whole storage. */
static int st_list(struct pt_ckpt *ck, const struct pt_tensor ***out,
		   size_t *n, struct pt_error *err)
{
	const struct pt_vseq *kv = &ck->root->u.dict.kv;
	const struct pt_tensor **t;
	size_t i;

	if (ck->root->kind != PT_V_DICT)
		return pt_fail(err, -EINVAL, "the root is no longer a dict");
	t = calloc(kv->n / 2 + 1, sizeof(*t));
	if (!t)
		return pt_fail(err, -ENOMEM, "out of memory");
	for (i = 0; i + 1 < kv->n; i += 2) {
		const struct pt_value *k = kv->v[i], *v = kv->v[i + 1];
		const struct pt_tensor *x = v->aux16 == PT_C_TENSOR ? v->aux : NULL;

		if (k->kind != PT_V_STR || !x) {
			free(t);
			return pt_fail(err, -EINVAL,
				       "a safetensors file holds tensors only: '%.*s' is not one",
				       (int)(k->kind == PT_V_STR && k->u.s.len < 200 ? k->u.s.len : 0),
				       (const char *)k->u.s.p);
		}
		if (!st_name(x->dtype->name) || !x->contiguous || x->byte_lo ||
		    x->nbytes != x->st->nbytes) {
			free(t);
			return pt_fail(err, -EINVAL, "'%.*s': a %s tensor safetensors cannot hold",
				       (int)(k->u.s.len < 200 ? k->u.s.len : 200),
				       (const char *)k->u.s.p, x->dtype->name);
		}
		t[i / 2] = x;
	}
	*out = t;
	*n = kv->n / 2;
	return 0;
}

/* The new header, padded with spaces to a multiple of 8. */
static int st_header(struct pt_ckpt *ck, const struct pt_tensor **t, size_t n,
		     struct pt_buf *h)
{
	const struct pt_vseq *kv = &ck->root->u.dict.kv;
	uint64_t at = 0;
	size_t i;
	int k;

	pt_buf_putc(h, '{');
	for (k = 0; k < ck->n_meta_files; k++)
		if (strcmp(ck->meta_files[k].name, "metadata.json") == 0) {
			size_t len = ck->meta_files[k].len;

			/* the object as the header had it, less the newline
			 * the file ends with */
			while (len && ck->meta_files[k].data[len - 1] == '\n')
				len--;
			pt_buf_puts(h, "\"__metadata__\":");
			pt_buf_add(h, ck->meta_files[k].data, len);
			if (n)
				pt_buf_putc(h, ',');
		}
	for (i = 0; i < n; i++) {
		const struct pt_value *key = kv->v[2 * i];
		uint32_t d;

		pt_buf_putc(h, '"');
		pt_json_str(h, key->u.s.p, key->u.s.len);
		pt_buf_printf(h, "\":{\"dtype\":\"%s\",\"shape\":[", st_name(t[i]->dtype->name));
		for (d = 0; d < t[i]->rank; d++)
			pt_buf_printf(h, "%s%" PRId64, d ? "," : "", t[i]->shape[d]);
		pt_buf_printf(h, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}%s",
			      at, at + t[i]->nbytes, i + 1 < n ? "," : "");
		at += t[i]->nbytes;
	}
	pt_buf_putc(h, '}');
	while (h->len % 8)
		pt_buf_putc(h, ' ');
	return h->oom ? -ENOMEM : 0;
}

/* The bytes of tensor @t to @at of the new file: copied from the old one
 * (shared where the filesystem can), or written from memory. */
static int st_data(const struct pt_ckpt *ck, struct pt_replace *r,
		   const struct pt_tensor *t, uint64_t at, struct pt_error *err)
{
	const struct pt_storage *st = t->st;

	if (st->kind == PT_ST_MEM)
		return pt_replace_write(r, st->mem, st->nbytes, at, err);
	if (st->kind == PT_ST_NONE || st->nbytes == 0)
		return 0;
	/* (a shard's own storages name the shard as their home:
	 * fmt/sharded.c) */
	if (st->kind != PT_ST_FILE || (st->home && st->home != ck))
		return pt_fail(err, -EINVAL, "storage '%s' is not in the file", st->key);
	return pt_replace_copy(r, r->orig, st->file_off, st->nbytes, at, err);
}

/* Write the new file beside the old one, then rename it over the old
 * one, or seal it into *@sealed (struct pt_format.stage). */
static int st_write(struct pt_ckpt *ck, const struct pt_tensor **t, size_t n,
		    const struct pt_buf *h, uint64_t total,
		    struct pt_replace *sealed, struct pt_error *err)
{
	struct pt_replace r;
	struct pt_replace_expect ex = { 0 };
	struct statvfs vfs;
	uint8_t len8[8];
	uint64_t at;
	size_t i;
	int rc;

	ex.size = (off_t)ck->src->size;
	ex.mtime = ck->src->mtime;
	rc = pt_replace_begin(&r, pt_source_local_path(ck->src), &ex, err);
	if (rc)
		return rc;
	if (fstatvfs(r.fd, &vfs) == 0 &&
	    (uint64_t)vfs.f_bavail * vfs.f_frsize < total) {
		rc = pt_fail(err, -ENOSPC, "needs %" PRIu64 " bytes beside %s, %" PRIu64 " free: %s",
			     total, r.real, (uint64_t)vfs.f_bavail * vfs.f_frsize,
			     strerror(ENOSPC));
		pt_replace_abort(&r);
		return rc;
	}
	for (i = 0; i < 8; i++)
		len8[i] = (uint8_t)(h->len >> (8 * i));
	rc = pt_replace_write(&r, len8, 8, 0, err);
	if (rc == 0)
		rc = pt_replace_write(&r, h->p, h->len, 8, err);
	for (i = 0, at = 8 + h->len; rc == 0 && i < n; at += t[i++]->nbytes)
		rc = st_data(ck, &r, t[i], at, err);
	if (rc) {
		pt_replace_abort(&r);
		return rc;
	}
	if (!sealed)
		return pt_replace_commit(&r, err);
	rc = pt_replace_seal(&r, err);
	if (rc == 0)
		*sealed = r;
	return rc;
}

/* The new file: its size in *@size (@dry), sealed into *@sealed, or
 * renamed over the old one (with ck->last_commit). */
static int st_restructure(struct pt_ckpt *ck, bool dry, uint64_t *size,
			  struct pt_replace *sealed, struct pt_error *err)
{
	const struct pt_tensor **t = NULL;
	struct pt_buf h;
	uint64_t total;
	size_t n = 0, i;
	int rc = st_list(ck, &t, &n, err);

	pt_buf_init(&h);
	if (rc == 0 && st_header(ck, t, n, &h))
		rc = pt_fail(err, -ENOMEM, "out of memory");
	total = 8 + h.len;
	for (i = 0; rc == 0 && i < n; i++)
		total += t[i]->nbytes;
	if (rc == 0 && dry)
		*size = total;
	else if (rc == 0 && sealed)
		rc = st_write(ck, t, n, &h, total, sealed, err);
	else if (rc == 0)
		rc = pt__commit_end(ck, st_write(ck, t, n, &h, total, NULL, err),
				    PT_COMMIT_REWRITE, total, err);
	pt_buf_free(&h);
	free(t);
	return rc;
}

/* struct pt_format.restructure of safetensors files. */
int pt__st_restructure(struct pt_ckpt *ck, bool dry, uint64_t *size,
		       struct pt_error *err)
{
	return st_restructure(ck, dry, size, NULL, err);
}

/* struct pt_format.stage of safetensors files. */
int pt__st_stage(struct pt_ckpt *ck, struct pt_replace *sealed,
		 struct pt_error *err)
{
	return st_restructure(ck, false, NULL, sealed, err);
}
