/* SPDX-License-Identifier: MIT */
/*
 * ckpt.c -- the checkpoint a front end opens: a path (a file, or the
 * directory of a distributed or sharded checkpoint), memory or a source,
 * loaded against every format (open.c, fmt.c's pt_formats) and given its
 * tree (tree.c); its reads, checks and commits.
 */
#include "ckpt/ckpt_i.h"
#include "ckpt/editlog_i.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <dirent.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int pt_ckpt_pick(const struct pt_dir_entry *e, size_t n, char **file,
		 struct pt_error *err)
{
	size_t i;
	int rc;

	*file = NULL;
	for (i = 0; pt_formats[i]; i++) {
		if (!pt_formats[i]->probe_dir)
			continue;
		rc = pt_formats[i]->probe_dir(e, n, file, err);
		if (rc)
			return rc < 0 ? rc : 0;
	}
	return pt_fail(err, -EISDIR, "is a directory, not a checkpoint");
}

/* The listing of directory @dir into @l; 0 or -errno with a message. */
static int list_dir(const char *dir, struct pt_dir_list *l,
		    struct pt_error *err)
{
	struct dirent *de;
	DIR *d = opendir(dir);
	int rc = 0;

	if (!d)
		return pt_fail(err, -errno, "%s", strerror(errno));
	while (!rc && (de = readdir(d)) != NULL) {
		struct stat st;

		rc = pt_dir_list_add(l, de->d_name, strlen(de->d_name),
				     fstatat(dirfd(d), de->d_name, &st, 0) == 0 &&
				     S_ISREG(st.st_mode));
	}
	closedir(d);
	if (!rc)
		rc = pt_dir_list_end(l);
	if (rc == -EFBIG)
		return pt_fail(err, rc, "is a directory of more than %u entries, not a checkpoint",
			       PT_MAX_DIR_ENTRIES);
	return rc ? pt_fail(err, rc, "out of memory") : 0;
}

/* The path of the file to open for directory @dir (malloc()ed in *@out). */
static int probe_dir(const char *dir, char **out, struct pt_error *err)
{
	struct pt_dir_list l;
	char *file = NULL;
	int rc;

	*out = NULL;
	pt_dir_list_init(&l);
	rc = list_dir(dir, &l, err);
	if (!rc)
		rc = pt_ckpt_pick(l.e, l.n, &file, err);
	if (!rc && asprintf(out, "%s/%s", dir, file) < 0) {
		*out = NULL;
		rc = pt_fail(err, -ENOMEM, "out of memory");
	}
	free(file);
	pt_dir_list_free(&l);
	return rc;
}

/* A checkpoint of a front end: a tree over the loaded checkpoint. */
static int ckpt_load(struct pt_ckpt *ck, struct pt_error *err)
{
	int rc = pt__ckpt_load(ck, err);

	return rc ? rc : pt__tree_new(ck, err);
}

int pt_ckpt_open_source(struct pt_ckpt **out, struct pt_source *src,
			const struct pt_ckpt_opts *opts, struct pt_error *err)
{
	struct pt_ckpt *ck = NULL;
	int rc;

	*out = NULL;
	rc = pt__ckpt_new(&ck, src->name, opts, pt_formats, 0, err);
	if (rc) {
		pt_source_close(src);
		return rc;
	}
	ck->src = src;
	rc = ckpt_load(ck, err);
	if (rc) {
		pt_ckpt_close(ck);
		return rc;
	}
	*out = ck;
	return 0;
}

