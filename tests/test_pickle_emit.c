/* SPDX-License-Identifier: MIT */
/*
 * test_pickle_emit.c -- the pickle writer (core/decode/pickle_emit.c).
 *
 * Every pickle here is decoded, written back and decoded again, and the
 * two graphs must be the same, sharing included (pickle_eq.h): hand-made
 * pickles of every protocol's opcodes, pickles made by CPython (below),
 * and every pickle of the real fixtures ($PTFS_SHARED/fixtures/real,
 * skipped visibly when absent).  Where CPython's pickler fixes the bytes,
 * the written bytes are compared too.  Then the writer's rules: no memo
 * for None, bools and numbers, 1000-item batches, the opcode that made
 * an object, a global's Python 2 spelling, nodes an editor made, the
 * persistent-id hook, and its refusals (lean nodes, depth, cycles of
 * immutable nodes).
 */
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <cmocka.h>
#include "require.h"

#include "base/pt_limits.h"
#include "container/zip.h"
#include "decode/pickle.h"
#include "decode/pickle_emit.h"
#include "io/source.h"
#include "pickle_eq.h"

#define S(lit) (const uint8_t *)(lit), sizeof(lit) - 1

/* ---- pickles made by CPython 3.11 ------------------------------------- */

/* pickle.dumps(d, 0), d = {'x': l, 'y': l, 2**100, -2**70, [-0.0, inf, 1.5], b'\0\xff', {1, 2}, frozenset({3}), 'h\u00e9\U0001f600', None, (True, False), (), 'self': d}, l = [1] */
static const uint8_t py_p0[] = {
	0x28, 0x64, 0x70, 0x30, 0x0a, 0x56, 0x78, 0x0a, 0x70, 0x31, 0x0a, 0x28,
	0x6c, 0x70, 0x32, 0x0a, 0x49, 0x31, 0x0a, 0x61, 0x73, 0x56, 0x79, 0x0a,
	0x70, 0x33, 0x0a, 0x67, 0x32, 0x0a, 0x73, 0x56, 0x62, 0x69, 0x67, 0x0a,
	0x70, 0x34, 0x0a, 0x4c, 0x31, 0x32, 0x36, 0x37, 0x36, 0x35, 0x30, 0x36,
	0x30, 0x30, 0x32, 0x32, 0x38, 0x32, 0x32, 0x39, 0x34, 0x30, 0x31, 0x34,
	0x39, 0x36, 0x37, 0x30, 0x33, 0x32, 0x30, 0x35, 0x33, 0x37, 0x36, 0x4c,
	0x0a, 0x73, 0x56, 0x6e, 0x65, 0x67, 0x0a, 0x70, 0x35, 0x0a, 0x4c, 0x2d,
	0x31, 0x31, 0x38, 0x30, 0x35, 0x39, 0x31, 0x36, 0x32, 0x30, 0x37, 0x31,
	0x37, 0x34, 0x31, 0x31, 0x33, 0x30, 0x33, 0x34, 0x32, 0x34, 0x4c, 0x0a,
	0x73, 0x56, 0x66, 0x0a, 0x70, 0x36, 0x0a, 0x28, 0x6c, 0x70, 0x37, 0x0a,
	0x46, 0x2d, 0x30, 0x2e, 0x30, 0x0a, 0x61, 0x46, 0x69, 0x6e, 0x66, 0x0a,
	0x61, 0x46, 0x31, 0x2e, 0x35, 0x0a, 0x61, 0x73, 0x56, 0x62, 0x0a, 0x70,
	0x38, 0x0a, 0x63, 0x5f, 0x63, 0x6f, 0x64, 0x65, 0x63, 0x73, 0x0a, 0x65,
	0x6e, 0x63, 0x6f, 0x64, 0x65, 0x0a, 0x70, 0x39, 0x0a, 0x28, 0x56, 0x5c,
	0x75, 0x30, 0x30, 0x30, 0x30, 0xff, 0x0a, 0x70, 0x31, 0x30, 0x0a, 0x56,
	0x6c, 0x61, 0x74, 0x69, 0x6e, 0x31, 0x0a, 0x70, 0x31, 0x31, 0x0a, 0x74,
	0x70, 0x31, 0x32, 0x0a, 0x52, 0x70, 0x31, 0x33, 0x0a, 0x73, 0x56, 0x73,
	0x0a, 0x70, 0x31, 0x34, 0x0a, 0x63, 0x5f, 0x5f, 0x62, 0x75, 0x69, 0x6c,
	0x74, 0x69, 0x6e, 0x5f, 0x5f, 0x0a, 0x73, 0x65, 0x74, 0x0a, 0x70, 0x31,
	0x35, 0x0a, 0x28, 0x28, 0x6c, 0x70, 0x31, 0x36, 0x0a, 0x49, 0x31, 0x0a,
	0x61, 0x49, 0x32, 0x0a, 0x61, 0x74, 0x70, 0x31, 0x37, 0x0a, 0x52, 0x70,
	0x31, 0x38, 0x0a, 0x73, 0x56, 0x66, 0x73, 0x0a, 0x70, 0x31, 0x39, 0x0a,
	0x63, 0x5f, 0x5f, 0x62, 0x75, 0x69, 0x6c, 0x74, 0x69, 0x6e, 0x5f, 0x5f,
	0x0a, 0x66, 0x72, 0x6f, 0x7a, 0x65, 0x6e, 0x73, 0x65, 0x74, 0x0a, 0x70,
	0x32, 0x30, 0x0a, 0x28, 0x28, 0x6c, 0x70, 0x32, 0x31, 0x0a, 0x49, 0x33,
	0x0a, 0x61, 0x74, 0x70, 0x32, 0x32, 0x0a, 0x52, 0x70, 0x32, 0x33, 0x0a,
	0x73, 0x56, 0x75, 0x0a, 0x70, 0x32, 0x34, 0x0a, 0x56, 0x68, 0xe9, 0x5c,
	0x55, 0x30, 0x30, 0x30, 0x31, 0x66, 0x36, 0x30, 0x30, 0x0a, 0x70, 0x32,
	0x35, 0x0a, 0x73, 0x56, 0x6e, 0x0a, 0x70, 0x32, 0x36, 0x0a, 0x4e, 0x73,
	0x56, 0x74, 0x0a, 0x70, 0x32, 0x37, 0x0a, 0x28, 0x49, 0x30, 0x31, 0x0a,
	0x49, 0x30, 0x30, 0x0a, 0x74, 0x70, 0x32, 0x38, 0x0a, 0x73, 0x56, 0x65,
	0x0a, 0x70, 0x32, 0x39, 0x0a, 0x28, 0x74, 0x73, 0x56, 0x73, 0x65, 0x6c,
	0x66, 0x0a, 0x70, 0x33, 0x30, 0x0a, 0x67, 0x30, 0x0a, 0x73, 0x2e,
};

