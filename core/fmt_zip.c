/* SPDX-License-Identifier: MIT */
/*
 * fmt_zip.c -- the torch.save ZIP container (FORMAT.md §1-§3), and the
 * TorchScript archives that share it (§5: data.pkl + data/<key>).
 *
 * The object is the pickle in <prefix>/data.pkl; each persistent id
 * ('storage', <class>, key, location, numel) names the record
 * <prefix>/data/<key>, served from the file when stored and inflated once
 * when deflated.
 */
#include "ckpt_i.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool zip_probe(const struct pt_ckpt *ck, const uint8_t *head, size_t n)
{
	(void)ck;
	return n >= 4 && head[0] == 'P' && head[1] == 'K' && head[2] == 3 &&
	       head[3] == 4;
}

/* A small text record ("version", "byteorder"), trimmed; NULL if absent. */
static char *small_record(struct pt_ckpt *ck, const char *rel,
			  struct pt_error *err, int *rc)
{
	const struct pt_zip_entry *e = pt_zip_find_rel(ck->zip, rel);
	uint8_t *buf = NULL;
	size_t len = 0;

	*rc = 0;
	if (!e)
		return NULL;
	if (e->usize > 4096) {
		*rc = pt_fail(err, -EBADMSG, "record '%s' is %" PRIu64 " bytes, too large",
			      e->name, e->usize);
		return NULL;
	}
	*rc = pt_zip_read(ck->zip, e, &buf, &len, err);
	if (*rc)
		return NULL;
	while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r' ||
			   buf[len - 1] == ' ' || buf[len - 1] == '\0'))
		buf[--len] = '\0';
	return pt__own(ck, buf);
}

static int zip_open(struct pt_ckpt *ck, struct pt_error *err)
{
	const struct pt_zip_entry *pkl;
	const char *bo;
	uint8_t *buf = NULL;
	size_t len = 0;
	int rc;

	rc = pt_zip_open(&ck->zip, &ck->src, &ck->opts.limits, err);
	if (rc)
		return rc;
	pkl = pt_zip_find_rel(ck->zip, "data.pkl");
	if (!pkl) {
		if (pt_zip_find_rel(ck->zip, "model.json"))
			return pt_fail(err, -ENOTSUP,
				       "TorchScript archive in the 2019 layout (model.json, tensors/): not supported");
		if (pt_zip_find_rel(ck->zip, "archive_format") ||
		    pt_zip_find(ck->zip, "serialized_exported_program.json"))
			return pt_fail(err, -ENOTSUP,
				       "torch.export (.pt2) archive: not supported");
		return pt_fail(err, -ENOTSUP,
			       "ZIP archive without a data.pkl record: not a torch.save checkpoint");
	}
	ck->version = small_record(ck, "version", err, &rc);
	if (rc)
		return rc;
	if (!ck->version) {
		ck->version = small_record(ck, ".data/version", err, &rc);
		if (rc)
			return rc;
	}
	bo = small_record(ck, "byteorder", err, &rc);
	if (rc)
		return rc;
	if (bo && strcmp(bo, "big") == 0)
		ck->byteorder = '>';
	else if (bo && strcmp(bo, "little") != 0)
		return pt_fail(err, -EBADMSG, "byteorder record says '%.20s', not little or big", bo);
	if (pt_zip_find_rel(ck->zip, "constants.pkl"))
		ck->kind_name = "TorchScript archive (zip)";
	rc = pt_zip_read(ck->zip, pkl, &buf, &len, err);
	if (rc)
		return rc;
	return pt__load_pickle(ck, buf, len, "data.pkl",
			       pkl->method == PT_ZIP_STORED ? pkl->data_off : UINT64_MAX,
			       &ck->root, NULL, err);
}

