/* SPDX-License-Identifier: MIT */
/*
 * dotptfs.c -- the table of /.ptfs: the generated texts (info.txt,
 * tree.json, pickle.txt), the generated directories (generated.c), the
 * files and value trees a format added, and records/ (one entry per
 * archive record, in folders of the names' parts) with its shortcuts.
 * Built the first time /.ptfs is listed or searched.
 */
#include "ckpt/tree_i.h"

#include <errno.h>
#include <string.h>

#include "ckpt/names.h"

/* /.ptfs/records: one folder per '/'-separated component of each record
 * name, every component encoded like a key. */
static int add_record(struct pt_tree *t, struct dtab *top,
		      const struct pt_zip_entry *ze)
{
	struct dtab *d = top;
	const char *p = ze->name;
	struct pt_buf enc;
	int rc = 0;

	pt_buf_init(&enc);
	for (;;) {
		const char *slash = strchr(p, '/');
		size_t len = slash ? (size_t)(slash - p) : strlen(p);
		struct dent *e;

		if (slash && len == 0) { /* "a//b" or a leading '/' */
			p = slash + 1;
			continue;
		}
		if (!slash && len == 0) /* a directory record "a/" */
			break;
		enc.len = 0;
		pt_name_encode(&enc, (const uint8_t *)p, len);
		if (enc.oom) {
			rc = -ENOMEM;
			break;
		}
		if (!slash) {
			/* the file; a folder of the same name gets "~2" */
			rc = pt__tab_claim(d, enc.p, enc.len, NULL);
			if (!rc) {
				d->ents[d->n - 1]->role = R_RECORD;
				d->ents[d->n - 1]->entry = ze;
			}
			break;
		}
		e = pt__tab_find(d, enc.p, enc.len);
		if (!e || e->role != R_RECDIR) {
			struct dtab *sub = pt__tab_new(t);

			if (!sub) {
				rc = -ENOMEM;
				break;
			}
			if (e) {
				rc = pt__tab_claim(d, enc.p, enc.len, NULL);
				if (rc)
					break;
				e = d->ents[d->n - 1];
			} else {
				e = pt__tab_add(d, enc.p, enc.len, R_RECDIR, NULL);
				if (!e) {
					rc = -ENOMEM;
					break;
				}
			}
			e->role = R_RECDIR;
			e->sub = sub;
		}
		d = e->sub;
		p = slash + 1;
	}
	pt_buf_free(&enc);
	return rc;
}

/* The table of folder @rel ("a/b"; "" is @top itself; components encoded
 * like add_record() does) under /.ptfs/records, or NULL. */
static struct dtab *record_dir(struct dtab *top, const char *rel)
{
	struct pt_buf enc;
	struct dtab *d = top;

	pt_buf_init(&enc);
	while (d && rel[0]) {
		const char *slash = strchr(rel, '/');
		size_t len = slash ? (size_t)(slash - rel) : strlen(rel);
		struct dent *e = NULL;

		enc.len = 0;
		pt_name_encode(&enc, (const uint8_t *)rel, len);
		if (!enc.oom)
			e = pt__tab_find(d, enc.p, enc.len);
		d = e && e->role == R_RECDIR ? e->sub : NULL;
		rel += len + (slash ? 1 : 0);
	}
	pt_buf_free(&enc);
	return d;
}

/* The table of /.ptfs/records: one entry per archive record, in folders
 * of the names' parts.  Call under the tree lock. */
int pt__records_table(struct pt_ckpt *ck, struct dtab **out)
{
	struct pt_tree *t = ck->tree;
	struct dtab *recs = pt__tab_new(t);
	uint64_t i;
	int rc;

	if (!recs)
		return -ENOMEM;
	for (i = 0; i < pt_zip_info(ck->zip)->n_entries; i++) {
		rc = add_record(t, recs, pt_zip_entry_at(ck->zip, i));
		if (rc)
			return rc;
	}
	*out = recs;
	return 0;
}

