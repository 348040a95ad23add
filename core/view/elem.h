/* SPDX-License-Identifier: MIT */
/*
 * elem.h -- decoding tensor elements of every dtype ptfs knows into
 * doubles, exactly: float16, bfloat16, the float8 variants (e4m3fn, e5m2,
 * e4m3fnuz, e5m2fnuz, e8m0fnu), float4_e2m1fn_x2, integers, bool,
 * complex (two doubles per element), quantized integers (the stored
 * integers: scale and zero point are not part of the bytes), big-endian
 * numpy arrays.  Every value of these types is exactly representable as
 * a double except int64/uint64 beyond 2^53 (see pt_elem_int64()).
 */
#ifndef PTFS_CORE_VIEW_ELEM_H
#define PTFS_CORE_VIEW_ELEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ckpt/ckpt.h"

enum pt_ekind {
	PT_EK_FLOAT,    /* real floating point (NaN/Inf possible) */
	PT_EK_INT,      /* signed integers, quantized qint8/qint32 */
	PT_EK_UINT,     /* unsigned integers, quint*, bits* */
	PT_EK_BOOL,     /* 0 or 1 */
	PT_EK_COMPLEX,  /* two floats per element: real, imaginary */
};

struct pt_elem {
	const char *dtype;      /* torch name */
	enum pt_ekind kind;
	unsigned size;          /* bytes per stored element */
	unsigned per;           /* values per element: 2 for complex and
				 * 4-bit packs, 4 for 2-bit packs, else 1 */
	bool swap;              /* big-endian bytes on this host */
	bool quantized;         /* quint8/qint8/qint32/quint4x2/quint2x4:
				 * values are the stored integers */
	int code, sub;          /* decoder (internal) */
};

/* Set @e up for the tensor @ti; -ENOTSUP (nothing decodable) otherwise. */
int pt_elem_init(struct pt_elem *e, const struct pt_tinfo *ti);

/* Decode @n stored elements at @src into @out (n * e->per doubles; for
 * complex: real, imaginary, real, ...). */
void pt_elem_decode(const struct pt_elem *e, const uint8_t *src, size_t n,
		    double *out);

/* The @i-th stored element of a 64-bit integer type as an exact integer:
 * int64 as-is, uint64 in *@u (true returned when @u was used). */
bool pt_elem_int64(const struct pt_elem *e, const uint8_t *src,
		   int64_t *s, uint64_t *u);

#endif /* PTFS_CORE_VIEW_ELEM_H */
