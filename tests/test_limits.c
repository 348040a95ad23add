/* SPDX-License-Identifier: MIT */
/*
 * test_limits.c -- hostile checkpoints built in memory: every one must end
 * in a clear error (code and message checked) in bounded time and memory,
 * or, for references that multiply, open at once with a usable tree.
 *
 * Each case is a torch-like stored ZIP (archive/data.pkl, archive/version,
 * archive/data/0) opened with pt_ckpt_open_mem() and the default limits,
 * so the defaults themselves are what is tested.  Pickles are written by
 * hand, opcode by opcode (names from CPython's Lib/pickletools.py).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "ckpt/ckpt.h"
#include "base/cancel.h"
#include "base/rd.h"
#include "export/export.h"
#include "view/walk.h"

/* Under ASan every case still takes well under a second of CPU; a hang or
 * a quadratic walk would take minutes.  The bound is on this process's CPU
 * time, not the wall clock, so a machine busy with other work (parallel
 * ctest, other jobs) does not make it fail. */
#define MAX_SECONDS 10.0

/* ---- a byte buffer ----------------------------------------------------- */

struct bb {
	uint8_t *p;
	size_t len;
	size_t cap;
};

static void bb_put(struct bb *b, const void *p, size_t n)
{
	if (b->cap - b->len < n) {
		while (b->cap - b->len < n)
			b->cap = b->cap ? b->cap * 2 : 1024;
		b->p = realloc(b->p, b->cap);
		assert_non_null(b->p);
	}
	if (n)
		memcpy(b->p + b->len, p, n);
	b->len += n;
}

static void bb_u8(struct bb *b, unsigned v)
{
	uint8_t c = (uint8_t)v;

	bb_put(b, &c, 1);
}

static void bb_u16(struct bb *b, uint64_t v)
{
	uint8_t q[2];

	pt_put16(q, (uint16_t)v);
	bb_put(b, q, 2);
}

static void bb_u32(struct bb *b, uint64_t v)
{
	uint8_t q[4];

	pt_put32(q, (uint32_t)v);
	bb_put(b, q, 4);
}

static void bb_u64(struct bb *b, uint64_t v)
{
	uint8_t q[8];

	pt_put64(q, v);
	bb_put(b, q, 8);
}

static void bb_str(struct bb *b, const char *s)
{
	bb_put(b, s, strlen(s));
}

static void bb_free(struct bb *b)
{
	free(b->p);
	memset(b, 0, sizeof(*b));
}

/* ---- pickle opcodes ---------------------------------------------------- */

static void pk_proto(struct bb *b, unsigned proto)
{
	bb_u8(b, 0x80); /* PROTO */
	bb_u8(b, proto);
}

/* BINUNICODE */
static void pk_str(struct bb *b, const char *s)
{
	bb_u8(b, 'X');
	bb_u32(b, strlen(s));
	bb_str(b, s);
}

/* BININT, or LONG1 with 8 bytes for values outside int32 */
static void pk_int(struct bb *b, int64_t v)
{
	if (v >= INT32_MIN && v <= INT32_MAX) {
		bb_u8(b, 'J');
		bb_u32(b, (uint32_t)(int32_t)v);
		return;
	}
	bb_u8(b, 0x8a);
	bb_u8(b, 8);
	bb_u64(b, (uint64_t)v);
}

/* GLOBAL module\nname\n */
static void pk_global(struct bb *b, const char *module, const char *name)
{
	bb_u8(b, 'c');
	bb_str(b, module);
	bb_u8(b, '\n');
	bb_str(b, name);
	bb_u8(b, '\n');
}

static void pk_int_tuple(struct bb *b, const int64_t *v, size_t n)
{
	size_t i;

	bb_u8(b, '('); /* MARK */
	for (i = 0; i < n; i++)
		pk_int(b, v[i]);
	bb_u8(b, 't'); /* TUPLE */
}

/*
 * torch._utils._rebuild_tensor_v2(
 *     persistent_load(('storage', torch.<storage>, '0', 'cpu', numel)),
 *     offset, shape, stride, False, OrderedDict())
 */
static void pk_tensor(struct bb *b, const char *storage, int64_t numel,
		      int64_t offset, const int64_t *shape,
		      const int64_t *stride, size_t rank)
{
	pk_global(b, "torch._utils", "_rebuild_tensor_v2");
	bb_u8(b, '(');
	bb_u8(b, '(');
	pk_str(b, "storage");
	pk_global(b, "torch", storage);
	pk_str(b, "0");
	pk_str(b, "cpu");
	pk_int(b, numel);
	bb_u8(b, 't');
	bb_u8(b, 'Q'); /* BINPERSID */
	pk_int(b, offset);
	pk_int_tuple(b, shape, rank);
	pk_int_tuple(b, stride, rank);
	bb_u8(b, 0x89); /* NEWFALSE */
	pk_global(b, "collections", "OrderedDict");
	bb_u8(b, ')'); /* EMPTY_TUPLE */
	bb_u8(b, 'R'); /* REDUCE */
	bb_u8(b, 't');
	bb_u8(b, 'R');
}