/* pickle.dumps(d, 4): FRAME, MEMOIZE, SHORT_BINUNICODE, STACK_GLOBAL, EMPTY_SET */
static const uint8_t py_p4[] = {
	0x80, 0x04, 0x95, 0xa5, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x7d,
	0x94, 0x28, 0x8c, 0x01, 0x78, 0x94, 0x5d, 0x94, 0x4b, 0x01, 0x61, 0x8c,
	0x01, 0x79, 0x94, 0x68, 0x02, 0x8c, 0x03, 0x62, 0x69, 0x67, 0x94, 0x8a,
	0x0d, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	0x00, 0x10, 0x8c, 0x03, 0x6e, 0x65, 0x67, 0x94, 0x8a, 0x09, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xc0, 0x8c, 0x01, 0x66, 0x94, 0x5d,
	0x94, 0x28, 0x47, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x47,
	0x7f, 0xf0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x47, 0x3f, 0xf8, 0x00,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x65, 0x8c, 0x01, 0x62, 0x94, 0x43, 0x02,
	0x00, 0xff, 0x94, 0x8c, 0x01, 0x73, 0x94, 0x8f, 0x94, 0x28, 0x4b, 0x01,
	0x4b, 0x02, 0x90, 0x8c, 0x02, 0x66, 0x73, 0x94, 0x28, 0x4b, 0x03, 0x91,
	0x94, 0x8c, 0x01, 0x75, 0x94, 0x8c, 0x07, 0x68, 0xc3, 0xa9, 0xf0, 0x9f,
	0x98, 0x80, 0x94, 0x8c, 0x01, 0x6e, 0x94, 0x4e, 0x8c, 0x01, 0x74, 0x94,
	0x88, 0x89, 0x86, 0x94, 0x8c, 0x01, 0x65, 0x94, 0x29, 0x8c, 0x04, 0x73,
	0x65, 0x6c, 0x66, 0x94, 0x68, 0x00, 0x75, 0x2e,
};

/* pickle.dumps(d, 5) */
static const uint8_t py_p5[] = {
	0x80, 0x05, 0x95, 0xa5, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x7d,
	0x94, 0x28, 0x8c, 0x01, 0x78, 0x94, 0x5d, 0x94, 0x4b, 0x01, 0x61, 0x8c,
	0x01, 0x79, 0x94, 0x68, 0x02, 0x8c, 0x03, 0x62, 0x69, 0x67, 0x94, 0x8a,
	0x0d, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	0x00, 0x10, 0x8c, 0x03, 0x6e, 0x65, 0x67, 0x94, 0x8a, 0x09, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xc0, 0x8c, 0x01, 0x66, 0x94, 0x5d,
	0x94, 0x28, 0x47, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x47,
	0x7f, 0xf0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x47, 0x3f, 0xf8, 0x00,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x65, 0x8c, 0x01, 0x62, 0x94, 0x43, 0x02,
	0x00, 0xff, 0x94, 0x8c, 0x01, 0x73, 0x94, 0x8f, 0x94, 0x28, 0x4b, 0x01,
	0x4b, 0x02, 0x90, 0x8c, 0x02, 0x66, 0x73, 0x94, 0x28, 0x4b, 0x03, 0x91,
	0x94, 0x8c, 0x01, 0x75, 0x94, 0x8c, 0x07, 0x68, 0xc3, 0xa9, 0xf0, 0x9f,
	0x98, 0x80, 0x94, 0x8c, 0x01, 0x6e, 0x94, 0x4e, 0x8c, 0x01, 0x74, 0x94,
	0x88, 0x89, 0x86, 0x94, 0x8c, 0x01, 0x65, 0x94, 0x29, 0x8c, 0x04, 0x73,
	0x65, 0x6c, 0x66, 0x94, 0x68, 0x00, 0x75, 0x2e,
};

