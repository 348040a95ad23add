/* SPDX-License-Identifier: MIT */
/*
 * test_pickle.c -- the safe pickle machine: every opcode, memo sharing,
 * cycles, calls and objects, limits, corrupt input, the disassembler, and
 * real files from $PTFS_SHARED/fixtures (skipped when absent).
 *
 * The pickles marked "python" were made with /usr/bin/python3's pickle
 * module from plain data (the expression is in the comment); the others are
 * written by hand.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <dirent.h>
#include <sys/stat.h>
#include <cmocka.h>
#include "require.h"

#include "base/text.h"
#include "base/cancel.h"
#include "decode/pickle.h"

/* ---- describing a graph ----------------------------------------------- */

struct desc {
	struct pt_buf b;
	uint32_t path[32];      /* ids of the nodes being described */
	int depth;
};

static void d_bytes(struct desc *d, const struct pt_value *v, bool text)
{
	size_t i;

	for (i = 0; i < v->u.s.len; i++) {
		uint8_t c = v->u.s.p[i];

		if (i == 16) {
			pt_buf_printf(&d->b, "...(%zu)", v->u.s.len);
			break;
		}

		if (c == '\n')
			pt_buf_puts(&d->b, "\\n");
		else if (c < 0x20 || c == 0x7f ||
			 (c >= 0x80 &&
			  (!text || !pt_utf8_valid(v->u.s.p, v->u.s.len))))
			pt_buf_printf(&d->b, "\\x%02x", c);
		else
			pt_buf_putc(&d->b, (char)c);
	}
}

static void d_val(struct desc *d, const struct pt_value *v);

static void d_seq(struct desc *d, const struct pt_vseq *s, const char *open,
		  const char *sep2, const char *close)
{
	size_t i;

	pt_buf_puts(&d->b, open);
	for (i = 0; i < s->n; i++) {
		if (i)
			pt_buf_puts(&d->b, (sep2 && i % 2) ? sep2 : ",");
		d_val(d, s->v[i]);
	}
	pt_buf_puts(&d->b, close);
}

static void d_call(struct desc *d, const struct pt_value *v)
{
	pt_buf_puts(&d->b, v->kind == PT_V_CALL ? "R(" : "O(");
	d_val(d, v->u.call.callable);
	pt_buf_putc(&d->b, ',');
	d_val(d, v->u.call.args);
	if (pt_call_kwargs(v)) {
		pt_buf_puts(&d->b, ",kw=");
		d_val(d, pt_call_kwargs(v));
	}
	if (pt_call_items(v)->n)
		d_seq(d, pt_call_items(v), ",items=[", NULL, "]");
	if (pt_call_kv(v)->n)
		d_seq(d, pt_call_kv(v), ",kv={", ":", "}");
	if (pt_call_state(v)) {
		pt_buf_puts(&d->b, ",state=");
		d_val(d, pt_call_state(v));
	}
	pt_buf_putc(&d->b, ')');
}

static void d_scalar(struct desc *d, const struct pt_value *v)
{
	size_t i;

	switch (v->kind) {
	case PT_V_NONE:
		pt_buf_puts(&d->b, "None");
		break;
	case PT_V_BOOL:
		pt_buf_puts(&d->b, v->u.b ? "True" : "False");
		break;
	case PT_V_INT:
		pt_buf_printf(&d->b, "%lld", (long long)v->u.i);
		break;
	case PT_V_BIGINT:
		pt_buf_puts(&d->b, "big(");
		if (v->u.s.len > 16) {
			pt_buf_printf(&d->b, "%zu bytes, top %02x)", v->u.s.len,
				      v->u.s.p[v->u.s.len - 1]);
			break;
		}
		for (i = 0; i < v->u.s.len; i++)
			pt_buf_printf(&d->b, "%02x", v->u.s.p[i]);
		pt_buf_putc(&d->b, ')');
		break;
	case PT_V_FLOAT:
		pt_buf_printf(&d->b, "%g", v->u.f);
		break;
	case PT_V_STR:
		if (v->flags & PT_VF_PY2STR)
			pt_buf_puts(&d->b, "py2:");
		pt_buf_putc(&d->b, '\'');
		d_bytes(d, v, true);
		pt_buf_putc(&d->b, '\'');
		if (!pt_utf8_valid(v->u.s.p, v->u.s.len))
			pt_buf_puts(&d->b, "!u");
		break;
	case PT_V_BYTES:
	case PT_V_BYTEARRAY:
		pt_buf_puts(&d->b, v->kind == PT_V_BYTES ? "b'" : "ba'");
		d_bytes(d, v, false);
		pt_buf_putc(&d->b, '\'');
		break;
	case PT_V_GLOBAL:
		pt_buf_printf(&d->b, "%s.%s", v->u.global.module,
			      v->u.global.name);
		break;
	default:
		pt_buf_puts(&d->b, "?");
		break;
	}
}

/* Test-only recursion over our own small fixtures, capped and cycle-safe. */
static void d_val(struct desc *d, const struct pt_value *v)
{
	int i;

	for (i = 0; i < d->depth; i++) {
		if (d->path[i] == v->id) {
			pt_buf_puts(&d->b, "<cycle>");
			return;
		}
	}
	if (d->depth >= 32) {
		pt_buf_puts(&d->b, "...");
		return;
	}
	d->path[d->depth++] = v->id;
	switch (v->kind) {
	case PT_V_TUPLE:
		d_seq(d, &v->u.seq, "(", NULL, v->u.seq.n == 1 ? ",)" : ")");
		break;
	case PT_V_LIST:
		d_seq(d, &v->u.seq, "[", NULL, "]");
		break;
	case PT_V_SET:
		d_seq(d, &v->u.seq, "set{", NULL, "}");
		break;
	case PT_V_FROZENSET:
		d_seq(d, &v->u.seq, "fs{", NULL, "}");
		break;
	case PT_V_DICT:
		d_seq(d, &v->u.dict.kv, "{", ":", "}");
		break;
	case PT_V_CALL:
	case PT_V_OBJ:
		d_call(d, v);
		break;
	case PT_V_PERSID:
		pt_buf_puts(&d->b, "P(");
		d_val(d, v->u.pid);
		pt_buf_putc(&d->b, ')');
		break;
	default:
		d_scalar(d, v);
		break;
	}
	d->depth--;
}

/* Describe the root of @pk; caller frees. */
static char *describe(const struct pt_pickle *pk)
{
	struct desc d;

	memset(&d, 0, sizeof(d));
	pt_buf_init(&d.b);
	d_val(&d, pt_pickle_root(pk));
	return pt_buf_take(&d.b, NULL);
}

static struct pt_pickle *load_ok(const uint8_t *p, size_t n)
{
	struct pt_pickle *pk = NULL;
	struct pt_error err;
	size_t used = 0;
	int rc;

	pt_error_clear(&err);
	rc = pt_pickle_load(&pk, p, n, &used, NULL, &err);
	if (rc != 0)
		fail_msg("load failed: %d %s", rc, err.msg);
	assert_non_null(pk);
	assert_int_equal(used, n);
	return pk;
}

