/* SPDX-License-Identifier: MIT */
/*
 * preview.h -- a tensor's picture as PNG, from a strided sample.
 *
 * Geometry: a tensor is folded to rows x cols (cols = its last dimension,
 * rows = the product of the others; 1-D: one row; dimensions of 1 at the
 * end beyond the second do not count, so a 1 x 1 conv weight
 * [out, in, 1, 1] is out x in).  The picture keeps that
 * aspect with the longer side at most @max_side pixels (512 for the mount),
 * small tensors are scaled up by a whole factor to about 64 px, and no side
 * is under 16 px (a 1-D tensor is a strip 16 px high).  Pixel (x, y) shows
 * element (row floor(y * rows / H), col floor(x * cols / W)): only those
 * elements are read, whole sampled rows when they are short, element by
 * element when they are long: at most 32 MiB for any tensor (512 rows of at
 * most 64 KiB), about 1 MiB in element reads for a multi-GB one.
 * Conv weights [out, in, kh, kw] (a kernel of 2 to 16 x 16 elements) are a
 * grid instead: out rows of in tiles, kh x kw pixels each, scaled up by a
 * whole factor to about 64 px, a 1 px dark grey gap after each tile; only
 * the first tiles that fit at 1 px an element are drawn.  One element is a
 * 64 px swatch; no element a 64 px empty frame with the empty-set sign.
 *
 * Colours: diverging blue - white - red, white at 0, full blue/red at
 * -s/+s where s is the 99.5th percentile of |x| over the sampled finite
 * values (the largest |x| when that is 0); beyond s the colour saturates.
 * NaN is green (0, 200, 0), +Inf yellow (255, 220, 0), -Inf cyan
 * (0, 220, 255).  Complex tensors show |z| (white to red); packed types
 * their first value per byte; bool 0/1.  When every value drawn is 0 the
 * picture gets a grey frame and grey hatching instead of pure white.
 *
 * The PNG's length follows from the geometry alone (pt_preview_size(),
 * png.c: pixels stored uncompressed, the Description padded to a fixed
 * length), so a mount promises st_size without reading the tensor; the
 * same tensor gives the same bytes.
 */
#ifndef PTFS_CORE_VIEW_PREVIEW_H
#define PTFS_CORE_VIEW_PREVIEW_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "ckpt/ckpt.h"

#define PT_PREVIEW_SIDE 512

struct pt_png_text {
	const char *key, *text;
};

/* Where the bytes of the tensor come from: C-order bytes of @ti. */
struct pt_preview_src {
	struct pt_tinfo ti;
	/* exactly @n bytes at @off into @buf: @n, or a negative errno */
	ssize_t (*read)(void *ctx, void *buf, size_t n, uint64_t off,
			struct pt_error *err);
	void *ctx;
	/* tEXt chunks after "Description" (a thumbnail's Thumb::URI...) */
	const struct pt_png_text *extra;
	size_t nextra;
	/* deflate the pixels (pt_png_encode_z()): a thumbnail; false, the
	 * size pt_preview_size() promised: a mount's NAME.png */
	bool compress;
};

struct pt_preview {
	uint8_t *png;           /* malloc'ed PNG file */
	size_t len;
	uint32_t width, height;
	uint64_t rows, cols;    /* the folded tensor */
	double scale;           /* s of the colour scale */
	uint64_t bytes_read;    /* bytes the render read, and in how many */
	uint64_t reads;         /* read calls */
};

/* Render from @src with the longer side at most @max_side (16..4096). */
int pt_preview_render_src(const struct pt_preview_src *src, unsigned max_side,
			  struct pt_preview *out, struct pt_error *err);

/* The byte size of the PNG pt_preview_render*() makes of a tensor @ti
 * with no extra text, from its shape and dtype alone (no element read):
 * 0, or -EINVAL / -ENOTSUP when it has no picture. */
int pt_preview_size(const struct pt_tinfo *ti, unsigned max_side, uint64_t *size,
		    struct pt_error *err);

/* Render tensor file @node of @ck with the longer side at most @max_side
 * (PT_PREVIEW_SIDE for the mount's pictures); -EINVAL "not a tensor". */
int pt_preview_render(struct pt_ckpt *ck, struct pt_node *node,
		      unsigned max_side, struct pt_preview *out,
		      struct pt_error *err);

void pt_preview_free(struct pt_preview *p);

/* ---- png.c ---- */

/* Encode @w x @h RGB8 pixels (rows top-down) as PNG into *@out, *@len
 * (malloc'ed), with a tEXt chunk per @txt (Latin-1), in that order.  The
 * length is pt_png_size() of the same arguments, whatever the pixels. */
int pt_png_encode(const uint8_t *rgb, uint32_t w, uint32_t h,
		  const struct pt_png_text *txt, size_t ntxt,
		  uint8_t **out, size_t *len, struct pt_error *err);
uint64_t pt_png_size(uint32_t w, uint32_t h, const struct pt_png_text *txt, size_t ntxt);

/* As pt_png_encode(), the rows deflated: smaller, of a length that
 * depends on the pixels (thumbnails, which promise no size). */
int pt_png_encode_z(const uint8_t *rgb, uint32_t w, uint32_t h,
		    const struct pt_png_text *txt, size_t ntxt,
		    uint8_t **out, size_t *len, struct pt_error *err);

#endif /* PTFS_CORE_VIEW_PREVIEW_H */
