/* SPDX-License-Identifier: MIT */
/*
 * fuzz_edit.c -- libFuzzer target for checkpoint surgery on hostile
 * input: the edits of ckpt/edit.c on a fuzzed checkpoint's graph (cyclic,
 * shared, deep), then the restructure's dry run, which writes data.pkl
 * again with the pickle writer and lays out the new archive or header.
 *
 * Opens the input editable (every argument kept); for each of the first
 * entries of the root, an edit chosen by the input's bytes: remove, rename
 * in place, move into a new dict, a new scalar value, a tensor replaced by
 * a small one.  Invariants: every edit and the dry run end with 0 or an
 * error that carries a line; a dry run that succeeds gives a size.
 */
#include <stdio.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "fuzz.h"
#include "fuzz_limits.h"

#define FUZZ_EDITS 8

static const int64_t four[] = { 4 };
static const uint8_t bytes4[4] = { 1, 2, 3, 4 };

static int one_edit(struct pt_ckpt *ck, const char *name, unsigned op,
		    unsigned i, struct pt_error *err)
{
	struct pt_edit_tensor t = { "int8", 1, four, bytes4, 4 };
	char to[300];

	switch (op % 6) {
	case 0:
		return pt_edit_remove(ck, name, err);
	case 1:
		snprintf(to, sizeof(to), "renamed%u", i);
		return pt_edit_move(ck, name, to, err);
	case 2:
		snprintf(to, sizeof(to), "dir%u", i);
		if (pt_edit_mkdir(ck, to, err) != 0)
			return -1;
		return pt_edit_move(ck, name, to, err);
	case 3:
		return pt_edit_scalar(ck, name, "7\n", 2, err);
	case 4:
		return pt_edit_tensor(ck, name, &t, true, err);
	default:
		snprintf(to, sizeof(to), "added%u", i);
		return pt_edit_tensor(ck, to, &t, false, err);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct pt_ckpt_opts opts;
	struct pt_ckpt *ck = NULL;
	struct pt_error err = { 0 };
	char names[FUZZ_EDITS][256];
	size_t n = 0, i;
	uint64_t out = 0;
	int rc;

	fuzz_ckpt_opts(&opts);
	opts.editable = true;
	if (pt_ckpt_open_mem(&ck, data, size, "fuzz.pt", &opts, &err) != 0)
		return 0;
	/* the names first: each edit makes the tree again */
	for (i = 0; n < FUZZ_EDITS; i++) {
		struct pt_node *c = pt_tree_child(ck, pt_tree_root(ck), i, &rc);

		if (!c)
			break;
		if (pt_node_name(c)[0] != '.' && strlen(pt_node_name(c)) < sizeof(names[0]))
			snprintf(names[n++], sizeof(names[0]), "%s", pt_node_name(c));
	}
	for (i = 0; i < n; i++) {
		memset(&err, 0, sizeof(err));
		rc = one_edit(ck, names[i], size ? data[(i * 131) % size] : 0,
			      (unsigned)i, &err);
		FUZZ_CHECK(rc == 0 || err.msg[0] != '\0');
	}
	memset(&err, 0, sizeof(err));
	rc = pt_edit_size(ck, &out, &err);
	FUZZ_CHECK(rc == 0 || err.msg[0] != '\0');
	FUZZ_CHECK(rc != 0 || out > 0);
	pt_ckpt_close(ck);
	return 0;
}
