/* SPDX-License-Identifier: MIT */
/*
 * pb.c -- the protobuf wire format, read in place (pb.h; docs/FORMATS.md,
 * ONNX).
 */
#include "decode/pb.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define PB_WIN (64u << 10)      /* bytes of the source kept in memory */
#define PB_JUMP (4u << 10)      /* read after a jump (a skipped payload) */
#define PB_VARINT_MAX 10        /* bytes of a 64-bit varint */

int pt_pb_src_init(struct pt_pb_src *s, const struct pt_source *src,
		   const char *what, unsigned max_depth, struct pt_error *err)
{
	memset(s, 0, sizeof(*s));
	s->src = src;
	s->what = what;
	s->err = err;
	s->max_depth = max_depth;
	s->win = malloc(PB_WIN);
	if (!s->win)
		return pt_fail(err, -ENOMEM, "out of memory");
	return 0;
}

void pt_pb_src_free(struct pt_pb_src *s)
{
	free(s->win);
	s->win = NULL;
}

const char *pt_pb_name(const struct pt_pb_src *s)
{
	return s->what;
}

/* At least @want bytes at @off in the window (fewer only where the source
 * ends): a pointer to them and in *@have how many there are. */
static int pb_window(struct pt_pb_src *s, uint64_t off, size_t want,
		     const uint8_t **p, size_t *have)
{
	uint64_t left;
	size_t n;
	int rc;

	if (off >= s->at && off - s->at + want <= s->len) {
		*p = s->win + (off - s->at);
		*have = s->len - (size_t)(off - s->at);
		return 0;
	}
	/* reading on from the window: a whole window; after a jump over a
	 * payload (a tensor's bytes) the next field is most often a few
	 * bytes of header before the next jump: a page */
	n = off >= s->at && off <= s->at + s->len ? PB_WIN : PB_JUMP;
	if (n < want)
		n = want;
	left = off < s->src->size ? s->src->size - off : 0;
	if (n > left)
		n = (size_t)left;
	rc = n ? pt_source_read(s->src, s->win, n, off, s->err) : 0;
	if (rc)
		return rc;
	s->at = off;
	s->len = n;
	*p = s->win;
	*have = n;
	return 0;
}

int pt_pb_read(struct pt_pb_src *s, void *buf, size_t n, uint64_t off)
{
	if (off >= s->at && off - s->at <= s->len && n <= s->len - (off - s->at)) {
		memcpy(buf, s->win + (off - s->at), n);
		return 0;
	}
	return pt_source_read(s->src, buf, n, off, s->err);
}

int pt_pb_top(struct pt_pb_src *s, uint64_t off, uint64_t len,
	      struct pt_pb *out)
{
	if (off > s->src->size || len > s->src->size - off)
		return pt_fail(s->err, -EBADMSG,
			       "%s: message at byte %" PRIu64 " of %" PRIu64 " bytes runs past the end of the file",
			       pt_pb_name(s), off, len);
	out->s = s;
	out->pos = off;
	out->end = off + len;
	out->depth = 0;
	return 0;
}

/* A varint at m->pos, which must end inside @m. */
static int pb_varint_at(struct pt_pb *m, uint64_t *v, const char *what)
{
	const uint8_t *p;
	size_t have, i;
	uint64_t x = 0, left = m->end - m->pos;
	int rc;

	rc = pb_window(m->s, m->pos, PB_VARINT_MAX, &p, &have);
	if (rc)
		return rc;
	if (have > left)
		have = (size_t)left;
	for (i = 0; i < have && i < PB_VARINT_MAX; i++) {
		x |= (uint64_t)(p[i] & 0x7f) << (7 * i);
		if (p[i] & 0x80)
			continue;
		if (i == PB_VARINT_MAX - 1 && p[i] > 1)
			break;  /* bits past the 64th */
		*v = x;
		m->pos += i + 1;
		return 0;
	}
	if (i == PB_VARINT_MAX || i < have)
		return pt_fail(m->s->err, -EBADMSG,
			       "%s: %s at byte %" PRIu64 " is longer than 10 bytes or over 64 bits",
			       pt_pb_name(m->s), what, m->pos);
	return pt_fail(m->s->err, -EBADMSG,
		       "%s: %s at byte %" PRIu64 " runs past the end of its message (byte %" PRIu64 ")",
		       pt_pb_name(m->s), what, m->pos, m->end);
}

