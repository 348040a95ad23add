/* SPDX-License-Identifier: MIT */
/*
 * preview.c -- sampling a tensor and colouring it (see preview.h).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cancel.h"
#include "view/elem.h"
#include "view/preview.h"

/* A sampled row's span is read in one piece when it is at most this
 * long; otherwise the sampled elements are read one run at a time. */
#define ROW_SPAN_MAX (64u << 10)
/* Elements closer than this (bytes) are read together. */
#define GAP_MAX 64u

/* How the tensor is laid out in the picture. */
enum layout {
	L_FOLD,         /* rows x cols, sampled */
	L_GRID,         /* conv weights: tiles of kh x kw, a gap between */
	L_SWATCH,       /* one element: one colour */
	L_EMPTY,        /* no element: an empty frame */
};

struct geom {
	enum layout lay;
	uint64_t rows, cols;    /* L_FOLD: the folded tensor; L_GRID: out, in */
	uint32_t w, h;
	/* L_GRID: tiles shown (the first to x ti), kernel, px per element */
	uint32_t to, ti, kh, kw, k;
};

#define GRID_KERNEL_MAX 16      /* kh, kw: a conv kernel, not an image */
#define SWATCH_SIDE 64

static uint32_t clamp_side(double v, unsigned max_side)
{
	if (v < 1)
		return 1;
	return v > max_side ? max_side : (uint32_t)(v + 0.5);
}

static uint32_t min32(uint64_t a, uint32_t b)
{
	return a < b ? (uint32_t)a : b;
}

/* [out, in, kh, kw] with a small kernel of more than one element */
static bool is_conv(const struct pt_tinfo *ti, unsigned max_side)
{
	int64_t kh, kw;

	if (ti->rank != 4 || !ti->numel)
		return false;
	kh = ti->shape[2];
	kw = ti->shape[3];
	return kh >= 1 && kw >= 1 && kh <= GRID_KERNEL_MAX && kw <= GRID_KERNEL_MAX &&
	       kh * kw >= 2 && 2 * (kh + 1) <= (int64_t)max_side &&
	       2 * (kw + 1) <= (int64_t)max_side;
}

/* Grid: at most as many tiles as fit at 1 px an element with 1 px gaps,
 * scaled up by a whole factor to about 64 px, no side under 16 (the
 * rest is gap). */
static void grid_geometry(const struct pt_tinfo *ti, unsigned max_side, struct geom *g)
{
	uint32_t side, kfit_h, kfit_w;

	g->lay = L_GRID;
	g->rows = (uint64_t)ti->shape[0];
	g->cols = (uint64_t)ti->shape[1];
	g->kh = (uint32_t)ti->shape[2];
	g->kw = (uint32_t)ti->shape[3];
	g->to = min32(g->rows, (max_side + 1) / (g->kh + 1));
	g->ti = min32(g->cols, (max_side + 1) / (g->kw + 1));
	kfit_h = ((max_side + 1) / g->to - 1) / g->kh;
	kfit_w = ((max_side + 1) / g->ti - 1) / g->kw;
	side = g->to * (g->kh + 1) > g->ti * (g->kw + 1) ?
	       g->to * (g->kh + 1) - 1 : g->ti * (g->kw + 1) - 1;
	g->k = side < 64 ? 64 / side : 1;
	g->k = g->k < kfit_h ? g->k : kfit_h;
	g->k = g->k < kfit_w ? g->k : kfit_w;
	g->h = g->to * (g->kh * g->k + 1) - 1;
	g->w = g->ti * (g->kw * g->k + 1) - 1;
	g->h = g->h < 16 ? 16 : g->h;
	g->w = g->w < 16 ? 16 : g->w;
}

