/* SPDX-License-Identifier: MIT */
/*
 * png.c -- RGB8 pixels to a PNG file in memory, through libpng.
 *
 * libpng rather than libspng: both are in Debian, but libpng's write API
 * has been the same for twenty years on every distribution ptfs builds on
 * (libspng gained an encoder only in 0.7, and is absent from older LTS
 * releases), and it is what the desktop's own thumbnailers link anyway.
 * The output is deterministic (no time chunk, fixed zlib level and
 * filters), which the mount needs to promise a file size.
 *
 * libpng is loaded on the first picture (base/dl.h), not at start.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

#include <png.h>

#include "base/dl.h"
#include "view/preview.h"

/* the libpng functions used here (png_jmpbuf calls png_set_longjmp_fn) */
#define PNG_FNS(X) \
	X(png_create_write_struct) X(png_create_info_struct) \
	X(png_destroy_write_struct) X(png_set_longjmp_fn) X(png_get_io_ptr) \
	X(png_set_write_fn) X(png_set_compression_level) X(png_set_filter) \
	X(png_set_IHDR) X(png_set_text) X(png_write_info) X(png_write_row) \
	X(png_write_end)

PT_DL_DEFINE(png, PNG_FNS, "libpng16.so.16",
	     "previews need libpng (Debian: libpng16-16)");

#define png_create_write_struct png_fn.png_create_write_struct
#define png_create_info_struct png_fn.png_create_info_struct
#define png_destroy_write_struct png_fn.png_destroy_write_struct
#define png_set_longjmp_fn png_fn.png_set_longjmp_fn
#define png_get_io_ptr png_fn.png_get_io_ptr
#define png_set_write_fn png_fn.png_set_write_fn
#define png_set_compression_level png_fn.png_set_compression_level
#define png_set_filter png_fn.png_set_filter
#define png_set_IHDR png_fn.png_set_IHDR
#define png_set_text png_fn.png_set_text
#define png_write_info png_fn.png_write_info
#define png_write_row png_fn.png_write_row
#define png_write_end png_fn.png_write_end

struct sink {
	struct pt_buf b;
};

static void sink_write(png_structp png, png_bytep data, size_t n)
{
	struct sink *s = png_get_io_ptr(png);

	pt_buf_add(&s->b, data, n);
}

static void sink_flush(png_structp png)
{
	(void)png;
}

int pt_png_encode(const uint8_t *rgb, uint32_t w, uint32_t h, const char *desc,
		  uint8_t **out, size_t *len, struct pt_error *err)
{
	png_structp png;
	png_infop info = NULL;
	struct sink s;
	png_text txt;
	uint32_t y;
	int rc;

	*out = NULL;
	*len = 0;
	rc = pt_dl_load(&png_dl, err);
	if (rc)
		return rc;
	png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
	if (!png)
		return pt_fail(err, -ENOMEM, "png: out of memory");
	info = png_create_info_struct(png);
	pt_buf_init(&s.b);
	if (!info || setjmp(png_jmpbuf(png))) {
		png_destroy_write_struct(&png, &info);
		pt_buf_free(&s.b);
		return pt_fail(err, -ENOMEM, "png: encoding failed");
	}
	png_set_write_fn(png, &s, sink_write, sink_flush);
	png_set_compression_level(png, 3);
	png_set_filter(png, 0, PNG_FILTER_SUB | PNG_FILTER_UP);
	png_set_IHDR(png, info, w, h, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
		     PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
	if (desc) {
		memset(&txt, 0, sizeof(txt));
		txt.compression = PNG_TEXT_COMPRESSION_NONE;
		txt.key = (png_charp)(uintptr_t)"Description";
		txt.text = (png_charp)(uintptr_t)desc;
		png_set_text(png, info, &txt, 1);
	}
	png_write_info(png, info);
	for (y = 0; y < h; y++)
		png_write_row(png, rgb + (size_t)y * w * 3);
	png_write_end(png, info);
	png_destroy_write_struct(&png, &info);
	if (s.b.oom || !s.b.len) {
		pt_buf_free(&s.b);
		return pt_fail(err, -ENOMEM, "png: out of memory");
	}
	*out = (uint8_t *)pt_buf_take(&s.b, len);
	return 0;
}
