/* SPDX-License-Identifier: MIT */
/*
 * fuzz_tree.c -- libFuzzer target for every surface of an opened
 * checkpoint under the walk's budget: what a mount generates.
 *
 * Opens the input with small caps (max_walk_entries, max_walk_bytes), adds
 * what the daemon adds (/.ptfs/export, NAME.png pictures drawn by the
 * preview renderer, a /.ptfs/stats-like directory filled through
 * pt_view_tensors()), then walks the whole tree with PT_WALK_ALL |
 * PT_WALK_ONCE (each value once, sidecars and /.ptfs included) and reads
 * the head of every file, virtual ones included, and the statistics of
 * small tensors.  Invariants: the walk ends within its budget (never more
 * visits than max_walk_entries) with 0, -E2BIG or a listing error; a spent
 * budget carries a line; generated files read exactly what their size
 * says or fail with a line.
 */
#include <string.h>
#include <strings.h>

#include "ckpt/ckpt.h"
#include "export/export.h"
#include "fuzz.h"
#include "fuzz_limits.h"
#include "view/preview.h"
#include "view/stats.h"
#include "view/walk.h"

#define FUZZ_ENTRIES 5000
#define FUZZ_BYTES (1u << 20)
#define FUZZ_HEAD (16u << 10)
#define FUZZ_STATS_MAX (256u << 10)     /* tensors whose stats are taken */

static uint8_t head[FUZZ_HEAD];

static int draw(void *ctx, struct pt_ckpt *ck, struct pt_node *tensor,
		uint8_t **data, size_t *len, struct pt_error *err)
{
	struct pt_preview pv;
	int rc;

	(void)ctx;
	rc = pt_preview_render(ck, tensor, 64, &pv, err);
	if (rc)
		return rc;
	*data = pv.png;
	*len = pv.len;
	return 0;
}

static int draw_size(void *ctx, struct pt_node *tensor, uint64_t *size)
{
	struct pt_error err;
	struct pt_tinfo ti;

	(void)ctx;
	if (!pt_node_tinfo(tensor, &ti))
		return -EINVAL;
	return pt_preview_size(&ti, 64, size, &err);
}

/* The stats directory: one empty file per tensor, as the mount names it;
 * what matters here is the bounded walk behind it. */
static int stat_read(void *ctx, void *buf, size_t n, uint64_t off,
		     struct pt_error *err)
{
	(void)ctx;
	(void)buf;
	(void)n;
	(void)off;
	return pt_fail(err, -EIO, "empty");
}

static int stats_fill(void *ctx, struct pt_ckpt *ck, struct pt_vdir *d,
		      struct pt_error *err)
{
	struct pt_view_item *items = NULL;
	struct pt_vfile vf = { 0, stat_read, NULL, NULL, NULL, NULL };
	size_t n = 0, i;
	int rc;

	(void)ctx;
	rc = pt_view_tensors(ck, pt_tree_root(ck), "", &items, &n, err);
	if (rc) {
		FUZZ_CHECK(err->msg[0] != '\0');
		return rc;
	}
	FUZZ_CHECK(n <= FUZZ_ENTRIES);
	for (i = 0; i < n; i++) {
		struct pt_buf rel;

		pt_buf_init(&rel);
		pt_buf_printf(&rel, "%s.json", items[i].path);
		if (rel.p)
			(void)pt_vdir_add(d, rel.p, &vf);
		pt_buf_free(&rel);
	}
	pt_view_items_free(items, n);
	return 0;
}

struct fz {
	struct pt_ckpt *ck;
	uint64_t visits;
	unsigned stats;
	bool suffix;                    /* opts.suffix */
};

/* Does @path end in @ext, in any ASCII case? */
static bool ends_in(const char *path, const char *ext)
{
	size_t n = strlen(path), e = strlen(ext);

	return n >= e && strncasecmp(path + n - e, ext, e) == 0;
}

