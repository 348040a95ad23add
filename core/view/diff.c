/* SPDX-License-Identifier: MIT */
/*
 * diff.c -- one tensor against another (see diff.h).
 *
 * Both files are read side by side in 1 MiB chunks.  Equal chunks are
 * only memcmp'ed; a chunk that differs (or every chunk when the dtypes
 * differ) is decoded into doubles and compared value by value, complex
 * values by the modulus of the difference.  When some chunk differed,
 * the equal ones are read once more for their part of ||a|| (rel_l2 is
 * over the whole tensor); a tensor that did not change costs one pass.
 * Memory stays at two chunks, two decode blocks and a bit per chunk
 * whatever the tensor size.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "view/diff.h"
#include "view/elem.h"

#define CHUNK (1u << 20)
#define BLOCK 16384u

const char *pt_dstatus_name(enum pt_dstatus s)
{
	static const char *const names[] = { "same", "changed", "dtype", "shape",
					     "added", "removed" };
	return names[s];
}

struct side {
	struct pt_ckpt *ck;
	struct pt_node *node;
	struct pt_tinfo ti;
	struct pt_elem el;
	bool dec;
	uint8_t *buf;
	double *val;
};

struct acc {
	double d2, a2;
};

/* Where a change is: element @index (C order), with the real parts. */
static void note_at(struct pt_dat *at, uint64_t index, double a, double b)
{
	at->index = index;
	at->a = a;
	at->b = b;
}

/* ||a||^2 of decoded values (complex: n pairs). */
static double norm2(const double *x, size_t n)
{
	double s = 0;
	size_t i;

	for (i = 0; i < n; i++)
		s += isfinite(x[i]) ? x[i] * x[i] : 0;
	return s;
}

/* Compare @n values per side (complex: n pairs), the first being
 * element @e0 of the tensor.  */
static void cmp_values(struct pt_tdiff *d, struct acc *s, const double *x,
		       const double *y, size_t n, bool cplx, uint64_t e0)
{
	size_t i, step = cplx ? 2 : 1;

	for (i = 0; i < n * step; i += step) {
		double xr = x[i], yr = y[i], xi = cplx ? x[i + 1] : 0, yi = cplx ? y[i + 1] : 0;
		bool xf = isfinite(xr) && isfinite(xi), yf = isfinite(yr) && isfinite(yi);
		double dd;

		d->values++;
		if (!xf || !yf) {
			bool same = (isnan(xr) || isnan(xi)) ? (isnan(yr) || isnan(yi)) :
				    xr == yr && xi == yi;
			if (!same) {
				if (!d->changed++)
					note_at(&d->first, e0 + i / step, xr, yr);
				d->nonfinite++;
			}
			continue;
		}
		dd = cplx ? hypot(xr - yr, xi - yi) : fabs(xr - yr);
		if (xr != yr || xi != yi) {
			if (!d->changed++)
				note_at(&d->first, e0 + i / step, xr, yr);
		}
		if (dd > d->max_abs) {
			d->max_abs = dd;
			note_at(&d->largest, e0 + i / step, xr, yr);
		}
		s->d2 += dd * dd;
		s->a2 += xr * xr + xi * xi;
	}
}

/* Decode and compare the @elems elements in both sides' chunks, the
 * first being element @e0 of the tensor. */
static void cmp_chunk(struct pt_tdiff *d, struct acc *s, struct side *a,
		      struct side *b, size_t elems, uint64_t e0)
{
	size_t i, k;
	bool cplx = a->el.kind == PT_EK_COMPLEX;

	for (i = 0; i < elems; i += k) {
		k = elems - i < BLOCK ? elems - i : BLOCK;
		pt_elem_decode(&a->el, a->buf + i * a->el.size, k, a->val);
		pt_elem_decode(&b->el, b->buf + i * b->el.size, k, b->val);
		cmp_values(d, s, a->val, b->val, cplx ? k : k * a->el.per, cplx,
			   (e0 + i) * (cplx ? 1 : a->el.per));
	}
}

/* ||a||^2 of the @elems elements in a's chunk. */
static double chunk_norm2(struct side *a, size_t elems)
{
	size_t i, k, per = a->el.kind == PT_EK_COMPLEX ? 2 : a->el.per;
	double s = 0;

	for (i = 0; i < elems; i += k) {
		k = elems - i < BLOCK ? elems - i : BLOCK;
		pt_elem_decode(&a->el, a->buf + i * a->el.size, k, a->val);
		s += norm2(a->val, k * per);
	}
	return s;
}

static int read_side(struct side *s, uint64_t off, size_t n, struct pt_error *err)
{
	ssize_t got = pt_node_read(s->ck, s->node, s->buf, n, off, err);

	if (got < 0)
		return (int)got;
	if ((size_t)got != n)
		return pt_fail(err, -EIO, "short read at byte %llu", (unsigned long long)off);
	pt_ckpt_progress(s->ck, PT_PROGRESS_DONE, n);
	return 0;
}

