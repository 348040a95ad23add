/* SPDX-License-Identifier: MIT */
/*
 * open.c -- the life of a checkpoint object below its tree: made, loaded
 * (its bytes probed against a table of formats, opened by the one that
 * claims them, its values classified) and freed; and the checkpoints a
 * format opens inside its own (the shards of a sharded index, the
 * .distcp files of a DCP directory).
 *
 * A checkpoint carries the format table it was probed against and its
 * depth: 0 when a front end opened it (ckpt.c, with fmt.c's pt_formats),
 * its parent's plus one when a format opened it here.  A child is probed
 * against its parent's table, so no file here names a format: the
 * recursion of a format that holds checkpoints is data (ck->formats), not
 * a call back up, and its depth is capped (PT_CKPT_MAX_DEPTH), so an index
 * naming itself, or a chain of them, ends at the first step.  The tree
 * (ckpt.c, tree.c) is built only for a checkpoint a front end opened.
 *
 * Children whose bytes are remote open in threads, many at once
 * (pt__ckpt_open_siblings): each child is an object of its own (its
 * allocator, warnings, notes, limits), its parent is only read, and the
 * caller takes the results in order, so the outcome is the sequential one.
 */
#include "ckpt/ckpt_i.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void pt_ckpt_opts_default(struct pt_ckpt_opts *o)
{
	memset(o, 0, sizeof(*o));
	pt_limits_default(&o->limits);
}

static char *make_stem(const char *path)
{
	const char *base = strrchr(path, '/');
	const char *dot;

	base = base ? base + 1 : path;
	dot = strrchr(base, '.');
	if (!dot || dot == base)
		dot = base + strlen(base);
	return strndup(base, (size_t)(dot - base));
}

/*
 * @path made absolute (malloc()ed): the daemon chdir()s to / when it
 * detaches, and a commit must still find the file.  Symbolic links are
 * kept, as for a path given absolute: shards are found beside the index's
 * link, not beside the file it names (the Hugging Face cache links each
 * file of a snapshot to a blob of its own).  A name that is no file (a
 * memory source's) is kept as it is.
 */
static char *abs_path(const char *path)
{
	struct stat st;
	char *cwd, *out = NULL;

	if (path[0] == '/' || lstat(path, &st) != 0)
		return strdup(path);
	cwd = getcwd(NULL, 0);
	if (!cwd)
		return realpath(path, NULL);
	if (asprintf(&out, "%s/%s", cwd, path) < 0)
		out = NULL;
	free(cwd);
	return out;
}

int pt__ckpt_new(struct pt_ckpt **out, const char *path,
		 const struct pt_ckpt_opts *opts,
		 const struct pt_format *const *formats, unsigned depth,
		 struct pt_error *err)
{
	struct pt_ckpt *ck = calloc(1, sizeof(*ck));

	*out = NULL;
	if (!ck)
		return pt_fail(err, -ENOMEM, "out of memory");
	ck->formats = formats;
	ck->depth = depth;
	ck->byteorder = '<';
	if (opts)
		ck->opts = *opts;
	else
		pt_ckpt_opts_default(&ck->opts);
	pt_buf_init(&ck->warnings);
	pt_buf_init(&ck->notes);
	pt_buf_init(&ck->globals);
	ck->path = abs_path(path);
	ck->stem = make_stem(path);
	if (!ck->path || !ck->stem) {
		pt__ckpt_free(ck);
		return pt_fail(err, -ENOMEM, "out of memory");
	}
	*out = ck;
	return 0;
}

/* The first format of ck->formats that claims ck's first bytes. */
static int probe(struct pt_ckpt *ck, struct pt_error *err)
{
	uint8_t head[PT_PROBE_HEAD];
	size_t n = ck->src->size < sizeof(head) ? (size_t)ck->src->size : sizeof(head);
	size_t i;
	int rc;

	if (ck->src->size == 0)
		return pt_fail(err, -EBADMSG, "empty file, not a checkpoint");
	rc = pt_source_read(ck->src, head, n, 0, err);
	if (rc)
		return rc;
	for (i = 0; ck->formats[i]; i++) {
		rc = ck->formats[i]->probe(ck, head, n, err);
		if (rc < 0)
			return rc;
		if (rc > 0) {
			ck->fmt = ck->formats[i];
			return 0;
		}
	}
	return pt_fail(err, -ENOTSUP,
		       "not a PyTorch checkpoint (unrecognised format, first bytes %02x %02x %02x %02x)",
		       head[0], n > 1 ? head[1] : 0, n > 2 ? head[2] : 0,
		       n > 3 ? head[3] : 0);
}

int pt__ckpt_load(struct pt_ckpt *ck, struct pt_error *err)
{
	int i, rc;

	rc = probe(ck, err);
	if (rc)
		return rc;
	rc = ck->fmt->open(ck, err);
	if (rc)
		return rc;
	rc = pt__classify(ck, err);
	if (rc)
		return rc;
	for (i = 0; i < ck->n_meta_dirs; i++) {
		if (!ck->meta_dirs[i].root)
			continue;
		rc = pt__classify_value(ck, ck->meta_dirs[i].root, err);
		if (rc) {
			pt_error_prefix(err, "/.ptfs/%s", ck->meta_dirs[i].name);
			return rc;
		}
	}
	return 0;
}

