/* SPDX-License-Identifier: MIT */
/*
 * fuzz_onnx.c -- libFuzzer target for the protobuf wire-format reader
 * (decode/pb.c) and the ONNX format over it (fmt/onnx.c).
 *
 * First the input is walked as protobuf with an explicit stack: every
 * length-delimited field is tried as a sub-message until the reader's
 * depth cap.  Checked: a field's payload lies inside its message, the
 * reader moves forward on every field, a failure leaves a message and
 * sub-messages never nest past the cap.  Then the input is opened as a
 * checkpoint from memory (ONNX claims what starts like a ModelProto), and
 * when it opens every file of the tree is read through pt_tree_walk (up
 * to 16 MiB in all): the reads return exactly what the sizes say.
 */
#include <string.h>

#include "ckpt/ckpt.h"
#include "decode/pb.h"
#include "fuzz.h"
#include "fuzz_limits.h"

#define FUZZ_DEPTH 24
#define FUZZ_FIELDS 200000
#define FUZZ_READ (64u << 10)
#define FUZZ_TOTAL_READ (16u << 20)     /* per input */

static uint8_t fuzz_buf[FUZZ_READ];
static uint64_t fuzz_budget;

static void walk_pb(const uint8_t *data, size_t size)
{
	struct pt_pb stack[FUZZ_DEPTH + 1];
	struct pt_error err = { 0 };
	struct pt_source *src = NULL;
	struct pt_pb_src s;
	struct pt_pb_field f;
	size_t top = 0, fields = 0;
	int rc;

	if (pt_source_mem(data, size, "fuzz.onnx", &src, &err))
		return;
	if (pt_pb_src_init(&s, src, "fuzz", FUZZ_DEPTH, &err)) {
		pt_source_close(src);
		return;
	}
	FUZZ_CHECK(pt_pb_top(&s, 0, size, &stack[0]) == 0);
	while (fields++ < FUZZ_FIELDS) {
		struct pt_pb *m = &stack[top];
		uint64_t before = m->pos;

		rc = pt_pb_next(m, &f);
		if (rc < 0)
			FUZZ_CHECK(err.msg[0] != '\0');
		if (rc <= 0) {
			/* this message is done (or bad): back to its parent */
			err.code = 0;
			err.msg[0] = '\0';
			if (top == 0)
				break;
			top--;
			continue;
		}
		FUZZ_CHECK(m->pos > before && m->pos <= m->end);
		FUZZ_CHECK(f.num > 0);
		if (f.wire != PT_PB_LEN)
			continue;
		FUZZ_CHECK(f.off >= before && f.off + f.v == m->pos);
		rc = pt_pb_sub(m, &f, &stack[top + 1]);
		if (rc) {
			FUZZ_CHECK(top == FUZZ_DEPTH && rc == -EFBIG);
			err.code = 0;
			err.msg[0] = '\0';
			continue;
		}
		FUZZ_CHECK(top < FUZZ_DEPTH);
		top++;
	}
	pt_pb_src_free(&s);
	pt_source_close(src);
}

static int read_entry(void *ctx, const struct pt_walk *w)
{
	struct pt_ckpt *ck = ctx;
	struct pt_error err = { 0 };
	struct pt_nattr a;
	ssize_t got;

	pt_node_attr(w->node, &a);
	if (a.type == PT_NT_DIR)
		return 0;
	if (fuzz_budget < FUZZ_READ)
		return PT_WALK_STOP;
	fuzz_budget -= FUZZ_READ;
	got = pt_node_read(ck, w->node, fuzz_buf, FUZZ_READ, 0, &err);
	if (got < 0)
		FUZZ_CHECK(err.msg[0] != '\0' || got == -ENOMEM);
	else
		FUZZ_CHECK((uint64_t)got == (a.size < FUZZ_READ ? a.size : FUZZ_READ));
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct pt_ckpt_opts opts;
	struct pt_error err = { 0 };
	struct pt_ckpt *ck = NULL;
	int rc;

	walk_pb(data, size);
	fuzz_ckpt_opts(&opts);
	rc = pt_ckpt_open_mem(&ck, data, size, "fuzz.onnx", &opts, &err);
	if (rc) {
		FUZZ_CHECK(rc < 0 && ck == NULL && err.msg[0] != '\0');
		return 0;
	}
	fuzz_budget = FUZZ_TOTAL_READ;
	rc = pt_tree_walk(ck, pt_tree_root(ck), "", PT_WALK_ALL, read_entry, ck,
			  NULL);
	FUZZ_CHECK(rc <= 0);
	pt_ckpt_close(ck);
	return 0;
}
