/* SPDX-License-Identifier: MIT */
/*
 * test_pb.c -- core/decode/pb.c, the protobuf wire-format reader: varints
 * up to their tenth byte, every wire type, lengths against the message
 * that holds them, the depth cap, packed varints, strings, and payloads
 * that cross the reader's 64 KiB window.  Every failure is checked for
 * its negative errno and a one-line message naming the problem.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <errno.h>

#include "decode/pb.h"

struct rd {
	struct pt_source *src;
	struct pt_pb_src s;
	struct pt_pb m;
	struct pt_error err;
};

static void rd_open(struct rd *r, const void *p, size_t n, unsigned depth)
{
	memset(r, 0, sizeof(*r));
	assert_int_equal(pt_source_mem(p, n, "t.pb", &r->src, &r->err), 0);
	assert_int_equal(pt_pb_src_init(&r->s, r->src, "test", depth, &r->err), 0);
	assert_int_equal(pt_pb_top(&r->s, 0, n, &r->m), 0);
}

static void rd_close(struct rd *r)
{
	pt_pb_src_free(&r->s);
	pt_source_close(r->src);
}

static void expect_fail(int rc, const struct pt_error *err, int want,
			const char *what)
{
	if (rc != want || !strstr(err->msg, what) || strchr(err->msg, '\n'))
		fail_msg("got %d \"%s\", want %d and \"%s\"", rc, err->msg,
			 want, what);
}

static size_t put_varint(uint8_t *p, uint64_t v)
{
	size_t n = 0;

	do {
		p[n] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
		v >>= 7;
		n++;
	} while (v);
	return n;
}

static void test_varints(void **state)
{
	static const uint64_t vals[] = { 0, 1, 127, 128, 300, UINT32_MAX,
					 (uint64_t)INT64_MAX, UINT64_MAX };
	uint8_t buf[200];
	struct pt_pb_field f;
	struct rd r;
	size_t n = 0, i;

	(void)state;
	for (i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
		n += put_varint(buf + n, (uint64_t)(i + 1) << 3);
		n += put_varint(buf + n, vals[i]);
	}
	rd_open(&r, buf, n, 4);
	for (i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
		assert_int_equal(pt_pb_next(&r.m, &f), 1);
		assert_int_equal(f.num, i + 1);
		assert_int_equal(f.wire, PT_PB_VARINT);
		assert_true(f.v == vals[i]);
	}
	assert_int_equal(pt_pb_next(&r.m, &f), 0);
	rd_close(&r);
}

static void test_bad_varints(void **state)
{
	/* eleven bytes; ten whose last carries bits past the 64th; cut */
	static const uint8_t eleven[] = { 0x08, 0xff, 0xff, 0xff, 0xff, 0xff,
					  0xff, 0xff, 0xff, 0xff, 0xff, 0x01 };
	static const uint8_t wide[] = { 0x08, 0xff, 0xff, 0xff, 0xff, 0xff,
					0xff, 0xff, 0xff, 0xff, 0x02 };
	static const uint8_t cut[] = { 0x08, 0xff, 0xff };
	struct pt_pb_field f;
	struct rd r;

	(void)state;
	rd_open(&r, eleven, sizeof(eleven), 4);
	expect_fail(pt_pb_next(&r.m, &f), &r.err, -EBADMSG, "longer than 10 bytes");
	rd_close(&r);
	rd_open(&r, wide, sizeof(wide), 4);
	expect_fail(pt_pb_next(&r.m, &f), &r.err, -EBADMSG, "over 64 bits");
	rd_close(&r);
	rd_open(&r, cut, sizeof(cut), 4);
	expect_fail(pt_pb_next(&r.m, &f), &r.err, -EBADMSG, "runs past the end");
	rd_close(&r);
}

static void test_wire_types(void **state)
{
	static const uint8_t ok[] = {
		0x09, 1, 2, 3, 4, 5, 6, 7, 8,   /* 1: fixed64 */
		0x15, 9, 8, 7, 6,               /* 2: fixed32 */
		0x1a, 2, 'h', 'i',              /* 3: bytes */
	};
	static const uint8_t bad[][3] = {
		{ 0x0b, 0, 0 },                 /* a group */
		{ 0x0e, 0, 0 },                 /* wire type 6 */
		{ 0x00, 0, 0 },                 /* field number 0 */
		{ 0x1a, 5, 'x' },               /* 5 bytes claimed, 1 left */
		{ 0x0d, 1, 2 },                 /* fixed32 cut short */
	};
	static const char *const why[] = { "a group", "invalid", "out of range",
					   "claims 5 bytes", "runs past" };
	struct pt_pb_field f;
	struct rd r;
	char *s;
	size_t i;

	(void)state;
	rd_open(&r, ok, sizeof(ok), 4);
	assert_int_equal(pt_pb_next(&r.m, &f), 1);
	assert_true(f.wire == PT_PB_FIXED64 && f.v == 0x0807060504030201ull);
	assert_int_equal(pt_pb_next(&r.m, &f), 1);
	assert_true(f.wire == PT_PB_FIXED32 && f.v == 0x06070809u);
	assert_int_equal(pt_pb_next(&r.m, &f), 1);
	assert_true(f.wire == PT_PB_LEN && f.v == 2 && f.off == 16);
	assert_int_equal(pt_pb_dup(&r.s, &f, 10, "a name", &s), 0);
	assert_string_equal(s, "hi");
	free(s);
	expect_fail(pt_pb_dup(&r.s, &f, 1, "a name", &s), &r.err, -EFBIG,
		    "a name at byte 16 has 2 bytes, more than 1");
	rd_close(&r);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		rd_open(&r, bad[i], 3, 4);
		expect_fail(pt_pb_next(&r.m, &f), &r.err,
			    -EBADMSG, why[i]);
		rd_close(&r);
	}
}

