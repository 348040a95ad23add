/* SPDX-License-Identifier: MIT */
/*
 * diff.h -- comparing one tensor of a checkpoint with one of another
 * (`ptfs diff`): bytes first (equal bytes = unchanged, no float compare),
 * values only where the bytes differ or the dtypes do.
 */
#ifndef PTFS_CORE_VIEW_DIFF_H
#define PTFS_CORE_VIEW_DIFF_H

#include <stdbool.h>
#include <stdint.h>

#include "ckpt/ckpt.h"

enum pt_dstatus {
	PT_D_SAME,      /* same dtype, shape and bytes */
	PT_D_VALUE,     /* same dtype and shape, other bytes */
	PT_D_DTYPE,     /* other dtype (values compared when shapes match) */
	PT_D_SHAPE,     /* other shape (or element count) */
	PT_D_ADDED,     /* only in B */
	PT_D_REMOVED,   /* only in A */
};

/* One element of a changed tensor: its index in C order (a complex
 * value counts once) and the real parts of both sides' values. */
struct pt_dat {
	uint64_t index;
	double a, b;
};

struct pt_tdiff {
	enum pt_dstatus status;
	bool compared;          /* values compared: the numbers below hold */
	uint64_t changed;       /* values that differ (NaN equals NaN) */
	uint64_t values;        /* values compared */
	double max_abs;         /* max |a - b| over values finite in both */
	double rel_l2;          /* ||a - b|| / ||a|| over those values
				 * (Inf when ||a|| is 0 and they differ) */
	uint64_t nonfinite;     /* values where exactly one side is NaN or
				 * Inf, or both infinite with other signs */
	struct pt_dat first;    /* the first value that differs (changed > 0) */
	struct pt_dat largest;  /* where |a - b| is max_abs (max_abs > 0) */
};

/* Compare tensor file @na of @a with @nb of @b into @d.  0, or a negative
 * errno with one line in @err (the bytes could not be read). */
int pt_tensor_diff(struct pt_ckpt *a, struct pt_node *na, struct pt_ckpt *b,
		   struct pt_node *nb, struct pt_tdiff *d, struct pt_error *err);

/* "same", "changed", "dtype", "shape", "added", "removed". */
const char *pt_dstatus_name(enum pt_dstatus s);

#endif /* PTFS_CORE_VIEW_DIFF_H */