int pt_ckpt_open(struct pt_ckpt **out, const char *path,
		 const struct pt_ckpt_opts *opts, struct pt_error *err)
{
	struct pt_ckpt *ck = NULL;
	struct stat st;
	int rc;

	*out = NULL;
	rc = pt__ckpt_new(&ck, path, opts, pt_formats, 0, err);
	if (rc)
		return rc;
	if (stat(ck->path, &st) == 0 && S_ISDIR(st.st_mode)) {
		/* a distributed checkpoint (a .metadata file: docs/FORMATS.md,
		 * "Recognition" and "Distributed checkpoint files") opens its
		 * .metadata (fmt/dcp.c), a directory of shards
		 * its *.index.json (fmt/sharded.c); ck->path names that file
		 * from here on */
		char *index = NULL;

		rc = probe_dir(path, &index, err);
		if (rc)
			goto out;
		free(ck->path);
		ck->path = index;
	}
	/* an interrupted in-place commit is rolled back before anything
	 * reads the file (container/journal.h); a read-only open writes
	 * nothing and refuses a file that needs it (-EUCLEAN) */
	rc = pt_journal_recover(ck->path, ck->opts.recover, ck->recovery,
				sizeof(ck->recovery), err);
	if (rc < 0)
		goto out;
	rc = pt_source_open_file(ck->path, &ck->src, err);
	if (!rc)
		rc = ckpt_load(ck, err);
	if (rc == 0 && ck->recovery[0])
		pt_buf_printf(&ck->notes, "journal: %s\n", ck->recovery);
	if (rc && ck->recovery[0])
		/* what recovery did (a torn file, a journal set aside) may be
		 * why the file does not open: it must not be lost */
		pt_error_prefix(err, "%s; then", ck->recovery);
	if (rc)
		goto out;
	*out = ck;
	ck = NULL;
out:
	pt_ckpt_close(ck);
	return rc;
}

int pt_ckpt_open_mem(struct pt_ckpt **out, const void *mem, size_t len,
		     const char *name, const struct pt_ckpt_opts *opts,
		     struct pt_error *err)
{
	struct pt_ckpt *ck = NULL;
	int rc;

	*out = NULL;
	rc = pt__ckpt_new(&ck, name, opts, pt_formats, 0, err);
	if (rc)
		return rc;
	rc = pt_source_mem(mem, len, ck->path, &ck->src, err);
	if (!rc)
		rc = ckpt_load(ck, err);
	if (rc) {
		pt_ckpt_close(ck);
		return rc;
	}
	*out = ck;
	return 0;
}

void pt_ckpt_close(struct pt_ckpt *ck)
{
	if (!ck)
		return;
	pt__tree_free(ck);
	free(ck->edits.holed);
	pt__edit_log_clear(ck);
	pt__ckpt_free(ck);
}

int pt_ckpt_read(const struct pt_ckpt *ck, void *buf, size_t n,
		 uint64_t off, struct pt_error *err)
{
	return pt_source_read(ck->src, buf, n, off, err);
}

int pt_ckpt_check(const struct pt_ckpt *ck, struct pt_error *err)
{
	return pt_source_check(ck->src, PT_CHECK_READS, err);
}

struct timespec pt_ckpt_mtime(const struct pt_ckpt *ck)
{
	return ck->src->mtime;
}

/* ---- commits ---- */

uint64_t pt_storage_size(const struct pt_storage *st)
{
	return st->nbytes;
}

uint64_t pt_storage_file_offset(const struct pt_storage *st)
{
	return st->file_off;
}

size_t pt_storage_index(const struct pt_storage *st)
{
	return (size_t)st->id;
}

size_t pt_ckpt_storage_count(const struct pt_ckpt *ck)
{
	return (size_t)ck->n_storages;
}

const struct pt_source *pt_ckpt_source(const struct pt_ckpt *ck)
{
	return ck->src;
}

void pt_ckpt_set_layer(struct pt_ckpt *ck, struct pt_source *layer)
{
	__atomic_store_n(&ck->layer, layer, __ATOMIC_RELEASE);
}

struct pt_ckpt *pt_storage_file_ckpt(struct pt_ckpt *ck,
				     const struct pt_storage *st)
{
	return st->home ? st->home : ck;
}

const char *pt_storage_file_name(const struct pt_storage *st)
{
	return st->home ? st->home->data_name : NULL;
}