static void geometry(const struct pt_tinfo *ti, unsigned max_side, struct geom *g)
{
	uint64_t big;
	double s;
	uint32_t k, r;

	memset(g, 0, sizeof(*g));
	if (ti->numel == 0) {
		g->lay = L_EMPTY;
		g->w = g->h = SWATCH_SIDE < max_side ? SWATCH_SIDE : max_side;
		return;
	}
	if (ti->numel == 1) {
		g->lay = L_SWATCH;
		g->rows = g->cols = 1;
		g->w = g->h = SWATCH_SIDE < max_side ? SWATCH_SIDE : max_side;
		return;
	}
	if (is_conv(ti, max_side)) {
		grid_geometry(ti, max_side, g);
		return;
	}
	g->lay = L_FOLD;
	/* trailing dimensions of 1 beyond the second do not fold: a 1 x 1
	 * conv weight [out, in, 1, 1] is the matrix out x in */
	r = ti->rank;
	while (r > 2 && ti->shape[r - 1] == 1)
		r--;
	g->cols = r ? (uint64_t)ti->shape[r - 1] : 1;
	g->rows = g->cols ? ti->numel / g->cols : 0;
	big = g->rows > g->cols ? g->rows : g->cols;
	s = big > max_side ? (double)max_side / (double)big : 1.0;
	g->w = clamp_side((double)g->cols * s, max_side);
	g->h = clamp_side((double)g->rows * s, max_side);
	k = (g->w > g->h ? g->w : g->h);
	k = k < 64 ? 64 / k : 1;
	g->w *= k;
	g->h *= k;
	if (g->w < 16)
		g->w = 16;
	if (g->h < 16)
		g->h = 16;
}

struct sampler {
	const struct pt_preview_src *src;
	struct pt_elem el;
	struct geom g;
	uint64_t *col;          /* sampled column per x */
	uint8_t *raw;           /* one row's bytes (span or runs) */
	double *val;            /* sampled values, h * w */
	uint8_t *gap;           /* L_GRID: 1 where a pixel is between tiles */
	double tmp[8];
	struct pt_preview *out;
};

static int rd(struct sampler *s, void *buf, size_t n, uint64_t off, struct pt_error *err)
{
	ssize_t got = s->src->read(s->src->ctx, buf, n, off, err);

	s->out->reads++;
	if (got < 0)
		return (int)got;
	if ((size_t)got != n)
		return pt_fail(err, -EIO, "short read at byte %llu", (unsigned long long)off);
	s->out->bytes_read += n;
	return 0;
}

static double value_at(struct sampler *s, const uint8_t *p)
{
	pt_elem_decode(&s->el, p, 1, s->tmp);
	if (s->el.kind == PT_EK_COMPLEX)
		return isnan(s->tmp[0]) || isnan(s->tmp[1]) ? NAN : hypot(s->tmp[0], s->tmp[1]);
	return s->tmp[0];
}

/* Sample row @r into @dst (w values). */
static int sample_row(struct sampler *s, uint64_t r, double *dst, struct pt_error *err)
{
	uint64_t es = s->el.size, base = r * s->g.cols * es;
	uint64_t lo = s->col[0] * es, hi = (s->col[s->g.w - 1] + 1) * es;
	uint32_t x, x0;
	int rc;

	if (hi - lo <= ROW_SPAN_MAX) {
		if ((rc = rd(s, s->raw, hi - lo, base + lo, err)))
			return rc;
		for (x = 0; x < s->g.w; x++)
			dst[x] = value_at(s, s->raw + s->col[x] * es - lo);
		return 0;
	}
	for (x0 = 0; x0 < s->g.w; x0 = x) {
		uint64_t a = s->col[x0] * es, b;

		for (x = x0 + 1; x < s->g.w && s->col[x] * es <= (s->col[x - 1] + 1) * es + GAP_MAX &&
			 (s->col[x] + 1) * es - a <= ROW_SPAN_MAX; x++)
			;
		b = (s->col[x - 1] + 1) * es;
		if ((rc = rd(s, s->raw, b - a, base + a, err)))
			return rc;
		for (uint32_t i = x0; i < x; i++)
			dst[i] = value_at(s, s->raw + s->col[i] * es - a);
	}
	return 0;
}

