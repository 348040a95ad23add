/* SPDX-License-Identifier: MIT */
/*
 * zip_edit.c -- a torch.save archive after structural edits (ckpt/edit.c).
 *
 * data.pkl is written again from the edited graph (decode/pickle_emit.h):
 * every node keeps its meaning and its sharing, and each persistent id
 * ('storage', type, key, location, numel) gets the key of its storage in
 * the order the new pickle first names it, "0", "1", ... as torch.save
 * numbers them.  The new archive (container/zipwrite.h, a plan) keeps
 * every other record where it was, the storage records the pickle still
 * names take the place of the old ones under their new keys (copied, or
 * shared on filesystems that can), new tensors' bytes become new records,
 * and records nothing names any more are dropped (docs/FORMATS.md,
 * "Restructuring a torch.save archive").
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uthash.h>

#include "ckpt/ckpt_i.h"
#include "container/zipwrite.h"
#include "decode/pickle_emit.h"

/* Bytes in memory a new record is read from (a change's ctx). */
struct span {
	const uint8_t *p;
	uint64_t len;
};

struct zkey {                           /* a storage the new pickle names */
	const struct pt_storage *st;
	struct span bytes;              /* a new storage's */
	char key[24];                   /* its new key */
	char *name;                     /* its record's full name */
	struct pt_zw_change ch;         /* new bytes (a new storage) */
	UT_hash_handle hh;
};

struct zed {
	struct pt_ckpt *ck;
	struct zkey *by_st;             /* hash: storage -> key */
	struct zkey **order;            /* in the order the pickle names
					 * them */
	size_t n, cap;
};

/* The storage persistent id @persid names: one an edit made ("ptfs+N",
 * ckpt/edit.c), else the archive's. */
static int pid_storage(struct pt_ckpt *ck, const struct pt_value *persid,
		       struct pt_storage **st, struct pt_error *err)
{
	const struct pt_value *pid = persid->u.pid;
	char key[64];

	if (!pid || pid->kind != PT_V_TUPLE || pid->u.seq.n < 5 ||
	    !pt_value_text(pid->u.seq.v[2], key, sizeof(key)))
		return pt_fail(err, -EINVAL,
			       "a persistent id is not a ('storage', type, key, location, numel) tuple");
	if (strncmp(key, "ptfs+", 5) == 0) {
		*st = pt__storage_find(ck, key);
		return *st ? 0 : pt_fail(err, -EINVAL, "storage '%s' is lost", key);
	}
	return ck->fmt->storage(ck, persid, st, err);
}

/* The persistent-id hook: the tuple as it was, with the storage's new
 * key. */
static int write_pid(void *ctx, struct pt_pkemit *e,
		     const struct pt_value *persid, struct pt_error *err)
{
	struct zed *z = ctx;
	struct pt_storage *st;
	struct pt_value tup, key, *items[8];
	struct zkey *k;
	size_t i, n;
	int rc = pid_storage(z->ck, persid, &st, err);

	if (rc)
		return rc;
	HASH_FIND_PTR(z->by_st, &st, k);
	if (!k) {
		k = calloc(1, sizeof(*k));
		if (!k || !pt_grow((void **)&z->order, &z->cap, z->n, sizeof(*z->order))) {
			free(k);
			return pt_fail(err, -ENOMEM, "out of memory");
		}
		k->st = st;
		snprintf(k->key, sizeof(k->key), "%zu", z->n);
		z->order[z->n++] = k;
		HASH_ADD_PTR(z->by_st, st, k);
	}
	n = persid->u.pid->u.seq.n;
	if (n > 8)
		return pt_fail(err, -EINVAL, "a persistent id of %zu items", n);
	for (i = 0; i < n; i++)
		items[i] = persid->u.pid->u.seq.v[i];
	memset(&key, 0, sizeof(key));
	key.kind = PT_V_STR;
	key.u.s.p = (const uint8_t *)k->key;
	key.u.s.len = strlen(k->key);
	key.u.s.in_off = UINT64_MAX;
	items[2] = &key;
	tup = *persid->u.pid;
	tup.u.seq.v = items;
	return pt_pkemit_value(e, &tup);
}

static void zed_free(struct zed *z)
{
	size_t i;

	HASH_CLEAR(hh, z->by_st);
	for (i = 0; i < z->n; i++) {
		free(z->order[i]->name);
		free(z->order[i]);
	}
	free(z->order);
}

/* The protocol data.pkl was written with (torch: 2). */
static unsigned data_proto(const struct pt_ckpt *ck)
{
	int i;

	for (i = 0; i < ck->n_pickles; i++)
		if (strcmp(ck->pickles[i].label, "data.pkl") == 0)
			return (unsigned)pt_pickle_protocol(ck->pickles[i].pk);
	return 2;
}

static int span_read(void *ctx, void *buf, size_t n, uint64_t off)
{
	const struct span *s = ctx;

	if (off > s->len || n > s->len - off)
		return -EIO;
	memcpy(buf, s->p + off, n);
	return 0;
}

/* Name and contents of each storage's record in the new archive. */
static int name_records(struct zed *z, const char *prefix, struct pt_error *err)
{
	size_t i;

	for (i = 0; i < z->n; i++) {
		struct zkey *k = z->order[i];

		if (asprintf(&k->name, "%s%sdata/%s", prefix, *prefix ? "/" : "",
			     k->key) < 0) {
			k->name = NULL;
			return pt_fail(err, -ENOMEM, "out of memory");
		}
		if (k->st->entry)
			continue;
		if (k->st->kind != PT_ST_MEM && k->st->kind != PT_ST_NONE)
			return pt_fail(err, -EINVAL, "storage '%s' has no record to copy",
				       k->st->key);
		k->bytes.p = k->st->mem;
		k->bytes.len = k->st->nbytes;
		k->ch.size = k->st->nbytes;
		k->ch.read = span_read;
		k->ch.ctx = &k->bytes;
	}
	return 0;
}

