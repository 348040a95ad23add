/* SPDX-License-Identifier: MIT */
/*
 * fuzz_ckpt.c -- libFuzzer target for a whole checkpoint: container
 * detection, the pickle, tensor interpretation and the lazy tree.
 *
 * Opens the input with pt_ckpt_open_mem() and, when it opens, walks the
 * tree depth-first with an explicit stack (at most FUZZ_NODES nodes, since
 * shared references may make it exponentially large), stats every node,
 * reads every file in pieces and generates what the front ends show
 * (tree.json, info, tensor metadata, xattrs, the weights-only verdict).
 * Invariants: a read of @n at
 * @off returns exactly min(size - off, n) bytes, and the same bytes
 * whatever the piece size; names are non-empty with no '/'; lookups by name
 * find the same node.
 */
#include <string.h>

#include "ckpt/ckpt.h"
#include "export/export.h"
#include "fuzz.h"
#include "fuzz_limits.h"

#define FUZZ_NODES 20000
/* Bytes read per file (head and tail) and per input, so a tensor that
 * claims gigabytes of a small storage stays cheap. */
#define FUZZ_FILE_READ (64u << 10)
#define FUZZ_TOTAL_READ (16u << 20)

static uint8_t fuzz_a[FUZZ_FILE_READ];
static uint8_t fuzz_b[FUZZ_FILE_READ];

/* Read up to FUZZ_FILE_READ bytes at @off twice: in one call and in odd
 * pieces; both must give min(size - off, n) identical bytes. */
static uint64_t read_file(struct pt_ckpt *ck, struct pt_node *node,
			  uint64_t size, uint64_t off)
{
	struct pt_error err = { 0 };
	uint64_t want = size - off < FUZZ_FILE_READ ? size - off :
						       FUZZ_FILE_READ;
	uint64_t done = 0;
	ssize_t got;

	got = pt_node_read(ck, node, fuzz_a, FUZZ_FILE_READ, off, &err);
	if (got < 0) {
		/* Storage that fails to inflate is reported on read. */
		FUZZ_CHECK(err.msg[0] != '\0' || got == -ENOMEM);
		return 0;
	}
	FUZZ_CHECK((uint64_t)got == want);
	while (done < want) {
		size_t piece = 1 + (size_t)((done * 7919) % 4093);

		if (piece > want - done)
			piece = (size_t)(want - done);

		err.code = 0;
		err.msg[0] = '\0';
		got = pt_node_read(ck, node, fuzz_b + done, piece, off + done,
				   &err);
		FUZZ_CHECK(got > 0);
		FUZZ_CHECK((size_t)got == piece);
		done += (uint64_t)got;
	}
	FUZZ_CHECK(memcmp(fuzz_a, fuzz_b, (size_t)want) == 0);
	return want;
}

static void visit(struct pt_ckpt *ck, struct pt_node *node,
		  uint64_t *budget)
{
	struct pt_error err = { 0 };
	struct pt_nattr a;
	struct pt_buf b;
	uint64_t got;
	uint64_t fo;
	int efd;
	uint8_t one;

	pt_node_attr(node, &a);
	pt_buf_init(&b);
	pt_node_describe(ck, node, &b);
	(void)pt_node_xattrs(ck, node, &b);
	FUZZ_CHECK(!b.oom);
	b.len = 0;
	(void)pt_node_tensor_json(ck, node, &b);
	FUZZ_CHECK(!b.oom);
	pt_buf_free(&b);
	if (a.type == PT_NT_DIR) {
		FUZZ_CHECK(pt_node_read(ck, node, &one, 1, 0, &err) ==
			   -EISDIR);
		return;
	}
	FUZZ_CHECK(pt_node_read(ck, node, &one, 1, a.size, &err) == 0);
	FUZZ_CHECK(pt_node_read(ck, node, &one, 1, UINT64_MAX, &err) == 0);
	if (pt_node_extent(ck, node, 0, a.size, &efd, &fo))
		FUZZ_CHECK(fo <= UINT64_MAX - a.size);
	if (a.size == 0 || *budget == 0)
		return;
	got = read_file(ck, node, a.size, 0);
	if (a.size > FUZZ_FILE_READ)
		got += read_file(ck, node, a.size, a.size - FUZZ_FILE_READ / 2);
	*budget = got < *budget ? *budget - got : 0;
}

struct fuzz_walk {
	struct pt_ckpt *ck;
	uint64_t budget;
	size_t nodes;
};

/* Every entry the walk meets: consistent with its parent and lookup. */
static int walk_entry(void *ctx, const struct pt_walk *w)
{
	struct fuzz_walk *f = ctx;
	struct pt_node *c = w->node, *parent = pt_node_parent(c);
	const char *name = pt_node_name(c);
	int rc = 0;

	if (f->nodes++ >= FUZZ_NODES)
		return PT_WALK_STOP;
	FUZZ_CHECK(parent != NULL);
	FUZZ_CHECK(name && name[0] != '\0');
	FUZZ_CHECK(strchr(name, '/') == NULL);
	FUZZ_CHECK(strcmp(name, ".") != 0 && strcmp(name, "..") != 0);
	FUZZ_CHECK(pt_tree_lookup(f->ck, parent, name, &rc) == c);
	visit(f->ck, c, &f->budget);
	return 0;
}

static void walk(struct pt_ckpt *ck)
{
	struct fuzz_walk f = { ck, FUZZ_TOTAL_READ, 0 };
	int rc;

	visit(ck, pt_tree_root(ck), &f.budget);
	rc = pt_tree_walk(ck, pt_tree_root(ck), "", PT_WALK_ALL, walk_entry, &f, NULL);
	FUZZ_CHECK(rc <= 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct pt_ckpt_opts opts;
	struct pt_error err = { 0 };
	struct pt_ckpt *ck = NULL;
	struct pt_buf b;
	int rc;

	fuzz_ckpt_opts(&opts);
	opts.nested = size > 0 && (data[size - 1] & 1);
	rc = pt_ckpt_open_mem(&ck, data, size, "fuzz.pt", &opts, &err);
	if (rc) {
		FUZZ_CHECK(rc < 0);
		FUZZ_CHECK(ck == NULL);
		FUZZ_CHECK(err.msg[0] != '\0');
		return 0;
	}
	FUZZ_CHECK(pt_ckpt_format(ck) != NULL);
	FUZZ_CHECK(pt_ckpt_warnings(ck) != NULL);
	walk(ck);

	pt_buf_init(&b);
	pt_tree_json(ck, &b, 5000, NULL);
	FUZZ_CHECK(!b.oom);
	FUZZ_CHECK(b.len > 0 && strlen(b.p) == b.len);
	b.len = 0;
	pt_ckpt_info(ck, &b);
	FUZZ_CHECK(!b.oom);
	b.len = 0;
	rc = pt_weights_only(ck, &b);     /* the opcode scanner on any pickle */
	FUZZ_CHECK((rc == 0 || rc == 1) && b.len > 0);
	pt_buf_free(&b);
	pt_ckpt_close(ck);
	return 0;
}