/* A message nested @levels deep: 0x0a LEN (0x0a LEN (...)). */
static size_t nest(uint8_t *buf, unsigned levels)
{
	size_t n = 0, i;
	uint8_t tmp[16];

	for (i = 0; i < levels; i++) {
		size_t h = 1 + put_varint(tmp + 1, n);

		tmp[0] = 0x0a;
		memmove(buf + h, buf, n);
		memcpy(buf, tmp, h);
		n += h;
	}
	return n;
}

static void test_depth(void **state)
{
	static uint8_t buf[4096];
	struct pt_pb_field f;
	struct pt_pb sub[12];
	struct rd r;
	size_t n = nest(buf, 12);
	unsigned d;

	(void)state;
	rd_open(&r, buf, n, 10);
	sub[0] = r.m;
	for (d = 0; d < 10; d++) {
		assert_int_equal(pt_pb_next(&sub[d], &f), 1);
		assert_int_equal(pt_pb_sub(&sub[d], &f, &sub[d + 1]), 0);
		assert_int_equal(sub[d + 1].depth, d + 1);
	}
	assert_int_equal(pt_pb_next(&sub[10], &f), 1);
	expect_fail(pt_pb_sub(&sub[10], &f, &sub[11]), &r.err, -EFBIG,
		    "nest more than 10 deep");
	rd_close(&r);
}

static void test_packed_and_window(void **state)
{
	size_t big = (200u << 10), n = 0, i;
	uint8_t *buf = malloc(big + 64), *back = malloc(big);
	struct pt_pb_field f;
	struct pt_pb packed;
	struct rd r;
	uint64_t v;

	(void)state;
	assert_non_null(buf);
	assert_non_null(back);
	/* field 1: three packed varints; field 2: 200 KiB of bytes, which
	 * cross the window; field 3: a varint after them */
	buf[n++] = 0x0a;
	buf[n++] = 4;
	n += put_varint(buf + n, 1);
	n += put_varint(buf + n, 300);
	n += put_varint(buf + n, 5);
	buf[n++] = 0x12;
	n += put_varint(buf + n, big);
	for (i = 0; i < big; i++)
		buf[n + i] = (uint8_t)(i * 7);
	n += big;
	buf[n++] = 0x18;
	buf[n++] = 42;
	rd_open(&r, buf, n, 4);
	assert_int_equal(pt_pb_next(&r.m, &f), 1);
	assert_int_equal(pt_pb_sub(&r.m, &f, &packed), 0);
	assert_int_equal(pt_pb_varint(&packed, &v), 1);
	assert_true(v == 1);
	assert_int_equal(pt_pb_varint(&packed, &v), 1);
	assert_true(v == 300);
	assert_int_equal(pt_pb_varint(&packed, &v), 1);
	assert_true(v == 5);
	assert_int_equal(pt_pb_varint(&packed, &v), 0);
	assert_int_equal(pt_pb_next(&r.m, &f), 1);
	assert_true(f.num == 2 && f.v == big);
	assert_int_equal(pt_pb_read(&r.s, back, big, f.off), 0);
	assert_memory_equal(back, buf + f.off, big);
	assert_int_equal(pt_pb_next(&r.m, &f), 1);
	assert_true(f.num == 3 && f.v == 42);
	assert_int_equal(pt_pb_next(&r.m, &f), 0);
	rd_close(&r);
	/* a message whose range leaves the source */
	rd_open(&r, buf, 10, 4);
	expect_fail(pt_pb_top(&r.s, 4, 7, &packed), &r.err, -EBADMSG,
		    "runs past the end of the file");
	rd_close(&r);
	free(buf);
	free(back);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_varints),
		cmocka_unit_test(test_bad_varints),
		cmocka_unit_test(test_wire_types),
		cmocka_unit_test(test_depth),
		cmocka_unit_test(test_packed_and_window),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
