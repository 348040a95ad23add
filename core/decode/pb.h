/* SPDX-License-Identifier: MIT */
/*
 * pb.h -- the protobuf wire format, read in place (docs/FORMATS.md, ONNX).
 *
 * Only the wire format: a message is a run of fields, each a tag (field
 * number << 3 | wire type) and a value: a varint (0), eight bytes (1), a
 * length and that many bytes (2) or four bytes (5).  No schema: the caller
 * knows what field numbers mean and asks for a sub-message when it wants
 * to look inside a length-delimited field.
 *
 * Messages are byte ranges of a source (io/source.h), never loaded whole:
 * the reader keeps one window of the source in memory, and a field's
 * payload is known by its offset in the file, so a tensor's bytes can be
 * served from where they lie in a model of several gigabytes.  Every
 * length is checked against the range of the message that holds it (so
 * against the file), a varint is at most ten bytes, and sub-messages nest
 * at most max_depth deep: a caller that recurses once per level stops
 * there with -EFBIG.  Errors are one line naming the source and the
 * offset.
 */
#ifndef PTFS_CORE_PB_H
#define PTFS_CORE_PB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "io/source.h"

enum pt_pb_wire {
	PT_PB_VARINT = 0,
	PT_PB_FIXED64 = 1,
	PT_PB_LEN = 2,
	PT_PB_FIXED32 = 5,
};

/* The reader: a source and one window of it.  Not thread-safe. */
struct pt_pb_src {
	const struct pt_source *src;
	const char *what;               /* for messages: "ONNX model" */
	struct pt_error *err;
	uint8_t *win;                   /* the window's bytes */
	uint64_t at;                    /* its offset in the source */
	size_t len;                     /* bytes in it */
	unsigned max_depth;             /* sub-messages below the top */
};

/* A message being read: [pos, end) of the source, @depth levels down. */
struct pt_pb {
	struct pt_pb_src *s;
	uint64_t pos;
	uint64_t end;
	unsigned depth;
};

/* One field. */
struct pt_pb_field {
	uint32_t num;                   /* field number, >= 1 */
	uint8_t wire;                   /* enum pt_pb_wire */
	uint64_t v;                     /* varint or fixed value; PT_PB_LEN:
					 * the payload's length */
	uint64_t off;                   /* PT_PB_LEN: the payload's offset
					 * in the source */
};

/* Start reading @src (its messages nest at most @max_depth deep), with
 * errors in @err that begin with @what (borrowed).  0 or -ENOMEM. */
int pt_pb_src_init(struct pt_pb_src *s, const struct pt_source *src,
		   const char *what, unsigned max_depth, struct pt_error *err);
void pt_pb_src_free(struct pt_pb_src *s);

/* The message [@off, @off + @len) at depth 0 (the whole file: 0, size).
 * -EBADMSG when it does not lie inside the source. */
int pt_pb_top(struct pt_pb_src *s, uint64_t off, uint64_t len,
	      struct pt_pb *out);

/* The next field of @m into *@f: 1, 0 at the end of @m, or -errno (a tag
 * or varint cut short or over ten bytes, field number 0, wire types 3, 4,
 * 6, 7, a length past the end of @m). */
int pt_pb_next(struct pt_pb *m, struct pt_pb_field *f);

/* The payload of length-delimited field @f of @m as a message one level
 * deeper: 0, or -EFBIG past max_depth, -EBADMSG when @f is no PT_PB_LEN. */
int pt_pb_sub(const struct pt_pb *m, const struct pt_pb_field *f,
	      struct pt_pb *out);

/* The next varint of @m, for packed repeated varints (a sub-message of
 * them): 1, 0 at the end, -errno. */
int pt_pb_varint(struct pt_pb *m, uint64_t *v);

/* Copy @n bytes at @off of the source into @buf (through the window when
 * they are in it). */
int pt_pb_read(struct pt_pb_src *s, void *buf, size_t n, uint64_t off);

/* A length-delimited payload as a NUL-terminated string in *@out
 * (malloc()ed): -EFBIG when longer than @cap. */
int pt_pb_dup(struct pt_pb_src *s, const struct pt_pb_field *f, size_t cap,
	      const char *what, char **out);

/* What the source is, for messages (@what of pt_pb_src_init()). */
const char *pt_pb_name(const struct pt_pb_src *s);

#endif /* PTFS_CORE_PB_H */