/* {'t': <tensor>} as a whole data.pkl */
static void pk_tensor_dict(struct bb *b, const char *storage, int64_t numel,
			   int64_t offset, const int64_t *shape,
			   const int64_t *stride, size_t rank)
{
	pk_proto(b, 2);
	bb_u8(b, '}'); /* EMPTY_DICT */
	pk_str(b, "t");
	pk_tensor(b, storage, numel, offset, shape, stride, rank);
	bb_u8(b, 's'); /* SETITEM */
	bb_u8(b, '.'); /* STOP */
}

/* ---- a stored ZIP (APPNOTE §4.3.7, §4.3.12, §4.3.16) ------------------- */

struct rec {
	const char *name;
	const void *data;
	size_t len;
};

static void zip_build(struct bb *z, const struct rec *r, size_t n)
{
	uint64_t *lho = calloc(n ? n : 1, sizeof(*lho));
	uint64_t cd_off;
	uint64_t cd_size;
	size_t i;

	assert_non_null(lho);
	memset(z, 0, sizeof(*z));
	for (i = 0; i < n; i++) {
		lho[i] = z->len;
		bb_u32(z, 0x04034b50);
		bb_u16(z, 20);          /* version needed */
		bb_u16(z, 0x0800);      /* flags: UTF-8 */
		bb_u16(z, 0);           /* stored */
		bb_u16(z, 0);
		bb_u16(z, 0);
		bb_u32(z, 0);           /* CRC (torch writes 0 here) */
		bb_u32(z, r[i].len);
		bb_u32(z, r[i].len);
		bb_u16(z, strlen(r[i].name));
		bb_u16(z, 0);
		bb_str(z, r[i].name);
		bb_put(z, r[i].data, r[i].len);
	}
	cd_off = z->len;
	for (i = 0; i < n; i++) {
		bb_u32(z, 0x02014b50);
		bb_u16(z, 0x031e);
		bb_u16(z, 20);
		bb_u16(z, 0x0800);
		bb_u16(z, 0);
		bb_u16(z, 0);
		bb_u16(z, 0);
		bb_u32(z, 0);
		bb_u32(z, r[i].len);
		bb_u32(z, r[i].len);
		bb_u16(z, strlen(r[i].name));
		bb_u16(z, 0);
		bb_u16(z, 0);
		bb_u16(z, 0);
		bb_u16(z, 0);
		bb_u32(z, 0);
		bb_u32(z, lho[i]);
		bb_str(z, r[i].name);
	}
	cd_size = z->len - cd_off;
	bb_u32(z, 0x06054b50);
	bb_u16(z, 0);
	bb_u16(z, 0);
	bb_u16(z, n);
	bb_u16(z, n);
	bb_u32(z, cd_size);
	bb_u32(z, cd_off);
	bb_u16(z, 0);
	free(lho);
}

/* Offsets inside an archive built by zip_build(). */
static uint64_t zip_eocd(const struct bb *z)
{
	return z->len - 22;
}

static uint64_t zip_cd(const struct bb *z)
{
	return pt_le32(z->p + zip_eocd(z) + 16);
}

/* A checkpoint around @pkl with a storage record of @slen bytes. */
static void ckpt_build(struct bb *z, const struct bb *pkl, size_t slen)
{
	uint8_t *st = calloc(slen ? slen : 1, 1);
	struct rec r[3] = {
		{ "archive/data.pkl", pkl->p, pkl->len },
		{ "archive/version", "3\n", 2 },
		{ "archive/data/0", st, slen },
	};

	assert_non_null(st);
	zip_build(z, r, 3);
	free(st);
}

/* ---- running a case ---------------------------------------------------- */

