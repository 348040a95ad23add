/* SPDX-License-Identifier: MIT */
/*
 * json.c -- the JSON scanner and emitter of ptfs (json.h).
 *
 * The scanner is our own rather than a library's: the documents are
 * untrusted and tiny in schema (a safetensors header nests 3 deep), so a
 * token reader that the caller drives by the schema, with no recursion
 * and no tree of nodes, is both the smallest and the most bounded choice.
 */
#include "base/json.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/rd.h"
#include "base/text.h"

/* Nesting that pt__js_skip() accepts (real headers nest 3 deep). */
#define JS_MAX_DEPTH 64

/* ---- the scanner ---- */

int pt__js_fail(struct pt_js *j, const char *what)
{
	return pt_fail(j->err, -EBADMSG, "%s: at byte %zu: %s", j->what,
		       j->pos, what);
}

int pt__js_init(struct pt_js *j, const uint8_t *p, size_t len,
		const char *what, struct pt_error *err)
{
	memset(j, 0, sizeof(*j));
	j->p = p;
	j->len = len;
	j->what = what;
	j->err = err;
	/* decoded strings never outgrow their escaped form */
	j->sbuf = malloc(len ? len : 1);
	if (!j->sbuf)
		return pt_fail(err, -ENOMEM, "out of memory");
	return 0;
}

void pt__js_free(struct pt_js *j)
{
	free(j->sbuf);
	j->sbuf = NULL;
}

uint8_t *pt__js_take(struct pt_js *j)
{
	uint8_t *b = j->sbuf;

	j->sbuf = NULL;
	return b;
}

int pt__js_peek(struct pt_js *j)
{
	while (j->pos < j->len) {
		uint8_t c = j->p[j->pos];

		if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
			return c;
		j->pos++;
	}
	return -1;
}

int pt__js_open(struct pt_js *j, char c, bool *empty)
{
	char close = c == '{' ? '}' : ']';

	if (pt__js_peek(j) != c)
		return pt__js_fail(j, c == '{' ? "expected an object" :
					     "expected an array");
	j->pos++;
	*empty = pt__js_peek(j) == close;
	if (*empty)
		j->pos++;
	return 0;
}

int pt__js_next(struct pt_js *j, char close, bool *more)
{
	int c = pt__js_peek(j);

	if (c == ',') {
		j->pos++;
		*more = true;
		return 0;
	}
	if (c == close) {
		j->pos++;
		*more = false;
		return 0;
	}
	return pt__js_fail(j, close == '}' ? "expected ',' or '}'" :
					 "expected ',' or ']'");
}

static int hex4(struct pt_js *j, uint32_t *v)
{
	uint32_t x = 0;
	int i;

	if (j->len - j->pos < 4)
		return pt__js_fail(j, "truncated \\u escape");
	for (i = 0; i < 4; i++) {
		uint8_t c = j->p[j->pos++];

		x <<= 4;
		if (c >= '0' && c <= '9')
			x |= (uint32_t)(c - '0');
		else if (c >= 'a' && c <= 'f')
			x |= (uint32_t)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			x |= (uint32_t)(c - 'A' + 10);
		else
			return pt__js_fail(j, "bad \\u escape");
	}
	*v = x;
	return 0;
}

/* Decode a string into sbuf (or only check it when @keep is false). */
static int js_string(struct pt_js *j, const uint8_t **s, size_t *n, bool keep)
{
	size_t start = j->sused, at = j->sused;
	int rc;

	if (pt__js_peek(j) != '"')
		return pt__js_fail(j, "expected a string");
	j->pos++;
	for (;;) {
		uint8_t c;
		size_t k;

		if (j->pos >= j->len)
			return pt__js_fail(j, "unterminated string");
		c = j->p[j->pos];
		if (c == '"') {
			j->pos++;
			break;
		}
		if (c < 0x20)
			return pt__js_fail(j, "control character in a string");
		if (c != '\\') {
			k = pt_utf8_len(j->p + j->pos, j->len - j->pos);
			if (!k)
				return pt__js_fail(j, "invalid UTF-8 in a string");
			if (keep)
				memcpy(j->sbuf + at, j->p + j->pos, k);
			at += k;
			j->pos += k;
			continue;
		}
		if (j->len - j->pos < 2)
			return pt__js_fail(j, "unterminated string");
		c = j->p[j->pos + 1];
		j->pos += 2;
		if (c == 'u') {
			uint32_t cp, lo;

			rc = hex4(j, &cp);
			if (rc)
				return rc;
			if (cp >= 0xdc00 && cp <= 0xdfff)
				return pt__js_fail(j, "lone low surrogate in a \\u escape");
			if (cp >= 0xd800 && cp <= 0xdbff) {
				if (j->len - j->pos < 2 || j->p[j->pos] != '\\' ||
				    j->p[j->pos + 1] != 'u')
					return pt__js_fail(j, "lone high surrogate in a \\u escape");
				j->pos += 2;
				rc = hex4(j, &lo);
				if (rc)
					return rc;
				if (lo < 0xdc00 || lo > 0xdfff)
					return pt__js_fail(j, "bad surrogate pair in a \\u escape");
				cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
			}
			if (keep)
				at += pt_utf8_put(j->sbuf + at, cp);
			else
				at += cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
			continue;
		}
		switch (c) {
		case '"': case '\\': case '/':
			break;
		case 'b':
			c = '\b';
			break;
		case 'f':
			c = '\f';
			break;
		case 'n':
			c = '\n';
			break;
		case 'r':
			c = '\r';
			break;
		case 't':
			c = '\t';
			break;
		default:
			return pt__js_fail(j, "bad escape in a string");
		}
		if (keep)
			j->sbuf[at] = c;
		at++;
	}
	if (keep) {
		j->sused = at;
		*s = j->sbuf + start;
		*n = at - start;
	}
	return 0;
}

