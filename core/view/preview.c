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

struct geom {
	uint64_t rows, cols;
	uint32_t w, h;
};

static uint32_t clamp_side(double v, unsigned max_side)
{
	if (v < 1)
		return 1;
	return v > max_side ? max_side : (uint32_t)(v + 0.5);
}

static void geometry(const struct pt_tinfo *ti, unsigned max_side, struct geom *g)
{
	uint64_t big;
	double s;
	uint32_t k;

	g->cols = ti->rank ? (uint64_t)ti->shape[ti->rank - 1] : 1;
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

/* s of the colour scale: 99.5th percentile of |x| (finite), else max. */
static double robust_scale(const double *v, size_t n)
{
	double *a = malloc((n ? n : 1) * sizeof(*a)), s = 0, mx = 0;
	size_t m = 0, i;

	if (!a)
		return 1;
	for (i = 0; i < n; i++) {
		if (isfinite(v[i])) {
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
	return s > 0 ? s : 1;
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

static int sample_all(struct sampler *s, struct pt_error *err)
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

static int paint(struct sampler *s, struct pt_error *err)
{
	size_t n = (size_t)s->g.w * s->g.h, i;
	uint8_t *rgb = malloc(n * 3);
	char desc[160];
	int rc;

	if (!rgb)
		return pt_fail(err, -ENOMEM, "out of memory");
	s->out->scale = robust_scale(s->val, n);
	for (i = 0; i < n; i++)
		colour(s->val[i], s->out->scale, rgb + 3 * i);
	snprintf(desc, sizeof(desc),
		 "%s tensor folded to %llu x %llu; blue -%.6g .. white 0 .. red +%.6g; "
		 "NaN green, +Inf yellow, -Inf cyan",
		 s->src->ti.dtype, (unsigned long long)s->g.rows,
		 (unsigned long long)s->g.cols, s->out->scale, s->out->scale);
	rc = pt_png_encode(rgb, s->g.w, s->g.h, desc, &s->out->png, &s->out->len, err);
	free(rgb);
	return rc;
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
	if (max_side < 16 || max_side > 4096)
		return pt_fail(err, -EINVAL, "picture size %u not in 16..4096", max_side);
	if (pt_elem_init(&s.el, &src->ti) != 0)
		return pt_fail(err, -ENOTSUP, "no picture for dtype %s", src->ti.dtype);
	if (src->ti.numel < 2 || src->ti.nbytes < src->ti.numel * s.el.size)
		return pt_fail(err, -EINVAL, "no picture for a tensor of %llu elements",
			       (unsigned long long)src->ti.numel);
	geometry(&src->ti, max_side, &s.g);
	out->width = s.g.w;
	out->height = s.g.h;
	out->rows = s.g.rows;
	out->cols = s.g.cols;
	s.col = malloc(s.g.w * sizeof(*s.col));
	s.raw = malloc(ROW_SPAN_MAX + 16);
	s.val = malloc((size_t)s.g.w * s.g.h * sizeof(*s.val));
	if (!s.col || !s.raw || !s.val)
		rc = pt_fail(err, -ENOMEM, "out of memory");
	else if ((rc = sample_all(&s, err)) == 0)
		rc = paint(&s, err);
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
	return pt_preview_render_src(&src, max_side, out, err);
}

void pt_preview_free(struct pt_preview *p)
{
	free(p->png);
	p->png = NULL;
	p->len = 0;
}
