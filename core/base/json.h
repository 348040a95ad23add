/* SPDX-License-Identifier: MIT */
/*
 * json.h -- the one JSON scanner and the one JSON emitter (base/json.c).
 */
#ifndef PTFS_CORE_JSON_H
#define PTFS_CORE_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/error.h"

/*
 * The scanner: strict JSON (RFC 8259) for the small documents some
 * formats carry (safetensors headers, sharded indexes, .pt2 and
 * TorchScript model descriptions).  It
 * reads one token at a time for a caller that knows the schema, never
 * recurses, and skips unknown values with a nesting cap.  Strings are
 * decoded (escapes, surrogate pairs; UTF-8 checked) into one buffer of the
 * text's size, so they stay valid until pt__js_free() or, after
 * pt__js_take() (ckpt_i.h's pt__js_keep()), as long as the buffer.  Every function returns 0 or
 * -EBADMSG with "@what: at byte N: problem" in @err.
 */
struct pt_js {
	const uint8_t *p;               /* the text (borrowed) */
	size_t len;
	size_t pos;                     /* next byte */
	uint8_t *sbuf;                  /* decoded strings */
	size_t sused;
	const char *what;               /* for messages */
	struct pt_error *err;
};

/* Start scanning @p[0..@len) (borrowed; @what names it in messages).
 * 0 or -ENOMEM (the string buffer is the size of the text). */
int pt__js_init(struct pt_js *j, const uint8_t *p, size_t len,
		const char *what, struct pt_error *err);
/* Free the string buffer unless taken (pt__js_take()). */
void pt__js_free(struct pt_js *j);
/* The string buffer (malloc()ed; NULL after pt__js_free()), handed to the
 * caller: strings read so far stay valid as long as it does. */
uint8_t *pt__js_take(struct pt_js *j);
/* The next byte after whitespace (not consumed), or -1 at the end. */
int pt__js_peek(struct pt_js *j);
/* Consume '{' or '['; *@empty when the matching close follows at once
 * (then consumed too). */
int pt__js_open(struct pt_js *j, char c, bool *empty);
/* After an item of a container closed by @close: ',' (*@more = true) or
 * @close (*@more = false). */
int pt__js_next(struct pt_js *j, char close, bool *more);
/* A string (*@s not NUL-terminated), or a key and its ':'. */
int pt__js_str(struct pt_js *j, const uint8_t **s, size_t *n);
int pt__js_key(struct pt_js *j, const uint8_t **s, size_t *n);
/* A non-negative integer (no fraction, exponent or sign) <= @max. */
int pt__js_uint(struct pt_js *j, uint64_t max, uint64_t *v);
/* Skip any one value (nesting at most 64 deep). */
int pt__js_skip(struct pt_js *j);
/* Fail with "@what: at byte N: @problem" in j->err; returns -EBADMSG (for
 * the caller's own schema errors). */
int pt__js_fail(struct pt_js *j, const char *problem);
/* Only whitespace remains. */
int pt__js_end(struct pt_js *j);
/* A name from the file made safe for a one-line message (at most 80
 * bytes, control bytes and quotes as '?'), in @buf of @cap bytes. */
const char *pt__js_printable(const uint8_t *s, size_t n, char *buf,
			     size_t cap);

/*
 * The emitter: append @p[0..@n) to @b as the body of a JSON string (no
 * quotes): '"' and '\\' escaped, control bytes as \n, \t or \u00XX,
 * valid UTF-8 as it is.  Text that is not UTF-8 still gives valid JSON
 * in valid UTF-8: a lone surrogate written the way Python pickles one
 * (ED A0..BF xx, "surrogatepass") becomes its \udXXX escape, as Python's
 * json.dumps writes it; any other invalid byte XX becomes \u00XX.
 */
void pt_json_str(struct pt_buf *b, const uint8_t *p, size_t n);

/* Append a JSON array of @n integers: "[1, 2, 3]". */
void pt_json_ints(struct pt_buf *b, const int64_t *v, size_t n);

#endif /* PTFS_CORE_JSON_H */