/* ---- every opcode ----------------------------------------------------- */

// p0_mix: proto 0 list of scalars
static const uint8_t p0_mix[] = {
	0x28, 0x6c, 0x70, 0x30, 0x0a, 0x49, 0x31, 0x0a, 0x61, 0x56, 0x61, 0xe9,
	0x0a, 0x70, 0x31, 0x0a, 0x61, 0x46, 0x32, 0x2e, 0x35, 0x0a, 0x61, 0x4e,
	0x61, 0x49, 0x30, 0x31, 0x0a, 0x61, 0x28, 0x49, 0x31, 0x0a, 0x49, 0x32,
	0x0a, 0x74, 0x70, 0x32, 0x0a, 0x61, 0x28, 0x64, 0x70, 0x33, 0x0a, 0x56,
	0x6b, 0x0a, 0x70, 0x34, 0x0a, 0x49, 0x2d, 0x33, 0x0a, 0x73, 0x61, 0x2e,
};
// p0_shared: proto 0 shared list: PUT/GET text
static const uint8_t p0_shared[] = {
	0x28, 0x6c, 0x70, 0x30, 0x0a, 0x28, 0x6c, 0x70, 0x31, 0x0a, 0x49, 0x37,
	0x0a, 0x61, 0x61, 0x67, 0x31, 0x0a, 0x61, 0x2e,
};
// p1_mix: proto 1
static const uint8_t p1_mix[] = {
	0x5d, 0x71, 0x00, 0x28, 0x4b, 0x01, 0x58, 0x01, 0x00, 0x00, 0x00, 0x61,
	0x71, 0x01, 0x47, 0x40, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x4e,
	0x29, 0x7d, 0x71, 0x02, 0x58, 0x01, 0x00, 0x00, 0x00, 0x6b, 0x71, 0x03,
	0x4d, 0x2c, 0x01, 0x73, 0x4a, 0xfb, 0xff, 0xff, 0xff, 0x4a, 0x70, 0x11,
	0x01, 0x00, 0x65, 0x2e,
};
// p1_shared: proto 1 BINPUT/BINGET shared dict
static const uint8_t p1_shared[] = {
	0x5d, 0x71, 0x00, 0x28, 0x7d, 0x71, 0x01, 0x58, 0x01, 0x00, 0x00, 0x00,
	0x61, 0x71, 0x02, 0x4b, 0x01, 0x73, 0x68, 0x01, 0x65, 0x2e,
};
// p2_mix: proto 2 TUPLE1-3, LONG1
static const uint8_t p2_mix[] = {
	0x80, 0x02, 0x5d, 0x71, 0x00, 0x28, 0x88, 0x89, 0x4b, 0x01, 0x85, 0x71,
	0x01, 0x4b, 0x01, 0x4b, 0x02, 0x86, 0x71, 0x02, 0x4b, 0x01, 0x4b, 0x02,
	0x4b, 0x03, 0x87, 0x71, 0x03, 0x8a, 0x09, 0x00, 0x00, 0x00, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x40, 0x8a, 0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	0x00, 0x00, 0xc0, 0x8a, 0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	0x80, 0x00, 0x8a, 0x09, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f,
	0xff, 0x65, 0x2e,
};
// p2_od: proto 2 OrderedDict REDUCE SETITEMS
static const uint8_t p2_od[] = {
	0x80, 0x02, 0x63, 0x63, 0x6f, 0x6c, 0x6c, 0x65, 0x63, 0x74, 0x69, 0x6f,
	0x6e, 0x73, 0x0a, 0x4f, 0x72, 0x64, 0x65, 0x72, 0x65, 0x64, 0x44, 0x69,
	0x63, 0x74, 0x0a, 0x71, 0x00, 0x29, 0x52, 0x71, 0x01, 0x28, 0x58, 0x01,
	0x00, 0x00, 0x00, 0x61, 0x71, 0x02, 0x4b, 0x01, 0x58, 0x01, 0x00, 0x00,
	0x00, 0x62, 0x71, 0x03, 0x4b, 0x02, 0x75, 0x2e,
};
// p2_ns: proto 2 NEWOBJ BUILD
static const uint8_t p2_ns[] = {
	0x80, 0x02, 0x63, 0x61, 0x72, 0x67, 0x70, 0x61, 0x72, 0x73, 0x65, 0x0a,
	0x4e, 0x61, 0x6d, 0x65, 0x73, 0x70, 0x61, 0x63, 0x65, 0x0a, 0x71, 0x00,
	0x29, 0x81, 0x71, 0x01, 0x7d, 0x71, 0x02, 0x58, 0x02, 0x00, 0x00, 0x00,
	0x6c, 0x72, 0x71, 0x03, 0x47, 0x3f, 0xe0, 0x00, 0x00, 0x00, 0x00, 0x00,
	0x00, 0x73, 0x62, 0x2e,
};
// p3_bytes: proto 3 SHORT_BINBYTES BINBYTES
static const uint8_t p3_bytes[] = {
	0x80, 0x03, 0x5d, 0x71, 0x00, 0x28, 0x43, 0x02, 0x61, 0x62, 0x71, 0x01,
	0x42, 0x2c, 0x01, 0x00, 0x00, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78,
	0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78,
	0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78,
	0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78,
	0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78,
	0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78,
	0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78,
	0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78,
	0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78,
	0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78,
	0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78,
	0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78,
	0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78,
	0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78,
	0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78,
	0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78,
	0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78,
	0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78,
	0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78,
	0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78,
	0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78,
	0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78,
	0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78,
	0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78,
	0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78,
	0x78, 0x78, 0x78, 0x78, 0x78, 0x71, 0x02, 0x65, 0x2e,
};
// p4_mix: proto 4 FRAME MEMOIZE STACK_GLOBAL sets
static const uint8_t p4_mix[] = {
	0x80, 0x04, 0x95, 0x72, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x7d,
	0x94, 0x28, 0x8c, 0x01, 0x73, 0x94, 0x8f, 0x94, 0x28, 0x4b, 0x01, 0x4b,
	0x02, 0x90, 0x8c, 0x01, 0x66, 0x94, 0x28, 0x4b, 0x03, 0x91, 0x94, 0x8c,
	0x01, 0x75, 0x94, 0x58, 0x2c, 0x01, 0x00, 0x00, 0x78, 0x78, 0x78, 0x78,
	0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78,
	0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78,
	0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78,
	0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78,
	0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78,
	0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78,
	0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78,
	0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78,
	0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78,
	0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78,
	0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78,
	0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78,
	0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78,
	0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78,
	0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78,
	0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78,
	0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78,
	0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78,
	0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78,
	0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78,
	0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78,
	0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78,
	0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78,
	0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78,
	0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x94, 0x8c, 0x01, 0x63,
	0x94, 0x8c, 0x0b, 0x63, 0x6f, 0x6c, 0x6c, 0x65, 0x63, 0x74, 0x69, 0x6f,
	0x6e, 0x73, 0x94, 0x8c, 0x0b, 0x4f, 0x72, 0x64, 0x65, 0x72, 0x65, 0x64,
	0x44, 0x69, 0x63, 0x74, 0x94, 0x93, 0x94, 0x75, 0x2e,
};
// p4_newobj_ex: proto 4 NEWOBJ_EX
static const uint8_t p4_newobj_ex[] = {
	0x80, 0x04, 0x95, 0x1a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x8c,
	0x01, 0x6d, 0x94, 0x8c, 0x01, 0x43, 0x94, 0x93, 0x94, 0x4b, 0x01, 0x85,
	0x94, 0x7d, 0x94, 0x8c, 0x01, 0x61, 0x94, 0x4b, 0x02, 0x73, 0x92, 0x94,
	0x2e,
};
// p5_ba: proto 5 BYTEARRAY8
static const uint8_t p5_ba[] = {
	0x80, 0x05, 0x95, 0x0d, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x96,
	0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x61, 0x62, 0x94, 0x2e,
};
// p2_long4: proto 2 LONG4
static const uint8_t p2_long4[] = {
	0x80, 0x02, 0x8b, 0x07, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x2e,
};
// p0_bytes: proto 0 bytes via _codecs.encode
static const uint8_t p0_bytes[] = {
	0x63, 0x5f, 0x63, 0x6f, 0x64, 0x65, 0x63, 0x73, 0x0a, 0x65, 0x6e, 0x63,
	0x6f, 0x64, 0x65, 0x0a, 0x70, 0x30, 0x0a, 0x28, 0x56, 0x5c, 0x75, 0x30,
	0x30, 0x30, 0x30, 0xff, 0x0a, 0x70, 0x31, 0x0a, 0x56, 0x6c, 0x61, 0x74,
	0x69, 0x6e, 0x31, 0x0a, 0x70, 0x32, 0x0a, 0x74, 0x70, 0x33, 0x0a, 0x52,
	0x70, 0x34, 0x0a, 0x2e,
};
// p0_float: proto 0 FLOAT text inf/nan
static const uint8_t p0_float[] = {
	0x28, 0x6c, 0x70, 0x30, 0x0a, 0x46, 0x69, 0x6e, 0x66, 0x0a, 0x61, 0x46,
	0x2d, 0x31, 0x2e, 0x35, 0x65, 0x2b, 0x33, 0x30, 0x30, 0x0a, 0x61, 0x46,
	0x6e, 0x61, 0x6e, 0x0a, 0x61, 0x2e,
};
// p2_binfloat: proto 2 BINFLOAT
static const uint8_t p2_binfloat[] = {
	0x80, 0x02, 0x47, 0xbf, 0xb9, 0x99, 0x99, 0x99, 0x99, 0x99, 0x9a, 0x2e,
};

