/* SPDX-License-Identifier: MIT */
/* test_tree.c -- ckpt/tree.c (lookups, counts, errors, pt_tree_walk) and
 * the torch values of ckpt/torch.c (pt__tensor_make over a table of
 * corrupt tensor specs), on checkpoints built in memory. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ckpt/ckpt_i.h"

/* {'b': {'0': 0, '1': 1, '2': 2, '3': 3}, 'c': 5} as a protocol 2 pickle. */
static const uint8_t nested_pickle[] =
	"\200\002\175\050\130\001\000\000\000\142\175\050\130\001\000\000"
	"\000\060\113\000\130\001\000\000\000\061\113\001\130\001\000\000"
	"\000\062\113\002\130\001\000\000\000\063\113\003\165\130\001\000"
	"\000\000\143\113\005\165\056";

/* A safetensors file with tensors a (2 floats) and b (3 floats). */
static uint8_t *safetensors(size_t *len)
{
	static const char hdr[] =
		"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
		"\"b\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[8,20]}}";
	size_t h = sizeof(hdr) - 1;
	uint8_t *p = calloc(1, 8 + h + 20);
	uint64_t hl = h;
	size_t i;

	assert_non_null(p);
	for (i = 0; i < 8; i++)
		p[i] = (uint8_t)(hl >> (8 * i));
	memcpy(p + 8, hdr, h);
	*len = 8 + h + 20;
	return p;
}

static struct pt_ckpt *open_mem(const void *p, size_t n, uint64_t max_dir)
{
	struct pt_ckpt_opts o;
	struct pt_error err;
	struct pt_ckpt *ck = NULL;

	pt_ckpt_opts_default(&o);
	if (max_dir)
		o.limits.max_dir_entries = max_dir;
	pt_error_clear(&err);
	if (pt_ckpt_open_mem(&ck, p, n, "t.pt", &o, &err) != 0)
		fail_msg("open: %s", err.msg);
	return ck;
}

static void test_lookup_and_count(void **state)
{
	struct pt_ckpt *ck = open_mem(nested_pickle, sizeof(nested_pickle) - 1, 0);
	struct pt_node *root = pt_tree_root(ck), *b, *c;
	size_t n = 99;
	int rc = 1;

	(void)state;
	assert_int_equal(pt_tree_count(ck, root, &n), 0);
	assert_int_equal(n, 3);                 /* .ptfs, b, c */
	b = pt_tree_lookup(ck, root, "b", &rc);
	assert_non_null(b);
	assert_int_equal(rc, 0);
	assert_int_equal(pt_tree_count(ck, b, &n), 0);
	assert_int_equal(n, 4);
	c = pt_tree_path(ck, "b/2", &rc);
	assert_non_null(c);
	assert_ptr_equal(pt_node_parent(c), b);
	assert_ptr_equal(pt_tree_child(ck, b, 2, &rc), c);
	/* errors */
	assert_null(pt_tree_child(ck, b, 4, &rc));
	assert_int_equal(rc, -ENOENT);
	assert_null(pt_tree_lookup(ck, b, "9", &rc));
	assert_int_equal(rc, -ENOENT);
	assert_int_equal(pt_tree_count(ck, c, &n), -ENOTDIR);
	assert_int_equal(n, 0);
	assert_null(pt_tree_child(ck, c, 0, &rc));
	assert_int_equal(rc, -ENOTDIR);
	assert_null(pt_tree_path(ck, "b/2/x", &rc));
	assert_true(rc < 0);
	pt_ckpt_close(ck);
}

/* A directory over max_dir_entries: EFBIG from every call, every time. */
static void test_dir_over_limit(void **state)
{
	struct pt_ckpt *ck = open_mem(nested_pickle, sizeof(nested_pickle) - 1, 4);
	struct pt_node *b = pt_tree_path(ck, "b", NULL);
	size_t n = 99;
	int rc = 0, k;

	(void)state;
	assert_non_null(b);
	for (k = 0; k < 3; k++) {
		assert_int_equal(pt_tree_count(ck, b, &n), 0);
		assert_int_equal(n, 4);
	}
	pt_ckpt_close(ck);
	/* the root (.ptfs, b, c) fits in 3, b does not */
	ck = open_mem(nested_pickle, sizeof(nested_pickle) - 1, 3);
	b = pt_tree_path(ck, "b", NULL);
	assert_non_null(b);
	for (k = 0; k < 3; k++) {
		assert_int_equal(pt_tree_count(ck, b, &n), -EFBIG);
		assert_int_equal(n, 0);
		assert_null(pt_tree_child(ck, b, 0, &rc));
		assert_int_equal(rc, -EFBIG);
		assert_null(pt_tree_lookup(ck, b, "0", &rc));
		assert_int_equal(rc, -EFBIG);
	}
	pt_ckpt_close(ck);
}

