/* SPDX-License-Identifier: MIT */
/*
 * diff_values.h -- `ptfs diff` of the values that are not tensors (see
 * diff_values.c).
 */
#ifndef PTFS_FS_DIFF_VALUES_H
#define PTFS_FS_DIFF_VALUES_H

#include <stdbool.h>
#include <stddef.h>

#include "base/buf.h"
#include "ckpt/ckpt.h"
#include "export/export.h"

struct ptfs_vdiff {
	struct pt_xlist xa, xb;         /* each side's values, sorted by key */
	bool have_a, have_b;
	size_t same, changed, added, removed;   /* ptfs_values_print() */
};

/* Collect both sides' values: 0, or -errno with one line in @err (a tree
 * over the walk's budget).  Free with ptfs_values_free() either way. */
int ptfs_values_diff(struct pt_ckpt *a, struct pt_ckpt *b,
		     struct ptfs_vdiff *v, struct pt_error *err);

/* Append a line per difference (JSON: a "values" member) and count them. */
void ptfs_values_print(struct ptfs_vdiff *v, struct pt_buf *o, bool json);

/* The counts, after the tensors' summary (JSON: an object). */
void ptfs_values_summary(const struct ptfs_vdiff *v, struct pt_buf *o, bool json);

bool ptfs_values_differ(const struct ptfs_vdiff *v);
void ptfs_values_free(struct ptfs_vdiff *v);

#endif /* PTFS_FS_DIFF_VALUES_H */