int pt_storage_read_file(const struct pt_ckpt *ck, const struct pt_storage *st,
			 void *buf, size_t n, uint64_t off,
			 struct pt_error *err)
{
	const struct pt_ckpt *f = st->home ? st->home : ck;

	return pt_source_read(f->src, buf, n, st->file_off + off, err);
}

void pt_ckpt_set_progress(struct pt_ckpt *ck, pt_progress_fn fn, void *ctx)
{
	ck->progress_ctx = ctx;
	ck->progress = fn;
}

void pt_ckpt_progress(const struct pt_ckpt *ck, enum pt_progress_kind kind,
		      uint64_t n)
{
	if (ck->progress && n)
		ck->progress(ck->progress_ctx, kind, n);
}

bool pt_ckpt_writable(const struct pt_ckpt *ck)
{
	return pt_source_local_path(ck->src) && ck->fmt && ck->fmt->commit;
}

const char *pt_ckpt_last_commit(const struct pt_ckpt *ck)
{
	return ck->last_commit;
}

const char *pt_ckpt_recovery(const struct pt_ckpt *ck)
{
	return ck->recovery;
}

/* Whether a record's data starts elsewhere in @fresh than in @z. */
static bool records_moved(const struct pt_zip *z, const struct pt_zip *fresh)
{
	uint64_t i, n = pt_zip_info(z)->n_entries;

	if (pt_zip_info(fresh)->n_entries != n)
		return true;
	for (i = 0; i < n; i++)
		if (pt_zip_entry_at(z, i)->data_off != pt_zip_entry_at(fresh, i)->data_off)
			return true;
	return false;
}

/*
 * The ZIP64 rewriter may have moved records (an archive not in torch's
 * layout, e.g. written by Python's zipfile): index the new file and move
 * every storage and pickle offset with its record.  The commit is done
 * whatever happens here: a problem is a warning.  True when some record
 * did move (a torch archive is written again in its own layout).
 */
static bool reindex_after_commit(struct pt_ckpt *ck)
{
	struct pt_error err;
	struct pt_zip *fresh = NULL;
	uint64_t **offs;
	size_t n = 0;
	bool moved = false;

	pt_error_clear(&err);
	offs = calloc((size_t)ck->n_storages + (size_t)ck->n_pickles + 1, sizeof(*offs));
	if (offs && pt_zip_open(&fresh, ck->src, &ck->opts.limits, &err) == 0) {
		struct pt_storage *s;
		size_t i;
		int k;

		moved = records_moved(ck->zip, fresh);
		for (i = 0; i < ck->n_st; i++) {
			s = ck->st_list[i];
			if (s->kind == PT_ST_FILE && !s->home)
				offs[n++] = &s->file_off;
		}
		for (k = 0; k < ck->n_pickles; k++)
			offs[n++] = &ck->pickles[k].file_off;
		(void)pt_zip_adopt_layout(ck->zip, fresh, offs, n, &err);
	}
	if (!offs)
		pt_fail(&err, -ENOMEM, "out of memory");
	if (err.code)
		pt__warn(ck, "after the commit: %s; remount to read the new file", err.msg);
	pt_zip_close(fresh);
	free(offs);
	return moved;
}

/* The distinct files beside the checkpoint's own that @c writes (ONNX
 * external data): whether each was, before the commit, the file its source
 * opened (a bit per file, in the order met; at most 64 tracked). */
static uint64_t data_files_ours(const struct pt_commit *c, size_t n)
{
	struct pt_error e;
	uint64_t bits = 0;
	unsigned k = 0;
	size_t i, j;

	for (i = 0; i < n && k < 64; i++) {
		const struct pt_ckpt *h = c[i].st->home;

		for (j = 0; h && j < i && c[j].st->home != h; j++)
			;
		if (!h || j < i)
			continue;
		pt_error_clear(&e);
		if (pt_source_check(h->src, PT_CHECK_NAME, &e) == 0)
			bits |= 1ull << k;
		k++;
	}
	return bits;
}

