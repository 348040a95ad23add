/* SPDX-License-Identifier: MIT */
/* limits.c -- default caps; see pt_limits.h and README.md for why these. */
#include "base/pt_limits.h"

void pt_limits_default(struct pt_limits *l)
{
	/* torch never writes more than one record per storage plus a handful;
	 * 16 Mi records is far beyond any real checkpoint. */
	l->max_records = 1u << 24;
	/* data.pkl of a 1e6-tensor state dict is ~100 MB; numpy arrays can
	 * embed more, so allow 4 GiB but no more. */
	l->max_pickle_bytes = 4ull << 30;
	l->max_inflate_bytes = 4ull << 30;
	/* a pickle op makes at most one node: 64 Mi nodes ~ 3 GiB worst case */
	l->max_values = 1ull << 26;
	l->max_memo = 1ull << 26;
	l->max_memory = 2ull << 30;
	/* Python's own unpickler recurses ~1000 deep; 10000 covers any real
	 * nesting while keeping walks cheap. */
	l->max_depth = 10000;
	l->max_rank = 64;
	l->max_dir_entries = 1ull << 24;
	/* A 20,000-tensor state dict is 40,000 entries, ~3 MB of paths and
	 * a 9 MB tree.json; an optimizer state with its moments a few times
	 * that.  2^20 entries cost a mount ~100 MB of nodes, kept until
	 * unmount, and about a second of work; 64 MiB of paths or generated
	 * text (tree.json of ~150,000 tensors) about as much. */
	l->max_walk_entries = 1ull << 20;
	l->max_walk_bytes = 64ull << 20;
}
