/* SPDX-License-Identifier: MIT */
/* buf.c -- growable byte buffer; see buf.h. */
#include "base/buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void pt_buf_init(struct pt_buf *b)
{
	memset(b, 0, sizeof(*b));
}

void pt_buf_free(struct pt_buf *b)
{
	free(b->p);
	pt_buf_init(b);
}

static bool pt_buf_reserve(struct pt_buf *b, size_t n)
{
	size_t want;
	char *q;

	if (b->oom)
		return false;
	if (n < b->cap - b->len)
		return true;
	if (n > SIZE_MAX / 2 - b->len) {
		b->oom = true;
		return false;
	}
	want = b->cap ? b->cap : 256;
	while (want - b->len <= n)
		want *= 2;
	q = realloc(b->p, want);
	if (!q) {
		b->oom = true;
		return false;
	}
	b->p = q;
	b->cap = want;
	return true;
}

void pt_buf_add(struct pt_buf *b, const void *p, size_t n)
{
	if (!pt_buf_reserve(b, n))
		return;
	if (n)
		memcpy(b->p + b->len, p, n);
	b->len += n;
	b->p[b->len] = '\0';
}

void pt_buf_puts(struct pt_buf *b, const char *s)
{
	pt_buf_add(b, s, strlen(s));
}

void pt_buf_putc(struct pt_buf *b, char c)
{
	pt_buf_add(b, &c, 1);
}

void pt_buf_printf(struct pt_buf *b, const char *fmt, ...)
{
	va_list ap;
	size_t room;
	int n;

	if (b->oom)
		return;
	/* format straight into the free space; measure first only when it
	 * does not fit (text here is short: one pass almost always) */
	room = b->cap > b->len ? b->cap - b->len : 0;
	va_start(ap, fmt);
	n = vsnprintf(room ? b->p + b->len : NULL, room, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n < room) {
		b->len += (size_t)n;
		return;
	}
	if (!pt_buf_reserve(b, (size_t)n))
		return;
	va_start(ap, fmt);
	vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

/* Length of the valid UTF-8 sequence at p (1..4), or 0 if invalid. */
static size_t utf8_len(const uint8_t *p, size_t n)
{
	uint32_t c;
	size_t k, i;

	if (p[0] < 0x80)
		return 1;
	if (p[0] >= 0xc2 && p[0] <= 0xdf)
		k = 2;
	else if (p[0] >= 0xe0 && p[0] <= 0xef)
		k = 3;
	else if (p[0] >= 0xf0 && p[0] <= 0xf4)
		k = 4;
	else
		return 0;
	if (n < k)
		return 0;
	c = p[0] & (0x7f >> k);
	for (i = 1; i < k; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		c = c << 6 | (p[i] & 0x3f);
	}
	if ((k == 3 && c < 0x800) || (k == 4 && (c < 0x10000 || c > 0x10ffff)))
		return 0;
	return k;
}

void pt_buf_json_str(struct pt_buf *b, const uint8_t *p, size_t n)
{
	size_t i = 0;

	while (i < n) {
		uint8_t c = p[i];
		size_t k;

		/* a run of plain ASCII in one piece */
		for (k = i; k < n && p[k] >= 0x20 && p[k] < 0x80 && p[k] != '"' &&
			    p[k] != '\\'; k++)
			;
		if (k > i) {
			pt_buf_add(b, p + i, k - i);
			i = k;
			continue;
		}
		if (c == '"' || c == '\\') {
			pt_buf_putc(b, '\\');
			pt_buf_putc(b, (char)c);
			i++;
			continue;
		}
		if (c < 0x20) {
			if (c == '\n')
				pt_buf_puts(b, "\\n");
			else if (c == '\t')
				pt_buf_puts(b, "\\t");
			else
				pt_buf_printf(b, "\\u%04x", c);
			i++;
			continue;
		}
		k = utf8_len(p + i, n - i);
		if (k == 0) {
			pt_buf_printf(b, "\\u%04x", c);
			i++;
			continue;
		}
		pt_buf_add(b, p + i, k);
		i += k;
	}
}

char *pt_buf_take(struct pt_buf *b, size_t *len)
{
	char *p = b->p;

	if (len)
		*len = b->len;
	if (!p)
		p = calloc(1, 1);
	pt_buf_init(b);
	return p;
}