/* After a commit that wrote files beside the checkpoint's own: read each
 * new file (@done), or take the mtime a rolled-back in-place commit left
 * as ours (only if the file was ours before: bit set in @ours). */
static void data_files_after(struct pt_ckpt *ck, const struct pt_commit *c,
			     size_t n, uint64_t ours, bool done)
{
	struct pt_error e;
	unsigned k = 0;
	size_t i, j;

	for (i = 0; i < n; i++) {
		struct pt_ckpt *h = c[i].st->home;

		for (j = 0; h && j < i && c[j].st->home != h; j++)
			;
		if (!h || j < i)
			continue;
		pt_error_clear(&e);
		if (done && pt_source_reopen(h->src, &e) != 0)
			pt__warn(ck, "after the commit: %s; remount to read the new file", e.msg);
		else if (!done && k < 64 && (ours >> k & 1))
			(void)pt_source_reaffirm(h->src);
		k++;
	}
}

int pt_ckpt_commit(struct pt_ckpt *ck, const struct pt_commit *c, size_t n,
		   struct pt_error *err)
{
	struct pt_error e2;
	uint64_t size = ck->src->size;
	uint32_t gen = ck->commits + 1;
	uint64_t home_ours;
	bool ours;
	size_t i;
	int rc;

	if (!pt_ckpt_writable(ck))
		return pt_fail(err, -EROFS, "%s checkpoints cannot be written",
			       pt_ckpt_format(ck));
	if (n == 0)
		return 0;
	for (i = 0; i < n; i++)
		if (!c[i].st->writable || c[i].st->kind != PT_ST_FILE)
			return pt_fail(err, -EROFS, "storage '%s' cannot be written",
				       c[i].st->key);
	ck->commit_moved = false;
	pt_error_clear(&e2);
	ours = pt_source_check(ck->src, PT_CHECK_NAME, &e2) == 0;
	home_ours = data_files_ours(c, n);
	rc = ck->fmt->commit(ck, c, n, err);
	if (rc) {
		/* an in-place commit that rolled back wrote the file too: the
		 * mtime it left is ours, not another program's (only if the
		 * file was ours before) */
		if (ours)
			(void)pt_source_reaffirm(ck->src);
		data_files_after(ck, c, n, home_ours, false);
		return rc;
	}
	data_files_after(ck, c, n, home_ours, true);
	/*
	 * Renamed or patched: that is the commit, and it is never reported
	 * as failed from here on.  Read the new file through the same
	 * descriptor number; after the rewriter moved records, index it
	 * again.  A problem is a warning (the mount logs it).  What showed
	 * the old bytes (the written storages' records) or states offsets
	 * or the file's size (NAME.json, tree.json, info.txt) is then out of
	 * date: the storages, and a move, are stamped with this commit's
	 * number for pt_tree_committed().  Callers serialise commits; the
	 * count is published last (a commit fsyncs: 2^32 of them outlast
	 * any mount).
	 */
	for (i = 0; i < n; i++) {
		/* lent const to the writers; the checkpoint's own */
		struct pt_storage *st = (struct pt_storage *)(uintptr_t)c[i].st;

		__atomic_store_n(&st->committed, gen, __ATOMIC_RELAXED);
	}
	pt_error_clear(&e2);
	if (pt_source_reopen(ck->src, &e2) != 0)
		pt__warn(ck, "after the commit: %s; remount to read the new file", e2.msg);
	else if (ck->commit_moved && ck->zip &&
		 (reindex_after_commit(ck) || ck->src->size != size))
		__atomic_store_n(&ck->layout_gen, gen, __ATOMIC_RELEASE);
	__atomic_store_n(&ck->commits, gen, __ATOMIC_RELEASE);
	pt_ckpt_bytes_changed(ck, NULL);
	return 0;
}