struct seen {
	char paths[32][64];
	int n;
	int skip_dirs, stop_after;
};

static int record(void *ctx, const struct pt_walk *w)
{
	struct seen *s = ctx;
	struct pt_nattr a;

	assert_int_equal(strlen(w->path), w->path_len);
	if (s->n < 32)
		snprintf(s->paths[s->n], 64, "%u:%s", w->depth, w->path);
	s->n++;
	if (s->stop_after && s->n == s->stop_after)
		return PT_WALK_STOP;
	pt_node_attr(w->node, &a);
	return s->skip_dirs && a.type == PT_NT_DIR ? PT_WALK_SKIP : 0;
}

static void test_walk(void **state)
{
	struct pt_ckpt *ck = open_mem(nested_pickle, sizeof(nested_pickle) - 1, 0);
	struct seen s;

	(void)state;
	memset(&s, 0, sizeof(s));
	assert_int_equal(pt_tree_walk(ck, pt_tree_root(ck), "", 0, record, &s, NULL), 0);
	assert_int_equal(s.n, 6);
	assert_string_equal(s.paths[0], "1:b");
	assert_string_equal(s.paths[1], "2:b/0");
	assert_string_equal(s.paths[3], "2:b/2");
	assert_string_equal(s.paths[5], "1:c");
	memset(&s, 0, sizeof(s));
	s.skip_dirs = 1;
	assert_int_equal(pt_tree_walk(ck, pt_tree_root(ck), "top", 0, record, &s, NULL), 0);
	assert_int_equal(s.n, 2);
	assert_string_equal(s.paths[0], "1:top/b");
	memset(&s, 0, sizeof(s));
	s.stop_after = 2;
	assert_int_equal(pt_tree_walk(ck, pt_tree_root(ck), "", 0, record, &s, NULL), 0);
	assert_int_equal(s.n, 2);
	/* PT_WALK_ALL: /.ptfs too */
	memset(&s, 0, sizeof(s));
	assert_int_equal(pt_tree_walk(ck, pt_tree_root(ck), "", PT_WALK_ALL, record, &s, NULL), 0);
	assert_true(s.n > 6);
	assert_string_equal(s.paths[0], "1:.ptfs");
	/* a file is not a place to start */
	assert_int_equal(pt_tree_walk(ck, pt_tree_path(ck, "c", NULL), "", 0,
				      record, &s, NULL), -ENOTDIR);
	pt_ckpt_close(ck);
	/* a directory over the limit: left out, the walk goes on, EFBIG */
	ck = open_mem(nested_pickle, sizeof(nested_pickle) - 1, 3);
	memset(&s, 0, sizeof(s));
	assert_int_equal(pt_tree_walk(ck, pt_tree_root(ck), "", 0, record, &s, NULL), -EFBIG);
	assert_int_equal(s.n, 2);
	assert_string_equal(s.paths[1], "1:c");
	pt_ckpt_close(ck);
}

/* ---- torch values ---- */

struct tcase {
	const char *what;
	uint32_t rank;
	int64_t shape[3];
	int64_t stride[3];
	bool strided;
	int64_t offset;
	int rc;
	uint64_t byte_hi;
	bool contiguous;
};

static const struct tcase tcases[] = {
	{ "dense", 1, { 2 }, { 0 }, false, 0, 0, 8, true },
	{ "dense 2-D", 2, { 1, 3 }, { 0 }, false, 0, 0, 12, true },
	{ "transposed", 2, { 2, 2 }, { 1, 2 }, true, 0, 0, 16, false },
	{ "broadcast (stride 0)", 1, { 1000 }, { 0 }, true, 0, 0, 4, false },
	{ "empty", 2, { 0, 1000000 }, { 0 }, false, 0, 0, 0, true },
	{ "offset view", 1, { 2 }, { 0 }, false, 2, 0, 16, true },
	/* corrupt */
	{ "negative size", 1, { -1 }, { 0 }, false, 0, -EBADMSG, 0, false },
	{ "negative stride", 1, { 2 }, { -1 }, true, 0, -EBADMSG, 0, false },
	{ "negative offset", 1, { 2 }, { 0 }, false, -1, -EBADMSG, 0, false },
	{ "past the storage", 1, { 6 }, { 0 }, false, 0, -EBADMSG, 0, false },
	{ "offset past the storage", 1, { 2 }, { 0 }, false, 4, -EBADMSG, 0, false },
	{ "strides past the storage", 2, { 2, 2 }, { 4, 1 }, true, 0, -EBADMSG, 0, false },
	{ "element count overflows", 3, { 1ll << 31, 1ll << 31, 1ll << 31 }, { 0 }, false, 0, -EBADMSG, 0, false },
	{ "byte count overflows", 1, { INT64_MAX / 2 }, { 0 }, false, 0, -EBADMSG, 0, false },
	{ "stride span overflows", 2, { 2, 2 }, { INT64_MAX, 1 }, true, 0, -EBADMSG, 0, false },
	{ "offset overflows", 1, { 1 }, { 0 }, false, INT64_MAX, -EBADMSG, 0, false },
};