/* l = []; t = (l,); l.append(t); pickle.dumps(t, 1): POP_MARK, then GET */
static const uint8_t py_rt1[] = {
	0x28, 0x5d, 0x71, 0x00, 0x28, 0x68, 0x00, 0x74, 0x71, 0x01, 0x61, 0x31,
	0x68, 0x01, 0x2e,
};

/* the same at protocol 2: POP, then GET */
static const uint8_t py_rt2[] = {
	0x80, 0x02, 0x5d, 0x71, 0x00, 0x68, 0x00, 0x85, 0x71, 0x01, 0x61, 0x30,
	0x68, 0x01, 0x2e,
};

/* an OrderedDict with _metadata, protocol 2 (REDUCE, SETITEMS, BUILD) */
static const uint8_t py_od[] = {
	0x80, 0x02, 0x63, 0x63, 0x6f, 0x6c, 0x6c, 0x65, 0x63, 0x74, 0x69, 0x6f,
	0x6e, 0x73, 0x0a, 0x4f, 0x72, 0x64, 0x65, 0x72, 0x65, 0x64, 0x44, 0x69,
	0x63, 0x74, 0x0a, 0x71, 0x00, 0x29, 0x52, 0x71, 0x01, 0x58, 0x01, 0x00,
	0x00, 0x00, 0x61, 0x71, 0x02, 0x4b, 0x01, 0x73, 0x7d, 0x71, 0x03, 0x58,
	0x09, 0x00, 0x00, 0x00, 0x5f, 0x6d, 0x65, 0x74, 0x61, 0x64, 0x61, 0x74,
	0x61, 0x71, 0x04, 0x7d, 0x71, 0x05, 0x58, 0x00, 0x00, 0x00, 0x00, 0x71,
	0x06, 0x7d, 0x71, 0x07, 0x58, 0x07, 0x00, 0x00, 0x00, 0x76, 0x65, 0x72,
	0x73, 0x69, 0x6f, 0x6e, 0x71, 0x08, 0x4b, 0x01, 0x73, 0x73, 0x73, 0x62,
	0x2e,
};

/* ---- helpers ---------------------------------------------------------- */

static struct pt_pickle *load_named(const char *name, const uint8_t *p,
				     size_t n)
{
	struct pt_error err = { 0 };
	struct pt_pickle *pk = NULL;
	size_t used;
	int rc = pt_pickle_load(&pk, p, n, &used, NULL, &err);

	if (rc)
		fail_msg("%s: load: %s", name, err.msg);
	return pk;
}

static struct pt_pickle *load(const uint8_t *p, size_t n)
{
	return load_named("pickle", p, n);
}

static unsigned proto_of(const struct pt_pickle *pk)
{
	return pt_pickle_protocol(pk) < 2 ? 2 : (unsigned)pt_pickle_protocol(pk);
}

/* Emit @root; 0 or the error (message in @err). */
static int emit(const struct pt_value *root, unsigned proto,
		const struct pt_limits *lim, struct pt_buf *out,
		struct pt_error *err)
{
	struct pt_pkemit_opts o = { .proto = proto, .lim = lim };

	pt_buf_init(out);
	pt_error_clear(err);
	return pt_pickle_emit(root, &o, out, err);
}

/* Decode @p, write it back into @out, decode that and compare. */
static void roundtrip(const char *name, const uint8_t *p, size_t n,
		      struct pt_buf *out)
{
	struct pt_pickle *a = load_named(name, p, n), *b;
	struct pt_error err;
	char why[512];

	if (emit(pt_pickle_root(a), proto_of(a), NULL, out, &err))
		fail_msg("%s: emit: %s", name, err.msg);
	b = load_named(name, (const uint8_t *)out->p, out->len);
	if (pickle_eq(pt_pickle_root(a), pt_pickle_root(b), why, sizeof(why)))
		fail_msg("%s: graphs differ: %s", name, why);
	pt_pickle_free(a);
	pt_pickle_free(b);
}

static void assert_bytes(const char *name, const struct pt_buf *out,
			 const uint8_t *want, size_t n)
{
	size_t i;

	for (i = 0; i < n && i < out->len; i++)
		if ((uint8_t)out->p[i] != want[i])
			break;
	if (i != n || out->len != n) {
		fprintf(stderr, "written: ");
		for (i = 0; i < out->len && i < 200; i++)
			fprintf(stderr, out->p[i] >= 32 && out->p[i] < 127 ?
				"%c" : "\\x%02x", (uint8_t)out->p[i]);
		fprintf(stderr, "\n");
		fail_msg("%s: %zu bytes, want %zu; first difference at %zu",
			 name, out->len, n, i);
	}
}