#define S(lit) (const uint8_t *)(lit), sizeof(lit) - 1
#define A(arr) arr, sizeof(arr)

struct row {
	const uint8_t *p;       /* pickle bytes */
	size_t n;               /* their length */
	const char *want;       /* describe() of the root */
};

static const struct row rows[] = {
	/* python: see the arrays above */
	{ A(p0_mix), "[1,'a\xc3\xa9" "',2.5,None,True,(1,2),{'k':-3}]" },
	{ A(p0_shared), "[[7],[7]]" },
	{ A(p1_mix), "[1,'a',2.5,None,(),{'k':300},-5,70000]" },
	{ A(p1_shared), "[{'a':1},{'a':1}]" },
	{ A(p2_mix),
	  "[True,False,(1,),(1,2),(1,2,3),big(000000000000000040),big(0000000000000000c0),big(000000000000008000),big(ffffffffffffff7fff)]" },
	{ A(p2_od), "R(collections.OrderedDict,(),kv={'a':1,'b':2})" },
	{ A(p2_ns), "O(argparse.Namespace,(),state={'lr':0.5})" },
	{ A(p3_bytes), "[b'ab',b'xxxxxxxxxxxxxxxx...(300)']" },
	{ A(p4_mix),
	  "{'s':set{1,2},'f':fs{3},'u':'xxxxxxxxxxxxxxxx...(300)','c':collections.OrderedDict}" },
	{ A(p4_newobj_ex), "O(m.C,(1,),kw={'a':2})" },
	{ A(p5_ba), "ba'ab'" },
	{ A(p0_bytes), "R(_codecs.encode,('\\x00\xc3\xbf" "','latin1'))" },
	{ A(p0_float), "[inf,-1.5e+300,nan]" },
	{ A(p2_binfloat), "-0.1" },
	{ A(p2_long4), "big(263 bytes, top 10)" },
	/* STRING with escapes (octal, \x, unknown escape kept), both quotes */
	{ S("S'a\\n\\x41\\101\\q\"'\n."), "py2:'a\\nAA\\q\"'" },
	{ S("S\"x'y\"\n."), "py2:'x'y'" },
	/* BINSTRING, SHORT_BINSTRING (not UTF-8) */
	{ S("T\x03\x00\x00\x00" "abc."), "py2:'abc'" },
	{ S("U\x02\xff\xfe."), "py2:'\\xff\\xfe'!u" },
	/* UNICODE: \u, \U, an even backslash run, a raw Latin-1 byte */
	{ S("V\\u00e9\\U0001F600\\\\u0041\xe9\n."),
	  "'\xc3\xa9" "\xf0\x9f\x98\x80" "\\\\u0041\xc3\xa9" "'" },
	{ S("V\\ud800\n."), "'\\xed\\xa0\\x80'!u" },
	/* BINUNICODE with a surrogate, BINUNICODE8, BINBYTES8 */
	{ S("X\x03\x00\x00\x00\xed\xa0\x80."), "'\\xed\\xa0\\x80'!u" },
	{ S("\x8d\x02\x00\x00\x00\x00\x00\x00\x00hi."), "'hi'" },
	{ S("\x8e\x01\x00\x00\x00\x00\x00\x00\x00z."), "b'z'" },
	/* INT, LONG text */
	{ S("I123456789012345678901234567890\n."),
	  "big(d20a3f4eeee073c3f60fe98e01)" },
	{ S("I-5\n."), "-5" },
	{ S("I01\n."), "True" },
	{ S("I00\n."), "False" },
	{ S("L12L\n."), "12" },
	{ S("L-9223372036854775809L\n."), "big(ffffffffffffff7fff)" },
	{ S("L-9223372036854775808\n."), "-9223372036854775808" },
	{ S("L9223372036854775808\n."), "big(000000000000008000)" },
	/* BININT, BININT2, LONG1 with redundant sign bytes */
	{ S("J\xff\xff\xff\xff."), "-1" },
	{ S("M\xe8\x03."), "1000" },
	{ S("\x8a\x0a\xfe\xff\xff\xff\xff\xff\xff\xff\xff\xff."), "-2" },
	{ S("\x8a\x00."), "0" },
	/* FLOAT text */
	{ S("F1.5\n."), "1.5" },
	{ S("F-inf\n."), "-inf" },
	/* PERSID, BINPERSID */
	{ S("Pabc\n."), "P('abc')" },
	{ S("(X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x00"
	    "0X\x03\x00\x00\x00" "cpuK\x06tQ."),
	  "P(('storage',torch.FloatStorage,'0','cpu',6))" },
	/* INST (with Python 2 names under protocol 0), OBJ */
	{ S("(K\x01i__main__\nX\n."), "O(__main__.X,(1,))" },
	{ S("(i__builtin__\nset\n."), "O(builtins.set,())" },
	{ S("(c__main__\nX\nK\x01o."), "O(__main__.X,(1,))" },
	/* POP, POP_MARK, DUP, POP of an empty frame drops the mark */
	{ S("K\x01K\x02" "0."), "1" },
	{ S("K\x01(K\x02K\x03" "1."), "1" },
	{ S("K\x01" "2\x86."), "(1,1)" },
	{ S("K\x01(0."), "1" },
	/* LONG_BINPUT/LONG_BINGET, PUT/GET text, MEMOIZE, FRAME */
	{ S("]r\x00\x01\x00\x00j\x00\x01\x00\x00\x86."), "([],[])" },
	{ S("]p5\ng5\n\x86."), "([],[])" },
	{ S("\x80\x04]\x94h\x00\x86."), "([],[])" },
	{ S("\x80\x04\x95\x02\x00\x00\x00\x00\x00\x00\x00N."), "None" },
	/* BUILD on a dict is inert; APPEND/SETITEM onto a call */
	{ S("}Nb."), "{}" },
	{ S("c__builtin__\nlist\n)RK\x01" "a."),
	  "R(builtins.list,(),items=[1])" },
	{ S("c__main__\nX\n)\x81K\x01K\x02" "s(K\x03" "e."),
	  "O(__main__.X,(),items=[3],kv={1:2})" },
	/* STACK_GLOBAL: mapped below protocol 3 only */
	{ S("\x80\x02X\x0b\x00\x00\x00__builtin__X\x03\x00\x00\x00set\x93."),
	  "builtins.set" },
	{ S("\x80\x04X\x0b\x00\x00\x00__builtin__X\x03\x00\x00\x00set\x93."),
	  "__builtin__.set" },
	{ S("\x80\x02" "ccopy_reg\n_reconstructor\n."),
	  "copyreg._reconstructor" },
	{ S("\x80\x02" "c__builtin__\nxrange\n."), "builtins.range" },
	/* DICT, LIST, FROZENSET, EMPTY_SET + ADDITEMS by hand */
	{ S("(K\x01K\x02" "d."), "{1:2}" },
	{ S("(l."), "[]" },
	{ S("(K\x01\x91."), "fs{1}" },
	{ S("\x8f(K\x01K\x02\x90."), "set{1,2}" },
	/* NEWOBJ_EX by hand */
	{ S("c__main__\nX\n)}\x92."), "O(__main__.X,(),kw={})" },
};