int pt__js_str(struct pt_js *j, const uint8_t **s, size_t *n)
{
	return js_string(j, s, n, true);
}

int pt__js_key(struct pt_js *j, const uint8_t **s, size_t *n)
{
	int rc = pt__js_str(j, s, n);

	if (rc)
		return rc;
	if (pt__js_peek(j) != ':')
		return pt__js_fail(j, "expected ':'");
	j->pos++;
	return 0;
}

static bool is_digit(int c)
{
	return c >= '0' && c <= '9';
}

int pt__js_uint(struct pt_js *j, uint64_t max, uint64_t *v)
{
	uint64_t x = 0;
	int c = pt__js_peek(j);

	if (c == '-')
		return pt__js_fail(j, "negative number where a size is expected");
	if (!is_digit(c))
		return pt__js_fail(j, "expected a non-negative integer");
	if (c == '0' && j->pos + 1 < j->len && is_digit(j->p[j->pos + 1]))
		return pt__js_fail(j, "number with a leading zero");
	while (j->pos < j->len && is_digit(j->p[j->pos])) {
		if (!pt_mul_u64(x, 10, &x) ||
		    !pt_add_u64(x, (uint64_t)(j->p[j->pos] - '0'), &x) ||
		    x > max)
			return pt__js_fail(j, "number too large");
		j->pos++;
	}
	if (j->pos < j->len && (j->p[j->pos] == '.' || j->p[j->pos] == 'e' ||
				j->p[j->pos] == 'E'))
		return pt__js_fail(j, "number is not an integer");
	*v = x;
	return 0;
}

/* Past the digits at @i (at least one); SIZE_MAX when there is none. */
static size_t js_digits(const uint8_t *p, size_t n, size_t i)
{
	if (i >= n || !is_digit(p[i]))
		return SIZE_MAX;
	while (i < n && is_digit(p[i]))
		i++;
	return i;
}

/* Skip a number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
static int js_skip_number(struct pt_js *j)
{
	const uint8_t *p = j->p;
	size_t n = j->len, i = j->pos, next;

	if (i < n && p[i] == '-')
		i++;
	if (i < n && p[i] == '0') {
		i++;
	} else if ((next = js_digits(p, n, i)) != SIZE_MAX) {
		i = next;
	} else {
		j->pos = i;
		return pt__js_fail(j, "bad number");
	}
	if (i < n && p[i] == '.') {
		if ((next = js_digits(p, n, i + 1)) == SIZE_MAX) {
			j->pos = i + 1;
			return pt__js_fail(j, "bad number");
		}
		i = next;
	}
	if (i < n && (p[i] == 'e' || p[i] == 'E')) {
		i++;
		if (i < n && (p[i] == '+' || p[i] == '-'))
			i++;
		if ((next = js_digits(p, n, i)) == SIZE_MAX) {
			j->pos = i;
			return pt__js_fail(j, "bad number");
		}
		i = next;
	}
	j->pos = i;
	return 0;
}

/* Skip an object member's key and its ':'. */
static int js_skip_key(struct pt_js *j)
{
	int rc = js_string(j, NULL, NULL, false);

	if (rc)
		return rc;
	if (pt__js_peek(j) != ':')
		return pt__js_fail(j, "expected ':'");
	j->pos++;
	return 0;
}