static bool same_shape(const struct pt_tinfo *a, const struct pt_tinfo *b)
{
	return a->rank == b->rank && a->numel == b->numel &&
	       memcmp(a->shape, b->shape, a->rank * sizeof(*a->shape)) == 0;
}

/* The part of ||a||^2 in the chunks @skipped marks (equal in both). */
static int add_skipped(struct side *a, const uint8_t *skipped, uint64_t per,
		       struct acc *s, struct pt_error *err)
{
	uint64_t c, n = a->ti.numel;
	int rc;

	for (c = 0; c * per < n; c++) {
		size_t k = (size_t)(n - c * per < per ? n - c * per : per);

		if (!(skipped[c / 8] & (1u << (c % 8))))
			continue;
		if ((rc = read_side(a, c * per * a->ti.itemsize, k * a->ti.itemsize, err)))
			return rc;
		s->a2 += chunk_norm2(a, k);
	}
	return 0;
}

/* Walk both tensors element-aligned: chunks hold the same elements. */
static int walk(struct pt_tdiff *d, struct side *a, struct side *b, bool values_only,
		struct pt_error *err)
{
	uint64_t per = CHUNK / (a->ti.itemsize > b->ti.itemsize ? a->ti.itemsize : b->ti.itemsize);
	uint64_t e0 = 0, n = a->ti.numel, c = 0;
	uint8_t *skipped = calloc((size_t)((n / per + 1) / 8 + 1), 1);
	bool any_skipped = false;
	struct acc s = { 0, 0 };
	int rc = 0;

	if (!skipped)
		return pt_fail(err, -ENOMEM, "out of memory");
	while (e0 < n) {
		size_t k = (size_t)(n - e0 < per ? n - e0 : per);
		size_t ba = k * a->ti.itemsize, bb = k * b->ti.itemsize;

		if ((rc = read_side(a, e0 * a->ti.itemsize, ba, err)) ||
		    (rc = read_side(b, e0 * b->ti.itemsize, bb, err)))
			break;
		if (values_only || memcmp(a->buf, b->buf, ba) != 0) {
			if (!values_only)
				d->status = PT_D_VALUE;
			if (a->dec && b->dec) {
				cmp_chunk(d, &s, a, b, k, e0);
				d->compared = true;
			}
		} else {
			d->values += k * (a->dec ? (a->el.kind == PT_EK_COMPLEX ? 1 : a->el.per) : 1);
			skipped[c / 8] |= (uint8_t)(1u << (c % 8));
			any_skipped = true;
		}
		e0 += k;
		c++;
	}
	/* the equal chunks' share of ||a||, once something changed */
	if (!rc && d->compared && any_skipped)
		rc = add_skipped(a, skipped, per, &s, err);
	free(skipped);
	if (!rc && d->compared)
		d->rel_l2 = s.a2 > 0 ? sqrt(s.d2 / s.a2) : s.d2 > 0 ? INFINITY : 0;
	return rc;
}

int pt_tensor_diff(struct pt_ckpt *a, struct pt_node *na, struct pt_ckpt *b,
		   struct pt_node *nb, struct pt_tdiff *d, struct pt_error *err)
{
	struct side sa = { a, na, { 0 }, { 0 }, false, NULL, NULL };
	struct side sb = { b, nb, { 0 }, { 0 }, false, NULL, NULL };
	bool same_dtype;
	int rc = 0;

	memset(d, 0, sizeof(*d));
	if (!pt_node_tinfo(na, &sa.ti) || !pt_node_tinfo(nb, &sb.ti))
		return pt_fail(err, -EINVAL, "not a tensor");
	same_dtype = strcmp(sa.ti.dtype, sb.ti.dtype) == 0 &&
		     (sa.ti.byteorder == '>') == (sb.ti.byteorder == '>');
	if (!same_shape(&sa.ti, &sb.ti)) {
		d->status = PT_D_SHAPE;
		return 0;
	}
	d->status = same_dtype ? PT_D_SAME : PT_D_DTYPE;
	sa.dec = pt_elem_init(&sa.el, &sa.ti) == 0;
	sb.dec = pt_elem_init(&sb.el, &sb.ti) == 0;
	if (!same_dtype && (!sa.dec || !sb.dec || sa.el.per != sb.el.per ||
			    (sa.el.kind == PT_EK_COMPLEX) != (sb.el.kind == PT_EK_COMPLEX)))
		return 0;       /* nothing to compare values with */
	sa.buf = malloc(CHUNK);
	sb.buf = malloc(CHUNK);
	sa.val = malloc(BLOCK * 8 * sizeof(double));
	sb.val = malloc(BLOCK * 8 * sizeof(double));
	if (!sa.buf || !sb.buf || !sa.val || !sb.val)
		rc = pt_fail(err, -ENOMEM, "out of memory");
	else
		rc = walk(d, &sa, &sb, !same_dtype, err);
	free(sa.buf);
	free(sb.buf);
	free(sa.val);
	free(sb.val);
	return rc;
}