static void test_opcodes(void **state)
{
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		struct pt_pickle *pk = load_ok(rows[i].p, rows[i].n);
		char *got = describe(pk);

		if (strcmp(got, rows[i].want) != 0)
			fail_msg("row %zu: got %s, want %s", i, got,
				 rows[i].want);
		free(got);
		assert_true(pt_pickle_count(pk) > 0);
		pt_pickle_free(pk);
	}
}

/* ---- graph shape ------------------------------------------------------ */

static void test_memo_shared(void **state)
{
	/* EMPTY_DICT BINPUT 0, filled by SETITEMS afterwards, BINGET 0,
	 * TUPLE2: both elements are the same, filled, node */
	static const uint8_t p[] = "}q\x00(X\x01\x00\x00\x00" "aK\x01u"
				   "h\x00\x86.";
	struct pt_pickle *pk = load_ok(p, sizeof(p) - 1);
	struct pt_value *t = pt_pickle_root(pk);

	(void)state;
	assert_int_equal(t->kind, PT_V_TUPLE);
	assert_int_equal(t->u.seq.n, 2);
	assert_ptr_equal(t->u.seq.v[0], t->u.seq.v[1]);
	assert_int_equal(t->u.seq.v[0]->kind, PT_V_DICT);
	assert_int_equal(t->u.seq.v[0]->u.dict.kv.n, 2);
	pt_pickle_free(pk);

	/* python: x = {'a': 1}; pickle.dumps([x, x], 1) */
	pk = load_ok(p1_shared, sizeof(p1_shared));
	t = pt_pickle_root(pk);
	assert_int_equal(t->kind, PT_V_LIST);
	assert_ptr_equal(t->u.seq.v[0], t->u.seq.v[1]);
	pt_pickle_free(pk);

	/* protocol 0: PUT/GET text */
	pk = load_ok(p0_shared, sizeof(p0_shared));
	t = pt_pickle_root(pk);
	assert_ptr_equal(t->u.seq.v[0], t->u.seq.v[1]);
	pt_pickle_free(pk);
}

static void test_cycle(void **state)
{
	/* EMPTY_LIST BINPUT 0 BINGET 0 APPEND: l = []; l.append(l) */
	static const uint8_t p[] = "]q\x00h\x00" "a.";
	struct pt_pickle *pk = load_ok(p, sizeof(p) - 1);
	struct pt_value *l = pt_pickle_root(pk);
	char *s;

	(void)state;
	assert_int_equal(l->kind, PT_V_LIST);
	assert_int_equal(l->u.seq.n, 1);
	assert_ptr_equal(l->u.seq.v[0], l);
	assert_int_equal(pt_pickle_count(pk), 1);
	s = describe(pk);
	assert_string_equal(s, "[<cycle>]");
	free(s);
	pt_pickle_free(pk);
}

static void test_ordered_dict(void **state)
{
	struct pt_pickle *pk = load_ok(p2_od, sizeof(p2_od));
	struct pt_value *v = pt_pickle_root(pk), *fn;

	(void)state;
	assert_int_equal(pt_pickle_protocol(pk), 2);
	assert_int_equal(v->kind, PT_V_CALL);
	fn = v->u.call.callable;
	assert_int_equal(fn->kind, PT_V_GLOBAL);
	assert_string_equal(fn->u.global.module, "collections");
	assert_string_equal(fn->u.global.name, "OrderedDict");
	assert_int_equal(v->u.call.args->kind, PT_V_TUPLE);
	assert_int_equal(v->u.call.args->u.seq.n, 0);
	assert_null(pt_call_kwargs(v));
	assert_null(pt_call_state(v));
	assert_int_equal(pt_call_kv(v)->n, 4);
	assert_int_equal(pt_call_kv(v)->v[0]->kind, PT_V_STR);
	assert_memory_equal(pt_call_kv(v)->v[0]->u.s.p, "a", 1);
	assert_int_equal(pt_call_kv(v)->v[3]->u.i, 2);
	pt_pickle_free(pk);
}

