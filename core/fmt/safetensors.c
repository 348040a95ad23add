/* SPDX-License-Identifier: MIT */
/*
 * safetensors.c -- safetensors files (FORMAT.md §8), and the small
 * strict JSON scanner that reads their header (and sharded indexes,
 * fmt/sharded.c).
 *
 * A file is [u64le N][N bytes of JSON][data].  The header is one object:
 * "name": {"dtype", "shape", "data_offsets": [begin, end]} per tensor, in
 * file order, plus an optional "__metadata__" object of strings.  There is
 * no pickle: open() checks every entry against the data section (offsets
 * inside it, end - begin == numel * itemsize, no two tensors overlapping,
 * known dtypes, shapes that do not overflow), then synthesizes the value
 * graph the tree expects -- a dict of str keys to tensor nodes that are
 * already classified, each over its own PT_ST_FILE storage (zero copy).
 * The header itself is /.ptfs/header.json, the metadata
 * /.ptfs/metadata.json.
 *
 * The JSON scanner is our own rather than a library's: the header is
 * untrusted and tiny in schema (depth 3), so a token reader that the
 * caller drives by the schema, with no recursion and no tree of nodes, is
 * both the smallest and the most bounded choice.
 */
#include "ckpt/ckpt_i.h"
#include "container/journal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The reference implementation's cap on the header (FORMAT.md §8). */
#define ST_MAX_HEADER 100000000u
/* Nesting that pt__js_skip() accepts (real headers nest 3 deep). */
#define JS_MAX_DEPTH 64

/* ---- the JSON scanner ---- */

static int js_fail(struct pt_js *j, const char *what)
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

int pt__js_keep(struct pt_js *j, struct pt_ckpt *ck)
{
	uint8_t *b = j->sbuf;

	j->sbuf = NULL;
	if (!pt__own(ck, b))
		return pt_fail(j->err, -ENOMEM, "out of memory");
	return 0;
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
		return js_fail(j, c == '{' ? "expected an object" :
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
	return js_fail(j, close == '}' ? "expected ',' or '}'" :
					 "expected ',' or ']'");
}

static int hex4(struct pt_js *j, uint32_t *v)
{
	uint32_t x = 0;
	int i;

	if (j->len - j->pos < 4)
		return js_fail(j, "truncated \\u escape");
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
			return js_fail(j, "bad \\u escape");
	}
	*v = x;
	return 0;
}

/* Length of the valid UTF-8 sequence at p[0..n), or 0 (RFC 3629: no
 * overlong forms, no surrogates, nothing above U+10FFFF). */
static size_t utf8_len(const uint8_t *p, size_t n)
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
		cp = cp << 6 | (p[i] & 0x3f);
	}
	if ((k == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
	    (k == 4 && (cp < 0x10000 || cp > 0x10ffff)))
		return 0;
	return k;
}

static void put_utf8(uint8_t *q, size_t *at, uint32_t cp)
{
	if (cp < 0x80) {
		q[(*at)++] = (uint8_t)cp;
	} else if (cp < 0x800) {
		q[(*at)++] = (uint8_t)(0xc0 | cp >> 6);
		q[(*at)++] = (uint8_t)(0x80 | (cp & 0x3f));
	} else if (cp < 0x10000) {
		q[(*at)++] = (uint8_t)(0xe0 | cp >> 12);
		q[(*at)++] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
		q[(*at)++] = (uint8_t)(0x80 | (cp & 0x3f));
	} else {
		q[(*at)++] = (uint8_t)(0xf0 | cp >> 18);
		q[(*at)++] = (uint8_t)(0x80 | ((cp >> 12) & 0x3f));
		q[(*at)++] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
		q[(*at)++] = (uint8_t)(0x80 | (cp & 0x3f));
	}
}

