/* SPDX-License-Identifier: MIT */
/*
 * view_mount.c -- the mount's pictures and statistics:
 * NAME.png beside every tensor (-o previews), sized from the tensor's
 * shape on its first stat and drawn on its first read, and /.ptfs/stats/PATH.json
 * per tensor file, generated files (pt_vfile) whose size is known up front
 * (fixed-width JSON) and whose numbers are computed on first read.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cancel.h"
#include "ckpt/ckpt.h"
#include "ptfs.h"
#include "view/preview.h"
#include "view/stats.h"
#include "view/walk.h"

static int make_preview(void *ctx, struct pt_ckpt *ck, struct pt_node *tensor,
			uint8_t **data, size_t *len, struct pt_error *err)
{
	struct pt_preview pv;
	int rc;

	(void)ctx;
	rc = pt_preview_render(ck, tensor, PT_PREVIEW_SIDE, &pv, err);
	if (rc)
		return rc;
	*data = pv.png;
	*len = pv.len;
	return 0;
}

static int preview_size(void *ctx, struct pt_node *tensor, uint64_t *size)
{
	struct pt_error err;
	struct pt_tinfo ti;

	(void)ctx;
	if (!pt_node_tinfo(tensor, &ti))
		return -EINVAL;
	pt_error_clear(&err);
	return pt_preview_size(&ti, PT_PREVIEW_SIDE, size, &err);
}

/* One /.ptfs/stats file: made on first read, kept, forgotten on writes. */
struct stat_file {
	pthread_mutex_t mu;
	struct pt_ckpt *ck;
	struct pt_node *tensor;
	char *rel;                      /* "PATH.json" below /.ptfs/stats */
	uint64_t size;
	bool done;
	int rc;
	char msg[sizeof(((struct pt_error *)0)->msg)];
	char *data;
	struct stat_file *rep;          /* the same tensor at an earlier
					 * place: its numbers are these */
	bool served;                    /* read since the last change */
	struct stat_file *next;
};

static pthread_mutex_t files_mu = PTHREAD_MUTEX_INITIALIZER;
static struct stat_file *files;

static void stat_make(struct stat_file *f)
{
	struct pt_tstats *st = malloc(sizeof(*st));
	struct pt_error err;
	struct pt_buf b;

	pt_error_clear(&err);
	f->done = true;
	if (!st) {
		f->rc = -ENOMEM;
		snprintf(f->msg, sizeof(f->msg), "out of memory");
		return;
	}
	f->rc = pt_tensor_stats(f->ck, f->tensor, st, &err);
	if (f->rc == 0) {
		pt_buf_init(&b);
		pt_tstats_json(st, NULL, true, &b);
		if (b.oom || b.len != f->size) {
			f->rc = -EIO;
			snprintf(f->msg, sizeof(f->msg), "statistics of %zu bytes, %llu promised",
				 b.len, (unsigned long long)f->size);
			pt_buf_free(&b);
		} else {
			f->data = pt_buf_take(&b, NULL);
		}
	} else {
		memcpy(f->msg, err.msg, sizeof(f->msg));
	}
	free(st);
}

static int stat_read(void *ctx, void *buf, size_t n, uint64_t off, struct pt_error *err)
{
	struct stat_file *f = ctx, *src = f->rep ? f->rep : f;
	int rc = pt_lock_or_cancel(&src->mu);

	if (rc)
		return pt_fail(err, rc, "interrupted");
	if (!src->done)
		stat_make(src);
	rc = src->rc;
	if (rc == 0)
		memcpy(buf, src->data + off, n);
	else
		pt_fail(err, rc, "%s", src->msg);
	if (rc == -EINTR) {
		/* the reader went away: made again on the next read */
		src->done = false;
		src->rc = 0;
	}
	pthread_mutex_unlock(&src->mu);
	__atomic_store_n(&f->served, true, __ATOMIC_RELAXED);
	return rc;
}