/* CPU seconds this process has used (all threads). */
static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Open @z; it must fail with @code and a message containing @what. */
static void expect_fail(const struct bb *z, int code, const char *what)
{
	struct pt_ckpt *ck = (struct pt_ckpt *)1;
	struct pt_error err = { 0 };
	double t0 = now();
	int rc;

	rc = pt_ckpt_open_mem(&ck, z->p, z->len, "hostile.pt", NULL, &err);
	if (rc != code || !strstr(err.msg, what)) {
		const char *dump = getenv("PTFS_TEST_DUMP");

		print_error("got %d '%s', want %d with '%s'\n", rc, err.msg,
			    code, what);
		if (dump) {
			FILE *f = fopen(dump, "wb");

			if (f) {
				fwrite(z->p, 1, z->len, f);
				fclose(f);
			}
		}
	}
	pt_ckpt_close(rc == 0 ? ck : NULL);
	assert_int_equal(rc, code);
	assert_int_equal(err.code, code);
	assert_null(ck);
	assert_non_null(strstr(err.msg, what));
	assert_true(now() - t0 < MAX_SECONDS);
}

/* A pickle alone as data.pkl (with a 16-byte storage record). */
static void expect_pickle_fail(const struct bb *pkl, int code,
			       const char *what)
{
	struct bb z;

	ckpt_build(&z, pkl, 16);
	expect_fail(&z, code, what);
	bb_free(&z);
}

static struct pt_ckpt *open_ok(const struct bb *z)
{
	struct pt_ckpt *ck = NULL;
	struct pt_error err = { 0 };
	int rc;

	rc = pt_ckpt_open_mem(&ck, z->p, z->len, "hostile.pt", NULL, &err);
	if (rc)
		print_error("open failed: %d '%s'\n", rc, err.msg);
	assert_int_equal(rc, 0);
	assert_non_null(ck);
	return ck;
}

/* ---- the pickle machine ------------------------------------------------ */

/* MARK nested one deeper than max_depth (10000). */
static void deep_marks(void **state)
{
	struct bb p = { 0 };
	int i;

	(void)state;
	pk_proto(&p, 2);
	for (i = 0; i < 10001; i++)
		bb_u8(&p, '(');
	bb_u8(&p, '.');
	expect_pickle_fail(&p, -EFBIG, "more than 10000 nested MARKs");
	bb_free(&p);
}

/*
 * EMPTY_LIST x N then APPEND x (N - 1): lists nested N deep, far beyond
 * max_depth.  Decoding and classifying are iterative, so it opens; the
 * tree serves the first max_depth levels and refuses deeper ones with
 * -EFBIG, in time linear in the depth walked.
 */
static void deep_lists(void **state)
{
	const int n = 50000;
	struct pt_ckpt *ck;
	struct pt_node *node;
	struct pt_buf path;
	struct pt_buf json;
	struct bb p = { 0 };
	struct bb z;
	double t0 = now();
	int rc = 0;
	int i;

	(void)state;
	pk_proto(&p, 2);
	for (i = 0; i < n; i++)
		bb_u8(&p, ']'); /* EMPTY_LIST */
	for (i = 1; i < n; i++)
		bb_u8(&p, 'a'); /* APPEND */
	bb_u8(&p, '.');
	ckpt_build(&z, &p, 16);
	ck = open_ok(&z);

	pt_buf_init(&path);
	for (i = 0; i < 9999; i++)
		pt_buf_puts(&path, "0/");
	node = pt_tree_path(ck, path.p, &rc);
	if (!node)
		print_error("depth 9999: rc %d\n", rc);
	assert_int_equal(rc, 0);
	assert_non_null(node);
	/* depth 9999 is a directory; its child would be at depth 10001 */
	pt_buf_puts(&path, "0/0");
	node = pt_tree_path(ck, path.p, &rc);
	assert_null(node);
	assert_int_equal(rc, -EFBIG);

	/* every entry repeats its path: keep the listing short */
	pt_buf_init(&json);
	pt_tree_json(ck, &json, 2000, NULL);
	assert_false(json.oom);
	assert_non_null(strstr(json.p, "\"truncated\": true"));
	pt_buf_free(&json);
	pt_buf_free(&path);
	pt_ckpt_close(ck);
	bb_free(&z);
	bb_free(&p);
	assert_true(now() - t0 < MAX_SECONDS);
}

static void huge_memo_index(void **state)
{
	struct bb p = { 0 };

	(void)state;
	/* LONG_BINPUT 0xffffffff: past max_memo, nothing allocated */
	pk_proto(&p, 2);
	bb_u8(&p, ']');
	bb_u8(&p, 'r');
	bb_u32(&p, 0xffffffffu);
	bb_u8(&p, '.');
	expect_pickle_fail(&p, -EFBIG, "memo index 4294967295 past the limit");
	bb_free(&p);

	/* PUT with a decimal index beyond 64 bits */
	pk_proto(&p, 0);
	bb_u8(&p, ']');
	bb_str(&p, "p99999999999999999999999\n.");
	expect_pickle_fail(&p, -EBADMSG, "bad memo index");
	bb_free(&p);

	/* LONG_BINGET of an index never set */
	pk_proto(&p, 2);
	bb_u8(&p, 'j');
	bb_u32(&p, 0xfffffff0u);
	bb_u8(&p, '.');
	expect_pickle_fail(&p, -EBADMSG, "memo index 4294967280 not set");
	bb_free(&p);
}