/* A scalar: string, number, true, false, null. */
static int js_skip_scalar(struct pt_js *j)
{
	static const char *const lits[] = { "true", "false", "null" };
	int c = pt__js_peek(j);
	size_t i;

	if (c == '"')
		return js_string(j, NULL, NULL, false);
	if (c == '-' || is_digit(c))
		return js_skip_number(j);
	for (i = 0; i < 3; i++) {
		size_t k = strlen(lits[i]);

		if (j->len - j->pos >= k && memcmp(j->p + j->pos, lits[i], k) == 0) {
			j->pos += k;
			return 0;
		}
	}
	return c < 0 ? pt__js_fail(j, "unexpected end of JSON") :
		       pt__js_fail(j, "expected a JSON value");
}

/*
 * Skip one value of any shape with an explicit stack of the open
 * containers' closing brackets.  States: read a value (a container start
 * pushes and, unless it is empty, reads its first member), then close
 * containers / consume ',' until a value is due again or the stack empties.
 */
int pt__js_skip(struct pt_js *j)
{
	char stack[JS_MAX_DEPTH];
	size_t d = 0;
	bool empty, more;
	int rc, c;

	for (;;) {
		c = pt__js_peek(j);
		if (c == '{' || c == '[') {
			if (d == JS_MAX_DEPTH)
				return pt__js_fail(j, "JSON nested too deeply");
			rc = pt__js_open(j, (char)c, &empty);
			if (rc)
				return rc;
			if (!empty) {
				stack[d++] = c == '{' ? '}' : ']';
				if (c == '{') {
					rc = js_skip_key(j);
					if (rc)
						return rc;
				}
				continue;
			}
		} else {
			rc = js_skip_scalar(j);
			if (rc)
				return rc;
		}
		/* a value ended: close what is complete */
		for (;;) {
			if (d == 0)
				return 0;
			rc = pt__js_next(j, stack[d - 1], &more);
			if (rc)
				return rc;
			if (!more) {
				d--;
				continue;
			}
			if (stack[d - 1] == '}') {
				rc = js_skip_key(j);
				if (rc)
					return rc;
			}
			break;
		}
	}
}

int pt__js_end(struct pt_js *j)
{
	if (pt__js_peek(j) >= 0)
		return pt__js_fail(j, "text after the end of the JSON value");
	return 0;
}

const char *pt__js_printable(const uint8_t *s, size_t n, char *buf,
			     size_t cap)
{
	size_t i, k = 0, lim = n < 80 ? n : 80;

	if (cap == 0)
		return "";
	for (i = 0; i < lim && k + 4 < cap; i++)
		buf[k++] = s[i] < 0x20 || s[i] == 0x7f || s[i] == '\'' ? '?' :
								   (char)s[i];
	if (n > lim && k + 4 < cap) {
		memcpy(buf + k, "...", 3);
		k += 3;
	}
	buf[k] = '\0';
	return buf;
}

/* ---- the emitter ---- */

/* printable ASCII that a JSON string holds as it is */
static inline bool json_plain(uint8_t c)
{
	return (uint8_t)(c - 0x20) < 0x60 && c != '"' && c != '\\';
}

/* Nonzero when one of the 8 bytes at @p is not json_plain(): each test
 * is exact for "any byte" (a byte's borrow can only flag a byte above
 * it, and only when a byte below is already flagged). */
static inline uint64_t json_special8(const uint8_t *p)
{
	const uint64_t ones = 0x0101010101010101u;
	const uint64_t high = 0x8080808080808080u;
	uint64_t x, q, bs;

	memcpy(&x, p, 8);
	q = x ^ (ones * '"');
	bs = x ^ (ones * '\\');
	return (x | ((x - ones * 0x20) & ~x) | ((q - ones) & ~q) |
		((bs - ones) & ~bs)) & high;
}

void pt_json_str(struct pt_buf *b, const uint8_t *p, size_t n)
{
	size_t i = 0;

	while (i < n) {
		uint8_t c = p[i];
		uint32_t sur;
		size_t k;

		/* a run of plain ASCII in one piece */
		for (k = i; k + 8 <= n && !json_special8(p + k); k += 8)
			;
		for (; k < n && json_plain(p[k]); k++)
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
		k = pt_utf8_len(p + i, n - i);
		if (k) {
			pt_buf_add(b, p + i, k);
			i += k;
		} else if ((sur = pt_utf8_surrogate(p + i, n - i)) != 0) {
			pt_buf_printf(b, "\\u%04x", (unsigned)sur);
			i += 3;
		} else {
			pt_buf_printf(b, "\\u%04x", c);
			i++;
		}
	}
}

void pt_json_ints(struct pt_buf *b, const int64_t *v, size_t n)
{
	size_t i;

	pt_buf_putc(b, '[');
	for (i = 0; i < n; i++) {
		if (i)
			pt_buf_add(b, ", ", 2);
		pt_buf_put_i64(b, v[i]);
	}
	pt_buf_putc(b, ']');
}