static bool has(const struct pt_buf *b, const char *s, size_t n)
{
	return memmem(b->p, b->len, s, n) != NULL;
}

/* ---- every opcode ----------------------------------------------------- */

struct rt_case {
	const char *name;
	const uint8_t *p;
	size_t n;
	const uint8_t *want;    /* the bytes CPython writes, or NULL */
	size_t want_n;
};

#define CASE(name, lit) { name, S(lit), NULL, 0 }
#define EXACT(name, lit, out) { name, S(lit), S(out) }
#define ARR(name, arr) { name, arr, sizeof(arr), NULL, 0 }

static const struct rt_case cases[] = {
	ARR("cpython protocol 0", py_p0),
	ARR("cpython protocol 4", py_p4),
	ARR("cpython protocol 5", py_p5),
	ARR("cpython recursive tuple, protocol 1", py_rt1),
	{ "cpython recursive tuple, protocol 2", py_rt2, sizeof(py_rt2),
	  py_rt2, sizeof(py_rt2) },
	ARR("cpython OrderedDict with _metadata", py_od),
	EXACT("shared string", "\x80\x02X\x01\x00\x00\x00" "aq\x00h\x00\x86.",
	      "\x80\x02X\x01\x00\x00\x00" "aq\x00h\x00\x86."),
	EXACT("unused memo entries dropped",
	      "\x80\x02X\x01\x00\x00\x00" "aq\x05X\x01\x00\x00\x00" "bq\x07\x86q\x09.",
	      "\x80\x02X\x01\x00\x00\x00" "aX\x01\x00\x00\x00" "b\x86."),
	EXACT("dict holding itself", "\x80\x02}q\x00X\x01\x00\x00\x00sh\x00s.",
	      "\x80\x02}q\x00X\x01\x00\x00\x00sh\x00s."),
	EXACT("call with items, set items and state",
	      "\x80\x02" "cmod\nC\n)R(K\x01K\x02" "e(X\x01\x00\x00\x00kK\x03u}b.",
	      "\x80\x02" "cmod\nC\n)R(K\x01K\x02" "eX\x01\x00\x00\x00kK\x03s}b."),
	EXACT("NEWOBJ with BUILD",
	      "\x80\x02" "cmod\nC\nq\x00)\x81q\x01}q\x02X\x01\x00\x00\x00" "aK\x01sb.",
	      "\x80\x02" "cmod\nC\n)\x81}X\x01\x00\x00\x00" "aK\x01sb."),
	EXACT("NEWOBJ_EX", "\x80\x04" "cmod\nC\n)}X\x01\x00\x00\x00kK\x01s\x92.",
	      "\x80\x04" "cmod\nC\n)}X\x01\x00\x00\x00kK\x01s\x92."),
	EXACT("NEWOBJ_EX without keywords", "\x80\x04" "cmod\nC\n)}\x92.",
	      "\x80\x04" "cmod\nC\n)}\x92."),
	EXACT("INST with BUILD", "(K\x01imod\nC\n}b.",
	      "\x80\x02(cmod\nC\nK\x01o}b."),
	EXACT("OBJ", "(cmod\nC\nK\x01K\x02o.", "\x80\x02(cmod\nC\nK\x01K\x02o."),
	EXACT("OBJ without arguments", "(cmod\nC\no.", "\x80\x02(cmod\nC\no."),
	EXACT("Python 2 strings and names",
	      "\x80\x02(U\x03" "abcT\x03\x00\x00\x00xyzS'q\\x00'\n"
	      "c__builtin__\nunicode\ncopy_reg\n_reconstructor\nt.",
	      "\x80\x02(U\x03" "abcU\x03xyzU\x02q\x00"
	      "c__builtin__\nunicode\ncopy_reg\n_reconstructor\nt."),
	/* translated while the protocol was 2, written at 3 as translated */
	EXACT("PROTO 3 after a Python 2 global",
	      "\x80\x02" "c__builtin__\nset\n\x80\x03.",
	      "\x80\x03" "cbuiltins\nset\n."),
	EXACT("protocol 0 set", "c__builtin__\nset\n((lp0\nI1\naI2\natRp1\n.",
	      "\x80\x02" "c__builtin__\nset\n](K\x01K\x02" "e\x85R."),
	/* made inside its own argument list, then dropped: POP the outer
	 * tuple's item and fetch the tuple, POP the callable and the
	 * arguments and fetch the call */
	EXACT("recursive call at the root",
	      "\x80\x02]q\x00" "cmod\nf\nh\x00\x85Rq\x01" "a0h\x01.",
	      "\x80\x02" "cmod\nf\nq\x00]q\x01h\x00h\x01\x85q\x02Rq\x03"
	      "a0h\x02" "00h\x03."),
	EXACT("floats: -0.0, inf, nan with a payload, -inf",
	      "\x80\x02(G\x80\x00\x00\x00\x00\x00\x00\x00"
	      "G\x7f\xf0\x00\x00\x00\x00\x00\x00G\x7f\xf8\x00\x00\x00\x00\x00\x01"
	      "G\xff\xf0\x00\x00\x00\x00\x00\x00t.",
	      "\x80\x02(G\x80\x00\x00\x00\x00\x00\x00\x00"
	      "G\x7f\xf0\x00\x00\x00\x00\x00\x00G\x7f\xf8\x00\x00\x00\x00\x00\x01"
	      "G\xff\xf0\x00\x00\x00\x00\x00\x00t."),
	CASE("text floats", "(F-0.0\nFnan\nFinf\nF1e308\nF0.1\nt."),
	EXACT("ints of every size",
	      "\x80\x02(K\x00M\xff\xffJ\xff\xff\xff\xff"
	      "\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x80\x00"
	      "\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x80t.",
	      "\x80\x02(K\x00M\xff\xffJ\xff\xff\xff\xff"
	      "\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x80\x00"
	      "\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x80t."),
	CASE("text ints", "(I123456789012345678901234567890\nL-5L\nI01\nI00\n"
	     "L-99999999999999999999999L\nt."),
	EXACT("bytes and bytearray",
	      "\x80\x05(C\x02\x00\xff" "B\x03\x00\x00\x00" "abc"
	      "\x8e\x01\x00\x00\x00\x00\x00\x00\x00z"
	      "\x96\x02\x00\x00\x00\x00\x00\x00\x00hit.",
	      "\x80\x05(C\x02\x00\xff" "C\x03" "abcC\x01z"
	      "\x96\x02\x00\x00\x00\x00\x00\x00\x00hit."),
	EXACT("set and frozenset", "\x80\x04\x8f(K\x01K\x02\x90(K\x03\x91\x86.",
	      "\x80\x04\x8f(K\x01K\x02\x90(K\x03\x91\x86."),
	EXACT("set of one, empty set, empty frozenset",
	      "\x80\x04\x8f(K\x01\x90\x8f(\x91\x87.",
	      "\x80\x04\x8f(K\x01\x90\x8f(\x91\x87."),
	EXACT("text persistent id", "PABC\n.",
	      "\x80\x02X\x03\x00\x00\x00" "ABCQ."),
	EXACT("torch storage persistent id",
	      "\x80\x02(X\x07\x00\x00\x00storageq\x00" "ctorch\nFloatStorage\n"
	      "q\x01X\x01\x00\x00\x00" "0q\x02X\x03\x00\x00\x00" "cpuq\x03K\x04tq\x04Q.",
	      "\x80\x02(X\x07\x00\x00\x00storagectorch\nFloatStorage\n"
	      "X\x01\x00\x00\x00" "0X\x03\x00\x00\x00" "cpuK\x04tQ."),
	CASE("text unicode", "(V\\u00e9t\\U0001f600\nV\\ud800\nVa\\\\u0041\nt."),
	EXACT("STACK_GLOBAL of a name with a newline",
	      "\x80\x04\x8c\x03" "a\nb\x94\x8c\x01" "c\x94\x93.",
	      "\x80\x04X\x03\x00\x00\x00" "a\nbX\x01\x00\x00\x00" "c\x93."),
	EXACT("DUP, POP_MARK, MEMOIZE, FRAME",
	      "\x80\x04\x95\x0c\x00\x00\x00\x00\x00\x00\x00"
	      "]\x94(K\x01K\x02" "1" "2" "0" "h\x00.",
	      "\x80\x04]."),
	EXACT("a tuple and a list sharing None, bools, ints and ()",
	      "\x80\x02(NN\x88\x88\x89K\x05K\x05))t.",
	      "\x80\x02(NN\x88\x88\x89K\x05K\x05))t."),
};