static void stat_free(void *ctx)
{
	struct stat_file *f = ctx, **p;

	pthread_mutex_lock(&files_mu);
	for (p = &files; *p; p = &(*p)->next)
		if (*p == f) {
			*p = f->next;
			break;
		}
	pthread_mutex_unlock(&files_mu);
	pthread_mutex_destroy(&f->mu);
	free(f->data);
	free(f->rel);
	free(f);
}

static int stats_fill(void *ctx, struct pt_ckpt *ck, struct pt_vdir *d, struct pt_error *err)
{
	struct pt_view_item *items = NULL;
	struct stat_file **made = NULL;
	size_t n = 0, i, *same = NULL;
	int rc;

	(void)ctx;
	rc = pt_view_tensors(ck, pt_tree_root(ck), "", &items, &n, err);
	if (rc)
		return rc;
	/* a tensor shown at many places is read once, by its first file */
	same = pt_view_same(items, n);
	made = calloc(n ? n : 1, sizeof(*made));
	if (!same || !made)
		rc = -ENOMEM;
	for (i = 0; i < n && rc == 0; i++) {
		struct stat_file *f = calloc(1, sizeof(*f));
		struct pt_tinfo ti;
		struct pt_vfile vf;
		struct pt_buf rel;

		if (!f || !pt_node_tinfo(items[i].node, &ti)) {
			free(f);
			rc = f ? 0 : -ENOMEM;
			continue;
		}
		pthread_mutex_init(&f->mu, NULL);
		f->ck = ck;
		f->tensor = items[i].node;
		f->size = pt_tstats_json_size(&ti, NULL);
		pt_buf_init(&rel);
		pt_buf_printf(&rel, "%s.json", items[i].path);
		f->rel = pt_buf_take(&rel, NULL);
		vf = (struct pt_vfile){ f->size, stat_read, NULL, stat_free, f, NULL };
		rc = f->rel && f->size ? pt_vdir_add(d, f->rel, &vf) : -ENOMEM;
		if (rc) {
			stat_free(f);
			if (rc == -EEXIST)      /* a name taken twice: the first */
				rc = 0;
			continue;
		}
		if (same[i] != i)
			f->rep = made[same[i]];
		made[i] = f;
		pthread_mutex_lock(&files_mu);
		f->next = files;
		files = f;
		pthread_mutex_unlock(&files_mu);
	}
	free(same);
	free(made);
	pt_view_items_free(items, n);
	return rc ? pt_fail(err, rc, "/.ptfs/stats: %s", strerror(-rc)) : 0;
}

void ptfs_view_attach(struct pt_ckpt *ck)
{
	pt_ckpt_set_picture_maker(ck, make_preview, preview_size, NULL);
	if (pt_tree_set_vdir(ck, "stats", stats_fill, NULL) != 0)
		fprintf(stderr, "ptfs: /.ptfs/stats not available\n");
}

void ptfs_view_changed(struct pt_ckpt *ck, void (*drop)(void *ctx, struct pt_node *n),
		       void *ctx)
{
	struct stat_file *f;
	struct pt_buf path;

	pt_ckpt_pictures_reset(ck, drop, ctx);
	pt_buf_init(&path);
	pthread_mutex_lock(&files_mu);
	for (f = files; f; f = f->next) {
		bool made;

		pthread_mutex_lock(&f->mu);
		made = f->done || __atomic_exchange_n(&f->served, false, __ATOMIC_RELAXED);
		free(f->data);
		f->data = NULL;
		f->done = false;
		f->rc = 0;
		pthread_mutex_unlock(&f->mu);
		if (made && drop) {
			struct pt_node *n;
			int rc = 0;

			path.len = 0;
			pt_buf_printf(&path, ".ptfs/stats/%s", f->rel);
			n = path.p ? pt_tree_path(ck, path.p, &rc) : NULL;
			if (n)
				drop(ctx, n);
		}
	}
	pthread_mutex_unlock(&files_mu);
	pt_buf_free(&path);
}
