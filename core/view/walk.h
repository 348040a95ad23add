/* SPDX-License-Identifier: MIT */
/*
 * walk.h -- the tensor files below a directory of the tree, and a small
 * thread pool to work on them in parallel (stats, diff).
 */
#ifndef PTFS_CORE_VIEW_WALK_H
#define PTFS_CORE_VIEW_WALK_H

#include <stddef.h>

#include "ckpt/ckpt.h"

struct pt_view_item {
	char *path;             /* '/'-separated path below the root */
	char *key;              /* the same with '.' for '/': the key that
				 * matches across formats ("a.b.c") */
	struct pt_node *node;
};

/*
 * Every tensor file at or below @top (sidecars and /.ptfs left out), in
 * listing order, with paths starting with @prefix ("" for the root),
 * through the one bounded walk (pt_tree_walk).  A folder that cannot be
 * listed is left out (the other tensors still count); a spent walk budget
 * (-E2BIG), an interruption (-EINTR) or -ENOMEM fail the whole list with
 * one line in @err.  Returns 0 and a malloc'ed array (free with
 * pt_view_items_free()), or that error.
 */
int pt_view_tensors(struct pt_ckpt *ck, struct pt_node *top, const char *prefix,
		    struct pt_view_item **out, size_t *n, struct pt_error *err);
void pt_view_items_free(struct pt_view_item *v, size_t n);

/* One tensor shown at several places (references that multiply, tied
 * weights listed twice): for each item the index of the first item with
 * the same bytes in the same layout (same storage, offset, dtype, shape,
 * strides), itself when none comes before; malloc'ed, NULL when out of
 * memory.  Consumers compute once per distinct index (stats of a tensor
 * once). */
size_t *pt_view_same(const struct pt_view_item *v, size_t n);

/* Call @fn(@ctx, i) for i in [0, @n) on @jobs threads (at least 1; the
 * calling thread is one of them).  Each i is done exactly once. */
void pt_view_parallel(size_t n, unsigned jobs, void (*fn)(void *ctx, size_t i),
		      void *ctx);

#endif /* PTFS_CORE_VIEW_WALK_H */