void pt__ckpt_free(struct pt_ckpt *ck)
{
	size_t i;
	int k;

	if (!ck)
		return;
	pt__gathered_free(ck);
	if (ck->fmt && ck->fmt->close)
		ck->fmt->close(ck);
	for (k = 0; k < ck->n_pickles; k++) {
		pt_pickle_free(ck->pickles[k].pk);
		if (!ck->pickles[k].borrowed)
			free(ck->pickles[k].buf);
	}
	pt__storages_free(ck);
	pt_zip_close(ck->zip);
	for (i = 0; i < ck->n_owned; i++)
		free(ck->owned[i]);
	free(ck->owned);
	pt__alloc_free(ck);
	pt_vstack_free(&ck->lean_stack);
	pt_buf_free(&ck->warnings);
	pt_buf_free(&ck->notes);
	pt_buf_free(&ck->globals);
	pt_source_close(ck->src);
	free(ck->path);
	free(ck->stem);
	free(ck);
}

int pt__ckpt_open_child(struct pt_ckpt *parent, struct pt_source *src,
			bool load, struct pt_ckpt **out, struct pt_error *err)
{
	struct pt_ckpt *ck = NULL;
	int rc;

	*out = NULL;
	if (parent->depth >= PT_CKPT_MAX_DEPTH) {
		pt_source_close(src);
		return pt_fail(err, -EBADMSG,
			       "would open a checkpoint at depth %u (at most %u: a checkpoint opened by another opens none)",
			       parent->depth + 1, PT_CKPT_MAX_DEPTH);
	}
	rc = pt__ckpt_new(&ck, src->name, &parent->opts, parent->formats,
			  parent->depth + 1, err);
	if (rc) {
		pt_source_close(src);
		return rc;
	}
	ck->src = src;
	rc = load ? pt__ckpt_load(ck, err) : 0;
	if (rc) {
		pt__ckpt_free(ck);
		return rc;
	}
	*out = ck;
	return 0;
}

/* ---- siblings opened together ---- */

/*
 * How many siblings of a remote checkpoint open at once: each open waits
 * for its own requests (one or two, a round trip), so this many threads
 * keep this many requests in flight; the request engine spreads them over
 * its connections (core/remote/engine.c).
 */
#define OPEN_PARALLEL 128

struct sib_pool {
	struct pt_ckpt *parent;
	struct pt_child_open *v;
	size_t n;
	bool load;
	bool stop_at_failure;
	pthread_mutex_t lock;
	size_t next;                    /* the next item to take */
	bool stop;                      /* an item failed: take no more */
};

static void open_one(struct pt_ckpt *parent, struct pt_child_open *c,
		     bool load)
{
	struct pt_source *src = NULL;

	pt_error_clear(&c->err);
	c->ck = NULL;
	c->rc = pt_source_open_sibling(parent->src, c->name, &src, &c->err);
	if (!c->rc)
		c->rc = pt__ckpt_open_child(parent, src, load, &c->ck, &c->err);
}

/* A worker: the next item not taken yet, until there is none, or one
 * failed (when that stops the rest).  Items are taken in order, so every
 * item before a failed one has been taken, and finishes. */
static void *sib_worker(void *arg)
{
	struct sib_pool *p = arg;

	for (;;) {
		struct pt_child_open *c;

		pthread_mutex_lock(&p->lock);
		if (p->stop || p->next >= p->n) {
			pthread_mutex_unlock(&p->lock);
			return NULL;
		}
		c = &p->v[p->next++];
		pthread_mutex_unlock(&p->lock);
		open_one(p->parent, c, p->load);
		if (c->rc && p->stop_at_failure) {
			pthread_mutex_lock(&p->lock);
			p->stop = true;
			pthread_mutex_unlock(&p->lock);
		}
	}
}

/* Run sib_worker() in up to OPEN_PARALLEL threads, this one among them
 * (so that a thread that cannot be made costs speed, never the open). */
static void sib_run(struct sib_pool *p, bool parallel)
{
	size_t want = parallel ? (p->n < OPEN_PARALLEL ? p->n : OPEN_PARALLEL) : 1;
	pthread_t *t = want > 1 ? calloc(want - 1, sizeof(*t)) : NULL;
	size_t made = 0, i;

	while (t && made + 1 < want &&
	       pthread_create(&t[made], NULL, sib_worker, p) == 0)
		made++;
	sib_worker(p);
	for (i = 0; i < made; i++)
		pthread_join(t[i], NULL);
	free(t);
}

void pt__ckpt_open_siblings(struct pt_ckpt *parent, struct pt_child_open *v,
			    size_t n, bool load, bool stop_at_failure)
{
	struct sib_pool p = {
		.parent = parent, .v = v, .n = n, .load = load,
		.stop_at_failure = stop_at_failure,
	};
	size_t i;
	bool failed = false;

	for (i = 0; i < n; i++) {
		v[i].ck = NULL;
		v[i].rc = -ECANCELED;   /* not opened */
		pt_error_clear(&v[i].err);
	}
	pthread_mutex_init(&p.lock, NULL);
	sib_run(&p, parent->src->costly_reads && n > 1);
	pthread_mutex_destroy(&p.lock);
	if (!stop_at_failure)
		return;
	/* as if opened in order: nothing after the first failure */
	for (i = 0; i < n; i++) {
		if (failed) {
			pt__ckpt_free(v[i].ck);
			v[i].ck = NULL;
			v[i].rc = -ECANCELED;
		}
		failed = failed || v[i].rc;
	}
}