static void huge_lengths(void **state)
{
	struct bb p = { 0 };

	(void)state;
	pk_proto(&p, 4);
	bb_u8(&p, 0x8d); /* BINUNICODE8 */
	bb_u64(&p, 1ull << 62);
	bb_u8(&p, '.');
	expect_pickle_fail(&p, -EBADMSG,
			   "BINUNICODE8 at offset 2: length 4611686018427387904 past end of input");
	bb_free(&p);

	pk_proto(&p, 4);
	bb_u8(&p, 0x8e); /* BINBYTES8 */
	bb_u64(&p, UINT64_MAX);
	bb_u8(&p, '.');
	expect_pickle_fail(&p, -EBADMSG, "past end of input");
	bb_free(&p);

	pk_proto(&p, 2);
	bb_u8(&p, 0x8b); /* LONG4 */
	bb_u32(&p, 0x7fffffffu);
	bb_u8(&p, '.');
	expect_pickle_fail(&p, -EBADMSG, "past end of input");
	bb_free(&p);
}

/* {"x": L} where L is a list of two references to a list of two
 * references ... @levels deep, ending in []. */
static void laughs_pickle(struct bb *p, int levels)
{
	int i;

	pk_proto(p, 2);
	bb_u8(p, '}');
	pk_str(p, "x");
	bb_u8(p, ']'); /* the leaf: [] */
	bb_u8(p, 'q');
	bb_u8(p, 0);
	for (i = 1; i <= levels; i++) {
		bb_u8(p, '0'); /* POP the previous level from the stack */
		bb_u8(p, '(');
		bb_u8(p, 'h'); /* BINGET i-1 */
		bb_u8(p, (unsigned)(i - 1));
		bb_u8(p, 'h');
		bb_u8(p, (unsigned)(i - 1));
		bb_u8(p, 'l'); /* LIST */
		bb_u8(p, 'q'); /* BINPUT i */
		bb_u8(p, (unsigned)i);
	}
	bb_u8(p, 's');
	bb_u8(p, '.');
}

/*
 * A list of two references to a list of two references ... 60 levels:
 * 2^60 leaves if expanded.  It must open at once, and any path down to the
 * bottom must resolve.
 */
static void multiplying_refs(void **state)
{
	struct pt_ckpt *ck;
	struct pt_node *node;
	size_t cnt = 0;
	struct pt_buf path;
	struct pt_buf json;
	struct bb p = { 0 };
	struct bb z;
	double t0 = now();
	int rc = 0;
	int i;

	(void)state;
	laughs_pickle(&p, 60);
	ckpt_build(&z, &p, 16);
	ck = open_ok(&z);
	assert_true(now() - t0 < 1.0);

	pt_buf_init(&path);
	pt_buf_puts(&path, "x");
	for (i = 0; i < 60; i++) {
		node = pt_tree_path(ck, path.p, &rc);
		assert_int_equal(rc, 0);
		assert_non_null(node);
		assert_int_equal(pt_tree_count(ck, node, &cnt), 0);
		assert_int_equal(cnt, 2);
		pt_buf_puts(&path, i % 2 ? "/1" : "/0");
	}
	node = pt_tree_path(ck, path.p, &rc);
	assert_int_equal(rc, 0);
	assert_non_null(node);
	assert_int_equal(pt_tree_count(ck, node, &cnt), 0);
	assert_int_equal(cnt, 0);

	/* tree.json stops at its entry cap */
	pt_buf_init(&json);
	pt_tree_json(ck, &json, 10000, NULL);
	assert_false(json.oom);
	assert_non_null(strstr(json.p, "\"truncated\": true"));
	pt_buf_free(&json);
	pt_buf_free(&path);
	pt_ckpt_close(ck);
	bb_free(&z);
	bb_free(&p);
	assert_true(now() - t0 < MAX_SECONDS);
}


/* ---- the one walk and its budget -------------------------------------- */

static int count_entry(void *ctx, const struct pt_walk *w)
{
	(void)w;
	(*(uint64_t *)ctx)++;
	return 0;
}

