/* SPDX-License-Identifier: MIT */
/* test_open.c -- ckpt/open.c (child checkpoints: the parent's formats, one
 * level deep at most) and the layer every tensor read goes through
 * (pt_ckpt_set_layer), on a safetensors file built in memory. */
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

#define HDR "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}"
#define HLEN (sizeof(HDR) - 1)
#define FLEN (8 + HLEN + 8)

/* A safetensors file holding tensor a = [@x, @y]. */
static void make_file(uint8_t *p, float x, float y)
{
	uint64_t hl = HLEN;
	size_t i;

	for (i = 0; i < 8; i++)
		p[i] = (uint8_t)(hl >> (8 * i));
	memcpy(p + 8, HDR, HLEN);
	memcpy(p + 8 + HLEN, &x, 4);    /* little-endian hosts */
	memcpy(p + 8 + HLEN + 4, &y, 4);
}

static struct pt_ckpt *open_file(const uint8_t *p)
{
	struct pt_error err;
	struct pt_ckpt *ck = NULL;

	pt_error_clear(&err);
	if (pt_ckpt_open_mem(&ck, p, FLEN, "t.safetensors", NULL, &err) != 0)
		fail_msg("open: %s", err.msg);
	return ck;
}

static struct pt_source *mem_source(const uint8_t *p)
{
	struct pt_error err;
	struct pt_source *src = NULL;

	pt_error_clear(&err);
	assert_int_equal(pt_source_mem(p, FLEN, "child.safetensors", &src, &err), 0);
	return src;
}

static void test_child_depth(void **state)
{
	uint8_t file[FLEN];
	struct pt_ckpt *ck, *child = NULL, *grand = (struct pt_ckpt *)1;
	struct pt_error err;

	(void)state;
	make_file(file, 1.0f, 2.0f);
	ck = open_file(file);
	assert_int_equal(ck->depth, 0);
	pt_error_clear(&err);
	/* loaded: probed against the parent's formats */
	assert_int_equal(pt__ckpt_open_child(ck, mem_source(file), true, &child, &err), 0);
	assert_non_null(child);
	assert_int_equal(child->depth, 1);
	assert_ptr_equal(child->formats, ck->formats);
	assert_ptr_equal(child->fmt, &pt_fmt_safetensors);
	assert_non_null(child->root);
	assert_null(child->tree);
	/* a child opens none: the source is closed all the same */
	assert_int_equal(pt__ckpt_open_child(child, mem_source(file), false, &grand, &err),
			 -EBADMSG);
	assert_null(grand);
	assert_non_null(strstr(err.msg, "depth 2"));
	pt__ckpt_free(child);
	/* bare: a source and a name, nothing probed */
	child = NULL;
	pt_error_clear(&err);
	assert_int_equal(pt__ckpt_open_child(ck, mem_source(file), false, &child, &err), 0);
	assert_null(child->fmt);
	assert_non_null(child->src);
	pt__ckpt_free(child);
	pt_ckpt_close(ck);
}

static float read_a(struct pt_ckpt *ck, size_t i)
{
	struct pt_error err;
	struct pt_node *a;
	float v = -1;
	int rc = 0;

	a = pt_tree_path(ck, "a", &rc);
	assert_non_null(a);
	pt_error_clear(&err);
	assert_int_equal(pt_node_read(ck, a, &v, 4, 4 * i, &err), 4);
	return v;
}

static void test_reads_go_through_the_layer(void **state)
{
	uint8_t file[FLEN], over[FLEN];
	struct pt_ckpt *ck;
	struct pt_source *layer;

	(void)state;
	make_file(file, 1.0f, 2.0f);
	make_file(over, 1.0f, 7.0f);    /* the layer changes a[1] */
	ck = open_file(file);
	assert_ptr_equal(pt_ckpt_source(ck), ck->src);
	assert_true(read_a(ck, 1) == 2.0f);
	layer = mem_source(over);
	pt_ckpt_set_layer(ck, layer);
	assert_ptr_equal(pt__tensor_source(ck), layer);
	assert_true(read_a(ck, 0) == 1.0f);
	assert_true(read_a(ck, 1) == 7.0f);
	pt_ckpt_set_layer(ck, NULL);
	assert_true(read_a(ck, 1) == 2.0f);
	pt_source_close(layer);
	pt_ckpt_close(ck);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_child_depth),
		cmocka_unit_test(test_reads_go_through_the_layer),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