static void test_build_newobj(void **state)
{
	struct pt_pickle *pk = load_ok(p2_ns, sizeof(p2_ns));
	struct pt_value *v = pt_pickle_root(pk), *st;

	(void)state;
	assert_int_equal(v->kind, PT_V_OBJ);
	assert_string_equal(v->u.call.callable->u.global.module, "argparse");
	assert_string_equal(v->u.call.callable->u.global.name, "Namespace");
	st = pt_call_state(v);
	assert_non_null(st);
	assert_int_equal(st->kind, PT_V_DICT);
	assert_int_equal(st->u.dict.kv.n, 2);
	assert_true(st->u.dict.kv.v[1]->u.f == 0.5);
	pt_pickle_free(pk);
}

static void test_persid(void **state)
{
	/* ('storage', GLOBAL torch FloatStorage, '0', 'cpu', 6) BINPERSID */
	static const uint8_t p[] =
		"\x80\x02(X\x07\x00\x00\x00storagectorch\nFloatStorage\n"
		"X\x01\x00\x00\x00" "0X\x03\x00\x00\x00" "cpuK\x06tQ.";
	struct pt_pickle *pk = load_ok(p, sizeof(p) - 1);
	struct pt_value *v = pt_pickle_root(pk), *t, *key;

	(void)state;
	assert_int_equal(v->kind, PT_V_PERSID);
	t = v->u.pid;
	assert_int_equal(t->kind, PT_V_TUPLE);
	assert_int_equal(t->u.seq.n, 5);
	assert_int_equal(t->u.seq.v[1]->kind, PT_V_GLOBAL);
	assert_string_equal(t->u.seq.v[1]->u.global.module, "torch");
	assert_string_equal(t->u.seq.v[1]->u.global.name, "FloatStorage");
	key = t->u.seq.v[2];
	assert_int_equal(key->kind, PT_V_STR);
	assert_int_equal(key->flags, 0);
	assert_int_equal(key->u.s.len, 1);
	/* zero-copy: points into the input */
	assert_ptr_equal(key->u.s.p, p + key->u.s.in_off);
	assert_int_equal(t->u.seq.v[4]->u.i, 6);
	/* nodes: 'storage', global, '0', 'cpu', 6, tuple, persid */
	assert_int_equal(pt_pickle_count(pk), 7);
	assert_int_equal(v->id, 6);
	pt_pickle_free(pk);
}

static void test_numbers(void **state)
{
	static const uint8_t nan_text[] = "Fnan\n.";
	static const uint8_t big_text[] = "L-18446744073709551616L\n.";
	struct pt_pickle *pk;
	struct pt_value *v;

	(void)state;
	/* BINFLOAT is big-endian */
	pk = load_ok(p2_binfloat, sizeof(p2_binfloat));
	assert_true(pt_pickle_root(pk)->u.f == -0.1);
	pt_pickle_free(pk);
	pk = load_ok(nan_text, sizeof(nan_text) - 1);
	assert_true(isnan(pt_pickle_root(pk)->u.f));
	pt_pickle_free(pk);
	/* LONG4: zero-copy two's complement bytes */
	pk = load_ok(p2_long4, sizeof(p2_long4));
	v = pt_pickle_root(pk);
	assert_int_equal(v->kind, PT_V_BIGINT);
	assert_int_equal(v->u.s.len, 263);
	assert_ptr_equal(v->u.s.p, p2_long4 + v->u.s.in_off);
	pt_pickle_free(pk);
	/* -2**64 from text: arena bytes 00 x8, ff */
	pk = load_ok(big_text, sizeof(big_text) - 1);
	v = pt_pickle_root(pk);
	assert_int_equal(v->kind, PT_V_BIGINT);
	assert_int_equal(v->u.s.in_off, UINT64_MAX);
	assert_int_equal(v->u.s.len, 9);
	assert_memory_equal(v->u.s.p, "\0\0\0\0\0\0\0\0\xff", 9);
	pt_pickle_free(pk);
}

static void test_strings(void **state)
{
	static const uint8_t s1[] = "S'ab'\n.";
	static const uint8_t s2[] = "\x8c\x02\xc3\xa9.";
	struct pt_pickle *pk;
	struct pt_value *v;

	(void)state;
	pk = load_ok(s1, sizeof(s1) - 1);
	v = pt_pickle_root(pk);
	assert_int_equal(v->kind, PT_V_STR);
	assert_int_equal(v->flags, PT_VF_PY2STR);
	assert_int_equal(v->u.s.in_off, UINT64_MAX);
	pt_pickle_free(pk);
	pk = load_ok(s2, sizeof(s2) - 1);
	v = pt_pickle_root(pk);
	assert_int_equal(v->flags, 0);
	assert_int_equal(v->u.s.in_off, 2);
	assert_ptr_equal(v->u.s.p, s2 + 2);
	pt_pickle_free(pk);
}

/* ---- bad input -------------------------------------------------------- */

struct bad {
	const uint8_t *p;       /* pickle bytes */
	size_t n;               /* their length */
	int code;               /* expected return */
	const char *msg;        /* expected substring of the message */
};