/* The k-th smallest of a[0..n) (a is reordered): quickselect with a
 * median-of-three pivot, O(n) on average. */
static double kth(double *a, size_t n, size_t k)
{
	size_t lo = 0, hi = n - 1;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2, i = lo, j = hi;
		double p = a[mid], x = a[lo], y = a[hi], t;

		/* median of a[lo], a[mid], a[hi] */
		if ((x <= p) == (p <= y))
			;
		else if ((p <= x) == (x <= y))
			p = x;
		else
			p = y;
		while (i <= j) {
			while (a[i] < p)
				i++;
			while (a[j] > p)
				j--;
			if (i <= j) {
				t = a[i], a[i] = a[j], a[j] = t;
				i++;
				if (j == 0)
					break;
				j--;
			}
		}
		if (k <= j)
			hi = j;
		else if (k >= i)
			lo = i;
		else
			break;
	}
	return a[k];
}

/* s of the colour scale: 99.5th percentile of |x| (finite, not in a
 * gap), else max; 0 when every such value is 0, -1 when there is none. */
static double robust_scale(const double *v, const uint8_t *gap, size_t n)
{
	double *a = malloc((n ? n : 1) * sizeof(*a)), s = 0, mx = 0;
	size_t m = 0, i;

	if (!a)
		return 1;
	for (i = 0; i < n; i++) {
		if (isfinite(v[i]) && !(gap && gap[i])) {
			a[m] = fabs(v[i]);
			mx = a[m] > mx ? a[m] : mx;
			m++;
		}
	}
	if (m) {
		s = kth(a, m, (size_t)((double)(m - 1) * 0.995));
		if (s == 0)
			s = mx;
	}
	free(a);
	return m ? s : -1;
}

static void colour(double x, double s, uint8_t *px)
{
	static const double pos[3] = { 178, 24, 43 }, neg[3] = { 33, 102, 172 };
	const double *end;
	double t;
	int c;

	if (isnan(x)) {
		px[0] = 0, px[1] = 200, px[2] = 0;
		return;
	}
	if (isinf(x)) {
		if (x > 0)
			px[0] = 255, px[1] = 220, px[2] = 0;
		else
			px[0] = 0, px[1] = 220, px[2] = 255;
		return;
	}
	t = fabs(x) / s;
	t = t > 1 ? 1 : t;
	end = x < 0 ? neg : pos;
	for (c = 0; c < 3; c++)
		px[c] = (uint8_t)lround(255.0 + (end[c] - 255.0) * t);
}

static int sample_fold(struct sampler *s, struct pt_error *err)
{
	uint64_t prev = UINT64_MAX;
	uint32_t x, y;
	int rc;

	for (x = 0; x < s->g.w; x++)
		s->col[x] = (uint64_t)x * s->g.cols / s->g.w;
	for (y = 0; y < s->g.h; y++) {
		uint64_t r = (uint64_t)y * s->g.rows / s->g.h;
		double *dst = s->val + (size_t)y * s->g.w;

		if (r == prev) {
			memcpy(dst, dst - s->g.w, s->g.w * sizeof(*dst));
			continue;
		}
		if (pt_cancelled())
			return pt_fail(err, -EINTR, "interrupted");
		if ((rc = sample_row(s, r, dst, err)))
			return rc;
		prev = r;
	}
	return 0;
}

/* The kernels of output channel @o, inputs 0..ti-1, into @dst (ti tiles
 * of kh * kw values): one read when they are short, else a read a tile. */
static int read_tile_row(struct sampler *s, uint32_t o, double *dst, struct pt_error *err)
{
	const struct geom *g = &s->g;
	uint64_t es = s->el.size, kern = (uint64_t)g->kh * g->kw;
	uint64_t base = (uint64_t)o * g->cols * kern * es;
	uint64_t span = g->ti * kern * es, step = span <= ROW_SPAN_MAX ? span : kern * es;
	uint64_t done, e;
	int rc;

	for (done = 0; done < span; done += step) {
		if ((rc = rd(s, s->raw, step, base + done, err)))
			return rc;
		for (e = 0; e < step / es; e++)
			dst[done / es + e] = value_at(s, s->raw + e * es);
	}
	return 0;
}