static void test_cases(void **state)
{
	struct pt_buf out;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		roundtrip(cases[i].name, cases[i].p, cases[i].n, &out);
		if (cases[i].want)
			assert_bytes(cases[i].name, &out, cases[i].want,
				     cases[i].want_n);
		pt_buf_free(&out);
	}
}

/*
 * 1001 items.  A list or dict: MARK, 1000 items, APPENDS/SETITEMS, then
 * MARK, the last item, APPENDS/SETITEMS again (CPython's C pickler); the
 * items set onto a call (an OrderedDict's): the last batch of one is
 * SETITEM.
 */
static void test_batches(void **state)
{
	static const char *const head[] = { "\x80\x02](", "\x80\x02}(",
					    "\x80\x02" "cmod\nC\n)R(" };
	static const char tail_in[] = { 'e', 'u', 'u' };
	static const char *const tail[] = { "e(", "u(", "u" };
	static const char *const last[] = { "e.", "u.", "s." };
	struct pt_buf in, want, out;
	int i, k;

	(void)state;
	for (k = 0; k < 3; k++) {
		pt_buf_init(&in);
		pt_buf_init(&want);
		pt_buf_puts(&in, head[k]);
		pt_buf_puts(&want, head[k]);
		for (i = 0; i < 1001; i++) {
			char item[3] = { 'M', (char)(i & 0xff), (char)(i >> 8) };
			char small[2] = { 'K', (char)i };
			int pair;

			for (pair = 0; pair < (k ? 2 : 1); pair++) {
				pt_buf_add(&in, item, 3);
				pt_buf_add(&want, i < 256 ? small : item,
					   i < 256 ? 2 : 3);
			}
			if (i == 999)
				pt_buf_puts(&want, tail[k]);
		}
		pt_buf_putc(&in, tail_in[k]);
		pt_buf_putc(&in, '.');
		pt_buf_puts(&want, last[k]);
		roundtrip("1001 items", (const uint8_t *)in.p, in.len, &out);
		assert_bytes("1001 items", &out, (const uint8_t *)want.p,
			     want.len);
		pt_buf_free(&in);
		pt_buf_free(&want);
		pt_buf_free(&out);
	}
}

