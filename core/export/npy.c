/* SPDX-License-Identifier: MIT */
/*
 * npy.c -- tensors as NumPy .npy files (format 1.0, or 2.0 when the header
 * passes 64 KiB): the magic, the header dict padded with spaces and a
 * newline to a multiple of 64 bytes, then the data in C order.
 *
 * numpy has no bfloat16, float8 or complex32: those become float32 (and
 * complex64), converted exactly element by element (every value of the
 * narrow type is a float32), and the tensor's NAME.json says so with
 * "npy_dtype".  Packed types (quint4x2, ...) are written as their raw
 * bytes (uint8, one dimension).  Quantized integers keep their integer
 * representation.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "export/export.h"

enum conv {
	CV_NONE,
	CV_BF16,        /* bfloat16 -> float32 */
	CV_F16,         /* float16 -> float32 (complex32's halves) */
	CV_E4M3FN,
	CV_E5M2,
	CV_E4M3FNUZ,
	CV_E5M2FNUZ,
	CV_E8M0,
};

static const struct {
	const char *torch, *descr;      /* descr without the order char */
	int conv;
	unsigned out;                   /* bytes per element written */
} npy_types[] = {
	{ "float64", "f8", CV_NONE, 8 },  { "float32", "f4", CV_NONE, 4 },
	{ "float16", "f2", CV_NONE, 2 },  { "int64", "i8", CV_NONE, 8 },
	{ "int32", "i4", CV_NONE, 4 },    { "int16", "i2", CV_NONE, 2 },
	{ "int8", "i1", CV_NONE, 1 },     { "uint8", "u1", CV_NONE, 1 },
	{ "uint16", "u2", CV_NONE, 2 },   { "uint32", "u4", CV_NONE, 4 },
	{ "uint64", "u8", CV_NONE, 8 },   { "bool", "b1", CV_NONE, 1 },
	{ "complex64", "c8", CV_NONE, 8 }, { "complex128", "c16", CV_NONE, 16 },
	{ "qint8", "i1", CV_NONE, 1 },    { "quint8", "u1", CV_NONE, 1 },
	{ "qint32", "i4", CV_NONE, 4 },   { "bits8", "u1", CV_NONE, 1 },
	{ "bits16", "u2", CV_NONE, 2 },
	{ "bfloat16", "f4", CV_BF16, 4 }, { "complex32", "c8", CV_F16, 8 },
	{ "float8_e4m3fn", "f4", CV_E4M3FN, 4 },
	{ "float8_e5m2", "f4", CV_E5M2, 4 },
	{ "float8_e4m3fnuz", "f4", CV_E4M3FNUZ, 4 },
	{ "float8_e5m2fnuz", "f4", CV_E5M2FNUZ, 4 },
	{ "float8_e8m0fnu", "f4", CV_E8M0, 4 },
};

bool pt_npy_plan(const struct pt_tinfo *ti, struct pt_npy *np,
		 struct pt_error *err)
{
	size_t i;

	memset(np, 0, sizeof(*np));
	np->in_size = ti->itemsize;
	if (ti->packed) {
		snprintf(np->descr, sizeof(np->descr), "|u1");
		np->npy_dtype = "uint8";
		np->out_size = 1;
		np->data_bytes = ti->nbytes;
		return true;
	}
	for (i = 0; i < sizeof(npy_types) / sizeof(npy_types[0]); i++) {
		char o;

		if (strcmp(npy_types[i].torch, ti->dtype) != 0)
			continue;
		np->conv = npy_types[i].conv;
		np->out_size = npy_types[i].out;
		np->swap = np->conv && ti->byteorder == '>';
		if (np->conv)
			np->npy_dtype = np->out_size == 8 ? "complex64" : "float32";
		o = np->out_size == 1 ? '|' : np->conv ? '<' :
		    ti->byteorder == '>' ? '>' : '<';
		snprintf(np->descr, sizeof(np->descr), "%c%s", o,
			 npy_types[i].descr);
		np->data_bytes = ti->numel * np->out_size;
		return true;
	}
	pt_fail(err, -ENOTSUP, "numpy has no dtype for %s", ti->dtype);
	return false;
}

void pt_npy_header(const struct pt_tinfo *ti, const struct pt_npy *np,
		   struct pt_buf *out)
{
	size_t start = out->len, hstart;
	uint32_t d, hl;
	bool v2;

