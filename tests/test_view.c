/* SPDX-License-Identifier: MIT */
/*
 * test_view.c -- core/view/ without a checkpoint: element decoders against
 * values known from the formats' definitions, the PNG encoder's header,
 * and the preview's geometry and bounded reads over a memory source.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "view/elem.h"
#include "view/preview.h"

static void setup_elem(struct pt_elem *e, const char *dtype, unsigned size, bool big)
{
	struct pt_tinfo ti;

	memset(&ti, 0, sizeof(ti));
	ti.dtype = dtype;
	ti.itemsize = size;
	ti.byteorder = big ? '>' : '<';
	ti.numel = 1;
	ti.nbytes = size;

	assert_int_equal(pt_elem_init(e, &ti), 0);
}

static double one(const char *dtype, unsigned size, const uint8_t *bytes, bool big)
{
	struct pt_elem e;
	double out[8];

	setup_elem(&e, dtype, size, big);
	pt_elem_decode(&e, bytes, 1, out);
	return out[0];
}

static void test_float16_bfloat16(void **state)
{
	(void)state;
	assert_true(one("float16", 2, (const uint8_t[]){ 0x00, 0x3c }, false) == 1.0);
	assert_true(one("float16", 2, (const uint8_t[]){ 0x01, 0x00 }, false) == ldexp(1, -24));
	assert_true(one("float16", 2, (const uint8_t[]){ 0xff, 0x7b }, false) == 65504.0);
	assert_true(isinf(one("float16", 2, (const uint8_t[]){ 0x00, 0xfc }, false)));
	assert_true(isnan(one("float16", 2, (const uint8_t[]){ 0x00, 0x7e }, false)));
	assert_true(one("float16", 2, (const uint8_t[]){ 0x3c, 0x00 }, true) == 1.0);
	assert_true(one("bfloat16", 2, (const uint8_t[]){ 0x80, 0x3f }, false) == 1.0);
	assert_true(one("bfloat16", 2, (const uint8_t[]){ 0xc0, 0xc0 }, false) == -6.0);
}

static void test_float8(void **state)
{
	(void)state;
	assert_true(one("float8_e4m3fn", 1, (const uint8_t[]){ 0x7e }, false) == 448.0);
	assert_true(isnan(one("float8_e4m3fn", 1, (const uint8_t[]){ 0xff }, false)));
	assert_true(one("float8_e4m3fn", 1, (const uint8_t[]){ 0x01 }, false) == ldexp(1, -9));
	assert_true(isinf(one("float8_e5m2", 1, (const uint8_t[]){ 0x7c }, false)));
	assert_true(one("float8_e5m2", 1, (const uint8_t[]){ 0x7b }, false) == 57344.0);
	assert_true(isnan(one("float8_e4m3fnuz", 1, (const uint8_t[]){ 0x80 }, false)));
	assert_true(one("float8_e4m3fnuz", 1, (const uint8_t[]){ 0x7f }, false) == 240.0);
	assert_true(isnan(one("float8_e5m2fnuz", 1, (const uint8_t[]){ 0x80 }, false)));
	assert_true(one("float8_e8m0fnu", 1, (const uint8_t[]){ 0x80 }, false) == 2.0);
}

static void test_ints_packed_complex(void **state)
{
	struct pt_elem e;
	double out[8];
	const uint8_t c64be[8] = { 0x3f, 0x80, 0, 0, 0xc0, 0, 0, 0 };   /* 1 - 2j */
	int64_t s = 0;
	uint64_t u = 0;

	(void)state;
	assert_true(one("int16", 2, (const uint8_t[]){ 0xfe, 0xff }, false) == -2.0);
	assert_true(one("int32", 4, (const uint8_t[]){ 0xff, 0xff, 0xff, 0xfd }, true) == -3.0);
	assert_true(one("bool", 1, (const uint8_t[]){ 1 }, false) == 1.0);
	setup_elem(&e, "quint4x2", 1, false);
	assert_int_equal(e.per, 2);
	assert_true(e.quantized);
	pt_elem_decode(&e, (const uint8_t[]){ 0xab }, 1, out);
	assert_true(out[0] == 11.0 && out[1] == 10.0);
	setup_elem(&e, "complex64", 8, true);
	pt_elem_decode(&e, c64be, 1, out);
	assert_true(out[0] == 1.0 && out[1] == -2.0);
	setup_elem(&e, "uint64", 8, false);
	assert_true(pt_elem_int64(&e, (const uint8_t[]){ 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff }, &s, &u));
	assert_true(u == UINT64_MAX);
}

struct mem {
	const uint8_t *p;
	size_t len;
};

static ssize_t mem_read(void *ctx, void *buf, size_t n, uint64_t off, struct pt_error *err)
{
	struct mem *m = ctx;

	(void)err;
	if (off > m->len || n > m->len - off)
		return -5;
	memcpy(buf, m->p + off, n);
	return (ssize_t)n;
}

