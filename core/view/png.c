/* SPDX-License-Identifier: MIT */
/*
 * png.c -- RGB8 pixels to a PNG file in memory, of a size known in advance.
 *
 * A mount promises st_size when NAME.png is listed, long before anything
 * draws it, so the file's length must follow from the picture's geometry
 * and its text chunks alone, never from its pixels.  Compression would
 * make it depend on the pixels; so the image data is a zlib stream of
 * stored (uncompressed) deflate blocks: every row is filter byte 0 and
 * its 3 * W bytes, the rows cut into blocks of at most 65535 bytes, each
 * with its 5-byte header.  The price is size (512 x 512 px: 769 KiB
 * where libpng made 100-300 KiB), paid only by the bytes a viewer reads;
 * the gain is that a listing never samples a tensor.  The encoder is
 * written here (chunks, CRC-32 from the zip code, Adler-32) rather than
 * through libpng, whose stored output is cut by zlib's internal buffers
 * and so is not a size one can compute.
 *
 * A thumbnail (`ptfs thumbnail`, a file the thumbnailer writes once) has
 * no size to promise: pt_png_encode_z() deflates its rows with zlib, each
 * row filtered "Up" (the pictures repeat whole rows when they are scaled
 * up, and those become zeros).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "container/zipwrite.h"
#include "view/preview.h"

#define STORED_MAX 65535u
#define CHUNK_OVERHEAD 12u              /* length, type, CRC */

static uint64_t raw_len(uint32_t w, uint32_t h)
{
	return (uint64_t)h * (1 + 3 * (uint64_t)w);
}

static uint64_t zlib_len(uint64_t raw)
{
	uint64_t blocks = raw ? (raw + STORED_MAX - 1) / STORED_MAX : 1;

	return 2 + raw + 5 * blocks + 4;        /* header, blocks, Adler-32 */
}

uint64_t pt_png_size(uint32_t w, uint32_t h, const struct pt_png_text *txt, size_t ntxt)
{
	uint64_t n = 8 + CHUNK_OVERHEAD + 13;   /* signature, IHDR */
	size_t i;

	for (i = 0; i < ntxt; i++)
		n += CHUNK_OVERHEAD + strlen(txt[i].key) + 1 + strlen(txt[i].text);
	n += CHUNK_OVERHEAD + zlib_len(raw_len(w, h));
	return n + CHUNK_OVERHEAD;              /* IEND */
}

static uint8_t *be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
	return p + 4;
}

/* Chunk @type of @len bytes whose data the caller wrote at @p + 8. */
static uint8_t *chunk_close(uint8_t *p, const char *type, uint32_t len)
{
	be32(p, len);
	memcpy(p + 4, type, 4);
	return be32(p + 8 + len, pt_crc32(0, p + 4, 4 + (size_t)len));
}

/* The zlib stream of the rows at @p; the end. */
static uint8_t *idat_data(uint8_t *p, const uint8_t *rgb, uint32_t w, uint32_t h)
{
	static const uint8_t no_filter = 0;
	uint64_t raw = raw_len(w, h), left = raw, in_block = 0;
	uLong adler = adler32(0L, Z_NULL, 0);
	size_t row = 3 * (size_t)w;
	uint32_t y;

	*p++ = 0x78;                    /* deflate, 32 KiB window */
	*p++ = 0x01;                    /* no dictionary, fastest; 0x7801 % 31 == 0 */
	for (y = 0; y < h; y++) {
		const uint8_t *src = rgb + (size_t)y * row;
		size_t i;

		/* zlib's checksum of what the stored blocks hold */
		adler = adler32(adler, &no_filter, 1);
		adler = adler32(adler, src, (uInt)row);
		for (i = 0; i <= row; i++) {
			uint8_t c = i ? src[i - 1] : 0; /* filter byte 0: none */

			if (in_block == 0) {
				uint32_t n = left > STORED_MAX ? STORED_MAX : (uint32_t)left;

				*p++ = left == n;       /* BFINAL, BTYPE 00 */
				*p++ = (uint8_t)n;
				*p++ = (uint8_t)(n >> 8);
				*p++ = (uint8_t)~n;
				*p++ = (uint8_t)(~n >> 8);
				in_block = n;
			}
			*p++ = c;
			in_block--;
			left--;
		}
	}
	return be32(p, (uint32_t)adler);
}