/* The suffix layout: a file ends in ".tensor" if and only if it is a
 * tensor's own file (docs/LAYOUT.md, "NAME.tensor with -o suffix"). */
static void check_suffix(const struct fz *f, const struct pt_walk *w)
{
	struct pt_tinfo ti;
	struct pt_nattr a;
	bool tensor;

	pt_node_attr(w->node, &a);
	if (!f->suffix || a.type != PT_NT_FILE)
		return;
	tensor = pt_node_tinfo(w->node, &ti) && !ends_in(w->path, ".json");
	FUZZ_CHECK(tensor == ends_in(w->path, ".tensor"));
}

static void read_head(struct fz *f, struct pt_node *node)
{
	struct pt_error err = { 0 };
	struct pt_nattr a;
	ssize_t got;

	pt_node_attr(node, &a);
	if (a.type == PT_NT_DIR)
		return;
	got = pt_node_read(f->ck, node, head, sizeof(head), 0, &err);
	if (got < 0) {
		FUZZ_CHECK(err.msg[0] != '\0' || got == -ENOMEM);
		return;
	}
	pt_node_attr(node, &a);         /* a picture knows its size now */
	FUZZ_CHECK((uint64_t)got == (a.size < sizeof(head) ? a.size : sizeof(head)));
}

static void tensor_stats(struct fz *f, struct pt_node *node)
{
	struct pt_tstats st;
	struct pt_error err = { 0 };
	struct pt_tinfo ti;

	if (f->stats >= 8 || !pt_node_tinfo(node, &ti) || ti.nbytes > FUZZ_STATS_MAX)
		return;
	f->stats++;
	if (pt_tensor_stats(f->ck, node, &st, &err) != 0)
		FUZZ_CHECK(err.msg[0] != '\0');
}

static int entry(void *ctx, const struct pt_walk *w)
{
	struct fz *f = ctx;

	f->visits++;
	FUZZ_CHECK(f->visits <= FUZZ_ENTRIES);
	FUZZ_CHECK(w->path_len == strlen(w->path));
	read_head(f, w->node);
	tensor_stats(f, w->node);
	check_suffix(f, w);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct pt_ckpt_opts opts;
	struct pt_error err = { 0 };
	struct pt_ckpt *ck = NULL;
	struct fz f = { NULL, 0, 0, false };
	int rc;

	fuzz_ckpt_opts(&opts);
	opts.limits.max_walk_entries = FUZZ_ENTRIES;
	opts.limits.max_walk_bytes = FUZZ_BYTES;
	opts.previews = size > 0 && (data[size - 1] & 2);
	opts.nested = size > 0 && (data[size - 1] & 1);
	opts.suffix = size > 0 && (data[size - 1] & 4);
	rc = pt_ckpt_open_mem(&ck, data, size, "fuzz.pt", &opts, &err);
	if (rc) {
		FUZZ_CHECK(rc < 0 && ck == NULL && err.msg[0] != '\0');
		return 0;
	}
	pt_ckpt_set_picture_maker(ck, draw, draw_size, NULL);
	FUZZ_CHECK(pt_tree_set_vdir(ck, "stats", stats_fill, NULL) == 0);
	(void)pt_export_mount_files(ck);
	f.ck = ck;
	f.suffix = opts.suffix;
	pt_error_clear(&err);
	rc = pt_tree_walk(ck, pt_tree_root(ck), "", PT_WALK_ALL | PT_WALK_ONCE,
			  entry, &f, &err);
	FUZZ_CHECK(rc <= 0);
	/* its own budget, or a generated directory whose walk was over
	 * its budget: a line either way */
	if (rc == -E2BIG)
		FUZZ_CHECK(strstr(err.msg, "in one walk of the tree") != NULL ||
			   strstr(err.msg, "cannot be listed") != NULL);
	pt_ckpt_close(ck);
	return 0;
}