/* Big integers: LONG4 past 255 bytes, kept byte for byte. */
static void test_long4(void **state)
{
	struct pt_buf in, out;
	uint8_t le[300];

	(void)state;
	memset(le, 0xa5, sizeof(le));
	pt_buf_init(&in);
	pt_buf_add(&in, "\x80\x02\x8b\x2c\x01\x00\x00", 7);
	pt_buf_add(&in, le, sizeof(le));
	pt_buf_putc(&in, '.');
	roundtrip("LONG4", (const uint8_t *)in.p, in.len, &out);
	assert_bytes("LONG4", &out, (const uint8_t *)in.p, in.len);
	pt_buf_free(&in);
	pt_buf_free(&out);
}

/* The opcode that made an object and a global's spelling survive. */
static void test_flags(void **state)
{
	struct pt_pickle *a = load(S("(K\x01imod\nC\n.")), *b;
	struct pt_error err;
	struct pt_buf out;
	const struct pt_value *g;

	(void)state;
	assert_int_equal(emit(pt_pickle_root(a), 2, NULL, &out, &err), 0);
	b = load((const uint8_t *)out.p, out.len);
	assert_true(pt_pickle_root(b)->flags & PT_VF_INST);
	assert_false(has(&out, "imod", 4));
	pt_buf_free(&out);
	pt_pickle_free(a);
	pt_pickle_free(b);

	a = load(S("c__builtin__\nunicode\n."));
	g = pt_pickle_root(a);
	assert_string_equal(g->u.global.module, "builtins");
	assert_string_equal(g->u.global.name, "str");
	assert_non_null(g->u.global.py2);
	assert_string_equal(g->u.global.py2, "__builtin__");
	assert_string_equal(g->u.global.py2 + 12, "unicode");
	/* at protocol 3 and up the unpickler translates nothing: the new
	 * name is written */
	assert_int_equal(emit(g, 3, NULL, &out, &err), 0);
	assert_true(has(&out, "cbuiltins\nstr\n", 14));
	pt_buf_free(&out);
	assert_int_equal(emit(g, 2, NULL, &out, &err), 0);
	assert_true(has(&out, "c__builtin__\nunicode\n", 21));
	pt_buf_free(&out);
	pt_pickle_free(a);
	assert_int_equal(emit(g = NULL, 1, NULL, &out, &err), -EINVAL);
	pt_buf_free(&out);
}

/* Nodes an editor made (no ids of the pickle, on the stack here): one
 * string reached twice is put once; a dict added to itself works. */
static void test_editor_nodes(void **state)
{
	struct pt_value s = { .kind = PT_V_STR }, l = { .kind = PT_V_LIST };
	struct pt_value d = { .kind = PT_V_DICT }, *items[3], *kv[2];
	struct pt_pickle *b;
	struct pt_error err;
	struct pt_buf out;
	const struct pt_value *r;

	(void)state;
	s.u.s.p = (const uint8_t *)"key";
	s.u.s.len = 3;
	items[0] = &s;
	items[1] = &s;
	items[2] = &d;
	l.u.seq.v = items;
	l.u.seq.n = 3;
	kv[0] = &s;
	kv[1] = &l;
	d.u.dict.kv.v = kv;
	d.u.dict.kv.n = 2;
	assert_int_equal(emit(&l, 2, NULL, &out, &err), 0);
	assert_bytes("editor nodes", &out,
		     S("\x80\x02]q\x00(X\x03\x00\x00\x00keyq\x01h\x01}"
		       "h\x01h\x00se."));
	b = load((const uint8_t *)out.p, out.len);
	r = pt_pickle_root(b);
	assert_ptr_equal(r->u.seq.v[0], r->u.seq.v[1]);
	assert_ptr_equal(r->u.seq.v[2]->u.dict.kv.v[1], r);
	pt_pickle_free(b);
	pt_buf_free(&out);
}

/* ---- refusals ---------------------------------------------------------- */

static int claim(void *ctx, struct pt_value *call, struct pt_error *err)
{
	(void)ctx;
	(void)err;
	(void)call;
	return 1;
}