static uint32_t be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void render(const char *dtype, unsigned es, int64_t *shape, uint32_t rank,
		   uint64_t numel, struct pt_preview *pv)
{
	uint8_t *data = calloc(numel ? numel : 1, es);
	struct mem m = { data, numel * es };
	struct pt_preview_src src;
	struct pt_error err;
	uint64_t size;

	memset(&src, 0, sizeof(src));
	src.ti.dtype = dtype;
	src.ti.itemsize = es;
	src.ti.byteorder = '<';
	src.ti.rank = rank;
	src.ti.shape = shape;
	src.ti.numel = numel;
	src.ti.nbytes = numel * es;
	src.read = mem_read;
	src.ctx = &m;

	assert_non_null(data);
	pt_error_clear(&err);
	assert_int_equal(pt_preview_render_src(&src, PT_PREVIEW_SIDE, pv, &err), 0);
	free(data);
	/* the size promised from the shape alone is the size drawn */
	assert_int_equal(pt_preview_size(&src.ti, PT_PREVIEW_SIDE, &size, &err), 0);
	assert_int_equal(size, pv->len);
	/* a PNG whose IHDR says what the preview says */
	assert_memory_equal(pv->png, "\x89PNG\r\n\x1a\n", 8);
	assert_memory_equal(pv->png + 12, "IHDR", 4);
	assert_int_equal(be32(pv->png + 16), pv->width);
	assert_int_equal(be32(pv->png + 20), pv->height);
}

/* pt_png_size() is the encoder's length, at stored-block boundaries too:
 * 28 x 771 px is exactly one block of 65535 bytes, 21845 x 1 one byte
 * more. */
static void test_png_sizes(void **state)
{
	static const uint32_t wh[][2] = { { 1, 1 }, { 16, 16 }, { 28, 771 },
					  { 21845, 1 }, { 512, 512 } };
	const struct pt_png_text txt[2] = { { "Thumb::URI", "file:///a%20b" },
					    { "Thumb::MTime", "1700000000" } };
	struct pt_error err;
	size_t i, len;
	uint8_t *rgb, *png;

	(void)state;
	for (i = 0; i < sizeof(wh) / sizeof(wh[0]); i++) {
		rgb = calloc((size_t)wh[i][0] * wh[i][1], 3);
		assert_non_null(rgb);
		assert_int_equal(pt_png_encode(rgb, wh[i][0], wh[i][1], txt, 2, &png, &len,
					       &err), 0);
		assert_int_equal(len, pt_png_size(wh[i][0], wh[i][1], txt, 2));
		assert_memory_equal(png + len - 8, "IEND\xae\x42\x60\x82", 8);
		free(png);
		free(rgb);
	}
	/* the raw stream of 28 x 771: 2 + 65535 + 5 + 4 bytes of zlib */
	assert_int_equal(pt_png_size(28, 771, NULL, 0), 8 + 25 + 12 + 65546 + 12);
}

static void test_preview_geometry(void **state)
{
	struct pt_preview pv;
	int64_t s1[1] = { 1000 }, s2[2] = { 3000, 700 }, s4[4] = { 2, 3, 4, 5 };
	int64_t wide[2] = { 64, 65536 };
	int64_t one_by_one[4] = { 8, 16, 1, 1 }, empty[3] = { 3, 0, 4 };

	(void)state;
	render("float32", 4, s1, 1, 1000, &pv);
	assert_true(pv.width == 512 && pv.height == 16);
	pt_preview_free(&pv);
	render("float32", 4, s2, 2, 3000 * 700, &pv);
	assert_true(pv.width == 119 && pv.height == 512);
	assert_true(pv.bytes_read <= 512 * 700 * 4);
	pt_preview_free(&pv);
	/* [2, 3, 4, 5]: conv weights, 2 x 3 tiles of 4 x 5 elements at 3 px
	 * each with a 1 px gap between tiles */
	render("int8", 1, s4, 4, 120, &pv);
	assert_true(pv.rows == 2 && pv.cols == 3 && pv.width == 47 && pv.height == 25);
	pt_preview_free(&pv);
	/* a 1 x 1 conv weight is its matrix, out x in: 8 x 16 scaled by 4 */
	render("float32", 4, one_by_one, 4, 8 * 16, &pv);
	assert_true(pv.rows == 8 && pv.cols == 16 && pv.width == 64 && pv.height == 32);
	pt_preview_free(&pv);
	/* no elements: a 64 x 64 frame, nothing read */
	render("float16", 2, empty, 3, 0, &pv);
	assert_true(pv.width == 64 && pv.height == 64 && pv.bytes_read == 0);
	pt_preview_free(&pv);
	/* rows of 256 KiB: element reads, one per pixel */
	render("float32", 4, wide, 2, 64ull * 65536, &pv);
	assert_true(pv.width == 512 && pv.height == 16);
	assert_true(pv.bytes_read == 512ull * 16 * 4 && pv.reads == 512ull * 16);
	pt_preview_free(&pv);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_float16_bfloat16),
		cmocka_unit_test(test_float8),
		cmocka_unit_test(test_ints_packed_complex),
		cmocka_unit_test(test_png_sizes),
		cmocka_unit_test(test_preview_geometry),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