static struct pt_ckpt *open_limits(const struct bb *z, uint64_t entries,
				   uint64_t bytes)
{
	struct pt_ckpt_opts o;
	struct pt_ckpt *ck = NULL;
	struct pt_error err = { 0 };

	pt_ckpt_opts_default(&o);
	o.limits.max_walk_entries = entries;
	o.limits.max_walk_bytes = bytes;
	assert_int_equal(pt_ckpt_open_mem(&ck, z->p, z->len, "laughs.pt", &o, &err), 0);
	return ck;
}

/* 2^30 paths in a few hundred bytes: every consumer of the tree stops at
 * the same budget with -E2BIG and one line, after exactly the entries the
 * budget allows, instead of growing. */
static void walk_budget(void **state)
{
	struct pt_xlist xl;
	struct pt_view_item *items = NULL;
	struct pt_error err = { 0 };
	struct pt_buf json, notes;
	struct pt_ckpt *ck;
	struct bb p = { 0 }, z;
	uint64_t seen = 0;
	size_t n = 7;

	(void)state;
	laughs_pickle(&p, 30);
	ckpt_build(&z, &p, 16);
	ck = open_limits(&z, 1000, 1u << 30);
	assert_int_equal(pt_tree_walk(ck, pt_tree_root(ck), "", 0, count_entry,
				      &seen, &err), -E2BIG);
	assert_int_equal(seen, 1000);
	assert_string_equal(err.msg, "over 1000 entries in one walk of the tree (references that multiply? -o max_walk_entries)");
	pt_error_clear(&err);
	assert_int_equal(pt_view_tensors(ck, pt_tree_root(ck), "", &items, &n, &err), -E2BIG);
	assert_null(items);
	assert_int_equal(n, 0);
	assert_non_null(strstr(err.msg, "over 1000 entries"));
	pt_error_clear(&err);
	pt_buf_init(&notes);
	assert_int_equal(pt_export_collect(ck, &xl, &notes, &err), -E2BIG);
	assert_non_null(strstr(err.msg, "over 1000 entries"));
	assert_non_null(strstr(err.msg, "not exported"));
	pt_buf_free(&notes);
	/* tree.json is cut there instead, and says so */
	pt_buf_init(&json);
	assert_int_equal(pt_tree_json(ck, &json, 1000000, NULL), 0);
	assert_non_null(strstr(json.p, "\"truncated\": true"));
	pt_buf_free(&json);
	/* once per node: 30 levels of 2 entries, and the leaf's */
	seen = 0;
	assert_int_equal(pt_tree_walk(ck, pt_tree_root(ck), "", PT_WALK_ONCE,
				      count_entry, &seen, NULL), 0);
	assert_int_equal(seen, 1 + 2 * 30);
	pt_ckpt_close(ck);
	/* a consumer that needs everything: a directory whose entries alone
	 * pass what is left is refused as it is entered, with the same line */
	ck = open_limits(&z, 2, 1u << 30);
	seen = 0;
	assert_int_equal(pt_tree_walk(ck, pt_tree_root(ck), "", 0,
				      count_entry, &seen, NULL), -E2BIG);
	assert_int_equal(seen, 2);      /* "x", "x/0" */
	seen = 0;
	pt_error_clear(&err);
	assert_int_equal(pt_tree_walk(ck, pt_tree_root(ck), "", PT_WALK_WHOLE,
				      count_entry, &seen, &err), -E2BIG);
	assert_int_equal(seen, 1);      /* "x": its 2 entries pass 2 - 1 */
	assert_string_equal(err.msg, "over 2 entries in one walk of the tree (references that multiply? -o max_walk_entries)");
	pt_ckpt_close(ck);

	/* the bytes of the paths: "x" (2), "x/0" (4), "x/0/0" (6), ... */
	ck = open_limits(&z, 1u << 30, 2 + 4 + 6);
	seen = 0;
	pt_error_clear(&err);
	assert_int_equal(pt_tree_walk(ck, pt_tree_root(ck), "", 0, count_entry,
				      &seen, &err), -E2BIG);
	assert_int_equal(seen, 3);
	assert_string_equal(err.msg, "over 12 bytes of paths in one walk of the tree (-o max_walk_bytes)");
	pt_ckpt_close(ck);
	bb_free(&z);
	bb_free(&p);
}

static bool after_calls(void *ctx)
{
	unsigned *left = ctx;

	return *left == 0 || --*left == 0;
}

/* A walk asks its caller's check every 256 entries and ends with -EINTR
 * when told to: counted, not timed. */
