/* SPDX-License-Identifier: MIT */
/*
 * elem.c -- element decoders (see elem.h).
 *
 * The narrow float types go through tables built once from their bit
 * layouts (sign, exponent, mantissa, bias, and what each format does with
 * its top exponent), so float16 and every float8 value is decoded exactly;
 * bfloat16 is the top half of a float32.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "view/elem.h"

enum {
	C_F32, C_F64, C_F16, C_BF16, C_F8, C_F4X2, C_I8, C_I16, C_I32, C_I64,
	C_U8, C_U16, C_U32, C_U64, C_BOOL, C_C32, C_C64, C_C128, C_U4X2,
	C_U2X4, C_U1X8,
};

/* float8 formats: index into f8_tab */
enum { F8_E4M3FN, F8_E5M2, F8_E4M3FNUZ, F8_E5M2FNUZ, F8_E8M0FNU, F8_N };

static double f16_tab[65536];
static double f8_tab[F8_N][256];
static double f4_tab[16];
static pthread_once_t tab_once = PTHREAD_ONCE_INIT;

/* A minifloat without special values: @ebits exponent bits, @mbits
 * mantissa bits, bias @bias; subnormals when the exponent field is 0. */
static double mini(unsigned bits, unsigned ebits, unsigned mbits, int bias)
{
	unsigned m = bits & ((1u << mbits) - 1);
	unsigned e = (bits >> mbits) & ((1u << ebits) - 1);
	bool neg = (bits >> (ebits + mbits)) & 1;
	double v;

	if (e == 0)
		v = ldexp((double)m, 1 - bias - (int)mbits);
	else
		v = ldexp((double)((1u << mbits) | m), (int)e - bias - (int)mbits);
	return neg ? -v : v;
}

static void build_tables(void)
{
	unsigned i;

	for (i = 0; i < 65536; i++) {
		unsigned e = (i >> 10) & 31, m = i & 1023;
		double v = mini(i, 5, 10, 15);
		if (e == 31)
			v = m ? NAN : ((i & 0x8000) ? -INFINITY : INFINITY);
		f16_tab[i] = v;
	}
	for (i = 0; i < 256; i++) {
		/* e4m3fn: no infinities, S.1111.111 is NaN (max 448) */
		f8_tab[F8_E4M3FN][i] = (i & 0x7f) == 0x7f ? NAN : mini(i, 4, 3, 7);
		/* e5m2: IEEE-like, exponent 31 holds Inf and NaN */
		if (((i >> 2) & 31) == 31)
			f8_tab[F8_E5M2][i] = (i & 3) ? NAN : ((i & 0x80) ? -INFINITY : INFINITY);
		else
			f8_tab[F8_E5M2][i] = mini(i, 5, 2, 15);
		/* fnuz: bias one larger, no -0, 0x80 is the only NaN */
		f8_tab[F8_E4M3FNUZ][i] = i == 0x80 ? NAN : mini(i, 4, 3, 8);
		f8_tab[F8_E5M2FNUZ][i] = i == 0x80 ? NAN : mini(i, 5, 2, 16);
		/* e8m0fnu: a power of two 2^(i - 127), 0xff is NaN */
		f8_tab[F8_E8M0FNU][i] = i == 0xff ? NAN : ldexp(1.0, (int)i - 127);
	}
	for (i = 0; i < 16; i++)
		f4_tab[i] = mini(i, 2, 1, 1);
}

static const struct {
	const char *name;
	int code;
	enum pt_ekind kind;
	unsigned per;
	int f8;
} codes[] = {
	{ "float32", C_F32, PT_EK_FLOAT, 1, 0 },
	{ "float64", C_F64, PT_EK_FLOAT, 1, 0 },
	{ "float16", C_F16, PT_EK_FLOAT, 1, 0 },
	{ "bfloat16", C_BF16, PT_EK_FLOAT, 1, 0 },
	{ "float8_e4m3fn", C_F8, PT_EK_FLOAT, 1, F8_E4M3FN },
	{ "float8_e5m2", C_F8, PT_EK_FLOAT, 1, F8_E5M2 },
	{ "float8_e4m3fnuz", C_F8, PT_EK_FLOAT, 1, F8_E4M3FNUZ },
	{ "float8_e5m2fnuz", C_F8, PT_EK_FLOAT, 1, F8_E5M2FNUZ },
	{ "float8_e8m0fnu", C_F8, PT_EK_FLOAT, 1, F8_E8M0FNU },
	{ "float4_e2m1fn_x2", C_F4X2, PT_EK_FLOAT, 2, 0 },
	{ "int8", C_I8, PT_EK_INT, 1, 0 },
	{ "int16", C_I16, PT_EK_INT, 1, 0 },
	{ "int32", C_I32, PT_EK_INT, 1, 0 },
	{ "int64", C_I64, PT_EK_INT, 1, 0 },
	{ "uint8", C_U8, PT_EK_UINT, 1, 0 },
	{ "uint16", C_U16, PT_EK_UINT, 1, 0 },
	{ "uint32", C_U32, PT_EK_UINT, 1, 0 },
	{ "uint64", C_U64, PT_EK_UINT, 1, 0 },
	{ "bool", C_BOOL, PT_EK_BOOL, 1, 0 },
	{ "complex32", C_C32, PT_EK_COMPLEX, 2, 0 },
	{ "complex64", C_C64, PT_EK_COMPLEX, 2, 0 },
	{ "complex128", C_C128, PT_EK_COMPLEX, 2, 0 },
	{ "qint8", C_I8, PT_EK_INT, 1, 0 },
	{ "quint8", C_U8, PT_EK_UINT, 1, 0 },
	{ "qint32", C_I32, PT_EK_INT, 1, 0 },
	{ "quint4x2", C_U4X2, PT_EK_UINT, 2, 0 },
	{ "quint2x4", C_U2X4, PT_EK_UINT, 4, 0 },
	{ "bits8", C_U8, PT_EK_UINT, 1, 0 },
	{ "bits16", C_U16, PT_EK_UINT, 1, 0 },
	{ "bits4x2", C_U4X2, PT_EK_UINT, 2, 0 },
	{ "bits2x4", C_U2X4, PT_EK_UINT, 4, 0 },
	{ "bits1x8", C_U1X8, PT_EK_UINT, 8, 0 },
};

