/* SPDX-License-Identifier: MIT */
/*
 * pt_limits.h -- hard caps that hold under attack.
 *
 * A checkpoint is untrusted: every count, length and depth that the file
 * declares is checked against these caps before anything is allocated, so
 * that a hostile file ends in -EFBIG with a clear message, in bounded time
 * and memory.  The front ends expose each cap as an option.
 */
#ifndef PTFS_CORE_LIMITS_H
#define PTFS_CORE_LIMITS_H

#include <stdint.h>

struct pt_limits {
	uint64_t max_records;       /* ZIP entries in one archive */
	uint64_t max_pickle_bytes;  /* size of one pickle stream (data.pkl) */
	uint64_t max_inflate_bytes; /* size of one deflated record, inflated */
	uint64_t max_values;        /* value nodes one pickle may create */
	uint64_t max_memo;          /* memo entries (and largest memo index) */
	uint64_t max_memory;        /* bytes the pickle graph may allocate */
	uint32_t max_depth;         /* pickle stack, mark stack, tree depth */
	uint32_t max_rank;          /* dimensions of one tensor */
	uint64_t max_dir_entries;   /* entries listed under one directory */
	/* The budget of every walk of the tree (ptfs ls, stat, diff, export,
	 * tree.json, /.ptfs/stats and /.ptfs/export in a mount): entries it
	 * visits, and bytes of the paths it makes plus the output made from
	 * them.  A tree whose references multiply (a list of two references
	 * to a list of two references to ...) has 2^30 paths in a few hundred
	 * bytes: a walk stops there with -EFBIG and one line. */
	uint64_t max_walk_entries;
	uint64_t max_walk_bytes;
};

/* Fill @l with the defaults (documented in README.md, "Limits"). */
void pt_limits_default(struct pt_limits *l);

#endif /* PTFS_CORE_LIMITS_H */