static void walk_interrupted(void **state)
{
	struct pt_cancel c;
	struct pt_error err = { 0 };
	struct pt_ckpt *ck;
	struct bb p = { 0 }, z;
	struct pt_buf json;
	uint64_t seen = 0;
	unsigned left = 3;
	unsigned long before = pt_cancel_count();

	(void)state;
	laughs_pickle(&p, 30);
	ckpt_build(&z, &p, 16);
	ck = open_limits(&z, 1u << 20, 1u << 30);
	pt_cancel_push(&c, after_calls, &left);
	assert_int_equal(pt_tree_walk(ck, pt_tree_root(ck), "", 0, count_entry,
				      &seen, &err), -EINTR);
	assert_int_equal(seen, 3 * 256 - 1);
	assert_string_equal(err.msg, "interrupted");
	assert_int_equal(pt_cancel_count(), before + 1);
	pt_buf_init(&json);
	assert_int_equal(pt_tree_json(ck, &json, 1000000, NULL), -EINTR);
	pt_buf_free(&json);
	pt_cancel_pop(&c);
	assert_false(pt_cancelled());
	pt_ckpt_close(ck);
	bb_free(&z);
	bb_free(&p);
}

/* A tensor shown at many places is one tensor to the consumers that can
 * tell (pt_view_same): {"a": T, "b": T, "c": T's first half} */
static void same_tensor_once(void **state)
{
	static const int64_t shape[1] = { 4 }, half[1] = { 2 }, one[1] = { 1 };
	struct pt_view_item *items = NULL;
	struct pt_error err = { 0 };
	struct pt_ckpt *ck;
	struct bb p = { 0 }, z;
	size_t n = 0, *same;

	(void)state;
	pk_proto(&p, 2);
	bb_u8(&p, '}');
	pk_str(&p, "a");
	pk_tensor(&p, "FloatStorage", 4, 0, shape, one, 1);
	bb_u8(&p, 'q');
	bb_u8(&p, 9);
	bb_u8(&p, 's');
	pk_str(&p, "b");
	bb_u8(&p, 'h');
	bb_u8(&p, 9);
	bb_u8(&p, 's');
	pk_str(&p, "c");
	pk_tensor(&p, "FloatStorage", 4, 0, half, one, 1);
	bb_u8(&p, 's');
	bb_u8(&p, '.');
	ckpt_build(&z, &p, 16);
	ck = open_ok(&z);
	assert_int_equal(pt_view_tensors(ck, pt_tree_root(ck), "", &items, &n, &err), 0);
	assert_int_equal(n, 3);
	same = pt_view_same(items, n);
	assert_non_null(same);
	assert_int_equal(same[0], 0);
	assert_int_equal(same[1], 0);
	assert_int_equal(same[2], 2);
	free(same);
	pt_view_items_free(items, n);
	pt_ckpt_close(ck);
	bb_free(&z);
	bb_free(&p);
}

/* ---- the ZIP container ------------------------------------------------- */

static void simple_ckpt(struct bb *z)
{
	const int64_t shape[1] = { 4 };
	const int64_t stride[1] = { 1 };
	struct bb p = { 0 };

	pk_tensor_dict(&p, "FloatStorage", 4, 0, shape, stride, 1);
	ckpt_build(z, &p, 16);
	bb_free(&p);
}

/* The well-formed case the hostile ones start from really opens. */
static void baseline(void **state)
{
	struct pt_ckpt *ck;
	struct pt_node *node;
	struct pt_nattr a;
	struct bb z;
	int rc = 0;

	(void)state;
	simple_ckpt(&z);
	ck = open_ok(&z);
	node = pt_tree_path(ck, "t", &rc);
	assert_non_null(node);
	pt_node_attr(node, &a);
	assert_int_equal(a.size, 16);
	pt_ckpt_close(ck);
	bb_free(&z);
}

/* The EOCD claims more entries than its central directory can hold. */
static void zip_too_many_entries(void **state)
{
	struct bb z;
	uint64_t e;

	(void)state;
	simple_ckpt(&z);
	e = zip_eocd(&z);
	pt_put16(z.p + e + 8, 60000);
	pt_put16(z.p + e + 10, 60000);
	expect_fail(&z, -EBADMSG,
		    "entry count 60000 too large for a central directory");
	bb_free(&z);
}

/* A central directory that runs past the end of the file. */
static void zip_cd_past_end(void **state)
{
	struct bb z;

	(void)state;
	simple_ckpt(&z);
	pt_put32(z.p + zip_eocd(&z) + 12, 0x7fffffffu);
	expect_fail(&z, -EBADMSG, "beyond end of file");
	bb_free(&z);
}

/* Two central-directory entries naming the same local header: a loop back
 * over one record. */