static bool is_storage_record(const char *rel)
{
	return strncmp(rel, "data/", 5) == 0 && rel[5] && !strchr(rel + 5, '/');
}

/*
 * The plan: every record where it was, data.pkl with its new bytes, the
 * storage records in the new order where the first one was (before
 * "version" when there was none), the old storage records dropped.
 */
static int make_plan(struct zed *z, const struct pt_zw_change *pkl,
		     struct pt_zw_rec **out, size_t *nout, struct pt_error *err)
{
	const struct pt_zip *zip = z->ck->zip;
	const char *prefix = pt_zip_info(zip)->prefix;
	uint64_t count = pt_zip_info(zip)->n_entries, i;
	size_t plen = *prefix ? strlen(prefix) + 1 : 0, n = 0, j;
	struct pt_zw_rec *r = calloc(count + z->n + 1, sizeof(*r));
	bool placed = false;

	if (!r)
		return pt_fail(err, -ENOMEM, "out of memory");
	for (i = 0; i <= count; i++) {
		const struct pt_zip_entry *e = i < count ? pt_zip_entry_at(zip, i) : NULL;
		const char *rel = e && e->name_len >= plen ? e->name + plen : "";
		bool st = e && is_storage_record(rel);

		if (!placed && (st || !e || strcmp(rel, "version") == 0)) {
			for (j = 0; j < z->n; j++) {
				r[n].entry = z->order[j]->st->entry;
				r[n].name = z->order[j]->name;
				r[n].change = r[n].entry ? NULL : &z->order[j]->ch;
				n++;
			}
			placed = true;
		}
		if (!e || st)
			continue;
		r[n].entry = e;
		r[n++].change = strcmp(rel, "data.pkl") == 0 ? pkl : NULL;
	}
	*out = r;
	*nout = n;
	return 0;
}

/* The new archive: its size in *@size (@dry), sealed into *@sealed, or
 * renamed over the old one. */
static int restructure(struct zed *z, struct pt_buf *pkl, bool dry,
		       uint64_t *size, struct pt_replace *sealed,
		       struct pt_error *err)
{
	struct pt_ckpt *ck = z->ck;
	struct pt_pkemit_opts o = {
		.proto = data_proto(ck),
		.lim = &ck->opts.limits,
		.pid = write_pid,
		.pid_ctx = z,
	};
	struct pt_zw_change ch = { 0 };
	struct span bytes;
	struct pt_zw_rec *plan = NULL;
	size_t n = 0;
	int rc;

	rc = pt_pickle_emit(ck->root, &o, pkl, err);
	if (rc == 0 && pkl->oom)
		rc = pt_fail(err, -ENOMEM, "out of memory");
	if (rc == 0)
		rc = name_records(z, pt_zip_info(ck->zip)->prefix, err);
	bytes.p = (const uint8_t *)pkl->p;
	bytes.len = pkl->len;
	ch.entry = pt_zip_find_rel(ck->zip, "data.pkl");
	ch.size = pkl->len;
	ch.read = span_read;
	ch.ctx = &bytes;
	if (rc == 0)
		rc = make_plan(z, &ch, &plan, &n, err);
	if (rc == 0)
		rc = pt_zip_plan_size(ck->zip, plan, n, size, err);
	if (rc == 0 && dry)
		;
	else if (rc == 0 && sealed)
		rc = pt_zip_stage_plan(pt_source_local_path(ck->src), ck->zip,
				       plan, n, sealed, err);
	else if (rc == 0)
		rc = pt_zip_write_plan(pt_source_local_path(ck->src), ck->zip,
				       plan, n, NULL, NULL, err);
	free(plan);
	return rc;
}

static int zip_restructure(struct pt_ckpt *ck, bool dry, uint64_t *size,
			   struct pt_replace *sealed, struct pt_error *err)
{
	struct zed z = { .ck = ck };
	struct pt_buf pkl;
	int rc;

	if (!pt_zip_find_rel(ck->zip, "data.pkl"))
		return pt_fail(err, -EROFS, "the archive has no data.pkl");
	if (!dry) {
		rc = pt_source_check(ck->src, PT_CHECK_NAME, err);
		if (rc)
			return rc;
	}
	pt_buf_init(&pkl);
	rc = restructure(&z, &pkl, dry, size, sealed, err);
	pt_buf_free(&pkl);
	zed_free(&z);
	return rc;
}

/* struct pt_format.restructure of torch.save archives. */
int pt__zip_restructure(struct pt_ckpt *ck, bool dry, uint64_t *size,
			struct pt_error *err)
{
	uint64_t new_size = 0;
	int rc = zip_restructure(ck, dry, &new_size, NULL, err);

	if (size)
		*size = new_size;
	if (!dry)
		rc = pt__commit_end(ck, rc, PT_COMMIT_REWRITE, new_size, err);
	return rc;
}

/* struct pt_format.stage of torch.save archives. */
int pt__zip_stage(struct pt_ckpt *ck, struct pt_replace *sealed,
		  struct pt_error *err)
{
	uint64_t size;

	return zip_restructure(ck, false, &size, sealed, err);
}