static int build_meta(struct pt_ckpt *ck, struct pt_tree *t)
{
	struct dtab *recs;
	uint64_t i;
	int rc;

	t->meta_tab = pt__tab_new(t);
	if (!t->meta_tab)
		return -ENOMEM;
	static const struct {
		const char *name;
		enum gen gen;
	} gens[] = { { "info.txt", GEN_INFO },
		     { "tree.json", GEN_TREE },
		     { "pickle.txt", GEN_PICKLE } };
	struct dent *e;

	for (i = 0; i < 3; i++) {
		e = pt__tab_add(t->meta_tab, gens[i].name, strlen(gens[i].name),
				R_GEN, NULL);
		if (!e)
			return -ENOMEM;
		e->gen = gens[i].gen;
	}
	/* a generated directory (pt_tree_set_vdir: /.ptfs/export) */
	for (i = 0; i < t->n_vdirs; i++) {
		if (pt__tab_has(t->meta_tab, t->vname[i], strlen(t->vname[i])))
			continue;
		e = pt__tab_add(t->meta_tab, t->vname[i], strlen(t->vname[i]), R_VDIR, NULL);
		if (!e)
			return -ENOMEM;
	}
	/* files the format added (a safetensors header, an index) */
	for (i = 0; i < (uint64_t)ck->n_meta_files; i++) {
		e = pt__tab_add(t->meta_tab, ck->meta_files[i].name,
				strlen(ck->meta_files[i].name), R_BLOB, NULL);
		if (!e)
			return -ENOMEM;
		e->blob = &ck->meta_files[i];
	}
	/* value trees a format added (TorchScript constants) */
	for (i = 0; i < (uint64_t)ck->n_meta_dirs; i++) {
		const struct pt_meta_dir *md = &ck->meta_dirs[i];

		if (!md->root)
			continue;
		rc = pt__tab_claim(t->meta_tab, md->name, strlen(md->name),
				   pt__tree_deref(md->root));
		if (rc)
			return rc;
	}
	if (!ck->zip)
		return 0;
	e = pt__tab_add(t->meta_tab, "records", 7, R_RECDIR, NULL);
	if (!e)
		return -ENOMEM;
	for (i = 0; i < (uint64_t)ck->n_meta_dirs; i++)
		if (ck->meta_dirs[i].records)
			break;
	if (i == (uint64_t)ck->n_meta_dirs)
		return 0;       /* no shortcuts into it: made on first use */
	rc = pt__records_table(ck, &e->sub);
	if (rc)
		return rc;
	recs = e->sub;
	/* shortcuts to record folders (/.ptfs/code, /.ptfs/extra) */
	for (i = 0; i < (uint64_t)ck->n_meta_dirs; i++) {
		const struct pt_meta_dir *md = &ck->meta_dirs[i];
		struct dtab *sub;

		if (!md->records || pt__tab_has(t->meta_tab, md->name, strlen(md->name)))
			continue;
		sub = record_dir(recs, pt_zip_info(ck->zip)->prefix);
		if (sub)
			sub = record_dir(sub, md->records);
		if (!sub)
			continue;
		e = pt__tab_add(t->meta_tab, md->name, strlen(md->name), R_RECDIR,
				NULL);
		if (!e)
			return -ENOMEM;
		e->sub = sub;
	}
	return 0;
}

/* The table of /.ptfs, built the first time it is listed or searched:
 * its records folder has one entry per archive record (20,000 for a
 * 20,000-tensor torch.save file), which most mounts never look at.
 * Call under the tree lock. */
struct dtab *pt__meta_table(struct pt_ckpt *ck, int *rc)
{
	struct pt_tree *t = ck->tree;

	if (!t->meta_tab) {
		*rc = build_meta(ck, t);
		if (*rc)
			t->meta_tab = NULL; /* its tables are freed with t */
	}
	return t->meta_tab;
}
