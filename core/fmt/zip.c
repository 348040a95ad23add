/* SPDX-License-Identifier: MIT */
/*
 * zip.c -- the torch.save ZIP container (docs/FORMATS.md, "torch.save ZIP
 * archives"), and the TorchScript archives that share it (data.pkl +
 * data/<key>).
 *
 * The object is the pickle in <prefix>/data.pkl; each persistent id
 * ('storage', <class>, key, location, numel) names the record
 * <prefix>/data/<key>, served from the file when stored and inflated once
 * when deflated.
 *
 * A TorchScript archive (constants.pkl present) also has constants.pkl and,
 * for the lite interpreter (.ptl), bytecode.pkl, whose persistent ids name
 * records under constants/ (docs/FORMATS.md, "TorchScript records and
 * constants").  Those two pickles are classified here, during open, with the
 * record folder set to constants/, and shown as /.ptfs/constants (c0, c1,
 * ...) and /.ptfs/bytecode; ckpt.c then classifies data.pkl with the folder
 * back at data/.  Storage keys outside data/ are hashed as "constants/<key>"
 * so the two folders' "0" do not collide.
 */
#include "ckpt/ckpt_i.h"
#include "container/zippatch.h"
#include "container/zipwrite.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Which record folder the pickle being classified resolves pids in. */
struct zip_state {
	const char *dir;                /* "data" or "constants" */
	/* the storage class of the last pid: a pickle memoises the class
	 * global, so 20,000 pids name one node and the dtype table is
	 * searched once */
	const struct pt_value *last_cls;
	uint32_t last_cls_id;           /* with the address: a lean load
					 * (pt_pickle_load_lean) reuses the
					 * memory of nodes it gives back */
	const struct pt_dtype *last_dt;
	/* the last persistent id resolved, by address and id like last_cls:
	 * a strided rebuild asks for its storage twice (the walk's visit of
	 * its argument, then rebuild_strided()) */
	const struct pt_value *last_pid;
	uint32_t last_pid_id;
	struct pt_storage *last_st;
	/* storages under data/ by their decimal key ("0", "1", ...: what
	 * torch writes), so a pid costs an array index, not a hash probe
	 * that misses; other keys go through pt__storage_find() alone */
	struct pt_storage **by_num;
	const struct pt_zip_entry **rec_num; /* <prefix>/data/<n> records */
	size_t n_num;
};

/* The key as a small index: canonical decimal below @n, else SIZE_MAX. */
static size_t key_index(const char *key, size_t n)
{
	size_t v = 0;
	const char *p;

	if (!key[0] || (key[0] == '0' && key[1]))
		return SIZE_MAX;
	for (p = key; *p; p++) {
		if (*p < '0' || *p > '9' || v >= n)
			return SIZE_MAX;
		v = v * 10 + (size_t)(*p - '0');
	}
	return v < n ? v : SIZE_MAX;
}

int pt__zip_probe(struct pt_ckpt *ck, const uint8_t *head, size_t n,
		  struct pt_error *err)
{
	int rc;

	if (n < 4 || memcmp(head, "PK\3\4", 4) != 0)
		return 0;
	if (!ck->zip) {
		rc = pt_zip_open(&ck->zip, ck->src, &ck->opts.limits, err);
		if (rc)
			return rc;
	}
	return 1;
}

/* Any ZIP the other formats of the family left. */
static int zip_probe(struct pt_ckpt *ck, const uint8_t *head, size_t n,
		     struct pt_error *err)
{
	return pt__zip_probe(ck, head, n, err);
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

/* Load the pickle record @rel, classify it with pids resolving under
 * @dir/, and return its root in *@root (NULL when there is no record). */
static int ts_pickle(struct pt_ckpt *ck, struct zip_state *zs,
		     const char *rel, const char *dir, struct pt_value **root,
		     struct pt_error *err)
{
	const struct pt_zip_entry *e = pt_zip_find_rel(ck->zip, rel);
	uint8_t *buf = NULL;
	size_t len = 0;
	int rc;