static void test_tensor_make(void **state)
{
	size_t len, i;
	uint8_t *file = safetensors(&len);
	struct pt_ckpt *ck = open_mem(file, len, 0);
	struct pt_storage *st;

	(void)state;
	st = pt__storage_find(ck, "1");             /* b: 12 bytes */
	assert_non_null(st);
	st->nbytes = 20;                            /* 5 floats for the table */
	for (i = 0; i < sizeof(tcases) / sizeof(*tcases); i++) {
		const struct tcase *c = &tcases[i];
		struct pt_tensor_spec sp = {
			.dtype = pt_dtype_from_torch("float32"),
			.st = st, .rank = c->rank, .shape = c->shape,
			.stride = c->strided ? c->stride : NULL,
			.offset = c->offset, .kind = PT_TK_TENSOR,
			.byteorder = '<',
		};
		struct pt_tensor *t = NULL;
		struct pt_error err;
		int rc;

		assert_non_null(sp.dtype);
		pt_error_clear(&err);
		rc = pt__tensor_make(ck, &sp, &t, &err);
		if (rc != c->rc)
			fail_msg("%s: rc %d, want %d (%s)", c->what, rc, c->rc, err.msg);
		if (rc) {
			if (!err.msg[0])
				fail_msg("%s: no message", c->what);
			continue;
		}
		if (t->byte_hi != c->byte_hi || t->contiguous != c->contiguous)
			fail_msg("%s: byte_hi %llu contiguous %d", c->what,
				 (unsigned long long)t->byte_hi, t->contiguous);
	}
	/* rank over the limit */
	{
		int64_t dims[65];
		struct pt_tensor_spec sp = {
			.dtype = pt_dtype_from_torch("float32"), .st = st,
			.rank = 65, .shape = dims, .kind = PT_TK_TENSOR,
		};
		struct pt_tensor *t;
		struct pt_error err;

		for (i = 0; i < 65; i++)
			dims[i] = 1;
		pt_error_clear(&err);
		assert_int_equal(pt__tensor_make(ck, &sp, &t, &err), -EFBIG);
	}
	pt_ckpt_close(ck);
	free(file);
}

static void test_dense_strides(void **state)
{
	const int64_t shape[3] = { 2, 1, 3 };
	const int64_t big[2] = { INT64_MAX, 4 };
	int64_t st[3];

	(void)state;
	assert_true(pt__dense_strides(3, shape, false, st));
	assert_int_equal(st[0], 3);
	assert_int_equal(st[1], 3);
	assert_int_equal(st[2], 1);
	assert_true(pt__dense_strides(3, shape, true, st));
	assert_int_equal(st[0], 1);
	assert_int_equal(st[1], 2);
	assert_int_equal(st[2], 2);
	assert_false(pt__dense_strides(2, big, false, st));
}

/* The storages by key: every one found, in the order added, across the
 * index's growth; a key not added is not found. */
static void test_storage_index(void **state)
{
	struct pt_ckpt *ck = calloc(1, sizeof(*ck));
	struct pt_storage *st;
	char (*keys)[16];
	size_t i, n = 5000;

	(void)state;
	assert_non_null(ck);
	keys = calloc(n, sizeof(*keys));
	st = calloc(n, sizeof(*st));
	assert_non_null(keys);
	assert_non_null(st);
	assert_null(pt__storage_find(ck, "0"));
	for (i = 0; i < n; i++) {
		snprintf(keys[i], sizeof(keys[i]), "%zu", i * 7);
		st[i].key = keys[i];
		if (i == 100)
			pt__storages_expect(ck, n);
		assert_int_equal(pt__storage_add(ck, &st[i]), 0);
	}
	assert_int_equal(ck->n_st, n);
	for (i = 0; i < n; i++) {
		assert_ptr_equal(ck->st_list[i], &st[i]);
		assert_ptr_equal(pt__storage_find(ck, keys[i]), &st[i]);
	}
	assert_null(pt__storage_find(ck, "1"));
	assert_null(pt__storage_find(ck, ""));
	assert_null(pt__storage_find(ck, "00"));
	pt__storages_free(ck);
	assert_int_equal(ck->n_st, 0);
	assert_null(pt__storage_find(ck, "0"));
	free(st);
	free(keys);
	free(ck);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_lookup_and_count),
		cmocka_unit_test(test_dir_over_limit),
		cmocka_unit_test(test_walk),
		cmocka_unit_test(test_tensor_make),
		cmocka_unit_test(test_dense_strides),
		cmocka_unit_test(test_storage_index),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