/* Pixel (x, y) of the grid: tile (y / (kh k + 1), x / (kw k + 1)), a gap
 * on each tile's last row and column and beyond the last tile. */
static int sample_grid(struct sampler *s, struct pt_error *err)
{
	const struct geom *g = &s->g;
	uint32_t ch = g->kh * g->k + 1, cw = g->kw * g->k + 1, x, y;
	size_t kern = (size_t)g->kh * g->kw;
	double *tiles = malloc((size_t)g->ti * kern * sizeof(*tiles));
	int rc = 0;

	if (!tiles)
		return pt_fail(err, -ENOMEM, "out of memory");
	for (y = 0; y < g->h && rc == 0; y++) {
		uint32_t o = y / ch, py = y % ch;
		double *dst = s->val + (size_t)y * g->w;
		uint8_t *gap = s->gap + (size_t)y * g->w;

		if (py == 0 && o < g->to) {
			if (pt_cancelled())
				rc = pt_fail(err, -EINTR, "interrupted");
			else
				rc = read_tile_row(s, o, tiles, err);
		}
		for (x = 0; x < g->w && rc == 0; x++) {
			uint32_t i = x / cw, px = x % cw;

			gap[x] = o >= g->to || i >= g->ti || py == ch - 1 || px == cw - 1;
			dst[x] = gap[x] ? 0 : tiles[i * kern + (py / g->k) * g->kw + px / g->k];
		}
	}
	free(tiles);
	return rc;
}

/* The Description: what the shape makes (@head) then what the values
 * make, padded to a fixed width so that the length, and with it the
 * PNG's, is known before the values are. */
#define DESC_DATA_WIDTH 96

/* "[3, 0, 4]" into @buf, cut with "..." where @cap ends. */
static void shape_text(const struct pt_tinfo *ti, char *buf, size_t cap)
{
	size_t n = 0;
	uint32_t i;
	int k;

	buf[n++] = '[';
	for (i = 0; i < ti->rank; i++) {
		k = snprintf(buf + n, cap - n, "%s%lld", i ? ", " : "",
			     (long long)ti->shape[i]);
		if (k < 0 || (size_t)k + 5 >= cap - n) {
			memcpy(buf + n, "...", 4);
			n += 3;
			break;
		}
		n += (size_t)k;
	}
	memcpy(buf + n, "]", 2);
}

static void desc_head(const struct pt_tinfo *ti, const struct geom *g, char *buf, size_t cap)
{
	char shape[128];

	if (g->lay == L_EMPTY) {
		shape_text(ti, shape, sizeof(shape));
		snprintf(buf, cap, "%s tensor of shape %s: no elements; ", ti->dtype, shape);
	} else if (g->lay == L_SWATCH)
		snprintf(buf, cap, "%s tensor of one element; ", ti->dtype);
	else if (g->lay == L_GRID)
		snprintf(buf, cap, "%s conv weights %llu x %llu of %u x %u kernels, "
			 "the first %u x %u shown, a tile each; ", ti->dtype,
			 (unsigned long long)g->rows, (unsigned long long)g->cols,
			 g->kh, g->kw, g->to, g->ti);
	else
		snprintf(buf, cap, "%s tensor folded to %llu x %llu; ", ti->dtype,
			 (unsigned long long)g->rows, (unsigned long long)g->cols);
}