	*root = NULL;
	if (!e)
		return 0;
	rc = pt_zip_read(ck->zip, e, &buf, &len, err);
	if (rc)
		return rc;
	rc = pt__load_pickle(ck, buf, len, rel,
			     e->method == PT_ZIP_STORED ? e->data_off : UINT64_MAX,
			     root, NULL, err);
	if (rc)
		return rc;
	zs->dir = dir;
	zs->last_pid = NULL;
	rc = pt__classify_value(ck, *root, err);
	zs->dir = "data";
	zs->last_pid = NULL;
	if (rc)
		pt_error_prefix(err, "%s", rel);
	return rc;
}

/* constants.pkl's tuple as a dict c0, c1, ... (docs/FORMATS.md,
 * "TorchScript records and constants"); other roots as they are. */
static struct pt_value *ts_constants_dict(struct pt_ckpt *ck,
					  struct pt_value *tup)
{
	if (tup->kind != PT_V_TUPLE && tup->kind != PT_V_LIST)
		return tup;
	return pt__numbered_dict(ck, tup->u.seq.v, tup->u.seq.n);
}

/* TorchScript: constants.pkl, bytecode.pkl, code/ and extra/ shortcuts. */
static int ts_open(struct pt_ckpt *ck, struct zip_state *zs,
		   struct pt_error *err)
{
	struct pt_value *croot = NULL, *broot = NULL, *d;
	int rc;

