/* SPDX-License-Identifier: MIT */
/*
 * repr.c -- Python-compatible text of decoded values: repr() of floats,
 * str and bytes, and the decimal digits of ints of any size.  Used by the
 * torch values (complex numbers), the names of the tree (dict keys) and
 * its scalar files.
 */
#include "decode/repr.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
/*
 * Python's repr of a float: the shortest digit string that reads back as the
 * same double, printed in fixed notation when the decimal exponent is in
 * [-4, 16), else as d.ddde±XX (float_repr_style "short", format code 'r').
 * glibc's printf rounds exactly, so the first precision whose output
 * round-trips gives the shortest digits.
 */
void pt_repr_float(struct pt_buf *out, double x)
{
	char tmp[40], digits[24];
	int prec, exp10 = 0, nd = 0, decpt, i;
	const char *e;

	if (isnan(x)) {
		pt_buf_puts(out, "nan");
		return;
	}
	if (isinf(x)) {
		pt_buf_puts(out, x < 0 ? "-inf" : "inf");
		return;
	}
	if (x == 0) {
		pt_buf_puts(out, signbit(x) ? "-0.0" : "0.0");
		return;
	}
	for (prec = 1; prec <= 17; prec++) {
		snprintf(tmp, sizeof(tmp), "%.*e", prec - 1, x);
		if (strtod(tmp, NULL) == x)
			break;
	}
	/* tmp is [-]d[.ddd]e[+-]XX */
	for (i = (tmp[0] == '-'); tmp[i] && tmp[i] != 'e'; i++)
		if (tmp[i] != '.')
			digits[nd++] = tmp[i];
	while (nd > 1 && digits[nd - 1] == '0')
		nd--;
	digits[nd] = '\0';
	e = strchr(tmp, 'e');
	if (e)
		exp10 = atoi(e + 1); /* our own snprintf output, not input */
	decpt = exp10 + 1;
	if (x < 0)
		pt_buf_putc(out, '-');
	if (decpt > -4 && decpt <= 16) {
		if (decpt <= 0) {
			pt_buf_puts(out, "0.");
			for (i = 0; i < -decpt; i++)
				pt_buf_putc(out, '0');
			pt_buf_puts(out, digits);
		} else if (nd <= decpt) {
			pt_buf_puts(out, digits);
			for (i = nd; i < decpt; i++)
				pt_buf_putc(out, '0');
			pt_buf_puts(out, ".0");
		} else {
			pt_buf_add(out, digits, (size_t)decpt);
			pt_buf_putc(out, '.');
			pt_buf_puts(out, digits + decpt);
		}
		return;
	}
	pt_buf_putc(out, digits[0]);
	if (nd > 1) {
		pt_buf_putc(out, '.');
		pt_buf_puts(out, digits + 1);
	}
	pt_buf_printf(out, "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10));
}

void pt_bigint_decimal(struct pt_buf *out, const uint8_t *p, size_t n)
{
	uint32_t *limbs;
	char *digits;
	size_t nl, i, nd = 0;
	int neg;

	if (n == 0) {
		pt_buf_putc(out, '0');
		return;
	}
	neg = (p[n - 1] & 0x80) != 0;
	nl = (n + 3) / 4;
	limbs = calloc(nl, sizeof(*limbs));
	digits = malloc(n * 3 + 2);
	if (!limbs || !digits) {
		out->oom = true;
		goto out;
	}
	/* magnitude, as little-endian 32-bit limbs */
	for (i = 0; i < n; i++) {
		uint8_t b = neg ? (uint8_t)~p[i] : p[i];
		limbs[i / 4] |= (uint32_t)b << (8 * (i % 4));
	}
	if (neg) { /* two's complement: ~x + 1 */
		for (i = 0; i < nl; i++)
			if (++limbs[i] != 0)
				break;
	}
	for (;;) {
		uint64_t rem = 0;
		int zero = 1;

		for (i = nl; i-- > 0;) {
			uint64_t cur = rem << 32 | limbs[i];
			limbs[i] = (uint32_t)(cur / 1000000000u);
			rem = cur % 1000000000u;
			if (limbs[i])
				zero = 0;
		}
		for (i = 0; i < 9; i++) {
			digits[nd++] = (char)('0' + rem % 10);
			rem /= 10;
			if (zero && rem == 0)
				break;
		}
		if (zero)
			break;
	}
	while (nd > 1 && digits[nd - 1] == '0')
		nd--;
	if (neg)
		pt_buf_putc(out, '-');
	while (nd > 0)
		pt_buf_putc(out, digits[--nd]);
out:
	free(limbs);
	free(digits);
}

static char pick_quote(const uint8_t *p, size_t n)
{
	int sq = memchr(p, '\'', n) != NULL;
	int dq = memchr(p, '"', n) != NULL;

	return (sq && !dq) ? '"' : '\'';
}

static void repr_body(struct pt_buf *out, const uint8_t *p, size_t n,
		      char q, int is_bytes)
{
	size_t i;

	for (i = 0; i < n; i++) {
		uint8_t c = p[i];

		if (c == '\\' || c == (uint8_t)q) {
			pt_buf_putc(out, '\\');
			pt_buf_putc(out, (char)c);
		} else if (c == '\n') {
			pt_buf_puts(out, "\\n");
		} else if (c == '\r') {
			pt_buf_puts(out, "\\r");
		} else if (c == '\t') {
			pt_buf_puts(out, "\\t");
		} else if (c < 0x20 || c == 0x7f || (is_bytes && c >= 0x80)) {
			pt_buf_printf(out, "\\x%02x", c);
		} else if (!is_bytes && c == 0xc2 && i + 1 < n &&
			   p[i + 1] >= 0x80 && p[i + 1] <= 0xa0) {
			/* C1 controls and NBSP are not printable in Python */
			pt_buf_printf(out, "\\x%02x", p[i + 1]);
			i++;
		} else {
			pt_buf_putc(out, (char)c);
		}
	}
}

void pt_repr_str(struct pt_buf *out, const uint8_t *p, size_t n)
{
	char q = pick_quote(p, n);

	pt_buf_putc(out, q);
	repr_body(out, p, n, q, 0);
	pt_buf_putc(out, q);
}

void pt_repr_bytes(struct pt_buf *out, const uint8_t *p, size_t n)
{
	char q = pick_quote(p, n);

	pt_buf_putc(out, 'b');
	pt_buf_putc(out, q);
	repr_body(out, p, n, q, 1);
	pt_buf_putc(out, q);
}