static const struct bad bads[] = {
	{ S(""), -EBADMSG, "input ends at offset 0 without STOP" },
	{ S("K\x01"), -EBADMSG, "input ends at offset 2 without STOP" },
	{ S("K"), -EBADMSG, "BININT1 at offset 0: truncated argument" },
	{ S("N\x95\x01\x00"), -EBADMSG, "FRAME at offset 1: truncated" },
	{ S("\xff."), -EBADMSG, "unknown opcode 0xff at offset 0" },
	{ S("N\x00."), -EBADMSG, "unknown opcode 0x00 at offset 1" },
	{ S("."), -EBADMSG, "STOP at offset 0: stack underflow" },
	{ S("(."), -EBADMSG, "STOP at offset 1: stack underflow" },
	{ S("a."), -EBADMSG, "APPEND at offset 0: stack underflow" },
	{ S("](K\x01" "a."), -EBADMSG, "APPEND at offset 4: stack underflow" },
	{ S("K\x01K\x02" "a."), -EBADMSG, "cannot add items to a int" },
	{ S("(K\x01K\x02u."),
	  -EBADMSG, "SETITEMS at offset 5: stack underflow" },
	{ S("}(K\x01u."), -EBADMSG, "SETITEMS at offset 4: odd number" },
	{ S("(K\x01" "d."), -EBADMSG, "DICT at offset 3: odd number" },
	{ S("t."), -EBADMSG, "TUPLE at offset 0: no MARK" },
	{ S("1."), -EBADMSG, "POP_MARK at offset 0: no MARK" },
	{ S("0."), -EBADMSG, "POP at offset 0: stack underflow" },
	{ S("2."), -EBADMSG, "DUP at offset 0: stack underflow" },
	{ S("\x85."), -EBADMSG, "TUPLE1 at offset 0: stack underflow" },
	{ S("(o."), -EBADMSG, "OBJ at offset 1: no class" },
	{ S("h\x07."), -EBADMSG, "BINGET at offset 0: memo index 7 not set" },
	{ S("Nq\x07h\x08."),
	  -EBADMSG, "BINGET at offset 3: memo index 8 not set" },
	{ S("g12\n."), -EBADMSG, "GET at offset 0: memo index 12 not set" },
	{ S("Np-1\n."), -EBADMSG, "PUT at offset 1: bad memo index" },
	{ S("q\x00."), -EBADMSG, "BINPUT at offset 0: stack underflow" },
	{ S("\x8d\xff\xff\xff\xff\xff\xff\xff\x0f."), -EBADMSG,
	  "BINUNICODE8 at offset 0: length 1152921504606846975 past end" },
	{ S("X\xff\xff\xff\xff"), -EBADMSG, "BINUNICODE at offset 0: length" },
	{ S("B\x05\x00\x00\x00" "ab."),
	  -EBADMSG, "past end of input (3 bytes left)" },
	{ S("T\xff\xff\xff\xff."), -EBADMSG, "negative length -1" },
	{ S("\x8b\xfe\xff\xff\xff."),
	  -EBADMSG, "LONG4 at offset 0: negative length" },
	{ S("\x95\xff\x00\x00\x00\x00\x00\x00\x00N."), -EBADMSG,
	  "FRAME at offset 0: frame of 255 bytes past end" },
	{ S("c__main__\nX"),
	  -EBADMSG, "GLOBAL at offset 0: argument line without newline" },
	{ S("c\xff\nX\n."), -EBADMSG, "not valid UTF-8" },
	{ S("\x8c\x02m\x00\x8c\x01X\x93."), -EBADMSG, "NUL byte" },
	{ S("K\x01K\x02\x93."),
	  -EBADMSG, "STACK_GLOBAL at offset 4: module and name must be str" },
	{ S("S'abc\n."),
	  -EBADMSG, "STRING at offset 0: argument must be quoted" },
	{ S("S'\\x4'\n."), -EBADMSG, "invalid \\x escape" },
	{ S("V\\u12\n."),
	  -EBADMSG, "UNICODE at offset 0: truncated \\u escape" },
	{ S("V\\U00110000\n."), -EBADMSG, "out of range" },
	{ S("Iabc\n."), -EBADMSG, "INT at offset 0: invalid integer literal" },
	{ S("L\n."), -EBADMSG, "LONG at offset 0: invalid integer literal" },
	{ S("Fx\n."), -EBADMSG, "FLOAT at offset 0: invalid float literal" },
	{ S("NNR."),
	  -EBADMSG, "REDUCE at offset 2: arguments are a None, not a tuple" },
	{ S("N)N\x92."), -EBADMSG, "keyword arguments are a None" },
	{ S("R."), -EBADMSG, "REDUCE at offset 0: stack underflow" },
	{ S("Nb."), -EBADMSG, "BUILD at offset 1: stack underflow" },
	{ S("Q."), -EBADMSG, "BINPERSID at offset 0: stack underflow" },
	{ S("\x80\x06."),
	  -ENOTSUP, "PROTO at offset 0: unsupported protocol 6" },
	{ S("\x97."), -ENOTSUP, "NEXT_BUFFER at offset 0: out-of-band" },
	{ S("N\x98."), -ENOTSUP, "READONLY_BUFFER at offset 1" },
	{ S("\x82\x01."), -ENOTSUP, "EXT1 at offset 0: extension code 1" },
	{ S("\x83\x01\x02."),
	  -ENOTSUP, "EXT2 at offset 0: extension code 513" },
	{ S("\x84\xff\xff\xff\xff."),
	  -ENOTSUP, "EXT4 at offset 0: extension code -1" },
};

static int load_err(const uint8_t *p, size_t n, const struct pt_limits *lim,
		    struct pt_error *err)
{
	struct pt_pickle *pk = (struct pt_pickle *)1;
	int rc;

	pt_error_clear(err);
	rc = pt_pickle_load(&pk, p, n, NULL, lim, err);
	assert_null(pk);
	return rc;
}

static void test_bad_input(void **state)
{
	struct pt_error err;
	struct pt_buf dis;
	size_t i;
	int rc;

	(void)state;
	for (i = 0; i < sizeof(bads) / sizeof(bads[0]); i++) {
		rc = load_err(bads[i].p, bads[i].n, NULL, &err);
		if (rc != bads[i].code || !strstr(err.msg, bads[i].msg) ||
		    strncmp(err.msg, "pickle: ", 8) != 0)
			fail_msg("bad %zu: got %d '%s', want %d '%s'", i, rc,
				 err.msg, bads[i].code, bads[i].msg);
		assert_int_equal(err.code, rc);
		/* the disassembler never fails either */
		pt_buf_init(&dis);
		pt_pickle_disasm(bads[i].p, bads[i].n, &dis, 4096);
		pt_buf_free(&dis);
	}
}

/* A string literal and its length (it may hold NUL bytes). */
#define L(lit) lit, sizeof(lit) - 1

/* @n copies of @unit after @head and before @tail, in a malloc'd buffer. */
static uint8_t *repeat(const char *head, size_t h, const char *unit,
		       size_t u, size_t n, const char *tail, size_t t,
		       size_t *len)
{
	uint8_t *p = malloc(h + u * n + t);
	size_t i;

	assert_non_null(p);
	memcpy(p, head, h);
	for (i = 0; i < n; i++)
		memcpy(p + h + i * u, unit, u);
	memcpy(p + h + u * n, tail, t);
	*len = h + u * n + t;
	return p;
}

static void expect_limit(const char *head, size_t h, const char *unit,
			 size_t u, size_t n, const char *tail, size_t t,
			 const struct pt_limits *lim, int code,
			 const char *msg)
{
	struct pt_error err;
	size_t len;
	uint8_t *p = repeat(head, h, unit, u, n, tail, t, &len);
	int rc = load_err(p, len, lim, &err);

	if (rc != code || !strstr(err.msg, msg))
		fail_msg("got %d '%s', want %d '%s'", rc, err.msg, code, msg);
	free(p);
}