	ck->kind_name = "TorchScript archive";
	rc = ts_pickle(ck, zs, "constants.pkl", "constants", &croot, err);
	if (rc)
		return rc;
	/* lite interpreter: its tensors share the constants/ folder */
	rc = ts_pickle(ck, zs, "bytecode.pkl", "constants", &broot, err);
	if (rc)
		return rc;
	if (broot)
		ck->kind_name = "TorchScript archive (lite interpreter, bytecode.pkl)";
	d = croot ? ts_constants_dict(ck, croot) : NULL;
	if (croot && !d)
		return pt_fail(err, -ENOMEM, "out of memory");
	if ((d && pt__add_meta_dir(ck, "constants", d, NULL)) ||
	    (broot && pt__add_meta_dir(ck, "bytecode", broot, NULL)) ||
	    pt__add_meta_dir(ck, "code", NULL, "code") ||
	    pt__add_meta_dir(ck, "extra", NULL, "extra"))
		return pt_fail(err, -EFBIG, "too many /.ptfs directories");
	return 0;
}

/* "module: <class>" for `ptfs info`: the class of data.pkl's root object
 * (restore_type_tag and friends looked through). */
static void ts_note_class(struct pt_ckpt *ck)
{
	const struct pt_value *v = ck->root;
	int hops = 0;

	while (v && v->kind == PT_V_CALL && hops++ < 16 &&
	       v->u.call.callable && v->u.call.callable->kind == PT_V_GLOBAL &&
	       strcmp(v->u.call.callable->u.global.module, "torch.jit._pickle") == 0 &&
	       v->u.call.args->u.seq.n >= 1)
		v = v->u.call.args->u.seq.v[0];
	if (v && (v->kind == PT_V_OBJ || v->kind == PT_V_CALL) &&
	    v->u.call.callable && v->u.call.callable->kind == PT_V_GLOBAL)
		pt_buf_printf(&ck->notes, "module: %.200s.%.200s\n",
			      v->u.call.callable->u.global.module,
			      v->u.call.callable->u.global.name);
}

/* One pass over the records: <prefix>/data/<n> by n, so that resolving
 * 20,000 storages walks an array instead of probing the name hash. */
static void index_data_records(struct pt_ckpt *ck, struct zip_state *zs)
{
	const char *prefix = pt_zip_info(ck->zip)->prefix;
	size_t plen = strlen(prefix), i;

	for (i = 0; i < zs->n_num; i++) {
		const struct pt_zip_entry *e = pt_zip_entry_at(ck->zip, i);
		const char *rest = e->name;
		size_t k;

		if (plen) {
			if (strncmp(rest, prefix, plen) != 0 || rest[plen] != '/')
				continue;
			rest += plen + 1;
		}
		if (strncmp(rest, "data/", 5) != 0)
			continue;
		k = key_index(rest + 5, zs->n_num);
		if (k != SIZE_MAX)
			zs->rec_num[k] = e;
	}
}

static int zip_load(struct pt_ckpt *ck, struct pt_error *err);

static int zip_open(struct pt_ckpt *ck, struct pt_error *err)
{
	struct zip_state *zs;
	int rc;

	if (!ck->zip) {
		rc = pt_zip_open(&ck->zip, ck->src, &ck->opts.limits, err);
		if (rc)
			return rc;
	}
	zs = calloc(1, sizeof(*zs));
	if (!zs || !pt__own(ck, zs))
		return pt_fail(err, -ENOMEM, "out of memory");
	zs->dir = "data";
	zs->n_num = (size_t)pt_zip_info(ck->zip)->n_entries;
	zs->by_num = calloc(zs->n_num ? zs->n_num : 1, sizeof(*zs->by_num));
	zs->rec_num = calloc(zs->n_num ? zs->n_num : 1, sizeof(*zs->rec_num));
	ck->fmt_state = zs;
	if (zs->by_num && zs->rec_num) {
		index_data_records(ck, zs);
		rc = zip_load(ck, err);
	} else {
		rc = pt_fail(err, -ENOMEM, "out of memory");
	}
	/* the numbered index served the load; later pids (TorchScript
	 * constants, a format's values) go through pt__storage_find() */
	free(zs->by_num);
	free(zs->rec_num);
	zs->by_num = NULL;
	zs->rec_num = NULL;
	zs->n_num = 0;
	return rc;
}

/* zip_open() once the numbered index is made: data.pkl and the small
 * records. */
static int zip_load(struct pt_ckpt *ck, struct pt_error *err)
{
	struct zip_state *zs = ck->fmt_state;
	const struct pt_zip_entry *pkl;
	const char *bo;
	uint8_t *buf = NULL;
	size_t len = 0;
	uint64_t off;
	int rc;

	pkl = pt_zip_find_rel(ck->zip, "data.pkl");
	if (!pkl) {
		/* the 2019 TorchScript layout and .pt2 archives are claimed
		 * by their own formats (fmt/torchscript_json.c, fmt/pt2.c) */
		if (pt_zip_find_rel(ck->zip, ".data/extern_modules"))
			return pt_fail(err, -ENOTSUP,
				       "torch.package archive: not supported");
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
	if (pt_zip_find_rel(ck->zip, "constants.pkl")) {
		rc = ts_open(ck, zs, err);
		if (rc)
			return rc;
	}
	rc = pt_zip_read(ck->zip, pkl, &buf, &len, err);
	if (rc)
		return rc;
	off = pkl->method == PT_ZIP_STORED ? pkl->data_off : UINT64_MAX;
	if (ck->opts.editable)          /* surgery re-emits every argument */
		rc = pt__load_pickle(ck, buf, len, "data.pkl", off, &ck->root,
				     NULL, err);
	else
		rc = pt__load_pickle_lean(ck, buf, len, "data.pkl", off,
					  &ck->root, pt__classify_reduce, err);
	pt_vstack_free(&ck->lean_stack);
	if (rc == 0 && ck->opts.lean)
		pt__unpin_pickle(ck, ck->n_pickles - 1);
	if (rc == 0 && ck->kind_name)
		ts_note_class(ck);
	return rc;
}

/* ---- commits: through the ZIP64 rewriter (container/zipwrite.h) ---- */

static int commit_read(void *ctx, void *buf, size_t n, uint64_t off)
{
	const struct pt_commit *c = ctx;

	return c->read(c->ctx, buf, n, off);
}

/* The ZIP64 rewriter: every record written again (records may move). */
static int zip_rewrite(struct pt_ckpt *ck, const struct pt_commit *c,
		       size_t n, uint32_t *crcs, struct pt_error *err)
{
	struct pt_zw_change *ch = calloc(n, sizeof(*ch));
	struct pt_commit *cc = calloc(n, sizeof(*cc));
	size_t i;
	int rc;

	if (!ch || !cc) {
		free(ch);
		free(cc);
		return pt_fail(err, -ENOMEM, "out of memory");
	}
	memcpy(cc, c, n * sizeof(*cc));
	for (i = 0; i < n; i++) {
		ch[i].entry = c[i].st->entry;
		ch[i].size = c[i].st->nbytes;
		ch[i].read = commit_read;
		ch[i].ctx = &cc[i];
		ch[i].crc_out = &crcs[i];
	}
	/* the rewriter checks the file against the source it indexed
	 * (pt_source_check, PT_CHECK_NAME) */
	rc = pt_zip_rewrite(pt_source_local_path(ck->src), ck->zip, ch, n,
			    NULL, NULL, err);
	ck->commit_moved = rc == 0;
	free(ch);
	free(cc);
	return rc;
}

/* Same-size changes of stored records as patches (container/zippatch.h),
 * applied the way -o commit says; 1 when it is the rewriter's job. */
static int zip_patch(struct pt_ckpt *ck, const struct pt_commit *c, size_t n,
		     uint32_t *crcs, enum pt_commit_way *used, uint64_t *bytes,
		     struct pt_error *err)
{
	struct pt_zp_change *ch = calloc(n, sizeof(*ch));
	const struct pt_zip_entry *e;
	struct pt_zp_plan plan;
	size_t i;
	int fd = -1;
	uint64_t base = 0;
	int rc;

	if (!ch)
		return pt_fail(err, -ENOMEM, "out of memory");
	for (i = 0; i < n; i++) {
		ch[i].entry = c[i].st->entry;
		ch[i].size = c[i].st->nbytes;
		ch[i].ranges = c[i].ranges;
		ch[i].n_ranges = c[i].n_ranges;
		ch[i].read = c[i].read;
		ch[i].ctx = c[i].ctx;
	}
	e = pt_zip_entry_at(ck->zip, 0);
	rc = 1;
	if (e && pt_source_extent(ck->src, 0, ck->src->size, &fd, &base) && base == 0)
		rc = pt_zip_plan(ck->zip, fd, ch, n, &plan, err);
	if (rc == 0) {
		/* the file must still be the one the plan read */
		rc = pt__commit_patch(ck, plan.p, plan.n, true, used, err);
		*bytes = plan.bytes;
		if (rc == 0)
			memcpy(crcs, plan.crcs, n * sizeof(*crcs));
		pt_zip_plan_free(&plan);
	}
	free(ch);
	return rc;
}

/* struct pt_format.commit: patch what changed (clone, in place) or rewrite
 * the archive, as -o commit says; then take the new CRC-32s into ck->zip. */
static int zip_commit(struct pt_ckpt *ck, const struct pt_commit *c,
		      size_t n, struct pt_error *err)
{
	enum pt_commit_way used = PT_COMMIT_REWRITE;
	uint64_t bytes = 0;
	uint32_t *crcs;
	size_t i;
	int rc;

	for (i = 0; i < n; i++)
		if (!c[i].st->entry)
			return pt_fail(err, -EROFS, "storage '%s' cannot be written",
				       c[i].st->key);
	rc = pt_source_check(ck->src, PT_CHECK_NAME, err);
	if (rc)
		return rc;
	crcs = calloc(n, sizeof(*crcs));
	if (!crcs)
		return pt_fail(err, -ENOMEM, "out of memory");
	rc = zip_patch(ck, c, n, crcs, &used, &bytes, err);
	if (rc == 1) {
		used = PT_COMMIT_REWRITE;
		rc = zip_rewrite(ck, c, n, crcs, err);
	}
	rc = pt__commit_end(ck, rc, used,
			    used == PT_COMMIT_REWRITE ? ck->src->size : bytes, err);
	for (i = 0; rc == 0 && i < n; i++)
		pt_zip_set_crc(ck->zip, c[i].st->entry, crcs[i]);
	free(crcs);
	return rc;
}

struct pt_storage *pt__record_storage(struct pt_ckpt *ck,
				      const struct pt_zip_entry *e,
				      const char *key, const char *location,
				      size_t loc_len, const struct pt_dtype *dt)
{
	size_t klen = strlen(key);
	struct pt_storage *st = pt__alloc(ck, sizeof(*st) + klen + 1);

	if (!st)
		return NULL;
	/* the key right behind it: one allocation per storage */
	memcpy((char *)(st + 1), key, klen + 1);
	st->key = (const char *)(st + 1);
	/* nearly every storage says "cpu": share that one */
	if (loc_len == 3 && memcmp(location, "cpu", 3) == 0)
		st->location = "cpu";
	else if (location && loc_len && loc_len < 64 &&
		 !memchr(location, '\0', loc_len))
		st->location = pt__own(ck, strndup(location, loc_len));
	st->dtype = dt;
	st->entry = e;
	st->nbytes = e->usize;
	st->id = ck->n_storages++;
	if (e->method == PT_ZIP_STORED) {
		st->kind = PT_ST_FILE;
		st->file_off = e->data_off;
		st->writable = ck->fmt && ck->fmt->commit == zip_commit;
	} else {
		st->kind = PT_ST_ZIP;
	}
	if (pt__storage_add(ck, st))
		return NULL;
	return st;
}

static int zip_storage(struct pt_ckpt *ck, const struct pt_value *pidv,
		       struct pt_storage **out, struct pt_error *err)
{
	struct zip_state *zs = ck->fmt_state;
	const struct pt_value *pid = pidv->u.pid;
	const struct pt_value *cls;
	const struct pt_zip_entry *e;
	const struct pt_dtype *dt;
	struct pt_storage *st;
	char key[256], loc[64], rel[300];
	const char *hkey;
	size_t slot;
	int64_t numel = -1;
	uint64_t need;

	if (pidv == zs->last_pid && pidv->id == zs->last_pid_id) {
		*out = zs->last_st;
		return 0;
	}
	if (!pid || pid->kind != PT_V_TUPLE || pid->u.seq.n < 5 ||
	    !pt_value_text(pid->u.seq.v[0], key, sizeof(key)) ||
	    strcmp(key, "storage") != 0)
		return pt_fail(err, -EBADMSG,
			       "persistent id is not a ('storage', type, key, location, numel) tuple");
	cls = pid->u.seq.v[1];
	if (!pt_value_text(pid->u.seq.v[2], key, sizeof(key)))
		return pt_fail(err, -EBADMSG, "persistent id: storage key is not a short string");
	if (!pt_value_text(pid->u.seq.v[3], loc, sizeof(loc)))
		loc[0] = '\0';
	if (pid->u.seq.v[4]->kind == PT_V_INT)
		numel = pid->u.seq.v[4]->u.i;
	if (numel < 0)
		return pt_fail(err, -EBADMSG, "storage '%s': element count is not a non-negative integer", key);
	/* the record; the hash key is "<key>" under data/ and
	 * "<dir>/<key>" elsewhere (constants/0 is not data/0).  The path
	 * is spelled out only when the numbered index cannot answer: this
	 * runs twice per storage, and the snprintf was 2% of `ptfs info` */
	hkey = strcmp(zs->dir, "data") == 0 ? key : NULL;
	slot = hkey ? key_index(key, zs->n_num) : SIZE_MAX;
	if (slot == SIZE_MAX || !zs->rec_num[slot]) {
		snprintf(rel, sizeof(rel), "%s/%s", zs->dir, key);
		if (!hkey)
			hkey = rel;
	}
	if (slot != SIZE_MAX)
		st = zs->by_num[slot];
	else
		st = pt__storage_find(ck, hkey);
	if (st)
		goto found;
	if (cls->kind != PT_V_GLOBAL)
		return pt_fail(err, -EBADMSG, "storage '%s': type is not a global", key);
	if (cls == zs->last_cls && cls->id == zs->last_cls_id) {
		dt = zs->last_dt;
	} else {
		dt = pt_dtype_from_storage(cls->u.global.name);
		zs->last_cls = cls;
		zs->last_cls_id = cls->id;
		zs->last_dt = dt;
	}
	if (!dt)
		return pt_fail(err, -ENOTSUP, "storage '%s': unknown storage type %s.%s",
			       key, cls->u.global.module, cls->u.global.name);
	e = slot != SIZE_MAX ? zs->rec_num[slot] : pt_zip_find_rel(ck->zip, rel);
	if (!e)
		return pt_fail(err, -EBADMSG, "storage '%s': record '%s' is missing", key, rel);
	if (!pt_mul_u64((uint64_t)numel, dt->size, &need))
		return pt_fail(err, -EBADMSG, "storage '%s': size overflows", key);
	if (e->usize != 0 && e->usize < need)
		return pt_fail(err, -EBADMSG,
			       "storage '%s': record '%s' has %" PRIu64 " bytes, the pickle says %" PRIu64,
			       key, e->name, e->usize, need);
	st = pt__record_storage(ck, e, hkey, loc, strlen(loc), dt);
	if (!st)
		return pt_fail(err, -ENOMEM, "out of memory");
	if (e->usize == 0 && need > 0) {
		/* TorchScript meta tensors: an empty record on purpose */
		st->kind = PT_ST_NONE;
		st->nbytes = need;
		st->writable = false;
	}
	if (slot != SIZE_MAX)
		zs->by_num[slot] = st;
	if (ck->n_storages == 1)
		pt__storages_expect(ck, zs->n_num);
found:
	zs->last_pid = pidv;
	zs->last_pid_id = pidv->id;
	zs->last_st = st;
	*out = st;
	return 0;
}

const struct pt_format pt_fmt_zip = {
	.name = "torch.save zip",
	.probe = zip_probe,
	.open = zip_open,
	.storage = zip_storage,
	.restructure = pt__zip_restructure,
	.stage = pt__zip_stage,
	.close = NULL,
	.commit = zip_commit,
};