	pt_buf_printf(out, "{'descr': '%s', 'fortran_order': False, 'shape': (",
		      np->descr);
	if (ti->packed) {
		pt_buf_printf(out, "%" PRIu64 ",", ti->nbytes);
	} else {
		for (d = 0; d < ti->rank; d++)
			pt_buf_printf(out, "%s%" PRId64, d ? ", " : "", ti->shape[d]);
		if (ti->rank == 1)
			pt_buf_putc(out, ',');
	}
	pt_buf_puts(out, "), }");
	if (out->oom)
		return;
	/* the dict goes after the preamble: 10 bytes (1.0) or 12 (2.0) */
	hl = (uint32_t)(out->len - start);
	v2 = hl + 1 + 10 > 65535;
	{
		size_t pre = v2 ? 12 : 10, total = pre + hl + 1;
		size_t pad = (64 - total % 64) % 64;
		size_t dict = hl;
		char *tmp = malloc(dict);

		if (!tmp) {
			out->oom = true;
			return;
		}
		memcpy(tmp, out->p + start, dict);
		out->len = start;
		hl = (uint32_t)(dict + pad + 1);
		pt_buf_add(out, "\x93NUMPY", 6);
		pt_buf_putc(out, (char)(v2 ? 2 : 1));
		pt_buf_putc(out, 0);
		pt_buf_putc(out, (char)(hl & 0xff));
		pt_buf_putc(out, (char)((hl >> 8) & 0xff));
		if (v2) {
			pt_buf_putc(out, (char)((hl >> 16) & 0xff));
			pt_buf_putc(out, (char)(hl >> 24));
		}
		hstart = out->len;
		pt_buf_add(out, tmp, dict);
		free(tmp);
		while (out->len - hstart < hl - 1)
			pt_buf_putc(out, ' ');
		pt_buf_putc(out, '\n');
	}
}

static float f16_to_f32(uint16_t h)
{
	unsigned e = (h >> 10) & 0x1f, m = h & 0x3ff;
	float s = (h & 0x8000) ? -1.0f : 1.0f;

	if (e == 0)
		return s * ldexpf((float)m, -24);
	if (e == 31)
		return m ? NAN : s * INFINITY;
	return s * ldexpf((float)(m | 0x400), (int)e - 25);
}

/* An 8-bit float of @eb exponent bits, bias @bias; @fnuz: 0x80 is the only
 * NaN and there is no infinity; @fn (e4m3fn): all-ones is NaN, no
 * infinity; otherwise IEEE-like (e5m2). */
static float f8_to_f32(uint8_t b, unsigned eb, int bias, bool fnuz, bool fn)
{
	unsigned mb = 7 - eb, e = (b >> mb) & ((1u << eb) - 1);
	unsigned m = b & ((1u << mb) - 1);
	float s = (b & 0x80) ? -1.0f : 1.0f;

	if (fnuz && b == 0x80)
		return NAN;
	if (fn && (b & 0x7f) == 0x7f)
		return NAN;
	if (!fnuz && !fn && e == (1u << eb) - 1)
		return m ? NAN : s * INFINITY;
	if (e == 0)
		return s * ldexpf((float)m, 1 - bias - (int)mb);
	return s * ldexpf((float)(m | (1u << mb)), (int)e - bias - (int)mb);
}

static float conv1(int conv, const uint8_t *p, bool swap)
{
	uint16_t h;
	uint32_t u;
	float f;

	switch (conv) {
	case CV_BF16:
	case CV_F16:
		h = (uint16_t)(swap ? (p[0] << 8 | p[1]) : (p[1] << 8 | p[0]));
		if (conv == CV_F16)
			return f16_to_f32(h);
		u = (uint32_t)h << 16;
		memcpy(&f, &u, 4);
		return f;
	case CV_E4M3FN:
		return f8_to_f32(p[0], 4, 7, false, true);
	case CV_E5M2:
		return f8_to_f32(p[0], 5, 15, false, false);
	case CV_E4M3FNUZ:
		return f8_to_f32(p[0], 4, 8, true, false);
	case CV_E5M2FNUZ:
		return f8_to_f32(p[0], 5, 16, true, false);
	case CV_E8M0:
		return p[0] == 0xff ? NAN : ldexpf(1.0f, (int)p[0] - 127);
	default:
		return 0;
	}
}

void pt_npy_convert(const struct pt_npy *np, const uint8_t *in, uint8_t *out,
		    size_t n)
{
	size_t i, parts = np->in_size == 4 && np->conv == CV_F16 ? 2 : 1;
	unsigned step = np->in_size / (unsigned)parts;

	for (i = 0; i < n * parts; i++) {
		float f = conv1(np->conv, in + i * step, np->swap);
		memcpy(out + i * 4, &f, 4);     /* little-endian hosts */
	}
}
