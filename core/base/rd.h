/* SPDX-License-Identifier: MIT */
/*
 * rd.h -- bounds-checked little-endian cursor and checked arithmetic.
 *
 * Every byte of a checkpoint is untrusted.  Parsers read through a cursor
 * {p, len, pos} that fails when fewer than n bytes remain, comparing lengths
 * (never forming a pointer past the end), and add or multiply sizes with the
 * overflow-checked helpers below.
 */
#ifndef PTFS_CORE_RD_H
#define PTFS_CORE_RD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct pt_rd {
	const uint8_t *p;       /* start of the range (borrowed) */
	size_t len;             /* bytes in the range */
	size_t pos;             /* next byte to read */
};

static inline struct pt_rd pt_rd_make(const void *p, size_t len)
{
	struct pt_rd r = { (const uint8_t *)p, len, 0 };
	return r;
}

static inline size_t pt_rd_left(const struct pt_rd *r)
{
	return r->len - r->pos;
}

static inline bool pt_rd_has(const struct pt_rd *r, size_t n)
{
	return r->len - r->pos >= n;
}

/* Return a pointer to the next @n bytes and advance, or NULL if short. */
static inline const uint8_t *pt_rd_take(struct pt_rd *r, size_t n)
{
	const uint8_t *q;

	if (!pt_rd_has(r, n))
		return NULL;
	q = r->p + r->pos;
	r->pos += n;
	return q;
}

static inline uint16_t pt_le16(const uint8_t *q)
{
	return (uint16_t)(q[0] | (unsigned)q[1] << 8);
}

static inline uint32_t pt_le32(const uint8_t *q)
{
	return (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 |
	       (uint32_t)q[3] << 24;
}

static inline uint64_t pt_le64(const uint8_t *q)
{
	return (uint64_t)pt_le32(q) | (uint64_t)pt_le32(q + 4) << 32;
}

static inline void pt_put16(uint8_t *q, uint16_t v)
{
	q[0] = (uint8_t)v;
	q[1] = (uint8_t)(v >> 8);
}

static inline void pt_put32(uint8_t *q, uint32_t v)
{
	pt_put16(q, (uint16_t)v);
	pt_put16(q + 2, (uint16_t)(v >> 16));
}

static inline void pt_put64(uint8_t *q, uint64_t v)
{
	pt_put32(q, (uint32_t)v);
	pt_put32(q + 4, (uint32_t)(v >> 32));
}

static inline bool pt_rd_u8(struct pt_rd *r, uint8_t *v)
{
	const uint8_t *q = pt_rd_take(r, 1);
	if (!q)
		return false;
	*v = q[0];
	return true;
}

static inline bool pt_rd_u16(struct pt_rd *r, uint16_t *v)
{
	const uint8_t *q = pt_rd_take(r, 2);
	if (!q)
		return false;
	*v = pt_le16(q);
	return true;
}

static inline bool pt_rd_u32(struct pt_rd *r, uint32_t *v)
{
	const uint8_t *q = pt_rd_take(r, 4);
	if (!q)
		return false;
	*v = pt_le32(q);
	return true;
}

static inline bool pt_rd_u64(struct pt_rd *r, uint64_t *v)
{
	const uint8_t *q = pt_rd_take(r, 8);
	if (!q)
		return false;
	*v = pt_le64(q);
	return true;
}

/* Checked arithmetic: return false (and leave *out unspecified) on overflow. */
static inline bool pt_add_u64(uint64_t a, uint64_t b, uint64_t *out)
{
	return !__builtin_add_overflow(a, b, out);
}

static inline bool pt_mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
	return !__builtin_mul_overflow(a, b, out);
}

static inline bool pt_add_i64(int64_t a, int64_t b, int64_t *out)
{
	return !__builtin_add_overflow(a, b, out);
}

static inline bool pt_mul_i64(int64_t a, int64_t b, int64_t *out)
{
	return !__builtin_mul_overflow(a, b, out);
}

#endif /* PTFS_CORE_RD_H */
