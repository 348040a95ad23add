/* SPDX-License-Identifier: MIT */
/* buf.c -- growable byte buffer; see buf.h. */
#include "base/buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  /* <linux/mman.h>, Linux 5.14 */
#endif

void pt_populate(void *p, size_t n)
{
	static uintptr_t page_size;     /* threads may set it at once */
	const uintptr_t huge = (uintptr_t)2 << 20;
	uintptr_t lo, hi, page;

	if (n < ((size_t)64 << 10))
		return;
	page = __atomic_load_n(&page_size, __ATOMIC_RELAXED);
	if (!page) {
		long ps = sysconf(_SC_PAGESIZE);

		page = ps > 0 ? (uintptr_t)ps : 4096;
		__atomic_store_n(&page_size, page, __ATOMIC_RELAXED);
	}
	/* a big one in huge pages where it spans whole ones: they are made
	 * resident anyway, and a guest pays per page it touches first */
	lo = ((uintptr_t)p + huge - 1) & ~(huge - 1);
	hi = ((uintptr_t)p + n) & ~(huge - 1);
	if (n >= ((size_t)4 << 20) && hi > lo)
		(void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
	lo = ((uintptr_t)p + page - 1) & ~(page - 1);
	hi = ((uintptr_t)p + n) & ~(page - 1);
	if (hi > lo)
		(void)madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE);
}

void pt_buf_init(struct pt_buf *b)
{
	memset(b, 0, sizeof(*b));
}

void pt_buf_free(struct pt_buf *b)
{
	free(b->p);
	pt_buf_init(b);
}

/* Reallocate to @want bytes (more than cap); false and oom on failure. */
static bool buf_grow_to(struct pt_buf *b, size_t want)
{
	char *q = realloc(b->p, want);

	if (!q) {
		b->oom = true;
		return false;
	}
	/* a big text (tree.json) fills what it grows into */
	pt_populate(q + b->cap, want - b->cap);
	b->p = q;
	b->cap = want;
	return true;
}

/* Room for @n more bytes and the NUL, by doubling. */
static bool pt_buf_reserve(struct pt_buf *b, size_t n)
{
	size_t want;

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
	return buf_grow_to(b, want);
}

/*
 * The room asked for and no more: doubling from 256 bytes would round an
 * estimate of 9 MB (tree.json of 20,000 tensors) up to 16 MiB, all of it
 * faulted in by pt_populate() and 7 MiB never written.
 */
void pt_buf_expect(struct pt_buf *b, size_t n)
{
	if (b->oom || n < b->cap - b->len)
		return;
	if (n > SIZE_MAX / 2 - b->len) {
		b->oom = true;
		return;
	}
	(void)buf_grow_to(b, b->len + n + 1);
}

void pt__buf_add_grow(struct pt_buf *b, const void *p, size_t n)
{
	if (!pt_buf_reserve(b, n))
		return;
	if (n)
		memcpy(b->p + b->len, p, n);
	b->len += n;
	b->p[b->len] = '\0';
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

/* "00" "01" ... "99": two digits per division */
static const char digit_pairs[] =
	"00010203040506070809101112131415161718192021222324252627282930313233"
	"34353637383940414243444546474849505152535455565758596061626364656667"
	"6869707172737475767778798081828384858687888990919293949596979899";

void pt_buf_put_u64(struct pt_buf *b, uint64_t v)
{
	char tmp[20];
	char *end = tmp + sizeof(tmp), *s = end;

	if (v < 10) {           /* most dims, strides and offsets */
		pt_buf_putc(b, (char)('0' + v));
		return;
	}
	while (v >= 100) {
		s -= 2;
		memcpy(s, digit_pairs + 2 * (v % 100), 2);
		v /= 100;
	}
	if (v >= 10) {
		s -= 2;
		memcpy(s, digit_pairs + 2 * v, 2);
	} else {
		*--s = (char)('0' + v);
	}
	pt_buf_add(b, s, (size_t)(end - s));
}

void pt_buf_put_i64(struct pt_buf *b, int64_t v)
{
	if (v < 0) {
		pt_buf_putc(b, '-');
		/* -(INT64_MIN) overflows: negate in unsigned arithmetic */
		pt_buf_put_u64(b, 0 - (uint64_t)v);
		return;
	}
	pt_buf_put_u64(b, (uint64_t)v);
}

char *pt_buf_take(struct pt_buf *b, size_t *len)
{
	char *p = b->p;

	if (len)
		*len = b->len;
	if (!p) {
		p = calloc(1, 1);
	} else if (b->cap - b->len > ((size_t)64 << 10)) {
		/* a text kept for long (tree.json) gives back the tail an
		 * estimate or a doubling left unused */
		char *q = realloc(p, b->len + 1);

		if (q)
			p = q;
	}
	pt_buf_init(b);
	return p;
}

bool pt_grow(void **arr, size_t *cap, size_t n, size_t elem)
{
	size_t nc;
	void *q;

	if (n < *cap)
		return true;
	nc = *cap ? *cap * 2 : 16;
	if (nc < *cap || nc > SIZE_MAX / elem)
		return false;
	q = realloc(*arr, nc * elem);
	if (!q)
		return false;
	*arr = q;
	*cap = nc;
	return true;
}
