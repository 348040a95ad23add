/* SPDX-License-Identifier: MIT */
/*
 * text.h -- the one UTF-8 validator and the one latin-1 decoder of ptfs
 * (base/text.c).  Every module that checks, encodes or transcodes text
 * goes through these, so that they cannot drift apart.
 *
 * "Valid UTF-8" is RFC 3629's: no overlong forms (C0, C1, E0 80..9F,
 * F0 80..8F), no surrogates (ED A0..BF: U+D800..U+DFFF), nothing past
 * U+10FFFF (F4 90.., F5..FF), no stray continuation bytes.
 */
#ifndef PTFS_CORE_TEXT_H
#define PTFS_CORE_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Length (1..4) of the valid UTF-8 sequence starting at @p[0..@n), or 0
 * when it is not one.  @n must be at least 1. */
size_t pt_utf8_len(const uint8_t *p, size_t n);

/* Whether @p[0..@n) is valid UTF-8 as a whole. */
bool pt_utf8_valid(const uint8_t *p, size_t n);

/* The code point U+D800..U+DFFF that the three bytes at @p[0..@n) encode
 * the way Python's "surrogatepass" does (ED A0..BF 80..BF), or 0 when they
 * are not that. */
uint32_t pt_utf8_surrogate(const uint8_t *p, size_t n);

/* Write code point @cp (at most U+10FFFF; surrogates are written as three
 * bytes, "surrogatepass") at @o, which has room for 4 bytes; returns the
 * bytes written. */
size_t pt_utf8_put(uint8_t *o, uint32_t cp);

/* Python's str.encode('latin1') of UTF-8 text @p[0..@n): every code point
 * U+0000..U+00FF becomes the byte of that value, written at @out (room for
 * @n bytes), its length in *@out_len.  Only 00..7F and C2/C3 followed by a
 * continuation byte are accepted: anything else (a code point past U+00FF,
 * invalid UTF-8) is -EILSEQ, as Python raises UnicodeEncodeError. */
int pt_latin1_encode(const uint8_t *p, size_t n, uint8_t *out,
		     size_t *out_len);

#endif /* PTFS_CORE_TEXT_H */