static void test_lean(void **state)
{
	static const uint8_t p[] = "\x80\x02" "cmod\nf\n(X\x01\x00\x00\x00" "a"
				   "X\x01\x00\x00\x00" "btR.";
	struct pt_pickle *pk = NULL;
	struct pt_error err = { 0 };
	struct pt_buf out;
	size_t used;

	(void)state;
	assert_int_equal(pt_pickle_load_lean(&pk, p, sizeof(p) - 1, &used,
					     NULL, claim, NULL, &err), 0);
	assert_true(pt_pickle_root(pk)->flags & PT_VF_LEAN);
	assert_int_equal(emit(pt_pickle_root(pk), 2, NULL, &out, &err),
			 -EINVAL);
	assert_non_null(strstr(err.msg, "loaded lean"));
	pt_buf_free(&out);
	pt_pickle_free(pk);
}

/* 300 nested tuples: written within the default depth, refused past a
 * depth cap of 100. */
static void test_depth(void **state)
{
	struct pt_pickle *pk;
	struct pt_limits lim;
	struct pt_error err;
	struct pt_buf in, out;
	int i;

	(void)state;
	pt_buf_init(&in);
	pt_buf_add(&in, "\x80\x02N", 3);
	for (i = 0; i < 300; i++)
		pt_buf_putc(&in, '\x85');
	pt_buf_putc(&in, '.');
	roundtrip("300 nested tuples", (const uint8_t *)in.p, in.len, &out);
	assert_bytes("300 nested tuples", &out, (const uint8_t *)in.p, in.len);
	pt_buf_free(&out);
	pk = load((const uint8_t *)in.p, in.len);
	pt_limits_default(&lim);
	lim.max_depth = 100;
	assert_int_equal(emit(pt_pickle_root(pk), 2, &lim, &out, &err),
			 -EFBIG);
	assert_non_null(strstr(err.msg, "nested deeper than 100"));
	pt_buf_free(&out);
	pt_pickle_free(pk);
	pt_buf_free(&in);
}

/* A tuple holding itself (no pickle makes one; an editor could): it is
 * written again inside itself until the depth cap ends it. */
static void test_immutable_cycle(void **state)
{
	struct pt_value t = { .kind = PT_V_TUPLE }, *items[1] = { &t };
	struct pt_error err;
	struct pt_buf out;

	(void)state;
	t.u.seq.v = items;
	t.u.seq.n = 1;
	assert_int_equal(emit(&t, 2, NULL, &out, &err), -EFBIG);
	assert_non_null(strstr(err.msg, "nested deeper than"));
	pt_buf_free(&out);
}

/* ---- the persistent-id hook ------------------------------------------ */

/* Renames a torch storage key K to "kK", keeping the other parts (the
 * original nodes, memo shared); fails on key "bad". */
static int rename_key(void *ctx, struct pt_pkemit *e,
		      const struct pt_value *persid, struct pt_error *err)
{
	const struct pt_value *pid = persid->u.pid;
	struct pt_value t = { .kind = PT_V_TUPLE }, key = { .kind = PT_V_STR };
	struct pt_value *items[5];
	char name[64];
	size_t i;

	(*(int *)ctx)++;
	assert_int_equal(pid->kind, PT_V_TUPLE);
	assert_int_equal(pid->u.seq.n, 5);
	if (pid->u.seq.v[2]->u.s.len == 3)
		return pt_fail(err, -EIO, "hook: bad key");
	for (i = 0; i < 5; i++)
		items[i] = pid->u.seq.v[i];
	snprintf(name, sizeof(name), "k%.*s", (int)pid->u.seq.v[2]->u.s.len,
		 (const char *)pid->u.seq.v[2]->u.s.p);
	key.u.s.p = (const uint8_t *)name;
	key.u.s.len = strlen(name);
	items[2] = &key;
	t.u.seq.v = items;
	t.u.seq.n = 5;
	return pt_pkemit_value(e, &t);
}

static void test_pid_hook(void **state)
{
	/* [storage 0, storage 1, the first again]: two BINPERSIDs sharing
	 * the storage type and 'cpu', and a list holding one twice */
	static const uint8_t p[] =
		"\x80\x02]((X\x07\x00\x00\x00storageq\x00" "ctorch\nFloatStorage\n"
		"q\x01X\x01\x00\x00\x00" "0X\x03\x00\x00\x00" "cpuq\x02K\x04tQq\x03"
		"(h\x00h\x01X\x01\x00\x00\x00" "1h\x02K\x02tQh\x03" "e.";
	static const uint8_t bad[] =
		"\x80\x02(X\x07\x00\x00\x00storagectorch\nFloatStorage\n"
		"X\x03\x00\x00\x00" "badX\x03\x00\x00\x00" "cpuK\x04tQ.";
	struct pt_pkemit_opts o = { .pid = rename_key };
	struct pt_pickle *a = load(p, sizeof(p) - 1), *b;
	const struct pt_value *r;
	struct pt_error err = { 0 };
	struct pt_buf out;
	int calls = 0;

	(void)state;
	o.pid_ctx = &calls;
	pt_buf_init(&out);
	assert_int_equal(pt_pickle_emit(pt_pickle_root(a), &o, &out, &err), 0);
	assert_int_equal(calls, 4);     /* twice each: both passes */
	b = load((const uint8_t *)out.p, out.len);
	r = pt_pickle_root(b);
	assert_int_equal(r->u.seq.n, 3);
	assert_ptr_equal(r->u.seq.v[0], r->u.seq.v[2]);
	assert_int_equal(r->u.seq.v[1]->u.pid->u.seq.v[2]->u.s.len, 2);
	assert_memory_equal(r->u.seq.v[1]->u.pid->u.seq.v[2]->u.s.p, "k1", 2);
	assert_memory_equal(r->u.seq.v[0]->u.pid->u.seq.v[2]->u.s.p, "k0", 2);
	/* the storage type is one global, written once */
	assert_ptr_equal(r->u.seq.v[0]->u.pid->u.seq.v[1],
			 r->u.seq.v[1]->u.pid->u.seq.v[1]);
	assert_false(has(&out, "FloatStorage\nq\x01" "c", 16));
	pt_pickle_free(b);
	pt_pickle_free(a);
	pt_buf_free(&out);

	a = load(bad, sizeof(bad) - 1);
	pt_buf_init(&out);
	assert_int_equal(pt_pickle_emit(pt_pickle_root(a), &o, &out, &err),
			 -EIO);
	assert_string_equal(err.msg, "hook: bad key");
	pt_pickle_free(a);
	pt_buf_free(&out);
}