static void desc_data(struct sampler *s, bool zero, char *buf, size_t cap)
{
	size_t n;

	if (s->g.lay == L_EMPTY)
		snprintf(buf, cap, "nothing to draw (an empty frame)");
	else if (zero)
		snprintf(buf, cap, "every value drawn is 0 (grey hatching)");
	else if (s->g.lay == L_SWATCH)
		snprintf(buf, cap, "value %.9g; blue < 0, red > 0", s->val[0]);
	else
		snprintf(buf, cap, "blue -%.6e .. white 0 .. red +%.6e",
			 s->out->scale, s->out->scale);
	n = strlen(buf);
	memset(buf + n, ' ', DESC_DATA_WIDTH - n);
	buf[DESC_DATA_WIDTH] = '\0';
}

#define DESC_TAIL "; NaN green, +Inf yellow, -Inf cyan"

/* All-zero: a grey frame two pixels wide and diagonal hatching, so that
 * a fresh bias or a running mean is not a blank square. */
static void hatch(uint8_t *px, uint32_t x, uint32_t y, const struct geom *g)
{
	bool frame = x < 2 || y < 2 || x + 2 >= g->w || y + 2 >= g->h;

	if (frame || (x + y) % 8 < 2)
		px[0] = px[1] = px[2] = frame ? 150 : 205;
}

/* No elements: a grey frame two pixels wide around white, and in it
 * the empty-set sign (a ring crossed by a slash) as its label. */
static void empty_mark(uint8_t *px, uint32_t x, uint32_t y, const struct geom *g)
{
	double cx = (g->w - 1) / 2.0, cy = (g->h - 1) / 2.0, r = g->w / 4.0;
	double dx = x - cx, dy = y - cy, d = sqrt(dx * dx + dy * dy);
	bool frame = x < 2 || y < 2 || x + 2 >= g->w || y + 2 >= g->h;
	bool ring = fabs(d - r) < 1.25;
	bool slash = fabs(dx + dy) < 1.25 && d < r * 1.45;

	px[0] = px[1] = px[2] = frame || ring || slash ? 150 : 255;
}

static int paint(struct sampler *s, struct pt_error *err)
{
	size_t n = (size_t)s->g.w * s->g.h, i;
	uint8_t *rgb = malloc(n * 3);
	char head[256], data[DESC_DATA_WIDTH + 1], desc[sizeof(head) + sizeof(data) + 40];
	struct pt_png_text txt[8];
	double sc;
	bool zero;
	int rc;

	if (!rgb)
		return pt_fail(err, -ENOMEM, "out of memory");
	if (s->src->nextra > 7) {
		free(rgb);
		return pt_fail(err, -EINVAL, "too many text chunks");
	}
	sc = s->g.lay == L_EMPTY ? 1 : robust_scale(s->val, s->gap, n);
	zero = sc == 0;
	s->out->scale = sc > 0 ? sc : 1;
	for (i = 0; i < n; i++) {
		uint8_t *px = rgb + 3 * i;

		if (s->g.lay == L_EMPTY) {
			empty_mark(px, (uint32_t)(i % s->g.w), (uint32_t)(i / s->g.w), &s->g);
			continue;
		}
		if (s->gap && s->gap[i]) {
			px[0] = px[1] = px[2] = 96;
			continue;
		}
		colour(s->val[i], s->out->scale, px);
		if (zero && s->val[i] == 0)
			hatch(px, (uint32_t)(i % s->g.w), (uint32_t)(i / s->g.w), &s->g);
	}
	desc_head(&s->src->ti, &s->g, head, sizeof(head));
	desc_data(s, zero, data, sizeof(data));
	snprintf(desc, sizeof(desc), "%s%s%s", head, data, DESC_TAIL);
	txt[0] = (struct pt_png_text){ "Description", desc };
	for (i = 0; i < s->src->nextra; i++)
		txt[i + 1] = s->src->extra[i];
	rc = (s->src->compress ? pt_png_encode_z : pt_png_encode)(
		rgb, s->g.w, s->g.h, txt, 1 + s->src->nextra, &s->out->png, &s->out->len, err);
	free(rgb);
	return rc;
}