int pt_elem_init(struct pt_elem *e, const struct pt_tinfo *ti)
{
	size_t i;

	pthread_once(&tab_once, build_tables);
	for (i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
		if (strcmp(codes[i].name, ti->dtype) != 0)
			continue;
		e->dtype = codes[i].name;
		e->kind = codes[i].kind;
		e->size = ti->itemsize;
		e->per = codes[i].per;
		e->swap = ti->byteorder == '>' && ti->itemsize > 1;
		e->quantized = ti->dtype[0] == 'q';
		e->code = codes[i].code;
		e->sub = codes[i].f8;
		return 0;
	}
	return -ENOTSUP;
}

/* Load an @n-byte little- or big-endian unsigned integer. */
static inline uint64_t load(const uint8_t *p, unsigned n, bool swap)
{
	uint64_t v = 0;
	unsigned i;

	if (swap)
		for (i = 0; i < n; i++)
			v = v << 8 | p[i];
	else
		for (i = n; i-- > 0;)
			v = v << 8 | p[i];
	return v;
}

static inline double f32_of(uint32_t b)
{
	float f;

	memcpy(&f, &b, 4);
	return f;
}

static inline double f64_of(uint64_t b)
{
	double d;

	memcpy(&d, &b, 8);
	return d;
}

/* The common little-endian cases, one tight loop each. */
static bool decode_fast(int code, const uint8_t *s, size_t n, double *o)
{
	size_t i;

	switch (code) {
	case C_F32:
		for (i = 0; i < n; i++) {
			float f;
			memcpy(&f, s + 4 * i, 4);
			o[i] = f;
		}
		return true;
	case C_F64:
		memcpy(o, s, n * 8);
		return true;
	case C_BF16:
		for (i = 0; i < n; i++) {
			uint16_t h;
			memcpy(&h, s + 2 * i, 2);
			o[i] = f32_of((uint32_t)h << 16);
		}
		return true;
	case C_F16:
		for (i = 0; i < n; i++) {
			uint16_t h;
			memcpy(&h, s + 2 * i, 2);
			o[i] = f16_tab[h];
		}
		return true;
	case C_U8:
		for (i = 0; i < n; i++)
			o[i] = s[i];
		return true;
	case C_I8:
		for (i = 0; i < n; i++)
			o[i] = (int8_t)s[i];
		return true;
	}
	return false;
}

static double one(int code, const uint8_t *p, unsigned size, bool swap)
{
	uint64_t v = load(p, size, swap);

	switch (code) {
	case C_F32: return f32_of((uint32_t)v);
	case C_F64: return f64_of(v);
	case C_F16: return f16_tab[v & 0xffff];
	case C_BF16: return f32_of((uint32_t)v << 16);
	case C_I8: return (int8_t)v;
	case C_I16: return (int16_t)v;
	case C_I32: return (int32_t)v;
	case C_I64: return (double)(int64_t)v;
	case C_BOOL: return v != 0;
	default: return (double)v;    /* unsigned */
	}
}

void pt_elem_decode(const struct pt_elem *e, const uint8_t *src, size_t n,
		    double *out)
{
	size_t i;
	unsigned k;

	if (!e->swap && decode_fast(e->code, src, n, out))
		return;
	if (e->code == C_F8) {
		const double *tab = f8_tab[e->sub];
		for (i = 0; i < n; i++)
			out[i] = tab[src[i]];
		return;
	}
	switch (e->code) {
	case C_F4X2:
		for (i = 0; i < n; i++) {
			out[2 * i] = f4_tab[src[i] & 15];
			out[2 * i + 1] = f4_tab[src[i] >> 4];
		}
		return;
	case C_U4X2: case C_U2X4: case C_U1X8: {
		unsigned bits = 8 / e->per;
		for (i = 0; i < n; i++)
			for (k = 0; k < e->per; k++)
				out[i * e->per + k] = (src[i] >> (k * bits)) & ((1u << bits) - 1);
		return;
	}
	case C_C32: case C_C64: case C_C128: {
		unsigned h = e->size / 2;
		int c = e->code == C_C32 ? C_F16 : e->code == C_C64 ? C_F32 : C_F64;
		for (i = 0; i < 2 * n; i++)
			out[i] = one(c, src + i * h, h, e->swap);
		return;
	}
	}
	for (i = 0; i < n; i++)
		out[i] = one(e->code, src + i * e->size, e->size, e->swap);
}

bool pt_elem_int64(const struct pt_elem *e, const uint8_t *src,
		   int64_t *s, uint64_t *u)
{
	uint64_t v = load(src, 8, e->swap);

	if (e->code == C_U64) {
		*u = v;
		return true;
	}
	*s = (int64_t)v;
	return false;
}