static void zip_cd_loop(void **state)
{
	struct bb z;
	uint64_t cd;

	(void)state;
	simple_ckpt(&z);
	cd = zip_cd(&z);
	/* entry 2 (archive/data/0) points to entry 1's local header */
	pt_put32(z.p + cd + 46 + 16 + 42,
		 pt_le32(z.p + cd + 46 + 16 + 42 - 46 - 16));
	expect_fail(&z, -EBADMSG, "does not match the central directory");
	bb_free(&z);
}

/* A ZIP64 end record whose counts go to 2^63. */
static void zip64_huge_count(void **state)
{
	struct bb z = { 0 };
	struct bb p = { 0 };
	uint64_t cd;

	(void)state;
	/* one record, then a ZIP64 EOCD + locator + classic EOCD */
	pk_proto(&p, 2);
	bb_u8(&p, 'N');
	bb_u8(&p, '.');
	{
		struct rec r[1] = { { "archive/data.pkl", p.p, p.len } };
		struct bb one;
		uint64_t z64;

		zip_build(&one, r, 1);
		cd = zip_cd(&one);
		bb_put(&z, one.p, zip_eocd(&one));
		z64 = z.len;
		bb_u32(&z, 0x06064b50);
		bb_u64(&z, 44);
		bb_u16(&z, 45);
		bb_u16(&z, 45);
		bb_u32(&z, 0);
		bb_u32(&z, 0);
		bb_u64(&z, 1ull << 63);
		bb_u64(&z, 1ull << 63);
		bb_u64(&z, z64 - cd);
		bb_u64(&z, cd);
		bb_u32(&z, 0x07064b50);
		bb_u32(&z, 0);
		bb_u64(&z, z64);
		bb_u32(&z, 1);
		bb_u32(&z, 0x06054b50);
		bb_u16(&z, 0);
		bb_u16(&z, 0);
		bb_u16(&z, 0xffff);
		bb_u16(&z, 0xffff);
		bb_u32(&z, 0xffffffffu);
		bb_u32(&z, 0xffffffffu);
		bb_u16(&z, 0);
		bb_free(&one);
	}
	expect_fail(&z, -EBADMSG, "entry count 9223372036854775808 too large");
	bb_free(&z);
	bb_free(&p);
}

/* Record 2's local header sits inside record 1's data. */
static void zip_overlap(void **state)
{
	struct bb z;
	struct bb p = { 0 };
	uint8_t inner[80];
	struct rec r[2];
	uint64_t cd;

	(void)state;
	pk_proto(&p, 2);
	bb_u8(&p, 'N');
	bb_u8(&p, '.');
	/* record "archive/data/0" carries, inside its payload, a copy of a
	 * local header for "archive/data/1" */
	memset(inner, 0, sizeof(inner));
	pt_put32(inner, 0x04034b50);
	pt_put16(inner + 26, 14);
	memcpy(inner + 30, "archive/data/1", 14);
	r[0] = (struct rec){ "archive/data.pkl", p.p, p.len };
	r[1] = (struct rec){ "archive/data/0", inner, sizeof(inner) };
	zip_build(&z, r, 2);
	cd = zip_cd(&z);
	/* rename entry 1 in the CD to archive/data/1 and point it at the
	 * copy inside record 0... */
	(void)cd;
	{
		struct bb z2 = { 0 };
		uint64_t lho1 = pt_le32(z.p + cd + 46 + 16 + 42);
		uint64_t inner_off = lho1 + 30 + 14;
		uint64_t cd2;

		bb_put(&z2, z.p, cd);
		cd2 = z2.len;
		/* the two original entries */
		bb_put(&z2, z.p + cd, zip_eocd(&z) - cd);
		/* a third: archive/data/1, 0 bytes, local header inside
		 * record 0's payload */
		bb_u32(&z2, 0x02014b50);
		bb_u16(&z2, 0x031e);
		bb_u16(&z2, 20);
		bb_u16(&z2, 0x0800);
		bb_u16(&z2, 0);
		bb_u16(&z2, 0);
		bb_u16(&z2, 0);
		bb_u32(&z2, 0);
		bb_u32(&z2, 0);
		bb_u32(&z2, 0);
		bb_u16(&z2, 14);
		bb_u16(&z2, 0);
		bb_u16(&z2, 0);
		bb_u16(&z2, 0);
		bb_u16(&z2, 0);
		bb_u32(&z2, 0);
		bb_u32(&z2, inner_off);
		bb_str(&z2, "archive/data/1");
		bb_u32(&z2, 0x06054b50);
		bb_u16(&z2, 0);
		bb_u16(&z2, 0);
		bb_u16(&z2, 3);
		bb_u16(&z2, 3);
		bb_u32(&z2, z2.len - 12 - cd2);
		bb_u32(&z2, cd2);
		bb_u16(&z2, 0);
		expect_fail(&z2, -EBADMSG, "overlaps entry 'archive/data/1'");
		bb_free(&z2);
	}
	bb_free(&z);
	bb_free(&p);
}