/* Whether @ti can be drawn; its element decoder in @el. */
static int drawable(const struct pt_tinfo *ti, unsigned max_side, struct pt_elem *el,
		    struct pt_error *err)
{
	if (max_side < 16 || max_side > 4096)
		return pt_fail(err, -EINVAL, "picture size %u not in 16..4096", max_side);
	if (pt_elem_init(el, ti) != 0)
		return pt_fail(err, -ENOTSUP, "no picture for dtype %s", ti->dtype);
	if (ti->nbytes < ti->numel * el->size)
		return pt_fail(err, -EINVAL, "no picture for a tensor of %llu elements in %llu bytes",
			       (unsigned long long)ti->numel, (unsigned long long)ti->nbytes);
	return 0;
}

int pt_preview_size(const struct pt_tinfo *ti, unsigned max_side, uint64_t *size,
		    struct pt_error *err)
{
	char head[256], desc[sizeof(head) + DESC_DATA_WIDTH + 40];
	struct pt_png_text txt;
	struct pt_elem el;
	struct geom g;
	int rc;

	*size = 0;
	if ((rc = drawable(ti, max_side, &el, err)))
		return rc;
	geometry(ti, max_side, &g);
	desc_head(ti, &g, head, sizeof(head));
	snprintf(desc, sizeof(desc), "%s%*s%s", head, DESC_DATA_WIDTH, "", DESC_TAIL);
	txt = (struct pt_png_text){ "Description", desc };
	*size = pt_png_size(g.w, g.h, &txt, 1);
	return 0;
}

int pt_preview_render_src(const struct pt_preview_src *src, unsigned max_side,
			  struct pt_preview *out, struct pt_error *err)
{
	struct sampler s;
	int rc;

	memset(out, 0, sizeof(*out));
	memset(&s, 0, sizeof(s));
	s.src = src;
	s.out = out;
	if ((rc = drawable(&src->ti, max_side, &s.el, err)))
		return rc;
	geometry(&src->ti, max_side, &s.g);
	out->width = s.g.w;
	out->height = s.g.h;
	out->rows = s.g.rows;
	out->cols = s.g.cols;
	s.col = malloc(s.g.w * sizeof(*s.col));
	s.raw = malloc(ROW_SPAN_MAX + 16);
	s.val = malloc((size_t)s.g.w * s.g.h * sizeof(*s.val));
	if (s.g.lay == L_GRID)
		s.gap = malloc((size_t)s.g.w * s.g.h);
	if (!s.col || !s.raw || !s.val || (s.g.lay == L_GRID && !s.gap))
		rc = pt_fail(err, -ENOMEM, "out of memory");
	else if (s.g.lay == L_EMPTY)
		rc = paint(&s, err);
	else if ((rc = s.g.lay == L_GRID ? sample_grid(&s, err) : sample_fold(&s, err)) == 0)
		rc = paint(&s, err);
	free(s.gap);
	free(s.col);
	free(s.raw);
	free(s.val);
	return rc;
}

struct node_src {
	struct pt_ckpt *ck;
	struct pt_node *node;
};

static ssize_t node_read(void *ctx, void *buf, size_t n, uint64_t off,
			 struct pt_error *err)
{
	struct node_src *ns = ctx;

	return pt_node_read(ns->ck, ns->node, buf, n, off, err);
}

int pt_preview_render(struct pt_ckpt *ck, struct pt_node *node,
		      unsigned max_side, struct pt_preview *out,
		      struct pt_error *err)
{
	struct node_src ns = { ck, node };
	struct pt_preview_src src;

	memset(out, 0, sizeof(*out));
	if (!pt_node_tinfo(node, &src.ti))
		return pt_fail(err, -EINVAL, "not a tensor");
	src.read = node_read;
	src.ctx = &ns;
	src.extra = NULL;
	src.nextra = 0;
	src.compress = false;
	return pt_preview_render_src(&src, max_side, out, err);
}

void pt_preview_free(struct pt_preview *p)
{
	free(p->png);
	p->png = NULL;
	p->len = 0;
}