static void test_limits(void **state)
{
	struct pt_limits lim;
	struct pt_pickle *pk = NULL;
	struct pt_error err;
	size_t len;
	uint8_t *p;

	(void)state;
	pt_limits_default(&lim);
	lim.max_depth = 10;
	expect_limit(L(""), L("("), 11, L("N."), &lim, -EFBIG,
		     "MARK at offset 10: more than 10 nested MARKs");
	/* 10 marks are fine */
	p = repeat(L(""), L("("), 10, L("N."), &len);
	pt_error_clear(&err);
	assert_int_equal(pt_pickle_load(&pk, p, len, NULL, &lim, &err), 0);
	pt_pickle_free(pk);
	free(p);

	pt_limits_default(&lim);
	lim.max_values = 5;
	/* (None, bools and small ints are shared, so lists count here) */
	expect_limit(L(""), L("]"), 6, L("."), &lim, -EFBIG,
		     "EMPTY_LIST at offset 5: value limit of 5 reached");
	/* the stack is capped by max_values too (DUP creates no value) */
	expect_limit(L("N"), L("2"), 10, L("."), &lim, -EFBIG,
		     "stack deeper than 5");

	pt_limits_default(&lim);
	lim.max_memory = 1 << 20;
	expect_limit(L("("), L("N"), 100000, L("t."), &lim, -EFBIG,
		     "memory limit of 1048576 bytes reached");
	/* the big argument of one op: 4000 chars of UNICODE */
	lim.max_memory = 4096;
	expect_limit(L("V"), L("a"), 4000, L("\n."), &lim, -EFBIG,
		     "UNICODE at offset 0: memory limit of 4096 bytes reached");

	pt_limits_default(&lim);
	lim.max_memo = 100;
	expect_limit(L("Nr\xff\xff\xff\x7f"), L(""), 0, L("."), &lim, -EFBIG,
		     "LONG_BINPUT at offset 1: memo index 2147483647 past the limit of 100");
	expect_limit(L("N"), L("\x94"), 101, L("."), &lim, -EFBIG,
		     "MEMOIZE at offset 101: memo index 100 past the limit");

	pt_limits_default(&lim);
	lim.max_pickle_bytes = 100;
	expect_limit(L(""), L("N0"), 60, L("N."), &lim, -EFBIG,
		     "longer than the limit of 100 bytes");

	/* CPython's 4300-digit cap on int() */
	expect_limit(L("I"), L("9"), 4301, L("\n."), NULL, -EFBIG,
		     "INT at offset 0: integer of more than 4300 digits");
}

/* Hostile but valid: huge fan-out of references must stay linear. */
static void test_hostile_linear(void **state)
{
	struct pt_pickle *pk;
	struct pt_value *l;
	size_t len;
	uint8_t *p;

	(void)state;
	/* l = []; 2,000,000 DUPs of l appended into l at once: a list
	 * holding itself 2e6 times, made from 2 MB of input */
	p = repeat(L("]q\x00("), L("h\x00"), 1000000, L("e."), &len);
	pk = load_ok(p, len);
	l = pt_pickle_root(pk);
	assert_int_equal(l->u.seq.n, 1000000);
	assert_ptr_equal(l->u.seq.v[999999], l);
	pt_pickle_free(pk);
	free(p);
	/* 1,000,000 single APPENDs (amortized growth) */
	p = repeat(L("]"), L("2a"), 1000000, L("."), &len);
	pk = load_ok(p, len);
	assert_int_equal(pt_pickle_root(pk)->u.seq.n, 1000000);
	assert_int_equal(pt_pickle_count(pk), 1);
	pt_pickle_free(pk);
	free(p);
	/* deep nesting without marks: 100,000 TUPLE1 */
	p = repeat(L("N"), L("\x85"), 100000, L("."), &len);
	pk = load_ok(p, len);
	assert_int_equal(pt_pickle_count(pk), 100001);
	pt_pickle_free(pk);
	free(p);
	/* sparse memo: indices far apart cost one page each */
	p = repeat(L("N"), L("r\x00\x00\x00\x01r\x00\x00\x00\x02"), 1,
		   L("r\x00\x00\x00\x03j\x00\x00\x00\x02."), &len);
	pk = load_ok(p, len);
	pt_pickle_free(pk);
	free(p);
}

/* Legacy torch.save: several pickles back to back. */
static void test_multi(void **state)
{
	static const uint8_t p[] =
		"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19."
		"\x80\x02M\xe9\x03." "\x80\x02}q\x00.";
	struct pt_pickle *pk = NULL;
	struct pt_error err;
	size_t used, off = 0;
	struct pt_value *v;

	(void)state;
	pt_error_clear(&err);
	assert_int_equal(pt_pickle_load(&pk, p, sizeof(p) - 1, &used, NULL,
					 &err), 0);
	assert_int_equal(used, 15);
	v = pt_pickle_root(pk);
	assert_int_equal(v->kind, PT_V_BIGINT);
	assert_memory_equal(v->u.s.p,
			    "\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19", 10);
	pt_pickle_free(pk);
	off += used;
	assert_int_equal(pt_pickle_load(&pk, p + off, sizeof(p) - 1 - off,
					 &used, NULL, &err), 0);
	assert_int_equal(used, 6);
	assert_int_equal(pt_pickle_root(pk)->u.i, 1001);
	pt_pickle_free(pk);
	off += used;
	assert_int_equal(pt_pickle_load(&pk, p + off, sizeof(p) - 1 - off,
					 &used, NULL, &err), 0);
	assert_int_equal(off + used, sizeof(p) - 1);
	assert_int_equal(pt_pickle_root(pk)->kind, PT_V_DICT);
	pt_pickle_free(pk);
}

static void test_alloc(void **state)
{
	struct pt_pickle *pk = load_ok((const uint8_t *)"N.", 2);
	uint8_t *a, *b;

	(void)state;
	a = pt_pickle_alloc(pk, 10);
	b = pt_pickle_alloc(pk, 1 << 20);
	assert_non_null(a);
	assert_non_null(b);
	assert_int_equal(a[9], 0);
	memset(b, 1, 1 << 20);
	assert_null(pt_pickle_alloc(pk, (size_t)4 << 30));
	pt_pickle_free(pk);
	pt_pickle_free(NULL);
	assert_null(pt_pickle_root(NULL));
	assert_int_equal(pt_pickle_count(NULL), 0);
}

/* ---- disassembler ----------------------------------------------------- */

static void test_disasm(void **state)
{
	static const char want[] =
		"     0: PROTO            2\n"
		"     2: GLOBAL           'collections OrderedDict'\n"
		"    27: BINPUT           0\n"
		"    29: EMPTY_TUPLE\n"
		"    30: REDUCE\n"
		"    31: BINPUT           1\n"
		"    33: MARK\n"
		"    34:   BINUNICODE       'a'\n"
		"    40:   BINPUT           2\n"
		"    42:   BININT1          1\n"
		"    44:   BINUNICODE       'b'\n"
		"    50:   BINPUT           3\n"
		"    52:   BININT1          2\n"
		"    54: SETITEMS\n"
		"    55: STOP\n";
	static const uint8_t bad[] = "\x80\x02]K\x01X\x05\x00\x00\x00" "ab";
	struct pt_buf b;

	(void)state;
	pt_buf_init(&b);
	pt_pickle_disasm(p2_od, sizeof(p2_od), &b, 1 << 20);
	assert_string_equal(b.p, want);
	pt_buf_free(&b);

	pt_pickle_disasm(bad, sizeof(bad) - 1, &b, 1 << 20);
	assert_non_null(strstr(b.p, "     3: BININT1          1\n"));
	assert_non_null(strstr(b.p,
		"error at offset 5: BINUNICODE: length 5 past end of input (2 bytes left)\n"));
	pt_buf_free(&b);

	/* capped output ends in "..." */
	pt_pickle_disasm(p2_od, sizeof(p2_od), &b, 100);
	assert_true(b.len <= 100);
	assert_non_null(strstr(b.p, "...\n"));
	pt_buf_free(&b);

	/* strings are escaped and truncated; bytes after STOP are noted */
	pt_pickle_disasm(p3_bytes, sizeof(p3_bytes), &b, 1 << 20);
	assert_non_null(strstr(b.p, "SHORT_BINBYTES   b'ab'\n"));
	assert_non_null(strstr(b.p, "xxx...' (300 bytes)\n"));
	pt_buf_free(&b);
	pt_pickle_disasm((const uint8_t *)"U\x02\n\xff.N.", 7, &b, 1 << 20);
	assert_non_null(strstr(b.p, "SHORT_BINSTRING  '\\n\\xff'\n"));
	assert_non_null(strstr(b.p, "(2 bytes after STOP)\n"));
	pt_buf_free(&b);
}

