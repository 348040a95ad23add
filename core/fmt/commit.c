/* SPDX-License-Identifier: MIT */
/*
 * commit.c -- what the writing formats (zip.c, safetensors.c, onnx.c) share around
 * a commit: the patches planned from the storages' commits, applied the
 * way -o commit says, and the line that says how it went (fmt.h).
 */
#include "fmt/fmt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt_i.h"

/* A storage's changed range, read through its commit (offsets from the
 * range's start). */
struct cm_sub {
	const struct pt_commit *c;
	uint64_t base;
};

static int cm_sub_read(void *ctx, void *buf, size_t n, uint64_t at)
{
	const struct cm_sub *s = ctx;

	return s->c->read(s->c->ctx, buf, n, s->base + at);
}

static int cm_patch_cmp(const void *a, const void *b)
{
	const struct pt_patch *x = a, *y = b;

	return x->off < y->off ? -1 : x->off > y->off;
}

int pt__commit_plan(const struct pt_commit *c, size_t n, struct pt_patch **p,
		    void **ctx, size_t *np, uint64_t *bytes)
{
	struct cm_sub *subs;
	size_t i, j, k = 0, total = 0;

	for (i = 0; i < n; i++)
		total += c[i].ranges ? c[i].n_ranges : 1;
	*p = calloc(total ? total : 1, sizeof(**p));
	*ctx = subs = calloc(total ? total : 1, sizeof(*subs));
	if (!*p || !subs)
		return -ENOMEM;
	*bytes = 0;
	for (i = 0; i < n; i++)
		for (j = 0; j < (c[i].ranges ? c[i].n_ranges : 1); j++, k++) {
			subs[k].c = &c[i];
			subs[k].base = c[i].ranges ? c[i].ranges[j][0] : 0;
			(*p)[k].off = c[i].st->file_off + subs[k].base;
			(*p)[k].len = c[i].ranges ? c[i].ranges[j][1] : c[i].st->nbytes;
			(*p)[k].read = cm_sub_read;
			(*p)[k].ctx = &subs[k];
			*bytes += (*p)[k].len;
		}
	*np = k;
	qsort(*p, k, sizeof(**p), cm_patch_cmp);
	return 0;
}

int pt__commit_patch(struct pt_ckpt *ck, const struct pt_patch *p, size_t n,
		     bool own_rewrite, enum pt_commit_way *used,
		     struct pt_error *err)
{
	struct pt_replace_expect ex;

	/* the file must still be the one the source opened */
	memset(&ex, 0, sizeof(ex));
	ex.size = (off_t)ck->src->size;
	ex.mtime = ck->src->mtime;
	return pt_patch_apply(pt_source_local_path(ck->src), ck->opts.commit,
			      p, n, &ex, own_rewrite, &ck->no_clone, used, err);
}

int pt__commit_end(struct pt_ckpt *ck, int rc, enum pt_commit_way used,
		   uint64_t bytes, struct pt_error *err)
{
	if (rc) {
		pt_error_prefix(err, "commit (%s)", pt_commit_way_name(used));
		return rc;
	}
	snprintf(ck->last_commit, sizeof(ck->last_commit),
		 "%s, %llu bytes written", pt_commit_way_name(used),
		 (unsigned long long)bytes);
	return 0;
}