/* ---- tensors ----------------------------------------------------------- */

static void expect_tensor_fail(const char *storage, int64_t numel,
			       int64_t offset, const int64_t *shape,
			       const int64_t *stride, size_t rank,
			       size_t slen, int code, const char *what)
{
	struct bb p = { 0 };
	struct bb z;

	pk_tensor_dict(&p, storage, numel, offset, shape, stride, rank);
	ckpt_build(&z, &p, slen);
	expect_fail(&z, code, what);
	bb_free(&z);
	bb_free(&p);
}

static void tensor_outside_storage(void **state)
{
	const int64_t s10[1] = { 10 };
	const int64_t st1[1] = { 1 };
	const int64_t s22[2] = { 2, 2 };
	const int64_t st_big[2] = { 100, 1 };
	const int64_t s4[1] = { 4 };

	(void)state;
	/* 10 floats from a 4-float storage */
	expect_tensor_fail("FloatStorage", 4, 0, s10, st1, 1, 16, -EBADMSG,
			   "reaches byte 40 of storage '0', which has 16 bytes");
	/* strides that jump past the end */
	expect_tensor_fail("FloatStorage", 4, 0, s22, st_big, 2, 16, -EBADMSG,
			   "reaches byte 408 of storage '0'");
	/* an offset past the end */
	expect_tensor_fail("FloatStorage", 4, 3, s4, st1, 1, 16, -EBADMSG,
			   "at offset 3 reaches byte 28");
	/* a storage whose record is shorter than its pickled numel */
	expect_tensor_fail("FloatStorage", 1000, 0, s4, st1, 1, 16, -EBADMSG,
			   "has 16 bytes, the pickle says 4000");
	/* a storage numel whose byte size overflows */
	expect_tensor_fail("FloatStorage", INT64_MAX, 0, s4, st1, 1, 16,
			   -EBADMSG, "size overflows");
	/* a negative offset */
	expect_tensor_fail("FloatStorage", 4, -1, s4, st1, 1, 16, -EBADMSG,
			   "negative storage offset");
}

static void tensor_numel_overflow(void **state)
{
	const int64_t s2[2] = { INT64_C(1) << 40, INT64_C(1) << 40 };
	const int64_t s3[2] = { INT64_C(1) << 62, 3 };
	const int64_t st0[2] = { 0, 0 };
	const int64_t st1[2] = { 3, 1 };
	const int64_t big1[1] = { INT64_MAX };
	const int64_t big1st[1] = { 1 };
	int64_t rank65[65];
	int i;

	(void)state;
	/* 2^80 elements (stride 0: every element the same byte) */
	expect_tensor_fail("ByteStorage", 1, 0, s2, st0, 2, 1, -EBADMSG,
			   "element count overflows");
	/* 3 * 2^62 elements: fits uint64 but not int64 */
	expect_tensor_fail("ByteStorage", 1, 0, s3, st0, 2, 1, -EBADMSG,
			   "element count overflows");
	expect_tensor_fail("ByteStorage", 16, 0, s3, st1, 2, 16, -EBADMSG,
			   "element count overflows");
	/* INT64_MAX floats: the byte count overflows */
	expect_tensor_fail("FloatStorage", 4, 0, big1, big1st, 1, 16,
			   -EBADMSG, "byte count overflows");
	/* rank past max_rank (64) */
	for (i = 0; i < 65; i++)
		rank65[i] = 1;
	expect_tensor_fail("FloatStorage", 4, 0, rank65, rank65, 65, 16,
			   -EFBIG, "rank 65 exceeds the limit of 64");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(baseline),
		cmocka_unit_test(deep_marks),
		cmocka_unit_test(deep_lists),
		cmocka_unit_test(huge_memo_index),
		cmocka_unit_test(huge_lengths),
		cmocka_unit_test(multiplying_refs),
		cmocka_unit_test(walk_budget),
		cmocka_unit_test(walk_interrupted),
		cmocka_unit_test(same_tensor_once),
		cmocka_unit_test(zip_too_many_entries),
		cmocka_unit_test(zip_cd_past_end),
		cmocka_unit_test(zip_cd_loop),
		cmocka_unit_test(zip64_huge_count),
		cmocka_unit_test(zip_overlap),
		cmocka_unit_test(tensor_outside_storage),
		cmocka_unit_test(tensor_numel_overflow),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
