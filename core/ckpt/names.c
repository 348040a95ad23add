/* SPDX-License-Identifier: MIT */
/* names.c -- LAYOUT.md name rules: dict keys as text, text as file names. */
#include "ckpt/names.h"

#include <libdeflate.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void class_text(struct pt_buf *out, const struct pt_value *v)
{
	const struct pt_value *c = NULL;

	if (v->kind == PT_V_CALL || v->kind == PT_V_OBJ)
		c = v->u.call.callable;
	if (c && c->kind == PT_V_GLOBAL) {
		pt_buf_printf(out, "<%s.%s>", c->u.global.module,
			      c->u.global.name);
		return;
	}
	switch (v->kind) {
	case PT_V_LIST:
		pt_buf_puts(out, "<builtins.list>");
		break;
	case PT_V_DICT:
		pt_buf_puts(out, "<builtins.dict>");
		break;
	case PT_V_SET:
		pt_buf_puts(out, "<builtins.set>");
		break;
	case PT_V_FROZENSET:
		pt_buf_puts(out, "<builtins.frozenset>");
		break;
	case PT_V_BYTEARRAY:
		pt_buf_puts(out, "<builtins.bytearray>");
		break;
	case PT_V_GLOBAL:
		pt_buf_puts(out, "<builtins.type>");
		break;
	default:
		pt_buf_puts(out, "<builtins.object>");
		break;
	}
}

/* repr of a tuple element; tuples nest, so depth is capped (no recursion
 * over untrusted data beyond a small, fixed bound) */
static void key_repr(struct pt_buf *out, const struct pt_value *v, int depth)
{
	size_t i;

	switch (v->kind) {
	case PT_V_STR:
		pt_repr_str(out, v->u.s.p, v->u.s.len);
		return;
	case PT_V_BYTES:
		pt_repr_bytes(out, v->u.s.p, v->u.s.len);
		return;
	case PT_V_TUPLE:
		if (depth > 8) {
			pt_buf_puts(out, "(...)");
			return;
		}
		pt_buf_putc(out, '(');
		for (i = 0; i < v->u.seq.n; i++) {
			if (i)
				pt_buf_puts(out, ", ");
			key_repr(out, v->u.seq.v[i], depth + 1);
		}
		if (v->u.seq.n == 1)
			pt_buf_putc(out, ',');
		pt_buf_putc(out, ')');
		return;
	default:
		pt_key_text(out, v);
		return;
	}
}

void pt_key_text(struct pt_buf *out, const struct pt_value *key)
{
	switch (key->kind) {
	case PT_V_STR:
		pt_buf_add(out, key->u.s.p, key->u.s.len);
		break;
	case PT_V_INT:
		pt_buf_printf(out, "%lld", (long long)key->u.i);
		break;
	case PT_V_BIGINT:
		pt_bigint_decimal(out, key->u.s.p, key->u.s.len);
		break;
	case PT_V_BOOL:
		pt_buf_puts(out, key->u.b ? "True" : "False");
		break;
	case PT_V_NONE:
		pt_buf_puts(out, "None");
		break;
	case PT_V_FLOAT:
		pt_repr_float(out, key->u.f);
		break;
	case PT_V_BYTES:
	case PT_V_TUPLE:
		key_repr(out, key, 0);
		break;
	default:
		class_text(out, key);
		break;
	}
}

static size_t utf8_boundary(const uint8_t *p, size_t n)
{
	/* back up over continuation bytes so the cut does not split one */
	while (n > 0 && (p[n] & 0xc0) == 0x80)
		n--;
	return n;
}

void pt_name_encode(struct pt_buf *out, const uint8_t *raw, size_t n)
{
	struct pt_buf enc;
	size_t i, keep;
	uint32_t crc;

	if (n == 0) {
		pt_buf_putc(out, '%');
		return;
	}
	if (n == 1 && raw[0] == '.') {
		pt_buf_puts(out, "%2E");
		return;
	}
	if (n == 2 && raw[0] == '.' && raw[1] == '.') {
		pt_buf_puts(out, "%2E%2E");
		return;
	}
	for (i = 0; i < n && raw[i] != '/' && raw[i] != '%' && raw[i] != '\0'; i++)
		;
	if (i == n && n <= PT_NAME_MAX) {
		/* the usual name: nothing to escape, nothing to cut */
		pt_buf_add(out, raw, n);
		return;
	}
	pt_buf_init(&enc);
	for (i = 0; i < n; i++) {
		size_t run = i;

		while (run < n && raw[run] != '/' && raw[run] != '%' && raw[run] != '\0')
			run++;
		pt_buf_add(&enc, raw + i, run - i);
		if (run == n)
			break;
		pt_buf_puts(&enc, raw[run] == '/' ? "%2F" : raw[run] == '%' ? "%25" : "%00");
		i = run;
	}
	if (enc.oom) {
		out->oom = true;
		goto out;
	}
	if (enc.len <= PT_NAME_MAX) {
		pt_buf_add(out, enc.p, enc.len);
		goto out;
	}
	crc = (uint32_t)libdeflate_crc32(0, enc.p, enc.len);
	keep = utf8_boundary((const uint8_t *)enc.p, PT_NAME_HEAD);
	pt_buf_add(out, enc.p, keep);
	pt_buf_printf(out, "~%08x", crc);
out:
	pt_buf_free(&enc);
}

void pt_name_decode(struct pt_buf *out, const char *name)
{
	static const char *const esc[] = { "%2F", "%25", "%00" };
	static const char val[] = { '/', '%', '\0' };
	int k;

	if (strcmp(name, "%") == 0)
		return;
	if (strcmp(name, "%2E") == 0 || strcmp(name, "%2E%2E") == 0) {
		pt_buf_add(out, "..", strlen(name) / 3);
		return;
	}
	while (*name) {
		for (k = 0; k < 3; k++)
			if (strncmp(name, esc[k], 3) == 0)
				break;
		if (k < 3) {
			pt_buf_putc(out, val[k]);
			name += 3;
		} else {
			pt_buf_putc(out, *name++);
		}
	}
}