static bool always(void *ctx)
{
	(void)ctx;
	return true;
}

/* A reader that went away ends a long disassembly with -EINTR after a
 * part, not at the end: 100,000 NONEs, the check looked at every 4096. */
static void test_disasm_cancelled(void **state)
{
	size_t n = 100000, i;
	uint8_t *p = malloc(n + 1);
	struct pt_cancel c;
	struct pt_buf b;

	(void)state;
	assert_non_null(p);
	for (i = 0; i < n; i++)
		p[i] = 'N';
	p[n] = '.';
	pt_buf_init(&b);
	assert_int_equal(pt_pickle_disasm(p, n + 1, &b, 1u << 30), 0);
	assert_non_null(strstr(b.p, "STOP\n"));
	pt_buf_free(&b);
	pt_cancel_push(&c, always, NULL);
	assert_int_equal(pt_pickle_disasm(p, n + 1, &b, 1u << 30), -EINTR);
	pt_cancel_pop(&c);
	assert_null(strstr(b.p, "STOP\n"));
	assert_true(b.len < 4096 * 30);
	pt_buf_free(&b);
	free(p);
}

/* ---- files from $PTFS_SHARED ------------------------------------------ */

static int n_files_loaded;

static int try_load(const uint8_t *p, size_t n, size_t *used,
		    struct pt_error *err)
{
	struct pt_pickle *pk = NULL;
	struct pt_buf dis;
	int rc;

	pt_error_clear(err);
	rc = pt_pickle_load(&pk, p, n, used, NULL, err);
	if (rc == 0) {
		assert_non_null(pt_pickle_root(pk));
		assert_true(*used <= n);
	} else {
		assert_true(rc == -EBADMSG || rc == -ENOTSUP || rc == -EFBIG);
		assert_true(strncmp(err->msg, "pickle: ", 8) == 0);
	}
	pt_pickle_free(pk);
	pt_buf_init(&dis);
	pt_pickle_disasm(p, n, &dis, 1 << 16);
	assert_false(dis.oom);
	pt_buf_free(&dis);
	return rc;
}

/* Every stored ".pkl" member of a zip, found by its local header. */
static void try_zip(const char *path, const uint8_t *p, size_t n, bool good)
{
	struct pt_error err;
	size_t i, used;

	for (i = 0; i + 30 <= n; i++) {
		uint32_t csize;
		uint16_t method, nlen, elen;

		if (memcmp(p + i, "PK\x03\x04", 4) != 0)
			continue;
		method = (uint16_t)(p[i + 8] | p[i + 9] << 8);
		csize = (uint32_t)p[i + 18] | (uint32_t)p[i + 19] << 8 |
			(uint32_t)p[i + 20] << 16 | (uint32_t)p[i + 21] << 24;
		nlen = (uint16_t)(p[i + 26] | p[i + 27] << 8);
		elen = (uint16_t)(p[i + 28] | p[i + 29] << 8);
		if (method != 0 || csize == 0 || csize == UINT32_MAX ||
		    nlen < 4 || 30 + (size_t)nlen + elen + csize > n - i ||
		    memcmp(p + i + 30 + nlen - 4, ".pkl", 4) != 0)
			continue;
		if (try_load(p + i + 30 + nlen + elen, csize, &used, &err) &&
		    good)
			fail_msg("%s: %.*s: %s", path, (int)nlen, p + i + 30,
				 err.msg);
		n_files_loaded++;
	}
}

/* A raw pickle stream; legacy torch files are five pickles in a row. */
static void try_stream(const char *path, const uint8_t *p, size_t n,
		       bool good)
{
	static const uint8_t magic[] = "\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9";
	struct pt_error err;
	size_t used = 0, off = 0;
	int i, rc;

	for (i = 0; i < 5; i++) {
		rc = try_load(p + off, n - off, &used, &err);
		if (rc) {
			/* only legacy torch files (magic first) must load */
			if (good && i > 0 && n > 9 && !memcmp(p, magic, 9))
				fail_msg("%s: pickle %d: %s", path, i, err.msg);
			break;
		}
		n_files_loaded++;
		off += used;
	}
}

static void try_file(const char *path, bool good)
{
	struct stat st;
	uint8_t *p;
	FILE *f;

	if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) ||
	    st.st_size > 64 << 20 || st.st_size == 0)
		return;
	f = fopen(path, "rb");
	assert_non_null(f);
	p = malloc((size_t)st.st_size);
	assert_non_null(p);
	assert_int_equal(fread(p, 1, (size_t)st.st_size, f), st.st_size);
	fclose(f);
	if (st.st_size > 4 && memcmp(p, "PK\x03\x04", 4) == 0)
		try_zip(path, p, (size_t)st.st_size, good);
	else
		try_stream(path, p, (size_t)st.st_size, good);
	free(p);
}

static void try_dir(const char *dir, bool good)
{
	struct dirent *e;
	char path[4096];
	DIR *d = opendir(dir);

	if (!d)
		return;
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		try_file(path, good);
	}
	closedir(d);
}

static void test_fixtures(void **state)
{
	const char *shared = ptfs_shared_dir();
	char real[4200], sub[4600];
	struct dirent *e;
	DIR *d;

	(void)state;
	snprintf(real, sizeof(real), "%s/fixtures/real", shared);
	d = opendir(real);
	if (!d)
		PTFS_SKIP("PTFS_REQUIRE_FIXTURES", "no fixture corpus (%s)", real);
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(sub, sizeof(sub), "%s/%s", real, e->d_name);
		try_dir(sub, true);
		snprintf(sub, sizeof(sub), "%s/%s/malicious", real, e->d_name);
		try_dir(sub, false);
	}
	closedir(d);
	assert_true(n_files_loaded > 50);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_opcodes),
		cmocka_unit_test(test_memo_shared),
		cmocka_unit_test(test_cycle),
		cmocka_unit_test(test_ordered_dict),
		cmocka_unit_test(test_build_newobj),
		cmocka_unit_test(test_persid),
		cmocka_unit_test(test_numbers),
		cmocka_unit_test(test_strings),
		cmocka_unit_test(test_bad_input),
		cmocka_unit_test(test_limits),
		cmocka_unit_test(test_hostile_linear),
		cmocka_unit_test(test_multi),
		cmocka_unit_test(test_alloc),
		cmocka_unit_test(test_disasm),
		cmocka_unit_test(test_disasm_cancelled),
		cmocka_unit_test(test_fixtures),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
