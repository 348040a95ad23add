/* SPDX-License-Identifier: MIT */
/*
 * repr.h -- Python-compatible text of decoded values (decode/repr.c).
 * Every function appends to @out and cannot fail (a pt_buf remembers
 * running out of memory itself, see base/buf.h).
 */
#ifndef PTFS_CORE_REPR_H
#define PTFS_CORE_REPR_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

/* Append Python's repr() of @x ("0.1", "1e-05", "inf", "-0.0"). */
void pt_repr_float(struct pt_buf *out, double x);

/* Append the decimal digits of a little-endian two's complement integer
 * of @n bytes (pickle LONG1/LONG4); "0" when @n is 0. */
void pt_bigint_decimal(struct pt_buf *out, const uint8_t *p, size_t n);

/* Append Python's repr() of a str (@p UTF-8) or of bytes (b'...'): quotes
 * chosen as Python does, backslash escapes for quotes, backslash and
 * control bytes (bytes: every byte outside 0x20..0x7e). */
void pt_repr_str(struct pt_buf *out, const uint8_t *p, size_t n);
void pt_repr_bytes(struct pt_buf *out, const uint8_t *p, size_t n);

#endif /* PTFS_CORE_REPR_H */