/* Decode a string into sbuf (or only check it when @keep is false). */
static int js_string(struct pt_js *j, const uint8_t **s, size_t *n, bool keep)
{
	size_t start = j->sused, at = j->sused;
	int rc;

	if (pt__js_peek(j) != '"')
		return js_fail(j, "expected a string");
	j->pos++;
	for (;;) {
		uint8_t c;
		size_t k;

		if (j->pos >= j->len)
			return js_fail(j, "unterminated string");
		c = j->p[j->pos];
		if (c == '"') {
			j->pos++;
			break;
		}
		if (c < 0x20)
			return js_fail(j, "control character in a string");
		if (c != '\\') {
			k = utf8_len(j->p + j->pos, j->len - j->pos);
			if (!k)
				return js_fail(j, "invalid UTF-8 in a string");
			if (keep)
				memcpy(j->sbuf + at, j->p + j->pos, k);
			at += k;
			j->pos += k;
			continue;
		}
		if (j->len - j->pos < 2)
			return js_fail(j, "unterminated string");
		c = j->p[j->pos + 1];
		j->pos += 2;
		if (c == 'u') {
			uint32_t cp, lo;

			rc = hex4(j, &cp);
			if (rc)
				return rc;
			if (cp >= 0xdc00 && cp <= 0xdfff)
				return js_fail(j, "lone low surrogate in a \\u escape");
			if (cp >= 0xd800 && cp <= 0xdbff) {
				if (j->len - j->pos < 2 || j->p[j->pos] != '\\' ||
				    j->p[j->pos + 1] != 'u')
					return js_fail(j, "lone high surrogate in a \\u escape");
				j->pos += 2;
				rc = hex4(j, &lo);
				if (rc)
					return rc;
				if (lo < 0xdc00 || lo > 0xdfff)
					return js_fail(j, "bad surrogate pair in a \\u escape");
				cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
			}
			if (keep)
				put_utf8(j->sbuf, &at, cp);
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
			return js_fail(j, "bad escape in a string");
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
		return js_fail(j, "expected ':'");
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
		return js_fail(j, "negative number where a size is expected");
	if (!is_digit(c))
		return js_fail(j, "expected a non-negative integer");
	if (c == '0' && j->pos + 1 < j->len && is_digit(j->p[j->pos + 1]))
		return js_fail(j, "number with a leading zero");
	while (j->pos < j->len && is_digit(j->p[j->pos])) {
		if (!pt_mul_u64(x, 10, &x) ||
		    !pt_add_u64(x, (uint64_t)(j->p[j->pos] - '0'), &x) ||
		    x > max)
			return js_fail(j, "number too large");
		j->pos++;
	}
	if (j->pos < j->len && (j->p[j->pos] == '.' || j->p[j->pos] == 'e' ||
				j->p[j->pos] == 'E'))
		return js_fail(j, "number is not an integer");
	*v = x;
	return 0;
}

/* Skip a number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
static int js_skip_number(struct pt_js *j)
{
	const uint8_t *p = j->p;
	size_t n = j->len, i = j->pos;

	if (i < n && p[i] == '-')
		i++;
	if (i < n && p[i] == '0') {
		i++;
	} else if (i < n && is_digit(p[i])) {
		while (i < n && is_digit(p[i]))
			i++;
	} else {
		j->pos = i;
		return js_fail(j, "bad number");
	}
	if (i < n && p[i] == '.') {
		i++;
		if (i >= n || !is_digit(p[i])) {
			j->pos = i;
			return js_fail(j, "bad number");
		}
		while (i < n && is_digit(p[i]))
			i++;
	}
	if (i < n && (p[i] == 'e' || p[i] == 'E')) {
		i++;
		if (i < n && (p[i] == '+' || p[i] == '-'))
			i++;
		if (i >= n || !is_digit(p[i])) {
			j->pos = i;
			return js_fail(j, "bad number");
		}
		while (i < n && is_digit(p[i]))
			i++;
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
		return js_fail(j, "expected ':'");
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
	return c < 0 ? js_fail(j, "unexpected end of JSON") :
		       js_fail(j, "expected a JSON value");
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
				return js_fail(j, "JSON nested too deeply");
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
		return js_fail(j, "text after the end of the JSON value");
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

/* ---- synthesized value graph ---- */

struct pt_value *pt__flat_dict(struct pt_ckpt *ck, size_t n)
{
	struct pt_value *v, **kv;
	size_t i;

	if (n > (SIZE_MAX / sizeof(*v) - 1) / 2)
		return NULL;
	v = calloc(2 * n + 1, sizeof(*v));
	if (!v || !pt__own(ck, v))
		return NULL;
	kv = calloc(2 * n + 1, sizeof(*kv));
	if (!kv || !pt__own(ck, kv))
		return NULL;
	v[0].kind = PT_V_DICT;
	v[0].u.dict.kv.v = kv;
	v[0].u.dict.kv.n = 2 * n;
	v[0].u.dict.kv.cap = 2 * n;
	for (i = 0; i < 2 * n; i++) {
		kv[i] = &v[i + 1];
		v[i + 1].id = (uint32_t)(i + 1);
	}
	return v;
}

void pt__flat_dict_set(struct pt_value *d, size_t i, const uint8_t *name,
		       size_t len, struct pt_tensor *t)
{
	struct pt_value *k = d->u.dict.kv.v[2 * i];
	struct pt_value *v = d->u.dict.kv.v[2 * i + 1];

	k->kind = PT_V_STR;
	k->aux16 = PT_C_SCALAR;
	k->u.s.p = name;
	k->u.s.len = len;
	k->u.s.in_off = UINT64_MAX;
	/* data from outside any pickle: a persistent id without a pid */
	v->kind = PT_V_PERSID;
	v->u.pid = NULL;
	v->aux16 = PT_C_TENSOR;
	v->aux = t;
}

/* ---- safetensors ---- */

static const struct {
	const char *st;         /* safetensors name */
	const char *torch;      /* dtype.c name, NULL: unsupported */
	unsigned bits;          /* bits per element */
} st_dtypes[] = {
	{ "BOOL", "bool", 8 },
	{ "U8", "uint8", 8 },
	{ "I8", "int8", 8 },
	{ "F8_E5M2", "float8_e5m2", 8 },
	{ "F8_E4M3", "float8_e4m3fn", 8 },
	{ "F8_E8M0", "float8_e8m0fnu", 8 },
	{ "F8_E4M3FNUZ", "float8_e4m3fnuz", 8 },
	{ "F8_E5M2FNUZ", "float8_e5m2fnuz", 8 },
	{ "I16", "int16", 16 },
	{ "U16", "uint16", 16 },
	{ "F16", "float16", 16 },
	{ "BF16", "bfloat16", 16 },
	{ "I32", "int32", 32 },
	{ "U32", "uint32", 32 },
	{ "F32", "float32", 32 },
	{ "C64", "complex64", 64 },
	{ "F64", "float64", 64 },
	{ "I64", "int64", 64 },
	{ "U64", "uint64", 64 },
	/* 4-bit floats: packed two per byte, served as opaque bytes */
	{ "F4", "float4_e2m1fn_x2", 4 },
	{ "F6_E2M3", NULL, 6 },
	{ "F6_E3M2", NULL, 6 },
};

struct st_ent {
	const uint8_t *name;            /* in the scanner's strings */
	size_t name_len;
	const struct pt_dtype *dt;
	unsigned bits;
	uint32_t rank;
	size_t shape_at;                /* first dim in st_parse.dims */
	uint64_t begin, end;            /* relative to the data section */
	uint64_t numel;
	uint64_t nbytes;
	UT_hash_handle hh;              /* duplicate names */
};

struct st_parse {
	struct st_ent *ents;
	size_t n, cap;
	int64_t *dims;
	size_t ndims, capdims;
	struct pt_buf meta;             /* __metadata__ re-serialized */
	size_t n_meta;
};

static bool grow_arr(void **arr, size_t *cap, size_t n, size_t elem)
{
	size_t nc;
	void *q;

	if (n < *cap)
		return true;
	nc = *cap ? *cap * 2 : 16;
	if (nc > SIZE_MAX / elem)
		return false;
	q = realloc(*arr, nc * elem);
	if (!q)
		return false;
	*arr = q;
	*cap = nc;
	return true;
}

static const char *ent_name(const struct st_ent *e, char *buf, size_t cap)
{
	return pt__js_printable(e->name, e->name_len, buf, cap);
}

/* "__metadata__": {"k": "v", ...} or null, re-serialized as JSON. */
static int st_metadata(struct pt_js *j, struct st_parse *ps, uint64_t cap)
{
	const uint8_t *k, *v;
	size_t kn, vn;
	bool empty, more = true;
	int rc;

	if (pt__js_peek(j) == 'n')
		return pt__js_skip(j);  /* null */
	if (ps->meta.len)
		return js_fail(j, "a second __metadata__");
	rc = pt__js_open(j, '{', &empty);
	if (rc)
		return rc;
	pt_buf_putc(&ps->meta, '{');
	while (!empty && more) {
		rc = pt__js_key(j, &k, &kn);
		if (rc)
			return rc;
		if (pt__js_peek(j) != '"')
			return js_fail(j, "__metadata__ values must be strings");
		rc = pt__js_str(j, &v, &vn);
		if (rc)
			return rc;
		if (++ps->n_meta > cap)
			return pt_fail(j->err, -EFBIG,
				       "%s: more than %" PRIu64 " __metadata__ entries",
				       j->what, cap);
		pt_buf_puts(&ps->meta, ps->n_meta > 1 ? ", \"" : "\"");
		pt_buf_json_str(&ps->meta, k, kn);
		pt_buf_puts(&ps->meta, "\": \"");
		pt_buf_json_str(&ps->meta, v, vn);
		pt_buf_putc(&ps->meta, '"');
		rc = pt__js_next(j, '}', &more);
		if (rc)
			return rc;
	}
	pt_buf_puts(&ps->meta, "}\n");
	if (ps->meta.oom)
		return pt_fail(j->err, -ENOMEM, "out of memory");
	return 0;
}

static int st_dtype(struct pt_js *j, struct st_ent *e)
{
	const uint8_t *s;
	size_t n, i;
	char nb[100], db[100];
	int rc;

	rc = pt__js_str(j, &s, &n);
	if (rc)
		return rc;
	for (i = 0; i < sizeof(st_dtypes) / sizeof(st_dtypes[0]); i++) {
		if (strlen(st_dtypes[i].st) != n || memcmp(st_dtypes[i].st, s, n))
			continue;
		if (!st_dtypes[i].torch)
			return pt_fail(j->err, -ENOTSUP,
				       "tensor '%s': dtype %s is not supported",
				       ent_name(e, nb, sizeof(nb)), st_dtypes[i].st);
		e->dt = pt_dtype_from_torch(st_dtypes[i].torch);
		e->bits = st_dtypes[i].bits;
		if (!e->dt)
			return pt_fail(j->err, -ENOTSUP, "dtype %s: no torch type",
				       st_dtypes[i].st);
		return 0;
	}
	return pt_fail(j->err, -EBADMSG, "tensor '%s': unknown dtype '%s'",
		       ent_name(e, nb, sizeof(nb)),
		       pt__js_printable(s, n, db, sizeof(db)));
}

/* {"dtype": ..., "shape": [...], "data_offsets": [b, e]}; other members
 * are skipped, as the reference reader does. */
static int st_tensor(struct pt_js *j, struct st_parse *ps, struct st_ent *e,
		     const struct pt_limits *lim)
{
	const uint8_t *k;
	size_t kn;
	bool empty, more = true, sempty, smore;
	unsigned seen = 0;
	char nb[100];
	int rc;

	rc = pt__js_open(j, '{', &empty);
	if (rc)
		return rc;
	while (!empty && more) {
		unsigned bit = 0;

		rc = pt__js_key(j, &k, &kn);
		if (rc)
			return rc;
		if (kn == 5 && memcmp(k, "dtype", 5) == 0)
			bit = 1;
		else if (kn == 5 && memcmp(k, "shape", 5) == 0)
			bit = 2;
		else if (kn == 12 && memcmp(k, "data_offsets", 12) == 0)
			bit = 4;
		if (bit & seen)
			return js_fail(j, "a tensor member appears twice");
		seen |= bit;
		if (bit == 1) {
			rc = st_dtype(j, e);
		} else if (bit == 2) {
			e->shape_at = ps->ndims;
			e->rank = 0;
			rc = pt__js_open(j, '[', &sempty);
			smore = true;
			while (!rc && !sempty && smore) {
				uint64_t d;

				if (e->rank == lim->max_rank)
					return pt_fail(j->err, -EFBIG,
						       "tensor '%s': more than %u dimensions",
						       ent_name(e, nb, sizeof(nb)),
						       lim->max_rank);
				rc = pt__js_uint(j, INT64_MAX, &d);
				if (rc)
					break;
				if (!grow_arr((void **)&ps->dims, &ps->capdims,
					      ps->ndims, sizeof(*ps->dims)))
					return pt_fail(j->err, -ENOMEM, "out of memory");
				ps->dims[ps->ndims++] = (int64_t)d;
				e->rank++;
				rc = pt__js_next(j, ']', &smore);
			}
		} else if (bit == 4) {
			rc = pt__js_open(j, '[', &sempty);
			if (!rc && sempty)
				rc = js_fail(j, "data_offsets must be [begin, end]");
			if (!rc)
				rc = pt__js_uint(j, UINT64_MAX, &e->begin);
			if (!rc && pt__js_peek(j) != ',')
				rc = js_fail(j, "data_offsets must be [begin, end]");
			if (!rc) {
				j->pos++;
				rc = pt__js_uint(j, UINT64_MAX, &e->end);
			}
			if (!rc && pt__js_peek(j) != ']')
				rc = js_fail(j, "data_offsets must be [begin, end]");
			if (!rc)
				j->pos++;
		} else {
			rc = pt__js_skip(j);
		}
		if (rc)
			return rc;
		rc = pt__js_next(j, '}', &more);
		if (rc)
			return rc;
	}
	if (seen != 7)
		return pt_fail(j->err, -EBADMSG, "tensor '%s': no %s",
			       ent_name(e, nb, sizeof(nb)),
			       !(seen & 1) ? "dtype" : !(seen & 2) ? "shape" :
							       "data_offsets");
	return 0;
}

/* The whole header: fills ps->ents in file order. */
static int st_header(struct pt_js *j, struct st_parse *ps,
		     const struct pt_limits *lim)
{
	const uint8_t *k;
	size_t kn;
	bool empty, more = true;
	int rc;

	if (pt__js_peek(j) != '{' || j->pos != 0)
		return js_fail(j, "does not start with '{'");
	rc = pt__js_open(j, '{', &empty);
	if (rc)
		return rc;
	while (!empty && more) {
		rc = pt__js_key(j, &k, &kn);
		if (rc)
			return rc;
		if (kn == 12 && memcmp(k, "__metadata__", 12) == 0) {
			rc = st_metadata(j, ps, lim->max_dir_entries);
		} else {
			struct st_ent *e;

			if (ps->n >= lim->max_dir_entries)
				return pt_fail(j->err, -EFBIG,
					       "%s: more than %" PRIu64 " tensors",
					       j->what, lim->max_dir_entries);
			if (!grow_arr((void **)&ps->ents, &ps->cap, ps->n,
				      sizeof(*ps->ents)))
				return pt_fail(j->err, -ENOMEM, "out of memory");
			e = &ps->ents[ps->n++];
			memset(e, 0, sizeof(*e));
			e->name = k;
			e->name_len = kn;
			rc = st_tensor(j, ps, e, lim);
		}
		if (rc)
			return rc;
		rc = pt__js_next(j, '}', &more);
		if (rc)
			return rc;
	}
	return pt__js_end(j);
}

static int cmp_begin(const void *a, const void *b)
{
	const struct st_ent *x = *(const struct st_ent *const *)a;
	const struct st_ent *y = *(const struct st_ent *const *)b;

	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	if (x->end != y->end)
		return x->end < y->end ? -1 : 1;
	return 0;
}

/*
 * Every entry against the data section of @data_len bytes: sizes from
 * dtype and shape, offsets inside, unique names, no overlaps.  Holes (bytes
 * no tensor uses) are legal for us but not for the reference reader: a
 * warning.
 */
static int st_check(struct pt_ckpt *ck, struct st_parse *ps,
		    uint64_t data_len, struct pt_error *err)
{
	struct st_ent *byname = NULL, *dup, **order = NULL;
	uint64_t prev_end = 0, holes = 0;
	const struct st_ent *prev = NULL;
	char nb[100], nb2[100];
	size_t i, r;
	int rc = 0;

	for (i = 0; i < ps->n; i++) {
		struct st_ent *e = &ps->ents[i];
		uint64_t numel = 1, bits;
		bool zero = false;

		for (r = 0; r < e->rank; r++) {
			uint64_t d = (uint64_t)ps->dims[e->shape_at + r];

			if (d == 0)
				zero = true;
			else if (!pt_mul_u64(numel, d, &numel)) {
				rc = pt_fail(err, -EBADMSG,
					     "tensor '%s': element count overflows",
					     ent_name(e, nb, sizeof(nb)));
				goto out;
			}
		}
		e->numel = zero ? 0 : numel;
		if (!pt_mul_u64(e->numel, e->bits, &bits)) {
			rc = pt_fail(err, -EBADMSG, "tensor '%s': byte count overflows",
				     ent_name(e, nb, sizeof(nb)));
			goto out;
		}
		if (bits % 8) {
			rc = pt_fail(err, -EBADMSG,
				     "tensor '%s': %" PRIu64 " elements of %u bits do not fill whole bytes",
				     ent_name(e, nb, sizeof(nb)), e->numel, e->bits);
			goto out;
		}
		e->nbytes = bits / 8;
		if (e->begin > e->end || e->end > data_len) {
			rc = pt_fail(err, -EBADMSG,
				     "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] outside the data section of %" PRIu64 " bytes",
				     ent_name(e, nb, sizeof(nb)), e->begin, e->end,
				     data_len);
			goto out;
		}
		if (e->end - e->begin != e->nbytes) {
			rc = pt_fail(err, -EBADMSG,
				     "tensor '%s': data_offsets span %" PRIu64 " bytes, dtype and shape need %" PRIu64,
				     ent_name(e, nb, sizeof(nb)), e->end - e->begin,
				     e->nbytes);
			goto out;
		}
		HASH_FIND(hh, byname, e->name, e->name_len, dup);
		if (dup) {
			rc = pt_fail(err, -EBADMSG, "tensor '%s' appears twice",
				     ent_name(e, nb, sizeof(nb)));
			goto out;
		}
		HASH_ADD_KEYPTR(hh, byname, e->name, e->name_len, e);
	}
	order = malloc((ps->n ? ps->n : 1) * sizeof(*order));
	if (!order) {
		rc = pt_fail(err, -ENOMEM, "out of memory");
		goto out;
	}
	for (i = 0; i < ps->n; i++)
		order[i] = &ps->ents[i];
	qsort(order, ps->n, sizeof(*order), cmp_begin);
	for (i = 0; i < ps->n; i++) {
		const struct st_ent *e = order[i];

		if (e->nbytes == 0)
			continue;
		if (prev && e->begin < prev_end) {
			rc = pt_fail(err, -EBADMSG,
				     "tensors '%s' and '%s' overlap (bytes %" PRIu64 "..%" PRIu64 " and %" PRIu64 "..%" PRIu64 " of the data)",
				     ent_name(prev, nb, sizeof(nb)),
				     ent_name(e, nb2, sizeof(nb2)), prev->begin,
				     prev_end, e->begin, e->end);
			goto out;
		}
		holes += e->begin - prev_end;
		prev = e;
		prev_end = e->end;
	}
	holes += data_len - prev_end;
	if (holes)
		pt__warn(ck, "safetensors: %" PRIu64 " bytes of the data section belong to no tensor",
			 holes);
out:
	HASH_CLEAR(hh, byname);
	free(order);
	return rc;
}

/* Tensors, storages and the dict, in header order. */
static int st_build(struct pt_ckpt *ck, struct st_parse *ps,
		    uint64_t data_off, struct pt_error *err)
{
	struct pt_tensor *ts;
	struct pt_storage *ss;
	struct pt_value *root;
	int64_t *dims;
	char *keys;
	size_t i, r, at = 0, kat = 0;

	root = pt__flat_dict(ck, ps->n);
	ts = calloc(ps->n + 1, sizeof(*ts));
	if (!root || !ts || !pt__own(ck, ts))
		return pt_fail(err, -ENOMEM, "out of memory");
	ss = calloc(ps->n + 1, sizeof(*ss));
	if (!ss || !pt__own(ck, ss))
		return pt_fail(err, -ENOMEM, "out of memory");
	/* shape and stride of every tensor */
	dims = calloc(2 * ps->ndims + 1, sizeof(*dims));
	if (!dims || !pt__own(ck, dims))
		return pt_fail(err, -ENOMEM, "out of memory");
	/* storage keys: the tensor's index, "0" ... */
	keys = calloc(ps->n + 1, 21);
	if (!keys || !pt__own(ck, keys))
		return pt_fail(err, -ENOMEM, "out of memory");
	for (i = 0; i < ps->n; i++) {
		const struct st_ent *e = &ps->ents[i];
		struct pt_storage *st = &ss[i];
		struct pt_tensor *t = &ts[i];
		uint64_t expect = 1;

		st->key = keys + kat;
		kat += (size_t)snprintf(keys + kat, 21, "%zu", i) + 1;
		st->dtype = e->dt;
		st->nbytes = e->nbytes;
		st->kind = PT_ST_FILE;
		st->writable = true;
		st->file_off = data_off + e->begin;
		st->id = ck->n_storages++;
		HASH_ADD_KEYPTR(hh, ck->storages, st->key, strlen(st->key), st);

		t->dtype = e->dt;
		t->st = st;
		t->rank = e->rank;
		t->shape = dims + at;
		t->stride = dims + at + e->rank;
		at += 2 * (size_t)e->rank;
		memcpy(t->shape, ps->dims + e->shape_at, e->rank * sizeof(int64_t));
		for (r = e->rank; r-- > 0;) {
			t->stride[r] = (int64_t)expect;
			if (t->shape[r] > 1)
				expect *= (uint64_t)t->shape[r];
		}
		t->numel = e->numel;
		t->nbytes = e->nbytes;
		t->byte_hi = e->nbytes;
		t->contiguous = true;
		t->kind = PT_TK_TENSOR;
		t->byteorder = e->bits <= 8 ? '|' : '<';
		t->dtype_name = e->dt->name;
		if (e->bits == 4)
			t->note = "safetensors F4: two 4-bit values per byte; the shape counts values";
		t->id = ck->n_tensors++;
		ck->tensor_bytes += t->nbytes;
		pt__flat_dict_set(root, i, e->name, e->name_len, t);
	}
	ck->root = root;
	return 0;
}

static int st_probe(struct pt_ckpt *ck, const uint8_t *head, size_t n,
		     struct pt_error *err)
{
	uint64_t hl;

	(void)ck;
	(void)err;
	if (n < 9 || head[8] != '{')
		return false;
	hl = pt_le64(head);
	return hl >= 2 && hl <= ST_MAX_HEADER;
}

static int st_open(struct pt_ckpt *ck, struct pt_error *err)
{
	const struct pt_limits *lim = &ck->opts.limits;
	struct st_parse ps;
	struct pt_js j;
	uint8_t lenb[8], *hb = NULL;
	uint64_t hl, data_len;
	int rc;

	memset(&ps, 0, sizeof(ps));
	memset(&j, 0, sizeof(j));
	pt_buf_init(&ps.meta);
	rc = pt_source_read(ck->src, lenb, 8, 0, err);
	if (rc)
		return rc;
	hl = pt_le64(lenb);
	if (hl > ST_MAX_HEADER)
		return pt_fail(err, -EFBIG,
			       "safetensors header of %" PRIu64 " bytes exceeds the limit of %u",
			       hl, ST_MAX_HEADER);
	if (hl > ck->src->size - 8)
		return pt_fail(err, -EBADMSG,
			       "safetensors header of %" PRIu64 " bytes runs past the end of the file (%" PRIu64 " bytes)",
			       hl, ck->src->size);
	data_len = ck->src->size - 8 - hl;
	rc = pt_source_dup(ck->src, 8, (size_t)hl, &hb, err);
	if (rc)
		return rc;
	/* the header as stored is /.ptfs/header.json; ck owns it now */
	rc = pt__add_meta_file(ck, "header.json", hb, (size_t)hl);
	if (rc)
		return pt_fail(err, rc, "out of memory");
	rc = pt__js_init(&j, hb, (size_t)hl, "safetensors header", err);
	if (rc)
		goto out;
	rc = st_header(&j, &ps, lim);
	if (rc)
		goto out;
	rc = pt__js_keep(&j, ck);
	if (rc)
		goto out;
	rc = st_check(ck, &ps, data_len, err);
	if (rc)
		goto out;
	rc = st_build(ck, &ps, 8 + hl, err);
	if (rc)
		goto out;
	if (ps.meta.len) {
		size_t len = 0;
		char *m = pt_buf_take(&ps.meta, &len);

		rc = m ? pt__add_meta_file(ck, "metadata.json", m, len) : -ENOMEM;
		if (rc) {
			rc = pt_fail(err, rc, "out of memory");
			goto out;
		}
	}
	pt_buf_printf(&ck->notes, "safetensors header: %" PRIu64 " bytes, %zu tensors, %zu metadata entries\n",
		      hl, ps.n, ps.n_meta);
out:
	pt__js_free(&j);
	pt_buf_free(&ps.meta);
	free(ps.ents);
	free(ps.dims);
	return rc;
}

/* A storage's changed range, read through its commit (offsets from the
 * range's start). */
struct st_sub {
	const struct pt_commit *c;
	uint64_t base;
};

static int st_sub_read(void *ctx, void *buf, size_t n, uint64_t at)
{
	const struct st_sub *s = ctx;

	return s->c->read(s->c->ctx, buf, n, s->base + at);
}

static int st_patch_cmp(const void *a, const void *b)
{
	const struct pt_patch *x = a, *y = b;

	return x->off < y->off ? -1 : x->off > y->off;
}

/* The patches: each storage's changed ranges (all of it when the commit
 * does not say), in file order. */
static int st_plan(const struct pt_commit *c, size_t n, struct pt_patch **p,
		   struct st_sub **subs, size_t *np, uint64_t *bytes)
{
	size_t i, j, k = 0, total = 0;

	for (i = 0; i < n; i++)
		total += c[i].ranges ? c[i].n_ranges : 1;
	*p = calloc(total ? total : 1, sizeof(**p));
	*subs = calloc(total ? total : 1, sizeof(**subs));
	if (!*p || !*subs)
		return -ENOMEM;
	*bytes = 0;
	for (i = 0; i < n; i++)
		for (j = 0; j < (c[i].ranges ? c[i].n_ranges : 1); j++, k++) {
			(*subs)[k].c = &c[i];
			(*subs)[k].base = c[i].ranges ? c[i].ranges[j][0] : 0;
			(*p)[k].off = c[i].st->file_off + (*subs)[k].base;
			(*p)[k].len = c[i].ranges ? c[i].ranges[j][1] : c[i].st->nbytes;
			(*p)[k].read = st_sub_read;
			(*p)[k].ctx = &(*subs)[k];
			*bytes += (*p)[k].len;
		}
	*np = k;
	qsort(*p, k, sizeof(**p), st_patch_cmp);
	return 0;
}

/* struct pt_format.commit: no checksums in the container, so a commit is
 * each storage's changed bytes where the old ones were: in a clone, in
 * place behind the journal, or in a full copy, as -o commit says
 * (container/journal.h; every way through container/replace.c: the real
 * file behind symlinks, owner then mode then xattrs, the real errno). */
static int st_commit(struct pt_ckpt *ck, const struct pt_commit *c, size_t n,
		     struct pt_error *err)
{
	enum pt_commit_way used = PT_COMMIT_REWRITE;
	struct pt_replace_expect ex;
	struct pt_patch *p = NULL;
	struct st_sub *subs = NULL;
	uint64_t bytes = 0;
	size_t np = 0;
	int rc;

	rc = pt_source_check(ck->src, PT_CHECK_NAME, err);
	if (rc)
		return rc;
	/* the file must still be the one the source opened */
	memset(&ex, 0, sizeof(ex));
	ex.size = (off_t)ck->src->size;
	ex.mtime = ck->src->mtime;
	if (st_plan(c, n, &p, &subs, &np, &bytes) != 0)
		rc = pt_fail(err, -ENOMEM, "out of memory");
	else
		rc = pt_patch_apply(pt_source_local_path(ck->src), ck->opts.commit,
				    p, np, &ex, false, &ck->no_clone, &used, err);
	if (rc) {
		pt_error_prefix(err, "commit (%s)", pt_commit_way_name(used));
	} else {
		if (used == PT_COMMIT_REWRITE)
			bytes = ck->src->size;
		snprintf(ck->last_commit, sizeof(ck->last_commit),
			 "%s, %llu bytes written", pt_commit_way_name(used),
			 (unsigned long long)bytes);
	}
	free(p);
	free(subs);
	return rc;
}

const struct pt_format pt_fmt_safetensors = {
	.name = "safetensors",
	.probe = st_probe,
	.open = st_open,
	.storage = NULL,
	.close = NULL,
	.commit = st_commit,
};