/* @n bytes of fixed value at m->pos, little-endian. */
static int pb_fixed(struct pt_pb *m, unsigned n, uint64_t *v)
{
	const uint8_t *p;
	size_t have;
	uint64_t x = 0;
	unsigned i;
	int rc;

	if (m->end - m->pos < n)
		return pt_fail(m->s->err, -EBADMSG,
			       "%s: a %u-byte value at byte %" PRIu64 " runs past the end of its message (byte %" PRIu64 ")",
			       pt_pb_name(m->s), n, m->pos, m->end);
	rc = pb_window(m->s, m->pos, n, &p, &have);
	if (rc)
		return rc;
	for (i = 0; i < n; i++)
		x |= (uint64_t)p[i] << (8 * i);
	*v = x;
	m->pos += n;
	return 0;
}

int pt_pb_next(struct pt_pb *m, struct pt_pb_field *f)
{
	uint64_t tag, at = m->pos;
	int rc;

	if (m->pos >= m->end)
		return 0;
	rc = pb_varint_at(m, &tag, "a field tag");
	if (rc)
		return rc;
	f->num = (uint32_t)(tag >> 3);
	f->wire = (uint8_t)(tag & 7);
	f->off = 0;
	if (tag >> 3 == 0 || tag >> 3 > 0x1fffffff)
		return pt_fail(m->s->err, -EBADMSG,
			       "%s: field number %" PRIu64 " at byte %" PRIu64 " is out of range",
			       pt_pb_name(m->s), tag >> 3, at);
	switch (f->wire) {
	case PT_PB_VARINT:
		rc = pb_varint_at(m, &f->v, "a varint");
		return rc ? rc : 1;
	case PT_PB_FIXED64:
		rc = pb_fixed(m, 8, &f->v);
		return rc ? rc : 1;
	case PT_PB_FIXED32:
		rc = pb_fixed(m, 4, &f->v);
		return rc ? rc : 1;
	case PT_PB_LEN:
		rc = pb_varint_at(m, &f->v, "a length");
		if (rc)
			return rc;
		if (f->v > m->end - m->pos)
			return pt_fail(m->s->err, -EBADMSG,
				       "%s: field %" PRIu32 " at byte %" PRIu64 " claims %" PRIu64 " bytes, past the end of its message (byte %" PRIu64 ")",
				       pt_pb_name(m->s), f->num, at, f->v, m->end);
		f->off = m->pos;
		m->pos += f->v;
		return 1;
	default:
		return pt_fail(m->s->err, -EBADMSG,
			       "%s: field %" PRIu32 " at byte %" PRIu64 " has wire type %u, which is %s",
			       pt_pb_name(m->s), f->num, at, f->wire,
			       f->wire == 3 || f->wire == 4 ?
			       "a group (not supported)" : "invalid");
	}
}

int pt_pb_sub(const struct pt_pb *m, const struct pt_pb_field *f,
	      struct pt_pb *out)
{
	if (f->wire != PT_PB_LEN)
		return pt_fail(m->s->err, -EBADMSG,
			       "%s: field %" PRIu32 " before byte %" PRIu64 " should be a message, it has wire type %u",
			       pt_pb_name(m->s), f->num, m->pos, f->wire);
	if (m->depth >= m->s->max_depth)
		return pt_fail(m->s->err, -EFBIG,
			       "%s: messages nest more than %u deep at byte %" PRIu64,
			       pt_pb_name(m->s), m->s->max_depth, f->off);
	out->s = m->s;
	out->pos = f->off;
	out->end = f->off + f->v;
	out->depth = m->depth + 1;
	return 0;
}

int pt_pb_varint(struct pt_pb *m, uint64_t *v)
{
	int rc;

	if (m->pos >= m->end)
		return 0;
	rc = pb_varint_at(m, v, "a packed varint");
	return rc ? rc : 1;
}

int pt_pb_dup(struct pt_pb_src *s, const struct pt_pb_field *f, size_t cap,
	      const char *what, char **out)
{
	char *p;
	int rc;

	*out = NULL;
	if (f->wire != PT_PB_LEN)
		return pt_fail(s->err, -EBADMSG,
			       "%s: %s at byte %" PRIu64 " is not a string (wire type %u)",
			       pt_pb_name(s), what, f->off, f->wire);
	if (f->v > cap)
		return pt_fail(s->err, -EFBIG,
			       "%s: %s at byte %" PRIu64 " has %" PRIu64 " bytes, more than %zu",
			       pt_pb_name(s), what, f->off, f->v, cap);
	p = malloc((size_t)f->v + 1);
	if (!p)
		return pt_fail(s->err, -ENOMEM, "out of memory");
	rc = pt_pb_read(s, p, (size_t)f->v, f->off);
	if (rc) {
		free(p);
		return rc;
	}
	p[f->v] = '\0';
	*out = p;
	return 0;
}