/* The text of a str (or Python 2 bytes) value, NUL-terminated in @tmp. */
static bool pid_text(const struct pt_value *v, char *tmp, size_t cap)
{
	if (!v || (v->kind != PT_V_STR && v->kind != PT_V_BYTES) ||
	    v->u.s.len >= cap || memchr(v->u.s.p, '\0', v->u.s.len))
		return false;
	memcpy(tmp, v->u.s.p, v->u.s.len);
	tmp[v->u.s.len] = '\0';
	return true;
}

static int zip_storage(struct pt_ckpt *ck, const struct pt_value *pidv,
		       struct pt_storage **out, struct pt_error *err)
{
	const struct pt_value *pid = pidv->u.pid;
	const struct pt_value *cls;
	const struct pt_zip_entry *e;
	const struct pt_dtype *dt;
	struct pt_storage *st;
	char key[256], loc[64], rel[300];
	int64_t numel = -1;
	uint64_t need;

	if (!pid || pid->kind != PT_V_TUPLE || pid->u.seq.n < 5 ||
	    !pid_text(pid->u.seq.v[0], key, sizeof(key)) ||
	    strcmp(key, "storage") != 0)
		return pt_fail(err, -EBADMSG,
			       "persistent id is not a ('storage', type, key, location, numel) tuple");
	cls = pid->u.seq.v[1];
	if (!pid_text(pid->u.seq.v[2], key, sizeof(key)))
		return pt_fail(err, -EBADMSG, "persistent id: storage key is not a short string");
	if (!pid_text(pid->u.seq.v[3], loc, sizeof(loc)))
		loc[0] = '\0';
	if (pid->u.seq.v[4]->kind == PT_V_INT)
		numel = pid->u.seq.v[4]->u.i;
	if (numel < 0)
		return pt_fail(err, -EBADMSG, "storage '%s': element count is not a non-negative integer", key);
	HASH_FIND_STR(ck->storages, key, st);
	if (st) {
		*out = st;
		return 0;
	}
	if (cls->kind != PT_V_GLOBAL)
		return pt_fail(err, -EBADMSG, "storage '%s': type is not a global", key);
	dt = pt_dtype_from_storage(cls->u.global.name);
	if (!dt)
		return pt_fail(err, -ENOTSUP, "storage '%s': unknown storage type %s.%s",
			       key, cls->u.global.module, cls->u.global.name);
	snprintf(rel, sizeof(rel), "data/%s", key);
	e = pt_zip_find_rel(ck->zip, rel);
	if (!e)
		return pt_fail(err, -EBADMSG, "storage '%s': record '%s' is missing", key, rel);
	if (!pt_mul_u64((uint64_t)numel, dt->size, &need))
		return pt_fail(err, -EBADMSG, "storage '%s': size overflows", key);
	st = calloc(1, sizeof(*st));
	if (!st || !pt__own(ck, st))
		return pt_fail(err, -ENOMEM, "out of memory");
	st->key = pt__own(ck, strdup(key));
	st->location = loc[0] ? pt__own(ck, strdup(loc)) : NULL;
	if (!st->key)
		return pt_fail(err, -ENOMEM, "out of memory");
	st->dtype = dt;
	st->entry = e;
	st->nbytes = e->usize;
	st->id = ck->n_storages++;
	if (e->usize == 0 && need > 0) {
		/* TorchScript meta tensors: an empty record on purpose */
		st->kind = PT_ST_NONE;
		st->nbytes = need;
	} else if (e->usize < need) {
		return pt_fail(err, -EBADMSG,
			       "storage '%s': record '%s' has %" PRIu64 " bytes, the pickle says %" PRIu64,
			       key, e->name, e->usize, need);
	} else if (e->method == PT_ZIP_STORED) {
		st->kind = PT_ST_FILE;
		st->file_off = e->data_off;
	} else {
		st->kind = PT_ST_ZIP;
	}
	HASH_ADD_KEYPTR(hh, ck->storages, st->key, strlen(st->key), st);
	*out = st;
	return 0;
}

const struct pt_format pt_fmt_zip = {
	.name = "torch.save zip",
	.probe = zip_probe,
	.open = zip_open,
	.storage = zip_storage,
	.close = NULL,
};
