/* SPDX-License-Identifier: MIT */
/*
 * text.c -- UTF-8 validation and encoding, latin-1 transcoding (text.h).
 */
#include "base/text.h"

#include <errno.h>

size_t pt_utf8_len(const uint8_t *p, size_t n)
{
	uint8_t c = p[0];
	size_t k, i;
	uint32_t cp;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf) {
		k = 2;
		cp = c & 0x1f;
	} else if (c >= 0xe0 && c <= 0xef) {
		k = 3;
		cp = c & 0x0f;
	} else if (c >= 0xf0 && c <= 0xf4) {
		k = 4;
		cp = c & 0x07;
	} else {
		return 0;
	}
	if (n < k)
		return 0;
	for (i = 1; i < k; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (p[i] & 0x3fu);
	}
	if ((k == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
	    (k == 4 && (cp < 0x10000 || cp > 0x10ffff)))
		return 0;
	return k;
}

bool pt_utf8_valid(const uint8_t *p, size_t n)
{
	size_t i = 0, k;

	while (i < n) {
		if (p[i] < 0x80) {
			i++;
			continue;
		}
		k = pt_utf8_len(p + i, n - i);
		if (!k)
			return false;
		i += k;
	}
	return true;
}

uint32_t pt_utf8_surrogate(const uint8_t *p, size_t n)
{
	if (n < 3 || p[0] != 0xed || p[1] < 0xa0 || p[1] > 0xbf ||
	    (p[2] & 0xc0) != 0x80)
		return 0;
	return 0xd000u | (uint32_t)(p[1] & 0x3f) << 6 | (p[2] & 0x3fu);
}

size_t pt_utf8_put(uint8_t *o, uint32_t cp)
{
	if (cp < 0x80) {
		o[0] = (uint8_t)cp;
		return 1;
	}
	if (cp < 0x800) {
		o[0] = (uint8_t)(0xc0 | cp >> 6);
		o[1] = (uint8_t)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		o[0] = (uint8_t)(0xe0 | cp >> 12);
		o[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
		o[2] = (uint8_t)(0x80 | (cp & 0x3f));
		return 3;
	}
	o[0] = (uint8_t)(0xf0 | cp >> 18);
	o[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3f));
	o[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
	o[3] = (uint8_t)(0x80 | (cp & 0x3f));
	return 4;
}

int pt_latin1_encode(const uint8_t *p, size_t n, uint8_t *out,
		     size_t *out_len)
{
	size_t i = 0, k = 0;

	while (i < n) {
		uint8_t c = p[i];

		if (c < 0x80) {
			out[k++] = c;
			i++;
		} else if ((c == 0xc2 || c == 0xc3) && i + 1 < n &&
			   (p[i + 1] & 0xc0) == 0x80) {
			out[k++] = (uint8_t)((c & 0x03) << 6 | (p[i + 1] & 0x3f));
			i += 2;
		} else {
			return -EILSEQ;
		}
	}
	*out_len = k;
	return 0;
}
