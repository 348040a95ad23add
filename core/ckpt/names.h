/* SPDX-License-Identifier: MIT */
/*
 * names.h -- how values are written as text: LAYOUT.md's "Names" rules and
 * the scalar file contents (Python's repr of floats, ints of any size).
 *
 * Every name that reaches the mounted tree goes through pt_name_encode(),
 * so that no key can produce '/', NUL, "." or "..", or an over-long name.
 */
#ifndef PTFS_CORE_NAMES_H
#define PTFS_CORE_NAMES_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "decode/pickle.h"

/* Longest encoded name before rule 4 cuts it, and the kept head. */
#define PT_NAME_MAX 240
#define PT_NAME_HEAD 230

/* Append Python's repr() of @x ("0.1", "1e-05", "inf", "-0.0"). */
void pt_repr_float(struct pt_buf *out, double x);

/* Append the decimal digits of a little-endian two's complement integer. */
void pt_bigint_decimal(struct pt_buf *out, const uint8_t *p, size_t n);

/* Append Python's repr() of a str (@p UTF-8) or of bytes (b'...'). */
void pt_repr_str(struct pt_buf *out, const uint8_t *p, size_t n);
void pt_repr_bytes(struct pt_buf *out, const uint8_t *p, size_t n);

/*
 * Rule 1: the raw text of a dict key (str as it is, int in decimal, True,
 * False, None, floats as repr, bytes and tuples as repr, other types as
 * "<module.qualname>").  @cls_name gives the class of values that are not
 * plain (may return NULL for "object").
 */
void pt_key_text(struct pt_buf *out, const struct pt_value *key);

/*
 * Rules 2-4: escape '/', '%', NUL as %2F %25 %00; "" -> "%", "." -> "%2E",
 * ".." -> "%2E%2E"; over PT_NAME_MAX bytes -> first PT_NAME_HEAD bytes (cut
 * back to a UTF-8 boundary) + "~" + CRC-32 of the whole encoded name (8 hex
 * digits).  Appends to @out.
 */
void pt_name_encode(struct pt_buf *out, const uint8_t *raw, size_t n);

#endif /* PTFS_CORE_NAMES_H */