/* The signature, IHDR and the tEXt chunks at @p; the end. */
static uint8_t *png_head(uint8_t *p, uint32_t w, uint32_t h,
			 const struct pt_png_text *txt, size_t ntxt)
{
	static const uint8_t sig[8] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n' };
	size_t i;

	memcpy(p, sig, 8);
	p += 8;
	be32(p + 8, w);
	be32(p + 12, h);
	memcpy(p + 16, "\x08\x02\x00\x00\x00", 5);      /* 8 bits, RGB, no interlace */
	p = chunk_close(p, "IHDR", 13);
	for (i = 0; i < ntxt; i++) {
		size_t kl = strlen(txt[i].key), tl = strlen(txt[i].text);

		memcpy(p + 8, txt[i].key, kl + 1);
		memcpy(p + 8 + kl + 1, txt[i].text, tl);
		p = chunk_close(p, "tEXt", (uint32_t)(kl + 1 + tl));
	}
	return p;
}

int pt_png_encode(const uint8_t *rgb, uint32_t w, uint32_t h,
		  const struct pt_png_text *txt, size_t ntxt,
		  uint8_t **out, size_t *len, struct pt_error *err)
{
	uint64_t size = pt_png_size(w, h, txt, ntxt), zlen = zlib_len(raw_len(w, h));
	uint8_t *buf, *p;

	*out = NULL;
	*len = 0;
	if (!w || !h || zlen > 0x7fffffff || size > SIZE_MAX)
		return pt_fail(err, -EINVAL, "png: %u x %u px is too large", w, h);
	buf = malloc((size_t)size);
	if (!buf)
		return pt_fail(err, -ENOMEM, "png: out of memory");
	p = png_head(buf, w, h, txt, ntxt);
	idat_data(p + 8, rgb, w, h);
	p = chunk_close(p, "IDAT", (uint32_t)zlen);
	p = chunk_close(p, "IEND", 0);
	if ((uint64_t)(p - buf) != size) {
		size_t wrote = (size_t)(p - buf);

		free(buf);
		return pt_fail(err, -EIO, "png: %zu bytes written, %llu computed",
			       wrote, (unsigned long long)size);
	}
	*out = buf;
	*len = (size_t)size;
	return 0;
}

/* The rows of @rgb, each filter byte 2 ("Up": minus the row above) and
 * its bytes, into @raw. */
static void rows_up(uint8_t *raw, const uint8_t *rgb, uint32_t w, uint32_t h)
{
	size_t row = 3 * (size_t)w, i;
	uint32_t y;

	for (y = 0; y < h; y++) {
		const uint8_t *src = rgb + (size_t)y * row;
		uint8_t *dst = raw + (size_t)y * (row + 1);

		dst[0] = 2;
		for (i = 0; i < row; i++)
			dst[1 + i] = (uint8_t)(src[i] - (y ? src[i - row] : 0));
	}
}

int pt_png_encode_z(const uint8_t *rgb, uint32_t w, uint32_t h,
		    const struct pt_png_text *txt, size_t ntxt,
		    uint8_t **out, size_t *len, struct pt_error *err)
{
	/* signature, IHDR and texts: a 1 x 1 picture's size less its IDAT
	 * and IEND */
	uint64_t rlen = raw_len(w, h), head = pt_png_size(1, 1, txt, ntxt) -
		(CHUNK_OVERHEAD + zlib_len(raw_len(1, 1))) - CHUNK_OVERHEAD;
	uint8_t *raw, *buf, *p;
	uLongf zlen;
	int zrc;

	*out = NULL;
	*len = 0;
	if (!w || !h || rlen > 0x3fffffff)
		return pt_fail(err, -EINVAL, "png: %u x %u px is too large", w, h);
	zlen = compressBound((uLong)rlen);
	raw = malloc((size_t)rlen);
	buf = malloc((size_t)head + CHUNK_OVERHEAD + zlen + CHUNK_OVERHEAD);
	if (!raw || !buf) {
		free(raw);
		free(buf);
		return pt_fail(err, -ENOMEM, "png: out of memory");
	}
	rows_up(raw, rgb, w, h);
	p = png_head(buf, w, h, txt, ntxt);
	zrc = compress2(p + 8, &zlen, raw, (uLong)rlen, Z_BEST_COMPRESSION);
	free(raw);
	if (zrc != Z_OK) {
		free(buf);
		return pt_fail(err, -EIO, "png: zlib failed (%d)", zrc);
	}
	p = chunk_close(p, "IDAT", (uint32_t)zlen);
	p = chunk_close(p, "IEND", 0);
	*out = buf;
	*len = (size_t)(p - buf);
	return 0;
}