/* ---- the real fixtures --------------------------------------------------- */

static int n_real;

/* Every pickle in @p[0..@n): a stream of up to five (legacy files). */
static void real_stream(const char *path, const uint8_t *p, size_t n)
{
	struct pt_pickle *a = NULL;
	struct pt_error err = { 0 };
	struct pt_buf out;
	size_t off = 0, used;
	char name[4200];
	int i;

	for (i = 0; i < 5 && off < n; i++, off += used) {
		if (pt_pickle_load(&a, p + off, n - off, &used, NULL, &err))
			break;
		pt_pickle_free(a);
		snprintf(name, sizeof(name), "%.4100s, pickle at %zu", path, off);
		roundtrip(name, p + off, used, &out);
		pt_buf_free(&out);
		n_real++;
	}
}

static void real_zip(const char *path, struct pt_source *src)
{
	struct pt_error err = { 0 };
	struct pt_zip *z = NULL;
	const struct pt_zip_entry *e;
	struct pt_limits lim;
	uint8_t *p;
	size_t n;
	uint64_t i;
	char name[4200];

	pt_limits_default(&lim);
	if (pt_zip_open(&z, src, &lim, &err))
		return;
	for (i = 0; i < pt_zip_info(z)->n_entries; i++) {
		e = pt_zip_entry_at(z, i);
		if (e->name_len < 4 ||
		    strcmp(e->name + e->name_len - 4, ".pkl") != 0 ||
		    pt_zip_read(z, e, &p, &n, &err))
			continue;
		snprintf(name, sizeof(name), "%.2000s: %.2000s", path, e->name);
		real_stream(name, p, n);
		free(p);
	}
	pt_zip_close(z);
}

static void real_file(const char *path)
{
	struct pt_error err = { 0 };
	struct pt_source *src = NULL;
	uint8_t head[4], *p;
	struct stat st;
	FILE *f;

	if (stat(path, &st) || !S_ISREG(st.st_mode) || st.st_size == 0 ||
	    st.st_size > 64 << 20 || !(f = fopen(path, "rb")))
		return;
	p = malloc((size_t)st.st_size);
	assert_non_null(p);
	assert_int_equal(fread(p, 1, (size_t)st.st_size, f), st.st_size);
	fclose(f);
	memcpy(head, p, 4);
	if (!memcmp(head, "PK\x03\x04", 4)) {
		assert_int_equal(pt_source_open_file(path, &src, &err), 0);
		real_zip(path, src);
		pt_source_close(src);
	} else {
		real_stream(path, p, (size_t)st.st_size);
	}
	free(p);
}

static void test_fixtures(void **state)
{
	const char *shared = ptfs_shared_dir();
	char real[4200], path[8600];
	struct dirent *e, *f;
	DIR *d, *sub;

	(void)state;
	snprintf(real, sizeof(real), "%s/fixtures/real", shared);
	d = opendir(real);
	if (!d)
		PTFS_SKIP("PTFS_REQUIRE_FIXTURES", "no fixture corpus (%s)", real);
	/* <repo>/<file>; <repo>/malicious/ is left to test_pickle.c */
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%.4200s/%.255s", real, e->d_name);
		sub = opendir(path);
		while (sub && (f = readdir(sub)) != NULL) {
			char file[2300];

			if (f->d_name[0] == '.')
				continue;
			snprintf(file, sizeof(file), "%.2000s/%.255s", path, f->d_name);
			real_file(file);
		}
		if (sub)
			closedir(sub);
	}
	closedir(d);
	print_message("%d pickles of the real fixtures written back\n",
		      n_real);
	assert_true(n_real > 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cases),
		cmocka_unit_test(test_batches),
		cmocka_unit_test(test_long4),
		cmocka_unit_test(test_flags),
		cmocka_unit_test(test_editor_nodes),
		cmocka_unit_test(test_lean),
		cmocka_unit_test(test_depth),
		cmocka_unit_test(test_immutable_cycle),
		cmocka_unit_test(test_pid_hook),
		cmocka_unit_test(test_fixtures),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
